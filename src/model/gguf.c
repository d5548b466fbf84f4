/* gguf.c -- GGUF v2/v3 reader, fp32 dequantisers and the llama -> HF tensor mapping; see gguf.h.
 *
 * Parsing walks the image with a bounds-checked cursor; every count and length is checked against
 * the bytes left before anything is allocated for it (an array of n entries is allocated only once
 * n * (the smallest encoding of an entry) fits in the rest of the file), so a corrupt header costs
 * at most O(file size) memory. After a successful parse: keys unique, tensor names unique, each
 * tensor's [offset, offset + nbytes) inside the data section, aligned, and disjoint from the others.
 *
 * The dequantisers follow gguf-py's numpy code operation by operation in fp32. (d * q is exact in
 * fp32 -- an fp16 scale times an integer of at most 8 bits -- so even a contracted d * q + m would
 * round once like numpy's; contraction is turned off for this file anyway.) */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "model/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/dtype.h"
#include "util/le.h"
#include "util/log.h"

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define GGUF_MAX_NAME 256      /* tensor names (llama.cpp: 64) */

typedef struct {
    sits_gguf_kv_t pub;   /* first: sits_gguf_kv_t pointers handed out are these */
    uint64_t *str_off;    /* string arrays: offset of each element's length prefix from pub.raw */
} gguf_kv_t;

struct sits_gguf {
    char *what;
    const unsigned char *base;
    size_t len;
    void *map;            /* NULL when parsing a caller's buffer */
    size_t map_len;
    uint32_t version, alignment;
    gguf_kv_t *kvs;
    size_t n_kv;
    sits_gguf_tensor_t *tensors;
    size_t n_tensors;
    size_t *by_name;      /* tensor indices sorted by name */
    uint64_t data_start;
};

/* ---- ggml types ------------------------------------------------------------------------------ */

typedef struct { const char *name; uint32_t blck, size; } ggml_type_info_t;

/* ggml.h numbering; holes are ids ggml removed. */
static const ggml_type_info_t ggml_types[] = {
    [0] = { "F32", 1, 4 },        [1] = { "F16", 1, 2 },         [2] = { "Q4_0", 32, 18 },
    [3] = { "Q4_1", 32, 20 },     [6] = { "Q5_0", 32, 22 },      [7] = { "Q5_1", 32, 24 },
    [8] = { "Q8_0", 32, 34 },     [9] = { "Q8_1", 32, 40 },      [10] = { "Q2_K", 256, 84 },
    [11] = { "Q3_K", 256, 110 },  [12] = { "Q4_K", 256, 144 },   [13] = { "Q5_K", 256, 176 },
    [14] = { "Q6_K", 256, 210 },  [15] = { "Q8_K", 256, 292 },   [16] = { "IQ2_XXS", 256, 66 },
    [17] = { "IQ2_XS", 256, 74 }, [18] = { "IQ3_XXS", 256, 98 }, [19] = { "IQ1_S", 256, 50 },
    [20] = { "IQ4_NL", 32, 18 },  [21] = { "IQ3_S", 256, 110 },  [22] = { "IQ2_S", 256, 82 },
    [23] = { "IQ4_XS", 256, 136 },[24] = { "I8", 1, 1 },         [25] = { "I16", 1, 2 },
    [26] = { "I32", 1, 4 },       [27] = { "I64", 1, 8 },        [28] = { "F64", 1, 8 },
    [29] = { "IQ1_M", 256, 56 },  [30] = { "BF16", 1, 2 },       [34] = { "TQ1_0", 256, 54 },
    [35] = { "TQ2_0", 256, 66 },  [39] = { "MXFP4", 32, 17 },    [40] = { "NVFP4", 64, 36 },
    [41] = { "Q1_0", 128, 18 },
};
#define N_GGML_TYPES ((int)(sizeof ggml_types / sizeof ggml_types[0]))

const char *sits_ggml_type_name(int t) { return t >= 0 && t < N_GGML_TYPES ? ggml_types[t].name : NULL; }

int sits_ggml_type_supported(int t)
{
    switch (t) {
    case SITS_GGML_F32: case SITS_GGML_F16: case SITS_GGML_BF16: case SITS_GGML_Q8_0: case SITS_GGML_Q4_0: case SITS_GGML_Q4_1:
    case SITS_GGML_Q5_0: case SITS_GGML_Q5_1: case SITS_GGML_Q2_K: case SITS_GGML_Q3_K: case SITS_GGML_Q4_K: case SITS_GGML_Q5_K:
    case SITS_GGML_Q6_K:
        return 1;
    default:
        return 0;
    }
}

static const char *vtype_name(uint32_t t)
{
    static const char *const names[] = { "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
                                         "bool", "string", "array", "uint64", "int64", "float64" };
    return t < sizeof names / sizeof names[0] ? names[t] : "unknown";
}

