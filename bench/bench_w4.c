/* bench_w4.c -- the W4A16 linear alone (the backend's matmul_w4, the INT4 decode linears of issue #25) beside the
 * floor of reading its weights. Not a test.
 *
 *   bench/sits-bench-w4 [--device cuda|cpu|auto] [--gpu N] [--threads N] [--shapes 8b|70b|tiny] [--tokens 1,2,8,32]
 *       [--group 128] [--iters 20] [--warmup 3] [--pool-mib 2048] [--bw-mib 1024] [--compare] [--compare-env VAR=VALUE]
 *       [--json FILE] [--commit SHA]
 *
 * Shapes (out x in): 8b the Llama-3-8B linears at TP 1 (qkv 6144 x 4096, o 4096 x 4096, gate_up 28672 x 4096, down
 * 4096 x 14336), 70b Llama-3-70B's (10240 x 8192, 8192 x 8192, 57344 x 8192, 8192 x 28672), tiny two small ones (a
 * smoke run of the program on the cpu). Weights: random nibbles, zeros 0..15 and scales of backend.h's sits_w4_t
 * layout in groups of --group inputs, in as many copies as fit --pool-mib (at least 1): call i reads copy i mod copies,
 * so a linear smaller than the L2 cache is read from memory as in a decode step, not from the cache. x [n, in] random.
 * A row's time: --iters calls back to back plus one sync, divided by --iters (median of 3 such runs, after --warmup).
 * Reported per (shape, tokens): us a call; the weights' bytes (nibbles + fp32 scales + zeros) read per second; the
 * floor -- those bytes at the copy bandwidth measured in the same run (sits_bench_copy_bw) -- and the share of it.
 * Weights are put in the backend's own layout (w4_layout) as the loader does.
 * --compare (cuda): each row again with --compare-env VAR=VALUE set (default SITS_W4_PG_MAX_N=2: 1-2 tokens on the
 * persistent GEMV, off by default, instead of the tensor-core GEMV), in the same run.
 * JSON: {bench, settings, rows [{shape, out, in, tokens, us, gbs, floor_us, us_compare}], copy_gbs, commit}. */
#include <jansson.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_common.h"
#include "util/dtype.h"
#include "util/log.h"

#define W4B_MAX_TOKENS 16

typedef struct {
    const char *device, *shapes, *json, *commit, *cmp_env;
    int gpu, threads, group, iters, warmup, pool_mib, bw_mib, compare, n_tok, tok[W4B_MAX_TOKENS];
} opts_t;

typedef struct {
    const char *name;
    int out, in;
} shape_t;

static const shape_t shapes_8b[] = { { "qkv", 6144, 4096 }, { "o", 4096, 4096 }, { "gate_up", 28672, 4096 }, { "down", 4096, 14336 } };
static const shape_t shapes_70b[] = { { "qkv", 10240, 8192 }, { "o", 8192, 8192 }, { "gate_up", 57344, 8192 }, { "down", 8192, 28672 } };
static const shape_t shapes_tiny[] = { { "a", 256, 1024 }, { "b", 512, 2048 } };

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--device cuda|cpu|auto] [--gpu N] [--threads N] [--shapes 8b|70b|tiny] [--tokens 1,2,8,32] [--group 128]\n"
            "          [--iters 20] [--warmup 3] [--pool-mib 2048] [--bw-mib 1024] [--compare] [--compare-env VAR=VALUE] [--json FILE]\n"
            "          [--commit SHA]\n",
            argv0);
}

