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
#define _POSIX_C_SOURCE 200809L /* setenv */

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
    int kv_i8;     /* [int8 kv] attention cases on 8-bit caches, of dtype kv_q8 (I8 or [fp8 kv] F8_E4M3) */
    sits_dtype_t kv_q8;
    float attn_softcap, attn_scale;   /* [families] attention cases with soft-capping / a query scale (0: none / 1/sqrt(hd)) */
    int attn_seq_bound;   /* [perf] attention cases' max_seq_tokens: 0 = the tokens' own (a sequence's most), else this value */
    int attn_sinks;       /* [gpt-oss] attention cases with per-head attention sinks (attn_sink_of) */
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

/* A norm weight [n]: FP32 on every backend (weights.h), whatever its weight dtype. */
static void *dev_norm(sits_backend_t *be, const float *v, size_t n) { return dev_vals(be, SITS_DT_F32, v, n); }

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

/* [dummy] --load-format dummy's values drawn by each backend (util/dummy.h): the cpu's fp32 values rounded to bf16
 * must be cuda's bf16 exactly; FP8 rows (scale from the whole row of cols, the slice [c0, c0 + w) stored) must be
 * the same bytes and the same scales. Rows before dst_row0 stay untouched (poison). */
static void test_dummy_rows(ctx_t *c, int64_t r, int64_t n, int64_t cols, int64_t c0, int64_t w, int64_t dst_row0)
{
    char what[128];
    const uint64_t base = 0x5eedull ^ (7ull << 56) ^ (3ull << 40);
    snprintf(what, sizeof what, "dummy_rows rows [%lld,+%lld) x [%lld,+%lld) at row %lld", (long long)r, (long long)n,
             (long long)c0, (long long)w, (long long)dst_row0);
    size_t out_n = (size_t)((dst_row0 + n) * w), first = (size_t)(dst_row0 * w);
    void *d[N_BE];
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        d[b] = dev_poison(be, out_n * sits_dtype_size(be->weight_dtype));
        TRY(be->ops->dummy_rows(be, d[b], dst_row0, base, r, n, c0, w));
    }
    float *ref = host_f32(c->be[0], d[0], out_n), *got = host_f32(c->be[1], d[1], out_n);
    for (size_t i = first; i < out_n; i++) ref[i] = bf(ref[i]);
    compare(c, what, ref, got, out_n, TOL_EXACT, 1);
    free(ref);
    free(got);
    for (int b = 0; b < N_BE; b++) dev_free(c->be[b], d[b]);

    snprintf(what, sizeof what, "dummy_rows_fp8 rows [%lld,+%lld) x [%lld,+%lld) of %lld at row %lld", (long long)r,
             (long long)n, (long long)c0, (long long)w, (long long)cols, (long long)dst_row0);
    size_t q_n = out_n, s_n = (size_t)(dst_row0 + n);
    void *q[N_BE], *sc[N_BE];
    uint8_t *hq[N_BE];
    float *hs[N_BE];
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        q[b] = dev_poison(be, q_n);
        sc[b] = dev_poison(be, s_n * sizeof(float));
        TRY(be->ops->dummy_rows_fp8(be, q[b], sc[b], dst_row0, base, r, n, cols, c0, w));
        hq[b] = xmalloc(q_n);
        hs[b] = xmalloc(s_n * sizeof(float));
        TRY(be->ops->sync(be));
        TRY(be->ops->download(be, hq[b], q[b], q_n));
        TRY(be->ops->download(be, hs[b], sc[b], s_n * sizeof(float)));
    }
    size_t bad_q = 0, bad_s = 0;
    for (size_t i = 0; i < q_n; i++) bad_q += hq[0][i] != hq[1][i];
    for (size_t i = 0; i < s_n; i++) bad_s += memcmp(&hs[0][i], &hs[1][i], sizeof(float)) != 0;
    c->checks++;
    printf("%-4s %-58s n %-8zu bytes differing %zu, scales differing %zu of %zu\n", bad_q || bad_s ? "FAIL" : "ok", what,
           q_n, bad_q, bad_s, s_n);
    if (bad_q || bad_s) {
        fprintf(stderr, "FAIL %s: %zu bytes, %zu scales differ\n", what, bad_q, bad_s);
        c->failures++;
    }
    for (int b = 0; b < N_BE; b++) {
        dev_free(c->be[b], q[b]);
        dev_free(c->be[b], sc[b]);
        free(hq[b]);
        free(hs[b]);
    }
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

/* gemma: weights 1 + w in [1 + 2/512, 1 + 3/512), fp32 values bf16 cannot hold (its neighbours there
 * are 1 and 1 + 4/512: a bf16 copy is 0.2 to 0.4 % off), checked to one output rounding (2^-8) plus
 * fp32 noise -- the norm ops must apply the fp32 weights as they are (Gemma's 1 + w, computed in fp32
 * by HF); a second rounding of the weights shows as errors up to twice that. */
static void test_rmsnorm(ctx_t *c, int n, int dim, int fused, int in_place, int gemma)
{
    char what[128];
    snprintf(what, sizeof what, "%s n %d dim %d%s%s", fused ? "add_rmsnorm" : "rmsnorm", n, dim, in_place ? " in place" : "",
             gemma ? " fp32 (1 + w) weights" : "");
    size_t nd = (size_t)n * dim;
    float *x = rand_vec(c, nd, 0.0f, 2.0f), *res = rand_vec(c, nd, 0.0f, 2.0f), *w = rand_vec(c, (size_t)dim, 1.0f, 0.5f);
    for (int i = 0; gemma && i < dim; i++) {
        double u = (double)(rng_next(c) >> 11) / 9007199254740992.0;
        w[i] = 1.0f + (float)((2.0 + u) / 512.0);
    }
    const float eps = 1e-5f;
    void *d_x[N_BE], *d_res[N_BE], *d_w[N_BE], *d_out[N_BE];
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        d_x[b] = dev_acts(be, x, nd);
        d_w[b] = dev_norm(be, w, (size_t)dim);
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
        compare_bufs(c, what, d_out, nd, 1e-5, gemma ? 4.5e-3 : 5e-3, 0);   /* TOL_ONE_ROUNDING; gemma: see above */
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

/* [perf: decode gemv] On the cuda backend, linears of <= 16 tokens (the GEMV kernels) give each token the same bits
 * whatever the step's token count: the outputs of rows 0 .. n-1 of an n-token matmul (n = 1 .. 16), bf16 and fp32
 * (matmul_f32out) outputs, equal those of the 16-token matmul byte for byte ([perf: mma gemv] SITS_GEMV_MMA=2: one
 * token on the tensor-core GEMV too; by default it runs gemv_ring_kernel, whose sums are in another order). */
static void test_matmul_rows_invariant(ctx_t *c, int in, int out)
{
    enum { NR = 16 };
    char what[128];
    snprintf(what, sizeof what, "matmul rows invariant in %d out %d", in, out);
    sits_backend_t *be = c->be[N_BE - 1];
    float *x = rand_vec(c, (size_t)NR * in, 0.0f, 1.0f);
    float *w = rand_vec(c, (size_t)out * in, 0.0f, 1.0f / sqrtf((float)in));
    void *d_x = dev_acts(be, x, (size_t)NR * in), *d_w = dev_weight(be, w, out, in);
    setenv("SITS_GEMV_MMA", "2", 1);
    for (int f32 = 0; f32 < 2; f32++) {
        if (f32 && !be->ops->matmul_f32out) continue;
        size_t esz = f32 ? sizeof(float) : sits_dtype_size(be->act_dtype), row = (size_t)out * esz;
        void *d_yN = dev_poison(be, NR * row), *d_y = dev_poison(be, NR * row);
        if (f32) TRY(be->ops->matmul_f32out(be, d_yN, d_x, d_w, NULL, NR, in, out));
        else TRY(be->ops->matmul(be, d_yN, d_x, d_w, NULL, NR, in, out));
        unsigned char *hN = xmalloc(NR * row), *h = xmalloc(NR * row);
        TRY(be->ops->sync(be));
        TRY(be->ops->download(be, hN, d_yN, NR * row));
        size_t bad = 0;
        for (int n = 1; n <= NR; n++) {
            if (f32) TRY(be->ops->matmul_f32out(be, d_y, d_x, d_w, NULL, n, in, out));
            else TRY(be->ops->matmul(be, d_y, d_x, d_w, NULL, n, in, out));
            TRY(be->ops->sync(be));
            TRY(be->ops->download(be, h, d_y, (size_t)n * row));
            for (size_t i = 0; i < (size_t)n * row; i++) bad += h[i] != hN[i];
        }
        c->checks++;
        printf("%-4s %-58s %s: rows of n = 1 .. 16 == rows of n = 16 (%zu bytes differ)\n", bad ? "FAIL" : "ok", what,
               f32 ? "fp32 out" : "bf16 out", bad);
        if (bad) c->failures++;
        free(hN);
        free(h);
        dev_free(be, d_yN);
        dev_free(be, d_y);
    }
    unsetenv("SITS_GEMV_MMA");
    dev_free(be, d_x);
    dev_free(be, d_w);
    free(x);
    free(w);
}

/* [int4] matmul_w4: random packed INT4 weights (backend.h layout) with fp32 scales and zeros, groups
 * of `group` inputs or (act_order) a random g_idx over in / group groups; x and bias rounded to bf16
 * first so both backends see the same inputs. */
static void w4_case(ctx_t *c, int n, int in, int out, int group, int act_order, int with_bias, int dq)
{
    char what[128];
    snprintf(what, sizeof what, "matmul_w4 n %d in %d out %d g %d%s%s%s", n, in, out, group, act_order ? " act-order" : "",
             with_bias ? " +bias" : "", dq ? " dequant+gemm" : "");
    int ng = in / group;
    float *x = rand_vec(c, (size_t)n * in, 0.0f, 1.0f);
    float *bias = rand_vec(c, (size_t)out, 0.0f, 0.5f);
    for (size_t i = 0; i < (size_t)n * in; i++) x[i] = bf(x[i]);
    for (int i = 0; i < out; i++) bias[i] = bf(bias[i]);
    uint8_t *q = xmalloc((size_t)out * (size_t)(in / 2));                 /* [out, in / 2] */
    float *sc = xmalloc(sizeof(float) * (size_t)out * (size_t)ng);        /* [out, ng] */
    float *zr = xmalloc(sizeof(float) * (size_t)out * (size_t)ng);        /* [out, ng] */
    int32_t *gidx = xmalloc(sizeof(int32_t) * (size_t)in);                /* [in] */
    for (size_t i = 0; i < (size_t)out * (size_t)(in / 2); i++) q[i] = (uint8_t)rand_int(c, 0, 256);
    for (size_t i = 0; i < (size_t)out * (size_t)ng; i++) {
        sc[i] = (0.5f + (float)rand_int(c, 0, 1000) / 1000.0f) * 0.25f / sqrtf((float)in);   /* keeps |y| ~ 1 */
        zr[i] = (float)rand_int(c, 0, 17);                                                    /* 0..16 (GPTQ v1 reaches 16) */
    }
    for (int k = 0; k < in; k++) gidx[k] = k / group;
    for (int k = in - 1; act_order && k > 0; k--) {   /* a permutation of the groups' members */
        int j = rand_int(c, 0, k + 1);
        int32_t t = gidx[k];
        gidx[k] = gidx[j];
        gidx[j] = t;
    }
    void *d_x[N_BE], *d_b[N_BE], *d_y[N_BE], *d_q[N_BE], *d_s[N_BE], *d_z[N_BE], *d_g[N_BE];
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        if (!be->ops->matmul_w4) {
            printf("FAIL %s: the %s backend has no matmul_w4\n", what, be->ops->name);
            c->failures++;
            c->checks++;
            goto out;
        }
    }
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        d_x[b] = dev_acts(be, x, (size_t)n * in);
        d_b[b] = with_bias ? dev_weight(be, bias, 1, out) : NULL;
        d_y[b] = dev_poison(be, (size_t)n * out * sits_dtype_size(be->act_dtype));
        const size_t ra = (size_t)sits_w4_rows_alloc(out);   /* as the loader allocates: whole 16-row tiles */
        TRY(be->ops->alloc(be, ra * (size_t)(in / 2), &d_q[b]));
        TRY(be->ops->upload(be, d_q[b], q, (size_t)out * (size_t)(in / 2)));
        TRY(be->ops->alloc(be, sizeof(float) * ra * (size_t)ng, &d_s[b]));
        TRY(be->ops->upload(be, d_s[b], sc, sizeof(float) * (size_t)out * (size_t)ng));
        TRY(be->ops->alloc(be, sizeof(float) * ra * (size_t)ng, &d_z[b]));
        TRY(be->ops->upload(be, d_z[b], zr, sizeof(float) * (size_t)out * (size_t)ng));
        d_g[b] = act_order ? dev_i32(be, gidx, (size_t)in) : NULL;
        sits_w4_t w = { d_q[b], d_s[b], d_z[b], d_g[b], group, ng, 0 };
        if (be->ops->w4_layout) {   /* [int4 tiles] the backend's own layout, as the loader leaves it */
            TRY(be->ops->w4_layout(be, &w, out, in));
            const int want = !act_order && in % 128 == 0 && group % 32 == 0;   /* cuda tiles these (its kernels' rule) */
            if (w.tiled != want) {
                printf("FAIL %s: w4_layout left tiled = %d, want %d\n", what, w.tiled, want);
                c->failures++;
            }
            c->checks++;
        }
        if (dq && be->ops->mem_plan) {   /* the backend's dequantisation scratch, as the engine reserves it */
            sits_mem_plan_t plan;
            memset(&plan, 0, sizeof plan);
            sits_mem_shape_t sh = { .n_tokens = n, .max_in = in, .max_out = out, .w4_elems = (size_t)out * (size_t)in };
            TRY(be->ops->mem_plan(be, &sh, 1, &plan));
        }
        TRY(be->ops->matmul_w4(be, d_y[b], d_x[b], &w, d_b[b], n, in, out));
    }
    /* the same dequantised weights (one fp32 rounding each); fp32 sums in another order, one bf16 output
     * rounding; dequant+gemm: the weights rounded to bf16 too, a relative error of up to 2^-9 on each of the
     * in products x_k w_k: a random walk of sd 2^-9 sqrt(in E[x^2] E[w^2]) (x ~ N(0, 1)); bound 6 sd */
    double w2 = 0.0;
    for (int o = 0; o < out; o++)
        for (int k = 0; k < in; k++) {
            int nib = (q[(size_t)o * (in / 2) + k / 2] >> (4 * (k & 1))) & 15, gi = (size_t)o * ng + gidx[k];
            double w = ((double)nib - zr[gi]) * sc[gi];
            w2 += w * w;
        }
    double walk = ldexp(sqrt((double)in * w2 / ((double)out * in)), -9);
    if (dq) compare_bufs(c, what, d_y, (size_t)n * out, (float)(2e-4 + 6.0 * walk), 8e-3, 0);
    else compare_bufs(c, what, d_y, (size_t)n * out, 2e-4, 8e-3, 0);
    for (int b = 0; b < N_BE; b++) {
        void *p[] = { d_x[b], d_b[b], d_y[b], d_q[b], d_s[b], d_z[b], d_g[b] };
        for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
            if (p[i]) dev_free(c->be[b], p[i]);
    }
out:
    free(x);
    free(bias);
    free(q);
    free(sc);
    free(zr);
    free(gidx);
}

static void test_matmul_w4(ctx_t *c, int n, int in, int out, int group, int act_order, int with_bias)
{
    w4_case(c, n, in, out, group, act_order, with_bias, 0);
}

/* sel: [families] rope_sel, a random half of the tokens on a second (longrope-like) set */
static void test_rope(ctx_t *c, int n, int n_heads, int n_kv, int head_dim, float theta, int sel)
{
    char what[128];
    int row_stride = (n_heads + 2 * n_kv) * head_dim, n_rot = n_heads + n_kv, half = head_dim / 2;
    snprintf(what, sizeof what, "%s n %d heads %d+%d head_dim %d", sel ? "rope_sel" : "rope", n, n_heads, n_kv, head_dim);
    float *x = rand_vec(c, (size_t)n * row_stride, 0.0f, 1.0f);
    float *inv = xmalloc((size_t)head_dim * sizeof *inv);   /* [short half, long half] */
    for (int i = 0; i < half; i++) inv[i] = (float)pow((double)theta, -2.0 * i / head_dim);
    for (int i = 0; i < half; i++) inv[half + i] = inv[i] / (1.0f + 0.5f * (float)i);
    int32_t *sv = xmalloc((size_t)n * 4);
    for (int t = 0; t < n; t++) sv[t] = rand_int(c, 0, 2);
    int32_t *pos = xmalloc((size_t)n * 4);
    for (int t = 0; t < n; t++) pos[t] = t % 3 == 0 ? rand_int(c, 0, 131072) : rand_int(c, 0, 64);
    pos[0] = 0;
    void *d_x[N_BE], *d_inv[N_BE], *d_pos[N_BE], *d_sel[N_BE];
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        d_x[b] = dev_acts(be, x, (size_t)n * row_stride);
        TRY(be->ops->alloc(be, (size_t)head_dim * 4, &d_inv[b]));
        TRY(be->ops->upload(be, d_inv[b], inv, (size_t)head_dim * 4));
        d_pos[b] = dev_i32(be, pos, (size_t)n);
        d_sel[b] = dev_i32(be, sv, (size_t)n);
        if (sel)
            TRY(be->ops->rope_sel(be, d_x[b], n, row_stride, n_rot, head_dim, d_pos[b], d_inv[b], (float *)d_inv[b] + half,
                                  d_sel[b]));
        else
            TRY(be->ops->rope(be, d_x[b], n, row_stride, n_rot, head_dim, d_pos[b], d_inv[b]));
    }
    /* In place: the whole rows are compared, so the V columns must come back untouched. */
    compare_bufs(c, what, d_x, (size_t)n * row_stride, TOL_ONE_ROUNDING, 0);
    for (int b = 0; b < N_BE; b++) {
        dev_free(c->be[b], d_x[b]);
        dev_free(c->be[b], d_inv[b]);
        dev_free(c->be[b], d_pos[b]);
        dev_free(c->be[b], d_sel[b]);
    }
    free(x);
    free(inv);
    free(pos);
    free(sv);
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
        TRY(be->ops->kv_write(be, d_k[b], d_v[b], d_qkv[b], n, row_stride, k_col, v_col, kv_dim, head_dim, 16, d_slot[b]));
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

/* [int8 kv] kv_write into int8 caches (both backends set to dt: I8, or [fp8 kv] F8_E4M3): the cache
 * bytes -- 8-bit values, scales and untouched poison -- must be identical (the quantisation is defined
 * bit for bit in backend.h; the inputs are bf16 values on both sides). Rows include an all-zero head,
 * tiny and large magnitudes and exact halves (rounding ties of int8; of e4m3 near 0.5 * 448). */
static void test_kv_write_i8(ctx_t *c, sits_dtype_t dt, int n, int n_heads, int n_kv, int head_dim, int block_size, int n_blocks)
{
    char what[160];
    int row_stride = (n_heads + 2 * n_kv) * head_dim, kv_dim = n_kv * head_dim, n_slots = n_blocks * block_size;
    int k_col = n_heads * head_dim, v_col = k_col + kv_dim;
    snprintf(what, sizeof what, "kv_write %s n %d heads %d+%d head_dim %d block %d x %d", dt == SITS_DT_I8 ? "int8" : "fp8", n,
             n_heads, n_kv, head_dim, block_size, n_blocks);
    float *qkv = rand_vec(c, (size_t)n * row_stride, 0.0f, 1.0f);
    for (int t = 0; t < n; t++) {
        float *row = qkv + (size_t)t * row_stride;
        if (t == 1) for (int i = 0; i < head_dim; i++) row[k_col + i] = 0.0f;               /* amax 0 */
        if (t == 2) for (int i = 0; i < kv_dim; i++) row[v_col + i] *= 1e-30f;              /* tiny */
        if (t == 3) for (int i = 0; i < kv_dim; i++) row[k_col + i] = bf(row[k_col + i] * 3e4f); /* large */
        if (t == 4) for (int i = 0; i < head_dim; i++) row[v_col + i] = (float)((i % 255) - 127) * 0.5f; /* halves */
        for (int i = 0; i < row_stride; i++) row[i] = bf(row[i]);
    }
    int32_t *slot = xmalloc((size_t)n * 4);
    int *taken = calloc((size_t)n_slots, sizeof *taken);
    for (int t = 0; t < n; t++) {
        if (t % 7 == 6) { slot[t] = -1; continue; }
        int s;
        do s = rand_int(c, 0, n_slots); while (taken[s]);
        taken[s] = 1;
        slot[t] = s;
    }
    size_t bytes = (size_t)n_blocks * sits_kv_i8_unit_bytes(block_size, n_kv, head_dim);
    unsigned char *h[N_BE][2];
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        sits_dtype_t saved = be->kv_dtype;
        TRY(sits_backend_set_kv_dtype(be, dt));
        void *d_qkv = dev_acts(be, qkv, (size_t)n * row_stride), *d_k = dev_poison(be, bytes), *d_v = dev_poison(be, bytes);
        void *d_slot = dev_i32(be, slot, (size_t)n);
        TRY(be->ops->kv_write(be, d_k, d_v, d_qkv, n, row_stride, k_col, v_col, kv_dim, head_dim, block_size, d_slot));
        TRY(be->ops->sync(be));
        h[b][0] = xmalloc(bytes);
        h[b][1] = xmalloc(bytes);
        TRY(be->ops->download(be, h[b][0], d_k, bytes));
        TRY(be->ops->download(be, h[b][1], d_v, bytes));
        dev_free(be, d_qkv);
        dev_free(be, d_k);
        dev_free(be, d_v);
        dev_free(be, d_slot);
        be->kv_dtype = saved;
    }
    for (int kv = 0; kv < 2; kv++) {
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < bytes; i++)
            if (h[0][kv][i] != h[1][kv][i]) { if (!bad) first = i; bad++; }
        c->checks++;
        printf("%-4s %-58s (%s) %zu bytes, %zu differ\n", bad ? "FAIL" : "ok", what, kv ? "V" : "K", bytes, bad);
        if (bad) {
            fprintf(stderr, "FAIL %s (%s): %zu of %zu bytes differ, first at %zu (cpu %u cuda %u)\n", what, kv ? "V" : "K", bad,
                    bytes, first, h[0][kv][first], h[1][kv][first]);
            c->failures++;
        }
    }
    for (int b = 0; b < N_BE; b++) {
        free(h[b][0]);
        free(h[b][1]);
    }
    free(qkv);
    free(slot);
    free(taken);
}

/* [rope + kv write] The fused op against the two ops it replaces, on each backend: qkv and both
 * caches must be byte-identical to rope followed by kv_write (bf16 or int8 caches, padding tokens
 * included); then, for bf16 caches, cpu vs cuda as in the rope test (one bf16 rounding).
 * [families] qkn: with q / k norms (Qwen3's QK-norm), against rmsnorm_heads of the q and the k heads first. */
