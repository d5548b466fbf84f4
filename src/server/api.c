/* api.c -- the OpenAI request/response formats: parse and validate a /v1/completions or
 * /v1/chat/completions body into a tokenized sits_srv_request_t, and build the JSON bodies
 * (whole responses, SSE chunks, usage chunk, errors) in OpenAI's shapes.
 *
 * Validation answers 400 invalid_request_error (param names the field) for wrong types and ranges,
 * 404 model_not_found for another model, 400 context_length_exceeded when prompt + max_tokens does
 * not fit max_model_len. JSON null counts as "absent" for optional fields (clients send nulls).
 * Features we do not implement (suffix) are refused with 400 rather than silently ignored.
 * [logprobs] completions' logprobs N and echo, chat's logprobs + top_logprobs. [sampling controls]
 * presence / frequency / repetition penalties, logit_bias, min_p, min_tokens, stop_token_ids,
 * include_stop_str_in_output, skip_special_tokens, allowed_token_ids, bad_words (vLLM's names and ranges). Structured output and
 * tools are tools.c's (sits_srv_structured_parse). */
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

static int get_int(json_t *o, const char *key, json_int_t *val_p, int *present_p, sits_srv_error_t *err);

/* [logprobs] completions: logprobs N in [0, 20] (N best alternatives; the sampled token is scored
 * even at 0, as vLLM does), echo; chat: logprobs bool, top_logprobs in [0, 20] only with logprobs. */
static int parse_logprobs(json_t *root, sits_srv_kind_t kind, sits_srv_request_t *req, sits_srv_error_t *err)
{
    json_int_t n = 0;
    int present = 0;
    if (kind == SITS_SRV_COMPLETIONS) {
        if (get_int(root, "logprobs", &n, &present, err) != 0) return -1;
        if (present && (n < 0 || n > SITS_LOGPROB_MAX_TOP)) {
            sits_srv_error_set(err, 400, "invalid_request_error", NULL, "logprobs", "'logprobs' must be in [0, %d], got %lld",
                               SITS_LOGPROB_MAX_TOP, (long long)n);
            return -1;
        }
        req->logprobs = present;
        req->top_logprobs = (int)n;
        if (get_bool(root, "return_tokens_as_token_ids", &req->lp_ids, err) != 0) return -1;
        return get_bool(root, "echo", &req->echo, err);
    }
    if (get_bool(root, "logprobs", &req->logprobs, err) != 0) return -1;
    if (get_int(root, "top_logprobs", &n, &present, err) != 0) return -1;
    if (present && (n < 0 || n > SITS_LOGPROB_MAX_TOP)) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "top_logprobs", "'top_logprobs' must be in [0, %d], got %lld",
                           SITS_LOGPROB_MAX_TOP, (long long)n);
        return -1;
    }
    if (present && n > 0 && !req->logprobs) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
        return -1;
    }
    req->top_logprobs = (int)n;
    return get_bool(root, "return_tokens_as_token_ids", &req->lp_ids, err);
}

/* [sampling controls] everything but min_tokens (checked against max_tokens by the caller). */
static int parse_controls(const sits_srv_limits_t *lim, json_t *root, sits_srv_request_t *req, sits_srv_error_t *err)
{
    double pres = 0, freq = 0, rep = 1, min_p = 0;
    if (get_number(root, "presence_penalty", -2.0, 0, 2.0, &pres, err) != 0) return -1;
    if (get_number(root, "frequency_penalty", -2.0, 0, 2.0, &freq, err) != 0) return -1;
    if (get_number(root, "repetition_penalty", 0.0, 1, 10.0, &rep, err) != 0) return -1;
    if (get_number(root, "min_p", 0.0, 0, 1.0, &min_p, err) != 0) return -1;
    req->sample.presence_penalty = (float)pres;
    req->sample.frequency_penalty = (float)freq;
    req->sample.repetition_penalty = (float)rep;
    req->sample.min_p = (float)min_p;
    json_t *b = field(root, "logit_bias");
    if (b) {
        if (!json_is_object(b) || json_object_size(b) > 1024) {
            sits_srv_error_set(err, 400, "invalid_request_error", NULL, "logit_bias",
                               "'logit_bias' must be an object of at most 1024 \"token id\": bias entries");
            return -1;
        }
        req->bias = malloc(sizeof *req->bias * (json_object_size(b) + 1));
        if (!req->bias) {
            sits_srv_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
            return -1;
        }
        const char *key;
        json_t *val;
        json_object_foreach(b, key, val) {
            char *end = NULL;
            long id = strtol(key, &end, 10);
            if (!*key || *end || id < 0 || id >= lim->vocab_size) {
                sits_srv_error_set(err, 400, "invalid_request_error", NULL, "logit_bias",
                                   "logit_bias key '%.40s' is not a token id in [0, %d)", key, lim->vocab_size);
                return -1;
            }
            double x = json_is_number(val) ? json_number_value(val) : NAN;
            if (!(x >= -100 && x <= 100)) {
                sits_srv_error_set(err, 400, "invalid_request_error", NULL, "logit_bias",
                                   "logit_bias[%ld] must be a number in [-100, 100]", id);
                return -1;
            }
            req->bias[req->n_bias++] = (sits_sample_bias_t){ (int32_t)id, (float)x };
        }
    }
    json_t *st = field(root, "stop_token_ids");
    if (st) {
        if (!json_is_array(st) || json_array_size(st) > 64) {
            sits_srv_error_set(err, 400, "invalid_request_error", NULL, "stop_token_ids", "'stop_token_ids' must be an array of at most 64 token ids");
            return -1;
        }
        req->stop_token_ids = malloc(sizeof(int32_t) * (json_array_size(st) + 1));
        if (!req->stop_token_ids) {
            sits_srv_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
            return -1;
        }
        for (size_t i = 0; i < json_array_size(st); i++) {
            json_t *e = json_array_get(st, i);
            if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) >= lim->vocab_size) {
                sits_srv_error_set(err, 400, "invalid_request_error", NULL, "stop_token_ids",
                                   "stop_token_ids[%zu] is not a token id in [0, %d)", i, lim->vocab_size);
                return -1;
            }
            req->stop_token_ids[req->n_stop_token_ids++] = (int32_t)json_integer_value(e);
        }
    }
    req->skip_special = 1;
    if (get_bool(root, "return_token_ids", &req->return_ids, err) != 0) return -1;
    if (get_bool(root, "include_stop_str_in_output", &req->include_stop_str, err) != 0) return -1;
    return get_bool(root, "skip_special_tokens", &req->skip_special, err);
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

