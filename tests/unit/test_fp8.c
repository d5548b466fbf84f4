/* test_fp8.c -- [fp8] the FP8 pieces that need no model run:
 *   - E4M3 encoding (sits_f32_to_f8e4m3): every code round-trips, midpoints round to even,
 *     saturation at 448; and against torch: the committed llama3_fp8 fixture was quantised by
 *     torch (tests/ref/gen_fp8_fixture.py) from llama3's weights -- our per-row scale and bytes
 *     must equal torch's for every linear;
 *   - the --quant parser (groups, ranges, overrides, errors);
 *   - checkpoint validation of F8_E4M3 weights (missing / misshapen / mistyped scales, [fp8 block] block-wise
 *     scale grids that do not fit weight_block_size or have none, bad input_scale: refused with the tensor named,
 *     before anything is loaded);
 *   - the cpu backend's matmul_fp8 on inputs that FP8 represents exactly (it must then equal the
 *     fp32 matmul) and on general inputs (close to it, within the FP8 error). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <jansson.h>

#include "backend/backend.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/precision.h"
#include "model/safetensors.h"
#include "util/dtype.h"
#include "util/status.h"
#include "test_model_common.h"

#ifndef SITS_FIXTURE_DIR
#error "SITS_FIXTURE_DIR must name tests/fixtures/models"
#endif

static void test_e4m3_codes(void **state)
{
    for (int v = 0; v < 256; v++) {
        if ((v & 0x7f) == 0x7f) continue; /* NaN */
        float f = sits_f8e4m3_to_f32((uint8_t)v);
        uint8_t b = sits_f32_to_f8e4m3(f);
        if (v == 0x80) assert_true(b == 0x80 || b == 0); /* -0 */
        else assert_int_equal(b, v);
    }
    for (int v = 0; v < 0x7e; v++) { /* midpoint between neighbours: to the even code */
        float a = sits_f8e4m3_to_f32((uint8_t)v), b = sits_f8e4m3_to_f32((uint8_t)(v + 1));
        assert_int_equal(sits_f32_to_f8e4m3(0.5f * (a + b)), v % 2 == 0 ? v : v + 1);
    }
    assert_int_equal(sits_f32_to_f8e4m3(448.0f), 0x7e);
    assert_int_equal(sits_f32_to_f8e4m3(1e6f), 0x7e);
    assert_int_equal(sits_f32_to_f8e4m3(-500.0f), 0xfe);
    assert_int_equal(sits_f32_to_f8e4m3(1e-9f), 0);
    assert_true(sits_fp8_scale(0.0f) == 1.0f);
    assert_true(sits_fp8_scale(896.0f) == 2.0f);
}

/* Every linear of llama3_fp8 against our quantisation of llama3's bf16 weights. */
static void test_against_torch(void **state)
{
    sits_st_t *src = NULL, *q = NULL;
    assert_int_equal(sits_st_open_dir(SITS_FIXTURE_DIR "/llama3", &src), SITS_OK);
    assert_int_equal(sits_st_open_dir(SITS_FIXTURE_DIR "/llama3_fp8", &q), SITS_OK);
    int n_checked = 0;
    for (size_t i = 0; i < sits_st_count(q); i++) {
        const sits_st_tensor_t *t = sits_st_at(q, i);
        if (t->dtype != SITS_DT_F8_E4M3) continue;
        const sits_st_tensor_t *s = NULL, *w = sits_st_find(src, t->name);
        assert_non_null(w);
        assert_int_equal(sits_model_fp8_scale(NULL, q, t, "llama3_fp8", &s), SITS_OK);
        int64_t rows = t->shape[0], cols = t->shape[1];
        float *row = malloc(sizeof(float) * (size_t)cols);
        uint8_t *mine = malloc((size_t)cols);
        long bad = 0;
        for (int64_t r = 0; r < rows; r++) {
            assert_int_equal(sits_convert_to_f32(w->dtype, (const char *)w->data + (size_t)(r * cols) * 2, row, (size_t)cols), 0);
            float mx = 0, st;
            for (int64_t c = 0; c < cols; c++) mx = fabsf(row[c]) > mx ? fabsf(row[c]) : mx;
            memcpy(&st, (const char *)s->data + 4 * r, 4);
            if (sits_fp8_scale(mx) != st) {
                if (bad++ < 3) printf("  %s row %lld: scale %.9g, torch %.9g\n", t->name, (long long)r, sits_fp8_scale(mx), st);
                continue;
            }
            sits_fp8_quantize_row(mine, row, (size_t)cols, st);
            for (int64_t c = 0; c < cols; c++) {
                uint8_t tb = ((const uint8_t *)t->data)[r * cols + c];
                if (mine[c] != tb && bad++ < 3)
                    printf("  %s[%lld, %lld]: %g / %g -> 0x%02x, torch 0x%02x\n", t->name, (long long)r, (long long)c, row[c],
                           st, mine[c], tb);
            }
        }
        free(row);
        free(mine);
        assert_int_equal(bad, 0);
        n_checked++;
    }
    printf("  %d fp8 tensors of llama3_fp8 equal our quantisation of llama3\n", n_checked);
    assert_int_equal(n_checked, 14);
    sits_st_close(src);
    sits_st_close(q);
}

