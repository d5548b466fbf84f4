#!/bin/sh
# [fp8 kv] tests/integration/kv_offload.sh with an FP8 (E4M3) KV cache: swaps to the host tier, the
# disk tier, LZ4 and --pp 2 must restore exactly the bytes they took (every text equals the fp8
# reference run's, and the swaps happened). The default model's fp8 block of 4 tokens is, per rank
# at --tp 2 (one KV head of 16) and per layer, K and V units of 64 q bytes + 16 scale bytes
# (each padded to 16): 2 layers x 2 x 80 = 320 bytes.
KVO_FLAGS="--kv-cache-dtype fp8 ${KVO_FLAGS:-}" KVO_BLOCK_BYTES=320 KVO_SKIP_FULL_DISK=1 \
  exec "$top_srcdir/tests/integration/kv_offload.sh"
