/* sample.h -- distributed sampling over a vocab-parallel lm_head.
 *
 * Each TP rank holds logits for its vocabulary range only. Sampling never gathers the full
 * vocabulary on the hot path: every rank reduces its slice to a few candidates per sequence
 * (its best perturbed logit, and its top-C raw logits when top-k/top-p truncation is asked for,
 * plus its log-sum-exp), the candidates are all-gathered, and every rank merges them the same way,
 * so all ranks agree on the token without another message.
 *
 * Random sampling is the Gumbel-max trick: token = argmax_i (l_i / T + g_i) over the allowed set,
 * with g_i = -log(-log(u_i)) and u_i a counter-based hash of (seed, step, i). That is an exact
 * draw from softmax(l / T) restricted to the allowed set, and the result does not depend on how
 * the vocabulary is split -- TP = N samples what TP = 1 samples for the same seed.
 * Order of filters (as HF and vLLM): temperature, then top-k, then top-p over what top-k kept.
 * temperature == 0 (or top_k == 1) is greedy; ties go to the lowest id.
 *
 * [perf: device sampling] The per-rank reduction is the backend's sample_reduce op (records of
 * backend.h: sits_sample_rec_t), so it can run on the device next to the logits; the host path
 * (sits_sample) runs the same reduction, sits_backend_cpu_sample_reduce, on host logits. The
 * pieces below let the engine do: plan (c, rows) -> reduce on the device -> merge. */
#ifndef SITS_ENGINE_SAMPLE_H
#define SITS_ENGINE_SAMPLE_H

#include <stdint.h>
#include "backend/backend.h"
#include "comm/comm.h"
#include "util/status.h"

typedef struct {
    int32_t id;
    float bias;          /* added to the logit; -INFINITY bans the id */
} sits_sample_bias_t;

typedef struct {
    int32_t id;
    int32_t out_count;   /* times generated */
    int32_t in_prompt;   /* 1 when in the prompt */
} sits_sample_hist_t;

typedef struct {
    float temperature;   /* 0: greedy */
    int top_k;           /* <= 0: off */
    float top_p;         /* 1: off; (0, 1] */
    uint64_t seed;
    uint64_t step;       /* index of the token being sampled within its sequence (RNG counter) */
    /* [logprobs] the row's log-probabilities (logprob_reduce + sits_sample_logprob_merge): logprobs 1 asks for them, with
     * top_logprobs (0..SITS_LOGPROB_MAX_TOP) best alternatives; lp_target is the id scored (a prompt
     * row: the next prompt token), < 0 for the sampled token. Not read by the sampler itself. */
    int logprobs, top_logprobs;
    int32_t lp_target;
    /* [sampling controls] transforms of the logits before sampling (the backend's logit_process on
     * each rank's shard, lists from sits_sample_proc_build), all off when zero: presence / frequency penalties (OpenAI, vLLM: l -= frequency * count + presence *
     * (count > 0) over the generated tokens), repetition_penalty (HF: over prompt and generated
     * tokens, l / p when l > 0 else l * p; 0 or 1 = off), min_p (keep p_i >= min_p * p_max of
     * softmax(l / T)), bias[n_bias] (logit_bias; -inf bans an id, e.g. eos under min_tokens) and the
     * sequence's token history hist[n_hist] (unique ids). The arrays are not owned. */
    float presence_penalty, frequency_penalty, repetition_penalty, min_p;
    const sits_sample_bias_t *bias;
    int n_bias;
    const sits_sample_hist_t *hist;
    int n_hist;
} sits_sample_params_t;

/* [logprobs] One row's log-probabilities: log-softmax of the raw logits (before any sampling
 * transform) over the whole vocabulary, fp32 logits, the normaliser accumulated in double. */
typedef struct {
    int32_t id;                          /* the id scored (lp_target, or the sampled token) */
    float logprob;
    int n_top;                           /* = top_logprobs */
    int32_t top_id[SITS_LOGPROB_MAX_TOP]; /* best first; ties: the lower id first */
    float top_logprob[SITS_LOGPROB_MAX_TOP];
} sits_logprob_t;
/* [structured output] Allowed-token masks of some outputs of a step: masks [n, words] uint32 over the
 * whole vocabulary (bit id & 31 of word id >> 5, 1 = allowed; src/grammar/grammar.h makes them), rows [n]
 * the output index (0 .. n_out - 1) of each. Outputs without a mask are unconstrained. */
