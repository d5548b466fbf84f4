/* value.c -- arenas, output buffers and the Python semantics of values: truthiness, ==, <, str(),
 * repr(), json.dumps (as transformers' tojson calls it), len() and iteration, JSON input conversion.
 *
 * Floats print as Python's repr (shortest round-trip digits; exponent form when the decimal exponent
 * is < -4 or >= 16). Strings are UTF-8; repr() quotes as Python does (single quotes unless the string
 * holds ' and no ") and escapes non-printable code points (unicode categories via utf8proc). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <utf8proc.h>
#include "template/tmpl_internal.h"

struct tmpl_chunk {
    tmpl_chunk_t *next;
    size_t used, cap;
    _Alignas(16) char data[];
};

void *sits_tmpl_arena_alloc(tmpl_arena_t *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    tmpl_chunk_t *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        if (c && c->cap * 2 > cap && c->cap < ((size_t)16 << 20)) cap = c->cap * 2 > n ? c->cap * 2 : n;
        if (a->limit && a->total + cap > a->limit) { a->hit_limit = 1; return NULL; }
        c = malloc(sizeof(*c) + cap);
        if (!c) return NULL;
        c->used = 0; c->cap = cap; c->next = a->head;
        a->head = c;
        a->total += cap;
    }
    void *p = c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

void sits_tmpl_arena_free(tmpl_arena_t *a)
{
    tmpl_chunk_t *c = a->head;
    while (c) { tmpl_chunk_t *nx = c->next; free(c); c = nx; }
    a->head = NULL;
    a->total = 0;
}

void sits_tmpl_err_set(sits_tmpl_error_t *err, int line, const char *fmt, ...)
{
    if (!err) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
    err->line = line;
    err->raised = 0;
}

int sits_tmpl_fail(trt_t *rt, sits_status_t st, const char *fmt, ...)
{
    if (rt->st != SITS_OK) return -1;
    rt->st = st;
    if (rt->err) {
        char m[480];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(m, sizeof(m), fmt, ap);
        va_end(ap);
        snprintf(rt->err->msg, sizeof(rt->err->msg), "line %d: %s", rt->line, m);
        rt->err->line = rt->line;
        rt->err->raised = 0;
    }
    return -1;
}

void *sits_tmpl_rt_alloc(trt_t *rt, size_t n)
{
    void *p = sits_tmpl_arena_alloc(&rt->arena, n);
    if (!p) {
        if (rt->arena.hit_limit) sits_tmpl_fail(rt, SITS_ERR_INVALID, "template memory limit exceeded");
        else sits_tmpl_fail(rt, SITS_ERR_NOMEM, "out of memory");
    }
    return p;
}

/* ---- output buffers (malloc'd, they outlive nothing but a render) ---- */
int sits_tmpl_tbuf_put(trt_t *rt, tbuf_t *b, const char *p, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        if (b->n + n > TMPL_MAX_OUTPUT) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "output larger than 64 MiB");
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np) return sits_tmpl_fail(rt, SITS_ERR_NOMEM, "out of memory");
        b->p = np; b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

int sits_tmpl_tbuf_puts(trt_t *rt, tbuf_t *b, const char *s) { return sits_tmpl_tbuf_put(rt, b, s, strlen(s)); }
int sits_tmpl_tbuf_putc(trt_t *rt, tbuf_t *b, char c) { return sits_tmpl_tbuf_put(rt, b, &c, 1); }

int sits_tmpl_tbuf_printf(trt_t *rt, tbuf_t *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (k < 0) k = 0;
    if ((size_t)k >= sizeof(tmp)) k = sizeof(tmp) - 1;
    return sits_tmpl_tbuf_put(rt, b, tmp, (size_t)k);
}

int sits_tmpl_tbuf_to_str(trt_t *rt, tbuf_t *b, tv_t *out)
{
    char *p = sits_tmpl_rt_alloc(rt, b->n + 1);
    if (!p) return -1;
    if (b->n) memcpy(p, b->p, b->n);
    *out = tv_str(p, b->n);
    b->n = 0;
    return 0;
}

void sits_tmpl_tbuf_release(tbuf_t *b) { free(b->p); b->p = NULL; b->n = b->cap = 0; }

