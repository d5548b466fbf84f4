/* sits_bench.c -- sits-bench, an OpenAI-API load generator for sits-dist (or any OpenAI-compatible
 * server): open-loop Poisson or fixed-rate arrivals (or a closed loop at --rate 0) under a
 * concurrency limit, synthetic or JSONL-dataset prompts, streaming; reports TTFT, TPOT, end-to-end
 * latency (mean, P50/P90/P99), request and token throughput and goodput (share of requests meeting
 * the SLO) per tenant and overall, as a table on stdout and as JSON.
 *
 *   sits-bench --url http://127.0.0.1:8000 --rate 4 --requests 200 --prompt-len uniform:32:256 \
 *       --output-len fixed:64 --slo-ttft-ms 500 --slo-tpot-ms 50 --json out.json
 *   sits-bench --url ... --tenant gold=k-gold:1:300:40 --tenant bronze=k-bronze:3 --rate 20 --duration 30
 *
 * Threads: the main thread schedules arrivals and builds each request body (all randomness comes
 * from one generator seeded by --seed, so the request sequence does not depend on timing); a pool
 * of --concurrency worker threads takes the requests in arrival order, each running one blocking
 * HTTP request at a time (bench/http.c, raw sockets: libcurl is deliberately not a dependency);
 * an optional progress thread redraws one line on stderr. Times are CLOCK_MONOTONIC seconds since
 * the start of the run.
 *
 * Definitions (as vLLM's benchmark_serving): TTFT = first SSE chunk carrying non-empty text minus
 * send time; TPOT = (E2E - TTFT) / (completion_tokens - 1), requests with one token excluded;
 * completion_tokens and prompt_tokens come from the usage chunk (stream_options.include_usage).
 * Latencies are measured from the moment the request is sent; the wait for a free worker (the
 * concurrency limit) is reported separately as the send delay. A request is good when it succeeded
 * and met its tenant's TTFT and TPOT limits (limits of 0 are not checked); goodput share = good /
 * all requests sent, goodput rate = good / duration. Without --stream, TTFT = E2E and TPOT is not
 * measured. Percentiles interpolate linearly between order statistics (numpy's default). */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "util/http_client.h"

#define MAX_TENANTS 16

/* ---- options ---- */

typedef enum { DIST_FIXED, DIST_UNIFORM } dist_kind_t;
typedef struct {
    dist_kind_t kind;
    int a, b;
} dist_t;

typedef struct {
    char name[64];
    char key[256];
    double share;
    double slo_ttft_ms, slo_tpot_ms;   /* < 0: the global --slo-* */
    char auth[300];                    /* "Authorization: Bearer KEY\r\n" or "" */
} tenant_t;

typedef enum { EP_COMPLETIONS, EP_CHAT } endpoint_t;

typedef struct {
    const char *url;
    const char *model;
    tenant_t tenants[MAX_TENANTS];
    int n_tenants;
    double rate;
    int poisson;
    int concurrency;
    long requests;        /* 0: until --duration */
    double duration;      /* 0: until --requests */
    dist_t prompt_len, output_len;
    int prefix_len;       /* shared prefix of every synthetic prompt (tokens or words) */
    int vocab_lo, vocab_hi;
    const char *dataset;
    endpoint_t endpoint;
    int stream;
    int ignore_eos;
    double temperature;
    double slo_ttft_ms, slo_tpot_ms;
    uint64_t seed;
    const char *json;
    int progress;         /* -1 auto (stderr is a TTY), 0 off, 1 on */
    double timeout_s;
    int quiet;
} opts_t;

/* ---- one request ---- */

typedef struct {
    long idx;
    int tenant;
    int max_tokens;
    char *body;                 /* request JSON; freed once sent */
    double t_sched;             /* when it should have been sent */
    double t_send, t_first, t_last, t_end;
    int status;                 /* HTTP status, 0 when none */
    int ok;
    char outcome[32];           /* "ok", "http_429", "transport", "timeout", "stream_error", "incomplete", "bad_response" */
    char err[160];
    int prompt_tokens, completion_tokens;   /* -1 when the server did not say */
    int n_chunks;               /* SSE chunks with text */
    int got_done;
    int stream_error;
} rec_t;

typedef struct {
    opts_t o;
    sits_http_url_t url;
    const char *path;
    char model[256];
    /* dataset */
    json_t **ds;                /* entries (objects), owned */
    size_t n_ds;
    /* shared synthetic prefix */
    int *prefix_ids;
    /* rng (main thread only) */
    uint64_t rng;
    double t0;                  /* monotonic start */
    /* queue: recs[q_head, n_recs) wait for a worker */
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_taken;
    rec_t **recs;
    long n_recs, cap_recs, q_head;
    int dispatch_done;
    long n_done, n_failed, in_flight;
    int stop_progress;
} bench_t;

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "sits-bench: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(2);
}

/* splitmix64 */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double rng_unit(uint64_t *s) { return (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0); }
static int rng_int(uint64_t *s, int lo, int hi) { return lo + (int)(rng_next(s) % (uint64_t)(hi - lo + 1)); }
static int dist_draw(const dist_t *d, uint64_t *s) { return d->kind == DIST_FIXED ? d->a : rng_int(s, d->a, d->b); }

/* ---- argument parsing ---- */

