/* test_kv_fp8.c -- [fp8 kv] the FP8 (E4M3) KV cache of the cpu backend against independent references:
 *   1. the host conversion sits_f32_to_f8e4m3 equals torch's float8_e4m3fn cast (after a clamp to
 *      +-448) bit for bit on all 2^16 bf16 patterns and on an fp32 sample of midpoints, their
 *      neighbours, the saturation edge and the subnormals (tests/unit/data/kv_fp8/e4m3_ref.bin,
 *      written by tests/ref/gen_kv_fp8_ref.py); NaN inputs must give a NaN code; and it equals the
 *      nearest-code search of item 2 at the rounding edges of every float exponent and on random bit
 *      patterns (all 2^32 with SITS_TEST_EXHAUSTIVE=1);
 *   2. kv_write into F8_E4M3 caches gives the bytes of a quantiser written here without the code
 *      under test (scale = amax / 448, 1 for an all-zero head; the code is the nearest of the 253
 *      finite e4m3 values decoded from their bit fields, ties to the even code, saturating), at the
 *      block-unit layout (q, then the scales, each padded to 16 bytes), padding slots (-1) untouched;
 *   3. attention over those caches equals, bit for bit, attention over F32 caches holding the
 *      decoded values times the scale;
 *   4. --kv-cache-dtype fp8 parses and the cpu accepts it; the unit size of Llama-3-8B's shape.
 * Exit 0 pass, 1 fail, 77 when the fixture file is missing. */
#include "backend/backend.h"
#include "util/log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef SITS_KV_FP8_REF
#error "SITS_KV_FP8_REF must name tests/unit/data/kv_fp8/e4m3_ref.bin"
#endif

static int g_fail, g_checks;

#define CHECK(cond_, ...) do { g_checks++; if (!(cond_)) { g_fail++; fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); } } while (0)

static uint64_t g_rng = 0x22f8e4a3cafe01ull;
static float frand(void) /* [-1, 1) */
{
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(g_rng >> 11) / 4503599627370496.0 - 1.0);
}

/* e4m3 (OCP fn) value of code c from its fields, in double; NaN for S.1111.111. */
static double ref_decode(unsigned c)
{
    unsigned e = (c >> 3) & 15, m = c & 7;
    if (e == 15 && m == 7) return NAN;
    double v = e ? ldexp(1.0 + m / 8.0, (int)e - 7) : ldexp(m / 8.0, -6);
    return (c & 0x80) ? -v : v;
}

/* Nearest finite code to x (ties to the even code), saturating; a direct search. */
static uint8_t ref_encode(float x)
{
    double a = fabs((double)x);
    unsigned best = 0;
    double bd = INFINITY;
    for (unsigned c = 0; c <= 126; c++) {
        double d = fabs(a - ref_decode(c));
        if (d < bd || (d == bd && (c & 1) == 0)) { bd = d; best = c; }
    }
    return (uint8_t)(best | (signbit(x) ? 0x80u : 0u));
}

/* The conversion's rounding edges against the direct search above: every float exponent below 255 x
 * every value of the kept and the rounding mantissa bits (22..19) x the bits below them (the "sticky"
 * part) 0, 1, bit 18 alone, all ones, x both signs; then 2^20 random bit patterns; NaN and +-inf apart.
 * SITS_TEST_EXHAUSTIVE=1: every one of the 2^32 patterns instead of the random ones (a few minutes). */
