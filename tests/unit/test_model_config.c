/* test_model_config.c -- config.json parsing (Llama 2/3/3.1, Mistral, Qwen2; rope_scaling,
 * rope_parameters and the legacy `type` key; refusals) and RoPE inverse frequencies checked
 * against transformers (tests/unit/data/model/rope_expected.json, made by gen_model_data.py). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>

#include "model/config.h"
#include "util/status.h"
#include "test_model_common.h"

#define WHAT "test/config.json"

static sits_status_t parse_str(const char *json, sits_model_config_t *cfg)
{
    return sits_model_config_parse(json, strlen(json), WHAT, cfg);
}

/* Meta-Llama-3.1-8B-Instruct's config.json (as published, trimmed of unused keys). */
static const char *llama31 =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0,"
    " \"bos_token_id\": 128000, \"eos_token_id\": [128001, 128008, 128009], \"hidden_act\": \"silu\","
    " \"hidden_size\": 4096, \"initializer_range\": 0.02, \"intermediate_size\": 14336,"
    " \"max_position_embeddings\": 131072, \"mlp_bias\": false, \"model_type\": \"llama\","
    " \"num_attention_heads\": 32, \"num_hidden_layers\": 32, \"num_key_value_heads\": 8, \"pretraining_tp\": 1,"
    " \"rms_norm_eps\": 1e-05, \"rope_scaling\": {\"factor\": 8.0, \"low_freq_factor\": 1.0,"
    " \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"},"
    " \"rope_theta\": 500000.0, \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\","
    " \"transformers_version\": \"4.43.0.dev0\", \"use_cache\": true, \"vocab_size\": 128256}";

static void test_llama31(void **state)
{
    sits_model_config_t c;
    assert_int_equal(parse_str(llama31, &c), SITS_OK);
    assert_int_equal(c.arch, SITS_ARCH_LLAMA);
    assert_string_equal(c.model_type, "llama");
    assert_int_equal(c.vocab_size, 128256);
    assert_int_equal(c.hidden_size, 4096);
    assert_int_equal(c.intermediate_size, 14336);
    assert_int_equal(c.n_layers, 32);
    assert_int_equal(c.n_heads, 32);
    assert_int_equal(c.n_kv_heads, 8);
    assert_int_equal(c.head_dim, 128);
    assert_true(c.rms_norm_eps == 1e-5f);
    assert_true(c.rope_theta == 500000.0);
    assert_int_equal(c.rope_type, SITS_ROPE_LLAMA3);
    assert_true(c.rope_factor == 8.0);
    assert_true(c.rope_low_freq_factor == 1.0);
    assert_true(c.rope_high_freq_factor == 4.0);
    assert_int_equal(c.rope_orig_max_pos, 8192);
    assert_int_equal(c.max_position_embeddings, 131072);
    assert_int_equal(c.tie_word_embeddings, 0);
    assert_int_equal(c.qkv_bias, 0);
    assert_int_equal(c.o_bias, 0);
    assert_int_equal(c.mlp_bias, 0);
    assert_int_equal(c.sliding_window, 0);
    assert_int_equal(c.bos_token_id, 128000);
    assert_int_equal(c.n_eos, 3);
    assert_int_equal(c.eos_token_ids[0], 128001);
    assert_int_equal(c.eos_token_ids[1], 128008);
    assert_int_equal(c.eos_token_ids[2], 128009);
    assert_string_equal(c.torch_dtype, "bfloat16");
}

/* transformers v5 spelling: rope_parameters with rope_theta inside, no top-level rope_theta, "dtype". */
static void test_rope_parameters_v5(void **state)
{
    const char *j =
        "{\"model_type\": \"llama\", \"vocab_size\": 128256, \"hidden_size\": 2048, \"intermediate_size\": 8192,"
        " \"num_hidden_layers\": 16, \"num_attention_heads\": 32, \"num_key_value_heads\": 8, \"head_dim\": 64,"
        " \"rms_norm_eps\": 1e-05, \"max_position_embeddings\": 131072, \"tie_word_embeddings\": true,"
        " \"dtype\": \"bfloat16\", \"rope_parameters\": {\"factor\": 32.0, \"high_freq_factor\": 4.0,"
        " \"low_freq_factor\": 1.0, \"original_max_position_embeddings\": 8192, \"rope_theta\": 500000.0,"
        " \"rope_type\": \"llama3\"}, \"eos_token_id\": 128001, \"bos_token_id\": 128000}";
    sits_model_config_t c;
    assert_int_equal(parse_str(j, &c), SITS_OK);
    assert_int_equal(c.rope_type, SITS_ROPE_LLAMA3);
    assert_true(c.rope_theta == 500000.0);
    assert_true(c.rope_factor == 32.0);
    assert_int_equal(c.rope_orig_max_pos, 8192);
    assert_int_equal(c.head_dim, 64);
    assert_int_equal(c.tie_word_embeddings, 1);
    assert_int_equal(c.n_eos, 1);
    assert_int_equal(c.eos_token_ids[0], 128001);
    assert_string_equal(c.torch_dtype, "bfloat16");
}

/* Llama 2 era: rope_scaling {"type": "linear"}; no head_dim, no num_key_value_heads, no bos/eos. */
static void test_legacy_type_linear(void **state)
{
    const char *j =
        "{\"model_type\": \"llama\", \"vocab_size\": 32000, \"hidden_size\": 4096, \"intermediate_size\": 11008,"
        " \"num_hidden_layers\": 32, \"num_attention_heads\": 32, \"num_key_value_heads\": null, \"head_dim\": null,"
        " \"rms_norm_eps\": 1e-06, \"rope_theta\": 10000.0, \"rope_scaling\": {\"type\": \"linear\", \"factor\": 4.0},"
        " \"max_position_embeddings\": 16384}";
    sits_model_config_t c;
    assert_int_equal(parse_str(j, &c), SITS_OK);
    assert_int_equal(c.rope_type, SITS_ROPE_LINEAR);
    assert_true(c.rope_factor == 4.0);
    assert_int_equal(c.n_kv_heads, 32);
    assert_int_equal(c.head_dim, 128);
    assert_int_equal(c.bos_token_id, -1);
    assert_int_equal(c.n_eos, 0);
    assert_string_equal(c.torch_dtype, "");
}

static void test_legacy_type_llama3(void **state)
{
    const char *j =
        "{\"model_type\": \"llama\", \"vocab_size\": 128256, \"hidden_size\": 4096, \"intermediate_size\": 14336,"
        " \"num_hidden_layers\": 2, \"num_attention_heads\": 32, \"num_key_value_heads\": 8,"
        " \"rope_theta\": 500000.0, \"max_position_embeddings\": 131072, \"rope_scaling\": {\"type\": \"llama3\","
        " \"factor\": 8, \"low_freq_factor\": 1, \"high_freq_factor\": 4, \"original_max_position_embeddings\": 8192}}";
    sits_model_config_t c;
    assert_int_equal(parse_str(j, &c), SITS_OK);
    assert_int_equal(c.rope_type, SITS_ROPE_LLAMA3);
    assert_true(c.rope_factor == 8.0); /* integers accepted for the float keys */
    assert_int_equal(c.rope_orig_max_pos, 8192);
}

/* Qwen2.5-0.5B-Instruct's config.json. */
static void test_qwen2(void **state)
{
    const char *j =
        "{\"architectures\": [\"Qwen2ForCausalLM\"], \"attention_dropout\": 0.0, \"bos_token_id\": 151643,"
        " \"eos_token_id\": 151645, \"hidden_act\": \"silu\", \"hidden_size\": 896, \"initializer_range\": 0.02,"
        " \"intermediate_size\": 4864, \"max_position_embeddings\": 32768, \"max_window_layers\": 21,"
        " \"model_type\": \"qwen2\", \"num_attention_heads\": 14, \"num_hidden_layers\": 24,"
        " \"num_key_value_heads\": 2, \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0, \"sliding_window\": 32768,"
        " \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.43.1\","
        " \"use_cache\": true, \"use_sliding_window\": false, \"vocab_size\": 151936}";
    sits_model_config_t c;
    assert_int_equal(parse_str(j, &c), SITS_OK);
    assert_int_equal(c.arch, SITS_ARCH_QWEN2);
    assert_int_equal(c.head_dim, 64);
    assert_int_equal(c.n_kv_heads, 2);
    assert_int_equal(c.qkv_bias, 1);
    assert_int_equal(c.o_bias, 0);
    assert_int_equal(c.mlp_bias, 0);
    assert_int_equal(c.tie_word_embeddings, 1);
    assert_int_equal(c.sliding_window, 0); /* use_sliding_window false */
    assert_true(c.rope_theta == 1e6);
    assert_int_equal(c.rope_type, SITS_ROPE_DEFAULT);
}