static void test_rope_kv_write_n(ctx_t *c, int n, int n_heads, int n_kv, int head_dim, int block_size, int n_blocks, int i8,
                                 int qkn)
{
    /* i8: 0 bf16 caches, 1 int8, 2 [fp8 kv] fp8 */
    char what[160];
    int row_stride = (n_heads + 2 * n_kv) * head_dim, kv_dim = n_kv * head_dim, half = head_dim / 2;
    int n_slots = n_blocks * block_size;
    snprintf(what, sizeof what, "rope_kv_write%s%s n %d heads %d+%d head_dim %d block %d x %d", qkn ? " +qk-norm" : "",
             i8 == 2 ? " fp8" : i8 ? " int8" : "", n, n_heads, n_kv, head_dim, block_size, n_blocks);
    float *qn = rand_vec(c, (size_t)head_dim, 1.0f, 0.3f), *kn = rand_vec(c, (size_t)head_dim, 1.0f, 0.3f);
    float *qkv = rand_vec(c, (size_t)n * row_stride, 0.0f, 1.0f);
    for (size_t i = 0; i < (size_t)n * row_stride; i++) qkv[i] = bf(qkv[i]);
    float *inv = xmalloc((size_t)half * sizeof *inv);
    for (int i = 0; i < half; i++) inv[i] = (float)pow(500000.0, -2.0 * i / head_dim);
    int32_t *pos = xmalloc((size_t)n * 4), *slot = xmalloc((size_t)n * 4);
    int *taken = calloc((size_t)n_slots, sizeof *taken);
    for (int t = 0; t < n; t++) {
        pos[t] = t % 3 == 0 ? rand_int(c, 0, 131072) : rand_int(c, 0, 64);
        if (t % 5 == 4 || t >= n_slots) { slot[t] = -1; continue; }
        int sl;
        do sl = rand_int(c, 0, n_slots); while (taken[sl]);
        taken[sl] = 1;
        slot[t] = sl;
    }
    void *d_q1[N_BE], *d_k1[N_BE], *d_v1[N_BE];
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        sits_dtype_t saved = be->kv_dtype;
        if (i8) TRY(sits_backend_set_kv_dtype(be, i8 == 2 ? SITS_DT_F8_E4M3 : SITS_DT_I8));
        if (!be->ops->rope_kv_write) {
            printf("FAIL %s: backend %s has no rope_kv_write\n", what, be->ops->name);
            c->checks++;
            c->failures++;
            be->kv_dtype = saved;
            d_q1[b] = d_k1[b] = d_v1[b] = NULL;
            continue;
        }
        size_t cache = i8 ? (size_t)n_blocks * sits_kv_i8_unit_bytes(block_size, n_kv, head_dim)
                          : (size_t)n_slots * kv_dim * sits_dtype_size(be->kv_dtype);
        size_t qb = (size_t)n * row_stride * sits_dtype_size(be->act_dtype);
        void *d_inv, *d_pos = dev_i32(be, pos, (size_t)n), *d_slot = dev_i32(be, slot, (size_t)n);
        void *d_qn = qkn ? dev_vals(be, SITS_DT_F32, qn, (size_t)head_dim) : NULL;
        void *d_kn = qkn ? dev_vals(be, SITS_DT_F32, kn, (size_t)head_dim) : NULL;
        TRY(be->ops->alloc(be, (size_t)half * 4, &d_inv));
        TRY(be->ops->upload(be, d_inv, inv, (size_t)half * 4));
        void *q1 = dev_acts(be, qkv, (size_t)n * row_stride), *q2 = dev_acts(be, qkv, (size_t)n * row_stride);
        void *k1 = dev_poison(be, cache), *v1 = dev_poison(be, cache), *k2 = dev_poison(be, cache), *v2 = dev_poison(be, cache);
        TRY(be->ops->rope_kv_write(be, q1, n, row_stride, n_heads, n_kv, head_dim, d_pos, d_inv, k1, v1, block_size, d_slot, d_qn,
                                   d_kn, 1e-6f));
        if (qkn) {
            TRY(be->ops->rmsnorm_heads(be, q2, n, row_stride, 0, n_heads, head_dim, d_qn, 1e-6f));
            TRY(be->ops->rmsnorm_heads(be, q2, n, row_stride, n_heads * head_dim, n_kv, head_dim, d_kn, 1e-6f));
        }
        TRY(be->ops->rope(be, q2, n, row_stride, n_heads + n_kv, head_dim, d_pos, d_inv));
        TRY(be->ops->kv_write(be, k2, v2, q2, n, row_stride, n_heads * head_dim, (n_heads + n_kv) * head_dim, kv_dim, head_dim,
                              block_size, d_slot));
        TRY(be->ops->sync(be));
        void *pa[3] = { q1, k1, v1 }, *pb[3] = { q2, k2, v2 };
        size_t nb[3] = { qb, cache, cache };
        static const char *const part[3] = { "qkv", "K cache", "V cache" };
        for (int j = 0; j < 3; j++) {
            unsigned char *ha = xmalloc(nb[j]), *hb = xmalloc(nb[j]);
            TRY(be->ops->download(be, ha, pa[j], nb[j]));
            TRY(be->ops->download(be, hb, pb[j], nb[j]));
            size_t bad = 0;
            for (size_t i = 0; i < nb[j]; i++) bad += ha[i] != hb[i];
            c->checks++;
            printf("%-4s %-58s %s %s: fused == rope + kv_write (%zu of %zu bytes differ)\n", bad ? "FAIL" : "ok", what,
                   be->ops->name, part[j], bad, nb[j]);
            if (bad) c->failures++;
            free(ha);
            free(hb);
        }
        d_q1[b] = q1;
        d_k1[b] = k1;
        d_v1[b] = v1;
        dev_free(be, q2);
        dev_free(be, k2);
        dev_free(be, v2);
        dev_free(be, d_inv);
        dev_free(be, d_pos);
        dev_free(be, d_slot);
        if (qkn) {
            dev_free(be, d_qn);
            dev_free(be, d_kn);
        }
        be->kv_dtype = saved;
    }
    if (d_q1[0] && d_q1[1]) {
        /* qkn: two bf16 roundings; where the backends round a normed value (|v| < 8 here: one ulp <= 2^-5) to
         * neighbouring bf16s, the rotation carries that ulp into both elements of the pair, near-zero ones
         * included: an absolute bound of two such ulps (a missing or wrong norm moves elements by tens of percent;
         * measured on the H200: max 0.015) */
        const double atol = qkn ? 6.25e-2 : 1e-5;
        compare_bufs(c, what, d_q1, (size_t)n * row_stride, atol, 5e-3, 0);
        if (!i8) {
            char wk[200], wv[200];
            snprintf(wk, sizeof wk, "%s (K)", what);
            snprintf(wv, sizeof wv, "%s (V)", what);
            compare_bufs(c, wk, d_k1, (size_t)n_slots * kv_dim, atol, 5e-3, 1);
            compare_bufs(c, wv, d_v1, (size_t)n_slots * kv_dim, TOL_EXACT, 1);
        }
    }
    for (int b = 0; b < N_BE; b++)
        if (d_q1[b]) {
            dev_free(c->be[b], d_q1[b]);
            dev_free(c->be[b], d_k1[b]);
            dev_free(c->be[b], d_v1[b]);
        }
    free(qkv);
    free(inv);
    free(pos);
    free(slot);
    free(taken);
    free(qn);
    free(kn);
}

static void test_rope_kv_write(ctx_t *c, int n, int n_heads, int n_kv, int head_dim, int block_size, int n_blocks, int i8)
{
    test_rope_kv_write_n(c, n, n_heads, n_kv, head_dim, block_size, n_blocks, i8, 0);
}

/* ---- attention ----------------------------------------------------------------------------------
 * [attention] The cuda backend picks its kernels from the batch (see kernels/attention.cu): the
 * split-K decode kernel, the tiled tensor-core prefill kernel for sequences with >= 16 rows in a
 * 64-row tile of the batch, or the generic kernel (head_dim other than 64 / 128). The cases below
 * cover all of them and their mixes: decode batches of mixed lengths 1 .. 5000 (one and many
 * splits), prefill chunks of 1 .. 2048 tokens with and without a cached prefix, mixed batches,
 * rows of one sequence at random positions, GQA ratios 1, 4, 8 and 24, windows, head_dim 64 and
 * 128, block sizes 8 .. 64 and a non-power-of-two one.
 *
 * Bound: both kernels round the softmax weights p_j to bf16 before the tensor-core P.V product
 * (as FlashAttention does), each with a relative error <= u = 2^-8, so an output element moves by
 * sum_j e_j p_j v_j / l with |e_j| <= u: at most u * sum_j p_j |v_j| / l, and, these roundings
 * being independent (Hoeffding), beyond 7 u sqrt(sum_j p_j^2 v_j^2) / l with probability < 1e-10.
 * The test computes that term per element in double from the same inputs and adds it to the usual
 * bound (one output rounding plus fp32 noise); it is small for long contexts (1/sqrt(n)) and
 * largest for a few dominant weights.
 *
 * [int8 kv] With ctx kv_i8 set, a case runs both backends on 8-bit caches (int8, or [fp8 kv] E4M3: ctx
 * kv_q8) of the same bytes (written by the cpu backend's kv_write). The cpu reads q * scale in fp32;
 * the prefill kernel rounds q * scale to bf16 (relative error <= u) as it widens a tile; the decode
 * kernel reads q exactly (f16), rounds the q rows and P * v_scale to f16 (relative error 2^-11 < u)
 * and applies the K scale in fp32 -- within the same bound. That moves each V element by <= u |v| (the
 * P.V term again, so it is counted twice) and each score s_j by scale * sum_i q_i k_i e_i, |e_i| <= u,
 * beyond 7 u scale sqrt(sum_i q_i^2 k_i^2) with probability < 1e-10 (Hoeffding); a score error d
 * moves an output by at most 2 d sum_j p_j |v_j| / l (first order), which is added with the largest
 * d of the token's keys. */

typedef struct {
    int n_heads, n_kv, head_dim, block_size, window;
} attn_shape_t;

typedef struct {
    int n;
    int32_t *seq, *pos;
} attn_tokens_t;

static void tok_add(attn_tokens_t *tk, int s, int p)
{
    tk->seq = realloc(tk->seq, (size_t)(tk->n + 1) * 4);
    tk->pos = realloc(tk->pos, (size_t)(tk->n + 1) * 4);
    if (!tk->seq || !tk->pos) {
        fprintf(stderr, "FAIL: out of host memory\n");
        exit(1);
    }
    tk->seq[tk->n] = s;
    tk->pos[tk->n] = p;
    tk->n++;
}

/* The last `chunk` positions of sequence s of length len (chunk 1 = its decode token). */
static void tok_chunk(attn_tokens_t *tk, int s, int len, int chunk)
{
    for (int i = 0; i < chunk; i++) tok_add(tk, s, len - chunk + i);
}

/* The most tokens of one sequence (sits_attn_args_t.max_seq_tokens). */
static int attn_seq_tokens(const attn_tokens_t *tk, int n_seqs)
{
    int *cnt = calloc((size_t)n_seqs, sizeof *cnt), m = 0;
    for (int t = 0; cnt && t < tk->n; t++)
        if (tk->seq[t] >= 0 && tk->seq[t] < n_seqs && ++cnt[tk->seq[t]] > m) m = cnt[tk->seq[t]];
    free(cnt);
    return m;
}

static void tok_free(attn_tokens_t *tk)
{
    free(tk->seq);
    free(tk->pos);
    tk->seq = tk->pos = NULL;
    tk->n = 0;
}

/* The per-element term of the bound above: u * min(sum p|v|, 7 sqrt(sum p^2 v^2)) / l. */
static float *attn_pv_bound(const attn_shape_t *sh, int i8, int n_tok, const int32_t *seq, const int32_t *pos, const int32_t *bt,
                            int max_blocks, const float *q, int q_stride, const float *kc, const float *vc, double scale,
                            double softcap, const float *sinks)
{
    int hd = sh->head_dim, group = sh->n_heads / sh->n_kv, kv_dim = sh->n_kv * hd, bs = sh->block_size;
    float *bound = xmalloc((size_t)n_tok * sh->n_heads * hd * sizeof *bound);
    const double u = 1.0 / 256.0;
    int work = n_tok * sh->n_heads;
#pragma omp parallel for schedule(dynamic, 1)
    for (int wi = 0; wi < work; wi++) {
        int t = wi / sh->n_heads, h = wi % sh->n_heads, kvh = h / group;
        int p_end = pos[t], p_begin = sh->window > 0 && p_end - sh->window + 1 > 0 ? p_end - sh->window + 1 : 0;
        int n = p_end - p_begin + 1;
        double *s = malloc((size_t)n * sizeof *s), *a1 = calloc((size_t)hd, sizeof *a1), *a2 = calloc((size_t)hd, sizeof *a2);
        if (!s || !a1 || !a2) {
            fprintf(stderr, "FAIL: out of host memory\n");
            exit(1);
        }
        const float *qh = q + (size_t)t * q_stride + (size_t)h * hd;
        double m = -INFINITY, l = 0.0;
        for (int j = 0; j < n; j++) {
            int p = p_begin + j;
            size_t slot = (size_t)bt[(size_t)seq[t] * max_blocks + p / bs] * bs + (size_t)(p % bs);
            const float *k = kc + slot * kv_dim + (size_t)kvh * hd;
            double d = 0.0;
            for (int i = 0; i < hd; i++) d += (double)qh[i] * k[i];
            s[j] = d * scale;
            if (softcap > 0.0) s[j] = softcap * tanh(s[j] / softcap);   /* [families] */
            if (s[j] > m) m = s[j];
        }
        for (int j = 0; j < n; j++) {
            int p = p_begin + j;
            size_t slot = (size_t)bt[(size_t)seq[t] * max_blocks + p / bs] * bs + (size_t)(p % bs);
            const float *v = vc + slot * kv_dim + (size_t)kvh * hd;
            double pj = exp(s[j] - m);
            l += pj;
            for (int i = 0; i < hd; i++) {
                double a = pj * fabs((double)v[i]);
                a1[i] += a;
                a2[i] += a * a;
            }
        }
        if (sinks) l += exp((double)sinks[h] - m);   /* [gpt-oss] the sink's share of the denominator: every term / l */
        double d_max = 0.0; /* [int8 kv] the score term of the bound */
        for (int j = 0; i8 && j < n; j++) {
            int p = p_begin + j;
            size_t slot = (size_t)bt[(size_t)seq[t] * max_blocks + p / bs] * bs + (size_t)(p % bs);
            const float *k = kc + slot * kv_dim + (size_t)kvh * hd;
            double q2 = 0.0;
            for (int i = 0; i < hd; i++) q2 += (double)qh[i] * qh[i] * k[i] * k[i];
            double d = 7.0 * u * scale * sqrt(q2);
            if (d > d_max) d_max = d;
        }
        for (int i = 0; i < hd; i++) {
            double b = 7.0 * sqrt(a2[i]);
            double pv = u * (a1[i] < b ? a1[i] : b) / l;
            bound[(size_t)wi * hd + i] = (float)(i8 ? 2.0 * pv + 2.0 * d_max * a1[i] / l : pv);
        }
        free(s);
        free(a1);
        free(a2);
    }
    return bound;
}

/* [int8 kv] kc, vc [n_slots, n_kv * hd] -> 8-bit cache bytes k8, v8 of dtype dt (I8 or F8_E4M3;
 * n_slots / bs units) through the cpu backend's kv_write; kc, vc are then replaced by the values the
 * cpu reads back (q * scale). */
static void i8_fill(sits_backend_t *cpu, sits_dtype_t dt, float *kc, float *vc, int n_slots, int n_kv, int hd, int bs,
                    unsigned char *k8, unsigned char *v8)
{
    int kv_dim = n_kv * hd;
    size_t bytes = (size_t)(n_slots / bs) * sits_kv_i8_unit_bytes(bs, n_kv, hd), qb = sits_kv_i8_q_bytes(bs, n_kv, hd);
    sits_dtype_t saved = cpu->kv_dtype;
    TRY(sits_backend_set_kv_dtype(cpu, dt));
    float *qkv = xmalloc((size_t)n_slots * 2 * kv_dim * sizeof *qkv);
    int32_t *slot = xmalloc((size_t)n_slots * 4);
    for (int t = 0; t < n_slots; t++) {
        memcpy(qkv + (size_t)t * 2 * kv_dim, kc + (size_t)t * kv_dim, sizeof(float) * kv_dim);
        memcpy(qkv + (size_t)t * 2 * kv_dim + kv_dim, vc + (size_t)t * kv_dim, sizeof(float) * kv_dim);
        slot[t] = t;
    }
    void *d_qkv = dev_vals(cpu, SITS_DT_F32, qkv, (size_t)n_slots * 2 * kv_dim), *d_slot = dev_i32(cpu, slot, (size_t)n_slots);
    void *d_k = dev_poison(cpu, bytes), *d_v = dev_poison(cpu, bytes);
    TRY(cpu->ops->kv_write(cpu, d_k, d_v, d_qkv, n_slots, 2 * kv_dim, 0, kv_dim, kv_dim, hd, bs, d_slot));
    TRY(cpu->ops->sync(cpu));
    TRY(cpu->ops->download(cpu, k8, d_k, bytes));
    TRY(cpu->ops->download(cpu, v8, d_v, bytes));
    for (int t = 0; t < n_slots; t++)
        for (int h = 0; h < n_kv; h++) {
            size_t unit = (size_t)(t / bs) * sits_kv_i8_unit_bytes(bs, n_kv, hd), row = (size_t)(t % bs) * n_kv + h;
            float ks, vs;
            memcpy(&ks, k8 + unit + qb + row * 4, 4);
            memcpy(&vs, v8 + unit + qb + row * 4, 4);
            for (int i = 0; i < hd; i++) {
                unsigned char kq = k8[unit + row * hd + i], vq = v8[unit + row * hd + i];
                kc[(size_t)t * kv_dim + (size_t)h * hd + i] = (dt == SITS_DT_I8 ? (float)(int8_t)kq : sits_f8e4m3_to_f32(kq)) * ks;
                vc[(size_t)t * kv_dim + (size_t)h * hd + i] = (dt == SITS_DT_I8 ? (float)(int8_t)vq : sits_f8e4m3_to_f32(vq)) * vs;
            }
        }
    dev_free(cpu, d_qkv);
    dev_free(cpu, d_slot);
    dev_free(cpu, d_k);
    dev_free(cpu, d_v);
    free(qkv);
    free(slot);
    cpu->kv_dtype = saved;
}

/* [gpt-oss] Head h's attention sink in the cases with ctx attn_sinks: neighbouring heads differ (a kernel that reads
 * another head's sink, or another GQA row's, fails), a period of 11 (no group size divides it), values around the
 * scores' range (+-2, small ones) and a large +8 whose rows are mostly the sink's (their outputs shrink ~10-100x). */
static float attn_sink_of(int h)
{
    static const float v[11] = { 2.0f, -2.0f, 0.5f, 8.0f, -1.25f, 1.0f, -0.5f, 2.5f, -3.0f, 0.0f, 1.5f };
    return v[h % 11];
}

/* n_seqs sequences of lengths lens[] in a paged cache with shuffled block ids (and a few unused
 * blocks); the query tokens tk; q read from a fused qkv row. cpu vs cuda with the bound above.
 * [gpt-oss] With ctx attn_sinks, both backends get the sinks attn_sink_of (fp32 [n_heads]). */
