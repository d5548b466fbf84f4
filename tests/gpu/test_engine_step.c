/* test_engine_step.c -- [perf] the engine's step paths against each other, on the cpu backend
 * and, where a GPU is usable, on the cuda backend (CUDA graphs, device sampling, fp32 residual).
 *
 * usage: test_engine_step [MODEL_DIR]   (default $top_srcdir/tests/fixtures/models/llama_small)
 * One rank. Two engines share the model's weights: A (the runner's: CUDA graphs on where the
 * backend has them) and B (no_cuda_graphs). Both prefill 8 sequences eagerly, then run the same
 * decode steps (batches of 1, 3, 8, 5, 2, ... sequences: several graph buckets, pad rows; one
 * mixed decode + prefill step in the middle, which runs eagerly) fed the same tokens. Checks:
 *   1. A's sits_engine_sample (backend reduction, only candidates downloaded) returns exactly the
 *      tokens sits_sample picks on A's full logits (sits_engine_logits): greedy, temperature,
 *      top-k, top-p, top-k beyond the device candidate limit (host path), and a step whose batch
 *      carried no sample params (the rows are uploaded by sits_engine_sample);
 *   2. A's logits equal B's: bit for bit on the cpu (same code), within a row-scaled bf16 bound on
 *      cuda (a graph step pads the batch, so its GEMMs may pick other algorithms);
 *   3. the counters: on cuda A replayed graphs (one capture per bucket used) and B none; every
 *      step but the oversized top-k one sampled on the backend;
 *   4. [kv] KV save / load round trips on both engines (kv_roundtrip), then one more step compared;
 *   5. [sampling controls] [logprobs] a step through sits_engine_sample_step (step_controls);
 *   6. [speculative] verification-shaped steps (k + 1 positions of a sequence, every one an output): as graphs
 *      on cuda (replays of a decode step's graph), logits of all rows A vs B.
 * Exit 0 pass, 1 fail (first mismatches and the max error printed). */
#include "backend/backend.h"
#include "comm/comm.h"
#include "engine/engine.h"
#include "engine/sample.h"
#include "sched/generate.h"
#include "util/log.h"

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S 8          /* sequences */
#define MAX_TOK 64
#define BLOCK 4
#define MODEL_LEN 96

static int g_fail;

typedef struct {
    const char *dev;
    sits_runner_t *r;
    sits_engine_t *a, *b;     /* a = r->engine */
    sits_comm_t *tp;
    int len[S];               /* tokens in each sequence's cache */
    int32_t next[S];          /* the token each sequence feeds next */
    int32_t bt[S * (MODEL_LEN / BLOCK)];
    int mb;
    int steps, host_steps, verify_steps, buckets_used[16], n_buckets_used;
    double max_err;
} ctx_t;

static void fail(const char *fmt, const char *dev, int step, const char *detail)
{
    fprintf(stderr, "FAIL [%s] step %d: %s%s\n", dev, step, fmt, detail ? detail : "");
    g_fail++;
}

/* Logits of both engines: exact on the cpu, within 4% of the row's max |logit| + 0.02 on cuda. */
static void compare_logits(ctx_t *c, int step, const float *la, const float *lb, int n_out)
{
    int V = c->r->w->dims.v_count, bad = 0, exact = !strcmp(c->dev, "cpu");
    for (int i = 0; i < n_out; i++) {
        const float *ra = la + (size_t)i * V, *rb = lb + (size_t)i * V;
        double mx = 0;
        for (int j = 0; j < V; j++) if (fabs(rb[j]) > mx) mx = fabs(rb[j]);
        double tol = exact ? 0.0 : 0.04 * mx + 0.02;
        for (int j = 0; j < V; j++) {
            double err = fabs((double)ra[j] - rb[j]);
            if (!(err <= tol)) {
                if (bad < 5) fprintf(stderr, "  [%s] step %d row %d logit %d: graph/engine A %.7g, eager/engine B %.7g (tol %.3g)\n",
                                     c->dev, step, i, j, ra[j], rb[j], tol);
                bad++;
            }
            if (err > c->max_err) c->max_err = err;
        }
    }
    if (bad) {
        char d[64];
        snprintf(d, sizeof d, " (%d logits)", bad);
        fail("engine A's logits differ from engine B's", c->dev, step, d);
    }
}