tv_t *sits_tmpl_rt_str_dup(trt_t *rt, const char *p, size_t n, tv_t *out)
{
    char *c = sits_tmpl_rt_alloc(rt, n + 1);
    if (!c) return NULL;
    if (n) memcpy(c, p, n);
    *out = tv_str(c, n);
    return out;
}

/* ---- lists and dicts ---- */
tlist_t *sits_tmpl_tl_new(trt_t *rt, size_t cap)
{
    tlist_t *l = sits_tmpl_rt_alloc(rt, sizeof(*l));
    if (!l) return NULL;
    if (cap) {
        if (cap > TMPL_MAX_MEMORY / sizeof(tv_t)) { sits_tmpl_fail(rt, SITS_ERR_INVALID, "template memory limit exceeded"); return NULL; }
        if (!(l->v = sits_tmpl_rt_alloc(rt, cap * sizeof(tv_t)))) return NULL;
        l->cap = cap;
    }
    return l;
}

int sits_tmpl_tl_push(trt_t *rt, tlist_t *l, tv_t v)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        tv_t *nv = sits_tmpl_rt_alloc(rt, cap * sizeof(tv_t));
        if (!nv) return -1;
        if (l->n) memcpy(nv, l->v, l->n * sizeof(tv_t));
        l->v = nv; l->cap = cap;
    }
    l->v[l->n++] = v;
    return 0;
}

tv_t sits_tmpl_tv_list(tlist_t *l, int kind) { tv_t v = { .type = TV_LIST, .kind = (uint8_t)kind }; v.u.l = l; return v; }
tv_t sits_tmpl_tv_dict(tdict_t *d) { tv_t v = { .type = TV_DICT }; v.u.d = d; return v; }

tdict_t *sits_tmpl_td_new(trt_t *rt, size_t cap)
{
    tdict_t *d = sits_tmpl_rt_alloc(rt, sizeof(*d));
    if (!d) return NULL;
    if (cap) {
        if (!(d->k = sits_tmpl_rt_alloc(rt, cap * sizeof(tv_t))) || !(d->v = sits_tmpl_rt_alloc(rt, cap * sizeof(tv_t)))) return NULL;
        d->cap = cap;
    }
    return d;
}

int sits_tmpl_td_find_str(const tdict_t *d, const char *p, size_t n)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].type == TV_STR && d->k[i].u.s.n == n && memcmp(d->k[i].u.s.p, p, n) == 0) return (int)i;
    return -1;
}

int sits_tmpl_td_find(const tdict_t *d, tv_t k)
{
    if (k.type == TV_STR) return sits_tmpl_td_find_str(d, k.u.s.p, k.u.s.n);
    for (size_t i = 0; i < d->n; i++) if (sits_tmpl_tv_eq(d->k[i], k)) return (int)i;
    return -1;
}

int sits_tmpl_td_set(trt_t *rt, tdict_t *d, tv_t k, tv_t v)
{
    int i = sits_tmpl_td_find(d, k);
    if (i >= 0) { d->v[i] = v; return 0; }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        tv_t *nk = sits_tmpl_rt_alloc(rt, cap * sizeof(tv_t)), *nv = nk ? sits_tmpl_rt_alloc(rt, cap * sizeof(tv_t)) : NULL;
        if (!nv) return -1;
        if (d->n) { memcpy(nk, d->k, d->n * sizeof(tv_t)); memcpy(nv, d->v, d->n * sizeof(tv_t)); }
        d->k = nk; d->v = nv; d->cap = cap;
    }
    d->k[d->n] = k; d->v[d->n] = v; d->n++;
    return 0;
}

/* ---- UTF-8 ---- */
int sits_tmpl_u8_decode(const char *p, size_t n, size_t *i, uint32_t *cp)
{
    const unsigned char *s = (const unsigned char *)p;
    size_t k = *i;
    unsigned c = s[k];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || k + (size_t)len > n) { *cp = 0xfffd; *i = k + 1; return -1; }
    uint32_t v = len == 1 ? c : len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
    for (int j = 1; j < len; j++) {
        if ((s[k + (size_t)j] & 0xc0) != 0x80) { *cp = 0xfffd; *i = k + 1; return -1; }
        v = (v << 6) | (s[k + (size_t)j] & 0x3f);
    }
    *cp = v;
    *i = k + (size_t)len;
    return 0;
}

