/* sample.c -- distributed sampling; see sample.h for the method. */
#include "engine/sample.h"
#include "util/log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Beyond this many candidates per rank, top-p without top-k gathers the full local slice. */
#define SITS_TOPP_CANDIDATES 256

typedef struct {
    float logit;   /* raw logit (candidates) or perturbed score (best) */
    int32_t id;
} cand_t;

/* Per sequence per rank: header then C candidates. */
typedef struct {
    float lse;        /* log sum exp(l / T) over the local slice; only for top-p without top-k (else -inf) */
    int32_t n;        /* valid candidates */
    cand_t best;      /* argmax of l / T + g over the local slice (untruncated sampling / greedy) */
} cand_hdr_t;

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double sits_sample_uniform(uint64_t seed, uint64_t step, int64_t id)
{
    uint64_t h = mix64(seed + 0x9e3779b97f4a7c15ull);
    h = mix64(h ^ (step * 0xd1b54a32d192ed03ull + 0x632be59bd9b4e019ull));
    h = mix64(h ^ ((uint64_t)id * 0x8cb92ba72f3d8dd7ull + 0x9e3779b97f4a7c15ull));
    return ((double)(h >> 11) + 0.5) * (1.0 / 9007199254740992.0); /* (0, 1) */
}

static float gumbel(uint64_t seed, uint64_t step, int64_t id)
{
    return (float)-log(-log(sits_sample_uniform(seed, step, id)));
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

/* Local top-c of a row by (logit desc, id asc) with a small sorted insertion buffer. */
static int local_topc(const float *row, int v_start, int v_count, int c, cand_t *out)
{
    int m = 0;
    for (int i = 0; i < v_count; i++) {
        cand_t x = { row[i], v_start + i };
        if (m == c && cand_cmp(&x, &out[m - 1]) >= 0) continue;
        int j = m < c ? m++ : c - 1;
        while (j > 0 && cand_cmp(&x, &out[j - 1]) < 0) { out[j] = out[j - 1]; j--; }
        out[j] = x;
    }
    return m;
}

sits_status_t sits_sample(sits_comm_t *comm, const float *logits, int n, int v_start, int v_count,
                          const sits_sample_params_t *params, int32_t *tokens_p)
{
    int R = comm->size;
    int c = 1, need_full = 0;
    for (int s = 0; s < n; s++) {
        if (!truncated(&params[s])) continue;
        if (params[s].top_k > 0) { if (params[s].top_k > c) c = params[s].top_k; }
        else if (SITS_TOPP_CANDIDATES > c) c = SITS_TOPP_CANDIDATES;
    }
    /* every rank knows every rank's v_count only through the gather; agree on c first (max). */
    int32_t c_all = c;
    if (R > 1) {
        int32_t *cs = malloc(sizeof(int32_t) * (size_t)R);
        if (!cs) return SITS_ERR_NOMEM;
        sits_status_t st = comm->ops->allgather(comm, &c_all, cs, sizeof(int32_t));
        if (st != SITS_OK) { free(cs); return st; }
        for (int r = 0; r < R; r++) if (cs[r] > c_all) c_all = cs[r];
        free(cs);
    }
    c = c_all;
again:;
    size_t rec = sizeof(cand_hdr_t) + sizeof(cand_t) * (size_t)c;   /* one sequence's record */
    size_t bytes = rec * (size_t)n;                                  /* one rank's contribution */
    unsigned char *mine = calloc(1, bytes), *all = malloc(bytes * (size_t)R);
    cand_t *merged = malloc(sizeof(cand_t) * (size_t)c * R);
    if (!mine || !all || !merged) { free(mine); free(all); free(merged); return SITS_ERR_NOMEM; }
    for (int s = 0; s < n; s++) {
        const sits_sample_params_t *p = &params[s];
        const float *row = logits + (size_t)s * v_count;
        cand_hdr_t *h = (cand_hdr_t *)(mine + rec * s);
        cand_t *cd = (cand_t *)(h + 1);
        h->best.logit = -INFINITY;
        h->best.id = -1;
        h->lse = -INFINITY;
        if (greedy(p)) {
            /* argmax, lowest id on ties */
            for (int i = 0; i < v_count; i++)
                if (row[i] > h->best.logit) { h->best.logit = row[i]; h->best.id = v_start + i; }
        } else if (!truncated(p)) {
            /* Gumbel-max over the whole slice */
            float inv_t = 1.0f / p->temperature;
            for (int i = 0; i < v_count; i++) {
                float score = row[i] * inv_t + gumbel(p->seed, p->step, v_start + i);
                if (score > h->best.logit) { h->best.logit = score; h->best.id = v_start + i; }
            }
        } else if (p->top_p < 1.0f && p->top_k <= 0 && v_count > 0) {
            /* the nucleus is measured against the whole vocabulary: this slice's log-sum-exp */
            double inv_t = 1.0 / p->temperature, mx = -INFINITY, sum = 0;
            for (int i = 0; i < v_count; i++) if (row[i] * inv_t > mx) mx = row[i] * inv_t;
            for (int i = 0; i < v_count; i++) sum += exp(row[i] * inv_t - mx);
            h->lse = (float)(mx + log(sum));
        }
        h->n = truncated(p) ? local_topc(row, v_start, v_count, c, cd) : 0;
    }
    sits_status_t st = R > 1 ? comm->ops->allgather(comm, mine, all, bytes) : SITS_OK;
    if (R == 1) memcpy(all, mine, bytes);
    if (st != SITS_OK) goto out;
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
            memcpy(merged + m, h + 1, sizeof(cand_t) * (size_t)h->n);
            m += h->n;
            if (h->n == c) full_local = 0;   /* this rank may hold more than it sent */
            if (h->lse > lmax) { lsum = lsum * exp(lmax - h->lse) + 1; lmax = h->lse; }
            else if (h->lse > -INFINITY) lsum += exp(h->lse - lmax);
        }
        qsort(merged, (size_t)m, sizeof(cand_t), cand_cmp);
        float inv_t = 1.0f / p->temperature;
        int keep = m;
        if (p->top_k > 0 && p->top_k < keep) keep = p->top_k;
        if (p->top_p < 1.0f) {
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
    free(mine);
    free(all);
    free(merged);
    if (st == SITS_OK && need_full) {
        /* every rank reached the same decision from the same gathered data */
        int32_t vmax = v_count, *vs = malloc(sizeof(int32_t) * (size_t)R);
        if (!vs) return SITS_ERR_NOMEM;
        st = R > 1 ? comm->ops->allgather(comm, &vmax, vs, sizeof(int32_t)) : SITS_OK;
        if (R == 1) vs[0] = vmax;
        for (int r = 0; r < R; r++) if (vs[r] > vmax) vmax = vs[r];
        free(vs);
        if (st != SITS_OK) return st;
        if (c < vmax + 1) {
            c = vmax + 1;  /* more than any rank holds: every record is then complete */
            need_full = 0;
            goto again;
        }
    }
    return st;
}
