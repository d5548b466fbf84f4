/* harmony.c -- [reasoning] gpt-oss's harmony output (--reasoning-parser openai_gptoss): the analysis channel
 * apart as reasoning_content, the final channel (and commentary preambles) as content, and with tools the
 * commentary messages addressed to functions.NAME as tool calls -- what vLLM makes of openai/gpt-oss-20b
 * (vllm/entrypoints/harmony_utils.py parse_chat_output, tool_parsers/openai_tool_parser.py, and
 * serving_chat.py's harmony stream).
 *
 * The format (openai-harmony, src/encoding.rs StreamableParser): after the template's generation prompt
 * "<|start|>assistant" the model writes messages
 *     HEADER <|message|> BODY (<|end|> | <|return|> | <|call|>)
 * the first one's header without a role, each next one opened by "<|start|>" + role. A header is
 *     [role] [" to=" RECIPIENT] ["<|channel|>" CHANNEL] [" to=" RECIPIENT] [" " ["<|constrain|>"] CONTENT_TYPE]
 * parsed as harmony does (parse_header_from_tokens): the channel is the word after <|channel|> (up to white
 * space or '<'), the rest splits on white space (and before <|constrain|>); a leading role word goes; the
 * last word is the recipient when it starts "to=" or stands alone, else the content type with the
 * recipient before it. <|return|> and <|call|> are gpt-oss's stop ids (generation_config): the server ends
 * the output there and they never reach the text, so a message still open when the output ends by itself
 * is complete.
 *
 * Text-level: the markers are the seven strings <|start|> <|end|> <|message|> <|channel|> <|constrain|>
 * <|return|> <|call|> (special tokens the server keeps as text for this parser: textout.c's keep list).
 * A message's kind, from its header:
 *   recipient functions.NAME, the request has tools  -> a tool call NAME, arguments its body as written
 *   channel analysis                                  -> reasoning (built-in tools' calls too, as vLLM)
 *   channel final, or commentary without recipient   -> content (a commentary preamble is shown, as vLLM)
 *   anything else (a call without tools, a header that does not parse)  -> dropped
 * Reasoning is the analysis bodies joined with "\n", content the content bodies joined with "\n"
 * (parse_chat_output), each null when empty. Markup never reaches the client: headers are held whole, a
 * body shows up to its end marker, and only a suffix that is a proper prefix of a marker is held.
 * Departures from vLLM, on purpose: a stream joins messages with the same "\n" as the whole response (vLLM's
 * stream leaves it out); the arguments are the model's text in both (vLLM's whole response re-dumps JSON
 * arguments with Python's separators); a marker spelled in ordinary tokens counts as a marker (vLLM parses
 * token ids); malformed output is recovered rather than refused: <|start|> or <|channel|> inside a body
 * ends it and opens the next header (a missing <|end|>), <|message|> / <|constrain|> inside a body are
 * dropped, text between messages is dropped, a header cut off by the end of the output is dropped. */
#include "server/srv_internal.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

enum { M_START, M_END, M_MESSAGE, M_CHANNEL, M_CONSTRAIN, M_RETURN, M_CALL, N_MARK };
static const char *const marks[N_MARK] = { "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>",
                                           "<|return|>", "<|call|>" };
static const size_t mark_len[N_MARK] = { 9, 7, 11, 11, 13, 10, 8 };

/* stream states */
enum { H_HEAD = 0, H_BODY = 1, H_IDLE = 2 };

/* The first marker of the set `want` (a bit per M_*) in s[0, n): its index, *at_p its offset; -1 none. */
static int first_mark(const char *s, size_t n, unsigned want, size_t *at_p)
{
    int best = -1;
    size_t at = n;
    if (n == 0) {   /* s may be NULL then (an empty buffer): memchr must not see it */
        *at_p = 0;
        return -1;
    }
    for (const char *p = s; (p = memchr(p, '<', (size_t)(s + n - p))) != NULL && (size_t)(p - s) < at; p++)
        for (int m = 0; m < N_MARK; m++)
            if ((want >> m & 1) && (size_t)(s + n - p) >= mark_len[m] && memcmp(p, marks[m], mark_len[m]) == 0) {
                best = m;
                at = (size_t)(p - s);
                break;
            }
    *at_p = at;
    return best;
}

