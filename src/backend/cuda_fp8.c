/* cuda_fp8.c -- [fp8] y[n, out] = (e4m3(x / sx) . w_q^T) * sx[t] * w_scale[o] (+ bias) on the GPU.
 *
 * Two steps on the backend's stream:
 *   1. sits_k_quant_fp8_rows: x [n, in] bf16 -> xq [n, in] E4M3 + xs [n] fp32 per token. Skipped by
 *      sits_cuda_fp8_matmul_q, whose caller has them already: the engine's RMSNorm and SiLU*mul
 *      kernels quantise their output rows themselves (only the o projection's and lm_head's inputs
 *      go through this kernel);
 *   2. cuBLASLt FP8 GEMM in the TN layout of cuda.c: A = w_q (E4M3, [k, m] ld k, transposed),
 *      B = xq (E4M3, [k, n] ld k), D [m, n] ld m; CUBLAS_COMPUTE_32F, fast accumulation on (as vLLM's
 *      and TensorRT-LLM's Hopper FP8 kernels).
 *      Preferred: CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F for A (m per-channel weight scales) and
 *      B (n per-token scales), so D = bf16(sum * w_scale[o] * xs[t]) (+ the BIAS epilogue) in one
 *      kernel -- cuBLAS >= 12.9 on sm_90, for the token counts where it pays (outer_pays), with fast
 *      accumulation as everywhere here (bench/sits-bench-fp8-gemm once reported outer-vector results
 *      without it wrong by O(1); its reference then was a fast-accumulating cuBLASLt run with a fixed
 *      error floor, which likely made that up: to be re-measured). Otherwise, and per shape
 *      when the heuristic has no algorithm for it: unit scales with an fp32 D into a scratch buffer,
 *      then sits_k_fp8_scale_out applies xs[t] * w_scale[o] and the bias.
 *      [perf: decode gemv] Steps of <= gemv_max_n tokens: sits_k_gemv instead of step 2 -- the E4M3
 *      products exact in fp32, fp32 sums, the scales and bias in scale_out's order, one launch.
 * Plans (layouts + the heuristic's first algorithm + the mode) are cached per (m, n, k, bias, fp32 D).
 * SITS_FP8_SCALES=unit in the environment forces the fallback everywhere (for same-call A/B runs), =outer the
 * outer-vector mode at every token count (test_fp8_parity runs shapes outer_pays leaves unit-scaled that way).
 * Scratch buffers grow on demand outside CUDA-graph capture; the engine runs every shape eagerly
 * before recording it, so a capture finds them large enough (else it fails cleanly). */
#include "backend/cuda_fp8.h"
#include "backend/cuda_check.h"
#include "kernels/sits_kernels.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { MODE_OUTER = 0, MODE_UNIT = 1 };

#if defined(CUBLAS_VERSION) && CUBLAS_VERSION >= 120900
#define HAVE_OUTER_VEC 1
#else
#define HAVE_OUTER_VEC 0
#endif

typedef struct {
    int m, n, k, bias, f32d;
    int mode;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
} fp8_plan_t;

struct sits_cuda_fp8 {
    cublasLtMatmulDesc_t desc[2][2];   /* [mode][bias]; desc[MODE_UNIT][1] unused */
    uint8_t *xq;                       /* [n, in] quantised activations */
    float *xs;                         /* [n] their scales */
    float *acc;                        /* fallback: [n, out] fp32 products */
    size_t xq_bytes, xs_bytes, acc_bytes;     /* allocated sizes */
    uint64_t allocs, alloc_bytes;             /* [memory plan] cudaMallocs made, for the after-start-up count */
    fp8_plan_t *plans;
    int n_plans, cap_plans;
    int logged_fallback;
    int scales;                        /* SITS_FP8_SCALES: SCALES_AUTO (outer_pays), SCALES_UNIT (never outer-vector;
                                        * benchmark A/B), SCALES_OUTER (outer-vector at every n; the parity test) */
};

