/* decoders.c -- ids -> text: tokenizers' decoders (decode_chain over a list of strings, joined at the end)
 * and the streaming detokenizer.
 *
 * Decoders: ByteLevel (each token's characters -> bytes, a token with a character outside the GPT-2
 * alphabet contributes its raw UTF-8; one lossy string: each maximal invalid subpart -> U+FFFD, as Rust's
 * String::from_utf8_lossy), Metaspace (replacement -> ' ', dropped in the first token unless
 * prepend_scheme never), WordPiece (prefix removed from continuation tokens, ' ' before the others,
 * optional cleanup), BPEDecoder (suffix -> ' ', '' in the last token), Replace (String or Regex),
 * ByteFallback (a run of <0xXX> tokens -> its UTF-8 string, or one U+FFFD per byte when invalid), Fuse
 * (join), Strip (up to start/stop copies of a character at each end of every token), CTC (dedup, pad
 * removed, cleanup, word delimiter -> ' ', empty dropped), Sequence (flattened). No decoder: tokens
 * joined by ' '.
 *
 * Streaming keeps the ids since a prefix offset and decodes two windows per push, [prefix, read) and
 * [prefix, end): the new text is the second minus the first when it extends it and does not end in U+FFFD
 * (an incomplete character); then prefix = read, read = end. Decoders only look at neighbours and at the
 * first/last token, and both windows share their first token, so the pieces add up to the full decode; once
 * the window has left the first id, the first-token effects of the whole text (Metaspace's dropped
 * replacement, the start of a Strip after Fuse) are turned off.
 * With a ByteFallback decoder a run of byte tokens decodes as a whole (valid UTF-8 or one U+FFFD per byte),
 * so nothing is emitted while the last id is a byte token. A Strip with stop > 0 after Fuse cuts the end of
 * the whole text: the windows are decoded without that cut, and up to `stop` trailing copies of its
 * character are held back until more text follows (dropped at the flush). */
#include <stdlib.h>
#include <string.h>
#include "tokenizer/tok_internal.h"

static const char FFFD[3] = { (char)0xEF, (char)0xBF, (char)0xBD };

static int sput(tok_strs_t *l, const char *s, size_t n)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 32;
        tok_buf_t *p = realloc(l->v, cap * sizeof(*p));
        if (!p) return -1;
        memset(p + l->cap, 0, (cap - l->cap) * sizeof(*p));
        l->v = p;
        l->cap = cap;
    }
    l->v[l->n].n = 0;
    if (sits_tok_buf_put(&l->v[l->n], s, n)) return -1;
    l->n++;
    return 0;
}

static void strs_free(tok_strs_t *l)
{
    for (size_t i = 0; i < l->cap; i++) free(l->v[i].p);
    free(l->v);
}

/* Append the lossy UTF-8 conversion of s[0..n) to out. */
static int lossy_append(tok_buf_t *out, const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t k;
        int r = sits_tok_utf8_step(s + i, n - i, &k);
        if (r == 1 ? sits_tok_buf_put(out, (const char *)s + i, k) : sits_tok_buf_put(out, FFFD, 3)) return -1;
        i += r == 2 ? n - i : k;
    }
    return 0;
}

static int replace_str(tok_buf_t *out, const char *s, size_t n, const char *pat, const char *rep)
{
    size_t pl = strlen(pat), rl = strlen(rep), run = 0;
    if (sits_tok_buf_put(out, "", 0)) return -1;
    for (size_t i = 0; i < n;) {
        if (i + pl <= n && memcmp(s + i, pat, pl) == 0) {
            if (sits_tok_buf_put(out, s + run, i - run) || sits_tok_buf_put(out, rep, rl)) return -1;
            i += pl;
            run = i;
        } else i++;
    }
    return sits_tok_buf_put(out, s + run, n - run);
}

