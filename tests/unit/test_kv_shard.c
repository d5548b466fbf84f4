/* test_kv_shard.c -- the compressed KV shard (src/kv/shard.c) and int8 KV quantisation (src/kv/quant.c):
 * round trips (int8 within scale/2 of an independently computed scale, fp32 exact, bf16 within its
 * rounding) dense and paged, with and without LZ4, odd ranges, a shard of many LZ4 frames on 1 and 2
 * threads; refusal of every truncation, of single-byte corruptions, and of forged-but-checksummed
 * header and frame-table inconsistencies, with the outputs left untouched; the codec decision rule. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "kv/quant.h"
#include "kv/shard.h"
#include "util/log.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SENTINEL -12345.0f

/* ---- helpers ---- */

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* roughly Gaussian (sum of 4 uniforms), with an occasional large outlier channel */
static float rnd(uint64_t *s)
{
    float a = 0;
    for (int i = 0; i < 4; i++) a += (float)(rng_next(s) >> 40) / (float)(1 << 24) - 0.5f;
    if ((rng_next(s) & 63) == 0) a *= 20.0f;
    return a;
}

static size_t n_elems(const sits_kv_shard_desc_t *d)
{
    return (size_t)(d->l1 - d->l0) * (d->t1 - d->t0) * (d->h1 - d->h0) * d->head_dim;
}

static float *rand_array(size_t n, uint64_t seed)
{
    float *x = malloc(sizeof(float) * n);
    assert_non_null(x);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) x[i] = rnd(&s);
    return x;
}

static float *fill_array(size_t n, float v)
{
    float *x = malloc(sizeof(float) * n);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++) x[i] = v;
    return x;
}

/* Compares got with ref row by row (rows of head_dim): int8 within max|row|/127/2 (computed here in
 * double, plus one float ulp of slack), fp32 exactly, bf16 within 2^-8 relative. Prints the first
 * mismatches and the max error; returns the number of mismatches. */
static long compare(const char *what, const float *ref, const float *got, size_t n, int dim, sits_kv_shard_dtype_t dt)
{
    long bad = 0;
    double maxerr = 0;
    for (size_t r = 0; r < n / (size_t)dim; r++) {
        double m = 0;
        for (int i = 0; i < dim; i++) m = fmax(m, fabs((double)ref[r * dim + i]));
        for (int i = 0; i < dim; i++) {
            double a = ref[r * dim + i], b = got[r * dim + i], err = fabs(a - b), tol;
            if (dt == SITS_KV_SHARD_INT8) tol = m / 127.0 / 2.0 * (1 + 1e-6) + 1e-30;
            else if (dt == SITS_KV_SHARD_BF16) tol = fabs(a) / 256.0;
            else tol = 0;
            if (err > maxerr) maxerr = err;
            if (!(err <= tol)) {
                if (bad < 5) fprintf(stderr, "%s: element %zu: got %.9g want %.9g (tol %.3g)\n", what, r * dim + i, b, a, tol);
                bad++;
            }
        }
    }
    if (bad) fprintf(stderr, "%s: %ld mismatches, max error %.3g\n", what, bad, maxerr);
    return bad;
}

static unsigned char *pack_dense(const sits_kv_shard_desc_t *d, const float *k, const float *v, sits_kv_codec_t c,
                                 size_t *len_p)
{
    size_t cap = sits_kv_shard_size_bound(d, c);
    assert_true(cap > SITS_KV_SHARD_HEADER_BYTES);
    unsigned char *buf = malloc(cap);
    assert_non_null(buf);
    assert_int_equal(sits_kv_shard_pack(d, k, v, c, buf, cap, len_p), SITS_OK);
    assert_true(*len_p <= cap);
    return buf;
}

/* ---- CRC and quantisation ---- */

static void test_crc32(void **state)
{
    assert_int_equal(sits_kv_crc32(0, "123456789", 9), 0xcbf43926u);
    assert_int_equal(sits_kv_crc32(0, "", 0), 0u);
    /* incremental == one shot, over the slice-by-8 and byte paths */
    unsigned char b[1000];
    for (int i = 0; i < 1000; i++) b[i] = (unsigned char)(i * 7 + 3);
    uint32_t one = sits_kv_crc32(0, b, 1000);
    assert_int_equal(sits_kv_crc32(sits_kv_crc32(0, b, 13), b + 13, 987), one);
    /* bit-serial reference */
    uint32_t c = 0xffffffffu;
    for (int i = 0; i < 1000; i++) {
        c ^= b[i];
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
    }
    assert_int_equal(one, ~c);
}

