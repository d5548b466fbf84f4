/* weights.h -- this rank's shard of a model's weights, uploaded to a backend.
 *
 * Tensor parallelism over tp ranks (vLLM / HF tp_plan): q/k/v and gate/up are column-parallel
 * (each rank holds a slice of output features), o and down are row-parallel (a slice of input
 * features; partial sums are all-reduced by the engine). Embedding and lm_head are vocab-parallel:
 * the vocabulary is padded to a multiple of 64, split into tp ranges of v_per_rank; rank r holds
 * ids [v_start, v_start + v_count) (v_count may be smaller on the last ranks).
 * GQA: with tp <= nkv each rank holds nkv/tp KV heads; with tp > nkv (tp % nkv == 0) each KV head
 * is replicated on tp/nkv ranks. Biases of row-parallel layers are held by tp rank 0 only.
 *
 * Fused layouts (one GEMM each):
 *   qkv  [(nh_loc + 2*nkv_loc) * hd, H]   rows: this rank's q heads, then k heads, then v heads
 *   gu   [2 * I_loc, H]                   rows: gate slice, then up slice
 *   o    [H, nh_loc * hd]                 down [H, I_loc]
 * Pipeline parallelism: stage p of P holds the contiguous layers [layer0, layer1) (balanced by count:
 * the first L % P stages get one more), the first stage the embedding, the last the final norm
 * and lm_head; layers[] entries outside the range stay NULL.
 * Weights are read straight from the mmapped safetensors (only this rank's slice is touched) or,
 * with load format "dummy", generated (uniform in [-0.05, 0.05], norms 1). */
#ifndef SITS_MODEL_WEIGHTS_H
#define SITS_MODEL_WEIGHTS_H

#include "backend/backend.h"
#include "model/config.h"
#include "model/safetensors.h"

typedef struct {
    int tp_rank, tp_size;
    int pp_rank, pp_size;      /* pipeline stage; pp_size 0 means 1 (no pipeline) */
    /* [moe] expert parallelism: 0 or 1 = every rank holds a TP slice of every expert (intermediate
     * dimension split like a dense MLP); ep_size == tp_size = rank r holds the whole experts
     * [r E / ep, (r + 1) E / ep) (E % ep == 0). Attention stays tensor-parallel either way. */
    int ep_size;
} sits_shard_t;

/* Local sizes of one rank (pure arithmetic; also used by the engine and tests). */
typedef struct {
    int nh_loc, nkv_loc, kv_head0, q_head0;  /* heads held and the first global head index */
    int i_loc;                               /* intermediate features held */
    int qkv_dim;                             /* (nh_loc + 2*nkv_loc) * hd */
    int v_pad, v_per_rank, v_start, v_count; /* vocab padding and this rank's range */
    int layer0, layer1;                      /* this pipeline stage's layers [layer0, layer1) */
    int first_stage, last_stage;             /* holds the embedding / the final norm and lm_head */
    /* [moe] experts held (exp0 .. exp0 + n_exp_loc - 1), each with ie_loc intermediate features (the
     * whole moe_inter under expert parallelism, moe_inter / tp otherwise), and is_loc features of the
     * shared expert (always TP-split). i_loc is then max(ie_loc, is_loc): the engine's gate/up and
     * activation buffers serve one expert at a time. */
    int ep, exp0, n_exp_loc, ie_loc, is_loc;
} sits_shard_dims_t;

/* Checks divisibility (nh % tp, nkv vs tp, I % tp) and fills dims; refuses with a message. */
sits_status_t sits_shard_dims(const sits_model_config_t *cfg, const sits_shard_t *shard, sits_shard_dims_t *dims_p);

