/* builtins.c -- jinja2's filters and tests, the Python methods of str / dict / list values, the
 * sandboxed attribute and item access, and the globals of transformers' environment.
 *
 * Names are resolved at compile time (sits_tmpl_filter_lookup / sits_tmpl_test_lookup / sits_tmpl_method_known):
 * a jinja2 builtin that is not implemented here is listed in `refused` so the template is refused at
 * load instead of rendering differently. Semantics follow jinja2/filters.py, jinja2/tests.py and
 * CPython's str methods; the sandbox (ImmutableSandboxedEnvironment) turns the mutating list/dict
 * methods into a SecurityError when called. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* localtime_r */
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <utf8proc.h>
#include "template/tmpl_internal.h"

/* ---- tables ---- */
enum {
    F_ABS, F_ATTR, F_BATCH, F_CAPITALIZE, F_CENTER, F_COUNT, F_DEFAULT, F_DICTSORT, F_ESCAPE, F_FIRST, F_FLOAT,
    F_FORCEESCAPE, F_INDENT, F_INT, F_ITEMS, F_JOIN, F_LAST, F_LIST, F_LOWER, F_MAP, F_MAX, F_MIN, F_REJECT,
    F_REJECTATTR, F_REPLACE, F_REVERSE, F_ROUND, F_SAFE, F_SELECT, F_SELECTATTR, F_SLICE, F_SORT, F_STRING, F_SUM,
    F_TITLE, F_TOJSON, F_TRIM, F_TRUNCATE, F_UNIQUE, F_UPPER, F_WORDCOUNT
};
static const struct { const char *name; int id; } filters[] = {
    { "abs", F_ABS }, { "attr", F_ATTR }, { "batch", F_BATCH }, { "capitalize", F_CAPITALIZE }, { "center", F_CENTER },
    { "count", F_COUNT }, { "length", F_COUNT }, { "d", F_DEFAULT }, { "default", F_DEFAULT },
    { "dictsort", F_DICTSORT }, { "e", F_ESCAPE }, { "escape", F_ESCAPE }, { "first", F_FIRST }, { "float", F_FLOAT },
    { "forceescape", F_FORCEESCAPE }, { "indent", F_INDENT }, { "int", F_INT }, { "items", F_ITEMS },
    { "join", F_JOIN }, { "last", F_LAST }, { "list", F_LIST }, { "lower", F_LOWER }, { "map", F_MAP },
    { "max", F_MAX }, { "min", F_MIN }, { "reject", F_REJECT }, { "rejectattr", F_REJECTATTR },
    { "replace", F_REPLACE }, { "reverse", F_REVERSE }, { "round", F_ROUND }, { "safe", F_SAFE },
    { "select", F_SELECT }, { "selectattr", F_SELECTATTR }, { "slice", F_SLICE }, { "sort", F_SORT },
    { "string", F_STRING }, { "sum", F_SUM }, { "title", F_TITLE }, { "tojson", F_TOJSON }, { "trim", F_TRIM },
    { "truncate", F_TRUNCATE }, { "unique", F_UNIQUE }, { "upper", F_UPPER }, { "wordcount", F_WORDCOUNT },
};
/* jinja2 builtin filters this interpreter refuses */
static const char *const refused_filters[] = {
    "filesizeformat", "format", "groupby", "pprint", "random", "striptags", "urlencode", "urlize", "wordwrap",
    "xmlattr", NULL
};

enum {
    T_DEFINED, T_UNDEFINED, T_NONE, T_STRING_, T_NUMBER, T_INTEGER, T_FLOAT_, T_MAPPING, T_ITERABLE, T_SEQUENCE,
    T_BOOLEAN, T_TRUE, T_FALSE, T_CALLABLE, T_EQ, T_NE, T_LT, T_LE, T_GT, T_GE, T_IN, T_ODD, T_EVEN,
    T_DIVISIBLEBY, T_SAMEAS, T_LOWER, T_UPPER, T_ESCAPED, T_FILTER, T_TEST
};
static const struct { const char *name; int id; } tests[] = {
    { "defined", T_DEFINED }, { "undefined", T_UNDEFINED }, { "none", T_NONE }, { "string", T_STRING_ },
    { "number", T_NUMBER }, { "integer", T_INTEGER }, { "float", T_FLOAT_ }, { "mapping", T_MAPPING },
    { "iterable", T_ITERABLE }, { "sequence", T_SEQUENCE }, { "boolean", T_BOOLEAN }, { "true", T_TRUE },
    { "false", T_FALSE }, { "callable", T_CALLABLE }, { "eq", T_EQ }, { "equalto", T_EQ }, { "==", T_EQ },
    { "ne", T_NE }, { "!=", T_NE }, { "lt", T_LT }, { "lessthan", T_LT }, { "<", T_LT }, { "le", T_LE },
    { "<=", T_LE }, { "gt", T_GT }, { "greaterthan", T_GT }, { ">", T_GT }, { "ge", T_GE }, { ">=", T_GE },
    { "in", T_IN }, { "odd", T_ODD }, { "even", T_EVEN }, { "divisibleby", T_DIVISIBLEBY }, { "sameas", T_SAMEAS },
    { "lower", T_LOWER }, { "upper", T_UPPER }, { "escaped", T_ESCAPED }, { "filter", T_FILTER }, { "test", T_TEST },
};

/* methods by receiver type; the unsafe ones are the sandbox's mutating methods */
static const char *const str_methods[] = {
    "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith", "upper", "lower",
    "title", "capitalize", "casefold", "swapcase", "replace", "find", "rfind", "index", "rindex", "count", "join",
    "format", "isdigit", "isalpha", "isalnum", "isspace", "islower", "isupper", "isnumeric", "isdecimal", "istitle",
    "zfill", "center", "ljust", "rjust", "partition", "rpartition", "removeprefix", "removesuffix", NULL
};
static const char *const dict_methods[] = { "items", "keys", "values", "get", "copy", NULL };
static const char *const dict_unsafe[] = { "clear", "pop", "popitem", "setdefault", "update", NULL };
static const char *const list_methods[] = { "index", "count", "copy", NULL };
static const char *const list_unsafe[] = { "append", "clear", "pop", "reverse", "insert", "sort", "extend", "remove", NULL };

enum { G_RANGE, G_NAMESPACE, G_DICT, G_RAISE, G_STRFTIME };
static const char *const globals[] = { "range", "namespace", "dict", "raise_exception", "strftime_now", NULL };

static int name_in(const char *const *list, const char *s, size_t n)
{
    for (int i = 0; list[i]; i++) if (strlen(list[i]) == n && !memcmp(list[i], s, n)) return i;
    return -1;
}

int sits_tmpl_filter_lookup(const char *name, size_t n)
{
    for (size_t i = 0; i < sizeof(filters) / sizeof(filters[0]); i++)
        if (strlen(filters[i].name) == n && !memcmp(filters[i].name, name, n)) return filters[i].id;
    return name_in(refused_filters, name, n) >= 0 ? -1 : -2;
}

int sits_tmpl_test_lookup(const char *name, size_t n)
{
    for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++)
        if (strlen(tests[i].name) == n && !memcmp(tests[i].name, name, n)) return tests[i].id;
    return -2;
}

int sits_tmpl_method_known(const char *name, size_t n)
{
    return name_in(str_methods, name, n) >= 0 || name_in(dict_methods, name, n) >= 0 ||
           name_in(dict_unsafe, name, n) >= 0 || name_in(list_methods, name, n) >= 0 ||
           name_in(list_unsafe, name, n) >= 0 || (n == 5 && !memcmp(name, "cycle", 5)) ||
           (n == 7 && !memcmp(name, "changed", 7));
}

int sits_tmpl_global_lookup(const char *name, size_t n) { return name_in(globals, name, n); }

/* ---- argument binding ---- */
/* Binds positional and keyword arguments to the named slots (after the filtered value). Unset slots
 * keep type TV_UNDEF with kind 2 ("not given"). */
#define NOT_GIVEN(v_) ((v_).type == TV_UNDEF && (v_).kind == 2)
static int bind(trt_t *rt, const char *what, const char *const *names, tv_t *slots, tv_t *pos, int npos,
                const char **kwn, tv_t *kwv, int nkw)
{
    int ns = 0;
    while (names[ns]) ns++;
    for (int i = 0; i < ns; i++) { slots[i] = tv_undef(NULL); slots[i].kind = 2; }
    if (npos > ns) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "%s() takes at most %d arguments (%d given)", what, ns, npos);
    for (int i = 0; i < npos; i++) slots[i] = pos[i];
    for (int k = 0; k < nkw; k++) {
        int i = name_in(names, kwn[k], strlen(kwn[k]));
        if (i < 0) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "%s() got an unexpected keyword argument '%s'", what, kwn[k]);
        if (!NOT_GIVEN(slots[i])) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "%s() got multiple values for argument '%s'", what, kwn[k]);
        slots[i] = kwv[k];
    }
    return 0;
}

static int want_int(trt_t *rt, tv_t v, const char *what, int64_t *out)
{
    if (v.type == TV_INT || v.type == TV_BOOL) { *out = v.u.i; return 0; }
    return sits_tmpl_fail(rt, SITS_ERR_INVALID, "%s: an integer is required, got '%s'", what, sits_tmpl_type_name(v));
}

static int want_str(trt_t *rt, tv_t v, const char *what)
{
    if (v.type == TV_STR) return 0;
    return sits_tmpl_fail(rt, SITS_ERR_INVALID, "%s: a str is required, got '%s'", what, sits_tmpl_type_name(v));
}

static int undef_err(trt_t *rt, tv_t v)
{
    return sits_tmpl_fail(rt, SITS_ERR_INVALID, "%s", v.u.hint ? v.u.hint : "undefined value");
}

static tv_t tv_func_method(trt_t *rt, tv_t self, const char *name, size_t n)
{
    tfunc_t *fn = sits_tmpl_rt_alloc(rt, sizeof(*fn));
    tv_t v = { .type = TV_FUNC };
    if (!fn) return tv_undef(NULL);
    fn->kind = FN_METHOD; fn->self = self; fn->name = name; fn->nlen = n;
    v.u.fn = fn;
    return v;
}

static tv_t undef_attr(trt_t *rt, tv_t obj, const char *name, size_t n, int unsafe)
{
    const char *tn = sits_tmpl_type_name(obj);
    char *h = sits_tmpl_rt_alloc(rt, n + strlen(tn) + 80);
    if (!h) return tv_undef(NULL);
    if (unsafe) sprintf(h, "access to attribute '%.*s' of '%s' object is unsafe.", (int)n, name, tn);
    else sprintf(h, "'%s object' has no attribute '%.*s'", tn, (int)n, name);
    tv_t u = tv_undef(h);
    u.kind = unsafe ? 1 : 0;
    return u;
}

static int loop_attr(trt_t *rt, tloop_t *lp, const char *name, size_t n, tv_t *out)
{
    size_t len = lp->items->n, i = lp->index0;
#define IS(s_) (n == sizeof(s_) - 1 && !memcmp(name, s_, n))
    if (IS("index")) *out = tv_int((int64_t)i + 1);
    else if (IS("index0")) *out = tv_int((int64_t)i);
    else if (IS("revindex")) *out = tv_int((int64_t)(len - i));
    else if (IS("revindex0")) *out = tv_int((int64_t)(len - i - 1));
    else if (IS("first")) *out = tv_bool(i == 0);
    else if (IS("last")) *out = tv_bool(i + 1 == len);
    else if (IS("length")) *out = tv_int((int64_t)len);
    else if (IS("depth")) *out = tv_int(lp->depth0 + 1);
    else if (IS("depth0")) *out = tv_int(lp->depth0);
    else if (IS("previtem")) *out = i > 0 ? lp->items->v[i - 1] : tv_undef("there is no previous item");
    else if (IS("nextitem")) *out = i + 1 < len ? lp->items->v[i + 1] : tv_undef("there is no next item");
    else if (IS("cycle") || IS("changed")) {
        tfunc_t *fn = sits_tmpl_rt_alloc(rt, sizeof(*fn));
        if (!fn) return -1;
        fn->kind = IS("cycle") ? FN_LOOP_CYCLE : FN_LOOP_CHANGED;
        fn->loop = lp;
        tv_t v = { .type = TV_FUNC };
        v.u.fn = fn;
        *out = v;
    } else *out = tv_undef("'LoopContext object' has no such attribute");
#undef IS
    return 0;
}

