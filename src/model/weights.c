/* weights.c -- load this rank's shard of every tensor onto the backend; see weights.h. */
#include "model/weights.h"
#include "model/layout.h"
#include "model/precision.h"
#include "model/int4.h"
#include "util/dummy.h"
#include "util/log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static sits_status_t moe_dims(const sits_model_config_t *cfg, const sits_shard_t *shard, sits_shard_dims_t *d);

sits_status_t sits_shard_dims(const sits_model_config_t *cfg, const sits_shard_t *shard, sits_shard_dims_t *dims_p)
{
    int tp = shard->tp_size, r = shard->tp_rank;
    sits_shard_dims_t d;
    memset(&d, 0, sizeof d);
    if (tp < 1 || r < 0 || r >= tp) return SITS_ERR_INVALID;
    if (cfg->n_heads % tp) {
        SITS_ERROR(SITS_SUB_MODEL, "tensor parallel size %d does not divide num_attention_heads %d", tp, cfg->n_heads);
        return SITS_ERR_INVALID;
    }
    if (!cfg->moe.n_experts && cfg->intermediate_size % tp) {
        SITS_ERROR(SITS_SUB_MODEL, "tensor parallel size %d does not divide intermediate_size %d", tp, cfg->intermediate_size);
        return SITS_ERR_INVALID;
    }
    d.nh_loc = cfg->n_heads / tp;
    d.q_head0 = r * d.nh_loc;
    if (tp <= cfg->n_kv_heads) {
        if (cfg->n_kv_heads % tp) {
            SITS_ERROR(SITS_SUB_MODEL, "tensor parallel size %d must divide num_key_value_heads %d (or be a multiple of it)",
                       tp, cfg->n_kv_heads);
            return SITS_ERR_INVALID;
        }
        d.nkv_loc = cfg->n_kv_heads / tp;
        d.kv_head0 = r * d.nkv_loc;
    } else {
        if (tp % cfg->n_kv_heads) {
            SITS_ERROR(SITS_SUB_MODEL, "tensor parallel size %d must be a multiple of num_key_value_heads %d (or divide it)",
                       tp, cfg->n_kv_heads);
            return SITS_ERR_INVALID;
        }
        d.nkv_loc = 1;
        d.kv_head0 = r / (tp / cfg->n_kv_heads); /* each KV head replicated on tp/nkv ranks */
    }
    d.i_loc = cfg->intermediate_size / tp;
    if (cfg->moe.n_experts) SITS_CHECK(moe_dims(cfg, shard, &d));   /* [moe] */
    d.qkv_dim = (d.nh_loc + 2 * d.nkv_loc) * cfg->head_dim;
    d.v_pad = (cfg->vocab_size + 63) / 64 * 64;
    d.v_per_rank = (d.v_pad + tp - 1) / tp;
    d.v_start = r * d.v_per_rank;
    int v_end = d.v_start + d.v_per_rank;
    if (v_end > cfg->vocab_size) v_end = cfg->vocab_size;
    d.v_count = v_end > d.v_start ? v_end - d.v_start : 0;
    int pp = shard->pp_size > 0 ? shard->pp_size : 1, pr = shard->pp_rank;
    if (pr < 0 || pr >= pp) return SITS_ERR_INVALID;
    if (pp > cfg->n_layers) {
        SITS_ERROR(SITS_SUB_MODEL, "%d pipeline stages for %d layers: each stage needs a layer", pp, cfg->n_layers);
        return SITS_ERR_INVALID;
    }
    int base = cfg->n_layers / pp, extra = cfg->n_layers % pp;
    d.layer0 = pr * base + (pr < extra ? pr : extra);
    d.layer1 = d.layer0 + base + (pr < extra ? 1 : 0);
    d.first_stage = pr == 0;
    d.last_stage = pr == pp - 1;
    *dims_p = d;
    return SITS_OK;
}

/* [moe] The expert split of dims d (see weights.h); refusals say which size does not divide. */
static sits_status_t moe_dims(const sits_model_config_t *cfg, const sits_shard_t *shard, sits_shard_dims_t *d)
{
    int tp = shard->tp_size, r = shard->tp_rank, E = cfg->moe.n_experts, ep = shard->ep_size > 1 ? shard->ep_size : 1;
    if (ep > 1 && ep != tp) {
        SITS_ERROR(SITS_SUB_MODEL, "--ep %d: expert parallelism splits the experts over the tensor-parallel group, so it must "
                   "equal --tp (%d) or be 1", ep, tp);
        return SITS_ERR_INVALID;
    }
    if (E % ep) {
        SITS_ERROR(SITS_SUB_MODEL, "--ep %d does not divide the %d experts", ep, E);
        return SITS_ERR_INVALID;
    }
    if (ep == 1 && cfg->moe.moe_inter % tp) {
        SITS_ERROR(SITS_SUB_MODEL, "tensor parallel size %d does not divide the experts' intermediate size %d (try --ep %d)", tp,
                   cfg->moe.moe_inter, tp);
        return SITS_ERR_INVALID;
    }
    if (cfg->moe.shared_inter % tp) {
        SITS_ERROR(SITS_SUB_MODEL, "tensor parallel size %d does not divide shared_expert_intermediate_size %d", tp,
                   cfg->moe.shared_inter);
        return SITS_ERR_INVALID;
    }
    d->ep = ep;
    d->n_exp_loc = E / ep;
    d->exp0 = ep > 1 ? r * d->n_exp_loc : 0;
    d->ie_loc = ep > 1 ? cfg->moe.moe_inter : cfg->moe.moe_inter / tp;
    d->is_loc = cfg->moe.shared_inter / tp;
    d->i_loc = d->ie_loc > d->is_loc ? d->ie_loc : d->is_loc;
    return SITS_OK;
}

/* Where a slice comes from: a safetensors tensor, or the dummy generator. */
typedef struct {
    const sits_model_config_t *cfg;
    const sits_st_t *st;
    sits_backend_t *be;
    unsigned long long seed;
    float *staging;        /* dummy, fp8 quantisation / dequantisation: one chunk of rows, fp32 */
    size_t staging_elems;
    size_t bytes;
    /* load progress (issue 12): elem_size is the backend's weight dtype size; count_only: a dry pass
     * that only adds up bytes (no backend, no allocation); progress, when set, is told after the
     * embedding, each layer and the head */
    size_t elem_size;
    int count_only;
    size_t total;
    sits_weights_progress_fn progress;
    void *progress_ctx;
    /* [fp8] the policy (NULL: auto), the resolved precision of each (layer, linear) and of lm_head,
     * and staging for quantised rows (staging_elems bytes) and their scales */
    const sits_quant_plan_t *plan;
    uint8_t *prec;
    int lm_head_prec;
    int tp_rank;
    uint8_t *qstage;
    float *sstage;
    int n_fp8;
    int n_int4;            /* [int4] linears held in INT4 */
    const sits_w4_src_t *w4src;   /* [moe int4] set while an INT4 / 8-bit checkpoint expert is read: rows_f32 dequantises it */
    int dummy_on_device;   /* [dummy] dummy weights (dense, 16-bit experts, FP8 rows) drawn by be->ops->dummy_rows(_fp8)
                            * where they live (SITS_DUMMY_ON_HOST=1: on the host) */
    float row_scale;       /* [rope] the rows load_slice* copies now are multiplied by it (0 or 1: as stored; part_t) */
} loader_t;

/* [rope] the rows being loaded are scaled (loader_t.row_scale) */
static int row_scaled(const loader_t *L)
{
    return L->row_scale != 0.0f && L->row_scale != 1.0f;
}

/* The checkpoint tensor (kind, layer); NULL with an error logged when it is missing. */
static const sits_st_tensor_t *find_tensor(const loader_t *L, sits_wkind_t kind, int layer)
{
    char name[160];
    sits_wkind_name(kind, layer, name, sizeof name);
    const sits_st_tensor_t *t = sits_st_find(L->st, name);
    if (!t) SITS_ERROR(SITS_SUB_MODEL, "tensor %s is missing", name);
    return t;
}

/* [int4] "X" of the linear (kind, layer) whose weight is "X.weight" */
static void w4_base(sits_wkind_t kind, int layer, char *base, size_t len)
{
    char name[160];
    sits_wkind_name(kind, layer, name, sizeof name);
    size_t n = strlen(name);
    if (n > 7 && !strcmp(name + n - 7, ".weight")) n -= 7;
    snprintf(base, len, "%.*s", (int)n, name);
}

/* [int4] 1 when the checkpoint holds linear (kind, layer) as INT4 tensors (model/int4.h) */
static int w4_ckpt(const loader_t *L, sits_wkind_t kind, int layer)
{
    char name[160], base[160];
    if (!L->st || !L->cfg->w4.fmt || !sits_wkind_linear(kind)) return 0;
    sits_wkind_name(kind, layer, name, sizeof name);
    if (sits_st_find(L->st, name)) return 0;
    w4_base(kind, layer, base, sizeof base);
    return sits_w4_present(L->cfg, L->st, base);
}

/* [int4] the checkpoint's INT4 linear (kind, layer), resolved against its full shape */
static sits_status_t w4_open(const loader_t *L, sits_wkind_t kind, int layer, sits_w4_src_t *src)
{
    char base[160];
    int64_t shape[2];
    sits_wkind_shape(L->cfg, kind, shape);
    w4_base(kind, layer, base, sizeof base);
    return sits_w4_src_open(L->cfg, L->st, base, shape[0], shape[1], "model", src);
}

/* [fp8 block] the checkpoint's scales are one per block (a row's differ along it) */
static int fp8_blockwise(const loader_t *L)
{
    return L->cfg->fp8_block[0] > 0 && L->cfg->fp8_block[1] > 0;
}

/* [families] the RMSNorm weights (Gemma stores them as w - 1: norm_plus_one) */
static int is_norm_kind(sits_wkind_t kind)
{
    return kind == SITS_W_ATTN_NORM || kind == SITS_W_FFN_NORM || kind == SITS_W_FINAL_NORM || kind == SITS_W_Q_NORM ||
           kind == SITS_W_K_NORM || kind == SITS_W_POST_ATTN_NORM || kind == SITS_W_PRE_FFN_NORM || kind == SITS_W_POST_FFN_NORM;
}

/* fp32 values of rows [r, r + n) x cols [c0, c0 + w) of (kind, layer) into out [n, w]: from the
 * checkpoint tensor t (a float dtype, or [fp8] F8_E4M3 times its weight_scale) or, t NULL, the
 * dummy generator: value(row, col) is a hash of (seed, tensor, layer, row, col) -- the same
 * whatever the slice, so every TP size holds the same model; norms are 1. */
static sits_status_t rows_f32(loader_t *L, const sits_st_tensor_t *t, sits_wkind_t kind, int layer, int64_t r, int64_t n,
                              int64_t c0, int64_t w, float *out)
{
    if (t && t->view.kind) {   /* [gpt-oss] a view of a fused or MXFP4 tensor (safetensors.h) */
        sits_st_view_rows_f32(t, r, n, c0, w, out);
        return SITS_OK;
    }
    if (t) {
        const sits_st_tensor_t *s = NULL;
        int64_t cols = t->shape[t->ndim - 1];
        size_t esz = sits_dtype_size(t->dtype);
        if (t->dtype == SITS_DT_F8_E4M3) SITS_CHECK(sits_model_fp8_scale(L->cfg, L->st, t, "model", &s));
        const int64_t bn = s && fp8_blockwise(L) ? L->cfg->fp8_block[1] : 0;   /* [fp8 block] cols a factor covers; 0: all */
        for (int64_t i = 0; i < n; i++) {
            const unsigned char *src = (const unsigned char *)t->data + ((size_t)(r + i) * (size_t)cols + (size_t)c0) * esz;
            if (sits_convert_to_f32(t->dtype, src, out + i * w, (size_t)w) != 0) {
                SITS_ERROR(SITS_SUB_MODEL, "tensor %s: cannot convert dtype %s", t->name, sits_dtype_name(t->dtype));
                return SITS_ERR_UNSUPPORTED;
            }
            for (int64_t j = 0; s && j < w;) {   /* w = q x the factor of its block (row, or tensor) */
                int64_t end = bn ? ((c0 + j) / bn + 1) * bn - c0 : w;   /* the block's last col + 1, in the slice */
                if (end > w) end = w;
                const float sc = sits_model_fp8_scale_at(L->cfg, s, r + i, c0 + j);
                for (; j < end; j++) out[i * w + j] *= sc;
            }
        }
        return SITS_OK;
    }
    if (L->st) {   /* [int4] no float tensor: an INT4 checkpoint linear (or [moe int4] expert), dequantised */
        sits_w4_src_t src;
        if (L->w4src) src = *L->w4src;
        else SITS_CHECK(w4_open(L, kind, layer, &src));
        sits_w4_src_rows_f32(&src, r, n, c0, w, out);
        return SITS_OK;
    }
    int is_norm = is_norm_kind(kind);
    uint64_t base = sits_dummy_base(L->seed, (unsigned)kind, layer);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        uint64_t rs = sits_dummy_stream(base, r + i);
        for (int64_t j = 0; j < w; j++)
            out[i * w + j] = is_norm ? (L->cfg->norm_plus_one ? 0.0f : 1.0f) : sits_dummy_value(rs, c0 + j);
    }
    return SITS_OK;
}

