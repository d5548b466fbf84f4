/* http_client.c -- the HTTP/1.1 client of sits-bench and the OTLP exporter (see http_client.h).
 *
 * A response goes through three incremental stages as bytes arrive from recv():
 *   header block (until CRLF CRLF; 1xx interim responses skipped)
 *   -> body framing: Content-Length, chunked (size line, data, CRLF, ... 0, trailers, CRLF) or EOF
 *   -> body sink: SSE line splitter (`data:` lines accumulate, a blank line dispatches the event)
 *      for a 2xx text/event-stream, else a growing buffer.
 * Every stage keeps its state in parser_t, so a chunk-size line, a CRLF or an SSE line may be split
 * anywhere across recv() calls. */
#include "util/http_client.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define HEAD_MAX (64 * 1024)   /* a larger header block is refused */
#define LINE_MAX_ 256          /* chunk-size and trailer lines */

typedef enum { BODY_LEN, BODY_CHUNKED, BODY_EOF } body_mode_t;
typedef enum { CH_SIZE, CH_DATA, CH_DATA_END, CH_TRAILER } chunk_state_t;

typedef struct {
    const sits_http_req_t *req;
    sits_http_resp_t *resp;
    /* header block */
    char *head;
    size_t head_len;
    int in_body;
    /* body framing */
    body_mode_t mode;
    long long remaining;        /* BODY_LEN: bytes left; CH_DATA: bytes left in this chunk */
    chunk_state_t cstate;
    char line[LINE_MAX_];
    size_t line_len;
    int done;                   /* the whole response was read */
    int stop;                   /* the callback asked to stop */
    /* sinks */
    char *ln;                   /* SSE: current line */
    size_t ln_len, ln_cap;
    char *ev;                   /* SSE: data of the current event */
    size_t ev_len, ev_cap;
    int ev_has_data;
    size_t body_cap;
} parser_t;

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void set_err(sits_http_resp_t *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, sizeof r->err, fmt, ap);
    va_end(ap);
}

static int grow(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 256;
    while (c < need) c *= 2;
    char *p = realloc(*buf, c);
    if (!p) return -1;
    *buf = p;
    *cap = c;
    return 0;
}

sits_status_t sits_http_url_parse(const char *url, sits_http_url_t *url_p, char *err, size_t err_len)
{
    sits_http_url_t u;
    memset(&u, 0, sizeof u);
    if (strncmp(url, "http://", 7) != 0) {
        snprintf(err, err_len, "url %s: only http:// is supported", url);
        return SITS_ERR_INVALID;
    }
    const char *h = url + 7, *slash = strchr(h, '/');
    size_t hl = slash ? (size_t)(slash - h) : strlen(h);
    const char *colon = memchr(h, ':', hl);
    size_t namel = colon ? (size_t)(colon - h) : hl;
    if (namel == 0 || namel >= sizeof u.host) {
        snprintf(err, err_len, "url %s: bad host", url);
        return SITS_ERR_INVALID;
    }
    memcpy(u.host, h, namel);
    if (colon) {
        size_t pl = hl - namel - 1;
        if (pl == 0 || pl >= sizeof u.port || strspn(colon + 1, "0123456789") < pl) {
            snprintf(err, err_len, "url %s: bad port", url);
            return SITS_ERR_INVALID;
        }
        memcpy(u.port, colon + 1, pl);
    } else {
        strcpy(u.port, "80");
    }
    if (slash) {
        size_t bl = strlen(slash);
        while (bl > 0 && slash[bl - 1] == '/') bl--;
        if (bl >= sizeof u.base) {
            snprintf(err, err_len, "url %s: path too long", url);
            return SITS_ERR_INVALID;
        }
        memcpy(u.base, slash, bl);
    }
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai = NULL;
    int rc = getaddrinfo(u.host, u.port, &hints, &ai);
    if (rc != 0 || !ai) {
        snprintf(err, err_len, "url %s: cannot resolve %s: %s", url, u.host, gai_strerror(rc));
        return SITS_ERR_NOT_FOUND;
    }
    memcpy(&u.addr, ai->ai_addr, ai->ai_addrlen);
    u.addr_len = ai->ai_addrlen;
    freeaddrinfo(ai);
    *url_p = u;
    return SITS_OK;
}

/* ms left until deadline for poll(): -1 without a deadline, 0 when passed */
static int ms_left(double deadline)
{
    if (deadline <= 0) return -1;
    double left = deadline - mono_now();
    if (left <= 0) return 0;
    return (int)(left * 1000.0) + 1;
}

