/* test_model_layout.c -- tensor names, shapes and presence per config, and
 * sits_model_check_tensors on the committed HF checkpoints (tiny_llama sharded, tiny_qwen2 tied
 * with q/k/v bias) and on in-memory checkpoints with one tensor missing, misshapen or of the
 * wrong dtype. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <jansson.h>

#include "model/config.h"
#include "model/layout.h"
#include "model/safetensors.h"
#include "util/status.h"
#include "test_model_common.h"

#define WHAT "mem-model"

/* A small GQA config: V 16, H 8, I 12, 2 layers, 2 heads of 4, 1 KV head. */
static sits_model_config_t small_cfg(void)
{
    static const char *j =
        "{\"model_type\": \"llama\", \"vocab_size\": 16, \"hidden_size\": 8, \"intermediate_size\": 12,"
        " \"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"num_key_value_heads\": 1}";
    sits_model_config_t c;
    assert_int_equal(sits_model_config_parse(j, strlen(j), "small", &c), SITS_OK);
    return c;
}

static void test_names_and_shapes(void **state)
{
    sits_model_config_t c = small_cfg();
    char buf[128];
    int64_t s[2];
    sits_wkind_name(SITS_W_Q, 1, buf, sizeof buf);
    assert_string_equal(buf, "model.layers.1.self_attn.q_proj.weight");
    sits_wkind_name(SITS_W_FFN_NORM, 0, buf, sizeof buf);
    assert_string_equal(buf, "model.layers.0.post_attention_layernorm.weight");
    sits_wkind_name(SITS_W_DOWN_BIAS, 3, buf, sizeof buf);
    assert_string_equal(buf, "model.layers.3.mlp.down_proj.bias");
    sits_wkind_name(SITS_W_EMBED, 7, buf, sizeof buf);
    assert_string_equal(buf, "model.embed_tokens.weight");
    sits_wkind_name(SITS_W_LM_HEAD, 0, buf, sizeof buf);
    assert_string_equal(buf, "lm_head.weight");
    sits_wkind_name(SITS_W_FINAL_NORM, 0, buf, sizeof buf);
    assert_string_equal(buf, "model.norm.weight");

    assert_int_equal(sits_wkind_per_layer(SITS_W_EMBED), 0);
    assert_int_equal(sits_wkind_per_layer(SITS_W_LM_HEAD), 0);
    assert_int_equal(sits_wkind_per_layer(SITS_W_FINAL_NORM), 0);
    assert_int_equal(sits_wkind_per_layer(SITS_W_K), 1);
    assert_int_equal(sits_wkind_per_layer(SITS_W_DOWN_BIAS), 1);

    assert_int_equal(sits_wkind_shape(&c, SITS_W_EMBED, s), 2);
    assert_true(s[0] == 16 && s[1] == 8);
    assert_int_equal(sits_wkind_shape(&c, SITS_W_Q, s), 2);
    assert_true(s[0] == 8 && s[1] == 8);
    assert_int_equal(sits_wkind_shape(&c, SITS_W_K, s), 2);
    assert_true(s[0] == 4 && s[1] == 8);
    assert_int_equal(sits_wkind_shape(&c, SITS_W_O, s), 2);
    assert_true(s[0] == 8 && s[1] == 8);
    assert_int_equal(sits_wkind_shape(&c, SITS_W_V_BIAS, s), 1);
    assert_true(s[0] == 4);
    assert_int_equal(sits_wkind_shape(&c, SITS_W_GATE, s), 2);
    assert_true(s[0] == 12 && s[1] == 8);
    assert_int_equal(sits_wkind_shape(&c, SITS_W_DOWN, s), 2);
    assert_true(s[0] == 8 && s[1] == 12);
    assert_int_equal(sits_wkind_shape(&c, SITS_W_UP_BIAS, s), 1);
    assert_true(s[0] == 12);
    assert_int_equal(sits_wkind_shape(&c, SITS_W_ATTN_NORM, s), 1);
    assert_true(s[0] == 8);

    /* head_dim explicit and != H/nh (Mistral-Nemo style): q is [nh*hd, H], o is [H, nh*hd] */
    c.head_dim = 8;
    assert_int_equal(sits_wkind_shape(&c, SITS_W_Q, s), 2);
    assert_true(s[0] == 16 && s[1] == 8);
    assert_int_equal(sits_wkind_shape(&c, SITS_W_O, s), 2);
    assert_true(s[0] == 8 && s[1] == 16);

    /* presence follows the config */
    c = small_cfg();
    assert_true(sits_wkind_present(&c, SITS_W_LM_HEAD));
    assert_false(sits_wkind_present(&c, SITS_W_Q_BIAS));
    assert_false(sits_wkind_present(&c, SITS_W_O_BIAS));
    assert_false(sits_wkind_present(&c, SITS_W_GATE_BIAS));
    assert_true(sits_wkind_present(&c, SITS_W_DOWN));
    c.tie_word_embeddings = 1;
    c.qkv_bias = 1;
    c.mlp_bias = 1;
    assert_false(sits_wkind_present(&c, SITS_W_LM_HEAD));
    assert_true(sits_wkind_present(&c, SITS_W_K_BIAS));
    assert_false(sits_wkind_present(&c, SITS_W_O_BIAS));
    assert_true(sits_wkind_present(&c, SITS_W_DOWN_BIAS));
}

