/* backend.h -- the backend vtable: every op of the forward pass, on buffers the backend owns.
 *
 * The engine calls ops only through sits_backend_ops_t. Buffers are opaque device pointers
 * (host memory for the cpu backend). Activations have dtype be->act_dtype (F32 on cpu, BF16 on
 * cuda), weights be->weight_dtype; KV cache entries be->kv_dtype; index arrays are int32 on the
 * device (uploaded by the engine once per step). All ops run in order on the backend's stream;
 * `sync` waits for them. Shapes are row-major; "row stride" is in elements.
 *
 * Paged KV layout (per layer, one buffer each for K and V): [n_blocks, block_size, n_kv, head_dim].
 * A token at position p of a sequence with block table bt lives in block bt[p / block_size],
 * slot p % block_size; slot_mapping[t] = bt[p / bs] * bs + p % bs.
 *
 * KV dtypes (be->kv_dtype, --kv-cache-dtype): the activation dtype (F32 cpu, BF16 cuda); BF16 on
 * the cpu (values rounded to bf16 when written, read back exactly); and the two 8-bit dtypes I8 and
 * [fp8 kv] F8_E4M3 on both, where each layer buffer is [n_blocks] units of sits_kv_layer_block_bytes()
 * bytes, each unit
 *     q      int8 | e4m3 [block_size, n_kv, head_dim]   (padded to 16 bytes)
 *     scale  fp32 [block_size, n_kv]                     (padded to 16 bytes)
 * so every block's part of a layer stays contiguous (whole-block copies need no layout knowledge).
 * Quantisation, per (token, KV head) x[head_dim] (fp32, or bf16 widened to fp32), amax = max_i |x_i|:
 *     I8:      scale = amax / 127 (IEEE fp32 division), q_i = rint(x_i / scale) clamped to
 *              [-127, 127] (0 when amax = 0);
 *     F8_E4M3: scale = amax / 448 (1 when amax = 0), q_i = e4m3(x_i / scale) (IEEE division, round
 *              to nearest even, saturating at +-448: sits_f32_to_f8e4m3);
 *     read back as q_i * scale in fp32. A per-token scale needs no calibration (vLLM's per-tensor
 *     k_scale / v_scale do); it costs 4 bytes per head_dim bytes (3 % at head_dim 128).
 * The cpu backend is this definition exactly; the cuda kv_write produces the same bytes from the
 * same inputs, and its attention may round q_i * scale (or the softmax weight times the V scale) to
 * 16 bits for the tensor cores. */
#ifndef SITS_BACKEND_BACKEND_H
#define SITS_BACKEND_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include "util/dtype.h"
#include "util/status.h"

typedef struct sits_backend sits_backend_t;

/* [memory plan] Device memory set aside at start-up, one item a line of the start-up log. Items with
 * held 1 were allocated before the plan was made (they are in the "in use" figure already). */
enum { SITS_MEM_PLAN_MAX = 24 };
typedef struct {
    char name[64];
    size_t bytes;
    int held;
} sits_mem_item_t;
typedef struct sits_mem_plan {
    sits_mem_item_t item[SITS_MEM_PLAN_MAX];
    int n;
    size_t total;        /* bytes of the items with held 0: what the plan still has to allocate */
} sits_mem_plan_t;
/* The largest shapes a step sends through the backend: n_tokens rows through linears of up to
 * max_in inputs and max_out outputs; n_logits rows through lm_head (vocab_out outputs of hidden_in
 * inputs); fp8: some linears are FP8 (fp8_lm_head: lm_head too), whose activations the backend
 * quantises itself unless fp8_fused (the engine's kernels hand them over quantised, except the o
 * projection's and lm_head's inputs). */
typedef struct sits_mem_shape {
    int n_tokens, max_in, max_out;
    int n_logits, hidden_in, vocab_out;
    int fp8, fp8_lm_head, fp8_fused;
    size_t w4_elems;   /* [int4] out x in of the largest INT4 linear (0: none): its bf16 dequantisation scratch */
} sits_mem_shape_t;

static inline void sits_mem_plan_add(sits_mem_plan_t *p, const char *name, size_t bytes, int held)
{
    if (p->n >= SITS_MEM_PLAN_MAX) return;
    sits_mem_item_t *it = &p->item[p->n++];
    size_t i = 0;
    for (; name[i] && i + 1 < sizeof it->name; i++) it->name[i] = name[i];
    it->name[i] = 0;
    it->bytes = bytes;
    it->held = held;
    if (!held) p->total += bytes;
}

/* [fp8 kv] The KV dtypes stored as 8-bit values + per-(token, head) fp32 scales (I8, F8_E4M3). */
static inline int sits_kv_dtype_is_q8(sits_dtype_t dt) { return dt == SITS_DT_I8 || dt == SITS_DT_F8_E4M3; }
/* [int8 kv] Bytes of the 8-bit part of one block unit (see above; I8 and F8_E4M3), and of the whole unit. */
static inline size_t sits_kv_i8_q_bytes(int block_size, int n_kv, int head_dim)
{
    return ((size_t)block_size * (size_t)n_kv * (size_t)head_dim + 15) & ~(size_t)15;
}
static inline size_t sits_kv_i8_unit_bytes(int block_size, int n_kv, int head_dim)
{
    return sits_kv_i8_q_bytes(block_size, n_kv, head_dim) + (((size_t)block_size * (size_t)n_kv * 4 + 15) & ~(size_t)15);
}
/* Bytes of one block of one layer's K (or V) buffer for KV dtype dt. */
static inline size_t sits_kv_layer_block_bytes(sits_dtype_t dt, int block_size, int n_kv, int head_dim)
{
    if (sits_kv_dtype_is_q8(dt)) return sits_kv_i8_unit_bytes(block_size, n_kv, head_dim);
    return (size_t)block_size * (size_t)n_kv * (size_t)head_dim * sits_dtype_size(dt);
}

/* Inputs of one attention call: token t (of n) belongs to sequence seq[t] at position pos[t] and
 * attends to positions max(0, pos[t] - window + 1) .. pos[t] (window 0 = unlimited) of that sequence,
 * read through block_tables[seq[t] * max_blocks + j]. K/V of this step's tokens are already written. */
/* [gpt-oss] moe_experts' epilogue (below; NULL: silu(g) * u without biases). b_gu / b_down: device arrays of pointers,
 * by the plan's (local) expert index, to act_dtype biases [2 i] (gate, then up) / [H]; a NULL array or entry: none.
 * oai: the activation is swiglu_oai with alpha and limit. */