/* Copy rows [r0, r1) x cols [c0, c1) of tensor (kind, layer) into dst at row dst_row0 (the
 * backend's weight dtype). Float checkpoint tensors go straight from the mapping; the dummy
 * generator and [fp8] F8_E4M3 tensors (dequantised) through fp32 staging, in chunks of rows. */
static sits_status_t load_slice(loader_t *L, void *dst, int64_t dst_row0, sits_wkind_t kind, int layer, int64_t r0, int64_t r1,
                                int64_t c0, int64_t c1)
{
    int64_t shape[2];
    int nd = sits_wkind_shape(L->cfg, kind, shape);
    int64_t cols = nd == 2 ? shape[1] : shape[0];
    int64_t rows = nd == 2 ? shape[0] : 1;
    if (r1 <= r0 || c1 <= c0) return SITS_OK;
    if (r1 > rows || c1 > cols) return SITS_ERR_INTERNAL;
    L->bytes += (size_t)(r1 - r0) * (size_t)(c1 - c0) * L->elem_size;
    if (L->count_only) return SITS_OK;   /* load progress (issue 12): dry pass */
    const sits_st_tensor_t *t = NULL;
    const int scaled = row_scaled(L);   /* [rope] through staging, multiplied */
    if (L->st && !w4_ckpt(L, kind, layer)) {   /* [int4] an INT4 linear goes through staging, dequantised */
        if (!(t = find_tensor(L, kind, layer))) return SITS_ERR_NOT_FOUND;
        if (t->dtype != SITS_DT_F8_E4M3 && !scaled && !t->view.kind)
            return L->be->ops->upload_weight(L->be, dst, dst_row0, t->data, t->dtype, cols, r0, r1, c0, c1);
    }
    int64_t w = c1 - c0;
    if (!L->st && !scaled && L->dummy_on_device && L->be->ops->dummy_rows && !is_norm_kind(kind)) {   /* [dummy] drawn where they live */
        sits_status_t st = L->be->ops->dummy_rows(L->be, dst, dst_row0, sits_dummy_base(L->seed, (unsigned)kind, layer), r0,
                                                  r1 - r0, c0, w);
        if (st != SITS_ERR_UNSUPPORTED) return st;
    }
    int64_t chunk = (int64_t)(L->staging_elems / (size_t)w);
    if (chunk < 1) return SITS_ERR_INTERNAL;
    for (int64_t r = r0; r < r1; r += chunk) {
        int64_t n = r1 - r < chunk ? r1 - r : chunk;
        SITS_CHECK(rows_f32(L, t, kind, layer, r, n, c0, w, L->staging));
        if (scaled)
            for (int64_t i = 0; i < n * w; i++) L->staging[i] *= L->row_scale;
        SITS_CHECK(L->be->ops->upload_weight(L->be, dst, dst_row0 + (r - r0), L->staging, SITS_DT_F32, w, 0, n, 0, w));
    }
    return SITS_OK;
}

/* [fp8] Rows [r0, r1) x cols [c0, c0 + w) of a [*, cols] linear as E4M3 bytes into dst_q ([rows, w]) at row
 * dst_row0 and their scales into dst_s: copied from the F8_E4M3 tensor t with its scale tensor s, or (s NULL)
 * quantised from the FULL rows rows_f32 gives for (t, kind, layer) -- a row's scale does not depend on
 * the slice, so every TP slice holds the same values. */
static sits_status_t fp8_rows(loader_t *L, const sits_st_tensor_t *t, const sits_st_tensor_t *s, sits_wkind_t kind, int layer,
                              int64_t r0, int64_t r1, int64_t cols, int64_t c0, int64_t w, void *dst_q, float *dst_s,
                              int64_t dst_row0)
{
    sits_backend_t *be = L->be;
    if (!t && !L->st && !row_scaled(L) && L->dummy_on_device && be->ops->dummy_rows_fp8) {   /* [dummy] drawn and quantised where they live */
        sits_status_t st = be->ops->dummy_rows_fp8(be, dst_q, dst_s, dst_row0, sits_dummy_base(L->seed, (unsigned)kind, layer),
                                                   r0, r1 - r0, cols, c0, w);
        if (st != SITS_ERR_UNSUPPORTED) return st;
    }
    int64_t chunk = (int64_t)(L->staging_elems / (size_t)(s ? w : cols));
    if (chunk < 1) return SITS_ERR_INTERNAL;
    for (int64_t r = r0; r < r1; r += chunk) {
        int64_t n = r1 - r < chunk ? r1 - r : chunk;
        if (s) {
            for (int64_t i = 0; i < n; i++) {
                memcpy(L->qstage + i * w, (const unsigned char *)t->data + (size_t)(r + i) * (size_t)cols + (size_t)c0, (size_t)w);
                L->sstage[i] = sits_model_fp8_scale_at(L->cfg, s, r + i, 0);
            }
        } else {
            SITS_CHECK(rows_f32(L, t, kind, layer, r, n, 0, cols, L->staging));
#pragma omp parallel for schedule(static)
            for (int64_t i = 0; i < n; i++) {
                const float *row = L->staging + i * cols;
                float mx = 0.0f;
                for (int64_t j = 0; j < cols; j++) mx = fabsf(row[j]) > mx ? fabsf(row[j]) : mx;
                L->sstage[i] = sits_fp8_scale(mx);
                sits_fp8_quantize_row(L->qstage + i * w, row + c0, (size_t)w, L->sstage[i]);
            }
        }
        for (int64_t i = 0; row_scaled(L) && i < n; i++) L->sstage[i] *= L->row_scale;   /* [rope] exact: same bytes */
        int64_t d = dst_row0 + (r - r0);
        SITS_CHECK(be->ops->upload(be, (unsigned char *)dst_q + (size_t)d * (size_t)w, L->qstage, (size_t)(n * w)));
        SITS_CHECK(be->ops->upload(be, dst_s + d, L->sstage, sizeof(float) * (size_t)n));
    }
    return SITS_OK;
}

/* [fp8] Rows [r0, r1) x cols [c0, c1) of a linear weight as FP8 E4M3 into dst_q ([rows, c1 - c0]
 * bytes) at row dst_row0, and their scales into dst_s[dst_row0 ..]. An F8_E4M3 checkpoint tensor is
 * copied with its weight_scale; anything else is quantised here from the FULL rows (the scale of
 * a row does not depend on the TP slice, so every TP size holds the same values). */
static sits_status_t load_slice_fp8(loader_t *L, void *dst_q, float *dst_s, int64_t dst_row0, sits_wkind_t kind, int layer,
                                    int64_t r0, int64_t r1, int64_t c0, int64_t c1)
{
    int64_t shape[2];
    sits_wkind_shape(L->cfg, kind, shape);
    int64_t rows = shape[0], cols = shape[1], w = c1 - c0;
    if (r1 <= r0 || c1 <= c0) return SITS_OK;
    if (r1 > rows || c1 > cols) return SITS_ERR_INTERNAL;
    L->bytes += (size_t)(r1 - r0) * ((size_t)w + sizeof(float));
    if (L->count_only) return SITS_OK;
    const sits_st_tensor_t *t = NULL, *s = NULL;
    if (L->st && !w4_ckpt(L, kind, layer)) {
        if (!(t = find_tensor(L, kind, layer))) return SITS_ERR_NOT_FOUND;
        if (t->dtype == SITS_DT_F8_E4M3) SITS_CHECK(sits_model_fp8_scale(L->cfg, L->st, t, "model", &s));
    }
    if (fp8_blockwise(L)) s = NULL;   /* [fp8 block] re-quantised per row from the dequantised rows */
    return fp8_rows(L, t, s, kind, layer, r0, r1, cols, c0, w, dst_q, dst_s, dst_row0);
}

static sits_status_t alloc_w(loader_t *L, size_t elems, void **p)
{
    if (L->count_only) {   /* load progress (issue 12): dry pass */
        *p = NULL;
        return SITS_OK;
    }
    return L->be->ops->alloc(L->be, elems * L->elem_size, p);
}

/* An RMSNorm weight [n] of (kind, layer) into a fresh buffer *p: FP32 on every backend, whatever its
 * weight dtype (the norm ops read fp32 weights, backend.h), so that Gemma's 1 + w (norm_plus_one) is
 * the fp32 value HF computes, 1.0 + w.float(), and not that value rounded to bf16 (on the H200 that
 * rounding alone put Gemma 2 / 3's logits 0.07 / 0.12 from HF's fp32 ones). */
static sits_status_t load_norm(loader_t *L, sits_wkind_t kind, int layer, int64_t n, void **p)
{
    L->bytes += (size_t)n * sizeof(float);
    if (L->count_only) {   /* load progress (issue 12): dry pass */
        *p = NULL;
        return SITS_OK;
    }
    const sits_st_tensor_t *t = NULL;
    if (L->st && !(t = find_tensor(L, kind, layer))) return SITS_ERR_NOT_FOUND;
    if ((size_t)n > L->staging_elems) return SITS_ERR_INTERNAL;
    SITS_CHECK(L->be->ops->alloc(L->be, (size_t)n * sizeof(float), p));
    SITS_CHECK(rows_f32(L, t, kind, layer, 0, 1, 0, n, L->staging));
    if (L->cfg->norm_plus_one)   /* [families] Gemma: x * (1 + w), 1 + w in fp32 as HF */
        for (int64_t i = 0; i < n; i++) L->staging[i] = 1.0f + L->staging[i];
    if (kind == SITS_W_FINAL_NORM && L->cfg->logits_scale > 0.0f)   /* [granite] logits / logits_scaling: linear in w */
        for (int64_t i = 0; i < n; i++) L->staging[i] /= L->cfg->logits_scale;
    return L->be->ops->upload(L->be, *p, L->staging, (size_t)n * sizeof(float));
}

/* [gpt-oss] entries [c0, c0 + n) of the 1-d tensor (kind, layer) as FP32 on the backend (attention sinks) */
static sits_status_t load_f32_cols(loader_t *L, sits_wkind_t kind, int layer, int64_t c0, int64_t n, float **p)
{
    L->bytes += (size_t)n * sizeof(float);
    *p = NULL;
    if (L->count_only || n < 1) return SITS_OK;
    const sits_st_tensor_t *t = NULL;
    if (L->st && !(t = find_tensor(L, kind, layer))) return SITS_ERR_NOT_FOUND;
    if ((size_t)n > L->staging_elems) return SITS_ERR_INTERNAL;
    SITS_CHECK(L->be->ops->alloc(L->be, (size_t)n * sizeof(float), (void **)p));
    SITS_CHECK(rows_f32(L, t, kind, layer, 0, 1, c0, n, L->staging));
    return L->be->ops->upload(L->be, *p, L->staging, (size_t)n * sizeof(float));
}

static sits_status_t alloc_bytes(loader_t *L, size_t bytes, void **p)
{
    if (L->count_only) {
        *p = NULL;
        return SITS_OK;
    }
    return L->be->ops->alloc(L->be, bytes, p);
}

/* [fp8] The precision linear `lin` of layer l (SITS_LIN_PER_LAYER: lm_head) is held in: the plan's
 * choice, auto meaning "as the checkpoint stores it" (FP8, [int4] INT4, else bf16), then the shape
 * rules (precision.h): fp8 needs in % 16 == 0 and out % 16 == 0; [int4] --quant int4 of float
 * weights needs this rank's inputs a multiple of SITS_INT4_GROUP; an INT4 lm_head is dequantised.
 * in, out: this rank's inputs and outputs. */
