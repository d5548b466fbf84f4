/* grammar.c -- the grammar builder, the stack matcher, the vocabulary trie and token masks; see
 * grammar.h for the method.
 *
 * Arena: node 0 is the empty stack; node i > 0 is (pos, parent): the element at elems[pos] is the next
 * one to match, then the rest of parent. Nodes are hash-consed, so a stack is identified by its id.
 * A "set" is a list of node ids whose top elements are byte sets (or node 0); expand() produces them
 * from any node by entering rules (tail positions are dropped so that right recursion does not grow
 * stacks) with a per-operation stamp that both deduplicates and stops nullable cycles.
 * Trie: the distinct token byte strings in preorder; node i has its edge byte, its depth and the index
 * just past its subtree, so a walk is a loop over i that jumps past dead subtrees.
 * Byte classes: when every byte of a large class C takes set S to one same set S1, and every byte of C
 * takes S1 to one S2, and so on (a chain: S = S1 = S2 ... for a string's content or a repeated class, S_k
 * -> S_k+1 for a counted repetition), a path of d bytes of C leads to S_d whatever the bytes. The
 * vocabulary keeps, per class (made once, shared by every grammar), the mask of the tokens made of C's
 * bytes alone, those trie nodes by depth, and the nodes where a path first leaves C (its exits). S's
 * mask is then: the tokens of C* up to the depth D the chain lasts (all of them when it lasts the longest
 * token), plus walks of the exits' subtrees from S_d and of the subtrees below depth D from S_D (a JSON
 * string state of a 128k vocabulary: 70k of 275k trie nodes walked, no trie walk for the rest). */
#include "grammar/gram_internal.h"
#include "util/log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define SITS_GRAMMAR_MAX_NODES (1 << 24)
#define SITS_GRAMMAR_CACHE_BYTES ((size_t)32 << 20)   /* masks kept per grammar (2048 of a 128k vocabulary) */

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
    atomic_int refs;     /* sits_grammar_ref / sits_grammar_destroy */
    /* scratch for walks: sets by depth */
    int32_t *buf;
    size_t nbuf, capbuf;
    /* interned stack sets: set i is sdata[s_off[i], + s_n[i]) (sorted node ids); s_slots hashes contents */
    int32_t *s_off, *s_n;
    int n_isets, cap_isets;
    int32_t *sdata;
    size_t n_sdata, cap_sdata;
    int32_t *s_slots;
    uint32_t s_mask;
    /* memoised transitions: a dense row of 256 per set (t_rows[set][byte] -> set, -2 dead, TRANS_UNKNOWN not
     * yet known), made at the set's first transition while TRANS_ROWS_MAX rows are not reached; beyond, a hash
     * of (set << 8 | byte) -> set (t_keys UINT64_MAX: empty slot) */
    int32_t **t_rows;
    int cap_rows, n_rows;
    uint32_t *live;                    /* [cap_live * 8]: per set, the bytes it can take, once live_ok */
    uint8_t *live_ok;
    int cap_live;
    /* [byte classes] per set: the class (its vocabulary entry) every byte of which takes it to uni_next
     * (-2: not all to one live set), once known; [cap_uni] */
    const void **uni_cls;
    int32_t *uni_next;
    int cap_uni;
    uint64_t *t_keys;
    int32_t *t_vals;
    uint32_t t_mask;
    int t_n;
    /* mask cache: per interned set, for one vocabulary (the first one masked with) */
    uint32_t **smask;
    int cap_smask;
    const sits_grammar_vocab_t *cache_vocab;
    size_t cache_bytes;
    long hits, misses;
    /* [allowed_token_ids] a token-id set (sits_grammar_from_token_ids): ids[n_ids], sorted, unique; NULL for a grammar of
     * bytes (everything above unused when set) */
    int32_t *ids;
    int n_ids;
    sits_grammar_t *inner;             /* with ids: the byte grammar the set restricts (sits_grammar_restrict), or NULL */
};

/* [loop classes] the vocabulary's view of one byte class (see the opening comment) */
typedef struct {
    gram_set_t cls;
    uint32_t *all;                     /* [mask words] text tokens whose bytes are all in cls */
    int32_t *exits;                    /* trie nodes whose byte is the first one outside cls on their path, by
                                        * (depth, byte): a run of them shares its first transition */
    int n_exits;
    int32_t *exit_at;                  /* [(max_depth + 1) * 256 + 1]: the exits of (depth d, byte b) are
                                        * exits[exit_at[d * 256 + b], exit_at[d * 256 + b + 1]) */
    int32_t *in;                       /* trie nodes whose path is all in cls, by depth: */
    int32_t *in_off;                   /* depth d's at in[in_off[d - 1], in_off[d]), d = 1 .. max_depth */
} vclass_t;

