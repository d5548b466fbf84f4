/* tokenizer.c -- load tokenizer.json (+ tokenizer_config.json, generation_config.json, config.json) and
 * encode text to ids exactly as huggingface/tokenizers does for BPE models.
 *
 * Pipeline of one encode: validate UTF-8 -> split out added tokens (leftmost-longest, lstrip/rstrip eat
 * White_Space) -> per remaining segment: normalizer steps -> pre-tokenizer steps over a list of pieces
 * [off, len) of a work buffer -> BPE per piece (per-word cache) -> post-processor prefix/suffix ids.
 * BPE (tokenizers bpe/word.rs merge_all): min-heap of adjacent pairs keyed (rank, left position); a popped
 * entry whose pair no longer exists or no longer merges to the same id is stale and skipped.
 * Byte-level models map each byte of a piece to the one-char token of its GPT-2 alphabet character. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#ifdef HAVE_UTF8PROC
#include <utf8proc.h>
#endif
#include "tokenizer/tok_internal.h"
#include "util/log.h"

#define TOK_ERR(...) SITS_ERROR(SITS_SUB_TOK, __VA_ARGS__)

/* Split regex of GPT-2 (ByteLevel with use_regex true). */
static const char GPT2_REGEX[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* ------------------------------------------------------------------ small helpers */

typedef struct { char *p; size_t n, cap; } tok_buf_t;
typedef struct { int32_t *p; size_t n, cap; } tok_ids_t;
typedef struct { size_t off, len; } tok_piece_t;
typedef struct { tok_piece_t *p; size_t n, cap; } tok_pieces_t;

static int buf_reserve(tok_buf_t *b, size_t extra)
{
    if (b->n + extra + 1 <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + extra + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static int buf_put(tok_buf_t *b, const char *s, size_t n)
{
    if (buf_reserve(b, n)) return -1;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

static int ids_push(tok_ids_t *v, int32_t id)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        int32_t *p = realloc(v->p, cap * sizeof(*p));
        if (!p) return -1;
        v->p = p;
        v->cap = cap;
    }
    v->p[v->n++] = id;
    return 0;
}

static int pieces_push(tok_pieces_t *v, size_t off, size_t len)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 32;
        tok_piece_t *p = realloc(v->p, cap * sizeof(*p));
        if (!p) return -1;
        v->p = p;
        v->cap = cap;
    }
    v->p[v->n].off = off;
    v->p[v->n].len = len;
    v->n++;
    return 0;
}

static uint32_t hash_bytes(const char *s, size_t n)
{
    uint32_t h = 2166136261u;  /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

static uint64_t hash_u64(uint64_t x)
{
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL; x ^= x >> 33;
    return x;
}

static char *xstrndup(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* ------------------------------------------------------------------ unicode helpers */

uint32_t sits_tok_byte_to_cp(uint8_t b)
{
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE)) return b;
    /* the other 68 bytes, in increasing order, map to U+0100 + n */
    uint32_t n = 0;
    for (uint32_t c = 0; c < b; c++)
        if (!((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE))) n++;
    return 0x100 + n;
}

int sits_tok_cp_to_byte(uint32_t cp)
{
    if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF)) return (int)cp;
    if (cp < 0x100 || cp >= 0x100 + 68) return -1;
    uint32_t n = cp - 0x100;
    for (uint32_t c = 0; c < 256; c++) {
        if (!((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE))) {
            if (n == 0) return (int)c;
            n--;
        }
    }
    return -1;
}

size_t sits_tok_utf8_encode(uint32_t cp, char *o)
{
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t sits_tok_utf8_next(const char *s, size_t len, uint32_t *cp_p)
{
    const unsigned char *u = (const unsigned char *)s;
    if (u[0] < 0x80 || len < 2) { *cp_p = u[0]; return 1; }
    if (u[0] < 0xE0) { *cp_p = ((uint32_t)(u[0] & 0x1F) << 6) | (u[1] & 0x3F); return 2; }
    if (u[0] < 0xF0 || len < 4) {
        *cp_p = ((uint32_t)(u[0] & 0x0F) << 12) | ((uint32_t)(u[1] & 0x3F) << 6) | (u[2] & 0x3F);
        return 3;
    }
    *cp_p = ((uint32_t)(u[0] & 0x07) << 18) | ((uint32_t)(u[1] & 0x3F) << 12) | ((uint32_t)(u[2] & 0x3F) << 6) |
            (u[3] & 0x3F);
    return 4;
}

/* Unicode White_Space (Rust char::is_whitespace). */
int sits_tok_is_white_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

int sits_tok_utf8_step(const unsigned char *s, size_t len, size_t *n_p)
{
    unsigned char c = s[0];
    if (c < 0x80) { *n_p = 1; return 1; }
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c >= 0xE0 && c <= 0xEF) { need = 3; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { need = 4; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
    else { *n_p = 1; return 0; }
    size_t i = 1;
    for (; i < need; i++) {
        if (i >= len) { *n_p = i; return 2; }
        unsigned char l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (s[i] < l || s[i] > h) { *n_p = i; return 0; }
    }
    *n_p = need;
    return 1;
}

int sits_utf8_valid(const char *s, size_t len, size_t *bad_p)
{
    size_t i = 0;
    while (i < len) {
        size_t n;
        if ((unsigned char)s[i] < 0x80) { i++; continue; }
        if (sits_tok_utf8_step((const unsigned char *)s + i, len - i, &n) != 1) {
            if (bad_p) *bad_p = i;
            return 0;
        }
        i += n;
    }
    return 1;
}

/* ------------------------------------------------------------------ hash maps */

static int strmap_init(sits_tok_strmap_t *m, size_t n)
{
    size_t cap = 16;
    while (cap < n * 2 + 1) cap *= 2;
    m->slots = malloc(cap * sizeof(*m->slots));
    if (!m->slots) return -1;
    memset(m->slots, 0xff, cap * sizeof(*m->slots));
    m->mask = (uint32_t)(cap - 1);
    return 0;
}

/* keys: the string table the ids index (model keys or tokens) */
typedef struct { char **s; uint32_t *len; } tok_keys_t;

static int32_t strmap_get(const sits_tok_strmap_t *m, const tok_keys_t *k, const char *s, size_t n)
{
    if (!m->slots) return -1;
    uint32_t i = hash_bytes(s, n) & m->mask;
    for (;;) {
        int32_t id = m->slots[i];
        if (id < 0) return -1;
        if (k->len[id] == n && memcmp(k->s[id], s, n) == 0) return id;
        i = (i + 1) & m->mask;
    }
}

static void strmap_put(sits_tok_strmap_t *m, const tok_keys_t *k, int32_t id)
{
    uint32_t i = hash_bytes(k->s[id], k->len[id]) & m->mask;
    while (m->slots[i] >= 0) {
        int32_t o = m->slots[i];
        if (k->len[o] == k->len[id] && memcmp(k->s[o], k->s[id], k->len[id]) == 0) { m->slots[i] = id; return; }
        i = (i + 1) & m->mask;
    }
    m->slots[i] = id;
}

static int mergemap_init(sits_tok_mergemap_t *m, size_t n)
{
    size_t cap = 16;
    while (cap < n * 2 + 1) cap *= 2;
    m->keys = malloc(cap * sizeof(*m->keys));
    m->rank = malloc(cap * sizeof(*m->rank));
    m->merged = malloc(cap * sizeof(*m->merged));
    if (!m->keys || !m->rank || !m->merged) return -1;
    memset(m->keys, 0xff, cap * sizeof(*m->keys));
    m->mask = (uint32_t)(cap - 1);
    return 0;
}

static void mergemap_put(sits_tok_mergemap_t *m, int32_t a, int32_t b, int32_t rank, int32_t merged)
{
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    uint32_t i = (uint32_t)hash_u64(key) & m->mask;
    while (m->keys[i] != UINT64_MAX && m->keys[i] != key) i = (i + 1) & m->mask;
    m->keys[i] = key;  /* a repeated pair: the later rank wins, as a Rust HashMap collect does */
    m->rank[i] = rank;
    m->merged[i] = merged;
}

static inline int mergemap_get(const sits_tok_mergemap_t *m, int32_t a, int32_t b, int32_t *rank_p, int32_t *merged_p)
{
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    uint32_t i = (uint32_t)hash_u64(key) & m->mask;
    for (;;) {
        uint64_t k = m->keys[i];
        if (k == key) { *rank_p = m->rank[i]; *merged_p = m->merged[i]; return 1; }
        if (k == UINT64_MAX) return 0;
        i = (i + 1) & m->mask;
    }
}

/* ------------------------------------------------------------------ JSON parsing of the components */

typedef struct {
    sits_tokenizer_t *tok;
    char **model_keys;       /* model vocabulary strings by id (NULL holes) */
    uint32_t *model_lens;
    size_t n_model;
} tok_load_t;

static const char *jstr(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static int jbool(const json_t *o, const char *key, int def)
{
    const json_t *v = json_object_get(o, key);
    if (json_is_boolean(v)) return json_is_true(v);
    return def;
}

/* Replace \s and \S (outside of \\ escapes) by White_Space properties: PCRE2's UCP \s also matches
 * U+180E, which Oniguruma (tokenizers) does not. */
static char *regex_fix_space(const char *re)
{
    size_t n = strlen(re);
    char *out = malloc(n * 8 + 1);
    if (!out) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (re[i] == '\\' && i + 1 < n) {
            if (re[i + 1] == 's') { memcpy(out + o, "\\p{White_Space}", 15); o += 15; i++; continue; }
            if (re[i + 1] == 'S') { memcpy(out + o, "\\P{White_Space}", 15); o += 15; i++; continue; }
            out[o++] = re[i];
            out[o++] = re[i + 1];
            i++;
            continue;
        }
        out[o++] = re[i];
    }
    out[o] = 0;
    return out;
}

static sits_status_t compile_regex(const char *pattern, int literal, pcre2_code **re_p)
{
    int err;
    PCRE2_SIZE erroff;
    char *fixed = literal ? NULL : regex_fix_space(pattern);
    if (!literal && !fixed) return SITS_ERR_NOMEM;
    const char *pat = literal ? pattern : fixed;
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, opts, &err, &erroff, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof(msg));
        TOK_ERR("tokenizer.json: split regex does not compile at offset %zu: %s", (size_t)erroff, (char *)msg);
        free(fixed);
        return SITS_ERR_FORMAT;
    }
    free(fixed);
    /* JIT is an accelerator: without it pcre2_match interprets the pattern. */
    if (pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) != 0)
        SITS_DEBUG(SITS_SUB_TOK, "pcre2 jit not available for the split regex, interpreting");
    *re_p = re;
    return SITS_OK;
}

