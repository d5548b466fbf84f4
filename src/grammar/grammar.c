/* grammar.c -- the grammar builder, the stack matcher, the vocabulary trie and token masks; see
 * grammar.h for the method.
 *
 * Arena: node 0 is the empty stack; node i > 0 is (pos, parent): the element at elems[pos] is the next
 * one to match, then the rest of parent. Nodes are hash-consed, so a stack is identified by its id.
 * A "set" is a list of node ids whose top elements are byte sets (or node 0); expand() produces them
 * from any node by entering rules (tail positions are dropped so that right recursion does not grow
 * stacks) with a per-operation stamp that both deduplicates and stops nullable cycles.
 * Trie: the distinct token byte strings in preorder; node i has its edge byte, its depth and the index
 * just past its subtree, so a walk is a loop over i that jumps past dead subtrees. */
#include "grammar/gram_internal.h"
#include "util/log.h"

#include <stdlib.h>
#include <string.h>

#define SITS_GRAMMAR_MAX_NODES (1 << 24)
#define SITS_GRAMMAR_CACHE_BYTES ((size_t)256 << 20)

typedef struct {
    uint64_t hash;
    const sits_grammar_vocab_t *vocab;
    int32_t *key;      /* sorted stack set */
    int n;
    uint32_t *mask;
} cache_ent_t;

struct sits_grammar {
    gram_elem_t *elems;
    int n_elems;
    int32_t *alts, *alt_off, *alt_n;
    int n_rules;
    gram_set_t *sets;
    int n_sets;
    /* arena */
    int32_t *node_pos, *node_parent;
    int n_nodes, cap_nodes;
    int32_t *hslots;
    uint32_t hmask;
    uint32_t *mark, gen;
    int oom;
    /* scratch for walks: sets by depth */
    int32_t *buf;
    size_t nbuf, capbuf;
    /* mask cache */
    cache_ent_t *cache;
    uint32_t cmask;
    int n_cache, max_cache, cache_words;   /* entries of one vocabulary size (the first one used) */
    long hits, misses;
};

struct sits_grammar_vocab {
    int vocab_size;
    int n_nodes;
    uint8_t *byte;
    int32_t *depth, *skip, *tok_off;   /* tok_off[n_nodes + 1]: tokens ending at node i */
    int32_t *toks;
    int max_depth;
    char *blob;                        /* token bytes */
    int64_t *b_off;                    /* [vocab_size + 1]; b_off[i] == b_off[i + 1] and !has[i]: no text */
    uint8_t *has;
    int32_t *stop;
    int n_stop;
};

struct sits_grammar_state {
    sits_grammar_t *g;
    const sits_grammar_vocab_t *v;
    int32_t *set;
    int n, cap;
};

/* ---------------- builder ---------------- */

void gb_init(gram_builder_t *b) { memset(b, 0, sizeof *b); }

void ga_free(gram_alt_t *a)
{
    free(a->e);
    memset(a, 0, sizeof *a);
}

void gb_free(gram_builder_t *b)
{
    for (int r = 0; r < b->n_rules; r++) {
        for (int k = 0; k < b->rule_nalts[r]; k++) ga_free(&b->alts[r][k]);
        free(b->alts[r]);
    }
    free(b->alts);
    free(b->rule_nalts);
    free(b->rule_capalts);
    free(b->sets);
    memset(b, 0, sizeof *b);
}

int gb_rule(gram_builder_t *b)
{
    if (b->n_rules == b->cap_rules) {
        int cap = b->cap_rules ? 2 * b->cap_rules : 64;
        gram_alt_t **a = realloc(b->alts, sizeof *a * (size_t)cap);
        if (a) b->alts = a;
        int *n = realloc(b->rule_nalts, sizeof *n * (size_t)cap);
        if (n) b->rule_nalts = n;
        int *c = realloc(b->rule_capalts, sizeof *c * (size_t)cap);
        if (c) b->rule_capalts = c;
        if (!a || !n || !c) {
            b->oom = 1;
            return 0;
        }
        b->cap_rules = cap;
    }
    b->alts[b->n_rules] = NULL;
    b->rule_nalts[b->n_rules] = 0;
    b->rule_capalts[b->n_rules] = 0;
    return b->n_rules++;
}