/* The length of the longest suffix of s[0, n) that is a proper prefix of a marker of `want`. */
static size_t partial(const char *s, size_t n, unsigned want)
{
    for (size_t k = n < 12 ? n : 12; k > 0; k--)
        for (int m = 0; m < N_MARK; m++)
            if ((want >> m & 1) && k < mark_len[m] && memcmp(s + n - k, marks[m], k) == 0) return k;
    return 0;
}

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; }

static int word_is(const char *w, size_t n, const char *s) { return strlen(s) == n && memcmp(w, s, n) == 0; }

/* One header (the text before <|message|>) as harmony parses it: channel and recipient (spans of hdr, or
 * length 0 when absent; a recipient may be given but empty). role_given: the first message, whose role
 * the prompt wrote. 0, or -1 when it does not parse. */
static int parse_header(const char *hdr, size_t n, int role_given, const char **chan_p, size_t *chan_len_p,
                        const char **rcpt_p, size_t *rcpt_len_p, int *has_rcpt_p)
{
    enum { MAX_WORDS = 8 };
    const char *w[MAX_WORDS];
    size_t wl[MAX_WORDS];
    int nw = 0;
    size_t at;
    *chan_p = NULL;
    *chan_len_p = 0;
    *has_rcpt_p = 0;
    size_t cut_from = n, cut_to = n;   /* the "<|channel|>" + CHANNEL span, left out of the words */
    if (first_mark(hdr, n, 1u << M_CHANNEL, &at) == M_CHANNEL) {
        size_t v = at + mark_len[M_CHANNEL], e = v;
        while (e < n && !is_ws(hdr[e]) && hdr[e] != '<') e++;
        if (e == v) return -1;   /* a channel marker without a channel */
        *chan_p = hdr + v;
        *chan_len_p = e - v;
        cut_from = at;
        cut_to = e;
    }
    for (size_t i = 0; i < n;) {   /* words: white space apart, and a word also ends before <|constrain|> */
        if (i == cut_from) {
            i = cut_to;
            continue;
        }
        if (is_ws(hdr[i])) {
            i++;
            continue;
        }
        size_t s = i++;
        while (i < n && i != cut_from && !is_ws(hdr[i]) &&
               !(n - i >= mark_len[M_CONSTRAIN] && memcmp(hdr + i, marks[M_CONSTRAIN], mark_len[M_CONSTRAIN]) == 0))
            i++;
        if (nw == MAX_WORDS) return -1;
        w[nw] = hdr + s;
        wl[nw++] = i - s;
    }
    int first = 0;
    if (!role_given) {
        static const char *const roles[] = { "system", "developer", "user", "assistant", "tool" };
        if (nw == 0) return -1;   /* no role */
        int known = 0;
        for (size_t r = 0; r < sizeof roles / sizeof roles[0]; r++) known |= word_is(w[0], wl[0], roles[r]);
        if (!known && !(nw > 1 || (wl[0] >= 3 && memcmp(w[0], "to=", 3) == 0))) return -1;   /* an unknown role */
        first = 1;   /* a known role, or a tool's name (harmony: role tool) */
    } else if (nw > 0 && word_is(w[0], wl[0], "assistant")) {
        first = 1;
    }
    int left = nw - first;
    if (left == 0) return 0;
    const char *last = w[nw - 1], *r = NULL;
    size_t last_len = wl[nw - 1], r_len = 0;
    if (last_len >= 3 && memcmp(last, "to=", 3) == 0) {
        r = last + 3;
        r_len = last_len - 3;
        left--;
    } else if (left == 1) {
        r = last;
        r_len = last_len;
        left--;
    } else {   /* the last word is the content type, the one before it the recipient */
        r = w[nw - 2];
        r_len = wl[nw - 2];
        if (r_len >= 3 && memcmp(r, "to=", 3) == 0) {
            r += 3;
            r_len -= 3;
        }
        left -= 2;
    }
    if (left != 0) return -1;   /* words left over */
    *rcpt_p = r;
    *rcpt_len_p = r_len;
    *has_rcpt_p = 1;
    return 0;
}

sits_status_t sits_srv_harmony_init(sits_srv_harmony_t *h, int tools)
{
    memset(h, 0, sizeof *h);
    h->tools = tools;
    h->state = H_HEAD;
    h->role_given = 1;   /* the generation prompt wrote "<|start|>assistant" */
    h->kind = -1;
    return SITS_OK;
}

void sits_srv_harmony_fini(sits_srv_harmony_t *h)
{
    free(h->in);
    free(h->name);
    memset(h, 0, sizeof *h);
}