static void attn_case(ctx_t *c, const char *label, const attn_shape_t *sh, int n_seqs, const int *lens, const attn_tokens_t *tk)
{
    char what[200];
    snprintf(what, sizeof what, "attention %s: h %d kv %d hd %d bs %d win %d, %d tokens", label, sh->n_heads, sh->n_kv,
             sh->head_dim, sh->block_size, sh->window, tk->n);
    if (c->attn_softcap > 0.0f || c->attn_scale > 0.0f)   /* [families] */
        snprintf(what + strlen(what), sizeof what - strlen(what), " softcap %g scale %g", c->attn_softcap, c->attn_scale);
    float *sinks = NULL;   /* [gpt-oss] */
    if (c->attn_sinks) {
        sinks = xmalloc((size_t)sh->n_heads * sizeof *sinks);
        for (int h = 0; h < sh->n_heads; h++) sinks[h] = attn_sink_of(h);
        snprintf(what + strlen(what), sizeof what - strlen(what), " sinks");
    }
    int bs = sh->block_size, max_blocks = 0, total_blocks = 0;
    for (int s = 0; s < n_seqs; s++) {
        int nb = (lens[s] + bs - 1) / bs;
        if (nb > max_blocks) max_blocks = nb;
        total_blocks += nb;
    }
    int n_blocks = total_blocks + 3;
    int *perm = xmalloc((size_t)n_blocks * sizeof *perm);
    for (int i = 0; i < n_blocks; i++) perm[i] = i;
    for (int i = n_blocks - 1; i > 0; i--) {
        int j = rand_int(c, 0, i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int32_t *bt = xmalloc((size_t)n_seqs * max_blocks * 4);
    for (int s = 0, next = 0; s < n_seqs; s++)
        for (int j = 0; j < max_blocks; j++) bt[s * max_blocks + j] = j < (lens[s] + bs - 1) / bs ? perm[next++] : -1;

    int n_tok = tk->n, hd = sh->head_dim, kv_dim = sh->n_kv * hd;
    int q_stride = (sh->n_heads + 2 * sh->n_kv) * hd;
    size_t cache_n = (size_t)n_blocks * bs * kv_dim, out_n = (size_t)n_tok * sh->n_heads * hd;
    float *q = rand_vec(c, (size_t)n_tok * q_stride, 0.0f, 3.0f); /* peaked softmax, not a plain mean */
    float *kc = rand_vec(c, cache_n, 0.0f, 1.0f), *vc = rand_vec(c, cache_n, 0.0f, 1.0f);
    unsigned char *i8k = NULL, *i8v = NULL; /* [int8 kv] the cache bytes both backends get */
    size_t i8_bytes = 0;
    sits_dtype_t saved_kv[N_BE] = { c->be[0]->kv_dtype, c->be[1]->kv_dtype };
    if (c->kv_i8) {
        snprintf(what + strlen(what), sizeof what - strlen(what), c->kv_q8 == SITS_DT_I8 ? " int8 kv" : " fp8 kv");
        i8_bytes = (size_t)n_blocks * sits_kv_i8_unit_bytes(bs, sh->n_kv, hd);
        i8k = xmalloc(i8_bytes);
        i8v = xmalloc(i8_bytes);
        i8_fill(c->be[0], c->kv_q8, kc, vc, n_blocks * bs, sh->n_kv, hd, bs, i8k, i8v);
        for (int b = 0; b < N_BE; b++) TRY(sits_backend_set_kv_dtype(c->be[b], c->kv_q8));
    }

    void *d_q[N_BE], *d_k[N_BE], *d_v[N_BE], *d_out[N_BE], *d_seq[N_BE], *d_pos[N_BE], *d_bt[N_BE], *d_sk[N_BE];
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        d_q[b] = dev_acts(be, q, (size_t)n_tok * q_stride);
        if (c->kv_i8) {
            TRY(be->ops->alloc(be, i8_bytes, &d_k[b]));
            TRY(be->ops->alloc(be, i8_bytes, &d_v[b]));
            TRY(be->ops->upload(be, d_k[b], i8k, i8_bytes));
            TRY(be->ops->upload(be, d_v[b], i8v, i8_bytes));
        } else {
            d_k[b] = dev_vals(be, be->kv_dtype, kc, cache_n);
            d_v[b] = dev_vals(be, be->kv_dtype, vc, cache_n);
        }
        d_seq[b] = dev_i32(be, tk->seq, (size_t)n_tok);
        d_pos[b] = dev_i32(be, tk->pos, (size_t)n_tok);
        d_bt[b] = dev_i32(be, bt, (size_t)n_seqs * max_blocks);
        d_out[b] = dev_poison(be, out_n * sits_dtype_size(be->act_dtype));
        d_sk[b] = sinks ? dev_vals(be, SITS_DT_F32, sinks, (size_t)sh->n_heads) : NULL;   /* [gpt-oss] */
        sits_attn_args_t a = {
            .n_tokens = n_tok, .seq = d_seq[b], .pos = d_pos[b], .block_tables = d_bt[b], .max_blocks = max_blocks,
            .block_size = bs, .n_heads = sh->n_heads, .n_kv_heads = sh->n_kv, .head_dim = hd, .window = sh->window,
            .scale = c->attn_scale > 0.0f ? c->attn_scale : 1.0f / sqrtf((float)hd), .softcap = c->attn_softcap,
            .max_seq_tokens = c->attn_seq_bound > 0 ? c->attn_seq_bound : attn_seq_tokens(tk, n_seqs),
            .sinks = d_sk[b],
        };
        TRY(be->ops->attention(be, d_out[b], d_q[b], q_stride, d_k[b], d_v[b], &a));
    }
    for (int b = 0; b < N_BE; b++) c->be[b]->kv_dtype = saved_kv[b];
    float *ref = host_f32(c->be[0], d_out[0], out_n), *got = host_f32(c->be[1], d_out[1], out_n);
    float *pv = attn_pv_bound(sh, c->kv_i8, n_tok, tk->seq, tk->pos, bt, max_blocks, q, q_stride, kc, vc,
                              c->attn_scale > 0.0f ? c->attn_scale : 1.0 / sqrt((double)hd), c->attn_softcap, sinks);
    const double atol = 2e-4, rtol = 8e-3;
    size_t bad = 0, worst = 0;
    double max_err = 0.0, max_ratio = 0.0;
    for (size_t i = 0; i < out_n; i++) {
        double r = ref[i], g = got[i], tol = atol + rtol * fabs(r) + pv[i];
        double err = isnan(r) || isnan(g) ? INFINITY : fabs(g - r);
        if (err > max_err || (isinf(err) && !isinf(max_err))) { max_err = err; worst = i; }
        if (err / tol > max_ratio) max_ratio = err / tol;
        if (!(err <= tol)) {
            if (bad < 8) {
                size_t th = i / hd;
                fprintf(stderr, "  mismatch %s: token %zu (seq %d pos %d) head %zu dim %zu: cpu %.8g cuda %.8g bound %.3g\n",
                        what, th / sh->n_heads, tk->seq[th / sh->n_heads], tk->pos[th / sh->n_heads], th % sh->n_heads,
                        i % hd, r, g, tol);
            }
            bad++;
        }
    }
    c->checks++;
    printf("%-4s %s n %zu max abs err %.3g (at %zu: cpu %.5g cuda %.5g), max err/bound %.3g [atol %.1g rtol %.1g + P.V term]\n",
           bad ? "FAIL" : "ok", what, out_n, max_err, worst, ref[worst], got[worst], max_ratio, atol, rtol);
    if (bad) {
        fprintf(stderr, "FAIL %s: %zu of %zu elements out of bounds\n", what, bad, out_n);
        c->failures++;
    }
    for (int b = 0; b < N_BE; b++) {
        void *bufs[] = { d_q[b], d_k[b], d_v[b], d_out[b], d_seq[b], d_pos[b], d_bt[b] };
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dev_free(c->be[b], bufs[i]);
        if (d_sk[b]) dev_free(c->be[b], d_sk[b]);
    }
    free(ref);
    free(got);
    free(pv);
    free(sinks);
    free(perm);
    free(bt);
    free(q);
    free(kc);
    free(vc);
    free(i8k);
    free(i8v);
}

/* The original mix: the last position of each sequence (decode), a chunk of the last sequence's
 * final `chunk` positions, and a few random positions. */
static void test_attention(ctx_t *c, int n_heads, int n_kv, int head_dim, int block_size, int window, int n_seqs,
                           const int *lens, int chunk)
{
    attn_shape_t sh = { n_heads, n_kv, head_dim, block_size, window };
    attn_tokens_t tk = { 0 };
    for (int s = 0; s < n_seqs; s++) tok_chunk(&tk, s, lens[s], 1);
    tok_chunk(&tk, n_seqs - 1, lens[n_seqs - 1], chunk);
    for (int i = 0; i < 4; i++) {
        int s = rand_int(c, 0, n_seqs);
        tok_add(&tk, s, rand_int(c, 0, lens[s]));
    }
    char label[64];
    snprintf(label, sizeof label, "mix of %d seqs + chunk %d", n_seqs, chunk);
    attn_case(c, label, &sh, n_seqs, lens, &tk);
    tok_free(&tk);
}

/* A decode batch: one token at the last position of each sequence. */
static void test_attn_decode(ctx_t *c, attn_shape_t sh, int n_seqs, const int *lens)
{
    attn_tokens_t tk = { 0 };
    for (int s = 0; s < n_seqs; s++) tok_chunk(&tk, s, lens[s], 1);
    char label[64];
    snprintf(label, sizeof label, "decode %d seqs (ctx %d..)", n_seqs, lens[0]);
    attn_case(c, label, &sh, n_seqs, lens, &tk);
    tok_free(&tk);
}

/* One sequence's prefill chunk of `chunk` tokens after a cached prefix of `prefix`. */
static void test_attn_prefill(ctx_t *c, attn_shape_t sh, int prefix, int chunk)
{
    attn_tokens_t tk = { 0 };
    int len = prefix + chunk;
    tok_chunk(&tk, 0, len, chunk);
    char label[64];
    snprintf(label, sizeof label, "prefill chunk %d after %d", chunk, prefix);
    attn_case(c, label, &sh, 1, &len, &tk);
    tok_free(&tk);
}

/* A mixed batch: decode tokens around two chunks (A: `chunk_a` of lens[0], B: all of lens[1]),
 * then random positions. Sequences 2.. decode. */
static void test_attn_mixed(ctx_t *c, attn_shape_t sh, int n_seqs, const int *lens, int chunk_a)
{
    attn_tokens_t tk = { 0 };
    int s = 2;
    for (int i = 0; i < 3 && s < n_seqs; i++, s++) tok_chunk(&tk, s, lens[s], 1);
    tok_chunk(&tk, 0, lens[0], chunk_a);
    for (int i = 0; i < 2 && s < n_seqs; i++, s++) tok_chunk(&tk, s, lens[s], 1);
    tok_chunk(&tk, 1, lens[1], lens[1]);
    for (; s < n_seqs; s++) tok_chunk(&tk, s, lens[s], 1);
    for (int i = 0; i < 5; i++) {
        int r = rand_int(c, 0, n_seqs);
        tok_add(&tk, r, rand_int(c, 0, lens[r]));
    }
    attn_case(c, "mixed batch", &sh, n_seqs, lens, &tk);
    tok_free(&tk);
}

/* Several short chunks back to back (tiles hold 2-4 sequences, some under the 16-row threshold)
 * plus decode tokens. */
static void test_attn_chunks(ctx_t *c, attn_shape_t sh, int n_chunks, int chunk, int n_dec)
{
    int n_seqs = n_chunks + n_dec;
    int *lens = xmalloc((size_t)n_seqs * sizeof *lens);
    attn_tokens_t tk = { 0 };
    for (int s = 0; s < n_seqs; s++) lens[s] = rand_int(c, s < n_chunks ? chunk : 1, 3000);
    for (int s = 0; s < n_seqs; s++) tok_chunk(&tk, s, lens[s], s < n_chunks ? chunk : 1);
    char label[64];
    snprintf(label, sizeof label, "%d chunks of %d + %d decodes", n_chunks, chunk, n_dec);
    attn_case(c, label, &sh, n_seqs, lens, &tk);
    tok_free(&tk);
    free(lens);
}

/* n tokens at random positions of a few sequences (prefill tiles with unordered rows). */
static void test_attn_random(ctx_t *c, attn_shape_t sh, int n_seqs, const int *lens, int n)
{
    attn_tokens_t tk = { 0 };
    for (int i = 0; i < n; i++) {
        int s = rand_int(c, 0, n_seqs);
        tok_add(&tk, s, rand_int(c, 0, lens[s]));
    }
    attn_case(c, "random positions", &sh, n_seqs, lens, &tk);
    tok_free(&tk);
}

/* [int8 kv] int8 (dt I8) or [fp8 kv] E4M3 (dt F8_E4M3) copies of a few cases above: the generic
 * kernel, decode (one and many splits), prefill with a cached prefix, a mixed batch, block sizes 8 /
 * 24 (units whose scales are padded). */
static void test_attention_i8(ctx_t *c, sits_dtype_t dt)
{
    c->kv_i8 = 1;
    c->kv_q8 = dt;
    {
        int lens[24] = { 1, 2, 63, 64, 65, 129, 5000 };
        for (int i = 7; i < 24; i++) lens[i] = rand_int(c, 1, 5001);
        test_attn_decode(c, (attn_shape_t){ 32, 8, 128, 16, 0 }, 24, lens);
        test_attn_decode(c, (attn_shape_t){ 8, 2, 64, 16, 333 }, 24, lens);
    }
    {   /* a decode step of 600 tokens (one each: max_seq_tokens 1, the decode kernel alone, ~9 items of (token, KV head)
         * a CTA of an H200), head dim 64 with a window, and a mixed batch whose 300 listed decode rows the decode kernel
         * takes after the prefill kernel */
        int many[600];
        for (int i = 0; i < 600; i++) many[i] = rand_int(c, 1, 701);
        test_attn_decode(c, (attn_shape_t){ 32, 8, 128, 16, 0 }, 600, many);
        test_attn_decode(c, (attn_shape_t){ 8, 2, 64, 16, 100 }, 600, many);
        many[0] = 700;
        many[1] = 260;
        test_attn_mixed(c, (attn_shape_t){ 32, 8, 128, 16, 0 }, 300, many, 300);
        c->attn_seq_bound = 1; /* a bound the call breaks (chunks of 300 and 260): the decode kernel takes every row, right */
        test_attn_mixed(c, (attn_shape_t){ 32, 8, 128, 16, 0 }, 300, many, 300);
        c->attn_seq_bound = 0;
    }
    {
        int one[] = { 5000 }, l2b[] = { 100, 777, 64 };
        test_attn_decode(c, (attn_shape_t){ 32, 8, 128, 16, 0 }, 1, one);
        test_attn_decode(c, (attn_shape_t){ 8, 2, 128, 24, 0 }, 3, l2b);
        test_attn_decode(c, (attn_shape_t){ 8, 1, 64, 8, 50 }, 3, l2b);
    }
    test_attn_prefill(c, (attn_shape_t){ 16, 2, 128, 16, 0 }, 0, 2048);
    test_attn_prefill(c, (attn_shape_t){ 8, 8, 128, 16, 0 }, 3000, 1000);
    test_attn_prefill(c, (attn_shape_t){ 8, 2, 64, 16, 300 }, 100, 777);
    test_attn_prefill(c, (attn_shape_t){ 8, 2, 128, 24, 0 }, 37, 200);
    {
        int lens[] = { 1500, 200, 1, 5000, 33, 2048, 700, 64 };
        test_attn_mixed(c, (attn_shape_t){ 32, 8, 128, 16, 0 }, 8, lens, 300);
    }
    test_attn_chunks(c, (attn_shape_t){ 8, 2, 128, 16, 0 }, 10, 20, 7);
    /* the generic kernel: head_dim 80 and 32 (the fixtures' sizes), odd block size */
    int l3[] = { 300, 1025 };
    test_attn_decode(c, (attn_shape_t){ 6, 1, 80, 16, 0 }, 2, l3);
    test_attn_prefill(c, (attn_shape_t){ 4, 2, 32, 5, 0 }, 10, 100);
    c->kv_i8 = 0;
}

/* [families] Gemma 2 attention: soft-capped scores (small caps, so that tanh bends these scores) with
 * a query_pre_attn_scalar scale, sliding windows; the tensor-core path (hd 64 / 128), the generic
 * kernel (hd 256, Gemma 2's size, and 32), and int8 caches. */
static void test_attention_softcap(ctx_t *c)
{
    int lens[8] = { 1, 9, 300, 4100, 64, 65, 1000, 17 };
    c->attn_softcap = 1.5f;
    c->attn_scale = 1.0f / sqrtf(224.0f);
    test_attn_decode(c, (attn_shape_t){ 8, 4, 256, 16, 0 }, 8, lens);
    test_attn_decode(c, (attn_shape_t){ 8, 4, 256, 16, 64 }, 8, lens);
    test_attn_prefill(c, (attn_shape_t){ 8, 4, 256, 16, 100 }, 30, 200);
    test_attn_decode(c, (attn_shape_t){ 16, 8, 128, 16, 0 }, 8, lens);
    test_attn_decode(c, (attn_shape_t){ 16, 8, 128, 16, 333 }, 8, lens);
    test_attn_prefill(c, (attn_shape_t){ 16, 8, 128, 16, 0 }, 500, 1000);
    test_attn_prefill(c, (attn_shape_t){ 8, 2, 64, 16, 300 }, 100, 777);
    int mixed[8] = { 700, 260, 300, 4100, 64, 65, 1000, 17 };   /* a chunk of 300 of sequence 0, all of 1 */
    test_attn_mixed(c, (attn_shape_t){ 8, 2, 128, 16, 8 }, 8, mixed, 300);
    c->attn_softcap = 0.7f;
    c->attn_scale = 0.0f;
    test_attn_prefill(c, (attn_shape_t){ 4, 2, 32, 5, 8 }, 10, 100);
    test_attn_decode(c, (attn_shape_t){ 4, 2, 32, 8, 0 }, 8, lens);
    static const sits_dtype_t q8[2] = { SITS_DT_I8, SITS_DT_F8_E4M3 };   /* [int8 kv] [fp8 kv] */
    for (int i = 0; i < 2; i++) {
        c->kv_i8 = 1;
        c->kv_q8 = q8[i];
        test_attn_decode(c, (attn_shape_t){ 16, 8, 128, 16, 333 }, 8, lens);
        test_attn_prefill(c, (attn_shape_t){ 8, 2, 64, 16, 0 }, 100, 777);
        test_attn_decode(c, (attn_shape_t){ 8, 4, 256, 16, 64 }, 8, lens);
    }
    c->kv_i8 = 0;
    c->attn_softcap = 0.0f;
}

/* [gpt-oss] Attention sinks (attn_sink_of: +-2, small, +8), gpt-oss's shape first -- head_dim 64, GQA 8 (64 / 8 heads,
 * and a TP shard's 16 / 2), sliding window 128 on contexts past it and full attention -- on every kernel that finishes
 * a row: the decode kernel with one partition (short contexts, the window) and with split-K merges (4100 / 5000
 * positions), a 300-token decode step (no splits), the prefill kernel (a chunk after a cached prefix) and its listed
 * rows (a mixed batch), [int8 kv] [fp8 kv] the 8-bit decode and prefill kernels; head_dim 128 for the warpgroup-MMA
 * prefill (by default at 64 heads x 1280 tokens: past att_prefill_mf's two waves; the SITS_ATT_PF_ROWS reruns the
 * rest), the generic kernel (head_dim 80 and 32), and sinks with soft-capping. */
static void test_attention_sinks(ctx_t *c)
{
    c->attn_sinks = 1;
    int lens[8] = { 1, 9, 127, 128, 129, 300, 4100, 1000 }, one[] = { 5000 };
    int mixed[8] = { 700, 260, 1, 129, 4100, 64, 1000, 17 };   /* a chunk of 300 of sequence 0, all of 1 */
    for (int w = 0; w <= 128; w += 128) {
        test_attn_decode(c, (attn_shape_t){ 64, 8, 64, 16, w }, 8, lens);
        test_attn_decode(c, (attn_shape_t){ 16, 2, 64, 16, w }, 8, lens);
        test_attn_decode(c, (attn_shape_t){ 16, 2, 64, 16, w }, 1, one);
        test_attn_prefill(c, (attn_shape_t){ 16, 2, 64, 16, w }, 300, 500);
        test_attn_prefill(c, (attn_shape_t){ 64, 8, 64, 16, w }, 0, 200);
        test_attn_mixed(c, (attn_shape_t){ 16, 2, 64, 16, w }, 8, mixed, 300);
    }
    {
        int many[300];
        for (int i = 0; i < 300; i++) many[i] = rand_int(c, 1, 1500);
        test_attn_decode(c, (attn_shape_t){ 16, 2, 64, 16, 128 }, 300, many);
    }
    test_attn_prefill(c, (attn_shape_t){ 32, 4, 128, 16, 128 }, 200, 700);
    test_attn_prefill(c, (attn_shape_t){ 64, 8, 128, 16, 0 }, 100, 1280);
    test_attn_decode(c, (attn_shape_t){ 32, 4, 128, 16, 0 }, 8, lens);
    int l3[] = { 300, 1025 };
    test_attn_decode(c, (attn_shape_t){ 8, 1, 80, 16, 128 }, 2, l3);   /* the generic kernel */
    test_attn_prefill(c, (attn_shape_t){ 4, 2, 32, 5, 0 }, 10, 100);
    static const sits_dtype_t q8[2] = { SITS_DT_I8, SITS_DT_F8_E4M3 };   /* [int8 kv] [fp8 kv] */
    for (int i = 0; i < 2; i++) {
        c->kv_i8 = 1;
        c->kv_q8 = q8[i];
        test_attn_decode(c, (attn_shape_t){ 64, 8, 64, 16, 128 }, 8, lens);
        test_attn_decode(c, (attn_shape_t){ 16, 2, 64, 16, 0 }, 1, one);
        test_attn_prefill(c, (attn_shape_t){ 16, 2, 64, 16, 128 }, 300, 500);
        test_attn_mixed(c, (attn_shape_t){ 16, 2, 64, 16, 0 }, 8, mixed, 300);
        test_attn_prefill(c, (attn_shape_t){ 32, 4, 128, 16, 0 }, 200, 700);
    }
    c->kv_i8 = 0;
    c->attn_softcap = 1.5f;   /* [families] both: the same entry point */
    test_attn_decode(c, (attn_shape_t){ 16, 2, 64, 16, 128 }, 8, lens);
    test_attn_prefill(c, (attn_shape_t){ 16, 2, 64, 16, 0 }, 100, 300);
    c->attn_softcap = 0.0f;
    c->attn_sinks = 0;
}

static float *host_raw_f32(sits_backend_t *be, const void *d, size_t n);   /* fp32 buffers (below) */

/* [families] scale (Gemma's embedding scale) and softcap (final logits, fp32 and bf16) in place. */
static void test_scale_softcap(ctx_t *c, size_t n, float s, float cap)
{
    char what[128];
    float *x = rand_vec(c, n, 0.0f, 20.0f);
    void *d_x[N_BE], *d_l[N_BE];
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        d_x[b] = dev_acts(be, x, n);
        TRY(be->ops->scale(be, d_x[b], n, s));
        d_l[b] = dev_vals(be, SITS_DT_F32, x, n);
        TRY(be->ops->softcap(be, d_l[b], n, 1, cap));
    }
    snprintf(what, sizeof what, "scale n %zu by %g", n, s);
    compare_bufs(c, what, d_x, n, TOL_ONE_ROUNDING, 0);
    /* fp32 logits: tanhf vs the device tanhf, a few ulps */
    float *ref = host_raw_f32(c->be[0], d_l[0], n), *got = host_raw_f32(c->be[1], d_l[1], n);
    snprintf(what, sizeof what, "softcap fp32 n %zu cap %g", n, cap);
    compare(c, what, ref, got, n, 1e-5, 1e-5, 0);
    free(ref);
    free(got);
    for (int b = 0; b < N_BE; b++) {
        dev_free(c->be[b], d_l[b]);
        d_l[b] = dev_acts(c->be[b], x, n);
        TRY(c->be[b]->ops->softcap(c->be[b], d_l[b], n, 0, cap));
    }
    snprintf(what, sizeof what, "softcap act n %zu cap %g", n, cap);
    compare_bufs(c, what, d_l, n, TOL_ONE_ROUNDING, 0);
    for (int b = 0; b < N_BE; b++) {
        dev_free(c->be[b], d_x[b]);
        dev_free(c->be[b], d_l[b]);
    }
    free(x);
}

static void test_attention_all(ctx_t *c)
{
    /* the original mixes (head_dim 80 / 256 / 512: the generic kernel) */
    int l1[] = { 1, 37, 1100 };
    test_attention(c, 8, 2, 128, 16, 0, 3, l1, 5);
    test_attention(c, 8, 2, 128, 16, 100, 3, l1, 5);
    int l2[] = { 2000, 5 };
    test_attention(c, 4, 4, 64, 32, 0, 2, l2, 3);
    int l3[] = { 300, 1025 };
    test_attention(c, 6, 1, 80, 16, 257, 2, l3, 4);
    int l4[] = { 70 };
    test_attention(c, 2, 1, 256, 8, 0, 1, l4, 7);
    int l5[] = { 17, 3 };
    test_attention(c, 2, 2, 512, 16, 1, 2, l5, 2); /* window 1: only the token itself */

    /* decode batches */
    {
        int lens[24] = { 1, 2, 63, 64, 65, 129, 5000 };
        for (int i = 7; i < 24; i++) lens[i] = rand_int(c, 1, 5001);
        test_attn_decode(c, (attn_shape_t){ 32, 8, 128, 16, 0 }, 24, lens);
        test_attn_decode(c, (attn_shape_t){ 32, 8, 128, 16, 1000 }, 24, lens);
    }
    {   /* [perf: kv before wait] the bounds of graph replays (15) and of verifications of k = 8 (9): a CTA's first loads stop
         * 15 / 9 keys before the token's position -- inside a tile, across a tile's edge (contexts 65 .. 78), before the
         * partition (1 .. 16) */
        int lens[12] = { 1, 9, 15, 16, 17, 64, 65, 70, 78, 129, 140, 2000 };
        c->attn_seq_bound = 15;
        test_attn_decode(c, (attn_shape_t){ 32, 8, 128, 16, 0 }, 12, lens);
        c->attn_seq_bound = 9;
        test_attn_decode(c, (attn_shape_t){ 16, 2, 64, 16, 0 }, 12, lens);
        c->attn_seq_bound = 0;
    }
    {   /* a decode step of 300 tokens (max_seq_tokens 1: the decode kernel alone, no prefill launch or list) */
        int many[300];
        for (int i = 0; i < 300; i++) many[i] = rand_int(c, 1, 1500);
        test_attn_decode(c, (attn_shape_t){ 32, 8, 128, 16, 0 }, 300, many);
    }
    {
        int one[] = { 5000 }, tiny[] = { 1 }, two[] = { 4097, 300 };
        test_attn_decode(c, (attn_shape_t){ 32, 8, 128, 16, 0 }, 1, one);   /* many splits */
        test_attn_decode(c, (attn_shape_t){ 32, 8, 128, 16, 0 }, 1, tiny);
        test_attn_decode(c, (attn_shape_t){ 32, 8, 128, 16, 1000 }, 2, two);
        test_attn_decode(c, (attn_shape_t){ 8, 8, 128, 16, 0 }, 1, one);     /* GQA 1 */
        test_attn_decode(c, (attn_shape_t){ 16, 2, 64, 32, 0 }, 1, one);     /* GQA 8, head_dim 64 */
    }
    {
        int lens[] = { 3000, 17, 1, 900 };
        test_attn_decode(c, (attn_shape_t){ 8, 8, 128, 16, 0 }, 4, lens);
        test_attn_decode(c, (attn_shape_t){ 8, 8, 128, 16, 256 }, 4, lens);
    }
    {
        int lens[30];
        for (int i = 0; i < 30; i++) lens[i] = rand_int(c, 1, 5001);
        test_attn_decode(c, (attn_shape_t){ 16, 2, 64, 32, 0 }, 30, lens);
        test_attn_decode(c, (attn_shape_t){ 8, 2, 64, 16, 333 }, 30, lens);
    }
    {
        int lens[] = { 1000, 5 }, l2b[] = { 100, 777, 64 };
        test_attn_decode(c, (attn_shape_t){ 24, 1, 128, 16, 0 }, 2, lens);   /* group 24: two chunks of 16 (8-bit KV: 3 of 8) */
        test_attn_decode(c, (attn_shape_t){ 12, 1, 64, 16, 0 }, 2, lens);    /* group 12: a partial chunk of 8 heads */
        test_attn_decode(c, (attn_shape_t){ 8, 2, 128, 24, 0 }, 3, l2b);     /* block size 24 */
        test_attn_decode(c, (attn_shape_t){ 8, 2, 128, 64, 0 }, 3, l2b);
        test_attn_decode(c, (attn_shape_t){ 8, 2, 64, 8, 50 }, 3, l2b);
    }

    /* prefill chunks */
    test_attn_prefill(c, (attn_shape_t){ 16, 2, 128, 16, 0 }, 0, 2048);      /* GQA 8 */
    test_attn_prefill(c, (attn_shape_t){ 8, 8, 128, 16, 0 }, 3000, 1000);    /* GQA 1, cached prefix */
    test_attn_prefill(c, (attn_shape_t){ 8, 2, 64, 16, 300 }, 100, 777);     /* GQA 4, head_dim 64, window */
    test_attn_prefill(c, (attn_shape_t){ 32, 8, 128, 16, 0 }, 4000, 1);
    test_attn_prefill(c, (attn_shape_t){ 32, 8, 128, 16, 0 }, 50, 17);
    test_attn_prefill(c, (attn_shape_t){ 8, 2, 128, 16, 0 }, 0, 64);         /* exactly one tile */
    test_attn_prefill(c, (attn_shape_t){ 8, 2, 64, 16, 0 }, 10, 65);         /* a last tile of one row */
    test_attn_prefill(c, (attn_shape_t){ 4, 1, 128, 8, 64 }, 0, 300);
    test_attn_prefill(c, (attn_shape_t){ 8, 2, 128, 24, 0 }, 37, 200);       /* block size 24 */
    test_attn_prefill(c, (attn_shape_t){ 4, 4, 64, 32, 1 }, 5, 130);         /* window 1 */

    /* mixed batches */
    {
        int lens[] = { 1500, 200, 1, 5000, 33, 2048, 700, 64 };
        test_attn_mixed(c, (attn_shape_t){ 32, 8, 128, 16, 0 }, 8, lens, 300);
        test_attn_mixed(c, (attn_shape_t){ 16, 4, 64, 16, 100 }, 8, lens, 300);
    }
    test_attn_chunks(c, (attn_shape_t){ 8, 2, 128, 16, 0 }, 10, 20, 7);
    test_attn_chunks(c, (attn_shape_t){ 8, 1, 64, 16, 0 }, 6, 40, 3);
    {
        int lens[] = { 900, 2500, 40 };
        test_attn_random(c, (attn_shape_t){ 8, 4, 64, 16, 0 }, 3, lens, 200);
        test_attn_random(c, (attn_shape_t){ 8, 2, 128, 16, 50 }, 3, lens, 200);
    }
}

/* gelu: [families] gelu_tanh_mul (GeGLU) instead */
static void test_silu_mul(ctx_t *c, int n, int dim, int gelu)
{
    char what[128];
    snprintf(what, sizeof what, "%s n %d dim %d", gelu ? "gelu_tanh_mul" : "silu_mul", n, dim);
    float *gu = rand_vec(c, (size_t)n * 2 * dim, 0.0f, 4.0f);
    void *d_gu[N_BE], *d_out[N_BE];
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        d_gu[b] = dev_acts(be, gu, (size_t)n * 2 * dim);
        d_out[b] = dev_poison(be, (size_t)n * dim * sits_dtype_size(be->act_dtype));
        if (gelu) TRY(be->ops->gelu_tanh_mul(be, d_out[b], d_gu[b], n, dim));
        else TRY(be->ops->silu_mul(be, d_out[b], d_gu[b], n, dim));
    }
    compare_bufs(c, what, d_out, (size_t)n * dim, TOL_ONE_ROUNDING, 0);
    for (int b = 0; b < N_BE; b++) {
        dev_free(c->be[b], d_gu[b]);
        dev_free(c->be[b], d_out[b]);
    }
    free(gu);
}

