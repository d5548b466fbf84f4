#!/bin/bash
# [families] HF fixture comparison of the model families beyond Llama / Mistral / Qwen2 (CPU backend, fp32):
# logits within 1e-4 of HF transformers and identical greedy tokens at TP 1, 2 and 4
# (tests/integration/test_fixtures.c on fixtures written by tests/ref/gen_fixtures.py), then the
# sits-dist CLI (scheduler, paged KV, prefill in chunks of 6 tokens) through pipeline stages against HF's greedy tokens.
#   qwen3       per-head q/k RMSNorm, head_dim 24 != hidden / heads, untied, 4 KV heads
#   qwen3_tied  tied embeddings, GQA 4/2 (KV heads replicated at TP 4), bf16 checkpoint
#   qwen3_hd64  head_dim 64: the q/k RMSNorm inside the fused rope + KV write
#   gemma2      (1 + w) norms, 4 norms a layer, GeGLU, sqrt(H) embedding scale, query_pre_attn_scalar,
#               attention + final soft-capping, sliding window 8 on layers 0 and 2 (prompts of 37 tokens)
#   gemma3      Gemma 3 text: QK-norm, local / global RoPE bases (global linearly scaled), window 8
#   phi3        fused qkv_proj / gate_up_proj (split per TP rank at load), longrope (original length 40: decoding
#               crosses from the short to the long factors, a 45-token prompt prefills with the long ones),
#               attention_factor, sliding window 24
#   phi3_partial  [rope] Phi-4-mini's partial rotary (24 of 32 dims; partial_rotary_factor at the top level), longrope
#               factors for the rotary dims, attention_factor on those alone, tied embeddings
#   qwen3_yarn  [rope] YaRN (factor 4, original length 64: interpolation and extrapolation blended), its attention factor
#   gemma3_mm   [mm] Gemma3ForConditionalGeneration (gemma-3-27b-it's layout): the language model under language_model.model.,
#               config.json's text_config as the hub writes it (Gemma3TextConfig's defaults for the rest), text prompts
#   mistral3_mm [mm] Mistral3ForConditionalGeneration (Mistral-Small-3.1's layout): language_model.model.* and
#               language_model.lm_head, head_dim 24 given, theta 1e9
#   granite     [granite] Granite 3.x: embedding / attention / residual multipliers and logits scaling, tied embeddings
#   glm, glm4   [glm] GLM-4: q/k/v biases, fused gate_up, half of each head rotary in interleaved pairs; glm4's post norms
#   smollm3     [smollm3] NoPE layers (1 and 3) beside YaRN ones: the attention factor on the RoPE layers only
#   qwen2_5_vl  [mm] Qwen2_5_VLForConditionalGeneration: config.json flat as the hub's, multimodal RoPE sections
. "$top_srcdir/tests/integration/lib.sh"
models="$FIX/qwen3 $FIX/qwen3_tied $FIX/qwen3_hd64 $FIX/gemma2 $FIX/gemma3 $FIX/phi3 $FIX/phi3_partial $FIX/qwen3_yarn $FIX/gemma3_mm $FIX/mistral3_mm $FIX/qwen2_5_vl $FIX/granite $FIX/glm $FIX/glm4 $FIX/smollm3"
for np in 1 2 4; do
  if timeout 300 $SITS_MPIRUN -np $np "$top_builddir/tests/integration/test_fixtures" $models > /tmp/families.$$ 2>&1; then
    ok "test_fixtures at tp $np: $(grep -c '^ok' /tmp/families.$$) models"
  else
    bad "test_fixtures at tp $np"; grep -v '^ok' /tmp/families.$$ | head -20
  fi
done
rm -f /tmp/families.$$
# the CLI with 6-token steps (prompts cross the window in chunks) and pipeline stages
for m in qwen3:2:2 qwen3_hd64:2:1 gemma2:3:3 gemma2:4:2 gemma3:2:1 gemma3:3:3 phi3:2:2 phi3:4:1 phi3_partial:2:2 qwen3_yarn:4:2 gemma3_mm:2:1 mistral3_mm:2:2 qwen2_5_vl:4:1 granite:2:2 glm:2:1 glm4:4:2 smollm3:2:2; do
  IFS=: read -r name np pp <<< "$m"
  for i in 2 3; do
    ids=$(ref_row "$FIX/$name/reference.json" prompts $i); want=$(ref_row "$FIX/$name/reference.json" greedy $i)
    got=$(timeout 120 $SITS_MPIRUN -np "$np" "$SITS" --model "$FIX/$name" --pp "$pp" --prompt-ids "$ids" --max-tokens 16 --max-num-batched-tokens 6 --max-num-seqs 2 \
          --temperature 0 --ignore-eos 2> /tmp/families_e.$$)
    [ "$got" = "$want" ] && ok "$name: $np ranks, pp $pp, prompt $i == HF" || { bad "$name np $np pp $pp prompt $i: '$got' want '$want'"; tail -3 /tmp/families_e.$$; }
  done
done
rm -f /tmp/families_e.$$
finish
