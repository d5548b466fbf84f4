/* test_custom_ar.c -- the custom IPC all-reduce communicator on GPUs (MPI program, one rank per GPU:
 * rank r uses GPU r).
 *
 * Every rank generates the inputs of EVERY rank from a seeded generator (iteration, case, rank), so
 * the expected results come from the host without communication. "Exact" for a bf16 all-reduce is
 * the fp32 sum of the inputs in rank order 0..N-1 rounded once to bf16 (round to nearest even);
 * every result must have those bits. NCCL's result on the same inputs is checked against the same
 * reference (with 2 ranks NCCL rounds the fp32 sum once too), so custom == NCCL bit for bit.
 * Communicators: "auto" (default thresholds: one-shot, two-shot, NCCL above 8 MiB), "one-shot" (every
 * bf16 message up to 8 MiB one-shot), "two-shot" (every one two-shot), and a plain NCCL one.
 *   eager:  sizes 1 .. 4M + 1 elements (odd ones, the 16 KiB decode message, both thresholds and
 *           one past the 8 MiB limit) enqueued back to back, then checked; then two more passes
 *           enqueued back to back (each sums identical values: 4 x the first result, still exact);
 *           misaligned user pointers, with a different alignment on each rank on some iterations.
 *   graph:  all-reduces of several sizes and a fused all-reduce + add + RMSNorm captured into one
 *           CUDA graph per communicator, replayed with new inputs, with eager calls in between and
 *           twice back to back (the device-side flags must survive replays).
 *   fused:  sits_comm_custom_ar_add_rmsnorm with fp32 and bf16 residuals, dims 8192 / 4096 / 1000 /
 *           1001, 1 .. 64 rows (more rows than the kernel's blocks): residual exact against the host,
 *           out within 1 bf16 ulp of a double-precision host RMSNorm and within 1 ulp of the unfused
 *           device path (NCCL all-reduce + the backend's add_rmsnorm); bitwise equality with the
 *           unfused path is reported. [fp8] Each call also quantises out to E4M3, which must be the
 *           host's per-row quantisation of out, bit for bit.
 *   f32:    a f32 all-reduce through the custom communicator (delegated to NCCL).
 *
 * `test_custom_ar --gpus` prints the number of usable GPUs without MPI (for custom_ar_tp2.sh);
 * `test_custom_ar --stall`: rank 0 waits on a custom all-reduce the others never join; the job must
 * be aborted (exit status 3) after the 3 s deadline instead of hanging.
 * Exit 0 pass, 1 fail, 77 skip (no NCCL, fewer GPUs than ranks, or no P2P between the GPUs). */
#include "backend/backend.h"
#include "comm/comm.h"
#include "util/dtype.h"
#include "util/log.h"
#include "util/status.h"

#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef HAVE_NCCL

#define N_ITERS 4
#define MAX_PRINT 5
#define N_CAR 3
#define LIMIT_BYTES ((int64_t)8 << 20)

static const char *CAR_NAME[N_CAR] = { "auto", "one-shot", "two-shot" };
/* max_bytes, oneshot_max_bytes of each custom communicator (-1: default) */
static const int64_t CAR_MAX[N_CAR] = { -1, LIMIT_BYTES, LIMIT_BYTES };
static const int64_t CAR_ONESHOT[N_CAR] = { -1, LIMIT_BYTES, 0 };

static const size_t SIZES[] = { 1, 2, 3, 7, 8, 9, 15, 17, 255, 256, 1000, 4095, 4096, 4097, 8192, 8193, 65535,
                                131072, 131073, 524293, (size_t)1 << 20, ((size_t)1 << 21) + 3, (size_t)4 << 20,
                                ((size_t)4 << 20) + 1 };
#define N_SIZES (sizeof SIZES / sizeof SIZES[0])

typedef struct {
    int rank, size;
    sits_backend_t *be;
    sits_comm_t *nccl;
    sits_comm_t *car[N_CAR];
    long failures, checks;
} ctx_t;

#define TRY(call_) do { sits_status_t s_ = (call_); if (s_ != SITS_OK) { \
    fprintf(stderr, "FAIL rank %d %s:%d: %s -> %s\n", t->rank, __FILE__, __LINE__, #call_, sits_status_str(s_)); \
    MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)

