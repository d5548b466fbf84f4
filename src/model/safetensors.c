/* safetensors.c -- mmapped safetensors checkpoints (one file, several, or a sharded set with
 * model.safetensors.index.json); see safetensors.h for the format and what is validated.
 *
 * A sits_st_t holds every tensor of every file, sorted by name (sits_st_find is a binary search;
 * checkpoints have ~1000 tensors), and the read-only mappings that the data pointers point into.
 * Invariants after a successful open/parse: names unique; for each tensor
 * data + nbytes lies inside its file's data area and nbytes == prod(shape) * dtype size; no two
 * tensors of one file overlap. Allocations before validation are proportional to the header
 * size (<= SITS_ST_MAX_HEADER) or the number of tensors, never to the data size. */
#include "model/safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <jansson.h>

#include "model/gguf.h"
#include "util/log.h"

#define ST_INDEX_NAME "model.safetensors.index.json"
#define ST_INDEX_MAX_BYTES (64u << 20)

typedef struct {
    char *path;       /* as named in messages and in sits_st_tensor_t.file */
    void *map;        /* NULL for a caller-owned buffer (sits_st_parse) or a GGUF */
    size_t map_len;
    float *owned;     /* a GGUF's tensors dequantised to fp32 (the tensors point into it); else NULL */
} st_file_t;

struct sits_st {
    sits_st_tensor_t *tensors;   /* sorted by name once complete */
    size_t n, cap;
    st_file_t *files;
    size_t n_files, cap_files;
    size_t total_bytes;
};

/* dtypes of newer safetensors versions that we know of but cannot hold. */
static const char *const st_newer_dtypes[] = { "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2", "F8_E4M3FNUZ",
                                               "F8_E5M2FNUZ", "C64", "C128" };

static sits_status_t st_alloc(sits_st_t **st_p)
{
    sits_st_t *st = calloc(1, sizeof *st);
    if (!st) {
        SITS_ERROR(SITS_SUB_MODEL, "out of memory allocating a safetensors handle");
        return SITS_ERR_NOMEM;
    }
    *st_p = st;
    return SITS_OK;
}

void sits_st_close(sits_st_t *st)
{
    if (!st) return;
    for (size_t i = 0; i < st->n; i++) free(st->tensors[i].name);
    free(st->tensors);
    for (size_t i = 0; i < st->n_files; i++) {
        if (st->files[i].map) munmap(st->files[i].map, st->files[i].map_len);
        free(st->files[i].owned);
        free(st->files[i].path);
    }
    free(st->files);
    free(st);
}

/* Register a file (its path is kept for messages and tensor.file); takes ownership of map. */
static sits_status_t st_add_file(sits_st_t *st, const char *path, void *map, size_t map_len, size_t *idx_p)
{
    if (st->n_files == st->cap_files) {
        size_t cap = st->cap_files ? 2 * st->cap_files : 4;
        st_file_t *f = realloc(st->files, cap * sizeof *f);
        if (!f) goto err_nomem;
        st->files = f;
        st->cap_files = cap;
    }
    char *p = strdup(path);
    if (!p) goto err_nomem;
    st->files[st->n_files] = (st_file_t){ p, map, map_len, NULL };
    *idx_p = st->n_files++;
    return SITS_OK;
err_nomem:
    SITS_ERROR(SITS_SUB_MODEL, "%s: out of memory", path);
    return SITS_ERR_NOMEM;
}

static sits_status_t st_reserve(sits_st_t *st, size_t extra, const char *what)
{
    if (st->n + extra <= st->cap) return SITS_OK;
    size_t cap = st->cap ? st->cap : 64;
    while (cap < st->n + extra) cap *= 2;
    sits_st_tensor_t *t = realloc(st->tensors, cap * sizeof *t);
    if (!t) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: out of memory for %zu tensor entries", what, cap);
        return SITS_ERR_NOMEM;
    }
    st->tensors = t;
    st->cap = cap;
    return SITS_OK;
}

typedef struct { uint64_t begin, end; size_t idx; } st_span_t;

