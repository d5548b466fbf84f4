/* kv_int8_accuracy.c -- [int8 kv] accuracy and capacity of the int8 KV cache (--kv-cache-dtype int8),
 * or with --kv fp8 [fp8 kv] of the FP8 E4M3 one (--kv-cache-dtype fp8), against the fp32 / bf16 KV caches: top-1 agreement and KL divergence of the next-token
 * distributions, greedy continuations, and the KV blocks that fit in the same bytes.
 *
 *   bench/sits-kv-int8-accuracy [--model DIR]... [--dummy-model DIR]... [--layers N] [--device cpu|cuda|auto]
 *       [--refs fp32,bf16] [--kv int8|fp8] [--prompts 4] [--len 64] [--gen 16] [--seed 1234] [--block-size 16] [--threads N]
 *       [--json FILE] [--min-top1 X] [--max-kl-mean Y] [--max-kl Z] [--min-greedy W] [--min-kl-mean V]
 *
 * One rank (TP 1). Per model the weights are loaded once; for each reference KV dtype (--refs;
 * default fp32,bf16 on the cpu, bf16 on cuda) the engine is created with that KV dtype and then
 * again with int8, and both run the same token sequences, teacher-forced (every position's
 * logits, prefilled in chunks of up to 64 positions over --block-size blocks, so later chunks read
 * the quantised cache): the fixture prompts followed by their HF greedy tokens (reference.json,
 * when the directory has one) and --prompts random sequences of --len ids (an LCG seeded with
 * --seed over the vocabulary). Per position: top-1 agreement (argmax equal, lowest id on ties)
 * and KL(p_ref || p_int8) in nats (fp64 log-softmax). Then --gen greedy tokens of every sequence
 * (the decode path, all sequences in one batch) with each KV dtype: the share of generated tokens
 * equal position by position. --dummy-model loads random weights from DIR/config.json (e.g.
 * bench/configs/llama3-8b); --layers N keeps only its first N layers (a copy of the config in a
 * temporary directory), which leaves the per-layer KV statistics alone and fits a CPU.
 * Capacity: bytes of one KV block of all the model's layers (the full config) per dtype and the
 * blocks of --block-size tokens that fit in 1 GiB.
 * With --min-top1 / --max-kl-mean / --max-kl / --min-greedy / --min-kl-mean (the last one: int8
 * must differ from the reference at all, i.e. the quantised cache is in use), exit 1 when any
 * (model, reference) falls outside (tests/integration/kv_int8_accuracy.sh uses this); the measured values are
 * printed either way. Exit 0 ok, 1 fail, 2 usage, 77 --device cuda without a usable GPU. */
#include <jansson.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench_common.h"
#include "sched/generate.h"
#include "util/log.h"

#define MAX_MODELS 16
#define MAX_REFS 2
#define MAX_SEQS 64
#define CHUNK 64

typedef struct {
    const char *model[MAX_MODELS];
    int dummy[MAX_MODELS];
    int n_models;
    const char *device, *json, *refs, *kv;
    int layers, prompts, len, gen, block_size, threads;
    unsigned long long seed;
    double min_top1, max_kl_mean, max_kl, min_greedy, min_kl_mean;
} opts_t;

typedef struct {
    sits_dtype_t ref;
    long positions, agree, gen_tokens, gen_equal;
    double kl_sum, kl_max;
    int seqs_identical, n_seqs;
} result_t;

static void usage(const char *a0)
{
    fprintf(stderr,
            "usage: %s [--model DIR]... [--dummy-model DIR]... [--layers N] [--device cpu|cuda|auto] [--refs fp32,bf16]\n"
            "       [--kv int8|fp8]\n"
            "       [--prompts 4] [--len 64] [--gen 16] [--seed 1234] [--block-size 16] [--threads N] [--json FILE]\n"
            "       [--min-top1 X] [--max-kl-mean Y] [--max-kl Z] [--min-greedy W] [--min-kl-mean V]\n",
            a0);
}