typedef struct {
    const void *const *b_gu, *const *b_down;
    int oai;
    float alpha, limit;
} sits_moe_epi_t;

typedef struct {
    int n_tokens;
    const int32_t *seq;            /* [n_tokens] device */
    const int32_t *pos;            /* [n_tokens] device */
    const int32_t *block_tables;   /* [n_seqs, max_blocks] device */
    int max_blocks;
    int block_size;
    int n_heads, n_kv_heads, head_dim;   /* this rank's heads */
    int window;
    float scale;                   /* 1/sqrt(head_dim) */
    /* [perf: cuda graphs] An upper bound of pos[t] + 1 over the tokens, or 0 when unknown. A launch
     * configuration may depend on it (never on the device arrays' values); the engine passes
     * max_blocks * block_size when the call is captured into a CUDA graph that is replayed for
     * later steps, so a kernel must read the real lengths from pos[] and early-exit past them. */
    int max_context;
    /* [families] attention-logit soft-capping: s = scale * q.k becomes softcap * tanh(s / softcap) before the
     * softmax (Gemma 2); 0 = none. */
    float softcap;
    /* [perf] The most tokens of one sequence in this call (a decode step: 1; a verification step: k + 1), or 0 when
     * unknown. A kernel choice only, host-visible (graph safe): on the GPU, below 16 no prefill tile could own a row,
     * so the decode kernel takes every token without the prefill kernel's launch and token list first; a call whose
     * tokens break the bound is still computed right. */
    int max_seq_tokens;
    /* [gpt-oss] attention sinks: one learned logit per head (fp32 device [n_heads], this rank's heads), added to each
     * softmax's denominator only: out = sum_p e^(s_p) v_p / (sum_p e^(s_p) + e^(sinks[h])) (sinks[h] unscaled); NULL = none. */
    const float *sinks;
} sits_attn_args_t;
#define SITS_ATTN_FEW_SEQ_TOKENS 16 /* max_seq_tokens below this: the cuda backend's decode kernel alone (ATT_PF_OWN_MIN) */

/* ---- [perf: device sampling] sample_reduce ---------------------------------------------------
 * Per output row, the candidate record the distributed sampler (src/engine/sample.c) gathers from
 * every rank. A record is a header followed by c candidates; records are packed, record s at
 * byte s * SITS_SAMPLE_REC_BYTES(c). All fields are 4 bytes (host byte order on both sides). */
typedef struct {
    float logit;    /* raw logit (candidates) or perturbed score (best) */
    int32_t id;     /* global vocabulary id; -1 = none */
} sits_sample_cand_t;

typedef struct {
    float lse;                /* log sum exp(l / T) over the slice (mode TOPC_LSE), else -inf */
    int32_t n;                /* valid candidates after the header (TOPC modes), else 0 */
    sits_sample_cand_t best;  /* GREEDY: argmax l, lowest id on ties; GUMBEL: argmax of fl(fl(l * inv_temp) + g_i)
                               * with g_i = (float)-log(-log(sits_backend_sample_uniform(seed, step, id))),
                               * lowest id on ties; TOPC modes: {-inf, -1} */
} sits_sample_rec_t;

#define SITS_SAMPLE_REC_BYTES(c_) (sizeof(sits_sample_rec_t) + sizeof(sits_sample_cand_t) * (size_t)(c_))

typedef enum {
    SITS_SAMPLE_GREEDY = 0,    /* best = argmax */
    SITS_SAMPLE_GUMBEL = 1,    /* best = Gumbel-max over the slice (untruncated temperature sampling) */
    SITS_SAMPLE_TOPC = 2,      /* the top-c raw logits by (logit desc, id asc), in no particular order */
    SITS_SAMPLE_TOPC_LSE = 3,  /* TOPC and lse (top-p without top-k) */
} sits_sample_mode_t;

/* One output row's sampling parameters as the backend sees them (32 bytes, device array). */
typedef struct {
    float temperature;   /* > 0 unless GREEDY */
    float inv_temp;      /* 1.0f / temperature computed in fp32 by the caller (GUMBEL) */
    int32_t mode;        /* sits_sample_mode_t */
    int32_t pad_;
    uint64_t seed;
    uint64_t step;
} sits_sample_row_t;

/* The counter-based uniform variate in (0, 1) of vocabulary id `id` (cpu.c; kernels/sample.cu has
 * the bit-exact device port): three splitmix64 finalisers over (seed, step, id), 53 bits + 0.5. */
double sits_backend_sample_uniform(uint64_t seed, uint64_t step, int64_t id);

/* [structured output] The reference of logit_mask (host memory): for k < n_masks, row rows[k] of logits
 * [*, v_count] fp32 (ids v_start ..) becomes -inf wherever bit (v_start + i) of masks[k] -- words uint32,
 * a bitmask of the whole vocabulary, bit (id & 31) of word (id >> 5), 1 = allowed -- is 0 (ids past
 * words * 32 count as 0). Rows without a mask are untouched. */
void sits_backend_cpu_logit_mask(float *logits, int v_start, int v_count, const uint32_t *masks, int words,
                                 const int32_t *rows, int n_masks);

/* The reference reduction (host memory), shared by the cpu backend's sample_reduce and the host
 * sampling path: recs [n] records of c candidates from logits [n, v_count] fp32 (ids v_start ..). */
void sits_backend_cpu_sample_reduce(void *recs, const float *logits, int n, int v_start, int v_count,
                                    const sits_sample_row_t *rows, int c);

/* ---- [sampling controls] logit_process -------------------------------------------------------
 * Penalties, logit_bias, min_tokens bans and min_p applied to each rank's logits shard on the device,
 * for every row of a step at once. Per row a parameter record and a list of entries: one per distinct
 * vocabulary id the row's transforms touch (its logit_bias / ban ids and its token history), sorted by
 * id ascending, ids unique within the row, the row's entries at ents[ent0 .. ent0 + n_ent). Only the
 * entries whose id lies in the rank's shard apply there. For such an entry, on l = logits[s, id]:
 *     raw[k] = l                                              (the logit before, for logprobs)
 *     l = (flags & BAN) ? -inf : fl(l + bias)                 (logit_bias; min_tokens bans eos / stop ids)
 *     if repetition on and (flags & PROMPT or out_count > 0)  (HF RepetitionPenaltyLogitsProcessor)
 *         l = l > 0 ? fl(l / repetition) : fl(l * repetition)
 *     if out_count > 0: l = fl(l - fl(fl(frequency * out_count) + presence))   (OpenAI / vLLM)
 * All fp32, each operation rounded once (no fused multiply-add). min_p is a second call with a
 * threshold per row (see the op). */
