/* cuda_optime.h -- [op times] wall time of each eager op on the GPU, by CUDA events (SITS_CUDA_OP_TIMES=1).
 *
 * A diagnostic, not a benchmark: Nsight Compute serialises and slows kernels (two 2048/128 mixed steps summed
 * 234 ms/step under ncu against 154 ms in the same run without it), so where a step's real time goes is
 * measured here instead: an event before and after each timed op on the backend's stream, summed per
 * (op, out, in) over the run and printed as a table at backend destroy. Ops enqueued while a graph is being
 * captured are not timed (decode steps replay as graphs: their time is the graph's). The events cost a few
 * microseconds of host time per op and keep adjacent kernels from overlapping (PDL): compare shares, and the
 * step total with the run's own step times. */
#ifndef SITS_BACKEND_CUDA_OPTIME_H
#define SITS_BACKEND_CUDA_OPTIME_H

#include <cuda_runtime.h>

typedef struct sits_cuda_optime sits_cuda_optime_t;

/* NULL unless the environment has SITS_CUDA_OP_TIMES=1 (or the events cannot be made) */
sits_cuda_optime_t *sits_cuda_optime_create(void);
/* around one op enqueued on `stream`: name (a string literal), two shape numbers (0 where none) */
void sits_cuda_optime_begin(sits_cuda_optime_t *t, cudaStream_t stream, const char *name, int a, int b, int n);
void sits_cuda_optime_end(sits_cuda_optime_t *t, cudaStream_t stream);
/* within an open op: what ran since its begin was done_name (same shape numbers), and from here next_name
 * runs until the end (the attention op's prefill kernel, then its decode kernel over the listed rows) */
void sits_cuda_optime_next(sits_cuda_optime_t *t, cudaStream_t stream, const char *done_name, const char *next_name);
/* the stream has finished everything enqueued: sum the recorded pairs */
void sits_cuda_optime_harvest(sits_cuda_optime_t *t);
/* prints the table (stderr) for `device` and frees */
void sits_cuda_optime_destroy(sits_cuda_optime_t *t, int device);

#endif