#define VCLASS_MAX 64                  /* classes kept per vocabulary */
#define VCLASS_MIN_BYTES 4             /* a smaller class: the plain walk is cheap already */

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
    /* [loop classes] made at first use by any grammar's mask (any thread): under cmu; entries never move */
    pthread_mutex_t cmu;
    vclass_t cls[VCLASS_MAX];
    int n_cls;
};

struct sits_grammar_state {
    sits_grammar_t *g;
    const sits_grammar_vocab_t *v;
    int32_t set;       /* interned stack set */
    sits_grammar_state_t *in;   /* [allowed_token_ids] a restricted grammar's: the inner grammar's state */
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
            if (b->alts[r][k].n) memcpy(g->elems + ea, b->alts[r][k].e, sizeof *g->elems * (size_t)b->alts[r][k].n);   /* e NULL when empty */
            ea += b->alts[r][k].n;
            g->elems[ea++] = (gram_elem_t){ GE_END, 0 };
        }
    }
    g->n_elems = ea;
    g->n_rules = b->n_rules;
    if (b->n_sets) memcpy(g->sets, b->sets, sizeof *g->sets * (size_t)b->n_sets);
    g->n_sets = b->n_sets;
    if (arena_grow(g) != 0) goto nomem;
    atomic_init(&g->refs, 1);
    g->node_pos[0] = -1;
    g->node_parent[0] = -1;
    g->n_nodes = 1;
    *g_p = g;
    return SITS_OK;
nomem:
    sits_grammar_destroy(g);
    return SITS_ERR_NOMEM;
}

