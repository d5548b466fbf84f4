/* int4.h -- [int4] weight-only INT4 checkpoints (AWQ, GPTQ, compressed-tensors pack-quantized) and
 * the round-to-nearest INT4 quantiser of --quant int4; all converted at load to the one packed
 * layout of backend.h (sits_w4_t: q uint8 [out, in/2], scale / zero fp32 [out, n_groups], gidx).
 *
 * A linear "X" (e.g. model.layers.0.self_attn.q_proj, HF shape [out, in]) is INT4 in a checkpoint
 * when X.weight is absent and the format's tensors are present:
 *   AWQ GEMM (AutoAWQ WQLinear_GEMM; quant_method "awq", version "gemm", zero_point true):
 *     X.qweight int32 [in, out/8]          packed along the OUTPUT dim: nibble i (bits 4i) of word
 *                                          [k, j] holds output 8j + AWQ_ORDER[i], AWQ_ORDER =
 *                                          {0, 2, 4, 6, 1, 3, 5, 7}
 *     X.qzeros  int32 [in/g, out/8]        the same packing
 *     X.scales  f16   [in/g, out]          w[o, k] = (q - z) * s    (g = group_size)
 *   GPTQ (AutoGPTQ / GPTQModel / transformers; quant_method "gptq"):
 *     X.qweight int32 [in/8, out]          packed along the INPUT dim: nibble i of word [k, o] holds
 *                                          input 8k + i
 *     X.qzeros  int32 [n_groups, out/8]    nibble i of word [g, j] holds output 8j + i
 *     X.scales  f16   [n_groups, out]
 *     X.g_idx   int32 [in]                 the group of each input (act-order when desc_act)
 *     w[o, k] = (q - z) * s with z = stored + 1 for checkpoint_format "gptq" (v1, 1..16) and
 *     z = stored for "gptq_v2"; sym checkpoints store 7 (v1) / 8 (v2).
 *   compressed-tensors "pack-quantized" (num_bits 4, type int, strategy group or channel):
 *     X.weight_packed     int32 [out, in/8]  nibble i of word [o, k] holds input 8k + i as q + 8
 *                                            (q signed -8..7)
 *     X.weight_scale      f32/bf16/f16 [out, n_groups]  (channel: [out, 1])
 *     X.weight_zero_point int32 [out/8, n_groups] when asymmetric: packed along dim 0, zp + 8
 *     X.weight_shape      int64 [2] = {out, in}
 *     X.weight_g_idx      int32 [in] (optional: actorder "group")
 *     w[o, k] = (q - zp) * s.
 * In the packed layout every one of them is (u - zero) * scale with u = the unsigned nibble and zero
 * = z (AWQ, GPTQ) or zp + 8 (compressed-tensors; 8 when symmetric): the same fp32 product.
 * [w8a16] GPTQ bits 8 and compressed-tensors num_bits 8 pack 4 values an int32 word the same ways (value i
 * at bits 8i; qweight [in/4, out], qzeros [n_groups, out/4]; weight_packed [out, in/4], zero points
 * [out/4, n_groups], q + 128 stored, 128 when symmetric); no 8-bit kernel: they are dequantised at load
 * ((u - zero) * scale in fp32, then the activation dtype, or re-quantised with --quant fp8 / int4).
 *
 * Tensor parallelism (src/model/weights.c): column-parallel linears take rows (all groups); row-
 * parallel ones take the inputs [c0, c1), which must hold whole groups (c0 and c1 multiples of the
 * group size) -- refused otherwise. With a g_idx (act-order) a row-parallel rank keeps its inputs'
 * g_idx entries and EVERY group's scales and zeros (groups are scattered over the inputs), so the
 * result is exact at any TP size. */
#ifndef SITS_MODEL_INT4_H
#define SITS_MODEL_INT4_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "model/config.h"
#include "model/safetensors.h"

/* One INT4 linear of a checkpoint, resolved (sits_w4_src_open). */
typedef struct {
    int fmt;                            /* SITS_W4_AWQ / GPTQ / CT */
    int bits;                           /* 4, or [w8a16] 8 (GPTQ, CT: 4 values an int32 word) */
    const sits_st_tensor_t *qw, *qz, *sc, *gidx;   /* qz, gidx may be NULL */
    int64_t out, in;
    int group_size;                     /* inputs per group (in for per-channel) */
    int n_groups;
    int zero_offset;                    /* added to the stored zero (GPTQ v1: 1) */
    int zero_default;                   /* without qz: the zero of every group (compressed-tensors symmetric: 8) */
} sits_w4_src_t;

