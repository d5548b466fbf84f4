/* bench_decode.c -- decode ms/step and prefill time of one model on one TP group, beside the
 * memory-bandwidth floor measured in the same process. Not a test.
 *
 *   bench/sits-bench-decode [--model DIR] [--device cuda|cpu|auto] [--gpu N] [--threads N]
 *       [--batch 1,8,32,64] [--context 128,2048] [--prefill 2048] [--iters N] [--warmup N]
 *       [--fill prefill|none] [--chunk N] [--block-size N] [--load-format dummy|auto]
 *       [--bw-mib N] [--commit SHA] [--json FILE] [--quant SPEC] [--kv-cache-dtype auto|bf16|int8|fp8]
 *       [--fp8-fused-quant 1|0] [--verify 1,2,4,8]
 *
 * Every rank of MPI_COMM_WORLD is one rank of the TP group (TP = world size; on cuda rank r of a node
 * takes GPU --gpu + r and the all-reduces go over NCCL). All ranks run the same batches in lockstep;
 * rank 0 prints the table and writes the JSON (its own timings and floor).
 *
 * For each context C (ascending) the KV cache of max(batch) sequences is filled to C tokens
 * (--fill prefill: real prefill steps of up to --chunk tokens, no logits; --fill none: blocks are
 * allocated and decode runs over whatever the KV memory holds -- attention time depends only on
 * the lengths). Then for each batch B the first B sequences decode warmup + iters steps: step j
 * feeds one random token per sequence at position C + j and asks logits for all B rows. A step is
 * one sits_engine_run + sits_engine_sample (metadata upload, forward -- a CUDA graph replay on cuda --,
 * greedy sampling reduced on the device, candidates download), timed on the host;
 * ms/step = median (mean and min also kept), tok/s = B / median.
 * Prefill 1xN: one forward of N tokens of one sequence at positions 0..N-1 with the logits of the
 * last one; median over iters (after warmup).
 *
 * [speculative] --verify K,...: after each decode row, the same B sequences run verification steps
 * of k + 1 positions each (the last token and k drafts, as src/spec/spec.h verifies them: KV written
 * for all, every position an output row sampled greedily), at positions C + j .. C + j + k; the row
 * (kind "verify", k) reports ms/step and its ratio to the plain decode step of the same (B, C).
 *
 * Floor: (weight bytes this rank holds + KV bytes the timed steps read, on average per step) / copy
 * bandwidth, where the copy bandwidth is measured here: cudaMemcpy device-to-device of a --bw-mib
 * buffer on cuda, memcpy of a host buffer on cpu, counted as 2 * bytes / time (read + write).
 * The weight bytes include the whole embedding table although a step reads only B rows of it
 * (the JSON records embed_bytes so a reader can take it out).
 * [moe] For a mixture-of-experts model the weight term is the active bytes of a step of T tokens
 * (moe_step_bytes): everything but the experts, plus the experts the step is expected to read --
 * E_loc (1 - (1 - k / E)^T) of this rank's E_loc per layer under uniform routing (random weights route
 * about uniformly; T = B for a decode step): at batch 1, k experts a layer (the active-parameter floor).
 *
 * JSON (one object): bench, engine, machine, date, commit, device, backend, model, tp, dtypes,
 * weight_bytes, embed_bytes, kv_bytes_per_token, copy_bw_gbs, fill, iters, warmup,
 * rows[] = {kind "decode"|"prefill", batch, context, tokens, ms_median, ms_mean, ms_min, tok_s,
 * floor_ms, pct_floor, tflops (prefill)}. The commit comes from --commit or $SITS_COMMIT. */
#include <jansson.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef HAVE_CUDA
#include <cuda_runtime.h>
#endif

#include "bench/bench_common.h"
#include "sched/generate.h"
#include "util/log.h"

#define MAX_LIST 32

typedef struct {
    const char *model, *device, *fill, *load_format, *json, *commit;
    int gpu, threads;
    int batch[MAX_LIST], n_batch;
    int context[MAX_LIST], n_context;
    int prefill, iters, warmup, chunk, block_size, bw_mib;
    int cuda_graphs;        /* [perf] 0: the runner's engine never replays CUDA graphs */
    int custom_ar;          /* TP on GPUs: 1 the custom CUDA-IPC all-reduce (as sits-dist by default), 0 NCCL only */
    int nvlink;             /* every GPU pair NVLink-connected: 1, 0 or -1 unknown */
    const char *quant;      /* [fp8] --quant spec (model/precision.h); NULL: auto */
    int ep;                 /* [moe] --ep: experts split over the ranks (== world size), 1: TP-sharded */
    int moe_dev_max;        /* [moe dev] --moe-device-max-tokens: engine param moe_dev_max (0: default 256, -1: host routing) */
    const char *kv_dtype;   /* [int8 kv] --kv-cache-dtype (auto | bf16 | fp32 | int8 | fp8); NULL: auto */
    int fp8_fused;          /* [fp8] 0: FP8 GEMM inputs quantised by a kernel of their own (engine fp8_separate_quant) */
    int verify[MAX_LIST], n_verify;   /* [speculative] drafts per sequence of the verification rows */
} opts_t;

