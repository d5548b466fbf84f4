/* models.c -- the tokenizers models: BPE, Unigram, WordPiece. One pre-token (word) in, ids out.
 *
 * BPE (tokenizers bpe/model.rs + word.rs): the word's characters (with continuing_subword_prefix on all
 * but the first and end_of_word_suffix on the last) become symbols -- unknown ones become <0xXX> byte
 * tokens (byte_fallback) or unk (fused when fuse_unk) -- then a min-heap of adjacent pairs keyed (rank,
 * left position) merges lowest rank first, leftmost on ties; a popped entry whose pair no longer exists or
 * merges differently is stale and skipped. ignore_merges emits a word that is itself in the vocabulary
 * whole. Byte-level models (ByteLevel the last pre-tokenizer) map each byte of a word straight to the id of
 * its GPT-2 alphabet character.
 * Unigram (unigram/model.rs encode_optimized): Viterbi over byte positions; at each character start every
 * vocabulary piece that is a prefix there (shortest first) relaxes its end node when strictly better or
 * unset; a character with no single-character piece gets unk at min_score - 10. Backtracking fuses runs of
 * unk (fuse_unk is always true for Unigram); strings not in the vocabulary go to <0xXX> byte tokens when
 * byte_fallback, else unk_id.
 * WordPiece (wordpiece/mod.rs): words longer than max_input_chars_per_word characters -> unk; else
 * greedy longest match from the left, continuation pieces looked up with the prefix; any failure -> unk
 * for the whole word. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tokenizer/tok_internal.h"

/* ------------------------------------------------------------------ merges */

static uint64_t hash_u64(uint64_t x)
{
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL; x ^= x >> 33;
    return x;
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

int32_t sits_tok_vocab_get(const sits_tokenizer_t *t, const char *s, size_t n)
{
    uint32_t i = sits_tok_hash(s, n) & t->vocab.mask;
    for (;;) {
        int32_t id = t->vocab.slots[i];
        if (id < 0) return -1;
        if (t->tokens[id].len == n && memcmp(t->tokens[id].s, s, n) == 0) return id;
        i = (i + 1) & t->vocab.mask;
    }
}

/* ------------------------------------------------------------------ BPE */

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

/* Merge the n symbols c->id[0..n) and append the result to c->out. The heap holds at most n - 1 initial
 * pairs plus two per merge (n - 1 merges), below 2 * cap. */
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
        if (sits_tok_ids_push(&c->out, c->id[i])) return -1;
    return 0;
}

/* byte-level word, no prefix/suffix: each byte is the one-char token of its alphabet character */
static int bpe_bytes(const sits_tokenizer_t *t, tok_ctx_t *c, const char *w, size_t n)
{
    if (t->ignore_merges) {
        c->mapped.n = 0;
        if (sits_tok_buf_reserve(&c->mapped, n * 2)) return -1;
        for (size_t i = 0; i < n; i++)
            c->mapped.n += sits_tok_utf8_encode(sits_tok_byte_to_cp((uint8_t)w[i]), c->mapped.p + c->mapped.n);
        int32_t id = sits_tok_vocab_get(t, c->mapped.p, c->mapped.n);
        if (id >= 0) return sits_tok_ids_push(&c->out, id);
    }
    if (ctx_reserve(c, n)) return -1;
    size_t k = 0;
    int unk_pending = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->bytelevel_id[(uint8_t)w[i]];
        if (id >= 0) {
            if (unk_pending) { c->id[k++] = t->unk_id; unk_pending = 0; }
            c->id[k++] = id;
        } else if (t->unk_id >= 0) {
            if (unk_pending && !t->fuse_unk) c->id[k++] = t->unk_id;
            unk_pending = 1;
        }
    }
    if (unk_pending) c->id[k++] = t->unk_id;
    return bpe_merge(t, c, k);
}

