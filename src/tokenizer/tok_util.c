/* tok_util.c -- helpers shared by the tokenizer's component files: growable buffers, hashing, the string
 * map, UTF-8 and Unicode character classes (libutf8proc), the GPT-2 byte alphabet, regex compilation in
 * Oniguruma's sense (tokenizers' regex engine) on PCRE2, and JSON accessors. */
#include <stdlib.h>
#include <string.h>
#ifdef HAVE_UTF8PROC
#include <utf8proc.h>
#endif
#include "tokenizer/tok_internal.h"

/* ------------------------------------------------------------------ buffers */

int sits_tok_buf_reserve(tok_buf_t *b, size_t extra)
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

int sits_tok_buf_put(tok_buf_t *b, const char *s, size_t n)
{
    if (sits_tok_buf_reserve(b, n)) return -1;
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

int sits_tok_ids_push(tok_ids_t *v, int32_t id)
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

int sits_tok_pieces_push(tok_pieces_t *v, size_t off, size_t len, int at_zero)
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
    v->p[v->n].at_zero = (uint8_t)at_zero;
    v->n++;
    return 0;
}

uint32_t sits_tok_hash(const char *s, size_t n)
{
    uint32_t h = 2166136261u;  /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

char *sits_tok_strndup(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* ------------------------------------------------------------------ string map */

int sits_tok_strmap_init(sits_tok_strmap_t *m, size_t n)
{
    size_t cap = 16;
    while (cap < n * 2 + 1) cap *= 2;
    m->slots = malloc(cap * sizeof(*m->slots));
    if (!m->slots) return -1;
    memset(m->slots, 0xff, cap * sizeof(*m->slots));
    m->mask = (uint32_t)(cap - 1);
    return 0;
}

int32_t sits_tok_strmap_get(const sits_tok_strmap_t *m, const tok_keys_t *k, const char *s, size_t n)
{
    if (!m->slots) return -1;
    uint32_t i = sits_tok_hash(s, n) & m->mask;
    for (;;) {
        int32_t id = m->slots[i];
        if (id < 0) return -1;
        if (k->len[id] == n && memcmp(k->s[id], s, n) == 0) return id;
        i = (i + 1) & m->mask;
    }
}

void sits_tok_strmap_put(sits_tok_strmap_t *m, const tok_keys_t *k, int32_t id)
{
    uint32_t i = sits_tok_hash(k->s[id], k->len[id]) & m->mask;
    while (m->slots[i] >= 0) {
        int32_t o = m->slots[i];
        if (k->len[o] == k->len[id] && memcmp(k->s[o], k->s[id], k->len[id]) == 0) { m->slots[i] = id; return; }
        i = (i + 1) & m->mask;
    }
    m->slots[i] = id;
}

/* ------------------------------------------------------------------ unicode */

static int gpt2_direct(uint32_t c) { return (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF); }

/* The 68 bytes outside the direct ranges, in increasing order (0x00-0x20, 0x7F, 0x80-0xA0, 0xAD), map to
 * U+0100 + n. */
uint32_t sits_tok_byte_to_cp(uint8_t b)
{
    if (gpt2_direct(b)) return b;
    if (b <= 0x20) return 0x100u + b;
    if (b == 0x7F) return 0x121;
    if (b <= 0xA0) return 0x122u + (b - 0x80u);
    return 0x143;  /* 0xAD */
}

int sits_tok_cp_to_byte(uint32_t cp)
{
    if (gpt2_direct(cp)) return (int)cp;
    if (cp < 0x100 || cp > 0x143) return -1;
    uint32_t n = cp - 0x100;
    if (n <= 0x20) return (int)n;
    if (n == 33) return 0x7F;
    if (n < 67) return (int)(0x80 + n - 34);
    return 0xAD;
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

#ifdef HAVE_UTF8PROC
static int cat(uint32_t cp) { return utf8proc_category((utf8proc_int32_t)cp); }
#endif

int sits_tok_is_punct(uint32_t cp)
{
    if (cp < 0x80) return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) ||
                          (cp >= 0x7B && cp <= 0x7E);
#ifdef HAVE_UTF8PROC
    int c = cat(cp);
    return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
#else
    return 0;
#endif
}

int sits_tok_is_numeric(uint32_t cp)
{
    if (cp < 0x80) return cp >= '0' && cp <= '9';
#ifdef HAVE_UTF8PROC
    int c = cat(cp);
    return c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO;
#else
    return 0;
#endif
}

int sits_tok_is_mark_nonspacing(uint32_t cp)
{
#ifdef HAVE_UTF8PROC
    return cp >= 0x300 && cat(cp) == UTF8PROC_CATEGORY_MN;
#else
    (void)cp;
    return 0;
#endif
}

int sits_tok_is_mark(uint32_t cp)
{
#ifdef HAVE_UTF8PROC
    int c = cat(cp);
    return cp >= 0x300 && c >= UTF8PROC_CATEGORY_MN && c <= UTF8PROC_CATEGORY_ME;
#else
    (void)cp;
    return 0;
#endif
}

int sits_tok_is_other(uint32_t cp)
{
    if (cp < 0x80) return cp < 0x20 || cp == 0x7F;
#ifdef HAVE_UTF8PROC
    int c = cat(cp);
    return c == UTF8PROC_CATEGORY_CN || (c >= UTF8PROC_CATEGORY_CC && c <= UTF8PROC_CATEGORY_CO);
#else
    return 0;
#endif
}

int sits_tok_is_word_char(uint32_t cp)
{
    if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
#ifdef HAVE_UTF8PROC
    int c = cat(cp);
    return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_ME) || c == UTF8PROC_CATEGORY_ND ||
           c == UTF8PROC_CATEGORY_PC;
#else
    return 0;
#endif
}

int sits_tok_lower_append(uint32_t cp, tok_buf_t *out)
{
    char u[8];
    if (cp == 0x130) return sits_tok_buf_put(out, "i\xcc\x87", 3);
#ifdef HAVE_UTF8PROC
    uint32_t l = (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp);
#else
    uint32_t l = cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
#endif
    return sits_tok_buf_put(out, u, sits_tok_utf8_encode(l, u));
}

/* ------------------------------------------------------------------ regex */

/* Oniguruma's \s and \S are White_Space; PCRE2's UCP \s also matches U+180E. \w in Oniguruma (Unicode)
 * is Alphabetic, marks, decimal digits, connector punctuation and the joiners. */
static char *regex_fix(const char *re)
{
    static const char WS[] = "\\p{White_Space}", NWS[] = "\\P{White_Space}";
    size_t n = strlen(re);
    char *out = malloc(n * 16 + 1);
    if (!out) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (re[i] == '\\' && i + 1 < n) {
            if (re[i + 1] == 's') { memcpy(out + o, WS, sizeof(WS) - 1); o += sizeof(WS) - 1; i++; continue; }
            if (re[i + 1] == 'S') { memcpy(out + o, NWS, sizeof(NWS) - 1); o += sizeof(NWS) - 1; i++; continue; }
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

sits_status_t sits_tok_regex_compile(const char *pattern, int literal, pcre2_code **re_p)
{
    int err;
    PCRE2_SIZE erroff;
    char *fixed = literal ? NULL : regex_fix(pattern);
    if (!literal && !fixed) return SITS_ERR_NOMEM;
    const char *pat = literal ? pattern : fixed;
    uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);  /* LITERAL refuses UCP */
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, opts, &err, &erroff, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof(msg));
        TOK_ERR("tokenizer.json: regex '%s' does not compile at offset %zu: %s", pattern, (size_t)erroff, (char *)msg);
        free(fixed);
        return SITS_ERR_FORMAT;
    }
    free(fixed);
    /* JIT is an accelerator: without it pcre2_match interprets the pattern. */
    if (pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) != 0)
        SITS_DEBUG(SITS_SUB_TOK, "pcre2 jit not available for a tokenizer regex, interpreting");
    *re_p = re;
    return SITS_OK;
}

