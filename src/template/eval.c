/* eval.c -- compile/render entry points and the tree-walking evaluator.
 *
 * Scopes follow jinja2: the template's top level is one frame (macros see it at call time); a for
 * loop body, a macro call, a call/filter/set/with/generation block each get their own frame, so a
 * {% set %} inside them does not leak out (namespaces are the way out, as in jinja2); {% if %} opens
 * none. Name lookup walks the frames, then the render variables (converted from JSON on first use and
 * cached), then the globals (range, namespace, dict, raise_exception, strftime_now). Output goes to
 * rt->out; macros and blocks capture by swapping it. Limits: TMPL_MAX_* in tmpl_internal.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include "template/tmpl_internal.h"

static int exec_node(trt_t *rt, const node_t *n, frame_t *f);

/* ---- frames ---- */
static frame_t *frame_new(trt_t *rt, frame_t *parent)
{
    frame_t *f = sits_tmpl_rt_alloc(rt, sizeof(*f));
    if (f) f->parent = parent;
    return f;
}

static int frame_set(trt_t *rt, frame_t *f, int id, tv_t v)
{
    for (int i = 0; i < f->n; i++) if (f->ids[i] == id) { f->vals[i] = v; return 0; }
    if (f->n == f->cap) {
        int cap = f->cap ? f->cap * 2 : 8;
        int *ni = sits_tmpl_rt_alloc(rt, (size_t)cap * sizeof(int));
        tv_t *nv = ni ? sits_tmpl_rt_alloc(rt, (size_t)cap * sizeof(tv_t)) : NULL;
        if (!nv) return -1;
        if (f->n) { memcpy(ni, f->ids, (size_t)f->n * sizeof(int)); memcpy(nv, f->vals, (size_t)f->n * sizeof(tv_t)); }
        f->ids = ni; f->vals = nv; f->cap = cap;
    }
    f->ids[f->n] = id; f->vals[f->n] = v; f->n++;
    return 0;
}

static int name_id(const sits_tmpl_t *t, const char *s)
{
    for (int i = 0; i < t->nnames; i++) if (!strcmp(t->names[i], s)) return i;
    return -1;
}

static int lookup(trt_t *rt, frame_t *f, int id, tv_t *out)
{
    for (frame_t *x = f; x; x = x->parent)
        for (int i = 0; i < x->n; i++) if (x->ids[i] == id) { *out = x->vals[i]; return 0; }
    const char *nm = rt->t->names[id];
    const json_t *j = rt->vars ? json_object_get(rt->vars, nm) : NULL;
    if (j) {
        if (sits_tmpl_tv_from_json(rt, j, out)) return -1;
        return frame_set(rt, rt->root, id, *out);
    }
    int g = sits_tmpl_global_lookup(nm, strlen(nm));
    if (g >= 0) {
        tfunc_t *fn = sits_tmpl_rt_alloc(rt, sizeof(*fn));
        if (!fn) return -1;
        fn->kind = FN_BUILTIN; fn->id = g; fn->name = nm; fn->nlen = strlen(nm);
        tv_t v = { .type = TV_FUNC };
        v.u.fn = fn;
        *out = v;
        return 0;
    }
    char *h = sits_tmpl_rt_alloc(rt, strlen(nm) + 20);
    if (!h) return -1;
    sprintf(h, "'%s' is undefined", nm);
    *out = tv_undef(h);
    return 0;
}

/* ---- arithmetic ---- */
static int is_intlike(tv_t v) { return v.type == TV_INT || v.type == TV_BOOL; }
static int is_number(tv_t v) { return is_intlike(v) || v.type == TV_FLOAT; }
static double as_f(tv_t v) { return v.type == TV_FLOAT ? v.u.f : (double)v.u.i; }

static const char *op_sym(int op)
{
    static const char *const s[] = { "+", "-", "*", "/", "//", "%", "**" };
    return s[op];
}

static int undef_fail(trt_t *rt, tv_t v)
{
    return sits_tmpl_fail(rt, SITS_ERR_INVALID, "%s", v.u.hint ? v.u.hint : "undefined value");
}

static int seq_repeat(trt_t *rt, tv_t s, int64_t k, tv_t *out)
{
    if (k < 0) k = 0;
    if (s.type == TV_STR) {
        if (s.u.s.n && (uint64_t)k > TMPL_MAX_MEMORY / s.u.s.n) return sits_tmpl_fail(rt, SITS_ERR_INVALID,
            "template memory limit exceeded");
        char *p = sits_tmpl_rt_alloc(rt, s.u.s.n * (size_t)k + 1);
        if (!p) return -1;
        for (int64_t i = 0; i < k; i++) memcpy(p + (size_t)i * s.u.s.n, s.u.s.p, s.u.s.n);
        *out = tv_str(p, s.u.s.n * (size_t)k);
        out->kind = s.kind;
        return 0;
    }
    size_t n = s.u.l->n;
    if (n && (uint64_t)k > TMPL_MAX_MEMORY / (n * sizeof(tv_t))) return sits_tmpl_fail(rt, SITS_ERR_INVALID,
        "template memory limit exceeded");
    tlist_t *l = sits_tmpl_tl_new(rt, n * (size_t)k);
    if (!l) return -1;
    for (int64_t i = 0; i < k; i++) { TMEMCPY(l->v + l->n, s.u.l->v, n * sizeof(tv_t)); l->n += n; }
    *out = sits_tmpl_tv_list(l, s.kind == LK_TUPLE ? LK_TUPLE : LK_LIST);
    return 0;
}