static int bpe_word(const sits_tokenizer_t *t, tok_ctx_t *c, const char *w, size_t n)
{
    if (t->bytelevel) return bpe_bytes(t, c, w, n);
    if (t->ignore_merges) {
        int32_t id = sits_tok_vocab_get(t, w, n);
        if (id >= 0) return sits_tok_ids_push(&c->out, id);
    }
    if (ctx_reserve(c, n * 4 + 16 + (t->csp_len + t->eow_len) * 4)) return -1;
    size_t k = 0;
    int unk_pending = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t cl = sits_tok_utf8_next(w + i, n - i, &cp);
        const char *s = w + i;
        size_t sl = cl;
        if ((t->csp_len && i > 0) || (t->eow_len && i + cl == n)) {
            c->mapped.n = 0;
            if ((i > 0 && sits_tok_buf_put(&c->mapped, t->csp, t->csp_len)) || sits_tok_buf_put(&c->mapped, w + i, cl) ||
                (i + cl == n && sits_tok_buf_put(&c->mapped, t->eow, t->eow_len))) return -1;
            s = c->mapped.p;
            sl = c->mapped.n;
        }
        i += cl;
        int32_t id = sits_tok_vocab_get(t, s, sl);
        if (id >= 0) {
            if (unk_pending) { c->id[k++] = t->unk_id; unk_pending = 0; }
            c->id[k++] = id;
            continue;
        }
        if (t->byte_fallback) {
            int all = 1;
            for (size_t j = 0; j < sl; j++) all &= t->byte_token[(uint8_t)s[j]] >= 0;
            if (all) {
                if (ctx_reserve(c, k + sl + n - i + 2)) return -1;
                for (size_t j = 0; j < sl; j++) c->id[k++] = t->byte_token[(uint8_t)s[j]];
                continue;
            }
        }
        if (t->unk_id >= 0) {
            if (unk_pending && !t->fuse_unk) c->id[k++] = t->unk_id;
            unk_pending = 1;
        }
    }
    if (unk_pending) c->id[k++] = t->unk_id;
    return bpe_merge(t, c, k);
}

/* ------------------------------------------------------------------ Unigram */

static int unigram_push_string(const sits_tokenizer_t *t, tok_ctx_t *c, const char *s, size_t n)
{
    int32_t id = sits_tok_vocab_get(t, s, n);
    if (id >= 0) return sits_tok_ids_push(&c->out, id);
    if (t->byte_fallback) {
        int all = 1;
        for (size_t j = 0; j < n; j++) all &= t->byte_token[(uint8_t)s[j]] >= 0;
        if (all) {
            for (size_t j = 0; j < n; j++)
                if (sits_tok_ids_push(&c->out, t->byte_token[(uint8_t)s[j]])) return -1;
            return 0;
        }
    }
    return sits_tok_ids_push(&c->out, t->unk_id);
}

static int unigram_word(const sits_tokenizer_t *t, tok_ctx_t *c, const char *w, size_t n)
{
    if (n + 1 > c->vcap) {
        size_t cap = c->vcap ? c->vcap : 64;
        while (cap < n + 1) cap *= 2;
        double *d = realloc(c->score, cap * sizeof(double));
        if (!d) return -1;
        c->score = d;
        int32_t *a = realloc(c->best_id, cap * sizeof(int32_t));
        if (!a) return -1;
        c->best_id = a;
        if (!(a = realloc(c->best_from, cap * sizeof(int32_t)))) return -1;
        c->best_from = a;
        c->vcap = cap;
    }
    for (size_t i = 0; i <= n; i++) { c->best_from[i] = -1; c->score[i] = 0.0; c->best_id[i] = -1; }
    for (size_t st = 0; st < n;) {
        uint32_t cp;
        size_t mblen = sits_tok_utf8_next(w + st, n - st, &cp);
        double base = c->score[st];
        int single = 0;
        size_t lim = n - st < t->max_token_len ? n - st : t->max_token_len;
        for (size_t len = 1; len <= lim; len++) {
            if (st + len < n && ((unsigned char)w[st + len] & 0xC0) == 0x80) continue;  /* not a char boundary */
            int32_t id = sits_tok_vocab_get(t, w + st, len);
            if (id < 0) continue;
            double sc = t->scores[id] + base;
            size_t e = st + len;
            if (c->best_from[e] < 0 || sc > c->score[e]) { c->score[e] = sc; c->best_from[e] = (int32_t)st; c->best_id[e] = id; }
            if (len == mblen) single = 1;
        }
        if (!single) {
            size_t e = st + mblen;
            if (t->unk_id < 0) {
                TOK_ERR("Unigram: a character has no piece and the model has no unk_id");
                return -2;
            }
            double sc = t->unk_score + base;
            if (c->best_from[e] < 0 || sc > c->score[e]) { c->score[e] = sc; c->best_from[e] = (int32_t)st; c->best_id[e] = t->unk_id; }
        }
        st += mblen;
    }
    /* backtrack into (start, end) pairs, reversed, fusing unk runs */
    size_t first = c->out.n, npairs = 0;
    size_t e = n, unk_end = 0;
    int in_unk = 0;
    tok_ids_t pairs = { 0 };
    int bad = 0;
    while (e > 0 && !bad) {
        size_t s = (size_t)c->best_from[e];
        if (c->best_id[e] == t->unk_id && t->unk_id >= 0) {
            if (!in_unk) { unk_end = e; in_unk = 1; }
        } else {
            if (in_unk) { bad |= sits_tok_ids_push(&pairs, (int32_t)e) || sits_tok_ids_push(&pairs, (int32_t)unk_end); in_unk = 0; }
            bad |= sits_tok_ids_push(&pairs, (int32_t)s) || sits_tok_ids_push(&pairs, (int32_t)e);
        }
        e = s;
    }
    if (in_unk && !bad) bad |= sits_tok_ids_push(&pairs, 0) || sits_tok_ids_push(&pairs, (int32_t)unk_end);
    npairs = pairs.n / 2;
    for (size_t k = npairs; k-- > 0 && !bad;)
        bad |= unigram_push_string(t, c, w + pairs.p[2 * k], (size_t)(pairs.p[2 * k + 1] - pairs.p[2 * k]));
    free(pairs.p);
    (void)first;
    return bad ? -1 : 0;
}

