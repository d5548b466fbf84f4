#!/bin/sh
# [int8 kv] The fixture comparison on one GPU: int8 KV against bf16 KV (the cuda default), both on
# the cuda backend (bf16 activations), with bench/sits-kv-int8-accuracy: teacher-forced top-1
# agreement, KL mean / max, greedy tokens. Bounds as tests/integration/kv_int8_accuracy.sh (the
# CPU measures int8 vs bf16 KV at the same level). Exit 77 (skip) where there is no GPU.
m="$top_srcdir/tests/fixtures/models"
exec timeout 300 "$top_builddir/bench/sits-kv-int8-accuracy" --device cuda --refs bf16 \
  --model "$m/llama3" --model "$m/qwen2" --model "$m/mistral_sharded" --model "$m/llama_small" \
  --min-top1 0.90 --max-kl-mean 0.01 --max-kl 0.15 --min-greedy 0.25 --min-kl-mean 1e-5