/* One step on both engines: n tokens given by (seq id, count) lists; outputs = the last token of
 * each listed sequence. with_params: the batch carries the sample params. */
static void step(ctx_t *c, int n_list, const int *seqs, const int *counts, const sits_sample_params_t *sp, int with_params)
{
    int32_t tok[MAX_TOK], pos[MAX_TOK], seq[MAX_TOK], out_rows[S], bt[S * (MODEL_LEN / BLOCK)];
    int n = 0;
    for (int k = 0; k < n_list; k++) {
        int s = seqs[k];
        memcpy(bt + (size_t)k * c->mb, c->bt + (size_t)s * c->mb, sizeof(int32_t) * (size_t)c->mb);
        for (int j = 0; j < counts[k]; j++, n++) {
            tok[n] = j + 1 == counts[k] ? c->next[s] : (int32_t)((s * 131 + j * 17 + c->len[s]) % c->r->cfg.vocab_size);
            pos[n] = c->len[s] + j;
            seq[n] = k;
        }
        out_rows[k] = n - 1;
    }
    sits_batch_t b = { .n_tokens = n, .tokens = tok, .pos = pos, .seq = seq, .n_seqs = n_list, .block_tables = bt,
                       .n_out = n_list, .out_rows = out_rows, .sample = with_params ? sp : NULL };
    int32_t t_dev[S], t_host[S];
    const float *la, *lb;
    if (sits_engine_run(c->a, &b) != SITS_OK || sits_engine_sample(c->a, c->tp, sp, t_dev) != SITS_OK ||
        sits_engine_logits(c->a, &la) != SITS_OK) {
        fail("engine A failed", c->dev, c->steps, NULL);
        return;
    }
    int V = c->r->w->dims.v_count;
    float *la_copy = malloc(sizeof(float) * (size_t)n_list * V);
    memcpy(la_copy, la, sizeof(float) * (size_t)n_list * V);
    if (sits_sample(c->tp, la_copy, n_list, c->r->w->dims.v_start, V, sp, t_host) != SITS_OK) fail("sits_sample failed", c->dev, c->steps, NULL);
    for (int k = 0; k < n_list; k++)
        if (t_dev[k] != t_host[k]) {
            char d[160];
            snprintf(d, sizeof d, " output %d (seq %d, T %.2f top-k %d top-p %.2f): engine_sample %d, sits_sample %d", k, seqs[k],
                     sp[k].temperature, sp[k].top_k, sp[k].top_p, t_dev[k], t_host[k]);
            fail("device sampling differs from the host path:", c->dev, c->steps, d);
        }
    b.sample = NULL;
    if (sits_engine_forward(c->b, &b, &lb) != SITS_OK) fail("engine B failed", c->dev, c->steps, NULL);
    else compare_logits(c, c->steps, la_copy, lb, n_list);
    free(la_copy);
    for (int k = 0; k < n_list; k++) {
        c->len[seqs[k]] += counts[k];
        c->next[seqs[k]] = t_dev[k] >= 0 ? t_dev[k] : 0;
    }
    c->steps++;
}

/* [speculative] A verification-shaped step: sequence seqs[k] feeds its next token and counts[k] - 1 drafts,
 * every position an output row (what the scheduler sends for speculating sequences). Engine A (graphs: such
 * a step replays the bucket's graph when no sequence has more than SITS_SPEC_MAX_K + 1 tokens) against engine B
 * (eager), every row's logits; both caches take the tokens as if all drafts were accepted. */
