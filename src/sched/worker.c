/* worker.c -- plan broadcast and execution on every rank; see worker.h. */
#include "sched/worker.h"
#include "backend/backend.h"
#include "sched/kvmove.h"
#include "sched/swap.h"
#include "util/check.h"

#include <stdlib.h>
#include <string.h>

sits_status_t sits_worker_init(sits_worker_t *w, int max_seqs)
{
    w->buf = NULL;
    w->cap = 0;
    w->proc = NULL;
    w->proc_cap = 0;
    w->store = malloc(sizeof *w->store * (size_t)max_seqs);
    w->tokens = malloc(sizeof *w->tokens * (size_t)max_seqs);
    w->lp = calloc((size_t)max_seqs, sizeof *w->lp);
    if (!w->store || !w->tokens || !w->lp) {
        sits_worker_fini(w);
        return SITS_ERR_NOMEM;
    }
    return SITS_OK;
}

void sits_worker_fini(sits_worker_t *w)
{
    free(w->buf);
    free(w->store);
    free(w->tokens);
    free(w->lp);
    free(w->proc);
    w->lp = NULL;
    w->proc = NULL;
    w->proc_cap = 0;
    w->buf = NULL;
    w->store = NULL;
    w->tokens = NULL;
}

static sits_status_t grow(sits_worker_t *w, size_t need)
{
    if (need <= w->cap) return SITS_OK;
    unsigned char *nb = realloc(w->buf, need);
    if (!nb) return SITS_ERR_NOMEM;
    w->buf = nb;
    w->cap = need;
    return SITS_OK;
}

static sits_status_t bcast(sits_comm_t *c, void *buf, size_t n, double timeout_s)
{
    if (c->size == 1) return SITS_OK;
    MPI_Request req;
    SITS_MPI_CHECK(MPI_Ibcast(buf, (int)n, MPI_BYTE, 0, c->mpi, &req));
    return sits_comm_mpi_wait(&req, timeout_s, "step plan broadcast", c->mpi);
}

sits_status_t sits_worker_send(sits_runner_t *r, sits_worker_t *w, const sits_plan_t *plan)
{
    size_t len = 0;
    SITS_CHECK(grow(w, sits_plan_size(plan)));
    SITS_CHECK(sits_plan_write(plan, w->buf, w->cap, &len));
    uint64_t n = len;
    SITS_CHECK(bcast(r->ctl, &n, sizeof n, r->ctl->timeout_s));
    return bcast(r->ctl, w->buf, len, r->ctl->timeout_s);
}

sits_status_t sits_worker_recv(sits_runner_t *r, sits_worker_t *w, int wait_forever, sits_plan_t *plan_p)
{
    uint64_t n = 0;
    SITS_CHECK(bcast(r->ctl, &n, sizeof n, wait_forever ? 0.0 : r->ctl->timeout_s));
    if (n > ((uint64_t)1 << 31)) return SITS_ERR_FORMAT;
    SITS_CHECK(grow(w, (size_t)n));
    SITS_CHECK(bcast(r->ctl, w->buf, (size_t)n, r->ctl->timeout_s));
    return sits_plan_parse(w->buf, (size_t)n, w->store, r->ep.max_seqs, plan_p);
}

/* This rank's raw logits of the step copied into w->proc ([n_out, v_count]). */
static sits_status_t copy_logits(sits_runner_t *r, sits_worker_t *w, const sits_plan_t *plan)
{
    const sits_shard_dims_t *d = &r->w->dims;
    const float *logits = NULL;
    SITS_CHECK(sits_engine_logits(r->engine, &logits));
    size_t n = (size_t)plan->n_out * (size_t)(d->v_count > 0 ? d->v_count : 0);
    if (n > w->proc_cap) {
        float *nb = realloc(w->proc, sizeof(float) * n);
        if (!nb) return SITS_ERR_NOMEM;
        w->proc = nb;
        w->proc_cap = n;
    }
    if (n) memcpy(w->proc, logits, sizeof(float) * n);
    return SITS_OK;
}

/* [sampling controls] on a copy of this rank's logits (logprobs stay those of the raw logits): the
 * [structured output] masks first, then penalties, bias and min_p, then the host sampler. */
static sits_status_t sample_processed(sits_runner_t *r, sits_worker_t *w, const sits_plan_t *plan,
                                      const sits_sample_masks_t *masks)
{
    const sits_shard_dims_t *d = &r->w->dims;
    SITS_CHECK(copy_logits(r, w, plan));
    if (masks && d->v_count > 0)
        sits_backend_cpu_logit_mask(w->proc, d->v_start, d->v_count, masks->masks, masks->words, masks->rows, masks->n);
    SITS_CHECK(sits_sample_process(r->tp, w->proc, plan->n_out, d->v_start, d->v_count, plan->sample));
    return sits_sample(r->tp, w->proc, plan->n_out, d->v_start, d->v_count, plan->sample, w->tokens);
}

