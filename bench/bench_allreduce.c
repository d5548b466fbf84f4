/* bench_allreduce.c -- the custom IPC all-reduce against NCCL on the GPUs of one node: latency and
 * bus bandwidth of in-place bf16 all-reduces, launched back to back (eager) and replayed from a CUDA
 * graph; the fused all-reduce + residual add + RMSNorm of a decode step. Not a test.
 *
 *   mpirun -np 2 bench/sits-bench-allreduce [--min-bytes 8K] [--max-bytes 64M] [--ops 100] [--reps 20]
 *       [--gpu G] [--auto-max-bytes SIZE] [--auto-oneshot-bytes SIZE] [--json FILE]
 *
 * One rank per GPU (rank r uses GPU G + r). Methods, each its own communicator over the world:
 *   nccl      sits_comm_nccl_create (ncclAllReduce)
 *   one-shot  sits_comm_custom_ar_create with every bf16 message up to --max-bytes one-shot
 *   two-shot  the same, every message two-shot
 *   auto      the default thresholds (what sits-dist uses: one-shot, two-shot, then NCCL), or
 *             --auto-max-bytes / --auto-oneshot-bytes
 * For every power-of-two size from --min-bytes to --max-bytes: eager = --ops all-reduces enqueued
 * back to back between two CUDA events; graph = the --ops all-reduces captured into one graph, one
 * replay between two events. Time per op is the median over --reps repetitions (after a warm-up),
 * the ranks starting each repetition together (MPI barrier). Bus bandwidth = bytes * 2 (N - 1) / N /
 * time (NCCL's convention). The data are zeros (timing does not depend on values).
 * Fused (graph): residual (fp32) += all-reduce(x); h = rmsnorm(residual) * w for n tokens of a
 * hidden size 8192 (Llama-3-70B), as one kernel vs the custom all-reduce + add_rmsnorm_f32res vs
 * NCCL + add_rmsnorm_f32res.
 * Then the thresholds the table suggests (graph timings): the largest size up to which one-shot is
 * the best method, and the largest up to which a custom method beats NCCL -- the values for
 * SITS_CUSTOM_AR_MAX_BYTES and the one-shot limit. Table on stdout (rank 0), JSON with --json. */
#include <mpi.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "comm/comm.h"
#include "util/log.h"
#include "util/params.h"

#ifdef HAVE_NCCL
#include <cuda_runtime_api.h>

enum { M_NCCL, M_ONESHOT, M_TWOSHOT, M_AUTO, N_METHODS };
static const char *METHOD[N_METHODS] = { "nccl", "one-shot", "two-shot", "auto" };

typedef struct {
    int rank, size, ops, reps;
    sits_backend_t *be;
    cudaStream_t stream;
    cudaEvent_t ev0, ev1;
    sits_comm_t *comm[N_METHODS];
    int custom_on;
} bench_t;

#define DIE(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); MPI_Abort(MPI_COMM_WORLD, 1); } while (0)
#define TRY(call_) do { sits_status_t s_ = (call_); if (s_ != SITS_OK) DIE("rank %d: %s -> %s", b->rank, #call_, sits_status_str(s_)); } while (0)
#define CU(call_) do { cudaError_t e_ = (call_); if (e_ != cudaSuccess) DIE("rank %d: %s: %s", b->rank, #call_, cudaGetErrorString(e_)); } while (0)

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Seconds between the events of one repetition; ranks start together. */
static double timed(bench_t *b, void (*body)(bench_t *, void *), void *arg)
{
    MPI_Barrier(MPI_COMM_WORLD);
    CU(cudaEventRecord(b->ev0, b->stream));
    body(b, arg);
    CU(cudaEventRecord(b->ev1, b->stream));
    TRY(b->be->ops->sync(b->be));
    float ms = 0;
    CU(cudaEventElapsedTime(&ms, b->ev0, b->ev1));
    return ms * 1e-3;
}

