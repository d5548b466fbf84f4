/* test_fp8_parity.c -- [fp8] matmul_fp8 on the cpu backend (simulated E4M3, fp32 sums) and on the cuda
 * backend (per-token quantisation kernel + cuBLASLt FP8 GEMM), element by element.
 *
 * Both get the same bf16-rounded activations and the same E4M3 weight bytes + scales (quantised on
 * the host with util/dtype.h), so the per-token activation quantisation is the same definition on
 * both sides (IEEE division, round to nearest even); what is left is the GPU's accumulation order
 * (fast accumulation) and the bf16 rounding of its output: |gpu - cpu| <= 0.01 * max|cpu| + 0.01 *
 * |cpu| (bf16 output: 2^-8 relative). Shapes: 1, 7, 64 and 300 tokens, in/out multiples of 16 up to
 * 1024 x 768, with and without bias, bf16 and fp32 outputs, one all-zero token row.
 * Exit 0 pass, 1 fail, 77 skip (no CUDA build or no usable GPU). */
#include "backend/backend.h"
#include "util/dtype.h"
#include "util/log.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRY(call_) do { sits_status_t s_ = (call_); if (s_ != SITS_OK) { \
    fprintf(stderr, "FAIL %s:%d: %s -> %s\n", __FILE__, __LINE__, #call_, sits_status_str(s_)); exit(1); } } while (0)

static uint64_t g_rng = 0x243f6a8885a308d3ull;
static float urand(void)
{
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return (float)((g_rng * 0x2545F4914F6CDD1Dull) >> 40) / (float)(1 << 24);
}

static float bf(float x) { return sits_bf16_to_f32(sits_f32_to_bf16(x)); }

/* n values of dtype dt (F32 or BF16) on backend be */
static void *dev(sits_backend_t *be, sits_dtype_t dt, const float *v, size_t n)
{
    void *d = NULL;
    TRY(be->ops->alloc(be, n * sits_dtype_size(dt), &d));
    if (dt == SITS_DT_F32) {
        TRY(be->ops->upload(be, d, v, n * 4));
    } else {
        uint16_t *h = malloc(n * 2);
        for (size_t i = 0; i < n; i++) h[i] = sits_f32_to_bf16(v[i]);
        TRY(be->ops->upload(be, d, h, n * 2));
        free(h);
    }
    return d;
}

static void *dev_bytes(sits_backend_t *be, const void *v, size_t n)
{
    void *d = NULL;
    TRY(be->ops->alloc(be, n ? n : 1, &d));
    TRY(be->ops->upload(be, d, v, n));
    return d;
}

static int run_case(sits_backend_t *cpu, sits_backend_t *gpu, int n, int in, int out, int with_bias, int y_f32)
{
    float *x = malloc(sizeof(float) * (size_t)n * in), *w = malloc(sizeof(float) * (size_t)out * in);
    float *ws = malloc(sizeof(float) * (size_t)out), *bias = malloc(sizeof(float) * (size_t)out);
    uint8_t *wq = malloc((size_t)out * in);
    for (int t = 0; t < n; t++) {
        float amp = 0.01f + 4.0f * urand();   /* token rows of different magnitudes */
        for (int k = 0; k < in; k++) x[(size_t)t * in + k] = (n > 1 && t == n / 2) ? 0.0f : bf(amp * (2 * urand() - 1));
    }
    for (int o = 0; o < out; o++) {
        float mx = 0;
        for (int k = 0; k < in; k++) {
            w[(size_t)o * in + k] = 0.05f * (2 * urand() - 1);
            mx = fabsf(w[(size_t)o * in + k]) > mx ? fabsf(w[(size_t)o * in + k]) : mx;
        }
        ws[o] = sits_fp8_scale(mx);
        sits_fp8_quantize_row(wq + (size_t)o * in, w + (size_t)o * in, (size_t)in, ws[o]);
        bias[o] = bf(0.1f * (2 * urand() - 1));
    }
    float *res[2];
    sits_backend_t *be[2] = { cpu, gpu };
    for (int b = 0; b < 2; b++) {
        void *dx = dev(be[b], be[b]->act_dtype, x, (size_t)n * in);
        void *dwq = dev_bytes(be[b], wq, (size_t)out * in);
        float *dws = dev(be[b], SITS_DT_F32, ws, (size_t)out);
        void *db = with_bias ? dev(be[b], be[b]->act_dtype, bias, (size_t)out) : NULL;
        sits_dtype_t ydt = y_f32 ? SITS_DT_F32 : be[b]->act_dtype;
        void *dy = NULL;
        size_t ybytes = (size_t)n * out * sits_dtype_size(ydt);
        TRY(be[b]->ops->alloc(be[b], ybytes, &dy));
        unsigned char *poison = malloc(ybytes);
        memset(poison, 0xff, ybytes);
        TRY(be[b]->ops->upload(be[b], dy, poison, ybytes));
        free(poison);
        TRY(be[b]->ops->matmul_fp8(be[b], dy, y_f32, dx, dwq, dws, db, n, in, out));
        TRY(be[b]->ops->sync(be[b]));
        res[b] = malloc(sizeof(float) * (size_t)n * out);
        if (y_f32 || ydt == SITS_DT_F32) TRY(be[b]->ops->download(be[b], res[b], dy, (size_t)n * out * 4));
        else TRY(be[b]->ops->download_f32(be[b], res[b], dy, (size_t)n * out));
        be[b]->ops->free(be[b], dx);
        be[b]->ops->free(be[b], dwq);
        be[b]->ops->free(be[b], dws);
        if (db) be[b]->ops->free(be[b], db);
        be[b]->ops->free(be[b], dy);
    }
    double mx = 0, max_err = 0;
    for (size_t i = 0; i < (size_t)n * out; i++) mx = fabs(res[0][i]) > mx ? fabs(res[0][i]) : mx;
    size_t bad = 0;
    for (size_t i = 0; i < (size_t)n * out; i++) {
        double err = fabs((double)res[1][i] - res[0][i]);
        if (!(err <= 0.01 * mx + 0.01 * fabs(res[0][i]))) {
            if (bad++ < 5)
                fprintf(stderr, "  [%zu, %zu]: gpu %.6g cpu %.6g (err %.3g)\n", i / out, i % out, res[1][i], res[0][i], err);
        }
        if (err > max_err || isnan(err)) max_err = isnan(err) ? INFINITY : err;
    }
    printf("%s fp8 gemm n %4d in %4d out %4d bias %d %s: max err %.3g (max |cpu| %.3g), %zu mismatches\n", bad ? "FAIL" : "ok  ",
           n, in, out, with_bias, y_f32 ? "fp32 out" : "bf16 out", max_err, mx, bad);
    free(x); free(w); free(ws); free(bias); free(wq); free(res[0]); free(res[1]);
    return bad != 0;
}

int main(void)
{
    sits_log_init(0);
    if (sits_backend_cuda_device_count() == 0) {
        printf("SKIP: no usable cuda device\n");
        return 77;
    }
    sits_backend_t *cpu = NULL, *gpu = NULL;
    sits_backend_params_t bp = { .device = 0 };
    TRY(sits_backend_cpu_create(NULL, &cpu));
    if (sits_backend_cuda_create(&bp, &gpu) != SITS_OK) {
        printf("SKIP: cuda backend unavailable\n");
        return 77;
    }
    if (!gpu->ops->matmul_fp8) {
        printf("FAIL: the cuda backend has no matmul_fp8\n");
        return 1;
    }
    static const int shapes[][3] = { { 1, 64, 256 }, { 7, 128, 384 }, { 64, 1024, 768 }, { 300, 384, 128 }, { 1, 1024, 512 } };
    int fails = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int bias = 0; bias < 2; bias++)
            for (int f32 = 0; f32 < 2; f32++) {
                if (bias && f32) continue; /* not supported on cuda (and not used) */
                fails += run_case(cpu, gpu, shapes[s][0], shapes[s][1], shapes[s][2], bias, f32);
            }
    sits_backend_destroy(gpu);
    sits_backend_destroy(cpu);
    printf("%s: %d failing case(s)\n", fails ? "FAIL" : "PASS", fails);
    return fails ? 1 : 0;
}