/* ------------------------------------------------------------------ WordPiece */

static int wordpiece_word(const sits_tokenizer_t *t, tok_ctx_t *c, const char *w, size_t n)
{
    size_t nchars = 0;
    for (size_t i = 0; i < n; i++) nchars += ((unsigned char)w[i] & 0xC0) != 0x80;
    if (nchars > (size_t)t->max_input_chars) return sits_tok_ids_push(&c->out, t->unk_id);
    size_t first = c->out.n;
    for (size_t st = 0; st < n;) {
        size_t e = n;
        int32_t found = -1;
        while (st < e) {
            c->mapped.n = 0;
            if ((st > 0 && sits_tok_buf_put(&c->mapped, t->csp, t->csp_len)) || sits_tok_buf_put(&c->mapped, w + st, e - st))
                return -1;
            found = sits_tok_vocab_get(t, c->mapped.p, c->mapped.n);
            if (found >= 0) break;
            do e--; while (e > st && ((unsigned char)w[e] & 0xC0) == 0x80);
        }
        if (found < 0) {
            c->out.n = first;
            return sits_tok_ids_push(&c->out, t->unk_id);
        }
        if (sits_tok_ids_push(&c->out, found)) return -1;
        st = e;
    }
    return 0;
}

static const sits_tok_model_ops_t BPE_OPS = { "BPE", bpe_word }, UNIGRAM_OPS = { "Unigram", unigram_word },
    WORDPIECE_OPS = { "WordPiece", wordpiece_word };

/* ------------------------------------------------------------------ parse */

static sits_status_t check_id(const json_t *v, const char *what, const char *k)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX / 2) {
        TOK_ERR("tokenizer.json: %s '%s' has no valid id", what, k);
        return SITS_ERR_FORMAT;
    }
    return SITS_OK;
}

static sits_status_t set_key(tok_model_keys_t *mk, int64_t id, const char *k)
{
    if (mk->keys[id]) { TOK_ERR("tokenizer.json: vocab id %lld used twice", (long long)id); return SITS_ERR_FORMAT; }
    mk->lens[id] = (uint32_t)strlen(k);
    return (mk->keys[id] = sits_tok_strndup(k, mk->lens[id])) ? SITS_OK : SITS_ERR_NOMEM;
}