static int arith(trt_t *rt, int op, tv_t a, tv_t b, tv_t *out)
{
    if (a.type == TV_UNDEF) return undef_fail(rt, a);
    if (b.type == TV_UNDEF) return undef_fail(rt, b);
    if (is_intlike(a) && is_intlike(b)) {
        int64_t x = a.u.i, y = b.u.i, r;
        switch (op) {
        case OP_ADD: if (__builtin_add_overflow(x, y, &r)) goto ovf; *out = tv_int(r); return 0;
        case OP_SUB: if (__builtin_sub_overflow(x, y, &r)) goto ovf; *out = tv_int(r); return 0;
        case OP_MUL: if (__builtin_mul_overflow(x, y, &r)) goto ovf; *out = tv_int(r); return 0;
        case OP_DIV:
            if (y == 0) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "division by zero");
            *out = tv_float((double)x / (double)y);
            return 0;
        case OP_FLOORDIV: case OP_MOD:
            if (y == 0) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) goto ovf;
            {
                int64_t q = x / y, m = x % y;
                if (m != 0 && ((m < 0) != (y < 0))) { q--; m += y; }
                *out = tv_int(op == OP_MOD ? m : q);
            }
            return 0;
        case OP_POW:
            if (y < 0) {
                if (x == 0) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "0.0 cannot be raised to a negative power");
                *out = tv_float(pow((double)x, (double)y));
                return 0;
            }
            if (x == 0 || x == 1) r = y == 0 ? 1 : x;
            else if (x == -1) r = (y % 2) ? -1 : 1;
            else {
                /* |x| >= 2: overflows within 63 steps */
                r = 1;
                for (int64_t i = 0; i < y; i++) if (__builtin_mul_overflow(r, x, &r)) goto ovf;
            }
            *out = tv_int(r);
            return 0;
        }
    }
    if (is_number(a) && is_number(b)) {
        double x = as_f(a), y = as_f(b);
        switch (op) {
        case OP_ADD: *out = tv_float(x + y); return 0;
        case OP_SUB: *out = tv_float(x - y); return 0;
        case OP_MUL: *out = tv_float(x * y); return 0;
        case OP_DIV:
            if (y == 0) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "float division by zero");
            *out = tv_float(x / y);
            return 0;
        case OP_FLOORDIV: case OP_MOD: {
            if (y == 0) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "float modulo");
            /* CPython's float_divmod */
            double m = fmod(x, y), div = (x - m) / y, fd;
            if (m != 0) {
                if ((y < 0) != (m < 0)) { m += y; div -= 1.0; }
            } else {
                m = copysign(0.0, y);
            }
            if (div != 0) {
                fd = floor(div);
                if (div - fd > 0.5) fd += 1.0;
            } else {
                fd = copysign(0.0, x / y);
            }
            *out = tv_float(op == OP_MOD ? m : fd);
            return 0;
        }
        case OP_POW:
            if (x == 0 && y < 0) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "0.0 cannot be raised to a negative power");
            if (x < 0 && y != floor(y)) return sits_tmpl_fail(rt, SITS_ERR_UNSUPPORTED, "complex results are not supported");
            *out = tv_float(pow(x, y));
            return 0;
        }
    }
    if (op == OP_ADD && a.type == TV_STR && b.type == TV_STR) {
        /* Markup + str escapes the str (markupsafe's __add__ / __radd__) and stays Markup */
        int markup = a.kind == 1 || b.kind == 1;
        if (markup && (sits_tmpl_html_escape(rt, a, &a) || sits_tmpl_html_escape(rt, b, &b))) return -1;
        char *p = sits_tmpl_rt_alloc(rt, a.u.s.n + b.u.s.n + 1);
        if (!p) return -1;
        memcpy(p, a.u.s.p, a.u.s.n);
        memcpy(p + a.u.s.n, b.u.s.p, b.u.s.n);
        *out = tv_str(p, a.u.s.n + b.u.s.n);
        out->kind = (uint8_t)markup;
        return 0;
    }
    if (op == OP_ADD && a.type == TV_LIST && b.type == TV_LIST && a.kind == b.kind &&
        (a.kind == LK_LIST || a.kind == LK_TUPLE)) {
        tlist_t *l = sits_tmpl_tl_new(rt, a.u.l->n + b.u.l->n);
        if (!l) return -1;
        TMEMCPY(l->v, a.u.l->v, a.u.l->n * sizeof(tv_t));
        TMEMCPY(l->v + a.u.l->n, b.u.l->v, b.u.l->n * sizeof(tv_t));
        l->n = a.u.l->n + b.u.l->n;
        *out = sits_tmpl_tv_list(l, a.kind);
        return 0;
    }
    if (op == OP_MUL) {
        int seq_a = a.type == TV_STR || (a.type == TV_LIST && (a.kind == LK_LIST || a.kind == LK_TUPLE));
        int seq_b = b.type == TV_STR || (b.type == TV_LIST && (b.kind == LK_LIST || b.kind == LK_TUPLE));
        if (seq_a && is_intlike(b)) return seq_repeat(rt, a, b.u.i, out);
        if (seq_b && is_intlike(a)) return seq_repeat(rt, b, a.u.i, out);
    }
    if (op == OP_MOD && a.type == TV_STR) return sits_tmpl_str_percent(rt, a, b, out);
    return sits_tmpl_fail(rt, SITS_ERR_INVALID, "unsupported operand type(s) for %s: '%s' and '%s'", op_sym(op),
                     sits_tmpl_type_name(a), sits_tmpl_type_name(b));
ovf:
    return sits_tmpl_fail(rt, SITS_ERR_INVALID, "integer overflow (beyond 64 bits)");
}

