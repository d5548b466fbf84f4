/* sched.c -- continuous batching on the leader; see scheduler.h for the policy and sched.h for
 * the thread-safe request api. */
#include "sched/scheduler.h"
#include "sched/worker.h"
#include "sched/kvmove.h"
#include "sched/tenants.h"
#include "sched/swap.h"
#include "grammar/grammar.h"
#include "util/log.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { REQ_WAITING, REQ_RUNNING, REQ_DONE };

#define SITS_ITL_RING 4096      /* TPOT samples (one per finished request) kept for the controller */
#define SITS_ITL_WINDOW_S 2.0   /* the controller's P99 looks at the requests finished this many seconds back */

struct sits_req {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;                    /* the scheduler's and the server's, under mu */
    /* set at submit */
    int32_t *tokens;             /* [n_prompt + max_tokens]: prompt, then generated */
    int n_prompt, max_tokens;
    sits_sample_params_t sample;
    int ignore_eos;
    int32_t *stop_ids;
    int n_stop;
    uint64_t order;              /* arrival order */
    int tenant;                  /* index in the scheduler's tenant table */
    char id[48];                 /* the API's request id (tracing), may be empty */
    /* [logprobs] (sits_req_params_t); glp [max_tokens] of generated tokens, plp [n_prompt] of prompt
     * tokens (entry 0 unused); written under mu by the scheduler thread */
    int logprobs, top_logprobs, prompt_logprobs;
    sits_logprob_t *glp, *plp;
    int n_lp_rows;               /* scheduler thread: prompt-logprob rows of this request in the step in flight */
    /* [sampling controls] logit_bias (copied), min_tokens */
    sits_sample_bias_t *bias;
    int n_bias, min_tokens;
    int32_t *bad;                /* [bad_words] bad_off [n_bad + 1] then bad_ids (sits_req_params_t), one allocation */
    int n_bad;
    sits_req_t *leader;          /* [n] share_prompt_with (a reference held), NULL when none */
    int n_sharing;               /* [n] requests that will name this one as their leader */
    int n_joined;                /* [n] of which submitted so far (under mu) */
    sits_sched_t *owner;         /* the scheduler it was submitted to */
    sits_req_t *fork_of;         /* [n] scheduler thread: forked off this leader in the step being built */
    /* timeline (CLOCK_REALTIME seconds; 0 = not yet) and counters for the trace file */
    double t_queued, t_scheduled, t_first_token;
    int n_preempted, n_prefix_hit;
    /* under mu */
    int n_gen;                   /* generated tokens */
    int n_delivered;             /* handed to the server by next() */
    sits_finish_t finish;
    int cancelled;
    /* scheduler thread only */
    int state;
    int n_computed;              /* tokens whose K/V are in the cache */
    double first_token_s, last_token_s;  /* when its first / last token was produced (its TPOT) */
    int32_t *bt;                 /* block table [max_blocks_per_seq] */
    int n_blocks;
    int n_dead;                  /* [sliding window] leading entries of bt given back (-1: no layer reads them) */
    uint64_t *hashes;            /* [max_blocks_per_seq] prefix-cache hash of each full block */
    uint64_t salt;               /* [prefix cache] the hash chain's root (cache_salt; 0: none) */
    int n_hashed;                /* leading blocks registered (or found) in the prefix cache */
    int take;                    /* tokens in the current step */
    /* [kv offload] */
    int swapped;                 /* its KV (n_computed tokens) waits in the ranks' offload tiers under slot */
    int32_t slot;
    int prefetched;              /* swapped, and a prefetch order for slot went out */
    uint64_t active_step;        /* the last schedule() that gave it work (least recently active swaps first) */
    /* [structured output] scheduler thread only; gstate made at the first constrained step */
    sits_grammar_t *grammar;
    const sits_grammar_vocab_t *gvocab;
    sits_grammar_state_t *gstate;
    /* [speculative] scheduler thread only (scheduler.h "Speculative decoding") */
    int no_spec;                 /* the request opted out */
    int spec_k;                  /* drafts to ask for next (adapted) */
    int n_draft;                 /* drafts in the step in flight (0: a plain step) */
    int32_t draft[SITS_SPEC_MAX_K];
    int n_drafted, n_accepted;   /* totals for the trace */
    sits_spec_dseq_t dseq;       /* the draft model's KV of this sequence (method DRAFT) */
};

struct sits_sched {
    sits_sched_params_t p;
    sits_runner_t *r;
    sits_worker_t wk;
    pthread_mutex_t mu;          /* inbox, stats, stopping */
    pthread_cond_t cv;
    sits_req_t **inbox;
    int n_inbox, cap_inbox;
    int stopping;
    sits_sched_stats_t stats;
    uint64_t next_order;
    /* scheduler thread only */
    sits_req_t **waiting, **running, **batch;
    int n_waiting, n_running;
    int32_t *tok, *pos, *seq, *rows, *bt;   /* plan arrays */
    /* adaptive batch controller */
    int allowed_seqs, allowed_tokens;
    double ctl_next;
    double *itl_t, *itl_v, *itl_tmp;        /* ring of (time, inter-token latency) [SITS_ITL_RING] */
    int itl_head, itl_n;
    sits_plan_t pl;                          /* the step in flight (launch .. complete) */
    double t_launch;
    int index;                               /* data-parallel replica (trace file) */
    /* tenants: weighted fair queueing within a priority, priority preemption across */
    int n_tenants;
    double weight[SITS_MAX_TENANTS], vt[SITS_MAX_TENANTS];  /* virtual time = tokens served / weight */
    int prio[SITS_MAX_TENANTS], active[SITS_MAX_TENANTS];    /* active: waiting + running requests */
    sits_sample_params_t *sp;
    /* [sampling controls] the step's bias and history lists (the rows of sp point into them) */
    sits_sample_bias_t *pbias;
    sits_sample_hist_t *phist;
    int64_t *pkeys;
    size_t n_pbias, cap_pbias, n_phist, cap_phist, cap_pkeys;
    /* [kv offload] the orders of the next KV_SWAP plan, the slots of requests that ended swapped out */
    int32_t *sw_kind, *sw_slot, *sw_idx, *sw_bt;  /* [max_num_seqs] x 3, [max_num_seqs * max_blocks_per_seq] */
    sits_kv_swap_result_t *sw_res;                /* [max_num_seqs] */
    int32_t *drops;
    int n_drops, cap_drops;
    int32_t next_slot;
    int n_swapped;
    uint64_t sched_no;                            /* schedule() calls */
    int kv_window;                                /* [sliding window] every layer's window (0: some layer reads all) */
    sits_status_t fatal;                          /* a swap plan could not go out: the run loop stops */
    /* [kv move] this replica as a move's source or destination (sits_sched_set_replica) */
    int kv_role, rep_tp, rep_pp;
    int32_t *rep_ranks;                      /* [rep_pp * rep_tp] world ranks; NULL: not described */
    uint32_t kv_move_no;                     /* replica 0: moves ordered so far (ids) */
    uint64_t dev_alloc_mark, dev_alloc_mark_bytes; /* [memory plan] the backend's device allocations at create */
    /* [structured output] the step's masks: [max_seqs, mask_words] and their output rows, made at first use */
    uint32_t *masks;
    int32_t *mask_rows;
    int mask_words;
    /* masks_late: this step's masks follow the plan (made while the device runs the forward pass);
     * mask_q [max_seqs]: their sequences, in mask_rows' order; n_mask_q of them */
    int masks_late, n_mask_q;
    sits_req_t **mask_q;
    /* [speculative] the draft-model drafter and its proposal's arrays [max_num_seqs] */
    sits_spec_drafter_t *drafter;
    sits_req_t **pq;
    sits_spec_dseq_t **pds;
    const int32_t **ptok;
    int *plen, *pk, *pn;
    int32_t *pdrafts;           /* [max_num_seqs * SITS_SPEC_MAX_K] */
    /* [n > 1] copies on write not yet sent (src -> dst block ids), and this step's forks */
    int32_t *cow;                /* [3 * cap_cow]: src ids, dst ids, 0 1 2 .. (the plan's seq) */
    int n_cow, cap_cow;
    sits_req_t **forks;          /* [max_num_seqs] */
    int n_forks;
};

/* Wall-clock seconds (timestamps in the trace file). */
static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- request handles (any thread) ---------------------------------------------------------- */

static void req_unref(sits_req_t *q)
{
    pthread_mutex_lock(&q->mu);
    int left = --q->refs;
    pthread_mutex_unlock(&q->mu);
    if (left > 0) return;
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    free(q->tokens);
    free(q->stop_ids);
    free(q->bt);
    free(q->hashes);
    free(q->glp);
    free(q->plp);
    free(q->bias);
    free(q->bad);
    sits_spec_dseq_fini(&q->dseq);   /* [speculative] its blocks went back when it finished */
    sits_req_t *leader = q->leader;
    sits_grammar_state_destroy(q->gstate);
    sits_grammar_destroy(q->grammar);
    free(q);
    if (leader) req_unref(leader);
}

/* ---- [sliding window] blocks out of every layer's window (scheduler.h "Sliding window") ---- */

/* Leading blocks no layer reads once n_computed positions are in the cache (blocks.h); n_computed
 * only grows while a sequence holds blocks (a speculative rollback never goes below the n_computed
 * before its step). */
static int swa_dead(const sits_sched_t *s, int n_computed)
{
    return sits_kv_window_dead_blocks(s->kv_window, s->r->ep.block_size, n_computed);
}

/* Blocks one sequence holds at most at once: a step computes up to max_num_batched_tokens positions
 * (its chunk, or its token and drafts) and reads the window - 1 before the first of them. */
static int swa_max_live(const sits_sched_t *s)
{
    return sits_kv_window_max_blocks(s->kv_window, s->r->ep.block_size, s->p.max_num_batched_tokens);
}

/* Gives q's blocks that fell out of the window back: their table entries become -1 placeholders (no
 * kernel reads them; copies, swaps, moves and releases skip them). Registered blocks stay in the
 * prefix cache, evictable (their contents are still the KV of that prefix). */
static void swa_trim(sits_sched_t *s, sits_req_t *q)
{
    int dead = swa_dead(s, q->n_computed);
    if (dead > q->n_blocks) dead = q->n_blocks;
    if (dead <= q->n_dead) return;
    int n = dead - q->n_dead;
    sits_kv_blocks_release(s->r->blocks, n, q->bt + q->n_dead);
    for (int b = q->n_dead; b < dead; b++) q->bt[b] = -1;
    q->n_dead = dead;
    pthread_mutex_lock(&s->mu);
    s->stats.kv_swa_freed_blocks += (uint64_t)n;
    pthread_mutex_unlock(&s->mu);
}

/* Blocks q holds (past its placeholders). */
static int live_blocks(const sits_req_t *q) { return q->n_blocks - q->n_dead; }