static int bytelevel_apply(const sits_tok_dec_t *d, const tok_strs_t *in, tok_strs_t *out)
{
    (void)d;
    tok_buf_t bytes = { 0 }, text = { 0 };
    int bad = sits_tok_buf_put(&text, "", 0);
    for (size_t t = 0; t < in->n && !bad; t++) {
        const char *s = in->v[t].p;
        size_t n = in->v[t].n, start = bytes.n;
        for (size_t i = 0; i < n && !bad;) {
            uint32_t cp;
            i += sits_tok_utf8_next(s + i, n - i, &cp);
            int b = sits_tok_cp_to_byte(cp);
            if (b < 0) {
                bytes.n = start;
                bad = sits_tok_buf_put(&bytes, s, n);
                break;
            }
            char c = (char)b;
            bad = sits_tok_buf_put(&bytes, &c, 1);
        }
    }
    bad = bad || lossy_append(&text, (const unsigned char *)bytes.p, bytes.n) || sput(out, text.p, text.n);
    free(bytes.p);
    free(text.p);
    return bad ? -1 : 0;
}

static int metaspace_apply(const sits_tok_dec_t *d, const tok_strs_t *in, tok_strs_t *out)
{
    tok_buf_t b = { 0 };
    int bad = 0;
    for (size_t i = 0; i < in->n && !bad; i++) {
        b.n = 0;
        int drop = i == 0 && d->prepend != SITS_PREPEND_NEVER;
        bad = replace_str(&b, in->v[i].p, in->v[i].n, d->a, drop ? "" : " ") || sput(out, b.p, b.n);
    }
    free(b.p);
    return bad ? -1 : 0;
}

static int cleanup(tok_buf_t *b, tok_buf_t *tmp)
{
    static const char *const R[][2] = { { " .", "." }, { " ?", "?" }, { " !", "!" }, { " ,", "," }, { " ' ", "'" },
                                        { " n't", "n't" }, { " 'm", "'m" }, { " do not", " don't" }, { " 's", "'s" },
                                        { " 've", "'ve" }, { " 're", "'re" } };
    for (size_t k = 0; k < sizeof(R) / sizeof(R[0]); k++) {
        tmp->n = 0;
        if (replace_str(tmp, b->p ? b->p : "", b->n, R[k][0], R[k][1])) return -1;
        tok_buf_t x = *b;
        *b = *tmp;
        *tmp = x;
    }
    return 0;
}

static int wordpiece_apply(const sits_tok_dec_t *d, const tok_strs_t *in, tok_strs_t *out)
{
    tok_buf_t b = { 0 }, tmp = { 0 };
    size_t pl = strlen(d->a);
    int bad = 0;
    for (size_t i = 0; i < in->n && !bad; i++) {
        const char *s = in->v[i].p;
        size_t n = in->v[i].n;
        b.n = 0;
        if (i != 0 && n >= pl && memcmp(s, d->a, pl) == 0) bad = sits_tok_buf_put(&b, s + pl, n - pl);
        else bad = (i != 0 && sits_tok_buf_put(&b, " ", 1)) || sits_tok_buf_put(&b, s, n);
        if (!bad && d->cleanup) bad = cleanup(&b, &tmp);
        if (!bad) bad = sput(out, b.p, b.n);
    }
    free(b.p);
    free(tmp.p);
    return bad ? -1 : 0;
}

static int bpe_apply(const sits_tok_dec_t *d, const tok_strs_t *in, tok_strs_t *out)
{
    tok_buf_t b = { 0 };
    int bad = 0;
    for (size_t i = 0; i < in->n && !bad; i++) {
        b.n = 0;
        bad = replace_str(&b, in->v[i].p, in->v[i].n, d->a, i + 1 == in->n ? "" : " ") || sput(out, b.p, b.n);
    }
    free(b.p);
    return bad ? -1 : 0;
}

static int replace_apply(const sits_tok_dec_t *d, const tok_strs_t *in, tok_strs_t *out)
{
    tok_buf_t b = { 0 };
    int bad = 0;
    for (size_t i = 0; i < in->n && !bad; i++) {
        b.n = 0;
        if (d->re) bad = sits_tok_buf_put(&b, "", 0) || sits_tok_regex_replace(d->re, d->b, in->v[i].p, in->v[i].n, &b) != SITS_OK;
        else bad = replace_str(&b, in->v[i].p, in->v[i].n, d->a, d->b);
        if (!bad) bad = sput(out, b.p, b.n);
    }
    free(b.p);
    return bad ? -1 : 0;
}

