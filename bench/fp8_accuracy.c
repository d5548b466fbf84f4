/* fp8_accuracy.c -- [fp8] accuracy of the --quant policies against the first one (bf16): top-1
 * agreement and KL divergence of the next-token distributions over a fixed prompt set.
 *
 *   bench/sits-fp8-accuracy --model DIR [--load-format auto|dummy] [--device cpu|cuda|auto]
 *       [--policies "bf16;ffn=fp8;fp8"] [--prompts 8] [--len 64] [--seed 1234] [--text FILE] [--threads N]
 *       [--json FILE] [--min-top1 X] [--max-kl Y]
 *
 * One rank (TP 1). The prompt set: --prompts sequences of --len token ids drawn from an LCG seeded
 * with --seed over the whole vocabulary (the same for every policy and run) -- random tokens, an input
 * no model is trained on -- or, with --text FILE, real text: token ids from a JSON file, either an
 * array of id arrays or an object whose "ids" is one (tests/integration/demo_ppl_ref.json: 8 held-out
 * sequences of 128 ids of the demo model's corpus); its first --prompts sequences (default all) and
 * their first --len ids (default the shortest sequence's length; asking for more is an error). For each policy (';'
 * separates them, since a policy may contain commas) the model is loaded with that --quant spec
 * and each prompt is prefilled in one step with the logits of every position (teacher forcing:
 * every policy sees the same tokens). Against the first policy's logits, per position:
 *   top-1 agreement = argmax equal (lowest id on ties), KL(p_ref || p) in nats (fp64 log-softmax).
 * [int4] A policy "@DIR" is another checkpoint of the same model (same vocabulary), loaded as stored:
 * a pre-quantised AWQ / GPTQ / compressed-tensors copy against the original.
 * Reported per policy: top1 (fraction of positions), kl_mean, kl_max, the fp8 and [int4] int4 linear counts and the
 * weight bytes. With --min-top1 / --max-kl, exit 1 when a non-reference policy falls outside
 * (the test uses this); the measured values are printed either way. Exit 0 ok, 1 fail, 2 usage. */
#include <jansson.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench_common.h"
#include "sched/generate.h"
#include "util/log.h"

#define MAX_POL 16

typedef struct {
    const char *model, *load_format, *device, *json, *text;
    char *pol[MAX_POL];
    int n_pol, prompts, len, threads;
    unsigned long long seed;
    double min_top1, max_kl;
} opts_t;

typedef struct {
    const char *quant;
    int fp8, int4, positions;   /* [int4] int4: INT4 linears */
    double top1, kl_mean, kl_max, weight_bytes, load_s;
} result_t;

static void usage(const char *a0)
{
    fprintf(stderr, "usage: %s --model DIR [--load-format auto|dummy] [--device cpu|cuda|auto] [--policies \"bf16;ffn=fp8;fp8\"]\n"
                    "       [--prompts 8] [--len 64] [--seed 1234] [--text FILE] [--threads N] [--json FILE] [--min-top1 X] [--max-kl Y]\n",
            a0);
}

static int parse_args(int argc, char **argv, opts_t *o)
{
    static char pols[1024] = "bf16;ffn=fp8;fp8";
    *o = (opts_t){ .load_format = "auto", .device = "auto", .prompts = 0, .len = 0, .seed = 1234, .min_top1 = -1, .max_kl = -1 };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) { usage(argv[0]); return -1; }
        if (!strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "--load-format")) o->load_format = v;
        else if (!strcmp(a, "--device")) o->device = v;
        else if (!strcmp(a, "--policies")) snprintf(pols, sizeof pols, "%s", v);
        else if (!strcmp(a, "--prompts")) o->prompts = atoi(v);
        else if (!strcmp(a, "--len")) o->len = atoi(v);
        else if (!strcmp(a, "--seed")) o->seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--threads")) o->threads = atoi(v);
        else if (!strcmp(a, "--json")) o->json = v;
        else if (!strcmp(a, "--text")) o->text = v;
        else if (!strcmp(a, "--min-top1")) o->min_top1 = atof(v);
        else if (!strcmp(a, "--max-kl")) o->max_kl = atof(v);
        else { usage(argv[0]); return -1; }
        i++;
    }
    for (char *p = strtok(pols, ";"); p && o->n_pol < MAX_POL; p = strtok(NULL, ";")) o->pol[o->n_pol++] = p;
    if (!o->model || o->n_pol < 1 || o->prompts < 0 || o->len < 0 || o->len > 4096) { usage(argv[0]); return -1; }
    return 0;
}