static sits_status_t parse_prepend_scheme(const json_t *o, sits_tok_prepend_t *p)
{
    const char *s = jstr(o, "prepend_scheme");
    if (!s) {
        *p = jbool(o, "add_prefix_space", 1) ? SITS_PREPEND_ALWAYS : SITS_PREPEND_NEVER;
        return SITS_OK;
    }
    if (!strcmp(s, "always")) *p = SITS_PREPEND_ALWAYS;
    else if (!strcmp(s, "first")) *p = SITS_PREPEND_FIRST;
    else if (!strcmp(s, "never")) *p = SITS_PREPEND_NEVER;
    else { TOK_ERR("tokenizer.json: Metaspace prepend_scheme '%s' unknown", s); return SITS_ERR_FORMAT; }
    return SITS_OK;
}

static sits_status_t add_norm(sits_tokenizer_t *t, sits_tok_norm_kind_t kind, const char *a, const char *b)
{
    sits_tok_norm_t *p = realloc(t->norm, (t->n_norm + 1) * sizeof(*p));
    if (!p) return SITS_ERR_NOMEM;
    t->norm = p;
    sits_tok_norm_t *n = &t->norm[t->n_norm++];
    memset(n, 0, sizeof(*n));
    n->kind = kind;
    n->a = a ? strdup(a) : NULL;
    n->b = b ? strdup(b) : NULL;
    return SITS_OK;
}

static sits_status_t parse_normalizer(sits_tokenizer_t *t, const json_t *o)
{
    if (!o || json_is_null(o)) return SITS_OK;
    const char *type = jstr(o, "type");
    if (!type) { TOK_ERR("tokenizer.json: normalizer without type"); return SITS_ERR_FORMAT; }
    if (!strcmp(type, "Sequence")) {
        const json_t *arr = json_object_get(o, "normalizers");
        size_t i;
        const json_t *v;
        json_array_foreach(arr, i, v) SITS_CHECK(parse_normalizer(t, v));
        return SITS_OK;
    }
    if (!strcmp(type, "Prepend")) {
        const char *s = jstr(o, "prepend");
        if (!s) { TOK_ERR("tokenizer.json: Prepend normalizer without prepend"); return SITS_ERR_FORMAT; }
        return add_norm(t, SITS_NORM_PREPEND, s, NULL);
    }
    if (!strcmp(type, "Replace")) {
        const json_t *pat = json_object_get(o, "pattern");
        const char *s = jstr(pat, "String"), *c = jstr(o, "content");
        if (!s || !c || !*s) {
            TOK_ERR("unsupported tokenizer component: normalizer Replace with a Regex pattern (only String)");
            return SITS_ERR_UNSUPPORTED;
        }
        return add_norm(t, SITS_NORM_REPLACE, s, c);
    }
    if (!strcmp(type, "NFC")) return add_norm(t, SITS_NORM_NFC, NULL, NULL);
    TOK_ERR("unsupported tokenizer component: normalizer %s", type);
    return SITS_ERR_UNSUPPORTED;
}

static sits_tok_pre_t *add_pre(sits_tokenizer_t *t)
{
    sits_tok_pre_t *p = realloc(t->pre, (t->n_pre + 1) * sizeof(*p));
    if (!p) return NULL;
    t->pre = p;
    memset(&p[t->n_pre], 0, sizeof(*p));
    return &p[t->n_pre++];
}

static sits_status_t parse_pre(sits_tokenizer_t *t, const json_t *o)
{
    if (!o || json_is_null(o)) return SITS_OK;
    const char *type = jstr(o, "type");
    if (!type) { TOK_ERR("tokenizer.json: pre_tokenizer without type"); return SITS_ERR_FORMAT; }
    if (t->bytelevel) {
        TOK_ERR("unsupported tokenizer component: pre_tokenizer %s after ByteLevel", type);
        return SITS_ERR_UNSUPPORTED;
    }
    if (!strcmp(type, "Sequence")) {
        const json_t *arr = json_object_get(o, "pretokenizers");
        size_t i;
        const json_t *v;
        json_array_foreach(arr, i, v) SITS_CHECK(parse_pre(t, v));
        return SITS_OK;
    }
    if (!strcmp(type, "Split")) {
        const json_t *pat = json_object_get(o, "pattern");
        const char *re = jstr(pat, "Regex"), *lit = jstr(pat, "String");
        const char *beh = jstr(o, "behavior");
        if ((!re && !lit) || !beh) { TOK_ERR("tokenizer.json: Split without pattern or behavior"); return SITS_ERR_FORMAT; }
        sits_tok_pre_t *p = add_pre(t);
        if (!p) return SITS_ERR_NOMEM;
        p->kind = SITS_PRE_SPLIT;
        p->invert = jbool(o, "invert", 0);
        if (!strcmp(beh, "Removed")) p->behavior = SITS_SPLIT_REMOVED;
        else if (!strcmp(beh, "Isolated")) p->behavior = SITS_SPLIT_ISOLATED;
        else if (!strcmp(beh, "MergedWithPrevious")) p->behavior = SITS_SPLIT_MERGED_PREV;
        else if (!strcmp(beh, "MergedWithNext")) p->behavior = SITS_SPLIT_MERGED_NEXT;
        else if (!strcmp(beh, "Contiguous")) p->behavior = SITS_SPLIT_CONTIGUOUS;
        else { TOK_ERR("tokenizer.json: Split behavior '%s' unknown", beh); return SITS_ERR_FORMAT; }
        return compile_regex(re ? re : lit, re == NULL, &p->re);
    }
    if (!strcmp(type, "ByteLevel")) {
        int use_regex = jbool(o, "use_regex", 1);
        int aps = jbool(o, "add_prefix_space", 1);
        sits_tok_pre_t *p = add_pre(t);
        if (!p) return SITS_ERR_NOMEM;
        p->kind = SITS_PRE_BYTELEVEL;
        p->add_prefix_space = aps;
        if (use_regex) SITS_CHECK(compile_regex(GPT2_REGEX, 0, &p->re));
        t->bytelevel = 1;
        return SITS_OK;
    }
    if (!strcmp(type, "Metaspace")) {
        const char *r = jstr(o, "replacement");
        if (!r || !*r) { TOK_ERR("tokenizer.json: Metaspace without replacement"); return SITS_ERR_FORMAT; }
        sits_tok_pre_t *p = add_pre(t);
        if (!p) return SITS_ERR_NOMEM;
        p->kind = SITS_PRE_METASPACE;
        p->replacement = strdup(r);
        p->split = jbool(o, "split", 1);
        if (!p->replacement) return SITS_ERR_NOMEM;
        return parse_prepend_scheme(o, &p->prepend);
    }
    TOK_ERR("unsupported tokenizer component: pre_tokenizer %s", type);
    return SITS_ERR_UNSUPPORTED;
}

static sits_tok_dec_t *add_dec(sits_tokenizer_t *t)
{
    sits_tok_dec_t *p = realloc(t->dec, (t->n_dec + 1) * sizeof(*p));
    if (!p) return NULL;
    t->dec = p;
    memset(&p[t->n_dec], 0, sizeof(*p));
    return &p[t->n_dec++];
}