static int hexv(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static int byte_token(const char *s, size_t n, unsigned char *b_p)
{
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>' || hexv(s[3]) < 0 || hexv(s[4]) < 0) return 0;
    *b_p = (unsigned char)(hexv(s[3]) * 16 + hexv(s[4]));
    return 1;
}

static int bytefallback_apply(const sits_tok_dec_t *d, const tok_strs_t *in, tok_strs_t *out)
{
    (void)d;
    tok_buf_t run = { 0 };
    int bad = 0;
    for (size_t i = 0; i <= in->n && !bad; i++) {
        unsigned char byte;
        if (i < in->n && byte_token(in->v[i].p, in->v[i].n, &byte)) {
            bad = sits_tok_buf_put(&run, (const char *)&byte, 1);
            continue;
        }
        if (run.n) {
            if (sits_utf8_valid(run.p, run.n, NULL)) bad = sput(out, run.p, run.n);
            else
                for (size_t k = 0; k < run.n && !bad; k++) bad = sput(out, FFFD, 3);
            run.n = 0;
        }
        if (i < in->n && !bad) bad = sput(out, in->v[i].p, in->v[i].n);
    }
    free(run.p);
    return bad ? -1 : 0;
}

static int fuse_apply(const sits_tok_dec_t *d, const tok_strs_t *in, tok_strs_t *out)
{
    (void)d;
    tok_buf_t b = { 0 };
    int bad = sits_tok_buf_put(&b, "", 0);
    for (size_t i = 0; i < in->n && !bad; i++) bad = sits_tok_buf_put(&b, in->v[i].p, in->v[i].n);
    bad = bad || sput(out, b.p, b.n);
    free(b.p);
    return bad ? -1 : 0;
}

static int strip_apply(const sits_tok_dec_t *d, const tok_strs_t *in, tok_strs_t *out)
{
    size_t cl = strlen(d->a);
    for (size_t i = 0; i < in->n; i++) {
        const char *s = in->v[i].p;
        size_t n = in->v[i].n, a = 0, e = n;
        for (int k = 0; k < d->start && a + cl <= n && memcmp(s + a, d->a, cl) == 0; k++) a += cl;
        for (int k = 0; k < d->stop && e >= a + cl && memcmp(s + e - cl, d->a, cl) == 0; k++) e -= cl;
        if (sput(out, s + a, e - a)) return -1;
    }
    return 0;
}

static int ctc_apply(const sits_tok_dec_t *d, const tok_strs_t *in, tok_strs_t *out)
{
    tok_buf_t b = { 0 }, tmp = { 0 };
    int bad = 0;
    for (size_t i = 0; i < in->n && !bad; i++) {
        if (i > 0 && in->v[i].n == in->v[i - 1].n && memcmp(in->v[i].p, in->v[i - 1].p, in->v[i].n) == 0) continue;
        b.n = 0;
        bad = replace_str(&b, in->v[i].p, in->v[i].n, d->a, "");
        if (!bad && d->cleanup) {
            bad = cleanup(&b, &tmp);
            tmp.n = 0;
            if (!bad) bad = replace_str(&tmp, b.p, b.n, d->b, " ");
            tok_buf_t x = b;
            b = tmp;
            tmp = x;
        }
        if (!bad && b.n) bad = sput(out, b.p, b.n);
    }
    free(b.p);
    free(tmp.p);
    return bad ? -1 : 0;
}

static const sits_tok_dec_ops_t BYTELEVEL_OPS = { "ByteLevel", bytelevel_apply },
    METASPACE_OPS = { "Metaspace", metaspace_apply }, WORDPIECE_OPS = { "WordPiece", wordpiece_apply },
    BPE_OPS = { "BPEDecoder", bpe_apply }, REPLACE_OPS = { "Replace", replace_apply },
    BYTEFALLBACK_OPS = { "ByteFallback", bytefallback_apply }, FUSE_OPS = { "Fuse", fuse_apply },
    STRIP_OPS = { "Strip", strip_apply }, CTC_OPS = { "CTC", ctc_apply };

/* ------------------------------------------------------------------ parse */

static sits_status_t dup_str(const json_t *o, const char *key, const char *def, char **dst_p)
{
    const char *s = sits_tok_jstr(o, key);
    if (!s) s = def;
    if (!s) { TOK_ERR("tokenizer.json: decoder without %s", key); return SITS_ERR_FORMAT; }
    return (*dst_p = strdup(s)) ? SITS_OK : SITS_ERR_NOMEM;
}

static sits_status_t parse_one(const json_t *o, sits_tok_dec_t **steps_p, size_t *n_p)
{
    if (!o || json_is_null(o)) return SITS_OK;
    const char *type = sits_tok_jstr(o, "type");
    if (!type) { TOK_ERR("tokenizer.json: decoder without type"); return SITS_ERR_FORMAT; }
    if (!strcmp(type, "Sequence")) {
        const json_t *arr = json_object_get(o, "decoders"), *v;
        size_t i;
        json_array_foreach(arr, i, v) SITS_CHECK(parse_one(v, steps_p, n_p));
        return SITS_OK;
    }
    static const sits_tok_dec_ops_t *const ALL[] = { &BYTELEVEL_OPS, &METASPACE_OPS, &WORDPIECE_OPS, &BPE_OPS,
                                                     &REPLACE_OPS, &BYTEFALLBACK_OPS, &FUSE_OPS, &STRIP_OPS, &CTC_OPS };
    const sits_tok_dec_ops_t *ops = NULL;
    for (size_t k = 0; k < sizeof(ALL) / sizeof(ALL[0]); k++)
        if (!strcmp(type, ALL[k]->name)) ops = ALL[k];
    if (!ops) { TOK_ERR("unsupported tokenizer component: decoder %s", type); return SITS_ERR_UNSUPPORTED; }
    sits_tok_dec_t *p = realloc(*steps_p, (*n_p + 1) * sizeof(*p));
    if (!p) return SITS_ERR_NOMEM;
    *steps_p = p;
    sits_tok_dec_t *d = &p[(*n_p)++];
    memset(d, 0, sizeof(*d));
    d->ops = ops;
    if (ops == &METASPACE_OPS) {
        SITS_CHECK(dup_str(o, "replacement", NULL, &d->a));
        return sits_tok_prepend_parse(o, &d->prepend);
    }
    if (ops == &WORDPIECE_OPS) {
        d->cleanup = sits_tok_jbool(o, "cleanup", 1);
        return dup_str(o, "prefix", "##", &d->a);
    }
    if (ops == &BPE_OPS) return dup_str(o, "suffix", "</w>", &d->a);
    if (ops == &REPLACE_OPS) {
        SITS_CHECK(sits_tok_pattern_parse(json_object_get(o, "pattern"), "Replace decoder", &d->re, &d->a));
        return dup_str(o, "content", NULL, &d->b);
    }
    if (ops == &STRIP_OPS) {
        uint32_t cp;
        SITS_CHECK(dup_str(o, "content", NULL, &d->a));
        if (!*d->a || sits_tok_utf8_next(d->a, strlen(d->a), &cp) != strlen(d->a)) {
            TOK_ERR("tokenizer.json: Strip decoder content must be one character");
            return SITS_ERR_FORMAT;
        }
        d->start = (int)json_integer_value(json_object_get(o, "start"));
        d->stop = (int)json_integer_value(json_object_get(o, "stop"));
        return SITS_OK;
    }
    if (ops == &CTC_OPS) {
        d->cleanup = sits_tok_jbool(o, "cleanup", 1);
        SITS_CHECK(dup_str(o, "pad_token", "<pad>", &d->a));
        return dup_str(o, "word_delimiter_token", "|", &d->b);
    }
    return SITS_OK;
}

sits_status_t sits_tok_dec_parse(const json_t *o, sits_tok_dec_t **steps_p, size_t *n_p)
{
    return parse_one(o, steps_p, n_p);
}

void sits_tok_dec_free(sits_tok_dec_t *steps, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(steps[i].a);
        free(steps[i].b);
        if (steps[i].re) pcre2_code_free(steps[i].re);
    }
    free(steps);
}

