/* silu_mul.cu -- the SwiGLU activation: out[n, dim] = silu(gu[:, :dim]) * gu[:, dim:].
 * gu: [n, 2 * dim] bf16 (gate then up, the fused gate/up GEMM's output); out: [n, dim] bf16.
 * Elementwise in fp32; a grid-stride loop over groups of V elements (groups never cross a row
 * because V divides dim). */
#include "kernels/common.cuh"

template <int V>
static __global__ void silu_mul_kernel(sits_bf16_t *out, const sits_bf16_t *gu, int dim, size_t n_groups)
{
    size_t groups_per_row = (size_t)dim / V;
    for (size_t g = (size_t)blockIdx.x * blockDim.x + threadIdx.x; g < n_groups; g += (size_t)gridDim.x * blockDim.x) {
        size_t t = g / groups_per_row, i = (g - t * groups_per_row) * V;
        const sits_bf16_t *gate = gu + t * 2 * (size_t)dim + i;
        float a[V], b[V];
        sits_k_load<V>(gate, a);
        sits_k_load<V>(gate + dim, b);
#pragma unroll
        for (int k = 0; k < V; k++) a[k] = a[k] / (1.0f + expf(-a[k])) * b[k];
        sits_k_store<V>(out + t * (size_t)dim + i, a);
    }
}

extern "C" sits_status_t sits_k_silu_mul(sits_bf16_t *out, const sits_bf16_t *gu, int n, int dim, cudaStream_t stream)
{
    if (n < 0 || dim <= 0) return SITS_ERR_INVALID;
    if (n == 0) return SITS_OK;
    bool vec = sits_k_vec8_ok(gu, dim, dim) && sits_k_aligned16(out);
    size_t n_groups = (size_t)n * dim / (vec ? 8 : 1);
    const int threads = 256;
    size_t blocks = (n_groups + threads - 1) / threads;
    if (blocks > 132 * 32) blocks = 132 * 32; /* enough to fill an H100/H200; the loop strides over the rest */
    if (vec) silu_mul_kernel<8><<<(unsigned)blocks, threads, 0, stream>>>(out, gu, dim, n_groups);
    else silu_mul_kernel<1><<<(unsigned)blocks, threads, 0, stream>>>(out, gu, dim, n_groups);
    return SITS_K_LAUNCH_STATUS();
}