/* [families] gemma-2-2b's config.json: defaults of the Gemma 2 path, alternating layers. */
static void test_gemma2(void **state)
{
    const char *j =
        "{\"architectures\": [\"Gemma2ForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0,"
        " \"attn_logit_softcapping\": 50.0, \"bos_token_id\": 2, \"cache_implementation\": \"hybrid\", \"eos_token_id\": [1, 107],"
        " \"final_logit_softcapping\": 30.0, \"head_dim\": 256, \"hidden_act\": \"gelu_pytorch_tanh\","
        " \"hidden_activation\": \"gelu_pytorch_tanh\", \"hidden_size\": 2304, \"initializer_range\": 0.02,"
        " \"intermediate_size\": 9216, \"max_position_embeddings\": 8192, \"model_type\": \"gemma2\","
        " \"num_attention_heads\": 8, \"num_hidden_layers\": 26, \"num_key_value_heads\": 4, \"pad_token_id\": 0,"
        " \"query_pre_attn_scalar\": 256, \"rms_norm_eps\": 1e-06, \"rope_theta\": 10000.0, \"sliding_window\": 4096,"
        " \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.42.4\", \"use_cache\": true, \"vocab_size\": 256000}";
    sits_model_config_t c;
    assert_int_equal(parse_str(j, &c), SITS_OK);
    assert_int_equal(c.arch, SITS_ARCH_GEMMA2);
    assert_int_equal(c.head_dim, 256);
    assert_int_equal(c.norm_plus_one, 1);
    assert_int_equal(c.sandwich_norms, 1);
    assert_int_equal(c.act_gelu_tanh, 1);
    assert_int_equal(c.embed_scale, 1);
    assert_int_equal(c.qk_norm, 0);
    assert_true(fabsf(c.attn_scale - 0.0625f) < 1e-7f);
    assert_true(c.attn_softcap == 50.0f && c.final_softcap == 30.0f);
    assert_int_equal(c.sliding_window, 4096);
    assert_int_equal(sits_model_layer_window(&c, 0), 4096);
    assert_int_equal(sits_model_layer_window(&c, 1), 0);
    assert_int_equal(sits_model_layer_window(&c, 24), 4096);
    assert_int_equal(sits_model_layer_window(&c, 25), 0);
    assert_int_equal(sits_model_kv_window(&c), 0);   /* [sliding window] global layers read everything */
    assert_true(c.rope_local_theta == 0.0);
    assert_int_equal(c.n_eos, 2);
    const char *bad_act = "{\"model_type\": \"gemma2\", \"vocab_size\": 64, \"hidden_size\": 32, \"intermediate_size\": 48,"
                          " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"hidden_activation\": \"gelu\"}";
    assert_int_equal(parse_str(bad_act, &c), SITS_ERR_UNSUPPORTED);
    const char *bidir = "{\"model_type\": \"gemma2\", \"vocab_size\": 64, \"hidden_size\": 32, \"intermediate_size\": 48,"
                        " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"use_bidirectional_attention\": true}";
    assert_int_equal(parse_str(bidir, &c), SITS_ERR_UNSUPPORTED);
    const char *bad_lt = "{\"model_type\": \"gemma2\", \"vocab_size\": 64, \"hidden_size\": 32, \"intermediate_size\": 48,"
                         " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"layer_types\": [\"full_attention\", \"chunked\"]}";
    assert_int_equal(parse_str(bad_lt, &c), SITS_ERR_UNSUPPORTED);
}

/* [families] gemma-3-1b-it (older keys: rope_local_base_freq, sliding_window_pattern), gemma-3-4b's text
 * part with linear scaling of the global layers, and transformers v5's per-layer-type rope_parameters. */
static void test_gemma3(void **state)
{
    const char *j =
        "{\"architectures\": [\"Gemma3ForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0,"
        " \"attn_logit_softcapping\": null, \"bos_token_id\": 2, \"cache_implementation\": \"hybrid\", \"eos_token_id\": [1, 106],"
        " \"final_logit_softcapping\": null, \"head_dim\": 256, \"hidden_activation\": \"gelu_pytorch_tanh\","
        " \"hidden_size\": 1152, \"initializer_range\": 0.02, \"intermediate_size\": 6912, \"max_position_embeddings\": 32768,"
        " \"model_type\": \"gemma3_text\", \"num_attention_heads\": 4, \"num_hidden_layers\": 26, \"num_key_value_heads\": 1,"
        " \"pad_token_id\": 0, \"query_pre_attn_scalar\": 256, \"rms_norm_eps\": 1e-06, \"rope_local_base_freq\": 10000,"
        " \"rope_scaling\": null, \"rope_theta\": 1000000, \"sliding_window\": 512, \"sliding_window_pattern\": 6,"
        " \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.50.0.dev0\", \"use_cache\": true, \"vocab_size\": 262144}";
    sits_model_config_t c;
    assert_int_equal(parse_str(j, &c), SITS_OK);
    assert_int_equal(c.arch, SITS_ARCH_GEMMA3);
    assert_int_equal(c.qk_norm, 1);
    assert_true(c.attn_softcap == 0.0f && c.final_softcap == 0.0f);
    assert_true(c.rope_theta == 1e6 && c.rope_local_theta == 1e4);
    assert_int_equal(c.rope_type, SITS_ROPE_DEFAULT);
    for (int l = 0; l < 26; l++) assert_int_equal(sits_model_layer_window(&c, l), (l + 1) % 6 ? 512 : 0);
    const char *g4 =
        "{\"model_type\": \"gemma3_text\", \"vocab_size\": 64, \"hidden_size\": 32, \"intermediate_size\": 48,"
        " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"head_dim\": 16, \"rope_theta\": 1000000.0,"
        " \"rope_scaling\": {\"factor\": 8.0, \"rope_type\": \"linear\"}, \"rope_local_base_freq\": 10000.0}";
    assert_int_equal(parse_str(g4, &c), SITS_OK);
    assert_int_equal(c.rope_type, SITS_ROPE_LINEAR);
    assert_true(c.rope_factor == 8.0 && c.rope_theta == 1e6 && c.rope_local_theta == 1e4);
    const char *v5 =
        "{\"model_type\": \"gemma3_text\", \"vocab_size\": 64, \"hidden_size\": 32, \"intermediate_size\": 48,"
        " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"head_dim\": 16, \"sliding_window\": 8,"
        " \"layer_types\": [\"full_attention\", \"sliding_attention\"],"
        " \"rope_parameters\": {\"sliding_attention\": {\"rope_type\": \"default\", \"rope_theta\": 5000.0},"
        " \"full_attention\": {\"rope_type\": \"linear\", \"factor\": 2.0, \"rope_theta\": 200000.0}}}";
    assert_int_equal(parse_str(v5, &c), SITS_OK);
    assert_int_equal(c.rope_type, SITS_ROPE_LINEAR);
    assert_true(c.rope_factor == 2.0 && c.rope_theta == 2e5 && c.rope_local_theta == 5e3);
    assert_int_equal(sits_model_layer_window(&c, 0), 0);
    assert_int_equal(sits_model_layer_window(&c, 1), 8);
    const char *v5_bad =
        "{\"model_type\": \"gemma3_text\", \"vocab_size\": 64, \"hidden_size\": 32, \"intermediate_size\": 48,"
        " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"head_dim\": 16,"
        " \"rope_parameters\": {\"sliding_attention\": {\"rope_type\": \"linear\", \"factor\": 2.0, \"rope_theta\": 5000.0},"
        " \"full_attention\": {\"rope_type\": \"default\", \"rope_theta\": 200000.0}}}";
    assert_int_equal(parse_str(v5_bad, &c), SITS_ERR_UNSUPPORTED);
}

