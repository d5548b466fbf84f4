#!/bin/bash
# [fp8] FP8 weights on the cpu backend (simulated E4M3 rounding of weights and activations):
#  1. the pre-quantised checkpoint llama3_fp8 (tests/ref/gen_fp8_fixture.py) loaded with --quant bf16
#     (dequantised at load) reproduces HF transformers run on the dequantised weights -- logits
#     within 1e-4, greedy tokens identical -- at TP 1, 2 and 4 (the scale rows follow the weight rows);
#  2. loaded as published (auto: its linears stay FP8) the plan is logged and it generates;
#  3. column-parallel layers in FP8 (qkv, gate_up) see whole activation rows on every rank, so TP 2
#     gives TP 1's greedy tokens;
#  4. accuracy vs bf16 of ffn=fp8 and fp8 on every fixture model and the demo model (top-1 agreement
#     and KL over a fixed teacher-forced prompt set, bench/sits-fp8-accuracy) within bounds set from
#     measurement with margin (the measured values are printed);
#  5. --quant errors are usage errors with the reason.
. "$top_srcdir/tests/integration/lib.sh"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
TF="$top_builddir/tests/integration/test_fixtures"
ACC="$top_builddir/bench/sits-fp8-accuracy"

# 1. dequantised FP8 checkpoint == HF on the dequantised weights
SITS_TEST_QUANT=bf16 "$TF" "$FIX/llama3_fp8" > "$tmp/o1" 2>&1 && ok "llama3_fp8 --quant bf16 = HF (tp 1)" || { bad "llama3_fp8 tp 1"; tail -20 "$tmp/o1"; }
for np in 2 4; do
  SITS_TEST_QUANT=bf16 timeout 300 $SITS_MPIRUN -np $np -x SITS_TEST_QUANT "$TF" "$FIX/llama3_fp8" > "$tmp/o$np" 2>&1 \
    && ok "llama3_fp8 --quant bf16 = HF (tp $np)" || { bad "llama3_fp8 tp $np"; tail -20 "$tmp/o$np"; }
done

# 2. as published: FP8 linears, the plan logged
p3=$(ref_row "$FIX/llama3_fp8/reference.json" prompts 3)
SITS_LOG_LEVEL=info "$SITS" --model "$FIX/llama3_fp8" --prompt-ids "$p3" --max-tokens 8 --temperature 0 > "$tmp/auto" 2> "$tmp/auto.err"
if grep -q "quant: layers 0-1: qkv fp8, o fp8, gate_up fp8, down fp8" "$tmp/auto.err" && grep -q "quant: lm_head bf16" "$tmp/auto.err" \
   && grep -q "8 fp8 linears" "$tmp/auto.err" && [ "$(tr ',' '\n' < "$tmp/auto" | grep -c .)" -eq 8 ]; then
  ok "llama3_fp8 as published: 8 fp8 linears, plan logged, 8 tokens"
else
  bad "llama3_fp8 as published"; cat "$tmp/auto.err" "$tmp/auto"
fi

# 3. column-parallel fp8 at TP 2 against TP 1. Not bit-exact, by design: the row-parallel layers sum
# their halves in another order (fp32 noise ~1e-7, as without fp8), and per-token FP8 quantisation
# of the next layer's input turns such noise into a whole E4M3 step (1/8 of the value) wherever an
# activation sits on a rounding boundary -- so a near tie of these random high-gain fixtures may flip
# a later greedy token (seen under ASan's code generation). Required: every prompt agrees for its
# first 2 tokens, and on average for at least 10 of the 16 (wrong scales or rows diverge at once).
sum_prefix=0
for i in 0 1 2 3; do
  p=$(ref_row "$FIX/llama_small/reference.json" prompts $i)
  "$SITS" --model "$FIX/llama_small" --quant qkv=fp8,gate_up=fp8 --prompt-ids "$p" --max-tokens 16 --temperature 0 > "$tmp/c1" 2> "$tmp/c1.err"
  timeout 120 $SITS_MPIRUN -np 2 "$SITS" --model "$FIX/llama_small" --quant qkv=fp8,gate_up=fp8 --prompt-ids "$p" --max-tokens 16 \
    --temperature 0 > "$tmp/c2" 2> "$tmp/c2.err"
  pre=$(paste -d, <(tr ',' '\n' < "$tmp/c1") <(tr ',' '\n' < "$tmp/c2") | awk -F, '$1 != $2 || $1 == "" { exit } { n++ } END { print n + 0 }')
  sum_prefix=$((sum_prefix + pre))
  if [ -s "$tmp/c1" ] && [ "$pre" -ge 2 ]; then ok "qkv,gate_up fp8: tp 2 agrees with tp 1 for $pre of 16 tokens (prompt $i)"
  else bad "qkv,gate_up fp8 tp 2 vs tp 1 (prompt $i, $pre tokens agree): $(cat "$tmp/c1") | $(cat "$tmp/c2")"; cat "$tmp/c1.err" "$tmp/c2.err" | tail -5; fi
