/* otlp.c -- OTLP/HTTP JSON export of request timelines (see otlp.h).
 *
 * A ring of SITS_OTLP_QUEUE fixed-size records under one mutex; the exporter thread wakes when a
 * batch is full, when the flush interval has passed, or at shutdown, builds one
 * ExportTraceServiceRequest (resourceSpans[1].scopeSpans[1].spans[4 per request]) with jansson and
 * posts it. */
#include "util/otlp.h"

#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "util/http_client.h"
#include "util/log.h"

#define OTLP_POST_TIMEOUT_S 5.0

typedef struct {
    char id[64], tenant[64], reason[16];
    int replica;
    double t[4];   /* queued, first scheduled, first token, finished */
    int prompt, gen, cached, preempt;
} rec_t;

struct sits_otlp {
    sits_http_url_t url;
    char path[600];
    char service[128];
    double flush_s;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    rec_t *ring;                 /* [SITS_OTLP_QUEUE] */
    int head, count;
    int stopping;
    uint64_t rng;                /* splitmix64 state for ids (exporter thread only) */
    sits_otlp_stats_t st;        /* under mu */
};

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void hex_id(uint64_t *rng, char *out, int bytes)
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < bytes; i += 8) {
        uint64_t v = splitmix64(rng);
        if (!v) v = 1;   /* an all-zero id is invalid */
        for (int j = 0; j < 8 && i + j < bytes; j++) {
            out[2 * (i + j)] = digits[(v >> (8 * j + 4)) & 15];
            out[2 * (i + j) + 1] = digits[(v >> (8 * j)) & 15];
        }
    }
    out[2 * bytes] = '\0';
}

static json_t *nanos(double s)
{
    char b[32];
    snprintf(b, sizeof b, "%" PRIu64, (uint64_t)(s * 1e9 + 0.5));
    return json_string(b);
}

static void attr_str(json_t *attrs, const char *k, const char *v)
{
    json_array_append_new(attrs, json_pack("{s:s,s:{s:s}}", "key", k, "value", "stringValue", v));
}

static void attr_int(json_t *attrs, const char *k, long long v)
{
    char b[32];
    snprintf(b, sizeof b, "%lld", v);   /* OTLP/JSON: int64 as a decimal string */
    json_array_append_new(attrs, json_pack("{s:s,s:{s:s}}", "key", k, "value", "intValue", b));
}

static json_t *span(const char *trace, const char *id, const char *parent, const char *name, int kind, double t0, double t1)
{
    json_t *s = json_pack("{s:s,s:s,s:s,s:i,s:o,s:o}", "traceId", trace, "spanId", id, "name", name, "kind", kind,
                          "startTimeUnixNano", nanos(t0), "endTimeUnixNano", nanos(t1));
    if (parent) json_object_set_new(s, "parentSpanId", json_string(parent));
    return s;
}

/* The spans of one request into spans[]. */
static void add_request(sits_otlp_t *o, json_t *spans, const rec_t *r)
{
    char trace[33], root[17], child[17];
    hex_id(&o->rng, trace, 16);
    hex_id(&o->rng, root, 8);
    double end = r->t[3] > 0 ? r->t[3] : r->t[0];
    json_t *s = span(trace, root, NULL, "request", 2 /* SERVER */, r->t[0], end);
    json_t *attrs = json_array();
    attr_str(attrs, "sits.request_id", r->id);
    attr_int(attrs, "sits.replica", r->replica);
    attr_str(attrs, "sits.tenant", r->tenant);
    attr_int(attrs, "sits.prompt_tokens", r->prompt);
    attr_int(attrs, "sits.generated_tokens", r->gen);
    attr_int(attrs, "sits.prefix_cached_tokens", r->cached);
    attr_int(attrs, "sits.preemptions", r->preempt);
    attr_str(attrs, "sits.finish_reason", r->reason);
    json_object_set_new(s, "attributes", attrs);
    if (!strcmp(r->reason, "error")) json_object_set_new(s, "status", json_pack("{s:i}", "code", 2));
    json_array_append_new(spans, s);
    static const char *const names[] = { "queue", "prefill", "decode" };
    for (int k = 0; k < 3; k++) {
        double t0 = r->t[k], t1 = r->t[k + 1];
        if (t0 <= 0 || t1 <= 0) continue;
        hex_id(&o->rng, child, 8);
        json_array_append_new(spans, span(trace, child, root, names[k], 1 /* INTERNAL */, t0, t1));
    }
}

