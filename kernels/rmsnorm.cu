/* rmsnorm.cu -- RMSNorm and the fused residual-add + RMSNorm between sublayers.
 * x, out, residual: [n, dim] bf16 (residual fp32 in the _f32res form); w: [dim] fp32 (the model's norm
 * weights are fp32 on the device: Gemma's 1 + w exact). out = x / sqrt(mean(x^2) + eps) * w, with the
 * sum of squares and the scaling in fp32. One block per row; each thread owns the same element
 * groups in both passes, so out may alias x (and the fused form rereads its own residual writes).
 * [fp8] The fp32-residual form can also quantise its output per row to E4M3 for the FP8 GEMM that
 * reads it (the activation quantisation inside the preceding fused kernel); out may then be NULL (the
 * engine's fused FP8 path: only the E4M3 rows are read), and the quantising pass recomputes the bf16
 * values instead of rereading them -- the same floats, 2 bytes a value less written. */
#include "kernels/common.cuh"

/* [perf: fp32 residual] V consecutive floats at p <-> f[V] (V = 8: two float4, 32-byte aligned). */
template <int V> static __device__ __forceinline__ void ld_f32(const float *p, float (&f)[V])
{
    if constexpr (V == 8) {
        float4 a = reinterpret_cast<const float4 *>(p)[0], b = reinterpret_cast<const float4 *>(p)[1];
        f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
        f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
    } else {
#pragma unroll
        for (int k = 0; k < V; k++) f[k] = p[k];
    }
}

template <int V> static __device__ __forceinline__ void st_f32(float *p, const float (&f)[V])
{
    if constexpr (V == 8) {
        reinterpret_cast<float4 *>(p)[0] = make_float4(f[0], f[1], f[2], f[3]);
        reinterpret_cast<float4 *>(p)[1] = make_float4(f[4], f[5], f[6], f[7]);
    } else {
#pragma unroll
        for (int k = 0; k < V; k++) p[k] = f[k];
    }
}

template <int V>
static __global__ void rmsnorm_kernel(sits_bf16_t *out, const sits_bf16_t *x, const float *w, int dim, float eps)
{
    sits_k_pdl_trigger();   /* [perf: pdl] the linear reading this output may start (kernels/gemv.cu) */
    size_t row = blockIdx.x;
    const sits_bf16_t *xr = x + row * dim;
    sits_bf16_t *orow = out + row * dim;
    int n_groups = dim / V;
    float ss = 0.0f;
    for (int g = threadIdx.x; g < n_groups; g += blockDim.x) {
        float f[V];
        sits_k_load<V>(xr + (size_t)g * V, f);
#pragma unroll
        for (int k = 0; k < V; k++) ss += f[k] * f[k];
    }
    ss = sits_k_block_sum(ss);
    float inv = 1.0f / sqrtf(ss / (float)dim + eps);
    for (int g = threadIdx.x; g < n_groups; g += blockDim.x) {
        float f[V], wf[V];
        sits_k_load<V>(xr + (size_t)g * V, f);
        ld_f32<V>(w + (size_t)g * V, wf);
#pragma unroll
        for (int k = 0; k < V; k++) f[k] = wf[k] * (f[k] * inv);
        sits_k_store<V>(orow + (size_t)g * V, f);
    }
}