/* [mm] gemma-3-27b-it's config.json (Gemma3ForConditionalGeneration): the text_config names only what differs from
 * Gemma3TextConfig. The expected values are what transformers 5.25 makes of it (Gemma3Config.from_dict(...).text_config:
 * vocab_size 262208, rms_norm_eps 1e-06, max_position_embeddings 131072, rope_parameters {sliding_attention: default
 * 10000, full_attention: linear factor 8, rope_theta 1e6}, layer_types every sixth full_attention, tie_word_embeddings
 * true, no soft-capping; the top level's eos_token_id [1, 106]). */
static void test_gemma3_multimodal(void **state)
{
    (void)state;
    const char *j =
        "{\"architectures\": [\"Gemma3ForConditionalGeneration\"], \"boi_token_index\": 255999, \"eoi_token_index\": 256000,"
        " \"eos_token_id\": [1, 106], \"image_token_index\": 262144, \"initializer_range\": 0.02, \"mm_tokens_per_image\": 256,"
        " \"model_type\": \"gemma3\", \"text_config\": {\"head_dim\": 128, \"hidden_size\": 5376, \"intermediate_size\": 21504,"
        " \"model_type\": \"gemma3_text\", \"num_attention_heads\": 32, \"num_hidden_layers\": 62, \"num_key_value_heads\": 16,"
        " \"query_pre_attn_scalar\": 168, \"rope_scaling\": {\"factor\": 8.0, \"rope_type\": \"linear\"}, \"sliding_window\": 1024},"
        " \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.50.0.dev0\", \"vision_config\": {\"hidden_size\": 1152,"
        " \"image_size\": 896, \"intermediate_size\": 4304, \"model_type\": \"siglip_vision_model\", \"num_attention_heads\": 16,"
        " \"num_hidden_layers\": 27, \"patch_size\": 14, \"vision_use_head\": false}}";
    sits_model_config_t c;
    assert_int_equal(parse_str(j, &c), SITS_OK);
    assert_int_equal(c.mm_text, 1);
    assert_int_equal(c.arch, SITS_ARCH_GEMMA3);
    assert_int_equal(c.vocab_size, 262208);
    assert_int_equal(c.n_layers, 62);
    assert_int_equal(c.head_dim, 128);
    assert_true(c.rms_norm_eps == 1e-6f && c.max_position_embeddings == 131072 && c.tie_word_embeddings == 1);
    assert_int_equal(c.rope_type, SITS_ROPE_LINEAR);
    assert_true(c.rope_factor == 8.0 && c.rope_theta == 1e6 && c.rope_local_theta == 1e4);
    assert_true(c.attn_softcap == 0.0f && c.final_softcap == 0.0f && c.act_gelu_tanh == 1 && c.qk_norm == 1);
    assert_true(fabsf(c.attn_scale - (float)(1.0 / sqrt(168.0))) < 1e-7f);
    for (int l = 0; l < 62; l++) assert_int_equal(sits_model_layer_window(&c, l), (l + 1) % 6 ? 1024 : 0);
    assert_int_equal(c.n_eos, 2);
    assert_true(c.eos_token_ids[0] == 1 && c.eos_token_ids[1] == 106);
    /* refusals: no text_config, another text model_type */
    assert_int_equal(parse_str("{\"model_type\": \"gemma3\"}", &c), SITS_ERR_FORMAT);
    assert_int_equal(parse_str("{\"model_type\": \"gemma3\", \"text_config\": {\"model_type\": \"llama\"}}", &c),
                     SITS_ERR_UNSUPPORTED);
}

/* [mm] Qwen2.5-VL-7B-Instruct's config.json (the text keys at the top level, multimodal RoPE) and
 * Mistral-Small-3.1-24B-Instruct-2503's (Mistral3: a text_config). What transformers 5.25 reads from them (AutoConfig
 * ...text_config): qwen2_5_vl_text hidden 3584, 28 layers, 28 / 4 heads, vocab 152064, rope default theta 1e6 (mrope
 * sections [16, 24, 24]), eos 151645, no sliding window; mistral hidden 5120, 40 layers, 32 / 8 heads, head_dim 128,
 * vocab 131072, theta 1e9, rms_norm_eps 1e-5. */
static void test_multimodal_text(void **state)
{
    (void)state;
    const char *q =
        "{\"architectures\": [\"Qwen2_5_VLForConditionalGeneration\"], \"attention_dropout\": 0.0, \"bos_token_id\": 151643,"
        " \"eos_token_id\": 151645, \"vision_start_token_id\": 151652, \"vision_end_token_id\": 151653, \"vision_token_id\": 151654,"
        " \"image_token_id\": 151655, \"video_token_id\": 151656, \"hidden_act\": \"silu\", \"hidden_size\": 3584,"
        " \"initializer_range\": 0.02, \"intermediate_size\": 18944, \"max_position_embeddings\": 128000, \"max_window_layers\": 28,"
        " \"model_type\": \"qwen2_5_vl\", \"num_attention_heads\": 28, \"num_hidden_layers\": 28, \"num_key_value_heads\": 4,"
        " \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0, \"sliding_window\": 32768, \"tie_word_embeddings\": false,"
        " \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.41.2\", \"use_cache\": true, \"use_sliding_window\": false,"
        " \"vision_config\": {\"depth\": 32, \"hidden_act\": \"silu\", \"hidden_size\": 1280, \"intermediate_size\": 3420,"
        " \"num_heads\": 16, \"in_chans\": 3, \"out_hidden_size\": 3584, \"patch_size\": 14, \"spatial_merge_size\": 2,"
        " \"spatial_patch_size\": 14, \"window_size\": 112, \"fullatt_block_indexes\": [7, 15, 23, 31], \"tokens_per_second\": 2,"
        " \"temporal_patch_size\": 2}, \"rope_scaling\": {\"type\": \"mrope\", \"mrope_section\": [16, 24, 24]}, \"vocab_size\": 152064}";
    sits_model_config_t c;
    assert_int_equal(parse_str(q, &c), SITS_OK);
    assert_int_equal(c.mm_text, 1);
    assert_int_equal(c.arch, SITS_ARCH_QWEN2);
    assert_true(c.hidden_size == 3584 && c.n_layers == 28 && c.n_heads == 28 && c.n_kv_heads == 4 && c.head_dim == 128);
    assert_true(c.vocab_size == 152064 && c.qkv_bias == 1 && c.tie_word_embeddings == 0 && c.sliding_window == 0);
    assert_true(c.rope_type == SITS_ROPE_DEFAULT && c.rope_theta == 1e6 && c.rope_dim == 128);
    assert_true(c.n_eos == 1 && c.eos_token_ids[0] == 151645 && c.bos_token_id == 151643);
    const char *m =
        "{\"architectures\": [\"Mistral3ForConditionalGeneration\"], \"image_token_index\": 10, \"model_type\": \"mistral3\","
        " \"multimodal_projector_bias\": false, \"projector_hidden_act\": \"gelu\", \"spatial_merge_size\": 2,"
        " \"text_config\": {\"attention_dropout\": 0.0, \"head_dim\": 128, \"hidden_act\": \"silu\", \"hidden_size\": 5120,"
        " \"initializer_range\": 0.02, \"intermediate_size\": 32768, \"max_position_embeddings\": 131072, \"model_type\": \"mistral\","
        " \"num_attention_heads\": 32, \"num_hidden_layers\": 40, \"num_key_value_heads\": 8, \"rms_norm_eps\": 1e-05,"
        " \"rope_theta\": 1000000000.0, \"sliding_window\": null, \"use_cache\": true, \"vocab_size\": 131072},"
        " \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.50.0.dev0\", \"vision_config\": {\"attention_dropout\": 0.0,"
        " \"head_dim\": 64, \"hidden_act\": \"silu\", \"hidden_size\": 1024, \"image_size\": 1540, \"initializer_range\": 0.02,"
        " \"intermediate_size\": 4096, \"model_type\": \"pixtral\", \"num_attention_heads\": 16, \"num_channels\": 3,"
        " \"num_hidden_layers\": 24, \"patch_size\": 14, \"rope_theta\": 10000.0}, \"vision_feature_layer\": -1}";
    assert_int_equal(parse_str(m, &c), SITS_OK);
    assert_int_equal(c.mm_text, 1);
    assert_int_equal(c.arch, SITS_ARCH_MISTRAL);
    assert_true(c.hidden_size == 5120 && c.n_layers == 40 && c.n_heads == 32 && c.n_kv_heads == 8 && c.head_dim == 128);
    assert_true(c.vocab_size == 131072 && c.rope_theta == 1e9 && c.rms_norm_eps == 1e-5f && c.sliding_window == 0);
    /* refusals: sections that do not cover the head's pairs; another text model */
    const char *bad = "{\"model_type\": \"qwen2_vl\", \"vocab_size\": 64, \"hidden_size\": 64, \"intermediate_size\": 48,"
                      " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"rope_scaling\": {\"type\": \"mrope\", \"mrope_section\": [2, 2, 2]}}";
    assert_int_equal(parse_str(bad, &c), SITS_ERR_FORMAT);   /* head_dim 16: 8 pairs */
    assert_int_equal(parse_str("{\"model_type\": \"mistral3\", \"text_config\": {\"model_type\": \"qwen2\"}}", &c), SITS_ERR_UNSUPPORTED);
}

