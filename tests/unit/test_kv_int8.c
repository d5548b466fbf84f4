/* test_kv_int8.c -- [int8 kv] the cpu backend's KV dtypes against their definition (backend.h):
 *   1. kv_write into I8 caches gives the bytes of an independent quantiser written here (per
 *      (token, head): scale = amax / 127, q = rint(x / scale) clamped), at the block-unit layout
 *      (q, then the scales, each padded to 16 bytes), for block sizes whose scales need padding,
 *      with an all-zero head, exact ties (x / scale = k + 0.5) and padding slots (-1) left alone;
 *   2. attention over those I8 caches equals, bit for bit, attention over F32 caches that hold
 *      q * scale -- and over BF16 caches equals F32 caches holding the bf16-rounded values;
 *   3. the unit sizes (sits_kv_layer_block_bytes) of known shapes, e.g. Llama-3-8B.
 * Exit 0 pass, 1 fail. */
#include "backend/backend.h"
#include "util/log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_fail, g_checks;

#define CHECK(cond_, ...) do { g_checks++; if (!(cond_)) { g_fail++; fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); } } while (0)

static uint64_t g_rng = 0x1234abcd9876ull;
static float frand(void) /* [-1, 1) */
{
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(g_rng >> 11) / 4503599627370496.0 - 1.0);
}

/* The definition, written independently of cpu.c. */
static void ref_quant(const float *x, int hd, int8_t *q, float *scale)
{
    double amax = 0;
    for (int i = 0; i < hd; i++) amax = fmax(amax, fabs((double)x[i]));
    float s = (float)amax / 127.0f;
    *scale = s;
    for (int i = 0; i < hd; i++) {
        if (amax == 0) { q[i] = 0; continue; }
        float r = nearbyintf(x[i] / s);
        q[i] = (int8_t)(r > 127 ? 127 : r < -127 ? -127 : r);
    }
}

