/* layout.c -- the HF tensor names and full shapes a config needs, and the check that a checkpoint
 * holds every one of them with that shape and a float dtype. See layout.h for the table. */
#include "model/layout.h"
#include "model/int4.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

static const char *const wkind_names[SITS_W_KIND_COUNT] = {
    [SITS_W_EMBED] = "model.embed_tokens.weight",
    [SITS_W_FINAL_NORM] = "model.norm.weight",
    [SITS_W_LM_HEAD] = "lm_head.weight",
    [SITS_W_ATTN_NORM] = "input_layernorm.weight",
    [SITS_W_Q] = "self_attn.q_proj.weight",
    [SITS_W_K] = "self_attn.k_proj.weight",
    [SITS_W_V] = "self_attn.v_proj.weight",
    [SITS_W_O] = "self_attn.o_proj.weight",
    [SITS_W_Q_BIAS] = "self_attn.q_proj.bias",
    [SITS_W_K_BIAS] = "self_attn.k_proj.bias",
    [SITS_W_V_BIAS] = "self_attn.v_proj.bias",
    [SITS_W_O_BIAS] = "self_attn.o_proj.bias",
    [SITS_W_FFN_NORM] = "post_attention_layernorm.weight",
    [SITS_W_GATE] = "mlp.gate_proj.weight",
    [SITS_W_UP] = "mlp.up_proj.weight",
    [SITS_W_DOWN] = "mlp.down_proj.weight",
    [SITS_W_GATE_BIAS] = "mlp.gate_proj.bias",
    [SITS_W_UP_BIAS] = "mlp.up_proj.bias",
    [SITS_W_DOWN_BIAS] = "mlp.down_proj.bias",
    [SITS_W_Q_NORM] = "self_attn.q_norm.weight",   /* [families] */
    [SITS_W_K_NORM] = "self_attn.k_norm.weight",
    [SITS_W_POST_ATTN_NORM] = "post_attention_layernorm.weight",
    [SITS_W_PRE_FFN_NORM] = "pre_feedforward_layernorm.weight",
    [SITS_W_POST_FFN_NORM] = "post_feedforward_layernorm.weight",
    [SITS_W_QKV] = "self_attn.qkv_proj.weight",
    [SITS_W_GATE_UP] = "mlp.gate_up_proj.weight",
    [SITS_W_SINKS] = "self_attn.sinks",   /* [gpt-oss] */
};

int sits_wkind_per_layer(sits_wkind_t kind)
{
    return kind != SITS_W_EMBED && kind != SITS_W_FINAL_NORM && kind != SITS_W_LM_HEAD && kind < SITS_W_KIND_COUNT;
}

int sits_wkind_present(const sits_model_config_t *cfg, sits_wkind_t kind)
{
    switch (kind) {
    case SITS_W_LM_HEAD: return !cfg->tie_word_embeddings;
    case SITS_W_Q_BIAS: case SITS_W_K_BIAS: case SITS_W_V_BIAS: return cfg->qkv_bias;
    case SITS_W_O_BIAS: return cfg->o_bias;
    case SITS_W_GATE_BIAS: case SITS_W_UP_BIAS: case SITS_W_DOWN_BIAS: return cfg->mlp_bias && !cfg->moe.n_experts;
    case SITS_W_Q_NORM: case SITS_W_K_NORM: return cfg->qk_norm;   /* [families] */
    case SITS_W_FFN_NORM: return !cfg->sandwich_norms;
    case SITS_W_Q: case SITS_W_K: case SITS_W_V: return !cfg->fused_qkv;
    case SITS_W_GATE: case SITS_W_UP: return !cfg->fused_gate_up && !cfg->moe.n_experts;   /* [moe] experts instead */
    case SITS_W_DOWN: return !cfg->moe.n_experts;
    case SITS_W_QKV: return cfg->fused_qkv;
    case SITS_W_GATE_UP: return cfg->fused_gate_up;
    case SITS_W_POST_ATTN_NORM: case SITS_W_PRE_FFN_NORM: case SITS_W_POST_FFN_NORM: return cfg->sandwich_norms;
    case SITS_W_SINKS: return cfg->attn_sinks;
    case SITS_W_KIND_COUNT: return 0;
    default: return 1;
    }
}