static sits_prec_t want_prec(loader_t *L, int l, int lin, int64_t in, int64_t out)
{
    static const sits_wkind_t parts[SITS_LIN_PER_LAYER + 1][3] = {
        { SITS_W_Q, SITS_W_K, SITS_W_V }, { SITS_W_O, SITS_W_O, SITS_W_O }, { SITS_W_GATE, SITS_W_UP, SITS_W_UP },
        { SITS_W_DOWN, SITS_W_DOWN, SITS_W_DOWN }, { SITS_W_LM_HEAD, SITS_W_LM_HEAD, SITS_W_LM_HEAD } };
    sits_prec_t p = lin == SITS_LIN_PER_LAYER ? (L->plan ? (sits_prec_t)L->plan->lm_head : SITS_PREC_AUTO)
                                              : sits_quant_plan_get(L->plan, l, (sits_linear_t)lin);
    /* [int4] whether the checkpoint holds this linear (every part of it) in INT4 */
    int ck4 = 0;
    if (L->st && L->cfg->w4.fmt) {
        sits_wkind_t k0 = parts[lin][0];
        if (lin == SITS_LIN_QKV && L->cfg->fused_qkv) k0 = SITS_W_QKV;
        if (lin == SITS_LIN_GATE_UP && L->cfg->fused_gate_up) k0 = SITS_W_GATE_UP;
        ck4 = w4_ckpt(L, k0, l);
    }
    if (p == SITS_PREC_AUTO) {
        p = ck4 && L->cfg->w4.bits != 8 ? SITS_PREC_INT4 : SITS_PREC_BF16;   /* [w8a16] 8-bit: dequantised at load */
        for (int k = 0; L->st && k < 3 && !ck4; k++) {
            char name[160];
            sits_wkind_name(parts[lin][k], l, name, sizeof name);
            const sits_st_tensor_t *t = sits_st_find(L->st, name);
            if (t && t->dtype == SITS_DT_F8_E4M3) p = SITS_PREC_FP8;
        }
    }
    char where[48] = "";
    if (lin != SITS_LIN_PER_LAYER) snprintf(where, sizeof where, " of layer %d", l);
    int say = !L->count_only && L->tp_rank == 0;
    if (p == SITS_PREC_INT4 && lin == SITS_LIN_PER_LAYER) p = SITS_PREC_BF16;   /* the logits stay 16-bit */
    if (ck4 && L->cfg->w4.bits == 8) ck4 = 0;   /* [w8a16] never copied as stored: --quant int4 re-quantises it */
    if (p == SITS_PREC_INT4 && !ck4 && (in % SITS_INT4_GROUP || in < SITS_INT4_GROUP)) {
        if (say)
            SITS_WARN(SITS_SUB_MODEL, "quant: %s%s stays %s: int4 needs this rank's inputs a multiple of the group size %d (in %lld)",
                      sits_linear_name((sits_linear_t)lin), where, L->elem_size == 4 ? "fp32" : "bf16", SITS_INT4_GROUP,
                      (long long)in);
        p = SITS_PREC_BF16;
    }
    if (p == SITS_PREC_FP8 && (in % 16 || out % 16)) {
        if (say)
            SITS_WARN(SITS_SUB_MODEL, "quant: %s%s stays %s: fp8 needs in %% 16 == 0 and out %% 16 == 0 (in %lld, out %lld)",
                      sits_linear_name((sits_linear_t)lin), where, L->elem_size == 4 ? "fp32" : "bf16", (long long)in,
                      (long long)out);
        p = SITS_PREC_BF16;
    }
    if (lin == SITS_LIN_PER_LAYER) L->lm_head_prec = p;
    else if (L->prec) L->prec[(size_t)l * SITS_LIN_PER_LAYER + lin] = (uint8_t)p;
    if (p == SITS_PREC_FP8) L->n_fp8++;     /* counted in count mode too (sits_model_weights_shard_plan) */
    if (p == SITS_PREC_INT4) L->n_int4++;
    return p;
}

/* rows [r0, r1) x cols [c0, c1) of tensor kind at row dst_row0 of a fused linear; rs: [rope] the rows times rs (0: 1) */
typedef struct { sits_wkind_t kind; int64_t dst_row0, r0, r1, c0, c1; float rs; } part_t;

/* [int4] rows [r, r + n) x cols [c0, c0 + w) of a 4-bit checkpoint linear as stored: nibbles qb [n, w / 2], and the
 * scales / zeros sb, zb [n, ng] of its groups g0 .. g0 + ng - 1 */
static void w4_copy_rows(const sits_w4_src_t *src, uint8_t *qb, float *sb, float *zb, int64_t r, int64_t n, int64_t c0, int64_t w,
                         int64_t ng, int64_t g0)
{
    int64_t half = w / 2;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        uint8_t *qr = qb + i * half;
        memset(qr, 0, (size_t)half);
        for (int64_t k = 0; k < w; k++) qr[k / 2] |= (uint8_t)(sits_w4_src_q(src, r + i, c0 + k) << (k & 1 ? 4 : 0));
        for (int64_t j = 0; j < ng; j++) {
            sb[i * ng + j] = sits_w4_src_scale(src, r + i, (int)(g0 + j));
            zb[i * ng + j] = sits_w4_src_zero(src, r + i, (int)(g0 + j));
        }
    }
}

/* [int4] dummy weights as INT4: nibbles from a hash of (seed, kind, layer, row, col / 16), 16 per draw, so every TP
 * slice holds the same model; scale 0.1 / 15, zero 8: values in [-0.053, 0.047], the range of the float dummy weights
 * (rows_f32) without quantising them (the hash per element and the clipping search: 100 s of load for the 8B shape on
 * 2 cores). Rows [r, r + n) x cols [c0, c0 + w) into qb [n, w / 2], sb / zb [n, ng]. */
static void w4_dummy_rows(const loader_t *L, unsigned long long kind, int layer, uint8_t *qb, float *sb, float *zb, int64_t r,
                          int64_t n, int64_t c0, int64_t w, int64_t ng)
{
    const float sc = 0.1f / 15.0f, z = 8.0f;   /* zero: an integer, as every format stores */
    int64_t half = w / 2;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        uint64_t rs = L->seed ^ (kind << 56) ^ ((uint64_t)layer << 40) ^ (uint64_t)(r + i) ^ 0x3f4ull << 28;
        rs = sits_splitmix64(&rs);
        uint8_t *qr = qb + i * half;
        unsigned long long bits = 0;
        for (int64_t k = 0; k < w; k++) {
            int64_t col = c0 + k;
            if (k == 0 || (col & 15) == 0) {
                uint64_t h = rs + (uint64_t)(col >> 4) * 0x9e3779b97f4a7c15ull;
                bits = sits_splitmix64(&h);
            }
            unsigned nib = (unsigned)(bits >> (4 * (col & 15))) & 15u;
            if (k & 1) qr[k / 2] |= (uint8_t)(nib << 4);
            else qr[k / 2] = (uint8_t)nib;
        }
        for (int64_t j = 0; j < ng; j++) {
            sb[i * ng + j] = sc;
            zb[i * ng + j] = z;
        }
    }
}

/* [int4] Rows [r0, r1) x inputs [c0, c1) of linear (kind, layer) into the packed INT4 linear w4 at
 * row dst_row0 (backend.h layout; w4's group structure already decided by load_linear_w4, gidx_host
 * [c1 - c0] its act-order groups or NULL). From an INT4 checkpoint the nibbles, scales and zeros are
 * copied (re-packed); float (or FP8) weights are quantised here, round to nearest per group
 * (sits_w4_quantize_row: the slice holds whole groups, so every TP size holds the same values). */
static sits_status_t load_slice_w4(loader_t *L, sits_w4_t *w4, int64_t dst_row0, sits_wkind_t kind, int layer, int64_t r0,
                                   int64_t r1, int64_t c0, int64_t c1, const int32_t *gidx_host)
{
    int64_t w = c1 - c0, half = w / 2, ng = w4->n_groups;
    if (r1 <= r0 || c1 <= c0) return SITS_OK;
    L->bytes += (size_t)(r1 - r0) * ((size_t)half + 2 * sizeof(float) * (size_t)ng);
    if (L->count_only) return SITS_OK;
    sits_w4_src_t src;
    const sits_st_tensor_t *t = NULL;
    int ck = w4_ckpt(L, kind, layer);
    if (ck) {
        SITS_CHECK(w4_open(L, kind, layer, &src));
        int same = !src.gidx == !gidx_host;
        for (int64_t k = 0; same && gidx_host && k < w; k++) same = sits_w4_src_group(&src, c0 + k) == gidx_host[k];
        if (!same) {
            SITS_ERROR(SITS_SUB_MODEL, "model: tensor %s (%s): its g_idx (act-order) differs from the other parts of the fused "
                       "linear it belongs to (q/k/v or gate/up): not supported", src.qw->name, src.qw->file);
            return SITS_ERR_UNSUPPORTED;
        }
    } else if (gidx_host) {   /* quantising here makes contiguous groups, not the other parts' act-order ones */
        char name[160];
        sits_wkind_name(kind, layer, name, sizeof name);
        SITS_ERROR(SITS_SUB_MODEL, "model: tensor %s is not INT4 while the other parts of its fused linear are act-order INT4: "
                   "not supported", name);
        return SITS_ERR_UNSUPPORTED;
    } else if (L->st && !(t = find_tensor(L, kind, layer))) {
        return SITS_ERR_NOT_FOUND;
    } else if (t && L->cfg->w4.fmt && L->tp_rank == 0) {
        SITS_WARN(SITS_SUB_MODEL, "model: tensor %s is not INT4 in this INT4 checkpoint: quantised at load (round to nearest, "
                  "groups of %d)", t->name, w4->group_size);
    }
    int64_t chunk = (int64_t)(L->staging_elems / (size_t)(w > ng ? w : ng));
    if (chunk < 1) return SITS_ERR_INTERNAL;
    uint8_t *qb = malloc((size_t)(chunk * half));           /* [chunk, w / 2] */
    float *sb = malloc(sizeof(float) * (size_t)(chunk * ng)); /* [chunk, ng] scales */
    float *zb = malloc(sizeof(float) * (size_t)(chunk * ng)); /* [chunk, ng] zeros */
    sits_status_t st = SITS_OK;
    if (!qb || !sb || !zb) st = SITS_ERR_NOMEM;
    for (int64_t r = r0; st == SITS_OK && r < r1; r += chunk) {
        int64_t n = r1 - r < chunk ? r1 - r : chunk;
        if (ck) {
            /* group j of this slice: gidx_host's ids are the checkpoint's; else a per-channel group, or c0 / g + j */
            w4_copy_rows(&src, qb, sb, zb, r, n, c0, w, ng, gidx_host || w4->n_groups == 1 ? 0 : c0 / w4->group_size);
        } else {
            if (!L->st) {
                w4_dummy_rows(L, kind, layer, qb, sb, zb, r, n, c0, w, ng);
            } else {
                SITS_CHECK_GOTO(rows_f32(L, t, kind, layer, r, n, c0, w, L->staging), st, out);
#pragma omp parallel for schedule(static)
                for (int64_t i = 0; i < n; i++)
                    sits_w4_quantize_row(L->staging + i * w, w, w4->group_size, qb + i * half, sb + i * ng, zb + i * ng);
            }
        }
        for (int64_t i = 0; row_scaled(L) && i < n * ng; i++) sb[i] *= L->row_scale;   /* [rope] w = (q - z) s */
        int64_t d = dst_row0 + (r - r0);
        sits_backend_t *be = L->be;
        SITS_CHECK_GOTO(be->ops->upload(be, (uint8_t *)w4->q + d * half, qb, (size_t)(n * half)), st, out);
        SITS_CHECK_GOTO(be->ops->upload(be, w4->scale + d * ng, sb, sizeof(float) * (size_t)(n * ng)), st, out);
        SITS_CHECK_GOTO(be->ops->upload(be, w4->zero + d * ng, zb, sizeof(float) * (size_t)(n * ng)), st, out);
    }
out:
    free(qb);
    free(sb);
    free(zb);
    return st;
}

/* [int4] the refusal of a row-parallel slice [c0, c0 + cols) that splits groups of gs inputs */
static sits_status_t w4_straddle_error(const loader_t *L, sits_wkind_t kind, int layer, int64_t c0, int64_t cols, int gs)
{
    char base[160];
    w4_base(kind, layer, base, sizeof base);
    const sits_st_tensor_t *t = NULL;
    for (int i = 0; i < 3 && !t; i++) {
        static const char *const sfx[] = { "qweight", "weight_packed", "scales" };
        char name[192];
        snprintf(name, sizeof name, "%s.%s", base, sfx[i]);
        t = sits_st_find(L->st, name);
    }
    SITS_ERROR(SITS_SUB_MODEL, "model: %s (%s): this rank's inputs [%lld, %lld) split groups of group_size %d: with tensor "
               "parallelism the row-parallel inputs per rank (%lld) must be a multiple of the group size (use a smaller --tp)",
               base, t ? t->file : "?", (long long)c0, (long long)(c0 + cols), gs, (long long)cols);
    return SITS_ERR_UNSUPPORTED;
}

/* [int4] Before anything is allocated: the row-parallel INT4 linears (o, down) of this shard's layers
 * must not split groups (act-order g_idx and per-channel scales never do). */