/* [gpt-oss] swiglu_oai (alpha 1.702, limit 7: gpt-oss's) on values spanning +-10, so both clamps bend about 30 % of
 * them (the gate's only above: a gate of -10 gives ~-4e-7); each row starts with the clamps' edges (gate / up at
 * exactly +-limit, just past it, -1 - limit: up + 1 = -6). */
static void test_swiglu_oai(ctx_t *c, int n, int dim)
{
    const float alpha = 1.702f, limit = 7.0f;
    char what[128];
    snprintf(what, sizeof what, "swiglu_oai n %d dim %d alpha %g limit %g", n, dim, alpha, limit);
    for (int b = 0; b < N_BE; b++)
        if (!c->be[b]->ops->swiglu_oai) {
            fprintf(stderr, "FAIL %s: the %s backend has no swiglu_oai\n", what, c->be[b]->ops->name);
            c->checks++;
            c->failures++;
            return;
        }
    float *gu = rand_vec(c, (size_t)n * 2 * dim, 0.0f, 10.0f);
    static const float edge[][2] = { { 7.0f, 7.0f }, { -7.0f, -7.0f }, { 7.03125f, -7.03125f }, { -10.0f, -8.0f },
                                     { 9.5f, 0.0f }, { 0.0f, 9.5f } };
    for (int t = 0; t < n; t++)
        for (int i = 0; i < (int)(sizeof edge / sizeof edge[0]) && i < dim; i++) {
            gu[(size_t)t * 2 * dim + i] = edge[i][0];
            gu[(size_t)t * 2 * dim + dim + i] = edge[i][1];
        }
    void *d_gu[N_BE], *d_out[N_BE];
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        d_gu[b] = dev_acts(be, gu, (size_t)n * 2 * dim);
        d_out[b] = dev_poison(be, (size_t)n * dim * sits_dtype_size(be->act_dtype));
        TRY(be->ops->swiglu_oai(be, d_out[b], d_gu[b], n, dim, alpha, limit));
    }
    compare_bufs(c, what, d_out, (size_t)n * dim, TOL_ONE_ROUNDING, 0);
    for (int b = 0; b < N_BE; b++) {
        dev_free(c->be[b], d_gu[b]);
        dev_free(c->be[b], d_out[b]);
    }
    free(gu);
}

/* [gpt-oss] 2880 (gpt-oss's intermediate size) and its TP shards (the vectorised kernel), odd sizes (one element a
 * thread), one token and many */
static void test_swiglu_oai_all(ctx_t *c)
{
    test_swiglu_oai(c, 5, 2880);
    test_swiglu_oai(c, 1, 2880);
    test_swiglu_oai(c, 33, 360);
    test_swiglu_oai(c, 7, 37);
    test_swiglu_oai(c, 3, 1);
    test_swiglu_oai(c, 300, 1441);
}

/* [gpt-oss] OP_PARITY_ONLY=gptoss: swiglu_oai, and the attention-sink cases with the default prefill kernels and again
 * with each forced one (64-row tiles are the default at these sizes but one: 128 rows, warpgroup MMAs with 64- and
 * 128-key tiles), then in index tile order */
static void test_gptoss_all(ctx_t *c)
{
    static const char *rows[] = { "128", "wg", "wg128" };
    test_swiglu_oai_all(c);
    test_attention_sinks(c);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        printf("-- attention sinks again, SITS_ATT_PF_ROWS=%s\n", rows[i]);
        setenv("SITS_ATT_PF_ROWS", rows[i], 1);
        test_attention_sinks(c);
    }
    unsetenv("SITS_ATT_PF_ROWS");
    printf("-- attention sinks again, prefill tiles in index order (SITS_ATT_PF_ORDER=index)\n");
    setenv("SITS_ATT_PF_ORDER", "index", 1);
    test_attention_sinks(c);
    unsetenv("SITS_ATT_PF_ORDER");
}

/* [families] rmsnorm_heads in place on a qkv-like buffer: only the n_heads heads from col0 change;
 * the columns around them must come back bit for bit (compared exactly as fp32 of the stored bf16). */
static void test_rmsnorm_heads(ctx_t *c, int n, int row_stride, int col0, int n_heads, int head_dim)
{
    char what[160];
    snprintf(what, sizeof what, "rmsnorm_heads n %d stride %d col0 %d heads %d hd %d", n, row_stride, col0, n_heads, head_dim);
    size_t nx = (size_t)n * row_stride;
    float *x = rand_vec(c, nx, 0.0f, 3.0f), *w = rand_vec(c, (size_t)head_dim, 1.0f, 0.5f);
    void *d_x[N_BE], *d_w[N_BE];
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        d_x[b] = dev_acts(be, x, nx);
        d_w[b] = dev_norm(be, w, (size_t)head_dim);
        TRY(be->ops->rmsnorm_heads(be, d_x[b], n, row_stride, col0, n_heads, head_dim, d_w[b], 1e-6f));
    }
    compare_bufs(c, what, d_x, nx, TOL_ONE_ROUNDING, 0);
    float *got = host_f32(c->be[1], d_x[1], nx);
    int untouched_bad = 0;
    for (int t = 0; t < n; t++)
        for (int j = 0; j < row_stride; j++) {
            if (j >= col0 && j < col0 + n_heads * head_dim) continue;
            size_t i = (size_t)t * row_stride + j;
            if (got[i] != x[i] && untouched_bad++ < 3)
                fprintf(stderr, "FAIL %s: row %d column %d outside the heads changed: %g -> %g\n", what, t, j, x[i], got[i]);
        }
    c->checks++;
    if (untouched_bad) c->failures++;
    free(got);
    for (int b = 0; b < N_BE; b++) {
        dev_free(c->be[b], d_x[b]);
        dev_free(c->be[b], d_w[b]);
    }
    free(x);
    free(w);
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

/* upload / download of `bytes` from page-locked host memory (host_alloc) and from malloc'ed memory:
 * the cuda backend sends a large pinned source in one DMA, the rest through its staging buffers;
 * both must round-trip the bytes exactly, and the source may be overwritten as soon as upload returns. */
static void test_upload_paths(ctx_t *c, size_t bytes)
{
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        for (int pinned = 0; pinned < 2; pinned++) {
            unsigned char *src = NULL, *back = xmalloc(bytes), *want = xmalloc(bytes);
            if (pinned && be->ops->host_alloc) TRY(be->ops->host_alloc(be, bytes, (void **)&src));
            else src = xmalloc(bytes);
            for (size_t i = 0; i < bytes; i++) want[i] = src[i] = (unsigned char)rng_next(c);
            void *d = NULL;
            TRY(be->ops->alloc(be, bytes, &d));
            TRY(be->ops->upload(be, d, src, bytes));
            memset(src, 0xa5, bytes);   /* upload has returned: the device copy must not change */
            TRY(be->ops->download(be, back, d, bytes));
            c->checks++;
            if (memcmp(back, want, bytes)) {
                c->failures++;
                fprintf(stderr, "FAIL upload %s of %zu bytes from %s memory\n", be->ops->name, bytes, pinned ? "pinned" : "pageable");
            }
            dev_free(be, d);
            if (pinned && be->ops->host_free) be->ops->host_free(be, src);
            else free(src);
            free(back);
            free(want);
        }
    }
}

/* [scale] upload_rows: rows of row_bytes from a src_pitch host array into a dst_pitch device buffer
 * (filled with 0x5a first); against the definition: each row's bytes land at r * dst_pitch, the bytes
 * between rows stay 0x5a. rows large enough to take several staging chunks on cuda. */
static void test_upload_rows(ctx_t *c, int rows, size_t row_bytes, size_t src_pitch, size_t dst_pitch)
{
    size_t dst_bytes = (size_t)rows * dst_pitch;
    unsigned char *src = xmalloc((size_t)rows * src_pitch), *want = xmalloc(dst_bytes), *back = xmalloc(dst_bytes);
    for (size_t i = 0; i < (size_t)rows * src_pitch; i++) src[i] = (unsigned char)rng_next(c);
    memset(want, 0x5a, dst_bytes);
    for (int r = 0; r < rows; r++) memcpy(want + (size_t)r * dst_pitch, src + (size_t)r * src_pitch, row_bytes);
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        if (!be->ops->upload_rows) continue;
        void *d = NULL;
        TRY(be->ops->alloc(be, dst_bytes, &d));
        unsigned char *fill = xmalloc(dst_bytes);
        memset(fill, 0x5a, dst_bytes);
        TRY(be->ops->upload(be, d, fill, dst_bytes));
        TRY(be->ops->upload_rows(be, d, dst_pitch, src, src_pitch, row_bytes, rows));
        TRY(be->ops->download(be, back, d, dst_bytes));
        c->checks++;
        if (memcmp(back, want, dst_bytes)) {
            c->failures++;
            fprintf(stderr, "FAIL upload_rows %s: %d rows of %zu bytes, pitches %zu -> %zu\n", be->ops->name, rows, row_bytes,
                    src_pitch, dst_pitch);
        } else {
            printf("ok   upload_rows %s: %d rows of %zu bytes, pitches %zu -> %zu\n", be->ops->name, rows, row_bytes, src_pitch,
                   dst_pitch);
        }
        free(fill);
        dev_free(be, d);
    }
    free(src);
    free(want);
    free(back);
}

/* [kv] kv_block_copy on both backends against the definition computed here: n_bufs cache buffers of
 * n_blocks blocks of seg random bytes, ids a shuffled subset (so blocks are out of order); the
 * gather must give flat[(i * n_bufs + j) * seg ..] = buf j's block ids[i], the scatter of a fresh
 * flat must change exactly those blocks. */
static void test_kv_block_copy(ctx_t *c, int n_bufs, int n_blocks, int n_ids, size_t seg)
{
    char what[128];
    size_t buf_bytes = (size_t)n_blocks * seg, flat_bytes = (size_t)n_ids * n_bufs * seg;
    unsigned char *cache = xmalloc(buf_bytes * n_bufs), *flat_in = xmalloc(flat_bytes), *want = xmalloc(flat_bytes);
    unsigned char *cache_want = xmalloc(buf_bytes * n_bufs), *got = xmalloc(buf_bytes * n_bufs > flat_bytes ? buf_bytes * n_bufs : flat_bytes);
    int32_t *ids = xmalloc(sizeof(int32_t) * (size_t)n_blocks);
    for (size_t i = 0; i < buf_bytes * n_bufs; i++) cache[i] = (unsigned char)rng_next(c);
    for (size_t i = 0; i < flat_bytes; i++) flat_in[i] = (unsigned char)rng_next(c);
    for (int i = 0; i < n_blocks; i++) ids[i] = i;
    for (int i = n_blocks - 1; i > 0; i--) { int k = rand_int(c, 0, i + 1), t = ids[i]; ids[i] = ids[k]; ids[k] = t; }
    memcpy(cache_want, cache, buf_bytes * n_bufs);
    for (int i = 0; i < n_ids; i++)
        for (int j = 0; j < n_bufs; j++) {
            size_t f = ((size_t)i * n_bufs + j) * seg, b = (size_t)j * buf_bytes + (size_t)ids[i] * seg;
            memcpy(want + f, cache + b, seg);
            memcpy(cache_want + b, flat_in + f, seg);
        }
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        void *bufs_h[16], **bufs_d = NULL, *flat = NULL;
        int32_t *ids_d = dev_i32(be, ids, (size_t)n_ids);
        for (int j = 0; j < n_bufs; j++) {
            TRY(be->ops->alloc(be, buf_bytes, &bufs_h[j]));
            TRY(be->ops->upload(be, bufs_h[j], cache + (size_t)j * buf_bytes, buf_bytes));
        }
        TRY(be->ops->alloc(be, sizeof(void *) * n_bufs, (void **)&bufs_d));
        TRY(be->ops->upload(be, bufs_d, bufs_h, sizeof(void *) * n_bufs));
        TRY(be->ops->alloc(be, flat_bytes, &flat));
        TRY(be->ops->kv_block_copy(be, flat, bufs_d, n_bufs, ids_d, n_ids, seg, 0));
        TRY(be->ops->download(be, got, flat, flat_bytes));
        snprintf(what, sizeof what, "kv_block_copy gather %s: %d ids x %d buffers x %zu bytes", be->ops->name, n_ids, n_bufs, seg);
        c->checks++;
        if (memcmp(got, want, flat_bytes)) { c->failures++; fprintf(stderr, "FAIL %s\n", what); }
        TRY(be->ops->upload(be, flat, flat_in, flat_bytes));
        TRY(be->ops->kv_block_copy(be, flat, bufs_d, n_bufs, ids_d, n_ids, seg, 1));
        for (int j = 0; j < n_bufs; j++) TRY(be->ops->download(be, got + (size_t)j * buf_bytes, bufs_h[j], buf_bytes));
        snprintf(what, sizeof what, "kv_block_copy scatter %s: %d ids x %d buffers x %zu bytes", be->ops->name, n_ids, n_bufs, seg);
        c->checks++;
        if (memcmp(got, cache_want, buf_bytes * n_bufs)) { c->failures++; fprintf(stderr, "FAIL %s\n", what); }
        for (int j = 0; j < n_bufs; j++) dev_free(be, bufs_h[j]);
        dev_free(be, bufs_d);
        dev_free(be, flat);
        dev_free(be, ids_d);
    }
    free(cache); free(flat_in); free(want); free(cache_want); free(got); free(ids);
}

/* ---- [perf] fp32 residual, fp32 logits, device sampling, CUDA graphs ---------------------------- */

/* n fp32 values of a buffer as stored (no dtype conversion). */
static float *host_raw_f32(sits_backend_t *be, const void *d, size_t n)
{
    float *h = xmalloc(n * sizeof *h);
    TRY(be->ops->sync(be));
    TRY(be->ops->download(be, h, d, n * sizeof *h));
    return h;
}

/* Values that bf16 cannot hold (a bf16 value plus a small odd fp32 part). */
static float *rand_vec_f32(ctx_t *c, size_t n, float scale)
{
    float *v = rand_vec(c, n, 0.0f, scale);
    for (size_t i = 0; i < n; i++) v[i] += scale * 1e-3f * (float)((rng_next(c) >> 40) % 977) / 977.0f;
    return v;
}

static int have_perf_slots(ctx_t *c, const char *what)
{
    for (int b = 0; b < N_BE; b++) {
        const sits_backend_ops_t *o = c->be[b]->ops;
        if (!o->add_rmsnorm_f32res || !o->matmul_f32out || !o->sample_reduce) {
            fprintf(stderr, "FAIL %s: the %s backend lacks an optional [perf] slot\n", what, o->name);
            c->failures++;
            return 0;
        }
    }
    return 1;
}

/* residual (fp32) += x (act dtype); out = rmsnorm(residual) * w. The residual must come back bit for
 * bit equal to the cpu's fp32 sum (no bf16 rounding anywhere), out within one bf16 rounding. */
static void test_add_rmsnorm_f32res(ctx_t *c, int n, int dim, int repeats)
{
    char what[128], w2[160];
    snprintf(what, sizeof what, "add_rmsnorm_f32res n %d dim %d x%d", n, dim, repeats);
    if (!have_perf_slots(c, what)) return;
    size_t nd = (size_t)n * dim;
    float *res = rand_vec_f32(c, nd, 2.0f), *w = rand_vec(c, (size_t)dim, 1.0f, 0.5f);
    const float eps = 1e-5f;
    void *d_x[N_BE], *d_res[N_BE], *d_w[N_BE], *d_out[N_BE];
    float *xs[4];
    for (int r = 0; r < repeats; r++) xs[r] = rand_vec(c, nd, 0.0f, 1.0f);
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        d_w[b] = dev_norm(be, w, (size_t)dim);
        d_res[b] = dev_vals(be, SITS_DT_F32, res, nd);
        d_out[b] = dev_poison(be, nd * sits_dtype_size(be->act_dtype));
        d_x[b] = NULL;
        for (int r = 0; r < repeats; r++) { /* the residual accumulates over sublayers */
            if (d_x[b]) dev_free(be, d_x[b]);
            d_x[b] = dev_acts(be, xs[r], nd);
            TRY(be->ops->add_rmsnorm_f32res(be, d_out[b], d_res[b], d_x[b], d_w[b], n, dim, eps));
        }
    }
    float *r0 = host_raw_f32(c->be[0], d_res[0], nd), *r1 = host_raw_f32(c->be[1], d_res[1], nd);
    snprintf(w2, sizeof w2, "%s (fp32 residual, exact)", what);
    compare(c, w2, r0, r1, nd, TOL_EXACT, 0);
    free(r0);
    free(r1);
    compare_bufs(c, what, d_out, nd, TOL_ONE_ROUNDING, 0);
    for (int b = 0; b < N_BE; b++) {
        dev_free(c->be[b], d_x[b]);
        dev_free(c->be[b], d_res[b]);
        dev_free(c->be[b], d_w[b]);
        dev_free(c->be[b], d_out[b]);
    }
    for (int r = 0; r < repeats; r++) free(xs[r]);
    free(res);
    free(w);
}

/* y fp32 = x . w^T: only the summation order differs from the cpu; the bound (1e-4 + 5e-4 |y|,
 * |y| ~ 0.3) is below a typical bf16 rounding of y (up to 2^-9 |y|), so most elements of a bf16
 * output would fail it. */
static void test_matmul_f32out(ctx_t *c, int n, int in, int out)
{
    char what[128];
    snprintf(what, sizeof what, "matmul_f32out n %d in %d out %d", n, in, out);
    if (!have_perf_slots(c, what)) return;
    float *x = rand_vec(c, (size_t)n * in, 0.0f, 1.0f);
    float *w = rand_vec(c, (size_t)out * in, 0.0f, 1.0f / sqrtf((float)in));
    void *d_x[N_BE], *d_w[N_BE], *d_y[N_BE];
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        d_x[b] = dev_acts(be, x, (size_t)n * in);
        d_w[b] = dev_weight(be, w, out, in);
        d_y[b] = dev_poison(be, (size_t)n * out * sizeof(float));
        TRY(be->ops->matmul_f32out(be, d_y[b], d_x[b], d_w[b], NULL, n, in, out));
    }
    float *ref = host_raw_f32(c->be[0], d_y[0], (size_t)n * out), *got = host_raw_f32(c->be[1], d_y[1], (size_t)n * out);
    compare(c, what, ref, got, (size_t)n * out, 1e-4, 5e-4, 0);
    free(ref);
    free(got);
    for (int b = 0; b < N_BE; b++) {
        dev_free(c->be[b], d_x[b]);
        dev_free(c->be[b], d_w[b]);
        dev_free(c->be[b], d_y[b]);
    }
    free(x);
    free(w);
}

enum { PAT_RANDOM, PAT_TIES, PAT_SIGNED_ZERO, PAT_FLAT, PAT_NEG_INF };
static const char *pat_name[] = { "random", "ties", "signed-zeros", "flat", "-inf" };

static void sample_logits(ctx_t *c, float *row, int v, int pat)
{
    for (int i = 0; i < v; i++) {
        double u = (double)(rng_next(c) >> 11) / 9007199254740992.0;
        switch (pat) {
        case PAT_RANDOM: row[i] = (float)(12.0 * u - 6.0) + (i % 97 == 0 ? 9.0f : 0.0f); break;
        case PAT_TIES: row[i] = (float)((int)(u * 7.0)) * 0.5f; break;          /* 7 distinct values */
        case PAT_SIGNED_ZERO: row[i] = u < 0.3 ? 0.0f : u < 0.6 ? -0.0f : (float)(-u); break;
        case PAT_FLAT: row[i] = 0.25f; break;
        default: row[i] = u < 0.95 ? -INFINITY : (float)(u * 3.0); break;
        }
    }
}

static int cand_order(const void *a_, const void *b_)
{
    const sits_sample_cand_t *a = a_, *b = b_;
    if (a->logit != b->logit) return a->logit > b->logit ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

static int same_f32(float a, float b) { return memcmp(&a, &b, sizeof a) == 0 || (a == b && a == 0.0f) ; }

/* n rows of v_count logits (ids from v_start), each row's mode = (row + mode0) % 4; c candidates.
 * Compares the records field by field: best exactly (value bits and id), n, lse within 1e-6
 * relative (double sums in another order), candidates as sorted lists exactly. */
static void test_sample_reduce(ctx_t *c, int n, int v_start, int v_count, int cands, int pat, int mode0)
{
    char what[160];
    snprintf(what, sizeof what, "sample_reduce n %d vocab [%d,+%d) c %d %s modes %d..", n, v_start, v_count, cands,
             pat_name[pat], mode0);
    if (!have_perf_slots(c, what)) return;
    size_t nv = (size_t)n * v_count, rec = SITS_SAMPLE_REC_BYTES(cands), bytes = rec * (size_t)n;
    float *logits = xmalloc((nv ? nv : 1) * sizeof *logits);
    for (int s = 0; s < n; s++) sample_logits(c, logits + (size_t)s * v_count, v_count, pat);
    sits_sample_row_t *rows = calloc((size_t)n, sizeof *rows);
    const float temps[] = { 1.0f, 0.7f, 1.3f, 0.05f };
    for (int s = 0; s < n; s++) {
        rows[s].mode = (s + mode0) % 4;
        rows[s].temperature = rows[s].mode == SITS_SAMPLE_GREEDY ? 0.0f : temps[s % 4];
        rows[s].inv_temp = rows[s].mode == SITS_SAMPLE_GREEDY ? 0.0f : 1.0f / rows[s].temperature;
        rows[s].seed = 0x1234567ull * (uint64_t)(s + 1) + (uint64_t)pat;
        rows[s].step = (uint64_t)(s * 7 + 3);
    }
    void *d_l[N_BE], *d_rows[N_BE], *d_rec[N_BE];
    unsigned char *h_rec[N_BE];
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        TRY(be->ops->alloc(be, (nv ? nv : 1) * sizeof(float), &d_l[b]));
        if (nv) TRY(be->ops->upload(be, d_l[b], logits, nv * sizeof(float)));
        TRY(be->ops->alloc(be, sizeof *rows * (size_t)n, &d_rows[b]));
        TRY(be->ops->upload(be, d_rows[b], rows, sizeof *rows * (size_t)n));
        d_rec[b] = dev_poison(be, bytes);
        TRY(be->ops->sample_reduce(be, d_rec[b], d_l[b], n, v_start, v_count, d_rows[b], cands));
        h_rec[b] = xmalloc(bytes);
        TRY(be->ops->sync(be));
        TRY(be->ops->download(be, h_rec[b], d_rec[b], bytes));
    }
    int bad = 0;
    double max_lse_err = 0.0;
    sits_sample_cand_t *ca = xmalloc(sizeof *ca * (size_t)cands), *cb = xmalloc(sizeof *cb * (size_t)cands);
    for (int s = 0; s < n; s++) {
        const sits_sample_rec_t *ra = (const sits_sample_rec_t *)(h_rec[0] + rec * s), *rb = (const sits_sample_rec_t *)(h_rec[1] + rec * s);
        char why[200] = "";
        if (ra->n != rb->n) snprintf(why, sizeof why, "n: cpu %d cuda %d", ra->n, rb->n);
        else if (ra->best.id != rb->best.id || !same_f32(ra->best.logit, rb->best.logit))
            snprintf(why, sizeof why, "best: cpu %d (%.9g) cuda %d (%.9g)", ra->best.id, ra->best.logit, rb->best.id,
                     rb->best.logit);
        else if (isinf(ra->lse) || isinf(rb->lse) ? !same_f32(ra->lse, rb->lse)
                                                   : fabs(ra->lse - rb->lse) > 1e-6 * fabs(ra->lse) + 1e-6)
            snprintf(why, sizeof why, "lse: cpu %.9g cuda %.9g", ra->lse, rb->lse);
        else if (ra->n > 0) {
            if (!isinf(ra->lse) && fabs(ra->lse - rb->lse) > max_lse_err) max_lse_err = fabs(ra->lse - rb->lse);
            int m = ra->n > cands ? cands : ra->n;
            memcpy(ca, ra + 1, sizeof *ca * (size_t)m);
            memcpy(cb, rb + 1, sizeof *cb * (size_t)m);
            qsort(ca, (size_t)m, sizeof *ca, cand_order);
            qsort(cb, (size_t)m, sizeof *cb, cand_order);
            for (int i = 0; i < m; i++)
                if (ca[i].id != cb[i].id || !same_f32(ca[i].logit, cb[i].logit)) {
                    snprintf(why, sizeof why, "candidate %d of %d (sorted): cpu id %d (%.9g) cuda id %d (%.9g)", i, m, ca[i].id,
                             ca[i].logit, cb[i].id, cb[i].logit);
                    break;
                }
        }
        if (why[0]) {
            if (bad < 8) fprintf(stderr, "  mismatch %s row %d (mode %d): %s\n", what, s, rows[s].mode, why);
            bad++;
        }
    }
    c->checks++;
    printf("%-4s %-58s rows %-4d max lse err %.3g\n", bad ? "FAIL" : "ok", what, n, max_lse_err);
    if (bad) {
        fprintf(stderr, "FAIL %s: %d of %d records differ\n", what, bad, n);
        c->failures++;
    }
    for (int b = 0; b < N_BE; b++) {
        dev_free(c->be[b], d_l[b]);
        dev_free(c->be[b], d_rows[b]);
        dev_free(c->be[b], d_rec[b]);
        free(h_rec[b]);
    }
    free(ca);
    free(cb);
    free(rows);
    free(logits);
}

