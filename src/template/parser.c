/* parser.c -- tokens to the AST, following jinja2/parser.py (precedence, tuples, tests with one bare
 * argument, left-associative **, chained comparisons, filter chains, assignment targets).
 *
 * Every filter, test and statement name is resolved here. A jinja2 builtin this interpreter does not
 * implement is refused (SITS_ERR_UNSUPPORTED); a name jinja2 does not know either is a compile error in
 * jinja2 too, except inside an {% if %} or a conditional expression where jinja2 defers it to runtime:
 * the check pass below reproduces that (the node then raises when evaluated). Nesting is bounded
 * (TMPL_MAX_PARSE_DEPTH) so hostile input cannot exhaust the stack. */
#include <string.h>
#include <stdio.h>
#include "template/tmpl_internal.h"

typedef struct {
    sits_tmpl_t *t;
    const ttok_t *tk;
    int n, i;
    int depth;
    int in_loop;    /* break/continue allowed: inside a for body, not across a macro or call block */
    sits_tmpl_error_t *err;
    sits_status_t st;
} prs_t;

#define CUR(p) (&(p)->tk[(p)->i])

static int p_fail(prs_t *p, sits_status_t st, int line, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int p_fail(prs_t *p, sits_status_t st, int line, const char *fmt, ...)
{
    if (p->st == SITS_OK) {
        char m[400];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(m, sizeof(m), fmt, ap);
        va_end(ap);
        sits_tmpl_err_set(p->err, line, "line %d: %s", line, m);
        p->st = st;
    }
    return -1;
}

static node_t *p_node(prs_t *p, int type, int line)
{
    node_t *n = sits_tmpl_arena_alloc(&p->t->arena, sizeof(*n));
    if (!n) { p->st = SITS_ERR_NOMEM; return NULL; }
    n->type = (uint16_t)type;
    n->line = line;
    return n;
}

static int tok_is(const ttok_t *t, ttok_type_t type, const char *s)
{
    if (t->type != type) return 0;
    if (!s) return 1;
    return strlen(s) == t->n && memcmp(t->p, s, t->n) == 0;
}

static int is_name(prs_t *p, const char *s) { return tok_is(CUR(p), T_NAME, s); }
static int is_op(prs_t *p, const char *s) { return tok_is(CUR(p), T_OP, s); }
static int skip_op(prs_t *p, const char *s) { if (is_op(p, s)) { p->i++; return 1; } return 0; }
static int skip_name(prs_t *p, const char *s) { if (is_name(p, s)) { p->i++; return 1; } return 0; }

static const char *tok_desc(const ttok_t *t, char *buf, size_t cap)
{
    switch (t->type) {
    case T_EOF: return "end of template";
    case T_VAR_END: return "end of print statement";
    case T_BLOCK_END: return "end of statement block";
    default: snprintf(buf, cap, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->p); return buf;
    }
}

static int expect_op(prs_t *p, const char *s)
{
    char b[64];
    if (skip_op(p, s)) return 0;
    return p_fail(p, SITS_ERR_FORMAT, CUR(p)->line, "expected '%s', got %s", s, tok_desc(CUR(p), b, sizeof(b)));
}

static int expect_end(prs_t *p)
{
    char b[64];
    if (CUR(p)->type == T_BLOCK_END) { p->i++; return 0; }
    return p_fail(p, SITS_ERR_FORMAT, CUR(p)->line, "expected end of statement block, got %s",
                  tok_desc(CUR(p), b, sizeof(b)));
}

static int intern(prs_t *p, const char *s, size_t n)
{
    sits_tmpl_t *t = p->t;
    for (int i = 0; i < t->nnames; i++)
        if (strlen(t->names[i]) == n && memcmp(t->names[i], s, n) == 0) return i;
    if (t->nnames == t->capnames) {
        int cap = t->capnames ? t->capnames * 2 : 32;
        const char **nn = sits_tmpl_arena_alloc(&t->arena, (size_t)cap * sizeof(*nn));
        if (!nn) { p->st = SITS_ERR_NOMEM; return -1; }
        if (t->nnames) memcpy(nn, t->names, (size_t)t->nnames * sizeof(*nn));
        t->names = nn; t->capnames = cap;
    }
    char *c = sits_tmpl_arena_alloc(&t->arena, n + 1);
    if (!c) { p->st = SITS_ERR_NOMEM; return -1; }
    memcpy(c, s, n);
    t->names[t->nnames] = c;
    return t->nnames++;
}

/* growable node pointer array in the arena */
typedef struct { node_t **v; int n, cap; } nvec_t;
static int nv_push(prs_t *p, nvec_t *v, node_t *x)
{
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 4;
        node_t **nv = sits_tmpl_arena_alloc(&p->t->arena, (size_t)cap * sizeof(*nv));
        if (!nv) { p->st = SITS_ERR_NOMEM; return -1; }
        if (v->n) memcpy(nv, v->v, (size_t)v->n * sizeof(*nv));
        v->v = nv; v->cap = cap;
    }
    v->v[v->n++] = x;
    return 0;
}

static node_t *parse_expr(prs_t *p, int with_cond);
static node_t *parse_or(prs_t *p);
static node_t *parse_unary(prs_t *p, int with_filter);
static node_t *parse_primary(prs_t *p);
static node_t *parse_postfix(prs_t *p, node_t *n);

