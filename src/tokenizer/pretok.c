/* pretok.c -- tokenizers' pre-tokenizers over a list of pieces [off, len) of a text buffer.
 *
 * Splitting steps first list the (start, end, is_match) segments of each piece -- regex matches (PCRE2,
 * UTF + UCP, JIT; empty matches contribute nothing) or single characters that satisfy a predicate -- and
 * then fold them by the SplitDelimiterBehavior exactly as tokenizers' NormalizedString::split does
 * (Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous; invert swaps match/non-match).
 * Rewriting steps (ByteLevel's prefix space and byte mapping, Metaspace) write a new buffer.
 *
 * Steps: Split (String or Regex), ByteLevel (add_prefix_space per piece, GPT-2 regex when use_regex; the
 * byte -> alphabet mapping is left to the model when ByteLevel is the last step, else done here), Digits,
 * Metaspace, Whitespace (\w+|[^\w\s]+ kept, the rest removed), WhitespaceSplit, Punctuation,
 * CharDelimiterSplit, BertPreTokenizer (= whitespace Removed then punctuation Isolated), UnicodeScripts
 * (the script of a character is the group of an alternation of PCRE2's \p{sc:...} that matches it; as in
 * tokenizers' Unicode 9.0 table, characters assigned later, unassigned or private-use ones are Any; splits as
 * tokenizers' unicode_scripts.rs, including its quirks), Sequence (flattened). */
#include <stdlib.h>
#include <string.h>
#include "tokenizer/tok_internal.h"

