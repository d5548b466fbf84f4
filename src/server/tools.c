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
 *   qwen3_coder  <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n</function>\n</tool_call> (Qwen3-Coder,
 *                Qwen3.5, Nemotron 3 Nano, Step 3.5); the values typed by the request's tools
 *   openai       gpt-oss's harmony: <|channel|>commentary to=functions.NAME ...<|message|>ARGS<|call|>, parsed
 *                by harmony.c with --reasoning-parser openai_gptoss (which takes the calls whatever this says);
 *                tool_choice auto only
 * auto picks one from the chat template's text (sits_srv_tool_parser_detect). */
#include "server/srv_internal.h"
#include "grammar/grammar.h"
#include "util/log.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const parser_names[] = { "none", "hermes", "llama3_json", "mistral", "auto", "openai", "qwen3_coder" };
enum { N_PARSERS = 7 };

int sits_srv_tool_parser_from_name(const char *name)
{
    if (!name || !name[0] || strcmp(name, "auto") == 0) return SITS_SRV_TOOLS_AUTO;
    for (int i = 1; i < N_PARSERS; i++) if (i != SITS_SRV_TOOLS_AUTO && strcmp(name, parser_names[i]) == 0) return i;
    if (strcmp(name, "qwen") == 0 || strcmp(name, "qwen3") == 0) return SITS_SRV_TOOLS_HERMES;
    return -1;
}

const char *sits_srv_tool_parser_name(int p) { return p >= 0 && p < N_PARSERS ? parser_names[p] : "auto"; }

int sits_srv_tool_parser_detect(const char *tmpl)
{
    if (!tmpl) return SITS_SRV_TOOLS_NONE;
    if (strstr(tmpl, "<|channel|>")) return SITS_SRV_TOOLS_OPENAI;   /* gpt-oss's harmony */
    if (strstr(tmpl, "<tool_call>") && strstr(tmpl, "<function=") && strstr(tmpl, "<parameter="))
        return SITS_SRV_TOOLS_QWEN3_CODER;   /* before hermes: the same <tool_call> marker, XML inside */
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

static int xml_tool_grammar(const sits_srv_limits_t *lim, json_t *tools, const char *only, int parallel, sits_grammar_t **g_p,
                            sits_srv_error_t *err);

/* [mistral] tokenizer v11+ templates (Mistral Small 3.2, Devstral, Magistral) write [TOOL_CALLS]NAME[ARGS]{...}: a call of
 * one function (the one named, or the only tool) is forced in that form -- the name is outside the JSON, so several
 * functions cannot share one framed grammar, and those keep the JSON list form (which the parser reads as well).
 * 1 when done (*g_p set, or err on failure: rc), 0 when this does not apply. */
static int mistral_v11_grammar(const sits_srv_limits_t *lim, json_t *tools, const char *only, int parallel, sits_grammar_t **g_p,
                               sits_srv_error_t *err, int *rc)
{
    const char *tt = lim->chat ? sits_chat_template_text(lim->chat, 1) : NULL;
    if (!tt || !strstr(tt, "[ARGS]") || (!only && json_array_size(tools) != 1)) return 0;
    json_t *fn = NULL;
    for (size_t i = 0; i < json_array_size(tools) && !fn; i++) {
        json_t *f = json_object_get(json_array_get(tools, i), "function");
        if (!only || strcmp(only, json_string_value(json_object_get(f, "name"))) == 0) fn = f;
    }
    *rc = -1;
    if (!fn) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "tool_choice",
                           "tool_choice names the function '%.64s', which 'tools' does not define", only);
        return 1;
    }
    const char *name = json_string_value(json_object_get(fn, "name"));
    json_t *params = opt(fn, "parameters");
    char *schema = params ? json_dumps(params, JSON_COMPACT) : strdup("{\"type\":\"object\"}");
    char *open = malloc(strlen(name) + 32), *key = schema ? malloc(strlen(name) + strlen(schema) + 2) : NULL;
    char msg[256] = "";
    sits_status_t st = SITS_ERR_NOMEM;
    if (open && key) {
        sprintf(open, "[TOOL_CALLS]%s[ARGS]", name);
        sprintf(key, "%s\n%s", name, schema);
        sits_grammar_frame_t fr = { .before = "", .item_open = open, .item_close = "", .sep = "", .after = "",
                                    .max_items = parallel ? -1 : 1 };
        char kind = parallel ? 'M' : 'm';
        if ((*g_p = gcache_get(lim->gcache, kind, key))) {
            st = SITS_OK;
        } else {
            st = sits_grammar_from_json_schema_framed(schema, strlen(schema), &fr, msg, sizeof msg, g_p);
            if (st == SITS_OK) gcache_put(lim->gcache, kind, key, *g_p);
        }
    }
    free(open);
    free(key);
    free(schema);
    if (st == SITS_ERR_INVALID) sits_srv_error_set(err, 400, "invalid_request_error", NULL, "tools", "tools: a function's parameters: %s", msg);
    else if (st != SITS_OK) sits_srv_error_set(err, 500, "server_error", NULL, NULL, "grammar compilation failed: %s", sits_status_str(st));
    else *rc = 0;
    return 1;
}