done
[ "$sum_prefix" -ge 40 ] && ok "qkv,gate_up fp8: tp 2 agrees with tp 1 for $sum_prefix of 64 tokens" || bad "qkv,gate_up fp8: tp 2 agrees with tp 1 for only $sum_prefix of 64 tokens"
timeout 120 $SITS_MPIRUN -np 2 "$SITS" --model "$FIX/llama_small" --quant fp8 --prompt-ids 1,5,9 --max-tokens 8 --temperature 0 \
  > "$tmp/f2" 2> "$tmp/f2.err" && [ "$(tr ',' '\n' < "$tmp/f2" | grep -c .)" -eq 8 ] && ok "fp8 (row-parallel too) runs at tp 2" \
  || { bad "fp8 at tp 2"; cat "$tmp/f2.err"; }

# 4. accuracy bounds (8 prompts x 64 tokens, seed 1234; measured worst policy fp8 in the comments, top1 / kl_mean).
#    The fixtures are random high-gain models (bf16 rounding alone flips tokens): loose bounds; the
#    trained demo model is the realistic one.
acc() { # model bounds...: runs bf16;ffn=fp8;fp8 (or $POL) and checks the bounds
  local m=$1; shift
  if "$ACC" --model "$m" --policies "${POL:-bf16;ffn=fp8;fp8}" --threads 2 "$@" --json "$tmp/acc.json" > "$tmp/acc" 2>&1; then
    ok "accuracy $(basename "$m"): $(grep -E '^fp8 |^auto ' "$tmp/acc" | tr -s ' ' | head -1)"
  else bad "accuracy $(basename "$m")"; cat "$tmp/acc"; fi
  sed -n '/^quant/,/^bounds/p' "$tmp/acc"
}
acc "$FIX/llama3" --min-top1 0.55 --max-kl 0.20            # 0.664 / 0.116
acc "$FIX/llama_small" --min-top1 0.40 --max-kl 0.50       # 0.500 / 0.329
acc "$FIX/mistral_sharded" --min-top1 0.55 --max-kl 0.25   # 0.668 / 0.141
acc "$FIX/qwen2" --min-top1 0.60 --max-kl 0.35             # 0.721 / 0.230
POL="bf16;auto;fp8" acc "$FIX/llama3_fp8" --min-top1 0.55 --max-kl 0.20
acc "$top_srcdir/models/demo" --prompts 4 --min-top1 0.88 --max-kl 0.015   # 0.934 / 0.0069 (8 prompts)
# [rope] partial rotary: q's passing rows carry 1 / attention_factor^2 in their FP8 row scales and INT4 group scales
# (measured 0.625 / 0.662 fp8, 0.326 / 2.91 int4; with those scales left out 0.346 / 3.41 and 0.223 / 4.58)
POL="bf16;fp8" acc "$FIX/phi3_partial" --min-top1 0.50 --max-kl 1.5
POL="bf16;int4" acc "$FIX/phi3_partial" --min-top1 0.28 --max-kl 3.8

# 5. bad specs
"$SITS" --model "$FIX/llama3" --prompt-ids 1 --quant "ffn[0:x]=fp8" 2> "$tmp/e"; rc=$?
[ $rc -eq 2 ] && grep -q "bad layer range in 'ffn\[0:x\]=fp8'" "$tmp/e" && ok "bad range -> 2" || { bad "bad range (rc $rc)"; cat "$tmp/e"; }
"$SITS" --model "$FIX/llama3" --prompt-ids 1 --quant "attn[0:3]=fp8" 2> "$tmp/e"; rc=$?
[ $rc -eq 2 ] && grep -q "past the model's 2 layers" "$tmp/e" && ok "range past the model -> 2" || { bad "range past the model (rc $rc)"; cat "$tmp/e"; }
finish