template <int V>
static __global__ void add_rmsnorm_kernel(sits_bf16_t *out, sits_bf16_t *residual, const sits_bf16_t *x, const float *w,
                                          int dim, float eps)
{
    sits_k_pdl_trigger();   /* [perf: pdl] the linear reading this output may start (kernels/gemv.cu) */
    size_t row = blockIdx.x;
    sits_bf16_t *rr = residual + row * dim;
    const sits_bf16_t *xr = x + row * dim;
    sits_bf16_t *orow = out + row * dim;
    int n_groups = dim / V;
    float ss = 0.0f;
    for (int g = threadIdx.x; g < n_groups; g += blockDim.x) {
        float r[V], f[V];
        sits_k_load<V>(rr + (size_t)g * V, r);
        sits_k_load<V>(xr + (size_t)g * V, f);
#pragma unroll
        for (int k = 0; k < V; k++) {
            /* Normalise the residual as stored (bf16), which is what the next sublayer adds to. */
            r[k] = __bfloat162float(__float2bfloat16_rn(r[k] + f[k]));
            ss += r[k] * r[k];
        }
        sits_k_store<V>(rr + (size_t)g * V, r);
    }
    ss = sits_k_block_sum(ss);
    float inv = 1.0f / sqrtf(ss / (float)dim + eps);
    for (int g = threadIdx.x; g < n_groups; g += blockDim.x) {
        float r[V], wf[V];
        sits_k_load<V>(rr + (size_t)g * V, r);
        ld_f32<V>(w + (size_t)g * V, wf);
#pragma unroll
        for (int k = 0; k < V; k++) r[k] = wf[k] * (r[k] * inv);
        sits_k_store<V>(orow + (size_t)g * V, r);
    }
}

/* [perf: fp32 residual] residual (fp32) += x (bf16), never rounded; out = rmsnorm(residual) * w.
 * Same thread <-> element mapping in both passes (a thread rereads only its own residual writes).
 * [fp8] Q: also q [n, dim] E4M3 + q_scale [n] of out as stored (common.cuh), from a third pass over
 * the thread's own out writes -- the bytes sits_k_quant_fp8_rows makes from out; out NULL: the third
 * pass recomputes them from the thread's own residual writes (bf16-rounded as out would hold them). */
template <int V, bool Q>
static __global__ void add_rmsnorm_f32res_kernel(sits_bf16_t *out, uint8_t *q, float *q_scale, float *residual,
                                                 const sits_bf16_t *x, const float *w, int dim, float eps)
{
    sits_k_pdl_trigger();   /* [perf: pdl] the linear reading this output may start (kernels/gemv.cu) */
    size_t row = blockIdx.x;
    float *rr = residual + row * dim;
    const sits_bf16_t *xr = x + row * dim;
    sits_bf16_t *orow = out ? out + row * dim : NULL;   /* [fp8] NULL: only q (Q) */
    int n_groups = dim / V;
    float ss = 0.0f;
    for (int g = threadIdx.x; g < n_groups; g += blockDim.x) {
        float f[V], r[V];
        sits_k_load<V>(xr + (size_t)g * V, f);
        ld_f32<V>(rr + (size_t)g * V, r);
#pragma unroll
        for (int k = 0; k < V; k++) {
            r[k] += f[k];
            ss += r[k] * r[k];
        }
        st_f32<V>(rr + (size_t)g * V, r);
    }
    ss = sits_k_block_sum(ss);
    float inv = 1.0f / sqrtf(ss / (float)dim + eps);
    float mx = 0.0f;
    for (int g = threadIdx.x; g < n_groups; g += blockDim.x) {
        float r[V], wf[V];
        ld_f32<V>(rr + (size_t)g * V, r);
        ld_f32<V>(w + (size_t)g * V, wf);
#pragma unroll
        for (int k = 0; k < V; k++) r[k] = wf[k] * (r[k] * inv);
        if (!Q || orow) sits_k_store<V>(orow + (size_t)g * V, r);
        if (Q) mx = sits_k_absmax_bf<V>(mx, r);
    }
    if (Q) {
        float s = sits_k_fp8_scale(sits_k_block_max(mx));
        if (threadIdx.x == 0) q_scale[row] = s;
        for (int g = threadIdx.x; g < n_groups; g += blockDim.x) {
            float f[V];
            if (orow) {
                sits_k_load<V>(orow + (size_t)g * V, f);
            } else {   /* out as it would be stored: the same products, rounded to bf16 */
                float wf[V];
                ld_f32<V>(rr + (size_t)g * V, f);
                ld_f32<V>(w + (size_t)g * V, wf);
#pragma unroll
                for (int k = 0; k < V; k++) f[k] = sits_k_round_bf(wf[k] * (f[k] * inv));
            }
            sits_k_store_e4m3<V>(q + row * dim + (size_t)g * V, f, s);
        }
    }
}