static sits_status_t parse_decoder(sits_tokenizer_t *t, const json_t *o, int nested)
{
    if (!o || json_is_null(o)) return SITS_OK;
    const char *type = jstr(o, "type");
    if (!type) { TOK_ERR("tokenizer.json: decoder without type"); return SITS_ERR_FORMAT; }
    t->has_decoder = 1;
    if (!strcmp(type, "Sequence") && !nested) {
        const json_t *arr = json_object_get(o, "decoders");
        size_t i;
        const json_t *v;
        json_array_foreach(arr, i, v) SITS_CHECK(parse_decoder(t, v, 1));
        return SITS_OK;
    }
    sits_tok_dec_t *d = NULL;
    if (!strcmp(type, "ByteLevel")) {
        if (nested) { TOK_ERR("unsupported tokenizer component: decoder ByteLevel inside a Sequence"); return SITS_ERR_UNSUPPORTED; }
        if (!(d = add_dec(t))) return SITS_ERR_NOMEM;
        d->kind = SITS_DEC_BYTELEVEL;
        return SITS_OK;
    }
    if (!strcmp(type, "Replace")) {
        const char *s = jstr(json_object_get(o, "pattern"), "String"), *c = jstr(o, "content");
        if (!s || !c || !*s) { TOK_ERR("unsupported tokenizer component: decoder Replace with a Regex pattern"); return SITS_ERR_UNSUPPORTED; }
        if (!(d = add_dec(t))) return SITS_ERR_NOMEM;
        d->kind = SITS_DEC_REPLACE;
        d->a = strdup(s);
        d->b = strdup(c);
        return (d->a && d->b) ? SITS_OK : SITS_ERR_NOMEM;
    }
    if (!strcmp(type, "ByteFallback") || !strcmp(type, "Fuse")) {
        if (!(d = add_dec(t))) return SITS_ERR_NOMEM;
        d->kind = type[0] == 'B' ? SITS_DEC_BYTEFALLBACK : SITS_DEC_FUSE;
        return SITS_OK;
    }
    if (!strcmp(type, "Strip")) {
        const char *c = jstr(o, "content");
        json_int_t start = json_integer_value(json_object_get(o, "start"));
        json_int_t stop = json_integer_value(json_object_get(o, "stop"));
        uint32_t cp;
        if (!c || !*c || sits_tok_utf8_next(c, strlen(c), &cp) != strlen(c)) {
            TOK_ERR("tokenizer.json: Strip decoder content must be one character");
            return SITS_ERR_FORMAT;
        }
        if (stop != 0) { TOK_ERR("unsupported tokenizer component: decoder Strip with stop > 0"); return SITS_ERR_UNSUPPORTED; }
        if (!(d = add_dec(t))) return SITS_ERR_NOMEM;
        d->kind = SITS_DEC_STRIP;
        d->a = strdup(c);
        d->start = (int)start;
        return d->a ? SITS_OK : SITS_ERR_NOMEM;
    }
    if (!strcmp(type, "Metaspace")) {
        const char *r = jstr(o, "replacement");
        if (!r || !*r) { TOK_ERR("tokenizer.json: Metaspace decoder without replacement"); return SITS_ERR_FORMAT; }
        if (t->n_dec > 0) { TOK_ERR("unsupported tokenizer component: decoder Metaspace after other decoders"); return SITS_ERR_UNSUPPORTED; }
        if (!(d = add_dec(t))) return SITS_ERR_NOMEM;
        d->kind = SITS_DEC_METASPACE;
        d->a = strdup(r);
        if (!d->a) return SITS_ERR_NOMEM;
        return parse_prepend_scheme(o, &d->prepend);
    }
    TOK_ERR("unsupported tokenizer component: decoder %s", type);
    return SITS_ERR_UNSUPPORTED;
}

static sits_status_t parse_post(tok_load_t *L, const json_t *o)
{
    sits_tokenizer_t *t = L->tok;
    if (!o || json_is_null(o)) return SITS_OK;
    const char *type = jstr(o, "type");
    if (!type) { TOK_ERR("tokenizer.json: post_processor without type"); return SITS_ERR_FORMAT; }
    if (!strcmp(type, "Sequence")) {
        const json_t *arr = json_object_get(o, "processors");
        size_t i;
        const json_t *v;
        json_array_foreach(arr, i, v) SITS_CHECK(parse_post(L, v));
        return SITS_OK;
    }
    if (!strcmp(type, "ByteLevel")) return SITS_OK;  /* offsets only */
    if (!strcmp(type, "TemplateProcessing")) {
        const json_t *single = json_object_get(o, "single"), *specials = json_object_get(o, "special_tokens");
        size_t i;
        const json_t *v;
        int seen_a = 0;
        json_array_foreach(single, i, v) {
            const json_t *sp = json_object_get(v, "SpecialToken");
            if (json_object_get(v, "Sequence")) { seen_a = 1; continue; }
            const char *name = jstr(sp, "id");
            if (!name) { TOK_ERR("tokenizer.json: TemplateProcessing piece not understood"); return SITS_ERR_FORMAT; }
            const json_t *ids = json_object_get(json_object_get(specials, name), "ids");
            if (!json_is_array(ids)) { TOK_ERR("tokenizer.json: TemplateProcessing special '%s' without ids", name); return SITS_ERR_FORMAT; }
            size_t j;
            const json_t *idv;
            json_array_foreach(ids, j, idv) {
                int32_t id = (int32_t)json_integer_value(idv);
                int32_t **arr = seen_a ? &t->post_suffix : &t->post_prefix;
                size_t *n = seen_a ? &t->n_post_suffix : &t->n_post_prefix;
                int32_t *p = realloc(*arr, (*n + 1) * sizeof(*p));
                if (!p) return SITS_ERR_NOMEM;
                p[(*n)++] = id;
                *arr = p;
            }
        }
        return SITS_OK;
    }
    TOK_ERR("unsupported tokenizer component: post_processor %s", type);
    return SITS_ERR_UNSUPPORTED;
}

