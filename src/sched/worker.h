/* worker.h -- how step plans travel and run: the TP leader broadcasts each plan over the group's
 * MPI communicator (length, then bytes); every rank executes it (forward pass + distributed
 * sampling) and ends up with the same sampled tokens. Followers loop on sits_worker_follow. */
#ifndef SITS_SCHED_WORKER_H
#define SITS_SCHED_WORKER_H

#include <stddef.h>
#include "sched/generate.h"
#include "sched/plan.h"

typedef struct {
    unsigned char *buf;              /* serialised plan */
    size_t cap;
    sits_sample_params_t *store;     /* [max_seqs] parsed sampling params */
    int32_t *tokens;                 /* [max_seqs] sampled tokens of the last step */
    sits_logprob_t *lp;              /* [max_seqs] [logprobs] of the last step's rows that asked */
    /* [structured output] a plan with masks_follow: the leader's make_masks(masks_ctx) makes the n masks
     * (masks[n * words], the plan's rows in order) while the device runs the forward pass; mbuf carries
     * them to the group (followers: make_masks NULL) */
    sits_status_t (*make_masks)(void *ctx, const uint32_t **masks_p);
    void *masks_ctx;
    unsigned char *mbuf;             /* [sits_plan_masks_size] */
    size_t mcap;
} sits_worker_t;

sits_status_t sits_worker_init(sits_worker_t *w, int max_seqs);
void sits_worker_fini(sits_worker_t *w);

/* Leader: broadcast the plan to the group (collective with the followers' receive). */
sits_status_t sits_worker_send(sits_runner_t *r, sits_worker_t *w, const sits_plan_t *plan);
/* Follower: receive the next plan. wait_forever: no deadline (an idle server sends nothing for a while). */
sits_status_t sits_worker_recv(sits_runner_t *r, sits_worker_t *w, int wait_forever, sits_plan_t *plan_p);
/* Every rank: forward + sample; tokens of the plan's outputs land in w->tokens[n_out], and the
 * log-probabilities of the rows that ask for them in w->lp[n_out] -- on the last pipeline stage,
 * and with a pipeline (or a remote replica) on every rank of ctl, broadcast with the tokens.
 * cb (may be NULL) sees this rank's logits of the outputs first (a download of the whole logits).
 * [structured output] a plan with masks_follow: after the forward pass is enqueued the leader makes
 * the masks (w->make_masks) and broadcasts them over ctl; every rank of ctl takes part. */
sits_status_t sits_worker_exec(sits_runner_t *r, sits_worker_t *w, const sits_plan_t *plan, sits_logits_cb_t cb, void *ctx);
/* Follower: receive and execute plans until a STOP plan. */
sits_status_t sits_worker_follow(sits_runner_t *r, int wait_forever);

#endif