static int depth_in(prs_t *p)
{
    if (++p->depth > TMPL_MAX_PARSE_DEPTH)
        return p_fail(p, SITS_ERR_FORMAT, CUR(p)->line, "expression or block nested too deeply");
    return 0;
}

/* is the current token the end of a tuple (jinja2 is_tuple_end) */
static int tuple_end(prs_t *p, const char *extra)
{
    const ttok_t *t = CUR(p);
    if (t->type == T_VAR_END || t->type == T_BLOCK_END || t->type == T_EOF || tok_is(t, T_OP, ")")) return 1;
    return extra && tok_is(t, T_NAME, extra);
}

/* simplified: names only (assignment targets); with_cond: conditional expressions allowed */
static node_t *parse_tuple(prs_t *p, int simplified, int with_cond, int explicit_parens, const char *extra)
{
    int line = CUR(p)->line, is_tuple = 0;
    nvec_t items = { 0 };
    char b[64];
    for (;;) {
        if (items.n && expect_op(p, ",")) return NULL;
        if (tuple_end(p, extra)) break;
        node_t *e;
        if (simplified) {
            if (!is_name(p, NULL)) {
                p_fail(p, SITS_ERR_FORMAT, CUR(p)->line, "can't assign to %s", tok_desc(CUR(p), b, sizeof(b)));
                return NULL;
            }
            e = p_node(p, N_NAME, CUR(p)->line);
            if (!e) return NULL;
            e->str = CUR(p)->p; e->slen = CUR(p)->n;
            e->name_id = intern(p, e->str, e->slen);
            p->i++;
        } else {
            e = parse_expr(p, with_cond);
        }
        if (!e || nv_push(p, &items, e)) return NULL;
        if (is_op(p, ",")) is_tuple = 1; else break;
    }
    if (!is_tuple) {
        if (items.n) return items.v[0];
        if (!explicit_parens) {
            p_fail(p, SITS_ERR_FORMAT, CUR(p)->line, "expected an expression, got %s", tok_desc(CUR(p), b, sizeof(b)));
            return NULL;
        }
    }
    node_t *t = p_node(p, N_TUPLE, line);
    if (!t) return NULL;
    t->kids = items.v; t->nkids = items.n;
    return t;
}

static int parse_call_args(prs_t *p, targs_t *a)
{
    nvec_t pos = { 0 }, kwv = { 0 };
    const char **kwn = NULL;
    int kwcap = 0;
    if (expect_op(p, "(")) return -1;
    while (!is_op(p, ")")) {
        if (pos.n + kwv.n && expect_op(p, ",")) return -1;
        if (is_op(p, ")")) break;
        if (is_op(p, "*") || is_op(p, "**"))
            return p_fail(p, SITS_ERR_UNSUPPORTED, CUR(p)->line, "unsupported *args / **kwargs in a call");
        if (is_name(p, NULL) && tok_is(&p->tk[p->i + 1], T_OP, "=")) {
            const ttok_t *nm = CUR(p);
            p->i += 2;
            node_t *v = parse_expr(p, 1);
            if (!v) return -1;
            if (kwv.n == kwcap) {
                kwcap = kwcap ? kwcap * 2 : 4;
                const char **nk = sits_tmpl_arena_alloc(&p->t->arena, (size_t)kwcap * sizeof(*nk));
                if (!nk) { p->st = SITS_ERR_NOMEM; return -1; }
                if (kwv.n) memcpy(nk, kwn, (size_t)kwv.n * sizeof(*nk));
                kwn = nk;
            }
            char *s = sits_tmpl_arena_alloc(&p->t->arena, nm->n + 1);
            if (!s) { p->st = SITS_ERR_NOMEM; return -1; }
            memcpy(s, nm->p, nm->n);
            kwn[kwv.n] = s;
            if (nv_push(p, &kwv, v)) return -1;
        } else {
            if (kwv.n) return p_fail(p, SITS_ERR_FORMAT, CUR(p)->line, "positional argument follows keyword argument");
            node_t *v = parse_expr(p, 1);
            if (!v || nv_push(p, &pos, v)) return -1;
        }
    }
    p->i++;
    a->pos = pos.v; a->npos = pos.n; a->kwn = kwn; a->kwv = kwv.v; a->nkw = kwv.n;
    return 0;
}

/* NAME ('.' NAME)* as one dotted string */
static int dotted_name(prs_t *p, const char **s_p, size_t *n_p)
{
    char b[64];
    if (!is_name(p, NULL))
        return p_fail(p, SITS_ERR_FORMAT, CUR(p)->line, "expected a name, got %s", tok_desc(CUR(p), b, sizeof(b)));
    const char *s = CUR(p)->p;
    p->i++;
    while (is_op(p, ".") && p->tk[p->i + 1].type == T_NAME) p->i += 2;
    const ttok_t *last = &p->tk[p->i - 1];
    *s_p = s; *n_p = (size_t)(last->p + last->n - s);
    return 0;
}

static node_t *parse_filter(prs_t *p, node_t *operand, int line)
{
    const char *nm; size_t nl;
    if (dotted_name(p, &nm, &nl)) return NULL;
    node_t *f = p_node(p, N_FILTER, line);
    if (!f) return NULL;
    f->a = operand; f->str = nm; f->slen = nl;
    int id = sits_tmpl_filter_lookup(nm, nl);
    if (id == -1) { p_fail(p, SITS_ERR_UNSUPPORTED, line, "unsupported filter '%.*s'", (int)nl, nm); return NULL; }
    f->op = (int16_t)id;
    if (is_op(p, "(") && parse_call_args(p, &f->args)) return NULL;
    return f;
}