static sits_status_t wait_fd(int fd, short ev, double deadline, sits_http_resp_t *r, const char *what)
{
    for (;;) {
        struct pollfd p = { .fd = fd, .events = ev };
        int ms = ms_left(deadline);
        if (ms == 0) {
            set_err(r, "timeout while %s", what);
            return SITS_ERR_TIMEOUT;
        }
        int k = poll(&p, 1, ms);
        if (k > 0) return SITS_OK;
        if (k < 0 && errno != EINTR) {
            set_err(r, "poll while %s: %s", what, strerror(errno));
            return SITS_ERR_IO;
        }
    }
}

static sits_status_t connect_to(const sits_http_url_t *u, double deadline, sits_http_resp_t *r, int *fd_p)
{
    int fd = socket(u->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        set_err(r, "socket: %s", strerror(errno));
        return SITS_ERR_IO;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    sits_status_t st = SITS_OK;
    if (connect(fd, (const struct sockaddr *)&u->addr, u->addr_len) != 0) {
        if (errno != EINPROGRESS) {
            set_err(r, "connect %s:%s: %s", u->host, u->port, strerror(errno));
            st = SITS_ERR_IO;
            goto err_close;
        }
        SITS_CHECK_GOTO(wait_fd(fd, POLLOUT, deadline, r, "connecting"), st, err_close);
        int e = 0;
        socklen_t el = sizeof e;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el);
        if (e != 0) {
            set_err(r, "connect %s:%s: %s", u->host, u->port, strerror(e));
            st = SITS_ERR_IO;
            goto err_close;
        }
    }
    *fd_p = fd;
    return SITS_OK;
err_close:
    close(fd);
    return st;
}

static sits_status_t send_all(int fd, const char *buf, size_t len, double deadline, sits_http_resp_t *r)
{
    while (len) {
        ssize_t k = send(fd, buf, len, MSG_NOSIGNAL);
        if (k > 0) {
            buf += k;
            len -= (size_t)k;
        } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            SITS_CHECK(wait_fd(fd, POLLOUT, deadline, r, "sending"));
        } else {
            set_err(r, "send: %s", k < 0 ? strerror(errno) : "closed");
            return SITS_ERR_IO;
        }
    }
    return SITS_OK;
}

/* ---- body sinks ---- */

static sits_status_t sse_line(parser_t *p, char *l, size_t n)
{
    if (n > 0 && l[n - 1] == '\r') n--;
    if (n == 0) {   /* blank line: dispatch */
        if (p->ev_has_data) {
            p->resp->n_events++;
            if (p->req->on_event(p->req->arg, p->ev ? p->ev : "", p->ev_len) != 0) p->stop = 1;
        }
        p->ev_len = 0;
        p->ev_has_data = 0;
        return SITS_OK;
    }
    if (n < 5 || memcmp(l, "data:", 5) != 0) return SITS_OK;   /* comments, event:, id:, retry: */
    const char *v = l + 5;
    size_t vl = n - 5;
    if (vl > 0 && *v == ' ') {
        v++;
        vl--;
    }
    if (grow(&p->ev, &p->ev_cap, p->ev_len + vl + 2) != 0) return SITS_ERR_NOMEM;
    if (p->ev_has_data) p->ev[p->ev_len++] = '\n';
    memcpy(p->ev + p->ev_len, v, vl);
    p->ev_len += vl;
    p->ev[p->ev_len] = 0;
    p->ev_has_data = 1;
    return SITS_OK;
}

static sits_status_t sink(parser_t *p, const char *d, size_t n)
{
    sits_http_resp_t *r = p->resp;
    if (!r->sse) {
        if (grow(&r->body, &p->body_cap, r->body_len + n + 1) != 0) return SITS_ERR_NOMEM;
        memcpy(r->body + r->body_len, d, n);
        r->body_len += n;
        r->body[r->body_len] = 0;
        return SITS_OK;
    }
    while (n > 0 && !p->stop) {
        const char *nl = memchr(d, '\n', n);
        size_t take = nl ? (size_t)(nl - d) : n;
        if (grow(&p->ln, &p->ln_cap, p->ln_len + take + 1) != 0) return SITS_ERR_NOMEM;
        memcpy(p->ln + p->ln_len, d, take);
        p->ln_len += take;
        if (!nl) break;
        SITS_CHECK(sse_line(p, p->ln, p->ln_len));
        p->ln_len = 0;
        d += take + 1;
        n -= take + 1;
    }
    return SITS_OK;
}

/* ---- body framing ---- */

/* Appends bytes of a CRLF-terminated line; *complete_p = 1 when the line ended (CR/LF stripped). */
static sits_status_t take_line(parser_t *p, const char **d, size_t *n, int *complete_p)
{
    *complete_p = 0;
    while (*n > 0) {
        char c = **d;
        (*d)++;
        (*n)--;
        if (c == '\n') {
            if (p->line_len > 0 && p->line[p->line_len - 1] == '\r') p->line_len--;
            p->line[p->line_len] = 0;
            *complete_p = 1;
            return SITS_OK;
        }
        if (p->line_len + 1 >= sizeof p->line) {
            set_err(p->resp, "chunked encoding: line too long");
            return SITS_ERR_FORMAT;
        }
        p->line[p->line_len++] = c;
    }
    return SITS_OK;
}