static void test_quant_row(void **state)
{
    const float x[9] = { 1.0f, -2.54f, 0.01f, 0.0f, 2.54f, -0.0101f, 1.27f, 0.635f, -1.905f };
    int8_t q[9];
    float s;
    assert_int_equal(sits_kv_quant_row_i8(x, 9, q, &s), SITS_OK);
    assert_true(fabsf(s - 0.02f) <= 1e-7f);
    /* x / 0.02 = 50, -127, 0.5 (ties to even: 0), 0, 127, -0.505 (-1), 63.5 (64), 31.75 (32), -95.25 (-95) */
    const int8_t want[9] = { 50, -127, 0, 0, 127, -1, 64, 32, -95 };
    for (int i = 0; i < 9; i++) {
        if (q[i] != want[i]) fprintf(stderr, "q[%d] = %d, want %d (x/s = %.9g)\n", i, q[i], want[i], x[i] / s);
        if (i != 2 && i != 6) assert_int_equal(q[i], want[i]);   /* ties depend on the float quotient */
        assert_true(abs(q[i] - want[i]) <= 1);
    }
    float y[9];
    sits_kv_dequant_i8(q, &s, 1, 9, y);
    assert_int_equal(compare("quant row", x, y, 9, 9, SITS_KV_SHARD_INT8), 0);
    /* zero row -> scale 0, q 0 */
    const float z[4] = { 0, 0, -0.0f, 0 };
    assert_int_equal(sits_kv_quant_row_i8(z, 4, q, &s), SITS_OK);
    assert_true(s == 0.0f);
    for (int i = 0; i < 4; i++) assert_int_equal(q[i], 0);
    /* non-finite refused */
    float nanrow[3] = { 1, NAN, 2 }, infrow[3] = { 1, -INFINITY, 2 };
    assert_int_equal(sits_kv_quant_row_i8(nanrow, 3, q, &s), SITS_ERR_INVALID);
    assert_int_equal(sits_kv_quant_row_i8(infrow, 3, q, &s), SITS_ERR_INVALID);
    /* many random rows: |err| <= scale / 2, -128 never appears, the max element maps to +-127 */
    size_t rows = 500;
    int dim = 37;
    float *a = rand_array(rows * dim, 5), *b = malloc(sizeof(float) * rows * dim), *sc = malloc(sizeof(float) * rows);
    int8_t *qq = malloc(rows * dim);
    assert_int_equal(sits_kv_quant_i8(a, rows, dim, qq, sc), SITS_OK);
    for (size_t i = 0; i < rows * dim; i++) assert_true(qq[i] >= -127);
    for (size_t r = 0; r < rows; r++) {
        int m = 0;
        for (int i = 0; i < dim; i++) m = abs(qq[r * dim + i]) > m ? abs(qq[r * dim + i]) : m;
        assert_int_equal(m, 127);
    }
    sits_kv_dequant_i8(qq, sc, rows, dim, b);
    assert_int_equal(compare("quant rows", a, b, rows * dim, dim, SITS_KV_SHARD_INT8), 0);
    free(a); free(b); free(sc); free(qq);
}

/* ---- dense round trips ---- */

static void round_trip(const sits_kv_shard_desc_t *d, sits_kv_codec_t c, int threads)
{
    size_t n = n_elems(d);
    float *k = rand_array(n, 1 + (uint64_t)d->dtype), *v = rand_array(n, 100 + (uint64_t)d->dtype);
    float *k2 = fill_array(n, SENTINEL), *v2 = fill_array(n, SENTINEL);
    size_t len = 0;
    unsigned char *buf = pack_dense(d, k, v, c, &len);
    sits_kv_shard_desc_t got, peek;
    sits_kv_codec_t pc;
    assert_int_equal(sits_kv_shard_peek(buf, len, &peek, &pc), SITS_OK);
    assert_int_equal(pc, c);
    assert_int_equal(sits_kv_shard_unpack(buf, len, threads, &got, k2, v2), SITS_OK);
    const int *a = &d->l0, *b = &got.l0, *p = &peek.l0;
    for (int i = 0; i < 7; i++) { assert_int_equal(a[i], b[i]); assert_int_equal(a[i], p[i]); }
    assert_int_equal(got.dtype, d->dtype);
    char what[128];
    snprintf(what, sizeof what, "dense dtype %d codec %d threads %d K", d->dtype, c, threads);
    assert_int_equal(compare(what, k, k2, n, d->head_dim, d->dtype), 0);
    what[strlen(what) - 1] = 'V';
    assert_int_equal(compare(what, v, v2, n, d->head_dim, d->dtype), 0);
    if (d->dtype == SITS_KV_SHARD_FP32) {
        assert_memory_equal(k, k2, n * 4);
        assert_memory_equal(v, v2, n * 4);
    }
    /* size: none = header + raw exactly */
    if (c == SITS_KV_CODEC_NONE) assert_int_equal(len, SITS_KV_SHARD_HEADER_BYTES + sits_kv_shard_raw_bytes(d));
    free(buf); free(k); free(v); free(k2); free(v2);
}

