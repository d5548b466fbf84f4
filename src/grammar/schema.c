/* schema.c -- JSON schema and json_object -> grammar (see grammar.h for the supported subset).
 *
 * Shared rules: ws (nothing or one space), a JSON string character, any JSON value. Each schema node
 * becomes one rule; $ref targets are memoised by their pointer text so recursive schemas terminate.
 * Objects list their properties in schema order: with p_1..p_n, rule R_i^c (c: a property was already
 * written, so a comma comes first) is  [","] ws? P_i R_{i+1}^1  |  R_{i+1}^c (the second only when p_i is
 * optional); R_{n+1}^c is the extra properties (when allowed) or nothing. */
#include "grammar/gram_internal.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define MAX_BOUND 1024   /* minLength / maxLength / minItems / maxItems expand to this many copies at most */

typedef struct {
    gram_builder_t *b;
    json_t *root;
    char *err;
    size_t err_len;
    int failed;
    int r_ws, r_char, r_string, r_value, r_int, r_num;   /* shared rules, made on first use (-1) */
    json_t *refs;      /* ref text -> rule id */
    int depth;
} sc_t;

static void fail(sc_t *c, const char *fmt, ...)
{
    if (c->failed) return;
    c->failed = 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, c->err_len, fmt, ap);
    va_end(ap);
}

static int r_ws(sc_t *c)
{
    if (c->r_ws >= 0) return c->r_ws;
    gram_builder_t *b = c->b;
    int r = gb_rule(b);
    gram_alt_t a = { 0 };
    gb_add_alt(b, r, &a);
    ga_byte(b, &a, ' ');
    gb_add_alt(b, r, &a);
    return c->r_ws = r;
}

/* one character of a JSON string's content: unescaped (valid UTF-8) or an escape */
static int r_char(sc_t *c)
{
    if (c->r_char >= 0) return c->r_char;
    gram_builder_t *b = c->b;
    int r = gb_rule(b);
    gram_alt_t a = { 0 };
    gram_set_t s = { { 0 } };
    gs_add_range(&s, 0x20, 0x7F);
    s.w['"' >> 5] &= ~(1u << ('"' & 31));
    s.w['\\' >> 5] &= ~(1u << ('\\' & 31));
    ga_set(b, &a, &s);
    gb_add_alt(b, r, &a);
    ga_ref(b, &a, gb_utf8_multibyte(b));
    gb_add_alt(b, r, &a);
    gram_set_t esc = { { 0 } };
    for (const char *p = "\"\\/bfnrt"; *p; p++) gs_add_range(&esc, (unsigned char)*p, (unsigned char)*p);
    ga_byte(b, &a, '\\');
    ga_set(b, &a, &esc);
    gb_add_alt(b, r, &a);
    gram_set_t hex = { { 0 } };
    gs_add_range(&hex, '0', '9');
    gs_add_range(&hex, 'a', 'f');
    gs_add_range(&hex, 'A', 'F');
    ga_lit(b, &a, "\\u", 2);
    for (int i = 0; i < 4; i++) ga_set(b, &a, &hex);
    gb_add_alt(b, r, &a);
    return c->r_char = r;
}

static int string_rule(sc_t *c, int lo, int hi)
{
    gram_builder_t *b = c->b;
    int r = gb_rule(b);
    gram_alt_t a = { 0 };
    ga_byte(b, &a, '"');
    ga_ref(b, &a, gb_repeat(b, r_char(c), lo, hi));
    ga_byte(b, &a, '"');
    gb_add_alt(b, r, &a);
    return r;
}

static int r_string(sc_t *c)
{
    if (c->r_string < 0) c->r_string = string_rule(c, 0, -1);
    return c->r_string;
}

