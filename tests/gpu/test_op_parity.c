/* test_op_parity.c -- every op of the backend vtable on the cpu backend (fp32 reference loops)
 * and on the cuda backend (bf16 kernels, cuBLASLt), compared element by element.
 *
 * Inputs are seeded random values rounded to bf16 first, and the cpu is given the same rounded
 * values, so the only differences left are the cuda backend's bf16 outputs and fp32 summation
 * order. Outputs are poisoned with 0xFF bytes (NaN in fp32 and bf16) before each run, so an
 * element an op forgets to write is a mismatch. Each op has a bound |gpu - cpu| <= atol +
 * rtol * |cpu| chosen for bf16 (one rounding of an output is at most 2^-8 = 0.39% relative); copies are exact.
 * Shapes include odd sizes (the kernels' scalar paths), GQA, contexts over several KV blocks and
 * > 1024 positions, and sliding windows.
 *
 * Exit 0 pass, 1 fail, 77 skip (no CUDA build or no usable GPU). */
#include "backend/backend.h"
#include "util/dtype.h"
#include "util/log.h"
#include "util/status.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_BE 2 /* [0] cpu (reference), [1] cuda */

typedef struct {
    sits_backend_t *be[N_BE];
    uint64_t rng;
    int failures;
    int checks;
} ctx_t;

/* A backend call that must succeed: a failure here is a test failure with the status named. */
#define TRY(call_) do { sits_status_t s_ = (call_); if (s_ != SITS_OK) { \
    fprintf(stderr, "FAIL %s:%d: %s -> %s\n", __FILE__, __LINE__, #call_, sits_status_str(s_)); exit(1); } } while (0)

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "FAIL: out of host memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

/* ---- random inputs ---------------------------------------------------------------------------- */

static uint64_t rng_next(ctx_t *c)
{
    /* xorshift64* */
    c->rng ^= c->rng >> 12;
    c->rng ^= c->rng << 25;
    c->rng ^= c->rng >> 27;
    return c->rng * 0x2545F4914F6CDD1Dull;
}

static int rand_int(ctx_t *c, int lo, int hi) /* [lo, hi) */
{
    return lo + (int)(rng_next(c) % (uint64_t)(hi - lo));
}

static float bf(float x) { return sits_bf16_to_f32(sits_f32_to_bf16(x)); }

/* n values uniform in [center - scale, center + scale), rounded to bf16. */
static float *rand_vec(ctx_t *c, size_t n, float center, float scale)
{
    float *v = xmalloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) {
        double u = (double)(rng_next(c) >> 11) / 9007199254740992.0; /* [0, 1) */
        v[i] = bf(center + scale * (float)(2.0 * u - 1.0));
    }
    return v;
}

/* ---- device buffers ---------------------------------------------------------------------------- */

/* A buffer of n elements of dtype dt (F32 or BF16) holding the host values. */
static void *dev_vals(sits_backend_t *be, sits_dtype_t dt, const float *v, size_t n)
{
    void *d = NULL;
    size_t esz = sits_dtype_size(dt);
    TRY(be->ops->alloc(be, n * esz, &d));
    if (dt == SITS_DT_F32) {
        TRY(be->ops->upload(be, d, v, n * esz));
    } else if (dt == SITS_DT_BF16) {
        uint16_t *h = xmalloc(n * 2);
        for (size_t i = 0; i < n; i++) h[i] = sits_f32_to_bf16(v[i]);
        TRY(be->ops->upload(be, d, h, n * 2));
        free(h);
    } else {
        fprintf(stderr, "FAIL: unexpected backend dtype %s\n", sits_dtype_name(dt));
        exit(1);
    }
    return d;
}

static void *dev_acts(sits_backend_t *be, const float *v, size_t n) { return dev_vals(be, be->act_dtype, v, n); }

