/* decode.c -- ids -> text (huggingface/tokenizers decoders) and the streaming detokenizer.
 *
 * Full decode runs the decoder chain over a list of strings exactly as tokenizers does: ByteLevel maps
 * each token's characters back to bytes (a token with a character outside the GPT-2 alphabet contributes
 * its raw UTF-8) and converts lossily (each maximal invalid subpart -> U+FFFD, as Rust's
 * String::from_utf8_lossy); Replace / ByteFallback (a run of <0xXX> tokens -> its UTF-8 string, or one
 * U+FFFD per byte when invalid) / Fuse / Strip / Metaspace act on the list; the result is joined.
 *
 * The streaming decoder produces the same text incrementally and never emits a broken UTF-8 sequence:
 * ByteLevel holds an incomplete trailing sequence; ByteFallback holds a run of byte tokens until the run
 * ends; a Strip after Fuse strips the start of the whole output once. */
#include <stdlib.h>
#include <string.h>
#include "tokenizer/tok_internal.h"
#include "util/log.h"

typedef struct { char *p; size_t n, cap; } dbuf_t;

static int dput(dbuf_t *b, const void *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return -1;
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

static const char FFFD[3] = { (char)0xEF, (char)0xBF, (char)0xBD };

/* Append the lossy UTF-8 conversion of s[0..n) to out. When !final an incomplete sequence at the end is
 * left unconsumed. Returns the number of bytes consumed, or (size_t)-1 on allocation failure. */
static size_t lossy_append(dbuf_t *out, const unsigned char *s, size_t n, int final)
{
    size_t i = 0;
    while (i < n) {
        size_t k;
        int r = sits_tok_utf8_step(s + i, n - i, &k);
        if (r == 2 && !final) break;
        if (r == 1 ? dput(out, s + i, k) : dput(out, FFFD, 3)) return (size_t)-1;
        i += r == 2 ? n - i : k;
    }
    return i;
}

/* ByteLevel: token characters -> bytes, or the raw token when a character is outside the alphabet. */
static int bytelevel_bytes(const char *s, size_t n, dbuf_t *out)
{
    size_t start = out->n;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += sits_tok_utf8_next(s + i, n - i, &cp);
        int b = sits_tok_cp_to_byte(cp);
        if (b < 0) {
            out->n = start;
            return dput(out, s, n);
        }
        unsigned char c = (unsigned char)b;
        if (dput(out, &c, 1)) return -1;
    }
    return 0;
}

static int byte_token(const char *s, size_t n, unsigned char *b_p)
{
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return 0;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return 0;
        v = v * 16 + d;
    }
    *b_p = (unsigned char)v;
    return 1;
}

static int replace_into(dbuf_t *out, const char *s, size_t n, const char *pat, const char *rep)
{
    size_t pl = strlen(pat), rl = strlen(rep);
    for (size_t i = 0; i < n;) {
        if (i + pl <= n && memcmp(s + i, pat, pl) == 0) {
            if (dput(out, rep, rl)) return -1;
            i += pl;
        } else {
            if (dput(out, s + i, 1)) return -1;
            i++;
        }
    }
    return 0;
}

/* strip up to `start` leading copies of the one-character string c */
static size_t strip_len(const char *s, size_t n, const char *c, int start)
{
    size_t cl = strlen(c), off = 0;
    for (int k = 0; k < start && off + cl <= n && memcmp(s + off, c, cl) == 0; k++) off += cl;
    return off;
}

/* Metaspace decoder on token i */
static int metaspace_into(dbuf_t *out, const char *s, size_t n, const sits_tok_dec_t *d, size_t i)
{
    int drop = i == 0 && d->prepend != SITS_PREPEND_NEVER;
    return replace_into(out, s, n, d->a, drop ? "" : " ");
}

/* ------------------------------------------------------------------ full decode */

typedef struct { dbuf_t *v; size_t n, cap; } dlist_t;

static int dlist_push(dlist_t *l, const char *s, size_t n)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 32;
        dbuf_t *p = realloc(l->v, cap * sizeof(*p));
        if (!p) return -1;
        memset(p + l->cap, 0, (cap - l->cap) * sizeof(*p));
        l->v = p;
        l->cap = cap;
    }
    l->v[l->n].n = 0;
    if (dput(&l->v[l->n], s, n)) return -1;
    l->n++;
    return 0;
}