/* One prompt: text (tokenized with the post-processor when add_special; kept as echo text when echo) or token ids. */
static int parse_one_prompt(const sits_srv_limits_t *lim, json_t *p, int echo, int add_special, int32_t **ids_p, int *n_p,
                            char **echo_p, size_t *echo_len_p, sits_srv_error_t *err)
{
    if (json_is_string(p)) {
        if (echo) {
            *echo_p = strndup(json_string_value(p), json_string_length(p));
            *echo_len_p = json_string_length(p);
            if (!*echo_p) {
                sits_srv_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
                return -1;
            }
        }
        return encode(lim, json_string_value(p), json_string_length(p), add_special, "prompt", ids_p, n_p, err);
    }
    if (json_is_array(p)) return get_ids(p, lim->vocab_size, ids_p, n_p, err);
    sits_srv_error_set(err, 400, "invalid_request_error", NULL, "prompt",
                       "'prompt' must be a string, an array of token ids, or a list of either");
    return -1;
}

static int parse_prompt(const sits_srv_limits_t *lim, json_t *root, sits_srv_request_t *req, sits_srv_error_t *err)
{
    json_t *p = field(root, "prompt");
    if (!p) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "prompt", "'prompt' is required");
        return -1;
    }
    /* [n] a batch (["text", ...] or [[ids], ...]): one choice set per prompt, as OpenAI does; the first
     * prompt is req->prompt, the others req->more */
    if (json_is_array(p) && json_array_size(p) >= 1 &&
        (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0)))) {
        size_t nb = json_array_size(p);
        if (nb * (size_t)(req->n > 0 ? req->n : 1) > SITS_SRV_MAX_CHOICES) {
            sits_srv_error_set(err, 400, "invalid_request_error", NULL, "prompt",
                               "%zu prompts x n = %d is more than %d choices", nb, req->n, SITS_SRV_MAX_CHOICES);
            return -1;
        }
        if (nb > 1 && !(req->more = calloc(nb - 1, sizeof *req->more))) {
            sits_srv_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
            return -1;
        }
        for (size_t i = 1; i < nb; i++) {
            sits_srv_prompt_t *m = &req->more[i - 1];
            req->n_more = (int)i;
            if (parse_one_prompt(lim, json_array_get(p, i), req->echo, req->add_special, &m->ids, &m->n, &m->echo, &m->echo_len,
                                 err) != 0)
                return -1;
        }
        p = json_array_get(p, 0);
    }
    return parse_one_prompt(lim, p, req->echo, req->add_special, &req->prompt, &req->n_prompt, &req->echo_text, &req->echo_len,
                            err);
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

