/* spec.h -- speculative decoding: the --speculative-config, the n-gram (prompt lookup) drafter, the
 * acceptance rule and the per-sequence adaptation of the number of drafted tokens.
 *
 * The scheduler (src/sched/sched.c) uses these; the verification itself is an ordinary step: a
 * speculating sequence puts its last token and its k drafts into the step (k + 1 query positions
 * with paged KV), and every one of those positions is an output row sampled with the sequence's
 * own parameters, row j with the RNG counter of generated token n_gen + j. Then:
 *
 *   accepted m = the longest prefix of the drafts where draft[j] == sampled[j];
 *   emitted    = sampled[0 .. m] (m + 1 tokens: the accepted drafts and the target's token at the
 *                first mismatch, or the bonus token after all k were accepted).
 *
 * Greedy rows sample the argmax, so this is "accept while draft == argmax". With temperature > 0 it
 * is rejection sampling (Leviathan et al. 2023) for a drafter whose proposal is a point mass q = 1{x}:
 * the rule "accept x with probability min(1, p(x)/q(x)) = p(x), else draw from norm(max(0, p - q)) =
 * p without x, renormalised" gives the token y with probability p(x) for y = x and
 * (1 - p(x)) * p(y) / (1 - p(x)) = p(y) otherwise, and drawing y ~ p and accepting iff y == x gives
 * exactly the same joint law of (accepted?, token). The sampler's Gumbel draw for row j is a
 * function of (seed, n_gen + j), the counter a non-speculative step uses for the same token, and on
 * the CPU backend the logits of a position do not depend on the other positions of the step; so
 * the output is the non-speculative output token for token, greedy or seeded sampling alike.
 *
 * Invariants kept by the scheduler: drafts never pass max_tokens (k <= max_tokens - n_gen - 1) nor
 * the model's context; after the step the sequence keeps the KV of its last token and its accepted
 * drafts only (n_computed), blocks holding only rejected positions go back to the pool, and the
 * prefix cache registers only blocks made of accepted tokens. */
#ifndef SITS_SPEC_SPEC_H
#define SITS_SPEC_SPEC_H

#include <stddef.h>
#include <stdint.h>
#include "kv/blocks.h"
#include "sched/generate.h"
#include "util/status.h"

#define SITS_SPEC_MAX_K 16   /* num_speculative_tokens at most */

typedef enum { SITS_SPEC_OFF = 0, SITS_SPEC_NGRAM = 1, SITS_SPEC_DRAFT = 2 } sits_spec_method_t;

typedef struct {
    sits_spec_method_t method;   /* SITS_SPEC_OFF: no speculation */
    char model[4096];            /* SITS_SPEC_DRAFT: the draft model's directory */
    int num_speculative_tokens;  /* k: drafts per step at most, 1..SITS_SPEC_MAX_K */
    int prompt_lookup_max;       /* n-gram: longest suffix matched (>= min) */
    int prompt_lookup_min;       /* n-gram: shortest suffix matched (>= 1) */
} sits_spec_config_t;

/* The drafter's name as /metrics labels it ("ngram", "draft_model"), "" when off. */
const char *sits_spec_method_name(sits_spec_method_t m);

/* Parses vLLM's --speculative-config JSON: {"method": "ngram", "num_speculative_tokens": k,
 * "prompt_lookup_max": 4, "prompt_lookup_min": 1} (max defaults to 4, min to 1; "model": "[ngram]"
 * is accepted for "method"), or {"method": "draft_model", "model": DIR, "num_speculative_tokens": k}
 * (a "model" that is a directory without "method" means draft_model, as in vLLM). NULL or "" gives
 * method OFF. Unknown keys, other methods and values out of range are refused with a message in err. */
sits_status_t sits_spec_config_parse(const char *json, sits_spec_config_t *cfg_p, char *err, size_t err_len);

/* The n-gram drafter (vLLM's ngram proposer): among the suffixes of tokens[0..n) of length
 * min_n..max_n, take the longest that also occurs earlier in tokens (ending before n; occurrences
 * may overlap the suffix), at its earliest occurrence, and propose the tokens that followed it
 * there: up to k of them, never past n. Writes them to draft_p[0..k) and returns how many (0: no
 * match of at least min_n tokens). */
