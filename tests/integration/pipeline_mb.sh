#!/bin/bash
# Pipeline micro-batches on the CPU under mpirun (issue 11 item 2): with --pp-microbatches the
# running batch is split by sequences and the stages overlap on the micro-batches. Every layout
# (--pp 2 --pp-microbatches 2, --tp 2 --pp 2 --pp-microbatches 2, --pp 4 --pp-microbatches 4)
# gives HF's greedy tokens on the fixture model, seeded sampling equal to TP = 1, and -- in server
# mode -- answers a burst of different concurrent prompts exactly as a one-rank server. Each run
# must show that steps really ran as micro-batches (the engine's summary line at --log-level info);
# --pp-microbatches 1 turns them off and a negative count is refused.
. "$top_srcdir/tests/integration/lib.sh"
tmp=$(mktemp -d)
srv=
cleanup() { [ -n "$srv" ] && kill -9 "$srv" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
layouts=("2|--pp 2 --pp-microbatches 2" "4|--tp 2 --pp 2 --pp-microbatches 2" "4|--pp 4 --pp-microbatches 4")
# micro FILE: "steps micro-batches" from the engine's summary lines (the largest over the ranks), or empty
micro() { sed -n 's/.*engine: \([0-9]*\) steps ran as pipeline micro-batches (\([0-9]*\) micro-batches).*/\1 \2/p' "$1" | sort -n | tail -1; }

# offline: 3 copies of a prompt, greedy, each equal to HF's greedy row (prefill and decode steps split)
name=llama_small
for L in "${layouts[@]}"; do
  np=${L%%|*}; flags=${L#*|}
  for i in 0 2; do
    ids=$(ref_row "$FIX/$name/reference.json" prompts $i); want=$(ref_row "$FIX/$name/reference.json" greedy $i)
    got=$(timeout 120 $SITS_MPIRUN -np "$np" "$SITS" --model "$FIX/$name" $flags --prompt-ids "$ids" --batch 3 --max-tokens 16 \
          --temperature 0 --ignore-eos --log-level info 2> "$tmp/e")
    m=$(micro "$tmp/e")
    [ "$got" = "$(printf '%s\n%s\n%s' "$want" "$want" "$want")" ] && [ -n "$m" ] && [ "${m%% *}" -ge 16 ] \
      && ok "offline $flags (np $np), prompt $i: 3 sequences == HF greedy, $m (steps, micro-batches)" \
      || { bad "offline $flags prompt $i: '$got' want '$want' x3, micro '$m'"; tail -3 "$tmp/e"; }
  done
done
# seeded sampling (each copy has its own seed, so the 5 sequences differ): equal to TP = 1
args=(--model "$FIX/$name" --prompt-ids 5,6,7,8 --batch 5 --max-tokens 12 --temperature 0.8 --top-p 0.9 --seed 3 --ignore-eos)
ref=$("$SITS" "${args[@]}" 2>/dev/null)
[ "$(echo "$ref" | sort -u | wc -l)" -ge 3 ] || bad "seeded reference: the sequences do not differ: $ref"
for L in "${layouts[@]}"; do
  np=${L%%|*}; flags=${L#*|}
  got=$(timeout 120 $SITS_MPIRUN -np "$np" "$SITS" "${args[@]}" $flags --log-level info 2> "$tmp/e")
  m=$(micro "$tmp/e"); k=${flags##* }
  # 12 steps (1 prefill + 11 decode), each in min(k, 5) micro-batches
  [ -n "$ref" ] && [ "$got" = "$ref" ] && [ "$m" = "12 $((12 * (k < 5 ? k : 5)))" ] \
    && ok "offline seeded sampling, 5 sequences: $flags == tp 1 ($m)" || bad "seeded $flags: '$got' vs '$ref', micro '$m'"
done
# --pp-microbatches 1: today's whole-step pipeline; default: one micro-batch per stage
got=$(timeout 120 $SITS_MPIRUN -np 2 "$SITS" "${args[@]}" --pp 2 --pp-microbatches 1 --log-level info 2> "$tmp/e")
[ "$got" = "$ref" ] && [ -z "$(micro "$tmp/e")" ] && ok "--pp-microbatches 1: no micro-batches, same tokens" || bad "pp-microbatches 1: micro '$(micro "$tmp/e")'"
got=$(timeout 120 $SITS_MPIRUN -np 2 "$SITS" "${args[@]}" --pp 2 --log-level info 2> "$tmp/e")
[ "$got" = "$ref" ] && [ "$(micro "$tmp/e")" = "12 24" ] && ok "--pp 2 alone: 2 micro-batches a step by default" || bad "pp 2 default: micro '$(micro "$tmp/e")'"
# --pp-microbatch-min-tokens 3: the prefill step (20 tokens) splits, the decode steps (5) do not
got=$(timeout 120 $SITS_MPIRUN -np 2 "$SITS" "${args[@]}" --pp 2 --pp-microbatch-min-tokens 3 --log-level info 2> "$tmp/e")
[ "$got" = "$ref" ] && [ "$(micro "$tmp/e")" = "1 2" ] && ok "--pp-microbatch-min-tokens 3: only the prefill step split" || bad "min tokens: micro '$(micro "$tmp/e")'"
# a single sequence has no cut: whole steps
got=$(timeout 120 $SITS_MPIRUN -np 2 "$SITS" --model "$FIX/$name" --prompt-ids 5,6,7 --max-tokens 4 --pp 2 --log-level info 2> "$tmp/e")
[ -n "$got" ] && [ -z "$(micro "$tmp/e")" ] && ok "one sequence: no split" || bad "one sequence split: '$(micro "$tmp/e")'"
timeout 60 $SITS_MPIRUN -np 2 "$SITS" "${args[@]}" --pp 2 --pp-microbatches -1 > /dev/null 2> "$tmp/e"; rc=$?
[ $rc -eq 2 ] && grep -q "pp-microbatches -1" "$tmp/e" && ok "--pp-microbatches -1 refused" || bad "--pp-microbatches -1: rc $rc"

# kill -9 of the last stage while micro-batches are in flight (receives posted ahead, sends not
# waited for): the job ends with a message instead of hanging
mkdir -p "$tmp/big"
cat > "$tmp/big/config.json" <<'JSON'
{"model_type": "llama", "vocab_size": 3013, "hidden_size": 256, "intermediate_size": 1024, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 8192, "rms_norm_eps": 1e-5,
 "hidden_act": "silu", "bos_token_id": 3000, "eos_token_id": 3001}
JSON
$SITS_MPIRUN -np 2 "$SITS" --model "$tmp/big" --load-format dummy --pp 2 --prompt-ids 1,2,3 --batch 4 --max-tokens 8000 \
  --ignore-eos --temperature 0 > /dev/null 2> "$tmp/e" &
job=$!
for _ in $(seq 50); do pid1=$(rank_pid 1 "$tmp/big") && break; sleep 0.2; done
sleep 1
if [ -n "${pid1:-}" ]; then
  kill -9 "$pid1"
  for _ in $(seq 200); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
  if kill -0 $job 2>/dev/null; then bad "micro-batched pipeline still running 20 s after kill -9"; kill -9 $job
  else wait $job; rc=$?; [ $rc -ne 0 ] && grep -qiE "signal 9|killed|exited" "$tmp/e" && ok "kill -9 of stage 1 mid micro-batches: job ended ($rc) with a message" || bad "kill -9 stage 1: rc $rc"; fi
else bad "stage-1 rank not found"; kill -9 $job; fi

# server: a burst of 16 different prompts (8 in flight: prefill chunks and decodes of several
# sequences per step) answered exactly as by a one-rank server
command -v curl >/dev/null && command -v "${PYTHON:-python3}" >/dev/null || finish
serve_setup "$tmp/m"
sed -i 's/"num_hidden_layers": 2/"num_hidden_layers": 4/' "$tmp/m/config.json"   # a layer for each of 4 stages
burst() { "${PYTHON:-python3}" - "$url" <<'PYEOF'
import json, sys, urllib.request
from concurrent.futures import ThreadPoolExecutor
def go(i):
    b = {"model": "m", "prompt": ("story %d, " % i) * (1 + i % 5), "max_tokens": 10, "temperature": 0}
    r = urllib.request.urlopen(urllib.request.Request(sys.argv[1] + "/v1/completions", json.dumps(b).encode(),
                                                      {"Content-Type": "application/json"}), timeout=120)
    return json.load(r)["choices"][0]["text"]
with ThreadPoolExecutor(8) as ex:
    print(json.dumps(list(ex.map(go, range(16)))))
PYEOF
}
# start NP FLAGS...: sits-dist serving $tmp/m on a free port (NP 1: without mpirun)
start() {
  local np=$1; shift
  if [ "$np" = 1 ]; then "$SITS" --model "$tmp/m" --load-format dummy --port 0 "$@" > "$tmp/out" 2> "$tmp/err" &
  else $SITS_MPIRUN -np "$np" "$SITS" --model "$tmp/m" --load-format dummy --port 0 "$@" > "$tmp/out" 2> "$tmp/err" & fi
  srv=$!
  for _ in $(seq 300); do
    port=$(sed -n 's|^sits-dist: serving .* on http://127.0.0.1:\([0-9]*\) .*|\1|p' "$tmp/err" | head -1)
    [ -n "$port" ] && url=http://127.0.0.1:$port && curl -sf "$url/health" >/dev/null && return 0
    kill -0 $srv 2>/dev/null || break
    sleep 0.1
  done
  bad "server (np $np $*) did not start"; tail -5 "$tmp/err"; return 1
}
# stop NP: SIGTERM to every rank; returns the job's exit status
stop() {
  local np=$1 r p rc
  if [ "$np" = 1 ]; then kill -TERM "$srv"; else for r in $(seq 0 $((np - 1))); do p=$(rank_pid $r "$tmp/m") && kill -TERM "$p" 2>/dev/null; done; fi
  wait $srv; rc=$?; srv=; return $rc
}
start 1 || finish
one=$(burst); stop 1
[ "$(echo "$one" | tr ',' '\n' | sort -u | wc -l)" -ge 8 ] || bad "one-rank burst: too few distinct answers: $one"
for L in "${layouts[@]}"; do
  np=${L%%|*}; flags=${L#*|}
  start "$np" $flags --log-level info || continue
  got=$(burst)
  stop "$np"; rc=$?
  m=$(micro "$tmp/err")
  [ -n "$one" ] && [ "$got" = "$one" ] && [ $rc -eq 0 ] && [ -n "$m" ] \
    && ok "server $flags (np $np): 16 concurrent prompts == one rank, $m (steps, micro-batches)" \
    || { bad "server $flags: rc $rc micro '$m': $got vs $one"; tail -3 "$tmp/err"; }
done
finish
