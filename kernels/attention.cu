/* attention.cu -- paged attention: the dispatcher of sits_k_attention and the generic kernel.
 *
 * out: [n_tokens, n_heads * head_dim] bf16; q: rows of q_row_stride bf16 (head h at h * head_dim);
 * k_cache, v_cache: [n_blocks, block_size, n_kv_heads, head_dim] bf16; seq, pos: [n_tokens] int32;
 * block_tables: [n_seqs, max_blocks] int32. Token t attends to positions
 * max(0, pos[t] - window + 1) .. pos[t] of sequence seq[t] (window 0 = all); query head h reads
 * KV head h / (n_heads / n_kv_heads).
 *
 * Dispatch (host-visible arguments only, so a captured CUDA graph replays correctly):
 *  - fast path (head_dim 64 or 128, q / caches 16-byte aligned, q_row_stride % 8 == 0, a
 *    workspace with n_sms > 0), n_tokens >= ATT_PF_MIN_TOKENS and room for the token list in the
 *    scratch: the prefill kernel (attention_prefill.cu) over 64- or 128-row tiles, started heaviest
 *    first (att_launch_prefill ranks them as it zeroes the list's length), which computes the
 *    rows of sequences with >= 16 rows in a tile and lists the others; then the split-K decode
 *    kernel (attention_decode.cu) over the listed tokens (its last CTA of a split token merges the partials);
 *  - fast path, fewer tokens: the decode kernel over all tokens (split-K merged in it);
 *  - anything else: attention_generic_kernel below (any head_dim <= 512, even).
 *
 * Generic kernel: one block of ATT_WARPS warps per (token, head). Warp w takes positions p_begin + w, + ATT_WARPS, ...:
 * the lanes hold the head's elements in bf16 pairs (lane + 32 j), a warp sum gives the score,
 * and each warp keeps its own online softmax (running max m, sum l, accumulator). The warps'
 * partial states are merged through shared memory at the end. Scores are in base 2 (q is
 * pre-scaled by scale * log2 e), which is the same softmax. Any context length; fp32 throughout.
 *
 * [int8 kv] [fp8 kv] sits_k_attention_q8 takes the same route over int8 / E4M3 caches (block units,
 * see sits_kernels.h): the decode kernel reads the 8-bit tiles straight into its f16 MMA operands
 * (attention_decode.cu), the prefill kernel stages each tile and widens it to bf16 in shared memory
 * (attention_mma.cuh), the generic kernel reads q * scale in fp32.
 *
 * [gpt-oss] Attention sinks (sits_k_attention_softcap's sinks, fp32 [n_heads]): head h's e^sinks[h] joins each of its
 * rows' softmax denominators, never the numerator. Every kernel adds att_sink (attention_mma.cuh) to a row's sum l
 * where it normalises the row's output, and only there: the generic kernel after merging its warps, the prefill
 * kernel's epilogue, the decode kernel's single-partition output or its split-K merge (not the partials). */
#include "kernels/attention_mma.cuh"

#include <stdlib.h>
#include <string.h>

#define ATT_PF_MIN_TOKENS 64  /* batches of at least this many tokens also run the prefill kernel */
#define ATT_WARPS 4
#define ATT_MAX_HEAD_DIM 512

/* NP: bf16 pairs per lane, head_dim <= 64 * NP. QM: [int8 kv] [fp8 kv] SITS_K_KV_I8 / _F8: 8-bit caches
 * of block units of kv_unit bytes (scales kv_qbytes into a unit), read as q * scale in fp32. */
