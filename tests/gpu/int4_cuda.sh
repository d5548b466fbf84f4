#!/bin/bash
# [int4] INT4 weights on one GPU. Exit 77 (skip) where there is no usable GPU.
#  1. op parity of matmul_w4 (cpu twin vs kernels/w4a16.cu) is in tests/gpu/test_op_parity;
#  2. the INT4 fixtures (AWQ, GPTQ act-order, compressed-tensors) on cuda vs HF on the dequantised
#     weights (test_fixtures' bf16 tolerances: no bf16_err.json for them, the generic tolerance);
#  3. --quant int4 accuracy on the demo model on cuda (bounds of tests/integration/int4.sh, loosened
#     for bf16 activations);
#  4. int4 decode replayed as CUDA graphs gives the eager run's tokens.
. "$top_srcdir/tests/integration/lib.sh"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
[ "$(sits_gpu_count)" -ge 1 ] || { echo "SKIP: no GPU"; exit 77; }
command -v xz > /dev/null || { echo "SKIP: xz is needed to unpack the int4 fixtures"; exit 77; }
for f in awq gptq ct; do
  cp -r "$FIX/qwen3_tied_$f" "$tmp/$f" && xz -d "$tmp/$f"/*.xz
  SITS_TEST_DEVICE=cuda SITS_LOG_LEVEL=info "$top_builddir/tests/integration/test_fixtures" "$tmp/$f" > "$tmp/fx" 2>&1 \
    && grep -q "8 int4 linears" "$tmp/fx" && ok "qwen3_tied_$f on cuda (W4A16 kernel) = HF" || { bad "qwen3_tied_$f on cuda"; tail -20 "$tmp/fx"; }
done
ACC="$top_builddir/bench/sits-fp8-accuracy"
if "$ACC" --model "$top_srcdir/models/demo" --device cuda --policies "bf16;int4;ffn=int4;ffn=int4,attn=fp8" --min-top1 0.78 \
   --max-kl 0.08 > "$tmp/acc" 2>&1; then ok "cuda accuracy demo int4"; else bad "cuda accuracy demo int4"; fi
sed -n '/^quant/,/^bounds/p' "$tmp/acc"
p="1,17,33,49,65,81,97"
"$SITS" --model "$top_srcdir/models/demo" --device cuda --quant int4 --prompt-ids "$p" --batch 4 --max-tokens 24 --temperature 0 > "$tmp/g" 2> "$tmp/g.err"
"$SITS" --model "$top_srcdir/models/demo" --device cuda --quant int4 --prompt-ids "$p" --batch 4 --max-tokens 24 --temperature 0 \
  --no-cuda-graphs > "$tmp/e" 2> "$tmp/e.err"
if [ -s "$tmp/g" ] && cmp -s "$tmp/g" "$tmp/e"; then ok "int4 decode: cuda graphs = eager"; else bad "int4 graphs vs eager"; cat "$tmp/g" "$tmp/e" "$tmp/g.err" "$tmp/e.err" | tail -20; fi
finish
