/* test_tools.c -- [tool calls] the output parsers (src/server/tools.c) on model outputs in each family's
 * documented format, the parser choice from real chat templates (tests/fixtures/templates), and the
 * forced-call grammars: for tool_choice required / named, a grammar built the way the server builds it
 * must accept the family's canonical call text and refuse near misses. Streaming: the same outputs fed to
 * the stream step a byte at a time, the deltas joined the way the openai client joins them (id, type and
 * name from a call's first delta, arguments concatenated), must give the expected calls and content,
 * every call's first delta with arguments "" and no content once a call began.
 * Expected calls are written from the formats' definitions (Hermes / Qwen2.5 function-calling docs,
 * Llama 3.1 model card, Mistral's [TOOL_CALLS]) -- not produced by the code under test; qwen3_coder's are
 * vLLM's own cases (tests/tool_use/test_qwen3coder_tool_parser.py: outputs, tools, expected calls and content).
 * usage: test_tools [SRCDIR] (top_srcdir from the environment otherwise). Exit 0 pass, 1 fail. */
#include "server/srv_internal.h"
#include "grammar/grammar.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;
static json_t *g_tools;   /* [qwen3_coder] the request's tools (they type the values); NULL for the other formats */

#define CHECK(cond_, ...) do { if (!(cond_)) { printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); \
    printf("\n"); failures++; } } while (0)

