/* reasoning.c -- [reasoning] a reasoning model's thinking apart from its answer, as vLLM's --reasoning-parser
 * does it for /v1/chat/completions: message.reasoning_content / delta.reasoning_content, and content the rest.
 * Text-level: the markers are the strings "<think>" (S) and "</think>" (E), whatever tokens spell them.
 *
 * Parsers (vLLM's names and rules, vllm/reasoning/):
 *   deepseek_r1  DeepSeek-R1 and its distills (and QwQ, Qwen3.5: templates that open "<think>\n" in the prompt).
 *                The output is reasoning until the first E; a first S before it is dropped with what precedes
 *                it; no E at all: everything is reasoning, content null (BaseThinkingReasoningParser).
 *                A prompt whose last marker is E (the template closed the reasoning itself, e.g.
 *                enable_thinking false) starts in the answer: everything is content (vLLM's
 *                prompt_is_reasoning_end).
 *   qwen3        Qwen3 (the model writes S itself): reasoning only between the first S and the first E after
 *                it; the text before S is dropped; no S or no E after it: everything is content, markers
 *                included (Qwen3ReasoningParser of vLLM 0.9 / 0.10, before the Qwen3.5 rework).
 *   mistral      Magistral / Ministral 3 reasoning models: the markers are "[THINK]" and "[/THINK]" (control tokens in
 *                Mistral's tokenizers; the server keeps them as text for this parser). As qwen3, except that a [THINK]
 *                never closed makes the rest reasoning (vLLM's MistralReasoningParser: "only BOT" -> reasoning), and
 *                the text before [THINK] is dropped (vLLM joins it to the content; a model prompted as trained writes
 *                none) and a [/THINK] without [THINK] stays in the content (vLLM removes it).
 *   openai_gptoss gpt-oss's harmony messages (channels, not think markers): harmony.c.
 * Both: content is what follows E, as it is (the "\n\n" a template writes after E included), null when empty;
 * reasoning is a string, "" included ("</think>x": reasoning "" as vLLM), null when there is none.
 * Deviation from vLLM kept on purpose: S after the first E is content (vLLM's whole-text partition at the
 * first S anywhere turns an answer that quotes "<think>" into reasoning).
 *
 * Whole text (sits_srv_reasoning_split): one pass of those rules; reasoning and content are each a span of
 * the text. Stream (sits_srv_reasoning_stream_*): a state machine over the text as it comes, never showing
 * a marker: a suffix of the text that is a proper prefix of a marker the state looks for is held until the
 * next bytes decide (as textout.c holds stop strings), so a marker split over any number of tokens or pump
 * passes is found. Joined, the stream's segments equal the whole-text result except where vLLM's own
 * streaming differs from its whole-text parse (vLLM's tests say so: NEW_LINE vs NEW_LINE_STREAMING of
 * test_deepseekr1_reasoning_parser.py, ONLY_OPEN_TAG vs ONLY_OPEN_TAG_STREAM of test_qwen3_reasoning_parser.py):
 * the text before the first S streams as it is met (deepseek_r1: reasoning, qwen3: content) instead of
 * being dropped, a qwen3 S never closed streams as reasoning (the whole text would be content), and no
 * reasoning at all is absent rather than "".
 * Held bytes are a prefix of an ASCII marker, so every cut is on a character boundary. */
#include "server/srv_internal.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define S_MARK "<think>"
#define E_MARK "</think>"
enum { S_LEN = 7, E_LEN = 8 };

/* stream states */
enum { ST_PRE = 0, ST_THINK = 1, ST_DONE = 2 };

static const char *const names[] = { "none", "deepseek_r1", "qwen3", "auto", "openai_gptoss", "mistral" };
enum { N_NAMES = 6 };

int sits_srv_reasoning_from_name(const char *name)
{
    if (!name || !name[0]) return SITS_SRV_REASONING_NONE;
    for (int i = 0; i < N_NAMES; i++) if (strcmp(name, names[i]) == 0) return i;
    return -1;
}

const char *sits_srv_reasoning_name(int parser) { return parser >= 0 && parser < N_NAMES ? names[parser] : "?"; }

/* The parser's markers: mistral's [THINK] / [/THINK], the others' <think> / </think>. */
static void marks(int parser, const char **s, size_t *sl, const char **e, size_t *el)
{
    const int m = parser == SITS_SRV_REASONING_MISTRAL;
    *s = m ? "[THINK]" : S_MARK;
    *e = m ? "[/THINK]" : E_MARK;
    *sl = strlen(*s);
    *el = strlen(*e);
}