static void test_plan_parse(void **state)
{
    sits_quant_plan_t p;
    char err[256];
    assert_int_equal(sits_quant_plan_parse("fp8,ffn[0:2]=bf16,lm_head=fp8,o[3]=bf16", 4, &p, err, sizeof err), SITS_OK);
    assert_int_equal(sits_quant_plan_get(&p, 0, SITS_LIN_QKV), SITS_PREC_FP8);
    assert_int_equal(sits_quant_plan_get(&p, 1, SITS_LIN_GATE_UP), SITS_PREC_BF16);
    assert_int_equal(sits_quant_plan_get(&p, 1, SITS_LIN_DOWN), SITS_PREC_BF16);
    assert_int_equal(sits_quant_plan_get(&p, 2, SITS_LIN_DOWN), SITS_PREC_FP8);
    assert_int_equal(sits_quant_plan_get(&p, 3, SITS_LIN_O), SITS_PREC_BF16);
    assert_int_equal(sits_quant_plan_get(&p, 2, SITS_LIN_O), SITS_PREC_FP8);
    assert_int_equal(p.lm_head, SITS_PREC_FP8);
    sits_quant_plan_free(&p);
    assert_int_equal(sits_quant_plan_parse("ffn=fp8,attn=bf16,lm_head=bf16", 2, &p, err, sizeof err), SITS_OK);
    assert_int_equal(sits_quant_plan_get(&p, 1, SITS_LIN_GATE_UP), SITS_PREC_FP8);
    assert_int_equal(sits_quant_plan_get(&p, 1, SITS_LIN_QKV), SITS_PREC_BF16);
    assert_int_equal(p.lm_head, SITS_PREC_BF16);
    sits_quant_plan_free(&p);
    assert_int_equal(sits_quant_plan_parse("mlp[2:]=fp8,down[:1]=fp8", 4, &p, err, sizeof err), SITS_OK);
    assert_int_equal(sits_quant_plan_get(&p, 1, SITS_LIN_GATE_UP), SITS_PREC_AUTO);
    assert_int_equal(sits_quant_plan_get(&p, 3, SITS_LIN_GATE_UP), SITS_PREC_FP8);
    assert_int_equal(sits_quant_plan_get(&p, 0, SITS_LIN_DOWN), SITS_PREC_FP8);
    assert_int_equal(p.lm_head, SITS_PREC_AUTO);
    sits_quant_plan_free(&p);
    assert_int_equal(sits_quant_plan_parse("", 4, &p, err, sizeof err), SITS_OK);
    assert_int_equal(sits_quant_plan_get(&p, 0, SITS_LIN_QKV), SITS_PREC_AUTO);
    sits_quant_plan_free(&p);
    assert_int_equal(sits_quant_plan_parse(NULL, 0, NULL, err, sizeof err), SITS_OK);
    assert_int_equal(sits_quant_plan_parse("ffn[0:99]=fp8", 0, NULL, err, sizeof err), SITS_OK); /* syntax only */
    static const struct { const char *spec, *msg; } bad[] = {
        { "fp4", "unknown precision 'fp4'" },
        { "fnn=fp8", "unknown layer group 'fnn'" },
        { "ffn[0:9]=fp8", "past the model's 4 layers" },
        { "ffn[2:2]=fp8", "empty layer range" },
        { "ffn[a:2]=fp8", "bad layer range" },
        { "ffn[1:2=fp8", "bad layer range" },
        { "lm_head[0]=fp8", "lm_head takes no layer range" },
        { "fp8,", "ends with a comma" },
        { "ffn=", "unknown precision ''" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        assert_int_equal(sits_quant_plan_parse(bad[i].spec, 4, &p, err, sizeof err), SITS_ERR_INVALID);
        printf("  '%s': %s\n", bad[i].spec, err);
        assert_non_null(strstr(err, bad[i].msg));
    }
}

/* ---- checkpoint validation: a small model, every tensor F32 except layer 0's q_proj in F8_E4M3 ---- */

static sits_model_config_t small_cfg(void)
{
    static const char *j =
        "{\"model_type\": \"llama\", \"vocab_size\": 16, \"hidden_size\": 8, \"intermediate_size\": 12,"
        " \"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"num_key_value_heads\": 1,"
        " \"quantization_config\": {\"quant_method\": \"fp8\", \"activation_scheme\": \"dynamic\"}}";
    sits_model_config_t c;
    assert_int_equal(sits_model_config_parse(j, strlen(j), "small", &c), SITS_OK);
    assert_string_equal(c.quant_method, "fp8");
    return c;
}

#define QNAME "model.layers.0.self_attn.q_proj.weight"

static int g_block[2];   /* [fp8 block] check_with's weight_block_size (0: none) */

/* extra: a JSON object of extra tensors {name: {dtype, shape}} (data appended); scale_shape NULL: none. */
static sits_status_t check_with(const char *scale_dtype, const char *scale_shape, const char *extra_name,
                                const char *extra_dtype, const char *extra_shape, char **log_p)
{
    sits_model_config_t cfg = small_cfg();
    cfg.fp8_block[0] = g_block[0];
    cfg.fp8_block[1] = g_block[1];
    json_t *h = json_object();
    size_t off = 0;
    char name[128];
    for (int k = 0; k < SITS_W_KIND_COUNT; k++) {
        if (!sits_wkind_present(&cfg, (sits_wkind_t)k)) continue;
        int nl = sits_wkind_per_layer((sits_wkind_t)k) ? cfg.n_layers : 1;
        for (int l = 0; l < nl; l++) {
            sits_wkind_name((sits_wkind_t)k, l, name, sizeof name);
            int64_t s[2];
            int nd = sits_wkind_shape(&cfg, (sits_wkind_t)k, s);
            int f8 = !strcmp(name, QNAME);
            size_t numel = nd == 2 ? (size_t)(s[0] * s[1]) : (size_t)s[0];
            json_t *shape = nd == 2 ? json_pack("[I,I]", (json_int_t)s[0], (json_int_t)s[1]) : json_pack("[I]", (json_int_t)s[0]);
            size_t bytes = numel * (f8 ? 1 : 4);
            json_object_set_new(h, name, json_pack("{s:s, s:o, s:[I,I]}", "dtype", f8 ? "F8_E4M3" : "F32", "shape", shape,
                                                   "data_offsets", (json_int_t)off, (json_int_t)(off + bytes)));
            off += bytes;
        }
    }
    const char *names[2] = { scale_shape ? QNAME "_scale" : NULL, extra_name };
    const char *dts[2] = { scale_dtype, extra_dtype }, *shapes[2] = { scale_shape, extra_shape };
    for (int i = 0; i < 2; i++) {
        if (!names[i]) continue;
        json_error_t je;
        json_t *shape = json_loads(shapes[i], 0, &je);
        assert_non_null(shape);
        size_t numel = 1;
        for (size_t d = 0; d < json_array_size(shape); d++) numel *= (size_t)json_integer_value(json_array_get(shape, d));
        size_t bytes = numel * sits_dtype_size((sits_dtype_t)sits_dtype_from_name(dts[i]));
        json_object_set_new(h, names[i], json_pack("{s:s, s:o, s:[I,I]}", "dtype", dts[i], "shape", shape, "data_offsets",
                                                   (json_int_t)off, (json_int_t)(off + bytes)));
        off += bytes;
    }
    char *text = json_dumps(h, JSON_COMPACT);
    json_decref(h);
    size_t len = 0;
    unsigned char *img = tm_st_image(text, off, UINT64_MAX, &len);
    free(text);
    sits_st_t *st = NULL;
    assert_int_equal(sits_st_parse(img, len, "mem.safetensors", &st), SITS_OK);
    tm_capture_t cap;
    tm_capture_begin(&cap);
    sits_status_t s = sits_model_check_tensors(&cfg, st, "mem-model");
    *log_p = tm_capture_end(&cap);
    sits_st_close(st);
    free(img);
    return s;
}

static void test_checkpoint_validation(void **state)
{
    char *log;
    /* q_proj is [8, 8]. accepted: per-channel [8, 1] or [8], per-tensor [] or [1]; F32 / BF16; a scalar input_scale */
    assert_int_equal(check_with("F32", "[8, 1]", NULL, NULL, NULL, &log), SITS_OK);
    free(log);
    assert_int_equal(check_with("BF16", "[8]", NULL, NULL, NULL, &log), SITS_OK);
    free(log);
    assert_int_equal(check_with("F32", "[]", NULL, NULL, NULL, &log), SITS_OK);
    free(log);
    assert_int_equal(check_with("F32", "[1]", "model.layers.0.self_attn.q_proj.input_scale", "F32", "[]", &log), SITS_OK);
    free(log);
    /* refused, naming the file and the tensor */
    assert_int_equal(check_with(NULL, NULL, NULL, NULL, NULL, &log), SITS_ERR_NOT_FOUND);
    assert_non_null(strstr(log, "tensor " QNAME " (mem.safetensors): F8_E4M3 weight without its scale tensor " QNAME "_scale"));
    free(log);
    assert_int_equal(check_with("F32", "[9, 1]", NULL, NULL, NULL, &log), SITS_ERR_FORMAT);
    assert_non_null(strstr(log, "tensor " QNAME "_scale (mem.safetensors): shape [9, 1]"));
    free(log);
    assert_int_equal(check_with("F32", "[8, 2]", NULL, NULL, NULL, &log), SITS_ERR_FORMAT);
    assert_non_null(strstr(log, QNAME "_scale (mem.safetensors): shape [8, 2]"));
    free(log);
    assert_int_equal(check_with("I32", "[8, 1]", NULL, NULL, NULL, &log), SITS_ERR_FORMAT);
    assert_non_null(strstr(log, QNAME "_scale (mem.safetensors): dtype I32"));
    free(log);
    /* [fp8 block] weight_scale_inv: one value is per tensor; a grid needs weight_block_size, and then fits it */
    assert_int_equal(check_with(NULL, NULL, QNAME "_scale_inv", "F32", "[1]", &log), SITS_OK);
    free(log);
    assert_int_equal(check_with(NULL, NULL, QNAME "_scale_inv", "F32", "[2, 2]", &log), SITS_ERR_FORMAT);
    assert_non_null(strstr(log, QNAME "_scale_inv (mem.safetensors): shape [2, 2]"));
    assert_non_null(strstr(log, "block-wise scales need quantization_config.weight_block_size"));
    free(log);
    g_block[0] = 4;
    g_block[1] = 3;   /* q_proj [8, 8]: blocks [4, 3] make a [2, 3] grid (the last column of blocks 2 wide) */
    assert_int_equal(check_with(NULL, NULL, QNAME "_scale_inv", "F32", "[2, 3]", &log), SITS_OK);
    free(log);
    assert_int_equal(check_with("F32", "[2, 3]", NULL, NULL, NULL, &log), SITS_OK);   /* compressed-tensors' name */
    free(log);
    assert_int_equal(check_with(NULL, NULL, QNAME "_scale_inv", "F32", "[2, 2]", &log), SITS_ERR_FORMAT);
    assert_non_null(strstr(log, "shape [2, 2]; blocks of [4, 3] over [8, 8] need [2, 3]"));
    free(log);
    assert_int_equal(check_with(NULL, NULL, NULL, NULL, NULL, &log), SITS_ERR_NOT_FOUND);
    assert_non_null(strstr(log, "(or weight_scale_inv)"));
    free(log);
    g_block[0] = g_block[1] = 0;
    assert_int_equal(check_with("F32", "[8, 1]", "model.layers.0.self_attn.q_proj.input_scale", "F32", "[4]", &log),
                     SITS_ERR_FORMAT);
    assert_non_null(strstr(log, "q_proj.input_scale (mem.safetensors): shape [4]"));
    free(log);
}

static void test_quant_config(void **state)
{
    sits_model_config_t c;
    static const struct { const char *qc; sits_status_t want; const char *msg; } cases[] = {
        { "{\"quant_method\": \"compressed-tensors\", \"config_groups\": {\"g\": {\"weights\": {\"num_bits\": 8, \"type\": "
          "\"float\", \"strategy\": \"channel\"}}}}", SITS_OK, NULL },
        { "{\"quant_method\": \"compressed-tensors\", \"config_groups\": {\"g\": {\"weights\": {\"num_bits\": 4, \"type\": "
          "\"int\", \"strategy\": \"group\"}}}}", SITS_ERR_UNSUPPORTED, "format \"(none)\" is not supported for int weights" },
        { "{\"quant_method\": \"fp8\", \"weight_block_size\": [128, 128]}", SITS_OK, NULL },   /* [fp8 block] */
        { "{\"quant_method\": \"fp8\", \"weight_block_size\": [128]}", SITS_ERR_FORMAT, "weight_block_size: expected [rows, cols]" },
        { "{\"quant_method\": \"compressed-tensors\", \"config_groups\": {\"g\": {\"weights\": {\"num_bits\": 8, \"type\": "
          "\"float\", \"strategy\": \"block\", \"block_structure\": [128, 128]}}}}", SITS_OK, NULL },
        { "{\"quant_method\": \"compressed-tensors\", \"config_groups\": {\"g\": {\"weights\": {\"num_bits\": 8, \"type\": "
          "\"float\", \"strategy\": \"block\"}}}}", SITS_ERR_FORMAT, "block_structure: missing for strategy block" },
        { "{\"quant_method\": \"bitsandbytes\"}", SITS_ERR_UNSUPPORTED, "quant_method \"bitsandbytes\" is not supported" },
        /* [int4] */
        { "{\"quant_method\": \"gptq\"}", SITS_ERR_UNSUPPORTED, "gptq checkpoints of 0 bits are not supported" },
        { "{\"quant_method\": \"gptq\", \"bits\": 4, \"group_size\": 128, \"checkpoint_format\": \"gptq_v2\"}", SITS_OK, NULL },
        { "{\"quant_method\": \"awq\", \"bits\": 4, \"group_size\": 128, \"zero_point\": false}", SITS_ERR_UNSUPPORTED,
          "AWQ without zero points" },
        { "{\"quant_method\": \"compressed-tensors\", \"format\": \"pack-quantized\", \"config_groups\": {\"g\": {\"weights\": "
          "{\"num_bits\": 4, \"type\": \"int\", \"strategy\": \"tensor\"}}}}", SITS_ERR_UNSUPPORTED, "int4 strategy \"tensor\"" },
        { "[1]", SITS_ERR_FORMAT, "expected an object" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char j[1024];
        snprintf(j, sizeof j, "{\"model_type\": \"llama\", \"vocab_size\": 16, \"hidden_size\": 8, \"intermediate_size\": 12,"
                 " \"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"quantization_config\": %s}", cases[i].qc);
        tm_capture_t cap;
        tm_capture_begin(&cap);
        sits_status_t s = sits_model_config_parse(j, strlen(j), "qcfg", &c);
        char *log = tm_capture_end(&cap);
        assert_int_equal(s, cases[i].want);
        if (cases[i].msg) assert_non_null(strstr(log, cases[i].msg));
        if (s == SITS_OK) assert_int_equal(c.fp8_block[0] * 1000 + c.fp8_block[1], strstr(cases[i].qc, "[128, 128]") ? 128128 : 0);
        free(log);
    }
}

/* ---- cpu matmul_fp8 ---- */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static double urand(void)
{
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(g_rng >> 11) / 9007199254740992.0;
}

static void test_cpu_matmul_fp8(void **state)
{
    sits_backend_t *be = NULL;
    assert_int_equal(sits_backend_cpu_create(NULL, &be), SITS_OK);
    enum { N = 5, IN = 48, OUT = 32 };
    static float x[N * IN], w[OUT * IN], ws[OUT], y8[N * OUT], y32[N * OUT], bias[OUT];
    static uint8_t wq[OUT * IN];
    double ref[N * OUT];
    for (int pass = 0; pass < 2; pass++) {
        /* pass 0: rows of e4m3 codes times powers of two, each row holding a +-448 (exact in FP8);
         * pass 1: uniform values (the FP8 error shows, bounded) */
        for (int t = 0; t < N; t++)
            for (int k = 0; k < IN; k++) {
                float v = sits_f8e4m3_to_f32((uint8_t)(urand() * 126)) * (urand() < 0.5 ? -1.f : 1.f);
                x[t * IN + k] = pass ? (float)(urand() * 2 - 1) : (k == t ? 448.0f : v) * ldexpf(1.0f, t - 3);
            }
        for (int o = 0; o < OUT; o++) {
            float mx = 0;
            for (int k = 0; k < IN; k++) {
                float v = sits_f8e4m3_to_f32((uint8_t)(urand() * 126)) * (urand() < 0.5 ? -1.f : 1.f);
                w[o * IN + k] = pass ? (float)(urand() * 2 - 1) : (k == o % IN ? -448.0f : v) * ldexpf(1.0f, -(o % 7));
                mx = fabsf(w[o * IN + k]) > mx ? fabsf(w[o * IN + k]) : mx;
            }
            ws[o] = sits_fp8_scale(mx);
            sits_fp8_quantize_row(wq + o * IN, w + o * IN, IN, ws[o]);
            bias[o] = (float)(urand() - 0.5);
        }
        assert_int_equal(be->ops->matmul_fp8(be, y8, 0, x, wq, ws, bias, N, IN, OUT), SITS_OK);
        assert_int_equal(be->ops->matmul(be, y32, x, w, bias, N, IN, OUT), SITS_OK);
        double max_abs = 0;
        for (int i = 0; i < N * OUT; i++) { ref[i] = y32[i]; max_abs = fabs(ref[i]) > max_abs ? fabs(ref[i]) : max_abs; }
        /* exact inputs: only the fp32 summation order differs; general: two e4m3 roundings (up to 2^-4
         * relative each, random signs) per product: measured 3.2% of the largest output, bound 6% */
        size_t bad = pass ? tm_compare("fp8 vs fp32 (general inputs)", y8, ref, N * OUT, 0.06 * max_abs, 0)
                          : tm_compare("fp8 vs fp32 (exact inputs)", y8, ref, N * OUT, 1e-6 * max_abs, 1e-6);
        assert_int_equal(bad, 0);
    }
    sits_backend_destroy(be);
}

/* [fp8: fused activation quantisation] the cpu twins: add_rmsnorm_f32res_fp8 / silu_mul_fp8 give the
 * plain ops' out, xq / xs are util/dtype.h's quantisation of out (per row, one all-zero row: scale
 * 1), and matmul_fp8q on them equals matmul_fp8 on out, bit for bit; with out NULL the same xq / xs. */
static void test_cpu_fused_quant(void **state)
{
    sits_backend_t *be = NULL;
    assert_int_equal(sits_backend_cpu_create(NULL, &be), SITS_OK);
    const sits_backend_ops_t *op = be->ops;
    assert_non_null(op->matmul_fp8q);
    assert_non_null(op->add_rmsnorm_f32res_fp8);
    assert_non_null(op->silu_mul_fp8);
    enum { N = 4, D = 64, OUT = 32 };
    static float x[N * 2 * D], res1[N * D], res2[N * D], nw[D], o1[N * D], o2[N * D], xs[N], ws[OUT], y1[N * OUT], y2[N * OUT];
    static float res0[N * D], res3[N * D], xs3[N];
    static uint8_t xq[N * D], wq[OUT * D], xq3[N * D];
    /* row 2 is zero in both views of x: [N, D] (add_rmsnorm) and [N, 2 * D] (silu_mul) */
    for (int i = 0; i < N * 2 * D; i++) x[i] = (i / (2 * D)) == 2 || (i / D) == 2 ? 0.0f : (float)(urand() * 6 - 3);
    for (int i = 0; i < N * D; i++) res0[i] = res1[i] = res2[i] = (i / D) == 2 ? 0.0f : (float)(urand() * 2 - 1);
    for (int k = 0; k < D; k++) nw[k] = (float)(0.5 + urand());
    for (int o = 0; o < OUT; o++) {
        float row[D], mx = 0;
        for (int k = 0; k < D; k++) {
            row[k] = (float)(urand() * 0.2 - 0.1);
            mx = fabsf(row[k]) > mx ? fabsf(row[k]) : mx;
        }
        ws[o] = sits_fp8_scale(mx);
        sits_fp8_quantize_row(wq + o * D, row, D, ws[o]);
    }
    for (int which = 0; which < 2; which++) {
        if (which == 0) {
            assert_int_equal(op->add_rmsnorm_f32res(be, o1, res1, x, nw, N, D, 1e-5f), SITS_OK);
            assert_int_equal(op->add_rmsnorm_f32res_fp8(be, o2, xq, xs, res2, x, nw, N, D, 1e-5f), SITS_OK);
            assert_memory_equal(res1, res2, sizeof res1);
        } else {
            assert_int_equal(op->silu_mul(be, o1, x, N, D), SITS_OK);
            assert_int_equal(op->silu_mul_fp8(be, o2, xq, xs, x, N, D), SITS_OK);
        }
        assert_memory_equal(o1, o2, sizeof o1);
        for (int t = 0; t < N; t++) {
            float mx = 0;
            for (int k = 0; k < D; k++) mx = fabsf(o2[t * D + k]) > mx ? fabsf(o2[t * D + k]) : mx;
            assert_true(xs[t] == sits_fp8_scale(mx));
            if (t == 2) assert_true(xs[t] == 1.0f);
            for (int k = 0; k < D; k++) assert_int_equal(xq[t * D + k], sits_f32_to_f8e4m3(o2[t * D + k] / xs[t]));
        }
        assert_int_equal(op->matmul_fp8(be, y1, 0, o2, wq, ws, NULL, N, D, OUT), SITS_OK);
        assert_int_equal(op->matmul_fp8q(be, y2, 0, xq, xs, wq, ws, NULL, N, D, OUT), SITS_OK);
        assert_memory_equal(y1, y2, sizeof y1);
        /* out NULL (the engine's fused path, backend.h): the same xq / xs bytes, the same residual */
        memset(xq3, 0xa5, sizeof xq3);
        memset(xs3, 0, sizeof xs3);
        if (which == 0) {
            memcpy(res3, res0, sizeof res3);
            assert_int_equal(op->add_rmsnorm_f32res_fp8(be, NULL, xq3, xs3, res3, x, nw, N, D, 1e-5f), SITS_OK);
            assert_memory_equal(res3, res2, sizeof res3);
        } else {
            assert_int_equal(op->silu_mul_fp8(be, NULL, xq3, xs3, x, N, D), SITS_OK);
        }
        assert_memory_equal(xq3, xq, sizeof xq);
        assert_memory_equal(xs3, xs, sizeof xs);
    }
    sits_backend_destroy(be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_e4m3_codes),
        cmocka_unit_test(test_against_torch),
        cmocka_unit_test(test_plan_parse),
        cmocka_unit_test(test_checkpoint_validation),
        cmocka_unit_test(test_quant_config),
        cmocka_unit_test(test_cpu_matmul_fp8),
        cmocka_unit_test(test_cpu_fused_quant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