typedef struct {
    const char *kind;
    int batch, context, tokens;
    double ms_median, ms_mean, ms_min, tok_s, floor_ms, pct_floor, tflops;
    double ms_p99;
    int k;                  /* [speculative] verify rows: drafts per sequence */
    double vs_decode;       /* [speculative] verify rows: ms_median / the plain decode step's */
} row_t;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double g_last_p99; /* P99 of the last stats() call (nearest rank) */

/* median, mean, min of t[n] (seconds); sorts t. */
static void stats(double *t, int n, double *med_p, double *mean_p, double *min_p)
{
    double sum = 0;
    for (int i = 0; i < n; i++) sum += t[i];
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    *med_p = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    *mean_p = sum / n;
    *min_p = t[0];
    int k = (int)(0.99 * n + 0.999999) - 1;
    g_last_p99 = t[k < 0 ? 0 : k >= n ? n - 1 : k];
}

/* "1,8,32" -> list; 0 on success. */
static int parse_list(const char *s, int *out, int *n_p)
{
    int n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v > 1 << 24 || n == MAX_LIST) return -1;
        out[n++] = (int)v;
        s = end;
        if (*s == ',') s++;
        else if (*s) return -1;
    }
    *n_p = n;
    return n > 0 ? 0 : -1;
}

static int max_of(const int *v, int n)
{
    int m = 0;
    for (int i = 0; i < n; i++) if (v[i] > m) m = v[i];
    return m;
}

static void sort_ints(int *v, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) { int t = v[j]; v[j] = v[j - 1]; v[j - 1] = t; }
}

/* [moe] Weight bytes a step of T tokens reads on this rank (see the file comment); held bytes for a
 * dense model. */
static double moe_step_bytes(const sits_model_config_t *c, const sits_shard_dims_t *d, double held, double pbytes, int T)
{
    if (!c->moe.n_experts) return held;
    double expert = 3.0 * c->hidden_size * d->ie_loc * pbytes, layers = d->layer1 - d->layer0;
    double p_touch = 1.0 - pow(1.0 - (double)c->moe.top_k / c->moe.n_experts, T);
    return held - layers * d->n_exp_loc * expert * (1.0 - p_touch);
}

/* [moe] bytes an expert parameter takes as loaded: [moe int4] 0.5 + its group's scale and zero, [moe fp8] 1 (+ a
 * row scale), else the weight dtype's size */
static double moe_param_bytes(const sits_model_weights_t *w, size_t wsize)
{
    const sits_layer_weights_t *lw = &w->layers[w->dims.layer0];
    if (lw->exp_gu_w4) return 0.5 + 2.0 * sizeof(float) / (double)lw->exp_gu_w4[0].group_size;
    if (lw->exp_gu_scale) return 1.0;
    return (double)wsize;
}

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--model DIR] [--device cuda|cpu|auto] [--gpu N] [--threads N] [--batch 1,8,32,64]\n"
            "       [--context 128,2048] [--prefill 2048 (0: none)] [--iters N] [--warmup N] [--fill prefill|none]\n"
            "       [--chunk N] [--block-size N] [--load-format dummy|auto] [--bw-mib N] [--commit SHA] [--json FILE]\n"
            "       [--cuda-graphs 1|0] [--custom-allreduce 1|0] [--nvlink 1|0|-1] [--quant SPEC] [--kv-cache-dtype auto|bf16|int8|fp8]\n"
            "       [--fp8-fused-quant 1|0] [--verify 1,2,4,8] [--ep N (MoE: experts over N = world ranks)]\n"
            "       [--moe-device-max-tokens N (MoE: device routing up to N tokens a step; 0: default 256, -1: never)]\n",
            argv0);
}