typedef struct {
    void *attn_norm, *qkv, *qkv_bias, *o, *o_bias;
    void *ffn_norm, *gu, *gu_bias, *down, *down_bias;
    /* [fp8] fp32 scales [out rows] of the linears held in FP8 E4M3 (their weight buffer is then
     * [rows, cols] bytes, row r = e4m3(w[r] / scale[r])); NULL: the backend's weight dtype. */
    float *qkv_scale, *o_scale, *gu_scale, *down_scale;
    /* [families] per-head RMSNorm weights [hd] of q and k (qk_norm), replicated on every rank; else NULL */
    void *q_norm, *k_norm;
    /* [families] sandwich_norms (Gemma): norms [H] of the attention and MLP outputs (ffn_norm is then the
     * pre-MLP norm); norm_plus_one configs hold every norm weight as 1 + w (computed in fp32). Every
     * norm weight (attn_norm, ffn_norm, q_norm, k_norm, these, final_norm) is FP32 on every backend. */
    void *post_attn_norm, *post_ffn_norm;
    /* [moe] (cfg.moe.n_experts > 0; gu / down are then NULL) router [E, H] (every rank); host arrays
     * [n_exp_loc] of this rank's experts (expert exp0 + j): exp_gu[j] [2 * ie_loc, H] (gate rows, then
     * up), exp_down[j] [H, ie_loc]; the shared expert sh_gu [2 * is_loc, H], sh_down [H, is_loc] and
     * its gate sh_route [1, H] (every rank), NULL without one. [moe fp8] FP8 experts: exp_gu_scale[j] /
     * exp_down_scale[j] the fp32 row scales of exp_gu[j] / exp_down[j] (then E4M3 bytes, as qkv_scale's
     * linears), sh_gu_scale / sh_down_scale the shared expert's; NULL arrays / pointers: the backend dtype. */
    void *router, **exp_gu, **exp_down, *sh_gu, *sh_down, *sh_route;
    float **exp_gu_scale, **exp_down_scale, *sh_gu_scale, *sh_down_scale;
    /* [moe int4] the routed experts as stored in a 4-bit checkpoint (AWQ / GPTQ / compressed-tensors without act-order,
     * this rank's slices holding whole groups): exp_gu_w4[j] [2 * ie_loc, H], exp_down_w4[j] [H, ie_loc] packed INT4
     * (then exp_gu[j] / exp_down[j] are NULL); NULL array: the experts are in exp_gu / exp_down. */
    sits_w4_t *exp_gu_w4, *exp_down_w4;
    /* [int4] the linears held as packed INT4 (backend.h sits_w4_t; q == NULL: not INT4, and then the
     * matching qkv / o / gu / down buffer is NULL when it is): qkv_w4 [qkv_dim rows, H inputs], o_w4
     * [H, nh_loc * hd], gu_w4 [2 * I_loc, H], down_w4 [H, I_loc] -- rows fused as for the other dtypes. */
    sits_w4_t qkv_w4, o_w4, gu_w4, down_w4;
    /* [gpt-oss] attention sinks [nh_loc] FP32 (this rank's heads; attn_sinks), else NULL; the router's bias [E]
     * (router_bias); the experts' biases (expert_bias), host arrays [n_exp_loc] like exp_gu: exp_gu_bias[j] [2 * ie_loc]
     * (gate, then up, this rank's slice), exp_down_bias[j] [H] on the rank that adds it (the expert's owner under EP,
     * TP rank 0 of TP-sliced experts; NULL elsewhere) -- all in the backend's weight dtype but sinks. */
    float *sinks;
    void *router_bias, **exp_gu_bias, **exp_down_bias;
} sits_layer_weights_t;