static void test_shape(sits_backend_t *be, int n_kv, int hd, int bs, int n_blocks)
{
    int kv_dim = n_kv * hd, n_slots = n_blocks * bs, n = n_slots - 2; /* two slots never written */
    int n_heads = 2 * n_kv, row_stride = (n_heads + 2 * n_kv) * hd, k_col = n_heads * hd, v_col = k_col + kv_dim;
    size_t unit = sits_kv_layer_block_bytes(SITS_DT_I8, bs, n_kv, hd), qb = sits_kv_i8_q_bytes(bs, n_kv, hd);
    size_t bytes = (size_t)n_blocks * unit;
    CHECK(unit % 16 == 0 && qb % 16 == 0 && qb >= (size_t)bs * kv_dim && unit - qb >= (size_t)bs * n_kv * 4,
          "unit %zu / q %zu bytes for bs %d n_kv %d hd %d", unit, qb, bs, n_kv, hd);
    float *qkv = malloc(sizeof(float) * (size_t)(n + 1) * row_stride);
    int32_t *slot = malloc(sizeof(int32_t) * (size_t)(n + 1));
    for (size_t i = 0; i < (size_t)(n + 1) * row_stride; i++) qkv[i] = frand() * 3.0f;
    for (int i = 0; i < hd; i++) qkv[(size_t)1 * row_stride + k_col + i] = 0.0f;                 /* all-zero head */
    /* exact ties: amax 127 makes scale 1, and x = 10 k + 0.5 rounds to even */
    for (int i = 0; i < hd; i++) qkv[(size_t)2 * row_stride + v_col + i] = i ? (float)((i % 9) - 4) * 10.0f + 0.5f : 127.0f;
    /* slots 0 .. n-1 in a shuffled order (the last two slots are never written) */
    int *used = calloc((size_t)n_slots, sizeof *used);
    for (int t = 0; t < n; t++) slot[t] = t;
    for (int t = n - 1; t > 0; t--) {
        g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
        int j = (int)((g_rng >> 33) % (uint64_t)(t + 1)), x = slot[t];
        slot[t] = slot[j];
        slot[j] = x;
    }
    for (int t = 0; t < n; t++) used[slot[t]] = 1;
    slot[n] = -1; /* a padding token */
    unsigned char *k8 = malloc(bytes), *v8 = malloc(bytes), *kr = malloc(bytes), *vr = malloc(bytes);
    memset(k8, 0xAB, bytes);
    memset(v8, 0xAB, bytes);
    memcpy(kr, k8, bytes);
    memcpy(vr, v8, bytes);
    be->kv_dtype = SITS_DT_I8;
    CHECK(be->ops->kv_write(be, k8, v8, qkv, n + 1, row_stride, k_col, v_col, kv_dim, hd, bs, slot) == SITS_OK, "kv_write");
    for (int t = 0; t < n; t++)
        for (int h = 0; h < n_kv; h++) {
            size_t u = (size_t)(slot[t] / bs) * unit, row = (size_t)(slot[t] % bs) * n_kv + h;
            float sk, sv;
            ref_quant(qkv + (size_t)t * row_stride + k_col + (size_t)h * hd, hd, (int8_t *)kr + u + row * hd, &sk);
            ref_quant(qkv + (size_t)t * row_stride + v_col + (size_t)h * hd, hd, (int8_t *)vr + u + row * hd, &sv);
            memcpy(kr + u + qb + row * 4, &sk, 4);
            memcpy(vr + u + qb + row * 4, &sv, 4);
        }
    size_t dk = 0, dv = 0;
    for (size_t i = 0; i < bytes; i++) { dk += k8[i] != kr[i]; dv += v8[i] != vr[i]; }
    CHECK(dk == 0 && dv == 0, "kv_write int8 (n_kv %d hd %d bs %d): %zu K / %zu V bytes differ from the definition", n_kv, hd,
          bs, dk, dv);

    /* attention: I8 == F32 holding q * scale; BF16 == F32 holding bf16(x) */
    float *kf = malloc(sizeof(float) * (size_t)n_slots * kv_dim), *vf = malloc(sizeof(float) * (size_t)n_slots * kv_dim);
    for (int s = 0; s < n_slots; s++)
        for (int h = 0; h < n_kv; h++) {
            size_t u = (size_t)(s / bs) * unit, row = (size_t)(s % bs) * n_kv + h;
            float sk, sv;
            memcpy(&sk, k8 + u + qb + row * 4, 4);
            memcpy(&sv, v8 + u + qb + row * 4, 4);
            for (int i = 0; i < hd; i++) {
                kf[(size_t)s * kv_dim + h * hd + i] = used[s] ? (float)((int8_t *)k8)[u + row * hd + i] * sk : 0.0f;
                vf[(size_t)s * kv_dim + h * hd + i] = used[s] ? (float)((int8_t *)v8)[u + row * hd + i] * sv : 0.0f;
            }
        }
    /* one sequence over all the written slots in block order: block table = identity */
    int n_tok = 5, max_blocks = n_blocks;
    int32_t *bt = malloc(sizeof(int32_t) * (size_t)max_blocks), seq[5] = { 0 }, pos[5];
    for (int b = 0; b < max_blocks; b++) bt[b] = b;
    for (int i = 0; i < n_tok; i++) pos[i] = n - 1 - i * ((n - 1) / n_tok); /* positions 0 .. n-1 are written */
    sits_attn_args_t a = { .n_tokens = n_tok, .seq = seq, .pos = pos, .block_tables = bt, .max_blocks = max_blocks,
                           .block_size = bs, .n_heads = n_heads, .n_kv_heads = n_kv, .head_dim = hd, .window = 0,
                           .scale = 1.0f / sqrtf((float)hd) };
    size_t out_n = (size_t)n_tok * n_heads * hd;
    float *o8 = malloc(sizeof(float) * out_n), *of = malloc(sizeof(float) * out_n);
    be->kv_dtype = SITS_DT_I8;
    CHECK(be->ops->attention(be, o8, qkv, row_stride, k8, v8, &a) == SITS_OK, "attention i8");
    be->kv_dtype = SITS_DT_F32;
    CHECK(be->ops->attention(be, of, qkv, row_stride, kf, vf, &a) == SITS_OK, "attention f32");
    CHECK(!memcmp(o8, of, sizeof(float) * out_n), "attention over int8 != attention over its dequantised fp32 values");
    /* bf16 */
    uint16_t *kb = malloc(2 * (size_t)n_slots * kv_dim), *vb = malloc(2 * (size_t)n_slots * kv_dim);
    be->kv_dtype = SITS_DT_BF16;
    CHECK(be->ops->kv_write(be, kb, vb, qkv, n + 1, row_stride, k_col, v_col, kv_dim, hd, bs, slot) == SITS_OK, "kv_write bf16");
    for (int s = 0; s < n_slots * kv_dim; s++) { kf[s] = 0.0f; vf[s] = 0.0f; }
    for (int t = 0; t < n; t++)
        for (int i = 0; i < kv_dim; i++) {
            kf[(size_t)slot[t] * kv_dim + i] = sits_bf16_to_f32(sits_f32_to_bf16(qkv[(size_t)t * row_stride + k_col + i]));
            vf[(size_t)slot[t] * kv_dim + i] = sits_bf16_to_f32(sits_f32_to_bf16(qkv[(size_t)t * row_stride + v_col + i]));
        }
    CHECK(be->ops->attention(be, o8, qkv, row_stride, kb, vb, &a) == SITS_OK, "attention bf16");
    be->kv_dtype = SITS_DT_F32;
    CHECK(be->ops->attention(be, of, qkv, row_stride, kf, vf, &a) == SITS_OK, "attention f32");
    CHECK(!memcmp(o8, of, sizeof(float) * out_n), "attention over bf16 != attention over its fp32 values");
    printf("ok   n_kv %d head_dim %d block %d x %d: int8 bytes, int8 / bf16 attention\n", n_kv, hd, bs, n_blocks);
    free(kb); free(vb); free(o8); free(of); free(bt); free(kf); free(vf);
    free(k8); free(v8); free(kr); free(vr); free(qkv); free(slot); free(used);
}

