/* cuda.c -- the CUDA backend: bf16 activations, weights and KV cache, fp32 accumulation.
 *
 * One device (params->device), one non-blocking stream on which every op is enqueued in order;
 * `sync`, `download` and `download_f32` wait for it. Memory is plain cudaMalloc (no managed memory).
 * GEMMs go through cuBLASLt (BF16 in/out, CUBLAS_COMPUTE_32F, 32 MiB workspace) in the TN layout
 * of REFERENCE.md: y[n, out] = x[n, in] . w[out, in]^T is, column-major, D[out, n] = op(A) B with
 * A = w (transa T, lda in), B = x (transb N, ldb in), m = out, n = tokens, k = in, ldd = out; the
 * bias is added by the BIAS epilogue (bf16 bias). The layouts and the heuristic's first algorithm
 * are cached per (m, n, k, bias, D dtype, pointer alignments) in an open-addressing table.
 * [perf: gemm autotune] For decode shapes (n a power of two <= 256) the first call times the
 * heuristic's first 8 candidates and keeps the fastest (params->no_gemm_tune: the first one).
 * [perf] matmul_f32out writes D in fp32 (the lm_head: the sampler sees unrounded logits).
 * Other ops are the kernels of kernels/sits_kernels.h.
 *
 * Host <-> device copies go through two pinned staging buffers used in turn (an event per buffer
 * says when its last copy finished), so a host source may be reused as soon as a call returns,
 * weights are converted to bf16 on the host chunk by chunk while the previous chunk is copied,
 * and host memory use is bounded whatever the tensor size.
 *
 * [perf: cuda graphs] graph_begin / graph_end record the ops enqueued in between (stream capture,
 * thread-local mode) into an executable graph; graph_launch replays it. Ops that wait for the
 * stream (upload, download, sync) refuse to run while a capture is open. */
#include "backend/backend.h"
#include "backend/cuda_check.h"
#include "backend/cuda_fp8.h"
#include "backend/cuda_optime.h"
#include "kernels/sits_kernels.h"
#include "util/log.h"

#include <sched.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CUDA_WORKSPACE_BYTES ((size_t)32 << 20)
#define CUDA_STAGING_BYTES ((size_t)4 << 20) /* per buffer; two buffers */
#define CUDA_PLANS_INIT 64                   /* power of two */
#define CUDA_ATTN_SCRATCH_BYTES ((size_t)32 << 20) /* [attention] sits_k_attention's scratch */
#define CUDA_HEALTH_MAX 4                    /* [nccl hook] health checks per backend */
/* [perf: decode gemv] tokens up to which linears run sits_k_gemv by default: on the H200 the one-token kernel beats
 * cuBLASLt (8B bf16 batch 1: 4.98 -> 4.52 ms a step, same call) and [perf: mma gemv] the tensor-core GEMV beats it at
 * 2-8 tokens (8B FP8 batch 8 3.82 -> 3.27 ms, bf16 4.89 -> 4.51; bench/RESULTS.md) */
#define CUDA_GEMV_DEFAULT_N 16

/* One cached GEMM configuration. */
typedef struct {
    int used;
    int m, n, k, bias;
    int f32d;                          /* [perf] D is fp32 (matmul_f32out) */
    int align_a, align_b, align_d;     /* pointer alignment in bytes (2, 4, 8 or 16) */
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
} cuda_gemm_plan_t;

typedef struct {
    cudaStream_t stream;
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t desc[2];      /* [0] plain, [1] with the BIAS epilogue */
    void *workspace;
    unsigned char *staging[2];         /* pinned host, CUDA_STAGING_BYTES each */
    cudaEvent_t staged[2];             /* recorded after the last copy out of / into staging[i] */
    int next_staging;
    cuda_gemm_plan_t *plans;
    size_t n_plans, cap_plans;
    /* [nccl hook] health checks run while a wait polls the stream (see cuda_wait) */
    struct { sits_backend_health_fn fn; void *ctx; } health[CUDA_HEALTH_MAX];
    int n_health;
    int capturing;                     /* [perf: cuda graphs] between graph_begin and graph_end */
    sits_k_attn_ws_t attn_ws;          /* [attention] split-K / token-list scratch and the SM count */
    sits_cuda_fp8_t *fp8;              /* [fp8] FP8 GEMM state (cuda_fp8.c), created on first use */
    int tune;                          /* [perf: gemm autotune] time the heuristic's candidates (see plan_build) */
    int gemv_max_n;                    /* [perf: decode gemv] linears of <= this many tokens: sits_k_gemv */
    uint64_t dev_allocs, dev_alloc_bytes; /* [memory plan] cudaMallocs: the fixed buffers and cuda_alloc's */
    void *w4_scratch;                  /* [int4] bf16 [out, in] of the largest INT4 linear (reserved by mem_plan) */
    size_t w4_scratch_bytes;
    void *w4_tmp;                      /* [int4 tiles] w4_layout's copy of a linear's row layout, grown as needed while
                                        * the weights load; freed by mem_plan (after the load) and destroy */
    size_t w4_tmp_bytes;
    sits_cuda_optime_t *optime;        /* [op times] SITS_CUDA_OP_TIMES=1: eager ops timed by events, else NULL */
} cuda_impl_t;

static cuda_impl_t *impl_of(sits_backend_t *be) { return be->impl; }

/* ---- [nccl hook] waits with health checks -------------------------------------------------- */

static double cuda_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Wait for `ev` (NULL: the whole stream). Without health checks: the blocking CUDA call. With
 * them: poll, and on each not-ready poll run every check with the seconds waited so far (a check
 * that finds a fault aborts the job or returns an error, which ends the wait). */
static sits_status_t cuda_wait(cuda_impl_t *c, cudaEvent_t ev)
{
    if (c->n_health == 0) {
        SITS_CUDA_CHECK(ev ? cudaEventSynchronize(ev) : cudaStreamSynchronize(c->stream));
        if (!ev) sits_cuda_optime_harvest(c->optime); /* [op times] */
        return SITS_OK;
    }
    double t0 = cuda_now_s();
    for (long spins = 0;; spins++) {
        cudaError_t e = ev ? cudaEventQuery(ev) : cudaStreamQuery(c->stream);
        if (e == cudaSuccess) {
            if (!ev) sits_cuda_optime_harvest(c->optime); /* [op times] */
            return SITS_OK;
        }
        if (e != cudaErrorNotReady) {
            SITS_ERROR(SITS_SUB_CUDA, "waiting for the stream: %s", cudaGetErrorString(e));
            return SITS_ERR_CUDA;
        }
        double waited = cuda_now_s() - t0;
        for (int i = 0; i < c->n_health; i++) {
            sits_status_t st = c->health[i].fn(c->health[i].ctx, waited);
            if (st != SITS_OK) return st;
        }
        if (spins < 4096) sched_yield();
        else {
            struct timespec ts = { 0, 20000 };
            nanosleep(&ts, NULL);
        }
    }
}

/* ---- memory ------------------------------------------------------------------------------ */

static sits_status_t cuda_alloc(sits_backend_t *be, size_t bytes, void **ptr_p)
{
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 256);
    if (e != cudaSuccess) {
        SITS_ERROR(SITS_SUB_CUDA, "cudaMalloc of %zu bytes on gpu %d: %s", bytes, be->device, cudaGetErrorString(e));
        return e == cudaErrorMemoryAllocation ? SITS_ERR_NOMEM : SITS_ERR_CUDA;
    }
    impl_of(be)->dev_allocs++;
    impl_of(be)->dev_alloc_bytes += bytes;
    *ptr_p = p;
    return SITS_OK;
}

static void cuda_free(sits_backend_t *be, void *ptr)
{
    if (!ptr) return;
    cudaError_t e = cudaFree(ptr);
    if (e != cudaSuccess) SITS_ERROR(SITS_SUB_CUDA, "cudaFree(%p): %s", ptr, cudaGetErrorString(e));
}

/* Fill n bytes of staging memory with the part of the source that starts at byte `off` of the
 * destination range. Returns 0, or -1 when the source cannot be converted. */
typedef int (*staging_fill_fn)(void *ctx, unsigned char *staging, size_t off, size_t n);

/* dst[0 .. bytes) on the device = what fill() writes, through the staging buffers in turn. */
static sits_status_t staged_h2d(cuda_impl_t *c, unsigned char *dst, size_t bytes, size_t granule, staging_fill_fn fill,
                                void *ctx)
{
    size_t chunk_max = CUDA_STAGING_BYTES / granule * granule;
    for (size_t off = 0; off < bytes;) {
        size_t n = bytes - off < chunk_max ? bytes - off : chunk_max;
        int i = c->next_staging;
        c->next_staging ^= 1;
        SITS_CUDA_CHECK(cudaEventSynchronize(c->staged[i]));  /* its previous copy is done */
        if (fill(ctx, c->staging[i], off, n) != 0) return SITS_ERR_UNSUPPORTED;
        SITS_CUDA_CHECK(cudaMemcpyAsync(dst + off, c->staging[i], n, cudaMemcpyHostToDevice, c->stream));
        SITS_CUDA_CHECK(cudaEventRecord(c->staged[i], c->stream));
        off += n;
    }
    return SITS_OK;
}

static int fill_bytes(void *ctx, unsigned char *staging, size_t off, size_t n)
{
    memcpy(staging, (const unsigned char *)ctx + off, n);
    return 0;
}

/* [perf: cuda graphs] Ops that wait for the stream cannot be recorded into a graph. */
static sits_status_t not_capturing(cuda_impl_t *c, const char *what)
{
    if (!c->capturing) return SITS_OK;
    SITS_ERROR(SITS_SUB_CUDA, "%s while a cuda graph is being captured (an engine bug)", what);
    return SITS_ERR_INTERNAL;
}

/* True for page-locked host memory (cudaMallocHost / cudaHostRegister). */
static int host_pinned(const void *p)
{
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return a.type == cudaMemoryTypeHost;
}

/* Through the two pinned staging buffers (returns once src is copied into them), except a large
 * page-locked source, which goes straight to the device in one DMA and is waited for: the staging
 * memcpy runs at single-thread host speed (5.5 GB/s on the H200 host against 55 GB/s PCIe; KV
 * restores from the pinned offload buffers, bench/RESULTS.md). Either way src may be reused on return. */
static sits_status_t cuda_upload(sits_backend_t *be, void *dst, const void *src_host, size_t bytes)
{
    cuda_impl_t *c = impl_of(be);
    SITS_CHECK(not_capturing(c, "upload"));
    if (bytes >= ((size_t)1 << 20) && host_pinned(src_host)) {
        SITS_CUDA_CHECK(cudaMemcpyAsync(dst, src_host, bytes, cudaMemcpyHostToDevice, c->stream));
        return cuda_wait(c, NULL); /* [nccl hook] */
    }
    return staged_h2d(c, dst, bytes, 1, fill_bytes, (void *)src_host);
}