static int st_span_cmp(const void *a, const void *b)
{
    const st_span_t *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* One header entry -> tensor t (name not yet set). */
static sits_status_t st_parse_entry(const char *what, const char *name, const json_t *info, const unsigned char *data,
                                    uint64_t data_len, sits_st_tensor_t *t, uint64_t *begin_p, uint64_t *end_p)
{
    if (!json_is_object(info)) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s: entry is not a JSON object", what, name);
        return SITS_ERR_FORMAT;
    }
    const json_t *dt = json_object_get(info, "dtype");
    if (!json_is_string(dt)) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s: dtype missing or not a string", what, name);
        return SITS_ERR_FORMAT;
    }
    int dti = sits_dtype_from_name(json_string_value(dt));
    if (dti < 0) {
        for (size_t i = 0; i < sizeof st_newer_dtypes / sizeof st_newer_dtypes[0]; i++) {
            if (!strcmp(json_string_value(dt), st_newer_dtypes[i])) {
                SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s: dtype %s is not supported", what, name, st_newer_dtypes[i]);
                return SITS_ERR_UNSUPPORTED;
            }
        }
        SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s: unknown dtype \"%s\"", what, name, json_string_value(dt));
        return SITS_ERR_FORMAT;
    }
    t->dtype = (sits_dtype_t)dti;

    const json_t *shape = json_object_get(info, "shape");
    if (!json_is_array(shape)) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s: shape missing or not a list", what, name);
        return SITS_ERR_FORMAT;
    }
    if (json_array_size(shape) > SITS_ST_MAX_DIMS) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s: %zu dimensions, at most %d supported", what, name,
                   json_array_size(shape), SITS_ST_MAX_DIMS);
        return SITS_ERR_FORMAT;
    }
    t->ndim = (int)json_array_size(shape);
    uint64_t numel = 1;
    int overflow = 0;
    for (int d = 0; d < t->ndim; d++) {
        const json_t *v = json_array_get(shape, (size_t)d);
        if (!json_is_integer(v) || json_integer_value(v) < 0) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s: shape[%d] is not a non-negative integer", what, name, d);
            return SITS_ERR_FORMAT;
        }
        t->shape[d] = (int64_t)json_integer_value(v);
        overflow |= __builtin_mul_overflow(numel, (uint64_t)t->shape[d], &numel);
    }
    uint64_t nbytes = 0;
    overflow |= __builtin_mul_overflow(numel, (uint64_t)sits_dtype_size(t->dtype), &nbytes);

    const json_t *offs = json_object_get(info, "data_offsets");
    const json_t *b = json_array_get(offs, 0), *e = json_array_get(offs, 1);
    if (!json_is_array(offs) || json_array_size(offs) != 2 || !json_is_integer(b) || !json_is_integer(e)) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s: data_offsets is not a list of two integers", what, name);
        return SITS_ERR_FORMAT;
    }
    if (json_integer_value(b) < 0 || json_integer_value(e) < json_integer_value(b)) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s: data_offsets [%lld, %lld]: need 0 <= begin <= end", what, name,
                   (long long)json_integer_value(b), (long long)json_integer_value(e));
        return SITS_ERR_FORMAT;
    }
    uint64_t begin = (uint64_t)json_integer_value(b), end = (uint64_t)json_integer_value(e);
    if (end > data_len) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s: data_offsets [%llu, %llu] past the end of the data area "
                   "(%llu bytes)", what, name, (unsigned long long)begin, (unsigned long long)end,
                   (unsigned long long)data_len);
        return SITS_ERR_FORMAT;
    }
    if (overflow) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s: shape x %s overflows 64 bits", what, name,
                   sits_dtype_name(t->dtype));
        return SITS_ERR_FORMAT;
    }
    if (end - begin != nbytes) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s: %llu data bytes but shape x %s needs %llu", what, name,
                   (unsigned long long)(end - begin), sits_dtype_name(t->dtype), (unsigned long long)nbytes);
        return SITS_ERR_FORMAT;
    }
    t->data = data + begin;
    t->nbytes = (size_t)nbytes;
    *begin_p = begin;
    *end_p = end;
    return SITS_OK;
}