typedef struct {
    sits_model_config_t cfg;
    sits_shard_t shard;
    sits_shard_dims_t dims;
    void *embed;          /* [v_count, H] */
    void *final_norm;     /* [H] */
    void *lm_head;        /* [v_count, H]; == embed when tied (unless lm_head is fp8) */
    float *lm_head_scale; /* [fp8] [v_count] when lm_head is FP8, else NULL */
    char *quant;          /* [fp8] the --quant spec loaded with (NULL: auto) */
    int n_fp8;            /* [fp8] linears of this shard held in FP8 */
    int n_int4;           /* [int4] linears of this shard held in INT4 */
    float *inv_freq;      /* [hd/2] f32 on the backend */
    float *inv_freq_local; /* [families] [hd/2] of sliding layers when rope_local_theta is set, else NULL */
    float *inv_freq_long;  /* [families] [hd/2] longrope's long set (inv_freq holds the short one), else NULL */
    float *inv_freq_none;  /* [smollm3] [hd/2] zeros, the NoPE layers' table (cos 1, sin 0), else NULL */
    sits_layer_weights_t *layers;  /* [n_layers] */
    size_t bytes;         /* weight bytes held by this rank */
    sits_backend_t *be;
} sits_model_weights_t;

/* st == NULL: dummy weights (seeded by `seed`). */
sits_status_t sits_model_weights_load(const sits_model_config_t *cfg, const sits_st_t *st, sits_backend_t *be,
                                      const sits_shard_t *shard, unsigned long long seed, sits_model_weights_t **w_p);
void sits_model_weights_destroy(sits_model_weights_t *w);

/* ---- load progress (issue 12) ---- */
/* Called on the loading thread after the embedding, after each layer and after the head, with the
 * bytes of this shard uploaded so far and the shard's total (bytes_done == bytes_total at the end). */
typedef void (*sits_weights_progress_fn)(void *ctx, size_t bytes_done, size_t bytes_total);
/* sits_model_weights_load with an optional progress callback (NULL: none). */
sits_status_t sits_model_weights_load_progress(const sits_model_config_t *cfg, const sits_st_t *st, sits_backend_t *be,
                                               const sits_shard_t *shard, unsigned long long seed,
                                               sits_weights_progress_fn progress, void *progress_ctx,
                                               sits_model_weights_t **w_p);
/* The bytes a shard holds once loaded (== sits_model_weights_t.bytes), by arithmetic: no backend, no
 * file access. Lets a leader know the total across its TP group without asking the other ranks. */
sits_status_t sits_model_weights_shard_bytes(const sits_model_config_t *cfg, const sits_shard_t *shard,
                                             sits_dtype_t weight_dtype, size_t *bytes_p);
/* ---- end load progress ---- */

/* ---- [fp8] precision policy (model/precision.h) ----
 * As sits_model_weights_load_progress with a --quant spec (NULL / "": auto): each linear layer is
 * loaded in the backend's weight dtype or as FP8 E4M3 + per-row scales (quantised on the host from
 * the full rows, so every TP size holds the same values; an F8_E4M3 checkpoint tensor is copied
 * with its weight_scale rows, or dequantised when the plan says bf16). The plan is logged by TP
 * rank 0. SITS_ERR_INVALID (logged) on a bad spec. */
sits_status_t sits_model_weights_load_quant(const sits_model_config_t *cfg, const sits_st_t *st, sits_backend_t *be,
                                            const sits_shard_t *shard, unsigned long long seed, const char *quant,
                                            sits_weights_progress_fn progress, void *progress_ctx,
                                            sits_model_weights_t **w_p);
/* sits_model_weights_shard_bytes under a --quant spec; st (may be NULL) decides the auto layers
 * (only its headers are read). */
sits_status_t sits_model_weights_shard_bytes_quant(const sits_model_config_t *cfg, const sits_shard_t *shard,
                                                   sits_dtype_t weight_dtype, const char *quant, const sits_st_t *st,
                                                   size_t *bytes_p);
/* The same, and the linears of the shard that will be FP8 / [int4] INT4 (either pointer may be NULL). */
sits_status_t sits_model_weights_shard_plan(const sits_model_config_t *cfg, const sits_shard_t *shard, sits_dtype_t weight_dtype,
                                            const char *quant, const sits_st_t *st, size_t *bytes_p, int *n_fp8_p, int *n_int4_p);
/* ---- end fp8 ---- */

#endif
