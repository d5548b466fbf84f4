/* test_harmony.c -- [reasoning] gpt-oss's harmony output (src/server/harmony.c, --reasoning-parser openai_gptoss):
 * reasoning / content / tool calls, whole and streamed at every cut.
 *
 * Expected values, hand-transcribed (neither vLLM nor openai-harmony runs here):
 *   vLLM tests/entrypoints/openai/parser/test_harmony_utils.py, class TestParseChatOutput (the harmony strings
 *     are theirs verbatim; parse_chat_output's reasoning / final content; their None is NULL);
 *   vLLM tests/tool_use/test_openai_tool_parser.py (conversations built with openai_harmony's Message API,
 *     written here as the harmony docs render them: "<|start|>assistant<|channel|>commentary to=functions.X
 *     <|constrain|>json<|message|>ARGS<|call|>"; the first message's "<|start|>assistant" is the prompt's).
 *     Departure: vLLM's whole response re-dumps JSON arguments (json.dumps(json.loads(...))); we keep the
 *     model's text (as vLLM's stream does), so '{\n"location": "Tokyo"\n}' stays as written;
 *   the real gpt-oss chat template (tests/fixtures/templates/openai-gpt-oss-120b.jinja): an assistant turn
 *     with thinking and content, and one with thinking and a tool call, rendered after the generation
 *     prompt by the repo's Jinja engine and checked equal to python jinja2 3.1.6's rendering (quoted below);
 * and ours, from the rules in harmony.c's opening comment (messages joined with "\n", markup never shown,
 * a truncated call, malformed output recovered).
 * Every case: the whole parse, then the stream cut at each single cut, each pair of cuts and byte by byte:
 * its segments joined by kind equal the expected reasoning / content / calls, no segment holds a marker,
 * at most 12 bytes of a body are held, call heads come once with increasing indices. Then the names, auto
 * on real templates, the detokenizer's keep list (textout.c) on a tokenizer with special markup tokens, and
 * the whole path through the HTTP server as gpt-oss would drive it: the byte-level fixture tokenizer with
 * its reserved special tokens renamed to harmony's seven markers (ids inside the model's vocabulary, special
 * as in gpt-oss's tokenizer), gpt-oss's chat template, a fake scheduler (tests/server/fake_sched.c) that
 * returns the token ids of a harmony answer -- markup as single special ids, an unrelated special id among
 * them -- and responses read whole and streamed. Exit 0 pass, 1 fail (cmocka). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "server/srv_internal.h"
#include "fake_sched.h"
#include "http_client.h"
#include "tokenizer/chat.h"
#include "util/log.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    int tools, complete;
    const char *output;
    const char *reasoning, *content;   /* NULL: null */
    int n_calls;
    const char *calls[6][2];           /* name, arguments */
    int s_calls;                       /* calls the stream announces (a truncated one too); 0: n_calls */
} hcase_t;

