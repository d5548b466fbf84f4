/* http_client.h -- the HTTP/1.1 client of sits-bench and the OTLP exporter: POSIX sockets, one connection per request
 * (Connection: close), blocking I/O bounded by poll() and a per-request deadline.
 *
 * Response bodies are decoded incrementally (Content-Length, chunked transfer encoding, or read
 * to EOF). A 2xx `text/event-stream` body is split into Server-Sent Events as the bytes arrive and
 * each event's `data:` payload (several data lines joined by '\n') is handed to a callback at once,
 * so the caller can timestamp tokens; any other body is collected whole.
 *
 * libcurl is avoided on purpose: it is not among the project's dependencies (shared/DESIGN.md);
 * both need only plain HTTP/1.1 on loopback or a cluster network. No TLS, no redirects, no
 * proxies, no keep-alive. Thread-safe: no shared state; one request per call. */
#ifndef SITS_UTIL_HTTP_CLIENT_H
#define SITS_UTIL_HTTP_CLIENT_H

#include <stddef.h>
#include <sys/socket.h>
#include "util/status.h"

/* http://HOST[:PORT][/BASE]; BASE has no trailing '/' ("" when absent). The address is resolved
 * once, by sits_http_url_parse. */
typedef struct {
    char host[256];
    char port[16];
    char base[512];
    struct sockaddr_storage addr;
    socklen_t addr_len;
} sits_http_url_t;

/* Called once per SSE event with its data payload (not NUL-terminated; may be empty); the time is
 * taken by the caller. Returning non-zero stops reading (the request then ends with SITS_OK and
 * the response as received so far). */
typedef int (*sits_http_event_fn)(void *arg, const char *data, size_t len);

typedef struct {
    const char *method;        /* "GET" or "POST" */
    const char *path;          /* appended to url->base, starts with '/' */
    const char *headers;       /* extra header lines "Name: value\r\n...", or NULL */
    const char *body;          /* NULL: no body; else sent with Content-Type: application/json */
    size_t body_len;
    double timeout_s;          /* whole request, connect to last byte; <= 0: none */
    sits_http_event_fn on_event;   /* SSE events; NULL: an event-stream body is collected whole */
    void *arg;
} sits_http_req_t;

typedef struct {
    int status;                /* HTTP status code; 0 when no status line arrived */
    int sse;                   /* the body was a 2xx text/event-stream handed to on_event */
    long n_events;             /* SSE events delivered */
    char *body;                /* non-SSE body, NUL-terminated, malloc'd (NULL when empty) */
    size_t body_len;
    char err[160];             /* why the transport failed ("" when it did not) */
} sits_http_resp_t;

/* Parses and resolves url (http only); SITS_ERR_INVALID (bad syntax, https) or SITS_ERR_NOT_FOUND
 * (the host does not resolve), with a message in err[err_len]. */
sits_status_t sits_http_url_parse(const char *url, sits_http_url_t *url_p, char *err, size_t err_len);

/* One request. SITS_OK when a complete response was read (whatever its status); otherwise
 * SITS_ERR_IO (connect/send/recv failed or the connection closed early), SITS_ERR_TIMEOUT or
 * SITS_ERR_FORMAT (malformed response), with resp->err saying what; resp->status keeps the
 * status line's code when one arrived. resp is always initialised; free it with
 * sits_http_resp_free. */
sits_status_t sits_http_do(const sits_http_url_t *url, const sits_http_req_t *req,
                                 sits_http_resp_t *resp);
void sits_http_resp_free(sits_http_resp_t *resp);

#endif
