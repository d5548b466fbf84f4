/* comm.h -- the communicator vtable: collectives of one group of ranks (a TP group, a PP pair,
 * the DP replicas), over host buffers (mpi) or device buffers (nccl).
 *
 * Every blocking call has a deadline (params step_timeout): if it passes, the communicator logs
 * which rank and which op stalled and aborts the whole job (MPI_Abort) -- a job never hangs. */
#ifndef SITS_COMM_COMM_H
#define SITS_COMM_COMM_H

#include <stddef.h>
#include <mpi.h>
#include "util/dtype.h"
#include "util/status.h"

typedef struct sits_comm sits_comm_t;

typedef struct sits_comm_ops {
    const char *name;
    void (*destroy)(sits_comm_t *c);
    /* buf[count] += over ranks, in place (F32, BF16, F16, I32). */
    sits_status_t (*allreduce_sum)(sits_comm_t *c, void *buf, size_t count, sits_dtype_t dt);
    /* recv[size * count] = concat over ranks of send[count]. */
    sits_status_t (*allgather)(sits_comm_t *c, const void *send, void *recv, size_t bytes_per_rank);
    /* gather to root: recv[size * bytes] valid on root only. */
    sits_status_t (*gather)(sits_comm_t *c, const void *send, void *recv, size_t bytes_per_rank, int root);
    sits_status_t (*bcast)(sits_comm_t *c, void *buf, size_t bytes, int root);
    sits_status_t (*barrier)(sits_comm_t *c);
    /* Every rank sends send_bytes[p] bytes at send + send_off[p] to rank p and receives recv_bytes[p]
     * bytes from p at recv + recv_off[p] (all-to-all-v; KV shard exchange). Counts are host arrays [size]. */
    sits_status_t (*alltoallv)(sits_comm_t *c, const void *send, const size_t *send_bytes, const size_t *send_off,
                               void *recv, const size_t *recv_bytes, const size_t *recv_off);
    /* Point to point (pipeline stages): blocking on mpi, enqueued on nccl; a matching recv/send on peer. */
    sits_status_t (*send)(sits_comm_t *c, const void *buf, size_t bytes, int peer);
    sits_status_t (*recv)(sits_comm_t *c, void *buf, size_t bytes, int peer);
    /* [pp micro-batches] Optional (NULL on nccl, whose send/recv are enqueued on the stream already):
     * start a send / receive and return at once; *req_p completes in sits_comm_mpi_wait (with the
     * deadline). tag tells apart the messages in flight between one pair (one per micro-batch). */
    sits_status_t (*isend)(sits_comm_t *c, const void *buf, size_t bytes, int peer, int tag, MPI_Request *req_p);
    sits_status_t (*irecv)(sits_comm_t *c, void *buf, size_t bytes, int peer, int tag, MPI_Request *req_p);
    /* Fatal: log why and end the whole job (never returns). */
    void (*abort)(sits_comm_t *c, int code, const char *why) __attribute__((noreturn));
} sits_comm_ops_t;

struct sits_comm {
    const sits_comm_ops_t *ops;
    int rank, size;
    MPI_Comm mpi;          /* the group as an MPI communicator (control messages, plans) */
    double timeout_s;      /* deadline of one blocking call */
    void *impl;
};

/* A host-buffer communicator over a duplicate of `group`. */
sits_status_t sits_comm_mpi_create(MPI_Comm group, double timeout_s, sits_comm_t **comm_p);
static inline void sits_comm_destroy(sits_comm_t *c) { if (c) c->ops->destroy(c); }

#ifdef HAVE_NCCL
struct sits_backend;
/* A device-buffer communicator (NCCL, nccl.c) over a duplicate of `group`, collective over it: one
 * rank per GPU, each passing its cuda backend (GPU be->device). Ops take DEVICE pointers only, are
 * enqueued on the backend's stream and return at once; the results are ready after be->ops->sync /
 * download. It registers a health check on the backend, so the backend's waits abort the job on an
 * NCCL error or after timeout_s. Destroy it before the backend. Only built with NCCL: callers test
 * HAVE_NCCL. Host buffers (the sampler's candidates) need an mpi communicator over the same group. */
sits_status_t sits_comm_nccl_create(MPI_Comm group, struct sits_backend *be, double timeout_s, sits_comm_t **comm_p);

/* [custom all-reduce] (custom_ar.c) An NCCL communicator (created inside, same contract as above)
 * whose bf16 allreduce_sum of at most max_bytes runs custom kernels over CUDA IPC peer memory
 * (one-shot up to oneshot_max_bytes, two-shot above); other sizes, dtypes and ops go to NCCL. The
 * custom path needs one node, 2, 4 or 8 ranks, P2P between every pair of GPUs (cudaDeviceCanAccessPeer)
 * and, beyond 2 ranks, NVLink: nvlink 1 = every pair linked, 0 = not, -1 = unknown (from the topology
 * module, sits_topo_nvlink_gbps); without it every call goes to NCCL (logged). max_bytes -1 = default
 * (8 MiB), 0 = never custom; oneshot_max_bytes -1 = default (256 KiB); the smallest values over the
 * ranks are used. Collective over `group`; CUDA-graph capturable like the NCCL one. */
sits_status_t sits_comm_custom_ar_create(MPI_Comm group, struct sits_backend *be, double timeout_s, int64_t max_bytes,
                                         int64_t oneshot_max_bytes, int nvlink, sits_comm_t **comm_p);
/* 1: c is a custom_ar communicator whose custom kernels are in use, 0: one that sends everything to
 * NCCL, -1: not a custom_ar communicator. */
int sits_comm_custom_ar_enabled(const sits_comm_t *c);
/* Fused all-reduce + residual add + RMSNorm on device buffers of c's backend, enqueued on its stream:
 * s = allreduce_sum(x) (bf16); residual += s (fp32 when residual_f32, never rounded; else bf16);
 * out = rmsnorm(residual) * w. x [n, dim] bf16 (clobbered: it may hold s afterwards), residual
 * [n, dim], w [dim] fp32 (a norm weight, weights.h), out [n, dim] bf16. Equals allreduce_sum + the
 * backend's add_rmsnorm(_f32res): one kernel when n * dim * 2 <= the one-shot limit, else those two.
 * SITS_ERR_UNSUPPORTED when c is not a custom_ar communicator (the caller then does the two steps
 * itself). [fp8] xq / xs (both or neither): also out's rows quantised to E4M3 (xq [n, dim], 8-byte
 * aligned) with their scales (xs [n] fp32), as the backend's add_rmsnorm_f32res_fp8 does. */
sits_status_t sits_comm_custom_ar_add_rmsnorm(sits_comm_t *c, void *out, void *xq, float *xs, void *residual, int residual_f32,
                                              void *x, const void *w, int n, int dim, float eps);
#endif

/* Wait for an MPI request with the deadline; on expiry log `what` and MPI_Abort the world. */
sits_status_t sits_comm_mpi_wait(MPI_Request *req, double timeout_s, const char *what, MPI_Comm comm);

/* Fatal-fault path: log and abort every rank of the job (never returns). */
void sits_comm_abort_job(int code, const char *why) __attribute__((noreturn));

#endif