/* Bytes of one scalar of type t; 0 for string / array / unknown. */
static size_t vtype_size(uint32_t t)
{
    switch (t) {
    case SITS_GGUF_UINT8: case SITS_GGUF_INT8: case SITS_GGUF_BOOL: return 1;
    case SITS_GGUF_UINT16: case SITS_GGUF_INT16: return 2;
    case SITS_GGUF_UINT32: case SITS_GGUF_INT32: case SITS_GGUF_FLOAT32: return 4;
    case SITS_GGUF_UINT64: case SITS_GGUF_INT64: case SITS_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

/* ---- cursor ---------------------------------------------------------------------------------- */

typedef struct {
    const unsigned char *p;
    size_t len, pos;
    const char *what;
} cur_t;

static size_t cur_left(const cur_t *c) { return c->len - c->pos; }

/* `field` describes what was being read, for the truncation message. */
static sits_status_t cur_need(const cur_t *c, uint64_t n, const char *field, const char *name)
{
    if (n <= cur_left(c)) return SITS_OK;
    SITS_ERROR(SITS_SUB_MODEL, "%s: truncated: %s%s%s needs %llu bytes at offset %zu, %zu left", c->what, field,
               name ? " of " : "", name ? name : "", (unsigned long long)n, c->pos, cur_left(c));
    return SITS_ERR_FORMAT;
}

static sits_status_t cur_u32(cur_t *c, const char *field, const char *name, uint32_t *v_p)
{
    SITS_CHECK(cur_need(c, 4, field, name));
    *v_p = sits_le_get32(c->p + c->pos);
    c->pos += 4;
    return SITS_OK;
}

static sits_status_t cur_u64(cur_t *c, const char *field, const char *name, uint64_t *v_p)
{
    SITS_CHECK(cur_need(c, 8, field, name));
    *v_p = sits_le_get64(c->p + c->pos);
    c->pos += 8;
    return SITS_OK;
}

/* A GGUF string: u64 length + bytes. Returns a pointer into the image. */
static sits_status_t cur_str(cur_t *c, const char *field, const char *name, const char **s_p, size_t *len_p)
{
    uint64_t n;
    SITS_CHECK(cur_u64(c, field, name, &n));
    if (n > cur_left(c)) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: %s%s%s: string length %llu runs past the end of the file (%zu bytes left)",
                   c->what, field, name ? " of " : "", name ? name : "", (unsigned long long)n, cur_left(c));
        return SITS_ERR_FORMAT;
    }
    *s_p = (const char *)c->p + c->pos;
    *len_p = (size_t)n;
    c->pos += (size_t)n;
    return SITS_OK;
}

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

/* ---- parse ----------------------------------------------------------------------------------- */

void sits_gguf_close(sits_gguf_t *g)
{
    if (!g) return;
    for (size_t i = 0; i < g->n_kv; i++) {
        free((char *)g->kvs[i].pub.key);
        free(g->kvs[i].str_off);
    }
    free(g->kvs);
    for (size_t i = 0; i < g->n_tensors; i++) free((char *)g->tensors[i].name);
    free(g->tensors);
    free(g->by_name);
    if (g->map) munmap(g->map, g->map_len);
    free(g->what);
    free(g);
}

/* One value (scalar or array) of key `key` at the cursor into kv. */
static sits_status_t parse_value(cur_t *c, const char *key, uint32_t type, gguf_kv_t *kv)
{
    kv->pub.type = (sits_gguf_vtype_t)type;
    kv->pub.elem_type = (sits_gguf_vtype_t)type;
    kv->pub.n = 1;
    if (type == SITS_GGUF_ARRAY) {
        uint32_t et;
        uint64_t n;
        SITS_CHECK(cur_u32(c, "array element type", key, &et));
        SITS_CHECK(cur_u64(c, "array length", key, &n));
        if (et == SITS_GGUF_ARRAY) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: key %s: nested arrays are not supported", c->what, key);
            return SITS_ERR_FORMAT;
        }
        if (et != SITS_GGUF_STRING && vtype_size(et) == 0) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: key %s: unknown array element type %u", c->what, key, et);
            return SITS_ERR_FORMAT;
        }
        kv->pub.elem_type = (sits_gguf_vtype_t)et;
        kv->pub.n = n;
        kv->pub.raw = c->p + c->pos;
        if (et != SITS_GGUF_STRING) {
            size_t es = vtype_size(et);
            if (n > cur_left(c) / es) {
                SITS_ERROR(SITS_SUB_MODEL, "%s: key %s: array of %llu %s runs past the end of the file (%zu bytes left)",
                           c->what, key, (unsigned long long)n, vtype_name(et), cur_left(c));
                return SITS_ERR_FORMAT;
            }
            c->pos += (size_t)n * es;
            return SITS_OK;
        }
        /* strings: each at least its 8-byte length, so n is bounded by the bytes left */
        if (n > cur_left(c) / 8) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: key %s: array of %llu strings runs past the end of the file (%zu bytes left)",
                       c->what, key, (unsigned long long)n, cur_left(c));
            return SITS_ERR_FORMAT;
        }
        kv->str_off = malloc((n ? (size_t)n : 1) * sizeof *kv->str_off);
        if (!kv->str_off) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: key %s: out of memory for %llu string offsets", c->what, key,
                       (unsigned long long)n);
            return SITS_ERR_NOMEM;
        }
        for (uint64_t i = 0; i < n; i++) {
            const char *s;
            size_t l;
            kv->str_off[i] = (uint64_t)(c->p + c->pos - kv->pub.raw);
            SITS_CHECK(cur_str(c, "array string", key, &s, &l));
        }
        return SITS_OK;
    }
    kv->pub.raw = c->p + c->pos;
    if (type == SITS_GGUF_STRING) {
        const char *s;
        size_t l;
        return cur_str(c, "string value", key, &s, &l);
    }
    size_t sz = vtype_size(type);
    if (sz == 0) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: key %s: unknown value type %u", c->what, key, type);
        return SITS_ERR_FORMAT;
    }
    SITS_CHECK(cur_need(c, sz, "value", key));
    c->pos += sz;
    return SITS_OK;
}

static int kv_cmp(const void *a, const void *b)
{
    return strcmp(((const gguf_kv_t *)a)->pub.key, ((const gguf_kv_t *)b)->pub.key);
}