void gb_add_alt(gram_builder_t *b, int rule, gram_alt_t *a)
{
    if (b->oom) {
        ga_free(a);
        return;
    }
    if (b->rule_nalts[rule] == b->rule_capalts[rule]) {
        int cap = b->rule_capalts[rule] ? 2 * b->rule_capalts[rule] : 4;
        gram_alt_t *p = realloc(b->alts[rule], sizeof *p * (size_t)cap);
        if (!p) {
            b->oom = 1;
            ga_free(a);
            return;
        }
        b->alts[rule] = p;
        b->rule_capalts[rule] = cap;
    }
    b->alts[rule][b->rule_nalts[rule]++] = *a;
    memset(a, 0, sizeof *a);
}

static void ga_push(gram_builder_t *b, gram_alt_t *a, int type, int arg)
{
    if (a->n == a->cap) {
        int cap = a->cap ? 2 * a->cap : 8;
        gram_elem_t *e = realloc(a->e, sizeof *e * (size_t)cap);
        if (!e) {
            b->oom = 1;
            return;
        }
        a->e = e;
        a->cap = cap;
    }
    a->e[a->n++] = (gram_elem_t){ type, arg };
}

void ga_set(gram_builder_t *b, gram_alt_t *a, const gram_set_t *s)
{
    int idx = -1;
    for (int i = b->n_sets - 1; i >= 0 && i >= b->n_sets - 64; i--)   /* recent sets repeat (literals) */
        if (memcmp(&b->sets[i], s, sizeof *s) == 0) { idx = i; break; }
    if (idx < 0) {
        if (b->n_sets == b->cap_sets) {
            int cap = b->cap_sets ? 2 * b->cap_sets : 64;
            gram_set_t *p = realloc(b->sets, sizeof *p * (size_t)cap);
            if (!p) {
                b->oom = 1;
                return;
            }
            b->sets = p;
            b->cap_sets = cap;
        }
        b->sets[b->n_sets] = *s;
        idx = b->n_sets++;
    }
    ga_push(b, a, GE_SET, idx);
}

void gs_add_range(gram_set_t *s, int lo, int hi)
{
    for (int c = lo; c <= hi; c++) s->w[c >> 5] |= 1u << (c & 31);
}

int gs_has(const gram_set_t *s, int c) { return (s->w[c >> 5] >> (c & 31)) & 1; }

void ga_byte(gram_builder_t *b, gram_alt_t *a, unsigned char c)
{
    gram_set_t s = { { 0 } };
    gs_add_range(&s, c, c);
    ga_set(b, a, &s);
}

void ga_lit(gram_builder_t *b, gram_alt_t *a, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) ga_byte(b, a, (unsigned char)s[i]);
}

void ga_ref(gram_builder_t *b, gram_alt_t *a, int rule) { ga_push(b, a, GE_RULE, rule); }

int gb_lit_rule(gram_builder_t *b, const char *s, size_t n)
{
    int r = gb_rule(b);
    gram_alt_t a = { 0 };
    ga_lit(b, &a, s, n);
    gb_add_alt(b, r, &a);
    return r;
}

int gb_repeat(gram_builder_t *b, int x, int lo, int hi)
{
    gram_alt_t a = { 0 };
    int tail;
    if (hi < 0) {           /* tail ::= x tail | "" */
        tail = gb_rule(b);
        ga_ref(b, &a, x);
        ga_ref(b, &a, tail);
        gb_add_alt(b, tail, &a);
        gb_add_alt(b, tail, &a);
    } else {                /* o_0 ::= ""; o_k ::= x o_{k-1} | "" */
        tail = gb_rule(b);
        gb_add_alt(b, tail, &a);
        for (int k = 1; k <= hi - lo; k++) {
            int o = gb_rule(b);
            ga_ref(b, &a, x);
            ga_ref(b, &a, tail);
            gb_add_alt(b, o, &a);
            gb_add_alt(b, o, &a);
            tail = o;
        }
    }
    int r = gb_rule(b);
    for (int i = 0; i < lo; i++) ga_ref(b, &a, x);
    ga_ref(b, &a, tail);
    gb_add_alt(b, r, &a);
    return r;
}