static void verify_step(ctx_t *c, int n_list, const int *seqs, const int *counts)
{
    int32_t tok[MAX_TOK], pos[MAX_TOK], seq[MAX_TOK], out_rows[MAX_TOK], bt[S * (MODEL_LEN / BLOCK)];
    int n = 0, V = c->r->w->dims.v_count, Vt = c->r->cfg.vocab_size;
    for (int k = 0; k < n_list; k++) {
        int s = seqs[k];
        memcpy(bt + (size_t)k * c->mb, c->bt + (size_t)s * c->mb, sizeof(int32_t) * (size_t)c->mb);
        for (int j = 0; j < counts[k]; j++, n++) {
            tok[n] = j == 0 ? c->next[s] : (int32_t)((s * 131 + j * 29 + c->len[s]) % Vt);
            pos[n] = c->len[s] + j;
            seq[n] = k;
            out_rows[n] = n;
        }
    }
    sits_batch_t b = { .n_tokens = n, .tokens = tok, .pos = pos, .seq = seq, .n_seqs = n_list, .block_tables = bt,
                       .n_out = n, .out_rows = out_rows };
    const float *la, *lb;
    if (sits_engine_run(c->a, &b) != SITS_OK || sits_engine_logits(c->a, &la) != SITS_OK) {
        fail("engine A failed a verification step", c->dev, -1, NULL);
        return;
    }
    float *la_copy = malloc(sizeof(float) * (size_t)n * V);
    memcpy(la_copy, la, sizeof(float) * (size_t)n * V);
    if (sits_engine_forward(c->b, &b, &lb) != SITS_OK) fail("engine B failed a verification step", c->dev, -1, NULL);
    else compare_logits(c, 1000 + n, la_copy, lb, n);
    free(la_copy);
    for (int k = 0; k < n_list; k++) {
        c->len[seqs[k]] += counts[k];
        c->next[seqs[k]] = (int32_t)((seqs[k] * 7 + c->len[seqs[k]]) % Vt);
    }
    c->verify_steps++;
}

/* [sampling controls] [logprobs] A's sits_engine_sample_step (logprob_reduce, logit_process with the min_p
 * cut, the sampler, logit_pick, all on the backend; only records downloaded) against the same steps done
 * on the host on A's raw logits with the cpu reference functions: the same tokens, every logprob and
 * top-5 value within 1e-6 (double sums in another order on cuda), the same top ids; and A's logits
 * were never downloaded by the step itself. Decode rows of all the sequences with penalties, logit_bias
 * (a ban among them), min_p, greedy and sampled rows, scored ids given and sampled. */
