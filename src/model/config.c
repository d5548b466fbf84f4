/* config.c -- parse a HF config.json (Llama 2/3/3.1, Mistral, Qwen2) into sits_model_config_t and
 * compute RoPE inverse frequencies with the configured scaling.
 *
 * Invariants of a parsed config: every size > 0, n_heads % n_kv_heads == 0, head_dim even,
 * rope_type one of default/linear/llama3 with factor > 0 (and, for llama3, high_freq_factor >
 * low_freq_factor > 0, orig_max_pos > 0), n_eos <= SITS_MAX_EOS. Biases follow what HF's modeling
 * code builds for the architecture: Llama q/k/v/o bias = attention_bias, MLP bias = mlp_bias;
 * Qwen2 q/k/v bias always, no o or MLP bias; Mistral no bias at all.
 * Every refusal names the file and the key. */
#include "model/config.h"
#include "model/int4.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

#include "util/log.h"

/* Largest config.json we read (real ones are a few KiB). */
#define CONFIG_MAX_BYTES (16u << 20)
#define CONFIG_MAX_HEAD_DIM 65536 /* head_dim above any model's (256 .. 512 in practice) */

/* An optional integer key: absent or null -> def (or an error when required). */
static sits_status_t get_int(const json_t *obj, const char *key, const char *what, const char *scope,
                             int required, int def, int *out_p)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        if (required) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: %s%s: missing required key", what, scope, key);
            return SITS_ERR_FORMAT;
        }
        *out_p = def;
        return SITS_OK;
    }
    json_int_t i;
    if (json_is_integer(v)) {
        i = json_integer_value(v);
    } else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
               fabs(json_real_value(v)) < 2147483648.0) {
        i = (json_int_t)json_real_value(v); /* 8192.0 written by some exporters */
    } else {
        SITS_ERROR(SITS_SUB_MODEL, "%s: %s%s: expected an integer", what, scope, key);
        return SITS_ERR_FORMAT;
    }
    if (i < -2147483647LL || i > 2147483647LL) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: %s%s: %lld out of range", what, scope, key, (long long)i);
        return SITS_ERR_FORMAT;
    }
    *out_p = (int)i;
    return SITS_OK;
}

static sits_status_t get_num(const json_t *obj, const char *key, const char *what, const char *scope,
                             int required, double def, double *out_p)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        if (required) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: %s%s: missing required key", what, scope, key);
            return SITS_ERR_FORMAT;
        }
        *out_p = def;
        return SITS_OK;
    }
    if (!json_is_number(v)) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: %s%s: expected a number", what, scope, key);
        return SITS_ERR_FORMAT;
    }
    *out_p = json_number_value(v);
    return SITS_OK;
}

static sits_status_t get_bool(const json_t *obj, const char *key, const char *what, int def, int *out_p)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) { *out_p = def; return SITS_OK; }
    if (!json_is_boolean(v)) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: %s: expected true or false", what, key);
        return SITS_ERR_FORMAT;
    }
    *out_p = json_is_true(v);
    return SITS_OK;
}

/* Size keys must be > 0. */
static sits_status_t check_positive(int v, const char *key, const char *what)
{
    if (v <= 0) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: %s: must be > 0 (got %d)", what, key, v);
        return SITS_ERR_FORMAT;
    }
    return SITS_OK;
}

static sits_status_t parse_arch(const json_t *root, const char *what, sits_model_config_t *cfg)
{
    static const struct { const char *model_type, *architecture; sits_arch_t arch; } known[] = {
        { "llama", "LlamaForCausalLM", SITS_ARCH_LLAMA },
        { "mistral", "MistralForCausalLM", SITS_ARCH_MISTRAL },
        { "qwen2", "Qwen2ForCausalLM", SITS_ARCH_QWEN2 },
        { "qwen3", "Qwen3ForCausalLM", SITS_ARCH_QWEN3 },   /* [families] */
        { "gemma2", "Gemma2ForCausalLM", SITS_ARCH_GEMMA2 },
        { "gemma3_text", "Gemma3ForCausalLM", SITS_ARCH_GEMMA3 },
        { "phi3", "Phi3ForCausalLM", SITS_ARCH_PHI3 },
        { "granite", "GraniteForCausalLM", SITS_ARCH_LLAMA },        /* [granite] Llama with four multipliers */
        { "glm", "GlmForCausalLM", SITS_ARCH_LLAMA },                /* [glm] parse_root's glm part */
        { "smollm3", "SmolLM3ForCausalLM", SITS_ARCH_LLAMA },        /* [smollm3] Llama with NoPE layers */
        { "glm4", "Glm4ForCausalLM", SITS_ARCH_LLAMA },
        { "mixtral", "MixtralForCausalLM", SITS_ARCH_MISTRAL },      /* [moe] Mistral attention */
        { "qwen2_moe", "Qwen2MoeForCausalLM", SITS_ARCH_QWEN2 },     /* [moe] Qwen2 attention */
        { "qwen3_moe", "Qwen3MoeForCausalLM", SITS_ARCH_QWEN3 },     /* [moe] Qwen3 attention (q/k norms) */
        { "gpt_oss", "GptOssForCausalLM", SITS_ARCH_LLAMA },         /* [gpt-oss] parse_gpt_oss */
    };
    const size_t n_known = sizeof known / sizeof known[0];
    const json_t *mt = json_object_get(root, "model_type");
    if (mt && !json_is_null(mt)) {
        if (!json_is_string(mt)) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: model_type: expected a string", what);
            return SITS_ERR_FORMAT;
        }
        for (size_t i = 0; i < n_known; i++) {
            if (!strcmp(json_string_value(mt), known[i].model_type)) {
                cfg->arch = known[i].arch;
                snprintf(cfg->model_type, sizeof cfg->model_type, "%s", known[i].model_type);
                return SITS_OK;
            }
        }
        SITS_ERROR(SITS_SUB_MODEL, "%s: model_type: \"%s\" is not supported (llama, mistral, qwen2, qwen3, gemma2, gemma3_text, phi3, granite, glm, glm4, smollm3, mixtral, qwen2_moe, qwen3_moe, gpt_oss, "
                   "and the language model of gemma3, mistral3, qwen2_vl, qwen2_5_vl)", what,
                   json_string_value(mt));
        return SITS_ERR_UNSUPPORTED;
    }
    /* No model_type: fall back to the first architectures[] entry. */
    const json_t *archs = json_object_get(root, "architectures");
    const json_t *a0 = json_is_array(archs) ? json_array_get(archs, 0) : NULL;
    if (!json_is_string(a0)) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: model_type: missing, and no architectures[] to fall back on", what);
        return SITS_ERR_FORMAT;
    }
    for (size_t i = 0; i < n_known; i++) {
        if (!strcmp(json_string_value(a0), known[i].architecture)) {
            cfg->arch = known[i].arch;
            snprintf(cfg->model_type, sizeof cfg->model_type, "%s", known[i].model_type);
            return SITS_OK;
        }
    }
    SITS_ERROR(SITS_SUB_MODEL, "%s: architectures: \"%s\" is not supported (no model_type given)", what,
               json_string_value(a0));
    return SITS_ERR_UNSUPPORTED;
}

/* [families] A longrope factor list: head_dim / 2 positive numbers into out. */
static sits_status_t get_factors(const json_t *rp, const char *key, const char *what, const char *scope, int half, float *out)
{
    const json_t *a = json_object_get(rp, key);
    if (!json_is_array(a) || json_array_size(a) != (size_t)half) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: %s%s: expected a list of (rotary) head_dim / 2 = %d numbers", what, scope, key, half);
        return SITS_ERR_FORMAT;
    }
    for (int i = 0; i < half; i++) {
        const json_t *v = json_array_get(a, (size_t)i);
        if (!json_is_number(v) || !(json_number_value(v) > 0.0)) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: %s%s[%d]: expected a number > 0", what, scope, key, i);
            return SITS_ERR_FORMAT;
        }
        out[i] = (float)json_number_value(v);
    }
    return SITS_OK;
}

/* [rope] original_max_position_embeddings of the llama3 / longrope / yarn types as transformers reads config.json:
 * the rope object's, else max_position_embeddings; Phi-3 (Phi3Config's own field, default 4096) the top level's,
 * whatever the rope object says. */
static sits_status_t get_orig_max_pos(const json_t *root, const json_t *rp, const char *what, const char *scope,
                                      sits_model_config_t *cfg)
{
    if (cfg->arch == SITS_ARCH_PHI3)
        SITS_CHECK(get_int(root, "original_max_position_embeddings", what, "", 0, 4096, &cfg->rope_orig_max_pos));
    else
        SITS_CHECK(get_int(rp, "original_max_position_embeddings", what, scope, 0, cfg->max_position_embeddings,
                           &cfg->rope_orig_max_pos));
    return check_positive(cfg->rope_orig_max_pos, "original_max_position_embeddings", what);
}

