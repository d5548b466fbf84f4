#!/bin/bash
# [fp8 block] Block-wise FP8 checkpoints as Qwen3-*-FP8 and DeepSeek-V3 publish them (quant_method fp8,
# weight_block_size [bm, bn]: F8_E4M3 weights, float32 weight_scale_inv [ceil(out / bm), ceil(in / bn)]), on the cpu
# backend. Fixtures by tests/ref/gen_fp8_fixture.py --block (qwen3 with [32, 32], qwen3_moe with [8, 8]: the experts'
# gate/up/down block-wise too); their reference.json is HF transformers on the dequantised weights, and the script
# checked that transformers' own loader of the block checkpoint dequantises to exactly those values.
#  1. --quant bf16 (dequantised at load, a factor a block) equals HF: logits within 1e-4, greedy tokens identical, at
#     TP 1 / 2 / 4 (slices cut across blocks) and, for the MoE, EP 2 and 4;
#  2. as published (auto) the linears stay FP8, re-quantised per output row from the dequantised rows (logged); the
#     accuracy against the dequantised model (top-1, KL over 8 prompts x 64 tokens, bench/sits-fp8-accuracy) within
#     bounds set from measurement;
#  3. bad checkpoints are refused with the tensor or key and the reason: scales whose grid does not fit the block size,
#     weight_scale_inv blocks without a weight_block_size, a malformed weight_block_size.
. "$top_srcdir/tests/integration/lib.sh"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
TF="$top_builddir/tests/integration/test_fixtures"
ACC="$top_builddir/bench/sits-fp8-accuracy"
D="$FIX/qwen3_fp8_block" M="$FIX/qwen3_moe_fp8_block"

# 1. dequantised == HF
for np in 1 2 4; do
  SITS_TEST_QUANT=bf16 timeout 300 $SITS_MPIRUN -np $np -x SITS_TEST_QUANT "$TF" "$D" > "$tmp/d$np" 2>&1 \
    && ok "qwen3_fp8_block --quant bf16 = HF (tp $np)" || { bad "qwen3_fp8_block tp $np"; tail -20 "$tmp/d$np"; }
done
for run in "1 0" "2 1" "2 2" "4 4"; do
  set -- $run
  SITS_TEST_QUANT=bf16 SITS_TEST_EP=$2 timeout 300 $SITS_MPIRUN -np $1 -x SITS_TEST_QUANT -x SITS_TEST_EP "$TF" "$M" > "$tmp/m$1$2" 2>&1 \
    && ok "qwen3_moe_fp8_block --quant bf16 = HF (tp $1, ep $2)" || { bad "qwen3_moe_fp8_block tp $1 ep $2"; tail -20 "$tmp/m$1$2"; }
done

# 2. as published: FP8, re-quantised per row
p3=$(ref_row "$D/reference.json" prompts 3)
SITS_LOG_LEVEL=info "$SITS" --model "$D" --prompt-ids "$p3" --max-tokens 8 --temperature 0 > "$tmp/auto" 2> "$tmp/auto.err"
if grep -q "8 fp8 linears" "$tmp/auto.err" && grep -q "block-wise FP8 scales (\[32, 32\] blocks) re-quantised per output row" "$tmp/auto.err" \
   && [ "$(tr ',' '\n' < "$tmp/auto" | grep -c .)" -eq 8 ]; then
  ok "qwen3_fp8_block as published: 8 fp8 linears, the re-quantisation logged, 8 tokens"
else
  bad "qwen3_fp8_block as published"; cat "$tmp/auto.err" "$tmp/auto"
fi
acc() { # model bounds...: bf16 (the dequantised checkpoint) against auto
  local m=$1; shift
  if "$ACC" --model "$m" --policies "bf16;auto" --threads 2 "$@" > "$tmp/acc" 2>&1; then
    ok "accuracy $(basename "$m"): $(grep -E '^auto ' "$tmp/acc" | tr -s ' ')"
  else bad "accuracy $(basename "$m")"; cat "$tmp/acc"; fi
}
acc "$D" --min-top1 0.70 --max-kl 0.08    # measured 0.795 / 0.0394 (per-channel FP8 of the same qwen3: 0.807 / 0.0396)
acc "$M" --min-top1 0.75 --max-kl 0.03    # measured 0.834 / 0.0128 (qwen3_moe_fp8, per channel: 0.869 / 0.0058)

# 3. refusals, each on a copy of the dense fixture
bad_copy() { rm -rf "$tmp/bad"; cp -r "$D" "$tmp/bad"; }
refused() { # what grep...: sits-dist on $tmp/bad exits non-zero and says grep
  local what=$1 want=$2
  "$SITS" --model "$tmp/bad" --prompt-ids 1 --max-tokens 1 > /dev/null 2> "$tmp/e"; local rc=$?
  [ $rc -ne 0 ] && grep -q -- "$want" "$tmp/e" && ok "$what: refused ($(grep -m1 -o -- "$want.*" "$tmp/e" | cut -c1-100))" \
    || { bad "$what (rc $rc)"; cat "$tmp/e"; }
}
bad_copy
python3 - "$tmp/bad/config.json" 16 32 <<'EOF'
import json, sys
c = json.load(open(sys.argv[1])); c["quantization_config"]["weight_block_size"] = [int(sys.argv[2]), int(sys.argv[3])]
json.dump(c, open(sys.argv[1], "w"))
EOF
refused "scales of [32, 32] blocks read as [16, 32]" "weight_scale_inv.*blocks of \[16, 32\]"
bad_copy
python3 - "$tmp/bad/config.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1])); del c["quantization_config"]["weight_block_size"]; json.dump(c, open(sys.argv[1], "w"))
EOF
refused "weight_scale_inv blocks without weight_block_size" "block-wise scales need quantization_config.weight_block_size"
bad_copy
python3 - "$tmp/bad/config.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1])); c["quantization_config"]["weight_block_size"] = [0, 128]; json.dump(c, open(sys.argv[1], "w"))
EOF
refused "weight_block_size [0, 128]" "weight_block_size: expected \[rows, cols\]"
finish