static void test_round_trip_dense(void **state)
{
    const sits_kv_shard_dtype_t dts[3] = { SITS_KV_SHARD_INT8, SITS_KV_SHARD_FP32, SITS_KV_SHARD_BF16 };
    for (int i = 0; i < 3; i++)
        for (int c = 0; c < 2; c++) {
            /* odd ranges: layers [1,3), heads [1,4), tokens [5,18), head_dim 7 */
            sits_kv_shard_desc_t d = { .l0 = 1, .l1 = 3, .h0 = 1, .h1 = 4, .t0 = 5, .t1 = 18, .head_dim = 7, .dtype = dts[i] };
            round_trip(&d, (sits_kv_codec_t)c, 1);
            /* one token, one head, one layer */
            sits_kv_shard_desc_t e = { .l0 = 7, .l1 = 8, .h0 = 3, .h1 = 4, .t0 = 0, .t1 = 1, .head_dim = 16, .dtype = dts[i] };
            round_trip(&e, (sits_kv_codec_t)c, 1);
        }
}

/* Many LZ4 frames (the raw payload is several 64 KiB blocks), 1 and 2 threads, identical bytes. */
static void test_multi_frame(void **state)
{
    const sits_kv_shard_dtype_t dts[2] = { SITS_KV_SHARD_INT8, SITS_KV_SHARD_FP32 };
    for (int i = 0; i < 2; i++) {
        sits_kv_shard_desc_t d = { .l0 = 0, .l1 = 2, .h0 = 0, .h1 = 4, .t0 = 0, .t1 = 611, .head_dim = 64, .dtype = dts[i] };
        size_t raw = sits_kv_shard_raw_bytes(&d);
        assert_true(raw > 4 * SITS_KV_SHARD_FRAME_BYTES);
        round_trip(&d, SITS_KV_CODEC_LZ4, 1);
        round_trip(&d, SITS_KV_CODEC_LZ4, 2);
        size_t n = n_elems(&d), l1 = 0, l2 = 0;
        float *k = rand_array(n, 9), *v = rand_array(n, 10);
        unsigned char *b1 = pack_dense(&d, k, v, SITS_KV_CODEC_LZ4, &l1);
        d.threads = 2;
        unsigned char *b2 = pack_dense(&d, k, v, SITS_KV_CODEC_LZ4, &l2);
        assert_int_equal(l1, l2);
        assert_memory_equal(b1, b2, l1);
        /* an exactly sized buffer works too (compression then goes through scratch), one byte less does not */
        unsigned char *b3 = malloc(l1);
        size_t l3 = 0;
        assert_int_equal(sits_kv_shard_pack(&d, k, v, SITS_KV_CODEC_LZ4, b3, l1, &l3), SITS_OK);
        assert_int_equal(l3, l1);
        assert_memory_equal(b1, b3, l1);
        assert_int_equal(sits_kv_shard_pack(&d, k, v, SITS_KV_CODEC_LZ4, b3, l1 - 1, &l3), SITS_ERR_INVALID);
        free(b1); free(b2); free(b3); free(k); free(v);
    }
}

/* ---- paged ---- */