static sits_status_t parse_kvs(sits_gguf_t *g, cur_t *c, uint64_t n_kv)
{
    /* smallest kv: 8-byte key length + 1 key byte + 4-byte type + 1-byte value */
    if (n_kv > cur_left(c) / 14) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: %llu metadata entries cannot fit in the %zu bytes left", g->what,
                   (unsigned long long)n_kv, cur_left(c));
        return SITS_ERR_FORMAT;
    }
    g->kvs = calloc(n_kv ? (size_t)n_kv : 1, sizeof *g->kvs);
    if (!g->kvs) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: out of memory for %llu metadata entries", g->what, (unsigned long long)n_kv);
        return SITS_ERR_NOMEM;
    }
    for (uint64_t i = 0; i < n_kv; i++) {
        const char *k;
        size_t kl;
        uint32_t type;
        char idx[48];
        snprintf(idx, sizeof idx, "metadata entry %llu", (unsigned long long)i);
        SITS_CHECK(cur_str(c, "key", idx, &k, &kl));
        if (kl == 0 || memchr(k, '\0', kl)) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: %s: key is empty or contains NUL", g->what, idx);
            return SITS_ERR_FORMAT;
        }
        gguf_kv_t *kv = &g->kvs[g->n_kv];
        if (!(kv->pub.key = dup_n(k, kl))) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: out of memory", g->what);
            return SITS_ERR_NOMEM;
        }
        g->n_kv++;
        SITS_CHECK(cur_u32(c, "value type", kv->pub.key, &type));
        SITS_CHECK(parse_value(c, kv->pub.key, type, kv));
    }
    if (g->n_kv > 1) qsort(g->kvs, g->n_kv, sizeof *g->kvs, kv_cmp);
    for (size_t i = 1; i < g->n_kv; i++) {
        if (!strcmp(g->kvs[i - 1].pub.key, g->kvs[i].pub.key)) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: key %s: present twice", g->what, g->kvs[i].pub.key);
            return SITS_ERR_FORMAT;
        }
    }
    return SITS_OK;
}

static sits_status_t read_alignment(sits_gguf_t *g)
{
    g->alignment = SITS_GGUF_DEFAULT_ALIGNMENT;
    const sits_gguf_kv_t *a = sits_gguf_kv_find(g, "general.alignment");
    if (!a) return SITS_OK;
    if (a->type != SITS_GGUF_UINT32) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: key general.alignment: type %s, must be uint32", g->what, vtype_name(a->type));
        return SITS_ERR_FORMAT;
    }
    uint32_t v = sits_le_get32(a->raw);
    if (v == 0 || (v & (v - 1)) != 0) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: key general.alignment: %u is not a power of two", g->what, v);
        return SITS_ERR_FORMAT;
    }
    g->alignment = v;
    return SITS_OK;
}

/* Tensor info i at the cursor into t (offset not yet checked against the data section). */
static sits_status_t parse_tensor_info(sits_gguf_t *g, cur_t *c, uint64_t i, sits_gguf_tensor_t *t)
{
    const char *nm;
    size_t nl;
    uint32_t nd, type;
    char idx[48];
    snprintf(idx, sizeof idx, "tensor info %llu", (unsigned long long)i);
    SITS_CHECK(cur_str(c, "name", idx, &nm, &nl));
    if (nl == 0 || nl >= GGUF_MAX_NAME || memchr(nm, '\0', nl)) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: %s: name empty, over %d bytes or containing NUL", g->what, idx, GGUF_MAX_NAME - 1);
        return SITS_ERR_FORMAT;
    }
    if (!(t->name = dup_n(nm, nl))) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: out of memory", g->what);
        return SITS_ERR_NOMEM;
    }
    SITS_CHECK(cur_u32(c, "n_dims", t->name, &nd));
    if (nd > SITS_GGUF_MAX_DIMS) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s: %u dimensions, at most %d", g->what, t->name, nd, SITS_GGUF_MAX_DIMS);
        return SITS_ERR_FORMAT;
    }
    t->ndim = (int)nd;
    for (int d = 0; d < SITS_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < nd; d++) {
        uint64_t v;
        SITS_CHECK(cur_u64(c, "dimension", t->name, &v));
        if (v > (uint64_t)INT64_MAX) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s: dimension %u is negative", g->what, t->name, d);
            return SITS_ERR_FORMAT;
        }
        t->ne[d] = (int64_t)v;
    }
    SITS_CHECK(cur_u32(c, "ggml type", t->name, &type));
    if (type >= (uint32_t)N_GGML_TYPES || !ggml_types[type].name) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s: unknown ggml type %u", g->what, t->name, type);
        return SITS_ERR_FORMAT;
    }
    t->ggml_type = (int)type;
    SITS_CHECK(cur_u64(c, "offset", t->name, &t->offset));

    const ggml_type_info_t *ti = &ggml_types[type];
    if (t->ne[0] % ti->blck != 0) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s: %s: innermost dimension %lld is not a multiple of the block size %u",
                   g->what, t->name, ti->name, (long long)t->ne[0], ti->blck);
        return SITS_ERR_FORMAT;
    }
    uint64_t numel = 1, nbytes = (uint64_t)t->ne[0] / ti->blck;
    int ovf = __builtin_mul_overflow(nbytes, (uint64_t)ti->size, &nbytes);
    for (int d = 0; d < SITS_GGUF_MAX_DIMS; d++) {
        ovf |= __builtin_mul_overflow(numel, (uint64_t)t->ne[d], &numel);
        if (d > 0) ovf |= __builtin_mul_overflow(nbytes, (uint64_t)t->ne[d], &nbytes);
    }
    if (ovf || numel > (uint64_t)INT64_MAX || nbytes > SIZE_MAX) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s: shape [%lld %lld %lld %lld] x %s overflows", g->what, t->name,
                   (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3], ti->name);
        return SITS_ERR_FORMAT;
    }
    t->nbytes = (size_t)nbytes;
    return SITS_OK;
}