/* Validate one file image (len bytes at buf) and append its tensors to st (unsorted). */
static sits_status_t st_parse_into(sits_st_t *st, const void *buf, size_t len, size_t file_idx)
{
    const char *what = st->files[file_idx].path;
    const unsigned char *p = buf;
    sits_status_t st_ = SITS_OK;
    st_span_t *spans = NULL;
    size_t n_before = st->n, n_spans = 0;

    if (len < 8) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: truncated: %zu bytes, no room for the 8-byte header length", what, len);
        return SITS_ERR_FORMAT;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | p[i]; /* little-endian */
    if (hlen > SITS_ST_MAX_HEADER) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: header length %llu exceeds the %llu-byte limit", what,
                   (unsigned long long)hlen, SITS_ST_MAX_HEADER);
        return SITS_ERR_FORMAT;
    }
    if (hlen > len - 8) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: header length %llu runs past the end of the file (%zu bytes): truncated?",
                   what, (unsigned long long)hlen, len);
        return SITS_ERR_FORMAT;
    }
    if (hlen < 8) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: header length %llu is below the minimum of 8", what, (unsigned long long)hlen);
        return SITS_ERR_FORMAT;
    }
    const unsigned char *data = p + 8 + hlen;
    const uint64_t data_len = (uint64_t)len - 8 - hlen;

    json_error_t jerr;
    json_t *root = json_loadb((const char *)p + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: header is not valid JSON (byte %d): %s", what, jerr.position, jerr.text);
        return SITS_ERR_FORMAT;
    }
    if (!json_is_object(root)) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: header is JSON but not an object", what);
        st_ = SITS_ERR_FORMAT;
        goto out_decref;
    }
    size_t n_entries = json_object_size(root);
    SITS_CHECK_GOTO(st_reserve(st, n_entries, what), st_, out_decref);
    spans = malloc((n_entries ? n_entries : 1) * sizeof *spans);
    if (!spans) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: out of memory for %zu tensor spans", what, n_entries);
        st_ = SITS_ERR_NOMEM;
        goto out_decref;
    }

    const char *name;
    const json_t *info;
    json_object_foreach((json_t *)root, name, info) {
        if (!strcmp(name, "__metadata__")) continue;
        sits_st_tensor_t *t = &st->tensors[st->n];
        memset(t, 0, sizeof *t);
        uint64_t b, e;
        SITS_CHECK_GOTO(st_parse_entry(what, name, info, data, data_len, t, &b, &e), st_, err_unwind);
        t->name = strdup(name);
        if (!t->name) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: out of memory", what);
            st_ = SITS_ERR_NOMEM;
            goto err_unwind;
        }
        t->file = st->files[file_idx].path;
        if (e > b) spans[n_spans++] = (st_span_t){ b, e, st->n };
        st->n++;
    }

    /* Sorted by begin, spans that do not overlap have each begin >= the previous end. */
    qsort(spans, n_spans, sizeof *spans, st_span_cmp);
    for (size_t i = 1; i < n_spans; i++) {
        const st_span_t *a = &spans[i - 1], *c = &spans[i];
        if (c->begin < a->end) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s: data [%llu, %llu) overlaps tensor %s [%llu, %llu)", what,
                       st->tensors[c->idx].name, (unsigned long long)c->begin, (unsigned long long)c->end,
                       st->tensors[a->idx].name, (unsigned long long)a->begin, (unsigned long long)a->end);
            st_ = SITS_ERR_FORMAT;
            goto err_unwind;
        }
    }
    free(spans);
    json_decref(root);
    return SITS_OK;

err_unwind:
    for (size_t i = n_before; i < st->n; i++) free(st->tensors[i].name);
    st->n = n_before;
    free(spans);
out_decref:
    json_decref(root);
    return st_;
}

static int st_tensor_cmp(const void *a, const void *b)
{
    return strcmp(((const sits_st_tensor_t *)a)->name, ((const sits_st_tensor_t *)b)->name);
}

/* Sort by name, refuse duplicates, total the bytes. */
static sits_status_t st_finish(sits_st_t *st)
{
    if (st->n > 1) qsort(st->tensors, st->n, sizeof *st->tensors, st_tensor_cmp);
    st->total_bytes = 0;
    for (size_t i = 0; i < st->n; i++) {
        if (i > 0 && !strcmp(st->tensors[i - 1].name, st->tensors[i].name)) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s: also present in %s", st->tensors[i].file, st->tensors[i].name,
                       st->tensors[i - 1].file);
            return SITS_ERR_FORMAT;
        }
        st->total_bytes += st->tensors[i].nbytes;
    }
    return SITS_OK;
}

sits_status_t sits_st_parse(const void *buf, size_t len, const char *what, sits_st_t **st_p)
{
    sits_st_t *st = NULL;
    size_t fi;
    sits_status_t s;
    SITS_CHECK(st_alloc(&st));
    SITS_CHECK_GOTO(st_add_file(st, what ? what : "(buffer)", NULL, 0, &fi), s, err_close);
    SITS_CHECK_GOTO(st_parse_into(st, buf, len, fi), s, err_close);
    SITS_CHECK_GOTO(st_finish(st), s, err_close);
    *st_p = st;
    return SITS_OK;
err_close:
    sits_st_close(st);
    return s;
}

/* mmap path and append its tensors to st. */
static sits_status_t st_map_into(sits_st_t *st, const char *path)
{
    sits_status_t s = SITS_OK;
    struct stat sb;
    void *map = NULL;
    size_t fi;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: cannot open: %s", path, strerror(errno));
        return errno == ENOENT ? SITS_ERR_NOT_FOUND : SITS_ERR_IO;
    }
    if (fstat(fd, &sb) != 0) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: fstat: %s", path, strerror(errno));
        s = SITS_ERR_IO;
        goto out_close;
    }
    if (!S_ISREG(sb.st_mode)) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: not a regular file", path);
        s = SITS_ERR_IO;
        goto out_close;
    }
    size_t len = (size_t)sb.st_size;
    if (len < 8) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: truncated: %zu bytes, no room for the 8-byte header length", path, len);
        s = SITS_ERR_FORMAT;
        goto out_close;
    }
    map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: mmap of %zu bytes: %s", path, len, strerror(errno));
        s = SITS_ERR_IO;
        goto out_close;
    }
    s = st_add_file(st, path, map, len, &fi);
    if (s != SITS_OK) {
        munmap(map, len);
        goto out_close;
    }
    s = st_parse_into(st, map, len, fi); /* on failure the mapping is released with st */
out_close:
    close(fd);
    return s;
}