/* A weight buffer [rows, cols] through upload_weight from an fp32 host tensor. */
static void *dev_weight(sits_backend_t *be, const float *v, int64_t rows, int64_t cols)
{
    void *d = NULL;
    TRY(be->ops->alloc(be, (size_t)(rows * cols) * sits_dtype_size(be->weight_dtype), &d));
    TRY(be->ops->upload_weight(be, d, 0, v, SITS_DT_F32, cols, 0, rows, 0, cols));
    return d;
}

static void *dev_i32(sits_backend_t *be, const int32_t *v, size_t n)
{
    void *d = NULL;
    TRY(be->ops->alloc(be, n * 4, &d));
    TRY(be->ops->upload(be, d, v, n * 4));
    return d;
}

/* An output buffer of `bytes`, every byte 0xFF. */
static void *dev_poison(sits_backend_t *be, size_t bytes)
{
    void *d = NULL;
    unsigned char *h = xmalloc(bytes);
    memset(h, 0xFF, bytes);
    TRY(be->ops->alloc(be, bytes, &d));
    TRY(be->ops->upload(be, d, h, bytes));
    free(h);
    return d;
}

static float *host_f32(sits_backend_t *be, const void *d, size_t n)
{
    float *h = xmalloc(n * sizeof *h);
    TRY(be->ops->sync(be));
    TRY(be->ops->download_f32(be, h, d, n));
    return h;
}

static void dev_free(sits_backend_t *be, void *d) { be->ops->free(be, d); }

/* ---- comparison -------------------------------------------------------------------------------- */

/* |got - ref| <= atol + rtol * |ref| everywhere; nan_equal lets NaN match NaN (poison left in place
 * on purpose). Prints the max error, the first mismatches and one summary line. */
static int compare(ctx_t *c, const char *what, const float *ref, const float *got, size_t n, double atol, double rtol,
                   int nan_equal)
{
    size_t bad = 0, worst = 0;
    double max_err = 0.0, max_rel = 0.0;
    for (size_t i = 0; i < n; i++) {
        double r = ref[i], g = got[i];
        int ok;
        if (isnan(r) || isnan(g)) {
            ok = nan_equal && isnan(r) && isnan(g);
            if (!ok) { max_err = INFINITY; worst = i; }
        } else {
            double err = fabs(g - r);
            ok = err <= atol + rtol * fabs(r);
            if (err > max_err) { max_err = err; worst = i; }
            if (fabs(r) > 1e-6 && err / fabs(r) > max_rel) max_rel = err / fabs(r);
        }
        if (!ok) {
            if (bad < 8) fprintf(stderr, "  mismatch %s[%zu]: cpu %.8g cuda %.8g\n", what, i, ref[i], got[i]);
            bad++;
        }
    }
    c->checks++;
    printf("%-4s %-58s n %-8zu max abs err %.3g", bad ? "FAIL" : "ok", what, n, max_err);
    if (max_err > 0.0) printf(" (at %zu: cpu %.5g cuda %.5g)", worst, ref[worst], got[worst]);
    printf(" max rel %.3g  [atol %.1g rtol %.1g]\n", max_rel, atol, rtol);
    if (bad) {
        fprintf(stderr, "FAIL %s: %zu of %zu elements out of bounds\n", what, bad, n);
        c->failures++;
    }
    return bad == 0;
}

/* Download n elements of d from each backend and compare them. */
static void compare_bufs(ctx_t *c, const char *what, void *d[N_BE], size_t n, double atol, double rtol, int nan_equal)
{
    float *ref = host_f32(c->be[0], d[0], n), *got = host_f32(c->be[1], d[1], n);
    compare(c, what, ref, got, n, atol, rtol, nan_equal);
    free(ref);
    free(got);
}

/* Tolerances: one bf16 rounding of an fp32 result is at most 2^-8 = 0.39% relative (8-bit significand). */
#define TOL_EXACT 0.0, 0.0
#define TOL_ONE_ROUNDING 1e-5, 5e-3

/* ---- ops --------------------------------------------------------------------------------------- */