/* [scale] rows through the pinned staging buffers (packed there), each chunk one 2D copy to the pitched
 * destination; as staged_h2d, the host rows may be reused on return */
static sits_status_t cuda_upload_rows(sits_backend_t *be, void *dst, size_t dst_pitch, const void *src_host, size_t src_pitch,
                                      size_t row_bytes, int rows)
{
    cuda_impl_t *c = impl_of(be);
    SITS_CHECK(not_capturing(c, "upload_rows"));
    if (rows < 0 || row_bytes == 0 || row_bytes > dst_pitch || row_bytes > src_pitch || row_bytes > CUDA_STAGING_BYTES)
        return SITS_ERR_INVALID;
    int per = (int)(CUDA_STAGING_BYTES / row_bytes);
    for (int r0 = 0; r0 < rows; r0 += per) {
        int n = rows - r0 < per ? rows - r0 : per;
        int i = c->next_staging;
        c->next_staging ^= 1;
        SITS_CUDA_CHECK(cudaEventSynchronize(c->staged[i]));  /* its previous copy is done */
        for (int k = 0; k < n; k++)
            memcpy(c->staging[i] + (size_t)k * row_bytes, (const unsigned char *)src_host + (size_t)(r0 + k) * src_pitch,
                   row_bytes);
        SITS_CUDA_CHECK(cudaMemcpy2DAsync((unsigned char *)dst + (size_t)r0 * dst_pitch, dst_pitch, c->staging[i], row_bytes,
                                          row_bytes, (size_t)n, cudaMemcpyHostToDevice, c->stream));
        SITS_CUDA_CHECK(cudaEventRecord(c->staged[i], c->stream));
    }
    return SITS_OK;
}

static sits_status_t cuda_download(sits_backend_t *be, void *dst_host, const void *src, size_t bytes)
{
    cuda_impl_t *c = impl_of(be);
    SITS_CHECK(not_capturing(c, "download"));
    SITS_CUDA_CHECK(cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, c->stream));
    return cuda_wait(c, NULL); /* [nccl hook] */
}

static sits_status_t cuda_memset0(sits_backend_t *be, void *dst, size_t bytes)
{
    SITS_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, impl_of(be)->stream));
    return SITS_OK;
}

/* Rows [r0, r1) x cols [c0, c1) of a host tensor, flattened, converted to bf16. */
typedef struct {
    const unsigned char *src;
    sits_dtype_t dt;
    size_t esz;
    int64_t src_cols, r0, c0, cols;
} weight_src_t;

/* n elements of dtype dt at s (unaligned) -> bf16 bit patterns. */
static int convert_to_bf16(sits_dtype_t dt, const unsigned char *s, uint16_t *out, size_t n)
{
    switch (dt) {
    case SITS_DT_BF16:
        memcpy(out, s, n * 2);
        return 0;
    case SITS_DT_F32:
        for (size_t i = 0; i < n; i++) {
            float f;
            memcpy(&f, s + 4 * i, 4);
            out[i] = sits_f32_to_bf16(f);
        }
        return 0;
    case SITS_DT_F16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            out[i] = sits_f32_to_bf16(sits_f16_to_f32(h)); /* f16 -> f32 is exact */
        }
        return 0;
    default: { /* the rarer source types go through fp32 in small pieces */
        float tmp[256];
        size_t esz = sits_dtype_size(dt);
        for (size_t i = 0; i < n; i += 256) {
            size_t m = n - i < 256 ? n - i : 256;
            if (sits_convert_to_f32(dt, s + i * esz, tmp, m) != 0) return -1;
            for (size_t j = 0; j < m; j++) out[i + j] = sits_f32_to_bf16(tmp[j]);
        }
        return 0;
    }
    }
}

static int fill_weight(void *ctx, unsigned char *staging, size_t off, size_t n)
{
    const weight_src_t *w = ctx;
    uint16_t *out = (uint16_t *)staging;
    int64_t e = (int64_t)(off / 2), end = e + (int64_t)(n / 2);
    while (e < end) {
        int64_t r = e / w->cols, col = e % w->cols;
        int64_t seg = w->cols - col < end - e ? w->cols - col : end - e;
        const unsigned char *s = w->src + ((size_t)(w->r0 + r) * (size_t)w->src_cols + (size_t)(w->c0 + col)) * w->esz;
        if (convert_to_bf16(w->dt, s, out, (size_t)seg) != 0) return -1;
        out += seg;
        e += seg;
    }
    return 0;
}

static sits_status_t cuda_upload_weight(sits_backend_t *be, void *dst, int64_t dst_row0, const void *src, sits_dtype_t src_dt,
                                        int64_t src_cols, int64_t r0, int64_t r1, int64_t c0, int64_t c1)
{
    if (r0 < 0 || r1 < r0 || c0 < 0 || c1 < c0 || c1 > src_cols || dst_row0 < 0) {
        SITS_ERROR(SITS_SUB_CUDA, "upload_weight: bad range rows [%lld, %lld) cols [%lld, %lld) of %lld",
                   (long long)r0, (long long)r1, (long long)c0, (long long)c1, (long long)src_cols);
        return SITS_ERR_INVALID;
    }
    weight_src_t w = { src, src_dt, sits_dtype_size(src_dt), src_cols, r0, c0, c1 - c0 };
    if (w.esz == 0) return SITS_ERR_INVALID;
    size_t bytes = (size_t)(r1 - r0) * (size_t)w.cols * 2;
    unsigned char *d = (unsigned char *)dst + (size_t)dst_row0 * (size_t)w.cols * 2;
    sits_status_t st = staged_h2d(impl_of(be), d, bytes, 2, fill_weight, &w);
    if (st == SITS_ERR_UNSUPPORTED)
        SITS_ERROR(SITS_SUB_CUDA, "upload_weight: cannot convert dtype %s to bf16", sits_dtype_name(src_dt));
    return st;
}

static sits_status_t cuda_download_f32(sits_backend_t *be, float *dst_host, const void *src, size_t n)
{
    cuda_impl_t *c = impl_of(be);
    SITS_CHECK(not_capturing(c, "download_f32"));
    size_t chunk_max = CUDA_STAGING_BYTES / 2;
    const unsigned char *s = src;
    for (size_t off = 0; off < n;) {
        size_t m = n - off < chunk_max ? n - off : chunk_max;
        int i = c->next_staging;
        c->next_staging ^= 1;
        SITS_CUDA_CHECK(cudaMemcpyAsync(c->staging[i], s + off * 2, m * 2, cudaMemcpyDeviceToHost, c->stream));
        SITS_CUDA_CHECK(cudaEventRecord(c->staged[i], c->stream));
        SITS_CHECK(cuda_wait(c, c->staged[i])); /* [nccl hook] */
        const uint16_t *h = (const uint16_t *)c->staging[i];
        for (size_t j = 0; j < m; j++) dst_host[off + j] = sits_bf16_to_f32(h[j]);
        off += m;
    }
    return SITS_OK;
}

/* ---- GEMM (cuBLASLt) ----------------------------------------------------------------------- */

static int ptr_align(const void *p)
{
    uintptr_t u = (uintptr_t)p;
    return (u & 15) == 0 ? 16 : (u & 7) == 0 ? 8 : (u & 3) == 0 ? 4 : 2;
}

static size_t plan_hash(const cuda_gemm_plan_t *p)
{
    uint64_t h = (uint64_t)p->m * 0x9E3779B97F4A7C15ull;
    h ^= (uint64_t)p->n * 0xC2B2AE3D27D4EB4Full + (h << 6) + (h >> 2);
    h ^= (uint64_t)p->k * 0x165667B19E3779F9ull + (h << 6) + (h >> 2);
    h ^= (uint64_t)(p->bias | p->align_a << 1 | p->align_b << 6 | p->align_d << 11 | p->f32d << 16) * 0x27D4EB2F165667C5ull;
    return (size_t)(h ^ (h >> 29));
}

static int plan_same(const cuda_gemm_plan_t *a, const cuda_gemm_plan_t *b)
{
    return a->m == b->m && a->n == b->n && a->k == b->k && a->bias == b->bias && a->align_a == b->align_a &&
           a->align_b == b->align_b && a->align_d == b->align_d && a->f32d == b->f32d;
}

static cuda_gemm_plan_t *plan_slot(cuda_gemm_plan_t *table, size_t cap, const cuda_gemm_plan_t *key)
{
    size_t i = plan_hash(key) & (cap - 1);
    while (table[i].used && !plan_same(&table[i], key)) i = (i + 1) & (cap - 1);
    return &table[i];
}

static void plan_release(cuda_gemm_plan_t *p)
{
    if (p->a) cublasLtMatrixLayoutDestroy(p->a);
    if (p->b) cublasLtMatrixLayoutDestroy(p->b);
    if (p->d) cublasLtMatrixLayoutDestroy(p->d);
}

static sits_status_t plans_grow(cuda_impl_t *c)
{
    size_t cap = c->cap_plans * 2;
    cuda_gemm_plan_t *t = calloc(cap, sizeof *t);
    if (!t) return SITS_ERR_NOMEM;
    for (size_t i = 0; i < c->cap_plans; i++)
        if (c->plans[i].used) *plan_slot(t, cap, &c->plans[i]) = c->plans[i];
    free(c->plans);
    c->plans = t;
    c->cap_plans = cap;
    return SITS_OK;
}

/* [perf: gemm autotune] Candidates the heuristic is asked for, and timed runs of each. */
#define CUDA_TUNE_ALGOS 8
#define CUDA_TUNE_REPS 5

/* [perf: gemm autotune] Times each candidate on the call's own operands (y is overwritten; the call
 * itself runs right after) and returns the fastest: best of CUDA_TUNE_REPS after one warm-up run.
 * The heuristic's first choice often splits K with a separate reduce kernel for the skinny decode
 * shapes, which costs more than it saves at batch 1-32. Never while a graph is being captured. */