/* --text FILE: the token ids of its sequences into prompts [n][len] (n, len: o's, or the file's when 0);
 * every id must be in [0, vocab). */
static sits_status_t load_text(opts_t *o, int vocab, int32_t ***prompts_p)
{
    json_error_t err;
    json_t *root = json_load_file(o->text, 0, &err), *seqs = root;
    if (!root) {
        fprintf(stderr, "sits-fp8-accuracy: %s: %s (line %d)\n", o->text, err.text, err.line);
        return SITS_ERR_IO;
    }
    if (json_is_object(root)) seqs = json_object_get(root, "ids");
    sits_status_t st = SITS_ERR_INVALID;
    int n = json_is_array(seqs) ? (int)json_array_size(seqs) : 0, shortest = 1 << 30;
    for (int p = 0; p < n; p++) {
        const json_t *s = json_array_get(seqs, (size_t)p);
        int m = json_is_array(s) ? (int)json_array_size(s) : 0;
        shortest = m < shortest ? m : shortest;
    }
    if (n == 0 || shortest < 2) {
        fprintf(stderr, "sits-fp8-accuracy: %s: expected an array of token id arrays (or {\"ids\": ...})\n", o->text);
        goto out;
    }
    if (o->prompts > n || o->len > shortest) {
        fprintf(stderr, "sits-fp8-accuracy: %s has %d sequences of at least %d ids: --prompts %d / --len %d is more\n", o->text, n,
                shortest, o->prompts, o->len);
        goto out;
    }
    o->prompts = o->prompts ? o->prompts : n;
    o->len = o->len ? o->len : shortest;
    int32_t **prompts = calloc((size_t)o->prompts, sizeof *prompts);
    if (!prompts) { st = SITS_ERR_NOMEM; goto out; }
    *prompts_p = prompts;
    for (int p = 0; p < o->prompts; p++) {
        if (!(prompts[p] = malloc(sizeof(int32_t) * (size_t)o->len))) { st = SITS_ERR_NOMEM; goto out; }
        const json_t *s = json_array_get(seqs, (size_t)p);
        for (int i = 0; i < o->len; i++) {
            json_int_t id = json_integer_value(json_array_get(s, (size_t)i));
            if (!json_is_integer(json_array_get(s, (size_t)i)) || id < 0 || id >= vocab) {
                fprintf(stderr, "sits-fp8-accuracy: %s: sequence %d position %d: not a token id of vocab %d\n", o->text, p, i, vocab);
                goto out;
            }
            prompts[p][i] = (int32_t)id;
        }
    }
    st = SITS_OK;
out:
    json_decref(root);
    return st;
}

/* Loads the model with policy `quant`, runs every prompt, and stores (ref == NULL) or compares
 * against ref [prompts, len, V] the logits. */