enum { SCALES_AUTO, SCALES_UNIT, SCALES_OUTER };

static void plan_release(fp8_plan_t *p)
{
    if (p->a) cublasLtMatrixLayoutDestroy(p->a);
    if (p->b) cublasLtMatrixLayoutDestroy(p->b);
    if (p->d) cublasLtMatrixLayoutDestroy(p->d);
    p->a = p->b = p->d = NULL;
}

void sits_cuda_fp8_destroy(sits_cuda_fp8_t *s)
{
    if (!s) return;
    for (int i = 0; i < s->n_plans; i++) plan_release(&s->plans[i]);
    free(s->plans);
    for (int m = 0; m < 2; m++)
        for (int b = 0; b < 2; b++)
            if (s->desc[m][b]) cublasLtMatmulDescDestroy(s->desc[m][b]);
    cudaFree(s->xq);
    cudaFree(s->xs);
    cudaFree(s->acc);
    free(s);
}

static sits_status_t desc_create(cublasLtMatmulDesc_t *d, int mode, int bias)
{
    const int32_t trans_t = CUBLAS_OP_T, trans_n = CUBLAS_OP_N;
    const int8_t fast = 1;
    SITS_CUBLAS_CHECK(cublasLtMatmulDescCreate(d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    SITS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(*d, CUBLASLT_MATMUL_DESC_TRANSA, &trans_t, sizeof trans_t));
    SITS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(*d, CUBLASLT_MATMUL_DESC_TRANSB, &trans_n, sizeof trans_n));
    SITS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(*d, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast));
#if HAVE_OUTER_VEC
    if (mode == MODE_OUTER) {
        const int32_t outer = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
        SITS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(*d, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &outer, sizeof outer));
        SITS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(*d, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &outer, sizeof outer));
    }
#endif
    if (bias) {
        const uint32_t epi = CUBLASLT_EPILOGUE_BIAS;
        const int32_t bias_type = CUDA_R_16BF;
        SITS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(*d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        SITS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(*d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type));
    }
    return SITS_OK;
}

static sits_status_t state_create(sits_cuda_fp8_t **s_p)
{
    sits_cuda_fp8_t *s = calloc(1, sizeof *s);
    if (!s) return SITS_ERR_NOMEM;
    const char *mode = getenv("SITS_FP8_SCALES");
    s->scales = !mode ? SCALES_AUTO : !strcmp(mode, "unit") ? SCALES_UNIT : !strcmp(mode, "outer") ? SCALES_OUTER : SCALES_AUTO;
    sits_status_t st = SITS_OK;
    if ((st = desc_create(&s->desc[MODE_OUTER][0], MODE_OUTER, 0)) != SITS_OK ||
        (st = desc_create(&s->desc[MODE_OUTER][1], MODE_OUTER, 1)) != SITS_OK ||
        (st = desc_create(&s->desc[MODE_UNIT][0], MODE_UNIT, 0)) != SITS_OK) {
        sits_cuda_fp8_destroy(s);
        return st;
    }
    *s_p = s;
    return SITS_OK;
}

/* Layouts and the heuristic's first algorithm in `mode`; SITS_ERR_UNSUPPORTED (not logged as an
 * error) when cuBLASLt has none. The outer-vector descriptor carries the call's scale vectors before the
 * heuristic is asked: with none set, cuBLASLt 13.1 answers CUBLAS_STATUS_INVALID_VALUE for every shape
 * (sessions 9-12 ran the fallback for that reason; bench/sits-bench-fp8-gemm's probe on the H200, 2026-12-02:
 * with the pointers set it has an algorithm at every prefill shape, as fast as unit scales with a bf16 D). */