static int parse_args(int argc, char **argv, opts_t *o)
{
    *o = (opts_t){ .device = "auto", .prompts = 4, .len = 64, .gen = 16, .block_size = 16, .seed = 1234, .min_top1 = -1,
                   .max_kl_mean = -1, .max_kl = -1, .min_greedy = -1, .min_kl_mean = -1 };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) { usage(argv[0]); return -1; }
        if (!strcmp(a, "--model") || !strcmp(a, "--dummy-model")) {
            if (o->n_models == MAX_MODELS) { usage(argv[0]); return -1; }
            o->dummy[o->n_models] = !strcmp(a, "--dummy-model");
            o->model[o->n_models++] = v;
        } else if (!strcmp(a, "--layers")) o->layers = atoi(v);
        else if (!strcmp(a, "--device")) o->device = v;
        else if (!strcmp(a, "--refs")) o->refs = v;
        else if (!strcmp(a, "--kv")) o->kv = v;   /* [fp8 kv] the quantised KV dtype under test */
        else if (!strcmp(a, "--prompts")) o->prompts = atoi(v);
        else if (!strcmp(a, "--len")) o->len = atoi(v);
        else if (!strcmp(a, "--gen")) o->gen = atoi(v);
        else if (!strcmp(a, "--seed")) o->seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--block-size")) o->block_size = atoi(v);
        else if (!strcmp(a, "--threads")) o->threads = atoi(v);
        else if (!strcmp(a, "--json")) o->json = v;
        else if (!strcmp(a, "--min-top1")) o->min_top1 = atof(v);
        else if (!strcmp(a, "--max-kl-mean")) o->max_kl_mean = atof(v);
        else if (!strcmp(a, "--max-kl")) o->max_kl = atof(v);
        else if (!strcmp(a, "--min-greedy")) o->min_greedy = atof(v);
        else if (!strcmp(a, "--min-kl-mean")) o->min_kl_mean = atof(v);
        else { usage(argv[0]); return -1; }
        i++;
    }
    if (o->n_models < 1 || o->prompts < 0 || o->len < 1 || o->len > 4096 || o->gen < 0 || o->block_size < 1 ||
        o->layers < 0) {
        usage(argv[0]);
        return -1;
    }
    return 0;
}

/* The sequences of one model: fixture prompts + HF greedy tokens, then random ids. */
typedef struct {
    int n;
    int32_t *ids[MAX_SEQS];
    int len[MAX_SEQS], plen[MAX_SEQS]; /* plen: the prompt part (what --gen continues) */
} seqs_t;

static void seqs_free(seqs_t *s)
{
    for (int i = 0; i < s->n; i++) free(s->ids[i]);
    memset(s, 0, sizeof *s);
}

static sits_status_t seqs_make(const opts_t *o, const char *dir, int vocab, seqs_t *s)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/reference.json", dir);
    json_t *ref = access(path, R_OK) == 0 ? json_load_file(path, 0, NULL) : NULL;
    json_t *prompts = ref ? json_object_get(ref, "prompts") : NULL, *greedy = ref ? json_object_get(ref, "greedy") : NULL;
    for (size_t i = 0; prompts && i < json_array_size(prompts) && s->n < MAX_SEQS; i++) {
        json_t *p = json_array_get(prompts, i), *g = json_array_get(greedy, i);
        int pl = (int)json_array_size(p), gl = (int)json_array_size(g), n = pl + gl;
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
        if (!ids) { json_decref(ref); return SITS_ERR_NOMEM; }
        for (int j = 0; j < pl; j++) ids[j] = (int32_t)json_integer_value(json_array_get(p, (size_t)j));
        for (int j = 0; j < gl; j++) ids[pl + j] = (int32_t)json_integer_value(json_array_get(g, (size_t)j));
        s->ids[s->n] = ids;
        s->len[s->n] = n;
        s->plen[s->n++] = pl;
    }
    json_decref(ref);
    unsigned long long x = o->seed;
    for (int p = 0; p < o->prompts && s->n < MAX_SEQS; p++) {
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)o->len);
        if (!ids) return SITS_ERR_NOMEM;
        for (int i = 0; i < o->len; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            ids[i] = (int32_t)((x >> 33) % (unsigned long long)vocab);
        }
        s->ids[s->n] = ids;
        s->len[s->n] = o->len;
        s->plen[s->n++] = o->len;
    }
    return SITS_OK;
}