#define SITS_PROC_BAN 1       /* the id is banned (-inf) */
#define SITS_PROC_PROMPT 2    /* the id occurs in the prompt */
typedef struct {
    float presence, frequency;
    float repetition;    /* 0 or 1: off */
    int32_t ent0, n_ent;
    int32_t pad_;
} sits_logit_proc_row_t; /* 24 bytes */

typedef struct {
    int32_t id;          /* global vocabulary id */
    float bias;          /* added unless banned */
    int32_t out_count;   /* times generated so far */
    int32_t flags;       /* SITS_PROC_BAN | SITS_PROC_PROMPT */
} sits_logit_proc_ent_t; /* 16 bytes */

/* ---- [logprobs] logprob_reduce --------------------------------------------------------------
 * log-softmax of the raw logits across the vocabulary shards: per scored row each rank writes a
 * record of its shard, all-gathered and merged by src/engine/sample.c (lse = log sum_r exp(lse_r),
 * logprob = logit - lse). */
#define SITS_LOGPROB_MAX_TOP 20
typedef struct {
    int32_t row;         /* the logits row */
    int32_t target;      /* the id scored, or -1 (the sampled token: logit_pick after sampling) */
    int32_t top;         /* 0 .. SITS_LOGPROB_MAX_TOP best ids wanted */
    int32_t pad_;
} sits_logprob_row_t;

typedef struct {
    double lse;          /* m + log(sum_i exp((double)l_i - m)), m = max l_i of the shard; -inf: empty shard */
    float tgt;           /* logits[row, target] when the shard holds target */
    int32_t has_tgt;     /* 1 when it does */
    int32_t n;           /* valid entries of top: min(top, v_count) */
    int32_t pad_;
    sits_sample_cand_t top[SITS_LOGPROB_MAX_TOP];   /* the shard's best by (logit desc, id asc), best first */
} sits_logprob_rec_t;    /* 184 bytes */

/* The references of the three ops (host memory); the cpu backend's slots call them. */
void sits_backend_cpu_logit_process(float *logits, int n, int v_start, int v_count, const sits_logit_proc_row_t *rows,
                                    const sits_logit_proc_ent_t *ents, float *ent_raw, const float *cut, float *rowmax);
void sits_backend_cpu_logprob_reduce(sits_logprob_rec_t *recs, const float *logits, int v_start, int v_count,
                                     const sits_logprob_row_t *rows, int n_rows);
void sits_backend_cpu_logit_pick(float *out, const float *logits, int n, int v_start, int v_count, const int32_t *ids,
                                 const sits_logit_proc_row_t *rows, const sits_logit_proc_ent_t *ents, const float *ent_raw);

/* ---- [int4] W4A16 weight-only linear: the packed INT4 layout ---------------------------------
 * One layout for every INT4 source (AWQ, GPTQ, compressed-tensors pack-quantized, --quant int4);
 * src/model/ converts each to it at load. For a linear of `out` output rows and `in` inputs:
 *   q      uint8 [out, in / 2]      byte j of row o: column 2j in the low nibble, 2j + 1 in the high
 *                                   one; unsigned values 0..15 (in even)
 *   scale  fp32  [out, n_groups]    per (row, group)
 *   zero   fp32  [out, n_groups]    per (row, group): the value subtracted before scaling, an integer
 *                                   0..16 (16: GPTQ v1's stored zero 15 plus its offset 1)
 *   gidx   int32 [in] or NULL       column k belongs to group gidx[k] (GPTQ act-order, 0 <= gidx[k] <
 *                                   n_groups); NULL: group k / group_size
 *   w[o, k] = (q[o, k] - zero[o, g]) * scale[o, g]  in fp32, g the group of column k (the subtraction
 *   is exact, so a weight is one rounding of the product -- what a Python reference computes).
 * All pointers are this backend's memory, q, scale and zero allocated for out rounded up to 16 rows
 * (sits_w4_rows_alloc). [int4 tiles] A backend may re-arrange a loaded linear for its kernels
 * (ops->w4_layout) and set `tiled`: the same values, held in its own order (cuda: 16-row x 128-input
 * tiles, kernels/w4a16.cu); 0: the row layout above. */
typedef struct {
    void *q;
    float *scale, *zero;
    int32_t *gidx;
    int group_size, n_groups;
    int tiled;
} sits_w4_t;

/* [int4 tiles] rows to allocate for an INT4 linear of out rows (q, scale and zero) */
static inline long long sits_w4_rows_alloc(long long out)
{
    return (out + 15) / 16 * 16;
}

