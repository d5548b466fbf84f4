/* layout.h -- which HF tensors a config needs, their names and full (unsharded) shapes.
 *
 * Shapes are [out, in] row-major as HF stores them:
 *   model.embed_tokens.weight              [V, H]
 *   model.layers.N.input_layernorm.weight  [H]         post_attention_layernorm.weight [H]
 *   model.layers.N.self_attn.q_proj.weight [nh*hd, H]  (.bias [nh*hd] when qkv_bias)
 *   model.layers.N.self_attn.k_proj.weight [nkv*hd, H] (.bias [nkv*hd] when qkv_bias)
 *   model.layers.N.self_attn.v_proj.weight [nkv*hd, H] (.bias [nkv*hd] when qkv_bias)
 *   model.layers.N.self_attn.o_proj.weight [H, nh*hd]  (.bias [H] when o_bias)
 *   model.layers.N.mlp.gate_proj.weight    [I, H]      up_proj [I, H]   down_proj [H, I]
 *                                          (.bias [I] / [I] / [H] when mlp_bias)
 *   model.norm.weight                      [H]
 *   lm_head.weight                         [V, H]      (absent when tie_word_embeddings)
 *   [families] model.layers.N.self_attn.q_norm.weight, k_norm.weight [hd]  (qk_norm: Qwen3, Gemma 3)
 *   [families] sandwich_norms (Gemma 2/3), each [H]: model.layers.N.post_attention_layernorm.weight is the
 *   norm of the attention output (not the pre-MLP norm: FFN_NORM is absent), pre_feedforward_layernorm
 *   the pre-MLP one, post_feedforward_layernorm the norm of the MLP output.
 *   [families] fused_qkv (Phi-3): model.layers.N.self_attn.qkv_proj.weight [(nh + 2 nkv) hd, H] (q rows, k rows,
 *   v rows) replaces q/k/v_proj; fused_gate_up: mlp.gate_up_proj.weight [2 I, H] (gate rows, then up) replaces
 *   gate/up_proj. The loader takes each rank's rows of every part from them (TP slices as for the parts).
 * Tensors that are not needed (rotary_emb.inv_freq, extra keys) are ignored. */
#ifndef SITS_MODEL_LAYOUT_H
#define SITS_MODEL_LAYOUT_H

#include <stddef.h>
#include <stdint.h>
#include "model/config.h"
#include "model/safetensors.h"

typedef enum {
    SITS_W_EMBED, SITS_W_FINAL_NORM, SITS_W_LM_HEAD,                  /* global */
    SITS_W_ATTN_NORM, SITS_W_Q, SITS_W_K, SITS_W_V, SITS_W_O,         /* per layer */
    SITS_W_Q_BIAS, SITS_W_K_BIAS, SITS_W_V_BIAS, SITS_W_O_BIAS,
    SITS_W_FFN_NORM, SITS_W_GATE, SITS_W_UP, SITS_W_DOWN,
    SITS_W_GATE_BIAS, SITS_W_UP_BIAS, SITS_W_DOWN_BIAS,
    SITS_W_Q_NORM, SITS_W_K_NORM,                                     /* [families] per layer, qk_norm */
    SITS_W_POST_ATTN_NORM, SITS_W_PRE_FFN_NORM, SITS_W_POST_FFN_NORM, /* [families] per layer, sandwich_norms */
    SITS_W_QKV, SITS_W_GATE_UP,                                       /* [families] per layer, fused_qkv / fused_gate_up */
    SITS_W_SINKS,                                                     /* [gpt-oss] per layer, attn_sinks: [nh] */
    SITS_W_KIND_COUNT
} sits_wkind_t;

/* 1 for the kinds that live in every layer. */
int sits_wkind_per_layer(sits_wkind_t kind);
/* Whether this config has the tensor at all (biases, untied lm_head). */
int sits_wkind_present(const sits_model_config_t *cfg, sits_wkind_t kind);
/* HF name into buf (layer ignored for global kinds). */
void sits_wkind_name(sits_wkind_t kind, int layer, char *buf, size_t len);
/* Expected full shape; returns ndim (1 or 2). */
int sits_wkind_shape(const sits_model_config_t *cfg, sits_wkind_t kind, int64_t shape[2]);

/* Every tensor the config needs is present with the expected shape and a float dtype
 * (F32/F16/BF16; [fp8] F8_E4M3 for linear weights, with a valid scale: sits_model_fp8_scale).
 * Logs "<what>: tensor <name>: <reason>" for the first problem and returns SITS_ERR_FORMAT
 * (SITS_ERR_NOT_FOUND for a missing tensor). */
sits_status_t sits_model_check_tensors(const sits_model_config_t *cfg, const sits_st_t *st, const char *what);

