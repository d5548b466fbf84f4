/* api.c -- the OpenAI request/response formats: parse and validate a /v1/completions or
 * /v1/chat/completions body into a tokenized sits_srv_request_t, and build the JSON bodies
 * (whole responses, SSE chunks, usage chunk, errors) in OpenAI's shapes.
 *
 * Validation answers 400 invalid_request_error (param names the field) for wrong types and ranges,
 * 404 model_not_found for another model, 400 context_length_exceeded when prompt + max_tokens does
 * not fit max_model_len. JSON null counts as "absent" for optional fields (clients send nulls).
 * Features we do not implement (n > 1, logprobs, echo, penalties, logit_bias, suffix) are refused with
 * 400 rather than silently ignored. Structured output and tools are tools.c's. */
#include "server/srv_internal.h"
#include "grammar/grammar.h"
#include "util/log.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sits_srv_error_set(sits_srv_error_t *err, int status, const char *type, const char *code, const char *param,
                        const char *fmt, ...)
{
    err->status = status;
    err->type = type;
    err->code = code;
    err->param = param;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    /* precision-limited %s of client text ('%.64s') and the buffer limit can cut a UTF-8 sequence:
     * replace every byte that does not start a valid sequence so the JSON body can be built */
    size_t len = strlen(err->message), off = 0, bad = 0;
    while (off < len && !sits_utf8_valid(err->message + off, len - off, &bad)) {
        err->message[off + bad] = '?';
        off += bad + 1;
    }
}

#define BAD(param_, ...) do { sits_srv_error_set(err, 400, "invalid_request_error", NULL, param_, __VA_ARGS__); \
    goto fail; } while (0)

static json_t *field(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return (v && json_is_null(v)) ? NULL : v;
}

/* Optional number in [lo, hi] (lo_open: lo excluded). Returns 0 ok, -1 with err set. */
static int get_number(json_t *o, const char *key, double lo, int lo_open, double hi, double *val_p,
                      sits_srv_error_t *err)
{
    json_t *v = field(o, key);
    if (!v) return 0;
    if (!json_is_number(v)) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, key, "'%s' must be a number", key);
        return -1;
    }
    double x = json_number_value(v);
    if (!isfinite(x) || x > hi || (lo_open ? x <= lo : x < lo)) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, key, "'%s' must be in %s%g, %g], got %g", key,
                           lo_open ? "(" : "[", lo, hi, x);
        return -1;
    }
    *val_p = x;
    return 0;
}

static int get_bool(json_t *o, const char *key, int *val_p, sits_srv_error_t *err)
{
    json_t *v = field(o, key);
    if (!v) return 0;
    if (!json_is_boolean(v)) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, key, "'%s' must be a boolean", key);
        return -1;
    }
    *val_p = json_is_true(v);
    return 0;
}

/* Optional integer; *present_p tells whether it was given. */
static int get_int(json_t *o, const char *key, json_int_t *val_p, int *present_p, sits_srv_error_t *err)
{
    json_t *v = field(o, key);
    if (present_p) *present_p = 0;
    if (!v) return 0;
    if (!json_is_integer(v)) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, key, "'%s' must be an integer", key);
        return -1;
    }
    *val_p = json_integer_value(v);
    if (present_p) *present_p = 1;
    return 0;
}

/* Token ids of a JSON array; each in [0, vocab). */
static int get_ids(json_t *arr, int vocab, int32_t **ids_p, int *n_p, sits_srv_error_t *err)
{
    size_t n = json_array_size(arr);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) {
        sits_srv_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(arr, i);
        if (!json_is_integer(e)) {
            free(ids);
            sits_srv_error_set(err, 400, "invalid_request_error", NULL, "prompt",
                               "'prompt' must be a string or an array of token ids (integers); element %zu is not", i);
            return -1;
        }
        json_int_t x = json_integer_value(e);
        if (x < 0 || x >= vocab) {
            free(ids);
            sits_srv_error_set(err, 400, "invalid_request_error", NULL, "prompt",
                               "token id %lld at prompt[%zu] is outside the vocabulary [0, %d)", (long long)x, i, vocab);
            return -1;
        }
        ids[i] = (int32_t)x;
    }
    *ids_p = ids;
    *n_p = (int)n;
    return 0;
}

