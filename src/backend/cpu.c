/* cpu.c -- the reference backend: plain fp32 loops, threaded with OpenMP.
 *
 * Weights are converted to fp32 at upload; activations are fp32, the KV cache be->kv_dtype (fp32 by
 * default; bf16, int8 and fp8 (e4m3) are stored as such and widened to fp32 when read, see backend.h). Every op is
 * written to be read: it is the definition the CUDA kernels are checked against (op parity tests).
 * Shapes are documented in backend.h. The candidate reduction of the sampler
 * (sits_backend_cpu_sample_reduce) lives here too: it is both the cpu twin of sample_reduce and
 * the host sampling path of src/engine/sample.c, so the two cannot drift apart. */
#include "backend/backend.h"
#include "util/dummy.h"
#include "util/log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Work (multiply-adds or so) below which an op runs on one thread: a parallel region costs a fork and a
 * barrier, and on a busy machine a barrier waits for a descheduled thread (a 5-token prefill of a
 * 3-layer hidden-96 model spent ~100 ms in barriers). About 50 us of one core's work. */
#define CPU_PAR_MIN_WORK ((size_t)1 << 18)

/* [memory plan] what alloc handed out so far (alloc_count): a server's count after start-up must stay
 * 0 on the cpu as on a GPU, so that the CPU tests catch a step or KV move that allocates */
typedef struct {
    uint64_t allocs, alloc_bytes;
} cpu_impl_t;

static void cpu_destroy(sits_backend_t *be)
{
    free(be->impl);
    free(be);
}

static sits_status_t cpu_alloc(sits_backend_t *be, size_t bytes, void **ptr_p)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) {
        SITS_ERROR(SITS_SUB_BACKEND, "cpu: cannot allocate %zu bytes", bytes);
        return SITS_ERR_NOMEM;
    }
    cpu_impl_t *c = be->impl;
    c->allocs++;
    c->alloc_bytes += bytes;
    *ptr_p = p;
    return SITS_OK;
}

static uint64_t cpu_alloc_count(sits_backend_t *be, uint64_t *bytes_p)
{
    const cpu_impl_t *c = be->impl;
    if (bytes_p) *bytes_p = c->alloc_bytes;
    return c->allocs;
}

static void cpu_free(sits_backend_t *be, void *ptr) { free(ptr); }

static sits_status_t cpu_copy(sits_backend_t *be, void *dst, const void *src, size_t bytes)
{
    memcpy(dst, src, bytes);
    return SITS_OK;
}

static sits_status_t cpu_memset0(sits_backend_t *be, void *dst, size_t bytes)
{
    memset(dst, 0, bytes);
    return SITS_OK;
}

/* [scale] the rows of a strided upload, one memcpy each */
static sits_status_t cpu_upload_rows(sits_backend_t *be, void *dst, size_t dst_pitch, const void *src_host, size_t src_pitch,
                                     size_t row_bytes, int rows)
{
    (void)be;
    if (rows < 0 || row_bytes > dst_pitch || row_bytes > src_pitch) return SITS_ERR_INVALID;
    for (int r = 0; r < rows; r++)
        memcpy((unsigned char *)dst + (size_t)r * dst_pitch, (const unsigned char *)src_host + (size_t)r * src_pitch, row_bytes);
    return SITS_OK;
}

static sits_status_t cpu_upload_weight(sits_backend_t *be, void *dst, int64_t dst_row0, const void *src, sits_dtype_t src_dt,
                                       int64_t src_cols, int64_t r0, int64_t r1, int64_t c0, int64_t c1)
{
    size_t esz = sits_dtype_size(src_dt);
    int64_t cols = c1 - c0;
    float *out = (float *)dst + dst_row0 * cols;
    for (int64_t r = r0; r < r1; r++) {
        const unsigned char *row = (const unsigned char *)src + ((size_t)r * (size_t)src_cols + (size_t)c0) * esz;
        if (sits_convert_to_f32(src_dt, row, out + (r - r0) * cols, (size_t)cols) != 0) {
            SITS_ERROR(SITS_SUB_BACKEND, "cpu: cannot convert weights of dtype %s", sits_dtype_name(src_dt));
            return SITS_ERR_UNSUPPORTED;
        }
    }
    return SITS_OK;
}

/* [dummy] util/dummy.h's values straight into the fp32 weights: dst [*, w] */
static sits_status_t cpu_dummy_rows(sits_backend_t *be, void *dst, int64_t dst_row0, uint64_t base, int64_t r, int64_t n,
                                    int64_t c0, int64_t w)
{
    float *out = (float *)dst + dst_row0 * w;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        uint64_t rs = sits_dummy_stream(base, r + i);
        for (int64_t j = 0; j < w; j++) out[i * w + j] = sits_dummy_value(rs, c0 + j);
    }
    return SITS_OK;
}

/* [dummy] q [*, w] E4M3, s [*]: a row's scale from the absmax of all its cols values (drawn twice: no staging) */
static sits_status_t cpu_dummy_rows_fp8(sits_backend_t *be, void *q_, float *s, int64_t dst_row0, uint64_t base, int64_t r,
                                        int64_t n, int64_t cols, int64_t c0, int64_t w)
{
    uint8_t *q = (uint8_t *)q_ + dst_row0 * w;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        uint64_t rs = sits_dummy_stream(base, r + i);
        float mx = 0.0f;
        for (int64_t j = 0; j < cols; j++) {
            float a = fabsf(sits_dummy_value(rs, j));
            mx = a > mx ? a : mx;
        }
        float sc = sits_fp8_scale(mx);
        s[dst_row0 + i] = sc;
        for (int64_t j = 0; j < w; j++) q[i * w + j] = sits_f32_to_f8e4m3(sits_dummy_value(rs, c0 + j) / sc);
    }
    return SITS_OK;
}

static sits_status_t cpu_embed(sits_backend_t *be, void *out_, const void *table_, const int32_t *tokens, int n, int dim,
                               int v_start, int v_count)
{
    float *out = out_;
    const float *table = table_;
    for (int t = 0; t < n; t++) {
        int local = tokens[t] - v_start;
        if (local >= 0 && local < v_count) memcpy(out + (size_t)t * dim, table + (size_t)local * dim, sizeof(float) * dim);
        else memset(out + (size_t)t * dim, 0, sizeof(float) * dim);
    }
    return SITS_OK;
}

static void rmsnorm_row(float *out, const float *x, const float *w, int dim, float eps)
{
    double ss = 0; /* fp64 sum: the reference should not be the source of error */
    for (int i = 0; i < dim; i++) ss += (double)x[i] * x[i];
    float inv = 1.0f / sqrtf((float)(ss / dim) + eps);
    for (int i = 0; i < dim; i++) out[i] = w[i] * (x[i] * inv);
}

static sits_status_t cpu_rmsnorm(sits_backend_t *be, void *out, const void *x, const void *w, int n, int dim, float eps)
{
    for (int t = 0; t < n; t++)
        rmsnorm_row((float *)out + (size_t)t * dim, (const float *)x + (size_t)t * dim, w, dim, eps);
    return SITS_OK;
}

static sits_status_t cpu_add_rmsnorm(sits_backend_t *be, void *out, void *residual_, const void *x_, const void *w, int n,
                                     int dim, float eps)
{
    float *residual = residual_;
    const float *x = x_;
    for (size_t i = 0; i < (size_t)n * dim; i++) residual[i] += x[i];
    return cpu_rmsnorm(be, out, residual, w, n, dim, eps);
}

