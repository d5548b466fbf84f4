/* sits_kernels.h -- plain C launchers of the CUDA kernels (kernels/<op>.cu).
 *
 * Every launcher enqueues its kernel on the given stream, checks cudaGetLastError() and returns a
 * sits_status_t (SITS_ERR_CUDA on a launch error, SITS_ERR_INVALID on arguments the kernel does
 * not handle). Nothing here allocates or synchronises (but sits_k_att_pf_trace, a benchmark's debugging aid): kernels/
 * has no host logic.
 *
 * Types: activations, weights and the KV cache are bf16, passed as sits_bf16_t (the raw 16-bit
 * storage, so that C callers need no CUDA C++ types); index arrays are int32; all pointers are
 * device pointers. Shapes are row-major, row strides in elements. Math is fp32 throughout.
 *
 * Paged KV layout (per layer, K and V each): [n_blocks, block_size, n_kv_heads, head_dim]; a token
 * at position p of a sequence with block table bt is in slot bt[p / block_size] * block_size +
 * p % block_size. */
#ifndef SITS_KERNELS_H
#define SITS_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>
#include "util/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef uint16_t sits_bf16_t; /* bf16 bit pattern */

/* out[n, dim] = table[tok - v_start] when v_start <= tok < v_start + v_count, else 0.
 * table: [v_count, dim]; tokens: [n] (vocab-parallel embedding with the out-of-shard mask). */
sits_status_t sits_k_embed(sits_bf16_t *out, const sits_bf16_t *table, const int32_t *tokens, int n, int dim,
                           int v_start, int v_count, cudaStream_t stream);

/* Every RMSNorm kernel's w is FP32 (the model's norm weights are fp32 on the device: Gemma's 1 + w
 * exact, as HF computes it). */
/* out, x: [n, dim] bf16; w: [dim] fp32. out = x / sqrt(mean(x^2) + eps) * w. out may alias x. */
sits_status_t sits_k_rmsnorm(sits_bf16_t *out, const sits_bf16_t *x, const float *w, int n, int dim, float eps,
                             cudaStream_t stream);

/* out, residual, x: [n, dim] bf16; w: [dim] fp32. residual += x (rounded to bf16); out = rmsnorm(residual) * w. */
sits_status_t sits_k_add_rmsnorm(sits_bf16_t *out, sits_bf16_t *residual, const sits_bf16_t *x, const float *w,
                                 int n, int dim, float eps, cudaStream_t stream);

/* In place on x[n, row_stride]: heads 0..n_rot_heads-1 (head_dim wide, from column 0) rotated at
 * pos[t] in the HF half-split (rotate_half) layout: pair (i, i + head_dim/2), angle
 * (float)pos[t] * inv_freq[i]. inv_freq: [head_dim/2] fp32. head_dim even. */
sits_status_t sits_k_rope(sits_bf16_t *x, int n, int row_stride, int n_rot_heads, int head_dim, const int32_t *pos,
                          const float *inv_freq, cudaStream_t stream);

/* k_cache[slot[t], :] = qkv[t, k_col : k_col + kv_dim], v_cache likewise from v_col; caches
 * [n_slots, kv_dim]; qkv [n, row_stride]; slot_mapping [n], -1 = skip. */
sits_status_t sits_k_kv_write(sits_bf16_t *k_cache, sits_bf16_t *v_cache, const sits_bf16_t *qkv, int n, int row_stride,
                              int k_col, int v_col, int kv_dim, const int32_t *slot_mapping, cudaStream_t stream);

/* [int8 kv] [fp8 kv] The 8-bit KV layout (src/backend/backend.h), int8 and fp8 (E4M3) alike: each
 * layer buffer is [n_blocks] units of sits_k_kv_i8_unit_bytes(): q int8 | e4m3 [block_size, n_kv,
 * head_dim] padded to 16 bytes, then scale fp32 [block_size, n_kv] padded to 16 bytes. */
static inline size_t sits_k_kv_i8_q_bytes(int block_size, int n_kv, int head_dim)
{
    return ((size_t)block_size * (size_t)n_kv * (size_t)head_dim + 15) & ~(size_t)15;
}
static inline size_t sits_k_kv_i8_unit_bytes(int block_size, int n_kv, int head_dim)
{
    return sits_k_kv_i8_q_bytes(block_size, n_kv, head_dim) + (((size_t)block_size * (size_t)n_kv * 4 + 15) & ~(size_t)15);
}
/* [fp8 kv] What a KV cache holds, for the launchers that take several. */
enum { SITS_K_KV_BF16 = 0, SITS_K_KV_I8 = 1, SITS_K_KV_F8 = 2 };

