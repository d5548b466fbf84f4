/* custom_ar.c -- the custom all-reduce communicator: the NCCL communicator (nccl.c, wrapped) plus
 * custom bf16 all-reduce kernels over CUDA IPC peer memory for the small and medium messages of
 * tensor parallelism inside one node (kernels/allreduce.cu). Built only with HAVE_NCCL.
 *
 * Choice per call, from values every rank shares (so all ranks take the same path):
 *   bf16 and bytes <= oneshot_max  -> one-shot kernel (push to every peer, one barrier, local sum)
 *   bf16 and bytes <= max_bytes    -> two-shot kernel (reduce-scatter + all-gather by pushes)
 *   otherwise, or custom path off  -> ncclAllReduce (the wrapped communicator)
 * allgather / gather / bcast / barrier always go to NCCL. Results: fp32 sums of the bf16 inputs in
 * rank order, rounded once -- with 2 ranks the same bits as NCCL's sum.
 *
 * Set-up (collective over the group; every step ends with all ranks agreeing, so either every rank
 * uses the custom path or none does): thresholds agreed (the minimum over ranks); eligibility: 2, 4
 * or 8 ranks on one node (MPI_COMM_TYPE_SHARED), every peer's GPU (found by UUID) reachable with
 * cudaDeviceCanAccessPeer, NVLink beyond 2 ranks when the caller knows there is none; then each rank
 * cudaMallocs one buffer (SITS_K_AR_SIGNAL_BYTES of zeroed signal words + 2 staging halves),
 * exchanges its cudaIpcMemHandle over MPI and opens the peers' (cudaIpcMemLazyEnablePeerAccess).
 * Any failure: a warning and NCCL for everything. Never NVLink multicast / NVLS.
 *
 * Graph safety: the kernels' arguments are fixed (the peers' mapped buffers, the user pointers) and
 * their synchronisation state is in device memory, so calls captured into a CUDA graph replay
 * correctly, interleaved with eager calls. Faults: a dead peer leaves the kernel spinning; the
 * wrapped NCCL communicator's health check on the backend aborts the job at the deadline.
 * Teardown: wait for the stream, barrier, close the peers' mappings, barrier, free. */
#include "comm/comm.h"
#include "backend/backend.h"
#include "backend/cuda_check.h"
#include "kernels/sits_kernels.h"
#include "util/check.h"

#include <stdlib.h>
#include <string.h>

#define CAR_DEFAULT_MAX_BYTES ((int64_t)8 << 20)
#define CAR_DEFAULT_ONESHOT_BYTES ((int64_t)256 << 10)

typedef struct {
    sits_comm_t *nccl;                          /* the wrapped NCCL communicator */
    sits_backend_t *be;
    cudaStream_t stream;
    int enabled;                                /* custom kernels in use (same on every rank) */
    size_t max_bytes, oneshot_max;              /* agreed thresholds */
    unsigned char *buf;                         /* this rank's IPC buffer */
    void *opened[SITS_K_AR_MAX_RANKS];          /* peers' buffers mapped here; NULL for self */
    sits_k_ar_peers_t peers;
    unsigned long long n_oneshot, n_twoshot, n_fused, n_nccl;
} car_impl_t;

static car_impl_t *impl_of(const sits_comm_t *c) { return c->impl; }

static size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

/* ---- ops --------------------------------------------------------------------------------------- */

static sits_status_t car_allreduce_sum(sits_comm_t *c, void *buf, size_t count, sits_dtype_t dt)
{
    car_impl_t *a = impl_of(c);
    if (c->size == 1 || count == 0 || !a->enabled || dt != SITS_DT_BF16 || count > a->max_bytes / 2) {
        a->n_nccl++;
        return a->nccl->ops->allreduce_sum(a->nccl, buf, count, dt);
    }
    if (count * 2 <= a->oneshot_max) {
        a->n_oneshot++;
        SITS_KERNEL_CHECK(sits_k_ar_oneshot(&a->peers, buf, buf, count, a->stream));
    } else {
        a->n_twoshot++;
        SITS_KERNEL_CHECK(sits_k_ar_twoshot(&a->peers, buf, buf, count, a->stream));
    }
    return SITS_OK;
}