static sits_status_t w4_check_shard(const loader_t *L, const sits_shard_dims_t *d, int tp_rank)
{
    const sits_model_config_t *c = L->cfg;
    if (!c->w4.fmt || !L->st || c->moe.n_experts || c->w4.bits == 8) return SITS_OK;   /* [w8a16] dequantised: any slice */
    int64_t q_rows = (int64_t)d->nh_loc * c->head_dim;
    for (int l = d->layer0; l < d->layer1; l++) {
        const struct { sits_wkind_t kind; int64_t c0, cols; } lin[2] = {
            { SITS_W_O, (int64_t)d->q_head0 * c->head_dim, q_rows }, { SITS_W_DOWN, (int64_t)tp_rank * d->i_loc, d->i_loc } };
        for (int i = 0; i < 2; i++) {
            sits_w4_src_t src;
            if (!w4_ckpt(L, lin[i].kind, l)) continue;
            SITS_CHECK(w4_open(L, lin[i].kind, l, &src));
            if (!src.gidx && src.group_size < src.in && (lin[i].c0 % src.group_size || lin[i].cols % src.group_size))
                return w4_straddle_error(L, lin[i].kind, l, lin[i].c0, lin[i].cols, src.group_size);
        }
    }
    return SITS_OK;
}

/* [int4] One (fused) linear of rows x cols in packed INT4. Its group structure comes from the first
 * part: the checkpoint's group size (one group per row when per-channel; groups must not straddle
 * this rank's input slice [c0, c0 + cols) -- refused otherwise), or its act-order g_idx (then every
 * group's scales are kept: the slice's inputs may belong to any group); SITS_INT4_GROUP when the
 * weights are quantised here. Every part has the same inputs [c0, c1) (column-parallel parts: all of
 * them; a row-parallel linear has one part). */
static sits_status_t load_linear_w4(loader_t *L, int layer, int64_t rows, int64_t cols, const part_t *parts, int n_parts,
                                    sits_w4_t *w4)
{
    sits_w4_t q;
    memset(&q, 0, sizeof q);
    int64_t c0 = parts[0].c0;
    int32_t *gidx = NULL;   /* [cols] host copy of the act-order groups */
    sits_status_t st = SITS_OK;
    int ck = w4_ckpt(L, parts[0].kind, layer) && L->cfg->w4.bits != 8;   /* [w8a16] re-quantised from its dequantised rows */
    q.group_size = SITS_INT4_GROUP;
    q.n_groups = (int)(cols / SITS_INT4_GROUP);
    if (ck) {
        int64_t shape[2];
        sits_wkind_shape(L->cfg, parts[0].kind, shape);
        int gs = L->cfg->w4.group_size > 0 ? L->cfg->w4.group_size : (int)shape[1];
        int act = L->cfg->w4.desc_act || L->cfg->w4.fmt == SITS_W4_CT;   /* a g_idx may be present */
        sits_w4_src_t src;
        if (!L->count_only) {
            SITS_CHECK(w4_open(L, parts[0].kind, layer, &src));
            act = src.gidx != NULL;
        }
        if (gs >= shape[1]) {             /* per channel: one group per row, whatever the slice */
            q.group_size = (int)cols;
            q.n_groups = 1;
        } else if (act) {                 /* act-order: the slice's g_idx, every group */
            q.group_size = gs;
            q.n_groups = (int)((shape[1] + gs - 1) / gs);
            L->bytes += sizeof(int32_t) * (size_t)cols;
            if (!L->count_only) {
                SITS_ALLOC_CHECK_GOTO(gidx = malloc(sizeof(int32_t) * (size_t)cols), st, out);
                for (int64_t k = 0; k < cols; k++) gidx[k] = sits_w4_src_group(&src, c0 + k);
            }
        } else if (c0 % gs || cols % gs) {
            return w4_straddle_error(L, parts[0].kind, layer, c0, cols, gs);
        } else {
            q.group_size = gs;
            q.n_groups = (int)(cols / gs);
        }
    }
    const size_t ra = (size_t)sits_w4_rows_alloc(rows);   /* [int4 tiles] whole 16-row tiles (the slices count the rest) */
    L->bytes += (ra - (size_t)rows) * ((size_t)(cols / 2) + 2 * sizeof(float) * (size_t)q.n_groups);
    if (!L->count_only) {
        sits_backend_t *be = L->be;
        SITS_CHECK_GOTO(be->ops->alloc(be, ra * (size_t)(cols / 2), &q.q), st, err);
        SITS_CHECK_GOTO(be->ops->alloc(be, sizeof(float) * ra * (size_t)q.n_groups, (void **)&q.scale), st, err);
        SITS_CHECK_GOTO(be->ops->alloc(be, sizeof(float) * ra * (size_t)q.n_groups, (void **)&q.zero), st, err);
        if (gidx) {
            SITS_CHECK_GOTO(be->ops->alloc(be, sizeof(int32_t) * (size_t)cols, (void **)&q.gidx), st, err);
            SITS_CHECK_GOTO(be->ops->upload(be, q.gidx, gidx, sizeof(int32_t) * (size_t)cols), st, err);
        }
    }
    for (int i = 0; i < n_parts; i++) {
        const part_t *p = &parts[i];
        L->row_scale = p->rs;
        st = load_slice_w4(L, &q, p->dst_row0, p->kind, layer, p->r0, p->r1, p->c0, p->c1, gidx);
        L->row_scale = 0.0f;
        if (st != SITS_OK) goto err;
    }
    if (!L->count_only && L->be->ops->w4_layout) SITS_CHECK_GOTO(L->be->ops->w4_layout(L->be, &q, (int)rows, (int)cols), st, err);
    *w4 = q;
    free(gidx);
    return SITS_OK;
err:
    if (!L->count_only) {
        void *ptrs[] = { q.q, q.scale, q.zero, q.gidx };
        for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
            if (ptrs[i]) L->be->ops->free(L->be, ptrs[i]);
    }
out:
    free(gidx);
    return st;
}

/* One (fused) linear of rows x cols from its parts in precision prec: the backend dtype into *w_p,
 * [fp8] E4M3 into *w_p with scales into *s_p, or [int4] packed INT4 into *w4_p. */
static sits_status_t load_linear(loader_t *L, sits_prec_t prec, int layer, int64_t rows, int64_t cols, const part_t *parts,
                                 int n_parts, void **w_p, float **s_p, sits_w4_t *w4_p)
{
    int fp8 = prec == SITS_PREC_FP8;
    if (prec == SITS_PREC_INT4) return load_linear_w4(L, layer, rows, cols, parts, n_parts, w4_p);
    if (fp8) {
        SITS_CHECK(alloc_bytes(L, (size_t)rows * (size_t)cols, w_p));
        SITS_CHECK(alloc_bytes(L, sizeof(float) * (size_t)rows, (void **)s_p));
    } else {
        SITS_CHECK(alloc_w(L, (size_t)rows * (size_t)cols, w_p));
    }
    for (int i = 0; i < n_parts; i++) {
        const part_t *p = &parts[i];
        sits_status_t st;
        L->row_scale = p->rs;
        if (fp8) st = load_slice_fp8(L, *w_p, *s_p, p->dst_row0, p->kind, layer, p->r0, p->r1, p->c0, p->c1);
        else st = load_slice(L, *w_p, p->dst_row0, p->kind, layer, p->r0, p->r1, p->c0, p->c1);
        L->row_scale = 0.0f;
        SITS_CHECK(st);
    }
    return SITS_OK;
}

/* base + elems weights (NULL in the dry pass, where nothing is allocated) */
static void *elem_at(const loader_t *L, void *base, size_t elems)
{
    return L->count_only ? NULL : (char *)base + elems * L->elem_size;
}

static sits_status_t moe_load_layer(loader_t *L, const sits_shard_dims_t *d, int tp_rank, int l, sits_layer_weights_t *lw);

/* [rope] The parts of n_heads heads of hd rows (x cols [0, H)) in the order perm gives (sits_model_rope_perm): dim j of
 * head h (row dst0 + h hd + j) from checkpoint row src0 + h hd + perm[j], in runs of consecutive rows; the rows of the
 * passing dims (perm[j] >= rd) times pass_rs. The engine folds the rope attention factor af into the attention scale
 * (af^2 on q . k), which HF applies to the rotary dims alone (cos, sin x af): q's passing rows carry 1 / af^2 to undo
 * it there. Returns the parts written (4 a head for partial rotary; a row each with [glm]'s interleaved pairs). */
static int rope_head_parts(part_t *out, const int *perm, int hd, int rd, sits_wkind_t kind, int64_t dst0, int64_t src0, int n_heads,
                           int64_t H, float pass_rs)
{
    int n = 0;
    for (int h = 0; h < n_heads; h++)
        for (int j = 0; j < hd;) {
            int k = j + 1;
            while (k < hd && perm[k] == perm[k - 1] + 1 && (perm[k] >= rd) == (perm[j] >= rd)) k++;
            const int64_t r = src0 + (int64_t)h * hd + perm[j];
            out[n++] = (part_t){ kind, dst0 + (int64_t)h * hd + j, r, r + (k - j), 0, H, perm[j] >= rd ? pass_rs : 1.0f };
            j = k;
        }
    return n;
}

/* [glm] The q / k / v biases of a layer whose q / k rows are reordered (sits_model_rope_perm): element j of head h from
 * the checkpoint's h hd + perm[j], one column at a time (q's passing columns times 1 / af^2, as rope_head_parts) */
static sits_status_t load_bias_perm(loader_t *L, sits_layer_weights_t *lw, const sits_shard_dims_t *d, const sits_model_config_t *c,
                                    int l, int64_t q0, int64_t kv0, int64_t q_rows, int64_t kv_rows)
{
    const int hd = c->head_dim, rd = sits_model_rope_dim(c);
    const float pass_rs = (float)(1.0 / (c->rope_attn_factor * c->rope_attn_factor));
    SITS_CHECK(alloc_w(L, (size_t)d->qkv_dim, &lw->qkv_bias));
    int *perm = malloc(sizeof(int) * (size_t)hd);
    if (!perm) return SITS_ERR_NOMEM;
    sits_model_rope_perm(c, perm);
    sits_status_t st = SITS_OK;
    for (int part = 0; part < 2 && st == SITS_OK; part++) {   /* q, then k */
        const int nh = part ? d->nkv_loc : d->nh_loc;
        const int64_t base = part ? q_rows : 0, c0 = part ? kv0 : q0;
        for (int h = 0; h < nh && st == SITS_OK; h++)
            for (int j = 0; j < hd && st == SITS_OK; j++) {
                const int64_t col = c0 + (int64_t)h * hd + perm[j];
                L->row_scale = !part && perm[j] >= rd ? pass_rs : 0.0f;
                st = load_slice(L, elem_at(L, lw->qkv_bias, (size_t)(base + (int64_t)h * hd + j)), 0, part ? SITS_W_K_BIAS : SITS_W_Q_BIAS,
                                l, 0, 1, col, col + 1);
                L->row_scale = 0.0f;
            }
    }
    free(perm);
    SITS_CHECK(st);
    return load_slice(L, elem_at(L, lw->qkv_bias, (size_t)(q_rows + kv_rows)), 0, SITS_W_V_BIAS, l, 0, 1, kv0, kv0 + kv_rows);
}

