/* int4.c -- [int4] INT4 checkpoint formats: quantization_config, tensor validation, unpacking, and the
 * round-to-nearest quantiser of --quant int4; see int4.h for the layouts. */
#include "model/int4.h"
#include "util/log.h"

#include <math.h>
#include <stdio.h>
#include <strings.h>
#include <jansson.h>

/* ---- quantization_config ------------------------------------------------------------------- */

static int jint(const json_t *o, const char *k1, const char *k2, int dflt)
{
    const json_t *v = json_object_get(o, k1);
    if ((!v || json_is_null(v)) && k2) v = json_object_get(o, k2);
    return json_is_integer(v) ? (int)json_integer_value(v) : dflt;
}

static int jbool(const json_t *o, const char *k, int dflt)
{
    const json_t *v = json_object_get(o, k);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

static const char *jstr(const json_t *o, const char *k1, const char *k2, const char *dflt)
{
    const json_t *v = json_object_get(o, k1);
    if ((!v || json_is_null(v)) && k2) v = json_object_get(o, k2);
    return json_is_string(v) ? json_string_value(v) : dflt;
}

static sits_status_t check_group(const char *what, const char *key, int g)
{
    if (g == -1 || (g >= 8 && g % 8 == 0)) return SITS_OK;
    SITS_ERROR(SITS_SUB_MODEL, "%s: quantization_config.%s %d is not supported (-1 or a multiple of 8)", what, key, g);
    return SITS_ERR_UNSUPPORTED;
}

static sits_status_t parse_ct(const json_t *q, const char *what, sits_model_config_t *cfg, int *handled_p)
{
    const json_t *groups = json_object_get(q, "config_groups");
    const char *key;
    const json_t *g;
    int n_int = 0, n_other = 0, group = 0, sym = 1, nbits = 4;
    json_object_foreach((json_t *)groups, key, g) {
        const json_t *w = json_object_get(g, "weights");
        if (!w || json_is_null(w)) continue;
        const char *type = jstr(w, "type", NULL, "?");
        if (strcmp(type, "int")) {
            n_other++;
            continue;
        }
        n_int++;
        int bits = jint(w, "num_bits", NULL, 0);
        if (bits != 4 && bits != 8) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: quantization_config.config_groups.%s.weights: %d-bit int weights are not supported "
                       "(4 or 8 bits)", what, key, bits);
            return SITS_ERR_UNSUPPORTED;
        }
        const char *fmt = jstr(g, "format", NULL, jstr(q, "format", NULL, "(none)"));
        if (strcmp(fmt, "pack-quantized")) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: quantization_config.config_groups.%s: format \"%s\" is not supported for int weights "
                       "(pack-quantized)", what, key, fmt);
            return SITS_ERR_UNSUPPORTED;
        }
        const char *strat = jstr(w, "strategy", NULL, "?");
        int gs;
        if (!strcmp(strat, "group")) {
            gs = jint(w, "group_size", NULL, 0);
            SITS_CHECK(check_group(what, "config_groups.weights.group_size", gs));
        } else if (!strcmp(strat, "channel")) {
            gs = -1;
        } else {
            SITS_ERROR(SITS_SUB_MODEL, "%s: quantization_config.config_groups.%s.weights: int4 strategy \"%s\" is not supported "
                       "(group or channel)", what, key, strat);
            return SITS_ERR_UNSUPPORTED;
        }
        const json_t *ia = json_object_get(g, "input_activations");
        if (ia && !json_is_null(ia)) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: quantization_config.config_groups.%s.input_activations: quantised activations "
                       "(W4A8) are not supported; weight-only W4A16 is", what, key);
            return SITS_ERR_UNSUPPORTED;
        }
        if (jbool(w, "dynamic", 0)) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: quantization_config.config_groups.%s.weights.dynamic: dynamic weights are not supported",
                       what, key);
            return SITS_ERR_UNSUPPORTED;
        }
        int s = jbool(w, "symmetric", 1);
        if (n_int > 1 && (gs != group || s != sym || bits != nbits)) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: quantization_config.config_groups: int groups with different bits, group sizes or "
                       "symmetry are not supported", what);
            return SITS_ERR_UNSUPPORTED;
        }
        group = gs;
        sym = s;
        nbits = bits;
    }
    if (!n_int) {
        *handled_p = 0;
        return SITS_OK;
    }
    if (n_other) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: quantization_config.config_groups: int and float weight groups in one checkpoint are not "
                   "supported", what);
        return SITS_ERR_UNSUPPORTED;
    }
    cfg->w4.fmt = SITS_W4_CT;
    cfg->w4.bits = nbits;
    if (nbits == 8)
        SITS_INFO(SITS_SUB_MODEL, "%s: 8-bit int weights (compressed-tensors): dequantised at load (no W8A16 kernel)", what);
    cfg->w4.group_size = group;
    cfg->w4.sym = sym;
    *handled_p = 1;
    return SITS_OK;
}