static void test_upload_weight(ctx_t *c, sits_dtype_t src_dt, int64_t rows, int64_t cols, int64_t r0, int64_t r1, int64_t c0,
                               int64_t c1, int64_t dst_row0)
{
    char what[128];
    snprintf(what, sizeof what, "upload_weight %s [%lld,%lld) x [%lld,%lld) of %lldx%lld at row %lld", sits_dtype_name(src_dt),
             (long long)r0, (long long)r1, (long long)c0, (long long)c1, (long long)rows, (long long)cols,
             (long long)dst_row0);
    size_t n = (size_t)(rows * cols), out_n = (size_t)((dst_row0 + r1 - r0) * (c1 - c0));
    float *v = xmalloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = (float)((double)(rng_next(c) >> 11) / 9007199254740992.0 * 6.0 - 3.0);
    void *src = v;
    uint16_t *h16 = NULL;
    if (src_dt != SITS_DT_F32) {
        h16 = xmalloc(n * 2);
        for (size_t i = 0; i < n; i++) h16[i] = src_dt == SITS_DT_F16 ? sits_f32_to_f16(v[i]) : sits_f32_to_bf16(v[i]);
        src = h16;
    }
    void *d[N_BE];
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        d[b] = dev_poison(be, out_n * sits_dtype_size(be->weight_dtype));
        TRY(be->ops->upload_weight(be, d[b], dst_row0, src, src_dt, cols, r0, r1, c0, c1));
    }
    /* The cpu holds the source value exactly (fp32); cuda must hold exactly its bf16 rounding, and
     * the rows before dst_row0 must still be poison on both. */
    float *ref = host_f32(c->be[0], d[0], out_n), *got = host_f32(c->be[1], d[1], out_n);
    size_t first = (size_t)(dst_row0 * (c1 - c0));
    for (size_t i = first; i < out_n; i++) ref[i] = bf(ref[i]);
    compare(c, what, ref, got, out_n, TOL_EXACT, 1);
    for (size_t i = 0; i < first; i++)
        if (!isnan(got[i])) {
            fprintf(stderr, "FAIL %s: element %zu before dst_row0 was overwritten (%g)\n", what, i, got[i]);
            c->failures++;
            break;
        }
    free(ref);
    free(got);
    for (int b = 0; b < N_BE; b++) dev_free(c->be[b], d[b]);
    free(h16);
    free(v);
}

static void test_embed(ctx_t *c, int n, int dim, int v_start, int v_count)
{
    char what[128];
    snprintf(what, sizeof what, "embed n %d dim %d vocab [%d,+%d)", n, dim, v_start, v_count);
    float *table = rand_vec(c, (size_t)v_count * dim, 0.0f, 1.0f);
    int32_t *tok = xmalloc((size_t)n * 4);
    for (int t = 0; t < n; t++) {
        int lo = v_start - 5 > 0 ? v_start - 5 : 0;
        tok[t] = rand_int(c, lo, v_start + v_count + 5); /* some outside this shard: zero rows */
    }
    tok[0] = v_start; /* the shard's edges are in */
    if (n > 1) tok[n - 1] = v_start + v_count - 1;
    void *d_out[N_BE], *d_tab[N_BE], *d_tok[N_BE];
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        d_tab[b] = dev_weight(be, table, v_count, dim);
        d_tok[b] = dev_i32(be, tok, (size_t)n);
        d_out[b] = dev_poison(be, (size_t)n * dim * sits_dtype_size(be->act_dtype));
        TRY(be->ops->embed(be, d_out[b], d_tab[b], d_tok[b], n, dim, v_start, v_count));
    }
    compare_bufs(c, what, d_out, (size_t)n * dim, TOL_EXACT, 0);
    for (int b = 0; b < N_BE; b++) {
        dev_free(c->be[b], d_out[b]);
        dev_free(c->be[b], d_tab[b]);
        dev_free(c->be[b], d_tok[b]);
    }
    free(tok);
    free(table);
}

