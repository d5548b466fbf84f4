/* silu_mul.cu -- the SwiGLU activation: out[n, dim] = silu(gu[:, :dim]) * gu[:, dim:]; [families] and GeGLU
 * (sits_k_gelu_tanh_mul: gelu(gate) with PyTorch's tanh approximation, 0.5 a (1 + tanh(sqrt(2/pi) (a + 0.044715 a^3))));
 * [gpt-oss] and gpt-oss's clamped SwiGLU (sits_k_swiglu_oai: (clamp(u, -limit, limit) + 1) g sigmoid(alpha g),
 * g = min(gate, limit)).
 * gu: [n, 2 * dim] bf16 (gate then up, the fused gate/up GEMM's output); out: [n, dim] bf16.
 * Elementwise in fp32; a grid-stride loop over groups of V elements (groups never cross a row
 * because V divides dim).
 * [fp8] With q: one block per row instead, which also quantises the row as stored to E4M3 (q [n, dim],
 * q_scale [n]; common.cuh) for the FP8 down projection -- the same out, and the bytes
 * sits_k_quant_fp8_rows would make from it. out may then be NULL (the engine's fused FP8 path reads only
 * q): the quantising pass recomputes each value from gu (the thread's own reads, mostly still in L2)
 * instead of rereading out -- 2 bytes a value less written. */
#include "kernels/common.cuh"

/* [families] GeGLU's activation (Gemma): gelu with PyTorch's tanh approximation, fp32. */
static __device__ __forceinline__ float gelu_tanh_mul1(float a, float b)
{
    const float beta = 0.7978845608028654f, kappa = 0.044715f;   /* sqrt(2/pi) */
    return 0.5f * a * (1.0f + tanhf(beta * (a + kappa * (a * a * a)))) * b;
}

/* The gated activations of glu_launch. */
enum { GLU_SILU = 0, GLU_GELU = 1, GLU_OAI = 2 };

/* ACT: the gated activation, sits_k_silu_mul1 (SwiGLU, common.cuh), gelu_tanh_mul1 (GeGLU) or sits_k_swiglu_oai1
 * (common.cuh; its alpha and limit, unused by the others). */
template <int V, int ACT>
static __global__ void silu_mul_kernel(sits_bf16_t *out, const sits_bf16_t *gu, int dim, size_t n_groups, float alpha,
                                       float limit)
{
    sits_k_pdl_trigger();   /* [perf: pdl] the linear reading this output may start (kernels/gemv.cu) */
    sits_k_pdl_wait();      /* [perf: pdl] launched as a dependent (glu_launch): gu comes from the linear before */
    size_t groups_per_row = (size_t)dim / V;
    for (size_t g = (size_t)blockIdx.x * blockDim.x + threadIdx.x; g < n_groups; g += (size_t)gridDim.x * blockDim.x) {
        size_t t = g / groups_per_row, i = (g - t * groups_per_row) * V;
        const sits_bf16_t *gate = gu + t * 2 * (size_t)dim + i;
        float a[V], b[V];
        sits_k_load<V>(gate, a);
        sits_k_load<V>(gate + dim, b);
#pragma unroll
        for (int k = 0; k < V; k++)
            a[k] = ACT == GLU_GELU  ? gelu_tanh_mul1(a[k], b[k])
                   : ACT == GLU_OAI ? sits_k_swiglu_oai1(a[k], b[k], alpha, limit)
                                    : sits_k_silu_mul1(a[k], b[k]);
        sits_k_store<V>(out + t * (size_t)dim + i, a);
    }
}