/* [granite] A Granite 3.x config.json (granite-3.3-8b-instruct's shape): Llama plus the four multipliers, which
 * GraniteConfig defaults to 1; each must be > 0. */
static void test_granite(void **state)
{
    (void)state;
    const char *j =
        "{\"architectures\": [\"GraniteForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0,"
        " \"attention_multiplier\": 0.0078125, \"bos_token_id\": 0, \"embedding_multiplier\": 12.0, \"eos_token_id\": 0,"
        " \"hidden_act\": \"silu\", \"hidden_size\": 4096, \"initializer_range\": 0.02, \"intermediate_size\": 12800,"
        " \"logits_scaling\": 16.0, \"max_position_embeddings\": 131072, \"mlp_bias\": false, \"model_type\": \"granite\","
        " \"num_attention_heads\": 32, \"num_hidden_layers\": 40, \"num_key_value_heads\": 8, \"pad_token_id\": 0,"
        " \"residual_multiplier\": 0.22, \"rms_norm_eps\": 1e-05, \"rope_scaling\": null, \"rope_theta\": 10000000.0,"
        " \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\", \"vocab_size\": 49159}";
    sits_model_config_t c;
    assert_int_equal(parse_str(j, &c), SITS_OK);
    assert_int_equal(c.arch, SITS_ARCH_LLAMA);
    assert_string_equal(c.model_type, "granite");
    assert_true(c.embed_scale == 1 && c.embed_mult == 12.0f && c.attn_scale == 0.0078125f);
    assert_true(c.residual_mult == 0.22f && c.logits_scale == 16.0f && c.rope_theta == 1e7 && c.tie_word_embeddings == 1);
    const char *dflt = "{\"model_type\": \"granite\", \"vocab_size\": 64, \"hidden_size\": 64, \"intermediate_size\": 48,"
                       " \"num_hidden_layers\": 2, \"num_attention_heads\": 4}";
    assert_int_equal(parse_str(dflt, &c), SITS_OK);   /* GraniteConfig's defaults: every multiplier 1 (scale 1, not 1/sqrt(hd)) */
    assert_true(c.embed_mult == 1.0f && c.attn_scale == 1.0f && c.residual_mult == 1.0f && c.logits_scale == 1.0f);
    const char *bad = "{\"model_type\": \"granite\", \"vocab_size\": 64, \"hidden_size\": 64, \"intermediate_size\": 48,"
                      " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"logits_scaling\": 0}";
    assert_int_equal(parse_str(bad, &c), SITS_ERR_FORMAT);
}

/* [glm] GLM-4-9B-0414's config.json shape (glm4) and a glm one without partial_rotary_factor (0.5 by default, as
 * GlmConfig sets it): q/k/v bias, no o_proj bias, fused gate_up, half of each head rotary in interleaved pairs. */
static void test_glm(void **state)
{
    (void)state;
    const char *j =
        "{\"architectures\": [\"Glm4ForCausalLM\"], \"attention_bias\": true, \"attention_dropout\": 0.0, \"eos_token_id\": [151329,"
        " 151336, 151338], \"head_dim\": 128, \"hidden_act\": \"silu\", \"hidden_size\": 4096, \"initializer_range\": 0.02,"
        " \"intermediate_size\": 13696, \"max_position_embeddings\": 32768, \"model_type\": \"glm4\", \"num_attention_heads\": 32,"
        " \"num_hidden_layers\": 40, \"num_key_value_heads\": 2, \"pad_token_id\": 151329, \"partial_rotary_factor\": 0.5,"
        " \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0, \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\","
        " \"vocab_size\": 151552}";
    sits_model_config_t c;
    assert_int_equal(parse_str(j, &c), SITS_OK);
    assert_true(c.qkv_bias == 1 && c.o_bias == 0 && c.fused_gate_up == 1 && c.fused_qkv == 0 && c.sandwich_norms == 1);
    assert_true(c.rope_dim == 64 && c.rope_interleave == 1 && c.n_eos == 3);
    const char *g = "{\"model_type\": \"glm\", \"vocab_size\": 64, \"hidden_size\": 64, \"intermediate_size\": 48,"
                    " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"head_dim\": 8}";
    assert_int_equal(parse_str(g, &c), SITS_OK);
    assert_true(c.rope_dim == 4 && c.rope_interleave == 1 && c.sandwich_norms == 0 && c.qkv_bias == 1);
    int perm[8];
    sits_model_rope_perm(&c, perm);   /* pairs (0, 1), (2, 3) of HF at (0, 4), (1, 5); dims 4..7 pass at 2, 3, 6, 7 */
    static const int want[8] = { 0, 2, 4, 5, 1, 3, 6, 7 };
    assert_memory_equal(perm, want, sizeof perm);
    float inv[4];
    sits_model_rope_inv_freq(&c, inv);   /* HF's dim = 4: theta^(-0 / 4), theta^(-2 / 4); 0 on the passing pairs */
    assert_true(inv[0] == 1.0f && fabsf(inv[1] - 0.01f) < 1e-8f && inv[2] == 0.0f && inv[3] == 0.0f);
}

/* [smollm3] SmolLM3-3B's shape: no_rope_layers given, or every fourth layer by default (SmolLM3Config); tied and 32768
 * positions by default; sliding windows refused. */