static int contains(trt_t *rt, tv_t item, tv_t c, int *res)
{
    switch (c.type) {
    case TV_STR:
        if (item.type != TV_STR)
            return sits_tmpl_fail(rt, SITS_ERR_INVALID, "'in <string>' requires string as left operand, not %s", sits_tmpl_type_name(item));
        if (item.u.s.n == 0) { *res = 1; return 0; }
        *res = 0;
        for (size_t i = 0; i + item.u.s.n <= c.u.s.n; i++)
            if (memcmp(c.u.s.p + i, item.u.s.p, item.u.s.n) == 0) { *res = 1; break; }
        return 0;
    case TV_LIST:
        *res = 0;
        if (c.u.l->err) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "%s", c.u.l->err);
        if (c.kind == LK_ITEMS || c.kind == LK_KEYS || c.kind == LK_VALUES || c.kind == LK_LIST || c.kind == LK_TUPLE ||
            c.kind == LK_ITER)
            for (size_t i = 0; i < c.u.l->n; i++) if (sits_tmpl_tv_eq(c.u.l->v[i], item)) { *res = 1; break; }
        return 0;
    case TV_DICT:
        if ((item.type == TV_LIST && item.kind != LK_TUPLE && item.kind != LK_ITER) || item.type == TV_DICT)
            return sits_tmpl_fail(rt, SITS_ERR_INVALID, "unhashable type: '%s'", sits_tmpl_type_name(item));
        *res = sits_tmpl_td_find(c.u.d, item) >= 0;
        return 0;
    case TV_UNDEF:
        *res = 0;
        return 0;
    default:
        return sits_tmpl_fail(rt, SITS_ERR_INVALID, "argument of type '%s' is not iterable", sits_tmpl_type_name(c));
    }
}

static int compare(trt_t *rt, int op, tv_t a, tv_t b, int *res)
{
    int c;
    switch (op) {
    case CMP_EQ: *res = sits_tmpl_tv_eq(a, b); return 0;
    case CMP_NE: *res = !sits_tmpl_tv_eq(a, b); return 0;
    case CMP_IN: return contains(rt, a, b, res);
    case CMP_NOTIN: if (contains(rt, a, b, res)) return -1; *res = !*res; return 0;
    default: break;
    }
    if (a.type == TV_UNDEF || b.type == TV_UNDEF) return undef_fail(rt, a.type == TV_UNDEF ? a : b);
    if (sits_tmpl_tv_cmp(rt, a, b, &c)) return -1;
    *res = op == CMP_LT ? c < 0 : op == CMP_LE ? c <= 0 : op == CMP_GT ? c > 0 : c >= 0;
    return 0;
}

/* ---- slices ---- */
static int slice_value(trt_t *rt, tv_t obj, const node_t *s, frame_t *f, tv_t *out)
{
    tv_t parts[3];
    int has[3] = { 0, 0, 0 };
    const node_t *pn[3] = { s->a, s->b, s->c };
    int64_t v[3] = { 0, 0, 1 };
    for (int i = 0; i < 3; i++) {
        if (!pn[i]) continue;
        if (sits_tmpl_eval(rt, pn[i], f, &parts[i])) return -1;
        if (parts[i].type == TV_NONE) continue;
        if (!is_intlike(parts[i]))
            return sits_tmpl_fail(rt, SITS_ERR_INVALID, "slice indices must be integers or None");
        has[i] = 1;
        v[i] = parts[i].u.i;
    }
    if (obj.type == TV_UNDEF) return undef_fail(rt, obj);
    int is_str = obj.type == TV_STR;
    tlist_t *items = NULL;
    if (is_str) {
        if (sits_tmpl_tv_iter(rt, obj, &items)) return -1;
    } else if (obj.type == TV_LIST && (obj.kind == LK_LIST || obj.kind == LK_TUPLE)) {
        items = obj.u.l;
    } else {
        *out = tv_undef("object is not subscriptable with a slice");
        return 0;
    }
    int64_t n = (int64_t)items->n, step = v[2];
    if (step == 0) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "slice step cannot be zero");
    int64_t start, stop;
    if (step > 0) {
        start = has[0] ? v[0] : 0;
        stop = has[1] ? v[1] : n;
        if (start < 0) { start += n; if (start < 0) start = 0; } else if (start > n) start = n;
        if (stop < 0) { stop += n; if (stop < 0) stop = 0; } else if (stop > n) stop = n;
    } else {
        start = has[0] ? v[0] : n - 1;
        stop = has[1] ? v[1] : -1 - n;
        if (start < 0) { start += n; if (start < 0) start = -1; } else if (start >= n) start = n - 1;
        if (stop < 0) { stop += n; if (stop < 0) stop = -1; } else if (stop >= n) stop = n - 1;
    }
    tlist_t *r = sits_tmpl_tl_new(rt, 0);
    if (!r) return -1;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
        if (sits_tmpl_tl_push(rt, r, items->v[i])) return -1;
    if (!is_str) { *out = sits_tmpl_tv_list(r, obj.kind); return 0; }
    size_t total = 0;
    for (size_t i = 0; i < r->n; i++) total += r->v[i].u.s.n;
    char *p = sits_tmpl_rt_alloc(rt, total + 1);
    if (!p) return -1;
    total = 0;
    for (size_t i = 0; i < r->n; i++) { memcpy(p + total, r->v[i].u.s.p, r->v[i].u.s.n); total += r->v[i].u.s.n; }
    *out = tv_str(p, total);
    return 0;
}