static sits_status_t api_submit(void *sched, const sits_req_params_t *p, sits_req_t **req_p, char *err, size_t err_len)
{
    sits_sched_t *s = sched;
    sits_runner_t *r = s->r;
    if (p->n_prompt < 1 || p->max_tokens < 1) {
        snprintf(err, err_len, "the prompt must hold at least one token and max_tokens must be at least 1");
        return SITS_ERR_INVALID;
    }
    if ((int64_t)p->n_prompt + p->max_tokens > r->max_model_len) {
        snprintf(err, err_len,
                 "This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the prompt, %d "
                 "for the completion).",
                 r->max_model_len, p->n_prompt + p->max_tokens, p->n_prompt, p->max_tokens);
        return SITS_ERR_INVALID;
    }
    int bs = r->ep.block_size, need = (p->n_prompt + p->max_tokens + bs - 1) / bs;
    if (need > swa_max_live(s)) need = swa_max_live(s);   /* [sliding window] what it holds at once */
    if (need > sits_kv_blocks_total(r->blocks)) {
        snprintf(err, err_len, "the request needs more KV cache (%d tokens) than the server holds (%d tokens)",
                 p->n_prompt + p->max_tokens, sits_kv_blocks_total(r->blocks) * bs);
        return SITS_ERR_INVALID;
    }
    /* [logprobs] with a pipeline (or a remote replica) they are computed where the logits are, the last
     * stage, and broadcast with its sampled tokens to this leader (worker.c) */
    if (p->top_logprobs < 0 || p->top_logprobs > SITS_LOGPROB_MAX_TOP) {
        snprintf(err, err_len, "top_logprobs must be in [0, %d]", SITS_LOGPROB_MAX_TOP);
        return SITS_ERR_INVALID;
    }
    if (p->tenant < 0 || p->tenant >= s->n_tenants) {
        snprintf(err, err_len, "unknown tenant %d", p->tenant);
        return SITS_ERR_INVALID;
    }
    for (int i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || p->prompt[i] >= r->cfg.vocab_size) {
            snprintf(err, err_len, "token id %d is outside the vocabulary (%d)", p->prompt[i], r->cfg.vocab_size);
            return SITS_ERR_INVALID;
        }
    sits_req_t *q = calloc(1, sizeof *q);
    if (!q) return SITS_ERR_NOMEM;
    q->tokens = malloc(sizeof(int32_t) * (size_t)(p->n_prompt + p->max_tokens));
    q->bt = calloc((size_t)r->ep.max_blocks_per_seq, sizeof(int32_t));
    q->hashes = calloc((size_t)r->ep.max_blocks_per_seq, sizeof(uint64_t));
    q->stop_ids = p->n_stop_ids > 0 ? malloc(sizeof(int32_t) * (size_t)p->n_stop_ids) : NULL;
    q->glp = p->logprobs ? calloc((size_t)p->max_tokens, sizeof *q->glp) : NULL;
    q->bias = p->n_bias > 0 ? malloc(sizeof *q->bias * (size_t)p->n_bias) : NULL;
    const size_t n_bad = p->n_bad > 0 ? (size_t)p->n_bad + 1 + (size_t)p->bad_off[p->n_bad] : 0;   /* [bad_words] */
    q->bad = n_bad ? malloc(sizeof *q->bad * n_bad) : NULL;
    if ((p->n_bias > 0 && !q->bias) || (n_bad && !q->bad)) {
        free(q->tokens); free(q->bt); free(q->hashes); free(q->stop_ids); free(q->glp); free(q->bias); free(q->bad); free(q);
        return SITS_ERR_NOMEM;
    }
    if (p->n_bias > 0) memcpy(q->bias, p->bias, sizeof *q->bias * (size_t)p->n_bias);
    q->n_bias = p->n_bias > 0 ? p->n_bias : 0;
    if (n_bad) {
        memcpy(q->bad, p->bad_off, sizeof *q->bad * ((size_t)p->n_bad + 1));
        memcpy(q->bad + p->n_bad + 1, p->bad_ids, sizeof *q->bad * (size_t)p->bad_off[p->n_bad]);
        q->n_bad = p->n_bad;
    }
    q->min_tokens = p->min_tokens;
    q->n_sharing = p->n_sharing > 0 ? p->n_sharing : 0;
    q->owner = s;
    if (p->share_prompt_with && p->share_prompt_with->n_prompt == p->n_prompt &&
        memcmp(p->share_prompt_with->tokens, p->prompt, sizeof(int32_t) * (size_t)p->n_prompt) == 0) {
        q->leader = p->share_prompt_with;
        pthread_mutex_lock(&q->leader->mu);
        q->leader->refs++;
        pthread_mutex_unlock(&q->leader->mu);
    }
    q->plp = p->prompt_logprobs ? calloc((size_t)p->n_prompt, sizeof *q->plp) : NULL;
    if (!q->tokens || !q->bt || !q->hashes || (p->n_stop_ids > 0 && !q->stop_ids) || (p->logprobs && !q->glp) ||
        (p->prompt_logprobs && !q->plp)) {
        free(q->tokens); free(q->bt); free(q->hashes); free(q->stop_ids); free(q->glp); free(q->plp); free(q->bias); free(q->bad);
        free(q);
        return SITS_ERR_NOMEM;
    }
    memcpy(q->tokens, p->prompt, sizeof(int32_t) * (size_t)p->n_prompt);
    if (p->n_stop_ids > 0) memcpy(q->stop_ids, p->stop_ids, sizeof(int32_t) * (size_t)p->n_stop_ids);
    q->n_stop = p->n_stop_ids;
    q->n_prompt = p->n_prompt;
    q->max_tokens = p->max_tokens;
    q->sample = p->sample;
    q->ignore_eos = p->ignore_eos;
    q->logprobs = p->logprobs != 0;
    q->prompt_logprobs = p->prompt_logprobs != 0;
    q->top_logprobs = p->top_logprobs;
    q->tenant = p->tenant;
    q->no_spec = p->no_speculation != 0;
    q->salt = p->cache_salt;
    q->spec_k = s->p.spec.num_speculative_tokens;
    if (p->id) snprintf(q->id, sizeof q->id, "%s", p->id);
    q->refs = 2;
    q->state = REQ_WAITING;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    pthread_mutex_lock(&s->mu);
    if (s->stopping || s->stats.waiting >= s->p.max_waiting) {
        int stopping = s->stopping;
        pthread_mutex_unlock(&s->mu);
        snprintf(err, err_len, stopping ? "the server is shutting down" : "too many requests are waiting; retry later");
        q->refs = 1;
        req_unref(q);
        return SITS_ERR_BUSY;
    }
    if (s->n_inbox == s->cap_inbox) {
        int cap = s->cap_inbox ? 2 * s->cap_inbox : 64;
        sits_req_t **ni = realloc(s->inbox, sizeof *ni * (size_t)cap);
        if (!ni) {
            pthread_mutex_unlock(&s->mu);
            q->refs = 1;
            req_unref(q);
            return SITS_ERR_NOMEM;
        }
        s->inbox = ni;
        s->cap_inbox = cap;
    }
    q->grammar = p->grammar;    /* owned from here on (no failure below) */
    q->gvocab = p->grammar_vocab;
    q->order = s->next_order++;
    q->t_queued = wall_s();
    s->inbox[s->n_inbox++] = q;
    s->stats.waiting++;
    if (p->share_prompt_with) {   /* [n] the leader may start once every request naming it is in */
        pthread_mutex_lock(&p->share_prompt_with->mu);
        p->share_prompt_with->n_joined++;
        pthread_mutex_unlock(&p->share_prompt_with->mu);
    }
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    *req_p = q;
    return SITS_OK;
}

static int api_next(sits_req_t *q, int32_t *tokens, int cap, sits_finish_t *finish_p, int timeout_ms)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += timeout_ms / 1000;
    dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) { dl.tv_sec++; dl.tv_nsec -= 1000000000L; }
    pthread_mutex_lock(&q->mu);
    while (q->n_delivered == q->n_gen && q->finish == SITS_FINISH_NONE)
        if (pthread_cond_timedwait(&q->cv, &q->mu, &dl) == ETIMEDOUT) break;
    int n = q->n_gen - q->n_delivered;
    if (n > cap) n = cap;
    memcpy(tokens, q->tokens + q->n_prompt + q->n_delivered, sizeof(int32_t) * (size_t)(n > 0 ? n : 0));
    q->n_delivered += n;
    *finish_p = q->n_delivered == q->n_gen ? q->finish : SITS_FINISH_NONE;
    pthread_mutex_unlock(&q->mu);
    return n;
}

static int api_logprobs(sits_req_t *q, int prompt, int from, int n, sits_logprob_t *out_p)
{
    pthread_mutex_lock(&q->mu);
    const sits_logprob_t *src = prompt ? q->plp : q->glp;
    int avail = !src ? 0 : prompt ? (q->n_delivered > 0 ? q->n_prompt : 0) : q->n_delivered;
    int k = from < 0 || from >= avail ? 0 : (avail - from < n ? avail - from : n);
    if (k > 0) memcpy(out_p, src + from, sizeof *out_p * (size_t)k);
    pthread_mutex_unlock(&q->mu);
    return k;
}

static int api_cached_tokens(sits_req_t *q)
{
    pthread_mutex_lock(&q->mu);
    int n = q->n_prefix_hit;
    pthread_mutex_unlock(&q->mu);
    return n;
}

static void api_cancel(sits_req_t *q)
{
    pthread_mutex_lock(&q->mu);
    q->cancelled = 1;
    pthread_mutex_unlock(&q->mu);
}

static void api_release(sits_req_t *q)
{
    api_cancel(q);   /* nobody listens any more: stop spending steps on it */
    req_unref(q);
}

static void api_stats(void *sched, sits_sched_stats_t *st)
{
    sits_sched_t *s = sched;
    pthread_mutex_lock(&s->mu);
    *st = s->stats;
    pthread_mutex_unlock(&s->mu);
}

const sits_sched_api_t sits_sched_api = {
    .submit = api_submit, .next = api_next, .cancel = api_cancel, .release = api_release, .stats = api_stats,
    .logprobs = api_logprobs, .cached_tokens = api_cached_tokens,
};

/* ---- scheduler thread ---------------------------------------------------------------------- */

static sits_status_t make_masks(void *ctx, const uint32_t **masks_p);   /* [structured output] */

sits_status_t sits_sched_create(const sits_sched_params_t *p, sits_runner_t *r, sits_sched_t **s_p)
{
    if (p->max_num_seqs < 1 || p->max_num_seqs > r->ep.max_seqs || p->max_num_batched_tokens < p->max_num_seqs ||
        p->max_num_batched_tokens > r->ep.max_tokens || p->max_waiting < 1) {
        SITS_ERROR(SITS_SUB_SCHED, "scheduler limits out of range (seqs %d of %d, tokens %d of %d and >= seqs, waiting %d)", p->max_num_seqs,
                   r->ep.max_seqs, p->max_num_batched_tokens, r->ep.max_tokens, p->max_waiting);
        return SITS_ERR_INVALID;
    }
    sits_sched_t *s = calloc(1, sizeof *s);
    if (!s) return SITS_ERR_NOMEM;
    s->p = *p;
    s->r = r;
    if (r->be) s->dev_alloc_mark = sits_backend_alloc_count(r->be, &s->dev_alloc_mark_bytes);   /* [memory plan] */
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    int S = p->max_num_seqs, T = p->max_num_batched_tokens, mb = r->ep.max_blocks_per_seq;
    s->waiting = malloc(sizeof(sits_req_t *) * (size_t)(p->max_waiting + S + 1));
    s->running = malloc(sizeof(sits_req_t *) * (size_t)S);
    s->batch = malloc(sizeof(sits_req_t *) * (size_t)S);
    s->forks = malloc(sizeof(sits_req_t *) * (size_t)S);
    s->tok = malloc(sizeof(int32_t) * (size_t)T * 3);
    s->rows = malloc(sizeof(int32_t) * (size_t)S);
    s->bt = malloc(sizeof(int32_t) * (size_t)S * mb);
    s->sp = malloc(sizeof(sits_sample_params_t) * (size_t)S);
    s->sw_kind = malloc(sizeof(int32_t) * (size_t)S * 3);
    s->sw_bt = malloc(sizeof(int32_t) * (size_t)S * mb);
    s->sw_res = malloc(sizeof(sits_kv_swap_result_t) * (size_t)S);
    s->itl_t = malloc(sizeof(double) * SITS_ITL_RING * 3);
    s->itl_v = s->itl_t ? s->itl_t + SITS_ITL_RING : NULL;
    s->itl_tmp = s->itl_t ? s->itl_t + 2 * SITS_ITL_RING : NULL;
    if (!s->waiting || !s->running || !s->batch || !s->forks || !s->tok || !s->rows || !s->bt || !s->sp || !s->itl_t || !s->sw_kind ||
        !s->sw_bt || !s->sw_res ||
        sits_worker_init(&s->wk, r->ep.max_seqs) != SITS_OK) {
        sits_sched_destroy(s);
        return SITS_ERR_NOMEM;
    }
    s->wk.make_masks = make_masks;   /* [structured output] masks that follow the plan */
    s->wk.masks_ctx = s;
    s->pos = s->tok + T;
    s->seq = s->pos + T;
    s->sw_slot = s->sw_kind + S;
    s->sw_idx = s->sw_slot + S;
    s->stats.kv_blocks_total = sits_kv_blocks_total(r->blocks);
    s->stats.kv_blocks_free = sits_kv_blocks_free_count(r->blocks);
    s->stats.max_model_len = r->max_model_len;
    s->kv_window = sits_model_kv_window(&r->cfg);
    if (s->kv_window > 0)
        SITS_INFO(SITS_SUB_SCHED, "sliding window %d on every layer: KV blocks older than the window go back to the pool "
                  "(a sequence holds at most %d blocks)", s->kv_window, swa_max_live(s));
    s->stats.spec_drafter = sits_spec_method_name(p->spec.method);
    if (p->spec.method == SITS_SPEC_DRAFT) {
        int n = p->max_num_seqs;
        s->pq = malloc(sizeof *s->pq * (size_t)n);
        s->pds = malloc(sizeof *s->pds * (size_t)n);
        s->ptok = malloc(sizeof *s->ptok * (size_t)n);
        s->plen = malloc(sizeof(int) * (size_t)n * 3);
        s->pdrafts = malloc(sizeof(int32_t) * (size_t)n * SITS_SPEC_MAX_K);
        sits_status_t st = !p->spec_draft ? SITS_ERR_INVALID
                           : !s->pq || !s->pds || !s->ptok || !s->plen || !s->pdrafts
                               ? SITS_ERR_NOMEM
                               : sits_spec_drafter_create(p->spec_draft, n, &s->drafter);
        if (st != SITS_OK) {
            SITS_ERROR(SITS_SUB_SCHED, "speculative decoding: the draft model's drafter: %s", sits_status_str(st));
            sits_sched_destroy(s);
            return st;
        }
        s->pk = s->plen + n;
        s->pn = s->pk + n;
    }
    if (p->spec.method == SITS_SPEC_NGRAM)
        SITS_INFO(SITS_SUB_SCHED, "speculative decoding: ngram drafter, up to %d tokens (n-gram %d..%d)",
                  p->spec.num_speculative_tokens, p->spec.prompt_lookup_min, p->spec.prompt_lookup_max);
    else if (p->spec.method == SITS_SPEC_DRAFT)
        SITS_INFO(SITS_SUB_SCHED, "speculative decoding: draft model %s, up to %d tokens", p->spec.model,
                  p->spec.num_speculative_tokens);
    s->n_tenants = p->tenants && p->tenants->n > 0 ? p->tenants->n : 1;
    for (int t = 0; t < s->n_tenants; t++) {
        s->weight[t] = p->tenants && p->tenants->n > 0 ? p->tenants->t[t].weight : 1.0;
        s->prio[t] = p->tenants && p->tenants->n > 0 ? p->tenants->t[t].priority : 0;
    }
    s->allowed_seqs = s->stats.allowed_seqs = p->max_num_seqs;
    s->allowed_tokens = s->stats.allowed_tokens = p->max_num_batched_tokens;
    if (p->target_tpot_p99_ms > 0)
        SITS_INFO(SITS_SUB_SCHED, "adaptive batch controller: target inter-token p99 %.2f ms, every %.0f ms", p->target_tpot_p99_ms,
                  p->controller_interval_s * 1e3);
    *s_p = s;
    return SITS_OK;
}