/* ------------------------------------------------------------------ decode */

/* ids (already checked) -> text appended to out */
/* Streaming windows: DEC_STREAM leaves out the `stop` of a Strip after Fuse/ByteLevel (the streaming decoder
 * applies it to the end of the stream); DEC_MID decodes ids from the middle of the text: no Metaspace
 * first-token drop, no `start` of a Strip after Fuse/ByteLevel. */
enum { DEC_STREAM = 1, DEC_MID = 2 };
typedef struct { tok_strs_t a, b; } dec_scratch_t;  /* string lists reused across calls */

static sits_status_t decode_ids(const sits_tokenizer_t *t, const int32_t *ids, size_t n, int skip_special, int mode,
                                dec_scratch_t *sc, tok_buf_t *out)
{
    tok_strs_t a = sc->a, b = sc->b;
    a.n = b.n = 0;
    int bad = sits_tok_buf_put(out, "", 0);
    for (size_t i = 0; i < n && !bad; i++) {
        const sits_tok_entry_t *e = &t->tokens[ids[i]];
        if (skip_special && e->special) continue;
        bad = sput(&a, e->s, e->len);
    }
    if (!t->has_decoder) {
        for (size_t i = 0; i < a.n && !bad; i++) bad = (i && sits_tok_buf_put(out, " ", 1)) || sits_tok_buf_put(out, a.v[i].p, a.v[i].n);
    } else {
        int joined = 0;
        for (size_t s = 0; s < t->n_dec && !bad; s++) {
            b.n = 0;
            sits_tok_dec_t step = t->dec[s];
            if (joined && step.ops == &STRIP_OPS) {
                if (mode & DEC_STREAM) step.stop = 0;
                if (mode & DEC_MID) step.start = 0;
            }
            if ((mode & DEC_MID) && step.ops == &METASPACE_OPS) step.prepend = SITS_PREPEND_NEVER;
            joined |= step.ops == &FUSE_OPS || step.ops == &BYTELEVEL_OPS;
            bad = step.ops->apply(&step, &a, &b);
            tok_strs_t x = a;
            a = b;
            b = x;
        }
        for (size_t i = 0; i < a.n && !bad; i++) bad = sits_tok_buf_put(out, a.v[i].p, a.v[i].n);
    }
    sc->a = a;
    sc->b = b;
    return bad ? SITS_ERR_NOMEM : SITS_OK;
}