int gb_utf8_multibyte(gram_builder_t *b)
{
    /* the well-formed UTF-8 byte sequences of Unicode's table 3-7, beyond ASCII */
    static const unsigned char rows[][4][2] = {
        { { 0xC2, 0xDF }, { 0x80, 0xBF }, { 0, 0 }, { 0, 0 } },
        { { 0xE0, 0xE0 }, { 0xA0, 0xBF }, { 0x80, 0xBF }, { 0, 0 } },
        { { 0xE1, 0xEC }, { 0x80, 0xBF }, { 0x80, 0xBF }, { 0, 0 } },
        { { 0xED, 0xED }, { 0x80, 0x9F }, { 0x80, 0xBF }, { 0, 0 } },
        { { 0xEE, 0xEF }, { 0x80, 0xBF }, { 0x80, 0xBF }, { 0, 0 } },
        { { 0xF0, 0xF0 }, { 0x90, 0xBF }, { 0x80, 0xBF }, { 0x80, 0xBF } },
        { { 0xF1, 0xF3 }, { 0x80, 0xBF }, { 0x80, 0xBF }, { 0x80, 0xBF } },
        { { 0xF4, 0xF4 }, { 0x80, 0x8F }, { 0x80, 0xBF }, { 0x80, 0xBF } },
    };
    int r = gb_rule(b);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        gram_alt_t a = { 0 };
        for (int k = 0; k < 4 && rows[i][k][0]; k++) {
            gram_set_t s = { { 0 } };
            gs_add_range(&s, rows[i][k][0], rows[i][k][1]);
            ga_set(b, &a, &s);
        }
        gb_add_alt(b, r, &a);
    }
    return r;
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static int arena_grow(sits_grammar_t *g)
{
    int cap = g->cap_nodes ? 2 * g->cap_nodes : 4096;
    if (cap > SITS_GRAMMAR_MAX_NODES) return -1;
    int32_t *p = realloc(g->node_pos, sizeof *p * (size_t)cap);
    if (!p) return -1;
    g->node_pos = p;
    p = realloc(g->node_parent, sizeof *p * (size_t)cap);
    if (!p) return -1;
    g->node_parent = p;
    uint32_t *m = realloc(g->mark, sizeof *m * (size_t)cap);
    if (!m) return -1;
    memset(m + g->cap_nodes, 0, sizeof *m * (size_t)(cap - g->cap_nodes));
    g->mark = m;
    /* rehash into 2 * cap slots */
    uint32_t hs = (uint32_t)cap * 2;
    int32_t *slots = malloc(sizeof *slots * hs);
    if (!slots) return -1;
    memset(slots, 0xff, sizeof *slots * hs);
    for (int i = 1; i < g->n_nodes; i++) {
        uint32_t h = (uint32_t)mix(((uint64_t)(uint32_t)g->node_pos[i] << 32) | (uint32_t)g->node_parent[i]) & (hs - 1);
        while (slots[h] >= 0) h = (h + 1) & (hs - 1);
        slots[h] = i;
    }
    free(g->hslots);
    g->hslots = slots;
    g->hmask = hs - 1;
    g->cap_nodes = cap;
    return 0;
}

/* the node (pos, parent), made when new; -1 when the arena is full */
static int32_t mk(sits_grammar_t *g, int32_t pos, int32_t parent)
{
    if (g->n_nodes + 1 >= g->cap_nodes && arena_grow(g) != 0) {
        g->oom = 1;
        return -1;
    }
    uint32_t h = (uint32_t)mix(((uint64_t)(uint32_t)pos << 32) | (uint32_t)parent) & g->hmask;
    for (; g->hslots[h] >= 0; h = (h + 1) & g->hmask) {
        int32_t i = g->hslots[h];
        if (g->node_pos[i] == pos && g->node_parent[i] == parent) return i;
    }
    int32_t i = g->n_nodes++;
    g->node_pos[i] = pos;
    g->node_parent[i] = parent;
    g->hslots[h] = i;
    return i;
}