template <int NP, int QM>
static __global__ void __launch_bounds__(ATT_WARPS * 32)
attention_generic_kernel(sits_bf16_t *out, const sits_bf16_t *q, int q_row_stride, const sits_bf16_t *k_cache,
                 const sits_bf16_t *v_cache, const int32_t *seq, const int32_t *pos, const int32_t *block_tables,
                 int max_blocks, int block_size, int n_heads, int group, int head_dim, int kv_dim, int window,
                 float scale_log2, long long kv_unit, int kv_qbytes, float softcap_log2, const float *sinks)
{
    sits_k_pdl_trigger();   /* [perf: pdl] the linear reading this output may start (kernels/gemv.cu) */
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
        float2 vv[NP];
        float s = 0.0f;
        if (QM != SITS_K_KV_BF16) {
            /* [int8 kv] row (p % block_size, kv head) of block bt[p / block_size]: q pairs and the scale */
            size_t row = (size_t)(p % block_size) * (size_t)(kv_dim / head_dim) + kv_off / (size_t)head_dim;
            size_t unit = (size_t)bt[p / block_size] * (size_t)kv_unit;
            const unsigned char *ku = reinterpret_cast<const unsigned char *>(k_cache) + unit;
            const unsigned char *vu = reinterpret_cast<const unsigned char *>(v_cache) + unit;
            const char2 *k2 = reinterpret_cast<const char2 *>(ku + row * head_dim);
            const char2 *v2 = reinterpret_cast<const char2 *>(vu + row * head_dim);
            const float ks = reinterpret_cast<const float *>(ku + kv_qbytes)[row];
            const float vs = reinterpret_cast<const float *>(vu + kv_qbytes)[row];
#pragma unroll
            for (int j = 0; j < NP; j++) {
                int c = lane + 32 * j;
                if (c < n_pairs) {
                    char2 kq = k2[c], vq = v2[c];
                    float2 kf = att_q8_pair<QM>(kq), vf = att_q8_pair<QM>(vq);
                    vv[j] = make_float2(vf.x * vs, vf.y * vs);
                    s += qv[j].x * (kf.x * ks) + qv[j].y * (kf.y * ks);
                } else {
                    vv[j] = make_float2(0.0f, 0.0f);
                }
            }
        } else {
            const __nv_bfloat162 *k2 = reinterpret_cast<const __nv_bfloat162 *>(k_cache + slot * kv_dim + kv_off);
            const __nv_bfloat162 *v2 = reinterpret_cast<const __nv_bfloat162 *>(v_cache + slot * kv_dim + kv_off);
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
        }
        s = att_cap(sits_k_warp_sum(s), softcap_log2);   /* [families] */
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
    if (sinks) L += att_sink(sinks, h, M); /* [gpt-oss] the head's sink in the denominator (M: the row's maximum) */
    float inv_l = 1.0f / L;
    sits_bf16_t *o = out + (size_t)t * n_heads * head_dim + (size_t)h * head_dim;
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) {
        float v = 0.0f;
#pragma unroll
        for (int w = 0; w < ATT_WARPS; w++) v += s_acc[w][i] * wgt[w];
        o[i] = sits_k_f2bf(v * inv_l);
    }
}

static sits_status_t att_generic(sits_bf16_t *out, const sits_bf16_t *q, int q_row_stride, const sits_bf16_t *k_cache,
                       const sits_bf16_t *v_cache, const int32_t *seq, const int32_t *pos, const int32_t *block_tables,
                       int max_blocks, int block_size, int n_tokens, int n_heads, int n_kv_heads, int head_dim, int window,
                       float scale, float softcap, const float *sinks, int qm, cudaStream_t stream)
{
    if (head_dim % 2 || head_dim > ATT_MAX_HEAD_DIM || q_row_stride % 2 ||
        ((uintptr_t)q | (uintptr_t)k_cache | (uintptr_t)v_cache) % 4)
        return SITS_ERR_INVALID;
    long long n_blocks = (long long)n_tokens * n_heads;
    if (n_blocks > 0x7fffffffLL) return SITS_ERR_INVALID;
    int group = n_heads / n_kv_heads, kv_dim = n_kv_heads * head_dim;
    float scale_log2 = scale * 1.4426950408889634f, softcap_log2 = softcap * 1.4426950408889634f;
    dim3 grid((unsigned)n_blocks), block(ATT_WARPS * 32);
    long long unit = (long long)sits_k_kv_i8_unit_bytes(block_size, n_kv_heads, head_dim);
    int qb = (int)sits_k_kv_i8_q_bytes(block_size, n_kv_heads, head_dim);
#define ATT_LAUNCH(np_, q8_) attention_generic_kernel<np_, q8_><<<grid, block, 0, stream>>>(out, q, q_row_stride, k_cache, \
        v_cache, seq, pos, block_tables, max_blocks, block_size, n_heads, group, head_dim, kv_dim, window, scale_log2, unit, qb, \
        softcap_log2, sinks)