/* [families] rope type longrope (Phi-3): factors, original length, attention factor as HF's
 * _compute_longrope_parameters derives them. head_dim and rope_dim are known (parse_rope reads them first). */
static sits_status_t parse_longrope(const json_t *root, const json_t *rp, const char *what, const char *scope,
                                    sits_model_config_t *cfg)
{
    int half = cfg->rope_dim / 2;
    if (half > SITS_MAX_ROPE_HALF) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: head_dim: %d rotary dims, at most %d with longrope", what, cfg->rope_dim,
                   2 * SITS_MAX_ROPE_HALF);
        return SITS_ERR_UNSUPPORTED;
    }
    cfg->rope_type = SITS_ROPE_LONGROPE;
    SITS_CHECK(get_factors(rp, "short_factor", what, scope, half, cfg->rope_short));
    SITS_CHECK(get_factors(rp, "long_factor", what, scope, half, cfg->rope_long));
    SITS_CHECK(get_orig_max_pos(root, rp, what, scope, cfg));
    SITS_CHECK(get_num(rp, "factor", what, scope, 0, (double)cfg->max_position_embeddings / cfg->rope_orig_max_pos,
                       &cfg->rope_factor));
    double af = cfg->rope_factor <= 1.0 ? 1.0 : sqrt(1.0 + log(cfg->rope_factor) / log((double)cfg->rope_orig_max_pos));
    SITS_CHECK(get_num(rp, "attention_factor", what, scope, 0, af, &cfg->rope_attn_factor));
    if (!(cfg->rope_attn_factor > 0.0)) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: %sattention_factor: must be > 0 (got %g)", what, scope, cfg->rope_attn_factor);
        return SITS_ERR_FORMAT;
    }
    return SITS_OK;
}

/* [rope] YaRN's mscale (HF yarn_get_mscale): 0.1 m ln(scale) + 1, 1 for scale <= 1 */
static double yarn_mscale(double scale, double m)
{
    return scale <= 1.0 ? 1.0 : 0.1 * m * log(scale) + 1.0;
}

/* [rope] rope type yarn, as HF's _compute_yarn_parameters reads it: factor (null: max_position_embeddings /
 * original), original_max_position_embeddings, attention_factor (absent: mscale(factor, mscale) /
 * mscale(factor, mscale_all_dim) when both are given and non-zero, else mscale(factor)), beta_fast (absent or 0:
 * 32), beta_slow (1), truncate (true). */
static sits_status_t parse_yarn(const json_t *root, const json_t *rp, const char *what, const char *scope,
                                sits_model_config_t *cfg)
{
    cfg->rope_type = SITS_ROPE_YARN;
    SITS_CHECK(get_orig_max_pos(root, rp, what, scope, cfg));
    const json_t *f = json_object_get(rp, "factor");
    if (!f) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: %sfactor: missing required key", what, scope);
        return SITS_ERR_FORMAT;
    }
    SITS_CHECK(get_num(rp, "factor", what, scope, 0, (double)cfg->max_position_embeddings / cfg->rope_orig_max_pos,
                       &cfg->rope_factor));
    double ms, msa;
    SITS_CHECK(get_num(rp, "mscale", what, scope, 0, 0.0, &ms));
    SITS_CHECK(get_num(rp, "mscale_all_dim", what, scope, 0, 0.0, &msa));
    double af = ms != 0.0 && msa != 0.0 ? yarn_mscale(cfg->rope_factor, ms) / yarn_mscale(cfg->rope_factor, msa)
                                        : yarn_mscale(cfg->rope_factor, 1.0);
    SITS_CHECK(get_num(rp, "attention_factor", what, scope, 0, af, &cfg->rope_attn_factor));
    if (!(cfg->rope_attn_factor > 0.0)) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: %sattention_factor: must be > 0 (got %g)", what, scope, cfg->rope_attn_factor);
        return SITS_ERR_FORMAT;
    }
    SITS_CHECK(get_num(rp, "beta_fast", what, scope, 0, 32.0, &cfg->rope_beta_fast));
    SITS_CHECK(get_num(rp, "beta_slow", what, scope, 0, 1.0, &cfg->rope_beta_slow));
    if (cfg->rope_beta_fast == 0.0) cfg->rope_beta_fast = 32.0;   /* HF: `or 32` */
    if (cfg->rope_beta_slow == 0.0) cfg->rope_beta_slow = 1.0;
    if (!(cfg->rope_beta_fast > 0.0) || !(cfg->rope_beta_slow > 0.0)) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: %sbeta_fast / beta_slow: must be > 0 (got %g, %g)", what, scope, cfg->rope_beta_fast,
                   cfg->rope_beta_slow);
        return SITS_ERR_FORMAT;
    }
    SITS_CHECK(get_bool(rp, "truncate", what, 1, &cfg->rope_truncate));
    return SITS_OK;
}

/* [rope] rope_dim from partial_rotary_factor: the rope object's, else the top level's, else 1 (HF's order of
 * priority); int(head_dim x factor) as HF computes it, which must be even (pairs) and at least 2. */
static sits_status_t parse_rope_dim(const json_t *root, const json_t *rp, const char *what, const char *scope,
                                    sits_model_config_t *cfg)
{
    double prf;
    const char *where = "";
    const int glm = !strcmp(cfg->model_type, "glm") || !strcmp(cfg->model_type, "glm4");   /* [glm] 0.5 by default */
    SITS_CHECK(get_num(root, "partial_rotary_factor", what, "", 0, glm ? 0.5 : 1.0, &prf));
    if (rp && json_object_get(rp, "partial_rotary_factor") && !json_is_null(json_object_get(rp, "partial_rotary_factor"))) {
        SITS_CHECK(get_num(rp, "partial_rotary_factor", what, scope, 0, prf, &prf));
        where = scope;
    }
    if (!(prf > 0.0 && prf <= 1.0)) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: %spartial_rotary_factor: must be in (0, 1] (got %g)", what, where, prf);
        return SITS_ERR_FORMAT;
    }
    cfg->rope_dim = (int)((double)cfg->head_dim * prf);
    if (cfg->rope_dim < 2 || cfg->rope_dim % 2 != 0) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: %spartial_rotary_factor: %g of head_dim %d is %d rotary dims: not supported (an even "
                   "number >= 2 is needed)", what, where, prf, cfg->head_dim, cfg->rope_dim);
        return SITS_ERR_UNSUPPORTED;
    }
    return SITS_OK;
}

/* rope_theta, and rope_parameters (transformers v5) or rope_scaling (older) with rope_type or the
 * legacy `type` key. */