static const char GPT2_REGEX[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
#define WORD_CLASS "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}"
static const char WHITESPACE_REGEX[] = "[" WORD_CLASS "]+|[^" WORD_CLASS "\\s]+";

enum { PRED_NONE, PRED_DIGIT, PRED_SPACE, PRED_PUNCT, PRED_CHAR };

/* PCRE2 10.42's script names (pcre2test -LS), sorted */
static const char SCRIPT_NAMES[] =
    "adlam ahom anatolianhieroglyphs arabic armenian avestan balinese bamum bassavah batak bengali bhaiksuki "
    "bopomofo brahmi braille buginese buhid canadianaboriginal carian caucasianalbanian chakma cham cherokee "
    "chorasmian common coptic cuneiform cypriot cyprominoan cyrillic deseret devanagari divesakuru dogra "
    "duployan egyptianhieroglyphs elbasan elymaic ethiopic georgian glagolitic gothic grantha greek gujarati "
    "gunjalagondi gurmukhi han hangul hanifirohingya hanunoo hatran hebrew hiragana imperialaramaic inherited "
    "inscriptionalpahlavi inscriptionalparthian javanese kaithi kannada katakana kayahli kharoshthi "
    "khitansmallscript khmer khojki khudawadi lao latin lepcha limbu lineara linearb lisu lycian lydian "
    "mahajani makasar malayalam mandaic manichaean marchen masaramgondi medefaidrin meeteimayek mendekikakui "
    "meroiticcursive meroitichieroglyphs miao modi mongolian mro multani myanmar nabataean nandinagari newa "
    "newtailue nko nushu nyiakengpuachuehmong ogham olchiki oldhungarian olditalic oldnortharabian oldpermic "
    "oldpersian oldsogdian oldsoutharabian oldturkic olduyghur oriya osage osmanya pahawhhmong palmyrene "
    "paucinhau phagspa phoenician psalterpahlavi rejang runic samaritan saurashtra sharada shavian siddham "
    "signwriting sinhala sogdian sorasompeng soyombo sundanese sylotinagri syriac tagalog tagbanwa taile "
    "taitham taiviet takri tamil tangsa tangut telugu thaana thai tibetan tifinagh tirhuta toto ugaritic "
    "unknown vai vithkuqi wancho warangciti yezidi yiii zanabazarsquare ";

static int seg_push(tok_ctx_t *c, size_t *nseg, size_t s, size_t e, int m)
{
    if (*nseg + 1 > c->nsegcap) {
        size_t cap = c->nsegcap ? c->nsegcap * 2 : 64;
        tok_seg_t *p = realloc(c->segs, cap * sizeof(*p));
        if (!p) return -1;
        c->segs = p;
        c->nsegcap = cap;
    }
    c->segs[(*nseg)++] = (tok_seg_t){ s, e, m };
    return 0;
}

static int pred(int kind, uint32_t delim, uint32_t cp)
{
    switch (kind) {
    case PRED_DIGIT: return sits_tok_is_numeric(cp);
    case PRED_SPACE: return sits_tok_is_white_space(cp);
    case PRED_PUNCT: return sits_tok_is_punct(cp);
    case PRED_CHAR: return cp == delim;
    default: return 0;
    }
}

/* Fold the segments g[0..nseg) of the piece at base by beh into out. */
static sits_status_t fold(const tok_seg_t *g, size_t nseg, size_t base, int at_zero, sits_tok_split_behavior_t beh,
                          tok_pieces_t *out)
{
    size_t first = out->n;
    int prev_match = 0;
#define PUSH(s_, e_) do { if (sits_tok_pieces_push(out, base + (s_), (e_) - (s_), at_zero && (s_) == 0)) return SITS_ERR_NOMEM; } while (0)
    switch (beh) {
    case SITS_SPLIT_REMOVED:
        for (size_t k = 0; k < nseg; k++)
            if (!g[k].m) PUSH(g[k].s, g[k].e);
        break;
    case SITS_SPLIT_ISOLATED:
        for (size_t k = 0; k < nseg; k++) PUSH(g[k].s, g[k].e);
        break;
    case SITS_SPLIT_MERGED_PREV:
    case SITS_SPLIT_CONTIGUOUS:
        for (size_t k = 0; k < nseg; k++) {
            int glue = beh == SITS_SPLIT_MERGED_PREV ? (g[k].m && !prev_match) : (g[k].m == prev_match);
            if (glue && out->n > first) out->p[out->n - 1].len = base + g[k].e - out->p[out->n - 1].off;
            else PUSH(g[k].s, g[k].e);
            prev_match = g[k].m;
        }
        break;
    case SITS_SPLIT_MERGED_NEXT: {
        /* right to left: a match joins the piece on its right unless that one is a match */
        size_t nout = 0;
        for (size_t k = nseg; k-- > 0;) {
            if (g[k].m && !prev_match && nout > 0) {
                out->p[out->n - 1].len += out->p[out->n - 1].off - (base + g[k].s);
                out->p[out->n - 1].off = base + g[k].s;
                out->p[out->n - 1].at_zero = (uint8_t)(at_zero && g[k].s == 0);
            } else {
                PUSH(g[k].s, g[k].e);
                nout++;
            }
            prev_match = g[k].m;
        }
        for (size_t a = first, b = out->n - 1; nout && a < b; a++, b--) {
            tok_piece_t tmp = out->p[a];
            out->p[a] = out->p[b];
            out->p[b] = tmp;
        }
        break;
    }
    }
#undef PUSH
    return SITS_OK;
}

/* Split every piece by the regex re or the predicate kind. */
static sits_status_t split_pieces(tok_ctx_t *c, const char *buf, const tok_pieces_t *in, tok_pieces_t *out,
                                  const pcre2_code *re, int kind, uint32_t delim, sits_tok_split_behavior_t beh,
                                  int invert)
{
    out->n = 0;
    for (size_t pi = 0; pi < in->n; pi++) {
        const char *s = buf + in->p[pi].off;
        size_t n = in->p[pi].len, prev = 0, nseg = 0;
        if (re) {
            size_t pos = 0, ms, me;
            int r;
            while (pos < n && (r = sits_tok_regex_next(re, c->md, s, n, pos, &ms, &me)) == 0) {
                if ((prev < ms && seg_push(c, &nseg, prev, ms, 0)) || seg_push(c, &nseg, ms, me, 1)) return SITS_ERR_NOMEM;
                prev = pos = me;
            }
            if (pos < n && r < 0) return SITS_ERR_INTERNAL;
        } else {
            for (size_t i = 0; i < n;) {
                uint32_t cp;
                size_t l = sits_tok_utf8_next(s + i, n - i, &cp);
                if (pred(kind, delim, cp)) {
                    if ((prev < i && seg_push(c, &nseg, prev, i, 0)) || seg_push(c, &nseg, i, i + l, 1)) return SITS_ERR_NOMEM;
                    prev = i + l;
                }
                i += l;
            }
        }
        if (prev < n && seg_push(c, &nseg, prev, n, 0)) return SITS_ERR_NOMEM;
        if (invert)
            for (size_t k = 0; k < nseg; k++) c->segs[k].m ^= 1;
        SITS_CHECK(fold(c->segs, nseg, in->p[pi].off, in->p[pi].at_zero, beh, out));
    }
    return SITS_OK;
}

/* ---------------------------------------------------------------- steps */

static sits_status_t split_apply(const sits_tok_pre_t *p, tok_ctx_t *c, const char **buf_p, tok_buf_t *dst,
                                 const tok_pieces_t *in, tok_pieces_t *out)
{
    (void)dst;
    return split_pieces(c, *buf_p, in, out, p->re, PRED_NONE, 0, p->behavior, p->invert);
}

static sits_status_t pred_apply(const sits_tok_pre_t *p, tok_ctx_t *c, const char **buf_p, tok_buf_t *dst,
                                const tok_pieces_t *in, tok_pieces_t *out)
{
    (void)dst;
    return split_pieces(c, *buf_p, in, out, NULL, p->flag, p->delim, p->behavior, 0);
}

static sits_status_t bytelevel_apply(const sits_tok_pre_t *p, tok_ctx_t *c, const char **buf_p, tok_buf_t *dst,
                                     const tok_pieces_t *in, tok_pieces_t *out)
{
    const char *buf = *buf_p;
    tok_pieces_t tmp = { 0 };
    const tok_pieces_t *cur = in;
    sits_status_t st = SITS_OK;
    if (p->flag) {  /* add_prefix_space, per piece */
        dst->n = 0;
        for (size_t i = 0; i < in->n; i++) {
            size_t o = dst->n;
            if ((buf[in->p[i].off] != ' ' && sits_tok_buf_put(dst, " ", 1)) ||
                sits_tok_buf_put(dst, buf + in->p[i].off, in->p[i].len) ||
                sits_tok_pieces_push(&tmp, o, dst->n - o, in->p[i].at_zero)) { st = SITS_ERR_NOMEM; goto out; }
        }
        cur = &tmp;
        buf = dst->p;
    }
    if (p->re) {
        SITS_CHECK_GOTO(split_pieces(c, buf, cur, out, p->re, PRED_NONE, 0, SITS_SPLIT_ISOLATED, 0), st, out);
    } else {
        out->n = 0;
        for (size_t i = 0; i < cur->n; i++)
            if (sits_tok_pieces_push(out, cur->p[i].off, cur->p[i].len, cur->p[i].at_zero)) { st = SITS_ERR_NOMEM; goto out; }
    }
    if (p->map_bytes) {  /* not the last step: later steps see the GPT-2 alphabet */
        tok_buf_t m = { 0 };
        char u[4];
        for (size_t i = 0; i < out->n; i++) {
            size_t o = m.n;
            for (size_t k = 0; k < out->p[i].len; k++)
                if (sits_tok_buf_put(&m, u, sits_tok_utf8_encode(sits_tok_byte_to_cp((uint8_t)buf[out->p[i].off + k]), u))) {
                    free(m.p);
                    st = SITS_ERR_NOMEM;
                    goto out;
                }
            out->p[i].off = o;
            out->p[i].len = m.n - o;
        }
        /* dst may hold buf: swap the mapped text in */
        free(dst->p);
        *dst = m;
        buf = dst->p ? dst->p : "";
    }
    *buf_p = buf;
out:
    free(tmp.p);
    return st;
}

/* Metaspace: ' ' -> replacement, prepend per scheme, optional split (MergedWithNext on the replacement). */
static sits_status_t metaspace_apply(const sits_tok_pre_t *p, tok_ctx_t *c, const char **buf_p, tok_buf_t *dst,
                                     const tok_pieces_t *in, tok_pieces_t *out)
{
    (void)c;
    const char *buf = *buf_p;
    size_t rl = strlen(p->replacement);
    dst->n = 0;
    out->n = 0;
    for (size_t pi = 0; pi < in->n; pi++) {
        const char *s = buf + in->p[pi].off;
        size_t n = in->p[pi].len, start = dst->n;
        int starts_with = (n >= 1 && s[0] == ' ') || (n >= rl && memcmp(s, p->replacement, rl) == 0);
        int at_zero = in->p[pi].at_zero;
        if (!starts_with && (p->prepend == SITS_PREPEND_ALWAYS || (p->prepend == SITS_PREPEND_FIRST && at_zero)))
            if (sits_tok_buf_put(dst, p->replacement, rl)) return SITS_ERR_NOMEM;
        size_t run = 0;
        for (size_t i = 0; i < n; i++) {
            if (s[i] != ' ') continue;
            if (sits_tok_buf_put(dst, s + run, i - run) || sits_tok_buf_put(dst, p->replacement, rl)) return SITS_ERR_NOMEM;
            run = i + 1;
        }
        if (sits_tok_buf_put(dst, s + run, n - run)) return SITS_ERR_NOMEM;
        if (!p->flag) {
            if (dst->n > start && sits_tok_pieces_push(out, start, dst->n - start, at_zero)) return SITS_ERR_NOMEM;
            continue;
        }
        size_t piece = start;
        for (size_t i = start; i < dst->n;) {
            if (i > piece && i + rl <= dst->n && memcmp(dst->p + i, p->replacement, rl) == 0) {
                if (sits_tok_pieces_push(out, piece, i - piece, at_zero && piece == start)) return SITS_ERR_NOMEM;
                piece = i;
                i += rl;
            } else i++;
        }
        if (dst->n > piece && sits_tok_pieces_push(out, piece, dst->n - piece, at_zero && piece == start)) return SITS_ERR_NOMEM;
    }
    *buf_p = dst->p ? dst->p : "";
    return SITS_OK;
}

/* tokenizers unicode_scripts.rs: ' ' is Any; Hiragana, Katakana, Hangul and U+30FC count as Han. A split
 * falls before every character whose script differs from the last non-Any one (the first character
 * included); the text before the first split is dropped (ranges.windows(2)), as there. */
static sits_status_t scripts_apply(const sits_tok_pre_t *p, tok_ctx_t *c, const char **buf_p, tok_buf_t *dst,
                                   const tok_pieces_t *in, tok_pieces_t *out)
{
    (void)c;
    (void)dst;
    const char *buf = *buf_p;
    const int ANY = -2, NONE = -3;
    pcre2_match_data *md = pcre2_match_data_create(256, NULL);
    if (!md) return SITS_ERR_NOMEM;
    sits_status_t st = SITS_OK;
    out->n = 0;
    for (size_t pi = 0; pi < in->n && st == SITS_OK; pi++) {
        const char *s = buf + in->p[pi].off;
        size_t n = in->p[pi].len, first = (size_t)-1, prev = 0;
        int last = NONE;
        for (size_t i = 0; i < n && st == SITS_OK;) {
            uint32_t cp;
            size_t l = sits_tok_utf8_next(s + i, n - i, &cp);
            int sc = ANY;  /* matched by no group */
            if (cp == ' ' || sits_tok_after_unicode9(cp)) sc = ANY;
            else if (cp == 0x30FC) sc = p->scripts[0];  /* Han */
            else {
                int rc = pcre2_match(p->re, (PCRE2_SPTR)s, i + l, i, PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK, md, NULL);
                if (rc > 1) {
                    sc = rc - 1;
                    if (sc == p->scripts[1] || sc == p->scripts[2] || sc == p->scripts[3]) sc = p->scripts[0];
                    if (sc == p->scripts[4]) sc = ANY;  /* not in the table (unassigned, private use) */
                }
            }
            if (sc != ANY && last != ANY && last != sc) {
                if (first == (size_t)-1) first = i;
                else if (sits_tok_pieces_push(out, in->p[pi].off + prev, i - prev, in->p[pi].at_zero && prev == 0))
                    st = SITS_ERR_NOMEM;
                prev = i;
            }
            if (sc != ANY) last = sc;
            i += l;
        }
        if (st == SITS_OK && first != (size_t)-1 && n > prev &&
            sits_tok_pieces_push(out, in->p[pi].off + prev, n - prev, in->p[pi].at_zero && prev == 0)) st = SITS_ERR_NOMEM;
    }
    pcre2_match_data_free(md);
    return st;
}

static const sits_tok_pre_ops_t SCRIPTS_OPS = { "UnicodeScripts", scripts_apply };

/* \p{sc:...} alternation, one group per script; the group numbers of Han, Hiragana, Katakana, Hangul */
static sits_status_t scripts_parse(sits_tok_pre_t *p)
{
    tok_buf_t pat = { 0 };
    sits_status_t st = SITS_ERR_NOMEM;
    int k = 0;
    for (const char *s = SCRIPT_NAMES; *s;) {
        const char *e = strchr(s, ' ');
        size_t n = (size_t)(e - s);
        char name[64];
        snprintf(name, sizeof(name), "%.*s", (int)n, s);
        k++;
        static const char *const HAN_LIKE[5] = { "han", "hiragana", "katakana", "hangul", "unknown" };
        for (int h = 0; h < 5; h++)
            if (!strcmp(name, HAN_LIKE[h])) p->scripts[h] = k;
        if ((k > 1 && sits_tok_buf_put(&pat, "|", 1)) || sits_tok_buf_put(&pat, "(\\p{sc:", 7) ||
            sits_tok_buf_put(&pat, name, n) || sits_tok_buf_put(&pat, "})", 2)) goto out;
        s = e + 1;
    }
    st = sits_tok_regex_compile(pat.p, 0, &p->re);
out:
    free(pat.p);
    return st;
}

static const sits_tok_pre_ops_t SPLIT_OPS = { "Split", split_apply }, PRED_OPS = { "split by character", pred_apply },
    BYTELEVEL_OPS = { "ByteLevel", bytelevel_apply }, METASPACE_OPS = { "Metaspace", metaspace_apply };

/* ---------------------------------------------------------------- parse */

static sits_status_t behavior_parse(const char *beh, sits_tok_split_behavior_t *b_p)
{
    static const struct { const char *name; sits_tok_split_behavior_t b; } T[] = {
        { "Removed", SITS_SPLIT_REMOVED }, { "Isolated", SITS_SPLIT_ISOLATED },
        { "MergedWithPrevious", SITS_SPLIT_MERGED_PREV }, { "MergedWithNext", SITS_SPLIT_MERGED_NEXT },
        { "Contiguous", SITS_SPLIT_CONTIGUOUS } };
    for (size_t i = 0; i < sizeof(T) / sizeof(T[0]); i++)
        if (beh && !strcmp(beh, T[i].name)) { *b_p = T[i].b; return SITS_OK; }
    TOK_ERR("tokenizer.json: split behavior '%s' unknown", beh ? beh : "(none)");
    return SITS_ERR_FORMAT;
}

sits_status_t sits_tok_prepend_parse(const json_t *o, sits_tok_prepend_t *p)
{
    const char *s = sits_tok_jstr(o, "prepend_scheme");
    if (!s) {
        *p = sits_tok_jbool(o, "add_prefix_space", 1) ? SITS_PREPEND_ALWAYS : SITS_PREPEND_NEVER;
        return SITS_OK;
    }
    if (!strcmp(s, "always")) *p = SITS_PREPEND_ALWAYS;
    else if (!strcmp(s, "first")) *p = SITS_PREPEND_FIRST;
    else if (!strcmp(s, "never")) *p = SITS_PREPEND_NEVER;
    else { TOK_ERR("tokenizer.json: Metaspace prepend_scheme '%s' unknown", s); return SITS_ERR_FORMAT; }
    return SITS_OK;
}

static sits_tok_pre_t *add_step(sits_tok_pre_t **steps_p, size_t *n_p, const sits_tok_pre_ops_t *ops)
{
    sits_tok_pre_t *p = realloc(*steps_p, (*n_p + 1) * sizeof(*p));
    if (!p) return NULL;
    *steps_p = p;
    memset(&p[*n_p], 0, sizeof(*p));
    p[*n_p].ops = ops;
    return &p[(*n_p)++];
}

static sits_status_t add_pred(sits_tok_pre_t **steps_p, size_t *n_p, int kind, uint32_t delim, sits_tok_split_behavior_t b)
{
    sits_tok_pre_t *p = add_step(steps_p, n_p, &PRED_OPS);
    if (!p) return SITS_ERR_NOMEM;
    p->flag = kind;
    p->delim = delim;
    p->behavior = b;
    return SITS_OK;
}

static sits_status_t parse_one(const json_t *o, sits_tok_pre_t **steps_p, size_t *n_p)
{
    if (!o || json_is_null(o)) return SITS_OK;
    const char *type = sits_tok_jstr(o, "type");
    sits_tok_pre_t *p;
    if (!type) { TOK_ERR("tokenizer.json: pre_tokenizer without type"); return SITS_ERR_FORMAT; }
    if (!strcmp(type, "Sequence")) {
        const json_t *arr = json_object_get(o, "pretokenizers"), *v;
        size_t i;
        json_array_foreach(arr, i, v) SITS_CHECK(parse_one(v, steps_p, n_p));
        return SITS_OK;
    }
    if (!strcmp(type, "Split")) {
        const json_t *pat = json_object_get(o, "pattern");
        const char *re = sits_tok_jstr(pat, "Regex"), *lit = sits_tok_jstr(pat, "String");
        if ((!re && !lit) || (lit && !*lit)) { TOK_ERR("tokenizer.json: Split without a pattern"); return SITS_ERR_FORMAT; }
        if (!(p = add_step(steps_p, n_p, &SPLIT_OPS))) return SITS_ERR_NOMEM;
        p->invert = sits_tok_jbool(o, "invert", 0);
        SITS_CHECK(behavior_parse(sits_tok_jstr(o, "behavior"), &p->behavior));
        return sits_tok_regex_compile(re ? re : lit, re == NULL, &p->re);
    }
    if (!strcmp(type, "ByteLevel")) {
        if (!(p = add_step(steps_p, n_p, &BYTELEVEL_OPS))) return SITS_ERR_NOMEM;
        p->flag = sits_tok_jbool(o, "add_prefix_space", 1);
        p->map_bytes = 1;  /* cleared by the loader when this is the last step */
        if (sits_tok_jbool(o, "use_regex", 1)) return sits_tok_regex_compile(GPT2_REGEX, 0, &p->re);
        return SITS_OK;
    }
    if (!strcmp(type, "Metaspace")) {
        const char *r = sits_tok_jstr(o, "replacement");
        if (!r || !*r) { TOK_ERR("tokenizer.json: Metaspace without replacement"); return SITS_ERR_FORMAT; }
        if (!(p = add_step(steps_p, n_p, &METASPACE_OPS))) return SITS_ERR_NOMEM;
        p->flag = sits_tok_jbool(o, "split", 1);
        if (!(p->replacement = strdup(r))) return SITS_ERR_NOMEM;
        return sits_tok_prepend_parse(o, &p->prepend);
    }
    if (!strcmp(type, "Digits"))
        return add_pred(steps_p, n_p, PRED_DIGIT, 0,
                        sits_tok_jbool(o, "individual_digits", 0) ? SITS_SPLIT_ISOLATED : SITS_SPLIT_CONTIGUOUS);
    if (!strcmp(type, "WhitespaceSplit")) return add_pred(steps_p, n_p, PRED_SPACE, 0, SITS_SPLIT_REMOVED);
    if (!strcmp(type, "Punctuation")) {
        sits_tok_split_behavior_t b = SITS_SPLIT_ISOLATED;
        if (sits_tok_jstr(o, "behavior")) SITS_CHECK(behavior_parse(sits_tok_jstr(o, "behavior"), &b));
        return add_pred(steps_p, n_p, PRED_PUNCT, 0, b);
    }
    if (!strcmp(type, "CharDelimiterSplit")) {
        const char *d = sits_tok_jstr(o, "delimiter");
        uint32_t cp;
        if (!d || !*d || sits_tok_utf8_next(d, strlen(d), &cp) != strlen(d)) {
            TOK_ERR("tokenizer.json: CharDelimiterSplit delimiter must be one character");
            return SITS_ERR_FORMAT;
        }
        return add_pred(steps_p, n_p, PRED_CHAR, cp, SITS_SPLIT_REMOVED);
    }
    if (!strcmp(type, "BertPreTokenizer")) {
        SITS_CHECK(add_pred(steps_p, n_p, PRED_SPACE, 0, SITS_SPLIT_REMOVED));
        return add_pred(steps_p, n_p, PRED_PUNCT, 0, SITS_SPLIT_ISOLATED);
    }
    if (!strcmp(type, "Whitespace")) {
        if (!(p = add_step(steps_p, n_p, &SPLIT_OPS))) return SITS_ERR_NOMEM;
        p->behavior = SITS_SPLIT_REMOVED;
        p->invert = 1;
        return sits_tok_regex_compile(WHITESPACE_REGEX, 0, &p->re);
    }
    if (!strcmp(type, "UnicodeScripts")) {
        if (!(p = add_step(steps_p, n_p, &SCRIPTS_OPS))) return SITS_ERR_NOMEM;
        return scripts_parse(p);
    }
    TOK_ERR("unsupported tokenizer component: pre_tokenizer %s", type);
    return SITS_ERR_UNSUPPORTED;
}

sits_status_t sits_tok_pre_parse(const json_t *o, sits_tok_pre_t **steps_p, size_t *n_p)
{
    return parse_one(o, steps_p, n_p);
}

void sits_tok_pre_free(sits_tok_pre_t *steps, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (steps[i].re) pcre2_code_free(steps[i].re);
        free(steps[i].replacement);
    }
    free(steps);
}

int sits_tok_pre_is_bytelevel(const sits_tok_pre_t *p) { return p->ops == &BYTELEVEL_OPS; }