static void test_rmsnorm(ctx_t *c, int n, int dim, int fused, int in_place)
{
    char what[128];
    snprintf(what, sizeof what, "%s n %d dim %d%s", fused ? "add_rmsnorm" : "rmsnorm", n, dim, in_place ? " in place" : "");
    size_t nd = (size_t)n * dim;
    float *x = rand_vec(c, nd, 0.0f, 2.0f), *res = rand_vec(c, nd, 0.0f, 2.0f), *w = rand_vec(c, (size_t)dim, 1.0f, 0.5f);
    const float eps = 1e-5f;
    void *d_x[N_BE], *d_res[N_BE], *d_w[N_BE], *d_out[N_BE];
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        d_x[b] = dev_acts(be, x, nd);
        d_w[b] = dev_weight(be, w, 1, dim);
        d_res[b] = fused ? dev_acts(be, res, nd) : NULL;
        d_out[b] = in_place ? d_x[b] : dev_poison(be, nd * sits_dtype_size(be->act_dtype));
        if (fused) TRY(be->ops->add_rmsnorm(be, d_out[b], d_res[b], d_x[b], d_w[b], n, dim, eps));
        else TRY(be->ops->rmsnorm(be, d_out[b], d_x[b], d_w[b], n, dim, eps));
    }
    /* fused: the residual sum is one rounding; out normalises that rounded residual (a second). */
    if (fused) {
        char w2[160];
        snprintf(w2, sizeof w2, "%s (residual)", what);
        compare_bufs(c, w2, d_res, nd, TOL_ONE_ROUNDING, 0);
        compare_bufs(c, what, d_out, nd, 1e-4, 1e-2, 0);
    } else {
        compare_bufs(c, what, d_out, nd, TOL_ONE_ROUNDING, 0);
    }
    for (int b = 0; b < N_BE; b++) {
        if (!in_place) dev_free(c->be[b], d_out[b]);
        dev_free(c->be[b], d_x[b]);
        dev_free(c->be[b], d_w[b]);
        if (fused) dev_free(c->be[b], d_res[b]);
    }
    free(x);
    free(res);
    free(w);
}

static void test_matmul(ctx_t *c, int n, int in, int out, int with_bias)
{
    char what[128];
    snprintf(what, sizeof what, "matmul n %d in %d out %d%s", n, in, out, with_bias ? " +bias" : "");
    float *x = rand_vec(c, (size_t)n * in, 0.0f, 1.0f);
    float *w = rand_vec(c, (size_t)out * in, 0.0f, 1.0f / sqrtf((float)in)); /* keeps |y| ~ 0.6 */
    float *bias = rand_vec(c, (size_t)out, 0.0f, 0.5f);
    void *d_x[N_BE], *d_w[N_BE], *d_b[N_BE], *d_y[N_BE];
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        d_x[b] = dev_acts(be, x, (size_t)n * in);
        d_w[b] = dev_weight(be, w, out, in);
        d_b[b] = with_bias ? dev_weight(be, bias, 1, out) : NULL;
        d_y[b] = dev_poison(be, (size_t)n * out * sits_dtype_size(be->act_dtype));
        TRY(be->ops->matmul(be, d_y[b], d_x[b], d_w[b], d_b[b], n, in, out));
    }
    /* One output rounding; fp32 sums in another order differ by ~1e-6 of sum |x w| (~ sqrt(in)/3). */
    compare_bufs(c, what, d_y, (size_t)n * out, 2e-4, 8e-3, 0);
    for (int b = 0; b < N_BE; b++) {
        dev_free(c->be[b], d_x[b]);
        dev_free(c->be[b], d_w[b]);
        if (d_b[b]) dev_free(c->be[b], d_b[b]);
        dev_free(c->be[b], d_y[b]);
    }
    free(x);
    free(w);
    free(bias);
}