static int parse_args(int argc, char **argv, opts_t *o)
{
    static char defmodel[4096];
    const char *src = getenv("top_srcdir");
    snprintf(defmodel, sizeof defmodel, "%s/bench/configs/llama3-8b", src ? src : ".");
    *o = (opts_t){ .model = defmodel, .device = "auto", .fill = "prefill", .load_format = "dummy", .gpu = 0,
                   .prefill = 2048, .iters = 20, .warmup = 3, .chunk = 2048, .block_size = 16, .bw_mib = 1024,
                   .cuda_graphs = 1, .custom_ar = 1, .nvlink = 1, .fp8_fused = 1 };
    o->commit = getenv("SITS_COMMIT");
    parse_list("1,8,32,64", o->batch, &o->n_batch);
    parse_list("128,2048", o->context, &o->n_context);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!v) bad = 1;
        else if (!strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "--device")) o->device = v;
        else if (!strcmp(a, "--gpu")) o->gpu = atoi(v);
        else if (!strcmp(a, "--threads")) o->threads = atoi(v);
        else if (!strcmp(a, "--batch")) bad = parse_list(v, o->batch, &o->n_batch);
        else if (!strcmp(a, "--context")) bad = parse_list(v, o->context, &o->n_context);
        else if (!strcmp(a, "--prefill")) o->prefill = atoi(v);
        else if (!strcmp(a, "--iters")) o->iters = atoi(v);
        else if (!strcmp(a, "--warmup")) o->warmup = atoi(v);
        else if (!strcmp(a, "--fill")) o->fill = v;
        else if (!strcmp(a, "--chunk")) o->chunk = atoi(v);
        else if (!strcmp(a, "--block-size")) o->block_size = atoi(v);
        else if (!strcmp(a, "--load-format")) o->load_format = v;
        else if (!strcmp(a, "--bw-mib")) o->bw_mib = atoi(v);
        else if (!strcmp(a, "--commit")) o->commit = v;
        else if (!strcmp(a, "--json")) o->json = v;
        else if (!strcmp(a, "--cuda-graphs")) o->cuda_graphs = atoi(v);
        else if (!strcmp(a, "--custom-allreduce")) o->custom_ar = atoi(v);
        else if (!strcmp(a, "--nvlink")) o->nvlink = atoi(v);
        else if (!strcmp(a, "--quant")) o->quant = v;   /* [fp8] e.g. bf16, ffn=fp8, fp8 */
        else if (!strcmp(a, "--kv-cache-dtype")) o->kv_dtype = v;   /* [int8 kv] */
        else if (!strcmp(a, "--fp8-fused-quant")) o->fp8_fused = atoi(v);
        else if (!strcmp(a, "--verify")) bad = parse_list(v, o->verify, &o->n_verify);   /* [speculative] */
        else if (!strcmp(a, "--ep")) o->ep = atoi(v);   /* [moe] */
        else if (!strcmp(a, "--moe-device-max-tokens")) o->moe_dev_max = atoi(v);   /* [moe dev] */
        else bad = 1;
        if (bad) { usage(argv[0]); return -1; }
        i++;
    }
    for (int i = 0; i < o->n_batch; i++)
        if (o->batch[i] < 1) { fprintf(stderr, "batch sizes must be >= 1\n"); return -1; }
    for (int i = 0; i < o->n_verify; i++)
        if (o->verify[i] < 1 || o->verify[i] > 16) { fprintf(stderr, "--verify: k in 1..16\n"); return -1; }
    if (o->iters < 1 || o->warmup < 0 || o->prefill < 0 || o->chunk < 1 || o->block_size < 1 || o->bw_mib < 1 ||
        (strcmp(o->fill, "prefill") && strcmp(o->fill, "none")) ||
        (strcmp(o->load_format, "dummy") && strcmp(o->load_format, "auto"))) {
        usage(argv[0]);
        return -1;
    }
    sort_ints(o->batch, o->n_batch);
    sort_ints(o->context, o->n_context);
    return 0;
}

/* Bytes in use on this rank's GPU (all processes), 0 on the cpu backend. */
static double device_mem_used(const sits_backend_t *be)
{
#ifdef HAVE_CUDA
    size_t fr = 0, tot = 0;
    if (be->device >= 0 && cudaMemGetInfo(&fr, &tot) == cudaSuccess) return (double)(tot - fr);
#endif
    (void)be;
    return 0.0;
}

static void device_name(const sits_backend_t *be, char *buf, size_t n)
{
    snprintf(buf, n, "unknown");
    if (be->device >= 0) {
#ifdef HAVE_CUDA
        struct cudaDeviceProp prop;
        if (cudaGetDeviceProperties(&prop, be->device) == cudaSuccess) snprintf(buf, n, "%s", prop.name);
#endif
        return;
    }
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *c = strchr(line, ':');
        if (!strncmp(line, "model name", 10) && c) {
            c += 1 + (c[1] == ' ');
            c[strcspn(c, "\n")] = 0;
            snprintf(buf, n, "%s", c);
            break;
        }
    }
    fclose(f);
}

static uint32_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 33);
}

typedef struct {
    sits_runner_t *r;
    int mb;                 /* max blocks per sequence */
    int32_t *bt;            /* [max_seqs, mb] */
    int32_t *tok, *pos, *seq, *out_rows;  /* [max_tokens] each (out_rows [max_seqs]) */
    uint64_t rng;
    const float *logits;    /* the last step's logits (engine-owned) */
    sits_sample_params_t *sp;  /* [max_seqs] greedy */
    int32_t *sampled;          /* [max_seqs] */
} bench_t;

static sits_status_t forward(bench_t *b, int n_tokens, int n_seqs, int n_out, double *dt_p)
{
    sits_batch_t batch = { .n_tokens = n_tokens, .tokens = b->tok, .pos = b->pos, .seq = b->seq, .n_seqs = n_seqs,
                           .block_tables = b->bt, .n_out = n_out, .out_rows = b->out_rows };
    double t0 = sits_bench_now_s();
    sits_status_t st = sits_engine_forward(b->r->engine, &batch, &b->logits);
    if (dt_p) *dt_p = sits_bench_now_s() - t0;
    return st;
}

