/* nccl.c -- the NCCL communicator: collectives on DEVICE buffers of a cuda backend (built only
 * with HAVE_NCCL).
 *
 * Every op enqueues on the backend's stream and returns at once (like NCCL itself); the result is
 * there for whatever the backend runs next on that stream and for the host after be->ops->sync /
 * download / download_f32. Host pointers are never valid here: the sampler's host-buffer
 * collectives need an MPI communicator over the same group (sits_comm_mpi_create).
 *
 * Faults, so that a job never hangs: the communicator is non-blocking (ncclConfig_t.blocking = 0),
 * so init, enqueue and finalize return at once and are polled through ncclCommGetAsyncError with
 * the deadline timeout_s. It also registers a health check on the backend: while the backend waits
 * for its stream it calls the check on each not-ready poll, which reads ncclCommGetAsyncError and
 * the time waited. On an NCCL error or a passed deadline: log which rank, GPU and collective
 * stalled, ncclCommAbort, then sits_comm_abort_job (MPI_Abort of the world).
 *
 * Ops: allreduce_sum in place (F32, BF16, F16, I32, F64, I64; NCCL sums in the element type);
 * allgather and bcast on bytes; gather = grouped ncclSend/ncclRecv to root plus a stream copy of
 * root's own part; barrier = wait for this rank's stream (with the checks), then an MPI barrier
 * with the deadline. c->mpi is a duplicate of the group, for control messages. */
#include "comm/comm.h"
#include "backend/backend.h"
#include "backend/cuda_check.h"
#include "util/check.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    ncclComm_t nc;
    sits_backend_t *be;
    cudaStream_t stream;
    const char *last_op;           /* the last collective enqueued (for stall reports) */
    size_t last_count;
    unsigned long long n_ops;
} nccl_impl_t;

static nccl_impl_t *impl_of(sits_comm_t *c) { return c->impl; }

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void poll_pause(long spins)
{
    if (spins < 1000) sched_yield();
    else {
        struct timespec ts = { 0, spins < 10000 ? 20000 : 200000 };
        nanosleep(&ts, NULL);
    }
}

/* Fatal: abort the whole job (which ends the NCCL communicator with it). */
static void fault(sits_comm_t *c, const char *what)
{
    nccl_impl_t *n = impl_of(c);
    char why[512];
    snprintf(why, sizeof why, "nccl group rank %d of %d on gpu %d: %s (last collective enqueued: %s of %zu, #%llu)",
             c->rank, c->size, n->be ? n->be->device : -1, what, n->last_op ? n->last_op : "none", n->last_count,
             n->n_ops);
    SITS_ERROR(SITS_SUB_COMM, "%s", why);
    /* MPI_Abort first: it ends every rank, peers included. ncclCommAbort can block behind a kernel
     * that spins on the stream (a custom all-reduce waiting for a dead peer), so it would only
     * delay -- or prevent -- the abort. */
    (void)n;
    sits_comm_abort_job(3, why);
}

/* Poll a non-blocking communicator until its pending call (init, enqueue, finalize) settles.
 * Returns the settled result; aborts the job when the deadline passes. */
static ncclResult_t settle(sits_comm_t *c, const char *what)
{
    nccl_impl_t *n = impl_of(c);
    double t0 = now_s();
    for (long spins = 0;; spins++) {
        ncclResult_t r = ncclInProgress;
        ncclResult_t q = ncclCommGetAsyncError(n->nc, &r);
        if (q != ncclSuccess) return q;
        if (r != ncclInProgress) return r;
        if (c->timeout_s > 0 && now_s() - t0 > c->timeout_s) {
            char msg[160];
            snprintf(msg, sizeof msg, "%s did not complete within %.1f s: a peer rank is stalled or dead", what, c->timeout_s);
            fault(c, msg);
        }
        poll_pause(spins);
    }
}

/* The result of enqueuing a collective: in progress settles by polling; an asynchronous error
 * (the communicator is broken) is fatal; an immediate error (bad argument) is returned. */
static sits_status_t enqueued(sits_comm_t *c, ncclResult_t r, const char *what, size_t count)
{
    nccl_impl_t *n = impl_of(c);
    n->last_op = what;
    n->last_count = count;
    n->n_ops++;
    if (r == ncclInProgress) {
        r = settle(c, what);
        if (r != ncclSuccess) {
            char msg[160];
            snprintf(msg, sizeof msg, "%s failed: %s", what, ncclGetErrorString(r));
            fault(c, msg);
        }
    }
    if (r != ncclSuccess) {
        SITS_ERROR(SITS_SUB_COMM, "nccl %s of %zu (group rank %d): %s", what, count, c->rank, ncclGetErrorString(r));
        return SITS_ERR_NCCL;
    }
    return SITS_OK;
}

