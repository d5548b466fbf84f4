/* tok_util.c -- helpers shared by the tokenizer's component files: growable buffers, hashing, the string
 * map, UTF-8 and Unicode character classes (libutf8proc), the GPT-2 byte alphabet, regex compilation in
 * Oniguruma's sense (tokenizers' regex engine) on PCRE2, and JSON accessors. */
#include <stdlib.h>
#include <string.h>
#ifdef HAVE_UTF8PROC
#include <utf8proc.h>
#endif
#include "tokenizer/tok_internal.h"

/* ------------------------------------------------------------------ buffers */

int sits_tok_buf_reserve(tok_buf_t *b, size_t extra)
{
    if (b->n + extra + 1 <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + extra + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

int sits_tok_buf_put(tok_buf_t *b, const char *s, size_t n)
{
    if (sits_tok_buf_reserve(b, n)) return -1;
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

int sits_tok_ids_push(tok_ids_t *v, int32_t id)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        int32_t *p = realloc(v->p, cap * sizeof(*p));
        if (!p) return -1;
        v->p = p;
        v->cap = cap;
    }
    v->p[v->n++] = id;
    return 0;
}

int sits_tok_pieces_push(tok_pieces_t *v, size_t off, size_t len, int at_zero)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 32;
        tok_piece_t *p = realloc(v->p, cap * sizeof(*p));
        if (!p) return -1;
        v->p = p;
        v->cap = cap;
    }
    v->p[v->n].off = off;
    v->p[v->n].len = len;
    v->p[v->n].at_zero = (uint8_t)at_zero;
    v->n++;
    return 0;
}