static int plan_tune(cuda_impl_t *c, cuda_gemm_plan_t *p, const cublasLtMatmulHeuristicResult_t *res, int n_res,
                     const void *w, const void *x, void *y)
{
    cudaEvent_t ev[2];
    if (cudaEventCreate(&ev[0]) != cudaSuccess) return 0;
    if (cudaEventCreate(&ev[1]) != cudaSuccess) { cudaEventDestroy(ev[0]); return 0; }
    const float alpha = 1.0f, beta = 0.0f;
    int best = 0;
    float best_ms = 1e30f, first_ms = 0.0f;
    for (int i = 0; i < n_res; i++) {
        if (res[i].workspaceSize > CUDA_WORKSPACE_BYTES) continue;
        float ms_min = 1e30f;
        int ok = 1;
        for (int r = 0; ok && r <= CUDA_TUNE_REPS; r++) {
            ok = cudaEventRecord(ev[0], c->stream) == cudaSuccess &&
                 cublasLtMatmul(c->lt, c->desc[p->bias], &alpha, w, p->a, x, p->b, &beta, y, p->d, y, p->d, &res[i].algo,
                                c->workspace, CUDA_WORKSPACE_BYTES, c->stream) == CUBLAS_STATUS_SUCCESS &&
                 cudaEventRecord(ev[1], c->stream) == cudaSuccess && cuda_wait(c, ev[1]) == SITS_OK;
            float ms = 0.0f;
            if (ok && r > 0 && cudaEventElapsedTime(&ms, ev[0], ev[1]) == cudaSuccess && ms < ms_min) ms_min = ms;
        }
        if (!ok) continue;
        if (i == 0) first_ms = ms_min;
        if (ms_min < best_ms) { best_ms = ms_min; best = i; }
    }
    cudaEventDestroy(ev[0]);
    cudaEventDestroy(ev[1]);
    (void)cudaGetLastError();
    SITS_DEBUG(SITS_SUB_CUDA, "gemm tune m %d n %d k %d: candidate %d of %d, %.1f us (heuristic's first %.1f us)", p->m, p->n,
               p->k, best, n_res, best_ms * 1e3, first_ms * 1e3);
    return best;
}

/* Layouts and the heuristic's best algorithm for the key (or, with autotune, the fastest of its
 * candidates on the operands w, x, y of the first call); logged once per new shape. */
static sits_status_t plan_build(cuda_impl_t *c, cuda_gemm_plan_t *p, const void *w, const void *x, void *y)
{
    sits_status_t st = SITS_OK;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t cand[CUDA_TUNE_ALGOS], res;
    int n_res = 0;
    uint64_t ws = CUDA_WORKSPACE_BYTES;
    uint32_t al_a = (uint32_t)p->align_a, al_b = (uint32_t)p->align_b, al_d = (uint32_t)p->align_d;

    /* Column-major views: A = w is [k, m] ld k (transposed by the op), B = x is [k, n] ld k, D = y [m, n] ld m. */
    SITS_CUBLAS_CHECK_GOTO(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, p->k, p->m, p->k), st, err);
    SITS_CUBLAS_CHECK_GOTO(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, p->k, p->n, p->k), st, err);
    SITS_CUBLAS_CHECK_GOTO(cublasLtMatrixLayoutCreate(&p->d, p->f32d ? CUDA_R_32F : CUDA_R_16BF, p->m, p->n, p->m), st, err);
    SITS_CUBLAS_CHECK_GOTO(cublasLtMatmulPreferenceCreate(&pref), st, err);
    SITS_CUBLAS_CHECK_GOTO(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
                           st, err_pref);
    SITS_CUBLAS_CHECK_GOTO(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a,
                                                                sizeof al_a), st, err_pref);
    SITS_CUBLAS_CHECK_GOTO(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b,
                                                                sizeof al_b), st, err_pref);
    SITS_CUBLAS_CHECK_GOTO(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d,
                                                                sizeof al_d), st, err_pref);
    SITS_CUBLAS_CHECK_GOTO(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d,
                                                                sizeof al_d), st, err_pref);
    /* [perf: gemm autotune] decode shapes only (n a power of two <= 256: the graph buckets), so that
     * prefill chunks of every length do not each pay for a tuning run */
    int tune = c->tune && !c->capturing && p->n <= 256 && (p->n & (p->n - 1)) == 0;
    SITS_CUBLAS_CHECK_GOTO(cublasLtMatmulAlgoGetHeuristic(c->lt, c->desc[p->bias], p->a, p->b, p->d, p->d, pref,
                                                          tune ? CUDA_TUNE_ALGOS : 1, cand, &n_res), st, err_pref);
    res = cand[0];
    if (tune && n_res > 1) res = cand[plan_tune(c, p, cand, n_res, w, x, y)];
    if (n_res == 0) {
        SITS_ERROR(SITS_SUB_CUDA, "cublaslt has no bf16 algorithm for m %d n %d k %d (bias %d, fp32 out %d, alignment %d/%d/%d)",
                   p->m, p->n, p->k, p->bias, p->f32d, p->align_a, p->align_b, p->align_d);
        st = SITS_ERR_UNSUPPORTED;
        goto err_pref;
    }
    p->algo = res.algo;
    cublasLtMatmulPreferenceDestroy(pref);
    SITS_DEBUG(SITS_SUB_CUDA, "gemm plan m %d n %d k %d bias %d fp32 out %d: workspace %zu", p->m, p->n, p->k, p->bias,
               p->f32d, res.workspaceSize);
    return SITS_OK;
err_pref:
    cublasLtMatmulPreferenceDestroy(pref);
err:
    plan_release(p);
    return st;
}

static sits_status_t plan_get(cuda_impl_t *c, const cuda_gemm_plan_t *key, const void *w, const void *x, void *y,
                              cuda_gemm_plan_t **plan_p)
{
    cuda_gemm_plan_t *p = plan_slot(c->plans, c->cap_plans, key);
    if (!p->used) {
        if (2 * (c->n_plans + 1) > c->cap_plans) {
            SITS_CHECK(plans_grow(c));
            p = plan_slot(c->plans, c->cap_plans, key);
        }
        cuda_gemm_plan_t fresh = *key;
        SITS_CHECK(plan_build(c, &fresh, w, x, y));
        fresh.used = 1;
        *p = fresh;
        c->n_plans++;
    }
    *plan_p = p;
    return SITS_OK;
}

