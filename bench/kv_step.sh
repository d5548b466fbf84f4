#!/bin/sh
# kv_step.sh -- [fp8 kv] decode step time with bf16, int8 and fp8 (E4M3) KV caches, side by side, on
# one GPU: sits-bench-decode on the Llama-3-8B shape (dummy weights, bf16 weights, TP 1), KV filled by
# real prefill, for each KV dtype in turn; prints one table (ms/step median, tok/s, and the step's
# bandwidth floor) and writes one JSON per dtype. Not a test.
#
#   bench/kv_step.sh [BUILD_DIR] [OUT_DIR]      (env: BATCH=64,256 CONTEXT=2048 ITERS=20 DTYPES="bf16 int8 fp8" COMMIT=sha)
# BUILD_DIR defaults to ./build-gpu, OUT_DIR to the current directory.
b=${1:-build-gpu}
out=${2:-.}
src=$(cd "$(dirname "$0")/.." && pwd)
BATCH=${BATCH:-64,256}
CONTEXT=${CONTEXT:-2048}
ITERS=${ITERS:-20}
DTYPES=${DTYPES:-bf16 int8 fp8}
commit=${COMMIT:-$(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)}
for dt in $DTYPES; do
  echo "== --kv-cache-dtype $dt: sits-bench-decode --model bench/configs/llama3-8b --load-format dummy --device cuda" \
       "--batch $BATCH --context $CONTEXT --prefill 0 --iters $ITERS --warmup 3 --kv-cache-dtype $dt"
  "$b/bench/sits-bench-decode" --model "$src/bench/configs/llama3-8b" --load-format dummy --device cuda --batch "$BATCH" \
    --context "$CONTEXT" --prefill 0 --iters "$ITERS" --warmup 3 --kv-cache-dtype "$dt" --commit "$commit" \
    --json "$out/kv_step_$dt.json" > "$out/kv_step_$dt.txt" 2>&1 || { echo "$dt: failed"; tail -5 "$out/kv_step_$dt.txt"; }
  grep -E "^device|^weights" "$out/kv_step_$dt.txt"
done
echo
printf '%-6s %6s %8s %10s %10s %10s %8s\n' kv batch context ms_median tok/s floor_ms floor%
for dt in $DTYPES; do
  awk -v dt="$dt" '$1 == "decode" { printf "%-6s %6s %8s %10s %10s %10s %8s\n", dt, $2, $3, $4, $6, $7, $8 }' "$out/kv_step_$dt.txt"
done