/* [int8 kv] [fp8 kv] As sits_k_kv_write into 8-bit caches: per (token, KV head) row x of head_dim (bf16
 * widened to fp32) amax = max |x|; fp8 = 0: scale = amax / 127 (IEEE division), q = rint(x / scale)
 * clamped to [-127, 127] (0 when amax = 0 or x / scale is NaN); fp8 = 1: scale = amax / 448 (1 when
 * amax = 0), q = e4m3(x / scale) (IEEE division, round to nearest even, saturating) -- the bytes of the
 * cpu backend's kv_write. kv dim = n_kv * head_dim; caches 16-byte aligned. */
sits_status_t sits_k_kv_write_q8(void *k_cache, void *v_cache, const sits_bf16_t *qkv, int n, int row_stride, int k_col,
                                 int v_col, int n_kv, int head_dim, int block_size, int fp8, const int32_t *slot_mapping,
                                 cudaStream_t stream);

/* [rope + kv write] sits_k_rope over the n_q + n_kv heads from column 0 of qkv, then the cache write of
 * sits_k_kv_write (kv = SITS_K_KV_BF16) or sits_k_kv_write_q8 (SITS_K_KV_I8, SITS_K_KV_F8) with K at
 * column n_q * head_dim and V at (n_q + n_kv) * head_dim, fused in one launch (kernels/rope_kv.cu).
 * head_dim even and <= 256. [families] q_norm / k_norm [head_dim] fp32 (both or neither; head_dim % 64 == 0):
 * first sits_k_rmsnorm_heads of the q heads with q_norm and of the k heads with k_norm, bit for bit. */
sits_status_t sits_k_rope_kv_write(sits_bf16_t *qkv, int n, int row_stride, int n_q, int n_kv, int head_dim,
                                   const int32_t *pos, const float *inv_freq, void *k_cache, void *v_cache, int kv,
                                   int block_size, const int32_t *slot_mapping, const float *q_norm, const float *k_norm,
                                   float eps, cudaStream_t stream);

/* [attention] Workspace of sits_k_attention, owned by the caller (allocated once per device):
 * scratch (device, 16-byte aligned) holds the split-K partials and the prefill kernel's token list, and
 * its last SITS_K_ATT_COUNTER_BYTES(n_sms) the split-K counters, which must be zero when the workspace
 * is first used (the kernels leave them zero); NULL / small scratch only disables split-K (and, below
 * the list size, the prefill kernel). */
#define SITS_K_ATT_DEC_MAX_PER_SM 4   /* decode CTAs per SM the attention grid is sized for */
#define SITS_K_ATT_COUNTER_BYTES(n_sms) (((size_t)(n_sms) * SITS_K_ATT_DEC_MAX_PER_SM * sizeof(int) + 255) / 256 * 256)
typedef struct {
    void *scratch;
    size_t scratch_bytes;
    int n_sms;               /* multiprocessors of the device; 0 forces the generic kernel */
    /* [op times] when set, called on the host between the prefill kernel's launch and the decode kernel's of a
     * prefill-mode call (the backend's op timer ends one timed part and starts the next there); NULL: nothing */
    void (*mark)(void *ctx);
    void *mark_ctx;
    /* the most tokens of one sequence in the call (0: unknown), set by the caller per call on its copy: below
     * ATT_PF_OWN_MIN (16) the decode kernel alone takes every token (no prefill launch, no list); any value is
     * computed right, the bound only picks the kernels */
    int max_seq_tokens;
} sits_k_attn_ws_t;

/* Paged attention. out: [n_tokens, n_heads * head_dim]; q: rows of q_row_stride, head h at column
 * h * head_dim; token t of sequence seq[t] at pos[t] attends to positions max(0, pos - window + 1)
 * .. pos (window 0 = all), read through block_tables[seq[t] * max_blocks + p / block_size];
 * query head h reads KV head h / (n_heads / n_kv_heads) (GQA). Any mix of sequences, chunks and
 * positions in one call; only host-visible arguments choose the kernels (CUDA-graph safe).
 * Fast path (tensor cores, split-K decode + tiled prefill, see kernels/attention.cu): head_dim 64
 * or 128, q and caches 16-byte aligned, q_row_stride % 8 == 0, ws with n_sms > 0. Otherwise the
 * generic kernel: head_dim even and <= 512, q_row_stride even, 4-byte aligned q and caches.
 * Enqueues up to 3 operations (a 4-byte memset of the scratch and 2 kernels). */