#define PRE "<|start|>assistant"
static const hcase_t cases[] = {
    /* vLLM test_harmony_utils.py TestParseChatOutput */
    { "interrupted_first_message", 0, 0, "<|channel|>final<|message|>I'm in the middle of answering", NULL,
      "I'm in the middle of answering", 0, { { 0 } }, 0 },
    { "interrupted_reasoning_first_message", 0, 0, "<|channel|>analysis<|message|>I'm in the middle of thinking",
      "I'm in the middle of thinking", NULL, 0, { { 0 } }, 0 },
    { "complete_reasoning_interrupted_content", 0, 0,
      "<|channel|>analysis<|message|>I'm thinking.<|end|>" PRE "<|channel|>final<|message|>I'm in the middle of answering",
      "I'm thinking.", "I'm in the middle of answering", 0, { { 0 } }, 0 },
    { "complete_content", 0, 1, "<|channel|>final<|message|>The answer is 4.<|end|>", NULL, "The answer is 4.", 0, { { 0 } }, 0 },
    { "complete_commentary", 0, 1, "<|channel|>commentary<|message|>I need to call some tools.<|end|>", NULL,
      "I need to call some tools.", 0, { { 0 } }, 0 },
    { "complete_reasoning", 0, 1, "<|channel|>analysis<|message|>I've thought hard about this.<|end|>",
      "I've thought hard about this.", NULL, 0, { { 0 } }, 0 },
    { "complete_reasoning_and_content", 0, 1,
      "<|channel|>analysis<|message|>I've thought hard about this.<|end|>" PRE "<|channel|>final<|message|>The answer is 4.<|end|>",
      "I've thought hard about this.", "The answer is 4.", 0, { { 0 } }, 0 },
    { "commentary_with_recipient_excluded", 0, 1,
      "<|channel|>commentary<|message|>Let me check the weather.<|end|>" PRE " to=functions.get_weather<|channel|>commentary"
      "<|message|>{\"location\": \"SF\"}<|end|>",
      NULL, "Let me check the weather.", 0, { { 0 } }, 0 },
    { "interrupted_preamble", 0, 0, "<|channel|>commentary<|message|>I'll search for that", NULL, "I'll search for that", 0,
      { { 0 } }, 0 },
    { "preamble_then_final", 0, 1,
      "<|channel|>commentary<|message|>Let me look that up.<|end|>" PRE "<|channel|>final<|message|>The answer is 42.<|end|>",
      NULL, "Let me look that up.\nThe answer is 42.", 0, { { 0 } }, 0 },
    /* the same with tools: the call is a call */
    { "commentary_with_recipient, tools", 1, 1,
      "<|channel|>commentary<|message|>Let me check the weather.<|end|>" PRE " to=functions.get_weather<|channel|>commentary"
      "<|message|>{\"location\": \"SF\"}<|end|>",
      NULL, "Let me check the weather.", 1, { { "get_weather", "{\"location\": \"SF\"}" } }, 0 },
    /* vLLM test_openai_tool_parser.py */
    { "test_extract_tool_calls_no_tools", 1, 1, "<|channel|>final<|message|>This is a test<|return|>", NULL, "This is a test", 0,
      { { 0 } }, 0 },
    { "test_extract_tool_calls_single_tool", 1, 1,
      "<|channel|>analysis<|message|>User asks: \"What is the weather in Tokyo?\" We need to use get_current_weather tool.<|end|>"
      PRE "<|channel|>commentary to=functions.get_current_weather <|constrain|>json<|message|>{\"location\": \"Tokyo\"}<|call|>",
      "User asks: \"What is the weather in Tokyo?\" We need to use get_current_weather tool.", NULL, 1,
      { { "get_current_weather", "{\"location\": \"Tokyo\"}" } }, 0 },
    { "test_extract_tool_calls_single_tool (newlines)", 1, 1,
      "<|channel|>analysis<|message|>User asks: \"What is the weather in Tokyo?\" We need to use get_current_weather tool.<|end|>"
      PRE "<|channel|>commentary to=functions.get_current_weather <|constrain|>json<|message|>{\n\"location\": \"Tokyo\"\n}<|call|>",
      "User asks: \"What is the weather in Tokyo?\" We need to use get_current_weather tool.", NULL, 1,
      { { "get_current_weather", "{\n\"location\": \"Tokyo\"\n}" } }, 0 },
    { "test_extract_tool_calls_multiple_tools", 1, 1,
      "<|channel|>analysis<|message|>User asks: \"What is the weather in Tokyo?\" based on their location. We need to use "
      "get_current_weather tool and get_user_location tool.<|end|>"
      PRE "<|channel|>commentary to=functions.get_current_weather <|constrain|>json<|message|>{\"location\": \"Tokyo\"}<|call|>"
      PRE "<|channel|>commentary to=functions.get_user_location <|constrain|>json<|message|>{\"location\": \"Tokyo\"}<|call|>"
      PRE "<|channel|>commentary to=functions.no_content_type<|message|>{\"location\": \"Tokyo\"}<|call|>"
      PRE "<|channel|>commentary to=functions.not_json_no_content_type<|message|>foo<|call|>"
      PRE "<|channel|>commentary to=functions.empty_args <|constrain|>json<|message|>{}<|call|>"
      PRE "<|channel|>commentary to=functions.no_args <|constrain|>json<|message|><|call|>",
      "User asks: \"What is the weather in Tokyo?\" based on their location. We need to use get_current_weather tool and "
      "get_user_location tool.", NULL, 6,
      { { "get_current_weather", "{\"location\": \"Tokyo\"}" }, { "get_user_location", "{\"location\": \"Tokyo\"}" },
        { "no_content_type", "{\"location\": \"Tokyo\"}" }, { "not_json_no_content_type", "foo" }, { "empty_args", "{}" },
        { "no_args", "" } }, 0 },
    { "test_extract_tool_calls_with_content", 1, 1,
      "<|channel|>analysis<|message|>User asks: \"What is the weather in Tokyo?\" based on their location. We need to use "
      "get_current_weather tool and get_user_location tool.<|end|>"
      PRE "<|channel|>commentary to=functions.get_current_weather <|constrain|>json<|message|>{\"location\": \"Tokyo\"}<|call|>"
      PRE "<|channel|>final<|message|>This tool call will get the weather.<|end|>",
      "User asks: \"What is the weather in Tokyo?\" based on their location. We need to use get_current_weather tool and "
      "get_user_location tool.", "This tool call will get the weather.", 1, { { "get_current_weather", "{\"location\": \"Tokyo\"}" } }, 0 },
    /* ours */
    { "the brief's call, ended by <|call|> (a stop id: not in the text)", 1, 1,
      "<|channel|>analysis<|message|>Need weather.<|end|>" PRE "<|channel|>commentary to=functions.get_weather <|constrain|>json"
      "<|message|>{\"city\":\"Paris\"}", "Need weather.", NULL, 1, { { "get_weather", "{\"city\":\"Paris\"}" } }, 0 },
    { "a call cut at max_tokens: none in the whole response, announced in the stream", 1, 0,
      "<|channel|>analysis<|message|>Need weather.<|end|>" PRE "<|channel|>commentary to=functions.get_weather <|constrain|>json"
      "<|message|>{\"city\":\"Pa", "Need weather.", NULL, 0, { { "get_weather", "{\"city\":\"Pa" } }, 1 },
    { "a call without tools in the request: dropped", 0, 1,
      "<|channel|>analysis<|message|>Need weather.<|end|>" PRE "<|channel|>commentary to=functions.get_weather <|constrain|>json"
      "<|message|>{\"city\":\"Paris\"}", "Need weather.", NULL, 0, { { 0 } }, 0 },
    { "analysis messages joined with \\n", 0, 1,
      "<|channel|>analysis<|message|>one<|end|>" PRE "<|channel|>analysis<|message|>two<|end|>" PRE
      "<|channel|>final<|message|>A<|end|>" PRE "<|channel|>final<|message|>B<|return|>", "one\ntwo", "A\nB", 0, { { 0 } }, 0 },
    { "an empty message counts in the join", 0, 1,
      "<|channel|>final<|message|><|end|>" PRE "<|channel|>final<|message|>b", NULL, "\nb", 0, { { 0 } }, 0 },
    { "an empty open message does not", 0, 0,
      "<|channel|>final<|message|>a<|end|>" PRE "<|channel|>final<|message|>", NULL, "a", 0, { { 0 } }, 0 },
    { "no harmony at all: an unfinished header, nothing shown", 0, 0, "Hello there", NULL, NULL, 0, { { 0 } }, 0 },
    { "a header cut off", 0, 0, "<|channel|>analysis<|message|>t<|end|><|start|>assistant<|chan", "t", NULL, 0, { { 0 } }, 0 },
    { "< and <| in a body", 0, 1, "<|channel|>final<|message|>a < b, c <| d <|e|> f <|en", NULL, "a < b, c <| d <|e|> f <|en", 0,
      { { 0 } }, 0 },
    { "missing <|end|> before <|start|>", 0, 1,
      "<|channel|>analysis<|message|>think" PRE "<|channel|>final<|message|>ans", "think", "ans", 0, { { 0 } }, 0 },
    { "missing <|end|><|start|>assistant before <|channel|>", 0, 1,
      "<|channel|>analysis<|message|>think<|channel|>final<|message|>ans", "think", "ans", 0, { { 0 } }, 0 },
    { "stray <|constrain|> / <|message|> in a body, text between messages", 0, 1,
      "<|channel|>final<|message|>a<|constrain|>b<|message|>c<|end|>junk" PRE "<|channel|>final<|message|>d", NULL, "abc\nd", 0,
      { { 0 } }, 0 },
    { "a tool's reply the model made up (role functions.x): dropped", 1, 1,
      "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{}<|call|><|start|>functions.get_weather "
      "to=assistant<|channel|>commentary<|message|>{\"temp\": 20}<|end|>" PRE "<|channel|>final<|message|>Warm.",
      NULL, "Warm.", 1, { { "get_weather", "{}" } }, 0 },
    { "a built-in tool on the analysis channel: reasoning (as vLLM)", 1, 1,
      "<|channel|>analysis to=browser.search <|constrain|>json<|message|>{\"query\":\"x\"}<|end|>", "{\"query\":\"x\"}", NULL, 0,
      { { 0 } }, 0 },
    { "a header without channel: dropped", 0, 1, "<|message|>hidden<|end|>" PRE "<|channel|>final<|message|>shown", NULL, "shown", 0,
      { { 0 } }, 0 },
    { "a header that does not parse: dropped", 0, 1,
      "<|channel|>final a b c<|message|>hidden<|end|>" PRE "<|channel|>final<|message|>shown", NULL, "shown", 0, { { 0 } }, 0 },
    { "recipient before the channel, content type without <|constrain|> (the template's form)", 1, 1,
      PRE " to=functions.f<|channel|>commentary json<|message|>[1]<|call|>", NULL, NULL, 1, { { "f", "[1]" } }, 0 },
    { "utf-8", 0, 1, "<|channel|>analysis<|message|>\xe6\x97\xa5\xe6\x9c\xac<|end|>" PRE "<|channel|>final<|message|>\xe8\xaa\x9e",
      "\xe6\x97\xa5\xe6\x9c\xac", "\xe8\xaa\x9e", 0, { { 0 } }, 0 },
    /* the real template's assistant turns (after "<|start|>assistant"), python jinja2 3.1.6's rendering */
    { "template: thinking + content", 0, 1,
      "<|channel|>analysis<|message|>The user asks about Paris.<|end|><|start|>assistant<|channel|>final<|message|>It is sunny.<|return|>",
      "The user asks about Paris.", "It is sunny.", 0, { { 0 } }, 0 },
    { "template: thinking + tool call", 1, 1,
      "<|channel|>analysis<|message|>I need the weather tool.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary "
      "json<|message|>{\"city\": \"Paris\"}<|call|>",
      "I need the weather tool.", NULL, 1, { { "get_weather", "{\"city\": \"Paris\"}" } }, 0 },
};
enum { TEMPLATE_CASES = 2 };   /* the last ones, rendered again by test_template */