static int encode(const sits_srv_limits_t *lim, const char *s, size_t len, int add_special, const char *param,
                  int32_t **ids_p, int *n_p, sits_srv_error_t *err)
{
    int32_t *ids = NULL;
    size_t n = 0;
    sits_status_t st = sits_tokenizer_encode(lim->tok, s, len, add_special, &ids, &n);
    if (st != SITS_OK) {
        if (st == SITS_ERR_INVALID)
            sits_srv_error_set(err, 400, "invalid_request_error", NULL, param, "'%s' is not valid UTF-8 text", param);
        else
            sits_srv_error_set(err, 500, "server_error", NULL, NULL, "tokenizer failed: %s", sits_status_str(st));
        return -1;
    }
    if (!ids) ids = malloc(sizeof *ids);
    if (!ids) {
        sits_srv_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    *ids_p = ids;
    *n_p = (int)n;
    return 0;
}

static int parse_prompt(const sits_srv_limits_t *lim, json_t *root, sits_srv_request_t *req, sits_srv_error_t *err)
{
    json_t *p = field(root, "prompt");
    if (!p) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "prompt", "'prompt' is required");
        return -1;
    }
    /* A batch of one (["text"] or [[ids]]) is the same as one prompt. */
    if (json_is_array(p) && json_array_size(p) >= 1 &&
        (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0)))) {
        if (json_array_size(p) > 1) {
            sits_srv_error_set(err, 400, "invalid_request_error", NULL, "prompt",
                               "batched prompts are not supported: send one prompt per request");
            return -1;
        }
        p = json_array_get(p, 0);
    }
    if (json_is_string(p))
        return encode(lim, json_string_value(p), json_string_length(p), 1, "prompt", &req->prompt, &req->n_prompt,
                      err);
    if (json_is_array(p)) return get_ids(p, lim->vocab_size, &req->prompt, &req->n_prompt, err);
    sits_srv_error_set(err, 400, "invalid_request_error", NULL, "prompt",
                       "'prompt' must be a string or an array of token ids");
    return -1;
}

/* message content: a string, or an array of {"type": "text", "text": "..."} parts, joined with "\n" as
 * vLLM does for templates that take string content. Returns a new reference. */
static json_t *message_content(json_t *c, size_t i, sits_srv_error_t *err)
{
    if (json_is_string(c)) return json_incref(c);
    if (!json_is_array(c)) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "messages",
                           "messages[%zu].content must be a string or an array of text parts", i);
        return NULL;
    }
    size_t total = 1;
    for (size_t k = 0; k < json_array_size(c); k++) {
        json_t *part = json_array_get(c, k);
        json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type) || strcmp(json_string_value(type), "text") != 0 ||
            !json_is_string(text)) {
            sits_srv_error_set(err, 400, "invalid_request_error", NULL, "messages",
                               "messages[%zu].content[%zu]: only {\"type\": \"text\", \"text\": string} parts are "
                               "supported", i, k);
            return NULL;
        }
        total += json_string_length(text) + 1;
    }
    char *s = malloc(total);
    json_t *out = NULL;
    if (s) {
        size_t off = 0;
        for (size_t k = 0; k < json_array_size(c); k++) {
            json_t *text = json_object_get(json_array_get(c, k), "text");
            if (k) s[off++] = '\n';
            memcpy(s + off, json_string_value(text), json_string_length(text));
            off += json_string_length(text);
        }
        out = json_stringn_nocheck(s, off);
        free(s);
    }
    if (!out) sits_srv_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
    return out;
}

/* An assistant message's tool_calls as the templates take them (transformers' format): function.arguments
 * parsed from the OpenAI JSON string into an object, as vLLM does. Returns a new reference. */
static json_t *message_tool_calls(json_t *calls, size_t i, sits_srv_error_t *err)
{
    if (!json_is_array(calls)) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "messages", "messages[%zu].tool_calls must be an array", i);
        return NULL;
    }
    json_t *out = json_deep_copy(calls);
    if (!out) {
        sits_srv_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        return NULL;
    }
    for (size_t k = 0; k < json_array_size(out); k++) {
        json_t *call = json_array_get(out, k), *fn = json_object_get(call, "function");
        if (!json_is_object(call) || !json_is_object(fn) || !json_is_string(json_object_get(fn, "name"))) {
            sits_srv_error_set(err, 400, "invalid_request_error", NULL, "messages",
                               "messages[%zu].tool_calls[%zu] must be {\"type\": \"function\", \"function\": {\"name\": "
                               "string, \"arguments\": string}}", i, k);
            goto fail;
        }
        json_t *args = json_object_get(fn, "arguments");
        if (json_is_string(args)) {
            json_error_t jerr;
            json_t *parsed = json_loadb(json_string_value(args), json_string_length(args), JSON_DECODE_ANY, &jerr);
            if (!parsed) {
                sits_srv_error_set(err, 400, "invalid_request_error", NULL, "messages",
                                   "messages[%zu].tool_calls[%zu].function.arguments is not valid JSON: %s", i, k, jerr.text);
                goto fail;
            }
            json_object_set_new(fn, "arguments", parsed);
        }
    }
    return out;