int sits_tmpl_u8_encode(uint32_t cp, char *o)
{
    return (int)utf8proc_encode_char((utf8proc_int32_t)cp, (utf8proc_uint8_t *)o);
}

size_t sits_tmpl_u8_len(const char *p, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)p[i] & 0xc0) != 0x80;
    return c;
}

int sits_tmpl_py_isspace(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f ||
           cp == 0x205f || cp == 0x3000;
}

/* ---- Python semantics ---- */
const char *sits_tmpl_type_name(tv_t v)
{
    switch (v.type) {
    case TV_UNDEF: return "Undefined";
    case TV_NONE: return "NoneType";
    case TV_BOOL: return "bool";
    case TV_INT: return "int";
    case TV_FLOAT: return "float";
    case TV_STR: return "str";
    case TV_LIST:
        switch (v.kind) {
        case LK_TUPLE: return "tuple";
        case LK_ITER: return "generator";
        case LK_ITEMS: return "dict_items";
        case LK_KEYS: return "dict_keys";
        case LK_VALUES: return "dict_values";
        default: return "list";
        }
    case TV_DICT: return "dict";
    case TV_FUNC: return "function";
    case TV_NS: return "Namespace";
    case TV_LOOP: return "LoopContext";
    }
    return "object";
}

int sits_tmpl_tv_truthy(tv_t v)
{
    switch (v.type) {
    case TV_UNDEF: case TV_NONE: return 0;
    case TV_BOOL: case TV_INT: return v.u.i != 0;
    case TV_FLOAT: return v.u.f != 0.0;
    case TV_STR: return v.u.s.n != 0;
    case TV_LIST: return v.kind == LK_ITER ? 1 : v.u.l->n != 0;
    case TV_DICT: return v.u.d->n != 0;
    default: return 1;
    }
}

static int is_num(tv_t v) { return v.type == TV_BOOL || v.type == TV_INT || v.type == TV_FLOAT; }
static double num_f(tv_t v) { return v.type == TV_FLOAT ? v.u.f : (double)v.u.i; }

static int eq_rec(tv_t a, tv_t b, int depth);

/* Python raises RecursionError comparing values nested ~1000 deep; here such values compare unequal. */
int sits_tmpl_tv_eq(tv_t a, tv_t b) { return eq_rec(a, b, 0); }

static int eq_rec(tv_t a, tv_t b, int depth)
{
    if (depth > TMPL_MAX_EVAL_DEPTH) return 0;
    if (is_num(a) && is_num(b)) {
        if (a.type != TV_FLOAT && b.type != TV_FLOAT) return a.u.i == b.u.i;
        return num_f(a) == num_f(b);
    }
    if (a.type != b.type) return 0;
    switch (a.type) {
    case TV_UNDEF: case TV_NONE: return 1;
    case TV_STR: return a.u.s.n == b.u.s.n && memcmp(a.u.s.p, b.u.s.p, a.u.s.n) == 0;
    case TV_LIST:
        if (a.kind == LK_ITER || b.kind == LK_ITER) return a.u.l == b.u.l;
        if ((a.kind == LK_TUPLE) != (b.kind == LK_TUPLE) || a.u.l->n != b.u.l->n) return 0;
        for (size_t i = 0; i < a.u.l->n; i++) if (!eq_rec(a.u.l->v[i], b.u.l->v[i], depth + 1)) return 0;
        return 1;
    case TV_DICT:
        if (a.u.d->n != b.u.d->n) return 0;
        for (size_t i = 0; i < a.u.d->n; i++) {
            int j = sits_tmpl_td_find(b.u.d, a.u.d->k[i]);
            if (j < 0 || !eq_rec(a.u.d->v[i], b.u.d->v[j], depth + 1)) return 0;
        }
        return 1;
    case TV_FUNC: return a.u.fn == b.u.fn;
    case TV_NS: return a.u.d == b.u.d;
    case TV_LOOP: return a.u.lp == b.u.lp;
    default: return 0;
    }
}