static sits_status_t load_layer(loader_t *L, const sits_shard_dims_t *d, int tp_rank, int l, sits_layer_weights_t *lw)
{
    const sits_model_config_t *c = L->cfg;
    int64_t H = c->hidden_size, hd = c->head_dim, I = c->intermediate_size;
    int64_t q_rows = (int64_t)d->nh_loc * hd, kv_rows = (int64_t)d->nkv_loc * hd;
    int64_t q0 = (int64_t)d->q_head0 * hd, kv0 = (int64_t)d->kv_head0 * hd, i0 = (int64_t)tp_rank * d->i_loc;
    SITS_CHECK(load_norm(L, SITS_W_ATTN_NORM, l, H, &lw->attn_norm));
    {
        /* [families] fused_qkv: the same rows from one [(nh + 2 nkv) hd, H] tensor (k after all q heads, v after k) */
        int64_t ko = c->fused_qkv ? (int64_t)c->n_heads * hd : 0, vo = c->fused_qkv ? ko + (int64_t)c->n_kv_heads * hd : 0;
        sits_wkind_t kq = c->fused_qkv ? SITS_W_QKV : SITS_W_Q, kk = c->fused_qkv ? SITS_W_QKV : SITS_W_K;
        sits_wkind_t kvk = c->fused_qkv ? SITS_W_QKV : SITS_W_V;
        const part_t qkv[3] = { { kq, 0, q0, q0 + q_rows, 0, H, 0 }, { kk, q_rows, ko + kv0, ko + kv0 + kv_rows, 0, H, 0 },
                                { kvk, q_rows + kv_rows, vo + kv0, vo + kv0 + kv_rows, 0, H, 0 } };
        if (sits_model_rope_dim(c) == hd && !c->rope_interleave) {
            SITS_CHECK(load_linear(L, want_prec(L, l, SITS_LIN_QKV, H, d->qkv_dim), l, d->qkv_dim, H, qkv, 3, &lw->qkv,
                                   &lw->qkv_scale, &lw->qkv_w4));
        } else {   /* [rope] partial or [glm] interleaved rotary: each q / k head's dims reordered (config.h sits_model_rope_perm) */
            const double af = c->rope_attn_factor;
            int *perm = malloc(sizeof(int) * (size_t)hd);
            part_t *parts = malloc(sizeof(part_t) * (size_t)(hd * (d->nh_loc + d->nkv_loc) + 1));   /* a row each at most */
            if (!perm || !parts) {
                free(perm);
                free(parts);
                return SITS_ERR_NOMEM;
            }
            sits_model_rope_perm(c, perm);
            int np = rope_head_parts(parts, perm, (int)hd, sits_model_rope_dim(c), kq, 0, q0, d->nh_loc, H, (float)(1.0 / (af * af)));
            np += rope_head_parts(parts + np, perm, (int)hd, sits_model_rope_dim(c), kk, q_rows, ko + kv0, d->nkv_loc, H, 1.0f);
            parts[np++] = qkv[2];
            sits_status_t st = load_linear(L, want_prec(L, l, SITS_LIN_QKV, H, d->qkv_dim), l, d->qkv_dim, H, parts, np, &lw->qkv,
                                           &lw->qkv_scale, &lw->qkv_w4);
            free(perm);
            free(parts);
            SITS_CHECK(st);
        }
    }
    if (c->qkv_bias && (sits_model_rope_dim(c) != hd || c->rope_interleave)) {   /* [glm] the q / k biases reordered like their rows */
        SITS_CHECK(load_bias_perm(L, lw, d, c, l, q0, kv0, q_rows, kv_rows));
    } else if (c->qkv_bias) {
        /* a bias [n] is a [1, n] tensor: its slice is columns, packed one after the other */
        SITS_CHECK(alloc_w(L, (size_t)d->qkv_dim, &lw->qkv_bias));
        SITS_CHECK(load_slice(L, lw->qkv_bias, 0, SITS_W_Q_BIAS, l, 0, 1, q0, q0 + q_rows));
        void *kb = elem_at(L, lw->qkv_bias, (size_t)q_rows);
        void *vb = elem_at(L, lw->qkv_bias, (size_t)(q_rows + kv_rows));
        SITS_CHECK(load_slice(L, kb, 0, SITS_W_K_BIAS, l, 0, 1, kv0, kv0 + kv_rows));
        SITS_CHECK(load_slice(L, vb, 0, SITS_W_V_BIAS, l, 0, 1, kv0, kv0 + kv_rows));
    }
    if (c->qk_norm) {   /* [families] */
        SITS_CHECK(load_norm(L, SITS_W_Q_NORM, l, hd, &lw->q_norm));
        SITS_CHECK(load_norm(L, SITS_W_K_NORM, l, hd, &lw->k_norm));
    }
    if (c->attn_sinks) SITS_CHECK(load_f32_cols(L, SITS_W_SINKS, l, d->q_head0, d->nh_loc, &lw->sinks));   /* [gpt-oss] */
    {
        const part_t o = { SITS_W_O, 0, 0, H, q0, q0 + q_rows, c->residual_mult };   /* [granite] x residual_multiplier */
        SITS_CHECK(load_linear(L, want_prec(L, l, SITS_LIN_O, q_rows, H), l, H, q_rows, &o, 1, &lw->o, &lw->o_scale,
                               &lw->o_w4));
    }
    if (c->o_bias && tp_rank == 0) {
        SITS_CHECK(alloc_w(L, H, &lw->o_bias));
        L->row_scale = c->residual_mult;
        sits_status_t st = load_slice(L, lw->o_bias, 0, SITS_W_O_BIAS, l, 0, 1, 0, H);
        L->row_scale = 0.0f;
        SITS_CHECK(st);
    }
    SITS_CHECK(load_norm(L, c->sandwich_norms ? SITS_W_PRE_FFN_NORM : SITS_W_FFN_NORM, l, H, &lw->ffn_norm));
    if (c->sandwich_norms) {   /* [families] Gemma */
        SITS_CHECK(load_norm(L, SITS_W_POST_ATTN_NORM, l, H, &lw->post_attn_norm));
        SITS_CHECK(load_norm(L, SITS_W_POST_FFN_NORM, l, H, &lw->post_ffn_norm));
    }
    if (c->moe.n_experts) return moe_load_layer(L, d, tp_rank, l, lw);   /* [moe] experts instead of the dense MLP */
    {
        /* [families] fused_gate_up: gate rows [0, I), up rows [I, 2 I) of one tensor */
        int64_t uo = c->fused_gate_up ? I : 0;
        sits_wkind_t kg = c->fused_gate_up ? SITS_W_GATE_UP : SITS_W_GATE, ku = c->fused_gate_up ? SITS_W_GATE_UP : SITS_W_UP;
        const part_t gu[2] = { { kg, 0, i0, i0 + d->i_loc, 0, H, 0 }, { ku, d->i_loc, uo + i0, uo + i0 + d->i_loc, 0, H, 0 } };
        SITS_CHECK(load_linear(L, want_prec(L, l, SITS_LIN_GATE_UP, H, 2 * (int64_t)d->i_loc), l, 2 * (int64_t)d->i_loc, H,
                               gu, 2, &lw->gu, &lw->gu_scale, &lw->gu_w4));
    }
    if (c->mlp_bias) {
        SITS_CHECK(alloc_w(L, (size_t)2 * d->i_loc, &lw->gu_bias));
        SITS_CHECK(load_slice(L, lw->gu_bias, 0, SITS_W_GATE_BIAS, l, 0, 1, i0, i0 + d->i_loc));
        void *ub = elem_at(L, lw->gu_bias, (size_t)d->i_loc);
        SITS_CHECK(load_slice(L, ub, 0, SITS_W_UP_BIAS, l, 0, 1, i0, i0 + d->i_loc));
        if (tp_rank == 0) {
            SITS_CHECK(alloc_w(L, H, &lw->down_bias));
            L->row_scale = c->residual_mult;
            sits_status_t st = load_slice(L, lw->down_bias, 0, SITS_W_DOWN_BIAS, l, 0, 1, 0, H);
            L->row_scale = 0.0f;
            SITS_CHECK(st);
        }
    }
    {
        const part_t dn = { SITS_W_DOWN, 0, 0, H, i0, i0 + d->i_loc, c->residual_mult };   /* [granite] */
        SITS_CHECK(load_linear(L, want_prec(L, l, SITS_LIN_DOWN, d->i_loc, H), l, H, d->i_loc, &dn, 1, &lw->down,
                               &lw->down_scale, &lw->down_w4));
    }
    return SITS_OK;
}

/* ---- [moe] expert tensors (layout.h names) ---- */

/* [moe] The checkpoint tensor of an expert part (expert x; 0 for the router and the shared expert). */
static sits_status_t moe_tensor(loader_t *L, sits_moe_part_t part, int layer, int expert, const sits_st_tensor_t **t_p)
{
    char name[160];
    sits_moe_part_name(L->cfg, part, layer, expert, name, sizeof name);
    if (!(*t_p = sits_st_find(L->st, name))) {
        SITS_ERROR(SITS_SUB_MODEL, "tensor %s is missing", name);
        return SITS_ERR_NOT_FOUND;
    }
    return SITS_OK;
}

/* [moe int4] Whether (part, layer, expert) is an INT4 / 8-bit checkpoint linear (X.weight absent, the format's
 * tensors present); then *src resolves it against the part's full shape. */
static int moe_w4(loader_t *L, sits_moe_part_t part, int layer, int expert, sits_w4_src_t *src, sits_status_t *st)
{
    char name[160], base[160];
    *st = SITS_OK;
    if (!L->st || !L->cfg->w4.fmt) return 0;
    sits_moe_part_name(L->cfg, part, layer, expert, name, sizeof name);
    if (sits_st_find(L->st, name)) return 0;
    snprintf(base, sizeof base, "%.*s", (int)(strlen(name) - 7), name);   /* name is "X.weight" */
    if (!sits_w4_present(L->cfg, L->st, base)) return 0;
    int64_t shape[2];
    sits_moe_part_shape(L->cfg, part, shape);
    *st = sits_w4_src_open(L->cfg, L->st, base, shape[0], shape[1], "model", src);
    return 1;
}

/* Rows [r0, r1) x cols [c0, c1) of MoE part (part, layer, expert) into dst at row dst_row0, as load_slice
 * (the dummy generator seeds by part, layer and expert). */
static sits_status_t moe_slice(loader_t *L, void *dst, int64_t dst_row0, sits_moe_part_t part, int layer, int expert,
                               int64_t r0, int64_t r1, int64_t c0, int64_t c1)
{
    int64_t shape[2];
    sits_moe_part_shape(L->cfg, part, shape);
    if (r1 <= r0 || c1 <= c0) return SITS_OK;
    if (r1 > shape[0] || c1 > shape[1]) return SITS_ERR_INTERNAL;
    L->bytes += (size_t)(r1 - r0) * (size_t)(c1 - c0) * L->elem_size;
    if (L->count_only) return SITS_OK;
    const sits_st_tensor_t *t = NULL;
    sits_w4_src_t w4;
    sits_status_t st;
    int is_w4 = moe_w4(L, part, layer, expert, &w4, &st);   /* [moe int4] dequantised through the staging, as fp8 */
    SITS_CHECK(st);
    if (L->st && !is_w4) {
        SITS_CHECK(moe_tensor(L, part, layer, expert, &t));
        if (t->dtype != SITS_DT_F8_E4M3 && !t->view.kind)   /* [gpt-oss] views through the staging */
            return L->be->ops->upload_weight(L->be, dst, dst_row0, t->data, t->dtype, shape[1], r0, r1, c0, c1);
    }   /* [moe fp8] an FP8 checkpoint expert held in the backend dtype: dequantised through the staging */
    int64_t w = c1 - c0, chunk = (int64_t)(L->staging_elems / (size_t)w);
    if (chunk < 1) return SITS_ERR_INTERNAL;
    sits_wkind_t seed_kind = (sits_wkind_t)(64 + part);   /* beyond every dense kind */
    int seed_layer = layer * 4096 + expert;
    if (!L->st && L->dummy_on_device && L->be->ops->dummy_rows) {   /* [dummy] drawn where they live */
        st = L->be->ops->dummy_rows(L->be, dst, dst_row0, sits_dummy_base(L->seed, (unsigned)seed_kind, seed_layer), r0, r1 - r0,
                                    c0, w);
        if (st != SITS_ERR_UNSUPPORTED) return st;
        st = SITS_OK;
    }
    L->w4src = is_w4 ? &w4 : NULL;
    for (int64_t r = r0; r < r1 && st == SITS_OK; r += chunk) {
        int64_t n = r1 - r < chunk ? r1 - r : chunk;
        st = rows_f32(L, t, seed_kind, seed_layer, r, n, c0, w, L->staging);
        if (st == SITS_OK) st = L->be->ops->upload_weight(L->be, dst, dst_row0 + (r - r0), L->staging, SITS_DT_F32, w, 0, n, 0, w);
    }
    L->w4src = NULL;
    return st;
}

/* [moe fp8] moe_slice into FP8 E4M3 bytes dst_q ([rows, c1 - c0]) at row dst_row0 and row scales dst_s, as
 * load_slice_fp8 does for a dense linear: an F8_E4M3 checkpoint tensor is copied with its weight_scale;
 * anything else (float tensors, dummy weights) is quantised from the FULL rows, so that every TP slice of
 * an expert holds the same values. */
static sits_status_t moe_slice_fp8(loader_t *L, void *dst_q, float *dst_s, int64_t dst_row0, sits_moe_part_t part, int layer,
                                   int expert, int64_t r0, int64_t r1, int64_t c0, int64_t c1)
{
    int64_t shape[2];
    sits_moe_part_shape(L->cfg, part, shape);
    int64_t cols = shape[1], w = c1 - c0;
    if (r1 <= r0 || c1 <= c0) return SITS_OK;
    if (r1 > shape[0] || c1 > cols) return SITS_ERR_INTERNAL;
    L->bytes += (size_t)(r1 - r0) * ((size_t)w + sizeof(float));
    if (L->count_only) return SITS_OK;
    const sits_st_tensor_t *t = NULL, *s = NULL;
    sits_w4_src_t w4;
    sits_status_t st;
    int is_w4 = moe_w4(L, part, layer, expert, &w4, &st);   /* [moe int4] re-quantised from its dequantised rows */
    SITS_CHECK(st);
    if (L->st && !is_w4) {
        SITS_CHECK(moe_tensor(L, part, layer, expert, &t));
        if (t->dtype == SITS_DT_F8_E4M3) SITS_CHECK(sits_model_fp8_scale(L->cfg, L->st, t, "model", &s));
    }
    if (fp8_blockwise(L)) s = NULL;   /* [fp8 block] re-quantised per row from the dequantised rows */
    /* dummy weights: moe_slice's seeds, so FP8 and 16-bit experts hold the same model */
    L->w4src = is_w4 ? &w4 : NULL;
    st = fp8_rows(L, t, s, (sits_wkind_t)(64 + part), layer * 4096 + expert, r0, r1, cols, c0, w, dst_q, dst_s, dst_row0);
    L->w4src = NULL;
    return st;
}

