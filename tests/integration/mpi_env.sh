# mpi_env.sh -- sourced by the MPI test scripts: mpirun that works as root, oversubscribed, on a
# 2-core CI machine, with every rank free to use any core.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PMIX_MCA_pcompress_base_silence_warning=1
# loopback TCP only: no attempt at InfiniBand/UCX devices on a machine without them
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_pml=ob1
SITS_MPIRUN="${MPIRUN:-mpirun} --oversubscribe --bind-to none"
# sits_gpu_count: the GPUs a test may use -- nvidia-smi's count, capped by CUDA_VISIBLE_DEVICES when set
sits_gpu_count() {
  local n v
  n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  if [ -n "${CUDA_VISIBLE_DEVICES+x}" ]; then
    v=$(printf '%s\n' "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .)
    [ "$v" -lt "${n:-0}" ] && n=$v
  fi
  echo "${n:-0}"
}