static node_t *parse_test(prs_t *p, node_t *operand)
{
    int line = CUR(p)->line;
    p->i++; /* is */
    int neg = skip_name(p, "not");
    const char *nm; size_t nl;
    if (dotted_name(p, &nm, &nl)) return NULL;
    node_t *t = p_node(p, N_TEST, line);
    if (!t) return NULL;
    t->a = operand; t->str = nm; t->slen = nl; t->flag = neg;
    int id = sits_tmpl_test_lookup(nm, nl);
    if (id == -1) { p_fail(p, SITS_ERR_UNSUPPORTED, line, "unsupported test '%.*s'", (int)nl, nm); return NULL; }
    t->op = (int16_t)id;
    const ttok_t *c = CUR(p);
    if (is_op(p, "(")) {
        if (parse_call_args(p, &t->args)) return NULL;
    } else if ((c->type == T_NAME || c->type == T_STRING || c->type == T_INT || c->type == T_FLOAT ||
                tok_is(c, T_OP, "[") || tok_is(c, T_OP, "{")) &&
               !is_name(p, "else") && !is_name(p, "or") && !is_name(p, "and")) {
        if (is_name(p, "is")) { p_fail(p, SITS_ERR_FORMAT, line, "you cannot chain multiple tests with is"); return NULL; }
        node_t *arg = parse_primary(p);
        if (!arg || !(arg = parse_postfix(p, arg))) return NULL;
        node_t **v = sits_tmpl_arena_alloc(&p->t->arena, sizeof(*v));
        if (!v) { p->st = SITS_ERR_NOMEM; return NULL; }
        v[0] = arg;
        t->args.pos = v; t->args.npos = 1;
    }
    return t;
}

/* fn(args); x.name(args) is refused when no value type has a method of that name */
static node_t *parse_call(prs_t *p, node_t *fn)
{
    node_t *c = p_node(p, N_CALL, CUR(p)->line);
    if (!c) return NULL;
    if (fn->type == N_GETATTR && !sits_tmpl_method_known(fn->str, fn->slen)) {
        p_fail(p, SITS_ERR_UNSUPPORTED, c->line, "unsupported method '%.*s'", (int)fn->slen, fn->str);
        return NULL;
    }
    c->a = fn;
    if (parse_call_args(p, &c->args)) return NULL;
    return c;
}

static node_t *parse_filter_expr(prs_t *p, node_t *n)
{
    while (n) {
        if (is_op(p, "|")) {
            int line = CUR(p)->line;
            p->i++;
            n = parse_filter(p, n, line);
        } else if (is_name(p, "is")) {
            n = parse_test(p, n);
        } else if (is_op(p, "(")) {
            if (!(n = parse_call(p, n))) return NULL;
        } else {
            break;
        }
    }
    return n;
}

static node_t *parse_subscript_item(prs_t *p)
{
    int line = CUR(p)->line;
    node_t *args[3] = { NULL, NULL, NULL };
    if (!is_op(p, ":")) {
        node_t *e = parse_expr(p, 1);
        if (!e) return NULL;
        if (!is_op(p, ":")) return e;
        args[0] = e;
    }
    p->i++; /* first ':' */
    if (!is_op(p, "]") && !is_op(p, ",") && !is_op(p, ":")) { if (!(args[1] = parse_expr(p, 1))) return NULL; }
    if (skip_op(p, ":")) {
        if (!is_op(p, "]") && !is_op(p, ",")) { if (!(args[2] = parse_expr(p, 1))) return NULL; }
    }
    node_t *s = p_node(p, N_SLICE, line);
    if (!s) return NULL;
    s->a = args[0]; s->b = args[1]; s->c = args[2];
    return s;
}

static node_t *parse_postfix(prs_t *p, node_t *n)
{
    char b[64];
    while (n) {
        int line = CUR(p)->line;
        if (is_op(p, ".")) {
            p->i++;
            const ttok_t *t = CUR(p);
            if (t->type == T_NAME) {
                node_t *g = p_node(p, N_GETATTR, line);
                if (!g) return NULL;
                g->a = n; g->str = t->p; g->slen = t->n;
                p->i++;
                n = g;
            } else if (t->type == T_INT) {
                node_t *g = p_node(p, N_GETITEM, line), *k = p_node(p, N_LIT, line);
                if (!g || !k) return NULL;
                k->lit = tv_int(t->i);
                g->a = n; g->b = k;
                p->i++;
                n = g;
            } else {
                p_fail(p, SITS_ERR_FORMAT, line, "expected name or number, got %s", tok_desc(t, b, sizeof(b)));
                return NULL;
            }
        } else if (is_op(p, "[")) {
            p->i++;
            nvec_t items = { 0 };
            while (!is_op(p, "]")) {
                if (items.n && expect_op(p, ",")) return NULL;
                if (is_op(p, "]")) break;
                node_t *e = parse_subscript_item(p);
                if (!e || nv_push(p, &items, e)) return NULL;
            }
            p->i++;
            node_t *g = p_node(p, N_GETITEM, line);
            if (!g) return NULL;
            g->a = n;
            if (items.n == 1) {
                g->b = items.v[0];
            } else {
                node_t *tp = p_node(p, N_TUPLE, line);
                if (!tp) return NULL;
                tp->kids = items.v; tp->nkids = items.n;
                g->b = tp;
            }
            n = g;
        } else if (is_op(p, "(")) {
            if (!(n = parse_call(p, n))) return NULL;
        } else {
            break;
        }
    }
    return n;
}