static sits_status_t car_allgather(sits_comm_t *c, const void *send, void *recv, size_t bytes)
{
    sits_comm_t *n = impl_of(c)->nccl;
    return n->ops->allgather(n, send, recv, bytes);
}

static sits_status_t car_gather(sits_comm_t *c, const void *send, void *recv, size_t bytes, int root)
{
    sits_comm_t *n = impl_of(c)->nccl;
    return n->ops->gather(n, send, recv, bytes, root);
}

static sits_status_t car_bcast(sits_comm_t *c, void *buf, size_t bytes, int root)
{
    sits_comm_t *n = impl_of(c)->nccl;
    return n->ops->bcast(n, buf, bytes, root);
}

static sits_status_t car_barrier(sits_comm_t *c)
{
    sits_comm_t *n = impl_of(c)->nccl;
    return n->ops->barrier(n);
}

static sits_status_t car_alltoallv(sits_comm_t *c, const void *send, const size_t *sb, const size_t *so, void *recv,
                                   const size_t *rb, const size_t *ro)
{
    sits_comm_t *n = impl_of(c)->nccl;
    return n->ops->alltoallv(n, send, sb, so, recv, rb, ro);
}

static sits_status_t car_send(sits_comm_t *c, const void *buf, size_t bytes, int peer)
{
    sits_comm_t *n = impl_of(c)->nccl;
    return n->ops->send(n, buf, bytes, peer);
}

static sits_status_t car_recv(sits_comm_t *c, void *buf, size_t bytes, int peer)
{
    sits_comm_t *n = impl_of(c)->nccl;
    return n->ops->recv(n, buf, bytes, peer);
}

__attribute__((noreturn)) static void car_abort(sits_comm_t *c, int code, const char *why)
{
    sits_comm_t *n = impl_of(c)->nccl;
    n->ops->abort(n, code, why);
}

/* ---- lifecycle --------------------------------------------------------------------------------- */

static sits_status_t mpi_barrier(sits_comm_t *c, const char *what)
{
    MPI_Request req;
    SITS_MPI_CHECK(MPI_Ibarrier(c->mpi, &req));
    return sits_comm_mpi_wait(&req, c->timeout_s, what, c->mpi);
}

/* Unmap the peers' buffers and free ours. collective: every rank calls it at the same point, and
 * it first waits until no kernel of any rank can touch the memory (normal teardown; a failed
 * set-up that all ranks agreed on); else only this rank's error path during creation. */
static void release_ipc(sits_comm_t *c, int collective)
{
    car_impl_t *a = impl_of(c);
    if (collective) {
        (void)a->be->ops->sync(a->be); /* our kernels are done: nothing of ours still pushes to a peer */
        (void)mpi_barrier(c, "custom all-reduce teardown");
    }
    for (int p = 0; p < SITS_K_AR_MAX_RANKS; p++) {
        if (!a->opened[p]) continue;
        cudaError_t e = cudaIpcCloseMemHandle(a->opened[p]);
        if (e != cudaSuccess) SITS_ERROR(SITS_SUB_COMM, "cudaIpcCloseMemHandle (peer %d): %s", p, cudaGetErrorString(e));
        a->opened[p] = NULL;
    }
    if (collective) (void)mpi_barrier(c, "custom all-reduce teardown"); /* the peers unmapped ours */
    if (a->buf) {
        cudaError_t e = cudaFree(a->buf);
        if (e != cudaSuccess) SITS_ERROR(SITS_SUB_COMM, "cudaFree (custom all-reduce buffer): %s", cudaGetErrorString(e));
        a->buf = NULL;
    }
    a->enabled = 0;
}