typedef struct sits_backend_ops {
    const char *name;
    void (*destroy)(sits_backend_t *be);
    /* memory */
    sits_status_t (*alloc)(sits_backend_t *be, size_t bytes, void **ptr_p);
    void (*free)(sits_backend_t *be, void *ptr);
    sits_status_t (*upload)(sits_backend_t *be, void *dst, const void *src_host, size_t bytes);
    /* [scale] optional: rows of row_bytes from src_host (row r at r * src_pitch) to dst (row r at
     * r * dst_pitch): a block-table upload of only the columns a step uses (NULL: the engine uploads whole rows) */
    sits_status_t (*upload_rows)(sits_backend_t *be, void *dst, size_t dst_pitch, const void *src_host, size_t src_pitch,
                                 size_t row_bytes, int rows);
    sits_status_t (*download)(sits_backend_t *be, void *dst_host, const void *src, size_t bytes);
    sits_status_t (*memset0)(sits_backend_t *be, void *dst, size_t bytes);
    /* Weights: rows [r0, r1) x cols [c0, c1) of a host tensor src [*, src_cols] of dtype src_dt
     * (unaligned), converted to be->weight_dtype, stored row-major [r1-r0, c1-c0] at dst + dst_row0 rows. */
    sits_status_t (*upload_weight)(sits_backend_t *be, void *dst, int64_t dst_row0, const void *src, sits_dtype_t src_dt,
                                   int64_t src_cols, int64_t r0, int64_t r1, int64_t c0, int64_t c1);
    /* [dummy] optional: --load-format dummy's weights made where they live (model/dummy.h's definition):
     * rows [r, r + n) x cols [c0, c0 + w) of the tensor whose dummy base is `base`, as be->weight_dtype,
     * row-major [n, w] at dst + dst_row0 rows. dummy_rows_fp8: the same rows as E4M3 bytes [n, w] at
     * q + dst_row0 rows and their scales at s + dst_row0, each row quantised as model/weights.c quantises
     * the host's rows (scale = sits_fp8_scale of the absmax over the row's cols [0, cols), the whole row,
     * q = e4m3(value / scale)). NULL or SITS_ERR_UNSUPPORTED: the loader draws them on the host. */
    sits_status_t (*dummy_rows)(sits_backend_t *be, void *dst, int64_t dst_row0, uint64_t base, int64_t r, int64_t n,
                                int64_t c0, int64_t w);
    sits_status_t (*dummy_rows_fp8)(sits_backend_t *be, void *q, float *s, int64_t dst_row0, uint64_t base, int64_t r,
                                    int64_t n, int64_t cols, int64_t c0, int64_t w);
    /* out[n, dim] = table[tok - v_start] for v_start <= tok < v_start + v_count, else 0 (vocab-parallel). */
    sits_status_t (*embed)(sits_backend_t *be, void *out, const void *table, const int32_t *tokens, int n, int dim,
                           int v_start, int v_count);
    /* out[n, dim] = x / rms(x) * w. Every norm op's w is FP32 on every backend (weights.h: norm weights
     * are fp32 whatever weight_dtype is -- Gemma's 1 + w exact as HF computes it). */
    sits_status_t (*rmsnorm)(sits_backend_t *be, void *out, const void *x, const void *w, int n, int dim, float eps);
    /* residual[n, dim] += x; out = rmsnorm(residual) * w (the fused form used between sublayers). */
    sits_status_t (*add_rmsnorm)(sits_backend_t *be, void *out, void *residual, const void *x, const void *w, int n, int dim,
                                 float eps);
    /* y[n, out] = x[n, in] . w[out, in]^T (+ bias[out]) */
    sits_status_t (*matmul)(sits_backend_t *be, void *y, const void *x, const void *w, const void *bias, int n, int in, int out);
    /* In place on x[n, row_stride]: rotate heads 0..n_rot_heads-1 (each head_dim wide, from column 0) at
     * position pos[t] with the HF half-split (rotate_half) layout; inv_freq[head_dim/2] f32 device. */
    sits_status_t (*rope)(sits_backend_t *be, void *x, int n, int row_stride, int n_rot_heads, int head_dim,
                          const int32_t *pos, const float *inv_freq);
    /* k_cache/v_cache[slot_mapping[t]] = k[t], v[t]; k = qkv + k_col, v = qkv + v_col in rows of row_stride;
     * each [kv_dim = n_kv_heads * head_dim]. slot -1 = skip. Stored in be->kv_dtype (I8, F8_E4M3: quantised
     * per head, in the block units of block_size slots described at the top). */
    sits_status_t (*kv_write)(sits_backend_t *be, void *k_cache, void *v_cache, const void *qkv, int n, int row_stride,
                              int k_col, int v_col, int kv_dim, int head_dim, int block_size, const int32_t *slot_mapping);
    /* out[n, n_heads*head_dim] = softmax(q k^T * scale) v over the paged cache; q = rows of qkv (row_stride). */
    sits_status_t (*attention)(sits_backend_t *be, void *out, const void *q, int q_row_stride, const void *k_cache,
                               const void *v_cache, const sits_attn_args_t *args);
    /* out[n, dim] = silu(gu[:, :dim]) * gu[:, dim:]; gu [n, 2*dim] (gate then up). */
    sits_status_t (*silu_mul)(sits_backend_t *be, void *out, const void *gu, int n, int dim);
    /* out[i, :] = x[rows[i], :] for i < n_rows; rows device int32. */
    sits_status_t (*gather_rows)(sits_backend_t *be, void *out, const void *x, const int32_t *rows, int n_rows, int dim);
    /* Activations [n] of act_dtype -> host fp32. */
    sits_status_t (*download_f32)(sits_backend_t *be, float *dst_host, const void *src, size_t n);
    sits_status_t (*sync)(sits_backend_t *be);

    /* ---- [perf] optional slots: NULL where a backend does not have them; the engine then falls
     * back to the ops above. Each has a cpu twin except the graph slots. ---- */
    /* residual [n, dim] FP32 += x [n, dim] (act_dtype); out [n, dim] (act_dtype) = rmsnorm(residual) * w.
     * The residual stream is never rounded to act_dtype. */
    sits_status_t (*add_rmsnorm_f32res)(sits_backend_t *be, void *out, float *residual, const void *x, const void *w, int n,
                                        int dim, float eps);
    /* As matmul, but y [n, out] is FP32 (the accumulation, unrounded). cuda: bias must be NULL
     * (SITS_ERR_UNSUPPORTED otherwise; the engine uses it for the bias-free lm_head only). */
    sits_status_t (*matmul_f32out)(sits_backend_t *be, float *y, const void *x, const void *w, const void *bias, int n, int in,
                                   int out);
    /* recs (device, [n] records of c candidates, see sits_sample_rec_t) from logits [n, v_count] FP32
     * (device) of ids v_start .. v_start + v_count - 1; rows [n] device. v_count may be 0 (empty records).
     * 1 <= c <= SITS_SAMPLE_MAX_C on cuda. Results equal sits_backend_cpu_sample_reduce's (the
     * candidates as a set). */
    sits_status_t (*sample_reduce)(sits_backend_t *be, void *recs, const float *logits, int n, int v_start, int v_count,
                                   const sits_sample_row_t *rows, int c);
    /* [structured output] sits_backend_cpu_logit_mask on this backend's memory (logits, masks [n_masks, words],
     * rows [n_masks]): each TP rank masks its own vocabulary shard. One kernel on cuda. NULL: the engine masks
     * the host copy of the logits and samples there. */
    sits_status_t (*logit_mask)(sits_backend_t *be, float *logits, int v_start, int v_count, const uint32_t *masks, int words,
                                const int32_t *rows, int n_masks);
    /* [sampling controls] In place on logits [n, v_count] fp32 (ids v_start ..), all in this backend's memory:
     * with rows [n] and ents (both non-NULL): each row's entries as described above (ent_raw [*] receives
     * raw[k] at the entry's index k in ents, for the entries in the shard); then, with cut [n]:
     * logits[s, i] = -inf where logits[s, i] < cut[s] (min_p: cut = max + T log(min_p), -inf for rows
     * without it); then, with rowmax [n]: rowmax[s] = the row's max after the above (-inf for an empty
     * shard). Any of rows / cut / rowmax may be NULL. One kernel on cuda (a block per row). */
    sits_status_t (*logit_process)(sits_backend_t *be, float *logits, int n, int v_start, int v_count,
                                   const sits_logit_proc_row_t *rows, const sits_logit_proc_ent_t *ents, float *ent_raw,
                                   const float *cut, float *rowmax);
    /* [logprobs] recs [n_rows] (device) from the raw logits [*, v_count] fp32: for each scored row, its
     * shard's record (sits_logprob_rec_t). lse's double sums may differ in their last bits between
     * backends (summation order); tgt, n and top are exact. One block per scored row on cuda. */
    sits_status_t (*logprob_reduce)(sits_backend_t *be, sits_logprob_rec_t *recs, const float *logits, int v_start, int v_count,
                                    const sits_logprob_row_t *rows, int n_rows);
    /* [logprobs] out [n] = the raw logit of ids[s] in row s after logit_process ran on it: NaN when
     * ids[s] is outside the shard (or < 0); the entry's raw value when rows (and ents, ent_raw of that
     * logit_process call) are given and row s has an entry for ids[s]; else logits[s, ids[s] - v_start].
     * (A sampled id was never masked or cut, so only the entries changed it.) */
    sits_status_t (*logit_pick)(sits_backend_t *be, float *out, const float *logits, int n, int v_start, int v_count,
                                const int32_t *ids, const sits_logit_proc_row_t *rows, const sits_logit_proc_ent_t *ents,
                                const float *ent_raw);
    /* Page-locked host memory (faster, asynchronous copies); NULL slots: plain malloc/free. */
    sits_status_t (*host_alloc)(sits_backend_t *be, size_t bytes, void **ptr_p);
    void (*host_free)(sits_backend_t *be, void *ptr);
    /* CUDA graphs (no cpu twin). graph_begin: the ops enqueued from now on are recorded, not run,
     * until graph_end, which instantiates them (*graph_p) -- or, when recording failed, ends the
     * capture, leaves the stream usable and returns the error. graph_launch enqueues a recorded
     * sequence: same pointers and shapes, device memory read when it runs. graph_destroy frees one. */
    sits_status_t (*graph_begin)(sits_backend_t *be);
    sits_status_t (*graph_end)(sits_backend_t *be, void **graph_p);
    sits_status_t (*graph_launch)(sits_backend_t *be, void *graph);
    void (*graph_destroy)(sits_backend_t *be, void *graph);
    /* [fp8] y [n, out] = (e4m3(x / sx) . w_q^T) * sx[t] * w_scale[o] (+ bias[o]), fp32 accumulation:
     * x [n, in] act_dtype is quantised per row (sx[t] = absmax / 448, 1 for a zero row; e4m3 =
     * round to nearest even, saturating at 448); w_q [out, in] FP8 E4M3 bytes, w_scale [out] fp32
     * (model/precision.h). y is act_dtype, or fp32 when y_f32 (then bias must be NULL on cuda).
     * in % 16 == 0 and out % 16 == 0. NULL: no fp8 support (the engine refuses fp8 weights). */
    sits_status_t (*matmul_fp8)(sits_backend_t *be, void *y, int y_f32, const void *x, const void *w_q, const float *w_scale,
                                const void *bias, int n, int in, int out);
    /* [fp8: fused activation quantisation] matmul_fp8 on activations already quantised the same way:
     * xq [n, in] E4M3 bytes, xs [n] fp32 (device). */
    sits_status_t (*matmul_fp8q)(sits_backend_t *be, void *y, int y_f32, const void *xq, const float *xs, const void *w_q,
                                 const float *w_scale, const void *bias, int n, int in, int out);
    /* add_rmsnorm_f32res / silu_mul that also quantise their output rows for the FP8 GEMM reading
     * them: xq [n, dim] E4M3 (8-byte aligned), xs [n] fp32 -- the bytes matmul_fp8 makes of `out`,
     * so matmul_fp8q(xq, xs) == matmul_fp8(out) bit for bit. One kernel each on cuda. The three slots
     * come together or not at all (the engine then lets matmul_fp8 quantise). out may be NULL: then only
     * xq / xs (the same bytes) -- the engine's fused path, where nothing reads out. */
    sits_status_t (*add_rmsnorm_f32res_fp8)(sits_backend_t *be, void *out, void *xq, float *xs, float *residual, const void *x,
                                            const void *w, int n, int dim, float eps);
    sits_status_t (*silu_mul_fp8)(sits_backend_t *be, void *out, void *xq, float *xs, const void *gu, int n, int dim);
    /* [moe fp8] xq [n, dim] E4M3 bytes, xs [n] fp32 = the per-row quantisation matmul_fp8 makes of x [n, dim]
     * act_dtype (so matmul_fp8q(xq, xs) == matmul_fp8(x) bit for bit): the FP8 payload of the MoE dispatch.
     * NULL: the dispatch sends act_dtype rows. */
    sits_status_t (*quant_fp8_rows)(sits_backend_t *be, void *xq, float *xs, const void *x, int n, int dim);
    /* [kv] Paged KV blocks <-> one flat buffer, for swaps and moves: for i < n_ids, j < n_bufs,
     * flat[(i * n_bufs + j) * seg, + seg) <-> bufs[j] + ids[i] * seg (bytes); to_cache 0 gathers the
     * blocks into flat, 1 scatters flat into them. flat, bufs [n_bufs] (pointers to this backend's
     * buffers) and ids [n_ids] are in this backend's memory; seg % 16 == 0, pointers 16-byte aligned.
     * One kernel on cuda. NULL: the engine copies segment by segment. */
    sits_status_t (*kv_block_copy)(sits_backend_t *be, void *flat, void *const *bufs, int n_bufs, const int32_t *ids, int n_ids,
                                   size_t seg, int to_cache);
    /* [rope + kv write] = rope over the n_q + n_kv heads from column 0 of qkv [n, row_stride], then
     * kv_write with k_col = n_q * head_dim, v_col = (n_q + n_kv) * head_dim, kv_dim = n_kv * head_dim:
     * one fused pass on cuda (head_dim <= 256; SITS_ERR_UNSUPPORTED beyond, the engine then runs the
     * two ops). Padding tokens (slot -1) are rotated but not written.
     * [families] q_norm / k_norm [head_dim] FP32 (both or neither; head_dim % 64 == 0): first rmsnorm_heads of
     * the q heads with q_norm and of the k heads with k_norm (eps), bit for bit (Qwen3's, Gemma 3's QK-norm). */
    sits_status_t (*rope_kv_write)(sits_backend_t *be, void *qkv, int n, int row_stride, int n_q, int n_kv, int head_dim,
                                   const int32_t *pos, const float *inv_freq, void *k_cache, void *v_cache, int block_size,
                                   const int32_t *slot_mapping, const void *q_norm, const void *k_norm, float eps);
    /* [memory plan] optional (NULL: the backend holds nothing beyond what op->alloc hands out): adds to
     * plan the device memory the backend holds (held 1: allocated already, at create) or will need
     * (held 0) for steps of the given shape; with reserve 1 it also allocates the latter now, so that
     * no step allocates device memory later. */
    sits_status_t (*mem_plan)(sits_backend_t *be, const sits_mem_shape_t *shape, int reserve, sits_mem_plan_t *plan);
    /* [memory plan] optional (NULL: not counted): the allocations this backend made so far (cuda: every
     * cudaMalloc, its fixed buffers and alloc's; cpu: alloc's, host memory) and their bytes in *bytes_p.
     * A server counts those made after start-up: steps and KV moves must make none. */
    uint64_t (*alloc_count)(sits_backend_t *be, uint64_t *bytes_p);
    /* ---- [families] model-family ops (cpu + cuda; the engine refuses a model that needs one a
     * backend lacks) ---- */
    /* In place on x [n, row_stride]: each of the n_heads heads (head_dim wide, from column col0) of
     * every row becomes rmsnorm(head) * w, w [head_dim] FP32 (Qwen3's q_norm / k_norm; fp32 sum). */
    sits_status_t (*rmsnorm_heads)(sits_backend_t *be, void *x, int n, int row_stride, int col0, int n_heads, int head_dim,
                                   const void *w, float eps);
    /* x [n_elems] (act_dtype) *= s, one rounding (Gemma's embedding scale). */
    sits_status_t (*scale)(sits_backend_t *be, void *x, size_t n_elems, float s);
    /* out[n, dim] = gelu_tanh(gu[:, :dim]) * gu[:, dim:] (GeGLU; gelu_tanh(a) = 0.5 a (1 + tanh(sqrt(2/pi)
     * (a + 0.044715 a^3))), PyTorch's approximate="tanh"); gu [n, 2*dim] (gate then up). */
    sits_status_t (*gelu_tanh_mul)(sits_backend_t *be, void *out, const void *gu, int n, int dim);
    /* [gpt-oss] out[n, dim] = (clamp(u, -limit, limit) + 1) * g sigmoid(alpha g), g = min(gate, limit), u = up;
     * gu [n, 2*dim] (gate then up: the loader de-interleaves gpt-oss's alternating columns). */
    sits_status_t (*swiglu_oai)(sits_backend_t *be, void *out, const void *gu, int n, int dim, float alpha, float limit);
    /* x [n_elems] = cap * tanh(x / cap) in place; x fp32 when f32, else act_dtype (final-logit soft-capping). */
    sits_status_t (*softcap)(sits_backend_t *be, void *x, size_t n_elems, int f32, float cap);
    /* As rope, with token t rotated by inv_long when sel[t] != 0, else by inv_short (longrope's two sets,
     * [head_dim/2] f32 each); sel [n] int32 device. */
    sits_status_t (*rope_sel)(sits_backend_t *be, void *x, int n, int row_stride, int n_rot_heads, int head_dim,
                              const int32_t *pos, const float *inv_short, const float *inv_long, const int32_t *sel);
    /* ---- [moe] Mixture of Experts (both NULL: the backend cannot run MoE models) ----
     * moe_topk: the router of n tokens over E experts: logits [n, E] act_dtype; p = softmax(logits) in
     * fp32 (max subtracted, expf, sum in index order, p_e = e_e / sum); ids [n, k] int32 = the k largest
     * p in descending order (the lower expert index first on ties), wts [n, k] fp32 = those p, divided
     * by their sum (summed in that order) when norm. k <= E <= 1024, k <= 32. One kernel on cuda. */
    sits_status_t (*moe_topk)(sits_backend_t *be, int32_t *ids, float *wts, const void *logits, int n, int E, int k, int norm);
    /* moe_combine: out [n, dim] act_dtype = sum over j < kk of wts[t * kk + j] * y[pos[t * kk + j], :]
     * for each token t, accumulated in fp32 in j order (pos -1: the slot is skipped; a token without a
     * slot gets 0); y [*, dim] act_dtype, pos int32 and wts fp32 [n * kk] device arrays. Deterministic
     * (no atomics): one block per token on cuda. */
    sits_status_t (*moe_combine)(sits_backend_t *be, void *out, const void *y, const int32_t *pos, const float *wts, int n,
                                 int kk, int dim);
    /* ---- [moe dev] the routed experts of a small step without the host (engine/moe.c's device path; all
     * three NULL: the host path always). Slot s = t k + j is token t's j-th expert (ids [n k] of moe_topk).
     * moe_route: the slots of this rank's experts e0 .. e0 + ne - 1 (all E without EP: e0 0, ne E; with --ep the
     *   others' slots are left out: no row of y is written for them) grouped by expert into plan, int32
     *   [SITS_MOE_PLAN_WORDS(E, nk)], nk = n k:
     *     plan[0] = A, the experts in the range with a slot; plan[1 + a] (a < A) those experts ascending, as local
     *               indices e - e0 (into moe_experts' pointer arrays);
     *     plan[1 + E + a] (a <= A) where expert a's slots start in the list (0 for a = 0, the range's slots for a = A);
     *     plan[2 + 2 E + i] the slot list: by expert, slots ascending within one.
     *   counts [E] uint64 (NULL: not counted) += each expert's slots whose token t has mask[t] >= 0 (mask [n]
     *   int32: the step's KV slots, -1 on the pad rows of a graph step; NULL: every token), every expert, in the
     *   range or not. Deterministic. E <= 1024, 0 <= e0, 1 <= ne, e0 + ne <= E, 1 <= nk <= SITS_MOE_DEV_MAX_SLOTS;
     *   ids outside [0, E) are an error (cpu) or dropped (cuda).
     * moe_experts: every slot's SwiGLU expert e = ids[s]: with x[t] [H],
     *     act[s] [i] = silu(g) * u, g = x[t] . w_gu[e][0 .. i)^T, u = x[t] . w_gu[e][i .. 2 i)^T, g and u each
     *                  rounded to act_dtype (what matmul then silu_mul make of them);
     *     y[s] [H]   = act[s] . w_down[e]^T;
     *   x [n, H], act [nk, i], y [nk, H] act_dtype (rows by slot), fp32 accumulation; w_gu / w_down: device arrays
     *   of pointers to weight_dtype [2 i, H] / [H, i] by the plan's (local) expert index (NULL entries for experts
     *   no slot names are never read); the rows of slots the plan leaves out are not written.
     *   [moe fp8] s_gu / s_down non-NULL (both or neither): the weights are E4M3 bytes with those fp32 row scales
     *   (device arrays of E pointers to [2 i] / [H]), and each linear is matmul_fp8's: its input rows quantised per
     *   row (x per token, act per slot, into q8: SITS_MOE_Q8_BYTES(n, nk, H, i) bytes of scratch), then
     *   g = dot(x8, w8[r]) * xs[t] * s_gu[e][r] (u, y likewise), each rounded to act_dtype.
     *   H % 8 == 0 and i % 8 == 0 on cuda (16-byte rows). A grid of min(E, nk) experts, idle past A.
     *   [gpt-oss] epi non-NULL (sits_moe_epi_t): its biases join g, u and y before each is rounded (a biased GEMM's
     *   output), and act[s] = swiglu_oai(g, u) when epi->oai (what matmul with bias then swiglu_oai make).
     * moe_combine_slots: moe_combine with the slots above: out [n, H] = sum_{j < k} wts[t k + j] y[t k + j]
     *   (+ sigmoid(sg[t]) y[n k + t] when sg: the shared expert's gate logits [n] act_dtype, its rows after the
     *   slots), fp32 in that order. */
    sits_status_t (*moe_route)(sits_backend_t *be, int32_t *plan, uint64_t *counts, const int32_t *ids, const int32_t *mask,
                               int n, int k, int E, int e0, int ne);
    sits_status_t (*moe_experts)(sits_backend_t *be, void *y, void *act, const void *x, const int32_t *plan,
                                 const void *const *w_gu, const void *const *w_down, const float *const *s_gu,
                                 const float *const *s_down, void *q8, const sits_moe_epi_t *epi, int n, int k, int E, int H,
                                 int i);
    sits_status_t (*moe_combine_slots)(sits_backend_t *be, void *out, const void *y, const float *wts, const void *sg, int n,
                                       int k, int H);
    /* ---- [int4] y [n, out] = x [n, in] . w^T (+ bias [out]) with w the packed INT4 weights above,
     * dequantised per group (fp32 on cpu; in registers on cuda), fp32 accumulation; y, x, bias act_dtype.
     * in even; without gidx in % group_size == 0. NULL: no INT4 support (the engine refuses INT4 weights). */
    sits_status_t (*matmul_w4)(sits_backend_t *be, void *y, const void *x, const sits_w4_t *w, const void *bias, int n, int in,
                               int out);
    /* [int4 tiles] Optional (NULL: the row layout is the backend's): a linear of out x in just loaded in the row layout
     * (every row uploaded) re-arranged in place into this backend's own, w->tiled set when it did. */
    sits_status_t (*w4_layout)(sits_backend_t *be, sits_w4_t *w, int out, int in);
    /* [perf: swiglu gemv] Optional (NULL: none). act [n, inter] = silu_mul of the gate/up linear's output, w [2 inter, in]
     * (gate rows, then up rows), no bias -- the bits of matmul (w_scale NULL: x and w in the weight dtype) or matmul_fp8q
     * (w_scale [2 inter]: x the E4M3 rows with scales xs [n]) into [n, 2 inter] followed by silu_mul, in one kernel where
     * the backend has one for the shape (cuda: the GEMV's 1-16 tokens); SITS_ERR_UNSUPPORTED, nothing done, otherwise: the caller
     * then runs the two ops. */
    sits_status_t (*matmul_swiglu)(sits_backend_t *be, void *act, const void *x, const float *xs, const void *w,
                                   const float *w_scale, int n, int in, int inter);
    /* [moe fuse] Optional (NULL: none): the [moe dev] ops of one token fused, where the backend has kernels for the shape;
     * SITS_ERR_UNSUPPORTED, nothing done, otherwise (the caller then runs the separate ops).
     * moe_select: the router of one token in one launch: logits [1, E] act_dtype = matmul(x [1, H], w [E, H], bias [E] or
     *   NULL) -- the same bits --, then moe_topk of them (ids, wts [k]) and moe_route (plan, counts, mask [1] or NULL, the
     *   range e0 .. e0 + ne - 1). sync: a device uint32 that is 0 at the call and 0 again after it (the kernel's
     *   arrival counter).
     * moe_experts_combine: one token without EP (the plan's expert indices are the ids; e0 0): moe_experts, then
     *   moe_combine_slots without a shared expert -- the same bits of out [1, H] --, y not written; ids [k] the slots'
     *   experts (moe_topk's), wts [k] their weights. */
    sits_status_t (*moe_select)(sits_backend_t *be, void *logits, int32_t *ids, float *wts, int32_t *plan, uint64_t *counts,
                                uint32_t *sync, const void *x, const void *w, const void *bias, const int32_t *mask, int H, int E,
                                int k, int norm, int e0, int ne);
    sits_status_t (*moe_experts_combine)(sits_backend_t *be, void *out, void *act, const void *x, const int32_t *plan,
                                         const int32_t *ids, const float *wts, const void *const *w_gu, const void *const *w_down,
                                         const float *const *s_gu, const float *const *s_down, void *q8, const sits_moe_epi_t *epi,
                                         int k, int E, int H, int i);
    /* [moe grouped] Optional (NULL: none): the experts of a host-routed step (the MoE path of steps past the device path's,
     * e.g. prefill) in one call instead of a matmul / silu_mul / matmul per expert: rows [off[e], off[e + 1]) of x
     * [rows, H] (expert-major; off [E + 1] device int32) through expert e, as moe_experts does for a slot (g, u rounded to
     * act_dtype, silu(g) u or epi's; y its down projection) into act [rows, i] and y [rows, H]; w_gu / w_down as
     * moe_experts' (bf16 weights only). tiles [n_tiles] device pairs {e, r0}: the caller's cut of every expert's rows into
     * runs of SITS_MOE_GROUPED_ROWS from off[e] (the last one shorter). fp32 sums, not in a given order (cuda: tensor
     * cores; the per-expert GEMMs' values up to rounding). SITS_ERR_UNSUPPORTED, nothing done: the caller runs the
     * experts one by one. */
    sits_status_t (*moe_grouped)(sits_backend_t *be, void *y, void *act, const void *x, const int32_t *off, const int32_t *tiles,
                                 int n_tiles, const void *const *w_gu, const void *const *w_down, const sits_moe_epi_t *epi, int H,
                                 int i);
} sits_backend_ops_t;

