/* normalizers.c -- tokenizers' normalizers on UTF-8 strings (no offset tracking: ids need none).
 *
 * NFC/NFD/NFKC/NFKD (libutf8proc), Lowercase (Rust char::to_lowercase), Strip, StripAccents (drop M*),
 * Replace (String or Regex, every non-overlapping match left to right), Prepend (non-empty input only),
 * BertNormalizer (clean_text, handle_chinese_chars, strip_accents, lowercase, in that order), ByteLevel
 * (bytes -> GPT-2 alphabet) and Precompiled (SentencePiece precompiled_charsmap, as the spm_precompiled
 * crate: per extended grapheme cluster shorter than 6 bytes the first prefix match of the darts trie replaces
 * the whole cluster, otherwise each character is looked up alone). A Sequence is flattened at parse. */
#include <stdlib.h>
#include <string.h>
#ifdef HAVE_UTF8PROC
#include <utf8proc.h>
#endif
#include "tokenizer/tok_internal.h"

static int is_ascii(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0x80) return 0;
    return 1;
}

static sits_status_t nf_apply(const sits_tok_norm_t *nm, const char *in, size_t n, tok_buf_t *out)
{
    if (is_ascii(in, n)) return sits_tok_buf_put(out, in, n) ? SITS_ERR_NOMEM : SITS_OK;
#ifdef HAVE_UTF8PROC
    static const int flags[4] = { UTF8PROC_COMPOSE, UTF8PROC_DECOMPOSE, UTF8PROC_COMPOSE | UTF8PROC_COMPAT,
                                  UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT };
    utf8proc_uint8_t *r = NULL;
    utf8proc_ssize_t rn = utf8proc_map((const utf8proc_uint8_t *)in, (utf8proc_ssize_t)n, &r,
                                       (utf8proc_option_t)(UTF8PROC_STABLE | flags[nm->flag1]));
    if (rn < 0) { TOK_ERR("normalizer %s: %s", nm->ops->name, utf8proc_errmsg(rn)); return SITS_ERR_INVALID; }
    int bad = sits_tok_buf_put(out, (const char *)r, (size_t)rn);
    free(r);
    return bad ? SITS_ERR_NOMEM : SITS_OK;
#else
    TOK_ERR("normalizer %s needs libutf8proc for non-ASCII text; rebuild sits-dist with libutf8proc", nm->ops->name);
    return SITS_ERR_UNSUPPORTED;
#endif
}

static sits_status_t lower_apply(const sits_tok_norm_t *nm, const char *in, size_t n, tok_buf_t *out)
{
    (void)nm;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += sits_tok_utf8_next(in + i, n - i, &cp);
        if (sits_tok_lower_append(cp, out)) return SITS_ERR_NOMEM;
    }
    return SITS_OK;
}

static sits_status_t strip_apply(const sits_tok_norm_t *nm, const char *in, size_t n, tok_buf_t *out)
{
    size_t s = 0, e = n;
    uint32_t cp;
    if (nm->flag1)
        while (s < e) {
            size_t l = sits_tok_utf8_next(in + s, e - s, &cp);
            if (!sits_tok_is_white_space(cp)) break;
            s += l;
        }
    if (nm->flag2)
        while (e > s) {
            size_t p = e - 1;
            while (p > s && ((unsigned char)in[p] & 0xC0) == 0x80) p--;
            sits_tok_utf8_next(in + p, e - p, &cp);
            if (!sits_tok_is_white_space(cp)) break;
            e = p;
        }
    return sits_tok_buf_put(out, in + s, e - s) ? SITS_ERR_NOMEM : SITS_OK;
}

/* all_marks: drop M* (StripAccents), else only Mn (BertNormalizer) */
static sits_status_t drop_marks(const char *in, size_t n, int all_marks, tok_buf_t *out)
{
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l = sits_tok_utf8_next(in + i, n - i, &cp);
        int drop = all_marks ? sits_tok_is_mark(cp) : sits_tok_is_mark_nonspacing(cp);
        if (!drop && sits_tok_buf_put(out, in + i, l)) return SITS_ERR_NOMEM;
        i += l;
    }
    return SITS_OK;
}

static sits_status_t accents_apply(const sits_tok_norm_t *nm, const char *in, size_t n, tok_buf_t *out)
{
    (void)nm;
    return drop_marks(in, n, 1, out);
}

static sits_status_t replace_apply(const sits_tok_norm_t *nm, const char *in, size_t n, tok_buf_t *out)
{
    if (nm->re) return sits_tok_regex_replace(nm->re, nm->b, in, n, out);
    size_t pl = strlen(nm->a), cl = strlen(nm->b), run = 0;
    if (sits_tok_buf_reserve(out, n)) return SITS_ERR_NOMEM;
    for (size_t i = 0; i < n;) {
        if (i + pl <= n && memcmp(in + i, nm->a, pl) == 0) {
            if (sits_tok_buf_put(out, in + run, i - run) || sits_tok_buf_put(out, nm->b, cl)) return SITS_ERR_NOMEM;
            i += pl;
            run = i;
        } else i++;
    }
    return sits_tok_buf_put(out, in + run, n - run) ? SITS_ERR_NOMEM : SITS_OK;
}

