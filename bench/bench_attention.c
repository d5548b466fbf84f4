/* bench_attention.c -- the attention op alone, on a batch shaped like a serving step. Not a test.
 *
 *   bench/sits-bench-attention [--device cuda|cpu|auto] [--gpu N] [--threads N] [--kv-cache-dtype fp8|int8|bf16|auto]
 *       [--heads 32] [--kv-heads 8] [--head-dim 128] [--block-size 16] [--prompts 4x2048] [--prefix 0]
 *       [--decodes 372x2100] [--iters 20] [--warmup 3] [--bw-mib 1024] [--trace] [--json FILE] [--commit SHA]
 *
 * The batch is a step as sits-bench-offline builds it: the decode rows first (N sequences at context C, one token at
 * position C - 1 each), then the prompts (N sequences, each a chunk of L tokens at positions P .. P + L - 1 after a
 * cached prefix of P); defaults: a 2048/128 mixed step of the 8B shape (four 2048-token prompts, ~372 decodes at
 * ~2100). Random q and KV (8-bit caches: random E4M3 / int8 codes, every scale 2^-6; bf16 / fp32: uniform [-1, 1]),
 * block tables a random permutation of the blocks (one layer's K and V buffers). Timed in one run, each on its own
 * batch: the whole step ("mixed"), its prompts alone ("prompts"), its decode rows alone ("decodes"); a call's time is
 * that of --iters calls back to back plus one sync, divided by --iters (median of 3 such runs, after --warmup calls).
 * Reported per call: ms; the prompts' causal attention TFLOP/s (4 x head_dim x heads x the keys each prompt row
 * sees, summed); the decode rows' KV bytes (codes + scales) read per second beside the copy bandwidth measured in the
 * same run (sits_bench_copy_bw, as sits-bench-decode: the floor of reading those bytes).
 * --trace (cuda, a build with `make NVCCFLAGS=-DSITS_ATT_PF_TRACE`; else refused): after the timed calls, one more
 * prompts call, and the prefill kernel's record of each CTA (kernels/attention_prefill.cu, ATT_PF_MARK) summarised:
 * the mean CTA time and its parts (ownership + decode list; the first pass's set-up -- Q, key offsets, first tiles
 * landed and widened; its key loop; the rest), the loop's time per key tile, the gap on an SM between a CTA's end and
 * the next one's start, and how long SMs sit idle at the end; with decode rows and 8-bit KV, one more decodes call and
 * the 8-bit decode kernel's record of each CTA (kernels/attention_decode.cu, ATT_DEC_TR): when CTAs start, their first
 * tile lands and they end (p10 / p50 / p90 / max), how long CTAs idle before the kernel's end, an item's set-up and end.
 * JSON: {bench, settings, rows [{batch, ms, tflops, kv_gbs, floor_ms}], trace {...}, trace_decode {...}, copy_gbs,
 * commit}. */
#include <jansson.h>
#include <mpi.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_common.h"
#include "util/dtype.h"
#include "util/log.h"
#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#include "kernels/sits_kernels.h"
#endif

typedef struct {
    const char *device, *kv_dtype, *json, *commit;
    int gpu, threads, heads, kv_heads, head_dim, block_size, n_prompts, prompt_len, prefix, n_dec, dec_ctx, iters, warmup,
        bw_mib, trace;
} opts_t;

/* One batch on the device: n tokens, their sequences / positions, the block tables [n_seqs, mb]. */
typedef struct {
    int n, n_seqs, seq_tokens; /* seq_tokens: the most tokens of one sequence (sits_attn_args_t.max_seq_tokens) */
    void *seq, *pos, *bt;
    double flops, kv_bytes;   /* prompts' causal attention flops; decode rows' KV bytes read */
} batch_t;

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--device cuda|cpu|auto] [--gpu N] [--threads N] [--kv-cache-dtype fp8|int8|bf16|auto]\n"
            "       [--heads 32] [--kv-heads 8] [--head-dim 128] [--block-size 16] [--prompts NxL] [--prefix P]\n"
            "       [--decodes NxC] [--iters 20] [--warmup 3] [--bw-mib 1024] [--trace] [--json FILE] [--commit SHA]\n",
            argv0);
}