static sits_status_t run_policy(const opts_t *o, sits_backend_t *be, sits_comm_t *tp, const char *quant, int32_t *const *prompts,
                                float *ref, result_t *res)
{
    sits_runner_t *r = NULL;
    sits_status_t st;
    int L = o->len;
    const char *dir = o->model;
    if (quant[0] == '@') {   /* [int4] "@DIR": the checkpoint in DIR, as stored */
        dir = quant + 1;
        quant = NULL;
    }
    sits_runner_params_t rp = { .model_dir = dir, .dummy = !strcmp(o->load_format, "dummy"), .dummy_seed = 0x5175d157ull,
                                .max_seqs = L, .max_tokens = L, .max_model_len = L, .block_size = 16, .quant = quant };
    double t0 = sits_bench_now_s();
    if ((st = sits_runner_create(&rp, be, tp, NULL, &r)) != SITS_OK) {
        fprintf(stderr, "sits-fp8-accuracy: cannot load %s with --quant '%s': %s\n", dir, quant ? quant : "auto", sits_status_str(st));
        return st;
    }
    res->load_s = sits_bench_now_s() - t0;
    res->quant = dir != o->model ? dir - 1 : quant;
    res->fp8 = r->w->n_fp8;
    res->int4 = r->w->n_int4;
    res->weight_bytes = (double)r->w->bytes;
    int V = r->w->dims.v_count, mb = r->ep.max_blocks_per_seq, need = (L + r->ep.block_size - 1) / r->ep.block_size;
    int32_t *bt = calloc((size_t)mb, sizeof *bt), *pos = malloc(sizeof(int32_t) * (size_t)L * 3);
    if (!bt || !pos) { st = SITS_ERR_NOMEM; goto out; }
    int32_t *seq = pos + L, *rows = seq + L;
    for (int i = 0; i < L; i++) { pos[i] = i; seq[i] = 0; rows[i] = i; }
    double kl_sum = 0;
    long agree = 0, n = 0;
    res->kl_max = 0;
    for (int p = 0; p < o->prompts; p++) {
        if ((st = sits_kv_blocks_alloc(r->blocks, need, bt)) != SITS_OK) goto out;
        sits_batch_t b = { .n_tokens = L, .tokens = prompts[p], .pos = pos, .seq = seq, .n_seqs = 1, .block_tables = bt,
                           .n_out = L, .out_rows = rows };
        const float *logits;
        st = sits_engine_forward(r->engine, &b, &logits);
        sits_kv_blocks_release(r->blocks, need, bt);
        if (st != SITS_OK) goto out;
        float *mine = ref + (size_t)p * L * V;
        for (int i = 0; i < L; i++) {
            const float *row = logits + (size_t)i * V;
            if (res->top1 < 0) {   /* the reference policy: keep its logits */
                memcpy(mine + (size_t)i * V, row, sizeof(float) * (size_t)V);
                continue;
            }
            int same;
            double kl = sits_bench_kl_row(mine + (size_t)i * V, row, V, &same);
            kl_sum += kl;
            agree += same;
            if (kl > res->kl_max) res->kl_max = kl;
            n++;
        }
    }
    res->positions = o->prompts * L;
    if (res->top1 >= 0 || n > 0) {
        res->top1 = n ? (double)agree / (double)n : 1.0;
        res->kl_mean = n ? kl_sum / (double)n : 0.0;
    } else {
        res->top1 = 1.0;   /* the reference against itself */
        res->kl_mean = 0.0;
    }
out:
    free(bt);
    free(pos);
    sits_runner_destroy(r);
    return st;
}

