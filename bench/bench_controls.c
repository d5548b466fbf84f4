/* bench_controls.c -- [sampling controls] [logprobs] what a step's sampling costs on one rank's
 * vocabulary shard: the device path (the backend's logprob_reduce, logit_process, min_p cut,
 * sample_reduce, logit_pick; only records come back) against the host path it replaced (download the
 * whole [batch, vocab] logits, then the same reductions as host loops -- the cpu reference functions,
 * which are the loops the host path ran). Not a test.
 *
 *   bench/sits-bench-controls [--device cuda|cpu|auto] [--gpu N] [--threads N] [--batch 32]
 *       [--vocab 128256] [--hist 512] [--bias 64] [--top 5] [--iters 20] [--json FILE]
 *
 * Random fp32 logits [batch, vocab]; every row has `hist` history ids (generated counts 1..3, some in
 * the prompt), `bias` logit_bias ids, presence / frequency / repetition penalties, min_p 0.05 at T 1,
 * and asks for `top` logprobs. Each op is timed alone (enqueue + sync), median over iters after one
 * warm-up; the logits are restored from a copy between iterations (not timed). Prints a table (ms);
 * JSON: {bench, device, batch, vocab, hist, bias, top, rows: [{op, ms}]}. Run it on one rank. */
#include <jansson.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_common.h"
#include "util/log.h"