static void dlist_free(dlist_t *l)
{
    for (size_t i = 0; i < l->cap; i++) free(l->v[i].p);
    free(l->v);
}

sits_status_t sits_tokenizer_decode(const sits_tokenizer_t *t, const int32_t *ids, size_t n, int skip_special,
                                    char **text_p, size_t *len_p)
{
    sits_status_t st = SITS_ERR_NOMEM;
    dbuf_t out = { 0 }, tmp = { 0 };
    dlist_t a = { 0 }, b = { 0 };
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || (size_t)ids[i] >= t->vocab_size || !t->tokens[ids[i]].s) {
            SITS_ERROR(SITS_SUB_TOK, "decode: id %d is outside the vocabulary (%zu)", ids[i], t->vocab_size);
            st = SITS_ERR_INVALID;
            goto out;
        }
        const sits_tok_entry_t *e = &t->tokens[ids[i]];
        if (skip_special && e->special) continue;
        if (dlist_push(&a, e->s, e->len)) goto out;
    }
    if (dput(&out, "", 0)) goto out;
    if (!t->has_decoder) {
        for (size_t i = 0; i < a.n; i++)
            if ((i && dput(&out, " ", 1)) || dput(&out, a.v[i].p, a.v[i].n)) goto out;
    } else if (t->dec[0].kind == SITS_DEC_BYTELEVEL) {
        for (size_t i = 0; i < a.n; i++)
            if (bytelevel_bytes(a.v[i].p, a.v[i].n, &tmp)) goto out;
        if (lossy_append(&out, (const unsigned char *)tmp.p, tmp.n, 1) == (size_t)-1) goto out;
    } else {
        for (size_t s = 0; s < t->n_dec; s++) {
            const sits_tok_dec_t *d = &t->dec[s];
            b.n = 0;
            if (d->kind == SITS_DEC_BYTEFALLBACK) {
                tmp.n = 0;
                for (size_t i = 0; i <= a.n; i++) {
                    unsigned char byte;
                    if (i < a.n && byte_token(a.v[i].p, a.v[i].n, &byte)) {
                        if (dput(&tmp, &byte, 1)) goto out;
                        continue;
                    }
                    if (tmp.n) {
                        if (sits_utf8_valid(tmp.p, tmp.n, NULL)) {
                            if (dlist_push(&b, tmp.p, tmp.n)) goto out;
                        } else {
                            for (size_t k = 0; k < tmp.n; k++)
                                if (dlist_push(&b, FFFD, 3)) goto out;
                        }
                        tmp.n = 0;
                    }
                    if (i < a.n && dlist_push(&b, a.v[i].p, a.v[i].n)) goto out;
                }
            } else if (d->kind == SITS_DEC_FUSE) {
                tmp.n = 0;
                if (dput(&tmp, "", 0)) goto out;
                for (size_t i = 0; i < a.n; i++)
                    if (dput(&tmp, a.v[i].p, a.v[i].n)) goto out;
                if (dlist_push(&b, tmp.p, tmp.n)) goto out;
            } else {
                for (size_t i = 0; i < a.n; i++) {
                    tmp.n = 0;
                    if (dput(&tmp, "", 0)) goto out;
                    if (d->kind == SITS_DEC_REPLACE) {
                        if (replace_into(&tmp, a.v[i].p, a.v[i].n, d->a, d->b)) goto out;
                    } else if (d->kind == SITS_DEC_METASPACE) {
                        if (metaspace_into(&tmp, a.v[i].p, a.v[i].n, d, i)) goto out;
                    } else {  /* STRIP */
                        size_t off = strip_len(a.v[i].p, a.v[i].n, d->a, d->start);
                        if (dput(&tmp, a.v[i].p + off, a.v[i].n - off)) goto out;
                    }
                    if (dlist_push(&b, tmp.p, tmp.n)) goto out;
                }
            }
            dlist_t x = a;
            a = b;
            b = x;
        }
        for (size_t i = 0; i < a.n; i++)
            if (dput(&out, a.v[i].p, a.v[i].n)) goto out;
    }
    *text_p = out.p;
    *len_p = out.n;
    out.p = NULL;
    st = SITS_OK;
