/* translate.c -- [translated APIs] what the APIs served as chat requests share (responses.c, anthropic.c; see
 * srv_internal.h): the request body as a JSON object, and named SSE events ("event: TYPE\ndata: {...}\n\n", the
 * shape both OpenAI's Responses streams and Anthropic's Messages streams take) built up in a buffer, and a chat stream
 * chunk taken apart into the pieces those streams are made of. */
#include "server/srv_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

json_t *sits_srv_json_object_body(const char *body, size_t len, sits_srv_error_t *err)
{
    size_t bad = 0;
    json_error_t jerr;
    json_t *root = NULL;
    if (!sits_utf8_valid(body, len, &bad)) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, NULL, "request body is not valid UTF-8 (byte %zu)", bad);
        return NULL;
    }
    if (!(root = json_loadb(body, len, 0, &jerr))) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, NULL, "malformed JSON at line %d column %d: %s", jerr.line,
                           jerr.column, jerr.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, NULL, "the request body must be a JSON object");
        return NULL;
    }
    return root;
}

int sits_srv_sse_named(sits_srv_sse_buf_t *b, const char *type, json_t *ev)
{
    char *j = NULL;
    json_t *o = ev && !json_object_get(ev, "type") ? json_pack("{s:s}", "type", type) : json_incref(ev);   /* type first */
    if (o && (o == ev || json_object_update(o, ev) == 0) && json_object_set_new(o, "type", json_string(type)) == 0)
        j = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    json_decref(ev);
    size_t tl = strlen(type), jl = j ? strlen(j) : 0;
    if (!j || sits_srv_grow(&b->p, &b->cap, b->len + tl + jl + 17) != 0) {
        b->failed = 1;
        free(j);
        return -1;
    }
    b->len += (size_t)sprintf(b->p + b->len, "event: %s\ndata: %s\n\n", type, j);
    free(j);
    return 0;
}

char *sits_srv_sse_take(sits_srv_sse_buf_t *b, size_t *len_p)
{
    if (b->failed) {
        free(b->p);
        return NULL;
    }
    if (!b->p && !(b->p = malloc(1))) return NULL;
    *len_p = b->len;
    return b->p;
}

const char *sits_srv_chunk_pieces(json_t *ch, sits_srv_piece_fn *fn, void *ctx)
{
    json_t *d = json_object_get(ch, "delta"), *rs = json_object_get(d, "reasoning_content"), *c = json_object_get(d, "content");
    json_t *call;
    size_t k;
    fn(ctx, SITS_SRV_PIECE_REASONING, 0, NULL, "", json_string_value(rs), json_string_length(rs));
    fn(ctx, SITS_SRV_PIECE_CONTENT, 0, NULL, "", json_string_value(c), json_string_length(c));
    json_array_foreach(json_object_get(d, "tool_calls"), k, call) {
        json_t *f = json_object_get(call, "function"), *args = json_object_get(f, "arguments");
        const char *name = json_string_value(json_object_get(f, "name"));
        fn(ctx, SITS_SRV_PIECE_CALL, (int)json_integer_value(json_object_get(call, "index")),
           json_string_value(json_object_get(call, "id")), name ? name : "", json_string_value(args), json_string_length(args));
    }
    return json_string_value(json_object_get(ch, "finish_reason"));
}