#define ATT_LAUNCH_NP(qm_) do { if (head_dim <= 64) ATT_LAUNCH(1, qm_); else if (head_dim <= 128) ATT_LAUNCH(2, qm_); \
        else if (head_dim <= 256) ATT_LAUNCH(4, qm_); else ATT_LAUNCH(8, qm_); } while (0)
    if (qm == SITS_K_KV_F8) ATT_LAUNCH_NP(SITS_K_KV_F8); /* [fp8 kv] */
    else if (qm == SITS_K_KV_I8) ATT_LAUNCH_NP(SITS_K_KV_I8); /* [int8 kv] */
    else ATT_LAUNCH_NP(SITS_K_KV_BF16);
#undef ATT_LAUNCH_NP
#undef ATT_LAUNCH
    return SITS_K_LAUNCH_STATUS();
}

/* SITS_ATT_PF_ORDER=index: prefill tiles in index order from the last (no order launch), for A/B; read at every
 * call as SITS_ATT_PF_ROWS (the parity test switches it) */
static bool att_pf_order_on(void)
{
    const char *e = getenv("SITS_ATT_PF_ORDER");
    return !(e && !strcmp(e, "index"));
}

/* [perf: kv before wait] SITS_ATT_KV_EARLY=0: the decode kernels wait for RoPE + KV write before any load (A/B); read
 * once */
static bool att_kv_early_on(void)
{
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("SITS_ATT_KV_EARLY");
        v = !(e && !strcmp(e, "0"));
    }
    return v;
}

/* SITS_ATT_MIN_PART=N (rounded up to whole ATT_KT-key tiles; default one tile, the split as before): decode contexts of
 * <= N positions are one partition -- one CTA a (token, KV head, chunk), no split-K merge -- and longer ones whose even
 * cut in S would be shorter are cut into ceil(L / N) partitions instead (att_part_len). For A/B; read once. */
static int att_min_part(void)
{
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("SITS_ATT_MIN_PART");
        long n = e ? strtol(e, NULL, 10) : 0;
        if (n < ATT_KT) n = ATT_KT;
        if (n > 1 << 20) n = 1 << 20;
        v = (int)((n + ATT_KT - 1) / ATT_KT * ATT_KT);
    }
    return v;
}