sits_status_t sits_w4_config_parse(const struct json_t *q_, const char *method, const char *what, sits_model_config_t *cfg,
                                   int *handled_p)
{
    const json_t *q = (const json_t *)q_;
    memset(&cfg->w4, 0, sizeof cfg->w4);
    *handled_p = 1;
    if (!strcmp(method, "compressed-tensors")) return parse_ct(q, what, cfg, handled_p);
    int awq = !strcmp(method, "awq");
    if (!awq && strcmp(method, "gptq")) {
        *handled_p = 0;
        return SITS_OK;
    }
    int bits = jint(q, "bits", "w_bit", 0);
    if (bits != 4 && (awq || bits != 8)) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: quantization_config.bits %d: %s checkpoints of %d bits are not supported (%s)", what,
                   bits, method, bits, awq ? "4 only" : "4 or 8");
        return SITS_ERR_UNSUPPORTED;
    }
    cfg->w4.bits = bits;
    if (bits == 8) SITS_INFO(SITS_SUB_MODEL, "%s: 8-bit GPTQ weights: dequantised at load (no W8A16 kernel)", what);
    int gs = jint(q, "group_size", "q_group_size", -1);
    SITS_CHECK(check_group(what, "group_size", gs));
    cfg->w4.group_size = gs;
    if (awq) {
        const char *ver = jstr(q, "version", NULL, "gemm");
        if (strcasecmp(ver, "gemm")) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: quantization_config.version \"%s\": AWQ %s packing is not supported (gemm)", what, ver,
                       ver);
            return SITS_ERR_UNSUPPORTED;
        }
        if (!jbool(q, "zero_point", 1)) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: quantization_config.zero_point false: AWQ without zero points is not supported", what);
            return SITS_ERR_UNSUPPORTED;
        }
        cfg->w4.fmt = SITS_W4_AWQ;
        return SITS_OK;
    }
    const char *cf = jstr(q, "checkpoint_format", "format", "gptq");
    if (!strcmp(cf, "gptq")) {
        cfg->w4.zero_offset = 1;
    } else if (strcmp(cf, "gptq_v2")) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: quantization_config.checkpoint_format \"%s\" is not supported (gptq, gptq_v2)", what, cf);
        return SITS_ERR_UNSUPPORTED;
    }
    cfg->w4.fmt = SITS_W4_GPTQ;
    cfg->w4.sym = jbool(q, "sym", 1);
    cfg->w4.desc_act = jbool(q, "desc_act", 0);
    return SITS_OK;
}

/* ---- tensors --------------------------------------------------------------------------------- */

static const char *const suffix[4][5] = {   /* [fmt]: packed weight, zeros, scales, g_idx, shape */
    { NULL, NULL, NULL, NULL, NULL },
    { "qweight", "qzeros", "scales", NULL, NULL },
    { "qweight", "qzeros", "scales", "g_idx", NULL },
    { "weight_packed", "weight_zero_point", "weight_scale", "weight_g_idx", "weight_shape" },
};

