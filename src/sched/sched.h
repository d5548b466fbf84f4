/* sched.h -- the leader's continuous-batching scheduler, as the HTTP front-end sees it.
 *
 * The scheduler runs on the leader's main thread (it drives every rank of the TP group with step
 * plans). HTTP threads talk to it only through the functions of sits_sched_api_t, which are
 * thread-safe: they submit a request, then wait for its tokens, and cancel or release it.
 * The server is given the api table and an opaque scheduler pointer so that its tests can run
 * against a fake scheduler.
 *
 * Request lifetime: submit -> (tokens delivered by next()) -> finish reason -> release. A request
 * the client abandons is cancelled (its KV blocks are freed at the next step) and released. */
#ifndef SITS_SCHED_SCHED_H
#define SITS_SCHED_SCHED_H

#include <stddef.h>
#include <stdint.h>
#include "engine/sample.h"
#include "util/status.h"

typedef enum {
    SITS_FINISH_NONE = 0,    /* still running */
    SITS_FINISH_STOP,        /* an eos / stop id was generated (it is delivered as the last token) */
    SITS_FINISH_LENGTH,      /* max_tokens reached, or the model's context length */
    SITS_FINISH_CANCELLED,   /* cancelled by the client side or by shutdown */
    SITS_FINISH_ERROR        /* the engine failed; the request's output is incomplete */
} sits_finish_t;

typedef struct sits_req sits_req_t;

typedef struct {
    const int32_t *prompt;       /* copied by submit */
    int n_prompt;
    int max_tokens;              /* >= 1; submit clamps nothing: the server validates */
    sits_sample_params_t sample; /* step is ignored; seed is set by the server */
    int ignore_eos;
    const int32_t *stop_ids;     /* extra ids that end generation (besides the model's eos ids); copied */
    int n_stop_ids;
    int tenant;                  /* index in the tenants table (0 without a tenants file) */
    const char *id;              /* the API's request id, for the trace file (copied; may be NULL) */
    /* [logprobs] logprobs: each generated token's log-probability and top_logprobs (0..20) best
     * alternatives; prompt_logprobs: the same for every prompt token after the first (echo). A request
     * with prompt_logprobs does not start from the prefix cache (its prompt's logits are needed). */
    int logprobs, top_logprobs, prompt_logprobs;
    /* [sampling controls] sample's penalties and min_p apply as sample.h says; bias[n_bias] (copied;
     * ids in the vocabulary) is logit_bias; min_tokens bans the eos and stop ids until that many
     * tokens were generated -- except at a step where the grammar allows nothing else (the grammar's
     * end wins: the output ends). */
    const sits_sample_bias_t *bias;
    int n_bias;
    int min_tokens;
    /* [bad_words] vLLM's bad_words as token sequences (copied): word b is bad_ids[bad_off[b] .. bad_off[b + 1]), each of
     * one id or more; at every step the last id of a word is banned where the generated tokens (not the prompt) end with
     * the ids before it -- a word of one id always (vLLM's rule) */
    const int32_t *bad_ids, *bad_off;
    int n_bad;
    /* [n] a request of the same prompt submitted before (n > 1: choice 0), or NULL; n_sharing: on that
     * first request, how many requests will name it here (they are submitted right after it; it is
     * not started before they are in). The prompt is computed once: when its last chunk runs, the
     * others fork off it -- they share its blocks (ref-counted; the last partial block is copied
     * when first written, copy on write) and sample their first token from the same logits, each with
     * its own parameters. One that could not fork then (no room in the batch) starts later from the
     * first one's blocks and computes the last prompt token only. */
    sits_req_t *share_prompt_with;
    int n_sharing;
    /* [structured output] the grammar the output must follow (NULL: unconstrained) and the vocabulary's
     * trie (its vocab size is the model's). A successful submit takes ownership of grammar (destroyed with
     * the request); the scheduler thread alone touches it: it computes each step's allowed-token mask,
     * which travels in the step plan to every rank, and feeds the sampled token back. */
    struct sits_grammar *grammar;
    const struct sits_grammar_vocab *grammar_vocab;
    /* [speculative] 1: never draft for this request (the API's "speculative": false) even when the
     * server runs with --speculative-config */
    int no_speculation;
    /* [prefix cache] vLLM's cache_salt (0: none): the request's blocks are looked up and registered under hashes chained
     * from it, so a request with another salt (or none) never starts from them -- what one user sent cannot be probed
     * through another's time to first token */
    uint64_t cache_salt;
} sits_req_params_t;


#define SITS_MOE_METRIC_EXPERTS 256   /* [moe] most experts /metrics reports (one series each) */