static void check_str(const char *what, const hcase_t *c, const char *got, size_t got_len, const char *want)
{
    int ok = want ? got && got_len == strlen(want) && memcmp(got, want, got_len) == 0 : got_len == 0;
    if (!ok)
        print_error("%s: %s is %s\"%.*s\", want %s%s%s\n", c->name, what, got ? "" : "null ", (int)got_len, got ? got : "",
                    want ? "\"" : "", want ? want : "null", want ? "\"" : "");
    assert_true(ok);
}

/* v is the JSON string want (printed when not). */
static void json_str_is(const json_t *v, const char *want)
{
    const char *got = json_string_value(v);
    if (!got || strcmp(got, want) != 0) print_error("got %s%s%s, want \"%s\"\n", got ? "\"" : "", got ? got : "no string", got ? "\"" : "", want);
    assert_true(got && strcmp(got, want) == 0);
}

static void test_whole(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const hcase_t *c = &cases[k];
        sits_srv_harmony_out_t o;
        assert_int_equal(sits_srv_harmony_parse(c->output, strlen(c->output), c->tools, c->complete, 7, &o), SITS_OK);
        check_str("whole reasoning", c, o.reasoning, o.r_len, c->reasoning);
        check_str("whole content", c, o.content, o.c_len, c->content);
        int n = o.calls ? (int)json_array_size(o.calls) : 0;
        if (n != c->n_calls) print_error("%s: %d calls, want %d\n", c->name, n, c->n_calls);
        assert_int_equal(n, c->n_calls);
        for (int i = 0; i < n; i++) {
            json_t *call = json_array_get(o.calls, (size_t)i), *f = json_object_get(call, "function");
            char id[40];
            sits_srv_tool_call_id(7, i, id);
            json_str_is(json_object_get(call, "id"), id);
            json_str_is(json_object_get(call, "type"), "function");
            json_str_is(json_object_get(f, "name"), c->calls[i][0]);
            json_str_is(json_object_get(f, "arguments"), c->calls[i][1]);
        }
        sits_srv_harmony_out_free(&o);
    }
}

