/* test_int4.c -- [int4] unpacking of the INT4 checkpoint variants the model fixtures do not cover,
 * against the formats' own dequantisation:
 *   tests/unit/data/int4/<variant>.safetensors holds one 16 x 64 linear (model.layers.0.mlp.down_proj)
 *   packed as the format publishes it, and ".deq" = its weights dequantised by the format's reference
 *   (GPTQ's kernels' formula, the compressed-tensors package; tests/ref/gen_int4_fixtures.py --units);
 *   <variant>.json its quantization_config. sits_w4_src_open + sits_w4_src_rows_f32 must give the
 *   same fp32 values bit for bit (the product (q - z) * s is one fp32 rounding on both sides), and
 *   the packed-layout round trip (sits_w4_quantize_row then the cpu backend's matmul_w4) must give
 *   the dequantised row's dot products.
 * [w8a16] The same for the 8-bit GPTQ / compressed-tensors variants (dequantised at load).
 * Also refusals: a config that does not match the tensors (group size, symmetric with a zero point), bits
 * other than 4 / 8 (AWQ: 4). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "model/config.h"
#include "model/int4.h"
#include "model/safetensors.h"
#include "util/status.h"
#include "test_model_common.h"

#ifndef SITS_INT4_DATA_DIR
#error "SITS_INT4_DATA_DIR must name tests/unit/data/int4"
#endif

#define BASE "model.layers.0.mlp.down_proj"
#define OUT 16
#define IN 64

/* cfg from a model around the variant's quantization_config, with quant_override (if set) replacing it */
static sits_status_t load_cfg(const char *variant, const char *quant_override, sits_model_config_t *cfg, char **log_p)
{
    char path[1024], *j = malloc(8192);
    snprintf(path, sizeof path, "%s/%s.json", SITS_INT4_DATA_DIR, variant);
    size_t len = 0;
    char *q = quant_override ? strdup(quant_override) : tm_read_file(path, &len);
    assert_non_null(q);
    snprintf(j, 8192, "{\"model_type\": \"llama\", \"vocab_size\": 16, \"hidden_size\": 16, \"intermediate_size\": 64,"
             " \"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"quantization_config\": %s}", q);
    tm_capture_t cap;
    tm_capture_begin(&cap);
    sits_status_t st = sits_model_config_parse(j, strlen(j), variant, cfg);
    char *log = tm_capture_end(&cap);
    if (log_p) *log_p = log;
    else free(log);
    free(q);
    free(j);
    return st;
}

static sits_st_t *open_st(const char *variant)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.safetensors", SITS_INT4_DATA_DIR, variant);
    sits_st_t *st = NULL;
    assert_int_equal(sits_st_open_file(path, &st), SITS_OK);
    return st;
}

static void check_variant(const char *variant, int want_fmt, int want_gidx)
{
    sits_model_config_t cfg;
    assert_int_equal(load_cfg(variant, NULL, &cfg, NULL), SITS_OK);
    assert_int_equal(cfg.w4.fmt, want_fmt);
    sits_st_t *st = open_st(variant);
    sits_w4_src_t src;
    assert_int_equal(sits_w4_src_open(&cfg, st, BASE, OUT, IN, variant, &src), SITS_OK);
    assert_int_equal(src.gidx != NULL, want_gidx);   /* a trivial g_idx is dropped */
    const sits_st_tensor_t *deq = sits_st_find(st, BASE ".deq");
    assert_non_null(deq);
    assert_int_equal(deq->dtype, SITS_DT_F32);
    float got[OUT * IN], ref[OUT * IN];
    memcpy(ref, deq->data, sizeof ref);
    sits_w4_src_rows_f32(&src, 0, OUT, 0, IN, got);
    int bad = 0;
    for (int i = 0; i < OUT * IN; i++)
        if (got[i] != ref[i]) {
            if (bad++ < 5) fprintf(stderr, "%s: [%d, %d]: ours %.9g, reference %.9g\n", variant, i / IN, i % IN, got[i], ref[i]);
        }
    printf("%s: %d of %d weights differ from the format's dequantisation\n", variant, bad, OUT * IN);
    assert_int_equal(bad, 0);
    /* a column slice (a row-parallel rank's inputs) reads the same values */
    float half[OUT * IN / 2];
    sits_w4_src_rows_f32(&src, 3, 5, IN / 2, IN / 2, half);
    for (int r = 0; r < 5; r++)
        for (int k = 0; k < IN / 2; k++) assert_true(half[r * (IN / 2) + k] == ref[(3 + r) * IN + IN / 2 + k]);
    sits_st_close(st);
}