sits_status_t sits_k_attention(sits_bf16_t *out, const sits_bf16_t *q, int q_row_stride, const sits_bf16_t *k_cache,
                               const sits_bf16_t *v_cache, const int32_t *seq, const int32_t *pos,
                               const int32_t *block_tables, int max_blocks, int block_size, int n_tokens, int n_heads,
                               int n_kv_heads, int head_dim, int window, float scale, const sits_k_attn_ws_t *ws,
                               cudaStream_t stream);

/* [int8 kv] [fp8 kv] sits_k_attention over int8 (fp8 = 0) or E4M3 (fp8 = 1) caches (layout above).
 * Tensor-core decode kernel: the 8-bit tiles are read as they are into the MMA operands (converted
 * to f16 in registers, the K scales applied to the scores and the V scales to the softmax weights);
 * prefill kernel: the tiles are widened to bf16 (q * scale) in shared memory; generic kernel: q *
 * scale in fp32. Same kernel choice and conditions; caches 16-byte aligned. */
sits_status_t sits_k_attention_q8(sits_bf16_t *out, const sits_bf16_t *q, int q_row_stride, const void *k_cache,
                                  const void *v_cache, const int32_t *seq, const int32_t *pos, const int32_t *block_tables,
                                  int max_blocks, int block_size, int n_tokens, int n_heads, int n_kv_heads, int head_dim,
                                  int window, float scale, int fp8, const sits_k_attn_ws_t *ws, cudaStream_t stream);

/* [trace] A build with -DSITS_ATT_PF_TRACE records, per CTA of the last prefill attention launch, where its time went
 * (kernels/attention_prefill.cu, ATT_PF_MARK): up to max_ctas records of 8 words to the host array dst; returns how
 * many, or -1 without the trace build. Synchronises the device (bench/sits-bench-attention --trace). */
int sits_k_att_pf_trace(unsigned long long *dst, int max_ctas);
/* [trace] The same of the last 8-bit decode attention launch (kernels/attention_decode.cu, ATT_DEC_TR): per CTA its
 * entry / first tile landed / exit times (ns), items, key tiles, set-up and end cycles, SM. */
int sits_k_att_dec_trace(unsigned long long *dst, int max_ctas);

/* out[n, dim] = silu(gu[:, :dim]) * gu[:, dim:]; gu: [n, 2 * dim] (gate then up).
 * [fp8] q / q_scale (both or neither; q 8-byte aligned): also q [n, dim] E4M3 and q_scale [n] fp32 of
 * out's rows as stored, the bytes sits_k_quant_fp8_rows(q, q_scale, out) would make. */
sits_status_t sits_k_silu_mul(sits_bf16_t *out, uint8_t *q, float *q_scale, const sits_bf16_t *gu, int n, int dim,
                              cudaStream_t stream);

/* out[i, :] = x[rows[i], :] for i < n_rows; out [n_rows, dim], rows [n_rows]. */
sits_status_t sits_k_gather_rows(sits_bf16_t *out, const sits_bf16_t *x, const int32_t *rows, int n_rows, int dim,
                                 cudaStream_t stream);

/* ---- [perf] fp32 residual stream, device sampling ---------------------------------------------- */

/* out, x: [n, dim] bf16; residual: [n, dim] fp32; w: [dim] fp32. residual += x (fp32, not rounded);
 * out = rmsnorm(residual) * w (bf16). [fp8] q / q_scale as sits_k_silu_mul's. */
sits_status_t sits_k_add_rmsnorm_f32res(sits_bf16_t *out, uint8_t *q, float *q_scale, float *residual, const sits_bf16_t *x,
                                        const float *w, int n, int dim, float eps, cudaStream_t stream);

/* Mirrors of backend.h's sampling types (kernels/ includes nothing from src/backend; cuda.c checks
 * that the layouts agree). Modes: 0 greedy, 1 Gumbel-max, 2 top-c, 3 top-c + log-sum-exp. */
typedef struct { float logit; int32_t id; } sits_k_sample_cand_t;
typedef struct { float lse; int32_t n; sits_k_sample_cand_t best; } sits_k_sample_rec_t;
typedef struct { float temperature, inv_temp; int32_t mode, pad_; uint64_t seed, step; } sits_k_sample_row_t;

#define SITS_K_SAMPLE_MAX_C 1024

