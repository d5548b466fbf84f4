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
 * The backend's logprob_reduce writes one record per scored row and rank (backend.h: the shard's
 * log-sum-exp in double, the target's raw logit when the shard holds it, its top-N raw logits);
 * merged here: lse = log sum_r exp(lse_r), logprob = logit - lse. */

int sits_sample_wants_logprobs(int n, const sits_sample_params_t *params)
{
    for (int i = 0; i < n; i++) if (params[i].logprobs) return 1;
    return 0;
}

static int clamp_top(int t) { return t < 0 ? 0 : t > SITS_LOGPROB_MAX_TOP ? SITS_LOGPROB_MAX_TOP : t; }

int sits_sample_logprob_rows(int n, const sits_sample_params_t *params, sits_logprob_row_t *rows_p)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (!params[i].logprobs) continue;
        rows_p[k++] = (sits_logprob_row_t){ .row = i, .target = params[i].lp_target >= 0 ? params[i].lp_target : -1,
                                            .top = clamp_top(params[i].top_logprobs) };
    }
    return k;
}

sits_status_t sits_sample_logprob_merge(sits_comm_t *comm, const sits_logprob_rec_t *mine, int n,
                                        const sits_sample_params_t *params, const int32_t *tokens, sits_logprob_t *out_p)
{
    int R = comm->size, k = 0;
    for (int i = 0; i < n; i++) if (params[i].logprobs) k++;
    if (k == 0) return SITS_OK;
    sits_logprob_rec_t *gathered = NULL;
    const sits_logprob_rec_t *all = mine;
    sits_sample_cand_t *merged = malloc(sizeof *merged * SITS_LOGPROB_MAX_TOP * (size_t)R);
    sits_status_t st = SITS_OK;
    if (!merged) return SITS_ERR_NOMEM;
    if (R > 1) {
        gathered = malloc(sizeof *gathered * (size_t)k * (size_t)R);
        if (!gathered) { st = SITS_ERR_NOMEM; goto out; }
        st = comm->ops->allgather(comm, mine, gathered, sizeof *mine * (size_t)k);
        if (st != SITS_OK) goto out;
        all = gathered;
    }
    for (int i = 0, j = -1; i < n; i++) {
        const sits_sample_params_t *p = &params[i];
        if (!p->logprobs) continue;
        j++;   /* this row's record index */
        double lmax = -INFINITY, lsum = 0;
        float tgt = -INFINITY;
        int m = 0;
        for (int r = 0; r < R; r++) {
            const sits_logprob_rec_t *h = &all[(size_t)r * k + j];
            if (h->lse > lmax) { lsum = lsum * exp(lmax - h->lse) + 1; lmax = h->lse; }
            else if (h->lse > -INFINITY) lsum += exp(h->lse - lmax);
            if (h->has_tgt) tgt = h->tgt;
            int hn = h->n < 0 ? 0 : h->n > SITS_LOGPROB_MAX_TOP ? SITS_LOGPROB_MAX_TOP : h->n;
            memcpy(merged + m, h->top, sizeof *merged * (size_t)hn);
            m += hn;
        }
        qsort(merged, (size_t)m, sizeof *merged, cand_cmp);
        double lse = lmax + log(lsum);
        sits_logprob_t *o = &out_p[i];
        int top = clamp_top(p->top_logprobs);
        o->id = p->lp_target >= 0 ? p->lp_target : tokens[i];
        o->logprob = (float)((double)tgt - lse);
        o->n_top = top < m ? top : m;
        for (int t = 0; t < o->n_top; t++) {
            o->top_id[t] = merged[t].id;
            o->top_logprob[t] = (float)((double)merged[t].logit - lse);
        }
    }
out:
    free(gathered);
    free(merged);
    return st;
}

/* ---- [sampling controls] ---------------------------------------------------------------------- */

static int has_penalty(const sits_sample_params_t *p)
{
    return p->presence_penalty != 0 || p->frequency_penalty != 0 || (p->repetition_penalty > 0 && p->repetition_penalty != 1.0f);
}