static sits_status_t body_bytes(parser_t *p, const char *d, size_t n)
{
    if (p->mode == BODY_EOF) return sink(p, d, n);
    if (p->mode == BODY_LEN) {
        size_t k = (long long)n < p->remaining ? n : (size_t)p->remaining;
        SITS_CHECK(sink(p, d, k));
        p->remaining -= (long long)k;
        if (p->remaining == 0) p->done = 1;
        return SITS_OK;
    }
    while (n > 0 && !p->done && !p->stop) {
        int complete;
        switch (p->cstate) {
        case CH_SIZE: {
            SITS_CHECK(take_line(p, &d, &n, &complete));
            if (!complete) break;
            char *end;
            errno = 0;
            unsigned long long sz = strtoull(p->line, &end, 16);
            if (end == p->line || errno != 0 || (*end && *end != ';' && *end != ' ' && *end != '\t')) {
                set_err(p->resp, "chunked encoding: bad chunk size line '%.40s'", p->line);
                return SITS_ERR_FORMAT;
            }
            p->line_len = 0;
            p->remaining = (long long)sz;
            p->cstate = sz == 0 ? CH_TRAILER : CH_DATA;
            break;
        }
        case CH_DATA: {
            size_t k = (long long)n < p->remaining ? n : (size_t)p->remaining;
            SITS_CHECK(sink(p, d, k));
            d += k;
            n -= k;
            p->remaining -= (long long)k;
            if (p->remaining == 0) p->cstate = CH_DATA_END;
            break;
        }
        case CH_DATA_END:
            SITS_CHECK(take_line(p, &d, &n, &complete));
            if (!complete) break;
            if (p->line_len != 0) {
                set_err(p->resp, "chunked encoding: no CRLF after chunk data");
                return SITS_ERR_FORMAT;
            }
            p->cstate = CH_SIZE;
            break;
        case CH_TRAILER:
            SITS_CHECK(take_line(p, &d, &n, &complete));
            if (!complete) break;
            if (p->line_len == 0) p->done = 1;
            p->line_len = 0;
            break;
        }
    }
    return SITS_OK;
}

/* ---- header block ---- */

/* Value of header `name` in the block [hs, he) (lines after the status line), or NULL; *len_p its length. */
static const char *header_value(const char *hs, const char *he, const char *name, size_t *len_p)
{
    size_t nl = strlen(name);
    const char *p = hs;
    while (p < he) {
        const char *eol = memchr(p, '\n', (size_t)(he - p));
        if (!eol) eol = he;
        if ((size_t)(eol - p) > nl && strncasecmp(p, name, nl) == 0 && p[nl] == ':') {
            const char *v = p + nl + 1, *ve = eol;
            while (v < ve && (*v == ' ' || *v == '\t')) v++;
            while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t')) ve--;
            *len_p = (size_t)(ve - v);
            return v;
        }
        p = eol + 1;
    }
    return NULL;
}

/* Parses the complete header block head[0, hlen) (ending CRLF CRLF); sets framing and sink. */
static sits_status_t parse_head(parser_t *p, size_t hlen)
{
    sits_http_resp_t *r = p->resp;
    int st = 0;
    if (sscanf(p->head, "HTTP/1.%*d %d", &st) != 1 || st < 100 || st > 999) {
        set_err(r, "bad status line '%.40s'", p->head);
        return SITS_ERR_FORMAT;
    }
    r->status = st;
    const char *hs = memchr(p->head, '\n', hlen), *he = p->head + hlen;
    hs = hs ? hs + 1 : he;
    size_t tel = 0, cll = 0, vl = 0;
    const char *te = header_value(hs, he, "Transfer-Encoding", &tel);
    const char *cl = header_value(hs, he, "Content-Length", &cll);
    if (te && tel >= 7 && strncasecmp(te + tel - 7, "chunked", 7) == 0) {
        p->mode = BODY_CHUNKED;
        p->cstate = CH_SIZE;
    } else if (cl) {
        char tmp[32];
        if (cll == 0 || cll >= sizeof tmp || strspn(cl, "0123456789") < cll) {
            set_err(r, "bad Content-Length");
            return SITS_ERR_FORMAT;
        }
        memcpy(tmp, cl, cll);
        tmp[cll] = 0;
        p->mode = BODY_LEN;
        p->remaining = atoll(tmp);
        if (p->remaining == 0) p->done = 1;
    } else {
        p->mode = BODY_EOF;
    }
    if (st == 204 || st == 304 || (p->req->method && strcmp(p->req->method, "HEAD") == 0)) p->done = 1;
    const char *ct = header_value(hs, he, "Content-Type", &vl);
    r->sse = p->req->on_event && st >= 200 && st < 300 && ct && vl >= 17 && strncasecmp(ct, "text/event-stream", 17) == 0;
    return SITS_OK;
}