int sits_tmpl_tv_cmp(trt_t *rt, tv_t a, tv_t b, int *res)
{
    if (is_num(a) && is_num(b)) {
        if (a.type != TV_FLOAT && b.type != TV_FLOAT) *res = a.u.i < b.u.i ? -1 : a.u.i > b.u.i;
        else { double x = num_f(a), y = num_f(b); *res = x < y ? -1 : x > y; }
        return 0;
    }
    if (a.type == TV_STR && b.type == TV_STR) {
        size_t n = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
        int c = n ? memcmp(a.u.s.p, b.u.s.p, n) : 0;
        *res = c ? (c < 0 ? -1 : 1) : (a.u.s.n < b.u.s.n ? -1 : a.u.s.n > b.u.s.n);
        return 0;
    }
    if (a.type == TV_LIST && b.type == TV_LIST && a.kind != LK_ITER && b.kind != LK_ITER &&
        (a.kind == LK_TUPLE) == (b.kind == LK_TUPLE)) {
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (sits_tmpl_tv_eq(a.u.l->v[i], b.u.l->v[i])) continue;
            if (++rt->depth > TMPL_MAX_EVAL_DEPTH) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "value nested too deeply");
            int r = sits_tmpl_tv_cmp(rt, a.u.l->v[i], b.u.l->v[i], res);
            rt->depth--;
            return r;
        }
        *res = a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
        return 0;
    }
    return sits_tmpl_fail(rt, SITS_ERR_INVALID, "'<' not supported between instances of '%s' and '%s'",
                     sits_tmpl_type_name(a), sits_tmpl_type_name(b));
}

void sits_tmpl_format_float(double f, char *buf, size_t cap)
{
    if (isnan(f)) { snprintf(buf, cap, "nan"); return; }
    if (isinf(f)) { snprintf(buf, cap, f < 0 ? "-inf" : "inf"); return; }
    if (f == 0) { snprintf(buf, cap, signbit(f) ? "-0.0" : "0.0"); return; }
    char e[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(e, sizeof(e), "%.*e", prec - 1, f);
        if (strtod(e, NULL) == f) break;
    }
    /* e: [-]d[.ddd]e[+-]XX -> digits and decimal exponent */
    char digits[24];
    int nd = 0, neg = 0;
    const char *q = e;
    if (*q == '-') { neg = 1; q++; }
    for (; *q && *q != 'e'; q++) if (*q != '.') digits[nd++] = *q;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    int exp10 = atoi(q + 1);       /* value = d.ddd * 10^exp10 */
    int decpt = exp10 + 1;         /* Python's decpt: value = 0.ddd * 10^decpt */
    char out[64];
    size_t k = 0;
    if (neg) out[k++] = '-';
    if (decpt <= -4 || decpt > 16) {
        out[k++] = digits[0];
        if (nd > 1) { out[k++] = '.'; for (int i = 1; i < nd; i++) out[k++] = digits[i]; }
        k += (size_t)snprintf(out + k, sizeof(out) - k, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
    } else if (decpt <= 0) {
        out[k++] = '0'; out[k++] = '.';
        for (int i = 0; i < -decpt; i++) out[k++] = '0';
        for (int i = 0; i < nd; i++) out[k++] = digits[i];
    } else {
        for (int i = 0; i < decpt; i++) out[k++] = i < nd ? digits[i] : '0';
        out[k++] = '.';
        if (nd > decpt) for (int i = decpt; i < nd; i++) out[k++] = digits[i];
        else out[k++] = '0';
    }
    out[k] = 0;
    snprintf(buf, cap, "%s", out);
}

static int py_isprintable(uint32_t cp)
{
    if (cp == ' ') return 1;
    if (cp < 0x20 || cp == 0x7f) return 0;
    if (cp < 0x7f) return 1;
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    switch (c) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS: case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL: case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
        return 0;
    default:
        return 1;
    }
}

static int str_repr(trt_t *rt, tbuf_t *b, const char *p, size_t n)
{
    int has_sq = memchr(p, '\'', n) != NULL, has_dq = memchr(p, '"', n) != NULL;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    if (sits_tmpl_tbuf_putc(rt, b, q)) return -1;
    size_t i = 0;
    while (i < n) {
        size_t st = i;
        uint32_t cp;
        sits_tmpl_u8_decode(p, n, &i, &cp);
        int r;
        if (cp == (uint32_t)q || cp == '\\') { char e[2] = { '\\', (char)cp }; r = sits_tmpl_tbuf_put(rt, b, e, 2); }
        else if (cp == '\n') r = sits_tmpl_tbuf_put(rt, b, "\\n", 2);
        else if (cp == '\r') r = sits_tmpl_tbuf_put(rt, b, "\\r", 2);
        else if (cp == '\t') r = sits_tmpl_tbuf_put(rt, b, "\\t", 2);
        else if (py_isprintable(cp)) r = sits_tmpl_tbuf_put(rt, b, p + st, i - st);
        else if (cp < 0x100) r = sits_tmpl_tbuf_printf(rt, b, "\\x%02x", cp);
        else if (cp < 0x10000) r = sits_tmpl_tbuf_printf(rt, b, "\\u%04x", cp);
        else r = sits_tmpl_tbuf_printf(rt, b, "\\U%08x", cp);
        if (r) return -1;
    }
    return sits_tmpl_tbuf_putc(rt, b, q);
}