/* ---- calls ---- */
static int eval_args(trt_t *rt, const targs_t *a, frame_t *f, tv_t **pos_p, tv_t **kwv_p)
{
    tv_t *pos = NULL, *kwv = NULL;
    if (a->npos && !(pos = sits_tmpl_rt_alloc(rt, (size_t)a->npos * sizeof(tv_t)))) return -1;
    if (a->nkw && !(kwv = sits_tmpl_rt_alloc(rt, (size_t)a->nkw * sizeof(tv_t)))) return -1;
    for (int i = 0; i < a->npos; i++) if (sits_tmpl_eval(rt, a->pos[i], f, &pos[i])) return -1;
    for (int i = 0; i < a->nkw; i++) if (sits_tmpl_eval(rt, a->kwv[i], f, &kwv[i])) return -1;
    *pos_p = pos; *kwv_p = kwv;
    return 0;
}

static int capture(trt_t *rt, const node_t *body, frame_t *f, tv_t *out)
{
    tbuf_t b = { 0 }, *saved = rt->out;
    rt->out = &b;
    int r = exec_node(rt, body, f);
    rt->out = saved;
    if (!r) r = sits_tmpl_tbuf_to_str(rt, &b, out);
    sits_tmpl_tbuf_release(&b);
    return r;
}

static int call_macro(trt_t *rt, tfunc_t *fn, tv_t *pos, int npos, const char **kwn, tv_t *kwv, int nkw, tv_t *out)
{
    const node_t *m = fn->macro;
    const targs_t *params = &m->args;
    if (rt->call_depth >= TMPL_MAX_CALL_DEPTH) return sits_tmpl_fail(rt, SITS_ERR_INVALID,
        "recursion deeper than %d calls", TMPL_MAX_CALL_DEPTH);
    frame_t *mf = frame_new(rt, fn->closure);
    if (!mf) return -1;
    int id_varargs = name_id(rt->t, "varargs"), id_kwargs = name_id(rt->t, "kwargs"), id_caller = name_id(rt->t, "caller");
    int *bound = sits_tmpl_rt_alloc(rt, (size_t)(params->nkw + 1) * sizeof(int));
    if (!bound) return -1;
    int np = params->nkw;
    tlist_t *extra = sits_tmpl_tl_new(rt, 0);
    tdict_t *extrakw = sits_tmpl_td_new(rt, 0);
    if (!extra || !extrakw) return -1;
    for (int i = 0; i < npos; i++) {
        if (i < np) {
            int id = name_id(rt->t, params->kwn[i]);
            if (frame_set(rt, mf, id, pos[i])) return -1;
            bound[i] = 1;
        } else if (sits_tmpl_tl_push(rt, extra, pos[i])) return -1;
    }
    if (extra->n && (id_varargs < 0 || m->type == N_CALLBLOCK))
        return sits_tmpl_fail(rt, SITS_ERR_INVALID, "macro '%.*s' takes not more than %d argument(s)", (int)m->slen, m->str, np);
    for (int k = 0; k < nkw; k++) {
        int found = 0;
        for (int i = 0; i < np; i++)
            if (!strcmp(params->kwn[i], kwn[k])) {
                if (bound[i]) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "macro '%.*s' got multiple values for argument '%s'",
                                               (int)m->slen, m->str, kwn[k]);
                if (frame_set(rt, mf, name_id(rt->t, params->kwn[i]), kwv[k])) return -1;
                bound[i] = 1; found = 1;
                break;
            }
        if (!found) {
            if (!strcmp(kwn[k], "caller") && fn->caller) continue;
            if (id_kwargs < 0) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "macro '%.*s' takes no keyword argument '%s'",
                                                (int)m->slen, m->str, kwn[k]);
            if (sits_tmpl_td_set(rt, extrakw, tv_str(kwn[k], strlen(kwn[k])), kwv[k])) return -1;
        }
    }
    rt->call_depth++;
    int r = 0;
    for (int i = 0; i < np && !r; i++) {
        if (bound[i]) continue;
        tv_t v;
        if (params->kwv[i]) r = sits_tmpl_eval(rt, params->kwv[i], mf, &v);
        else {
            char *h = sits_tmpl_rt_alloc(rt, strlen(params->kwn[i]) + 32);
            if (!h) { r = -1; break; }
            sprintf(h, "parameter '%s' was not provided", params->kwn[i]);
            v = tv_undef(h);
        }
        if (!r) r = frame_set(rt, mf, name_id(rt->t, params->kwn[i]), v);
    }
    if (!r && id_varargs >= 0) r = frame_set(rt, mf, id_varargs, sits_tmpl_tv_list(extra, LK_TUPLE));
    if (!r && id_kwargs >= 0) r = frame_set(rt, mf, id_kwargs, sits_tmpl_tv_dict(extrakw));
    if (!r && id_caller >= 0 && fn->caller) {
        tv_t c = { .type = TV_FUNC };
        c.u.fn = fn->caller;
        r = frame_set(rt, mf, id_caller, c);
    }
    if (!r) r = capture(rt, m->b, mf, out);
    rt->brk = 0;
    rt->call_depth--;
    return r;
}

static int run_for(trt_t *rt, const node_t *n, frame_t *f, tv_t iterable, int depth0);

