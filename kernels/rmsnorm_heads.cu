/* rmsnorm_heads.cu -- [families] per-head RMSNorm in place (Qwen3's q_norm / k_norm, Gemma 3's QK-norm).
 * x: [n, row_stride] bf16; the n_heads heads of a row start at column col0, each head_dim wide;
 * w: [head_dim] fp32. head = head / sqrt(mean(head^2) + eps) * w, sum of squares and scaling in fp32.
 * One warp per (row, head); a lane reads its own elements in both passes (in place is safe). */
#include "kernels/common.cuh"

static __global__ void rmsnorm_heads_kernel(sits_bf16_t *x, int n, int row_stride, int col0, int n_heads, int head_dim,
                                            const float *w, float eps)
{
    size_t item = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;   /* (row, head) */
    if (item >= (size_t)n * n_heads) return;
    int lane = threadIdx.x & 31;
    size_t t = item / n_heads, h = item % n_heads;
    sits_bf16_t *v = x + t * (size_t)row_stride + col0 + h * (size_t)head_dim;
    float ss = 0.0f;
    for (int i = lane; i < head_dim; i += 32) {
        float f = sits_k_bf2f(v[i]);
        ss += f * f;
    }
    ss = sits_k_warp_sum(ss);
    float inv = 1.0f / sqrtf(ss / (float)head_dim + eps);
    for (int i = lane; i < head_dim; i += 32) v[i] = sits_k_f2bf(w[i] * (sits_k_bf2f(v[i]) * inv));
}

extern "C" sits_status_t sits_k_rmsnorm_heads(sits_bf16_t *x, int n, int row_stride, int col0, int n_heads, int head_dim,
                                              const float *w, float eps, cudaStream_t stream)
{
    if (n < 0 || n_heads < 0 || head_dim <= 0 || col0 < 0 || col0 + (long long)n_heads * head_dim > row_stride)
        return SITS_ERR_INVALID;
    size_t items = (size_t)n * n_heads;
    if (items == 0) return SITS_OK;
    const int warps = 8;
    size_t blocks = (items + warps - 1) / warps;
    rmsnorm_heads_kernel<<<(unsigned)blocks, warps * 32, 0, stream>>>(x, n, row_stride, col0, n_heads, head_dim, w, eps);
    return SITS_K_LAUNCH_STATUS();
}
