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
 * [families] model_type qwen3 (Qwen3ForCausalLM): q_norm / k_norm per head (qk_norm), q/k/v/o bias =
 * attention_bias, head_dim explicit; use_sliding_window true and layer_types other than
 * "full_attention" are refused.
 * [families] model_type gemma2 (Gemma2ForCausalLM) and gemma3_text (Gemma3ForCausalLM): RMSNorm (1 + w),
 * 4 norms a layer, hidden_activation / hidden_act gelu_pytorch_tanh (GeGLU), embeddings x sqrt(H),
 * query_pre_attn_scalar, attn_logit_softcapping and final_logit_softcapping, sliding_window with
 * layer_types (default: Gemma 2 alternating from a sliding layer 0, Gemma 3 every sliding_window_pattern-th
 * (6) layer global); Gemma 3: q_norm / k_norm, rope_parameters {sliding_attention, full_attention} (v5)
 * or rope_theta + rope_local_base_freq + rope_scaling (global layers only). Refused: attention_bias,
 * use_bidirectional_attention, a scaled local RoPE.
 * [families] model_type phi3 (Phi3ForCausalLM; Phi-3 / Phi-3.5 / Phi-4 / Phi-4-mini): fused qkv_proj and
 * gate_up_proj, sliding_window on every layer (null -> none), rope type longrope (legacy "su", and "yarn" as
 * Phi3Config reads it) with short_factor / long_factor [rope_dim / 2], original_max_position_embeddings (the top
 * level's, 4096 when absent: Phi3Config's field wins over the rope object's), factor (absent:
 * max_position_embeddings / original) and attention_factor (absent: sqrt(1 + ln factor / ln original), 1 when
 * factor <= 1).
 * [rope] partial_rotary_factor (in the rope object, else at the top level; Phi-4-mini's 0.75), phi3 only (HF's
 * other families here rotate whole heads): rope_dim below. Rope type yarn (Qwen2 / Qwen3 / Llama long-context configs; HF's
 * _compute_yarn_parameters): factor, original_max_position_embeddings, beta_fast / beta_slow, truncate,
 * attention_factor (absent: from mscale / mscale_all_dim, else 0.1 ln factor + 1).
 * [moe] model_type mixtral (MixtralForCausalLM: Mistral attention, num_local_experts, num_experts_per_tok,
 * intermediate_size = each expert's, top-k probabilities always renormalised) and qwen2_moe
 * (Qwen2MoeForCausalLM: Qwen2 attention, num_experts, num_experts_per_tok, moe_intermediate_size,
 * norm_topk_prob, shared_expert_intermediate_size with its sigmoid shared_expert_gate), qwen3_moe
 * (Qwen3MoeForCausalLM: Qwen3 attention, qwen2_moe's keys without a shared expert; num_experts or, as
 * transformers 5 writes it, num_local_experts). Refused, naming the key: decoder_sparse_step != 1 and a
 * non-empty mlp_only_layers (dense layers among sparse ones), num_experts_per_tok outside [1, experts].
 * [glm] model_type glm (GlmForCausalLM: GLM-4-9B-chat-hf) and glm4 (Glm4ForCausalLM: GLM-4-*-0414): q/k/v bias =
 * attention_bias (default true), no o_proj bias, fused gate_up_proj, partial_rotary_factor (default 0.5) with
 * interleaved pairs; glm4 adds post-attention and post-MLP norms (its post_self_attn_layernorm / post_attention_layernorm
 * / post_mlp_layernorm are read as Gemma 2's sandwich norms).
 * [smollm3] model_type smollm3 (SmolLM3ForCausalLM): Llama with NoPE layers (no_rope_layers [n_layers] of 1 = RoPE,
 * 0 = none; absent: every no_rope_layer_interval-th (4) layer without), tied embeddings and 32768 positions by
 * default; use_sliding_window true is refused.
 * [granite] model_type granite (GraniteForCausalLM: Granite 3.x dense): Llama plus embedding_multiplier,
 * attention_multiplier, residual_multiplier, logits_scaling (each > 0, default 1, as GraniteConfig).
 * [mm] model_type mistral3 (Mistral3ForConditionalGeneration: its text_config as mistral) and qwen2_vl / qwen2_5_vl
 * (Qwen2(.5)-VL: the text keys at the top level or in text_config, as qwen2; rope mrope_section summing to head_dim / 2,
 * plain RoPE for text tokens) serve their language model like gemma3 below (config.c MM_TYPES).
 * [mm] model_type gemma3 (Gemma3ForConditionalGeneration: gemma-3-4b / 12b / 27b-it): its text_config is read as
 * gemma3_text over Gemma3TextConfig's defaults (hub configs give only what differs: vocab 262208, rms_norm_eps 1e-6,
 * 131072 positions, rope_theta 1e6 and rope_local_base_freq 1e4 unless rope_parameters, sliding_window_pattern 6,
 * query_pre_attn_scalar 256, ...), with the top level's eos / bos ids, tie_word_embeddings, dtype and
 * quantization_config; the vision tower and projector are not loaded (text prompts only).
 * Anything we cannot run (another model_type, hidden_act, rope type, inconsistent sizes) is
 * refused with a message naming the file and the key. */
#ifndef SITS_MODEL_CONFIG_H
#define SITS_MODEL_CONFIG_H

#include <stddef.h>
#include "util/status.h"

#define SITS_MAX_EOS 8

typedef enum { SITS_ARCH_LLAMA, SITS_ARCH_MISTRAL, SITS_ARCH_QWEN2, SITS_ARCH_QWEN3, SITS_ARCH_GEMMA2, SITS_ARCH_GEMMA3,
               SITS_ARCH_PHI3 } sits_arch_t;
#define SITS_MAX_LAYER_TYPES 512   /* [families] most layers a layer_types list may describe */
typedef enum { SITS_ROPE_DEFAULT, SITS_ROPE_LINEAR, SITS_ROPE_LLAMA3, SITS_ROPE_LONGROPE, SITS_ROPE_YARN } sits_rope_type_t;
#define SITS_MAX_ROPE_HALF 256   /* [families] longrope: most head_dim / 2 factors */

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
    double rope_factor;       /* linear / llama3 / longrope / yarn */
    double rope_low_freq_factor, rope_high_freq_factor;
    int rope_orig_max_pos;    /* llama3 / longrope / yarn: original_max_position_embeddings */
    /* [rope] partial_rotary_factor: the first rope_dim dims of a head rotate (pairs i, i + rope_dim / 2), the rest
     * pass; rope_dim = int(head_dim x factor), even, head_dim unless partial. The loader reorders each q / k head
     * so that the engine's full-head rotation (pairs i, i + head_dim / 2) does the same with inv_freq 0 on the
     * passing pairs (sits_model_rope_perm); the tables sits_model_rope_inv_freq* make hold those zeros. */
    int rope_dim;
    int rope_interleave;      /* [glm] the rotary pairs are (2i, 2i + 1) (GLM's rotate_half): reordered at load the same way */
    double rope_beta_fast, rope_beta_slow;   /* [rope] yarn: the correction range's rotations (32, 1) */
    int rope_truncate;                       /* [rope] yarn: the range rounded out to whole dims (default 1) */
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
    int mm_text;              /* [mm] the language model of a multimodal checkpoint (config.h top): its tensors are named
                               * language_model.model.* / model.language_model.*, renamed at load (sits_model_st_adapt) */
    int fp8_block[2];         /* [fp8 block] weight_block_size (fp8) / block_structure (compressed-tensors) [rows, cols]
                               * of block-wise weight scales [ceil(out / rows), ceil(in / cols)]; 0: per tensor / channel */
    /* [families] */
    int qk_norm;              /* per-head RMSNorm of q and k (weights [hd]) after the projections, before RoPE (Qwen3, Gemma 3) */
    /* Gemma 2 / 3 */
    int norm_plus_one;        /* RMSNorm weights are stored as w - 1 (Gemma: x * (1 + w)); the loader adds 1 */
    int sandwich_norms;       /* post-attention and post-feed-forward norms of the sublayer outputs (4 norms a layer) */
    int act_gelu_tanh;        /* GeGLU: gelu(gate, tanh approximation) * up instead of SwiGLU */
    int embed_scale;          /* embeddings times sqrt(hidden_size) rounded to the activation dtype ([granite]: embed_mult) */
    /* [granite] Granite 3.x (model_type granite): embeddings x embed_mult (embedding_multiplier), attention scale
     * attention_multiplier (attn_scale), each sublayer's output x residual_mult before the residual add
     * (residual_multiplier: folded into the o_proj / down_proj rows at load) and logits / logits_scale (logits_scaling:
     * folded into the final norm's weights); 0: none */
    float embed_mult, residual_mult, logits_scale;
    float attn_scale;         /* query scaling; 0 = 1/sqrt(head_dim) (Gemma: query_pre_attn_scalar^-0.5) */
    float attn_softcap;       /* attention logits = c * tanh(s / c); 0 = none (Gemma 2 attn_logit_softcapping) */
    float final_softcap;      /* final logits likewise (final_logit_softcapping); 0 = none */
    double rope_local_theta;  /* RoPE base of sliding-window layers (Gemma 3 rope_local_base_freq, default rope,
                               * no scaling); 0 = the global one for every layer */
    int has_layer_types;      /* layer_sliding[] is per layer; else every layer uses sliding_window (Mistral) */
    unsigned char layer_sliding[SITS_MAX_LAYER_TYPES];   /* 1: layer l is a sliding_attention layer */
    int has_nope;             /* [smollm3] some layers use no positional embedding: layer_nope[] */
    unsigned char layer_nope[SITS_MAX_LAYER_TYPES];      /* 1: layer l skips RoPE (SmolLM3's no_rope_layers[l] == 0) */
    int attn_sinks;           /* [gpt-oss] self_attn.sinks [nh]: one learned logit per head in each softmax's denominator */
    /* Phi-3 */
    int fused_qkv;            /* self_attn.qkv_proj.weight [(nh + 2 nkv) hd, H] instead of q/k/v_proj */
    int fused_gate_up;        /* mlp.gate_up_proj.weight [2 I, H] (gate rows, then up) instead of gate/up_proj */
    float rope_short[SITS_MAX_ROPE_HALF], rope_long[SITS_MAX_ROPE_HALF];   /* longrope factors [rope_dim / 2] */
    double rope_attn_factor;  /* longrope / yarn: cos and sin are scaled by it (q.k by its square); 1 otherwise */
    /* [moe] Mixture of Experts: n_experts 0 = a dense MLP. Each MLP is a router [E, H] (softmax over
     * the experts, top_k kept, renormalised to sum 1 when norm_topk) and E SwiGLU experts of
     * intermediate size moe_inter; shared_inter > 0 adds a dense SwiGLU expert of that size scaled by
     * sigmoid(shared_expert_gate [1, H] . x) (Qwen2-MoE). */
    struct {
        int n_experts, top_k, moe_inter, norm_topk, shared_inter;
        /* [gpt-oss] router_bias: the router has a bias [E]; expert_bias: each expert's gate / up / down have biases
         * ([Ie], [Ie], [H]); act_oai: the experts' activation is swiglu_oai (backend.h) with swiglu_alpha / limit
         * instead of SiLU(gate) * up. The checkpoint's fused, transposed experts are exposed per expert at load
         * (layout.h sits_model_st_adapt). */
        int router_bias, expert_bias, act_oai;
        float swiglu_alpha, swiglu_limit;
    } moe;
    /* [int4] a weight-only INT4 checkpoint (model/int4.h): fmt SITS_W4_NONE = none */
    struct {
        int fmt;              /* sits_w4_fmt_t */
        int bits;             /* 4, or [w8a16] 8 (GPTQ, compressed-tensors): dequantised at load, no 8-bit kernel */
        int group_size;       /* inputs per group; -1 = one group per row (per channel) */
        int zero_offset;      /* GPTQ checkpoint_format "gptq" (v1): the stored zero is z - 1 */
        int sym;              /* symmetric (no zero tensor for compressed-tensors) */
        int desc_act;         /* GPTQ act-order: g_idx permutes the groups */
    } w4;
} sits_model_config_t;

