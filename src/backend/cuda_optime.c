/* cuda_optime.c -- [op times] see cuda_optime.h. Pairs of events from a fixed pool; a full pool waits for its
 * last event and sums every pair. Keys: (name pointer, a, b), linear search over at most OPT_KEYS. */
#include "backend/cuda_optime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OPT_PAIRS 4096
#define OPT_KEYS 128

typedef struct {
    const char *name;
    int a, b;
    long calls;
    double ms, tokens;
} opt_key_t;

struct sits_cuda_optime {
    cudaEvent_t ev[2 * OPT_PAIRS];
    int key_of[OPT_PAIRS];   /* the key of pair i */
    int used;                /* pairs recorded since the last harvest */
    int open;                /* a begin without its end */
    int open_n;              /* its rows */
    opt_key_t keys[OPT_KEYS];
    int n_keys;
    long dropped;            /* ops not timed: more than OPT_KEYS keys */
};

sits_cuda_optime_t *sits_cuda_optime_create(void)
{
    const char *e = getenv("SITS_CUDA_OP_TIMES");
    if (!e || strcmp(e, "1") != 0) return NULL;
    sits_cuda_optime_t *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    for (int i = 0; i < 2 * OPT_PAIRS; i++)
        if (cudaEventCreate(&t->ev[i]) != cudaSuccess) {
            while (i-- > 0) cudaEventDestroy(t->ev[i]);
            free(t);
            (void)cudaGetLastError();
            return NULL;
        }
    return t;
}

void sits_cuda_optime_harvest(sits_cuda_optime_t *t)
{
    if (!t || t->used == 0) return;
    if (cudaEventSynchronize(t->ev[2 * t->used - 1]) != cudaSuccess) { (void)cudaGetLastError(); t->used = 0; return; }
    for (int i = 0; i < t->used; i++) {
        float ms = 0.0f;
        if (cudaEventElapsedTime(&ms, t->ev[2 * i], t->ev[2 * i + 1]) == cudaSuccess) t->keys[t->key_of[i]].ms += ms;
        else (void)cudaGetLastError();
    }
    t->used = 0;
}

/* the key (name, a, b), made if new; -1 when the table is full */
static int opt_key(sits_cuda_optime_t *t, const char *name, int a, int b)
{
    int k = 0;
    while (k < t->n_keys && !(t->keys[k].name == name && t->keys[k].a == a && t->keys[k].b == b)) k++;
    if (k == t->n_keys) {
        if (k == OPT_KEYS) return -1;
        t->keys[k] = (opt_key_t){ .name = name, .a = a, .b = b };
        t->n_keys++;
    }
    return k;
}

void sits_cuda_optime_begin(sits_cuda_optime_t *t, cudaStream_t stream, const char *name, int a, int b, int n)
{
    if (!t) return;
    int k = opt_key(t, name, a, b);
    if (k < 0) { t->dropped++; return; }
    if (t->used == OPT_PAIRS) sits_cuda_optime_harvest(t);
    t->key_of[t->used] = k;
    t->keys[k].calls++;
    t->keys[k].tokens += n;
    t->open_n = n;
    cudaEventRecord(t->ev[2 * t->used], stream);
    t->open = 1;
}

void sits_cuda_optime_next(sits_cuda_optime_t *t, cudaStream_t stream, const char *done_name, const char *next_name)
{
    if (!t || !t->open) return;
    opt_key_t *old = &t->keys[t->key_of[t->used]];
    int a = old->a, b = old->b, n = t->open_n, k = opt_key(t, done_name, a, b);
    if (k >= 0) {   /* the open part was done_name: its call moves there */
        old = &t->keys[t->key_of[t->used]];
        old->calls--;
        old->tokens -= n;
        t->keys[k].calls++;
        t->keys[k].tokens += n;
        t->key_of[t->used] = k;
    }
    sits_cuda_optime_end(t, stream);
    sits_cuda_optime_begin(t, stream, next_name, a, b, n);
}

void sits_cuda_optime_end(sits_cuda_optime_t *t, cudaStream_t stream)
{
    if (!t || !t->open) return;
    cudaEventRecord(t->ev[2 * t->used + 1], stream);
    t->used++;
    t->open = 0;
}

static int by_ms(const void *x, const void *y)
{
    double a = ((const opt_key_t *)x)->ms, b = ((const opt_key_t *)y)->ms;
    return a < b ? 1 : a > b ? -1 : 0;
}

void sits_cuda_optime_destroy(sits_cuda_optime_t *t, int device)
{
    if (!t) return;
    sits_cuda_optime_harvest(t);
    qsort(t->keys, (size_t)t->n_keys, sizeof t->keys[0], by_ms);
    double tot = 0;
    for (int k = 0; k < t->n_keys; k++) tot += t->keys[k].ms;
    fprintf(stderr, "[op times] gpu %d, eager ops (SITS_CUDA_OP_TIMES=1), %.1f ms in all\n", device, tot);
    fprintf(stderr, "[op times] %-22s %7s %7s %9s %11s %9s %6s\n", "op", "a", "b", "calls", "ms", "us/call", "share");
    for (int k = 0; k < t->n_keys; k++) {
        const opt_key_t *q = &t->keys[k];
        if (!q->calls) continue;   /* every call renamed (sits_cuda_optime_next) */
        fprintf(stderr, "[op times] %-22s %7d %7d %9ld %11.2f %9.1f %5.1f%%   (%.0f rows/call)\n", q->name, q->a, q->b, q->calls,
                q->ms, q->calls ? 1e3 * q->ms / q->calls : 0.0, tot > 0 ? 100.0 * q->ms / tot : 0.0,
                q->calls ? q->tokens / q->calls : 0.0);
    }
    if (t->dropped) fprintf(stderr, "[op times] %ld ops not timed (more than %d keys)\n", t->dropped, OPT_KEYS);
    for (int i = 0; i < 2 * OPT_PAIRS; i++) cudaEventDestroy(t->ev[i]);
    free(t);
}
