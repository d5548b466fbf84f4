/* test_nccl.c -- the NCCL communicator on GPUs (MPI program, one rank per GPU: rank r uses GPU r).
 *
 * Every rank generates the inputs of EVERY rank from a seeded generator (seed, iteration, case,
 * rank), so the expected results are computed on the host without any communication:
 *   all-reduce (in place, on the backend's stream, several ops enqueued before one wait):
 *     bf16 / f16 / f32: the exact sum (double) of the inputs as stored; NCCL sums in the element type,
 *       so with 2 ranks the result is one rounding of the exact sum: |got - exact| <= 1 ulp of the
 *       exact sum in that type; with N ranks (N-1) roundings: <= (N-1) ulp of sum |x_r|;
 *     i32: exact, and a second all-reduce enqueued right after the first gives exactly N * sum
 *       (the ops run in stream order);
 *   all-gather, gather (to a rotating root) and broadcast (from a rotating root): byte-exact; receive
 *     buffers are poisoned first so a part that is not written is a mismatch.
 * Sizes 1, 3, 7, 255, 4096, 4097, 65537, 1 << 20, (1 << 20) + 3 elements (bytes for the byte ops),
 * at an odd element offset into the buffer on odd iterations; 20 iterations; a barrier after each.
 * Waits go through the backend's polling path (the communicator's health check is registered).
 *
 * `test_nccl --gpus` prints the number of usable GPUs without starting MPI (for nccl_tp2.sh);
 * `test_nccl --stall` checks the fault path: rank 0 waits on an all-reduce the others never join, and
 * must abort the whole job (MPI_Abort, exit code 3) after the 3 s deadline instead of hanging.
 * Exit 0 pass, 1 fail, 77 skip (built without NCCL, or fewer GPUs than ranks). */
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

#define N_ITERS 20
#define MAX_PRINT 5

static const size_t SIZES[] = { 1, 3, 7, 255, 4096, 4097, 65537, (size_t)1 << 20, ((size_t)1 << 20) + 3 };
#define N_SIZES (sizeof SIZES / sizeof SIZES[0])

typedef struct {
    int rank, size;
    sits_backend_t *be;
    sits_comm_t *comm;
    long failures, checks;
} ctx_t;