static int r_int(sc_t *c)
{
    if (c->r_int >= 0) return c->r_int;
    gram_builder_t *b = c->b;
    gram_set_t d = { { 0 } }, d19 = { { 0 } };
    gs_add_range(&d, '0', '9');
    gs_add_range(&d19, '1', '9');
    int digit = gb_rule(b);
    gram_alt_t a = { 0 };
    ga_set(b, &a, &d);
    gb_add_alt(b, digit, &a);
    int mag = gb_rule(b);
    ga_byte(b, &a, '0');
    gb_add_alt(b, mag, &a);
    ga_set(b, &a, &d19);
    ga_ref(b, &a, gb_repeat(b, digit, 0, -1));
    gb_add_alt(b, mag, &a);
    int r = gb_rule(b);
    ga_ref(b, &a, mag);
    gb_add_alt(b, r, &a);
    ga_byte(b, &a, '-');
    ga_ref(b, &a, mag);
    gb_add_alt(b, r, &a);
    return c->r_int = r;
}

static int r_num(sc_t *c)
{
    if (c->r_num >= 0) return c->r_num;
    gram_builder_t *b = c->b;
    gram_set_t d = { { 0 } }, e = { { 0 } }, sg = { { 0 } };
    gs_add_range(&d, '0', '9');
    gs_add_range(&e, 'e', 'e');
    gs_add_range(&e, 'E', 'E');
    gs_add_range(&sg, '+', '+');
    gs_add_range(&sg, '-', '-');
    int digit = gb_rule(b);
    gram_alt_t a = { 0 };
    ga_set(b, &a, &d);
    gb_add_alt(b, digit, &a);
    int digits = gb_repeat(b, digit, 1, -1);
    int frac = gb_rule(b);
    gb_add_alt(b, frac, &a);
    ga_byte(b, &a, '.');
    ga_ref(b, &a, digits);
    gb_add_alt(b, frac, &a);
    int sign = gb_rule(b);
    gb_add_alt(b, sign, &a);
    ga_set(b, &a, &sg);
    gb_add_alt(b, sign, &a);
    int exp = gb_rule(b);
    gb_add_alt(b, exp, &a);
    ga_set(b, &a, &e);
    ga_ref(b, &a, sign);
    ga_ref(b, &a, digits);
    gb_add_alt(b, exp, &a);
    int r = gb_rule(b);
    ga_ref(b, &a, r_int(c));
    ga_ref(b, &a, frac);
    ga_ref(b, &a, exp);
    gb_add_alt(b, r, &a);
    return c->r_num = r;
}

/* "[" ws? (item ("," ws? item)*)? "]" with lo..hi items (hi < 0: unbounded) */
static int array_of(sc_t *c, int item, int lo, int hi)
{
    gram_builder_t *b = c->b;
    gram_alt_t a = { 0 };
    int more = gb_rule(b);     /* "," ws item */
    ga_byte(b, &a, ',');
    ga_ref(b, &a, r_ws(c));
    ga_ref(b, &a, item);
    gb_add_alt(b, more, &a);
    int r = gb_rule(b);
    if (lo == 0) {
        ga_lit(b, &a, "[]", 2);
        gb_add_alt(b, r, &a);
    }
    if (hi != 0) {
        ga_byte(b, &a, '[');
        ga_ref(b, &a, item);
        ga_ref(b, &a, gb_repeat(b, more, lo > 0 ? lo - 1 : 0, hi < 0 ? -1 : hi - 1));
        ga_byte(b, &a, ']');
        gb_add_alt(b, r, &a);
    }
    return r;
}

/* "{" (string ":" ws value ("," ws string ":" ws value)*)? "}" */
/* *kv_p ::= string ":" ws value; *more_p ::= "," ws kv */
static void pair_rules(sc_t *c, int value, int *kv_p, int *more_p)
{
    gram_builder_t *b = c->b;
    gram_alt_t a = { 0 };
    int kv = gb_rule(b);
    ga_ref(b, &a, r_string(c));
    ga_byte(b, &a, ':');
    ga_ref(b, &a, r_ws(c));
    ga_ref(b, &a, value);
    gb_add_alt(b, kv, &a);
    int more = gb_rule(b);
    ga_byte(b, &a, ',');
    ga_ref(b, &a, r_ws(c));
    ga_ref(b, &a, kv);
    gb_add_alt(b, more, &a);
    *kv_p = kv;
    *more_p = more;
}