/* [int4] INT4 checkpoint formats */
typedef enum { SITS_W4_NONE = 0, SITS_W4_AWQ = 1, SITS_W4_GPTQ = 2, SITS_W4_CT = 3 } sits_w4_fmt_t;

/* [families] The attention window of layer l: sliding_window for a sliding layer, 0 (unlimited) otherwise. */
static inline int sits_model_layer_window(const sits_model_config_t *cfg, int l)
{
    if (cfg->sliding_window <= 0) return 0;
    if (!cfg->has_layer_types) return cfg->sliding_window;
    return l >= 0 && l < SITS_MAX_LAYER_TYPES && cfg->layer_sliding[l] ? cfg->sliding_window : 0;
}

/* [sliding window] The window that bounds what EVERY layer reads: sliding_window when all n_layers
 * layers are sliding-window layers (Mistral-style configs, or layer_types all "sliding_attention"),
 * else 0 (some layer reads the whole context). Positions older than pos - window + 1 are then read by
 * no layer and their KV blocks can go back to the pool (sched.c). */
static inline int sits_model_kv_window(const sits_model_config_t *cfg)
{
    if (cfg->sliding_window <= 0 || cfg->n_layers < 1) return 0;
    for (int l = 0; l < cfg->n_layers; l++)
        if (sits_model_layer_window(cfg, l) <= 0) return 0;
    return cfg->sliding_window;
}

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