#define MAX_ITERS 1000

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int cmp_d(const void *a, const void *b) { return (*(const double *)a > *(const double *)b) - (*(const double *)a < *(const double *)b); }

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#define CK(call_) do { sits_status_t s_ = (call_); if (s_ != SITS_OK) { \
    fprintf(stderr, "sits-bench-controls: %s: %s\n", #call_, sits_status_str(s_)); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)

static void *xmalloc(size_t n)
{
    void *p = calloc(1, n ? n : 1);
    if (!p) { fprintf(stderr, "sits-bench-controls: out of memory\n"); MPI_Abort(MPI_COMM_WORLD, 1); }
    return p;
}

static void *dev_copy(sits_backend_t *be, const void *h, size_t bytes)
{
    void *d = NULL;
    CK(be->ops->alloc(be, bytes, &d));
    if (h) CK(be->ops->upload(be, d, h, bytes));
    return d;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    sits_log_init(-1);
    const char *device = "auto", *json = NULL;
    int gpu = 0, threads = 0, B = 32, V = 128256, H = 512, NB = 64, TOP = 5, iters = 20;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) { fprintf(stderr, "usage: %s [--device cuda|cpu|auto] [--gpu N] [--threads N] [--batch N] [--vocab N] "
                          "[--hist N] [--bias N] [--top N] [--iters N] [--json FILE]\n", argv[0]); return 2; }
        if (!strcmp(a, "--device")) device = v;
        else if (!strcmp(a, "--gpu")) gpu = atoi(v);
        else if (!strcmp(a, "--threads")) threads = atoi(v);
        else if (!strcmp(a, "--batch")) B = atoi(v);
        else if (!strcmp(a, "--vocab")) V = atoi(v);
        else if (!strcmp(a, "--hist")) H = atoi(v);
        else if (!strcmp(a, "--bias")) NB = atoi(v);
        else if (!strcmp(a, "--top")) TOP = atoi(v);
        else if (!strcmp(a, "--iters")) iters = atoi(v);
        else if (!strcmp(a, "--json")) json = v;
        else { fprintf(stderr, "unknown option %s\n", a); return 2; }
        i++;
    }
    if (B < 1 || V < 1 || H < 0 || NB < 0 || H + NB > V || TOP < 0 || TOP > SITS_LOGPROB_MAX_TOP || iters < 1 || iters > MAX_ITERS) {
        fprintf(stderr, "sits-bench-controls: bad sizes\n");
        return 2;
    }
    sits_backend_t *be = NULL;
    CK(sits_bench_backend(device, gpu, threads, &be, NULL));
    const sits_backend_ops_t *op = be->ops;
    if (!op->logit_process || !op->logprob_reduce || !op->logit_pick || !op->sample_reduce) {
        fprintf(stderr, "sits-bench-controls: the %s backend lacks the ops\n", op->name);
        return 1;
    }
    size_t nv = (size_t)B * V, m = (size_t)B * (H + NB);
    float *logits = xmalloc(nv * sizeof *logits), *host = NULL;
    /* the host path's copy is page-locked where the backend has it (as the engine's logits_host was) */
    if (op->host_alloc) CK(op->host_alloc(be, nv * sizeof *host, (void **)&host));
    else host = xmalloc(nv * sizeof *host);
    uint64_t r = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < nv; i++) {
        r ^= r >> 12; r ^= r << 25; r ^= r >> 27;
        logits[i] = (float)((double)((r * 0x2545F4914F6CDD1Dull) >> 11) / 9007199254740992.0 * 12.0 - 6.0);
    }
    /* every row: H + NB distinct ids, the history first (stride V / (H + NB), sorted by construction) */
    sits_logit_proc_row_t *rows = xmalloc(sizeof *rows * (size_t)B);
    sits_logit_proc_ent_t *ents = xmalloc(sizeof *ents * m);
    sits_sample_row_t *srows = xmalloc(sizeof *srows * (size_t)B);
    sits_logprob_row_t *lrows = xmalloc(sizeof *lrows * (size_t)B);
    int32_t *ids = xmalloc(sizeof *ids * (size_t)B);
    float *cut = xmalloc(sizeof *cut * (size_t)B), *rowmax = xmalloc(sizeof *rowmax * (size_t)B);
    int step = (H + NB) ? V / (H + NB) : 1;
    for (int s = 0; s < B; s++) {
        rows[s] = (sits_logit_proc_row_t){ 0.5f, 0.3f, 1.1f, s * (H + NB), H + NB, 0 };
        for (int k = 0; k < H + NB; k++)
            ents[(size_t)s * (H + NB) + k] = (sits_logit_proc_ent_t){ k * step + s % step, k >= H ? 1.0f : 0.0f, k < H ? 1 + k % 3 : 0,
                                                                    k % 4 == 0 ? SITS_PROC_PROMPT : 0 };
        srows[s] = (sits_sample_row_t){ .temperature = 1.0f, .inv_temp = 1.0f, .mode = SITS_SAMPLE_GUMBEL, .seed = 7, .step = (uint64_t)s };
        lrows[s] = (sits_logprob_row_t){ s, -1, TOP, 0 };
        ids[s] = s * 7;
    }
    size_t rec1 = SITS_SAMPLE_REC_BYTES(1);
    void *d_l = dev_copy(be, logits, nv * sizeof(float)), *d_rows = dev_copy(be, rows, sizeof *rows * (size_t)B);
    void *d_ents = dev_copy(be, ents, sizeof *ents * m), *d_raw = dev_copy(be, NULL, sizeof(float) * m + 4);
    void *d_srows = dev_copy(be, srows, sizeof *srows * (size_t)B), *d_lrows = dev_copy(be, lrows, sizeof *lrows * (size_t)B);
    void *d_ids = dev_copy(be, ids, sizeof *ids * (size_t)B), *d_max = dev_copy(be, NULL, sizeof(float) * (size_t)B);
    void *d_cut = dev_copy(be, NULL, sizeof(float) * (size_t)B), *d_pick = dev_copy(be, NULL, sizeof(float) * (size_t)B);
    void *d_rec = dev_copy(be, NULL, rec1 * (size_t)B), *d_lrec = dev_copy(be, NULL, sizeof(sits_logprob_rec_t) * (size_t)B);
    unsigned char *h_rec = xmalloc(rec1 * (size_t)B + sizeof(sits_logprob_rec_t) * (size_t)B);
    sits_logprob_rec_t *h_lrec = xmalloc(sizeof *h_lrec * (size_t)B);
    float *h_raw = xmalloc(sizeof(float) * m + 4);
    for (int s = 0; s < B; s++) cut[s] = -INFINITY;

    enum { OP_SAMPLE, OP_LOGPROB, OP_PROCESS, OP_MINP, OP_PICK, OP_DEVICE, OP_DOWNLOAD, OP_HOSTLOOPS, OP_HOST, N_OP };
    static const char *name[N_OP] = { "sample_reduce (gumbel)", "logprob_reduce (top N)", "logit_process (entries)",
                                      "min_p: row max + cut", "logit_pick", "device path: all + records down",
                                      "host path: logits download", "host path: host loops", "host path: total" };
    double t[N_OP][MAX_ITERS];
    for (int it = -1; it < iters; it++) {
        CK(op->upload(be, d_l, logits, nv * sizeof(float)));   /* fresh raw logits, not timed */
        CK(op->sync(be));
        double t0 = now_ms(), a, b;
        CK(op->logprob_reduce(be, d_lrec, d_l, 0, V, d_lrows, B));
        CK(op->sync(be));
        a = now_ms();
        CK(op->logit_process(be, d_l, B, 0, V, d_rows, d_ents, d_raw, NULL, d_max));
        CK(op->sync(be));
        b = now_ms();
        CK(op->download(be, rowmax, d_max, sizeof(float) * (size_t)B));
        for (int s = 0; s < B; s++) cut[s] = rowmax[s] + logf(0.05f);
        CK(op->upload(be, d_cut, cut, sizeof(float) * (size_t)B));
        CK(op->logit_process(be, d_l, B, 0, V, NULL, NULL, NULL, d_cut, NULL));
        CK(op->sync(be));
        double c = now_ms();
        CK(op->sample_reduce(be, d_rec, d_l, B, 0, V, d_srows, 1));
        CK(op->sync(be));
        double d = now_ms();
        CK(op->logit_pick(be, d_pick, d_l, B, 0, V, d_ids, d_rows, d_ents, d_raw));
        CK(op->download(be, h_rec, d_rec, rec1 * (size_t)B));
        CK(op->download(be, h_lrec, d_lrec, sizeof *h_lrec * (size_t)B));
        CK(op->download(be, rowmax, d_pick, sizeof(float) * (size_t)B));
        double e = now_ms();
        /* the host path on the same raw logits: download them, then the same loops on the host */
        CK(op->upload(be, d_l, logits, nv * sizeof(float)));
        CK(op->sync(be));
        double f = now_ms();
        CK(op->download(be, host, d_l, nv * sizeof(float)));
        double g = now_ms();
        sits_backend_cpu_logprob_reduce(h_lrec, host, 0, V, lrows, B);
        sits_backend_cpu_logit_process(host, B, 0, V, rows, ents, h_raw, NULL, rowmax);
        for (int s = 0; s < B; s++) cut[s] = rowmax[s] + logf(0.05f);
        sits_backend_cpu_logit_process(host, B, 0, V, NULL, NULL, NULL, cut, NULL);
        sits_backend_cpu_sample_reduce(h_rec, host, B, 0, V, srows, 1);
        double h = now_ms();
        if (it < 0) continue;
        t[OP_LOGPROB][it] = a - t0;
        t[OP_PROCESS][it] = b - a;
        t[OP_MINP][it] = c - b;
        t[OP_SAMPLE][it] = d - c;
        t[OP_PICK][it] = e - d;
        t[OP_DEVICE][it] = e - t0;
        t[OP_DOWNLOAD][it] = g - f;
        t[OP_HOSTLOOPS][it] = h - g;
        t[OP_HOST][it] = h - f;
    }
    printf("sampling of a step on the %s backend: batch %d, vocab shard %d, %d history + %d bias ids a row, top %d logprobs, "
           "min_p; median of %d\n", op->name, B, V, H, NB, TOP, iters);
    json_t *jrows = json_array();
    for (int k = 0; k < N_OP; k++) {
        double ms = median(t[k], iters);
        printf("  %-36s %9.3f ms\n", name[k], ms);
        json_array_append_new(jrows, json_pack("{s:s, s:f}", "op", name[k], "ms", ms));
    }
    if (json) {
        json_t *doc = json_pack("{s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:o}", "bench", "sits-bench-controls", "device", op->name,
                                "batch", B, "vocab", V, "hist", H, "bias", NB, "top", TOP, "rows", jrows);
        if (json_dump_file(doc, json, JSON_INDENT(1)) != 0) fprintf(stderr, "sits-bench-controls: cannot write %s\n", json);
        json_decref(doc);
    } else {
        json_decref(jrows);
    }
    void *fr[] = { d_l, d_rows, d_ents, d_raw, d_srows, d_lrows, d_ids, d_max, d_cut, d_pick, d_rec, d_lrec };
    for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) op->free(be, fr[i]);
    if (op->host_free) op->host_free(be, host);
    else free(host);
    free(logits); free(rows); free(ents); free(srows); free(lrows); free(ids); free(cut); free(rowmax);
    free(h_rec); free(h_lrec); free(h_raw);
    sits_backend_destroy(be);
    MPI_Finalize();
    return 0;
}
