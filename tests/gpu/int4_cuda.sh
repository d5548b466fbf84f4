#!/bin/bash
# [int4] INT4 weights on one GPU. Exit 77 (skip) where there is no usable GPU.
#  1. op parity of matmul_w4 (cpu twin vs kernels/w4a16.cu) is in tests/gpu/test_op_parity;
#  2. the INT4 fixtures (AWQ, GPTQ act-order, compressed-tensors) on cuda vs HF on the dequantised
#     weights (test_fixtures' bf16 tolerances: no bf16_err.json for them, the generic tolerance);
#  3. --quant int4 accuracy on the demo model on cuda (bounds of tests/integration/int4.sh, loosened
#     for bf16 activations);
#  4. int4 decode replayed as CUDA graphs gives the eager run's tokens;
#  5. [moe int4] with torch: an AWQ Qwen3-MoE (tests/ref/gen_int4_fixtures.py --case qwen3_moe awq 8, INT4 experts run
#     as stored) on cuda gives the first tokens of the plain checkpoint of its dequantisation on cuda (bf16 noise
#     may flip a later near tie: the first 4 of 12 required), one sequence and a batch of 24 copies (up to 24 rows
#     an expert; the fixture's 32-wide rows take the W4A16 kernels, not the tensor-core GEMV of op parity).
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
if python3 -c "import torch, safetensors, transformers" 2> /dev/null; then
  python3 "$top_srcdir/tests/ref/gen_int4_fixtures.py" --case qwen3_moe awq 8 "$tmp/moe" --deq "$tmp/moe-deq" > /dev/null 2>&1 \
    || bad "gen_int4_fixtures.py --case qwen3_moe failed"
  p=$(ref_row "$FIX/qwen3_moe/reference.json" prompts 1)
  "$SITS" --model "$tmp/moe-deq" --device cuda --prompt-ids "$p" --max-tokens 12 --temperature 0 --ignore-eos > "$tmp/mw" 2> /dev/null
  SITS_LOG_LEVEL=info "$SITS" --model "$tmp/moe" --device cuda --prompt-ids "$p" --max-tokens 12 --temperature 0 --ignore-eos \
    > "$tmp/m1" 2> "$tmp/m1.err"
  pre=$(paste -d, <(tr ',' '\n' < "$tmp/mw") <(tr ',' '\n' < "$tmp/m1") | awk -F, '$1 != $2 || $1 == "" { exit } { n++ } END { print n + 0 }')
  [ "$pre" -ge 4 ] && grep -q "int4 as stored" "$tmp/m1.err" && ok "INT4 MoE experts on cuda: $pre of 12 tokens = the dequantised checkpoint" \
    || { bad "INT4 MoE experts on cuda ($pre agree): $(cat "$tmp/mw") | $(cat "$tmp/m1")"; tail -5 "$tmp/m1.err"; }
  "$SITS" --model "$tmp/moe-deq" --device cuda --prompt-ids "$p" --batch 24 --max-tokens 4 --temperature 0 --ignore-eos > "$tmp/bw" 2> /dev/null
  "$SITS" --model "$tmp/moe" --device cuda --prompt-ids "$p" --batch 24 --max-tokens 4 --temperature 0 --ignore-eos > "$tmp/b1" 2> "$tmp/b1.err"
  same=$(paste -d' ' <(tr ',' '\n' < "$tmp/bw") <(tr ',' '\n' < "$tmp/b1") | awk '$1 == $2 { n++ } END { print n + 0 }')
  tot=$(tr ',' '\n' < "$tmp/bw" | grep -c .)
  [ "$tot" -gt 0 ] && [ $((same * 10)) -ge $((tot * 8)) ] && ok "INT4 MoE experts on cuda, batch 24: $same of $tot tokens equal" \
    || { bad "INT4 MoE experts on cuda, batch 24: $same of $tot"; tail -5 "$tmp/b1.err"; }
else
  echo "note: no python3 with torch / safetensors / transformers: the INT4 MoE case is not run"
fi
finish