static void usage(FILE *f)
{
    fprintf(f,
"usage: sits-bench --url http://HOST:PORT [options]\n"
"  --url URL              server base URL (default http://127.0.0.1:8000)\n"
"  --model NAME           model id to send (default: the first of GET /v1/models)\n"
"  --api-key KEY          one tenant, Authorization: Bearer KEY\n"
"  --tenant NAME=KEY:SHARE[:TTFT_MS:TPOT_MS]   a tenant of a mix (repeat); SHARE of the requests;\n"
"                         per-tenant SLO limits (default: --slo-ttft-ms/--slo-tpot-ms)\n"
"  --rate R               requests/s (default 1); 0: closed loop, as fast as --concurrency allows\n"
"  --arrival poisson|fixed  inter-arrival times exponential or constant (default poisson)\n"
"  --concurrency N        requests in flight at most (default 256)\n"
"  --requests N           requests to send (default 100 unless --duration)\n"
"  --duration S           stop sending after S seconds (in-flight requests finish)\n"
"  --prompt-len D         synthetic prompt length in tokens: fixed:N | uniform:A:B (default fixed:32)\n"
"  --output-len D         max_tokens: fixed:N | uniform:A:B (default fixed:32)\n"
"  --prefix-len N         a shared prefix of N tokens before every synthetic prompt (default 0)\n"
"  --vocab-range LO:HI    synthetic token ids drawn from [LO, HI) (default 100:3000)\n"
"  --dataset FILE.jsonl   prompts from {\"prompt\": ..., \"max_tokens\": N} or {\"messages\": [...]} lines, in order\n"
"  --endpoint completions|chat  /v1/completions (synthetic prompts: token ids) or /v1/chat/completions\n"
"                         (synthetic prompts: ~N words) (default completions)\n"
"  --stream | --no-stream SSE streaming with include_usage (default on)\n"
"  --ignore-eos | --no-ignore-eos  send ignore_eos so every request generates max_tokens (default on)\n"
"  --temperature T        (default 0: greedy)\n"
"  --slo-ttft-ms MS       goodput: TTFT limit (0: none)\n"
"  --slo-tpot-ms MS       goodput: TPOT limit (0: none)\n"
"  --seed N               (default 0)\n"
"  --timeout S            per request (default 600)\n"
"  --json FILE            write the report (config, per-tenant and overall stats, every request)\n"
"  --progress | --no-progress  one-line progress bar on stderr (default: when stderr is a TTY)\n"
"  --quiet                no table on stdout\n");
}

static int parse_int(const char *s, const char *what, long lo, long hi)
{
    char *e;
    errno = 0;
    long v = strtol(s, &e, 10);
    if (e == s || *e || errno || v < lo || v > hi) die("%s: bad value '%s' (integer %ld..%ld)", what, s, lo, hi);
    return (int)v;
}

static double parse_num(const char *s, const char *what, double lo)
{
    char *e;
    errno = 0;
    double v = strtod(s, &e);
    if (e == s || *e || errno || !(v >= lo)) die("%s: bad value '%s' (number >= %g)", what, s, lo);
    return v;
}

static dist_t parse_dist(const char *s, const char *what)
{
    dist_t d = { DIST_FIXED, 0, 0 };
    char buf[64];
    snprintf(buf, sizeof buf, "%s", s);
    if (strncmp(buf, "fixed:", 6) == 0) {
        d.a = d.b = parse_int(buf + 6, what, 1, 1 << 20);
    } else if (strncmp(buf, "uniform:", 8) == 0) {
        char *c = strchr(buf + 8, ':');
        if (!c) die("%s: expected uniform:A:B, got '%s'", what, s);
        *c = 0;
        d.kind = DIST_UNIFORM;
        d.a = parse_int(buf + 8, what, 1, 1 << 20);
        d.b = parse_int(c + 1, what, d.a, 1 << 20);
    } else {
        d.a = d.b = parse_int(buf, what, 1, 1 << 20);
    }
    return d;
}

static void tenant_set_key(tenant_t *t, const char *key)
{
    snprintf(t->key, sizeof t->key, "%s", key);
    if (*key) snprintf(t->auth, sizeof t->auth, "Authorization: Bearer %s\r\n", key);
    else t->auth[0] = 0;
}

static void parse_tenant(opts_t *o, const char *s)
{
    if (o->n_tenants == MAX_TENANTS) die("--tenant: at most %d tenants", MAX_TENANTS);
    tenant_t *t = &o->tenants[o->n_tenants++];
    memset(t, 0, sizeof *t);
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s);
    char *eq = strchr(buf, '=');
    if (!eq || eq == buf) die("--tenant: expected NAME=KEY:SHARE[:TTFT_MS:TPOT_MS], got '%s'", s);
    *eq = 0;
    snprintf(t->name, sizeof t->name, "%.63s", buf);
    char *f[5] = { eq + 1 };
    int nf = 1;
    for (char *p = eq + 1; *p && nf < 5; p++)
        if (*p == ':') {
            *p = 0;
            f[nf++] = p + 1;
        }
    if (nf != 2 && nf != 4) die("--tenant %s: expected NAME=KEY:SHARE[:TTFT_MS:TPOT_MS]", s);
    tenant_set_key(t, f[0]);
    t->share = parse_num(f[1], "--tenant share", 0);
    t->slo_ttft_ms = nf == 4 ? parse_num(f[2], "--tenant TTFT_MS", 0) : -1;
    t->slo_tpot_ms = nf == 4 ? parse_num(f[3], "--tenant TPOT_MS", 0) : -1;
}

