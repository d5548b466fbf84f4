/* http_client.h -- a minimal HTTP/1.1 client over loopback sockets for the server tests
 * (Connection: close; decodes chunked bodies; nothing else). */
#ifndef SITS_TESTS_HTTP_CLIENT_H
#define SITS_TESTS_HTTP_CLIENT_H

#include <stddef.h>

typedef struct {
    int status;
    char headers[8192];   /* raw header block after the status line */
    char *body;           /* NUL-terminated (malloc'd) */
    size_t body_len;
} http_resp_t;

/* Connects to 127.0.0.1:port; -1 on failure. */
int http_connect(int port);
/* Sends raw bytes; 0 ok. */
int http_send_all(int fd, const char *buf, size_t len);
/* A whole request (extra_headers: "Name: v\r\n..." or NULL; body NULL -> none). Returns 0 and fills r. */
int http_request(int port, const char *method, const char *path, const char *extra_headers, const char *body,
                 size_t body_len, http_resp_t *r);
/* Reads a response from fd until EOF and parses it. */
int http_read_response(int fd, http_resp_t *r);
/* Value of a response header (case-insensitive name) copied into out; 0 when found. */
int http_header(const http_resp_t *r, const char *name, char *out, size_t out_len);
void http_resp_free(http_resp_t *r);

#endif
