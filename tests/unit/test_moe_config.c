/* test_moe_config.c -- [moe] Mixture-of-Experts config.json keys (Mixtral-8x7B and Qwen1.5-MoE-A2.7B as
 * published), their refusals (status, a message naming the file and the key, the config untouched),
 * the expert split of sits_shard_dims under TP and EP (and its refusals), and the HF tensor names and
 * shapes of layout.h. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "model/config.h"
#include "model/layout.h"
#include "model/weights.h"
#include "util/status.h"
#include "test_model_common.h"

#define WHAT "test/config.json"

static const char *mixtral =
    "{\"architectures\": [\"MixtralForCausalLM\"], \"attention_dropout\": 0.0, \"bos_token_id\": 1, \"eos_token_id\": 2,"
    " \"hidden_act\": \"silu\", \"hidden_size\": 4096, \"initializer_range\": 0.02, \"intermediate_size\": 14336,"
    " \"max_position_embeddings\": 32768, \"model_type\": \"mixtral\", \"num_attention_heads\": 32,"
    " \"num_experts_per_tok\": 2, \"num_hidden_layers\": 32, \"num_key_value_heads\": 8, \"num_local_experts\": 8,"
    " \"output_router_logits\": false, \"rms_norm_eps\": 1e-05, \"rope_theta\": 1000000.0, \"router_aux_loss_coef\": 0.02,"
    " \"sliding_window\": null, \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\", \"vocab_size\": 32000}";

static const char *qwen15_moe =
    "{\"architectures\": [\"Qwen2MoeForCausalLM\"], \"attention_dropout\": 0.0, \"bos_token_id\": 151643,"
    " \"decoder_sparse_step\": 1, \"eos_token_id\": 151643, \"hidden_act\": \"silu\", \"hidden_size\": 2048,"
    " \"intermediate_size\": 5632, \"max_position_embeddings\": 8192, \"max_window_layers\": 21, \"model_type\": \"qwen2_moe\","
    " \"moe_intermediate_size\": 1408, \"norm_topk_prob\": false, \"num_attention_heads\": 16, \"num_experts\": 60,"
    " \"num_experts_per_tok\": 4, \"num_hidden_layers\": 24, \"num_key_value_heads\": 16, \"rms_norm_eps\": 1e-06,"
    " \"rope_theta\": 1000000.0, \"shared_expert_intermediate_size\": 5632, \"sliding_window\": 32768,"
    " \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\", \"use_sliding_window\": false, \"vocab_size\": 151936,"
    " \"mlp_only_layers\": []}";

static sits_status_t parse_str(const char *json, sits_model_config_t *cfg)
{
    return sits_model_config_parse(json, strlen(json), WHAT, cfg);
}

/* The published config parses to these MoE fields (and the attention family's bias). */
static void expect_moe(const char *json, sits_arch_t arch, const char *model_type, int E, int k, int inter, int norm,
                       int shared, int qkv_bias)
{
    sits_model_config_t c;
    assert_int_equal(parse_str(json, &c), SITS_OK);
    assert_int_equal(c.arch, arch);
    assert_string_equal(c.model_type, model_type);
    int got[6] = { c.moe.n_experts, c.moe.top_k, c.moe.moe_inter, c.moe.norm_topk, c.moe.shared_inter, c.qkv_bias };
    int want[6] = { E, k, inter, norm, shared, qkv_bias };
    for (int i = 0; i < 6; i++) {
        if (got[i] != want[i]) printf("%s: field %d (experts, top_k, ffn, norm, shared, qkv_bias) = %d, want %d\n", model_type, i,
                                      got[i], want[i]);
        assert_int_equal(got[i], want[i]);
    }
}

static void test_mixtral(void **state) { expect_moe(mixtral, SITS_ARCH_MISTRAL, "mixtral", 8, 2, 14336, 1, 0, 0); }

static void test_qwen2_moe(void **state) { expect_moe(qwen15_moe, SITS_ARCH_QWEN2, "qwen2_moe", 60, 4, 1408, 0, 5632, 1); }