fail:
    json_decref(out);
    return NULL;
}

/* messages -> the template's messages: role, content (string), and name / tool_calls / tool_call_id kept. */
static json_t *chat_messages(json_t *m, sits_srv_error_t *err)
{
    json_t *out = json_array();
    if (!out) goto nomem;
    for (size_t i = 0; i < json_array_size(m); i++) {
        json_t *e = json_array_get(m, i);
        if (!json_is_object(e)) {
            sits_srv_error_set(err, 400, "invalid_request_error", NULL, "messages", "messages[%zu] must be an object", i);
            goto fail;
        }
        json_t *role = json_object_get(e, "role");
        if (!json_is_string(role)) {
            sits_srv_error_set(err, 400, "invalid_request_error", NULL, "messages", "messages[%zu].role must be a string", i);
            goto fail;
        }
        const char *r = json_string_value(role);
        if (strcmp(r, "developer") == 0) r = "system";   /* OpenAI's newer name for system */
        if (strcmp(r, "system") != 0 && strcmp(r, "user") != 0 && strcmp(r, "assistant") != 0 && strcmp(r, "tool") != 0) {
            sits_srv_error_set(err, 400, "invalid_request_error", NULL, "messages",
                               "messages[%zu].role '%.64s' is not supported (system, developer, user, assistant, tool)",
                               i, json_string_value(role));
            goto fail;
        }
        json_t *msg = json_pack("{s:s}", "role", r);
        if (!msg || json_array_append_new(out, msg) != 0) goto nomem;
        json_t *content = json_object_get(e, "content"), *calls = json_object_get(e, "tool_calls");
        int has_calls = calls && !json_is_null(calls);
        if (has_calls && strcmp(r, "assistant") != 0) {
            sits_srv_error_set(err, 400, "invalid_request_error", NULL, "messages",
                               "messages[%zu]: only assistant messages carry tool_calls", i);
            goto fail;
        }
        json_t *c;
        if ((!content || json_is_null(content)) && has_calls) {
            c = json_string("");       /* an assistant turn that only calls tools */
            if (!c) goto nomem;
        } else if (!content || json_is_null(content)) {
            sits_srv_error_set(err, 400, "invalid_request_error", NULL, "messages", "messages[%zu].content is required", i);
            goto fail;
        } else if (!(c = message_content(content, i, err))) {
            goto fail;
        }
        json_object_set_new(msg, "content", c);
        if (has_calls) {
            json_t *tc = message_tool_calls(calls, i, err);
            if (!tc) goto fail;
            json_object_set_new(msg, "tool_calls", tc);
        }
        static const char *const keep[] = { "name", "tool_call_id" };
        for (int k = 0; k < 2; k++) {
            json_t *v = json_object_get(e, keep[k]);
            if (!v || json_is_null(v)) continue;
            if (!json_is_string(v)) {
                sits_srv_error_set(err, 400, "invalid_request_error", NULL, "messages", "messages[%zu].%s must be a string",
                                   i, keep[k]);
                goto fail;
            }
            json_object_set(msg, keep[k], v);
        }
    }
    return out;
nomem:
    sits_srv_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
fail:
    json_decref(out);
    return NULL;
}