static int object_any(sc_t *c, int value)
{
    gram_builder_t *b = c->b;
    gram_alt_t a = { 0 };
    int kv, more;
    pair_rules(c, value, &kv, &more);
    int r = gb_rule(b);
    ga_lit(b, &a, "{}", 2);
    gb_add_alt(b, r, &a);
    ga_byte(b, &a, '{');
    ga_ref(b, &a, kv);
    ga_ref(b, &a, gb_repeat(b, more, 0, -1));
    ga_byte(b, &a, '}');
    gb_add_alt(b, r, &a);
    return r;
}

static int r_value(sc_t *c)
{
    if (c->r_value >= 0) return c->r_value;
    gram_builder_t *b = c->b;
    int r = c->r_value = gb_rule(b);
    gram_alt_t a = { 0 };
    static const char *const lits[] = { "true", "false", "null" };
    for (int i = 0; i < 3; i++) {
        ga_lit(b, &a, lits[i], strlen(lits[i]));
        gb_add_alt(b, r, &a);
    }
    ga_ref(b, &a, r_num(c));
    gb_add_alt(b, r, &a);
    ga_ref(b, &a, r_string(c));
    gb_add_alt(b, r, &a);
    ga_ref(b, &a, array_of(c, r, 0, -1));
    gb_add_alt(b, r, &a);
    ga_ref(b, &a, object_any(c, r));
    gb_add_alt(b, r, &a);
    return r;
}

/* the compact serialisation of a JSON value as a literal rule */
static int literal_value(sc_t *c, json_t *v)
{
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!s) {
        fail(c, "out of memory");
        return 0;
    }
    int r = gb_lit_rule(c->b, s, strlen(s));
    free(s);
    return r;
}

static int compile(sc_t *c, json_t *s, const char *where);

static int get_bound(sc_t *c, json_t *s, const char *key, int dflt)
{
    json_t *v = json_object_get(s, key);
    if (!v) return dflt;
    if (!json_is_integer(v) || json_integer_value(v) < 0) {
        fail(c, "'%s' must be a non-negative integer", key);
        return dflt;
    }
    if (json_integer_value(v) > MAX_BOUND) {
        if (strncmp(key, "max", 3) == 0) return dflt;   /* a large maximum is as good as none */
        fail(c, "'%s' above %d is not supported", key, MAX_BOUND);
        return dflt;
    }
    return (int)json_integer_value(v);
}


static int compile_string(sc_t *c, json_t *s)
{
    json_t *pat = json_object_get(s, "pattern");
    if (json_object_get(s, "format")) {
        fail(c, "unsupported keyword 'format'");
        return 0;
    }
    if (pat) {
        if (!json_is_string(pat)) {
            fail(c, "'pattern' must be a string");
            return 0;
        }
        if (json_object_get(s, "minLength") || json_object_get(s, "maxLength")) {
            fail(c, "unsupported keyword 'minLength'/'maxLength' together with 'pattern'");
            return 0;
        }
        /* the pattern matches the string's content, written without escapes (see regex.c) */
        char err[200];
        int inner = sits_grammar_regex_rule(c->b, json_string_value(pat), json_string_length(pat), err, sizeof err, 1);
        if (inner < 0) {
            fail(c, "'pattern': %s", err);
            return 0;
        }
        int r = gb_rule(c->b);
        gram_alt_t a = { 0 };
        ga_byte(c->b, &a, '"');
        ga_ref(c->b, &a, inner);
        ga_byte(c->b, &a, '"');
        gb_add_alt(c->b, r, &a);
        return r;
    }
    int lo = get_bound(c, s, "minLength", 0), hi = get_bound(c, s, "maxLength", -1);
    if (hi >= 0 && hi < lo) {
        fail(c, "'maxLength' is below 'minLength'");
        return 0;
    }
    if (lo == 0 && hi < 0) return r_string(c);
    return string_rule(c, lo, hi);
}