/* Per row s of logits [n, v_count] fp32 (ids v_start..): the record at recs + s * (16 + 8 c) bytes,
 * exactly as sits_backend_cpu_sample_reduce writes it (candidates unordered). One block per row.
 * 1 <= c <= SITS_K_SAMPLE_MAX_C; v_count >= 0; recs 4-byte aligned. */
sits_status_t sits_k_sample_reduce(void *recs, const float *logits, int n, int v_start, int v_count,
                                   const sits_k_sample_row_t *rows, int c, cudaStream_t stream);

/* [structured output] For k < n_masks: row rows[k] of logits [*, v_count] fp32 (ids v_start ..) = -inf where
 * bit (v_start + i) of masks[k] ([words] uint32 over the whole vocabulary, 1 = allowed) is 0 or past the mask
 * (kernels/logit_mask.cu; the cpu twin is sits_backend_cpu_logit_mask). One thread per logit. */
sits_status_t sits_k_logit_mask(float *logits, int v_start, int v_count, const uint32_t *masks, int words,
                                const int32_t *rows, int n_masks, cudaStream_t stream);

/* [sampling controls] [logprobs] Mirrors of backend.h's logit_process / logprob_reduce types (cuda.c
 * checks the layouts); kernels/sample.cu, semantics in backend.h, cpu twins in src/backend/cpu.c. */
typedef struct { float presence, frequency, repetition; int32_t ent0, n_ent, pad_; } sits_k_proc_row_t;
typedef struct { int32_t id; float bias; int32_t out_count, flags; } sits_k_proc_ent_t;
#define SITS_K_PROC_BAN 1
#define SITS_K_PROC_PROMPT 2
#define SITS_K_LOGPROB_MAX_TOP 20
typedef struct { int32_t row, target, top, pad_; } sits_k_logprob_row_t;
typedef struct {
    double lse;
    float tgt;
    int32_t has_tgt, n, pad_;
    sits_k_sample_cand_t top[SITS_K_LOGPROB_MAX_TOP];
} sits_k_logprob_rec_t;

/* In place on logits [n, v_count] fp32 (ids v_start ..): the rows' entries (rows and ents both
 * non-NULL; ent_raw may be NULL), then cut (may be NULL), then rowmax (may be NULL). A block per row. */
sits_status_t sits_k_logit_process(float *logits, int n, int v_start, int v_count, const sits_k_proc_row_t *rows,
                                   const sits_k_proc_ent_t *ents, float *ent_raw, const float *cut, float *rowmax,
                                   cudaStream_t stream);
/* recs [n_rows] of the scored rows of logits [*, v_count] fp32. A block per scored row. */
sits_status_t sits_k_logprob_reduce(sits_k_logprob_rec_t *recs, const float *logits, int v_start, int v_count,
                                    const sits_k_logprob_row_t *rows, int n_rows, cudaStream_t stream);
/* out [n] = the raw logit of ids[s] in row s (NaN outside the shard); rows / ents / ent_raw: those of the
 * logit_process call that changed the logits, or NULL. One thread per row. */
sits_status_t sits_k_logit_pick(float *out, const float *logits, int n, int v_start, int v_count, const int32_t *ids,
                                const sits_k_proc_row_t *rows, const sits_k_proc_ent_t *ents, const float *ent_raw,
                                cudaStream_t stream);

/* ---- [allreduce] custom all-reduce of one node's GPUs over CUDA IPC (kernels/allreduce.cu) ----------
 * Every rank owns one buffer mapped into every other rank (src/comm/custom_ar.c sets it up):
 * SITS_K_AR_SIGNAL_BYTES of signal words (zeroed before first use), then two staging halves of
 * half_bytes each. Every kernel launches exactly SITS_K_AR_BLOCKS blocks; all ranks must enqueue
 * the same sequence of these calls (same kinds, same n / dims) on one stream each: the kernels
 * synchronise with the peers through flags in device memory (no host step; CUDA-graph safe).
 * Sums: fp32 over the bf16 inputs in rank order 0..size-1, rounded once to bf16: every rank gets
 * the same bits. Sizes 2, 4 and 8 (sits_k_ar_size_supported); SITS_ERR_UNSUPPORTED otherwise. */
#define SITS_K_AR_MAX_RANKS 8
#define SITS_K_AR_BLOCKS 36
#define SITS_K_AR_SIGNAL_BYTES 8192

