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
 * KV offload (kv_offload, --kv-offload-threshold T): preemption swaps instead of recomputing. At
 * the start of each step, while more than T of the KV blocks are in use (and more than one sequence
 * runs), the least recently active running sequence (the one that got work longest ago; among
 * equals the youngest) is swapped out: every rank copies the blocks holding its computed tokens
 * into its offload tiers (src/sched/swap.h), its blocks are freed and it goes to the front of the
 * waiting queue with its tokens. A sequence that needs a block when none is free is swapped out the
 * same way. Admission (new or swapped-out sequences) then keeps use at or below T unless nothing
 * runs; a swapped-out sequence is admitted by allocating blocks and having every rank load its
 * blocks back (the swap orders go out before the step's plan), and continues exactly where it
 * was. Restores overlap other work when they can: when the next sequence to admit is swapped out
 * and would be admitted now while others run, the leader first sends only a prefetch order for it
 * (the ranks read its bytes from their tiers on a background thread during this step) and admits
 * nothing more this step; its restore at a later step then finds the bytes in host memory (with
 * nothing running it is restored at once). Any failure of a swap on any rank (tier full, disk
 * error, bad checksum) makes the ranks agree to forget that copy: the sequence is preempted by
 * recompute instead (a failed prefetch shows at the restore, which fails). Without offload T
 * plays no part.
 *
 * Prefix caching: every full block a sequence computes is registered under the hash of its tokens
 * and its parent's hash; a request admitted later starts from the longest run of cached blocks
 * matching its tokens (never the block holding its last token, so shared blocks are never written)
 * and computes only the rest. Outputs are the same with and without it.
 *
 * Sliding window: when every layer of the model is a sliding-window layer of window W
 * (sits_model_kv_window), a sequence gives back the leading blocks whose every position is older
 * than n_computed - W + 1 (the first position the next token reads) whenever it gets work; their
 * block-table entries become -1 placeholders that no kernel reads (a sequence's table keeps its
 * length, so positions map to entries as before). Placeholders are never registered in the prefix
 * cache nor shared, copied, swapped (a swap slot holds the blocks after them) or moved; forks, shared
 * prompts and moved sequences keep them. A sequence then holds at most
 * (max_num_batched_tokens + W - 1) / block_size + 2 blocks, which is what admission asks the pool
 * for. Counted in the stats (kv_swa_freed_blocks). Models with both full and sliding layers (Gemma
 * 2/3) keep every block: one block table serves all layers.
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
#include "spec/spec.h"
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
    int kv_offload;              /* [kv offload] the ranks have offload tiers: preempt by swapping (see above) */
    double kv_offload_threshold; /* [kv offload] share of KV blocks in use beyond which running sequences swap out */
    /* [kv move] between replicas (sits_sched_run_many, see "KV migration" below) */
    double kv_migrate_threshold; /* a replica using more than this share of its KV blocks hands sequences to one with room */
    int kv_migrate_every;        /* test knob: also force one migration every this many steps (0: off) */
    int kv_migrate_corrupt_every;/* test knob: corrupt every this-many-th move's payload (0: off) */
    sits_spec_config_t spec;     /* [speculative] --speculative-config (method OFF: none); see "Speculative decoding" below */
    sits_runner_t *spec_draft;   /* [speculative] method DRAFT: the draft model's runner on this leader (not owned) */
} sits_sched_params_t;