/* A SwiGLU expert's fused gate/up [2 * i, H] (rows i0 .. i0 + i of gate, then of up) and down [H, i];
 * [moe fp8] gu_s_p / down_s_p non-NULL: that linear in FP8 E4M3 with its row scales into *gu_s_p / *down_s_p. */
static sits_status_t moe_load_ffn(loader_t *L, sits_moe_part_t gate, int l, int x, int64_t i0, int64_t i, void **gu_p,
                                  float **gu_s_p, void **down_p, float **down_s_p)
{
    int64_t H = L->cfg->hidden_size;
    sits_moe_part_t up = (sits_moe_part_t)(gate + 1), down = (sits_moe_part_t)(gate + 2);
    if (gu_s_p) {
        SITS_CHECK(alloc_bytes(L, (size_t)(2 * i * H), gu_p));
        SITS_CHECK(alloc_bytes(L, sizeof(float) * (size_t)(2 * i), (void **)gu_s_p));
        SITS_CHECK(moe_slice_fp8(L, *gu_p, *gu_s_p, 0, gate, l, x, i0, i0 + i, 0, H));
        SITS_CHECK(moe_slice_fp8(L, *gu_p, *gu_s_p, i, up, l, x, i0, i0 + i, 0, H));
    } else {
        SITS_CHECK(alloc_w(L, (size_t)(2 * i * H), gu_p));
        SITS_CHECK(moe_slice(L, *gu_p, 0, gate, l, x, i0, i0 + i, 0, H));
        SITS_CHECK(moe_slice(L, *gu_p, i, up, l, x, i0, i0 + i, 0, H));
    }
    if (down_s_p) {
        SITS_CHECK(alloc_bytes(L, (size_t)(H * i), down_p));
        SITS_CHECK(alloc_bytes(L, sizeof(float) * (size_t)H, (void **)down_s_p));
        return moe_slice_fp8(L, *down_p, *down_s_p, 0, down, l, x, 0, H, i0, i0 + i);
    }
    SITS_CHECK(alloc_w(L, (size_t)(H * i), down_p));
    return moe_slice(L, *down_p, 0, down, l, x, 0, H, i0, i0 + i);
}

/* [moe int4] How layer l's routed experts are held in INT4: 1 = as stored: a 4-bit checkpoint whose experts' gate,
 * up and down are INT4 tensors without act-order (checked on this rank's first expert: the formats are uniform),
 * the slices this rank holds keep whole groups (or the groups are per channel), and the policy leaves the experts'
 * precision to the checkpoint (auto or int4); 2 = quantised here (the policy says int4 for gate_up and down, the
 * checkpoint's experts are not INT4 as above: round to nearest, groups of SITS_INT4_GROUP, which the hidden size and
 * this rank's expert width must be multiples of); 0 = not INT4 (dequantised at load when the checkpoint's are:
 * moe_slice / moe_slice_fp8). The decision is the same in the counting pass and the load. */
static int moe_int4(loader_t *L, const sits_shard_dims_t *d, int tp_rank, int l)
{
    const sits_model_config_t *c = L->cfg;
    if (L->be && !L->be->ops->matmul_w4) return 0;
    sits_prec_t pg = sits_quant_plan_get(L->plan, l, SITS_LIN_GATE_UP), pd = sits_quant_plan_get(L->plan, l, SITS_LIN_DOWN);
    int want4 = pg == SITS_PREC_INT4 && pd == SITS_PREC_INT4;
    if (!want4 && (pg != SITS_PREC_AUTO || pd != SITS_PREC_AUTO)) return 0;
    int quant_here = want4 && c->hidden_size % SITS_INT4_GROUP == 0 && d->ie_loc % SITS_INT4_GROUP == 0 ? 2 : 0;
    if (want4 && !quant_here && !L->count_only && L->tp_rank == 0 && l == d->layer0)
        SITS_WARN(SITS_SUB_MODEL, "quant: int4 experts need the hidden size and this rank's expert width multiples of %d "
                  "(hidden %d, expert %d), unless the checkpoint holds them in INT4", SITS_INT4_GROUP, c->hidden_size, d->ie_loc);
    if (!L->st || c->w4.bits != 4) return quant_here;
    static const sits_moe_part_t parts[3] = { SITS_MOE_GATE, SITS_MOE_UP, SITS_MOE_DOWN };
    int64_t i0 = d->ep > 1 ? 0 : (int64_t)tp_rank * d->ie_loc;
    for (int k = 0; k < 3; k++) {
        sits_w4_src_t src;
        sits_status_t st;
        if (!moe_w4(L, parts[k], l, d->exp0, &src, &st) || st != SITS_OK || src.gidx) return quant_here;
        int64_t c0 = k == 2 ? i0 : 0, cols = k == 2 ? d->ie_loc : c->hidden_size;
        if (cols % 2 || (src.group_size < src.in && (c0 % src.group_size || cols % src.group_size))) return quant_here;
    }
    return 1;
}

/* [moe int4] a packed INT4 linear of rows x cols (this rank's slice of a linear of in_full inputs in groups of gs,
 * gs >= in_full: per channel) */
static sits_status_t moe_w4_alloc(loader_t *L, sits_w4_t *w4, int64_t rows, int64_t cols, int gs, int64_t in_full)
{
    memset(w4, 0, sizeof *w4);
    int per_channel = gs <= 0 || gs >= in_full;
    w4->group_size = per_channel ? (int)cols : gs;
    w4->n_groups = per_channel ? 1 : (int)(cols / gs);
    const size_t ra = (size_t)sits_w4_rows_alloc(rows);   /* [int4 tiles] whole 16-row tiles */
    L->bytes += ra * ((size_t)(cols / 2) + 2 * sizeof(float) * (size_t)w4->n_groups);
    if (L->count_only) return SITS_OK;
    sits_backend_t *be = L->be;
    SITS_CHECK(be->ops->alloc(be, ra * (size_t)(cols / 2), &w4->q));
    SITS_CHECK(be->ops->alloc(be, sizeof(float) * ra * (size_t)w4->n_groups, (void **)&w4->scale));
    return be->ops->alloc(be, sizeof(float) * ra * (size_t)w4->n_groups, (void **)&w4->zero);
}

/* [moe int4] rows [r0, r1) x cols [c0, c1) of expert part (part, l, x) into w4 at row dst_row0: the checkpoint's
 * INT4 tensors as stored (mode 1), or quantised here (mode 2: from its float / FP8 / dequantised INT4 rows, or the
 * dummy generator's; groups of w4->group_size from c0, so every TP slice of whole groups holds the same values) */
static sits_status_t moe_slice_w4(loader_t *L, sits_w4_t *w4, int64_t dst_row0, sits_moe_part_t part, int l, int x, int64_t r0,
                                  int64_t r1, int64_t c0, int64_t c1, int mode)
{
    if (L->count_only || r1 <= r0 || c1 <= c0) return SITS_OK;
    sits_w4_src_t src;
    sits_status_t st;
    const sits_st_tensor_t *t = NULL;
    int is_w4 = moe_w4(L, part, l, x, &src, &st);
    SITS_CHECK(st);
    if (mode == 1 && (!is_w4 || src.gidx)) {   /* the layer's first expert was INT4 without act-order (moe_int4) */
        char name[160];
        sits_moe_part_name(L->cfg, part, l, x, name, sizeof name);
        SITS_ERROR(SITS_SUB_MODEL, "model: tensor %s: %s while the layer's first expert's is not: not supported", name,
                   is_w4 ? "an act-order g_idx" : "not INT4");
        return SITS_ERR_UNSUPPORTED;
    }
    if (mode == 2 && L->st && !is_w4) SITS_CHECK(moe_tensor(L, part, l, x, &t));
    /* the slice's first group (mode 1): 0 per channel (one group a row, whatever the slice), else c0 / group size */
    int64_t w = c1 - c0, half = w / 2, ng = w4->n_groups, g0 = mode == 1 && src.group_size >= src.in ? 0 : c0 / w4->group_size;
    int64_t chunk = (int64_t)(L->staging_elems / (size_t)(w > ng ? w : ng));
    if (chunk < 1) return SITS_ERR_INTERNAL;
    uint8_t *qb = malloc((size_t)(chunk * half));            /* [chunk, w / 2] */
    float *sb = malloc(sizeof(float) * (size_t)(chunk * ng)); /* [chunk, ng] scales */
    float *zb = malloc(sizeof(float) * (size_t)(chunk * ng)); /* [chunk, ng] zeros */
    st = qb && sb && zb ? SITS_OK : SITS_ERR_NOMEM;
    L->w4src = mode == 2 && is_w4 ? &src : NULL;   /* mode 2 from an INT4 / 8-bit checkpoint: rows_f32 dequantises */
    sits_backend_t *be = L->be;
    for (int64_t r = r0; st == SITS_OK && r < r1; r += chunk) {
        int64_t n = r1 - r < chunk ? r1 - r : chunk, d = dst_row0 + (r - r0);
        if (mode == 1) {
            w4_copy_rows(&src, qb, sb, zb, r, n, c0, w, ng, g0);
        } else if (!L->st) {   /* dummy weights: nibbles drawn directly, with moe_slice's seeds */
            w4_dummy_rows(L, 64 + (unsigned long long)part, l * 4096 + x, qb, sb, zb, r, n, c0, w, ng);
        } else {
            st = rows_f32(L, t, (sits_wkind_t)(64 + part), l * 4096 + x, r, n, c0, w, L->staging);
            if (st != SITS_OK) break;
#pragma omp parallel for schedule(static)
            for (int64_t i = 0; i < n; i++)
                sits_w4_quantize_row(L->staging + i * w, w, w4->group_size, qb + i * half, sb + i * ng, zb + i * ng);
        }
        st = be->ops->upload(be, (uint8_t *)w4->q + d * half, qb, (size_t)(n * half));
        if (st == SITS_OK) st = be->ops->upload(be, w4->scale + d * ng, sb, sizeof(float) * (size_t)(n * ng));
        if (st == SITS_OK) st = be->ops->upload(be, w4->zero + d * ng, zb, sizeof(float) * (size_t)(n * ng));
    }
    L->w4src = NULL;
    free(qb);
    free(sb);
    free(zb);
    return st;
}

/* [moe int4] a SwiGLU expert in INT4 (mode: moe_int4's): gate / up rows i0 .. i0 + i into gu [2 i, H], down inputs
 * i0 .. i0 + i into down [H, i] */
static sits_status_t moe_load_ffn_w4(loader_t *L, int l, int x, int64_t i0, int64_t i, sits_w4_t *gu, sits_w4_t *down, int mode)
{
    int64_t H = L->cfg->hidden_size, I = L->cfg->moe.moe_inter;
    int gs = mode == 2 ? SITS_INT4_GROUP : L->cfg->w4.group_size;   /* -1: per channel */
    SITS_CHECK(moe_w4_alloc(L, gu, 2 * i, H, gs, H));
    SITS_CHECK(moe_slice_w4(L, gu, 0, SITS_MOE_GATE, l, x, i0, i0 + i, 0, H, mode));
    SITS_CHECK(moe_slice_w4(L, gu, i, SITS_MOE_UP, l, x, i0, i0 + i, 0, H, mode));
    SITS_CHECK(moe_w4_alloc(L, down, H, i, gs, I));
    SITS_CHECK(moe_slice_w4(L, down, 0, SITS_MOE_DOWN, l, x, 0, H, i0, i0 + i, mode));
    if (L->count_only || !L->be->ops->w4_layout) return SITS_OK;   /* [int4 tiles] */
    SITS_CHECK(L->be->ops->w4_layout(L->be, gu, (int)(2 * i), (int)H));
    return L->be->ops->w4_layout(L->be, down, (int)H, (int)i);
}

/* [moe fp8] Whether the experts' linear lin (SITS_LIN_GATE_UP or SITS_LIN_DOWN) of layer l is held in FP8:
 * the plan's fp8, or auto and the checkpoint stores routed expert 0's part as F8_E4M3; the shapes must
 * suit the FP8 GEMM (this rank's in % 16 == 0 and out % 16 == 0, routed and shared). --quant int4 on experts
 * is not built: they stay in the backend dtype (a warning from TP rank 0 on the first layer); INT4 checkpoint
 * experts not taken as stored (moe_int4) are dequantised (logged). */