typedef struct {
    unsigned char *stage[SITS_K_AR_MAX_RANKS]; /* rank p's staging (both halves), mapped in this process */
    uint32_t *sig[SITS_K_AR_MAX_RANKS];        /* rank p's signal words, mapped in this process */
    size_t half_bytes;      /* one staging half; >= size * os_slot_bytes and >= 2 * size * ts_slot_bytes */
    size_t os_slot_bytes;   /* one-shot / fused: one source rank's slot, >= 16 * ceil(n / 8) bytes */
    size_t ts_slot_bytes;   /* two-shot: one partition slot, >= 16 * ceil(ceil(n / 8) / size) bytes */
    int rank, size;         /* this rank, ranks */
} sits_k_ar_peers_t;

int sits_k_ar_size_supported(int size);
/* out[n] = sum over ranks of in[n] (bf16); out may alias in; any n > 0, any alignment. One-shot:
 * every rank pushes in[] to every peer, one barrier, every rank sums all (latency). Two-shot: reduce-
 * scatter then all-gather by pushes, two barriers (each rank sends 2(size-1)/size of the bytes). */
sits_status_t sits_k_ar_oneshot(const sits_k_ar_peers_t *peers, sits_bf16_t *out, const sits_bf16_t *in, size_t n,
                                cudaStream_t stream);
sits_status_t sits_k_ar_twoshot(const sits_k_ar_peers_t *peers, sits_bf16_t *out, const sits_bf16_t *in, size_t n,
                                cudaStream_t stream);
/* Fused one-shot all-reduce + residual add + RMSNorm. x [n, dim] bf16: this rank's partial sums (read
 * only); residual [n, dim] fp32 (residual_f32) or bf16; w [dim] fp32. s = bf16(sum over ranks of x);
 * residual += s (fp32: not rounded; bf16: rounded); out [n, dim] = rmsnorm(residual) * w -- the
 * arithmetic of sits_k_add_rmsnorm_f32res / sits_k_add_rmsnorm after an all-reduce (bitwise when
 * the pointers are 16-byte aligned and dim % 8 == 0). out may alias x. n * dim * 2 <= os_slot_bytes.
 * [fp8] q / q_scale as sits_k_silu_mul's. */
sits_status_t sits_k_ar_add_rmsnorm(const sits_k_ar_peers_t *peers, sits_bf16_t *out, uint8_t *q, float *q_scale,
                                    void *residual, int residual_f32, const sits_bf16_t *x, const float *w, int n,
                                    int dim, float eps, cudaStream_t stream);

/* ---- [kv] paged KV blocks <-> a flat buffer (kernels/kv_copy.cu) -----------------------------------
 * For i < n_ids, j < n_bufs: flat[(i * n_bufs + j) * seg ..][seg] <-> bufs[j] + ids[i] * seg (bytes);
 * to_cache 0 gathers into flat, 1 scatters from it. bufs [n_bufs] and ids [n_ids] are device arrays;
 * seg % 16 == 0, all pointers 16-byte aligned. */
sits_status_t sits_k_kv_block_copy(void *flat, void *const *bufs, int n_bufs, const int32_t *ids, int n_ids, size_t seg,
                                   int to_cache, cudaStream_t stream);

/* ---- [fp8] FP8 E4M3 weights (kernels/fp8.cu) ---------------------------------------------------
 * x [n, dim] bf16 -> q [n, dim] E4M3 bytes and scale [n] fp32 per row: scale = absmax / 448 (1 for a
 * zero row), q = e4m3(x / scale), IEEE division, round to nearest even, saturating (util/dtype.h). */
sits_status_t sits_k_quant_fp8_rows(uint8_t *q, float *scale, const sits_bf16_t *x, int n, int dim, cudaStream_t stream);

/* [dummy] --load-format dummy's values (src/util/dummy.h) for rows [r, r + n) x cols [c0, c0 + w) of the tensor
 * whose dummy base is `base`: dst [n, w] bf16; or q [n, w] E4M3 and s [n], each row's scale from the absmax over
 * its cols [0, cols) (the whole row, whatever slice is stored). */
sits_status_t sits_k_dummy_rows_bf16(sits_bf16_t *dst, uint64_t base, int64_t r, int64_t n, int64_t c0, int64_t w,
                                     cudaStream_t stream);
sits_status_t sits_k_dummy_rows_fp8(uint8_t *q, float *s, uint64_t base, int64_t r, int64_t n, int64_t cols, int64_t c0,
                                    int64_t w, cudaStream_t stream);