static void test_smollm3(void **state)
{
    (void)state;
    const char *j = "{\"model_type\": \"smollm3\", \"vocab_size\": 64, \"hidden_size\": 64, \"intermediate_size\": 48,"
                    " \"num_hidden_layers\": 8, \"num_attention_heads\": 4, \"no_rope_layers\": [1, 1, 0, 1, 1, 1, 0, 1]}";
    sits_model_config_t c;
    assert_int_equal(parse_str(j, &c), SITS_OK);
    static const unsigned char want[8] = { 0, 0, 1, 0, 0, 0, 1, 0 };
    assert_memory_equal(c.layer_nope, want, 8);
    assert_true(c.has_nope && c.tie_word_embeddings == 1 && c.max_position_embeddings == 32768);
    const char *d = "{\"model_type\": \"smollm3\", \"vocab_size\": 64, \"hidden_size\": 64, \"intermediate_size\": 48,"
                    " \"num_hidden_layers\": 8, \"num_attention_heads\": 4, \"tie_word_embeddings\": false}";
    assert_int_equal(parse_str(d, &c), SITS_OK);
    for (int l = 0; l < 8; l++) assert_int_equal(c.layer_nope[l], (l + 1) % 4 == 0);
    assert_int_equal(c.tie_word_embeddings, 0);
    const char *bad = "{\"model_type\": \"smollm3\", \"vocab_size\": 64, \"hidden_size\": 64, \"intermediate_size\": 48,"
                      " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"no_rope_layers\": [1, 2]}";
    assert_int_equal(parse_str(bad, &c), SITS_ERR_FORMAT);
    const char *sw = "{\"model_type\": \"smollm3\", \"vocab_size\": 64, \"hidden_size\": 64, \"intermediate_size\": 48,"
                     " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"use_sliding_window\": true, \"sliding_window\": 8}";
    assert_int_equal(parse_str(sw, &c), SITS_ERR_UNSUPPORTED);
    const char *llama = "{\"model_type\": \"llama\", \"vocab_size\": 64, \"hidden_size\": 64, \"intermediate_size\": 48,"
                        " \"num_hidden_layers\": 2, \"num_attention_heads\": 4}";
    assert_int_equal(parse_str(llama, &c), SITS_OK);   /* other families: no NoPE layers, not tied, 2048 positions */
    assert_true(!c.has_nope && c.tie_word_embeddings == 0 && c.max_position_embeddings == 2048);
}

/* [families] Phi-3-mini-128k style (legacy rope_scaling type longrope, original_max_position_embeddings at the
 * top level, sliding_window on every layer) at head_dim 16; Phi-3-medium's "su"; refusals. */
static void test_phi3(void **state)
{
    const char *j =
        "{\"architectures\": [\"Phi3ForCausalLM\"], \"attention_dropout\": 0.0, \"bos_token_id\": 1, \"embd_pdrop\": 0.0,"
        " \"eos_token_id\": 32000, \"hidden_act\": \"silu\", \"hidden_size\": 64, \"intermediate_size\": 96,"
        " \"max_position_embeddings\": 131072, \"model_type\": \"phi3\", \"num_attention_heads\": 4,"
        " \"num_hidden_layers\": 2, \"num_key_value_heads\": 4, \"original_max_position_embeddings\": 4096,"
        " \"pad_token_id\": 32000, \"resid_pdrop\": 0.0, \"rms_norm_eps\": 1e-05, \"rope_scaling\": {"
        " \"long_factor\": [1.0,2.0,3.0,4.0,5.0,6.0,7.0,8.0], \"short_factor\": [1.0,1.0,1.0,1.0,1.0,1.0,1.0,1.0], \"type\": \"longrope\"}, \"rope_theta\": 10000.0,"
        " \"sliding_window\": 262144, \"tie_word_embeddings\": false, \"vocab_size\": 32064}";
    sits_model_config_t c;
    assert_int_equal(parse_str(j, &c), SITS_OK);
    assert_int_equal(c.arch, SITS_ARCH_PHI3);
    assert_int_equal(c.fused_qkv, 1);
    assert_int_equal(c.fused_gate_up, 1);
    assert_int_equal(c.rope_type, SITS_ROPE_LONGROPE);
    assert_int_equal(c.rope_orig_max_pos, 4096);
    assert_true(fabs(c.rope_factor - 32.0) < 1e-12);
    assert_true(fabs(c.rope_attn_factor - sqrt(1.0 + log(32.0) / log(4096.0))) < 1e-12);
    assert_true(c.rope_short[0] == 1.0f && c.rope_long[7] == 8.0f);
    assert_int_equal(sits_model_layer_window(&c, 1), 262144);
    float inv_s[8], inv_l[8];
    sits_model_rope_inv_freq(&c, inv_s);
    sits_model_rope_inv_freq_long(&c, inv_l);
    for (int i = 0; i < 8; i++) {
        double base = pow(10000.0, -2.0 * i / 16.0);
        assert_true(fabs(inv_s[i] - base) <= 1e-6 * base);
        assert_true(fabs(inv_l[i] - base / (1 + i)) <= 1e-6 * base);
    }
    /* v5 layout with the original length and an explicit attention_factor in the rope object; "su" */
    const char *v5 = "{\"model_type\": \"phi3\", \"vocab_size\": 64, \"hidden_size\": 64, \"intermediate_size\": 48,"
                     " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"max_position_embeddings\": 100,"
                     " \"rope_parameters\": {\"rope_type\": \"su\", \"rope_theta\": 500.0, \"attention_factor\": 1.5,"
                     " \"original_max_position_embeddings\": 50, \"long_factor\": [1.0,2.0,3.0,4.0,5.0,6.0,7.0,8.0], \"short_factor\": [1.0,1.0,1.0,1.0,1.0,1.0,1.0,1.0]}}";
    assert_int_equal(parse_str(v5, &c), SITS_OK);
    /* Phi3Config's own original_max_position_embeddings (4096 when config.json has none at the top level) wins over
     * the rope object's 50, and the factor follows from it: transformers 5.25 gives rope_parameters
     * original_max_position_embeddings 4096 for this config */
    assert_int_equal(c.rope_orig_max_pos, 4096);
    assert_true(c.rope_attn_factor == 1.5 && c.rope_theta == 500.0 && c.rope_factor == 100.0 / 4096.0);
    assert_int_equal(c.sliding_window, 0);
    assert_int_equal(c.rope_dim, 16);
    /* [rope] Phi-4-mini: partial rotary (24 of 32 dims here: the factor lists are 12 long), at the top level or in the
     * rope object (which wins, as in transformers) */
    const char *prf = "{\"model_type\": \"phi3\", \"vocab_size\": 64, \"hidden_size\": 128, \"intermediate_size\": 48,"
                      " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"partial_rotary_factor\": 0.75,"
                      " \"rope_scaling\": {\"type\": \"longrope\", \"long_factor\": [1,2,3,4,5,6,7,8,9,10,11,12],"
                      " \"short_factor\": [1,1,1,1,1,1,1,1,1,1,1,1]}}";
    assert_int_equal(parse_str(prf, &c), SITS_OK);
    assert_int_equal(c.head_dim, 32);
    assert_int_equal(c.rope_dim, 24);
    float inv[16], inv_long[16];
    sits_model_rope_inv_freq(&c, inv);
    sits_model_rope_inv_freq_long(&c, inv_long);
    for (int i = 0; i < 16; i++) {
        double base = pow(10000.0, -2.0 * i / 24.0);   /* the exponent over the rotary dims, as HF's dim */
        assert_true(i < 12 ? fabs(inv[i] - base) <= 1e-6 * base : inv[i] == 0.0f);
        assert_true(i < 12 ? fabs(inv_long[i] - base / (1 + i)) <= 1e-6 * base : inv_long[i] == 0.0f);
    }
    int perm[32];
    sits_model_rope_perm(&c, perm);   /* pairs (i, i + 12) of HF at (j, j + 16); passing dims 24..31 where inv is 0 */
    static const int want_perm[32] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 24, 25, 26, 27,
                                       12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 28, 29, 30, 31 };
    assert_memory_equal(perm, want_perm, sizeof perm);
    const char *prf_rp = "{\"model_type\": \"phi3\", \"vocab_size\": 64, \"hidden_size\": 128, \"intermediate_size\": 48,"
                         " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"partial_rotary_factor\": 0.75,"
                         " \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 10000.0, \"partial_rotary_factor\": 0.5}}";
    assert_int_equal(parse_str(prf_rp, &c), SITS_OK);
    assert_int_equal(c.rope_dim, 16);
    const char *prf_len = "{\"model_type\": \"phi3\", \"vocab_size\": 64, \"hidden_size\": 128, \"intermediate_size\": 48,"
                          " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"partial_rotary_factor\": 0.75,"
                          " \"rope_scaling\": {\"type\": \"longrope\", \"long_factor\": [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16],"
                          " \"short_factor\": [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}}";
    assert_int_equal(parse_str(prf_len, &c), SITS_ERR_FORMAT);   /* head_dim / 2 factors: HF wants rope_dim / 2 */
    const char *prf_odd = "{\"model_type\": \"phi3\", \"vocab_size\": 64, \"hidden_size\": 128, \"intermediate_size\": 48,"
                          " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"partial_rotary_factor\": 0.71875}";
    assert_int_equal(parse_str(prf_odd, &c), SITS_ERR_UNSUPPORTED);   /* 23 rotary dims: no pairs */
    const char *len = "{\"model_type\": \"phi3\", \"vocab_size\": 64, \"hidden_size\": 64, \"intermediate_size\": 48,"
                      " \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
                      " \"rope_scaling\": {\"type\": \"longrope\", \"long_factor\": [1.0], \"short_factor\": [1.0,1.0,1.0,1.0,1.0,1.0,1.0,1.0]}}";
    assert_int_equal(parse_str(len, &c), SITS_ERR_FORMAT);
}