/* messages -> the template's messages: role, content (string), and name / tool_calls / tool_call_id kept; an assistant's
 * reasoning (or reasoning_content) as reasoning. */
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
        /* [reasoning] an assistant turn's thinking, sent back as vLLM takes it: reasoning, or its older name
         * reasoning_content (the template sees both names and thinking: tokenizer/chat.c) */
        json_t *rs = json_object_get(e, "reasoning");
        if (!rs || json_is_null(rs)) rs = json_object_get(e, "reasoning_content");
        if (rs && !json_is_null(rs)) {
            if (!json_is_string(rs)) {
                sits_srv_error_set(err, 400, "invalid_request_error", NULL, "messages", "messages[%zu].reasoning must be a string", i);
                goto fail;
            }
            if (strcmp(r, "assistant") == 0) json_object_set(msg, "reasoning", rs);
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
    /* [reasoning] reasoning_effort (OpenAI's; vLLM's values): a template variable (gpt-oss's "Reasoning: low"), and
     * enable_thinking = (effort != "none") unless chat_template_kwargs sets it, as vLLM's build_chat_params does */
    json_t *effort = field(root, "reasoning_effort"), *kw_owned = NULL;
    if (effort && !json_is_null(effort)) {
        static const char *const efforts[] = { "none", "minimal", "low", "medium", "high", "xhigh", "max" };
        size_t ei = 0;
        while (json_is_string(effort) && ei < sizeof efforts / sizeof efforts[0] && strcmp(json_string_value(effort), efforts[ei]) != 0)
            ei++;
        if (!json_is_string(effort) || ei == sizeof efforts / sizeof efforts[0]) {
            sits_srv_error_set(err, 400, "invalid_request_error", NULL, "reasoning_effort",
                               "'reasoning_effort' must be one of none, minimal, low, medium, high, xhigh, max");
            return -1;
        }
        kw_owned = kwargs ? json_deep_copy(kwargs) : json_object();
        if (!kw_owned || json_object_set(kw_owned, "reasoning_effort", effort) != 0 ||
            (!json_object_get(kw_owned, "enable_thinking") &&
             json_object_set_new(kw_owned, "enable_thinking", json_boolean(ei != 0)) != 0)) {
            json_decref(kw_owned);
            sits_srv_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
            return -1;
        }
        kwargs = kw_owned;
    }
    int rc = -1;
    char *rendered = NULL;
    json_t *msgs = chat_messages(m, err);
    if (!msgs) {
        json_decref(kw_owned);
        return -1;
    }
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
    /* [reasoning] the output is split after the prompt's own state: a template that closed the reasoning
     * (enable_thinking false) leaves deepseek_r1 nothing to think */
    req->reasoning = lim->reasoning;
    req->reasoning_closed = lim->reasoning && sits_srv_reasoning_prompt_closed(rendered, len);
    req->include_reasoning = 1;   /* vLLM's include_reasoning: false keeps the split, drops the reasoning */
    if (get_bool(root, "include_reasoning", &req->include_reasoning, err) != 0) goto out;
    /* the template writes BOS itself: encode without the post-processor (transformers, vLLM), unless the request's
     * add_special_tokens asks for it on top (vLLM's) */
    if (encode(lim, rendered, len, req->add_special, "messages", &req->prompt, &req->n_prompt, err) != 0) goto out;
    rc = 0;
out:
    json_decref(msgs);
    json_decref(kw_owned);
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

/* [allowed_token_ids, bad_words] vLLM's: the output only of the listed ids (a token-id grammar; beside another
 * constraint, that grammar restricted to the ids: sits_grammar_restrict), and words it must not write -- each word, its
 * leading whitespace dropped, encoded as written and after a space (the second kept when it starts with another token
 * and has as many), vLLM's update_from_tokenizer. */
#define SITS_SRV_MAX_BAD_WORDS 128   /* token sequences after encoding */
static int parse_token_limits(const sits_srv_limits_t *lim, json_t *root, sits_srv_request_t *req, sits_srv_error_t *err)
{
    int32_t *ids = NULL, *one = NULL;
    json_t *a = field(root, "allowed_token_ids");
    if (a) {
        if (!json_is_array(a) || json_array_size(a) == 0 || json_array_size(a) > (size_t)lim->vocab_size)
            BAD("allowed_token_ids", "'allowed_token_ids' must be a non-empty array of token ids");
        if (!(ids = malloc(sizeof *ids * json_array_size(a)))) goto nomem;
        for (size_t i = 0; i < json_array_size(a); i++) {
            json_t *e = json_array_get(a, i);
            if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) >= lim->vocab_size)
                BAD("allowed_token_ids", "allowed_token_ids[%zu] is not a token id in [0, %d)", i, lim->vocab_size);
            ids[i] = (int32_t)json_integer_value(e);
        }
        if (req->grammar) {   /* beside response_format / structured_outputs / a forced tool call: both apply (vLLM) */
            sits_grammar_t *r = NULL;
            if (sits_grammar_restrict(req->grammar, ids, (int)json_array_size(a), &r) != SITS_OK) goto nomem;
            sits_grammar_destroy(req->grammar);   /* r holds its own reference */
            req->grammar = r;
            req->restricted = 1;
        } else if (sits_grammar_from_token_ids(ids, (int)json_array_size(a), &req->grammar) != SITS_OK) {
            goto nomem;
        }
        free(ids);
        ids = NULL;
    }
    json_t *b = field(root, "bad_words");
    if (!b) return 0;
    if (!json_is_array(b)) BAD("bad_words", "'bad_words' must be an array of strings");
    size_t cap = 0, used = 0;
    for (size_t i = 0; i < json_array_size(b); i++) {
        json_t *e = json_array_get(b, i);
        if (!json_is_string(e)) BAD("bad_words", "bad_words[%zu] must be a string", i);
        const char *w = json_string_value(e);
        size_t len = json_string_length(e);
        while (len && strchr(" \t\n\r\f\v", *w) && *w) w++, len--;   /* lstrip() */
        if (!len) BAD("bad_words", "bad_words[%zu] holds no word (only whitespace)", i);
        char *sp = malloc(len + 1);
        if (!sp) goto nomem;
        sp[0] = ' ';
        memcpy(sp + 1, w, len);
        for (int pre = 0; pre < 2; pre++) {
            int n = 0;
            int rc = encode(lim, pre ? sp : w, len + (size_t)pre, 0, "bad_words", &one, &n, err);
            if (rc != 0) {
                free(sp);
                goto fail;
            }
            int prev = req->n_bad ? req->bad_off[req->n_bad] - req->bad_off[req->n_bad - 1] : 0;
            if (n > 0 && (!pre || (one[0] != req->bad_ids[req->bad_off[req->n_bad - 1]] && n == prev))) {
                for (int k = 0; k < n; k++)
                    if (one[k] < 0 || one[k] >= lim->vocab_size) {
                        free(sp);
                        BAD("bad_words", "bad_words[%zu] encodes to token %d, outside the model's vocabulary (%d)", i, one[k],
                            lim->vocab_size);
                    }
                if (req->n_bad == SITS_SRV_MAX_BAD_WORDS) {
                    free(sp);
                    BAD("bad_words", "too many bad words after tokenization: the most is %d", SITS_SRV_MAX_BAD_WORDS);
                }
                if (used + (size_t)n > cap) {
                    cap = 2 * (used + (size_t)n);
                    int32_t *nb = realloc(req->bad_ids, sizeof *nb * cap);
                    if (!nb) {
                        free(sp);
                        goto nomem;
                    }
                    req->bad_ids = nb;
                }
                if (!req->bad_off && !(req->bad_off = calloc(SITS_SRV_MAX_BAD_WORDS + 1, sizeof *req->bad_off))) {
                    free(sp);
                    goto nomem;
                }
                memcpy(req->bad_ids + used, one, sizeof *one * (size_t)n);
                used += (size_t)n;
                req->bad_off[++req->n_bad] = (int32_t)used;
            } else if (n == 0 && !pre) {
                free(sp);
                BAD("bad_words", "bad_words[%zu] encodes to no tokens", i);
            }
            free(one);
            one = NULL;
        }
        free(sp);
    }
    return 0;