static sits_status_t check_ids(const sits_tokenizer_t *t, const int32_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || (size_t)ids[i] >= t->vocab_size || !t->tokens[ids[i]].s) {
            TOK_ERR("decode: id %d is outside the vocabulary (%zu)", ids[i], t->vocab_size);
            return SITS_ERR_INVALID;
        }
    return SITS_OK;
}

sits_status_t sits_tokenizer_decode(const sits_tokenizer_t *t, const int32_t *ids, size_t n, int skip_special,
                                    char **text_p, size_t *len_p)
{
    tok_buf_t out = { 0 };
    SITS_CHECK(check_ids(t, ids, n));
    dec_scratch_t sc = { 0 };
    sits_status_t st = decode_ids(t, ids, n, skip_special, 0, &sc, &out);
    strs_free(&sc.a);
    strs_free(&sc.b);
    if (st != SITS_OK) {
        TOK_ERR("out of memory decoding %zu ids", n);
        free(out.p);
        return st;
    }
    *text_p = out.p;
    *len_p = out.n;
    return SITS_OK;
}

/* ------------------------------------------------------------------ streaming */

struct sits_detok {
    const sits_tokenizer_t *tok;
    int skip_special;
    tok_ids_t ids;        /* ids since the window start (specials already dropped when skipped) */
    size_t read;          /* ids[0..read) have been emitted */
    int hold_byte_runs;   /* ByteFallback: a run of <0xXX> tokens decodes only once it has ended */
    const sits_tok_dec_t *end_strip;  /* a Strip with stop > 0 after Fuse/ByteLevel: it cuts the end of the text */
    tok_buf_t tail;       /* end_strip: trailing copies of its character held back (at most stop) */
    int mid;              /* the window no longer starts at the first id */
    dec_scratch_t sc;
    tok_buf_t prev, cur, out;
};

sits_status_t sits_detok_create(const sits_tokenizer_t *t, int skip_special, sits_detok_t **dt_p)
{
    sits_detok_t *d = calloc(1, sizeof(*d));
    if (!d) return SITS_ERR_NOMEM;
    d->tok = t;
    d->skip_special = skip_special;
    int joined = 0;
    for (size_t s = 0; s < t->n_dec; s++) {
        d->hold_byte_runs |= t->dec[s].ops == &BYTEFALLBACK_OPS;
        joined |= t->dec[s].ops == &FUSE_OPS || t->dec[s].ops == &BYTELEVEL_OPS;
        if (joined && t->dec[s].ops == &STRIP_OPS && t->dec[s].stop > 0 && !d->end_strip) d->end_strip = &t->dec[s];
    }
    *dt_p = d;
    return SITS_OK;
}