/* The backend's health check: runs while it waits for its stream. */
static sits_status_t health(void *ctx, double waited_s)
{
    sits_comm_t *c = ctx;
    nccl_impl_t *n = impl_of(c);
    ncclResult_t r = ncclSuccess;
    ncclResult_t q = ncclCommGetAsyncError(n->nc, &r);
    if (q != ncclSuccess) r = q;
    if (r != ncclSuccess && r != ncclInProgress) {
        char msg[160];
        snprintf(msg, sizeof msg, "nccl reported an asynchronous error: %s", ncclGetErrorString(r));
        fault(c, msg);
    }
    if (c->timeout_s > 0 && waited_s > c->timeout_s) {
        char msg[160];
        snprintf(msg, sizeof msg, "device work did not finish within %.1f s: a collective is stalled (peer rank stalled or dead)",
                 c->timeout_s);
        fault(c, msg);
    }
    return SITS_OK;
}

static int nccl_type(sits_dtype_t dt, ncclDataType_t *t_p)
{
    switch (dt) {
    case SITS_DT_F32: *t_p = ncclFloat32; return 0;
    case SITS_DT_BF16: *t_p = ncclBfloat16; return 0;
    case SITS_DT_F16: *t_p = ncclFloat16; return 0;
    case SITS_DT_I32: *t_p = ncclInt32; return 0;
    case SITS_DT_F64: *t_p = ncclFloat64; return 0;
    case SITS_DT_I64: *t_p = ncclInt64; return 0;
    default: return -1;
    }
}

/* ---- ops ------------------------------------------------------------------------------------- */

static sits_status_t nccl_allreduce_sum(sits_comm_t *c, void *buf, size_t count, sits_dtype_t dt)
{
    nccl_impl_t *n = impl_of(c);
    ncclDataType_t t;
    if (nccl_type(dt, &t) != 0) {
        SITS_ERROR(SITS_SUB_COMM, "nccl all-reduce: dtype %s not supported", sits_dtype_name(dt));
        return SITS_ERR_UNSUPPORTED;
    }
    if (c->size == 1 || count == 0) return SITS_OK;
    return enqueued(c, ncclAllReduce(buf, buf, count, t, ncclSum, n->nc, n->stream), "all-reduce", count);
}

static sits_status_t nccl_allgather(sits_comm_t *c, const void *send, void *recv, size_t bytes)
{
    nccl_impl_t *n = impl_of(c);
    if (bytes == 0) return SITS_OK;
    return enqueued(c, ncclAllGather(send, recv, bytes, ncclUint8, n->nc, n->stream), "all-gather", bytes);
}

static sits_status_t nccl_gather(sits_comm_t *c, const void *send, void *recv, size_t bytes, int root)
{
    nccl_impl_t *n = impl_of(c);
    if (root < 0 || root >= c->size) {
        SITS_ERROR(SITS_SUB_COMM, "nccl gather: root %d of a group of %d", root, c->size);
        return SITS_ERR_INVALID;
    }
    if (bytes == 0) return SITS_OK;
    if (c->rank == root) { /* root's own part: a copy on the stream, before the group */
        unsigned char *mine = (unsigned char *)recv + (size_t)root * bytes;
        if (mine != send) SITS_CUDA_CHECK(cudaMemcpyAsync(mine, send, bytes, cudaMemcpyDeviceToDevice, n->stream));
    }
    if (c->size == 1) return SITS_OK;
    ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess) return enqueued(c, r, "gather (group start)", bytes);
    ncclResult_t first = ncclSuccess;
    if (c->rank == root) {
        for (int p = 0; p < c->size; p++) {
            if (p == root) continue;
            r = ncclRecv((unsigned char *)recv + (size_t)p * bytes, bytes, ncclUint8, p, n->nc, n->stream);
            if (first == ncclSuccess && r != ncclSuccess && r != ncclInProgress) first = r;
        }
    } else {
        r = ncclSend(send, bytes, ncclUint8, root, n->nc, n->stream);
        if (first == ncclSuccess && r != ncclSuccess && r != ncclInProgress) first = r;
    }
    r = ncclGroupEnd();
    return enqueued(c, first != ncclSuccess ? first : r, "gather", bytes);
}

static sits_status_t nccl_bcast(sits_comm_t *c, void *buf, size_t bytes, int root)
{
    nccl_impl_t *n = impl_of(c);
    if (root < 0 || root >= c->size) {
        SITS_ERROR(SITS_SUB_COMM, "nccl broadcast: root %d of a group of %d", root, c->size);
        return SITS_ERR_INVALID;
    }
    if (c->size == 1 || bytes == 0) return SITS_OK;
    return enqueued(c, ncclBroadcast(buf, buf, bytes, ncclUint8, root, n->nc, n->stream), "broadcast", bytes);
}