/* y [n, m] (bf16, or fp32 when y_f32) = acc [n, m] fp32 * xs[t] * ws[o] (+ bias[o] bf16, may be NULL). */
sits_status_t sits_k_fp8_scale_out(void *y, int y_f32, const float *acc, const float *xs, const float *ws,
                                   const sits_bf16_t *bias, int n, int m, cudaStream_t stream);

/* [families] x [n, row_stride], in place: each of n_heads heads (head_dim wide, from column col0) of every
 * row = rmsnorm(head) * w, w [head_dim] fp32 (per-head q / k norms). */
sits_status_t sits_k_rmsnorm_heads(sits_bf16_t *x, int n, int row_stride, int col0, int n_heads, int head_dim,
                                   const float *w, float eps, cudaStream_t stream);
/* [families] sits_k_rope with token t rotated by inv_long when sel[t] != 0, else inv_short (longrope). */
sits_status_t sits_k_rope_sel(sits_bf16_t *x, int n, int row_stride, int n_rot_heads, int head_dim, const int32_t *pos,
                              const float *inv_short, const float *inv_long, const int32_t *sel, cudaStream_t stream);
/* [families] out[n, dim] = gelu_tanh(gu[:, :dim]) * gu[:, dim:] (GeGLU, PyTorch's tanh approximation). */
sits_status_t sits_k_gelu_tanh_mul(sits_bf16_t *out, const sits_bf16_t *gu, int n, int dim, cudaStream_t stream);
/* [gpt-oss] out[n, dim] = (clamp(u, -limit, limit) + 1) * g * sigmoid(alpha * g), g = min(gate, limit); gu [n, 2 * dim]
 * (gate columns, then up columns), fp32 math, any dim (vectorised when dim % 8 == 0 and gu, out 16-byte aligned). */
sits_status_t sits_k_swiglu_oai(sits_bf16_t *out, const sits_bf16_t *gu, int n, int dim, float alpha, float limit,
                                cudaStream_t stream);
/* [families] x [n] *= s, in place. */
sits_status_t sits_k_scale(sits_bf16_t *x, size_t n, float s, cudaStream_t stream);
/* [families] x [n] (fp32 when f32, else bf16) = cap * tanh(x / cap), in place; cap > 0. */
sits_status_t sits_k_softcap(void *x, size_t n, int f32, float cap, cudaStream_t stream);
/* [families] sits_k_attention / sits_k_attention_q8 (kv: SITS_K_KV_BF16 / _I8 / _F8) with attention-logit
 * soft-capping: each score s = scale * q.k becomes softcap * tanh(s / softcap) before the softmax (softcap 0 = none);
 * [gpt-oss] and attention sinks: sinks fp32 [n_heads] (device; NULL = none), head h's softmax denominator gains
 * e^sinks[h] (unscaled): out = sum_p e^(s_p) v_p / (sum_p e^(s_p) + e^sinks[h]). Same kernels and conditions. */
sits_status_t sits_k_attention_softcap(sits_bf16_t *out, const sits_bf16_t *q, int q_row_stride, const void *k_cache,
                                       const void *v_cache, const int32_t *seq, const int32_t *pos, const int32_t *block_tables,
                                       int max_blocks, int block_size, int n_tokens, int n_heads, int n_kv_heads, int head_dim,
                                       int window, float scale, float softcap, const float *sinks, int kv,
                                       const sits_k_attn_ws_t *ws, cudaStream_t stream);
/* ---- [moe] Mixture of Experts (kernels/moe.cu; contracts: backend.h moe_topk / moe_combine) ----
 * Router top-k: logits [n, E] bf16 -> ids [n, k] int32, wts [n, k] fp32 (softmax in fp32, the k largest
 * in descending order, lower index first on ties, renormalised when norm). k <= 32, k <= E <= 1024. */
sits_status_t sits_k_moe_topk(int32_t *ids, float *wts, const sits_bf16_t *logits, int n, int E, int k, int norm,
                              cudaStream_t stream);
/* out [n, dim] bf16 = sum_j wts[t*kk + j] * y[pos[t*kk + j], :] (fp32, j order; pos -1 skipped). */
sits_status_t sits_k_moe_combine(sits_bf16_t *out, const sits_bf16_t *y, const int32_t *pos, const float *wts, int n, int kk,
                                 int dim, cudaStream_t stream);