static void step_controls(ctx_t *c)
{
    int32_t tok[S], pos[S], seq[S], out_rows[S], bt[S * (MODEL_LEN / BLOCK)];
    sits_sample_params_t sp[S];
    sits_sample_bias_t bias[S][3];
    sits_sample_hist_t hist[S][4];
    int V = c->r->w->dims.v_count, Vt = c->r->cfg.vocab_size;
    for (int k = 0; k < S; k++) {
        memcpy(bt + (size_t)k * c->mb, c->bt + (size_t)k * c->mb, sizeof(int32_t) * (size_t)c->mb);
        tok[k] = c->next[k];
        pos[k] = c->len[k];
        seq[k] = k;
        out_rows[k] = k;
        for (int j = 0; j < 3; j++) bias[k][j] = (sits_sample_bias_t){ (k * 37 + j * 101) % Vt, j == 2 && k % 2 ? -INFINITY : 2.5f - j };
        for (int j = 0; j < 4; j++) hist[k][j] = (sits_sample_hist_t){ (k * 53 + j * 97 + 5) % Vt, j % 3, j != 1 };
        /* sorted by id, as the scheduler hands them over */
        for (int a_ = 1; a_ < 4; a_++)
            for (int b_ = a_; b_ > 0 && hist[k][b_ - 1].id > hist[k][b_].id; b_--) {
                sits_sample_hist_t t = hist[k][b_];
                hist[k][b_] = hist[k][b_ - 1];
                hist[k][b_ - 1] = t;
            }
        sp[k] = (sits_sample_params_t){ .temperature = k % 3 == 0 ? 0.0f : 0.9f, .top_k = k == 4 ? 30 : 0, .top_p = 1.0f,
                                        .seed = 40 + k, .step = 500 + k, .logprobs = k != 5, .top_logprobs = k % 2 ? 5 : 0,
                                        .lp_target = k == 2 ? (k * 11) % Vt : -1,
                                        .presence_penalty = k % 4 == 1 ? 0.8f : 0.0f, .frequency_penalty = k % 4 == 2 ? 0.6f : 0.0f,
                                        .repetition_penalty = k % 2 ? 1.3f : 1.0f, .min_p = k % 3 == 1 ? 0.1f : 0.0f,
                                        .bias = bias[k], .n_bias = k == 7 ? 0 : 3, .hist = hist[k], .n_hist = 4 };
    }
    sits_batch_t b = { .n_tokens = S, .tokens = tok, .pos = pos, .seq = seq, .n_seqs = S, .block_tables = bt,
                       .n_out = S, .out_rows = out_rows, .sample = sp };
    const float *la;
    int32_t t_dev[S], t_host[S];
    sits_logprob_t lp_dev[S], lp_host[S];
    memset(lp_dev, 0, sizeof lp_dev);
    memset(lp_host, 0, sizeof lp_host);
    sits_engine_stats_t before, after;
    if (sits_engine_run(c->a, &b) != SITS_OK || sits_engine_logits(c->a, &la) != SITS_OK) {
        fail("engine A failed (controls step)", c->dev, c->steps, NULL);
        return;
    }
    size_t nv = (size_t)S * V;
    float *raw = malloc(sizeof(float) * nv), *l = malloc(sizeof(float) * nv);
    memcpy(raw, la, sizeof(float) * nv);
    memcpy(l, la, sizeof(float) * nv);
    sits_engine_get_stats(c->a, &before);
    if (sits_engine_sample_step(c->a, c->tp, sp, NULL, t_dev, lp_dev) != SITS_OK) fail("sits_engine_sample_step failed", c->dev, c->steps, NULL);
    sits_engine_get_stats(c->a, &after);
    if (after.logits_downloads != before.logits_downloads || after.device_logprobs != before.device_logprobs + 1)
        fail("the controls step downloaded the logits or made no device logprobs", c->dev, c->steps, NULL);
    /* the host reference: the same pieces on the host copy (one rank: min_p's max is the row's) */
    sits_logprob_row_t lrows[S];
    sits_logprob_rec_t recs[S];
    sits_logit_proc_row_t prow[S];
    sits_logit_proc_ent_t ents[S * 7];
    float ent_raw[S * 7], rowmax[S], cut[S], pick[S];
    int32_t ids[S];
    int min_p = 0;
    int k_lp = sits_sample_logprob_rows(S, sp, lrows);
    sits_backend_cpu_logprob_reduce(recs, l, c->r->w->dims.v_start, V, lrows, k_lp);
    sits_sample_proc_build(S, sp, prow, ents, &min_p);
    sits_backend_cpu_logit_process(l, S, c->r->w->dims.v_start, V, prow, ents, ent_raw, NULL, rowmax);
    sits_sample_min_p_cut(S, sp, rowmax, 1, cut);
    sits_backend_cpu_logit_process(l, S, c->r->w->dims.v_start, V, NULL, NULL, NULL, cut, NULL);
    if (sits_sample(c->tp, l, S, c->r->w->dims.v_start, V, sp, t_host) != SITS_OK) fail("sits_sample failed", c->dev, c->steps, NULL);
    for (int k = 0; k < S; k++) ids[k] = sp[k].logprobs && sp[k].lp_target < 0 ? t_host[k] : -1;
    sits_backend_cpu_logit_pick(pick, l, S, c->r->w->dims.v_start, V, ids, prow, ents, ent_raw);
    for (int j = 0; j < k_lp; j++)
        if (lrows[j].target < 0) {
            recs[j].has_tgt = !isnan(pick[lrows[j].row]);
            recs[j].tgt = recs[j].has_tgt ? pick[lrows[j].row] : 0.0f;
        }
    if (sits_sample_logprob_merge(c->tp, recs, S, sp, t_host, lp_host) != SITS_OK) fail("logprob merge failed", c->dev, c->steps, NULL);
    int changed = 0;
    for (size_t i = 0; i < nv; i++) changed += l[i] != raw[i];
    if (!min_p || changed == 0) fail("the controls changed nothing (the check could not fail)", c->dev, c->steps, NULL);
    for (int k = 0; k < S; k++) {
        char d[200];
        if (t_dev[k] != t_host[k]) {
            snprintf(d, sizeof d, " output %d: device %d, host reference %d", k, t_dev[k], t_host[k]);
            fail("controls step: tokens differ:", c->dev, c->steps, d);
        }
        if (!sp[k].logprobs) continue;
        int ok = lp_dev[k].id == lp_host[k].id && fabsf(lp_dev[k].logprob - lp_host[k].logprob) <= 1e-6f &&
                 lp_dev[k].n_top == lp_host[k].n_top;
        for (int t = 0; ok && t < lp_host[k].n_top; t++)
            ok = lp_dev[k].top_id[t] == lp_host[k].top_id[t] && fabsf(lp_dev[k].top_logprob[t] - lp_host[k].top_logprob[t]) <= 1e-6f;
        if (!ok) {
            snprintf(d, sizeof d, " output %d: device id %d logprob %.7g (%d top), host reference id %d logprob %.7g (%d top)", k,
                     lp_dev[k].id, lp_dev[k].logprob, lp_dev[k].n_top, lp_host[k].id, lp_host[k].logprob, lp_host[k].n_top);
            fail("controls step: logprobs differ:", c->dev, c->steps, d);
        }
    }
    printf("[%s] controls step: %d tokens and %d logprob rows equal the host reference, %d logits changed by the controls\n",
           c->dev, S, k_lp, changed);
    const float *lb;   /* engine B takes the step too (its cache stays A's), its logits compared with A's raw ones */
    b.sample = NULL;
    if (sits_engine_forward(c->b, &b, &lb) != SITS_OK) fail("engine B failed", c->dev, c->steps, NULL);
    else compare_logits(c, c->steps, raw, lb, S);
    free(raw);
    free(l);
    for (int k = 0; k < S; k++) {
        c->len[k] += 1;
        c->next[k] = t_dev[k] >= 0 ? t_dev[k] : 0;
    }
    c->steps++;
}

