/* attention.cu -- decode/prefill attention over the paged KV cache (first, simple version).
 *
 * out: [n_tokens, n_heads * head_dim] bf16; q: rows of q_row_stride bf16 (head h at h * head_dim);
 * k_cache, v_cache: [n_blocks, block_size, n_kv_heads, head_dim] bf16; seq, pos: [n_tokens] int32;
 * block_tables: [n_seqs, max_blocks] int32. Token t attends to positions
 * max(0, pos[t] - window + 1) .. pos[t] of sequence seq[t] (window 0 = all); query head h reads
 * KV head h / (n_heads / n_kv_heads).
 *
 * One block of ATT_WARPS warps per (token, head). Warp w takes positions p_begin + w, + ATT_WARPS, ...:
 * the lanes hold the head's elements in bf16 pairs (lane + 32 j), a warp sum gives the score,
 * and each warp keeps its own online softmax (running max m, sum l, accumulator). The warps'
 * partial states are merged through shared memory at the end. Scores are in base 2 (q is
 * pre-scaled by scale * log2 e), which is the same softmax. Any context length; fp32 throughout. */
#include "kernels/common.cuh"

#define ATT_WARPS 4
#define ATT_MAX_HEAD_DIM 512

/* NP: bf16 pairs per lane, head_dim <= 64 * NP. */
template <int NP>
static __global__ void __launch_bounds__(ATT_WARPS * 32)
attention_kernel(sits_bf16_t *out, const sits_bf16_t *q, int q_row_stride, const sits_bf16_t *k_cache,
                 const sits_bf16_t *v_cache, const int32_t *seq, const int32_t *pos, const int32_t *block_tables,
                 int max_blocks, int block_size, int n_heads, int group, int head_dim, int kv_dim, int window,
                 float scale_log2)
{
    __shared__ float s_acc[ATT_WARPS][ATT_MAX_HEAD_DIM];
    __shared__ float s_m[ATT_WARPS], s_l[ATT_WARPS];

    int t = blockIdx.x / n_heads, h = blockIdx.x - t * n_heads;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_pairs = head_dim / 2;
    size_t kv_off = (size_t)(h / group) * head_dim;

    const __nv_bfloat162 *q2 = reinterpret_cast<const __nv_bfloat162 *>(q + (size_t)t * q_row_stride + (size_t)h * head_dim);
    float2 qv[NP], acc[NP];
#pragma unroll
    for (int j = 0; j < NP; j++) {
        int c = lane + 32 * j;
        float2 f = c < n_pairs ? __bfloat1622float2(q2[c]) : make_float2(0.0f, 0.0f);
        qv[j] = make_float2(f.x * scale_log2, f.y * scale_log2);
        acc[j] = make_float2(0.0f, 0.0f);
    }

    int p_end = pos[t];
    int p_begin = window > 0 && p_end - window + 1 > 0 ? p_end - window + 1 : 0;
    const int32_t *bt = block_tables + (size_t)seq[t] * max_blocks;
    float m = -INFINITY, l = 0.0f;
    for (int p = p_begin + warp; p <= p_end; p += ATT_WARPS) {
        size_t slot = (size_t)bt[p / block_size] * block_size + (size_t)(p % block_size);
        const __nv_bfloat162 *k2 = reinterpret_cast<const __nv_bfloat162 *>(k_cache + slot * kv_dim + kv_off);
        const __nv_bfloat162 *v2 = reinterpret_cast<const __nv_bfloat162 *>(v_cache + slot * kv_dim + kv_off);
        float2 vv[NP];
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < NP; j++) {
            int c = lane + 32 * j;
            /* V is loaded with K (it does not depend on the score) to overlap the two latencies. */
            if (c < n_pairs) {
                float2 kf = __bfloat1622float2(k2[c]);
                vv[j] = __bfloat1622float2(v2[c]);
                s += qv[j].x * kf.x + qv[j].y * kf.y;
            } else {
                vv[j] = make_float2(0.0f, 0.0f);
            }
        }
        s = sits_k_warp_sum(s);
        float m_new = fmaxf(m, s);
        float corr = exp2f(m - m_new), e = exp2f(s - m_new);
        l = l * corr + e;
#pragma unroll
        for (int j = 0; j < NP; j++) {
            acc[j].x = acc[j].x * corr + e * vv[j].x;
            acc[j].y = acc[j].y * corr + e * vv[j].y;
        }
        m = m_new;
    }

    /* Merge the warps: weight each by 2^(m_w - M); a warp that saw no position has l = 0. */
    if (lane == 0) {
        s_m[warp] = m;
        s_l[warp] = l;
    }
