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
 * temperature == 0 (or top_k == 1) is greedy; ties go to the lowest id. */
#ifndef SITS_ENGINE_SAMPLE_H
#define SITS_ENGINE_SAMPLE_H

#include <stdint.h>
#include "comm/comm.h"
#include "util/status.h"

typedef struct {
    float temperature;   /* 0: greedy */
    int top_k;           /* <= 0: off */
    float top_p;         /* 1: off; (0, 1] */
    uint64_t seed;
    uint64_t step;       /* index of the token being sampled within its sequence (RNG counter) */
} sits_sample_params_t;

/* The uniform variate in (0, 1) used for vocabulary id `id` (exposed for tests). */
double sits_sample_uniform(uint64_t seed, uint64_t step, int64_t id);

/* logits: this rank's [n, v_count] fp32 for ids [v_start, v_start + v_count); params[n].
 * Collective over comm (every rank of the TP group calls it); tokens_p[n] is the same on all ranks.
 * A rank may hold no vocabulary (v_count 0). */
sits_status_t sits_sample(sits_comm_t *comm, const float *logits, int n, int v_start, int v_count,
                          const sits_sample_params_t *params, int32_t *tokens_p);

#endif