static int parse_messages(const sits_srv_limits_t *lim, json_t *root, sits_srv_request_t *req, sits_srv_error_t *err)
{
    json_t *m = field(root, "messages");
    if (!m) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "messages", "'messages' is required");
        return -1;
    }
    if (!json_is_array(m)) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "messages", "'messages' must be an array");
        return -1;
    }
    if (json_array_size(m) == 0) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "messages", "'messages' must not be empty");
        return -1;
    }
    if (!sits_chat_available(lim->chat)) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "messages",
                           "this model has no chat template; use /v1/completions or start the server with "
                           "--chat-template FILE|NAME");
        return -1;
    }
    /* vLLM's extra chat fields */
    int add_gen = 1, cont = 0;
    if (get_bool(root, "add_generation_prompt", &add_gen, err) != 0) return -1;
    if (get_bool(root, "continue_final_message", &cont, err) != 0) return -1;
    json_t *kwargs = field(root, "chat_template_kwargs");
    if (kwargs && !json_is_object(kwargs)) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "chat_template_kwargs",
                           "'chat_template_kwargs' must be an object");
        return -1;
    }
    json_t *tools = field(root, "tools");   /* checked by sits_srv_structured_parse (tools.c) */
    json_t *docs = field(root, "documents");
    if (docs && !json_is_array(docs)) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "documents", "'documents' must be an array");
        return -1;
    }
    int rc = -1;
    char *rendered = NULL;
    json_t *msgs = chat_messages(m, err);
    if (!msgs) return -1;
    sits_chat_input_t in = { .messages = msgs, .tools = tools, .documents = docs, .kwargs = kwargs,
                             .add_generation_prompt = add_gen, .continue_final_message = cont };
    sits_tmpl_error_t terr = { 0 };
    size_t len = 0;
    sits_status_t st = sits_chat_render(lim->chat, &in, &rendered, &len, &terr);
    if (st == SITS_ERR_INVALID || st == SITS_ERR_NOT_FOUND) {
        /* the template's own message (raise_exception) says what the conversation lacks, as vLLM reports it */
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "messages", "chat template: %.400s", terr.msg);
        goto out;
    }
    if (st != SITS_OK) {
        sits_srv_error_set(err, 500, "server_error", NULL, NULL, "chat template failed: %s", sits_status_str(st));
        goto out;
    }
    /* the template writes BOS itself: encode without the post-processor (transformers, vLLM) */
    if (encode(lim, rendered, len, 0, "messages", &req->prompt, &req->n_prompt, err) != 0) goto out;
    rc = 0;
out:
    json_decref(msgs);
    free(rendered);
    return rc;
}

static int parse_stop(json_t *root, sits_srv_request_t *req, sits_srv_error_t *err)
{
    json_t *s = field(root, "stop");
    if (!s) return 0;
    json_t *one[1] = { s };
    json_t **items = one;
    size_t n = 1;
    if (json_is_array(s)) {
        n = json_array_size(s);
        if (n > SITS_SRV_MAX_STOP) {
            sits_srv_error_set(err, 400, "invalid_request_error", NULL, "stop",
                               "'stop' may hold at most %d sequences", SITS_SRV_MAX_STOP);
            return -1;
        }
        items = NULL;
    } else if (!json_is_string(s)) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "stop",
                           "'stop' must be a string or an array of strings");
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *e = items ? items[i] : json_array_get(s, i);
        if (!json_is_string(e)) {
            sits_srv_error_set(err, 400, "invalid_request_error", NULL, "stop", "'stop' entries must be strings");
            return -1;
        }
        size_t len = json_string_length(e);
        if (len == 0 || len > SITS_SRV_MAX_STOP_LEN) {
            sits_srv_error_set(err, 400, "invalid_request_error", NULL, "stop",
                               "'stop' strings must be 1..%d bytes long", SITS_SRV_MAX_STOP_LEN);
            return -1;
        }
        char *c = malloc(len + 1);
        if (!c) {
            sits_srv_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
            return -1;
        }
        memcpy(c, json_string_value(e), len + 1);
        req->stop[req->n_stop] = c;
        req->stop_len[req->n_stop++] = len;
    }
    return 0;
}

