/* cuda_fp8.h -- [fp8] the cuda backend's FP8 GEMM (matmul_fp8 of backend.h), private to src/backend.
 *
 * State hangs off the cuda backend (cuda.c creates it lazily and destroys it with the backend);
 * it shares the backend's cuBLASLt handle, workspace and stream. See cuda_fp8.c. */
#ifndef SITS_BACKEND_CUDA_FP8_H
#define SITS_BACKEND_CUDA_FP8_H

#include <cuda_runtime_api.h>
#include <cublasLt.h>
#include <stdint.h>
#include "util/status.h"

typedef struct sits_cuda_fp8 sits_cuda_fp8_t;

/* backend.h's matmul_fp8 on `stream`; *state_p is created on first use (NULL before). Steps of up to
 * gemv_max_n tokens run the GEMV kernel (kernels/gemv.cu: one launch, no fp32 scratch) where it takes the shape. */
sits_status_t sits_cuda_fp8_matmul(sits_cuda_fp8_t **state_p, cublasLtHandle_t lt, void *workspace, size_t workspace_bytes,
                                   cudaStream_t stream, int gemv_max_n, void *y, int y_f32, const void *x, const void *w_q,
                                   const float *w_scale, const void *bias, int n, int in, int out);
/* backend.h's matmul_fp8q: the same GEMM on activations quantised by the caller (xq [n, in] E4M3,
 * xs [n] fp32 device). */
sits_status_t sits_cuda_fp8_matmul_q(sits_cuda_fp8_t **state_p, cublasLtHandle_t lt, void *workspace, size_t workspace_bytes,
                                     cudaStream_t stream, int gemv_max_n, void *y, int y_f32, const void *xq, const float *xs,
                                     const void *w_q, const float *w_scale, const void *bias, int n, int in, int out);
/* [memory plan] Grows the scratch buffers to at least these sizes now (outside any capture), so that
 * no GEMM of the planned shapes allocates later; *state_p is created when NULL. Each buffer ends up
 * sits_cuda_fp8_scratch_bytes(bytes) large. */
sits_status_t sits_cuda_fp8_reserve(sits_cuda_fp8_t **state_p, cudaStream_t stream, size_t xq_bytes, size_t xs_bytes,
                                    size_t acc_bytes);
/* What a scratch buffer asked for `bytes` holds (growth headroom included). */
static inline size_t sits_cuda_fp8_scratch_bytes(size_t bytes) { return bytes ? bytes + bytes / 4 : 0; }
/* cudaMallocs made so far (and their bytes; bytes_p may be NULL); 0 for NULL. */
uint64_t sits_cuda_fp8_allocs(const sits_cuda_fp8_t *s, uint64_t *bytes_p);
void sits_cuda_fp8_destroy(sits_cuda_fp8_t *s);

#endif