static sits_status_t parse_model(tok_load_t *L, const json_t *m, const json_t *added)
{
    sits_tokenizer_t *t = L->tok;
    const char *type = jstr(m, "type");
    if (type && strcmp(type, "BPE") != 0) {
        TOK_ERR("unsupported tokenizer component: model %s (only BPE)", type);
        return SITS_ERR_UNSUPPORTED;
    }
    const json_t *vocab = json_object_get(m, "vocab"), *merges = json_object_get(m, "merges");
    if (!json_is_object(vocab) || !json_is_array(merges)) {
        TOK_ERR("tokenizer.json: model has no vocab object / merges array");
        return SITS_ERR_FORMAT;
    }
    const json_t *dropout = json_object_get(m, "dropout");
    if (json_is_number(dropout) && json_number_value(dropout) != 0.0) {
        TOK_ERR("unsupported tokenizer component: BPE dropout");
        return SITS_ERR_UNSUPPORTED;
    }
    const char *csp = jstr(m, "continuing_subword_prefix"), *eows = jstr(m, "end_of_word_suffix");
    if ((csp && *csp) || (eows && *eows)) {
        TOK_ERR("unsupported tokenizer component: BPE continuing_subword_prefix/end_of_word_suffix");
        return SITS_ERR_UNSUPPORTED;
    }
    t->ignore_merges = jbool(m, "ignore_merges", 0);
    t->byte_fallback = jbool(m, "byte_fallback", 0);
    t->fuse_unk = jbool(m, "fuse_unk", 0);

    /* id space */
    int64_t max_id = -1;
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)vocab, k, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX / 2) {
            TOK_ERR("tokenizer.json: vocab entry '%s' has no valid id", k);
            return SITS_ERR_FORMAT;
        }
        if (json_integer_value(v) > max_id) max_id = json_integer_value(v);
    }
    size_t i;
    json_array_foreach(added, i, v) {
        const json_t *id = json_object_get(v, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) > INT32_MAX / 2 ||
            !jstr(v, "content") || !*jstr(v, "content")) {
            TOK_ERR("tokenizer.json: added_tokens[%zu] malformed", i);
            return SITS_ERR_FORMAT;
        }
        if (json_integer_value(id) > max_id) max_id = json_integer_value(id);
    }
    t->vocab_size = (size_t)(max_id + 1);
    L->n_model = t->vocab_size;
    t->tokens = calloc(t->vocab_size ? t->vocab_size : 1, sizeof(*t->tokens));
    L->model_keys = calloc(t->vocab_size ? t->vocab_size : 1, sizeof(char *));
    L->model_lens = calloc(t->vocab_size ? t->vocab_size : 1, sizeof(uint32_t));
    if (!t->tokens || !L->model_keys || !L->model_lens) return SITS_ERR_NOMEM;
    if (strmap_init(&t->vocab, json_object_size(vocab))) return SITS_ERR_NOMEM;
    tok_keys_t mk = { L->model_keys, L->model_lens };
    json_object_foreach((json_t *)vocab, k, v) {
        int32_t id = (int32_t)json_integer_value(v);
        size_t n = strlen(k);
        if (L->model_keys[id]) { TOK_ERR("tokenizer.json: vocab id %d used twice", id); return SITS_ERR_FORMAT; }
        L->model_keys[id] = xstrndup(k, n);
        if (!L->model_keys[id]) return SITS_ERR_NOMEM;
        L->model_lens[id] = (uint32_t)n;
        strmap_put(&t->vocab, &mk, id);
    }
    for (size_t id = 0; id < t->vocab_size; id++) {
        if (!L->model_keys[id]) continue;
        t->tokens[id].s = xstrndup(L->model_keys[id], L->model_lens[id]);
        if (!t->tokens[id].s) return SITS_ERR_NOMEM;
        t->tokens[id].len = L->model_lens[id];
    }
    /* added tokens override */
    t->n_added = json_array_size(added);
    t->added = calloc(t->n_added ? t->n_added : 1, sizeof(*t->added));
    if (!t->added) return SITS_ERR_NOMEM;
    if (strmap_init(&t->added_map, t->n_added)) return SITS_ERR_NOMEM;
    json_array_foreach(added, i, v) {
        int32_t id = (int32_t)json_integer_value(json_object_get(v, "id"));
        const char *c = jstr(v, "content");
        if (jbool(v, "single_word", 0)) {
            TOK_ERR("unsupported tokenizer component: added token '%s' with single_word", c);
            return SITS_ERR_UNSUPPORTED;
        }
        if (!sits_utf8_valid(c, strlen(c), NULL)) { TOK_ERR("tokenizer.json: added token not UTF-8"); return SITS_ERR_FORMAT; }
        sits_tok_entry_t *e = &t->tokens[id];
        free(e->s);
        e->len = (uint32_t)strlen(c);
        e->s = xstrndup(c, e->len);
        if (!e->s) return SITS_ERR_NOMEM;
        e->added = 1;
        e->special = (uint8_t)jbool(v, "special", 0);
        t->added[i].id = id;
        t->added[i].lstrip = (uint8_t)jbool(v, "lstrip", 0);
        t->added[i].rstrip = (uint8_t)jbool(v, "rstrip", 0);
        t->added[i].special = e->special;
    }
    char **tk = malloc(t->vocab_size * sizeof(char *));
    uint32_t *tl = malloc(t->vocab_size * sizeof(uint32_t));
    if (!tk || !tl) { free(tk); free(tl); return SITS_ERR_NOMEM; }
    for (size_t id = 0; id < t->vocab_size; id++) { tk[id] = t->tokens[id].s; tl[id] = t->tokens[id].len; }
    tok_keys_t ak = { tk, tl };
    for (i = 0; i < t->n_added; i++) strmap_put(&t->added_map, &ak, t->added[i].id);
    free(tk);
    free(tl);
    /* added tokens by first byte, longest first (leftmost-longest matching) */
    for (i = 0; i < t->n_added; i++) t->n_added_by_byte[(uint8_t)t->tokens[t->added[i].id].s[0]]++;
    for (int b = 0; b < 256; b++) {
        if (!t->n_added_by_byte[b]) continue;
        t->added_by_byte[b] = malloc(t->n_added_by_byte[b] * sizeof(uint32_t));
        if (!t->added_by_byte[b]) return SITS_ERR_NOMEM;
        t->n_added_by_byte[b] = 0;
    }
    for (i = 0; i < t->n_added; i++) {
        uint8_t b = (uint8_t)t->tokens[t->added[i].id].s[0];
        uint32_t *l = t->added_by_byte[b];
        uint32_t n = t->n_added_by_byte[b]++, j = n;
        uint32_t len = t->tokens[t->added[i].id].len;
        while (j > 0 && t->tokens[t->added[l[j - 1]].id].len < len) { l[j] = l[j - 1]; j--; }
        l[j] = (uint32_t)i;
    }

    /* unk, byte tokens */
    const char *unk = jstr(m, "unk_token");
    t->unk_id = unk ? strmap_get(&t->vocab, &mk, unk, strlen(unk)) : -1;
    if (unk && t->unk_id < 0) { TOK_ERR("tokenizer.json: unk_token '%s' not in vocab", unk); return SITS_ERR_FORMAT; }
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof(name), "<0x%02X>", b);
        t->byte_token[b] = strmap_get(&t->vocab, &mk, name, 6);
    }

    /* merges: rank = index */
    if (mergemap_init(&t->merges, json_array_size(merges))) return SITS_ERR_NOMEM;
    tok_buf_t cat = { 0 };
    sits_status_t st = SITS_OK;
    json_array_foreach(merges, i, v) {
        const char *a, *b;
        size_t la, lb;
        char *tmp = NULL;
        if (json_is_string(v)) {
            const char *s = json_string_value(v);
            if (!strncmp(s, "#version", 8)) continue;
            const char *sp = strchr(s, ' ');
            if (!sp || strchr(sp + 1, ' ')) { TOK_ERR("tokenizer.json: merge %zu '%s' is not 'a b'", i, s); st = SITS_ERR_FORMAT; break; }
            tmp = xstrndup(s, (size_t)(sp - s));
            if (!tmp) { st = SITS_ERR_NOMEM; break; }
            a = tmp; la = (size_t)(sp - s);
            b = sp + 1; lb = strlen(b);
        } else if (json_is_array(v) && json_array_size(v) == 2 && json_is_string(json_array_get(v, 0)) &&
                   json_is_string(json_array_get(v, 1))) {
            a = json_string_value(json_array_get(v, 0)); la = strlen(a);
            b = json_string_value(json_array_get(v, 1)); lb = strlen(b);
        } else {
            TOK_ERR("tokenizer.json: merge %zu is neither \"a b\" nor [a, b]", i);
            st = SITS_ERR_FORMAT;
            break;
        }
        int32_t ia = strmap_get(&t->vocab, &mk, a, la), ib = strmap_get(&t->vocab, &mk, b, lb);
        cat.n = 0;
        if (buf_put(&cat, a, la) || buf_put(&cat, b, lb)) { free(tmp); st = SITS_ERR_NOMEM; break; }
        int32_t im = strmap_get(&t->vocab, &mk, cat.p, cat.n);
        if (ia < 0 || ib < 0 || im < 0) {
            TOK_ERR("tokenizer.json: merge %zu ('%s' '%s') uses a token not in the vocab", i, a, b);
            free(tmp);
            st = SITS_ERR_FORMAT;
            break;
        }
        free(tmp);
        mergemap_put(&t->merges, ia, ib, (int32_t)i, im);
    }
    free(cat.p);
    return st;
}

static sits_status_t tok_from_json(const json_t *root, sits_tokenizer_t **tok_p)
{
    sits_status_t st = SITS_OK;
    tok_load_t L = { 0 };
    sits_tokenizer_t *t = calloc(1, sizeof(*t));
    if (!t) return SITS_ERR_NOMEM;
    L.tok = t;
    pthread_mutex_init(&t->cache_lock, NULL);
    t->bos_id = -1;
    if (!json_is_object(root) || !json_is_object(json_object_get(root, "model"))) {
        TOK_ERR("tokenizer.json: no model object");
        st = SITS_ERR_FORMAT;
        goto err_free_tok;
    }
    const json_t *added = json_object_get(root, "added_tokens");
    json_t *empty = json_array();
    SITS_CHECK_GOTO(parse_model(&L, json_object_get(root, "model"), json_is_array(added) ? added : empty), st, err_free_empty);
    SITS_CHECK_GOTO(parse_normalizer(t, json_object_get(root, "normalizer")), st, err_free_empty);
#ifndef HAVE_UTF8PROC
    for (size_t i = 0; i < t->n_norm; i++)
        if (t->norm[i].kind == SITS_NORM_NFC)
            SITS_WARN(SITS_SUB_TOK, "normalizer NFC: built without utf8proc, non-ASCII text will be refused");
#endif
    SITS_CHECK_GOTO(parse_pre(t, json_object_get(root, "pre_tokenizer")), st, err_free_empty);
    SITS_CHECK_GOTO(parse_decoder(t, json_object_get(root, "decoder"), 0), st, err_free_empty);
    SITS_CHECK_GOTO(parse_post(&L, json_object_get(root, "post_processor")), st, err_free_empty);
    if (t->bytelevel) {
        tok_keys_t mk = { L.model_keys, L.model_lens };
        for (int b = 0; b < 256; b++) {
            char s[4];
            size_t n = sits_tok_utf8_encode(sits_tok_byte_to_cp((uint8_t)b), s);
            t->bytelevel_id[b] = strmap_get(&t->vocab, &mk, s, n);
        }
    }
    for (size_t i = 0; i < t->n_post_prefix + t->n_post_suffix; i++) {
        int32_t id = i < t->n_post_prefix ? t->post_prefix[i] : t->post_suffix[i - t->n_post_prefix];
        if (id < 0 || (size_t)id >= t->vocab_size) {
            TOK_ERR("tokenizer.json: post_processor id %d out of the vocabulary", id);
            st = SITS_ERR_FORMAT;
            goto err_free_empty;
        }
    }
    if (t->n_post_prefix) t->bos_id = t->post_prefix[0];
    t->cache = calloc(SITS_TOK_CACHE_SLOTS, sizeof(*t->cache));
    if (!t->cache) { st = SITS_ERR_NOMEM; goto err_free_empty; }
    json_decref(empty);
    for (size_t id = 0; id < L.n_model; id++) free(L.model_keys[id]);
    free(L.model_keys);
    free(L.model_lens);
    *tok_p = t;
    return SITS_OK;
err_free_empty:
    json_decref(empty);
err_free_tok:
    for (size_t id = 0; id < L.n_model; id++) free(L.model_keys ? L.model_keys[id] : NULL);
    free(L.model_keys);
    free(L.model_lens);
    sits_tokenizer_destroy(t);
    return st;
}