int sits_tok_regex_next(const pcre2_code *re, pcre2_match_data *md, const char *s, size_t n, size_t pos,
                        size_t *ms_p, size_t *me_p)
{
    for (;;) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
        /* rc 0: the ovector is too small for the groups; the whole match (pair 0) is still there */
        if (rc == PCRE2_ERROR_NOMATCH) return 1;
        if (rc < 0) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(rc, msg, sizeof(msg));
            TOK_ERR("tokenizer regex: %s", (char *)msg);
            return -1;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (ov[1] > ov[0]) {
            *ms_p = ov[0];
            *me_p = ov[1];
            return 0;
        }
        /* an empty match contributes nothing: step one character */
        if (ov[0] >= n) return 1;
        pos = ov[0] + 1;
        while (pos < n && ((unsigned char)s[pos] & 0xC0) == 0x80) pos++;
    }
}

sits_status_t sits_tok_regex_replace(const pcre2_code *re, const char *content, const char *s, size_t n,
                                     tok_buf_t *out)
{
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    if (!md) return SITS_ERR_NOMEM;
    sits_status_t st = SITS_OK;
    size_t pos = 0, ms, me, cl = strlen(content);
    int r;
    while ((r = sits_tok_regex_next(re, md, s, n, pos, &ms, &me)) == 0) {
        if (sits_tok_buf_put(out, s + pos, ms - pos) || sits_tok_buf_put(out, content, cl)) { st = SITS_ERR_NOMEM; break; }
        pos = me;
    }
    if (r < 0) st = SITS_ERR_INTERNAL;
    if (st == SITS_OK && sits_tok_buf_put(out, s + pos, n - pos)) st = SITS_ERR_NOMEM;
    pcre2_match_data_free(md);
    return st;
}

sits_status_t sits_tok_pattern_parse(const json_t *pat, const char *what, pcre2_code **re_p, char **str_p)
{
    const char *re = sits_tok_jstr(pat, "Regex"), *lit = sits_tok_jstr(pat, "String");
    *re_p = NULL;
    *str_p = NULL;
    if (lit) {
        if (!*lit) { TOK_ERR("tokenizer.json: %s with an empty String pattern", what); return SITS_ERR_FORMAT; }
        return (*str_p = strdup(lit)) ? SITS_OK : SITS_ERR_NOMEM;
    }
    if (!re) { TOK_ERR("tokenizer.json: %s without a String or Regex pattern", what); return SITS_ERR_FORMAT; }
    return sits_tok_regex_compile(re, 0, re_p);
}

const char *sits_tok_jstr(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

int sits_tok_jbool(const json_t *o, const char *key, int def)
{
    const json_t *v = json_object_get(o, key);
    if (json_is_boolean(v)) return json_is_true(v);
    return def;
}