/* Both entry points; qm: what the caches hold (SITS_K_KV_BF16, or [int8 kv] [fp8 kv] 8-bit block units). */
static sits_status_t att_run(sits_bf16_t *out, const sits_bf16_t *q, int q_row_stride, const sits_bf16_t *k_cache,
                             const sits_bf16_t *v_cache, const int32_t *seq, const int32_t *pos, const int32_t *block_tables,
                             int max_blocks, int block_size, int n_tokens, int n_heads, int n_kv_heads, int head_dim,
                             int window, float scale, float softcap, const float *sinks, const sits_k_attn_ws_t *ws, int qm,
                             cudaStream_t stream)
{
    if (n_tokens < 0 || n_heads <= 0 || n_kv_heads <= 0 || n_heads % n_kv_heads || head_dim <= 0 || block_size <= 0 ||
        max_blocks <= 0 || window < 0 || softcap < 0.0f)
        return SITS_ERR_INVALID;
    if (n_tokens == 0) return SITS_OK;
    bool fast = (head_dim == 64 || head_dim == 128) && q_row_stride % 8 == 0 && sits_k_aligned16(q) &&
                sits_k_aligned16(k_cache) && sits_k_aligned16(v_cache) && ((uintptr_t)out & 3) == 0 && ws &&
                ws->n_sms > 0 && (!ws->scratch || sits_k_aligned16(ws->scratch));
    if (qm && !(sits_k_aligned16(k_cache) && sits_k_aligned16(v_cache))) return SITS_ERR_INVALID;
    if (!fast)
        return att_generic(out, q, q_row_stride, k_cache, v_cache, seq, pos, block_tables, max_blocks,
                                          block_size, n_tokens, n_heads, n_kv_heads, head_dim, window, scale, softcap, sinks, qm,
                                          stream);

    att_params p;
    p.out = out;
    p.q = q;
    p.k_cache = k_cache;
    p.v_cache = v_cache;
    p.seq = seq;
    p.pos = pos;
    p.block_tables = block_tables;
    p.q_row_stride = q_row_stride;
    p.max_blocks = max_blocks;
    p.block_size = block_size;
    p.bs_shift = -1;
    if ((block_size & (block_size - 1)) == 0) {
        p.bs_shift = 0;
        while ((1 << p.bs_shift) < block_size) p.bs_shift++;
    }
    p.n_tokens = n_tokens;
    p.n_heads = n_heads;
    p.n_kv_heads = n_kv_heads;
    p.group = n_heads / n_kv_heads;
    p.kv_i8 = qm != SITS_K_KV_BF16;
    p.n_chunks = p.kv_i8 ? (p.group + 7) / 8 : (p.group + 15) / 16; /* q heads per work item: 8 (8-bit kernel) or 16 */
    p.window = window;
    p.scale_log2 = scale * 1.4426950408889634f;
    p.softcap_log2 = softcap * 1.4426950408889634f;   /* [families] */
    p.sinks = sinks;                                  /* [gpt-oss] */
    p.kv_f8 = qm == SITS_K_KV_F8;
    p.kv_qbytes = (int)sits_k_kv_i8_q_bytes(block_size, n_kv_heads, head_dim);
    p.kv_unit = (long long)sits_k_kv_i8_unit_bytes(block_size, n_kv_heads, head_dim);

    int smem = att_decode_smem_bytes(head_dim, p.kv_i8);
    int per_sm = (int)(((size_t)227 << 10) / (size_t)(smem + 1024));
    if (per_sm > ATT_DEC_MAX_PER_SM) per_sm = ATT_DEC_MAX_PER_SM;
    if (per_sm < 1) per_sm = 1;
    int cap = ws->n_sms * per_sm;
    p.target_ctas = cap;
    p.min_part = att_min_part();
    p.max_seq_tokens = att_kv_early_on() ? ws->max_seq_tokens : 0;   /* [perf: kv before wait] */

    /* The workspace's scratch: [0, ATT_SCRATCH_HDR) the list's length, then (prefill mode) the
     * list [n_tokens] int32 rounded to 256 bytes and the tiles' order [n_tiles] int32 rounded to 256 bytes,
     * then the split-K partials (fp32); its last
     * SITS_K_ATT_COUNTER_BYTES(n_sms) the split-K counters (zeroed when the workspace is made, and left
     * zero by every launch). A split happens only when the work units are fewer than target_ctas, so
     * target_ctas counters are enough. */
    size_t cnt_bytes = SITS_K_ATT_COUNTER_BYTES(ws->n_sms);
    size_t list_bytes = ((size_t)n_tokens * 4 + 255) / 256 * 256;
    bool have = ws->scratch && ws->scratch_bytes > cnt_bytes;
    size_t avail = have ? ws->scratch_bytes - cnt_bytes : 0;
    /* the prefill kernel first only when one of its tiles may own rows: not when the caller bounds a sequence's tokens
     * below ATT_PF_OWN_MIN (a decode step: the prefill launch that lists every row, the tiles' order and the list mode
     * cost ~9 us a call at 512 tokens: 512 x 256 fp8 KV 0.109 -> 0.100 ms, RESULTS 2026-12-03T20:50Z) */
    bool direct = ws->max_seq_tokens > 0 && ws->max_seq_tokens < ATT_PF_OWN_MIN;
    bool prefill = n_tokens >= ATT_PF_MIN_TOKENS && !direct && have && avail >= ATT_SCRATCH_HDR + list_bytes;
    /* prefill: the tiles' order after the list (room for the smallest tiles: n_tokens / ATT_PF_ROWS + 1 int32), when
     * the order kernel takes that many and it fits */
    const int max_tiles = n_tokens / ATT_PF_ROWS + 1;
    size_t order_bytes = ((size_t)max_tiles * 4 + 255) / 256 * 256;
    bool order = prefill && att_pf_order_on() && max_tiles <= ATT_PF_ORDER_MAX &&
                 avail >= ATT_SCRATCH_HDR + list_bytes + order_bytes;
    size_t part_off = prefill ? ATT_SCRATCH_HDR + list_bytes + (order ? order_bytes : 0) : 0;
    p.list_count = prefill ? (int *)ws->scratch : NULL;
    p.list = prefill ? (int *)((char *)ws->scratch + ATT_SCRATCH_HDR) : NULL;
    p.pf_order = order ? (const int *)((char *)ws->scratch + ATT_SCRATCH_HDR + list_bytes) : NULL;
    p.part = have && avail > part_off ? (float *)((char *)ws->scratch + part_off) : NULL;
    p.part_floats = p.part ? (long long)((avail - part_off) / sizeof(float)) : 0;
    p.counters = have ? (int *)((char *)ws->scratch + avail) : NULL;

    sits_status_t st;
    if (prefill) {
        if ((st = att_launch_prefill(p, head_dim, att_prefill_mf(n_tokens, n_heads, ws->n_sms), stream)) != SITS_OK) return st;
        if (ws->mark) ws->mark(ws->mark_ctx);   /* [op times] */
        return att_launch_decode(p, head_dim, cap, stream);
    }
    int S = att_splits(n_tokens, n_kv_heads, p.n_chunks, n_heads, head_dim, p.target_ctas, p.part_floats, p.part != NULL);
    long long items = (long long)n_tokens * n_kv_heads * p.n_chunks * S;
    return att_launch_decode(p, head_dim, (int)(items < cap ? items : cap), stream);
}

