#!/bin/bash
# [sliding window] KV blocks that fall out of every layer's window go back to the pool (issue 24).
# Fixture tests/fixtures/models/mistral_swa (tests/ref/gen_swa_fixture.py): a random-weight Mistral,
# sliding_window 16 on both layers, HF transformers' greedy continuations of 150 and 120 tokens.
# The KV pool holds 16 blocks of 4 tokens (64 tokens) a rank, less than one sequence (5 + 150 and
# 40 + 120 tokens): the generations fit only because blocks older than the window are given back.
#   (a) the offline CLI (sched/generate.c) at tp 1 and 2: greedy tokens == HF;
#   (b) the server (scheduler) at tp 1 and 2, no offload tier (preemption by recompute): the two
#       prompts at once, then n = 2 (forks share the prompt's blocks and placeholders), then the long
#       prompt again (prefix cache: registered blocks the window gave back are evictable, never read
#       as placeholders): every token id == HF; /metrics counts the freed blocks and, once idle,
#       every block is free;
#   (c) the server at tp 2 with a host offload tier and ngram speculative decoding, 4 requests at
#       once: swaps (slots hold the blocks after the placeholders) and speculative rollbacks, every
#       token id == HF;
#   (d) KV moves: --dp 2 with a move every 3 steps, and --disaggregate 1:1: token ids == HF, moves
#       happened, none failed;
#   (e) the offline CLI with --pp 2: greedy tokens == HF.
. "$top_srcdir/tests/integration/lib.sh"
need_py_curl
serve_tmp
M=$FIX/mistral_swa
REF=$M/reference.json
BS=4
# a 4-token block of fp32 K and V: 2 layers x 2 KV heads x 8 x 4 tokens x 4 bytes x 2 = 1 KiB at tp 1
# (one KV head a rank at tp 2: 512 bytes); 16 blocks a rank
kv_mem() { echo $((16 * 1024 / $1)); }
longest=$("$PY" -c 'import json,sys; r=json.load(open(sys.argv[1])); print(max(len(p) + len(g) for p, g in zip(r["prompts"], r["greedy"])))' "$REF")
[ "$longest" -gt $((16 * BS)) ] && ok "the longest sequence ($longest tokens) exceeds the pool (16 blocks of $BS)" || bad "fixture too short"

# (a) offline CLI
for np in 1 2; do
  for i in 0 1; do
    ids=$(ref_row "$REF" prompts $i); want=$(ref_row "$REF" greedy $i); n=$(echo "$want" | tr ',' '\n' | wc -l)
    got=$(timeout 120 $SITS_MPIRUN -np $np "$SITS" --model "$M" --prompt-ids "$ids" --max-tokens "$n" --temperature 0 --ignore-eos \
          --block-size $BS --kv-cache-memory "$(kv_mem $np)" --max-num-batched-tokens 8 2> "$tmp/cli_err")
    [ "$got" = "$want" ] && ok "(a) cli tp $np prompt $i: $n greedy tokens == HF" || { bad "(a) cli tp $np prompt $i: '$got'"; tail -3 "$tmp/cli_err"; }
  done
done

# the server needs a tokenizer: the byte-level fixture's (the prompts go as token ids, the outputs
# come back as ids through logprobs' return_tokens_as_token_ids)
mkdir -p "$tmp/m"
cp "$M"/config.json "$M"/generation_config.json "$M"/model.safetensors "$tmp/m/"
cp "$top_srcdir/tests/fixtures/tokenizers/bytelevel/tokenizer.json" "$top_srcdir/tests/fixtures/tokenizers/bytelevel/tokenizer_config.json" "$tmp/m/"
metric() { curl -s "$url/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }
# check NAME SPEC...: concurrent requests, SPEC = prompt index:n; every choice's ids == HF's greedy
check() {
  local name=$1; shift
  "$PY" - "$url" "$REF" "$@" <<'PYEOF'
import json, sys, threading, urllib.request
url, ref = sys.argv[1], json.load(open(sys.argv[2]))
specs = [tuple(map(int, a.split(":"))) for a in sys.argv[3:]]
res = [None] * len(specs)
def run(k):
    i, n = specs[k]
    body = {"model": "m", "prompt": ref["prompts"][i], "max_tokens": len(ref["greedy"][i]), "temperature": 0, "n": n,
            "ignore_eos": True, "logprobs": 1, "return_tokens_as_token_ids": True}
    try:
        r = urllib.request.urlopen(urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(),
                                                          {"Content-Type": "application/json"}), timeout=300)
        res[k] = [[int(t.split(":")[1]) for t in c["logprobs"]["tokens"]] for c in json.load(r)["choices"]]
    except Exception as e:
        res[k] = "ERROR %r" % e
th = [threading.Thread(target=run, args=(k,)) for k in range(len(specs))]
[t.start() for t in th]; [t.join() for t in th]
bad = 0
for (i, n), got in zip(specs, res):
    want = ref["greedy"][i]
    if isinstance(got, str) or len(got) != n or any(g != want for g in got):
        bad += 1
        print("     prompt %d n %d: %s" % (i, n, got if isinstance(got, str) else [g[:12] for g in got]))
        for g in ([] if isinstance(got, str) else got):
            d = next((j for j, (a, b) in enumerate(zip(g, want)) if a != b), None)
            print("     first difference at token %s of %d" % (d, len(want)))
sys.exit(1 if bad else 0)
PYEOF
  local rc=$?
  [ $rc -eq 0 ] && ok "$name: every token id == HF" || bad "$name: token ids differ from HF"
}
idle_free() {
  for _ in $(seq 50); do [ "$(metric sits_num_requests_running)" = 0 ] && break; sleep 0.1; done
  local free used
  free=$(metric sits_kv_blocks_free); used=$(metric sits_kv_blocks_used)
  [ "$used" = 0 ] && ok "$1: afterwards all $free KV blocks free" || bad "$1: afterwards $used blocks in use ($free free)"
}
COMMON="--block-size $BS --max-num-batched-tokens 8 --max-num-seqs 4 --served-model-name m"