static void post_batch(sits_otlp_t *o, const rec_t *recs, int n)
{
    json_t *spans = json_array();
    for (int i = 0; i < n; i++) add_request(o, spans, &recs[i]);
    json_t *res_attrs = json_array();
    attr_str(res_attrs, "service.name", o->service);
    json_t *body = json_pack("{s:[{s:{s:o},s:[{s:{s:s},s:o}]}]}", "resourceSpans", "resource", "attributes", res_attrs,
                             "scopeSpans", "scope", "name", "sits-dist", "spans", spans);
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    int ok = 0;
    char why[200] = "out of memory";
    if (text) {
        sits_http_req_t req = { .method = "POST", .path = o->path, .body = text, .body_len = strlen(text),
                                .timeout_s = OTLP_POST_TIMEOUT_S };
        sits_http_resp_t resp;
        sits_status_t st = sits_http_do(&o->url, &req, &resp);
        if (st == SITS_OK && resp.status >= 200 && resp.status < 300) ok = 1;
        else if (st == SITS_OK) snprintf(why, sizeof why, "HTTP %d", resp.status);
        else snprintf(why, sizeof why, "%s", resp.err[0] ? resp.err : sits_status_str(st));
        sits_http_resp_free(&resp);
        free(text);
    }
    pthread_mutex_lock(&o->mu);
    uint64_t failed = o->st.posts_failed;
    if (ok) o->st.requests_exported += (uint64_t)n;
    else {
        o->st.requests_dropped += (uint64_t)n;
        o->st.posts_failed++;
    }
    pthread_mutex_unlock(&o->mu);
    if (!ok && failed % 100 == 0)
        SITS_WARN(SITS_SUB_HTTP, "otlp: export to http://%s:%s%s failed (%s): %d request%s dropped (failure %" PRIu64 ")",
                  o->url.host, o->url.port, o->path, why, n, n == 1 ? "" : "s", failed + 1);
}

static void *exporter(void *arg)
{
    sits_otlp_t *o = arg;
    rec_t *batch = malloc(sizeof(rec_t) * SITS_OTLP_BATCH);
    if (!batch) return NULL;
    pthread_mutex_lock(&o->mu);
    for (;;) {
        if (o->count < SITS_OTLP_BATCH && !o->stopping) {
            struct timespec dl;
            clock_gettime(CLOCK_REALTIME, &dl);
            double t = dl.tv_sec + dl.tv_nsec * 1e-9 + o->flush_s;
            dl.tv_sec = (time_t)t;
            dl.tv_nsec = (long)((t - (double)dl.tv_sec) * 1e9);
            while (o->count < SITS_OTLP_BATCH && !o->stopping)
                if (pthread_cond_timedwait(&o->cv, &o->mu, &dl) != 0) break;
        }
        if (o->count == 0) {
            if (o->stopping) break;
            continue;
        }
        int n = o->count < SITS_OTLP_BATCH ? o->count : SITS_OTLP_BATCH;
        for (int i = 0; i < n; i++) batch[i] = o->ring[(o->head + i) % SITS_OTLP_QUEUE];
        o->head = (o->head + n) % SITS_OTLP_QUEUE;
        o->count -= n;
        pthread_mutex_unlock(&o->mu);
        post_batch(o, batch, n);
        pthread_mutex_lock(&o->mu);
    }
    pthread_mutex_unlock(&o->mu);
    free(batch);
    return NULL;
}