static sits_status_t parse_rope(const json_t *root, const char *what, sits_model_config_t *cfg)
{
    const char *scope_key = "rope_parameters";
    const json_t *rp = json_object_get(root, scope_key);
    if (!rp || json_is_null(rp)) {
        scope_key = "rope_scaling";
        rp = json_object_get(root, scope_key);
    }
    SITS_CHECK(get_num(root, "rope_theta", what, "", 0, 10000.0, &cfg->rope_theta));
    cfg->rope_type = SITS_ROPE_DEFAULT;
    cfg->rope_factor = 1.0;
    cfg->rope_low_freq_factor = 0.0;
    cfg->rope_high_freq_factor = 0.0;
    cfg->rope_orig_max_pos = 0;
    cfg->rope_attn_factor = 1.0;   /* [families] longrope's, [rope] yarn's */
    cfg->rope_beta_fast = 32.0;
    cfg->rope_beta_slow = 1.0;
    cfg->rope_truncate = 1;
    char scope[40];
    snprintf(scope, sizeof scope, "%s.", scope_key);
    if (rp && !json_is_null(rp) && !json_is_object(rp)) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: %s: expected an object", what, scope_key);
        return SITS_ERR_FORMAT;
    }
    SITS_CHECK(parse_rope_dim(root, json_is_object(rp) ? rp : NULL, what, scope, cfg));
    if (rp && !json_is_null(rp)) {
        /* v5 moves rope_theta inside rope_parameters. */
        SITS_CHECK(get_num(rp, "rope_theta", what, scope, 0, cfg->rope_theta, &cfg->rope_theta));
        const char *tkey = "rope_type";
        const json_t *t = json_object_get(rp, tkey);
        if (!t || json_is_null(t)) { tkey = "type"; t = json_object_get(rp, tkey); }
        const char *type = "default";
        if (t && !json_is_null(t)) {
            if (!json_is_string(t)) {
                SITS_ERROR(SITS_SUB_MODEL, "%s: %s%s: expected a string", what, scope, tkey);
                return SITS_ERR_FORMAT;
            }
            type = json_string_value(t);
        }
        if (cfg->arch == SITS_ARCH_PHI3 && !strcmp(type, "yarn")) type = "longrope";   /* Phi3Config's reading of it */
        if (!strcmp(type, "default")) {
            cfg->rope_type = SITS_ROPE_DEFAULT;
        } else if (!strcmp(type, "linear")) {
            cfg->rope_type = SITS_ROPE_LINEAR;
            SITS_CHECK(get_num(rp, "factor", what, scope, 1, 0.0, &cfg->rope_factor));
        } else if (!strcmp(type, "llama3")) {
            cfg->rope_type = SITS_ROPE_LLAMA3;
            SITS_CHECK(get_num(rp, "factor", what, scope, 1, 0.0, &cfg->rope_factor));
            SITS_CHECK(get_num(rp, "low_freq_factor", what, scope, 1, 0.0, &cfg->rope_low_freq_factor));
            SITS_CHECK(get_num(rp, "high_freq_factor", what, scope, 1, 0.0, &cfg->rope_high_freq_factor));
            SITS_CHECK(get_orig_max_pos(root, rp, what, scope, cfg));
            if (cfg->rope_low_freq_factor <= 0.0 || cfg->rope_high_freq_factor <= cfg->rope_low_freq_factor) {
                SITS_ERROR(SITS_SUB_MODEL, "%s: %shigh_freq_factor/low_freq_factor: need high > low > 0 (got %g, %g)",
                           what, scope, cfg->rope_high_freq_factor, cfg->rope_low_freq_factor);
                return SITS_ERR_FORMAT;
            }
            if (cfg->rope_orig_max_pos <= 0) {
                SITS_ERROR(SITS_SUB_MODEL, "%s: %soriginal_max_position_embeddings: must be > 0 (got %d)", what,
                           scope, cfg->rope_orig_max_pos);
                return SITS_ERR_FORMAT;
            }
        } else if (!strcmp(type, "longrope") || !strcmp(type, "su")) {   /* [families] Phi-3 */
            SITS_CHECK(parse_longrope(root, rp, what, scope, cfg));
        } else if (!strcmp(type, "yarn")) {   /* [rope] */
            SITS_CHECK(parse_yarn(root, rp, what, scope, cfg));
        } else {
            SITS_ERROR(SITS_SUB_MODEL, "%s: %s%s: rope type \"%s\" is not supported (default, linear, llama3, longrope, yarn)",
                       what, scope, tkey, type);
            return SITS_ERR_UNSUPPORTED;
        }
        if (!(cfg->rope_factor > 0.0)) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: %sfactor: must be > 0 (got %g)", what, scope, cfg->rope_factor);
            return SITS_ERR_FORMAT;
        }
    }
    if (!(cfg->rope_theta > 0.0)) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: rope_theta: must be > 0 (got %g)", what, cfg->rope_theta);
        return SITS_ERR_FORMAT;
    }
    return SITS_OK;
}

static sits_status_t parse_eos(const json_t *root, const char *what, sits_model_config_t *cfg)
{
    const json_t *v = json_object_get(root, "eos_token_id");
    cfg->n_eos = 0;
    if (!v || json_is_null(v)) return SITS_OK;
    if (json_is_integer(v)) {
        cfg->eos_token_ids[cfg->n_eos++] = (int)json_integer_value(v);
        return SITS_OK;
    }
    if (!json_is_array(v)) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: eos_token_id: expected an integer or a list of integers", what);
        return SITS_ERR_FORMAT;
    }
    if (json_array_size(v) > SITS_MAX_EOS) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: eos_token_id: %zu ids, at most %d supported", what, json_array_size(v),
                   SITS_MAX_EOS);
        return SITS_ERR_UNSUPPORTED;
    }
    size_t i;
    const json_t *e;
    json_array_foreach(v, i, e) {
        if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > 2147483647LL) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: eos_token_id[%zu]: expected a non-negative integer", what, i);
            return SITS_ERR_FORMAT;
        }
        cfg->eos_token_ids[cfg->n_eos++] = (int)json_integer_value(e);
    }
    return SITS_OK;
}

/* [families] layer_types, when given: n_layers strings, all "full_attention" (the window of
 * "sliding_attention" layers is not applied by this architecture's path). */
static sits_status_t check_full_attention(const json_t *root, const char *what, int n_layers)
{
    const json_t *lt = json_object_get(root, "layer_types");
    if (!lt || json_is_null(lt)) return SITS_OK;
    if (!json_is_array(lt) || json_array_size(lt) != (size_t)n_layers) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: layer_types: expected an array of num_hidden_layers (%d) strings", what, n_layers);
        return SITS_ERR_FORMAT;
    }
    size_t i;
    const json_t *e;
    json_array_foreach(lt, i, e) {
        if (!json_is_string(e)) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: layer_types[%zu]: expected a string", what, i);
            return SITS_ERR_FORMAT;
        }
        if (strcmp(json_string_value(e), "full_attention") != 0) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: layer_types[%zu]: \"%s\" is not supported here (full_attention only)", what, i,
                       json_string_value(e));
            return SITS_ERR_UNSUPPORTED;
        }
    }
    return SITS_OK;
}

/* [families] An optional float key that may be null (0 then); must be >= 0. */
static sits_status_t get_cap(const json_t *root, const char *key, const char *what, double def, float *out_p)
{
    const json_t *v = json_object_get(root, key);
    double d = def;
    if (v && json_is_null(v)) d = 0.0;
    else SITS_CHECK(get_num(root, key, what, "", 0, def, &d));
    if (d < 0.0) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: %s: must be > 0 or null (got %g)", what, key, d);
        return SITS_ERR_FORMAT;
    }
    *out_p = (float)d;
    return SITS_OK;
}

/* [families] layer_types (n_layers strings, "sliding_attention" or "full_attention") into layer_sliding[]; absent:
 * every pattern-th layer full, the others sliding (transformers' default for Gemma 2 / 3 and gpt-oss) */
static sits_status_t parse_layer_types(const json_t *root, const char *what, int pattern, sits_model_config_t *cfg)
{
    if (cfg->n_layers > SITS_MAX_LAYER_TYPES) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: num_hidden_layers: %d, at most %d supported for %s", what, cfg->n_layers,
                   SITS_MAX_LAYER_TYPES, cfg->model_type);
        return SITS_ERR_UNSUPPORTED;
    }
    cfg->has_layer_types = 1;
    const json_t *lt = json_object_get(root, "layer_types");
    if (!lt || json_is_null(lt)) {
        if (pattern < 1) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: sliding_window_pattern: must be > 0 (got %d)", what, pattern);
            return SITS_ERR_FORMAT;
        }
        for (int l = 0; l < cfg->n_layers; l++) cfg->layer_sliding[l] = (l + 1) % pattern != 0;
        return SITS_OK;
    }
    if (!json_is_array(lt) || json_array_size(lt) != (size_t)cfg->n_layers) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: layer_types: expected an array of num_hidden_layers (%d) strings", what, cfg->n_layers);
        return SITS_ERR_FORMAT;
    }
    size_t i;
    const json_t *e;
    json_array_foreach(lt, i, e) {
        const char *t = json_is_string(e) ? json_string_value(e) : "";
        if (!strcmp(t, "sliding_attention")) cfg->layer_sliding[i] = 1;
        else if (!strcmp(t, "full_attention")) cfg->layer_sliding[i] = 0;
        else {
            SITS_ERROR(SITS_SUB_MODEL, "%s: layer_types[%zu]: expected \"sliding_attention\" or \"full_attention\"", what, i);
            return SITS_ERR_UNSUPPORTED;
        }
    }
    return SITS_OK;
}

/* [gpt-oss] GptOssConfig past the common keys: biases on q / k / v / o (attention_bias, default true), attention
 * sinks, sliding-window layers alternating with full ones (sliding_window default 128); the MoE keys are
 * moe_config.c's. */
static sits_status_t parse_gpt_oss(const json_t *root, const char *what, sits_model_config_t *cfg)
{
    int ab;
    SITS_CHECK(get_bool(root, "attention_bias", what, 1, &ab));
    cfg->qkv_bias = cfg->o_bias = ab;
    cfg->mlp_bias = 0;
    cfg->attn_sinks = 1;
    const json_t *sw = json_object_get(root, "sliding_window");   /* null: no window (transformers' None) */
    if (sw && json_is_null(sw)) cfg->sliding_window = 0;
    else SITS_CHECK(get_int(root, "sliding_window", what, "", 0, 128, &cfg->sliding_window));
    if (cfg->sliding_window < 0) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: sliding_window: must be >= 0 or null (got %d)", what, cfg->sliding_window);
        return SITS_ERR_FORMAT;
    }
    return parse_layer_types(root, what, 2, cfg);
}