static node_t *parse_primary(prs_t *p)
{
    const ttok_t *t = CUR(p);
    char b[64];
    node_t *n;
    if (depth_in(p)) return NULL;
    switch (t->type) {
    case T_NAME:
        n = p_node(p, N_LIT, t->line);
        if (!n) return NULL;
        if (tok_is(t, T_NAME, "true") || tok_is(t, T_NAME, "True")) n->lit = tv_bool(1);
        else if (tok_is(t, T_NAME, "false") || tok_is(t, T_NAME, "False")) n->lit = tv_bool(0);
        else if (tok_is(t, T_NAME, "none") || tok_is(t, T_NAME, "None")) n->lit = tv_none();
        else {
            n->type = N_NAME;
            n->str = t->p; n->slen = t->n;
            n->name_id = intern(p, t->p, t->n);
        }
        p->i++;
        break;
    case T_STRING: {
        n = p_node(p, N_LIT, t->line);
        if (!n) return NULL;
        size_t total = 0;
        int j = p->i;
        while (p->tk[j].type == T_STRING) total += p->tk[j++].n;
        char *s = sits_tmpl_arena_alloc(&p->t->arena, total + 1);
        if (!s) { p->st = SITS_ERR_NOMEM; return NULL; }
        total = 0;
        while (CUR(p)->type == T_STRING) { memcpy(s + total, CUR(p)->p, CUR(p)->n); total += CUR(p)->n; p->i++; }
        n->lit = tv_str(s, total);
        break;
    }
    case T_INT:
        if (!(n = p_node(p, N_LIT, t->line))) return NULL;
        n->lit = tv_int(t->i);
        p->i++;
        break;
    case T_FLOAT:
        if (!(n = p_node(p, N_LIT, t->line))) return NULL;
        n->lit = tv_float(t->f);
        p->i++;
        break;
    case T_OP:
        if (tok_is(t, T_OP, "(")) {
            p->i++;
            n = parse_tuple(p, 0, 1, 1, NULL);
            if (!n || expect_op(p, ")")) return NULL;
            break;
        }
        if (tok_is(t, T_OP, "[") || tok_is(t, T_OP, "{")) {
            int dict = t->p[0] == '{';
            const char *close = dict ? "}" : "]";
            nvec_t items = { 0 };
            p->i++;
            while (!is_op(p, close)) {
                if (items.n && expect_op(p, ",")) return NULL;
                if (is_op(p, close)) break;
                node_t *e = parse_expr(p, 1);
                if (!e || nv_push(p, &items, e)) return NULL;
                if (dict) {
                    if (expect_op(p, ":")) return NULL;
                    if (!(e = parse_expr(p, 1)) || nv_push(p, &items, e)) return NULL;
                }
            }
            p->i++;
            if (!(n = p_node(p, dict ? N_DICT : N_LIST, t->line))) return NULL;
            n->kids = items.v; n->nkids = items.n;
            break;
        }
        /* fallthrough */
    default:
        p_fail(p, SITS_ERR_FORMAT, t->line, "unexpected %s", tok_desc(t, b, sizeof(b)));
        return NULL;
    }
    p->depth--;
    return n;
}

static node_t *parse_unary(prs_t *p, int with_filter)
{
    int line = CUR(p)->line;
    node_t *n;
    if (depth_in(p)) return NULL;
    if (is_op(p, "-") || is_op(p, "+")) {
        int neg = is_op(p, "-");
        p->i++;
        node_t *x = parse_unary(p, 0);
        if (!x || !(n = p_node(p, neg ? N_NEG : N_POS, line))) return NULL;
        n->a = x;
    } else {
        n = parse_primary(p);
    }
    n = parse_postfix(p, n);
    if (with_filter) n = parse_filter_expr(p, n);
    p->depth--;
    return n;
}

static node_t *binop(prs_t *p, int op, node_t *a, node_t *b, int line)
{
    if (!a || !b) return NULL;
    node_t *n = p_node(p, N_BINOP, line);
    if (!n) return NULL;
    n->op = (int16_t)op; n->a = a; n->b = b;
    return n;
}

static node_t *parse_pow(prs_t *p)
{
    node_t *n = parse_unary(p, 1);
    while (n && is_op(p, "**")) {
        int line = CUR(p)->line;
        p->i++;
        n = binop(p, OP_POW, n, parse_unary(p, 1), line);
    }
    return n;
}

static node_t *parse_math2(prs_t *p)
{
    node_t *n = parse_pow(p);
    while (n) {
        int line = CUR(p)->line, op;
        if (is_op(p, "*")) op = OP_MUL;
        else if (is_op(p, "/")) op = OP_DIV;
        else if (is_op(p, "//")) op = OP_FLOORDIV;
        else if (is_op(p, "%")) op = OP_MOD;
        else break;
        p->i++;
        n = binop(p, op, n, parse_pow(p), line);
    }
    return n;
}