template <int V>
static __global__ void silu_mul_fp8_kernel(sits_bf16_t *out, uint8_t *q, float *q_scale, const sits_bf16_t *gu, int dim)
{
    sits_k_pdl_trigger();   /* [perf: pdl] the linear reading this output may start (kernels/gemv.cu) */
    size_t row = blockIdx.x;
    const sits_bf16_t *gate = gu + row * 2 * (size_t)dim;
    sits_bf16_t *orow = out ? out + row * (size_t)dim : NULL;   /* NULL: q only */
    int n_groups = dim / V;
    float mx = 0.0f;
    for (int g = threadIdx.x; g < n_groups; g += blockDim.x) {
        float a[V], b[V];
        sits_k_load<V>(gate + (size_t)g * V, a);
        sits_k_load<V>(gate + dim + (size_t)g * V, b);
#pragma unroll
        for (int k = 0; k < V; k++) a[k] = sits_k_silu_mul1(a[k], b[k]);
        if (orow) sits_k_store<V>(orow + (size_t)g * V, a);
        mx = sits_k_absmax_bf<V>(mx, a);
    }
    float s = sits_k_fp8_scale(sits_k_block_max(mx));
    if (threadIdx.x == 0) q_scale[row] = s;
    for (int g = threadIdx.x; g < n_groups; g += blockDim.x) { /* the thread's own stores (or reads) */
        float f[V];
        if (orow) {
            sits_k_load<V>(orow + (size_t)g * V, f);
        } else {   /* out as it would be stored: the same expression, rounded to bf16 */
            float b[V];
            sits_k_load<V>(gate + (size_t)g * V, f);
            sits_k_load<V>(gate + dim + (size_t)g * V, b);
#pragma unroll
            for (int k = 0; k < V; k++) f[k] = sits_k_round_bf(sits_k_silu_mul1(f[k], b[k]));
        }
        sits_k_store_e4m3<V>(q + row * (size_t)dim + (size_t)g * V, f, s);
    }
}

/* One group of 8 of a row: gate g and up u (bf16 x 8) -> the products as stored (bf16, packed); mx takes their
 * magnitudes (silu_mul_fp8_reg_kernel) */
static __device__ __forceinline__ uint4 silu_mul_group8(const uint4 &g, const uint4 &u, float &mx)
{
    float a[8], b[8];
    sits_k_unpack8(g, a);
    sits_k_unpack8(u, b);
#pragma unroll
    for (int k = 0; k < 8; k++) a[k] = sits_k_silu_mul1(a[k], b[k]);
    mx = sits_k_absmax_bf<8>(mx, a);
    return sits_k_pack8(a);
}

/* [perf: row kernels] The FP8 form with the row in registers (V = 8 only): every load of the row issued before any
 * math (G groups of gate and up a thread), the rounded products kept packed for the quantising pass -- one read
 * of gu, no reread of out or gu. Same values and bytes as silu_mul_fp8_kernel (out rounded to nearest even;
 * q from those rounded values). 8B FP8, 7827 rows of 14336 on the H200 (SITS_CUDA_OP_TIMES=1, the 2048/128
 * offline row): the two-pass kernel above 417 us a call (1.35 TB/s of the 561 MB it must move); this one with
 * up to 256 threads a row (G 8, 224 threads) 369 us, with up to 512 (G 4, 448 threads: twice the warps to
 * hide the division and exp latencies) 280 us -- the launch's choice. */
template <int G>
static __global__ void __launch_bounds__(512) silu_mul_fp8_reg_kernel(sits_bf16_t *out, uint8_t *q, float *q_scale,
                                                                      const sits_bf16_t *gu, int dim)
{
    sits_k_pdl_trigger();   /* [perf: pdl] the linear reading this output may start (kernels/gemv.cu) */
    sits_k_pdl_wait();      /* [perf: pdl] launched as a dependent (sits_k_launch_dep): gu comes from the linear before */
    const size_t row = blockIdx.x;
    const int n_groups = dim / 8;
    const uint4 *gate = reinterpret_cast<const uint4 *>(gu + row * 2 * (size_t)dim), *up = gate + n_groups;
    uint4 ga[G], ub[G];   /* raw bf16 x 8 of gate / up, group threadIdx.x + j * blockDim.x */
#pragma unroll
    for (int j = 0; j < G; j++) {
        const int g = threadIdx.x + j * blockDim.x;
        if (g < n_groups) {
            ga[j] = gate[g];
            ub[j] = up[g];
        }
    }
    float mx = 0.0f;
#pragma unroll
    for (int j = 0; j < G; j++) {   /* ga[j] becomes the rounded product, packed */
        const int g = threadIdx.x + j * blockDim.x;
        if (g < n_groups) {
            ga[j] = silu_mul_group8(ga[j], ub[j], mx);
            if (out) reinterpret_cast<uint4 *>(out + row * (size_t)dim)[g] = ga[j];
        }
    }
    sits_k_reg_row_to_e4m3<G>(ga, mx, n_groups, q + row * (size_t)dim, q_scale + row);
}