out:
    if (st == SITS_ERR_NOMEM) SITS_ERROR(SITS_SUB_TOK, "out of memory decoding %zu ids", n);
    free(out.p);
    free(tmp.p);
    dlist_free(&a);
    dlist_free(&b);
    return st;
}

/* ------------------------------------------------------------------ streaming */

struct sits_detok {
    const sits_tokenizer_t *tok;
    int skip_special;
    size_t count;        /* tokens seen (after skipping) */
    size_t fuse_at;      /* index in dec of the first Fuse, n_dec when none */
    size_t bf_at;        /* index of ByteFallback, n_dec when none */
    int strip_left;      /* whole-output Strip still to apply (Strip after Fuse) */
    const sits_tok_dec_t *strip_whole;
    dbuf_t pending;      /* ByteLevel: bytes of an incomplete UTF-8 sequence; else: the byte-token run */
    dbuf_t out, t1, t2;
};

sits_status_t sits_detok_create(const sits_tokenizer_t *t, int skip_special, sits_detok_t **dt_p)
{
    sits_detok_t *d = calloc(1, sizeof(*d));
    if (!d) return SITS_ERR_NOMEM;
    d->tok = t;
    d->skip_special = skip_special;
    d->fuse_at = d->bf_at = t->n_dec;
    for (size_t s = 0; s < t->n_dec; s++) {
        if (t->dec[s].kind == SITS_DEC_FUSE && d->fuse_at == t->n_dec) d->fuse_at = s;
        if (t->dec[s].kind == SITS_DEC_BYTEFALLBACK && d->bf_at == t->n_dec) d->bf_at = s;
        if (t->dec[s].kind == SITS_DEC_STRIP && s > d->fuse_at && !d->strip_whole) {
            d->strip_whole = &t->dec[s];
            d->strip_left = t->dec[s].start;
        }
    }
    *dt_p = d;
    return SITS_OK;
}

void sits_detok_destroy(sits_detok_t *d)
{
    if (!d) return;
    free(d->pending.p);
    free(d->out.p);
    free(d->t1.p);
    free(d->t2.p);
    free(d);
}

/* Apply decoder steps [from, to) that act on one string at a time to s (result in d->t1). */
static int apply_steps(sits_detok_t *d, size_t from, size_t to, const char *s, size_t n, size_t idx)
{
    const sits_tokenizer_t *t = d->tok;
    d->t1.n = 0;
    if (dput(&d->t1, s, n)) return -1;
    for (size_t k = from; k < to; k++) {
        const sits_tok_dec_t *dc = &t->dec[k];
        d->t2.n = 0;
        if (dput(&d->t2, "", 0)) return -1;
        if (dc->kind == SITS_DEC_REPLACE) {
            if (replace_into(&d->t2, d->t1.p, d->t1.n, dc->a, dc->b)) return -1;
        } else if (dc->kind == SITS_DEC_METASPACE) {
            if (metaspace_into(&d->t2, d->t1.p, d->t1.n, dc, idx)) return -1;
        } else if (dc->kind == SITS_DEC_STRIP) {
            if (dc == d->strip_whole) {
                size_t off = 0;
                if (d->strip_left > 0) {
                    off = strip_len(d->t1.p, d->t1.n, dc->a, d->strip_left);
                    d->strip_left -= (int)(off / strlen(dc->a));
                    if (off < d->t1.n) d->strip_left = 0;  /* met a non-content character */
                }
                if (dput(&d->t2, d->t1.p + off, d->t1.n - off)) return -1;
            } else {
                size_t off = strip_len(d->t1.p, d->t1.n, dc->a, dc->start);
                if (dput(&d->t2, d->t1.p + off, d->t1.n - off)) return -1;
            }
        } else {
            if (dput(&d->t2, d->t1.p, d->t1.n)) return -1;  /* Fuse, ByteFallback: nothing per string */
        }
        dbuf_t x = d->t1;
        d->t1 = d->t2;
        d->t2 = x;
    }
    return 0;
}

