/* test_logit_process.c -- the device sampling controls and logprobs ops (backend.h: logit_process,
 * logprob_reduce, logit_pick) with the engine's host pieces around them (src/engine/sample.c:
 * sits_sample_proc_build, sits_sample_min_p_cut, sits_sample_logprob_rows / _merge), on the cpu
 * backend, against HF transformers' logits processors (tests/fixtures/logprobs/logit_process.json,
 * written by tests/ref/gen_logit_process_fixture.py).
 *
 * Runs on any number of MPI ranks: the vocabulary is split over them as the engine splits it (each
 * rank processes its shard only, min_p's maxima and the logprob records are all-gathered), so at TP
 * 1, 2 and 4 (tests/integration/logit_process_tp.sh) it checks:
 *   - bias, min_tokens bans, repetition / presence / frequency penalties: every id of the shard equals
 *     HF's processed value (|a - b| <= 1e-5 + 1e-6 |b|; -inf exactly), the untouched ids bit for bit;
 *   - min_p: the ids left are exactly HF's TemperatureLogitsWarper + MinPLogitsWarper set;
 *   - logprobs: for scored ids given up front and for "sampled" ids recovered with logit_pick after
 *     the controls changed the logits, logprob and the top-5 (ids exactly, values within 1e-5) equal
 *     HF's log_softmax of the raw logits.
 * Prints the first mismatches. Exit 0 pass, 1 fail, 77 skip (fixture missing). */
#include "backend/backend.h"
#include "comm/comm.h"
#include "engine/sample.h"

#include <jansson.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ROWS 16
#define N_TGT 4

typedef struct {
    float *logits;                     /* [V] raw */
    float *processed;                  /* [V] HF's after the controls */
    char *keep;                        /* [V] min_p: 1 = kept (NULL: no min_p) */
    int n_keep;
    double top_lp[5];
    int top_id[5];
    int tgt_id[N_TGT];
    double tgt_lp[N_TGT];
    sits_sample_params_t p;
    sits_sample_bias_t bias[64];
    sits_sample_hist_t *hist;
} row_t;

static int g_fail;