/* [perf: row kernels] add_rmsnorm_f32res_kernel<8, Q> with the row in registers: a thread's G groups (threadIdx.x +
 * j blockDim.x, the plain kernel's groups in its order) of x, residual and w are all requested before any math, and
 * neither the residual nor out is read back: the sums of squares, the block's sum, the products, the absmax and the
 * E4M3 bytes are the plain kernel's at the same thread count, bit for bit (test_fp8_parity runs both). At batch 1 a
 * norm is one block on one SM: the plain kernel's three passes were three dependent round trips to L2 (5.7 us a call
 * in the batch-1 FP8 profile of bench/RESULTS.md). */
template <int G, bool Q>
static __global__ void __launch_bounds__(256) add_rmsnorm_f32res_reg_kernel(sits_bf16_t *out, uint8_t *q, float *q_scale,
                                                                            float *residual, const sits_bf16_t *x,
                                                                            const float *w, int dim, float eps)
{
    sits_k_pdl_trigger();   /* [perf: pdl] the linear reading this output may start (kernels/gemv.cu) */
    const size_t row = blockIdx.x;
    float *rr = residual + row * dim;
    const uint4 *xr = reinterpret_cast<const uint4 *>(x + row * dim);
    const int n_groups = dim / 8;
    float r[G][8], wf[G][8];   /* the thread's groups of the residual (then out), of w */
    uint4 xv[G];
#pragma unroll
    for (int j = 0; j < G; j++) {   /* w: no kernel writes it */
        const int g = threadIdx.x + j * blockDim.x;
        if (g < n_groups) ld_f32<8>(w + (size_t)g * 8, wf[j]);
    }
    sits_k_pdl_wait();   /* [perf: pdl] launched as a dependent: x and the residual come from the kernels before */
#pragma unroll
    for (int j = 0; j < G; j++) {
        const int g = threadIdx.x + j * blockDim.x;
        if (g < n_groups) {
            xv[j] = xr[g];
            ld_f32<8>(rr + (size_t)g * 8, r[j]);
        }
    }
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < G; j++) {
        const int g = threadIdx.x + j * blockDim.x;
        if (g < n_groups) {
            float f[8];
            sits_k_unpack8(xv[j], f);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                r[j][k] += f[k];
                ss += r[j][k] * r[j][k];
            }
            st_f32<8>(rr + (size_t)g * 8, r[j]);
        }
    }
    ss = sits_k_block_sum(ss);
    const float inv = 1.0f / sqrtf(ss / (float)dim + eps);
    float mx = 0.0f;
#pragma unroll
    for (int j = 0; j < G; j++) {   /* xv[j] becomes out's group as stored (packed bf16) */
        const int g = threadIdx.x + j * blockDim.x;
        if (g < n_groups) {
#pragma unroll
            for (int k = 0; k < 8; k++) r[j][k] = wf[j][k] * (r[j][k] * inv);
            xv[j] = sits_k_pack8(r[j]);
            if (out) reinterpret_cast<uint4 *>(out + row * dim)[g] = xv[j];
            if (Q) mx = sits_k_absmax_bf<8>(mx, r[j]);
        }
    }
    if (Q) sits_k_reg_row_to_e4m3<G>(xv, mx, n_groups, q + row * dim, q_scale + row);
}

extern "C" sits_status_t sits_k_rmsnorm(sits_bf16_t *out, const sits_bf16_t *x, const float *w, int n, int dim,
                                        float eps, cudaStream_t stream)
{
    if (n < 0 || dim <= 0) return SITS_ERR_INVALID;
    if (n == 0) return SITS_OK;
    bool vec = sits_k_vec8_ok(x, dim, dim) && sits_k_aligned16(out) && sits_k_aligned16(w);
    int threads = sits_k_row_threads(vec ? dim / 8 : dim, 256);
    if (vec) rmsnorm_kernel<8><<<n, threads, 0, stream>>>(out, x, w, dim, eps);
    else rmsnorm_kernel<1><<<n, threads, 0, stream>>>(out, x, w, dim, eps);
    return SITS_K_LAUNCH_STATUS();
}