/* A string at the ByteFallback stage (a token or a decoded byte run) goes through the remaining steps. */
static int emit_chunk(sits_detok_t *d, const char *s, size_t n)
{
    size_t from = d->bf_at < d->tok->n_dec ? d->bf_at + 1 : 0;
    if (apply_steps(d, from, d->tok->n_dec, s, n, 1)) return -1;
    return dput(&d->out, d->t1.p, d->t1.n);
}

static int flush_run(sits_detok_t *d)
{
    if (!d->pending.n) return 0;
    int r = 0;
    if (sits_utf8_valid(d->pending.p, d->pending.n, NULL)) r = emit_chunk(d, d->pending.p, d->pending.n);
    else
        for (size_t k = 0; k < d->pending.n && !r; k++) r = emit_chunk(d, FFFD, 3);
    d->pending.n = 0;
    return r;
}

sits_status_t sits_detok_push(sits_detok_t *d, int32_t id, const char **text_p, size_t *len_p)
{
    const sits_tokenizer_t *t = d->tok;
    d->out.n = 0;
    if (dput(&d->out, "", 0)) return SITS_ERR_NOMEM;
    *text_p = d->out.p;
    *len_p = 0;
    if (id < 0 || (size_t)id >= t->vocab_size || !t->tokens[id].s) {
        SITS_ERROR(SITS_SUB_TOK, "detok: id %d is outside the vocabulary (%zu)", id, t->vocab_size);
        return SITS_ERR_INVALID;
    }
    const sits_tok_entry_t *e = &t->tokens[id];
    if (d->skip_special && e->special) return SITS_OK;
    size_t idx = d->count++;
    int bad = 0;
    if (!t->has_decoder) {
        bad = (idx && dput(&d->out, " ", 1)) || dput(&d->out, e->s, e->len);
    } else if (t->dec[0].kind == SITS_DEC_BYTELEVEL) {
        bad = bytelevel_bytes(e->s, e->len, &d->pending);
        if (!bad) {
            size_t used = lossy_append(&d->out, (const unsigned char *)d->pending.p, d->pending.n, 0);
            if (used == (size_t)-1) bad = 1;
            else {
                memmove(d->pending.p, d->pending.p + used, d->pending.n - used);
                d->pending.n -= used;
            }
        }
    } else {
        /* per-token steps before ByteFallback, then the byte-run check */
        size_t pre_to = d->bf_at < t->n_dec ? d->bf_at : 0;
        bad = apply_steps(d, 0, pre_to, e->s, e->len, idx);
        unsigned char byte;
        if (!bad && d->bf_at < t->n_dec && byte_token(d->t1.p, d->t1.n, &byte)) {
            bad = dput(&d->pending, &byte, 1);
        } else if (!bad) {
            dbuf_t tokstr = { 0 };
            bad = dput(&tokstr, d->t1.p, d->t1.n) || flush_run(d);
            if (!bad) {
                if (d->bf_at < t->n_dec) bad = emit_chunk(d, tokstr.p, tokstr.n);
                else bad = apply_steps(d, 0, t->n_dec, e->s, e->len, idx) || dput(&d->out, d->t1.p, d->t1.n);
            }
            free(tokstr.p);
        }
    }
    if (bad) return SITS_ERR_NOMEM;
    *text_p = d->out.p;
    *len_p = d->out.n;
    return SITS_OK;
}

sits_status_t sits_detok_flush(sits_detok_t *d, const char **text_p, size_t *len_p)
{
    const sits_tokenizer_t *t = d->tok;
    d->out.n = 0;
    if (dput(&d->out, "", 0)) return SITS_ERR_NOMEM;
    int bad = 0;
    if (t->has_decoder && t->dec[0].kind == SITS_DEC_BYTELEVEL) {
        bad = lossy_append(&d->out, (const unsigned char *)d->pending.p, d->pending.n, 1) == (size_t)-1;
        d->pending.n = 0;
    } else if (t->has_decoder) {
        bad = flush_run(d);
    }
    if (bad) return SITS_ERR_NOMEM;
    *text_p = d->out.p;
    *len_p = d->out.n;
    return SITS_OK;
}