/* [perf] One decode step as the server runs it (sched/worker.c): enqueue, then greedy sampling with
 * the reduction on the device, so only the candidates cross PCIe; the logits stay on the device. */
static sits_status_t decode_step(bench_t *b, int n, double *dt_p)
{
    sits_batch_t batch = { .n_tokens = n, .tokens = b->tok, .pos = b->pos, .seq = b->seq, .n_seqs = n,
                           .block_tables = b->bt, .n_out = n, .out_rows = b->out_rows, .sample = b->sp };
    double t0 = sits_bench_now_s();
    sits_status_t st = sits_engine_run(b->r->engine, &batch);
    if (st == SITS_OK) st = sits_engine_sample(b->r->engine, b->r->tp, b->sp, b->sampled);
    if (dt_p) *dt_p = sits_bench_now_s() - t0;
    return st;
}

/* The last step's logits [n_out, v_count] are finite (a broken kernel shows up here, not only in the timing). */
static sits_status_t check_logits(const bench_t *b, int n_out, const char *what)
{
    size_t n = (size_t)n_out * (size_t)b->r->w->dims.v_count;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(b->logits[i])) {
            fprintf(stderr, "sits-bench-decode: %s: logit %zu of row %zu is %g\n", what, i % b->r->w->dims.v_count,
                    i / b->r->w->dims.v_count, (double)b->logits[i]);
            return SITS_ERR_INTERNAL;
        }
    return SITS_OK;
}

/* Prefill positions 0..ctx-1 of sequences 0..n_seqs-1, up to `chunk` tokens a step, no logits. */
static sits_status_t fill_kv(bench_t *b, int n_seqs, int ctx, int chunk)
{
    int s = 0, off = 0;
    while (s < n_seqs) {
        int nt = 0;
        while (s < n_seqs && nt < chunk) {
            int take = ctx - off < chunk - nt ? ctx - off : chunk - nt;
            for (int j = 0; j < take; j++) {
                b->tok[nt + j] = (int32_t)(lcg(&b->rng) % (uint32_t)b->r->cfg.vocab_size);
                b->pos[nt + j] = off + j;
                b->seq[nt + j] = s;
            }
            nt += take;
            off += take;
            if (off == ctx) { s++; off = 0; }
        }
        SITS_CHECK(forward(b, nt, n_seqs, 0, NULL));
    }
    return SITS_OK;
}

/* warmup + iters decode steps of sequences 0..n-1 starting at position ctx; times[iters] in seconds. */
static sits_status_t decode_steps(bench_t *b, int n, int ctx, int warmup, int iters, double *times)
{
    for (int j = 0; j < warmup + iters; j++) {
        for (int i = 0; i < n; i++) {
            b->tok[i] = (int32_t)(lcg(&b->rng) % (uint32_t)b->r->cfg.vocab_size);
            b->pos[i] = ctx + j;
            b->seq[i] = i;
            b->out_rows[i] = i;
        }
        double dt;
        SITS_CHECK(decode_step(b, n, &dt));
        if (j >= warmup) times[j - warmup] = dt;
    }
    return sits_engine_logits(b->r->engine, &b->logits); /* for check_logits, outside the timing */
}

/* [speculative] warmup + iters verification steps of sequences 0..n-1, k + 1 positions each (step j at
 * ctx + j .. ctx + j + k), every position an output row sampled greedily; times[iters] in seconds. */
static sits_status_t verify_steps(bench_t *b, int n, int k, int ctx, int warmup, int iters, double *times)
{
    int nt = n * (k + 1);
    for (int j = 0; j < warmup + iters; j++) {
        for (int t = 0; t < nt; t++) {
            b->tok[t] = (int32_t)(lcg(&b->rng) % (uint32_t)b->r->cfg.vocab_size);
            b->pos[t] = ctx + j + t % (k + 1);
            b->seq[t] = t / (k + 1);
            b->out_rows[t] = t;
        }
        sits_batch_t batch = { .n_tokens = nt, .tokens = b->tok, .pos = b->pos, .seq = b->seq, .n_seqs = n,
                               .block_tables = b->bt, .n_out = nt, .out_rows = b->out_rows, .sample = b->sp };
        double t0 = sits_bench_now_s();
        sits_status_t st = sits_engine_run(b->r->engine, &batch);
        if (st == SITS_OK) st = sits_engine_sample(b->r->engine, b->r->tp, b->sp, b->sampled);
        SITS_CHECK(st);
        if (j >= warmup) times[j - warmup] = sits_bench_now_s() - t0;
    }
    return SITS_OK;
}

static sits_status_t prefill_steps(bench_t *b, int n, int warmup, int iters, double *times)
{
    for (int j = 0; j < warmup + iters; j++) {
        for (int i = 0; i < n; i++) {
            b->tok[i] = (int32_t)(lcg(&b->rng) % (uint32_t)b->r->cfg.vocab_size);
            b->pos[i] = i;
            b->seq[i] = 0;
        }
        b->out_rows[0] = n - 1;
        double dt;
        SITS_CHECK(forward(b, n, 1, 1, &dt));
        if (j >= warmup) times[j - warmup] = dt;
    }
    return SITS_OK;
}