/* The device port of the RNG: Gumbel-max over constant logits picks argmax_i u_i, so the best id
 * and its score expose any difference in the hash or the double log. Many (seed, step) pairs. */
static void test_sample_rng(ctx_t *c, int n, int v_start, int v_count)
{
    char what[128];
    snprintf(what, sizeof what, "sample_reduce gumbel rng n %d vocab [%d,+%d)", n, v_start, v_count);
    if (!have_perf_slots(c, what)) return;
    size_t nv = (size_t)n * v_count, rec = SITS_SAMPLE_REC_BYTES(1);
    float *logits = xmalloc(nv * sizeof *logits);
    for (size_t i = 0; i < nv; i++) logits[i] = 1.5f;
    sits_sample_row_t *rows = calloc((size_t)n, sizeof *rows);
    for (int s = 0; s < n; s++) {
        rows[s].mode = SITS_SAMPLE_GUMBEL;
        rows[s].temperature = 0.9f;
        rows[s].inv_temp = 1.0f / 0.9f;
        rows[s].seed = s % 3 == 0 ? (uint64_t)s : rng_next(c);
        rows[s].step = s % 5 == 0 ? UINT64_MAX - (uint64_t)s : rng_next(c) >> (s % 64);
    }
    unsigned char *h[N_BE];
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        void *d_l, *d_rows, *d_rec;
        TRY(be->ops->alloc(be, nv * sizeof(float), &d_l));
        TRY(be->ops->upload(be, d_l, logits, nv * sizeof(float)));
        TRY(be->ops->alloc(be, sizeof *rows * (size_t)n, &d_rows));
        TRY(be->ops->upload(be, d_rows, rows, sizeof *rows * (size_t)n));
        d_rec = dev_poison(be, rec * (size_t)n);
        TRY(be->ops->sample_reduce(be, d_rec, d_l, n, v_start, v_count, d_rows, 1));
        h[b] = xmalloc(rec * (size_t)n);
        TRY(be->ops->sync(be));
        TRY(be->ops->download(be, h[b], d_rec, rec * (size_t)n));
        dev_free(be, d_l);
        dev_free(be, d_rows);
        dev_free(be, d_rec);
    }
    int bad = 0;
    for (int s = 0; s < n; s++) {
        const sits_sample_rec_t *ra = (const sits_sample_rec_t *)(h[0] + rec * s), *rb = (const sits_sample_rec_t *)(h[1] + rec * s);
        if (ra->best.id != rb->best.id || !same_f32(ra->best.logit, rb->best.logit)) {
            if (bad < 8)
                fprintf(stderr, "  mismatch %s row %d (seed %llu step %llu): cpu %d (%.9g) cuda %d (%.9g)\n", what, s,
                        (unsigned long long)rows[s].seed, (unsigned long long)rows[s].step, ra->best.id, ra->best.logit,
                        rb->best.id, rb->best.logit);
            bad++;
        }
    }
    c->checks++;
    printf("%-4s %-58s rows %d\n", bad ? "FAIL" : "ok", what, n);
    if (bad) {
        fprintf(stderr, "FAIL %s: %d of %d rows differ (the device RNG port is not bit-exact)\n", what, bad, n);
        c->failures++;
    }
    free(h[0]);
    free(h[1]);
    free(rows);
    free(logits);
}

/* CUDA graphs (cuda only; the cpu backend has no graph slots): record add_rmsnorm_f32res +
 * matmul_f32out once, replay it three times with new x uploaded in between, and compare each
 * replay with the cpu running the same ops eagerly; then check that an upload during a capture is
 * refused and that the stream works after graph_end. */
static void test_graph(ctx_t *c, int n, int dim, int out)
{
    char what[128];
    snprintf(what, sizeof what, "graph replay n %d dim %d out %d", n, dim, out);
    sits_backend_t *cpu = c->be[0], *gpu = c->be[1];
    if (cpu->ops->graph_begin) {
        fprintf(stderr, "FAIL %s: the cpu backend claims graph support\n", what);
        c->failures++;
    }
    if (!gpu->ops->graph_begin || !gpu->ops->graph_end || !gpu->ops->graph_launch || !gpu->ops->graph_destroy ||
        !have_perf_slots(c, what)) {
        fprintf(stderr, "FAIL %s: the cuda backend lacks graph slots\n", what);
        c->failures++;
        return;
    }
    size_t nd = (size_t)n * dim;
    float *res = rand_vec_f32(c, nd, 1.0f), *w = rand_vec(c, (size_t)dim, 1.0f, 0.5f);
    float *wm = rand_vec(c, (size_t)out * dim, 0.0f, 1.0f / sqrtf((float)dim));
    void *d_x[N_BE], *d_res[N_BE], *d_w[N_BE], *d_wm[N_BE], *d_h[N_BE], *d_y[N_BE];
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        TRY(be->ops->alloc(be, nd * sits_dtype_size(be->act_dtype), &d_x[b]));
        d_res[b] = dev_vals(be, SITS_DT_F32, res, nd);
        d_w[b] = dev_norm(be, w, (size_t)dim);
        d_wm[b] = dev_weight(be, wm, out, dim);
        d_h[b] = dev_poison(be, nd * sits_dtype_size(be->act_dtype));
        d_y[b] = dev_poison(be, (size_t)n * out * sizeof(float));
    }
    /* warm-up outside the capture, as the engine does (builds the GEMM plan, loads the kernels):
     * x = 0 leaves the residual as it is */
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        TRY(be->ops->memset0(be, d_x[b], nd * sits_dtype_size(be->act_dtype)));
        TRY(be->ops->add_rmsnorm_f32res(be, d_h[b], d_res[b], d_x[b], d_w[b], n, dim, 1e-5f));
        TRY(be->ops->matmul_f32out(be, d_y[b], d_h[b], d_wm[b], NULL, n, dim, out));
        TRY(be->ops->sync(be));
    }
    void *g = NULL;
    TRY(gpu->ops->graph_begin(gpu));
    sits_status_t s1 = gpu->ops->add_rmsnorm_f32res(gpu, d_h[1], d_res[1], d_x[1], d_w[1], n, dim, 1e-5f);
    sits_status_t s2 = gpu->ops->matmul_f32out(gpu, d_y[1], d_h[1], d_wm[1], NULL, n, dim, out);
    sits_status_t s3 = gpu->ops->graph_end(gpu, &g);
    if (s1 != SITS_OK || s2 != SITS_OK || s3 != SITS_OK) {
        fprintf(stderr, "FAIL %s: capture: add_rmsnorm_f32res %s, matmul_f32out %s, graph_end %s\n", what, sits_status_str(s1),
                sits_status_str(s2), sits_status_str(s3));
        c->failures++;
    } else {
        for (int it = 0; it < 3; it++) {
            float *x = rand_vec(c, nd, 0.0f, 1.0f);
            for (int b = 0; b < N_BE; b++) {
                sits_backend_t *be = c->be[b]; /* new contents at the captured address */
                if (be->act_dtype == SITS_DT_BF16) {
                    uint16_t *h16 = xmalloc(nd * 2);
                    for (size_t i = 0; i < nd; i++) h16[i] = sits_f32_to_bf16(x[i]);
                    TRY(be->ops->upload(be, d_x[b], h16, nd * 2));
                    free(h16);
                } else {
                    TRY(be->ops->upload(be, d_x[b], x, nd * sizeof(float)));
                }
            }
            TRY(cpu->ops->add_rmsnorm_f32res(cpu, d_h[0], d_res[0], d_x[0], d_w[0], n, dim, 1e-5f));
            TRY(cpu->ops->matmul_f32out(cpu, d_y[0], d_h[0], d_wm[0], NULL, n, dim, out));
            TRY(gpu->ops->graph_launch(gpu, g));
            char w2[160];
            float *r0 = host_raw_f32(cpu, d_res[0], nd), *r1 = host_raw_f32(gpu, d_res[1], nd);
            snprintf(w2, sizeof w2, "%s replay %d (fp32 residual, exact)", what, it);
            compare(c, w2, r0, r1, nd, TOL_EXACT, 0);
            free(r0);
            free(r1);
            /* y = h . wm^T where the GPU's h is rounded to bf16 (the CPU's is fp32): each of the dim
             * products carries an independent relative error of up to 2^-9, so y's error has a standard
             * deviation of about 2^-9 * sqrt(sum_j (h_j wm_ij)^2) ~ 2^-9 * 1.1 here (h ~ unit rms times
             * w ~ N(1, 0.5); wm ~ N(0, 1/dim)), independent of dim. 6 sigma over n*out outputs: 0.013.
             * (Measured on an H200: max 0.004 at dim 4096.) */
            float *y0 = host_raw_f32(cpu, d_y[0], (size_t)n * out), *y1 = host_raw_f32(gpu, d_y[1], (size_t)n * out);
            snprintf(w2, sizeof w2, "%s replay %d (y)", what, it);
            compare(c, w2, y0, y1, (size_t)n * out, 6.0 * 1.1 / 512.0, 1e-2, 0);
            free(y0);
            free(y1);
            free(x);
        }
        gpu->ops->graph_destroy(gpu, g);
    }
    /* a wait inside a capture is refused; the stream is usable after graph_end */
    g = NULL;
    TRY(gpu->ops->graph_begin(gpu));
    float one = 1.0f;
    sits_status_t su = gpu->ops->upload(gpu, d_y[1], &one, sizeof one);
    sits_status_t se = gpu->ops->graph_end(gpu, &g);
    if (g) gpu->ops->graph_destroy(gpu, g);
    c->checks++;
    if (su == SITS_OK) {
        fprintf(stderr, "FAIL %s: upload during a capture was accepted (graph_end: %s)\n", what, sits_status_str(se));
        c->failures++;
    }
    TRY(gpu->ops->memset0(gpu, d_y[1], sizeof(float)));
    float z = -1.0f;
    TRY(gpu->ops->sync(gpu));
    TRY(gpu->ops->download(gpu, &z, d_y[1], sizeof z));
    if (z != 0.0f) {
        fprintf(stderr, "FAIL %s: the stream does not work after an aborted capture (got %g)\n", what, z);
        c->failures++;
    }
    printf("%-4s %-58s (refused upload in capture: %s)\n", su != SITS_OK && z == 0.0f ? "ok" : "FAIL", "graph capture guard",
           sits_status_str(su));
    for (int b = 0; b < N_BE; b++) {
        void *bufs[] = { d_x[b], d_res[b], d_w[b], d_wm[b], d_h[b], d_y[b] };
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dev_free(c->be[b], bufs[i]);
    }
    free(res);
    free(w);
    free(wm);
}

/* [structured output] logit_mask: random masks over the whole vocabulary on a shard [v_start, +v_count) of
 * n rows, masks on a subset of the rows (the others untouched); results must be identical bits. */
static void test_logit_mask(ctx_t *c, int n, int v_start, int v_count, int vocab, int n_masks)
{
    char what[128];
    snprintf(what, sizeof what, "logit_mask n %d vocab [%d,+%d) of %d, %d masks", n, v_start, v_count, vocab, n_masks);
    if (!c->be[1]->ops->logit_mask || !c->be[0]->ops->logit_mask) {
        printf("skip %-58s (no logit_mask slot)\n", what);
        return;
    }
    int words = (vocab + 31) / 32;
    size_t nv = (size_t)n * v_count;
    float *logits = rand_vec(c, nv, 0.0f, 8.0f);
    uint32_t *masks = xmalloc(sizeof *masks * (size_t)words * n_masks);
    int32_t *rows = xmalloc(sizeof *rows * (size_t)n_masks);
    for (int k = 0; k < n_masks; k++) {
        rows[k] = (k * 7 + 3) % n;   /* distinct while n_masks <= n and n is not a multiple of 7 */
        for (int w = 0; w < words; w++) masks[(size_t)k * words + w] = (uint32_t)rng_next(c) & (k % 3 == 0 ? 0x01010101u : ~0u);
    }
    float *h[N_BE];
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        void *d_l, *d_m, *d_r;
        TRY(be->ops->alloc(be, nv * sizeof(float), &d_l));
        TRY(be->ops->upload(be, d_l, logits, nv * sizeof(float)));
        TRY(be->ops->alloc(be, sizeof *masks * (size_t)words * n_masks, &d_m));
        TRY(be->ops->upload(be, d_m, masks, sizeof *masks * (size_t)words * n_masks));
        TRY(be->ops->alloc(be, sizeof *rows * (size_t)n_masks, &d_r));
        TRY(be->ops->upload(be, d_r, rows, sizeof *rows * (size_t)n_masks));
        TRY(be->ops->logit_mask(be, d_l, v_start, v_count, d_m, words, d_r, n_masks));
        h[b] = xmalloc(nv * sizeof(float));
        TRY(be->ops->sync(be));
        TRY(be->ops->download(be, h[b], d_l, nv * sizeof(float)));
        dev_free(be, d_l);
        dev_free(be, d_m);
        dev_free(be, d_r);
    }
    int bad = 0, masked = 0;
    for (size_t i = 0; i < nv; i++) {
        if (h[0][i] == -INFINITY) masked++;
        if (!same_f32(h[0][i], h[1][i])) {
            if (bad < 8) fprintf(stderr, "  mismatch %s at %zu: cpu %g cuda %g\n", what, i, h[0][i], h[1][i]);
            bad++;
        }
    }
    if (n_masks > 0 && masked == 0) {
        fprintf(stderr, "FAIL %s: the reference masked nothing\n", what);
        bad++;
    }
    c->checks++;
    printf("%-4s %-58s %d masked\n", bad ? "FAIL" : "ok", what, masked);
    if (bad) c->failures++;
    free(h[0]);
    free(h[1]);
    free(logits);
    free(masks);
    free(rows);
}

/* [sampling controls] logit_process on a shard [v_start, +v_count) of a vocabulary of `vocab` ids, n rows:
 * each row's entries are random distinct ids of the whole vocabulary (some outside the shard), with biases,
 * bans, generated counts and prompt flags, and random penalties (every third row without entries); then a
 * second call cutting each row at its max - 2 (the min_p form). Logits, the entries' raw values and the
 * maxima must be identical bits; then logit_pick of random ids (in the entries and not) likewise. */
static void test_logit_process(ctx_t *c, int n, int v_start, int v_count, int vocab, int per_row)
{
    char what[128];
    snprintf(what, sizeof what, "logit_process+pick n %d vocab [%d,+%d) of %d, <= %d entries/row", n, v_start, v_count, vocab,
             per_row);
    if (!c->be[1]->ops->logit_process || !c->be[1]->ops->logit_pick) {
        printf("skip %-58s (no logit_process slot)\n", what);
        return;
    }
    size_t nv = (size_t)n * v_count;
    float *logits = xmalloc(nv * sizeof *logits + 1);
    for (int s = 0; s < n; s++) sample_logits(c, logits + (size_t)s * v_count, v_count, s % 3 == 2 ? PAT_SIGNED_ZERO : PAT_RANDOM);
    sits_logit_proc_row_t *rows = calloc((size_t)n, sizeof *rows);
    sits_logit_proc_ent_t *ents = xmalloc(sizeof *ents * (size_t)n * per_row + 1);
    int32_t *ids = xmalloc(sizeof *ids * (size_t)n);
    int m = 0;
    char *used = calloc((size_t)vocab, 1);
    for (int s = 0; s < n; s++) {
        rows[s].ent0 = m;
        rows[s].presence = (float)rand_int(c, -20, 21) * 0.1f;
        rows[s].frequency = (float)rand_int(c, -20, 21) * 0.13f;
        rows[s].repetition = s % 4 == 0 ? 1.0f : (float)rand_int(c, 5, 30) * 0.1f;
        int k = s % 3 == 1 ? 0 : rand_int(c, 1, per_row + 1);
        memset(used, 0, (size_t)vocab);
        for (int j = 0; j < k; j++) {
            int id = j % 2 ? v_start + rand_int(c, 0, v_count > 0 ? v_count : 1) : rand_int(c, 0, vocab);
            if (id >= vocab || used[id]) continue;
            used[id] = 1;
            int r = rand_int(c, 0, 10);
            ents[m++] = (sits_logit_proc_ent_t){ id, r < 3 ? (float)rand_int(c, -100, 101) * 0.5f : 0.0f, r < 5 ? rand_int(c, 1, 4) : 0,
                                                 (r == 0 ? SITS_PROC_BAN : 0) | (r % 2 ? SITS_PROC_PROMPT : 0) };
        }
        /* sorted by id, as the engine hands them over */
        for (int a_ = rows[s].ent0 + 1; a_ < m; a_++)
            for (int b_ = a_; b_ > rows[s].ent0 && ents[b_ - 1].id > ents[b_].id; b_--) {
                sits_logit_proc_ent_t t = ents[b_];
                ents[b_] = ents[b_ - 1];
                ents[b_ - 1] = t;
            }
        rows[s].n_ent = m - rows[s].ent0;
        ids[s] = rows[s].n_ent > 0 && s % 2 ? ents[rows[s].ent0].id : v_start + rand_int(c, -5, v_count + 5);
    }
    free(used);
    float *h_l[N_BE], *h_raw[N_BE], *h_max[N_BE], *h_pick[N_BE];
    float *cut = xmalloc(sizeof *cut * (size_t)n);
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        void *d_l = NULL, *d_rows = NULL, *d_ents = NULL, *d_raw, *d_max, *d_cut = NULL, *d_ids, *d_pick;
        TRY(be->ops->alloc(be, nv * sizeof(float) + 4, &d_l));
        TRY(be->ops->upload(be, d_l, logits, nv * sizeof(float)));
        TRY(be->ops->alloc(be, sizeof *rows * (size_t)n, &d_rows));
        TRY(be->ops->upload(be, d_rows, rows, sizeof *rows * (size_t)n));
        TRY(be->ops->alloc(be, sizeof *ents * (size_t)m + 16, &d_ents));
        if (m) TRY(be->ops->upload(be, d_ents, ents, sizeof *ents * (size_t)m));
        d_raw = dev_poison(be, sizeof(float) * (size_t)m + 4);
        d_max = dev_poison(be, sizeof(float) * (size_t)n);
        TRY(be->ops->logit_process(be, d_l, n, v_start, v_count, d_rows, d_ents, d_raw, NULL, d_max));
        h_max[b] = xmalloc(sizeof(float) * (size_t)n);
        TRY(be->ops->sync(be));
        TRY(be->ops->download(be, h_max[b], d_max, sizeof(float) * (size_t)n));
        if (b == 0) for (int s = 0; s < n; s++) cut[s] = s % 2 ? h_max[0][s] - 2.0f : -INFINITY;
        d_cut = dev_vals(be, SITS_DT_F32, cut, (size_t)n);
        TRY(be->ops->logit_process(be, d_l, n, v_start, v_count, NULL, NULL, NULL, d_cut, NULL));
        d_ids = dev_i32(be, ids, (size_t)n);
        d_pick = dev_poison(be, sizeof(float) * (size_t)n);
        TRY(be->ops->logit_pick(be, d_pick, d_l, n, v_start, v_count, d_ids, d_rows, d_ents, d_raw));
        h_l[b] = xmalloc(nv * sizeof(float) + 4);
        h_raw[b] = xmalloc(sizeof(float) * (size_t)m + 4);
        h_pick[b] = xmalloc(sizeof(float) * (size_t)n);
        TRY(be->ops->sync(be));
        TRY(be->ops->download(be, h_l[b], d_l, nv * sizeof(float)));
        TRY(be->ops->download(be, h_raw[b], d_raw, sizeof(float) * (size_t)m));
        TRY(be->ops->download(be, h_pick[b], d_pick, sizeof(float) * (size_t)n));
        void *fr[] = { d_l, d_rows, d_ents, d_raw, d_max, d_cut, d_ids, d_pick };
        for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) dev_free(be, fr[i]);
    }
    int bad = 0, changed = 0, in_shard = 0;
    for (size_t i = 0; i < nv; i++) {
        if (!same_f32(h_l[0][i], logits[i])) changed++;
        if (!same_f32(h_l[0][i], h_l[1][i])) {
            if (bad < 8) fprintf(stderr, "  mismatch %s logits at row %zu col %zu: cpu %.9g cuda %.9g (in %.9g)\n", what,
                                 i / (size_t)(v_count ? v_count : 1), i % (size_t)(v_count ? v_count : 1), h_l[0][i], h_l[1][i], logits[i]);
            bad++;
        }
    }
    for (int k = 0; k < m; k++) {
        if (ents[k].id < v_start || ents[k].id >= v_start + v_count) continue;
        in_shard++;
        if (!same_f32(h_raw[0][k], h_raw[1][k])) {
            if (bad < 8) fprintf(stderr, "  mismatch %s raw of entry %d: cpu %.9g cuda %.9g\n", what, k, h_raw[0][k], h_raw[1][k]);
            bad++;
        }
    }
    for (int s = 0; s < n; s++) {
        if (!same_f32(h_max[0][s], h_max[1][s])) {
            if (bad < 8) fprintf(stderr, "  mismatch %s rowmax %d: cpu %.9g cuda %.9g\n", what, s, h_max[0][s], h_max[1][s]);
            bad++;
        }
        if (!same_f32(h_pick[0][s], h_pick[1][s]) && !(isnan(h_pick[0][s]) && isnan(h_pick[1][s]))) {
            if (bad < 8) fprintf(stderr, "  mismatch %s pick %d (id %d): cpu %.9g cuda %.9g\n", what, s, ids[s], h_pick[0][s], h_pick[1][s]);
            bad++;
        }
    }
    if (v_count > 0 && changed == 0) {
        fprintf(stderr, "FAIL %s: the reference changed nothing\n", what);
        bad++;
    }
    c->checks++;
    printf("%-4s %-58s %d changed, %d entries in the shard\n", bad ? "FAIL" : "ok", what, changed, in_shard);
    if (bad) c->failures++;
    for (int b = 0; b < N_BE; b++) {
        free(h_l[b]);
        free(h_raw[b]);
        free(h_max[b]);
        free(h_pick[b]);
    }
    free(logits);
    free(rows);
    free(ents);
    free(ids);
    free(cut);
}

/* [logprobs] logprob_reduce of n_rows scored rows (of n logits rows, in another order, some twice) on a
 * shard: tgt, has_tgt, n and the top list exactly, lse within 1e-12 relative (double sums in another
 * order). */
static void test_logprob_reduce(ctx_t *c, int n, int n_rows, int v_start, int v_count, int pat)
{
    char what[128];
    snprintf(what, sizeof what, "logprob_reduce %d of %d rows vocab [%d,+%d) %s", n_rows, n, v_start, v_count, pat_name[pat]);
    if (!c->be[1]->ops->logprob_reduce) {
        printf("skip %-58s (no logprob_reduce slot)\n", what);
        return;
    }
    size_t nv = (size_t)n * v_count;
    float *logits = xmalloc(nv * sizeof *logits + 4);
    for (int s = 0; s < n; s++) sample_logits(c, logits + (size_t)s * v_count, v_count, pat);
    sits_logprob_row_t *rows = calloc((size_t)n_rows, sizeof *rows);
    for (int k = 0; k < n_rows; k++)
        rows[k] = (sits_logprob_row_t){ .row = (k * 5 + 1) % n, .target = k % 4 == 3 ? -1 : v_start + rand_int(c, -3, v_count + 3),
                                        .top = k % 7 == 0 ? 0 : k % 3 == 0 ? SITS_LOGPROB_MAX_TOP : rand_int(c, 1, 8) };
    sits_logprob_rec_t *h[N_BE];
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        void *d_l, *d_rows, *d_rec;
        TRY(be->ops->alloc(be, nv * sizeof(float) + 4, &d_l));
        TRY(be->ops->upload(be, d_l, logits, nv * sizeof(float)));
        TRY(be->ops->alloc(be, sizeof *rows * (size_t)n_rows, &d_rows));
        TRY(be->ops->upload(be, d_rows, rows, sizeof *rows * (size_t)n_rows));
        d_rec = dev_poison(be, sizeof(sits_logprob_rec_t) * (size_t)n_rows);
        TRY(be->ops->logprob_reduce(be, d_rec, d_l, v_start, v_count, d_rows, n_rows));
        h[b] = xmalloc(sizeof(sits_logprob_rec_t) * (size_t)n_rows);
        TRY(be->ops->sync(be));
        TRY(be->ops->download(be, h[b], d_rec, sizeof(sits_logprob_rec_t) * (size_t)n_rows));
        dev_free(be, d_l);
        dev_free(be, d_rows);
        dev_free(be, d_rec);
    }
    int bad = 0;
    double max_rel = 0;
    for (int k = 0; k < n_rows; k++) {
        const sits_logprob_rec_t *a = &h[0][k], *g = &h[1][k];
        double rel = a->lse == g->lse ? 0 : fabs(a->lse - g->lse) / fmax(fabs(a->lse), 1.0);
        if (rel > max_rel) max_rel = rel;
        int ok = rel <= 1e-12 && a->has_tgt == g->has_tgt && (!a->has_tgt || same_f32(a->tgt, g->tgt)) && a->n == g->n;
        for (int t = 0; ok && t < a->n && t < SITS_LOGPROB_MAX_TOP; t++)
            ok = a->top[t].id == g->top[t].id && same_f32(a->top[t].logit, g->top[t].logit);
        if (!ok) {
            if (bad < 8) {
                fprintf(stderr, "  mismatch %s record %d (row %d target %d top %d): lse %.17g / %.17g, tgt %d %.9g / %d %.9g, n %d / %d",
                        what, k, rows[k].row, rows[k].target, rows[k].top, a->lse, g->lse, a->has_tgt, a->tgt, g->has_tgt, g->tgt,
                        a->n, g->n);
                for (int t = 0; t < a->n && t < 4; t++)
                    fprintf(stderr, ", top[%d] %d %.9g / %d %.9g", t, a->top[t].id, a->top[t].logit, g->top[t].id, g->top[t].logit);
                fprintf(stderr, "\n");
            }
            bad++;
        }
    }
    c->checks++;
    printf("%-4s %-58s max lse rel err %.1e\n", bad ? "FAIL" : "ok", what, max_rel);
    if (bad) c->failures++;
    free(h[0]);
    free(h[1]);
    free(logits);
    free(rows);
}