/* "NxM" -> n, m (n >= 0, m >= 1); 0 on success */
static int parse_nxm(const char *v, int *n, int *m)
{
    char *e;
    long a = strtol(v, &e, 10);
    if (e == v || *e != 'x' || a < 0 || a > 1000000) return -1;
    const char *w = e + 1;
    long b = strtol(w, &e, 10);
    if (e == w || *e || b < 1 || b > 10000000) return -1;
    *n = (int)a;
    *m = (int)b;
    return 0;
}

static int parse_args(int argc, char **argv, opts_t *o)
{
    *o = (opts_t){ .device = "auto", .kv_dtype = "fp8", .heads = 32, .kv_heads = 8, .head_dim = 128, .block_size = 16,
                   .n_prompts = 4, .prompt_len = 2048, .n_dec = 372, .dec_ctx = 2100, .iters = 20, .warmup = 3, .bw_mib = 1024 };
    o->commit = getenv("SITS_COMMIT");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--trace")) { o->trace = 1; continue; }
        if (i + 1 >= argc) { usage(argv[0]); return -1; }
        const char *v = argv[++i];
        if (!strcmp(a, "--device")) o->device = v;
        else if (!strcmp(a, "--gpu")) o->gpu = atoi(v);
        else if (!strcmp(a, "--threads")) o->threads = atoi(v);
        else if (!strcmp(a, "--kv-cache-dtype")) o->kv_dtype = v;
        else if (!strcmp(a, "--heads")) o->heads = atoi(v);
        else if (!strcmp(a, "--kv-heads")) o->kv_heads = atoi(v);
        else if (!strcmp(a, "--head-dim")) o->head_dim = atoi(v);
        else if (!strcmp(a, "--block-size")) o->block_size = atoi(v);
        else if (!strcmp(a, "--prompts")) { if (parse_nxm(v, &o->n_prompts, &o->prompt_len)) { usage(argv[0]); return -1; } }
        else if (!strcmp(a, "--prefix")) o->prefix = atoi(v);
        else if (!strcmp(a, "--decodes")) { if (parse_nxm(v, &o->n_dec, &o->dec_ctx)) { usage(argv[0]); return -1; } }
        else if (!strcmp(a, "--iters")) o->iters = atoi(v);
        else if (!strcmp(a, "--warmup")) o->warmup = atoi(v);
        else if (!strcmp(a, "--bw-mib")) o->bw_mib = atoi(v);
        else if (!strcmp(a, "--json")) o->json = v;
        else if (!strcmp(a, "--commit")) o->commit = v;
        else { usage(argv[0]); return -1; }
    }
    if (o->heads < 1 || o->kv_heads < 1 || o->heads % o->kv_heads || o->head_dim < 2 || o->head_dim % 2 || o->block_size < 1 ||
        o->prefix < 0 || o->iters < 1 || o->warmup < 0 || o->bw_mib < 1 || o->n_prompts + o->n_dec < 1) {
        fprintf(stderr, "%s: heads a multiple of kv-heads, even head-dim, block size >= 1, prefix >= 0, iters >= 1, "
                        "at least one prompt or decode row\n", argv[0]);
        return -1;
    }
    return 0;
}

/* The batch of the decode rows (dec) and / or prompts (pr) of the step; every sequence gets its own blocks from perm
 * (sequences in the step's order: decodes, then prompts), block tables [n_seqs, mb]. */
