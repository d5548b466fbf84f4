/* textout.c -- generated ids -> text a client may see, with OpenAI stop strings.
 *
 * ids go through the incremental detokenizer (skip_special: eos / end-of-turn ids are not text), which
 * never releases a broken UTF-8 sequence; [reasoning] a keep list instead lets only those special tokens
 * through as text (harmony's <|channel|> ... for its parser). The decoded text collects in `held`; after each push:
 *   - if a stop string occurs in held, the text before its first occurrence is released and the
 *     output is over (stopped = 1 + the stop string's index; the stop string itself is never shown);
 *   - else everything is released except the longest suffix of held that is a proper prefix of some
 *     stop string (it could still become a match with the next token).
 * held is therefore shorter than the longest stop string between pushes, so a match that spans any
 * number of token boundaries is found. A kept suffix equals the start of a (valid UTF-8) stop string,
 * so every cut falls on a character boundary and released text stays valid UTF-8. */
#include "server/srv_internal.h"

#include <stdlib.h>
#include <string.h>

static sits_status_t append(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 64;
        while (c < *len + n + 1) c *= 2;
        char *b = realloc(*buf, c);
        if (!b) return SITS_ERR_NOMEM;
        *buf = b;
        *cap = c;
    }
    if (n) memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = 0;
    return SITS_OK;
}

sits_status_t sits_srv_textout_init(sits_srv_textout_t *t, const sits_tokenizer_t *tok, const char *const *stop,
                                    const size_t *stop_len, int n_stop)
{
    return sits_srv_textout_init_ex(t, tok, stop, stop_len, n_stop, 1, 0);
}

sits_status_t sits_srv_textout_init_ex(sits_srv_textout_t *t, const sits_tokenizer_t *tok, const char *const *stop,
                                       const size_t *stop_len, int n_stop, int skip_special, int include_stop)
{
    memset(t, 0, sizeof *t);
    t->stop = stop;
    t->stop_len = stop_len;
    t->n_stop = n_stop;
    t->include_stop = include_stop;
    t->tok = tok;
    return sits_detok_create(tok, skip_special, &t->dt);
}

void sits_srv_textout_keep(sits_srv_textout_t *t, const int32_t *ids, int n)
{
    t->keep = ids;
    t->n_keep = n;
}

static int dropped(const sits_srv_textout_t *t, int32_t id)
{
    if (t->n_keep == 0 || !sits_tokenizer_is_special(t->tok, id)) return 0;
    for (int i = 0; i < t->n_keep; i++) if (t->keep[i] == id) return 0;
    return 1;
}

/* Move held[0, n) to out and drop it from held. */
static sits_status_t release(sits_srv_textout_t *t, size_t n)
{
    SITS_CHECK(append(&t->out, &t->out_len, &t->out_cap, t->held, n));
    if (t->held_len > n) memmove(t->held, t->held + n, t->held_len - n);   /* (held may be NULL when empty) */
    t->held_len -= n;
    return SITS_OK;
}

static sits_status_t scan(sits_srv_textout_t *t, int final)
{
    size_t first = (size_t)-1, first_len = 0;
    int which = 0;
    for (int i = 0; i < t->n_stop; i++) {
        if (t->stop_len[i] > t->held_len) continue;
        const char *p = memmem(t->held, t->held_len, t->stop[i], t->stop_len[i]);
        if (p && (size_t)(p - t->held) < first) {
            first = (size_t)(p - t->held);
            first_len = t->stop_len[i];
            which = i;
        }
    }
    if (first != (size_t)-1) {
        SITS_CHECK(release(t, first + (t->include_stop ? first_len : 0)));   /* include_stop_str_in_output */
        t->held_len = 0;
        t->stopped = 1 + which;   /* [anthropic] which one: its stop_sequence */
        return SITS_OK;
    }
    size_t keep = 0;
    if (!final) {
        for (int i = 0; i < t->n_stop; i++) {
            size_t k = t->stop_len[i] - 1 < t->held_len ? t->stop_len[i] - 1 : t->held_len;
            for (; k > keep; k--)
                if (memcmp(t->held + t->held_len - k, t->stop[i], k) == 0) break;
            if (k > keep) keep = k;
        }
    }
    return release(t, t->held_len - keep);
}

sits_status_t sits_srv_textout_push(sits_srv_textout_t *t, const int32_t *ids, int n)
{
    if (t->stopped) return SITS_OK;
    for (int i = 0; i < n; i++) {
        const char *s;
        size_t len;
        if (dropped(t, ids[i])) continue;
        sits_status_t st = sits_detok_push(t->dt, ids[i], &s, &len);
        if (st == SITS_ERR_INVALID) continue;   /* an id of the model's padded vocabulary: no text */
        SITS_CHECK(st);
        SITS_CHECK(append(&t->held, &t->held_len, &t->held_cap, s, len));
    }
    return scan(t, 0);
}

sits_status_t sits_srv_textout_finish(sits_srv_textout_t *t)
{
    if (t->stopped) return SITS_OK;
    const char *s;
    size_t len;
    SITS_CHECK(sits_detok_flush(t->dt, &s, &len));
    SITS_CHECK(append(&t->held, &t->held_len, &t->held_cap, s, len));
    return scan(t, 1);
}

void sits_srv_textout_fini(sits_srv_textout_t *t)
{
    if (t->dt) sits_detok_destroy(t->dt);
    free(t->held);
    free(t->out);
    memset(t, 0, sizeof *t);
}