static sits_status_t load_vocab(sits_tokenizer_t *t, const json_t *m, const json_t *added, int unigram,
                                tok_model_keys_t *mk)
{
    const json_t *vocab = json_object_get(m, "vocab"), *v;
    const char *k;
    size_t i, n_vocab;
    int64_t max_id = -1;
    if (unigram ? !json_is_array(vocab) : !json_is_object(vocab)) {
        TOK_ERR("tokenizer.json: model vocab is not %s", unigram ? "an array of [piece, score]" : "an object");
        return SITS_ERR_FORMAT;
    }
    if (unigram) {
        n_vocab = json_array_size(vocab);
        max_id = (int64_t)n_vocab - 1;
    } else {
        n_vocab = json_object_size(vocab);
        json_object_foreach((json_t *)vocab, k, v) {
            SITS_CHECK(check_id(v, "vocab entry", k));
            if (json_integer_value(v) > max_id) max_id = json_integer_value(v);
        }
    }
    json_array_foreach(added, i, v) {
        SITS_CHECK(check_id(json_object_get(v, "id"), "added token", sits_tok_jstr(v, "content") ? sits_tok_jstr(v, "content") : "?"));
        if (!sits_tok_jstr(v, "content") || !*sits_tok_jstr(v, "content")) {
            TOK_ERR("tokenizer.json: added_tokens[%zu] has no content", i);
            return SITS_ERR_FORMAT;
        }
        if (json_integer_value(json_object_get(v, "id")) > max_id) max_id = json_integer_value(json_object_get(v, "id"));
    }
    t->vocab_size = (size_t)(max_id + 1);
    mk->n = t->vocab_size;
    size_t alloc = t->vocab_size ? t->vocab_size : 1;
    t->tokens = calloc(alloc, sizeof(*t->tokens));
    mk->keys = calloc(alloc, sizeof(char *));
    mk->lens = calloc(alloc, sizeof(uint32_t));
    if (unigram) t->scores = calloc(alloc, sizeof(double));
    if (!t->tokens || !mk->keys || !mk->lens || (unigram && !t->scores)) return SITS_ERR_NOMEM;
    if (sits_tok_strmap_init(&t->vocab, n_vocab)) return SITS_ERR_NOMEM;
    if (unigram) {
        double min_score = INFINITY;
        json_array_foreach(vocab, i, v) {
            const json_t *p = json_array_get(v, 0), *s = json_array_get(v, 1);
            if (!json_is_string(p) || !json_is_number(s)) {
                TOK_ERR("tokenizer.json: Unigram vocab[%zu] is not [piece, score]", i);
                return SITS_ERR_FORMAT;
            }
            SITS_CHECK(set_key(mk, (int64_t)i, json_string_value(p)));
            t->scores[i] = json_number_value(s);
            if (t->scores[i] < min_score) min_score = t->scores[i];
            if (mk->lens[i] > t->max_token_len) t->max_token_len = mk->lens[i];
        }
        t->unk_score = min_score - 10.0;
    } else {
        json_object_foreach((json_t *)vocab, k, v) SITS_CHECK(set_key(mk, json_integer_value(v), k));
    }
    tok_keys_t keys = { mk->keys, mk->lens };
    for (size_t id = 0; id < t->vocab_size; id++) {
        if (!mk->keys[id]) continue;
        sits_tok_strmap_put(&t->vocab, &keys, (int32_t)id);
        if (!(t->tokens[id].s = sits_tok_strndup(mk->keys[id], mk->lens[id]))) return SITS_ERR_NOMEM;
        t->tokens[id].len = mk->lens[id];
    }
    /* <0xXX> byte tokens */
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof(name), "<0x%02X>", b);
        t->byte_token[b] = sits_tok_strmap_get(&t->vocab, &keys, name, 6);
    }
    return SITS_OK;
}