static sits_status_t make_batch(sits_backend_t *be, const opts_t *o, int dec, int pr, const int32_t *perm, int mb,
                                size_t kv_row_bytes, batch_t *b)
{
    const int nd = dec ? o->n_dec : 0, np = pr ? o->n_prompts : 0, bs = o->block_size;
    *b = (batch_t){ .n = nd + np * o->prompt_len, .n_seqs = nd + np, .seq_tokens = np ? o->prompt_len : 1 };
    int32_t *seq = malloc(sizeof(int32_t) * (size_t)b->n), *pos = malloc(sizeof(int32_t) * (size_t)b->n);
    int32_t *bt = calloc((size_t)b->n_seqs * mb, sizeof(int32_t));
    sits_status_t st = SITS_ERR_NOMEM;
    if (!seq || !pos || !bt) goto out;
    int t = 0, blk = dec ? 0 : o->n_dec * ((o->dec_ctx + bs - 1) / bs);   /* prompts' blocks after all decodes' */
    for (int s = 0; s < nd; s++) {   /* [n_dec] one token at dec_ctx - 1 */
        for (int j = 0; j < (o->dec_ctx + bs - 1) / bs; j++) bt[(size_t)s * mb + j] = perm[blk++];
        seq[t] = s;
        pos[t++] = o->dec_ctx - 1;
        b->kv_bytes += (double)o->dec_ctx * 2.0 * (double)kv_row_bytes;
    }
    const int len = o->prefix + o->prompt_len;
    for (int s = nd; s < nd + np; s++) {   /* [n_prompts x prompt_len] positions prefix .. len - 1 */
        for (int j = 0; j < (len + bs - 1) / bs; j++) bt[(size_t)s * mb + j] = perm[blk++];
        for (int i = 0; i < o->prompt_len; i++) {
            seq[t] = s;
            pos[t++] = o->prefix + i;
            b->flops += 4.0 * o->head_dim * o->heads * (double)(o->prefix + i + 1);
        }
    }
    if ((st = be->ops->alloc(be, sizeof(int32_t) * (size_t)b->n, &b->seq)) != SITS_OK ||
        (st = be->ops->alloc(be, sizeof(int32_t) * (size_t)b->n, &b->pos)) != SITS_OK ||
        (st = be->ops->alloc(be, sizeof(int32_t) * (size_t)b->n_seqs * mb, &b->bt)) != SITS_OK ||
        (st = be->ops->upload(be, b->seq, seq, sizeof(int32_t) * (size_t)b->n)) != SITS_OK ||
        (st = be->ops->upload(be, b->pos, pos, sizeof(int32_t) * (size_t)b->n)) != SITS_OK ||
        (st = be->ops->upload(be, b->bt, bt, sizeof(int32_t) * (size_t)b->n_seqs * mb)) != SITS_OK)
        goto out;
out:
    free(seq);
    free(pos);
    free(bt);
    return st;
}

#ifdef HAVE_CUDA
static unsigned long long (*trace_recs)[8];
static int trace_cmp(const void *a, const void *b)   /* by SM, then start */
{
    const unsigned long long *x = trace_recs[*(const int *)a], *y = trace_recs[*(const int *)b];
    const unsigned long long sx = x[6] & 0xffff, sy = y[6] & 0xffff;
    if (sx != sy) return sx < sy ? -1 : 1;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}
#endif