/* Median over reps of timed(body) / ops, in microseconds, agreed over ranks (the slowest rank). */
static double median_us(bench_t *b, void (*body)(bench_t *, void *), void *arg)
{
    double *t = malloc(sizeof(double) * (size_t)b->reps);
    if (!t) DIE("out of memory");
    timed(b, body, arg); /* warm-up */
    for (int r = 0; r < b->reps; r++) t[r] = timed(b, body, arg);
    qsort(t, (size_t)b->reps, sizeof *t, cmp_double);
    double med = t[b->reps / 2] / b->ops * 1e6, worst = 0;
    free(t);
    MPI_Allreduce(&med, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return worst;
}

typedef struct { sits_comm_t *c; void *buf; size_t count; void *graph; } ar_arg_t;

static void body_eager(bench_t *b, void *arg)
{
    ar_arg_t *a = arg;
    for (int i = 0; i < b->ops; i++) TRY(a->c->ops->allreduce_sum(a->c, a->buf, a->count, SITS_DT_BF16));
}

static void body_graph(bench_t *b, void *arg)
{
    ar_arg_t *a = arg;
    TRY(b->be->ops->graph_launch(b->be, a->graph));
}

/* ---- fused ---------------------------------------------------------------------------------------- */

enum { F_FUSED, F_CUSTOM_SPLIT, F_NCCL_SPLIT, N_FUSED_M };
static const char *FUSED_M[N_FUSED_M] = { "fused", "custom+norm", "nccl+norm" };

typedef struct { int kind, n, dim; void *x, *res, *w, *out, *graph; } fused_arg_t;

static void fused_once(bench_t *b, fused_arg_t *f)
{
    sits_comm_t *c = b->comm[f->kind == F_NCCL_SPLIT ? M_NCCL : M_AUTO];
    if (f->kind == F_FUSED) {
        TRY(sits_comm_custom_ar_add_rmsnorm(c, f->out, NULL, NULL, f->res, 1, f->x, f->w, f->n, f->dim, 1e-5f));
        return;
    }
    TRY(c->ops->allreduce_sum(c, f->x, (size_t)f->n * f->dim, SITS_DT_BF16));
    TRY(b->be->ops->add_rmsnorm_f32res(b->be, f->out, f->res, f->x, f->w, f->n, f->dim, 1e-5f));
}

static void body_fused_graph(bench_t *b, void *arg)
{
    fused_arg_t *f = arg;
    TRY(b->be->ops->graph_launch(b->be, f->graph));
}

/* ---- main ---------------------------------------------------------------------------------------- */

static void usage(const char *prog)
{
    fprintf(stderr,
            "usage: mpirun -np N %s [--min-bytes 8K] [--max-bytes 64M] [--ops 100] [--reps 20] [--gpu G]\n"
            "           [--auto-max-bytes SIZE] [--auto-oneshot-bytes SIZE] [--json FILE]\n", prog);
}

int main(int argc, char **argv)
{
    int64_t min_bytes = 8 << 10, max_bytes = (int64_t)64 << 20, auto_max = -1, auto_oneshot = -1;
    int ops = 100, reps = 20, gpu0 = 0;
    const char *json_path = NULL;
    for (int i = 1; i < argc; i++) {
        int more = i + 1 < argc;
        if (!strcmp(argv[i], "--min-bytes") && more && sits_parse_size(argv[i + 1], &min_bytes) == SITS_OK) i++;
        else if (!strcmp(argv[i], "--max-bytes") && more && sits_parse_size(argv[i + 1], &max_bytes) == SITS_OK) i++;
        else if (!strcmp(argv[i], "--auto-max-bytes") && more && sits_parse_size(argv[i + 1], &auto_max) == SITS_OK) i++;
        else if (!strcmp(argv[i], "--auto-oneshot-bytes") && more && sits_parse_size(argv[i + 1], &auto_oneshot) == SITS_OK) i++;
        else if (!strcmp(argv[i], "--ops") && more) ops = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && more) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--gpu") && more) gpu0 = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json") && more) json_path = argv[++i];
        else {
            usage(argv[0]);
            return 2;
        }
    }
    if (min_bytes < 2 || max_bytes < min_bytes || ops < 1 || reps < 1) {
        usage(argv[0]);
        return 2;
    }
    MPI_Init(&argc, &argv);
    bench_t bench = { .ops = ops, .reps = reps }, *b = &bench;
    MPI_Comm_rank(MPI_COMM_WORLD, &b->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &b->size);
    sits_log_init(b->rank);
    if (b->size < 2) DIE("run it with mpirun -np N (N >= 2, one rank per GPU)");
    sits_backend_params_t bp = { .threads = 1, .device = gpu0 + b->rank };
    TRY(sits_backend_cuda_create(&bp, &b->be));
    b->stream = (cudaStream_t)sits_backend_cuda_stream(b->be);
    CU(cudaEventCreate(&b->ev0));
    CU(cudaEventCreate(&b->ev1));
    TRY(sits_comm_nccl_create(MPI_COMM_WORLD, b->be, 120.0, &b->comm[M_NCCL]));
    TRY(sits_comm_custom_ar_create(MPI_COMM_WORLD, b->be, 120.0, max_bytes, max_bytes, -1, &b->comm[M_ONESHOT]));
    TRY(sits_comm_custom_ar_create(MPI_COMM_WORLD, b->be, 120.0, max_bytes, 0, -1, &b->comm[M_TWOSHOT]));
    TRY(sits_comm_custom_ar_create(MPI_COMM_WORLD, b->be, 120.0, auto_max, auto_oneshot, -1, &b->comm[M_AUTO]));
    b->custom_on = sits_comm_custom_ar_enabled(b->comm[M_AUTO]) == 1;
    struct cudaDeviceProp prop;
    CU(cudaGetDeviceProperties(&prop, gpu0 + b->rank));

    void *buf = NULL;
    TRY(b->be->ops->alloc(b->be, (size_t)max_bytes, &buf));
    TRY(b->be->ops->memset0(b->be, buf, (size_t)max_bytes));
    double busf = 2.0 * (b->size - 1) / b->size;

    json_t *root = json_pack("{s:i,s:s,s:i,s:i,s:b}", "ranks", b->size, "gpu", prop.name, "ops", ops, "reps", reps,
                             "custom_enabled", b->custom_on);
    json_t *jsizes = json_array();
    if (b->rank == 0) {
        printf("all-reduce bf16 in place, %d ranks on %s, custom path %s; us per op (median of %d x %d ops), busbw GB/s\n",
               b->size, prop.name, b->custom_on ? "on" : "OFF (no P2P: only nccl measured)", reps, ops);
        printf("%10s | %-23s | %-23s | %-23s | %-23s | %s\n", "", "nccl", "one-shot", "two-shot", "auto", "best (graph)");
        printf("%10s |", "bytes");
        for (int m = 0; m < N_METHODS; m++) printf(" %7s %7s %7s |", "eager", "graph", "busbw");
        printf("\n");
    }
    int64_t rec_oneshot = 0, rec_max = 0;
    int oneshot_wins_so_far = 1, custom_wins_so_far = 1;
    for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
        size_t count = (size_t)bytes / 2;
        double eager[N_METHODS], graph[N_METHODS];
        for (int m = 0; m < N_METHODS; m++) {
            eager[m] = graph[m] = -1;
            if (m != M_NCCL && !b->custom_on) continue;
            ar_arg_t a = { b->comm[m], buf, count, NULL };
            eager[m] = median_us(b, body_eager, &a);
            TRY(b->be->ops->graph_begin(b->be));
            body_eager(b, &a);
            TRY(b->be->ops->graph_end(b->be, &a.graph));
            graph[m] = median_us(b, body_graph, &a);
            b->be->ops->graph_destroy(b->be, a.graph);
        }
        int best = M_NCCL;
        for (int m = M_ONESHOT; m <= M_TWOSHOT; m++)
            if (graph[m] > 0 && graph[m] < graph[best]) best = m;
        if (b->custom_on) { /* contiguous runs from the smallest size */
            int oneshot_best = graph[M_ONESHOT] <= graph[M_TWOSHOT] && graph[M_ONESHOT] < graph[M_NCCL];
            if (oneshot_wins_so_far && oneshot_best) rec_oneshot = bytes;
            else oneshot_wins_so_far = 0;
            if (custom_wins_so_far && best != M_NCCL) rec_max = bytes;
            else custom_wins_so_far = 0;
        }
        json_t *js = json_pack("{s:I}", "bytes", (json_int_t)bytes);
        for (int m = 0; m < N_METHODS; m++) {
            if (eager[m] < 0) continue;
            json_object_set_new(js, METHOD[m],
                                json_pack("{s:f,s:f,s:f,s:f}", "eager_us", eager[m], "graph_us", graph[m], "busbw_gbps_eager",
                                          bytes * busf / (eager[m] * 1e3), "busbw_gbps_graph", bytes * busf / (graph[m] * 1e3)));
        }
        json_object_set_new(js, "best_graph", json_string(METHOD[best]));
        json_array_append_new(jsizes, js);
        if (b->rank == 0) {
            printf("%10lld |", (long long)bytes);
            for (int m = 0; m < N_METHODS; m++) {
                if (eager[m] < 0) printf(" %7s %7s %7s |", "-", "-", "-");
                else printf(" %7.2f %7.2f %7.1f |", eager[m], graph[m], bytes * busf / (graph[m] * 1e3));
            }
            printf(" %s\n", METHOD[best]);
            fflush(stdout);
        }
    }
    json_object_set_new(root, "sizes", jsizes);

    /* fused all-reduce + add + RMSNorm, graph-captured, hidden 8192 */
    json_t *jf = json_array();
    static const int TOKENS[] = { 1, 8, 32 };
    int dim = 8192;
    if (b->rank == 0 && b->custom_on)
        printf("\nall-reduce + residual add (fp32) + RMSNorm, hidden %d, graph of %d, us per op:\n%8s | %11s %11s %11s\n", dim,
               ops, "tokens", FUSED_M[0], FUSED_M[1], FUSED_M[2]);
    for (size_t k = 0; b->custom_on && k < sizeof TOKENS / sizeof TOKENS[0]; k++) {
        int n = TOKENS[k];
        size_t m = (size_t)n * dim;
        fused_arg_t f = { 0, n, dim, NULL, NULL, NULL, NULL, NULL };
        TRY(b->be->ops->alloc(b->be, m * 2, &f.x));
        TRY(b->be->ops->alloc(b->be, m * 4, &f.res));
        TRY(b->be->ops->alloc(b->be, (size_t)dim * 4, &f.w));   /* norm weights are fp32 (weights.h) */
        TRY(b->be->ops->alloc(b->be, m * 2, &f.out));
        TRY(b->be->ops->memset0(b->be, f.x, m * 2));
        TRY(b->be->ops->memset0(b->be, f.res, m * 4));
        TRY(b->be->ops->memset0(b->be, f.w, (size_t)dim * 4));
        double us[N_FUSED_M];
        for (int kind = 0; kind < N_FUSED_M; kind++) {
            f.kind = kind;
            TRY(b->be->ops->graph_begin(b->be));
            for (int i = 0; i < ops; i++) fused_once(b, &f);
            TRY(b->be->ops->graph_end(b->be, &f.graph));
            us[kind] = median_us(b, body_fused_graph, &f);
            b->be->ops->graph_destroy(b->be, f.graph);
        }
        json_array_append_new(jf, json_pack("{s:i,s:i,s:f,s:f,s:f}", "tokens", n, "hidden", dim, "fused_us", us[0],
                                            "custom_split_us", us[1], "nccl_split_us", us[2]));
        if (b->rank == 0) printf("%8d | %11.2f %11.2f %11.2f\n", n, us[0], us[1], us[2]);
        b->be->ops->free(b->be, f.x);
        b->be->ops->free(b->be, f.res);
        b->be->ops->free(b->be, f.w);
        b->be->ops->free(b->be, f.out);
    }
    json_object_set_new(root, "fused", jf);
    json_object_set_new(root, "suggested", json_pack("{s:I,s:I}", "oneshot_max_bytes", (json_int_t)rec_oneshot, "max_bytes",
                                                       (json_int_t)rec_max));
    if (b->rank == 0 && b->custom_on)
        printf("\nsuggested (graph timings): one-shot up to %lld bytes, custom up to %lld bytes "
               "(SITS_CUSTOM_AR_MAX_BYTES=%lld), nccl above\n", (long long)rec_oneshot, (long long)rec_max, (long long)rec_max);
    int rc = 0;
    if (b->rank == 0 && json_path && json_dump_file(root, json_path, JSON_INDENT(1)) != 0) {
        fprintf(stderr, "cannot write %s\n", json_path);
        rc = 1;
    }
    json_decref(root);
    b->be->ops->free(b->be, buf);
    for (int m = N_METHODS - 1; m >= 0; m--) sits_comm_destroy(b->comm[m]);
    cudaEventDestroy(b->ev0);
    cudaEventDestroy(b->ev1);
    sits_backend_destroy(b->be);
    MPI_Finalize();
    return rc;
}

#else /* !HAVE_NCCL */

int main(void)
{
    fprintf(stderr, "sits-bench-allreduce: built without NCCL / CUDA\n");
    return 2;
}

#endif