void sits_sched_destroy(sits_sched_t *s)
{
    if (!s) return;
    for (int i = 0; i < s->n_inbox; i++) req_unref(s->inbox[i]);
    for (int i = 0; i < s->n_waiting; i++) req_unref(s->waiting[i]);
    for (int i = 0; i < s->n_running; i++) req_unref(s->running[i]);
    free(s->inbox);
    free(s->waiting);
    free(s->running);
    free(s->batch);
    free(s->forks);
    free(s->cow);
    free(s->tok);
    free(s->rows);
    free(s->pbias);
    free(s->phist);
    free(s->pkeys);
    free(s->bt);
    free(s->sp);
    free(s->masks);
    free(s->mask_rows);
    free(s->mask_q);
    free(s->itl_t);
    free(s->sw_kind);
    free(s->sw_bt);
    free(s->sw_res);
    free(s->drops);
    free(s->rep_ranks);
    sits_spec_drafter_destroy(s->drafter);
    free(s->pq);
    free(s->pds);
    free(s->ptok);
    free(s->plen);
    free(s->pdrafts);
    sits_worker_fini(&s->wk);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

static void free_blocks(sits_sched_t *s, sits_req_t *q)
{
    /* [n > 1] a copy on write into a block q gives back is not needed any more */
    int32_t *src = s->cow, *dst = s->cow + s->cap_cow;
    for (int i = 0; i < s->n_cow; i++)
        for (int b = 0; b < q->n_blocks; b++)
            if (dst[i] == q->bt[b]) {
                src[i] = src[s->n_cow - 1];
                dst[i] = dst[--s->n_cow];
                i--;
                break;
            }
    if (live_blocks(q) > 0) sits_kv_blocks_release(s->r->blocks, live_blocks(q), q->bt + q->n_dead);
    q->n_blocks = 0;
    q->n_dead = 0;
    if (s->drafter) sits_spec_dseq_reset(s->drafter, &q->dseq);   /* [speculative] */
    q->n_computed = 0;
    q->n_hashed = 0;
}

/* Finish q: free its KV, publish the reason, drop the scheduler's reference. */
/* One JSON line per finished request (--trace-file). */
static void trace_write(sits_sched_t *s, const sits_req_t *q, sits_finish_t why)
{
    static const char *const reasons[] = { "none", "stop", "length", "cancelled", "error" };
    if (!s->p.trace && !s->p.otlp) return;
    double t_end = wall_s();
    const char *tenant = s->p.tenants && s->p.tenants->n > q->tenant ? s->p.tenants->t[q->tenant].name : "default";
    if (s->p.otlp) {
        sits_otlp_request_t r = { .request_id = q->id, .replica = s->index, .tenant = tenant, .queued = q->t_queued,
                                  .first_scheduled = q->t_scheduled, .first_token = q->t_first_token, .finished = t_end,
                                  .prompt_tokens = q->n_prompt, .generated_tokens = q->n_gen,
                                  .prefix_cached_tokens = q->n_prefix_hit, .preemptions = q->n_preempted,
                                  .finish_reason = reasons[(unsigned)why < 5 ? why : 0] };
        sits_otlp_request(s->p.otlp, &r);
    }
    if (!s->p.trace) return;
    fprintf(s->p.trace,
            "{\"request\":\"%s\",\"seq\":%llu,\"replica\":%d,\"tenant\":\"%s\",\"queued\":%.6f,\"first_scheduled\":%.6f,"
            "\"first_token\":%.6f,\"finished\":%.6f,\"prompt_tokens\":%d,\"generated_tokens\":%d,"
            "\"prefix_cached_tokens\":%d,\"preemptions\":%d,\"finish_reason\":\"%s\"",
            q->id, (unsigned long long)q->order, s->index, tenant, q->t_queued, q->t_scheduled, q->t_first_token, t_end, q->n_prompt,
            q->n_gen, q->n_prefix_hit, q->n_preempted, reasons[(unsigned)why < 5 ? why : 0]);
    if (s->p.spec.method != SITS_SPEC_OFF)   /* [speculative] the drafter's counts */
        fprintf(s->p.trace, ",\"spec_drafter\":\"%s\",\"spec_draft_tokens\":%d,\"spec_accepted_tokens\":%d",
                sits_spec_method_name(s->p.spec.method), q->n_drafted, q->n_accepted);
    fputs("}\n", s->p.trace);
    fflush(s->p.trace);
}

static void swap_forget(sits_sched_t *s, sits_req_t *q);

static void finish(sits_sched_t *s, sits_req_t *q, sits_finish_t why)
{
    trace_write(s, q, why);
    free_blocks(s, q);
    if (q->swapped) swap_forget(s, q);
    s->active[q->tenant]--;
    q->state = REQ_DONE;
    pthread_mutex_lock(&q->mu);
    q->finish = why;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    req_unref(q);
}

static int is_cancelled(sits_req_t *q)
{
    pthread_mutex_lock(&q->mu);
    int c = q->cancelled;
    pthread_mutex_unlock(&q->mu);
    return c;
}

static int is_stop_id(const sits_sched_t *s, const sits_req_t *q, int32_t id)
{
    const sits_model_config_t *c = &s->r->cfg;
    for (int i = 0; i < c->n_eos; i++) if (c->eos_token_ids[i] == id) return 1;
    for (int i = 0; i < q->n_stop; i++) if (q->stop_ids[i] == id) return 1;
    return 0;
}

/* Move requests from the inbox to the waiting queue; drop cancelled ones everywhere. */
static void collect(sits_sched_t *s)
{
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n_inbox; i++) {
        sits_req_t *q = s->inbox[i];
        int t = q->tenant;
        if (s->active[t]++ == 0) {
            /* a tenant coming back from idle starts at the current virtual time: no saved-up credit */
            double vmin = -1;
            for (int u = 0; u < s->n_tenants; u++)
                if (u != t && s->active[u] > 0 && (vmin < 0 || s->vt[u] < vmin)) vmin = s->vt[u];
            if (vmin > s->vt[t]) s->vt[t] = vmin;
        }
        s->waiting[s->n_waiting++] = q;
    }
    s->n_inbox = 0;
    pthread_mutex_unlock(&s->mu);
    int k = 0;
    for (int i = 0; i < s->n_waiting; i++) {
        if (is_cancelled(s->waiting[i])) finish(s, s->waiting[i], SITS_FINISH_CANCELLED);
        else s->waiting[k++] = s->waiting[i];
    }
    s->n_waiting = k;
    k = 0;
    for (int i = 0; i < s->n_running; i++) {
        if (is_cancelled(s->running[i])) finish(s, s->running[i], SITS_FINISH_CANCELLED);
        else s->running[k++] = s->running[i];
    }
    s->n_running = k;
}

/* Grow q's block table to hold `tokens` positions. */
/* [n > 1] The copies on write recorded so far, as one KV_COPY plan (plan.h) run on every rank; they
 * go out before any other plan (a swap-out saves the copied blocks, a step writes into them). */
static sits_status_t cow_flush(sits_sched_t *s)
{
    if (s->n_cow == 0) return SITS_OK;
    int n = s->n_cow;
    sits_plan_t pl = { .cmd = SITS_PLAN_KV_COPY, .step = s->sched_no, .n_tokens = n, .n_seqs = n, .tokens = s->cow,
                       .pos = s->cow + s->cap_cow, .seq = s->cow + 2 * (size_t)s->cap_cow };
    s->n_cow = 0;
    sits_status_t st = sits_worker_send(s->r, &s->wk, &pl);
    if (st == SITS_OK) st = sits_worker_exec(s->r, &s->wk, &pl, NULL, NULL);
    if (st != SITS_OK) {
        SITS_ERROR(SITS_SUB_SCHED, "kv copy-on-write orders failed: %s", sits_status_str(st));
        if (s->fatal == SITS_OK) s->fatal = st;
        return st;
    }
    pthread_mutex_lock(&s->mu);
    s->stats.kv_blocks_copied += (uint64_t)n;
    pthread_mutex_unlock(&s->mu);
    return SITS_OK;
}

/* [n > 1] q will write from position n_computed on: when the block holding it is shared with other
 * sequences, q moves to a copy of it (copied by the next KV_COPY plan). 0: no block for the copy. */
static int cow_last(sits_sched_t *s, sits_req_t *q)
{
    int b = q->n_computed / s->r->ep.block_size;
    if (b >= q->n_blocks || sits_kv_blocks_refs(s->r->blocks, q->bt[b]) <= 1) return 1;
    if (s->n_cow == s->cap_cow) {
        int cap = s->cap_cow ? 2 * s->cap_cow : 64;
        int32_t *a = malloc(sizeof *a * (size_t)cap * 3);
        if (!a) return 0;
        for (int i = 0; i < cap; i++) a[2 * cap + i] = i;
        if (s->n_cow) {
            memcpy(a, s->cow, sizeof *a * (size_t)s->n_cow);
            memcpy(a + cap, s->cow + s->cap_cow, sizeof *a * (size_t)s->n_cow);
        }
        free(s->cow);
        s->cow = a;
        s->cap_cow = cap;
    }
    int32_t id;
    if (sits_kv_blocks_cow(s->r->blocks, q->bt[b], &id) != SITS_OK) return 0;
    s->cow[s->n_cow] = q->bt[b];
    s->cow[s->cap_cow + s->n_cow++] = id;
    q->bt[b] = id;
    return 1;
}

static int ensure_blocks(sits_sched_t *s, sits_req_t *q, int tokens)
{
    int bs = s->r->ep.block_size, need = (tokens + bs - 1) / bs - q->n_blocks;
    swa_trim(s, q);   /* [sliding window] first: the blocks it gives back may serve this allocation */
    if (tokens > q->n_computed && !cow_last(s, q)) return 0;
    if (need <= 0) return 1;
    if (sits_kv_blocks_alloc(s->r->blocks, need, q->bt + q->n_blocks) != SITS_OK) return 0;
    q->n_blocks += need;
    return 1;
}

/* ---- [kv offload] swap orders (policy in scheduler.h, what the ranks do in swap.h) ---- */

/* Sends the n orders in sw_* as one KV_SWAP plan and runs this rank's part; results in sw_res. */
static sits_status_t cow_flush(sits_sched_t *s);

static sits_status_t swap_send(sits_sched_t *s, int n)
{
    if (cow_flush(s) != SITS_OK) return s->fatal;   /* [n > 1] the blocks a swap-out saves are copied first */
    sits_plan_t pl = { .cmd = SITS_PLAN_KV_SWAP, .step = s->sched_no, .n_tokens = n, .tokens = s->sw_kind, .pos = s->sw_slot,
                       .seq = s->sw_idx, .n_seqs = n, .max_blocks = s->r->ep.max_blocks_per_seq, .block_tables = s->sw_bt };
    sits_status_t st = sits_worker_send(s->r, &s->wk, &pl);
    if (st == SITS_OK) st = sits_kv_swap_run(s->r, &pl, s->sw_res);
    if (st != SITS_OK && s->fatal == SITS_OK) {
        SITS_ERROR(SITS_SUB_SCHED, "kv swap orders failed: %s", sits_status_str(st));
        s->fatal = st;
    }
    return st;
}

/* Order i of the next swap plan. */
static void swap_order(sits_sched_t *s, int i, int kind, int32_t slot, int nb, const int32_t *ids)
{
    int mb = s->r->ep.max_blocks_per_seq;
    s->sw_kind[i] = kind;
    s->sw_slot[i] = slot;
    s->sw_idx[i] = i;
    for (int b = 0; b < mb; b++) s->sw_bt[(size_t)i * mb + b] = b < nb ? ids[b] : -1;
}

/* q ended while swapped out: its slot is dropped on every rank with the next swap plan. */
static void swap_forget(sits_sched_t *s, sits_req_t *q)
{
    q->swapped = 0;
    q->prefetched = 0;   /* the DROP frees the prefetched bytes too */
    s->n_swapped--;
    if (s->n_drops == s->cap_drops) {
        int cap = s->cap_drops ? 2 * s->cap_drops : 64;
        int32_t *nd = realloc(s->drops, sizeof *nd * (size_t)cap);
        if (!nd) return;   /* the ranks keep the copy until they exit */
        s->drops = nd;
        s->cap_drops = cap;
    }
    s->drops[s->n_drops++] = q->slot;
}

static void swap_flush_drops(sits_sched_t *s)
{
    int S = s->p.max_num_seqs;
    while (s->n_drops > 0 && s->fatal == SITS_OK) {
        int n = s->n_drops < S ? s->n_drops : S;
        for (int i = 0; i < n; i++) swap_order(s, i, SITS_KV_SWAP_DROP, s->drops[s->n_drops - n + i], 0, NULL);
        s->n_drops -= n;
        swap_send(s, n);
    }
}

/* Blocks in use (allocated, or held by the prefix cache in use) plus extra above the threshold? */
static int kv_over(const sits_sched_t *s, int extra)
{
    int total = sits_kv_blocks_total(s->r->blocks), used = total - sits_kv_blocks_free_count(s->r->blocks);
    return (double)(used + extra) > s->p.kv_offload_threshold * total;
}

/* Swap running q out before its blocks are freed: 1 when every rank holds its KV now (its blocks
 * are released, it keeps n_computed), 0 when it must be preempted by recompute instead. */
