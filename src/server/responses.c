/* responses.c -- [responses] POST /v1/responses (OpenAI's Responses API, as vLLM serves it): the request's
 * translation into a chat request, and the chat endpoint's output translated into Responses shapes (see
 * responses.h).
 *
 * Request (vLLM's ResponsesRequest): input (a string: one user message; or items: messages {role, content:
 * string | [input_text / output_text parts]}, function_call -> an assistant's tool_calls, function_call_output
 * -> a tool message, reasoning -> an assistant's reasoning; assistant items that follow one another make one
 * assistant message, as vLLM joins them), instructions (a system message first), model, max_output_tokens,
 * temperature, top_p, tools (flat {type: "function", name, description, parameters, strict}), tool_choice,
 * parallel_tool_calls, text.format (text / json_schema / json_object), reasoning.effort, stream, metadata,
 * user, store (nothing is kept), and vLLM's extras (top_k, seed, stop, repetition_penalty, logit_bias,
 * ignore_eos, skip_special_tokens, include_stop_str_in_output, structured_outputs). Refused with 400 naming the
 * parameter: background, conversation, prompt, include, truncation "auto", max_tool_calls, built-in tools,
 * input parts other than text; previous_response_id gets 404 (nothing is stored). Other fields are ignored,
 * as vLLM's request model ignores them.
 *
 * Output: [reasoning item] [message item] [function_call items] from the chat choice's reasoning, content and
 * tool_calls; status "completed", "incomplete" (finish length: incomplete_details.reason max_output_tokens;
 * the last item "incomplete" too), "cancelled" (finish abort: the server's shutdown deadline); usage
 * {input_tokens (+ cached_tokens), output_tokens, reasoning_tokens (the reasoning text encoded again, at most
 * output_tokens), total_tokens}. Streams: the chat stream's reasoning / content / tool-call deltas open and
 * close the items in order (a change of kind closes the open item), each with OpenAI's added / delta / done
 * events; the final response holds the items as streamed. Item ids are the response id's hex with the item's
 * index, the same whole and streamed. */
#include "server/responses.h"
#include "util/log.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { OPEN_NONE = 0, OPEN_REASONING, OPEN_MESSAGE, OPEN_CALL };

struct sits_srv_resp {
    const sits_srv_limits_t *lim;
    json_t *echo;            /* the request's fields every Response object repeats */
    /* from the chat output */
    char hex[40];            /* the chat id's hex: resp_HEX, msg_HEXnn ... */
    long long created;
    /* the stream */
    int started, seq, n_items;
    json_t *items;           /* closed items, in order */
    int open;                /* OPEN_* */
    int call_index;          /* the open call's chat tool_calls index */
    json_t *call;            /* the open call's item (in progress) */
    char *text;              /* the open item's text or arguments so far */
    size_t text_len, text_cap;
    char finish[16];
    json_t *usage;           /* the chat usage chunk's */
    char *error;             /* the chat stream's error message (malloc'd) */
};

#define BAD(param_, ...) do { sits_srv_error_set(err, 400, "invalid_request_error", NULL, param_, __VA_ARGS__); \
    goto fail; } while (0)
#define NOMEM() do { sits_srv_error_set(err, 500, "server_error", NULL, NULL, "out of memory"); goto fail; } while (0)

static json_t *opt(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return v && !json_is_null(v) ? v : NULL;
}

/* o's member key when given (not null), else fallback: a new reference. */
static json_t *given(json_t *o, const char *key, json_t *fallback)
{
    json_t *v = opt(o, key);
    if (!v) return fallback;
    json_decref(fallback);
    return json_incref(v);
}

static int is_str(json_t *v, const char *s)
{
    return json_is_string(v) && strcmp(json_string_value(v), s) == 0;
}

/* ---------------- the request ---------------- */

/* Content of a message item: a string, or text parts (input_text / output_text / text) as chat's text parts. */
static json_t *item_content(json_t *c, size_t i, sits_srv_error_t *err)
{
    if (json_is_string(c)) return json_incref(c);
    if (!json_is_array(c)) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "input",
                           "input[%zu].content must be a string or a list of input_text parts", i);
        return NULL;
    }
    json_t *parts = json_array();
    for (size_t k = 0; parts && k < json_array_size(c); k++) {
        json_t *p = json_array_get(c, k), *t = json_object_get(p, "type"), *text = json_object_get(p, "text");
        if (!(is_str(t, "input_text") || is_str(t, "output_text") || is_str(t, "text")) || !json_is_string(text)) {
            sits_srv_error_set(err, 400, "invalid_request_error", NULL, "input",
                               "input[%zu].content[%zu]: only input_text / output_text parts with a string 'text' are "
                               "supported (got type '%.32s')", i, k, json_is_string(t) ? json_string_value(t) : "?");
            json_decref(parts);
            return NULL;
        }
        json_array_append_new(parts, json_pack("{s:s, s:O}", "type", "text", "text", text));
    }
    if (!parts) sits_srv_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
    return parts;
}