static int cmp_id(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

sits_status_t sits_grammar_from_token_ids(const int32_t *ids, int n, sits_grammar_t **g_p)
{
    if (n < 1) return SITS_ERR_INVALID;
    sits_grammar_t *g = calloc(1, sizeof *g);
    if (!g || !(g->ids = malloc(sizeof *g->ids * (size_t)n))) {
        free(g);
        return SITS_ERR_NOMEM;
    }
    memcpy(g->ids, ids, sizeof *g->ids * (size_t)n);
    qsort(g->ids, (size_t)n, sizeof *g->ids, cmp_id);
    g->n_ids = 1;
    for (int i = 1; i < n; i++)
        if (g->ids[i] != g->ids[g->n_ids - 1]) g->ids[g->n_ids++] = g->ids[i];
    atomic_init(&g->refs, 1);
    *g_p = g;
    return SITS_OK;
}

sits_status_t sits_grammar_restrict(sits_grammar_t *inner, const int32_t *ids, int n, sits_grammar_t **g_p)
{
    if (!inner || inner->ids) return SITS_ERR_INVALID;
    sits_status_t st = sits_grammar_from_token_ids(ids, n, g_p);
    if (st == SITS_OK) (*g_p)->inner = sits_grammar_ref(inner);
    return st;
}

static int has_id(const sits_grammar_t *g, int32_t id)
{
    return bsearch(&id, g->ids, (size_t)g->n_ids, sizeof id, cmp_id) != NULL;
}

sits_grammar_t *sits_grammar_ref(sits_grammar_t *g)
{
    atomic_fetch_add(&g->refs, 1);
    return g;
}

void sits_grammar_destroy(sits_grammar_t *g)
{
    if (!g || atomic_fetch_sub(&g->refs, 1) > 1) return;
    for (int i = 0; g->smask && i < g->cap_smask; i++) free(g->smask[i]);
    free(g->smask);
    free(g->s_off);
    free(g->s_n);
    free(g->sdata);
    free(g->s_slots);
    free(g->live);
    free(g->live_ok);
    free(g->uni_cls);
    free(g->uni_next);
    for (int i = 0; g->t_rows && i < g->cap_rows; i++) free(g->t_rows[i]);
    free(g->t_rows);
    free(g->t_keys);
    free(g->t_vals);
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
    free(g->ids);
    sits_grammar_destroy(g->inner);
    free(g);
}

void sits_grammar_cache_stats(const sits_grammar_t *g, long *hits_p, long *misses_p)
{
    if (g->inner) g = g->inner;   /* [allowed_token_ids] the masks are the inner grammar's */
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
    if (g->ids) return g->inner ? sits_grammar_matches(g->inner, text, len) : 0;   /* text: the set has no say */
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
    for (int i = 0; i < v->n_cls; i++) {
        free(v->cls[i].all);
        free(v->cls[i].exits);
        free(v->cls[i].exit_at);
        free(v->cls[i].in);
        free(v->cls[i].in_off);
    }
    pthread_mutex_destroy(&v->cmu);
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
    pthread_mutex_init(&v->cmu, NULL);
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

/* ---------------- interned sets, transitions ---------------- */

static uint64_t set_hash(const int32_t *s, int n)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
    for (int i = 0; i < n; i++) h = mix(h ^ (uint32_t)s[i]) + 0x632be59bd9b4e019ull;
    return h;
}

static int iset_rehash(sits_grammar_t *g, uint32_t slots)
{
    int32_t *t = malloc(sizeof *t * slots);
    if (!t) return -1;
    memset(t, 0xff, sizeof *t * slots);
    for (int i = 0; i < g->n_isets; i++) {
        uint32_t h = (uint32_t)set_hash(g->sdata + g->s_off[i], g->s_n[i]) & (slots - 1);
        while (t[h] >= 0) h = (h + 1) & (slots - 1);
        t[h] = i;
    }
    free(g->s_slots);
    g->s_slots = t;
    g->s_mask = slots - 1;
    return 0;
}

/* the id of the set s[n] (sorted, unique), made when new; -1 out of memory */
static int32_t intern(sits_grammar_t *g, const int32_t *s, int n)
{
    if (!g->s_slots && iset_rehash(g, 1024) != 0) return -1;
    uint32_t h = (uint32_t)set_hash(s, n) & g->s_mask;
    for (; g->s_slots[h] >= 0; h = (h + 1) & g->s_mask) {
        int32_t i = g->s_slots[h];
        if (g->s_n[i] == n && memcmp(g->sdata + g->s_off[i], s, sizeof *s * (size_t)n) == 0) return i;
    }
    if (g->n_isets == g->cap_isets) {
        int cap = g->cap_isets ? 2 * g->cap_isets : 256;
        int32_t *o = realloc(g->s_off, sizeof *o * (size_t)cap);
        if (!o) return -1;
        g->s_off = o;
        o = realloc(g->s_n, sizeof *o * (size_t)cap);
        if (!o) return -1;
        g->s_n = o;
        g->cap_isets = cap;
    }
    if (g->n_sdata + (size_t)n > g->cap_sdata) {
        size_t cap = g->cap_sdata ? 2 * g->cap_sdata : 1024;
        while (cap < g->n_sdata + (size_t)n) cap *= 2;
        int32_t *d = realloc(g->sdata, sizeof *d * cap);
        if (!d) return -1;
        g->sdata = d;
        g->cap_sdata = cap;
    }
    int32_t id = g->n_isets++;
    g->s_off[id] = (int32_t)g->n_sdata;
    g->s_n[id] = n;
    memcpy(g->sdata + g->n_sdata, s, sizeof *s * (size_t)n);
    g->n_sdata += (size_t)n;
    g->s_slots[h] = id;
    if ((uint32_t)g->n_isets * 2 > g->s_mask && iset_rehash(g, (g->s_mask + 1) * 2) != 0) return -1;
    return id;
}

static void sort_small(int32_t *a, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        int32_t x = a[i];
        size_t j = i;
        while (j > 0 && a[j - 1] > x) { a[j] = a[j - 1]; j--; }
        a[j] = x;
    }
}

/* g->buf[from, nbuf) sorted and interned; g->buf truncated to from. -2 when empty (dead), -1 out of memory */
static int32_t intern_buf(sits_grammar_t *g, size_t from)
{
    size_t n = g->nbuf - from;
    int32_t id = -2;
    if (n > 0 && !g->oom) {
        sort_small(g->buf + from, n);
        id = intern(g, g->buf + from, (int)n);
    } else if (g->oom) {
        id = -1;
    }
    g->nbuf = from;
    return id;
}

#define TRANS_MAX (1u << 24)

static int trans_grow(sits_grammar_t *g)
{
    uint32_t slots = g->t_keys ? (g->t_mask + 1) * 2 : 4096;
    uint64_t *k = malloc(sizeof *k * slots);
    int32_t *v = malloc(sizeof *v * slots);
    if (!k || !v) { free(k); free(v); return -1; }
    memset(k, 0xff, sizeof *k * slots);
    for (uint32_t i = 0; g->t_keys && i <= g->t_mask; i++) {
        if (g->t_keys[i] == UINT64_MAX) continue;
        uint32_t h = (uint32_t)mix(g->t_keys[i]) & (slots - 1);
        while (k[h] != UINT64_MAX) h = (h + 1) & (slots - 1);
        k[h] = g->t_keys[i];
        v[h] = g->t_vals[i];
    }
    free(g->t_keys);
    free(g->t_vals);
    g->t_keys = k;
    g->t_vals = v;
    g->t_mask = slots - 1;
    return 0;
}