static sits_status_t prepend_apply(const sits_tok_norm_t *nm, const char *in, size_t n, tok_buf_t *out)
{
    if (n && sits_tok_buf_put(out, nm->a, strlen(nm->a))) return SITS_ERR_NOMEM;
    return sits_tok_buf_put(out, in, n) ? SITS_ERR_NOMEM : SITS_OK;
}

static int is_chinese(uint32_t c)
{
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* flag1 clean_text, flag2 handle_chinese_chars, flag3 strip_accents, flag4 lowercase */
static sits_status_t bert_apply(const sits_tok_norm_t *nm, const char *in, size_t n, tok_buf_t *out)
{
    tok_buf_t a = { 0 }, b = { 0 };
    sits_status_t st = SITS_ERR_NOMEM;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l = sits_tok_utf8_next(in + i, n - i, &cp);
        i += l;
        if (nm->flag1) {
            int ws = cp == '\t' || cp == '\n' || cp == '\r' || sits_tok_is_white_space(cp);
            if (cp == 0 || cp == 0xFFFD || (!ws && sits_tok_is_other(cp))) continue;
            if (ws) { if (sits_tok_buf_put(&a, " ", 1)) goto out; continue; }
        }
        if (nm->flag2 && is_chinese(cp)) {
            if (sits_tok_buf_put(&a, " ", 1) || sits_tok_buf_put(&a, in + i - l, l) || sits_tok_buf_put(&a, " ", 1)) goto out;
            continue;
        }
        if (sits_tok_buf_put(&a, in + i - l, l)) goto out;
    }
    if (sits_tok_buf_put(&a, "", 0)) goto out;
    if (nm->flag3) {
        sits_tok_norm_t nfd = { 0 };
        static const sits_tok_norm_ops_t nfd_ops = { "NFD", nf_apply };
        nfd.ops = &nfd_ops;
        nfd.flag1 = 1;
        if ((st = nf_apply(&nfd, a.p, a.n, &b)) != SITS_OK) goto out;
        a.n = 0;
        if ((st = drop_marks(b.p ? b.p : "", b.n, 0, &a)) != SITS_OK) goto out;
        st = SITS_ERR_NOMEM;
    }
    if (nm->flag4) {
        if ((st = lower_apply(nm, a.p ? a.p : "", a.n, out)) != SITS_OK) goto out;
    } else if (sits_tok_buf_put(out, a.p, a.n)) goto out;
    st = SITS_OK;
out:
    free(a.p);
    free(b.p);
    return st;
}

static sits_status_t bytelevel_apply(const sits_tok_norm_t *nm, const char *in, size_t n, tok_buf_t *out)
{
    (void)nm;
    char u[4];
    for (size_t i = 0; i < n; i++)
        if (sits_tok_buf_put(out, u, sits_tok_utf8_encode(sits_tok_byte_to_cp((uint8_t)in[i]), u))) return SITS_ERR_NOMEM;
    return SITS_OK;
}

/* ---- Precompiled: spm_precompiled's darts double array. A unit: has_leaf bit 8, value bits 0..30,
 * label bits 0..7 and 31, offset (unit >> 10) << ((unit & (1 << 9)) >> 6). */

static const char *precompiled_transform(const sits_tok_norm_t *nm, const char *s, size_t n)
{
    const uint32_t *a = nm->trie;
    size_t pos = 0;
    if (!nm->n_trie) return NULL;
    uint32_t unit = a[0];
    pos ^= (size_t)((unit >> 10) << ((unit & (1u << 9)) >> 6));
    for (size_t i = 0; i < n; i++) {
        uint8_t c = (uint8_t)s[i];
        if (!c) break;
        pos ^= c;
        if (pos >= nm->n_trie) return NULL;
        unit = a[pos];
        if ((unit & ((1u << 31) | 0xFF)) != c) return NULL;
        pos ^= (size_t)((unit >> 10) << ((unit & (1u << 9)) >> 6));
        if (pos >= nm->n_trie) return NULL;
        if ((unit >> 8) & 1) {  /* the first (shortest) prefix match wins */
            uint32_t v = a[pos] & 0x7FFFFFFFu;
            return v < nm->n_normalized ? nm->normalized + v : NULL;
        }
    }
    return NULL;
}

