#!/bin/sh
# HF fixture comparison with the model split over 2 ranks (tensor parallel over MPI, CPU backend):
# logits within 1e-4 of HF and the same greedy tokens as TP = 1. Includes KV-head replication
# (mistral_sharded has 1 KV head) and vocabularies that do not divide evenly (qwen2: 301).
. "$top_srcdir/tests/integration/mpi_env.sh"
m="$top_srcdir/tests/fixtures/models"
exec timeout 300 $SITS_MPIRUN -np 2 "$top_builddir/tests/integration/test_fixtures" \
  "$m/llama3" "$m/qwen2" "$m/mistral_sharded" "$m/llama_small" "$m/llama_hd128"