uint32_t sits_tok_hash(const char *s, size_t n)
{
    uint32_t h = 2166136261u;  /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

char *sits_tok_strndup(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* ------------------------------------------------------------------ string map */

int sits_tok_strmap_init(sits_tok_strmap_t *m, size_t n)
{
    size_t cap = 16;
    while (cap < n * 2 + 1) cap *= 2;
    m->slots = malloc(cap * sizeof(*m->slots));
    if (!m->slots) return -1;
    memset(m->slots, 0xff, cap * sizeof(*m->slots));
    m->mask = (uint32_t)(cap - 1);
    return 0;
}

int32_t sits_tok_strmap_get(const sits_tok_strmap_t *m, const tok_keys_t *k, const char *s, size_t n)
{
    if (!m->slots) return -1;
    uint32_t i = sits_tok_hash(s, n) & m->mask;
    for (;;) {
        int32_t id = m->slots[i];
        if (id < 0) return -1;
        if (k->len[id] == n && memcmp(k->s[id], s, n) == 0) return id;
        i = (i + 1) & m->mask;
    }
}

void sits_tok_strmap_put(sits_tok_strmap_t *m, const tok_keys_t *k, int32_t id)
{
    uint32_t i = sits_tok_hash(k->s[id], k->len[id]) & m->mask;
    while (m->slots[i] >= 0) {
        int32_t o = m->slots[i];
        if (k->len[o] == k->len[id] && memcmp(k->s[o], k->s[id], k->len[id]) == 0) { m->slots[i] = id; return; }
        i = (i + 1) & m->mask;
    }
    m->slots[i] = id;
}

/* ------------------------------------------------------------------ unicode */

static int gpt2_direct(uint32_t c) { return (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF); }

/* The 68 bytes outside the direct ranges, in increasing order (0x00-0x20, 0x7F, 0x80-0xA0, 0xAD), map to
 * U+0100 + n. */
uint32_t sits_tok_byte_to_cp(uint8_t b)
{
    if (gpt2_direct(b)) return b;
    if (b <= 0x20) return 0x100u + b;
    if (b == 0x7F) return 0x121;
    if (b <= 0xA0) return 0x122u + (b - 0x80u);
    return 0x143;  /* 0xAD */
}

int sits_tok_cp_to_byte(uint32_t cp)
{
    if (gpt2_direct(cp)) return (int)cp;
    if (cp < 0x100 || cp > 0x143) return -1;
    uint32_t n = cp - 0x100;
    if (n <= 0x20) return (int)n;
    if (n == 33) return 0x7F;
    if (n < 67) return (int)(0x80 + n - 34);
    return 0xAD;
}

size_t sits_tok_utf8_encode(uint32_t cp, char *o)
{
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t sits_tok_utf8_next(const char *s, size_t len, uint32_t *cp_p)
{
    const unsigned char *u = (const unsigned char *)s;
    if (u[0] < 0x80 || len < 2) { *cp_p = u[0]; return 1; }
    if (u[0] < 0xE0) { *cp_p = ((uint32_t)(u[0] & 0x1F) << 6) | (u[1] & 0x3F); return 2; }
    if (u[0] < 0xF0 || len < 4) {
        *cp_p = ((uint32_t)(u[0] & 0x0F) << 12) | ((uint32_t)(u[1] & 0x3F) << 6) | (u[2] & 0x3F);
        return 3;
    }
    *cp_p = ((uint32_t)(u[0] & 0x07) << 18) | ((uint32_t)(u[1] & 0x3F) << 12) | ((uint32_t)(u[2] & 0x3F) << 6) |
            (u[3] & 0x3F);
    return 4;
}

int sits_tok_is_white_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

int sits_tok_utf8_step(const unsigned char *s, size_t len, size_t *n_p)
{
    unsigned char c = s[0];
    if (c < 0x80) { *n_p = 1; return 1; }
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c >= 0xE0 && c <= 0xEF) { need = 3; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { need = 4; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
    else { *n_p = 1; return 0; }
    size_t i = 1;
    for (; i < need; i++) {
        if (i >= len) { *n_p = i; return 2; }
        unsigned char l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (s[i] < l || s[i] > h) { *n_p = i; return 0; }
    }
    *n_p = need;
    return 1;
}

int sits_utf8_valid(const char *s, size_t len, size_t *bad_p)
{
    size_t i = 0;
    while (i < len) {
        size_t n;
        if ((unsigned char)s[i] < 0x80) { i++; continue; }
        if (sits_tok_utf8_step((const unsigned char *)s + i, len - i, &n) != 1) {
            if (bad_p) *bad_p = i;
            return 0;
        }
        i += n;
    }
    return 1;
}

#ifdef HAVE_UTF8PROC
static int cat(uint32_t cp) { return utf8proc_category((utf8proc_int32_t)cp); }
#endif

int sits_tok_is_punct(uint32_t cp)
{
    if (cp < 0x80) return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) ||
                          (cp >= 0x7B && cp <= 0x7E);
#ifdef HAVE_UTF8PROC
    int c = cat(cp);
    return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
#else
    return 0;
#endif
}

int sits_tok_is_numeric(uint32_t cp)
{
    if (cp < 0x80) return cp >= '0' && cp <= '9';
#ifdef HAVE_UTF8PROC
    int c = cat(cp);
    return c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO;
#else
    return 0;
#endif
}

int sits_tok_is_mark_nonspacing(uint32_t cp)
{
#ifdef HAVE_UTF8PROC
    return cp >= 0x300 && cat(cp) == UTF8PROC_CATEGORY_MN;
#else
    (void)cp;
    return 0;
#endif
}

int sits_tok_is_mark(uint32_t cp)
{
#ifdef HAVE_UTF8PROC
    int c = cat(cp);
    return cp >= 0x300 && c >= UTF8PROC_CATEGORY_MN && c <= UTF8PROC_CATEGORY_ME;
#else
    (void)cp;
    return 0;
#endif
}

int sits_tok_is_other(uint32_t cp)
{
    if (cp < 0x80) return cp < 0x20 || cp == 0x7F;
#ifdef HAVE_UTF8PROC
    int c = cat(cp);
    return c == UTF8PROC_CATEGORY_CN || (c >= UTF8PROC_CATEGORY_CC && c <= UTF8PROC_CATEGORY_CO);
#else
    return 0;
#endif
}

int sits_tok_is_word_char(uint32_t cp)
{
    if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
#ifdef HAVE_UTF8PROC
    int c = cat(cp);
    return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_ME) || c == UTF8PROC_CATEGORY_ND ||
           c == UTF8PROC_CATEGORY_PC;
#else
    return 0;
#endif
}

/* Code points assigned after Unicode 9.0 (tokenizers' script table is Unicode 9.0; it gives them Any):
 * DerivedAge.txt 15.0.0 (Debian package unicode-data), ages above 9.0, adjacent ranges merged. */
static const uint32_t AFTER_UNICODE_9[][2] = {
    { 0x560, 0x560 }, { 0x588, 0x588 }, { 0x5EF, 0x5EF }, { 0x61D, 0x61D }, { 0x7FD, 0x7FF }, { 0x860, 0x86A },
    { 0x870, 0x88E }, { 0x890, 0x891 }, { 0x898, 0x89F }, { 0x8B5, 0x8B5 }, { 0x8BE, 0x8D3 }, { 0x9FC, 0x9FE },
    { 0xA76, 0xA76 }, { 0xAFA, 0xAFF }, { 0xB55, 0xB55 }, { 0xC04, 0xC04 }, { 0xC3C, 0xC3C }, { 0xC5D, 0xC5D },
    { 0xC77, 0xC77 }, { 0xC84, 0xC84 }, { 0xCDD, 0xCDD }, { 0xCF3, 0xCF3 }, { 0xD00, 0xD00 }, { 0xD04, 0xD04 },
    { 0xD3B, 0xD3C }, { 0xD81, 0xD81 }, { 0xE86, 0xE86 }, { 0xE89, 0xE89 }, { 0xE8C, 0xE8C }, { 0xE8E, 0xE93 },
    { 0xE98, 0xE98 }, { 0xEA0, 0xEA0 }, { 0xEA8, 0xEA9 }, { 0xEAC, 0xEAC }, { 0xEBA, 0xEBA }, { 0xECE, 0xECE },
    { 0x170D, 0x170D }, { 0x1715, 0x1715 }, { 0x171F, 0x171F }, { 0x180F, 0x180F }, { 0x1878, 0x1878 },
    { 0x1ABF, 0x1ACE }, { 0x1B4C, 0x1B4C }, { 0x1B7D, 0x1B7E }, { 0x1C90, 0x1CBA }, { 0x1CBD, 0x1CBF },
    { 0x1CF7, 0x1CF7 }, { 0x1CFA, 0x1CFA }, { 0x1DF6, 0x1DFA }, { 0x20BF, 0x20C0 }, { 0x23FF, 0x23FF },
    { 0x2B97, 0x2B97 }, { 0x2BBA, 0x2BBC }, { 0x2BC9, 0x2BC9 }, { 0x2BD2, 0x2BEB }, { 0x2BF0, 0x2BFF },
    { 0x2C2F, 0x2C2F }, { 0x2C5F, 0x2C5F }, { 0x2E45, 0x2E5D }, { 0x312E, 0x312F }, { 0x31BB, 0x31BF },
    { 0x32FF, 0x32FF }, { 0x4DB6, 0x4DBF }, { 0x9FD6, 0x9FFF }, { 0xA7AF, 0xA7AF }, { 0xA7B8, 0xA7CA },
    { 0xA7D0, 0xA7D1 }, { 0xA7D3, 0xA7D3 }, { 0xA7D5, 0xA7D9 }, { 0xA7F2, 0xA7F6 }, { 0xA82C, 0xA82C },
    { 0xA8FE, 0xA8FF }, { 0xAB66, 0xAB6B }, { 0xFBC2, 0xFBC2 }, { 0xFD40, 0xFD4F }, { 0xFDCF, 0xFDCF },
    { 0xFDFE, 0xFDFF }, { 0x1019C, 0x1019C }, { 0x1032D, 0x1032F }, { 0x10570, 0x1057A }, { 0x1057C, 0x1058A },
    { 0x1058C, 0x10592 }, { 0x10594, 0x10595 }, { 0x10597, 0x105A1 }, { 0x105A3, 0x105B1 }, { 0x105B3, 0x105B9 },
    { 0x105BB, 0x105BC }, { 0x10780, 0x10785 }, { 0x10787, 0x107B0 }, { 0x107B2, 0x107BA }, { 0x10A34, 0x10A35 },
    { 0x10A48, 0x10A48 }, { 0x10D00, 0x10D27 }, { 0x10D30, 0x10D39 }, { 0x10E80, 0x10EA9 }, { 0x10EAB, 0x10EAD },
    { 0x10EB0, 0x10EB1 }, { 0x10EFD, 0x10F27 }, { 0x10F30, 0x10F59 }, { 0x10F70, 0x10F89 }, { 0x10FB0, 0x10FCB },
    { 0x10FE0, 0x10FF6 }, { 0x11070, 0x11075 }, { 0x110C2, 0x110C2 }, { 0x110CD, 0x110CD }, { 0x11144, 0x11147 },
    { 0x111CE, 0x111CF }, { 0x1123F, 0x11241 }, { 0x1133B, 0x1133B }, { 0x1145A, 0x1145A }, { 0x1145E, 0x11461 },
    { 0x116B8, 0x116B9 }, { 0x1171A, 0x1171A }, { 0x11740, 0x11746 }, { 0x11800, 0x1183B }, { 0x11900, 0x11906 },
    { 0x11909, 0x11909 }, { 0x1190C, 0x11913 }, { 0x11915, 0x11916 }, { 0x11918, 0x11935 }, { 0x11937, 0x11938 },
    { 0x1193B, 0x11946 }, { 0x11950, 0x11959 }, { 0x119A0, 0x119A7 }, { 0x119AA, 0x119D7 }, { 0x119DA, 0x119E4 },
    { 0x11A00, 0x11A47 }, { 0x11A50, 0x11AA2 }, { 0x11AB0, 0x11ABF }, { 0x11B00, 0x11B09 }, { 0x11D00, 0x11D06 },
    { 0x11D08, 0x11D09 }, { 0x11D0B, 0x11D36 }, { 0x11D3A, 0x11D3A }, { 0x11D3C, 0x11D3D }, { 0x11D3F, 0x11D47 },
    { 0x11D50, 0x11D59 }, { 0x11D60, 0x11D65 }, { 0x11D67, 0x11D68 }, { 0x11D6A, 0x11D8E }, { 0x11D90, 0x11D91 },
    { 0x11D93, 0x11D98 }, { 0x11DA0, 0x11DA9 }, { 0x11EE0, 0x11EF8 }, { 0x11F00, 0x11F10 }, { 0x11F12, 0x11F3A },
    { 0x11F3E, 0x11F59 }, { 0x11FB0, 0x11FB0 }, { 0x11FC0, 0x11FF1 }, { 0x11FFF, 0x11FFF }, { 0x12F90, 0x12FF2 },
    { 0x1342F, 0x13455 }, { 0x16A70, 0x16ABE }, { 0x16AC0, 0x16AC9 }, { 0x16E40, 0x16E9A }, { 0x16F45, 0x16F4A },
    { 0x16F4F, 0x16F4F }, { 0x16F7F, 0x16F87 }, { 0x16FE1, 0x16FE4 }, { 0x16FF0, 0x16FF1 }, { 0x187ED, 0x187F7 },
    { 0x18AF3, 0x18CD5 }, { 0x18D00, 0x18D08 }, { 0x1AFF0, 0x1AFF3 }, { 0x1AFF5, 0x1AFFB }, { 0x1AFFD, 0x1AFFE },
    { 0x1B002, 0x1B122 }, { 0x1B132, 0x1B132 }, { 0x1B150, 0x1B152 }, { 0x1B155, 0x1B155 }, { 0x1B164, 0x1B167 },
    { 0x1B170, 0x1B2FB }, { 0x1CF00, 0x1CF2D }, { 0x1CF30, 0x1CF46 }, { 0x1CF50, 0x1CFC3 }, { 0x1D1E9, 0x1D1EA },
    { 0x1D2C0, 0x1D2D3 }, { 0x1D2E0, 0x1D2F3 }, { 0x1D372, 0x1D378 }, { 0x1DF00, 0x1DF1E }, { 0x1DF25, 0x1DF2A },
    { 0x1E030, 0x1E06D }, { 0x1E08F, 0x1E08F }, { 0x1E100, 0x1E12C }, { 0x1E130, 0x1E13D }, { 0x1E140, 0x1E149 },
    { 0x1E14E, 0x1E14F }, { 0x1E290, 0x1E2AE }, { 0x1E2C0, 0x1E2F9 }, { 0x1E2FF, 0x1E2FF }, { 0x1E4D0, 0x1E4F9 },
    { 0x1E7E0, 0x1E7E6 }, { 0x1E7E8, 0x1E7EB }, { 0x1E7ED, 0x1E7EE }, { 0x1E7F0, 0x1E7FE }, { 0x1E94B, 0x1E94B },
    { 0x1EC71, 0x1ECB4 }, { 0x1ED01, 0x1ED3D }, { 0x1F10D, 0x1F10F }, { 0x1F12F, 0x1F12F }, { 0x1F16C, 0x1F16F },
    { 0x1F1AD, 0x1F1AD }, { 0x1F260, 0x1F265 }, { 0x1F6D3, 0x1F6D7 }, { 0x1F6DC, 0x1F6DF }, { 0x1F6F7, 0x1F6FC },
    { 0x1F774, 0x1F776 }, { 0x1F77B, 0x1F77F }, { 0x1F7D5, 0x1F7D9 }, { 0x1F7E0, 0x1F7EB }, { 0x1F7F0, 0x1F7F0 },
    { 0x1F8B0, 0x1F8B1 }, { 0x1F900, 0x1F90F }, { 0x1F91F, 0x1F91F }, { 0x1F928, 0x1F92F }, { 0x1F931, 0x1F932 },
    { 0x1F93F, 0x1F93F }, { 0x1F94C, 0x1F94F }, { 0x1F95F, 0x1F97F }, { 0x1F992, 0x1F9BF }, { 0x1F9C1, 0x1FA53 },
    { 0x1FA60, 0x1FA6D }, { 0x1FA70, 0x1FA7C }, { 0x1FA80, 0x1FA88 }, { 0x1FA90, 0x1FABD }, { 0x1FABF, 0x1FAC5 },
    { 0x1FACE, 0x1FADB }, { 0x1FAE0, 0x1FAE8 }, { 0x1FAF0, 0x1FAF8 }, { 0x1FB00, 0x1FB92 }, { 0x1FB94, 0x1FBCA },
    { 0x1FBF0, 0x1FBF9 }, { 0x2A6D7, 0x2A6DF }, { 0x2B735, 0x2B739 }, { 0x2CEB0, 0x2EBE0 }, { 0x30000, 0x3134A },
    { 0x31350, 0x323AF },
};

int sits_tok_after_unicode9(uint32_t cp)
{
    size_t lo = 0, hi = sizeof(AFTER_UNICODE_9) / sizeof(AFTER_UNICODE_9[0]);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < AFTER_UNICODE_9[mid][0]) hi = mid;
        else if (cp > AFTER_UNICODE_9[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

int sits_tok_lower_append(uint32_t cp, tok_buf_t *out)
{
    char u[8];
    if (cp == 0x130) return sits_tok_buf_put(out, "i\xcc\x87", 3);
#ifdef HAVE_UTF8PROC
    uint32_t l = (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp);
#else
    uint32_t l = cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
#endif
    return sits_tok_buf_put(out, u, sits_tok_utf8_encode(l, u));
}

/* ------------------------------------------------------------------ regex */

/* Oniguruma's \s and \S are White_Space; PCRE2's UCP \s also matches U+180E. \w in Oniguruma (Unicode)
 * is Alphabetic, marks, decimal digits, connector punctuation and the joiners. */
static char *regex_fix(const char *re)
{
    static const char WS[] = "\\p{White_Space}", NWS[] = "\\P{White_Space}";
    size_t n = strlen(re);
    char *out = malloc(n * 16 + 1);
    if (!out) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (re[i] == '\\' && i + 1 < n) {
            if (re[i + 1] == 's') { memcpy(out + o, WS, sizeof(WS) - 1); o += sizeof(WS) - 1; i++; continue; }
            if (re[i + 1] == 'S') { memcpy(out + o, NWS, sizeof(NWS) - 1); o += sizeof(NWS) - 1; i++; continue; }
            out[o++] = re[i];
            out[o++] = re[i + 1];
            i++;
            continue;
        }
        out[o++] = re[i];
    }
    out[o] = 0;
    return out;
}

sits_status_t sits_tok_regex_compile(const char *pattern, int literal, pcre2_code **re_p)
{
    int err;
    PCRE2_SIZE erroff;
    char *fixed = literal ? NULL : regex_fix(pattern);
    if (!literal && !fixed) return SITS_ERR_NOMEM;
    const char *pat = literal ? pattern : fixed;
    uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);  /* LITERAL refuses UCP */
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, opts, &err, &erroff, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof(msg));
        TOK_ERR("tokenizer.json: regex '%s' does not compile at offset %zu: %s", pattern, (size_t)erroff, (char *)msg);
        free(fixed);
        return SITS_ERR_FORMAT;
    }
    free(fixed);
    /* JIT is an accelerator: without it pcre2_match interprets the pattern. */
    if (pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) != 0)
        SITS_DEBUG(SITS_SUB_TOK, "pcre2 jit not available for a tokenizer regex, interpreting");
    *re_p = re;
    return SITS_OK;
}