#define TRY(call_) do { sits_status_t s_ = (call_); if (s_ != SITS_OK) { \
    fprintf(stderr, "FAIL rank %d %s:%d: %s -> %s\n", t->rank, __FILE__, __LINE__, #call_, sits_status_str(s_)); \
    MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
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
    rng_t r = { 0x9E3779B97F4A7C15ull ^ ((uint64_t)iter << 40) ^ ((uint64_t)kase << 20) ^ (uint64_t)(rank + 1) };
    for (int i = 0; i < 4; i++) { /* splitmix the seed */
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

static float rng_unit(rng_t *r) /* [-1, 1) */
{
    return (float)(2.0 * (double)(rng_next(r) >> 11) / 9007199254740992.0 - 1.0);
}

/* n elements of dt for (iter, kase, rank), written as stored on the device, and as doubles. */
static void gen(sits_dtype_t dt, int iter, int kase, int rank, size_t n, void *out, double *val)
{
    rng_t r = rng_for(iter, kase, rank);
    for (size_t i = 0; i < n; i++) {
        float f = 2.0f * rng_unit(&r);
        switch (dt) {
        case SITS_DT_BF16: {
            uint16_t h = sits_f32_to_bf16(f);
            ((uint16_t *)out)[i] = h;
            val[i] = sits_bf16_to_f32(h);
            break;
        }
        case SITS_DT_F16: {
            uint16_t h = sits_f32_to_f16(f);
            ((uint16_t *)out)[i] = h;
            val[i] = sits_f16_to_f32(h);
            break;
        }
        case SITS_DT_F32:
            ((float *)out)[i] = f;
            val[i] = f;
            break;
        default: { /* I32 */
            int32_t v = (int32_t)(rng_next(&r) % 2000001u) - 1000000;
            ((int32_t *)out)[i] = v;
            val[i] = v;
            break;
        }
        }
    }
}

static double stored(sits_dtype_t dt, const void *p, size_t i)
{
    switch (dt) {
    case SITS_DT_BF16: return sits_bf16_to_f32(((const uint16_t *)p)[i]);
    case SITS_DT_F16: return sits_f16_to_f32(((const uint16_t *)p)[i]);
    case SITS_DT_F32: return ((const float *)p)[i];
    default: return ((const int32_t *)p)[i];
    }
}

/* One unit in the last place of |v| in dt (0 for v == 0: the result must then be exact). */
static double ulp(sits_dtype_t dt, double v)
{
    if (v == 0) return 0;
    int e;
    frexp(fabs(v), &e); /* |v| = m 2^e, m in [0.5, 1) */
    int mant = dt == SITS_DT_BF16 ? 8 : dt == SITS_DT_F16 ? 11 : 24;
    return ldexp(1.0, e - mant);
}

/* ---- device helpers ---------------------------------------------------------------------------- */

static void *dev_alloc(ctx_t *t, size_t bytes)
{
    void *p = NULL;
    TRY(t->be->ops->alloc(t->be, bytes, &p));
    return p;
}

static void dev_poison(ctx_t *t, void *dst, size_t bytes, unsigned char byte)
{
    unsigned char *h = xmalloc(bytes);
    memset(h, byte, bytes);
    TRY(t->be->ops->upload(t->be, dst, h, bytes));
    free(h);
}

/* ---- checks ---------------------------------------------------------------------------------- */

/* got (as stored) against exact sums with per-element tolerance tol[i]. */
static void check_sum(ctx_t *t, const char *what, sits_dtype_t dt, size_t n, const void *got, const double *exact,
                      const double *abs_sum, int iter)
{
    int printed = 0;
    double max_err = 0, max_ratio = 0;
    long bad = 0;
    for (size_t i = 0; i < n; i++) {
        double g = stored(dt, got, i), err = fabs(g - exact[i]);
        double tol = dt == SITS_DT_I32 ? 0 : t->size == 2 ? ulp(dt, exact[i]) : (t->size - 1) * ulp(dt, abs_sum[i]);
        if (err > max_err) max_err = err;
        if (tol > 0 && err / tol > max_ratio) max_ratio = err / tol;
        if (!(err <= tol)) { /* NaN fails too */
            bad++;
            if (printed++ < MAX_PRINT)
                fprintf(stderr, "FAIL rank %d iter %d %s n %zu [%zu]: got %.9g expected %.9g (|err| %.3g > tol %.3g)\n",
                        t->rank, iter, what, n, i, g, exact[i], err, tol);
        }
    }
    t->checks++;
    if (bad) {
        t->failures++;
        fprintf(stderr, "FAIL rank %d iter %d %s n %zu: %ld of %zu elements off, max |err| %.3g\n", t->rank, iter, what, n,
                bad, n, max_err);
    } else if (iter == 0 && n == SIZES[N_SIZES - 1] && t->rank == 0) {
        printf("ok %s n %zu: max |err| %.3g (%.2f of the tolerance)\n", what, n, max_err, max_ratio);
    }
}

static void check_bytes(ctx_t *t, const char *what, const unsigned char *got, const unsigned char *want, size_t n, int iter)
{
    t->checks++;
    if (!memcmp(got, want, n)) return;
    t->failures++;
    long bad = 0;
    int printed = 0;
    for (size_t i = 0; i < n; i++) {
        if (got[i] == want[i]) continue;
        bad++;
        if (printed++ < MAX_PRINT)
            fprintf(stderr, "FAIL rank %d iter %d %s bytes %zu [%zu]: got 0x%02x expected 0x%02x\n", t->rank, iter, what, n, i,
                    got[i], want[i]);
    }
    fprintf(stderr, "FAIL rank %d iter %d %s bytes %zu: %ld bytes differ\n", t->rank, iter, what, n, bad);
}

/* ---- cases ----------------------------------------------------------------------------------- */

/* All-reduce of dt at n elements: enqueue (twice for I32), then one wait. */
static void case_allreduce(ctx_t *t, sits_dtype_t dt, int iter, int kase, size_t n)
{
    size_t esz = sits_dtype_size(dt), off = (iter & 1) ? 1 : 0; /* odd element offset on odd iterations */
    size_t bytes = n * esz;
    unsigned char *mine = xmalloc(bytes), *other = xmalloc(bytes), *got = xmalloc(bytes);
    double *val = xmalloc(n * sizeof *val), *exact = xmalloc(n * sizeof *exact), *abs_sum = xmalloc(n * sizeof *abs_sum);
    for (size_t i = 0; i < n; i++) exact[i] = abs_sum[i] = 0;
    for (int r = 0; r < t->size; r++) {
        gen(dt, iter, kase, r, n, r == t->rank ? mine : other, val);
        for (size_t i = 0; i < n; i++) {
            exact[i] += val[i];
            abs_sum[i] += fabs(val[i]);
        }
    }
    unsigned char *d = dev_alloc(t, bytes + esz);
    TRY(t->be->ops->upload(t->be, d + off * esz, mine, bytes));
    TRY(t->comm->ops->allreduce_sum(t->comm, d + off * esz, n, dt));
    if (dt == SITS_DT_I32) TRY(t->comm->ops->allreduce_sum(t->comm, d + off * esz, n, dt));
    TRY(t->be->ops->download(t->be, got, d + off * esz, bytes));
    if (dt == SITS_DT_I32)
        for (size_t i = 0; i < n; i++) exact[i] *= t->size;
    check_sum(t, dt == SITS_DT_I32 ? "all-reduce i32 x2" : dt == SITS_DT_BF16 ? "all-reduce bf16"
                 : dt == SITS_DT_F16 ? "all-reduce f16" : "all-reduce f32", dt, n, got, exact, abs_sum, iter);
    t->be->ops->free(t->be, d);
    free(mine);
    free(other);
    free(got);
    free(val);
    free(exact);
    free(abs_sum);
}

static void rand_bytes(int iter, int kase, int rank, unsigned char *out, size_t n)
{
    rng_t r = rng_for(iter, kase, rank);
    for (size_t i = 0; i < n; i++) out[i] = (unsigned char)(rng_next(&r) >> 56);
}

/* All-gather, gather and broadcast of n bytes per rank, all enqueued before the downloads. */
static void case_bytes(ctx_t *t, int iter, int kase, size_t n)
{
    int R = t->size, root = (iter + kase) % R;
    size_t off = (iter & 1) ? 3 : 0;
    unsigned char *want = xmalloc((size_t)R * n), *got = xmalloc((size_t)R * n), *bc = xmalloc(n);
    for (int r = 0; r < R; r++) rand_bytes(iter, kase, r, want + (size_t)r * n, n);
    unsigned char *mine = want + (size_t)t->rank * n;

    unsigned char *send = dev_alloc(t, n + off), *ag = dev_alloc(t, (size_t)R * n + off), *ga = dev_alloc(t, (size_t)R * n + off);
    unsigned char *bb = dev_alloc(t, n + off);
    TRY(t->be->ops->upload(t->be, send + off, mine, n));
    dev_poison(t, ag + off, (size_t)R * n, 0xA5);
    dev_poison(t, ga + off, (size_t)R * n, 0x5A);
    if (t->rank == root) TRY(t->be->ops->upload(t->be, bb + off, want + (size_t)root * n, n));
    else dev_poison(t, bb + off, n, (unsigned char)(0x11 * (t->rank + 1)));

    TRY(t->comm->ops->allgather(t->comm, send + off, ag + off, n));
    TRY(t->comm->ops->gather(t->comm, send + off, ga + off, n, root));
    TRY(t->comm->ops->bcast(t->comm, bb + off, n, root));

    TRY(t->be->ops->download(t->be, got, ag + off, (size_t)R * n));
    check_bytes(t, "all-gather", got, want, (size_t)R * n, iter);
    if (t->rank == root) {
        TRY(t->be->ops->download(t->be, got, ga + off, (size_t)R * n));
        check_bytes(t, "gather", got, want, (size_t)R * n, iter);
    }
    TRY(t->be->ops->download(t->be, bc, bb + off, n));
    check_bytes(t, "broadcast", bc, want + (size_t)root * n, n, iter);

    t->be->ops->free(t->be, send);
    t->be->ops->free(t->be, ag);
    t->be->ops->free(t->be, ga);
    t->be->ops->free(t->be, bb);
    free(want);
    free(got);
    free(bc);
}

static int run(int rank, int size)
{
    ctx_t ctx = { rank, size, NULL, NULL, 0, 0 }, *t = &ctx;
    sits_backend_params_t bp = { .threads = 1, .device = rank };
    TRY(sits_backend_cuda_create(&bp, &t->be));
    TRY(sits_comm_nccl_create(MPI_COMM_WORLD, t->be, 60.0, &t->comm));
    if (t->comm->rank != rank || t->comm->size != size || strcmp(t->comm->ops->name, "nccl")) {
        fprintf(stderr, "FAIL rank %d: communicator says rank %d of %d (%s)\n", rank, t->comm->rank, t->comm->size,
                t->comm->ops->name);
        t->failures++;
    }
    static const sits_dtype_t DTS[] = { SITS_DT_BF16, SITS_DT_F32, SITS_DT_F16, SITS_DT_I32 };
    for (int iter = 0; iter < N_ITERS; iter++) {
        int kase = 0;
        for (size_t s = 0; s < N_SIZES; s++) {
            for (size_t d = 0; d < sizeof DTS / sizeof DTS[0]; d++) case_allreduce(t, DTS[d], iter, kase++, SIZES[s]);
            case_bytes(t, iter, kase++, SIZES[s]);
        }
        TRY(t->comm->ops->barrier(t->comm));
    }
    sits_comm_destroy(t->comm);
    sits_backend_destroy(t->be);

    long fail_all = 0, checks_all = 0;
    MPI_Allreduce(&t->failures, &fail_all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&t->checks, &checks_all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("%s: %ld of %ld checks failed over %d ranks (%d iterations)\n", fail_all ? "FAIL" : "PASS", fail_all,
               checks_all, size, N_ITERS);
    return fail_all ? 1 : 0;
}

/* --stall: every rank but 0 skips an all-reduce; rank 0's wait must end the whole job within the
 * 3 s deadline (its health check aborts the communicator and MPI_Aborts). Returning is a failure. */
static int run_stall(int rank, int size)
{
    ctx_t ctx = { rank, size, NULL, NULL, 0, 0 }, *t = &ctx;
    sits_backend_params_t bp = { .threads = 1, .device = rank };
    TRY(sits_backend_cuda_create(&bp, &t->be));
    TRY(sits_comm_nccl_create(MPI_COMM_WORLD, t->be, 3.0, &t->comm));
    if (rank == 0) {
        void *d = dev_alloc(t, 4096 * 2);
        dev_poison(t, d, 4096 * 2, 0);
        TRY(t->comm->ops->allreduce_sum(t->comm, d, 4096, SITS_DT_BF16));
        sits_status_t st = t->be->ops->sync(t->be);
        fprintf(stderr, "FAIL: the stalled all-reduce's wait returned (%s) instead of aborting the job\n", sits_status_str(st));
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
    if (min_gpus < size) {
        if (rank == 0) printf("SKIP: %d rank(s) need as many GPUs, %d usable\n", size, min_gpus);
        MPI_Finalize();
        return 77;
    }
    int rc = argc > 1 && !strcmp(argv[1], "--stall") ? run_stall(rank, size) : run(rank, size);
    MPI_Finalize();
    return rc;
#endif
}