/* the grammar of one or more calls in the family's format, over the tools (all, or the one named) */
static int tool_grammar(const sits_srv_limits_t *lim, json_t *tools, const char *only, int parser, int parallel,
                        sits_grammar_t **g_p, sits_srv_error_t *err)
{
    if (parser == SITS_SRV_TOOLS_QWEN3_CODER) return xml_tool_grammar(lim, tools, only, parallel, g_p, err);
    int rc = -1;
    if (parser == SITS_SRV_TOOLS_MISTRAL && mistral_v11_grammar(lim, tools, only, parallel, g_p, err, &rc)) return rc;
    const char *argkey = parser == SITS_SRV_TOOLS_LLAMA3 ? "parameters" : "arguments";
    json_t *any = json_array();
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
    if (lim->reasoning == SITS_SRV_REASONING_HARMONY) parser = SITS_SRV_TOOLS_OPENAI;   /* the harmony splitter's calls */
    if (parser == SITS_SRV_TOOLS_OPENAI && lim->reasoning != SITS_SRV_REASONING_HARMONY)
        FAIL("tools", "gpt-oss's tool calls (harmony) need the server started with --reasoning-parser openai_gptoss (or auto)");
    if (parser == SITS_SRV_TOOLS_OPENAI && strcmp(mode, "auto") != 0)
        FAIL("tool_choice", "tool_choice '%s' is not supported with the harmony format (gpt-oss): pass \"auto\"", mode);
    if (parser == SITS_SRV_TOOLS_NONE)
        FAIL("tools", "this model's chat template has no tool-call format this server recognises; start the server with "
                      "--tool-call-parser hermes|llama3_json|mistral|qwen3_coder, or pass tool_choice \"none\"");
    req->tool_parser = parser;
    req->tool_single = !parallel;
    if (parser == SITS_SRV_TOOLS_QWEN3_CODER) req->tools = json_incref(tools);   /* the values' types */
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

/* ---------------- parsing the model's calls ----------------
 * One scanner serves the whole response and the stream: tool_scan walks the text so far and says how
 * much of it is content for sure and where each call's name and arguments lie (the arguments as the
 * model wrote them: the JSON object's own text, or the value of a JSON string). A whole response takes
 * the calls when every one is complete and parses; a stream sends each call's head once its name is
 * complete and its arguments' bytes as they come, so that the joined deltas are the whole response. */

#define TOOL_MAX_CALLS 16

typedef struct {
    size_t start, end;           /* the call object [start, end) once complete */
    size_t name_off, name_len;   /* the name's JSON string token, once complete (name_len 0 before); name_raw: its text */
    size_t args_off, args_len;   /* the arguments value's bytes seen so far */
    int has_args, args_done, args_str;
    int done;
    int name_raw;                /* mistral v11: [TOOL_CALLS]NAME[ARGS]{...}, the name as written */
} call_span_t;

typedef struct {
    size_t content_len;          /* text that is content for sure */
    int n;                       /* calls begun */
    call_span_t call[TOOL_MAX_CALLS];
    int marker;                  /* the calls' marker (or a call's start) was seen */
    int complete;                /* the calls' section is over (mistral's ']', every call closed) */
    int bad;                     /* text after the marker that is not a call: it was all content */
} tool_scan_t;

/* The next call id of the request's id stream rng: call_ + 24 letters and digits; mistral: 9 letters and digits
 * (Mistral's templates refuse any other id when the call comes back in the history, as vLLM's MistralToolCall). */
static void call_id(int parser, uint64_t *rng, char id[40])
{
    static const char abc[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    const int mistral = parser == SITS_SRV_TOOLS_MISTRAL;
    int o = mistral ? 0 : snprintf(id, 40, "call_");
    for (int i = 0; i < (mistral ? 9 : 24); i++) {
        *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
        id[o++] = abc[(*rng >> 33) % 62];
    }
    id[o] = 0;
}

void sits_srv_tool_call_id(uint64_t seed, int k, char id[40])
{
    uint64_t rng = seed ^ 0x9e3779b97f4a7c15ull;
    for (int i = 0; i <= k; i++) call_id(SITS_SRV_TOOLS_OPENAI, &rng, id);
}

static json_t *call_obj(int parser, const char *name, const char *args, size_t args_len, uint64_t *rng)
{
    char id[40];
    call_id(parser, rng, id);
    return json_pack("{s:s, s:s, s:{s:s, s:s%}}", "id", id, "type", "function", "function", "name", name, "arguments", args,
                     args_len);
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

/* The JSON value at p: 1 complete (*q_p just after it), 0 the text ends inside it, -1 not a value. */
static int skip_value(const char *p, const char *end, const char **q_p)
{
    if (p >= end) return 0;
    if (*p == '"') {
        for (p++; p < end; p++) {
            if (*p == '\\') { p++; continue; }
            if (*p == '"') { *q_p = p + 1; return 1; }
        }
        return 0;
    }
    if (*p == '{' || *p == '[') {
        int depth = 0;
        for (; p < end; p++) {
            if (*p == '"') {
                const char *q;
                int r = skip_value(p, end, &q);
                if (r <= 0) return r;
                p = q - 1;
            } else if (*p == '{' || *p == '[') {
                depth++;
            } else if ((*p == '}' || *p == ']') && --depth == 0) {
                *q_p = p + 1;
                return 1;
            }
        }
        return 0;
    }
    const char *s = p;   /* a number or a literal */
    while (p < end && (isalnum((unsigned char)*p) || *p == '+' || *p == '-' || *p == '.')) p++;
    if (p == s) return -1;
    if (p == end) return 0;
    *q_p = p;
    return 1;
}

/* The call object at p ('{'): its name and arguments as far as the text goes. 1 complete, 0 the text
 * ends inside it, -1 not a call object. */
static int scan_call(const char *text, const char *p, const char *end, call_span_t *c)
{
    memset(c, 0, sizeof *c);
    c->start = (size_t)(p - text);
    for (p++;;) {
        p = skip_ws(p, end);
        if (p >= end) return 0;
        if (*p == '}') {
            c->end = (size_t)(p + 1 - text);
            c->done = 1;
            return 1;
        }
        if (*p == ',') { p++; continue; }
        if (*p != '"') return -1;
        const char *q;
        int r = skip_value(p, end, &q);
        if (r <= 0) return r;
        size_t kl = (size_t)(q - p) - 2;
        int is_name = kl == 4 && !memcmp(p + 1, "name", 4);
        int is_args = (kl == 9 && !memcmp(p + 1, "arguments", 9)) || (kl == 10 && !memcmp(p + 1, "parameters", 10) && !c->has_args);
        p = skip_ws(q, end);
        if (p >= end) return 0;
        if (*p != ':') return -1;
        p = skip_ws(p + 1, end);
        if (p >= end) return 0;
        if (is_args) {
            if (*p != '{' && *p != '"') return -1;
            c->has_args = 1;
            c->args_done = 0;
            c->args_str = *p == '"';
            c->args_off = (size_t)(p - text);
        }
        r = skip_value(p, end, &q);
        if (r < 0) return -1;
        if (r == 0) {
            if (is_args) c->args_len = (size_t)(end - p);
            return 0;
        }
        if (is_name) {
            if (*p != '"') return -1;
            c->name_off = (size_t)(p - text);
            c->name_len = (size_t)(q - p);
        }
        if (is_args) {
            c->args_len = (size_t)(q - p);
            c->args_done = 1;
        }
        p = q;
    }
}

/* Bytes at the end of text[len] that could be the start of marker (held back while streaming). */
static size_t marker_prefix(const char *text, size_t len, const char *marker)
{
    size_t m = strlen(marker);
    for (size_t k = m - 1; k > 0; k--)
        if (k <= len && memcmp(text + len - k, marker, k) == 0) return k;
    return 0;
}

static size_t trim_ws(const char *text, size_t n)
{
    while (n > 0 && (text[n - 1] == ' ' || text[n - 1] == '\n')) n--;
    return n;
}

/* Calls one after the other from p: hermes (sep NULL: each after its own marker), mistral (',' inside
 * '[' .. ']'), llama3_json (';'). */
static void scan_calls(int parser, const char *text, const char *p, const char *end, tool_scan_t *s)
{
    for (;;) {
        p = skip_ws(p, end);
        if (p >= end) return;
        if (parser == SITS_SRV_TOOLS_MISTRAL && *p == ']') { s->complete = 1; return; }
        if (s->n > 0 && parser == SITS_SRV_TOOLS_MISTRAL) {
            if (*p != ',') { s->bad = 1; return; }
            p = skip_ws(p + 1, end);
            if (p >= end) return;
        }
        if (s->n > 0 && parser == SITS_SRV_TOOLS_LLAMA3) {
            if (*p != ';') { s->bad = 1; return; }
            p = skip_ws(p + 1, end);
            if (p >= end) return;
        }
        if (*p != '{' || s->n == TOOL_MAX_CALLS) { s->bad = 1; return; }
        call_span_t *c = &s->call[s->n++];
        int r = scan_call(text, p, end, c);
        if (r < 0) s->bad = 1;
        if (r <= 0) return;
        p = text + c->end;
        if (parser == SITS_SRV_TOOLS_LLAMA3 && skip_ws(p, end) == end) s->complete = 1;
        if (parser == SITS_SRV_TOOLS_HERMES) {
            const char *e = memfind(p, end, "</tool_call>");
            s->complete = 1;   /* until another marker follows */
            if (!e) return;
            p = memfind(e, end, "<tool_call>");
            if (!p) return;
            s->complete = 0;
            p += strlen("<tool_call>");
        }
    }
}

/* 1: tag is at q; 0: [q, end) is a proper start of it (the text goes on); -1: not it */
static int tag_at(const char *q, const char *end, const char *tag)
{
    size_t n = strlen(tag), have = (size_t)(end - q);
    if (memcmp(q, tag, have < n ? have : n) != 0) return -1;
    return have >= n ? 1 : 0;
}

/* [mistral] Tokenizers v11 and later (Mistral Small 3.2, Devstral, Magistral, Ministral 3): each call is
 * [TOOL_CALLS]NAME[ARGS]{...}, perhaps [TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{...} (Small 3.2's template), or
 * [TOOL_CALLS]NAME{...} when the markup tokens were dropped (vLLM's v11 reading: the name ends at the '{'). m: the
 * first marker. */
static void mistral_v11_scan(const char *text, const char *m, const char *end, int final, tool_scan_t *s)
{
    static const char mk[] = "[TOOL_CALLS]";
    for (const char *p = m; p && p < end && !s->bad;) {
        if (s->n == TOOL_MAX_CALLS) { s->bad = 1; return; }
        call_span_t *c = &s->call[s->n++];
        memset(c, 0, sizeof *c);
        c->name_raw = 1;
        c->start = (size_t)(p - text);
        const char *nm = p + strlen(mk), *q = nm;
        while (q < end && *q != '{' && *q != '[' && !isspace((unsigned char)*q)) q++;
        const char *ne = q;
        q = skip_ws(q, end);
        if (q >= end) return;   /* the name goes on */
        if (ne == nm || (*q != '{' && *q != '[')) { s->bad = 1; return; }
        for (int tags = 0; q < end && *q == '[' && tags < 2; tags++) {   /* [CALL_ID]ID, then [ARGS] */
            int id = tag_at(q, end, "[CALL_ID]"), args = tag_at(q, end, "[ARGS]");
            if (id < 0 && args < 0) { s->bad = 1; return; }
            if (id == 0 || args == 0) {   /* the tag goes on */
                if (final) s->bad = 1;
                return;
            }
            if (args == 1) {
                q += strlen("[ARGS]");
                break;
            }
            for (q += strlen("[CALL_ID]"); q < end && isalnum((unsigned char)*q);) q++;
        }
        c->name_off = (size_t)(nm - text);
        c->name_len = (size_t)(ne - nm);
        q = skip_ws(q, end);
        if (q >= end) return;
        if (*q != '{') { s->bad = 1; return; }
        c->has_args = 1;
        c->args_off = (size_t)(q - text);
        const char *v;
        int r = skip_value(q, end, &v);
        if (r < 0) { s->bad = 1; return; }
        if (r == 0) {
            c->args_len = (size_t)(end - q);
            return;
        }
        c->args_len = (size_t)(v - q);
        c->args_done = c->done = 1;
        c->end = (size_t)(v - text);
        p = skip_ws(v, end);
        if (p >= end) { s->complete = 1; return; }
        if ((size_t)(end - p) < strlen(mk)) {   /* maybe the next marker (at the end: text after the calls) */
            if (memcmp(p, mk, (size_t)(end - p)) != 0 || final) s->bad = 1;
            return;
        }
        if (memcmp(p, mk, strlen(mk)) != 0) { s->bad = 1; return; }
    }
}

/* text[len] so far (final: all of it) in the parser's format. */
static void tool_scan(int parser, const char *text, size_t len, int final, tool_scan_t *s)
{
    const char *end = text + len;
    memset(s, 0, sizeof *s);
    if (parser == SITS_SRV_TOOLS_HERMES || parser == SITS_SRV_TOOLS_MISTRAL) {
        const char *mk = parser == SITS_SRV_TOOLS_HERMES ? "<tool_call>" : "[TOOL_CALLS]";
        const char *m = memfind(text, end, mk);
        if (!m) {
            s->content_len = final ? len : trim_ws(text, len - marker_prefix(text, len, mk));
            return;
        }
        s->marker = 1;
        s->content_len = trim_ws(text, (size_t)(m - text));
        const char *p = skip_ws(m + strlen(mk), end);
        if (parser == SITS_SRV_TOOLS_MISTRAL) {
            if (p >= end) return;
            if (*p != '[') {   /* v11 and later: NAME[ARGS]{...} after each marker */
                mistral_v11_scan(text, m, end, final, s);
                return;
            }
            p++;
        }
        scan_calls(parser, text, p, end, s);
        return;
    }
    if (parser != SITS_SRV_TOOLS_LLAMA3) {
        s->content_len = len;
        return;
    }
    const char *p = skip_ws(text, end);
    size_t tag = strlen("<|python_tag|>"), rest = (size_t)(end - p);
    if (rest < tag && memcmp(p, "<|python_tag|>", rest) == 0 && !final) return;   /* maybe the tag, maybe a call */
    if (rest >= tag && memcmp(p, "<|python_tag|>", tag) == 0) p = skip_ws(p + tag, end);
    if (p >= end && !final) return;
    if (p >= end || *p != '{') {
        s->content_len = len;   /* not a call: content */
        return;
    }
    s->marker = 1;
    scan_calls(parser, text, p, end, s);
}

/* The JSON string token [p, p + n) as a C string (malloc'd), NULL when it does not parse. */
static char *json_str(const char *p, size_t n, size_t *len_p)
{
    json_error_t jerr;
    json_t *v = json_loadb(p, n, JSON_DECODE_ANY, &jerr);
    char *out = json_is_string(v) ? malloc(json_string_length(v) + 1) : NULL;
    if (out) {
        memcpy(out, json_string_value(v), json_string_length(v) + 1);
        if (len_p) *len_p = json_string_length(v);
    }
    json_decref(v);
    return out;
}

/* A complete call that parses: an object with a string name and object / string arguments. */
static int call_ok(const char *text, const call_span_t *c)
{
    json_error_t jerr;
    if (!c->done || !c->name_len || !c->has_args || !c->args_done) return 0;
    if (c->name_raw) {   /* mistral v11: the arguments must be an object */
        json_t *a = json_loadb(text + c->args_off, c->args_len, 0, &jerr);
        int ok = json_is_object(a);
        json_decref(a);
        return ok;
    }
    json_t *o = json_loadb(text + c->start, c->end - c->start, 0, &jerr);
    json_t *a = json_object_get(o, "arguments");
    if (!a) a = json_object_get(o, "parameters");
    int ok = json_is_object(o) && json_is_string(json_object_get(o, "name")) && (json_is_object(a) || json_is_string(a));
    json_decref(o);
    return ok;
}

/* Call k's OpenAI object; rng advanced as for the calls before it. */
static json_t *span_call(int parser, const char *text, const call_span_t *c, uint64_t *rng)
{
    char *name = c->name_raw ? strndup(text + c->name_off, c->name_len) : json_str(text + c->name_off, c->name_len, NULL), *sv = NULL;
    size_t alen = c->args_len;
    const char *args = text + c->args_off;
    if (c->args_str) args = sv = json_str(args, c->args_len, &alen);
    json_t *o = name && args ? call_obj(parser, name, args, alen, rng) : NULL;
    free(name);
    free(sv);
    return o;
}

/* ---------------- [qwen3_coder] calls written as XML ----------------
 * Qwen3-Coder, Qwen3.5, Nemotron 3 Nano and Step 3.5 write a call as
 *   <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n ... </function>\n</tool_call>
 * Read as vLLM's qwen3_coder parser reads it: the calls are the <function=...> blocks inside each
 * <tool_call> ... </tool_call> (the last one may be unclosed), or anywhere when the text has no <tool_call>;
 * a block runs to its </function> or the end of its region; a parameter runs to its </parameter>, the next
 * <parameter= or the block's end, less one leading and one trailing newline. The content is the text before
 * the first <tool_call> (else the first <function=), not trimmed. A value takes the type its parameter has
 * in the request's tools (integer; number: an integer when whole; boolean; object / array: JSON); "null" is
 * null; a parameter the schema does not list, or a value that does not convert, stays a string (vLLM's
 * ast.literal_eval for other types is JSON here, plus True / False / None). The arguments are the JSON
 * object of the parameters in order, written as Python's json.dumps writes it (", " and ": "). A stream
 * sends a call's head once its name is complete, then "{" and each parameter once it is complete, "}" at the
 * block's end: the same bytes as the whole response. */

typedef struct {
    size_t name_off, name_len;   /* NAME, once its '>' came */
    int named;
    char *args;                  /* the arguments decided so far (malloc'd): "{", the complete parameters, "}" when done */
    size_t args_len, args_cap;
    int done;                    /* the block ended (its </function> or its region's end; the text's at the end) */
} xml_call_t;

typedef struct {
    size_t content_len;
    int marker, n, bad;          /* bad: a name without its '>' (vLLM: then no calls at all) */
    xml_call_t call[TOOL_MAX_CALLS];
} xml_scan_t;

static void xml_scan_free(xml_scan_t *s)
{
    for (int k = 0; k < s->n; k++) free(s->call[k].args);
}

static int put(const char *s, size_t n, char **buf, size_t *len, size_t *cap)
{
    if (sits_srv_grow(buf, cap, *len + n + 1) != 0) return -1;
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = 0;
    return 0;
}

/* Python's json.dumps of v (ensure_ascii off): ", " between items, ": " after keys; a real in the shortest form
 * that reads back the same, ".0" added to a whole one (Python's repr). Appended to *buf. -1 out of memory. */
static int py_dump(json_t *v, char **buf, size_t *len, size_t *cap)
{
    if (json_is_object(v) || json_is_array(v)) {
        int obj = json_is_object(v);
        if (put(obj ? "{" : "[", 1, buf, len, cap) != 0) return -1;
        size_t i = 0;
        json_t *x;
        if (obj) {
            const char *key;
            json_object_foreach(v, key, x) {
                json_t *k = json_string(key);
                int rc = !k || (i++ && put(", ", 2, buf, len, cap)) || py_dump(k, buf, len, cap) || put(": ", 2, buf, len, cap) ||
                         py_dump(x, buf, len, cap);
                json_decref(k);
                if (rc) return -1;
            }
        } else {
            json_array_foreach(v, i, x)
                if ((i && put(", ", 2, buf, len, cap)) || py_dump(x, buf, len, cap)) return -1;
        }
        return put(obj ? "}" : "]", 1, buf, len, cap);
    }
    if (json_is_real(v)) {
        char t[48];
        double d = json_real_value(v);
        for (int p = 1; p <= 17; p++) {
            snprintf(t, sizeof t - 2, "%.*g", p, d);
            if (strtod(t, NULL) == d) break;
        }
        if (!strpbrk(t, ".eEn")) strcat(t, ".0");
        return put(t, strlen(t), buf, len, cap);
    }
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    for (size_t i = 0; s && s[i]; i++) {   /* Python writes \u escapes in lower-case hex */
        if (s[i] != '\\') continue;
        if (s[++i] == 'u')
            for (int k = 1; k <= 4 && s[i + k]; k++) s[i + k] = (char)tolower((unsigned char)s[i + k]);
    }
    int rc = s ? put(s, strlen(s), buf, len, cap) : -1;
    free(s);
    return rc;
}

/* [qwen3_coder] The parameter properties of the tool named name[n] in tools: its parameters' "properties", else the
 * parameters themselves (vLLM's _get_arguments_config); NULL when the tool or its schema is missing. */
static json_t *xml_props(json_t *tools, const char *name, size_t n)
{
    for (size_t i = 0; i < json_array_size(tools); i++) {
        json_t *fn = json_object_get(json_array_get(tools, i), "function");
        const char *fname = json_string_value(json_object_get(fn, "name"));
        if (!fname || strlen(fname) != n || memcmp(fname, name, n) != 0) continue;
        json_t *p = opt(fn, "parameters");
        if (!json_is_object(p)) return NULL;
        json_t *props = json_object_get(p, "properties");
        return props ? props : p;
    }
    return NULL;
}

/* the whole of s[n] (white space around it allowed) as a number: 1 and *d set, else 0 */
static int whole_number(const char *s, size_t n, int integer, double *d, long long *ll)
{
    char b[64];
    while (n && isspace((unsigned char)*s)) s++, n--;
    while (n && isspace((unsigned char)s[n - 1])) n--;
    if (n == 0 || n >= sizeof b) return 0;
    memcpy(b, s, n);
    b[n] = 0;
    char *e = NULL;
    errno = 0;
    if (integer) *ll = strtoll(b, &e, 10);
    else *d = strtod(b, &e);
    return e == b + n && errno == 0 && (integer || isfinite(*d));
}

/* [qwen3_coder] value v[n] of parameter p[pn] converted by its type in props (vLLM's _convert_param_value). New reference. */
static json_t *xml_value(json_t *props, const char *p, size_t pn, const char *v, size_t n)
{
    if (n == 4 && strncasecmp(v, "null", 4) == 0) return json_null();
    char *pname = strndup(p, pn);
    json_t *schema = pname && props ? json_object_get(props, pname) : NULL;
    free(pname);
    if (!schema) return json_stringn(v, n);
    json_t *t = json_is_object(schema) ? json_object_get(schema, "type") : NULL;
    char type[32] = "string";
    if (t) {   /* str(type).strip().lower(); a list of types reads as none of the names below */
        const char *ts = json_is_string(t) ? json_string_value(t) : "[";
        while (isspace((unsigned char)*ts)) ts++;
        size_t k = 0;
        for (; ts[k] && k < sizeof type - 1; k++) type[k] = (char)tolower((unsigned char)ts[k]);
        while (k && isspace((unsigned char)type[k - 1])) k--;
        type[k] = 0;
    }
    static const char *const strs[] = { "string", "str", "text", "varchar", "char", "enum", NULL };
    for (int i = 0; strs[i]; i++) if (strcmp(type, strs[i]) == 0) return json_stringn(v, n);
    double d;
    long long ll;
    if (!strncmp(type, "int", 3) || !strncmp(type, "uint", 4) || !strncmp(type, "long", 4) || !strncmp(type, "short", 5) ||
        !strncmp(type, "unsigned", 8))
        return whole_number(v, n, 1, &d, &ll) ? json_integer(ll) : json_stringn(v, n);
    if (!strncmp(type, "num", 3) || !strncmp(type, "float", 5)) {
        if (!whole_number(v, n, 0, &d, &ll)) return json_stringn(v, n);
        return d == trunc(d) && fabs(d) < 9.2e18 ? json_integer((json_int_t)d) : json_real(d);
    }
    if (!strcmp(type, "boolean") || !strcmp(type, "bool") || !strcmp(type, "binary"))
        return json_boolean(n == 4 && strncasecmp(v, "true", 4) == 0);
    json_t *j = json_loadb(v, n, JSON_DECODE_ANY, NULL);   /* json.loads (objects, arrays), or literal_eval's JSON part */
    if (j) return j;
    if (n == 4 && !memcmp(v, "True", 4)) return json_true();
    if (n == 5 && !memcmp(v, "False", 5)) return json_false();
    if (n == 4 && !memcmp(v, "None", 4)) return json_null();
    return json_stringn(v, n);
}

/* [qwen3_coder] call c's block body [b, e) after "<function=" (closed: its end is decided; else more may come): its
 * name and the arguments decided so far. -1 out of memory. */
static int xml_call(const char *text, size_t b, size_t e, int closed, json_t *tools, xml_call_t *c, int *bad)
{
    const char *p = text + b, *end = text + e;
    const char *gt = memchr(p, '>', (size_t)(end - p));
    if (!gt) {
        if (closed) *bad = 1;
        return 0;
    }
    c->named = 1;
    c->name_off = b;
    c->name_len = (size_t)(gt - p);
    json_t *props = xml_props(tools, p, c->name_len);
    if (put("{", 1, &c->args, &c->args_len, &c->args_cap) != 0) return -1;
    int nparams = 0;
    for (p = gt + 1;;) {
        const char *q = memfind(p, end, "<parameter=");
        if (!q) break;
        q += strlen("<parameter=");
        const char *cl = memfind(q, end, "</parameter>"), *nx = memfind(q, end, "<parameter="), *fe = memfind(q, end, "</function>");
        const char *ve = end;   /* the first of the three, or the block's end */
        if (cl && cl < ve) ve = cl;
        if (nx && nx < ve) ve = nx;
        if (fe && fe < ve) ve = fe;
        if (ve == end && !closed) break;   /* the value may go on */
        const char *pg = memchr(q, '>', (size_t)(ve - q));
        if (!pg) {
            *bad = 1;
            break;
        }
        const char *v = pg + 1, *vend = ve;
        if (v < vend && *v == '\n') v++;
        if (vend > v && vend[-1] == '\n') vend--;
        json_t *val = xml_value(props, q, (size_t)(pg - q), v, (size_t)(vend - v)), *key = json_stringn(q, (size_t)(pg - q));
        int rc = !val || !key || (nparams++ && put(", ", 2, &c->args, &c->args_len, &c->args_cap)) ||
                 py_dump(key, &c->args, &c->args_len, &c->args_cap) || put(": ", 2, &c->args, &c->args_len, &c->args_cap) ||
                 py_dump(val, &c->args, &c->args_len, &c->args_cap);
        json_decref(val);
        json_decref(key);
        if (rc) return -1;
        p = ve == cl ? cl + strlen("</parameter>") : ve;
    }
    if (closed && !*bad) {
        c->done = 1;
        return put("}", 1, &c->args, &c->args_len, &c->args_cap);
    }
    return 0;
}

/* s[n] appended to *re with the regex metacharacters escaped. -1 out of memory. */
static int re_quote(const char *s, size_t n, char **re, size_t *len, size_t *cap)
{
    for (size_t i = 0; i < n; i++)
        if ((strchr("\\.^$|?*+()[]{}", s[i]) && put("\\", 1, re, len, cap) != 0) || put(s + i, 1, re, len, cap) != 0) return -1;
    return 0;
}

/* [qwen3_coder] tool_grammar for the XML format: a regex of one call (or calls, one a line) of the tools (all, or the one
 * named), each <function=NAME> with parameters of its schema's names (any name when it lists none), a value any
 * text without "</" in it. The values' types and the required parameters are not forced (the format has no JSON
 * to hold them); the parser types the values as it reads them. */
static int xml_tool_grammar(const sits_srv_limits_t *lim, json_t *tools, const char *only, int parallel, sits_grammar_t **g_p,
                            sits_srv_error_t *err)
{
    char *re = NULL;
    size_t len = 0, cap = 0;
    int nf = 0, oom = 0;
#define ADD(s_) (oom = oom || put(s_, strlen(s_), &re, &len, &cap) != 0)
#define QUOTE(s_) (oom = oom || re_quote(s_, strlen(s_), &re, &len, &cap) != 0)
    ADD("(?:");
    for (size_t i = 0; i < json_array_size(tools); i++) {
        json_t *fn = json_object_get(json_array_get(tools, i), "function");
        const char *name = json_string_value(json_object_get(fn, "name")), *key;
        if (only && strcmp(only, name) != 0) continue;
        if (nf++) ADD("|");
        ADD("<tool_call>\n<function=");
        QUOTE(name);
        ADD(">\n(?:<parameter=");
        json_t *props = xml_props(tools, name, strlen(name)), *v;
        if (json_is_object(props) && json_object_size(props) > 0) {
            int np = 0;
            ADD("(?:");
            json_object_foreach(props, key, v) {
                if (np++) ADD("|");
                QUOTE(key);
            }
            ADD(")");
        } else {
            ADD("[^>\n]+");
        }
        ADD(">\n(?:[^<]|<[^/])*\n</parameter>\n)*</function>\n</tool_call>");
    }
    ADD(")");
#undef ADD
#undef QUOTE
    if (nf == 0) {
        free(re);
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "tool_choice",
                           "tool_choice names the function '%.64s', which 'tools' does not define", only ? only : "");
        return -1;
    }
    json_t *s = oom ? NULL : parallel ? json_sprintf("%s(?:\n%s)*", re, re) : json_string(re);   /* parallel: one a line */
    free(re);
    if (!s) {
        sits_srv_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    int rc = compile_regex(lim, s, "tools", g_p, err);
    json_decref(s);
    return rc;
}

/* [qwen3_coder] text[len] so far (final: all of it). -1 out of memory (s freed). */
static int xml_scan(const char *text, size_t len, int final, json_t *tools, xml_scan_t *s)
{
    const char *end = text + len;
    memset(s, 0, sizeof *s);
    const char *tc = memfind(text, end, "<tool_call>"), *fn = memfind(text, end, "<function=");
    if (!fn) {   /* no call (yet): content, less what could still become a marker */
        size_t hold = final ? 0 : marker_prefix(text, len, "<function=");
        if (!final && !tc) {
            size_t h2 = marker_prefix(text, len, "<tool_call>");
            if (h2 > hold) hold = h2;
        }
        s->content_len = tc ? (size_t)(tc - text) : len - hold;
        return 0;
    }
    s->marker = 1;
    s->content_len = (size_t)((tc ? tc : fn) - text);
    const char *r = tc ? tc : text;
    while (r < end && s->n < TOOL_MAX_CALLS && !s->bad) {   /* regions: <tool_call> .. </tool_call> (or the text's end) */
        const char *ra = text, *rb = end;
        if (tc) {
            ra = memfind(r, end, "<tool_call>");
            if (!ra) break;
            ra += strlen("<tool_call>");
            const char *rc_ = memfind(ra, end, "</tool_call>");
            rb = rc_ ? rc_ : end;
        }
        int region_closed = rb != end;
        for (const char *p = ra; p < rb && s->n < TOOL_MAX_CALLS && !s->bad;) {
            const char *f = memfind(p, rb, "<function=");
            if (!f) break;
            f += strlen("<function=");
            const char *fe = memfind(f, rb, "</function>");
            int closed = fe || region_closed || final;   /* its end is decided */
            xml_call_t *c = &s->call[s->n++];
            if (xml_call(text, (size_t)(f - text), (size_t)((fe ? fe : rb) - text), closed, tools, c, &s->bad) != 0) {
                xml_scan_free(s);
                return -1;
            }
            if (!fe) break;
            p = fe + strlen("</function>");
        }
        if (!tc || !region_closed) break;
        r = rb + strlen("</tool_call>");
    }
    return 0;
}

/* [qwen3_coder] sits_srv_tool_calls_parse */
static json_t *xml_calls_parse(const char *text, size_t len, json_t *tools, uint64_t seed, size_t *content_len_p)
{
    xml_scan_t s;
    if (xml_scan(text, len, 1, tools, &s) != 0) return NULL;
    json_t *calls = s.marker && !s.bad && s.n > 0 ? json_array() : NULL;
    uint64_t rng = seed ^ 0x9e3779b97f4a7c15ull;
    for (int k = 0; calls && k < s.n; k++) {
        char *name = strndup(text + s.call[k].name_off, s.call[k].name_len);
        json_t *c = name ? call_obj(SITS_SRV_TOOLS_QWEN3_CODER, name, s.call[k].args, s.call[k].args_len, &rng) : NULL;
        free(name);
        if (!c || json_array_append_new(calls, c) != 0) {
            json_decref(calls);
            calls = NULL;
        }
    }
    if (calls) *content_len_p = s.content_len;
    xml_scan_free(&s);
    return calls;
}

/* [qwen3_coder] sits_srv_tool_stream_step */
static int xml_stream_step(const char *text, size_t len, int final, json_t *tools, uint64_t seed, int single,
                           sits_srv_tool_stream_t *st, size_t *content_from_p, size_t *content_len_p, json_t **deltas_p)
{
    xml_scan_t s;
    *deltas_p = NULL;
    *content_from_p = st->content_sent;
    *content_len_p = 0;
    if (xml_scan(text, len, final, tools, &s) != 0) return -1;
    if ((final || s.bad) && !(s.marker && !s.bad && s.n > 0)) {
        /* [the whole response's rule] no calls after all: whatever was not sent is content */
        if (st->heads > 0) {
            xml_scan_free(&s);
            return 0;
        }
        xml_scan_free(&s);
        s.content_len = len;
        s.n = 0;
    }
    if (s.content_len > st->content_sent && st->heads == 0) {
        *content_len_p = s.content_len - st->content_sent;
        st->content_sent = s.content_len;
    }
    json_t *d = json_array();
    uint64_t rng = seed ^ 0x9e3779b97f4a7c15ull;
    int n = single && s.n > 1 ? 1 : s.n, rc = d ? 0 : -1;
    for (int k = 0; rc == 0 && k < n; k++) {
        const xml_call_t *c = &s.call[k];
        char id[40];
        call_id(SITS_SRV_TOOLS_QWEN3_CODER, &rng, id);   /* call k's id, as the whole response numbers them */
        if (k >= st->heads) {
            if (!c->named) break;
            json_t *head = json_pack("{s:I, s:s, s:s, s:{s:s%, s:s}}", "index", (json_int_t)k, "id", id, "type", "function",
                                     "function", "name", text + c->name_off, c->name_len, "arguments", "");
            if (!head || json_array_append_new(d, head) != 0) rc = -1;
            st->heads = k + 1;
            st->args_sent = 0;
        }
        if (rc == 0 && k == st->heads - 1 && c->args_len > st->args_sent) {
            json_t *a = json_pack("{s:I, s:{s:s%}}", "index", (json_int_t)k, "function", "arguments", c->args + st->args_sent,
                                  c->args_len - st->args_sent);
            if (!a || json_array_append_new(d, a) != 0) rc = -1;
            st->args_sent = c->args_len;
        }
    }
    xml_scan_free(&s);
    if (rc != 0 || json_array_size(d) == 0) json_decref(d);
    else *deltas_p = d;
    return rc;
}

json_t *sits_srv_tool_calls_parse(int parser, json_t *tools, const char *text, size_t len, uint64_t seed, size_t *content_len_p)
{
    if (parser == SITS_SRV_TOOLS_QWEN3_CODER) return xml_calls_parse(text, len, tools, seed, content_len_p);
    tool_scan_t s;
    tool_scan(parser, text, len, 1, &s);
    if (!s.marker || s.bad || !s.complete || s.n == 0) return NULL;
    for (int k = 0; k < s.n; k++) if (!call_ok(text, &s.call[k])) return NULL;
    json_t *calls = json_array();
    uint64_t rng = seed ^ 0x9e3779b97f4a7c15ull;
    for (int k = 0; calls && k < s.n; k++) {
        json_t *c = span_call(parser, text, &s.call[k], &rng);
        if (!c || json_array_append_new(calls, c) != 0) {
            json_decref(calls);
            return NULL;
        }
    }
    if (calls) *content_len_p = s.content_len;
    return calls;
}

int sits_srv_tool_stream_step(int parser, json_t *tools, const char *text, size_t len, int final, uint64_t seed, int single,
                              sits_srv_tool_stream_t *st, size_t *content_from_p, size_t *content_len_p, json_t **deltas_p)
{
    if (parser == SITS_SRV_TOOLS_QWEN3_CODER)
        return xml_stream_step(text, len, final, tools, seed, single, st, content_from_p, content_len_p, deltas_p);
    tool_scan_t s;
    tool_scan(parser, text, len, final, &s);
    *deltas_p = NULL;
    *content_from_p = st->content_sent;
    *content_len_p = 0;
    int whole_ok = s.marker && !s.bad && s.complete && s.n > 0;
    for (int k = 0; final && whole_ok && k < s.n; k++) whole_ok = call_ok(text, &s.call[k]);
    if (final && !whole_ok) {
        /* [the whole response's rule] no calls after all: whatever was not sent is content */
        if (st->heads > 0) return 0;   /* a call went out already: nothing more */
        s.content_len = len;
        s.n = 0;
    } else if (s.bad && st->heads == 0) {
        s.content_len = len;
        s.n = 0;
    }
    if (s.content_len > st->content_sent && st->heads == 0) {
        *content_len_p = s.content_len - st->content_sent;
        st->content_sent = s.content_len;
    }
    json_t *d = json_array();
    if (!d) return -1;
    uint64_t rng = seed ^ 0x9e3779b97f4a7c15ull;
    int n = single && s.n > 1 ? 1 : s.n;
    for (int k = 0; k < n; k++) {
        const call_span_t *c = &s.call[k];
        char id[40];
        call_id(parser, &rng, id);   /* call k's id, as the whole response numbers them */
        if (k >= st->heads) {
            if (!c->name_len) break;   /* its name is not complete yet */
            char *name = c->name_raw ? strndup(text + c->name_off, c->name_len) : json_str(text + c->name_off, c->name_len, NULL);
            json_t *head = name ? json_pack("{s:I, s:s, s:s, s:{s:s, s:s}}", "index", (json_int_t)k, "id", id, "type", "function",
                                            "function", "name", name, "arguments", "")
                                : NULL;
            free(name);
            if (!head || json_array_append_new(d, head) != 0) goto oom;
            st->heads = k + 1;
            st->args_sent = 0;
        }
        if (k < st->heads - 1 || !c->has_args) continue;   /* an earlier call: all sent */
        /* the arguments: raw bytes as they come (an object), or the whole value at once (a string) */
        const char *frag = NULL;
        char *sv = NULL;
        size_t flen = 0;
        if (!c->args_str && c->args_len > st->args_sent) {
            frag = text + c->args_off + st->args_sent;
            flen = c->args_len - st->args_sent;
        } else if (c->args_str && c->args_done && st->args_sent == 0) {
            frag = sv = json_str(text + c->args_off, c->args_len, &flen);
        }
        if (frag && flen > 0) {
            json_t *a = json_pack("{s:I, s:{s:s%}}", "index", (json_int_t)k, "function", "arguments", frag, flen);
            free(sv);
            if (!a || json_array_append_new(d, a) != 0) goto oom;
            st->args_sent = c->args_len;
        } else {
            free(sv);
        }
    }
    if (json_array_size(d) == 0) json_decref(d);
    else *deltas_p = d;
    return 0;
oom:
    json_decref(d);
    return -1;
}