/* Matmul + attention flops of a prefill of n tokens on this rank (logits of one row). */
static double prefill_flops(const sits_model_config_t *c, const sits_shard_dims_t *d, int n)
{
    double H = c->hidden_size, hd = c->head_dim, q = (double)d->nh_loc * hd;
    double per_tok = 2.0 * (H * d->qkv_dim + q * H + H * 2.0 * d->i_loc + (double)d->i_loc * H);
    double attn = 4.0 * q * ((double)n * (n + 1) / 2.0);   /* QK^T and PV over the causal triangle */
    return c->n_layers * (per_tok * n + attn) + 2.0 * H * d->v_count;
}

static void print_row(const row_t *w)
{
    if (!strcmp(w->kind, "verify"))   /* [speculative] */
        printf("%-8s %6d %8d %10.3f %10.3f %10.1f %9.3f %7.1f%%  k %d: %.3fx the decode step\n", w->kind, w->batch, w->context,
               w->ms_median, w->ms_mean, w->tok_s, w->floor_ms, w->pct_floor, w->k, w->vs_decode);
    else if (!strcmp(w->kind, "decode"))
        printf("%-8s %6d %8d %10.3f %10.3f %10.1f %9.3f %7.1f%%  p99 %.3f ms\n", w->kind, w->batch, w->context, w->ms_median,
               w->ms_mean, w->tok_s, w->floor_ms, w->pct_floor, w->ms_p99);
    else
        printf("%-8s %6d %8d %10.3f %10.3f %10.1f %9.3f %7.1f%%  %.2f TFLOP/s\n", w->kind, w->batch, w->context,
               w->ms_median, w->ms_mean, w->tok_s, w->floor_ms, w->pct_floor, w->tflops);
}

