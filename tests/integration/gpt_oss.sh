#!/bin/bash
# [gpt-oss] OpenAI gpt-oss checkpoints on the cpu backend, against HF transformers (fixtures by tests/ref/gen_oai_fixtures.py):
#   gpt_oss        as transformers saves GptOssForCausalLM: attention sinks, q/k/v/o biases, sliding-window layers (8)
#                  alternating with full ones, YaRN, 8 experts top-2 with a biased router, fused transposed experts with
#                  alternating gate / up columns and biases, the clamped SwiGLU (limit 2.0 from config.json)
#   gpt_oss_mxfp4  the experts in MXFP4 (*_blocks / *_scales, quant_method mxfp4, the hub's config keys), reference =
#                  HF on the dequantised weights (the generator checked transformers' dequantiser gives them exactly)
#  1. logits within 1e-4 and greedy tokens identical at TP 1 / 2 / 4 (experts TP-sliced: the down bias added once) and
#     EP 2 / 4 (experts whole), with device routing (moe_experts' epilogue: biases, the clamped SwiGLU; steps of up to
#     256 tokens, i.e. every step here), host routing (the GEMMs' biases, swiglu_oai) and the two mixed;
#  2. the sits-dist CLI: prefill in 6-token steps across the window, through pipeline stages and with EP, == HF greedy;
#  3. --quant fp8 (experts and attention re-quantised per row from the dequantised rows) within accuracy bounds set from
#     measurement (bench/sits-fp8-accuracy against the dequantised model);
#  4. refusals with the tensor or key: a missing MXFP4 scale tensor, blocks whose shape the config does not give,
#     quant_method mxfp4 on another model_type, a non-positive swiglu_limit.
. "$top_srcdir/tests/integration/lib.sh"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
TF="$top_builddir/tests/integration/test_fixtures"
ACC="$top_builddir/bench/sits-fp8-accuracy"
G="$FIX/gpt_oss" M="$FIX/gpt_oss_mxfp4"

# 1. == HF
for run in "1 0 0" "2 0 0" "4 0 0" "2 2 0" "4 4 0" "1 0 -1" "2 2 -1" "4 0 4" "4 4 4"; do
  set -- $run   # ranks, ep, device routing up to this many tokens a step (0: the default, -1: never)
  SITS_TEST_EP=$2 SITS_TEST_MOE_DEV=$3 timeout 300 $SITS_MPIRUN -np $1 -x SITS_TEST_EP -x SITS_TEST_MOE_DEV "$TF" "$G" "$M" \
    > "$tmp/f$1$2" 2>&1 && ok "gpt_oss, gpt_oss_mxfp4 = HF (tp $1, ep $2, device routing $3)" \
    || { bad "gpt_oss tp $1 ep $2 routing $3"; grep -v '^ok' "$tmp/f$1$2" | head -20; }
done

# 2. the CLI: 6-token prefill steps (prompt 3 has 37 tokens, the window is 8), pipeline stages, EP
for m in gpt_oss:2:--pp_2 gpt_oss_mxfp4:4:--pp_2_--tp_2_--ep_2 gpt_oss_mxfp4:2:--ep_2; do
  IFS=: read -r name np flags <<< "$m"
  flags=${flags//_/ }
  for i in 2 3; do
    ids=$(ref_row "$FIX/$name/reference.json" prompts $i); want=$(ref_row "$FIX/$name/reference.json" greedy $i)
    got=$(timeout 120 $SITS_MPIRUN -np "$np" "$SITS" --model "$FIX/$name" $flags --prompt-ids "$ids" --max-tokens 16 \
          --max-num-batched-tokens 6 --max-num-seqs 2 --temperature 0 --ignore-eos 2> "$tmp/cli.err")
    [ "$got" = "$want" ] && ok "$name: $np ranks $flags, prompt $i == HF" || { bad "$name np $np $flags prompt $i: '$got' want '$want'"; tail -3 "$tmp/cli.err"; }
  done
done

# 3. FP8: bounds from measurement (top-1 / mean KL: gpt_oss 0.6465 / 0.0601, gpt_oss_mxfp4 0.6953 / 0.0636; the
#    attention's share dominates, as on the other tiny fixtures: attn=fp8 alone 0.68 here, 0.70 on llama3)
acc() { # model bounds...
  local m=$1; shift
  if "$ACC" --model "$m" --policies "bf16;fp8" --threads 2 "$@" > "$tmp/acc" 2>&1; then
    ok "fp8 accuracy $(basename "$m"): $(grep -E '^fp8 ' "$tmp/acc" | tr -s ' ')"
  else bad "fp8 accuracy $(basename "$m")"; cat "$tmp/acc"; fi
}
acc "$G" --min-top1 0.55 --max-kl 0.10
acc "$M" --min-top1 0.60 --max-kl 0.10

# 4. refusals
refused() { # what grep...: sits-dist on $tmp/bad exits non-zero and says grep
  local what=$1 want=$2
  "$SITS" --model "$tmp/bad" --prompt-ids 1 --max-tokens 1 > /dev/null 2> "$tmp/e"; local rc=$?
  [ $rc -ne 0 ] && grep -q -- "$want" "$tmp/e" && ok "$what: refused ($(grep -m1 -o -- "$want.*" "$tmp/e" | cut -c1-100))" \
    || { bad "$what (rc $rc)"; cat "$tmp/e"; }
}
rm -rf "$tmp/bad"; cp -r "$M" "$tmp/bad"
# rename layer 1's down_proj_scales in the safetensors header (same length: the header keeps its size)
python3 - "$tmp/bad/model.safetensors" <<'EOF'
import sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read())
old = b"model.layers.1.mlp.experts.down_proj_scales"
i = b.find(old); assert i > 0
b[i:i + len(old)] = b"model.layers.1.mlp.experts.down_proj_scalez"
open(p, "wb").write(b)
EOF
refused "a missing MXFP4 scale tensor" "tensor model.layers.1.mlp.experts.down_proj_scales: missing"
bad_cfg() { # SRC PYTHON: $tmp/bad = a copy of SRC whose config.json dict c the python statement edits
  rm -rf "$tmp/bad"; cp -r "$1" "$tmp/bad"
  python3 -c 'import json, sys; p = sys.argv[1]; c = json.load(open(p)); exec(sys.argv[2]); json.dump(c, open(p, "w"))' \
    "$tmp/bad/config.json" "$2"
}
bad_cfg "$M" 'c["intermediate_size"] = 64'
refused "MXFP4 blocks of another expert width" "gate_up_proj_blocks: shape \[8, 64, 2, 16\] dtype U8, config needs \[8, 128, 2, 16\]"
bad_cfg "$FIX/qwen3" 'c["quantization_config"] = {"quant_method": "mxfp4"}'
refused "quant_method mxfp4 on qwen3" "quant_method \"mxfp4\" is supported for gpt_oss only"
bad_cfg "$G" 'c["swiglu_limit"] = 0'
refused "swiglu_limit 0" "swiglu_limit: expected a positive number"
finish