void sits_detok_destroy(sits_detok_t *d)
{
    if (!d) return;
    free(d->ids.p);
    free(d->prev.p);
    free(d->cur.p);
    free(d->out.p);
    free(d->tail.p);
    strs_free(&d->sc.a);
    strs_free(&d->sc.b);
    free(d);
}

/* Emit what [0, end) adds to [0, read); final: emit even a trailing U+FFFD. */
static sits_status_t detok_step(sits_detok_t *d, int final, const char **text_p, size_t *len_p)
{
    static const char EMPTY[1] = "";
    unsigned char byte;
    d->prev.n = d->cur.n = d->out.n = 0;
    *text_p = EMPTY;
    *len_p = 0;
    if (!final && d->hold_byte_runs && d->ids.n) {
        const sits_tok_entry_t *e = &d->tok->tokens[d->ids.p[d->ids.n - 1]];
        if (byte_token(e->s, e->len, &byte)) return SITS_OK;
    }
    int mode = DEC_STREAM | (d->mid ? DEC_MID : 0);
    SITS_CHECK(decode_ids(d->tok, d->ids.p, d->read, 0, mode, &d->sc, &d->prev));
    SITS_CHECK(decode_ids(d->tok, d->ids.p, d->ids.n, 0, mode, &d->sc, &d->cur));
    if (sits_tok_buf_put(&d->out, "", 0)) return SITS_ERR_NOMEM;
    int extends = d->cur.n > d->prev.n && memcmp(d->cur.p, d->prev.p, d->prev.n) == 0;
    int incomplete = d->cur.n >= 3 && memcmp(d->cur.p + d->cur.n - 3, FFFD, 3) == 0;
    if (extends && (final || !incomplete)) {
        if (sits_tok_buf_put(&d->out, d->cur.p + d->prev.n, d->cur.n - d->prev.n)) return SITS_ERR_NOMEM;
        /* the next window starts at the first id not yet read */
        memmove(d->ids.p, d->ids.p + d->read, (d->ids.n - d->read) * sizeof(int32_t));
        d->ids.n -= d->read;
        d->mid |= d->read > 0;
        d->read = d->ids.n;
    }
    if (d->end_strip) {
        /* out = tail + out; hold back its trailing copies of the strip character (at most stop); at the end of
         * the stream they are what the Strip removes */
        const char *c = d->end_strip->a;
        size_t cl = strlen(c), keep = 0;
        if (sits_tok_buf_put(&d->tail, d->out.p, d->out.n)) return SITS_ERR_NOMEM;
        while (keep < (size_t)d->end_strip->stop && d->tail.n >= (keep + 1) * cl &&
               memcmp(d->tail.p + d->tail.n - (keep + 1) * cl, c, cl) == 0) keep++;
        d->out.n = 0;
        if (sits_tok_buf_put(&d->out, d->tail.p, d->tail.n - keep * cl)) return SITS_ERR_NOMEM;
        memmove(d->tail.p, d->tail.p + d->tail.n - keep * cl, keep * cl);
        d->tail.n = keep * cl;
        if (final) d->tail.n = 0;
    }
    *text_p = d->out.p;
    *len_p = d->out.n;
    return SITS_OK;
}

sits_status_t sits_detok_push(sits_detok_t *d, int32_t id, const char **text_p, size_t *len_p)
{
    static const char EMPTY[1] = "";
    *text_p = EMPTY;
    *len_p = 0;
    SITS_CHECK(check_ids(d->tok, &id, 1));
    if (d->skip_special && d->tok->tokens[id].special) return SITS_OK;
    if (sits_tok_ids_push(&d->ids, id)) return SITS_ERR_NOMEM;
    return detok_step(d, 0, text_p, len_p);
}

sits_status_t sits_detok_flush(sits_detok_t *d, const char **text_p, size_t *len_p)
{
    return detok_step(d, 1, text_p, len_p);
}