sits_status_t sits_srv_harmony_push(sits_srv_harmony_t *h, const char *text, size_t len)
{
    return sits_srv_pending_push(&h->in, &h->in_off, &h->in_len, &h->in_cap, text, len);
}

/* The header hdr[n] is complete: the next message's kind (a call's name kept in h->name). */
static int open_message(sits_srv_harmony_t *h, const char *hdr, size_t n)
{
    const char *ch, *rc = NULL;
    size_t ch_len, rc_len = 0;
    int has_rc;
    h->kind = -1;
    h->sep = 0;
    if (parse_header(hdr, n, h->role_given, &ch, &ch_len, &rc, &rc_len, &has_rc) != 0) return 0;   /* dropped */
    if (has_rc && h->tools && rc_len >= 10 && memcmp(rc, "functions.", 10) == 0) {
        char *name = malloc(rc_len - 10 + 1);
        if (!name) return -1;
        memcpy(name, rc + 10, rc_len - 10);
        name[rc_len - 10] = 0;
        free(h->name);
        h->name = name;
        h->name_len = rc_len - 10;
        h->kind = SITS_SRV_HARMONY_CALL;
        h->call = h->n_calls++;
        return 0;
    }
    if (word_is(ch ? ch : "", ch_len, "analysis")) h->kind = SITS_SRV_HARMONY_REASONING;
    else if (word_is(ch ? ch : "", ch_len, "final") || (word_is(ch ? ch : "", ch_len, "commentary") && !has_rc))
        h->kind = SITS_SRV_HARMONY_CONTENT;
    if (h->kind >= 0) h->sep = h->n_msgs[h->kind]++ > 0;   /* vLLM joins a kind's messages with "\n" */
    return 0;
}

/* The segment of kind h->kind (its "\n" separator first when owed): 1. */
static int body_seg(sits_srv_harmony_t *h, const char *p, size_t n, sits_srv_harmony_seg_t *seg)
{
    seg->kind = h->kind == SITS_SRV_HARMONY_CALL ? SITS_SRV_HARMONY_ARGS : h->kind;
    seg->call = h->kind == SITS_SRV_HARMONY_CALL ? h->call : -1;
    if (h->sep) {
        h->sep = 0;
        seg->text = "\n";
        seg->len = 1;
        return 1;
    }
    seg->text = p;
    seg->len = n;
    h->in_off += n;
    return 1;
}

int sits_srv_harmony_next(sits_srv_harmony_t *h, int final, sits_srv_harmony_seg_t *seg)
{
    const unsigned all = (1u << N_MARK) - 1, open = 1u << M_START | 1u << M_CHANNEL;
    const unsigned head_stop = 1u << M_MESSAGE | 1u << M_START | 1u << M_END | 1u << M_RETURN | 1u << M_CALL;
    for (;;) {
        const char *p = h->in + h->in_off;
        size_t n = h->in_len - h->in_off, at;
        if (h->state == H_IDLE) {   /* between messages: wait for <|start|> (or a bare <|channel|>) */
            int m = first_mark(p, n, open, &at);
            if (m < 0) {
                h->in_off += n - (final ? 0 : partial(p, n, open));
                return 0;
            }
            h->in_off += at + (m == M_START ? mark_len[M_START] : 0);   /* a bare <|channel|> stays in the header */
            h->state = H_HEAD;
            h->role_given = m == M_CHANNEL;
            continue;
        }
        if (h->state == H_HEAD) {   /* held whole until <|message|>; searched once (a marker's length back) */
            size_t from = h->head_seen > 12 ? h->head_seen - 12 : 0;
            int m = first_mark(p + from, n - from, head_stop, &at);
            at += from;
            if (m < 0) {
                h->head_seen = final ? 0 : n;
                if (final) h->in_off += n;   /* cut off: dropped */
                return 0;
            }
            h->head_seen = 0;
            if (m == M_MESSAGE) {
                if (open_message(h, p, at) != 0) return -1;
                h->in_off += at + mark_len[M_MESSAGE];
                h->state = H_BODY;
                if (h->kind == SITS_SRV_HARMONY_CALL) {   /* a call's head as soon as its name is known */
                    seg->kind = SITS_SRV_HARMONY_CALL;
                    seg->call = h->call;
                    seg->text = h->name;
                    seg->len = h->name_len;
                    return 1;
                }
            } else {   /* <|start|> restarts the header; an end marker abandons it */
                h->in_off += at + mark_len[m];
                h->state = m == M_START ? H_HEAD : H_IDLE;
                h->role_given = 0;
            }
            continue;
        }
        /* H_BODY */
        int m = first_mark(p, n, all, &at);
        if (m < 0) at = n - (final ? 0 : partial(p, n, all));
        if (at > 0) {
            if (h->kind < 0) {   /* a dropped message */
                h->in_off += at;
                continue;
            }
            return body_seg(h, p, at, seg);
        }
        if (m < 0) return 0;
        if (m == M_MESSAGE || m == M_CONSTRAIN) {   /* stray header markup inside a body: dropped */
            h->in_off += mark_len[m];
            continue;
        }
        /* the message ends: an empty one still counts in the join (its separator goes out now) */
        if (h->sep && h->kind >= 0 && h->kind != SITS_SRV_HARMONY_CALL) return body_seg(h, p, 0, seg);
        h->kind = -1;
        h->sep = 0;
        if (m == M_CHANNEL) {   /* a new header without <|start|>assistant */
            h->state = H_HEAD;
            h->role_given = 1;
        } else {
            h->in_off += mark_len[m];
            h->state = m == M_START ? H_HEAD : H_IDLE;
            h->role_given = 0;
        }
    }
}

