/* mpi.c -- the MPI communicator: collectives on host buffers for the CPU backend.
 *
 * Non-blocking MPI collectives are polled with a deadline so that a stalled or dead peer ends
 * the job with a message instead of a hang. Polling backs off to short sleeps: ranks are often
 * oversubscribed on the CPU path. */
#include "comm/comm.h"
#include "util/check.h"

#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <sched.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void sits_comm_abort_job(int code, const char *why)
{
    int rank = -1, inited = 0;
    MPI_Initialized(&inited);
    if (inited) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    SITS_ERROR(SITS_SUB_COMM, "rank %d aborting the job: %s", rank, why);
    if (inited) MPI_Abort(MPI_COMM_WORLD, code ? code : 1);
    exit(code ? code : 1);
}

sits_status_t sits_comm_mpi_wait(MPI_Request *req, double timeout_s, const char *what, MPI_Comm comm)
{
    double t0 = now_s();
    for (long spins = 0;; spins++) {
        int done = 0;
        SITS_MPI_CHECK(MPI_Test(req, &done, MPI_STATUS_IGNORE));
        if (done) return SITS_OK;
        if (timeout_s > 0 && now_s() - t0 > timeout_s) {
            char why[256];
            int rank = -1;
            MPI_Comm_rank(comm, &rank);
            snprintf(why, sizeof why, "%s did not complete within %.1f s (group rank %d): a peer rank is stalled or dead",
                     what, timeout_s, rank);
            sits_comm_abort_job(3, why);
        }
        if (spins < 200) sched_yield();
        else {
            struct timespec ts = { 0, spins < 2000 ? 20000 : 200000 };
            nanosleep(&ts, NULL);
        }
    }
}

static MPI_Datatype mpi_type(sits_dtype_t dt)
{
    switch (dt) {
    case SITS_DT_F32: return MPI_FLOAT;
    case SITS_DT_F64: return MPI_DOUBLE;
    case SITS_DT_I32: return MPI_INT32_T;
    case SITS_DT_I64: return MPI_INT64_T;
    default: return MPI_DATATYPE_NULL;
    }
}

static void mpi_destroy(sits_comm_t *c)
{
    if (!c) return;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin && c->mpi != MPI_COMM_NULL) MPI_Comm_free(&c->mpi);
    free(c);
}

static sits_status_t mpi_allreduce_sum(sits_comm_t *c, void *buf, size_t count, sits_dtype_t dt)
{
    if (c->size == 1) return SITS_OK;
    MPI_Datatype t = mpi_type(dt);
    if (t == MPI_DATATYPE_NULL) {
        SITS_ERROR(SITS_SUB_COMM, "mpi all-reduce: dtype %s not supported on host buffers", sits_dtype_name(dt));
        return SITS_ERR_UNSUPPORTED;
    }
    MPI_Request req;
    SITS_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, t, MPI_SUM, c->mpi, &req));
    return sits_comm_mpi_wait(&req, c->timeout_s, "all-reduce", c->mpi);
}

static sits_status_t mpi_allgather(sits_comm_t *c, const void *send, void *recv, size_t bytes)
{
    MPI_Request req;
    SITS_MPI_CHECK(MPI_Iallgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, c->mpi, &req));
    return sits_comm_mpi_wait(&req, c->timeout_s, "all-gather", c->mpi);
}

static sits_status_t mpi_gather(sits_comm_t *c, const void *send, void *recv, size_t bytes, int root)
{
    MPI_Request req;
    SITS_MPI_CHECK(MPI_Igather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, root, c->mpi, &req));
    return sits_comm_mpi_wait(&req, c->timeout_s, "gather", c->mpi);
}

static sits_status_t mpi_bcast(sits_comm_t *c, void *buf, size_t bytes, int root)
{
    if (c->size == 1) return SITS_OK;
    MPI_Request req;
    SITS_MPI_CHECK(MPI_Ibcast(buf, (int)bytes, MPI_BYTE, root, c->mpi, &req));
    return sits_comm_mpi_wait(&req, c->timeout_s, "broadcast", c->mpi);
}

static sits_status_t mpi_barrier(sits_comm_t *c)
{
    MPI_Request req;
    SITS_MPI_CHECK(MPI_Ibarrier(c->mpi, &req));
    return sits_comm_mpi_wait(&req, c->timeout_s, "barrier", c->mpi);
}