typedef struct { uint64_t begin, end; size_t idx; } span_t;

static int span_cmp(const void *a, const void *b)
{
    const span_t *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* File-order index sort by name: qsort_r is not C11, so sort (name pointer, index) pairs. */
typedef struct { const char *name; size_t idx; } name_idx_t;

static int name_idx_cmp(const void *a, const void *b)
{
    return strcmp(((const name_idx_t *)a)->name, ((const name_idx_t *)b)->name);
}

/* Data section bounds, alignment, overlap and name uniqueness of all tensors. */
static sits_status_t check_tensors(sits_gguf_t *g)
{
    sits_status_t s = SITS_OK;
    size_t n = g->n_tensors;
    uint64_t data_len = g->data_start <= g->len ? g->len - g->data_start : 0;
    span_t *spans = malloc((n ? n : 1) * sizeof *spans);
    name_idx_t *names = malloc((n ? n : 1) * sizeof *names);
    g->by_name = malloc((n ? n : 1) * sizeof *g->by_name);
    if (!spans || !names || !g->by_name) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: out of memory for %zu tensors", g->what, n);
        s = SITS_ERR_NOMEM;
        goto out;
    }
    if (n > 0 && g->data_start > g->len) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: truncated: the data section would start at %llu, past the end (%zu bytes)",
                   g->what, (unsigned long long)g->data_start, g->len);
        s = SITS_ERR_FORMAT;
        goto out;
    }
    size_t n_spans = 0;
    for (size_t i = 0; i < n; i++) {
        sits_gguf_tensor_t *t = &g->tensors[i];
        if (t->offset % g->alignment != 0) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s: offset %llu is not a multiple of the alignment %u", g->what,
                       t->name, (unsigned long long)t->offset, g->alignment);
            s = SITS_ERR_FORMAT;
            goto out;
        }
        if (t->offset > data_len || t->nbytes > data_len - t->offset) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s: data [%llu, +%zu) runs past the end of the data section (%llu bytes): "
                       "truncated?", g->what, t->name, (unsigned long long)t->offset, t->nbytes,
                       (unsigned long long)data_len);
            s = SITS_ERR_FORMAT;
            goto out;
        }
        t->data = g->base + g->data_start + t->offset;
        if (t->nbytes) spans[n_spans++] = (span_t){ t->offset, t->offset + t->nbytes, i };
        names[i] = (name_idx_t){ t->name, i };
    }
    qsort(spans, n_spans, sizeof *spans, span_cmp);
    for (size_t i = 1; i < n_spans; i++) {
        if (spans[i].begin < spans[i - 1].end) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s: data [%llu, %llu) overlaps tensor %s [%llu, %llu)", g->what,
                       g->tensors[spans[i].idx].name, (unsigned long long)spans[i].begin,
                       (unsigned long long)spans[i].end, g->tensors[spans[i - 1].idx].name,
                       (unsigned long long)spans[i - 1].begin, (unsigned long long)spans[i - 1].end);
            s = SITS_ERR_FORMAT;
            goto out;
        }
    }
    if (n > 1) qsort(names, n, sizeof *names, name_idx_cmp);
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && !strcmp(names[i - 1].name, names[i].name)) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s: present twice", g->what, names[i].name);
            s = SITS_ERR_FORMAT;
            goto out;
        }
        g->by_name[i] = names[i].idx;
    }
out:
    free(names);
    free(spans);
    return s;
}

sits_status_t sits_gguf_parse(const void *buf, size_t len, const char *what, sits_gguf_t **g_p)
{
    sits_status_t s = SITS_OK;
    sits_gguf_t *g = calloc(1, sizeof *g);
    if (!g || !(g->what = strdup(what ? what : "(buffer)"))) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: out of memory", what ? what : "(buffer)");
        free(g);
        return SITS_ERR_NOMEM;
    }
    g->base = buf;
    g->len = len;
    cur_t c = { buf, len, 0, g->what };
    uint32_t magic;
    uint64_t n_tensors, n_kv;

    SITS_CHECK_GOTO(cur_u32(&c, "magic", NULL, &magic), s, err);
    if (magic != GGUF_MAGIC) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: bad magic 0x%08x: not a GGUF file", g->what, magic);
        s = SITS_ERR_FORMAT;
        goto err;
    }
    SITS_CHECK_GOTO(cur_u32(&c, "version", NULL, &g->version), s, err);
    if (g->version != 2 && g->version != 3) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: GGUF version %u: only versions 2 and 3 are supported", g->what, g->version);
        s = g->version == 1 ? SITS_ERR_UNSUPPORTED : SITS_ERR_FORMAT;
        goto err;
    }
    SITS_CHECK_GOTO(cur_u64(&c, "tensor count", NULL, &n_tensors), s, err);
    SITS_CHECK_GOTO(cur_u64(&c, "metadata count", NULL, &n_kv), s, err);
    SITS_CHECK_GOTO(parse_kvs(g, &c, n_kv), s, err);
    SITS_CHECK_GOTO(read_alignment(g), s, err);

    /* smallest tensor info: 8 + 1 name, 4 n_dims, 4 type, 8 offset */
    if (n_tensors > cur_left(&c) / 25) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: %llu tensor infos cannot fit in the %zu bytes left", g->what,
                   (unsigned long long)n_tensors, cur_left(&c));
        s = SITS_ERR_FORMAT;
        goto err;
    }
    g->tensors = calloc(n_tensors ? (size_t)n_tensors : 1, sizeof *g->tensors);
    if (!g->tensors) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: out of memory for %llu tensors", g->what, (unsigned long long)n_tensors);
        s = SITS_ERR_NOMEM;
        goto err;
    }
    for (uint64_t i = 0; i < n_tensors; i++) {
        g->n_tensors++; /* counted first so that close frees a partly filled name */
        SITS_CHECK_GOTO(parse_tensor_info(g, &c, i, &g->tensors[i]), s, err);
    }
    g->data_start = ((uint64_t)c.pos + g->alignment - 1) / g->alignment * g->alignment;
    SITS_CHECK_GOTO(check_tensors(g), s, err);
    *g_p = g;
    return SITS_OK;