/* [families] Gemma 2 / Gemma 3 text: everything past the common keys (see config.h). */
static sits_status_t parse_gemma(const json_t *root, const char *what, sits_model_config_t *cfg)
{
    int g3 = cfg->arch == SITS_ARCH_GEMMA3, flag;
    const char *act = "gelu_pytorch_tanh", *akey = "hidden_activation";
    const json_t *ha = json_object_get(root, akey);
    if (!ha || json_is_null(ha)) { akey = "hidden_act"; ha = json_object_get(root, akey); }
    if (ha && !json_is_null(ha)) {
        if (!json_is_string(ha)) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: %s: expected a string", what, akey);
            return SITS_ERR_FORMAT;
        }
        act = json_string_value(ha);
    }
    if (strcmp(act, "gelu_pytorch_tanh") != 0 && strcmp(act, "gelu_tanh") != 0) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: %s: \"%s\" is not supported for %s (gelu_pytorch_tanh only)", what, akey, act,
                   cfg->model_type);
        return SITS_ERR_UNSUPPORTED;
    }
    SITS_CHECK(get_bool(root, "attention_bias", what, 0, &flag));
    if (flag) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: attention_bias: true is not supported for %s", what, cfg->model_type);
        return SITS_ERR_UNSUPPORTED;
    }
    SITS_CHECK(get_bool(root, "use_bidirectional_attention", what, 0, &flag));
    if (flag) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: use_bidirectional_attention: true is not supported (causal attention only)", what);
        return SITS_ERR_UNSUPPORTED;
    }
    cfg->act_gelu_tanh = cfg->norm_plus_one = cfg->sandwich_norms = cfg->embed_scale = 1;
    cfg->qk_norm = g3;
    double qpas;
    SITS_CHECK(get_num(root, "query_pre_attn_scalar", what, "", 0, 256.0, &qpas));
    if (!(qpas > 0.0)) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: query_pre_attn_scalar: must be > 0 (got %g)", what, qpas);
        return SITS_ERR_FORMAT;
    }
    cfg->attn_scale = (float)(1.0 / sqrt(qpas));
    SITS_CHECK(get_cap(root, "attn_logit_softcapping", what, g3 ? 0.0 : 50.0, &cfg->attn_softcap));
    SITS_CHECK(get_cap(root, "final_logit_softcapping", what, g3 ? 0.0 : 30.0, &cfg->final_softcap));
    SITS_CHECK(get_int(root, "sliding_window", what, "", 0, 4096, &cfg->sliding_window));
    if (cfg->sliding_window < 0) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: sliding_window: must be >= 0 or null (got %d)", what, cfg->sliding_window);
        return SITS_ERR_FORMAT;
    }
    int pattern = 2;
    if (g3) SITS_CHECK(get_int(root, "sliding_window_pattern", what, "", 0, 6, &pattern));
    SITS_CHECK(parse_layer_types(root, what, pattern, cfg));
    /* RoPE: Gemma 3 keeps one set of parameters per layer type (transformers v5) or a local base
     * next to the global rope_theta / rope_scaling (older configs) */
    cfg->rope_local_theta = 0.0;
    if (!g3) return SITS_OK;
    const json_t *rp = json_object_get(root, "rope_parameters");
    const json_t *full = json_is_object(rp) ? json_object_get(rp, "full_attention") : NULL;
    if (json_is_object(full)) {
        const json_t *local = json_object_get(rp, "sliding_attention");
        json_t *tmp = json_pack("{s:O}", "rope_parameters", (json_t *)full);
        if (!tmp) return SITS_ERR_NOMEM;
        sits_status_t st = parse_rope(tmp, what, cfg);
        json_decref(tmp);
        SITS_CHECK(st);
        cfg->rope_local_theta = 10000.0;
        if (json_is_object(local)) {
            const json_t *lt_type = json_object_get(local, "rope_type");
            if (lt_type && !json_is_null(lt_type) && (!json_is_string(lt_type) || strcmp(json_string_value(lt_type), "default"))) {
                SITS_ERROR(SITS_SUB_MODEL, "%s: rope_parameters.sliding_attention.rope_type: only \"default\" is supported",
                           what);
                return SITS_ERR_UNSUPPORTED;
            }
            SITS_CHECK(get_num(local, "rope_theta", what, "rope_parameters.sliding_attention.", 0, 10000.0,
                               &cfg->rope_local_theta));
        }
    } else {
        SITS_CHECK(get_num(root, "rope_local_base_freq", what, "", 0, 10000.0, &cfg->rope_local_theta));
    }
    if (!(cfg->rope_local_theta > 0.0)) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: rope_local_base_freq: must be > 0 (got %g)", what, cfg->rope_local_theta);
        return SITS_ERR_FORMAT;
    }
    return SITS_OK;
}

/* [granite] GraniteConfig's four multipliers (default 1; each must be finite and > 0) */
static sits_status_t parse_granite(const json_t *root, const char *what, sits_model_config_t *cfg)
{
    static const char *const keys[4] = { "embedding_multiplier", "attention_multiplier", "residual_multiplier",
                                         "logits_scaling" };
    double v[4];
    for (int i = 0; i < 4; i++) {
        SITS_CHECK(get_num(root, keys[i], what, "", 0, 1.0, &v[i]));
        if (!(v[i] > 0.0) || !isfinite(v[i]) || v[i] > 1e30) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: %s: must be a finite number > 0 (got %g)", what, keys[i], v[i]);
            return SITS_ERR_FORMAT;
        }
    }
    cfg->embed_scale = 1;
    cfg->embed_mult = (float)v[0];
    cfg->attn_scale = (float)v[1];
    cfg->residual_mult = (float)v[2];
    cfg->logits_scale = (float)v[3];
    return SITS_OK;
}

/* [smollm3] no_rope_layers (n_layers of 0 / 1) or no_rope_layer_interval (4): which layers skip RoPE */
static sits_status_t parse_smollm3(const json_t *root, const char *what, sits_model_config_t *cfg)
{
    int flag;
    SITS_CHECK(get_bool(root, "use_sliding_window", what, 0, &flag));
    if (flag) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: use_sliding_window: true is not supported for smollm3", what);
        return SITS_ERR_UNSUPPORTED;
    }
    if (cfg->n_layers > SITS_MAX_LAYER_TYPES) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: num_hidden_layers: %d, at most %d supported for smollm3", what, cfg->n_layers,
                   SITS_MAX_LAYER_TYPES);
        return SITS_ERR_UNSUPPORTED;
    }
    const json_t *nr = json_object_get(root, "no_rope_layers");
    if (nr && !json_is_null(nr)) {
        if (!json_is_array(nr) || json_array_size(nr) != (size_t)cfg->n_layers) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: no_rope_layers: expected num_hidden_layers (%d) values of 0 or 1", what, cfg->n_layers);
            return SITS_ERR_FORMAT;
        }
        for (int l = 0; l < cfg->n_layers; l++) {
            const json_t *v = json_array_get(nr, (size_t)l);
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1) {
                SITS_ERROR(SITS_SUB_MODEL, "%s: no_rope_layers[%d]: expected 0 or 1", what, l);
                return SITS_ERR_FORMAT;
            }
            cfg->layer_nope[l] = json_integer_value(v) == 0;
        }
    } else {
        int every;
        SITS_CHECK(get_int(root, "no_rope_layer_interval", what, "", 0, 4, &every));
        SITS_CHECK(check_positive(every, "no_rope_layer_interval", what));
        for (int l = 0; l < cfg->n_layers; l++) cfg->layer_nope[l] = (l + 1) % every == 0;
    }
    for (int l = 0; l < cfg->n_layers; l++) cfg->has_nope |= cfg->layer_nope[l];
    return SITS_OK;
}