static void test_perf_all(ctx_t *c)
{
    test_add_rmsnorm_f32res(c, 1, 4096, 1);
    test_add_rmsnorm_f32res(c, 7, 4096, 3);
    test_add_rmsnorm_f32res(c, 3, 77, 2); /* scalar path */
    test_matmul_f32out(c, 1, 4096, 4000);
    test_matmul_f32out(c, 5, 512, 1000);
    test_matmul_f32out(c, 64, 1024, 2048);
    test_matmul_f32out(c, 3, 130, 66);
    /* Llama-3 vocab slices (TP 1 and 2), all modes, candidate counts around and beyond the slice */
    test_sample_reduce(c, 4, 0, 128256, 50, PAT_RANDOM, 0);
    test_sample_reduce(c, 4, 64128, 64128, 256, PAT_RANDOM, 2);
    test_sample_reduce(c, 8, 1000, 5000, 1024, PAT_RANDOM, 1);
    test_sample_reduce(c, 8, 0, 5000, 300, PAT_TIES, 0);
    test_sample_reduce(c, 8, 0, 5000, 17, PAT_TIES, 3);
    test_sample_reduce(c, 4, 7, 3000, 40, PAT_SIGNED_ZERO, 2);
    test_sample_reduce(c, 4, 0, 4096, 100, PAT_FLAT, 0);
    test_sample_reduce(c, 4, 0, 4096, 100, PAT_NEG_INF, 1);
    test_sample_reduce(c, 4, 0, 4096, 500, PAT_NEG_INF, 2); /* fewer finite values than c */
    test_sample_reduce(c, 4, 100, 100, 256, PAT_RANDOM, 0); /* the whole slice fits */
    test_sample_reduce(c, 4, 100, 256, 256, PAT_RANDOM, 2); /* exactly c */
    test_sample_reduce(c, 4, 100, 257, 256, PAT_TIES, 2);   /* one more than c */
    test_sample_reduce(c, 4, 500, 0, 8, PAT_RANDOM, 0);     /* a rank with no vocabulary */
    test_sample_reduce(c, 64, 0, 2048, 1, PAT_RANDOM, 0);   /* a decode batch */
    test_logit_mask(c, 4, 0, 128256, 128256, 3);
    test_logit_mask(c, 32, 64128, 64128, 128256, 32);   /* TP 2, the second shard, a batch of 32 */
    test_logit_mask(c, 5, 1000, 3013, 4000, 2);           /* padded vocab past the mask */
    test_logit_mask(c, 3, 0, 4096, 4096, 0);
    test_logit_process(c, 4, 0, 128256, 128256, 2000);     /* Llama-3 vocab, long histories */
    test_logit_process(c, 32, 64128, 64128, 128256, 64);   /* TP 2, the second shard, a batch of 32 */
    test_logit_process(c, 7, 1000, 3013, 4000, 300);
    test_logit_process(c, 3, 500, 0, 4000, 20);            /* a rank with no vocabulary */
    test_logprob_reduce(c, 8, 12, 0, 128256, PAT_RANDOM);
    test_logprob_reduce(c, 32, 32, 64128, 64128, PAT_RANDOM);
    test_logprob_reduce(c, 4, 9, 7, 3000, PAT_TIES);
    test_logprob_reduce(c, 4, 6, 0, 4096, PAT_NEG_INF);
    test_logprob_reduce(c, 4, 5, 100, 13, PAT_RANDOM);     /* fewer ids than top */
    test_logprob_reduce(c, 3, 4, 500, 0, PAT_RANDOM);      /* no vocabulary */
    test_sample_rng(c, 200, 0, 4096);
    test_sample_rng(c, 16, 123456, 64128);
    test_graph(c, 4, 4096, 1024);
    test_graph(c, 1, 128, 512);
}

/* ---- [moe] router top-k and the weighted combine ------------------------------------------------ */

/* ids must be identical (both backends compare the same bf16-rounded logits, lower index first on
 * ties); weights within fp32 rounding (the cuda softmax sums as a warp tree). flat: every logit equal. */
static void test_moe_topk(ctx_t *c, int n, int E, int k, int norm, int flat)
{
    char what[128];
    snprintf(what, sizeof what, "moe_topk n %d E %d k %d%s%s", n, E, k, norm ? " norm" : "", flat ? " flat" : "");
    float *l = rand_vec(c, (size_t)n * E, 0.0f, 3.0f);
    if (flat)
        for (size_t i = 0; i < (size_t)n * E; i++) l[i] = 0.5f;
    void *d_l[N_BE], *d_ids[N_BE], *d_w[N_BE];
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        d_l[b] = dev_acts(be, l, (size_t)n * E);
        d_ids[b] = dev_poison(be, (size_t)n * k * 4);
        d_w[b] = dev_poison(be, (size_t)n * k * 4);
        TRY(be->ops->moe_topk(be, d_ids[b], d_w[b], d_l[b], n, E, k, norm));
    }
    int32_t *ids[N_BE];
    for (int b = 0; b < N_BE; b++) ids[b] = (int32_t *)host_raw_f32(c->be[b], d_ids[b], (size_t)n * k);
    size_t bad = 0;
    for (size_t i = 0; i < (size_t)n * k; i++)
        if (ids[0][i] != ids[1][i]) {
            if (bad < 8) fprintf(stderr, "  mismatch %s ids[%zu]: cpu %d cuda %d\n", what, i, ids[0][i], ids[1][i]);
            bad++;
        }
    for (int t = 0; flat && t < n; t++)   /* the reference itself: ties go to the lower index */
        for (int j = 0; j < k; j++)
            if (ids[0][(size_t)t * k + j] != j) bad++;
    c->checks++;
    printf("%-4s %-58s ids %s\n", bad ? "FAIL" : "ok", what, bad ? "differ" : "equal");
    if (bad) c->failures++;
    float *w[N_BE];
    for (int b = 0; b < N_BE; b++) w[b] = host_raw_f32(c->be[b], d_w[b], (size_t)n * k);
    snprintf(what + strlen(what), sizeof what - strlen(what), " weights");
    compare(c, what, w[0], w[1], (size_t)n * k, 1e-7, 1e-5, 0);
    for (int b = 0; b < N_BE; b++) {
        dev_free(c->be[b], d_l[b]);
        dev_free(c->be[b], d_ids[b]);
        dev_free(c->be[b], d_w[b]);
        free(ids[b]);
        free(w[b]);
    }
    free(l);
}

/* n tokens of kk slots over ny rows of y: random rows (repeats allowed) and weights, some slots -1 and
 * one token with none (a zero row). */
static void test_moe_combine(ctx_t *c, int n, int kk, int ny, int dim)
{
    char what[128];
    snprintf(what, sizeof what, "moe_combine n %d kk %d rows %d dim %d", n, kk, ny, dim);
    float *y = rand_vec(c, (size_t)ny * dim, 0.0f, 2.0f);
    float *wts = rand_vec(c, (size_t)n * kk, 0.5f, 0.5f);
    int32_t *pos = xmalloc((size_t)n * kk * 4);
    for (int i = 0; i < n * kk; i++) pos[i] = rand_int(c, 0, 5) == 0 ? -1 : rand_int(c, 0, ny);
    for (int j = 0; j < kk; j++) pos[j] = -1;
    void *d_y[N_BE], *d_p[N_BE], *d_w[N_BE], *d_out[N_BE];
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        d_y[b] = dev_acts(be, y, (size_t)ny * dim);
        d_p[b] = dev_i32(be, pos, (size_t)n * kk);
        d_w[b] = dev_vals(be, SITS_DT_F32, wts, (size_t)n * kk);
        d_out[b] = dev_poison(be, (size_t)n * dim * sits_dtype_size(be->act_dtype));
        TRY(be->ops->moe_combine(be, d_out[b], d_y[b], d_p[b], d_w[b], n, kk, dim));
    }
    compare_bufs(c, what, d_out, (size_t)n * dim, 1e-4, 5e-3, 0);
    for (int b = 0; b < N_BE; b++) {
        dev_free(c->be[b], d_y[b]);
        dev_free(c->be[b], d_p[b]);
        dev_free(c->be[b], d_w[b]);
        dev_free(c->be[b], d_out[b]);
    }
    free(y);
    free(wts);
    free(pos);
}

/* [moe dev] moe_route, moe_experts and moe_combine_slots: n tokens of k distinct experts of E (skew: expert 0 in
 * about half the tokens, so some experts hold many slots: more than one CT chunk), token 1 masked (a pad row).
 * The plan and the counts must be equal; act, y and out within the bf16 roundings the device makes (g, u, act
 * and y each rounded once: atol 2 % of the reference's RMS, rtol 1 %; a wrong expert or slot is O(RMS) off). */
static double rms_of(const float *v, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)v[i] * v[i];
    return n ? sqrt(s / (double)n) : 0.0;
}

static void compare_rel_rms(ctx_t *c, const char *what, void *d[N_BE], size_t n)
{
    float *ref = host_f32(c->be[0], d[0], n), *got = host_f32(c->be[1], d[1], n);
    compare(c, what, ref, got, n, 0.02 * rms_of(ref, n) + 1e-6, 1e-2, 0);
    free(ref);
    free(got);
}

/* [moe fp8] f8: E4M3 experts (random bytes, NaN codes excluded, |w| up to 448 times a row scale of about 2^-9 / sqrt(K)) */
static void *dev_bytes(sits_backend_t *be, const uint8_t *v, size_t n)
{
    void *d = NULL;
    TRY(be->ops->alloc(be, n, &d));
    TRY(be->ops->upload(be, d, v, n));
    return d;
}

static uint8_t *rand_e4m3(ctx_t *c, size_t n)
{
    uint8_t *q = xmalloc(n);
    for (size_t i = 0; i < n; i++) {
        int v = rand_int(c, 0, 254);   /* 0x7f and 0xff are NaN */
        q[i] = (uint8_t)(v >= 0x7f ? v + 1 : v);
    }
    return q;
}

/* [moe dev] The device's y and out against double-precision references from the device's own inputs:
 *   y_ref[s] [H] = act_dev[s] . bf16(w_down[e])^T, or for FP8 experts (q8: the device's E4M3 act rows aq [nk, I] and
 *   row scales as [nk], checked first against quantising act_dev per row as backend.h defines it)
 *   y_ref[s][r] = (sum_j e4m3(aq[s][j]) e4m3(qdn[e][r][j])) as[s] s_down[e][r];
 *   out_ref[t] = sum_j wts[t k + j] y_dev[t k + j] (+ sigmoid(sg_dev[t]) y_dev[n k + t]).
 * Bounds: one bf16 rounding of the result (0.5%) + 0.2% of the RMS for the fp32 accumulation order. */
static void check_moe_own_inputs(ctx_t *c, int n, int k, int E, int H, int I, int shared, int f8, const int32_t *ids,
                                 float *const *wdn, uint8_t *const *qdn, float *const *sdn, const float *wts, void *d_act,
                                 void *d_y, void *d_sg, void *d_out, void *d_q8)
{
    sits_backend_t *be = c->be[1];
    char what[160];
    const int nk = n * k;
    float *act = host_f32(be, d_act, (size_t)nk * I), *y = host_f32(be, d_y, (size_t)(nk + n) * H);
    float *out = host_f32(be, d_out, (size_t)n * H), *sg = host_f32(be, d_sg, (size_t)n);
    float *yref = xmalloc((size_t)nk * H * sizeof *yref), *oref = xmalloc((size_t)n * H * sizeof *oref);
    float *as = NULL, lut[256];
    uint8_t *aq = NULL;
    if (f8) {
        size_t bytes = SITS_MOE_Q8_BYTES(n, nk, H, I);
        uint8_t *q8 = xmalloc(bytes);
        TRY(be->ops->sync(be));
        TRY(be->ops->download(be, q8, d_q8, bytes));
        as = xmalloc((size_t)nk * sizeof *as);
        aq = xmalloc((size_t)nk * I);
        memcpy(as, (float *)q8 + n, (size_t)nk * sizeof *as);
        memcpy(aq, q8 + SITS_MOE_Q8_PAD16(4 * ((size_t)n + nk)) + SITS_MOE_Q8_PAD16((size_t)n * H), (size_t)nk * I);
        free(q8);
        for (int v = 0; v < 256; v++) lut[v] = sits_f8e4m3_to_f32((uint8_t)v);
        size_t bad = 0;   /* the act rows' quantisation: exact */
        for (int s = 0; s < nk; s++) {
            float amax = 0.0f;
            for (int j = 0; j < I; j++) amax = fmaxf(amax, fabsf(act[(size_t)s * I + j]));
            float sc = amax > 0.0f ? amax / 448.0f : 1.0f;
            bad += sc != as[s];
            for (int j = 0; j < I; j++) bad += aq[(size_t)s * I + j] != sits_f32_to_f8e4m3(act[(size_t)s * I + j] / sc);
        }
        snprintf(what, sizeof what, "moe_experts fp8 act rows n %d k %d I %d", n, k, I);
        c->checks++;
        printf("%-4s %-58s E4M3 bytes and scales %s (%zu differ)\n", bad ? "FAIL" : "ok", what, bad ? "differ" : "equal", bad);
        if (bad) c->failures++;
    }
    for (int s = 0; s < nk; s++) {
        int e = ids[s];
        for (int r = 0; r < H; r++) {
            double acc = 0.0;
            if (f8) {
                const uint8_t *w = qdn[e] + (size_t)r * I, *a = aq + (size_t)s * I;
                for (int j = 0; j < I; j++) acc += (double)lut[a[j]] * lut[w[j]];
                acc *= (double)as[s] * sdn[e][r];
            } else {
                const float *w = wdn[e] + (size_t)r * I, *a = act + (size_t)s * I;
                for (int j = 0; j < I; j++) acc += (double)a[j] * sits_bf16_to_f32(sits_f32_to_bf16(w[j]));
            }
            yref[(size_t)s * H + r] = (float)acc;
        }
    }
    for (int t = 0; t < n; t++)
        for (int h = 0; h < H; h++) {
            double acc = 0.0;
            for (int j = 0; j < k; j++) acc += (double)wts[t * k + j] * y[(size_t)(t * k + j) * H + h];
            if (shared) acc += y[(size_t)(nk + t) * H + h] / (1.0 + exp(-(double)sg[t]));
            oref[(size_t)t * H + h] = (float)acc;
        }
    snprintf(what, sizeof what, "moe_experts%s y n %d k %d E %d H %d I %d", f8 ? " fp8" : "", n, k, E, H, I);
    compare(c, what, yref, y, (size_t)nk * H, 2e-3 * rms_of(yref, (size_t)nk * H) + 1e-7, 5e-3, 0);
    snprintf(what, sizeof what, "moe_combine_slots%s n %d k %d H %d%s", f8 ? " fp8" : "", n, k, H, shared ? " +shared" : "");
    compare(c, what, oref, out, (size_t)n * H, 2e-3 * rms_of(oref, (size_t)n * H) + 1e-7, 5e-3, 0);
    free(act);
    free(y);
    free(out);
    free(sg);
    free(yref);
    free(oref);
    free(as);
    free(aq);
}

static void test_moe_dev_q(ctx_t *c, int n, int k, int E, int H, int I, int shared, int f8)
{
    char what[160];
    const int nk = n * k;
    int32_t *ids = xmalloc((size_t)nk * 4), *mask = xmalloc((size_t)n * 4), *perm = xmalloc((size_t)E * 4);
    for (int t = 0; t < n; t++) {
        for (int e = 0; e < E; e++) perm[e] = e;
        for (int j = 0; j < k; j++) {   /* k distinct experts: a partial Fisher-Yates shuffle */
            int r = j + rand_int(c, 0, E - j), tmp = perm[j];
            perm[j] = perm[r];
            perm[r] = tmp;
            ids[t * k + j] = perm[j];
        }
        if (rand_int(c, 0, 2) == 0) {   /* expert 0 in about half the tokens */
            int has = 0;
            for (int j = 0; j < k; j++) has |= ids[t * k + j] == 0;
            if (!has) ids[t * k + rand_int(c, 0, k)] = 0;
        }
        mask[t] = t == 1 ? -1 : t;
    }
    float *x = rand_vec(c, (size_t)n * H, 0.0f, 1.0f), *wts = rand_vec(c, (size_t)nk, 0.5f, 0.5f);
    float *sg = rand_vec(c, (size_t)n, 0.0f, 2.0f), *ysh = rand_vec(c, (size_t)n * H, 0.0f, 1.0f);
    float **wgu = xmalloc((size_t)E * sizeof *wgu), **wdn = xmalloc((size_t)E * sizeof *wdn);
    float **sgu = xmalloc((size_t)E * sizeof *sgu), **sdn = xmalloc((size_t)E * sizeof *sdn);
    uint8_t **qgu = xmalloc((size_t)E * sizeof *qgu), **qdn = xmalloc((size_t)E * sizeof *qdn);
    for (int e = 0; e < E; e++) {   /* |g|, |u| ~ 0.6, |y| ~ 0.1: the sizes of a real layer */
        if (f8) {   /* E4M3 codes are up to 448 with a mean |v| of ~ 60: a row scale of 2^-7 / sqrt(K) gives similar sizes */
            qgu[e] = rand_e4m3(c, (size_t)2 * I * H);
            qdn[e] = rand_e4m3(c, (size_t)H * I);
            sgu[e] = rand_vec(c, (size_t)2 * I, 1.0f / (128.0f * sqrtf((float)H)), 0.5f / (128.0f * sqrtf((float)H)));
            sdn[e] = rand_vec(c, (size_t)H, 1.0f / (128.0f * sqrtf((float)I)), 0.5f / (128.0f * sqrtf((float)I)));
            wgu[e] = wdn[e] = NULL;
        } else {
            wgu[e] = rand_vec(c, (size_t)2 * I * H, 0.0f, 1.0f / sqrtf((float)H));
            wdn[e] = rand_vec(c, (size_t)H * I, 0.0f, 1.0f / sqrtf((float)I));
            qgu[e] = qdn[e] = NULL;
            sgu[e] = sdn[e] = NULL;
        }
    }
    size_t pw = SITS_MOE_PLAN_WORDS(E, nk);
    void *d_ids[N_BE], *d_mask[N_BE], *d_plan[N_BE], *d_cnt[N_BE], *d_x[N_BE], *d_act[N_BE], *d_y[N_BE], *d_wts[N_BE], *d_sg[N_BE],
        *d_out[N_BE], *d_pgu[N_BE], *d_pdn[N_BE], **d_wgu[N_BE], **d_wdn[N_BE], *d_psg[N_BE], *d_psd[N_BE], **d_sgu[N_BE],
        **d_sdn[N_BE], *d_q8[N_BE];
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        size_t es = sits_dtype_size(be->act_dtype);
        d_ids[b] = dev_i32(be, ids, (size_t)nk);
        d_mask[b] = dev_i32(be, mask, (size_t)n);
        d_plan[b] = dev_poison(be, pw * 4);
        TRY(be->ops->alloc(be, (size_t)E * 8, &d_cnt[b]));
        TRY(be->ops->memset0(be, d_cnt[b], (size_t)E * 8));
        d_x[b] = dev_acts(be, x, (size_t)n * H);
        d_act[b] = dev_poison(be, (size_t)nk * I * es);
        d_y[b] = dev_poison(be, (size_t)(nk + n) * H * es);   /* slots, then the shared expert's rows */
        d_wts[b] = dev_vals(be, SITS_DT_F32, wts, (size_t)nk);
        d_sg[b] = dev_acts(be, sg, (size_t)n);
        d_out[b] = dev_poison(be, (size_t)n * H * es);
        d_wgu[b] = xmalloc((size_t)E * sizeof(void *));
        d_wdn[b] = xmalloc((size_t)E * sizeof(void *));
        d_sgu[b] = xmalloc((size_t)E * sizeof(void *));
        d_sdn[b] = xmalloc((size_t)E * sizeof(void *));
        for (int e = 0; e < E; e++) {
            d_wgu[b][e] = f8 ? dev_bytes(be, qgu[e], (size_t)2 * I * H) : dev_weight(be, wgu[e], 2 * I, H);
            d_wdn[b][e] = f8 ? dev_bytes(be, qdn[e], (size_t)H * I) : dev_weight(be, wdn[e], H, I);
            d_sgu[b][e] = f8 ? dev_vals(be, SITS_DT_F32, sgu[e], (size_t)2 * I) : NULL;
            d_sdn[b][e] = f8 ? dev_vals(be, SITS_DT_F32, sdn[e], (size_t)H) : NULL;
        }
        d_psg[b] = d_psd[b] = d_q8[b] = NULL;
        if (f8) {
            TRY(be->ops->alloc(be, (size_t)E * sizeof(void *), &d_psg[b]));
            TRY(be->ops->alloc(be, (size_t)E * sizeof(void *), &d_psd[b]));
            TRY(be->ops->upload(be, d_psg[b], d_sgu[b], (size_t)E * sizeof(void *)));
            TRY(be->ops->upload(be, d_psd[b], d_sdn[b], (size_t)E * sizeof(void *)));
            d_q8[b] = dev_poison(be, SITS_MOE_Q8_BYTES(n, nk, H, I));
        }
        TRY(be->ops->alloc(be, (size_t)E * sizeof(void *), &d_pgu[b]));
        TRY(be->ops->alloc(be, (size_t)E * sizeof(void *), &d_pdn[b]));
        TRY(be->ops->upload(be, d_pgu[b], d_wgu[b], (size_t)E * sizeof(void *)));
        TRY(be->ops->upload(be, d_pdn[b], d_wdn[b], (size_t)E * sizeof(void *)));
        if (be->act_dtype == SITS_DT_F32) {   /* the shared expert's rows after the slots */
            TRY(be->ops->upload(be, (char *)d_y[b] + (size_t)nk * H * es, ysh, (size_t)n * H * es));
        } else {
            uint16_t *h = xmalloc((size_t)n * H * 2);
            for (size_t i = 0; i < (size_t)n * H; i++) h[i] = sits_f32_to_bf16(ysh[i]);
            TRY(be->ops->upload(be, (char *)d_y[b] + (size_t)nk * H * es, h, (size_t)n * H * 2));
            free(h);
        }
        TRY(be->ops->moe_route(be, d_plan[b], d_cnt[b], d_ids[b], d_mask[b], n, k, E, 0, E));
        TRY(be->ops->moe_experts(be, d_y[b], d_act[b], d_x[b], d_plan[b], (const void *const *)d_pgu[b],
                                 (const void *const *)d_pdn[b], (const float *const *)d_psg[b], (const float *const *)d_psd[b],
                                 d_q8[b], NULL, n, k, E, H, I));
        TRY(be->ops->moe_combine_slots(be, d_out[b], d_y[b], d_wts[b], shared ? d_sg[b] : NULL, n, k, H));
    }
    snprintf(what, sizeof what, "moe_route n %d k %d E %d", n, k, E);
    int32_t *plan[N_BE];
    uint64_t *cnt[N_BE];
    for (int b = 0; b < N_BE; b++) {
        plan[b] = xmalloc(pw * 4);
        cnt[b] = xmalloc((size_t)E * 8);
        TRY(c->be[b]->ops->sync(c->be[b]));
        TRY(c->be[b]->ops->download(c->be[b], plan[b], d_plan[b], pw * 4));
        TRY(c->be[b]->ops->download(c->be[b], cnt[b], d_cnt[b], (size_t)E * 8));
    }
    size_t bad = (size_t)(memcmp(plan[0], plan[1], pw * 4) != 0) + (size_t)(memcmp(cnt[0], cnt[1], (size_t)E * 8) != 0);
    uint64_t total = 0;   /* the reference itself: every unmasked slot counted once */
    for (int e = 0; e < E; e++) total += cnt[0][e];
    if (total != (uint64_t)(nk - (n > 1 ? k : 0)) || plan[0][1 + E + plan[0][0]] != nk) bad++;
    c->checks++;
    printf("%-4s %-58s plan and counts %s (%d experts)\n", bad ? "FAIL" : "ok", what, bad ? "differ" : "equal", plan[0][0]);
    if (bad) c->failures++;
    snprintf(what, sizeof what, "moe_experts%s act n %d k %d E %d H %d I %d", f8 ? " fp8" : "", n, k, E, H, I);
    compare_rel_rms(c, what, d_act, (size_t)nk * I);
    /* y and out are checked against references built in double from the device's own inputs (its act, its E4M3
     * act rows and scales, its y): chained through the backends, an act that differs by one bf16 rounding moves
     * whole E4M3 steps of the down projection's input (and, for i = 8, a short dot product), which is the
     * precision of the format, not an error of the kernels. The act itself is compared above with equal inputs. */
    check_moe_own_inputs(c, n, k, E, H, I, shared, f8, ids, wdn, qdn, sdn, wts, d_act[1], d_y[1], d_sg[1], d_out[1], d_q8[1]);
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        void *bufs[] = { d_ids[b], d_mask[b], d_plan[b], d_cnt[b], d_x[b], d_act[b], d_y[b], d_wts[b], d_sg[b], d_out[b], d_pgu[b],
                         d_pdn[b] };
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dev_free(be, bufs[i]);
        for (int e = 0; e < E; e++) {
            dev_free(be, d_wgu[b][e]);
            dev_free(be, d_wdn[b][e]);
            if (f8) {
                dev_free(be, d_sgu[b][e]);
                dev_free(be, d_sdn[b][e]);
            }
        }
        if (f8) {
            dev_free(be, d_psg[b]);
            dev_free(be, d_psd[b]);
            dev_free(be, d_q8[b]);
        }
        free(d_wgu[b]);
        free(d_wdn[b]);
        free(d_sgu[b]);
        free(d_sdn[b]);
        free(plan[b]);
        free(cnt[b]);
    }
    for (int e = 0; e < E; e++) {
        free(wgu[e]);
        free(wdn[e]);
        free(qgu[e]);
        free(qdn[e]);
        free(sgu[e]);
        free(sdn[e]);
    }
    free(wgu);
    free(wdn);
    free(qgu);
    free(qdn);
    free(sgu);
    free(sdn);
    free(ids);
    free(mask);
    free(perm);
    free(x);
    free(wts);
    free(sg);
    free(ysh);
}