static void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz);
    if (!p) {
        fprintf(stderr, "FAIL: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return p;
}

static void mismatch(const char *fmt, double a, double b, int row, int id)
{
    if (g_fail++ < 10) {
        fprintf(stderr, "  mismatch ");
        fprintf(stderr, fmt, row, id, a, b);
        fprintf(stderr, "\n");
    }
}

/* the engine's split of V ids over R ranks: padded to 64, ceil per rank */
static void slice(int V, int R, int r, int *v_start, int *v_count)
{
    int pad = (V + 63) / 64 * 64, per = (pad + R - 1) / R;
    *v_start = r * per;
    int end = *v_start + per > V ? V : *v_start + per;
    *v_count = end > *v_start ? end - *v_start : 0;
}

static double num(const json_t *j) { return json_is_null(j) ? -INFINITY : json_number_value(j); }

static int cmp_i32(const void *a, const void *b) { return (*(const int32_t *)a > *(const int32_t *)b) - (*(const int32_t *)a < *(const int32_t *)b); }

/* one fixture row -> row_t: the request's params as the scheduler builds them (logit_bias, the min_tokens
 * bans of the eos ids, and the history: unique ids with generated counts and prompt presence) */
static void load_row(const json_t *jr, int V, const json_t *eos, row_t *r)
{
    const json_t *params = json_object_get(jr, "params"), *jl = json_object_get(jr, "logits");
    r->logits = xcalloc((size_t)V, sizeof(float));
    r->processed = xcalloc((size_t)V, sizeof(float));
    for (int i = 0; i < V; i++) r->logits[i] = r->processed[i] = (float)num(json_array_get(jl, (size_t)i));
    size_t k;
    json_t *e;
    json_array_foreach(json_object_get(jr, "processed"), k, e)
        r->processed[json_integer_value(json_array_get(e, 0))] = (float)num(json_array_get(e, 1));
    const json_t *keep = json_object_get(jr, "min_p_keep");
    if (keep) {
        r->keep = xcalloc((size_t)V, 1);
        json_array_foreach(keep, k, e) r->keep[json_integer_value(e)] = 1;
        r->n_keep = (int)json_array_size(keep);
    }
    json_array_foreach(json_object_get(jr, "top"), k, e) {
        r->top_id[k] = (int)json_integer_value(json_array_get(e, 0));
        r->top_lp[k] = num(json_array_get(e, 1));
    }
    json_array_foreach(json_object_get(jr, "targets"), k, e) {
        r->tgt_id[k] = (int)json_integer_value(json_array_get(e, 0));
        r->tgt_lp[k] = num(json_array_get(e, 1));
    }
    sits_sample_params_t *p = &r->p;
    const json_t *t = json_object_get(params, "temperature");
    p->temperature = t ? (float)json_number_value(t) : 1.0f;
    p->top_p = 1.0f;
    p->presence_penalty = (float)json_number_value(json_object_get(params, "presence_penalty"));
    p->frequency_penalty = (float)json_number_value(json_object_get(params, "frequency_penalty"));
    p->repetition_penalty = (float)json_number_value(json_object_get(params, "repetition_penalty"));
    p->min_p = (float)json_number_value(json_object_get(params, "min_p"));
    const char *key;
    json_t *val;
    json_object_foreach(json_object_get(params, "logit_bias"), key, val)
        r->bias[p->n_bias++] = (sits_sample_bias_t){ atoi(key), (float)json_number_value(val) };
    const json_t *jp = json_object_get(jr, "prompt"), *jg = json_object_get(jr, "generated");
    int np = (int)json_array_size(jp), ng = (int)json_array_size(jg);
    if (json_integer_value(json_object_get(params, "min_tokens")) > ng)
        json_array_foreach(eos, k, e) r->bias[p->n_bias++] = (sits_sample_bias_t){ (int32_t)json_integer_value(e), -INFINITY };
    p->bias = r->bias;
    int32_t *all = xcalloc((size_t)(np + ng), sizeof *all);
    for (int i = 0; i < np + ng; i++) all[i] = (int32_t)json_integer_value(i < np ? json_array_get(jp, (size_t)i) : json_array_get(jg, (size_t)(i - np)));
    r->hist = xcalloc((size_t)(np + ng), sizeof *r->hist);
    for (int i = 0; i < np + ng; i++) {
        int h = 0;
        while (h < p->n_hist && r->hist[h].id != all[i]) h++;
        if (h == p->n_hist) r->hist[p->n_hist++] = (sits_sample_hist_t){ all[i], 0, 0 };
        if (i < np) r->hist[h].in_prompt = 1;
        else r->hist[h].out_count++;
    }
    qsort(r->hist, (size_t)p->n_hist, sizeof *r->hist, cmp_i32);   /* by id (the first member) */
    p->hist = r->hist;
    free(all);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    sits_comm_t *world = NULL;
    if (sits_comm_mpi_create(MPI_COMM_WORLD, 60.0, &world) != SITS_OK) MPI_Abort(MPI_COMM_WORLD, 1);
    int R = world->size, rank = world->rank;
    const char *top = getenv("top_srcdir");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/logprobs/logit_process.json", top ? top : ".");
    json_error_t jerr;
    json_t *doc = json_load_file(path, 0, &jerr);
    if (!doc) {
        if (rank == 0) printf("SKIP: %s: %s\n", path, jerr.text);
        MPI_Finalize();
        return 77;
    }
    int V = (int)json_integer_value(json_object_get(doc, "vocab"));
    const json_t *jrows = json_object_get(doc, "rows");
    int n = (int)json_array_size(jrows);
    if (n > MAX_ROWS) n = MAX_ROWS;
    row_t rows[MAX_ROWS];
    memset(rows, 0, sizeof rows);
    for (int i = 0; i < n; i++) load_row(json_array_get(jrows, (size_t)i), V, json_object_get(doc, "eos"), &rows[i]);
    int vs, vc;
    slice(V, R, rank, &vs, &vc);
    sits_backend_t *be = NULL;
    sits_backend_params_t bp = { .threads = 1 };
    if (sits_backend_cpu_create(&bp, &be) != SITS_OK) MPI_Abort(MPI_COMM_WORLD, 1);
    const sits_backend_ops_t *op = be->ops;

    /* ---- the controls: N_TGT copies of every row (the logprob part scores one target per copy) ---- */
    int N = n * N_TGT;
    sits_sample_params_t *P = xcalloc((size_t)N, sizeof *P);
    int32_t *tokens = xcalloc((size_t)N, sizeof *tokens);
    float *L = xcalloc((size_t)N * (vc ? vc : 1), sizeof *L);
    for (int i = 0; i < N; i++) {
        const row_t *r = &rows[i / N_TGT];
        int j = i % N_TGT;
        P[i] = r->p;
        P[i].logprobs = 1;
        P[i].top_logprobs = 5;
        /* copies 1, 2 (the last generated id, the controls' argmax): the "sampled" token, its raw logit
         * recovered with logit_pick -- unless min_p cut it (a sampled token never is); the others:
         * the scored id known up front (a prompt row) */
        int sampled = (j == 1 || j == 2) && (!r->keep || r->keep[r->tgt_id[j]]);
        P[i].lp_target = sampled ? -1 : r->tgt_id[j];
        tokens[i] = r->tgt_id[j];
        memcpy(L + (size_t)i * vc, r->logits + vs, sizeof(float) * (size_t)vc);
    }
    sits_logprob_row_t *lrows = xcalloc((size_t)N, sizeof *lrows);
    sits_logprob_rec_t *lrecs = xcalloc((size_t)N, sizeof *lrecs);
    int k = sits_sample_logprob_rows(N, P, lrows);
    if (op->logprob_reduce(be, lrecs, L, vs, vc, lrows, k) != SITS_OK) g_fail++;   /* raw logits, before the controls */

    size_t bound = sits_sample_proc_bound(N, P);
    sits_logit_proc_row_t *prow = xcalloc((size_t)N, sizeof *prow);
    sits_logit_proc_ent_t *ents = xcalloc(bound, sizeof *ents);
    float *raw = xcalloc(bound, sizeof *raw), *rowmax = xcalloc((size_t)N * (R + 1), sizeof *rowmax), *cut = xcalloc((size_t)N, sizeof *cut);
    int min_p = 0;
    size_t m = sits_sample_proc_build(N, P, prow, ents, &min_p);
    if (op->logit_process(be, L, N, vs, vc, prow, ents, raw, NULL, rowmax) != SITS_OK) g_fail++;
    for (int i = 0; i < N; i++) {   /* every id of this shard against HF's processors */
        const row_t *r = &rows[i / N_TGT];
        for (int c = 0; c < vc; c++) {
            float a = L[(size_t)i * vc + c], b = r->processed[vs + c];
            int same = a == b || (isinf(a) && isinf(b) && a == b);
            if (r->processed[vs + c] == r->logits[vs + c] ? memcmp(&a, &b, sizeof a) != 0
                                                          : !(same || fabsf(a - b) <= 1e-5f + 1e-6f * fabsf(b)))
                mismatch("processed row %d id %d: got %.9g HF %.9g", a, b, i / N_TGT, vs + c);
        }
    }
    /* min_p: the maxima of every shard, the threshold, the cut */
    if (!min_p) mismatch("row %d id %d: min_p rows expected (%g %g)", 0, 0, -1, 0);
    if (R > 1) world->ops->allgather(world, rowmax, rowmax + N, sizeof(float) * (size_t)N);
    sits_sample_min_p_cut(N, P, R > 1 ? rowmax + N : rowmax, R, cut);
    if (op->logit_process(be, L, N, vs, vc, NULL, NULL, NULL, cut, NULL) != SITS_OK) g_fail++;
    int kept_bad = 0;
    for (int i = 0; i < N; i += N_TGT) {
        const row_t *r = &rows[i / N_TGT];
        if (!r->keep) continue;
        int kept = 0, all = 0;
        for (int c = 0; c < vc; c++) {
            int got = L[(size_t)i * vc + c] != -INFINITY;
            kept += got;
            if (got != r->keep[vs + c]) {
                mismatch("min_p row %d id %d: kept %g, HF %g", got, r->keep[vs + c], i / N_TGT, vs + c);
                kept_bad++;
            }
        }
        MPI_Allreduce(&kept, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (all != r->n_keep || all == 0 || all == V) mismatch("min_p row %d id %d: %g ids kept over the ranks, HF %g", all, r->n_keep, i / N_TGT, -1);
    }

    /* ---- logprobs: the sampled tokens' raw logits from logit_pick, the records merged over the ranks ---- */
    float *pick = xcalloc((size_t)N, sizeof *pick);
    int32_t *ids = xcalloc((size_t)N, sizeof *ids);
    for (int i = 0; i < N; i++) ids[i] = P[i].lp_target < 0 ? tokens[i] : -1;
    if (op->logit_pick(be, pick, L, N, vs, vc, ids, prow, ents, raw) != SITS_OK) g_fail++;
    for (int j = 0; j < k; j++) {
        int i = lrows[j].row;
        if (lrows[j].target >= 0) continue;
        lrecs[j].has_tgt = !isnan(pick[i]);
        lrecs[j].tgt = lrecs[j].has_tgt ? pick[i] : 0.0f;
    }
    sits_logprob_t *out = xcalloc((size_t)N, sizeof *out);
    if (sits_sample_logprob_merge(world, lrecs, N, P, tokens, out) != SITS_OK) g_fail++;
    double max_err = 0;
    int picked_changed = 0;
    for (int i = 0; i < N; i++) {
        const row_t *r = &rows[i / N_TGT];
        int j = i % N_TGT;
        double e = fabs(out[i].logprob - r->tgt_lp[j]);
        if (e > max_err) max_err = e;
        if (out[i].id != r->tgt_id[j] || !(e <= 1e-5)) mismatch("logprob row %d id %d: got %.9g HF %.9g", out[i].logprob, r->tgt_lp[j], i / N_TGT, r->tgt_id[j]);
        if (P[i].lp_target < 0 && r->processed[r->tgt_id[j]] != r->logits[r->tgt_id[j]]) picked_changed++;
        if (out[i].n_top != 5) mismatch("top row %d id %d: %g alternatives, want %g", out[i].n_top, 5, i / N_TGT, -1);
        for (int t = 0; t < 5 && t < out[i].n_top; t++) {
            double te = fabs(out[i].top_logprob[t] - r->top_lp[t]);
            if (te > max_err) max_err = te;
            if (out[i].top_id[t] != r->top_id[t] || !(te <= 1e-5))
                mismatch("top row %d id %d: got %.9g HF %.9g", out[i].top_logprob[t], r->top_lp[t], i / N_TGT, out[i].top_id[t]);
        }
    }
    /* the check of logit_pick's entry path must have had something to recover */
    if (picked_changed == 0) mismatch("row %d id %d: no sampled target was changed by the controls (%g %g)", 0, 0, -1, 0);
    int fails = 0;
    MPI_Allreduce(&g_fail, &fails, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("%s: %d rows x %d targets on %d rank(s), %zu entries on rank 0's shard [%d, +%d), max logprob err %.2e, "
               "%d sampled targets changed by the controls, %d failures\n",
               fails ? "FAIL" : "ok", n, N_TGT, R, m, vs, vc, max_err, picked_changed, fails);
    for (int i = 0; i < n; i++) {
        free(rows[i].logits);
        free(rows[i].processed);
        free(rows[i].keep);
        free(rows[i].hist);
    }
    free(P); free(tokens); free(L); free(lrows); free(lrecs); free(prow); free(ents); free(raw); free(rowmax); free(cut);
    free(pick); free(ids); free(out);
    json_decref(doc);
    sits_backend_destroy(be);
    sits_comm_destroy(world);
    MPI_Finalize();
    return fails ? 1 : 0;
}