sits_status_t sits_st_open_file(const char *path, sits_st_t **st_p)
{
    sits_st_t *st = NULL;
    sits_status_t s;
    SITS_CHECK(st_alloc(&st));
    SITS_CHECK_GOTO(st_map_into(st, path), s, err_close);
    SITS_CHECK_GOTO(st_finish(st), s, err_close);
    SITS_INFO(SITS_SUB_MODEL, "%s: %zu tensors, %zu bytes", path, st->n, st->total_bytes);
    *st_p = st;
    return SITS_OK;
err_close:
    sits_st_close(st);
    return s;
}

/* The architecture (into arch_out), and for llama the numbers the q/k un-permutation needs, from the GGUF metadata (as
 * transformers reads them: llama.attention.head_count, .head_count_kv defaulting to it). [gguf qwen] qwen2 / qwen3,
 * [gguf gemma] gemma2 / gemma3 and [gguf phi3] phi3 GGUFs keep q / k rows as transformers has them (*permute_p 0: no
 * heads needed). */
static sits_status_t gguf_heads(const sits_gguf_t *g, char arch_out[16], int *permute_p, int64_t *n_head_p, int64_t *n_kv_p)
{
    const char *path = sits_gguf_path(g), *arch = NULL;
    size_t alen = 0;
    const sits_gguf_kv_t *a = sits_gguf_kv_find(g, "general.architecture");
    if (!a || sits_gguf_kv_get_str(g, a, 0, &arch, &alen) != SITS_OK) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: key general.architecture: missing or not a string", path);
        return SITS_ERR_FORMAT;
    }
    static const char *const known[] = { "llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3", "qwen3moe" };
    size_t ai;
    for (ai = 0; ai < sizeof known / sizeof known[0] && !(alen == strlen(known[ai]) && !memcmp(arch, known[ai], alen)); ai++) {}
    if (ai == sizeof known / sizeof known[0]) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: key general.architecture: \"%.*s\": only llama, qwen2, qwen3, gemma2, gemma3, phi3 and "
                   "qwen3moe GGUF files can be loaded", path, (int)(alen > 64 ? 64 : alen), arch);
        return SITS_ERR_UNSUPPORTED;
    }
    snprintf(arch_out, 16, "%s", known[ai]);
    *n_head_p = *n_kv_p = 0;
    *permute_p = ai == 0;
    if (!*permute_p) return SITS_OK;
    const sits_gguf_kv_t *h = sits_gguf_kv_find(g, "llama.attention.head_count");
    const sits_gguf_kv_t *k = sits_gguf_kv_find(g, "llama.attention.head_count_kv");
    if (!h || h->type == SITS_GGUF_ARRAY || sits_gguf_kv_get_i64(h, 0, n_head_p) != SITS_OK || *n_head_p <= 0) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: key llama.attention.head_count: missing or not a positive integer", path);
        return SITS_ERR_FORMAT;
    }
    *n_kv_p = *n_head_p;
    if (k && (k->type == SITS_GGUF_ARRAY || sits_gguf_kv_get_i64(k, 0, n_kv_p) != SITS_OK || *n_kv_p <= 0)) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: key llama.attention.head_count_kv: not a positive integer", path);
        return SITS_ERR_FORMAT;
    }
    return SITS_OK;
}

/* A GGUF's tensors, dequantised to fp32 into one buffer owned by st, under their HF names and
 * shapes (GGUF dims reversed), attn_q / attn_k rows un-permuted; tensors without an HF name
 * (rope_freqs, ...) are skipped. Everything is checked (names, types, sizes) before the buffer is
 * allocated. */