static sits_status_t parse_root(const json_t *root, const char *what, sits_model_config_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    SITS_CHECK(parse_arch(root, what, cfg));

    SITS_CHECK(get_int(root, "vocab_size", what, "", 1, 0, &cfg->vocab_size));
    SITS_CHECK(get_int(root, "hidden_size", what, "", 1, 0, &cfg->hidden_size));
    SITS_CHECK(get_int(root, "intermediate_size", what, "", 1, 0, &cfg->intermediate_size));
    SITS_CHECK(get_int(root, "num_hidden_layers", what, "", 1, 0, &cfg->n_layers));
    SITS_CHECK(get_int(root, "num_attention_heads", what, "", 1, 0, &cfg->n_heads));
    SITS_CHECK(check_positive(cfg->vocab_size, "vocab_size", what));
    SITS_CHECK(check_positive(cfg->hidden_size, "hidden_size", what));
    SITS_CHECK(check_positive(cfg->intermediate_size, "intermediate_size", what));
    SITS_CHECK(check_positive(cfg->n_layers, "num_hidden_layers", what));
    SITS_CHECK(check_positive(cfg->n_heads, "num_attention_heads", what));
    SITS_CHECK(get_int(root, "num_key_value_heads", what, "", 0, cfg->n_heads, &cfg->n_kv_heads));
    SITS_CHECK(check_positive(cfg->n_kv_heads, "num_key_value_heads", what));
    if (cfg->n_heads % cfg->n_kv_heads != 0) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: num_key_value_heads: %d does not divide num_attention_heads %d", what,
                   cfg->n_kv_heads, cfg->n_heads);
        return SITS_ERR_FORMAT;
    }
    const json_t *hd = json_object_get(root, "head_dim");
    if (!hd || json_is_null(hd)) {
        if (cfg->hidden_size % cfg->n_heads != 0) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: head_dim: absent and hidden_size %d is not a multiple of "
                       "num_attention_heads %d", what, cfg->hidden_size, cfg->n_heads);
            return SITS_ERR_FORMAT;
        }
        cfg->head_dim = cfg->hidden_size / cfg->n_heads;
    } else {
        SITS_CHECK(get_int(root, "head_dim", what, "", 1, 0, &cfg->head_dim));
        SITS_CHECK(check_positive(cfg->head_dim, "head_dim", what));
    }
    if (cfg->head_dim % 2 != 0) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: head_dim: %d is odd (RoPE needs pairs)", what, cfg->head_dim);
        return SITS_ERR_FORMAT;
    }
    if (cfg->head_dim > CONFIG_MAX_HEAD_DIM) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: head_dim: %d, larger than any model's (limit %d)", what, cfg->head_dim,
                   CONFIG_MAX_HEAD_DIM);
        return SITS_ERR_FORMAT;
    }

    const char *act = "silu";
    const json_t *ha = json_object_get(root, "hidden_act");
    if (ha && !json_is_null(ha)) {
        if (!json_is_string(ha)) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: hidden_act: expected a string", what);
            return SITS_ERR_FORMAT;
        }
        act = json_string_value(ha);
    }
    int gemma = cfg->arch == SITS_ARCH_GEMMA2 || cfg->arch == SITS_ARCH_GEMMA3;   /* [families] checked in parse_gemma */
    if (!gemma && strcmp(act, "silu") != 0) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: hidden_act: \"%s\" is not supported (silu only)", what, act);
        return SITS_ERR_UNSUPPORTED;
    }

    double eps;
    SITS_CHECK(get_num(root, "rms_norm_eps", what, "", 0, 1e-6, &eps));
    if (!(eps > 0.0) || eps > 1.0) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: rms_norm_eps: %g out of range (0, 1]", what, eps);
        return SITS_ERR_FORMAT;
    }
    cfg->rms_norm_eps = (float)eps;

    /* HF defaults per architecture. */
    int def_max_pos = cfg->arch == SITS_ARCH_LLAMA && strcmp(cfg->model_type, "smollm3") ? 2048
                      : cfg->arch == SITS_ARCH_MISTRAL ? 4096 * 32 : 32768;
    SITS_CHECK(get_int(root, "max_position_embeddings", what, "", 0, def_max_pos, &cfg->max_position_embeddings));
    SITS_CHECK(check_positive(cfg->max_position_embeddings, "max_position_embeddings", what));
    SITS_CHECK(parse_rope(root, what, cfg));

    SITS_CHECK(get_bool(root, "tie_word_embeddings", what, !strcmp(cfg->model_type, "smollm3"), &cfg->tie_word_embeddings));
    int attention_bias, mlp_bias;
    SITS_CHECK(get_bool(root, "attention_bias", what, 0, &attention_bias));
    SITS_CHECK(get_bool(root, "mlp_bias", what, 0, &mlp_bias));
    switch (cfg->arch) {
    case SITS_ARCH_LLAMA:
        cfg->qkv_bias = attention_bias;
        cfg->o_bias = attention_bias;
        cfg->mlp_bias = mlp_bias;
        break;
    case SITS_ARCH_QWEN2:
        cfg->qkv_bias = 1;
        break;
    case SITS_ARCH_MISTRAL:
        break;
    case SITS_ARCH_QWEN3:   /* [families] */
        cfg->qkv_bias = attention_bias;
        cfg->o_bias = attention_bias;
        cfg->qk_norm = 1;
        break;
    case SITS_ARCH_GEMMA2: case SITS_ARCH_GEMMA3:   /* [families] parse_gemma */
        break;
    case SITS_ARCH_PHI3:   /* [families] no bias; fused projections */
        cfg->fused_qkv = cfg->fused_gate_up = 1;
        break;
    }
    if (!strcmp(cfg->model_type, "glm") || !strcmp(cfg->model_type, "glm4")) {   /* [glm] */
        SITS_CHECK(get_bool(root, "attention_bias", what, 1, &attention_bias));
        cfg->qkv_bias = attention_bias;
        cfg->o_bias = cfg->mlp_bias = 0;
        cfg->fused_gate_up = cfg->rope_interleave = 1;
        cfg->sandwich_norms = !strcmp(cfg->model_type, "glm4");
    }
    if (cfg->rope_dim != cfg->head_dim && cfg->arch != SITS_ARCH_PHI3 && !cfg->rope_interleave) {   /* [rope] */
        SITS_ERROR(SITS_SUB_MODEL, "%s: partial_rotary_factor: %d of %d dims rotary is not supported for %s (phi3, glm, glm4: "
                   "transformers rotates whole heads in the others)", what, cfg->rope_dim, cfg->head_dim, cfg->model_type);
        return SITS_ERR_UNSUPPORTED;
    }

    cfg->sliding_window = 0;
    if (cfg->arch == SITS_ARCH_MISTRAL || cfg->arch == SITS_ARCH_PHI3) {   /* [families] Phi-3: every layer too */
        SITS_CHECK(get_int(root, "sliding_window", what, "", 0, 0, &cfg->sliding_window));
        if (cfg->sliding_window < 0) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: sliding_window: must be >= 0 or null (got %d)", what, cfg->sliding_window);
            return SITS_ERR_FORMAT;
        }
    } else if (cfg->arch == SITS_ARCH_QWEN2) {
        int use_sw;
        SITS_CHECK(get_bool(root, "use_sliding_window", what, 0, &use_sw));
        if (use_sw) {
            /* Qwen2 applies the window only to layers >= max_window_layers: not implemented. */
            SITS_ERROR(SITS_SUB_MODEL, "%s: use_sliding_window: true is not supported for qwen2", what);
            return SITS_ERR_UNSUPPORTED;
        }
    } else if (cfg->arch == SITS_ARCH_QWEN3) {   /* [families] */
        int use_sw;
        SITS_CHECK(get_bool(root, "use_sliding_window", what, 0, &use_sw));
        if (use_sw) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: use_sliding_window: true is not supported for qwen3", what);
            return SITS_ERR_UNSUPPORTED;
        }
        SITS_CHECK(check_full_attention(root, what, cfg->n_layers));
    }

    if (gemma) SITS_CHECK(parse_gemma(root, what, cfg));   /* [families] */
    if (!strcmp(cfg->model_type, "granite")) SITS_CHECK(parse_granite(root, what, cfg));
    if (!strcmp(cfg->model_type, "smollm3")) SITS_CHECK(parse_smollm3(root, what, cfg));
    if (!strcmp(cfg->model_type, "gpt_oss")) SITS_CHECK(parse_gpt_oss(root, what, cfg));
    SITS_CHECK(get_int(root, "bos_token_id", what, "", 0, -1, &cfg->bos_token_id));
    SITS_CHECK(parse_eos(root, what, cfg));

    const char *dkey = "dtype";
    const json_t *dt = json_object_get(root, dkey);
    if (!dt || json_is_null(dt)) { dkey = "torch_dtype"; dt = json_object_get(root, dkey); }
    if (dt && !json_is_null(dt)) {
        if (!json_is_string(dt) || strlen(json_string_value(dt)) >= sizeof cfg->torch_dtype) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: %s: expected a dtype name such as \"bfloat16\"", what, dkey);
            return SITS_ERR_FORMAT;
        }
        snprintf(cfg->torch_dtype, sizeof cfg->torch_dtype, "%s", json_string_value(dt));
    }
    return SITS_OK;
}

