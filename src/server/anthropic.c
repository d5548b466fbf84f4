/* anthropic.c -- [anthropic] POST /v1/messages (Anthropic's Messages API, as vLLM serves it): the request's
 * translation into a chat request, and the chat endpoint's output translated into Anthropic's shapes (see
 * anthropic.h).
 *
 * Request: model, max_tokens (required, >= 1), messages (role user / assistant; content a string or blocks: text;
 * in user turns tool_result {tool_use_id, content: a string or text blocks, is_error} -> a tool message each, before
 * the turn's text; in assistant turns tool_use {id, name, input} -> tool_calls (arguments: input as JSON text),
 * thinking -> reasoning, redacted_thinking skipped as vLLM skips it), system (a string or text blocks: one system
 * message first, the texts joined as vLLM joins them), stop_sequences, temperature, top_p, top_k, stream, metadata,
 * tools ({name, description, input_schema}; type absent or "custom"), tool_choice ({type: auto | any | tool (name) |
 * none, disable_parallel_tool_use}), thinking ({type: enabled, budget_tokens} | {type: adaptive} | {type: disabled}:
 * the template's enable_thinking; the budget is not a cap), output_config ({effort, format: {type: json_schema,
 * schema}}: reasoning_effort and a response_format the grammar enforces; the beta's top-level output_format too), and
 * vLLM's chat_template_kwargs. Refused with 400 naming the parameter:
 * image / document / other blocks, server tools, a role other than user / assistant. Other fields are ignored, as
 * vLLM's request model ignores them.
 *
 * Output: a message {id "msg_...", content: [thinking {thinking, signature ""}] [text] [tool_use {id, name, input:
 * the arguments parsed}...], stop_reason (chat finish stop -> end_turn, or stop_sequence with stop_sequence set when
 * one of stop_sequences ended it, or tool_use when it made calls; length -> max_tokens; tool_calls -> tool_use; abort
 * -> null), usage {input_tokens, output_tokens, cache_read_input_tokens when the chat usage has cached tokens}}.
 * Streams: message_start (the message, content [], usage with input_tokens), the chat stream's reasoning / content /
 * tool-call deltas opening and closing blocks in order (content_block_start, thinking_delta / text_delta /
 * input_json_delta, content_block_stop), then message_delta (stop_reason, stop_sequence, usage) and message_stop; an
 * error as event "error". */
#include "server/anthropic.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { OPEN_NONE = 0, OPEN_THINKING, OPEN_TEXT, OPEN_TOOL };

struct sits_srv_anth {
    int input_tokens;        /* the rendered prompt's */
    char *stop;              /* the stop sequence that ended the output (malloc'd; NULL: none) */
    /* the stream */
    int started, failed;
    int open;                /* OPEN_* */
    int n_blocks;            /* blocks opened; the open one is n_blocks - 1 */
    int call_index;          /* the open tool_use's chat tool_calls index */
    int calls;               /* tool_use blocks opened */
    char finish[16];
    json_t *usage;           /* the chat usage chunk's */
};

#define BAD(...) do { sits_srv_error_set(err, 400, "invalid_request_error", NULL, NULL, __VA_ARGS__); goto fail; } while (0)
#define NOMEM() do { sits_srv_error_set(err, 500, "server_error", NULL, NULL, "out of memory"); goto fail; } while (0)

static json_t *opt(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return v && !json_is_null(v) ? v : NULL;
}

static int is_str(json_t *v, const char *s)
{
    return json_is_string(v) && strcmp(json_string_value(v), s) == 0;
}

static const char *str_or(json_t *v, const char *fallback)
{
    return json_is_string(v) ? json_string_value(v) : fallback;
}

/* ---------------- the request ---------------- */

