#!/bin/sh
# [fp8 kv] The fixture comparison on one GPU: FP8 (E4M3) KV against bf16 KV (the cuda default), both
# on the cuda backend (bf16 activations), with bench/sits-kv-int8-accuracy --kv fp8: teacher-forced
# top-1 agreement, KL mean / max, greedy tokens, on the demo model and the fixtures. Bounds as
# tests/integration/kv_fp8_accuracy.sh (the CPU measures fp8 vs bf16 KV at the same level).
# Exit 77 (skip) where there is no GPU.
m="$top_srcdir/tests/fixtures/models"
b="$top_builddir/bench/sits-kv-int8-accuracy"
timeout 300 "$b" --device cuda --refs bf16 --kv fp8 --model "$top_srcdir/models/demo" \
  --min-top1 0.94 --max-kl-mean 6e-3 --max-kl 6e-2 --min-greedy 0.5 --min-kl-mean 1e-5
rc=$?
[ $rc -eq 0 ] || exit $rc
exec timeout 300 "$b" --device cuda --refs bf16 --kv fp8 \
  --model "$m/llama3" --model "$m/qwen2" --model "$m/mistral_sharded" --model "$m/llama_small" \
  --min-top1 0.65 --max-kl-mean 0.1 --max-kl 1.2 --min-greedy 0.08 --min-kl-mean 1e-5
