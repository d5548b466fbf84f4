/* rope.cu -- rotary position embedding, HF half-split (rotate_half) layout, in place.
 * x: [n, row_stride] bf16; heads 0 .. n_rot_heads-1 of head_dim columns each start at column 0
 * (q heads then k heads of the fused qkv row); pos: [n] int32; inv_freq: [head_dim / 2] fp32.
 * Element i of a head pairs with i + head_dim/2: (a, b) -> (a cos - b sin, b cos + a sin) with
 * the angle (float)pos * inv_freq[i] in fp32 as HF computes it, and full-range sincosf (positions
 * reach 1e5+ radians). One block per token, one thread per (head, pair).
 * [families] sits_k_rope_sel: token t takes inv_long when sel[t] != 0 (longrope's two sets). */
#include "kernels/common.cuh"

static __global__ void rope_kernel(sits_bf16_t *x, int row_stride, int n_rot_heads, int head_dim, const int32_t *pos,
                                   const float *inv_freq, const float *inv_long, const int32_t *sel)
{
    size_t t = blockIdx.x;
    if (sel && sel[t]) inv_freq = inv_long;   /* [families] */
    int half = head_dim / 2, work = n_rot_heads * half;
    float p = (float)pos[t];
    sits_bf16_t *row = x + t * (size_t)row_stride;
    for (int j = threadIdx.x; j < work; j += blockDim.x) {
        int h = j / half, i = j - h * half;
        float s, c;
        sincosf(p * inv_freq[i], &s, &c);
        sits_bf16_t *v = row + (size_t)h * head_dim;
        float a = sits_k_bf2f(v[i]), b = sits_k_bf2f(v[i + half]);
        v[i] = sits_k_f2bf(sits_k_rot_lo(a, b, c, s));
        v[i + half] = sits_k_f2bf(sits_k_rot_hi(a, b, c, s));
    }
}

extern "C" sits_status_t sits_k_rope(sits_bf16_t *x, int n, int row_stride, int n_rot_heads, int head_dim, const int32_t *pos,
                                     const float *inv_freq, cudaStream_t stream)
{
    if (n < 0 || n_rot_heads < 0 || head_dim <= 0 || head_dim % 2 || (long long)n_rot_heads * head_dim > row_stride)
        return SITS_ERR_INVALID;
    if (n == 0 || n_rot_heads == 0) return SITS_OK;
    int threads = sits_k_row_threads((long long)n_rot_heads * (head_dim / 2), 512);
    rope_kernel<<<n, threads, 0, stream>>>(x, row_stride, n_rot_heads, head_dim, pos, inv_freq, NULL, NULL);
    return SITS_K_LAUNCH_STATUS();
}

/* [families] */
extern "C" sits_status_t sits_k_rope_sel(sits_bf16_t *x, int n, int row_stride, int n_rot_heads, int head_dim, const int32_t *pos,
                                         const float *inv_short, const float *inv_long, const int32_t *sel, cudaStream_t stream)
{
    if (n < 0 || n_rot_heads < 0 || head_dim <= 0 || head_dim % 2 || (long long)n_rot_heads * head_dim > row_stride || !sel)
        return SITS_ERR_INVALID;
    if (n == 0 || n_rot_heads == 0) return SITS_OK;
    int threads = sits_k_row_threads((long long)n_rot_heads * (head_dim / 2), 512);
    rope_kernel<<<n, threads, 0, stream>>>(x, row_stride, n_rot_heads, head_dim, pos, inv_short, inv_long, sel);
    return SITS_K_LAUNCH_STATUS();
}