int sits_tmpl_call_value(trt_t *rt, tv_t fv, tv_t *pos, int npos, const char **kwn, tv_t *kwv, int nkw, tv_t *out)
{
    if (fv.type == TV_UNDEF) {
        if (fv.kind == 1) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "SecurityError: %s", fv.u.hint);
        return undef_fail(rt, fv);
    }
    if (fv.type == TV_LOOP) {
        /* loop(iterable) of a recursive loop */
        tloop_t *lp = fv.u.lp;
        if (!lp->fornode || !lp->fornode->flag)
            return sits_tmpl_fail(rt, SITS_ERR_INVALID, "Tried to call non recursive loop.  Maybe you forgot the 'recursive' modifier.");
        if (npos != 1 || nkw) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "loop() takes one argument");
        if (rt->call_depth >= TMPL_MAX_CALL_DEPTH) return sits_tmpl_fail(rt, SITS_ERR_INVALID,
            "recursion deeper than %d calls", TMPL_MAX_CALL_DEPTH);
        tbuf_t b = { 0 }, *saved = rt->out;
        rt->out = &b;
        rt->call_depth++;
        int r = run_for(rt, lp->fornode, lp->outer, pos[0], lp->depth0 + 1);
        rt->call_depth--;
        rt->out = saved;
        if (!r) r = sits_tmpl_tbuf_to_str(rt, &b, out);
        sits_tmpl_tbuf_release(&b);
        return r;
    }
    if (fv.type != TV_FUNC) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "'%s' object is not callable", sits_tmpl_type_name(fv));
    tfunc_t *fn = fv.u.fn;
    switch (fn->kind) {
    case FN_MACRO: return call_macro(rt, fn, pos, npos, kwn, kwv, nkw, out);
    case FN_BUILTIN: return sits_tmpl_call_global(rt, fn->id, pos, npos, kwn, kwv, nkw, out);
    case FN_METHOD: {
        int found = 0;
        if (sits_tmpl_call_method(rt, fn->self, fn->name, fn->nlen, pos, npos, kwn, kwv, nkw, out, &found)) return -1;
        return 0;
    }
    case FN_LOOP_CYCLE: {
        if (npos == 0) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "no items for cycling given");
        *out = pos[fn->loop->index0 % (size_t)npos];
        return 0;
    }
    case FN_LOOP_CHANGED: {
        /* True when the argument tuple differs from the previous call's (jinja2 LoopContext.changed) */
        tloop_t *lp = fn->loop;
        tlist_t *now = sits_tmpl_tl_new(rt, (size_t)npos);
        if (!now || nkw) return nkw ? sits_tmpl_fail(rt, SITS_ERR_INVALID, "changed() takes no keyword arguments") : -1;
        TMEMCPY(now->v, pos, (size_t)npos * sizeof(tv_t));
        now->n = (size_t)npos;
        int changed = !lp->changed_last ||
            !sits_tmpl_tv_eq(sits_tmpl_tv_list(lp->changed_last, LK_TUPLE), sits_tmpl_tv_list(now, LK_TUPLE));
        if (changed) lp->changed_last = now;
        *out = tv_bool(changed);
        return 0;
    }
    default:
        return sits_tmpl_fail(rt, SITS_ERR_INVALID, "object is not callable");
    }
}

static int eval_call(trt_t *rt, const node_t *n, frame_t *f, tfunc_t *caller, tv_t *out)
{
    tv_t *pos, *kwv, fv;
    const node_t *fnode = n->a;
    if (fnode->type == N_GETATTR) {
        tv_t obj;
        if (sits_tmpl_eval(rt, fnode->a, f, &obj)) return -1;
        if (obj.type == TV_UNDEF) return undef_fail(rt, obj);
        if (eval_args(rt, &n->args, f, &pos, &kwv)) return -1;
        rt->line = n->line;
        if (obj.type != TV_NS && obj.type != TV_LOOP && obj.type != TV_FUNC) {
            int found = 0;
            if (sits_tmpl_call_method(rt, obj, fnode->str, fnode->slen, pos, n->args.npos, n->args.kwn, kwv, n->args.nkw,
                                 out, &found)) return -1;
            if (found) return 0;
        }
        if (sits_tmpl_getattr(rt, obj, fnode->str, fnode->slen, &fv)) return -1;
    } else {
        if (sits_tmpl_eval(rt, fnode, f, &fv)) return -1;
        if (eval_args(rt, &n->args, f, &pos, &kwv)) return -1;
        rt->line = n->line;
    }
    if (caller) {
        if (fv.type != TV_FUNC || fv.u.fn->kind != FN_MACRO)
            return sits_tmpl_fail(rt, SITS_ERR_INVALID, "a call block needs a macro");
        tfunc_t *copy = sits_tmpl_rt_alloc(rt, sizeof(*copy));
        if (!copy) return -1;
        *copy = *fv.u.fn;
        copy->caller = caller;
        fv.u.fn = copy;
    }
    return sits_tmpl_call_value(rt, fv, pos, n->args.npos, n->args.kwn, kwv, n->args.nkw, out);
}

static int apply_filter_node(trt_t *rt, const node_t *n, frame_t *f, tv_t *in, tv_t *out)
{
    tv_t v, *pos, *kwv;
    if (n->a) { if (sits_tmpl_eval(rt, n->a, f, &v)) return -1; }
    else v = *in;
    if (eval_args(rt, &n->args, f, &pos, &kwv)) return -1;
    rt->line = n->line;
    if (n->op < 0) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "No filter named '%.*s' found.", (int)n->slen, n->str);
    return sits_tmpl_apply_filter(rt, n->op, v, pos, n->args.npos, n->args.kwn, kwv, n->args.nkw, out);
}

/* a filter chain whose innermost operand is NULL: the captured block text */
static int apply_chain(trt_t *rt, const node_t *n, frame_t *f, tv_t in, tv_t *out)
{
    if (!n) { *out = in; return 0; }
    tv_t mid;
    if (n->a) { if (apply_chain(rt, n->a, f, in, &mid)) return -1; }
    else mid = in;
    node_t tmp = *n;
    tmp.a = NULL;
    return apply_filter_node(rt, &tmp, f, &mid, out);
}