/* A tool_result's content (a string or text blocks) as the tool message's text (a new reference; NULL: err set). */
static json_t *result_text(json_t *c, size_t i, size_t k, sits_srv_error_t *err)
{
    if (!c) return json_string("");
    if (json_is_string(c)) return json_incref(c);
    json_t *parts = json_is_array(c) ? json_array() : NULL, *p;
    size_t j;
    json_array_foreach(json_is_array(c) ? c : NULL, j, p) {
        json_t *text = json_object_get(p, "text");
        if (!is_str(json_object_get(p, "type"), "text") || !json_is_string(text)) {
            json_decref(parts);
            parts = NULL;
            break;
        }
        json_array_append_new(parts, json_pack("{s:s, s:O}", "type", "text", "text", text));
    }
    if (!parts)
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "messages",
                           "messages[%zu].content[%zu].content: a tool_result's content must be a string or text blocks", i, k);
    return parts;
}

/* One content block k of message i (role user or assistant) into parts (text), calls (tool_use), reasoning (thinking
 * text appended) or msgs (tool_result: a tool message). 0, or -1 with err set. */
static int take_block(json_t *b, int user, size_t i, size_t k, json_t *parts, json_t *calls, json_t **reasoning, json_t *msgs,
                      sits_srv_error_t *err)
{
    json_t *type = json_object_get(b, "type"), *v;
    const char *t = str_or(type, "?");
    if (strcmp(t, "text") == 0 && json_is_string(v = json_object_get(b, "text"))) {
        if (json_string_length(v)) json_array_append_new(parts, json_pack("{s:s, s:O}", "type", "text", "text", v));
        return 0;
    }
    if (user && strcmp(t, "tool_result") == 0 && json_is_string(v = json_object_get(b, "tool_use_id"))) {
        json_t *c = result_text(opt(b, "content"), i, k, err), *e = opt(b, "is_error");
        if (!c) return -1;
        if (e && !json_is_boolean(e)) {
            json_decref(c);
            sits_srv_error_set(err, 400, "invalid_request_error", NULL, "messages",
                               "messages[%zu].content[%zu].is_error must be a boolean", i, k);
            return -1;
        }
        return json_array_append_new(msgs, json_pack("{s:s, s:o, s:O}", "role", "tool", "content", c, "tool_call_id", v));
    }
    if (!user && strcmp(t, "tool_use") == 0 && json_is_string(v = json_object_get(b, "id")) &&
        json_is_string(json_object_get(b, "name")) && json_is_object(json_object_get(b, "input"))) {
        char *args = json_dumps(json_object_get(b, "input"), JSON_COMPACT);
        json_t *call = args ? json_pack("{s:O, s:s, s:{s:O, s:s}}", "id", v, "type", "function", "function", "name",
                                        json_object_get(b, "name"), "arguments", args) : NULL;
        free(args);
        return call ? json_array_append_new(calls, call) : -1;
    }
    if (!user && strcmp(t, "thinking") == 0 && json_is_string(v = json_object_get(b, "thinking"))) {
        json_t *joined = json_sprintf("%s%s", *reasoning ? json_string_value(*reasoning) : "", json_string_value(v));
        json_decref(*reasoning);
        *reasoning = joined;
        return joined ? 0 : -1;
    }
    if (!user && strcmp(t, "redacted_thinking") == 0) return 0;   /* opaque: skipped, as vLLM skips it */
    if (strcmp(t, "image") == 0 || strcmp(t, "document") == 0)
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "messages",
                           "messages[%zu].content[%zu]: %s blocks are not supported (this server takes text)", i, k, t);
    else
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "messages",
                           "messages[%zu].content[%zu]: a '%.40s' block %s (a %s turn takes text%s blocks)", i, k, t,
                           json_is_object(b) ? "is malformed or not allowed here" : "must be an object", user ? "user" : "assistant",
                           user ? " and tool_result" : ", thinking and tool_use");
    return -1;
}