/* [moe dev] backend.h moe_route / moe_experts / moe_combine_slots on bf16 rows: the plan of the slots grouped by
 * expert (one block), every expert's gate/up + SiLU * up (one launch) and down (one launch) over its slots (GEMVs,
 * or tensor-core MMAs once the experts average 4 slots; w_gu / w_down: device arrays of E weight pointers, bf16, or
 * [moe fp8] E4M3 with the row-scale arrays s_gu / s_down and q8 the scratch of backend.h SITS_MOE_Q8_BYTES), and
 * the combine over the slots (+ the shared expert gated by sigmoid(sg[t]) when sg). counts / mask may be NULL. */
sits_status_t sits_k_moe_route(int32_t *plan, unsigned long long *counts, const int32_t *ids, const int32_t *mask, int n, int k,
                               int E, int e0, int ne, cudaStream_t stream);
/* [gpt-oss] sits_k_moe_experts' epilogue (backend.h sits_moe_epi_t; NULL: silu(g) u, no biases): b_gu / b_down device
 * arrays of E pointers to bf16 biases [2 I] / [H] (NULL array or entry: none); oai: the clamped SwiGLU. */
typedef struct {
    const void *const *b_gu, *const *b_down;
    int oai;
    float alpha, limit;
} sits_k_moe_epi_t;
sits_status_t sits_k_moe_experts(sits_bf16_t *y, sits_bf16_t *act, const sits_bf16_t *x, const int32_t *plan,
                                 const void *const *w_gu, const void *const *w_down, const float *const *s_gu,
                                 const float *const *s_down, void *q8, const sits_k_moe_epi_t *epi, int n, int k, int E, int H,
                                 int I, cudaStream_t stream);
sits_status_t sits_k_moe_combine_slots(sits_bf16_t *out, const sits_bf16_t *y, const float *wts, const sits_bf16_t *sg, int n,
                                       int k, int H, cudaStream_t stream);
/* [moe fuse] One token (backend.h moe_select / moe_experts_combine): the router linear (x [H], w [E, H] bf16, bias [E]
 * or NULL; the bits of sits_k_gemv's one token) into logits [E], moe_topk and moe_route in one launch (sync: a device
 * word, 0 at the call and after it); and moe_experts then moe_combine_slots without a shared expert or EP (ids [k]:
 * slot j's expert, wts [k]; k <= 8; y not written) in three launches (four with FP8). SITS_ERR_UNSUPPORTED with
 * SITS_MOE_FUSE=0, or for a shape they do not take. */
sits_status_t sits_k_moe_gate1(sits_bf16_t *logits, int32_t *ids, float *wts, int32_t *plan, unsigned long long *counts,
                               unsigned *sync, const sits_bf16_t *x, const sits_bf16_t *w, const sits_bf16_t *bias,
                               const int32_t *mask, int H, int E, int k, int norm, int e0, int ne, cudaStream_t stream);
sits_status_t sits_k_moe_experts_combine1(sits_bf16_t *out, sits_bf16_t *act, const sits_bf16_t *x, const int32_t *plan,
                                          const int32_t *ids, const float *wts, const void *const *w_gu,
                                          const void *const *w_down, const float *const *s_gu, const float *const *s_down,
                                          void *q8, const sits_k_moe_epi_t *epi, int k, int E, int H, int I,
                                          cudaStream_t stream);

/* [moe grouped] backend.h moe_grouped: the experts of a host-routed step, rows [off[e], off[e + 1]) of x [rows, H] (bf16,
 * expert-major) through expert e's bf16 SwiGLU MLP (w_gu[e] [2 I, H], w_down[e] [H, I]; device pointer tables; epi as
 * sits_k_moe_experts' or NULL) into act [rows, I] and y [rows, H]: two launches over the caller's tiles [n_tiles] of
 * {e, r0} (rows r0 .. min(r0 + 64, off[e + 1]) of expert e; off and tiles on the device). H % 8 == 0, I % 8 == 0,
 * 16-byte aligned x, act, y. */
sits_status_t sits_k_moe_grouped(sits_bf16_t *y, sits_bf16_t *act, const sits_bf16_t *x, const int32_t *tiles, int n_tiles,
                                 const int32_t *off, const void *const *w_gu, const void *const *w_down,
                                 const sits_k_moe_epi_t *epi, int H, int I, cudaStream_t stream);