typedef struct {
    char b[1024];
    size_t n;
} acc_t;

static void acc_add(acc_t *a, const char *t, size_t n)
{
    assert_true(a->n + n < sizeof a->b);
    memcpy(a->b + a->n, t, n);
    a->n += n;
}

static const char *const markers[] = { "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>",
                                       "<|call|>" };

/* One stream of case c cut at cuts[0..ncut), checked. */
static void run_stream(const hcase_t *c, const size_t *cuts, int ncut)
{
    sits_srv_harmony_t h;
    acc_t r = { .n = 0 }, ct = { .n = 0 }, name[6], args[6];
    int heads = 0;
    size_t n = strlen(c->output), at = 0;
    assert_int_equal(sits_srv_harmony_init(&h, c->tools), SITS_OK);
    for (int k = 0; k <= ncut; k++) {
        size_t to = k < ncut ? cuts[k] : n;
        int final = k == ncut, got;
        assert_int_equal(sits_srv_harmony_push(&h, c->output + at, to - at), SITS_OK);
        at = to;
        sits_srv_harmony_seg_t s;
        while ((got = sits_srv_harmony_next(&h, final, &s)) == 1) {
            char tmp[1024];
            assert_true(s.len < sizeof tmp);
            memcpy(tmp, s.text, s.len);
            tmp[s.len] = 0;
            for (size_t m = 0; m < sizeof markers / sizeof markers[0]; m++) {
                if (strstr(tmp, markers[m])) print_error("%s: a segment shows markup: \"%s\"\n", c->name, tmp);
                assert_null(strstr(tmp, markers[m]));
            }
            if (s.kind == SITS_SRV_HARMONY_CALL) {
                assert_int_equal(s.call, heads);   /* each head once, in order */
                assert_true(heads < 6);
                name[heads].n = args[heads].n = 0;
                acc_add(&name[heads], s.text, s.len);
                heads++;
            } else {
                assert_true(s.len > 0);
                if (s.kind == SITS_SRV_HARMONY_ARGS) {
                    assert_int_equal(s.call, heads - 1);   /* the open call's */
                    acc_add(&args[s.call], s.text, s.len);
                } else {
                    acc_add(s.kind == SITS_SRV_HARMONY_REASONING ? &r : &ct, s.text, s.len);
                }
            }
        }
        assert_int_equal(got, 0);
        if (final) assert_int_equal(h.in_len - h.in_off, 0);
        else if (h.state == 1) assert_true(h.in_len - h.in_off <= 12);   /* a body holds a marker's prefix at most */
    }
    check_str("streamed reasoning", c, r.n ? r.b : NULL, r.n, c->reasoning);
    check_str("streamed content", c, ct.n ? ct.b : NULL, ct.n, c->content);
    int want = c->s_calls ? c->s_calls : c->n_calls;
    if (heads != want) print_error("%s: the stream announced %d calls, want %d\n", c->name, heads, want);
    assert_int_equal(heads, want);
    for (int i = 0; i < heads; i++) {
        check_str("streamed call name", c, name[i].b, name[i].n, c->calls[i][0]);
        check_str("streamed call arguments", c, args[i].n ? args[i].b : "", args[i].n, c->calls[i][1]);
    }
    sits_srv_harmony_fini(&h);
}