/* ---- a whole output ---- */

typedef struct {
    char *b;
    size_t n, cap;
} buf_t;

static int buf_add(buf_t *b, const char *s, size_t n)
{
    if (sits_srv_grow(&b->b, &b->cap, b->n + n + 1) != 0) return -1;
    memcpy(b->b + b->n, s, n);
    b->n += n;
    b->b[b->n] = 0;
    return 0;
}

/* args as the arguments of calls' last entry (none: nothing to do). 0, or -1 out of memory. */
static int set_args(json_t *calls, const buf_t *args)
{
    json_t *f = json_object_get(json_array_get(calls, json_array_size(calls) - 1), "function");
    return f ? json_object_set_new(f, "arguments", json_stringn(args->b ? args->b : "", args->n)) : 0;
}

sits_status_t sits_srv_harmony_parse(const char *text, size_t len, int tools, int complete, uint64_t seed,
                                     sits_srv_harmony_out_t *out)
{
    sits_srv_harmony_t h;
    sits_srv_harmony_seg_t seg;
    buf_t r = { 0 }, c = { 0 }, args = { 0 };
    json_t *calls = json_array();
    int rc;
    memset(out, 0, sizeof *out);
    sits_srv_harmony_init(&h, tools);
    if (!calls || sits_srv_harmony_push(&h, text, len) != SITS_OK) goto oom;
    while ((rc = sits_srv_harmony_next(&h, 1, &seg)) == 1) {
        if (seg.kind == SITS_SRV_HARMONY_CALL) {   /* the previous call's arguments are complete */
            char id[40], *name = strndup(seg.text, seg.len);
            sits_srv_tool_call_id(seed, seg.call, id);
            json_t *o = name ? json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function", "function", "name",
                                         name, "arguments", "")
                             : NULL;
            free(name);
            if (set_args(calls, &args) != 0 || !o || json_array_append_new(calls, o) != 0) goto oom;
            args.n = 0;
        } else if (buf_add(seg.kind == SITS_SRV_HARMONY_ARGS ? &args : seg.kind == SITS_SRV_HARMONY_REASONING ? &r : &c,
                           seg.text, seg.len) != 0) {
            goto oom;
        }
    }
    if (rc < 0 || set_args(calls, &args) != 0) goto oom;
    /* a call still open when the output was cut (not ended by itself) is no call (vLLM: complete messages) */
    if (!complete && h.state == H_BODY && h.kind == SITS_SRV_HARMONY_CALL) json_array_remove(calls, json_array_size(calls) - 1);
    sits_srv_harmony_fini(&h);
    free(args.b);
    out->reasoning = r.b;
    out->r_len = r.n;
    out->content = c.b;
    out->c_len = c.n;
    if (json_array_size(calls) > 0) out->calls = calls;
    else json_decref(calls);
    return SITS_OK;
oom:
    sits_srv_harmony_fini(&h);
    free(r.b);
    free(c.b);
    free(args.b);
    json_decref(calls);
    return SITS_ERR_NOMEM;
}

void sits_srv_harmony_out_free(sits_srv_harmony_out_t *out)
{
    free(out->reasoning);
    free(out->content);
    json_decref(out->calls);
    memset(out, 0, sizeof *out);
}