static int buf_push(sits_grammar_t *g, int32_t v)
{
    if (g->nbuf == g->capbuf) {
        size_t cap = g->capbuf ? 2 * g->capbuf : 1024;
        int32_t *p = realloc(g->buf, sizeof *p * cap);
        if (!p) {
            g->oom = 1;
            return -1;
        }
        g->buf = p;
        g->capbuf = cap;
    }
    g->buf[g->nbuf++] = v;
    return 0;
}

/* appends to g->buf the byte-set-topped stacks (or node 0) that node n stands for */
static void expand(sits_grammar_t *g, int32_t n)
{
    if (n < 0) return;
    if (g->mark[n] == g->gen) return;
    g->mark[n] = g->gen;
    if (n == 0) {
        buf_push(g, 0);
        return;
    }
    int32_t pos = g->node_pos[n], parent = g->node_parent[n];
    const gram_elem_t *e = &g->elems[pos];
    if (e->type == GE_END) {
        expand(g, parent);
    } else if (e->type == GE_SET) {
        buf_push(g, n);
    } else {
        int32_t cont = g->elems[pos + 1].type == GE_END ? parent : mk(g, pos + 1, parent);
        if (cont < 0) return;
        int r = e->arg;
        for (int k = 0; k < g->alt_n[r]; k++) expand(g, mk(g, g->alts[g->alt_off[r] + k], cont));
    }
}

static void new_gen(sits_grammar_t *g)
{
    if (++g->gen == 0) {
        memset(g->mark, 0, sizeof *g->mark * (size_t)g->cap_nodes);
        g->gen = 1;
    }
}

/* advance the set at g->buf[from, from + n) by byte c; the result is appended to g->buf */
static void advance(sits_grammar_t *g, size_t from, size_t n, int c)
{
    new_gen(g);
    for (size_t i = 0; i < n; i++) {
        int32_t s = g->buf[from + i];
        if (s == 0) continue;
        int32_t pos = g->node_pos[s];
        if (!gs_has(&g->sets[g->elems[pos].arg], c)) continue;
        expand(g, mk(g, pos + 1, g->node_parent[s]));
    }
}

sits_status_t gb_finish(gram_builder_t *b, sits_grammar_t **g_p)
{
    if (b->oom) return SITS_ERR_NOMEM;
    sits_grammar_t *g = calloc(1, sizeof *g);
    if (!g) return SITS_ERR_NOMEM;
    int n_alts = 0, n_el = 0;
    for (int r = 0; r < b->n_rules; r++) {
        n_alts += b->rule_nalts[r];
        for (int k = 0; k < b->rule_nalts[r]; k++) n_el += b->alts[r][k].n + 1;
    }
    g->elems = malloc(sizeof *g->elems * (size_t)(n_el + 1));
    g->alts = malloc(sizeof *g->alts * (size_t)(n_alts + 1));
    g->alt_off = malloc(sizeof *g->alt_off * (size_t)(b->n_rules + 1));
    g->alt_n = malloc(sizeof *g->alt_n * (size_t)(b->n_rules + 1));
    g->sets = malloc(sizeof *g->sets * (size_t)(b->n_sets + 1));
    if (!g->elems || !g->alts || !g->alt_off || !g->alt_n || !g->sets) goto nomem;
    int ea = 0, aa = 0;
    for (int r = 0; r < b->n_rules; r++) {
        g->alt_off[r] = aa;
        g->alt_n[r] = b->rule_nalts[r];
        for (int k = 0; k < b->rule_nalts[r]; k++) {
            g->alts[aa++] = ea;
            memcpy(g->elems + ea, b->alts[r][k].e, sizeof *g->elems * (size_t)b->alts[r][k].n);
            ea += b->alts[r][k].n;
            g->elems[ea++] = (gram_elem_t){ GE_END, 0 };
        }
    }
    g->n_elems = ea;
    g->n_rules = b->n_rules;
    memcpy(g->sets, b->sets, sizeof *g->sets * (size_t)b->n_sets);
    g->n_sets = b->n_sets;
    if (arena_grow(g) != 0) goto nomem;
    g->node_pos[0] = -1;
    g->node_parent[0] = -1;
    g->n_nodes = 1;
    *g_p = g;
    return SITS_OK;
nomem:
    sits_grammar_destroy(g);
    return SITS_ERR_NOMEM;
}