static sits_status_t nccl_barrier(sits_comm_t *c)
{
    SITS_CHECK(impl_of(c)->be->ops->sync(impl_of(c)->be)); /* this rank's device work, with the health check */
    MPI_Request req;
    SITS_MPI_CHECK(MPI_Ibarrier(c->mpi, &req));
    return sits_comm_mpi_wait(&req, c->timeout_s, "barrier", c->mpi);
}

/* ---- lifecycle ------------------------------------------------------------------------------- */

static void nccl_destroy(sits_comm_t *c)
{
    if (!c) return;
    nccl_impl_t *n = impl_of(c);
    if (n) {
        if (n->be) sits_backend_cuda_set_health_check(n->be, NULL, c);
        if (n->nc) {
            ncclResult_t r = ncclCommFinalize(n->nc); /* flushes what is enqueued; peers take part */
            if (r == ncclInProgress || r == ncclSuccess) r = settle(c, "finalize");
            if (r == ncclSuccess) {
                r = ncclCommDestroy(n->nc);
                if (r != ncclSuccess) SITS_ERROR(SITS_SUB_COMM, "ncclCommDestroy: %s", ncclGetErrorString(r));
            } else {
                SITS_ERROR(SITS_SUB_COMM, "ncclCommFinalize (group rank %d): %s; aborting the communicator", c->rank,
                           ncclGetErrorString(r));
                ncclCommAbort(n->nc);
            }
        }
        free(n);
    }
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin && c->mpi != MPI_COMM_NULL) MPI_Comm_free(&c->mpi);
    free(c);
}

/* grouped ncclSend/ncclRecv (ncclAlltoAll needs equal counts) */
static sits_status_t nccl_alltoallv(sits_comm_t *c, const void *send, const size_t *sb, const size_t *so, void *recv,
                                    const size_t *rb, const size_t *ro)
{
    nccl_impl_t *n = impl_of(c);
    ncclResult_t r = ncclGroupStart(), first = ncclSuccess;
    if (r != ncclSuccess) return enqueued(c, r, "all-to-all-v (group start)", 0);
    size_t total = 0;
    for (int p = 0; p < c->size; p++) {
        if (sb[p]) {
            r = ncclSend((const unsigned char *)send + so[p], sb[p], ncclUint8, p, n->nc, n->stream);
            if (first == ncclSuccess && r != ncclSuccess && r != ncclInProgress) first = r;
        }
        if (rb[p]) {
            r = ncclRecv((unsigned char *)recv + ro[p], rb[p], ncclUint8, p, n->nc, n->stream);
            if (first == ncclSuccess && r != ncclSuccess && r != ncclInProgress) first = r;
        }
        total += sb[p];
    }
    r = ncclGroupEnd();
    return enqueued(c, first != ncclSuccess ? first : r, "all-to-all-v", total);
}

static sits_status_t nccl_send(sits_comm_t *c, const void *buf, size_t bytes, int peer)
{
    nccl_impl_t *n = impl_of(c);
    if (bytes == 0) return SITS_OK;
    return enqueued(c, ncclSend(buf, bytes, ncclUint8, peer, n->nc, n->stream), "send", bytes);
}

static sits_status_t nccl_recv(sits_comm_t *c, void *buf, size_t bytes, int peer)
{
    nccl_impl_t *n = impl_of(c);
    if (bytes == 0) return SITS_OK;
    return enqueued(c, ncclRecv(buf, bytes, ncclUint8, peer, n->nc, n->stream), "recv", bytes);
}

__attribute__((noreturn)) static void nccl_abort_op(sits_comm_t *c, int code, const char *why)
{
    (void)code;
    fault(c, why);
    sits_comm_abort_job(code, why); /* not reached */
}

static const sits_comm_ops_t nccl_ops = {
    .name = "nccl",
    .destroy = nccl_destroy,
    .allreduce_sum = nccl_allreduce_sum,
    .allgather = nccl_allgather,
    .gather = nccl_gather,
    .bcast = nccl_bcast,
    .barrier = nccl_barrier,
    .alltoallv = nccl_alltoallv,
    .send = nccl_send,
    .recv = nccl_recv,
    .abort = nccl_abort_op,
};

/* All ranks of c agree on `ok` (logical and), with the deadline. */
static sits_status_t agree(sits_comm_t *c, int ok, int *all_ok_p, const char *what)
{
    MPI_Request req;
    SITS_MPI_CHECK(MPI_Iallreduce(&ok, all_ok_p, 1, MPI_INT, MPI_MIN, c->mpi, &req));
    return sits_comm_mpi_wait(&req, c->timeout_s, what, c->mpi);
}