static void test_gptq_v2_sym_g32(void **state) { check_variant("gptq_v2_sym_g32", SITS_W4_GPTQ, 0); }
static void test_gptq_v2_asym_g16(void **state) { check_variant("gptq_v2_asym_g16", SITS_W4_GPTQ, 0); }
static void test_gptq_v1_sym_channel(void **state) { check_variant("gptq_v1_sym_channel", SITS_W4_GPTQ, 0); }
static void test_ct_asym_g32(void **state) { check_variant("ct_asym_g32", SITS_W4_CT, 0); }
static void test_ct_sym_channel(void **state) { check_variant("ct_sym_channel", SITS_W4_CT, 0); }
static void test_ct_asym_channel(void **state) { check_variant("ct_asym_channel", SITS_W4_CT, 0); }
/* [w8a16] the 8-bit variants (4 values an int32): the same unpacking, dequantised at load */
static void test_gptq8_v1_asym_g32(void **state) { check_variant("gptq8_v1_asym_g32", SITS_W4_GPTQ, 0); }
static void test_gptq8_v2_sym_channel(void **state) { check_variant("gptq8_v2_sym_channel", SITS_W4_GPTQ, 0); }
static void test_ct8_sym_g32(void **state) { check_variant("ct8_sym_g32", SITS_W4_CT, 0); }
static void test_ct8_asym_channel(void **state) { check_variant("ct8_asym_channel", SITS_W4_CT, 0); }