static void check_dir(const char *dir, sits_arch_t arch, int tied, int qkv_bias)
{
    sits_model_config_t c;
    sits_st_t *st = NULL;
    assert_int_equal(sits_model_config_load(dir, &c), SITS_OK);
    assert_int_equal(c.arch, arch);
    assert_int_equal(c.tie_word_embeddings, tied);
    assert_int_equal(c.qkv_bias, qkv_bias);
    assert_int_equal(sits_st_open_dir(dir, &st), SITS_OK);
    assert_int_equal(sits_model_check_tensors(&c, st, dir), SITS_OK);
    /* the checkpoint holds exactly what the layout asks for */
    size_t n_needed = 0;
    for (int k = 0; k < SITS_W_KIND_COUNT; k++)
        if (sits_wkind_present(&c, (sits_wkind_t)k))
            n_needed += sits_wkind_per_layer((sits_wkind_t)k) ? (size_t)c.n_layers : 1;
    assert_int_equal(sits_st_count(st), n_needed);
    sits_st_close(st);
}

static void test_committed_checkpoints(void **state)
{
    check_dir(SITS_TEST_DATA_DIR "/tiny_llama", SITS_ARCH_LLAMA, 0, 0);
    check_dir(SITS_TEST_DATA_DIR "/tiny_qwen2", SITS_ARCH_QWEN2, 1, 1);
    /* [families] the family fixtures hold exactly the tensors their layouts ask for (none is left unused):
     * q/k norms, Gemma's four norms a layer, Phi-3's fused qkv_proj / gate_up_proj */
#define FAMILY_FIXTURE(name_) SITS_TEST_DATA_DIR "/../../../fixtures/models/" name_
    check_dir(FAMILY_FIXTURE("qwen3"), SITS_ARCH_QWEN3, 0, 0);
    check_dir(FAMILY_FIXTURE("qwen3_tied"), SITS_ARCH_QWEN3, 1, 0);
    check_dir(FAMILY_FIXTURE("gemma2"), SITS_ARCH_GEMMA2, 1, 0);
    check_dir(FAMILY_FIXTURE("gemma3"), SITS_ARCH_GEMMA3, 1, 0);
    check_dir(FAMILY_FIXTURE("phi3"), SITS_ARCH_PHI3, 0, 0);
#undef FAMILY_FIXTURE

    /* tiny_qwen2 checked against an untied config: lm_head.weight is missing */
    sits_model_config_t c;
    sits_st_t *st = NULL;
    assert_int_equal(sits_model_config_load(SITS_TEST_DATA_DIR "/tiny_qwen2", &c), SITS_OK);
    assert_int_equal(sits_st_open_dir(SITS_TEST_DATA_DIR "/tiny_qwen2", &st), SITS_OK);
    c.tie_word_embeddings = 0;
    tm_capture_t cap;
    tm_capture_begin(&cap);
    assert_int_equal(sits_model_check_tensors(&c, st, "qwen"), SITS_ERR_NOT_FOUND);
    char *log = tm_capture_end(&cap);
    assert_non_null(strstr(log, "qwen: tensor lm_head.weight: missing"));
    free(log);
    /* without qkv_bias the bias tensors are extra and ignored */
    c.tie_word_embeddings = 1;
    c.qkv_bias = 0;
    assert_int_equal(sits_model_check_tensors(&c, st, "qwen"), SITS_OK);
    /* with o_bias they are missing */
    c.o_bias = 1;
    tm_capture_begin(&cap);
    assert_int_equal(sits_model_check_tensors(&c, st, "qwen"), SITS_ERR_NOT_FOUND);
    log = tm_capture_end(&cap);
    assert_non_null(strstr(log, "model.layers.0.self_attn.o_proj.bias"));
    free(log);
    sits_st_close(st);
}

