/* otlp.h -- OTLP/HTTP JSON export of request timelines (--otlp-endpoint).
 *
 * Each finished request becomes one trace of four spans (OpenTelemetry protocol, JSON encoding,
 * POST ENDPOINT/v1/traces, resource attribute service.name):
 *   "request"  SERVER span, queued -> finished, with the request's attributes (below)
 *   "queue"    INTERNAL child, queued -> first scheduled
 *   "prefill"  INTERNAL child, first scheduled -> first token
 *   "decode"   INTERNAL child, first token -> finished
 * A child is left out when its start or end did not happen (a request cancelled while queued has
 * only "request" and maybe "queue"). Attributes of "request": sits.request_id, sits.replica,
 * sits.tenant, sits.prompt_tokens, sits.generated_tokens, sits.prefix_cached_tokens,
 * sits.preemptions, sits.finish_reason; status ERROR when the finish reason is "error".
 * Trace ids are 16 random bytes, span ids 8 (hex, as OTLP/JSON wants them).
 *
 * Export never slows the scheduler: sits_otlp_request copies the record into a bounded queue
 * (SITS_OTLP_QUEUE records; full -> dropped and counted) and returns; a background thread posts
 * batches of up to SITS_OTLP_BATCH requests at least every flush interval. A post that fails
 * (connection refused, timeout, non-2xx answer) drops its batch, is counted and logged (a warning
 * on the first failure and every 100th after). Plain HTTP/1.1 (src/util/http_client.h): no TLS. */
#ifndef SITS_UTIL_OTLP_H
#define SITS_UTIL_OTLP_H

#include <stdint.h>
#include "util/status.h"

#define SITS_OTLP_QUEUE 4096
#define SITS_OTLP_BATCH 256

typedef struct sits_otlp sits_otlp_t;

/* One finished request; times are CLOCK_REALTIME seconds, 0 = did not happen. Strings are copied. */
typedef struct {
    const char *request_id;
    int replica;
    const char *tenant;
    double queued, first_scheduled, first_token, finished;
    int prompt_tokens, generated_tokens, prefix_cached_tokens, preemptions;
    const char *finish_reason;
} sits_otlp_request_t;

typedef struct {
    uint64_t requests_exported;   /* requests whose spans a collector accepted (2xx) */
    uint64_t requests_dropped;    /* queue full or their batch's post failed */
    uint64_t posts_failed;
} sits_otlp_stats_t;

/* endpoint: http://HOST[:PORT][/PATH]; the traces go to PATH + "/v1/traces" unless PATH already
 * ends in "/v1/traces". flush_s > 0: the longest a record waits. SITS_ERR_INVALID (bad URL, https)
 * or SITS_ERR_NOT_FOUND (host does not resolve), logged. */
sits_status_t sits_otlp_create(const char *endpoint, const char *service_name, double flush_s, sits_otlp_t **o_p);
/* Posts what is queued (waiting at most a few seconds for the collector), stops the thread, frees. */
void sits_otlp_destroy(sits_otlp_t *o);
/* Queues one request's spans (thread-safe, never blocks on the network). */
void sits_otlp_request(sits_otlp_t *o, const sits_otlp_request_t *r);
void sits_otlp_get_stats(sits_otlp_t *o, sits_otlp_stats_t *st_p);

#endif
