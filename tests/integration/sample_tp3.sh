#!/bin/sh
# The sampler with the vocabulary split over 3 ranks must agree with one rank.
. "$top_srcdir/tests/integration/mpi_env.sh"
exec timeout 120 $SITS_MPIRUN -np 3 "$top_builddir/tests/unit/test_sample"