/* messages -> chat messages appended to msgs. */
static int messages_chat(json_t *messages, json_t *msgs, sits_srv_error_t *err)
{
    if (!json_is_array(messages) || json_array_size(messages) == 0) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "messages", "'messages' must be a non-empty array");
        return -1;
    }
    for (size_t i = 0; i < json_array_size(messages); i++) {
        json_t *m = json_array_get(messages, i), *role = json_object_get(m, "role"), *c = json_object_get(m, "content");
        int user = is_str(role, "user");
        if (!user && !is_str(role, "assistant")) {
            sits_srv_error_set(err, 400, "invalid_request_error", NULL, "messages",
                               "messages[%zu].role must be \"user\" or \"assistant\"", i);
            return -1;
        }
        if (json_is_string(c)) {
            if (json_array_append_new(msgs, json_pack("{s:O, s:O}", "role", role, "content", c)) != 0) goto nomem;
            continue;
        }
        if (!json_is_array(c)) {
            sits_srv_error_set(err, 400, "invalid_request_error", NULL, "messages",
                               "messages[%zu].content must be a string or an array of content blocks", i);
            return -1;
        }
        json_t *parts = json_array(), *calls = json_array(), *reasoning = NULL, *b, *out = NULL;
        size_t k;
        int rc = parts && calls ? 0 : -1;
        json_array_foreach(c, k, b)
            if (rc == 0) rc = take_block(b, user, i, k, parts, calls, &reasoning, msgs, err);
        /* one text block: its string (vLLM's); more: the chat's text parts; an assistant's reasoning alone: "" */
        size_t n = json_array_size(parts);
        json_t *content = n == 1 ? json_object_get(json_array_get(parts, 0), "text") : n ? parts : NULL;
        if (rc == 0 && (!user || n)) {
            out = json_pack("{s:O}", "role", role);
            if (!out || ((content || !json_array_size(calls)) &&
                         json_object_set_new(out, "content", content ? json_incref(content) : json_string("")) != 0) ||
                (json_array_size(calls) && json_object_set(out, "tool_calls", calls) != 0) ||
                (reasoning && json_object_set(out, "reasoning", reasoning) != 0) || json_array_append_new(msgs, out) != 0)
                rc = -1;
        }
        json_decref(parts);
        json_decref(calls);
        json_decref(reasoning);
        if (rc != 0) {
            if (err->status == 0) goto nomem;
            return -1;
        }
    }
    return 0;
nomem:
    sits_srv_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
    return -1;
}

/* system: a string or text blocks -> the first chat message (the texts joined, as vLLM joins them). */
static int system_chat(json_t *sys, json_t *msgs, sits_srv_error_t *err)
{
    if (!sys) return 0;
    json_t *text = json_is_string(sys) ? json_incref(sys) : json_is_array(sys) ? json_string("") : NULL, *b;
    size_t k;
    json_array_foreach(json_is_array(sys) ? sys : NULL, k, b) {
        json_t *t = json_object_get(b, "text");
        if (!text || !is_str(json_object_get(b, "type"), "text") || !json_is_string(t)) {
            json_decref(text);
            text = NULL;
            break;
        }
        json_t *joined = json_sprintf("%s%s", json_string_value(text), json_string_value(t));
        json_decref(text);
        text = joined;
    }
    if (!text) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "system", "'system' must be a string or an array of text blocks");
        return -1;
    }
    return json_array_append_new(msgs, json_pack("{s:s, s:o}", "role", "system", "content", text));
}