static int compile_array(sc_t *c, json_t *s, const char *where)
{
    if (json_object_get(s, "uniqueItems") && json_is_true(json_object_get(s, "uniqueItems"))) {
        fail(c, "unsupported keyword 'uniqueItems'");
        return 0;
    }
    if (json_object_get(s, "contains")) {
        fail(c, "unsupported keyword 'contains'");
        return 0;
    }
    json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    int lo = get_bound(c, s, "minItems", 0), hi = get_bound(c, s, "maxItems", -1);
    if (prefix) {
        if (!json_is_array(prefix)) {
            fail(c, "'prefixItems' must be an array");
            return 0;
        }
        if (json_array_size(prefix) == 0 || lo > 0 || hi >= 0 || (items && !json_is_false(items))) {
            fail(c, "unsupported keyword 'prefixItems' (only a fixed tuple: without minItems/maxItems, items false or absent)");
            return 0;
        }
        gram_builder_t *b = c->b;
        gram_alt_t a = { 0 };
        ga_byte(b, &a, '[');
        for (size_t i = 0; i < json_array_size(prefix); i++) {
            if (i) {
                ga_byte(b, &a, ',');
                ga_ref(b, &a, r_ws(c));
            }
            ga_ref(b, &a, compile(c, json_array_get(prefix, i), "prefixItems"));
        }
        ga_byte(b, &a, ']');
        int r = gb_rule(b);
        gb_add_alt(b, r, &a);
        return r;
    }
    if (hi >= 0 && hi < lo) {
        fail(c, "'maxItems' is below 'minItems'");
        return 0;
    }
    int item = items && !json_is_true(items) ? compile(c, items, "items") : r_value(c);
    (void)where;
    return array_of(c, item, lo, hi);
}

static int compile_object(sc_t *c, json_t *s)
{
    gram_builder_t *b = c->b;
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *addl = json_object_get(s, "additionalProperties");
    for (const char *k = "patternProperties"; k; k = NULL)
        if (json_object_get(s, k)) { fail(c, "unsupported keyword '%s'", k); return 0; }
    if (json_object_get(s, "minProperties") || json_object_get(s, "maxProperties")) {
        fail(c, "unsupported keyword '%s'", json_object_get(s, "minProperties") ? "minProperties" : "maxProperties");
        return 0;
    }
    if (props && !json_is_object(props)) { fail(c, "'properties' must be an object"); return 0; }
    if (req && !json_is_array(req)) { fail(c, "'required' must be an array"); return 0; }
    if (!props || json_object_size(props) == 0) {
        if (req && json_array_size(req) > 0) { fail(c, "'required' names properties that 'properties' does not define"); return 0; }
        if (addl && json_is_false(addl)) return gb_lit_rule(b, "{}", 2);
        return object_any(c, addl && json_is_object(addl) ? compile(c, addl, "additionalProperties") : r_value(c));
    }
    size_t n = json_object_size(props);
    /* properties in schema order (jansson keeps insertion order) */
    const char **keys = calloc(n, sizeof *keys);
    json_t **vals = calloc(n, sizeof *vals);
    int *required = calloc(n, sizeof *required);
    if (!keys || !vals || !required) {
        free(keys); free(vals); free(required);
        fail(c, "out of memory");
        return 0;
    }
    size_t i = 0;
    const char *key;
    json_t *val;
    json_object_foreach(props, key, val) { keys[i] = key; vals[i] = val; i++; }
    for (size_t k = 0; req && k < json_array_size(req); k++) {
        json_t *r = json_array_get(req, k);
        size_t j = 0;
        if (!json_is_string(r)) { fail(c, "'required' entries must be strings"); break; }
        for (; j < n; j++) if (strcmp(keys[j], json_string_value(r)) == 0) break;
        if (j == n) { fail(c, "'required' names '%.64s', which 'properties' does not define", json_string_value(r)); break; }
        required[j] = 1;
    }
    /* tail rules R_{n+1}^0 and R_{n+1}^1: extra properties after the listed ones, or nothing */
    int next[2];
    gram_alt_t a = { 0 };
    int extra = addl && !json_is_false(addl);
    int extra_val = extra ? (json_is_object(addl) ? compile(c, addl, "additionalProperties") : r_value(c)) : -1;
    for (int cm = 0; cm < 2; cm++) {
        next[cm] = gb_rule(b);
        if (extra) {    /* ([","] ws string ":" ws value)* with the comma when something came before */
            int kv, more;
            pair_rules(c, extra_val, &kv, &more);
            if (cm) {
                ga_ref(b, &a, gb_repeat(b, more, 0, -1));
            } else {
                int some = gb_rule(b), tail = gb_rule(b);
                ga_ref(b, &a, kv);
                ga_ref(b, &a, gb_repeat(b, more, 0, -1));
                gb_add_alt(b, some, &a);
                gb_add_alt(b, tail, &a);
                ga_ref(b, &a, some);
                gb_add_alt(b, tail, &a);
                ga_ref(b, &a, tail);
            }
        }
        gb_add_alt(b, next[cm], &a);
    }
    for (size_t k = n; k-- > 0 && !c->failed;) {
        int vr = compile(c, vals[k], "properties");
        char *lit = NULL;
        json_t *ks = json_string(keys[k]);
        if (ks) lit = json_dumps(ks, JSON_ENCODE_ANY | JSON_COMPACT);
        json_decref(ks);
        if (!lit) { fail(c, "out of memory"); break; }
        int cur[2];
        for (int cm = 0; cm < 2; cm++) {
            cur[cm] = gb_rule(b);
            if (cm) {
                ga_byte(b, &a, ',');
                ga_ref(b, &a, r_ws(c));
            }
            ga_lit(b, &a, lit, strlen(lit));
            ga_byte(b, &a, ':');
            ga_ref(b, &a, r_ws(c));
            ga_ref(b, &a, vr);
            ga_ref(b, &a, next[1]);
            gb_add_alt(b, cur[cm], &a);
            if (!required[k]) {
                ga_ref(b, &a, next[cm]);
                gb_add_alt(b, cur[cm], &a);
            }
        }
        free(lit);
        next[0] = cur[0];
        next[1] = cur[1];
    }
    free(keys);
    free(vals);
    free(required);
    int r = gb_rule(b);
    ga_byte(b, &a, '{');
    ga_ref(b, &a, next[0]);
    ga_byte(b, &a, '}');
    gb_add_alt(b, r, &a);
    return r;
}