static int moe_fp8(loader_t *L, const sits_shard_dims_t *d, int l, sits_linear_t lin)
{
    const sits_model_config_t *c = L->cfg;
    sits_prec_t p = sits_quant_plan_get(L->plan, l, lin);
    sits_moe_part_t part = lin == SITS_LIN_GATE_UP ? SITS_MOE_GATE : SITS_MOE_DOWN;
    if (p == SITS_PREC_AUTO && L->st) {
        char name[160];
        sits_moe_part_name(c, part, l, 0, name, sizeof name);
        const sits_st_tensor_t *t = sits_st_find(L->st, name);
        if (t && t->dtype == SITS_DT_F8_E4M3) p = SITS_PREC_FP8;
    }
    int say = !L->count_only && L->tp_rank == 0 && l == d->layer0;
    sits_w4_src_t w4;
    sits_status_t st;
    if (say && p != SITS_PREC_FP8 && moe_w4(L, part, l, 0, &w4, &st) && st == SITS_OK)   /* [moe int4] */
        SITS_INFO(SITS_SUB_MODEL, "quant: the experts' %s: %d-bit checkpoint experts, dequantised at load to %s (stored INT4 runs "
                  "only with the policy's auto, 4 bits, no act-order and whole groups on each rank; --quant ffn=fp8 holds them "
                  "in 8 bits)", sits_linear_name(lin), w4.bits, L->elem_size == 4 ? "fp32" : "bf16");
    if (p == SITS_PREC_INT4 && say)   /* [moe int4] moe_int4 took both or said why not */
        SITS_WARN(SITS_SUB_MODEL, "quant: the experts' %s stays %s: int4 experts need gate_up and down int4 together, in "
                  "groups that fit (see above)", sits_linear_name(lin), L->elem_size == 4 ? "fp32" : "bf16");
    if (p != SITS_PREC_FP8) return 0;
    int64_t H = c->hidden_size, ie = d->ie_loc, is = c->moe.shared_inter > 0 ? d->is_loc : 16;
    int ok = H % 16 == 0 && ie % 16 == 0 && is % 16 == 0 && (!L->be || L->be->ops->matmul_fp8);   /* be: NULL when counting */
    if (!ok && say)
        SITS_WARN(SITS_SUB_MODEL, "quant: the experts' %s stays %s: fp8 needs this rank's expert widths and the hidden size "
                  "multiples of 16 (hidden %lld, expert %lld, shared %lld) and a backend with the FP8 GEMM",
                  sits_linear_name(lin), L->elem_size == 4 ? "fp32" : "bf16", (long long)H, (long long)ie, (long long)is);
    if (ok && lin == SITS_LIN_GATE_UP) L->n_fp8++;   /* counted once a layer per linear (the memory plan's fp8 flag) */
    if (ok && lin == SITS_LIN_DOWN) L->n_fp8++;
    return ok;
}

/* Router, this rank's experts (a TP slice of each, or whole ones under EP) and the shared expert. */
static sits_status_t moe_load_layer(loader_t *L, const sits_shard_dims_t *d, int tp_rank, int l, sits_layer_weights_t *lw)
{
    const sits_model_config_t *c = L->cfg;
    int64_t H = c->hidden_size, E = c->moe.n_experts;
    int w4e = moe_int4(L, d, tp_rank, l);   /* [moe int4] */
    int gu8 = !w4e && moe_fp8(L, d, l, SITS_LIN_GATE_UP), down8 = !w4e && moe_fp8(L, d, l, SITS_LIN_DOWN);   /* [moe fp8] */
    if (w4e) {
        L->n_int4 += 2;   /* the experts' gate_up and down (the engine's W4A16 check and scratch) */
        if (!L->count_only && L->tp_rank == 0 && l == d->layer0)
            SITS_INFO(SITS_SUB_MODEL, "quant: the experts' gate_up and down: int4 %s (groups of %d)",
                      w4e == 1 ? "as stored" : "quantised at load", w4e == 2 ? SITS_INT4_GROUP : c->w4.group_size > 0 ? c->w4.group_size : -1);
    }
    SITS_CHECK(alloc_w(L, (size_t)(E * H), &lw->router));
    SITS_CHECK(moe_slice(L, lw->router, 0, SITS_MOE_ROUTER, l, 0, 0, E, 0, H));
    if (c->moe.router_bias) {   /* [gpt-oss] */
        SITS_CHECK(alloc_w(L, (size_t)E, &lw->router_bias));
        SITS_CHECK(moe_slice(L, lw->router_bias, 0, SITS_MOE_ROUTER_BIAS, l, 0, 0, 1, 0, E));
    }
    if (c->moe.expert_bias && !L->count_only) {
        lw->exp_gu_bias = calloc((size_t)d->n_exp_loc, sizeof(void *));
        lw->exp_down_bias = calloc((size_t)d->n_exp_loc, sizeof(void *));
        if (!lw->exp_gu_bias || !lw->exp_down_bias) return SITS_ERR_NOMEM;
    }
    if (!L->count_only) {
        lw->exp_gu = calloc((size_t)d->n_exp_loc, sizeof(void *));
        lw->exp_down = calloc((size_t)d->n_exp_loc, sizeof(void *));
        if (!lw->exp_gu || !lw->exp_down) return SITS_ERR_NOMEM;
        if (gu8 && !(lw->exp_gu_scale = calloc((size_t)d->n_exp_loc, sizeof(float *)))) return SITS_ERR_NOMEM;
        if (down8 && !(lw->exp_down_scale = calloc((size_t)d->n_exp_loc, sizeof(float *)))) return SITS_ERR_NOMEM;
        if (w4e && (!(lw->exp_gu_w4 = calloc((size_t)d->n_exp_loc, sizeof(sits_w4_t))) ||
                    !(lw->exp_down_w4 = calloc((size_t)d->n_exp_loc, sizeof(sits_w4_t)))))
            return SITS_ERR_NOMEM;
    }
    int64_t ie0 = d->ep > 1 ? 0 : (int64_t)tp_rank * d->ie_loc;
    for (int j = 0; c->moe.expert_bias && j < d->n_exp_loc; j++) {   /* [gpt-oss] weights.h: the down bias added once */
        void *gb = NULL, *db = NULL;
        SITS_CHECK(alloc_w(L, (size_t)(2 * d->ie_loc), &gb));
        if (!L->count_only) lw->exp_gu_bias[j] = gb;
        SITS_CHECK(moe_slice(L, gb, 0, SITS_MOE_GATE_BIAS, l, d->exp0 + j, 0, 1, ie0, ie0 + d->ie_loc));
        SITS_CHECK(moe_slice(L, gb ? elem_at(L, gb, (size_t)d->ie_loc) : NULL, 0, SITS_MOE_UP_BIAS, l, d->exp0 + j, 0, 1, ie0,
                             ie0 + d->ie_loc));
        if (d->ep > 1 || tp_rank == 0) {
            SITS_CHECK(alloc_w(L, (size_t)H, &db));
            if (!L->count_only) lw->exp_down_bias[j] = db;
            SITS_CHECK(moe_slice(L, db, 0, SITS_MOE_DOWN_BIAS, l, d->exp0 + j, 0, 1, 0, H));
        }
    }
    for (int j = 0; j < d->n_exp_loc; j++) {
        if (w4e) {
            sits_w4_t gu4, down4;
            sits_status_t st = moe_load_ffn_w4(L, l, d->exp0 + j, ie0, d->ie_loc, L->count_only ? &gu4 : &lw->exp_gu_w4[j],
                                               L->count_only ? &down4 : &lw->exp_down_w4[j], w4e);
            SITS_CHECK(st);
            continue;
        }
        void *gu = NULL, *down = NULL;
        float *gus = NULL, *downs = NULL;
        sits_status_t st = moe_load_ffn(L, SITS_MOE_GATE, l, d->exp0 + j, ie0, d->ie_loc, &gu, gu8 ? &gus : NULL, &down,
                                        down8 ? &downs : NULL);
        if (!L->count_only) {
            lw->exp_gu[j] = gu;
            lw->exp_down[j] = down;
            if (gu8) lw->exp_gu_scale[j] = gus;
            if (down8) lw->exp_down_scale[j] = downs;
        }
        SITS_CHECK(st);
    }
    if (c->moe.shared_inter > 0) {
        SITS_CHECK(moe_load_ffn(L, SITS_MOE_SH_GATE, l, 0, (int64_t)tp_rank * d->is_loc, d->is_loc, &lw->sh_gu,
                                gu8 ? &lw->sh_gu_scale : NULL, &lw->sh_down, down8 ? &lw->sh_down_scale : NULL));
        SITS_CHECK(alloc_w(L, (size_t)H, &lw->sh_route));
        SITS_CHECK(moe_slice(L, lw->sh_route, 0, SITS_MOE_SH_ROUTE, l, 0, 0, 1, 0, H));
    }
    return SITS_OK;
}

/* Every tensor of this shard, in file order: embedding, layers, final norm, lm_head. The same
 * sequence serves the dry pass (count_only: L->bytes becomes the shard's total) and the real load
 * (progress reported after the embedding, each layer and the head). */
static void report(loader_t *L)
{
    if (L->progress && !L->count_only) L->progress(L->progress_ctx, L->bytes, L->total);
}

static sits_status_t load_tensors(loader_t *L, const sits_shard_t *shard, sits_model_weights_t *w)
{
    const sits_model_config_t *cfg = L->cfg;
    const sits_shard_dims_t *d = &w->dims;
    int64_t H = cfg->hidden_size;
    /* the embedding on the first stage, and on the last when lm_head is tied to it */
    if (d->first_stage || (d->last_stage && cfg->tie_word_embeddings)) {
        SITS_CHECK(alloc_w(L, (size_t)(d->v_count ? d->v_count : 1) * H, &w->embed));
        SITS_CHECK(load_slice(L, w->embed, 0, SITS_W_EMBED, 0, d->v_start, d->v_start + d->v_count, 0, H));
    }
    report(L);
    for (int l = d->layer0; l < d->layer1; l++) {
        SITS_CHECK(load_layer(L, d, shard->tp_rank, l, &w->layers[l]));
        if (!L->count_only) SITS_DEBUG(SITS_SUB_MODEL, "layer %d loaded", l);
        report(L);
    }
    if (d->last_stage) {
        SITS_CHECK(load_norm(L, SITS_W_FINAL_NORM, 0, H, &w->final_norm));
        /* [fp8] an fp8 lm_head tied to the embedding is a quantised copy of it */
        int f = d->v_count > 0 && want_prec(L, 0, SITS_LIN_PER_LAYER, H, d->v_count) == SITS_PREC_FP8;
        if (cfg->tie_word_embeddings && !f) {
            w->lm_head = w->embed;
        } else {
            const part_t lm = { cfg->tie_word_embeddings ? SITS_W_EMBED : SITS_W_LM_HEAD, 0, d->v_start, d->v_start + d->v_count,
                                0, H, 0 };
            SITS_CHECK(load_linear(L, f ? SITS_PREC_FP8 : SITS_PREC_BF16, 0, d->v_count ? d->v_count : 1, H, &lm, 1, &w->lm_head,
                                   &w->lm_head_scale, NULL));
        }
    }
    report(L);
    return SITS_OK;
}

sits_status_t sits_model_weights_shard_bytes(const sits_model_config_t *cfg, const sits_shard_t *shard,
                                             sits_dtype_t weight_dtype, size_t *bytes_p)
{
    return sits_model_weights_shard_bytes_quant(cfg, shard, weight_dtype, NULL, NULL, bytes_p);
}

/* [fp8] the --quant spec as a plan for this config; logs a parse error */
static sits_status_t plan_of(const sits_model_config_t *cfg, const char *quant, sits_quant_plan_t *plan)
{
    char err[256];
    memset(plan, 0, sizeof *plan);
    sits_status_t st = sits_quant_plan_parse(quant, cfg->n_layers, plan, err, sizeof err);
    if (st == SITS_ERR_INVALID) SITS_ERROR(SITS_SUB_MODEL, "%s", err);
    return st;
}

sits_status_t sits_model_weights_shard_bytes_quant(const sits_model_config_t *cfg, const sits_shard_t *shard,
                                                   sits_dtype_t weight_dtype, const char *quant, const sits_st_t *st,
                                                   size_t *bytes_p)
{
    return sits_model_weights_shard_plan(cfg, shard, weight_dtype, quant, st, bytes_p, NULL, NULL);
}

