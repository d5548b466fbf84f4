/* tokenizer.c -- load tokenizer.json (+ tokenizer_config.json, generation_config.json, config.json) and
 * encode text to ids exactly as huggingface/tokenizers does.
 *
 * Pipeline of one encode (tokenizers AddedVocabulary::extract_and_normalize, then the pipeline): validate
 * UTF-8 -> split out the added tokens with normalized=false on the raw text -> per remaining segment: the
 * normalizer -> split out the added tokens with normalized=true on the normalized text (their patterns are
 * their contents run through the normalizer at load) -> per remaining piece: pre-tokenizer steps -> model
 * per word (through the word cache) -> post-processor ids around the whole when add_special.
 * Added-token matching is leftmost-longest and non-overlapping (aho-corasick LeftmostLongest); a
 * single_word token not bounded by non-word characters is skipped (its span still consumed); lstrip/rstrip
 * extend the token over White_Space, lstrip never past the previous token's end.
 * The component families live in normalizers.c, pretok.c, models.c, decoders.c and postproc.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "tokenizer/tok_internal.h"

/* ------------------------------------------------------------------ added tokens */

static sits_status_t addset_build(sits_tokenizer_t *t, sits_tok_addset_t *set, int normalized)
{
    for (size_t i = 0; i < t->n_added; i++)
        if (t->added[i].normalized == normalized && t->added[i].plen) set->n_by_byte[(uint8_t)t->added[i].pattern[0]]++;
    for (int b = 0; b < 256; b++) {
        if (!set->n_by_byte[b]) continue;
        if (!(set->by_byte[b] = malloc(set->n_by_byte[b] * sizeof(uint32_t)))) return SITS_ERR_NOMEM;
        set->n_by_byte[b] = 0;
    }
    for (size_t i = 0; i < t->n_added; i++) {
        const sits_tok_added_t *a = &t->added[i];
        if (a->normalized != normalized || !a->plen) continue;
        uint8_t b = (uint8_t)a->pattern[0];
        uint32_t *l = set->by_byte[b], j = set->n_by_byte[b]++;
        while (j > 0 && t->added[l[j - 1]].plen < a->plen) { l[j] = l[j - 1]; j--; }  /* longest first, stable */
        l[j] = (uint32_t)i;
        set->n++;
    }
    return SITS_OK;
}

static void addset_free(sits_tok_addset_t *set)
{
    for (int b = 0; b < 256; b++) free(set->by_byte[b]);
}

