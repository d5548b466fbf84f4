/* lexer.c -- jinja2's lexer for trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False.
 *
 * Follows jinja2/lexer.py: newlines normalised to "\n" and one trailing newline dropped before
 * lexing; data up to the next "{{", "{%" or "{#"; a "-" after the opener strips all whitespace before
 * the tag; otherwise (no "+", not "{{") the spaces between the last newline (or the start of a line)
 * and the tag are dropped (lstrip_blocks); "-%}" / "-}}" / "-#}" eat the whitespace after the tag;
 * "%}" and "#}" eat one following "\n" (trim_blocks); "{% raw %}" text is data. Inside tags: names,
 * numbers, strings (Python unicode-escape decoded), operators; a closing delimiter only counts when
 * brackets are balanced. Tokens point into a normalised copy of the source held by the arena. */
#include <string.h>
#include <stdlib.h>
#include "template/tmpl_internal.h"

typedef struct {
    tmpl_arena_t *a;
    ttok_t *t; int n, cap;
    sits_tmpl_error_t *err;
} lex_t;

static int lx_push(lex_t *lx, ttok_type_t type, int line, const char *p, size_t n)
{
    if (lx->n == lx->cap) {
        int cap = lx->cap ? lx->cap * 2 : 256;
        ttok_t *t = sits_tmpl_arena_alloc(lx->a, (size_t)cap * sizeof(*t));
        if (!t) return -1;
        if (lx->n) memcpy(t, lx->t, (size_t)lx->n * sizeof(*t));
        lx->t = t; lx->cap = cap;
    }
    ttok_t *k = &lx->t[lx->n++];
    memset(k, 0, sizeof(*k));
    k->type = type; k->line = line; k->p = p; k->n = n;
    return 0;
}

/* Python's str.isspace() / regex \s on the code point starting at s[i]; *w gets its byte length. */
static int ws_at(const char *s, size_t n, size_t i, size_t *w)
{
    size_t j = i;
    uint32_t cp;
    sits_tmpl_u8_decode(s, n, &j, &cp);
    *w = j - i;
    return sits_tmpl_py_isspace(cp);
}

static size_t rstrip_len(const char *s, size_t n)
{
    /* walk forward remembering the end of the last non-space code point */
    size_t i = 0, keep = 0, w;
    while (i < n) {
        int sp = ws_at(s, n, i, &w);
        i += w;
        if (!sp) keep = i;
    }
    return keep;
}

static size_t skip_ws(const char *s, size_t n, size_t i)
{
    size_t w;
    while (i < n && ws_at(s, n, i, &w)) i += w;
    return i;
}

static int all_ws(const char *s, size_t n)
{
    return n > 0 && rstrip_len(s, n) == 0;
}

static int count_nl(const char *s, size_t n)
{
    int c = 0;
    for (size_t i = 0; i < n; i++) c += s[i] == '\n';
    return c;
}

/* Data before a tag, with the tag's whitespace control applied. */
static int lx_data(lex_t *lx, const char *s, size_t n, int line, char sign, int is_var, int line_starting)
{
    if (sign == '-') {
        n = rstrip_len(s, n);
    } else if (sign != '+' && !is_var) {
        size_t l = n;
        while (l > 0 && s[l - 1] != '\n') l--;
        if ((l > 0 || line_starting) && all_ws(s + l, n - l)) n = l;
    }
    if (n == 0) return 0;
    return lx_push(lx, T_DATA, line, s, n);
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Python unicode-escape decoding of a string literal body. -1 on a malformed \x, \u or \U or \N. */
static int unescape(lex_t *lx, const char *s, size_t n, const char **out_p, size_t *out_n)
{
    char *o = sits_tmpl_arena_alloc(lx->a, n + 1);
    size_t k = 0;
    if (!o) return -2;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 >= n) { o[k++] = s[i]; continue; }
        char c = s[++i];
        uint32_t cp = 0;
        int digits = 0;
        switch (c) {
        case '\n': continue;
        case '\\': o[k++] = '\\'; continue;
        case '\'': o[k++] = '\''; continue;
        case '"': o[k++] = '"'; continue;
        case 'a': o[k++] = '\a'; continue;
        case 'b': o[k++] = '\b'; continue;
        case 'f': o[k++] = '\f'; continue;
        case 'n': o[k++] = '\n'; continue;
        case 'r': o[k++] = '\r'; continue;
        case 't': o[k++] = '\t'; continue;
        case 'v': o[k++] = '\v'; continue;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        case 'N': return -1;
        default:
            if (c >= '0' && c <= '7') {
                int m = 0;
                while (m < 3 && i < n && s[i] >= '0' && s[i] <= '7') cp = cp * 8 + (uint32_t)(s[i++] - '0'), m++;
                i--;
                k += (size_t)sits_tmpl_u8_encode(cp, o + k);
                continue;
            }
            o[k++] = '\\'; o[k++] = c;
            continue;
        }
        for (int d = 0; d < digits; d++) {
            if (i + 1 >= n || hexval(s[i + 1]) < 0) return -1;
            cp = cp * 16 + (uint32_t)hexval(s[++i]);
        }
        if (cp > 0x10ffff) return -1;
        k += (size_t)sits_tmpl_u8_encode(cp, o + k);
    }
    *out_p = o; *out_n = k;
    return 0;
}