/* [kv] sits_engine_kv_save_blocks / load_blocks on both engines: every block of every sequence saved
 * (h1), loaded into the same blocks in reverse order and saved in reverse order again (h2 == h1:
 * gathers and scatters hit the right block, layer and K|V, across chunks on B), then h1 loaded back
 * where it came from. On the cpu A's and B's saves (one chunk vs chunks of 3) are equal, bit for bit. */
static void kv_roundtrip(ctx_t *c)
{
    int n = S * c->mb;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n), *rev = malloc(sizeof(int32_t) * (size_t)n);
    size_t pb = sits_engine_kv_bytes_per_block(c->a), bytes = (size_t)n * pb;
    unsigned char *h1[2] = { malloc(bytes), malloc(bytes) }, *h2 = malloc(bytes);
    for (int i = 0; i < n; i++) { ids[i] = c->bt[i]; rev[n - 1 - i] = c->bt[i]; }
    sits_engine_t *eng[2] = { c->a, c->b };
    for (int k = 0; k < 2; k++) {
        const char *name = k ? "B" : "A";
        if (sits_engine_kv_save_blocks(eng[k], n, ids, h1[k]) != SITS_OK ||
            sits_engine_kv_load_blocks(eng[k], n, rev, h1[k]) != SITS_OK ||
            sits_engine_kv_save_blocks(eng[k], n, rev, h2) != SITS_OK ||
            sits_engine_kv_load_blocks(eng[k], n, ids, h1[k]) != SITS_OK) {
            fail("kv save / load failed on engine", c->dev, -1, name);
            continue;
        }
        if (memcmp(h1[k], h2, bytes)) fail("kv blocks loaded in reverse order did not save back equal on engine", c->dev, -1, name);
    }
    if (!strcmp(c->dev, "cpu") && memcmp(h1[0], h1[1], bytes)) fail("kv saves of engines A and B differ", c->dev, -1, NULL);
    printf("[%s] kv save / load round trip of %d blocks (%zu bytes) on both engines done\n", c->dev, n, bytes);
    free(ids); free(rev); free(h1[0]); free(h1[1]); free(h2);
}

