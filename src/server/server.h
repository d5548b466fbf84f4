/* server.h -- the OpenAI-compatible HTTP front-end of the TP leader (libmicrohttpd).
 *
 * Endpoints: POST /v1/completions, POST /v1/chat/completions (JSON or SSE streaming in OpenAI's
 * chunk format), GET /v1/models, GET /v1/models/{id}, GET /health, GET /metrics (Prometheus text).
 * The server owns no model: it validates requests, tokenizes them, submits them to the scheduler
 * through the sits_sched_api_t table (thread-safe, see sched/sched.h), waits for tokens, detokenizes
 * them incrementally, applies stop strings and writes the responses.
 *
 * Threads: MHD runs one thread per connection; that thread blocks in api->next() (100 ms slices)
 * while a request generates, and checks between slices whether the client went away (then the
 * request is cancelled and released) or the server is stopping.
 *
 * Auth: when api_key is set, every /v1/ path needs "Authorization: Bearer <key>" (401 otherwise);
 * /health and /metrics stay open (load balancers and Prometheus scrape them).
 *
 * Lifetime: create after the scheduler, destroy before it. destroy() cancels every request still
 * streaming and returns within about a second. */
#ifndef SITS_SERVER_SERVER_H
#define SITS_SERVER_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include "sched/sched.h"
#include "sched/tenants.h"
#include "model/config.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"
#include "util/otlp.h"
#include "util/status.h"

typedef struct {
    const char *host;          /* address or name to bind; NULL: "127.0.0.1" */
    int port;                  /* 0: any free port (see sits_server_port) */
    const char *api_key;       /* NULL or "": no auth (ignored with tenants) */
    const sits_tenants_t *tenants; /* NULL: no tenants. Else every /v1/ request needs a key of the tenants
                                * file (401 otherwise); the tenant's max_concurrent gives 429; per-tenant
                                * metrics and SLO attainment in /metrics. Must outlive the server. */
    const char *model_name;    /* served model id (e.g. basename of --model); required */
    int max_model_len;         /* context length: prompt + max_tokens must fit; required (> 0) */
    int vocab_size;            /* model vocabulary (token-id prompts must be below it); 0: the tokenizer's */
    size_t max_body_bytes;     /* larger request bodies get 413; 0: 1 MiB */
    const sits_chat_t *chat;   /* the model's chat template(s) (tokenizer/chat.h); NULL or none: chat gets 400 */
    sits_gen_defaults_t gen;   /* generation_config.json defaults of temperature / top_p / top_k */
    int default_max_tokens;    /* completions without max_tokens (OpenAI: 16; clamped to the context); 0: 16.
                                * Chat without max_tokens gets the rest of the context. */
    uint64_t seed;             /* requests without "seed" get a seed derived from this and a request counter */
    int max_connections;       /* MHD connection limit (each is a thread); 0: 512 */
    int idle_timeout_s;        /* keep-alive connections idle this long are closed; 0: 60 */
    sits_otlp_t *otlp;         /* --otlp-endpoint exporter, for its counters in /metrics; NULL: off */
    const char *tool_call_parser; /* [tool calls] hermes | llama3_json | mistral | auto (NULL: auto, from the
                                * chat template's text); an unknown name is SITS_ERR_INVALID */
} sits_server_params_t;

typedef struct sits_server sits_server_t;

/* Binds, starts MHD and returns a running server. tok and api/sched must outlive it.
 * SITS_ERR_IO: the address could not be bound (logged with the reason); SITS_ERR_INVALID: bad params
 * (unknown chat template name, missing model name). */
sits_status_t sits_server_create(const sits_server_params_t *p, const sits_tokenizer_t *tok,
                                 const sits_sched_api_t *api, void *sched, sits_server_t **srv_p);
/* The bound TCP port (the chosen one when params.port was 0). */
int sits_server_port(const sits_server_t *srv);
/* Draining: from now on new generation requests get 503 with Retry-After (and /health 503);
 * requests in flight continue. */
void sits_server_stop_admitting(sits_server_t *srv);
/* Generation requests in flight (submitted and not yet finished/abandoned). */
int sits_server_inflight(const sits_server_t *srv);
/* Cancels the requests still in flight, stops MHD (joins its threads) and frees everything. */
void sits_server_destroy(sits_server_t *srv);

#endif