static int compile_type(sc_t *c, json_t *s, const char *t, const char *where)
{
    if (strcmp(t, "string") == 0) return compile_string(c, s);
    if (strcmp(t, "integer") == 0 || strcmp(t, "number") == 0) {
        static const char *const bounds[] = { "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf" };
        for (int i = 0; i < 5; i++)
            if (json_object_get(s, bounds[i])) { fail(c, "unsupported keyword '%s'", bounds[i]); return 0; }
        return t[0] == 'i' ? r_int(c) : r_num(c);
    }
    if (strcmp(t, "boolean") == 0) {
        int r = gb_rule(c->b);
        gram_alt_t a = { 0 };
        ga_lit(c->b, &a, "true", 4);
        gb_add_alt(c->b, r, &a);
        ga_lit(c->b, &a, "false", 5);
        gb_add_alt(c->b, r, &a);
        return r;
    }
    if (strcmp(t, "null") == 0) return gb_lit_rule(c->b, "null", 4);
    if (strcmp(t, "array") == 0) return compile_array(c, s, where);
    if (strcmp(t, "object") == 0) return compile_object(c, s);
    fail(c, "unknown type '%.32s'", t);
    return 0;
}

static const char *const known[] = {
    "type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems", "maxItems", "enum",
    "const", "anyOf", "oneOf", "allOf", "$ref", "minLength", "maxLength", "pattern", "title", "description", "default",
    "examples", "$schema", "$id", "$comment", "strict", "$defs", "definitions", "uniqueItems", "contains", "format",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "patternProperties", "minProperties",
    "maxProperties", NULL
};

