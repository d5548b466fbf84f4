#!/bin/bash
# Speculative decoding (n-gram drafter) end to end on the demo model (models/demo), CPU, TP 1 and TP 2:
# the same server without --speculative-config is the reference. With it, every token id and logprob
# is the same (greedy and seeded sampling) for copy prompts in a mixed batch (odd requests opt out with
# "speculative": false), prompts that extend earlier outputs (their blocks, computed under speculation,
# come from the prefix cache), max_tokens, stop ids and eos, stop strings and streaming; no KV block
# leaks; stops land
# inside accepted runs (the scheduler's debug log says so), drafts are accepted (/metrics), the trace
# file counts them, and an opted-out request drafts nothing.
# SPEC_DRAFTER=draft_model (tests/integration/spec_draft.sh): the same with the draft-model drafter, the
# demo model drafting for itself -- on greedy requests every draft must be accepted (the draft's
# one-position steps give the target's logits bit for bit) -- and a draft of another vocabulary refused.
. "$top_srcdir/tests/integration/lib.sh"
need_py_curl
serve_tmp
DEMO="$top_srcdir/models/demo"
[ -f "$DEMO/model.safetensors" ] || { echo "SKIP: models/demo is missing"; exit 77; }
W="$top_srcdir/tests/integration/spec_decode.py"
SPEC='{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 1}'
[ "$SPEC_DRAFTER" = draft_model ] && SPEC='{"method": "draft_model", "model": "'"$DEMO"'", "num_speculative_tokens": 4}'
stop() { kill -TERM $srv; wait $srv; srv=; }
metric() { "$PY" "$W" metric "$url" "$1"; }
for np in 1 2; do
  serve_np $np "$DEMO" --block-size 8 || finish
  "$PY" "$W" run "$url" "$tmp/off$np.json" || bad "tp $np: workload without speculation"
  [ "$(metric sits_spec_draft_tokens_total)" = 0 ] && ok "tp $np: no drafts without --speculative-config" || bad "tp $np: drafts while off"
  stop
  SITS_LOG_LEVEL=debug SITS_LOG_SUBSYS=sched serve_np $np "$DEMO" --block-size 8 --speculative-config "$SPEC" \
    --trace-file "$tmp/trace$np" || finish
  "$PY" "$W" run "$url" "$tmp/on$np.json" --opt-out-odd || bad "tp $np: workload with speculation"
  drafted=$(metric sits_spec_draft_tokens_total); accepted=$(metric sits_spec_accepted_tokens_total)
  rate=$(metric sits_spec_acceptance_rate)
  [ "${accepted:-0}" -gt 0 ] && ok "tp $np: $accepted of $drafted drafted tokens accepted (rate $rate)" || bad "tp $np: nothing accepted ($accepted of $drafted)"
  # rollback: no block still in use once all finished (the number cached depends on when cancelled
  # stop-string requests were seen, so it is not compared)
  used=$(metric sits_kv_blocks_used)
  [ "$used" = 0 ] && ok "tp $np: no KV block leaked" || bad "tp $np: $used KV blocks still in use"
  if [ "$SPEC_DRAFTER" = draft_model ]; then
    used=$(curl -s "$url/metrics" | awk '$1 == "sits_spec_draft_kv_blocks_used" { print $2 }')
    [ "$used" = 0 ] && ok "tp $np: no draft KV block leaked" || bad "tp $np: draft KV blocks still in use: '$used'"
  fi
  # an opted-out request alone drafts nothing
  curl -s "$url/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": "The list type is mutable. The list type is mutable. The list type", "max_tokens": 24, "temperature": 0, "speculative": false}' >/dev/null
  after=$(metric sits_spec_draft_tokens_total)
  [ "$after" = "$drafted" ] && ok "tp $np: \"speculative\": false drafts nothing" || bad "tp $np: opted-out request drafted ($drafted -> $after)"
  if [ "$SPEC_DRAFTER" = draft_model ]; then   # the target drafting for itself: greedy drafts all accepted
    a0=$(metric sits_spec_accepted_tokens_total)
    curl -s "$url/v1/completions" -H 'Content-Type: application/json' \
      -d '{"prompt": "The list type is mutable. The list type", "max_tokens": 32, "temperature": 0, "ignore_eos": true}' >/dev/null
    d1=$(metric sits_spec_draft_tokens_total); a1=$(metric sits_spec_accepted_tokens_total)
    [ $((d1 - after)) -gt 0 ] && [ $((d1 - after)) = $((a1 - a0)) ] && ok "tp $np: greedy self-drafts all accepted ($((a1 - a0)))" \
      || bad "tp $np: greedy self-drafts: $((a1 - a0)) of $((d1 - after)) accepted"
    after=$d1
  fi
  stop
  "$PY" "$W" compare "$tmp/off$np.json" "$tmp/on$np.json" && ok "tp $np: outputs identical with and without speculation" \
    || bad "tp $np: speculation changed the output"
  # the extension prompts found blocks of tokens generated under speculation in the prefix cache
  h=$("$PY" -c 'import json, sys; r = json.load(open(sys.argv[1]))
print(sum(e["usage"][2] > c["usage"][0] for c, e in zip(r["copy"], r["extend"])))' "$tmp/on$np.json")
  [ "$h" -gt 0 ] && ok "tp $np: $h extension prompt(s) reused generated blocks from the prefix cache" \
    || bad "tp $np: no extension prompt reused generated blocks"
  n=$(grep -c "inside an accepted run" "$tmp/err")
  [ "$n" -gt 0 ] && ok "tp $np: $n request(s) stopped inside an accepted run" || bad "tp $np: no stop inside an accepted run"
  t=$("$PY" -c 'import json, sys; print(sum(json.loads(l).get("spec_draft_tokens", 0) for l in open(sys.argv[1])))' "$tmp/trace$np")
  [ "$t" = "$after" ] && ok "tp $np: the trace file counts the $t drafts" || bad "tp $np: trace drafts $t, /metrics $after"
done
# a bad --speculative-config is refused at start
bad_spec='{"method": "eagle"}'
[ "$SPEC_DRAFTER" = draft_model ] && bad_spec='{"method": "draft_model", "model": "'"$FIX/llama3"'", "num_speculative_tokens": 2}'
$SITS_MPIRUN -np 1 "$SITS" --model "$DEMO" --port 0 --speculative-config "$bad_spec" > "$tmp/out" 2> "$tmp/err"
rc=$?
[ $rc -ne 0 ] && grep -q 'speculative-config' "$tmp/err" && ok "bad --speculative-config refused (exit $rc)" || { bad "bad --speculative-config: exit $rc"; cat "$tmp/err"; }
finish