static sits_status_t parse_added(sits_tokenizer_t *t, const json_t *added)
{
    size_t i;
    const json_t *v;
    t->n_added = json_array_size(added);
    t->added = calloc(t->n_added ? t->n_added : 1, sizeof(*t->added));
    if (!t->added || sits_tok_strmap_init(&t->added_map, t->n_added)) return SITS_ERR_NOMEM;
    tok_buf_t norm = { 0 }, tmp = { 0 };
    sits_status_t st = SITS_OK;
    json_array_foreach(added, i, v) {
        int32_t id = (int32_t)json_integer_value(json_object_get(v, "id"));
        const char *c = sits_tok_jstr(v, "content");
        if (!sits_utf8_valid(c, strlen(c), NULL)) { TOK_ERR("tokenizer.json: added token not UTF-8"); st = SITS_ERR_FORMAT; break; }
        sits_tok_entry_t *e = &t->tokens[id];
        free(e->s);
        e->len = (uint32_t)strlen(c);
        if (!(e->s = sits_tok_strndup(c, e->len))) { st = SITS_ERR_NOMEM; break; }
        e->added = 1;
        e->special = (uint8_t)sits_tok_jbool(v, "special", 0);
        sits_tok_added_t *a = &t->added[i];
        a->id = id;
        a->lstrip = (uint8_t)sits_tok_jbool(v, "lstrip", 0);
        a->rstrip = (uint8_t)sits_tok_jbool(v, "rstrip", 0);
        a->single_word = (uint8_t)sits_tok_jbool(v, "single_word", 0);
        a->special = e->special;
        a->normalized = (uint8_t)sits_tok_jbool(v, "normalized", !e->special);
        if (a->normalized) {
            if ((st = sits_tok_norm_run(t->norm, t->n_norm, c, e->len, &tmp, &norm)) != SITS_OK) break;
            a->plen = (uint32_t)norm.n;
            a->pattern = sits_tok_strndup(norm.p ? norm.p : "", norm.n);
        } else {
            a->plen = e->len;
            a->pattern = sits_tok_strndup(c, e->len);
        }
        if (!a->pattern) { st = SITS_ERR_NOMEM; break; }
        if (a->normalized && (a->plen != e->len || memcmp(a->pattern, e->s, e->len) != 0)) {
            /* tokenizers keeps the normalized form as the token's string (id_to_token, decode) */
            free(e->s);
            e->len = a->plen;
            if (!(e->s = sits_tok_strndup(a->pattern, a->plen))) { st = SITS_ERR_NOMEM; break; }
        }
    }
    free(norm.p);
    free(tmp.p);
    SITS_CHECK(st);
    char **tk = malloc(t->vocab_size * sizeof(char *));
    uint32_t *tl = malloc(t->vocab_size * sizeof(uint32_t));
    if (!tk || !tl) { free(tk); free(tl); return SITS_ERR_NOMEM; }
    for (size_t id = 0; id < t->vocab_size; id++) { tk[id] = t->tokens[id].s; tl[id] = t->tokens[id].len; }
    tok_keys_t ak = { tk, tl };
    for (i = 0; i < t->n_added; i++) sits_tok_strmap_put(&t->added_map, &ak, t->added[i].id);
    free(tk);
    free(tl);
    SITS_CHECK(addset_build(t, &t->add_raw, 0));
    return addset_build(t, &t->add_norm, 1);
}

/* ------------------------------------------------------------------ load */