static const char *find(const char *s, size_t len, const char *m, size_t mlen)
{
    return mlen <= len ? memmem(s, len, m, mlen) : NULL;
}

/* The last marker of a rendered prompt is E: the template closed the reasoning itself. */
int sits_srv_reasoning_prompt_closed(const char *p, size_t len)
{
    for (size_t i = len; i-- > 0;) {
        if (p[i] != '<') continue;
        if (len - i >= S_LEN && memcmp(p + i, S_MARK, S_LEN) == 0) return 0;
        if (len - i >= E_LEN && memcmp(p + i, E_MARK, E_LEN) == 0) return 1;
    }
    return 0;
}

int sits_srv_reasoning_detect(const char *tmpl, const char *gen_prompt)
{
    if (!tmpl) return SITS_SRV_REASONING_NONE;
    if (strstr(tmpl, "<|channel|>")) return SITS_SRV_REASONING_HARMONY;   /* gpt-oss's harmony (harmony.c) */
    if (gen_prompt) {   /* the generation prompt opens the reasoning: "...<think>" + white space */
        size_t n = strlen(gen_prompt);
        while (n > 0 && (gen_prompt[n - 1] == '\n' || gen_prompt[n - 1] == ' ' || gen_prompt[n - 1] == '\r')) n--;
        if (n >= S_LEN && memcmp(gen_prompt + n - S_LEN, S_MARK, S_LEN) == 0) return SITS_SRV_REASONING_DEEPSEEK_R1;
    } else if (strstr(tmpl, "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c><think>")) {   /* no render: R1's "<｜Assistant｜><think>" */
        return SITS_SRV_REASONING_DEEPSEEK_R1;
    }
    if (strstr(tmpl, S_MARK) && strstr(tmpl, E_MARK)) return SITS_SRV_REASONING_QWEN3;   /* the model writes <think> */
    if (strstr(tmpl, "[THINK]") && strstr(tmpl, "[/THINK]")) return SITS_SRV_REASONING_MISTRAL;
    return SITS_SRV_REASONING_NONE;
}

int sits_srv_reasoning_auto(const sits_chat_t *chat)
{
    if (!sits_chat_available(chat)) return SITS_SRV_REASONING_NONE;
    json_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", "Hello"), *kw = json_pack("{s:b}", "enable_thinking", 1);
    sits_chat_input_t in = { .messages = msgs, .kwargs = kw, .add_generation_prompt = 1 };
    char *gen = NULL;
    if (!msgs || !kw || sits_chat_render(chat, &in, &gen, NULL, NULL) != SITS_OK) gen = NULL;
    int r = sits_srv_reasoning_detect(sits_chat_template_text(chat, 0), gen);
    free(gen);
    json_decref(msgs);
    json_decref(kw);
    return r;
}

void sits_srv_reasoning_split(int parser, int closed, const char *t, size_t len, sits_srv_reasoning_split_t *out)
{
    memset(out, 0, sizeof *out);
    out->c_len = len;   /* everything content unless the rules below say otherwise */
    const char *sm, *em;
    size_t sl, el;
    marks(parser, &sm, &sl, &em, &el);
    const char *s = find(t, len, sm, sl), *e;
    if (parser == SITS_SRV_REASONING_DEEPSEEK_R1 && !closed) {
        e = find(t, len, em, el);
        if (s && e && s > e) s = NULL;   /* an S after the first E is content (see the opening comment) */
    } else if ((parser == SITS_SRV_REASONING_QWEN3 || parser == SITS_SRV_REASONING_MISTRAL) && s) {
        e = find(s + sl, len - (size_t)(s - t) - sl, em, el);
        if (!e && parser == SITS_SRV_REASONING_QWEN3) return;   /* qwen3: S never closed: all content */
    } else {
        return;
    }
    size_t from = s ? (size_t)(s - t) + sl : 0;
    out->has_r = 1;
    out->r_off = from;
    if (!e) {   /* deepseek_r1 or mistral without E: all reasoning */
        out->r_len = len - from;
        out->c_off = len;
        out->c_len = 0;
        return;
    }
    out->r_len = (size_t)(e - t) - from;
    out->c_off = (size_t)(e - t) + el;
    out->c_len = len - out->c_off;
}