static sits_status_t precompiled_apply(const sits_tok_norm_t *nm, const char *in, size_t n, tok_buf_t *out)
{
#ifdef HAVE_UTF8PROC
    size_t i = 0;
    while (i < n) {
        /* extended grapheme cluster [i, e) */
        uint32_t cp, nx;
        size_t e = i + sits_tok_utf8_next(in + i, n - i, &cp);
        utf8proc_int32_t state = 0;
        while (e < n) {
            size_t l = sits_tok_utf8_next(in + e, n - e, &nx);
            if (utf8proc_grapheme_break_stateful((utf8proc_int32_t)cp, (utf8proc_int32_t)nx, &state)) break;
            cp = nx;
            e += l;
        }
        const char *r = e - i < 6 ? precompiled_transform(nm, in + i, e - i) : NULL;
        if (r) {
            if (sits_tok_buf_put(out, r, strlen(r))) return SITS_ERR_NOMEM;
        } else {
            for (size_t k = i; k < e;) {
                size_t l = sits_tok_utf8_next(in + k, e - k, &nx);
                const char *cr = precompiled_transform(nm, in + k, l);
                if (cr ? sits_tok_buf_put(out, cr, strlen(cr)) : sits_tok_buf_put(out, in + k, l)) return SITS_ERR_NOMEM;
                k += l;
            }
        }
        i = e;
    }
    return SITS_OK;
#else
    (void)nm; (void)in; (void)n; (void)out;
    TOK_ERR("normalizer Precompiled needs libutf8proc (grapheme clusters); rebuild sits-dist with libutf8proc");
    return SITS_ERR_UNSUPPORTED;
#endif
}

static int b64v(char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

static sits_status_t precompiled_parse(sits_tok_norm_t *nm, const char *b64)
{
    size_t n = strlen(b64), o = 0;
    unsigned char *bytes = malloc(n / 4 * 3 + 3);
    if (!bytes) return SITS_ERR_NOMEM;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n && b64[i] != '='; i++) {
        int v = b64v(b64[i]);
        if (v < 0) { free(bytes); TOK_ERR("tokenizer.json: Precompiled charsmap is not base64"); return SITS_ERR_FORMAT; }
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) { bits -= 8; bytes[o++] = (unsigned char)(acc >> bits); }
    }
    sits_status_t st = SITS_ERR_FORMAT;
    if (o < 4) goto bad;
    uint32_t trie_size = (uint32_t)bytes[0] | (uint32_t)bytes[1] << 8 | (uint32_t)bytes[2] << 16 | (uint32_t)bytes[3] << 24;
    if ((size_t)trie_size + 4 > o) goto bad;
    nm->n_trie = trie_size / 4;
    nm->trie = malloc((nm->n_trie ? nm->n_trie : 1) * sizeof(uint32_t));
    nm->n_normalized = o - 4 - trie_size;
    nm->normalized = malloc(nm->n_normalized + 1);
    if (!nm->trie || !nm->normalized) { st = SITS_ERR_NOMEM; goto bad; }
    for (size_t k = 0; k < nm->n_trie; k++) {
        const unsigned char *u = bytes + 4 + 4 * k;
        nm->trie[k] = (uint32_t)u[0] | (uint32_t)u[1] << 8 | (uint32_t)u[2] << 16 | (uint32_t)u[3] << 24;
    }
    memcpy(nm->normalized, bytes + 4 + trie_size, nm->n_normalized);
    nm->normalized[nm->n_normalized] = 0;
    free(bytes);
    return SITS_OK;
bad:
    free(bytes);
    if (st == SITS_ERR_FORMAT) TOK_ERR("tokenizer.json: Precompiled charsmap truncated");
    return st;
}

static const sits_tok_norm_ops_t NF_OPS[4] = { { "NFC", nf_apply }, { "NFD", nf_apply }, { "NFKC", nf_apply },
                                               { "NFKD", nf_apply } };
static const sits_tok_norm_ops_t LOWER_OPS = { "Lowercase", lower_apply }, STRIP_OPS = { "Strip", strip_apply },
    ACCENTS_OPS = { "StripAccents", accents_apply }, REPLACE_OPS = { "Replace", replace_apply },
    PREPEND_OPS = { "Prepend", prepend_apply }, BERT_OPS = { "BertNormalizer", bert_apply },
    BYTELEVEL_OPS = { "ByteLevel", bytelevel_apply }, PRECOMPILED_OPS = { "Precompiled", precompiled_apply };