/* the set that set sid becomes after byte c, computed (advance + intern): -2 dead, -1 out of memory */
static int32_t trans_compute(sits_grammar_t *g, int32_t sid, int c)
{
    size_t from = g->nbuf;
    for (int i = 0; i < g->s_n[sid]; i++) buf_push(g, g->sdata[g->s_off[sid] + i]);
    size_t at = g->nbuf;
    advance(g, from, at - from, c);
    memmove(g->buf + from, g->buf + at, sizeof *g->buf * (g->nbuf - at));
    g->nbuf = from + (g->nbuf - at);
    int32_t r = intern_buf(g, from);
    return r;
}

#define TRANS_UNKNOWN (-3)
#define TRANS_ROWS_MAX (1 << 16)   /* 64 MiB of rows at most per grammar */

/* set sid's dense transition row, made when new; NULL beyond TRANS_ROWS_MAX rows or out of memory */
static int32_t *trans_row(sits_grammar_t *g, int32_t sid)
{
    if (sid >= TRANS_ROWS_MAX || g->n_rows >= TRANS_ROWS_MAX) return NULL;
    if (sid >= g->cap_rows) {
        int cap = g->cap_rows ? g->cap_rows : 256;
        while (cap <= sid) cap *= 2;
        int32_t **p = realloc(g->t_rows, sizeof *p * (size_t)cap);
        if (!p) return NULL;
        memset(p + g->cap_rows, 0, sizeof *p * (size_t)(cap - g->cap_rows));
        g->t_rows = p;
        g->cap_rows = cap;
    }
    int32_t *row = malloc(sizeof *row * 256);
    if (!row) return NULL;
    for (int c = 0; c < 256; c++) row[c] = TRANS_UNKNOWN;
    g->t_rows[sid] = row;
    g->n_rows++;
    return row;
}

/* the set that set `sid` becomes after byte c: -2 dead, -1 out of memory */
static int32_t trans(sits_grammar_t *g, int32_t sid, int c)
{
    int32_t *row = sid < g->cap_rows ? g->t_rows[sid] : NULL;
    if (row && row[c] != TRANS_UNKNOWN) return row[c];
    if (row || (row = trans_row(g, sid)) != NULL) {
        int32_t r = trans_compute(g, sid, c);
        if (r != -1) row[c] = r;
        return r;
    }
    uint64_t key = ((uint64_t)(uint32_t)sid << 8) | (uint64_t)c;
    uint32_t h = 0;
    if (g->t_keys) {
        for (h = (uint32_t)mix(key) & g->t_mask; g->t_keys[h] != UINT64_MAX; h = (h + 1) & g->t_mask)
            if (g->t_keys[h] == key) return g->t_vals[h];
    }
    int32_t r = trans_compute(g, sid, c);
    if (r == -1) return -1;
    /* memoise (the table stops growing at TRANS_MAX entries: later transitions are recomputed) */
    if ((uint32_t)g->t_n >= TRANS_MAX) return r;
    if (!g->t_keys || (uint32_t)(g->t_n + 1) * 2 > g->t_mask + 1) {
        if (trans_grow(g) != 0) return r;
    }
    for (h = (uint32_t)mix(key) & g->t_mask; g->t_keys[h] != UINT64_MAX; h = (h + 1) & g->t_mask) {}
    g->t_keys[h] = key;
    g->t_vals[h] = r;
    g->t_n++;
    return r;
}

/* ---------------- states and masks ---------------- */

sits_status_t sits_grammar_state_create(sits_grammar_t *g, const sits_grammar_vocab_t *vocab, sits_grammar_state_t **st_p)
{
    sits_grammar_state_t *st = calloc(1, sizeof *st);
    if (!st) return SITS_ERR_NOMEM;
    st->g = g;
    st->v = vocab;
    if (g->ids) {   /* [allowed_token_ids] no state of its own; a restricted grammar's inner one */
        sits_status_t rc = g->inner ? sits_grammar_state_create(g->inner, vocab, &st->in) : SITS_OK;
        if (rc != SITS_OK) {
            free(st);
            return rc;
        }
        *st_p = st;
        return SITS_OK;
    }
    start_set(g);
    st->set = intern_buf(g, 0);
    if (st->set < 0) {   /* a grammar with an empty language is not compiled; -2 cannot happen */
        free(st);
        return SITS_ERR_NOMEM;
    }
    *st_p = st;
    return SITS_OK;
}

void sits_grammar_state_destroy(sits_grammar_state_t *st)
{
    if (st) sits_grammar_state_destroy(st->in);
    free(st);
}