static void test_round_trip_paged(void **state)
{
    enum { BS = 4, NB = 12, NKV = 6, HEAD0 = 2, D = 5, NL = 3 };
    const int32_t bt[6] = { 7, 2, 11, 0, 5, 9 };   /* 24 positions */
    sits_kv_paged_t pg = { .block_size = BS, .n_blocks = NB, .n_kv_heads = NKV, .head0 = HEAD0, .block_table = bt, .n_table = 6 };
    size_t per_layer = (size_t)NB * BS * NKV * D;
    float *kc[NL], *vc[NL];
    for (int l = 0; l < NL; l++) { kc[l] = rand_array(per_layer, 20 + l); vc[l] = rand_array(per_layer, 40 + l); }
    for (int dt = 0; dt < 3; dt++)
        for (int c = 0; c < 2; c++) {
            /* layers [4,6) of a model whose cache layers 4..6 are kc[0..2]; heads [3,7) of the cache's [2,8);
             * tokens [3,21) cross block boundaries at both ends */
            sits_kv_shard_desc_t d = { .l0 = 4, .l1 = 6, .h0 = 3, .h1 = 7, .t0 = 3, .t1 = 21, .head_dim = D,
                                       .dtype = (sits_kv_shard_dtype_t)dt };
            size_t L = 2, T = 18, H = 4, n = L * T * H * D;
            /* the dense reference, gathered here by the rule of backend.h */
            float *kr = malloc(n * 4), *vr = malloc(n * 4);
            for (size_t l = 0; l < L; l++)
                for (size_t t = 0; t < T; t++)
                    for (size_t h = 0; h < H; h++) {
                        size_t p = 3 + t, slot = (size_t)bt[p / BS] * BS + p % BS;
                        size_t src = (slot * NKV + (3 + h - HEAD0)) * D, dst = ((l * T + t) * H + h) * D;
                        memcpy(kr + dst, kc[l] + src, D * 4);
                        memcpy(vr + dst, vc[l] + src, D * 4);
                    }
            size_t cap = sits_kv_shard_size_bound(&d, (sits_kv_codec_t)c), len = 0, len2 = 0;
            unsigned char *buf = malloc(cap), *buf2 = NULL;
            assert_int_equal(sits_kv_shard_pack_paged(&d, (const float *const *)kc, (const float *const *)vc, &pg,
                                                      (sits_kv_codec_t)c, buf, cap, &len), SITS_OK);
            /* byte-identical to packing the gathered dense arrays */
            buf2 = pack_dense(&d, kr, vr, (sits_kv_codec_t)c, &len2);
            assert_int_equal(len, len2);
            assert_memory_equal(buf, buf2, len);
            /* unpack dense */
            float *k2 = fill_array(n, SENTINEL), *v2 = fill_array(n, SENTINEL);
            assert_int_equal(sits_kv_shard_unpack(buf, len, 1, NULL, k2, v2), SITS_OK);
            assert_int_equal(compare("paged->dense K", kr, k2, n, D, d.dtype), 0);
            assert_int_equal(compare("paged->dense V", vr, v2, n, D, d.dtype), 0);
            /* unpack paged into sentinel caches with another block table: exactly the shard's slots change */
            const int32_t bt2[6] = { 1, 3, 4, 6, 8, 10 };
            sits_kv_paged_t pg2 = pg;
            pg2.block_table = bt2;
            float *kd[2], *vd[2];
            for (int l = 0; l < 2; l++) { kd[l] = fill_array(per_layer, SENTINEL); vd[l] = fill_array(per_layer, SENTINEL); }
            sits_kv_shard_desc_t got;
            assert_int_equal(sits_kv_shard_unpack_paged(buf, len, 2, kd, vd, 2, &pg2, &got), SITS_OK);
            assert_int_equal(got.t1, 21);
            long bad = 0;
            for (int l = 0; l < 2; l++)
                for (size_t s = 0; s < (size_t)NB * BS; s++)
                    for (int h = 0; h < NKV; h++) {
                        int blk = (int)(s / BS), hit = -1;
                        for (int j = 0; j < 6; j++) if (bt2[j] == blk) hit = j;
                        size_t p = hit < 0 ? 0 : (size_t)hit * BS + s % BS;
                        int head = HEAD0 + h;
                        int inside = hit >= 0 && p >= 3 && p < 21 && head >= 3 && head < 7;
                        for (int e = 0; e < D; e++) {
                            float gk = kd[l][(s * NKV + h) * D + e], gv = vd[l][(s * NKV + h) * D + e];
                            if (!inside) { bad += gk != SENTINEL || gv != SENTINEL; continue; }
                            size_t di = ((l * T + (p - 3)) * H + (head - 3)) * D + e;
                            bad += gk != k2[di] || gv != v2[di];
                        }
                    }
            if (bad) fprintf(stderr, "paged unpack: %ld wrong elements (dtype %d codec %d)\n", bad, dt, c);
            assert_int_equal(bad, 0);
            /* a destination that cannot hold it is refused before anything is written */
            sits_log_set_level(SITS_LOG_NONE);   /* expected refusals */
            const int32_t bt_bad[6] = { 1, 3, 4, 12, 8, 10 };
            sits_kv_paged_t pg3 = pg2;
            pg3.block_table = bt_bad;
            float *ke[2] = { fill_array(per_layer, SENTINEL), fill_array(per_layer, SENTINEL) };
            float *ve[2] = { fill_array(per_layer, SENTINEL), fill_array(per_layer, SENTINEL) };
            assert_int_equal(sits_kv_shard_unpack_paged(buf, len, 1, ke, ve, 2, &pg3, NULL), SITS_ERR_INVALID);
            pg3 = pg2;
            pg3.head0 = 4;   /* heads [4, 10) do not hold head 3 */
            assert_int_equal(sits_kv_shard_unpack_paged(buf, len, 1, ke, ve, 2, &pg3, NULL), SITS_ERR_INVALID);
            pg3 = pg2;
            pg3.n_table = 5;   /* token 20 needs table entry 5 */
            assert_int_equal(sits_kv_shard_unpack_paged(buf, len, 1, ke, ve, 2, &pg3, NULL), SITS_ERR_INVALID);
            assert_int_equal(sits_kv_shard_unpack_paged(buf, len, 1, ke, ve, 1, &pg2, NULL), SITS_ERR_INVALID);
            for (int l = 0; l < 2; l++)
                for (size_t i = 0; i < per_layer; i++) assert_true(ke[l][i] == SENTINEL && ve[l][i] == SENTINEL);
            /* and packing from a bad table is refused */
            assert_int_equal(sits_kv_shard_pack_paged(&d, (const float *const *)kc, (const float *const *)vc, &pg3,
                                                      (sits_kv_codec_t)c, buf2, len2, &len), SITS_ERR_INVALID);
            sits_log_set_level(SITS_LOG_WARN);
            for (int l = 0; l < 2; l++) { free(kd[l]); free(vd[l]); free(ke[l]); free(ve[l]); }
            free(k2); free(v2); free(buf); free(buf2); free(kr); free(vr);
        }
    for (int l = 0; l < NL; l++) { free(kc[l]); free(vc[l]); }
}