/* An in-memory checkpoint for cfg (F32 zeros unless dtype says otherwise), with `omit` left out
 * and `reshape` given shape [bad0] (1-D), `redtype` given dtype `dtype_name`. */
static unsigned char *build(const sits_model_config_t *cfg, const char *omit, const char *reshape, int64_t bad0,
                            const char *redtype, const char *dtype_name, size_t *len_p)
{
    json_t *h = json_object();
    size_t off = 0;
    char name[128];
    for (int k = 0; k < SITS_W_KIND_COUNT; k++) {
        if (!sits_wkind_present(cfg, (sits_wkind_t)k)) continue;
        int nl = sits_wkind_per_layer((sits_wkind_t)k) ? cfg->n_layers : 1;
        for (int l = 0; l < nl; l++) {
            sits_wkind_name((sits_wkind_t)k, l, name, sizeof name);
            if (omit && !strcmp(name, omit)) continue;
            int64_t s[2];
            int nd = sits_wkind_shape(cfg, (sits_wkind_t)k, s);
            if (reshape && !strcmp(name, reshape)) { nd = 1; s[0] = bad0; }
            const char *dt = redtype && !strcmp(name, redtype) ? dtype_name : "F32";
            size_t esz = !strcmp(dt, "F32") || !strcmp(dt, "I32") ? 4 : !strcmp(dt, "F8_E4M3") ? 1 : 2;
            json_t *shape = json_array();
            size_t numel = 1;
            for (int d = 0; d < nd; d++) { json_array_append_new(shape, json_integer(s[d])); numel *= (size_t)s[d]; }
            json_object_set_new(h, name, json_pack("{s:s, s:o, s:[I,I]}", "dtype", dt, "shape", shape,
                                                   "data_offsets", (json_int_t)off, (json_int_t)(off + numel * esz)));
            off += numel * esz;
        }
    }
    json_object_set_new(h, "model.layers.0.self_attn.rotary_emb.inv_freq",
                        json_pack("{s:s, s:[i], s:[I,I]}", "dtype", "F32", "shape", 0, "data_offsets",
                                  (json_int_t)off, (json_int_t)off));
    char *text = json_dumps(h, JSON_COMPACT);
    json_decref(h);
    unsigned char *img = tm_st_image(text, off, UINT64_MAX, len_p);
    free(text);
    return img;
}

/* len_p is read here, after build() (an argument of the same call) has set it. */
static sits_status_t check_img(const sits_model_config_t *cfg, unsigned char *img, const size_t *len_p, char **log_p)
{
    size_t len = *len_p;
    sits_st_t *st = NULL;
    assert_int_equal(sits_st_parse(img, len, "mem.safetensors", &st), SITS_OK);
    tm_capture_t cap;
    tm_capture_begin(&cap);
    sits_status_t s = sits_model_check_tensors(cfg, st, WHAT);
    *log_p = tm_capture_end(&cap);
    sits_st_close(st);
    free(img);
    return s;
}