/* The last message of msgs when it is an assistant's (NULL: none) that lacks key (NULL: whatever it holds): the
 * item joins it, as vLLM joins them. */
static json_t *join_assistant(json_t *msgs, const char *key)
{
    size_t n = json_array_size(msgs);
    json_t *last = n ? json_array_get(msgs, n - 1) : NULL;
    return last && is_str(json_object_get(last, "role"), "assistant") && !(key && json_object_get(last, key)) ? last : NULL;
}

/* A string member of item i, required. */
static json_t *need_str(json_t *item, const char *key, size_t i, sits_srv_error_t *err)
{
    json_t *v = json_object_get(item, key);
    if (!json_is_string(v))
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "input", "input[%zu].%s must be a string", i, key);
    return json_is_string(v) ? v : NULL;
}

/* The text of a reasoning item: content[0].text, else summary[0].text (vLLM's order). */
static json_t *reasoning_text(json_t *item, size_t i, sits_srv_error_t *err)
{
    if (opt(item, "encrypted_content")) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "input",
                           "input[%zu]: encrypted reasoning content is not supported", i);
        return NULL;
    }
    json_t *arr = opt(item, "content");
    if (!json_array_size(arr)) arr = opt(item, "summary");
    json_t *t = json_object_get(json_array_get(arr, 0), "text");
    return json_is_string(t) ? json_incref(t) : json_string("");
}

/* input (a string or a list of items) -> chat messages appended to msgs. */
static int input_messages(json_t *input, json_t *msgs, sits_srv_error_t *err)
{
    if (json_is_string(input)) return json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "user", "content", input));
    if (!json_is_array(input)) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "input", "'input' must be a string or a list of items");
        return -1;
    }
    if (json_array_size(input) == 0) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "input", "'input' must not be empty");
        return -1;
    }
    for (size_t i = 0; i < json_array_size(input); i++) {
        json_t *item = json_array_get(input, i), *type = opt(item, "type"), *m = NULL, *v;
        if (!json_is_object(item)) {
            sits_srv_error_set(err, 400, "invalid_request_error", NULL, "input", "input[%zu] must be an object", i);
            return -1;
        }
        if (!type || is_str(type, "message")) {
            json_t *role = json_object_get(item, "role"), *c = item_content(json_object_get(item, "content"), i, err);
            if (!c) return -1;
            if (!json_is_string(role)) {
                json_decref(c);
                sits_srv_error_set(err, 400, "invalid_request_error", NULL, "input", "input[%zu].role must be a string", i);
                return -1;
            }
            if (is_str(role, "assistant") && (m = join_assistant(msgs, "content"))) {
                json_object_set_new(m, "content", c);
                continue;
            }
            m = json_pack("{s:O, s:o}", "role", role, "content", c);   /* the chat parser checks the role */
        } else if (is_str(type, "function_call")) {
            json_t *id = need_str(item, "call_id", i, err), *name = id ? need_str(item, "name", i, err) : NULL;
            json_t *args = name ? need_str(item, "arguments", i, err) : NULL;
            if (!args) return -1;
            json_t *call = json_pack("{s:O, s:s, s:{s:O, s:O}}", "id", id, "type", "function", "function", "name", name,
                                     "arguments", args);
            json_t *prev = join_assistant(msgs, NULL);   /* calls add up on the assistant message before */
            json_t *calls = prev ? json_object_get(prev, "tool_calls") : NULL;
            if (calls) {
                json_array_append_new(calls, call);
                continue;
            }
            if (prev) {
                json_object_set_new(prev, "tool_calls", json_pack("[o]", call));
                continue;
            }
            m = json_pack("{s:s, s:[o]}", "role", "assistant", "tool_calls", call);
        } else if (is_str(type, "function_call_output")) {
            json_t *id = need_str(item, "call_id", i, err);
            if (!id) return -1;
            json_t *out = json_object_get(item, "output"), *c = item_content(out, i, err);
            if (!c) return -1;
            m = json_pack("{s:s, s:o, s:O}", "role", "tool", "content", c, "tool_call_id", id);
        } else if (is_str(type, "reasoning")) {
            json_t *t = reasoning_text(item, i, err);
            if (!t) return -1;
            if ((v = join_assistant(msgs, "reasoning"))) {
                json_object_set_new(v, "reasoning", t);
                continue;
            }
            m = json_pack("{s:s, s:o}", "role", "assistant", "reasoning", t);
        } else {
            sits_srv_error_set(err, 400, "invalid_request_error", NULL, "input",
                               "input[%zu]: items of type '%.40s' are not supported (message, function_call, "
                               "function_call_output, reasoning are)", i, json_is_string(type) ? json_string_value(type) : "?");
            return -1;
        }
        if (!m || json_array_append_new(msgs, m) != 0) {
            sits_srv_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
            return -1;
        }
    }
    /* an assistant message made of reasoning only still needs content for the chat parser */
    size_t k;
    json_t *m;
    json_array_foreach(msgs, k, m)
        if (is_str(json_object_get(m, "role"), "assistant") && !json_object_get(m, "content") && !json_object_get(m, "tool_calls"))
            json_object_set_new(m, "content", json_string(""));
    return 0;
}