void sits_wkind_name(sits_wkind_t kind, int layer, char *buf, size_t len)
{
    if ((unsigned)kind >= SITS_W_KIND_COUNT) {
        snprintf(buf, len, "?");
        return;
    }
    if (sits_wkind_per_layer(kind)) snprintf(buf, len, "model.layers.%d.%s", layer, wkind_names[kind]);
    else snprintf(buf, len, "%s", wkind_names[kind]);
}

int sits_wkind_shape(const sits_model_config_t *cfg, sits_wkind_t kind, int64_t shape[2])
{
    const int64_t V = cfg->vocab_size, H = cfg->hidden_size, I = cfg->intermediate_size;
    const int64_t q = (int64_t)cfg->n_heads * cfg->head_dim, kv = (int64_t)cfg->n_kv_heads * cfg->head_dim;
    switch (kind) {
    case SITS_W_EMBED: case SITS_W_LM_HEAD: shape[0] = V; shape[1] = H; return 2;
    case SITS_W_FINAL_NORM: case SITS_W_ATTN_NORM: case SITS_W_FFN_NORM: shape[0] = H; return 1;
    case SITS_W_Q: shape[0] = q; shape[1] = H; return 2;
    case SITS_W_K: case SITS_W_V: shape[0] = kv; shape[1] = H; return 2;
    case SITS_W_O: shape[0] = H; shape[1] = q; return 2;
    case SITS_W_Q_BIAS: shape[0] = q; return 1;
    case SITS_W_K_BIAS: case SITS_W_V_BIAS: shape[0] = kv; return 1;
    case SITS_W_O_BIAS: shape[0] = H; return 1;
    case SITS_W_GATE: case SITS_W_UP: shape[0] = I; shape[1] = H; return 2;
    case SITS_W_DOWN: shape[0] = H; shape[1] = I; return 2;
    case SITS_W_GATE_BIAS: case SITS_W_UP_BIAS: shape[0] = I; return 1;
    case SITS_W_DOWN_BIAS: shape[0] = H; return 1;
    case SITS_W_Q_NORM: case SITS_W_K_NORM: shape[0] = cfg->head_dim; return 1;   /* [families] */
    case SITS_W_POST_ATTN_NORM: case SITS_W_PRE_FFN_NORM: case SITS_W_POST_FFN_NORM: shape[0] = H; return 1;
    case SITS_W_QKV: shape[0] = q + 2 * kv; shape[1] = H; return 2;
    case SITS_W_GATE_UP: shape[0] = 2 * I; shape[1] = H; return 2;
    case SITS_W_SINKS: shape[0] = cfg->n_heads; return 1;
    default: return 0;
    }
}

static void shape_str(const int64_t *shape, int ndim, char *buf, size_t len)
{
    size_t n = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < ndim && n < len; d++)
        n += (size_t)snprintf(buf + n, len - n, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (n < len) snprintf(buf + n, len - n, "]");
}

/* [moe] kind -1: the expert tensor `name` of shape moe_shape (F32 / F16 / BF16 only). */
static sits_status_t check_named(const sits_model_config_t *cfg, const sits_st_t *st, const char *what, const char *name,
                                 sits_wkind_t kind, int ndim, const int64_t *want);

static sits_status_t check_one(const sits_model_config_t *cfg, const sits_st_t *st, const char *what,
                               sits_wkind_t kind, int layer)
{
    char name[128];
    int64_t want[2];
    sits_wkind_name(kind, layer, name, sizeof name);
    int ndim = sits_wkind_shape(cfg, kind, want);
    if (sits_wkind_linear(kind) && ndim == 2) {   /* [int4] name is "X.weight": X's INT4 tensors instead */
        char base[128];
        snprintf(base, sizeof base, "%.*s", (int)(strlen(name) - 7), name);
        if (!sits_st_find(st, name) && sits_w4_present(cfg, st, base)) {
            sits_w4_src_t src;
            return sits_w4_src_open(cfg, st, base, want[0], want[1], what, &src);
        }
    }
    return check_named(cfg, st, what, name, kind, ndim, want);
}