int sits_tmpl_eval(trt_t *rt, const node_t *n, frame_t *f, tv_t *out)
{
    if (++rt->depth > TMPL_MAX_EVAL_DEPTH) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "evaluation nested too deeply");
    int r = 0;
    tv_t a, b;
    rt->line = n->line;
    switch (n->type) {
    case N_LIT: *out = n->lit; break;
    case N_NAME: r = lookup(rt, f, n->name_id, out); break;
    case N_LIST: case N_TUPLE: {
        tlist_t *l = sits_tmpl_tl_new(rt, (size_t)n->nkids);
        if (!l) { r = -1; break; }
        for (int i = 0; i < n->nkids && !r; i++) r = sits_tmpl_eval(rt, n->kids[i], f, &l->v[l->n++]);
        *out = sits_tmpl_tv_list(l, n->type == N_TUPLE ? LK_TUPLE : LK_LIST);
        break;
    }
    case N_DICT: {
        tdict_t *d = sits_tmpl_td_new(rt, (size_t)n->nkids / 2);
        if (!d) { r = -1; break; }
        for (int i = 0; i + 1 < n->nkids && !r; i += 2) {
            r = sits_tmpl_eval(rt, n->kids[i], f, &a);
            if (!r) r = sits_tmpl_eval(rt, n->kids[i + 1], f, &b);
            if (!r) r = sits_tmpl_td_set(rt, d, a, b);
        }
        *out = sits_tmpl_tv_dict(d);
        break;
    }
    case N_GETATTR:
        if (!(r = sits_tmpl_eval(rt, n->a, f, &a))) { rt->line = n->line; r = sits_tmpl_getattr(rt, a, n->str, n->slen, out); }
        break;
    case N_GETITEM:
        if ((r = sits_tmpl_eval(rt, n->a, f, &a))) break;
        if (n->b->type == N_SLICE) { r = slice_value(rt, a, n->b, f, out); break; }
        if (!(r = sits_tmpl_eval(rt, n->b, f, &b))) { rt->line = n->line; r = sits_tmpl_getitem(rt, a, b, out); }
        break;
    case N_CALL: r = eval_call(rt, n, f, NULL, out); break;
    case N_FILTER: r = apply_filter_node(rt, n, f, NULL, out); break;
    case N_TEST: {
        tv_t *pos, *kwv;
        if ((r = sits_tmpl_eval(rt, n->a, f, &a)) || (r = eval_args(rt, &n->args, f, &pos, &kwv))) break;
        rt->line = n->line;
        if (n->op < 0) { r = sits_tmpl_fail(rt, SITS_ERR_INVALID, "No test named '%.*s' found.", (int)n->slen, n->str); break; }
        if (n->args.nkw) { r = sits_tmpl_fail(rt, SITS_ERR_UNSUPPORTED, "keyword arguments to tests are not supported"); break; }
        if (!(r = sits_tmpl_apply_test(rt, n->op, a, pos, n->args.npos, out)) && n->flag) *out = tv_bool(!sits_tmpl_tv_truthy(*out));
        break;
    }
    case N_BINOP:
        if (!(r = sits_tmpl_eval(rt, n->a, f, &a)) && !(r = sits_tmpl_eval(rt, n->b, f, &b))) {
            rt->line = n->line;
            r = arith(rt, n->op, a, b, out);
        }
        break;
    case N_NEG: case N_POS:
        if ((r = sits_tmpl_eval(rt, n->a, f, &a))) break;
        if (a.type == TV_UNDEF) { r = undef_fail(rt, a); break; }
        if (a.type == TV_FLOAT) *out = tv_float(n->type == N_NEG ? -a.u.f : a.u.f);
        else if (is_intlike(a)) {
            if (n->type == N_NEG && a.u.i == INT64_MIN) { r = sits_tmpl_fail(rt, SITS_ERR_INVALID, "integer overflow"); break; }
            *out = tv_int(n->type == N_NEG ? -a.u.i : a.u.i);
        } else r = sits_tmpl_fail(rt, SITS_ERR_INVALID, "bad operand type for unary %s: '%s'", n->type == N_NEG ? "-" : "+",
                             sits_tmpl_type_name(a));
        break;
    case N_NOT:
        if (!(r = sits_tmpl_eval(rt, n->a, f, &a))) *out = tv_bool(!sits_tmpl_tv_truthy(a));
        break;
    case N_AND:
        if ((r = sits_tmpl_eval(rt, n->a, f, &a))) break;
        if (!sits_tmpl_tv_truthy(a)) *out = a;
        else r = sits_tmpl_eval(rt, n->b, f, out);
        break;
    case N_OR:
        if ((r = sits_tmpl_eval(rt, n->a, f, &a))) break;
        if (sits_tmpl_tv_truthy(a)) *out = a;
        else r = sits_tmpl_eval(rt, n->b, f, out);
        break;
    case N_COMPARE: {
        if ((r = sits_tmpl_eval(rt, n->kids[0], f, &a))) break;
        int res = 1;
        for (int i = 1; i < n->nkids && res; i++) {
            if ((r = sits_tmpl_eval(rt, n->kids[i], f, &b))) break;
            rt->line = n->line;
            if ((r = compare(rt, n->ops[i - 1], a, b, &res))) break;
            a = b;
        }
        *out = tv_bool(res);
        break;
    }
    case N_COND:
        if ((r = sits_tmpl_eval(rt, n->a, f, &a))) break;
        if (sits_tmpl_tv_truthy(a)) r = sits_tmpl_eval(rt, n->b, f, out);
        else if (n->c) r = sits_tmpl_eval(rt, n->c, f, out);
        else *out = tv_undef("the inline if-expression evaluated to false and no else section was defined.");
        break;
    case N_CONCAT: {
        tbuf_t buf = { 0 };
        for (int i = 0; i < n->nkids && !r; i++) {
            if (!(r = sits_tmpl_eval(rt, n->kids[i], f, &a))) r = sits_tmpl_tv_str_append(rt, &buf, a);
        }
        if (!r) r = sits_tmpl_tbuf_to_str(rt, &buf, out);
        sits_tmpl_tbuf_release(&buf);
        break;
    }
    default:
        r = sits_tmpl_fail(rt, SITS_ERR_INTERNAL, "bad expression node %d", n->type);
    }
    rt->depth--;
    return r;
}