/* ---- streaming ---- */

sits_status_t sits_srv_reasoning_stream_init(sits_srv_reasoning_stream_t *r, int parser, int closed)
{
    memset(r, 0, sizeof *r);
    r->parser = parser;
    r->state = parser == SITS_SRV_REASONING_DEEPSEEK_R1 && closed ? ST_DONE : ST_PRE;
    return SITS_OK;
}

void sits_srv_reasoning_stream_fini(sits_srv_reasoning_stream_t *r)
{
    free(r->in);
    free(r->content);
    memset(r, 0, sizeof *r);
}

int sits_srv_grow(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 256;
    while (c < need) c *= 2;
    char *b = realloc(*buf, c);
    if (!b) return -1;
    *buf = b;
    *cap = c;
    return 0;
}

sits_status_t sits_srv_pending_push(char **in, size_t *off, size_t *len, size_t *cap, const char *text, size_t n)
{
    if (*off) {   /* drop what the last segments took */
        memmove(*in, *in + *off, *len - *off);
        *len -= *off;
        *off = 0;
    }
    if (n == 0) return SITS_OK;
    if (sits_srv_grow(in, cap, *len + n) != 0) return SITS_ERR_NOMEM;
    memcpy(*in + *len, text, n);
    *len += n;
    return SITS_OK;
}

sits_status_t sits_srv_reasoning_stream_push(sits_srv_reasoning_stream_t *r, const char *text, size_t len)
{
    return sits_srv_pending_push(&r->in, &r->in_off, &r->in_len, &r->in_cap, text, len);
}

/* The kind of text the state stands in: 1 reasoning, 0 content. */
static int state_reasoning(const sits_srv_reasoning_stream_t *r)
{
    if (r->state == ST_THINK) return 1;
    if (r->state == ST_DONE) return 0;
    return r->parser == SITS_SRV_REASONING_DEEPSEEK_R1;
}

/* The length of the longest suffix of s[0, n) that is a proper prefix of m. */
static size_t partial(const char *s, size_t n, const char *m, size_t mlen)
{
    for (size_t k = mlen - 1 < n ? mlen - 1 : n; k > 0; k--)
        if (memcmp(s + n - k, m, k) == 0) return k;
    return 0;
}

int sits_srv_reasoning_stream_next(sits_srv_reasoning_stream_t *r, int final, int *reasoning_p, const char **text_p,
                                   size_t *len_p)
{
    for (;;) {
        const char *p = r->in + r->in_off;
        size_t n = r->in_len - r->in_off;
        if (n == 0) return 0;
        /* the markers this state looks for: deepseek_r1 before its S: S and E; qwen3 before S: S; in the
         * reasoning: E; in the answer: none */
        int want_s = r->state == ST_PRE, want_e = r->state == ST_THINK ||
                     (r->state == ST_PRE && r->parser == SITS_SRV_REASONING_DEEPSEEK_R1);
        const char *sm, *em;
        size_t sl, el;
        marks(r->parser, &sm, &sl, &em, &el);
        const char *s = want_s ? find(p, n, sm, sl) : NULL, *e = want_e ? find(p, n, em, el) : NULL;
        const char *m = s && (!e || s < e) ? s : e;
        size_t take;
        if (m == p) {   /* a marker right here: drop it, change state */
            r->in_off += m == s ? sl : el;
            r->state = m == s ? ST_THINK : ST_DONE;
            continue;
        }
        if (m) {
            take = (size_t)(m - p);
        } else {
            size_t keep = 0, k;
            if (!final && want_s && (k = partial(p, n, sm, sl)) > keep) keep = k;
            if (!final && want_e && (k = partial(p, n, em, el)) > keep) keep = k;
            take = n - keep;
        }
        if (take == 0) return 0;
        int reasoning = state_reasoning(r);
        r->in_off += take;
        if (!reasoning) {   /* content: also kept whole (the tool-call parser reads all of it) */
            if (sits_srv_grow(&r->content, &r->content_cap, r->content_len + take + 1) != 0) return -1;
            memcpy(r->content + r->content_len, p, take);
            r->content_len += take;
            r->content[r->content_len] = 0;
            p = r->content + r->content_len - take;
        }
        *reasoning_p = reasoning;
        *text_p = p;
        *len_p = take;
        return 1;
    }
}
