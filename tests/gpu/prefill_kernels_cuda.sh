#!/bin/sh
# [attention] The tensor-core prefill attention kernels against HF transformers on one GPU: the llama_hd128
# fixture (head_dim 128; a 200-token prompt alone and in a 255-token mixed batch, so >= 64 tokens a step and
# the prefill kernel, tests/ref/gen_fixtures.py) under each kernel SITS_ATT_PF_ROWS can force -- the mma.sync
# kernel's 64- and 128-row tiles, the warpgroup-MMA kernel with 64- and 128-key tiles -- with the bf16
# tolerances of tests/gpu/fixtures_cuda.sh (fixtures_cuda.sh runs it with the default choice). The op parity
# test holds the same kernels to the cpu twin over many shapes; this holds them to the reference. Exit 77
# (skip) where there is no GPU.
m="$top_srcdir/tests/fixtures/models/llama_hd128"
fail=0
for rows in 64 128 wg wg128; do
  echo "-- SITS_ATT_PF_ROWS=$rows"
  SITS_ATT_PF_ROWS=$rows SITS_TEST_DEVICE=cuda "$top_builddir/tests/integration/test_fixtures" "$m"
  rc=$?
  [ $rc = 77 ] && exit 77
  [ $rc = 0 ] || fail=1
done
exit $fail