static void car_destroy(sits_comm_t *c)
{
    if (!c) return;
    car_impl_t *a = impl_of(c);
    if (a) {
        SITS_DEBUG(SITS_SUB_COMM, "custom all-reduce: %llu one-shot, %llu two-shot, %llu fused, %llu nccl calls", a->n_oneshot,
                   a->n_twoshot, a->n_fused, a->n_nccl);
        release_ipc(c, a->enabled);
        sits_comm_destroy(a->nccl);
        free(a);
    }
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin && c->mpi != MPI_COMM_NULL) MPI_Comm_free(&c->mpi);
    free(c);
}

static const sits_comm_ops_t car_ops = {
    .name = "custom_ar",
    .destroy = car_destroy,
    .allreduce_sum = car_allreduce_sum,
    .allgather = car_allgather,
    .gather = car_gather,
    .bcast = car_bcast,
    .barrier = car_barrier,
    .alltoallv = car_alltoallv,
    .send = car_send,
    .recv = car_recv,
    .abort = car_abort,
};

/* All ranks agree on ok (logical and), with the deadline. */
static sits_status_t agree(sits_comm_t *c, int ok, int *all_ok_p, const char *what)
{
    MPI_Request req;
    SITS_MPI_CHECK(MPI_Iallreduce(&ok, all_ok_p, 1, MPI_INT, MPI_MIN, c->mpi, &req));
    return sits_comm_mpi_wait(&req, c->timeout_s, what, c->mpi);
}

/* This rank's view of whether the custom path can work (collective: every rank calls it). On a
 * "no", why[] says what is missing. */