static sits_status_t tok_from_json(const json_t *root, sits_tokenizer_t **tok_p)
{
    sits_status_t st = SITS_OK;
    tok_model_keys_t mk = { 0 };
    sits_tokenizer_t *t = calloc(1, sizeof(*t));
    if (!t) return SITS_ERR_NOMEM;
    pthread_mutex_init(&t->cache_lock, NULL);
    t->bos_id = -1;
    t->unk_id = -1;
    json_t *empty = json_array();
    if (!empty) { st = SITS_ERR_NOMEM; goto err_free_tok; }
    if (!json_is_object(root) || !json_is_object(json_object_get(root, "model"))) {
        TOK_ERR("tokenizer.json: no model object");
        st = SITS_ERR_FORMAT;
        goto err_free_tok;
    }
    const json_t *added = json_object_get(root, "added_tokens");
    if (!json_is_array(added)) added = empty;
    SITS_CHECK_GOTO(sits_tok_model_parse(t, json_object_get(root, "model"), added, &mk), st, err_free_tok);
    SITS_CHECK_GOTO(sits_tok_norm_parse(json_object_get(root, "normalizer"), &t->norm, &t->n_norm), st, err_free_tok);
    SITS_CHECK_GOTO(sits_tok_pre_parse(json_object_get(root, "pre_tokenizer"), &t->pre, &t->n_pre), st, err_free_tok);
    const json_t *dec = json_object_get(root, "decoder");
    t->has_decoder = json_is_object(dec);
    SITS_CHECK_GOTO(sits_tok_dec_parse(dec, &t->dec, &t->n_dec), st, err_free_tok);
    SITS_CHECK_GOTO(parse_added(t, added), st, err_free_tok);
    SITS_CHECK_GOTO(sits_tok_post_parse(json_object_get(root, "post_processor"), t, &t->post_prefix, &t->n_post_prefix,
                                        &t->post_suffix, &t->n_post_suffix), st, err_free_tok);
    for (size_t s = 0; s < t->n_pre; s++) t->need_regex_md |= t->pre[s].re != NULL;
    /* ByteLevel as the last pre-tokenizer of a plain BPE: the model maps bytes to ids directly */
    if (t->n_pre && sits_tok_pre_is_bytelevel(&t->pre[t->n_pre - 1]) && !strcmp(t->model->name, "BPE") &&
        !t->csp_len && !t->eow_len) {
        tok_keys_t keys = { mk.keys, mk.lens };
        t->pre[t->n_pre - 1].map_bytes = 0;
        t->bytelevel = 1;
        for (int b = 0; b < 256; b++) {
            char s[4];
            size_t n = sits_tok_utf8_encode(sits_tok_byte_to_cp((uint8_t)b), s);
            t->bytelevel_id[b] = sits_tok_strmap_get(&t->vocab, &keys, s, n);
        }
    }
    if (t->n_post_prefix) t->bos_id = t->post_prefix[0];
    t->cache = calloc(SITS_TOK_CACHE_SLOTS, sizeof(*t->cache));
    if (!t->cache) { st = SITS_ERR_NOMEM; goto err_free_tok; }
    json_decref(empty);
    for (size_t id = 0; id < mk.n; id++) free(mk.keys[id]);
    free(mk.keys);
    free(mk.lens);
    *tok_p = t;
    return SITS_OK;
err_free_tok:
    json_decref(empty);
    for (size_t id = 0; id < mk.n; id++) free(mk.keys ? mk.keys[id] : NULL);
    free(mk.keys);
    free(mk.lens);
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
    if (json_is_object(v)) return sits_tok_jstr(v, "content");
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
        if ((b && !(t->bos_token = strdup(b))) || (e && !(t->eos_token = strdup(e)))) {
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
    sits_tok_model_free(t);
    for (size_t i = 0; t->added && i < t->n_added; i++) free(t->added[i].pattern);
    free(t->added);
    addset_free(&t->add_raw);
    addset_free(&t->add_norm);
    sits_tok_norm_free(t->norm, t->n_norm);
    sits_tok_pre_free(t->pre, t->n_pre);
    sits_tok_dec_free(t->dec, t->n_dec);
    free(t->post_prefix);
    free(t->post_suffix);
    free(t->bos_token);
    free(t->eos_token);
    free(t->stop_ids);
    free(t->cache);
    pthread_mutex_destroy(&t->cache_lock);
    free(t);
}

/* ------------------------------------------------------------------ accessors */

size_t sits_tokenizer_vocab_size(const sits_tokenizer_t *t) { return t->vocab_size; }
int32_t sits_tokenizer_bos_id(const sits_tokenizer_t *t) { return t->bos_id; }
int32_t sits_tokenizer_eos_id(const sits_tokenizer_t *t) { return t->n_stop_ids ? t->stop_ids[0] : -1; }

int32_t sits_tokenizer_own_eos_id(const sits_tokenizer_t *t)
{
    int32_t id = t->eos_token ? sits_tokenizer_token_to_id(t, t->eos_token) : -1;
    return id >= 0 ? id : sits_tokenizer_eos_id(t);
}

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
        uint32_t i = sits_tok_hash(s, n) & t->added_map.mask;
        for (;;) {
            int32_t id = t->added_map.slots[i];
            if (id < 0) break;
            if (t->tokens[id].len == n && memcmp(t->tokens[id].s, s, n) == 0) return id;
            i = (i + 1) & t->added_map.mask;
        }
    }
    if (t->vocab.slots) {
        uint32_t i = sits_tok_hash(s, n) & t->vocab.mask;
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

/* ------------------------------------------------------------------ encode */

static int cache_get(const sits_tokenizer_t *t, const char *w, size_t n, uint32_t h, tok_ids_t *out)
{
    sits_tokenizer_t *mt = (sits_tokenizer_t *)t;  /* the cache is the one mutable part */
    if (pthread_mutex_trylock(&mt->cache_lock) != 0) return 0;
    const sits_tok_cache_slot_t *s = &t->cache[h & (SITS_TOK_CACHE_SLOTS - 1)];
    int hit = s->klen == n && s->hash == h && memcmp(s->key, w, n) == 0;
    if (hit)
        for (int i = 0; i < s->nids; i++)
            if (sits_tok_ids_push(out, s->ids[i])) { hit = -1; break; }
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

/* One pre-token (word) -> ids appended to c->out, through the word cache. */
static int encode_word(const sits_tokenizer_t *t, tok_ctx_t *c, const char *w, size_t n)
{
    if (n == 0) return 0;
    uint32_t h = 0;
    int cacheable = n <= SITS_TOK_CACHE_KEY_MAX;
    if (cacheable) {
        h = sits_tok_hash(w, n);
        int r = cache_get(t, w, n, h, &c->out);
        if (r) return r < 0 ? -1 : 0;
    }
    size_t start = c->out.n;
    int r = t->model->encode_word(t, c, w, n);
    if (r) return r;
    if (cacheable) cache_put(t, w, n, h, c->out.p + start, c->out.n - start);
    return 0;
}

/* Pre-tokenize text[0..n) (a normalized piece) and run the model over its words. */
static sits_status_t encode_piece(const sits_tokenizer_t *t, tok_ctx_t *c, const char *text, size_t n, int at_zero)
{
    const char *buf = text;
    tok_pieces_t *cur = &c->pieces[0], *nxt = &c->pieces[1];
    cur->n = 0;
    if (n && sits_tok_pieces_push(cur, 0, n, at_zero)) return SITS_ERR_NOMEM;
    int which = 0;
    for (size_t s = 0; s < t->n_pre && cur->n; s++) {
        tok_buf_t *dst = &c->work[which];
        const char *before = buf;
        SITS_CHECK(t->pre[s].ops->apply(&t->pre[s], c, &buf, dst, cur, nxt));
        if (buf != before) which ^= 1;
        tok_pieces_t *tmp = cur; cur = nxt; nxt = tmp;
    }
    for (size_t i = 0; i < cur->n; i++) {
        int r = encode_word(t, c, buf + cur->p[i].off, cur->p[i].len);
        if (r) return r == -2 ? SITS_ERR_INVALID : SITS_ERR_NOMEM;
    }
    return SITS_OK;
}

typedef struct { size_t s, e; int32_t id; } tok_span_t;  /* id -1: text */
typedef struct { tok_span_t *p; size_t n, cap; } tok_spans_t;

static int span_push(tok_spans_t *v, size_t s, size_t e, int32_t id)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 16;
        tok_span_t *p = realloc(v->p, cap * sizeof(*p));
        if (!p) return -1;
        v->p = p;
        v->cap = cap;
    }
    v->p[v->n++] = (tok_span_t){ s, e, id };
    return 0;
}