static sits_status_t plan_try(cublasLtHandle_t lt, sits_cuda_fp8_t *s, fp8_plan_t *p, int mode, size_t ws, const float *w_scale,
                              const float *xs)
{
    sits_status_t st = SITS_OK;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res;
    int n_res = 0;
    uint64_t ws64 = ws;
    p->mode = mode;
    int d32 = p->f32d || mode == MODE_UNIT;
    if (mode == MODE_OUTER) {
        cublasLtMatmulDesc_t d = s->desc[MODE_OUTER][p->bias];
        SITS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scale, sizeof w_scale));
        SITS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &xs, sizeof xs));
    }
    SITS_CUBLAS_CHECK_GOTO(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_8F_E4M3, p->k, p->m, p->k), st, err);
    SITS_CUBLAS_CHECK_GOTO(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_8F_E4M3, p->k, p->n, p->k), st, err);
    SITS_CUBLAS_CHECK_GOTO(cublasLtMatrixLayoutCreate(&p->d, d32 ? CUDA_R_32F : CUDA_R_16BF, p->m, p->n, p->m), st, err);
    SITS_CUBLAS_CHECK_GOTO(cublasLtMatmulPreferenceCreate(&pref), st, err);
    SITS_CUBLAS_CHECK_GOTO(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws64,
                                                                sizeof ws64), st, err);
    cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(lt, s->desc[mode][mode == MODE_OUTER ? p->bias : 0], p->a, p->b, p->d,
                                                       p->d, pref, 1, &res, &n_res);
    if (hs != CUBLAS_STATUS_SUCCESS || n_res == 0) {
        SITS_DEBUG(SITS_SUB_CUDA, "fp8 gemm m %d n %d k %d bias %d: no %s algorithm (%s)", p->m, p->n, p->k, p->bias,
                   mode == MODE_OUTER ? "outer-vector-scaled" : "unit-scaled", cublasLtGetStatusName(hs));
        st = SITS_ERR_UNSUPPORTED;
        goto err;
    }
    p->algo = res.algo;
    cublasLtMatmulPreferenceDestroy(pref);
    SITS_DEBUG(SITS_SUB_CUDA, "fp8 gemm plan m %d n %d k %d bias %d fp32 out %d: %s scales, workspace %zu", p->m, p->n, p->k,
               p->bias, p->f32d, mode == MODE_OUTER ? "outer-vector" : "unit (+ epilogue kernel)", res.workspaceSize);
    return SITS_OK;
err:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    plan_release(p);
    return st;
}

/* Whether the outer-vector kernel beats unit scales + the scale_out pass for n tokens of depth k. The
 * H200 sweep of 2026-12-02 (bench/RESULTS.md, cuBLASLt 13.1, m 4096-28672): the outer-vector algorithm the
 * heuristic offers is a large-tile kernel without split-K, flat at small n (m 4096 k 14336: 38 us from n 8
 * to 256, against 23-33 us for unit scales with their fp32 pass); it wins from n 128 at k 4096 and from
 * n 384 at k 14336, and at every prefill size (e.g. m 28672 n 8192: 1.28 vs 1.36 ms + 0.94 GB of fp32). */
static int outer_pays(int n, int k)
{
    return n >= (k <= 8192 ? 128 : 384);
}