/* Fields we refuse when they ask for something we do not do. */
static int refuse_unsupported(json_t *root, sits_srv_kind_t kind, sits_srv_error_t *err)
{
    json_int_t iv = 1;
    int present = 0;
    if (get_int(root, "n", &iv, &present, err) != 0) return -1;
    if (present && iv != 1) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "n", "only n = 1 is supported, got %lld",
                           (long long)iv);
        return -1;
    }
    if (get_int(root, "best_of", &iv, &present, err) != 0) return -1;
    if (present && iv != 1) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "best_of", "only best_of = 1 is supported");
        return -1;
    }
    json_t *v = field(root, "logprobs");
    if (v && !json_is_false(v) && !(json_is_integer(v) && json_integer_value(v) == 0)) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "logprobs", "logprobs are not supported");
        return -1;
    }
    v = field(root, "top_logprobs");
    if (v && !(json_is_integer(v) && json_integer_value(v) == 0)) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "top_logprobs", "logprobs are not supported");
        return -1;
    }
    int echo = 0;
    if (get_bool(root, "echo", &echo, err) != 0) return -1;
    if (echo) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "echo", "echo is not supported");
        return -1;
    }
    static const char *const penalties[] = { "presence_penalty", "frequency_penalty" };
    for (int i = 0; i < 2; i++) {
        double x = 0;
        if (get_number(root, penalties[i], -2.0, 0, 2.0, &x, err) != 0) return -1;
        if (x != 0) {
            sits_srv_error_set(err, 400, "invalid_request_error", NULL, penalties[i], "'%s' is not supported",
                               penalties[i]);
            return -1;
        }
    }
    v = field(root, "logit_bias");
    if (v && (!json_is_object(v) || json_object_size(v) != 0)) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "logit_bias", "logit_bias is not supported");
        return -1;
    }
    v = field(root, "suffix");
    if (kind == SITS_SRV_COMPLETIONS && v && (!json_is_string(v) || json_string_length(v) != 0)) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "suffix", "suffix is not supported");
        return -1;
    }
    v = field(root, "user");
    if (v && !json_is_string(v)) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "user", "'user' must be a string");
        return -1;
    }
    return 0;
}

int sits_srv_request_parse(const sits_srv_limits_t *lim, sits_srv_kind_t kind, const char *body, size_t len,
                           sits_srv_request_t *req, sits_srv_error_t *err)
{
    memset(req, 0, sizeof *req);
    req->kind = kind;
    json_t *root = NULL;
    size_t bad = 0;
    if (!sits_utf8_valid(body, len, &bad)) BAD(NULL, "request body is not valid UTF-8 (byte %zu)", bad);
    json_error_t jerr;
    root = json_loadb(body, len, 0, &jerr);
    if (!root) BAD(NULL, "malformed JSON at line %d column %d: %s", jerr.line, jerr.column, jerr.text);
    if (!json_is_object(root)) BAD(NULL, "the request body must be a JSON object");

    json_t *model = field(root, "model");
    if (model && !json_is_string(model)) BAD("model", "'model' must be a string");
    if (model && strcmp(json_string_value(model), lim->model_name) != 0) {
        sits_srv_error_set(err, 404, "invalid_request_error", "model_not_found", "model",
                           "The model '%.200s' does not exist (this server serves '%.200s')",
                           json_string_value(model), lim->model_name);
        goto fail;
    }
    if (refuse_unsupported(root, kind, err) != 0) goto fail;

    /* sampling */
    double temperature = lim->gen.has_temperature ? lim->gen.temperature : 1.0;
    double top_p = lim->gen.has_top_p ? lim->gen.top_p : 1.0;
    if (get_number(root, "temperature", 0.0, 0, 2.0, &temperature, err) != 0) goto fail;
    if (get_number(root, "top_p", 0.0, 1, 1.0, &top_p, err) != 0) goto fail;
    json_int_t top_k = lim->gen.has_top_k ? lim->gen.top_k : -1, seed = 0, max_tokens = 0;
    int has_max = 0;
    if (get_int(root, "top_k", &top_k, NULL, err) != 0) goto fail;
    if (top_k < -1 || top_k > (json_int_t)lim->vocab_size) BAD("top_k", "'top_k' must be -1, 0 (off) or 1..%d", lim->vocab_size);
    if (get_int(root, "seed", &seed, &req->has_seed, err) != 0) goto fail;
    req->sample.temperature = (float)temperature;
    req->sample.top_p = (float)top_p;
    req->sample.top_k = top_k > 0 ? (int)top_k : 0;
    req->sample.seed = (uint64_t)seed;
    if (get_bool(root, "ignore_eos", &req->ignore_eos, err) != 0) goto fail;
    /* [structured output + tool calls] response_format, structured_outputs, guided_*, tools, tool_choice */
    if (sits_srv_structured_parse(lim, root, kind, req, err) != 0) goto fail;

    /* max_tokens (chat: max_completion_tokens wins, as in OpenAI's newer API) */
    int has_mct = 0;
    json_int_t mct = 0;
    if (kind == SITS_SRV_CHAT && get_int(root, "max_completion_tokens", &mct, &has_mct, err) != 0) goto fail;
    const char *max_param = has_mct ? "max_completion_tokens" : "max_tokens";
    if (has_mct) {
        max_tokens = mct;
        has_max = 1;
    } else if (get_int(root, "max_tokens", &max_tokens, &has_max, err) != 0) {
        goto fail;
    }
    if (has_max && max_tokens < 1) BAD(max_param, "'%s' must be at least 1, got %lld", max_param, (long long)max_tokens);
    if (has_max && max_tokens >= lim->max_model_len)
        BAD(max_param, "'%s' is %lld but this model's maximum context length is %d tokens (prompt included)",
            max_param, (long long)max_tokens, lim->max_model_len);

    /* streaming */
    if (get_bool(root, "stream", &req->stream, err) != 0) goto fail;
    json_t *so = field(root, "stream_options");
    if (so) {
        if (!json_is_object(so)) BAD("stream_options", "'stream_options' must be an object");
        if (!req->stream) BAD("stream_options", "'stream_options' is only allowed with stream = true");
        if (get_bool(so, "include_usage", &req->include_usage, err) != 0) {
            err->param = "stream_options";
            goto fail;
        }
    }
    if (parse_stop(root, req, err) != 0) goto fail;

    /* the prompt, tokenized */
    if (kind == SITS_SRV_COMPLETIONS) {
        if (parse_prompt(lim, root, req, err) != 0) goto fail;
    } else {
        if (parse_messages(lim, root, req, err) != 0) goto fail;
    }
    const char *pparam = kind == SITS_SRV_COMPLETIONS ? "prompt" : "messages";
    if (req->n_prompt == 0) BAD(pparam, "the prompt is empty (no tokens)");
    if (req->n_prompt >= lim->max_model_len) {
        sits_srv_error_set(err, 400, "invalid_request_error", "context_length_exceeded", pparam,
                           "This model's maximum context length is %d tokens. However, your prompt has %d tokens "
                           "(no room left to generate).", lim->max_model_len, req->n_prompt);
        goto fail;
    }
    int room = lim->max_model_len - req->n_prompt;
    if (has_max && max_tokens > room) {
        sits_srv_error_set(err, 400, "invalid_request_error", "context_length_exceeded", max_param,
                           "This model's maximum context length is %d tokens. However, you requested %lld tokens "
                           "(%d in the %s, %lld in the completion).", lim->max_model_len,
                           (long long)(req->n_prompt + max_tokens), req->n_prompt, pparam, (long long)max_tokens);
        goto fail;
    }
    if (!has_max) max_tokens = kind == SITS_SRV_COMPLETIONS && lim->default_max_tokens < room ? lim->default_max_tokens
                                                                                              : room;
    req->max_tokens = (int)max_tokens;
    json_decref(root);
    return 0;
fail:
    json_decref(root);
    sits_srv_request_free(req);
    return -1;
}