static const char *const ops2[] = { "//", "**", "==", "!=", ">=", "<=" };
static const char ops1[] = "+-/*%~[](){}><=.:|,;";

static int is_digit(char c) { return c >= '0' && c <= '9'; }
static int is_name0(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

/* digits with single underscores between them: (\d+_)*\d+ ; returns end or i when none */
static size_t scan_digits(const char *s, size_t n, size_t i)
{
    size_t j = i;
    if (j >= n || !is_digit(s[j])) return i;
    while (j < n && is_digit(s[j])) {
        j++;
        if (j + 1 < n && s[j] == '_' && is_digit(s[j + 1])) j++;
    }
    return j;
}

static int lx_number(lex_t *lx, const char *s, size_t n, size_t *ip, int line)
{
    size_t i = *ip, j = scan_digits(s, n, i), end = j;
    int is_float = 0, after_dot = i > 0 && s[i - 1] == '.';   /* jinja2: (?<!\.) -- x.0.1 is two lookups */
    if (!after_dot && j < n && s[j] == '.' && scan_digits(s, n, j + 1) > j + 1) { end = scan_digits(s, n, j + 1); is_float = 1; }
    if (!after_dot && end < n && (s[end] == 'e' || s[end] == 'E')) {
        size_t e = end + 1;
        if (e < n && (s[e] == '+' || s[e] == '-')) e++;
        size_t ee = scan_digits(s, n, e);
        if (ee > e) { end = ee; is_float = 1; }
    }
    char buf[128];
    size_t k = 0;
    for (size_t q = i; q < end && k + 1 < sizeof(buf); q++) if (s[q] != '_') buf[k++] = s[q];
    buf[k] = 0;
    if (lx_push(lx, is_float ? T_FLOAT : T_INT, line, s + i, end - i)) return -2;
    ttok_t *t = &lx->t[lx->n - 1];
    if (is_float) {
        t->f = strtod(buf, NULL);
    } else {
        if (!is_float && s[i] == '0' && end - i > 1) {
            /* jinja2 reads "0" then a second number: a syntax error later in the parser */
            end = i + 1; t->n = 1; t->i = 0;
        } else {
            char *ep;
            unsigned long long v = strtoull(buf, &ep, 10);
            if (v > INT64_MAX || k >= sizeof(buf) - 1) {
                sits_tmpl_err_set(lx->err, line, "line %d: integer literal too large", line);
                return -1;
            }
            t->i = (int64_t)v;
        }
    }
    *ip = end;
    return 0;
}

/* Tokens of one {{ }} or {% %} tag starting at *ip; stops after the closing delimiter (whose
 * whitespace control / trim_blocks it applies). Returns the position after the tag. */
static int lx_tag(lex_t *lx, const char *s, size_t n, size_t *ip, int *line, int is_var)
{
    size_t i = *ip;
    char stack[TMPL_MAX_PARSE_DEPTH];
    int depth = 0;
    char close = is_var ? '}' : '%';
    for (;;) {
        if (i >= n) {
            sits_tmpl_err_set(lx->err, *line, "line %d: unexpected end of template, expected '%s'", *line,
                         is_var ? "}}" : "%}");
            return -1;
        }
        if (depth == 0) {
            /* closing delimiter, with its whitespace control */
            if (s[i] == '-' && i + 2 < n + 0 && s[i + 1] == close && s[i + 2] == '}') {
                if (lx_push(lx, is_var ? T_VAR_END : T_BLOCK_END, *line, s + i, 3)) return -2;
                size_t e = skip_ws(s, n, i + 3);
                *line += count_nl(s + i, e - i);
                *ip = e;
                return 0;
            }
            if (!is_var && s[i] == '+' && i + 2 < n && s[i + 1] == '%' && s[i + 2] == '}') {
                if (lx_push(lx, T_BLOCK_END, *line, s + i, 3)) return -2;
                *ip = i + 3;
                return 0;
            }
            if (s[i] == close && i + 1 < n && s[i + 1] == '}') {
                if (lx_push(lx, is_var ? T_VAR_END : T_BLOCK_END, *line, s + i, 2)) return -2;
                i += 2;
                if (!is_var && i < n && s[i] == '\n') { i++; (*line)++; }
                *ip = i;
                return 0;
            }
        }
        size_t w;
        if (ws_at(s, n, i, &w)) {
            if (s[i] == '\n') (*line)++;
            i += w;
            continue;
        }
        char c = s[i];
        if (is_digit(c)) {
            int r = lx_number(lx, s, n, &i, *line);
            if (r) return r;
            continue;
        }
        if (is_name0(c)) {
            size_t j = i + 1;
            while (j < n && (is_name0(s[j]) || is_digit(s[j]))) j++;
            if (lx_push(lx, T_NAME, *line, s + i, j - i)) return -2;
            i = j;
            continue;
        }
        if (c == '\'' || c == '"') {
            size_t j = i + 1;
            while (j < n && s[j] != c) j += (s[j] == '\\') ? 2 : 1;
            if (j >= n) {
                sits_tmpl_err_set(lx->err, *line, "line %d: unterminated string", *line);
                return -1;
            }
            const char *v; size_t vn;
            int r = unescape(lx, s + i + 1, j - i - 1, &v, &vn);
            if (r == -2) return -2;
            if (r) {
                sits_tmpl_err_set(lx->err, *line, "line %d: malformed escape in string literal", *line);
                return -1;
            }
            if (lx_push(lx, T_STRING, *line, v, vn)) return -2;
            *line += count_nl(s + i, j - i);
            i = j + 1;
            continue;
        }
        size_t oplen = 0;
        for (size_t k = 0; k < sizeof(ops2) / sizeof(ops2[0]); k++)
            if (i + 1 < n && s[i] == ops2[k][0] && s[i + 1] == ops2[k][1]) { oplen = 2; break; }
        if (!oplen && c && strchr(ops1, c)) oplen = 1;
        if (!oplen) {
            sits_tmpl_err_set(lx->err, *line, "line %d: unexpected char '%c'", *line, c);
            return -1;
        }
        if (oplen == 1 && (c == '(' || c == '[' || c == '{')) {
            if (depth >= TMPL_MAX_PARSE_DEPTH) {
                sits_tmpl_err_set(lx->err, *line, "line %d: brackets nested too deeply", *line);
                return -1;
            }
            stack[depth++] = c == '(' ? ')' : c == '[' ? ']' : '}';
        } else if (oplen == 1 && (c == ')' || c == ']' || c == '}')) {
            if (depth == 0 || stack[depth - 1] != c) {
                sits_tmpl_err_set(lx->err, *line, "line %d: unexpected '%c'", *line, c);
                return -1;
            }
            depth--;
        }
        if (lx_push(lx, T_OP, *line, s + i, oplen)) return -2;
        i += oplen;
    }
}

/* "{%" [-+] \s* "raw" \s* ("-%}" \s* | "%}") at s+i: returns the end or 0 */
static size_t match_raw(const char *s, size_t n, size_t i, const char *word, int trim)
{
    size_t j = i + 2, wl = strlen(word);
    if (j < n && (s[j] == '-' || s[j] == '+')) j++;
    j = skip_ws(s, n, j);
    if (j + wl > n || memcmp(s + j, word, wl)) return 0;
    j = skip_ws(s, n, j + wl);
    if (trim && j + 2 < n && s[j] == '+' && s[j + 1] == '%' && s[j + 2] == '}') return j + 3;
    if (j + 2 < n && s[j] == '-' && s[j + 1] == '%' && s[j + 2] == '}') return skip_ws(s, n, j + 3);
    if (j + 1 < n && s[j] == '%' && s[j + 1] == '}') {
        j += 2;
        if (trim && j < n && s[j] == '\n') j++;
        return j;
    }
    return 0;
}

sits_status_t sits_tmpl_lex(const char *src, size_t len, tmpl_arena_t *a, ttok_t **toks_p, int *ntoks_p,
                       sits_tmpl_error_t *err)
{
    lex_t lx = { .a = a, .err = err };
    char *s = sits_tmpl_arena_alloc(a, len + 1);
    size_t n = 0;
    if (!s) return SITS_ERR_NOMEM;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') { s[n++] = '\n'; if (i + 1 < len && src[i + 1] == '\n') i++; }
        else s[n++] = src[i];
    }
    if (n > 0 && s[n - 1] == '\n') n--;

    size_t i = 0;
    int line = 1, line_starting = 1, r = 0;
    while (i < n) {
        /* next tag opener */
        size_t j = i;
        while (j + 1 < n && !(s[j] == '{' && (s[j + 1] == '{' || s[j + 1] == '%' || s[j + 1] == '#'))) j++;
        if (j + 1 >= n) {
            if (lx_push(&lx, T_DATA, line, s + i, n - i)) return SITS_ERR_NOMEM;
            break;
        }
        char kind = s[j + 1];
        char sign = (j + 2 < n && (s[j + 2] == '-' || s[j + 2] == '+')) ? s[j + 2] : 0;
        size_t rawend = kind == '%' ? match_raw(s, n, j, "raw", 0) : 0;
        if (lx_data(&lx, s + i, j - i, line, sign, kind == '{', line_starting)) return SITS_ERR_NOMEM;
        line += count_nl(s + i, j - i);
        if (rawend) {
            line_starting = s[rawend - 1] == '\n';
            line += count_nl(s + j, rawend - j);
            /* find {% endraw %} */
            size_t k = rawend, e = 0;
            for (; k + 1 < n; k++)
                if (s[k] == '{' && s[k + 1] == '%' && (e = match_raw(s, n, k, "endraw", 1))) break;
            if (!e) {
                sits_tmpl_err_set(err, line, "line %d: missing end of raw directive", line);
                return SITS_ERR_FORMAT;
            }
            char esign = (s[k + 2] == '-' || s[k + 2] == '+') ? s[k + 2] : 0;
            if (lx_data(&lx, s + rawend, k - rawend, line, esign, 0, line_starting)) return SITS_ERR_NOMEM;
            line += count_nl(s + rawend, e - rawend);
            line_starting = s[e - 1] == '\n';
            i = e;
            continue;
        }
        size_t p = j + 2 + (sign ? 1 : 0);
        if (kind == '#') {
            size_t k = p, e = 0;
            for (; k + 1 < n; k++) {
                if (s[k] == '-' && k + 2 < n && s[k + 1] == '#' && s[k + 2] == '}') { e = skip_ws(s, n, k + 3); break; }
                if (s[k] == '+' && k + 2 < n && s[k + 1] == '#' && s[k + 2] == '}') { e = k + 3; break; }
                if (s[k] == '#' && s[k + 1] == '}') { e = k + 2; if (e < n && s[e] == '\n') e++; break; }
            }
            if (!e) {
                sits_tmpl_err_set(err, line, "line %d: missing end of comment tag", line);
                return SITS_ERR_FORMAT;
            }
            line += count_nl(s + j, e - j);
            line_starting = s[e - 1] == '\n';
            i = e;
            continue;
        }
        if (lx_push(&lx, kind == '{' ? T_VAR_BEGIN : T_BLOCK_BEGIN, line, s + j, p - j)) return SITS_ERR_NOMEM;
        r = lx_tag(&lx, s, n, &p, &line, kind == '{');
        if (r == -2) return SITS_ERR_NOMEM;
        if (r) return SITS_ERR_FORMAT;
        line_starting = p > 0 && s[p - 1] == '\n';
        i = p;
    }
    if (lx_push(&lx, T_EOF, line, s + n, 0)) return SITS_ERR_NOMEM;
    *toks_p = lx.t;
    *ntoks_p = lx.n;
    return SITS_OK;
}