extern "C" sits_status_t sits_k_attention(sits_bf16_t *out, const sits_bf16_t *q, int q_row_stride,
                                          const sits_bf16_t *k_cache, const sits_bf16_t *v_cache, const int32_t *seq,
                                          const int32_t *pos, const int32_t *block_tables, int max_blocks, int block_size,
                                          int n_tokens, int n_heads, int n_kv_heads, int head_dim, int window, float scale,
                                          const sits_k_attn_ws_t *ws, cudaStream_t stream)
{
    return att_run(out, q, q_row_stride, k_cache, v_cache, seq, pos, block_tables, max_blocks, block_size, n_tokens, n_heads,
                   n_kv_heads, head_dim, window, scale, 0.0f, NULL, ws, SITS_K_KV_BF16, stream);
}

/* [int8 kv] [fp8 kv] */
extern "C" sits_status_t sits_k_attention_q8(sits_bf16_t *out, const sits_bf16_t *q, int q_row_stride, const void *k_cache,
                                             const void *v_cache, const int32_t *seq, const int32_t *pos,
                                             const int32_t *block_tables, int max_blocks, int block_size, int n_tokens,
                                             int n_heads, int n_kv_heads, int head_dim, int window, float scale, int fp8,
                                             const sits_k_attn_ws_t *ws, cudaStream_t stream)
{
    return att_run(out, q, q_row_stride, static_cast<const sits_bf16_t *>(k_cache), static_cast<const sits_bf16_t *>(v_cache),
                   seq, pos, block_tables, max_blocks, block_size, n_tokens, n_heads, n_kv_heads, head_dim, window, scale, 0.0f,
                   NULL, ws, fp8 ? SITS_K_KV_F8 : SITS_K_KV_I8, stream);
}

/* [families] either entry point with attention-logit soft-capping and [gpt-oss] attention sinks (sits_kernels.h); kv:
 * SITS_K_KV_* */
extern "C" sits_status_t sits_k_attention_softcap(sits_bf16_t *out, const sits_bf16_t *q, int q_row_stride, const void *k_cache,
                                                  const void *v_cache, const int32_t *seq, const int32_t *pos,
                                                  const int32_t *block_tables, int max_blocks, int block_size, int n_tokens,
                                                  int n_heads, int n_kv_heads, int head_dim, int window, float scale,
                                                  float softcap, const float *sinks, int kv, const sits_k_attn_ws_t *ws,
                                                  cudaStream_t stream)
{
    return att_run(out, q, q_row_stride, static_cast<const sits_bf16_t *>(k_cache), static_cast<const sits_bf16_t *>(v_cache),
                   seq, pos, block_tables, max_blocks, block_size, n_tokens, n_heads, n_kv_heads, head_dim, window, scale,
                   softcap, sinks, ws, kv, stream);
}
