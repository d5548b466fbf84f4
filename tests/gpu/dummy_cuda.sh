#!/bin/sh
# [dummy] tests/integration/dummy_weights.sh on one GPU (kernels/dummy.cu against the host generator), an 8B-shaped
# model of 4 layers, bf16 and FP8. Op parity of the two kernels is in tests/gpu/test_op_parity. Exit 77 without a GPU.
. "$top_srcdir/tests/integration/lib.sh"
[ "$(sits_gpu_count)" -ge 1 ] || { echo "SKIP: no GPU"; exit 77; }
DUMMY_DEVICE=cuda exec "$top_srcdir/tests/integration/dummy_weights.sh"