void sits_grammar_destroy(sits_grammar_t *g)
{
    if (!g) return;
    for (uint32_t i = 0; g->cache && i <= g->cmask; i++) {
        free(g->cache[i].key);
        free(g->cache[i].mask);
    }
    free(g->cache);
    free(g->elems);
    free(g->alts);
    free(g->alt_off);
    free(g->alt_n);
    free(g->sets);
    free(g->node_pos);
    free(g->node_parent);
    free(g->hslots);
    free(g->mark);
    free(g->buf);
    free(g);
}

void sits_grammar_cache_stats(const sits_grammar_t *g, long *hits_p, long *misses_p)
{
    *hits_p = g->hits;
    *misses_p = g->misses;
}

/* the start set into g->buf (from 0) */
static size_t start_set(sits_grammar_t *g)
{
    g->nbuf = 0;
    new_gen(g);
    for (int k = 0; k < g->alt_n[0]; k++) expand(g, mk(g, g->alts[g->alt_off[0] + k], 0));
    return g->nbuf;
}

int sits_grammar_matches(sits_grammar_t *g, const char *text, size_t len)
{
    size_t n = start_set(g), from = 0;
    for (size_t i = 0; i < len && n > 0; i++) {
        size_t at = g->nbuf;
        advance(g, from, n, (unsigned char)text[i]);
        from = at;
        n = g->nbuf - at;
    }
    int ok = 0;
    for (size_t i = 0; i < n; i++) if (g->buf[from + i] == 0) ok = 1;
    g->nbuf = 0;
    return ok && !g->oom;
}

/* ---------------- vocabulary trie ---------------- */

typedef struct { const char *s; size_t n; int32_t id; } tokref_t;

