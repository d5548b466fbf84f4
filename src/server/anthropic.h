/* anthropic.h -- [anthropic] POST /v1/messages and /v1/messages/count_tokens, Anthropic's Messages API as vLLM serves
 * it (anthropic.c).
 *
 * A Messages request is turned into the chat request it means (system -> a system message first, content blocks ->
 * chat messages: tool_use -> an assistant's tool_calls, tool_result -> tool messages, thinking -> the assistant's
 * reasoning; tools {name, description, input_schema} -> chat function tools, tool_choice auto / any / tool / none ->
 * auto / required / named / none, disable_parallel_tool_use -> parallel_tool_calls false, stop_sequences -> stop,
 * max_tokens -> max_completion_tokens, thinking enabled / adaptive / disabled -> chat_template_kwargs.enable_thinking)
 * and parsed by the chat endpoint's own parser; the server generates it as a chat request. Its output -- the chat endpoint's
 * whole body, or each event of its stream -- is translated into Anthropic's shapes (a message with thinking / text /
 * tool_use blocks; message_start, content_block_start / delta / stop, message_delta, message_stop), so the text,
 * thinking, tool calls and token counts are the chat endpoint's by construction. Errors take Anthropic's shape
 * {"type": "error", "error": {"type", "message"}}. */
#ifndef SITS_SERVER_ANTHROPIC_H
#define SITS_SERVER_ANTHROPIC_H

#include <stddef.h>
#include "server/srv_internal.h"

typedef struct sits_srv_anth sits_srv_anth_t;

/* Parses and validates a /v1/messages body (len bytes): on success fills req (a chat request, stream with
 * include_usage when the request streams; free with sits_srv_request_free) and *st_p (the request's translation
 * state; free with the dialect's free) and returns 0; else fills err (400 naming the Messages parameter, 404 for
 * another model) and returns -1. */
int sits_srv_anth_parse(const sits_srv_limits_t *lim, const char *body, size_t len, sits_srv_request_t *req,
                        sits_srv_anth_t **st_p, sits_srv_error_t *err);

/* POST /v1/messages/count_tokens: {"input_tokens": N} of the prompt the same request renders (malloc'd), or NULL with
 * err set. */
char *sits_srv_anth_count_tokens(const sits_srv_limits_t *lim, const char *body, size_t len, sits_srv_error_t *err);

/* The hooks server.c calls on a /v1/messages request's state (srv_internal.h); its error_json gives any error of the
 * /v1/messages routes Anthropic's shape. */
extern const sits_srv_dialect_t sits_srv_anth_dialect;

#endif