nomem:
    sits_srv_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
fail:
    free(ids);
    free(one);
    return -1;
}

/* Fields we refuse when they ask for something we do not do. */
static int refuse_unsupported(json_t *root, sits_srv_kind_t kind, sits_srv_error_t *err)
{
    json_int_t iv = 1, n = 1;
    int present = 0;
    if (get_int(root, "n", &n, &present, err) != 0) return -1;
    if (present && (n < 1 || n > SITS_SRV_MAX_N)) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "n", "'n' must be in [1, %d], got %lld", SITS_SRV_MAX_N,
                           (long long)n);
        return -1;
    }
    if (get_int(root, "best_of", &iv, &present, err) != 0) return -1;
    if (present && iv != n) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "best_of", "only best_of = n is supported");
        return -1;
    }
    json_t *v;
    int echo = 0;
    if (get_bool(root, "echo", &echo, err) != 0) return -1;
    if (echo && kind == SITS_SRV_CHAT) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "echo", "echo is only supported by /v1/completions");
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

/* The body as a JSON object whose "model" (when given) is this server's; NULL with err set. */
static json_t *load_body(const sits_srv_limits_t *lim, const char *body, size_t len, sits_srv_error_t *err)
{
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
    return root;
fail:
    json_decref(root);
    return NULL;
}