# (b) the server, no offload tier
for np in 1 2; do
  serve_np $np "$tmp/m" $COMMON --kv-cache-memory "$(kv_mem $np)" --kv-host-bytes 0 || finish
  total=$(metric sits_kv_blocks_free)
  [ "$total" = 16 ] && ok "(b) tp $np: a pool of $total blocks ($((total * BS)) tokens)" || bad "(b) tp $np: $total blocks, want 16"
  check "(b) tp $np: both prompts at once" 0:1 1:1
  check "(b) tp $np: n = 2" 1:2
  check "(b) tp $np: the long prompt again (prefix cache)" 1:1
  freed=$(metric sits_kv_sliding_window_freed_blocks_total)
  # each sequence of L tokens gives back at least (L - 16) / 4 - 1 blocks: 33 + 26 for the first pair
  [ "${freed:-0}" -ge 59 ] && ok "(b) tp $np: sits_kv_sliding_window_freed_blocks_total $freed" || bad "(b) tp $np: freed blocks ${freed:-none}"
  idle_free "(b) tp $np"
  stop_np "$tmp/m" || bad "(b) tp $np: the job did not stop cleanly"
done

# (c) tp 2 with a host offload tier and ngram speculation, 4 requests at once on the 16-block pool
SPEC='{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1}'
serve_np 2 "$tmp/m" $COMMON --kv-cache-memory "$(kv_mem 2)" --kv-host-bytes 1M --speculative-config "$SPEC" || finish
check "(c) tp 2, offload + speculation: 4 requests" 0:1 1:1 1:1 0:1
so=$(metric sits_kv_swapped_out_total); si=$(metric sits_kv_swapped_in_total); pre=$(metric sits_preemptions_total)
drafts=$(metric 'sits_spec_draft_tokens_total{drafter="ngram"}'); acc=$(metric 'sits_spec_accepted_tokens_total{drafter="ngram"}')
freed=$(metric sits_kv_sliding_window_freed_blocks_total)
echo "     (c): swapped out $so, in $si, preemptions $pre, drafted $drafts, accepted $acc, freed by the window $freed"
[ "${pre:-0}" -gt 0 ] && ok "(c) preempted $pre times (swapped out $so, in $si)" || bad "(c) no preemption: the pool did not run short"
[ "${drafts:-0}" -gt 0 ] && [ "${acc:-0}" -lt "$drafts" ] && ok "(c) $drafts tokens drafted, $acc accepted (rollbacks)" \
  || bad "(c) drafted ${drafts:-none}, accepted ${acc:-none}: no rollback exercised"
[ "${freed:-0}" -gt 0 ] && ok "(c) $freed blocks freed by the window" || bad "(c) no block freed"
idle_free "(c)"
stop_np "$tmp/m" || bad "(c): the job did not stop cleanly"

# (d) KV moves keep the placeholders: --dp 2 replicas moving a sequence every 3 steps, and
# --disaggregate 1:1 (every sequence prefilled on one rank -- its first blocks already given back --
# then moved to the decode rank); 16 blocks a replica
for mode in "--dp 2 --kv-migrate-every 3" "--disaggregate 1:1"; do
  serve_np 2 "$tmp/m" $COMMON --kv-cache-memory "$(kv_mem 1)" --kv-host-bytes 0 $mode || finish
  check "(d) $mode: 4 requests" 0:1 1:1 1:1 0:1
  moves=$(metric sits_kv_migrations_total); seqs=$(metric sits_kv_migrated_sequences_total); failed=$(metric sits_kv_migrations_failed_total)
  [ "${moves:-0}" -gt 0 ] && [ "${failed:-1}" = 0 ] && ok "(d) $mode: $moves moves of $seqs sequences, none failed" \
    || bad "(d) $mode: moves ${moves:-none}, failed ${failed:-none}"
  freed=$(metric sits_kv_sliding_window_freed_blocks_total)
  [ "${freed:-0}" -gt 0 ] && ok "(d) $mode: $freed blocks freed by the window" || bad "(d) $mode: no block freed"
  stop_np "$tmp/m" || bad "(d) $mode: the job did not stop cleanly"
done

# (e) pipeline stages: the offline CLI at --pp 2 (each stage's layers read the same tables)
ids=$(ref_row "$REF" prompts 1); want=$(ref_row "$REF" greedy 1); n=$(echo "$want" | tr ',' '\n' | wc -l)
got=$(timeout 120 $SITS_MPIRUN -np 2 "$SITS" --model "$M" --pp 2 --prompt-ids "$ids" --max-tokens "$n" --temperature 0 --ignore-eos \
      --block-size $BS --kv-cache-memory "$(kv_mem 2)" --max-num-batched-tokens 8 2> "$tmp/cli_err")
[ "$got" = "$want" ] && ok "(e) cli pp 2: $n greedy tokens == HF" || { bad "(e) cli pp 2: '$got'"; tail -3 "$tmp/cli_err"; }
finish