/* [families] Qwen3-8B's config.json (head_dim given, q/k norms, no bias), and the refusals. */
static void test_qwen3(void **state)
{
    const char *j =
        "{\"architectures\": [\"Qwen3ForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0,"
        " \"bos_token_id\": 151643, \"eos_token_id\": 151645, \"head_dim\": 128, \"hidden_act\": \"silu\","
        " \"hidden_size\": 4096, \"initializer_range\": 0.02, \"intermediate_size\": 12288,"
        " \"max_position_embeddings\": 40960, \"max_window_layers\": 36, \"model_type\": \"qwen3\","
        " \"num_attention_heads\": 32, \"num_hidden_layers\": 36, \"num_key_value_heads\": 8, \"rms_norm_eps\": 1e-06,"
        " \"rope_scaling\": null, \"rope_theta\": 1000000, \"sliding_window\": null, \"tie_word_embeddings\": false,"
        " \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.51.0\", \"use_cache\": true,"
        " \"use_sliding_window\": false, \"vocab_size\": 151936}";
    sits_model_config_t c;
    assert_int_equal(parse_str(j, &c), SITS_OK);
    assert_int_equal(c.arch, SITS_ARCH_QWEN3);
    assert_int_equal(c.head_dim, 128);
    assert_int_equal(c.n_kv_heads, 8);
    assert_int_equal(c.qk_norm, 1);
    assert_int_equal(c.qkv_bias, 0);
    assert_int_equal(c.o_bias, 0);
    assert_int_equal(c.tie_word_embeddings, 0);
    assert_int_equal(c.sliding_window, 0);
    assert_true(c.rope_theta == 1e6);
    const char *sw = "{\"model_type\": \"qwen3\", \"vocab_size\": 64, \"hidden_size\": 32, \"intermediate_size\": 48,"
                     " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"use_sliding_window\": true, \"sliding_window\": 16}";
    assert_int_equal(parse_str(sw, &c), SITS_ERR_UNSUPPORTED);
    const char *lt = "{\"model_type\": \"qwen3\", \"vocab_size\": 64, \"hidden_size\": 32, \"intermediate_size\": 48,"
                     " \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
                     " \"layer_types\": [\"full_attention\", \"sliding_attention\"]}";
    assert_int_equal(parse_str(lt, &c), SITS_ERR_UNSUPPORTED);
    const char *lt_len = "{\"model_type\": \"qwen3\", \"vocab_size\": 64, \"hidden_size\": 32, \"intermediate_size\": 48,"
                         " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"layer_types\": [\"full_attention\"]}";
    assert_int_equal(parse_str(lt_len, &c), SITS_ERR_FORMAT);
}

/* Mistral-7B-Instruct-v0.3 (sliding_window null) and v0.1 (4096), Mistral-Nemo (head_dim 128 != H/nh). */
static void test_mistral(void **state)
{
    const char *v03 =
        "{\"architectures\": [\"MistralForCausalLM\"], \"attention_dropout\": 0.0, \"bos_token_id\": 1,"
        " \"eos_token_id\": 2, \"hidden_act\": \"silu\", \"hidden_size\": 4096, \"initializer_range\": 0.02,"
        " \"intermediate_size\": 14336, \"max_position_embeddings\": 32768, \"model_type\": \"mistral\","
        " \"num_attention_heads\": 32, \"num_hidden_layers\": 32, \"num_key_value_heads\": 8, \"rms_norm_eps\": 1e-05,"
        " \"rope_theta\": 1000000.0, \"sliding_window\": null, \"tie_word_embeddings\": false,"
        " \"torch_dtype\": \"bfloat16\", \"use_cache\": true, \"vocab_size\": 32768}";
    sits_model_config_t c;
    assert_int_equal(parse_str(v03, &c), SITS_OK);
    assert_int_equal(c.arch, SITS_ARCH_MISTRAL);
    assert_int_equal(c.sliding_window, 0);
    assert_int_equal(sits_model_kv_window(&c), 0);
    assert_int_equal(c.qkv_bias + c.o_bias + c.mlp_bias, 0);
    assert_int_equal(c.vocab_size, 32768);

    const char *v01 =
        "{\"model_type\": \"mistral\", \"vocab_size\": 32000, \"hidden_size\": 4096, \"intermediate_size\": 14336,"
        " \"num_hidden_layers\": 32, \"num_attention_heads\": 32, \"num_key_value_heads\": 8,"
        " \"sliding_window\": 4096, \"rope_theta\": 10000.0}";
    assert_int_equal(parse_str(v01, &c), SITS_OK);
    assert_int_equal(c.sliding_window, 4096);
    assert_int_equal(sits_model_kv_window(&c), 4096);   /* [sliding window] every layer */

    const char *nemo =
        "{\"model_type\": \"mistral\", \"vocab_size\": 131072, \"hidden_size\": 5120, \"intermediate_size\": 14336,"
        " \"num_hidden_layers\": 40, \"num_attention_heads\": 32, \"num_key_value_heads\": 8, \"head_dim\": 128,"
        " \"sliding_window\": null, \"rope_theta\": 1000000.0, \"max_position_embeddings\": 1024000}";
    assert_int_equal(parse_str(nemo, &c), SITS_OK);
    assert_int_equal(c.head_dim, 128);
    assert_int_equal(c.hidden_size, 5120);
}

/* attention_bias on Llama gives q/k/v/o bias; mlp_bias gives gate/up/down bias; no model_type falls
 * back to architectures[0]. */
static void test_llama_bias_and_arch_fallback(void **state)
{
    const char *j =
        "{\"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": 64, \"hidden_size\": 32,"
        " \"intermediate_size\": 48, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
        " \"attention_bias\": true, \"mlp_bias\": true, \"tie_word_embeddings\": true}";
    sits_model_config_t c;
    assert_int_equal(parse_str(j, &c), SITS_OK);
    assert_int_equal(c.arch, SITS_ARCH_LLAMA);
    assert_string_equal(c.model_type, "llama");
    assert_int_equal(c.qkv_bias, 1);
    assert_int_equal(c.o_bias, 1);
    assert_int_equal(c.mlp_bias, 1);
    assert_int_equal(c.tie_word_embeddings, 1);
    assert_int_equal(c.head_dim, 8);
    assert_int_equal(c.n_kv_heads, 4);
}

/* Refusals: start from a valid Llama config, change one key (NULL value: delete it). */
static const char *refuse_base =
    "{\"model_type\": \"llama\", \"vocab_size\": 64, \"hidden_size\": 32, \"intermediate_size\": 48,"
    " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"hidden_act\": \"silu\","
    " \"rope_theta\": 10000.0, \"max_position_embeddings\": 256}";