static int seq_repr(trt_t *rt, tbuf_t *b, tv_t v)
{
    const tlist_t *l = v.u.l;
    const char *open = "[", *close = "]";
    if (v.kind == LK_TUPLE) { open = "("; close = l->n == 1 ? ",)" : ")"; }
    else if (v.kind == LK_ITEMS) { open = "dict_items(["; close = "])"; }
    else if (v.kind == LK_KEYS) { open = "dict_keys(["; close = "])"; }
    else if (v.kind == LK_VALUES) { open = "dict_values(["; close = "])"; }
    else if (v.kind == LK_ITER) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "printing a generator object is not supported");
    if (sits_tmpl_tbuf_puts(rt, b, open)) return -1;
    for (size_t i = 0; i < l->n; i++) {
        if (i && sits_tmpl_tbuf_put(rt, b, ", ", 2)) return -1;
        if (sits_tmpl_tv_repr_append(rt, b, l->v[i])) return -1;
    }
    return sits_tmpl_tbuf_puts(rt, b, close);
}

static int dict_repr(trt_t *rt, tbuf_t *b, const tdict_t *d)
{
    if (sits_tmpl_tbuf_putc(rt, b, '{')) return -1;
    for (size_t i = 0; i < d->n; i++) {
        if (i && sits_tmpl_tbuf_put(rt, b, ", ", 2)) return -1;
        if (sits_tmpl_tv_repr_append(rt, b, d->k[i]) || sits_tmpl_tbuf_put(rt, b, ": ", 2) ||
            sits_tmpl_tv_repr_append(rt, b, d->v[i]))
            return -1;
    }
    return sits_tmpl_tbuf_putc(rt, b, '}');
}

static int scalar_str(trt_t *rt, tbuf_t *b, tv_t v)
{
    char num[64];
    switch (v.type) {
    case TV_NONE: return sits_tmpl_tbuf_put(rt, b, "None", 4);
    case TV_BOOL: return v.u.i ? sits_tmpl_tbuf_put(rt, b, "True", 4) : sits_tmpl_tbuf_put(rt, b, "False", 5);
    case TV_INT: return sits_tmpl_tbuf_printf(rt, b, "%lld", (long long)v.u.i);
    case TV_FLOAT: sits_tmpl_format_float(v.u.f, num, sizeof(num)); return sits_tmpl_tbuf_puts(rt, b, num);
    case TV_DICT: return dict_repr(rt, b, v.u.d);
    case TV_LIST: return seq_repr(rt, b, v);
    case TV_NS:
        if (sits_tmpl_tbuf_puts(rt, b, "<Namespace ")) return -1;
        if (dict_repr(rt, b, v.u.d)) return -1;
        return sits_tmpl_tbuf_putc(rt, b, '>');
    case TV_UNDEF: return 0;
    default:
        return sits_tmpl_fail(rt, SITS_ERR_INVALID, "printing a %s object is not supported", sits_tmpl_type_name(v));
    }
}

int sits_tmpl_tv_repr_append(trt_t *rt, tbuf_t *b, tv_t v)
{
    if (v.type == TV_STR && v.kind == 1)   /* repr(Markup('x')) */
        return sits_tmpl_tbuf_put(rt, b, "Markup(", 7) || str_repr(rt, b, v.u.s.p, v.u.s.n) ||
               sits_tmpl_tbuf_putc(rt, b, ')') ? -1 : 0;
    if (v.type == TV_STR) return str_repr(rt, b, v.u.s.p, v.u.s.n);
    if (v.type == TV_LIST || v.type == TV_DICT || v.type == TV_NS) {
        if (++rt->depth > TMPL_MAX_EVAL_DEPTH) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "value nested too deeply");
        int r = scalar_str(rt, b, v);
        rt->depth--;
        return r;
    }
    if (v.type == TV_UNDEF) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "repr of an undefined value is not supported");
    return scalar_str(rt, b, v);
}