static int write_json(const char *path, json_t *meta, const row_t *rows, int n_rows)
{
    json_t *arr = json_array();
    for (int i = 0; i < n_rows; i++) {
        const row_t *w = &rows[i];
        json_t *o = json_pack("{s:s, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f}", "kind", w->kind, "batch", w->batch,
                              "context", w->context, "tokens", w->tokens, "ms_median", w->ms_median, "ms_mean", w->ms_mean,
                              "ms_min", w->ms_min, "tok_s", w->tok_s, "floor_ms", w->floor_ms, "pct_floor", w->pct_floor);
        if (!strcmp(w->kind, "prefill")) json_object_set_new(o, "tflops", json_real(w->tflops));
        if (!strcmp(w->kind, "verify")) {   /* [speculative] */
            json_object_set_new(o, "k", json_integer(w->k));
            json_object_set_new(o, "vs_decode", json_real(w->vs_decode));
        }
        json_object_set_new(o, "ms_p99", json_real(w->ms_p99));
        json_array_append_new(arr, o);
    }
    json_object_set_new(meta, "rows", arr);
    int rc = json_dump_file(meta, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (rc) fprintf(stderr, "cannot write %s\n", path);
    return rc;
}

int main(int argc, char **argv)
{
    int provided, rank = 0, world = 1, rc = 1;
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        fprintf(stderr, "sits-bench-decode: MPI_Init_thread failed\n");
        return 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    sits_log_init(rank);
    opts_t o;
    if (parse_args(argc, argv, &o)) { MPI_Finalize(); return 2; }

    sits_status_t st = SITS_OK;
    sits_backend_t *be = NULL;
    sits_comm_t *tp = NULL, *tp_dev = NULL;   /* tp_dev: NCCL for TP > 1 on cuda, else NULL (tp carries all) */
    sits_runner_t *r = NULL;
    bench_t b = { .rng = 0x5eed0001ull };
    row_t *rows = NULL;
    double *times = NULL;
    int32_t *ids = NULL;   /* KV block ids of the current case */
    int n_rows = 0;

    /* backend */
    int n_gpu = sits_backend_cuda_device_count();
    int use_cuda = !strcmp(o.device, "cuda") || (!strcmp(o.device, "auto") && n_gpu > 0);
    if (!use_cuda && strcmp(o.device, "cpu") && strcmp(o.device, "auto")) { usage(argv[0]); goto out; }
#ifndef HAVE_NCCL
    if (use_cuda && world > 1) {
        if (rank == 0) fprintf(stderr, "sits-bench-decode: TP > 1 on cuda needs NCCL (not configured); run one rank\n");
        goto out;
    }
#endif
    st = sits_bench_backend(use_cuda ? "cuda" : "cpu", o.gpu, o.threads, &be, NULL);   /* one GPU per rank of a node */
    if (st != SITS_OK) { fprintf(stderr, "sits-bench-decode: %s backend: %s\n", use_cuda ? "cuda" : "cpu", sits_status_str(st)); goto out; }
    if (o.kv_dtype) { /* [int8 kv] */
        sits_dtype_t kdt;
        st = sits_backend_kv_dtype_parse(o.kv_dtype, be->act_dtype, &kdt);
        if (st == SITS_OK) st = sits_backend_set_kv_dtype(be, kdt);
        if (st != SITS_OK) { fprintf(stderr, "sits-bench-decode: --kv-cache-dtype %s: %s\n", o.kv_dtype, sits_status_str(st)); goto out; }
    }
    if ((st = sits_comm_mpi_create(MPI_COMM_WORLD, 600.0, &tp)) != SITS_OK) goto out;
#ifdef HAVE_NCCL
    /* TP on GPUs: the custom all-reduce (NCCL above its size limit), as sits-dist uses by default, or
     * NCCL only; TP 1 and the cpu use the mpi communicator. The custom path beyond 2 GPUs needs NVLink:
     * --nvlink 1 (default: the DGX/HGX nodes this bench is for), 0 none, -1 unknown (NCCL then) */
    if (use_cuda && world > 1) {
        st = o.custom_ar ? sits_comm_custom_ar_create(MPI_COMM_WORLD, be, 600.0, -1, -1, o.nvlink, &tp_dev)
                         : sits_comm_nccl_create(MPI_COMM_WORLD, be, 600.0, &tp_dev);
        if (st != SITS_OK) goto out;
    }
#endif

    /* engine sized for the largest case */
    int max_b = max_of(o.batch, o.n_batch), max_c = max_of(o.context, o.n_context);
    int steps = o.warmup + o.iters;
    int kmax = o.n_verify ? max_of(o.verify, o.n_verify) : 0;   /* [speculative] */
    int mml = max_c + steps + kmax > o.prefill ? max_c + steps + kmax : o.prefill;
    int max_tokens = max_b * (kmax + 1);
    if (o.prefill > max_tokens) max_tokens = o.prefill;
    if (!strcmp(o.fill, "prefill") && o.chunk > max_tokens) max_tokens = o.chunk;
    int chunk = o.chunk < max_tokens ? o.chunk : max_tokens;
    sits_runner_params_t rp = { .model_dir = o.model, .dummy = !strcmp(o.load_format, "dummy"), .dummy_seed = 0x5175d157ull,
                                .max_seqs = max_b * (kmax + 1), .max_tokens = max_tokens, .max_model_len = mml,
                                .block_size = o.block_size, .kv_bytes = 0, .no_cuda_graphs = !o.cuda_graphs,
                                .quant = o.quant, .fp8_separate_quant = !o.fp8_fused, .ep = o.ep,
                                .moe_dev_max = o.moe_dev_max };
    double t0 = sits_bench_now_s();
    if ((st = sits_runner_create(&rp, be, tp, tp_dev, &r)) != SITS_OK) {
        fprintf(stderr, "sits-bench-decode: cannot load %s: %s\n", o.model, sits_status_str(st));
        goto out;
    }
    double load_s = sits_bench_now_s() - t0;
    b.r = r;
    b.mb = r->ep.max_blocks_per_seq;
    b.bt = calloc((size_t)max_b * b.mb, sizeof(int32_t));
    b.tok = malloc(sizeof(int32_t) * (size_t)max_tokens * 3);
    b.out_rows = malloc(sizeof(int32_t) * (size_t)max_tokens);
    b.sp = calloc((size_t)max_b * (kmax + 1), sizeof *b.sp);
    b.sampled = malloc(sizeof(int32_t) * (size_t)max_b * (kmax + 1));
    times = malloc(sizeof(double) * (size_t)o.iters);
    rows = calloc((size_t)o.n_batch * o.n_context * (o.n_verify + 1) + 1, sizeof *rows);
    if (!b.bt || !b.tok || !b.out_rows || !b.sp || !b.sampled || !times || !rows) { st = SITS_ERR_NOMEM; goto out; }
    for (int i = 0; i < max_b * (kmax + 1); i++) b.sp[i] = (sits_sample_params_t){ .temperature = 0.0f, .top_p = 1.0f };
    b.pos = b.tok + max_tokens;
    b.seq = b.pos + max_tokens;

    const sits_model_config_t *c = &r->cfg;
    const sits_shard_dims_t *d = &r->w->dims;
    double wbytes = (double)r->w->bytes;
    double embed_bytes = (double)d->v_count * c->hidden_size * (double)sits_dtype_size(be->weight_dtype);
    double kv_tok = (double)sits_engine_kv_block_bytes(c, d, be->kv_dtype, r->ep.block_size) / r->ep.block_size;
    double bw;
    if ((st = sits_bench_copy_bw(be, (size_t)o.bw_mib << 20, &bw)) != SITS_OK) goto out;
    char dev[256], host[256] = "unknown";
    device_name(be, dev, sizeof dev);
    gethostname(host, sizeof host - 1);

    if (rank == 0) {
        printf("sits-bench-decode: %s (%d layers, hidden %d, inter %d, heads %d/%d, vocab %d), %s weights, tp %d\n", o.model,
               c->n_layers, c->hidden_size, c->intermediate_size, c->n_heads, c->n_kv_heads, c->vocab_size, o.load_format, world);
        printf("quant %s: %d linear layers in fp8\n", o.quant ? o.quant : "auto", r->w->n_fp8);   /* [fp8] */
        printf("device %s (%s backend, weights %s, kv %s), loaded in %.1f s\n", dev, be->ops->name,
               sits_dtype_name(be->weight_dtype), sits_dtype_name(be->kv_dtype), load_s);
        printf("weights %.3f GB/rank (incl. embedding %.3f GB, of which a step reads only batch rows), KV %.0f B/token\n",
               wbytes * 1e-9, embed_bytes * 1e-9, kv_tok);
        if (c->moe.n_experts)   /* [moe] */
            printf("mixture of experts: %d experts top %d (%d here, ffn %d each, %s); floor weights = active bytes: "
                   "%.3f GB/rank at 1 token a step, %.3f GB/rank at 32\n", c->moe.n_experts, c->moe.top_k, d->n_exp_loc,
                   d->ie_loc, d->ep > 1 ? "expert parallel" : "TP-sharded", 1e-9 * moe_step_bytes(c, d, wbytes,
                   moe_param_bytes(r->w, sits_dtype_size(be->weight_dtype)), 1),
                   1e-9 * moe_step_bytes(c, d, wbytes, moe_param_bytes(r->w, sits_dtype_size(be->weight_dtype)), 32));
        printf("copy bandwidth %.1f GB/s (%s of %d MiB, 2*bytes/time)\n", bw * 1e-9,
               be->device >= 0 ? "cudaMemcpy D2D" : "memcpy", o.bw_mib);
        printf("KV fill: %s; decode step j of a (batch, context) row is at position context + j, %d warmup + %d timed "
               "steps; one decode step = sits_engine_run + sits_engine_sample (greedy, device reduction)\n\n",
               !strcmp(o.fill, "prefill") ? "real prefill of random tokens" : "none (decode over uninitialised KV memory)",
               o.warmup, o.iters);
        printf("%-8s %6s %8s %10s %10s %10s %9s %8s\n", "kind", "batch", "context", "ms_median", "ms_mean", "tok/s",
               "floor_ms", "floor%");
        fflush(stdout);
    }

    ids = malloc(sizeof(int32_t) * (size_t)max_b * b.mb);
    if (!ids) { st = SITS_ERR_NOMEM; goto out; }
    for (int ci = 0; ci < o.n_context; ci++) {
        int ctx = o.context[ci];
        int need = (ctx + steps + kmax + r->ep.block_size - 1) / r->ep.block_size;
        if ((st = sits_kv_blocks_alloc(r->blocks, need * max_b, ids)) != SITS_OK) {
            fprintf(stderr, "sits-bench-decode: no room for %d x %d KV blocks\n", max_b, need);
            goto out;
        }
        for (int s = 0; s < max_b; s++)
            for (int k = 0; k < need; k++) b.bt[(size_t)s * b.mb + k] = ids[s * need + k];
        double tf = sits_bench_now_s();
        if (!strcmp(o.fill, "prefill") && ctx > 0 && (st = fill_kv(&b, max_b, ctx, chunk)) != SITS_OK) goto out;
        if (rank == 0 && !strcmp(o.fill, "prefill"))
            fprintf(stderr, "filled %d x %d tokens of KV in %.2f s\n", max_b, ctx, sits_bench_now_s() - tf);
        for (int bi = 0; bi < o.n_batch; bi++) {
            int nb = o.batch[bi];
            MPI_Barrier(MPI_COMM_WORLD);
            if ((st = decode_steps(&b, nb, ctx, o.warmup, o.iters, times)) != SITS_OK) goto out;
            /* with uninitialised KV (--fill none) non-finite logits are possible and say nothing */
            if (!strcmp(o.fill, "prefill") && (st = check_logits(&b, nb, "decode")) != SITS_OK) goto out;
            row_t *w = &rows[n_rows++];
            w->kind = "decode";
            w->batch = nb;
            w->context = ctx;
            w->tokens = nb;
            stats(times, o.iters, &w->ms_median, &w->ms_mean, &w->ms_min);
            w->ms_p99 = g_last_p99 * 1e3;
            /* timed step j attends to ctx + warmup + j + 1 positions */
            double avg_len = ctx + o.warmup + 1 + 0.5 * (o.iters - 1);
            double floor_s = (moe_step_bytes(c, d, wbytes, moe_param_bytes(r->w, sits_dtype_size(be->weight_dtype)), nb) +
                              nb * avg_len * kv_tok) / bw;
            w->tok_s = nb / w->ms_median;
            w->floor_ms = 1e3 * floor_s;
            w->ms_median *= 1e3;
            w->ms_mean *= 1e3;
            w->ms_min *= 1e3;
            w->pct_floor = 100.0 * w->floor_ms / w->ms_median;
            if (rank == 0) { print_row(w); fflush(stdout); }
            for (int vi = 0; vi < o.n_verify; vi++) {   /* [speculative] verification steps beside it */
                int k = o.verify[vi];
                MPI_Barrier(MPI_COMM_WORLD);
                if ((st = verify_steps(&b, nb, k, ctx, o.warmup, o.iters, times)) != SITS_OK) goto out;
                row_t *v = &rows[n_rows++];
                *v = *w;
                v->kind = "verify";
                v->k = k;
                v->tokens = nb * (k + 1);
                stats(times, o.iters, &v->ms_median, &v->ms_mean, &v->ms_min);
                v->ms_p99 = g_last_p99 * 1e3;
                v->tok_s = nb / v->ms_median;   /* sequence-steps per second */
                v->ms_median *= 1e3;
                v->ms_mean *= 1e3;
                v->ms_min *= 1e3;
                v->pct_floor = 100.0 * v->floor_ms / v->ms_median;
                v->vs_decode = v->ms_median / w->ms_median;
                if (rank == 0) { print_row(v); fflush(stdout); }
            }
        }
        sits_kv_blocks_release(r->blocks, need * max_b, ids);
    }
    if (o.prefill > 0) {
        int need = (o.prefill + r->ep.block_size - 1) / r->ep.block_size;
        if ((st = sits_kv_blocks_alloc(r->blocks, need, ids)) != SITS_OK) goto out;
        memcpy(b.bt, ids, sizeof(int32_t) * (size_t)need);
        MPI_Barrier(MPI_COMM_WORLD);
        if ((st = prefill_steps(&b, o.prefill, o.warmup, o.iters, times)) != SITS_OK) goto out;
        if ((st = check_logits(&b, 1, "prefill")) != SITS_OK) goto out;
        sits_kv_blocks_release(r->blocks, need, ids);
        row_t *w = &rows[n_rows++];
        w->kind = "prefill";
        w->batch = 1;
        w->context = o.prefill;
        w->tokens = o.prefill;
        stats(times, o.iters, &w->ms_median, &w->ms_mean, &w->ms_min);
        w->ms_p99 = g_last_p99 * 1e3;
        w->tok_s = o.prefill / w->ms_median;
        w->tflops = prefill_flops(c, d, o.prefill) / w->ms_median * 1e-12;
        w->floor_ms = 1e3 * (wbytes + o.prefill * kv_tok) / bw;
        w->ms_median *= 1e3;
        w->ms_mean *= 1e3;
        w->ms_min *= 1e3;
        w->pct_floor = 100.0 * w->floor_ms / w->ms_median;
        if (rank == 0) print_row(w);
    }

    /* memory per GPU after the runs (weights + KV + workspaces), the largest over the ranks */
    double mem = device_mem_used(be), mem_max = 0;
    MPI_Reduce(&mem, &mem_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0 && mem_max > 0) printf("gpu memory in use: %.2f GB per GPU (max over %d ranks)\n", mem_max * 1e-9, world);
    rc = 0;
    if (rank == 0 && o.json) {
        char date[64];
        time_t now = time(NULL);
        strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
        json_t *meta = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:i, s:s, s:s, s:f, s:f, s:f, s:f, s:s, s:i, s:i, s:f}",
                                 "bench", "decode", "engine", "sits-dist", "machine", host, "date", date, "commit",
                                 o.commit ? o.commit : "unknown", "device", dev, "backend", be->ops->name, "model", o.model,
                                 "tp", world, "weight_dtype", sits_dtype_name(be->weight_dtype), "kv_dtype",
                                 sits_dtype_name(be->kv_dtype), "weight_bytes", wbytes, "embed_bytes", embed_bytes,
                                 "kv_bytes_per_token", kv_tok, "copy_bw_gbs", bw * 1e-9, "fill", o.fill, "iters", o.iters,
                                 "warmup", o.warmup, "load_s", load_s);
        if (meta) json_object_set_new(meta, "gpu_mem_used_gb", json_real(mem_max * 1e-9));
        if (meta) json_object_set_new(meta, "quant", json_string(o.quant ? o.quant : "auto"));   /* [fp8] */
        if (meta) json_object_set_new(meta, "fp8_fused_quant", json_boolean(o.fp8_fused));
        if (meta) json_object_set_new(meta, "kv_dtype", json_string(sits_dtype_name(be->kv_dtype)));   /* [int8 kv] */
        if (meta) json_object_set_new(meta, "fp8_linears", json_integer(r->w->n_fp8));
        if (!meta || write_json(o.json, meta, rows, n_rows)) rc = 1;
        else printf("wrote %s\n", o.json);
        json_decref(meta);
    }
out:
    if (st != SITS_OK) {
        fprintf(stderr, "sits-bench-decode: rank %d failed: %s\n", rank, sits_status_str(st));
        rc = 1;
    }
    free(ids);
    free(rows);
    free(times);
    free(b.bt);
    free(b.tok);
    free(b.out_rows);
    free(b.sp);
    free(b.sampled);
    sits_runner_destroy(r);
    sits_comm_destroy(tp_dev);
    sits_comm_destroy(tp);
    sits_backend_destroy(be);
    if (rc && world > 1) MPI_Abort(MPI_COMM_WORLD, rc);
    MPI_Finalize();
    return rc;
}
