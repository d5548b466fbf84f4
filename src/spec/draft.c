/* draft.c -- the draft-model drafter (spec.h): a small model on the leader proposes k tokens per
 * sequence greedily, with its own engine and paged KV per sequence, rolled back after each
 * verification to the positions the target accepted.
 *
 * Shapes: a proposal step holds at most the draft engine's max_tokens tokens and max_seqs sequences
 * and outputs; the block table rows of the step are the proposing sequences' own (copied into bt). */
#include "spec/spec.h"
#include "util/log.h"

#include <stdlib.h>
#include <string.h>

struct sits_spec_drafter {
    sits_runner_t *r;
    int max_seqs, mb;
    int32_t *tok, *pos, *seq, *rows;   /* [max_tokens] (rows [max_seqs]) */
    int32_t *bt;                       /* [max_seqs * mb] */
    int32_t *who;                      /* [max_seqs]: the proposal's sequence of each output row */
    int32_t *out;                      /* [max_seqs] sampled */
    sits_sample_params_t *sp;          /* [max_seqs] greedy */
};

sits_status_t sits_spec_drafter_create(sits_runner_t *draft, int max_seqs, sits_spec_drafter_t **d_p)
{
    if (max_seqs < 1 || max_seqs > draft->ep.max_seqs) return SITS_ERR_INVALID;
    sits_spec_drafter_t *d = calloc(1, sizeof *d);
    if (!d) return SITS_ERR_NOMEM;
    int T = draft->ep.max_tokens;
    d->r = draft;
    d->max_seqs = max_seqs;
    d->mb = draft->ep.max_blocks_per_seq;
    d->tok = malloc(sizeof(int32_t) * (size_t)T * 3);
    d->rows = malloc(sizeof(int32_t) * (size_t)max_seqs * 3);
    d->bt = malloc(sizeof(int32_t) * (size_t)max_seqs * d->mb);
    d->sp = calloc((size_t)max_seqs, sizeof *d->sp);
    if (!d->tok || !d->rows || !d->bt || !d->sp) {
        sits_spec_drafter_destroy(d);
        return SITS_ERR_NOMEM;
    }
    d->pos = d->tok + T;
    d->seq = d->pos + T;
    d->who = d->rows + max_seqs;
    d->out = d->who + max_seqs;
    for (int i = 0; i < max_seqs; i++) d->sp[i] = (sits_sample_params_t){ .temperature = 0.0f, .top_p = 1.0f };
    *d_p = d;
    return SITS_OK;
}

void sits_spec_drafter_destroy(sits_spec_drafter_t *d)
{
    if (!d) return;
    free(d->tok);
    free(d->rows);
    free(d->bt);
    free(d->sp);
    free(d);
}

void sits_spec_dseq_reset(sits_spec_drafter_t *d, sits_spec_dseq_t *ds)
{
    if (ds->n_blocks) sits_kv_blocks_release(d->r->blocks, ds->n_blocks, ds->bt);
    ds->n_blocks = 0;
    ds->n_computed = 0;
}

void sits_spec_dseq_rollback(sits_spec_drafter_t *d, sits_spec_dseq_t *ds, int n_valid)
{
    if (ds->n_computed > n_valid) ds->n_computed = n_valid;
    ds->n_blocks = sits_spec_kv_rollback(d->r->blocks, d->r->ep.block_size, ds->n_computed, ds->bt, ds->n_blocks);
}

void sits_spec_dseq_fini(sits_spec_dseq_t *ds)
{
    free(ds->bt);
    ds->bt = NULL;
}

/* ds's table covers `positions` positions: 1, or 0 when its table or the pool has no room. */
static int grow(sits_spec_drafter_t *d, sits_spec_dseq_t *ds, int positions)
{
    int bs = d->r->ep.block_size, need = (positions + bs - 1) / bs;
    if (need > d->mb) return 0;
    if (!ds->bt && !(ds->bt = malloc(sizeof(int32_t) * (size_t)d->mb))) return 0;
    if (need <= ds->n_blocks) return 1;
    if (sits_kv_blocks_alloc(d->r->blocks, need - ds->n_blocks, ds->bt + ds->n_blocks) != SITS_OK) return 0;
    ds->n_blocks = need;
    return 1;
}