static int swap_out(sits_sched_t *s, sits_req_t *q)
{
    /* [sliding window] the slot holds the blocks past the placeholders (n_dead stays: swap_in puts them back there) */
    int bs = s->r->ep.block_size, nb = (q->n_computed + bs - 1) / bs - q->n_dead;
    if (!s->p.kv_offload || s->fatal != SITS_OK || nb < 1) return 0;
    int32_t slot = s->next_slot;
    s->next_slot = s->next_slot == INT32_MAX ? 0 : s->next_slot + 1;
    swap_order(s, 0, SITS_KV_SWAP_OUT, slot, nb, q->bt + q->n_dead);
    if (swap_send(s, 1) != SITS_OK) return 0;
    const sits_kv_swap_result_t *res = &s->sw_res[0];
    if (res->failed > 0) {
        SITS_WARN(SITS_SUB_SCHED, "request %llu: kv swap-out failed on %lld rank(s) (see their log); preempting it by recompute",
                  (unsigned long long)q->order, (long long)res->failed);
        pthread_mutex_lock(&s->mu);
        s->stats.kv_swap_failed++;
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
    sits_kv_blocks_release(s->r->blocks, live_blocks(q), q->bt + q->n_dead);
    q->n_blocks = 0;
    q->n_hashed = 0;   /* restored blocks are fresh: prefix_register hashes them again */
    if (s->drafter) sits_spec_dseq_reset(s->drafter, &q->dseq);   /* [speculative] recomputed by the drafter */
    q->swapped = 1;
    q->slot = slot;
    q->prefetched = 0;
    s->n_swapped++;
    pthread_mutex_lock(&s->mu);
    s->stats.kv_swap_out++;
    for (int t = 0; t < 2; t++) s->stats.kv_swap_out_bytes[t] += (uint64_t)res->bytes[t];
    pthread_mutex_unlock(&s->mu);
    SITS_DEBUG(SITS_SUB_SCHED, "swapped out request %llu: %d tokens in %d blocks to slot %d (bytes over the ranks: host %lld, "
               "disk %lld)", (unsigned long long)q->order, q->n_computed, nb, (int)slot, (long long)res->bytes[0],
               (long long)res->bytes[1]);
    return 1;
}

/* Admit swapped-out q's KV back: fresh blocks, loaded by every rank. 1: done; 0: no blocks for it
 * now; -1: the restore failed somewhere, q starts over (recompute). */
static int swap_in(sits_sched_t *s, sits_req_t *q)
{
    int bs = s->r->ep.block_size, nb = (q->n_computed + bs - 1) / bs - q->n_dead;   /* [sliding window] see swap_out */
    if (sits_kv_blocks_alloc(s->r->blocks, nb, q->bt + q->n_dead) != SITS_OK) return 0;
    q->n_blocks = q->n_dead + nb;
    q->swapped = 0;
    s->n_swapped--;
    int prefetched = q->prefetched;
    q->prefetched = 0;
    swap_order(s, 0, SITS_KV_SWAP_IN, q->slot, nb, q->bt + q->n_dead);
    sits_status_t st = swap_send(s, 1);
    const sits_kv_swap_result_t *res = &s->sw_res[0];
    if (st != SITS_OK || res->failed > 0) {
        if (st == SITS_OK)
            SITS_WARN(SITS_SUB_SCHED, "request %llu: kv swap-in failed on %lld rank(s) (see their log); recomputing its %d tokens",
                      (unsigned long long)q->order, (long long)res->failed, q->n_computed);
        free_blocks(s, q);
        pthread_mutex_lock(&s->mu);
        s->stats.kv_swap_failed++;
        pthread_mutex_unlock(&s->mu);
        return -1;
    }
    pthread_mutex_lock(&s->mu);
    s->stats.kv_swap_in++;
    s->stats.kv_swap_prefetched += prefetched;
    for (int t = 0; t < 2; t++) s->stats.kv_swap_in_bytes[t] += (uint64_t)res->bytes[t];
    pthread_mutex_unlock(&s->mu);
    SITS_DEBUG(SITS_SUB_SCHED, "swapped in request %llu: %d tokens in %d blocks from slot %d%s", (unsigned long long)q->order,
               q->n_computed, nb, (int)q->slot, prefetched ? " (prefetched)" : "");
    return 1;
}

/* Start the ranks reading swapped-out q's KV from their tiers in the background (the steps that run
 * meanwhile hide it); its swap_in later finds the bytes in host memory. 1: the order went out. */
static int swap_prefetch(sits_sched_t *s, sits_req_t *q)
{
    swap_order(s, 0, SITS_KV_SWAP_PREFETCH, q->slot, 0, NULL);
    if (swap_send(s, 1) != SITS_OK) return 0;
    q->prefetched = 1;
    SITS_DEBUG(SITS_SUB_SCHED, "prefetching request %llu from slot %d", (unsigned long long)q->order, (int)q->slot);
    return 1;
}

/* Swapped-out q fits now. While other sequences run (compute to overlap with) and it was not
 * prefetched yet: prefetch it, 2 (this step admits nothing more); else swap_in's answer. */
static int swap_admit(sits_sched_t *s, sits_req_t *q)
{
    if (s->n_running > 0 && !q->prefetched) return swap_prefetch(s, q) ? 2 : 0;
    return swap_in(s, q);
}

/* Preempt: swap out when the ranks have offload tiers (see swap_out), else (or when that fails) by
 * recompute; back to the front of the waiting queue. */
static void preempt(sits_sched_t *s, int run_idx)
{
    sits_req_t *q = s->running[run_idx];
    if (!swap_out(s, q)) free_blocks(s, q);
    q->take = 0;
    q->n_preempted++;
    q->state = REQ_WAITING;
    memmove(s->running + run_idx, s->running + run_idx + 1, sizeof *s->running * (size_t)(s->n_running - run_idx - 1));
    s->n_running--;
    memmove(s->waiting + 1, s->waiting, sizeof *s->waiting * (size_t)s->n_waiting);
    s->waiting[0] = q;
    s->n_waiting++;
    pthread_mutex_lock(&s->mu);
    s->stats.preemptions++;
    pthread_mutex_unlock(&s->mu);
    SITS_DEBUG(SITS_SUB_SCHED, "preempted request %llu (%d tokens to recompute)", (unsigned long long)q->order,
               q->swapped ? q->n_prompt + q->n_gen - q->n_computed : q->n_prompt + q->n_gen);
}

/* [kv offload] While more than the threshold of the blocks are in use and more than one sequence
 * runs, preempt (swap out) the least recently active running sequence, among equals the youngest. */
static void kv_pressure(sits_sched_t *s)
{
    while (s->n_running > 1 && s->fatal == SITS_OK && kv_over(s, 0)) {
        int v = 0;
        for (int i = 1; i < s->n_running; i++) {
            const sits_req_t *a = s->running[i], *b = s->running[v];
            if (a->active_step < b->active_step || (a->active_step == b->active_step && a->order > b->order)) v = i;
        }
        preempt(s, v);
    }
}

static int total_tokens(sits_req_t *q)
{
    pthread_mutex_lock(&q->mu);
    int n = q->n_prompt + q->n_gen;
    pthread_mutex_unlock(&q->mu);
    return n;
}

/* Start q (fresh, no blocks) from the longest run of cached full blocks of its tokens, stopping
 * before the block that holds its last token. */
static void prefix_lookup(sits_sched_t *s, sits_req_t *q, int total)
{
    int bs = s->r->ep.block_size, max_blocks = (total - 1) / bs;
    uint64_t parent = q->salt;   /* the chain's root: the request's cache_salt, 0 without */
    while (q->n_blocks < max_blocks) {
        uint64_t h = sits_kv_block_hash(parent, q->tokens + (size_t)q->n_blocks * bs, bs);
        int32_t id = sits_kv_blocks_lookup(s->r->blocks, h);
        if (id < 0) break;
        q->bt[q->n_blocks] = id;
        q->hashes[q->n_blocks++] = h;
        parent = h;
    }
    q->n_hashed = q->n_blocks;
    q->n_computed = q->n_blocks * bs;
    pthread_mutex_lock(&q->mu);
    if (q->n_computed > q->n_prefix_hit) q->n_prefix_hit = q->n_computed;
    pthread_mutex_unlock(&q->mu);
    pthread_mutex_lock(&s->mu);
    s->stats.prefix_query_tokens += (uint64_t)total;
    s->stats.prefix_hit_tokens += (uint64_t)q->n_computed;
    pthread_mutex_unlock(&s->mu);
}

/* Register the blocks q has completely computed since the last call. */
static void prefix_register(sits_sched_t *s, sits_req_t *q)
{
    int bs = s->r->ep.block_size, full = q->n_computed / bs;
    for (int b = q->n_hashed; b < full; b++) {
        uint64_t h = sits_kv_block_hash(b ? q->hashes[b - 1] : q->salt, q->tokens + (size_t)b * bs, bs);
        if (b >= q->n_dead) sits_kv_blocks_register(s->r->blocks, q->bt[b], h);   /* [sliding window] not a placeholder */
        q->hashes[b] = h;
    }
    if (full > q->n_hashed) q->n_hashed = full;
}

/* [n] q shares its prompt's blocks with a leader (choice 0) that is still computing the prompt:
 * admitting it now would compute the same prompt again (it forks off the leader's last chunk, or
 * starts from its blocks after it). A leader waits until every request sharing its prompt is in. */
static int waits_for_leader(const sits_sched_t *s, sits_req_t *q)
{
    (void)s;
    if (q->n_sharing > 0 && q->n_computed == 0 && !q->swapped) {
        pthread_mutex_lock(&q->mu);
        int missing = q->n_joined < q->n_sharing;
        pthread_mutex_unlock(&q->mu);
        if (missing) return 1;
    }
    const sits_req_t *l = q->leader;
    if (!l || q->swapped || q->n_computed > 0) return 0;
    return l->state != REQ_DONE && l->n_computed < l->n_prompt;
}

/* [n] Fresh q starts from its running leader's blocks: it shares every block of its prompt but the
 * last token (whose logits it needs), the block of that token copied on write. 1 when it did. */
static int share_leader(sits_sched_t *s, sits_req_t *q)
{
    const sits_req_t *l = q->leader;
    int bs = s->r->ep.block_size, k = q->n_prompt - 1, nb = (k + bs - 1) / bs;
    if (!l || l->owner != s || l->state != REQ_RUNNING || l->swapped || l->n_computed < l->n_prompt || q->swapped ||
        q->n_computed > 0 || q->n_blocks > 0 || q->prompt_logprobs || k < 1 || l->n_blocks < nb ||
        l->n_dead > swa_dead(s, k))   /* [sliding window] the leader gave back blocks q's last token reads */
        return 0;
    memcpy(q->bt, l->bt, sizeof(int32_t) * (size_t)nb);
    q->n_dead = l->n_dead;
    sits_kv_blocks_share(s->r->blocks, nb - q->n_dead, q->bt + q->n_dead);
    q->n_blocks = nb;
    q->n_computed = k;
    q->n_hashed = l->n_hashed < k / bs ? l->n_hashed : k / bs;
    memcpy(q->hashes, l->hashes, sizeof(uint64_t) * (size_t)q->n_hashed);
    return 1;
}

/* [n] Leader l's chunk this step ends its prompt: its fresh followers still waiting fork off it -- they
 * share its blocks and, in this step, sample their first token from its last prompt token's logits
 * (step_launch / step_complete) -- while the sequence allowance and the output rows allow. */
static void fork_followers(sits_sched_t *s, sits_req_t *l, int *rows)
{
    for (int i = 0; i < s->n_waiting; i++) {
        sits_req_t *f = s->waiting[i];
        if (f->leader != l || f->swapped || f->n_computed > 0 || f->n_blocks > 0 || f->n_gen > 0 ||
            (f->prompt_logprobs && !l->prompt_logprobs))
            continue;
        if (s->n_running >= s->allowed_seqs || *rows >= s->p.max_num_seqs) return;
        memcpy(f->bt, l->bt, sizeof(int32_t) * (size_t)l->n_blocks);
        f->n_dead = l->n_dead;   /* [sliding window] its placeholders too (l's prompt ends where f starts) */
        sits_kv_blocks_share(s->r->blocks, live_blocks(l), f->bt + f->n_dead);
        f->n_blocks = l->n_blocks;
        memmove(s->waiting + i, s->waiting + i + 1, sizeof *s->waiting * (size_t)(s->n_waiting - i - 1));
        s->n_waiting--;
        i--;
        f->state = REQ_RUNNING;
        f->take = 0;
        f->fork_of = l;
        f->active_step = s->sched_no;
        if (f->t_scheduled == 0) f->t_scheduled = wall_s();
        s->running[s->n_running++] = f;
        s->forks[s->n_forks++] = f;
        (*rows)++;
    }
}

/* The waiting request to admit next (-1: none may start now): lowest priority value, then lowest tenant virtual time,
 * then queue order (preempted requests sit at the front). */
static int pick_waiting(const sits_sched_t *s)
{
    int best = -1;
    for (int i = 0; i < s->n_waiting; i++) {
        if (waits_for_leader(s, s->waiting[i])) continue;
        if (best < 0) { best = i; continue; }
        int a = s->waiting[i]->tenant, b = s->waiting[best]->tenant;
        if (s->prio[a] < s->prio[b] || (s->prio[a] == s->prio[b] && s->vt[a] < s->vt[b])) best = i;
    }
    return best;
}

/* Preempt the youngest running request whose priority is strictly lower than prio (a higher
 * number); 0 when there is none. */
static int preempt_lower(sits_sched_t *s, int prio)
{
    for (int i = s->n_running - 1; i >= 0; i--)
        if (s->prio[s->running[i]->tenant] > prio) {
            preempt(s, i);
            return 1;
        }
    return 0;
}

/* Give running sequence i its share of this step; preempts the youngest running sequences while
 * blocks are short. Returns 0 when i itself was preempted. */
static int run_take(sits_sched_t *s, int i, int take, int *nb)
{
    sits_req_t *q = s->running[i];
    while (!ensure_blocks(s, q, q->n_computed + take)) {
        /* out of blocks: preempt the youngest running sequence (maybe q itself) */
        int victim = s->n_running - 1;
        preempt(s, victim);
        if (victim == i) return 0;
    }
    q->take = take;
    s->batch[(*nb)++] = q;
    return 1;
}

/* [logprobs] Prompt positions of q's chunk this step whose next token is a prompt token (scored
 * rows when q asks for prompt logprobs). */
static int prompt_lp_rows(const sits_req_t *q)
{
    if (!q->prompt_logprobs || q->take <= 0) return 0;
    int end = q->n_computed + q->take < q->n_prompt - 1 ? q->n_computed + q->take : q->n_prompt - 1;
    return end > q->n_computed ? end - q->n_computed : 0;
}

/* Output rows q's chunk this step needs: its prompt-logprob rows and its sampled row. */
static int step_rows(sits_req_t *q)
{
    if (q->take <= 0) return 0;
    return prompt_lp_rows(q) + (q->n_computed + q->take == total_tokens(q));
}

/* ---- [speculative] drafting, verification rows, acceptance and rollback (scheduler.h) ---- */

/* q may speculate: the server has a drafter, q did not opt out, and nothing of q's sampling depends
 * on the tokens before it in a way the rows of one step cannot see (penalties over the history,
 * grammar state, min_tokens bans that lift after some token). */
static int spec_may(const sits_sched_t *s, const sits_req_t *q)
{
    const sits_sample_params_t *sp = &q->sample;
    /* n_gen >= 1: decoding (a prompt whose last token is all that is left to compute samples plainly) */
    return s->p.spec.method != SITS_SPEC_OFF && !q->no_spec && !q->grammar && !q->n_bad && q->n_gen >= 1 && q->n_gen >= q->min_tokens &&
           sp->presence_penalty == 0 && sp->frequency_penalty == 0 &&
           (sp->repetition_penalty <= 0 || sp->repetition_penalty == 1.0f);
}

/* After the batch is picked: every decoding sequence of it that may speculate gets drafts, within
 * its max_tokens and context, the step's token budget and output rows, and the free blocks. */
static void spec_draft(sits_sched_t *s)
{
    if (s->p.spec.method == SITS_SPEC_OFF) return;
    const sits_spec_config_t *c = &s->p.spec;
    int used = 0, rows = 0, np = 0;
    for (int i = 0; i < s->n_running; i++) {
        used += s->running[i]->take;
        rows += step_rows(s->running[i]);
    }
    for (int i = 0; i < s->n_running; i++) {
        sits_req_t *q = s->running[i];
        q->n_draft = 0;
        int total = total_tokens(q);
        if (q->take != 1 || q->n_computed != total - 1 || !spec_may(s, q)) continue;
        int k = q->spec_k;
        if (k > q->max_tokens - q->n_gen - 1) k = q->max_tokens - q->n_gen - 1;   /* k + 1 tokens may come out */
        if (k > s->r->max_model_len - total - 1) k = s->r->max_model_len - total - 1;
        if (k > s->allowed_tokens - used) k = s->allowed_tokens - used;
        if (k > s->p.max_num_seqs - rows) k = s->p.max_num_seqs - rows;
        if (k < 1) continue;
        if (s->drafter) {   /* the draft model proposes for all of them below */
            s->pq[np] = q;
            s->pds[np] = &q->dseq;
            s->ptok[np] = q->tokens;
            s->plen[np] = total;
            s->pk[np++] = k;
            used += k;
            rows += k;
            continue;
        }
        int n = sits_spec_ngram_propose(q->tokens, total, c->prompt_lookup_min, c->prompt_lookup_max, k, q->draft);
        if (n < 1 || !ensure_blocks(s, q, q->n_computed + 1 + n)) continue;   /* drafts never preempt */
        q->n_draft = n;
        q->take = 1 + n;
        used += n;
        rows += n;
    }
    if (np == 0) return;
    if (sits_spec_drafter_propose(s->drafter, np, s->pds, s->ptok, s->plen, s->pk, s->pdrafts, s->pn) != SITS_OK) {
        SITS_WARN(SITS_SUB_SCHED, "the draft model failed; this step does not speculate");
        for (int i = 0; i < np; i++) sits_spec_dseq_reset(s->drafter, s->pds[i]);
        return;
    }
    for (int i = 0; i < np; i++) {
        sits_req_t *q = s->pq[i];
        int n = s->pn[i];
        if (n < 1 || !ensure_blocks(s, q, q->n_computed + 1 + n)) {
            sits_spec_dseq_rollback(s->drafter, &q->dseq, q->n_computed);
            continue;
        }
        memcpy(q->draft, s->pdrafts + (size_t)i * SITS_SPEC_MAX_K, sizeof(int32_t) * (size_t)n);
        q->n_draft = n;
        q->take = 1 + n;
    }
}

/* Pick this step's work into s->batch; returns the number of sequences.
 * Order: every decoding sequence gets its token (oldest first), then running sequences still
 * prefilling get chunks, then waiting requests are admitted -- prefill within the token budget
 * (the adaptive controller's allowance), admission within the sequence allowance. */
static int schedule(sits_sched_t *s, int *n_tokens_p)
{
    int nb = 0, used = 0;
    s->sched_no++;
    if (s->p.kv_offload) {
        swap_flush_drops(s);
        kv_pressure(s);
    }
    for (int i = 0; i < s->n_running; i++) {
        sits_req_t *q = s->running[i];
        if (total_tokens(q) - q->n_computed != 1) continue;
        /* [kv move] a sequence whose first token is out waits for the decode replica; one whose last prompt
         * token is left (a chunk boundary one short of the prompt's end) still computes it here */
        if (s->kv_role == SITS_SCHED_PREFILL && q->n_gen > 0) continue;
        if (run_take(s, i, 1, &nb)) used++;
        else i--; /* running[] shifted */
    }
    int budget = s->allowed_tokens - used;
    for (int i = 0; i < s->n_running && budget > 0; i++) {
        sits_req_t *q = s->running[i];
        int remaining = total_tokens(q) - q->n_computed;
        if (remaining <= 1 || q->take) continue;
        int take = remaining < budget ? remaining : budget;
        if (run_take(s, i, take, &nb)) { budget -= take; used += take; }
        else break;
    }
    /* admit waiting requests while budget, sequence allowance and blocks allow: the best priority
     * first, among equals the tenant furthest behind its weighted share, FIFO within a tenant;
     * a request that does not fit may preempt running requests of a strictly lower priority */
    while (s->n_waiting > 0 && budget > 0) {
        int wi = pick_waiting(s);
        if (wi < 0) break;   /* [n] only choices waiting for their leader's prompt */
        sits_req_t *q = s->waiting[wi];
        if (s->n_running >= s->allowed_seqs) {
            if (preempt_lower(s, s->prio[q->tenant])) continue;
            break;
        }
        int total = total_tokens(q);
        if (share_leader(s, q)) {
            /* [n] from the leader's blocks */
        } else if (s->p.prefix_caching && !q->swapped && !q->prompt_logprobs) {
            prefix_lookup(s, q, total);
        }
        int take = total - q->n_computed < budget ? total - q->n_computed : budget;
        if (s->p.kv_offload) {
            /* [kv offload] admission keeps use at or below the threshold while anything runs */
            /* (a swapped-out sequence holds no block; its placeholders [sliding window] need none) */
            int bs = s->r->ep.block_size;
            int need = (q->n_computed + take + bs - 1) / bs - (q->n_blocks > q->n_dead ? q->n_blocks : q->n_dead);
            int sw = 0;
            if ((s->n_running > 0 && kv_over(s, need)) ||
                (q->swapped && (sits_kv_blocks_free_count(s->r->blocks) < need || (sw = swap_admit(s, q)) == 0))) {
                if (!q->swapped) free_blocks(s, q);
                if (s->fatal != SITS_OK) break;
                if (preempt_lower(s, s->prio[q->tenant])) continue;
                break;
            }
            if (sw < 0) continue;   /* its restore failed: admit it afresh */
            if (sw == 2) break;     /* prefetching it this step: nothing more admitted (priority order) */
        }
        if (!ensure_blocks(s, q, q->n_computed + take)) {
            free_blocks(s, q);  /* give back the cached blocks it found */
            if (preempt_lower(s, s->prio[q->tenant])) continue;
            break;
        }
        memmove(s->waiting + wi, s->waiting + wi + 1, sizeof *s->waiting * (size_t)(s->n_waiting - wi - 1));
        s->n_waiting--;
        q->state = REQ_RUNNING;
        if (q->t_scheduled == 0) q->t_scheduled = wall_s();
        s->running[s->n_running++] = q;
        q->take = take;
        budget -= take;
    }
    /* [logprobs] every prompt position of a prompt-logprobs chunk is an output row: keep the step's
     * rows within the engine's max_seqs by shortening such chunks (a chunk of 1 token has 1 row) */
    int rows = 0;
    for (int i = 0; i < s->n_running; i++) rows += step_rows(s->running[i]);
    for (int i = s->n_running - 1; i >= 0 && rows > s->p.max_num_seqs; i--) {
        sits_req_t *q = s->running[i];
        while (q->prompt_logprobs && q->take > 1 && rows > s->p.max_num_seqs) {
            rows -= step_rows(q);
            q->take--;
            rows += step_rows(q);
        }
    }
    spec_draft(s);   /* [speculative] */
    /* the batch: every running sequence with work this step (preemptions above may have removed some) */
    nb = 0;
    used = 0;
    rows = 0;
    for (int i = 0; i < s->n_running; i++)
        if (s->running[i]->take) {
            s->running[i]->active_step = s->sched_no;
            s->batch[nb++] = s->running[i];
            used += s->running[i]->take;
            rows += step_rows(s->running[i]);
        }
    /* [n] the followers of a prompt that ends this step fork off it */
    s->n_forks = 0;
    for (int b = 0; b < nb; b++) {
        sits_req_t *l = s->batch[b];
        if (l->n_sharing > 0 && l->n_gen == 0 && l->n_computed + l->take == l->n_prompt) fork_followers(s, l, &rows);
    }
    *n_tokens_p = used;
    return nb;
}

/* ---- adaptive batch controller ----------------------------------------------------------------
 * The TPOT of every request that finishes -- (last token - first token) / (tokens - 1), the
 * per-request statistic an SLO on TPOT (sits-bench --slo-tpot-ms) is written against -- goes into
 * a ring of the last SITS_ITL_RING samples; every interval the P99 of the samples of the last
 * window is compared with the target: above
 * 1.2x the token allowance (prefill tokens per step) halves, and once it is at its floor the
 * sequence allowance halves; below 0.8x both grow by a quarter; within [1, max-num-seqs] and
 * [max-num-seqs, max-num-batched-tokens]. Tokens go first because the long steps that make the
 * P99 are the ones carrying a prefill chunk: on a GPU a decode step of 8 or 64 sequences costs
 * about the same (weight reads), so cutting sequences there only queues requests -- the first GPU
 * experiment (bench/RESULTS.md, 2026-11-30, both halved together) fell to 47 sequences and lost
 * its TTFT at 40 req/s. The samples were single inter-token gaps at first: their P99 is a step that
 * carried a prefill chunk (hundreds of ms on a GPU), far above any request's TPOT, so the second GPU
 * run (tokens first) still cut the token budget while every request's TPOT met its SLO, and lost
 * goodput to TTFT (84 % at 20 req/s, 61 % at 80). */

static void itl_add(sits_sched_t *s, double t, double itl)
{
    s->itl_t[s->itl_head] = t;
    s->itl_v[s->itl_head] = itl;
    s->itl_head = (s->itl_head + 1) % SITS_ITL_RING;
    if (s->itl_n < SITS_ITL_RING) s->itl_n++;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void controller_tick(sits_sched_t *s, double now)
{
    if (s->p.target_tpot_p99_ms <= 0 || now < s->ctl_next) return;
    s->ctl_next = now + s->p.controller_interval_s;
    int n = 0;
    for (int i = 0; i < s->itl_n; i++)
        if (now - s->itl_t[i] <= SITS_ITL_WINDOW_S) s->itl_tmp[n++] = s->itl_v[i];
    if (n < 10) return;  /* too few samples to judge */
    qsort(s->itl_tmp, (size_t)n, sizeof(double), cmp_double);
    double p99 = s->itl_tmp[(int)(0.99 * (n - 1))] * 1e3, target = s->p.target_tpot_p99_ms;
    int seqs = s->allowed_seqs, toks = s->allowed_tokens;
    int max_seqs = s->p.max_num_seqs, max_toks = s->p.max_num_batched_tokens;
    int kv_seqs = sits_kv_blocks_total(s->r->blocks);  /* at most one sequence per block */
    if (max_seqs > kv_seqs) max_seqs = kv_seqs;
    if (p99 > 1.2 * target) {
        if (toks > s->p.max_num_seqs) toks = toks / 2 > s->p.max_num_seqs ? toks / 2 : s->p.max_num_seqs;
        else seqs = seqs / 2 > 1 ? seqs / 2 : 1;
    } else if (p99 < 0.8 * target) {
        seqs = seqs + seqs / 4 + 1 < max_seqs ? seqs + seqs / 4 + 1 : max_seqs;
        toks = toks + toks / 4 + 1 < max_toks ? toks + toks / 4 + 1 : max_toks;
    }
    if (seqs != s->allowed_seqs || toks != s->allowed_tokens)
        SITS_INFO(SITS_SUB_SCHED, "controller: itl p99 %.2f ms vs target %.2f ms: %d -> %d sequences, %d -> %d tokens/step", p99,
                  target, s->allowed_seqs, seqs, s->allowed_tokens, toks);
    s->allowed_seqs = seqs;
    s->allowed_tokens = toks;
    pthread_mutex_lock(&s->mu);
    s->stats.itl_p99_ms = p99;
    s->stats.allowed_seqs = seqs;
    s->stats.allowed_tokens = toks;
    pthread_mutex_unlock(&s->mu);
}

static void update_gauges(sits_sched_t *s)
{
    pthread_mutex_lock(&s->mu);
    s->stats.running = s->n_running;
    s->stats.waiting = s->n_waiting + s->n_inbox;
    s->stats.kv_blocks_free = sits_kv_blocks_free_count(s->r->blocks);
    s->stats.kv_blocks_cached = sits_kv_blocks_cached_count(s->r->blocks);
    s->stats.swapped = s->n_swapped;
    if (s->p.spec_draft)   /* [speculative] */
        s->stats.spec_draft_kv_blocks_used = sits_kv_blocks_total(s->p.spec_draft->blocks) -
                                             sits_kv_blocks_free_count(s->p.spec_draft->blocks);
    if (s->r->be) {   /* [memory plan] */
        uint64_t bytes = 0, n = sits_backend_alloc_count(s->r->be, &bytes);
        s->stats.dev_allocs_after_start = n - s->dev_alloc_mark;
        s->stats.dev_alloc_bytes_after_start = bytes - s->dev_alloc_mark_bytes;
    }
    if (s->r->engine) {   /* [logprobs + sampling controls] */
        sits_engine_stats_t es;
        sits_engine_get_stats(s->r->engine, &es);
        s->stats.logits_downloads = (uint64_t)es.logits_downloads;
        s->stats.device_logprob_steps = (uint64_t)es.device_logprobs;
    }
    if (s->r->engine) {   /* [moe] */
        int E = 0;
        const uint64_t *tok = sits_engine_moe_expert_tokens(s->r->engine, &E);
        s->stats.moe_experts = E < SITS_MOE_METRIC_EXPERTS ? E : SITS_MOE_METRIC_EXPERTS;
        for (int x = 0; tok && x < s->stats.moe_experts; x++) s->stats.moe_expert_tokens[x] = tok[x];
    }
    pthread_mutex_unlock(&s->mu);
}

/* Grows *buf (elements of size el) to hold need; 0 ok, -1 out of memory. */
static int grow(void **buf, size_t *cap, size_t need, size_t el)
{
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *nb = realloc(*buf, c * el);
    if (!nb) return -1;
    *buf = nb;
    *cap = c;
    return 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* [bad_words] the bans of q's next token (sits_req_params_t bad_ids) into out (room for q->n_bad): their count */
static int bad_bans(const sits_req_t *q, sits_sample_bias_t *out)
{
    const int32_t *off = q->bad, *ids = q->bad + q->n_bad + 1, *gen = q->tokens + q->n_prompt;
    int n = 0;
    for (int b = 0; b < q->n_bad; b++) {
        const int32_t *w = ids + off[b];
        const int pre = off[b + 1] - off[b] - 1;   /* the ids the output must end with */
        if (pre > q->n_gen || memcmp(w, gen + q->n_gen - pre, sizeof *w * (size_t)pre) != 0) continue;
        out[n++] = (sits_sample_bias_t){ w[pre], -INFINITY };
    }
    return n;
}

/* [sampling controls] q's sampled row sp: its logit_bias, the min_tokens bans (eos and stop ids
 * while fewer than min_tokens were generated, unless may_ban is 0), its bad_words bans and, when a penalty is on, its
 * token history (unique ids, generated counts, prompt presence), appended to the step's lists.
 * sp->bias / hist are set by the caller once every row is in. 0 ok, -1 out of memory. */
static int proc_lists(sits_sched_t *s, const sits_req_t *q, sits_sample_params_t *sp, int may_ban)
{
    const sits_model_config_t *c = &s->r->cfg;
    int ban = may_ban && q->n_gen < q->min_tokens && !q->ignore_eos ? c->n_eos + q->n_stop : 0;
    sp->n_hist = 0;
    if (grow((void **)&s->pbias, &s->cap_pbias, s->n_pbias + (size_t)(q->n_bias + ban + q->n_bad), sizeof *s->pbias) != 0) return -1;
    if (q->n_bias) memcpy(s->pbias + s->n_pbias, q->bias, sizeof *q->bias * (size_t)q->n_bias);   /* (NULL when none) */
    s->n_pbias += (size_t)q->n_bias;
    for (int i = 0; i < ban; i++)
        s->pbias[s->n_pbias++] = (sits_sample_bias_t){ i < c->n_eos ? c->eos_token_ids[i] : q->stop_ids[i - c->n_eos], -INFINITY };
    const int bad = q->n_bad ? bad_bans(q, s->pbias + s->n_pbias) : 0;   /* room for all: grown above */
    s->n_pbias += (size_t)bad;
    sp->n_bias = q->n_bias + ban + bad;
    int rep = sp->repetition_penalty > 0 && sp->repetition_penalty != 1.0f;
    if (!rep && sp->presence_penalty == 0 && sp->frequency_penalty == 0) return 0;
    /* keys: id * 2 + (generated), sorted: runs of one id, prompt occurrences first */
    int n = q->n_prompt + q->n_gen;
    if (grow((void **)&s->pkeys, &s->cap_pkeys, (size_t)n, sizeof *s->pkeys) != 0) return -1;
    for (int i = 0; i < n; i++) s->pkeys[i] = (int64_t)q->tokens[i] * 2 + (i >= q->n_prompt);
    qsort(s->pkeys, (size_t)n, sizeof *s->pkeys, cmp_i64);
    for (int i = 0; i < n;) {
        int32_t id = (int32_t)(s->pkeys[i] / 2);
        int in_prompt = 0, outs = 0;
        for (; i < n && s->pkeys[i] / 2 == id; i++) {
            if (s->pkeys[i] & 1) outs++;
            else in_prompt = 1;
        }
        if (grow((void **)&s->phist, &s->cap_phist, s->n_phist + 1, sizeof *s->phist) != 0) return -1;
        s->phist[s->n_phist++] = (sits_sample_hist_t){ id, outs, in_prompt };
        sp->n_hist++;
    }
    return 0;
}

/* [structured output] output `no` of the step is q's next token, constrained by its grammar: its mask
 * is made now into the plan, or (s->masks_late) only noted here and made by make_masks while the device
 * runs the forward pass. The grammar state follows the tokens sampled so far (step_complete feeds them). */
static sits_status_t step_mask(sits_sched_t *s, sits_req_t *q, int no, sits_sample_masks_t *m)
{
    int words = (int)SITS_GRAMMAR_MASK_WORDS(sits_grammar_vocab_size(q->gvocab));
    if (!s->masks || words != s->mask_words) {
        if (m->n > 0) return SITS_ERR_INVALID;   /* one vocabulary per scheduler */
        free(s->masks);
        free(s->mask_rows);
        free(s->mask_q);
        s->masks = malloc(sizeof(uint32_t) * (size_t)words * s->r->ep.max_seqs);   /* [max_seqs, words] */
        s->mask_rows = malloc(sizeof(int32_t) * (size_t)s->r->ep.max_seqs);
        s->mask_q = malloc(sizeof *s->mask_q * (size_t)s->r->ep.max_seqs);
        if (!s->masks || !s->mask_rows || !s->mask_q) return SITS_ERR_NOMEM;
        s->mask_words = words;
    }
    if (!q->gstate) SITS_CHECK(sits_grammar_state_create(q->grammar, q->gvocab, &q->gstate));
    if (s->masks_late) s->mask_q[m->n] = q;
    else {
        double t0 = now_s();
        SITS_CHECK(sits_grammar_state_mask(q->gstate, s->masks + (size_t)m->n * words));
        double dt = now_s() - t0;
        pthread_mutex_lock(&s->mu);
        s->stats.grammar_mask_s += dt;
        s->stats.grammar_masks++;
        pthread_mutex_unlock(&s->mu);
    }
    s->mask_rows[m->n++] = no;
    m->words = words;
    m->rows = s->mask_rows;
    m->masks = s->masks;
    return SITS_OK;
}

/* [structured output] sits_worker_t.make_masks of a step whose masks follow its plan: each noted
 * sequence's mask, in the plan's row order (the device runs the forward pass meanwhile). */
static sits_status_t make_masks(void *ctx, const uint32_t **masks_p)
{
    sits_sched_t *s = ctx;
    double t0 = now_s();
    for (int i = 0; i < s->n_mask_q; i++)
        SITS_CHECK(sits_grammar_state_mask(s->mask_q[i]->gstate, s->masks + (size_t)i * s->mask_words));
    double dt = now_s() - t0;
    pthread_mutex_lock(&s->mu);
    s->stats.grammar_mask_s += dt;
    s->stats.grammar_masks += (uint64_t)s->n_mask_q;
    s->stats.grammar_masks_overlapped += (uint64_t)s->n_mask_q;
    pthread_mutex_unlock(&s->mu);
    *masks_p = s->masks;
    return SITS_OK;
}

/* Output `no` of the step: row `row` samples q's generated token n_gen + j with q's parameters.
 * 0 ok, -1 out of memory. */
static int out_row(sits_sched_t *s, const sits_req_t *q, int no, int row, int j)
{
    s->rows[no] = row;
    s->sp[no] = q->sample;
    s->sp[no].step = (uint64_t)(q->n_gen + j);
    s->sp[no].logprobs = q->logprobs;
    s->sp[no].top_logprobs = q->top_logprobs;
    s->sp[no].lp_target = -1;
    return proc_lists(s, q, &s->sp[no], 1);   /* speculating: min_tokens is met, no grammar */
}

/* [speculative] q's verification came back: toks / lps [n_draft + 1] are its rows' samples. Accepts,
 * appends the emitted tokens one by one until one ends the request (*why_p), rolls the KV back to
 * the accepted positions (freeing blocks of rejected positions only) and registers full blocks of
 * accepted tokens in the prefix cache. Returns the tokens appended. */
static int spec_complete(sits_sched_t *s, sits_req_t *q, const int32_t *toks, const sits_logprob_t *lps,
                         sits_finish_t *why_p)
{
    sits_runner_t *r = s->r;
    int k = q->n_draft, m = sits_spec_accept(q->draft, toks, k), base = q->n_computed, e = 0;
    sits_finish_t why = SITS_FINISH_NONE;
    s->vt[q->tenant] += q->take / s->weight[q->tenant];
    q->take = 0;
    q->n_draft = 0;
    while (e <= m && why == SITS_FINISH_NONE) {
        int32_t t = toks[e];
        pthread_mutex_lock(&q->mu);
        if (q->glp) q->glp[q->n_gen] = lps[e];
        q->tokens[q->n_prompt + q->n_gen] = t;
        q->n_gen++;
        pthread_cond_broadcast(&q->cv);
        pthread_mutex_unlock(&q->mu);
        e++;
        if (!q->ignore_eos && is_stop_id(s, q, t)) why = SITS_FINISH_STOP;
        else if (q->n_gen >= q->max_tokens || q->n_prompt + q->n_gen >= r->max_model_len) why = SITS_FINISH_LENGTH;
    }
    /* KV holds the last token and the drafts; the valid ones are the last token and the accepted
     * drafts that came out before the last emitted token (which is computed next step) */
    q->n_computed = base + e;
    if (e < m + 1)
        SITS_DEBUG(SITS_SUB_SCHED, "request %llu: finished (%s) inside an accepted run: %d of %d accepted tokens emitted",
                   (unsigned long long)q->order, why == SITS_FINISH_STOP ? "stop" : "length", e, m + 1);
    q->n_blocks = sits_spec_kv_rollback(r->blocks, r->ep.block_size, q->n_computed, q->bt, q->n_blocks);
    if (s->drafter) sits_spec_dseq_rollback(s->drafter, &q->dseq, q->n_computed);
    if (s->p.prefix_caching) prefix_register(s, q);   /* full blocks below n_computed: accepted tokens only */
    q->spec_k = sits_spec_k_next(q->spec_k, s->p.spec.num_speculative_tokens, m, k, s->drafter == NULL);
    q->n_drafted += k;
    q->n_accepted += m;
    pthread_mutex_lock(&s->mu);
    s->stats.spec_draft_tokens += (uint64_t)k;
    s->stats.spec_accepted_tokens += (uint64_t)m;
    s->stats.spec_verifications++;
    pthread_mutex_unlock(&s->mu);
    *why_p = why;
    return e;
}

static void run_remove(sits_sched_t *s, sits_req_t *q);

/* q finished (why): its TPOT goes to the controller, it leaves the running set and finishes. */
static void end_running(sits_sched_t *s, sits_req_t *q, sits_finish_t why, double tnow)
{
    if (q->n_gen > 1) itl_add(s, tnow, (tnow - q->first_token_s) / (q->n_gen - 1));   /* its TPOT */
    run_remove(s, q);
    finish(s, q, why);
}

/* [min_tokens + structured output] 1 when mask[words] allows no id but eos and stop ids. */
static int mask_only_stops(const sits_sched_t *s, const sits_req_t *q, const uint32_t *mask, int words)
{
    for (int w = 0; w < words; w++) {
        uint32_t m = mask[w];
        while (m) {
            int32_t id = (int32_t)(w * 32 + __builtin_ctz(m));
            m &= m - 1;
            if (!is_stop_id(s, q, id)) return 0;
        }
    }
    return 1;
}

/* Output `no` of the step samples q's next token from token row `row`. */
static sits_status_t sample_row(sits_sched_t *s, sits_req_t *q, int row, int no, sits_sample_masks_t *masks)
{
    s->rows[no] = row;
    s->sp[no] = q->sample;
    s->sp[no].step = (uint64_t)q->n_gen;
    s->sp[no].logprobs = q->logprobs;
    s->sp[no].top_logprobs = q->top_logprobs;
    s->sp[no].lp_target = -1;
    int may_ban = 1;
    if (q->grammar) {
        SITS_CHECK(step_mask(s, q, no, masks));
        /* [min_tokens + structured output] when the grammar allows nothing but eos / stop ids (its output is
         * complete), the grammar wins over min_tokens: the output ends (banning them would leave no token).
         * (With masks_late no row has min_tokens pending: step_launch.) */
        may_ban = s->masks_late || !(q->n_gen < q->min_tokens &&
                                     mask_only_stops(s, q, masks->masks + (size_t)(masks->n - 1) * masks->words, masks->words));
    }
    if (proc_lists(s, q, &s->sp[no], may_ban) != 0) return SITS_ERR_NOMEM;
    return SITS_OK;
}

/* First half of a step: build the plan of the picked batch and broadcast it (a remote replica
 * starts computing as soon as it has it). */
static sits_status_t step_launch(sits_sched_t *s, int nb)
{
    sits_runner_t *r = s->r;
    int mb = 1, nt = 0, no = 0;
    s->n_pbias = s->n_phist = 0;
    sits_sample_masks_t masks = { 0 };
    s->t_launch = now_s();   /* a step's time includes its plan (and its masks) */
    /* [scale] block tables [nb, mb] with mb the batch's longest table, not the context's whole width
     * (max_blocks_per_seq: 8192 for a 128k context) -- the plan, its broadcast and the upload carry
     * what the step uses */
    for (int b = 0; b < nb; b++)
        if (s->batch[b]->n_blocks > mb) mb = s->batch[b]->n_blocks;
    SITS_CHECK(cow_flush(s));   /* [n > 1] the blocks this step writes that were shared are copied first */
    /* [structured output] the grammar masks follow the plan, made while the device runs the forward pass,
     * unless this rank runs no forward pass of the replica (a remote one's masks go in its plan) or some
     * row's sampling parameters depend on its mask (min_tokens pending with a grammar: mask_only_stops) */
    s->masks_late = r->engine != NULL;
    for (int b = 0; b < nb && s->masks_late; b++) {
        const sits_req_t *q = s->batch[b];
        if (q->grammar && q->n_gen < q->min_tokens) s->masks_late = 0;
        for (int k = 0; k < s->n_forks && s->masks_late; k++)
            if (s->forks[k]->fork_of == q && s->forks[k]->grammar && s->forks[k]->n_gen < s->forks[k]->min_tokens) s->masks_late = 0;
    }
    for (int b = 0; b < nb; b++) {
        sits_req_t *q = s->batch[b];
        int have = q->n_prompt + q->n_gen;   /* [speculative] positions past them hold the drafts */
        for (int j = 0; j < q->take; j++) {
            s->tok[nt] = q->n_computed + j < have ? q->tokens[q->n_computed + j] : q->draft[q->n_computed + j - have];
            s->pos[nt] = q->n_computed + j;
            s->seq[nt] = b;
            nt++;
        }
        memcpy(s->bt + (size_t)b * mb, q->bt, sizeof(int32_t) * (size_t)q->n_blocks);
        for (int j = q->n_blocks; j < mb; j++) s->bt[(size_t)b * mb + j] = -1;
        q->n_lp_rows = prompt_lp_rows(q);
        for (int j = 0; j < q->n_lp_rows; j++) {
            /* [logprobs] position n_computed + j scores prompt token n_computed + j + 1; its sampled token is dropped */
            s->rows[no] = nt - q->take + j;
            s->sp[no] = (sits_sample_params_t){ .temperature = 0.0f, .top_p = 1.0f, .logprobs = 1,
                                                .top_logprobs = q->top_logprobs, .lp_target = q->tokens[q->n_computed + j + 1] };
            no++;
        }
        if (q->n_draft > 0) {
            /* [speculative] every position is a row: row j samples generated token n_gen + j */
            for (int j = 0; j <= q->n_draft; j++, no++)
                if (out_row(s, q, no, nt - q->take + j, j) != 0) return SITS_ERR_NOMEM;
        } else if (q->n_computed + q->take == q->n_prompt + q->n_gen) {
            SITS_CHECK(sample_row(s, q, nt - 1, no++, &masks));
            for (int k = 0; k < s->n_forks; k++)   /* [n] its forks sample the same logits, each its own way */
                if (s->forks[k]->fork_of == q) SITS_CHECK(sample_row(s, s->forks[k], nt - 1, no++, &masks));
        }
    }
    /* [sampling controls] the lists may have moved while they grew: point the rows at them now */
    size_t ob = 0, oh = 0;
    for (int i = 0; i < no; i++) {
        s->sp[i].bias = s->sp[i].n_bias ? s->pbias + ob : NULL;
        s->sp[i].hist = s->sp[i].n_hist ? s->phist + oh : NULL;
        ob += (size_t)s->sp[i].n_bias;
        oh += (size_t)s->sp[i].n_hist;
    }
    s->pl = (sits_plan_t){ .cmd = SITS_PLAN_STEP, .step = s->stats.steps, .n_tokens = nt, .tokens = s->tok, .pos = s->pos,
                           .seq = s->seq, .n_seqs = nb, .max_blocks = mb, .block_tables = s->bt, .n_out = no,
                           .out_rows = s->rows, .sample = s->sp, .masks = masks, .masks_follow = s->masks_late && masks.n > 0 };
    s->n_mask_q = s->pl.masks_follow ? masks.n : 0;
    return sits_worker_send(r, &s->wk, &s->pl);
}

/* q's sampled token t (output row o of the step): appended, fed to its grammar, and q finished when it
 * ends there. */
static void take_token(sits_sched_t *s, sits_req_t *q, int32_t t, int o)
{
    sits_runner_t *r = s->r;
    double tnow = now_s();
    if (q->n_gen == 0 && q->t_first_token == 0) q->t_first_token = wall_s();
    if (q->n_gen == 0) q->first_token_s = tnow;
    q->last_token_s = tnow;
    pthread_mutex_lock(&q->mu);
    if (q->glp) q->glp[q->n_gen] = s->wk.lp[o];
    q->tokens[q->n_prompt + q->n_gen] = t;
    q->n_gen++;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    sits_finish_t why = SITS_FINISH_NONE;
    if (q->gstate && sits_grammar_state_accept(q->gstate, t) != SITS_OK) {
        SITS_ERROR(SITS_SUB_SCHED, "request %s: sampled token %d is outside its grammar's mask", q->id, t);
        why = SITS_FINISH_ERROR;
    } else if (!q->ignore_eos && is_stop_id(s, q, t)) why = SITS_FINISH_STOP;
    else if (q->n_gen >= q->max_tokens || q->n_prompt + q->n_gen >= r->max_model_len) why = SITS_FINISH_LENGTH;
    if (why != SITS_FINISH_NONE) end_running(s, q, why, tnow);
}

/* [n] Fork f of leader l, whose prompt this step computed: its prompt is in the blocks it shares. */
static void fork_complete(sits_sched_t *s, sits_req_t *f, const sits_req_t *l)
{
    f->n_computed = f->n_prompt;
    f->n_hashed = l->n_hashed;
    memcpy(f->hashes, l->hashes, sizeof(uint64_t) * (size_t)l->n_hashed);
    f->fork_of = NULL;
    if (f->plp && l->plp) {   /* [logprobs] the same prompt, the same prompt logprobs */
        pthread_mutex_lock(&f->mu);
        memcpy(f->plp, l->plp, sizeof *f->plp * (size_t)f->n_prompt);
        pthread_mutex_unlock(&f->mu);
    }
    pthread_mutex_lock(&s->mu);
    s->stats.forked_seqs++;
    pthread_mutex_unlock(&s->mu);
}

/* Second half: run the step here (or, for a remote replica, receive its tokens) and deliver them. */
static sits_status_t step_complete(sits_sched_t *s, int nb)
{
    sits_runner_t *r = s->r;
    double t_exec = now_s();
    SITS_CHECK(sits_worker_exec(r, &s->wk, &s->pl, NULL, NULL));
    double t_done = now_s(), dt = t_done - s->t_launch;
    int o = 0, gen = 0, prompt = 0;
    for (int b = 0; b < nb; b++) {
        sits_req_t *q = s->batch[b];
        if (q->n_lp_rows > 0) {
            pthread_mutex_lock(&q->mu);
            for (int j = 0; j < q->n_lp_rows; j++) q->plp[q->n_computed + j + 1] = s->wk.lp[o + j];
            pthread_mutex_unlock(&q->mu);
            o += q->n_lp_rows;
            q->n_lp_rows = 0;
        }
        if (q->n_draft > 0) {   /* [speculative] */
            sits_finish_t why;
            int k = q->n_draft;
            gen += spec_complete(s, q, s->wk.tokens + o, s->wk.lp + o, &why);
            o += k + 1;
            q->last_token_s = now_s();
            if (why != SITS_FINISH_NONE) end_running(s, q, why, q->last_token_s);
            continue;
        }
        int was_prompt = q->n_computed < q->n_prompt;
        if (was_prompt) prompt += (q->n_computed + q->take <= q->n_prompt ? q->take : q->n_prompt - q->n_computed);
        q->n_computed += q->take;
        s->vt[q->tenant] += q->take / s->weight[q->tenant];
        q->take = 0;
        if (s->p.prefix_caching) prefix_register(s, q);
        if (q->n_computed != q->n_prompt + q->n_gen) continue;  /* mid-prefill chunk */
        /* [n] the forks first: take_token may finish (and free) q */
        int lo = o++;
        for (int k = 0; k < s->n_forks; k++) {
            sits_req_t *f = s->forks[k];
            if (f->fork_of != q) continue;
            fork_complete(s, f, q);
            take_token(s, f, s->wk.tokens[o], o);
            o++;
            gen++;
        }
        take_token(s, q, s->wk.tokens[lo], lo);
        gen++;
    }
    s->n_forks = 0;
    static const double edges_ms[11] = { 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000 };
    int bucket = 11;
    for (int i = 0; i < 11; i++) if (dt * 1e3 <= edges_ms[i]) { bucket = i; break; }
    pthread_mutex_lock(&s->mu);
    s->stats.steps++;
    s->stats.step_seconds_sum += dt;
    s->stats.step_hist[bucket]++;
    s->stats.step_phase_s[SITS_PHASE_PLAN] += t_exec - s->t_launch;
    s->stats.step_phase_s[SITS_PHASE_FORWARD] += t_done - t_exec;
    s->stats.step_phase_s[SITS_PHASE_DELIVER] += now_s() - t_done;
    s->stats.prompt_tokens += (uint64_t)prompt;
    s->stats.generation_tokens += (uint64_t)gen;
    pthread_mutex_unlock(&s->mu);
    return SITS_OK;
}

/* ---- [kv move] KV migration between replicas (scheduler.h) ------------------------------------ */

sits_status_t sits_sched_set_replica(sits_sched_t *s, int role, int tp, int pp, const int32_t *world_ranks)
{
    if (tp < 1 || pp < 1 || role < SITS_SCHED_REPLICA || role > SITS_SCHED_DECODE) return SITS_ERR_INVALID;
    int32_t *r = malloc(sizeof(int32_t) * (size_t)tp * pp);
    if (!r) return SITS_ERR_NOMEM;
    memcpy(r, world_ranks, sizeof(int32_t) * (size_t)tp * pp);
    free(s->rep_ranks);
    s->rep_ranks = r;
    s->rep_tp = tp;
    s->rep_pp = pp;
    s->kv_role = role;
    return SITS_OK;
}

/* Running, between steps, with its prompt computed and its last token sampled but not yet fed back. */
static int movable(sits_req_t *q)
{
    return q->state == REQ_RUNNING && q->n_blocks > 0 && q->n_gen > 0 && q->take == 0 && q->n_computed == total_tokens(q) - 1 &&
           !is_cancelled(q);
}

static double kv_use(const sits_sched_t *s)
{
    int total = sits_kv_blocks_total(s->r->blocks);
    return total > 0 ? (double)(total - sits_kv_blocks_free_count(s->r->blocks)) / total : 1.0;
}

static void run_remove(sits_sched_t *s, sits_req_t *q)
{
    for (int i = 0; i < s->n_running; i++)
        if (s->running[i] == q) {
            memmove(s->running + i, s->running + i + 1, sizeof *s->running * (size_t)(s->n_running - i - 1));
            s->n_running--;
            return;
        }
}

/* Move qs[k] (running on src) with all their KV blocks to dst. *moved_p: 1 when the sequences left
 * src (moved, or failed over to recompute on dst); 0 when dst had no blocks for them. */
static sits_status_t kv_move(sits_sched_t *s0, sits_sched_t *src, sits_sched_t *dst, sits_req_t **qs, int k, int *moved_p)
{
    *moved_p = 0;
    int n = 0;
    for (int i = 0; i < k; i++) n += live_blocks(qs[i]);   /* [sliding window] placeholders stay placeholders */
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n * 2);
    if (!ids) return SITS_ERR_NOMEM;
    int32_t *src_ids = ids, *dst_ids = ids + n;
    if (sits_kv_blocks_alloc(dst->r->blocks, n, dst_ids) != SITS_OK) {
        free(ids);
        return SITS_OK;
    }
    for (int i = 0, o = 0; i < k; o += live_blocks(qs[i]), i++)
        memcpy(src_ids + o, qs[i]->bt + qs[i]->n_dead, sizeof(int32_t) * (size_t)live_blocks(qs[i]));
    uint32_t id = ++s0->kv_move_no;
    int every = s0->p.kv_migrate_corrupt_every;
    sits_plan_move_t m = { .role = SITS_KV_MOVE_SEND, .n_blocks = n, .src_tp = src->rep_tp, .src_pp = src->rep_pp,
                           .dst_tp = dst->rep_tp, .dst_pp = dst->rep_pp, .move_id = id,
                           .flags = every > 0 && id % (uint32_t)every == 0 ? SITS_KV_MOVE_F_CORRUPT : 0, .blocks = src_ids,
                           .src_ranks = src->rep_ranks, .dst_ranks = dst->rep_ranks };
    sits_plan_t ps = { .cmd = SITS_PLAN_KV_MOVE, .step = src->stats.steps, .move = m };
    m.role = SITS_KV_MOVE_RECV;
    m.blocks = dst_ids;
    sits_plan_t pd = { .cmd = SITS_PLAN_KV_MOVE, .step = dst->stats.steps, .move = m };
    sits_kv_move_result_t res = { 0 };
    double t0 = now_s();
    /* both orders out first (remote groups start at once), then this rank's part of each */
    sits_status_t st = sits_worker_send(src->r, &src->wk, &ps);
    if (st == SITS_OK) st = sits_worker_send(dst->r, &dst->wk, &pd);
    if (st == SITS_OK) st = sits_kv_move_run(src->r, &ps, NULL);
    if (st == SITS_OK) st = sits_kv_move_run(dst->r, &pd, &res);
    if (st != SITS_OK) {
        free(ids);
        return st;
    }
    double dt = now_s() - t0;
    for (int i = 0; i < k; i++) {
        sits_req_t *q = qs[i];
        run_remove(src, q);
        src->active[q->tenant]--;
        dst->active[q->tenant]++;
        if (!res.failed) {
            /* the sequence continues on dst where it was: same tokens, same KV, new block ids */
            sits_kv_blocks_release(src->r->blocks, live_blocks(q), q->bt + q->n_dead);
            if (src->drafter) sits_spec_dseq_reset(src->drafter, &q->dseq);   /* [speculative] */
            int o = 0;
            for (int j = 0; j < i; j++) o += live_blocks(qs[j]);
            memcpy(q->bt + q->n_dead, dst_ids + o, sizeof(int32_t) * (size_t)live_blocks(q));
            q->n_hashed = 0;   /* registered again in dst's prefix cache as it goes */
            dst->running[dst->n_running++] = q;
        } else {
            /* recompute on dst: like a preemption, at the front of its queue */
            free_blocks(src, q);
            q->state = REQ_WAITING;
            q->n_preempted++;
            memmove(dst->waiting + 1, dst->waiting, sizeof *dst->waiting * (size_t)dst->n_waiting);
            dst->waiting[0] = q;
            dst->n_waiting++;
        }
    }
    if (res.failed) sits_kv_blocks_release(dst->r->blocks, n, dst_ids);
    pthread_mutex_lock(&src->mu);
    src->stats.kv_migrations++;
    src->stats.kv_migrated_seqs += (uint64_t)k;
    src->stats.kv_migrated_blocks += (uint64_t)n;
    src->stats.kv_migrated_bytes += (uint64_t)res.bytes;
    if (res.failed) src->stats.kv_migrations_failed++;
    src->stats.kv_move_chunks += (uint64_t)res.chunks;
    pthread_mutex_unlock(&src->mu);
    if (res.failed)
        SITS_WARN(SITS_SUB_KV, "kv move %u: replica %d -> %d failed (a message was rejected); %d sequence%s recompute on replica %d",
                  id, src->index, dst->index, k, k > 1 ? "s" : "", dst->index);
    else
        SITS_INFO(SITS_SUB_KV, "kv move %u: %d sequence%s, %d blocks, replica %d -> %d, %lld bytes in %d chunk%s, %.2f ms", id,
                  k, k > 1 ? "s" : "", n, src->index, dst->index, (long long)res.bytes, res.chunks, res.chunks == 1 ? "" : "s",
                  dt * 1e3);
    free(ids);
    *moved_p = 1;
    return SITS_OK;
}

/* Room on d for k more running sequences (and k more waiting ones, for the recompute fallback). */
static int seq_room(const sits_sched_t *d, int k)
{
    return d->n_running + k <= d->p.max_num_seqs && d->n_waiting + k <= d->p.max_waiting + d->p.max_num_seqs;
}

/* After a step: the moves of the policy in scheduler.h. iter: steps run so far. *moved_p: some moved. */
static sits_status_t kv_rebalance(sits_sched_t **ss, int n, uint64_t iter, int *moved_p)
{
    *moved_p = 0;
    for (int i = 0; i < n; i++) if (!ss[i]->rep_ranks) return SITS_OK;
    if (n < 2) return SITS_OK;
    sits_sched_t *s0 = ss[0];
    if (s0->kv_role == SITS_SCHED_PREFILL) {
        /* prefill -> decode: every sequence whose first token is out, oldest first, as many as fit */
        sits_sched_t *d = ss[1];
        sits_req_t **qs = malloc(sizeof *qs * (size_t)(s0->n_running + 1));
        if (!qs) return SITS_ERR_NOMEM;
        int k = 0, blocks = 0, free_b = sits_kv_blocks_free_count(d->r->blocks);
        for (int i = 0; i < s0->n_running; i++) {
            sits_req_t *q = s0->running[i];
            if (!movable(q) || !seq_room(d, k + 1) || blocks + live_blocks(q) > free_b) continue;
            qs[k++] = q;
            blocks += live_blocks(q);
        }
        sits_status_t st = k > 0 ? kv_move(s0, s0, d, qs, k, moved_p) : SITS_OK;
        free(qs);
        return st;
    }
    int every = s0->p.kv_migrate_every;
    double thr = s0->p.kv_migrate_threshold;
    if (every > 0 && iter > 0 && iter % (uint64_t)every == 0) {
        /* forced (test knob): the youngest movable sequence of a replica taken in turn, to the
         * replica with the most free blocks */
        for (int t = 0; t < n; t++) {
            sits_sched_t *a = ss[(iter / (uint64_t)every + (uint64_t)t) % (uint64_t)n], *b = NULL;
            sits_req_t *q = NULL;
            for (int i = a->n_running - 1; i >= 0 && !q; i--) if (movable(a->running[i])) q = a->running[i];
            if (!q) continue;
            for (int j = 0; j < n; j++)
                if (ss[j] != a && seq_room(ss[j], 1) &&
                    (!b || sits_kv_blocks_free_count(ss[j]->r->blocks) > sits_kv_blocks_free_count(b->r->blocks)))
                    b = ss[j];
            if (b && sits_kv_blocks_free_count(b->r->blocks) >= live_blocks(q)) return kv_move(s0, a, b, &q, 1, moved_p);
        }
        return SITS_OK;
    }
    if (thr <= 0 || thr >= 1) return SITS_OK;
    /* threshold: the fullest replica above it hands the largest of its movable sequences that keeps
     * the least used replica at or below the threshold to that replica */
    sits_sched_t *a = NULL, *b = NULL;
    for (int i = 0; i < n; i++) {
        if (!a || kv_use(ss[i]) > kv_use(a)) a = ss[i];
        if (!b || kv_use(ss[i]) < kv_use(b)) b = ss[i];
    }
    if (a == b || kv_use(a) <= thr || !seq_room(b, 1)) return SITS_OK;
    sits_req_t *q = NULL;
    int tb = sits_kv_blocks_total(b->r->blocks), room = (int)(thr * tb) - (tb - sits_kv_blocks_free_count(b->r->blocks));
    for (int i = 0; i < a->n_running; i++) {
        sits_req_t *c = a->running[i];
        if (movable(c) && live_blocks(c) <= room && (!q || live_blocks(c) > live_blocks(q))) q = c;
    }
    return q ? kv_move(s0, a, b, &q, 1, moved_p) : SITS_OK;
}
/* ---- end kv move ---- */

sits_status_t sits_sched_run(sits_sched_t *s, volatile sig_atomic_t *stop, void (*on_stop)(void *), void *ctx)
{
    return sits_sched_run_many(&s, 1, stop, on_stop, NULL, ctx);
}

static int busy(const sits_sched_t *s) { return s->n_running > 0 || s->n_waiting > 0; }

sits_status_t sits_sched_run_many(sits_sched_t **ss, int n, volatile sig_atomic_t *stop, void (*on_stop)(void *),
                                  void (*on_drained)(void *), void *ctx)
{
    sits_status_t st = SITS_OK;
    double drain_until = 0;
    uint64_t kv_iter = 0;   /* [kv move] steps run, for kv_migrate_every */
    int *nb = calloc((size_t)n, sizeof(int));
    if (!nb) return SITS_ERR_NOMEM;
    for (int i = 0; i < n; i++) ss[i]->index = i;
    for (;;) {
        if (*stop && drain_until == 0) {
            drain_until = now_s() + ss[0]->p.drain_timeout_s;
            int running = 0, waiting = 0;
            for (int i = 0; i < n; i++) {
                pthread_mutex_lock(&ss[i]->mu);
                ss[i]->stopping = 1;
                waiting += ss[i]->n_inbox;
                pthread_mutex_unlock(&ss[i]->mu);
                running += ss[i]->n_running;
                waiting += ss[i]->n_waiting;
            }
            if (on_stop) on_stop(ctx);
            SITS_WARN(SITS_SUB_SCHED, "stopping: draining %d running and %d waiting requests (up to %.0f s)", running, waiting,
                      ss[0]->p.drain_timeout_s);
        }
        int any_busy = 0, any_step = 0;
        for (int i = 0; i < n; i++) {
            collect(ss[i]);
            any_busy |= busy(ss[i]);
        }
        if (drain_until > 0 && (now_s() > drain_until || !any_busy || *stop >= 2)) break;   /* 2: a second signal */
        /* launch every replica's step first (remote replicas compute meanwhile), then complete them,
         * the local one (replica 0, whose forward pass runs on this rank) first */
        for (int i = 0; i < n && st == SITS_OK; i++) {
            double t_sched = now_s();
            controller_tick(ss[i], t_sched);
            int n_tokens = 0;
            nb[i] = schedule(ss[i], &n_tokens);
            update_gauges(ss[i]);
            if (nb[i] > 0) {   /* [scale] a step's scheduling (idle polls are not a step's) */
                pthread_mutex_lock(&ss[i]->mu);
                ss[i]->stats.step_phase_s[SITS_PHASE_SCHEDULE] += now_s() - t_sched;
                pthread_mutex_unlock(&ss[i]->mu);
            }
            if (ss[i]->fatal != SITS_OK) {   /* [kv offload] */
                st = ss[i]->fatal;
                nb[i] = 0;
            } else if (nb[i] > 0) {
                any_step = 1;
                st = step_launch(ss[i], nb[i]);
            }
        }
        for (int i = 0; i < n && st == SITS_OK; i++)
            if (nb[i] > 0) st = step_complete(ss[i], nb[i]);
        if (st == SITS_OK && n > 1) {
            /* [kv move] between steps: rebalance the replicas / hand prefilled sequences to decode */
            int moved = 0;
            if (any_step) kv_iter++;
            st = kv_rebalance(ss, n, any_step ? kv_iter : 0, &moved);
            any_step |= moved;
        }
        if (st != SITS_OK) {
            SITS_ERROR(SITS_SUB_SCHED, "step failed: %s; failing every request", sits_status_str(st));
            break;
        }
        if (!any_step) {
            /* idle: wait for a request (the router wakes replica 0's condition) or the stop flag, polled */
            sits_sched_t *s0 = ss[0];
            pthread_mutex_lock(&s0->mu);
            if (s0->n_inbox == 0) {
                struct timespec dl;
                clock_gettime(CLOCK_REALTIME, &dl);
                dl.tv_nsec += (n > 1 ? 5 : 50) * 1000000L;
                if (dl.tv_nsec >= 1000000000L) { dl.tv_sec++; dl.tv_nsec -= 1000000000L; }
                pthread_cond_timedwait(&s0->cv, &s0->mu, &dl);
            }
            pthread_mutex_unlock(&s0->mu);
        }
    }
    if (ss[0]->stats.dev_allocs_after_start > 0)   /* [memory plan] the step path allocated after all */
        SITS_WARN(SITS_SUB_SCHED, "%llu device allocations (%.1f MiB) after start-up (the memory plan missed them)",
                  (unsigned long long)ss[0]->stats.dev_allocs_after_start,
                  (double)ss[0]->stats.dev_alloc_bytes_after_start / (1 << 20));
    /* whatever is left is cancelled (drain timeout) or failed (engine error); then every replica stops */
    sits_status_t st2 = SITS_OK;
    for (int i = 0; i < n; i++) {
        sits_sched_t *s = ss[i];
        collect(s);
        sits_finish_t why = st == SITS_OK ? SITS_FINISH_CANCELLED : SITS_FINISH_ERROR;
        while (s->n_running > 0) finish(s, s->running[--s->n_running], why);
        while (s->n_waiting > 0) finish(s, s->waiting[--s->n_waiting], why);
        update_gauges(s);
    }
    if (on_drained) on_drained(ctx);   /* every request has its end: the front-end delivers the responses */
    for (int i = 0; i < n; i++) {
        sits_plan_t stop_plan = { .cmd = SITS_PLAN_STOP };
        sits_status_t e = sits_worker_send(ss[i]->r, &ss[i]->wk, &stop_plan);
        if (st2 == SITS_OK) st2 = e;
    }
    free(nb);
    return st != SITS_OK ? st : st2;
}

/* ---- data-parallel router: one front-end, several replicas ------------------------------------ */

struct sits_router {
    sits_sched_t **s;
    int n;
};

sits_status_t sits_router_create(sits_sched_t **scheds, int n, sits_router_t **rt_p)
{
    sits_router_t *rt = calloc(1, sizeof *rt);
    if (!rt) return SITS_ERR_NOMEM;
    rt->s = scheds;
    rt->n = n;
    *rt_p = rt;
    return SITS_OK;
}

void sits_router_destroy(sits_router_t *rt) { free(rt); }

/* The replica with the fewest queued requests, then the most free KV blocks. */
static sits_status_t router_submit(void *router, const sits_req_params_t *p, sits_req_t **req_p, char *err, size_t err_len)
{
    sits_router_t *rt = router;
    int best = 0, best_q = 0, best_free = 0;
    for (int i = 0; i < rt->n; i++) {
        sits_sched_t *s = rt->s[i];
        pthread_mutex_lock(&s->mu);
        int q = s->stats.waiting + s->stats.running, fr = s->stats.kv_blocks_free;
        pthread_mutex_unlock(&s->mu);
        if (i == 0 || q < best_q || (q == best_q && fr > best_free)) { best = i; best_q = q; best_free = fr; }
    }
    if (rt->s[0]->kv_role == SITS_SCHED_PREFILL) best = 0;   /* [kv move] --disaggregate: requests start on the prefill ranks */
    for (int i = 0; p->share_prompt_with && i < rt->n; i++)   /* [n] where the prompt's blocks are */
        if (rt->s[i] == p->share_prompt_with->owner) best = i;
    sits_status_t st = api_submit(rt->s[best], p, req_p, err, err_len);
    if (st == SITS_OK) {
        /* count it at once so that a burst spreads over the replicas; wake the run loop */
        pthread_mutex_lock(&rt->s[best]->mu);
        rt->s[best]->stats.running++;
        pthread_mutex_unlock(&rt->s[best]->mu);
        if (best != 0) {
            pthread_mutex_lock(&rt->s[0]->mu);
            pthread_cond_signal(&rt->s[0]->cv);
            pthread_mutex_unlock(&rt->s[0]->mu);
        }
    }
    return st;
}

/* Sum of the replicas' statistics (gauges and counters); the controller's ITL is the worst one. */
static void router_stats(void *router, sits_sched_stats_t *out)
{
    sits_router_t *rt = router;
    memset(out, 0, sizeof *out);
    for (int i = 0; i < rt->n; i++) {
        sits_sched_stats_t st;
        api_stats(rt->s[i], &st);
        out->running += st.running;
        out->waiting += st.waiting;
        out->swapped += st.swapped;
        out->kv_blocks_total += st.kv_blocks_total;
        out->kv_blocks_free += st.kv_blocks_free;
        out->max_model_len = st.max_model_len;
        out->preemptions += st.preemptions;
        out->steps += st.steps;
        out->prompt_tokens += st.prompt_tokens;
        out->generation_tokens += st.generation_tokens;
        out->forked_seqs += st.forked_seqs;
        out->kv_blocks_copied += st.kv_blocks_copied;
        out->kv_swa_freed_blocks += st.kv_swa_freed_blocks;
        out->step_seconds_sum += st.step_seconds_sum;
        for (int f = 0; f < SITS_PHASES; f++) out->step_phase_s[f] += st.step_phase_s[f];
        out->grammar_masks += st.grammar_masks;
        out->grammar_masks_overlapped += st.grammar_masks_overlapped;
        out->grammar_mask_s += st.grammar_mask_s;
        for (int b = 0; b < 12; b++) out->step_hist[b] += st.step_hist[b];
        out->prefix_query_tokens += st.prefix_query_tokens;
        out->prefix_hit_tokens += st.prefix_hit_tokens;
        out->kv_blocks_cached += st.kv_blocks_cached;
        out->allowed_seqs += st.allowed_seqs;
        out->allowed_tokens += st.allowed_tokens;
        if (st.itl_p99_ms > out->itl_p99_ms) out->itl_p99_ms = st.itl_p99_ms;
        out->kv_swap_out += st.kv_swap_out;
        out->kv_swap_in += st.kv_swap_in;
        out->kv_swap_failed += st.kv_swap_failed;
        out->kv_swap_prefetched += st.kv_swap_prefetched;
        for (int t = 0; t < 2; t++) {
            out->kv_swap_out_bytes[t] += st.kv_swap_out_bytes[t];
            out->kv_swap_in_bytes[t] += st.kv_swap_in_bytes[t];
        }
        out->logits_downloads += st.logits_downloads;
        out->device_logprob_steps += st.device_logprob_steps;
        out->kv_migrations += st.kv_migrations;   /* [kv move] */
        out->kv_migrated_seqs += st.kv_migrated_seqs;
        out->kv_migrated_blocks += st.kv_migrated_blocks;
        out->kv_migrated_bytes += st.kv_migrated_bytes;
        out->kv_migrations_failed += st.kv_migrations_failed;
        out->kv_move_chunks += st.kv_move_chunks;
        /* [memory plan] the leader's backend is replica 0's (the shadows of the others have none) */
        out->dev_allocs_after_start += st.dev_allocs_after_start;
        out->dev_alloc_bytes_after_start += st.dev_alloc_bytes_after_start;
        out->spec_drafter = st.spec_drafter;   /* [speculative] */
        out->spec_draft_tokens += st.spec_draft_tokens;
        out->spec_accepted_tokens += st.spec_accepted_tokens;
        out->spec_verifications += st.spec_verifications;
        out->spec_draft_kv_blocks_used = st.spec_draft_kv_blocks_used;   /* one draft model: the same pool */
        if (st.moe_experts > out->moe_experts) out->moe_experts = st.moe_experts;   /* [moe] */
        for (int x = 0; x < st.moe_experts; x++) out->moe_expert_tokens[x] += st.moe_expert_tokens[x];
    }
}

const sits_sched_api_t sits_router_api = {
    .submit = router_submit, .next = api_next, .cancel = api_cancel, .release = api_release, .stats = router_stats,
    .logprobs = api_logprobs, .cached_tokens = api_cached_tokens,
};