static sits_status_t st_gguf_into(sits_st_t *st, const char *path)
{
    sits_status_t s;
    sits_gguf_t *g = NULL;
    float *buf = NULL, *tmp = NULL;
    size_t fi, n_before = st->n, n_skip = 0, n_type[64] = { 0 }, n_entries = 0;
    uint64_t total = 0, max_qk = 0;
    int64_t n_head, n_kv;
    int permute;
    char hf[320], arch[16];
    SITS_CHECK(sits_gguf_open(path, &g));
    SITS_CHECK_GOTO(gguf_heads(g, arch, &permute, &n_head, &n_kv), s, out_close);
    const int gemma = !strncmp(arch, "gemma", 5);
    size_t n = sits_gguf_tensor_count(g);
    for (size_t i = 0; i < n; i++) {
        const sits_gguf_tensor_t *t = sits_gguf_tensor_at(g, i);
        if (sits_gguf_hf_name_arch(arch, t->name, hf, sizeof hf) != SITS_OK) continue;
        if (!sits_ggml_type_supported(t->ggml_type)) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s: ggml type %s is not supported (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, "
                       "Q5_1, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K are)", path, t->name, sits_ggml_type_name(t->ggml_type));
            s = SITS_ERR_UNSUPPORTED;
            goto out_close;
        }
        uint64_t numel = sits_gguf_tensor_numel(t);
        if (strchr(hf, '*') && (t->ndim != 3 || t->ne[2] < 1 || t->ne[2] > 4096)) {   /* [gguf moe] one entry an expert */
            SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s: expected [experts, rows, cols] with 1 to 4096 experts", path, t->name);
            s = SITS_ERR_FORMAT;
            goto out_close;
        }
        n_entries += strchr(hf, '*') ? (size_t)t->ne[2] : 1;
        if (permute && (strstr(t->name, ".attn_q.") || strstr(t->name, ".attn_k."))) {
            int64_t nh = strstr(t->name, ".attn_q.") ? n_head : n_kv, rows = t->ndim >= 2 ? t->ne[1] : t->ne[0];
            if (t->ndim > 2 || rows % nh != 0 || (rows / nh) % 2 != 0) {
                SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s: %lld rows do not split into %lld heads of even size", path,
                           t->name, (long long)rows, (long long)nh);
                s = SITS_ERR_FORMAT;
                goto out_close;
            }
            if (numel > max_qk) max_qk = numel;
        }
        total += numel; /* each numel <= file bytes * 32, so no overflow for any file that exists */
    }
    if (total > SIZE_MAX / sizeof(float)) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: %llu fp32 values do not fit in memory", path, (unsigned long long)total);
        s = SITS_ERR_NOMEM;
        goto out_close;
    }
    buf = malloc(total ? (size_t)total * sizeof *buf : 1);
    tmp = malloc(max_qk ? (size_t)max_qk * sizeof *tmp : 1);
    if (!buf || !tmp) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: out of memory for %llu dequantised bytes", path,
                   (unsigned long long)(total * sizeof *buf));
        s = SITS_ERR_NOMEM;
        goto out_free;
    }
    SITS_CHECK_GOTO(st_add_file(st, path, NULL, 0, &fi), s, out_free);
    st->files[fi].owned = buf; /* st frees it from now on */
    SITS_CHECK_GOTO(st_reserve(st, n_entries, path), s, out_free_tmp);
    float *dst = buf;
    for (size_t i = 0; i < n; i++) {
        const sits_gguf_tensor_t *t = sits_gguf_tensor_at(g, i);
        if (sits_gguf_hf_name_arch(arch, t->name, hf, sizeof hf) != SITS_OK) {
            SITS_INFO(SITS_SUB_MODEL, "%s: tensor %s has no transformers counterpart: skipped", path, t->name);
            n_skip++;
            continue;
        }
        uint64_t numel = sits_gguf_tensor_numel(t);
        SITS_CHECK_GOTO(sits_gguf_dequantize(g, t, dst), s, err_unwind);
        if (gemma && strstr(t->name, "norm.weight"))   /* [gguf gemma] llama.cpp stores Gemma's norms as 1 + w (Gemma2TensorProcessor) */
            for (uint64_t j = 0; j < numel; j++) dst[j] -= 1.0f;
        if (permute && (strstr(t->name, ".attn_q.") || strstr(t->name, ".attn_k."))) {
            int64_t rows = t->ndim >= 2 ? t->ne[1] : t->ne[0], cols = t->ndim >= 2 ? t->ne[0] : 1;
            SITS_CHECK_GOTO(sits_gguf_unpermute_qk(dst, rows, cols, strstr(t->name, ".attn_q.") ? n_head : n_kv, tmp),
                            s, err_unwind);
        }
        /* [gguf moe] a 3D experts tensor [E, rows, cols] becomes E entries [rows, cols] (its contiguous slices), the
         * name's '*' the expert's index: the per-expert names of the HF checkpoints */
        const char *star = strchr(hf, '*');
        const int parts = star ? (int)t->ne[2] : 1;
        const uint64_t per = numel / (uint64_t)parts;
        for (int x = 0; x < parts; x++) {
            sits_st_tensor_t *e = &st->tensors[st->n];
            memset(e, 0, sizeof *e);
            char name[352];
            if (star) snprintf(name, sizeof name, "%.*s%d%s", (int)(star - hf), hf, x, star + 1);
            if (!(e->name = strdup(star ? name : hf))) {
                SITS_ERROR(SITS_SUB_MODEL, "%s: out of memory", path);
                s = SITS_ERR_NOMEM;
                goto err_unwind;
            }
            e->dtype = SITS_DT_F32;
            e->ndim = star ? 2 : t->ndim;
            for (int d = 0; d < e->ndim; d++) e->shape[d] = t->ne[e->ndim - 1 - d];
            e->data = dst + (size_t)x * per;
            e->nbytes = (size_t)per * sizeof *dst;
            e->file = st->files[fi].path;
            st->n++;
        }
        dst += numel;
        n_type[t->ggml_type & 63]++;
    }
    char types[256] = "";
    for (int ty = 0, len = 0; ty < 64; ty++) {
        if (!n_type[ty] || len >= (int)sizeof types) continue;
        int w = snprintf(types + len, sizeof types - (size_t)len, "%s%s x%zu", len ? ", " : "", sits_ggml_type_name(ty),
                         n_type[ty]);
        if (w > 0) len += w;
    }
    SITS_INFO(SITS_SUB_MODEL, "%s: GGUF v%u: dequantised %zu tensors (%s) to fp32 under their transformers names, "
              "%llu bytes; q/k rows un-permuted for %lld/%lld heads; %zu tensors skipped", path, sits_gguf_version(g),
              st->n - n_before, types, (unsigned long long)(total * sizeof *buf), (long long)n_head, (long long)n_kv,
              n_skip);
    s = SITS_OK;
    goto out_free_tmp;