static void test_rope(ctx_t *c, int n, int n_heads, int n_kv, int head_dim, float theta)
{
    char what[128];
    int row_stride = (n_heads + 2 * n_kv) * head_dim, n_rot = n_heads + n_kv, half = head_dim / 2;
    snprintf(what, sizeof what, "rope n %d heads %d+%d head_dim %d", n, n_heads, n_kv, head_dim);
    float *x = rand_vec(c, (size_t)n * row_stride, 0.0f, 1.0f);
    float *inv = xmalloc((size_t)half * sizeof *inv);
    for (int i = 0; i < half; i++) inv[i] = (float)pow((double)theta, -2.0 * i / head_dim);
    int32_t *pos = xmalloc((size_t)n * 4);
    for (int t = 0; t < n; t++) pos[t] = t % 3 == 0 ? rand_int(c, 0, 131072) : rand_int(c, 0, 64);
    pos[0] = 0;
    void *d_x[N_BE], *d_inv[N_BE], *d_pos[N_BE];
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        d_x[b] = dev_acts(be, x, (size_t)n * row_stride);
        TRY(be->ops->alloc(be, (size_t)half * 4, &d_inv[b]));
        TRY(be->ops->upload(be, d_inv[b], inv, (size_t)half * 4));
        d_pos[b] = dev_i32(be, pos, (size_t)n);
        TRY(be->ops->rope(be, d_x[b], n, row_stride, n_rot, head_dim, d_pos[b], d_inv[b]));
    }
    /* In place: the whole rows are compared, so the V columns must come back untouched. */
    compare_bufs(c, what, d_x, (size_t)n * row_stride, TOL_ONE_ROUNDING, 0);
    for (int b = 0; b < N_BE; b++) {
        dev_free(c->be[b], d_x[b]);
        dev_free(c->be[b], d_inv[b]);
        dev_free(c->be[b], d_pos[b]);
    }
    free(x);
    free(inv);
    free(pos);
}

static void test_kv_write(ctx_t *c, int n, int n_heads, int n_kv, int head_dim, int n_slots)
{
    char what[128];
    int row_stride = (n_heads + 2 * n_kv) * head_dim, kv_dim = n_kv * head_dim;
    int k_col = n_heads * head_dim, v_col = k_col + kv_dim;
    snprintf(what, sizeof what, "kv_write n %d heads %d+%d head_dim %d slots %d", n, n_heads, n_kv, head_dim, n_slots);
    float *qkv = rand_vec(c, (size_t)n * row_stride, 0.0f, 1.0f);
    int32_t *slot = xmalloc((size_t)n * 4);
    int *taken = calloc((size_t)n_slots, sizeof *taken);
    for (int t = 0; t < n; t++) {
        if (t % 5 == 4) { slot[t] = -1; continue; } /* padding token */
        int s;
        do s = rand_int(c, 0, n_slots); while (taken[s]);
        taken[s] = 1;
        slot[t] = s;
    }
    void *d_qkv[N_BE], *d_k[N_BE], *d_v[N_BE], *d_slot[N_BE];
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        size_t cache_bytes = (size_t)n_slots * kv_dim * sits_dtype_size(be->kv_dtype);
        d_qkv[b] = dev_acts(be, qkv, (size_t)n * row_stride);
        d_k[b] = dev_poison(be, cache_bytes);
        d_v[b] = dev_poison(be, cache_bytes);
        d_slot[b] = dev_i32(be, slot, (size_t)n);
        TRY(be->ops->kv_write(be, d_k[b], d_v[b], d_qkv[b], n, row_stride, k_col, v_col, kv_dim, d_slot[b]));
    }
    /* Slots not written stay poison (NaN) on both sides: NaN matches NaN here, a value never does. */
    char wk[160], wv[160];
    snprintf(wk, sizeof wk, "%s (K)", what);
    snprintf(wv, sizeof wv, "%s (V)", what);
    compare_bufs(c, wk, d_k, (size_t)n_slots * kv_dim, TOL_EXACT, 1);
    compare_bufs(c, wv, d_v, (size_t)n_slots * kv_dim, TOL_EXACT, 1);
    for (int b = 0; b < N_BE; b++) {
        dev_free(c->be[b], d_qkv[b]);
        dev_free(c->be[b], d_k[b]);
        dev_free(c->be[b], d_v[b]);
        dev_free(c->be[b], d_slot[b]);
    }
    free(qkv);
    free(slot);
    free(taken);
}