sits_status_t sits_tokenizer_load_json_string(const char *json, size_t len, sits_tokenizer_t **tok_p)
{
    json_error_t jerr;
    json_t *root = json_loadb(json, len, 0, &jerr);
    if (!root) {
        TOK_ERR("tokenizer.json: line %d: %s", jerr.line, jerr.text);
        return SITS_ERR_FORMAT;
    }
    sits_status_t st = tok_from_json(root, tok_p);
    json_decref(root);
    return st;
}

/* ------------------------------------------------------------------ side configs */

static json_t *load_optional(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fclose(f);
    json_error_t jerr;
    json_t *j = json_load_file(path, 0, &jerr);
    if (!j) SITS_WARN(SITS_SUB_TOK, "%s: line %d: %s (ignored)", path, jerr.line, jerr.text);
    return j;
}

static const char *token_string(const json_t *v)
{
    if (json_is_string(v)) return json_string_value(v);
    if (json_is_object(v)) return jstr(v, "content");
    return NULL;
}

static sits_status_t stop_add(sits_tokenizer_t *t, int32_t id)
{
    if (id < 0 || (size_t)id >= t->vocab_size) return SITS_OK;
    for (size_t i = 0; i < t->n_stop_ids; i++)
        if (t->stop_ids[i] == id) return SITS_OK;
    int32_t *p = realloc(t->stop_ids, (t->n_stop_ids + 1) * sizeof(*p));
    if (!p) return SITS_ERR_NOMEM;
    p[t->n_stop_ids++] = id;
    t->stop_ids = p;
    return SITS_OK;
}

static sits_status_t stop_add_json(sits_tokenizer_t *t, const json_t *v)
{
    if (json_is_integer(v)) return stop_add(t, (int32_t)json_integer_value(v));
    size_t i;
    const json_t *x;
    if (json_is_array(v))
        json_array_foreach(v, i, x) if (json_is_integer(x)) SITS_CHECK(stop_add(t, (int32_t)json_integer_value(x)));
    return SITS_OK;
}

static sits_status_t load_side_configs(sits_tokenizer_t *t, const char *dir)
{
    sits_status_t st = SITS_OK;
    json_t *tc = load_optional(dir, "tokenizer_config.json");
    json_t *gc = load_optional(dir, "generation_config.json");
    json_t *cc = load_optional(dir, "config.json");
    if (tc) {
        const char *b = token_string(json_object_get(tc, "bos_token"));
        const char *e = token_string(json_object_get(tc, "eos_token"));
        const json_t *ct = json_object_get(tc, "chat_template");
        const char *tmpl = NULL;
        if (json_is_string(ct)) tmpl = json_string_value(ct);
        else if (json_is_array(ct)) {  /* [{name, template}]: the "default" one */
            size_t i;
            const json_t *x;
            json_array_foreach(ct, i, x) if (jstr(x, "name") && !strcmp(jstr(x, "name"), "default")) tmpl = jstr(x, "template");
        }
        if ((b && !(t->bos_token = strdup(b))) || (e && !(t->eos_token = strdup(e))) ||
            (tmpl && !(t->chat_template = strdup(tmpl)))) {
            st = SITS_ERR_NOMEM;
            goto out;
        }
    }
    /* bos: generation_config > config > tokenizer_config bos_token > post-processor prefix */
    const json_t *bv = gc ? json_object_get(gc, "bos_token_id") : NULL;
    if (!json_is_integer(bv) && cc) bv = json_object_get(cc, "bos_token_id");
    if (json_is_integer(bv)) t->bos_id = (int32_t)json_integer_value(bv);
    else if (t->bos_token && sits_tokenizer_token_to_id(t, t->bos_token) >= 0) t->bos_id = sits_tokenizer_token_to_id(t, t->bos_token);
    /* stop ids: generation_config eos first (its order is the model's), then the others */
    if (gc) SITS_CHECK_GOTO(stop_add_json(t, json_object_get(gc, "eos_token_id")), st, out);
    if (cc) SITS_CHECK_GOTO(stop_add_json(t, json_object_get(cc, "eos_token_id")), st, out);
    if (t->eos_token) SITS_CHECK_GOTO(stop_add(t, sits_tokenizer_token_to_id(t, t->eos_token)), st, out);
out:
    json_decref(tc);
    json_decref(gc);
    json_decref(cc);
    return st;
}

sits_status_t sits_tokenizer_load(const char *model_dir, sits_tokenizer_t **tok_p)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/tokenizer.json", model_dir);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root) {
        FILE *f = fopen(path, "rb");
        if (!f) {
            TOK_ERR("%s: %s (sits-dist reads the HF tokenizer.json of the model directory)", path, strerror(errno));
            return SITS_ERR_IO;
        }
        fclose(f);
        TOK_ERR("%s: line %d: %s", path, jerr.line, jerr.text);
        return SITS_ERR_FORMAT;
    }
    sits_tokenizer_t *t = NULL;
    sits_status_t st = tok_from_json(root, &t);
    json_decref(root);
    if (st != SITS_OK) {
        TOK_ERR("%s: cannot load (%s)", path, sits_status_str(st));
        return st;
    }
    st = load_side_configs(t, model_dir);
    if (st != SITS_OK) {
        sits_tokenizer_destroy(t);
        return st;
    }
    SITS_INFO(SITS_SUB_TOK, "tokenizer %s: vocab %zu, %zu added tokens, bos %d, %zu stop ids", path, t->vocab_size,
              t->n_added, t->bos_id, t->n_stop_ids);
    *tok_p = t;
    return SITS_OK;
}

void sits_tokenizer_destroy(sits_tokenizer_t *t)
{
    if (!t) return;
    for (size_t i = 0; i < t->vocab_size; i++) free(t->tokens ? t->tokens[i].s : NULL);
    free(t->tokens);
    free(t->vocab.slots);
    free(t->added_map.slots);
    free(t->merges.keys);
    free(t->merges.rank);
    free(t->merges.merged);
    free(t->added);
    for (int b = 0; b < 256; b++) free(t->added_by_byte[b]);
    for (size_t i = 0; i < t->n_norm; i++) { free(t->norm[i].a); free(t->norm[i].b); }
    free(t->norm);
    for (size_t i = 0; i < t->n_pre; i++) { if (t->pre[i].re) pcre2_code_free(t->pre[i].re); free(t->pre[i].replacement); }
    free(t->pre);
    for (size_t i = 0; i < t->n_dec; i++) { free(t->dec[i].a); free(t->dec[i].b); }
    free(t->dec);
    free(t->post_prefix);
    free(t->post_suffix);
    free(t->bos_token);
    free(t->eos_token);
    free(t->chat_template);
    free(t->stop_ids);
    free(t->cache);
    pthread_mutex_destroy(&t->cache_lock);
    free(t);
}

/* ------------------------------------------------------------------ accessors */

size_t sits_tokenizer_vocab_size(const sits_tokenizer_t *t) { return t->vocab_size; }
int32_t sits_tokenizer_bos_id(const sits_tokenizer_t *t) { return t->bos_id; }
int32_t sits_tokenizer_eos_id(const sits_tokenizer_t *t) { return t->n_stop_ids ? t->stop_ids[0] : -1; }
const char *sits_tokenizer_chat_template(const sits_tokenizer_t *t) { return t->chat_template; }

size_t sits_tokenizer_stop_ids(const sits_tokenizer_t *t, const int32_t **ids_p)
{
    *ids_p = t->stop_ids;
    return t->n_stop_ids;
}

int sits_tokenizer_is_special(const sits_tokenizer_t *t, int32_t id)
{
    return id >= 0 && (size_t)id < t->vocab_size && t->tokens[id].special;
}

const char *sits_tokenizer_id_to_token(const sits_tokenizer_t *t, int32_t id)
{
    if (id < 0 || (size_t)id >= t->vocab_size) return NULL;
    return t->tokens[id].s;
}