/* tools -> chat function tools; tool_choice -> chat's tool_choice and parallel_tool_calls. */
static int tools_chat(json_t *root, json_t *chat, sits_srv_error_t *err)
{
    json_t *tools = opt(root, "tools"), *choice = opt(root, "tool_choice"), *t, *out = NULL;
    size_t i;
    if (tools && !json_is_array(tools)) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "tools", "'tools' must be an array");
        return -1;
    }
    if (tools && (!(out = json_array()) || json_object_set_new(chat, "tools", out) != 0)) return -1;
    json_array_foreach(tools, i, t) {
        json_t *type = opt(t, "type"), *name = json_object_get(t, "name"), *schema = json_object_get(t, "input_schema");
        if (type && !is_str(type, "custom")) {
            sits_srv_error_set(err, 400, "invalid_request_error", NULL, "tools",
                               "tools[%zu]: tools of type '%.40s' are not supported (only client tools {name, description, "
                               "input_schema} are)", i, str_or(type, "?"));
            return -1;
        }
        if (!json_is_string(name) || json_string_length(name) == 0 || !json_is_object(schema)) {
            sits_srv_error_set(err, 400, "invalid_request_error", NULL, "tools",
                               "tools[%zu] must be {\"name\": string, \"description\": string, \"input_schema\": {...}}", i);
            return -1;
        }
        json_t *fn = json_pack("{s:O}", "name", name);   /* in chat's order: the template renders them as JSON */
        if (fn && opt(t, "description")) json_object_set(fn, "description", opt(t, "description"));
        if (fn && json_object_set(fn, "parameters", schema) != 0) {
            json_decref(fn);
            fn = NULL;
        }
        if (!fn || json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", fn)) != 0) return -1;
    }
    if (!choice) return 0;
    json_t *type = json_object_get(choice, "type"), *name = json_object_get(choice, "name");
    json_t *dp = opt(choice, "disable_parallel_tool_use");
    static const char *const map[][2] = { { "auto", "auto" }, { "any", "required" }, { "none", "none" } };
    json_t *tc = NULL;
    for (int k = 0; k < 3; k++)
        if (is_str(type, map[k][0])) tc = json_string(map[k][1]);
    if (is_str(type, "tool") && json_is_string(name))
        tc = json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name", name);
    if (!tc || (dp && !json_is_boolean(dp))) {
        json_decref(tc);
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "tool_choice",
                           "'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"none\"} or {\"type\": \"tool\", \"name\": "
                           "...}, with an optional boolean disable_parallel_tool_use");
        return -1;
    }
    if (json_is_true(dp) && json_object_set_new(chat, "parallel_tool_calls", json_false()) != 0) return -1;
    return json_object_set_new(chat, "tool_choice", tc);
}

/* thinking -> chat_template_kwargs.enable_thinking (over the request's own chat_template_kwargs). */
static int thinking_chat(json_t *root, json_t *chat, sits_srv_error_t *err)
{
    json_t *th = opt(root, "thinking"), *type = json_object_get(th, "type"), *budget = json_object_get(th, "budget_tokens");
    if (!th) return 0;
    int on = is_str(type, "enabled") || is_str(type, "adaptive");   /* adaptive: thinking on, the model decides how much */
    if (!(on || is_str(type, "disabled")) ||
        (is_str(type, "enabled") && !(json_is_integer(budget) && json_integer_value(budget) >= 1))) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "thinking",
                           "'thinking' must be {\"type\": \"enabled\", \"budget_tokens\": integer >= 1}, {\"type\": "
                           "\"adaptive\"} or {\"type\": \"disabled\"}");
        return -1;
    }
    json_t *kw = json_object_get(chat, "chat_template_kwargs");
    if (!json_is_object(kw)) {   /* absent (a non-object is the chat parser's to refuse) */
        if (kw || json_object_set_new(chat, "chat_template_kwargs", json_object()) != 0) return kw ? 0 : -1;
        kw = json_object_get(chat, "chat_template_kwargs");
    }
    return json_object_set_new(kw, "enable_thinking", json_boolean(on));
}

/* output_config {effort, format {type json_schema, schema}} (and the structured-outputs beta's top-level output_format,
 * the same format) -> reasoning_effort and response_format json_schema: a format is enforced by the grammar as the chat
 * endpoint's response_format is, an effort is a template variable (gpt-oss's "Reasoning: high"; the chat parser checks
 * its value). */