static const sits_st_tensor_t *part(const sits_st_t *st, const char *base, const char *sfx)
{
    char name[224];
    if (!sfx) return NULL;
    snprintf(name, sizeof name, "%s.%s", base, sfx);
    return sits_st_find(st, name);
}

int sits_w4_present(const sits_model_config_t *cfg, const sits_st_t *st, const char *base)
{
    if (cfg->w4.fmt <= SITS_W4_NONE || cfg->w4.fmt > SITS_W4_CT || !st) return 0;
    return part(st, base, suffix[cfg->w4.fmt][0]) != NULL;
}

static int is_float_dt(sits_dtype_t d) { return d == SITS_DT_F32 || d == SITS_DT_F16 || d == SITS_DT_BF16; }

/* the tensor base.sfx with dtype ok and shape [d0, d1] (d1 < 0: 1-d [d0]); logs and returns the status */
static sits_status_t want(const sits_st_t *st, const char *base, const char *sfx, const char *what, int need, int float_dt,
                          int64_t d0, int64_t d1, const sits_st_tensor_t **t_p)
{
    const sits_st_tensor_t *t = part(st, base, sfx);
    *t_p = t;
    if (!t) {
        if (!need) return SITS_OK;
        SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s.%s: missing (an INT4 linear needs it)", what, base, sfx);
        return SITS_ERR_NOT_FOUND;
    }
    int dt_ok = float_dt ? is_float_dt(t->dtype) : t->dtype == SITS_DT_I32;
    if (!dt_ok) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s (%s): dtype %s, expected %s", what, t->name, t->file, sits_dtype_name(t->dtype),
                   float_dt ? "F16, BF16 or F32" : "I32");
        return SITS_ERR_FORMAT;
    }
    int nd = d1 < 0 ? 1 : 2;
    if (t->ndim != nd || t->shape[0] != d0 || (nd == 2 && t->shape[1] != d1)) {
        char got[96];
        size_t n = (size_t)snprintf(got, sizeof got, "[");
        for (int d = 0; d < t->ndim && n < sizeof got; d++)
            n += (size_t)snprintf(got + n, sizeof got - n, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
        if (n < sizeof got) snprintf(got + n, sizeof got - n, "]");
        if (nd == 2)
            SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s (%s): shape %s, expected [%lld, %lld]", what, t->name, t->file, got,
                       (long long)d0, (long long)d1);
        else
            SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s (%s): shape %s, expected [%lld]", what, t->name, t->file, got, (long long)d0);
        return SITS_ERR_FORMAT;
    }
    return SITS_OK;
}