static sits_status_t plan_get(cublasLtHandle_t lt, sits_cuda_fp8_t *s, const fp8_plan_t *key, size_t ws, const float *w_scale,
                              const float *xs, fp8_plan_t **p_p)
{
    for (int i = 0; i < s->n_plans; i++) {
        fp8_plan_t *p = &s->plans[i];
        if (p->m == key->m && p->n == key->n && p->k == key->k && p->bias == key->bias && p->f32d == key->f32d) {
            *p_p = p;
            return SITS_OK;
        }
    }
    if (s->n_plans == s->cap_plans) {
        int cap = s->cap_plans ? 2 * s->cap_plans : 32;
        fp8_plan_t *t = realloc(s->plans, sizeof *t * (size_t)cap);
        if (!t) return SITS_ERR_NOMEM;
        s->plans = t;
        s->cap_plans = cap;
    }
    fp8_plan_t p = *key;
    const int want_outer = HAVE_OUTER_VEC && s->scales != SCALES_UNIT && (s->scales == SCALES_OUTER || outer_pays(key->n, key->k));
    sits_status_t st = want_outer ? plan_try(lt, s, &p, MODE_OUTER, ws, w_scale, xs) : SITS_ERR_UNSUPPORTED;
    if (st == SITS_ERR_UNSUPPORTED) {
        if (!s->logged_fallback && want_outer) {
            SITS_INFO(SITS_SUB_CUDA, "fp8 gemm m %d n %d k %d%s: no outer-vector-scaled cublasLt kernel; unit scales + epilogue kernel"
                      " for such shapes", key->m, key->n, key->k, key->bias ? " with bias" : "");
            s->logged_fallback = 1;
        }
        st = plan_try(lt, s, &p, MODE_UNIT, ws, w_scale, xs);
        if (st == SITS_ERR_UNSUPPORTED)
            SITS_ERROR(SITS_SUB_CUDA, "cublaslt has no fp8 algorithm for m %d n %d k %d", key->m, key->n, key->k);
    }
    SITS_CHECK(st);
    s->plans[s->n_plans] = p;
    *p_p = &s->plans[s->n_plans++];
    return SITS_OK;
}

/* *buf of at least `bytes` (grown outside graph capture only); counted in s. */
static sits_status_t ensure(sits_cuda_fp8_t *s, cudaStream_t stream, void **buf, size_t *have, size_t bytes, const char *what)
{
    if (*have >= bytes) return SITS_OK;
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    SITS_CUDA_CHECK(cudaStreamIsCapturing(stream, &cs));
    if (cs != cudaStreamCaptureStatusNone) {
        SITS_ERROR(SITS_SUB_CUDA, "fp8 gemm: the %s scratch (%zu bytes) must grow to %zu during a cuda graph capture", what, *have,
                   bytes);
        return SITS_ERR_INTERNAL;
    }
    SITS_CUDA_CHECK(cudaStreamSynchronize(stream)); /* the old buffer may still be read */
    cudaFree(*buf);
    *buf = NULL;
    *have = 0;
    size_t grow = sits_cuda_fp8_scratch_bytes(bytes);
    SITS_CUDA_CHECK(cudaMalloc(buf, grow));
    *have = grow;
    s->allocs++;
    s->alloc_bytes += grow;
    return SITS_OK;
}

sits_status_t sits_cuda_fp8_reserve(sits_cuda_fp8_t **state_p, cudaStream_t stream, size_t xq_bytes, size_t xs_bytes,
                                    size_t acc_bytes)
{
    if (!*state_p) SITS_CHECK(state_create(state_p));
    sits_cuda_fp8_t *s = *state_p;
    if (xq_bytes) SITS_CHECK(ensure(s, stream, (void **)&s->xq, &s->xq_bytes, xq_bytes, "activation"));
    if (xs_bytes) SITS_CHECK(ensure(s, stream, (void **)&s->xs, &s->xs_bytes, xs_bytes, "scale"));
    if (acc_bytes) SITS_CHECK(ensure(s, stream, (void **)&s->acc, &s->acc_bytes, acc_bytes, "fp32 product"));
    return SITS_OK;
}

uint64_t sits_cuda_fp8_allocs(const sits_cuda_fp8_t *s, uint64_t *bytes_p)
{
    if (bytes_p) *bytes_p = s ? s->alloc_bytes : 0;
    return s ? s->allocs : 0;
}

static sits_status_t check_shape(int n, int in, int out, int y_f32, const void *bias)
{
    if (n < 0 || in <= 0 || out <= 0 || in % 16 || out % 16) {
        SITS_ERROR(SITS_SUB_CUDA, "matmul_fp8: bad shape n %d in %d out %d (in and out must be multiples of 16)", n, in, out);
        return SITS_ERR_INVALID;
    }
    if (y_f32 && bias) {
        SITS_ERROR(SITS_SUB_CUDA, "matmul_fp8: a bias with an fp32 output is not supported (m %d k %d)", out, in);
        return SITS_ERR_UNSUPPORTED;
    }
    return SITS_OK;
}