static sits_status_t mpi_alltoallv(sits_comm_t *c, const void *send, const size_t *sb, const size_t *so, void *recv,
                                   const size_t *rb, const size_t *ro)
{
    int R = c->size;
    int *v = malloc(sizeof(int) * 4 * (size_t)R);
    if (!v) return SITS_ERR_NOMEM;
    for (int p = 0; p < R; p++) {
        if (sb[p] > INT32_MAX || so[p] > INT32_MAX || rb[p] > INT32_MAX || ro[p] > INT32_MAX) {
            free(v);
            SITS_ERROR(SITS_SUB_COMM, "mpi all-to-all-v: a count or offset above 2 GiB");
            return SITS_ERR_UNSUPPORTED;
        }
        v[p] = (int)sb[p]; v[R + p] = (int)so[p]; v[2 * R + p] = (int)rb[p]; v[3 * R + p] = (int)ro[p];
    }
    MPI_Request req;
    int e = MPI_Ialltoallv(send, v, v + R, MPI_BYTE, recv, v + 2 * R, v + 3 * R, MPI_BYTE, c->mpi, &req);
    sits_status_t st = SITS_OK;
    if (e != MPI_SUCCESS) {
        SITS_ERROR(SITS_SUB_COMM, "MPI_Ialltoallv failed (%d)", e);
        st = SITS_ERR_MPI;
    } else {
        st = sits_comm_mpi_wait(&req, c->timeout_s, "all-to-all-v", c->mpi);
    }
    free(v);
    return st;
}

static sits_status_t mpi_send(sits_comm_t *c, const void *buf, size_t bytes, int peer)
{
    MPI_Request req;
    SITS_MPI_CHECK(MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, 17, c->mpi, &req));
    return sits_comm_mpi_wait(&req, c->timeout_s, "send", c->mpi);
}

static sits_status_t mpi_recv(sits_comm_t *c, void *buf, size_t bytes, int peer)
{
    MPI_Request req;
    SITS_MPI_CHECK(MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, 17, c->mpi, &req));
    return sits_comm_mpi_wait(&req, c->timeout_s, "recv", c->mpi);
}

static sits_status_t mpi_isend(sits_comm_t *c, const void *buf, size_t bytes, int peer, int tag, MPI_Request *req_p)
{
    SITS_MPI_CHECK(MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, tag, c->mpi, req_p));
    return SITS_OK;
}

static sits_status_t mpi_irecv(sits_comm_t *c, void *buf, size_t bytes, int peer, int tag, MPI_Request *req_p)
{
    SITS_MPI_CHECK(MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, tag, c->mpi, req_p));
    return SITS_OK;
}

__attribute__((noreturn)) static void mpi_abort(sits_comm_t *c, int code, const char *why) { sits_comm_abort_job(code, why); }

static const sits_comm_ops_t mpi_ops = {
    .name = "mpi",
    .destroy = mpi_destroy,
    .allreduce_sum = mpi_allreduce_sum,
    .allgather = mpi_allgather,
    .gather = mpi_gather,
    .bcast = mpi_bcast,
    .barrier = mpi_barrier,
    .alltoallv = mpi_alltoallv,
    .send = mpi_send,
    .recv = mpi_recv,
    .isend = mpi_isend,
    .irecv = mpi_irecv,
    .abort = mpi_abort,
};

sits_status_t sits_comm_mpi_create(MPI_Comm group, double timeout_s, sits_comm_t **comm_p)
{
    sits_comm_t *c = calloc(1, sizeof *c);
    if (!c) return SITS_ERR_NOMEM;
    c->ops = &mpi_ops;
    c->timeout_s = timeout_s;
    c->mpi = MPI_COMM_NULL;
    sits_status_t st = SITS_OK;
    SITS_MPI_CHECK_GOTO(MPI_Comm_dup(group, &c->mpi), st, err);
    SITS_MPI_CHECK_GOTO(MPI_Comm_rank(c->mpi, &c->rank), st, err);
    SITS_MPI_CHECK_GOTO(MPI_Comm_size(c->mpi, &c->size), st, err);
    *comm_p = c;
    return SITS_OK;
err:
    free(c);
    return st;
}
