/* tools.c -- [structured output + tool calls] the request fields that constrain the output and the
 * parsing of a model's tool calls:
 *   response_format {"type": "json_object"} / {"type": "json_schema", "json_schema": {"schema": ...}};
 *   vLLM's structured_outputs {"json" | "regex" | "choice"} and the older guided_json / guided_regex /
 *   guided_choice -- each compiles (src/grammar) to the grammar the scheduler masks the sampler with;
 *   tools, tool_choice (none | auto | required | {"type": "function", "function": {"name": ...}}),
 *   parallel_tool_calls -- the template renders the tools (api.c); "auto" parses the output after the
 *   fact; "required" and a named function force the call through a grammar in the family's format, so
 *   it always parses.
 * Formats (the --tool-call-parser names, as vLLM's):
 *   hermes       <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call> (Hermes, Qwen2.5, Qwen3)
 *   llama3_json  {"name": ..., "parameters": {...}}, optionally after <|python_tag|> (Llama 3.1 / 3.2)
 *   mistral      [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]
 * auto picks one from the chat template's text (sits_srv_tool_parser_detect). */
#include "server/srv_internal.h"
#include "grammar/grammar.h"
#include "util/log.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const parser_names[] = { "none", "hermes", "llama3_json", "mistral" };

int sits_srv_tool_parser_from_name(const char *name)
{
    if (!name || !name[0] || strcmp(name, "auto") == 0) return SITS_SRV_TOOLS_AUTO;
    for (int i = 1; i < 4; i++) if (strcmp(name, parser_names[i]) == 0) return i;
    if (strcmp(name, "qwen") == 0 || strcmp(name, "qwen3") == 0) return SITS_SRV_TOOLS_HERMES;
    return -1;
}

const char *sits_srv_tool_parser_name(int p) { return p >= 0 && p < 4 ? parser_names[p] : "auto"; }

int sits_srv_tool_parser_detect(const char *tmpl)
{
    if (!tmpl) return SITS_SRV_TOOLS_NONE;
    if (strstr(tmpl, "<tool_call>")) return SITS_SRV_TOOLS_HERMES;
    if (strstr(tmpl, "[TOOL_CALLS]")) return SITS_SRV_TOOLS_MISTRAL;
    if (strstr(tmpl, "<|python_tag|>") || strstr(tmpl, "\"parameters\"")) return SITS_SRV_TOOLS_LLAMA3;
    return SITS_SRV_TOOLS_NONE;
}

#define FAIL(param_, ...) do { sits_srv_error_set(err, 400, "invalid_request_error", NULL, param_, __VA_ARGS__); \
    goto fail; } while (0)

static json_t *opt(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return (v && json_is_null(v)) ? NULL : v;
}

/* ---- compiled grammars shared by the requests of the same constraint (the masks cached in a grammar
 * then serve all of them): a few entries, least recently used out; each entry holds a reference ---- */

sits_status_t sits_srv_gcache_create(sits_srv_gcache_t **c_p)
{
    sits_srv_gcache_t *c = calloc(1, sizeof *c);
    if (!c) return SITS_ERR_NOMEM;
    pthread_mutex_init(&c->mu, NULL);
    *c_p = c;
    return SITS_OK;
}

void sits_srv_gcache_destroy(sits_srv_gcache_t *c)
{
    if (!c) return;
    for (int i = 0; i < SITS_SRV_GCACHE; i++) {
        free(c->key[i]);
        sits_grammar_destroy(c->g[i]);
    }
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* a new reference to the grammar cached under kind + text, NULL when none */
static sits_grammar_t *gcache_get(sits_srv_gcache_t *c, char kind, const char *text)
{
    sits_grammar_t *g = NULL;
    if (!c) return NULL;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < SITS_SRV_GCACHE && !g; i++)
        if (c->key[i] && c->key[i][0] == kind && strcmp(c->key[i] + 1, text) == 0) {
            g = sits_grammar_ref(c->g[i]);
            c->used[i] = ++c->tick;
        }
    pthread_mutex_unlock(&c->mu);
    return g;
}

static void gcache_put(sits_srv_gcache_t *c, char kind, const char *text, sits_grammar_t *g)
{
    size_t n = strlen(text);
    char *key = c ? malloc(n + 2) : NULL;
    if (!key) return;
    key[0] = kind;
    memcpy(key + 1, text, n + 1);
    pthread_mutex_lock(&c->mu);
    int v = 0;
    for (int i = 1; i < SITS_SRV_GCACHE; i++) if (c->used[i] < c->used[v]) v = i;
    free(c->key[v]);
    sits_grammar_destroy(c->g[v]);
    c->key[v] = key;
    c->g[v] = sits_grammar_ref(g);
    c->used[v] = ++c->tick;
    pthread_mutex_unlock(&c->mu);
}