/* [fp8] quantization_config: absent, or an FP8 checkpoint (per-tensor or per-channel weight scales):
 * quant_method "fp8" (vLLM / HF; no weight_block_size) or "compressed-tensors" with float 8-bit
 * weights of strategy tensor or channel (llm-compressor FP8 / FP8_DYNAMIC). */
/* [fp8 block] a block shape [rows, cols] of two positive integers (v NULL / null: none, 0 0) */
static sits_status_t get_block(const json_t *v, const char *what, const char *where, int out[2])
{
    out[0] = out[1] = 0;
    if (!v || json_is_null(v)) return SITS_OK;
    if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_integer(json_array_get(v, 0)) ||
        !json_is_integer(json_array_get(v, 1)) || json_integer_value(json_array_get(v, 0)) < 1 ||
        json_integer_value(json_array_get(v, 1)) < 1 || json_integer_value(json_array_get(v, 0)) > 65536 ||
        json_integer_value(json_array_get(v, 1)) > 65536) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: %s: expected [rows, cols], two integers in 1 .. 65536", what, where);
        return SITS_ERR_FORMAT;
    }
    out[0] = (int)json_integer_value(json_array_get(v, 0));
    out[1] = (int)json_integer_value(json_array_get(v, 1));
    return SITS_OK;
}

static sits_status_t parse_quant(const json_t *root, const char *what, sits_model_config_t *cfg)
{
    const json_t *q = json_object_get(root, "quantization_config");
    if (!q || json_is_null(q)) return SITS_OK;
    const json_t *m = json_is_object(q) ? json_object_get(q, "quant_method") : NULL;
    if (!json_is_string(m) || strlen(json_string_value(m)) >= sizeof cfg->quant_method) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: quantization_config: expected an object with a quant_method string", what);
        return SITS_ERR_FORMAT;
    }
    const char *method = json_string_value(m);
    int w4 = 0;   /* [int4] AWQ, GPTQ, compressed-tensors int weights */
    SITS_CHECK(sits_w4_config_parse(q, method, what, cfg, &w4));
    if (w4) {
        /* cfg->w4 holds it */
    } else if (!strcmp(method, "fp8")) {
        SITS_CHECK(get_block(json_object_get(q, "weight_block_size"), what, "quantization_config.weight_block_size",
                             cfg->fp8_block));
    } else if (!strcmp(method, "compressed-tensors")) {
        const json_t *groups = json_object_get(q, "config_groups");
        const char *key;
        const json_t *g;
        json_object_foreach((json_t *)groups, key, g) {
            const json_t *w = json_object_get(g, "weights");
            if (!w || json_is_null(w)) continue;
            const json_t *bits = json_object_get(w, "num_bits"), *type = json_object_get(w, "type");
            const json_t *strat = json_object_get(w, "strategy");
            const char *ts = json_is_string(type) ? json_string_value(type) : "?";
            const char *ss = json_is_string(strat) ? json_string_value(strat) : "?";
            if (json_integer_value(bits) != 8 || strcmp(ts, "float") ||
                (strcmp(ss, "tensor") && strcmp(ss, "channel") && strcmp(ss, "block"))) {
                SITS_ERROR(SITS_SUB_MODEL, "%s: quantization_config.config_groups.%s.weights: %lld-bit %s, strategy %s is not "
                           "supported (8-bit float, strategy tensor, channel or block)", what, key,
                           (long long)json_integer_value(bits), ts, ss);
                return SITS_ERR_UNSUPPORTED;
            }
            if (!strcmp(ss, "block")) {   /* [fp8 block] llm-compressor's FP8_BLOCK */
                char where[160];
                snprintf(where, sizeof where, "quantization_config.config_groups.%s.weights.block_structure", key);
                const json_t *bs = json_object_get(w, "block_structure");
                if (!bs || json_is_null(bs)) {
                    SITS_ERROR(SITS_SUB_MODEL, "%s: %s: missing for strategy block", what, where);
                    return SITS_ERR_FORMAT;
                }
                int b[2];
                SITS_CHECK(get_block(bs, what, where, b));
                if (cfg->fp8_block[0] && (b[0] != cfg->fp8_block[0] || b[1] != cfg->fp8_block[1])) {
                    SITS_ERROR(SITS_SUB_MODEL, "%s: %s: [%d, %d] differs from another group's [%d, %d]: not supported", what,
                               where, b[0], b[1], cfg->fp8_block[0], cfg->fp8_block[1]);
                    return SITS_ERR_UNSUPPORTED;
                }
                cfg->fp8_block[0] = b[0];
                cfg->fp8_block[1] = b[1];
            }
        }
    } else if (!strcmp(method, "mxfp4")) {   /* [gpt-oss] the experts' *_blocks / *_scales, dequantised at load */
        if (strcmp(cfg->model_type, "gpt_oss") != 0) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: quantization_config.quant_method \"mxfp4\" is supported for gpt_oss only", what);
            return SITS_ERR_UNSUPPORTED;
        }
    } else {
        SITS_ERROR(SITS_SUB_MODEL, "%s: quantization_config.quant_method \"%s\" is not supported (fp8, awq, gptq, mxfp4, "
                   "compressed-tensors FP8 or pack-quantized INT4)",
                   what, method);
        return SITS_ERR_UNSUPPORTED;
    }
    snprintf(cfg->quant_method, sizeof cfg->quant_method, "%s", method);
    return SITS_OK;
}

/* Every RoPE frequency finite and > 0 (the tables sits_model_rope_inv_freq* make, in fp32): a theta or a
 * scaling factor at the edge of float's range (e.g. rope_theta 1e-300, a linear factor 1e-40) would give
 * infinite or zero frequencies, and every output NaN, with nothing said. */
static sits_status_t check_rope_table(const sits_model_config_t *cfg, const char *what)
{
    const int half = cfg->head_dim / 2;
    float *inv = malloc(sizeof(float) * (size_t)half);
    if (!inv) return SITS_ERR_NOMEM;
    sits_status_t st = SITS_OK;
    for (int table = 0; table < 3 && st == SITS_OK; table++) {
        const char *name = table == 0 ? "rope_theta / rope scaling" : table == 1 ? "rope long_factor" : "rope_local_base_freq";
        if (table == 0) {
            sits_model_rope_inv_freq(cfg, inv);
        } else if (table == 1) {
            if (cfg->rope_type != SITS_ROPE_LONGROPE) continue;
            sits_model_rope_inv_freq_long(cfg, inv);
        } else {
            if (!(cfg->rope_local_theta > 0.0)) continue;
            sits_model_config_t lc = *cfg;   /* [families] Gemma 3's sliding layers: default RoPE, their own theta */
            lc.rope_theta = cfg->rope_local_theta;
            lc.rope_type = SITS_ROPE_DEFAULT;
            sits_model_rope_inv_freq(&lc, inv);
        }
        for (int i = 0; i < sits_model_rope_dim(cfg) / 2; i++)   /* [rope] the rest are the passing pairs' zeros */
            if (!(isfinite(inv[i]) && inv[i] > 0.0f)) {
                SITS_ERROR(SITS_SUB_MODEL, "%s: %s: RoPE frequency %d of %d is %g in fp32 (theta %g): out of float's range",
                           what, name, i, sits_model_rope_dim(cfg) / 2, (double)inv[i], table == 2 ? cfg->rope_local_theta : cfg->rope_theta);
                st = SITS_ERR_FORMAT;
                break;
            }
    }
    free(inv);
    return st;
}

/* [mm] The multimodal checkpoints whose language model is served: the top-level model_type (or, without one, the
 * architecture), the text model it is, and where its keys are: text_config, or (Qwen2-VL / Qwen2.5-VL as published)
 * the top level itself beside vision_config. */
static const struct { const char *type, *arch, *text_type; int flat_ok; } MM_TYPES[] = {
    { "gemma3", "Gemma3ForConditionalGeneration", "gemma3_text", 0 },
    { "mistral3", "Mistral3ForConditionalGeneration", "mistral", 0 },
    { "qwen2_vl", "Qwen2VLForConditionalGeneration", "qwen2", 1 },
    { "qwen2_5_vl", "Qwen2_5_VLForConditionalGeneration", "qwen2", 1 },
};

/* [mm] Gemma3TextConfig's defaults (transformers 5.25), for the keys gemma-3-*-it's text_config leaves out; the RoPE
 * ones in the older spelling unless the text_config has rope_parameters. NULL: out of memory. */
