/* bench_common.c -- see bench_common.h. */
#include "bench/bench_common.h"

#include <math.h>
#include <stdlib.h>
#include <mpi.h>
#include <string.h>
#include <unistd.h>

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