int sits_tmpl_getattr(trt_t *rt, tv_t obj, const char *name, size_t n, tv_t *out)
{
    switch (obj.type) {
    case TV_UNDEF: return undef_err(rt, obj);
    case TV_DICT: {
        if (name_in(dict_methods, name, n) >= 0) { *out = tv_func_method(rt, obj, name, n); return 0; }
        if (name_in(dict_unsafe, name, n) >= 0) { *out = undef_attr(rt, obj, name, n, 1); return 0; }
        int i = sits_tmpl_td_find_str(obj.u.d, name, n);
        *out = i >= 0 ? obj.u.d->v[i] : undef_attr(rt, obj, name, n, 0);
        return 0;
    }
    case TV_NS: {
        int i = sits_tmpl_td_find_str(obj.u.d, name, n);
        *out = i >= 0 ? obj.u.d->v[i] : undef_attr(rt, obj, name, n, 0);
        return 0;
    }
    case TV_STR:
        *out = name_in(str_methods, name, n) >= 0 ? tv_func_method(rt, obj, name, n) : undef_attr(rt, obj, name, n, 0);
        return 0;
    case TV_LIST:
        if (obj.kind == LK_LIST && name_in(list_methods, name, n) >= 0) { *out = tv_func_method(rt, obj, name, n); return 0; }
        if (obj.kind == LK_LIST && name_in(list_unsafe, name, n) >= 0) { *out = undef_attr(rt, obj, name, n, 1); return 0; }
        if (obj.kind == LK_TUPLE && (name_in(list_methods, name, n) == 0 || name_in(list_methods, name, n) == 1)) {
            *out = tv_func_method(rt, obj, name, n);
            return 0;
        }
        *out = undef_attr(rt, obj, name, n, 0);
        return 0;
    case TV_LOOP: return loop_attr(rt, obj.u.lp, name, n, out);
    case TV_INT: case TV_BOOL: case TV_FLOAT:
        /* the number attributes real / imag (int(True).real is 1) */
        if (n == 4 && !memcmp(name, "real", 4)) { *out = obj.type == TV_FLOAT ? obj : tv_int(obj.u.i); return 0; }
        if (n == 4 && !memcmp(name, "imag", 4)) { *out = obj.type == TV_FLOAT ? tv_float(0.0) : tv_int(0); return 0; }
        *out = undef_attr(rt, obj, name, n, 0);
        return 0;
    default:
        *out = undef_attr(rt, obj, name, n, 0);
        return 0;
    }
}

/* code point index -> byte offset of a string (len: code points) */
static size_t cp_offset(const char *p, size_t n, size_t idx)
{
    size_t i = 0, c = 0;
    while (i < n && c < idx) { i++; while (i < n && ((unsigned char)p[i] & 0xc0) == 0x80) i++; c++; }
    return i;
}

int sits_tmpl_getitem(trt_t *rt, tv_t obj, tv_t key, tv_t *out)
{
    if (obj.type == TV_UNDEF) return undef_err(rt, obj);
    if (obj.type == TV_DICT) {
        int i = sits_tmpl_td_find(obj.u.d, key);
        if (i >= 0) { *out = obj.u.d->v[i]; return 0; }
    } else if (obj.type == TV_LIST && (obj.kind == LK_LIST || obj.kind == LK_TUPLE) &&
               (key.type == TV_INT || key.type == TV_BOOL)) {
        int64_t i = key.u.i, n = (int64_t)obj.u.l->n;
        if (i < 0) i += n;
        if (i >= 0 && i < n) { *out = obj.u.l->v[i]; return 0; }
    } else if (obj.type == TV_STR && (key.type == TV_INT || key.type == TV_BOOL)) {
        int64_t i = key.u.i, n = (int64_t)sits_tmpl_u8_len(obj.u.s.p, obj.u.s.n);
        if (i < 0) i += n;
        if (i >= 0 && i < n) {
            size_t a = cp_offset(obj.u.s.p, obj.u.s.n, (size_t)i), b = cp_offset(obj.u.s.p, obj.u.s.n, (size_t)i + 1);
            *out = tv_str(obj.u.s.p + a, b - a);
            return 0;
        }
    }
    if (key.type == TV_STR && obj.type != TV_DICT) return sits_tmpl_getattr(rt, obj, key.u.s.p, key.u.s.n, out);
    if (key.type == TV_STR && obj.type == TV_DICT) {
        if (name_in(dict_methods, key.u.s.p, key.u.s.n) >= 0 || name_in(dict_unsafe, key.u.s.p, key.u.s.n) >= 0)
            return sits_tmpl_getattr(rt, obj, key.u.s.p, key.u.s.n, out);
        *out = undef_attr(rt, obj, key.u.s.p, key.u.s.n, 0);
        return 0;
    }
    *out = tv_undef("no such item");
    return 0;
}

/* ---- string helpers ---- */
typedef uint32_t (*cp_map_fn)(uint32_t);
static uint32_t cp_upper(uint32_t c) { return (uint32_t)utf8proc_toupper((utf8proc_int32_t)c); }
static uint32_t cp_lower(uint32_t c) { return (uint32_t)utf8proc_tolower((utf8proc_int32_t)c); }
static uint32_t cp_title(uint32_t c) { return (uint32_t)utf8proc_totitle((utf8proc_int32_t)c); }
static int cp_cased(uint32_t c)
{
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}

/* Python's str.upper() uses SpecialCasing: these code points become several (always <= 3 code points,
 * at most 2x the UTF-8 bytes of the input, which str_map reserves). */
static const char *full_upper(uint32_t c)
{
    switch (c) {
    case 0xdf: return "SS";
    case 0x149: return "\xca\xbcN";
    case 0x1f0: return "J\xcc\x8c";
    case 0xfb00: return "FF";
    case 0xfb01: return "FI";
    case 0xfb02: return "FL";
    case 0xfb03: return "FFI";
    case 0xfb04: return "FFL";
    case 0xfb05: return "ST";
    case 0xfb06: return "ST";
    default: return NULL;
    }
}

/* Case mappings of a string, as Python does them: mode 0 maps every code point with f (upper or lower);
 * 1: str.title(); 2: str.capitalize(); 3: jinja2's |title (words split at [-\s({[<], first char upper(),
 * rest lower()); 4: str.swapcase(). Code points with a multi-character SpecialCasing mapping use it. */
static int str_map(trt_t *rt, tv_t s, int mode, cp_map_fn f, tv_t *out)
{
    size_t cap = s.u.s.n * 2 + 4;
    char *o = sits_tmpl_rt_alloc(rt, cap);
    size_t i = 0, k = 0, idx = 0;
    int prev_cased = 0, word_start = 1;
    if (!o) return -1;
    while (i < s.u.s.n) {
        uint32_t c, m;
        int to = 0; /* 1 upper, 2 lower, 3 title, 0 unchanged */
        sits_tmpl_u8_decode(s.u.s.p, s.u.s.n, &i, &c);
        switch (mode) {
        case 0: to = f == cp_upper ? 1 : 2; break;
        case 1: if (cp_cased(c)) to = prev_cased ? 2 : 3; prev_cased = cp_cased(c); break;
        case 2: to = idx == 0 ? 3 : 2; break;
        case 3: {
            int sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || sits_tmpl_py_isspace(c);
            to = sep ? 0 : word_start ? 1 : 2;
            word_start = sep;
            break;
        }
        default: to = cp_upper(c) != c ? 1 : cp_lower(c) != c ? 2 : 0; break;
        }
        idx++;
        const char *full = NULL;
        if (to == 1) full = full_upper(c);
        else if (to == 3 && c == 0xdf) full = "Ss";
        else if (to == 2 && c == 0x130) full = "i\xcc\x87";
        if (full) {
            size_t fl = strlen(full);
            memcpy(o + k, full, fl);
            k += fl;
            continue;
        }
        m = to == 1 ? cp_upper(c) : to == 2 ? cp_lower(c) : to == 3 ? cp_title(c) : c;
        if (m > 0x10ffff) m = c;
        k += (size_t)sits_tmpl_u8_encode(m, o + k);
        if (k + 4 > cap) return sits_tmpl_fail(rt, SITS_ERR_INTERNAL, "case mapping overflow");
    }
    *out = tv_str(o, k);
    return 0;
}

static int in_charset(uint32_t c, tv_t chars)
{
    size_t i = 0;
    if (chars.type != TV_STR) return sits_tmpl_py_isspace(c);
    while (i < chars.u.s.n) {
        uint32_t x;
        sits_tmpl_u8_decode(chars.u.s.p, chars.u.s.n, &i, &x);
        if (x == c) return 1;
    }
    return 0;
}

/* which: 1 left, 2 right, 3 both; chars: TV_STR or none/undef for whitespace */
static tv_t str_strip(tv_t s, tv_t chars, int which)
{
    const char *p = s.u.s.p;
    size_t a = 0, b = s.u.s.n;
    if (which & 1)
        while (a < b) {
            size_t j = a;
            uint32_t c;
            sits_tmpl_u8_decode(p, b, &j, &c);
            if (!in_charset(c, chars)) break;
            a = j;
        }
    if (which & 2)
        while (b > a) {
            size_t st = b - 1;
            while (st > a && ((unsigned char)p[st] & 0xc0) == 0x80) st--;
            size_t j = st;
            uint32_t c;
            sits_tmpl_u8_decode(p, b, &j, &c);
            if (!in_charset(c, chars)) break;
            b = st;
        }
    return tv_str(p + a, b - a);
}

static const char *mem_find(const char *h, size_t hn, const char *nd, size_t nn)
{
    if (nn == 0) return h;
    if (nn > hn) return NULL;
    for (size_t i = 0; i + nn <= hn; i++) if (h[i] == nd[0] && !memcmp(h + i, nd, nn)) return h + i;
    return NULL;
}

static const char *mem_rfind(const char *h, size_t hn, const char *nd, size_t nn)
{
    if (nn > hn) return NULL;
    for (size_t i = hn - nn + 1; i-- > 0;) if (!memcmp(h + i, nd, nn)) return h + i;
    return NULL;
}

static int str_split(trt_t *rt, tv_t s, tv_t sep, int64_t maxsplit, int right, tv_t *out)
{
    tlist_t *l = sits_tmpl_tl_new(rt, 0);
    const char *p = s.u.s.p;
    size_t n = s.u.s.n;
    if (!l) return -1;
    if (sep.type == TV_STR) {
        if (sep.u.s.n == 0) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "empty separator");
        if (!right) {
            size_t a = 0;
            const char *q;
            while ((maxsplit < 0 || (int64_t)l->n < maxsplit) && (q = mem_find(p + a, n - a, sep.u.s.p, sep.u.s.n))) {
                if (sits_tmpl_tl_push(rt, l, tv_str(p + a, (size_t)(q - (p + a))))) return -1;
                a = (size_t)(q - p) + sep.u.s.n;
            }
            if (sits_tmpl_tl_push(rt, l, tv_str(p + a, n - a))) return -1;
        } else {
            size_t b = n;
            const char *q;
            tlist_t *r = sits_tmpl_tl_new(rt, 0);
            if (!r) return -1;
            while ((maxsplit < 0 || (int64_t)r->n < maxsplit) && (q = mem_rfind(p, b, sep.u.s.p, sep.u.s.n))) {
                size_t e = (size_t)(q - p) + sep.u.s.n;
                if (sits_tmpl_tl_push(rt, r, tv_str(p + e, b - e))) return -1;
                b = (size_t)(q - p);
            }
            if (sits_tmpl_tl_push(rt, l, tv_str(p, b))) return -1;
            for (size_t i = r->n; i-- > 0;) if (sits_tmpl_tl_push(rt, l, r->v[i])) return -1;
        }
    } else {
        /* whitespace split */
        size_t i = 0;
        if (!right) {
            for (;;) {
                size_t j;
                uint32_t c;
                while (i < n) { j = i; sits_tmpl_u8_decode(p, n, &j, &c); if (!sits_tmpl_py_isspace(c)) break; i = j; }
                if (i >= n) break;
                if (maxsplit >= 0 && (int64_t)l->n >= maxsplit) {
                    /* the rest, as is (leading whitespace already skipped) */
                    if (sits_tmpl_tl_push(rt, l, tv_str(p + i, n - i))) return -1;
                    break;
                }
                size_t st = i;
                while (i < n) { j = i; sits_tmpl_u8_decode(p, n, &j, &c); if (sits_tmpl_py_isspace(c)) break; i = j; }
                if (sits_tmpl_tl_push(rt, l, tv_str(p + st, i - st))) return -1;
            }
        } else {
            tlist_t *r = sits_tmpl_tl_new(rt, 0);
            size_t b = n;
            if (!r) return -1;
            for (;;) {
                tv_t head = str_strip(tv_str(p, b), tv_none(), 2);
                b = head.u.s.n;
                if (b == 0) break;
                if (maxsplit >= 0 && (int64_t)r->n >= maxsplit) { if (sits_tmpl_tl_push(rt, r, head)) return -1; break; }
                size_t st = b;
                while (st > 0) {
                    size_t q = st - 1;
                    while (q > 0 && ((unsigned char)p[q] & 0xc0) == 0x80) q--;
                    size_t j = q;
                    uint32_t c;
                    sits_tmpl_u8_decode(p, b, &j, &c);
                    if (sits_tmpl_py_isspace(c)) break;
                    st = q;
                }
                if (sits_tmpl_tl_push(rt, r, tv_str(p + st, b - st))) return -1;
                b = st;
            }
            for (size_t k = r->n; k-- > 0;) if (sits_tmpl_tl_push(rt, l, r->v[k])) return -1;
        }
    }
    *out = sits_tmpl_tv_list(l, LK_LIST);
    return 0;
}

/* Python str.splitlines */
static int str_splitlines(trt_t *rt, tv_t s, int keepends, tlist_t **out)
{
    tlist_t *l = sits_tmpl_tl_new(rt, 0);
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, i = 0, st = 0;
    if (!l) return -1;
    while (i < n) {
        size_t j = i;
        uint32_t c;
        sits_tmpl_u8_decode(p, n, &j, &c);
        int brk = c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d || c == 0x1e ||
                  c == 0x85 || c == 0x2028 || c == 0x2029;
        if (!brk) { i = j; continue; }
        size_t e = j;
        if (c == '\r' && e < n && p[e] == '\n') e++;
        if (sits_tmpl_tl_push(rt, l, tv_str(p + st, (keepends ? e : i) - st))) return -1;
        i = st = e;
    }
    if (st < n && sits_tmpl_tl_push(rt, l, tv_str(p + st, n - st))) return -1;
    *out = l;
    return 0;
}