/* n_seqs sequences of the given context lengths in a paged cache with shuffled block ids; query
 * tokens: the last position of each sequence (decode), a prefill chunk of the last sequence's
 * final `chunk` positions, and a few random positions. */
static void test_attention(ctx_t *c, int n_heads, int n_kv, int head_dim, int block_size, int window, int n_seqs,
                           const int *lens, int chunk)
{
    char what[160];
    int off = snprintf(what, sizeof what, "attention h %d kv %d hd %d bs %d win %d ctx", n_heads, n_kv, head_dim, block_size,
                       window);
    for (int s = 0; s < n_seqs && off < (int)sizeof what - 8; s++) off += snprintf(what + off, sizeof what - off, " %d", lens[s]);

    int max_blocks = 0, total_blocks = 0;
    for (int s = 0; s < n_seqs; s++) {
        int nb = (lens[s] + block_size - 1) / block_size;
        if (nb > max_blocks) max_blocks = nb;
        total_blocks += nb;
    }
    int n_blocks = total_blocks + 3; /* a few unused blocks */
    int *perm = xmalloc((size_t)n_blocks * sizeof *perm);
    for (int i = 0; i < n_blocks; i++) perm[i] = i;
    for (int i = n_blocks - 1; i > 0; i--) {
        int j = rand_int(c, 0, i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int32_t *bt = xmalloc((size_t)n_seqs * max_blocks * 4);
    for (int s = 0, next = 0; s < n_seqs; s++)
        for (int j = 0; j < max_blocks; j++)
            bt[s * max_blocks + j] = j < (lens[s] + block_size - 1) / block_size ? perm[next++] : -1;

    int n_tok = n_seqs + chunk + 4, kv_dim = n_kv * head_dim;
    int32_t *seq = xmalloc((size_t)n_tok * 4), *pos = xmalloc((size_t)n_tok * 4);
    int t = 0;
    for (int s = 0; s < n_seqs; s++, t++) { seq[t] = s; pos[t] = lens[s] - 1; }
    for (int i = 0; i < chunk; i++, t++) { seq[t] = n_seqs - 1; pos[t] = lens[n_seqs - 1] - chunk + i; }
    for (; t < n_tok; t++) { seq[t] = rand_int(c, 0, n_seqs); pos[t] = rand_int(c, 0, lens[seq[t]]); }

    int q_stride = (n_heads + 2 * n_kv) * head_dim; /* q read from a fused qkv row */
    size_t cache_n = (size_t)n_blocks * block_size * kv_dim, out_n = (size_t)n_tok * n_heads * head_dim;
    float *q = rand_vec(c, (size_t)n_tok * q_stride, 0.0f, 3.0f); /* peaked softmax, not a plain mean */
    float *kc = rand_vec(c, cache_n, 0.0f, 1.0f), *vc = rand_vec(c, cache_n, 0.0f, 1.0f);

    void *d_q[N_BE], *d_k[N_BE], *d_v[N_BE], *d_out[N_BE], *d_seq[N_BE], *d_pos[N_BE], *d_bt[N_BE];
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        d_q[b] = dev_acts(be, q, (size_t)n_tok * q_stride);
        d_k[b] = dev_vals(be, be->kv_dtype, kc, cache_n);
        d_v[b] = dev_vals(be, be->kv_dtype, vc, cache_n);
        d_seq[b] = dev_i32(be, seq, (size_t)n_tok);
        d_pos[b] = dev_i32(be, pos, (size_t)n_tok);
        d_bt[b] = dev_i32(be, bt, (size_t)n_seqs * max_blocks);
        d_out[b] = dev_poison(be, out_n * sits_dtype_size(be->act_dtype));
        sits_attn_args_t a = {
            .n_tokens = n_tok, .seq = d_seq[b], .pos = d_pos[b], .block_tables = d_bt[b], .max_blocks = max_blocks,
            .block_size = block_size, .n_heads = n_heads, .n_kv_heads = n_kv, .head_dim = head_dim, .window = window,
            .scale = 1.0f / sqrtf((float)head_dim),
        };
        TRY(be->ops->attention(be, d_out[b], d_q[b], q_stride, d_k[b], d_v[b], &a));
    }
    /* Outputs are convex combinations of V in [-1, 1]: one output rounding plus fp32 softmax noise. */
    compare_bufs(c, what, d_out, out_n, 2e-4, 8e-3, 0);
    for (int b = 0; b < N_BE; b++) {
        void *bufs[] = { d_q[b], d_k[b], d_v[b], d_out[b], d_seq[b], d_pos[b], d_bt[b] };
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dev_free(c->be[b], bufs[i]);
    }
    free(perm);
    free(bt);
    free(seq);
    free(pos);
    free(q);
    free(kc);
    free(vc);
}

static void test_silu_mul(ctx_t *c, int n, int dim)
{
    char what[128];
    snprintf(what, sizeof what, "silu_mul n %d dim %d", n, dim);
    float *gu = rand_vec(c, (size_t)n * 2 * dim, 0.0f, 4.0f);
    void *d_gu[N_BE], *d_out[N_BE];
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        d_gu[b] = dev_acts(be, gu, (size_t)n * 2 * dim);
        d_out[b] = dev_poison(be, (size_t)n * dim * sits_dtype_size(be->act_dtype));
        TRY(be->ops->silu_mul(be, d_out[b], d_gu[b], n, dim));
    }
    compare_bufs(c, what, d_out, (size_t)n * dim, TOL_ONE_ROUNDING, 0);
    for (int b = 0; b < N_BE; b++) {
        dev_free(c->be[b], d_gu[b]);
        dev_free(c->be[b], d_out[b]);
    }
    free(gu);
}

