/* postproc.c -- tokenizers' post-processors, reduced to what ids need for one sequence: the ids added
 * before and after it when add_special is set (type ids and pairs are not used by sits-dist).
 *
 * TemplateProcessing: the `single` template's SpecialToken pieces before/after $A (each may carry several
 * ids); BertProcessing: cls $A sep; RobertaProcessing: cls $A sep; ByteLevel: nothing (offsets only);
 * Sequence: each processor wraps the result of the previous one. */
#include <stdlib.h>
#include <string.h>
#include "tokenizer/tok_internal.h"

typedef struct { int32_t *pre, *suf; size_t npre, nsuf; } post_t;

static int push(int32_t **arr, size_t *n, int32_t id)
{
    int32_t *p = realloc(*arr, (*n + 1) * sizeof(*p));
    if (!p) return -1;
    p[(*n)++] = id;
    *arr = p;
    return 0;
}

/* ["token", id] of Bert/RobertaProcessing */
static sits_status_t pair_id(const json_t *o, const char *key, int32_t *id_p)
{
    const json_t *v = json_object_get(o, key), *id = json_array_get(v, 1);
    if (!json_is_array(v) || !json_is_integer(id)) { TOK_ERR("tokenizer.json: post_processor %s is not [token, id]", key); return SITS_ERR_FORMAT; }
    *id_p = (int32_t)json_integer_value(id);
    return SITS_OK;
}

static sits_status_t parse_one(const json_t *o, post_t *p)
{
    if (!o || json_is_null(o)) return SITS_OK;
    const char *type = sits_tok_jstr(o, "type");
    if (!type) { TOK_ERR("tokenizer.json: post_processor without type"); return SITS_ERR_FORMAT; }
    if (!strcmp(type, "Sequence")) {
        const json_t *arr = json_object_get(o, "processors"), *v;
        size_t i;
        json_array_foreach(arr, i, v) {
            post_t inner = { 0 };
            sits_status_t st = parse_one(v, &inner);
            /* wrap: inner.pre + p.pre ... p.suf + inner.suf */
            for (size_t k = 0; st == SITS_OK && k < p->npre; k++)
                if (push(&inner.pre, &inner.npre, p->pre[k])) st = SITS_ERR_NOMEM;
            for (size_t k = 0; st == SITS_OK && k < inner.nsuf; k++)
                if (push(&p->suf, &p->nsuf, inner.suf[k])) st = SITS_ERR_NOMEM;
            free(p->pre);
            p->pre = inner.pre;
            p->npre = inner.npre;
            free(inner.suf);
            if (st != SITS_OK) return st;
        }
        return SITS_OK;
    }
    if (!strcmp(type, "ByteLevel")) return SITS_OK;
    if (!strcmp(type, "BertProcessing") || !strcmp(type, "RobertaProcessing")) {
        int32_t cls, sep;
        SITS_CHECK(pair_id(o, "cls", &cls));
        SITS_CHECK(pair_id(o, "sep", &sep));
        if (push(&p->pre, &p->npre, cls) || push(&p->suf, &p->nsuf, sep)) return SITS_ERR_NOMEM;
        return SITS_OK;
    }
    if (!strcmp(type, "TemplateProcessing")) {
        const json_t *single = json_object_get(o, "single"), *specials = json_object_get(o, "special_tokens"), *v;
        size_t i;
        int seen_a = 0;
        json_array_foreach(single, i, v) {
            if (json_object_get(v, "Sequence")) { seen_a = 1; continue; }
            const char *name = sits_tok_jstr(json_object_get(v, "SpecialToken"), "id");
            if (!name) { TOK_ERR("tokenizer.json: TemplateProcessing piece not understood"); return SITS_ERR_FORMAT; }
            const json_t *ids = json_object_get(json_object_get(specials, name), "ids"), *idv;
            if (!json_is_array(ids)) { TOK_ERR("tokenizer.json: TemplateProcessing special '%s' without ids", name); return SITS_ERR_FORMAT; }
            size_t j;
            json_array_foreach(ids, j, idv)
                if (seen_a ? push(&p->suf, &p->nsuf, (int32_t)json_integer_value(idv))
                           : push(&p->pre, &p->npre, (int32_t)json_integer_value(idv))) return SITS_ERR_NOMEM;
        }
        return SITS_OK;
    }
    TOK_ERR("unsupported tokenizer component: post_processor %s", type);
    return SITS_ERR_UNSUPPORTED;
}

sits_status_t sits_tok_post_parse(const json_t *o, const sits_tokenizer_t *t, int32_t **prefix_p, size_t *n_prefix_p,
                                  int32_t **suffix_p, size_t *n_suffix_p)
{
    post_t p = { 0 };
    sits_status_t st = parse_one(o, &p);
    for (size_t i = 0; st == SITS_OK && i < p.npre + p.nsuf; i++) {
        int32_t id = i < p.npre ? p.pre[i] : p.suf[i - p.npre];
        if (id < 0 || (size_t)id >= t->vocab_size) {
            TOK_ERR("tokenizer.json: post_processor id %d out of the vocabulary", id);
            st = SITS_ERR_FORMAT;
        }
    }
    if (st != SITS_OK) {
        free(p.pre);
        free(p.suf);
        return st;
    }
    *prefix_p = p.pre;
    *n_prefix_p = p.npre;
    *suffix_p = p.suf;
    *n_suffix_p = p.nsuf;
    return SITS_OK;
}