int sits_tmpl_tv_str_append(trt_t *rt, tbuf_t *b, tv_t v)
{
    if (v.type == TV_STR) return sits_tmpl_tbuf_put(rt, b, v.u.s.p, v.u.s.n);
    return scalar_str(rt, b, v);
}

int sits_tmpl_tv_to_str(trt_t *rt, tv_t v, tv_t *out)
{
    if (v.type == TV_STR) { *out = v; return 0; }
    if (v.type == TV_UNDEF) { *out = tv_str("", 0); return 0; }
    tbuf_t b = { 0 };
    int r = sits_tmpl_tv_str_append(rt, &b, v);
    if (!r) r = sits_tmpl_tbuf_to_str(rt, &b, out);
    sits_tmpl_tbuf_release(&b);
    return r;
}

/* ---- JSON (Python json.dumps) ---- */
static int json_str(trt_t *rt, tbuf_t *b, const char *p, size_t n, int ensure_ascii)
{
    if (sits_tmpl_tbuf_putc(rt, b, '"')) return -1;
    size_t i = 0;
    while (i < n) {
        size_t st = i;
        uint32_t cp;
        sits_tmpl_u8_decode(p, n, &i, &cp);
        int r;
        switch (cp) {
        case '"': r = sits_tmpl_tbuf_put(rt, b, "\\\"", 2); break;
        case '\\': r = sits_tmpl_tbuf_put(rt, b, "\\\\", 2); break;
        case '\n': r = sits_tmpl_tbuf_put(rt, b, "\\n", 2); break;
        case '\r': r = sits_tmpl_tbuf_put(rt, b, "\\r", 2); break;
        case '\t': r = sits_tmpl_tbuf_put(rt, b, "\\t", 2); break;
        case '\b': r = sits_tmpl_tbuf_put(rt, b, "\\b", 2); break;
        case '\f': r = sits_tmpl_tbuf_put(rt, b, "\\f", 2); break;
        default:
            if (cp < 0x20) r = sits_tmpl_tbuf_printf(rt, b, "\\u%04x", cp);
            else if (cp < 0x7f || !ensure_ascii) r = sits_tmpl_tbuf_put(rt, b, p + st, i - st);
            else if (cp < 0x10000) r = sits_tmpl_tbuf_printf(rt, b, "\\u%04x", cp);
            else {
                uint32_t c = cp - 0x10000;
                r = sits_tmpl_tbuf_printf(rt, b, "\\u%04x\\u%04x", 0xd800 + (c >> 10), 0xdc00 + (c & 0x3ff));
            }
        }
        if (r) return -1;
    }
    return sits_tmpl_tbuf_putc(rt, b, '"');
}

static int json_nl(trt_t *rt, tbuf_t *b, const char *indent, size_t indent_n, int level)
{
    if (sits_tmpl_tbuf_putc(rt, b, '\n')) return -1;
    for (int i = 0; i < level; i++) if (sits_tmpl_tbuf_put(rt, b, indent, indent_n)) return -1;
    return 0;
}

static int json_key(trt_t *rt, tbuf_t *b, tv_t k, int ensure_ascii)
{
    char num[64];
    switch (k.type) {
    case TV_STR: return json_str(rt, b, k.u.s.p, k.u.s.n, ensure_ascii);
    case TV_BOOL: return sits_tmpl_tbuf_puts(rt, b, k.u.i ? "\"true\"" : "\"false\"");
    case TV_NONE: return sits_tmpl_tbuf_puts(rt, b, "\"null\"");
    case TV_INT: return sits_tmpl_tbuf_printf(rt, b, "\"%lld\"", (long long)k.u.i);
    case TV_FLOAT: sits_tmpl_format_float(k.u.f, num, sizeof(num)); return sits_tmpl_tbuf_printf(rt, b, "\"%s\"", num);
    default:
        return sits_tmpl_fail(rt, SITS_ERR_INVALID, "keys must be str, int, float, bool or None, not %s", sits_tmpl_type_name(k));
    }
}