/* One key of a published config changed (value NULL: deleted), the status and a message fragment. */
static void check_refusal(const char *base, const char *from, const char *to, sits_status_t want, const char *msg, int *failed)
{
    char text[4096];
    const char *at = strstr(base, from);
    assert_non_null(at);
    snprintf(text, sizeof text, "%.*s%s%s", (int)(at - base), base, to, at + strlen(from));
    sits_model_config_t c;
    memset(&c, 0x5a, sizeof c);
    tm_capture_t cap;
    tm_capture_begin(&cap);
    sits_status_t st = parse_str(text, &c);
    char *log = tm_capture_end(&cap);
    unsigned char untouched = 1;
    for (size_t b = 0; b < sizeof c; b++) untouched &= ((unsigned char *)&c)[b] == 0x5a;
    if (st != want || !log || !strstr(log, WHAT) || !strstr(log, msg) || !untouched) {
        printf("refusal %s -> %s: status %d want %d, log %s\"%s\" (%s), cfg %s\n", from, to, st, want,
               log && strstr(log, msg) ? "has " : "LACKS ", msg, log ? log : "", untouched ? "untouched" : "MODIFIED");
        (*failed)++;
    }
    free(log);
}

static void test_refusals(void **state)
{
    int failed = 0;
    check_refusal(qwen15_moe, "\"decoder_sparse_step\": 1", "\"decoder_sparse_step\": 2", SITS_ERR_UNSUPPORTED,
                  "decoder_sparse_step", &failed);
    check_refusal(qwen15_moe, "\"mlp_only_layers\": []", "\"mlp_only_layers\": [0, 5]", SITS_ERR_UNSUPPORTED, "mlp_only_layers",
                  &failed);
    check_refusal(qwen15_moe, "\"num_experts_per_tok\": 4", "\"num_experts_per_tok\": 61", SITS_ERR_FORMAT,
                  "num_experts_per_tok", &failed);
    check_refusal(qwen15_moe, "\"num_experts\": 60", "\"num_experts\": 0", SITS_ERR_FORMAT, "num_experts", &failed);
    check_refusal(qwen15_moe, "\"norm_topk_prob\": false", "\"norm_topk_prob\": \"no\"", SITS_ERR_FORMAT, "norm_topk_prob",
                  &failed);
    check_refusal(qwen15_moe, "\"moe_intermediate_size\": 1408", "\"moe_intermediate_size\": 0", SITS_ERR_FORMAT,
                  "moe_intermediate_size", &failed);
    check_refusal(mixtral, "\"num_local_experts\": 8", "\"num_local_experts\": -8", SITS_ERR_FORMAT, "num_local_experts",
                  &failed);
    check_refusal(mixtral, "\"num_experts_per_tok\": 2", "\"num_experts_per_tok\": 0", SITS_ERR_FORMAT, "num_experts_per_tok",
                  &failed);
    check_refusal(mixtral, "\"model_type\": \"mixtral\"", "\"model_type\": \"deepseek_v3\"", SITS_ERR_UNSUPPORTED, "model_type",
                  &failed);
    assert_int_equal(failed, 0);
}