/* [moe] The reference router top-k and combine (host memory, fp32 logits / rows): the cpu backend's
 * moe_topk and moe_combine, and the twins the cuda kernels are tested against. */
void sits_backend_cpu_moe_topk(int32_t *ids, float *wts, const float *logits, int n, int E, int k, int norm);
void sits_backend_cpu_moe_combine(float *out, const float *y, const int32_t *pos, const float *wts, int n, int kk, int dim);
/* [moe dev] The int32 words of a moe_route plan for E experts and nk slots, and the most slots it takes. */
#define SITS_MOE_PLAN_WORDS(E, nk) (2 + 2 * (size_t)(E) + (size_t)(nk))
#define SITS_MOE_DEV_MAX_SLOTS 2048
/* [moe grouped] rows of one expert a moe_grouped tile (kernels/moe.cu MG_BM) */
#define SITS_MOE_GROUPED_ROWS 64
/* [moe dev] [moe fp8] moe_experts' scratch for FP8 experts: the row scales of x (n) and act (nk) as fp32, then
 * x (n rows of H) and act (nk rows of i) as E4M3 bytes, each part 16-byte aligned. */
#define SITS_MOE_Q8_PAD16(b) (((size_t)(b) + 15) / 16 * 16)
#define SITS_MOE_Q8_BYTES(n, nk, H, i) \
    (SITS_MOE_Q8_PAD16(4 * ((size_t)(n) + (size_t)(nk))) + SITS_MOE_Q8_PAD16((size_t)(n) * (size_t)(H)) + \
     SITS_MOE_Q8_PAD16((size_t)(nk) * (size_t)(i)))
