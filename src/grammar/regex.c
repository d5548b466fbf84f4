/* regex.c -- a regex (whole match) or a list of choices -> grammar (see grammar.h for the subset).
 * Recursive descent: alt := concat ('|' concat)*; concat := (atom quant?)*; every piece becomes a rule.
 * Classes are ASCII; a negated class, \D \W \S and '.' also take every non-ASCII character (as valid
 * UTF-8 sequences). In a JSON-string context (a schema's "pattern") the bytes that JSON must escape
 * (", \ and controls) are taken out of every set and refused as literals, so the text needs no escaping. */
#include "grammar/gram_internal.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    gram_builder_t *b;
    const char *s;
    size_t n, i;
    char *err;
    size_t err_len;
    int failed, json, depth;
    int r_multi;
} rx_t;

static int rx_fail(rx_t *x, const char *what)
{
    if (!x->failed) snprintf(x->err, x->err_len, "%s at offset %zu of the regex", what, x->i);
    x->failed = 1;
    return 0;
}

static void json_clean(rx_t *x, gram_set_t *s)
{
    if (!x->json) return;
    for (int c = 0; c < 0x20; c++) s->w[c >> 5] &= ~(1u << (c & 31));
    s->w['"' >> 5] &= ~(1u << ('"' & 31));
    s->w['\\' >> 5] &= ~(1u << ('\\' & 31));
}

static int multi(rx_t *x)
{
    if (x->r_multi < 0) x->r_multi = gb_utf8_multibyte(x->b);
    return x->r_multi;
}

/* a rule for the set s, plus every non-ASCII character when with_multi */
static int set_rule(rx_t *x, gram_set_t *s, int with_multi)
{
    json_clean(x, s);
    int r = gb_rule(x->b);
    gram_alt_t a = { 0 };
    ga_set(x->b, &a, s);
    gb_add_alt(x->b, r, &a);
    if (with_multi) {
        ga_ref(x->b, &a, multi(x));
        gb_add_alt(x->b, r, &a);
    }
    return r;
}

/* \d \w \s (and upper-case complements) into s; returns 1 when c is one of them, *neg_p for complements */
static int class_escape(int c, gram_set_t *s, int *neg_p)
{
    gram_set_t t = { { 0 } };
    switch (c | 0x20) {
    case 'd': gs_add_range(&t, '0', '9'); break;
    case 'w': gs_add_range(&t, '0', '9'); gs_add_range(&t, 'a', 'z'); gs_add_range(&t, 'A', 'Z'); gs_add_range(&t, '_', '_'); break;
    case 's': gs_add_range(&t, ' ', ' '); gs_add_range(&t, '\t', '\r'); break;
    default: return 0;
    }
    *neg_p = c >= 'A' && c <= 'Z';
    if (*neg_p) {
        gram_set_t all = { { 0 } };
        gs_add_range(&all, 0, 0x7F);
        for (int k = 0; k < 8; k++) t.w[k] = all.w[k] & ~t.w[k];
    }
    for (int k = 0; k < 8; k++) s->w[k] |= t.w[k];
    return 1;
}

static int simple_escape(int c)
{
    switch (c) {
    case 'n': return '\n';
    case 't': return '\t';
    case 'r': return '\r';
    case 'f': return '\f';
    case 'v': return '\v';
    case '0': return 0;
    default: return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ? -1 : c;
    }
}

static int parse_alt(rx_t *x);

