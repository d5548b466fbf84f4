/* fake_sched.h -- a scheduler stand-in for the HTTP server tests: implements sits_sched_api_t with
 * deterministic outputs and counts what the server asked of it.
 *
 * Output of a request: the `script` ids when set, else an echo of the prompt's non-special ids followed
 * by eos_id; cut at max_tokens (finish LENGTH), otherwise script_finish (echo: STOP). One token every
 * delay_ms, at most per_next tokens per next() call. busy: submit answers SITS_ERR_BUSY. */
#ifndef SITS_TESTS_FAKE_SCHED_H
#define SITS_TESTS_FAKE_SCHED_H

#include <pthread.h>
#include "sched/sched.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* behaviour (set by the test while no request runs) */
    const sits_tokenizer_t *tok;
    int32_t eos_id;
    int busy;
    int delay_ms;
    int per_next;
    const int32_t *script;
    int n_script;
    sits_finish_t script_finish;
    sits_sched_stats_t stats;     /* what stats() reports */
    /* observations */
    int submits, cancels, releases, live;
    int finished_naturally;       /* requests whose whole output was delivered */
    long long delivered;          /* tokens handed out by next() */
    long long prompt_total;       /* prompt tokens of all submits */
    int32_t last_prompt[4096];
    int last_n_prompt;
    int last_max_tokens;
    sits_sample_params_t last_sample;
    int last_ignore_eos;
    int32_t last_stop_ids[16];
    int last_n_stop_ids;
} fake_sched_t;

extern const sits_sched_api_t fake_sched_api;

void fake_sched_init(fake_sched_t *f, const sits_tokenizer_t *tok, int32_t eos_id);
void fake_sched_fini(fake_sched_t *f);
/* Waits up to timeout_ms until releases >= n_rel and cancels >= n_can; returns 1 if reached. */
int fake_sched_wait(fake_sched_t *f, int n_can, int n_rel, int timeout_ms);

#endif