static int output_chat(json_t *root, json_t *chat, sits_srv_error_t *err)
{
    json_t *oc = opt(root, "output_config"), *of = opt(root, "output_format");
    const char *where = "output_config.format";
    if (oc && !json_is_object(oc)) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "output_config", "'output_config' must be an object");
        return -1;
    }
    json_t *fmt = oc ? opt(oc, "format") : NULL;
    if (fmt && of) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "output_format",
                           "give the format once: output_config.format or output_format");
        return -1;
    }
    if (!fmt && of) {
        fmt = of;
        where = "output_format";
    }
    if (fmt) {
        json_t *schema = json_is_object(fmt) ? opt(fmt, "schema") : NULL;
        if (!json_is_object(fmt) || !is_str(json_object_get(fmt, "type"), "json_schema") || !json_is_object(schema)) {
            sits_srv_error_set(err, 400, "invalid_request_error", NULL, where,
                               "'%s' must be {\"type\": \"json_schema\", \"schema\": a JSON schema object}", where);
            return -1;
        }
        if (json_object_set_new(chat, "response_format", json_pack("{s:s, s:{s:s, s:O}}", "type", "json_schema", "json_schema",
                                                                   "name", "output", "schema", schema)) != 0)
            return -1;
    }
    json_t *effort = oc ? opt(oc, "effort") : NULL;
    if (effort && json_object_set(chat, "reasoning_effort", effort) != 0) return -1;
    return 0;
}

/* The chat parser's parameter names -> the Messages ones, in err's param and message; fmt: the name the request gave
 * its format (output_config.format, or the beta's output_format), which the chat request calls response_format. */
static void rename_param(sits_srv_error_t *err, const char *fmt)
{
    static const char *const param[][2] = { { "max_completion_tokens", "max_tokens" }, { "stop", "stop_sequences" },
                                            { "stream_options", "stream" }, { "parallel_tool_calls", "tool_choice" },
                                            { "reasoning_effort", "output_config.effort" } };
    const char *const text[][2] = { { "max_completion_tokens", "max_tokens" }, { "'stop'", "'stop_sequences'" },
                                    { "stream_options", "stream" }, { "parallel_tool_calls", "disable_parallel_tool_use" },
                                    { "'reasoning_effort'", "'output_config.effort'" }, { "response_format", fmt } };
    if (err->param && strcmp(err->param, "response_format") == 0) err->param = fmt;
    for (size_t k = 0; err->param && k < sizeof param / sizeof param[0]; k++)
        if (strcmp(err->param, param[k][0]) == 0) err->param = param[k][1];
    for (size_t k = 0; k < sizeof text / sizeof text[0]; k++) {
        char *at = strstr(err->message, text[k][0]), out[sizeof err->message];
        if (!at) continue;
        snprintf(out, sizeof out, "%.*s%s%s", (int)(at - err->message), err->message, text[k][1], at + strlen(text[k][0]));
        memcpy(err->message, out, sizeof out);
    }
}

/* The Messages request root -> the chat request's parsed form (count: count_tokens, no generation fields). */
static int parse_chat(const sits_srv_limits_t *lim, json_t *root, int count, sits_srv_request_t *req, sits_srv_error_t *err)
{
    char *text = NULL;
    json_t *chat = json_pack("{s:[]}", "messages"), *v, *mt = opt(root, "max_tokens");
    if (!chat) NOMEM();
    if (!json_is_string(opt(root, "model"))) BAD("'model' is required (a string)");
    if (!count && !(json_is_integer(mt) && json_integer_value(mt) >= 1)) BAD("'max_tokens' is required: an integer >= 1");
    /* passed as they are (the chat parser checks them): Anthropic's, then vLLM's extras */
    static const char *const same[] = { "model", "chat_template_kwargs", "temperature", "top_p", "top_k", "stream", "seed",
                                        "repetition_penalty", "ignore_eos", "structured_outputs", "logit_bias" };
    for (size_t k = 0; k < (count ? 2 : sizeof same / sizeof same[0]); k++)
        if (json_object_get(root, same[k])) json_object_set(chat, same[k], json_object_get(root, same[k]));
    if (!count) json_object_set(chat, "max_completion_tokens", mt);
    if (!count && (v = opt(root, "stop_sequences"))) {
        if (!json_is_array(v)) BAD("'stop_sequences' must be an array of strings");
        json_object_set(chat, "stop", v);
    }
    if (!count && json_is_true(opt(root, "stream"))) json_object_set_new(chat, "stream_options", json_pack("{s:b}", "include_usage", 1));
    if ((v = opt(root, "metadata")) && !json_is_object(v)) BAD("'metadata' must be an object");
    json_t *msgs = json_object_get(chat, "messages");
    if (system_chat(opt(root, "system"), msgs, err) != 0 || messages_chat(json_object_get(root, "messages"), msgs, err) != 0 ||
        tools_chat(root, chat, err) != 0 || thinking_chat(root, chat, err) != 0 || (!count && output_chat(root, chat, err) != 0)) {
        if (err->status == 0) NOMEM();
        goto fail;
    }
    if (!(text = json_dumps(chat, JSON_COMPACT))) NOMEM();
    if (sits_srv_request_parse(lim, SITS_SRV_CHAT, text, strlen(text), req, err) != 0) {
        json_t *oc = opt(root, "output_config");
        rename_param(err, !(json_is_object(oc) && opt(oc, "format")) && opt(root, "output_format") ? "output_format"
                                                                                                    : "output_config.format");
        goto fail;
    }
    json_decref(chat);
    free(text);
    return 0;
fail:
    json_decref(chat);
    free(text);
    return -1;
}