static void *xmalloc(size_t n)
{
    void *p = calloc(1, n ? n : 1);
    if (!p) {
        fprintf(stderr, "FAIL: out of host memory (%zu bytes)\n", n);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return p;
}

/* ---- deterministic inputs: the same on every rank ------------------------------------------- */

typedef struct { uint64_t s; } rng_t;

static rng_t rng_for(int iter, int kase, int rank)
{
    rng_t r = { 0xD1B54A32D192ED03ull ^ ((uint64_t)iter << 44) ^ ((uint64_t)kase << 24) ^ (uint64_t)(rank + 1) };
    for (int i = 0; i < 4; i++) {
        r.s += 0x9E3779B97F4A7C15ull;
        uint64_t z = r.s;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        r.s = z ^ (z >> 31);
    }
    if (!r.s) r.s = 1;
    return r;
}

static uint64_t rng_next(rng_t *r)
{
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545F4914F6CDD1Dull;
}

/* bf16 values in +-[2^-6, 2^7): mixed magnitudes, so that sums round. */
static void gen_bf16(int iter, int kase, int rank, size_t n, uint16_t *out)
{
    rng_t r = rng_for(iter, kase, rank);
    for (size_t i = 0; i < n; i++) {
        uint64_t z = rng_next(&r);
        float m = 1.0f + (float)((z >> 11) & 0xffffff) / 16777216.0f;
        int e = (int)((z >> 40) % 13) - 6;
        float f = ldexpf((z >> 63) ? -m : m, e);
        out[i] = sits_f32_to_bf16(f);
    }
}

/* The reference: sum over ranks (fp32, rank order) of every rank's input, rounded once. in_all: [R][n]. */
static void ref_sum(const uint16_t *in_all, int R, size_t n, uint16_t *out)
{
    for (size_t i = 0; i < n; i++) {
        float s = 0.0f;
        for (int r = 0; r < R; r++) s += sits_bf16_to_f32(in_all[(size_t)r * n + i]);
        out[i] = sits_f32_to_bf16(s);
    }
}

/* ---- checks ---------------------------------------------------------------------------------- */

static void check_bits(ctx_t *t, const char *what, const uint16_t *got, const uint16_t *want, size_t n)
{
    t->checks++;
    if (!memcmp(got, want, n * 2)) return;
    long bad = 0;
    double max_err = 0;
    int printed = 0;
    for (size_t i = 0; i < n; i++) {
        if (got[i] == want[i]) continue;
        double g = sits_bf16_to_f32(got[i]), w = sits_bf16_to_f32(want[i]), err = fabs(g - w);
        if (err > max_err || err != err) max_err = err;
        bad++;
        if (printed++ < MAX_PRINT)
            fprintf(stderr, "FAIL rank %d %s n %zu [%zu]: got %.9g (0x%04x) expected %.9g (0x%04x)\n", t->rank, what, n, i, g,
                    got[i], w, want[i]);
    }
    t->failures++;
    fprintf(stderr, "FAIL rank %d %s n %zu: %ld of %zu elements differ, max |err| %.3g\n", t->rank, what, n, bad, n, max_err);
}

/* One unit in the last place of |v| in bf16 (8 significant bits). */
static double ulp_bf16(double v)
{
    if (v == 0) return ldexp(1.0, -133);
    int e;
    frexp(fabs(v), &e);
    return ldexp(1.0, e - 8);
}

/* |got - ref| <= 1 bf16 ulp of ref, elementwise. */
static void check_ulp(ctx_t *t, const char *what, const uint16_t *got, const double *ref, size_t n)
{
    t->checks++;
    long bad = 0;
    double max_err = 0, max_ratio = 0;
    int printed = 0;
    for (size_t i = 0; i < n; i++) {
        double g = sits_bf16_to_f32(got[i]), err = fabs(g - ref[i]), tol = ulp_bf16(ref[i]);
        if (err > max_err) max_err = err;
        if (err / tol > max_ratio) max_ratio = err / tol;
        if (!(err <= tol)) {
            bad++;
            if (printed++ < MAX_PRINT)
                fprintf(stderr, "FAIL rank %d %s [%zu]: got %.9g expected %.9g (|err| %.3g > tol %.3g)\n", t->rank, what, i, g,
                        ref[i], err, tol);
        }
    }
    if (bad) {
        t->failures++;
        fprintf(stderr, "FAIL rank %d %s: %ld of %zu elements off, max |err| %.3g (%.2f ulp)\n", t->rank, what, bad, n, max_err,
                max_ratio);
    }
}

/* ---- device helpers ---------------------------------------------------------------------------- */

static void *dev_alloc(ctx_t *t, size_t bytes)
{
    void *p = NULL;
    TRY(t->be->ops->alloc(t->be, bytes, &p));
    return p;
}

/* Element offset of the user buffer: 0, or misaligned -- differently on each rank on iteration 1. */
static size_t offset_for(ctx_t *t, int iter)
{
    switch (iter % 4) {
    case 1: return (size_t)(t->rank & 1);
    case 2: return 3;
    default: return 0;
    }
}

/* ---- eager ---------------------------------------------------------------------------------------- */

static void case_eager(ctx_t *t, int ci, int iter)
{
    sits_comm_t *c = t->car[ci];
    int R = t->size;
    size_t off = offset_for(t, iter);
    uint16_t *dev[N_SIZES], *ndev[N_SIZES], *want[N_SIZES];
    char what[96];
    for (size_t s = 0; s < N_SIZES; s++) {
        size_t n = SIZES[s];
        uint16_t *in_all = xmalloc((size_t)R * n * 2);
        for (int r = 0; r < R; r++) gen_bf16(iter, (int)s + 100 * ci, r, n, in_all + (size_t)r * n);
        want[s] = xmalloc(n * 2);
        ref_sum(in_all, R, n, want[s]);
        dev[s] = dev_alloc(t, (n + 8) * 2);
        TRY(t->be->ops->upload(t->be, dev[s] + off, in_all + (size_t)t->rank * n, n * 2));
        ndev[s] = NULL;
        if (ci == 0) { /* NCCL on the same inputs, once per iteration */
            ndev[s] = dev_alloc(t, (n + 8) * 2);
            TRY(t->be->ops->upload(t->be, ndev[s] + off, in_all + (size_t)t->rank * n, n * 2));
        }
        free(in_all);
    }
    /* pass 1: every size back to back, then one wait */
    for (size_t s = 0; s < N_SIZES; s++) {
        TRY(c->ops->allreduce_sum(c, dev[s] + off, SIZES[s], SITS_DT_BF16));
        if (ndev[s]) TRY(t->nccl->ops->allreduce_sum(t->nccl, ndev[s] + off, SIZES[s], SITS_DT_BF16));
    }
    for (size_t s = 0; s < N_SIZES; s++) {
        size_t n = SIZES[s];
        uint16_t *got = xmalloc(n * 2);
        TRY(t->be->ops->download(t->be, got, dev[s] + off, n * 2));
        snprintf(what, sizeof what, "eager %s iter %d off %zu", CAR_NAME[ci], iter, off);
        check_bits(t, what, got, want[s], n);
        if (ndev[s]) {
            TRY(t->be->ops->download(t->be, got, ndev[s] + off, n * 2));
            snprintf(what, sizeof what, "nccl (vs fp32 sum rounded once) iter %d off %zu", iter, off);
            check_bits(t, what, got, want[s], n);
        }
        free(got);
    }
    /* passes 2 and 3 back to back: 4 x the first result (doubling is exact) */
    for (int pass = 0; pass < 2; pass++)
        for (size_t s = 0; s < N_SIZES; s++) TRY(c->ops->allreduce_sum(c, dev[s] + off, SIZES[s], SITS_DT_BF16));
    for (size_t s = 0; s < N_SIZES; s++) {
        size_t n = SIZES[s];
        uint16_t *got = xmalloc(n * 2);
        for (size_t i = 0; i < n; i++) want[s][i] = sits_f32_to_bf16(4.0f * sits_bf16_to_f32(want[s][i]));
        TRY(t->be->ops->download(t->be, got, dev[s] + off, n * 2));
        snprintf(what, sizeof what, "eager %s x3 passes iter %d off %zu", CAR_NAME[ci], iter, off);
        check_bits(t, what, got, want[s], n);
        free(got);
        t->be->ops->free(t->be, dev[s]);
        if (ndev[s]) t->be->ops->free(t->be, ndev[s]);
        free(want[s]);
    }
}

/* ---- fused all-reduce + add + RMSNorm ------------------------------------------------------------- */

typedef struct {
    int n, dim, res_f32;
    uint16_t *x_all;        /* [R][n * dim] every rank's partial sums */
    float *w;               /* [dim] fp32 norm weights (weights.h), values bf16 cannot hold */
    void *res0;             /* [n * dim] residual before (fp32 or bf16), the same on every rank */
    void *res_want;         /* residual after */
    double *out_ref;        /* [n * dim] */
} fused_case_t;

static void fused_make(ctx_t *t, fused_case_t *f, int iter, int kase, int n, int dim, int res_f32)
{
    int R = t->size;
    size_t m = (size_t)n * dim, es = res_f32 ? 4 : 2;
    f->n = n;
    f->dim = dim;
    f->res_f32 = res_f32;
    f->x_all = xmalloc((size_t)R * m * 2);
    for (int r = 0; r < R; r++) gen_bf16(iter, kase, r, m, f->x_all + (size_t)r * m);
    uint16_t *wb = xmalloc((size_t)dim * 2);
    gen_bf16(iter, kase, 1000, (size_t)dim, wb);
    f->w = xmalloc((size_t)dim * sizeof(float));
    for (int j = 0; j < dim; j++) f->w[j] = sits_bf16_to_f32(wb[j]) * 1.0009765625f;
    free(wb);
    uint16_t *rb = xmalloc(m * 2), *s = xmalloc(m * 2);
    gen_bf16(iter, kase, 2000, m, rb);
    ref_sum(f->x_all, R, m, s);
    f->res0 = xmalloc(m * es);
    f->res_want = xmalloc(m * es);
    f->out_ref = xmalloc(m * sizeof(double));
    for (int row = 0; row < n; row++) {
        double ss = 0;
        for (int j = 0; j < dim; j++) {
            size_t i = (size_t)row * dim + j;
            float r0 = sits_bf16_to_f32(rb[i]), sv = sits_bf16_to_f32(s[i]), r1;
            if (res_f32) {
                ((float *)f->res0)[i] = r0 * 1.0009765625f; /* an fp32 value that is not a bf16 */
                r1 = ((float *)f->res0)[i] + sv;
                ((float *)f->res_want)[i] = r1;
            } else {
                ((uint16_t *)f->res0)[i] = rb[i];
                uint16_t h = sits_f32_to_bf16(r0 + sv);
                ((uint16_t *)f->res_want)[i] = h;
                r1 = sits_bf16_to_f32(h);
            }
            ss += (double)r1 * r1;
        }
        double inv = 1.0 / sqrt(ss / dim + 1e-5);
        for (int j = 0; j < dim; j++) {
            size_t i = (size_t)row * dim + j;
            double r1 = res_f32 ? ((float *)f->res_want)[i] : sits_bf16_to_f32(((uint16_t *)f->res_want)[i]);
            f->out_ref[i] = f->w[j] * (r1 * inv);
        }
    }
    free(rb);
    free(s);
}

static void fused_free(fused_case_t *f)
{
    free(f->x_all);
    free(f->w);
    free(f->res0);
    free(f->res_want);
    free(f->out_ref);
}

/* Device buffers of one fused call (16-byte aligned: cudaMalloc). */
typedef struct { uint16_t *x, *out; float *w; void *res; } fused_dev_t;

static void fused_upload(ctx_t *t, const fused_case_t *f, fused_dev_t *d, int alloc)
{
    size_t m = (size_t)f->n * f->dim, es = f->res_f32 ? 4 : 2;
    if (alloc) {
        d->x = dev_alloc(t, m * 2);
        d->w = dev_alloc(t, (size_t)f->dim * sizeof(float));
        d->out = dev_alloc(t, m * 2);
        d->res = dev_alloc(t, m * es);
    }
    TRY(t->be->ops->upload(t->be, d->x, f->x_all + (size_t)t->rank * m, m * 2));
    TRY(t->be->ops->upload(t->be, d->w, f->w, (size_t)f->dim * sizeof(float)));
    TRY(t->be->ops->upload(t->be, d->res, f->res0, m * es));
}

static void fused_dev_free(ctx_t *t, fused_dev_t *d)
{
    t->be->ops->free(t->be, d->x);
    t->be->ops->free(t->be, d->w);
    t->be->ops->free(t->be, d->out);
    t->be->ops->free(t->be, d->res);
}

/* Download and check out and residual; unfused_out (may be NULL): the unfused path's out. */
static void fused_check(ctx_t *t, const char *what, const fused_case_t *f, const fused_dev_t *d, const uint16_t *unfused_out)
{
    size_t m = (size_t)f->n * f->dim, es = f->res_f32 ? 4 : 2;
    uint16_t *out = xmalloc(m * 2);
    void *res = xmalloc(m * es);
    char w2[160];
    TRY(t->be->ops->download(t->be, out, d->out, m * 2));
    TRY(t->be->ops->download(t->be, res, d->res, m * es));
    t->checks++;
    if (memcmp(res, f->res_want, m * es)) {
        t->failures++;
        long bad = 0;
        for (size_t i = 0; i < m; i++) {
            int differ = f->res_f32 ? ((uint32_t *)res)[i] != ((uint32_t *)f->res_want)[i]
                                    : ((uint16_t *)res)[i] != ((uint16_t *)f->res_want)[i];
            if (!differ) continue;
            if (bad++ < MAX_PRINT) {
                double g = f->res_f32 ? ((float *)res)[i] : sits_bf16_to_f32(((uint16_t *)res)[i]);
                double e = f->res_f32 ? ((float *)f->res_want)[i] : sits_bf16_to_f32(((uint16_t *)f->res_want)[i]);
                fprintf(stderr, "FAIL rank %d %s residual [%zu]: got %.9g expected %.9g\n", t->rank, what, i, g, e);
            }
        }
        fprintf(stderr, "FAIL rank %d %s: residual differs in %ld of %zu elements (want exact)\n", t->rank, what, bad, m);
    }
    snprintf(w2, sizeof w2, "%s out vs host rmsnorm", what);
    check_ulp(t, w2, out, f->out_ref, m);
    if (unfused_out) {
        double *u = xmalloc(m * sizeof(double));
        long same = 0;
        for (size_t i = 0; i < m; i++) {
            u[i] = sits_bf16_to_f32(unfused_out[i]);
            same += out[i] == unfused_out[i];
        }
        snprintf(w2, sizeof w2, "%s out vs unfused path", what);
        check_ulp(t, w2, out, u, m);
        if (t->rank == 0 && same != (long)m)
            printf("note: %s: %ld of %zu outputs differ from the unfused path in the last bit\n", what, (long)m - same, m);
        free(u);
    }
    free(out);
    free(res);
}

/* [fp8] q [n, dim] / qs [n] (device) must be util/dtype.h's per-row E4M3 quantisation of d->out as
 * stored, bit for bit. */
static void fused_check_fp8(ctx_t *t, const char *what, const fused_case_t *f, const fused_dev_t *d, const uint8_t *dq,
                            const float *dqs)
{
    size_t m = (size_t)f->n * f->dim;
    uint16_t *out = xmalloc(m * 2);
    uint8_t *q = xmalloc(m);
    float *qs = xmalloc((size_t)f->n * 4);
    TRY(t->be->ops->download(t->be, out, d->out, m * 2));
    TRY(t->be->ops->download(t->be, q, dq, m));
    TRY(t->be->ops->download(t->be, qs, dqs, (size_t)f->n * 4));
    t->checks++;
    long bad = 0;
    for (int row = 0; row < f->n; row++) {
        float mx = 0.0f;
        for (int j = 0; j < f->dim; j++) mx = fmaxf(mx, fabsf(sits_bf16_to_f32(out[(size_t)row * f->dim + j])));
        float s = sits_fp8_scale(mx);
        if (memcmp(&s, &qs[row], 4)) {
            if (bad++ < MAX_PRINT) fprintf(stderr, "FAIL rank %d %s e4m3 row %d: scale %.9g, host %.9g\n", t->rank, what, row, qs[row], s);
            continue;
        }
        for (int j = 0; j < f->dim; j++) {
            size_t i = (size_t)row * f->dim + j;
            uint8_t want = sits_f32_to_f8e4m3(sits_bf16_to_f32(out[i]) / s);
            if (q[i] != want && bad++ < MAX_PRINT)
                fprintf(stderr, "FAIL rank %d %s e4m3 [%d, %d]: 0x%02x, host 0x%02x\n", t->rank, what, row, j, q[i], want);
        }
    }
    if (bad) {
        t->failures++;
        fprintf(stderr, "FAIL rank %d %s: %ld e4m3 values / scales differ from the host quantisation of out\n", t->rank, what, bad);
    }
    free(out);
    free(q);
    free(qs);
}

static const struct { int n, dim, res_f32; } FUSED[] = {
    { 1, 8192, 1 }, { 1, 8192, 0 }, { 3, 4096, 1 }, { 37, 1000, 1 }, { 2, 1001, 0 }, { 5, 1001, 1 }, { 64, 8192, 1 },
};
#define N_FUSED (sizeof FUSED / sizeof FUSED[0])

static void case_fused(ctx_t *t, int ci, int iter)
{
    sits_comm_t *c = t->car[ci];
    for (size_t k = 0; k < N_FUSED; k++) {
        fused_case_t f;
        fused_dev_t d, u;
        fused_make(t, &f, iter, 500 + (int)k, FUSED[k].n, FUSED[k].dim, FUSED[k].res_f32);
        fused_upload(t, &f, &d, 1);
        fused_upload(t, &f, &u, 1);
        /* [fp8] every case also asks for out's rows in E4M3 + scales (checked below) */
        uint8_t *dq = dev_alloc(t, (size_t)f.n * f.dim);
        float *dqs = dev_alloc(t, (size_t)f.n * 4);
        TRY(sits_comm_custom_ar_add_rmsnorm(c, d.out, dq, dqs, d.res, f.res_f32, d.x, d.w, f.n, f.dim, 1e-5f));
        /* the unfused path: NCCL all-reduce, then the backend's add_rmsnorm */
        size_t m = (size_t)f.n * f.dim;
        TRY(t->nccl->ops->allreduce_sum(t->nccl, u.x, m, SITS_DT_BF16));
        if (f.res_f32) TRY(t->be->ops->add_rmsnorm_f32res(t->be, u.out, u.res, u.x, u.w, f.n, f.dim, 1e-5f));
        else TRY(t->be->ops->add_rmsnorm(t->be, u.out, u.res, u.x, u.w, f.n, f.dim, 1e-5f));
        uint16_t *uo = xmalloc(m * 2);
        TRY(t->be->ops->download(t->be, uo, u.out, m * 2));
        char what[128];
        snprintf(what, sizeof what, "fused %s iter %d n %d dim %d residual %s", CAR_NAME[ci], iter, f.n, f.dim,
                 f.res_f32 ? "f32" : "bf16");
        fused_check(t, what, &f, &d, uo);
        fused_check_fp8(t, what, &f, &d, dq, dqs);
        t->be->ops->free(t->be, dq);
        t->be->ops->free(t->be, dqs);
        free(uo);
        fused_dev_free(t, &d);
        fused_dev_free(t, &u);
        fused_free(&f);
    }
}

/* ---- CUDA graph replay ------------------------------------------------------------------------------ */

static const size_t GSIZES[] = { 1, 7, 4096, 8192, 8193, 100000, ((size_t)1 << 20) + 3, ((size_t)4 << 20) + 1 };
#define N_GSIZES (sizeof GSIZES / sizeof GSIZES[0])

static void case_graph(ctx_t *t, int ci)
{
    sits_comm_t *c = t->car[ci];
    const sits_backend_ops_t *op = t->be->ops;
    int R = t->size;
    uint16_t *dev[N_GSIZES], *want[N_GSIZES], *in_all[N_GSIZES];
    uint16_t *side = dev_alloc(t, 8192 * 2);
    fused_case_t f;
    fused_dev_t d;
    char what[128];
    for (size_t s = 0; s < N_GSIZES; s++) {
        dev[s] = dev_alloc(t, GSIZES[s] * 2);
        want[s] = xmalloc(GSIZES[s] * 2);
        in_all[s] = xmalloc((size_t)R * GSIZES[s] * 2);
    }
    fused_make(t, &f, 0, 900, 1, 8192, 1);
    fused_upload(t, &f, &d, 1);

    void *graph = NULL;
    TRY(op->graph_begin(t->be));
    for (size_t s = 0; s < N_GSIZES; s++) TRY(c->ops->allreduce_sum(c, dev[s], GSIZES[s], SITS_DT_BF16));
    TRY(sits_comm_custom_ar_add_rmsnorm(c, d.out, NULL, NULL, d.res, 1, d.x, d.w, f.n, f.dim, 1e-5f));
    TRY(op->graph_end(t->be, &graph));

    for (int rep = 0; rep < 5; rep++) {
        for (size_t s = 0; s < N_GSIZES; s++) {
            size_t n = GSIZES[s];
            for (int r = 0; r < R; r++) gen_bf16(rep, 700 + (int)s, r, n, in_all[s] + (size_t)r * n);
            ref_sum(in_all[s], R, n, want[s]);
            TRY(op->upload(t->be, dev[s], in_all[s] + (size_t)t->rank * n, n * 2));
        }
        fused_free(&f);
        fused_make(t, &f, rep, 900, 1, 8192, 1);
        fused_upload(t, &f, &d, 0);
        TRY(op->graph_launch(t->be, graph));
        int twice = rep == 4;
        if (rep == 2 || rep == 3) { /* eager calls between replays: the counters are shared */
            uint16_t *h = xmalloc(8192 * 2 * (size_t)R), *sw = xmalloc(8192 * 2), *got = xmalloc(8192 * 2);
            for (int r = 0; r < R; r++) gen_bf16(rep, 800, r, 8192, h + (size_t)r * 8192);
            ref_sum(h, R, 8192, sw);
            TRY(op->upload(t->be, side, h + (size_t)t->rank * 8192, 8192 * 2));
            TRY(c->ops->allreduce_sum(c, side, rep == 2 ? 8192 : 7, SITS_DT_BF16));
            TRY(op->download(t->be, got, side, (rep == 2 ? 8192 : 7) * 2));
            snprintf(what, sizeof what, "eager between graph replays %s rep %d", CAR_NAME[ci], rep);
            check_bits(t, what, got, sw, rep == 2 ? 8192 : 7);
            free(h);
            free(sw);
            free(got);
        }
        if (twice) TRY(op->graph_launch(t->be, graph)); /* back to back: sums of identical values, 2x */
        for (size_t s = 0; s < N_GSIZES; s++) {
            size_t n = GSIZES[s];
            uint16_t *got = xmalloc(n * 2);
            if (twice)
                for (size_t i = 0; i < n; i++) want[s][i] = sits_f32_to_bf16(2.0f * sits_bf16_to_f32(want[s][i]));
            TRY(op->download(t->be, got, dev[s], n * 2));
            snprintf(what, sizeof what, "graph %s replay %d%s", CAR_NAME[ci], rep, twice ? " (twice)" : "");
            check_bits(t, what, got, want[s], n);
            free(got);
        }
        if (!twice) {
            snprintf(what, sizeof what, "graph %s fused replay %d", CAR_NAME[ci], rep);
            fused_check(t, what, &f, &d, NULL);
        }
    }
    op->graph_destroy(t->be, graph);
    for (size_t s = 0; s < N_GSIZES; s++) {
        op->free(t->be, dev[s]);
        free(want[s]);
        free(in_all[s]);
    }
    op->free(t->be, side);
    fused_dev_free(t, &d);
    fused_free(&f);
}

/* ---- f32 through the custom communicator (delegated to NCCL) ------------------------------------ */

static void case_f32(ctx_t *t)
{
    size_t n = 4097;
    float *h = xmalloc(n * 4), *got = xmalloc(n * 4);
    double *want = xmalloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) want[i] = 0;
    for (int r = 0; r < t->size; r++)
        for (size_t i = 0; i < n; i++) {
            float v = (float)((i * 7 + (size_t)r * 13) % 101) * 0.25f; /* exact in fp32 and in the sum */
            if (r == t->rank) h[i] = v;
            want[i] += v;
        }
    float *d = dev_alloc(t, n * 4);
    TRY(t->be->ops->upload(t->be, d, h, n * 4));
    TRY(t->car[0]->ops->allreduce_sum(t->car[0], d, n, SITS_DT_F32));
    TRY(t->be->ops->download(t->be, got, d, n * 4));
    t->checks++;
    long bad = 0;
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i] && bad++ < MAX_PRINT)
            fprintf(stderr, "FAIL rank %d f32 all-reduce [%zu]: got %.9g expected %.9g\n", t->rank, i, got[i], want[i]);
    if (bad) {
        t->failures++;
        fprintf(stderr, "FAIL rank %d f32 all-reduce: %ld of %zu differ\n", t->rank, bad, n);
    }
    t->be->ops->free(t->be, d);
    free(h);
    free(got);
    free(want);
}