static inline float dot_f32(const float *a, const float *b, int n)
{
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static sits_status_t cpu_matmul(sits_backend_t *be, void *y_, const void *x_, const void *w_, const void *bias_, int n, int in,
                                int out)
{
    float *y = y_;
    const float *x = x_, *w = w_, *bias = bias_;
    /* Parallel over output features: each weight row is read once from memory and reused for all n tokens. */
#pragma omp parallel for schedule(static) if ((size_t)n * in * out >= CPU_PAR_MIN_WORK)
    for (int o = 0; o < out; o++) {
        const float *wr = w + (size_t)o * in;
        float b = bias ? bias[o] : 0.0f;
        for (int t = 0; t < n; t++) y[(size_t)t * out + o] = dot_f32(x + (size_t)t * in, wr, in) + b;
    }
    return SITS_OK;
}

/* [families] sel (rope_sel): token t uses inv_long when sel[t] != 0; NULL: inv_freq for every token. */
static void rope_rows(float *x, int n, int row_stride, int n_rot_heads, int head_dim, const int32_t *pos, const float *inv_freq,
                      const float *inv_long, const int32_t *sel)
{
    int half = head_dim / 2;
    for (int t = 0; t < n; t++) {
        const float *inv = sel && sel[t] ? inv_long : inv_freq;
        for (int i = 0; i < half; i++) {
            float theta = (float)pos[t] * inv[i]; /* fp32 product, as HF computes it */
            float c = cosf(theta), s = sinf(theta);
            for (int h = 0; h < n_rot_heads; h++) {
                float *v = x + (size_t)t * row_stride + (size_t)h * head_dim;
                float a = v[i], b = v[i + half];
                v[i] = a * c - b * s;
                v[i + half] = b * c + a * s;
            }
        }
    }
}

static sits_status_t cpu_rope(sits_backend_t *be, void *x, int n, int row_stride, int n_rot_heads, int head_dim,
                              const int32_t *pos, const float *inv_freq)
{
    rope_rows(x, n, row_stride, n_rot_heads, head_dim, pos, inv_freq, NULL, NULL);
    return SITS_OK;
}

static sits_status_t cpu_rope_sel(sits_backend_t *be, void *x, int n, int row_stride, int n_rot_heads, int head_dim,
                                  const int32_t *pos, const float *inv_short, const float *inv_long, const int32_t *sel)
{
    rope_rows(x, n, row_stride, n_rot_heads, head_dim, pos, inv_short, inv_long, sel);
    return SITS_OK;
}

/* [int8 kv] The quantisation of one (token, KV head) row x[hd] (the definition in backend.h):
 * scale = amax / 127, q_i = rint(x_i / scale) clamped to [-127, 127]; NaN -> 0. */
static void kv_quant_row(const float *x, int hd, int8_t *q, float *scale_p)
{
    float amax = 0.0f;
    for (int i = 0; i < hd; i++) {
        float a = fabsf(x[i]);
        if (a > amax) amax = a;
    }
    float scale = amax / 127.0f;
    for (int i = 0; i < hd; i++) {
        float r = amax > 0.0f ? rintf(x[i] / scale) : 0.0f;
        r = r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r;
        q[i] = r == r ? (int8_t)r : 0;
    }
    *scale_p = scale;
}

/* [fp8 kv] One (token, head) row as E4M3 (backend.h): scale = amax / 448 (1 for an all-zero row),
 * q = e4m3(x / scale), round to nearest even, saturating (sits_f32_to_f8e4m3). */
static void kv_quant_row_f8(const float *x, int hd, uint8_t *q, float *scale_p)
{
    float amax = 0.0f;
    for (int i = 0; i < hd; i++) {
        float a = fabsf(x[i]);
        if (a > amax) amax = a;
    }
    float scale = sits_fp8_scale(amax);
    sits_fp8_quantize_row(q, x, (size_t)hd, scale);
    *scale_p = scale;
}

/* Where (slot, head) of an I8 / F8_E4M3 layer buffer lives: q row and scale (layout in backend.h). */
static int8_t *kv_i8_row(void *cache, size_t slot, int kvh, int n_kv, int hd, int bs, float **scale_p)
{
    size_t blk = slot / (size_t)bs, off = slot % (size_t)bs, row = off * (size_t)n_kv + (size_t)kvh;
    unsigned char *unit = (unsigned char *)cache + blk * sits_kv_i8_unit_bytes(bs, n_kv, hd);
    *scale_p = (float *)(unit + sits_kv_i8_q_bytes(bs, n_kv, hd)) + row;
    return (int8_t *)unit + row * (size_t)hd;
}

/* One row x[kv_dim] (all heads of a slot) into a cache of dtype dt. */
static void kv_store(void *cache, sits_dtype_t dt, size_t slot, const float *x, int kv_dim, int hd, int bs)
{
    if (dt == SITS_DT_F32) {
        memcpy((float *)cache + slot * kv_dim, x, sizeof(float) * kv_dim);
    } else if (dt == SITS_DT_BF16) {
        uint16_t *d = (uint16_t *)cache + slot * kv_dim;
        for (int i = 0; i < kv_dim; i++) d[i] = sits_f32_to_bf16(x[i]);
    } else { /* I8, F8_E4M3: one scale per head */
        int n_kv = kv_dim / hd;
        for (int h = 0; h < n_kv; h++) {
            float *sc;
            int8_t *q = kv_i8_row(cache, slot, h, n_kv, hd, bs, &sc);
            if (dt == SITS_DT_I8) kv_quant_row(x + (size_t)h * hd, hd, q, sc);
            else kv_quant_row_f8(x + (size_t)h * hd, hd, (uint8_t *)q, sc);
        }
    }
}

/* Head kvh of a slot as fp32: a pointer into an F32 cache, else the values widened / dequantised
 * (q * scale) into buf[hd]. */
static const float *kv_load(const void *cache, sits_dtype_t dt, size_t slot, int kvh, int n_kv, int hd, int bs, float *buf)
{
    if (dt == SITS_DT_F32) return (const float *)cache + slot * (size_t)n_kv * hd + (size_t)kvh * hd;
    if (dt == SITS_DT_BF16) {
        const uint16_t *s = (const uint16_t *)cache + slot * (size_t)n_kv * hd + (size_t)kvh * hd;
        for (int i = 0; i < hd; i++) buf[i] = sits_bf16_to_f32(s[i]);
        return buf;
    }
    float *sc;
    const int8_t *q = kv_i8_row((void *)cache, slot, kvh, n_kv, hd, bs, &sc);
    if (dt == SITS_DT_I8)
        for (int i = 0; i < hd; i++) buf[i] = (float)q[i] * *sc;
    else
        for (int i = 0; i < hd; i++) buf[i] = sits_f8e4m3_to_f32((uint8_t)q[i]) * *sc;
    return buf;
}

static sits_status_t cpu_kv_write(sits_backend_t *be, void *k_cache, void *v_cache, const void *qkv_, int n, int row_stride,
                                  int k_col, int v_col, int kv_dim, int head_dim, int block_size, const int32_t *slot_mapping)
{
    const float *qkv = qkv_;
    if (be->kv_dtype != SITS_DT_F32 && (head_dim <= 0 || kv_dim % head_dim || block_size <= 0)) return SITS_ERR_INVALID;
    for (int t = 0; t < n; t++) {
        int slot = slot_mapping[t];
        if (slot < 0) continue;
        kv_store(k_cache, be->kv_dtype, (size_t)slot, qkv + (size_t)t * row_stride + k_col, kv_dim, head_dim, block_size);
        kv_store(v_cache, be->kv_dtype, (size_t)slot, qkv + (size_t)t * row_stride + v_col, kv_dim, head_dim, block_size);
    }
    return SITS_OK;
}

static sits_status_t cpu_rmsnorm_heads(sits_backend_t *be, void *x_, int n, int row_stride, int col0, int n_heads, int head_dim,
                                       const void *w, float eps);

/* [rope + kv write] the reference ops in turn (backend.h): [families] the heads' RMSNorm, rope, kv_write. */
static sits_status_t cpu_rope_kv_write(sits_backend_t *be, void *qkv, int n, int row_stride, int n_q, int n_kv, int head_dim,
                                       const int32_t *pos, const float *inv_freq, void *k_cache, void *v_cache, int block_size,
                                       const int32_t *slot_mapping, const void *q_norm, const void *k_norm, float eps)
{
    if (!q_norm != !k_norm || (q_norm && head_dim % 64)) return SITS_ERR_INVALID;
    if (q_norm) {
        SITS_CHECK(cpu_rmsnorm_heads(be, qkv, n, row_stride, 0, n_q, head_dim, q_norm, eps));
        SITS_CHECK(cpu_rmsnorm_heads(be, qkv, n, row_stride, n_q * head_dim, n_kv, head_dim, k_norm, eps));
    }
    SITS_CHECK(cpu_rope(be, qkv, n, row_stride, n_q + n_kv, head_dim, pos, inv_freq));
    return cpu_kv_write(be, k_cache, v_cache, qkv, n, row_stride, n_q * head_dim, (n_q + n_kv) * head_dim, n_kv * head_dim,
                        head_dim, block_size, slot_mapping);
}

static sits_status_t cpu_attention(sits_backend_t *be, void *out_, const void *q_, int q_row_stride, const void *k_cache,
                                   const void *v_cache, const sits_attn_args_t *a)
{
    float *out = out_;
    const float *q = q_;
    int hd = a->head_dim, group = a->n_heads / a->n_kv_heads;
    int work = a->n_tokens * a->n_heads;
    sits_dtype_t dt = be->kv_dtype;
#pragma omp parallel for schedule(dynamic, 1) if ((size_t)work * hd * (a->max_context > 0 ? a->max_context : a->max_blocks * a->block_size) >= CPU_PAR_MIN_WORK)
    for (int wi = 0; wi < work; wi++) {
        int t = wi / a->n_heads, h = wi % a->n_heads, kvh = h / group;
        const float *qh = q + (size_t)t * q_row_stride + (size_t)h * hd;
        const int32_t *bt = a->block_tables + (size_t)a->seq[t] * a->max_blocks;
        int p_end = a->pos[t];
        int p_begin = a->window > 0 && p_end - a->window + 1 > 0 ? p_end - a->window + 1 : 0;
        float acc[512], kbuf[512], vbuf[512]; /* head_dim <= 512 is checked at engine creation */
        float m = -INFINITY, l = 0.0f;
        for (int i = 0; i < hd; i++) acc[i] = 0.0f;
        /* Online softmax (running max m, running sum l) over the sequence's cached positions. */
        for (int p = p_begin; p <= p_end; p++) {
            size_t slot = (size_t)bt[p / a->block_size] * a->block_size + (size_t)(p % a->block_size);
            const float *k = kv_load(k_cache, dt, slot, kvh, a->n_kv_heads, hd, a->block_size, kbuf);
            const float *v = kv_load(v_cache, dt, slot, kvh, a->n_kv_heads, hd, a->block_size, vbuf);
            float s = dot_f32(qh, k, hd) * a->scale;
            if (a->softcap > 0.0f) s = tanhf(s / a->softcap) * a->softcap;   /* [families] as HF: / c, tanh, * c */
            float m_new = s > m ? s : m;
            float corr = expf(m - m_new), e = expf(s - m_new);
            l = l * corr + e;
            for (int i = 0; i < hd; i++) acc[i] = acc[i] * corr + e * v[i];
            m = m_new;
        }
        if (a->sinks) l += expf(a->sinks[h] - m);   /* [gpt-oss] the sink's share of the denominator (backend.h) */
        float *o = out + (size_t)t * a->n_heads * hd + (size_t)h * hd;
        for (int i = 0; i < hd; i++) o[i] = acc[i] / l;
    }
    return SITS_OK;
}

/* PyTorch's gelu(approximate="tanh") in fp32 (aten GeluKernel: kBeta = sqrt(2) * 2/sqrt(pi) * 0.5,
 * kKappa = 0.044715). */
static inline float gelu_tanh1(float a)
{
    const float beta = (float)(1.41421356237309504880 * 1.12837916709551257390 * 0.5), kappa = 0.044715f;
    float inner = beta * (a + kappa * (a * a * a));
    return 0.5f * a * (1.0f + tanhf(inner));
}

/* [gpt-oss] the experts' clamped SwiGLU of one (gate, up) pair (backend.h swiglu_oai), as transformers'
 * GptOssExperts._apply_gate */
static inline float swiglu_oai1(float g, float u, float alpha, float limit)
{
    float a = g < limit ? g : limit, b = u < -limit ? -limit : u > limit ? limit : u;
    return (b + 1.0f) * (a / (1.0f + expf(-alpha * a)));
}

/* The gated activations of silu_mul, gelu_tanh_mul and swiglu_oai (alpha, limit: the last one's) */
enum { CPU_GLU_SILU, CPU_GLU_GELU_TANH, CPU_GLU_OAI };

static inline float glu1(int act, float g, float u, float alpha, float limit)
{
    return act == CPU_GLU_OAI ? swiglu_oai1(g, u, alpha, limit) : act == CPU_GLU_GELU_TANH ? gelu_tanh1(g) * u
                                                                                           : g / (1.0f + expf(-g)) * u;
}

/* out[n, dim] = act(gu[:, :dim], gu[:, dim:]); gu [n, 2 dim] (gate then up) */
static void cpu_glu(float *out, const float *gu, int n, int dim, int act, float alpha, float limit)
{
#pragma omp parallel for schedule(static) if ((size_t)n * dim * 16 >= CPU_PAR_MIN_WORK)   /* expf: ~16 multiply-adds */
    for (int t = 0; t < n; t++) {
        const float *g = gu + (size_t)t * 2 * dim, *u = g + dim;
        for (int i = 0; i < dim; i++) out[(size_t)t * dim + i] = glu1(act, g[i], u[i], alpha, limit);
    }
}

static sits_status_t cpu_silu_mul(sits_backend_t *be, void *out, const void *gu, int n, int dim)
{
    (void)be;
    cpu_glu(out, gu, n, dim, CPU_GLU_SILU, 0.0f, 0.0f);
    return SITS_OK;
}

static sits_status_t cpu_gather_rows(sits_backend_t *be, void *out, const void *x, const int32_t *rows, int n_rows, int dim)
{
    for (int i = 0; i < n_rows; i++)
        memcpy((float *)out + (size_t)i * dim, (const float *)x + (size_t)rows[i] * dim, sizeof(float) * dim);
    return SITS_OK;
}

/* ---- [moe] router top-k and the weighted combine (see backend.h) ---- */

void sits_backend_cpu_moe_topk(int32_t *ids, float *wts, const float *logits, int n, int E, int k, int norm)
{
    for (int t = 0; t < n; t++) {
        const float *l = logits + (size_t)t * E;
        int32_t *id = ids + (size_t)t * k;
        float *w = wts + (size_t)t * k;
        float mx = l[0], sum = 0.0f;
        for (int e = 1; e < E; e++) mx = l[e] > mx ? l[e] : mx;
        for (int e = 0; e < E; e++) sum += expf(l[e] - mx);
        /* k rounds of argmax over the experts not taken yet: the largest logit is the largest p, and
         * the lower index wins a tie */
        for (int j = 0; j < k; j++) {
            int best = -1;
            for (int e = 0; e < E; e++) {
                int taken = 0;
                for (int i = 0; i < j; i++) taken |= id[i] == e;
                if (!taken && (best < 0 || l[e] > l[best])) best = e;
            }
            id[j] = best;
            w[j] = expf(l[best] - mx) / sum;
        }
        if (norm) {
            float s = 0.0f;
            for (int j = 0; j < k; j++) s += w[j];
            for (int j = 0; j < k; j++) w[j] /= s;
        }
    }
}

void sits_backend_cpu_moe_combine(float *out, const float *y, const int32_t *pos, const float *wts, int n, int kk, int dim)
{
    for (int t = 0; t < n; t++) {
        float *o = out + (size_t)t * dim;
        memset(o, 0, sizeof(float) * (size_t)dim);
        for (int j = 0; j < kk; j++) {
            int32_t p = pos[(size_t)t * kk + j];
            if (p < 0) continue;
            float w = wts[(size_t)t * kk + j];
            const float *r = y + (size_t)p * dim;
            for (int i = 0; i < dim; i++) o[i] += w * r[i];
        }
    }
}

static sits_status_t cpu_moe_topk(sits_backend_t *be, int32_t *ids, float *wts, const void *logits, int n, int E, int k,
                                  int norm)
{
    (void)be;
    if (n < 0 || E < 1 || k < 1 || k > E) return SITS_ERR_INVALID;
    sits_backend_cpu_moe_topk(ids, wts, logits, n, E, k, norm);
    return SITS_OK;
}

static sits_status_t cpu_moe_combine(sits_backend_t *be, void *out, const void *y, const int32_t *pos, const float *wts, int n,
                                     int kk, int dim)
{
    (void)be;
    sits_backend_cpu_moe_combine(out, y, pos, wts, n, kk, dim);
    return SITS_OK;
}

/* ---- [moe dev] routing and experts of a small step without the host (see backend.h) ---- */

sits_status_t sits_backend_cpu_moe_route(int32_t *plan, uint64_t *counts, const int32_t *ids, const int32_t *mask, int n, int k,
                                         int E, int e0, int ne)
{
    int nk = n * k, A = 0;
    if (n < 1 || k < 1 || E < 1 || E > 1024 || nk > SITS_MOE_DEV_MAX_SLOTS || e0 < 0 || ne < 1 || e0 + ne > E)
        return SITS_ERR_INVALID;
    int32_t *list = plan + 1, *off = plan + 1 + E, *slots = plan + 2 + 2 * (size_t)E;
    int cnt[1024] = { 0 };
    for (int s = 0; s < nk; s++) {
        if (ids[s] < 0 || ids[s] >= E) return SITS_ERR_INVALID;
        cnt[ids[s]]++;
        if (counts && (!mask || mask[s / k] >= 0)) counts[ids[s]]++;
    }
    off[0] = 0;
    for (int e = e0; e < e0 + ne; e++)
        if (cnt[e]) {
            list[A] = e - e0;
            off[A + 1] = off[A] + cnt[e];
            A++;
        }
    plan[0] = A;
    for (int a = 0; a < A; a++)   /* a stable pass per expert: slots ascending */
        for (int s = 0, p = off[a]; s < nk; s++)
            if (ids[s] == e0 + list[a]) slots[p++] = s;
    return SITS_OK;
}

static sits_status_t cpu_moe_route(sits_backend_t *be, int32_t *plan, uint64_t *counts, const int32_t *ids, const int32_t *mask,
                                   int n, int k, int E, int e0, int ne)
{
    (void)be;
    return sits_backend_cpu_moe_route(plan, counts, ids, mask, n, k, E, e0, ne);
}

static void cpu_quant_fp8_rows(uint8_t *q, float *s, const float *x, int n, int dim);

/* Each slot's expert MLP with the arithmetic of the host path (cpu_matmul's dot_f32 + 0, cpu_silu_mul, cpu_matmul;
 * [moe fp8] cpu_quant_fp8_rows + cpu_matmul_fp8q's dot of the decoded rows times xs, times the row scale, + 0): the
 * same floats bit for bit. */
static sits_status_t cpu_moe_experts(sits_backend_t *be, void *y_, void *act_, const void *x_, const int32_t *plan,
                                     const void *const *w_gu, const void *const *w_down, const float *const *s_gu,
                                     const float *const *s_down, void *q8, const sits_moe_epi_t *epi, int n, int k, int E, int H,
                                     int i)
{
    (void)be;
    float *y = y_, *act = act_;
    const float *x = x_;
    const int32_t *off = plan + 1 + E, *slots = plan + 2 + 2 * (size_t)E;
    const int f8 = s_gu != NULL;
    if (f8 != (s_down != NULL) || (f8 && !q8)) return SITS_ERR_INVALID;
    /* [gpt-oss] the activation (epi NULL: SwiGLU) */
    const int act_kind = epi && epi->oai ? CPU_GLU_OAI : CPU_GLU_SILU;
    const float alpha = epi ? epi->alpha : 0.0f, limit = epi ? epi->limit : 0.0f;
    const int nk = n * k;
    const size_t wmax = (size_t)(H > i ? H : i);
    float *xs = q8, *as = xs + n, *xd = NULL, *ad = NULL, *wr = NULL, *wu = NULL, lut[256];
    uint8_t *xq = (uint8_t *)q8 + SITS_MOE_Q8_PAD16(4 * ((size_t)n + nk)), *aq = xq + SITS_MOE_Q8_PAD16((size_t)n * H);
    if (f8) {   /* x per token, decoded once (the host path's matmul_fp8 quantises each expert's rows the same way) */
        for (int v = 0; v < 256; v++) lut[v] = sits_f8e4m3_to_f32((uint8_t)v);
        cpu_quant_fp8_rows(xq, xs, x, n, H);
        /* one buffer: x decoded [n, H], act decoded [nk, i], a gate and an up weight row decoded [2, max(H, i)] */
        xd = malloc(sizeof(float) * ((size_t)n * H + (size_t)nk * i + 2 * wmax + 1));
        if (!xd) return SITS_ERR_NOMEM;
        for (size_t q = 0; q < (size_t)n * H; q++) xd[q] = lut[xq[q]];
        ad = xd + (size_t)n * H;
        wr = ad + (size_t)nk * i;
        wu = wr + wmax;
    }
    for (int a = 0; a < plan[0]; a++) {
        int e = plan[1 + a], c = off[a + 1] - off[a];
        const int32_t *sl = slots + off[a];
        /* [gpt-oss] the expert's biases (NULL: none) */
        const float *bg = epi && epi->b_gu ? epi->b_gu[e] : NULL, *bd = epi && epi->b_down ? epi->b_down[e] : NULL;
        if (!f8) {
            const float *gu = w_gu[e], *dn = w_down[e];
#pragma omp parallel for schedule(static) if ((size_t)c * H * i * 3 >= CPU_PAR_MIN_WORK)
            for (int r = 0; r < i; r++)
                for (int q = 0; q < c; q++) {
                    const float *xt = x + (size_t)(sl[q] / k) * H;
                    float g = dot_f32(xt, gu + (size_t)r * H, H) + (bg ? bg[r] : 0.0f);
                    float u = dot_f32(xt, gu + (size_t)(i + r) * H, H) + (bg ? bg[i + r] : 0.0f);
                    act[(size_t)sl[q] * i + r] = glu1(act_kind, g, u, alpha, limit);
                }
#pragma omp parallel for schedule(static) if ((size_t)c * H * i >= CPU_PAR_MIN_WORK)
            for (int o = 0; o < H; o++)
                for (int q = 0; q < c; q++)
                    y[(size_t)sl[q] * H + o] = dot_f32(act + (size_t)sl[q] * i, dn + (size_t)o * i, i) + (bd ? bd[o] : 0.0f);
            continue;
        }
        /* [moe fp8] E4M3 weights, each row decoded once for all the expert's slots */
        const uint8_t *gq = w_gu[e], *dq = w_down[e];
        const float *gs = s_gu[e], *ds = s_down[e];
        for (int r = 0; r < i; r++) {
            for (int kk = 0; kk < H; kk++) {
                wr[kk] = lut[gq[(size_t)r * H + kk]];
                wu[kk] = lut[gq[(size_t)(i + r) * H + kk]];
            }
            for (int q = 0; q < c; q++) {
                int t = sl[q] / k;
                float g = dot_f32(xd + (size_t)t * H, wr, H) * xs[t] * gs[r] + (bg ? bg[r] : 0.0f);
                float u = dot_f32(xd + (size_t)t * H, wu, H) * xs[t] * gs[i + r] + (bg ? bg[i + r] : 0.0f);
                act[(size_t)sl[q] * i + r] = glu1(act_kind, g, u, alpha, limit);
            }
        }
        for (int q = 0; q < c; q++) {   /* the act rows quantised as matmul_fp8 does, then decoded once */
            size_t r0 = (size_t)sl[q] * i;
            cpu_quant_fp8_rows(aq + r0, as + sl[q], act + r0, 1, i);
            for (int kk = 0; kk < i; kk++) ad[r0 + kk] = lut[aq[r0 + kk]];
        }
        for (int o = 0; o < H; o++) {
            for (int kk = 0; kk < i; kk++) wr[kk] = lut[dq[(size_t)o * i + kk]];
            for (int q = 0; q < c; q++)
                y[(size_t)sl[q] * H + o] = dot_f32(ad + (size_t)sl[q] * i, wr, i) * as[sl[q]] * ds[o] + (bd ? bd[o] : 0.0f);
        }
    }
    free(xd);
    return SITS_OK;
}

static sits_status_t cpu_moe_combine_slots(sits_backend_t *be, void *out_, const void *y_, const float *wts, const void *sg_,
                                           int n, int k, int H)
{
    (void)be;
    float *out = out_;
    const float *y = y_, *sg = sg_;
    for (int t = 0; t < n; t++) {
        float *o = out + (size_t)t * H;
        memset(o, 0, sizeof(float) * (size_t)H);
        for (int j = 0; j <= k; j++) {
            if (j == k && !sg) break;
            float w = j < k ? wts[(size_t)t * k + j] : 1.0f / (1.0f + expf(-sg[t]));
            const float *r = y + (j < k ? (size_t)t * k + j : (size_t)n * k + t) * H;
            for (int c = 0; c < H; c++) o[c] += w * r[c];
        }
    }
    return SITS_OK;
}

static sits_status_t cpu_download_f32(sits_backend_t *be, float *dst, const void *src, size_t n)
{
    memcpy(dst, src, n * sizeof(float));
    return SITS_OK;
}

static sits_status_t cpu_sync(sits_backend_t *be) { return SITS_OK; }

/* ---- [perf] optional slots ----------------------------------------------------------------------- */

/* Activations are fp32 here, so the fp32-residual form is the plain fused op. */
static sits_status_t cpu_add_rmsnorm_f32res(sits_backend_t *be, void *out, float *residual, const void *x, const void *w,
                                            int n, int dim, float eps)
{
    return cpu_add_rmsnorm(be, out, residual, x, w, n, dim, eps);
}

static sits_status_t cpu_matmul_f32out(sits_backend_t *be, float *y, const void *x, const void *w, const void *bias, int n,
                                       int in, int out)
{
    return cpu_matmul(be, y, x, w, bias, n, in, out);
}

/* ---- [perf: device sampling] the reference candidate reduction ------------------------------------ */

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double sits_backend_sample_uniform(uint64_t seed, uint64_t step, int64_t id)
{
    uint64_t h = mix64(seed + 0x9e3779b97f4a7c15ull);
    h = mix64(h ^ (step * 0xd1b54a32d192ed03ull + 0x632be59bd9b4e019ull));
    h = mix64(h ^ ((uint64_t)id * 0x8cb92ba72f3d8dd7ull + 0x9e3779b97f4a7c15ull));
    return ((double)(h >> 11) + 0.5) * (1.0 / 9007199254740992.0); /* (0, 1) */
}

static float gumbel(uint64_t seed, uint64_t step, int64_t id)
{
    return (float)-log(-log(sits_backend_sample_uniform(seed, step, id)));
}

/* a before b: higher logit, then lower id */
static int cand_before(const sits_sample_cand_t *a, const sits_sample_cand_t *b)
{
    if (a->logit != b->logit) return a->logit > b->logit;
    return a->id < b->id;
}

/* Local top-c of a row by (logit desc, id asc) with a small sorted insertion buffer. */
static int local_topc(const float *row, int v_start, int v_count, int c, sits_sample_cand_t *out)
{
    int m = 0;
    for (int i = 0; i < v_count; i++) {
        sits_sample_cand_t x = { row[i], v_start + i };
        if (m == c && !cand_before(&x, &out[m - 1])) continue;
        int j = m < c ? m++ : c - 1;
        while (j > 0 && cand_before(&x, &out[j - 1])) { out[j] = out[j - 1]; j--; }
        out[j] = x;
    }
    return m;
}

void sits_backend_cpu_sample_reduce(void *recs, const float *logits, int n, int v_start, int v_count,
                                    const sits_sample_row_t *rows, int c)
{
    size_t rec = SITS_SAMPLE_REC_BYTES(c);
    /* rows are independent: one thread each (a Gumbel row is ~2 logs per id) */
#pragma omp parallel for schedule(dynamic, 1) if ((size_t)n * v_count * 32 >= CPU_PAR_MIN_WORK)
    for (int s = 0; s < n; s++) {
        const sits_sample_row_t *p = &rows[s];
        const float *row = logits + (size_t)s * v_count;
        sits_sample_rec_t *h = (sits_sample_rec_t *)((unsigned char *)recs + rec * s);
        h->best.logit = -INFINITY;
        h->best.id = -1;
        h->lse = -INFINITY;
        h->n = 0;
        if (p->mode == SITS_SAMPLE_GREEDY) {
            /* argmax, lowest id on ties (the first strictly greater wins) */
            for (int i = 0; i < v_count; i++)
                if (row[i] > h->best.logit) { h->best.logit = row[i]; h->best.id = v_start + i; }
        } else if (p->mode == SITS_SAMPLE_GUMBEL) {
            /* Gumbel-max over the whole slice; two fp32 roundings (product, sum), no fma */
            for (int i = 0; i < v_count; i++) {
                float scaled = row[i] * p->inv_temp;
                float score = scaled + gumbel(p->seed, p->step, v_start + i);
                if (score > h->best.logit) { h->best.logit = score; h->best.id = v_start + i; }
            }
        } else {
            if (p->mode == SITS_SAMPLE_TOPC_LSE && v_count > 0) {
                /* the nucleus is measured against the whole vocabulary: this slice's log-sum-exp */
                double inv_t = 1.0 / p->temperature, mx = -INFINITY, sum = 0;
                for (int i = 0; i < v_count; i++) if (row[i] * inv_t > mx) mx = row[i] * inv_t;
                for (int i = 0; i < v_count; i++) sum += exp(row[i] * inv_t - mx);
                h->lse = (float)(mx + log(sum));
            }
            h->n = local_topc(row, v_start, v_count, c, (sits_sample_cand_t *)(h + 1));
        }
    }
}

void sits_backend_cpu_logit_mask(float *logits, int v_start, int v_count, const uint32_t *masks, int words,
                                 const int32_t *rows, int n_masks)
{
    for (int k = 0; k < n_masks; k++) {
        float *row = logits + (size_t)rows[k] * v_count;
        const uint32_t *m = masks + (size_t)k * words;
        for (int i = 0; i < v_count;) {
            int64_t id = (int64_t)v_start + i;
            uint32_t w = id < (int64_t)words * 32 ? m[id >> 5] : 0;
            int run = 32 - (int)(id & 31);   /* ids left in this word */
            if (run > v_count - i) run = v_count - i;
            if (w == UINT32_MAX) { i += run; continue; }   /* a whole word allowed (strings): nothing to do */
            for (int j = 0; j < run; j++, i++)
                if (!((w >> ((id + j) & 31)) & 1)) row[i] = -INFINITY;
        }
    }
}

static sits_status_t cpu_logit_mask(sits_backend_t *be, float *logits, int v_start, int v_count, const uint32_t *masks,
                                    int words, const int32_t *rows, int n_masks)
{
    (void)be;
    if (v_count < 0 || words < 0 || n_masks < 0) return SITS_ERR_INVALID;
    sits_backend_cpu_logit_mask(logits, v_start, v_count, masks, words, rows, n_masks);
    return SITS_OK;
}

static sits_status_t cpu_sample_reduce(sits_backend_t *be, void *recs, const float *logits, int n, int v_start, int v_count,
                                       const sits_sample_row_t *rows, int c)
{
    if (n < 0 || v_count < 0 || c < 1) {
        SITS_ERROR(SITS_SUB_BACKEND, "cpu sample_reduce: bad arguments n %d v_count %d c %d", n, v_count, c);
        return SITS_ERR_INVALID;
    }
    sits_backend_cpu_sample_reduce(recs, logits, n, v_start, v_count, rows, c);
    return SITS_OK;
}

/* ---- [sampling controls] [logprobs] the references of logit_process, logprob_reduce, logit_pick ---- */

void sits_backend_cpu_logit_process(float *logits, int n, int v_start, int v_count, const sits_logit_proc_row_t *rows,
                                    const sits_logit_proc_ent_t *ents, float *ent_raw, const float *cut, float *rowmax)
{
#pragma omp parallel for schedule(dynamic, 1) if ((size_t)n * v_count * 2 >= CPU_PAR_MIN_WORK)
    for (int s = 0; s < n; s++) {
        float *row = logits + (size_t)s * v_count;
        if (rows && ents) {
            const sits_logit_proc_row_t *p = &rows[s];
            int rep = p->repetition > 0 && p->repetition != 1.0f;
            for (int k = p->ent0; k < p->ent0 + p->n_ent; k++) {
                const sits_logit_proc_ent_t *t = &ents[k];
                int64_t i = (int64_t)t->id - v_start;
                if (i < 0 || i >= v_count) continue;
                float l = row[i];
                if (ent_raw) ent_raw[k] = l;
                l = (t->flags & SITS_PROC_BAN) ? -INFINITY : l + t->bias;
                if (rep && ((t->flags & SITS_PROC_PROMPT) || t->out_count > 0)) l = l > 0 ? l / p->repetition : l * p->repetition;
                if (t->out_count > 0) {
                    float f = p->frequency * (float)t->out_count;
                    f = f + p->presence;
                    l = l - f;
                }
                row[i] = l;
            }
        }
        if (cut) {
            float c = cut[s];
            for (int i = 0; i < v_count; i++) if (row[i] < c) row[i] = -INFINITY;
        }
        if (rowmax) {
            float m = -INFINITY;
            for (int i = 0; i < v_count; i++) if (row[i] > m) m = row[i];
            rowmax[s] = m;
        }
    }
}

void sits_backend_cpu_logprob_reduce(sits_logprob_rec_t *recs, const float *logits, int v_start, int v_count,
                                     const sits_logprob_row_t *rows, int n_rows)
{
#pragma omp parallel for schedule(dynamic, 1) if ((size_t)n_rows * v_count * 16 >= CPU_PAR_MIN_WORK)
    for (int k = 0; k < n_rows; k++) {
        const sits_logprob_row_t *p = &rows[k];
        const float *row = logits + (size_t)p->row * v_count;
        sits_logprob_rec_t *r = &recs[k];
        memset(r, 0, sizeof *r);
        r->lse = -INFINITY;
        if (v_count <= 0) continue;
        float m = row[0];
        for (int i = 1; i < v_count; i++) if (row[i] > m) m = row[i];
        double sum = 0;
        for (int i = 0; i < v_count; i++) sum += exp((double)row[i] - m);
        r->lse = m + log(sum);
        if (p->target >= v_start && p->target - v_start < v_count) {
            r->tgt = row[p->target - v_start];
            r->has_tgt = 1;
        }
        int top = p->top < 0 ? 0 : p->top > SITS_LOGPROB_MAX_TOP ? SITS_LOGPROB_MAX_TOP : p->top;
        r->n = top > 0 ? local_topc(row, v_start, v_count, top, r->top) : 0;   /* sorted, best first */
    }
}

void sits_backend_cpu_logit_pick(float *out, const float *logits, int n, int v_start, int v_count, const int32_t *ids,
                                 const sits_logit_proc_row_t *rows, const sits_logit_proc_ent_t *ents, const float *ent_raw)
{
    for (int s = 0; s < n; s++) {
        int64_t i = (int64_t)ids[s] - v_start;
        out[s] = NAN;
        if (ids[s] < 0 || i < 0 || i >= v_count) continue;
        out[s] = logits[(size_t)s * v_count + i];
        if (!rows || !ents || !ent_raw) continue;
        int lo = rows[s].ent0, hi = rows[s].ent0 + rows[s].n_ent;   /* binary search of the sorted entries */
        while (lo < hi) {
            int mid = lo + (hi - lo) / 2;
            if (ents[mid].id < ids[s]) lo = mid + 1;
            else hi = mid;
        }
        if (lo < rows[s].ent0 + rows[s].n_ent && ents[lo].id == ids[s]) out[s] = ent_raw[lo];
    }
}

static sits_status_t cpu_logit_process(sits_backend_t *be, float *logits, int n, int v_start, int v_count,
                                       const sits_logit_proc_row_t *rows, const sits_logit_proc_ent_t *ents, float *ent_raw,
                                       const float *cut, float *rowmax)
{
    (void)be;
    if (n < 0 || v_count < 0) return SITS_ERR_INVALID;
    sits_backend_cpu_logit_process(logits, n, v_start, v_count, rows, ents, ent_raw, cut, rowmax);
    return SITS_OK;
}

static sits_status_t cpu_logprob_reduce(sits_backend_t *be, sits_logprob_rec_t *recs, const float *logits, int v_start,
                                        int v_count, const sits_logprob_row_t *rows, int n_rows)
{
    (void)be;
    if (n_rows < 0 || v_count < 0) return SITS_ERR_INVALID;
    sits_backend_cpu_logprob_reduce(recs, logits, v_start, v_count, rows, n_rows);
    return SITS_OK;
}

static sits_status_t cpu_logit_pick(sits_backend_t *be, float *out, const float *logits, int n, int v_start, int v_count,
                                    const int32_t *ids, const sits_logit_proc_row_t *rows, const sits_logit_proc_ent_t *ents,
                                    const float *ent_raw)
{
    (void)be;
    if (n < 0 || v_count < 0) return SITS_ERR_INVALID;
    sits_backend_cpu_logit_pick(out, logits, n, v_start, v_count, ids, rows, ents, ent_raw);
    return SITS_OK;
}

/* ---- [fp8] simulated FP8 GEMM: the definition the cuda fp8 path is checked against ---------------
 * Activations are quantised per row exactly as backend.h says (sits_fp8_scale / sits_f32_to_f8e4m3),
 * weights are E4M3 bytes; products of the decoded values are summed in fp32 and scaled once. */

/* q [n, dim] = e4m3(x / s[t]), s [n] = sits_fp8_scale(absmax of row t) */
static void cpu_quant_fp8_rows(uint8_t *q, float *s, const float *x, int n, int dim)
{
#pragma omp parallel for schedule(static) if ((size_t)n * dim * 8 >= CPU_PAR_MIN_WORK)
    for (int t = 0; t < n; t++) {
        const float *xr = x + (size_t)t * dim;
        float mx = 0.0f;
        for (int k = 0; k < dim; k++) mx = fabsf(xr[k]) > mx ? fabsf(xr[k]) : mx;
        s[t] = sits_fp8_scale(mx);
        for (int k = 0; k < dim; k++) q[(size_t)t * dim + k] = sits_f32_to_f8e4m3(xr[k] / s[t]);
    }
}

static sits_status_t cpu_matmul_fp8q(sits_backend_t *be, void *y_, int y_f32, const void *xq_, const float *xs, const void *w_q,
                                     const float *w_scale, const void *bias_, int n, int in, int out)
{
    float *y = y_;
    const float *bias = bias_;
    const uint8_t *wq = w_q, *xq = xq_;
    float lut[256];
    for (int v = 0; v < 256; v++) lut[v] = sits_f8e4m3_to_f32((uint8_t)v);
    float *xd = malloc(sizeof(float) * ((size_t)n * in + 1));   /* [n, in] decoded activations */
    if (!xd) return SITS_ERR_NOMEM;
    for (size_t i = 0; i < (size_t)n * in; i++) xd[i] = lut[xq[i]];
    int no_mem = 0;
#pragma omp parallel if ((size_t)n * in * out >= CPU_PAR_MIN_WORK)
    {
        float *wr = malloc(sizeof(float) * (size_t)in);
        if (!wr) no_mem = 1;
#pragma omp for schedule(static)
        for (int o = 0; o < out; o++) {
            if (!wr) continue;
            for (int k = 0; k < in; k++) wr[k] = lut[wq[(size_t)o * in + k]];
            float b = bias ? bias[o] : 0.0f;
            for (int t = 0; t < n; t++) y[(size_t)t * out + o] = dot_f32(xd + (size_t)t * in, wr, in) * xs[t] * w_scale[o] + b;
        }
        free(wr);
    }
    free(xd);
    (void)y_f32; /* activations are fp32 here: both output forms are the same */
    return no_mem ? SITS_ERR_NOMEM : SITS_OK;
}

static sits_status_t cpu_matmul_fp8(sits_backend_t *be, void *y, int y_f32, const void *x, const void *w_q, const float *w_scale,
                                    const void *bias, int n, int in, int out)
{
    uint8_t *xq = malloc((size_t)n * in + 1);
    float *xs = malloc(sizeof(float) * ((size_t)n + 1));
    sits_status_t st = SITS_ERR_NOMEM;
    if (xq && xs) {
        cpu_quant_fp8_rows(xq, xs, x, n, in);
        st = cpu_matmul_fp8q(be, y, y_f32, xq, xs, w_q, w_scale, bias, n, in, out);
    }
    free(xq);
    free(xs);
    return st;
}

/* [fp8: fused activation quantisation] the op, then its output rows quantised as matmul_fp8 does */
/* out NULL (backend.h: only xq / xs wanted): a temporary [n, dim] in its place */
static sits_status_t cpu_add_rmsnorm_f32res_fp8(sits_backend_t *be, void *out, void *xq, float *xs, float *residual,
                                                const void *x, const void *w, int n, int dim, float eps)
{
    float *tmp = out ? NULL : malloc(sizeof(float) * (size_t)n * (size_t)dim + 1);
    if (!out && !tmp) return SITS_ERR_NOMEM;
    sits_status_t st = cpu_add_rmsnorm(be, out ? out : tmp, residual, x, w, n, dim, eps);
    if (st == SITS_OK) cpu_quant_fp8_rows(xq, xs, out ? out : tmp, n, dim);
    free(tmp);
    return st;
}

static sits_status_t cpu_silu_mul_fp8(sits_backend_t *be, void *out, void *xq, float *xs, const void *gu, int n, int dim)
{
    float *tmp = out ? NULL : malloc(sizeof(float) * (size_t)n * (size_t)dim + 1);
    if (!out && !tmp) return SITS_ERR_NOMEM;
    sits_status_t st = cpu_silu_mul(be, out ? out : tmp, gu, n, dim);
    if (st == SITS_OK) cpu_quant_fp8_rows(xq, xs, out ? out : tmp, n, dim);
    free(tmp);
    return st;
}

/* [moe fp8] */
static sits_status_t cpu_quant_fp8_rows_op(sits_backend_t *be, void *xq, float *xs, const void *x, int n, int dim)
{
    (void)be;
    cpu_quant_fp8_rows(xq, xs, x, n, dim);
    return SITS_OK;
}

/* [int4] the group structure of w does not fit `in` inputs */
static int n_groups_bad(const sits_w4_t *w, int in)
{
    if (w->n_groups < 1) return 1;
    if (w->gidx) return 0;   /* the loader checked every gidx[k] < n_groups */
    return w->group_size < 1 || in % w->group_size || in / w->group_size != w->n_groups;
}

/* [int4] matmul_w4: each weight row dequantised to fp32 (backend.h's definition), then dotted with every token. */
static sits_status_t cpu_matmul_w4(sits_backend_t *be, void *y_, const void *x_, const sits_w4_t *w, const void *bias_, int n,
                                   int in, int out)
{
    float *y = y_;
    const float *x = x_, *bias = bias_;
    const uint8_t *q = w->q;
    if (in % 2 || n_groups_bad(w, in)) {
        SITS_ERROR(SITS_SUB_BACKEND, "matmul_w4: bad shape in %d group_size %d n_groups %d", in, w->group_size, w->n_groups);
        return SITS_ERR_INVALID;
    }
    if (w->tiled) {   /* [int4 tiles] another backend's layout: this one has no w4_layout */
        SITS_ERROR(SITS_SUB_BACKEND, "matmul_w4: weights in a tiled layout, which the cpu backend does not read");
        return SITS_ERR_INVALID;
    }
    int no_mem = 0;
#pragma omp parallel if ((size_t)n * in * out >= CPU_PAR_MIN_WORK)
    {
        float *wr = malloc(sizeof(float) * (size_t)in);   /* [in] one dequantised row */
        if (!wr) no_mem = 1;
#pragma omp for schedule(static)
        for (int o = 0; o < out; o++) {
            if (!wr) continue;
            const uint8_t *qr = q + (size_t)o * (size_t)(in / 2);
            const float *sr = w->scale + (size_t)o * w->n_groups, *zr = w->zero + (size_t)o * w->n_groups;
            for (int k = 0; k < in; k++) {
                int g = w->gidx ? w->gidx[k] : k / w->group_size;
                int v = k & 1 ? qr[k / 2] >> 4 : qr[k / 2] & 15;
                wr[k] = ((float)v - zr[g]) * sr[g];
            }
            float b = bias ? bias[o] : 0.0f;
            for (int t = 0; t < n; t++) y[(size_t)t * out + o] = dot_f32(x + (size_t)t * in, wr, in) + b;
        }
        free(wr);
    }
    return no_mem ? SITS_ERR_NOMEM : SITS_OK;
}

/* [kv] the flat-buffer block copies, one memcpy per segment */
static sits_status_t cpu_kv_block_copy(sits_backend_t *be, void *flat, void *const *bufs, int n_bufs, const int32_t *ids, int n_ids,
                                       size_t seg, int to_cache)
{
    if (n_bufs <= 0 || n_ids < 0 || seg == 0 || seg % 16) return SITS_ERR_INVALID;
    for (int i = 0; i < n_ids; i++)
        for (int j = 0; j < n_bufs; j++) {
            unsigned char *c = (unsigned char *)bufs[j] + (size_t)ids[i] * seg, *f = (unsigned char *)flat + ((size_t)i * n_bufs + j) * seg;
            if (to_cache) memcpy(c, f, seg);
            else memcpy(f, c, seg);
        }
    return SITS_OK;
}

/* ---- [families] model-family ops --------------------------------------------------------------- */

static sits_status_t cpu_rmsnorm_heads(sits_backend_t *be, void *x_, int n, int row_stride, int col0, int n_heads, int head_dim,
                                       const void *w, float eps)
{
    float *x = x_;
    (void)be;
    if (n < 0 || n_heads < 0 || head_dim <= 0 || col0 < 0 || col0 + n_heads * head_dim > row_stride) return SITS_ERR_INVALID;
    for (int t = 0; t < n; t++)
        for (int h = 0; h < n_heads; h++) {
            float *v = x + (size_t)t * row_stride + col0 + (size_t)h * head_dim;
            rmsnorm_row(v, v, w, head_dim, eps);   /* reads each element before writing it */
        }
    return SITS_OK;
}

static sits_status_t cpu_scale(sits_backend_t *be, void *x_, size_t n_elems, float sc)
{
    float *x = x_;
    (void)be;
    for (size_t i = 0; i < n_elems; i++) x[i] *= sc;
    return SITS_OK;
}


static sits_status_t cpu_gelu_tanh_mul(sits_backend_t *be, void *out, const void *gu, int n, int dim)
{
    (void)be;
    cpu_glu(out, gu, n, dim, CPU_GLU_GELU_TANH, 0.0f, 0.0f);
    return SITS_OK;
}

/* [gpt-oss] the experts' clamped SwiGLU (backend.h) */
static sits_status_t cpu_swiglu_oai(sits_backend_t *be, void *out, const void *gu, int n, int dim, float alpha, float limit)
{
    (void)be;
    cpu_glu(out, gu, n, dim, CPU_GLU_OAI, alpha, limit);
    return SITS_OK;
}

static sits_status_t cpu_softcap(sits_backend_t *be, void *x_, size_t n_elems, int f32, float cap)
{
    float *x = x_;
    (void)be;
    (void)f32;   /* activations are fp32 here */
    if (!(cap > 0.0f)) return SITS_ERR_INVALID;
    for (size_t i = 0; i < n_elems; i++) x[i] = tanhf(x[i] / cap) * cap;
    return SITS_OK;
}

static const sits_backend_ops_t cpu_ops = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .memset0 = cpu_memset0,
    .upload_weight = cpu_upload_weight,
    .dummy_rows = cpu_dummy_rows,   /* [dummy] */
    .dummy_rows_fp8 = cpu_dummy_rows_fp8,
    .upload_rows = cpu_upload_rows,   /* [scale] */
    .embed = cpu_embed,
    .rmsnorm = cpu_rmsnorm,
    .add_rmsnorm = cpu_add_rmsnorm,
    .matmul = cpu_matmul,
    .rope = cpu_rope,
    .rope_kv_write = cpu_rope_kv_write,
    .kv_write = cpu_kv_write,
    .attention = cpu_attention,
    .silu_mul = cpu_silu_mul,
    .gather_rows = cpu_gather_rows,
    .download_f32 = cpu_download_f32,
    .sync = cpu_sync,
    /* [perf] optional slots; no graphs, no pinned memory */
    .add_rmsnorm_f32res = cpu_add_rmsnorm_f32res,
    .matmul_f32out = cpu_matmul_f32out,
    .sample_reduce = cpu_sample_reduce,
    .logit_mask = cpu_logit_mask,
    .logit_process = cpu_logit_process,   /* [sampling controls] */
    .logprob_reduce = cpu_logprob_reduce, /* [logprobs] */
    .logit_pick = cpu_logit_pick,
    .matmul_fp8 = cpu_matmul_fp8,   /* [fp8] */
    .matmul_fp8q = cpu_matmul_fp8q,
    .add_rmsnorm_f32res_fp8 = cpu_add_rmsnorm_f32res_fp8,
    .silu_mul_fp8 = cpu_silu_mul_fp8,
    .quant_fp8_rows = cpu_quant_fp8_rows_op,   /* [moe fp8] */
    .kv_block_copy = cpu_kv_block_copy,   /* [kv] */
    .alloc_count = cpu_alloc_count,       /* [memory plan] */
    .rmsnorm_heads = cpu_rmsnorm_heads,   /* [families] */
    .scale = cpu_scale,
    .gelu_tanh_mul = cpu_gelu_tanh_mul,
    .swiglu_oai = cpu_swiglu_oai,
    .softcap = cpu_softcap,
    .rope_sel = cpu_rope_sel,
    .moe_topk = cpu_moe_topk,             /* [moe] */
    .moe_combine = cpu_moe_combine,
    .moe_route = cpu_moe_route,   /* [moe dev] */
    .moe_experts = cpu_moe_experts,
    .moe_combine_slots = cpu_moe_combine_slots,
    .matmul_w4 = cpu_matmul_w4,           /* [int4] */
};

sits_status_t sits_backend_cpu_create(const sits_backend_params_t *params, sits_backend_t **be_p)
{
    sits_backend_t *be = calloc(1, sizeof *be);
    cpu_impl_t *c = calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        return SITS_ERR_NOMEM;
    }
    be->impl = c;
    be->ops = &cpu_ops;
    be->act_dtype = be->weight_dtype = be->kv_dtype = SITS_DT_F32;
    be->device = -1;
#ifdef _OPENMP
    if (params && params->threads > 0) omp_set_num_threads(params->threads);
    SITS_INFO(SITS_SUB_BACKEND, "cpu backend with %d threads", omp_get_max_threads());
#endif
    *be_p = be;
    return SITS_OK;
}