int sits_srv_request_parse(const sits_srv_limits_t *lim, sits_srv_kind_t kind, const char *body, size_t len,
                           sits_srv_request_t *req, sits_srv_error_t *err)
{
    memset(req, 0, sizeof *req);
    req->kind = kind;
    json_t *root = load_body(lim, body, len, err);
    if (!root) goto fail;
    if (refuse_unsupported(root, kind, err) != 0) goto fail;
    json_int_t n_choices = 1;
    if (get_int(root, "n", &n_choices, NULL, err) != 0) goto fail;
    req->n = (int)n_choices;

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
    int speculative = 1;   /* [speculative] vLLM-style extension field; default: as the server is configured */
    if (get_bool(root, "speculative", &speculative, err) != 0) goto fail;
    req->no_speculation = !speculative;
    json_int_t prio = 0;   /* vLLM's priority: like vLLM without --scheduling-policy priority, only 0 (tenants set priorities) */
    int has_prio = 0;
    if (get_int(root, "priority", &prio, &has_prio, err) != 0) goto fail;
    if (prio != 0) BAD("priority", "'priority' other than 0 is not supported: request priorities come from the tenants file (--tenants)");
    json_t *salt = field(root, "cache_salt");   /* [prefix cache] vLLM's: a non-empty string */
    if (salt) {
        if (!json_is_string(salt) || json_string_length(salt) == 0) BAD("cache_salt", "'cache_salt' must be a non-empty string");
        uint64_t h = 0xcbf29ce484222325ull;   /* FNV-1a over its bytes; never 0 (0: no salt) */
        for (size_t i = 0; i < json_string_length(salt); i++) h = (h ^ (unsigned char)json_string_value(salt)[i]) * 0x100000001b3ull;
        req->cache_salt = h ? h : 1;
    }
    if (parse_logprobs(root, kind, req, err) != 0) goto fail;
    if (parse_controls(lim, root, req, err) != 0) goto fail;
    json_int_t min_tokens = 0;
    if (get_int(root, "min_tokens", &min_tokens, NULL, err) != 0) goto fail;
    /* [structured output + tool calls] response_format, structured_outputs, guided_*, tools, tool_choice */
    if (sits_srv_structured_parse(lim, root, kind, req, err) != 0) goto fail;
    if (parse_token_limits(lim, root, req, err) != 0) goto fail;

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
    if (has_max && max_tokens < (req->echo ? 0 : 1))
        BAD(max_param, "'%s' must be at least %d, got %lld", max_param, req->echo ? 0 : 1, (long long)max_tokens);
    if (has_max && max_tokens >= lim->max_model_len)
        BAD(max_param, "'%s' is %lld but this model's maximum context length is %d tokens (prompt included)",
            max_param, (long long)max_tokens, lim->max_model_len);

    /* streaming */
    if (get_bool(root, "stream", &req->stream, err) != 0) goto fail;
    json_t *so = field(root, "stream_options");
    if (so) {
        if (!json_is_object(so)) BAD("stream_options", "'stream_options' must be an object");
        if (!req->stream) BAD("stream_options", "'stream_options' is only allowed with stream = true");
        if (get_bool(so, "include_usage", &req->include_usage, err) != 0 ||
            get_bool(so, "continuous_usage_stats", &req->usage_each, err) != 0) {
            err->param = "stream_options";
            goto fail;
        }
        req->usage_each = req->usage_each && req->include_usage;   /* vLLM: only with include_usage */
    }
    if (parse_stop(root, req, err) != 0) goto fail;

    /* the prompt, tokenized; add_special_tokens (vLLM's): the tokenizer's special tokens (BOS) around it -- default
     * on for completions, off for chat (the template writes them) */
    req->add_special = kind == SITS_SRV_COMPLETIONS;
    if (get_bool(root, "add_special_tokens", &req->add_special, err) != 0) goto fail;
    if (kind == SITS_SRV_COMPLETIONS) {
        if (parse_prompt(lim, root, req, err) != 0) goto fail;
    } else {
        if (parse_messages(lim, root, req, err) != 0) goto fail;
    }
    const char *pparam = kind == SITS_SRV_COMPLETIONS ? "prompt" : "messages";
    json_int_t keep = 0;   /* vLLM's truncate_prompt_tokens: only the last k tokens of each prompt (-1: the context) */
    int has_keep = 0;
    if (get_int(root, "truncate_prompt_tokens", &keep, &has_keep, err) != 0) goto fail;
    if (has_keep && keep == -1) keep = lim->max_model_len;
    if (has_keep && (keep < 1 || keep > lim->max_model_len))
        BAD("truncate_prompt_tokens", "'truncate_prompt_tokens' must be -1 or in [1, %d], got %lld", lim->max_model_len,
            (long long)keep);
    for (int i = -1; has_keep && i < req->n_more; i++) {
        int32_t *ids = i < 0 ? req->prompt : req->more[i].ids;
        int *np = i < 0 ? &req->n_prompt : &req->more[i].n;
        if (*np <= keep) continue;
        memmove(ids, ids + (*np - keep), sizeof *ids * (size_t)keep);
        *np = (int)keep;
        char **echo = i < 0 ? &req->echo_text : &req->more[i].echo;   /* echo: the kept tokens' text, decoded */
        free(*echo);
        *echo = NULL;
    }
    int longest = req->n_prompt;
    for (int i = -1; i < req->n_more; i++) {   /* every prompt of a batch */
        int np = i < 0 ? req->n_prompt : req->more[i].n;
        if (np > longest) longest = np;
        if (np == 0) BAD(pparam, "the prompt is empty (no tokens)");
        if (np >= lim->max_model_len) {
            sits_srv_error_set(err, 400, "invalid_request_error", "context_length_exceeded", pparam,
                               "This model's maximum context length is %d tokens. However, your prompt has %d tokens "
                               "(no room left to generate).", lim->max_model_len, np);
            goto fail;
        }
    }
    int room = lim->max_model_len - longest;
    if (has_max && max_tokens > room) {
        sits_srv_error_set(err, 400, "invalid_request_error", "context_length_exceeded", max_param,
                           "This model's maximum context length is %d tokens. However, you requested %lld tokens "
                           "(%d in the %s, %lld in the completion).", lim->max_model_len,
                           (long long)(longest + max_tokens), longest, pparam, (long long)max_tokens);
        goto fail;
    }
    if (!has_max) max_tokens = kind == SITS_SRV_COMPLETIONS && lim->default_max_tokens < room ? lim->default_max_tokens
                                                                                              : room;
    req->max_tokens = (int)max_tokens;
    if (min_tokens < 0 || min_tokens > max_tokens)
        BAD("min_tokens", "'min_tokens' must be in [0, max_tokens = %lld], got %lld", (long long)max_tokens, (long long)min_tokens);
    req->min_tokens = (int)min_tokens;
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
    free(req->echo_text);
    req->echo_text = NULL;
    for (int i = 0; i < req->n_more; i++) {
        free(req->more[i].ids);
        free(req->more[i].echo);
    }
    free(req->more);
    req->more = NULL;
    req->n_more = 0;
    free(req->bias);
    req->bias = NULL;
    req->n_bias = 0;
    free(req->stop_token_ids);
    req->stop_token_ids = NULL;
    req->n_stop_token_ids = 0;
    for (int i = 0; i < req->n_stop; i++) free(req->stop[i]);
    req->n_stop = 0;
    sits_grammar_destroy(req->grammar);
    req->grammar = NULL;
    req->restricted = 0;
    free(req->bad_ids);
    free(req->bad_off);
    req->bad_ids = req->bad_off = NULL;
    req->n_bad = 0;
    json_decref(req->tools);
    req->tools = NULL;
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

static json_t *usage_obj(int n_prompt, int n_gen, int cached)
{
    json_t *u = json_pack("{s:i, s:i, s:i}", "prompt_tokens", n_prompt, "completion_tokens", n_gen, "total_tokens",
                          n_prompt + n_gen);
    if (u && cached >= 0) json_object_set_new(u, "prompt_tokens_details", json_pack("{s:i}", "cached_tokens", cached));
    return u;
}

/* [logprobs] One token's text for the logprobs lists (special tokens as their text), or vLLM's
 * "token_id:N" with return_tokens_as_token_ids (as_ids: tok is then NULL-safe). */
static json_t *token_text(const sits_tokenizer_t *tok, int32_t id, int as_ids)
{
    if (as_ids) {
        char b[32];
        snprintf(b, sizeof b, "token_id:%d", (int)id);
        return json_string(b);
    }
    char *t = NULL;
    size_t len = 0;
    if (sits_tokenizer_decode(tok, &id, 1, 0, &t, &len) != SITS_OK) return json_string("");
    json_t *s = json_stringn(t, len);
    free(t);
    return s ? s : json_string("");
}

static json_t *token_bytes(const sits_tokenizer_t *tok, int32_t id)
{
    char *t = NULL;
    size_t len = 0;
    json_t *a = json_array();
    if (sits_tokenizer_decode(tok, &id, 1, 0, &t, &len) == SITS_OK)
        for (size_t i = 0; i < len; i++) json_array_append_new(a, json_integer((unsigned char)t[i]));
    free(t);
    return a;
}

static json_t *chat_entry(const sits_tokenizer_t *tok, int32_t id, float lp, int as_ids)
{
    return json_pack("{s:o, s:f, s:o}", "token", token_text(tok, id, as_ids), "logprob", (double)lp, "bytes", token_bytes(tok, id));
}

json_t *sits_srv_logprobs_json(sits_srv_kind_t kind, const sits_tokenizer_t *tok, const sits_logprob_t *plp, int n_plp,
                               const int32_t *prompt, const sits_logprob_t *glp, int n_glp, size_t text_base, int as_ids)
{
    if (kind == SITS_SRV_CHAT) {
        json_t *content = json_array();
        for (int i = 0; i < n_glp; i++) {
            json_t *e = chat_entry(tok, glp[i].id, glp[i].logprob, as_ids), *top = json_array();
            for (int t = 0; t < glp[i].n_top; t++) json_array_append_new(top, chat_entry(tok, glp[i].top_id[t], glp[i].top_logprob[t], as_ids));
            json_object_set_new(e, "top_logprobs", top);
            json_array_append_new(content, e);
        }
        return json_pack("{s:o}", "content", content);
    }
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    size_t off = text_base;
    for (int i = 0; i < n_plp + n_glp; i++) {
        const sits_logprob_t *e = i < n_plp ? &plp[i] : &glp[i - n_plp];
        int32_t id = i < n_plp ? prompt[i] : e->id;
        json_t *ts = token_text(tok, id, as_ids);
        json_array_append(tokens, ts);
        json_array_append_new(offs, json_integer((json_int_t)off));
        off += json_string_length(ts);
        json_decref(ts);
        if (i == 0 && n_plp > 0) {   /* the first prompt token has no context to be scored in */
            json_array_append_new(lps, json_null());
            json_array_append_new(tops, json_null());
            continue;
        }
        json_array_append_new(lps, json_real(e->logprob));
        json_t *top = json_object();
        for (int t = 0; t < e->n_top; t++) {
            json_t *k = token_text(tok, e->top_id[t], as_ids);
            /* two ids can share a text: keep the better (first) one, as vLLM's dict does */
            if (!json_object_get(top, json_string_value(k))) json_object_set_new(top, json_string_value(k), json_real(e->top_logprob[t]));
            json_decref(k);
        }
        /* the scored token is always among the alternatives (OpenAI's top_logprobs hold the chosen one) */
        json_t *k = token_text(tok, id, as_ids);
        if (!json_object_get(top, json_string_value(k))) json_object_set_new(top, json_string_value(k), json_real(e->logprob));
        json_decref(k);
        json_array_append_new(tops, top);
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", lps, "top_logprobs", tops, "text_offset", offs);
}

json_t *sits_srv_choice_json(sits_srv_kind_t kind, int index, const char *text, size_t text_len, const char *finish,
                             json_t *logprobs)
{
    json_t *lp = logprobs ? logprobs : json_null();
    if (kind == SITS_SRV_COMPLETIONS)
        return json_pack("{s:i, s:s%, s:o, s:s}", "index", index, "text", text, text_len, "logprobs", lp, "finish_reason",
                         finish);
    return json_pack("{s:i, s:{s:s, s:s%}, s:o, s:s}", "index", index, "message", "role", "assistant", "content", text,
                     text_len, "logprobs", lp, "finish_reason", finish);
}

char *sits_srv_response_json(sits_srv_kind_t kind, const char *id, long long created, const char *model, json_t *choices,
                             int n_prompt, int n_gen, int cached, json_t *extra)
{
    if (!choices) {
        json_decref(extra);
        return NULL;
    }
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:o, s:o}", "id", id, "object",
                          kind == SITS_SRV_COMPLETIONS ? "text_completion" : "chat.completion", "created",
                          (json_int_t)created, "model", model, "choices", choices, "usage", usage_obj(n_prompt, n_gen, cached));
    if (o && extra && json_object_update(o, extra) != 0) {
        json_decref(o);
        o = NULL;
    }
    json_decref(extra);
    if (!o) return NULL;
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

json_t *sits_srv_choice_tools_json(int index, const char *content, size_t content_len, json_t *calls, json_t *logprobs)
{
    json_t *msg = json_pack("{s:s, s:o, s:O}", "role", "assistant", "content",
                            content_len ? json_stringn(content, content_len) : json_null(), "tool_calls", calls);
    return json_pack("{s:i, s:o, s:o, s:s}", "index", index, "message", msg, "logprobs", logprobs ? logprobs : json_null(),
                     "finish_reason", "tool_calls");
}

/* "data: " + json + "\n\n" (consumes o). */
char *sits_srv_sse(json_t *o, size_t *len_p)
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

json_t *sits_srv_chunk(sits_srv_kind_t kind, const char *id, long long created, const char *model, int index,
                       const char *role, const char *text, size_t text_len, const char *finish, int usage_null,
                       json_t *logprobs)
{
    json_t *choice;
    json_t *fin = finish ? json_string(finish) : json_null();
    json_t *lp = logprobs ? logprobs : json_null();
    if (kind == SITS_SRV_COMPLETIONS) {
        choice = json_pack("{s:i, s:s%, s:o, s:o}", "index", index, "text", text ? text : "", text ? text_len : 0,
                           "logprobs", lp, "finish_reason", fin);
    } else {
        json_t *delta = json_object();
        if (delta && role) json_object_set_new(delta, "role", json_string(role));
        if (delta && text) json_object_set_new(delta, "content", json_stringn(text, text_len));
        choice = json_pack("{s:i, s:o, s:o, s:o}", "index", index, "delta", delta, "logprobs", lp, "finish_reason", fin);
    }
    if (!choice) return NULL;
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", id, "object",
                          kind == SITS_SRV_COMPLETIONS ? "text_completion" : "chat.completion.chunk", "created",
                          (json_int_t)created, "model", model, "choices", choice);
    if (o && usage_null) json_object_set_new(o, "usage", json_null());
    return o;
}