/* [perf] f32d: y is fp32 (matmul_f32out; no bias: the bf16 BIAS epilogue is set up for bf16 D only). */
static sits_status_t gemm(sits_backend_t *be, void *y, int f32d, const void *x, const void *w, const void *bias, int n, int in,
                          int out)
{
    cuda_impl_t *c = impl_of(be);
    if (n < 0 || in <= 0 || out <= 0) {
        SITS_ERROR(SITS_SUB_CUDA, "matmul: bad shape n %d in %d out %d", n, in, out);
        return SITS_ERR_INVALID;
    }
    if (f32d && bias) {
        SITS_ERROR(SITS_SUB_CUDA, "matmul_f32out: a bias is not supported on cuda (m %d k %d)", out, in);
        return SITS_ERR_UNSUPPORTED;
    }
    if (n == 0) return SITS_OK;
    if (n <= c->gemv_max_n) {   /* [perf: decode gemv] one launch, no split-K reduce; unsupported shapes fall through */
        sits_status_t st = sits_k_gemv(y, f32d, x, NULL, w, NULL, bias, 0, n, in, out, c->stream);
        if (st != SITS_ERR_UNSUPPORTED) {
            SITS_KERNEL_CHECK(st);
            return SITS_OK;
        }
    }
    cuda_gemm_plan_t key = { 0 }, *p;
    key.m = out;
    key.n = n;
    key.k = in;
    key.bias = bias != NULL;
    key.f32d = f32d;
    key.align_a = ptr_align(w);
    key.align_b = ptr_align(x);
    key.align_d = ptr_align(y);
    if (bias) /* before plan_get: a tuning run uses the descriptor */
        SITS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(c->desc[1], CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    SITS_CHECK(plan_get(c, &key, w, x, y, &p));
    const float alpha = 1.0f, beta = 0.0f;
    SITS_CUBLAS_CHECK(cublasLtMatmul(c->lt, c->desc[p->bias], &alpha, w, p->a, x, p->b, &beta, y, p->d, y, p->d, &p->algo,
                                     c->workspace, CUDA_WORKSPACE_BYTES, c->stream));
    return SITS_OK;
}

static sits_status_t cuda_matmul(sits_backend_t *be, void *y, const void *x, const void *w, const void *bias, int n, int in,
                                 int out)
{
    return gemm(be, y, 0, x, w, bias, n, in, out);
}

/* [int4] W4A16: up to CUDA_W4_GEMV_MAX_N tokens the GEMV kernels (kernels/w4a16.cu: the nibbles read once a step);
 * more tokens, where the reserved scratch holds the linear, dequantise it to bf16 and run the cuBLASLt
 * GEMM (a dequantisation of the weights is ~1.3x their bf16 bytes of traffic, small against a GEMM of
 * that many tokens); else the W4A16 kernels for any n. */
#define CUDA_W4_GEMV_MAX_N 64
static sits_status_t cuda_matmul_w4(sits_backend_t *be, void *y, const void *x, const sits_w4_t *w, const void *bias, int n, int in,
                                    int out)
{
    cuda_impl_t *c = impl_of(be);
    if (n > CUDA_W4_GEMV_MAX_N && c->w4_scratch && (size_t)out * (size_t)in * sizeof(sits_bf16_t) <= c->w4_scratch_bytes &&
        in % 8 == 0) {
        SITS_KERNEL_CHECK(sits_k_w4_dequant((sits_bf16_t *)c->w4_scratch, w->q, w->scale, w->zero, w->gidx, w->tiled, in, out,
                                            w->group_size, w->n_groups, c->stream));
        return gemm(be, y, 0, x, c->w4_scratch, bias, n, in, out);
    }
    SITS_KERNEL_CHECK(sits_k_matmul_w4(y, x, w->q, w->scale, w->zero, w->gidx, w->tiled, bias, n, in, out, w->group_size,
                                       w->n_groups, impl_of(be)->stream));
    return SITS_OK;
}

/* [int4 tiles] backend.h w4_layout: every linear the tiled kernels take (no act-order g_idx, in % 128 == 0, groups of a
 * multiple of 32 inputs) into 16-row x 128-input tiles (sits_k_w4_tile), through a copy of the row layout in w4_tmp
 * (stream-ordered: the next linear's uploads and copies come after this one's kernel); others stay in rows. */
static sits_status_t cuda_w4_layout(sits_backend_t *be, sits_w4_t *w, int out, int in)
{
    cuda_impl_t *c = impl_of(be);
    if (w->tiled || w->gidx || out < 1 || in % 128 || w->group_size % 32) return SITS_OK;
    const size_t qb = (size_t)out * (size_t)(in / 2), sb = sizeof(float) * (size_t)out * (size_t)w->n_groups;
    if (qb + 2 * sb > c->w4_tmp_bytes) {   /* q [out, in / 2] | scale [out, n_groups] | zero [out, n_groups] */
        SITS_CUDA_CHECK(cudaSetDevice(be->device));
        if (c->w4_tmp) SITS_CUDA_CHECK(cudaFree(c->w4_tmp));
        c->w4_tmp = NULL;
        c->w4_tmp_bytes = 0;
        cudaError_t e = cudaMalloc(&c->w4_tmp, qb + 2 * sb);
        if (e != cudaSuccess) {
            SITS_ERROR(SITS_SUB_CUDA, "cudaMalloc of %zu bytes (an INT4 linear's re-arrangement) on gpu %d: %s", qb + 2 * sb,
                       be->device, cudaGetErrorString(e));
            return e == cudaErrorMemoryAllocation ? SITS_ERR_NOMEM : SITS_ERR_CUDA;
        }
        c->w4_tmp_bytes = qb + 2 * sb;
    }
    unsigned char *tmp = c->w4_tmp;
    sits_status_t st = SITS_OK;
    if (cudaMemcpyAsync(tmp, w->q, qb, cudaMemcpyDeviceToDevice, c->stream) != cudaSuccess ||
        cudaMemcpyAsync(tmp + qb, w->scale, sb, cudaMemcpyDeviceToDevice, c->stream) != cudaSuccess ||
        cudaMemcpyAsync(tmp + qb + sb, w->zero, sb, cudaMemcpyDeviceToDevice, c->stream) != cudaSuccess)
        st = SITS_ERR_CUDA;
    if (st == SITS_OK)
        st = sits_k_w4_tile((uint8_t *)w->q, w->scale, w->zero, tmp, (const float *)(tmp + qb), (const float *)(tmp + qb + sb), in,
                            out, w->n_groups, c->stream);
    if (st != SITS_OK) {
        SITS_ERROR(SITS_SUB_CUDA, "re-arranging an INT4 linear (%d x %d) on gpu %d failed", out, in, be->device);
        return st;
    }
    w->tiled = 1;
    return SITS_OK;
}

/* [fp8] per-token quantisation + cuBLASLt FP8 GEMM (cuda_fp8.c) on this backend's handle, workspace and stream */
static sits_status_t cuda_matmul_fp8(sits_backend_t *be, void *y, int y_f32, const void *x, const void *w_q, const float *w_scale,
                                     const void *bias, int n, int in, int out)
{
    cuda_impl_t *c = impl_of(be);
    return sits_cuda_fp8_matmul(&c->fp8, c->lt, c->workspace, CUDA_WORKSPACE_BYTES, c->stream, c->gemv_max_n, y, y_f32, x, w_q,
                                w_scale, bias, n, in, out);
}

static sits_status_t cuda_matmul_fp8q(sits_backend_t *be, void *y, int y_f32, const void *xq, const float *xs, const void *w_q,
                                      const float *w_scale, const void *bias, int n, int in, int out)
{
    cuda_impl_t *c = impl_of(be);
    return sits_cuda_fp8_matmul_q(&c->fp8, c->lt, c->workspace, CUDA_WORKSPACE_BYTES, c->stream, c->gemv_max_n, y, y_f32, xq, xs,
                                  w_q, w_scale, bias, n, in, out);
}

/* [perf: swiglu gemv] backend.h matmul_swiglu: the GEMV with SwiGLU in its epilogue, for the token counts the GEMV
 * serves (1 .. gemv_max_n; [perf: mma gemv] 2-16 on tensor cores); SITS_SWIGLU_GEMV=0 (read at each call: A/B in one
 * process) declines it */
static sits_status_t cuda_matmul_swiglu(sits_backend_t *be, void *act, const void *x, const float *xs, const void *w,
                                        const float *w_scale, int n, int in, int inter)
{
    cuda_impl_t *c = impl_of(be);
    if (n < 1 || n > c->gemv_max_n) return SITS_ERR_UNSUPPORTED;   /* [perf: mma gemv] the GEMV's token counts */
    const char *env = getenv("SITS_SWIGLU_GEMV");
    if (env && !strcmp(env, "0")) return SITS_ERR_UNSUPPORTED;
    sits_status_t st = sits_k_gemv_swiglu(act, x, xs, w, w_scale, w_scale != NULL, n, in, inter, c->stream);
    if (st == SITS_ERR_UNSUPPORTED) return st;
    SITS_KERNEL_CHECK(st);
    return SITS_OK;
}

/* ---- kernels ------------------------------------------------------------------------------- */

static sits_status_t cuda_embed(sits_backend_t *be, void *out, const void *table, const int32_t *tokens, int n, int dim,
                                int v_start, int v_count)
{
    SITS_KERNEL_CHECK(sits_k_embed(out, table, tokens, n, dim, v_start, v_count, impl_of(be)->stream));
    return SITS_OK;
}

static sits_status_t cuda_rmsnorm(sits_backend_t *be, void *out, const void *x, const void *w, int n, int dim, float eps)
{
    SITS_KERNEL_CHECK(sits_k_rmsnorm(out, x, w, n, dim, eps, impl_of(be)->stream));
    return SITS_OK;
}

static sits_status_t cuda_add_rmsnorm(sits_backend_t *be, void *out, void *residual, const void *x, const void *w, int n,
                                      int dim, float eps)
{
    SITS_KERNEL_CHECK(sits_k_add_rmsnorm(out, residual, x, w, n, dim, eps, impl_of(be)->stream));
    return SITS_OK;
}

static sits_status_t cuda_rope(sits_backend_t *be, void *x, int n, int row_stride, int n_rot_heads, int head_dim,
                               const int32_t *pos, const float *inv_freq)
{
    SITS_KERNEL_CHECK(sits_k_rope(x, n, row_stride, n_rot_heads, head_dim, pos, inv_freq, impl_of(be)->stream));
    return SITS_OK;
}

/* [rope + kv write] one fused kernel (kernels/rope_kv.cu) for bf16, int8 and fp8 caches. */
static sits_status_t cuda_rope_kv_write(sits_backend_t *be, void *qkv, int n, int row_stride, int n_q, int n_kv, int head_dim,
                                        const int32_t *pos, const float *inv_freq, void *k_cache, void *v_cache, int block_size,
                                        const int32_t *slot_mapping, const void *q_norm, const void *k_norm, float eps)
{
    if (head_dim > 256) return SITS_ERR_UNSUPPORTED;
    SITS_KERNEL_CHECK(sits_k_rope_kv_write(qkv, n, row_stride, n_q, n_kv, head_dim, pos, inv_freq, k_cache, v_cache,
                                           be->kv_dtype == SITS_DT_I8 ? SITS_K_KV_I8 : be->kv_dtype == SITS_DT_F8_E4M3 ? SITS_K_KV_F8
                                                                                                      : SITS_K_KV_BF16,
                                           block_size, slot_mapping, (const float *)q_norm, (const float *)k_norm, eps,
                                           impl_of(be)->stream));
    return SITS_OK;
}

static sits_status_t cuda_kv_write(sits_backend_t *be, void *k_cache, void *v_cache, const void *qkv, int n, int row_stride,
                                   int k_col, int v_col, int kv_dim, int head_dim, int block_size, const int32_t *slot_mapping)
{
    if (sits_kv_dtype_is_q8(be->kv_dtype)) { /* [int8 kv] [fp8 kv] quantised per (token, head) */
        if (head_dim <= 0 || kv_dim % head_dim) return SITS_ERR_INVALID;
        SITS_KERNEL_CHECK(sits_k_kv_write_q8(k_cache, v_cache, qkv, n, row_stride, k_col, v_col, kv_dim / head_dim, head_dim,
                                             block_size, be->kv_dtype == SITS_DT_F8_E4M3, slot_mapping, impl_of(be)->stream));
        return SITS_OK;
    }
    SITS_KERNEL_CHECK(sits_k_kv_write(k_cache, v_cache, qkv, n, row_stride, k_col, v_col, kv_dim, slot_mapping,
                                      impl_of(be)->stream));
    return SITS_OK;
}

static sits_status_t cuda_attention(sits_backend_t *be, void *out, const void *q, int q_row_stride, const void *k_cache,
                                    const void *v_cache, const sits_attn_args_t *a)
{
    cuda_impl_t *c = impl_of(be); /* [attention] the workspace selects the split-K / prefill kernels */
    sits_k_attn_ws_t ws = c->attn_ws;
    ws.max_seq_tokens = a->max_seq_tokens; /* [perf] below 16: the decode kernel alone */
    int kvq = be->kv_dtype == SITS_DT_F8_E4M3 ? SITS_K_KV_F8 : be->kv_dtype == SITS_DT_I8 ? SITS_K_KV_I8 : SITS_K_KV_BF16;
    if (a->softcap > 0.0f || a->sinks) { /* [families] attention-logit soft-capping (Gemma 2), [gpt-oss] attention sinks */
        SITS_KERNEL_CHECK(sits_k_attention_softcap(out, q, q_row_stride, k_cache, v_cache, a->seq, a->pos, a->block_tables,
                                                   a->max_blocks, a->block_size, a->n_tokens, a->n_heads, a->n_kv_heads,
                                                   a->head_dim, a->window, a->scale, a->softcap, a->sinks, kvq, &ws, c->stream));
        return SITS_OK;
    }
    if (sits_kv_dtype_is_q8(be->kv_dtype)) { /* [int8 kv] [fp8 kv] */
        SITS_KERNEL_CHECK(sits_k_attention_q8(out, q, q_row_stride, k_cache, v_cache, a->seq, a->pos, a->block_tables,
                                              a->max_blocks, a->block_size, a->n_tokens, a->n_heads, a->n_kv_heads,
                                              a->head_dim, a->window, a->scale, be->kv_dtype == SITS_DT_F8_E4M3,
                                              &ws, c->stream));
        return SITS_OK;
    }
    SITS_KERNEL_CHECK(sits_k_attention(out, q, q_row_stride, k_cache, v_cache, a->seq, a->pos, a->block_tables,
                                       a->max_blocks, a->block_size, a->n_tokens, a->n_heads, a->n_kv_heads, a->head_dim,
                                       a->window, a->scale, &ws, c->stream));
    return SITS_OK;
}

static sits_status_t cuda_silu_mul(sits_backend_t *be, void *out, const void *gu, int n, int dim)
{
    SITS_KERNEL_CHECK(sits_k_silu_mul(out, NULL, NULL, gu, n, dim, impl_of(be)->stream));
    return SITS_OK;
}

static sits_status_t cuda_silu_mul_fp8(sits_backend_t *be, void *out, void *xq, float *xs, const void *gu, int n, int dim)
{
    SITS_KERNEL_CHECK(sits_k_silu_mul(out, xq, xs, gu, n, dim, impl_of(be)->stream));
    return SITS_OK;
}

/* [dummy] drawn on the device (kernels/dummy.cu); weights are bf16 [*, w], FP8 ones [*, w] bytes + [*] scales */
static sits_status_t cuda_dummy_rows(sits_backend_t *be, void *dst, int64_t dst_row0, uint64_t base, int64_t r, int64_t n,
                                     int64_t c0, int64_t w)
{
    if (be->weight_dtype != SITS_DT_BF16) return SITS_ERR_UNSUPPORTED;
    SITS_KERNEL_CHECK(sits_k_dummy_rows_bf16((sits_bf16_t *)dst + dst_row0 * w, base, r, n, c0, w, impl_of(be)->stream));
    return SITS_OK;
}

static sits_status_t cuda_dummy_rows_fp8(sits_backend_t *be, void *q, float *s, int64_t dst_row0, uint64_t base, int64_t r,
                                         int64_t n, int64_t cols, int64_t c0, int64_t w)
{
    SITS_KERNEL_CHECK(sits_k_dummy_rows_fp8((uint8_t *)q + dst_row0 * w, s + dst_row0, base, r, n, cols, c0, w,
                                            impl_of(be)->stream));
    return SITS_OK;
}

/* [moe fp8] */
static sits_status_t cuda_quant_fp8_rows(sits_backend_t *be, void *xq, float *xs, const void *x, int n, int dim)
{
    SITS_KERNEL_CHECK(sits_k_quant_fp8_rows(xq, xs, x, n, dim, impl_of(be)->stream));
    return SITS_OK;
}

static sits_status_t cuda_kv_block_copy(sits_backend_t *be, void *flat, void *const *bufs, int n_bufs, const int32_t *ids,
                                        int n_ids, size_t seg, int to_cache)
{
    SITS_KERNEL_CHECK(sits_k_kv_block_copy(flat, bufs, n_bufs, ids, n_ids, seg, to_cache, impl_of(be)->stream));
    return SITS_OK;
}

static sits_status_t cuda_gather_rows(sits_backend_t *be, void *out, const void *x, const int32_t *rows, int n_rows, int dim)
{
    SITS_KERNEL_CHECK(sits_k_gather_rows(out, x, rows, n_rows, dim, impl_of(be)->stream));
    return SITS_OK;
}

static sits_status_t cuda_sync(sits_backend_t *be)
{
    SITS_CHECK(not_capturing(impl_of(be), "sync"));
    return cuda_wait(impl_of(be), NULL); /* [nccl hook] */
}

/* ---- [perf] fp32 residual, fp32 logits, device sampling, pinned host memory, CUDA graphs -------- */

/* backend.h's sampling records and rows are what kernels/sample.cu writes and reads. */
_Static_assert(sizeof(sits_sample_cand_t) == sizeof(sits_k_sample_cand_t) && sizeof(sits_sample_cand_t) == 8,
               "sample candidate layout");
_Static_assert(sizeof(sits_sample_rec_t) == sizeof(sits_k_sample_rec_t) && sizeof(sits_sample_rec_t) == 16,
               "sample record layout");
_Static_assert(sizeof(sits_sample_row_t) == sizeof(sits_k_sample_row_t) && sizeof(sits_sample_row_t) == 32 &&
               offsetof(sits_sample_row_t, mode) == offsetof(sits_k_sample_row_t, mode) &&
               offsetof(sits_sample_row_t, seed) == offsetof(sits_k_sample_row_t, seed) &&
               offsetof(sits_sample_row_t, step) == offsetof(sits_k_sample_row_t, step) &&
               offsetof(sits_sample_row_t, inv_temp) == offsetof(sits_k_sample_row_t, inv_temp),
               "sample row layout");
_Static_assert(SITS_SAMPLE_MAX_C == SITS_K_SAMPLE_MAX_C, "candidate limit");

static sits_status_t cuda_add_rmsnorm_f32res(sits_backend_t *be, void *out, float *residual, const void *x, const void *w,
                                             int n, int dim, float eps)
{
    SITS_KERNEL_CHECK(sits_k_add_rmsnorm_f32res(out, NULL, NULL, residual, x, w, n, dim, eps, impl_of(be)->stream));
    return SITS_OK;
}

static sits_status_t cuda_add_rmsnorm_f32res_fp8(sits_backend_t *be, void *out, void *xq, float *xs, float *residual,
                                                 const void *x, const void *w, int n, int dim, float eps)
{
    SITS_KERNEL_CHECK(sits_k_add_rmsnorm_f32res(out, xq, xs, residual, x, w, n, dim, eps, impl_of(be)->stream));
    return SITS_OK;
}

static sits_status_t cuda_matmul_f32out(sits_backend_t *be, float *y, const void *x, const void *w, const void *bias, int n,
                                        int in, int out)
{
    return gemm(be, y, 1, x, w, bias, n, in, out);
}

static sits_status_t cuda_sample_reduce(sits_backend_t *be, void *recs, const float *logits, int n, int v_start, int v_count,
                                        const sits_sample_row_t *rows, int c)
{
    SITS_KERNEL_CHECK(sits_k_sample_reduce(recs, logits, n, v_start, v_count, (const sits_k_sample_row_t *)rows, c,
                                           impl_of(be)->stream));
    return SITS_OK;
}

static sits_status_t cuda_logit_mask(sits_backend_t *be, float *logits, int v_start, int v_count, const uint32_t *masks,
                                     int words, const int32_t *rows, int n_masks)
{
    SITS_KERNEL_CHECK(sits_k_logit_mask(logits, v_start, v_count, masks, words, rows, n_masks, impl_of(be)->stream));
    return SITS_OK;
}

/* [sampling controls] [logprobs] backend.h's types are what kernels/sample.cu reads and writes. */
_Static_assert(sizeof(sits_logit_proc_row_t) == sizeof(sits_k_proc_row_t) && sizeof(sits_logit_proc_row_t) == 24 &&
               offsetof(sits_logit_proc_row_t, ent0) == offsetof(sits_k_proc_row_t, ent0), "logit_process row layout");
_Static_assert(sizeof(sits_logit_proc_ent_t) == sizeof(sits_k_proc_ent_t) && sizeof(sits_logit_proc_ent_t) == 16 &&
               offsetof(sits_logit_proc_ent_t, flags) == offsetof(sits_k_proc_ent_t, flags) &&
               SITS_PROC_BAN == SITS_K_PROC_BAN && SITS_PROC_PROMPT == SITS_K_PROC_PROMPT, "logit_process entry layout");
_Static_assert(sizeof(sits_logprob_row_t) == sizeof(sits_k_logprob_row_t) && sizeof(sits_logprob_rec_t) == sizeof(sits_k_logprob_rec_t) &&
               sizeof(sits_logprob_rec_t) == 184 && offsetof(sits_logprob_rec_t, top) == offsetof(sits_k_logprob_rec_t, top) &&
               offsetof(sits_logprob_rec_t, n) == offsetof(sits_k_logprob_rec_t, n) &&
               SITS_LOGPROB_MAX_TOP == SITS_K_LOGPROB_MAX_TOP, "logprob record layout");

static sits_status_t cuda_logit_process(sits_backend_t *be, float *logits, int n, int v_start, int v_count,
                                        const sits_logit_proc_row_t *rows, const sits_logit_proc_ent_t *ents, float *ent_raw,
                                        const float *cut, float *rowmax)
{
    SITS_KERNEL_CHECK(sits_k_logit_process(logits, n, v_start, v_count, (const sits_k_proc_row_t *)rows,
                                           (const sits_k_proc_ent_t *)ents, ent_raw, cut, rowmax, impl_of(be)->stream));
    return SITS_OK;
}

static sits_status_t cuda_logprob_reduce(sits_backend_t *be, sits_logprob_rec_t *recs, const float *logits, int v_start,
                                         int v_count, const sits_logprob_row_t *rows, int n_rows)
{
    SITS_KERNEL_CHECK(sits_k_logprob_reduce((sits_k_logprob_rec_t *)recs, logits, v_start, v_count,
                                            (const sits_k_logprob_row_t *)rows, n_rows, impl_of(be)->stream));
    return SITS_OK;
}

static sits_status_t cuda_logit_pick(sits_backend_t *be, float *out, const float *logits, int n, int v_start, int v_count,
                                     const int32_t *ids, const sits_logit_proc_row_t *rows, const sits_logit_proc_ent_t *ents,
                                     const float *ent_raw)
{
    SITS_KERNEL_CHECK(sits_k_logit_pick(out, logits, n, v_start, v_count, ids, (const sits_k_proc_row_t *)rows,
                                        (const sits_k_proc_ent_t *)ents, ent_raw, impl_of(be)->stream));
    return SITS_OK;
}

static sits_status_t cuda_host_alloc(sits_backend_t *be, size_t bytes, void **ptr_p)
{
    void *p = NULL;
    cudaError_t e = cudaMallocHost(&p, bytes ? bytes : 64);
    if (e != cudaSuccess) {
        SITS_ERROR(SITS_SUB_CUDA, "cudaMallocHost of %zu bytes: %s", bytes, cudaGetErrorString(e));
        return e == cudaErrorMemoryAllocation ? SITS_ERR_NOMEM : SITS_ERR_CUDA;
    }
    *ptr_p = p;
    return SITS_OK;
}

static void cuda_host_free(sits_backend_t *be, void *ptr)
{
    if (!ptr) return;
    cudaError_t e = cudaFreeHost(ptr);
    if (e != cudaSuccess) SITS_ERROR(SITS_SUB_CUDA, "cudaFreeHost(%p): %s", ptr, cudaGetErrorString(e));
}

/* Thread-local capture mode: a call this thread must not make while capturing (a synchronous copy,
 * a stream wait) fails and invalidates the capture instead of silently running; other threads
 * (NCCL's proxy, HTTP) are not constrained. */
static sits_status_t cuda_graph_begin(sits_backend_t *be)
{
    cuda_impl_t *c = impl_of(be);
    if (c->capturing) {
        SITS_ERROR(SITS_SUB_CUDA, "graph_begin: a capture is already open on gpu %d", be->device);
        return SITS_ERR_INTERNAL;
    }
    SITS_CUDA_CHECK(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
    c->capturing = 1;
    return SITS_OK;
}

static sits_status_t cuda_graph_end(sits_backend_t *be, void **graph_p)
{
    cuda_impl_t *c = impl_of(be);
    if (!c->capturing) {
        SITS_ERROR(SITS_SUB_CUDA, "graph_end without graph_begin on gpu %d", be->device);
        return SITS_ERR_INTERNAL;
    }
    c->capturing = 0;
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(c->stream, &g);
    if (e != cudaSuccess || !g) {
        SITS_ERROR(SITS_SUB_CUDA, "cudaStreamEndCapture on gpu %d: %s (an op could not be recorded)", be->device,
                   cudaGetErrorString(e));
        if (g) cudaGraphDestroy(g);
        (void)cudaGetLastError(); /* capture errors are not sticky; clear the last-error slot */
        return SITS_ERR_CUDA;
    }
    cudaGraphExec_t x = NULL;
    e = cudaGraphInstantiate(&x, g, 0);
    size_t n_nodes = 0;
    (void)cudaGraphGetNodes(g, NULL, &n_nodes);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) {
        SITS_ERROR(SITS_SUB_CUDA, "cudaGraphInstantiate on gpu %d (%zu nodes): %s", be->device, n_nodes, cudaGetErrorString(e));
        (void)cudaGetLastError();
        return SITS_ERR_CUDA;
    }
    SITS_DEBUG(SITS_SUB_CUDA, "cuda graph of %zu nodes instantiated on gpu %d", n_nodes, be->device);
    *graph_p = x;
    return SITS_OK;
}

static sits_status_t cuda_graph_launch(sits_backend_t *be, void *graph)
{
    SITS_CUDA_CHECK(cudaGraphLaunch((cudaGraphExec_t)graph, impl_of(be)->stream));
    return SITS_OK;
}

static void cuda_graph_destroy(sits_backend_t *be, void *graph)
{
    if (!graph) return;
    cudaError_t e = cudaGraphExecDestroy((cudaGraphExec_t)graph);
    if (e != cudaSuccess) SITS_ERROR(SITS_SUB_CUDA, "cudaGraphExecDestroy: %s", cudaGetErrorString(e));
}

/* ---- lifecycle ----------------------------------------------------------------------------- */

/* Releases whatever create() got so far (fields are NULL until created). */
static void impl_release(cuda_impl_t *c)
{
    if (c->stream) cudaStreamSynchronize(c->stream);
    sits_cuda_fp8_destroy(c->fp8); /* [fp8] */
    if (c->plans) {
        for (size_t i = 0; i < c->cap_plans; i++)
            if (c->plans[i].used) plan_release(&c->plans[i]);
        free(c->plans);
    }
    for (int i = 0; i < 2; i++) {
        if (c->staged[i]) cudaEventDestroy(c->staged[i]);
        if (c->staging[i]) cudaFreeHost(c->staging[i]);
        if (c->desc[i]) cublasLtMatmulDescDestroy(c->desc[i]);
    }
    if (c->workspace) cudaFree(c->workspace);
    if (c->attn_ws.scratch) cudaFree(c->attn_ws.scratch); /* [attention] */
    if (c->w4_scratch) cudaFree(c->w4_scratch);           /* [int4] */
    if (c->w4_tmp) cudaFree(c->w4_tmp);                   /* [int4 tiles] */
    if (c->lt) cublasLtDestroy(c->lt);
    if (c->stream) cudaStreamDestroy(c->stream);
    free(c);
}

static void cuda_destroy(sits_backend_t *be)
{
    cuda_impl_t *c = impl_of(be);
    if (c->optime) { /* [op times] the table, after the stream's last op */
        cudaStreamSynchronize(c->stream);
        sits_cuda_optime_destroy(c->optime, be->device);
        c->optime = NULL;
    }
    impl_release(be->impl);
    free(be);
}

/* [memory plan] The fixed buffers made at create (held) and the FP8 GEMM scratch the shapes need:
 * the activations the GEMM quantises itself (every linear's without the fused kernels, else the o
 * projection's and lm_head's), their scales, and the fp32 product of the unit-scale fallback (taken
 * per shape when cuBLASLt has no outer-vector algorithm for it: planned for every shape). */
static sits_status_t cuda_mem_plan(sits_backend_t *be, const sits_mem_shape_t *sh, int reserve, sits_mem_plan_t *plan)
{
    cuda_impl_t *c = impl_of(be);
    if (reserve && c->w4_tmp) {   /* [int4 tiles] the weights are loaded: w4_layout's copy goes */
        SITS_CUDA_CHECK(cudaSetDevice(be->device));
        SITS_CUDA_CHECK(cudaStreamSynchronize(c->stream));
        SITS_CUDA_CHECK(cudaFree(c->w4_tmp));
        c->w4_tmp = NULL;
        c->w4_tmp_bytes = 0;
    }
    sits_mem_plan_add(plan, "cublaslt workspace", CUDA_WORKSPACE_BYTES, 1);
    sits_mem_plan_add(plan, "attention scratch", CUDA_ATTN_SCRATCH_BYTES, 1);
    if (sh->w4_elems) {   /* [int4] the dequantised linear of batches above the GEMV kernel's */
        size_t wb = sh->w4_elems * sizeof(sits_bf16_t);
        sits_mem_plan_add(plan, "int4: one linear dequantised to bf16 (large batches)", wb, 0);
        if (reserve && wb > c->w4_scratch_bytes) {
            SITS_CUDA_CHECK(cudaSetDevice(be->device));
            if (c->w4_scratch) cudaFree(c->w4_scratch);
            c->w4_scratch = NULL;
            c->w4_scratch_bytes = 0;
            SITS_CUDA_CHECK(cudaMalloc(&c->w4_scratch, wb));
            c->w4_scratch_bytes = wb;
            c->dev_allocs++;
            c->dev_alloc_bytes += wb;
        }
    }
    if (!sh->fp8) return SITS_OK;
    size_t T = (size_t)sh->n_tokens, S = (size_t)sh->n_logits;
    size_t xq = T * (size_t)sh->max_in, rows = T > S ? T : S;
    if (S * (size_t)sh->hidden_in > xq) xq = S * (size_t)sh->hidden_in;
    size_t acc = T * (size_t)sh->max_out;
    if (sh->fp8_lm_head && S * (size_t)sh->vocab_out > acc) acc = S * (size_t)sh->vocab_out;
    acc *= sizeof(float);
    size_t xs = rows * sizeof(float);
    sits_mem_plan_add(plan, "fp8 gemm: quantised activations", sits_cuda_fp8_scratch_bytes(xq), 0);
    sits_mem_plan_add(plan, "fp8 gemm: activation scales", sits_cuda_fp8_scratch_bytes(xs), 0);
    sits_mem_plan_add(plan, "fp8 gemm: fp32 products (fallback)", sits_cuda_fp8_scratch_bytes(acc), 0);
    if (reserve) {
        SITS_CUDA_CHECK(cudaSetDevice(be->device));
        SITS_CHECK(sits_cuda_fp8_reserve(&c->fp8, c->stream, xq, xs, acc));
    }
    return SITS_OK;
}

/* ---- [families] model-family ops ---- */
static sits_status_t cuda_rmsnorm_heads(sits_backend_t *be, void *x, int n, int row_stride, int col0, int n_heads, int head_dim,
                                        const void *w, float eps)
{
    SITS_KERNEL_CHECK(sits_k_rmsnorm_heads(x, n, row_stride, col0, n_heads, head_dim, w, eps, impl_of(be)->stream));
    return SITS_OK;
}

static sits_status_t cuda_scale(sits_backend_t *be, void *x, size_t n_elems, float s)
{
    SITS_KERNEL_CHECK(sits_k_scale(x, n_elems, s, impl_of(be)->stream));
    return SITS_OK;
}

static sits_status_t cuda_gelu_tanh_mul(sits_backend_t *be, void *out, const void *gu, int n, int dim)
{
    SITS_KERNEL_CHECK(sits_k_gelu_tanh_mul(out, gu, n, dim, impl_of(be)->stream));
    return SITS_OK;
}

static sits_status_t cuda_swiglu_oai(sits_backend_t *be, void *out, const void *gu, int n, int dim, float alpha, float limit)
{
    SITS_KERNEL_CHECK(sits_k_swiglu_oai(out, gu, n, dim, alpha, limit, impl_of(be)->stream));
    return SITS_OK;
}

static sits_status_t cuda_softcap(sits_backend_t *be, void *x, size_t n_elems, int f32, float cap)
{
    SITS_KERNEL_CHECK(sits_k_softcap(x, n_elems, f32, cap, impl_of(be)->stream));
    return SITS_OK;
}

static sits_status_t cuda_rope_sel(sits_backend_t *be, void *x, int n, int row_stride, int n_rot_heads, int head_dim,
                                   const int32_t *pos, const float *inv_short, const float *inv_long, const int32_t *sel)
{
    SITS_KERNEL_CHECK(sits_k_rope_sel(x, n, row_stride, n_rot_heads, head_dim, pos, inv_short, inv_long, sel,
                                      impl_of(be)->stream));
    return SITS_OK;
}

/* ---- [moe] ---- */
static sits_status_t cuda_moe_topk(sits_backend_t *be, int32_t *ids, float *wts, const void *logits, int n, int E, int k,
                                   int norm)
{
    SITS_KERNEL_CHECK(sits_k_moe_topk(ids, wts, logits, n, E, k, norm, impl_of(be)->stream));
    return SITS_OK;
}

static sits_status_t cuda_moe_combine(sits_backend_t *be, void *out, const void *y, const int32_t *pos, const float *wts, int n,
                                      int kk, int dim)
{
    SITS_KERNEL_CHECK(sits_k_moe_combine(out, y, pos, wts, n, kk, dim, impl_of(be)->stream));
    return SITS_OK;
}

/* [moe dev] */
_Static_assert(SITS_MOE_DEV_MAX_SLOTS == 2048, "kernels/moe.cu MOE_DEV_MAX_SLOTS");
static sits_status_t cuda_moe_route(sits_backend_t *be, int32_t *plan, uint64_t *counts, const int32_t *ids, const int32_t *mask,
                                    int n, int k, int E, int e0, int ne)
{
    SITS_KERNEL_CHECK(sits_k_moe_route(plan, (unsigned long long *)counts, ids, mask, n, k, E, e0, ne, impl_of(be)->stream));
    return SITS_OK;
}

static sits_status_t cuda_moe_experts(sits_backend_t *be, void *y, void *act, const void *x, const int32_t *plan,
                                      const void *const *w_gu, const void *const *w_down, const float *const *s_gu,
                                      const float *const *s_down, void *q8, const sits_moe_epi_t *epi, int n, int k, int E, int H,
                                      int i)
{
    if (be->weight_dtype != SITS_DT_BF16 || be->act_dtype != SITS_DT_BF16) return SITS_ERR_UNSUPPORTED;
    const sits_k_moe_epi_t ke = { epi ? epi->b_gu : NULL, epi ? epi->b_down : NULL, epi ? epi->oai : 0, epi ? epi->alpha : 0.0f,
                                  epi ? epi->limit : 0.0f };   /* [gpt-oss] */
    SITS_KERNEL_CHECK(sits_k_moe_experts(y, act, x, plan, w_gu, w_down, s_gu, s_down, q8, epi ? &ke : NULL, n, k, E, H, i,
                                         impl_of(be)->stream));
    return SITS_OK;
}

static sits_status_t cuda_moe_combine_slots(sits_backend_t *be, void *out, const void *y, const float *wts, const void *sg, int n,
                                            int k, int H)
{
    SITS_KERNEL_CHECK(sits_k_moe_combine_slots(out, y, wts, sg, n, k, H, impl_of(be)->stream));
    return SITS_OK;
}

/* [moe grouped] */
_Static_assert(SITS_MOE_GROUPED_ROWS == 64, "kernels/moe.cu MG_BM");
static sits_status_t cuda_moe_grouped(sits_backend_t *be, void *y, void *act, const void *x, const int32_t *off, const int32_t *tiles,
                                      int n_tiles, const void *const *w_gu, const void *const *w_down, const sits_moe_epi_t *epi,
                                      int H, int i)
{
    if (be->weight_dtype != SITS_DT_BF16 || be->act_dtype != SITS_DT_BF16) return SITS_ERR_UNSUPPORTED;
    const sits_k_moe_epi_t ke = { epi ? epi->b_gu : NULL, epi ? epi->b_down : NULL, epi ? epi->oai : 0, epi ? epi->alpha : 0.0f,
                                  epi ? epi->limit : 0.0f };
    SITS_KERNEL_CHECK(sits_k_moe_grouped(y, act, x, tiles, n_tiles, off, w_gu, w_down, epi ? &ke : NULL, H, i, impl_of(be)->stream));
    return SITS_OK;
}

/* [moe fuse] backend.h moe_select / moe_experts_combine (kernels/moe.cu; SITS_MOE_FUSE=0 turns them off). moe_select's
 * logits are the GEMV's bits: declined where matmul would not run the GEMV for one token (SITS_GEMV_MAX_TOKENS=0). */
static sits_status_t cuda_moe_select(sits_backend_t *be, void *logits, int32_t *ids, float *wts, int32_t *plan, uint64_t *counts,
                                     uint32_t *sync, const void *x, const void *w, const void *bias, const int32_t *mask, int H,
                                     int E, int k, int norm, int e0, int ne)
{
    cuda_impl_t *c = impl_of(be);
    if (c->gemv_max_n < 1 || be->act_dtype != SITS_DT_BF16) return SITS_ERR_UNSUPPORTED;
    sits_status_t st = sits_k_moe_gate1(logits, ids, wts, plan, (unsigned long long *)counts, sync, x, w, bias, mask, H, E, k, norm,
                                        e0, ne, c->stream);
    if (st == SITS_ERR_UNSUPPORTED) return st;
    SITS_KERNEL_CHECK(st);
    return SITS_OK;
}

static sits_status_t cuda_moe_experts_combine(sits_backend_t *be, void *out, void *act, const void *x, const int32_t *plan,
                                              const int32_t *ids, const float *wts, const void *const *w_gu,
                                              const void *const *w_down, const float *const *s_gu, const float *const *s_down,
                                              void *q8, const sits_moe_epi_t *epi, int k, int E, int H, int i)
{
    if (be->weight_dtype != SITS_DT_BF16 || be->act_dtype != SITS_DT_BF16) return SITS_ERR_UNSUPPORTED;
    const sits_k_moe_epi_t ke = { epi ? epi->b_gu : NULL, epi ? epi->b_down : NULL, epi ? epi->oai : 0, epi ? epi->alpha : 0.0f,
                                  epi ? epi->limit : 0.0f };   /* [gpt-oss] */
    sits_status_t st = sits_k_moe_experts_combine1(out, act, x, plan, ids, wts, w_gu, w_down, s_gu, s_down, q8, epi ? &ke : NULL, k,
                                                   E, H, i, impl_of(be)->stream);
    if (st == SITS_ERR_UNSUPPORTED) return st;
    SITS_KERNEL_CHECK(st);
    return SITS_OK;
}

/* ---- [op times] the timed ops: each table entry below calls its op between two events when
 * SITS_CUDA_OP_TIMES=1 and no capture is open (cuda_optime.h); otherwise the op alone ------------ */

#define OPT_WRAP(fn, name, A, B, N, params, args)                                                     \
    static sits_status_t fn##_t params                                                                \
    {                                                                                                 \
        cuda_impl_t *c_ = impl_of(be);                                                                \
        if (!c_->optime || c_->capturing) return fn args;                                             \
        sits_cuda_optime_begin(c_->optime, c_->stream, name, A, B, N);                                \
        sits_status_t st_ = fn args;                                                                  \
        sits_cuda_optime_end(c_->optime, c_->stream);                                                 \
        return st_;                                                                                   \
    }
OPT_WRAP(cuda_embed, "embed", dim, 0, n,
         (sits_backend_t *be, void *out, const void *table, const int32_t *tokens, int n, int dim, int v_start, int v_count),
         (be, out, table, tokens, n, dim, v_start, v_count))
OPT_WRAP(cuda_matmul, "gemm bf16", out, in, n,
         (sits_backend_t *be, void *y, const void *x, const void *w, const void *bias, int n, int in, int out),
         (be, y, x, w, bias, n, in, out))
OPT_WRAP(cuda_matmul_f32out, "gemm bf16 (fp32 out)", out, in, n,
         (sits_backend_t *be, float *y, const void *x, const void *w, const void *bias, int n, int in, int out),
         (be, y, x, w, bias, n, in, out))
OPT_WRAP(cuda_matmul_w4, "gemm int4", out, in, n,
         (sits_backend_t *be, void *y, const void *x, const sits_w4_t *w, const void *bias, int n, int in, int out),
         (be, y, x, w, bias, n, in, out))
OPT_WRAP(cuda_matmul_fp8, "gemm fp8 (+quant)", out, in, n,
         (sits_backend_t *be, void *y, int y_f32, const void *x, const void *w_q, const float *w_scale, const void *bias, int n,
          int in, int out),
         (be, y, y_f32, x, w_q, w_scale, bias, n, in, out))
OPT_WRAP(cuda_matmul_fp8q, "gemm fp8", out, in, n,
         (sits_backend_t *be, void *y, int y_f32, const void *xq, const float *xs, const void *w_q, const float *w_scale,
          const void *bias, int n, int in, int out),
         (be, y, y_f32, xq, xs, w_q, w_scale, bias, n, in, out))
OPT_WRAP(cuda_matmul_swiglu, "gemv + swiglu", inter, in, n,
         (sits_backend_t *be, void *act, const void *x, const float *xs, const void *w, const float *w_scale, int n, int in,
          int inter),
         (be, act, x, xs, w, w_scale, n, in, inter))
OPT_WRAP(cuda_rope_kv_write, "rope + kv write", n_q, n_kv, n,
         (sits_backend_t *be, void *qkv, int n, int row_stride, int n_q, int n_kv, int head_dim, const int32_t *pos,
          const float *inv_freq, void *k_cache, void *v_cache, int block_size, const int32_t *slot_mapping, const void *q_norm,
          const void *k_norm, float eps),
         (be, qkv, n, row_stride, n_q, n_kv, head_dim, pos, inv_freq, k_cache, v_cache, block_size, slot_mapping, q_norm, k_norm,
          eps))
/* attention: a call that runs the prefill kernel is timed in two parts, that kernel and the decode kernel over
 * the rows it listed (sits_k_attn_ws_t.mark, called between the two launches) */
static void attn_mark(void *ctx)
{
    cuda_impl_t *c = ctx;
    sits_cuda_optime_next(c->optime, c->stream, "attention: prefill kernel", "attention: decode kernel (listed rows)");
}

static sits_status_t cuda_attention_t(sits_backend_t *be, void *out, const void *q, int q_row_stride, const void *k_cache,
                                      const void *v_cache, const sits_attn_args_t *a)
{
    cuda_impl_t *c = impl_of(be);
    if (!c->optime || c->capturing) return cuda_attention(be, out, q, q_row_stride, k_cache, v_cache, a);
    sits_cuda_optime_begin(c->optime, c->stream, "attention", a->n_heads, a->head_dim, a->n_tokens);
    c->attn_ws.mark = attn_mark;
    c->attn_ws.mark_ctx = c;
    sits_status_t st = cuda_attention(be, out, q, q_row_stride, k_cache, v_cache, a);
    c->attn_ws.mark = NULL;
    c->attn_ws.mark_ctx = NULL;
    sits_cuda_optime_end(c->optime, c->stream);
    return st;
}
OPT_WRAP(cuda_silu_mul, "silu * mul", dim, 0, n, (sits_backend_t *be, void *out, const void *gu, int n, int dim),
         (be, out, gu, n, dim))
OPT_WRAP(cuda_silu_mul_fp8, "silu * mul -> fp8", dim, 0, n,
         (sits_backend_t *be, void *out, void *xq, float *xs, const void *gu, int n, int dim), (be, out, xq, xs, gu, n, dim))
OPT_WRAP(cuda_quant_fp8_rows, "quant fp8 rows", dim, 0, n,
         (sits_backend_t *be, void *xq, float *xs, const void *x, int n, int dim), (be, xq, xs, x, n, dim))
OPT_WRAP(cuda_gather_rows, "gather rows", dim, 0, n_rows,
         (sits_backend_t *be, void *out, const void *x, const int32_t *rows, int n_rows, int dim), (be, out, x, rows, n_rows, dim))
OPT_WRAP(cuda_add_rmsnorm_f32res, "add + rmsnorm", dim, 0, n,
         (sits_backend_t *be, void *out, float *residual, const void *x, const void *w, int n, int dim, float eps),
         (be, out, residual, x, w, n, dim, eps))
OPT_WRAP(cuda_add_rmsnorm_f32res_fp8, "add + rmsnorm -> fp8", dim, 0, n,
         (sits_backend_t *be, void *out, void *xq, float *xs, float *residual, const void *x, const void *w, int n, int dim,
          float eps),
         (be, out, xq, xs, residual, x, w, n, dim, eps))
OPT_WRAP(cuda_sample_reduce, "sample reduce", v_count, 0, n,
         (sits_backend_t *be, void *recs, const float *logits, int n, int v_start, int v_count, const sits_sample_row_t *rows,
          int c),
         (be, recs, logits, n, v_start, v_count, rows, c))
#undef OPT_WRAP

static const sits_backend_ops_t cuda_ops = {
    .name = "cuda",
    .destroy = cuda_destroy,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .memset0 = cuda_memset0,
    .upload_weight = cuda_upload_weight,
    .dummy_rows = cuda_dummy_rows,   /* [dummy] */
    .dummy_rows_fp8 = cuda_dummy_rows_fp8,
    .embed = cuda_embed_t,
    .rmsnorm = cuda_rmsnorm,
    .add_rmsnorm = cuda_add_rmsnorm,
    .matmul = cuda_matmul_t,
    .rope = cuda_rope,
    .kv_write = cuda_kv_write,
    .attention = cuda_attention_t,
    .silu_mul = cuda_silu_mul_t,
    .gather_rows = cuda_gather_rows_t,
    .download_f32 = cuda_download_f32,
    .sync = cuda_sync,
    /* [perf] optional slots */
    .add_rmsnorm_f32res = cuda_add_rmsnorm_f32res_t,
    .matmul_f32out = cuda_matmul_f32out_t,
    .sample_reduce = cuda_sample_reduce_t,
    .logit_mask = cuda_logit_mask,
    .logit_process = cuda_logit_process,   /* [sampling controls] */
    .logprob_reduce = cuda_logprob_reduce, /* [logprobs] */
    .logit_pick = cuda_logit_pick,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .graph_begin = cuda_graph_begin,
    .graph_end = cuda_graph_end,
    .graph_launch = cuda_graph_launch,
    .graph_destroy = cuda_graph_destroy,
    .matmul_w4 = cuda_matmul_w4_t,     /* [int4] */
    .w4_layout = cuda_w4_layout,       /* [int4 tiles] */
    .matmul_swiglu = cuda_matmul_swiglu_t,   /* [perf: swiglu gemv] */
    .matmul_fp8 = cuda_matmul_fp8_t,   /* [fp8] */
    .matmul_fp8q = cuda_matmul_fp8q_t,
    .add_rmsnorm_f32res_fp8 = cuda_add_rmsnorm_f32res_fp8_t,
    .silu_mul_fp8 = cuda_silu_mul_fp8_t,
    .quant_fp8_rows = cuda_quant_fp8_rows_t,   /* [moe fp8] */
    .kv_block_copy = cuda_kv_block_copy,   /* [kv] */
    .upload_rows = cuda_upload_rows,   /* [scale] */
    .rope_kv_write = cuda_rope_kv_write_t,
    .mem_plan = cuda_mem_plan,   /* [memory plan] */
    .alloc_count = sits_backend_cuda_dev_allocs,
    .rmsnorm_heads = cuda_rmsnorm_heads,   /* [families] */
    .scale = cuda_scale,
    .gelu_tanh_mul = cuda_gelu_tanh_mul,
    .swiglu_oai = cuda_swiglu_oai,   /* [gpt-oss] */
    .softcap = cuda_softcap,
    .rope_sel = cuda_rope_sel,
    .moe_topk = cuda_moe_topk,   /* [moe] */
    .moe_combine = cuda_moe_combine,
    .moe_route = cuda_moe_route,   /* [moe dev] */
    .moe_experts = cuda_moe_experts,
    .moe_combine_slots = cuda_moe_combine_slots,
    .moe_select = cuda_moe_select,   /* [moe fuse] */
    .moe_experts_combine = cuda_moe_experts_combine,
    .moe_grouped = cuda_moe_grouped,   /* [moe grouped] */
};

static sits_status_t impl_create(cuda_impl_t **impl_p)
{
    sits_status_t st = SITS_OK;
    cuda_impl_t *c = calloc(1, sizeof *c);
    if (!c) return SITS_ERR_NOMEM;
    const int32_t trans_t = CUBLAS_OP_T, trans_n = CUBLAS_OP_N;
    const uint32_t epi_bias = CUBLASLT_EPILOGUE_BIAS;
    const int32_t bias_type = CUDA_R_16BF;

    SITS_CUDA_CHECK_GOTO(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), st, err);
    SITS_CUBLAS_CHECK_GOTO(cublasLtCreate(&c->lt), st, err);
    SITS_CUDA_CHECK_GOTO(cudaMalloc(&c->workspace, CUDA_WORKSPACE_BYTES), st, err);
    { /* [attention] scratch of sits_k_attention (cudaMalloc is 256-byte aligned) and the SM count */
        int dev = 0;
        SITS_CUDA_CHECK_GOTO(cudaGetDevice(&dev), st, err);
        SITS_CUDA_CHECK_GOTO(cudaDeviceGetAttribute(&c->attn_ws.n_sms, cudaDevAttrMultiProcessorCount, dev), st, err);
        SITS_CUDA_CHECK_GOTO(cudaMalloc(&c->attn_ws.scratch, CUDA_ATTN_SCRATCH_BYTES), st, err);
        SITS_CUDA_CHECK_GOTO(cudaMemset(c->attn_ws.scratch, 0, CUDA_ATTN_SCRATCH_BYTES), st, err);   /* the split-K counters */
        c->attn_ws.scratch_bytes = CUDA_ATTN_SCRATCH_BYTES;
    }
    c->dev_allocs = 2;
    c->dev_alloc_bytes = CUDA_WORKSPACE_BYTES + CUDA_ATTN_SCRATCH_BYTES;
    for (int i = 0; i < 2; i++) {
        SITS_CUBLAS_CHECK_GOTO(cublasLtMatmulDescCreate(&c->desc[i], CUBLAS_COMPUTE_32F, CUDA_R_32F), st, err);
        SITS_CUBLAS_CHECK_GOTO(cublasLtMatmulDescSetAttribute(c->desc[i], CUBLASLT_MATMUL_DESC_TRANSA, &trans_t,
                                                              sizeof trans_t), st, err);
        SITS_CUBLAS_CHECK_GOTO(cublasLtMatmulDescSetAttribute(c->desc[i], CUBLASLT_MATMUL_DESC_TRANSB, &trans_n,
                                                              sizeof trans_n), st, err);
        SITS_CUDA_CHECK_GOTO(cudaMallocHost((void **)&c->staging[i], CUDA_STAGING_BYTES), st, err);
        SITS_CUDA_CHECK_GOTO(cudaEventCreateWithFlags(&c->staged[i], cudaEventDisableTiming), st, err);
    }
    SITS_CUBLAS_CHECK_GOTO(cublasLtMatmulDescSetAttribute(c->desc[1], CUBLASLT_MATMUL_DESC_EPILOGUE, &epi_bias,
                                                          sizeof epi_bias), st, err);
    SITS_CUBLAS_CHECK_GOTO(cublasLtMatmulDescSetAttribute(c->desc[1], CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                          sizeof bias_type), st, err);
    c->cap_plans = CUDA_PLANS_INIT;
    c->plans = calloc(c->cap_plans, sizeof *c->plans);
    if (!c->plans) {
        st = SITS_ERR_NOMEM;
        goto err;
    }
    *impl_p = c;
    return SITS_OK;
err:
    impl_release(c);
    return st;
}