err_unwind:
    for (size_t i = n_before; i < st->n; i++) free(st->tensors[i].name);
    st->n = n_before;
out_free_tmp:
    free(tmp);
    sits_gguf_close(g);
    return s;
out_free:
    free(buf);
    free(tmp);
out_close:
    sits_gguf_close(g);
    return s;
}

static int path_join(char *buf, size_t len, const char *dir, const char *name)
{
    int n = snprintf(buf, len, "%s/%s", dir, name);
    return n >= 0 && (size_t)n < len;
}

static int str_ptr_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static char *read_small_file(const char *path, size_t limit, size_t *len_p, sits_status_t *s_p)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long size;
    if (!f) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: cannot open: %s", path, strerror(errno));
        *s_p = SITS_ERR_IO;
        return NULL;
    }
    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: cannot size: %s", path, strerror(errno));
        *s_p = SITS_ERR_IO;
        goto out_close;
    }
    if ((unsigned long)size > limit) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: %ld bytes, over the %zu-byte limit", path, size, limit);
        *s_p = SITS_ERR_FORMAT;
        goto out_close;
    }
    buf = malloc((size_t)size + 1);
    if (!buf) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: out of memory", path);
        *s_p = SITS_ERR_NOMEM;
        goto out_close;
    }
    if (fread(buf, 1, (size_t)size, f) != (size_t)size) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: short read", path);
        *s_p = SITS_ERR_IO;
        free(buf);
        buf = NULL;
        goto out_close;
    }
    *len_p = (size_t)size;
out_close:
    fclose(f);
    return buf;
}

/* The sharded set named by DIR/model.safetensors.index.json. */
static sits_status_t st_open_index(sits_st_t *st, const char *dir, const char *index_path)
{
    sits_status_t s = SITS_OK;
    size_t len = 0, n_names = 0;
    const char **names = NULL;
    json_error_t jerr;
    char path[4096];
    char *text = read_small_file(index_path, ST_INDEX_MAX_BYTES, &len, &s);
    if (!text) return s;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    free(text);
    if (!root) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: invalid JSON at line %d column %d: %s", index_path, jerr.line, jerr.column,
                   jerr.text);
        return SITS_ERR_FORMAT;
    }
    const json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(root) || !json_is_object(wm)) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: weight_map: missing or not an object", index_path);
        s = SITS_ERR_FORMAT;
        goto out_decref;
    }
    names = malloc((json_object_size(wm) ? json_object_size(wm) : 1) * sizeof *names);
    if (!names) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: out of memory", index_path);
        s = SITS_ERR_NOMEM;
        goto out_decref;
    }
    const char *tname;
    const json_t *fv;
    json_object_foreach((json_t *)wm, tname, fv) {
        const char *fname = json_string_value(fv);
        if (!fname || !fname[0] || strchr(fname, '/') || !strcmp(fname, "..") || !strcmp(fname, ".")) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: weight_map: tensor %s: value is not a plain file name", index_path, tname);
            s = SITS_ERR_FORMAT;
            goto out_free;
        }
        names[n_names++] = fname;
    }
    /* Each shard once, in name order. */
    qsort(names, n_names, sizeof *names, str_ptr_cmp);
    for (size_t i = 0; i < n_names; i++) {
        if (i > 0 && !strcmp(names[i], names[i - 1])) continue;
        if (!path_join(path, sizeof path, dir, names[i])) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: path of shard %s too long", index_path, names[i]);
            s = SITS_ERR_INVALID;
            goto out_free;
        }
        if (access(path, F_OK) != 0) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: weight_map names %s, which does not exist: %s", index_path, names[i],
                       strerror(errno));
            s = SITS_ERR_NOT_FOUND;
            goto out_free;
        }
        SITS_CHECK_GOTO(st_map_into(st, path), s, out_free);
    }
    SITS_CHECK_GOTO(st_finish(st), s, out_free);
    /* Every listed tensor is in the file the index names. */
    json_object_foreach((json_t *)wm, tname, fv) {
        const sits_st_tensor_t *t = sits_st_find(st, tname);
        if (!path_join(path, sizeof path, dir, json_string_value(fv))) continue; /* checked above */
        if (!t) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s: listed in %s but absent from it", index_path, tname,
                       json_string_value(fv));
            s = SITS_ERR_FORMAT;
            goto out_free;
        }
        if (strcmp(t->file, path) != 0) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: tensor %s: listed in %s but found in %s", index_path, tname,
                       json_string_value(fv), t->file);
            s = SITS_ERR_FORMAT;
            goto out_free;
        }
    }
    if (st->n != json_object_size(wm))
        SITS_WARN(SITS_SUB_MODEL, "%s: shards hold %zu tensors, weight_map lists %zu; the extra ones are kept",
                  index_path, st->n, json_object_size(wm));