int sits_srv_anth_parse(const sits_srv_limits_t *lim, const char *body, size_t len, sits_srv_request_t *req,
                        sits_srv_anth_t **st_p, sits_srv_error_t *err)
{
    memset(req, 0, sizeof *req);
    memset(err, 0, sizeof *err);
    json_t *root = sits_srv_json_object_body(body, len, err);
    if (!root || parse_chat(lim, root, 0, req, err) != 0) {
        json_decref(root);
        return -1;
    }
    json_decref(root);
    sits_srv_anth_t *st = calloc(1, sizeof *st);
    if (!st) {
        sits_srv_request_free(req);
        sits_srv_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    st->input_tokens = req->n_prompt;
    *st_p = st;
    return 0;
}

char *sits_srv_anth_count_tokens(const sits_srv_limits_t *lim, const char *body, size_t len, sits_srv_error_t *err)
{
    sits_srv_request_t req;
    memset(&req, 0, sizeof req);
    memset(err, 0, sizeof *err);
    json_t *root = sits_srv_json_object_body(body, len, err);
    char *out = NULL;
    if (root && parse_chat(lim, root, 1, &req, err) == 0) {
        json_t *o = json_pack("{s:i}", "input_tokens", req.n_prompt);
        if (o) out = json_dumps(o, JSON_COMPACT);
        json_decref(o);
        sits_srv_request_free(&req);
        if (!out) sits_srv_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
    }
    json_decref(root);
    return out;
}

/* ---------------- the output ---------------- */

/* stop_reason from the chat finish_reason: calls, the request made tool calls; NULL (null): cut by the server. */
static const char *stop_reason(const sits_srv_anth_t *st, const char *finish, int calls)
{
    if (!finish || strcmp(finish, "abort") == 0) return NULL;
    if (strcmp(finish, "length") == 0) return "max_tokens";
    if (strcmp(finish, "tool_calls") == 0 || calls) return "tool_use";
    return st->stop ? "stop_sequence" : "end_turn";
}

/* Anthropic usage from the chat usage (cache_read_input_tokens when it has cached tokens). */
static json_t *usage_of(json_t *u)
{
    json_t *cached = json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens");
    json_t *o = json_pack("{s:I, s:I}", "input_tokens", json_integer_value(json_object_get(u, "prompt_tokens")),
                          "output_tokens", json_integer_value(json_object_get(u, "completion_tokens")));
    if (o && json_is_integer(cached)) json_object_set(o, "cache_read_input_tokens", cached);
    return o;
}

/* The message object (content and usage consumed). */
static json_t *message_obj(const sits_srv_anth_t *st, json_t *chat, json_t *content, const char *reason, json_t *usage)
{
    return json_pack("{s:s, s:s, s:s, s:s, s:o, s:s?, s:s?, s:o}", "id", str_or(json_object_get(chat, "id"), "msg_0"), "type",
                     "message", "role", "assistant", "model", str_or(json_object_get(chat, "model"), ""), "content", content,
                     "stop_reason", reason, "stop_sequence", reason && strcmp(reason, "stop_sequence") == 0 ? st->stop : NULL,
                     "usage", usage);
}

static char *anth_body(void *vst, char *chat_body)
{
    sits_srv_anth_t *st = vst;
    if (!chat_body) return NULL;
    json_t *chat = json_loads(chat_body, JSON_ALLOW_NUL, NULL), *content = json_array(), *call;
    free(chat_body);
    char *s = NULL;
    if (!chat || !content) goto done;
    json_t *ch = json_array_get(json_object_get(chat, "choices"), 0), *msg = json_object_get(ch, "message");
    json_t *rs = json_object_get(msg, "reasoning_content"), *text = json_object_get(msg, "content");
    json_t *calls = json_object_get(msg, "tool_calls");
    if (json_string_length(rs))
        json_array_append_new(content, json_pack("{s:s, s:O, s:s}", "type", "thinking", "thinking", rs, "signature", ""));
    if (json_string_length(text)) json_array_append_new(content, json_pack("{s:s, s:O}", "type", "text", "text", text));
    size_t k;
    json_array_foreach(calls, k, call) {
        json_t *fn = json_object_get(call, "function");
        json_t *input = json_loads(str_or(json_object_get(fn, "arguments"), "{}"), 0, NULL);
        json_array_append_new(content, json_pack("{s:s, s:s, s:s, s:o}", "type", "tool_use", "id", str_or(json_object_get(call, "id"), ""),
                                                 "name", str_or(json_object_get(fn, "name"), ""), "input",
                                                 json_is_object(input) ? input : json_object()));
        if (!json_is_object(input)) json_decref(input);
    }
    json_t *o = message_obj(st, chat, json_incref(content),
                            stop_reason(st, json_string_value(json_object_get(ch, "finish_reason")), json_array_size(calls) > 0),
                            usage_of(json_object_get(chat, "usage")));
    if (o) s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
done:
    json_decref(content);
    json_decref(chat);
    return s;
}

/* ---------------- the stream ---------------- */

/* Closes the open block. */
static void close_block(sits_srv_anth_t *st, sits_srv_sse_buf_t *b)
{
    if (st->open == OPEN_NONE) return;
    sits_srv_sse_named(b, "content_block_stop", json_pack("{s:i}", "index", st->n_blocks - 1));
    st->open = OPEN_NONE;
}

/* Opens block (consumed) of kind, closing the open one. */
static void open_block(sits_srv_anth_t *st, sits_srv_sse_buf_t *b, int kind, json_t *block)
{
    close_block(st, b);
    sits_srv_sse_named(b, "content_block_start", json_pack("{s:i, s:o}", "index", st->n_blocks++, "content_block", block));
    st->open = kind;
}

/* text[len] for the open block of kind (a thinking / text block opened when another is open): its delta. */
static void delta(sits_srv_anth_t *st, sits_srv_sse_buf_t *b, int kind, const char *text, size_t len)
{
    static const char *const dtype[] = { NULL, "thinking_delta", "text_delta", "input_json_delta" };
    static const char *const key[] = { NULL, "thinking", "text", "partial_json" };
    if (len == 0) return;
    if (kind == OPEN_THINKING && st->open != kind)
        open_block(st, b, kind, json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", "", "signature", ""));
    if (kind == OPEN_TEXT && st->open != kind) open_block(st, b, kind, json_pack("{s:s, s:s}", "type", "text", "text", ""));
    sits_srv_sse_named(b, "content_block_delta", json_pack("{s:i, s:{s:s, s:s%}}", "index", st->n_blocks - 1, "delta", "type",
                                                           dtype[kind], key[kind], text, len));
}

/* One piece of a chat chunk (sits_srv_chunk_pieces): its delta event, a call's head opening its tool_use block. */
typedef struct {
    sits_srv_anth_t *st;
    sits_srv_sse_buf_t *b;
} walk_t;

static void piece(void *ctx, int kind, int index, const char *id, const char *name, const char *text, size_t len)
{
    walk_t *w = ctx;
    sits_srv_anth_t *st = w->st;
    if (kind == SITS_SRV_PIECE_CALL && (id || st->open != OPEN_TOOL || index != st->call_index)) {   /* a call's head */
        open_block(st, w->b, OPEN_TOOL, json_pack("{s:s, s:s, s:s, s:{}}", "type", "tool_use", "id", id ? id : "", "name", name,
                                                  "input"));
        st->call_index = index;
        st->calls++;
    }
    delta(st, w->b, kind == SITS_SRV_PIECE_REASONING ? OPEN_THINKING : kind == SITS_SRV_PIECE_CONTENT ? OPEN_TEXT : OPEN_TOOL, text, len);
}

/* One chat chunk's choice delta. */
static void chunk(sits_srv_anth_t *st, sits_srv_sse_buf_t *b, json_t *ch)
{
    walk_t w = { st, b };
    const char *fin = sits_srv_chunk_pieces(ch, piece, &w);
    if (fin) snprintf(st->finish, sizeof st->finish, "%s", fin);
}

/* Anthropic's error type for an HTTP status. */
static const char *error_type(int status)
{
    switch (status) {
    case 400: case 405: case 422: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: case 529: return "overloaded_error";
    default: return "api_error";
    }
}

static json_t *error_obj(const char *type, const char *message)
{
    return json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type", type, "message", message);
}

static char *anth_sse(void *vst, json_t *ev, size_t *len_p)
{
    sits_srv_anth_t *st = vst;
    sits_srv_sse_buf_t b = { 0 };
    json_t *e;
    if (st->failed) goto out;   /* after an error event: nothing more */
    if ((e = json_object_get(ev, "error"))) {
        st->failed = 1;
        sits_srv_sse_named(&b, "error", error_obj("api_error", str_or(json_object_get(e, "message"), "error")));
        goto out;
    }
    if (!st->started) {   /* the first event: the message as it starts */
        st->started = 1;
        sits_srv_sse_named(&b, "message_start",
                           json_pack("{s:o}", "message", message_obj(st, ev, json_array(), NULL,
                                                                     json_pack("{s:i, s:i}", "input_tokens", st->input_tokens,
                                                                               "output_tokens", 0))));
    }
    if (json_is_object(json_object_get(ev, "usage"))) {
        json_decref(st->usage);
        st->usage = json_incref(json_object_get(ev, "usage"));
    }
    json_t *ch = json_array_get(json_object_get(ev, "choices"), 0);
    if (ch) chunk(st, &b, ch);
    if (!ev) {   /* [DONE]: the message's end */
        close_block(st, &b);
        const char *reason = stop_reason(st, st->finish[0] ? st->finish : "stop", st->calls > 0);
        sits_srv_sse_named(&b, "message_delta",
                           json_pack("{s:{s:s?, s:s?}, s:o}", "delta", "stop_reason", reason, "stop_sequence",
                                     reason && strcmp(reason, "stop_sequence") == 0 ? st->stop : NULL, "usage", usage_of(st->usage)));
        sits_srv_sse_named(&b, "message_stop", json_object());
    }
out:
    json_decref(ev);
    return sits_srv_sse_take(&b, len_p);
}

static void anth_stopped(void *vst, const char *stop)
{
    sits_srv_anth_t *st = vst;
    free(st->stop);
    st->stop = strdup(stop);
}

static char *anth_error_json(const sits_srv_error_t *err)
{
    json_t *o = error_obj(error_type(err->status), err->message);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

static void anth_free(void *vst)
{
    sits_srv_anth_t *st = vst;
    if (!st) return;
    free(st->stop);
    json_decref(st->usage);
    free(st);
}

const sits_srv_dialect_t sits_srv_anth_dialect = { "msg_", anth_body, anth_sse, anth_stopped, anth_error_json, anth_free };