/* --trace: the prefill kernel's records of the last call summarised (cuda trace builds) into j; 0 or -1 (no trace) */
static int trace_report(json_t *j)
{
#ifdef HAVE_CUDA
    enum { MAX = 32768 };
    unsigned long long(*r)[8] = malloc(sizeof *r * MAX);
    if (!r) return -1;
    const int n = sits_k_att_pf_trace(&r[0][0], MAX);
    if (n <= 0) { free(r); return -1; }
    /* clock rate from the records: cycles over ns of the whole CTA */
    double cyc = 0, ns = 0, part[4] = { 0, 0, 0, 0 }, loop_per_tile = 0, tiles = 0;
    unsigned long long g0 = ~0ull, g1 = 0;
    int max_sm = 0;
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < 4; k++) { part[k] += (double)r[i][2 + k]; cyc += (double)r[i][2 + k]; }
        ns += (double)(r[i][1] - r[i][0]);
        const double kt = (double)((r[i][6] >> 16) & 0xffffff);
        if (kt > 0) { loop_per_tile += (double)r[i][4]; tiles += kt; }
        g0 = r[i][0] < g0 ? r[i][0] : g0;
        g1 = r[i][1] > g1 ? r[i][1] : g1;
        max_sm = (int)(r[i][6] & 0xffff) > max_sm ? (int)(r[i][6] & 0xffff) : max_sm;
    }
    const double ghz = ns > 0 ? cyc / ns : 1.0;   /* cycles a ns */
    /* per SM: CTAs by start (the wgmma kernel runs one CTA an SM at a time); gap = a start - the SM's previous end;
     * idle at the end = kernel end - the SM's last end */
    int *ix = malloc(sizeof(int) * (size_t)n);
    if (!ix) { free(r); return -1; }
    for (int i = 0; i < n; i++) ix[i] = i;
    trace_recs = r;
    qsort(ix, (size_t)n, sizeof *ix, trace_cmp);
    double gap = 0, tail = 0;
    long n_gap = 0;
    for (int k = 0; k < n; k++) {
        const unsigned long long *c = r[ix[k]];
        const int last_of_sm = k + 1 == n || (r[ix[k + 1]][6] & 0xffff) != (c[6] & 0xffff);
        if (k > 0 && (r[ix[k - 1]][6] & 0xffff) == (c[6] & 0xffff) && c[0] > r[ix[k - 1]][1]) {
            gap += (double)(c[0] - r[ix[k - 1]][1]);
            n_gap++;
        }
        if (last_of_sm) tail += (double)(g1 - c[1]);
    }
    free(ix);
    const double us = 1e-3;
    printf("prefill kernel trace: %d CTAs on %d SMs, kernel %.1f us (first start to last end), SM clock %.2f GHz\n", n,
           max_sm + 1, (double)(g1 - g0) * us, ghz);
    static const char *names[4] = { "ownership + decode list", "first pass set-up (Q, offsets, first tiles)",
                                    "first pass key loop", "epilogue + other passes" };
    printf("  mean CTA %.2f us:", ns / n * us);
    for (int k = 0; k < 4; k++) printf(" %s %.2f us;", names[k], part[k] / n / ghz * us);
    printf("\n  key loop %.3f us a 64-key tile; gap between CTAs on an SM %.2f us (%ld gaps); SMs idle at the end %.2f us "
           "on average\n", tiles > 0 ? loop_per_tile / tiles / ghz * us : 0.0, n_gap ? gap / n_gap * us : 0.0, n_gap,
           (double)tail / (max_sm + 1) * us);
    if (j)
        json_object_set_new(j, "trace", json_pack("{s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "ctas", n,
                                                  "kernel_us", (double)(g1 - g0) * us, "cta_us", ns / n * us,
                                                  "ownership_us", part[0] / n / ghz * us, "setup_us", part[1] / n / ghz * us,
                                                  "loop_us", part[2] / n / ghz * us, "rest_us", part[3] / n / ghz * us,
                                                  "loop_us_per_tile", tiles > 0 ? loop_per_tile / tiles / ghz * us : 0.0,
                                                  "gap_us", n_gap ? gap / n_gap * us : 0.0, "tail_us", tail / (max_sm + 1) * us));
    free(r);
    return 0;
#else
    (void)j;
    return -1;
#endif
}

#ifdef HAVE_CUDA
static int ull_cmp(const void *a, const void *b)
{
    const unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
    return x < y ? -1 : x > y;
}
#endif