err:
    sits_gguf_close(g);
    return s;
}

sits_status_t sits_gguf_open(const char *path, sits_gguf_t **g_p)
{
    sits_status_t s;
    struct stat sb;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: cannot open: %s", path, strerror(errno));
        return errno == ENOENT ? SITS_ERR_NOT_FOUND : SITS_ERR_IO;
    }
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: not a readable regular file", path);
        close(fd);
        return SITS_ERR_IO;
    }
    size_t len = (size_t)sb.st_size;
    if (len < 24) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: truncated: %zu bytes, a GGUF header needs 24", path, len);
        close(fd);
        return SITS_ERR_FORMAT;
    }
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: mmap of %zu bytes: %s", path, len, strerror(errno));
        return SITS_ERR_IO;
    }
    sits_gguf_t *g = NULL;
    s = sits_gguf_parse(map, len, path, &g);
    if (s != SITS_OK) {
        munmap(map, len);
        return s;
    }
    g->map = map;
    g->map_len = len;
    *g_p = g;
    return SITS_OK;
}

/* ---- accessors ------------------------------------------------------------------------------- */

const char *sits_gguf_path(const sits_gguf_t *g) { return g->what; }
uint32_t sits_gguf_version(const sits_gguf_t *g) { return g->version; }
uint32_t sits_gguf_alignment(const sits_gguf_t *g) { return g->alignment; }
size_t sits_gguf_kv_count(const sits_gguf_t *g) { return g->n_kv; }
const sits_gguf_kv_t *sits_gguf_kv_at(const sits_gguf_t *g, size_t i) { return i < g->n_kv ? &g->kvs[i].pub : NULL; }

const sits_gguf_kv_t *sits_gguf_kv_find(const sits_gguf_t *g, const char *key)
{
    size_t lo = 0, hi = g->n_kv;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(key, g->kvs[mid].pub.key);
        if (c == 0) return &g->kvs[mid].pub;
        if (c < 0) hi = mid;
        else lo = mid + 1;
    }
    return NULL;
}

size_t sits_gguf_tensor_count(const sits_gguf_t *g) { return g->n_tensors; }
const sits_gguf_tensor_t *sits_gguf_tensor_at(const sits_gguf_t *g, size_t i)
{
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const sits_gguf_tensor_t *sits_gguf_tensor_find(const sits_gguf_t *g, const char *name)
{
    size_t lo = 0, hi = g->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const sits_gguf_tensor_t *t = &g->tensors[g->by_name[mid]];
        int c = strcmp(name, t->name);
        if (c == 0) return t;
        if (c < 0) hi = mid;
        else lo = mid + 1;
    }
    return NULL;
}

/* Raw bytes of scalar element i (not for strings). */
static const unsigned char *kv_elem(const sits_gguf_kv_t *kv, uint64_t i)
{
    size_t es = vtype_size(kv->elem_type);
    if (es == 0 || i >= kv->n) return NULL;
    return kv->raw + (size_t)i * es;
}

sits_status_t sits_gguf_kv_get_i64(const sits_gguf_kv_t *kv, uint64_t i, int64_t *v_p)
{
    const unsigned char *p = kv_elem(kv, i);
    if (!p) return SITS_ERR_INVALID;
    switch (kv->elem_type) {
    case SITS_GGUF_UINT8: case SITS_GGUF_BOOL: *v_p = p[0]; return SITS_OK;
    case SITS_GGUF_INT8: *v_p = (int8_t)p[0]; return SITS_OK;
    case SITS_GGUF_UINT16: *v_p = sits_le_get16(p); return SITS_OK;
    case SITS_GGUF_INT16: *v_p = (int16_t)sits_le_get16(p); return SITS_OK;
    case SITS_GGUF_UINT32: *v_p = sits_le_get32(p); return SITS_OK;
    case SITS_GGUF_INT32: *v_p = (int32_t)sits_le_get32(p); return SITS_OK;
    case SITS_GGUF_INT64: *v_p = (int64_t)sits_le_get64(p); return SITS_OK;
    case SITS_GGUF_UINT64:
        if (sits_le_get64(p) > (uint64_t)INT64_MAX) return SITS_ERR_INVALID;
        *v_p = (int64_t)sits_le_get64(p);
        return SITS_OK;
    default: return SITS_ERR_INVALID;
    }
}