typedef struct {
    int n, words;
    const int32_t *rows;
    const uint32_t *masks;
} sits_sample_masks_t;

/* The uniform variate in (0, 1) used for vocabulary id `id` (exposed for tests). */
double sits_sample_uniform(uint64_t seed, uint64_t step, int64_t id);

/* logits: this rank's [n, v_count] fp32 for ids [v_start, v_start + v_count); params[n].
 * Collective over comm (every rank of the TP group calls it); tokens_p[n] is the same on all ranks.
 * A rank may hold no vocabulary (v_count 0). */
sits_status_t sits_sample(sits_comm_t *comm, const float *logits, int n, int v_start, int v_count,
                          const sits_sample_params_t *params, int32_t *tokens_p);

/* 1 when some row of params[n] asks for logprobs. */
int sits_sample_wants_logprobs(int n, const sits_sample_params_t *params);
/* [logprobs] rows_p[n] (at most): the backend's logprob_reduce rows of the rows that ask, in order
 * (target: lp_target, or -1 for the sampled token); returns how many. */
int sits_sample_logprob_rows(int n, const sits_sample_params_t *params, sits_logprob_row_t *rows_p);
/* [logprobs] Collective over comm: mine [k] records of this rank's shard (k = the rows asking, in
 * order; the sampled rows' tgt / has_tgt filled from logit_pick) are all-gathered and merged the same
 * way on every rank: out_p[i] receives, for every row i with logprobs, the log-probability of
 * params[i].lp_target (or of tokens[i] when that is < 0) and the top_logprobs best ids. TP = N gives
 * TP = 1's values up to the order of the log-sum-exp's double sums. Other rows are left untouched. */
sits_status_t sits_sample_logprob_merge(sits_comm_t *comm, const sits_logprob_rec_t *mine, int n,
                                        const sits_sample_params_t *params, const int32_t *tokens, sits_logprob_t *out_p);

/* [sampling controls] 1 when some row of params[n] has a transform for the backend's logit_process
 * (bias, a penalty, or min_p on a sampled row). */
int sits_sample_wants_process(int n, const sits_sample_params_t *params);
/* Upper bound of the entries sits_sample_proc_build writes. */
size_t sits_sample_proc_bound(int n, const sits_sample_params_t *params);
/* rows_p[n] and ents_p (sits_sample_proc_bound of them) for logit_process: per row its penalties and
 * one entry per distinct id of its bias list and (when a penalty is on) its history, sorted by id.
 * Order of the transforms (vLLM): bias, repetition, frequency + presence, then min_p. Returns the
 * entries written; *min_p_p = 1 when some row needs the min_p cut. */
size_t sits_sample_proc_build(int n, const sits_sample_params_t *params, sits_logit_proc_row_t *rows_p,
                              sits_logit_proc_ent_t *ents_p, int *min_p_p);
/* min_p thresholds cut_p[n] from the rows' maxima of the R ranks' shards (rowmax [R, n], after the
 * other transforms): max + T log(min_p) for rows with min_p, -inf for the others. The same on every rank. */
void sits_sample_min_p_cut(int n, const sits_sample_params_t *params, const float *rowmax, int R, float *cut_p);

/* ---- the pieces of sits_sample (for the engine's device path) ---- */

/* Candidates per record the rows need: 1, max top_k of truncated rows, or the top-p budget (256).
 * Local (params are the same on every rank of a group). */
int sits_sample_cands(int n, const sits_sample_params_t *params);

/* rows_p[n]: the backend's view of params (mode, fp32 1/T). */
void sits_sample_rows(int n, const sits_sample_params_t *params, sits_sample_row_t *rows_p);

/* Collective: all-gather this rank's records (n records of c candidates, `mine`), merge them into
 * tokens_p[n]. *need_full_p = 1 when some top-p nucleus reaches past the candidates a rank sent:
 * then tokens_p is not valid and the caller must redo the step with whole slices (sits_sample on
 * the full logits does). Every rank reaches the same *need_full_p. */
sits_status_t sits_sample_merge(sits_comm_t *comm, const void *mine, int n, int c, const sits_sample_params_t *params,
                                int32_t *tokens_p, int *need_full_p);

#endif