static sits_status_t check_named(const sits_model_config_t *cfg, const sits_st_t *st, const char *what, const char *name,
                                 sits_wkind_t kind, int ndim, const int64_t *want)
{
    char want_s[64], got_s[160];
    const sits_st_tensor_t *t = sits_st_find(st, name);
    if (!t) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s: missing", what, name);
        return SITS_ERR_NOT_FOUND;
    }
    int same = t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = t->shape[d] == want[d];
    if (!same) {
        shape_str(want, ndim, want_s, sizeof want_s);
        shape_str(t->shape, t->ndim, got_s, sizeof got_s);
        SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s: shape %s, config needs %s", what, name, got_s, want_s);
        return SITS_ERR_FORMAT;
    }
    if (t->dtype == SITS_DT_F8_E4M3 && (int)kind >= 0 && sits_wkind_linear(kind)) /* [fp8] a pre-quantised linear: its scale */
        return sits_model_fp8_scale(cfg, st, t, what, NULL);
    if (t->dtype != SITS_DT_F32 && t->dtype != SITS_DT_F16 && t->dtype != SITS_DT_BF16) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s: dtype %s is not supported (F32, F16, BF16; F8_E4M3 for linear weights)",
                   what, name, sits_dtype_name(t->dtype));
        return SITS_ERR_FORMAT;
    }
    return SITS_OK;
}

/* ---- [fp8] pre-quantised checkpoints -------------------------------------------------------- */

int sits_wkind_linear(sits_wkind_t kind)
{
    switch (kind) {
    case SITS_W_Q: case SITS_W_K: case SITS_W_V: case SITS_W_O: case SITS_W_GATE: case SITS_W_UP: case SITS_W_DOWN:
    case SITS_W_LM_HEAD: case SITS_W_QKV: case SITS_W_GATE_UP: return 1;
    default: return 0;
    }
}

static int64_t numel(const sits_st_tensor_t *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

sits_status_t sits_model_fp8_scale(const sits_model_config_t *cfg, const sits_st_t *st, const sits_st_tensor_t *w,
                                   const char *what, const sits_st_tensor_t **scale_p)
{
    char sname[200], got_s[160];
    size_t len = strlen(w->name);
    if (len < 7 || strcmp(w->name + len - 7, ".weight") != 0 || w->ndim != 2) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s (%s): an F8_E4M3 tensor must be a 2-d linear .weight", what, w->name, w->file);
        return SITS_ERR_FORMAT;
    }
    const int block = cfg && cfg->fp8_block[0] > 0 && cfg->fp8_block[1] > 0;
    snprintf(sname, sizeof sname, "%s_scale_inv", w->name);
    const sits_st_tensor_t *s = sits_st_find(st, sname);
    if (!s) {
        snprintf(sname, sizeof sname, "%s_scale", w->name);
        s = sits_st_find(st, sname);
    }
    if (!s) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s (%s): F8_E4M3 weight without its scale tensor %s%s", what, w->name, w->file,
                   sname, block ? " (or weight_scale_inv)" : "");
        return SITS_ERR_NOT_FOUND;
    }
    int64_t n = numel(s), rows = w->shape[0], cols = w->shape[1];
    if (block) {   /* [fp8 block] */
        const int64_t br = (rows + cfg->fp8_block[0] - 1) / cfg->fp8_block[0], bc = (cols + cfg->fp8_block[1] - 1) / cfg->fp8_block[1];
        if (s->ndim != 2 || s->shape[0] != br || s->shape[1] != bc) {
            shape_str(s->shape, s->ndim, got_s, sizeof got_s);
            SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s (%s): shape %s; blocks of [%d, %d] over [%lld, %lld] need [%lld, %lld]", what,
                       sname, s->file, got_s, cfg->fp8_block[0], cfg->fp8_block[1], (long long)rows, (long long)cols,
                       (long long)br, (long long)bc);
            return SITS_ERR_FORMAT;
        }
    } else {
        int shape_ok = s->ndim <= 2 && (n == 1 || (n == rows && s->shape[0] == rows));
        if (!shape_ok || (n != 1 && strstr(sname, "_scale_inv"))) {
            shape_str(s->shape, s->ndim, got_s, sizeof got_s);
            SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s (%s): shape %s; a weight_scale is per-tensor ([] or [1]) or per-channel "
                       "([%lld] or [%lld, 1]); block-wise scales need quantization_config.weight_block_size", what, sname,
                       s->file, got_s, (long long)rows, (long long)rows);
            return SITS_ERR_FORMAT;
        }
    }
    if (s->dtype != SITS_DT_F32 && s->dtype != SITS_DT_BF16 && s->dtype != SITS_DT_F16) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s (%s): dtype %s (F32, BF16 or F16 expected)", what, sname, s->file,
                   sits_dtype_name(s->dtype));
        return SITS_ERR_FORMAT;
    }
    /* a static activation scale is optional (activations are quantised per token at run time); checked only */
    snprintf(sname, sizeof sname, "%.*sinput_scale", (int)(len - 6), w->name);
    const sits_st_tensor_t *is = sits_st_find(st, sname);
    if (is && (numel(is) != 1 || (is->dtype != SITS_DT_F32 && is->dtype != SITS_DT_BF16 && is->dtype != SITS_DT_F16))) {
        shape_str(is->shape, is->ndim, got_s, sizeof got_s);
        SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s (%s): shape %s dtype %s; an input_scale is one F32/BF16/F16 value", what,
                   sname, is->file, got_s, sits_dtype_name(is->dtype));
        return SITS_ERR_FORMAT;
    }
    if (scale_p) *scale_p = s;
    return SITS_OK;
}