/* --trace: the 8-bit decode kernel's records of the last call summarised (cuda trace builds) into j; 0 or -1 (none) */
static int trace_report_dec(json_t *j)
{
#ifdef HAVE_CUDA
    enum { MAX = 8192 };
    unsigned long long(*r)[8] = malloc(sizeof *r * MAX), *ends = malloc(sizeof *ends * MAX);
    const int n = r && ends ? sits_k_att_dec_trace(&r[0][0], MAX) : -1;
    if (n <= 0) { free(r); free(ends); return -1; }
    unsigned long long g0 = ~0ull, g1 = 0;
    double start = 0, first = 0, setup = 0, endc = 0, items = 0, tiles = 0, cyc_ns = 0;
    int n_busy = 0, it_min = 1 << 30, it_max = 0;
    for (int i = 0; i < n; i++) {
        g0 = r[i][0] < g0 ? r[i][0] : g0;
        g1 = r[i][2] > g1 ? r[i][2] : g1;
    }
    for (int i = 0; i < n; i++) {
        const unsigned long long *c = r[i];
        ends[i] = c[2] - g0;
        it_min = (int)c[3] < it_min ? (int)c[3] : it_min;
        it_max = (int)c[3] > it_max ? (int)c[3] : it_max;
        if (!c[3]) continue;
        n_busy++;
        start += (double)(c[0] - g0);
        first += (double)(c[1] - c[0]);
        setup += (double)c[5];
        endc += (double)c[6];
        items += (double)c[3];
        tiles += (double)c[4];
        cyc_ns += (double)(c[2] - c[0]);
    }
    qsort(ends, (size_t)n, sizeof *ends, ull_cmp);
    /* SM clock: assume the nominal boost of the H200's SMs is not known here; report cycles at 1.98 GHz (ncu's
     * --clock-control none measured 1.98) and the cycle counts in the JSON */
    const double ghz = 1.98, us = 1e-3, span = (double)(g1 - g0) * us;
    double idle = 0;
    for (int i = 0; i < n; i++) idle += (double)(g1 - g0 - ends[i]);
    printf("decode kernel trace: %d CTAs (%d with items; %d-%d items each), kernel %.1f us (first start to last end)\n", n,
           n_busy, it_min, it_max, span);
    printf("  starts %.2f us after the first on average; first tile landed %.2f us after a CTA's start; CTA ends at p10 "
           "%.1f / p50 %.1f / p90 %.1f / max %.1f us; mean CTA idle before the kernel's end %.2f us (%.1f %% of it)\n",
           n_busy ? start / n_busy * us : 0.0, n_busy ? first / n_busy * us : 0.0, ends[n / 10] * us, ends[n / 2] * us,
           ends[(n * 9) / 10] * us, ends[n - 1] * us, idle / n * us, span > 0 ? 100.0 * idle / n * us / span : 0.0);
    printf("  per item (%.2f tiles): set-up to the first tile landed %.2f us, end (merge, write) %.2f us, whole %.2f us "
           "(at %.2f GHz)\n", items > 0 ? tiles / items : 0.0, items > 0 ? setup / items / ghz * us : 0.0,
           items > 0 ? endc / items / ghz * us : 0.0, items > 0 ? cyc_ns / items * us : 0.0, ghz);
    if (j)
        json_object_set_new(j, "trace_decode",
                            json_pack("{s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "ctas", n, "busy_ctas", n_busy,
                                      "kernel_us", span, "start_us", n_busy ? start / n_busy * us : 0.0, "first_tile_us",
                                      n_busy ? first / n_busy * us : 0.0, "end_p50_us", ends[n / 2] * us, "end_p90_us",
                                      ends[(n * 9) / 10] * us, "idle_us", idle / n * us, "items", items, "setup_cycles",
                                      setup, "end_cycles", endc));
    free(r);
    free(ends);
    return 0;
#else
    (void)j;
    return -1;
#endif
}