/* ---- statements ---- */
static int assign(trt_t *rt, const node_t *tg, frame_t *f, tv_t v)
{
    if (tg->type == N_NAME) return frame_set(rt, f, tg->name_id, v);
    if (tg->type == N_NSREF) {
        tv_t ns;
        if (lookup(rt, f, tg->name_id, &ns)) return -1;
        if (ns.type != TV_NS) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "cannot assign attribute on non-namespace object");
        if (tg->slen && tg->str[0] == '_')
            return sits_tmpl_fail(rt, SITS_ERR_INVALID,
                "SecurityError: chat templates cannot store underscore-prefixed attributes on a namespace");
        return sits_tmpl_td_set(rt, ns.u.d, tv_str(tg->str, tg->slen), v);
    }
    /* tuple unpacking */
    tlist_t *items;
    if (v.type == TV_UNDEF) return undef_fail(rt, v);
    if (sits_tmpl_tv_iter(rt, v, &items)) return -1;
    if ((int)items->n != tg->nkids)
        return sits_tmpl_fail(rt, SITS_ERR_INVALID, items->n > (size_t)tg->nkids ? "too many values to unpack (expected %d)"
                                                                               : "not enough values to unpack (expected %d)", tg->nkids);
    for (int i = 0; i < tg->nkids; i++) if (assign(rt, tg->kids[i], f, items->v[i])) return -1;
    return 0;
}

static int run_for(trt_t *rt, const node_t *n, frame_t *f, tv_t iterable, int depth0)
{
    tlist_t *items;
    if (iterable.type == TV_UNDEF && iterable.kind == 1) return undef_fail(rt, iterable);
    if (sits_tmpl_tv_iter(rt, iterable, &items)) return -1;
    frame_t *lf = frame_new(rt, f);
    tloop_t *lp = sits_tmpl_rt_alloc(rt, sizeof(*lp));
    if (!lf || !lp) return -1;
    int id_loop = name_id(rt->t, "loop");
    if (n->c) {
        /* {% for x in y if cond %}: filter first so loop.length / loop.last see the filtered items */
        tlist_t *kept = sits_tmpl_tl_new(rt, 0);
        if (!kept) return -1;
        for (size_t i = 0; i < items->n; i++) {
            tv_t c;
            if (++rt->iterations > TMPL_MAX_ITER) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "more than 10 million loop iterations");
            if (assign(rt, n->a, lf, items->v[i]) || sits_tmpl_eval(rt, n->c, lf, &c)) return -1;
            if (!sits_tmpl_tv_truthy(c)) continue;
            tv_t item = items->v[i];
            if (n->a->type == N_TUPLE) {
                /* jinja2's filtered loop yields the unpacked targets again, as a tuple */
                tlist_t *src, *tup;
                if (sits_tmpl_tv_iter(rt, item, &src) || !(tup = sits_tmpl_tl_new(rt, src->n))) return -1;
                TMEMCPY(tup->v, src->v, src->n * sizeof(tv_t));
                tup->n = src->n;
                item = sits_tmpl_tv_list(tup, LK_TUPLE);
            }
            if (sits_tmpl_tl_push(rt, kept, item)) return -1;
        }
        items = kept;
    }
    lp->items = items; lp->depth0 = depth0; lp->fornode = n; lp->outer = f;
    tv_t lv = { .type = TV_LOOP };
    lv.u.lp = lp;
    for (size_t i = 0; i < items->n; i++) {
        if (++rt->iterations > TMPL_MAX_ITER) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "more than 10 million loop iterations");
        lp->index0 = i;
        /* a fresh frame per iteration: a {% set %} in the body does not carry over (jinja2) */
        if (i > 0 && !(lf = frame_new(rt, f))) return -1;
        if (assign(rt, n->a, lf, items->v[i])) return -1;
        if (id_loop >= 0 && frame_set(rt, lf, id_loop, lv)) return -1;
        if (exec_node(rt, n->d, lf)) return -1;
        if (rt->brk == 1) { rt->brk = 0; break; }
        rt->brk = 0;
    }
    if (items->n == 0 && n->e) return exec_node(rt, n->e, f);
    return 0;
}