static sits_status_t check_eligible(sits_comm_t *c, int nvlink, int *ok_p, char *why, size_t why_len)
{
    car_impl_t *a = impl_of(c);
    int ok = 1;
    why[0] = '\0';
    MPI_Comm node;
    int node_size = 0;
    SITS_MPI_CHECK(MPI_Comm_split_type(c->mpi, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    MPI_Comm_size(node, &node_size);
    MPI_Comm_free(&node);

    /* every rank's GPU UUID, to find the peers' devices among ours */
    struct cudaDeviceProp prop;
    unsigned char mine[16] = { 0 }, *all = calloc((size_t)c->size, 16);
    if (!all) return SITS_ERR_NOMEM;
    if (cudaGetDeviceProperties(&prop, a->be->device) == cudaSuccess) memcpy(mine, prop.uuid.bytes, 16);
    else (void)cudaGetLastError();
    MPI_Request req;
    int e = MPI_Iallgather(mine, 16, MPI_BYTE, all, 16, MPI_BYTE, c->mpi, &req);
    if (e != MPI_SUCCESS) {
        free(all);
        SITS_ERROR(SITS_SUB_COMM, "MPI_Iallgather of the gpu uuids failed");
        return SITS_ERR_MPI;
    }
    sits_status_t st = sits_comm_mpi_wait(&req, c->timeout_s, "custom all-reduce gpu uuids", c->mpi);
    if (st != SITS_OK) {
        free(all);
        return st;
    }

    if (a->max_bytes == 0) {
        ok = 0;
        snprintf(why, why_len, "max bytes is 0");
    } else if (!sits_k_ar_size_supported(c->size)) {
        ok = 0;
        snprintf(why, why_len, "a group of %d ranks (the kernels take 2, 4 or 8)", c->size);
    } else if (node_size != c->size) {
        ok = 0;
        snprintf(why, why_len, "the group spans nodes (%d of %d ranks on this one)", node_size, c->size);
    } else if (nvlink == 0 && c->size > 2) {
        ok = 0;
        snprintf(why, why_len, "no NVLink between the GPUs of a group of %d (NCCL is faster over PCIe)", c->size);
    } else {
        int n_dev = 0;
        if (cudaGetDeviceCount(&n_dev) != cudaSuccess) {
            (void)cudaGetLastError();
            n_dev = 0;
        }
        for (int p = 0; p < c->size && ok; p++) {
            if (p == c->rank) continue;
            int dev = -1;
            for (int d = 0; d < n_dev && dev < 0; d++) {
                struct cudaDeviceProp q;
                if (cudaGetDeviceProperties(&q, d) == cudaSuccess && !memcmp(q.uuid.bytes, all + (size_t)p * 16, 16)) dev = d;
            }
            int can = 0;
            if (dev < 0) {
                ok = 0;
                snprintf(why, why_len, "the gpu of group rank %d is not visible to this process", p);
            } else if (dev == a->be->device) {
                ok = 0;
                snprintf(why, why_len, "group rank %d uses the same gpu %d", p, dev);
            } else if (cudaDeviceCanAccessPeer(&can, a->be->device, dev) != cudaSuccess || !can) {
                (void)cudaGetLastError();
                ok = 0;
                snprintf(why, why_len, "no peer access from gpu %d to gpu %d (group rank %d)", a->be->device, dev, p);
            }
        }
    }
    free(all);
    *ok_p = ok;
    return SITS_OK;
}

/* Allocate, zero and share the buffers; map the peers'. *ok_p: this rank succeeded. */
static sits_status_t setup_ipc(sits_comm_t *c, int *ok_p)
{
    car_impl_t *a = impl_of(c);
    int R = c->size, ok = 1;
    size_t os_slot = round_up(a->oneshot_max, 16);
    size_t ts_slot = (round_up(a->max_bytes, 16) / 16 + (size_t)R - 1) / (size_t)R * 16;
    size_t half = (size_t)R * os_slot;
    if (2 * (size_t)R * ts_slot > half) half = 2 * (size_t)R * ts_slot;
    half = round_up(half, 256);
    size_t bytes = SITS_K_AR_SIGNAL_BYTES + 2 * half;

    cudaIpcMemHandle_t mine;
    memset(&mine, 0, sizeof mine);
    cudaError_t e = cudaMalloc((void **)&a->buf, bytes);
    if (e != cudaSuccess) {
        SITS_WARN(SITS_SUB_COMM, "custom all-reduce: cudaMalloc of %zu bytes on gpu %d: %s", bytes, a->be->device,
                  cudaGetErrorString(e));
        a->buf = NULL;
        ok = 0;
    }
    if (ok && ((e = cudaMemsetAsync(a->buf, 0, SITS_K_AR_SIGNAL_BYTES, a->stream)) != cudaSuccess ||
               (e = cudaStreamSynchronize(a->stream)) != cudaSuccess || (e = cudaIpcGetMemHandle(&mine, a->buf)) != cudaSuccess)) {
        SITS_WARN(SITS_SUB_COMM, "custom all-reduce: preparing the ipc buffer on gpu %d: %s", a->be->device,
                  cudaGetErrorString(e));
        ok = 0;
    }
    (void)cudaGetLastError();

    /* handles (+ a byte saying whether this rank has one) from every rank */
    size_t rec = sizeof(cudaIpcMemHandle_t) + 1;
    unsigned char *sendb = calloc(1, rec), *all = calloc((size_t)R, rec);
    if (!sendb || !all) {
        free(sendb);
        free(all);
        return SITS_ERR_NOMEM;
    }
    memcpy(sendb, &mine, sizeof mine);
    sendb[sizeof mine] = (unsigned char)ok;
    MPI_Request req;
    sits_status_t st = SITS_OK;
    SITS_MPI_CHECK_GOTO(MPI_Iallgather(sendb, (int)rec, MPI_BYTE, all, (int)rec, MPI_BYTE, c->mpi, &req), st, out);
    SITS_CHECK_GOTO(sits_comm_mpi_wait(&req, c->timeout_s, "custom all-reduce ipc handles", c->mpi), st, out);
    for (int p = 0; p < R; p++) ok &= all[(size_t)p * rec + sizeof mine] != 0;
    for (int p = 0; p < R && ok; p++) {
        if (p == c->rank) {
            a->peers.stage[p] = a->buf + SITS_K_AR_SIGNAL_BYTES;
            a->peers.sig[p] = (uint32_t *)a->buf;
            continue;
        }
        cudaIpcMemHandle_t h;
        memcpy(&h, all + (size_t)p * rec, sizeof h);
        void *ptr = NULL;
        e = cudaIpcOpenMemHandle(&ptr, h, cudaIpcMemLazyEnablePeerAccess);
        if (e != cudaSuccess) {
            SITS_WARN(SITS_SUB_COMM, "custom all-reduce: cudaIpcOpenMemHandle (group rank %d's buffer) on gpu %d: %s", p,
                      a->be->device, cudaGetErrorString(e));
            (void)cudaGetLastError();
            ok = 0;
            break;
        }
        a->opened[p] = ptr;
        a->peers.stage[p] = (unsigned char *)ptr + SITS_K_AR_SIGNAL_BYTES;
        a->peers.sig[p] = ptr;
    }
    a->peers.half_bytes = half;
    a->peers.os_slot_bytes = os_slot;
    a->peers.ts_slot_bytes = ts_slot;
    a->peers.rank = c->rank;
    a->peers.size = R;
    *ok_p = ok;
out:
    free(sendb);
    free(all);
    return st;
}

sits_status_t sits_comm_custom_ar_create(MPI_Comm group, sits_backend_t *be, double timeout_s, int64_t max_bytes,
                                         int64_t oneshot_max_bytes, int nvlink, sits_comm_t **comm_p)
{
    sits_status_t st = SITS_OK;
    void *stream = sits_backend_cuda_stream(be);
    if (!stream) {
        SITS_ERROR(SITS_SUB_COMM, "the custom all-reduce communicator needs a cuda backend (got %s)", be ? be->ops->name : "none");
        return SITS_ERR_INVALID;
    }
    if (max_bytes < -1 || oneshot_max_bytes < -1) {
        SITS_ERROR(SITS_SUB_COMM, "custom all-reduce: max bytes %lld / one-shot max bytes %lld (want >= 0, or -1: default)",
                   (long long)max_bytes, (long long)oneshot_max_bytes);
        return SITS_ERR_INVALID;
    }
    sits_comm_t *c = calloc(1, sizeof *c);
    car_impl_t *a = calloc(1, sizeof *a);
    if (!c || !a) {
        free(c);
        free(a);
        return SITS_ERR_NOMEM;
    }
    c->ops = &car_ops;
    c->timeout_s = timeout_s;
    c->mpi = MPI_COMM_NULL;
    c->impl = a;
    a->be = be;
    a->stream = stream;
    SITS_MPI_CHECK_GOTO(MPI_Comm_dup(group, &c->mpi), st, err);
    SITS_MPI_CHECK_GOTO(MPI_Comm_rank(c->mpi, &c->rank), st, err);
    SITS_MPI_CHECK_GOTO(MPI_Comm_size(c->mpi, &c->size), st, err);
    SITS_CUDA_CHECK_GOTO(cudaSetDevice(be->device), st, err);
    SITS_CHECK_GOTO(sits_comm_nccl_create(group, be, timeout_s, &a->nccl), st, err);

    /* thresholds: the smallest over the ranks (they must take the same path for every call) */
    long long lim[2] = { max_bytes < 0 ? CAR_DEFAULT_MAX_BYTES : max_bytes,
                         oneshot_max_bytes < 0 ? CAR_DEFAULT_ONESHOT_BYTES : oneshot_max_bytes }, lo[2], hi[2];
    MPI_Request req[2];
    SITS_MPI_CHECK_GOTO(MPI_Iallreduce(lim, lo, 2, MPI_LONG_LONG, MPI_MIN, c->mpi, &req[0]), st, err);
    SITS_CHECK_GOTO(sits_comm_mpi_wait(&req[0], timeout_s, "custom all-reduce thresholds", c->mpi), st, err);
    SITS_MPI_CHECK_GOTO(MPI_Iallreduce(lim, hi, 2, MPI_LONG_LONG, MPI_MAX, c->mpi, &req[1]), st, err);
    SITS_CHECK_GOTO(sits_comm_mpi_wait(&req[1], timeout_s, "custom all-reduce thresholds", c->mpi), st, err);
    if (c->rank == 0 && (lo[0] != hi[0] || lo[1] != hi[1]))
        SITS_WARN(SITS_SUB_COMM, "custom all-reduce: the ranks passed different thresholds; using the smallest");
    a->max_bytes = (size_t)lo[0];
    a->oneshot_max = (size_t)(lo[1] < lo[0] ? lo[1] : lo[0]);

    char why[192];
    int ok = 0, all = 0;
    SITS_CHECK_GOTO(check_eligible(c, nvlink, &ok, why, sizeof why), st, err);
    SITS_CHECK_GOTO(agree(c, ok, &all, "custom all-reduce eligibility"), st, err);
    if (all) {
        SITS_CHECK_GOTO(setup_ipc(c, &ok), st, err);
        SITS_CHECK_GOTO(agree(c, ok, &all, "custom all-reduce ipc mapping"), st, err);
        if (!all) {
            snprintf(why, sizeof why, "%s", ok ? "a peer could not map the ipc buffers" : "the ipc buffers could not be mapped");
            release_ipc(c, 1);
        }
    } else if (ok) {
        snprintf(why, sizeof why, "a peer cannot use it");
    }
    a->enabled = all;
    if (all)
        SITS_INFO(SITS_SUB_COMM,
                  "custom all-reduce: group rank %d of %d on gpu %d: bf16 one-shot <= %zu bytes, two-shot <= %zu, nccl above "
                  "(ipc staging %.1f MiB)", c->rank, c->size, be->device, a->oneshot_max, a->max_bytes,
                  (double)(2 * a->peers.half_bytes) / (1 << 20));
    else if (!ok && a->max_bytes > 0)
        SITS_WARN(SITS_SUB_COMM, "custom all-reduce off (group rank %d, gpu %d): %s; all-reduces go to nccl", c->rank,
                  be->device, why);
    else
        SITS_INFO(SITS_SUB_COMM, "custom all-reduce off (group rank %d): %s; all-reduces go to nccl", c->rank, why);
    *comm_p = c;
    return SITS_OK;
err:
    car_destroy(c);
    return st;
}

int sits_comm_custom_ar_enabled(const sits_comm_t *c)
{
    if (!c || c->ops != &car_ops) return -1;
    return impl_of(c)->enabled;
}

sits_status_t sits_comm_custom_ar_add_rmsnorm(sits_comm_t *c, void *out, void *xq, float *xs, void *residual, int residual_f32,
                                              void *x, const void *w, int n, int dim, float eps)
{
    if (!c || c->ops != &car_ops) return SITS_ERR_UNSUPPORTED;
    car_impl_t *a = impl_of(c);
    if (n < 0 || dim <= 0 || (xq != NULL) != (xs != NULL)) {
        SITS_ERROR(SITS_SUB_COMM, "custom all-reduce + rmsnorm: %d rows of %d (fp8 output %s)", n, dim,
                   xq ? "without scales" : xs ? "scales without bytes" : "none");
        return SITS_ERR_INVALID;
    }
    if (n == 0) return SITS_OK;
    size_t count = (size_t)n * (size_t)dim;
    if (c->size > 1 && a->enabled && count * 2 <= a->oneshot_max) {
        a->n_fused++;
        SITS_KERNEL_CHECK(sits_k_ar_add_rmsnorm(&a->peers, out, xq, xs, residual, residual_f32, x, w, n, dim, eps, a->stream));
        return SITS_OK;
    }
    SITS_CHECK(car_allreduce_sum(c, x, count, SITS_DT_BF16));
    if (residual_f32) {
        SITS_KERNEL_CHECK(sits_k_add_rmsnorm_f32res(out, xq, xs, residual, x, w, n, dim, eps, a->stream));
        return SITS_OK;
    }
    SITS_KERNEL_CHECK(sits_k_add_rmsnorm(out, residual, x, w, n, dim, eps, a->stream));
    if (xq) SITS_KERNEL_CHECK(sits_k_quant_fp8_rows(xq, xs, out, n, dim, a->stream));
    return SITS_OK;
}