/* Runs the queued nt tokens of ns sequences and their no outputs (rows), greedy-sampled into d->out. */
static sits_status_t run(sits_spec_drafter_t *d, int nt, int ns, int no)
{
    sits_batch_t b = { .n_tokens = nt, .tokens = d->tok, .pos = d->pos, .seq = d->seq, .n_seqs = ns, .block_tables = d->bt,
                       .n_out = no, .out_rows = d->rows, .sample = no ? d->sp : NULL };
    if (no == 0) {
        const float *unused;
        return sits_engine_forward(d->r->engine, &b, &unused);   /* waits for the step */
    }
    SITS_CHECK(sits_engine_run(d->r->engine, &b));
    return sits_engine_sample(d->r->engine, d->r->tp, d->sp, d->out);
}

sits_status_t sits_spec_drafter_propose(sits_spec_drafter_t *d, int n, sits_spec_dseq_t *const *ds,
                                        const int32_t *const *tokens, const int *len, const int *k, int32_t *drafts,
                                        int *n_draft_p)
{
    if (n > d->max_seqs) return SITS_ERR_INVALID;
    int kmax = 0, T = d->r->ep.max_tokens;
    for (int i = 0; i < n; i++) {
        n_draft_p[i] = 0;
        if (k[i] < 1) continue;
        if (ds[i]->n_computed > len[i] - 1) sits_spec_dseq_rollback(d, ds[i], len[i] - 1);
        /* positions up to len + k - 2 are computed (the last draft is not fed back) */
        if (!grow(d, ds[i], len[i] + k[i] - 1)) continue;
        n_draft_p[i] = -1;   /* proposing */
        if (k[i] > kmax) kmax = k[i];
    }
    /* catch up: what the draft KV lacks of each sequence, the first draft from its last position */
    for (int busy = 1; busy;) {
        int nt = 0, ns = 0, no = 0;
        busy = 0;
        for (int i = 0; i < n && nt < T; i++) {
            if (n_draft_p[i] != -1 || ds[i]->n_computed >= len[i]) continue;
            int take = len[i] - ds[i]->n_computed < T - nt ? len[i] - ds[i]->n_computed : T - nt;
            for (int j = 0; j < take; j++) {
                d->tok[nt + j] = tokens[i][ds[i]->n_computed + j];
                d->pos[nt + j] = ds[i]->n_computed + j;
                d->seq[nt + j] = ns;
            }
            memcpy(d->bt + (size_t)ns * d->mb, ds[i]->bt, sizeof(int32_t) * (size_t)ds[i]->n_blocks);
            nt += take;
            ds[i]->n_computed += take;
            if (ds[i]->n_computed == len[i]) {
                d->rows[no] = nt - 1;
                d->who[no++] = i;
            }
            ns++;
        }
        if (nt == 0) break;
        for (int i = 0; i < n; i++) busy |= n_draft_p[i] == -1 && ds[i]->n_computed < len[i];
        SITS_CHECK(run(d, nt, ns, no));
        for (int o = 0; o < no; o++) {
            drafts[(size_t)d->who[o] * SITS_SPEC_MAX_K] = d->out[o];
            n_draft_p[d->who[o]] = 1;
        }
    }
    for (int i = 0; i < n; i++) if (n_draft_p[i] < 0) n_draft_p[i] = 0;
    /* then one decode step per further draft, every sequence still wanting one */
    for (int j = 1; j < kmax; j++) {
        int ns = 0;
        for (int i = 0; i < n; i++) {
            if (n_draft_p[i] != j || k[i] <= j) continue;
            d->tok[ns] = drafts[(size_t)i * SITS_SPEC_MAX_K + j - 1];
            d->pos[ns] = len[i] + j - 1;
            d->seq[ns] = ns;
            d->rows[ns] = ns;
            d->who[ns] = i;
            memcpy(d->bt + (size_t)ns * d->mb, ds[i]->bt, sizeof(int32_t) * (size_t)ds[i]->n_blocks);
            ns++;
        }
        if (ns == 0) break;
        SITS_CHECK(run(d, ns, ns, ns));
        for (int o = 0; o < ns; o++) {
            int i = d->who[o];
            drafts[(size_t)i * SITS_SPEC_MAX_K + j] = d->out[o];
            n_draft_p[i] = j + 1;
            ds[i]->n_computed = len[i] + j;
        }
    }
    return SITS_OK;
}