static void parse_args(int argc, char **argv, opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->url = "http://127.0.0.1:8000";
    o->rate = 1;
    o->poisson = 1;
    o->concurrency = 256;
    o->prompt_len = (dist_t){ DIST_FIXED, 32, 32 };
    o->output_len = (dist_t){ DIST_FIXED, 32, 32 };
    o->vocab_lo = 100;
    o->vocab_hi = 3000;
    o->stream = 1;
    o->ignore_eos = 1;
    o->progress = -1;
    o->timeout_s = 600;
    const char *api_key = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        char *inl = NULL, flag[64];
        /* --name=value form */
        if (strncmp(a, "--", 2) == 0 && (inl = strchr(a, '=')) && (size_t)(inl - a) < sizeof flag) {
            memcpy(flag, a, (size_t)(inl - a));
            flag[inl - a] = 0;
            a = flag;
            inl++;
        } else {
            inl = NULL;
        }
#define ARG() (inl ? inl : (i + 1 < argc ? argv[++i] : (die("%s needs a value", a), "")))
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "--url")) o->url = ARG();
        else if (!strcmp(a, "--model")) o->model = ARG();
        else if (!strcmp(a, "--api-key")) api_key = ARG();
        else if (!strcmp(a, "--tenant")) parse_tenant(o, ARG());
        else if (!strcmp(a, "--rate")) o->rate = parse_num(ARG(), "--rate", 0);
        else if (!strcmp(a, "--arrival")) {
            const char *v = ARG();
            if (!strcmp(v, "poisson")) o->poisson = 1;
            else if (!strcmp(v, "fixed")) o->poisson = 0;
            else die("--arrival: poisson or fixed, not '%s'", v);
        } else if (!strcmp(a, "--concurrency")) o->concurrency = parse_int(ARG(), "--concurrency", 1, 4096);
        else if (!strcmp(a, "--requests")) o->requests = parse_int(ARG(), "--requests", 1, 100000000);
        else if (!strcmp(a, "--duration")) o->duration = parse_num(ARG(), "--duration", 0);
        else if (!strcmp(a, "--prompt-len")) o->prompt_len = parse_dist(ARG(), "--prompt-len");
        else if (!strcmp(a, "--output-len")) o->output_len = parse_dist(ARG(), "--output-len");
        else if (!strcmp(a, "--prefix-len")) o->prefix_len = parse_int(ARG(), "--prefix-len", 0, 1 << 20);
        else if (!strcmp(a, "--vocab-range")) {
            const char *v = ARG();
            if (sscanf(v, "%d:%d", &o->vocab_lo, &o->vocab_hi) != 2 || o->vocab_lo < 0 || o->vocab_hi <= o->vocab_lo)
                die("--vocab-range: LO:HI with 0 <= LO < HI, not '%s'", v);
        } else if (!strcmp(a, "--dataset")) o->dataset = ARG();
        else if (!strcmp(a, "--endpoint")) {
            const char *v = ARG();
            if (!strcmp(v, "completions")) o->endpoint = EP_COMPLETIONS;
            else if (!strcmp(v, "chat")) o->endpoint = EP_CHAT;
            else die("--endpoint: completions or chat, not '%s'", v);
        } else if (!strcmp(a, "--stream")) o->stream = 1;
        else if (!strcmp(a, "--no-stream")) o->stream = 0;
        else if (!strcmp(a, "--ignore-eos")) o->ignore_eos = 1;
        else if (!strcmp(a, "--no-ignore-eos")) o->ignore_eos = 0;
        else if (!strcmp(a, "--temperature")) o->temperature = parse_num(ARG(), "--temperature", 0);
        else if (!strcmp(a, "--slo-ttft-ms")) o->slo_ttft_ms = parse_num(ARG(), "--slo-ttft-ms", 0);
        else if (!strcmp(a, "--slo-tpot-ms")) o->slo_tpot_ms = parse_num(ARG(), "--slo-tpot-ms", 0);
        else if (!strcmp(a, "--seed")) o->seed = (uint64_t)parse_int(ARG(), "--seed", 0, 0x7fffffff);
        else if (!strcmp(a, "--timeout")) o->timeout_s = parse_num(ARG(), "--timeout", 0);
        else if (!strcmp(a, "--json")) o->json = ARG();
        else if (!strcmp(a, "--progress")) o->progress = 1;
        else if (!strcmp(a, "--no-progress")) o->progress = 0;
        else if (!strcmp(a, "--quiet")) o->quiet = 1;
        else {
            fprintf(stderr, "sits-bench: unknown argument '%s'\n", argv[i]);
            usage(stderr);
            exit(2);
        }
#undef ARG
    }
    if (api_key && o->n_tenants) die("--api-key and --tenant are exclusive (give each tenant its key)");
    if (!o->n_tenants) {
        tenant_t *t = &o->tenants[o->n_tenants++];
        memset(t, 0, sizeof *t);
        snprintf(t->name, sizeof t->name, "default");
        tenant_set_key(t, api_key ? api_key : "");
        t->share = 1;
        t->slo_ttft_ms = t->slo_tpot_ms = -1;
    }
    double tot = 0;
    for (int i = 0; i < o->n_tenants; i++) {
        tot += o->tenants[i].share;
        if (o->tenants[i].slo_ttft_ms < 0) o->tenants[i].slo_ttft_ms = o->slo_ttft_ms;
        if (o->tenants[i].slo_tpot_ms < 0) o->tenants[i].slo_tpot_ms = o->slo_tpot_ms;
        for (int j = 0; j < i; j++)
            if (!strcmp(o->tenants[i].name, o->tenants[j].name)) die("--tenant: %s given twice", o->tenants[i].name);
    }
    if (!(tot > 0)) die("--tenant: the shares add up to 0");
    if (!o->requests && !o->duration) o->requests = 100;
    if (o->progress < 0) o->progress = isatty(2);
}

/* ---- dataset ---- */