int sits_grammar_state_complete(const sits_grammar_state_t *st)
{
    const sits_grammar_t *g = st->g;
    if (g->ids) return st->in ? sits_grammar_state_complete(st->in) : 1;   /* [allowed_token_ids] a listed stop id may end
                                                                          * it at any step (restricted: when the inner may) */
    return g->s_n[st->set] > 0 && g->sdata[g->s_off[st->set]] == 0;
}

static int is_stop(const sits_grammar_vocab_t *v, int32_t id)
{
    for (int i = 0; i < v->n_stop; i++) if (v->stop[i] == id) return 1;
    return 0;
}

int sits_grammar_state_accepts(sits_grammar_state_t *st, int32_t token)
{
    const sits_grammar_vocab_t *v = st->v;
    sits_grammar_t *g = st->g;
    if (token < 0 || token >= v->vocab_size) return 0;
    if (g->ids) return has_id(g, token) ? (st->in ? sits_grammar_state_accepts(st->in, token) : 1) : 0;
    if (is_stop(v, token)) return sits_grammar_state_complete(st);
    if (!v->has[token] || v->b_off[token + 1] == v->b_off[token]) return 0;
    int32_t sid = st->set;
    g->nbuf = 0;
    for (int64_t k = v->b_off[token]; k < v->b_off[token + 1] && sid >= 0; k++) sid = trans(g, sid, (unsigned char)v->blob[k]);
    return sid == -1 ? -1 : sid >= 0;
}

sits_status_t sits_grammar_state_accept(sits_grammar_state_t *st, int32_t token)
{
    const sits_grammar_vocab_t *v = st->v;
    sits_grammar_t *g = st->g;
    if (token < 0 || token >= v->vocab_size) return SITS_ERR_INVALID;
    if (g->ids) return !has_id(g, token) ? SITS_ERR_INVALID : st->in ? sits_grammar_state_accept(st->in, token) : SITS_OK;
    if (is_stop(v, token)) return sits_grammar_state_complete(st) ? SITS_OK : SITS_ERR_INVALID;
    if (!v->has[token] || v->b_off[token + 1] == v->b_off[token]) return SITS_ERR_INVALID;
    int32_t sid = st->set;
    g->nbuf = 0;
    for (int64_t k = v->b_off[token]; k < v->b_off[token + 1] && sid >= 0; k++) sid = trans(g, sid, (unsigned char)v->blob[k]);
    if (sid == -1) return SITS_ERR_NOMEM;
    if (sid < 0) return SITS_ERR_INVALID;
    st->set = sid;
    return SITS_OK;
}

