/* moe_config.c -- [moe] the Mixture-of-Experts keys of config.json (Mixtral, Qwen2-MoE); see config.h.
 *
 * Invariants of a parsed MoE config: 1 <= top_k <= n_experts, moe_inter > 0, shared_inter >= 0
 * (0: no shared expert); every layer is sparse (Qwen2-MoE's decoder_sparse_step 1, no
 * mlp_only_layers). Dense model_types leave cfg->moe zeroed. Every refusal names the file and the key. */
#include "model/config.h"

#include <math.h>
#include <string.h>
#include <jansson.h>

#include "util/log.h"

/* An integer key (absent / null -> def); SITS_ERR_FORMAT naming the key otherwise. */
static sits_status_t moe_int(const json_t *root, const char *key, const char *what, int required, int def, int *out_p)
{
    const json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        if (required) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: %s: missing required key", what, key);
            return SITS_ERR_FORMAT;
        }
        *out_p = def;
        return SITS_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1 << 30) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: %s: expected a non-negative integer", what, key);
        return SITS_ERR_FORMAT;
    }
    *out_p = (int)json_integer_value(v);
    return SITS_OK;
}

/* [gpt-oss] A positive finite number key (absent / null -> def). */
static sits_status_t moe_float(const json_t *root, const char *key, const char *what, double def, float *out_p)
{
    const json_t *v = json_object_get(root, key);
    double d = def;
    if (v && !json_is_null(v)) {
        if (!json_is_number(v) || !(json_number_value(v) > 0.0) || !isfinite(json_number_value(v))) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: %s: expected a positive number", what, key);
            return SITS_ERR_FORMAT;
        }
        d = json_number_value(v);
    }
    *out_p = (float)d;
    return SITS_OK;
}

sits_status_t sits_model_moe_config_parse(const void *json_root, const char *what, sits_model_config_t *cfg)
{
    const json_t *root = json_root;
    memset(&cfg->moe, 0, sizeof cfg->moe);
    int mixtral = !strcmp(cfg->model_type, "mixtral"), qwen2_moe = !strcmp(cfg->model_type, "qwen2_moe");
    int qwen3_moe = !strcmp(cfg->model_type, "qwen3_moe");   /* Qwen2-MoE's keys, no shared expert */
    int gpt_oss = !strcmp(cfg->model_type, "gpt_oss");
    if (!mixtral && !qwen2_moe && !qwen3_moe && !gpt_oss) return SITS_OK;
    if (gpt_oss) {   /* [gpt-oss] softmax over the top-k logits (= renormalised top-k), biases, the clamped SwiGLU */
        SITS_CHECK(moe_int(root, "num_local_experts", what, 0, 128, &cfg->moe.n_experts));
        const json_t *ek = json_object_get(root, "num_experts_per_tok");
        SITS_CHECK(moe_int(root, ek && !json_is_null(ek) ? "num_experts_per_tok" : "experts_per_token", what, 0, 4,
                           &cfg->moe.top_k));
        cfg->moe.moe_inter = cfg->intermediate_size;
        cfg->moe.norm_topk = cfg->moe.router_bias = cfg->moe.expert_bias = cfg->moe.act_oai = 1;
        SITS_CHECK(moe_float(root, "swiglu_alpha", what, 1.702, &cfg->moe.swiglu_alpha));
        SITS_CHECK(moe_float(root, "swiglu_limit", what, 7.0, &cfg->moe.swiglu_limit));
    } else if (mixtral) {
        SITS_CHECK(moe_int(root, "num_local_experts", what, 0, 8, &cfg->moe.n_experts));
        SITS_CHECK(moe_int(root, "num_experts_per_tok", what, 0, 2, &cfg->moe.top_k));
        cfg->moe.moe_inter = cfg->intermediate_size;
        cfg->moe.norm_topk = 1;   /* MixtralTopKRouter: always */
    } else {
        /* the Hub's Qwen configs say num_experts; transformers 5 writes its attribute name num_local_experts */
        const json_t *ne = json_object_get(root, "num_experts");
        int alias = (!ne || json_is_null(ne)) && json_object_get(root, "num_local_experts");
        /* the config classes' defaults where a key is absent: Qwen2MoeConfig 60 / 4 / 1408, Qwen3MoeConfig 128 / 8 / 768 */
        SITS_CHECK(moe_int(root, alias ? "num_local_experts" : "num_experts", what, 0, qwen3_moe ? 128 : 60, &cfg->moe.n_experts));
        SITS_CHECK(moe_int(root, "num_experts_per_tok", what, 0, qwen3_moe ? 8 : 4, &cfg->moe.top_k));
        SITS_CHECK(moe_int(root, "moe_intermediate_size", what, 0, qwen3_moe ? 768 : 1408, &cfg->moe.moe_inter));
        SITS_CHECK(moe_int(root, "shared_expert_intermediate_size", what, 0, qwen3_moe ? 0 : 5632, &cfg->moe.shared_inter));
        if (qwen3_moe && cfg->moe.shared_inter) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: shared_expert_intermediate_size: qwen3_moe has no shared expert", what);
            return SITS_ERR_UNSUPPORTED;
        }
        const json_t *nt = json_object_get(root, "norm_topk_prob");
        if (nt && !json_is_null(nt) && !json_is_boolean(nt)) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: norm_topk_prob: expected true or false", what);
            return SITS_ERR_FORMAT;
        }
        cfg->moe.norm_topk = nt && json_is_true(nt);
        int step;
        SITS_CHECK(moe_int(root, "decoder_sparse_step", what, 0, 1, &step));
        if (step != 1) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: decoder_sparse_step: %d is not supported (1: every layer sparse)", what, step);
            return SITS_ERR_UNSUPPORTED;
        }
        const json_t *dense = json_object_get(root, "mlp_only_layers");
        if (dense && !json_is_null(dense) && (!json_is_array(dense) || json_array_size(dense) > 0)) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: mlp_only_layers: dense layers among sparse ones are not supported (only [])", what);
            return SITS_ERR_UNSUPPORTED;
        }
    }
    const char *ekey = mixtral || gpt_oss ? "num_local_experts" : "num_experts";
    if (cfg->moe.n_experts < 1) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: %s: must be > 0 (got %d)", what, ekey, cfg->moe.n_experts);
        return SITS_ERR_FORMAT;
    }
    if (cfg->moe.top_k < 1 || cfg->moe.top_k > cfg->moe.n_experts) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: num_experts_per_tok: %d outside [1, %s = %d]", what, cfg->moe.top_k, ekey,
                   cfg->moe.n_experts);
        return SITS_ERR_FORMAT;
    }
    if (cfg->moe.moe_inter < 1) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: %s: must be > 0", what, mixtral || gpt_oss ? "intermediate_size" : "moe_intermediate_size");
        return SITS_ERR_FORMAT;
    }
    SITS_INFO(SITS_SUB_MODEL, "%s: mixture of experts: %d experts, top %d%s, expert ffn %d, shared expert ffn %d%s", what,
              cfg->moe.n_experts, cfg->moe.top_k, cfg->moe.norm_topk ? " renormalised" : "", cfg->moe.moe_inter,
              cfg->moe.shared_inter, cfg->moe.act_oai ? ", biases, clamped SwiGLU" : "");
    return SITS_OK;
}