/* ---- refusal ---- */

typedef struct {
    sits_kv_shard_desc_t d;
    size_t n;
    float *k, *v;
} shard_case_t;

static shard_case_t small_case(sits_kv_shard_dtype_t dt)
{
    shard_case_t s = { .d = { .l0 = 0, .l1 = 2, .h0 = 1, .h1 = 3, .t0 = 2, .t1 = 9, .head_dim = 6, .dtype = dt } };
    s.n = n_elems(&s.d);
    s.k = rand_array(s.n, 77);
    s.v = rand_array(s.n, 78);
    return s;
}

/* Unpack must refuse with want and leave the sentinel-filled outputs untouched. */
static void expect_refused(const unsigned char *buf, size_t len, size_t n, sits_status_t want, const char *what, long pos)
{
    float *k = fill_array(n, SENTINEL), *v = fill_array(n, SENTINEL);
    sits_status_t st = sits_kv_shard_unpack(buf, len, 1, NULL, k, v);
    if (st != want) fprintf(stderr, "%s (at %ld): status %d, want %d\n", what, pos, st, want);
    assert_int_equal(st, want);
    for (size_t i = 0; i < n; i++)
        if (k[i] != SENTINEL || v[i] != SENTINEL) fail_msg("%s (at %ld): output written at %zu", what, pos, i);
    free(k);
    free(v);
}