static void test_gather_rows(ctx_t *c, int n_x, int n_rows, int dim)
{
    char what[128];
    snprintf(what, sizeof what, "gather_rows %d of %d rows dim %d", n_rows, n_x, dim);
    float *x = rand_vec(c, (size_t)n_x * dim, 0.0f, 1.0f);
    int32_t *rows = xmalloc((size_t)n_rows * 4);
    for (int i = 0; i < n_rows; i++) rows[i] = rand_int(c, 0, n_x); /* repeats allowed */
    rows[0] = n_x - 1;
    void *d_x[N_BE], *d_rows[N_BE], *d_out[N_BE];
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        d_x[b] = dev_acts(be, x, (size_t)n_x * dim);
        d_rows[b] = dev_i32(be, rows, (size_t)n_rows);
        d_out[b] = dev_poison(be, (size_t)n_rows * dim * sits_dtype_size(be->act_dtype));
        TRY(be->ops->gather_rows(be, d_out[b], d_x[b], d_rows[b], n_rows, dim));
    }
    compare_bufs(c, what, d_out, (size_t)n_rows * dim, TOL_EXACT, 0);
    for (int b = 0; b < N_BE; b++) {
        dev_free(c->be[b], d_x[b]);
        dev_free(c->be[b], d_rows[b]);
        dev_free(c->be[b], d_out[b]);
    }
    free(x);
    free(rows);
}