static json_t *gemma3_text_defaults(const json_t *text)
{
    json_t *m = json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:i, s:i, s:i, s:s, s:i, s:i, s:b, s:n, s:n}",
                          "vocab_size", 262208, "hidden_size", 2304, "intermediate_size", 9216, "num_hidden_layers", 26,
                          "num_attention_heads", 8, "num_key_value_heads", 4, "head_dim", 256, "max_position_embeddings", 131072,
                          "rms_norm_eps", 1e-6, "query_pre_attn_scalar", 256, "sliding_window", 4096, "sliding_window_pattern", 6,
                          "hidden_activation", "gelu_pytorch_tanh", "bos_token_id", 2, "eos_token_id", 1, "tie_word_embeddings", 1,
                          "final_logit_softcapping", "attn_logit_softcapping");
    if (m && !json_object_get(text, "rope_parameters") &&
        (json_object_set_new(m, "rope_theta", json_real(1000000.0)) || json_object_set_new(m, "rope_local_base_freq", json_real(10000.0)))) {
        json_decref(m);
        return NULL;
    }
    return m;
}

/* [mm] Qwen2-VL's multimodal RoPE ({type: mrope, mrope_section [t, h, w]}) rotates a text token's dims by its one
 * position in all three sections: plain RoPE. The sections must cover the head's pairs; the rope object of the
 * merged config m becomes the default type. */
static sits_status_t mrope_as_rope(json_t *m, const char *what)
{
    const char *key = json_object_get(m, "rope_parameters") ? "rope_parameters" : "rope_scaling";
    json_t *rp = json_object_get(m, key);
    const json_t *sec = json_is_object(rp) ? json_object_get(rp, "mrope_section") : NULL;
    if (!sec) return SITS_OK;
    const json_t *hs = json_object_get(m, "hidden_size"), *nh = json_object_get(m, "num_attention_heads"), *hd = json_object_get(m, "head_dim");
    json_int_t half = json_is_integer(hd) ? json_integer_value(hd) / 2
                      : json_is_integer(hs) && json_is_integer(nh) && json_integer_value(nh) > 0
                          ? json_integer_value(hs) / json_integer_value(nh) / 2 : -1;
    json_int_t sum = 0;
    size_t i;
    const json_t *v;
    int ok = json_is_array(sec);
    json_array_foreach(sec, i, v) {
        ok = ok && json_is_integer(v) && json_integer_value(v) >= 0;
        sum += json_is_integer(v) ? json_integer_value(v) : 0;
    }
    if (!ok || sum != half) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: %s.mrope_section: expected non-negative integers summing to head_dim / 2 = %lld", what, key,
                   (long long)half);
        return SITS_ERR_FORMAT;
    }
    json_t *c = json_deep_copy(rp);
    if (!c) return SITS_ERR_NOMEM;
    json_object_del(c, "mrope_section");
    json_object_del(c, "type");
    if (json_object_set_new(c, "rope_type", json_string("default")) || json_object_set_new(m, key, c)) return SITS_ERR_NOMEM;
    return SITS_OK;
}

/* [mm] A multimodal checkpoint's language model, as the config to parse: NULL when root is none (nothing said), else
 * a new object (*st_p SITS_OK) or NULL with *st_p the refusal: the text model's defaults where it has any to fill
 * (Gemma 3), then its keys (text_config, or the top level's without vision_config), then the top level's that apply
 * to the whole model (eos / bos ids, tie_word_embeddings, dtype, quantization_config). */
static json_t *mm_text_config(const json_t *root, const char *what, sits_status_t *st_p)
{
    *st_p = SITS_OK;
    const json_t *mt = json_object_get(root, "model_type"), *ar = json_object_get(root, "architectures");
    const char *type = json_is_string(mt) ? json_string_value(mt) : NULL;
    const char *arch = json_is_array(ar) && json_is_string(json_array_get(ar, 0)) ? json_string_value(json_array_get(ar, 0)) : "";
    size_t k;
    for (k = 0; k < sizeof MM_TYPES / sizeof MM_TYPES[0]; k++)
        if (type ? !strcmp(type, MM_TYPES[k].type) : !strcmp(arch, MM_TYPES[k].arch)) break;
    if (k == sizeof MM_TYPES / sizeof MM_TYPES[0]) return NULL;
    const json_t *text = json_object_get(root, "text_config");
    if (!json_is_object(text) && MM_TYPES[k].flat_ok) text = root;   /* Qwen2-VL's own layout */
    if (!json_is_object(text)) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: text_config: expected an object (model_type %s: the language model's config)", what,
                   MM_TYPES[k].type);
        *st_p = SITS_ERR_FORMAT;
        return NULL;
    }
    const json_t *tt = json_object_get(text, "model_type");
    if (text != root && tt && !json_is_null(tt) && (!json_is_string(tt) || strcmp(json_string_value(tt), MM_TYPES[k].text_type))) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: text_config.model_type: expected \"%s\"", what, MM_TYPES[k].text_type);
        *st_p = SITS_ERR_UNSUPPORTED;
        return NULL;
    }
    json_t *m = !strcmp(MM_TYPES[k].text_type, "gemma3_text") ? gemma3_text_defaults(text) : json_object();
    if (!m || json_object_update(m, (json_t *)text) || json_object_set_new(m, "model_type", json_string(MM_TYPES[k].text_type))) {
        json_decref(m);
        *st_p = SITS_ERR_NOMEM;
        return NULL;
    }
    json_object_del(m, "architectures");
    json_object_del(m, "vision_config");
    json_object_del(m, "text_config");
    static const char *const whole[] = { "eos_token_id", "bos_token_id", "tie_word_embeddings", "torch_dtype", "dtype",
                                         "quantization_config" };
    for (size_t i = 0; i < sizeof whole / sizeof whole[0]; i++) {
        json_t *v = json_object_get(root, whole[i]);
        if (v && !json_is_null(v) && json_object_set(m, whole[i], v)) {
            json_decref(m);
            *st_p = SITS_ERR_NOMEM;
            return NULL;
        }
    }
    if (!strcmp(MM_TYPES[k].text_type, "qwen2") && (*st_p = mrope_as_rope(m, what)) != SITS_OK) {
        json_decref(m);
        return NULL;
    }
    return m;
}

sits_status_t sits_model_config_parse(const char *json, size_t len, const char *what, sits_model_config_t *cfg)
{
    json_error_t jerr;
    sits_model_config_t tmp;
    if (!what) what = "config.json";
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: invalid JSON at line %d column %d: %s", what, jerr.line, jerr.column, jerr.text);
        return SITS_ERR_FORMAT;
    }
    sits_status_t st;
    json_t *text = NULL;
    if (!json_is_object(root)) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: top level is not a JSON object", what);
        st = SITS_ERR_FORMAT;
        goto out_decref;
    }
    text = mm_text_config(root, what, &st);   /* [mm] */
    if (st != SITS_OK) goto out_decref;
    if (text) {
        json_decref(root);
        root = text;
    }
    st = parse_root(root, what, &tmp);
    if (st == SITS_OK) st = parse_quant(root, what, &tmp);   /* [fp8] */
    if (st == SITS_OK) st = sits_model_moe_config_parse(root, what, &tmp);   /* [moe] */
    if (st == SITS_OK) st = check_rope_table(&tmp, what);
    tmp.mm_text = text != NULL;
    if (st == SITS_OK) {
        *cfg = tmp;
        SITS_INFO(SITS_SUB_MODEL, "%s: %s layers %d hidden %d heads %d/%d head_dim %d ffn %d vocab %d", what,
                  tmp.model_type, tmp.n_layers, tmp.hidden_size, tmp.n_heads, tmp.n_kv_heads, tmp.head_dim,
                  tmp.intermediate_size, tmp.vocab_size);
    }
out_decref:
    json_decref(root);
    return st;
}

sits_status_t sits_model_config_load(const char *model_dir, sits_model_config_t *cfg)
{
    char path[4096];
    sits_status_t st = SITS_OK;
    char *buf = NULL;
    long size;
    int n = snprintf(path, sizeof path, "%s/config.json", model_dir);
    if (n < 0 || (size_t)n >= sizeof path) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: model directory path too long", model_dir);
        return SITS_ERR_INVALID;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: cannot open: %s", path, strerror(errno));
        return errno == ENOENT ? SITS_ERR_NOT_FOUND : SITS_ERR_IO;
    }
    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: cannot size: %s", path, strerror(errno));
        st = SITS_ERR_IO;
        goto out_close;
    }
    if ((unsigned long)size > CONFIG_MAX_BYTES) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: %ld bytes, larger than any config.json (limit %u)", path, size,
                   CONFIG_MAX_BYTES);
        st = SITS_ERR_FORMAT;
        goto out_close;
    }
    buf = malloc((size_t)size + 1);
    if (!buf) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: out of memory reading %ld bytes", path, size);
        st = SITS_ERR_NOMEM;
        goto out_close;
    }
    if (fread(buf, 1, (size_t)size, f) != (size_t)size) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: short read", path);
        st = SITS_ERR_IO;
        goto out_free;
    }
    st = sits_model_config_parse(buf, (size_t)size, path, cfg);