/* Speculative decoding (spec.method != OFF; src/spec/spec.h for the acceptance rule). After the
 * batch is picked, each decoding sequence that may speculate -- the request did not opt out, and it
 * has no penalties (presence / frequency / repetition), no grammar and no pending min_tokens -- asks
 * the drafter for up to its current k drafts (k starts at num_speculative_tokens and adapts by
 * sits_spec_k_next), never more than fit in its max_tokens and the model's context, the step's token
 * budget, its output rows (max_num_seqs) and the free KV blocks (drafts never preempt anything).
 * The step then carries its last token and the drafts (k + 1 positions, KV written for all) with
 * every position an output row; the leader accepts, appends the accepted drafts and the target's
 * token one by one (eos, stop ids and max_tokens end the run where they land), and rolls back:
 * n_computed covers the last token and the accepted drafts, blocks holding only rejected positions
 * are freed, and the prefix cache registers only blocks of accepted tokens. Counted in the stats
 * (spec_*). With pipeline parallelism the last stage samples every row and sends the tokens back as
 * for any step, so nothing differs. The draft-model drafter (spec_draft) proposes for all the step's
 * speculating sequences at once, after their k are set; its per-sequence KV (spec.h) is rolled back
 * with the target's after each verification and dropped whenever the sequence's target KV is
 * (finish, preemption, swap-out, a move to another replica). */
typedef struct sits_sched sits_sched_t;

sits_status_t sits_sched_create(const sits_sched_params_t *p, sits_runner_t *r, sits_sched_t **s_p);
void sits_sched_destroy(sits_sched_t *s);

/* [kv move] KV migration. With several replicas (sits_sched_run_many) and every replica described
 * here (its TP and pipeline sizes and its world ranks [stage][tp rank]), after each step the
 * front-end moves running, decoding sequences with all their KV blocks between replicas
 * (src/sched/kvmove.h): when a replica uses more than kv_migrate_threshold of its blocks, the
 * largest of its movable sequences that keeps the least used replica at or below the threshold goes
 * there (one per step); kv_migrate_every forces a move every N steps (tests). role SITS_SCHED_PREFILL /
 * SITS_SCHED_DECODE (--disaggregate, replicas 0 and 1): requests are routed only to the prefill
 * replica, which never decodes: each sequence moves to the decode replica as soon as its prompt is
 * computed and its first token sampled (it waits while the decode replica has no room). A move that
 * fails (a rejected message) frees the destination's blocks and the sequence recomputes there
 * (preemption by recompute: the same output). Counted in the stats (kv_migrations ...). */
enum { SITS_SCHED_REPLICA = 0, SITS_SCHED_PREFILL = 1, SITS_SCHED_DECODE = 2 };
sits_status_t sits_sched_set_replica(sits_sched_t *s, int role, int tp, int pp, const int32_t *world_ranks);

/* Runs steps until *stop becomes non-zero and the running requests drained (or the drain timeout
 * passed: the rest are cancelled); then sends the followers a STOP plan. on_stop(ctx) is called once
 * when the stop is first seen (the server stops admitting). *stop >= 2 (a second signal) ends the
 * drain at once: what still runs is cancelled. sits_sched_run_many calls on_drained(ctx) (may be
 * NULL) once every request has finished, before the followers get their STOP plan: the front-end
 * delivers the last responses there, so that the ranks stop only after the clients have them. */
sits_status_t sits_sched_run(sits_sched_t *s, volatile sig_atomic_t *stop, void (*on_stop)(void *), void *ctx);

/* Data parallelism: the same loop over several schedulers, one per replica (replica 0 local, the
 * others driving remote replicas through shadow runners, sits_runner_create_shadow). Every step
 * launches all replicas' plans first and then completes them, so the replicas compute at once. */
sits_status_t sits_sched_run_many(sits_sched_t **scheds, int n, volatile sig_atomic_t *stop, void (*on_stop)(void *),
                                  void (*on_drained)(void *), void *ctx);

/* The front-end's view of several replicas: submit routes a request to the replica with the fewest
 * queued requests (then the most free KV blocks); statistics are summed. Use with sits_router_api. */
typedef struct sits_router sits_router_t;
sits_status_t sits_router_create(sits_sched_t **scheds, int n, sits_router_t **rt_p);
void sits_router_destroy(sits_router_t *rt);
extern const sits_sched_api_t sits_router_api;

#endif
