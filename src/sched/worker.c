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
    *w = (sits_worker_t){ 0 };
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
    free(w->mbuf);
    w->mbuf = NULL;
    w->mcap = 0;
    w->lp = NULL;
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

/* Pipeline / remote replica: the last stage's sampled tokens and, when some row asked, [logprobs] the
 * rows' log-probabilities (computed where the logits are) to every rank of ctl -- the leader schedules
 * and answers with them. */
static sits_status_t bcast_results(sits_runner_t *r, sits_worker_t *w, const sits_plan_t *plan)
{
    MPI_Request req;
    SITS_MPI_CHECK(MPI_Ibcast(w->tokens, plan->n_out, MPI_INT32_T, r->token_root, r->ctl->mpi, &req));
    SITS_CHECK(sits_comm_mpi_wait(&req, r->ctl->timeout_s, "sampled tokens broadcast", r->ctl->mpi));
    if (!sits_sample_wants_logprobs(plan->n_out, plan->sample)) return SITS_OK;
    SITS_MPI_CHECK(MPI_Ibcast(w->lp, (int)(sizeof *w->lp * (size_t)plan->n_out), MPI_BYTE, r->token_root, r->ctl->mpi, &req));
    return sits_comm_mpi_wait(&req, r->ctl->timeout_s, "logprobs broadcast", r->ctl->mpi);
}

/* [structured output] a plan's masks that follow it: made by the leader (w->make_masks) while the device
 * runs the forward pass, broadcast over ctl; *m_p: the plan's masks with them */
static sits_status_t follow_masks(sits_runner_t *r, sits_worker_t *w, const sits_plan_t *plan, sits_sample_masks_t *m_p)
{
    sits_plan_t p = *plan;
    size_t n = sits_plan_masks_size(&p);
    if (n > w->mcap) {
        unsigned char *nb = realloc(w->mbuf, n);
        if (!nb) return SITS_ERR_NOMEM;
        w->mbuf = nb;
        w->mcap = n;
    }
    if (w->make_masks) {
        const uint32_t *masks;
        SITS_CHECK(w->make_masks(w->masks_ctx, &masks));
        if (r->ctl->size == 1) {   /* alone: no copy, no checksum */
            *m_p = (sits_sample_masks_t){ .n = p.masks.n, .words = p.masks.words, .rows = p.masks.rows, .masks = masks };
            return SITS_OK;
        }
        sits_plan_masks_write(&p, masks, w->mbuf);
    }
    MPI_Request req;
    SITS_MPI_CHECK(MPI_Ibcast(w->mbuf, (int)n, MPI_BYTE, 0, r->ctl->mpi, &req));
    SITS_CHECK(sits_comm_mpi_wait(&req, r->ctl->timeout_s, "grammar masks broadcast", r->ctl->mpi));
    SITS_CHECK(sits_plan_masks_parse(&p, w->mbuf, n));
    *m_p = p.masks;
    return SITS_OK;
}

sits_status_t sits_worker_exec(sits_runner_t *r, sits_worker_t *w, const sits_plan_t *plan, sits_logits_cb_t cb, void *ctx)
{
    if (plan->cmd == SITS_PLAN_KV_MOVE) return sits_kv_move_run(r, plan, NULL);   /* [kv move] */
    if (plan->cmd == SITS_PLAN_KV_SWAP) return sits_kv_swap_run(r, plan, NULL);   /* [kv offload] */
    if (plan->cmd == SITS_PLAN_KV_COPY) {   /* [n > 1] copy on write; a shadow of a remote replica holds no KV */
        if (plan->n_seqs != plan->n_tokens || plan->n_out != 0) return SITS_ERR_FORMAT;
        return r->engine ? sits_engine_kv_copy_blocks(r->engine, plan->n_tokens, plan->tokens, plan->pos) : SITS_OK;
    }
    sits_sample_masks_t late = { 0 };
    if (!r->engine) {
        /* a shadow of a remote replica: its tokens arrive from its last stage */
        if (plan->n_out == 0) return SITS_OK;
        if (plan->masks_follow) SITS_CHECK(follow_masks(r, w, plan, &late));
        return bcast_results(r, w, plan);
    }
    const sits_shard_dims_t *d = &r->w->dims;
    sits_batch_t b = { .n_tokens = plan->n_tokens, .tokens = plan->tokens, .pos = plan->pos, .seq = plan->seq,
                       .n_seqs = plan->n_seqs, .block_tables = plan->block_tables, .bt_stride = plan->max_blocks,
                       .n_out = plan->n_out,
                       .out_rows = plan->out_rows, .sample = plan->n_out > 0 ? plan->sample : NULL };
    /* [perf] enqueue the step; only the sampler's candidates come back unless a callback wants logits */
    SITS_CHECK(sits_engine_run(r->engine, &b));
    if (plan->n_out == 0) return SITS_OK;
    if (plan->masks_follow) SITS_CHECK(follow_masks(r, w, plan, &late));   /* the device computes meanwhile */
    if (d->last_stage) {
        if (cb) {
            const float *logits = NULL;
            SITS_CHECK(sits_engine_logits(r->engine, &logits));
            cb(ctx, (int)plan->step, logits, plan->n_out, d->v_start, d->v_count);
        }
        /* [structured output + sampling controls + logprobs] all on the device, each rank on its vocabulary
         * shard (sits_engine_sample_step): logprobs of the raw logits, then per row the grammar mask,
         * bias / penalties / min_p and the sampler; only records and candidates cross between ranks */
        const sits_sample_masks_t *masks = plan->masks_follow ? &late : plan->masks.n > 0 ? &plan->masks : NULL;
        SITS_CHECK(sits_engine_sample_step(r->engine, r->tp, plan->sample, masks, w->tokens, w->lp));
    }
    if (!r->bcast_tokens) return SITS_OK;
    return bcast_results(r, w, plan);
}

sits_status_t sits_worker_follow(sits_runner_t *r, int wait_forever)
{
    sits_worker_t w;
    sits_plan_t plan;
    SITS_CHECK(sits_worker_init(&w, r->ep.max_seqs));
    uint64_t mark_bytes = 0, mark = sits_backend_alloc_count(r->be, &mark_bytes);   /* [memory plan] */
    sits_status_t st;
    for (;;) {
        st = sits_worker_recv(r, &w, wait_forever, &plan);
        if (st != SITS_OK || plan.cmd == SITS_PLAN_STOP) break;
        st = sits_worker_exec(r, &w, &plan, NULL, NULL);
        if (st != SITS_OK) break;
    }
    sits_worker_fini(&w);
    uint64_t bytes = 0, n = sits_backend_alloc_count(r->be, &bytes);
    if (n > mark)   /* [memory plan] as the leader says it for its own backend (sched.c) */
        SITS_WARN(SITS_SUB_SCHED, "%llu device allocations (%.1f MiB) after start-up (the memory plan missed them)",
                  (unsigned long long)(n - mark), (double)(bytes - mark_bytes) / (1 << 20));
    return st;
}