/* Every position's logits of sequence ids[0..n) (fresh blocks), in chunks of CHUNK -> out [n, V]. */
static sits_status_t run_positions(sits_runner_t *r, const int32_t *ids, int n, float *out)
{
    sits_engine_params_t *ep = &r->ep;
    int V = r->w->dims.v_count, need = (n + ep->block_size - 1) / ep->block_size;
    int32_t *bt = calloc((size_t)ep->max_blocks_per_seq, sizeof(int32_t));
    if (!bt) return SITS_ERR_NOMEM;
    sits_status_t st = sits_kv_blocks_alloc(r->blocks, need, bt);
    if (st != SITS_OK) { free(bt); return st; }
    int32_t pos[CHUNK], seq[CHUNK], rows[CHUNK];
    for (int off = 0; off < n && st == SITS_OK; off += CHUNK) {
        int m = n - off < CHUNK ? n - off : CHUNK;
        for (int i = 0; i < m; i++) { pos[i] = off + i; seq[i] = 0; rows[i] = i; }
        sits_batch_t b = { .n_tokens = m, .tokens = ids + off, .pos = pos, .seq = seq, .n_seqs = 1, .block_tables = bt,
                           .n_out = m, .out_rows = rows };
        const float *logits;
        if ((st = sits_engine_forward(r->engine, &b, &logits)) == SITS_OK)
            memcpy(out + (size_t)off * V, logits, sizeof(float) * (size_t)m * V);
    }
    sits_kv_blocks_release(r->blocks, need, bt);
    free(bt);
    return st;
}

/* The runner's engine re-created with KV dtype dt (same sizes, same weights). */
static sits_status_t engine_with_kv(sits_runner_t *r, sits_dtype_t dt)
{
    sits_engine_destroy(r->engine);
    r->engine = NULL;
    SITS_CHECK(sits_backend_set_kv_dtype(r->be, dt));
    return sits_engine_create(&r->ep, r->w, r->be, r->tp_dev ? r->tp_dev : r->tp, &r->engine);
}

/* Logits of every sequence and position [sum len, V], and the greedy continuations gen_out[seq][gen]. */
static sits_status_t run_all(const opts_t *o, sits_runner_t *r, const seqs_t *s, float *logits, int32_t **gen_out)
{
    int V = r->w->dims.v_count;
    size_t off = 0;
    for (int i = 0; i < s->n; i++) {
        SITS_CHECK(run_positions(r, s->ids[i], s->len[i], logits + off * V));
        off += (size_t)s->len[i];
    }
    if (o->gen > 0) {
        sits_sample_params_t sp[MAX_SEQS];
        const int32_t *pp[MAX_SEQS];
        int olen[MAX_SEQS];
        for (int i = 0; i < s->n; i++) {
            sp[i] = (sits_sample_params_t){ .temperature = 0.0f, .top_p = 1.0f };
            pp[i] = s->ids[i];
        }
        SITS_CHECK(sits_generate(r, s->n, pp, s->plen, o->gen, sp, 1, gen_out, olen, NULL, NULL, NULL));
    }
    return SITS_OK;
}

/* A copy of dir/config.json with num_hidden_layers = layers in a fresh temporary directory. */
static int config_with_layers(const char *dir, int layers, char *tmp, size_t tmp_len)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *c = json_load_file(path, 0, NULL);
    if (!c) return -1;
    json_object_set_new(c, "num_hidden_layers", json_integer(layers));
    snprintf(tmp, tmp_len, "/tmp/sits-kv-int8-XXXXXX");
    if (!mkdtemp(tmp)) { json_decref(c); return -1; }
    snprintf(path, sizeof path, "%s/config.json", tmp);
    int rc = json_dump_file(c, path, JSON_INDENT(2));
    json_decref(c);
    return rc;
}

static const char *kv_name(sits_dtype_t dt)
{
    return dt == SITS_DT_F32 ? "fp32" : dt == SITS_DT_BF16 ? "bf16" : dt == SITS_DT_I8 ? "int8" : "fp8";
}