/* RoPE inverse frequencies with the configured scaling: inv_freq[head_dim/2] (longrope: the short factors); entries
 * rope_dim / 2 .. head_dim / 2 - 1 (the passing pairs of a partial rotary factor) are 0. */
void sits_model_rope_inv_freq(const sits_model_config_t *cfg, float *inv_freq);
/* [families] longrope's long-context set, 1 / (long_factor[i] * theta^(2i / hd)): used for the tokens of a
 * sequence whose largest position in the step + 1 exceeds rope_orig_max_pos, as HF picks the set per forward
 * call from max(position_ids) + 1 (the keys already cached keep the set they were written with, in HF as here). */
void sits_model_rope_inv_freq_long(const sits_model_config_t *cfg, float *inv_freq);
/* [rope] The order of a q / k head's dims as loaded: src[j] = the checkpoint dim that dim j of a head holds (head_dim
 * entries). [glm] Interleaved pairs (2i, 2i + 1) go to (i, i + head_dim / 2) alike (then the passing dims).
 * HF's partial rotation pairs dims (i, i + rope_dim / 2), i < rope_dim / 2, and passes dims rope_dim ..
 * head_dim - 1; the engine rotates (j, j + head_dim / 2). So dim j < rope_dim / 2 holds i = j and dim j + head_dim / 2
 * holds j + rope_dim / 2; the passing dims fill j = rope_dim / 2 .. head_dim / 2 - 1 (the first half of them) and their
 * partners (the second half), where inv_freq is 0 (cos 1, sin 0: the values unchanged). q . k sums over the dims in
 * any order, so attention is the same. The identity when rope_dim == head_dim. */
void sits_model_rope_perm(const sits_model_config_t *cfg, int *src);
/* [rope] cfg->rope_dim, or head_dim for a config built by hand (rope_dim 0) */
static inline int sits_model_rope_dim(const sits_model_config_t *cfg)
{
    return cfg->rope_dim > 0 ? cfg->rope_dim : cfg->head_dim;
}

#endif
