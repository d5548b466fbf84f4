#!/bin/bash
# [memory plan] The 8B shape (bench/configs/llama3-8b, random weights) served on one GPU at
# --max-num-seqs 1024, bf16 and --quant fp8 (issue 20). Exit 77 (skip) without a usable GPU.
#   1. each starts, logs its memory plan (one "memory plan:" line per item, the KV cache last), serves
#      a burst of MP_BURST (1024) completions at once (every one 200, finish_reason "length", all its
#      tokens), and /metrics shows sits_device_allocations_after_start_total 0 afterwards (no cudaMalloc
#      in the step path, graph replays included); SIGTERM then exits 0;
#   2. a configuration that cannot fit (--gpu-memory-utilization 0.12: less than the 8B weights) is
#      refused before the weights load: the "does not fit" line with the numbers, no weights line, a
#      non-zero exit within MP_REFUSE_S seconds;
#   3. the largest --max-num-seqs of MP_SCAN (default "2048 4096 8192") that still starts, with its KV
#      blocks (printed as "memory plan: largest ..." for tests/RELIABILITY.md; not a pass/fail item).
# The vocabulary stays 128256 (the logits buffers are the 8B's): the byte-level fixture tokenizer is
# extended with filler tokens up to that size so every sampled id detokenizes.
. "$top_srcdir/tests/integration/lib.sh"
PY=${PYTHON:-python3}
n_gpu=$(sits_gpu_count)
[ "${n_gpu:-0}" -ge 1 ] || { echo "SKIP: memory_plan_cuda needs a GPU (${n_gpu:-0} usable)"; exit 77; }
command -v "$PY" >/dev/null || { echo "SKIP: python3 is needed"; exit 77; }
CL="$top_srcdir/tests/integration/serve_client.py"
BURST=${MP_BURST:-1024}
SEQS=${MP_SEQS:-1024}
REFUSE_S=${MP_REFUSE_S:-60}
serve_tmp
mkdir -p "$tmp/m"
cp "$top_srcdir/bench/configs/llama3-8b/config.json" "$tmp/m/"
"$PY" - "$top_srcdir/tests/fixtures/tokenizers/bytelevel" "$tmp/m" 128256 <<'PYEOF' || { bad "tokenizer"; finish; }
import json, shutil, sys
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
t = json.load(open(src + "/tokenizer.json"))
v = t["model"]["vocab"]
used = set(v.values()) | {a["id"] for a in t.get("added_tokens", [])}
for i in range(n):
    if i not in used:
        v["<f%d>" % i] = i
json.dump(t, open(dst + "/tokenizer.json", "w"))
shutil.copy(src + "/tokenizer_config.json", dst + "/tokenizer_config.json")
PYEOF
# start FLAGS...: one rank on the GPU; sets srv, port (empty when it did not start) within 600 s
start() {
  "$SITS" --model "$tmp/m" --load-format dummy --device cuda --port 0 --log-level info "$@" > "$tmp/out" 2> "$tmp/err" &
  srv=$!
  port=
  for _ in $(seq 6000); do
    port=$(sed -n 's|^sits-dist: serving .* on http://127.0.0.1:\([0-9]*\) .*|\1|p' "$tmp/err" | head -1)
    [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null && return 0
    kill -0 $srv 2>/dev/null || { port=; return 1; }
    sleep 0.1
  done
  port=
  return 1
}
stop() { kill -TERM $srv 2>/dev/null; for _ in $(seq 600); do kill -0 $srv 2>/dev/null || break; sleep 0.1; done
  if kill -0 $srv 2>/dev/null; then kill -9 $srv; wait $srv; rc=999; else wait $srv; rc=$?; fi; srv=; }
metric() { curl -s "http://127.0.0.1:$port/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }
blocks() { sed -n 's/.*engine: \([0-9]*\) KV blocks of.*/\1/p' "$tmp/err" | head -1; }

for q in bf16 fp8; do
  flags="--max-num-seqs $SEQS --max-num-batched-tokens $((SEQS > 2048 ? SEQS : 2048))"
  [ $q = fp8 ] && flags="$flags --quant fp8"
  if ! start $flags; then bad "$q: --max-num-seqs $SEQS did not start"; tail -15 "$tmp/err"; stop; continue; fi
  n_plan=$(grep -c "memory plan:" "$tmp/err")
  grep -q "memory plan:   kv cache:" "$tmp/err" && [ "$n_plan" -ge 8 ] && ok "$q: memory plan logged ($n_plan lines)" \
    || bad "$q: no memory plan in the log"
  grep "memory plan" "$tmp/err" | sed 's/^.*INFO kv /  /'
  if r=$("$PY" "$CL" burst --port "$port" --n "$BURST" --prompt-len 64 --max-tokens 32 --vocab 128256); then ok "$q: burst of $BURST: $r"
  else bad "$q: burst of $BURST: $r"; fi
  a=$(metric sits_device_allocations_after_start_total); ab=$(metric sits_device_allocated_bytes_after_start_total)
  [ "$a" = 0 ] && ok "$q: no device allocation after start-up" || bad "$q: $a device allocations ($ab bytes) after start-up"
  echo "memory plan: $q --max-num-seqs $SEQS starts with $(blocks) KV blocks of 16 tokens"
  stop
  [ "$rc" = 0 ] && ok "$q: SIGTERM exit 0" || bad "$q: SIGTERM exit $rc"
done

# 2. refused before loading
t0=$(date +%s)
"$SITS" --model "$tmp/m" --load-format dummy --device cuda --port 0 --max-num-seqs "$SEQS" --max-num-batched-tokens 2048 \
  --gpu-memory-utilization 0.12 --log-level info > "$tmp/out" 2> "$tmp/err"
rc=$?; dt=$(( $(date +%s) - t0 ))
if [ $rc -ne 0 ] && grep -q "memory plan: the configuration does not fit" "$tmp/err" && ! grep -q "MiB of weights" "$tmp/err" && [ $dt -le "$REFUSE_S" ]; then
  ok "refused before loading in ${dt}s (exit $rc): $(grep -o 'does not fit.*' "$tmp/err" | head -1 | cut -c1-240)"
else bad "not refused as it should be (exit $rc, ${dt}s)"; tail -5 "$tmp/err"; fi

# 3. the largest --max-num-seqs that starts (recorded, not judged)
largest=$SEQS; largest_blocks=
for n in ${MP_SCAN:-2048 4096 8192}; do
  if start --max-num-seqs "$n" --max-num-batched-tokens "$n"; then largest=$n; largest_blocks=$(blocks); stop
  else grep -E "does not fit|out of memory|ERROR" "$tmp/err" | head -2; stop; break; fi
done
echo "memory plan: largest --max-num-seqs that starts (bf16, of $SEQS ${MP_SCAN:-2048 4096 8192}): $largest, ${largest_blocks:-see above} KV blocks"
finish