/* parse text; expect n calls with these names and argument objects (JSON text), and content */
static void expect_whole(int parser, const char *text, int n, const char *const *names, const char *const *args, const char *content)
{
    size_t clen = 0;
    json_t *calls = sits_srv_tool_calls_parse(parser, g_tools, text, strlen(text), 7, &clen);
    if (n == 0) {
        CHECK(!calls, "%s: %.60s... parsed as %zu calls", sits_srv_tool_parser_name(parser), text, json_array_size(calls));
        json_decref(calls);
        return;
    }
    CHECK(calls && (int)json_array_size(calls) == n, "%s: %.60s...: %zu calls, want %d", sits_srv_tool_parser_name(parser), text,
          calls ? json_array_size(calls) : 0, n);
    for (int i = 0; calls && i < n && i < (int)json_array_size(calls); i++) {
        json_t *c = json_array_get(calls, i), *fn = json_object_get(c, "function");
        const char *id = json_string_value(json_object_get(c, "id"));
        /* mistral: 9 letters and digits (its templates refuse other ids in the history, as vLLM's MistralToolCall) */
        CHECK(id && (parser == SITS_SRV_TOOLS_MISTRAL ? strlen(id) == 9 && strspn(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") == 9
                                                       : strncmp(id, "call_", 5) == 0 && strlen(id) == 29), "call id %s", id ? id : "(none)");
        CHECK(!strcmp(json_string_value(json_object_get(c, "type")), "function"), "type");
        CHECK(!strcmp(json_string_value(json_object_get(fn, "name")), names[i]), "name %s, want %s",
              json_string_value(json_object_get(fn, "name")), names[i]);
        json_t *got = json_loads(json_string_value(json_object_get(fn, "arguments")), 0, NULL);
        json_t *want = json_loads(args[i], 0, NULL);
        CHECK(got && want && json_equal(got, want), "arguments %s, want %s", json_string_value(json_object_get(fn, "arguments")),
              args[i]);
        json_decref(got);
        json_decref(want);
    }
    if (calls) CHECK(clen == strlen(content) && !strncmp(text, content, clen), "content '%.*s', want '%s'", (int)clen, text, content);
    json_decref(calls);
}

/* text streamed to sits_srv_tool_stream_step one byte more each step, then final: the joined deltas and
 * content equal the expected calls (n == 0: the whole text is content) and the whole response's ids. */
static void expect_stream(int parser, const char *text, int n, const char *const *names, const char *const *args,
                          const char *content)
{
    size_t len = strlen(text), got_len = 0;
    char *got = calloc(len + 1, 1);
    sits_srv_tool_stream_t st = { 0 };
    json_t *acc = json_array();   /* per call: {id, type, name, arguments} */
    for (size_t k = 0; k <= len + 1 && got; k++) {
        size_t from = 0, cn = 0;
        json_t *d = NULL;
        int final = k == len + 1;
        CHECK(sits_srv_tool_stream_step(parser, g_tools, text, final ? len : k, final, 7, 0, &st, &from, &cn, &d) == 0, "step");
        CHECK(cn == 0 || (from == got_len && json_array_size(acc) == 0), "%s: content at %zu (%zu sent, %zu calls)",
              sits_srv_tool_parser_name(parser), from, got_len, json_array_size(acc));
        memcpy(got + got_len, text + from, cn);
        got_len += cn;
        for (size_t j = 0; j < json_array_size(d); j++) {
            json_t *e = json_array_get(d, j), *fn = json_object_get(e, "function");
            size_t idx = (size_t)json_integer_value(json_object_get(e, "index"));
            const char *a = json_string_value(json_object_get(fn, "arguments"));
            if (idx == json_array_size(acc)) {
                CHECK(json_object_get(e, "id") && json_object_get(fn, "name") && a && !a[0], "first delta of call %zu", idx);
                json_array_append_new(acc, json_pack("{s:O, s:O, s:s}", "id", json_object_get(e, "id"), "name",
                                                     json_object_get(fn, "name"), "arguments", ""));
            } else {
                CHECK(idx + 1 == json_array_size(acc) && !json_object_get(e, "id"), "delta of call %zu out of order", idx);
            }
            json_t *c = json_array_get(acc, idx);
            if (c && a) {
                char *cat = malloc(strlen(json_string_value(json_object_get(c, "arguments"))) + strlen(a) + 1);
                sprintf(cat, "%s%s", json_string_value(json_object_get(c, "arguments")), a);
                json_object_set_new(c, "arguments", json_string(cat));
                free(cat);
            }
        }
        json_decref(d);
    }
    size_t clen = 0;
    json_t *whole = sits_srv_tool_calls_parse(parser, g_tools, text, len, 7, &clen);
    CHECK((int)json_array_size(acc) == n, "%s: %.50s...: streamed %zu calls, want %d", sits_srv_tool_parser_name(parser), text,
          json_array_size(acc), n);
    for (int i = 0; i < n && i < (int)json_array_size(acc); i++) {
        json_t *c = json_array_get(acc, i), *w = json_array_get(whole, (size_t)i);
        json_t *ga = json_loads(json_string_value(json_object_get(c, "arguments")), 0, NULL), *wa = json_loads(args[i], 0, NULL);
        CHECK(!strcmp(json_string_value(json_object_get(c, "name")), names[i]) && ga && wa && json_equal(ga, wa),
              "streamed call %d: %s(%s), want %s(%s)", i, json_string_value(json_object_get(c, "name")),
              json_string_value(json_object_get(c, "arguments")), names[i], args[i]);
        CHECK(w && json_equal(json_object_get(c, "id"), json_object_get(w, "id")) &&
              !strcmp(json_string_value(json_object_get(c, "arguments")),
                      json_string_value(json_object_get(json_object_get(w, "function"), "arguments"))),
              "streamed call %d differs from the whole response's", i);
        json_decref(ga);
        json_decref(wa);
    }
    const char *want = n ? content : text;
    CHECK(got && got_len == strlen(want) && !memcmp(got, want, got_len), "%s: streamed content '%.*s', want '%s'",
          sits_srv_tool_parser_name(parser), (int)got_len, got ? got : "", want);
    json_decref(whole);
    json_decref(acc);
    free(got);
}

/* the whole response and the stream */
static void expect(int parser, const char *text, int n, const char *const *names, const char *const *args, const char *content)
{
    expect_whole(parser, text, n, names, args, content);
    expect_stream(parser, text, n, names, args, content);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = calloc((size_t)n + 1, 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) { free(s); s = NULL; }
    fclose(f);
    return s;
}

/* the forced-call grammar as tools.c builds it (tool_grammar's frames) accepts good and refuses bad */
static void grammar_case(const sits_grammar_frame_t *fr, const char *schema, const char *const *good, const char *const *bad)
{
    char err[256];
    sits_grammar_t *g = NULL;
    CHECK(sits_grammar_from_json_schema_framed(schema, strlen(schema), fr, err, sizeof err, &g) == SITS_OK, "framed: %s", err);
    if (!g) return;
    for (int i = 0; good[i]; i++) CHECK(sits_grammar_matches(g, good[i], strlen(good[i])), "grammar refuses %s", good[i]);
    for (int i = 0; bad[i]; i++) CHECK(!sits_grammar_matches(g, bad[i], strlen(bad[i])), "grammar accepts %s", bad[i]);
    sits_grammar_destroy(g);
}

int main(int argc, char **argv)
{
    const char *src = argc > 1 ? argv[1] : getenv("top_srcdir");
    if (!src) src = ".";
    const char *w[] = { "get_weather", "get_time" };
    const char *wa[] = { "{\"location\": \"Paris\", \"unit\": \"celsius\"}", "{\"tz\": \"CET\"}" };

    /* Hermes / Qwen2.5 / Qwen3: <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>, several in a row */
    expect(SITS_SRV_TOOLS_HERMES,
           "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>",
           1, w, wa, "");
    expect(SITS_SRV_TOOLS_HERMES,
           "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\", \"unit\": \"celsius\"}}\n"
           "</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}\n</tool_call>",
           2, w, wa, "Let me check.");
    /* Qwen3 puts a think block first */
    expect(SITS_SRV_TOOLS_HERMES,
           "<think>\nThe user wants weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": "
           "\"Paris\", \"unit\": \"celsius\"}}\n</tool_call>",
           1, w, wa, "<think>\nThe user wants weather.\n</think>");
    expect(SITS_SRV_TOOLS_HERMES, "The weather in Paris is sunny.", 0, NULL, NULL, NULL);
    /* cut short: no calls in the whole response (a stream has sent the call's head and arguments so far by then) */
    expect_whole(SITS_SRV_TOOLS_HERMES, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"loc", 0, NULL, NULL, NULL);
    /* Llama 3.1 / 3.2 JSON: {"name": ..., "parameters": {...}}, optionally after <|python_tag|> */
    const char *la[] = { "{\"location\": \"Paris\", \"unit\": \"celsius\"}" };
    expect(SITS_SRV_TOOLS_LLAMA3, "{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\", \"unit\": \"celsius\"}}", 1,
           w, la, "");
    expect(SITS_SRV_TOOLS_LLAMA3,
           "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\", \"unit\": \"celsius\"}}", 1, w, la, "");
    expect(SITS_SRV_TOOLS_LLAMA3,
           "{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\", \"unit\": \"celsius\"}}; {\"name\": \"get_time\", "
           "\"parameters\": {\"tz\": \"CET\"}}", 2, w, wa, "");
    expect(SITS_SRV_TOOLS_LLAMA3, "The answer is {\"a\": 1}", 0, NULL, NULL, NULL);
    expect(SITS_SRV_TOOLS_LLAMA3, "{\"a\": 1}", 0, NULL, NULL, NULL);
    /* Mistral: [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] */
    expect(SITS_SRV_TOOLS_MISTRAL,
           "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\", \"unit\": \"celsius\"}}, {\"name\": "
           "\"get_time\", \"arguments\": {\"tz\": \"CET\"}}]", 2, w, wa, "");
    expect(SITS_SRV_TOOLS_MISTRAL, "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": \"{\\\"location\\\": \\\"Paris\\\", "
           "\\\"unit\\\": \\\"celsius\\\"}\"}]", 1, w, wa, "");
    expect(SITS_SRV_TOOLS_MISTRAL, "[TOOL_CALLS]not json", 0, NULL, NULL, NULL);
    /* vLLM's mistral cases (tests/tool_use/test_mistral_tool_parser.py): the JSON list (pre-v11 tokenizers), the name
     * after its arguments, and v11's [TOOL_CALLS]NAME{...}; with the markup tokens kept as text (HF tokenizers, as
     * Mistral Small 3.2 / Devstral templates write them): NAME[ARGS]{...} and NAME[CALL_ID]ID[ARGS]{...} */
    const char *add[] = { "add", "get_current_weather" }, *add_a[] = { "{\"a\": 3.5, \"b\": 4}",
                                                                        "{\"city\": \"San Francisco\", \"state\": \"CA\", \"unit\": \"celsius\"}" };
    expect(SITS_SRV_TOOLS_MISTRAL, "[TOOL_CALLS][{\"name\": \"add\", \"arguments\":{\"a\": 3.5, \"b\": 4}}]", 1, add, add_a, "");
    const char *age[] = { "get_age" }, *age_a[] = { "{\"name\": \"John Doe\"}" };
    expect(SITS_SRV_TOOLS_MISTRAL, "[TOOL_CALLS] [{\"arguments\":{\"name\": \"John Doe\"}, \"name\": \"get_age\"}]", 1, age, age_a, "");
    expect(SITS_SRV_TOOLS_MISTRAL, "[TOOL_CALLS]add{\"a\": 3.5, \"b\": 4}", 1, add, add_a, "");
    expect(SITS_SRV_TOOLS_MISTRAL, "[TOOL_CALLS]get_current_weather{\"city\": \"San Francisco\", \"state\": \"CA\", \"unit\": \"celsius\"}", 1,
           add + 1, add_a + 1, "");
    expect(SITS_SRV_TOOLS_MISTRAL, "Sure.[TOOL_CALLS]add[ARGS]{\"a\": 3.5, \"b\": 4}[TOOL_CALLS]get_current_weather[CALL_ID]a1B2c3D4e"
           "[ARGS]{\"city\": \"San Francisco\", \"state\": \"CA\", \"unit\": \"celsius\"}", 2, add, add_a, "Sure.");
    /* cut short, or text after the call: no calls in the whole response (a stream has sent the head by then) */
    expect_whole(SITS_SRV_TOOLS_MISTRAL, "[TOOL_CALLS]add[ARGS]{\"a\": 3.5", 0, NULL, NULL, NULL);
    expect_whole(SITS_SRV_TOOLS_MISTRAL, "[TOOL_CALLS]add[ARGS]{\"a\": 3.5} and more", 0, NULL, NULL, NULL);

    /* qwen3_coder (Qwen3-Coder, Qwen3.5): vLLM's test cases, their sample tools */
    g_tools = json_loads("[{\"type\": \"function\", \"function\": {\"name\": \"get_current_weather\", \"parameters\": {\"type\": "
                         "\"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"state\": {\"type\": \"string\"}, \"unit\": "
                         "{\"type\": \"string\", \"enum\": [\"fahrenheit\", \"celsius\"]}}, \"required\": [\"city\", \"state\"]}}}, "
                         "{\"type\": \"function\", \"function\": {\"name\": \"calculate_area\", \"parameters\": {\"type\": \"object\", "
                         "\"properties\": {\"shape\": {\"type\": \"string\"}, \"dimensions\": {\"type\": \"object\"}, \"precision\": "
                         "{\"type\": \"integer\"}}}}}]", 0, NULL);
    CHECK(g_tools, "sample tools");
    const int Q = SITS_SRV_TOOLS_QWEN3_CODER;
    const char *qw[] = { "get_current_weather", "get_current_weather" }, *qa[] = { "calculate_area" };
    const char *dallas = "<tool_call>\n<function=get_current_weather>\n<parameter=city>\nDallas\n</parameter>\n<parameter=state>\n"
                         "TX\n</parameter>\n<parameter=unit>\nfahrenheit\n</parameter>\n</function>\n</tool_call>";
    const char *dallas_a[] = { "{\"city\": \"Dallas\", \"state\": \"TX\", \"unit\": \"fahrenheit\"}",
                               "{\"city\": \"Orlando\", \"state\": \"FL\", \"unit\": \"fahrenheit\"}" };
    expect(Q, dallas, 1, qw, dallas_a, "");
    char buf[1024];
    snprintf(buf, sizeof buf, "Sure! Let me check the weather for you.%s", dallas);
    expect(Q, buf, 1, qw, dallas_a, "Sure! Let me check the weather for you.");
    const char *rect_a[] = { "{\"shape\": \"rectangle\", \"dimensions\": {\"width\": 10, \"height\": 20}, \"precision\": 2}" };
    expect(Q, "<tool_call>\n<function=calculate_area>\n<parameter=shape>\nrectangle\n</parameter>\n<parameter=dimensions>\n"
              "{\"width\": 10, \n \"height\": 20}\n</parameter>\n<parameter=precision>\n2\n</parameter>\n</function>\n</tool_call>",
           1, qa, rect_a, "");
    snprintf(buf, sizeof buf, "%s\n<tool_call>\n<function=get_current_weather>\n<parameter=city>\nOrlando\n</parameter>\n"
             "<parameter=state>\nFL\n</parameter>\n<parameter=unit>\nfahrenheit\n</parameter>\n</function>\n</tool_call>", dallas);
    expect(Q, buf, 2, qw, dallas_a, "");
    const char *circle_a[] = { "{\"shape\": \"circle\", \"dimensions\": {\"radius\": 15.5}, \"precision\": 3}" };
    expect(Q, "Let me calculate that area for you.<tool_call>\n<function=calculate_area>\n<parameter=shape>\ncircle\n</parameter>\n"
              "<parameter=dimensions>\n{\"radius\": 15.5}\n</parameter>\n<parameter=precision>\n3\n</parameter>\n</function>\n</tool_call>",
           1, qa, circle_a, "Let me calculate that area for you.");
    expect(Q, "This is a test response without any tool calls", 0, NULL, NULL, NULL);
    /* no <tool_call> tags: the bare <function=...> block (vLLM's fallback) */
    const char *dts_a[] = { "{\"city\": \"Dallas\", \"state\": \"TX\"}" };
    expect(Q, "<function=get_current_weather>\n<parameter=city>\nDallas\n</parameter>\n<parameter=state>\nTX\n</parameter>\n</function>",
           1, qw, dts_a, "");
    /* a missing </parameter>: the value ends at the next <parameter= */
    expect(Q, "Let me check the weather for you:\n<tool_call>\n<function=get_current_weather>\n<parameter=city>\nDallas\n"
              "<parameter=state>\nTX\n</parameter>\n<parameter=unit>\nfahrenheit\n</parameter>\n</function>\n</tool_call>",
           1, qw, dallas_a, "Let me check the weather for you:\n");
    /* the arguments are written as Python's json.dumps writes them (vLLM's bytes) */
    size_t clen = 0;
    json_t *calls = sits_srv_tool_calls_parse(Q, g_tools, dallas, strlen(dallas), 7, &clen);
    const char *args = json_string_value(json_object_get(json_object_get(json_array_get(calls, 0), "function"), "arguments"));
    CHECK(args && !strcmp(args, dallas_a[0]), "qwen3_coder arguments bytes %s, want %s", args ? args : "(none)", dallas_a[0]);
    json_decref(calls);
    /* non-ASCII as it is, a control character as \u001f (Python's json.dumps(..., ensure_ascii=False)) */
    const char *zu = "<tool_call>\n<function=get_current_weather>\n<parameter=city>\nZ\xc3\xbc\x1frich\n</parameter>\n<parameter=state>\n"
                     "TX\n</parameter>\n</function>\n</tool_call>";
    calls = sits_srv_tool_calls_parse(Q, g_tools, zu, strlen(zu), 7, &clen);
    args = json_string_value(json_object_get(json_object_get(json_array_get(calls, 0), "function"), "arguments"));
    CHECK(args && !strcmp(args, "{\"city\": \"Z\xc3\xbc\\u001frich\", \"state\": \"TX\"}"), "qwen3_coder escapes: %s", args ? args : "(none)");
    json_decref(calls);
    json_decref(g_tools);
    /* vLLM's type conversion case: integer, float, boolean, string, object; plus null, a whole number, an unlisted name */
    g_tools = json_loads("[{\"type\": \"function\", \"function\": {\"name\": \"test_types\", \"parameters\": {\"type\": \"object\", "
                         "\"properties\": {\"int_param\": {\"type\": \"integer\"}, \"float_param\": {\"type\": \"float\"}, "
                         "\"bool_param\": {\"type\": \"boolean\"}, \"str_param\": {\"type\": \"string\"}, \"obj_param\": "
                         "{\"type\": \"object\"}, \"num_param\": {\"type\": \"number\"}, \"bad_int\": {\"type\": \"integer\"}}}}}]",
                         0, NULL);
    const char *tt[] = { "test_types" };
    const char *tt_a[] = { "{\"int_param\": 42, \"float_param\": 3.14, \"bool_param\": true, \"str_param\": \"hello world\", "
                           "\"obj_param\": {\"key\": \"value\"}, \"num_param\": 2, \"bad_int\": \"4x\", \"extra\": \"7\", \"n\": null}" };
    expect(Q, "<tool_call>\n<function=test_types>\n<parameter=int_param>\n42\n</parameter>\n<parameter=float_param>\n3.14\n"
              "</parameter>\n<parameter=bool_param>\ntrue\n</parameter>\n<parameter=str_param>\nhello world\n</parameter>\n"
              "<parameter=obj_param>\n{\"key\": \"value\"}\n</parameter>\n<parameter=num_param>\n2.0\n</parameter>\n"
              "<parameter=bad_int>\n4x\n</parameter>\n<parameter=extra>\n7\n</parameter>\n<parameter=n>\nnull\n</parameter>\n"
              "</function>\n</tool_call>", 1, tt, tt_a, "");
    /* a name without its '>': no calls (vLLM's parse fails: the text is content) */
    expect(Q, "<tool_call>\n<function=test_types\n</function>\n</tool_call>", 0, NULL, NULL, NULL);
    json_decref(g_tools);
    g_tools = NULL;

    /* the parser picked from real templates */
    static const struct { const char *file; int parser; } tmpl[] = {
        { "Qwen-Qwen2.5-7B-Instruct.jinja", SITS_SRV_TOOLS_HERMES },
        { "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", SITS_SRV_TOOLS_HERMES },
        { "Qwen-Qwen3-0.6B.jinja", SITS_SRV_TOOLS_HERMES },
        { "meta-llama-Llama-3.1-8B-Instruct.jinja", SITS_SRV_TOOLS_LLAMA3 },
        { "mistralai-Mistral-Nemo-Instruct-2407.jinja", SITS_SRV_TOOLS_MISTRAL },
        { "Mistral-Small-3.2-24B-Instruct-2506.jinja", SITS_SRV_TOOLS_MISTRAL },
        { "unsloth-mistral-Devstral-Small-2507.jinja", SITS_SRV_TOOLS_MISTRAL },
        { "Qwen3-Coder.jinja", SITS_SRV_TOOLS_QWEN3_CODER },
        { "Qwen3.5-4B.jinja", SITS_SRV_TOOLS_QWEN3_CODER },
        { "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja", SITS_SRV_TOOLS_QWEN3_CODER },
        { "StepFun3.5-Flash.jinja", SITS_SRV_TOOLS_QWEN3_CODER },
    };
    for (size_t i = 0; i < sizeof tmpl / sizeof tmpl[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/tests/fixtures/templates/%s", src, tmpl[i].file);
        char *t = slurp(path);
        CHECK(t, "cannot read %s", path);
        if (!t) continue;
        int p = sits_srv_tool_parser_detect(t);
        CHECK(p == tmpl[i].parser, "%s: parser %s, want %s", tmpl[i].file, sits_srv_tool_parser_name(p),
              sits_srv_tool_parser_name(tmpl[i].parser));
        free(t);
    }
    CHECK(sits_srv_tool_parser_from_name("hermes") == SITS_SRV_TOOLS_HERMES && sits_srv_tool_parser_from_name("auto") == SITS_SRV_TOOLS_AUTO &&
          sits_srv_tool_parser_from_name("nope") < 0, "parser names");

    /* forced calls: the grammars accept the canonical text, refuse a wrong name / a missing argument / free text */
    const char *schema = "{\"anyOf\": [{\"type\": \"object\", \"properties\": {\"name\": {\"const\": \"get_weather\"}, \"arguments\": "
                         "{\"type\": \"object\", \"properties\": {\"location\": {\"type\": \"string\"}}, \"required\": [\"location\"]}}, "
                         "\"required\": [\"name\", \"arguments\"], \"additionalProperties\": false}]}";
    sits_grammar_frame_t hermes = { "", "<tool_call>\n", "\n</tool_call>", "\n", "", -1 };
    grammar_case(&hermes, schema,
                 (const char *const[]){ "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>",
                                        "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"location\":\"a\"}}\n</tool_call>\n"
                                        "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"location\":\"b\"}}\n</tool_call>", NULL },
                 (const char *const[]){ "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>",
                                        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>",
                                        "Sure! <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"x\"}}\n</tool_call>",
                                        "", NULL });
    sits_grammar_frame_t mistral = { "[TOOL_CALLS][", "", "", ", ", "]", 1 };
    grammar_case(&mistral, schema,
                 (const char *const[]){ "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}]", NULL },
                 (const char *const[]){ "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"location\": \"a\"}}, {\"name\": "
                                        "\"get_weather\", \"arguments\": {\"location\": \"b\"}}]", NULL });
    /* qwen3_coder forced calls: the grammar sits_srv_structured_parse builds for tool_choice required / named */
    static const char *const forced[][3] = {
        { "\"required\"", "<tool_call>\n<function=get_time>\n<parameter=tz>\nCET\n</parameter>\n</function>\n</tool_call>\n"
                          "<tool_call>\n<function=get_weather>\n<parameter=location>\na < b > c\n</parameter>\n</function>\n</tool_call>",
          "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>" },
        { "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"}}",
          "<tool_call>\n<function=get_weather>\n</function>\n</tool_call>",
          "<tool_call>\n<function=get_time>\n<parameter=tz>\nCET\n</parameter>\n</function>\n</tool_call>" },
    };
    sits_srv_gcache_t *gc = NULL;
    CHECK(sits_srv_gcache_create(&gc) == SITS_OK, "gcache");
    sits_srv_limits_t lim = { .tool_parser = SITS_SRV_TOOLS_QWEN3_CODER, .n_stop_ids = 1, .gcache = gc, .vocab_size = 100 };
    for (int i = 0; i < 2; i++) {
        char body[1024];
        snprintf(body, sizeof body, "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": "
                 "{\"type\": \"object\", \"properties\": {\"location\": {\"type\": \"string\"}}}}}, {\"type\": \"function\", "
                 "\"function\": {\"name\": \"get_time\"}}], \"tool_choice\": %s}", forced[i][0]);
        json_t *root = json_loads(body, 0, NULL);
        sits_srv_request_t req = { 0 };
        sits_srv_error_t err = { 0 };
        CHECK(root && sits_srv_structured_parse(&lim, root, SITS_SRV_CHAT, &req, &err) == 0 && req.grammar && req.tool_forced &&
              req.tools, "qwen3_coder forced %s: %s", forced[i][0], err.message);
        if (req.grammar) {
            CHECK(sits_grammar_matches(req.grammar, forced[i][1], strlen(forced[i][1])), "qwen3_coder grammar refuses %s", forced[i][1]);
            CHECK(!sits_grammar_matches(req.grammar, forced[i][2], strlen(forced[i][2])), "qwen3_coder grammar accepts %s", forced[i][2]);
        }
        sits_srv_request_free(&req);
        json_decref(root);
    }
    sits_srv_gcache_destroy(gc);
    /* mistral forced calls: v11 templates (Devstral: [TOOL_CALLS]NAME[ARGS]{...}) force one function in that form, several
     * in the JSON list; Nemo's (pre-v11) the list */
    static const struct { const char *tmpl, *choice; int n_tools; const char *good, *bad; } mc[] = {
        { "unsloth-mistral-Devstral-Small-2507.jinja", "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"}}", 2,
          "[TOOL_CALLS]get_weather[ARGS]{\"location\": \"Paris\"}", "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}]" },
        { "unsloth-mistral-Devstral-Small-2507.jinja", "\"required\"", 1,
          "[TOOL_CALLS]get_weather[ARGS]{\"location\": \"Paris\"}", "[TOOL_CALLS]get_weather[ARGS]{}" },
        { "unsloth-mistral-Devstral-Small-2507.jinja", "\"required\"", 2,
          "[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {}}]", "[TOOL_CALLS]get_time[ARGS]{}" },
        { "mistralai-Mistral-Nemo-Instruct-2407.jinja", "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"}}", 2,
          "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}]",
          "[TOOL_CALLS]get_weather[ARGS]{\"location\": \"Paris\"}" },
    };
    for (size_t i = 0; i < sizeof mc / sizeof mc[0]; i++) {
        char dir[1024], tpath[1024], body[1024];
        snprintf(dir, sizeof dir, "%s/tests/fixtures/tokenizers/bytelevel", src);
        snprintf(tpath, sizeof tpath, "%s/tests/fixtures/templates/%s", src, mc[i].tmpl);
        sits_chat_t *chat = NULL;
        CHECK(sits_chat_load(dir, tpath, &chat) == SITS_OK, "load %s", tpath);
        gc = NULL;
        CHECK(sits_srv_gcache_create(&gc) == SITS_OK, "gcache");
        sits_srv_limits_t ml = { .tool_parser = SITS_SRV_TOOLS_MISTRAL, .n_stop_ids = 1, .gcache = gc, .vocab_size = 100, .chat = chat };
        snprintf(body, sizeof body, "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": "
                 "{\"type\": \"object\", \"properties\": {\"location\": {\"type\": \"string\"}}, \"required\": [\"location\"]}}}%s], "
                 "\"tool_choice\": %s, \"parallel_tool_calls\": false}",
                 mc[i].n_tools == 2 ? ", {\"type\": \"function\", \"function\": {\"name\": \"get_time\"}}" : "", mc[i].choice);
        json_t *root = json_loads(body, 0, NULL);
        sits_srv_request_t req = { 0 };
        sits_srv_error_t err = { 0 };
        CHECK(root && sits_srv_structured_parse(&ml, root, SITS_SRV_CHAT, &req, &err) == 0 && req.grammar, "mistral forced %zu: %s", i,
              err.message);
        if (req.grammar) {
            CHECK(sits_grammar_matches(req.grammar, mc[i].good, strlen(mc[i].good)), "mistral %zu: grammar refuses %s", i, mc[i].good);
            CHECK(!sits_grammar_matches(req.grammar, mc[i].bad, strlen(mc[i].bad)), "mistral %zu: grammar accepts %s", i, mc[i].bad);
        }
        sits_srv_request_free(&req);
        json_decref(root);
        sits_srv_gcache_destroy(gc);
        sits_chat_destroy(chat);
    }
    printf("%s: %d failures\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