int sits_spec_ngram_propose(const int32_t *tokens, int n, int min_n, int max_n, int k, int32_t *draft_p);

/* Accepted drafts: the longest m <= k with draft[j] == sampled[j] for j < m; the step then emits
 * sampled[0 .. m]. sampled holds k + 1 entries. */
int sits_spec_accept(const int32_t *draft, const int32_t *sampled, int k);

/* Rollback after a verification: the sequence's KV is valid for its first n_valid positions; the
 * blocks of bt[0 .. n_blocks) that hold only later positions (rejected drafts) go back to kb (one
 * reference each). Returns the blocks kept, ceil(n_valid / block_size) (at most n_blocks). The caller
 * registers in the prefix cache only full blocks below n_valid. */
int sits_spec_kv_rollback(sits_kv_blocks_t *kb, int block_size, int n_valid, const int32_t *bt, int n_blocks);

/* ---- the draft-model drafter ------------------------------------------------------------------
 * A second, smaller model with the target's vocabulary, loaded on the leader only (replicated there:
 * its drafts travel to the other ranks in the step plan as tokens, like the n-gram drafter's), with its
 * own engine and paged KV (its runner's block pool). Each sequence keeps its blocks in that pool and
 * how many of its positions the draft KV holds (n_computed). A proposal batches every speculating
 * sequence: one step computes what the draft KV lacks of each (chunked within the draft engine's
 * max_tokens) and samples the first draft greedily from the last position; then k - 1 decode steps
 * feed each draft back for the next. After the verification the draft KV is rolled back to the
 * positions the target accepted (min of the two n_computed; their tokens are the same). */
typedef struct {
    int32_t *bt;        /* [the draft runner's max_blocks_per_seq], NULL until first used */
    int n_blocks;
    int n_computed;     /* positions whose draft KV holds the sequence's tokens */
} sits_spec_dseq_t;

typedef struct sits_spec_drafter sits_spec_drafter_t;

/* draft: a runner of one rank (TP 1, its own comm) whose vocabulary equals the target's; not owned.
 * max_seqs: sequences proposed for at once, at most the draft engine's max_seqs. */
sits_status_t sits_spec_drafter_create(sits_runner_t *draft, int max_seqs, sits_spec_drafter_t **d_p);
void sits_spec_drafter_destroy(sits_spec_drafter_t *d);
/* The sequence's draft KV goes back to the pool (n_computed 0); its table stays allocated. */
void sits_spec_dseq_reset(sits_spec_drafter_t *d, sits_spec_dseq_t *ds);
/* After a verification: the first n_valid positions of the sequence are its accepted tokens. */
void sits_spec_dseq_rollback(sits_spec_drafter_t *d, sits_spec_dseq_t *ds, int n_valid);
/* Frees the table (after reset). */
void sits_spec_dseq_fini(sits_spec_dseq_t *ds);
/* Proposes for n sequences (n <= max_seqs): sequence i has tokens[i][0 .. len[i]) (its last token not
 * in its KV yet) and wants up to k[i] drafts (0: none), written to drafts[i * SITS_SPEC_MAX_K ..];
 * n_draft_p[i] is how many (0 when the draft KV had no room for it). Greedy on the draft model. */
sits_status_t sits_spec_drafter_propose(sits_spec_drafter_t *d, int n, sits_spec_dseq_t *const *ds,
                                        const int32_t *const *tokens, const int *len, const int *k, int32_t *drafts,
                                        int *n_draft_p);

/* Adaptation of a sequence's k after a verification that accepted `accepted` of `drafted` drafts (documented
 * rule): none accepted -> k / 2 (at least 1). Otherwise, free drafts (n-gram: proposing costs nothing, only the
 * verification's extra rows) -> k_max; drafts that cost a draft forward pass each (draft model): all accepted -> k + 1
 * (up to k_max), else accepted + 1. bench/spec_sim.py replays both on recorded outputs (bench/RESULTS.md). */
int sits_spec_k_next(int k, int k_max, int accepted, int drafted, int free_drafts);

#endif