static void test_truncation_and_corruption(void **state)
{
    sits_log_set_level(SITS_LOG_NONE);   /* thousands of expected refusals */
    const sits_kv_shard_dtype_t dts[2] = { SITS_KV_SHARD_INT8, SITS_KV_SHARD_FP32 };
    for (int i = 0; i < 2; i++)
        for (int c = 0; c < 2; c++) {
            shard_case_t s = small_case(dts[i]);
            size_t len = 0;
            unsigned char *buf = pack_dense(&s.d, s.k, s.v, (sits_kv_codec_t)c, &len);
            unsigned char *cp = malloc(len + 1);
            /* every truncation */
            for (size_t l = 0; l < len; l++) expect_refused(buf, l, s.n, SITS_ERR_FORMAT, "truncated", (long)l);
            /* a trailing byte */
            memcpy(cp, buf, len);
            cp[len] = 0;
            expect_refused(cp, len + 1, s.n, SITS_ERR_FORMAT, "trailing byte", (long)len);
            /* every byte flipped three ways */
            const unsigned char masks[3] = { 0x01, 0x80, 0xff };
            for (size_t p = 0; p < len; p++)
                for (int m = 0; m < 3; m++) {
                    memcpy(cp, buf, len);
                    cp[p] ^= masks[m];
                    expect_refused(cp, len, s.n, SITS_ERR_FORMAT, "corrupt byte", (long)p);
                }
            /* peek refuses a corrupt header too */
            memcpy(cp, buf, len);
            cp[13] ^= 1;
            assert_int_equal(sits_kv_shard_peek(cp, len, NULL, NULL), SITS_ERR_FORMAT);
            /* the intact one still unpacks */
            float *k = fill_array(s.n, 0), *v = fill_array(s.n, 0);
            assert_int_equal(sits_kv_shard_unpack(buf, len, 1, NULL, k, v), SITS_OK);
            free(k); free(v); free(cp); free(buf); free(s.k); free(s.v);
        }
    sits_log_set_level(SITS_LOG_WARN);
}

/* Re-seal a forged header (so only the field checks can catch it). */
static void reseal_header(unsigned char *b)
{
    uint32_t c = sits_kv_crc32(0, b, 92);
    for (int i = 0; i < 4; i++) b[92 + i] = (unsigned char)(c >> (8 * i));
}

static void reseal_payload(unsigned char *b, size_t len)
{
    uint32_t c = sits_kv_crc32(0, b + SITS_KV_SHARD_HEADER_BYTES, len - SITS_KV_SHARD_HEADER_BYTES);
    for (int i = 0; i < 4; i++) b[64 + i] = (unsigned char)(c >> (8 * i));
    reseal_header(b);
}