int sits_tokenizer_token_bytes(const sits_tokenizer_t *t, int32_t id, char *out, size_t cap, size_t *len_p)
{
    if (id < 0 || (size_t)id >= t->vocab_size || !t->tokens[id].s || t->tokens[id].special) return -1;
    const sits_tok_entry_t *e = &t->tokens[id];
    size_t n = 0;
    if (e->added) {   /* an added token's content is literal text */
        if (e->len > cap) return -1;
        memcpy(out, e->s, e->len);
        *len_p = e->len;
        return 0;
    }
    if (t->bytelevel) {
        for (size_t off = 0; off < e->len;) {
            uint32_t cp;
            off += sits_tok_utf8_next(e->s + off, e->len - off, &cp);
            int b = sits_tok_cp_to_byte(cp);
            if (b < 0 || n >= cap) return -1;
            out[n++] = (char)b;
        }
        *len_p = n;
        return 0;
    }
    /* SentencePiece-style: <0xXX> byte tokens, U+2581 for spaces */
    unsigned hex;
    if (e->len == 6 && sscanf(e->s, "<0x%2X>", &hex) == 1 && cap >= 1) {
        out[0] = (char)hex;
        *len_p = 1;
        return 0;
    }
    for (size_t off = 0; off < e->len;) {
        if (e->len - off >= 3 && memcmp(e->s + off, "\xe2\x96\x81", 3) == 0) {
            if (n >= cap) return -1;
            out[n++] = ' ';
            off += 3;
            continue;
        }
        if (n >= cap) return -1;
        out[n++] = e->s[off++];
    }
    *len_p = n;
    return 0;
}

int32_t sits_tokenizer_token_to_id(const sits_tokenizer_t *t, const char *s)
{
    if (!s) return -1;
    size_t n = strlen(s);
    /* added_map keys are tokens[]; the model map's keys are the model strings, which equal tokens[] for
     * ids not overridden by an added token. */
    if (t->added_map.slots) {
        uint32_t i = hash_bytes(s, n) & t->added_map.mask;
        for (;;) {
            int32_t id = t->added_map.slots[i];
            if (id < 0) break;
            if (t->tokens[id].len == n && memcmp(t->tokens[id].s, s, n) == 0) return id;
            i = (i + 1) & t->added_map.mask;
        }
    }
    if (t->vocab.slots) {
        uint32_t i = hash_bytes(s, n) & t->vocab.mask;
        for (;;) {
            int32_t id = t->vocab.slots[i];
            if (id < 0) break;
            if (t->tokens[id].len == n && memcmp(t->tokens[id].s, s, n) == 0) return id;
            i = (i + 1) & t->vocab.mask;
        }
    }
    return -1;
}

/* Model-vocabulary lookup during encode. The model map was built over the model strings; when an added
 * token overrides an id with a different string the stored key differs, and the probe compares against
 * tokens[] -- so such ids are simply not found through the model map, which is what encoding wants. */
static inline int32_t vocab_get(const sits_tokenizer_t *t, const char *s, size_t n)
{
    uint32_t i = hash_bytes(s, n) & t->vocab.mask;
    for (;;) {
        int32_t id = t->vocab.slots[i];
        if (id < 0) return -1;
        if (t->tokens[id].len == n && memcmp(t->tokens[id].s, s, n) == 0) return id;
        i = (i + 1) & t->vocab.mask;
    }
}

/* ------------------------------------------------------------------ BPE */

typedef struct { int32_t rank, pos, merged; } tok_merge_t;
typedef struct { size_t s, e; int m; } tok_seg_t;

typedef struct {
    int32_t *id, *prev, *next;
    tok_merge_t *heap;
    size_t cap, nheap;
    pcre2_match_data *md;
    tok_buf_t mapped;        /* byte-level mapped word (ignore_merges lookup) */
    tok_buf_t work[2];       /* normalizer / pre-tokenizer buffers */
    tok_pieces_t pieces[2];
    tok_ids_t out;
    tok_seg_t *segs;
    size_t nsegcap;
} tok_ctx_t;

static int ctx_reserve(tok_ctx_t *c, size_t n)
{
    if (n <= c->cap) return 0;
    size_t cap = c->cap ? c->cap : 64;
    while (cap < n) cap *= 2;
    int32_t *a = realloc(c->id, cap * sizeof(int32_t));
    if (!a) return -1;
    c->id = a;
    if (!(a = realloc(c->prev, cap * sizeof(int32_t)))) return -1;
    c->prev = a;
    if (!(a = realloc(c->next, cap * sizeof(int32_t)))) return -1;
    c->next = a;
    tok_merge_t *h = realloc(c->heap, cap * 2 * sizeof(tok_merge_t));
    if (!h) return -1;
    c->heap = h;
    c->cap = cap;
    return 0;
}

static inline int merge_less(const tok_merge_t *a, const tok_merge_t *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(tok_ctx_t *c, tok_merge_t m)
{
    size_t i = c->nheap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!merge_less(&m, &c->heap[p])) break;
        c->heap[i] = c->heap[p];
        i = p;
    }
    c->heap[i] = m;
}

static tok_merge_t heap_pop(tok_ctx_t *c)
{
    tok_merge_t top = c->heap[0], last = c->heap[--c->nheap];
    size_t i = 0, n = c->nheap;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const tok_merge_t *best = &last;
        if (l < n && merge_less(&c->heap[l], best)) { m = l; best = &c->heap[l]; }
        if (r < n && merge_less(&c->heap[r], best)) { m = r; }
        if (m == i) break;
        c->heap[i] = c->heap[m];
        i = m;
    }
    if (n) c->heap[i] = last;
    return top;
}

/* Merge the n symbols c->id[0..n) and append the result to c->out. The heap can hold at most
 * n - 1 initial pairs plus two per merge (n - 1 merges), below 2 * cap. */
static int bpe_merge(const sits_tokenizer_t *t, tok_ctx_t *c, size_t n)
{
    c->nheap = 0;
    for (size_t i = 0; i < n; i++) {
        c->prev[i] = (int32_t)i - 1;
        c->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    int32_t rank, merged;
    for (size_t i = 0; i + 1 < n; i++)
        if (mergemap_get(&t->merges, c->id[i], c->id[i + 1], &rank, &merged))
            heap_push(c, (tok_merge_t){ rank, (int32_t)i, merged });
    while (c->nheap) {
        tok_merge_t top = heap_pop(c);
        int32_t p = top.pos;
        if (c->id[p] < 0) continue;          /* removed */
        int32_t q = c->next[p];
        if (q < 0) continue;
        if (!mergemap_get(&t->merges, c->id[p], c->id[q], &rank, &merged) || merged != top.merged) continue;  /* stale */
        c->id[p] = top.merged;
        c->id[q] = -1;
        c->next[p] = c->next[q];
        if (c->next[q] >= 0) c->prev[c->next[q]] = p;
        if (c->prev[p] >= 0 && mergemap_get(&t->merges, c->id[c->prev[p]], c->id[p], &rank, &merged))
            heap_push(c, (tok_merge_t){ rank, c->prev[p], merged });
        if (c->next[p] >= 0 && mergemap_get(&t->merges, c->id[p], c->id[c->next[p]], &rank, &merged))
            heap_push(c, (tok_merge_t){ rank, p, merged });
    }
    for (int32_t i = 0; i >= 0 && (size_t)i < n; i = c->next[i])
        if (ids_push(&c->out, c->id[i])) return -1;
    return 0;
}

static int cache_get(const sits_tokenizer_t *t, const char *w, size_t n, uint32_t h, tok_ids_t *out)
{
    sits_tokenizer_t *mt = (sits_tokenizer_t *)t;  /* the cache is the one mutable part */
    if (pthread_mutex_trylock(&mt->cache_lock) != 0) return 0;
    const sits_tok_cache_slot_t *s = &t->cache[h & (SITS_TOK_CACHE_SLOTS - 1)];
    int hit = s->klen == n && s->hash == h && memcmp(s->key, w, n) == 0;
    if (hit)
        for (int i = 0; i < s->nids; i++)
            if (ids_push(out, s->ids[i])) { hit = -1; break; }
    pthread_mutex_unlock(&mt->cache_lock);
    return hit;
}

static void cache_put(const sits_tokenizer_t *t, const char *w, size_t n, uint32_t h, const int32_t *ids, size_t nids)
{
    sits_tokenizer_t *mt = (sits_tokenizer_t *)t;
    if (nids > SITS_TOK_CACHE_IDS_MAX || pthread_mutex_trylock(&mt->cache_lock) != 0) return;
    sits_tok_cache_slot_t *s = &mt->cache[h & (SITS_TOK_CACHE_SLOTS - 1)];
    s->hash = h;
    s->klen = (uint8_t)n;
    s->nids = (uint8_t)nids;
    memcpy(s->key, w, n);
    memcpy(s->ids, ids, nids * sizeof(int32_t));
    pthread_mutex_unlock(&mt->cache_lock);
}

/* One pre-token (word) -> ids appended to c->out. */
static int bpe_word(const sits_tokenizer_t *t, tok_ctx_t *c, const char *w, size_t n)
{
    if (n == 0) return 0;
    uint32_t h = 0;
    int cacheable = n <= SITS_TOK_CACHE_KEY_MAX && n > 0;
    if (cacheable) {
        h = hash_bytes(w, n);
        int r = cache_get(t, w, n, h, &c->out);
        if (r < 0) return -1;
        if (r) return 0;
    }
    size_t start = c->out.n;
    if (t->bytelevel) {
        if (t->ignore_merges) {
            c->mapped.n = 0;
            if (buf_reserve(&c->mapped, n * 2)) return -1;
            for (size_t i = 0; i < n; i++)
                c->mapped.n += sits_tok_utf8_encode(sits_tok_byte_to_cp((uint8_t)w[i]), c->mapped.p + c->mapped.n);
            int32_t id = vocab_get(t, c->mapped.p, c->mapped.n);
            if (id >= 0) { if (ids_push(&c->out, id)) return -1; goto done; }
        }
        if (ctx_reserve(c, n)) return -1;
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            int32_t id = t->bytelevel_id[(uint8_t)w[i]];
            if (id < 0) id = t->unk_id;
            if (id < 0) continue;
            if (id == t->unk_id && t->fuse_unk && k > 0 && c->id[k - 1] == t->unk_id) continue;
            c->id[k++] = id;
        }
        if (bpe_merge(t, c, k)) return -1;
    } else {
        if (t->ignore_merges) {
            int32_t id = vocab_get(t, w, n);
            if (id >= 0) { if (ids_push(&c->out, id)) return -1; goto done; }
        }
        if (ctx_reserve(c, n * 4)) return -1;
        size_t k = 0;
        for (size_t i = 0; i < n;) {
            uint32_t cp;
            size_t cl = sits_tok_utf8_next(w + i, n - i, &cp);
            int32_t id = vocab_get(t, w + i, cl);
            if (id < 0 && t->byte_fallback) {
                int all = 1;
                for (size_t j = 0; j < cl; j++) all &= t->byte_token[(uint8_t)w[i + j]] >= 0;
                if (all) {
                    for (size_t j = 0; j < cl; j++) c->id[k++] = t->byte_token[(uint8_t)w[i + j]];
                    i += cl;
                    continue;
                }
            }
            if (id < 0) {
                id = t->unk_id;
                if (id >= 0 && t->fuse_unk && k > 0 && c->id[k - 1] == t->unk_id) id = -1;
            }
            if (id >= 0) c->id[k++] = id;
            i += cl;
        }
        if (bpe_merge(t, c, k)) return -1;
    }
done:
    if (cacheable) cache_put(t, w, n, h, c->out.p + start, c->out.n - start);
    return 0;
}