/* [moe dev] The reference moe_route (host memory): the cpu backend's, and the twin of the cuda kernel.
 * SITS_ERR_INVALID for an id outside [0, E). */
sits_status_t sits_backend_cpu_moe_route(int32_t *plan, uint64_t *counts, const int32_t *ids, const int32_t *mask, int n, int k,
                                         int E, int e0, int ne);



/* Largest candidate count sample_reduce takes on cuda (the engine uses the host path beyond). */
#define SITS_SAMPLE_MAX_C 1024

struct sits_backend {
    const sits_backend_ops_t *ops;
    sits_dtype_t act_dtype, weight_dtype, kv_dtype;
    int device;            /* GPU index, -1 on cpu */
    void *impl;
};

/* [memory plan] be->ops->alloc_count, or 0 (and *bytes_p 0) for a backend that does not count. */
static inline uint64_t sits_backend_alloc_count(sits_backend_t *be, uint64_t *bytes_p)
{
    if (bytes_p) *bytes_p = 0;
    return be && be->ops->alloc_count ? be->ops->alloc_count(be, bytes_p) : 0;
}

typedef struct {
    int threads;           /* cpu: worker threads (0 = all the cores this process may use) */
    int device;            /* cuda: device index */
    int no_gemm_tune;      /* cuda: 1 = take cuBLASLt's first heuristic algorithm, no timing (--no-gemm-autotune) */
    int gemv_max_tokens;   /* cuda: linears of up to this many tokens (<= 16) run the GEMV kernels (kernels/gemv.cu),
                            * larger ones cuBLASLt; 0 = the default (16), < 0 = never (--gemv-max-tokens 0) */
} sits_backend_params_t;

