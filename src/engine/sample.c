/* sample.c -- distributed sampling; see sample.h for the method.
 * The per-rank reduction is sits_backend_cpu_sample_reduce (src/backend/cpu.c) on the host path
 * and the backend's sample_reduce on the engine's device path: both write the records of
 * backend.h, which this file gathers and merges. */
#include "engine/sample.h"
#include "util/log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Beyond this many candidates per rank, top-p without top-k gathers the full local slice. */
#define SITS_TOPP_CANDIDATES 256

typedef sits_sample_cand_t cand_t;
typedef sits_sample_rec_t cand_hdr_t;

double sits_sample_uniform(uint64_t seed, uint64_t step, int64_t id)
{
    return sits_backend_sample_uniform(seed, step, id);
}

static float gumbel(uint64_t seed, uint64_t step, int64_t id)
{
    return (float)-log(-log(sits_backend_sample_uniform(seed, step, id)));
}

static int greedy(const sits_sample_params_t *p) { return p->temperature <= 0.0f || p->top_k == 1; }
static int truncated(const sits_sample_params_t *p) { return !greedy(p) && (p->top_k > 0 || p->top_p < 1.0f); }

/* a before b: higher logit, then lower id */
static int cand_cmp(const void *a_, const void *b_)
{
    const cand_t *a = a_, *b = b_;
    if (a->logit != b->logit) return a->logit > b->logit ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

int sits_sample_cands(int n, const sits_sample_params_t *params)
{
    int c = 1;
    for (int s = 0; s < n; s++) {
        if (!truncated(&params[s])) continue;
        if (params[s].top_k > 0) { if (params[s].top_k > c) c = params[s].top_k; }
        else if (SITS_TOPP_CANDIDATES > c) c = SITS_TOPP_CANDIDATES;
    }
    return c;
}

void sits_sample_rows(int n, const sits_sample_params_t *params, sits_sample_row_t *rows_p)
{
    for (int s = 0; s < n; s++) {
        const sits_sample_params_t *p = &params[s];
        sits_sample_row_t *r = &rows_p[s];
        memset(r, 0, sizeof *r);
        r->temperature = p->temperature;
        r->inv_temp = greedy(p) ? 0.0f : 1.0f / p->temperature;
        r->seed = p->seed;
        r->step = p->step;
        if (greedy(p)) r->mode = SITS_SAMPLE_GREEDY;
        else if (!truncated(p)) r->mode = SITS_SAMPLE_GUMBEL;
        else if (p->top_p < 1.0f && p->top_k <= 0) r->mode = SITS_SAMPLE_TOPC_LSE;
        else r->mode = SITS_SAMPLE_TOPC;
    }
}

sits_status_t sits_sample_merge(sits_comm_t *comm, const void *mine, int n, int c, const sits_sample_params_t *params,
                                int32_t *tokens_p, int *need_full_p)
{
    int R = comm->size, need_full = 0;
    size_t rec = SITS_SAMPLE_REC_BYTES(c);  /* one sequence's record */
    size_t bytes = rec * (size_t)n;         /* one rank's contribution */
    const unsigned char *all = mine;
    unsigned char *gathered = NULL;
    cand_t *merged = malloc(sizeof(cand_t) * (size_t)c * R);
    sits_status_t st = SITS_OK;
    if (!merged) return SITS_ERR_NOMEM;
    if (R > 1) {
        gathered = malloc(bytes * (size_t)R);
        if (!gathered) { st = SITS_ERR_NOMEM; goto out; }
        st = comm->ops->allgather(comm, mine, gathered, bytes);
        if (st != SITS_OK) goto out;
        all = gathered;
    }
    for (int s = 0; s < n; s++) {
        const sits_sample_params_t *p = &params[s];
        if (!truncated(p)) {
            cand_t best = { -INFINITY, -1 };
            for (int r = 0; r < R; r++) {
                const cand_hdr_t *h = (const cand_hdr_t *)(all + bytes * r + rec * s);
                if (h->best.id >= 0 && (best.id < 0 || h->best.logit > best.logit ||
                                        (h->best.logit == best.logit && h->best.id < best.id)))
                    best = h->best;
            }
            tokens_p[s] = best.id;
            continue;
        }
        int m = 0, full_local = 1;
        double lmax = -INFINITY, lsum = 0;
        for (int r = 0; r < R; r++) {
            const cand_hdr_t *h = (const cand_hdr_t *)(all + bytes * r + rec * s);
            int hn = h->n < 0 ? 0 : h->n > c ? c : h->n;
            memcpy(merged + m, h + 1, sizeof(cand_t) * (size_t)hn);
            m += hn;
            if (hn == c) full_local = 0;   /* this rank may hold more than it sent */
            if (h->lse > lmax) { lsum = lsum * exp(lmax - h->lse) + 1; lmax = h->lse; }
            else if (h->lse > -INFINITY) lsum += exp(h->lse - lmax);
        }
        qsort(merged, (size_t)m, sizeof(cand_t), cand_cmp);
        float inv_t = 1.0f / p->temperature;
        int keep = m;
        if (p->top_k > 0 && p->top_k < keep) keep = p->top_k;
        if (p->top_p < 1.0f && keep > 0) {
            /* normaliser: over the top-k set when top-k is on (HF filters in that order), else the whole vocabulary */
            double z;
            if (p->top_k > 0) {
                double zm = merged[0].logit * inv_t, zs = 0;
                for (int i = 0; i < keep; i++) zs += exp(merged[i].logit * inv_t - zm);
                z = zm + log(zs);
            } else {
                z = lmax + log(lsum);
            }
            double cum = 0;
            int i = 0;
            for (; i < keep; i++) {
                cum += exp(merged[i].logit * inv_t - z);
                if (cum >= p->top_p) { i++; break; }
            }
            if (cum < p->top_p && p->top_k <= 0 && !full_local) {
                /* the nucleus reaches past the candidates some rank sent: gather whole slices */
                need_full = 1;
            }
            keep = i > 0 ? i : 1;
        }
        cand_t best = { -INFINITY, -1 };
        for (int i = 0; i < keep; i++) {
            float score = merged[i].logit * inv_t + gumbel(p->seed, p->step, merged[i].id);
            if (best.id < 0 || score > best.logit || (score == best.logit && merged[i].id < best.id)) {
                best.logit = score;
                best.id = merged[i].id;
            }
        }
        tokens_p[s] = best.id;
    }
out:
    free(gathered);
    free(merged);
    if (st == SITS_OK) *need_full_p = need_full;
    return st;
}

sits_status_t sits_sample(sits_comm_t *comm, const float *logits, int n, int v_start, int v_count,
                          const sits_sample_params_t *params, int32_t *tokens_p)
{
    int R = comm->size;
    int c = sits_sample_cands(n, params);
    /* agree on c (the max) in case a caller's parameters differ between ranks: the records must be
     * the same size everywhere for the all-gather. */
    if (R > 1) {
        int32_t c_all = c, *cs = malloc(sizeof(int32_t) * (size_t)R);
        if (!cs) return SITS_ERR_NOMEM;
        sits_status_t st = comm->ops->allgather(comm, &c_all, cs, sizeof(int32_t));
        if (st != SITS_OK) { free(cs); return st; }
        for (int r = 0; r < R; r++) if (cs[r] > c_all) c_all = cs[r];
        free(cs);
        c = c_all;
    }
    sits_sample_row_t *rows = malloc(sizeof *rows * (size_t)(n > 0 ? n : 1));
    if (!rows) return SITS_ERR_NOMEM;
    sits_sample_rows(n, params, rows);
    sits_status_t st = SITS_OK;
    for (;;) {
        unsigned char *mine = calloc(1, SITS_SAMPLE_REC_BYTES(c) * (size_t)(n > 0 ? n : 1));
        if (!mine) { st = SITS_ERR_NOMEM; break; }
        sits_backend_cpu_sample_reduce(mine, logits, n, v_start, v_count, rows, c);
        int need_full = 0;
        st = sits_sample_merge(comm, mine, n, c, params, tokens_p, &need_full);
        free(mine);
        if (st != SITS_OK || !need_full) break;
        /* every rank reached the same decision from the same gathered data: resend whole slices */
        int32_t vmax = v_count, *vs = malloc(sizeof(int32_t) * (size_t)R);
        if (!vs) { st = SITS_ERR_NOMEM; break; }
        st = R > 1 ? comm->ops->allgather(comm, &vmax, vs, sizeof(int32_t)) : SITS_OK;
        if (R == 1) vs[0] = vmax;
        for (int r = 0; st == SITS_OK && r < R; r++) if (vs[r] > vmax) vmax = vs[r];
        free(vs);
        if (st != SITS_OK) break;
        if (c >= vmax + 1) break; /* records were complete already (cannot happen: full_local) */
        c = vmax + 1;             /* more than any rank holds: every record is then complete */
    }
    free(rows);
    return st;
}

/* ---- [logprobs] ---------------------------------------------------------------------------------
 * Per row and rank, a record: the slice's log-sum-exp (double), the target's raw logit when the slice
 * holds it, and the slice's top-N raw logits (cand_cmp order). Merged: lse = log sum_r exp(lse_r),
 * logprob = logit - lse. */
typedef struct {
    double lse;                          /* -inf: empty slice */
    float tgt;
    int32_t has_tgt, n, pad;
    cand_t top[SITS_LOGPROB_MAX_TOP];
} lp_rec_t;

int sits_sample_wants_logprobs(int n, const sits_sample_params_t *params)
{
    for (int i = 0; i < n; i++) if (params[i].logprobs) return 1;
    return 0;
}

/* row: [v_count] logits of ids [v_start, ...) */
static void lp_reduce(const float *row, int v_start, int v_count, int32_t target, int k, lp_rec_t *r)
{
    memset(r, 0, sizeof *r);
    r->lse = -INFINITY;
    if (v_count <= 0) return;
    float m = row[0];
    for (int j = 1; j < v_count; j++) if (row[j] > m) m = row[j];
    double s = 0;
    for (int j = 0; j < v_count; j++) s += exp((double)row[j] - m);
    r->lse = m + log(s);
    if (target >= v_start && target < v_start + v_count) {
        r->tgt = row[target - v_start];
        r->has_tgt = 1;
    }
    /* top-k by insertion into a sorted array: k <= 20, most ids fail the first comparison */
    int n = 0;
    for (int j = 0; j < v_count && k > 0; j++) {
        cand_t c = { row[j], v_start + j };
        if (n == k && cand_cmp(&c, &r->top[n - 1]) >= 0) continue;
        int i = n < k ? n++ : n - 1;
        while (i > 0 && cand_cmp(&c, &r->top[i - 1]) < 0) { r->top[i] = r->top[i - 1]; i--; }
        r->top[i] = c;
    }
    r->n = n;
}

sits_status_t sits_sample_logprobs(sits_comm_t *comm, const float *logits, int n, int v_start, int v_count,
                                   const sits_sample_params_t *params, const int32_t *tokens, sits_logprob_t *out_p)
{
    int R = comm->size, k = 0;
    for (int i = 0; i < n; i++) if (params[i].logprobs) k++;
    if (k == 0) return SITS_OK;
    lp_rec_t *mine = calloc((size_t)k * (size_t)(R + 1), sizeof *mine), *all = mine + k;
    cand_t *merged = malloc(sizeof(cand_t) * SITS_LOGPROB_MAX_TOP * (size_t)R);
    sits_status_t st = SITS_OK;
    if (!mine || !merged) { st = SITS_ERR_NOMEM; goto out; }
    for (int i = 0, j = 0; i < n; i++) {
        const sits_sample_params_t *p = &params[i];
        if (!p->logprobs) continue;
        int top = p->top_logprobs < 0 ? 0 : p->top_logprobs > SITS_LOGPROB_MAX_TOP ? SITS_LOGPROB_MAX_TOP : p->top_logprobs;
        lp_reduce(logits + (size_t)i * (v_count > 0 ? v_count : 0), v_start, v_count,
                  p->lp_target >= 0 ? p->lp_target : tokens[i], top, &mine[j++]);
    }
    if (R > 1) st = comm->ops->allgather(comm, mine, all, sizeof *mine * (size_t)k);
    else memcpy(all, mine, sizeof *mine * (size_t)k);
    if (st != SITS_OK) goto out;
    for (int i = 0, j = -1; i < n; i++) {
        const sits_sample_params_t *p = &params[i];
        if (!p->logprobs) continue;
        j++;   /* this row's record index */
        double lmax = -INFINITY, lsum = 0;
        float tgt = -INFINITY;
        int m = 0;
        for (int r = 0; r < R; r++) {
            const lp_rec_t *h = &all[(size_t)r * k + j];
            if (h->lse > lmax) { lsum = lsum * exp(lmax - h->lse) + 1; lmax = h->lse; }
            else if (h->lse > -INFINITY) lsum += exp(h->lse - lmax);
            if (h->has_tgt) tgt = h->tgt;
            int hn = h->n < 0 ? 0 : h->n > SITS_LOGPROB_MAX_TOP ? SITS_LOGPROB_MAX_TOP : h->n;
            memcpy(merged + m, h->top, sizeof(cand_t) * (size_t)hn);
            m += hn;
        }
        qsort(merged, (size_t)m, sizeof(cand_t), cand_cmp);
        double lse = lmax + log(lsum);
        sits_logprob_t *o = &out_p[i];
        int top = p->top_logprobs < 0 ? 0 : p->top_logprobs > SITS_LOGPROB_MAX_TOP ? SITS_LOGPROB_MAX_TOP : p->top_logprobs;
        o->id = p->lp_target >= 0 ? p->lp_target : tokens[i];
        o->logprob = (float)((double)tgt - lse);
        o->n_top = top < m ? top : m;
        for (int t = 0; t < o->n_top; t++) {
            o->top_id[t] = merged[t].id;
            o->top_logprob[t] = (float)((double)merged[t].logit - lse);
        }
    }
out:
    free(mine);
    free(merged);
    return st;
}

/* ---- [sampling controls] ---------------------------------------------------------------------- */

static int has_process(const sits_sample_params_t *p)
{
    return p->n_bias > 0 || p->presence_penalty != 0 || p->frequency_penalty != 0 ||
           (p->repetition_penalty > 0 && p->repetition_penalty != 1.0f) || (p->min_p > 0 && !greedy(p));
}

int sits_sample_wants_process(int n, const sits_sample_params_t *params)
{
    for (int i = 0; i < n; i++) if (has_process(&params[i])) return 1;
    return 0;
}

sits_status_t sits_sample_process(sits_comm_t *comm, float *logits, int n, int v_start, int v_count,
                                  const sits_sample_params_t *params)
{
    int R = comm->size, need_min_p = 0;
    for (int i = 0; i < n; i++) {
        const sits_sample_params_t *p = &params[i];
        float *row = logits + (size_t)i * (v_count > 0 ? v_count : 0);
        for (int b = 0; b < p->n_bias; b++) {
            int32_t id = p->bias[b].id - v_start;
            if (id >= 0 && id < v_count) row[id] = p->bias[b].bias == -INFINITY ? -INFINITY : row[id] + p->bias[b].bias;
        }
        int rep = p->repetition_penalty > 0 && p->repetition_penalty != 1.0f;
        for (int h = 0; h < p->n_hist; h++) {
            const sits_sample_hist_t *t = &p->hist[h];
            int32_t id = t->id - v_start;
            if (id < 0 || id >= v_count) continue;
            float l = row[id];
            if (rep && (t->in_prompt || t->out_count > 0))
                l = l > 0 ? l / p->repetition_penalty : l * p->repetition_penalty;
            if (t->out_count > 0) l -= p->frequency_penalty * (float)t->out_count + p->presence_penalty;
            row[id] = l;
        }
        if (p->min_p > 0 && !greedy(p)) need_min_p = 1;
    }
    if (!need_min_p) return SITS_OK;
    /* min_p: p_i >= min_p * p_max  <=>  l_i >= l_max + T * log(min_p), l_max over the whole vocabulary */
    float *mx = malloc(sizeof(float) * (size_t)n * (size_t)(R + 1)), *all = mx + n;
    if (!mx) return SITS_ERR_NOMEM;
    for (int i = 0; i < n; i++) {
        const float *row = logits + (size_t)i * (v_count > 0 ? v_count : 0);
        float m = -INFINITY;
        for (int j = 0; j < v_count; j++) if (row[j] > m) m = row[j];
        mx[i] = m;
    }
    sits_status_t st = R > 1 ? comm->ops->allgather(comm, mx, all, sizeof(float) * (size_t)n) : SITS_OK;
    if (R == 1) memcpy(all, mx, sizeof(float) * (size_t)n);
    for (int i = 0; st == SITS_OK && i < n; i++) {
        const sits_sample_params_t *p = &params[i];
        if (!(p->min_p > 0 && !greedy(p))) continue;
        float m = -INFINITY;
        for (int r = 0; r < R; r++) if (all[(size_t)r * n + i] > m) m = all[(size_t)r * n + i];
        float cut = m + p->temperature * logf(p->min_p);
        float *row = logits + (size_t)i * (v_count > 0 ? v_count : 0);
        for (int j = 0; j < v_count; j++) if (row[j] < cut) row[j] = -INFINITY;
    }
    free(mx);
    return st;
}
