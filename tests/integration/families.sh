#!/bin/sh
# [families] HF fixture comparison of the model families beyond Llama / Mistral / Qwen2 (CPU backend,
# fp32): logits within 1e-4 of HF transformers and identical greedy tokens at TP 1, 2 and 4
# (tests/integration/test_fixtures.c on fixtures written by tests/ref/gen_fixtures.py).
#   qwen3       per-head q/k RMSNorm, head_dim 24 != hidden / heads, untied, 4 KV heads
#   qwen3_tied  tied embeddings, GQA 4/2 (KV heads replicated at TP 4), bf16 checkpoint
. "$top_srcdir/tests/integration/mpi_env.sh"
m="$top_srcdir/tests/fixtures/models"
models="$m/qwen3 $m/qwen3_tied"
rc=0
for np in 1 2 4; do
  echo "== tp $np"
  timeout 300 $SITS_MPIRUN -np $np "$top_builddir/tests/integration/test_fixtures" $models || rc=1
done
exit $rc
