#!/bin/sh
# [families] HF fixture comparison of the model families beyond Llama / Mistral / Qwen2 on one GPU
# (bf16; the tolerances of tests/gpu/fixtures_cuda.sh); [gpt-oss] gpt_oss / gpt_oss_mxfp4: the attention sinks (head_dim 16: the
# generic kernel; test_op_parity covers the head_dim-64 ones), the experts' biases and clamped SwiGLU in
# moe_experts' epilogues (device routing). Exit 77 (skip) where there is no GPU.
m="$top_srcdir/tests/fixtures/models"
SITS_TEST_DEVICE=cuda exec "$top_builddir/tests/integration/test_fixtures" "$m/qwen3" "$m/qwen3_tied" "$m/qwen3_hd64" "$m/gemma2" "$m/gemma3" "$m/phi3" "$m/phi3_partial" "$m/qwen3_yarn" "$m/gemma3_mm" "$m/mistral3_mm" "$m/qwen2_5_vl" "$m/granite" "$m/glm" "$m/glm4" "$m/smollm3" "$m/gpt_oss" "$m/gpt_oss_mxfp4"