int main(int argc, char **argv)
{
    int provided, world = 1, rc = 1, bad = 0;
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) return 1;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    sits_log_init(0);
    opts_t o;
    if (parse_args(argc, argv, &o)) { MPI_Finalize(); return 2; }
    if (world != 1) {
        fprintf(stderr, "sits-kv-int8-accuracy: runs on one rank (TP 1)\n");
        MPI_Finalize();
        return 2;
    }
    sits_backend_t *be = NULL;
    sits_comm_t *tp = NULL;
    sits_status_t st;
    json_t *jmodels = json_array();
    int use_cuda = 0;
    st = sits_bench_backend(o.device, 0, o.threads, &be, &use_cuda);
    if (use_cuda && st == SITS_ERR_UNSUPPORTED) {
        printf("SKIP: no usable GPU (built without CUDA, or none visible)\n");
        json_decref(jmodels);
        MPI_Finalize();
        return 77;
    }
    if (st != SITS_OK) { fprintf(stderr, "sits-kv-int8-accuracy: backend: %s\n", sits_status_str(st)); goto out; }
    if ((st = sits_comm_mpi_create(MPI_COMM_WORLD, 600.0, &tp)) != SITS_OK) goto out;
    sits_dtype_t refs[MAX_REFS], qdt = SITS_DT_I8;
    int n_refs = 0;
    if (o.kv && ((st = sits_backend_kv_dtype_parse(o.kv, be->act_dtype, &qdt)) != SITS_OK || !sits_kv_dtype_is_q8(qdt))) {
        fprintf(stderr, "sits-kv-int8-accuracy: --kv %s: int8 or fp8\n", o.kv);
        st = SITS_ERR_INVALID;
        goto out;
    }
    {
        char buf[64];
        snprintf(buf, sizeof buf, "%s", o.refs ? o.refs : be->act_dtype == SITS_DT_F32 ? "fp32,bf16" : "bf16");
        for (char *t = strtok(buf, ","); t && n_refs < MAX_REFS; t = strtok(NULL, ",")) {
            if ((st = sits_backend_kv_dtype_parse(t, be->act_dtype, &refs[n_refs])) != SITS_OK) goto out;
            if (sits_kv_dtype_is_q8(refs[n_refs])) { fprintf(stderr, "sits-kv-int8-accuracy: %s is not a reference\n", t); st = SITS_ERR_INVALID; goto out; }
            n_refs++;
        }
    }
    printf("sits-kv-int8-accuracy on %s: %s KV vs %s KV; %d random prompts x %d tokens (seed %llu) + fixture prompts, %d greedy "
           "tokens, block size %d\n", be->ops->name, kv_name(qdt), o.refs ? o.refs : kv_name(refs[0]), o.prompts, o.len, o.seed, o.gen,
           o.block_size);
    printf("%-34s %-4s %6s %8s %11s %11s %8s %6s\n", "model", "ref", "pos", "top1", "kl_mean", "kl_max", "greedy", "same");
    for (int mi = 0; mi < o.n_models; mi++) {
        const char *dir = o.model[mi], *name = strrchr(dir, '/') && strrchr(dir, '/')[1] ? strrchr(dir, '/') + 1 : dir;
        char tmp[64] = "";
        sits_model_config_t full;
        if ((st = sits_model_config_load(dir, &full)) != SITS_OK) goto out;
        if (o.dummy[mi] && o.layers > 0 && o.layers < full.n_layers) {
            if (config_with_layers(dir, o.layers, tmp, sizeof tmp)) { st = SITS_ERR_IO; goto out; }
        }
        seqs_t s = { 0 };
        if ((st = seqs_make(&o, dir, full.vocab_size, &s)) != SITS_OK) goto out;
        int total = 0, maxlen = 0, psum = 0;
        for (int i = 0; i < s.n; i++) {
            total += s.len[i];
            psum += s.plen[i];
            if (s.len[i] > maxlen) maxlen = s.len[i];
        }
        sits_runner_params_t rp = { .model_dir = tmp[0] ? tmp : dir, .dummy = o.dummy[mi], .dummy_seed = 0x5175d157ull,
                                    .max_seqs = MAX_SEQS, .max_tokens = psum > CHUNK ? psum : CHUNK,
                                    .max_model_len = maxlen + o.gen + 1, .block_size = o.block_size };
        if ((st = sits_backend_set_kv_dtype(be, refs[0])) != SITS_OK) { seqs_free(&s); goto out; }
        sits_runner_t *r = NULL;
        if ((st = sits_runner_create(&rp, be, tp, NULL, &r)) != SITS_OK) {
            fprintf(stderr, "sits-kv-int8-accuracy: cannot load %s: %s\n", dir, sits_status_str(st));
            seqs_free(&s);
            goto out;
        }
        int V = r->w->dims.v_count;
        float *lref = malloc(sizeof(float) * (size_t)total * V), *l8 = malloc(sizeof(float) * (size_t)total * V);
        int32_t *gref[MAX_SEQS], *g8[MAX_SEQS];
        for (int i = 0; i < s.n; i++) {
            gref[i] = calloc((size_t)o.gen + 1, sizeof(int32_t));
            g8[i] = calloc((size_t)o.gen + 1, sizeof(int32_t));
        }
        /* capacity over the whole model (all its layers) */
        full.n_layers = full.n_layers > 0 ? full.n_layers : r->cfg.n_layers;
        size_t bb[3] = { sits_engine_kv_block_bytes(&full, &r->w->dims, SITS_DT_F32, o.block_size),
                         sits_engine_kv_block_bytes(&full, &r->w->dims, SITS_DT_BF16, o.block_size),
                         sits_engine_kv_block_bytes(&full, &r->w->dims, qdt, o.block_size) };
        json_t *jrefs = json_array();
        result_t res[MAX_REFS];
        memset(res, 0, sizeof res);
        for (int k = 0; k < n_refs && st == SITS_OK && lref && l8; k++) {
            result_t *R = &res[k];
            R->ref = refs[k];
            if ((st = engine_with_kv(r, refs[k])) != SITS_OK || (st = run_all(&o, r, &s, lref, gref)) != SITS_OK) break;
            if ((st = engine_with_kv(r, qdt)) != SITS_OK || (st = run_all(&o, r, &s, l8, g8)) != SITS_OK) break;
            for (long p = 0; p < total; p++) {
                int same;
                double kl = sits_bench_kl_row(lref + (size_t)p * V, l8 + (size_t)p * V, V, &same);
                R->kl_sum += kl;
                if (kl > R->kl_max) R->kl_max = kl;
                R->agree += same;
                R->positions++;
            }
            R->n_seqs = s.n;
            for (int i = 0; i < s.n; i++) {
                int eq = 1;
                for (int j = 0; j < o.gen; j++) {
                    R->gen_tokens++;
                    R->gen_equal += gref[i][j] == g8[i][j];
                    eq = eq && gref[i][j] == g8[i][j];
                }
                R->seqs_identical += eq;
            }
            double top1 = (double)R->agree / (double)R->positions, klm = R->kl_sum / (double)R->positions;
            double greedy = R->gen_tokens ? (double)R->gen_equal / (double)R->gen_tokens : 1.0;
            int fail = (o.min_top1 >= 0 && top1 < o.min_top1) || (o.max_kl_mean >= 0 && klm > o.max_kl_mean) ||
                       (o.max_kl >= 0 && R->kl_max > o.max_kl) || (o.min_greedy >= 0 && greedy < o.min_greedy) ||
                       (o.min_kl_mean >= 0 && klm < o.min_kl_mean);
            bad += fail;
            printf("%-34.34s %-4s %6ld %8.4f %11.3e %11.3e %8.4f %3d/%-2d%s\n", name, kv_name(refs[k]), R->positions, top1, klm,
                   R->kl_max, greedy, R->seqs_identical, R->n_seqs, fail ? "  FAIL (bounds)" : "");
            fflush(stdout);
            json_array_append_new(jrefs, json_pack("{s:s, s:I, s:f, s:f, s:f, s:I, s:f, s:i, s:i}", "reference_kv", kv_name(refs[k]),
                                                   "positions", (json_int_t)R->positions, "top1_agreement", top1, "kl_mean", klm,
                                                   "kl_max", R->kl_max, "greedy_tokens", (json_int_t)R->gen_tokens,
                                                   "greedy_token_agreement", greedy, "greedy_sequences_identical",
                                                   R->seqs_identical, "sequences", R->n_seqs));
        }
        if (!lref || !l8) st = SITS_ERR_NOMEM;
        if (st == SITS_OK) {
            double gib = 1024.0 * 1024.0 * 1024.0;
            printf("%-34.34s capacity: KV block (%d tokens, %d layers) fp32 %zu B, bf16 %zu B, %s %zu B; blocks per GiB "
                   "%.0f / %.0f / %.0f; %s gain x%.3f vs bf16, x%.3f vs fp32\n", name, o.block_size, full.n_layers, bb[0],
                   bb[1], kv_name(qdt), bb[2], floor(gib / (double)bb[0]), floor(gib / (double)bb[1]),
                   floor(gib / (double)bb[2]), kv_name(qdt), (double)bb[1] / (double)bb[2], (double)bb[0] / (double)bb[2]);
            json_array_append_new(jmodels, json_pack("{s:s, s:b, s:i, s:i, s:i, s:i, s:i, s:o, s:{s:i, s:I, s:I, s:I, s:f, s:f}}",
                                                     "model", dir, "dummy_weights", o.dummy[mi], "layers_run", r->cfg.n_layers,
                                                     "n_kv_heads", r->cfg.n_kv_heads, "head_dim", r->cfg.head_dim,
                                                     "vocab", r->cfg.vocab_size, "sequences", s.n, "results", jrefs,
                                                     "capacity", "block_tokens", o.block_size, "block_bytes_fp32",
                                                     (json_int_t)bb[0], "block_bytes_bf16", (json_int_t)bb[1], "block_bytes_int8",
                                                     (json_int_t)bb[2], "gain_vs_bf16", (double)bb[1] / (double)bb[2],
                                                     "gain_vs_fp32", (double)bb[0] / (double)bb[2]));
        } else {
            json_decref(jrefs);
            fprintf(stderr, "sits-kv-int8-accuracy: %s: %s\n", dir, sits_status_str(st));
        }
        for (int i = 0; i < s.n; i++) {
            free(gref[i]);
            free(g8[i]);
        }
        free(lref);
        free(l8);
        sits_runner_destroy(r);
        seqs_free(&s);
        if (tmp[0]) {
            char path[1200];
            snprintf(path, sizeof path, "%s/config.json", tmp);
            unlink(path);
            rmdir(tmp);
        }
        if (st != SITS_OK) goto out;
    }
    if (o.min_top1 >= 0 || o.max_kl_mean >= 0 || o.max_kl >= 0 || o.min_greedy >= 0 || o.min_kl_mean >= 0)
        printf("bounds: top1 >= %g, %g <= kl_mean <= %g, kl_max <= %g, greedy >= %g: %s\n", o.min_top1, o.min_kl_mean,
               o.max_kl_mean, o.max_kl, o.min_greedy, bad ? "FAIL" : "ok");
    if (o.json) {
        json_t *j = json_pack("{s:s, s:s, s:s, s:i, s:i, s:i, s:I, s:i, s:O}", "bench", "kv_int8_accuracy", "quantised_kv",
                              kv_name(qdt), "backend", be->ops->name,
                              "random_prompts", o.prompts, "random_len", o.len, "greedy_tokens", o.gen, "seed",
                              (json_int_t)o.seed, "block_size", o.block_size, "models", jmodels);
        if (!j || json_dump_file(j, o.json, JSON_INDENT(2) | JSON_PRESERVE_ORDER)) {
            fprintf(stderr, "cannot write %s\n", o.json);
            bad++;
        } else {
            printf("wrote %s\n", o.json);
        }
        json_decref(j);
    }
    rc = bad ? 1 : 0;
out:
    if (st != SITS_OK) {
        fprintf(stderr, "sits-kv-int8-accuracy: %s\n", sits_status_str(st));
        rc = 1;
    }
    json_decref(jmodels);
    sits_comm_destroy(tp);
    sits_backend_destroy(be);
    MPI_Finalize();
    return rc;
}
