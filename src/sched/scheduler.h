/* scheduler.h -- the leader's continuous-batching scheduler (iteration-level batching).
 *
 * Each step it takes, oldest first, one token of every running sequence that is decoding and
 * the next chunk of every sequence still prefilling, then admits waiting requests (FCFS) while the
 * token budget (max_num_batched_tokens), the sequence limit (max_num_seqs) and the free KV blocks
 * allow. Prompts longer than the budget are prefilled in chunks mixed with decodes. When a running
 * sequence needs a block and none is free, the youngest running sequence is preempted by
 * recompute: its blocks are freed and it goes back to the front of the queue with its prompt and
 * the tokens generated so far; it resumes with exactly the tokens it would have produced (its
 * sampler counters do not move). The step becomes a plan that every rank of the TP group runs.
 *
 * Prefix caching: every full block a sequence computes is registered under the hash of its tokens
 * and its parent's hash; a request admitted later starts from the longest run of cached blocks
 * matching its tokens (never the block holding its last token, so shared blocks are never written)
 * and computes only the rest. Outputs are the same with and without it.
 *
 * HTTP threads use the thread-safe api in sched.h; everything else runs on the leader's main
 * thread inside sits_sched_run. */
#ifndef SITS_SCHED_SCHEDULER_H
#define SITS_SCHED_SCHEDULER_H

#include <signal.h>
#include <stdio.h>
#include "sched/generate.h"
#include "sched/sched.h"
#include "sched/tenants.h"
#include "util/otlp.h"

typedef struct {
    int max_num_seqs;            /* <= runner max_seqs */
    int max_num_batched_tokens;  /* <= runner max_tokens */
    int max_waiting;             /* queued requests before submit says busy */
    double drain_timeout_s;      /* after a stop request: finish running requests for this long, then cancel */
    int prefix_caching;          /* share full KV blocks of identical prefixes (see kv/blocks.h) */
    double target_tpot_p99_ms;   /* adaptive batch controller target (0: off) */
    double controller_interval_s;
    const sits_tenants_t *tenants; /* NULL: one default tenant */
    FILE *trace;                 /* --trace-file: one JSON line per finished request (NULL: off) */
    sits_otlp_t *otlp;           /* --otlp-endpoint: the same timeline as OTLP spans (NULL: off) */
} sits_sched_params_t;

typedef struct sits_sched sits_sched_t;

sits_status_t sits_sched_create(const sits_sched_params_t *p, sits_runner_t *r, sits_sched_t **s_p);
void sits_sched_destroy(sits_sched_t *s);

/* Runs steps until *stop becomes non-zero and the running requests drained (or the drain timeout
 * passed: the rest are cancelled); then sends the followers a STOP plan. on_stop(ctx) is called once
 * when the stop is first seen (the server stops admitting). */
sits_status_t sits_sched_run(sits_sched_t *s, volatile sig_atomic_t *stop, void (*on_stop)(void *), void *ctx);

/* Data parallelism: the same loop over several schedulers, one per replica (replica 0 local, the
 * others driving remote replicas through shadow runners, sits_runner_create_shadow). Every step
 * launches all replicas' plans first and then completes them, so the replicas compute at once. */
sits_status_t sits_sched_run_many(sits_sched_t **scheds, int n, volatile sig_atomic_t *stop, void (*on_stop)(void *),
                                  void *ctx);

/* The front-end's view of several replicas: submit routes a request to the replica with the fewest
 * queued requests (then the most free KV blocks); statistics are summed. Use with sits_router_api. */
typedef struct sits_router sits_router_t;
sits_status_t sits_router_create(sits_sched_t **scheds, int n, sits_router_t **rt_p);
void sits_router_destroy(sits_router_t *rt);
extern const sits_sched_api_t sits_router_api;

#endif
