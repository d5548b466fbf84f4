#!/bin/sh
# HF fixture comparison on one rank (singleton MPI, no mpirun).
m="$top_srcdir/tests/fixtures/models"
exec "$top_builddir/tests/integration/test_fixtures" "$m/llama3" "$m/qwen2" "$m/mistral_sharded" "$m/llama_small" "$m/llama_hd128"
