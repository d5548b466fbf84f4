#!/bin/sh
# HF fixture comparison on one GPU (bf16): greedy tokens and logits within bf16 tolerances.
# Exit 77 (skip) where there is no GPU.
m="$top_srcdir/tests/fixtures/models"
SITS_TEST_DEVICE=cuda exec "$top_builddir/tests/integration/test_fixtures" "$m/llama3" "$m/qwen2" "$m/mistral_sharded" "$m/llama_small" "$m/llama_hd128"