static void test_stream_every_split(void **state)
{
    (void)state;
    long runs = 0;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const hcase_t *c = &cases[k];
        size_t n = strlen(c->output), cuts[1024];
        assert_true(n < sizeof cuts / sizeof cuts[0]);
        run_stream(c, cuts, 0);
        for (size_t a = 1; a < n; a++) {
            cuts[0] = a;
            run_stream(c, cuts, 1);
            for (size_t b = a + 1; b < n && n <= 200; b++) {   /* pairs on the shorter cases */
                cuts[1] = b;
                run_stream(c, cuts, 2);
                runs++;
            }
        }
        for (size_t a = 1; a < n; a++) cuts[a - 1] = a;   /* byte by byte */
        if (n > 1) run_stream(c, cuts, (int)n - 1);
    }
    assert_true(runs > 50000);
}

static void test_names(void **state)
{
    (void)state;
    assert_int_equal(sits_srv_reasoning_from_name("openai_gptoss"), SITS_SRV_REASONING_HARMONY);
    assert_string_equal(sits_srv_reasoning_name(SITS_SRV_REASONING_HARMONY), "openai_gptoss");
    assert_int_equal(sits_srv_tool_parser_from_name("openai"), SITS_SRV_TOOLS_OPENAI);
    assert_string_equal(sits_srv_tool_parser_name(SITS_SRV_TOOLS_OPENAI), "openai");
    assert_int_equal(sits_srv_tool_parser_from_name("auto"), SITS_SRV_TOOLS_AUTO);
    assert_int_equal(sits_srv_reasoning_detect("...<|start|>assistant<|channel|>final<|message|>...", NULL),
                     SITS_SRV_REASONING_HARMONY);
    char a[40], b[40];   /* ids: call k is the (k+1)-th of the seed's stream */
    sits_srv_tool_call_id(3, 0, a);
    sits_srv_tool_call_id(3, 1, b);
    assert_int_equal(strlen(a), 29);
    assert_memory_equal(a, "call_", 5);
    assert_string_not_equal(a, b);
}

static sits_chat_t *load_template(const char *file)
{
    const char *src = getenv("top_srcdir");
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/templates", src ? src : ".");
    snprintf(path, sizeof path, "%s/%s", dir, file);
    sits_chat_t *chat = NULL;
    if (sits_chat_load(dir, path, &chat) != SITS_OK) {
        print_error("cannot load %s\n", path);
        fail();
    }
    return chat;
}