static int parse_class(rx_t *x)
{
    gram_set_t s = { { 0 } };
    int neg = 0, any_neg_escape = 0;
    x->i++;   /* [ */
    if (x->i < x->n && x->s[x->i] == '^') { neg = 1; x->i++; }
    int first = 1;
    while (x->i < x->n && (x->s[x->i] != ']' || first)) {
        first = 0;
        int c = (unsigned char)x->s[x->i++];
        if (c >= 0x80) return rx_fail(x, "non-ASCII characters in a class are not supported");
        if (c == '\\') {
            if (x->i >= x->n) return rx_fail(x, "a class ends with '\\'");
            int e = (unsigned char)x->s[x->i++], en = 0;
            if (class_escape(e, &s, &en)) { any_neg_escape |= en; continue; }
            c = simple_escape(e);
            if (c < 0) return rx_fail(x, "unsupported escape in a class");
        }
        int hi = c;
        if (x->i + 1 < x->n && x->s[x->i] == '-' && x->s[x->i + 1] != ']') {
            x->i++;
            hi = (unsigned char)x->s[x->i++];
            if (hi == '\\') {
                if (x->i >= x->n) return rx_fail(x, "a class ends with '\\'");
                hi = simple_escape((unsigned char)x->s[x->i++]);
                if (hi < 0) return rx_fail(x, "unsupported escape in a class range");
            }
            if (hi >= 0x80 || hi < c) return rx_fail(x, "bad class range");
        }
        gs_add_range(&s, c, hi);
    }
    if (x->i >= x->n) return rx_fail(x, "unterminated class '['");
    x->i++;   /* ] */
    if (neg) {
        gram_set_t all = { { 0 } };
        gs_add_range(&all, 0, 0x7F);
        for (int k = 0; k < 8; k++) s.w[k] = all.w[k] & ~s.w[k];
    }
    return set_rule(x, &s, neg || any_neg_escape);
}

static int parse_atom(rx_t *x)
{
    int c = (unsigned char)x->s[x->i];
    gram_set_t s = { { 0 } };
    if (c == '(') {
        x->i++;
        if (x->i + 1 < x->n && x->s[x->i] == '?') {
            if (x->s[x->i + 1] != ':') return rx_fail(x, "only (?:...) groups are supported");
            x->i += 2;
        }
        int r = parse_alt(x);
        if (x->i >= x->n || x->s[x->i] != ')') return rx_fail(x, "unbalanced '('");
        x->i++;
        return r;
    }
    if (c == '[') return parse_class(x);
    if (c == '.') {
        x->i++;
        gs_add_range(&s, 0, 0x7F);
        s.w['\n' >> 5] &= ~(1u << ('\n' & 31));
        return set_rule(x, &s, 1);
    }
    if (c == '\\') {
        if (++x->i >= x->n) return rx_fail(x, "the regex ends with '\\'");
        int e = (unsigned char)x->s[x->i++], neg = 0;
        if (class_escape(e, &s, &neg)) return set_rule(x, &s, neg);
        if (e == 'b' || e == 'B' || e == 'A' || e == 'z' || e == 'Z') return rx_fail(x, "anchors and word boundaries are not supported");
        int lit = simple_escape(e);
        if (lit < 0) return rx_fail(x, "unsupported escape");
        c = lit;
    } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        return rx_fail(x, "a quantifier with nothing to repeat");
    } else if (c == '^' || c == '$') {
        return rx_fail(x, "anchors are only supported at the start (^) and the end ($)");
    } else {
        x->i++;
    }
    if (c >= 0x80) {   /* a literal non-ASCII character: its whole UTF-8 sequence */
        size_t start = x->i - 1, end = x->i;
        while (end < x->n && ((unsigned char)x->s[end] & 0xC0) == 0x80) end++;
        x->i = end;
        return gb_lit_rule(x->b, x->s + start, end - start);
    }
    if (x->json && (c < 0x20 || c == '"' || c == '\\'))
        return rx_fail(x, "a pattern character that JSON must escape is not supported");
    gs_add_range(&s, c, c);
    return set_rule(x, &s, 0);
}

static int parse_int(rx_t *x, int *v)
{
    size_t start = x->i;
    long n = 0;
    while (x->i < x->n && x->s[x->i] >= '0' && x->s[x->i] <= '9' && n < 100000) n = n * 10 + (x->s[x->i++] - '0');
    *v = (int)n;
    return x->i > start;
}