out_free:
    free(buf);
out_close:
    fclose(f);
    return st;
}

/* As transformers computes them (modeling_rope_utils: _compute_default_rope_parameters,
 * _compute_linear_scaling_rope_parameters, _compute_llama3_parameters, _compute_longrope_parameters), step
 * by step in fp32 as torch does (its Python scalars taken as fp32): the exponent 2i / dim, powf, the
 * reciprocal, then the type's adjustment. Double arithmetic rounded once at the end differed from HF's by one
 * ulp in a third of the entries (18 of 64 at head_dim 128, theta 500000), and a position p multiplies that
 * into the angle (p x 6e-8 rad): the fp32 fixture test at 200 positions (llama_hd128) then missed HF's logits
 * by 2e-4. torch's vectorised powf itself still differs from libm's in about one entry of a hundred. */
static float rope_pow(float theta, int i, int dim)   /* theta ** (2i / dim), fp32 */
{
    return powf(theta, (float)(2 * i) / (float)dim);
}

/* [rope] HF's yarn inverse frequencies (_compute_yarn_parameters) over dim = rope_dim: the correction range in Python
 * doubles, everything per dim in fp32 as torch computes it (the ramp (i - low) / (high - low), the blend
 * interpolation (1 - e) + extrapolation e with e = 1 - ramp, one rounding per operation). */
static void yarn_inv_freq(const sits_model_config_t *cfg, float *inv_freq)
{
    const int dim = sits_model_rope_dim(cfg), half = dim / 2;
    const double base = cfg->rope_theta, orig = (double)cfg->rope_orig_max_pos, pi = 3.14159265358979323846;
    double low = dim * log(orig / (cfg->rope_beta_fast * 2.0 * pi)) / (2.0 * log(base));
    double high = dim * log(orig / (cfg->rope_beta_slow * 2.0 * pi)) / (2.0 * log(base));
    if (cfg->rope_truncate) {
        low = floor(low);
        high = ceil(high);
    }
    if (low < 0.0) low = 0.0;
    if (high > dim - 1) high = dim - 1;
    if (low == high) high += 0.001;   /* HF: prevent the singularity */
    const float flo = (float)low, fspan = (float)(high - low), factor = (float)cfg->rope_factor;
    for (int i = 0; i < half; i++) {
        const float p = rope_pow((float)base, i, dim);
        const float extra = 1.0f / p, inter = 1.0f / (factor * p);
        float ramp = ((float)i - flo) / fspan;
        ramp = ramp < 0.0f ? 0.0f : ramp > 1.0f ? 1.0f : ramp;
        const float e = 1.0f - ramp;
        const float a = inter * (1.0f - e), b = extra * e;
        inv_freq[i] = a + b;
    }
}

void sits_model_rope_inv_freq(const sits_model_config_t *cfg, float *inv_freq)
{
    const int half = cfg->head_dim / 2, rd = sits_model_rope_dim(cfg), rhalf = rd / 2;
    const float theta = (float)cfg->rope_theta, factor = (float)cfg->rope_factor;
    if (cfg->rope_type == SITS_ROPE_YARN) yarn_inv_freq(cfg, inv_freq);
    for (int i = 0; i < rhalf && cfg->rope_type != SITS_ROPE_YARN; i++) {
        const float p = rope_pow(theta, i, rd);
        float inv = 1.0f / p;
        switch (cfg->rope_type) {
        case SITS_ROPE_DEFAULT: case SITS_ROPE_YARN:
            break;
        case SITS_ROPE_LINEAR:
            inv = inv / factor;
            break;
        case SITS_ROPE_LONGROPE:   /* [families] the short set (sits_model_rope_inv_freq_long: the long one) */
            inv = 1.0f / (cfg->rope_short[i] * p);
            break;
        case SITS_ROPE_LLAMA3: {
            /* HF: wavelen = 2 pi / inv; low / high wavelengths old_context_len / low_freq_factor (/ high) in
             * Python doubles, compared with the fp32 wavelengths as fp32; smoothing in fp32 */
            const float old = (float)cfg->rope_orig_max_pos, low = (float)cfg->rope_low_freq_factor;
            const float low_wl = (float)((double)cfg->rope_orig_max_pos / cfg->rope_low_freq_factor);
            const float high_wl = (float)((double)cfg->rope_orig_max_pos / cfg->rope_high_freq_factor);
            const float span = (float)(cfg->rope_high_freq_factor - cfg->rope_low_freq_factor);
            const float wl = (float)(2.0 * 3.14159265358979323846) / inv;
            const float llama = wl > low_wl ? inv / factor : inv;
            const float smooth = (old / wl - low) / span;
            const float smoothed = (1.0f - smooth) * llama / factor + smooth * llama;
            inv = !(wl < high_wl) && !(wl > low_wl) ? smoothed : llama;
            break;
        }
        }
        inv_freq[i] = inv;
    }
    for (int i = rhalf; i < half; i++) inv_freq[i] = 0.0f;   /* [rope] the passing pairs: cos 1, sin 0 */
}

void sits_model_rope_inv_freq_long(const sits_model_config_t *cfg, float *inv_freq)
{
    const float theta = (float)cfg->rope_theta;
    const int rd = sits_model_rope_dim(cfg);
    for (int i = 0; i < cfg->head_dim / 2; i++) inv_freq[i] = i < rd / 2 ? 1.0f / (cfg->rope_long[i] * rope_pow(theta, i, rd)) : 0.0f;
}

void sits_model_rope_perm(const sits_model_config_t *cfg, int *src)
{
    const int hd = cfg->head_dim, rd = sits_model_rope_dim(cfg), pass = hd - rd, il = cfg->rope_interleave;
    for (int j = 0; j < hd / 2; j++) {
        src[j] = j < rd / 2 ? (il ? 2 * j : j) : rd + (j - rd / 2);
        src[j + hd / 2] = j < rd / 2 ? (il ? 2 * j + 1 : j + rd / 2) : rd + pass / 2 + (j - rd / 2);
    }
}

sits_status_t sits_model_gen_defaults_load(const char *model_dir, sits_gen_defaults_t *d)
{
    memset(d, 0, sizeof *d);
    char path[4096];
    snprintf(path, sizeof path, "%s/generation_config.json", model_dir);
    json_error_t jerr;
    json_t *g = json_load_file(path, 0, &jerr);
    if (!g) {
        FILE *f = fopen(path, "rb");
        if (!f) return SITS_OK;   /* optional */
        fclose(f);
        SITS_ERROR(SITS_SUB_MODEL, "%s: line %d: %s", path, jerr.line, jerr.text);
        return SITS_ERR_FORMAT;
    }
    sits_status_t st = SITS_OK;
    if (!json_is_object(g)) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: not a JSON object", path);
        st = SITS_ERR_FORMAT;
        goto out;
    }
    const json_t *v = json_object_get(g, "temperature");
    if (v && !json_is_null(v)) {
        if (!json_is_number(v) || !(json_number_value(v) >= 0 && json_number_value(v) <= 100)) goto bad_temperature;
        d->temperature = json_number_value(v);
        d->has_temperature = 1;
    }
    v = json_object_get(g, "top_p");
    if (v && !json_is_null(v)) {
        if (!json_is_number(v) || !(json_number_value(v) > 0 && json_number_value(v) <= 1)) goto bad_top_p;
        d->top_p = json_number_value(v);
        d->has_top_p = 1;
    }
    v = json_object_get(g, "top_k");
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > (1 << 30)) goto bad_top_k;
        d->top_k = (int)json_integer_value(v);
        d->has_top_k = 1;
    }
    goto out;
bad_temperature:
    SITS_ERROR(SITS_SUB_MODEL, "%s: temperature must be a number >= 0", path);
    st = SITS_ERR_FORMAT;
    goto out;
bad_top_p:
    SITS_ERROR(SITS_SUB_MODEL, "%s: top_p must be a number in (0, 1]", path);
    st = SITS_ERR_FORMAT;
    goto out;
bad_top_k:
    SITS_ERROR(SITS_SUB_MODEL, "%s: top_k must be an integer >= 0", path);
    st = SITS_ERR_FORMAT;
out:
    json_decref(g);
    return st;
}