typedef struct {
    /* gauges */
    int running, waiting, swapped;
    int kv_blocks_total, kv_blocks_free;
    int max_model_len;
    /* counters since start */
    uint64_t preemptions;
    uint64_t prefix_query_tokens;          /* prompt tokens looked up in the prefix cache */
    uint64_t prefix_hit_tokens;            /* of which found cached (not recomputed) */
    int kv_blocks_cached;                  /* blocks registered in the prefix cache */
    /* adaptive batch controller */
    int allowed_seqs, allowed_tokens;      /* current allowances (max when the controller is off) */
    double itl_p99_ms;                     /* windowed P99 inter-token latency at the last tick (0: none yet) */
    uint64_t steps;
    uint64_t prompt_tokens, generation_tokens;   /* prompt tokens computed in steps (a shared prompt once), sampled tokens */
    /* [n] sequences forked off a shared prompt's last chunk, KV blocks copied on write */
    uint64_t forked_seqs, kv_blocks_copied;
    /* [sliding window] KV blocks sequences gave back because they fell out of every layer's window */
    uint64_t kv_swa_freed_blocks;
    double step_seconds_sum;               /* total time in steps */
    uint64_t step_hist[12];                /* steps by duration: <= 1,2,5,10,20,50,100,200,500,1000,2000 ms, +inf */
    /* [scale] where the leader's time per step goes, summed over steps (seconds): SITS_PHASE_SCHEDULE
     * admission and the batch choice (collect, controller, schedule), _PLAN the step's inputs (tokens,
     * block tables, sampling lists, grammar masks) and their broadcast to the ranks, _FORWARD the forward
     * pass and sampling (sits_worker_exec: device work and the host's launch of it), _DELIVER the sampled
     * tokens handed to their requests (stops, finishes). Everything but _FORWARD is host work on the
     * critical path of a step. */
    double step_phase_s[4];
    /* [structured output] grammar masks made (one per constrained output row), the host time making them,
     * and the masks made while the device ran the step's forward pass (after the plan, not in it) */
    uint64_t grammar_masks, grammar_masks_overlapped;
    double grammar_mask_s;
    /* [kv offload] sequences swapped out / back in, swaps that failed on some rank (the sequence then
     * recomputed), and the raw KV bytes they moved per tier [host, disk], summed over the replica's ranks;
     * kv_swap_prefetched: swap-ins whose tier reads were prefetched (overlapped with earlier steps) */
    uint64_t kv_swap_out, kv_swap_in, kv_swap_failed, kv_swap_prefetched;
    uint64_t kv_swap_out_bytes[2], kv_swap_in_bytes[2];
    /* [kv move] moves out of this replica (to another replica / prefill -> decode), the sequences and
     * KV blocks they carried, the message bytes received, and moves that failed (then recomputed);
     * the exchanges they took (a move larger than the staging, --kv-move-buffer, goes in chunks) */
    uint64_t kv_migrations, kv_migrated_seqs, kv_migrated_blocks, kv_migrated_bytes, kv_migrations_failed;
    uint64_t kv_move_chunks;
    /* [memory plan] allocations the leader's backend made since the scheduler was created (cudaMalloc;
     * the CPU backend's alloc), and their bytes: the step path and KV moves must make none */
    uint64_t dev_allocs_after_start, dev_alloc_bytes_after_start;
    /* [logprobs + sampling controls] the leader's engine: downloads of a step's whole [n, vocab shard]
     * logits to the host (only the host sampler's fallbacks make them: stays 0 for logprobs, penalties,
     * bias, min_p), and steps whose logprobs came from the device records */
    uint64_t logits_downloads, device_logprob_steps;
    /* [speculative] the drafter in use ("" when off), tokens it drafted and of those the verification
     * accepted, and the verification steps' speculating sequences (one per sequence per step) */
    const char *spec_drafter;
    uint64_t spec_draft_tokens, spec_accepted_tokens, spec_verifications;
    int spec_draft_kv_blocks_used;         /* the draft model's KV blocks held by sequences (draft_model) */
    /* [moe] load balance: tokens routed to each expert since start, summed over the leader's MoE layers
     * (and over the replicas with --dp); the first SITS_MOE_METRIC_EXPERTS experts of moe_experts */
    int moe_experts;
    uint64_t moe_expert_tokens[SITS_MOE_METRIC_EXPERTS];
} sits_sched_stats_t;

enum { SITS_PHASE_SCHEDULE, SITS_PHASE_PLAN, SITS_PHASE_FORWARD, SITS_PHASE_DELIVER, SITS_PHASES };

typedef struct sits_sched_api {
    /* SITS_ERR_BUSY: too many waiting requests (answer 429/503 with Retry-After);
     * SITS_ERR_INVALID: prompt + max_tokens longer than the model's context (message in err);
     * SITS_ERR_UNSUPPORTED: a feature this deployment cannot serve (message in err). */
    sits_status_t (*submit)(void *sched, const sits_req_params_t *p, sits_req_t **req_p, char *err, size_t err_len);
    /* Waits up to timeout_ms for new tokens; copies up to cap of them into tokens and returns how many.
     * *finish_p becomes non-NONE once the request has finished and every token was delivered. */
    int (*next)(sits_req_t *req, int32_t *tokens, int cap, sits_finish_t *finish_p, int timeout_ms);
    void (*cancel)(sits_req_t *req);
    void (*release)(sits_req_t *req);
    void (*stats)(void *sched, sits_sched_stats_t *stats_p);
    /* [logprobs] Copies up to n entries from index `from` of the request's generated-token (prompt 0)
     * or prompt-token (prompt 1; entry i scores prompt token i, entry 0 is never filled) log-probabilities
     * into out_p; returns how many: generated entries exist for the tokens next() delivered, prompt
     * entries once the first token was delivered. 0 when the request did not ask for them. May be NULL. */
    int (*logprobs)(sits_req_t *req, int prompt, int from, int n, sits_logprob_t *out_p);
    /* Prompt tokens the request found in the prefix cache (usage.prompt_tokens_details.cached_tokens).
     * May be NULL. */
    int (*cached_tokens)(sits_req_t *req);
} sits_sched_api_t;

extern const sits_sched_api_t sits_sched_api;

#endif
