/* bench_common.h -- what several bench programs share: the backend of a rank from --device, and
 * comparing two runs' logits (sits-fp8-accuracy, sits-kv-int8-accuracy). */
#ifndef SITS_BENCH_COMMON_H
#define SITS_BENCH_COMMON_H

#include <stdint.h>

#include "backend/backend.h"

/* The backend of this MPI rank for --device: "cuda", "cpu", or "auto" (cuda when a GPU is visible).
 * cuda: GPU gpu0 + the rank's index among the ranks of its node; cpu: `threads` threads (<= 0: the
 * node's cores shared evenly among its ranks). *cuda_p (may be NULL) says which was asked for.
 * Collective over MPI_COMM_WORLD (the node split). */
sits_status_t sits_bench_backend(const char *device, int gpu0, int threads, sits_backend_t **be_p, int *cuda_p);

/* Copy bandwidth in bytes/s of this rank's device (cuda: a device-to-device copy of `bytes` timed by events; cpu:
 * memcpy), 2 x bytes / the median of 10 copies: the floor of reading bytes (sits-bench-decode, sits-bench-attention). */
sits_status_t sits_bench_copy_bw(const sits_backend_t *be, size_t bytes, double *bw_p);

/* KL(p || q) in nats of the softmaxes of logit rows a (the reference, p) and b (q), both [v];
 * *same_top1 = 1 when their argmaxes (lowest index on ties) agree. Computed in double; >= 0. */
double sits_bench_kl_row(const float *a, const float *b, int v, int *same_top1);

/* Seconds of CLOCK_MONOTONIC. */
double sits_bench_now_s(void);

/* The benches' random stream (an LCG; 31 bits a call): the same seed gives the same data on every machine. */
uint64_t sits_bench_rng_next(uint64_t *s);

/* The median of three timings. */
double sits_bench_median3(const double t[3]);

#endif