static const struct {
    const char *key;
    const char *value;     /* JSON text; NULL deletes the key */
    sits_status_t want;
    const char *msg;       /* must appear in the log along with WHAT */
    const char *also_delete;
} refusals[] = {
    { "model_type", "\"gemma\"", SITS_ERR_UNSUPPORTED, "model_type", NULL },
    { "model_type", "7", SITS_ERR_FORMAT, "model_type", NULL },
    { "hidden_act", "\"gelu\"", SITS_ERR_UNSUPPORTED, "hidden_act", NULL },
    { "rope_scaling", "{\"type\": \"yarn\"}", SITS_ERR_FORMAT, "rope_scaling.factor", NULL },
    { "rope_scaling", "{\"type\": \"yarn\", \"factor\": 4.0, \"beta_fast\": -1}", SITS_ERR_FORMAT, "beta_fast", NULL },
    /* [rope] partial rotary: phi3 only (transformers' Llama rotates whole heads), a factor in (0, 1] */
    { "partial_rotary_factor", "0.5", SITS_ERR_UNSUPPORTED, "partial_rotary_factor", NULL },
    { "partial_rotary_factor", "1.5", SITS_ERR_FORMAT, "partial_rotary_factor", NULL },
    { "rope_scaling", "{\"rope_type\": \"dynamic\", \"factor\": 2.0}", SITS_ERR_UNSUPPORTED, "rope_scaling.rope_type", NULL },
    /* [families] longrope is read now: without its factor lists it is malformed */
    { "rope_parameters", "{\"rope_type\": \"longrope\", \"rope_theta\": 10000.0}", SITS_ERR_FORMAT,
      "rope_parameters.short_factor", NULL },
    { "rope_scaling", "{\"rope_type\": \"llama3\", \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0}",
      SITS_ERR_FORMAT, "rope_scaling.factor", NULL },
    { "rope_scaling", "{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 4.0, \"high_freq_factor\": 4.0}",
      SITS_ERR_FORMAT, "high_freq_factor", NULL },
    { "rope_scaling", "{\"rope_type\": \"linear\", \"factor\": 0}", SITS_ERR_FORMAT, "factor", NULL },
    { "rope_scaling", "[1, 2]", SITS_ERR_FORMAT, "rope_scaling", NULL },
    { "rope_theta", "-1", SITS_ERR_FORMAT, "rope_theta", NULL },
    /* RoPE tables out of float's range: 1e-300 is 0 in fp32 (infinite frequencies); 1e-40 divides them past FLT_MAX */
    { "rope_theta", "1e-300", SITS_ERR_FORMAT, "RoPE frequency", NULL },
    { "rope_scaling", "{\"rope_type\": \"linear\", \"factor\": 1e-40}", SITS_ERR_FORMAT, "RoPE frequency", NULL },
    { "head_dim", "70000", SITS_ERR_FORMAT, "head_dim", NULL },
    { "hidden_size", "0", SITS_ERR_FORMAT, "hidden_size", NULL },
    { "hidden_size", "\"32\"", SITS_ERR_FORMAT, "hidden_size", NULL },
    { "hidden_size", "3.5", SITS_ERR_FORMAT, "hidden_size", NULL },
    { "vocab_size", "-5", SITS_ERR_FORMAT, "vocab_size", NULL },
    { "vocab_size", NULL, SITS_ERR_FORMAT, "vocab_size", NULL },
    { "intermediate_size", "0", SITS_ERR_FORMAT, "intermediate_size", NULL },
    { "num_hidden_layers", "-1", SITS_ERR_FORMAT, "num_hidden_layers", NULL },
    { "num_attention_heads", "0", SITS_ERR_FORMAT, "num_attention_heads", NULL },
    { "num_key_value_heads", "3", SITS_ERR_FORMAT, "num_key_value_heads", NULL },
    { "num_key_value_heads", "0", SITS_ERR_FORMAT, "num_key_value_heads", NULL },
    { "head_dim", "7", SITS_ERR_FORMAT, "head_dim", NULL },
    { "head_dim", "-8", SITS_ERR_FORMAT, "head_dim", NULL },
    /* 32 % 5 != 0 and no head_dim (num_key_value_heads deleted so that it defaults to 5) */
    { "num_attention_heads", "5", SITS_ERR_FORMAT, "head_dim", "num_key_value_heads" },
    { "rms_norm_eps", "0", SITS_ERR_FORMAT, "rms_norm_eps", NULL },
    { "tie_word_embeddings", "\"yes\"", SITS_ERR_FORMAT, "tie_word_embeddings", NULL },
    { "eos_token_id", "[1, 2, 3, 4, 5, 6, 7, 8, 9]", SITS_ERR_UNSUPPORTED, "eos_token_id", NULL },
    { "eos_token_id", "[1, \"x\"]", SITS_ERR_FORMAT, "eos_token_id", NULL },
    { "eos_token_id", "\"</s>\"", SITS_ERR_FORMAT, "eos_token_id", NULL },
    { "max_position_embeddings", "0", SITS_ERR_FORMAT, "max_position_embeddings", NULL },
    { "model_type", NULL, SITS_ERR_FORMAT, "model_type", NULL }, /* and no architectures */
};

static void test_refusals(void **state)
{
    int failed = 0;
    for (size_t i = 0; i < sizeof refusals / sizeof refusals[0]; i++) {
        json_t *root = json_loads(refuse_base, 0, NULL);
        assert_non_null(root);
        if (refusals[i].value) {
            json_t *v = json_loads(refusals[i].value, JSON_DECODE_ANY, NULL);
            assert_non_null(v);
            json_object_set_new(root, refusals[i].key, v);
        } else {
            json_object_del(root, refusals[i].key);
        }
        if (refusals[i].also_delete) json_object_del(root, refusals[i].also_delete);
        char *text = json_dumps(root, 0);
        json_decref(root);
        sits_model_config_t c;
        memset(&c, 0x5a, sizeof c);
        tm_capture_t cap;
        tm_capture_begin(&cap);
        sits_status_t st = parse_str(text, &c);
        char *log = tm_capture_end(&cap);
        unsigned char untouched = 1;
        for (size_t b = 0; b < sizeof c; b++) untouched &= ((unsigned char *)&c)[b] == 0x5a;
        if (st != refusals[i].want || !strstr(log, WHAT) || !strstr(log, refusals[i].msg) || !untouched) {
            printf("refusal %zu (%s = %s): status %d want %d, log %s\"%s\", cfg %s\n", i, refusals[i].key,
                   refusals[i].value ? refusals[i].value : "(deleted)", st, refusals[i].want,
                   strstr(log, refusals[i].msg) ? "has " : "LACKS ", refusals[i].msg,
                   untouched ? "untouched" : "MODIFIED");
            failed++;
        }
        free(log);
        free(text);
    }
    /* Not JSON, and not an object. */
    sits_model_config_t c;
    assert_int_equal(parse_str("{\"model_type\": \"llama\",", &c), SITS_ERR_FORMAT);
    assert_int_equal(parse_str("[1, 2, 3]", &c), SITS_ERR_FORMAT);
    assert_int_equal(parse_str("", &c), SITS_ERR_FORMAT);
    const char *qwen_sw =
        "{\"model_type\": \"qwen2\", \"vocab_size\": 64, \"hidden_size\": 32, \"intermediate_size\": 48,"
        " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"use_sliding_window\": true, \"sliding_window\": 16}";
    assert_int_equal(parse_str(qwen_sw, &c), SITS_ERR_UNSUPPORTED);
    const char *bad_arch = "{\"architectures\": [\"GemmaForCausalLM\"], \"vocab_size\": 64, \"hidden_size\": 32,"
                           " \"intermediate_size\": 48, \"num_hidden_layers\": 2, \"num_attention_heads\": 4}";
    assert_int_equal(parse_str(bad_arch, &c), SITS_ERR_UNSUPPORTED);
    assert_int_equal(failed, 0);
}

/* The committed tiny checkpoints' config.json, as transformers 5 saved them. */
static void test_load_dirs(void **state)
{
    sits_model_config_t c;
    assert_int_equal(sits_model_config_load(SITS_TEST_DATA_DIR "/tiny_llama", &c), SITS_OK);
    assert_int_equal(c.arch, SITS_ARCH_LLAMA);
    assert_int_equal(c.hidden_size, 32);
    assert_int_equal(c.n_kv_heads, 2);
    assert_int_equal(c.head_dim, 8);
    assert_int_equal(c.tie_word_embeddings, 0);
    assert_int_equal(sits_model_config_load(SITS_TEST_DATA_DIR "/tiny_qwen2", &c), SITS_OK);
    assert_int_equal(c.arch, SITS_ARCH_QWEN2);
    assert_int_equal(c.tie_word_embeddings, 1);
    assert_int_equal(c.qkv_bias, 1);
    assert_int_equal(c.bos_token_id, -1); /* null */
    assert_int_equal(c.n_eos, 0);
    assert_int_equal(sits_model_config_load(SITS_TEST_DATA_DIR "/no_such_dir", &c), SITS_ERR_NOT_FOUND);
}