static size_t prev_char_start(const char *s, size_t i)
{
    do i--; while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80);
    return i;
}

static int word_before(const char *s, size_t i)
{
    if (i == 0) return 0;
    uint32_t cp;
    size_t p = prev_char_start(s, i);
    sits_tok_utf8_next(s + p, i - p, &cp);
    return sits_tok_is_word_char(cp);
}

/* tokenizers AddedVocabulary::find_matches over s[0..n) -> spans (text and tokens, in order). */
static int added_split(const sits_tokenizer_t *t, const sits_tok_addset_t *set, const char *s, size_t n, tok_spans_t *out)
{
    out->n = 0;
    size_t last = 0, i = 0;
    while (set->n && i < n) {
        uint8_t b = (uint8_t)s[i];
        const sits_tok_added_t *a = NULL;
        for (uint32_t k = 0; k < set->n_by_byte[b]; k++) {
            const sits_tok_added_t *x = &t->added[set->by_byte[b][k]];
            if (x->plen <= n - i && memcmp(s + i, x->pattern, x->plen) == 0) { a = x; break; }
        }
        if (!a) { i++; continue; }
        size_t start = i, stop = i + a->plen;
        if (a->single_word) {
            uint32_t cp = 0;
            int after = stop < n && (sits_tok_utf8_next(s + stop, n - stop, &cp), sits_tok_is_word_char(cp));
            if (word_before(s, start) || after) { i = stop; continue; }
        }
        if (a->lstrip) {
            while (start > last) {
                size_t p = prev_char_start(s, start);
                uint32_t cp;
                sits_tok_utf8_next(s + p, n - p, &cp);
                if (!sits_tok_is_white_space(cp)) break;
                start = p;
            }
        }
        if (a->rstrip) {
            while (stop < n) {
                uint32_t cp;
                size_t l = sits_tok_utf8_next(s + stop, n - stop, &cp);
                if (!sits_tok_is_white_space(cp)) break;
                stop += l;
            }
        }
        if ((last < start && span_push(out, last, start, -1)) || span_push(out, start, stop, a->id)) return -1;
        last = i = stop;
    }
    if (last < n && span_push(out, last, n, -1)) return -1;
    return 0;
}