int main(int argc, char **argv)
{
    int provided, rank = 0, rc = 1;
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        fprintf(stderr, "sits-bench-attention: MPI_Init_thread failed\n");
        return 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    sits_log_init(rank);
    opts_t o;
    if (parse_args(argc, argv, &o)) { MPI_Finalize(); return 2; }
    sits_status_t st = SITS_OK;
    sits_backend_t *be = NULL;
    void *kc = NULL, *vc = NULL, *q = NULL, *out = NULL;
    unsigned char *host = NULL;
    int32_t *perm = NULL;
    batch_t bat[3] = { { 0 } };
    json_t *j = json_object(), *jrows = json_array();

    int n_gpu = sits_backend_cuda_device_count();
    int use_cuda = !strcmp(o.device, "cuda") || (!strcmp(o.device, "auto") && n_gpu > 0);
    if (!use_cuda && strcmp(o.device, "cpu") && strcmp(o.device, "auto")) { usage(argv[0]); goto out; }
    if (o.trace && !use_cuda) { fprintf(stderr, "sits-bench-attention: --trace needs the cuda backend\n"); goto out; }
    if ((st = sits_bench_backend(use_cuda ? "cuda" : "cpu", o.gpu, o.threads, &be, NULL)) != SITS_OK) {
        fprintf(stderr, "sits-bench-attention: %s backend: %s\n", use_cuda ? "cuda" : "cpu", sits_status_str(st));
        goto out;
    }
    sits_dtype_t kdt;
    if ((st = sits_backend_kv_dtype_parse(o.kv_dtype, be->act_dtype, &kdt)) != SITS_OK || (st = sits_backend_set_kv_dtype(be, kdt)) != SITS_OK) {
        fprintf(stderr, "sits-bench-attention: --kv-cache-dtype %s: %s\n", o.kv_dtype, sits_status_str(st));
        goto out;
    }
    const int bs = o.block_size, hd = o.head_dim, q8 = sits_kv_dtype_is_q8(kdt);
    const int len = o.prefix + o.prompt_len, max_len = len > o.dec_ctx ? len : o.dec_ctx, mb = (max_len + bs - 1) / bs;
    const int n_blocks = o.n_dec * ((o.dec_ctx + bs - 1) / bs) + o.n_prompts * ((len + bs - 1) / bs);
    const size_t blk_bytes = sits_kv_layer_block_bytes(kdt, bs, o.kv_heads, hd), cache_bytes = (size_t)n_blocks * blk_bytes;
    /* bytes of one token's K (or V) row of one KV head as the kernels read it: codes + scale, or the values */
    const size_t kv_row_bytes = (size_t)o.kv_heads * (q8 ? (size_t)hd + 4 : (size_t)hd * sits_dtype_size(kdt));
    const size_t q_elems = (size_t)(o.n_dec + o.n_prompts * o.prompt_len) * o.heads * hd, act = sits_dtype_size(be->act_dtype);

    /* caches [n_blocks] block units of one layer (K and V), random; q [n_tokens, heads * hd] */
    uint64_t rng = 0x5eed0a77ull;
    host = malloc(blk_bytes > q_elems * act ? blk_bytes : q_elems * act);
    perm = malloc(sizeof(int32_t) * (size_t)(n_blocks ? n_blocks : 1));
    if (!host || !perm) { st = SITS_ERR_NOMEM; goto out; }
    if ((st = be->ops->alloc(be, cache_bytes ? cache_bytes : 16, &kc)) != SITS_OK || (st = be->ops->alloc(be, cache_bytes ? cache_bytes : 16, &vc)) != SITS_OK ||
        (st = be->ops->alloc(be, q_elems * act, &q)) != SITS_OK || (st = be->ops->alloc(be, q_elems * act, &out)) != SITS_OK)
        goto out;
    const size_t qb = q8 ? sits_kv_i8_q_bytes(bs, o.kv_heads, hd) : 0;
    for (int c = 0; c < 2; c++)
        for (int bk = 0; bk < n_blocks; bk++) {
            if (q8) {
                for (size_t i = 0; i < qb; i++) {
                    unsigned char v = (unsigned char)sits_bench_rng_next(&rng);
                    host[i] = kdt == SITS_DT_F8_E4M3 && (v & 0x7f) == 0x7f ? (unsigned char)(v ^ 1) : v;   /* no E4M3 NaN */
                }
                const float sc = 1.0f / 64.0f;
                for (size_t i = qb; i + 4 <= blk_bytes; i += 4) memcpy(host + i, &sc, 4);
            } else {
                const size_t n_el = blk_bytes / sits_dtype_size(kdt);
                for (size_t i = 0; i < n_el; i++) {
                    float f = (float)((double)sits_bench_rng_next(&rng) / 2147483648.0 - 1.0);
                    if (kdt == SITS_DT_F32) memcpy(host + 4 * i, &f, 4);
                    else { uint16_t h = sits_f32_to_bf16(f); memcpy(host + 2 * i, &h, 2); }
                }
            }
            if ((st = be->ops->upload(be, (char *)(c ? vc : kc) + (size_t)bk * blk_bytes, host, blk_bytes)) != SITS_OK) goto out;
        }
    for (size_t i = 0; i < q_elems; i++) {
        float f = (float)((double)sits_bench_rng_next(&rng) / 2147483648.0 - 1.0);
        if (be->act_dtype == SITS_DT_F32) memcpy(host + 4 * i, &f, 4);
        else { uint16_t h = sits_f32_to_bf16(f); memcpy(host + 2 * i, &h, 2); }
    }
    if ((st = be->ops->upload(be, q, host, q_elems * act)) != SITS_OK) goto out;
    for (int i = 0; i < n_blocks; i++) perm[i] = i;
    for (int i = n_blocks - 1; i > 0; i--) {
        int k = (int)(sits_bench_rng_next(&rng) % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[k];
        perm[k] = t;
    }
    /* the three batches: [0] mixed, [1] prompts, [2] decodes (an empty part is skipped) */
    if ((st = make_batch(be, &o, 1, 1, perm, mb, kv_row_bytes, &bat[0])) != SITS_OK ||
        (o.n_prompts && (st = make_batch(be, &o, 0, 1, perm, mb, kv_row_bytes, &bat[1])) != SITS_OK) ||
        (o.n_dec && (st = make_batch(be, &o, 1, 0, perm, mb, kv_row_bytes, &bat[2])) != SITS_OK))
        goto out;
    double bw = 0;
    if ((st = sits_bench_copy_bw(be, (size_t)o.bw_mib << 20, &bw)) != SITS_OK) goto out;

    printf("sits-bench-attention: %s backend, kv %s, %d heads / %d kv heads x %d, block size %d; step: %d decode rows at "
           "context %d + %d prompts of %d tokens after %d cached; copy bandwidth %.1f GB/s\n", be->ops->name, o.kv_dtype, o.heads,
           o.kv_heads, hd, bs, o.n_dec, o.dec_ctx, o.n_prompts, o.prompt_len, o.prefix, 1e-9 * bw);
    printf("%-8s %8s %10s %10s %12s %10s %8s\n", "batch", "tokens", "ms", "TFLOP/s", "KV GB/s", "floor ms", "floor%");
    static const char *bname[3] = { "mixed", "prompts", "decodes" };
    for (int k = 0; k < 3; k++) {
        const batch_t *b = &bat[k];
        if (b->n == 0) continue;
        sits_attn_args_t a = { .n_tokens = b->n, .seq = b->seq, .pos = b->pos, .block_tables = b->bt, .max_blocks = mb,
                               .block_size = bs, .n_heads = o.heads, .n_kv_heads = o.kv_heads, .head_dim = hd,
                               .scale = 1.0f / sqrtf((float)hd), .max_context = max_len, .max_seq_tokens = b->seq_tokens };
        for (int i = 0; i < o.warmup; i++)
            if ((st = be->ops->attention(be, out, q, o.heads * hd, kc, vc, &a)) != SITS_OK) goto out;
        if ((st = be->ops->sync(be)) != SITS_OK) goto out;
        double t[3];
        for (int rep = 0; rep < 3; rep++) {
            double t0 = sits_bench_now_s();
            for (int i = 0; i < o.iters; i++)
                if ((st = be->ops->attention(be, out, q, o.heads * hd, kc, vc, &a)) != SITS_OK) goto out;
            if ((st = be->ops->sync(be)) != SITS_OK) goto out;
            t[rep] = (sits_bench_now_s() - t0) / o.iters;
        }
        /* median of 3 */
        double m = sits_bench_median3(t);
        const double floor_s = bw > 0 ? b->kv_bytes / bw : 0;
        printf("%-8s %8d %10.4f %10.1f %12.1f %10.4f %7.1f%%\n", bname[k], b->n, 1e3 * m, b->flops > 0 ? 1e-12 * b->flops / m : 0.0,
               b->kv_bytes > 0 ? 1e-9 * b->kv_bytes / m : 0.0, 1e3 * floor_s, 100.0 * floor_s / m);
        json_array_append_new(jrows, json_pack("{s:s, s:i, s:f, s:f, s:f, s:f}", "batch", bname[k], "tokens", b->n, "ms", 1e3 * m,
                                               "tflops", b->flops > 0 ? 1e-12 * b->flops / m : 0.0, "kv_gbs",
                                               b->kv_bytes > 0 ? 1e-9 * b->kv_bytes / m : 0.0, "floor_ms", 1e3 * floor_s));
    }
    if (o.trace) { /* the prompts (or the whole step) for the prefill kernel's records, the decode rows for the decode's */
        int reported = 0;
        for (int k = 0; k < 2; k++) {
            const batch_t *b = k == 0 ? (bat[1].n ? &bat[1] : &bat[0]) : &bat[2];
            if (b->n == 0 || (k == 0 && o.n_prompts == 0)) continue;
            sits_attn_args_t a = { .n_tokens = b->n, .seq = b->seq, .pos = b->pos, .block_tables = b->bt, .max_blocks = mb,
                                   .block_size = bs, .n_heads = o.heads, .n_kv_heads = o.kv_heads, .head_dim = hd,
                                   .scale = 1.0f / sqrtf((float)hd), .max_context = max_len, .max_seq_tokens = b->seq_tokens };
            if ((st = be->ops->attention(be, out, q, o.heads * hd, kc, vc, &a)) != SITS_OK || (st = be->ops->sync(be)) != SITS_OK)
                goto out;
            reported += (k == 0 ? trace_report(j) : trace_report_dec(j)) == 0;
        }
        if (!reported) {
            fprintf(stderr, "sits-bench-attention: --trace: no kernel trace (build with make NVCCFLAGS=-DSITS_ATT_PF_TRACE; the "
                            "prefill kernel's needs prompts, the decode kernel's 8-bit KV)\n");
            goto out;
        }
    }
    if (o.json) {
        json_object_set_new(j, "bench", json_string("attention"));
        json_object_set_new(j, "settings", json_pack("{s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i}", "backend",
                                                     be->ops->name, "kv_cache_dtype", o.kv_dtype, "heads", o.heads, "kv_heads",
                                                     o.kv_heads, "head_dim", hd, "block_size", bs, "prompts", o.n_prompts,
                                                     "prompt_len", o.prompt_len, "prefix", o.prefix, "decodes", o.n_dec,
                                                     "decode_ctx", o.dec_ctx, "iters", o.iters));
        json_object_set(j, "rows", jrows);
        json_object_set_new(j, "copy_gbs", json_real(1e-9 * bw));
        json_object_set_new(j, "commit", json_string(o.commit ? o.commit : "unknown"));
        if (json_dump_file(j, o.json, JSON_INDENT(1)) != 0) { fprintf(stderr, "sits-bench-attention: cannot write %s\n", o.json); goto out; }
    }
    rc = 0;
out:
    if (st != SITS_OK) fprintf(stderr, "sits-bench-attention: %s\n", sits_status_str(st));
    for (int k = 0; k < 3 && be; k++) {
        if (bat[k].seq) be->ops->free(be, bat[k].seq);
        if (bat[k].pos) be->ops->free(be, bat[k].pos);
        if (bat[k].bt) be->ops->free(be, bat[k].bt);
    }
    if (be) {
        if (kc) be->ops->free(be, kc);
        if (vc) be->ops->free(be, vc);
        if (q) be->ops->free(be, q);
        if (out) be->ops->free(be, out);
        sits_backend_destroy(be);
    }
    free(host);
    free(perm);
    json_decref(jrows);
    json_decref(j);
    MPI_Finalize();
    return rc;
}
