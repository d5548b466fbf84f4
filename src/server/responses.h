/* responses.h -- [responses] POST /v1/responses, OpenAI's Responses API as vLLM serves it (responses.c).
 *
 * A Responses request is turned into the chat request it means (input items -> chat messages, instructions
 * -> a system message first, flat function tools -> chat tools, text.format -> response_format,
 * reasoning.effort -> reasoning_effort, max_output_tokens -> max_completion_tokens) and parsed by the chat
 * endpoint's own parser; the server generates it as a chat request. Its output -- the chat endpoint's whole
 * body, or each event of its stream -- is translated into the Responses shapes, so that the text, reasoning,
 * tool calls and token counts are the chat endpoint's by construction.
 *
 * Nothing is stored (vLLM's default, without VLLM_ENABLE_RESPONSES_API_STORE): `store` is accepted and
 * ignored, previous_response_id and GET /v1/responses/{id} answer 404 (no such response). */
#ifndef SITS_SERVER_RESPONSES_H
#define SITS_SERVER_RESPONSES_H

#include <stddef.h>
#include "server/srv_internal.h"

typedef struct sits_srv_resp sits_srv_resp_t;

/* Parses and validates a /v1/responses body (len bytes): on success fills req (a chat request, stream with
 * include_usage when the request streams; free with sits_srv_request_free) and *resp_p (the request's
 * Responses state: echo fields, the stream's items; free with sits_srv_resp_free) and returns 0; else fills
 * err (400 naming the Responses parameter, 404 for another model or a previous_response_id) and returns -1. */
int sits_srv_resp_parse(const sits_srv_limits_t *lim, const char *body, size_t len, sits_srv_request_t *req,
                        sits_srv_resp_t **resp_p, sits_srv_error_t *err);
void sits_srv_resp_free(sits_srv_resp_t *r);

/* The whole response: chat_body (the chat endpoint's whole JSON body, consumed) as a Response object
 * (malloc'd; NULL when out of memory or chat_body is NULL). */
char *sits_srv_resp_body(sits_srv_resp_t *r, char *chat_body);

/* A stream: one event of the chat stream (a chunk object, consumed; NULL: its "[DONE]") as the Responses events
 * it makes ("event: TYPE\ndata: {...}\n\n" each, sequence_number counting from 0; malloc'd, *len_p set,
 * possibly empty): response.created / in_progress first, the output items as the deltas open and close them,
 * and for the chat stream's "[DONE]" the terminal event with the whole response (response.completed,
 * response.incomplete, response.failed) -- no "[DONE]" line. NULL when out of memory. */
char *sits_srv_resp_sse(sits_srv_resp_t *r, json_t *ev, size_t *len_p);

/* The hooks server.c calls on a /v1/responses request's state (srv_internal.h): the functions above. */
extern const sits_srv_dialect_t sits_srv_resp_dialect;

/* Any method on /v1/responses/{id}[/...] (GET, DELETE, POST .../cancel): the error (404, nothing is stored). */
void sits_srv_resp_not_found(const char *id, sits_srv_error_t *err);

#endif
