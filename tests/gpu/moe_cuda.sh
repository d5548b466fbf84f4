#!/bin/sh
# [moe] The Mixture-of-Experts fixtures on the GPU (bf16; tolerances of test_fixtures' cuda mode; device and host
# routing) and FP8 experts:
# one GPU, then TP 2 with TP-sharded experts and EP 2 (NCCL all-to-all-v) where there are two.
# Exit 77 (skip) where there is no GPU.
. "$top_srcdir/tests/integration/mpi_env.sh"
m="$top_srcdir/tests/fixtures/models"
t="$top_builddir/tests/integration/test_fixtures"
n=$(sits_gpu_count)
[ "$n" -ge 1 ] || { echo "SKIP: no GPU"; exit 77; }
# [moe dev] steps of up to 256 tokens (all here) route on the device (moe_route / moe_experts / moe_combine_slots)
# and the decode steps replay as CUDA graphs; then the host path for every step (experts one by one: no device path, no
# grouped GEMMs), then device routing up to 4 tokens
SITS_TEST_DEVICE=cuda "$t" "$m/mixtral" "$m/qwen2_moe" "$m/qwen3_moe" || exit 1
SITS_TEST_DEVICE=cuda SITS_TEST_MOE_DEV=-1 "$t" "$m/mixtral" "$m/qwen2_moe" "$m/qwen3_moe" || { echo "FAIL: moe fixtures on cuda, host routing"; exit 1; }
# [moe grouped] device routing for one-token steps only: the prompts' steps route on the host and run their experts as
# the two grouped GEMMs (moe_grouped), gpt-oss's biases and clamped SwiGLU included
SITS_TEST_DEVICE=cuda SITS_TEST_MOE_DEV=1 "$t" "$m/mixtral" "$m/qwen2_moe" "$m/qwen3_moe" "$m/gpt_oss" ||
  { echo "FAIL: moe fixtures on cuda, host routing with grouped experts"; exit 1; }
# (with SITS_MOE_FUSE=0: one-token steps on the separate ops, which the fused kernels replace by default)
SITS_MOE_FUSE=0 SITS_TEST_DEVICE=cuda SITS_TEST_MOE_DEV=4 "$t" "$m/mixtral" "$m/qwen2_moe" "$m/qwen3_moe" || { echo "FAIL: moe fixtures on cuda, device routing up to 4 tokens"; exit 1; }
# [moe fuse] the one-token fused kernels (moe_select; moe_experts_combine where there is no shared expert; the default)
# on one-token decode steps (SITS_TEST_STEPWISE), gpt-oss's biases and clamped SwiGLU included
SITS_MOE_FUSE=1 SITS_TEST_STEPWISE=1 SITS_TEST_DEVICE=cuda "$t" "$m/mixtral" "$m/qwen2_moe" "$m/qwen3_moe" "$m/gpt_oss" ||
  { echo "FAIL: moe fixtures on cuda, SITS_MOE_FUSE=1"; exit 1; }
# [moe fp8] the FP8 MoE checkpoint dequantised (== HF on its dequantised weights), then FP8 experts on the
# cuBLASLt FP8 GEMM: as published and quantised at load, accuracy vs bf16 (bounds of tests/integration/moe_fp8.sh)
SITS_TEST_DEVICE=cuda SITS_TEST_QUANT=bf16 "$t" "$m/qwen3_moe_fp8" || exit 1
"$top_builddir/bench/sits-fp8-accuracy" --model "$m/qwen3_moe" --device cuda --policies "bf16;ffn=fp8" --min-top1 0.85 --max-kl 0.01 ||
  { echo "FAIL: qwen3_moe ffn=fp8 (FP8 experts) accuracy on cuda"; exit 1; }
"$top_builddir/bench/sits-fp8-accuracy" --model "$m/qwen3_moe_fp8" --device cuda --policies "bf16;auto" --min-top1 0.78 --max-kl 0.02 ||
  { echo "FAIL: qwen3_moe_fp8 as published (FP8 experts) accuracy on cuda"; exit 1; }
[ "$n" -ge 2 ] || { echo "moe_cuda: one GPU only, TP 2 / EP 2 not run"; exit 0; }
for ep in 1 2; do
  SITS_TEST_DEVICE=cuda SITS_TEST_EP=$ep timeout 300 $SITS_MPIRUN -np 2 "$t" "$m/mixtral" "$m/qwen2_moe" "$m/qwen3_moe" ||
    { echo "FAIL: moe fixtures on 2 GPUs, ep $ep"; exit 1; }
  # [moe grouped] the prompts' steps host-routed: grouped GEMMs over each rank's (EP: received) rows
  SITS_TEST_DEVICE=cuda SITS_TEST_EP=$ep SITS_TEST_MOE_DEV=1 timeout 300 $SITS_MPIRUN -np 2 "$t" "$m/mixtral" "$m/qwen2_moe" "$m/qwen3_moe" ||
    { echo "FAIL: moe fixtures on 2 GPUs, ep $ep, grouped experts"; exit 1; }
done