sits_status_t sits_model_check_tensors(const sits_model_config_t *cfg, const sits_st_t *st, const char *what)
{
    /* Globals, then layer by layer, so the first problem reported is the first in file order. */
    for (int k = 0; k < SITS_W_KIND_COUNT; k++) {
        if (!sits_wkind_per_layer((sits_wkind_t)k) && sits_wkind_present(cfg, (sits_wkind_t)k))
            SITS_CHECK(check_one(cfg, st, what, (sits_wkind_t)k, 0));
    }
    for (int l = 0; l < cfg->n_layers; l++) {
        for (int k = 0; k < SITS_W_KIND_COUNT; k++) {
            if (sits_wkind_per_layer((sits_wkind_t)k) && sits_wkind_present(cfg, (sits_wkind_t)k))
                SITS_CHECK(check_one(cfg, st, what, (sits_wkind_t)k, l));
        }
        for (int p = 0; cfg->moe.n_experts && p < SITS_MOE_PART_COUNT; p++) {   /* [moe] */
            if (!sits_moe_part_present(cfg, (sits_moe_part_t)p)) continue;
            int per_expert = sits_moe_part_per_expert((sits_moe_part_t)p);
            int64_t want[2];
            sits_moe_part_shape(cfg, (sits_moe_part_t)p, want);
            for (int x = 0; x < (per_expert ? cfg->moe.n_experts : 1); x++) {
                char name[160];
                sits_moe_part_name(cfg, (sits_moe_part_t)p, l, x, name, sizeof name);
                if (p >= SITS_MOE_ROUTER_BIAS) {   /* [gpt-oss] a bias [n] */
                    SITS_CHECK(check_named(cfg, st, what, name, (sits_wkind_t)-1, 1, want + 1));
                    continue;
                }
                char base[160];   /* [int4] name is "X.weight" */
                snprintf(base, sizeof base, "%.*s", (int)(strlen(name) - 7), name);
                if (!sits_st_find(st, name) && sits_w4_present(cfg, st, base)) {   /* [moe int4] checked here: the loader runs it as stored or dequantises it */
                    sits_w4_src_t src;
                    SITS_CHECK(sits_w4_src_open(cfg, st, base, want[0], want[1], what, &src));
                    continue;
                }
                /* [moe fp8] the experts' linears may be F8_E4M3 with their weight_scale (any dense linear kind says so) */
                int lin = p != SITS_MOE_ROUTER && p != SITS_MOE_SH_ROUTE;
                SITS_CHECK(check_named(cfg, st, what, name, lin ? SITS_W_GATE : (sits_wkind_t)-1, 2, want));
            }
        }
    }
    return SITS_OK;
}

/* [gpt-oss] The fused tensor NAME of layer l's experts ("mlp.experts." + leaf), NULL (logged) when missing or not
 * `ndim`-d [E, d1, d2(, d3)] with a float dtype (fl) or U8 (MXFP4 blocks / scales). */