int main(int argc, char **argv)
{
    int provided, world = 1, rc = 1;
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) return 1;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    sits_log_init(0);
    opts_t o;
    if (parse_args(argc, argv, &o)) { MPI_Finalize(); return 2; }
    if (world != 1) {
        fprintf(stderr, "sits-fp8-accuracy: runs on one rank (TP 1)\n");
        MPI_Finalize();
        return 2;
    }
    sits_backend_t *be = NULL;
    sits_comm_t *tp = NULL;
    int32_t **prompts = NULL;
    float *ref = NULL;
    result_t res[MAX_POL];
    memset(res, 0, sizeof res);
    sits_status_t st;
    st = sits_bench_backend(o.device, 0, o.threads, &be, NULL);
    if (st != SITS_OK) { fprintf(stderr, "sits-fp8-accuracy: backend: %s\n", sits_status_str(st)); goto out; }
    if ((st = sits_comm_mpi_create(MPI_COMM_WORLD, 600.0, &tp)) != SITS_OK) goto out;
    sits_model_config_t cfg;
    if ((st = sits_model_config_load(o.model, &cfg)) != SITS_OK) goto out;
    if (o.text) {
        if ((st = load_text(&o, cfg.vocab_size, &prompts)) != SITS_OK) goto out;
    } else {
        o.prompts = o.prompts ? o.prompts : 8;
        o.len = o.len ? o.len : 64;
        if (!(prompts = calloc((size_t)o.prompts, sizeof *prompts))) { st = SITS_ERR_NOMEM; goto out; }
        unsigned long long s = o.seed;
        for (int p = 0; p < o.prompts; p++) {
            if (!(prompts[p] = malloc(sizeof(int32_t) * (size_t)o.len))) { st = SITS_ERR_NOMEM; goto out; }
            for (int i = 0; i < o.len; i++) {
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                prompts[p][i] = (int32_t)((s >> 33) % (unsigned long long)cfg.vocab_size);
            }
        }
    }
    if (!(ref = malloc(sizeof(float) * (size_t)o.prompts * o.len * (size_t)cfg.vocab_size))) { st = SITS_ERR_NOMEM; goto out; }
    if (o.text)
        printf("sits-fp8-accuracy: %s (%s weights, %d layers, hidden %d, vocab %d) on %s; %d prompts x %d tokens of %s, "
               "reference '%s'\n", o.model, o.load_format, cfg.n_layers, cfg.hidden_size, cfg.vocab_size, be->ops->name,
               o.prompts, o.len, o.text, o.pol[0]);
    else
        printf("sits-fp8-accuracy: %s (%s weights, %d layers, hidden %d, vocab %d) on %s; %d random prompts x %d tokens, "
               "seed %llu, reference '%s'\n", o.model, o.load_format, cfg.n_layers, cfg.hidden_size, cfg.vocab_size,
               be->ops->name, o.prompts, o.len, o.seed, o.pol[0]);
    printf("%-32s %6s %6s %10s %9s %11s %11s\n", "quant", "fp8", "int4", "MiB", "top1", "kl_mean", "kl_max");
    int bad = 0;
    for (int i = 0; i < o.n_pol; i++) {
        res[i].top1 = i == 0 ? -1.0 : 0.0;
        if ((st = run_policy(&o, be, tp, o.pol[i], prompts, ref, &res[i])) != SITS_OK) goto out;
        int fail = i > 0 && ((o.min_top1 >= 0 && res[i].top1 < o.min_top1) || (o.max_kl >= 0 && res[i].kl_mean > o.max_kl));
        bad += fail;
        printf("%-32s %6d %6d %10.1f %9.4f %11.3e %11.3e%s\n", res[i].quant, res[i].fp8, res[i].int4, res[i].weight_bytes / (1 << 20),
               res[i].top1,
               res[i].kl_mean, res[i].kl_max, fail ? "  FAIL (bounds: top1 >= min, kl_mean <= max)" : "");
        fflush(stdout);
    }
    if (o.min_top1 >= 0 || o.max_kl >= 0)
        printf("bounds: top1 >= %.4f, kl_mean <= %.3e: %s\n", o.min_top1, o.max_kl, bad ? "FAIL" : "ok");
    if (o.json) {
        json_t *arr = json_array();
        for (int i = 0; i < o.n_pol; i++)
            json_array_append_new(arr, json_pack("{s:s, s:i, s:i, s:f, s:i, s:f, s:f, s:f, s:f}", "quant", res[i].quant,
                                                 "fp8_linears", res[i].fp8, "int4_linears", res[i].int4, "weight_bytes", res[i].weight_bytes, "positions",
                                                 res[i].positions, "top1_agreement", res[i].top1, "kl_mean", res[i].kl_mean,
                                                 "kl_max", res[i].kl_max, "load_s", res[i].load_s));
        json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:i, s:i, s:I, s:s, s:s, s:o}", "bench", "fp8_accuracy", "model", o.model,
                              "load_format", o.load_format, "backend", be->ops->name, "prompts", o.prompts, "tokens_per_prompt",
                              o.len, "seed", (json_int_t)o.seed, "text", o.text ? o.text : "random", "reference", o.pol[0],
                              "policies", arr);
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
        fprintf(stderr, "sits-fp8-accuracy: %s\n", sits_status_str(st));
        rc = 1;
    }
    for (int p = 0; prompts && p < o.prompts; p++) free(prompts[p]);
    free(prompts);
    free(ref);
    sits_comm_destroy(tp);
    sits_backend_destroy(be);
    MPI_Finalize();
    return rc;
}