/* auto and the tool-call format from the real gpt-oss template; the others keep theirs */
static void test_auto(void **state)
{
    (void)state;
    sits_chat_t *chat = load_template("openai-gpt-oss-120b.jinja");
    assert_int_equal(sits_srv_reasoning_auto(chat), SITS_SRV_REASONING_HARMONY);
    assert_int_equal(sits_srv_tool_parser_detect(sits_chat_template_text(chat, 1)), SITS_SRV_TOOLS_OPENAI);
    sits_chat_destroy(chat);
    chat = load_template("Qwen-Qwen3-0.6B.jinja");
    assert_int_equal(sits_srv_reasoning_auto(chat), SITS_SRV_REASONING_QWEN3);
    sits_chat_destroy(chat);
}

/* The template's assistant turns rendered by the repo's engine after the generation prompt: equal to
 * jinja2's (the cases above), and parsed as the turn's fields. */
static void test_template(void **state)
{
    (void)state;
    sits_chat_t *chat = load_template("openai-gpt-oss-120b.jinja");
    const char *turns[TEMPLATE_CASES] = {
        "{\"role\": \"assistant\", \"thinking\": \"The user asks about Paris.\", \"content\": \"It is sunny.\"}",
        "{\"role\": \"assistant\", \"thinking\": \"I need the weather tool.\", \"tool_calls\": [{\"type\": \"function\", "
        "\"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}}]}",
    };
    for (int k = 0; k < TEMPLATE_CASES; k++) {
        const hcase_t *c = &cases[sizeof cases / sizeof cases[0] - TEMPLATE_CASES + (size_t)k];
        json_t *user = json_pack("[{s:s, s:s}]", "role", "user", "content", "What is the weather in Paris?");
        json_t *all = json_deep_copy(user);
        json_array_append_new(all, json_loads(turns[k], 0, NULL));
        sits_chat_input_t in = { .messages = user, .add_generation_prompt = 1, .now = 1 };
        char *prompt = NULL, *full = NULL;
        assert_int_equal(sits_chat_render(chat, &in, &prompt, NULL, NULL), SITS_OK);
        in.messages = all;
        in.add_generation_prompt = 0;
        assert_int_equal(sits_chat_render(chat, &in, &full, NULL, NULL), SITS_OK);
        size_t pl = strlen(prompt);
        assert_true(pl >= 18 && memcmp(prompt + pl - 18, "<|start|>assistant", 18) == 0);
        assert_memory_equal(full, prompt, pl);
        if (strcmp(full + pl, c->output) != 0) print_error("rendered \"%s\"\n    jinja2 \"%s\"\n", full + pl, c->output);
        assert_string_equal(full + pl, c->output);
        free(prompt);
        free(full);
        json_decref(user);
        json_decref(all);
    }
    sits_chat_destroy(chat);
}

/* textout's keep list: the special markup tokens are text, the other special tokens are not */
static void test_keep_special(void **state)
{
    (void)state;
    static const char tj[] =
        "{\"added_tokens\": ["
        "{\"id\": 5, \"content\": \"<|channel|>\", \"special\": true}, {\"id\": 6, \"content\": \"<|message|>\", \"special\": true},"
        "{\"id\": 7, \"content\": \"<|endoftext|>\", \"special\": true}],"
        "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"c\": 2, \"d\": 3, \"e\": 4}, \"merges\": []},"
        "\"pre_tokenizer\": null, \"decoder\": {\"type\": \"ByteLevel\"}}";
    sits_tokenizer_t *tok = NULL;
    assert_int_equal(sits_tokenizer_load_json_string(tj, sizeof tj - 1, &tok), SITS_OK);
    const int32_t keep[] = { 5, 6 }, ids[] = { 5, 0, 6, 1, 7, 2 };
    for (int mode = 0; mode < 3; mode++) {   /* skip_special, keep list, skip_special_tokens false */
        sits_srv_textout_t t;
        assert_int_equal(sits_srv_textout_init_ex(&t, tok, NULL, NULL, 0, mode == 0, 0), SITS_OK);
        if (mode == 1) sits_srv_textout_keep(&t, keep, 2);
        assert_int_equal(sits_srv_textout_push(&t, ids, 6), SITS_OK);
        assert_int_equal(sits_srv_textout_finish(&t), SITS_OK);
        const char *want = mode == 0 ? "abc" : mode == 1 ? "<|channel|>a<|message|>bc" : "<|channel|>a<|message|>b<|endoftext|>c";
        if (t.out_len != strlen(want) || memcmp(t.out, want, t.out_len) != 0)
            print_error("mode %d: \"%.*s\", want \"%s\"\n", mode, (int)t.out_len, t.out, want);
        assert_int_equal(t.out_len, strlen(want));
        assert_memory_equal(t.out, want, t.out_len);
        sits_srv_textout_fini(&t);
    }
    sits_tokenizer_destroy(tok);
}