static int str_replace(trt_t *rt, tv_t s, tv_t old, tv_t nw, int64_t count, tv_t *out)
{
    tbuf_t b = { 0 };
    int r = 0;
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, i = 0;
    int64_t done = 0;
    if (old.u.s.n == 0) {
        /* insert between every code point (and at both ends) */
        while (!r && (count < 0 || done < count)) {
            r = sits_tmpl_tbuf_put(rt, &b, nw.u.s.p, nw.u.s.n);
            done++;
            if (i >= n) break;
            size_t j = i;
            uint32_t c;
            sits_tmpl_u8_decode(p, n, &j, &c);
            if (!r) r = sits_tmpl_tbuf_put(rt, &b, p + i, j - i);
            i = j;
        }
        if (!r) r = sits_tmpl_tbuf_put(rt, &b, p + i, n - i);
    } else {
        const char *q;
        while (!r && (count < 0 || done < count) && (q = mem_find(p + i, n - i, old.u.s.p, old.u.s.n))) {
            r = sits_tmpl_tbuf_put(rt, &b, p + i, (size_t)(q - (p + i)));
            if (!r) r = sits_tmpl_tbuf_put(rt, &b, nw.u.s.p, nw.u.s.n);
            i = (size_t)(q - p) + old.u.s.n;
            done++;
        }
        if (!r) r = sits_tmpl_tbuf_put(rt, &b, p + i, n - i);
    }
    if (!r) r = sits_tmpl_tbuf_to_str(rt, &b, out);
    sits_tmpl_tbuf_release(&b);
    return r;
}

static int str_concat_list(trt_t *rt, tlist_t *l, tv_t sep, int strict, tv_t *out)
{
    tbuf_t b = { 0 };
    int r = 0;
    for (size_t i = 0; i < l->n && !r; i++) {
        if (i && sep.u.s.n) r = sits_tmpl_tbuf_put(rt, &b, sep.u.s.p, sep.u.s.n);
        if (r) break;
        if (strict && l->v[i].type != TV_STR)
            r = sits_tmpl_fail(rt, SITS_ERR_INVALID, "sequence item %zu: expected str instance, %s found", i, sits_tmpl_type_name(l->v[i]));
        else r = sits_tmpl_tv_str_append(rt, &b, l->v[i]);
    }
    if (!r) r = sits_tmpl_tbuf_to_str(rt, &b, out);
    sits_tmpl_tbuf_release(&b);
    return r;
}

static int str_pad(trt_t *rt, tv_t s, int64_t width, tv_t fill, int where, tv_t *out)
{
    int64_t len = (int64_t)sits_tmpl_u8_len(s.u.s.p, s.u.s.n);
    const char *fp = " ";
    size_t fn = 1;
    if (fill.type == TV_STR) {
        if (sits_tmpl_u8_len(fill.u.s.p, fill.u.s.n) != 1) return sits_tmpl_fail(rt, SITS_ERR_INVALID,
            "The fill character must be exactly one character long");
        fp = fill.u.s.p; fn = fill.u.s.n;
    }
    if (width <= len) { *out = s; return 0; }
    if (width > (int64_t)(TMPL_MAX_OUTPUT)) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "padding too wide");
    int64_t pad = width - len, left;
    if (where == 0) left = pad / 2 + (pad & width & 1);   /* CPython's center() */
    else if (where == 1) left = 0;                          /* ljust */
    else left = pad;                                        /* rjust */
    tbuf_t b = { 0 };
    int r = 0;
    for (int64_t i = 0; i < left && !r; i++) r = sits_tmpl_tbuf_put(rt, &b, fp, fn);
    if (!r) r = sits_tmpl_tbuf_put(rt, &b, s.u.s.p, s.u.s.n);
    for (int64_t i = 0; i < pad - left && !r; i++) r = sits_tmpl_tbuf_put(rt, &b, fp, fn);
    if (!r) r = sits_tmpl_tbuf_to_str(rt, &b, out);
    sits_tmpl_tbuf_release(&b);
    return r;
}

/* Python str.format with {} / {n} / {name} fields and no format spec or conversion */
static int str_format(trt_t *rt, tv_t s, tv_t *pos, int npos, const char **kwn, tv_t *kwv, int nkw, tv_t *out)
{
    tbuf_t b = { 0 };
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, i = 0;
    int auto_idx = 0, r = 0;
    while (i < n && !r) {
        char c = p[i];
        if (c == '{' && i + 1 < n && p[i + 1] == '{') { r = sits_tmpl_tbuf_putc(rt, &b, '{'); i += 2; continue; }
        if (c == '}' && i + 1 < n && p[i + 1] == '}') { r = sits_tmpl_tbuf_putc(rt, &b, '}'); i += 2; continue; }
        if (c == '}') { r = sits_tmpl_fail(rt, SITS_ERR_INVALID, "Single '}' encountered in format string"); break; }
        if (c != '{') { r = sits_tmpl_tbuf_putc(rt, &b, c); i++; continue; }
        size_t e = i + 1;
        while (e < n && p[e] != '}') e++;
        if (e >= n) { r = sits_tmpl_fail(rt, SITS_ERR_INVALID, "Single '{' encountered in format string"); break; }
        const char *f = p + i + 1;
        size_t fl = e - i - 1;
        if (memchr(f, ':', fl) || memchr(f, '!', fl) || memchr(f, '.', fl) || memchr(f, '[', fl)) {
            r = sits_tmpl_fail(rt, SITS_ERR_UNSUPPORTED, "str.format field '{%.*s}' is not supported", (int)fl, f);
            break;
        }
        tv_t v;
        if (fl == 0 || (f[0] >= '0' && f[0] <= '9')) {
            int idx = fl == 0 ? auto_idx++ : atoi(f);
            if (idx >= npos) { r = sits_tmpl_fail(rt, SITS_ERR_INVALID,
                "Replacement index %d out of range for positional args tuple", idx); break; }
            v = pos[idx];
        } else {
            int k;
            for (k = 0; k < nkw; k++) if (strlen(kwn[k]) == fl && !memcmp(kwn[k], f, fl)) break;
            if (k == nkw) { r = sits_tmpl_fail(rt, SITS_ERR_INVALID, "KeyError: '%.*s'", (int)fl, f); break; }
            v = kwv[k];
        }
        if (v.type == TV_UNDEF) r = 0;
        else r = sits_tmpl_tv_str_append(rt, &b, v);
        i = e + 1;
    }
    if (!r) r = sits_tmpl_tbuf_to_str(rt, &b, out);
    sits_tmpl_tbuf_release(&b);
    return r;
}

static int64_t cp_index_of(const char *p, const char *at) { return (int64_t)sits_tmpl_u8_len(p, (size_t)(at - p)); }

static int str_pred(tv_t s, int which)
{
    size_t i = 0;
    int any = 0, cased = 0, prev_cased = 0;
    if (s.u.s.n == 0) return 0;
    while (i < s.u.s.n) {
        uint32_t c;
        sits_tmpl_u8_decode(s.u.s.p, s.u.s.n, &i, &c);
        utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
        int alpha = k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO;
        int dec = k == UTF8PROC_CATEGORY_ND;
        int num = dec || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
        switch (which) {
        case 0: if (!num || k == UTF8PROC_CATEGORY_NL) return 0; break;        /* isdigit (approx.: Nd, No) */
        case 1: if (!alpha) return 0; break;                                       /* isalpha */
        case 2: if (!alpha && !num) return 0; break;                               /* isalnum */
        case 3: if (!sits_tmpl_py_isspace(c)) return 0; break;                               /* isspace */
        case 4: if (k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LT) return 0; if (k == UTF8PROC_CATEGORY_LL) any = 1; break;
        case 5: if (k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT) return 0; if (k == UTF8PROC_CATEGORY_LU) any = 1; break;
        case 6: if (!num) return 0; break;                                         /* isnumeric */
        case 7: if (!dec) return 0; break;                                         /* isdecimal */
        case 8:                                                                    /* istitle */
            if (k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LT) { if (prev_cased) return 0; prev_cased = 1; cased = 1; }
            else if (k == UTF8PROC_CATEGORY_LL) { if (!prev_cased) return 0; prev_cased = 1; cased = 1; }
            else prev_cased = 0;
            break;
        }
    }
    if (which == 4 || which == 5) return any;
    if (which == 8) return cased;
    return 1;
}

static int prefix_match(trt_t *rt, tv_t s, tv_t arg, int suffix, int *res)
{
    if (arg.type == TV_LIST && arg.kind == LK_TUPLE) {
        *res = 0;
        for (size_t i = 0; i < arg.u.l->n && !*res; i++) if (prefix_match(rt, s, arg.u.l->v[i], suffix, res)) return -1;
        return 0;
    }
    if (arg.type != TV_STR)
        return sits_tmpl_fail(rt, SITS_ERR_INVALID, "%s first arg must be str or a tuple of str, not %s",
                         suffix ? "endswith" : "startswith", sits_tmpl_type_name(arg));
    *res = arg.u.s.n <= s.u.s.n &&
           !memcmp(suffix ? s.u.s.p + s.u.s.n - arg.u.s.n : s.u.s.p, arg.u.s.p, arg.u.s.n);
    return 0;
}