static sits_status_t parse_one(const json_t *o, sits_tok_norm_t **steps_p, size_t *n_p)
{
    if (!o || json_is_null(o)) return SITS_OK;
    const char *type = sits_tok_jstr(o, "type");
    if (!type) { TOK_ERR("tokenizer.json: normalizer without type"); return SITS_ERR_FORMAT; }
    if (!strcmp(type, "Sequence")) {
        const json_t *arr = json_object_get(o, "normalizers"), *v;
        size_t i;
        json_array_foreach(arr, i, v) SITS_CHECK(parse_one(v, steps_p, n_p));
        return SITS_OK;
    }
    sits_tok_norm_t *p = realloc(*steps_p, (*n_p + 1) * sizeof(*p));
    if (!p) return SITS_ERR_NOMEM;
    *steps_p = p;
    sits_tok_norm_t *nm = &p[*n_p];
    memset(nm, 0, sizeof(*nm));
    sits_status_t st = SITS_OK;
    for (int k = 0; k < 4; k++)
        if (!strcmp(type, NF_OPS[k].name)) { nm->ops = &NF_OPS[k]; nm->flag1 = k; }
    if (nm->ops) {
#ifndef HAVE_UTF8PROC
        SITS_WARN(SITS_SUB_TOK, "normalizer %s: built without libutf8proc, non-ASCII text will be refused", type);
#endif
    } else if (!strcmp(type, "Lowercase")) nm->ops = &LOWER_OPS;
    else if (!strcmp(type, "StripAccents")) nm->ops = &ACCENTS_OPS;
    else if (!strcmp(type, "ByteLevel")) nm->ops = &BYTELEVEL_OPS;
    else if (!strcmp(type, "Strip")) {
        nm->ops = &STRIP_OPS;
        nm->flag1 = sits_tok_jbool(o, "strip_left", 1);
        nm->flag2 = sits_tok_jbool(o, "strip_right", 1);
    } else if (!strcmp(type, "Prepend")) {
        const char *s = sits_tok_jstr(o, "prepend");
        if (!s) { TOK_ERR("tokenizer.json: Prepend normalizer without prepend"); return SITS_ERR_FORMAT; }
        nm->ops = &PREPEND_OPS;
        if (!(nm->a = strdup(s))) st = SITS_ERR_NOMEM;
    } else if (!strcmp(type, "Replace")) {
        const char *c = sits_tok_jstr(o, "content");
        if (!c) { TOK_ERR("tokenizer.json: Replace normalizer without content"); return SITS_ERR_FORMAT; }
        nm->ops = &REPLACE_OPS;
        st = sits_tok_pattern_parse(json_object_get(o, "pattern"), "Replace normalizer", &nm->re, &nm->a);
        if (st == SITS_OK && !(nm->b = strdup(c))) st = SITS_ERR_NOMEM;
    } else if (!strcmp(type, "BertNormalizer")) {
        nm->ops = &BERT_OPS;
        nm->flag1 = sits_tok_jbool(o, "clean_text", 1);
        nm->flag2 = sits_tok_jbool(o, "handle_chinese_chars", 1);
        nm->flag4 = sits_tok_jbool(o, "lowercase", 1);
        nm->flag3 = sits_tok_jbool(o, "strip_accents", nm->flag4);  /* null: follows lowercase */
    } else if (!strcmp(type, "Precompiled")) {
        const char *s = sits_tok_jstr(o, "precompiled_charsmap");
        nm->ops = &PRECOMPILED_OPS;
        if (s && *s) st = precompiled_parse(nm, s);
    } else {
        TOK_ERR("unsupported tokenizer component: normalizer %s", type);
        return SITS_ERR_UNSUPPORTED;
    }
    (*n_p)++;  /* counted even on failure so that sits_tok_norm_free releases what was set */
    return st;
}

sits_status_t sits_tok_norm_parse(const json_t *o, sits_tok_norm_t **steps_p, size_t *n_p)
{
    return parse_one(o, steps_p, n_p);
}

sits_status_t sits_tok_norm_run(const sits_tok_norm_t *steps, size_t n, const char *in, size_t len, tok_buf_t *tmp,
                                tok_buf_t *out)
{
    tok_buf_t *bufs[2] = { out, tmp };
    /* the last step writes into out: start in the buffer that makes that so */
    int w = (n % 2) ? 0 : 1;
    const char *cur = in;
    size_t curn = len;
    if (n == 0) {
        out->n = 0;
        return sits_tok_buf_put(out, in, len) ? SITS_ERR_NOMEM : SITS_OK;
    }
    for (size_t s = 0; s < n; s++) {
        tok_buf_t *dst = bufs[w];
        dst->n = 0;
        if (sits_tok_buf_put(dst, "", 0)) return SITS_ERR_NOMEM;
        SITS_CHECK(steps[s].ops->apply(&steps[s], cur, curn, dst));
        cur = dst->p;
        curn = dst->n;
        w ^= 1;
    }
    return SITS_OK;
}

void sits_tok_norm_free(sits_tok_norm_t *steps, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(steps[i].a);
        free(steps[i].b);
        if (steps[i].re) pcre2_code_free(steps[i].re);
        free(steps[i].trie);
        free(steps[i].normalized);
    }
    free(steps);
}