out_free:
    free(names);
out_decref:
    json_decref(root);
    return s;
}

/* The names of DIR's entries ending in suffix, sorted, into *names_p (caller frees each and the array). */
static sits_status_t list_suffix(const char *dir, const char *suffix, char ***names_p, size_t *n_p)
{
    sits_status_t s = SITS_OK;
    char **names = NULL;
    size_t n_names = 0, cap = 0, sl = strlen(suffix);
    DIR *d = opendir(dir);
    if (!d) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: cannot open directory: %s", dir, strerror(errno));
        return errno == ENOENT ? SITS_ERR_NOT_FOUND : SITS_ERR_IO;
    }
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        size_t l = strlen(de->d_name);
        if (l <= sl || strcmp(de->d_name + l - sl, suffix) != 0) continue;
        if (n_names == cap) {
            cap = cap ? 2 * cap : 8;
            char **nn = realloc(names, cap * sizeof *nn);
            if (!nn) goto err_nomem;
            names = nn;
        }
        if (!(names[n_names] = strdup(de->d_name))) goto err_nomem;
        n_names++;
    }
    closedir(d);
    if (n_names > 1) qsort(names, n_names, sizeof *names, str_ptr_cmp);
    *names_p = names;
    *n_p = n_names;
    return SITS_OK;
err_nomem:
    SITS_ERROR(SITS_SUB_MODEL, "%s: out of memory listing the directory", dir);
    s = SITS_ERR_NOMEM;
    for (size_t i = 0; i < n_names; i++) free(names[i]);
    free(names);
    closedir(d);
    return s;
}

/* No index: model.safetensors, else every *.safetensors in name order, else the one *.gguf. */
static sits_status_t st_open_plain(sits_st_t *st, const char *dir)
{
    sits_status_t s = SITS_OK;
    char path[4096];
    char **names = NULL;
    size_t n_names = 0;
    if (!path_join(path, sizeof path, dir, "model.safetensors")) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: directory path too long", dir);
        return SITS_ERR_INVALID;
    }
    if (access(path, F_OK) == 0) {
        SITS_CHECK(st_map_into(st, path));
        return st_finish(st);
    }
    SITS_CHECK(list_suffix(dir, ".safetensors", &names, &n_names));
    if (n_names == 0) {
        free(names);
        SITS_CHECK(list_suffix(dir, ".gguf", &names, &n_names));
        if (n_names != 1) {
            if (n_names == 0) SITS_ERROR(SITS_SUB_MODEL, "%s: no %s, no *.safetensors and no *.gguf file", dir, ST_INDEX_NAME);
            else SITS_ERROR(SITS_SUB_MODEL, "%s: no *.safetensors and %zu *.gguf files (%s, %s, ...): keep one", dir,
                            n_names, names[0], names[1]);
            s = n_names == 0 ? SITS_ERR_NOT_FOUND : SITS_ERR_INVALID;
            goto out_free;
        }
        if (!path_join(path, sizeof path, dir, names[0])) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: path of %s too long", dir, names[0]);
            s = SITS_ERR_INVALID;
            goto out_free;
        }
        SITS_CHECK_GOTO(st_gguf_into(st, path), s, out_free);
        s = st_finish(st);
        goto out_free;
    }
    for (size_t i = 0; i < n_names; i++) {
        if (!path_join(path, sizeof path, dir, names[i])) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: path of %s too long", dir, names[i]);
            s = SITS_ERR_INVALID;
            goto out_free;
        }
        SITS_CHECK_GOTO(st_map_into(st, path), s, out_free);
    }
    s = st_finish(st);
out_free:
    for (size_t i = 0; i < n_names; i++) free(names[i]);
    free(names);
    return s;
}

sits_status_t sits_st_open_dir(const char *dir, sits_st_t **st_p)
{
    sits_st_t *st = NULL;
    sits_status_t s;
    char index_path[4096];
    if (!path_join(index_path, sizeof index_path, dir, ST_INDEX_NAME)) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: directory path too long", dir);
        return SITS_ERR_INVALID;
    }
    SITS_CHECK(st_alloc(&st));
    if (access(index_path, F_OK) == 0)
        SITS_CHECK_GOTO(st_open_index(st, dir, index_path), s, err_close);
    else
        SITS_CHECK_GOTO(st_open_plain(st, dir), s, err_close);
    SITS_INFO(SITS_SUB_MODEL, "%s: %zu tensors in %zu files, %zu bytes", dir, st->n, st->n_files, st->total_bytes);
    *st_p = st;
    return SITS_OK;