static int str_method(trt_t *rt, tv_t s, int m, const char *name, tv_t *pos, int npos, const char **kwn, tv_t *kwv,
                      int nkw, tv_t *out)
{
    tv_t a[3];
#define MNAME(s_) (!strcmp(str_methods[m], s_))
    if (MNAME("format")) return str_format(rt, s, pos, npos, kwn, kwv, nkw, out);
    static const char *const p_chars[] = { "chars", NULL }, *const p_split[] = { "sep", "maxsplit", NULL },
                             *const p_one[] = { "x", "start", "end", NULL }, *const p_none[] = { NULL },
                             *const p_repl[] = { "old", "new", "count", NULL }, *const p_pad[] = { "width", "fillchar", NULL },
                             *const p_keep[] = { "keepends", NULL };
    if (MNAME("strip") || MNAME("lstrip") || MNAME("rstrip")) {
        if (bind(rt, name, p_chars, a, pos, npos, kwn, kwv, nkw)) return -1;
        if (a[0].type != TV_STR && a[0].type != TV_NONE && !NOT_GIVEN(a[0])) return want_str(rt, a[0], name);
        *out = str_strip(s, a[0], MNAME("strip") ? 3 : MNAME("lstrip") ? 1 : 2);
        return 0;
    }
    if (MNAME("split") || MNAME("rsplit")) {
        int64_t mx = -1;
        if (bind(rt, name, p_split, a, pos, npos, kwn, kwv, nkw)) return -1;
        if (!NOT_GIVEN(a[1]) && want_int(rt, a[1], name, &mx)) return -1;
        if (a[0].type != TV_STR && a[0].type != TV_NONE && !NOT_GIVEN(a[0])) return want_str(rt, a[0], name);
        return str_split(rt, s, a[0], mx, MNAME("rsplit"), out);
    }
    if (MNAME("splitlines")) {
        tlist_t *l;
        if (bind(rt, name, p_keep, a, pos, npos, kwn, kwv, nkw)) return -1;
        if (str_splitlines(rt, s, !NOT_GIVEN(a[0]) && sits_tmpl_tv_truthy(a[0]), &l)) return -1;
        *out = sits_tmpl_tv_list(l, LK_LIST);
        return 0;
    }
    if (MNAME("startswith") || MNAME("endswith")) {
        int res;
        if (bind(rt, name, p_one, a, pos, npos, kwn, kwv, nkw)) return -1;
        if (NOT_GIVEN(a[0])) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "%s() takes at least 1 argument", name);
        if (!NOT_GIVEN(a[1]) || !NOT_GIVEN(a[2])) return sits_tmpl_fail(rt, SITS_ERR_UNSUPPORTED,
            "%s() with start/end is not supported", name);
        if (prefix_match(rt, s, a[0], MNAME("endswith"), &res)) return -1;
        *out = tv_bool(res);
        return 0;
    }
    if (MNAME("upper") || MNAME("lower") || MNAME("casefold") || MNAME("title") || MNAME("capitalize") || MNAME("swapcase")) {
        if (bind(rt, name, p_none, a, pos, npos, kwn, kwv, nkw)) return -1;
        if (MNAME("upper")) return str_map(rt, s, 0, cp_upper, out);
        if (MNAME("lower") || MNAME("casefold")) return str_map(rt, s, 0, cp_lower, out);
        if (MNAME("title")) return str_map(rt, s, 1, NULL, out);
        if (MNAME("capitalize")) return str_map(rt, s, 2, NULL, out);
        return str_map(rt, s, 4, NULL, out);
    }
    if (MNAME("replace")) {
        int64_t cnt = -1;
        if (bind(rt, name, p_repl, a, pos, npos, kwn, kwv, nkw)) return -1;
        if (want_str(rt, a[0], name) || want_str(rt, a[1], name)) return -1;
        if (!NOT_GIVEN(a[2]) && want_int(rt, a[2], name, &cnt)) return -1;
        return str_replace(rt, s, a[0], a[1], cnt, out);
    }
    if (MNAME("find") || MNAME("rfind") || MNAME("index") || MNAME("rindex") || MNAME("count")) {
        if (bind(rt, name, p_one, a, pos, npos, kwn, kwv, nkw)) return -1;
        if (want_str(rt, a[0], name)) return -1;
        if (!NOT_GIVEN(a[1]) || !NOT_GIVEN(a[2])) return sits_tmpl_fail(rt, SITS_ERR_UNSUPPORTED,
            "%s() with start/end is not supported", name);
        if (MNAME("count")) {
            int64_t c = 0;
            if (a[0].u.s.n == 0) c = (int64_t)sits_tmpl_u8_len(s.u.s.p, s.u.s.n) + 1;
            else {
                size_t i = 0;
                const char *q;
                while ((q = mem_find(s.u.s.p + i, s.u.s.n - i, a[0].u.s.p, a[0].u.s.n))) { c++; i = (size_t)(q - s.u.s.p) + a[0].u.s.n; }
            }
            *out = tv_int(c);
            return 0;
        }
        int rev = MNAME("rfind") || MNAME("rindex");
        const char *q = rev ? mem_rfind(s.u.s.p, s.u.s.n, a[0].u.s.p, a[0].u.s.n) : mem_find(s.u.s.p, s.u.s.n, a[0].u.s.p, a[0].u.s.n);
        if (!q && (MNAME("index") || MNAME("rindex"))) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "substring not found");
        *out = tv_int(q ? cp_index_of(s.u.s.p, q) : -1);
        return 0;
    }
    if (MNAME("join")) {
        tlist_t *l;
        if (npos != 1 || nkw) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "join() takes exactly one argument");
        if (sits_tmpl_tv_iter(rt, pos[0], &l)) return -1;
        return str_concat_list(rt, l, s, 1, out);
    }
    if (!strncmp(str_methods[m], "is", 2)) {
        static const char *const preds[] = { "isdigit", "isalpha", "isalnum", "isspace", "islower", "isupper",
                                             "isnumeric", "isdecimal", "istitle", NULL };
        if (bind(rt, name, p_none, a, pos, npos, kwn, kwv, nkw)) return -1;
        *out = tv_bool(str_pred(s, name_in(preds, str_methods[m], strlen(str_methods[m]))));
        return 0;
    }
    if (MNAME("center") || MNAME("ljust") || MNAME("rjust") || MNAME("zfill")) {
        int64_t w;
        if (bind(rt, name, p_pad, a, pos, npos, kwn, kwv, nkw) || want_int(rt, a[0], name, &w)) return -1;
        if (MNAME("zfill")) {
            if (!NOT_GIVEN(a[1])) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "zfill() takes exactly one argument");
            int sign = s.u.s.n && (s.u.s.p[0] == '-' || s.u.s.p[0] == '+');
            tv_t body = tv_str(s.u.s.p + sign, s.u.s.n - (size_t)sign), padded;
            if (str_pad(rt, body, w - sign, tv_str("0", 1), 2, &padded)) return -1;
            if (!sign) { *out = padded; return 0; }
            char *p = sits_tmpl_rt_alloc(rt, padded.u.s.n + 2);
            if (!p) return -1;
            p[0] = s.u.s.p[0];
            memcpy(p + 1, padded.u.s.p, padded.u.s.n);
            *out = tv_str(p, padded.u.s.n + 1);
            return 0;
        }
        return str_pad(rt, s, w, a[1], MNAME("center") ? 0 : MNAME("ljust") ? 1 : 2, out);
    }
    if (MNAME("partition") || MNAME("rpartition")) {
        if (npos != 1 || nkw || want_str(rt, pos[0], name)) return sits_tmpl_fail(rt, SITS_ERR_INVALID,
            "%s() takes exactly one str argument", name);
        if (pos[0].u.s.n == 0) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "empty separator");
        int rev = MNAME("rpartition");
        const char *q = rev ? mem_rfind(s.u.s.p, s.u.s.n, pos[0].u.s.p, pos[0].u.s.n)
                            : mem_find(s.u.s.p, s.u.s.n, pos[0].u.s.p, pos[0].u.s.n);
        tlist_t *l = sits_tmpl_tl_new(rt, 3);
        if (!l) return -1;
        l->n = 3;
        if (!q) {
            l->v[rev ? 2 : 0] = s; l->v[1] = tv_str("", 0); l->v[rev ? 0 : 2] = tv_str("", 0);
        } else {
            size_t at = (size_t)(q - s.u.s.p);
            l->v[0] = tv_str(s.u.s.p, at); l->v[1] = pos[0];
            l->v[2] = tv_str(q + pos[0].u.s.n, s.u.s.n - at - pos[0].u.s.n);
        }
        *out = sits_tmpl_tv_list(l, LK_TUPLE);
        return 0;
    }
    if (MNAME("removeprefix") || MNAME("removesuffix")) {
        int res;
        if (npos != 1 || nkw || want_str(rt, pos[0], name)) return sits_tmpl_fail(rt, SITS_ERR_INVALID,
            "%s() takes exactly one str argument", name);
        int suf = MNAME("removesuffix");
        if (prefix_match(rt, s, pos[0], suf, &res)) return -1;
        *out = !res ? s : suf ? tv_str(s.u.s.p, s.u.s.n - pos[0].u.s.n) : tv_str(s.u.s.p + pos[0].u.s.n, s.u.s.n - pos[0].u.s.n);
        return 0;
    }
#undef MNAME
    return sits_tmpl_fail(rt, SITS_ERR_INTERNAL, "str method %s missing", name);
}

int sits_tmpl_call_method(trt_t *rt, tv_t self, const char *name, size_t nlen, tv_t *pos, int npos,
                     const char **kwn, tv_t *kwv, int nkw, tv_t *out, int *found_p)
{
    char nm[32];
    int m;
    *found_p = 0;
    if (nlen >= sizeof(nm)) return 0;
    memcpy(nm, name, nlen);
    nm[nlen] = 0;
    if (self.type == TV_STR && (m = name_in(str_methods, name, nlen)) >= 0) {
        /* markupsafe.Markup's methods that return Markup (or lists / tuples of it) */
        static const char *const markup_kept[] = { "capitalize", "title", "lower", "upper", "replace", "ljust",
                                                   "rjust", "lstrip", "rstrip", "center", "strip", "swapcase",
                                                   "zfill", "split", "rsplit", "splitlines", "partition",
                                                   "rpartition", NULL };
        int keep = self.kind == 1 && name_in(markup_kept, name, nlen) >= 0;
        *found_p = 1;
        if (keep && !strcmp(nm, "replace"))   /* Markup.replace escapes its string arguments */
            for (int i = 0; i < npos && i < 2; i++) if (sits_tmpl_html_escape(rt, pos[i], &pos[i])) return -1;
        if (str_method(rt, self, m, nm, pos, npos, kwn, kwv, nkw, out)) return -1;
        if (keep && out->type == TV_STR) out->kind = 1;
        if (keep && out->type == TV_LIST)
            for (size_t i = 0; i < out->u.l->n; i++) if (out->u.l->v[i].type == TV_STR) out->u.l->v[i].kind = 1;
        return 0;
    }
    if (self.type == TV_DICT && (m = name_in(dict_methods, name, nlen)) >= 0) {
        const tdict_t *d = self.u.d;
        *found_p = 1;
        if (m == 3) { /* get(key, default=None) */
            if (nkw || npos < 1 || npos > 2) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "get expected 1 or 2 arguments");
            int i = sits_tmpl_td_find(d, pos[0]);
            *out = i >= 0 ? d->v[i] : npos == 2 ? pos[1] : tv_none();
            return 0;
        }
        if (npos || nkw) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "%s() takes no arguments", nm);
        if (m == 4) { *out = self; return 0; }
        tlist_t *l = sits_tmpl_tl_new(rt, d->n);
        if (!l) return -1;
        for (size_t i = 0; i < d->n; i++) {
            if (m == 0) {
                tlist_t *pr = sits_tmpl_tl_new(rt, 2);
                if (!pr) return -1;
                pr->v[0] = d->k[i]; pr->v[1] = d->v[i]; pr->n = 2;
                l->v[l->n++] = sits_tmpl_tv_list(pr, LK_TUPLE);
            } else l->v[l->n++] = m == 1 ? d->k[i] : d->v[i];
        }
        *out = sits_tmpl_tv_list(l, m == 0 ? LK_ITEMS : m == 1 ? LK_KEYS : LK_VALUES);
        return 0;
    }
    if (self.type == TV_LIST && (self.kind == LK_LIST || self.kind == LK_TUPLE) &&
        (m = name_in(list_methods, name, nlen)) >= 0 && !(m == 2 && self.kind == LK_TUPLE)) {
        const tlist_t *l = self.u.l;
        *found_p = 1;
        if (m == 2) {
            if (npos || nkw) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "copy() takes no arguments");
            *out = self;
            return 0;
        }
        if (npos != 1 || nkw) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "%s() takes exactly one argument", nm);
        int64_t c = 0;
        for (size_t i = 0; i < l->n; i++)
            if (sits_tmpl_tv_eq(l->v[i], pos[0])) {
                if (m == 0) { *out = tv_int((int64_t)i); return 0; }
                c++;
            }
        if (m == 0) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "value is not in list");
        *out = tv_int(c);
        return 0;
    }
    if ((self.type == TV_DICT && name_in(dict_unsafe, name, nlen) >= 0) ||
        (self.type == TV_LIST && self.kind == LK_LIST && name_in(list_unsafe, name, nlen) >= 0)) {
        *found_p = 1;
        return sits_tmpl_fail(rt, SITS_ERR_INVALID, "SecurityError: access to attribute '%s' of '%s' object is unsafe.", nm,
                         sits_tmpl_type_name(self));
    }
    return 0;
}

/* Python's printf-style 'fmt % args': %%, %s %r %d %i %f %e %g %x %o %c with flags - + 0 space, width
 * and precision; %(name)s with a dict argument. */
int sits_tmpl_str_percent(trt_t *rt, tv_t fmt, tv_t args, tv_t *out)
{
    tv_t *av = &args;
    size_t an = 1, ai = 0;
    int mapping = args.type == TV_DICT;
    /* CPython: a non-tuple argument with __getitem__ (dict, list) may go unused without an error */
    int lenient = mapping || (args.type == TV_LIST && args.kind != LK_TUPLE);
    if (args.type == TV_LIST && args.kind == LK_TUPLE) { av = args.u.l->v; an = args.u.l->n; }
    const char *p = fmt.u.s.p;
    size_t n = fmt.u.s.n, i = 0;
    tbuf_t b = { 0 };
    int r = 0;
    while (i < n && !r) {
        if (p[i] != '%') { r = sits_tmpl_tbuf_putc(rt, &b, p[i++]); continue; }
        if (++i >= n) { r = sits_tmpl_fail(rt, SITS_ERR_INVALID, "incomplete format"); break; }
        if (p[i] == '%') { r = sits_tmpl_tbuf_putc(rt, &b, '%'); i++; continue; }
        tv_t v;
        if (p[i] == '(') {
            size_t e = i + 1;
            while (e < n && p[e] != ')') e++;
            if (e >= n || !mapping) { r = sits_tmpl_fail(rt, SITS_ERR_INVALID, "format requires a mapping"); break; }
            int k = sits_tmpl_td_find_str(args.u.d, p + i + 1, e - i - 1);
            if (k < 0) { r = sits_tmpl_fail(rt, SITS_ERR_INVALID, "KeyError: '%.*s'", (int)(e - i - 1), p + i + 1); break; }
            v = args.u.d->v[k];
            i = e + 1;
        } else if (mapping) {
            v = args;
            ai = an;
        } else {
            if (ai >= an) { r = sits_tmpl_fail(rt, SITS_ERR_INVALID, "not enough arguments for format string"); break; }
            v = av[ai++];
        }
        char spec[32], num[512];
        size_t k = 0;
        spec[k++] = '%';
        while (i < n && strchr("-+0 #", p[i]) && k < 8) spec[k++] = p[i++];
        int width = 0, prec = -1;
        while (i < n && p[i] >= '0' && p[i] <= '9' && width < 10000) width = width * 10 + (p[i++] - '0');
        if (i < n && p[i] == '.') {
            prec = 0;
            i++;
            while (i < n && p[i] >= '0' && p[i] <= '9' && prec < 1000) prec = prec * 10 + (p[i++] - '0');
        }
        if (i >= n) { r = sits_tmpl_fail(rt, SITS_ERR_INVALID, "incomplete format"); break; }
        char conv = p[i++];
        int left = memchr(spec, '-', k) != NULL;
        tbuf_t t = { 0 };
        if (conv == 's' || conv == 'r' || conv == 'a') {
            r = conv == 's' ? sits_tmpl_tv_str_append(rt, &t, v) : sits_tmpl_tv_repr_append(rt, &t, v);
            if (!r && prec >= 0) t.n = cp_offset(t.p, t.n, (size_t)prec);
        } else if (strchr("dixXoeEfFgGc", conv)) {
            int isnum = v.type == TV_INT || v.type == TV_BOOL || v.type == TV_FLOAT;
            if (!isnum) r = sits_tmpl_fail(rt, SITS_ERR_INVALID,
                "%%%c format: a real number is required, not %s", conv, sits_tmpl_type_name(v));
            else if (conv == 'c') {
                char u[4];
                int64_t cp = v.type == TV_FLOAT ? -1 : v.u.i;
                if (cp < 0 || cp > 0x10ffff) r = sits_tmpl_fail(rt, SITS_ERR_INVALID, "%%c arg not in range(0x110000)");
                else r = sits_tmpl_tbuf_put(rt, &t, u, (size_t)sits_tmpl_u8_encode((uint32_t)cp, u));
            } else {
                if (prec >= 0) k += (size_t)snprintf(spec + k, sizeof(spec) - k, ".%d", prec);
                if (strchr("dixXo", conv)) {
                    if (v.type == TV_FLOAT && (isnan(v.u.f) || isinf(v.u.f) || fabs(v.u.f) >= 9.2e18)) {
                        r = sits_tmpl_fail(rt, SITS_ERR_INVALID, "cannot convert float to integer");
                    } else {
                        long long x = v.type == TV_FLOAT ? (long long)v.u.f : (long long)v.u.i;
                        snprintf(spec + k, sizeof(spec) - k, "ll%c", conv == 'i' ? 'd' : conv);
                        snprintf(num, sizeof(num), spec, x);
                        r = sits_tmpl_tbuf_puts(rt, &t, num);
                    }
                } else {
                    double x = v.type == TV_FLOAT ? v.u.f : (double)v.u.i;
                    snprintf(spec + k, sizeof(spec) - k, "%c", conv);
                    snprintf(num, sizeof(num), spec, x);
                    r = sits_tmpl_tbuf_puts(rt, &t, num);
                }
            }
        } else {
            r = sits_tmpl_fail(rt, SITS_ERR_INVALID, "unsupported format character '%c'", conv);
        }
        if (!r) {
            size_t len = sits_tmpl_u8_len(t.p ? t.p : "", t.n);
            int zero = memchr(spec, '0', k) && !left && strchr("dixXoeEfFgG", conv);
            if (!zero) for (size_t q = len; !left && q < (size_t)width && !r; q++) r = sits_tmpl_tbuf_putc(rt, &b, ' ');
            if (zero && t.n && (t.p[0] == '-' || t.p[0] == '+') && len < (size_t)width) {
                r = sits_tmpl_tbuf_putc(rt, &b, t.p[0]);
                memmove(t.p, t.p + 1, --t.n);
                for (size_t q = len; q < (size_t)width && !r; q++) r = sits_tmpl_tbuf_putc(rt, &b, '0');
            } else if (zero) for (size_t q = len; q < (size_t)width && !r; q++) r = sits_tmpl_tbuf_putc(rt, &b, '0');
            if (!r && t.n) r = sits_tmpl_tbuf_put(rt, &b, t.p, t.n);
            for (size_t q = len; left && q < (size_t)width && !r; q++) r = sits_tmpl_tbuf_putc(rt, &b, ' ');
        }
        sits_tmpl_tbuf_release(&t);
    }
    if (!r && !lenient && ai < an)
        r = sits_tmpl_fail(rt, SITS_ERR_INVALID, "not all arguments converted during string formatting");
    if (!r) r = sits_tmpl_tbuf_to_str(rt, &b, out);
    sits_tmpl_tbuf_release(&b);
    return r;
}