static int has_min_p(const sits_sample_params_t *p) { return p->min_p > 0 && !greedy(p); }

static int has_process(const sits_sample_params_t *p) { return p->n_bias > 0 || has_penalty(p) || has_min_p(p); }

int sits_sample_wants_process(int n, const sits_sample_params_t *params)
{
    for (int i = 0; i < n; i++) if (has_process(&params[i])) return 1;
    return 0;
}

size_t sits_sample_proc_bound(int n, const sits_sample_params_t *params)
{
    size_t m = 0;
    for (int i = 0; i < n; i++)
        if (has_process(&params[i])) m += (size_t)(params[i].n_bias > 0 ? params[i].n_bias : 0) +
                                            (size_t)(has_penalty(&params[i]) && params[i].n_hist > 0 ? params[i].n_hist : 0);
    return m;
}

static int ent_cmp(const void *a_, const void *b_)
{
    const sits_logit_proc_ent_t *a = a_, *b = b_;
    return (a->id > b->id) - (a->id < b->id);
}

size_t sits_sample_proc_build(int n, const sits_sample_params_t *params, sits_logit_proc_row_t *rows_p,
                              sits_logit_proc_ent_t *ents_p, int *min_p_p)
{
    size_t m = 0;
    int min_p = 0;
    for (int i = 0; i < n; i++) {
        const sits_sample_params_t *p = &params[i];
        sits_logit_proc_row_t *r = &rows_p[i];
        memset(r, 0, sizeof *r);
        r->ent0 = (int32_t)m;
        if (!has_process(p)) continue;
        if (has_min_p(p)) min_p = 1;
        int pen = has_penalty(p);
        r->presence = p->presence_penalty;
        r->frequency = p->frequency_penalty;
        r->repetition = p->repetition_penalty > 0 && p->repetition_penalty != 1.0f ? p->repetition_penalty : 1.0f;
        sits_logit_proc_ent_t *e = ents_p + m;
        size_t k = 0;
        for (int b = 0; b < p->n_bias; b++)
            e[k++] = (sits_logit_proc_ent_t){ p->bias[b].id, p->bias[b].bias == -INFINITY ? 0.0f : p->bias[b].bias, 0,
                                              p->bias[b].bias == -INFINITY ? SITS_PROC_BAN : 0 };
        for (int h = 0; pen && h < p->n_hist; h++)
            e[k++] = (sits_logit_proc_ent_t){ p->hist[h].id, 0.0f, p->hist[h].out_count,
                                              p->hist[h].in_prompt ? SITS_PROC_PROMPT : 0 };
        qsort(e, k, sizeof *e, ent_cmp);
        /* one entry per id: biases add up (the server's logit_bias has unique ids; a min_tokens ban of
         * the same id makes it -inf either way), the history's counts and prompt flag carried over */
        size_t u = 0;
        for (size_t j = 0; j < k; j++) {
            if (u > 0 && e[u - 1].id == e[j].id) {
                e[u - 1].bias += e[j].bias;
                e[u - 1].out_count += e[j].out_count;
                e[u - 1].flags |= e[j].flags;
            } else {
                e[u++] = e[j];
            }
        }
        r->n_ent = (int32_t)u;
        m += u;
    }
    *min_p_p = min_p;
    return m;
}

void sits_sample_min_p_cut(int n, const sits_sample_params_t *params, const float *rowmax, int R, float *cut_p)
{
    for (int i = 0; i < n; i++) {
        const sits_sample_params_t *p = &params[i];
        cut_p[i] = -INFINITY;
        if (!has_min_p(p)) continue;
        float m = -INFINITY;
        for (int r = 0; r < R; r++) if (rowmax[(size_t)r * n + i] > m) m = rowmax[(size_t)r * n + i];
        /* p_i >= min_p * p_max  <=>  l_i >= l_max + T * log(min_p), l_max over the whole vocabulary */
        cut_p[i] = m + p->temperature * logf(p->min_p);
    }
}
