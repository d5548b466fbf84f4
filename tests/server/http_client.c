/* http_client.c -- see http_client.h. */
#include "http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

int http_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((unsigned short)port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int http_send_all(int fd, const char *buf, size_t len)
{
    while (len) {
        ssize_t k = send(fd, buf, len, MSG_NOSIGNAL);
        if (k <= 0) return -1;
        buf += k;
        len -= (size_t)k;
    }
    return 0;
}

/* Decodes a chunked body in place; returns the new length or (size_t)-1. */
static size_t dechunk(char *b, size_t n)
{
    size_t in = 0, out = 0;
    for (;;) {
        char *end;
        if (in >= n) return (size_t)-1;
        unsigned long sz = strtoul(b + in, &end, 16);
        char *crlf = strstr(b + in, "\r\n");
        if (!crlf || end == b + in) return (size_t)-1;
        in = (size_t)(crlf - b) + 2;
        if (sz == 0) return out;
        if (in + sz + 2 > n) return (size_t)-1;
        memmove(b + out, b + in, sz);
        out += sz;
        in += sz + 2;
    }
}

int http_read_response(int fd, http_resp_t *r)
{
    memset(r, 0, sizeof *r);
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (n + 4096 > cap) buf = realloc(buf, cap *= 2);
        ssize_t k = recv(fd, buf + n, cap - n - 1, 0);
        if (k <= 0) break;
        n += (size_t)k;
    }
    buf[n] = 0;
    char *hend = strstr(buf, "\r\n\r\n");
    if (!hend || sscanf(buf, "HTTP/1.%*d %d", &r->status) != 1) {
        free(buf);
        return -1;
    }
    char *line = strstr(buf, "\r\n") + 2;
    size_t hl = (size_t)(hend + 2 - line);
    if (hl >= sizeof r->headers) hl = sizeof r->headers - 1;
    memcpy(r->headers, line, hl);
    r->headers[hl] = 0;
    size_t blen = n - (size_t)(hend + 4 - buf);
    char *body = malloc(blen + 1);
    memcpy(body, hend + 4, blen);
    body[blen] = 0;
    char te[64];
    if (http_header(r, "Transfer-Encoding", te, sizeof te) == 0 && strcasecmp(te, "chunked") == 0) {
        blen = dechunk(body, blen);
        if (blen == (size_t)-1) {
            free(body);
            free(buf);
            return -1;
        }
        body[blen] = 0;
    }
    r->body = body;
    r->body_len = blen;
    free(buf);
    return 0;
}

int http_request(int port, const char *method, const char *path, const char *extra_headers, const char *body,
                 size_t body_len, http_resp_t *r)
{
    int fd = http_connect(port);
    if (fd < 0) return -1;
    char head[4096];
    int hl = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s", method, path,
                      extra_headers ? extra_headers : "");
    if (body)
        hl += snprintf(head + hl, sizeof head - (size_t)hl, "Content-Type: application/json\r\nContent-Length: %zu\r\n",
                       body_len);
    hl += snprintf(head + hl, sizeof head - (size_t)hl, "\r\n");
    int rc = http_send_all(fd, head, (size_t)hl);
    if (rc == 0 && body) rc = http_send_all(fd, body, body_len);
    if (rc == 0) rc = http_read_response(fd, r);
    close(fd);
    return rc;
}

int http_header(const http_resp_t *r, const char *name, char *out, size_t out_len)
{
    size_t nl = strlen(name);
    for (const char *p = r->headers; *p;) {
        const char *eol = strstr(p, "\r\n");
        if (!eol) break;
        if ((size_t)(eol - p) > nl && strncasecmp(p, name, nl) == 0 && p[nl] == ':') {
            const char *v = p + nl + 1;
            while (*v == ' ') v++;
            size_t vl = (size_t)(eol - v);
            if (vl >= out_len) vl = out_len - 1;
            memcpy(out, v, vl);
            out[vl] = 0;
            return 0;
        }
        p = eol + 2;
    }
    return -1;
}

void http_resp_free(http_resp_t *r)
{
    free(r->body);
    r->body = NULL;
}