static int key_less(tv_t a, tv_t b)
{
    size_t n = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
    int c = n ? memcmp(a.u.s.p, b.u.s.p, n) : 0;
    return c ? c < 0 : a.u.s.n < b.u.s.n;
}

int sits_tmpl_tv_json_append(trt_t *rt, tbuf_t *b, tv_t v, const char *indent, size_t indent_n, int level,
                   const char *item_sep, const char *key_sep, int sort_keys, int ensure_ascii)
{
    char num[64];
    if (++rt->depth > TMPL_MAX_EVAL_DEPTH) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "value nested too deeply");
    int r = 0;
    switch (v.type) {
    case TV_NONE: r = sits_tmpl_tbuf_put(rt, b, "null", 4); break;
    case TV_BOOL: r = v.u.i ? sits_tmpl_tbuf_put(rt, b, "true", 4) : sits_tmpl_tbuf_put(rt, b, "false", 5); break;
    case TV_INT: r = sits_tmpl_tbuf_printf(rt, b, "%lld", (long long)v.u.i); break;
    case TV_FLOAT:
        if (isnan(v.u.f)) r = sits_tmpl_tbuf_puts(rt, b, "NaN");
        else if (isinf(v.u.f)) r = sits_tmpl_tbuf_puts(rt, b, v.u.f < 0 ? "-Infinity" : "Infinity");
        else { sits_tmpl_format_float(v.u.f, num, sizeof(num)); r = sits_tmpl_tbuf_puts(rt, b, num); }
        break;
    case TV_STR: r = json_str(rt, b, v.u.s.p, v.u.s.n, ensure_ascii); break;
    case TV_LIST:
        if (v.kind != LK_LIST && v.kind != LK_TUPLE) {
            r = sits_tmpl_fail(rt, SITS_ERR_INVALID, "Object of type %s is not JSON serializable", sits_tmpl_type_name(v));
            break;
        }
        if (v.u.l->n == 0) { r = sits_tmpl_tbuf_put(rt, b, "[]", 2); break; }
        r = sits_tmpl_tbuf_putc(rt, b, '[');
        for (size_t i = 0; !r && i < v.u.l->n; i++) {
            if (i) r = sits_tmpl_tbuf_puts(rt, b, item_sep);
            if (!r && indent) r = json_nl(rt, b, indent, indent_n, level + 1);
            if (!r) r = sits_tmpl_tv_json_append(rt, b, v.u.l->v[i], indent, indent_n, level + 1, item_sep, key_sep,
                                       sort_keys, ensure_ascii);
        }
        if (!r && indent) r = json_nl(rt, b, indent, indent_n, level);
        if (!r) r = sits_tmpl_tbuf_putc(rt, b, ']');
        break;
    case TV_DICT: {
        const tdict_t *d = v.u.d;
        if (d->n == 0) { r = sits_tmpl_tbuf_put(rt, b, "{}", 2); break; }
        size_t *ord = sits_tmpl_rt_alloc(rt, d->n * sizeof(size_t));
        if (!ord) { r = -1; break; }
        for (size_t i = 0; i < d->n; i++) ord[i] = i;
        if (sort_keys) {
            for (size_t i = 0; i < d->n; i++)
                if (d->k[i].type != TV_STR) {
                    r = sits_tmpl_fail(rt, SITS_ERR_INVALID, "'<' not supported between dict keys of mixed types");
                    break;
                }
            for (size_t i = 1; !r && i < d->n; i++) /* insertion sort: stable, dicts are small */
                for (size_t j = i; j > 0 && key_less(d->k[ord[j]], d->k[ord[j - 1]]); j--) {
                    size_t t = ord[j]; ord[j] = ord[j - 1]; ord[j - 1] = t;
                }
        }
        if (!r) r = sits_tmpl_tbuf_putc(rt, b, '{');
        for (size_t i = 0; !r && i < d->n; i++) {
            if (i) r = sits_tmpl_tbuf_puts(rt, b, item_sep);
            if (!r && indent) r = json_nl(rt, b, indent, indent_n, level + 1);
            if (!r) r = json_key(rt, b, d->k[ord[i]], ensure_ascii);
            if (!r) r = sits_tmpl_tbuf_puts(rt, b, key_sep);
            if (!r) r = sits_tmpl_tv_json_append(rt, b, d->v[ord[i]], indent, indent_n, level + 1, item_sep, key_sep,
                                       sort_keys, ensure_ascii);
        }
        if (!r && indent) r = json_nl(rt, b, indent, indent_n, level);
        if (!r) r = sits_tmpl_tbuf_putc(rt, b, '}');
        break;
    }
    default:
        r = sits_tmpl_fail(rt, SITS_ERR_INVALID, "Object of type %s is not JSON serializable", sits_tmpl_type_name(v));
    }
    rt->depth--;
    return r;
}

