/* fp8.cu -- [fp8] per-token FP8 E4M3 quantisation of activations, and the scale epilogue of the
 * fallback FP8 GEMM path (see src/backend/cuda_fp8.c).
 *
 * quant_fp8_rows: one block per row of x [n, dim] bf16; s[t] = absmax(row) / 448 (1 for an all-zero
 * row), q[t, i] = e4m3(x / s) with an IEEE division and __NV_SATFINITE round-to-nearest-even: the
 * definition of util/dtype.h (sits_fp8_scale, sits_f32_to_f8e4m3) that the cpu backend follows.
 * The fused producers (rmsnorm.cu's add_rmsnorm_f32res, silu_mul.cu, allreduce.cu's fused kernel)
 * quantise their own output rows the same way (common.cuh), bit for bit this kernel's result.
 * fp8_scale_out: y[t, o] = acc[t, o] * xs[t] * ws[o] (+ bias[o]); acc fp32 [n, m] row-major (the
 * column-major [m, n] GEMM output), y bf16 or fp32. */
#include "kernels/common.cuh"

template <int V>
static __global__ void quant_fp8_rows_kernel(uint8_t *q, float *scale, const sits_bf16_t *x, int dim)
{
    sits_k_pdl_trigger();   /* [perf: pdl] the linear reading this output may start (kernels/gemv.cu) */
    size_t row = blockIdx.x;
    const sits_bf16_t *xr = x + row * dim;
    uint8_t *qr = q + row * dim;
    int n_groups = dim / V;
    float mx = 0.0f;
    for (int g = threadIdx.x; g < n_groups; g += blockDim.x) {
        float f[V];
        sits_k_load<V>(xr + (size_t)g * V, f);
        mx = sits_k_absmax_bf<V>(mx, f);
    }
    float s = sits_k_fp8_scale(sits_k_block_max(mx));
    if (threadIdx.x == 0) scale[row] = s;
    for (int g = threadIdx.x; g < n_groups; g += blockDim.x) {
        float f[V];
        sits_k_load<V>(xr + (size_t)g * V, f);
        sits_k_store_e4m3<V>(qr + (size_t)g * V, f, s);
    }
}

/* [perf: row kernels] the same with the row in registers (V = 8): all of a thread's loads first, one read of x
 * (silu_mul.cu's silu_mul_fp8_reg_kernel) */
template <int G>
static __global__ void __launch_bounds__(512) quant_fp8_rows_reg_kernel(uint8_t *q, float *scale, const sits_bf16_t *x, int dim)
{
    sits_k_pdl_trigger();   /* [perf: pdl] the linear reading this output may start (kernels/gemv.cu) */
    sits_k_pdl_wait();      /* [perf: pdl] launched as a dependent (sits_k_launch_dep): x comes from the kernel before */
    const size_t row = blockIdx.x;
    const int n_groups = dim / 8;
    const uint4 *xr = reinterpret_cast<const uint4 *>(x + row * (size_t)dim);
    uint4 u[G];
#pragma unroll
    for (int j = 0; j < G; j++) {
        const int g = threadIdx.x + j * blockDim.x;
        if (g < n_groups) u[j] = xr[g];
    }
    float mx = 0.0f;
#pragma unroll
    for (int j = 0; j < G; j++) {
        if (threadIdx.x + j * blockDim.x < n_groups) {
            float f[8];
            sits_k_unpack8(u[j], f);
            mx = sits_k_absmax_bf<8>(mx, f);
        }
    }
    sits_k_reg_row_to_e4m3<G>(u, mx, n_groups, q + row * (size_t)dim, scale + row);
}

extern "C" sits_status_t sits_k_quant_fp8_rows(uint8_t *q, float *scale, const sits_bf16_t *x, int n, int dim,
                                               cudaStream_t stream)
{
    if (n < 0 || dim <= 0) return SITS_ERR_INVALID;
    if (n == 0) return SITS_OK;
    bool vec = sits_k_vec8_ok(x, dim, dim) && ((uintptr_t)q & 7u) == 0;
    int threads = 0, g = vec ? sits_k_reg_row_g(dim / 8, 256, &threads) : 0;   /* [perf: row kernels] */
    cudaError_t e = cudaSuccess;
    if (g == 1) e = sits_k_launch_dep(quant_fp8_rows_reg_kernel<1>, n, threads, 0, stream, q, scale, x, dim);
    else if (g == 2) e = sits_k_launch_dep(quant_fp8_rows_reg_kernel<2>, n, threads, 0, stream, q, scale, x, dim);
    else if (g == 4) e = sits_k_launch_dep(quant_fp8_rows_reg_kernel<4>, n, threads, 0, stream, q, scale, x, dim);
    else if (g == 8) e = sits_k_launch_dep(quant_fp8_rows_reg_kernel<8>, n, threads, 0, stream, q, scale, x, dim);
    if (g) return e == cudaSuccess ? SITS_K_LAUNCH_STATUS() : SITS_ERR_CUDA;
    threads = sits_k_row_threads(vec ? dim / 8 : dim, 512);
    if (vec) quant_fp8_rows_kernel<8><<<n, threads, 0, stream>>>(q, scale, x, dim);
    else quant_fp8_rows_kernel<1><<<n, threads, 0, stream>>>(q, scale, x, dim);
    return SITS_K_LAUNCH_STATUS();
}

static __global__ void fp8_scale_out_kernel(void *y, int y_f32, const float *acc, const float *xs, const float *ws,
                                            const sits_bf16_t *bias, int n, int m)
{
    size_t total = (size_t)n * m;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t t = i / m, o = i - t * m;
        float v = acc[i] * xs[t] * ws[o];
        if (bias) v += sits_k_bf2f(bias[o]);
        if (y_f32) reinterpret_cast<float *>(y)[i] = v;
        else reinterpret_cast<sits_bf16_t *>(y)[i] = sits_k_f2bf(v);
    }
}

extern "C" sits_status_t sits_k_fp8_scale_out(void *y, int y_f32, const float *acc, const float *xs, const float *ws,
                                              const sits_bf16_t *bias, int n, int m, cudaStream_t stream)
{
    if (n < 0 || m <= 0) return SITS_ERR_INVALID;
    if (n == 0) return SITS_OK;
    size_t total = (size_t)n * m, blocks = (total + 255) / 256;
    if (blocks > 132 * 16) blocks = 132 * 16;
    fp8_scale_out_kernel<<<(unsigned)blocks, 256, 0, stream>>>(y, y_f32, acc, xs, ws, bias, n, m);
    return SITS_K_LAUNCH_STATUS();
}