/* ---- filters ---- */
/* jinja2's make_attrgetter: "a.0.b" looked up part by part (digit parts as ints); with a default, an
 * undefined intermediate is replaced by it before the next part */
static int attr_path(trt_t *rt, tv_t item, tv_t attr, const tv_t *def, tv_t *out)
{
    if (attr.type != TV_STR) {
        if (sits_tmpl_getitem(rt, item, attr, out)) return -1;
        if (def && out->type == TV_UNDEF) *out = *def;
        return 0;
    }
    const char *p = attr.u.s.p;
    size_t n = attr.u.s.n, a = 0;
    *out = item;
    for (;;) {
        size_t b = a;
        while (b < n && p[b] != '.') b++;
        int digits = b > a;
        for (size_t i = a; i < b; i++) if (p[i] < '0' || p[i] > '9') digits = 0;
        tv_t key = tv_str(p + a, b - a);
        if (digits && b - a < 18) key = tv_int(strtoll(p + a, NULL, 10));
        if (sits_tmpl_getitem(rt, *out, key, out)) return -1;
        if (def && out->type == TV_UNDEF) *out = *def;
        if (b >= n) break;
        a = b + 1;
    }
    return 0;
}

static int soft_str(trt_t *rt, tv_t v, tv_t *out) { return sits_tmpl_tv_to_str(rt, v, out); }
static int do_escape(trt_t *rt, tv_t v, tv_t *out);

static tv_t lower_key(trt_t *rt, tv_t v)
{
    tv_t o;
    if (v.type != TV_STR) return v;
    if (str_map(rt, v, 0, cp_lower, &o)) return v;
    return o;
}

/* stable merge sort of values by key with Python's < */
static int sort_values(trt_t *rt, tv_t *v, tv_t *keys, size_t n, int reverse)
{
    if (n < 2) return 0;
    tv_t *tv = sits_tmpl_rt_alloc(rt, n * sizeof(tv_t)), *tk = tv ? sits_tmpl_rt_alloc(rt, n * sizeof(tv_t)) : NULL;
    if (!tk) return -1;
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n, i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                int c;
                /* reverse=True in Python keeps stability by reversing the comparison */
                if (reverse ? sits_tmpl_tv_cmp(rt, keys[i], keys[j], &c) : sits_tmpl_tv_cmp(rt, keys[j], keys[i], &c)) return -1;
                if (c < 0) { tv[k] = v[j]; tk[k++] = keys[j++]; }
                else { tv[k] = v[i]; tk[k++] = keys[i++]; }
            }
            while (i < mid) { tv[k] = v[i]; tk[k++] = keys[i++]; }
            while (j < hi) { tv[k] = v[j]; tk[k++] = keys[j++]; }
        }
        TMEMCPY(v, tv, n * sizeof(tv_t));
        TMEMCPY(keys, tk, n * sizeof(tv_t));
    }
    return 0;
}

static int copy_items(trt_t *rt, tv_t v, tlist_t **l_p)
{
    tlist_t *src, *l;
    if (sits_tmpl_tv_iter(rt, v, &src)) return -1;
    if (!(l = sits_tmpl_tl_new(rt, src->n))) return -1;
    TMEMCPY(l->v, src->v, src->n * sizeof(tv_t));
    l->n = src->n;
    *l_p = l;
    return 0;
}

/* A generator filter's source: a non-iterable gives a generator that raises when consumed (Python
 * generators run lazily), returned in *out with 1. */
static int gen_source(trt_t *rt, tv_t v, tlist_t **items_p, tv_t *out)
{
    if ((v.type == TV_LIST && !v.u.l->err) || v.type == TV_STR || v.type == TV_DICT || v.type == TV_UNDEF)
        return sits_tmpl_tv_iter(rt, v, items_p);
    tlist_t *l = sits_tmpl_tl_new(rt, 0);
    char *m = sits_tmpl_rt_alloc(rt, 64);
    if (!l || !m) return -1;
    if (v.type == TV_LIST) l->err = v.u.l->err;   /* a generator over a failing generator fails alike */
    else { snprintf(m, 64, "'%s' object is not iterable", sits_tmpl_type_name(v)); l->err = m; }
    *out = sits_tmpl_tv_list(l, LK_ITER);
    return 1;
}

static int select_filter(trt_t *rt, tv_t v, tv_t *pos, int npos, const char **kwn, tv_t *kwv, int nkw,
                         int lookup_attr, int want, tv_t *out)
{
    tlist_t *items, *res = sits_tmpl_tl_new(rt, 0);
    if (!res) return -1;
    *out = sits_tmpl_tv_list(res, LK_ITER);
    if (!sits_tmpl_tv_truthy(v)) return 0;
    if (nkw) return sits_tmpl_fail(rt, SITS_ERR_UNSUPPORTED, "keyword arguments to select filters are not supported");
    int g = gen_source(rt, v, &items, out);
    if (g) return g < 0 ? -1 : 0;
    int off = lookup_attr ? 1 : 0, test = -3;
    if (lookup_attr && npos < 1) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "Missing parameter for attribute name");
    if (npos > off) {
        if (pos[off].type != TV_STR) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "test name must be a string");
        test = sits_tmpl_test_lookup(pos[off].u.s.p, pos[off].u.s.n);
        if (test < 0) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "No test named '%.*s'", (int)pos[off].u.s.n, pos[off].u.s.p);
    }
    for (size_t i = 0; i < items->n; i++) {
        tv_t x = items->v[i], r;
        if (lookup_attr && attr_path(rt, x, pos[0], NULL, &x)) return -1;
        if (test == -3) r = tv_bool(sits_tmpl_tv_truthy(x));
        else if (sits_tmpl_apply_test(rt, test, x, pos + off + 1, npos - off - 1, &r)) return -1;
        if (sits_tmpl_tv_truthy(r) == want && sits_tmpl_tl_push(rt, res, items->v[i])) return -1;
    }
    return 0;
}

static int minmax(trt_t *rt, tv_t v, tv_t *a, int want_max, tv_t *out)
{
    tlist_t *items;
    if (sits_tmpl_tv_iter(rt, v, &items)) return -1;
    if (items->n == 0) { *out = tv_undef("No aggregated item, sequence was empty."); return 0; }
    int cs = !NOT_GIVEN(a[0]) && sits_tmpl_tv_truthy(a[0]);
    size_t best = 0;
    tv_t bk = {0};
    for (size_t i = 0; i < items->n; i++) {
        tv_t k = items->v[i];
        if (!NOT_GIVEN(a[1]) && a[1].type != TV_NONE && attr_path(rt, k, a[1], NULL, &k)) return -1;
        if (!cs) k = lower_key(rt, k);
        if (i == 0) { bk = k; continue; }
        int c;
        if (sits_tmpl_tv_cmp(rt, k, bk, &c)) return -1;
        if (want_max ? c > 0 : c < 0) { best = i; bk = k; }
    }
    *out = items->v[best];
    return 0;
}

static int do_round(trt_t *rt, tv_t v, tv_t *a, tv_t *out)
{
    int64_t prec = 0;
    if (!NOT_GIVEN(a[0]) && want_int(rt, a[0], "round", &prec)) return -1;
    const char *method = "common";
    size_t ml = 6;
    if (!NOT_GIVEN(a[1])) { if (want_str(rt, a[1], "round")) return -1; method = a[1].u.s.p; ml = a[1].u.s.n; }
    if (v.type != TV_INT && v.type != TV_BOOL && v.type != TV_FLOAT)
        return sits_tmpl_fail(rt, SITS_ERR_INVALID, "round: a number is required, got '%s'", sits_tmpl_type_name(v));
    int common = ml == 6 && !memcmp(method, "common", 6), fl = ml == 5 && !memcmp(method, "floor", 5),
        ce = ml == 4 && !memcmp(method, "ceil", 4);
    if (!common && !fl && !ce) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "method must be common, ceil or floor");
    if (common && v.type != TV_FLOAT) { *out = tv_int(v.u.i); return 0; }
    double x = v.type == TV_FLOAT ? v.u.f : (double)v.u.i;
    if (prec < -300 || prec > 300) return sits_tmpl_fail(rt, SITS_ERR_UNSUPPORTED, "round precision out of range");
    if (common) {
        if (prec >= 0) {
            char buf[512];
            snprintf(buf, sizeof(buf), "%.*f", (int)prec, x);
            *out = tv_float(strtod(buf, NULL));
        } else {
            double p = pow(10.0, (double)-prec);
            *out = tv_float(nearbyint(x / p) * p);
        }
        return 0;
    }
    double p = pow(10.0, (double)prec), y = x * p;
    if (isinf(y) || isnan(y)) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "cannot convert float infinity to integer");
    *out = tv_float((fl ? floor(y) : ceil(y)) / p);
    return 0;
}

static int do_indent(trt_t *rt, tv_t v, tv_t *a, tv_t *out)
{
    tv_t s, ind = tv_str("    ", 4);
    if (v.type == TV_UNDEF) return undef_err(rt, v);   /* s += "\n" fails on Undefined */
    if (v.type != TV_STR)
        return sits_tmpl_fail(rt, SITS_ERR_INVALID, "unsupported operand type(s) for +=: '%s' and 'str'", sits_tmpl_type_name(v));
    s = v;
    if (!NOT_GIVEN(a[0])) {
        if (a[0].type == TV_STR) ind = a[0];
        else {
            int64_t w = 0;
            if (want_int(rt, a[0], "indent", &w)) return -1;
            if (w < 0) w = 0;
            if (w > 4096) return sits_tmpl_fail(rt, SITS_ERR_UNSUPPORTED, "indent width too large");
            char *sp = sits_tmpl_rt_alloc(rt, (size_t)w + 1);
            if (!sp) return -1;
            memset(sp, ' ', (size_t)w);
            ind = tv_str(sp, (size_t)w);
        }
    }
    int first = !NOT_GIVEN(a[1]) && sits_tmpl_tv_truthy(a[1]), blank = !NOT_GIVEN(a[2]) && sits_tmpl_tv_truthy(a[2]);
    /* s += "\n"; then splitlines */
    char *p = sits_tmpl_rt_alloc(rt, s.u.s.n + 2);
    if (!p) return -1;
    memcpy(p, s.u.s.p, s.u.s.n);
    p[s.u.s.n] = '\n';
    tlist_t *lines;
    if (str_splitlines(rt, tv_str(p, s.u.s.n + 1), 0, &lines)) return -1;
    tbuf_t b = { 0 };
    int r = 0;
    if (first) r = sits_tmpl_tbuf_put(rt, &b, ind.u.s.p, ind.u.s.n);
    for (size_t i = 0; i < lines->n && !r; i++) {
        tv_t ln = lines->v[i];
        if (i) {
            r = sits_tmpl_tbuf_putc(rt, &b, '\n');
            if (!r && (blank || ln.u.s.n)) r = sits_tmpl_tbuf_put(rt, &b, ind.u.s.p, ind.u.s.n);
        }
        if (!r) r = sits_tmpl_tbuf_put(rt, &b, ln.u.s.p, ln.u.s.n);
    }
    if (!r) r = sits_tmpl_tbuf_to_str(rt, &b, out);
    sits_tmpl_tbuf_release(&b);
    return r;
}