int sits_tmpl_tv_from_json(trt_t *rt, const json_t *j, tv_t *out)
{
    switch (json_typeof(j)) {
    case JSON_NULL: *out = tv_none(); return 0;
    case JSON_TRUE: *out = tv_bool(1); return 0;
    case JSON_FALSE: *out = tv_bool(0); return 0;
    case JSON_INTEGER: *out = tv_int(json_integer_value(j)); return 0;
    case JSON_REAL: *out = tv_float(json_real_value(j)); return 0;
    case JSON_STRING: *out = tv_str(json_string_value(j), json_string_length(j)); return 0;
    case JSON_ARRAY: {
        tlist_t *l = sits_tmpl_tl_new(rt, json_array_size(j));
        if (!l) return -1;
        for (size_t i = 0; i < json_array_size(j); i++)
            if (sits_tmpl_tv_from_json(rt, json_array_get(j, i), &l->v[l->n++])) return -1;
        *out = sits_tmpl_tv_list(l, LK_LIST);
        return 0;
    }
    case JSON_OBJECT: {
        tdict_t *d = sits_tmpl_td_new(rt, json_object_size(j));
        const char *k;
        json_t *v;
        if (!d) return -1;
        json_object_foreach((json_t *)j, k, v) {
            d->k[d->n] = tv_str(k, strlen(k));
            if (sits_tmpl_tv_from_json(rt, v, &d->v[d->n])) return -1;
            d->n++;
        }
        *out = sits_tmpl_tv_dict(d);
        return 0;
    }
    }
    return sits_tmpl_fail(rt, SITS_ERR_INVALID, "unsupported JSON value");
}

int sits_tmpl_tv_len(trt_t *rt, tv_t v, int64_t *len_p)
{
    switch (v.type) {
    case TV_STR: *len_p = (int64_t)sits_tmpl_u8_len(v.u.s.p, v.u.s.n); return 0;
    case TV_LIST:
        if (v.kind == LK_ITER) break;
        *len_p = (int64_t)v.u.l->n;
        return 0;
    case TV_DICT: *len_p = (int64_t)v.u.d->n; return 0;
    case TV_UNDEF: *len_p = 0; return 0;
    default: break;
    }
    return sits_tmpl_fail(rt, SITS_ERR_INVALID, "object of type '%s' has no len()", sits_tmpl_type_name(v));
}

int sits_tmpl_tv_iter(trt_t *rt, tv_t v, tlist_t **items_p)
{
    switch (v.type) {
    case TV_LIST:
        if (v.u.l->err) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "%s", v.u.l->err);
        *items_p = v.u.l;
        return 0;
    case TV_UNDEF: return (*items_p = sits_tmpl_tl_new(rt, 0)) ? 0 : -1;
    case TV_DICT: {
        tlist_t *l = sits_tmpl_tl_new(rt, v.u.d->n);
        if (!l) return -1;
        TMEMCPY(l->v, v.u.d->k, v.u.d->n * sizeof(tv_t));
        l->n = v.u.d->n;
        *items_p = l;
        return 0;
    }
    case TV_STR: {
        tlist_t *l = sits_tmpl_tl_new(rt, sits_tmpl_u8_len(v.u.s.p, v.u.s.n));
        size_t i = 0;
        if (!l) return -1;
        while (i < v.u.s.n) {
            size_t st = i;
            uint32_t cp;
            sits_tmpl_u8_decode(v.u.s.p, v.u.s.n, &i, &cp);
            if (l->n == l->cap) { if (sits_tmpl_tl_push(rt, l, tv_str(v.u.s.p + st, i - st))) return -1; }
            else l->v[l->n++] = tv_str(v.u.s.p + st, i - st);
        }
        *items_p = l;
        return 0;
    }
    default:
        return sits_tmpl_fail(rt, SITS_ERR_INVALID, "'%s' object is not iterable", sits_tmpl_type_name(v));
    }
}