json_t *sits_srv_chunk_delta(const char *id, long long created, const char *model, int index, json_t *delta,
                             const char *finish, int usage_null, json_t *logprobs)
{
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:[{s:i, s:o, s:o, s:o}]}", "id", id, "object", "chat.completion.chunk",
                          "created", (json_int_t)created, "model", model, "choices", "index", index, "delta", delta, "logprobs",
                          logprobs ? logprobs : json_null(), "finish_reason", finish ? json_string(finish) : json_null());
    if (o && usage_null) json_object_set_new(o, "usage", json_null());
    return o;
}

char *sits_srv_usage_sse(sits_srv_kind_t kind, const char *id, long long created, const char *model, int n_prompt,
                         int n_gen, int cached, size_t *len_p)
{
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", id, "object",
                          kind == SITS_SRV_COMPLETIONS ? "text_completion" : "chat.completion.chunk", "created",
                          (json_int_t)created, "model", model, "choices", "usage", usage_obj(n_prompt, n_gen, cached));
    return sits_srv_sse(o, len_p);
}

char *sits_srv_error_sse(const sits_srv_error_t *err, size_t *len_p)
{
    json_t *o = json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", err->message, "type", err->type, "param",
                          err->param ? json_string(err->param) : json_null(), "code",
                          err->code ? json_string(err->code) : json_null());
    return sits_srv_sse(o, len_p);
}