/* Feeds received bytes through the stages. */
static sits_status_t feed(parser_t *p, const char *d, size_t n)
{
    while (!p->in_body && n > 0) {
        size_t old = p->head_len;
        size_t k = n < HEAD_MAX - p->head_len ? n : HEAD_MAX - p->head_len;
        if (k == 0) {
            set_err(p->resp, "response header block over %d bytes", HEAD_MAX);
            return SITS_ERR_FORMAT;
        }
        memcpy(p->head + p->head_len, d, k);
        p->head_len += k;
        p->head[p->head_len] = 0;
        /* search from a little before the old end: the CRLF CRLF may straddle reads */
        size_t from = old >= 3 ? old - 3 : 0;
        char *e = strstr(p->head + from, "\r\n\r\n");
        if (!e) {
            d += k;
            n -= k;
            continue;
        }
        size_t hlen = (size_t)(e + 4 - p->head);
        size_t used = hlen - old;   /* bytes of d that belong to the header block */
        SITS_CHECK(parse_head(p, hlen));
        d += used;
        n -= used;
        if (p->resp->status >= 100 && p->resp->status < 200) {   /* interim response: the real one follows */
            p->resp->status = 0;
            p->head_len = 0;
            p->done = 0;
            continue;
        }
        p->in_body = 1;
    }
    if (n > 0 && !p->done && !p->stop) SITS_CHECK(body_bytes(p, d, n));
    return SITS_OK;
}

sits_status_t sits_http_do(const sits_http_url_t *url, const sits_http_req_t *req,
                                 sits_http_resp_t *resp)
{
    memset(resp, 0, sizeof *resp);
    double deadline = req->timeout_s > 0 ? mono_now() + req->timeout_s : 0;
    sits_status_t st;
    parser_t p;
    memset(&p, 0, sizeof p);
    p.req = req;
    p.resp = resp;
    char *head = NULL;
    int fd = -1;
    p.head = malloc(HEAD_MAX + 1);
    if (!p.head) return SITS_ERR_NOMEM;

    size_t cap = 1024 + strlen(url->host) + strlen(url->base) + strlen(req->path) + (req->headers ? strlen(req->headers) : 0);
    head = malloc(cap);
    if (!head) {
        st = SITS_ERR_NOMEM;
        goto out;
    }
    int hl = snprintf(head, cap, "%s %s%s HTTP/1.1\r\nHost: %s:%s\r\nConnection: close\r\nAccept: */*\r\n%s",
                      req->method, url->base, req->path, url->host, url->port, req->headers ? req->headers : "");
    if (req->body)
        hl += snprintf(head + hl, cap - (size_t)hl, "Content-Type: application/json\r\nContent-Length: %zu\r\n",
                       req->body_len);
    hl += snprintf(head + hl, cap - (size_t)hl, "\r\n");

    SITS_CHECK_GOTO(connect_to(url, deadline, resp, &fd), st, out);
    SITS_CHECK_GOTO(send_all(fd, head, (size_t)hl, deadline, resp), st, out);
    if (req->body) SITS_CHECK_GOTO(send_all(fd, req->body, req->body_len, deadline, resp), st, out);

    char buf[16384];
    while (!p.done && !p.stop) {
        ssize_t k = recv(fd, buf, sizeof buf, 0);
        if (k > 0) {
            SITS_CHECK_GOTO(feed(&p, buf, (size_t)k), st, out);
        } else if (k == 0) {
            if (p.in_body && p.mode == BODY_EOF) {
                if (p.ln_len > 0) SITS_CHECK_GOTO(sink(&p, "\n\n", 2), st, out);   /* last line without its newline */
                p.done = 1;
                break;
            }
            set_err(resp, p.in_body ? "connection closed before the end of the body"
                                    : "connection closed before a response");
            st = SITS_ERR_IO;
            goto out;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
            SITS_CHECK_GOTO(wait_fd(fd, POLLIN, deadline, resp, p.in_body ? "reading the body" : "waiting for a response"),
                            st, out);
        } else {
            set_err(resp, "recv: %s", strerror(errno));
            st = SITS_ERR_IO;
            goto out;
        }
    }
    st = SITS_OK;
out:
    if (fd >= 0) close(fd);
    free(head);
    free(p.head);
    free(p.ln);
    free(p.ev);
    return st;
}

void sits_http_resp_free(sits_http_resp_t *resp)
{
    free(resp->body);
    resp->body = NULL;
    resp->body_len = 0;
}
