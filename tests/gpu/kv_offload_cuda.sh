#!/bin/bash
# KV offload tiers on 2 GPUs (issue 8 item 2): tests/integration/kv_offload.sh on the cuda backend with
# the trained demo model (models/demo; real margins, so greedy choices are stable) -- swaps go
# device -> pinned host staging -> host / disk tiers and back through sits_engine_kv_save_blocks /
# kv_load_blocks (cudaMemcpy), with --tp 2 (NCCL) and --pp 2 (against a --pp 2 reference); the swaps
# must have happened and at least 75 % of each run's texts equal the no-swap reference, all complete
# (bf16 is not batch-invariant: swapping changes which sequences share a step; the CPU test demands
# every text). bf16 KV: 8 layers x K,V x 4 tokens x 1 head x
# 64 x 2 bytes = 8 KiB a block per rank. The file-size-limit case is left to the CPU test (a limit
# on a rank would also hit NCCL's shared-memory files).
# Skips (77) without 2 GPUs or a cuda + nccl build -- the CI machine has none.
. "$top_srcdir/tests/integration/lib.sh"
gpus=$(sits_gpu_count)
if [ "${gpus:-0}" -lt 2 ]; then echo "SKIP: kv_offload_cuda needs 2 GPUs, ${gpus:-0} visible"; exit 77; fi
grep -q '^#define HAVE_NCCL 1' "$top_builddir/config.h" 2>/dev/null || { echo "SKIP: not a cuda + nccl build"; exit 77; }
export NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-lo}" NCCL_NVLS_ENABLE="${NCCL_NVLS_ENABLE:-0}"
export KVO_MODEL="$top_srcdir/models/demo" KVO_FLAGS="--device cuda --load-format safetensors" KVO_BLOCK_BYTES=8192 \
       KVO_SKIP_FULL_DISK=1 KVO_PP_REFERENCE=1 KVO_MIN_SAME=0.75
exec bash "$top_srcdir/tests/integration/kv_offload.sh"