static void load_dataset(bench_t *b)
{
    FILE *f = fopen(b->o.dataset, "r");
    if (!f) die("--dataset %s: %s", b->o.dataset, strerror(errno));
    char *line = NULL;
    size_t cap = 0, cap_ds = 0;
    ssize_t n;
    long lineno = 0;
    while ((n = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ')) line[--n] = 0;
        if (n == 0) continue;
        json_error_t je;
        json_t *e = json_loadb(line, (size_t)n, 0, &je);
        if (!e || !json_is_object(e)) die("%s:%ld: not a JSON object (%s)", b->o.dataset, lineno, je.text);
        json_t *p = json_object_get(e, "prompt"), *m = json_object_get(e, "messages"), *mt = json_object_get(e, "max_tokens");
        if (!p && !m) die("%s:%ld: needs \"prompt\" or \"messages\"", b->o.dataset, lineno);
        if (p && !json_is_string(p) && !json_is_array(p)) die("%s:%ld: \"prompt\" must be a string or token ids", b->o.dataset, lineno);
        if (m && !json_is_array(m)) die("%s:%ld: \"messages\" must be an array", b->o.dataset, lineno);
        if (!p && b->o.endpoint == EP_COMPLETIONS) die("%s:%ld: chat messages need --endpoint chat", b->o.dataset, lineno);
        if (p && !json_is_string(p) && b->o.endpoint == EP_CHAT && !m)
            die("%s:%ld: token-id prompts need --endpoint completions", b->o.dataset, lineno);
        if (mt && (!json_is_integer(mt) || json_integer_value(mt) < 1))
            die("%s:%ld: \"max_tokens\" must be an integer >= 1", b->o.dataset, lineno);
        if (b->n_ds == cap_ds) {
            cap_ds = cap_ds ? 2 * cap_ds : 64;
            b->ds = realloc(b->ds, cap_ds * sizeof *b->ds);
            if (!b->ds) die("out of memory");
        }
        b->ds[b->n_ds++] = e;
    }
    free(line);
    fclose(f);
    if (!b->n_ds) die("--dataset %s: no entries", b->o.dataset);
}

/* ---- request bodies ---- */

static const char *const WORDS[] = {
    "the", "of", "and", "to", "a", "in", "is", "that", "for", "it", "as", "with", "be", "on", "not", "this",
    "by", "are", "or", "from", "an", "which", "can", "if", "value", "function", "list", "object", "return",
    "file", "module", "class", "string", "number", "data", "time", "new", "method", "type", "name", "set",
    "call", "example", "first", "each", "used", "will", "default", "when", "all", "one", "other", "more",
    "line", "code", "argument", "error", "python", "memory", "thread", "server", "request", "model", "token",
};
#define N_WORDS (sizeof WORDS / sizeof WORDS[0])

static json_t *words_text(uint64_t *s, int n)
{
    size_t cap = (size_t)n * 10 + 1, len = 0;
    char *t = malloc(cap);
    if (!t) die("out of memory");
    for (int i = 0; i < n; i++) {
        const char *w = WORDS[rng_next(s) % N_WORDS];
        len += (size_t)snprintf(t + len, cap - len, "%s%s", i ? " " : "", w);
    }
    json_t *j = json_stringn(t, len);
    free(t);
    return j;
}

/* The next request (tenant, max_tokens, body) from the generator. */
static rec_t *make_request(bench_t *b, long idx)
{
    const opts_t *o = &b->o;
    rec_t *r = calloc(1, sizeof *r);
    if (!r) die("out of memory");
    r->idx = idx;
    r->prompt_tokens = r->completion_tokens = -1;
    double tot = 0, u;
    for (int i = 0; i < o->n_tenants; i++) tot += o->tenants[i].share;
    u = rng_unit(&b->rng) * tot;
    r->tenant = o->n_tenants - 1;
    for (int i = 0; i < o->n_tenants; i++) {
        if (u < o->tenants[i].share) {
            r->tenant = i;
            break;
        }
        u -= o->tenants[i].share;
    }
    json_t *req = json_object();
    json_object_set_new(req, "model", json_string(b->model));
    int max_tokens = -1;
    if (b->n_ds) {
        json_t *e = b->ds[idx % (long)b->n_ds];
        json_t *p = json_object_get(e, "prompt"), *m = json_object_get(e, "messages"), *mt = json_object_get(e, "max_tokens");
        if (mt) max_tokens = (int)json_integer_value(mt);
        if (o->endpoint == EP_COMPLETIONS) {
            json_object_set(req, "prompt", p);
        } else if (m) {
            json_object_set(req, "messages", m);
        } else {
            json_object_set_new(req, "messages", json_pack("[{s:s, s:O}]", "role", "user", "content", p));
        }
    } else {
        int n = dist_draw(&o->prompt_len, &b->rng);
        if (o->endpoint == EP_COMPLETIONS) {
            json_t *ids = json_array();
            for (int i = 0; i < o->prefix_len; i++) json_array_append_new(ids, json_integer(b->prefix_ids[i]));
            for (int i = 0; i < n; i++) json_array_append_new(ids, json_integer(rng_int(&b->rng, o->vocab_lo, o->vocab_hi - 1)));
            json_object_set_new(req, "prompt", ids);
        } else {
            json_t *msgs = json_array();
            if (o->prefix_len) {
                uint64_t ps = o->seed ^ 0x5157ull;   /* the same system prompt for every request */
                json_array_append_new(msgs, json_pack("{s:s, s:o}", "role", "system", "content", words_text(&ps, o->prefix_len)));
            }
            json_array_append_new(msgs, json_pack("{s:s, s:o}", "role", "user", "content", words_text(&b->rng, n)));
            json_object_set_new(req, "messages", msgs);
        }
    }
    if (max_tokens < 0) max_tokens = dist_draw(&o->output_len, &b->rng);
    r->max_tokens = max_tokens;
    json_object_set_new(req, "max_tokens", json_integer(max_tokens));
    json_object_set_new(req, "temperature", json_real(o->temperature));
    if (o->ignore_eos) json_object_set_new(req, "ignore_eos", json_true());
    if (o->stream) {
        json_object_set_new(req, "stream", json_true());
        json_object_set_new(req, "stream_options", json_pack("{s:b}", "include_usage", 1));
    }
    r->body = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    if (!r->body) die("out of memory");
    return r;
}

/* ---- running one request ---- */

typedef struct {
    bench_t *b;
    rec_t *r;
} ev_ctx_t;

static void take_usage(rec_t *r, json_t *o)
{
    json_t *u = json_object_get(o, "usage");
    if (!json_is_object(u)) return;
    json_t *pt = json_object_get(u, "prompt_tokens"), *ct = json_object_get(u, "completion_tokens");
    if (json_is_integer(pt)) r->prompt_tokens = (int)json_integer_value(pt);
    if (json_is_integer(ct)) r->completion_tokens = (int)json_integer_value(ct);
}

/* Text of choices[0] (completions: text; chat: delta.content or message.content), or NULL. */
static const char *choice_text(json_t *o, size_t *len_p)
{
    json_t *ch = json_array_get(json_object_get(o, "choices"), 0);
    if (!ch) return NULL;
    json_t *t = json_object_get(ch, "text");
    if (!json_is_string(t)) t = json_object_get(json_object_get(ch, "delta"), "content");
    if (!json_is_string(t)) t = json_object_get(json_object_get(ch, "message"), "content");
    if (!json_is_string(t)) return NULL;
    *len_p = json_string_length(t);
    return json_string_value(t);
}

static int on_event(void *arg, const char *data, size_t len)
{
    ev_ctx_t *c = arg;
    rec_t *r = c->r;
    double t = mono_now() - c->b->t0;
    if (len == 6 && memcmp(data, "[DONE]", 6) == 0) {
        r->got_done = 1;
        return 1;
    }
    json_error_t je;
    json_t *o = json_loadb(data, len, JSON_ALLOW_NUL, &je);
    if (!o) {
        r->stream_error = 1;
        snprintf(r->err, sizeof r->err, "bad SSE data: %.120s", je.text);
        return 1;
    }
    json_t *e = json_object_get(o, "error");
    if (e) {
        r->stream_error = 1;
        const char *m = json_string_value(json_object_get(e, "message"));
        snprintf(r->err, sizeof r->err, "stream error: %s", m ? m : "?");
    } else {
        size_t n = 0;
        const char *txt = choice_text(o, &n);
        if (txt && n > 0) {
            if (!r->n_chunks) r->t_first = t;
            r->t_last = t;
            r->n_chunks++;
        }
        take_usage(r, o);
    }
    json_decref(o);
    return 0;
}

static void run_request(bench_t *b, rec_t *r)
{
    const tenant_t *tn = &b->o.tenants[r->tenant];
    ev_ctx_t ctx = { b, r };
    sits_http_req_t hr = {
        .method = "POST", .path = b->path, .headers = tn->auth, .body = r->body, .body_len = strlen(r->body),
        .timeout_s = b->o.timeout_s, .on_event = b->o.stream ? on_event : NULL, .arg = &ctx,
    };
    sits_http_resp_t resp;
    r->t_send = mono_now() - b->t0;
    sits_status_t st = sits_http_do(&b->url, &hr, &resp);
    r->t_end = mono_now() - b->t0;
    free(r->body);
    r->body = NULL;
    r->status = resp.status;
    if (st != SITS_OK) {
        snprintf(r->outcome, sizeof r->outcome, "%s", st == SITS_ERR_TIMEOUT ? "timeout" : "transport");
        snprintf(r->err, sizeof r->err, "%s", resp.err);
    } else if (resp.status != 200) {
        snprintf(r->outcome, sizeof r->outcome, "http_%d", resp.status);
        json_t *o = resp.body ? json_loads(resp.body, 0, NULL) : NULL;
        const char *m = json_string_value(json_object_get(json_object_get(o, "error"), "message"));
        snprintf(r->err, sizeof r->err, "%s", m ? m : (resp.body ? resp.body : ""));
        json_decref(o);
    } else if (b->o.stream && !resp.sse) {
        snprintf(r->outcome, sizeof r->outcome, "bad_response");
        snprintf(r->err, sizeof r->err, "a streaming request got no event stream");
    } else if (b->o.stream) {
        if (r->stream_error) snprintf(r->outcome, sizeof r->outcome, "stream_error");
        else if (!r->got_done) {
            snprintf(r->outcome, sizeof r->outcome, "incomplete");
            snprintf(r->err, sizeof r->err, "stream ended without [DONE]");
        } else r->ok = 1;
    } else {
        json_error_t je;
        json_t *o = resp.body ? json_loads(resp.body, JSON_ALLOW_NUL, &je) : NULL;
        size_t n = 0;
        if (o && choice_text(o, &n)) {
            take_usage(r, o);
            r->ok = 1;
            r->n_chunks = 1;
            r->t_first = r->t_last = r->t_end;
        } else {
            snprintf(r->outcome, sizeof r->outcome, "bad_response");
            snprintf(r->err, sizeof r->err, "response is not a completion");
        }
        json_decref(o);
    }
    if (r->ok) {
        snprintf(r->outcome, sizeof r->outcome, "ok");
        if (!r->n_chunks) r->t_first = r->t_last = r->t_end;   /* no visible text at all: TTFT = E2E */
    }
    sits_http_resp_free(&resp);
}

static void *worker_main(void *arg)
{
    bench_t *b = arg;
    for (;;) {
        pthread_mutex_lock(&b->mu);
        while (b->q_head == b->n_recs && !b->dispatch_done) pthread_cond_wait(&b->cv_work, &b->mu);
        if (b->q_head == b->n_recs) {
            pthread_mutex_unlock(&b->mu);
            return NULL;
        }
        rec_t *r = b->recs[b->q_head++];
        b->in_flight++;
        pthread_cond_broadcast(&b->cv_taken);
        pthread_mutex_unlock(&b->mu);
        run_request(b, r);
        pthread_mutex_lock(&b->mu);
        b->in_flight--;
        b->n_done++;
        if (!r->ok) b->n_failed++;
        pthread_cond_broadcast(&b->cv_taken);
        pthread_mutex_unlock(&b->mu);
    }
}

/* ---- progress ---- */

static void *progress_main(void *arg)
{
    bench_t *b = arg;
    for (;;) {
        pthread_mutex_lock(&b->mu);
        int stop = b->stop_progress;
        long done = b->n_done, fail = b->n_failed, fl = b->in_flight, sent = b->n_recs;
        pthread_mutex_unlock(&b->mu);
        double el = mono_now() - b->t0, frac;
        if (b->o.requests) frac = (double)done / (double)b->o.requests;
        else frac = el / b->o.duration;
        if (frac > 1) frac = 1;
        char bar[31];
        int w = (int)(frac * 30);
        for (int i = 0; i < 30; i++) bar[i] = i < w ? '=' : (i == w ? '>' : ' ');
        bar[30] = 0;
        fprintf(stderr, "\r[%s] %3.0f%% %ld done (%ld failed), %ld in flight, %ld sent, %.1f s ", bar, 100 * frac, done,
                fail, fl, sent, el);
        if (stop) {
            fprintf(stderr, "\n");
            return NULL;
        }
        struct timespec ts = { 0, 250 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
}

/* ---- statistics ---- */

typedef struct {
    double mean, p50, p90, p99, max;
    long n;
} summary_t;

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(const double *s, long n, double q)
{
    double pos = q * (double)(n - 1);
    long i = (long)floor(pos);
    if (i >= n - 1) return s[n - 1];
    return s[i] + (pos - (double)i) * (s[i + 1] - s[i]);
}

static summary_t summarize(double *v, long n)
{
    summary_t s = { 0 };
    s.n = n;
    if (!n) return s;
    qsort(v, (size_t)n, sizeof *v, cmp_dbl);
    double t = 0;
    for (long i = 0; i < n; i++) t += v[i];
    s.mean = t / (double)n;
    s.p50 = pct(v, n, 0.50);
    s.p90 = pct(v, n, 0.90);
    s.p99 = pct(v, n, 0.99);
    s.max = v[n - 1];
    return s;
}

typedef struct {
    long n, ok, failed, good;
    long prompt_tokens, completion_tokens;
    summary_t ttft, tpot, e2e, delay;
    double req_s, out_tok_s, in_tok_s, good_share, good_s;
    double slo_ttft_ms, slo_tpot_ms;
    char fail_names[8][32];
    long fail_counts[8];
    int n_fail_kinds;
} stats_t;

static double tpot_ms(const rec_t *r)
{
    if (r->completion_tokens < 2 || r->n_chunks < 1) return -1;
    return 1000.0 * (r->t_end - r->t_first) / (double)(r->completion_tokens - 1);
}

static int is_good(const rec_t *r, const tenant_t *t, int stream)
{
    if (!r->ok) return 0;
    if (t->slo_ttft_ms > 0 && 1000.0 * (r->t_first - r->t_send) > t->slo_ttft_ms) return 0;
    double tp = tpot_ms(r);
    if (stream && t->slo_tpot_ms > 0 && tp >= 0 && tp > t->slo_tpot_ms) return 0;
    return 1;
}

/* Stats of tenant `tenant` (-1: all) over recs, with duration dur. */
static stats_t compute(const bench_t *b, int tenant, double dur)
{
    stats_t s;
    memset(&s, 0, sizeof s);
    long n = b->n_recs;
    double *ttft = malloc(sizeof(double) * (size_t)(n + 1)), *tpot = malloc(sizeof(double) * (size_t)(n + 1));
    double *e2e = malloc(sizeof(double) * (size_t)(n + 1)), *delay = malloc(sizeof(double) * (size_t)(n + 1));
    if (!ttft || !tpot || !e2e || !delay) die("out of memory");
    long nt = 0, np = 0, ne = 0, nd = 0;
    for (long i = 0; i < n; i++) {
        const rec_t *r = b->recs[i];
        if (tenant >= 0 && r->tenant != tenant) continue;
        s.n++;
        delay[nd++] = 1000.0 * (r->t_send - r->t_sched);
        if (is_good(r, &b->o.tenants[r->tenant], b->o.stream)) s.good++;
        if (!r->ok) {
            s.failed++;
            int k;
            for (k = 0; k < s.n_fail_kinds; k++)
                if (!strcmp(s.fail_names[k], r->outcome)) break;
            if (k == s.n_fail_kinds && k < 8) snprintf(s.fail_names[s.n_fail_kinds++], 32, "%s", r->outcome);
            if (k < 8) s.fail_counts[k]++;
            continue;
        }
        s.ok++;
        if (r->prompt_tokens > 0) s.prompt_tokens += r->prompt_tokens;
        if (r->completion_tokens > 0) s.completion_tokens += r->completion_tokens;
        e2e[ne++] = 1000.0 * (r->t_end - r->t_send);
        if (b->o.stream) {
            ttft[nt++] = 1000.0 * (r->t_first - r->t_send);
            double tp = tpot_ms(r);
            if (tp >= 0) tpot[np++] = tp;
        }
    }
    s.ttft = summarize(ttft, nt);
    s.tpot = summarize(tpot, np);
    s.e2e = summarize(e2e, ne);
    s.delay = summarize(delay, nd);
    free(ttft);
    free(tpot);
    free(e2e);
    free(delay);
    if (dur > 0) {
        s.req_s = (double)s.ok / dur;
        s.out_tok_s = (double)s.completion_tokens / dur;
        s.in_tok_s = (double)s.prompt_tokens / dur;
        s.good_s = (double)s.good / dur;
    }
    s.good_share = s.n ? (double)s.good / (double)s.n : 0;
    if (tenant >= 0) {
        s.slo_ttft_ms = b->o.tenants[tenant].slo_ttft_ms;
        s.slo_tpot_ms = b->o.tenants[tenant].slo_tpot_ms;
    } else {
        s.slo_ttft_ms = b->o.slo_ttft_ms;
        s.slo_tpot_ms = b->o.slo_tpot_ms;
    }
    return s;
}

static json_t *summary_json(const summary_t *s)
{
    if (!s->n) return json_null();
    return json_pack("{s:I, s:f, s:f, s:f, s:f, s:f}", "n", (json_int_t)s->n, "mean", s->mean, "p50", s->p50, "p90",
                     s->p90, "p99", s->p99, "max", s->max);
}

static json_t *stats_json(const stats_t *s, const char *name, int stream)
{
    json_t *fails = json_object();
    for (int k = 0; k < s->n_fail_kinds; k++) json_object_set_new(fails, s->fail_names[k], json_integer(s->fail_counts[k]));
    json_t *slo = json_pack("{s:f, s:f}", "ttft_ms", s->slo_ttft_ms, "tpot_ms", s->slo_tpot_ms);
    return json_pack("{s:s, s:I, s:I, s:I, s:o, s:I, s:I, s:o, s:o, s:o, s:o, s:f, s:f, s:f, s:{s:o, s:I, s:f, s:f}}",
                     "name", name, "requests", (json_int_t)s->n, "ok", (json_int_t)s->ok, "failed", (json_int_t)s->failed,
                     "failed_by_outcome", fails, "prompt_tokens", (json_int_t)s->prompt_tokens, "completion_tokens",
                     (json_int_t)s->completion_tokens, "ttft_ms", stream ? summary_json(&s->ttft) : json_null(),
                     "tpot_ms", stream ? summary_json(&s->tpot) : json_null(), "e2e_ms", summary_json(&s->e2e),
                     "send_delay_ms", summary_json(&s->delay), "request_throughput", s->req_s, "output_throughput",
                     s->out_tok_s, "input_throughput", s->in_tok_s, "goodput", "slo", slo, "good", (json_int_t)s->good,
                     "share", s->good_share, "rate", s->good_s);
}

static const char *dist_str(const dist_t *d, char *buf, size_t n)
{
    if (d->kind == DIST_FIXED) snprintf(buf, n, "fixed:%d", d->a);
    else snprintf(buf, n, "uniform:%d:%d", d->a, d->b);
    return buf;
}

static int write_json(const bench_t *b, const stats_t *all, const stats_t *per, double dur)
{
    const opts_t *o = &b->o;
    char pl[64], ol[64];
    json_t *tens = json_array(), *cfg_t = json_array(), *reqs = json_array();
    for (int i = 0; i < o->n_tenants; i++) {
        json_array_append_new(tens, stats_json(&per[i], o->tenants[i].name, o->stream));
        json_array_append_new(cfg_t, json_pack("{s:s, s:f, s:f, s:f}", "name", o->tenants[i].name, "share",
                                               o->tenants[i].share, "slo_ttft_ms", o->tenants[i].slo_ttft_ms,
                                               "slo_tpot_ms", o->tenants[i].slo_tpot_ms));
    }
    for (long i = 0; i < b->n_recs; i++) {
        const rec_t *r = b->recs[i];
        json_t *j = json_pack("{s:I, s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:f, s:f}", "index", (json_int_t)r->idx,
                              "tenant", o->tenants[r->tenant].name, "outcome", r->outcome, "status", r->status,
                              "max_tokens", r->max_tokens, "prompt_tokens", r->prompt_tokens, "completion_tokens",
                              r->completion_tokens, "chunks", r->n_chunks, "sched_s", r->t_sched, "send_s", r->t_send,
                              "ttft_ms", 1000.0 * (r->t_first - r->t_send), "e2e_ms", 1000.0 * (r->t_end - r->t_send));
        if (r->err[0]) json_object_set_new(j, "error", json_string(r->err));
        json_array_append_new(reqs, j);
    }
    json_t *root = json_pack(
        "{s:{s:s, s:s, s:s, s:f, s:s, s:i, s:I, s:f, s:s, s:s, s:i, s:s?, s:b, s:b, s:f, s:f, s:f, s:I, s:o},"
        " s:f, s:o, s:o, s:o}",
        "config", "url", o->url, "model", b->model, "endpoint", o->endpoint == EP_CHAT ? "chat" : "completions", "rate",
        o->rate, "arrival", o->rate == 0 ? "closed" : (o->poisson ? "poisson" : "fixed"), "concurrency", o->concurrency,
        "requests", (json_int_t)o->requests, "duration", o->duration, "prompt_len", dist_str(&o->prompt_len, pl, sizeof pl),
        "output_len", dist_str(&o->output_len, ol, sizeof ol), "prefix_len", o->prefix_len, "dataset", o->dataset,
        "stream", o->stream, "ignore_eos", o->ignore_eos, "temperature", o->temperature, "slo_ttft_ms", o->slo_ttft_ms,
        "slo_tpot_ms", o->slo_tpot_ms, "seed", (json_int_t)o->seed, "tenants", cfg_t,
        "duration_s", dur, "overall", stats_json(all, "overall", o->stream), "tenants", tens, "requests", reqs);
    if (!root) {
        fprintf(stderr, "sits-bench: cannot build the JSON report\n");
        return -1;
    }
    int rc = json_dump_file(root, o->json, JSON_INDENT(1));
    json_decref(root);
    if (rc != 0) fprintf(stderr, "sits-bench: cannot write %s\n", o->json);
    return rc;
}

static void cell_summary(char *buf, size_t n, const summary_t *s, int valid)
{
    if (!valid || !s->n) snprintf(buf, n, "-");
    else snprintf(buf, n, "%.1f / %.1f / %.1f / %.1f", s->mean, s->p50, s->p90, s->p99);
}

static void print_table(const bench_t *b, const stats_t *all, const stats_t *per, double dur)
{
    const opts_t *o = &b->o;
    int nc = o->n_tenants > 1 ? o->n_tenants + 1 : 1;
    const stats_t *col[MAX_TENANTS + 1];
    const char *name[MAX_TENANTS + 1];
    col[0] = all;
    name[0] = "overall";
    for (int i = 0; nc > 1 && i < o->n_tenants; i++) {
        col[i + 1] = &per[i];
        name[i + 1] = o->tenants[i].name;
    }
    char pl[64], ol[64];
    printf("sits-bench: %s %s, model %s, %s, rate %g req/s (%s), concurrency %d, prompt %s%s, output %s, %s\n", o->url,
           o->endpoint == EP_CHAT ? "chat" : "completions", b->model, o->stream ? "stream" : "no stream", o->rate,
           o->rate == 0 ? "closed loop" : (o->poisson ? "poisson" : "fixed"), o->concurrency,
           o->dataset ? o->dataset : dist_str(&o->prompt_len, pl, sizeof pl), o->prefix_len ? " + shared prefix" : "",
           dist_str(&o->output_len, ol, sizeof ol), o->ignore_eos ? "ignore_eos" : "eos stops");
    printf("%ld requests in %.2f s\n\n", b->n_recs, dur);
    printf("%-28s", "");
    for (int c = 0; c < nc; c++) printf(" | %-30s", name[c]);
    printf("\n");
    char cell[MAX_TENANTS + 1][96];
#define ROW(label_, ...)                                                   \
    do {                                                                   \
        for (int c = 0; c < nc; c++) {                                     \
            const stats_t *s = col[c];                                     \
            (void)s;                                                       \
            snprintf(cell[c], sizeof cell[c], __VA_ARGS__);                \
        }                                                                  \
        printf("%-28s", label_);                                           \
        for (int c = 0; c < nc; c++) printf(" | %-30s", cell[c]);         \
        printf("\n");                                                      \
    } while (0)
    ROW("requests ok / failed", "%ld / %ld", s->ok, s->failed);
    for (int c = 0; c < nc; c++) {
        const stats_t *s = col[c];
        size_t k = 0;
        cell[c][0] = 0;
        for (int f = 0; f < s->n_fail_kinds; f++)
            k += (size_t)snprintf(cell[c] + k, sizeof cell[c] - k, "%s%s %ld", f ? ", " : "", s->fail_names[f], s->fail_counts[f]);
        if (!s->n_fail_kinds) snprintf(cell[c], sizeof cell[c], "-");
    }
    printf("%-28s", "failures");
    for (int c = 0; c < nc; c++) printf(" | %-30s", cell[c]);
    printf("\n");
    ROW("request throughput (req/s)", "%.3f", s->req_s);
    ROW("output tokens/s", "%.1f", s->out_tok_s);
    ROW("input tokens/s", "%.1f", s->in_tok_s);
    for (int c = 0; c < nc; c++) cell_summary(cell[c], sizeof cell[c], &col[c]->ttft, o->stream);
    printf("%-28s", "TTFT ms mean/p50/p90/p99");
    for (int c = 0; c < nc; c++) printf(" | %-30s", cell[c]);
    printf("\n");
    for (int c = 0; c < nc; c++) cell_summary(cell[c], sizeof cell[c], &col[c]->tpot, o->stream);
    printf("%-28s", "TPOT ms mean/p50/p90/p99");
    for (int c = 0; c < nc; c++) printf(" | %-30s", cell[c]);
    printf("\n");
    for (int c = 0; c < nc; c++) cell_summary(cell[c], sizeof cell[c], &col[c]->e2e, 1);
    printf("%-28s", "E2E ms mean/p50/p90/p99");
    for (int c = 0; c < nc; c++) printf(" | %-30s", cell[c]);
    printf("\n");
    ROW("send delay ms mean / max", "%.1f / %.1f", s->delay.mean, s->delay.max);
    for (int c = 0; c < nc; c++) {
        char a[24] = "-", t[24] = "-";
        if (col[c]->slo_ttft_ms > 0) snprintf(a, sizeof a, "%g", col[c]->slo_ttft_ms);
        if (col[c]->slo_tpot_ms > 0) snprintf(t, sizeof t, "%g", col[c]->slo_tpot_ms);
        snprintf(cell[c], sizeof cell[c], "%s / %s", a, t);
    }
    printf("%-28s", "SLO TTFT / TPOT ms");
    for (int c = 0; c < nc; c++) printf(" | %-30s", cell[c]);
    printf("\n");
    ROW("goodput share / req/s", "%.1f%% / %.3f", 100.0 * s->good_share, s->good_s);
#undef ROW
}

/* ---- main ---- */

static void get_model(bench_t *b)
{
    if (b->o.model) {
        snprintf(b->model, sizeof b->model, "%s", b->o.model);
        return;
    }
    sits_http_req_t hr = { .method = "GET", .path = "/v1/models", .headers = b->o.tenants[0].auth, .timeout_s = 30 };
    sits_http_resp_t resp;
    sits_status_t st = sits_http_do(&b->url, &hr, &resp);
    if (st != SITS_OK) die("GET %s/v1/models: %s", b->o.url, resp.err);
    json_t *o = resp.body ? json_loads(resp.body, 0, NULL) : NULL;
    const char *id = json_string_value(json_object_get(json_array_get(json_object_get(o, "data"), 0), "id"));
    if (resp.status != 200 || !id) die("GET %s/v1/models: status %d, no model id (give --model)", b->o.url, resp.status);
    snprintf(b->model, sizeof b->model, "%s", id);
    json_decref(o);
    sits_http_resp_free(&resp);
}

static void sleep_until(double t_abs)
{
    for (;;) {
        double left = t_abs - mono_now();
        if (left <= 0) return;
        struct timespec ts = { (time_t)left, (long)((left - floor(left)) * 1e9) };
        nanosleep(&ts, NULL);
    }
}

int main(int argc, char **argv)
{
    bench_t b;
    memset(&b, 0, sizeof b);
    parse_args(argc, argv, &b.o);
    const opts_t *o = &b.o;
    char err[256];
    if (sits_http_url_parse(o->url, &b.url, err, sizeof err) != SITS_OK) die("%s", err);
    b.path = o->endpoint == EP_CHAT ? "/v1/chat/completions" : "/v1/completions";
    b.rng = o->seed * 0x2545F4914F6CDD1Dull + 1;
    if (o->dataset) load_dataset(&b);
    if (o->prefix_len) {
        b.prefix_ids = malloc(sizeof(int) * (size_t)o->prefix_len);
        if (!b.prefix_ids) die("out of memory");
        for (int i = 0; i < o->prefix_len; i++) b.prefix_ids[i] = rng_int(&b.rng, o->vocab_lo, o->vocab_hi - 1);
    }
    get_model(&b);
    pthread_mutex_init(&b.mu, NULL);
    pthread_cond_init(&b.cv_work, NULL);
    pthread_cond_init(&b.cv_taken, NULL);

    int nw = o->concurrency;
    if (o->requests && o->requests < nw) nw = (int)o->requests;
    pthread_t *th = calloc((size_t)nw, sizeof *th), prog;
    if (!th) die("out of memory");
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    b.t0 = mono_now();
    for (int i = 0; i < nw; i++)
        if (pthread_create(&th[i], &attr, worker_main, &b) != 0) die("cannot start worker thread %d", i);
    if (o->progress && pthread_create(&prog, NULL, progress_main, &b) != 0) die("cannot start the progress thread");

    /* dispatch: open loop at the arrival times, or (rate 0) closed loop: one request queued at a time */
    double t_next = 0;
    for (long i = 0; !o->requests || i < o->requests; i++) {
        rec_t *r = make_request(&b, i);
        if (o->rate > 0) {
            if (!o->poisson) t_next = (double)i / o->rate;   /* not accumulated: no drift at the end of --duration */
            else if (i > 0) t_next += -log(1.0 - rng_unit(&b.rng)) / o->rate;
            if (o->duration > 0 && t_next >= o->duration) {
                free(r->body);
                free(r);
                break;
            }
            sleep_until(b.t0 + t_next);
        } else {
            pthread_mutex_lock(&b.mu);
            while (b.q_head < b.n_recs) pthread_cond_wait(&b.cv_taken, &b.mu);
            pthread_mutex_unlock(&b.mu);
            if (o->duration > 0 && mono_now() - b.t0 >= o->duration) {
                free(r->body);
                free(r);
                break;
            }
        }
        r->t_sched = o->rate > 0 ? t_next : mono_now() - b.t0;
        pthread_mutex_lock(&b.mu);
        if (b.n_recs == b.cap_recs) {
            long cap = b.cap_recs ? 2 * b.cap_recs : 1024;
            rec_t **p = realloc(b.recs, sizeof *p * (size_t)cap);
            if (!p) die("out of memory");
            b.recs = p;
            b.cap_recs = cap;
        }
        b.recs[b.n_recs++] = r;
        pthread_cond_signal(&b.cv_work);
        pthread_mutex_unlock(&b.mu);
    }
    pthread_mutex_lock(&b.mu);
    b.dispatch_done = 1;
    pthread_cond_broadcast(&b.cv_work);
    pthread_mutex_unlock(&b.mu);
    for (int i = 0; i < nw; i++) pthread_join(th[i], NULL);
    if (o->progress) {
        pthread_mutex_lock(&b.mu);
        b.stop_progress = 1;
        pthread_mutex_unlock(&b.mu);
        pthread_join(prog, NULL);
    }

    double dur = 0;
    for (long i = 0; i < b.n_recs; i++)
        if (b.recs[i]->t_end > dur) dur = b.recs[i]->t_end;
    stats_t all = compute(&b, -1, dur), per[MAX_TENANTS];
    for (int i = 0; i < o->n_tenants; i++) per[i] = compute(&b, i, dur);
    if (!o->quiet) print_table(&b, &all, per, dur);
    int rc = 0;
    if (o->json && write_json(&b, &all, per, dur) != 0) rc = 1;
    for (long i = 0; i < b.n_recs; i++) free(b.recs[i]);
    free(b.recs);
    for (size_t i = 0; i < b.n_ds; i++) json_decref(b.ds[i]);
    free(b.ds);
    free(b.prefix_ids);
    free(th);
    pthread_attr_destroy(&attr);
    return rc;
}