/* [moe dev] moe_route over an EP rank's expert range [e0, e0 + ne): the plan (local expert ids, that range's slots
 * only) and the counts (every expert) equal between the backends; random ids with repeats across tokens */
static void test_moe_route_range(ctx_t *c, int n, int k, int E, int e0, int ne)
{
    char what[160];
    const int nk = n * k;
    int32_t *ids = xmalloc((size_t)nk * 4);
    for (int s = 0; s < nk; s++) ids[s] = rand_int(c, 0, E);
    size_t pw = SITS_MOE_PLAN_WORDS(E, nk);
    int32_t *plan[N_BE];
    uint64_t *cnt[N_BE];
    for (int b = 0; b < N_BE; b++) {
        sits_backend_t *be = c->be[b];
        void *d_ids = dev_i32(be, ids, (size_t)nk), *d_plan = dev_poison(be, pw * 4), *d_cnt = NULL;
        TRY(be->ops->alloc(be, (size_t)E * 8, &d_cnt));
        TRY(be->ops->memset0(be, d_cnt, (size_t)E * 8));
        TRY(be->ops->moe_route(be, d_plan, d_cnt, d_ids, NULL, n, k, E, e0, ne));
        plan[b] = xmalloc(pw * 4);
        cnt[b] = xmalloc((size_t)E * 8);
        TRY(be->ops->sync(be));
        TRY(be->ops->download(be, plan[b], d_plan, pw * 4));
        TRY(be->ops->download(be, cnt[b], d_cnt, (size_t)E * 8));
        dev_free(be, d_ids);
        dev_free(be, d_plan);
        dev_free(be, d_cnt);
    }
    /* compare what the plan defines: A, the list, the offsets, the slots up to the range's total */
    const int A = plan[0][0], tot = A >= 0 && A <= E ? plan[0][1 + E + A] : -1;
    size_t bad = plan[1][0] != A || tot < 0 || tot > nk;
    if (!bad)
        bad += memcmp(plan[0] + 1, plan[1] + 1, (size_t)A * 4) != 0 || memcmp(plan[0] + 1 + E, plan[1] + 1 + E, (size_t)(A + 1) * 4) != 0 ||
               memcmp(plan[0] + 2 + 2 * E, plan[1] + 2 + 2 * E, (size_t)tot * 4) != 0;
    bad += memcmp(cnt[0], cnt[1], (size_t)E * 8) != 0;
    int in_range = 0;   /* the reference itself: the range's slots, nothing else */
    for (int s = 0; s < nk; s++) in_range += ids[s] >= e0 && ids[s] < e0 + ne;
    bad += tot != in_range;
    snprintf(what, sizeof what, "moe_route n %d k %d E %d experts %d..%d", n, k, E, e0, e0 + ne - 1);
    c->checks++;
    printf("%-4s %-58s plan and counts %s (%d experts, %d slots)\n", bad ? "FAIL" : "ok", what, bad ? "differ" : "equal", A, tot);
    if (bad) c->failures++;
    for (int b = 0; b < N_BE; b++) {
        free(plan[b]);
        free(cnt[b]);
    }
    free(ids);
}

/* [moe fuse] The one-token fused ops against the separate ones on the same device, byte for byte (backend.h: the same
 * bits): moe_select's logits, ids, weights, plan and counts against matmul + moe_topk + moe_route, called twice (its
 * arrival counter must be back at 0: the second call's results equal, the counts doubled); moe_experts_combine's out
 * against moe_experts + moe_combine_slots. f8: E4M3 experts; epi: gpt-oss's biases (router, gate/up, down) and its
 * clamped SwiGLU. Needs SITS_MOE_FUSE=1 (set here before the first fused call: the kernels read it once). */
static void test_moe_fused(ctx_t *c, int E, int k, int H, int I, int f8, int epi)
{
    sits_backend_t *be = c->be[1];
    const sits_backend_ops_t *op = be->ops;
    char what[160];
    snprintf(what, sizeof what, "moe fused n 1 E %d k %d H %d I %d%s%s", E, k, H, I, f8 ? " fp8" : "", epi ? " +bias oai" : "");
    if (!op->moe_select || !op->moe_experts_combine) {
        c->checks++;
        c->failures++;
        printf("FAIL %-58s the cuda backend has no fused ops\n", what);
        return;
    }
    float *x = rand_vec(c, (size_t)H, 0.0f, 1.0f), *wr = rand_vec(c, (size_t)E * H, 0.0f, 1.0f / sqrtf((float)H));
    float *br = rand_vec(c, (size_t)E, 0.0f, 0.5f);
    void *d_x = dev_acts(be, x, (size_t)H), *d_wr = dev_weight(be, wr, E, H), *d_br = epi ? dev_acts(be, br, (size_t)E) : NULL;
    const size_t pw = SITS_MOE_PLAN_WORDS(E, k), es = sits_dtype_size(be->act_dtype);
    void *d_log[2], *d_ids[2], *d_wts[2], *d_plan[2], *d_cnt[2], *d_out[2], *d_act = dev_poison(be, (size_t)k * I * es);
    void *d_y = dev_poison(be, (size_t)(k + 1) * H * es), *d_q8 = f8 ? dev_poison(be, SITS_MOE_Q8_BYTES(1, k, H, I)) : NULL;
    for (int v = 0; v < 2; v++) {
        d_log[v] = dev_poison(be, (size_t)E * es);
        d_ids[v] = dev_poison(be, (size_t)k * 4);
        d_wts[v] = dev_poison(be, (size_t)k * 4);
        d_plan[v] = dev_poison(be, pw * 4);
        d_out[v] = dev_poison(be, (size_t)H * es);
        TRY(op->alloc(be, ((size_t)E + 1) * 8, &d_cnt[v]));   /* the counts, then the fused op's arrival counter */
        TRY(op->memset0(be, d_cnt[v], ((size_t)E + 1) * 8));
    }
    /* the experts: bf16 weights or E4M3 bytes + row scales; [gpt-oss] biases */
    void **wgu = xmalloc((size_t)E * sizeof *wgu), **wdn = xmalloc((size_t)E * sizeof *wdn), **sgu = xmalloc((size_t)E * sizeof *sgu),
         **sdn = xmalloc((size_t)E * sizeof *sdn), **bgu = xmalloc((size_t)E * sizeof *bgu), **bdn = xmalloc((size_t)E * sizeof *bdn);
    for (int e = 0; e < E; e++) {
        if (f8) {
            uint8_t *q = rand_e4m3(c, (size_t)2 * I * H), *qd = rand_e4m3(c, (size_t)H * I);
            float *s1 = rand_vec(c, (size_t)2 * I, 1.0f / (128.0f * sqrtf((float)H)), 0.5f / (128.0f * sqrtf((float)H)));
            float *s2 = rand_vec(c, (size_t)H, 1.0f / (128.0f * sqrtf((float)I)), 0.5f / (128.0f * sqrtf((float)I)));
            wgu[e] = dev_bytes(be, q, (size_t)2 * I * H);
            wdn[e] = dev_bytes(be, qd, (size_t)H * I);
            sgu[e] = dev_vals(be, SITS_DT_F32, s1, (size_t)2 * I);
            sdn[e] = dev_vals(be, SITS_DT_F32, s2, (size_t)H);
            free(q);
            free(qd);
            free(s1);
            free(s2);
        } else {
            float *g = rand_vec(c, (size_t)2 * I * H, 0.0f, 1.0f / sqrtf((float)H)), *d = rand_vec(c, (size_t)H * I, 0.0f, 1.0f / sqrtf((float)I));
            wgu[e] = dev_weight(be, g, 2 * I, H);
            wdn[e] = dev_weight(be, d, H, I);
            sgu[e] = sdn[e] = NULL;
            free(g);
            free(d);
        }
        bgu[e] = bdn[e] = NULL;
        if (epi) {
            float *b1 = rand_vec(c, (size_t)2 * I, 0.0f, 0.3f), *b2 = rand_vec(c, (size_t)H, 0.0f, 0.1f);
            bgu[e] = dev_acts(be, b1, (size_t)2 * I);
            bdn[e] = dev_acts(be, b2, (size_t)H);
            free(b1);
            free(b2);
        }
    }
    void *ptrs[6][1] = { { NULL } }, **host[6] = { wgu, wdn, sgu, sdn, bgu, bdn };
    for (int a = 0; a < 6; a++) {
        TRY(op->alloc(be, (size_t)E * sizeof(void *), &ptrs[a][0]));
        TRY(op->upload(be, ptrs[a][0], host[a], (size_t)E * sizeof(void *)));
    }
    const void *const *pgu = (const void *const *)ptrs[0][0], *const *pdn = (const void *const *)ptrs[1][0];
    const float *const *psg = f8 ? (const float *const *)ptrs[2][0] : NULL, *const *psd = f8 ? (const float *const *)ptrs[3][0] : NULL;
    const sits_moe_epi_t ep = { (const void *const *)ptrs[4][0], (const void *const *)ptrs[5][0], epi, 1.702f, 7.0f };
    /* v 0: the separate ops */
    TRY(op->matmul(be, d_log[0], d_x, d_wr, d_br, 1, H, E));
    TRY(op->moe_topk(be, d_ids[0], d_wts[0], d_log[0], 1, E, k, 1));
    TRY(op->moe_route(be, d_plan[0], d_cnt[0], d_ids[0], NULL, 1, k, E, 0, E));
    TRY(op->moe_experts(be, d_y, d_act, d_x, d_plan[0], pgu, pdn, psg, psd, d_q8, epi ? &ep : NULL, 1, k, E, H, I));
    TRY(op->moe_combine_slots(be, d_out[0], d_y, d_wts[0], NULL, 1, k, H));
    /* v 1: the fused ops, the router twice */
    setenv("SITS_MOE_FUSE", "1", 1);
    uint32_t *sync = (uint32_t *)((uint64_t *)d_cnt[1] + E);
    size_t bad = 0;
    for (int rep = 0; rep < 2; rep++) {
        sits_status_t st = op->moe_select(be, d_log[1], d_ids[1], d_wts[1], d_plan[1], d_cnt[1], sync, d_x, d_wr, d_br, NULL, H, E, k,
                                          1, 0, E);
        if (st != SITS_OK) {
            printf("FAIL %-58s moe_select returned %d\n", what, (int)st);
            bad++;
        }
    }
    sits_status_t st = op->moe_experts_combine(be, d_out[1], d_act, d_x, d_plan[1], d_ids[1], d_wts[1], pgu, pdn, psg, psd, d_q8,
                                               epi ? &ep : NULL, k, E, H, I);
    if (st != SITS_OK) {
        printf("FAIL %-58s moe_experts_combine returned %d\n", what, (int)st);
        bad++;
    }
    TRY(op->sync(be));
    const size_t bytes[5] = { (size_t)E * es, (size_t)k * 4, (size_t)k * 4, pw * 4, ((size_t)E + 1) * 8 };
    void **bufs[5] = { d_log, d_ids, d_wts, d_plan, d_cnt };
    const char *names[5] = { "logits", "ids", "weights", "plan", "counts" };
    for (int i = 0; i < 5; i++) {
        unsigned char *a = xmalloc(bytes[i]), *b = xmalloc(bytes[i]);
        TRY(op->download(be, a, bufs[i][0], bytes[i]));
        TRY(op->download(be, b, bufs[i][1], bytes[i]));
        if (i == 4) {   /* two calls: twice the counts; the counter word back at 0 */
            uint64_t *ca = (uint64_t *)a, *cb = (uint64_t *)b;
            for (int e = 0; e < E; e++) ca[e] *= 2;
            if (cb[E] != 0) printf("FAIL %-58s arrival counter left at %llu\n", what, (unsigned long long)cb[E]);
        }
        if (memcmp(a, b, i == 3 ? (size_t)(2 + 2 * E + k) * 4 : bytes[i]) != 0) {
            printf("FAIL %-58s %s differ from the separate ops'\n", what, names[i]);
            bad++;
        }
        free(a);
        free(b);
    }
    uint16_t *oa = xmalloc((size_t)H * es), *ob = xmalloc((size_t)H * es);
    TRY(op->download(be, oa, d_out[0], (size_t)H * es));
    TRY(op->download(be, ob, d_out[1], (size_t)H * es));
    size_t nd = 0;
    for (int h = 0; h < H; h++) nd += oa[h] != ob[h];
    if (nd) printf("FAIL %-58s out: %zu of %d values differ from moe_experts + moe_combine_slots\n", what, nd, H);
    bad += nd != 0;
    c->checks++;
    if (bad) c->failures++;
    else printf("ok   %-58s router, plan and out == the separate ops, byte for byte\n", what);
    free(oa);
    free(ob);
    for (int e = 0; e < E; e++) {
        void *d[6] = { wgu[e], wdn[e], sgu[e], sdn[e], bgu[e], bdn[e] };
        for (int a = 0; a < 6; a++)
            if (d[a]) dev_free(be, d[a]);
    }
    for (int a = 0; a < 6; a++) {
        dev_free(be, ptrs[a][0]);
        free(host[a]);
    }
    for (int v = 0; v < 2; v++) {
        void *d[6] = { d_log[v], d_ids[v], d_wts[v], d_plan[v], d_out[v], d_cnt[v] };
        for (int a = 0; a < 6; a++) dev_free(be, d[a]);
    }
    dev_free(be, d_x);
    dev_free(be, d_wr);
    if (d_br) dev_free(be, d_br);
    dev_free(be, d_act);
    dev_free(be, d_y);
    if (d_q8) dev_free(be, d_q8);
    free(x);
    free(wr);
    free(br);
}

/* [moe grouped] moe_grouped on the cuda backend: rows of E experts (counts[e] each, expert-major; 0, 1 and the edges of
 * the 64-row tiles among them), bf16 weights, with gpt-oss's biases and clamped SwiGLU when epi. References in double:
 * act from the host's inputs (g, u rounded to bf16 as backend.h defines them; atol 2 % of the RMS, rtol 1 %: one bf16
 * rounding of g or u moves act by up to 0.8 %), y from the device's own act (one rounding + the fp32 order: atol 0.2 % of
 * the RMS, rtol 0.5 %). Outputs start as NaN poison, so a row or column the kernels skip fails. */
static void test_moe_grouped(ctx_t *c, int E, int H, int I, int epi, const int *counts)
{
    sits_backend_t *be = c->be[1];
    char what[160];
    int R = 0, nt = 0;
    for (int e = 0; e < E; e++) R += counts[e];
    snprintf(what, sizeof what, "moe_grouped E %d H %d I %d rows %d%s", E, H, I, R, epi ? " +bias oai" : "");
    if (!be->ops->moe_grouped) {
        c->checks++;
        c->failures++;
        printf("FAIL %-58s the cuda backend has no moe_grouped\n", what);
        return;
    }
    int32_t *off = xmalloc((size_t)(E + 1) * 4), *tiles = xmalloc((size_t)2 * (R / SITS_MOE_GROUPED_ROWS + E) * 4), *row_e = xmalloc((size_t)R * 4);
    off[0] = 0;
    for (int e = 0; e < E; e++) {
        off[e + 1] = off[e] + counts[e];
        for (int r = off[e]; r < off[e + 1]; r++) row_e[r] = e;
        for (int r = off[e]; r < off[e + 1]; r += SITS_MOE_GROUPED_ROWS, nt++) {
            tiles[2 * nt] = e;
            tiles[2 * nt + 1] = r;
        }
    }
    float *x = rand_vec(c, (size_t)R * H, 0.0f, 1.0f);
    float **wgu = xmalloc((size_t)E * sizeof *wgu), **wdn = xmalloc((size_t)E * sizeof *wdn);
    float **bgu = xmalloc((size_t)E * sizeof *bgu), **bdn = xmalloc((size_t)E * sizeof *bdn);
    void **d_wgu = xmalloc((size_t)E * sizeof(void *)), **d_wdn = xmalloc((size_t)E * sizeof(void *));
    void **d_bgu = xmalloc((size_t)E * sizeof(void *)), **d_bdn = xmalloc((size_t)E * sizeof(void *));
    for (int e = 0; e < E; e++) {
        wgu[e] = rand_vec(c, (size_t)2 * I * H, 0.0f, 1.0f / sqrtf((float)H));
        wdn[e] = rand_vec(c, (size_t)H * I, 0.0f, 1.0f / sqrtf((float)I));
        bgu[e] = epi ? rand_vec(c, (size_t)2 * I, 0.0f, 0.5f) : NULL;
        bdn[e] = epi ? rand_vec(c, (size_t)H, 0.0f, 0.1f) : NULL;
        d_wgu[e] = dev_weight(be, wgu[e], 2 * I, H);
        d_wdn[e] = dev_weight(be, wdn[e], H, I);
        d_bgu[e] = epi && e % 3 != 2 ? dev_acts(be, bgu[e], (size_t)2 * I) : NULL;   /* every third expert: no bias */
        d_bdn[e] = epi && e % 3 != 2 ? dev_acts(be, bdn[e], (size_t)H) : NULL;
    }
    void *ptrs[4] = { NULL, NULL, NULL, NULL }, *tabs[4] = { d_wgu, d_wdn, d_bgu, d_bdn };
    for (int i = 0; i < 4; i++) {
        TRY(be->ops->alloc(be, (size_t)E * sizeof(void *), &ptrs[i]));
        TRY(be->ops->upload(be, ptrs[i], tabs[i], (size_t)E * sizeof(void *)));
    }
    const float alpha = 1.702f, limit = 7.0f;
    const sits_moe_epi_t ep = { (const void *const *)ptrs[2], (const void *const *)ptrs[3], epi, alpha, limit };
    void *d_x = dev_acts(be, x, (size_t)R * H), *d_off = dev_i32(be, off, (size_t)E + 1), *d_tiles = dev_i32(be, tiles, (size_t)2 * nt);
    void *d_act = dev_poison(be, (size_t)R * I * 2 + 16), *d_y = dev_poison(be, (size_t)R * H * 2 + 16);
    TRY(be->ops->moe_grouped(be, d_y, d_act, d_x, d_off, d_tiles, nt, (const void *const *)ptrs[0], (const void *const *)ptrs[1],
                             epi ? &ep : NULL, H, I));
    float *act = host_f32(be, d_act, (size_t)R * I), *y = host_f32(be, d_y, (size_t)R * H);
    float *aref = xmalloc((size_t)R * I * sizeof *aref), *yref = xmalloc((size_t)R * H * sizeof *yref);
    for (int r = 0; r < R; r++) {
        const int e = row_e[r];
        const int hb = epi && e % 3 != 2;
        const float *xr = x + (size_t)r * H;
        for (int f = 0; f < I; f++) {
            double g = 0.0, u = 0.0;
            const float *wg = wgu[e] + (size_t)f * H, *wu = wgu[e] + (size_t)(I + f) * H;
            for (int j = 0; j < H; j++) {
                g += (double)xr[j] * wg[j];
                u += (double)xr[j] * wu[j];
            }
            if (hb) {
                g += bgu[e][f];
                u += bgu[e][I + f];
            }
            float gb = bf((float)g), ub = bf((float)u), a;
            if (epi) {   /* transformers' GptOssExperts: gate clamped above, up both sides */
                float gc = gb > limit ? limit : gb, uc = ub > limit ? limit : ub < -limit ? -limit : ub;
                a = (float)((uc + 1.0) * (gc / (1.0 + exp(-(double)alpha * gc))));
            } else {
                a = (float)(gb / (1.0 + exp(-(double)gb)) * ub);
            }
            aref[(size_t)r * I + f] = a;
        }
        for (int h = 0; h < H; h++) {
            double acc = hb ? bdn[e][h] : 0.0;
            const float *w = wdn[e] + (size_t)h * I, *ar = act + (size_t)r * I;
            for (int j = 0; j < I; j++) acc += (double)ar[j] * w[j];
            yref[(size_t)r * H + h] = (float)acc;
        }
    }
    char w2[180];
    snprintf(w2, sizeof w2, "%s act", what);
    compare(c, w2, aref, act, (size_t)R * I, 0.02 * rms_of(aref, (size_t)R * I) + 1e-6, 1e-2, 0);
    snprintf(w2, sizeof w2, "%s y", what);
    compare(c, w2, yref, y, (size_t)R * H, 2e-3 * rms_of(yref, (size_t)R * H) + 1e-7, 5e-3, 0);
    for (int e = 0; e < E; e++) {
        dev_free(be, d_wgu[e]);
        dev_free(be, d_wdn[e]);
        if (d_bgu[e]) dev_free(be, d_bgu[e]);
        if (d_bdn[e]) dev_free(be, d_bdn[e]);
        free(wgu[e]);
        free(wdn[e]);
        free(bgu[e]);
        free(bdn[e]);
    }
    for (int i = 0; i < 4; i++) dev_free(be, ptrs[i]);
    void *bufs[] = { d_x, d_off, d_tiles, d_act, d_y };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dev_free(be, bufs[i]);
    free(wgu);
    free(wdn);
    free(bgu);
    free(bdn);
    free(d_wgu);
    free(d_wdn);
    free(d_bgu);
    free(d_bdn);
    free(off);
    free(tiles);
    free(row_e);
    free(x);
    free(act);
    free(y);
    free(aref);
    free(yref);
}

static void test_moe_dev(ctx_t *c, int n, int k, int E, int H, int I, int shared) { test_moe_dev_q(c, n, k, E, H, I, shared, 0); }