/* ---- /tokenize and /detokenize (vLLM's shapes) ----
 * tokenize: {"prompt": text, "add_special_tokens": bool (default true)} or {"messages": [...], chat
 * fields as /v1/chat/completions} -> {"count", "max_model_len", "tokens"};
 * detokenize: {"tokens": [ids]} -> {"prompt": text} (special tokens kept, as vLLM). */
char *sits_srv_tokenize(const sits_srv_limits_t *lim, int detok, const char *body, size_t len, sits_srv_error_t *err)
{
    sits_srv_request_t req;
    memset(&req, 0, sizeof req);
    char *out = NULL, *text = NULL;
    json_t *o = NULL, *root = load_body(lim, body, len, err);
    if (!root) goto fail;
    if (detok) {
        json_t *t = field(root, "tokens");
        if (!json_is_array(t)) BAD("tokens", "'tokens' must be an array of token ids");
        size_t n = json_array_size(t);
        int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
        if (!ids) BAD(NULL, "out of memory");
        req.prompt = ids;
        for (size_t i = 0; i < n; i++) {
            json_t *e = json_array_get(t, i);
            if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) >= lim->vocab_size)
                BAD("tokens", "tokens[%zu] is not a token id in [0, %d)", i, lim->vocab_size);
            ids[i] = (int32_t)json_integer_value(e);
        }
        size_t tl = 0;
        if (sits_tokenizer_decode(lim->tok, ids, n, 0, &text, &tl) != SITS_OK) {
            sits_srv_error_set(err, 500, "server_error", NULL, NULL, "detokenizing failed");
            goto fail;
        }
        o = json_pack("{s:s%}", "prompt", text, tl);
    } else {
        int add_special = 1;
        if (get_bool(root, "add_special_tokens", &add_special, err) != 0) goto fail;
        if (field(root, "messages")) {   /* vLLM's chat default: false (the template writes them) */
            req.add_special = field(root, "add_special_tokens") ? add_special : 0;
            if (parse_messages(lim, root, &req, err) != 0) goto fail;
        } else {
            json_t *p = field(root, "prompt");
            if (!json_is_string(p)) BAD("prompt", "'prompt' (a string) or 'messages' is required");
            if (encode(lim, json_string_value(p), json_string_length(p), add_special, "prompt", &req.prompt, &req.n_prompt, err) != 0)
                goto fail;
        }
        json_t *ids = json_array();
        for (int i = 0; ids && i < req.n_prompt; i++) json_array_append_new(ids, json_integer(req.prompt[i]));
        o = json_pack("{s:i, s:i, s:o, s:n}", "count", req.n_prompt, "max_model_len", lim->max_model_len, "tokens", ids,
                      "token_strs");
    }
    if (!o || !(out = json_dumps(o, JSON_COMPACT))) sits_srv_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
fail:
    json_decref(o);
    json_decref(root);
    free(text);
    sits_srv_request_free(&req);
    return out;
}
