/* config.h -- a model's config.json (HF Llama family: Llama 2/3/3.1, Mistral, Qwen2).
 *
 * Recognised: model_type llama | mistral | qwen2 (architectures[] as a fallback); vocab_size,
 * hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads
 * (absent/null -> num_attention_heads), head_dim (absent/null -> hidden/heads), rms_norm_eps,
 * rope_theta, rope_scaling {rope_type|type: default|linear|llama3, factor, low_freq_factor,
 * high_freq_factor, original_max_position_embeddings} or transformers v5 rope_parameters {...,
 * rope_theta}, max_position_embeddings, tie_word_embeddings, attention_bias (Qwen2: q/k/v bias
 * always), mlp_bias, hidden_act (silu only), bos_token_id, eos_token_id (int or list),
 * sliding_window (Mistral; null -> 0), torch_dtype / dtype.
 * [moe] model_type mixtral (MixtralForCausalLM: Mistral attention, num_local_experts, num_experts_per_tok,
 * intermediate_size = each expert's, top-k probabilities always renormalised) and qwen2_moe
 * (Qwen2MoeForCausalLM: Qwen2 attention, num_experts, num_experts_per_tok, moe_intermediate_size,
 * norm_topk_prob, shared_expert_intermediate_size with its sigmoid shared_expert_gate). Refused, naming
 * the key: decoder_sparse_step != 1 and a non-empty mlp_only_layers (dense layers among sparse ones),
 * num_experts_per_tok outside [1, experts], qwen3_moe (needs Qwen3's q/k-norm attention).
 * Anything we cannot run (another model_type, hidden_act, rope type, inconsistent sizes) is
 * refused with a message naming the file and the key. */
#ifndef SITS_MODEL_CONFIG_H
#define SITS_MODEL_CONFIG_H

#include <stddef.h>
#include "util/status.h"

#define SITS_MAX_EOS 8

typedef enum { SITS_ARCH_LLAMA, SITS_ARCH_MISTRAL, SITS_ARCH_QWEN2 } sits_arch_t;
typedef enum { SITS_ROPE_DEFAULT, SITS_ROPE_LINEAR, SITS_ROPE_LLAMA3 } sits_rope_type_t;

typedef struct {
    sits_arch_t arch;
    char model_type[32];
    int vocab_size;
    int hidden_size;          /* H */
    int intermediate_size;    /* I */
    int n_layers;
    int n_heads;              /* nh */
    int n_kv_heads;           /* nkv; nh % nkv == 0 */
    int head_dim;             /* hd; even */
    float rms_norm_eps;
    double rope_theta;
    sits_rope_type_t rope_type;
    double rope_factor;       /* linear / llama3 */
    double rope_low_freq_factor, rope_high_freq_factor;
    int rope_orig_max_pos;    /* llama3: original_max_position_embeddings */
    int max_position_embeddings;
    int tie_word_embeddings;
    int qkv_bias;             /* q/k/v projections carry a bias (Qwen2, attention_bias) */
    int o_bias;               /* o_proj bias (attention_bias true on Llama) */
    int mlp_bias;
    int sliding_window;       /* 0 = none */
    int bos_token_id;         /* -1 when absent */
    int eos_token_ids[SITS_MAX_EOS];
    int n_eos;
    char torch_dtype[16];     /* "bfloat16", ... or "" */
    char quant_method[32];    /* [fp8] quantization_config.quant_method: "" (none), "fp8", "compressed-tensors" */
    /* [moe] Mixture of Experts: n_experts 0 = a dense MLP. Each MLP is a router [E, H] (softmax over
     * the experts, top_k kept, renormalised to sum 1 when norm_topk) and E SwiGLU experts of
     * intermediate size moe_inter; shared_inter > 0 adds a dense SwiGLU expert of that size scaled by
     * sigmoid(shared_expert_gate [1, H] . x) (Qwen2-MoE). */
    struct {
        int n_experts, top_k, moe_inter, norm_topk, shared_inter;
    } moe;
} sits_model_config_t;

/* [moe] (moe_config.c) The Mixture-of-Experts keys of a parsed config.json root (a json_t *) into
 * cfg->moe, for the model_types that have them; refusals name the file and the key. */
sits_status_t sits_model_moe_config_parse(const void *json_root, const char *what, sits_model_config_t *cfg);

/* Parse config.json text; `what` names the source in messages (a path). */
sits_status_t sits_model_config_parse(const char *json, size_t len, const char *what, sits_model_config_t *cfg);
/* Read and parse DIR/config.json. */
sits_status_t sits_model_config_load(const char *model_dir, sits_model_config_t *cfg);
/* Sampling defaults as the model ships them (generation_config.json), used for requests that leave a field
 * unset, as vLLM's --generation-config auto: temperature, top_p, top_k; max_new_tokens is ignored.
 * A field is present only when the file gives a number in range (do_sample is not consulted, as vLLM). */
typedef struct {
    int has_temperature, has_top_p, has_top_k;
    double temperature;   /* >= 0 */
    double top_p;         /* (0, 1] */
    int top_k;            /* >= 0; 0 = off */
} sits_gen_defaults_t;

/* Read DIR/generation_config.json into *d (all fields absent when the file is). A malformed file or an
 * out-of-range value is refused with the file and key (SITS_ERR_FORMAT). */
sits_status_t sits_model_gen_defaults_load(const char *model_dir, sits_gen_defaults_t *d);

/* RoPE inverse frequencies with the configured scaling: inv_freq[head_dim/2]. */
void sits_model_rope_inv_freq(const sits_model_config_t *cfg, float *inv_freq);

#endif