static const sits_st_tensor_t *oai_fused(const sits_st_t *st, int l, const char *leaf, int fl, int ndim, const int64_t *want)
{
    char name[160], want_s[80], got_s[160];
    snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%s", l, leaf);
    const sits_st_tensor_t *t = sits_st_find(st, name);
    if (!t) {
        SITS_ERROR(SITS_SUB_MODEL, "model: tensor %s: missing", name);
        return NULL;
    }
    int ok = t->ndim == ndim && (fl ? t->dtype == SITS_DT_F32 || t->dtype == SITS_DT_F16 || t->dtype == SITS_DT_BF16
                                    : t->dtype == SITS_DT_U8);
    for (int d = 0; ok && d < ndim; d++) ok = t->shape[d] == want[d];
    if (!ok) {
        shape_str(want, ndim, want_s, sizeof want_s);
        shape_str(t->shape, t->ndim, got_s, sizeof got_s);
        SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s: shape %s dtype %s, config needs %s %s", t->file, name, got_s,
                   sits_dtype_name(t->dtype), want_s, fl ? "F32 / F16 / BF16" : "U8");
        return NULL;
    }
    return t;
}

static void set_view(sits_st_tensor_t *v, int kind, sits_dtype_t dt, const void *base, const void *scales, int64_t off,
                     int64_t s0, int64_t s1)
{
    v->view.kind = kind;
    v->view.dt = dt;
    v->view.base = base;
    v->view.scales = scales;
    v->view.off = off;
    v->view.s0 = s0;
    v->view.s1 = s1;
}

/* [gpt-oss] layer l's experts as per-expert views (layout.h [moe] table): 6 a expert into proto / names */
static sits_status_t oai_views(const sits_model_config_t *cfg, const sits_st_t *st, int l, sits_st_tensor_t *proto,
                               char **names)
{
    const int64_t E = cfg->moe.n_experts, H = cfg->hidden_size, I = cfg->moe.moe_inter;
    char probe[160];
    snprintf(probe, sizeof probe, "model.layers.%d.mlp.experts.gate_up_proj_blocks", l);
    const int mx = sits_st_find(st, probe) != NULL;
    const sits_st_tensor_t *gu = NULL, *gus = NULL, *dn = NULL, *dns = NULL, *gub, *dnb;
    if (mx) {
        if (H % 32 || I % 32) {
            SITS_ERROR(SITS_SUB_MODEL, "model: MXFP4 experts need hidden_size and intermediate_size multiples of 32 (%lld, %lld)",
                       (long long)H, (long long)I);
            return SITS_ERR_FORMAT;
        }
        const int64_t w1[4] = { E, 2 * I, H / 32, 16 }, s1[3] = { E, 2 * I, H / 32 };
        const int64_t w2[4] = { E, H, I / 32, 16 }, s2[3] = { E, H, I / 32 };
        if (!(gu = oai_fused(st, l, "gate_up_proj_blocks", 0, 4, w1)) || !(gus = oai_fused(st, l, "gate_up_proj_scales", 0, 3, s1)) ||
            !(dn = oai_fused(st, l, "down_proj_blocks", 0, 4, w2)) || !(dns = oai_fused(st, l, "down_proj_scales", 0, 3, s2)))
            return SITS_ERR_FORMAT;
    } else {
        const int64_t w1[3] = { E, H, 2 * I }, w2[3] = { E, I, H };
        if (!(gu = oai_fused(st, l, "gate_up_proj", 1, 3, w1)) || !(dn = oai_fused(st, l, "down_proj", 1, 3, w2)))
            return SITS_ERR_FORMAT;
    }
    const int64_t b1[2] = { E, 2 * I }, b2[2] = { E, H };
    if (!(gub = oai_fused(st, l, "gate_up_proj_bias", 1, 2, b1)) || !(dnb = oai_fused(st, l, "down_proj_bias", 1, 2, b2)))
        return SITS_ERR_FORMAT;
    static const char *const leaf[3] = { "gate_proj", "up_proj", "down_proj" };
    for (int64_t x = 0; x < E; x++) {
        for (int p = 0; p < 6; p++) {
            sits_st_tensor_t *v = &proto[x * 6 + p];
            memset(v, 0, sizeof *v);
            const int down = p % 3 == 2, up = p % 3 == 1, bias = p >= 3;
            if (!(names[x * 6 + p] = malloc(160))) return SITS_ERR_NOMEM;
            snprintf(names[x * 6 + p], 160, "model.layers.%d.mlp.experts.%lld.%s.%s", l, (long long)x, leaf[p % 3],
                     bias ? "bias" : "weight");
            if (bias) {   /* gate / up: the even / odd entries of gate_up_proj_bias[x]; down: down_proj_bias[x] */
                v->ndim = 1;
                v->shape[0] = down ? H : I;
                set_view(v, SITS_ST_VIEW_STRIDED, (down ? dnb : gub)->dtype, (down ? dnb : gub)->data, NULL,
                         down ? x * H : x * 2 * I + up, 0, down ? 1 : 2);
                v->dtype = v->view.dt;
                continue;
            }
            v->ndim = 2;
            v->shape[0] = down ? H : I;
            v->shape[1] = down ? I : H;
            if (mx) {   /* rows of the [E * rows, cols] code matrix: gate / up alternate */
                set_view(v, SITS_ST_VIEW_MXFP4, SITS_DT_F32, (down ? dn : gu)->data, (down ? dns : gus)->data,
                         down ? x * H : x * 2 * I + up, down ? 1 : 2, 0);
                v->dtype = SITS_DT_F32;
            } else {   /* the checkpoint's [in, out] transposed: (i, j) = gate_up[x, j, 2 i (+ 1)], down[x, j, i] */
                set_view(v, SITS_ST_VIEW_STRIDED, (down ? dn : gu)->dtype, (down ? dn : gu)->data, NULL,
                         down ? x * I * H : x * H * 2 * I + up, down ? 1 : 2, down ? H : 2 * I);
                v->dtype = v->view.dt;
            }
        }
    }
    return SITS_OK;
}