static sits_status_t parse_merges(sits_tokenizer_t *t, const json_t *merges, const tok_model_keys_t *mk)
{
    tok_keys_t keys = { mk->keys, mk->lens };
    size_t i;
    const json_t *v;
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
            if (!(tmp = sits_tok_strndup(s, (size_t)(sp - s)))) { st = SITS_ERR_NOMEM; break; }
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
        int32_t ia = sits_tok_strmap_get(&t->vocab, &keys, a, la), ib = sits_tok_strmap_get(&t->vocab, &keys, b, lb);
        size_t skip = t->csp_len <= lb ? t->csp_len : lb;  /* tokenizers: a + b[prefix_len..] */
        cat.n = 0;
        if (sits_tok_buf_put(&cat, a, la) || sits_tok_buf_put(&cat, b + skip, lb - skip)) { free(tmp); st = SITS_ERR_NOMEM; break; }
        int32_t im = sits_tok_strmap_get(&t->vocab, &keys, cat.p, cat.n);
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

static sits_status_t unk_by_name(sits_tokenizer_t *t, const json_t *m, const tok_model_keys_t *mk, int required)
{
    tok_keys_t keys = { mk->keys, mk->lens };
    const char *unk = sits_tok_jstr(m, "unk_token");
    t->unk_id = unk ? sits_tok_strmap_get(&t->vocab, &keys, unk, strlen(unk)) : -1;
    if ((unk || required) && t->unk_id < 0) {
        TOK_ERR("tokenizer.json: unk_token '%s' not in vocab", unk ? unk : "(none)");
        return SITS_ERR_FORMAT;
    }
    return SITS_OK;
}

static sits_status_t set_str(const char *s, char **dst_p, size_t *len_p)
{
    if (!s || !*s) return SITS_OK;
    *len_p = strlen(s);
    return (*dst_p = strdup(s)) ? SITS_OK : SITS_ERR_NOMEM;
}

sits_status_t sits_tok_model_parse(sits_tokenizer_t *t, const json_t *m, const json_t *added, tok_model_keys_t *mk)
{
    const char *type = sits_tok_jstr(m, "type");
    if (!type) type = json_is_array(json_object_get(m, "merges")) ? "BPE" : "";
    t->unk_id = -1;
    if (!strcmp(type, "BPE")) {
        const json_t *merges = json_object_get(m, "merges"), *dropout = json_object_get(m, "dropout");
        if (!json_is_array(merges)) { TOK_ERR("tokenizer.json: BPE model has no merges array"); return SITS_ERR_FORMAT; }
        if (json_is_number(dropout) && json_number_value(dropout) != 0.0) {
            TOK_ERR("unsupported tokenizer component: BPE dropout (sampling; only null)");
            return SITS_ERR_UNSUPPORTED;
        }
        t->model = &BPE_OPS;
        t->ignore_merges = sits_tok_jbool(m, "ignore_merges", 0);
        t->byte_fallback = sits_tok_jbool(m, "byte_fallback", 0);
        t->fuse_unk = sits_tok_jbool(m, "fuse_unk", 0);
        SITS_CHECK(set_str(sits_tok_jstr(m, "continuing_subword_prefix"), &t->csp, &t->csp_len));
        SITS_CHECK(set_str(sits_tok_jstr(m, "end_of_word_suffix"), &t->eow, &t->eow_len));
        SITS_CHECK(load_vocab(t, m, added, 0, mk));
        SITS_CHECK(unk_by_name(t, m, mk, 0));
        return parse_merges(t, merges, mk);
    }
    if (!strcmp(type, "Unigram")) {
        t->model = &UNIGRAM_OPS;
        t->byte_fallback = sits_tok_jbool(m, "byte_fallback", 0);
        t->fuse_unk = 1;
        SITS_CHECK(load_vocab(t, m, added, 1, mk));
        const json_t *u = json_object_get(m, "unk_id");
        if (json_is_integer(u)) {
            if (json_integer_value(u) < 0 || (size_t)json_integer_value(u) >= json_array_size(json_object_get(m, "vocab"))) {
                TOK_ERR("tokenizer.json: Unigram unk_id out of the vocabulary");
                return SITS_ERR_FORMAT;
            }
            t->unk_id = (int32_t)json_integer_value(u);
        }
        return SITS_OK;
    }
    if (!strcmp(type, "WordPiece")) {
        const json_t *mx = json_object_get(m, "max_input_chars_per_word");
        t->model = &WORDPIECE_OPS;
        t->max_input_chars = json_is_integer(mx) ? (int)json_integer_value(mx) : 100;
        SITS_CHECK(set_str(sits_tok_jstr(m, "continuing_subword_prefix") ? sits_tok_jstr(m, "continuing_subword_prefix") : "##",
                           &t->csp, &t->csp_len));
        SITS_CHECK(load_vocab(t, m, added, 0, mk));
        return unk_by_name(t, m, mk, 1);
    }
    TOK_ERR("unsupported tokenizer component: model %s", *type ? type : "(no type)");
    return SITS_ERR_UNSUPPORTED;
}

void sits_tok_model_free(sits_tokenizer_t *t)
{
    free(t->merges.keys);
    free(t->merges.rank);
    free(t->merges.merged);
    free(t->csp);
    free(t->eow);
    free(t->scores);
}