static node_t *parse_concat(prs_t *p)
{
    int line = CUR(p)->line;
    node_t *n = parse_math2(p);
    if (!n || !is_op(p, "~")) return n;
    nvec_t v = { 0 };
    if (nv_push(p, &v, n)) return NULL;
    while (skip_op(p, "~")) {
        node_t *x = parse_math2(p);
        if (!x || nv_push(p, &v, x)) return NULL;
    }
    node_t *c = p_node(p, N_CONCAT, line);
    if (!c) return NULL;
    c->kids = v.v; c->nkids = v.n;
    return c;
}

static node_t *parse_math1(prs_t *p)
{
    node_t *n = parse_concat(p);
    while (n && (is_op(p, "+") || is_op(p, "-"))) {
        int line = CUR(p)->line, op = is_op(p, "+") ? OP_ADD : OP_SUB;
        p->i++;
        n = binop(p, op, n, parse_concat(p), line);
    }
    return n;
}

static node_t *parse_compare(prs_t *p)
{
    int line = CUR(p)->line;
    node_t *n = parse_math1(p);
    if (!n) return NULL;
    nvec_t v = { 0 };
    int *ops = NULL, cap = 0;
    for (;;) {
        int op;
        if (is_op(p, "==")) op = CMP_EQ;
        else if (is_op(p, "!=")) op = CMP_NE;
        else if (is_op(p, "<")) op = CMP_LT;
        else if (is_op(p, "<=")) op = CMP_LE;
        else if (is_op(p, ">")) op = CMP_GT;
        else if (is_op(p, ">=")) op = CMP_GE;
        else if (is_name(p, "in")) op = CMP_IN;
        else if (is_name(p, "not") && tok_is(&p->tk[p->i + 1], T_NAME, "in")) { op = CMP_NOTIN; p->i++; }
        else break;
        p->i++;
        if (!v.n && nv_push(p, &v, n)) return NULL;
        node_t *x = parse_math1(p);
        if (!x || nv_push(p, &v, x)) return NULL;
        if (v.n > cap) {
            int nc = v.cap;
            int *no = sits_tmpl_arena_alloc(&p->t->arena, (size_t)nc * sizeof(int));
            if (!no) { p->st = SITS_ERR_NOMEM; return NULL; }
            if (ops) memcpy(no, ops, (size_t)(v.n - 1) * sizeof(int));
            ops = no; cap = nc;
        }
        ops[v.n - 2] = op;
    }
    if (!v.n) return n;
    node_t *c = p_node(p, N_COMPARE, line);
    if (!c) return NULL;
    c->kids = v.v; c->nkids = v.n; c->ops = ops;
    return c;
}

static node_t *parse_not(prs_t *p)
{
    if (is_name(p, "not")) {
        int line = CUR(p)->line;
        p->i++;
        if (depth_in(p)) return NULL;
        node_t *x = parse_not(p);
        p->depth--;
        node_t *n = x ? p_node(p, N_NOT, line) : NULL;
        if (n) n->a = x;
        return n;
    }
    return parse_compare(p);
}

/* or_level 0: 'and' over 'not' operands; 1: 'or' over 'and' operands */
static node_t *parse_logic(prs_t *p, int or_level)
{
    const char *kw = or_level ? "or" : "and";
    node_t *n = or_level ? parse_logic(p, 0) : parse_not(p);
    while (n && is_name(p, kw)) {
        int line = CUR(p)->line;
        p->i++;
        node_t *b = or_level ? parse_logic(p, 0) : parse_not(p), *x = b ? p_node(p, or_level ? N_OR : N_AND, line) : NULL;
        if (!x) return NULL;
        x->a = n; x->b = b; n = x;
    }
    return n;
}

static node_t *parse_or(prs_t *p) { return parse_logic(p, 1); }

static node_t *parse_condexpr(prs_t *p)
{
    node_t *n = parse_or(p);
    while (n && is_name(p, "if")) {
        int line = CUR(p)->line;
        p->i++;
        if (depth_in(p)) return NULL;
        node_t *test = parse_or(p), *other = NULL;
        if (!test) return NULL;
        if (skip_name(p, "else") && !(other = parse_condexpr(p))) return NULL;
        p->depth--;
        node_t *c = p_node(p, N_COND, line);
        if (!c) return NULL;
        c->a = test; c->b = n; c->c = other;
        n = c;
    }
    return n;
}

static node_t *parse_expr(prs_t *p, int with_cond)
{
    return with_cond ? parse_condexpr(p) : parse_or(p);
}

/* ---- statements ---- */

static node_t *parse_body(prs_t *p, const char *const *ends, const char **which);

static int name_eq(const ttok_t *t, const char *s) { return tok_is(t, T_NAME, s); }

/* assignment target: name, tuple of names, or (with_ns) name.attr */
static node_t *parse_target(prs_t *p, int with_ns, const char *extra)
{
    if (with_ns && is_name(p, NULL) && tok_is(&p->tk[p->i + 1], T_OP, ".") && p->tk[p->i + 2].type == T_NAME) {
        node_t *n = p_node(p, N_NSREF, CUR(p)->line);
        if (!n) return NULL;
        n->name_id = intern(p, CUR(p)->p, CUR(p)->n);
        n->str = p->tk[p->i + 2].p; n->slen = p->tk[p->i + 2].n;
        p->i += 3;
        return n;
    }
    if (skip_op(p, "(")) {
        node_t *n = parse_tuple(p, 1, 0, 1, extra);
        if (!n || expect_op(p, ")")) return NULL;
        return n;
    }
    return parse_tuple(p, 1, 0, 0, extra);
}