/* Responses' flat function tools -> chat tools; tool_choice {type: function, name} -> chat's. */
static int tools_chat(json_t *root, json_t *chat, sits_srv_error_t *err)
{
    json_t *tools = opt(root, "tools"), *choice = opt(root, "tool_choice");
    if (tools) {
        if (!json_is_array(tools)) {
            sits_srv_error_set(err, 400, "invalid_request_error", NULL, "tools", "'tools' must be an array");
            return -1;
        }
        json_t *out = json_array();
        json_object_set_new(chat, "tools", out);
        for (size_t i = 0; i < json_array_size(tools); i++) {
            json_t *t = json_array_get(tools, i), *type = json_object_get(t, "type"), *name = json_object_get(t, "name");
            if (!is_str(type, "function")) {
                sits_srv_error_set(err, 400, "invalid_request_error", NULL, "tools",
                                   "tools[%zu]: tools of type '%.40s' are not supported (only function tools are)", i,
                                   json_is_string(type) ? json_string_value(type) : "?");
                return -1;
            }
            if (!json_is_string(name) || json_string_length(name) == 0) {
                sits_srv_error_set(err, 400, "invalid_request_error", NULL, "tools",
                                   "tools[%zu] must be {\"type\": \"function\", \"name\": string, \"parameters\": {...}}", i);
                return -1;
            }
            json_t *fn = json_pack("{s:O}", "name", name);
            static const char *const keep[] = { "description", "parameters" };
            for (int k = 0; fn && k < 2; k++)
                if (opt(t, keep[k])) json_object_set(fn, keep[k], opt(t, keep[k]));
            if (!fn || json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", fn)) != 0) {
                sits_srv_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
                return -1;
            }
        }
    }
    if (!choice) return 0;
    if (json_is_string(choice)) return json_object_set(chat, "tool_choice", choice);
    json_t *name = json_object_get(choice, "name");
    if (!is_str(json_object_get(choice, "type"), "function") || !json_is_string(name)) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "tool_choice",
                           "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"name\": ...}");
        return -1;
    }
    return json_object_set_new(chat, "tool_choice", json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name", name));
}

/* text.format -> response_format; reasoning.effort -> reasoning_effort. */
static int format_chat(json_t *root, json_t *chat, sits_srv_error_t *err)
{
    json_t *text = opt(root, "text"), *fmt = text ? opt(text, "format") : NULL, *rs = opt(root, "reasoning");
    if (text && !json_is_object(text)) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "text", "'text' must be an object");
        return -1;
    }
    if (fmt) {
        json_t *type = json_object_get(fmt, "type");
        if (is_str(type, "json_schema")) {
            json_t *schema = opt(fmt, "schema");
            if (!json_is_object(schema)) {
                sits_srv_error_set(err, 400, "invalid_request_error", NULL, "text.format",
                                   "text.format json_schema needs \"schema\": a JSON schema object");
                return -1;
            }
            json_t *js = json_pack("{s:O}", "schema", schema);
            if (opt(fmt, "name")) json_object_set(js, "name", opt(fmt, "name"));
            json_object_set_new(chat, "response_format", json_pack("{s:s, s:o}", "type", "json_schema", "json_schema", js));
        } else if (is_str(type, "json_object")) {
            json_object_set_new(chat, "response_format", json_pack("{s:s}", "type", "json_object"));
        } else if (!is_str(type, "text")) {
            sits_srv_error_set(err, 400, "invalid_request_error", NULL, "text.format",
                               "text.format type must be text, json_schema or json_object");
            return -1;
        }
    }
    if (rs && !json_is_object(rs)) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "reasoning", "'reasoning' must be an object");
        return -1;
    }
    if (rs && opt(rs, "effort")) json_object_set(chat, "reasoning_effort", opt(rs, "effort"));
    return 0;
}

