/* server.h -- the OpenAI-compatible HTTP front-end of the TP leader (libmicrohttpd).
 *
 * Endpoints: POST /v1/completions, POST /v1/chat/completions (JSON or SSE streaming in OpenAI's
 * chunk format), POST /v1/responses (generated as a chat request: responses.h), GET /v1/models,
 * GET /v1/models/{id}, GET /health, GET /metrics (Prometheus text).
 * The server owns no model: it validates requests, tokenizes them, submits them to the scheduler
 * through the sits_sched_api_t table (thread-safe, see sched/sched.h), waits for tokens, detokenizes
 * them incrementally, applies stop strings and writes the responses.
 *
 * Threads: MHD runs an event loop (epoll) on a pool of http_threads threads; idle and slow
 * connections cost no thread. One pump thread moves tokens from the scheduler to the connections
 * (which wait suspended) and notices clients that went away (the request is cancelled and released).
 * Connections beyond max_connections in all, or beyond max_connections_per_client from one address,
 * get 503 with Retry-After and Connection: close on their requests (never a reset).
 *
 * Shutdown (see cli.c): sits_server_drain_signal from the signal handler (503 from then on), the
 * scheduler drains, sits_server_inflight() reaching 0 means every admitted client has received its
 * whole response; then destroy.
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
    int max_connections;       /* connections served normally; beyond, 503 + Retry-After; 0: 10000 */
    int max_connections_per_client; /* per client address; beyond, 503 + Retry-After; 0: no limit */
    int http_threads;          /* event-loop threads; 0: 4 */
    double read_timeout_s;     /* a request body must arrive within this many seconds of its headers; 0: 30 */
    int drain_signals;         /* 1: a SIGTERM / SIGINT pending on the process already counts as draining
                                * (the server's threads block both; the caller's handler then runs on
                                * another thread and calls sits_server_drain_signal) */
    int idle_timeout_s;        /* connections without a byte this long are closed (also stalled headers); 0: 60 */
    sits_otlp_t *otlp;         /* --otlp-endpoint exporter, for its counters in /metrics; NULL: off */
    const char *tool_call_parser; /* [tool calls] hermes | llama3_json | mistral | openai | auto (NULL: auto, from
                                * the chat template's text); an unknown name is SITS_ERR_INVALID */
    const char *reasoning_parser; /* [reasoning] deepseek_r1 | qwen3 | openai_gptoss | auto (from the chat template)
                                * | NULL or "": none. Chat responses then carry reasoning_content apart from
                                * content (see reasoning.c; openai_gptoss: harmony.c, which also takes the
                                * tool calls); an unknown name is SITS_ERR_INVALID */
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
/* The same, async-signal-safe (one atomic store, no log): call it from a SIGTERM handler so that
 * /health and new requests answer 503 from the signal on. */
void sits_server_drain_signal(sits_server_t *srv);
/* Generation requests in flight: submitted, and their response not yet completely sent (or the
 * client gone). 0 after a drain: every admitted client has its whole response. */
int sits_server_inflight(const sits_server_t *srv);
/* Ends the requests still in flight (finish "abort") and resumes their connections, stops MHD (joins
 * its threads; what was not sent by then is lost) and frees everything. For complete responses call
 * it once sits_server_inflight() is 0. */
void sits_server_destroy(sits_server_t *srv);

#endif