static node_t *stmt_if(prs_t *p, int line)
{
    static const char *const ends[] = { "elif", "else", "endif", NULL };
    node_t *n = p_node(p, N_IF, line), *top = n;
    const char *w;
    if (!n) return NULL;
    for (;;) {
        if (!(n->a = parse_tuple(p, 0, 1, 0, NULL)) || expect_end(p)) return NULL;
        if (!(n->b = parse_body(p, ends, &w))) return NULL;
        if (!strcmp(w, "elif")) {
            node_t *e = p_node(p, N_IF, p->tk[p->i - 1].line);
            if (!e) return NULL;
            n->c = e; n = e;
            continue;
        }
        if (!strcmp(w, "else")) {
            static const char *const ends2[] = { "endif", NULL };
            if (expect_end(p) || !(n->c = parse_body(p, ends2, &w))) return NULL;
        }
        break;
    }
    return expect_end(p) ? NULL : top;
}

static node_t *stmt_for(prs_t *p, int line)
{
    static const char *const ends[] = { "endfor", "else", NULL };
    static const char *const ends2[] = { "endfor", NULL };
    node_t *n = p_node(p, N_FOR, line);
    const char *w;
    if (!n || !(n->a = parse_target(p, 0, "in"))) return NULL;
    if (!skip_name(p, "in")) { p_fail(p, SITS_ERR_FORMAT, CUR(p)->line, "expected 'in'"); return NULL; }
    if (!(n->b = parse_tuple(p, 0, 0, 0, "recursive"))) return NULL;
    if (skip_name(p, "if") && !(n->c = parse_expr(p, 1))) return NULL;
    if (skip_name(p, "recursive")) n->flag = 1;
    int saved = p->in_loop;
    p->in_loop = 1;
    if (expect_end(p) || !(n->d = parse_body(p, ends, &w))) return NULL;
    p->in_loop = saved;
    if (!strcmp(w, "else") && (expect_end(p) || !(n->e = parse_body(p, ends2, &w)))) return NULL;
    return expect_end(p) ? NULL : n;
}

static node_t *stmt_set(prs_t *p, int line)
{
    static const char *const ends[] = { "endset", NULL };
    const char *w;
    node_t *tg = parse_target(p, 1, NULL);
    if (!tg) return NULL;
    if (skip_op(p, "=")) {
        node_t *n = p_node(p, N_SET, line);
        if (!n || !(n->b = parse_tuple(p, 0, 1, 0, NULL)) || expect_end(p)) return NULL;
        n->a = tg;
        return n;
    }
    node_t *n = p_node(p, N_SETBLOCK, line);
    if (!n) return NULL;
    n->a = tg;
    if (is_op(p, "|")) {
        /* filter chain applied to the captured body (a NULL operand stands for it) */
        node_t *f = NULL;
        while (is_op(p, "|")) {
            int l = CUR(p)->line;
            p->i++;
            if (!(f = parse_filter(p, f, l))) return NULL;
        }
        n->c = f;
    }
    if (expect_end(p) || !(n->b = parse_body(p, ends, &w)) || expect_end(p)) return NULL;
    return n;
}

/* macro / call-block parameters: (name [= default], ...) into args.kwn / args.kwv */
static int parse_params(prs_t *p, targs_t *a)
{
    nvec_t defs = { 0 };
    const char **names = NULL;
    int cap = 0;
    if (expect_op(p, "(")) return -1;
    while (!is_op(p, ")")) {
        if (defs.n && expect_op(p, ",")) return -1;
        if (!is_name(p, NULL)) return p_fail(p, SITS_ERR_FORMAT, CUR(p)->line, "expected a parameter name");
        if (defs.n == cap) {
            cap = cap ? cap * 2 : 4;
            const char **nn = sits_tmpl_arena_alloc(&p->t->arena, (size_t)cap * sizeof(*nn));
            if (!nn) { p->st = SITS_ERR_NOMEM; return -1; }
            if (defs.n) memcpy(nn, names, (size_t)defs.n * sizeof(*nn));
            names = nn;
        }
        char *s = sits_tmpl_arena_alloc(&p->t->arena, CUR(p)->n + 1);
        if (!s) { p->st = SITS_ERR_NOMEM; return -1; }
        memcpy(s, CUR(p)->p, CUR(p)->n);
        names[defs.n] = s;
        intern(p, CUR(p)->p, CUR(p)->n);
        p->i++;
        node_t *d = NULL;
        if (skip_op(p, "=") && !(d = parse_expr(p, 1))) return -1;
        if (!d && defs.n && defs.v[defs.n - 1])
            return p_fail(p, SITS_ERR_FORMAT, CUR(p)->line, "non-default argument follows default argument");
        if (nv_push(p, &defs, d)) return -1;
    }
    p->i++;
    a->kwn = names; a->kwv = defs.v; a->nkw = defs.n;
    return 0;
}