static int parse_concat(rx_t *x)
{
    gram_alt_t a = { 0 };
    while (x->i < x->n && x->s[x->i] != '|' && x->s[x->i] != ')' && !x->failed) {
        if (x->s[x->i] == '$' && x->i + 1 == x->n && x->depth == 1) { x->i++; break; }
        int r = parse_atom(x);
        if (x->failed) break;
        if (x->i < x->n) {
            int q = x->s[x->i], lo = -1, hi = -1;
            if (q == '*') { lo = 0; hi = -1; x->i++; }
            else if (q == '+') { lo = 1; hi = -1; x->i++; }
            else if (q == '?') { lo = 0; hi = 1; x->i++; }
            else if (q == '{') {
                size_t save = x->i++;
                if (parse_int(x, &lo)) {
                    hi = lo;
                    if (x->i < x->n && x->s[x->i] == ',') {
                        x->i++;
                        if (!parse_int(x, &hi)) hi = -1;
                    }
                    if (x->i >= x->n || x->s[x->i] != '}') { ga_free(&a); return rx_fail(x, "bad {m,n} quantifier"); }
                    x->i++;
                    if ((hi >= 0 && hi < lo) || lo > 1024 || hi > 1024) { ga_free(&a); return rx_fail(x, "a {m,n} bound above 1024 or m > n"); }
                } else {
                    x->i = save;   /* a literal '{' */
                    lo = -1;
                }
            }
            if (lo >= 0) {
                if (x->i < x->n && x->s[x->i] == '?') x->i++;   /* lazy: the same language */
                r = gb_repeat(x->b, r, lo, hi);
            }
        }
        ga_ref(x->b, &a, r);
    }
    int r = gb_rule(x->b);
    gb_add_alt(x->b, r, &a);
    return r;
}

static int parse_alt(rx_t *x)
{
    if (++x->depth > 100) return rx_fail(x, "groups nest too deep");
    int r = gb_rule(x->b);
    for (;;) {
        gram_alt_t a = { 0 };
        ga_ref(x->b, &a, parse_concat(x));
        gb_add_alt(x->b, r, &a);
        if (x->failed || x->i >= x->n || x->s[x->i] != '|') break;
        x->i++;
    }
    x->depth--;
    return r;
}

int sits_grammar_regex_rule(gram_builder_t *b, const char *re, size_t len, char *err, size_t err_len, int json);

int sits_grammar_regex_rule(gram_builder_t *b, const char *re, size_t len, char *err, size_t err_len, int json)
{
    rx_t x = { .b = b, .s = re, .n = len, .err = err, .err_len = err_len, .json = json, .r_multi = -1 };
    if (x.i < x.n && x.s[0] == '^') x.i++;
    int r = parse_alt(&x);
    if (!x.failed && x.i < x.n) rx_fail(&x, "unbalanced ')'");
    return x.failed ? -1 : r;
}

sits_status_t sits_grammar_from_regex(const char *re, size_t len, char *err, size_t err_len, sits_grammar_t **g_p)
{
    gram_builder_t b;
    gb_init(&b);
    int start = gb_rule(&b);
    int r = sits_grammar_regex_rule(&b, re, len, err, err_len, 0);
    if (r < 0) {
        gb_free(&b);
        return SITS_ERR_INVALID;
    }
    gram_alt_t a = { 0 };
    ga_ref(&b, &a, r);
    gb_add_alt(&b, start, &a);
    sits_status_t st = gb_finish(&b, g_p);
    gb_free(&b);
    return st;
}

sits_status_t sits_grammar_from_choice(const char *const *choices, const size_t *lens, int n, sits_grammar_t **g_p)
{
    if (n < 1) return SITS_ERR_INVALID;
    gram_builder_t b;
    gb_init(&b);
    int start = gb_rule(&b);
    for (int i = 0; i < n; i++) {
        gram_alt_t a = { 0 };
        ga_lit(&b, &a, choices[i], lens[i]);
        gb_add_alt(&b, start, &a);
    }
    sits_status_t st = gb_finish(&b, g_p);
    gb_free(&b);
    return st;
}