/* compile a schema value; err names param and the keyword the compiler names */
static int compile_schema(const sits_srv_limits_t *lim, json_t *schema, const char *param, sits_grammar_t **g_p,
                          sits_srv_error_t *err)
{
    char *text = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY);
    char msg[256] = "";
    if (!text) {
        sits_srv_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    if ((*g_p = gcache_get(lim->gcache, 'S', text))) {
        free(text);
        return 0;
    }
    sits_status_t st = sits_grammar_from_json_schema(text, strlen(text), msg, sizeof msg, g_p);
    if (st == SITS_OK) gcache_put(lim->gcache, 'S', text, *g_p);
    free(text);
    if (st == SITS_ERR_INVALID) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, param, "%s: %s", param, msg);
        return -1;
    }
    if (st != SITS_OK) {
        sits_srv_error_set(err, 500, "server_error", NULL, NULL, "grammar compilation failed: %s", sits_status_str(st));
        return -1;
    }
    return 0;
}

static int compile_regex(const sits_srv_limits_t *lim, json_t *re, const char *param, sits_grammar_t **g_p,
                         sits_srv_error_t *err)
{
    char msg[256] = "";
    if (!json_is_string(re) || strlen(json_string_value(re)) != json_string_length(re)) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, param, "'%s' must be a string (without NUL)", param);
        return -1;
    }
    if ((*g_p = gcache_get(lim->gcache, 'R', json_string_value(re)))) return 0;
    if (sits_grammar_from_regex(json_string_value(re), json_string_length(re), msg, sizeof msg, g_p) != SITS_OK) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, param, "%s: %s", param, msg);
        return -1;
    }
    gcache_put(lim->gcache, 'R', json_string_value(re), *g_p);
    return 0;
}

static int compile_choice(const sits_srv_limits_t *lim, json_t *ch, const char *param, sits_grammar_t **g_p,
                          sits_srv_error_t *err)
{
    (void)lim;   /* choice lists compile in microseconds: not cached */
    size_t n = json_is_array(ch) ? json_array_size(ch) : 0;
    if (n == 0 || n > 4096) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, param, "'%s' must be a non-empty array of strings", param);
        return -1;
    }
    const char **s = calloc(n, sizeof *s);
    size_t *lens = calloc(n, sizeof *lens);
    int rc = -1;
    if (!s || !lens) {
        sits_srv_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(ch, i);
        if (!json_is_string(e) || json_string_length(e) == 0) {
            sits_srv_error_set(err, 400, "invalid_request_error", NULL, param, "'%s' entries must be non-empty strings", param);
            goto out;
        }
        s[i] = json_string_value(e);
        lens[i] = json_string_length(e);
    }
    if (sits_grammar_from_choice(s, lens, (int)n, g_p) != SITS_OK) {
        sits_srv_error_set(err, 500, "server_error", NULL, NULL, "grammar compilation failed");
        goto out;
    }
    rc = 0;
out:
    free(s);
    free(lens);
    return rc;
}

/* The tools array: [{"type": "function", "function": {"name": string, "parameters": schema?, ...}}]. */
static int check_tools(json_t *tools, sits_srv_error_t *err)
{
    if (!json_is_array(tools)) FAIL("tools", "'tools' must be an array");
    for (size_t i = 0; i < json_array_size(tools); i++) {
        json_t *t = json_array_get(tools, i), *fn = json_object_get(t, "function");
        json_t *type = json_object_get(t, "type");
        if (!json_is_object(t) || !json_is_string(type) || strcmp(json_string_value(type), "function") != 0)
            FAIL("tools", "tools[%zu] must be {\"type\": \"function\", \"function\": {...}}", i);
        if (!json_is_object(fn) || !json_is_string(json_object_get(fn, "name")) ||
            json_string_length(json_object_get(fn, "name")) == 0)
            FAIL("tools", "tools[%zu].function.name must be a non-empty string", i);
        json_t *params = opt(fn, "parameters");
        if (params && !json_is_object(params)) FAIL("tools", "tools[%zu].function.parameters must be a JSON schema object", i);
    }
    return 0;
fail:
    return -1;
}