static void test_edges(void)
{
    static const uint32_t sticky[] = { 0, 1, 0x40000u, 0x7ffffu, 0x2a5a5u };
    int bad = 0;
    long n = 0;
    for (uint32_t e = 0; e < 255; e++)
        for (uint32_t top = 0; top < 16; top++)
            for (unsigned k = 0; k < sizeof sticky / sizeof *sticky; k++)
                for (uint32_t sg = 0; sg < 2; sg++) {
                    uint32_t u = (sg << 31) | (e << 23) | (top << 19) | sticky[k];
                    float x;
                    memcpy(&x, &u, 4);
                    uint8_t got = sits_f32_to_f8e4m3(x), want = ref_encode(x);
                    n++;
                    if (got != want && bad++ < 8) fprintf(stderr, "  bits 0x%08x (%.9g): e4m3 0x%02x, search 0x%02x\n", u, x, got, want);
                }
    const char *ex = getenv("SITS_TEST_EXHAUSTIVE");
    int all = ex && *ex == '1';
    uint64_t total = all ? (1ull << 32) : (1ull << 20);
    uint64_t rng = 0x5eed0f8e43ull;
    /* the direct search is slow: the exhaustive pass compares with it only where the exponent is in
     * e4m3's range (2^-11 .. 2^9); elsewhere the answer is 0 / +-448 by the definition */
    for (uint64_t i = 0; i < total; i++) {
        uint32_t u;
        if (all) u = (uint32_t)i;
        else { rng = rng * 6364136223846793005ull + 1442695040888963407ull; u = (uint32_t)(rng >> 32); }
        float x;
        memcpy(&x, &u, 4);
        if (isnan(x) || isinf(x)) continue;
        uint32_t e = (u >> 23) & 0xff;
        uint8_t got = sits_f32_to_f8e4m3(x), want;
        if (e < 127 - 11) want = signbit(x) ? 0x80 : 0;
        else if (e > 127 + 9) want = signbit(x) ? 0xfe : 0x7e;
        else want = ref_encode(x);
        n++;
        if (got != want && bad++ < 8) fprintf(stderr, "  bits 0x%08x (%.9g): e4m3 0x%02x, search 0x%02x\n", u, x, got, want);
    }
    CHECK(bad == 0, "%d of %ld floats convert unlike the nearest-code search", bad, n);
    CHECK(sits_f32_to_f8e4m3(INFINITY) == 0x7e && sits_f32_to_f8e4m3(-INFINITY) == 0xfe, "+-inf saturate to +-448");
    CHECK(sits_f32_to_f8e4m3(NAN) == 0x7f && sits_f32_to_f8e4m3(-NAN) == 0x7f, "NaN -> 0x7f");
    if (bad == 0)
        printf("ok   e4m3 codes equal the nearest-code search on %ld floats (rounding edges of every exponent, %s)\n", n,
               all ? "all 2^32 patterns" : "2^20 random patterns");
}

static int test_torch_codes(void)
{
    FILE *f = fopen(SITS_KV_FP8_REF, "rb");
    if (!f) { printf("SKIP: %s missing\n", SITS_KV_FP8_REF); return 77; }
    static uint8_t bf[65536];
    uint32_t n = 0;
    int ok = fread(bf, 1, sizeof bf, f) == sizeof bf && fread(&n, 4, 1, f) == 1 && n > 0 && n < (1u << 20);
    float *x = ok ? malloc(sizeof(float) * n) : NULL;
    uint8_t *c = ok ? malloc(n) : NULL;
    ok = ok && x && c && fread(x, 4, n, f) == n && fread(c, 1, n, f) == n;
    fclose(f);
    CHECK(ok, "cannot read %s", SITS_KV_FP8_REF);
    if (!ok) { free(x); free(c); return 1; }
    int bad = 0, nan_in = 0;
    for (uint32_t b = 0; b < 65536; b++) {
        float v = sits_bf16_to_f32((uint16_t)b);
        uint8_t got = sits_f32_to_f8e4m3(v), want = bf[b];
        int match = isnan(v) ? (got & 0x7f) == 0x7f : got == want;
        nan_in += isnan(v) != 0;
        if (!match && bad++ < 8) fprintf(stderr, "  bf16 0x%04x (%g): e4m3 0x%02x, torch 0x%02x\n", b, v, got, want);
    }
    CHECK(bad == 0, "%d of 65536 bf16 patterns convert unlike torch", bad);
    int bad2 = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint8_t got = sits_f32_to_f8e4m3(x[i]);
        int match = isnan(x[i]) ? (got & 0x7f) == 0x7f : got == c[i];
        if (!match && bad2++ < 8) fprintf(stderr, "  fp32 %.9g: e4m3 0x%02x, torch 0x%02x\n", x[i], got, c[i]);
    }
    CHECK(bad2 == 0, "%d of %u fp32 samples convert unlike torch", bad2, n);
    /* the in-test encoder (used below) agrees with torch too, so both references are one */
    int bad3 = 0;
    for (uint32_t i = 0; i < n; i++)
        if (!isnan(x[i]) && ref_encode(x[i]) != c[i] && bad3++ < 4)
            fprintf(stderr, "  fp32 %.9g: test encoder 0x%02x, torch 0x%02x\n", x[i], ref_encode(x[i]), c[i]);
    CHECK(bad3 == 0, "the test's own encoder differs from torch on %d samples", bad3);
    printf("ok   e4m3 codes equal torch's: 65536 bf16 patterns (%d NaN), %u fp32 samples\n", nan_in, n);
    free(x);
    free(c);
    return 0;
}