sits_status_t sits_backend_cpu_create(const sits_backend_params_t *params, sits_backend_t **be_p);
/* SITS_ERR_UNSUPPORTED when built without CUDA or no GPU is usable. */
sits_status_t sits_backend_cuda_create(const sits_backend_params_t *params, sits_backend_t **be_p);
/* Number of usable CUDA devices (0 without CUDA). */
int sits_backend_cuda_device_count(void);

/* [nccl hook] CUDA builds only (cuda.c). The cudaStream_t of a cuda backend, NULL otherwise; for the
 * NCCL communicator, which enqueues its collectives on it. */
void *sits_backend_cuda_stream(sits_backend_t *be);
/* Free and total memory of a cuda backend's GPU (cudaMemGetInfo); SITS_ERR_UNSUPPORTED otherwise. */
sits_status_t sits_backend_cuda_mem_info(sits_backend_t *be, size_t *free_p, size_t *total_p);
/* [memory plan] Device allocations (cudaMalloc) this backend made so far, and their bytes; 0 on
 * other backends. A server counts those after start-up: the step path must make none. */
uint64_t sits_backend_cuda_dev_allocs(sits_backend_t *be, uint64_t *bytes_p);
/* [nccl hook] A health check run while sync / download / download_f32 wait for the stream: with at
 * least one registered, those waits poll the stream and call every check on each not-ready poll
 * with the seconds waited so far. A check returns SITS_OK to keep waiting; on a fault it aborts the
 * job (or returns an error, which the wait returns). fn NULL removes the check registered with ctx;
 * registering ctx again replaces its fn. At most 4 per backend. SITS_ERR_INVALID on a non-cuda backend. */
typedef sits_status_t (*sits_backend_health_fn)(void *ctx, double waited_s);
sits_status_t sits_backend_cuda_set_health_check(sits_backend_t *be, sits_backend_health_fn fn, void *ctx);

static inline void sits_backend_destroy(sits_backend_t *be) { if (be) be->ops->destroy(be); }

/* [int8 kv] --kv-cache-dtype: "auto" (the activation dtype), "bf16", "fp32", "int8" or [fp8 kv] "fp8"
 * (= "fp8_e4m3", F8_E4M3) -> *dt_p; SITS_ERR_INVALID for another name. */
sits_status_t sits_backend_kv_dtype_parse(const char *name, sits_dtype_t act_dtype, sits_dtype_t *dt_p);
/* Sets be->kv_dtype before any KV buffer exists: the activation dtype, I8, F8_E4M3, or BF16 on a backend
 * with fp32 activations (cpu). SITS_ERR_UNSUPPORTED otherwise (fp32 KV on cuda). */
sits_status_t sits_backend_set_kv_dtype(sits_backend_t *be, sits_dtype_t dt);

#endif
