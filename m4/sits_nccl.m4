# sits_nccl.m4 -- NCCL (GPU collectives for the nccl communicator). Only with CUDA.
AC_DEFUN([SITS_CHECK_NCCL], [SITS_CHECK_CUDA_LIB([NCCL], [nccl], [nccl.h], [nccl], [ncclGetUniqueId])])
