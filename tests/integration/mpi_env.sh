# mpi_env.sh -- sourced by the MPI test scripts: mpirun that works as root, oversubscribed, on a
# 2-core CI machine, with every rank free to use any core.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PMIX_MCA_pcompress_base_silence_warning=1
# loopback TCP only: no attempt at InfiniBand/UCX devices on a machine without them
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_pml=ob1
SITS_MPIRUN="${MPIRUN:-mpirun} --oversubscribe --bind-to none"