static void ref_quant(const float *x, int hd, uint8_t *q, float *scale)
{
    float amax = 0.0f;
    for (int i = 0; i < hd; i++) amax = fmaxf(amax, fabsf(x[i]));
    float s = amax > 0.0f ? amax / 448.0f : 1.0f;
    *scale = s;
    for (int i = 0; i < hd; i++) q[i] = ref_encode(x[i] / s);
}

static void test_shape(sits_backend_t *be, int n_kv, int hd, int bs, int n_blocks)
{
    int kv_dim = n_kv * hd, n_slots = n_blocks * bs, n = n_slots - 2; /* two slots never written */
    int n_heads = 2 * n_kv, row_stride = (n_heads + 2 * n_kv) * hd, k_col = n_heads * hd, v_col = k_col + kv_dim;
    size_t unit = sits_kv_layer_block_bytes(SITS_DT_F8_E4M3, bs, n_kv, hd), qb = sits_kv_i8_q_bytes(bs, n_kv, hd);
    size_t bytes = (size_t)n_blocks * unit;
    float *qkv = malloc(sizeof(float) * (size_t)(n + 1) * row_stride);
    int32_t *slot = malloc(sizeof(int32_t) * (size_t)(n + 1));
    for (size_t i = 0; i < (size_t)(n + 1) * row_stride; i++) qkv[i] = frand() * 3.0f * (frand() > 0.8f ? 0.01f : 1.0f);
    for (int i = 0; i < hd; i++) qkv[(size_t)1 * row_stride + k_col + i] = 0.0f; /* all-zero head */
    /* exact ties: amax 448 makes scale 1; 9 is the midpoint of 8 and 10 (-> 8, even code), 0.0078125 of two subnormals */
    for (int i = 0; i < hd; i++)
        qkv[(size_t)2 * row_stride + v_col + i] = i == 0 ? 448.0f : i % 3 == 0 ? 9.0f : i % 3 == 1 ? -0.0029296875f : 3.5f;
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
    be->kv_dtype = SITS_DT_F8_E4M3;
    CHECK(be->ops->kv_write(be, k8, v8, qkv, n + 1, row_stride, k_col, v_col, kv_dim, hd, bs, slot) == SITS_OK, "kv_write");
    for (int t = 0; t < n; t++)
        for (int h = 0; h < n_kv; h++) {
            size_t u = (size_t)(slot[t] / bs) * unit, row = (size_t)(slot[t] % bs) * n_kv + h;
            float sk, sv;
            ref_quant(qkv + (size_t)t * row_stride + k_col + (size_t)h * hd, hd, kr + u + row * hd, &sk);
            ref_quant(qkv + (size_t)t * row_stride + v_col + (size_t)h * hd, hd, vr + u + row * hd, &sv);
            memcpy(kr + u + qb + row * 4, &sk, 4);
            memcpy(vr + u + qb + row * 4, &sv, 4);
        }
    size_t dk = 0, dv = 0, first = bytes;
    for (size_t i = 0; i < bytes; i++) {
        dk += k8[i] != kr[i];
        dv += v8[i] != vr[i];
        if ((k8[i] != kr[i] || v8[i] != vr[i]) && first == bytes) first = i;
    }
    CHECK(dk == 0 && dv == 0, "kv_write fp8 (n_kv %d hd %d bs %d): %zu K / %zu V bytes differ from the definition (first at %zu: "
          "K %02x/%02x V %02x/%02x)", n_kv, hd, bs, dk, dv, first, first < bytes ? k8[first] : 0, first < bytes ? kr[first] : 0,
          first < bytes ? v8[first] : 0, first < bytes ? vr[first] : 0);

    float *kf = malloc(sizeof(float) * (size_t)n_slots * kv_dim), *vf = malloc(sizeof(float) * (size_t)n_slots * kv_dim);
    for (int s = 0; s < n_slots; s++)
        for (int h = 0; h < n_kv; h++) {
            size_t u = (size_t)(s / bs) * unit, row = (size_t)(s % bs) * n_kv + h;
            float sk, sv;
            memcpy(&sk, k8 + u + qb + row * 4, 4);
            memcpy(&sv, v8 + u + qb + row * 4, 4);
            for (int i = 0; i < hd; i++) {
                kf[(size_t)s * kv_dim + h * hd + i] = used[s] ? (float)ref_decode(k8[u + row * hd + i]) * sk : 0.0f;
                vf[(size_t)s * kv_dim + h * hd + i] = used[s] ? (float)ref_decode(v8[u + row * hd + i]) * sv : 0.0f;
            }
        }
    int n_tok = 5, max_blocks = n_blocks;
    int32_t *bt = malloc(sizeof(int32_t) * (size_t)max_blocks), seq[5] = { 0 }, pos[5];
    for (int b = 0; b < max_blocks; b++) bt[b] = b;
    for (int i = 0; i < n_tok; i++) pos[i] = n - 1 - i * ((n - 1) / n_tok);
    sits_attn_args_t a = { .n_tokens = n_tok, .seq = seq, .pos = pos, .block_tables = bt, .max_blocks = max_blocks,
                           .block_size = bs, .n_heads = n_heads, .n_kv_heads = n_kv, .head_dim = hd, .window = 0,
                           .scale = 1.0f / sqrtf((float)hd) };
    size_t out_n = (size_t)n_tok * n_heads * hd;
    float *o8 = malloc(sizeof(float) * out_n), *of = malloc(sizeof(float) * out_n);
    be->kv_dtype = SITS_DT_F8_E4M3;
    CHECK(be->ops->attention(be, o8, qkv, row_stride, k8, v8, &a) == SITS_OK, "attention fp8");
    be->kv_dtype = SITS_DT_F32;
    CHECK(be->ops->attention(be, of, qkv, row_stride, kf, vf, &a) == SITS_OK, "attention f32");
    size_t nd = 0;
    for (size_t i = 0; i < out_n; i++)
        if (memcmp(&o8[i], &of[i], 4) && nd++ < 4) fprintf(stderr, "  out[%zu]: fp8 %.9g, f32 %.9g\n", i, o8[i], of[i]);
    CHECK(nd == 0, "attention over fp8 != attention over its dequantised fp32 values (%zu of %zu)", nd, out_n);
    printf("ok   n_kv %d head_dim %d block %d x %d: fp8 bytes, fp8 attention\n", n_kv, hd, bs, n_blocks);
    free(o8); free(of); free(bt); free(kf); free(vf);
    free(k8); free(v8); free(kr); free(vr); free(qkv); free(slot); free(used);
}