static void put32(unsigned char *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i)); }
static uint32_t get32(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

static void test_header_inconsistencies(void **state)
{
    for (int c = 0; c < 2; c++) {
        shard_case_t s = small_case(SITS_KV_SHARD_INT8);
        size_t len = 0;
        unsigned char *buf = pack_dense(&s.d, s.k, s.v, (sits_kv_codec_t)c, &len);
        unsigned char *cp = malloc(len);
        /* forged fields: {offset, bytes, new value} */
        struct { int off, bytes; uint32_t val; const char *what; } f[] = {
            { 0, 4, 0x53564b54u, "magic" },       { 4, 2, 2, "version" },          { 6, 2, 64, "header size" },
            { 8, 1, 3, "dtype" },                 { 8, 1, SITS_KV_SHARD_FP32, "dtype vs sizes" },
            { 9, 1, 2, "codec" },                 { 9, 1, (uint32_t)!c, "codec swapped" },
            { 10, 2, 1, "flags" },                { 12, 4, (uint32_t)-1, "negative l0" },
            { 16, 4, 0, "l1 <= l0" },             { 24, 4, 4, "head range vs sizes" },
            { 32, 4, 2, "t1 <= t0" },             { 36, 4, 0, "head_dim 0" },        { 36, 4, 7, "head_dim vs sizes" },
            { 40, 4, 12345, "raw size" },         { 44, 4, 1, "raw size high" },
            { 48, 4, 12345, "stored size" },      { 52, 4, 1, "stored size high" },
            { 56, 4, c ? 1024u : 65536u, "frame bytes" }, { 60, 4, c ? 7u : 1u, "frames" },
            { 70, 1, 1, "reserved" },             { 91, 1, 0x80, "reserved end" },
        };
        for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
            memcpy(cp, buf, len);
            uint32_t v = f[i].val;
            for (int b = 0; b < f[i].bytes; b++) cp[f[i].off + b] = (unsigned char)(v >> (8 * b));
            reseal_header(cp);
            sits_log_set_level(SITS_LOG_NONE);
            float *k = fill_array(s.n, SENTINEL), *v2 = fill_array(s.n, SENTINEL);
            sits_status_t st = sits_kv_shard_unpack(cp, len, 1, NULL, k, v2);
            sits_log_set_level(SITS_LOG_WARN);
            if (st != SITS_ERR_FORMAT) fprintf(stderr, "codec %d forged %s: status %d\n", c, f[i].what, st);
            assert_int_equal(st, SITS_ERR_FORMAT);
            for (size_t e = 0; e < s.n; e++) assert_true(k[e] == SENTINEL && v2[e] == SENTINEL);
            free(k); free(v2);
        }
        /* an int8 scale forged to NaN / negative / above FLT_MAX / 128 (q = -128 times it would be
         * -inf; tests/fuzz/findings/kv_shard-int8-q-minus-128), with both checksums resealed */
        const float badscale[3] = { NAN, -1.0f, 3.4028234663852886e38f / 127.0f };
        for (int j = 0; j < 3 && c == 0; j++) {
            memcpy(cp, buf, len);
            memcpy(cp + SITS_KV_SHARD_HEADER_BYTES + 4 * 5, &badscale[j], 4);
            reseal_payload(cp, len);
            sits_log_set_level(SITS_LOG_NONE);
            expect_refused(cp, len, s.n, SITS_ERR_FORMAT, "forged scale", j);
            sits_log_set_level(SITS_LOG_WARN);
        }
        /* the LZ4 frame table: sizes shifted between frames, a zero size -- resealed */
        if (c == 1) {
            shard_case_t m = { .d = { .l0 = 0, .l1 = 1, .h0 = 0, .h1 = 2, .t0 = 0, .t1 = 700, .head_dim = 32,
                                      .dtype = SITS_KV_SHARD_FP32 } };
            m.n = n_elems(&m.d);
            m.k = rand_array(m.n, 3);
            m.v = rand_array(m.n, 4);
            size_t ml = 0;
            unsigned char *mb = pack_dense(&m.d, m.k, m.v, SITS_KV_CODEC_LZ4, &ml), *mc = malloc(ml);
            uint32_t nf = get32(mb + 60);
            assert_true(nf >= 3);
            unsigned char *tab = mc + SITS_KV_SHARD_HEADER_BYTES;
            memcpy(mc, mb, ml);
            put32(tab, get32(mb + SITS_KV_SHARD_HEADER_BYTES) + 1);
            put32(tab + 4, get32(mb + SITS_KV_SHARD_HEADER_BYTES + 4) - 1);
            reseal_payload(mc, ml);
            sits_log_set_level(SITS_LOG_NONE);
            expect_refused(mc, ml, m.n, SITS_ERR_FORMAT, "frame sizes shifted", 0);
            memcpy(mc, mb, ml);
            put32(tab + 8, 0);
            reseal_payload(mc, ml);
            expect_refused(mc, ml, m.n, SITS_ERR_FORMAT, "zero frame size", 0);
            memcpy(mc, mb, ml);
            put32(tab, 0x7fffffffu);
            reseal_payload(mc, ml);
            expect_refused(mc, ml, m.n, SITS_ERR_FORMAT, "huge frame size", 0);
            sits_log_set_level(SITS_LOG_WARN);
            free(mb); free(mc); free(m.k); free(m.v);
        }
        free(cp); free(buf); free(s.k); free(s.v);
    }
}

static void test_pack_errors(void **state)
{
    sits_log_set_level(SITS_LOG_NONE);
    shard_case_t s = small_case(SITS_KV_SHARD_INT8);
    size_t len = 0, cap = sits_kv_shard_size_bound(&s.d, SITS_KV_CODEC_NONE);
    unsigned char *buf = malloc(cap);
    assert_int_equal(sits_kv_shard_pack(&s.d, s.k, s.v, SITS_KV_CODEC_NONE, buf, cap - 1, &len), SITS_ERR_INVALID);
    assert_int_equal(sits_kv_shard_pack(&s.d, s.k, s.v, (sits_kv_codec_t)7, buf, cap, &len), SITS_ERR_INVALID);
    assert_int_equal(sits_kv_shard_pack(&s.d, s.k, NULL, SITS_KV_CODEC_NONE, buf, cap, &len), SITS_ERR_INVALID);
    sits_kv_shard_desc_t bad = s.d;
    bad.h1 = bad.h0;
    assert_int_equal(sits_kv_shard_pack(&bad, s.k, s.v, SITS_KV_CODEC_NONE, buf, cap, &len), SITS_ERR_INVALID);
    assert_int_equal(sits_kv_shard_size_bound(&bad, SITS_KV_CODEC_NONE), 0);
    bad = s.d;
    bad.dtype = (sits_kv_shard_dtype_t)9;
    assert_int_equal(sits_kv_shard_pack(&bad, s.k, s.v, SITS_KV_CODEC_NONE, buf, cap, &len), SITS_ERR_INVALID);
    bad = s.d;
    bad.t1 = 0x7fffffff;
    bad.l1 = 0x7fffffff;
    assert_int_equal(sits_kv_shard_size_bound(&bad, SITS_KV_CODEC_LZ4), 0);   /* too large, no overflow */
    s.v[17] = NAN;   /* int8 refuses non-finite input; fp32 carries it */
    assert_int_equal(sits_kv_shard_pack(&s.d, s.k, s.v, SITS_KV_CODEC_NONE, buf, cap, &len), SITS_ERR_INVALID);
    s.d.dtype = SITS_KV_SHARD_FP32;
    size_t cap2 = sits_kv_shard_size_bound(&s.d, SITS_KV_CODEC_NONE);
    unsigned char *b2 = malloc(cap2);
    assert_int_equal(sits_kv_shard_pack(&s.d, s.k, s.v, SITS_KV_CODEC_NONE, b2, cap2, &len), SITS_OK);
    sits_log_set_level(SITS_LOG_WARN);
    free(b2); free(buf); free(s.k); free(s.v);
}