sits_status_t sits_backend_cuda_create(const sits_backend_params_t *params, sits_backend_t **be_p)
{
    sits_status_t st;
    int count = sits_backend_cuda_device_count(), dev = params ? params->device : 0;
    if (count == 0) {
        SITS_ERROR(SITS_SUB_CUDA, "no usable cuda device");
        return SITS_ERR_UNSUPPORTED;
    }
    if (dev < 0 || dev >= count) {
        SITS_ERROR(SITS_SUB_CUDA, "cuda device %d does not exist (%d visible)", dev, count);
        return SITS_ERR_INVALID;
    }
    SITS_CUDA_CHECK(cudaSetDevice(dev));
    struct cudaDeviceProp prop;
    SITS_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    if (prop.major != 9) {
        SITS_ERROR(SITS_SUB_CUDA, "gpu %d (%s) is sm_%d%d; the kernels are built for sm_90 only", dev, prop.name, prop.major,
                   prop.minor);
        return SITS_ERR_UNSUPPORTED;
    }
    sits_backend_t *be = calloc(1, sizeof *be);
    if (!be) return SITS_ERR_NOMEM;
    cuda_impl_t *c = NULL;
    SITS_CHECK_GOTO(impl_create(&c), st, err_free_be);
    c->tune = !(params && params->no_gemm_tune);
    c->gemv_max_n = !params || params->gemv_max_tokens == 0 ? CUDA_GEMV_DEFAULT_N
                    : params->gemv_max_tokens < 0 ? 0
                    : params->gemv_max_tokens < SITS_K_GEMV_MAX_N ? params->gemv_max_tokens : SITS_K_GEMV_MAX_N;
    c->optime = sits_cuda_optime_create(); /* [op times] */
    be->ops = &cuda_ops;
    be->act_dtype = be->weight_dtype = be->kv_dtype = SITS_DT_BF16;
    be->device = dev;
    be->impl = c;
    SITS_INFO(SITS_SUB_CUDA, "cuda backend on gpu %d: %s, sm_%d%d, %d SMs, %.1f GiB", dev, prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, (double)prop.totalGlobalMem / (1u << 30));
    *be_p = be;
    return SITS_OK;
err_free_be:
    free(be);
    return st;
}

