#!/bin/sh
# [sampling controls] [logprobs] tests/unit/test_logit_process with the vocabulary split over 2 and 4
# ranks: the same values as HF's logits processors on every TP size.
. "$top_srcdir/tests/integration/mpi_env.sh"
for np in 2 4; do
  timeout 120 $SITS_MPIRUN -np $np "$top_builddir/tests/unit/test_logit_process" || exit 1
done