static int compile_ref(sc_t *c, const char *ref)
{
    json_t *have = json_object_get(c->refs, ref);
    if (have) return (int)json_integer_value(have);
    if (strncmp(ref, "#/", 2) != 0) {
        fail(c, "unsupported keyword '$ref' to '%.64s' (only #/$defs/... and #/definitions/...)", ref);
        return 0;
    }
    json_t *t = c->root;
    char part[256];
    for (const char *p = ref + 2; *p && t;) {
        size_t n = strcspn(p, "/");
        if (n >= sizeof part) { t = NULL; break; }
        /* JSON pointer escapes ~1 -> /, ~0 -> ~ */
        size_t o = 0;
        for (size_t k = 0; k < n; k++) {
            if (p[k] == '~' && k + 1 < n && (p[k + 1] == '0' || p[k + 1] == '1')) { part[o++] = p[k + 1] == '0' ? '~' : '/'; k++; }
            else part[o++] = p[k];
        }
        part[o] = 0;
        t = json_object_get(t, part);
        p += n;
        if (*p == '/') p++;
    }
    if (!t) {
        fail(c, "'$ref' '%.64s' does not resolve", ref);
        return 0;
    }
    /* a rule made before compiling the target, so that recursion refers to it */
    int r = gb_rule(c->b);
    json_object_set_new(c->refs, ref, json_integer(r));
    int body = compile(c, t, "$ref");
    gram_alt_t a = { 0 };
    ga_ref(c->b, &a, body);
    gb_add_alt(c->b, r, &a);
    return r;
}

static int compile(sc_t *c, json_t *s, const char *where)
{
    if (c->failed) return 0;
    if (++c->depth > 64) {
        fail(c, "the schema nests deeper than 64 levels");
        return 0;
    }
    int r = 0;
    if (json_is_true(s)) { r = r_value(c); goto out; }
    if (!json_is_object(s)) {
        fail(c, "'%s' must hold a schema (an object or true)", where);
        goto out;
    }
    const char *key;
    json_t *val;
    json_object_foreach(s, key, val) {
        int ok = 0;
        for (int i = 0; known[i]; i++) if (strcmp(key, known[i]) == 0) ok = 1;
        if (!ok) { fail(c, "unsupported keyword '%.64s'", key); goto out; }
    }
    json_t *ref = json_object_get(s, "$ref"), *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    json_t *any = json_object_get(s, "anyOf"), *one = json_object_get(s, "oneOf"), *all = json_object_get(s, "allOf");
    json_t *type = json_object_get(s, "type");
    if (ref) {
        if (!json_is_string(ref)) { fail(c, "'$ref' must be a string"); goto out; }
        r = compile_ref(c, json_string_value(ref));
        goto out;
    }
    if (cn) { r = literal_value(c, cn); goto out; }
    if (en) {
        if (!json_is_array(en) || json_array_size(en) == 0) { fail(c, "'enum' must be a non-empty array"); goto out; }
        r = gb_rule(c->b);
        for (size_t i = 0; i < json_array_size(en); i++) {
            gram_alt_t a = { 0 };
            ga_ref(c->b, &a, literal_value(c, json_array_get(en, i)));
            gb_add_alt(c->b, r, &a);
        }
        goto out;
    }
    if (all) {
        if (!json_is_array(all) || json_array_size(all) != 1) { fail(c, "unsupported keyword 'allOf' (only one schema)"); goto out; }
        r = compile(c, json_array_get(all, 0), "allOf");
        goto out;
    }
    json_t *alts = any ? any : one;
    if (alts) {
        if (!json_is_array(alts) || json_array_size(alts) == 0) { fail(c, "'%s' must be a non-empty array", any ? "anyOf" : "oneOf"); goto out; }
        r = gb_rule(c->b);
        for (size_t i = 0; i < json_array_size(alts); i++) {
            gram_alt_t a = { 0 };
            ga_ref(c->b, &a, compile(c, json_array_get(alts, i), any ? "anyOf" : "oneOf"));
            gb_add_alt(c->b, r, &a);
        }
        goto out;
    }
    if (!type) {
        /* infer from the keywords present, else any value */
        if (json_object_get(s, "properties")) r = compile_object(c, s);
        else if (json_object_get(s, "items") || json_object_get(s, "prefixItems")) r = compile_array(c, s, where);
        else r = r_value(c);
        goto out;
    }
    if (json_is_string(type)) { r = compile_type(c, s, json_string_value(type), where); goto out; }
    if (json_is_array(type) && json_array_size(type) > 0) {
        r = gb_rule(c->b);
        for (size_t i = 0; i < json_array_size(type); i++) {
            json_t *t = json_array_get(type, i);
            if (!json_is_string(t)) { fail(c, "'type' entries must be strings"); goto out; }
            gram_alt_t a = { 0 };
            ga_ref(c->b, &a, compile_type(c, s, json_string_value(t), where));
            gb_add_alt(c->b, r, &a);
        }
        goto out;
    }
    fail(c, "'type' must be a string or a non-empty array of strings");
out:
    c->depth--;
    return r;
}