/* A raw segment (no raw added token in it): normalizer, normalized added tokens, pre-tokenizer, model. */
static sits_status_t encode_segment(const sits_tokenizer_t *t, tok_ctx_t *c, const char *seg, size_t n, int at_zero,
                                    tok_spans_t *spans)
{
    SITS_CHECK(sits_tok_norm_run(t->norm, t->n_norm, seg, n, &c->norm[1], &c->norm[0]));
    const char *nb = c->norm[0].p ? c->norm[0].p : "";
    size_t nn = c->norm[0].n;
    if (!t->add_norm.n) return encode_piece(t, c, nb, nn, at_zero);
    if (added_split(t, &t->add_norm, nb, nn, spans)) return SITS_ERR_NOMEM;
    for (size_t k = 0; k < spans->n; k++) {
        const tok_span_t *sp = &spans->p[k];
        if (sp->id >= 0) {
            if (sits_tok_ids_push(&c->out, sp->id)) return SITS_ERR_NOMEM;
        } else {
            SITS_CHECK(encode_piece(t, c, nb + sp->s, sp->e - sp->s, at_zero && sp->s == 0));
        }
    }
    return SITS_OK;
}

sits_status_t sits_tokenizer_encode(const sits_tokenizer_t *t, const char *text, size_t len, int add_special,
                                    int32_t **ids_p, size_t *n_p)
{
    size_t bad;
    if (!text && len) return SITS_ERR_INVALID;
    if (!text) text = "";
    if (!sits_utf8_valid(text, len, &bad)) {
        TOK_ERR("input is not valid UTF-8 (byte 0x%02x at offset %zu)", (unsigned char)text[bad], bad);
        return SITS_ERR_INVALID;
    }
    sits_status_t st = SITS_OK;
    tok_ctx_t c = { 0 };
    tok_spans_t raw = { 0 }, norm = { 0 };
    /* one ovector pair: only the whole match is read (pcre2_match resets every pair of a larger one per call) */
    if (t->need_regex_md && !(c.md = pcre2_match_data_create(1, NULL))) { st = SITS_ERR_NOMEM; goto out; }
    if (add_special)
        for (size_t i = 0; i < t->n_post_prefix; i++)
            if (sits_tok_ids_push(&c.out, t->post_prefix[i])) { st = SITS_ERR_NOMEM; goto out; }
    if (added_split(t, &t->add_raw, text, len, &raw)) { st = SITS_ERR_NOMEM; goto out; }
    for (size_t k = 0; k < raw.n; k++) {
        if (raw.p[k].id >= 0) {
            if (sits_tok_ids_push(&c.out, raw.p[k].id)) { st = SITS_ERR_NOMEM; goto out; }
        } else {
            SITS_CHECK_GOTO(encode_segment(t, &c, text + raw.p[k].s, raw.p[k].e - raw.p[k].s, raw.p[k].s == 0, &norm), st, out);
        }
    }
    if (add_special)
        for (size_t k = 0; k < t->n_post_suffix; k++)
            if (sits_tok_ids_push(&c.out, t->post_suffix[k])) { st = SITS_ERR_NOMEM; goto out; }
    *ids_p = c.out.p;
    *n_p = c.out.n;
    c.out.p = NULL;
out:
    if (st == SITS_ERR_NOMEM) TOK_ERR("out of memory while encoding %zu bytes", len);
    free(raw.p);
    free(norm.p);
    free(c.out.p);
    free(c.id);
    free(c.prev);
    free(c.next);
    free(c.heap);
    free(c.score);
    free(c.best_id);
    free(c.best_from);
    free(c.segs);
    free(c.mapped.p);
    for (int i = 0; i < 2; i++) { free(c.work[i].p); free(c.norm[i].p); free(c.pieces[i].p); }
    if (c.md) pcre2_match_data_free(c.md);
    return st;
}