/* the grammar of one or more calls in the family's format, over the tools (all, or the one named) */
static int tool_grammar(const sits_srv_limits_t *lim, json_t *tools, const char *only, int parser, int parallel,
                        sits_grammar_t **g_p, sits_srv_error_t *err)
{
    const char *argkey = parser == SITS_SRV_TOOLS_LLAMA3 ? "parameters" : "arguments";
    json_t *any = json_array();
    int rc = -1;
    for (size_t i = 0; i < json_array_size(tools); i++) {
        json_t *fn = json_object_get(json_array_get(tools, i), "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (only && strcmp(only, name) != 0) continue;
        json_t *params = opt(fn, "parameters");
        json_t *one = json_pack("{s:s, s:{s:{s:s}, s:O}, s:[s,s], s:b}", "type", "object", "properties", "name", "const",
                                name, argkey, params ? params : json_pack("{s:s}", "type", "object"), "required", "name",
                                argkey, "additionalProperties", 0);
        if (!params) json_decref(json_object_get(json_object_get(one, "properties"), argkey));
        json_array_append_new(any, one);
    }
    if (json_array_size(any) == 0) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "tool_choice",
                           "tool_choice names the function '%.64s', which 'tools' does not define", only ? only : "");
        goto out;
    }
    json_t *schema = json_array_size(any) == 1 ? json_incref(json_array_get(any, 0)) : json_pack("{s:O}", "anyOf", any);
    sits_grammar_frame_t fr = { 0 };
    if (parser == SITS_SRV_TOOLS_HERMES) {
        fr = (sits_grammar_frame_t){ .before = "", .item_open = "<tool_call>\n", .item_close = "\n</tool_call>", .sep = "\n",
                                     .after = "" };
    } else if (parser == SITS_SRV_TOOLS_MISTRAL) {
        fr = (sits_grammar_frame_t){ .before = "[TOOL_CALLS][", .item_open = "", .item_close = "", .sep = ", ", .after = "]" };
    } else {
        fr = (sits_grammar_frame_t){ .before = "", .item_open = "", .item_close = "", .sep = "; ", .after = "" };
    }
    fr.max_items = parallel ? -1 : 1;
    char *text = json_dumps(schema, JSON_COMPACT);
    json_decref(schema);
    char msg[256] = "";
    char kind = (char)('0' + 4 * parser + (fr.max_items == 1));   /* the frame is part of the key */
    if (text && (*g_p = gcache_get(lim->gcache, kind, text))) {
        free(text);
        rc = 0;
        goto out;
    }
    sits_status_t st = text ? sits_grammar_from_json_schema_framed(text, strlen(text), &fr, msg, sizeof msg, g_p) : SITS_ERR_NOMEM;
    if (st == SITS_OK) gcache_put(lim->gcache, kind, text, *g_p);
    free(text);
    if (st == SITS_ERR_INVALID) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "tools", "tools: a function's parameters: %s", msg);
        goto out;
    }
    if (st != SITS_OK) {
        sits_srv_error_set(err, 500, "server_error", NULL, NULL, "grammar compilation failed: %s", sits_status_str(st));
        goto out;
    }
    rc = 0;
out:
    json_decref(any);
    return rc;
}