/* ------------------------------------------------------------------ normalizer, pre-tokenizer */

/* Apply the normalizer to seg; *out_p / *outn_p point at seg itself when nothing changes. */
static sits_status_t normalize(const sits_tokenizer_t *t, tok_ctx_t *c, const char *seg, size_t n,
                               const char **out_p, size_t *outn_p)
{
    const char *cur = seg;
    size_t curn = n;
    int which = 0;
    for (size_t s = 0; s < t->n_norm; s++) {
        const sits_tok_norm_t *nm = &t->norm[s];
        tok_buf_t *dst = &c->work[which];
        dst->n = 0;
        if (nm->kind == SITS_NORM_PREPEND) {
            if (curn == 0) continue;
            if (buf_put(dst, nm->a, strlen(nm->a)) || buf_put(dst, cur, curn)) return SITS_ERR_NOMEM;
        } else if (nm->kind == SITS_NORM_REPLACE) {
            size_t pl = strlen(nm->a), cl = strlen(nm->b);
            if (buf_reserve(dst, curn)) return SITS_ERR_NOMEM;
            for (size_t i = 0; i < curn;) {
                if (i + pl <= curn && memcmp(cur + i, nm->a, pl) == 0) {
                    if (buf_put(dst, nm->b, cl)) return SITS_ERR_NOMEM;
                    i += pl;
                } else {
                    if (buf_put(dst, cur + i, 1)) return SITS_ERR_NOMEM;
                    i++;
                }
            }
        } else {  /* NFC */
            int ascii = 1;
            for (size_t i = 0; i < curn && ascii; i++) ascii = (unsigned char)cur[i] < 0x80;
            if (ascii) continue;
#ifdef HAVE_UTF8PROC
            utf8proc_uint8_t *r = NULL;
            utf8proc_ssize_t rn = utf8proc_map((const utf8proc_uint8_t *)cur, (utf8proc_ssize_t)curn, &r,
                                               UTF8PROC_STABLE | UTF8PROC_COMPOSE);
            if (rn < 0) { TOK_ERR("nfc: %s", utf8proc_errmsg(rn)); return SITS_ERR_INVALID; }
            int bad = buf_put(dst, (const char *)r, (size_t)rn);
            free(r);
            if (bad) return SITS_ERR_NOMEM;
#else
            TOK_ERR("this tokenizer's NFC normalizer needs utf8proc for non-ASCII text; rebuild sits-dist with libutf8proc");
            return SITS_ERR_UNSUPPORTED;
#endif
        }
        cur = dst->p ? dst->p : "";
        curn = dst->n;
        which ^= 1;
    }
    *out_p = cur;
    *outn_p = curn;
    return SITS_OK;
}

/* Split every piece of buf by re with the given behaviour (tokenizers SplitDelimiterBehavior): first the
 * (start, end, is_match) list of the piece (non-matches between matches), then the fold of the behaviour. */
static sits_status_t pre_split(tok_ctx_t *c, const char *buf, const tok_pieces_t *in, tok_pieces_t *out,
                               const pcre2_code *re, sits_tok_split_behavior_t beh, int invert)
{
    out->n = 0;
    for (size_t pi = 0; pi < in->n; pi++) {
        const char *s = buf + in->p[pi].off;
        size_t n = in->p[pi].len, base = in->p[pi].off;
        size_t prev = 0, pos = 0, nseg = 0;
        for (;;) {
            int rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, c->md, NULL);
            if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
                rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, c->md, NULL);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) {
                PCRE2_UCHAR msg[128];
                pcre2_get_error_message(rc, msg, sizeof(msg));
                TOK_ERR("pre-tokenizer regex: %s", (char *)msg);
                return SITS_ERR_INTERNAL;
            }
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
            size_t ms = ov[0], me = ov[1];
            if (me == ms) {  /* empty match: contributes nothing; step one character */
                if (ms >= n) break;
                pos = ms + 1;
                while (pos < n && ((unsigned char)s[pos] & 0xC0) == 0x80) pos++;
                continue;
            }
            if (nseg + 2 > c->nsegcap) {
                size_t cap = c->nsegcap ? c->nsegcap * 2 : 64;
                tok_seg_t *p = realloc(c->segs, cap * sizeof(*p));
                if (!p) return SITS_ERR_NOMEM;
                c->segs = p;
                c->nsegcap = cap;
            }
            if (prev < ms) c->segs[nseg++] = (tok_seg_t){ prev, ms, 0 };
            c->segs[nseg++] = (tok_seg_t){ ms, me, 1 };
            prev = pos = me;
            if (pos >= n) break;
        }
        if (prev < n) {
            if (nseg + 1 > c->nsegcap) {
                size_t cap = c->nsegcap ? c->nsegcap * 2 : 64;
                tok_seg_t *p = realloc(c->segs, cap * sizeof(*p));
                if (!p) return SITS_ERR_NOMEM;
                c->segs = p;
                c->nsegcap = cap;
            }
            c->segs[nseg++] = (tok_seg_t){ prev, n, 0 };
        }
        tok_seg_t *g = c->segs;
        for (size_t k = 0; k < nseg; k++) g[k].m ^= invert;
        size_t first = out->n;
        int prev_match = 0;
        switch (beh) {
        case SITS_SPLIT_REMOVED:
            for (size_t k = 0; k < nseg; k++)
                if (!g[k].m && pieces_push(out, base + g[k].s, g[k].e - g[k].s)) return SITS_ERR_NOMEM;
            break;
        case SITS_SPLIT_ISOLATED:
            for (size_t k = 0; k < nseg; k++)
                if (pieces_push(out, base + g[k].s, g[k].e - g[k].s)) return SITS_ERR_NOMEM;
            break;
        case SITS_SPLIT_MERGED_PREV:
        case SITS_SPLIT_CONTIGUOUS:
            for (size_t k = 0; k < nseg; k++) {
                int glue = beh == SITS_SPLIT_MERGED_PREV ? (g[k].m && !prev_match) : (g[k].m == prev_match);
                if (glue && out->n > first) out->p[out->n - 1].len = base + g[k].e - out->p[out->n - 1].off;
                else if (pieces_push(out, base + g[k].s, g[k].e - g[k].s)) return SITS_ERR_NOMEM;
                prev_match = g[k].m;
            }
            break;
        case SITS_SPLIT_MERGED_NEXT: {
            /* right to left: a match joins the piece on its right unless that one is a match */
            size_t nout = 0;
            for (size_t k = nseg; k-- > 0;) {
                if (g[k].m && !prev_match && nout > 0) {
                    out->p[out->n - 1].len += out->p[out->n - 1].off - (base + g[k].s);
                    out->p[out->n - 1].off = base + g[k].s;
                } else {
                    if (pieces_push(out, base + g[k].s, g[k].e - g[k].s)) return SITS_ERR_NOMEM;
                    nout++;
                }
                prev_match = g[k].m;
            }
            for (size_t a = first, b = out->n - 1; nout && a < b; a++, b--) {
                tok_piece_t tmp = out->p[a];
                out->p[a] = out->p[b];
                out->p[b] = tmp;
            }
            break;
        }
        }
    }
    return SITS_OK;
}