sits_status_t sits_model_st_adapt(const sits_model_config_t *cfg, sits_st_t *st)
{
    if (!strcmp(cfg->model_type, "gpt_oss") && cfg->moe.n_experts) {   /* [gpt-oss] */
        size_t n = (size_t)cfg->moe.n_experts * 6;
        sits_st_tensor_t *proto = calloc(n, sizeof *proto);
        char **names = calloc(n, sizeof *names);
        sits_status_t s = proto && names ? SITS_OK : SITS_ERR_NOMEM;
        for (int l = 0; l < cfg->n_layers && s == SITS_OK; l++) {
            if ((s = oai_views(cfg, st, l, proto, names)) == SITS_OK) s = sits_st_add_views(st, proto, names, n, "(gpt-oss experts)");
            for (size_t i = 0; names && i < n; i++) {
                free(names[i]);
                names[i] = NULL;
            }
        }
        free(proto);
        free(names);
        SITS_CHECK(s);
    }
    if (!strcmp(cfg->model_type, "glm4")) {   /* [glm] its four norms a layer under Gemma 2's names, in an order that never clashes */
        static const char *const glm4[][2] = { { ".post_attention_layernorm.", ".pre_feedforward_layernorm." },
                                               { ".post_self_attn_layernorm.", ".post_attention_layernorm." },
                                               { ".post_mlp_layernorm.", ".post_feedforward_layernorm." } };
        for (size_t i = 0; i < sizeof glm4 / sizeof glm4[0]; i++) SITS_CHECK(sits_st_rename_infix(st, glm4[i][0], glm4[i][1], NULL));
    }
    if (!cfg->mm_text) return SITS_OK;
    static const char *const map[][2] = { { "language_model.model.", "model." }, { "model.language_model.", "model." },
                                          { "language_model.lm_head.", "lm_head." } };
    size_t n = 0, k;
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        SITS_CHECK(sits_st_rename_prefix(st, map[i][0], map[i][1], &k));
        n += k;
    }
    SITS_INFO(SITS_SUB_MODEL, "model: the language model of a multimodal checkpoint: %zu tensors (the vision tower is not loaded)", n);
    return SITS_OK;
}

