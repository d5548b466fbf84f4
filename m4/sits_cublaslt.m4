# sits_cublaslt.m4 -- cuBLASLt (GEMMs of the CUDA backend). Only with CUDA.
AC_DEFUN([SITS_CHECK_CUBLASLT], [SITS_CHECK_CUDA_LIB([CUBLASLT], [cublaslt], [cublasLt.h], [cublasLt], [cublasLtCreate])])