int sits_srv_structured_parse(const sits_srv_limits_t *lim, json_t *root, sits_srv_kind_t kind, sits_srv_request_t *req,
                              sits_srv_error_t *err)
{
    sits_grammar_t *g = NULL;
    const char *which = NULL;   /* the field that set the constraint (two are refused) */
#define ONE(name_) do { if (which) FAIL(name_, "'%s' and '%s' both constrain the output: pass one", which, name_); \
    which = name_; } while (0)
    json_t *rf = opt(root, "response_format");
    if (rf) {
        json_t *t = json_object_get(rf, "type");
        if (!json_is_object(rf) || !json_is_string(t)) FAIL("response_format", "'response_format' must be {\"type\": ...}");
        const char *ts = json_string_value(t);
        if (strcmp(ts, "json_object") == 0) {
            ONE("response_format");
            if (sits_grammar_from_json_object(&g) != SITS_OK) {
                sits_srv_error_set(err, 500, "server_error", NULL, NULL, "grammar compilation failed");
                goto fail;
            }
        } else if (strcmp(ts, "json_schema") == 0) {
            json_t *js = json_object_get(rf, "json_schema"), *schema = js ? opt(js, "schema") : NULL;
            if (!json_is_object(js)) FAIL("response_format", "response_format json_schema needs \"json_schema\": {\"name\": ..., \"schema\": {...}}");
            if (!schema) schema = opt(js, "json_schema");   /* some clients nest it once more */
            if (!schema || !(json_is_object(schema) || json_is_true(schema)))
                FAIL("response_format", "response_format.json_schema.schema must be a JSON schema object");
            ONE("response_format");
            if (compile_schema(lim, schema, "response_format", &g, err) != 0) goto fail;
        } else if (strcmp(ts, "text") != 0) {
            FAIL("response_format", "response_format type '%.32s' is not one of text, json_object, json_schema", ts);
        }
    }
    /* vLLM: structured_outputs {json, regex, choice} and the guided_* fields */
    json_t *so = opt(root, "structured_outputs");
    if (so && !json_is_object(so)) FAIL("structured_outputs", "'structured_outputs' must be an object");
    static const char *const kinds[] = { "json", "regex", "choice" };
    for (int k = 0; k < 3; k++) {
        char guided[32];
        snprintf(guided, sizeof guided, "guided_%s", kinds[k]);
        json_t *v = so ? opt(so, kinds[k]) : NULL;
        const char *param = "structured_outputs";
        if (!v) {
            v = opt(root, guided);
            param = k == 0 ? "guided_json" : k == 1 ? "guided_regex" : "guided_choice";
        }
        if (!v) continue;
        ONE(param);
        json_t *parsed = NULL;
        if (k == 0 && json_is_string(v)) {   /* a schema given as JSON text */
            parsed = json_loads(json_string_value(v), 0, NULL);
            if (!parsed) FAIL(param, "'%s' is not valid JSON", param);
            v = parsed;
        }
        int rc = k == 0   ? compile_schema(lim, v, param, &g, err)
                 : k == 1 ? compile_regex(lim, v, param, &g, err)
                          : compile_choice(lim, v, param, &g, err);
        json_decref(parsed);
        if (rc != 0) goto fail;
    }
    for (const char *const *p = (const char *const[]){ "grammar", "structural_tag", NULL }; *p; p++)
        if (so && opt(so, *p)) FAIL("structured_outputs", "structured_outputs.%s is not supported (json, regex, choice are)", *p);
    if (opt(root, "guided_grammar")) FAIL("guided_grammar", "guided_grammar is not supported (guided_json, guided_regex, guided_choice are)");

    /* tools */
    json_t *tools = opt(root, "tools"), *choice = opt(root, "tool_choice");
    int parallel = 1;
    json_t *pv = opt(root, "parallel_tool_calls");
    if (pv && !json_is_boolean(pv)) FAIL("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    if (pv) parallel = json_is_true(pv);
    if (!tools || json_array_size(tools) == 0) {
        if (tools && !json_is_array(tools)) FAIL("tools", "'tools' must be an array");
        if (choice && !(json_is_string(choice) && (strcmp(json_string_value(choice), "none") == 0 ||
                                                   strcmp(json_string_value(choice), "auto") == 0)))
            FAIL("tool_choice", "'tool_choice' needs 'tools'");
        goto done;
    }
    if (kind != SITS_SRV_CHAT) FAIL("tools", "'tools' are only accepted by /v1/chat/completions");
    if (check_tools(tools, err) != 0) goto fail;
    const char *mode = "auto", *named = NULL;
    if (choice) {
        if (json_is_string(choice)) {
            mode = json_string_value(choice);
            if (strcmp(mode, "auto") && strcmp(mode, "none") && strcmp(mode, "required"))
                FAIL("tool_choice", "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}");
        } else if (json_is_object(choice) && json_is_string(json_object_get(json_object_get(choice, "function"), "name"))) {
            mode = "named";
            named = json_string_value(json_object_get(json_object_get(choice, "function"), "name"));
        } else {
            FAIL("tool_choice", "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}");
        }
    }
    if (strcmp(mode, "none") == 0) goto done;
    int parser = lim->tool_parser;
    if (parser == SITS_SRV_TOOLS_AUTO) parser = sits_srv_tool_parser_detect(sits_chat_template_text(lim->chat, 1));
    if (parser == SITS_SRV_TOOLS_NONE)
        FAIL("tools", "this model's chat template has no tool-call format this server recognises; start the server with "
                      "--tool-call-parser hermes|llama3_json|mistral, or pass tool_choice \"none\"");
    req->tool_parser = parser;
    req->tool_single = !parallel;
    if (strcmp(mode, "auto") != 0) {
        if (which) FAIL("tool_choice", "tool_choice '%s' and '%s' both constrain the output: pass one", mode, which);
        if (tool_grammar(lim, tools, named, parser, parallel && !named, &g, err) != 0) goto fail;
        req->tool_forced = 1;
    }
done:
    if (g && lim->n_stop_ids == 0)
        FAIL(which ? which : "tool_choice", "constrained output needs an end-of-sequence token, and this model has none");
    if (g && req->ignore_eos) FAIL("ignore_eos", "'ignore_eos' cannot be combined with constrained output");
    req->grammar = g;
    return 0;
fail:
    sits_grammar_destroy(g);
    return -1;
#undef ONE
}

