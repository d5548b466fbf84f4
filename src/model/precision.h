/* precision.h -- [fp8] the layer-adaptive weight precision policy (--quant) and FP8 E4M3 weight
 * quantisation helpers.
 *
 * Linear layers of a block: qkv (q/k/v fused), o, gate_up (gate/up fused), down; plus lm_head.
 * A plan gives each (layer, linear) and the lm_head a precision: bf16 (the backend's weight dtype:
 * fp32 on cpu, bf16 on cuda) or fp8 (E4M3 weights, one fp32 scale per output row = absmax / 448;
 * activations quantised per token at run time, fp32 accumulation).
 *
 * --quant SPEC, items applied left to right (a later item overrides an earlier one):
 *   bf16 | fp8 | int4 | auto   every block's linear layers (not lm_head)
 *   GROUP[RANGE]=bf16|fp8|int4 GROUP: attn (qkv, o), ffn or mlp (gate_up, down), qkv, o, gate_up,
 *                              down, all (attn + ffn), lm_head (no range); RANGE: [a:b] layers
 *                              a..b-1, [a:] a..end, [:b], [i] one layer (default: every layer)
 * e.g. "fp8,ffn[0:4]=bf16,lm_head=bf16", "ffn=fp8,attn=bf16" or [int4] "ffn=int4,attn=fp8".
 * auto (the default, "" too): bf16, except that the linear layers a checkpoint stores in FP8
 * stay FP8 and [int4] those it stores in INT4 (AWQ, GPTQ, compressed-tensors) stay INT4
 * (pre-quantised checkpoints run as published). int4 on a linear an INT4 checkpoint holds keeps the
 * checkpoint's values; bf16 / fp8 on it dequantise them at load. lm_head is bf16 unless lm_head=fp8 (as
 * in vLLM and TensorRT-LLM: the logits are the most sensitive GEMM).
 * Shape rule (every backend, so cpu and cuda run the same plan): an fp8 GEMM needs in % 16 == 0
 * and out % 16 == 0 on this rank (cuBLASLt's FP8 leading-dimension rule); a linear that fails it
 * stays bf16 with a warning. */
#ifndef SITS_MODEL_PRECISION_H
#define SITS_MODEL_PRECISION_H

#include <stddef.h>
#include <stdint.h>
#include "util/status.h"

typedef enum { SITS_LIN_QKV, SITS_LIN_O, SITS_LIN_GATE_UP, SITS_LIN_DOWN, SITS_LIN_PER_LAYER } sits_linear_t;

typedef enum { SITS_PREC_AUTO = 0, SITS_PREC_BF16 = 1, SITS_PREC_FP8 = 2, SITS_PREC_INT4 = 3 } sits_prec_t;

/* [int4] --quant int4: weight-only INT4, round to nearest (model/int4.h sits_w4_quantize_row), groups
 * of SITS_INT4_GROUP inputs. A linear whose inputs on this rank are not a multiple of it stays bf16
 * with a warning (like the fp8 shape rule); lm_head cannot be int4. */
#define SITS_INT4_GROUP 128

typedef struct {
    int n_layers;
    uint8_t *layer;        /* [n_layers * SITS_LIN_PER_LAYER] sits_prec_t */
    uint8_t lm_head;       /* sits_prec_t */
} sits_quant_plan_t;

/* Parse SPEC (NULL or "" = auto) for a model of n_layers (n_layers <= 0: syntax only, ranges not
 * bounded; the plan is then not filled -- plan may be NULL). On error returns SITS_ERR_INVALID
 * with a one-line message in err. */
sits_status_t sits_quant_plan_parse(const char *spec, int n_layers, sits_quant_plan_t *plan, char *err, size_t err_len);
void sits_quant_plan_free(sits_quant_plan_t *plan);
static inline sits_prec_t sits_quant_plan_get(const sits_quant_plan_t *p, int layer, sits_linear_t lin)
{
    return p && p->layer ? (sits_prec_t)p->layer[(size_t)layer * SITS_LIN_PER_LAYER + lin] : SITS_PREC_AUTO;
}
/* INFO-log the resolved plan of layers [layer0, layer1): one line per run of layers with the same
 * precisions, and one for lm_head. prec[] is the resolved precision (bf16 / fp8, no auto) of each
 * (layer, linear) as loaded; lm_head likewise (-1: this rank holds no lm_head). */
void sits_quant_plan_log(const uint8_t *prec, int layer0, int layer1, int lm_head, const char *spec);

const char *sits_linear_name(sits_linear_t lin);

/* The quantisation itself (sits_fp8_scale, sits_fp8_quantize_row) is in util/dtype.h: the
 * backends follow the same definition for activations. */

#endif
