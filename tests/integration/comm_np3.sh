#!/bin/sh
# The MPI communicator's collectives and point-to-point ops on 3 ranks (odd, so no power-of-two luck).
. "$top_srcdir/tests/integration/mpi_env.sh"
exec timeout 120 $SITS_MPIRUN -np 3 "$top_builddir/tests/unit/test_comm"