/* bits other than 4 and 8 (and AWQ at 8) are refused with the key */
static void test_bits_refused(void **state)
{
    static const struct { const char *q, *msg; } cases[] = {
        { "{\"quant_method\": \"gptq\", \"bits\": 3, \"group_size\": 32}", "quantization_config.bits 3: gptq checkpoints of 3 bits are not supported (4 or 8)" },
        { "{\"quant_method\": \"awq\", \"bits\": 8, \"group_size\": 32, \"version\": \"gemm\"}",
          "quantization_config.bits 8: awq checkpoints of 8 bits are not supported (4 only)" },
        { "{\"quant_method\": \"compressed-tensors\", \"format\": \"pack-quantized\", \"config_groups\": {\"g\": {\"weights\": "
          "{\"num_bits\": 2, \"type\": \"int\", \"symmetric\": true, \"strategy\": \"channel\"}}}}",
          "2-bit int weights are not supported (4 or 8 bits)" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sits_model_config_t cfg;
        char *log = NULL;
        assert_int_equal(load_cfg("gptq8_v1_asym_g32", cases[i].q, &cfg, &log), SITS_ERR_UNSUPPORTED);
        if (!strstr(log, cases[i].msg)) fprintf(stderr, "case %zu: log was: %s\n", i, log);
        assert_non_null(strstr(log, cases[i].msg));
        free(log);
    }
    sits_model_config_t cfg;
    assert_int_equal(load_cfg("gptq8_v1_asym_g32", NULL, &cfg, NULL), SITS_OK);
    assert_int_equal(cfg.w4.bits, 8);
    assert_int_equal(load_cfg("gptq_v2_sym_g32", NULL, &cfg, NULL), SITS_OK);
    assert_int_equal(cfg.w4.bits, 4);
}

/* config and tensors disagree: refused with the tensor, its file and the reason */
static void test_mismatch(void **state)
{
    sits_model_config_t cfg;
    char *log = NULL;
    sits_w4_src_t src;
    /* gptq v2 group 16 data read with group 32 */
    assert_int_equal(load_cfg("gptq_v2_asym_g16", "{\"quant_method\": \"gptq\", \"bits\": 4, \"group_size\": 32, "
                              "\"checkpoint_format\": \"gptq_v2\", \"sym\": false}", &cfg, NULL), SITS_OK);
    sits_st_t *st = open_st("gptq_v2_asym_g16");
    tm_capture_t cap;
    tm_capture_begin(&cap);
    assert_int_equal(sits_w4_src_open(&cfg, st, BASE, OUT, IN, "unit", &src), SITS_ERR_FORMAT);
    log = tm_capture_end(&cap);
    assert_non_null(strstr(log, "tensor " BASE ".qzeros ("));
    assert_non_null(strstr(log, "gptq_v2_asym_g16.safetensors): shape [4, 2], expected [2, 2]"));
    free(log);
    sits_st_close(st);
    /* an asymmetric compressed-tensors linear under a symmetric config */
    assert_int_equal(load_cfg("ct_asym_g32", "{\"quant_method\": \"compressed-tensors\", \"format\": \"pack-quantized\", "
                              "\"config_groups\": {\"g\": {\"weights\": {\"num_bits\": 4, \"type\": \"int\", \"symmetric\": true, "
                              "\"strategy\": \"group\", \"group_size\": 32}}}}", &cfg, NULL), SITS_OK);
    st = open_st("ct_asym_g32");
    tm_capture_begin(&cap);
    assert_int_equal(sits_w4_src_open(&cfg, st, BASE, OUT, IN, "unit", &src), SITS_ERR_FORMAT);
    log = tm_capture_end(&cap);
    assert_non_null(strstr(log, "a zero point in a symmetric checkpoint"));
    free(log);
    sits_st_close(st);
}

/* the packed layout end to end on the cpu backend: quantise rows, run matmul_w4 (with and without a
 * bias, act-order g_idx), compare with dot products of the dequantised rows computed here */
static void test_quantize_matmul(void **state)
{
    enum { N = 3, K = 256, O = 5, G = 128 };
    static float w[O * K], x[N * K], deq[O * K], y[N * O], bias[O];
    static uint8_t q[O * K / 2];
    static float sc[O * (K / G)], zr[O * (K / G)];
    unsigned s = 12345;
    for (int i = 0; i < O * K; i++) w[i] = (float)((s = s * 1103515245u + 12345u) >> 9) / (float)(1 << 23) - 0.5f;
    for (int i = 0; i < N * K; i++) x[i] = (float)((s = s * 1103515245u + 12345u) >> 9) / (float)(1 << 23) - 0.5f;
    for (int o = 0; o < O; o++) bias[o] = 0.25f * (float)o;
    for (int o = 0; o < O; o++) {
        sits_w4_quantize_row(w + o * K, K, G, q + o * (K / 2), sc + o * (K / G), zr + o * (K / G));
        for (int k = 0; k < K; k++) {
            int u = k & 1 ? q[o * (K / 2) + k / 2] >> 4 : q[o * (K / 2) + k / 2] & 15;
            float z = zr[o * (K / G) + k / G], d = sc[o * (K / G) + k / G];
            assert_true(z >= 0.0f && z <= 15.0f && z == rintf(z));
            deq[o * K + k] = ((float)u - z) * d;
        }
    }
    sits_backend_t *be = NULL;
    sits_backend_params_t p = { .threads = 1 };
    assert_int_equal(sits_backend_cpu_create(&p, &be), SITS_OK);
    for (int variant = 0; variant < 2; variant++) {
        int32_t gidx[K];
        for (int k = 0; k < K; k++) gidx[k] = k / G;
        sits_w4_t wt = { q, sc, zr, variant ? gidx : NULL, G, K / G };
        assert_int_equal(be->ops->matmul_w4(be, y, x, &wt, variant ? bias : NULL, N, K, O), SITS_OK);
        for (int t = 0; t < N; t++)
            for (int o = 0; o < O; o++) {
                double ref = variant ? bias[o] : 0.0;
                for (int k = 0; k < K; k++) ref += (double)x[t * K + k] * deq[o * K + k];
                assert_true(fabs(y[t * O + o] - ref) <= 1e-5 + 1e-5 * fabs(ref));
            }
    }
    sits_backend_destroy(be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gptq_v2_sym_g32),
        cmocka_unit_test(test_gptq_v2_asym_g16),
        cmocka_unit_test(test_gptq_v1_sym_channel),
        cmocka_unit_test(test_ct_asym_g32),
        cmocka_unit_test(test_ct_sym_channel),
        cmocka_unit_test(test_ct_asym_channel),
        cmocka_unit_test(test_gptq8_v1_asym_g32),
        cmocka_unit_test(test_gptq8_v2_sym_channel),
        cmocka_unit_test(test_ct8_sym_g32),
        cmocka_unit_test(test_ct8_asym_channel),
        cmocka_unit_test(test_bits_refused),
        cmocka_unit_test(test_mismatch),
        cmocka_unit_test(test_quantize_matmul),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