/* The byte-level fixture tokenizer with harmony's markers in place of its reserved special tokens. */
static sits_tokenizer_t *markup_tokenizer(const char *src)
{
    static const struct { int id; const char *content; } ren[] = {
        { 3002, "<|start|>" }, { 3003, "<|end|>" }, { 3004, "<|message|>" }, { 3005, "<|channel|>" },
        { 3008, "<|constrain|>" }, { 3010, "<|return|>" }, { 3011, "<|call|>" },
    };
    char path[1200];
    snprintf(path, sizeof path, "%s/tests/fixtures/tokenizers/bytelevel/tokenizer.json", src);
    json_t *t = json_load_file(path, 0, NULL), *added = json_object_get(t, "added_tokens");
    assert_non_null(added);
    for (size_t i = 0; i < json_array_size(added); i++) {
        json_t *a = json_array_get(added, i);
        for (size_t k = 0; k < sizeof ren / sizeof ren[0]; k++)
            if (json_integer_value(json_object_get(a, "id")) == ren[k].id) {
                json_object_set_new(a, "content", json_string(ren[k].content));
                json_object_set_new(a, "lstrip", json_false());
                json_object_set_new(a, "rstrip", json_false());
                assert_true(json_is_true(json_object_get(a, "special")));
            }
    }
    char *js = json_dumps(t, 0);
    sits_tokenizer_t *tok = NULL;
    assert_int_equal(sits_tokenizer_load_json_string(js, strlen(js), &tok), SITS_OK);
    free(js);
    json_decref(t);
    return tok;
}

/* A stream's SSE body joined: reasoning, content, call 0's name / arguments, finish, and no markup anywhere. */
static void join_stream(const char *body, acc_t *r, acc_t *c, acc_t *name, acc_t *args, char *finish)
{
    for (const char *p = body; (p = strstr(p, "data: ")) != NULL; p += 6) {
        if (strncmp(p + 6, "[DONE]", 6) == 0) break;
        json_error_t je;
        json_t *ev = json_loadb(p + 6, strcspn(p + 6, "\n"), 0, &je), *ch = json_array_get(json_object_get(ev, "choices"), 0);
        json_t *d = json_object_get(ch, "delta"), *tc = json_array_get(json_object_get(d, "tool_calls"), 0);
        const char *rv = json_string_value(json_object_get(d, "reasoning_content")), *cv = json_string_value(json_object_get(d, "content"));
        if (rv) acc_add(r, rv, strlen(rv));
        if (cv) acc_add(c, cv, strlen(cv));
        json_t *f = json_object_get(tc, "function");
        if (json_string_value(json_object_get(f, "name"))) acc_add(name, json_string_value(json_object_get(f, "name")), strlen(json_string_value(json_object_get(f, "name"))));
        if (json_string_value(json_object_get(f, "arguments")))
            acc_add(args, json_string_value(json_object_get(f, "arguments")), strlen(json_string_value(json_object_get(f, "arguments"))));
        if (json_string_value(json_object_get(ch, "finish_reason"))) strcpy(finish, json_string_value(json_object_get(ch, "finish_reason")));
        json_decref(ev);
    }
    for (size_t m = 0; m < sizeof markers / sizeof markers[0]; m++) assert_null(strstr(body, markers[m]));
}