static node_t *stmt_macro(prs_t *p, int line)
{
    static const char *const ends[] = { "endmacro", NULL };
    const char *w;
    node_t *n = p_node(p, N_MACRO, line);
    if (!n) return NULL;
    if (!is_name(p, NULL)) { p_fail(p, SITS_ERR_FORMAT, line, "expected a macro name"); return NULL; }
    n->str = CUR(p)->p; n->slen = CUR(p)->n;
    n->name_id = intern(p, n->str, n->slen);
    p->i++;
    if (parse_params(p, &n->args) || expect_end(p)) return NULL;
    int saved = p->in_loop;
    p->in_loop = 0;
    if (!(n->b = parse_body(p, ends, &w))) return NULL;
    p->in_loop = saved;
    if (is_name(p, NULL)) p->i++; /* {% endmacro name %} */
    return expect_end(p) ? NULL : n;
}

static node_t *stmt_call(prs_t *p, int line)
{
    static const char *const ends[] = { "endcall", NULL };
    const char *w;
    node_t *n = p_node(p, N_CALLBLOCK, line);
    if (!n) return NULL;
    if (is_op(p, "(") && parse_params(p, &n->args)) return NULL;
    if (!(n->a = parse_expr(p, 1))) return NULL;
    if (n->a->type != N_CALL) { p_fail(p, SITS_ERR_FORMAT, line, "expected call"); return NULL; }
    int saved = p->in_loop;
    p->in_loop = 0;
    if (expect_end(p) || !(n->b = parse_body(p, ends, &w)) || expect_end(p)) return NULL;
    p->in_loop = saved;
    n->str = "caller"; n->slen = 6;
    return n;
}

static node_t *stmt_filter(prs_t *p, int line)
{
    static const char *const ends[] = { "endfilter", NULL };
    const char *w;
    node_t *n = p_node(p, N_FILTERBLOCK, line), *f = NULL;
    if (!n) return NULL;
    do {
        if (!(f = parse_filter(p, f, CUR(p)->line))) return NULL;
    } while (skip_op(p, "|"));
    n->a = f;
    if (expect_end(p) || !(n->b = parse_body(p, ends, &w)) || expect_end(p)) return NULL;
    return n;
}

static node_t *stmt_with(prs_t *p, int line)
{
    static const char *const ends[] = { "endwith", NULL };
    const char *w;
    node_t *n = p_node(p, N_WITH, line);
    nvec_t v = { 0 };
    if (!n) return NULL;
    while (CUR(p)->type != T_BLOCK_END) {
        if (v.n && expect_op(p, ",")) return NULL;
        node_t *tg = parse_target(p, 0, NULL);
        if (!tg || expect_op(p, "=")) return NULL;
        node_t *e = parse_expr(p, 1);
        if (!e || nv_push(p, &v, tg) || nv_push(p, &v, e)) return NULL;
    }
    n->kids = v.v; n->nkids = v.n;
    if (expect_end(p) || !(n->b = parse_body(p, ends, &w)) || expect_end(p)) return NULL;
    return n;
}

static node_t *parse_statement(prs_t *p)
{
    const ttok_t *t = CUR(p);
    int line = t->line;
    char b[64];
    if (t->type != T_NAME) {
        p_fail(p, SITS_ERR_FORMAT, line, "tag name expected, got %s", tok_desc(t, b, sizeof(b)));
        return NULL;
    }
    p->i++;
    if (name_eq(t, "if")) return stmt_if(p, line);
    if (name_eq(t, "for")) return stmt_for(p, line);
    if (name_eq(t, "set")) return stmt_set(p, line);
    if (name_eq(t, "macro")) return stmt_macro(p, line);
    if (name_eq(t, "call")) return stmt_call(p, line);
    if (name_eq(t, "filter")) return stmt_filter(p, line);
    if (name_eq(t, "with")) return stmt_with(p, line);
    if (name_eq(t, "break") || name_eq(t, "continue")) {
        if (!p->in_loop) {
            p_fail(p, SITS_ERR_FORMAT, line, "'%.*s' outside loop", (int)t->n, t->p);
            return NULL;
        }
        node_t *n = p_node(p, name_eq(t, "break") ? N_BREAK : N_CONTINUE, line);
        return (!n || expect_end(p)) ? NULL : n;
    }
    if (name_eq(t, "print")) {
        node_t *n = p_node(p, N_OUTPUT, line);
        if (!n || !(n->a = parse_tuple(p, 0, 1, 0, NULL)) || expect_end(p)) return NULL;
        return n;
    }
    if (name_eq(t, "generation")) {
        static const char *const ends[] = { "endgeneration", NULL };
        const char *w;
        node_t *n = p_node(p, N_GENERATION, line);
        int saved = p->in_loop;
        p->in_loop = 0;   /* the body is a caller() in transformers' AssistantTracker */
        if (!n || expect_end(p) || !(n->b = parse_body(p, ends, &w)) || expect_end(p)) return NULL;
        p->in_loop = saved;
        return n;
    }
    static const char *const known[] = { "block", "extends", "include", "import", "from", "autoescape", NULL };
    for (int k = 0; known[k]; k++)
        if (name_eq(t, known[k])) {
            p_fail(p, SITS_ERR_UNSUPPORTED, line, "unsupported statement '%s'", known[k]);
            return NULL;
        }
    p_fail(p, SITS_ERR_FORMAT, line, "encountered unknown tag '%.*s'", (int)t->n, t->p);
    return NULL;
}

/* Statements until a block whose tag is in ends (then *which is set and the position is just after
 * that tag name), or the end of the template when ends is NULL. */