/* Fields asking for what this server does not do (400 naming them; 404 for a previous response). */
static int refuse(json_t *root, sits_srv_error_t *err)
{
    json_t *v = opt(root, "previous_response_id");
    if (v) {
        sits_srv_resp_not_found(json_is_string(v) ? json_string_value(v) : "?", err);
        err->param = "previous_response_id";
        return -1;
    }
    if (json_is_true(opt(root, "background"))) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "background",
                           "background mode is not supported: this server stores no responses");
        return -1;
    }
    static const char *const no[] = { "conversation", "prompt", "max_tool_calls" };
    for (int k = 0; k < 3; k++)
        if (opt(root, no[k])) {
            sits_srv_error_set(err, 400, "invalid_request_error", NULL, no[k], "'%s' is not supported", no[k]);
            return -1;
        }
    if ((v = opt(root, "include")) && (!json_is_array(v) || json_array_size(v) > 0)) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "include",
                           "'include' is not supported (no logprobs, encrypted reasoning or tool outputs are returned)");
        return -1;
    }
    if ((v = opt(root, "truncation")) && !is_str(v, "disabled")) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "truncation", "only truncation \"disabled\" is supported");
        return -1;
    }
    if ((v = opt(root, "store")) && !json_is_boolean(v)) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "store", "'store' must be a boolean");
        return -1;
    }
    if ((v = opt(root, "metadata")) && !json_is_object(v)) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "metadata", "'metadata' must be an object of strings");
        return -1;
    }
    const char *key;
    json_t *mv;
    json_object_foreach(v, key, mv)
        if (!json_is_string(mv)) {
            sits_srv_error_set(err, 400, "invalid_request_error", NULL, "metadata", "metadata['%.64s'] must be a string", key);
            return -1;
        }
    if ((v = opt(root, "instructions")) && !json_is_string(v)) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "instructions", "'instructions' must be a string");
        return -1;
    }
    if (!opt(root, "input")) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "input", "'input' is required");
        return -1;
    }
    return 0;
}

/* The chat parser's parameter names -> the Responses ones, in err's param and message (the chat messages keep
 * their name there: their indices are not the input items'). */
static void rename_param(sits_srv_error_t *err)
{
    static const char *const map[][2] = { { "messages", "input" }, { "max_completion_tokens", "max_output_tokens" },
                                          { "response_format", "text.format" }, { "reasoning_effort", "reasoning.effort" },
                                          { "stream_options", "stream" } };
    for (size_t k = 0; err->param && k < sizeof map / sizeof map[0]; k++)
        if (strcmp(err->param, map[k][0]) == 0) err->param = map[k][1];
    for (size_t k = 1; k < sizeof map / sizeof map[0]; k++) {
        char *at = strstr(err->message, map[k][0]), out[sizeof err->message];
        if (!at) continue;
        snprintf(out, sizeof out, "%.*s%s%s", (int)(at - err->message), err->message, map[k][1], at + strlen(map[k][0]));
        memcpy(err->message, out, sizeof out);
    }
}