err_close:
    sits_st_close(st);
    return s;
}

/* the rename of both entry points: `from` at the start of a name (infix 0) or anywhere in it (its first occurrence) */
static sits_status_t st_rename(sits_st_t *st, const char *from, const char *to, int infix, size_t *n_p)
{
    const size_t lf = strlen(from), lt = strlen(to);
    size_t n = 0;
    for (size_t i = 0; i < st->n; i++) {
        sits_st_tensor_t *t = &st->tensors[i];
        const char *at = infix ? strstr(t->name, from) : strncmp(t->name, from, lf) == 0 ? t->name : NULL;
        if (!at) continue;
        const size_t head = (size_t)(at - t->name);
        char *nn = malloc(strlen(t->name) - lf + lt + 1);
        if (!nn) return SITS_ERR_NOMEM;
        memcpy(nn, t->name, head);
        memcpy(nn + head, to, lt);
        strcpy(nn + head + lt, at + lf);
        free(t->name);
        t->name = nn;
        n++;
    }
    if (n_p) *n_p = n;
    return n ? st_finish(st) : SITS_OK;   /* sorted again; a name now present twice is refused */
}

sits_status_t sits_st_add_views(sits_st_t *st, const sits_st_tensor_t *proto, char *const *names, size_t n, const char *file)
{
    if (n == 0) return SITS_OK;
    SITS_CHECK(st_reserve(st, n, file));
    for (size_t i = 0; i < n; i++) {
        sits_st_tensor_t *t = &st->tensors[st->n];
        *t = proto[i];
        t->data = NULL;
        t->nbytes = 0;
        t->file = file;
        if (!(t->name = strdup(names[i]))) return SITS_ERR_NOMEM;
        st->n++;
    }
    return st_finish(st);
}

/* [gpt-oss] FP4 E2M1 codes (OCP MX): sign, 2 exponent bits, 1 mantissa bit */
static const float st_fp4[16] = { 0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                                  -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f };

void sits_st_view_rows_f32(const sits_st_tensor_t *t, int64_t r, int64_t n, int64_t c0, int64_t w, float *out)
{
    const int64_t cols = t->shape[t->ndim - 1];
    if (t->view.kind == SITS_ST_VIEW_MXFP4) {
        const unsigned char *b = t->view.base, *sc = t->view.scales;
#pragma omp parallel for schedule(static) if (n * w >= 65536)
        for (int64_t i = 0; i < n; i++) {
            const int64_t row = t->view.off + (r + i) * t->view.s0;
            const unsigned char *rb = b + (size_t)row * (size_t)(cols / 2), *rs = sc + (size_t)row * (size_t)(cols / 32);
            float s = 0.0f;
            for (int64_t j = 0; j < w; j++) {
                const int64_t c = c0 + j;
                if (j == 0 || c % 32 == 0) s = ldexpf(1.0f, (int)rs[c / 32] - 127);   /* exact: a power of two */
                out[i * w + j] = st_fp4[(rb[c / 2] >> (4 * (c & 1))) & 15u] * s;
            }
        }
        return;
    }
    const sits_dtype_t dt = t->view.dt;
    const size_t es = sits_dtype_size(dt);
#pragma omp parallel for schedule(static) if (n * w >= 65536)
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < w; j++) {
            const int64_t e = t->view.off + (r + i) * t->view.s0 + (c0 + j) * t->view.s1;
            const unsigned char *src = (const unsigned char *)t->view.base + (size_t)e * es;
            if (dt == SITS_DT_BF16) {   /* the common case inline: the top half of an fp32 */
                uint32_t u = (uint32_t)(src[0] | src[1] << 8) << 16;
                memcpy(out + i * w + j, &u, 4);
            } else {
                sits_convert_to_f32(dt, src, out + i * w + j, 1);
            }
        }
}

sits_status_t sits_st_rename_prefix(sits_st_t *st, const char *from, const char *to, size_t *n_p)
{
    return st_rename(st, from, to, 0, n_p);
}

sits_status_t sits_st_rename_infix(sits_st_t *st, const char *from, const char *to, size_t *n_p)
{
    return st_rename(st, from, to, 1, n_p);
}

size_t sits_st_count(const sits_st_t *st) { return st->n; }

const sits_st_tensor_t *sits_st_at(const sits_st_t *st, size_t i) { return i < st->n ? &st->tensors[i] : NULL; }

const sits_st_tensor_t *sits_st_find(const sits_st_t *st, const char *name)
{
    size_t lo = 0, hi = st->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, st->tensors[mid].name);
        if (c == 0) return &st->tensors[mid];
        if (c < 0) hi = mid;
        else lo = mid + 1;
    }
    return NULL;
}

size_t sits_st_total_bytes(const sits_st_t *st) { return st->total_bytes; }

size_t sits_st_file_count(const sits_st_t *st) { return st->n_files; }