/* sits_shard_dims: experts TP-sliced, or whole under EP; refusals name --ep / the size. */
static void test_shard_dims(void **state)
{
    sits_model_config_t c;
    sits_shard_dims_t d;
    assert_int_equal(parse_str(qwen15_moe, &c), SITS_OK);
    sits_shard_t tp2 = { .tp_rank = 1, .tp_size = 2, .pp_size = 1 };
    assert_int_equal(sits_shard_dims(&c, &tp2, &d), SITS_OK);
    assert_int_equal(d.ep, 1);
    assert_int_equal(d.n_exp_loc, 60);
    assert_int_equal(d.exp0, 0);
    assert_int_equal(d.ie_loc, 704);
    assert_int_equal(d.is_loc, 2816);
    assert_int_equal(d.i_loc, 2816);
    sits_shard_t ep4 = { .tp_rank = 3, .tp_size = 4, .pp_size = 1, .ep_size = 4 };
    assert_int_equal(sits_shard_dims(&c, &ep4, &d), SITS_OK);
    assert_int_equal(d.ep, 4);
    assert_int_equal(d.n_exp_loc, 15);
    assert_int_equal(d.exp0, 45);
    assert_int_equal(d.ie_loc, 1408);
    assert_int_equal(d.is_loc, 1408);
    struct { sits_shard_t s; const char *msg; } bad[] = {
        { { .tp_rank = 0, .tp_size = 8, .pp_size = 1, .ep_size = 8 }, "does not divide the 60 experts" },
        { { .tp_rank = 0, .tp_size = 4, .pp_size = 1, .ep_size = 2 }, "must equal --tp" },
    };
    int failed = 0;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tm_capture_t cap;
        tm_capture_begin(&cap);
        sits_status_t st = sits_shard_dims(&c, &bad[i].s, &d);
        char *log = tm_capture_end(&cap);
        if (st != SITS_ERR_INVALID || !log || !strstr(log, bad[i].msg)) {
            printf("shard %zu: status %d, log lacks \"%s\": %s\n", i, st, bad[i].msg, log ? log : "");
            failed++;
        }
        free(log);
    }
    /* TP 8 slices Mixtral's experts (ffn 14336) evenly; an expert ffn of 1001 cannot be, and the refusal says --ep */
    assert_int_equal(parse_str(mixtral, &c), SITS_OK);
    sits_shard_t tp8 = { .tp_rank = 7, .tp_size = 8, .pp_size = 1 };
    assert_int_equal(sits_shard_dims(&c, &tp8, &d), SITS_OK);
    assert_int_equal(d.ie_loc, 1792);
    c.moe.moe_inter = 1001;
    tm_capture_t cap;
    tm_capture_begin(&cap);
    sits_status_t st = sits_shard_dims(&c, &tp8, &d);
    char *log = tm_capture_end(&cap);
    if (st != SITS_ERR_INVALID || !log || !strstr(log, "experts' intermediate size 1001")) {
        printf("moe_inter 1001 at tp 8: status %d, log %s\n", st, log ? log : "");
        failed++;
    }
    free(log);
    assert_int_equal(failed, 0);
}

static void test_names(void **state)
{
    sits_model_config_t c;
    char name[160];
    int64_t shape[2];
    assert_int_equal(parse_str(mixtral, &c), SITS_OK);
    sits_moe_part_name(&c, SITS_MOE_ROUTER, 3, 0, name, sizeof name);
    assert_string_equal(name, "model.layers.3.block_sparse_moe.gate.weight");
    sits_moe_part_name(&c, SITS_MOE_UP, 3, 7, name, sizeof name);
    assert_string_equal(name, "model.layers.3.block_sparse_moe.experts.7.w3.weight");
    sits_moe_part_shape(&c, SITS_MOE_DOWN, shape);
    assert_true(shape[0] == 4096 && shape[1] == 14336);
    assert_int_equal(sits_moe_part_present(&c, SITS_MOE_SH_GATE), 0);
    assert_int_equal(sits_wkind_present(&c, SITS_W_GATE), 0);
    assert_int_equal(parse_str(qwen15_moe, &c), SITS_OK);
    sits_moe_part_name(&c, SITS_MOE_GATE, 0, 59, name, sizeof name);
    assert_string_equal(name, "model.layers.0.mlp.experts.59.gate_proj.weight");
    sits_moe_part_name(&c, SITS_MOE_SH_ROUTE, 23, 0, name, sizeof name);
    assert_string_equal(name, "model.layers.23.mlp.shared_expert_gate.weight");
    sits_moe_part_name(&c, SITS_MOE_SH_DOWN, 1, 0, name, sizeof name);
    assert_string_equal(name, "model.layers.1.mlp.shared_expert.down_proj.weight");
    sits_moe_part_shape(&c, SITS_MOE_SH_ROUTE, shape);
    assert_true(shape[0] == 1 && shape[1] == 2048);
    sits_moe_part_shape(&c, SITS_MOE_ROUTER, shape);
    assert_true(shape[0] == 60 && shape[1] == 2048);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mixtral),
        cmocka_unit_test(test_qwen2_moe),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_shard_dims),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