static int tokref_cmp(const void *a_, const void *b_)
{
    const tokref_t *a = a_, *b = b_;
    size_t m = a->n < b->n ? a->n : b->n;
    int c = memcmp(a->s, b->s, m);
    if (c) return c;
    if (a->n != b->n) return a->n < b->n ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

void sits_grammar_vocab_destroy(sits_grammar_vocab_t *v)
{
    if (!v) return;
    free(v->byte);
    free(v->depth);
    free(v->skip);
    free(v->tok_off);
    free(v->toks);
    free(v->blob);
    free(v->b_off);
    free(v->has);
    free(v->stop);
    free(v);
}

int sits_grammar_vocab_size(const sits_grammar_vocab_t *v) { return v->vocab_size; }

sits_status_t sits_grammar_vocab_create_bytes(const char *const *bytes, const size_t *lens, int vocab_size,
                                              const int32_t *stop_ids, int n_stop, sits_grammar_vocab_t **vocab_p)
{
    sits_grammar_vocab_t *v = calloc(1, sizeof *v);
    tokref_t *refs = NULL;
    if (!v) return SITS_ERR_NOMEM;
    v->vocab_size = vocab_size;
    size_t total = 0;
    int nt = 0;
    for (int i = 0; i < vocab_size; i++) if (bytes[i]) { total += lens[i]; if (lens[i] > 0) nt++; }
    v->blob = malloc(total + 1);
    v->b_off = malloc(sizeof *v->b_off * ((size_t)vocab_size + 1));
    v->has = calloc((size_t)vocab_size + 1, 1);
    v->stop = malloc(sizeof *v->stop * (size_t)(n_stop + 1));
    refs = malloc(sizeof *refs * (size_t)(nt + 1));
    /* at most one trie node per byte of each token */
    v->byte = malloc(total + 1);
    v->depth = malloc(sizeof *v->depth * (total + 1));
    v->skip = malloc(sizeof *v->skip * (total + 1));
    v->tok_off = calloc(total + 2, sizeof *v->tok_off);
    v->toks = malloc(sizeof *v->toks * (size_t)(nt + 1));
    if (!v->blob || !v->b_off || !v->has || !v->stop || !refs || !v->byte || !v->depth || !v->skip || !v->tok_off ||
        !v->toks) {
        free(refs);
        sits_grammar_vocab_destroy(v);
        return SITS_ERR_NOMEM;
    }
    size_t off = 0;
    nt = 0;
    for (int i = 0; i < vocab_size; i++) {
        v->b_off[i] = (int64_t)off;
        if (!bytes[i]) continue;
        v->has[i] = 1;
        memcpy(v->blob + off, bytes[i], lens[i]);
        if (lens[i] > 0) refs[nt++] = (tokref_t){ v->blob + off, lens[i], i };
        off += lens[i];
    }
    v->b_off[vocab_size] = (int64_t)off;
    for (int i = 0; i < n_stop; i++) {
        v->stop[v->n_stop++] = stop_ids[i];
        if (stop_ids[i] >= 0 && stop_ids[i] < vocab_size) v->has[stop_ids[i]] = 0;   /* stop ids are not text */
    }
    qsort(refs, (size_t)nt, sizeof *refs, tokref_cmp);
    /* preorder nodes: a token shares its longest common prefix with the previous one */
    int32_t *open = malloc(sizeof *open * (total + 1));   /* open[d]: node at depth d + 1 on the current path */
    int32_t *cnt = calloc(total + 2, sizeof *cnt);
    int32_t *tok_node = malloc(sizeof *tok_node * (size_t)(nt + 1));
    if (!open || !cnt || !tok_node) {
        free(open); free(cnt); free(tok_node); free(refs);
        sits_grammar_vocab_destroy(v);
        return SITS_ERR_NOMEM;
    }
    int n_nodes = 0, path = 0;
    const tokref_t *prev = NULL;
    for (int t = 0; t < nt; t++) {
        const tokref_t *r = &refs[t];
        size_t lcp = 0;
        if (prev) while (lcp < prev->n && lcp < r->n && prev->s[lcp] == r->s[lcp]) lcp++;
        if (lcp > (size_t)path) lcp = (size_t)path;
        /* close the nodes deeper than the common prefix */
        for (int d = path; d > (int)lcp; d--) v->skip[open[d - 1]] = n_nodes;
        path = (int)lcp;
        for (size_t d = lcp; d < r->n; d++) {
            v->byte[n_nodes] = (uint8_t)r->s[d];
            v->depth[n_nodes] = (int32_t)d + 1;
            if ((int)d + 1 > v->max_depth) v->max_depth = (int)d + 1;
            open[d] = n_nodes++;
            path = (int)d + 1;
        }
        tok_node[t] = open[r->n - 1];
        cnt[tok_node[t]]++;
        prev = r;
    }
    for (int d = path; d > 0; d--) v->skip[open[d - 1]] = n_nodes;
    v->tok_off[0] = 0;
    for (int i = 0; i < n_nodes; i++) v->tok_off[i + 1] = v->tok_off[i] + cnt[i];
    memset(cnt, 0, sizeof *cnt * (size_t)(n_nodes + 1));
    for (int t = 0; t < nt; t++) v->toks[v->tok_off[tok_node[t]] + cnt[tok_node[t]]++] = refs[t].id;
    v->n_nodes = n_nodes;
    free(open);
    free(cnt);
    free(tok_node);
    free(refs);
    *vocab_p = v;
    return SITS_OK;
}

sits_status_t sits_grammar_vocab_create(const sits_tokenizer_t *tok, int vocab_size, const int32_t *stop_ids, int n_stop,
                                        sits_grammar_vocab_t **vocab_p)
{
    char **bytes = calloc((size_t)vocab_size + 1, sizeof *bytes);
    size_t *lens = calloc((size_t)vocab_size + 1, sizeof *lens);
    char tmp[SITS_TOKEN_BYTES_MAX];
    sits_status_t st = SITS_ERR_NOMEM;
    if (!bytes || !lens) goto out;
    for (int i = 0; i < vocab_size; i++) {
        size_t n = 0;
        if (sits_tokenizer_token_bytes(tok, i, tmp, sizeof tmp, &n) != 0) continue;
        bytes[i] = malloc(n + 1);
        if (!bytes[i]) goto out;
        memcpy(bytes[i], tmp, n);
        lens[i] = n;
    }
    st = sits_grammar_vocab_create_bytes((const char *const *)bytes, lens, vocab_size, stop_ids, n_stop, vocab_p);
out:
    for (int i = 0; bytes && i < vocab_size; i++) free(bytes[i]);
    free(bytes);
    free(lens);
    return st;
}

/* ---------------- states and masks ---------------- */

static int i32_cmp(const void *a_, const void *b_)
{
    int32_t a = *(const int32_t *)a_, b = *(const int32_t *)b_;
    return (a > b) - (a < b);
}

/* the state's set := g->buf[from, from + n), sorted */
static sits_status_t state_take(sits_grammar_state_t *st, size_t from, size_t n)
{
    if (st->g->oom) return SITS_ERR_NOMEM;
    if ((int)n > st->cap) {
        int32_t *p = realloc(st->set, sizeof *p * n);
        if (!p) return SITS_ERR_NOMEM;
        st->set = p;
        st->cap = (int)n;
    }
    memcpy(st->set, st->g->buf + from, sizeof *st->set * n);
    st->n = (int)n;
    qsort(st->set, n, sizeof *st->set, i32_cmp);
    return SITS_OK;
}

sits_status_t sits_grammar_state_create(sits_grammar_t *g, const sits_grammar_vocab_t *vocab, sits_grammar_state_t **st_p)
{
    sits_grammar_state_t *st = calloc(1, sizeof *st);
    if (!st) return SITS_ERR_NOMEM;
    st->g = g;
    st->v = vocab;
    size_t n = start_set(g);
    sits_status_t s = state_take(st, 0, n);
    g->nbuf = 0;
    if (s != SITS_OK) {
        sits_grammar_state_destroy(st);
        return s;
    }
    *st_p = st;
    return SITS_OK;
}

void sits_grammar_state_destroy(sits_grammar_state_t *st)
{
    if (!st) return;
    free(st->set);
    free(st);
}

int sits_grammar_state_complete(const sits_grammar_state_t *st)
{
    return st->n > 0 && st->set[0] == 0;
}

static int is_stop(const sits_grammar_vocab_t *v, int32_t id)
{
    for (int i = 0; i < v->n_stop; i++) if (v->stop[i] == id) return 1;
    return 0;
}

sits_status_t sits_grammar_state_accept(sits_grammar_state_t *st, int32_t token)
{
    const sits_grammar_vocab_t *v = st->v;
    sits_grammar_t *g = st->g;
    if (token < 0 || token >= v->vocab_size) return SITS_ERR_INVALID;
    if (is_stop(v, token)) return sits_grammar_state_complete(st) ? SITS_OK : SITS_ERR_INVALID;
    if (!v->has[token] || v->b_off[token + 1] == v->b_off[token]) return SITS_ERR_INVALID;
    g->nbuf = 0;
    for (int i = 0; i < st->n; i++) buf_push(g, st->set[i]);
    size_t from = 0, n = (size_t)st->n;
    for (int64_t k = v->b_off[token]; k < v->b_off[token + 1] && n > 0; k++) {
        size_t at = g->nbuf;
        advance(g, from, n, (unsigned char)v->blob[k]);
        from = at;
        n = g->nbuf - at;
    }
    sits_status_t s = n == 0 ? SITS_ERR_INVALID : state_take(st, from, n);
    g->nbuf = 0;
    return s;
}

static uint64_t set_hash(const int32_t *s, int n)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
    for (int i = 0; i < n; i++) h = mix(h ^ (uint32_t)s[i]) + 0x632be59bd9b4e019ull;
    return h;
}