/* The elementwise form: a grid-stride loop over groups of 8 (vec) or 1 elements. */
template <int ACT>
static sits_status_t glu_launch(sits_bf16_t *out, const sits_bf16_t *gu, int n, int dim, bool vec, cudaStream_t stream,
                                float alpha = 0.0f, float limit = 0.0f)
{
    size_t n_groups = (size_t)n * dim / (vec ? 8 : 1);
    const int threads = 256;
    size_t blocks = (n_groups + threads - 1) / threads;
    if (blocks > 132 * 32) blocks = 132 * 32; /* enough to fill an H100/H200; the loop strides over the rest */
    /* [perf: pdl] a dependent launch (common.cuh sits_k_launch_dep): placed while the gate/up linear before it finishes
     * (the GEMVs signal it past their k loops: kernels/gemv.cu [perf: gemv trigger]) */
    const cudaError_t e = vec ? sits_k_launch_dep(silu_mul_kernel<8, ACT>, (unsigned)blocks, threads, 0, stream, out, gu, dim, n_groups,
                                                  alpha, limit)
                              : sits_k_launch_dep(silu_mul_kernel<1, ACT>, (unsigned)blocks, threads, 0, stream, out, gu, dim, n_groups,
                                                  alpha, limit);
    return e == cudaSuccess ? SITS_K_LAUNCH_STATUS() : SITS_ERR_CUDA;
}

extern "C" sits_status_t sits_k_silu_mul(sits_bf16_t *out, uint8_t *q, float *q_scale, const sits_bf16_t *gu, int n, int dim,
                                         cudaStream_t stream)
{
    if (n < 0 || dim <= 0 || (q != NULL) != (q_scale != NULL) || (!out && !q)) return SITS_ERR_INVALID;
    if (n == 0) return SITS_OK;
    bool vec = sits_k_vec8_ok(gu, dim, dim) && sits_k_aligned16(out) && ((uintptr_t)q & 7u) == 0;
    if (q) {
        int threads = 0, g = vec ? sits_k_reg_row_g(dim / 8, 512, &threads) : 0;   /* [perf: row kernels] */
        cudaError_t e = cudaSuccess;   /* [perf: pdl] dependent launches (common.cuh sits_k_launch_dep) */
        if (g == 1) e = sits_k_launch_dep(silu_mul_fp8_reg_kernel<1>, n, threads, 0, stream, out, q, q_scale, gu, dim);
        else if (g == 2) e = sits_k_launch_dep(silu_mul_fp8_reg_kernel<2>, n, threads, 0, stream, out, q, q_scale, gu, dim);
        else if (g == 4) e = sits_k_launch_dep(silu_mul_fp8_reg_kernel<4>, n, threads, 0, stream, out, q, q_scale, gu, dim);
        else if (g == 8) e = sits_k_launch_dep(silu_mul_fp8_reg_kernel<8>, n, threads, 0, stream, out, q, q_scale, gu, dim);
        if (g) return e == cudaSuccess ? SITS_K_LAUNCH_STATUS() : SITS_ERR_CUDA;
        threads = sits_k_row_threads(vec ? dim / 8 : dim, 512);
        if (vec) silu_mul_fp8_kernel<8><<<n, threads, 0, stream>>>(out, q, q_scale, gu, dim);
        else silu_mul_fp8_kernel<1><<<n, threads, 0, stream>>>(out, q, q_scale, gu, dim);
        return SITS_K_LAUNCH_STATUS();
    }
    return glu_launch<GLU_SILU>(out, gu, n, dim, vec, stream);
}

/* [families] GeGLU: as sits_k_silu_mul without the fp8 form. */
extern "C" sits_status_t sits_k_gelu_tanh_mul(sits_bf16_t *out, const sits_bf16_t *gu, int n, int dim, cudaStream_t stream)
{
    if (n < 0 || dim <= 0) return SITS_ERR_INVALID;
    if (n == 0) return SITS_OK;
    return glu_launch<GLU_GELU>(out, gu, n, dim, sits_k_vec8_ok(gu, dim, dim) && sits_k_aligned16(out), stream);
}

/* [gpt-oss] gpt-oss's clamped SwiGLU: as sits_k_gelu_tanh_mul (any dim: groups of 8 when dim % 8 == 0 and aligned,
 * e.g. 2880 / tp for tp 1-8, else one element a thread). */
extern "C" sits_status_t sits_k_swiglu_oai(sits_bf16_t *out, const sits_bf16_t *gu, int n, int dim, float alpha, float limit,
                                           cudaStream_t stream)
{
    if (n < 0 || dim <= 0 || !(limit >= 0.0f)) return SITS_ERR_INVALID;
    if (n == 0) return SITS_OK;
    return glu_launch<GLU_OAI>(out, gu, n, dim, sits_k_vec8_ok(gu, dim, dim) && sits_k_aligned16(out), stream, alpha, limit);
}