/* ---- the codec rule ---- */

static void test_codec_choose(void **state)
{
    sits_kv_codec_perf_t p = { .ratio = 2.0, .compress_gbps = 4.0, .decompress_gbps = 8.0 };
    /* link 1: effective min(4, 8, 2) = 2 > 1.1 -> lz4 */
    assert_int_equal(sits_kv_codec_choose(1.0, &p), SITS_KV_CODEC_LZ4);
    /* link 3.7: min(4, 8, 7.4) = 4 <= 4.07 -> none (within the margin) */
    assert_int_equal(sits_kv_codec_choose(3.7, &p), SITS_KV_CODEC_NONE);
    /* link 3.6: min(4, 8, 7.2) = 4 > 3.96 -> lz4 */
    assert_int_equal(sits_kv_codec_choose(3.6, &p), SITS_KV_CODEC_LZ4);
    /* link 10: compression slower than the link -> none */
    assert_int_equal(sits_kv_codec_choose(10.0, &p), SITS_KV_CODEC_NONE);
    /* decompression the bottleneck: min(4, 1.5, 2) = 1.5 > 1.1 at link 1; at link 1.4 1.5 <= 1.54 -> none */
    p.decompress_gbps = 1.5;
    assert_int_equal(sits_kv_codec_choose(1.0, &p), SITS_KV_CODEC_LZ4);
    assert_int_equal(sits_kv_codec_choose(1.4, &p), SITS_KV_CODEC_NONE);
    /* ratio 1.05: even a slow link gains only 5 % -> none */
    sits_kv_codec_perf_t q = { .ratio = 1.05, .compress_gbps = 100, .decompress_gbps = 100 };
    assert_int_equal(sits_kv_codec_choose(0.1, &q), SITS_KV_CODEC_NONE);
    q.ratio = 1.2;
    assert_int_equal(sits_kv_codec_choose(0.1, &q), SITS_KV_CODEC_LZ4);
    /* nonsense in -> none */
    assert_int_equal(sits_kv_codec_choose(0.0, &p), SITS_KV_CODEC_NONE);
    assert_int_equal(sits_kv_codec_choose(NAN, &p), SITS_KV_CODEC_NONE);
    assert_int_equal(sits_kv_codec_choose(1.0, NULL), SITS_KV_CODEC_NONE);
    q.compress_gbps = NAN;
    assert_int_equal(sits_kv_codec_choose(0.1, &q), SITS_KV_CODEC_NONE);
    q.compress_gbps = 100;
    q.ratio = INFINITY;
    assert_int_equal(sits_kv_codec_choose(0.1, &q), SITS_KV_CODEC_NONE);
}

int main(void)
{
    sits_log_init(-1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32),
        cmocka_unit_test(test_quant_row),
        cmocka_unit_test(test_round_trip_dense),
        cmocka_unit_test(test_multi_frame),
        cmocka_unit_test(test_round_trip_paged),
        cmocka_unit_test(test_truncation_and_corruption),
        cmocka_unit_test(test_header_inconsistencies),
        cmocka_unit_test(test_pack_errors),
        cmocka_unit_test(test_codec_choose),
    };
    return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