/* inv_freq against transformers' LlamaRotaryEmbedding (fp32): within a few fp32 ulps. */
static void test_rope_inv_freq(void **state)
{
    json_error_t jerr;
    json_t *cases = json_load_file(SITS_TEST_DATA_DIR "/rope_expected.json", 0, &jerr);
    if (!cases) fail_msg("rope_expected.json: %s", jerr.text);
    assert_true(json_array_size(cases) >= 6);
    size_t bad = 0, i;
    json_t *cs;
    json_array_foreach(cases, i, cs) {
        const char *name = json_string_value(json_object_get(cs, "name"));
        char *text = json_dumps(json_object_get(cs, "config"), 0);
        sits_model_config_t c;
        assert_int_equal(parse_str(text, &c), SITS_OK);
        free(text);
        const json_t *want = json_object_get(cs, "inv_freq");
        size_t n = json_array_size(want);
        assert_int_equal(n, (size_t)c.rope_dim / 2);   /* [rope] HF's: the rotary pairs only */
        float *got = calloc((size_t)c.head_dim / 2, sizeof *got);
        double *ref = calloc(n, sizeof *ref);
        assert_non_null(got);
        assert_non_null(ref);
        for (size_t k = 0; k < n; k++) ref[k] = json_number_value(json_array_get(want, k));
        sits_model_rope_inv_freq(&c, got);
        for (size_t k = n; k < (size_t)c.head_dim / 2; k++) assert_true(got[k] == 0.0f);   /* the passing pairs */
        printf("%s (rope type %d, head_dim %d, rotary %d):\n", name, (int)c.rope_type, c.head_dim, c.rope_dim);
        bad += tm_compare(name, got, ref, n, 0.0, 2e-6);
        /* HF's fp32 arithmetic, step by step: the same floats, but where torch's vectorised powf and libm's
         * round apart (about one entry in a hundred), by one ulp. (Double arithmetic rounded once at the end
         * differed in 11-21 entries of these tables.) */
        size_t differ = 0;
        for (size_t k = 0; k < n; k++) {
            float want = (float)ref[k];
            if (got[k] == want) continue;
            differ++;
            if (nextafterf(want, INFINITY) != got[k] && nextafterf(want, -INFINITY) != got[k]) bad++;
        }
        printf("  %s: %zu of %zu entries differ from transformers' floats (by one ulp)\n", name, differ, n);
        if (differ > n / 32) bad++;
        free(got);
        free(ref);
    }
    json_decref(cases);
    assert_int_equal(bad, 0);
}

/* Hand-checked llama3 regions (REFERENCE.md formula), independent of the fixture. */
/* [rope] YaRN as Qwen's model cards add it (rope_scaling {type yarn, factor 4, original_max_position_embeddings
 * 32768}) and its optional keys; the frequencies themselves are checked against transformers' logits by the
 * qwen3_yarn fixture (tests/integration/families.sh). */
static void test_rope_yarn(void **state)
{
    (void)state;
    const char *base = "{\"model_type\": \"qwen3\", \"vocab_size\": 64, \"hidden_size\": 64, \"intermediate_size\": 48,"
                       " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"head_dim\": 128, \"max_position_embeddings\": 40960,"
                       " \"rope_theta\": 1000000, \"rope_scaling\": {\"rope_type\": \"yarn\", %s}}";
    char j[1024];
    sits_model_config_t c;
    snprintf(j, sizeof j, base, "\"factor\": 4.0, \"original_max_position_embeddings\": 32768");
    assert_int_equal(parse_str(j, &c), SITS_OK);
    assert_int_equal(c.rope_type, SITS_ROPE_YARN);
    assert_int_equal(c.rope_orig_max_pos, 32768);
    assert_true(c.rope_factor == 4.0 && c.rope_beta_fast == 32.0 && c.rope_beta_slow == 1.0 && c.rope_truncate == 1);
    assert_true(fabs(c.rope_attn_factor - (0.1 * log(4.0) + 1.0)) < 1e-12);   /* yarn_get_mscale(4) */
    float inv[64];
    sits_model_rope_inv_freq(&c, inv);
    for (int i = 0; i < 64; i++) {   /* between interpolation (1 / (4 theta^(2i / d))) and extrapolation, monotone */
        double ex = pow(1e6, -2.0 * i / 128.0);
        assert_true(inv[i] <= ex * (1 + 1e-6) && inv[i] >= ex / 4 * (1 - 1e-6));
        if (i) assert_true(inv[i] < inv[i - 1]);
    }
    assert_true(fabs(inv[0] - 1.0) < 1e-7 && fabs(inv[63] - pow(1e6, -126.0 / 128.0) / 4) < 1e-6 * inv[63]);
    /* no original length: max_position_embeddings (transformers 5.25's reading); mscale / mscale_all_dim; null factor */
    snprintf(j, sizeof j, base, "\"factor\": 2.0, \"mscale\": 0.707, \"mscale_all_dim\": 1.0, \"beta_fast\": 0, \"truncate\": false");
    assert_int_equal(parse_str(j, &c), SITS_OK);
    assert_int_equal(c.rope_orig_max_pos, 40960);
    assert_true(fabs(c.rope_attn_factor - (0.1 * 0.707 * log(2.0) + 1.0) / (0.1 * log(2.0) + 1.0)) < 1e-12);
    assert_true(c.rope_beta_fast == 32.0 && c.rope_truncate == 0);
    snprintf(j, sizeof j, base, "\"factor\": null, \"original_max_position_embeddings\": 10240, \"attention_factor\": 1.25");
    assert_int_equal(parse_str(j, &c), SITS_OK);
    assert_true(c.rope_factor == 4.0 && c.rope_attn_factor == 1.25);
}

static void test_rope_llama3_regions(void **state)
{
    sits_model_config_t c;
    assert_int_equal(parse_str(llama31, &c), SITS_OK);
    float inv[64];
    sits_model_rope_inv_freq(&c, inv);
    const double pi2 = 2.0 * 3.14159265358979323846;
    int n_hi = 0, n_lo = 0, n_mid = 0;
    for (int i = 0; i < 64; i++) {
        double base = 1.0 / pow(500000.0, 2.0 * i / 128.0), wl = pi2 / base;
        double want;
        if (wl < 8192.0 / 4.0) { want = base; n_hi++; }
        else if (wl > 8192.0) { want = base / 8.0; n_lo++; }
        else {
            double s = (8192.0 / wl - 1.0) / 3.0;
            want = (1.0 - s) * base / 8.0 + s * base;
            n_mid++;
        }
        assert_true(fabs(inv[i] - want) <= 1e-6 * want);
    }
    /* All three regions are exercised. */
    assert_true(n_hi > 0 && n_lo > 0 && n_mid > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama31),
        cmocka_unit_test(test_rope_parameters_v5),
        cmocka_unit_test(test_legacy_type_linear),
        cmocka_unit_test(test_legacy_type_llama3),
        cmocka_unit_test(test_qwen2),
        cmocka_unit_test(test_qwen3),
        cmocka_unit_test(test_gemma2),
        cmocka_unit_test(test_gemma3),
        cmocka_unit_test(test_gemma3_multimodal),
        cmocka_unit_test(test_multimodal_text),
        cmocka_unit_test(test_granite),
        cmocka_unit_test(test_glm),
        cmocka_unit_test(test_smollm3),
        cmocka_unit_test(test_phi3),
        cmocka_unit_test(test_mistral),
        cmocka_unit_test(test_llama_bias_and_arch_fallback),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_load_dirs),
        cmocka_unit_test(test_rope_inv_freq),
        cmocka_unit_test(test_rope_llama3_regions),
        cmocka_unit_test(test_rope_yarn),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
