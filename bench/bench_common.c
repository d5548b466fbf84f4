/* bench_common.c -- see bench_common.h. */
#include "bench/bench_common.h"

#include <math.h>
#include <stdlib.h>
#include <mpi.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/log.h"
#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

sits_status_t sits_bench_backend(const char *device, int gpu0, int threads, sits_backend_t **be_p, int *cuda_p)
{
    int cuda = !strcmp(device, "cuda") || (!strcmp(device, "auto") && sits_backend_cuda_device_count() > 0);
    if (cuda_p) *cuda_p = cuda;
    MPI_Comm node;
    int local = 0, n_local = 1;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    MPI_Comm_size(node, &n_local);
    MPI_Comm_free(&node);
    if (cuda) {
        /* the server's --gemv-max-tokens through its variable (0: cuBLASLt for every linear) */
        const char *gv = getenv("SITS_GEMV_MAX_TOKENS");
        sits_backend_params_t bp = { .device = gpu0 + local, .gemv_max_tokens = gv ? (atoi(gv) > 0 ? atoi(gv) : -1) : 0 };
        return sits_backend_cuda_create(&bp, be_p);
    }
    if (threads <= 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        threads = cores / n_local > 0 ? (int)(cores / n_local) : 1;
    }
    sits_backend_params_t bp = { .threads = threads };
    return sits_backend_cpu_create(&bp, be_p);
}

double sits_bench_kl_row(const float *a, const float *b, int v, int *same_top1)
{
    double ma = -INFINITY, mb = -INFINITY, sa = 0, sb = 0, kl = 0;
    int ia = 0, ib = 0;
    for (int i = 0; i < v; i++) {
        if (a[i] > ma) { ma = a[i]; ia = i; }
        if (b[i] > mb) { mb = b[i]; ib = i; }
    }
    for (int i = 0; i < v; i++) { sa += exp(a[i] - ma); sb += exp(b[i] - mb); }
    double la = ma + log(sa), lb = mb + log(sb);
    for (int i = 0; i < v; i++) {
        double lpa = a[i] - la, lpb = b[i] - lb;
        kl += exp(lpa) * (lpa - lpb);
    }
    *same_top1 = ia == ib;
    return kl > 0 ? kl : 0;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

sits_status_t sits_bench_copy_bw(const sits_backend_t *be, size_t bytes, double *bw_p)
{
    double t[10];
    if (be->device >= 0) {
#ifdef HAVE_CUDA
        sits_status_t st = SITS_OK;
        void *a = NULL, *b = NULL;
        cudaEvent_t e0 = NULL, e1 = NULL;
        if (cudaSetDevice(be->device) != cudaSuccess || cudaMalloc(&a, bytes) != cudaSuccess ||
            cudaMalloc(&b, bytes) != cudaSuccess || cudaEventCreate(&e0) != cudaSuccess ||
            cudaEventCreate(&e1) != cudaSuccess || cudaMemset(a, 1, bytes) != cudaSuccess ||
            cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice) != cudaSuccess) {
            SITS_ERROR(SITS_SUB_CUDA, "copy bandwidth set-up: %s", cudaGetErrorString(cudaGetLastError()));
            st = SITS_ERR_CUDA;
            goto out_cuda;
        }
        for (int i = 0; i < 10; i++) {
            float ms = 0;
            cudaEventRecord(e0, 0);
            cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, 0);
            cudaEventRecord(e1, 0);
            if (cudaEventSynchronize(e1) != cudaSuccess || cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess) {
                SITS_ERROR(SITS_SUB_CUDA, "copy bandwidth: %s", cudaGetErrorString(cudaGetLastError()));
                st = SITS_ERR_CUDA;
                goto out_cuda;
            }
            t[i] = 1e-3 * ms;
        }
    out_cuda:
        if (e1) cudaEventDestroy(e1);
        if (e0) cudaEventDestroy(e0);
        cudaFree(b);
        cudaFree(a);
        if (st != SITS_OK) return st;
#else
        return SITS_ERR_UNSUPPORTED;
#endif
    } else {
        char *a = malloc(bytes), *b = malloc(bytes);
        if (!a || !b) { free(a); free(b); return SITS_ERR_NOMEM; }
        memset(a, 1, bytes);
        memset(b, 2, bytes);   /* first touch outside the timing */
        for (int i = 0; i < 10; i++) {
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            memcpy(b, a, bytes);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            t[i] = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
            a[i] ^= b[bytes - 1 - i];   /* keep the copies observable */
        }
        free(a);
        free(b);
    }
    qsort(t, 10, sizeof t[0], cmp_double);
    *bw_p = 2.0 * (double)bytes / (0.5 * (t[4] + t[5]));   /* the median */
    return SITS_OK;
}

double sits_bench_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

uint64_t sits_bench_rng_next(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

double sits_bench_median3(const double t[3])
{
    return t[0] > t[1] ? (t[1] > t[2] ? t[1] : (t[0] > t[2] ? t[2] : t[0])) : (t[0] > t[2] ? t[0] : (t[1] > t[2] ? t[2] : t[1]));
}