int sits_srv_resp_parse(const sits_srv_limits_t *lim, const char *body, size_t len, sits_srv_request_t *req,
                        sits_srv_resp_t **resp_p, sits_srv_error_t *err)
{
    memset(req, 0, sizeof *req);
    sits_srv_resp_t *r = NULL;
    char *text = NULL;
    json_t *chat = NULL, *root = sits_srv_json_object_body(body, len, err);
    if (!root || refuse(root, err) != 0) goto fail;
    if (!(chat = json_object()) || json_object_set_new(chat, "messages", json_array()) != 0) NOMEM();
    /* passed as they are (the chat parser checks them): OpenAI's, then vLLM's extras */
    static const char *const same[] = { "model", "temperature", "top_p", "user", "parallel_tool_calls", "stream", "top_k",
                                        "seed", "stop", "repetition_penalty", "logit_bias", "ignore_eos",
                                        "skip_special_tokens", "include_stop_str_in_output", "structured_outputs" };
    for (size_t k = 0; k < sizeof same / sizeof same[0]; k++)
        if (json_object_get(root, same[k])) json_object_set(chat, same[k], json_object_get(root, same[k]));
    if (json_object_get(root, "max_output_tokens")) json_object_set(chat, "max_completion_tokens", json_object_get(root, "max_output_tokens"));
    if (json_is_true(opt(root, "stream"))) json_object_set_new(chat, "stream_options", json_pack("{s:b}", "include_usage", 1));
    json_t *msgs = json_object_get(chat, "messages");
    if (opt(root, "instructions") && json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "system", "content",
                                                                          opt(root, "instructions"))) != 0)
        NOMEM();
    if (input_messages(opt(root, "input"), msgs, err) != 0 || tools_chat(root, chat, err) != 0 || format_chat(root, chat, err) != 0)
        goto fail;
    if (!(text = json_dumps(chat, JSON_COMPACT))) NOMEM();
    if (sits_srv_request_parse(lim, SITS_SRV_CHAT, text, strlen(text), req, err) != 0) {
        rename_param(err);
        goto fail;
    }
    if (!(r = calloc(1, sizeof *r)) || !(r->items = json_array())) {
        sits_srv_request_free(req);
        NOMEM();
    }
    r->lim = lim;
    /* what every Response object repeats: the request's settings, sampling as it runs */
    json_t *text_cfg = opt(root, "text");
    r->echo = json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:b, s:o, s:o, s:o, s:o, s:s, s:n, s:b, s:s}",
                        "instructions", given(root, "instructions", json_null()),
                        "max_output_tokens", given(root, "max_output_tokens", json_null()),
                        "temperature", given(root, "temperature", json_real(req->sample.temperature)),
                        "top_p", given(root, "top_p", json_real(req->sample.top_p)),
                        "tools", given(root, "tools", json_array()), "tool_choice", given(root, "tool_choice", json_string("auto")),
                        "parallel_tool_calls", !req->tool_single && !json_is_false(opt(root, "parallel_tool_calls")),
                        "text", text_cfg && opt(text_cfg, "format") ? json_incref(text_cfg)
                                                                    : json_pack("{s:{s:s}}", "format", "type", "text"),
                        "reasoning", given(root, "reasoning", json_null()), "metadata", given(root, "metadata", json_object()),
                        "user", given(root, "user", json_null()),
                        "truncation", "disabled", "previous_response_id", "background", 0, "service_tier", "auto");
    if (!r->echo) {
        sits_srv_request_free(req);
        NOMEM();
    }
    *resp_p = r;
    json_decref(root);
    json_decref(chat);
    free(text);
    return 0;
fail:
    sits_srv_resp_free(r);
    json_decref(root);
    json_decref(chat);
    free(text);
    return -1;
}

void sits_srv_resp_free(sits_srv_resp_t *r)
{
    if (!r) return;
    json_decref(r->echo);
    json_decref(r->items);
    json_decref(r->call);
    json_decref(r->usage);
    free(r->text);
    free(r->error);
    free(r);
}

void sits_srv_resp_not_found(const char *id, sits_srv_error_t *err)
{
    sits_srv_error_set(err, 404, "invalid_request_error", "response_not_found", NULL,
                       "Response with id '%.*s' not found: this server stores no responses (as vLLM without "
                       "VLLM_ENABLE_RESPONSES_API_STORE)", (int)(strcspn(id, "/") < 100 ? strcspn(id, "/") : 100), id);
}

/* ---------------- the output ---------------- */

/* The response's ids and time from a chat body or chunk (id "resp_HEX": the server names the request so), once. */
static void take_id(sits_srv_resp_t *r, json_t *chat)
{
    if (r->hex[0]) return;
    const char *id = json_string_value(json_object_get(chat, "id")), *sep = id ? strpbrk(id, "_-") : NULL;
    snprintf(r->hex, sizeof r->hex, "%s", sep ? sep + 1 : "0");
    r->created = (long long)json_integer_value(json_object_get(chat, "created"));
}

static void item_id(const sits_srv_resp_t *r, const char *prefix, int index, char id[64])
{
    snprintf(id, 64, "%s_%s%02x", prefix, r->hex, index & 0xff);
}

/* An output item. reasoning / message: text NULL -> no content yet (content []); call: text = arguments. */
static json_t *make_item(const sits_srv_resp_t *r, int kind, int index, const char *text, size_t len, const char *status,
                         const char *call_id, const char *name)
{
    char id[64];
    if (kind == OPEN_REASONING) {
        item_id(r, "rs", index, id);
        json_t *c = text ? json_pack("[{s:s, s:s%}]", "type", "reasoning_text", "text", text, len) : json_array();
        return json_pack("{s:s, s:s, s:[], s:o, s:s}", "type", "reasoning", "id", id, "summary", "content", c, "status", status);
    }
    if (kind == OPEN_MESSAGE) {
        item_id(r, "msg", index, id);
        json_t *c = text ? json_pack("[{s:s, s:s%, s:[], s:[]}]", "type", "output_text", "text", text, len, "annotations", "logprobs")
                         : json_array();
        return json_pack("{s:s, s:s, s:s, s:s, s:o}", "type", "message", "id", id, "role", "assistant", "status", status,
                         "content", c);
    }
    item_id(r, "fc", index, id);
    return json_pack("{s:s, s:s, s:s, s:s, s:s%, s:s}", "type", "function_call", "id", id, "call_id", call_id, "name", name,
                     "arguments", text ? text : "", text ? len : 0, "status", status);
}