static int do_int(trt_t *rt, tv_t v, tv_t *a, tv_t *out)
{
    if (v.type == TV_UNDEF) return undef_err(rt, v);   /* int(Undefined) raises UndefinedError */
    tv_t def = NOT_GIVEN(a[0]) ? tv_int(0) : a[0];
    int64_t base = 10;
    if (!NOT_GIVEN(a[1]) && want_int(rt, a[1], "int", &base)) return -1;
    switch (v.type) {
    case TV_INT: case TV_BOOL: *out = tv_int(v.u.i); return 0;
    case TV_FLOAT:
        if (isnan(v.u.f) || isinf(v.u.f) || fabs(v.u.f) >= 9.2e18) { *out = def; return 0; }
        *out = tv_int((int64_t)v.u.f);
        return 0;
    case TV_STR: {
        tv_t s = str_strip(v, tv_none(), 3);
        char buf[128];
        size_t k = 0;
        if (s.u.s.n == 0 || s.u.s.n >= sizeof(buf)) { *out = def; return 0; }
        for (size_t i = 0; i < s.u.s.n; i++) if (s.u.s.p[i] != '_') buf[k++] = s.u.s.p[i];
        buf[k] = 0;
        char *e;
        long long x = strtoll(buf, &e, (int)base);
        if (*e == 0 && e != buf && buf[0] != ' ') { *out = tv_int(x); return 0; }
        double d = strtod(buf, &e);
        if (*e == 0 && e != buf && !isnan(d) && !isinf(d) && fabs(d) < 9.2e18 && base == 10) {
            *out = tv_int((int64_t)d);
            return 0;
        }
        *out = def;
        return 0;
    }
    default: *out = def; return 0;
    }
}

static int do_float(trt_t *rt, tv_t v, tv_t *a, tv_t *out)
{
    if (v.type == TV_UNDEF) return undef_err(rt, v);
    tv_t def = NOT_GIVEN(a[0]) ? tv_float(0.0) : a[0];
    switch (v.type) {
    case TV_INT: case TV_BOOL: *out = tv_float((double)v.u.i); return 0;
    case TV_FLOAT: *out = v; return 0;
    case TV_STR: {
        tv_t s = str_strip(v, tv_none(), 3);
        char buf[128];
        if (s.u.s.n == 0 || s.u.s.n >= sizeof(buf)) { *out = def; return 0; }
        memcpy(buf, s.u.s.p, s.u.s.n);
        buf[s.u.s.n] = 0;
        char *e;
        double d = strtod(buf, &e);
        if (*e == 0 && !(buf[0] == '0' && (buf[1] == 'x' || buf[1] == 'X'))) { *out = tv_float(d); return 0; }
        *out = def;
        return 0;
    }
    default: *out = def; return 0;
    }
}

static int do_truncate(trt_t *rt, tv_t v, tv_t *a, tv_t *out)
{
    tv_t s, end = tv_str("...", 3);
    int64_t length = 255, leeway = 5;
    if (v.type != TV_STR && v.type != TV_UNDEF) {
        /* jinja2 returns any value whose len() fits as is; it only cuts strings */
        int64_t len;
        if (!NOT_GIVEN(a[0]) && want_int(rt, a[0], "truncate", &length)) return -1;
        if (!NOT_GIVEN(a[3]) && a[3].type != TV_NONE && want_int(rt, a[3], "truncate", &leeway)) return -1;
        if (sits_tmpl_tv_len(rt, v, &len)) return -1;
        if (len <= length + leeway) { *out = v; return 0; }
        return sits_tmpl_fail(rt, SITS_ERR_UNSUPPORTED, "truncate of a long %s is not supported", sits_tmpl_type_name(v));
    }
    if (soft_str(rt, v, &s)) return -1;
    if (!NOT_GIVEN(a[0]) && want_int(rt, a[0], "truncate", &length)) return -1;
    int killwords = !NOT_GIVEN(a[1]) && sits_tmpl_tv_truthy(a[1]);
    if (!NOT_GIVEN(a[2])) { if (want_str(rt, a[2], "truncate")) return -1; end = a[2]; }
    if (!NOT_GIVEN(a[3]) && a[3].type != TV_NONE && want_int(rt, a[3], "truncate", &leeway)) return -1;
    int64_t n = (int64_t)sits_tmpl_u8_len(s.u.s.p, s.u.s.n), en = (int64_t)sits_tmpl_u8_len(end.u.s.p, end.u.s.n);
    if (length < en) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "expected length >= %lld, got %lld", (long long)en, (long long)length);
    if (leeway < 0) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "expected leeway >= 0");
    if (n <= length + leeway) { *out = s; return 0; }
    size_t cut = cp_offset(s.u.s.p, s.u.s.n, (size_t)(length - en));
    tv_t head = tv_str(s.u.s.p, cut);
    if (!killwords) {
        const char *sp = mem_rfind(head.u.s.p, head.u.s.n, " ", 1);
        if (sp) head.u.s.n = (size_t)(sp - head.u.s.p);
    }
    char *p = sits_tmpl_rt_alloc(rt, head.u.s.n + end.u.s.n + 1);
    if (!p) return -1;
    memcpy(p, head.u.s.p, head.u.s.n);
    memcpy(p + head.u.s.n, end.u.s.p, end.u.s.n);
    *out = tv_str(p, head.u.s.n + end.u.s.n);
    return 0;
}

int sits_tmpl_html_escape(trt_t *rt, tv_t v, tv_t *out)
{
    if (v.type == TV_STR && v.kind == 1) { *out = v; return 0; }
    return do_escape(rt, v, out);
}

static int do_escape(trt_t *rt, tv_t v, tv_t *out)
{
    tv_t s;
    if (soft_str(rt, v, &s)) return -1;
    tbuf_t b = { 0 };
    int r = 0;
    for (size_t i = 0; i < s.u.s.n && !r; i++) {
        switch (s.u.s.p[i]) {
        case '&': r = sits_tmpl_tbuf_puts(rt, &b, "&amp;"); break;
        case '<': r = sits_tmpl_tbuf_puts(rt, &b, "&lt;"); break;
        case '>': r = sits_tmpl_tbuf_puts(rt, &b, "&gt;"); break;
        case '"': r = sits_tmpl_tbuf_puts(rt, &b, "&#34;"); break;
        case '\'': r = sits_tmpl_tbuf_puts(rt, &b, "&#39;"); break;
        default: r = sits_tmpl_tbuf_putc(rt, &b, s.u.s.p[i]);
        }
    }
    if (!r) r = sits_tmpl_tbuf_to_str(rt, &b, out);
    sits_tmpl_tbuf_release(&b);
    out->kind = 1;
    return r;
}

static int do_tojson(trt_t *rt, tv_t v, tv_t *a, tv_t *out)
{
    /* transformers: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) */
    int ensure_ascii = !NOT_GIVEN(a[0]) && sits_tmpl_tv_truthy(a[0]);
    const char *ind = NULL;
    size_t indn = 0;
    char *spaces = NULL;
    if (!NOT_GIVEN(a[1]) && a[1].type != TV_NONE) {
        if (a[1].type == TV_STR) { ind = a[1].u.s.p; indn = a[1].u.s.n; }
        else {
            int64_t w = 0;
            if (want_int(rt, a[1], "tojson indent", &w)) return -1;
            if (w < 0) w = 0;
            if (w > 1024) return sits_tmpl_fail(rt, SITS_ERR_UNSUPPORTED, "tojson indent too large");
            if (!(spaces = sits_tmpl_rt_alloc(rt, (size_t)w + 1))) return -1;
            memset(spaces, ' ', (size_t)w);
            ind = spaces; indn = (size_t)w;
        }
    }
    const char *isep = ind ? "," : ", ", *ksep = ": ";
    if (!NOT_GIVEN(a[2]) && a[2].type != TV_NONE) {
        tv_t sp = a[2];
        if (sp.type != TV_LIST || (sp.kind != LK_LIST && sp.kind != LK_TUPLE) || sp.u.l->n != 2 ||
            sp.u.l->v[0].type != TV_STR || sp.u.l->v[1].type != TV_STR)
            return sits_tmpl_fail(rt, SITS_ERR_INVALID, "tojson separators must be a pair of strings");
        char *x = sits_tmpl_rt_alloc(rt, sp.u.l->v[0].u.s.n + 1), *y = sits_tmpl_rt_alloc(rt, sp.u.l->v[1].u.s.n + 1);
        if (!x || !y) return -1;
        memcpy(x, sp.u.l->v[0].u.s.p, sp.u.l->v[0].u.s.n);
        memcpy(y, sp.u.l->v[1].u.s.p, sp.u.l->v[1].u.s.n);
        isep = x; ksep = y;
    }
    int sort_keys = !NOT_GIVEN(a[3]) && sits_tmpl_tv_truthy(a[3]);
    tbuf_t b = { 0 };
    int r = sits_tmpl_tv_json_append(rt, &b, v, ind, indn, 0, isep, ksep, sort_keys, ensure_ascii);
    if (!r) r = sits_tmpl_tbuf_to_str(rt, &b, out);
    sits_tmpl_tbuf_release(&b);
    return r;
}

int sits_tmpl_apply_filter(trt_t *rt, int id, tv_t v, tv_t *pos, int npos, const char **kwn, tv_t *kwv, int nkw, tv_t *out)
{
    tv_t a[6], s;
    tlist_t *items;
    static const char *const p_none[] = { NULL };
#define BIND(...) do { static const char *const names_[] = { __VA_ARGS__, NULL }; \
    if (bind(rt, fname, names_, a, pos, npos, kwn, kwv, nkw)) return -1; } while (0)