sits_status_t sits_gguf_kv_get_u64(const sits_gguf_kv_t *kv, uint64_t i, uint64_t *v_p)
{
    const unsigned char *p = kv_elem(kv, i);
    if (p && kv->elem_type == SITS_GGUF_UINT64) {
        *v_p = sits_le_get64(p);
        return SITS_OK;
    }
    int64_t v;
    SITS_CHECK(sits_gguf_kv_get_i64(kv, i, &v));
    if (v < 0) return SITS_ERR_INVALID;
    *v_p = (uint64_t)v;
    return SITS_OK;
}

sits_status_t sits_gguf_kv_get_f64(const sits_gguf_kv_t *kv, uint64_t i, double *v_p)
{
    const unsigned char *p = kv_elem(kv, i);
    if (!p) return SITS_ERR_INVALID;
    if (kv->elem_type == SITS_GGUF_FLOAT32) {
        uint32_t u = sits_le_get32(p);
        float f;
        memcpy(&f, &u, 4);
        *v_p = f;
        return SITS_OK;
    }
    if (kv->elem_type == SITS_GGUF_FLOAT64) {
        uint64_t u = sits_le_get64(p);
        memcpy(v_p, &u, 8);
        return SITS_OK;
    }
    if (kv->elem_type == SITS_GGUF_UINT64) {
        *v_p = (double)sits_le_get64(p);
        return SITS_OK;
    }
    int64_t v;
    SITS_CHECK(sits_gguf_kv_get_i64(kv, i, &v));
    *v_p = (double)v;
    return SITS_OK;
}

sits_status_t sits_gguf_kv_get_str(const sits_gguf_t *g, const sits_gguf_kv_t *kv, uint64_t i, const char **s_p,
                                   size_t *len_p)
{
    (void)g;
    const unsigned char *p;
    if (kv->elem_type != SITS_GGUF_STRING || i >= kv->n) return SITS_ERR_INVALID;
    if (kv->type == SITS_GGUF_ARRAY) p = kv->raw + ((const gguf_kv_t *)kv)->str_off[i];
    else p = kv->raw;
    *len_p = (size_t)sits_le_get64(p); /* bounds checked at parse */
    *s_p = (const char *)p + 8;
    return SITS_OK;
}

/* ---- dequantisation -------------------------------------------------------------------------- */

static float f16_at(const unsigned char *p) { return sits_f16_to_f32(sits_le_get16(p)); }

/* The K-quants (256 values a super-block), as gguf-py's quants.py computes them: every product and difference in fp32,
 * one rounding each (-std=c11: no contraction into FMAs). Element e of a super-block: its sub-block (16 or 32 values)
 * scale and the bits of its quant, at the byte and shift numpy's reshapes give it. */

/* Q4_K / Q5_K's 12 bytes of 6-bit scales and mins of 8 sub-blocks (Q4_K.get_scale_min) */
static void k_scale_min(const unsigned char *s, int sc[8], int mn[8])
{
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 0x3f;
        mn[j] = s[4 + j] & 0x3f;
        sc[4 + j] = (s[8 + j] & 0x0f) | ((s[j] >> 2) & 0x30);
        mn[4 + j] = (s[8 + j] >> 4) | ((s[4 + j] >> 2) & 0x30);
    }
}

static void deq_q2_k(const unsigned char *p, float *out)   /* scales[16] qs[64] d dmin */
{
    const float d = f16_at(p + 80), dmin = f16_at(p + 82);
    for (int e = 0; e < 256; e++) {
        const int g = e / 16, h = e / 128, sh = (e % 128) / 32, b = e % 32;
        const float dl = d * (float)(p[g] & 0x0f), ml = dmin * (float)(p[g] >> 4);
        const float q = (float)((p[16 + 32 * h + b] >> (2 * sh)) & 3);
        const float x = dl * q;
        out[e] = x - ml;
    }
}

static void deq_q3_k(const unsigned char *p, float *out)   /* hmask[32] qs[64] scales[12] d */
{
    const unsigned char *hm = p, *qs = p + 32, *s = p + 96;
    const float d = f16_at(p + 108);
    for (int e = 0; e < 256; e++) {
        const int g = e / 16;
        const int ls = (g < 8 ? s[g] : s[g - 8] >> 4) & 0x0f, hs = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
        const float dl = d * (float)((int8_t)(uint8_t)(ls | (hs << 4)) - 32);
        const int h = e / 128, sh = (e % 128) / 32, b = e % 32;
        const int ql = (qs[32 * h + b] >> (2 * sh)) & 3, qh = ((hm[b] >> (e / 32)) & 1) ^ 1;
        out[e] = dl * (float)(ql - (qh << 2));
    }
}

static void deq_q45_k(const unsigned char *p, float *out, int five)   /* d dmin scales[12] [qh[32]] qs[128] */
{
    const float d = f16_at(p), dmin = f16_at(p + 2);
    const unsigned char *qh = p + 16, *qs = p + (five ? 48 : 16);
    int sc[8], mn[8];
    k_scale_min(p + 4, sc, mn);
    for (int e = 0; e < 256; e++) {
        const int g = e / 32, b = e % 32;
        const float dg = d * (float)sc[g], mg = dmin * (float)mn[g];
        int q = (qs[32 * (g / 2) + b] >> (4 * (g % 2))) & 0x0f;
        if (five) q |= ((qh[b] >> g) & 1) << 4;
        const float x = dg * (float)q;
        out[e] = x - mg;
    }
}

