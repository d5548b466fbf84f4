/* tmpl_internal.h -- shared internals of the Jinja interpreter (src/template): arenas, values, the AST,
 * the render context, and the builtin tables (filters, tests, methods, globals).
 *
 * Invariants: every value and every AST node lives in an arena (the template's for the AST, the render's
 * for values), so nothing is freed one by one and values may share storage freely; values are immutable
 * except namespaces (jinja2's ImmutableSandboxedEnvironment refuses to mutate lists and dicts). Strings
 * are UTF-8 byte spans, not NUL-terminated. Runtime errors are stored in the render context (rt->st,
 * rt->err) and signalled by a -1 return; 0 is success. */
#ifndef SITS_TEMPLATE_TMPL_INTERNAL_H
#define SITS_TEMPLATE_TMPL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdarg.h>
#include <string.h>
#include "template/template.h"

/* memcpy that accepts n == 0 with NULL pointers (empty lists have no storage) */
#define TMEMCPY(d_, s_, n_) do { size_t tn_ = (n_); if (tn_) memcpy((d_), (s_), tn_); } while (0)

/* ---- arena ---- */
typedef struct tmpl_chunk tmpl_chunk_t;
typedef struct {
    tmpl_chunk_t *head;
    size_t total;   /* bytes obtained from malloc */
    size_t limit;   /* 0: none */
    int hit_limit;  /* set when an allocation failed for the limit, not for malloc */
} tmpl_arena_t;

void *sits_tmpl_arena_alloc(tmpl_arena_t *a, size_t n); /* 16-aligned, zeroed; NULL on malloc failure or limit */
void sits_tmpl_arena_free(tmpl_arena_t *a);

/* ---- values ---- */
typedef enum {
    TV_UNDEF, TV_NONE, TV_BOOL, TV_INT, TV_FLOAT, TV_STR, TV_LIST, TV_DICT, TV_FUNC, TV_NS, TV_LOOP
} tv_type_t;

/* kind of a TV_LIST: Python list, tuple, a one-pass iterator (generator, reversed()), or a dict view */
enum { LK_LIST, LK_TUPLE, LK_ITER, LK_ITEMS, LK_KEYS, LK_VALUES };

typedef struct tlist tlist_t;
typedef struct tdict tdict_t;
typedef struct tfunc tfunc_t;
typedef struct tloop tloop_t;

typedef struct tv {
    uint8_t type;
    uint8_t kind;     /* TV_LIST: LK_*; TV_STR: 1 for markupsafe.Markup (from |safe, |escape);
                       * TV_UNDEF: 1 when it stands for an unsafe attribute (calling it is a SecurityError) */
    union {
        int64_t i;    /* TV_BOOL, TV_INT */
        double f;
        struct { const char *p; size_t n; } s;
        tlist_t *l;
        tdict_t *d;   /* TV_DICT, TV_NS */
        tfunc_t *fn;
        tloop_t *lp;
        const char *hint; /* TV_UNDEF: the UndefinedError message ("'x' is undefined"), may be NULL */
    } u;
} tv_t;

/* err: a generator that raises when consumed (jinja2's generator filters over a non-iterable fail lazily) */
struct tlist { tv_t *v; size_t n, cap; const char *err; };
struct tdict { tv_t *k, *v; size_t n, cap; };

/* ---- AST ---- */
typedef enum {
    /* statements */
    N_BODY, N_TEXT, N_OUTPUT, N_IF, N_FOR, N_SET, N_SETBLOCK, N_MACRO, N_CALLBLOCK, N_FILTERBLOCK,
    N_BREAK, N_CONTINUE, N_WITH, N_GENERATION,
    /* expressions */
    N_LIT, N_NAME, N_LIST, N_TUPLE, N_DICT, N_GETATTR, N_GETITEM, N_SLICE, N_CALL, N_FILTER, N_TEST,
    N_BINOP, N_NEG, N_POS, N_NOT, N_AND, N_OR, N_COMPARE, N_COND, N_CONCAT, N_NSREF, N_FAIL
} node_type_t;

enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW };
enum { CMP_EQ, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE, CMP_IN, CMP_NOTIN };

typedef struct node node_t;
typedef struct {
    node_t **pos; int npos;
    const char **kwn; node_t **kwv; int nkw;
} targs_t;

struct node {
    uint16_t type;
    int16_t op;        /* BINOP: OP_*; FILTER/TEST: builtin id; TEST: negate in flag; FOR: recursive flag */
    int flag;
    int line;
    node_t *a, *b, *c, *d, *e;
    node_t **kids; int nkids;     /* BODY statements, LIST/TUPLE/DICT items (dict: k,v,k,v), COMPARE operands */
    int *ops;                     /* COMPARE: CMP_* per operand after the first */
    targs_t args;                 /* CALL, FILTER, TEST; MACRO/CALLBLOCK: params in kwn, defaults in kwv */
    const char *str; size_t slen; /* TEXT, GETATTR attribute, NAME name, FAIL message */
    int name_id;                  /* NAME, NSREF, MACRO */
    tv_t lit;
};