/* [int4] y [n, out] = x [n, in] . w^T (+ bias [out], may be NULL); w packed INT4 (backend.h sits_w4_t):
 * q uint8 [out, in / 2] (low nibble = even column), scale / zero fp32 [out, n_groups], gidx int32 [in]
 * or NULL (group = k / group_size) -- or, tiled != 0, the same values in the tiled layout of
 * sits_k_w4_tile (no gidx, in % 128 == 0, group_size % 32 == 0, 16-byte aligned x and q); w = (q - zero) *
 * scale dequantised in registers, fp32 accumulation. in even; without gidx in % group_size == 0.
 * Tiled: n <= 64 the tensor-core GEMV (weights as the MMA's A side; n <= SITS_W4_PG_MAX_N, groups of 128k,
 * in >= 1024: the persistent GEMV, off by default), more the tensor-core tiles. Row layout: n <= 32, no gidx, group_size and in multiples of 32,
 * 16-byte aligned x and q: the GEMV kernel (a warp per output row); n >= 16 otherwise, in % 32 == 0: the
 * tensor-core tiles (exact integer operands, the group scales applied to fp32 partial sums); otherwise a warp
 * per output row. See kernels/w4a16.cu. */
sits_status_t sits_k_matmul_w4(sits_bf16_t *y, const sits_bf16_t *x, const uint8_t *q, const float *scale, const float *zero,
                               const int32_t *gidx, int tiled, const sits_bf16_t *bias, int n, int in, int out, int group_size,
                               int n_groups, cudaStream_t stream);
/* [int4 tiles] q, scale, zero (allocated for out rounded up to 16 rows) = q_src [out, in / 2], s_src / z_src
 * [out, n_groups] (the row layout) re-arranged in 16-row x 128-input tiles, the zero points as bytes
 * (kernels/w4a16.cu); in % 128 == 0, q and q_src 16-byte aligned and not overlapping. */
sits_status_t sits_k_w4_tile(uint8_t *q, float *scale, float *zero, const uint8_t *q_src, const float *s_src, const float *z_src,
                             int in, int out, int n_groups, cudaStream_t stream);
/* [perf: decode gemv] y [n, out] = x [n, in] . w [out, in]^T (+ bias [out] bf16) for n <= SITS_K_GEMV_MAX_N, one
 * launch, fp32 sums in an order that does not depend on n (kernels/gemv.cu; [perf: mma gemv] one token by default in
 * another order than 2-16, on tensor cores: SITS_GEMV_MMA=2 puts one token there too). fp8 0: x, w bf16; fp8 1: x, w E4M3
 * bytes, y = sums * xs[t] * ws[o] (xs [n], ws [out] fp32). y bf16, or fp32 when y_f32. SITS_ERR_UNSUPPORTED,
 * nothing launched, when n > SITS_K_GEMV_MAX_N, in is not a multiple of 8 (bf16) / 16 (fp8) or x / w are not
 * 16-byte aligned: the caller then runs its GEMM. */
#define SITS_K_GEMV_MAX_N 16
sits_status_t sits_k_gemv(void *y, int y_f32, const void *x, const float *xs, const void *w, const float *ws,
                          const sits_bf16_t *bias, int fp8, int n, int in, int out, cudaStream_t stream);
/* [perf: mma gemv] SITS_GEMV_MMA's mode (>= 2: one token on the tensor cores too; [moe fuse] then not the bits of
 * sits_k_moe_gate1's router) */
int sits_k_gemv_mma_mode(void);
/* [perf: swiglu gemv] act [n, inter] = bf16(silu(g) * u) with [g | u] = sits_k_gemv of w [2 inter, in] (gate rows,
 * then up rows; no bias) rounded to bf16: the bits of sits_k_gemv then sits_k_silu_mul, in one launch (no [n, 2 inter]
 * round trip, no second kernel). SITS_ERR_UNSUPPORTED, nothing launched, for what sits_k_gemv refuses and for 2-16
 * tokens when the tensor-core form is off (SITS_GEMV_MMA=0). */
sits_status_t sits_k_gemv_swiglu(sits_bf16_t *act, const void *x, const float *xs, const void *w, const float *ws, int fp8,
                                 int n, int in, int inter, cudaStream_t stream);
/* [int4] w [out, in] bf16 = the packed INT4 weights above (row layout, or tiled) dequantised (the large-batch path:
 * then a bf16 GEMM); in % 8 == 0 (tiled: % 128), w 16-byte aligned, q 4-byte aligned. */
sits_status_t sits_k_w4_dequant(sits_bf16_t *w, const uint8_t *q, const float *scale, const float *zero, const int32_t *gidx,
                                int tiled, int in, int out, int group_size, int n_groups, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