sits_status_t sits_cuda_fp8_matmul(sits_cuda_fp8_t **state_p, cublasLtHandle_t lt, void *workspace, size_t workspace_bytes,
                                   cudaStream_t stream, int gemv_max_n, void *y, int y_f32, const void *x, const void *w_q,
                                   const float *w_scale, const void *bias, int n, int in, int out)
{
    SITS_CHECK(check_shape(n, in, out, y_f32, bias));
    if (n == 0) return SITS_OK;
    if (!*state_p) SITS_CHECK(state_create(state_p));
    sits_cuda_fp8_t *s = *state_p;
    SITS_CHECK(ensure(s, stream, (void **)&s->xq, &s->xq_bytes, (size_t)n * (size_t)in, "activation"));
    SITS_CHECK(ensure(s, stream, (void **)&s->xs, &s->xs_bytes, (size_t)n * sizeof(float), "scale"));
    SITS_KERNEL_CHECK(sits_k_quant_fp8_rows(s->xq, s->xs, x, n, in, stream));
    return sits_cuda_fp8_matmul_q(state_p, lt, workspace, workspace_bytes, stream, gemv_max_n, y, y_f32, s->xq, s->xs, w_q,
                                  w_scale, bias, n, in, out);
}

sits_status_t sits_cuda_fp8_matmul_q(sits_cuda_fp8_t **state_p, cublasLtHandle_t lt, void *workspace, size_t workspace_bytes,
                                     cudaStream_t stream, int gemv_max_n, void *y, int y_f32, const void *xq, const float *xs,
                                     const void *w_q, const float *w_scale, const void *bias, int n, int in, int out)
{
    SITS_CHECK(check_shape(n, in, out, y_f32, bias));
    if (n == 0) return SITS_OK;
    if (n <= gemv_max_n) {
        sits_status_t st = sits_k_gemv(y, y_f32, xq, xs, w_q, w_scale, bias, 1, n, in, out, stream);
        if (st != SITS_ERR_UNSUPPORTED) {
            SITS_KERNEL_CHECK(st);
            return SITS_OK;
        }
    }
    if (!*state_p) SITS_CHECK(state_create(state_p));
    sits_cuda_fp8_t *s = *state_p;
    fp8_plan_t key = { .m = out, .n = n, .k = in, .bias = bias != NULL, .f32d = y_f32 }, *p;
    SITS_CHECK(plan_get(lt, s, &key, workspace_bytes, w_scale, xs, &p));
    const float alpha = 1.0f, beta = 0.0f;
    if (p->mode == MODE_OUTER) {
        cublasLtMatmulDesc_t d = s->desc[MODE_OUTER][p->bias];
        SITS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scale, sizeof w_scale));
        SITS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &xs, sizeof xs));
        if (bias) SITS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
        SITS_CUBLAS_CHECK(cublasLtMatmul(lt, d, &alpha, w_q, p->a, xq, p->b, &beta, y, p->d, y, p->d, &p->algo, workspace,
                                         workspace_bytes, stream));
        return SITS_OK;
    }
    SITS_CHECK(ensure(s, stream, (void **)&s->acc, &s->acc_bytes, (size_t)n * (size_t)out * sizeof(float), "fp32 product"));
    SITS_CUBLAS_CHECK(cublasLtMatmul(lt, s->desc[MODE_UNIT][0], &alpha, w_q, p->a, xq, p->b, &beta, s->acc, p->d, s->acc, p->d,
                                     &p->algo, workspace, workspace_bytes, stream));
    SITS_KERNEL_CHECK(sits_k_fp8_scale_out(y, y_f32, s->acc, xs, w_scale, bias, n, out, stream));
    return SITS_OK;
}