sits_status_t sits_otlp_create(const char *endpoint, const char *service_name, double flush_s, sits_otlp_t **o_p)
{
    *o_p = NULL;
    sits_otlp_t *o = calloc(1, sizeof *o);
    if (!o) return SITS_ERR_NOMEM;
    char err[200];
    sits_status_t st = sits_http_url_parse(endpoint, &o->url, err, sizeof err);
    if (st != SITS_OK) {
        SITS_ERROR(SITS_SUB_INIT, "--otlp-endpoint %s: %s", endpoint, err);
        free(o);
        return st;
    }
    size_t bl = strlen(o->url.base);
    const char *suffix = "/v1/traces";
    if (bl >= strlen(suffix) && !strcmp(o->url.base + bl - strlen(suffix), suffix)) suffix = "";
    /* the client appends path to base */
    snprintf(o->path, sizeof o->path, "%s", suffix[0] ? suffix : "");
    snprintf(o->service, sizeof o->service, "%s", service_name ? service_name : "sits-dist");
    o->flush_s = flush_s > 0 ? flush_s : 1.0;
    o->ring = calloc(SITS_OTLP_QUEUE, sizeof(rec_t));
    uint64_t seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        uint64_t r;
        if (read(fd, &r, sizeof r) == (ssize_t)sizeof r) seed ^= r;
        close(fd);
    }
    o->rng = seed;
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->cv, NULL);
    if (!o->ring || pthread_create(&o->thread, NULL, exporter, o) != 0) {
        pthread_mutex_destroy(&o->mu);
        pthread_cond_destroy(&o->cv);
        free(o->ring);
        free(o);
        return SITS_ERR_NOMEM;
    }
    SITS_INFO(SITS_SUB_INIT, "otlp: exporting request traces to http://%s:%s%s%s every %.2f s", o->url.host, o->url.port,
              o->url.base, o->path, o->flush_s);
    *o_p = o;
    return SITS_OK;
}

void sits_otlp_destroy(sits_otlp_t *o)
{
    if (!o) return;
    pthread_mutex_lock(&o->mu);
    o->stopping = 1;
    pthread_cond_signal(&o->cv);
    pthread_mutex_unlock(&o->mu);
    pthread_join(o->thread, NULL);
    pthread_mutex_destroy(&o->mu);
    pthread_cond_destroy(&o->cv);
    free(o->ring);
    free(o);
}

void sits_otlp_request(sits_otlp_t *o, const sits_otlp_request_t *r)
{
    if (!o) return;
    pthread_mutex_lock(&o->mu);
    if (o->count == SITS_OTLP_QUEUE) {
        o->st.requests_dropped++;
        pthread_mutex_unlock(&o->mu);
        return;
    }
    rec_t *q = &o->ring[(o->head + o->count) % SITS_OTLP_QUEUE];
    snprintf(q->id, sizeof q->id, "%s", r->request_id ? r->request_id : "");
    snprintf(q->tenant, sizeof q->tenant, "%s", r->tenant ? r->tenant : "default");
    snprintf(q->reason, sizeof q->reason, "%s", r->finish_reason ? r->finish_reason : "none");
    q->replica = r->replica;
    q->t[0] = r->queued;
    q->t[1] = r->first_scheduled;
    q->t[2] = r->first_token;
    q->t[3] = r->finished;
    q->prompt = r->prompt_tokens;
    q->gen = r->generated_tokens;
    q->cached = r->prefix_cached_tokens;
    q->preempt = r->preemptions;
    o->count++;
    if (o->count >= SITS_OTLP_BATCH) pthread_cond_signal(&o->cv);
    pthread_mutex_unlock(&o->mu);
}

void sits_otlp_get_stats(sits_otlp_t *o, sits_otlp_stats_t *st_p)
{
    memset(st_p, 0, sizeof *st_p);
    if (!o) return;
    pthread_mutex_lock(&o->mu);
    *st_p = o->st;
    pthread_mutex_unlock(&o->mu);
}