/* keep the mask of set sid (the first vocabulary only, SITS_GRAMMAR_CACHE_BYTES in all) */
static void cache_put(sits_grammar_t *g, const sits_grammar_vocab_t *v, int32_t sid, const uint32_t *mask, size_t words)
{
    if (!g->cache_vocab) g->cache_vocab = v;
    if (g->cache_vocab != v || g->cache_bytes + words * 4 > SITS_GRAMMAR_CACHE_BYTES) return;
    if (sid >= g->cap_smask) {
        int cap = g->cap_smask ? g->cap_smask : 256;
        while (cap <= sid) cap *= 2;
        uint32_t **p = realloc(g->smask, sizeof *p * (size_t)cap);
        if (!p) return;
        memset(p + g->cap_smask, 0, sizeof *p * (size_t)(cap - g->cap_smask));
        g->smask = p;
        g->cap_smask = cap;
    }
    uint32_t *m = malloc(words * 4);
    if (!m) return;
    memcpy(m, mask, words * 4);
    g->smask[sid] = m;
    g->cache_bytes += words * 4;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* [loop classes] the vocabulary's entry for class c, made when new; NULL when the table is full or out of memory */
static const vclass_t *vclass_get(const sits_grammar_vocab_t *cv, const gram_set_t *c)
{
    sits_grammar_vocab_t *v = (sits_grammar_vocab_t *)cv;   /* the class table is the vocabulary's own cache */
    const vclass_t *found = NULL;
    pthread_mutex_lock(&v->cmu);
    for (int i = 0; i < v->n_cls && !found; i++)
        if (!memcmp(&v->cls[i].cls, c, sizeof *c)) found = &v->cls[i];
    if (found || v->n_cls == VCLASS_MAX) {
        pthread_mutex_unlock(&v->cmu);
        return found;
    }
    vclass_t e = { .cls = *c };
    e.all = calloc(SITS_GRAMMAR_MASK_WORDS(v->vocab_size), sizeof *e.all);
    int cap = 1024;
    e.exits = malloc(sizeof *e.exits * (size_t)cap);
    for (int i = 0; e.all && e.exits && i < v->n_nodes;) {
        if (gs_has(c, v->byte[i])) {   /* its path is all in c (exits' subtrees are skipped) */
            for (int k = v->tok_off[i]; k < v->tok_off[i + 1]; k++) {
                int32_t id = v->toks[k];
                if (v->has[id]) e.all[id >> 5] |= 1u << (id & 31);
            }
            i++;
            continue;
        }
        if (e.n_exits == cap) {
            int32_t *p = realloc(e.exits, sizeof *p * (size_t)cap * 2);
            if (!p) {
                free(e.exits);
                e.exits = NULL;
                break;
            }
            e.exits = p;
            cap *= 2;
        }
        e.exits[e.n_exits++] = i;
        i = v->skip[i];
    }
    /* exits by (depth, byte), preorder within, and where each (depth, byte) starts */
    size_t n_at = (size_t)(v->max_depth + 1) * 256 + 1;
    int64_t *key = e.exits ? malloc(sizeof *key * (size_t)(e.n_exits + 1)) : NULL;
    e.exit_at = key ? calloc(n_at, sizeof *e.exit_at) : NULL;
    if (e.exit_at) {
        for (int k = 0; k < e.n_exits; k++) {
            key[k] = ((int64_t)v->depth[e.exits[k]] << 40) | ((int64_t)v->byte[e.exits[k]] << 32) | e.exits[k];
            e.exit_at[v->depth[e.exits[k]] * 256 + v->byte[e.exits[k]] + 1]++;
        }
        qsort(key, (size_t)e.n_exits, sizeof *key, cmp_i64);
        for (int k = 0; k < e.n_exits; k++) e.exits[k] = (int32_t)(key[k] & 0xffffffff);
        for (size_t k = 1; k < n_at; k++) e.exit_at[k] += e.exit_at[k - 1];
    }
    free(key);
    /* the in-class nodes by depth (counting sort over the same preorder pass) */
    e.in_off = calloc((size_t)v->max_depth + 2, sizeof *e.in_off);
    int n_in = 0;
    for (int i = 0; e.all && e.exits && e.in_off && i < v->n_nodes;) {
        if (!gs_has(c, v->byte[i])) { i = v->skip[i]; continue; }
        e.in_off[v->depth[i]]++;
        n_in++;
        i++;
    }
    e.in = e.in_off ? malloc(sizeof *e.in * (size_t)(n_in + 1)) : NULL;
    if (e.in) {
        for (int d = 1; d <= v->max_depth + 1; d++) e.in_off[d] += e.in_off[d - 1];   /* end of depth d */
        int32_t *fill = malloc(sizeof *fill * ((size_t)v->max_depth + 2));
        if (fill) {
            fill[0] = 0;
            for (int d = 1; d <= v->max_depth; d++) fill[d] = e.in_off[d - 1];
            for (int i = 0; i < v->n_nodes;) {
                if (!gs_has(c, v->byte[i])) { i = v->skip[i]; continue; }
                e.in[fill[v->depth[i]]++] = i;
                i++;
            }
            free(fill);
        } else {
            free(e.in);
            e.in = NULL;
        }
    }
    if (e.all && e.exits && e.exit_at && e.in) {
        v->cls[v->n_cls] = e;
        found = &v->cls[v->n_cls++];
    } else {
        free(e.all);
        free(e.exits);
        free(e.exit_at);
        free(e.in);
        free(e.in_off);
    }
    pthread_mutex_unlock(&v->cmu);
    return found;
}

/* The bytes set sid can take (out[8], 256 bits), from its transition row (kept per set once known). 0, or -1
 * out of memory. */
static int live_bytes(sits_grammar_t *g, int32_t sid, uint32_t out[8])
{
    if (sid < g->cap_live && g->live_ok[sid]) {
        memcpy(out, g->live + (size_t)sid * 8, sizeof(uint32_t) * 8);
        return 0;
    }
    memset(out, 0, sizeof(uint32_t) * 8);
    for (int c = 0; c < 256; c++) {
        int32_t r = trans(g, sid, c);
        if (r == -1) return -1;
        if (r >= 0) out[c >> 5] |= 1u << (c & 31);
    }
    if (sid >= g->cap_live) {   /* keep it (not kept when out of memory: computed again) */
        int cap = g->cap_live ? g->cap_live : 256;
        while (cap <= sid) cap *= 2;
        uint32_t *l = realloc(g->live, sizeof *l * 8 * (size_t)cap);
        if (!l) return 0;
        g->live = l;
        uint8_t *ok = realloc(g->live_ok, (size_t)cap);
        if (!ok) return 0;
        memset(ok + g->cap_live, 0, (size_t)(cap - g->cap_live));
        g->live_ok = ok;
        g->cap_live = cap;
    }
    memcpy(g->live + (size_t)sid * 8, out, sizeof(uint32_t) * 8);
    g->live_ok[sid] = 1;
    return 0;
}

/* The set that every byte of class vc takes set sid to (c0: the class's first byte), kept per set once
 * known; -2 when they do not all lead to one live set, -1 out of memory. */
static int32_t uniform_next(sits_grammar_t *g, int32_t sid, const vclass_t *vc, int c0)
{
    if (sid < g->cap_uni && g->uni_cls[sid] == vc) return g->uni_next[sid];
    int32_t nx = trans(g, sid, c0);
    if (nx == -1) return -1;
    for (int c = c0 + 1; c < 256 && nx >= 0; c++) {
        if (!gs_has(&vc->cls, c)) continue;
        int32_t r = trans(g, sid, c);
        if (r == -1) return -1;
        if (r != nx) nx = -2;
    }
    if (sid >= g->cap_uni) {   /* keep it (not kept when out of memory: computed again) */
        int cap = g->cap_uni ? g->cap_uni : 256;
        while (cap <= sid) cap *= 2;
        const void **c = realloc(g->uni_cls, sizeof *c * (size_t)cap);
        if (!c) return nx;
        memset(c + g->cap_uni, 0, sizeof *c * (size_t)(cap - g->cap_uni));
        g->uni_cls = c;
        int32_t *n = realloc(g->uni_next, sizeof *n * (size_t)cap);
        if (!n) return nx;
        g->uni_next = n;
        g->cap_uni = cap;
    }
    g->uni_cls[sid] = vc;
    g->uni_next[sid] = nx;
    return nx;
}

/* The tokens of the trie nodes [i0, i1) (whole subtrees) that the walk from lv[depth[i0] - 1] accepts, into
 * mask. lv[d]: the set after the first d bytes of the path. 0, or -1 out of memory. */
static int walk(sits_grammar_t *g, const sits_grammar_vocab_t *v, int32_t *lv, int i0, int i1, uint32_t *mask)
{
    for (int i = i0; i < i1;) {
        int d = v->depth[i];
        int32_t sid = trans(g, lv[d - 1], v->byte[i]);
        if (sid == -1) return -1;
        if (sid < 0) {
            i = v->skip[i];
            continue;
        }
        lv[d] = sid;
        for (int k = v->tok_off[i]; k < v->tok_off[i + 1]; k++) {
            int32_t id = v->toks[k];
            if (v->has[id]) mask[id >> 5] |= 1u << (id & 31);
        }
        i++;
    }
    return 0;
}

sits_status_t sits_grammar_state_mask(sits_grammar_state_t *st, uint32_t *mask)
{
    sits_grammar_t *g = st->g;
    const sits_grammar_vocab_t *v = st->v;
    size_t words = SITS_GRAMMAR_MASK_WORDS(v->vocab_size);
    if (g->ids) {   /* [allowed_token_ids] the set (ids past the vocabulary: none); restricted: the inner mask and it */
        if (!st->in) {
            memset(mask, 0, words * 4);
            for (int i = 0; i < g->n_ids; i++)
                if (g->ids[i] >= 0 && g->ids[i] < v->vocab_size) mask[g->ids[i] >> 5] |= 1u << (g->ids[i] & 31);
            return SITS_OK;
        }
        SITS_CHECK(sits_grammar_state_mask(st->in, mask));
        int i = 0;
        while (i < g->n_ids && g->ids[i] < 0) i++;
        for (size_t w = 0; w < words; w++) {   /* each word ANDed with the set's bits in it (ids sorted) */
            uint32_t set = 0;
            for (; i < g->n_ids && (size_t)g->ids[i] < 32 * (w + 1); i++) set |= 1u << (g->ids[i] & 31);
            mask[w] &= set;
        }
        return SITS_OK;
    }
    if (g->cache_vocab == v && st->set < g->cap_smask && g->smask[st->set]) {
        g->hits++;
        memcpy(mask, g->smask[st->set], words * 4);
        return SITS_OK;
    }
    g->misses++;
    memset(mask, 0, words * 4);
    if (sits_grammar_state_complete(st))
        for (int i = 0; i < v->n_stop; i++)
            if (v->stop[i] >= 0 && v->stop[i] < v->vocab_size) mask[v->stop[i] >> 5] |= 1u << (v->stop[i] & 31);
    /* lv[d]: the set after the first d bytes of the trie path being walked */
    int32_t *lv = malloc(sizeof *lv * (size_t)(v->max_depth + 2));
    if (!lv) return SITS_ERR_NOMEM;
    g->nbuf = 0;
    lv[0] = st->set;
    /* [byte classes] the class: the bytes that take the set to its most common next set */
    int32_t *chain = malloc(sizeof *chain * (size_t)(v->max_depth + 2)), next[256];
    gram_set_t cls = { { 0 } };
    int n_cls = 0, rc = chain ? 0 : -1, D = 0;
    for (int c = 0; c < 256 && rc == 0; c++)
        if ((next[c] = trans(g, st->set, c)) == -1) rc = -1;
    int32_t t1 = -2, hk[512];
    int hn[512], best = 0;
    memset(hk, 0xff, sizeof hk);   /* counts per next set: open addressing, 512 slots for <= 256 keys */
    for (int c = 0; c < 256 && rc == 0; c++) {
        if (next[c] < 0) continue;
        uint32_t h = (uint32_t)mix((uint64_t)(uint32_t)next[c]) & 511;
        while (hk[h] >= 0 && hk[h] != next[c]) h = (h + 1) & 511;
        if (hk[h] < 0) { hk[h] = next[c]; hn[h] = 0; }
        if (++hn[h] > best) { best = hn[h]; t1 = next[c]; }
    }
    for (int c = 0; c < 256 && t1 >= 0; c++)
        if (next[c] == t1) {
            cls.w[c >> 5] |= 1u << (c & 31);
            n_cls++;
        }
    const vclass_t *vc = rc == 0 && n_cls >= VCLASS_MIN_BYTES ? vclass_get(v, &cls) : NULL;
    if (vc) {
        /* the chain: chain[d] the set after any d bytes of the class, while every byte agrees (D: how far) */
        int c0 = 0;
        while (!gs_has(&cls, c0)) c0++;
        chain[0] = st->set;
        chain[1] = t1;
        D = 1;
        while (D < v->max_depth && rc == 0) {
            int32_t nx = uniform_next(g, chain[D], vc, c0);
            if (nx == -1) { rc = -1; break; }
            if (nx < 0) break;
            if (nx == chain[D]) {   /* a fixed point: it lasts */
                for (int d = D + 1; d <= v->max_depth; d++) chain[d] = nx;
                D = v->max_depth;
                break;
            }
            chain[++D] = nx;
        }
    }
    if (rc != 0) {
        /* out of memory: nothing more */
    } else if (vc) {
        if (D >= v->max_depth) {
            for (size_t w = 0; w < words; w++) mask[w] |= vc->all[w];
        } else {
            /* the class's tokens up to depth D, then walks below it from chain[D] */
            for (int k = 0; k < vc->in_off[D]; k++) {
                int i = vc->in[k];
                for (int t = v->tok_off[i]; t < v->tok_off[i + 1]; t++) {
                    int32_t id = v->toks[t];
                    if (v->has[id]) mask[id >> 5] |= 1u << (id & 31);
                }
            }
            lv[D] = chain[D];
            for (int k = vc->in_off[D]; k < vc->in_off[D + 1] && rc == 0; k++) rc = walk(g, v, lv, vc->in[k], v->skip[vc->in[k]], mask);
        }
        /* the exits at depth d <= D + 1 (deeper ones are in the subtrees walked above), from chain[d - 1]:
         * only those of the bytes outside the class that chain[d - 1] can take */
        for (int d = 1; d <= D + 1 && d <= v->max_depth && rc == 0; d++) {
            uint32_t out[8];
            if (live_bytes(g, chain[d - 1], out) != 0) {
                rc = -1;
                break;
            }
            for (int w = 0; w < 8 && rc == 0; w++) {
                uint32_t m = out[w] & ~cls.w[w];
                while (m && rc == 0) {
                    int b = w * 32 + __builtin_ctz(m), at = d * 256 + b;
                    m &= m - 1;
                    for (int k = vc->exit_at[at]; k < vc->exit_at[at + 1] && rc == 0; k++) {
                        lv[d - 1] = chain[d - 1];   /* the path before the exit: d - 1 bytes of the class */
                        rc = walk(g, v, lv, vc->exits[k], v->skip[vc->exits[k]], mask);
                    }
                }
            }
        }
    } else {
        rc = walk(g, v, lv, 0, v->n_nodes, mask);
    }
    free(chain);
    free(lv);
    if (rc != 0 || g->oom) return SITS_ERR_NOMEM;
    cache_put(g, v, st->set, mask, words);
    return SITS_OK;
}