int main(void)
{
    sits_log_init(-1);
    sits_backend_t *be = NULL;
    sits_backend_params_t bp = { .threads = 1 };
    if (sits_backend_cpu_create(&bp, &be) != SITS_OK) return 1;
    /* sizes: Llama-3-8B per layer block of 16 tokens, 8 KV heads x 128: 16 KiB int8 + 512 B scales */
    CHECK(sits_kv_layer_block_bytes(SITS_DT_I8, 16, 8, 128) == 16384 + 512, "8B int8 unit");
    CHECK(sits_kv_layer_block_bytes(SITS_DT_BF16, 16, 8, 128) == 32768, "8B bf16 block");
    CHECK(sits_kv_layer_block_bytes(SITS_DT_I8, 5, 1, 18) == 96 + 32, "padded unit"); /* 90 -> 96, 20 -> 32 */
    /* dtype parsing and what the cpu accepts */
    sits_dtype_t dt;
    CHECK(sits_backend_kv_dtype_parse("auto", SITS_DT_F32, &dt) == SITS_OK && dt == SITS_DT_F32, "auto");
    CHECK(sits_backend_kv_dtype_parse("int8", SITS_DT_F32, &dt) == SITS_OK && dt == SITS_DT_I8, "int8");
    CHECK(sits_backend_kv_dtype_parse("int4", SITS_DT_F32, &dt) != SITS_OK, "int4 refused");
    CHECK(sits_backend_set_kv_dtype(be, SITS_DT_F16) == SITS_ERR_UNSUPPORTED, "f16 refused on cpu");
    CHECK(sits_backend_set_kv_dtype(be, SITS_DT_BF16) == SITS_OK, "bf16 on cpu");
    test_shape(be, 2, 32, 4, 6);
    test_shape(be, 1, 18, 5, 3);
    test_shape(be, 3, 64, 16, 3);
    sits_backend_destroy(be);
    printf("%s: %d of %d checks failed\n", g_fail ? "FAIL" : "PASS", g_fail, g_checks);
    return g_fail ? 1 : 0;
}