int sits_backend_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* no driver / no device: not an error for the caller */
        return 0;
    }
    return n;
}

sits_status_t sits_backend_cuda_mem_info(sits_backend_t *be, size_t *free_p, size_t *total_p)
{
    if (!be || be->ops != &cuda_ops) return SITS_ERR_UNSUPPORTED;
    SITS_CUDA_CHECK(cudaSetDevice(be->device));
    SITS_CUDA_CHECK(cudaMemGetInfo(free_p, total_p));
    return SITS_OK;
}

uint64_t sits_backend_cuda_dev_allocs(sits_backend_t *be, uint64_t *bytes_p)
{
    if (bytes_p) *bytes_p = 0;
    if (!be || be->ops != &cuda_ops) return 0;
    cuda_impl_t *c = impl_of(be);
    uint64_t fb = 0, n = c->dev_allocs + sits_cuda_fp8_allocs(c->fp8, &fb);
    if (bytes_p) *bytes_p = c->dev_alloc_bytes + fb;
    return n;
}

/* ---- [nccl hook] accessors for the NCCL communicator ---------------------------------------- */

void *sits_backend_cuda_stream(sits_backend_t *be)
{
    return be && be->ops == &cuda_ops ? (void *)impl_of(be)->stream : NULL;
}

sits_status_t sits_backend_cuda_set_health_check(sits_backend_t *be, sits_backend_health_fn fn, void *ctx)
{
    if (!be || be->ops != &cuda_ops) return SITS_ERR_INVALID;
    cuda_impl_t *c = impl_of(be);
    int i = 0;
    while (i < c->n_health && c->health[i].ctx != ctx) i++;
    if (!fn) { /* remove ctx's check */
        if (i == c->n_health) return SITS_OK;
        c->health[i] = c->health[--c->n_health];
        return SITS_OK;
    }
    if (i == c->n_health) {
        if (c->n_health == CUDA_HEALTH_MAX) {
            SITS_ERROR(SITS_SUB_CUDA, "more than %d health checks on gpu %d", CUDA_HEALTH_MAX, be->device);
            return SITS_ERR_UNSUPPORTED;
        }
        c->n_health++;
    }
    c->health[i].fn = fn;
    c->health[i].ctx = ctx;
    return SITS_OK;
}