sits_status_t sits_worker_exec(sits_runner_t *r, sits_worker_t *w, const sits_plan_t *plan, sits_logits_cb_t cb, void *ctx)
{
    if (plan->cmd == SITS_PLAN_KV_MOVE) return sits_kv_move_run(r, plan, NULL);   /* [kv move] */
    if (plan->cmd == SITS_PLAN_KV_SWAP) return sits_kv_swap_run(r, plan, NULL);   /* [kv offload] */
    if (plan->cmd == SITS_PLAN_KV_COPY) {   /* [n > 1] copy on write; a shadow of a remote replica holds no KV */
        if (plan->n_seqs != plan->n_tokens || plan->n_out != 0) return SITS_ERR_FORMAT;
        return r->engine ? sits_engine_kv_copy_blocks(r->engine, plan->n_tokens, plan->tokens, plan->pos) : SITS_OK;
    }
    if (!r->engine) {
        /* a shadow of a remote replica: its tokens arrive from its last stage */
        if (plan->n_out == 0) return SITS_OK;
        MPI_Request req;
        SITS_MPI_CHECK(MPI_Ibcast(w->tokens, plan->n_out, MPI_INT32_T, r->token_root, r->ctl->mpi, &req));
        return sits_comm_mpi_wait(&req, r->ctl->timeout_s, "sampled tokens broadcast", r->ctl->mpi);
    }
    const sits_shard_dims_t *d = &r->w->dims;
    sits_batch_t b = { .n_tokens = plan->n_tokens, .tokens = plan->tokens, .pos = plan->pos, .seq = plan->seq,
                       .n_seqs = plan->n_seqs, .block_tables = plan->block_tables, .n_out = plan->n_out,
                       .out_rows = plan->out_rows, .sample = plan->n_out > 0 ? plan->sample : NULL };
    /* [perf] enqueue the step; only the sampler's candidates come back unless a callback wants logits */
    SITS_CHECK(sits_engine_run(r->engine, &b));
    if (plan->n_out == 0) return SITS_OK;
    if (d->last_stage) {
        if (cb) {
            const float *logits = NULL;
            SITS_CHECK(sits_engine_logits(r->engine, &logits));
            cb(ctx, (int)plan->step, logits, plan->n_out, d->v_start, d->v_count);
        }
        /* [structured output + sampling controls] order per row: the grammar mask (disallowed ids -inf),
         * then bias / penalties / min_p, then sampling; logprobs stay those of the raw logits. Every TP
         * rank does the same on its vocabulary slice. */
        const sits_sample_masks_t *masks = plan->masks.n > 0 ? &plan->masks : NULL;
        int want_lp = sits_sample_wants_logprobs(plan->n_out, plan->sample);
        const float *raw = NULL;   /* the raw logits for logprobs */
        if (sits_sample_wants_process(plan->n_out, plan->sample)) {
            SITS_CHECK(sample_processed(r, w, plan, masks));   /* on a copy: the engine's logits stay raw */
            if (want_lp) SITS_CHECK(sits_engine_logits(r->engine, &raw));
        } else if (masks && want_lp) {
            SITS_CHECK(copy_logits(r, w, plan));   /* the mask changes the engine's logits */
            SITS_CHECK(sits_engine_sample_masked(r->engine, r->tp, plan->sample, masks, w->tokens));
            raw = w->proc;
        } else {
            SITS_CHECK(sits_engine_sample_masked(r->engine, r->tp, plan->sample, masks, w->tokens));
            if (want_lp) SITS_CHECK(sits_engine_logits(r->engine, &raw));
        }
        if (want_lp)   /* [logprobs] on this rank's vocabulary slice, merged across the TP group */
            SITS_CHECK(sits_sample_logprobs(r->tp, raw, plan->n_out, d->v_start, d->v_count, plan->sample, w->tokens, w->lp));
    }
    if (!r->bcast_tokens) return SITS_OK;
    /* pipeline / remote replica: the last stage's tokens to every rank of ctl (the leader schedules with them) */
    MPI_Request req;
    SITS_MPI_CHECK(MPI_Ibcast(w->tokens, plan->n_out, MPI_INT32_T, r->token_root, r->ctl->mpi, &req));
    return sits_comm_mpi_wait(&req, r->ctl->timeout_s, "sampled tokens broadcast", r->ctl->mpi);
}

sits_status_t sits_worker_follow(sits_runner_t *r, int wait_forever)
{
    sits_worker_t w;
    sits_plan_t plan;
    SITS_CHECK(sits_worker_init(&w, r->ep.max_seqs));
    sits_status_t st;
    for (;;) {
        st = sits_worker_recv(r, &w, wait_forever, &plan);
        if (st != SITS_OK || plan.cmd == SITS_PLAN_STOP) break;
        st = sits_worker_exec(r, &w, &plan, NULL, NULL);
        if (st != SITS_OK) break;
    }
    sits_worker_fini(&w);
    return st;
}
