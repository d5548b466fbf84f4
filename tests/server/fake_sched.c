/* fake_sched.c -- see fake_sched.h. */
#include "fake_sched.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct sits_req {
    fake_sched_t *f;
    int32_t *out;
    int n_out, pos;
    sits_finish_t fin;
    int cancelled;
    struct timespec next_at;
};

static void ts_add_ms(struct timespec *t, int ms)
{
    t->tv_sec += ms / 1000;
    t->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t->tv_nsec >= 1000000000L) {
        t->tv_sec++;
        t->tv_nsec -= 1000000000L;
    }
}

static int ts_le(const struct timespec *a, const struct timespec *b)
{
    return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec <= b->tv_nsec);
}

static sits_status_t fsubmit(void *sched, const sits_req_params_t *p, sits_req_t **req_p, char *err, size_t err_len)
{
    fake_sched_t *f = sched;
    pthread_mutex_lock(&f->mu);
    if (f->busy) {
        pthread_mutex_unlock(&f->mu);
        return SITS_ERR_BUSY;
    }
    sits_req_t *r = calloc(1, sizeof *r);
    r->f = f;
    r->out = malloc(sizeof(int32_t) * (size_t)(p->n_prompt + f->n_script + 1));
    if (f->script) {
        memcpy(r->out, f->script, sizeof(int32_t) * (size_t)f->n_script);
        r->n_out = f->n_script;
        r->fin = f->script_finish;
    } else {
        for (int i = 0; i < p->n_prompt; i++)
            if (!sits_tokenizer_is_special(f->tok, p->prompt[i])) r->out[r->n_out++] = p->prompt[i];
        r->out[r->n_out++] = f->eos_id;
        r->fin = SITS_FINISH_STOP;
    }
    if (r->n_out > p->max_tokens) {
        r->n_out = p->max_tokens;
        r->fin = SITS_FINISH_LENGTH;
    }
    f->submits++;
    f->live++;
    f->prompt_total += p->n_prompt;
    f->last_n_prompt = p->n_prompt < 4096 ? p->n_prompt : 4096;
    memcpy(f->last_prompt, p->prompt, sizeof(int32_t) * (size_t)f->last_n_prompt);
    f->last_max_tokens = p->max_tokens;
    f->last_sample = p->sample;
    f->last_ignore_eos = p->ignore_eos;
    f->last_n_stop_ids = p->n_stop_ids < 16 ? p->n_stop_ids : 16;
    if (p->n_stop_ids) memcpy(f->last_stop_ids, p->stop_ids, sizeof(int32_t) * (size_t)f->last_n_stop_ids);
    clock_gettime(CLOCK_REALTIME, &r->next_at);
    ts_add_ms(&r->next_at, f->delay_ms);
    pthread_mutex_unlock(&f->mu);
    (void)err;
    (void)err_len;
    *req_p = r;
    return SITS_OK;
}

static int fnext(sits_req_t *r, int32_t *tokens, int cap, sits_finish_t *finish_p, int timeout_ms)
{
    fake_sched_t *f = r->f;
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    ts_add_ms(&deadline, timeout_ms);
    pthread_mutex_lock(&f->mu);
    int n = 0;
    *finish_p = SITS_FINISH_NONE;
    for (;;) {
        if (r->cancelled) {
            *finish_p = SITS_FINISH_CANCELLED;
            break;
        }
        if (r->pos == r->n_out) {
            *finish_p = r->fin;
            break;
        }
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        if (ts_le(&r->next_at, &now)) {
            int k = f->per_next > 0 ? f->per_next : 1;
            while (n < k && n < cap && r->pos < r->n_out) tokens[n++] = r->out[r->pos++];
            f->delivered += n;
            r->next_at = now;
            ts_add_ms(&r->next_at, f->delay_ms);
            if (r->pos == r->n_out) {
                *finish_p = r->fin;
                f->finished_naturally++;
            }
            break;
        }
        const struct timespec *until = ts_le(&r->next_at, &deadline) ? &r->next_at : &deadline;
        if (pthread_cond_timedwait(&f->cv, &f->mu, until) == ETIMEDOUT && until == &deadline) break;
    }
    pthread_mutex_unlock(&f->mu);
    return n;
}

static void fcancel(sits_req_t *r)
{
    fake_sched_t *f = r->f;
    pthread_mutex_lock(&f->mu);
    if (!r->cancelled) f->cancels++;
    r->cancelled = 1;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

static void frelease(sits_req_t *r)
{
    fake_sched_t *f = r->f;
    pthread_mutex_lock(&f->mu);
    f->releases++;
    f->live--;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    free(r->out);
    free(r);
}

static void fstats(void *sched, sits_sched_stats_t *st)
{
    fake_sched_t *f = sched;
    pthread_mutex_lock(&f->mu);
    *st = f->stats;
    pthread_mutex_unlock(&f->mu);
}

const sits_sched_api_t fake_sched_api = { fsubmit, fnext, fcancel, frelease, fstats, NULL, NULL };   /* no logprobs */

void fake_sched_init(fake_sched_t *f, const sits_tokenizer_t *tok, int32_t eos_id)
{
    memset(f, 0, sizeof *f);
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    f->tok = tok;
    f->eos_id = eos_id;
    f->per_next = 1;
}

void fake_sched_fini(fake_sched_t *f)
{
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
}

int fake_sched_wait(fake_sched_t *f, int n_can, int n_rel, int timeout_ms)
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    ts_add_ms(&deadline, timeout_ms);
    pthread_mutex_lock(&f->mu);
    int ok;
    while (!(ok = f->cancels >= n_can && f->releases >= n_rel))
        if (pthread_cond_timedwait(&f->cv, &f->mu, &deadline) == ETIMEDOUT) {
            ok = f->cancels >= n_can && f->releases >= n_rel;
            break;
        }
    pthread_mutex_unlock(&f->mu);
    return ok;
}