sits_status_t sits_w4_src_open(const sits_model_config_t *cfg, const sits_st_t *st, const char *base, int64_t out,
                               int64_t in, const char *what, sits_w4_src_t *src_p)
{
    sits_w4_src_t s;
    memset(&s, 0, sizeof s);
    s.fmt = cfg->w4.fmt;
    s.bits = cfg->w4.bits == 8 ? 8 : 4;
    const int per = 32 / s.bits;   /* values an int32 holds */
    s.out = out;
    s.in = in;
    s.group_size = cfg->w4.group_size > 0 ? cfg->w4.group_size : (int)in;
    const char *const *sf = suffix[s.fmt];
    if (!sits_w4_present(cfg, st, base)) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s.%s: missing", what, base, sf[0] ? sf[0] : "qweight");
        return SITS_ERR_NOT_FOUND;
    }
    const sits_st_tensor_t *qw = part(st, base, sf[0]);
    int need_outp = s.fmt != SITS_W4_CT || !cfg->w4.sym;   /* packed along the output dim: AWQ weights, zeros */
    if ((need_outp && out % per) || in % 2) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s (%s): %lld outputs x %lld inputs: INT%d needs an even input count%s%s", what,
                   qw->name, qw->file, (long long)out, (long long)in, s.bits, need_outp ? " and outputs a multiple of " : "",
                   need_outp ? (per == 8 ? "8" : "4") : "");
        return SITS_ERR_UNSUPPORTED;
    }
    if (s.fmt == SITS_W4_GPTQ && in % per) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s (%s): %d-bit GPTQ needs inputs a multiple of %d (%lld)", what, qw->name, qw->file,
                   s.bits, per, (long long)in);
        return SITS_ERR_UNSUPPORTED;
    }
    s.n_groups = (int)((in + s.group_size - 1) / s.group_size);
    if (s.fmt == SITS_W4_AWQ) {
        if (in % s.group_size) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s (%s): %lld inputs are not a multiple of group_size %d", what, qw->name,
                       qw->file, (long long)in, s.group_size);
            return SITS_ERR_FORMAT;
        }
        SITS_CHECK(want(st, base, sf[0], what, 1, 0, in, out / 8, &s.qw));
        SITS_CHECK(want(st, base, sf[1], what, 1, 0, s.n_groups, out / 8, &s.qz));
        SITS_CHECK(want(st, base, sf[2], what, 1, 1, s.n_groups, out, &s.sc));
    } else if (s.fmt == SITS_W4_GPTQ) {
        SITS_CHECK(want(st, base, sf[0], what, 1, 0, in / per, out, &s.qw));
        SITS_CHECK(want(st, base, sf[1], what, 1, 0, s.n_groups, out / per, &s.qz));
        SITS_CHECK(want(st, base, sf[2], what, 1, 1, s.n_groups, out, &s.sc));
        SITS_CHECK(want(st, base, sf[3], what, 0, 0, in, -1, &s.gidx));
        s.zero_offset = cfg->w4.zero_offset;
    } else {
        const sits_st_tensor_t *shp = part(st, base, sf[4]);
        int64_t sv[2] = { -1, -1 };
        if (shp && shp->ndim == 1 && shp->shape[0] == 2 && (shp->dtype == SITS_DT_I64 || shp->dtype == SITS_DT_I32)) {
            for (int i = 0; i < 2; i++) {
                if (shp->dtype == SITS_DT_I64) memcpy(&sv[i], (const unsigned char *)shp->data + 8 * i, 8);
                else sv[i] = (int32_t)sits_w4_word(shp, i);
            }
        }
        if (!shp || sv[0] != out || sv[1] != in) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s.%s%s%s: %s, expected [%lld, %lld]", what, base, sf[4], shp ? " " : "",
                       shp ? shp->file : "", shp ? "wrong value or dtype (I64/I32 [2])" : "missing", (long long)out, (long long)in);
            return shp ? SITS_ERR_FORMAT : SITS_ERR_NOT_FOUND;
        }
        SITS_CHECK(want(st, base, sf[0], what, 1, 0, out, (in + per - 1) / per, &s.qw));
        SITS_CHECK(want(st, base, sf[2], what, 1, 1, out, s.n_groups, &s.sc));
        SITS_CHECK(want(st, base, sf[1], what, !cfg->w4.sym, 0, (out + per - 1) / per, s.n_groups, &s.qz));
        if (cfg->w4.sym && s.qz) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s (%s): a zero point in a symmetric checkpoint", what, s.qz->name, s.qz->file);
            return SITS_ERR_FORMAT;
        }
        SITS_CHECK(want(st, base, sf[3], what, 0, 0, in, -1, &s.gidx));
        s.zero_default = 1 << (s.bits - 1);   /* q + 8 (q + 128 at 8 bits) is what is packed */
    }
    if (s.gidx) {
        int trivial = 1;
        for (int64_t k = 0; k < in; k++) {
            int32_t g = (int32_t)sits_w4_word(s.gidx, k);
            if (g < 0 || g >= s.n_groups) {
                SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s (%s): g_idx[%lld] = %d, outside [0, %d)", what, s.gidx->name, s.gidx->file,
                           (long long)k, g, s.n_groups);
                return SITS_ERR_FORMAT;
            }
            if (g != k / s.group_size) trivial = 0;
        }
        if (trivial) s.gidx = NULL;   /* groups in input order: no act-order */
    }
    *src_p = s;
    return SITS_OK;
}