#pragma unroll
    for (int j = 0; j < NP; j++) {
        int c = lane + 32 * j;
        if (c < n_pairs) {
            s_acc[warp][2 * c] = acc[j].x;
            s_acc[warp][2 * c + 1] = acc[j].y;
        }
    }
    __syncthreads();
    float M = s_m[0];
#pragma unroll
    for (int w = 1; w < ATT_WARPS; w++) M = fmaxf(M, s_m[w]);
    float wgt[ATT_WARPS], L = 0.0f;
#pragma unroll
    for (int w = 0; w < ATT_WARPS; w++) {
        wgt[w] = s_l[w] > 0.0f ? exp2f(s_m[w] - M) : 0.0f;
        L += s_l[w] * wgt[w];
    }
    float inv_l = 1.0f / L;
    sits_bf16_t *o = out + (size_t)t * n_heads * head_dim + (size_t)h * head_dim;
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) {
        float v = 0.0f;
#pragma unroll
        for (int w = 0; w < ATT_WARPS; w++) v += s_acc[w][i] * wgt[w];
        o[i] = sits_k_f2bf(v * inv_l);
    }
}

extern "C" sits_status_t sits_k_attention(sits_bf16_t *out, const sits_bf16_t *q, int q_row_stride,
                                          const sits_bf16_t *k_cache, const sits_bf16_t *v_cache, const int32_t *seq,
                                          const int32_t *pos, const int32_t *block_tables, int max_blocks, int block_size,
                                          int n_tokens, int n_heads, int n_kv_heads, int head_dim, int window, float scale,
                                          cudaStream_t stream)
{
    if (n_tokens < 0 || n_heads <= 0 || n_kv_heads <= 0 || n_heads % n_kv_heads || head_dim <= 0 || head_dim % 2 ||
        head_dim > ATT_MAX_HEAD_DIM || q_row_stride % 2 || block_size <= 0 || max_blocks <= 0 ||
        ((uintptr_t)q | (uintptr_t)k_cache | (uintptr_t)v_cache) % 4)
        return SITS_ERR_INVALID;
    if (n_tokens == 0) return SITS_OK;
    long long n_blocks = (long long)n_tokens * n_heads;
    if (n_blocks > 0x7fffffffLL) return SITS_ERR_INVALID;
    int group = n_heads / n_kv_heads, kv_dim = n_kv_heads * head_dim;
    float scale_log2 = scale * 1.4426950408889634f;
    dim3 grid((unsigned)n_blocks), block(ATT_WARPS * 32);
#define ATT_LAUNCH(np_) attention_kernel<np_><<<grid, block, 0, stream>>>(out, q, q_row_stride, k_cache, v_cache, seq, pos, \
        block_tables, max_blocks, block_size, n_heads, group, head_dim, kv_dim, window, scale_log2)
    if (head_dim <= 64) ATT_LAUNCH(1);
    else if (head_dim <= 128) ATT_LAUNCH(2);
    else if (head_dim <= 256) ATT_LAUNCH(4);
    else ATT_LAUNCH(8);
#undef ATT_LAUNCH
    return SITS_K_LAUNCH_STATUS();
}