static void test_server_markup_tokens(void **state)
{
    (void)state;
    const char *src = getenv("top_srcdir");
    if (!src) src = ".";
    sits_tokenizer_t *tok = markup_tokenizer(src);
    sits_chat_t *chat = load_template("openai-gpt-oss-120b.jinja");
    static fake_sched_t f;
    fake_sched_init(&f, tok, 3009);
    f.delay_ms = 1;
    sits_server_params_t p = { .host = "127.0.0.1", .port = 0, .model_name = "m", .max_model_len = 4096,
                               .max_body_bytes = 65536, .default_max_tokens = 200, .seed = 1, .chat = chat,
                               .reasoning_parser = "auto" };
    sits_server_t *srv = NULL;
    assert_int_equal(sits_server_create(&p, tok, &fake_sched_api, &f, &srv), SITS_OK);
    int port = sits_server_port(srv);
    /* the answer gpt-oss would give, as ids: each marker one special id; <|begin_of_text|> (special, not
     * markup) slipped into the answer must not show */
    const char *text = "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
                       "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}";
    int32_t *ids = NULL, script[256];
    size_t n = 0;
    assert_int_equal(sits_tokenizer_encode(tok, text, strlen(text), 0, &ids, &n), SITS_OK);
    int specials = 0;
    for (size_t i = 0; i < n; i++) specials += ids[i] >= 3002 && ids[i] <= 3011;
    assert_int_equal(specials, 7);   /* the markup came as single special ids */
    assert_true(n + 1 < sizeof script / sizeof script[0]);
    memcpy(script, ids, n * sizeof *ids);
    free(ids);
    const char *tail = "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>final<|message|>Sunny.";
    for (int with_tools = 1; with_tools >= 0; with_tools--) {
        int32_t *tids = NULL;
        size_t tn = 0;
        if (with_tools) {
            f.n_script = (int)n;
        } else {   /* no tools: the final answer, a stray special id inside it */
            assert_int_equal(sits_tokenizer_encode(tok, tail, strlen(tail), 0, &tids, &tn), SITS_OK);
            memcpy(script, tids, (tn - 2) * sizeof *tids);
            script[tn - 2] = 3000;
            memcpy(script + tn - 1, tids + tn - 2, 2 * sizeof *tids);
            f.n_script = (int)tn + 1;
            free(tids);
        }
        f.script = script;
        f.script_finish = SITS_FINISH_STOP;
        char body[1024];
        snprintf(body, sizeof body, "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"Weather?\"}]%s}",
                 with_tools ? ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": "
                              "\"d\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}}]" : "");
        http_resp_t r;
        assert_int_equal(http_request(port, "POST", "/v1/chat/completions", "Content-Type: application/json\r\n", body, strlen(body), &r), 0);
        if (r.status != 200) print_error("status %d: %s\n", r.status, r.body);
        assert_int_equal(r.status, 200);
        json_t *o = json_loads(r.body, 0, NULL), *ch = json_array_get(json_object_get(o, "choices"), 0);
        json_t *msg = json_object_get(ch, "message"), *call = json_array_get(json_object_get(msg, "tool_calls"), 0);
        json_str_is(json_object_get(msg, "reasoning_content"), "Need the weather.");
        if (with_tools) {
            assert_true(json_is_null(json_object_get(msg, "content")));
            json_str_is(json_object_get(ch, "finish_reason"), "tool_calls");
            json_str_is(json_object_get(json_object_get(call, "function"), "name"), "get_weather");
            json_str_is(json_object_get(json_object_get(call, "function"), "arguments"), "{\"city\": \"Paris\"}");
        } else {
            json_str_is(json_object_get(msg, "content"), "Sunny.");
            assert_null(call);
            json_str_is(json_object_get(ch, "finish_reason"), "stop");
        }
        json_decref(o);
        http_resp_free(&r);
        /* streamed */
        char sbody[1100];
        snprintf(sbody, sizeof sbody, "%.*s, \"stream\": true}", (int)strlen(body) - 1, body);
        assert_int_equal(http_request(port, "POST", "/v1/chat/completions", "Content-Type: application/json\r\n", sbody, strlen(sbody), &r), 0);
        assert_int_equal(r.status, 200);
        acc_t rs = { .n = 0 }, cs = { .n = 0 }, nm = { .n = 0 }, ar = { .n = 0 };
        char fin[32] = "";
        join_stream(r.body, &rs, &cs, &nm, &ar, fin);
        check_str("server stream reasoning", &cases[0], rs.b, rs.n, "Need the weather.");
        check_str("server stream content", &cases[0], cs.n ? cs.b : NULL, cs.n, with_tools ? NULL : "Sunny.");
        check_str("server stream call", &cases[0], nm.n ? nm.b : NULL, nm.n, with_tools ? "get_weather" : NULL);
        check_str("server stream arguments", &cases[0], ar.n ? ar.b : NULL, ar.n, with_tools ? "{\"city\": \"Paris\"}" : NULL);
        assert_string_equal(fin, with_tools ? "tool_calls" : "stop");
        http_resp_free(&r);
    }
    sits_server_destroy(srv);
    fake_sched_fini(&f);
    sits_chat_destroy(chat);
    sits_tokenizer_destroy(tok);
}

int main(void)
{
    sits_log_init(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole),
        cmocka_unit_test(test_stream_every_split),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_auto),
        cmocka_unit_test(test_template),
        cmocka_unit_test(test_keep_special),
        cmocka_unit_test(test_server_markup_tokens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