extern "C" sits_status_t sits_k_add_rmsnorm(sits_bf16_t *out, sits_bf16_t *residual, const sits_bf16_t *x,
                                            const float *w, int n, int dim, float eps, cudaStream_t stream)
{
    if (n < 0 || dim <= 0) return SITS_ERR_INVALID;
    if (n == 0) return SITS_OK;
    bool vec = sits_k_vec8_ok(x, dim, dim) && sits_k_aligned16(out) && sits_k_aligned16(residual) && sits_k_aligned16(w);
    int threads = sits_k_row_threads(vec ? dim / 8 : dim, 256);
    if (vec) add_rmsnorm_kernel<8><<<n, threads, 0, stream>>>(out, residual, x, w, dim, eps);
    else add_rmsnorm_kernel<1><<<n, threads, 0, stream>>>(out, residual, x, w, dim, eps);
    return SITS_K_LAUNCH_STATUS();
}

extern "C" sits_status_t sits_k_add_rmsnorm_f32res(sits_bf16_t *out, uint8_t *q, float *q_scale, float *residual,
                                                   const sits_bf16_t *x, const float *w, int n, int dim, float eps,
                                                   cudaStream_t stream)
{
    if (n < 0 || dim <= 0 || (q != NULL) != (q_scale != NULL) || (!out && !q)) return SITS_ERR_INVALID;
    if (n == 0) return SITS_OK;
    /* V = 8: the fp32 residual moves as two float4 per group (16-byte aligned base, dim % 8 == 0);
     * q rows then start 8-byte aligned. */
    bool vec = sits_k_vec8_ok(x, dim, dim) && sits_k_aligned16(out) && sits_k_aligned16(residual) && sits_k_aligned16(w) &&
               ((uintptr_t)q & 7u) == 0;
    int threads = sits_k_row_threads(vec ? dim / 8 : dim, 256);
    /* [perf: row kernels] up to 8 groups a thread (rows of <= 16384 at 256 threads): the register-resident kernel, the
     * same thread count and bits; SITS_NORM_REG=0 keeps the plain kernel (A/B, test_fp8_parity) */
    const char *reg_env = getenv("SITS_NORM_REG");
    const int gpt = (dim / 8 + threads - 1) / threads, g = gpt <= 1 ? 1 : gpt <= 2 ? 2 : gpt <= 4 ? 4 : gpt <= 8 ? 8 : 0;
    if (vec && g && !(reg_env && atoi(reg_env) == 0)) {
        /* [perf: pdl] a programmatic dependent launch (sits_k_launch_dep): its blocks are placed while the linear before
         * it drains; they read w, then wait for it */
        cudaError_t e = cudaSuccess;
#define NR_LAUNCH(G_)                                                                                                    \
    do {                                                                                                                 \
        if (q) e = sits_k_launch_dep(add_rmsnorm_f32res_reg_kernel<G_, true>, n, threads, 0, stream, out, q, q_scale, residual, x, w, dim, eps); \
        else e = sits_k_launch_dep(add_rmsnorm_f32res_reg_kernel<G_, false>, n, threads, 0, stream, out, q, q_scale, residual, x, w, dim, eps); \
    } while (0)
        if (g == 1) NR_LAUNCH(1);
        else if (g == 2) NR_LAUNCH(2);
        else if (g == 4) NR_LAUNCH(4);
        else NR_LAUNCH(8);
#undef NR_LAUNCH
        return e == cudaSuccess ? SITS_K_LAUNCH_STATUS() : SITS_ERR_CUDA;
    }
    if (vec && q) add_rmsnorm_f32res_kernel<8, true><<<n, threads, 0, stream>>>(out, q, q_scale, residual, x, w, dim, eps);
    else if (vec) add_rmsnorm_f32res_kernel<8, false><<<n, threads, 0, stream>>>(out, q, q_scale, residual, x, w, dim, eps);
    else if (q) add_rmsnorm_f32res_kernel<1, true><<<n, threads, 0, stream>>>(out, q, q_scale, residual, x, w, dim, eps);
    else add_rmsnorm_f32res_kernel<1, false><<<n, threads, 0, stream>>>(out, q, q_scale, residual, x, w, dim, eps);
    return SITS_K_LAUNCH_STATUS();
}