/* Metaspace: ' ' -> replacement, prepend per scheme, optional split (MergedWithNext on the replacement). */
static sits_status_t pre_metaspace(const sits_tok_pre_t *p, const char *buf, const tok_pieces_t *in, tok_buf_t *dst,
                                   tok_pieces_t *out, int seg_at_zero)
{
    size_t rl = strlen(p->replacement);
    dst->n = 0;
    out->n = 0;
    for (size_t pi = 0; pi < in->n; pi++) {
        const char *s = buf + in->p[pi].off;
        size_t n = in->p[pi].len, start = dst->n;
        int starts_with = (n >= 1 && s[0] == ' ') || (n >= rl && memcmp(s, p->replacement, rl) == 0);
        int at_zero = seg_at_zero && in->p[pi].off == 0;
        if (!starts_with && (p->prepend == SITS_PREPEND_ALWAYS || (p->prepend == SITS_PREPEND_FIRST && at_zero)))
            if (buf_put(dst, p->replacement, rl)) return SITS_ERR_NOMEM;
        for (size_t i = 0; i < n; i++) {
            if (s[i] == ' ') { if (buf_put(dst, p->replacement, rl)) return SITS_ERR_NOMEM; }
            else if (buf_put(dst, s + i, 1)) return SITS_ERR_NOMEM;
        }
        if (!p->split) {
            if (dst->n > start && pieces_push(out, start, dst->n - start)) return SITS_ERR_NOMEM;
            continue;
        }
        size_t piece = start;
        for (size_t i = start; i < dst->n;) {
            if (i > piece && i + rl <= dst->n && memcmp(dst->p + i, p->replacement, rl) == 0) {
                if (pieces_push(out, piece, i - piece)) return SITS_ERR_NOMEM;
                piece = i;
                i += rl;
            } else i++;
        }
        if (dst->n > piece && pieces_push(out, piece, dst->n - piece)) return SITS_ERR_NOMEM;
    }
    return SITS_OK;
}

static sits_status_t encode_segment(const sits_tokenizer_t *t, tok_ctx_t *c, const char *seg, size_t n, int at_zero)
{
    const char *buf;
    size_t bn;
    SITS_CHECK(normalize(t, c, seg, n, &buf, &bn));
    /* the normalizer's output may live in work[0|1]: copy it out of the way of the pre-tokenizer */
    tok_buf_t own = { 0 };
    if (t->n_norm && (buf == c->work[0].p || buf == c->work[1].p)) {
        if (buf_put(&own, buf, bn)) return SITS_ERR_NOMEM;
        buf = own.p;
    }
    sits_status_t st = SITS_OK;
    tok_pieces_t *cur = &c->pieces[0], *nxt = &c->pieces[1];
    cur->n = 0;
    if (bn && pieces_push(cur, 0, bn)) { st = SITS_ERR_NOMEM; goto out; }
    int which = 0;
    for (size_t s = 0; s < t->n_pre && cur->n; s++) {
        const sits_tok_pre_t *p = &t->pre[s];
        if (p->kind == SITS_PRE_SPLIT) {
            SITS_CHECK_GOTO(pre_split(c, buf, cur, nxt, p->re, p->behavior, p->invert), st, out);
        } else if (p->kind == SITS_PRE_METASPACE) {
            tok_buf_t *dst = &c->work[which];
            SITS_CHECK_GOTO(pre_metaspace(p, buf, cur, dst, nxt, at_zero), st, out);
            buf = dst->p;
            which ^= 1;
        } else {  /* ByteLevel: optional prefix space, optional GPT-2 split; the byte mapping happens in BPE */
            if (p->add_prefix_space) {
                tok_buf_t *dst = &c->work[which];
                dst->n = 0;
                nxt->n = 0;
                for (size_t i = 0; i < cur->n; i++) {
                    size_t o = dst->n;
                    if (buf[cur->p[i].off] != ' ' && buf_put(dst, " ", 1)) { st = SITS_ERR_NOMEM; goto out; }
                    if (buf_put(dst, buf + cur->p[i].off, cur->p[i].len) || pieces_push(nxt, o, dst->n - o)) {
                        st = SITS_ERR_NOMEM;
                        goto out;
                    }
                }
                buf = dst->p;
                which ^= 1;
                tok_pieces_t *tmp = cur; cur = nxt; nxt = tmp;
            }
            if (!p->re) continue;
            SITS_CHECK_GOTO(pre_split(c, buf, cur, nxt, p->re, SITS_SPLIT_ISOLATED, 0), st, out);
        }
        tok_pieces_t *tmp = cur; cur = nxt; nxt = tmp;
    }
    for (size_t i = 0; i < cur->n; i++)
        if (bpe_word(t, c, buf + cur->p[i].off, cur->p[i].len)) { st = SITS_ERR_NOMEM; goto out; }
out:
    free(own.p);
    return st;
}

static size_t match_added(const sits_tokenizer_t *t, const char *s, size_t n, size_t i, size_t *which_p)
{
    uint8_t b = (uint8_t)s[i];
    for (uint32_t k = 0; k < t->n_added_by_byte[b]; k++) {
        size_t a = t->added_by_byte[b][k];
        const sits_tok_entry_t *e = &t->tokens[t->added[a].id];
        if (e->len <= n - i && memcmp(s + i, e->s, e->len) == 0) { *which_p = a; return e->len; }
    }
    return 0;
}

static size_t prev_char_start(const char *s, size_t i)
{
    do i--; while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80);
    return i;
}

sits_status_t sits_tokenizer_encode(const sits_tokenizer_t *t, const char *text, size_t len, int add_special,
                                    int32_t **ids_p, size_t *n_p)
{
    size_t bad;
    if (!text && len) return SITS_ERR_INVALID;
    if (!sits_utf8_valid(text, len, &bad)) {
        TOK_ERR("input is not valid UTF-8 (byte 0x%02x at offset %zu)", (unsigned char)text[bad], bad);
        return SITS_ERR_INVALID;
    }
    sits_status_t st = SITS_OK;
    tok_ctx_t c = { 0 };
    if (t->n_pre) {
        for (size_t s = 0; s < t->n_pre; s++)
            if (t->pre[s].re) { c.md = pcre2_match_data_create_from_pattern(t->pre[s].re, NULL); break; }
    }
    if (add_special)
        for (size_t i = 0; i < t->n_post_prefix; i++)
            if (ids_push(&c.out, t->post_prefix[i])) { st = SITS_ERR_NOMEM; goto out; }
    size_t seg = 0, i = 0;
    while (i < len) {
        size_t which, ml = t->n_added ? match_added(t, text, len, i, &which) : 0;
        if (!ml) { i++; continue; }
        size_t start = i, stop = i + ml;
        const sits_tok_added_t *a = &t->added[which];
        if (a->lstrip) {
            while (start > seg) {
                size_t p = prev_char_start(text, start);
                uint32_t cp;
                sits_tok_utf8_next(text + p, len - p, &cp);
                if (!sits_tok_is_white_space(cp)) break;
                start = p;
            }
        }
        if (a->rstrip) {
            while (stop < len) {
                uint32_t cp;
                size_t l = sits_tok_utf8_next(text + stop, len - stop, &cp);
                if (!sits_tok_is_white_space(cp)) break;
                stop += l;
            }
        }
        if (seg < start) SITS_CHECK_GOTO(encode_segment(t, &c, text + seg, start - seg, seg == 0), st, out);
        if (ids_push(&c.out, a->id)) { st = SITS_ERR_NOMEM; goto out; }
        seg = i = stop;
    }
    if (seg < len) SITS_CHECK_GOTO(encode_segment(t, &c, text + seg, len - seg, seg == 0), st, out);
    if (add_special)
        for (size_t k = 0; k < t->n_post_suffix; k++)
            if (ids_push(&c.out, t->post_suffix[k])) { st = SITS_ERR_NOMEM; goto out; }
    *ids_p = c.out.p;
    *n_p = c.out.n;
    c.out.p = NULL;
out:
    if (st == SITS_ERR_NOMEM) TOK_ERR("out of memory while encoding %zu bytes", len);
    free(c.out.p);
    free(c.id);
    free(c.prev);
    free(c.next);
    free(c.heap);
    free(c.segs);
    free(c.mapped.p);
    free(c.work[0].p);
    free(c.work[1].p);
    free(c.pieces[0].p);
    free(c.pieces[1].p);
    if (c.md) pcre2_match_data_free(c.md);
    return st;
}