sits_status_t sits_model_weights_shard_plan(const sits_model_config_t *cfg, const sits_shard_t *shard, sits_dtype_t weight_dtype,
                                            const char *quant, const sits_st_t *st, size_t *bytes_p, int *n_fp8_p, int *n_int4_p)
{
    sits_model_weights_t w;
    sits_quant_plan_t plan;
    memset(&w, 0, sizeof w);
    SITS_CHECK(sits_shard_dims(cfg, shard, &w.dims));
    SITS_CHECK(plan_of(cfg, quant, &plan));
    w.layers = calloc((size_t)cfg->n_layers, sizeof *w.layers);
    if (!w.layers) {
        sits_quant_plan_free(&plan);
        return SITS_ERR_NOMEM;
    }
    loader_t L = { .cfg = cfg, .st = st, .elem_size = sits_dtype_size(weight_dtype), .count_only = 1, .plan = &plan,
                   .tp_rank = shard->tp_rank };
    sits_status_t s = load_tensors(&L, shard, &w);
    free(w.layers);
    sits_quant_plan_free(&plan);
    if (s == SITS_OK) {
        *bytes_p = L.bytes;
        if (n_fp8_p) *n_fp8_p = L.n_fp8;
        if (n_int4_p) *n_int4_p = L.n_int4;
    }
    return s;
}

sits_status_t sits_model_weights_load(const sits_model_config_t *cfg, const sits_st_t *st, sits_backend_t *be,
                                      const sits_shard_t *shard, unsigned long long seed, sits_model_weights_t **w_p)
{
    return sits_model_weights_load_progress(cfg, st, be, shard, seed, NULL, NULL, w_p);
}

sits_status_t sits_model_weights_load_progress(const sits_model_config_t *cfg, const sits_st_t *st, sits_backend_t *be,
                                               const sits_shard_t *shard, unsigned long long seed,
                                               sits_weights_progress_fn progress, void *progress_ctx,
                                               sits_model_weights_t **w_p)
{
    return sits_model_weights_load_quant(cfg, st, be, shard, seed, NULL, progress, progress_ctx, w_p);
}

sits_status_t sits_model_weights_load_quant(const sits_model_config_t *cfg, const sits_st_t *st, sits_backend_t *be,
                                            const sits_shard_t *shard, unsigned long long seed, const char *quant,
                                            sits_weights_progress_fn progress, void *progress_ctx,
                                            sits_model_weights_t **w_p)
{
    sits_status_t st_ = SITS_OK;
    sits_quant_plan_t plan;
    memset(&plan, 0, sizeof plan);
    sits_model_weights_t *w = calloc(1, sizeof *w);
    if (!w) return SITS_ERR_NOMEM;
    w->cfg = *cfg;
    w->shard = *shard;
    w->be = be;
    loader_t L = { .cfg = &w->cfg, .st = st, .be = be, .seed = seed, .elem_size = sits_dtype_size(be->weight_dtype),
                   .progress = progress, .progress_ctx = progress_ctx, .plan = &plan, .tp_rank = shard->tp_rank,
                   .lm_head_prec = -1 };
    SITS_CHECK_GOTO(sits_shard_dims(cfg, shard, &w->dims), st_, err);
    SITS_CHECK_GOTO(plan_of(cfg, quant, &plan), st_, err);
    if (quant && *quant) SITS_ALLOC_CHECK_GOTO(w->quant = strdup(quant), st_, err);
    if (st) SITS_CHECK_GOTO(sits_model_check_tensors(cfg, st, "model"), st_, err);
    SITS_CHECK_GOTO(w4_check_shard(&L, &w->dims, shard->tp_rank), st_, err);   /* [int4] */
    {
        const char *h = getenv("SITS_DUMMY_ON_HOST");
        L.dummy_on_device = !(h && *h && strcmp(h, "0") != 0);
    }
    /* fp32 staging (dummy weights, fp8 quantisation and dequantisation): at least 4 of the longest rows */
    L.staging_elems = (size_t)1 << 22;
    if (L.staging_elems < (size_t)cfg->hidden_size * 4) L.staging_elems = (size_t)cfg->hidden_size * 4;
    if (L.staging_elems < (size_t)cfg->intermediate_size * 4) L.staging_elems = (size_t)cfg->intermediate_size * 4;
    L.staging = malloc(L.staging_elems * sizeof(float));
    L.qstage = malloc(L.staging_elems);
    L.sstage = malloc(L.staging_elems * sizeof(float));
    L.prec = calloc((size_t)cfg->n_layers * SITS_LIN_PER_LAYER, 1);
    if (!L.staging || !L.qstage || !L.sstage || !L.prec) { st_ = SITS_ERR_NOMEM; goto err; }
    const sits_shard_dims_t *d = &w->dims;
    w->layers = calloc((size_t)cfg->n_layers, sizeof *w->layers);
    SITS_ALLOC_CHECK_GOTO(w->layers, st_, err);
    if (progress)
        SITS_CHECK_GOTO(sits_model_weights_shard_bytes_quant(cfg, shard, be->weight_dtype, quant, st, &L.total), st_, err);
    SITS_CHECK_GOTO(load_tensors(&L, shard, w), st_, err);
    {
        int half = cfg->head_dim / 2;
        float *inv = malloc(sizeof(float) * (size_t)half);
        SITS_ALLOC_CHECK_GOTO(inv, st_, err);
        sits_model_rope_inv_freq(cfg, inv);
        st_ = be->ops->alloc(be, sizeof(float) * (size_t)half, (void **)&w->inv_freq);
        if (st_ == SITS_OK) st_ = be->ops->upload(be, w->inv_freq, inv, sizeof(float) * (size_t)half);
        if (st_ == SITS_OK && cfg->rope_local_theta > 0.0) {   /* [families] Gemma 3's sliding layers */
            sits_model_config_t lc = *cfg;
            lc.rope_theta = cfg->rope_local_theta;
            lc.rope_type = SITS_ROPE_DEFAULT;
            sits_model_rope_inv_freq(&lc, inv);
            st_ = be->ops->alloc(be, sizeof(float) * (size_t)half, (void **)&w->inv_freq_local);
            if (st_ == SITS_OK) st_ = be->ops->upload(be, w->inv_freq_local, inv, sizeof(float) * (size_t)half);
        }
        if (st_ == SITS_OK && cfg->has_nope) {   /* [smollm3] NoPE layers: a table of zeros */
            memset(inv, 0, sizeof(float) * (size_t)half);
            st_ = be->ops->alloc(be, sizeof(float) * (size_t)half, (void **)&w->inv_freq_none);
            if (st_ == SITS_OK) st_ = be->ops->upload(be, w->inv_freq_none, inv, sizeof(float) * (size_t)half);
        }
        if (st_ == SITS_OK && cfg->rope_type == SITS_ROPE_LONGROPE) {   /* [families] Phi-3 */
            sits_model_rope_inv_freq_long(cfg, inv);
            st_ = be->ops->alloc(be, sizeof(float) * (size_t)half, (void **)&w->inv_freq_long);
            if (st_ == SITS_OK) st_ = be->ops->upload(be, w->inv_freq_long, inv, sizeof(float) * (size_t)half);
        }
        free(inv);
        if (st_ != SITS_OK) goto err;
    }
    SITS_CHECK_GOTO(be->ops->sync(be), st_, err);
    w->bytes = L.bytes;
    w->n_fp8 = L.n_fp8;
    w->n_int4 = L.n_int4;
    if (shard->tp_rank == 0) sits_quant_plan_log(L.prec, d->layer0, d->layer1, d->last_stage ? L.lm_head_prec : -1, quant);
    if (shard->tp_rank == 0 && L.n_fp8 && fp8_blockwise(&L) && L.st)
        SITS_INFO(SITS_SUB_MODEL, "quant: the checkpoint's block-wise FP8 scales ([%d, %d] blocks) re-quantised per output row "
                  "for the FP8 kernels (--quant bf16 dequantises them exactly instead)", cfg->fp8_block[0], cfg->fp8_block[1]);
    SITS_INFO(SITS_SUB_MODEL, "tp rank %d/%d holds %.1f MiB of weights (vocab %d..%d, %d q heads, %d kv heads, %d fp8 linears, "
              "%d int4 linears)", shard->tp_rank, shard->tp_size, (double)w->bytes / (1 << 20), d->v_start, d->v_start + d->v_count,
              d->nh_loc, d->nkv_loc, L.n_fp8, L.n_int4);
    free(L.staging);
    free(L.qstage);
    free(L.sstage);
    free(L.prec);
    sits_quant_plan_free(&plan);
    *w_p = w;
    return SITS_OK;
err:
    free(L.staging);
    free(L.qstage);
    free(L.sstage);
    free(L.prec);
    sits_quant_plan_free(&plan);
    sits_model_weights_destroy(w);
    return st_;
}

void sits_model_weights_destroy(sits_model_weights_t *w)
{
    if (!w) return;
    sits_backend_t *be = w->be;
    if (w->layers) {
        for (int l = 0; l < w->cfg.n_layers; l++) {
            sits_layer_weights_t *lw = &w->layers[l];
            void *ptrs[] = { lw->attn_norm, lw->qkv, lw->qkv_bias, lw->o, lw->o_bias, lw->ffn_norm, lw->gu, lw->gu_bias,
                             lw->down, lw->down_bias, lw->qkv_scale, lw->o_scale, lw->gu_scale, lw->down_scale,
                             lw->q_norm, lw->k_norm, lw->post_attn_norm, lw->post_ffn_norm };
            for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
                if (ptrs[i]) be->ops->free(be, ptrs[i]);
            const sits_w4_t *w4s[] = { &lw->qkv_w4, &lw->o_w4, &lw->gu_w4, &lw->down_w4 };   /* [int4] */
            for (size_t i = 0; i < sizeof w4s / sizeof w4s[0]; i++) {
                void *p4[] = { w4s[i]->q, w4s[i]->scale, w4s[i]->zero, w4s[i]->gidx };
                for (size_t k = 0; k < sizeof p4 / sizeof p4[0]; k++)
                    if (p4[k]) be->ops->free(be, p4[k]);
            }
            void *moe[] = { lw->router, lw->sh_gu, lw->sh_down, lw->sh_route, lw->sh_gu_scale, lw->sh_down_scale,
                            lw->sinks, lw->router_bias };   /* [moe] [gpt-oss] */
            for (size_t i = 0; i < sizeof moe / sizeof moe[0]; i++)
                if (moe[i]) be->ops->free(be, moe[i]);
            for (int j = 0; j < w->dims.n_exp_loc; j++) {
                if (lw->exp_gu && lw->exp_gu[j]) be->ops->free(be, lw->exp_gu[j]);
                if (lw->exp_down && lw->exp_down[j]) be->ops->free(be, lw->exp_down[j]);
                if (lw->exp_gu_scale && lw->exp_gu_scale[j]) be->ops->free(be, lw->exp_gu_scale[j]);
                if (lw->exp_down_scale && lw->exp_down_scale[j]) be->ops->free(be, lw->exp_down_scale[j]);
                if (lw->exp_gu_bias && lw->exp_gu_bias[j]) be->ops->free(be, lw->exp_gu_bias[j]);   /* [gpt-oss] */
                if (lw->exp_down_bias && lw->exp_down_bias[j]) be->ops->free(be, lw->exp_down_bias[j]);
            }
            free(lw->exp_gu_bias);
            free(lw->exp_down_bias);
            for (int j = 0; (lw->exp_gu_w4 || lw->exp_down_w4) && j < w->dims.n_exp_loc; j++) {   /* [moe int4] */
                sits_w4_t *ws[2] = { lw->exp_gu_w4 ? &lw->exp_gu_w4[j] : NULL, lw->exp_down_w4 ? &lw->exp_down_w4[j] : NULL };
                for (int k = 0; k < 2; k++) {
                    void *ptrs[] = { ws[k] ? ws[k]->q : NULL, ws[k] ? ws[k]->scale : NULL, ws[k] ? ws[k]->zero : NULL };
                    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
                        if (ptrs[i]) be->ops->free(be, ptrs[i]);
                }
            }
            free(lw->exp_gu_w4);
            free(lw->exp_down_w4);
            free(lw->exp_gu);
            free(lw->exp_down);
            free(lw->exp_gu_scale);
            free(lw->exp_down_scale);
        }
        free(w->layers);
    }
    if (w->lm_head && w->lm_head != w->embed) be->ops->free(be, w->lm_head);
    if (w->embed) be->ops->free(be, w->embed);
    if (w->final_norm) be->ops->free(be, w->final_norm);
    if (w->inv_freq) be->ops->free(be, w->inv_freq);
    if (w->inv_freq_local) be->ops->free(be, w->inv_freq_local);
    if (w->inv_freq_none) be->ops->free(be, w->inv_freq_none);
    if (w->inv_freq_long) be->ops->free(be, w->inv_freq_long);
    if (w->lm_head_scale) be->ops->free(be, w->lm_head_scale);
    free(w->quant);
    free(w);
}