static int exec_node(trt_t *rt, const node_t *n, frame_t *f)
{
    tv_t v;
    int r = 0;
    if (++rt->depth > TMPL_MAX_EVAL_DEPTH) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "evaluation nested too deeply");
    rt->line = n->line;
    switch (n->type) {
    case N_BODY:
        for (int i = 0; i < n->nkids && !r; i++) {
            r = exec_node(rt, n->kids[i], f);
            if (rt->brk) break;
        }
        break;
    case N_TEXT: r = sits_tmpl_tbuf_put(rt, rt->out, n->str, n->slen); break;
    case N_OUTPUT:
        if (!(r = sits_tmpl_eval(rt, n->a, f, &v))) r = sits_tmpl_tv_str_append(rt, rt->out, v);
        break;
    case N_IF:
        if ((r = sits_tmpl_eval(rt, n->a, f, &v))) break;
        if (sits_tmpl_tv_truthy(v)) r = exec_node(rt, n->b, f);
        else if (n->c) r = exec_node(rt, n->c, f);
        break;
    case N_FOR:
        if (!(r = sits_tmpl_eval(rt, n->b, f, &v))) r = run_for(rt, n, f, v, 0);
        break;
    case N_SET:
        if (!(r = sits_tmpl_eval(rt, n->b, f, &v))) r = assign(rt, n->a, f, v);
        break;
    case N_SETBLOCK: {
        frame_t *bf = frame_new(rt, f);
        if (!bf || (r = capture(rt, n->b, bf, &v))) { r = -1; break; }
        if (rt->brk) break;   /* a break/continue inside the block leaves before the assignment */
        if (!(r = apply_chain(rt, n->c, f, v, &v))) r = assign(rt, n->a, f, v);
        break;
    }
    case N_FILTERBLOCK: {
        frame_t *bf = frame_new(rt, f);
        if (!bf || capture(rt, n->b, bf, &v)) { r = -1; break; }
        if (rt->brk) break;   /* as in jinja2, the buffered text is dropped */
        if (!(r = apply_chain(rt, n->a, f, v, &v))) r = sits_tmpl_tv_str_append(rt, rt->out, v);
        break;
    }
    case N_MACRO: {
        tfunc_t *fn = sits_tmpl_rt_alloc(rt, sizeof(*fn));
        if (!fn) { r = -1; break; }
        fn->kind = FN_MACRO; fn->macro = n; fn->closure = f; fn->name = n->str; fn->nlen = n->slen;
        v.type = TV_FUNC;
        v.u.fn = fn;
        r = frame_set(rt, f, n->name_id, v);
        break;
    }
    case N_CALLBLOCK: {
        tfunc_t *caller = sits_tmpl_rt_alloc(rt, sizeof(*caller));
        if (!caller) { r = -1; break; }
        caller->kind = FN_MACRO; caller->macro = n; caller->closure = f; caller->name = "caller"; caller->nlen = 6;
        if (!(r = eval_call(rt, n->a, f, caller, &v))) r = sits_tmpl_tv_str_append(rt, rt->out, v);
        break;
    }
    case N_WITH: {
        frame_t *wf = frame_new(rt, f);
        if (!wf) { r = -1; break; }
        for (int i = 0; i + 1 < n->nkids && !r; i += 2)
            if (!(r = sits_tmpl_eval(rt, n->kids[i + 1], f, &v))) r = assign(rt, n->kids[i], wf, v);
        if (!r) r = exec_node(rt, n->b, wf);
        break;
    }
    case N_GENERATION: {
        frame_t *gf = frame_new(rt, f);
        r = gf ? exec_node(rt, n->b, gf) : -1;
        break;
    }
    case N_BREAK: rt->brk = 1; break;
    case N_CONTINUE: rt->brk = 2; break;
    default:
        r = sits_tmpl_fail(rt, SITS_ERR_INTERNAL, "bad statement node %d", n->type);
    }
    rt->depth--;
    return r;
}

/* ---- API ---- */
sits_status_t sits_tmpl_compile(const char *src, size_t len, sits_tmpl_t **tmpl_p, sits_tmpl_error_t *err)
{
    if (err) memset(err, 0, sizeof(*err));
    if (!src || !tmpl_p) return SITS_ERR_INVALID;
    sits_tmpl_t *t = calloc(1, sizeof(*t));
    if (!t) return SITS_ERR_NOMEM;
    ttok_t *toks;
    int ntoks;
    sits_status_t st = sits_tmpl_lex(src, len, &t->arena, &toks, &ntoks, err);
    if (st == SITS_OK) st = sits_tmpl_parse(t, toks, ntoks, err);
    if (st != SITS_OK) {
        sits_tmpl_destroy(t);
        return st;
    }
    *tmpl_p = t;
    return SITS_OK;
}

void sits_tmpl_destroy(sits_tmpl_t *tmpl)
{
    if (!tmpl) return;
    sits_tmpl_arena_free(&tmpl->arena);
    free(tmpl);
}

sits_status_t sits_tmpl_render(const sits_tmpl_t *tmpl, const json_t *vars, const sits_tmpl_render_opts_t *opts,
                               char **out_p, size_t *len_p, sits_tmpl_error_t *err)
{
    if (err) memset(err, 0, sizeof(*err));
    if (!tmpl || !out_p || (vars && !json_is_object(vars))) return SITS_ERR_INVALID;
    tbuf_t out = { 0 };
    trt_t rt = { .t = tmpl, .vars = vars, .err = err, .st = SITS_OK, .out = &out };
    rt.arena.limit = TMPL_MAX_MEMORY;
    rt.now = opts && opts->now ? opts->now : time(NULL);
    rt.root = frame_new(&rt, NULL);
    int r = rt.root ? exec_node(&rt, tmpl->root, rt.root) : -1;
    if (!r) r = sits_tmpl_tbuf_put(&rt, &out, "", 0);
    sits_tmpl_arena_free(&rt.arena);
    if (r) {
        sits_tmpl_tbuf_release(&out);
        return rt.st != SITS_OK ? rt.st : SITS_ERR_INTERNAL;
    }
    *out_p = out.p;
    if (len_p) *len_p = out.n;
    return SITS_OK;
}