void sits_srv_request_free(sits_srv_request_t *req)
{
    free(req->prompt);
    req->prompt = NULL;
    for (int i = 0; i < req->n_stop; i++) free(req->stop[i]);
    req->n_stop = 0;
    sits_grammar_destroy(req->grammar);
    req->grammar = NULL;
}

char *sits_srv_error_json(const sits_srv_error_t *err)
{
    json_t *o = json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", err->message, "type", err->type, "param",
                          err->param ? json_string(err->param) : json_null(), "code",
                          err->code ? json_string(err->code) : json_null());
    if (!o) return NULL;
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

const char *sits_srv_finish_str(sits_finish_t f)
{
    switch (f) {
    case SITS_FINISH_STOP: return "stop";
    case SITS_FINISH_LENGTH: return "length";
    case SITS_FINISH_CANCELLED: return "abort";
    case SITS_FINISH_ERROR: return "error";
    default: return NULL;
    }
}

static json_t *usage_obj(int n_prompt, int n_gen)
{
    return json_pack("{s:i, s:i, s:i}", "prompt_tokens", n_prompt, "completion_tokens", n_gen, "total_tokens",
                     n_prompt + n_gen);
}

char *sits_srv_response_json(sits_srv_kind_t kind, const char *id, long long created, const char *model,
                             const char *text, size_t text_len, const char *finish, int n_prompt, int n_gen)
{
    json_t *choice;
    if (kind == SITS_SRV_COMPLETIONS)
        choice = json_pack("{s:i, s:s%, s:n, s:s}", "index", 0, "text", text, text_len, "logprobs", "finish_reason",
                           finish);
    else
        choice = json_pack("{s:i, s:{s:s, s:s%}, s:n, s:s}", "index", 0, "message", "role", "assistant", "content",
                           text, text_len, "logprobs", "finish_reason", finish);
    if (!choice) return NULL;
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:[o], s:o}", "id", id, "object",
                          kind == SITS_SRV_COMPLETIONS ? "text_completion" : "chat.completion", "created",
                          (json_int_t)created, "model", model, "choices", choice, "usage", usage_obj(n_prompt, n_gen));
    if (!o) return NULL;
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