int sits_tok_regex_next(const pcre2_code *re, pcre2_match_data *md, const char *s, size_t n, size_t pos,
                        size_t *ms_p, size_t *me_p)
{
    for (;;) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
        /* rc 0: the ovector is too small for the groups; the whole match (pair 0) is still there */
        if (rc == PCRE2_ERROR_NOMATCH) return 1;
        if (rc < 0) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(rc, msg, sizeof(msg));
            TOK_ERR("tokenizer regex: %s", (char *)msg);
            return -1;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (ov[1] > ov[0]) {
            *ms_p = ov[0];
            *me_p = ov[1];
            return 0;
        }
        /* an empty match contributes nothing: step one character */
        if (ov[0] >= n) return 1;
        pos = ov[0] + 1;
        while (pos < n && ((unsigned char)s[pos] & 0xC0) == 0x80) pos++;
    }
}

sits_status_t sits_tok_regex_replace(const pcre2_code *re, const char *content, const char *s, size_t n,
                                     tok_buf_t *out)
{
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    if (!md) return SITS_ERR_NOMEM;
    sits_status_t st = SITS_OK;
    size_t pos = 0, ms, me, cl = strlen(content);
    int r;
    while ((r = sits_tok_regex_next(re, md, s, n, pos, &ms, &me)) == 0) {
        if (sits_tok_buf_put(out, s + pos, ms - pos) || sits_tok_buf_put(out, content, cl)) { st = SITS_ERR_NOMEM; break; }
        pos = me;
    }
    if (r < 0) st = SITS_ERR_INTERNAL;
    if (st == SITS_OK && sits_tok_buf_put(out, s + pos, n - pos)) st = SITS_ERR_NOMEM;
    pcre2_match_data_free(md);
    return st;
}

sits_status_t sits_tok_pattern_parse(const json_t *pat, const char *what, pcre2_code **re_p, char **str_p)
{
    const char *re = sits_tok_jstr(pat, "Regex"), *lit = sits_tok_jstr(pat, "String");
    *re_p = NULL;
    *str_p = NULL;
    if (lit) {
        if (!*lit) { TOK_ERR("tokenizer.json: %s with an empty String pattern", what); return SITS_ERR_FORMAT; }
        return (*str_p = strdup(lit)) ? SITS_OK : SITS_ERR_NOMEM;
    }
    if (!re) { TOK_ERR("tokenizer.json: %s without a String or Regex pattern", what); return SITS_ERR_FORMAT; }
    return sits_tok_regex_compile(re, 0, re_p);
}

const char *sits_tok_jstr(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

int sits_tok_jbool(const json_t *o, const char *key, int def)
{
    const json_t *v = json_object_get(o, key);
    if (json_is_boolean(v)) return json_is_true(v);
    return def;
}