/* ---- compiled template ---- */
struct sits_tmpl {
    tmpl_arena_t arena;
    node_t *root;
    const char **names; int nnames, capnames; /* interned identifiers; NAME nodes refer by index */
};

/* ---- render context ---- */
typedef struct frame frame_t;
struct frame {
    frame_t *parent;
    int *ids; tv_t *vals; int n, cap;
};

struct tloop {
    tlist_t *items;
    size_t index0;
    int depth0;
    const node_t *fornode;   /* recursive loops: loop(x) re-runs this node */
    frame_t *outer;
    tlist_t *changed_last;   /* loop.changed(): the arguments of the last call, NULL before the first */
};

enum { FN_MACRO, FN_BUILTIN, FN_METHOD, FN_LOOP_CYCLE, FN_LOOP_CHANGED };
struct tfunc {
    int kind;
    int id;                  /* FN_BUILTIN: G_*; FN_METHOD: method id */
    const node_t *macro;     /* FN_MACRO: the N_MACRO or N_CALLBLOCK node */
    frame_t *closure;
    tv_t self;               /* FN_METHOD receiver */
    tfunc_t *caller;         /* FN_MACRO: the caller() of a call block */
    tloop_t *loop;
    const char *name; size_t nlen;
};

typedef struct {
    char *p; size_t n, cap;
} tbuf_t;

typedef struct {
    const sits_tmpl_t *t;
    const json_t *vars;
    time_t now;
    tmpl_arena_t arena;
    tbuf_t *out;              /* current output buffer (macros and set blocks capture into their own) */
    frame_t *root;
    sits_status_t st;
    sits_tmpl_error_t *err;
    int line;                 /* line of the node being evaluated */
    int depth, call_depth;
    size_t iterations;
    int brk;                  /* 1 break, 2 continue pending */
} trt_t;

#define TMPL_MAX_OUTPUT ((size_t)64 << 20)
#define TMPL_MAX_CALL_DEPTH 256
#define TMPL_MAX_EVAL_DEPTH 1000   /* nested evaluations (expressions, statements, values printed): bounds the C stack */
#define TMPL_MAX_AST_DEPTH 500     /* depth of a compiled template's tree */
#define TMPL_MAX_ITER ((size_t)10000000)
#define TMPL_MAX_MEMORY ((size_t)1 << 30)
#define TMPL_MAX_PARSE_DEPTH 200