char *sits_srv_response_tools_json(const char *id, long long created, const char *model, const char *content,
                                   size_t content_len, json_t *calls, int n_prompt, int n_gen)
{
    json_t *msg = json_pack("{s:s, s:o, s:O}", "role", "assistant", "content",
                            content_len ? json_stringn(content, content_len) : json_null(), "tool_calls", calls);
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:[{s:i, s:o, s:n, s:s}], s:o}", "id", id, "object", "chat.completion",
                          "created", (json_int_t)created, "model", model, "choices", "index", 0, "message", msg, "logprobs",
                          "finish_reason", "tool_calls", "usage", usage_obj(n_prompt, n_gen));
    if (!o) return NULL;
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

/* "data: " + json + "\n\n" (consumes o). */
static char *sse_event(json_t *o, size_t *len_p)
{
    if (!o) return NULL;
    char *j = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!j) return NULL;
    size_t n = strlen(j);
    char *s = malloc(n + 9);
    if (s) {
        memcpy(s, "data: ", 6);
        memcpy(s + 6, j, n);
        memcpy(s + 6 + n, "\n\n", 3);
        *len_p = n + 8;
    }
    free(j);
    return s;
}

char *sits_srv_chunk_sse(sits_srv_kind_t kind, const char *id, long long created, const char *model,
                         const char *role, const char *text, size_t text_len, const char *finish, int usage_null,
                         size_t *len_p)
{
    json_t *choice;
    json_t *fin = finish ? json_string(finish) : json_null();
    if (kind == SITS_SRV_COMPLETIONS) {
        choice = json_pack("{s:i, s:s%, s:n, s:o}", "index", 0, "text", text ? text : "", text ? text_len : 0,
                           "logprobs", "finish_reason", fin);
    } else {
        json_t *delta = json_object();
        if (delta && role) json_object_set_new(delta, "role", json_string(role));
        if (delta && text) json_object_set_new(delta, "content", json_stringn(text, text_len));
        choice = json_pack("{s:i, s:o, s:n, s:o}", "index", 0, "delta", delta, "logprobs", "finish_reason", fin);
    }
    if (!choice) return NULL;
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", id, "object",
                          kind == SITS_SRV_COMPLETIONS ? "text_completion" : "chat.completion.chunk", "created",
                          (json_int_t)created, "model", model, "choices", choice);
    if (o && usage_null) json_object_set_new(o, "usage", json_null());
    return sse_event(o, len_p);
}

char *sits_srv_chunk_delta_sse(const char *id, long long created, const char *model, json_t *delta, const char *finish,
                               int usage_null, size_t *len_p)
{
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:[{s:i, s:o, s:n, s:o}]}", "id", id, "object", "chat.completion.chunk",
                          "created", (json_int_t)created, "model", model, "choices", "index", 0, "delta", delta, "logprobs",
                          "finish_reason", finish ? json_string(finish) : json_null());
    if (o && usage_null) json_object_set_new(o, "usage", json_null());
    return sse_event(o, len_p);
}

char *sits_srv_usage_sse(sits_srv_kind_t kind, const char *id, long long created, const char *model, int n_prompt,
                         int n_gen, size_t *len_p)
{
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", id, "object",
                          kind == SITS_SRV_COMPLETIONS ? "text_completion" : "chat.completion.chunk", "created",
                          (json_int_t)created, "model", model, "choices", "usage", usage_obj(n_prompt, n_gen));
    return sse_event(o, len_p);
}

char *sits_srv_error_sse(const sits_srv_error_t *err, size_t *len_p)
{
    json_t *o = json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", err->message, "type", err->type, "param",
                          err->param ? json_string(err->param) : json_null(), "code",
                          err->code ? json_string(err->code) : json_null());
    return sse_event(o, len_p);
}