static cache_ent_t *cache_find(sits_grammar_t *g, const sits_grammar_vocab_t *v, const int32_t *s, int n, uint64_t h)
{
    if (!g->cache) return NULL;
    for (uint32_t i = (uint32_t)h & g->cmask;; i = (i + 1) & g->cmask) {
        cache_ent_t *e = &g->cache[i];
        if (!e->key && !e->mask) return e;
        if (e->hash == h && e->vocab == v && e->n == n && memcmp(e->key, s, sizeof *s * (size_t)n) == 0) return e;
    }
}

static void cache_put(sits_grammar_t *g, const sits_grammar_vocab_t *v, const int32_t *s, int n, uint64_t h,
                      const uint32_t *mask, int words)
{
    if (!g->cache) {
        size_t per = sizeof(uint32_t) * (size_t)words + 64;
        size_t max = SITS_GRAMMAR_CACHE_BYTES / per;
        if (max < 16) max = 16;
        if (max > 65536) max = 65536;
        uint32_t slots = 32;
        while (slots < 2 * max) slots *= 2;
        g->cache = calloc(slots, sizeof *g->cache);
        if (!g->cache) return;
        g->cmask = slots - 1;
        g->max_cache = (int)max;
        g->cache_words = words;
    }
    if (g->n_cache >= g->max_cache || words != g->cache_words) return;   /* full: states beyond it are walked */
    cache_ent_t *e = cache_find(g, v, s, n, h);
    if (e->key || e->mask) return;
    e->vocab = v;
    e->key = malloc(sizeof *s * (size_t)(n ? n : 1));
    e->mask = malloc(sizeof *mask * (size_t)words);
    if (!e->key || !e->mask) {
        free(e->key);
        free(e->mask);
        e->key = NULL;
        e->mask = NULL;
        return;
    }
    memcpy(e->key, s, sizeof *s * (size_t)n);
    memcpy(e->mask, mask, sizeof *mask * (size_t)words);
    e->n = n;
    e->hash = h;
    g->n_cache++;
}