float sits_w4_src_zero(const sits_w4_src_t *s, int64_t o, int g)
{
    if (!s->qz) return (float)s->zero_default;
    int v;
    const int b = s->bits, per = 32 / b, mask = (1 << b) - 1;
    if (s->fmt == SITS_W4_AWQ) {
        static const int awq_rev[8] = { 0, 4, 1, 5, 2, 6, 3, 7 };
        v = (int)(sits_w4_word(s->qz, (int64_t)g * (s->out / 8) + o / 8) >> (4 * awq_rev[o % 8])) & 15;
    } else if (s->fmt == SITS_W4_GPTQ) {
        v = (int)(sits_w4_word(s->qz, (int64_t)g * (s->out / per) + o / per) >> (b * (o % per))) & mask;
    } else {
        v = (int)(sits_w4_word(s->qz, (o / per) * s->n_groups + g) >> (b * (o % per))) & mask;
    }
    return (float)(v + s->zero_offset);
}

float sits_w4_src_scale(const sits_w4_src_t *s, int64_t o, int g)
{
    int64_t idx = s->fmt == SITS_W4_CT ? o * s->n_groups + g : (int64_t)g * s->out + o;
    float v = 0.0f;
    sits_convert_to_f32(s->sc->dtype, (const unsigned char *)s->sc->data + (size_t)idx * sits_dtype_size(s->sc->dtype), &v, 1);
    return v;
}

void sits_w4_src_rows_f32(const sits_w4_src_t *s, int64_t r, int64_t n, int64_t c0, int64_t w, float *out)
{
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < w; j++) {
            int g = sits_w4_src_group(s, c0 + j);
            out[i * w + j] = ((float)sits_w4_src_q(s, r + i, c0 + j) - sits_w4_src_zero(s, r + i, g)) * sits_w4_src_scale(s, r + i, g);
        }
}

/* ---- round to nearest ----------------------------------------------------------------------- */

/* scale / zero of a group from its range [mn, mx] (mn <= 0 <= mx), and the squared error of the
 * group x [n] quantised with them */
static void rtn_params(float mn, float mx, float *s_p, float *z_p)
{
    float s = mx > mn ? (mx - mn) / 15.0f : 1.0f;
    float z = rintf(-mn / s);
    *s_p = s;
    *z_p = z < 0.0f ? 0.0f : z > 15.0f ? 15.0f : z;
}

static float rtn_u(float x, float s, float z)
{
    float u = rintf(x / s) + z;
    return u < 0.0f ? 0.0f : u > 15.0f ? 15.0f : u;
}

void sits_w4_quantize_row(const float *x, int64_t in, int group, uint8_t *q, float *scale, float *zero)
{
    memset(q, 0, (size_t)(in / 2));
    for (int64_t g0 = 0, gi = 0; g0 < in; g0 += group, gi++) {
        float mx = 0.0f, mn = 0.0f;
        for (int64_t k = g0; k < g0 + group; k++) {
            mx = x[k] > mx ? x[k] : mx;
            mn = x[k] < mn ? x[k] : mn;
        }
        /* the range shrunk by the factor (1, 0.95, .. 0.55) with the least squared error */
        float best = INFINITY, s = 1.0f, z = 0.0f;
        for (int i = 0; i < SITS_W4_CLIP_STEPS; i++) {
            float a = 1.0f - 0.05f * (float)i, si, zi, err = 0.0f;
            rtn_params(a * mn, a * mx, &si, &zi);
            for (int64_t k = g0; k < g0 + group; k++) {
                float d = (rtn_u(x[k], si, zi) - zi) * si - x[k];
                err += d * d;
            }
            if (err < best) {
                best = err;
                s = si;
                z = zi;
            }
        }
        scale[gi] = s;
        zero[gi] = z;
        for (int64_t k = g0; k < g0 + group; k++) q[k / 2] |= (uint8_t)((int)rtn_u(x[k], s, z) << (k & 1 ? 4 : 0));
    }
}