static void test_check_problems(void **state)
{
    sits_model_config_t c = small_cfg();
    size_t len = 0;
    char *log;

    /* complete (plus an ignored rotary_emb.inv_freq) */
    assert_int_equal(check_img(&c, build(&c, NULL, NULL, 0, NULL, NULL, &len), &len, &log), SITS_OK);
    free(log);

    /* missing tensor */
    assert_int_equal(check_img(&c, build(&c, "model.layers.1.mlp.up_proj.weight", NULL, 0, NULL, NULL, &len), &len,
                               &log), SITS_ERR_NOT_FOUND);
    assert_non_null(strstr(log, WHAT ": tensor model.layers.1.mlp.up_proj.weight: missing"));
    free(log);
    assert_int_equal(check_img(&c, build(&c, "lm_head.weight", NULL, 0, NULL, NULL, &len), &len, &log),
                     SITS_ERR_NOT_FOUND);
    assert_non_null(strstr(log, "lm_head.weight"));
    free(log);

    /* shape mismatch: wrong rank or length, and a file made for another hidden size */
    assert_int_equal(check_img(&c, build(&c, NULL, "model.layers.0.self_attn.k_proj.weight", 32, NULL, NULL, &len),
                               &len, &log), SITS_ERR_FORMAT);
    assert_non_null(strstr(log, "tensor model.layers.0.self_attn.k_proj.weight: shape [32], config needs [4, 8]"));
    free(log);
    assert_int_equal(check_img(&c, build(&c, NULL, "model.norm.weight", 9, NULL, NULL, &len), &len, &log),
                     SITS_ERR_FORMAT);
    assert_non_null(strstr(log, "model.norm.weight: shape [9], config needs [8]"));
    free(log);
    sits_model_config_t other = c;
    other.hidden_size = 12;
    assert_int_equal(check_img(&other, build(&c, NULL, NULL, 0, NULL, NULL, &len), &len, &log), SITS_ERR_FORMAT);
    assert_non_null(strstr(log, "model.embed_tokens.weight: shape [16, 8], config needs [16, 12]"));
    free(log);

    /* dtypes: BF16/F16 fine, I32 refused, F8_E4M3 only for linear weights with a weight_scale (tests/unit/test_fp8.c) */
    assert_int_equal(check_img(&c, build(&c, NULL, NULL, 0, "model.layers.1.mlp.down_proj.weight", "BF16", &len),
                               &len, &log), SITS_OK);
    free(log);
    assert_int_equal(check_img(&c, build(&c, NULL, NULL, 0, "model.layers.1.mlp.down_proj.weight", "F16", &len),
                               &len, &log), SITS_OK);
    free(log);
    assert_int_equal(check_img(&c, build(&c, NULL, NULL, 0, "model.layers.1.mlp.down_proj.weight", "I32", &len),
                               &len, &log), SITS_ERR_FORMAT);
    assert_non_null(strstr(log, "model.layers.1.mlp.down_proj.weight: dtype I32"));
    free(log);
    assert_int_equal(check_img(&c, build(&c, NULL, NULL, 0, "model.layers.0.self_attn.q_proj.weight", "F8_E4M3",
                                     &len), &len, &log), SITS_ERR_NOT_FOUND);
    assert_non_null(strstr(log, "F8_E4M3 weight without its scale tensor model.layers.0.self_attn.q_proj.weight_scale"));
    free(log);
    assert_int_equal(check_img(&c, build(&c, NULL, NULL, 0, "model.norm.weight", "F8_E4M3", &len), &len, &log),
                     SITS_ERR_FORMAT);
    assert_non_null(strstr(log, "model.norm.weight: dtype F8_E4M3"));
    free(log);

    /* biases: built with all of them, checked with all of them */
    sits_model_config_t b = c;
    b.qkv_bias = b.o_bias = b.mlp_bias = 1;
    assert_int_equal(check_img(&b, build(&b, NULL, NULL, 0, NULL, NULL, &len), &len, &log), SITS_OK);
    free(log);
    assert_int_equal(check_img(&b, build(&b, "model.layers.1.mlp.gate_proj.bias", NULL, 0, NULL, NULL, &len), &len,
                               &log), SITS_ERR_NOT_FOUND);
    free(log);
    assert_int_equal(check_img(&b, build(&b, NULL, "model.layers.0.self_attn.v_proj.bias", 8, NULL, NULL, &len), &len,
                               &log), SITS_ERR_FORMAT);
    assert_non_null(strstr(log, "v_proj.bias: shape [8], config needs [4]"));
    free(log);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_and_shapes),
        cmocka_unit_test(test_committed_checkpoints),
        cmocka_unit_test(test_check_problems),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