/* ---------------- parsing the model's calls ---------------- */

static json_t *call_obj(const char *name, json_t *args, uint64_t *rng)
{
    char id[40];
    static const char abc[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    int o = snprintf(id, sizeof id, "call_");
    for (int i = 0; i < 24; i++) {
        *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
        id[o++] = abc[(*rng >> 33) % 62];
    }
    id[o] = 0;
    char *a = json_is_string(args) ? strdup(json_string_value(args)) : json_dumps(args, JSON_COMPACT | JSON_ENCODE_ANY);
    json_t *c = json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function", "function", "name", name, "arguments",
                          a ? a : "{}");
    free(a);
    return c;
}

/* one {"name": ..., argkey: {...}} object into calls; 0 ok, -1 not a call */
static int add_call(json_t *calls, json_t *o, uint64_t *rng)
{
    json_t *name = json_object_get(o, "name");
    json_t *args = json_object_get(o, "arguments");
    if (!args) args = json_object_get(o, "parameters");
    if (!json_is_object(o) || !json_is_string(name) || !args || !(json_is_object(args) || json_is_string(args))) return -1;
    json_t *c = call_obj(json_string_value(name), args, rng);
    if (!c) return -1;
    json_array_append_new(calls, c);
    return 0;
}

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')) p++;
    return p;
}

static char *memfind(const char *p, const char *end, const char *needle)
{
    size_t n = strlen(needle);
    for (; p + n <= end; p++) if (memcmp(p, needle, n) == 0) return (char *)p;
    return NULL;
}

json_t *sits_srv_tool_calls_parse(int parser, const char *text, size_t len, uint64_t seed, size_t *content_len_p)
{
    const char *end = text + len;
    json_t *calls = json_array();
    uint64_t rng = seed ^ 0x9e3779b97f4a7c15ull;
    size_t content_len = len;
    json_error_t jerr;
    if (!calls) return NULL;
    if (parser == SITS_SRV_TOOLS_HERMES) {
        const char *p = memfind(text, end, "<tool_call>");
        if (!p) goto none;
        content_len = (size_t)(p - text);
        while (p) {
            const char *b = p + strlen("<tool_call>"), *e = memfind(b, end, "</tool_call>");
            const char *stop = e ? e : end;
            json_t *o = json_loadb(b, (size_t)(stop - b), JSON_DISABLE_EOF_CHECK | JSON_DECODE_ANY, &jerr);
            if (!o) o = json_loadb(skip_ws(b, stop), (size_t)(stop - skip_ws(b, stop)), JSON_DISABLE_EOF_CHECK, &jerr);
            int bad = !o || add_call(calls, o, &rng) != 0;
            json_decref(o);
            if (bad) goto none;
            p = e ? memfind(e, end, "<tool_call>") : NULL;
        }
    } else if (parser == SITS_SRV_TOOLS_MISTRAL) {
        const char *p = memfind(text, end, "[TOOL_CALLS]");
        if (!p) goto none;
        content_len = (size_t)(p - text);
        const char *b = skip_ws(p + strlen("[TOOL_CALLS]"), end);
        json_t *a = json_loadb(b, (size_t)(end - b), JSON_DISABLE_EOF_CHECK, &jerr);
        int bad = !json_is_array(a) || json_array_size(a) == 0;
        for (size_t i = 0; !bad && i < json_array_size(a); i++) bad = add_call(calls, json_array_get(a, i), &rng) != 0;
        json_decref(a);
        if (bad) goto none;
    } else if (parser == SITS_SRV_TOOLS_LLAMA3) {
        const char *p = skip_ws(text, end);
        if (end - p >= 14 && memcmp(p, "<|python_tag|>", 14) == 0) p = skip_ws(p + 14, end);
        if (p >= end || *p != '{') goto none;
        content_len = 0;
        while (p < end) {   /* one call, or several separated by ';' */
            json_t *o = json_loadb(p, (size_t)(end - p), JSON_DISABLE_EOF_CHECK, &jerr);
            int bad = !o || add_call(calls, o, &rng) != 0;
            json_decref(o);
            if (bad) goto none;
            p = skip_ws(p + jerr.position, end);
            if (p < end && *p == ';') p = skip_ws(p + 1, end);
            else if (p < end) goto none;
        }
    } else {
        goto none;
    }
    if (json_array_size(calls) == 0) goto none;
    /* the content before the calls, without trailing white space */
    while (content_len > 0 && (text[content_len - 1] == ' ' || text[content_len - 1] == '\n')) content_len--;
    *content_len_p = content_len;
    return calls;
none:
    json_decref(calls);
    return NULL;
}