static void setup(ctx_t *t, int rank, int size, double timeout_s)
{
    memset(t, 0, sizeof *t);
    t->rank = rank;
    t->size = size;
    sits_backend_params_t bp = { .threads = 1, .device = rank };
    TRY(sits_backend_cuda_create(&bp, &t->be));
    TRY(sits_comm_nccl_create(MPI_COMM_WORLD, t->be, timeout_s, &t->nccl));
    for (int i = 0; i < N_CAR; i++)
        TRY(sits_comm_custom_ar_create(MPI_COMM_WORLD, t->be, timeout_s, CAR_MAX[i], CAR_ONESHOT[i], -1, &t->car[i]));
}

static void teardown(ctx_t *t)
{
    for (int i = N_CAR - 1; i >= 0; i--) sits_comm_destroy(t->car[i]);
    sits_comm_destroy(t->nccl);
    sits_backend_destroy(t->be);
}

static int run(int rank, int size)
{
    ctx_t ctx, *t = &ctx;
    setup(t, rank, size, 60.0);
    int enabled = 1;
    for (int i = 0; i < N_CAR; i++) {
        if (strcmp(t->car[i]->ops->name, "custom_ar") || t->car[i]->rank != rank || t->car[i]->size != size) {
            fprintf(stderr, "FAIL rank %d: communicator %s says %s rank %d of %d\n", rank, CAR_NAME[i], t->car[i]->ops->name,
                    t->car[i]->rank, t->car[i]->size);
            t->failures++;
        }
        if (sits_comm_custom_ar_enabled(t->car[i]) != 1) enabled = 0;
    }
    if (sits_comm_custom_ar_enabled(t->nccl) != -1) {
        fprintf(stderr, "FAIL rank %d: the plain nccl communicator is taken for a custom_ar one\n", rank);
        t->failures++;
    }
    if (!enabled) {
        teardown(t);
        if (rank == 0) printf("SKIP: the custom all-reduce is off on these GPUs (no P2P? see the warning above)\n");
        return 77;
    }
    for (int iter = 0; iter < N_ITERS; iter++)
        for (int ci = 0; ci < N_CAR; ci++) {
            case_eager(t, ci, iter);
            if (iter < 2) case_fused(t, ci, iter);
        }
    for (int ci = 0; ci < N_CAR; ci++) case_graph(t, ci);
    case_f32(t);
    for (int ci = 0; ci < N_CAR; ci++) TRY(t->car[ci]->ops->barrier(t->car[ci]));
    teardown(t);

    long fail_all = 0, checks_all = 0;
    MPI_Allreduce(&t->failures, &fail_all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&t->checks, &checks_all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("%s: %ld of %ld checks failed over %d ranks (custom all-reduce: eager, graph replay, fused)\n",
               fail_all ? "FAIL" : "PASS", fail_all, checks_all, size);
    return fail_all ? 1 : 0;
}

/* --stall: every rank but 0 skips a custom all-reduce; rank 0's wait must end the whole job within
 * the 3 s deadline. Returning is a failure. */
static int run_stall(int rank, int size)
{
    ctx_t ctx, *t = &ctx;
    setup(t, rank, size, 3.0);
    if (sits_comm_custom_ar_enabled(t->car[0]) != 1) {
        if (rank == 0) printf("SKIP: the custom all-reduce is off on these GPUs\n");
        teardown(t);
        return 77;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        uint16_t *d = dev_alloc(t, 8192 * 2);
        TRY(t->be->ops->memset0(t->be, d, 8192 * 2));
        TRY(t->car[0]->ops->allreduce_sum(t->car[0], d, 8192, SITS_DT_BF16));
        sits_status_t st = t->be->ops->sync(t->be);
        fprintf(stderr, "FAIL: the stalled custom all-reduce's wait returned (%s) instead of aborting the job\n",
                sits_status_str(st));
        return 1;
    }
    for (int i = 0; i < 600; i++) { /* killed by rank 0's MPI_Abort */
        struct timespec ts = { 0, 100000000 };
        nanosleep(&ts, NULL);
    }
    fprintf(stderr, "FAIL: rank %d was not aborted within 60 s\n", rank);
    return 1;
}

#endif /* HAVE_NCCL */

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--gpus")) {
#ifdef HAVE_NCCL
        printf("%d\n", sits_backend_cuda_device_count());
        return 0;
#else
        printf("SKIP: built without NCCL\n");
        return 77;
#endif
    }
#ifndef HAVE_NCCL
    printf("SKIP: built without NCCL (configure found no nccl.h / -lnccl with CUDA)\n");
    return 77;
#else
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    sits_log_init(rank);
    int gpus = sits_backend_cuda_device_count(), min_gpus = 0;
    MPI_Allreduce(&gpus, &min_gpus, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (min_gpus < size || size < 2) {
        if (rank == 0) printf("SKIP: %d rank(s) need as many GPUs (and at least 2), %d usable\n", size, min_gpus);
        MPI_Finalize();
        return 77;
    }
    int rc = argc > 1 && !strcmp(argv[1], "--stall") ? run_stall(rank, size) : run(rank, size);
    MPI_Finalize();
    return rc;
#endif
}