/* ---- errors ---- */
int sits_tmpl_fail(trt_t *rt, sits_status_t st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void sits_tmpl_err_set(sits_tmpl_error_t *err, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- value helpers (value.c) ---- */
static inline tv_t tv_undef(const char *hint) { tv_t v = { .type = TV_UNDEF }; v.u.hint = hint; return v; }
static inline tv_t tv_none(void) { tv_t v = { .type = TV_NONE }; return v; }
static inline tv_t tv_bool(int b) { tv_t v = { .type = TV_BOOL }; v.u.i = !!b; return v; }
static inline tv_t tv_int(int64_t i) { tv_t v = { .type = TV_INT }; v.u.i = i; return v; }
static inline tv_t tv_float(double f) { tv_t v = { .type = TV_FLOAT }; v.u.f = f; return v; }
static inline tv_t tv_str(const char *p, size_t n) { tv_t v = { .type = TV_STR }; v.u.s.p = p; v.u.s.n = n; return v; }

int sits_tmpl_tbuf_put(trt_t *rt, tbuf_t *b, const char *p, size_t n);
int sits_tmpl_tbuf_puts(trt_t *rt, tbuf_t *b, const char *s);
int sits_tmpl_tbuf_putc(trt_t *rt, tbuf_t *b, char c);
int sits_tmpl_tbuf_printf(trt_t *rt, tbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int sits_tmpl_tbuf_to_str(trt_t *rt, tbuf_t *b, tv_t *out); /* copies into the arena, resets b's length */
void sits_tmpl_tbuf_release(tbuf_t *b);

void *sits_tmpl_rt_alloc(trt_t *rt, size_t n);
tv_t *sits_tmpl_rt_str_dup(trt_t *rt, const char *p, size_t n, tv_t *out);
tlist_t *sits_tmpl_tl_new(trt_t *rt, size_t cap);
int sits_tmpl_tl_push(trt_t *rt, tlist_t *l, tv_t v);
tv_t sits_tmpl_tv_list(tlist_t *l, int kind);
tdict_t *sits_tmpl_td_new(trt_t *rt, size_t cap);
int sits_tmpl_td_set(trt_t *rt, tdict_t *d, tv_t k, tv_t v);      /* replaces an equal key */
int sits_tmpl_td_find(const tdict_t *d, tv_t k);                    /* index or -1 */
int sits_tmpl_td_find_str(const tdict_t *d, const char *p, size_t n);
tv_t sits_tmpl_tv_dict(tdict_t *d);

int sits_tmpl_tv_truthy(tv_t v);
int sits_tmpl_tv_eq(tv_t a, tv_t b);
int sits_tmpl_tv_cmp(trt_t *rt, tv_t a, tv_t b, int *res);          /* Python <; -1 with TypeError */
int sits_tmpl_tv_str_append(trt_t *rt, tbuf_t *b, tv_t v);          /* str(v) */
int sits_tmpl_tv_repr_append(trt_t *rt, tbuf_t *b, tv_t v);         /* repr(v) */
int sits_tmpl_tv_to_str(trt_t *rt, tv_t v, tv_t *out);              /* str(v) as a TV_STR (no copy for strings) */
int sits_tmpl_tv_json_append(trt_t *rt, tbuf_t *b, tv_t v, const char *indent, size_t indent_n, int level,
                   const char *item_sep, const char *key_sep, int sort_keys, int ensure_ascii);
int sits_tmpl_tv_from_json(trt_t *rt, const json_t *j, tv_t *out);
int sits_tmpl_tv_iter(trt_t *rt, tv_t v, tlist_t **items_p);        /* items of an iterable (dict: keys, str: chars) */
const char *sits_tmpl_type_name(tv_t v);                         /* Python's type name: 'str', 'dict', ... */
int sits_tmpl_tv_len(trt_t *rt, tv_t v, int64_t *len_p);            /* TypeError for non-sized */
void sits_tmpl_format_float(double f, char *buf, size_t cap);  /* Python repr() */

/* UTF-8 and Python str helpers */
int sits_tmpl_u8_decode(const char *p, size_t n, size_t *i, uint32_t *cp); /* -1 on bad byte (decodes as U+FFFD) */
int sits_tmpl_u8_encode(uint32_t cp, char *out);
size_t sits_tmpl_u8_len(const char *p, size_t n);
int sits_tmpl_py_isspace(uint32_t cp);

/* ---- builtins (builtins.c) ---- */
int sits_tmpl_filter_lookup(const char *name, size_t n);  /* >= 0 implemented, -1 jinja2 builtin not implemented, -2 unknown */
int sits_tmpl_test_lookup(const char *name, size_t n);
int sits_tmpl_method_known(const char *name, size_t n);   /* some value type has a method of that name */
int sits_tmpl_apply_filter(trt_t *rt, int id, tv_t v, tv_t *pos, int npos, const char **kwn, tv_t *kwv, int nkw, tv_t *out);
int sits_tmpl_apply_test(trt_t *rt, int id, tv_t v, tv_t *pos, int npos, tv_t *out);
int sits_tmpl_call_method(trt_t *rt, tv_t self, const char *name, size_t nlen, tv_t *pos, int npos,
                     const char **kwn, tv_t *kwv, int nkw, tv_t *out, int *found_p);
int sits_tmpl_call_global(trt_t *rt, int id, tv_t *pos, int npos, const char **kwn, tv_t *kwv, int nkw, tv_t *out);
int sits_tmpl_global_lookup(const char *name, size_t n);  /* G_* or -1 */
int sits_tmpl_html_escape(trt_t *rt, tv_t v, tv_t *out);  /* markupsafe.escape: a Markup is returned as is */
int sits_tmpl_str_percent(trt_t *rt, tv_t fmt, tv_t args, tv_t *out); /* fmt % args */
int sits_tmpl_getattr(trt_t *rt, tv_t obj, const char *name, size_t n, tv_t *out);  /* x.name */
int sits_tmpl_getitem(trt_t *rt, tv_t obj, tv_t key, tv_t *out);                    /* x[key] */
int sits_tmpl_call_value(trt_t *rt, tv_t fn, tv_t *pos, int npos, const char **kwn, tv_t *kwv, int nkw, tv_t *out);

/* ---- front end (lexer.c, parser.c) ---- */
typedef enum {
    T_EOF, T_DATA, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END, T_NAME, T_STRING, T_INT, T_FLOAT, T_OP
} ttok_type_t;

typedef struct {
    ttok_type_t type;
    int line;
    const char *p; size_t n;  /* source span (T_STRING: the decoded value, in the arena) */
    int64_t i; double f;
} ttok_t;

sits_status_t sits_tmpl_lex(const char *src, size_t len, tmpl_arena_t *a, ttok_t **toks_p, int *ntoks_p,
                       sits_tmpl_error_t *err);
sits_status_t sits_tmpl_parse(sits_tmpl_t *t, const ttok_t *toks, int ntoks, sits_tmpl_error_t *err);

/* eval.c, used by builtins for macros and loop calls */
int sits_tmpl_eval(trt_t *rt, const node_t *n, frame_t *f, tv_t *out);

#endif