static void deq_q6_k(const unsigned char *p, float *out)   /* ql[128] qh[64] scales[16] (int8) d */
{
    const unsigned char *ql = p, *qh = p + 128;
    const float d = f16_at(p + 208);
    for (int e = 0; e < 256; e++) {
        const int h = e / 128, r = e % 128;
        const float dg = d * (float)(int8_t)p[192 + e / 16];
        const int lo = (ql[64 * h + r % 64] >> (4 * (r / 64))) & 0x0f, hi = (qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
        out[e] = dg * (float)((lo | (hi << 4)) - 32);
    }
}

sits_status_t sits_gguf_dequantize(const sits_gguf_t *g, const sits_gguf_tensor_t *t, float *out)
{
    const unsigned char *p = t->data;
    uint64_t n = sits_gguf_tensor_numel(t);
    switch (t->ggml_type) {
    case SITS_GGML_F32:
        memcpy(out, p, (size_t)n * 4);
        return SITS_OK;
    case SITS_GGML_F16:
        for (uint64_t i = 0; i < n; i++) out[i] = f16_at(p + 2 * i);
        return SITS_OK;
    case SITS_GGML_BF16:
        for (uint64_t i = 0; i < n; i++) out[i] = sits_bf16_to_f32(sits_le_get16(p + 2 * i));
        return SITS_OK;
    case SITS_GGML_Q8_0: /* {f16 d; int8 q[32]}: x = q * d */
        for (uint64_t b = 0; b < n / 32; b++, p += 34) {
            float d = f16_at(p);
            for (int j = 0; j < 32; j++) out[b * 32 + j] = (float)(int8_t)p[2 + j] * d;
        }
        return SITS_OK;
    case SITS_GGML_Q4_0: /* {f16 d; u8 qs[16]}: low nibbles are elements 0..15, high 16..31; x = d * (q - 8) */
        for (uint64_t b = 0; b < n / 32; b++, p += 18) {
            float d = f16_at(p);
            for (int j = 0; j < 16; j++) {
                out[b * 32 + j] = d * (float)((p[2 + j] & 0x0f) - 8);
                out[b * 32 + 16 + j] = d * (float)((p[2 + j] >> 4) - 8);
            }
        }
        return SITS_OK;
    case SITS_GGML_Q4_1: /* {f16 d; f16 m; u8 qs[16]}: x = (d * q) + m, two roundings */
        for (uint64_t b = 0; b < n / 32; b++, p += 20) {
            float d = f16_at(p), m = f16_at(p + 2);
            for (int j = 0; j < 16; j++) {
                float lo = d * (float)(p[4 + j] & 0x0f), hi = d * (float)(p[4 + j] >> 4);
                out[b * 32 + j] = lo + m;
                out[b * 32 + 16 + j] = hi + m;
            }
        }
        return SITS_OK;
    case SITS_GGML_Q5_0: case SITS_GGML_Q5_1: /* {f16 d; [f16 m;] u32 qh; u8 qs[16]}: 5-bit q = nibble | bit j of qh << 4 */
        for (uint64_t b = 0; b < n / 32; b++) {
            const int one = t->ggml_type == SITS_GGML_Q5_1, hd = one ? 4 : 2;
            const float d = f16_at(p), m = one ? f16_at(p + 2) : 0.0f;
            const uint32_t qh = sits_le_get32(p + hd);
            for (int j = 0; j < 32; j++) {
                const int q = ((p[hd + 4 + j % 16] >> (j < 16 ? 0 : 4)) & 0x0f) | (int)(((qh >> j) & 1) << 4);
                if (one) {
                    const float x = d * (float)q;   /* (d * q) + m, two roundings */
                    out[b * 32 + j] = x + m;
                } else {
                    out[b * 32 + j] = d * (float)(q - 16);
                }
            }
            p += one ? 24 : 22;
        }
        return SITS_OK;
    case SITS_GGML_Q2_K: case SITS_GGML_Q3_K: case SITS_GGML_Q4_K: case SITS_GGML_Q5_K: case SITS_GGML_Q6_K: {
        const uint32_t bytes = ggml_types[t->ggml_type].size;
        for (uint64_t b = 0; b < n / 256; b++, p += bytes) {
            float *o = out + b * 256;
            switch (t->ggml_type) {
            case SITS_GGML_Q2_K: deq_q2_k(p, o); break;
            case SITS_GGML_Q3_K: deq_q3_k(p, o); break;
            case SITS_GGML_Q4_K: deq_q45_k(p, o, 0); break;
            case SITS_GGML_Q5_K: deq_q45_k(p, o, 1); break;
            default: deq_q6_k(p, o); break;
            }
        }
        return SITS_OK;
    }
    default:
        SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s: ggml type %s is not supported (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, "
                   "Q5_1, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K are)", g ? g->what : "gguf", t->name, sits_ggml_type_name(t->ggml_type));
        return SITS_ERR_UNSUPPORTED;
    }
}

/* ---- llama / qwen2 / qwen3 / gemma2 / gemma3 / phi3 -> HF names ------------------------------------- */

sits_status_t sits_gguf_hf_name(const char *name, char *buf, size_t len)
{
    return sits_gguf_hf_name_arch("llama", name, buf, len);
}

sits_status_t sits_gguf_hf_name_arch(const char *arch, const char *name, char *buf, size_t len)
{
    static const struct { const char *gguf, *hf; } gemma[] = {   /* [gguf gemma] checked first for gemma2 / gemma3 */
        { "ffn_norm", "pre_feedforward_layernorm" }, { "post_attention_norm", "post_attention_layernorm" },
        { "post_ffw_norm", "post_feedforward_layernorm" },
    };
    const int is_gemma = !strcmp(arch, "gemma2") || !strcmp(arch, "gemma3");
    static const struct { const char *gguf, *hf; } phi3[] = {   /* [gguf phi3] the fused linears, as Phi-3's checkpoints have them */
        { "attn_qkv", "self_attn.qkv_proj" }, { "ffn_up", "mlp.gate_up_proj" },
    };
    const int is_phi3 = !strcmp(arch, "phi3");
    static const struct { const char *gguf, *hf; } moe[] = {   /* [gguf moe] qwen3moe: the router and the experts' 3D tensors */
        { "ffn_gate_inp", "mlp.gate" },            { "ffn_gate_exps", "mlp.experts.*.gate_proj" },
        { "ffn_up_exps", "mlp.experts.*.up_proj" }, { "ffn_down_exps", "mlp.experts.*.down_proj" },
    };
    const int is_moe = !strcmp(arch, "qwen3moe");
    static const struct { const char *gguf, *hf; } top[] = {
        { "token_embd", "model.embed_tokens" }, { "output_norm", "model.norm" }, { "output", "lm_head" },
    };
    static const struct { const char *gguf, *hf; } blk[] = {
        { "attn_norm", "input_layernorm" },      { "attn_q", "self_attn.q_proj" },
        { "attn_k", "self_attn.k_proj" },         { "attn_v", "self_attn.v_proj" },
        { "attn_output", "self_attn.o_proj" },    { "ffn_norm", "post_attention_layernorm" },
        { "ffn_gate", "mlp.gate_proj" },          { "ffn_up", "mlp.up_proj" },
        { "ffn_down", "mlp.down_proj" },
        { "attn_q_norm", "self_attn.q_norm" },    { "attn_k_norm", "self_attn.k_norm" },   /* [gguf qwen] qwen3 */
    };
    const char *dot = strrchr(name, '.');
    if (!dot || (strcmp(dot, ".weight") != 0 && strcmp(dot, ".bias") != 0)) return SITS_ERR_NOT_FOUND;
    size_t stem = (size_t)(dot - name);
    int n;
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++) {
        if (strlen(top[i].gguf) == stem && !strncmp(name, top[i].gguf, stem)) {
            n = snprintf(buf, len, "%s%s", top[i].hf, dot);
            return n >= 0 && (size_t)n < len ? SITS_OK : SITS_ERR_INVALID;
        }
    }
    if (strncmp(name, "blk.", 4) != 0) return SITS_ERR_NOT_FOUND;
    const char *p = name + 4, *q = p;
    while (*q >= '0' && *q <= '9') q++;
    if (q == p || q - p > 6 || *q != '.') return SITS_ERR_NOT_FOUND;
    const char *part = q + 1;
    size_t plen = (size_t)(dot - part);
    for (size_t i = 0; is_gemma && i < sizeof gemma / sizeof gemma[0]; i++) {
        if (strlen(gemma[i].gguf) == plen && !strncmp(part, gemma[i].gguf, plen)) {
            n = snprintf(buf, len, "model.layers.%.*s.%s%s", (int)(q - p), p, gemma[i].hf, dot);
            return n >= 0 && (size_t)n < len ? SITS_OK : SITS_ERR_INVALID;
        }
    }
    for (size_t i = 0; is_phi3 && i < sizeof phi3 / sizeof phi3[0]; i++) {
        if (strlen(phi3[i].gguf) == plen && !strncmp(part, phi3[i].gguf, plen)) {
            n = snprintf(buf, len, "model.layers.%.*s.%s%s", (int)(q - p), p, phi3[i].hf, dot);
            return n >= 0 && (size_t)n < len ? SITS_OK : SITS_ERR_INVALID;
        }
    }
    for (size_t i = 0; is_moe && i < sizeof moe / sizeof moe[0]; i++) {
        if (strlen(moe[i].gguf) == plen && !strncmp(part, moe[i].gguf, plen)) {
            n = snprintf(buf, len, "model.layers.%.*s.%s%s", (int)(q - p), p, moe[i].hf, dot);
            return n >= 0 && (size_t)n < len ? SITS_OK : SITS_ERR_INVALID;
        }
    }
    for (size_t i = 0; i < sizeof blk / sizeof blk[0]; i++) {
        if (strlen(blk[i].gguf) == plen && !strncmp(part, blk[i].gguf, plen)) {
            n = snprintf(buf, len, "model.layers.%.*s.%s%s", (int)(q - p), p, blk[i].hf, dot);
            return n >= 0 && (size_t)n < len ? SITS_OK : SITS_ERR_INVALID;
        }
    }
    return SITS_ERR_NOT_FOUND;
}

sits_status_t sits_gguf_unpermute_qk(float *w, int64_t rows, int64_t cols, int64_t n_head, float *tmp)
{
    if (n_head <= 0 || rows % n_head != 0 || (rows / n_head) % 2 != 0) {
        SITS_ERROR(SITS_SUB_MODEL, "cannot undo the q/k permutation: %lld rows for %lld heads", (long long)rows,
                   (long long)n_head);
        return SITS_ERR_INVALID;
    }
    if (cols == 0) return SITS_OK; /* nothing to move (and rows may be huge: found by fuzz_gguf) */
    int64_t hd = rows / n_head, half = hd / 2;
    size_t row_bytes = (size_t)cols * sizeof *w;
    memcpy(tmp, w, (size_t)rows * row_bytes);
    for (int64_t h = 0; h < n_head; h++)
        for (int64_t j = 0; j < 2; j++)
            for (int64_t i = 0; i < half; i++)
                memcpy(w + (h * hd + j * half + i) * cols, tmp + (h * hd + 2 * i + j) * cols, row_bytes);
    return SITS_OK;
}