float sits_model_fp8_scale_at(const sits_model_config_t *cfg, const sits_st_tensor_t *s, int64_t row, int64_t col)
{
    int64_t i = 0;
    if (cfg && cfg->fp8_block[0] > 0 && cfg->fp8_block[1] > 0 && s->ndim == 2 && numel(s) > 1)
        i = row / cfg->fp8_block[0] * s->shape[1] + col / cfg->fp8_block[1];
    else if (numel(s) > 1)
        i = row;
    float v = 1.0f;
    sits_convert_to_f32(s->dtype, (const unsigned char *)s->data + (size_t)i * sits_dtype_size(s->dtype), &v, 1);
    return v;
}

/* ---- [moe] ------------------------------------------------------------------------------------ */

int sits_moe_part_per_expert(sits_moe_part_t part)
{
    return (part >= SITS_MOE_GATE && part <= SITS_MOE_DOWN) || (part >= SITS_MOE_GATE_BIAS && part <= SITS_MOE_DOWN_BIAS);
}

int sits_moe_part_present(const sits_model_config_t *cfg, sits_moe_part_t part)
{
    if (!cfg->moe.n_experts) return 0;
    if (part >= SITS_MOE_SH_GATE && part <= SITS_MOE_SH_ROUTE) return cfg->moe.shared_inter > 0;
    if (part == SITS_MOE_ROUTER_BIAS) return cfg->moe.router_bias;
    if (part >= SITS_MOE_GATE_BIAS && part <= SITS_MOE_DOWN_BIAS) return cfg->moe.expert_bias;
    return part < SITS_MOE_PART_COUNT;
}

void sits_moe_part_name(const sits_model_config_t *cfg, sits_moe_part_t part, int layer, int expert, char *buf, size_t len)
{
    int mixtral = !strcmp(cfg->model_type, "mixtral");
    static const char *const mx[] = { "block_sparse_moe.gate", "w1", "w3", "w2" };
    static const char *const qw[] = { "mlp.gate", "gate_proj", "up_proj", "down_proj", "mlp.shared_expert.gate_proj",
                                      "mlp.shared_expert.up_proj", "mlp.shared_expert.down_proj", "mlp.shared_expert_gate",
                                      "mlp.router", "gate_proj", "up_proj", "down_proj" };
    if ((unsigned)part >= SITS_MOE_PART_COUNT || (mixtral && part > SITS_MOE_DOWN)) {
        snprintf(buf, len, "?");
        return;
    }
    const char *leaf = mixtral ? mx[part] : part == SITS_MOE_ROUTER && !strcmp(cfg->model_type, "gpt_oss") ? "mlp.router" : qw[part];
    const char *what = part >= SITS_MOE_ROUTER_BIAS ? "bias" : "weight";
    if (sits_moe_part_per_expert(part))
        snprintf(buf, len, "model.layers.%d.%s.experts.%d.%s.%s", layer, mixtral ? "block_sparse_moe" : "mlp", expert, leaf, what);
    else
        snprintf(buf, len, "model.layers.%d.%s.%s", layer, leaf, what);
}

void sits_moe_part_shape(const sits_model_config_t *cfg, sits_moe_part_t part, int64_t shape[2])
{
    int64_t H = cfg->hidden_size, Ie = cfg->moe.moe_inter, Is = cfg->moe.shared_inter;
    switch (part) {
    case SITS_MOE_ROUTER: shape[0] = cfg->moe.n_experts; shape[1] = H; break;
    case SITS_MOE_GATE: case SITS_MOE_UP: shape[0] = Ie; shape[1] = H; break;
    case SITS_MOE_DOWN: shape[0] = H; shape[1] = Ie; break;
    case SITS_MOE_SH_GATE: case SITS_MOE_SH_UP: shape[0] = Is; shape[1] = H; break;
    case SITS_MOE_SH_DOWN: shape[0] = H; shape[1] = Is; break;
    case SITS_MOE_SH_ROUTE: shape[0] = 1; shape[1] = H; break;
    case SITS_MOE_ROUTER_BIAS: shape[0] = 1; shape[1] = cfg->moe.n_experts; break;   /* [gpt-oss] stored 1-d */
    case SITS_MOE_GATE_BIAS: case SITS_MOE_UP_BIAS: shape[0] = 1; shape[1] = Ie; break;
    case SITS_MOE_DOWN_BIAS: shape[0] = 1; shape[1] = H; break;
    default: shape[0] = shape[1] = 0; break;
    }
}