static int parse_args(int argc, char **argv, opts_t *o)
{
    *o = (opts_t){ .device = "auto", .shapes = "8b", .group = 128, .iters = 20, .warmup = 3, .pool_mib = 2048, .bw_mib = 1024,
                   .n_tok = 4, .tok = { 1, 2, 8, 32 }, .cmp_env = "SITS_W4_PG_MAX_N=2" };
    o->commit = getenv("SITS_COMMIT");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--compare")) { o->compare = 1; continue; }
        if (i + 1 >= argc) { usage(argv[0]); return -1; }
        const char *v = argv[++i];
        if (!strcmp(a, "--device")) o->device = v;
        else if (!strcmp(a, "--gpu")) o->gpu = atoi(v);
        else if (!strcmp(a, "--threads")) o->threads = atoi(v);
        else if (!strcmp(a, "--shapes")) o->shapes = v;
        else if (!strcmp(a, "--compare-env")) o->cmp_env = v;
        else if (!strcmp(a, "--tokens")) {
            o->n_tok = 0;
            for (const char *p = v; *p;) {
                char *end;
                long t = strtol(p, &end, 10);
                if (end == p || t < 1 || t > 4096 || o->n_tok == W4B_MAX_TOKENS) { usage(argv[0]); return -1; }
                o->tok[o->n_tok++] = (int)t;
                p = *end == ',' ? end + 1 : end;
                if (*end && *end != ',') { usage(argv[0]); return -1; }
            }
        } else if (!strcmp(a, "--group")) o->group = atoi(v);
        else if (!strcmp(a, "--iters")) o->iters = atoi(v);
        else if (!strcmp(a, "--warmup")) o->warmup = atoi(v);
        else if (!strcmp(a, "--pool-mib")) o->pool_mib = atoi(v);
        else if (!strcmp(a, "--bw-mib")) o->bw_mib = atoi(v);
        else if (!strcmp(a, "--json")) o->json = v;
        else if (!strcmp(a, "--commit")) o->commit = v;
        else { usage(argv[0]); return -1; }
    }
    if ((strcmp(o->shapes, "8b") && strcmp(o->shapes, "70b") && strcmp(o->shapes, "tiny")) ||
        (strcmp(o->device, "cuda") && strcmp(o->device, "cpu") && strcmp(o->device, "auto"))) {
        usage(argv[0]);
        return -1;
    }
    if (o->n_tok < 1 || o->group < 2 || o->group % 2 || o->iters < 1 || o->warmup < 0 || o->pool_mib < 1 || o->bw_mib < 1) {
        fprintf(stderr, "%s: at least one token count, an even group >= 2, iters >= 1, warmup >= 0, pool and bw MiB >= 1\n", argv[0]);
        return -1;
    }
    return 0;
}

/* us a call of matmul_w4 at n tokens over the copies of w (median of 3 runs of iters calls) */
static sits_status_t time_rows(sits_backend_t *be, const opts_t *o, void *y, const void *x, const sits_w4_t *w, int copies, int n,
                               int in, int out, double *us_p)
{
    sits_status_t st;
    int c = 0;
    for (int i = 0; i < o->warmup; i++, c = (c + 1) % copies)
        if ((st = be->ops->matmul_w4(be, y, x, &w[c], NULL, n, in, out)) != SITS_OK) return st;
    if ((st = be->ops->sync(be)) != SITS_OK) return st;
    double t[3];
    for (int rep = 0; rep < 3; rep++) {
        double t0 = sits_bench_now_s();
        for (int i = 0; i < o->iters; i++, c = (c + 1) % copies)
            if ((st = be->ops->matmul_w4(be, y, x, &w[c], NULL, n, in, out)) != SITS_OK) return st;
        if ((st = be->ops->sync(be)) != SITS_OK) return st;
        t[rep] = (sits_bench_now_s() - t0) / o->iters;
    }
    double m = sits_bench_median3(t);
    *us_p = 1e6 * m;
    return SITS_OK;
}