int main(void)
{
    sits_log_init(-1);
    int n_dev = sits_backend_cuda_device_count();
    if (n_dev == 0) {
        printf("SKIP: no usable CUDA device (built without CUDA, or no GPU / driver visible)\n");
        return 77;
    }
    ctx_t c = { .rng = 0x5EED5EED12345678ull };
    sits_backend_params_t params = { .threads = 0, .device = 0 };
    TRY(sits_backend_cpu_create(&params, &c.be[0]));
    sits_status_t st = sits_backend_cuda_create(&params, &c.be[1]);
    if (st == SITS_ERR_UNSUPPORTED) {
        printf("SKIP: the cuda backend cannot use gpu 0 (%s; see the log)\n", sits_status_str(st));
        sits_backend_destroy(c.be[0]);
        return 77;
    }
    TRY(st);
    printf("op parity: cpu vs %s (gpu %d of %d)\n", c.be[1]->ops->name, c.be[1]->device, n_dev);

    test_upload_weight(&c, SITS_DT_F32, 37, 53, 3, 20, 5, 50, 2);
    test_upload_weight(&c, SITS_DT_F16, 64, 96, 0, 64, 32, 96, 0);
    test_upload_weight(&c, SITS_DT_BF16, 33, 17, 10, 33, 0, 17, 1);
    test_upload_weight(&c, SITS_DT_F32, 3000, 1600, 100, 3000, 0, 1600, 0); /* > one staging chunk */

    test_embed(&c, 9, 4096, 1000, 500);
    test_embed(&c, 7, 129, 0, 40);
    test_embed(&c, 1, 64, 3, 10);

    test_rmsnorm(&c, 1, 4096, 0, 0);
    test_rmsnorm(&c, 5, 8192, 0, 0);
    test_rmsnorm(&c, 3, 1001, 0, 0);
    test_rmsnorm(&c, 4, 33, 0, 1);
    test_rmsnorm(&c, 6, 4096, 1, 0);
    test_rmsnorm(&c, 3, 77, 1, 0);

    test_matmul(&c, 1, 4096, 1024, 0);
    test_matmul(&c, 8, 1024, 3072, 1);
    test_matmul(&c, 33, 1000, 520, 1);
    test_matmul(&c, 64, 512, 256, 0);
    test_matmul(&c, 3, 130, 66, 1);
    test_matmul(&c, 5, 127, 33, 0);

    test_rope(&c, 7, 8, 2, 128, 500000.0f);
    test_rope(&c, 5, 4, 4, 64, 10000.0f);
    test_rope(&c, 3, 3, 1, 80, 1000000.0f);

    test_kv_write(&c, 11, 8, 2, 128, 64);
    test_kv_write(&c, 6, 3, 1, 36, 20);
    test_kv_write(&c, 9, 5, 1, 6, 16); /* kv_dim 6: scalar path */

    {
        int l1[] = { 1, 37, 1100 };
        test_attention(&c, 8, 2, 128, 16, 0, 3, l1, 5);
        test_attention(&c, 8, 2, 128, 16, 100, 3, l1, 5);
        int l2[] = { 2000, 5 };
        test_attention(&c, 4, 4, 64, 32, 0, 2, l2, 3);
        int l3[] = { 300, 1025 };
        test_attention(&c, 6, 1, 80, 16, 257, 2, l3, 4);
        int l4[] = { 70 };
        test_attention(&c, 2, 1, 256, 8, 0, 1, l4, 7);
        int l5[] = { 17, 3 };
        test_attention(&c, 2, 2, 512, 16, 1, 2, l5, 2); /* window 1: only the token itself */
    }

    test_silu_mul(&c, 3, 11008);
    test_silu_mul(&c, 7, 37);
    test_silu_mul(&c, 1, 8);

    test_gather_rows(&c, 10, 4, 4096);
    test_gather_rows(&c, 7, 9, 65);

    sits_backend_destroy(c.be[1]);
    sits_backend_destroy(c.be[0]);
    if (c.failures) {
        printf("FAIL: %d of %d checks failed\n", c.failures, c.checks);
        return 1;
    }
    printf("PASS: %d checks\n", c.checks);
    return 0;
}