int main(void)
{
    sits_log_init(-1);
    int rc = test_torch_codes();
    if (rc == 77) return 77;
    test_edges();
    sits_backend_t *be = NULL;
    sits_backend_params_t bp = { .threads = 1 };
    if (sits_backend_cpu_create(&bp, &be) != SITS_OK) return 1;
    CHECK(sits_kv_layer_block_bytes(SITS_DT_F8_E4M3, 16, 8, 128) == 16384 + 512, "8B fp8 unit");
    sits_dtype_t dt;
    CHECK(sits_backend_kv_dtype_parse("fp8", SITS_DT_F32, &dt) == SITS_OK && dt == SITS_DT_F8_E4M3, "fp8");
    CHECK(sits_backend_kv_dtype_parse("fp8_e4m3", SITS_DT_BF16, &dt) == SITS_OK && dt == SITS_DT_F8_E4M3, "fp8_e4m3");
    CHECK(sits_backend_kv_dtype_parse("fp8_e5m2", SITS_DT_BF16, &dt) != SITS_OK, "e5m2 refused");
    CHECK(sits_backend_set_kv_dtype(be, SITS_DT_F8_E4M3) == SITS_OK, "fp8 on cpu");
    test_shape(be, 2, 32, 4, 6);
    test_shape(be, 1, 18, 5, 3);
    test_shape(be, 3, 64, 16, 3);
    sits_backend_destroy(be);
    printf("%s: %d of %d checks failed\n", g_fail ? "FAIL" : "PASS", g_fail, g_checks);
    return g_fail ? 1 : 0;
}