static inline uint32_t sits_w4_word(const sits_st_tensor_t *t, int64_t idx)
{
    uint32_t v;
    memcpy(&v, (const unsigned char *)t->data + (size_t)idx * 4, 4);
    return v;
}

/* the unsigned value (0..15; [w8a16] 0..255) of output o, input k */
static inline int sits_w4_src_q(const sits_w4_src_t *s, int64_t o, int64_t k)
{
    static const int awq_rev[8] = { 0, 4, 1, 5, 2, 6, 3, 7 };   /* output 8j + i sits in nibble awq_rev[i] */
    const int b = s->bits, per = 32 / b, mask = (1 << b) - 1;
    switch (s->fmt) {
    case SITS_W4_AWQ: return (int)(sits_w4_word(s->qw, k * (s->out / 8) + o / 8) >> (4 * awq_rev[o % 8])) & 15;
    case SITS_W4_GPTQ: return (int)(sits_w4_word(s->qw, (k / per) * s->out + o) >> (b * (k % per))) & mask;
    default: return (int)(sits_w4_word(s->qw, o * s->qw->shape[1] + k / per) >> (b * (k % per))) & mask;
    }
}

/* the group of input k */
static inline int sits_w4_src_group(const sits_w4_src_t *s, int64_t k)
{
    if (s->gidx) return (int)sits_w4_word(s->gidx, k);
    return (int)(k / s->group_size);
}

/* zero of (output o, group g) as a float: an integer 0..16 */
float sits_w4_src_zero(const sits_w4_src_t *s, int64_t o, int g);
/* scale of (output o, group g) in fp32 */
float sits_w4_src_scale(const sits_w4_src_t *s, int64_t o, int g);

/* 1 when the checkpoint holds linear `base` (no ".weight" suffix) as INT4 tensors of cfg's format. */
int sits_w4_present(const sits_model_config_t *cfg, const sits_st_t *st, const char *base);
/* Resolves and validates linear `base` of full shape [out, in]: every tensor present with its
 * dtype and shape, the group size consistent, g_idx values < n_groups. Errors name the tensor, its
 * file and the reason ("what: tensor X (file): ..."); SITS_ERR_FORMAT / SITS_ERR_NOT_FOUND / SITS_ERR_UNSUPPORTED. */
sits_status_t sits_w4_src_open(const sits_model_config_t *cfg, const sits_st_t *st, const char *base, int64_t out,
                               int64_t in, const char *what, sits_w4_src_t *src_p);

/* Rows [r, r + n) x inputs [c0, c0 + w) of a source dequantised into out [n, w] fp32. */
void sits_w4_src_rows_f32(const sits_w4_src_t *s, int64_t r, int64_t n, int64_t c0, int64_t w, float *out);

/* quantization_config of an INT4 checkpoint (quant_method awq / gptq, or compressed-tensors with
 * int weight groups) into cfg->w4; *handled_p = 0 when it is not one (compressed-tensors FP8).
 * Refusals (SITS_ERR_UNSUPPORTED) say which key and why: bits other than 4 or 8 (AWQ: 4), AWQ other than GEMM or
 * without zero points, GPTQ formats other than gptq / gptq_v2, compressed-tensors formats other than
 * pack-quantized, activation quantisation (W4A8), mixed int and float groups, differing bits or group sizes. */
struct json_t;
sits_status_t sits_w4_config_parse(const struct json_t *q, const char *method, const char *what, sits_model_config_t *cfg,
                                   int *handled_p);

/* The round-to-nearest INT4 quantiser of --quant int4 (asymmetric, like AWQ's / GPTQ's RTN
 * baseline, with a weight-MSE clipping search like AWQ's auto_clip without activations), per group of
 * `group` inputs of row x [in] (in % group == 0):
 *   mx = max(x), mn = min(x) over the group (with 0 included: mn <= 0 <= mx);
 *   for a = 1, 0.95, .. (SITS_W4_CLIP_STEPS factors): scale = a (mx - mn) / 15 (1 when mx == mn),
 *   zero = rint(-a mn / scale) clamped to [0, 15], u = rint(x / scale) + zero clamped to [0, 15];
 *   the a whose sum over the group of ((u - zero) * scale - x)^2 is least (the first on ties) is kept.
 *   w = (u - zero) * scale.
 * q [in / 2] packed as backend.h (low nibble first), scale / zero [in / group]. */
#define SITS_W4_CLIP_STEPS 10
void sits_w4_quantize_row(const float *x, int64_t in, int group, uint8_t *q, float *scale, float *zero);

#endif