#define BIND0() do { if (bind(rt, fname, p_none, a, pos, npos, kwn, kwv, nkw)) return -1; } while (0)
    const char *fname = "filter";
    for (size_t i = 0; i < sizeof(filters) / sizeof(filters[0]); i++) if (filters[i].id == id) { fname = filters[i].name; break; }
    switch (id) {
    case F_ABS:
        BIND0();
        if (v.type == TV_FLOAT) { *out = tv_float(fabs(v.u.f)); return 0; }
        if (v.type == TV_INT || v.type == TV_BOOL) {
            if (v.u.i == INT64_MIN) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "integer overflow");
            *out = tv_int(v.u.i < 0 ? -v.u.i : v.u.i);
            return 0;
        }
        return sits_tmpl_fail(rt, SITS_ERR_INVALID, "bad operand type for abs(): '%s'", sits_tmpl_type_name(v));
    case F_ATTR:
        BIND("name");
        if (want_str(rt, a[0], "attr")) return -1;
        if (v.type == TV_UNDEF) return undef_err(rt, v);
        if (v.type == TV_DICT) {   /* attr() is getattr only: dict keys are not attributes */
            if (name_in(dict_methods, a[0].u.s.p, a[0].u.s.n) >= 0) return sits_tmpl_getattr(rt, v, a[0].u.s.p, a[0].u.s.n, out);
            *out = undef_attr(rt, v, a[0].u.s.p, a[0].u.s.n, 0);
            return 0;
        }
        return sits_tmpl_getattr(rt, v, a[0].u.s.p, a[0].u.s.n, out);
    case F_BATCH: case F_SLICE: {
        int64_t cnt = 0;
        BIND("count", "fill_with");
        if (want_int(rt, a[0], fname, &cnt)) return -1;
        int g = gen_source(rt, v, &items, out);
        if (g) return g < 0 ? -1 : 0;
        if (cnt <= 0) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "%s count must be positive", fname);
        tlist_t *res = sits_tmpl_tl_new(rt, 0), *cur = NULL;
        if (!res) return -1;
        int fill = !NOT_GIVEN(a[1]) && a[1].type != TV_NONE;
        if (id == F_BATCH) {
            for (size_t i = 0; i < items->n; i++) {
                if (!cur || (int64_t)cur->n == cnt) {
                    if (!(cur = sits_tmpl_tl_new(rt, 0)) || sits_tmpl_tl_push(rt, res, sits_tmpl_tv_list(cur, LK_LIST)))
                        return -1;
                }
                if (sits_tmpl_tl_push(rt, cur, items->v[i])) return -1;
            }
            while (fill && cur && (int64_t)cur->n < cnt) if (sits_tmpl_tl_push(rt, cur, a[1])) return -1;
        } else {
            size_t n = items->n, per = n / (size_t)cnt, extra = n % (size_t)cnt, off = 0;
            for (int64_t k = 0; k < cnt; k++) {
                size_t start = off + (size_t)k * per;
                if ((size_t)k < extra) off++;
                size_t end = off + (size_t)(k + 1) * per;
                if (!(cur = sits_tmpl_tl_new(rt, 0))) return -1;
                for (size_t i = start; i < end && i < n; i++) if (sits_tmpl_tl_push(rt, cur, items->v[i])) return -1;
                if (fill && (size_t)k >= extra && sits_tmpl_tl_push(rt, cur, a[1])) return -1;
                if (sits_tmpl_tl_push(rt, res, sits_tmpl_tv_list(cur, LK_LIST))) return -1;
            }
        }
        *out = sits_tmpl_tv_list(res, LK_ITER);
        return 0;
    }
    case F_CAPITALIZE: BIND0(); if (soft_str(rt, v, &s) || str_map(rt, s, 2, NULL, out)) return -1;
        out->kind = s.kind;
        return 0;
    case F_CENTER: {
        int64_t w = 80;
        BIND("width");
        if (!NOT_GIVEN(a[0]) && want_int(rt, a[0], "center", &w)) return -1;
        return soft_str(rt, v, &s) || str_pad(rt, s, w, tv_none(), 0, out);
    }
    case F_COUNT: {
        int64_t n;
        BIND0();
        if (sits_tmpl_tv_len(rt, v, &n)) return -1;
        *out = tv_int(n);
        return 0;
    }
    case F_DEFAULT:
        BIND("default_value", "boolean");
        if (v.type == TV_UNDEF || (!NOT_GIVEN(a[1]) && sits_tmpl_tv_truthy(a[1]) && !sits_tmpl_tv_truthy(v)))
            *out = NOT_GIVEN(a[0]) ? tv_str("", 0) : a[0];
        else *out = v;
        return 0;
    case F_DICTSORT: {
        BIND("case_sensitive", "by", "reverse");
        if (v.type == TV_UNDEF) return undef_err(rt, v);
        if (v.type != TV_DICT) return sits_tmpl_fail(rt, SITS_ERR_INVALID,
            "dictsort: '%s' object has no attribute 'items'", sits_tmpl_type_name(v));
        int by_value = 0;
        if (!NOT_GIVEN(a[1])) {
            if (a[1].type == TV_STR && a[1].u.s.n == 5 && !memcmp(a[1].u.s.p, "value", 5)) by_value = 1;
            else if (!(a[1].type == TV_STR && a[1].u.s.n == 3 && !memcmp(a[1].u.s.p, "key", 3)))
                return sits_tmpl_fail(rt, SITS_ERR_INVALID, "You can only sort by either \"key\" or \"value\"");
        }
        int cs = !NOT_GIVEN(a[0]) && sits_tmpl_tv_truthy(a[0]);
        size_t n = v.u.d->n;
        tlist_t *l = sits_tmpl_tl_new(rt, n);
        tv_t *keys = sits_tmpl_rt_alloc(rt, (n ? n : 1) * sizeof(tv_t));
        if (!l || !keys) return -1;
        for (size_t i = 0; i < n; i++) {
            tlist_t *pr = sits_tmpl_tl_new(rt, 2);
            if (!pr) return -1;
            pr->v[0] = v.u.d->k[i]; pr->v[1] = v.u.d->v[i]; pr->n = 2;
            l->v[i] = sits_tmpl_tv_list(pr, LK_TUPLE);
            keys[i] = by_value ? v.u.d->v[i] : v.u.d->k[i];
            if (!cs) keys[i] = lower_key(rt, keys[i]);
        }
        l->n = n;
        if (sort_values(rt, l->v, keys, n, !NOT_GIVEN(a[2]) && sits_tmpl_tv_truthy(a[2]))) return -1;
        *out = sits_tmpl_tv_list(l, LK_LIST);
        return 0;
    }
    case F_ESCAPE: BIND0(); return sits_tmpl_html_escape(rt, v, out);
    case F_FORCEESCAPE: BIND0(); return do_escape(rt, v, out);
    case F_FIRST:
        BIND0();
        if (sits_tmpl_tv_iter(rt, v, &items)) return -1;
        *out = items->n ? items->v[0] : tv_undef("No first item, sequence was empty.");
        return 0;
    case F_LAST:
        BIND0();
        if (v.type == TV_UNDEF) { *out = tv_undef("No last item, sequence was empty."); return 0; }
        if (v.type == TV_LIST && v.kind == LK_ITER) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "'generator' object is not reversible");
        if (sits_tmpl_tv_iter(rt, v, &items)) return -1;
        *out = items->n ? items->v[items->n - 1] : tv_undef("No last item, sequence was empty.");
        return 0;
    case F_FLOAT: BIND("default"); return do_float(rt, v, a, out);
    case F_INT: BIND("default", "base"); return do_int(rt, v, a, out);
    case F_INDENT: BIND("width", "first", "blank"); return do_indent(rt, v, a, out);
    case F_ITEMS: {
        BIND0();
        tlist_t *l = sits_tmpl_tl_new(rt, 0);
        if (!l) return -1;
        *out = sits_tmpl_tv_list(l, LK_ITER);
        if (v.type == TV_UNDEF) return 0;
        if (v.type != TV_DICT) { l->err = "Can only get item pairs from a mapping."; return 0; }
        for (size_t i = 0; i < v.u.d->n; i++) {
            tlist_t *pr = sits_tmpl_tl_new(rt, 2);
            if (!pr) return -1;
            pr->v[0] = v.u.d->k[i]; pr->v[1] = v.u.d->v[i]; pr->n = 2;
            if (sits_tmpl_tl_push(rt, l, sits_tmpl_tv_list(pr, LK_TUPLE))) return -1;
        }
        return 0;
    }
    case F_JOIN: {
        BIND("d", "attribute");
        tv_t sep = tv_str("", 0);
        if (!NOT_GIVEN(a[0])) { if (soft_str(rt, a[0], &sep)) return -1; }
        if (sits_tmpl_tv_iter(rt, v, &items)) return -1;
        if (!NOT_GIVEN(a[1]) && a[1].type != TV_NONE) {
            tlist_t *m = sits_tmpl_tl_new(rt, items->n);
            if (!m) return -1;
            for (size_t i = 0; i < items->n; i++) if (attr_path(rt, items->v[i], a[1], NULL, &m->v[m->n++])) return -1;
            items = m;
        }
        return str_concat_list(rt, items, sep, 0, out);
    }
    case F_LIST: {
        tlist_t *l;
        BIND0();
        if (copy_items(rt, v, &l)) return -1;
        *out = sits_tmpl_tv_list(l, LK_LIST);
        return 0;
    }
    case F_LOWER: BIND0(); if (soft_str(rt, v, &s) || str_map(rt, s, 0, cp_lower, out)) return -1;
        out->kind = s.kind;
        return 0;
    case F_UPPER: BIND0(); if (soft_str(rt, v, &s) || str_map(rt, s, 0, cp_upper, out)) return -1;
        out->kind = s.kind;
        return 0;
    case F_TITLE: BIND0(); return soft_str(rt, v, &s) || str_map(rt, s, 3, NULL, out);
    case F_MAP: {
        tlist_t *res = sits_tmpl_tl_new(rt, 0);
        if (!res) return -1;
        *out = sits_tmpl_tv_list(res, LK_ITER);
        if (!sits_tmpl_tv_truthy(v)) return 0;   /* sync_do_map: "if value:" before iterating */
        int g = gen_source(rt, v, &items, out);
        if (g) return g < 0 ? -1 : 0;
        if (npos == 0) {
            tv_t attr = tv_undef(NULL), def = tv_none();
            int has_def = 0;
            for (int k = 0; k < nkw; k++) {
                if (!strcmp(kwn[k], "attribute")) attr = kwv[k];
                else if (!strcmp(kwn[k], "default")) { def = kwv[k]; has_def = def.type != TV_NONE; }
                else return sits_tmpl_fail(rt, SITS_ERR_INVALID, "Unexpected keyword argument '%s'", kwn[k]);
            }
            if (attr.type == TV_UNDEF) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "map requires a filter argument");
            for (size_t i = 0; i < items->n; i++) {
                tv_t x;
                if (attr_path(rt, items->v[i], attr, has_def ? &def : NULL, &x)) return -1;
                if (sits_tmpl_tl_push(rt, res, x)) return -1;
            }
            return 0;
        }
        if (pos[0].type != TV_STR) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "map: filter name must be a string");
        int fid = sits_tmpl_filter_lookup(pos[0].u.s.p, pos[0].u.s.n);
        if (fid < 0) return sits_tmpl_fail(rt, fid == -1 ? SITS_ERR_UNSUPPORTED : SITS_ERR_INVALID, "No filter named '%.*s'",
                                      (int)pos[0].u.s.n, pos[0].u.s.p);
        for (size_t i = 0; i < items->n; i++) {
            tv_t x;
            if (sits_tmpl_apply_filter(rt, fid, items->v[i], pos + 1, npos - 1, kwn, kwv, nkw, &x) ||
                sits_tmpl_tl_push(rt, res, x))
                return -1;
        }
        return 0;
    }
    case F_MAX: case F_MIN:
        BIND("case_sensitive", "attribute");
        return minmax(rt, v, a, id == F_MAX, out);
    case F_REJECT: return select_filter(rt, v, pos, npos, kwn, kwv, nkw, 0, 0, out);
    case F_SELECT: return select_filter(rt, v, pos, npos, kwn, kwv, nkw, 0, 1, out);
    case F_REJECTATTR: return select_filter(rt, v, pos, npos, kwn, kwv, nkw, 1, 0, out);
    case F_SELECTATTR: return select_filter(rt, v, pos, npos, kwn, kwv, nkw, 1, 1, out);
    case F_REPLACE: {
        int64_t cnt = -1;
        tv_t o, nw;
        BIND("old", "new", "count");
        if (soft_str(rt, v, &s) || soft_str(rt, a[0], &o) || soft_str(rt, a[1], &nw)) return -1;
        if (!NOT_GIVEN(a[2]) && a[2].type != TV_NONE && want_int(rt, a[2], "replace", &cnt)) return -1;
        return str_replace(rt, s, o, nw, cnt, out);
    }
    case F_REVERSE: {
        BIND0();
        if (v.type == TV_STR) {
            tlist_t *ch;
            if (sits_tmpl_tv_iter(rt, v, &ch)) return -1;
            char *p = sits_tmpl_rt_alloc(rt, v.u.s.n + 1);
            size_t k = 0;
            if (!p) return -1;
            for (size_t i = ch->n; i-- > 0;) { memcpy(p + k, ch->v[i].u.s.p, ch->v[i].u.s.n); k += ch->v[i].u.s.n; }
            *out = tv_str(p, k);
            return 0;
        }
        if (sits_tmpl_tv_iter(rt, v, &items)) return -1;
        tlist_t *l = sits_tmpl_tl_new(rt, items->n);
        if (!l) return -1;
        for (size_t i = items->n; i-- > 0;) l->v[l->n++] = items->v[i];
        /* reversed() of a sequence is an iterator; a generator becomes a reversed list */
        *out = sits_tmpl_tv_list(l, v.type == TV_LIST && v.kind == LK_ITER ? LK_LIST : LK_ITER);
        return 0;
    }
    case F_ROUND: BIND("precision", "method"); return do_round(rt, v, a, out);
    case F_SAFE: BIND0(); if (soft_str(rt, v, out)) return -1; out->kind = 1; return 0;
    case F_SORT: case F_UNIQUE: {
        if (id == F_SORT) BIND("reverse", "case_sensitive", "attribute");
        else BIND("case_sensitive", "attribute");
        tv_t cs_v = id == F_SORT ? a[1] : a[0], attr = id == F_SORT ? a[2] : a[1];
        int cs = !NOT_GIVEN(cs_v) && sits_tmpl_tv_truthy(cs_v);
        tlist_t *l;
        if (id == F_UNIQUE) {
            int g = gen_source(rt, v, &l, out);
            if (g) return g < 0 ? -1 : 0;
        }
        if (copy_items(rt, v, &l)) return -1;
        tv_t *keys = sits_tmpl_rt_alloc(rt, (l->n ? l->n : 1) * sizeof(tv_t));
        if (!keys) return -1;
        for (size_t i = 0; i < l->n; i++) {
            keys[i] = l->v[i];
            if (!NOT_GIVEN(attr) && attr.type != TV_NONE) {
                if (attr.type == TV_STR && memchr(attr.u.s.p, ',', attr.u.s.n))
                    return sits_tmpl_fail(rt, SITS_ERR_UNSUPPORTED, "sorting by several attributes is not supported");
                if (attr_path(rt, l->v[i], attr, NULL, &keys[i])) return -1;
            }
            if (!cs) keys[i] = lower_key(rt, keys[i]);
        }
        if (id == F_SORT) {
            if (sort_values(rt, l->v, keys, l->n, !NOT_GIVEN(a[0]) && sits_tmpl_tv_truthy(a[0]))) return -1;
            *out = sits_tmpl_tv_list(l, LK_LIST);
            return 0;
        }
        tlist_t *u = sits_tmpl_tl_new(rt, 0), *seen = sits_tmpl_tl_new(rt, 0);
        if (!u || !seen) return -1;
        for (size_t i = 0; i < l->n; i++) {
            int dup = 0;
            if ((keys[i].type == TV_LIST && keys[i].kind != LK_TUPLE && keys[i].kind != LK_ITER) ||
                keys[i].type == TV_DICT) {
                /* the generator fails when consumed */
                tlist_t *g = sits_tmpl_tl_new(rt, 0);
                if (!g) return -1;
                g->err = keys[i].type == TV_DICT ? "unhashable type: 'dict'" : "unhashable type: 'list'";
                *out = sits_tmpl_tv_list(g, LK_ITER);
                return 0;
            }
            for (size_t j = 0; j < seen->n && !dup; j++) dup = sits_tmpl_tv_eq(seen->v[j], keys[i]);
            if (!dup && (sits_tmpl_tl_push(rt, seen, keys[i]) || sits_tmpl_tl_push(rt, u, l->v[i]))) return -1;
        }
        *out = sits_tmpl_tv_list(u, LK_ITER);
        return 0;
    }
    case F_STRING: BIND0(); return soft_str(rt, v, out);
    case F_SUM: {
        BIND("attribute", "start");
        tv_t acc = NOT_GIVEN(a[1]) ? tv_int(0) : a[1];
        if (sits_tmpl_tv_iter(rt, v, &items)) return -1;
        for (size_t i = 0; i < items->n; i++) {
            tv_t x = items->v[i];
            if (!NOT_GIVEN(a[0]) && a[0].type != TV_NONE && attr_path(rt, x, a[0], NULL, &x)) return -1;
            if ((acc.type == TV_INT || acc.type == TV_BOOL) && (x.type == TV_INT || x.type == TV_BOOL)) {
                int64_t r;
                if (__builtin_add_overflow(acc.u.i, x.u.i, &r)) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "integer overflow");
                acc = tv_int(r);
            } else if ((acc.type == TV_INT || acc.type == TV_BOOL || acc.type == TV_FLOAT) &&
                       (x.type == TV_INT || x.type == TV_BOOL || x.type == TV_FLOAT)) {
                acc = tv_float((acc.type == TV_FLOAT ? acc.u.f : (double)acc.u.i) + (x.type == TV_FLOAT ? x.u.f : (double)x.u.i));
            } else {
                return sits_tmpl_fail(rt, SITS_ERR_INVALID, "unsupported operand type(s) for +: '%s' and '%s'",
                                 sits_tmpl_type_name(acc), sits_tmpl_type_name(x));
            }
        }
        *out = acc;
        return 0;
    }
    case F_TOJSON: BIND("ensure_ascii", "indent", "separators", "sort_keys"); return do_tojson(rt, v, a, out);
    case F_TRIM:
        BIND("chars");
        if (soft_str(rt, v, &s)) return -1;
        if (!NOT_GIVEN(a[0]) && a[0].type != TV_NONE && want_str(rt, a[0], "trim")) return -1;
        *out = str_strip(s, a[0], 3);
        out->kind = s.kind;
        return 0;
    case F_TRUNCATE: BIND("length", "killwords", "end", "leeway"); return do_truncate(rt, v, a, out);
    case F_WORDCOUNT: {
        BIND0();
        if (soft_str(rt, v, &s)) return -1;
        int64_t c = 0;
        int in = 0;
        size_t i = 0;
        while (i < s.u.s.n) {
            uint32_t cp;
            sits_tmpl_u8_decode(s.u.s.p, s.u.s.n, &i, &cp);
            utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)cp);
            int w = cp == '_' || (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
                    (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO) || k == UTF8PROC_CATEGORY_MN ||
                    k == UTF8PROC_CATEGORY_MC;
            if (w && !in) c++;
            in = w;
        }
        *out = tv_int(c);
        return 0;
    }
    }