static void run_device(const char *dev, const char *model)
{
    ctx_t c = { .dev = dev };
    sits_backend_t *be = NULL;
    sits_backend_params_t bp = { .threads = 1, .device = 0 };
    if ((!strcmp(dev, "cuda") ? sits_backend_cuda_create(&bp, &be) : sits_backend_cpu_create(&bp, &be)) != SITS_OK) {
        fail("backend creation failed", dev, -1, NULL);
        return;
    }
    if (sits_comm_mpi_create(MPI_COMM_SELF, 60.0, &c.tp) != SITS_OK) {
        fail("comm creation failed", dev, -1, NULL);
        sits_backend_destroy(be);
        return;
    }
    sits_runner_params_t rp = { .model_dir = model, .max_seqs = S, .max_tokens = MAX_TOK, .block_size = BLOCK,
                                .max_model_len = MODEL_LEN };
    if (sits_runner_create(&rp, be, c.tp, NULL, &c.r) != SITS_OK) {
        fail("model load failed: ", dev, -1, model);
        goto out;
    }
    c.a = c.r->engine;
    sits_engine_params_t ep = c.r->ep;
    ep.no_cuda_graphs = 1;
    ep.kv_copy_chunk = 3; /* [kv] B saves / loads KV 3 blocks a chunk, A as many as its staging holds */
    if (sits_engine_create(&ep, c.r->w, be, c.tp, &c.b) != SITS_OK) {
        fail("second engine failed", dev, -1, NULL);
        goto out;
    }
    c.mb = ep.max_blocks_per_seq;
    if (c.mb * S > ep.n_blocks || c.mb > MODEL_LEN / BLOCK) {
        fail("unexpected block budget", dev, -1, NULL);
        goto out;
    }
    for (int s = 0; s < S; s++)
        for (int j = 0; j < c.mb; j++) c.bt[s * c.mb + j] = s * c.mb + j;

    sits_sample_params_t sp[S];
    for (int k = 0; k < S; k++) {
        switch (k % 4) {
        case 0: sp[k] = (sits_sample_params_t){ .temperature = 0.0f, .top_p = 1.0f }; break;
        case 1: sp[k] = (sits_sample_params_t){ .temperature = 0.8f, .top_p = 1.0f, .seed = 11 + k }; break;
        case 2: sp[k] = (sits_sample_params_t){ .temperature = 1.0f, .top_k = 20, .top_p = 1.0f, .seed = 5 }; break;
        default: sp[k] = (sits_sample_params_t){ .temperature = 0.7f, .top_p = 0.9f, .seed = 77 + k }; break;
        }
    }
    /* prefill: sequence s gets 3 + s tokens (52 in all), one eager step */
    int all[S], cnt[S];
    for (int s = 0; s < S; s++) { all[s] = s; cnt[s] = 3 + s; c.next[s] = 3 + s; }
    step(&c, S, all, cnt, sp, 1);
    /* decode steps of varying batch sizes over rotating subsets */
    const int sizes[] = { 1, 3, 8, 5, 2, 8, 1, 7, 4, 3, 8, 6 };
    int n_sizes = (int)(sizeof sizes / sizeof sizes[0]);
    for (int i = 0; i < n_sizes; i++) {
        int seqs[S], ones[S];
        for (int k = 0; k < sizes[i]; k++) { seqs[k] = (i + 3 * k) % S; ones[k] = 1; }
        /* distinct sequences: (i + 3k) mod 8 is a permutation for k < 8 */
        for (int k = 0; k < sizes[i]; k++) sp[k].step = (uint64_t)(i * 10 + k);
        step(&c, sizes[i], seqs, ones, sp, i != 4 /* step 4: params not in the batch */);
        if (i == 5) { /* a mixed step: sequence 0 decodes, sequence 1 prefills 3 more tokens */
            int ms[2] = { 0, 1 }, mc[2] = { 1, 3 };
            step(&c, 2, ms, mc, sp, 1);
        }
    }
    /* [speculative] verification steps (at most max_seqs = 8 output rows): 8 tokens (3 sequences with 3, 2 and 0
     * drafts) and 7 (2, 2, 0 drafts), both replaying bucket 8's graph, which a decode step of 8 recorded */
    {
        int v1[3] = { 2, 5, 7 }, c1[3] = { 4, 3, 1 }, v2[3] = { 0, 3, 6 }, c2[3] = { 3, 3, 1 };
        verify_step(&c, 3, v1, c1);
        verify_step(&c, 3, v2, c2);
    }
    /* top-k beyond the device candidate limit: the host path */
    {
        sits_sample_params_t big[2] = { { .temperature = 1.0f, .top_k = SITS_SAMPLE_MAX_C + 1, .top_p = 1.0f, .seed = 9 },
                                        { .temperature = 0.0f, .top_p = 1.0f } };
        int seqs[2] = { 2, 5 }, ones[2] = { 1, 1 };
        step(&c, 2, seqs, ones, big, 1);
        c.host_steps = 1;
    }
    step_controls(&c);
    kv_roundtrip(&c);
    {   /* one more step on both engines: the KV came back intact (A's and B's logits compared again) */
        int seqs[S], ones[S];
        for (int k = 0; k < S; k++) { seqs[k] = k; ones[k] = 1; sp[k].step = 900 + k; }
        step(&c, S, seqs, ones, sp, 1);
    }
    sits_engine_stats_t sa, sb;
    sits_engine_get_stats(c.a, &sa);
    sits_engine_get_stats(c.b, &sb);
    printf("[%s] %d steps; engine A: %ld graph replays, %ld captures, %ld device / %ld host samples; max |A - B| %.3g\n", dev,
           c.steps, sa.graph_replays, sa.graph_captures, sa.device_samples, sa.host_samples, c.max_err);
    if (sb.graph_replays || sb.graph_captures) fail("engine B (no_cuda_graphs) used graphs", dev, -1, NULL);
    if (sa.device_samples < c.steps - c.host_steps) fail("engine A sampled on the host where the backend could", dev, -1, NULL);
    if (!strcmp(dev, "cuda")) {
        /* decode batches 1, 3, 8, 5, 2, 8, 1, 7, 4, 3, 8, 6, the host-path 2, the controls step's 8 and the 8
         * after the kv round trip: buckets 1, 2, 4, 8 -> 4 captures, the other decode steps replay (15 - 4 = 11);
         * and the two verification steps replay bucket 8 (13) */
        if (sa.graph_captures != 4 || sa.graph_replays != 13) {
            char d[96];
            snprintf(d, sizeof d, " (%ld captures, %ld replays; expected 4 and 13)", sa.graph_captures, sa.graph_replays);
            fail("cuda graphs were not used as expected", dev, -1, d);
        }
    } else if (sa.graph_replays || sa.graph_captures) {
        fail("the cpu backend used graphs", dev, -1, NULL);
    }
out:
    sits_engine_destroy(c.b);
    sits_runner_destroy(c.r);
    sits_comm_destroy(c.tp);
    sits_backend_destroy(be);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    sits_log_init(0);
    char model[1024];
    const char *top = getenv("top_srcdir");
    if (argc > 1) snprintf(model, sizeof model, "%s", argv[1]);
    else snprintf(model, sizeof model, "%s/tests/fixtures/models/llama_small", top ? top : ".");
    run_device("cpu", model);
    if (sits_backend_cuda_device_count() > 0) run_device("cuda", model);
    else printf("[cuda] skipped: no usable CUDA device (built without CUDA, or no GPU / driver visible)\n");
    printf("%s: %d failures\n", g_fail ? "FAIL" : "PASS", g_fail);
    MPI_Finalize();
    return g_fail ? 1 : 0;
}