static void test_moe_all(ctx_t *c)
{
    test_moe_topk(c, 7, 8, 2, 1, 0);        /* Mixtral */
    test_moe_topk(c, 33, 60, 4, 0, 0);      /* Qwen2-MoE-A2.7B */
    test_moe_topk(c, 5, 128, 8, 1, 0);      /* Qwen3-30B-A3B */
    test_moe_topk(c, 3, 1024, 32, 1, 0);    /* the limits */
    test_moe_topk(c, 6, 256, 8, 1, 0);      /* 256 experts (DeepSeek-V3 / Kimi-like): 8 logits a lane */
    test_moe_topk(c, 4, 64, 6, 1, 1);       /* ties everywhere */
    test_moe_combine(c, 9, 3, 20, 2048);    /* top 2 + shared */
    test_moe_combine(c, 17, 8, 64, 4096);
    test_moe_combine(c, 4, 2, 5, 33);       /* odd width */
    test_moe_route_range(c, 64, 8, 128, 64, 64);    /* [moe dev] EP 2, rank 1 */
    test_moe_route_range(c, 16, 2, 8, 2, 2);        /* Mixtral at EP 4, rank 1 */
    test_moe_route_range(c, 1, 8, 128, 0, 32);      /* EP 4 rank 0, batch 1 */
    test_moe_dev(c, 1, 8, 128, 2048, 768, 0);   /* [moe dev] Qwen3-30B-A3B, batch 1 */
    test_moe_dev(c, 16, 8, 128, 512, 96, 1);    /* the default largest device step; a shared expert */
    test_moe_dev(c, 3, 2, 8, 64, 16, 1);        /* Qwen2-MoE-like, tiny */
    test_moe_dev(c, 5, 4, 60, 256, 40, 0);
    test_moe_dev(c, 64, 32, 1024, 64, 8, 0);    /* the route's limits: 2048 slots, 1024 experts */
    test_moe_dev(c, 64, 8, 128, 512, 96, 1);    /* tensor cores (4 slots an expert): one n-tile; I not a multiple of 128 */
    test_moe_dev(c, 32, 2, 8, 256, 64, 1);      /* Mixtral-like, tensor cores */
    test_moe_dev(c, 256, 8, 16, 256, 192, 0);   /* 128 slots an expert: four n-tiles, several chunks */
    test_moe_dev_q(c, 1, 8, 128, 2048, 768, 0, 1);   /* [moe fp8] FP8 experts: the GEMV, then the tensor cores */
    test_moe_dev_q(c, 5, 4, 60, 256, 40, 1, 1);
    test_moe_dev_q(c, 64, 8, 128, 512, 96, 0, 1);
    test_moe_dev_q(c, 256, 8, 16, 256, 192, 1, 1);
    test_moe_fused(c, 128, 8, 2048, 768, 0, 0);   /* [moe fuse] Qwen3-30B-A3B, batch 1 */
    test_moe_fused(c, 128, 8, 2048, 768, 1, 0);   /* FP8 experts */
    test_moe_fused(c, 32, 4, 2880, 64, 0, 1);     /* gpt-oss-20b-like: biases, the clamped SwiGLU, H not a multiple of 2048 */
    test_moe_fused(c, 8, 2, 4096, 1024, 0, 0);    /* Mixtral-like: two router blocks */
    test_moe_fused(c, 62, 4, 256, 40, 1, 1);      /* E not a multiple of the router's 4 rows a block; short rows */
    test_moe_fused(c, 256, 1, 512, 64, 0, 0);     /* top 1; 8 logits a lane */
    {   /* [moe grouped] expert row counts at the tile edges (0, 1, 63, 64, 65, 128, 130) and ordinary ones */
        const int q3[16] = { 0, 1, 63, 64, 65, 128, 130, 7, 200, 0, 33, 97, 16, 2, 64, 150 };
        test_moe_grouped(c, 16, 2048, 768, 0, q3);   /* Qwen3-30B-A3B's shapes */
        const int ox[5] = { 70, 0, 5, 129, 64 };
        test_moe_grouped(c, 5, 264, 40, 1, ox);      /* biases + clamped SwiGLU; K and I not multiples of the tiles */
        const int mx[8] = { 40, 90, 0, 12, 66, 1, 3, 31 };
        test_moe_grouped(c, 8, 4096, 1024, 0, mx);   /* Mixtral-like */
    }
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
    /* gemv_max_tokens 16: every token count the GEMV kernels take (the server's default) */
    sits_backend_params_t params = { .threads = 0, .device = 0, .gemv_max_tokens = 16 };
    TRY(sits_backend_cpu_create(&params, &c.be[0]));
    sits_status_t st = sits_backend_cuda_create(&params, &c.be[1]);
    if (st == SITS_ERR_UNSUPPORTED) {
        printf("SKIP: the cuda backend cannot use gpu 0 (%s; see the log)\n", sits_status_str(st));
        sits_backend_destroy(c.be[0]);
        return 77;
    }
    TRY(st);
    printf("op parity: cpu vs %s (gpu %d of %d)\n", c.be[1]->ops->name, c.be[1]->device, n_dev);
    /* OP_PARITY_ONLY=int4 / moe / rope / dummy / attention / attention8: only the W4A16 cases (a quick check of the INT4
     * kernels) / the MoE ones / RoPE + KV write / the dummy weights / the attention kernels (default choices and both
     * prefill tile orders) / the attention kernels on int8 and fp8 KV / matmul: the bf16 linears / gptoss: [gpt-oss]
     * attention sinks (every prefill kernel choice) and swiglu_oai */
    const char *only = getenv("OP_PARITY_ONLY");
    if (only && strcmp(only, "int4") == 0) goto int4_cases;
    if (only && strcmp(only, "rope") == 0) goto rope_cases;   /* OP_PARITY_ONLY=rope: the RoPE + KV write cases */
    if (only && strcmp(only, "dummy") == 0) goto dummy_cases;   /* OP_PARITY_ONLY=dummy: the dummy weights' cases */
    if (only && strcmp(only, "matmul") == 0) goto matmul_cases;   /* OP_PARITY_ONLY=matmul: the bf16 linears' cases */
    if (only && strcmp(only, "attention8") == 0) {   /* OP_PARITY_ONLY=attention8: the attention cases of 8-bit KV only */
        test_attention_i8(&c, SITS_DT_I8);
        test_attention_i8(&c, SITS_DT_F8_E4M3);
        goto out;
    }
    if (only && strcmp(only, "attention") == 0) {   /* OP_PARITY_ONLY=attention: the attention cases, both tile orders */
        test_attention_all(&c);
        test_attention_i8(&c, SITS_DT_I8);
        test_attention_i8(&c, SITS_DT_F8_E4M3);
        test_attention_sinks(&c);   /* [gpt-oss] */
        goto attention_cases;
    }
    if (only && strcmp(only, "gptoss") == 0) {   /* OP_PARITY_ONLY=gptoss: [gpt-oss] sinks and swiglu_oai */
        test_gptoss_all(&c);
        goto out;
    }
    if (only && strcmp(only, "moe") == 0) {   /* OP_PARITY_ONLY=moe: the mixture-of-experts cases */
        test_moe_all(&c);
        goto out;
    }

    test_upload_weight(&c, SITS_DT_F32, 37, 53, 3, 20, 5, 50, 2);
    test_upload_weight(&c, SITS_DT_F16, 64, 96, 0, 64, 32, 96, 0);
    test_upload_weight(&c, SITS_DT_BF16, 33, 17, 10, 33, 0, 17, 1);
    test_upload_weight(&c, SITS_DT_F32, 3000, 1600, 100, 3000, 0, 1600, 0); /* > one staging chunk */

dummy_cases:
    /* [dummy] a slice of a row (TP), an odd width, a whole row, more rows than the kernels' 16384-block grids */
    test_dummy_rows(&c, 100, 37, 4096, 1024, 2048, 2);
    test_dummy_rows(&c, 0, 5, 1001, 0, 1001, 0);
    test_dummy_rows(&c, 128000, 20000, 64, 8, 33, 1);
    test_dummy_rows(&c, 7, 3, 28672, 0, 28672, 0);
    if (only && strcmp(only, "dummy") == 0) goto out;

    test_embed(&c, 9, 4096, 1000, 500);
    test_embed(&c, 7, 129, 0, 40);
    test_embed(&c, 1, 64, 3, 10);

    test_rmsnorm(&c, 1, 4096, 0, 0, 0);
    test_rmsnorm(&c, 5, 8192, 0, 0, 0);
    test_rmsnorm(&c, 3, 1001, 0, 0, 0);
    test_rmsnorm(&c, 4, 33, 0, 1, 0);
    test_rmsnorm(&c, 6, 4096, 1, 0, 0);
    test_rmsnorm(&c, 3, 77, 1, 0, 0);
    test_rmsnorm(&c, 8, 2304, 0, 0, 1);   /* [families] Gemma 2 2B's hidden size */
    test_rmsnorm(&c, 3, 77, 0, 0, 1);

matmul_cases:
    test_matmul(&c, 1, 4096, 1024, 0);
    test_matmul(&c, 8, 1024, 3072, 1);
    test_matmul(&c, 33, 1000, 520, 1);
    test_matmul(&c, 64, 512, 256, 0);
    test_matmul(&c, 3, 130, 66, 1);
    test_matmul(&c, 5, 127, 33, 0);
    /* [perf: decode gemv] 1 .. 16 tokens: the GEMV kernels (rows past a tile, long and short rows) */
    test_matmul(&c, 2, 4096, 1000, 1);
    test_matmul(&c, 4, 14336, 520, 0);
    test_matmul(&c, 7, 520, 72, 1);
    test_matmul(&c, 6, 2048, 6, 0);
    test_matmul(&c, 3, 8, 17, 1);
    test_matmul(&c, 12, 4096, 1000, 1);   /* [perf: mma gemv] two 8-token blocks */
    test_matmul(&c, 16, 14336, 72, 0);
    test_matmul_rows_invariant(&c, 4096, 1030);
    test_matmul_rows_invariant(&c, 1032, 64);
    if (only && strcmp(only, "matmul") == 0) goto out;

    /* [int4] decode and prefill shapes of an 8B layer (group 128), several token tiles, act-order,
     * a group size not a multiple of 8 and an input count not a multiple of 8 (byte path), per channel;
     * n >= 16 without act-order and with groups of a multiple of 32 runs the tensor-core kernel (partial
     * 64 x 64 tiles at the edges) */
int4_cases:
    test_matmul_w4(&c, 1, 4096, 1024, 128, 0, 0);
    test_matmul_w4(&c, 8, 4096, 3072, 128, 0, 1);
    test_matmul_w4(&c, 33, 1024, 520, 64, 1, 1);
    test_matmul_w4(&c, 64, 512, 256, 32, 0, 0);
    test_matmul_w4(&c, 3, 520, 66, 26, 0, 1);
    test_matmul_w4(&c, 5, 130, 33, 130, 0, 0);
    test_matmul_w4(&c, 17, 2048, 96, 128, 1, 0);
    test_matmul_w4(&c, 100, 4096, 1024, 128, 0, 1);
    test_matmul_w4(&c, 33, 1024, 520, 64, 0, 0);
    test_matmul_w4(&c, 16, 96, 72, 96, 0, 1);
    test_matmul_w4(&c, 130, 256, 136, 32, 0, 0);
    /* n <= 64, groups of a multiple of 32, in % 128 == 0: the tensor-core GEMV (1, 2, 4 or 8 n-tiles; one or two
     * m-tiles a warp); else up to 32 tokens the GEMV kernel (token tiles of 1, 2, 4, 8) */
    test_matmul_w4(&c, 2, 2048, 256, 32, 0, 1);
    test_matmul_w4(&c, 5, 4096, 520, 128, 0, 0);
    test_matmul_w4(&c, 20, 1024, 264, 64, 0, 1);
    test_matmul_w4(&c, 32, 14336, 128, 128, 0, 0);
    test_matmul_w4(&c, 4, 256, 8, 256, 0, 0);
    test_matmul_w4(&c, 12, 1024, 200, 64, 0, 1);    /* tensor-core GEMV: two n-tiles, 4-byte loads, rows past out */
    test_matmul_w4(&c, 16, 2048, 48, 32, 0, 0);
    test_matmul_w4(&c, 9, 512, 1000, 128, 0, 0);
    test_matmul_w4(&c, 24, 1024, 200, 128, 0, 1);   /* 17-32 tokens: two m-tiles a warp, rows past out */
    test_matmul_w4(&c, 48, 2048, 72, 64, 0, 1);     /* 33-64 tokens: eight n-tiles */
    /* the persistent GEMV w4a16_pgemv_kernel (off by default: SITS_W4_PG_MAX_N=2 gives it 1-2 tokens, groups of 128k,
     * in >= 1024): a long row (14 k-blocks a warp), warps of 2 and 1 k-blocks over a tile and a half, groups of 256, 70B's
     * longest row, many tiles a block (1792 tiles); 2 x 28672 inputs does not fit its shared memory (the tensor-core
     * GEMV's) */
    setenv("SITS_W4_PG_MAX_N", "2", 1);
    test_matmul_w4(&c, 1, 4096, 1024, 128, 0, 0);
    test_matmul_w4(&c, 1, 14336, 4096, 128, 0, 0);
    test_matmul_w4(&c, 2, 1152, 40, 128, 0, 1);
    test_matmul_w4(&c, 2, 8192, 1000, 256, 0, 1);
    test_matmul_w4(&c, 1, 28672, 48, 128, 0, 0);
    test_matmul_w4(&c, 2, 4096, 28672, 128, 0, 0);
    test_matmul_w4(&c, 2, 28672, 40, 128, 0, 1);
    unsetenv("SITS_W4_PG_MAX_N");
    /* [int4 tiles] the tensor-core GEMV at 3-64 tokens (one or two passes; two m-tiles a block from 9 tokens), rows past
     * out (1000, 40: a partial last block and tile), a group of 256, a k range shorter than the 8 warps' (1152 inputs) */
    test_matmul_w4(&c, 3, 4096, 1000, 128, 0, 1);
    test_matmul_w4(&c, 9, 1152, 40, 128, 0, 0);
    test_matmul_w4(&c, 16, 2048, 1000, 32, 0, 1);
    test_matmul_w4(&c, 17, 8192, 520, 256, 0, 1);
    test_matmul_w4(&c, 32, 4096, 3072, 128, 0, 0);
    test_matmul_w4(&c, 64, 2048, 136, 128, 0, 1);
    /* [int4 tiles] 1-2 tokens on the tensor-core GEMV (the default) */
    test_matmul_w4(&c, 1, 4096, 1024, 128, 0, 0);
    test_matmul_w4(&c, 2, 1152, 40, 128, 0, 1);
    test_matmul_w4(&c, 1, 8192, 28672, 128, 0, 0);
    /* [int4 tc2] 1-8 tokens with 16 warps a block (chosen on small grids: 1 x 4096 -> 1024 above; forced here on a larger
     * one, with groups of 32 and a k range of 9 k-blocks), and 8 warps forced on a small grid */
    setenv("SITS_W4_TC_W", "16", 1);
    test_matmul_w4(&c, 1, 4096, 8200, 128, 0, 1);
    test_matmul_w4(&c, 7, 1152, 40, 32, 0, 0);
    setenv("SITS_W4_TC_W", "8", 1);
    test_matmul_w4(&c, 5, 14336, 1000, 128, 0, 1);
    unsetenv("SITS_W4_TC_W");
    /* [perf: w4 waves] 1-8 tokens on blocks of 4 warps: chosen for 10240 rows on 80-159 SMs (640 tiles, more than 4 and
     * at most 8 an SM: Llama-3 70B qkv), forced with groups of 32 on rows past out */
    test_matmul_w4(&c, 1, 8192, 10240, 128, 0, 1);
    setenv("SITS_W4_TC_W", "4", 1);
    test_matmul_w4(&c, 6, 1152, 1000, 32, 0, 0);
    unsetenv("SITS_W4_TC_W");
    /* [int4 rows] 17-32 tokens on blocks of 8 row tiles, one a warp (the default on large grids: 70B gate_up's 57344
     * rows, below; small grids and 1-16 tokens take one row tile a block, cases above): forced on small grids and at 9-16
     * tokens too, rows past out (a partial last block: warps past out repeat the last tile, never written), groups of 32
     * and 256, 70B's longest k range; and one row tile a block on a large grid (SITS_W4_TC_RW=1) */
    test_matmul_w4(&c, 27, 8192, 57344, 128, 0, 1);
    setenv("SITS_W4_TC_RW", "8", 1);
    test_matmul_w4(&c, 32, 4096, 1000, 128, 0, 1);
    test_matmul_w4(&c, 12, 1152, 40, 32, 0, 0);
    test_matmul_w4(&c, 20, 256, 520, 128, 0, 0);
    test_matmul_w4(&c, 31, 28672, 1064, 128, 0, 1);
    test_matmul_w4(&c, 16, 8192, 296, 256, 0, 0);
    setenv("SITS_W4_TC_RW", "1", 1);
    test_matmul_w4(&c, 14, 4096, 28672, 128, 0, 0);
    test_matmul_w4(&c, 25, 2048, 3000, 64, 0, 1);
    unsetenv("SITS_W4_TC_RW");
    /* n > 64 (or act-order) with the scratch reserved (last: the scratch stays): dequantise, then the bf16 GEMM */
    w4_case(&c, 33, 1024, 520, 64, 1, 1, 1);
    w4_case(&c, 100, 4096, 1024, 128, 0, 1, 1);
    w4_case(&c, 130, 256, 136, 32, 0, 0, 1);
    if (only && strcmp(only, "int4") == 0) goto out;

    test_rope(&c, 7, 8, 2, 128, 500000.0f, 0);
    test_rope(&c, 5, 4, 4, 64, 10000.0f, 0);
    test_rope(&c, 3, 3, 1, 80, 1000000.0f, 0);
    test_rope(&c, 9, 32, 32, 96, 10000.0f, 1);   /* [families] Phi-3-mini's longrope sets */
    test_rope(&c, 5, 4, 2, 16, 10000.0f, 1);

    test_kv_write(&c, 11, 8, 2, 128, 64);
    test_kv_write(&c, 6, 3, 1, 36, 20);
    test_kv_write(&c, 9, 5, 1, 6, 16); /* kv_dim 6: scalar path */

    test_attention_all(&c); /* [attention] */

    /* [int8 kv] [fp8 kv] */
    for (int k = 0; k < 2; k++) {
        sits_dtype_t dt = k ? SITS_DT_F8_E4M3 : SITS_DT_I8;
        test_kv_write_i8(&c, dt, 13, 8, 2, 128, 16, 4);
        test_kv_write_i8(&c, dt, 9, 4, 1, 64, 5, 3);   /* scales padded (5 slots x 1 head) */
        test_kv_write_i8(&c, dt, 7, 3, 3, 18, 8, 2);   /* odd head size */
        test_kv_write_i8(&c, dt, 40, 32, 8, 128, 16, 4);
        test_attention_i8(&c, dt);
    }

rope_cases:
    /* [rope + kv write] Llama-3-8B TP 1 / 2 head counts, GQA 4, one KV head, small and odd head sizes; 301 tokens:
     * [perf: row kernels] the vectorised kernel's many blocks and a partial last one */
    for (int i8 = 0; i8 < 3; i8++) {
        test_rope_kv_write(&c, 9, 32, 8, 128, 16, 4, i8);
        test_rope_kv_write(&c, 301, 32, 8, 128, 16, 24, i8);
        test_rope_kv_write(&c, 3, 16, 4, 128, 16, 2, i8);
        test_rope_kv_write(&c, 13, 4, 1, 64, 5, 3, i8);
        test_rope_kv_write(&c, 6, 4, 1, 16, 4, 2, i8);
        test_rope_kv_write(&c, 5, 3, 3, 80, 8, 1, i8);
        test_rope_kv_write(&c, 4, 2, 2, 256, 16, 1, i8);
        test_rope_kv_write_n(&c, 9, 32, 4, 128, 16, 4, i8, 1);   /* [families] Qwen3-30B-A3B's heads, QK-norm fused */
        test_rope_kv_write_n(&c, 13, 4, 1, 64, 5, 3, i8, 1);
        test_rope_kv_write_n(&c, 4, 2, 2, 256, 16, 1, i8, 1);
    }
    if (only && strcmp(only, "rope") == 0) goto out;

    test_silu_mul(&c, 3, 11008, 0);
    test_silu_mul(&c, 7, 37, 0);
    test_silu_mul(&c, 1, 8, 0);

    /* [families] Qwen3-8B q (32 x 128 of a 48-head qkv row) and k heads, a TP shard, odd sizes */
    test_rmsnorm_heads(&c, 7, 48 * 128, 0, 32, 128);
    test_rmsnorm_heads(&c, 7, 48 * 128, 32 * 128, 8, 128);
    test_rmsnorm_heads(&c, 1, 6 * 24, 4 * 24, 1, 24);
    test_rmsnorm_heads(&c, 5, 301, 17, 3, 70);
    test_rmsnorm_heads(&c, 3, 8 * 256, 0, 4, 256);
    test_silu_mul(&c, 3, 9216, 1);   /* GeGLU, Gemma 2 2B */
    test_silu_mul(&c, 7, 37, 1);
    test_silu_mul(&c, 1, 8, 1);
    test_swiglu_oai_all(&c);   /* [gpt-oss] */
    test_scale_softcap(&c, (size_t)5 * 2304, 48.0f, 30.0f);
    test_scale_softcap(&c, 1001, 59.75f, 5.0f);
    test_attention_softcap(&c);
    test_attention_sinks(&c);   /* [gpt-oss] */
attention_cases:
    /* [wgmma] the default choice at 128-row tiles (the warpgroup-MMA kernel; 128-key tiles with bf16 KV): 96 heads
     * x 768 tokens = 6 x 96 CTAs of 128 rows, past twice the H200's 132 SMs x 2 (att_prefill_mf), on each KV type */
    {
        static const sits_dtype_t kv[] = { SITS_DT_BF16, SITS_DT_I8, SITS_DT_F8_E4M3 };
        for (int i = 0; i < 3; i++) {
            c.kv_i8 = kv[i] != SITS_DT_BF16;
            c.kv_q8 = kv[i];
            test_attn_prefill(&c, (attn_shape_t){ 96, 8, 128, 16, 0 }, 100, 768);
        }
        c.kv_i8 = 0;
    }
    if (only && strcmp(only, "attention") == 0) goto index_order;
    /* [attention] the prefill kernel's 128-row tiles: the cases above get them only where their CTAs fill
     * the GPU twice over (att_prefill_mf), which none of them does but the one above: every attention case
     * again with them */
    printf("-- attention again, prefill tiles of 128 rows (SITS_ATT_PF_ROWS=128)\n");
    setenv("SITS_ATT_PF_ROWS", "128", 1);
    test_attention_all(&c);
    test_attention_i8(&c, SITS_DT_I8);
    test_attention_i8(&c, SITS_DT_F8_E4M3);
    test_attention_softcap(&c);
    test_attention_sinks(&c);
    /* [wgmma] the warpgroup-MMA kernel (head_dim 128; the rest falls back to 64 rows) on every KV type: by default
     * only 128-row tiles get it (bf16 KV with 128-key tiles) */
    printf("-- attention again, prefill with warpgroup MMAs (SITS_ATT_PF_ROWS=wg)\n");
    setenv("SITS_ATT_PF_ROWS", "wg", 1);
    test_attention_all(&c);
    test_attention_i8(&c, SITS_DT_I8);
    test_attention_i8(&c, SITS_DT_F8_E4M3);
    test_attention_softcap(&c);
    test_attention_sinks(&c);
    printf("-- attention again, prefill with warpgroup MMAs and 128-key tiles (SITS_ATT_PF_ROWS=wg128, bf16 KV)\n");
    setenv("SITS_ATT_PF_ROWS", "wg128", 1);
    test_attention_all(&c);
    test_attention_softcap(&c);
    test_attention_sinks(&c);
    unsetenv("SITS_ATT_PF_ROWS");
index_order:
    /* the cases above ran the prefill tiles heaviest first (att_pf_order_kernel); the other order too */
    printf("-- attention again, prefill tiles in index order (SITS_ATT_PF_ORDER=index)\n");
    setenv("SITS_ATT_PF_ORDER", "index", 1);
    test_attention_all(&c);
    test_attention_i8(&c, SITS_DT_F8_E4M3);
    unsetenv("SITS_ATT_PF_ORDER");
    if (only && strcmp(only, "attention") == 0) goto out;
    test_gather_rows(&c, 10, 4, 4096);
    test_gather_rows(&c, 7, 9, 65);
    test_upload_paths(&c, (size_t)3 << 20);   /* above the one-DMA threshold for pinned sources */
    test_upload_paths(&c, 4096);
    test_upload_rows(&c, 1024, 4 * 37, 4 * 37, 4 * 8192);   /* [scale] an engine step's block tables: 1024 rows, 8192 wide */
    test_upload_rows(&c, 3, 20, 24, 64);
    test_kv_block_copy(&c, 2, 9, 5, 32768);   /* [kv] an 8B bf16 block of 16 tokens: 32 KiB a layer and K|V */
    test_kv_block_copy(&c, 6, 40, 40, 48);
    test_kv_block_copy(&c, 4, 7, 1, 16);

    test_perf_all(&c); /* [perf] */
    test_moe_all(&c);  /* [moe] */

out:
    sits_backend_destroy(c.be[1]);
    sits_backend_destroy(c.be[0]);
    if (c.failures) {
        printf("FAIL: %d of %d checks failed\n", c.failures, c.checks);
        return 1;
    }
    printf("PASS: %d checks\n", c.checks);
    return 0;
}