/* [fp8] 1 for the linear layers' weights (q, k, v, o, gate, up, down, lm_head). */
int sits_wkind_linear(sits_wkind_t kind);
/* [fp8] The scale tensor of a pre-quantised F8_E4M3 weight w ("X.weight" -> "X.weight_scale", HF /
 * vLLM / llm-compressor layout): per-tensor ([] or [1]) or per output channel ([rows] or [rows, 1]),
 * F32/BF16/F16. An optional "X.input_scale" must be one value (it is not used: activations are
 * quantised per token). [fp8 block] With cfg->fp8_block [bm, bn] (quant_method fp8 weight_block_size: the scale is
 * "X.weight_scale_inv", as DeepSeek-V3 / Qwen3-*-FP8 name the factor that dequantises; compressed-tensors strategy
 * block: "X.weight_scale") a 2-d [ceil(rows / bm), ceil(cols / bn)] scale, one factor a block (the last ones partial).
 * A one-value weight_scale_inv without a block size is per tensor. Errors name the file and tensor. */
sits_status_t sits_model_fp8_scale(const sits_model_config_t *cfg, const sits_st_t *st, const sits_st_tensor_t *w,
                                   const char *what, const sits_st_tensor_t **scale_p);
/* [mm] [gpt-oss] The checkpoint's tensors under the names the loader asks for: a multimodal checkpoint's language model
 * (cfg->mm_text) keeps them under language_model.model. (or model.language_model.) and its head under
 * language_model.lm_head.; renamed to model. / lm_head. (the vision tower's stay as they are, unread). [glm] GLM-4's
 * post_self_attn_layernorm / post_attention_layernorm / post_mlp_layernorm become post_attention_layernorm /
 * pre_feedforward_layernorm / post_feedforward_layernorm (the sandwich norms' names). [gpt-oss] the fused experts
 * as per-expert views (the [moe] table below); a missing or misshapen fused tensor is refused here, with its name. */
sits_status_t sits_model_st_adapt(const sits_model_config_t *cfg, sits_st_t *st);
/* [fp8 block] the dequantisation factor of element (row, col) of an F8_E4M3 weight whose scale tensor
 * sits_model_fp8_scale returned (per tensor, per row, or the block of cfg->fp8_block holding it) */
float sits_model_fp8_scale_at(const sits_model_config_t *cfg, const sits_st_tensor_t *s, int64_t row, int64_t col);

/* ---- [moe] Mixture-of-Experts tensors (cfg->moe.n_experts > 0; the dense gate/up/down kinds are then
 * absent). HF names, E = n_experts, Ie = moe_inter, Is = shared_inter:
 *   Mixtral    model.layers.N.block_sparse_moe.gate.weight           [E, H]   (router)
 *              model.layers.N.block_sparse_moe.experts.J.w1.weight   [Ie, H]  (gate)  w3 [Ie, H] (up)  w2 [H, Ie] (down)
 *   Qwen2-MoE  model.layers.N.mlp.gate.weight                        [E, H]   (router)
 *              model.layers.N.mlp.experts.J.{gate,up}_proj.weight    [Ie, H]  down_proj [H, Ie]
 *              model.layers.N.mlp.shared_expert.{gate,up}_proj.weight [Is, H] down_proj [H, Is]
 *              model.layers.N.mlp.shared_expert_gate.weight          [1, H]
 *   gpt-oss    model.layers.N.mlp.router.{weight [E, H], bias [E]}; the checkpoint's mlp.experts.gate_up_proj
 *              [E, H, 2 Ie] (gate and up in alternate columns) + gate_up_proj_bias [E, 2 Ie], down_proj [E, Ie, H] +
 *              down_proj_bias [E, H] -- or [mxfp4] gate_up_proj_blocks [E, 2 Ie, H / 32, 16] + _scales [E, 2 Ie, H / 32],
 *              down_proj_blocks [E, H, Ie / 32, 16] + _scales -- are exposed by sits_model_st_adapt as views named
 *              model.layers.N.mlp.experts.J.{gate,up,down}_proj.{weight,bias} in Qwen's shapes ([Ie, H], [Ie]; [H, Ie], [H])
 * F32 / F16 / BF16, or F8_E4M3 with scales; views as above. ---- */
typedef enum {
    SITS_MOE_ROUTER, SITS_MOE_GATE, SITS_MOE_UP, SITS_MOE_DOWN,            /* GATE..DOWN: per expert */
    SITS_MOE_SH_GATE, SITS_MOE_SH_UP, SITS_MOE_SH_DOWN, SITS_MOE_SH_ROUTE, /* shared expert and its gate */
    SITS_MOE_ROUTER_BIAS, SITS_MOE_GATE_BIAS, SITS_MOE_UP_BIAS, SITS_MOE_DOWN_BIAS,   /* [gpt-oss] [1, n]; GATE..DOWN_BIAS per expert */
    SITS_MOE_PART_COUNT
} sits_moe_part_t;
/* 1 for the parts each expert has (GATE..DOWN, GATE_BIAS..DOWN_BIAS) */
int sits_moe_part_per_expert(sits_moe_part_t part);
/* Whether the config has the part (the shared ones need shared_inter > 0, the biases router_bias / expert_bias). */
int sits_moe_part_present(const sits_model_config_t *cfg, sits_moe_part_t part);
/* HF name of the part of layer `layer` (expert ignored except for GATE..DOWN). */
void sits_moe_part_name(const sits_model_config_t *cfg, sits_moe_part_t part, int layer, int expert, char *buf, size_t len);
/* Full shape [rows, cols]. */
void sits_moe_part_shape(const sits_model_config_t *cfg, sits_moe_part_t part, int64_t shape[2]);

#endif
