/* cuda_check.h -- CHECK macros for the CUDA-side foreign libraries (CUDA runtime, cuBLASLt, and
 * NCCL when built with it): each logs the call text, file:line (by the logger) and the library's
 * own error string, then returns (or stores in st_ and jumps to label_) a mapped sits_status_t.
 * Only CUDA-side files (src/backend/cuda*.c, src/comm/nccl*.c) include this header. */
#ifndef SITS_BACKEND_CUDA_CHECK_H
#define SITS_BACKEND_CUDA_CHECK_H

#include <cuda_runtime_api.h>
#include <cublasLt.h>
#ifdef HAVE_NCCL
#include <nccl.h>
#endif
#include "util/log.h"
#include "util/status.h"

#define SITS_CUDA_CHECK(call_) do { cudaError_t e_ = (call_); if (e_ != cudaSuccess) { \
    SITS_ERROR(SITS_SUB_CUDA, "%s: %s", #call_, cudaGetErrorString(e_)); return SITS_ERR_CUDA; } } while (0)

#define SITS_CUDA_CHECK_GOTO(call_, st_, label_) do { cudaError_t e_ = (call_); if (e_ != cudaSuccess) { \
    SITS_ERROR(SITS_SUB_CUDA, "%s: %s", #call_, cudaGetErrorString(e_)); (st_) = SITS_ERR_CUDA; goto label_; } } while (0)

#define SITS_CUBLAS_CHECK(call_) do { cublasStatus_t e_ = (call_); if (e_ != CUBLAS_STATUS_SUCCESS) { \
    SITS_ERROR(SITS_SUB_CUDA, "%s: %s (%s)", #call_, cublasLtGetStatusName(e_), cublasLtGetStatusString(e_)); \
    return SITS_ERR_CUBLAS; } } while (0)

#define SITS_CUBLAS_CHECK_GOTO(call_, st_, label_) do { cublasStatus_t e_ = (call_); if (e_ != CUBLAS_STATUS_SUCCESS) { \
    SITS_ERROR(SITS_SUB_CUDA, "%s: %s (%s)", #call_, cublasLtGetStatusName(e_), cublasLtGetStatusString(e_)); \
    (st_) = SITS_ERR_CUBLAS; goto label_; } } while (0)

#ifdef HAVE_NCCL
#define SITS_NCCL_CHECK(call_) do { ncclResult_t e_ = (call_); if (e_ != ncclSuccess) { \
    SITS_ERROR(SITS_SUB_COMM, "%s: %s", #call_, ncclGetErrorString(e_)); return SITS_ERR_NCCL; } } while (0)

#define SITS_NCCL_CHECK_GOTO(call_, st_, label_) do { ncclResult_t e_ = (call_); if (e_ != ncclSuccess) { \
    SITS_ERROR(SITS_SUB_COMM, "%s: %s", #call_, ncclGetErrorString(e_)); (st_) = SITS_ERR_NCCL; goto label_; } } while (0)
#endif

/* A launcher of kernels/sits_kernels.h (it has no logger): log the call when it fails. */
#define SITS_KERNEL_CHECK(call_) do { sits_status_t s_ = (call_); if (s_ != SITS_OK) { \
    SITS_ERROR(SITS_SUB_CUDA, "%s: %s", #call_, sits_status_str(s_)); return s_; } } while (0)

#endif