/* status and incomplete_details from the chat finish_reason (NULL: still running). */
static const char *status_of(const char *finish, const char *error)
{
    if (error) return "failed";
    if (!finish) return "in_progress";
    if (strcmp(finish, "length") == 0) return "incomplete";
    if (strcmp(finish, "abort") == 0) return "cancelled";
    return "completed";
}

/* Responses usage from the chat usage; reasoning_tokens: the reasoning items' texts encoded (at most output_tokens). */
static json_t *usage_of(const sits_srv_resp_t *r, json_t *u, json_t *items)
{
    if (!json_is_object(u)) return json_null();
    json_int_t in = json_integer_value(json_object_get(u, "prompt_tokens"));
    json_int_t out = json_integer_value(json_object_get(u, "completion_tokens"));
    json_int_t cached = json_integer_value(json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens"));
    size_t n = 0, k;
    json_t *item;
    json_array_foreach(items, k, item) {
        json_t *t = json_object_get(json_array_get(json_object_get(item, "content"), 0), "text");
        int32_t *ids = NULL;
        size_t m = 0;
        if (is_str(json_object_get(item, "type"), "reasoning") && json_string_length(t) &&
            sits_tokenizer_encode(r->lim->tok, json_string_value(t), json_string_length(t), 0, &ids, &m) == SITS_OK)
            n += m;
        free(ids);
    }
    if ((json_int_t)n > out) n = (size_t)out;
    return json_pack("{s:I, s:{s:I}, s:I, s:{s:I}, s:I}", "input_tokens", in, "input_tokens_details", "cached_tokens", cached,
                     "output_tokens", out, "output_tokens_details", "reasoning_tokens", (json_int_t)n, "total_tokens", in + out);
}

/* The Response object: output (consumed), usage (consumed). */
static json_t *response_obj(const sits_srv_resp_t *r, const char *status, json_t *output, json_t *usage, const char *error)
{
    char id[64];
    snprintf(id, sizeof id, "resp_%s", r->hex);
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:s, s:o, s:o, s:o, s:o}", "id", id, "object", "response", "created_at",
                          (json_int_t)r->created, "model", r->lim->model_name, "status", status, "incomplete_details",
                          strcmp(status, "incomplete") == 0 ? json_pack("{s:s}", "reason", "max_output_tokens") : json_null(),
                          "error", error ? json_pack("{s:s, s:s}", "code", "server_error", "message", error) : json_null(),
                          "output", output, "usage", usage);
    if (!o || json_object_update(o, r->echo) != 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* The last item of output gets the response's status when it ended short. */
static void last_status(json_t *output, const char *status)
{
    json_t *last = json_array_get(output, json_array_size(output) - 1);
    if (last && strcmp(status, "completed") != 0) json_object_set_new(last, "status", json_string("incomplete"));
}

char *sits_srv_resp_body(sits_srv_resp_t *r, char *chat_body)
{
    if (!chat_body) return NULL;
    json_t *chat = json_loads(chat_body, JSON_ALLOW_NUL, NULL), *out = json_array();
    free(chat_body);
    char *s = NULL;
    if (!chat || !out) goto done;
    take_id(r, chat);
    json_t *ch = json_array_get(json_object_get(chat, "choices"), 0), *msg = json_object_get(ch, "message");
    const char *status = status_of(json_string_value(json_object_get(ch, "finish_reason")), NULL);
    json_t *rs = json_object_get(msg, "reasoning_content"), *content = json_object_get(msg, "content"), *call;
    if (json_string_length(rs))
        json_array_append_new(out, make_item(r, OPEN_REASONING, (int)json_array_size(out), json_string_value(rs),
                                             json_string_length(rs), "completed", NULL, NULL));
    if (json_string_length(content))
        json_array_append_new(out, make_item(r, OPEN_MESSAGE, (int)json_array_size(out), json_string_value(content),
                                             json_string_length(content), "completed", NULL, NULL));
    size_t k;
    json_array_foreach(json_object_get(msg, "tool_calls"), k, call) {
        json_t *fn = json_object_get(call, "function"), *args = json_object_get(fn, "arguments");
        json_array_append_new(out, make_item(r, OPEN_CALL, (int)json_array_size(out), json_string_value(args), json_string_length(args),
                                             "completed", json_string_value(json_object_get(call, "id")) ? json_string_value(json_object_get(call, "id")) : "",
                                             json_string_value(json_object_get(fn, "name")) ? json_string_value(json_object_get(fn, "name")) : ""));
    }
    last_status(out, status);
    json_t *o = response_obj(r, status, json_incref(out), usage_of(r, json_object_get(chat, "usage"), out), NULL);
    if (o) s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
done:
    json_decref(out);
    json_decref(chat);
    return s;
}

/* ---------------- the stream ---------------- */

typedef sits_srv_sse_buf_t sse_buf_t;

/* "event: TYPE\ndata: {...}\n\n" of ev (consumed) with its type and sequence number. */
static void emit(sits_srv_resp_t *r, sse_buf_t *b, const char *type, json_t *ev)
{
    if (ev && (json_object_set_new(ev, "type", json_string(type)) != 0 ||
               json_object_set_new(ev, "sequence_number", json_integer(r->seq)) != 0)) {
        json_decref(ev);
        ev = NULL;
    }
    if (sits_srv_sse_named(b, type, ev) == 0) r->seq++;
}

/* Closes the open item: its done events, and it joins the closed items with status. */
static void close_item(sits_srv_resp_t *r, sse_buf_t *b, const char *status)
{
    if (r->open == OPEN_NONE) return;
    int idx = r->n_items - 1;
    char id[64];
    const char *text = r->text ? r->text : "";
    json_t *item;
    if (r->open == OPEN_CALL) {
        item = make_item(r, OPEN_CALL, idx, text, r->text_len, status, json_string_value(json_object_get(r->call, "call_id")),
                         json_string_value(json_object_get(r->call, "name")));
        emit(r, b, "response.function_call_arguments.done",
             json_pack("{s:s, s:i, s:s%, s:O}", "item_id", json_string_value(json_object_get(item, "id")), "output_index", idx,
                       "arguments", text, r->text_len, "name", json_object_get(item, "name")));
    } else {
        int reasoning = r->open == OPEN_REASONING;
        item = make_item(r, r->open, idx, text, r->text_len, status, NULL, NULL);
        item_id(r, reasoning ? "rs" : "msg", idx, id);
        json_t *part = json_array_get(json_object_get(item, "content"), 0);
        emit(r, b, reasoning ? "response.reasoning_text.done" : "response.output_text.done",
             reasoning ? json_pack("{s:s, s:i, s:i, s:s%}", "item_id", id, "output_index", idx, "content_index", 0, "text", text, r->text_len)
                       : json_pack("{s:s, s:i, s:i, s:s%, s:[]}", "item_id", id, "output_index", idx, "content_index", 0, "text", text,
                                   r->text_len, "logprobs"));
        emit(r, b, "response.content_part.done",
             json_pack("{s:s, s:i, s:i, s:O}", "item_id", id, "output_index", idx, "content_index", 0, "part", part));
    }
    emit(r, b, "response.output_item.done", json_pack("{s:i, s:O}", "output_index", idx, "item", item));
    if (!item || json_array_append_new(r->items, item) != 0) b->failed = 1;
    json_decref(r->call);
    r->call = NULL;
    r->open = OPEN_NONE;
    r->text_len = 0;
}

/* Opens an item of kind (closing the open one): output_item.added, and a reasoning / message's content part. */
static void open_item(sits_srv_resp_t *r, sse_buf_t *b, int kind, const char *call_id, const char *name)
{
    close_item(r, b, "completed");
    int idx = r->n_items++;
    json_t *item = make_item(r, kind, idx, NULL, 0, "in_progress", call_id, name);
    r->open = kind;
    if (kind == OPEN_CALL) r->call = json_incref(item);
    emit(r, b, "response.output_item.added", json_pack("{s:i, s:o}", "output_index", idx, "item", item));
    if (kind == OPEN_CALL) return;
    char id[64];
    item_id(r, kind == OPEN_REASONING ? "rs" : "msg", idx, id);
    json_t *part = kind == OPEN_REASONING ? json_pack("{s:s, s:s}", "type", "reasoning_text", "text", "")
                                          : json_pack("{s:s, s:s, s:[], s:[]}", "type", "output_text", "text", "", "annotations", "logprobs");
    emit(r, b, "response.content_part.added", json_pack("{s:s, s:i, s:i, s:o}", "item_id", id, "output_index", idx,
                                                        "content_index", 0, "part", part));
}

/* text[len] for the open item of kind (opened when another is open): its delta event. */
static void delta(sits_srv_resp_t *r, sse_buf_t *b, int kind, const char *text, size_t len)
{
    if (len == 0) return;
    if (r->open != kind) open_item(r, b, kind, NULL, NULL);
    if (sits_srv_grow(&r->text, &r->text_cap, r->text_len + len + 1) != 0) {
        b->failed = 1;
        return;
    }
    memcpy(r->text + r->text_len, text, len);
    r->text_len += len;
    int idx = r->n_items - 1;
    char id[64];
    item_id(r, kind == OPEN_REASONING ? "rs" : kind == OPEN_MESSAGE ? "msg" : "fc", idx, id);
    if (kind == OPEN_CALL)
        emit(r, b, "response.function_call_arguments.delta", json_pack("{s:s, s:i, s:s%}", "item_id", id, "output_index", idx,
                                                                       "delta", text, len));
    else if (kind == OPEN_REASONING)
        emit(r, b, "response.reasoning_text.delta", json_pack("{s:s, s:i, s:i, s:s%}", "item_id", id, "output_index", idx,
                                                              "content_index", 0, "delta", text, len));
    else
        emit(r, b, "response.output_text.delta", json_pack("{s:s, s:i, s:i, s:s%, s:[]}", "item_id", id, "output_index", idx,
                                                           "content_index", 0, "delta", text, len, "logprobs"));
}

/* One piece of a chat chunk (sits_srv_chunk_pieces): its delta event, a call's head opening its item. */
typedef struct {
    sits_srv_resp_t *r;
    sse_buf_t *b;
} walk_t;

static void piece(void *ctx, int kind, int index, const char *id, const char *name, const char *text, size_t len)
{
    walk_t *w = ctx;
    if (kind == SITS_SRV_PIECE_CALL && (id || w->r->open != OPEN_CALL || index != w->r->call_index)) {   /* a call's head */
        open_item(w->r, w->b, OPEN_CALL, id ? id : "", name);
        w->r->call_index = index;
    }
    delta(w->r, w->b, kind == SITS_SRV_PIECE_REASONING ? OPEN_REASONING : kind == SITS_SRV_PIECE_CONTENT ? OPEN_MESSAGE : OPEN_CALL,
          text, len);
}

/* One chat chunk's choice delta. */
static void chunk(sits_srv_resp_t *r, sse_buf_t *b, json_t *ch)
{
    walk_t w = { r, b };
    const char *fin = sits_srv_chunk_pieces(ch, piece, &w);
    if (fin) snprintf(r->finish, sizeof r->finish, "%s", fin);
}

char *sits_srv_resp_sse(sits_srv_resp_t *r, json_t *ev, size_t *len_p)
{
    sse_buf_t b = { 0 };
    if (ev) take_id(r, ev);
    if (!r->started && !b.failed) {   /* the first event: the response as it starts */
        r->started = 1;
        json_t *o = response_obj(r, "in_progress", json_array(), json_null(), NULL);
        emit(r, &b, "response.created", json_pack("{s:O}", "response", o));
        emit(r, &b, "response.in_progress", json_pack("{s:o}", "response", o));
    }
    json_t *e = json_object_get(ev, "error");
    if (e && !r->error) r->error = strdup(json_string_value(json_object_get(e, "message")) ? json_string_value(json_object_get(e, "message")) : "error");
    if (json_is_object(json_object_get(ev, "usage"))) {
        json_decref(r->usage);
        r->usage = json_incref(json_object_get(ev, "usage"));
    }
    json_t *ch = json_array_get(json_object_get(ev, "choices"), 0);
    if (ch) chunk(r, &b, ch);
    if (!ev && !b.failed) {   /* [DONE]: the terminal event with the whole response */
        const char *status = status_of(r->finish[0] ? r->finish : "stop", r->error);
        close_item(r, &b, strcmp(status, "completed") == 0 ? "completed" : "incomplete");
        json_t *o = response_obj(r, status, json_incref(r->items), usage_of(r, r->usage, r->items), r->error);
        emit(r, &b, strcmp(status, "completed") == 0 ? "response.completed" : strcmp(status, "failed") == 0 ? "response.failed"
                                                                                                       : "response.incomplete",
             json_pack("{s:o}", "response", o));
    }
    json_decref(ev);
    return sits_srv_sse_take(&b, len_p);
}

/* ---------------- the hooks server.c calls ---------------- */

static char *dl_body(void *st, char *chat_body)
{
    return sits_srv_resp_body(st, chat_body);
}

static char *dl_sse(void *st, json_t *chat_event, size_t *len_p)
{
    return sits_srv_resp_sse(st, chat_event, len_p);
}

static void dl_free(void *st)
{
    sits_srv_resp_free(st);
}

const sits_srv_dialect_t sits_srv_resp_dialect = { "resp_", dl_body, dl_sse, NULL, NULL, dl_free };