static node_t *parse_body(prs_t *p, const char *const *ends, const char **which)
{
    nvec_t v = { 0 };
    node_t *body = p_node(p, N_BODY, CUR(p)->line);
    if (!body || depth_in(p)) return NULL;
    for (;;) {
        const ttok_t *t = CUR(p);
        node_t *n = NULL;
        if (t->type == T_EOF) {
            if (ends) {
                p_fail(p, SITS_ERR_FORMAT, t->line, "unexpected end of template, expected '%s'", ends[0]);
                return NULL;
            }
            break;
        }
        if (t->type == T_DATA) {
            if (!(n = p_node(p, N_TEXT, t->line))) return NULL;
            n->str = t->p; n->slen = t->n;
            p->i++;
        } else if (t->type == T_VAR_BEGIN) {
            p->i++;
            if (!(n = p_node(p, N_OUTPUT, t->line))) return NULL;
            if (!(n->a = parse_tuple(p, 0, 1, 0, NULL))) return NULL;
            if (CUR(p)->type != T_VAR_END) {
                char b[64];
                p_fail(p, SITS_ERR_FORMAT, CUR(p)->line, "expected end of print statement, got %s",
                       tok_desc(CUR(p), b, sizeof(b)));
                return NULL;
            }
            p->i++;
        } else if (t->type == T_BLOCK_BEGIN) {
            p->i++;
            const ttok_t *nm = CUR(p);
            if (ends && nm->type == T_NAME)
                for (int k = 0; ends[k]; k++)
                    if (name_eq(nm, ends[k])) {
                        p->i++;
                        *which = ends[k];
                        goto done;
                    }
            if (nm->type == T_NAME && nm->n > 3 && (!memcmp(nm->p, "end", 3) || name_eq(nm, "elif") ||
                                                    name_eq(nm, "else"))) {
                p_fail(p, SITS_ERR_FORMAT, nm->line, "unexpected '%.*s'", (int)nm->n, nm->p);
                return NULL;
            }
            if (name_eq(nm, "else") || name_eq(nm, "elif")) {
                p_fail(p, SITS_ERR_FORMAT, nm->line, "unexpected '%.*s'", (int)nm->n, nm->p);
                return NULL;
            }
            if (!(n = parse_statement(p))) return NULL;
        } else {
            p_fail(p, SITS_ERR_FORMAT, t->line, "unexpected token");
            return NULL;
        }
        if (nv_push(p, &v, n)) return NULL;
    }
done:
    p->depth--;
    body->kids = v.v; body->nkids = v.n;
    return body;
}

/* jinja2 refuses an unknown filter or test at compile time unless it sits in an {% if %} or a
 * conditional expression of the same frame (loops, macros, call/filter/set blocks open a new one). */
static int check_soft(prs_t *p, const node_t *n, int soft, int depth)
{
    if (!n) return 0;
    /* operator chains (a + b + ... , x|f|g|...) build deep left-leaning trees without nesting brackets */
    if (depth > TMPL_MAX_AST_DEPTH) return p_fail(p, SITS_ERR_FORMAT, n->line, "expression nested too deeply");
    if ((n->type == N_FILTER || n->type == N_TEST) && n->op == -2 && !soft)
        return p_fail(p, SITS_ERR_FORMAT, n->line, "no %s named '%.*s'", n->type == N_FILTER ? "filter" : "test",
                      (int)n->slen, n->str);
    int s_in = soft, s_a = soft, s_b = soft, s_c = soft, s_d = soft, s_e = soft;
    switch (n->type) {
    case N_IF: case N_COND: s_in = s_a = s_b = s_c = 1; break;
    case N_FOR: s_c = s_d = s_e = 0; s_a = 0; break;
    case N_MACRO: case N_GENERATION: s_in = s_a = s_b = 0; break;
    case N_CALLBLOCK: s_b = 0; s_in = 0; break;
    case N_FILTERBLOCK: s_a = s_b = 0; break;
    case N_SETBLOCK: s_b = s_c = 0; break;
    case N_WITH: s_b = 0; break;
    default: break;
    }
    depth++;
    if (check_soft(p, n->a, s_a, depth) || check_soft(p, n->b, s_b, depth) || check_soft(p, n->c, s_c, depth) ||
        check_soft(p, n->d, s_d, depth) || check_soft(p, n->e, s_e, depth)) return -1;
    for (int i = 0; i < n->nkids; i++)
        if (check_soft(p, n->kids[i], n->type == N_BODY ? soft : s_in, depth)) return -1;
    for (int i = 0; i < n->args.npos; i++) if (check_soft(p, n->args.pos[i], s_in, depth)) return -1;
    for (int i = 0; i < n->args.nkw; i++) if (check_soft(p, n->args.kwv[i], s_in, depth)) return -1;
    return 0;
}

sits_status_t sits_tmpl_parse(sits_tmpl_t *t, const ttok_t *toks, int ntoks, sits_tmpl_error_t *err)
{
    prs_t p = { .t = t, .tk = toks, .n = ntoks, .err = err, .st = SITS_OK };
    node_t *root = parse_body(&p, NULL, NULL);
    if (!root) return p.st != SITS_OK ? p.st : SITS_ERR_FORMAT;
    if (check_soft(&p, root, 0, 0)) return p.st;
    t->root = root;
    return SITS_OK;
}