#undef BIND
#undef BIND0
    return sits_tmpl_fail(rt, SITS_ERR_INTERNAL, "filter %d missing", id);
}

/* ---- tests ---- */
int sits_tmpl_apply_test(trt_t *rt, int id, tv_t v, tv_t *pos, int npos, tv_t *out)
{
    int res = 0, c;
    int need = (id == T_EQ || id == T_NE || id == T_LT || id == T_LE || id == T_GT || id == T_GE || id == T_IN ||
                id == T_DIVISIBLEBY || id == T_SAMEAS) ? 1 : 0;
    if (npos != need) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "test takes %d argument(s), %d given", need, npos);
    switch (id) {
    case T_DEFINED: res = v.type != TV_UNDEF; break;
    case T_UNDEFINED: res = v.type == TV_UNDEF; break;
    case T_NONE: res = v.type == TV_NONE; break;
    case T_STRING_: res = v.type == TV_STR; break;
    case T_NUMBER: res = v.type == TV_INT || v.type == TV_FLOAT || v.type == TV_BOOL; break;
    case T_INTEGER: res = v.type == TV_INT; break;
    case T_FLOAT_: res = v.type == TV_FLOAT; break;
    case T_MAPPING: res = v.type == TV_DICT; break;
    case T_ITERABLE: res = v.type == TV_STR || v.type == TV_LIST || v.type == TV_DICT || v.type == TV_UNDEF || v.type == TV_LOOP; break;
    case T_SEQUENCE: res = v.type == TV_STR || v.type == TV_DICT || (v.type == TV_LIST && (v.kind == LK_LIST || v.kind == LK_TUPLE)); break;
    case T_BOOLEAN: res = v.type == TV_BOOL; break;
    case T_TRUE: res = v.type == TV_BOOL && v.u.i; break;
    case T_FALSE: res = v.type == TV_BOOL && !v.u.i; break;
    case T_CALLABLE: res = v.type == TV_FUNC || v.type == TV_LOOP || v.type == TV_UNDEF; break;
    case T_EQ: res = sits_tmpl_tv_eq(v, pos[0]); break;
    case T_NE: res = !sits_tmpl_tv_eq(v, pos[0]); break;
    case T_LT: case T_LE: case T_GT: case T_GE:
        if (v.type == TV_UNDEF || pos[0].type == TV_UNDEF) return undef_err(rt, v.type == TV_UNDEF ? v : pos[0]);
        if (sits_tmpl_tv_cmp(rt, v, pos[0], &c)) return -1;
        res = id == T_LT ? c < 0 : id == T_LE ? c <= 0 : id == T_GT ? c > 0 : c >= 0;
        break;
    case T_IN: {
        tv_t seq = pos[0];
        if (seq.type == TV_STR) {
            if (v.type != TV_STR) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "'in <string>' requires string as left operand");
            res = mem_find(seq.u.s.p, seq.u.s.n, v.u.s.p, v.u.s.n) != NULL;
        } else if (seq.type == TV_DICT) res = sits_tmpl_td_find(seq.u.d, v) >= 0;
        else if (seq.type == TV_LIST) { for (size_t i = 0; i < seq.u.l->n && !res; i++) res = sits_tmpl_tv_eq(seq.u.l->v[i], v); }
        else if (seq.type != TV_UNDEF) return sits_tmpl_fail(rt, SITS_ERR_INVALID,
            "argument of type '%s' is not iterable", sits_tmpl_type_name(seq));
        break;
    }
    case T_ODD: case T_EVEN: case T_DIVISIBLEBY: {
        if (v.type == TV_UNDEF) return undef_err(rt, v);
        if (v.type == TV_FLOAT || (id == T_DIVISIBLEBY && pos[0].type == TV_FLOAT)) {
            double x = v.type == TV_FLOAT ? v.u.f : (double)v.u.i;
            double d = id == T_DIVISIBLEBY ? (pos[0].type == TV_FLOAT ? pos[0].u.f : (double)pos[0].u.i) : 2.0;
            if (d == 0) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "float modulo");
            double m = fmod(x, d);
            if (m != 0 && ((m < 0) != (d < 0))) m += d;
            res = id == T_ODD ? m == 1.0 : m == 0.0;
            break;
        }
        if (v.type != TV_INT && v.type != TV_BOOL) return sits_tmpl_fail(rt, SITS_ERR_INVALID,
            "a number is required, got '%s'", sits_tmpl_type_name(v));
        int64_t d = 2;
        if (id == T_DIVISIBLEBY && want_int(rt, pos[0], "divisibleby", &d)) return -1;
        if (d == 0) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "integer division or modulo by zero");
        int64_t m = d == -1 ? 0 : v.u.i % d;
        res = id == T_ODD ? (m != 0) : m == 0;
        break;
    }
    case T_SAMEAS: {
        tv_t o = pos[0];
        if (v.type != o.type) res = 0;
        else if (v.type == TV_NONE || v.type == TV_UNDEF) res = 1;
        else if (v.type == TV_BOOL) res = v.u.i == o.u.i;
        else if (v.type == TV_INT) res = v.u.i == o.u.i && v.u.i >= -5 && v.u.i <= 256;
        else if (v.type == TV_STR) res = v.u.s.p == o.u.s.p && v.u.s.n == o.u.s.n;
        else if (v.type == TV_FLOAT) res = 0;
        else res = sits_tmpl_tv_eq(v, o) && v.u.l == o.u.l;
        break;
    }
    case T_LOWER: case T_UPPER: {
        tv_t s;
        if (sits_tmpl_tv_to_str(rt, v, &s)) return -1;
        res = str_pred(s, id == T_LOWER ? 4 : 5);
        break;
    }
    case T_ESCAPED: res = 0; break;
    case T_FILTER: res = v.type == TV_STR && sits_tmpl_filter_lookup(v.u.s.p, v.u.s.n) >= 0; break;
    case T_TEST: res = v.type == TV_STR && sits_tmpl_test_lookup(v.u.s.p, v.u.s.n) >= 0; break;
    default: return sits_tmpl_fail(rt, SITS_ERR_INTERNAL, "test %d missing", id);
    }
    *out = tv_bool(res);
    return 0;
}

/* ---- globals ---- */
int sits_tmpl_call_global(trt_t *rt, int id, tv_t *pos, int npos, const char **kwn, tv_t *kwv, int nkw, tv_t *out)
{
    switch (id) {
    case G_RANGE: {
        int64_t a[3] = { 0, 0, 1 };
        if (nkw || npos < 1 || npos > 3) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "range expected 1 to 3 integer arguments");
        for (int i = 0; i < npos; i++) if (want_int(rt, pos[i], "range", &a[npos == 1 ? 1 : i])) return -1;
        if (a[2] == 0) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "range() arg 3 must not be zero");
        double cnt = a[2] > 0 ? ceil(((double)a[1] - (double)a[0]) / (double)a[2]) : ceil(((double)a[0] - (double)a[1]) / (double)-a[2]);
        if (cnt > 100000) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "range too big (the sandbox allows 100000 items)");
        tlist_t *l = sits_tmpl_tl_new(rt, cnt > 0 ? (size_t)cnt : 0);
        if (!l) return -1;
        for (int64_t x = a[0]; a[2] > 0 ? x < a[1] : x > a[1]; x += a[2]) if (sits_tmpl_tl_push(rt, l, tv_int(x))) return -1;
        *out = sits_tmpl_tv_list(l, LK_LIST);
        return 0;
    }
    case G_NAMESPACE: case G_DICT: {
        tdict_t *d = sits_tmpl_td_new(rt, 0);
        if (!d) return -1;
        if (npos > 1) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "expected at most 1 positional argument");
        if (npos == 1) {
            if (pos[0].type == TV_DICT) {
                for (size_t i = 0; i < pos[0].u.d->n; i++) if (sits_tmpl_td_set(rt, d, pos[0].u.d->k[i], pos[0].u.d->v[i])) return -1;
            } else {
                tlist_t *items;
                if (sits_tmpl_tv_iter(rt, pos[0], &items)) return -1;
                for (size_t i = 0; i < items->n; i++) {
                    tlist_t *pr;
                    if (items->v[i].type != TV_LIST || sits_tmpl_tv_iter(rt, items->v[i], &pr) || pr->n != 2)
                        return sits_tmpl_fail(rt, SITS_ERR_INVALID, "dictionary update sequence element has wrong length");
                    if (sits_tmpl_td_set(rt, d, pr->v[0], pr->v[1])) return -1;
                }
            }
        }
        for (int k = 0; k < nkw; k++) if (sits_tmpl_td_set(rt, d, tv_str(kwn[k], strlen(kwn[k])), kwv[k])) return -1;
        if (id == G_NAMESPACE) {
            for (size_t i = 0; i < d->n; i++)
                if (d->k[i].type == TV_STR && d->k[i].u.s.n && d->k[i].u.s.p[0] == '_')
                    return sits_tmpl_fail(rt, SITS_ERR_INVALID,
                        "SecurityError: chat templates cannot store underscore-prefixed attributes on a namespace");
            tv_t v = { .type = TV_NS };
            v.u.d = d;
            *out = v;
        } else *out = sits_tmpl_tv_dict(d);
        return 0;
    }
    case G_RAISE: {
        tv_t m = npos ? pos[0] : tv_str("", 0), s;
        if (npos != 1 || nkw) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "raise_exception() takes exactly one argument");
        if (sits_tmpl_tv_to_str(rt, m, &s)) return -1;
        if (rt->st == SITS_OK) {
            rt->st = SITS_ERR_INVALID;
            if (rt->err) {
                size_t n = s.u.s.n < sizeof(rt->err->msg) - 1 ? s.u.s.n : sizeof(rt->err->msg) - 1;
                memcpy(rt->err->msg, s.u.s.p, n);
                rt->err->msg[n] = 0;
                rt->err->line = rt->line;
                rt->err->raised = 1;
            }
        }
        return -1;
    }
    case G_STRFTIME: {
        tv_t fmt;
        if (npos != 1 || nkw || pos[0].type != TV_STR) return sits_tmpl_fail(rt, SITS_ERR_INVALID,
            "strftime_now() takes one format string");
        fmt = pos[0];
        char f[256], buf[1024];
        if (fmt.u.s.n >= sizeof(f) || memchr(fmt.u.s.p, 0, fmt.u.s.n)) return sits_tmpl_fail(rt, SITS_ERR_INVALID,
            "strftime format too long");
        memcpy(f, fmt.u.s.p, fmt.u.s.n);
        f[fmt.u.s.n] = 0;
        struct tm tm;
        time_t now = rt->now;
        if (!localtime_r(&now, &tm)) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "localtime failed");
        size_t n = fmt.u.s.n ? strftime(buf, sizeof(buf), f, &tm) : 0;
        if (fmt.u.s.n && n == 0 && f[0]) return sits_tmpl_fail(rt, SITS_ERR_INVALID, "strftime result empty or too long");
        return sits_tmpl_rt_str_dup(rt, buf, n, out) ? 0 : -1;
    }
    }
    return sits_tmpl_fail(rt, SITS_ERR_INTERNAL, "global %d missing", id);
}