static sits_status_t finish_with_start(gram_builder_t *b, int start_slot, int body, sits_grammar_t **g_p)
{
    gram_alt_t a = { 0 };
    ga_ref(b, &a, body);
    gb_add_alt(b, start_slot, &a);
    sits_status_t st = gb_finish(b, g_p);
    gb_free(b);
    return st;
}

sits_status_t sits_grammar_from_json_schema(const char *schema, size_t len, char *err, size_t err_len, sits_grammar_t **g_p)
{
    sits_grammar_frame_t plain = { "", "", "", "", "", 1 };
    return sits_grammar_from_json_schema_framed(schema, len, &plain, err, err_len, g_p);
}

sits_status_t sits_grammar_from_json_schema_framed(const char *schema, size_t len, const sits_grammar_frame_t *fr, char *err,
                                                   size_t err_len, sits_grammar_t **g_p)
{
    json_error_t jerr;
    json_t *root = json_loadb(schema, len, JSON_DECODE_ANY, &jerr);
    if (!root) {
        snprintf(err, err_len, "the schema is not valid JSON: %s", jerr.text);
        return SITS_ERR_INVALID;
    }
    gram_builder_t b;
    gb_init(&b);
    sc_t c = { .b = &b, .root = root, .err = err, .err_len = err_len, .r_ws = -1, .r_char = -1, .r_string = -1,
               .r_value = -1, .r_int = -1, .r_num = -1, .refs = json_object() };
    int start = gb_rule(&b);   /* rule 0 */
    int body = compile(&c, root, "schema");
    json_decref(c.refs);
    json_decref(root);
    if (c.failed) {
        gb_free(&b);
        return SITS_ERR_INVALID;
    }
    if (fr->before[0] || fr->item_open[0] || fr->item_close[0] || fr->after[0] || fr->max_items != 1) {
        /* framed := before item (sep item){0, max - 1} after; item := item_open body item_close */
        gram_alt_t a = { 0 };
        int item = gb_rule(&b);
        ga_lit(&b, &a, fr->item_open, strlen(fr->item_open));
        ga_ref(&b, &a, body);
        ga_lit(&b, &a, fr->item_close, strlen(fr->item_close));
        gb_add_alt(&b, item, &a);
        int more = gb_rule(&b);
        ga_lit(&b, &a, fr->sep, strlen(fr->sep));
        ga_ref(&b, &a, item);
        gb_add_alt(&b, more, &a);
        int framed = gb_rule(&b);
        ga_lit(&b, &a, fr->before, strlen(fr->before));
        ga_ref(&b, &a, item);
        ga_ref(&b, &a, gb_repeat(&b, more, 0, fr->max_items < 0 ? -1 : fr->max_items - 1));
        ga_lit(&b, &a, fr->after, strlen(fr->after));
        gb_add_alt(&b, framed, &a);
        body = framed;
    }
    return finish_with_start(&b, start, body, g_p);
}

sits_status_t sits_grammar_from_json_object(sits_grammar_t **g_p)
{
    gram_builder_t b;
    gb_init(&b);
    char err[64];
    sc_t c = { .b = &b, .err = err, .err_len = sizeof err, .r_ws = -1, .r_char = -1, .r_string = -1, .r_value = -1,
               .r_int = -1, .r_num = -1 };
    int start = gb_rule(&b);
    return finish_with_start(&b, start, object_any(&c, r_value(&c)), g_p);
}