sits_status_t sits_grammar_state_mask(sits_grammar_state_t *st, uint32_t *mask)
{
    sits_grammar_t *g = st->g;
    const sits_grammar_vocab_t *v = st->v;
    int words = (int)SITS_GRAMMAR_MASK_WORDS(v->vocab_size);
    uint64_t h = set_hash(st->set, st->n) ^ (uint64_t)(uintptr_t)v;
    cache_ent_t *e = cache_find(g, v, st->set, st->n, h);
    if (e && e->mask) {
        g->hits++;
        memcpy(mask, e->mask, sizeof *mask * (size_t)words);
        return SITS_OK;
    }
    g->misses++;
    memset(mask, 0, sizeof *mask * (size_t)words);
    if (sits_grammar_state_complete(st))
        for (int i = 0; i < v->n_stop; i++)
            if (v->stop[i] >= 0 && v->stop[i] < v->vocab_size) mask[v->stop[i] >> 5] |= 1u << (v->stop[i] & 31);
    /* depth-indexed sets in g->buf: level d lives at [lvl[d], lvl[d + 1]) */
    size_t *lvl = malloc(sizeof *lvl * (size_t)(v->max_depth + 2));
    if (!lvl) return SITS_ERR_NOMEM;
    g->nbuf = 0;
    for (int i = 0; i < st->n; i++) buf_push(g, st->set[i]);
    lvl[0] = 0;
    lvl[1] = g->nbuf;
    for (int i = 0; i < v->n_nodes && !g->oom;) {
        int d = v->depth[i];
        g->nbuf = lvl[d];
        advance(g, lvl[d - 1], lvl[d] - lvl[d - 1], v->byte[i]);
        if (g->nbuf == lvl[d]) {
            i = v->skip[i];
            continue;
        }
        lvl[d + 1] = g->nbuf;
        for (int k = v->tok_off[i]; k < v->tok_off[i + 1]; k++) {
            int32_t id = v->toks[k];
            if (v->has[id]) mask[id >> 5] |= 1u << (id & 31);
        }
        i++;
    }
    free(lvl);
    g->nbuf = 0;
    if (g->oom) return SITS_ERR_NOMEM;
    cache_put(g, v, st->set, st->n, h, mask, words);
    return SITS_OK;
}