int main(int argc, char **argv)
{
    int provided, rank = 0, rc = 1;
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        fprintf(stderr, "sits-bench-w4: MPI_Init_thread failed\n");
        return 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    sits_log_init(rank);
    opts_t o;
    if (parse_args(argc, argv, &o)) { MPI_Finalize(); return 2; }
    sits_status_t st = SITS_OK;
    sits_backend_t *be = NULL;
    unsigned char *host = NULL;
    void *x = NULL, *y = NULL;
    sits_w4_t *w = NULL;
    int copies = 0;
    json_t *j = json_object(), *jrows = json_array();
    char cmp_var[64] = "", *cmp_val = NULL, *cmp_user = NULL;   /* --compare-env's variable, value, the caller's setting */
    {
        const char *eq = strchr(o.cmp_env, '=');
        if (!eq || eq == o.cmp_env || (size_t)(eq - o.cmp_env) >= sizeof cmp_var) {
            fprintf(stderr, "sits-bench-w4: --compare-env wants VAR=VALUE, got '%s'\n", o.cmp_env);
            MPI_Finalize();
            return 2;
        }
        memcpy(cmp_var, o.cmp_env, (size_t)(eq - o.cmp_env));
        cmp_val = (char *)eq + 1;
        if (getenv(cmp_var)) cmp_user = strdup(getenv(cmp_var));
    }
    const shape_t *sh = !strcmp(o.shapes, "70b") ? shapes_70b : !strcmp(o.shapes, "tiny") ? shapes_tiny : shapes_8b;
    const int n_sh = !strcmp(o.shapes, "tiny") ? 2 : 4;
    int max_n = 0, max_in = 0, max_out = 0;
    for (int t = 0; t < o.n_tok; t++) max_n = o.tok[t] > max_n ? o.tok[t] : max_n;
    for (int s = 0; s < n_sh; s++) {
        max_in = sh[s].in > max_in ? sh[s].in : max_in;
        max_out = sh[s].out > max_out ? sh[s].out : max_out;
        if (sh[s].in % o.group) { fprintf(stderr, "sits-bench-w4: --group %d does not divide in %d\n", o.group, sh[s].in); goto out; }
    }

    int use_cuda = 0;
    if ((st = sits_bench_backend(o.device, o.gpu, o.threads, &be, &use_cuda)) != SITS_OK) {
        fprintf(stderr, "sits-bench-w4: %s backend: %s\n", o.device, sits_status_str(st));
        goto out;
    }
    if (o.compare && !use_cuda) { fprintf(stderr, "sits-bench-w4: --compare needs the cuda backend\n"); goto out; }
    if (!be->ops->matmul_w4) { fprintf(stderr, "sits-bench-w4: the %s backend has no matmul_w4\n", be->ops->name); goto out; }
    const size_t act = sits_dtype_size(be->act_dtype), x_elems = (size_t)max_n * max_in, y_elems = (size_t)max_n * max_out;
    double bw = 0;
    if ((st = sits_bench_copy_bw(be, (size_t)o.bw_mib << 20, &bw)) != SITS_OK) goto out;
    uint64_t rng = 0x5eed0a44ull;
    if ((st = be->ops->alloc(be, x_elems * act, &x)) != SITS_OK || (st = be->ops->alloc(be, y_elems * act, &y)) != SITS_OK) goto out;
    host = malloc(x_elems * act);
    if (!host) { st = SITS_ERR_NOMEM; goto out; }
    for (size_t i = 0; i < x_elems; i++) {   /* x [max_n, max_in]: uniform [-1, 1] */
        float f = (float)((double)sits_bench_rng_next(&rng) / 2147483648.0 - 1.0);
        if (be->act_dtype == SITS_DT_F32) memcpy(host + 4 * i, &f, 4);
        else { uint16_t h = sits_f32_to_bf16(f); memcpy(host + 2 * i, &h, 2); }
    }
    if ((st = be->ops->upload(be, x, host, x_elems * act)) != SITS_OK) goto out;
    free(host);
    host = NULL;

    printf("sits-bench-w4: %s backend, %s linears, group %d, copy bandwidth %.1f GB/s%s%s\n", be->ops->name, o.shapes, o.group,
           1e-9 * bw, o.compare ? "; compare us: " : "", o.compare ? o.cmp_env : "");
    printf("%-8s %6s %6s %6s %10s %8s %10s %7s%s\n", "linear", "out", "in", "tokens", "us", "GB/s", "floor us", "floor%",
           o.compare ? "  compare us" : "");
    for (int s = 0; s < n_sh; s++) {
        const int in = sh[s].in, out = sh[s].out, ng = in / o.group;
        const size_t qb = (size_t)out * (size_t)(in / 2), gb = sizeof(float) * (size_t)out * (size_t)ng;
        const double bytes = (double)qb + 2.0 * (double)gb;   /* nibbles + scales + zeros a call reads */
        copies = (int)(((size_t)o.pool_mib << 20) / (qb + 2 * gb));
        copies = copies < 1 ? 1 : copies > 64 ? 64 : copies;
        w = calloc((size_t)copies, sizeof *w);
        host = malloc(qb > gb ? qb : gb);
        if (!w || !host) { st = SITS_ERR_NOMEM; goto out; }
        for (int c = 0; c < copies; c++) {
            w[c].group_size = o.group;
            w[c].n_groups = ng;
            const size_t pad = (size_t)(sits_w4_rows_alloc(out) - out);   /* [int4 tiles] whole 16-row tiles, as the loader */
            if ((st = be->ops->alloc(be, qb + pad * (size_t)(in / 2), (void **)&w[c].q)) != SITS_OK ||
                (st = be->ops->alloc(be, gb + pad * sizeof(float) * (size_t)ng, (void **)&w[c].scale)) != SITS_OK ||
                (st = be->ops->alloc(be, gb + pad * sizeof(float) * (size_t)ng, (void **)&w[c].zero)) != SITS_OK)
                goto out;
            if (c == 0) {   /* copy 0 random, the others zero: the kernels' work and bytes do not depend on the values */
                for (size_t i = 0; i < qb; i++) host[i] = (unsigned char)sits_bench_rng_next(&rng);
                if ((st = be->ops->upload(be, w[c].q, host, qb)) != SITS_OK) goto out;
                float *f = (float *)host;
                for (size_t i = 0; i < gb / sizeof(float); i++) f[i] = (float)(sits_bench_rng_next(&rng) % 16);
                if ((st = be->ops->upload(be, w[c].zero, host, gb)) != SITS_OK) goto out;
                for (size_t i = 0; i < gb / sizeof(float); i++) f[i] = (0.5f + (float)(sits_bench_rng_next(&rng) % 1000) / 1000.0f) / 64.0f;
                if ((st = be->ops->upload(be, w[c].scale, host, gb)) != SITS_OK) goto out;
            } else if ((st = be->ops->memset0(be, w[c].q, qb)) != SITS_OK || (st = be->ops->memset0(be, w[c].scale, gb)) != SITS_OK ||
                       (st = be->ops->memset0(be, w[c].zero, gb)) != SITS_OK)
                goto out;
            if (be->ops->w4_layout && (st = be->ops->w4_layout(be, &w[c], out, in)) != SITS_OK) goto out;   /* as the loader */
        }
        free(host);
        host = NULL;
        for (int t = 0; t < o.n_tok; t++) {
            const int n = o.tok[t];
            double us = 0, us_cmp = -1;
            if ((st = time_rows(be, &o, y, x, w, copies, n, in, out, &us)) != SITS_OK) goto out;
            if (o.compare) {   /* the same row with --compare-env, then the caller's setting back */
                setenv(cmp_var, cmp_val, 1);
                st = time_rows(be, &o, y, x, w, copies, n, in, out, &us_cmp);
                if (cmp_user) setenv(cmp_var, cmp_user, 1);
                else unsetenv(cmp_var);
                if (st != SITS_OK) goto out;
            }
            const double floor_us = bw > 0 ? 1e6 * bytes / bw : 0;
            printf("%-8s %6d %6d %6d %10.1f %8.1f %10.1f %6.1f%%", sh[s].name, out, in, n, us, 1e-3 * bytes / us, floor_us,
                   100.0 * floor_us / us);
            if (o.compare) printf("  %10.1f", us_cmp);
            printf("\n");
            json_t *r = json_pack("{s:s, s:i, s:i, s:i, s:f, s:f, s:f}", "shape", sh[s].name, "out", out, "in", in, "tokens", n, "us", us,
                                  "gbs", 1e-3 * bytes / us, "floor_us", floor_us);
            if (o.compare) json_object_set_new(r, "us_compare", json_real(us_cmp));
            json_array_append_new(jrows, r);
        }
        for (int c = 0; c < copies; c++) {
            if (w[c].q) be->ops->free(be, w[c].q);
            if (w[c].scale) be->ops->free(be, w[c].scale);
            if (w[c].zero) be->ops->free(be, w[c].zero);
        }
        free(w);
        w = NULL;
    }
    if (o.json) {
        json_object_set_new(j, "bench", json_string("w4"));
        json_object_set_new(j, "settings", json_pack("{s:s, s:s, s:i, s:i, s:i, s:b, s:s}", "backend", be->ops->name, "shapes", o.shapes,
                                                     "group", o.group, "iters", o.iters, "pool_mib", o.pool_mib, "compare", o.compare,
                                                     "compare_env", o.cmp_env));
        json_object_set(j, "rows", jrows);
        json_object_set_new(j, "copy_gbs", json_real(1e-9 * bw));
        json_object_set_new(j, "commit", json_string(o.commit ? o.commit : "unknown"));
        if (json_dump_file(j, o.json, JSON_INDENT(1)) != 0) { fprintf(stderr, "sits-bench-w4: cannot write %s\n", o.json); goto out; }
    }
    rc = 0;
out:
    if (st != SITS_OK) fprintf(stderr, "sits-bench-w4: %s\n", sits_status_str(st));
    if (w && be)
        for (int c = 0; c < copies; c++) {
            if (w[c].q) be->ops->free(be, w[c].q);
            if (w[c].scale) be->ops->free(be, w[c].scale);
            if (w[c].zero) be->ops->free(be, w[c].zero);
        }
    free(w);
    free(host);
    free(cmp_user);
    if (be) {
        if (x) be->ops->free(be, x);
        if (y) be->ops->free(be, y);
        sits_backend_destroy(be);
    }
    json_decref(jrows);
    json_decref(j);
    MPI_Finalize();
    return rc;
}