sits_status_t sits_comm_nccl_create(MPI_Comm group, sits_backend_t *be, double timeout_s, sits_comm_t **comm_p)
{
    sits_status_t st = SITS_OK;
    void *stream = sits_backend_cuda_stream(be);
    if (!stream) {
        SITS_ERROR(SITS_SUB_COMM, "the nccl communicator needs a cuda backend (got %s)", be ? be->ops->name : "none");
        return SITS_ERR_INVALID;
    }
    sits_comm_t *c = calloc(1, sizeof *c);
    nccl_impl_t *n = calloc(1, sizeof *n);
    if (!c || !n) {
        free(c);
        free(n);
        return SITS_ERR_NOMEM;
    }
    c->ops = &nccl_ops;
    c->timeout_s = timeout_s;
    c->mpi = MPI_COMM_NULL;
    c->impl = n;
    n->be = be;
    n->stream = stream;
    double t0 = now_s();
    SITS_MPI_CHECK_GOTO(MPI_Comm_dup(group, &c->mpi), st, err);
    SITS_MPI_CHECK_GOTO(MPI_Comm_rank(c->mpi, &c->rank), st, err);
    SITS_MPI_CHECK_GOTO(MPI_Comm_size(c->mpi, &c->size), st, err);
    SITS_CUDA_CHECK_GOTO(cudaSetDevice(be->device), st, err);

    /* The unique id from group rank 0, with a flag byte saying whether rank 0 got one. */
    unsigned char idbuf[sizeof(ncclUniqueId) + 1];
    memset(idbuf, 0, sizeof idbuf);
    if (c->rank == 0) {
        ncclResult_t r = ncclGetUniqueId((ncclUniqueId *)idbuf);
        if (r == ncclSuccess) idbuf[sizeof(ncclUniqueId)] = 1;
        else SITS_ERROR(SITS_SUB_COMM, "ncclGetUniqueId: %s", ncclGetErrorString(r));
    }
    MPI_Request req;
    SITS_MPI_CHECK_GOTO(MPI_Ibcast(idbuf, (int)sizeof idbuf, MPI_BYTE, 0, c->mpi, &req), st, err);
    SITS_CHECK_GOTO(sits_comm_mpi_wait(&req, timeout_s, "nccl unique id broadcast", c->mpi), st, err);
    if (!idbuf[sizeof(ncclUniqueId)]) {
        if (c->rank != 0) SITS_ERROR(SITS_SUB_COMM, "group rank 0 could not create an nccl unique id");
        st = c->rank == 0 ? SITS_ERR_NCCL : SITS_ERR_PEER;
        goto err;
    }
    ncclUniqueId id;
    memcpy(&id, idbuf, sizeof id);

    /* Non-blocking init: start on every rank, agree that every rank started, then poll. */
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&n->nc, c->size, id, c->rank, &cfg);
    int started = r == ncclSuccess || r == ncclInProgress, all = 0;
    if (!started) {
        SITS_ERROR(SITS_SUB_COMM, "ncclCommInitRankConfig (group rank %d of %d, gpu %d): %s", c->rank, c->size, be->device,
                   ncclGetErrorString(r));
        n->nc = NULL;
    }
    SITS_CHECK_GOTO(agree(c, started, &all, "nccl init start"), st, err);
    if (!all) {
        st = started ? SITS_ERR_PEER : SITS_ERR_NCCL;
        goto err;
    }
    r = settle(c, "nccl init");
    int inited = r == ncclSuccess;
    if (!inited)
        SITS_ERROR(SITS_SUB_COMM, "nccl init (group rank %d of %d, gpu %d): %s", c->rank, c->size, be->device,
                   ncclGetErrorString(r));
    SITS_CHECK_GOTO(agree(c, inited, &all, "nccl init"), st, err);
    if (!all) {
        st = inited ? SITS_ERR_PEER : SITS_ERR_NCCL;
        goto err;
    }
    SITS_CHECK_GOTO(sits_backend_cuda_set_health_check(be, health, c), st, err);
    int ver = 0;
    ncclGetVersion(&ver);
    SITS_INFO(SITS_SUB_COMM, "nccl %d communicator: group rank %d of %d on gpu %d, ready in %.2f s", ver, c->rank, c->size,
              be->device, now_s() - t0);
    *comm_p = c;
    return SITS_OK;
err:
    if (n->nc) {
        ncclCommAbort(n->nc);
        n->nc = NULL;
    }
    n->be = NULL; /* no health check registered */
    nccl_destroy(c);
    return st;
}
