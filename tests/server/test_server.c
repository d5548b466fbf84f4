/* test_server.c -- the OpenAI HTTP front-end end to end over loopback, against a fake scheduler
 * (tests/server/fake_sched.c) and the byte-level fixture tokenizer (tests/fixtures/tokenizers/bytelevel).
 *
 * References are independent of the server: prompt ids and decoded texts come from HF tokenizers
 * (bytelevel/cases.json), the rendered chat prompt from transformers' apply_chat_template
 * (chat/cases.json), echo outputs are the prompt strings themselves, stop-string results are cut
 * from the prompt strings by hand, and the scheduler-side metrics are the fake's fixed numbers.
 * Covered: /health, /v1/models, completions and chat (JSON and SSE, exact shapes, include_usage),
 * UTF-8 safe streaming, stop strings (within and across tokens, held-back prefixes), parameter
 * pass-through, a table of bad requests, 401/404/405/413/429/500/503, parallel streams, client
 * disconnects (cancel + release), /metrics, draining, and destroy with an open stream.
 * Needs: top_srcdir in the environment (make check sets it) or the source dir as argv[1]. */
#include "fake_sched.h"
#include "http_client.h"
#include "server/server.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int failures;

#define CHECK(c_, ...) do { if (!(c_)) { failures++; fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); } } while (0)

typedef struct {
    int port;
    const char *auth;      /* extra header lines sent with every request, or NULL */
    int n_status[600];     /* responses seen, by status */
} client_t;

static const char *MODEL = "tiny-llama";
enum { MAX_LEN = 512 };

static int call(client_t *c, const char *method, const char *path, const char *body, http_resp_t *r)
{
    int rc = http_request(c->port, method, path, c->auth, body, body ? strlen(body) : 0, r);
    if (rc == 0 && r->status > 0 && r->status < 600) c->n_status[r->status]++;
    if (rc != 0) {
        memset(r, 0, sizeof *r);
        fprintf(stderr, "FAIL: no response to %s %s\n", method, path);
        failures++;
    }
    return rc;
}

static json_t *parse(const char *s)
{
    json_error_t e;
    return s ? json_loads(s, 0, &e) : NULL;
}

/* The object has exactly these keys (NULL-terminated list). */
static int keys_are(json_t *o, const char *const *keys)
{
    if (!json_is_object(o)) return 0;
    size_t n = 0;
    for (; keys[n]; n++)
        if (!json_object_get(o, keys[n])) return 0;
    return json_object_size(o) == n;
}

static const char *jstr(json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

static long long jint(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_integer(v) ? (long long)json_integer_value(v) : -999999;
}

/* An OpenAI error body: {"error": {"message": str, "type": str, "param": str|null, "code": str|null}}. */
static void check_error(const http_resp_t *r, int status, const char *code, const char *what)
{
    CHECK(r->status == status, "%s: status %d, want %d (body %s)", what, r->status, status, r->body ? r->body : "");
    json_t *o = parse(r->body);
    static const char *const top[] = { "error", NULL };
    static const char *const ek[] = { "message", "type", "param", "code", NULL };
    json_t *e = json_object_get(o, "error");
    CHECK(keys_are(o, top) && keys_are(e, ek), "%s: not an OpenAI error body: %s", what, r->body ? r->body : "");
    if (e) {
        CHECK(jstr(e, "message") && jstr(e, "message")[0] && jstr(e, "type"), "%s: message/type missing", what);
        json_t *p = json_object_get(e, "param"), *cd = json_object_get(e, "code");
        CHECK(json_is_string(p) || json_is_null(p), "%s: param not string/null", what);
        CHECK(json_is_string(cd) || json_is_null(cd), "%s: code not string/null", what);
        if (code) CHECK(jstr(e, "code") && strcmp(jstr(e, "code"), code) == 0, "%s: code %s, want %s", what,
                        jstr(e, "code") ? jstr(e, "code") : "null", code);
    }
    json_decref(o);
}

/* SSE events of a body: the payloads after "data: ". Returns the count (<= max), -1 on a bad frame. */
static int sse_split(const char *body, char **ev, int max)
{
    int n = 0;
    const char *p = body;
    while (*p) {
        const char *end = strstr(p, "\n\n");
        if (!end || strncmp(p, "data: ", 6) != 0 || n == max) return -1;
        ev[n++] = strndup(p + 6, (size_t)(end - p - 6));
        p = end + 2;
    }
    return n;
}

static void sse_free(char **ev, int n)
{
    for (int i = 0; i < n; i++) free(ev[i]);
}

/* A JSON string literal of s (for building request bodies). */
static char *jquote(const char *s)
{
    json_t *j = json_string(s);
    char *q = json_dumps(j, JSON_ENCODE_ANY);
    json_decref(j);
    return q;
}

static char *ids_json(const int32_t *ids, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    char *s = json_dumps(a, JSON_COMPACT);
    json_decref(a);
    return s;
}

static int json_ids(json_t *a, int32_t *ids, int cap)
{
    int n = 0;
    for (size_t i = 0; i < json_array_size(a) && n < cap; i++) ids[n++] = (int32_t)json_integer_value(json_array_get(a, i));
    return n;
}

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* ---------------- fixtures ---------------- */

typedef struct {
    char text[256];           /* a text with 4-byte UTF-8 characters split across byte tokens */
    int32_t ids[64], ids_bos[65], cut_ids[64];
    int n_ids, n_ids_bos, n_cut;
    char cut_decoded[256];
    json_t *chat_msgs;        /* a llama3 conversation and its transformers rendering */
    char chat_expected[2048];
} fixtures_t;

static int load_fixtures(const char *srcdir, const sits_tokenizer_t *tok, fixtures_t *fx)
{
    char path[1024];
    json_error_t e;
    snprintf(path, sizeof path, "%s/tests/fixtures/tokenizers/bytelevel/cases.json", srcdir);
    json_t *cases = json_load_file(path, JSON_ALLOW_NUL, &e);
    if (!cases) {
        fprintf(stderr, "cannot read %s: %s\n", path, e.text);
        return -1;
    }
    int found = 0;
    for (size_t i = 0; i < json_array_size(cases) && !found; i++) {
        json_t *c = json_array_get(cases, i);
        const char *t = jstr(c, "text");
        size_t n = json_array_size(json_object_get(c, "ids"));
        if (!t || strlen(t) >= sizeof fx->text || n < 8 || n > 60 || !strstr(t, "\xf0\x9f") ||
            strcmp(t, jstr(c, "decoded_skip")) != 0 || json_array_size(json_object_get(c, "cut_ids")) < 4)
            continue;
        strcpy(fx->text, t);
        fx->n_ids = json_ids(json_object_get(c, "ids"), fx->ids, 64);
        fx->n_ids_bos = json_ids(json_object_get(c, "ids_bos"), fx->ids_bos, 65);
        fx->n_cut = json_ids(json_object_get(c, "cut_ids"), fx->cut_ids, 64);
        snprintf(fx->cut_decoded, sizeof fx->cut_decoded, "%s", jstr(c, "cut_decoded"));
        found = 1;
    }
    json_decref(cases);
    if (!found) {
        fprintf(stderr, "no suitable case in %s\n", path);
        return -1;
    }
    snprintf(path, sizeof path, "%s/tests/fixtures/tokenizers/chat/cases.json", srcdir);
    cases = json_load_file(path, 0, &e);
    if (!cases) {
        fprintf(stderr, "cannot read %s: %s\n", path, e.text);
        return -1;
    }
    /* the fixture's own chat_template (tokenizer_config.json), to find transformers' renders of it */
    snprintf(path, sizeof path, "%s/tests/fixtures/tokenizers/bytelevel/tokenizer_config.json", srcdir);
    json_t *tcfg = json_load_file(path, 0, &e);
    const char *tmpl = tcfg ? jstr(tcfg, "chat_template") : NULL;
    found = 0;
    for (size_t i = 0; i < json_array_size(cases) && !found; i++) {
        json_t *c = json_array_get(cases, i);
        json_t *msgs = json_object_get(c, "messages");
        if (!tmpl || !jstr(c, "template") || strcmp(jstr(c, "template"), tmpl) != 0 ||
            !json_is_true(json_object_get(c, "add_generation_prompt")) || json_is_true(json_object_get(c, "error")) ||
            json_array_size(msgs) < 2 || strlen(jstr(c, "expected")) >= 400)
            continue;
        fx->chat_msgs = json_incref(msgs);
        strcpy(fx->chat_expected, jstr(c, "expected"));
        found = 1;
    }
    json_decref(cases);
    json_decref(tcfg);
    if (!found) {
        fprintf(stderr, "no llama3 conversation with add_generation_prompt in %s\n", path);
        return -1;
    }
    return 0;
}

/* ---------------- tests ---------------- */

static void test_health_models(client_t *c)
{
    http_resp_t r;
    if (call(c, "GET", "/health", NULL, &r) == 0) {
        CHECK(r.status == 200 && strstr(r.body, "\"ok\""), "/health: %d %s", r.status, r.body);
        http_resp_free(&r);
    }
    if (call(c, "GET", "/v1/models", NULL, &r) == 0) {
        json_t *o = parse(r.body);
        json_t *m = json_array_get(json_object_get(o, "data"), 0);
        CHECK(r.status == 200 && jstr(o, "object") && strcmp(jstr(o, "object"), "list") == 0 &&
              json_array_size(json_object_get(o, "data")) == 1 && jstr(m, "id") && strcmp(jstr(m, "id"), MODEL) == 0 &&
              strcmp(jstr(m, "object"), "model") == 0 && jint(m, "created") > 0 && jstr(m, "owned_by"),
              "/v1/models: %d %s", r.status, r.body);
        json_decref(o);
        http_resp_free(&r);
    }
    if (call(c, "GET", "/v1/models/tiny-llama", NULL, &r) == 0) {
        json_t *o = parse(r.body);
        CHECK(r.status == 200 && jstr(o, "id") && strcmp(jstr(o, "id"), MODEL) == 0, "/v1/models/id: %s", r.body);
        json_decref(o);
        http_resp_free(&r);
    }
    if (call(c, "GET", "/v1/models/other", NULL, &r) == 0) {
        check_error(&r, 404, "model_not_found", "/v1/models/other");
        http_resp_free(&r);
    }
}

/* Non-streaming completion; returns the parsed body (caller decrefs) after the shape checks. */
static json_t *completion(client_t *c, const char *body, const char *what)
{
    http_resp_t r;
    if (call(c, "POST", "/v1/completions", body, &r) != 0) return NULL;
    CHECK(r.status == 200, "%s: status %d %s", what, r.status, r.body);
    json_t *o = parse(r.body);
    static const char *const top[] = { "id", "object", "created", "model", "choices", "usage", NULL };
    static const char *const ch[] = { "index", "text", "logprobs", "finish_reason", "stop_reason", NULL };   /* + vLLM's */
    static const char *const us[] = { "prompt_tokens", "completion_tokens", "total_tokens", NULL };
    json_t *c0 = json_array_get(json_object_get(o, "choices"), 0);
    json_t *u = json_object_get(o, "usage");
    CHECK(keys_are(o, top) && json_array_size(json_object_get(o, "choices")) == 1 && keys_are(c0, ch) &&
          keys_are(u, us), "%s: shape: %s", what, r.body);
    CHECK(jstr(o, "id") && strncmp(jstr(o, "id"), "cmpl-", 5) == 0 && strcmp(jstr(o, "object"), "text_completion") == 0 &&
          strcmp(jstr(o, "model"), MODEL) == 0 && jint(o, "created") > 1600000000 && jint(c0, "index") == 0 &&
          json_is_null(json_object_get(c0, "logprobs")) &&
          jint(u, "total_tokens") == jint(u, "prompt_tokens") + jint(u, "completion_tokens"),
          "%s: values: %s", what, r.body);
    http_resp_free(&r);
    return o;
}

static void test_completions(client_t *c, fake_sched_t *f, const fixtures_t *fx, const sits_tokenizer_t *tok)
{
    char body[4096];
    char *q = jquote(fx->text);
    /* echo of a text prompt: the server sends BOS + HF ids; the text comes back; eos ends it */
    snprintf(body, sizeof body, "{\"model\":\"%s\",\"prompt\":%s,\"max_tokens\":100,\"temperature\":0}", MODEL, q);
    json_t *o = completion(c, body, "echo");
    if (o) {
        json_t *c0 = json_array_get(json_object_get(o, "choices"), 0), *u = json_object_get(o, "usage");
        CHECK(jstr(c0, "text") && strcmp(jstr(c0, "text"), fx->text) == 0, "echo text '%s', want '%s'",
              jstr(c0, "text"), fx->text);
        CHECK(jstr(c0, "finish_reason") && strcmp(jstr(c0, "finish_reason"), "stop") == 0, "echo finish");
        CHECK(jint(u, "prompt_tokens") == fx->n_ids_bos && jint(u, "completion_tokens") == fx->n_ids + 1,
              "echo usage %lld/%lld, want %d/%d", jint(u, "prompt_tokens"), jint(u, "completion_tokens"),
              fx->n_ids_bos, fx->n_ids + 1);
        int same = f->last_n_prompt == fx->n_ids_bos;
        for (int i = 0; same && i < fx->n_ids_bos; i++) same = f->last_prompt[i] == fx->ids_bos[i];
        CHECK(same, "prompt ids given to the scheduler differ from HF's ids_bos (n %d vs %d)", f->last_n_prompt,
              fx->n_ids_bos);
        CHECK(f->last_max_tokens == 100 && f->last_sample.temperature == 0.0f, "params: max_tokens %d temp %g",
              f->last_max_tokens, f->last_sample.temperature);
        const int32_t *stop_ids;
        size_t n_stop = sits_tokenizer_stop_ids(tok, &stop_ids);
        int ok = f->last_n_stop_ids == (int)n_stop && !f->last_ignore_eos;
        for (size_t i = 0; ok && i < n_stop; i++) ok = f->last_stop_ids[i] == stop_ids[i];
        CHECK(ok && n_stop == 2, "stop ids not passed to the scheduler (%d given)", f->last_n_stop_ids);
        json_decref(o);
    }
    /* token-id prompt cut by max_tokens: HF's decode of the cut ids (a split emoji becomes U+FFFD) */
    char *ids = ids_json(fx->cut_ids, fx->n_cut);
    snprintf(body, sizeof body,
             "{\"prompt\":%s,\"max_tokens\":%d,\"seed\":42,\"top_p\":0.5,\"top_k\":7,\"temperature\":0.7,"
             "\"user\":\"u1\",\"n\":1,\"stop\":null,\"ignore_eos\":true}", ids, fx->n_cut);
    o = completion(c, body, "ids prompt");
    if (o) {
        json_t *c0 = json_array_get(json_object_get(o, "choices"), 0), *u = json_object_get(o, "usage");
        CHECK(jstr(c0, "text") && strcmp(jstr(c0, "text"), fx->cut_decoded) == 0, "ids text '%s', want '%s'",
              jstr(c0, "text"), fx->cut_decoded);
        CHECK(strcmp(jstr(c0, "finish_reason"), "length") == 0, "ids finish %s", jstr(c0, "finish_reason"));
        CHECK(jint(u, "prompt_tokens") == fx->n_cut && jint(u, "completion_tokens") == fx->n_cut, "ids usage");
        CHECK(f->last_sample.seed == 42 && fabsf(f->last_sample.top_p - 0.5f) < 1e-6f && f->last_sample.top_k == 7 &&
              fabsf(f->last_sample.temperature - 0.7f) < 1e-6f && f->last_ignore_eos == 1 && f->last_n_stop_ids == 0,
              "sampling params not passed: seed %llu top_p %g top_k %d temp %g ignore_eos %d",
              (unsigned long long)f->last_sample.seed, f->last_sample.top_p, f->last_sample.top_k,
              f->last_sample.temperature, f->last_ignore_eos);
        json_decref(o);
    }
    free(ids);
    /* defaults: max_tokens 16 (OpenAI), a fresh seed per request when none is given */
    o = completion(c, "{\"prompt\":\"one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
                   "seventeen eighteen\"}",
                   "defaults");
    uint64_t seed1 = f->last_sample.seed;
    CHECK(f->last_max_tokens == 16, "default max_tokens %d, want 16", f->last_max_tokens);
    if (o) {
        json_t *c0 = json_array_get(json_object_get(o, "choices"), 0);
        CHECK(strcmp(jstr(c0, "finish_reason"), "length") == 0 && jint(json_object_get(o, "usage"), "completion_tokens") == 16,
              "default max_tokens: %s", jstr(c0, "finish_reason"));
        json_decref(o);
    }
    o = completion(c, "{\"prompt\":[\"batch of one\"]}", "batch of one");
    if (o) {
        CHECK(strcmp(jstr(json_array_get(json_object_get(o, "choices"), 0), "text"), "batch of one") == 0, "batch of one");
        json_decref(o);
    }
    CHECK(f->last_sample.seed != seed1, "requests without a seed got the same seed %llu", (unsigned long long)seed1);
    free(q);
}

/* Streams a request; checks every event; returns the concatenated text and the finish reason. */
static void stream(client_t *c, const char *path, const char *body, int chat, int want_usage, char *text, size_t cap,
                   char *finish, int *n_prompt_p, int *n_gen_p, const char *what)
{
    http_resp_t r;
    text[0] = finish[0] = 0;
    if (call(c, "POST", path, body, &r) != 0) return;
    char ctype[128] = "";
    http_header(&r, "Content-Type", ctype, sizeof ctype);
    CHECK(r.status == 200 && strncmp(ctype, "text/event-stream", 17) == 0, "%s: %d %s", what, r.status, ctype);
    char *ev[512];
    int n = sse_split(r.body, ev, 512);
    CHECK(n >= 2 && strcmp(ev[n - 1], "[DONE]") == 0, "%s: bad SSE framing or no [DONE]: %s", what, r.body);
    int n_usage = 0, n_fin = 0, saw_role = 0;
    size_t tl = 0;
    for (int i = 0; i < n - 1; i++) {
        json_t *o = parse(ev[i]);
        CHECK(o != NULL, "%s: event %d is not JSON: %s", what, i, ev[i]);
        if (!o) continue;
        CHECK(jstr(o, "id") && strncmp(jstr(o, "id"), chat ? "chatcmpl-" : "cmpl-", chat ? 9 : 5) == 0 &&
              strcmp(jstr(o, "object"), chat ? "chat.completion.chunk" : "text_completion") == 0 &&
              strcmp(jstr(o, "model"), MODEL) == 0 && jint(o, "created") > 0, "%s: event %d header: %s", what, i, ev[i]);
        json_t *choices = json_object_get(o, "choices");
        json_t *u = json_object_get(o, "usage");
        if (json_array_size(choices) == 0) {   /* the usage chunk */
            CHECK(want_usage && i == n - 2 && json_is_array(choices) && json_is_object(u), "%s: stray usage chunk", what);
            n_usage++;
            *n_prompt_p = (int)jint(u, "prompt_tokens");
            *n_gen_p = (int)jint(u, "completion_tokens");
            CHECK(jint(u, "total_tokens") == *n_prompt_p + *n_gen_p, "%s: total_tokens", what);
            json_decref(o);
            continue;
        }
        CHECK(want_usage ? (u && json_is_null(u)) : !u, "%s: event %d usage key wrong: %s", what, i, ev[i]);
        json_t *c0 = json_array_get(choices, 0);
        json_t *fr = json_object_get(c0, "finish_reason");
        CHECK(json_array_size(choices) == 1 && jint(c0, "index") == 0 && (json_is_null(fr) || json_is_string(fr)) &&
              json_object_get(c0, "logprobs") && json_is_null(json_object_get(c0, "logprobs")),
              "%s: event %d choice: %s", what, i, ev[i]);
        const char *piece;
        if (chat) {
            json_t *d = json_object_get(c0, "delta");
            static const char *const first[] = { "role", "content", NULL }, *const mid[] = { "content", NULL },
                                     *const none[] = { NULL };
            if (i == 0) {
                CHECK(keys_are(d, first) && strcmp(jstr(d, "role"), "assistant") == 0 && json_is_null(fr),
                      "%s: first chat chunk: %s", what, ev[i]);
                saw_role = 1;
            } else if (json_is_string(fr)) {
                CHECK(keys_are(d, none), "%s: final chat chunk delta not empty: %s", what, ev[i]);
            } else {
                CHECK(keys_are(d, mid) && jstr(d, "content")[0], "%s: content chunk: %s", what, ev[i]);
            }
            piece = jstr(d, "content");
        } else {
            static const char *const ck[] = { "index", "text", "logprobs", "finish_reason", NULL };
            static const char *const ckf[] = { "index", "text", "logprobs", "finish_reason", "stop_reason", NULL };   /* the last */
            CHECK(keys_are(c0, json_is_string(fr) ? ckf : ck), "%s: completion chunk keys: %s", what, ev[i]);
            piece = jstr(c0, "text");
            CHECK(json_is_string(fr) || (piece && piece[0]), "%s: empty text chunk", what);
        }
        if (piece) {
            CHECK(sits_utf8_valid(piece, strlen(piece), NULL), "%s: chunk %d is not valid UTF-8", what, i);
            size_t pl = strlen(piece);
            if (tl + pl < cap) {
                memcpy(text + tl, piece, pl);
                tl += pl;
                text[tl] = 0;
            }
        }
        if (json_is_string(fr)) {
            n_fin++;
            snprintf(finish, 32, "%s", json_string_value(fr));
            CHECK(i == n - 2 - (want_usage ? 1 : 0), "%s: finish chunk %d is not the last", what, i);
        }
        json_decref(o);
    }
    CHECK(n_fin == 1 && n_usage == (want_usage ? 1 : 0) && (!chat || saw_role), "%s: %d finish / %d usage chunks", what,
          n_fin, n_usage);
    sse_free(ev, n > 0 ? n : 0);
    http_resp_free(&r);
}

static void test_streaming(client_t *c, fake_sched_t *f, const fixtures_t *fx, const sits_tokenizer_t *tok)
{
    char body[4096], text[4096], finish[32];
    int np = -1, ng = -1;
    char *q = jquote(fx->text);
    /* completions, one token per next(): emoji split over byte tokens must never reach a chunk broken */
    snprintf(body, sizeof body, "{\"prompt\":%s,\"max_tokens\":100,\"stream\":true,"
                                "\"stream_options\":{\"include_usage\":true}}", q);
    stream(c, "/v1/completions", body, 0, 1, text, sizeof text, finish, &np, &ng, "stream completions");
    CHECK(strcmp(text, fx->text) == 0 && strcmp(finish, "stop") == 0, "stream text '%s' finish %s", text, finish);
    CHECK(np == fx->n_ids_bos && ng == fx->n_ids + 1, "stream usage %d/%d", np, ng);
    /* several tokens per next() */
    f->per_next = 5;
    snprintf(body, sizeof body, "{\"prompt\":%s,\"max_tokens\":100,\"stream\":true}", q);
    stream(c, "/v1/completions", body, 0, 0, text, sizeof text, finish, &np, &ng, "stream x5");
    CHECK(strcmp(text, fx->text) == 0 && strcmp(finish, "stop") == 0, "stream x5 text '%s'", text);
    f->per_next = 1;

    /* chat: the scheduler gets exactly transformers' rendering; the reply is scripted */
    const char *reply = "Hi there! How can I help? \xe2\x9c\x85";
    int32_t *rid = NULL;
    size_t nr = 0;
    sits_tokenizer_encode(tok, reply, strlen(reply), 0, &rid, &nr);
    int32_t script[64];
    memcpy(script, rid, nr * sizeof *rid);
    script[nr] = sits_tokenizer_token_to_id(tok, "<|eot_id|>");
    f->script = script;
    f->n_script = (int)nr + 1;
    f->script_finish = SITS_FINISH_STOP;
    char *msgs = json_dumps(fx->chat_msgs, JSON_COMPACT);
    snprintf(body, sizeof body, "{\"model\":\"%s\",\"messages\":%s,\"stream\":true,"
                                "\"stream_options\":{\"include_usage\":true}}", MODEL, msgs);
    stream(c, "/v1/chat/completions", body, 1, 1, text, sizeof text, finish, &np, &ng, "stream chat");
    CHECK(strcmp(text, reply) == 0 && strcmp(finish, "stop") == 0, "chat stream '%s' finish %s", text, finish);
    CHECK(ng == (int)nr + 1, "chat usage completion_tokens %d, want %zu", ng, nr + 1);
    char *rendered = NULL;
    size_t rl = 0;
    sits_tokenizer_decode(tok, f->last_prompt, (size_t)f->last_n_prompt, 0, &rendered, &rl);
    CHECK(rendered && strcmp(rendered, fx->chat_expected) == 0 && np == f->last_n_prompt,
          "chat prompt differs from transformers' rendering:\n got  '%s'\n want '%s'", rendered ? rendered : "",
          fx->chat_expected);
    CHECK(f->last_max_tokens == MAX_LEN - f->last_n_prompt, "chat default max_tokens %d, want %d", f->last_max_tokens,
          MAX_LEN - f->last_n_prompt);
    free(rendered);

    /* chat, whole response */
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                                "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hello\"}]}],"
                                "\"max_completion_tokens\":50}");
    http_resp_t r;
    if (call(c, "POST", "/v1/chat/completions", body, &r) == 0) {
        json_t *o = parse(r.body);
        static const char *const top[] = { "id", "object", "created", "model", "choices", "usage", NULL };
        static const char *const ch[] = { "index", "message", "logprobs", "finish_reason", "stop_reason", NULL };
        static const char *const msg[] = { "role", "content", NULL };
        json_t *c0 = json_array_get(json_object_get(o, "choices"), 0), *m = json_object_get(c0, "message");
        CHECK(r.status == 200 && keys_are(o, top) && keys_are(c0, ch) && keys_are(m, msg) &&
              strncmp(jstr(o, "id"), "chatcmpl-", 9) == 0 && strcmp(jstr(o, "object"), "chat.completion") == 0 &&
              strcmp(jstr(m, "role"), "assistant") == 0 && strcmp(jstr(m, "content"), reply) == 0 &&
              strcmp(jstr(c0, "finish_reason"), "stop") == 0 &&
              jint(json_object_get(o, "usage"), "completion_tokens") == (long long)nr + 1,
              "chat: %d %s", r.status, r.body);
        CHECK(f->last_max_tokens == 50, "max_completion_tokens %d", f->last_max_tokens);
        json_decref(o);
        http_resp_free(&r);
    }
    /* finish "length" in a chat stream */
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":3,\"stream\":true}");
    stream(c, "/v1/chat/completions", body, 1, 0, text, sizeof text, finish, &np, &ng, "chat length");
    char *want3 = NULL;
    size_t w3 = 0;
    sits_tokenizer_decode(tok, script, 3, 1, &want3, &w3);
    CHECK(strcmp(finish, "length") == 0 && want3 && strcmp(text, want3) == 0, "chat length: '%s' %s", text, finish);
    free(want3);
    f->script = NULL;
    f->n_script = 0;
    free(rid);
    free(msgs);
    free(q);
}

static void test_stop(client_t *c, fake_sched_t *f)
{
    const char *fox = "The quick brown fox jumps over the lazy dog";
    char text[1024], finish[32];
    int np, ng;
    int cancels = f->cancels;
    http_resp_t r;
    /* whole response: the earliest stop string wins; the request is cancelled at the match */
    if (call(c, "POST", "/v1/completions",
             "{\"prompt\":\"The quick brown fox jumps over the lazy dog\",\"max_tokens\":60,"
             "\"stop\":[\"zzz\",\" over\",\" jumps\"]}", &r) == 0) {
        json_t *o = parse(r.body);
        json_t *c0 = json_array_get(json_object_get(o, "choices"), 0);
        CHECK(r.status == 200 && strcmp(jstr(c0, "text"), "The quick brown fox") == 0 &&
              strcmp(jstr(c0, "finish_reason"), "stop") == 0, "stop: %s", r.body);
        json_decref(o);
        http_resp_free(&r);
    }
    CHECK(fake_sched_wait(f, cancels + 1, 0, 2000), "stop string did not cancel the request");
    /* streaming, a stop string spanning the tokens " brown" and " fox" */
    stream(c, "/v1/completions",
           "{\"prompt\":\"The quick brown fox jumps over the lazy dog\",\"max_tokens\":60,\"stream\":true,"
           "\"stop\":\"own fo\"}", 0, 0, text, sizeof text, finish, &np, &ng, "stop stream");
    CHECK(strcmp(text, "The quick br") == 0 && strcmp(finish, "stop") == 0, "stop stream '%s' %s", text, finish);
    CHECK(fake_sched_wait(f, cancels + 2, 0, 2000), "stream stop string did not cancel the request");
    /* a held-back prefix that never completes is released at the end */
    stream(c, "/v1/completions",
           "{\"prompt\":\"The quick brown fox jumps over the lazy dog\",\"max_tokens\":60,\"stream\":true,"
           "\"stop\":[\"dog!\",\"lazy cat\"]}", 0, 0, text, sizeof text, finish, &np, &ng, "stop held");
    CHECK(strcmp(text, fox) == 0 && strcmp(finish, "stop") == 0, "held-back '%s' %s", text, finish);
    /* a chat stop string */
    stream(c, "/v1/chat/completions",
           "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"stream\":true,\"stop\":[\"ass\"]}", 1, 0, text,
           sizeof text, finish, &np, &ng, "chat stop");
    CHECK(strcmp(text, "user\n\na") == 0 && strcmp(finish, "stop") == 0, "chat stop '%s' %s", text, finish);
}

typedef struct {
    const char *path, *body;
    int status;
    const char *code;
} bad_t;

static void test_bad_requests(client_t *c, fake_sched_t *f)
{
    static char long_prompt[4096], fill_prompt[4096];
    int off = snprintf(long_prompt, sizeof long_prompt, "{\"prompt\":[");
    for (int i = 0; i < MAX_LEN + 10; i++) off += snprintf(long_prompt + off, sizeof long_prompt - (size_t)off, "%s%d", i ? "," : "", 65 + i % 20);
    snprintf(long_prompt + off, sizeof long_prompt - (size_t)off, "]}");
    off = snprintf(fill_prompt, sizeof fill_prompt, "{\"prompt\":[");
    for (int i = 0; i < 400; i++) off += snprintf(fill_prompt + off, sizeof fill_prompt - (size_t)off, "%s%d", i ? "," : "", 70);
    snprintf(fill_prompt + off, sizeof fill_prompt - (size_t)off, "],\"max_tokens\":200}");
    const char *C = "/v1/completions", *H = "/v1/chat/completions";
    const bad_t bad[] = {
        { C, "{\"prompt\": \"x\",", 400, NULL },                      /* malformed JSON */
        { C, "", 400, NULL },                                           /* empty body */
        { C, "[1,2,3]", 400, NULL },                                    /* not an object */
        { C, "{\"prompt\":\"\xff\xfe bad\"}", 400, NULL },              /* invalid UTF-8 */
        { C, "{\"prompt\":\"a\\u0000b\"}", 400, NULL },                 /* NUL */
        { C, "{\"prompt\":\"\\ud800\"}", 400, NULL },                   /* lone surrogate */
        { C, "{\"max_tokens\":5}", 400, NULL },                         /* missing prompt */
        { C, "{\"prompt\":5}", 400, NULL },                             /* wrong prompt type */
        { C, "{\"prompt\":[1,\"a\"]}", 400, NULL },                     /* mixed ids */
        { C, "{\"prompt\":[]}", 400, NULL },                            /* empty ids */
        { C, "{\"prompt\":[5,99999]}", 400, NULL },                     /* id outside the vocabulary */
        { C, "{\"prompt\":[-1]}", 400, NULL },
        { C, "{\"prompt\":[\"a\",1]}", 400, NULL },                   /* a batch of text and an id */
        { C, "{\"prompt\":\"x\",\"model\":\"gpt-4\"}", 404, "model_not_found" },
        { C, "{\"prompt\":\"x\",\"model\":7}", 400, NULL },
        { C, "{\"prompt\":\"x\",\"max_tokens\":0}", 400, NULL },
        { C, "{\"prompt\":\"x\",\"max_tokens\":-3}", 400, NULL },
        { C, "{\"prompt\":\"x\",\"max_tokens\":100000}", 400, NULL },
        { C, "{\"prompt\":\"x\",\"max_tokens\":\"5\"}", 400, NULL },
        { C, "{\"prompt\":\"x\",\"max_tokens\":2.5}", 400, NULL },
        { C, "{\"prompt\":\"x\",\"temperature\":2.5}", 400, NULL },
        { C, "{\"prompt\":\"x\",\"temperature\":-0.1}", 400, NULL },
        { C, "{\"prompt\":\"x\",\"temperature\":\"hot\"}", 400, NULL },
        { C, "{\"prompt\":\"x\",\"top_p\":0}", 400, NULL },
        { C, "{\"prompt\":\"x\",\"top_p\":1.5}", 400, NULL },
        { C, "{\"prompt\":\"x\",\"top_k\":-5}", 400, NULL },
        { C, "{\"prompt\":\"x\",\"seed\":\"x\"}", 400, NULL },
        { C, "{\"prompt\":\"x\",\"n\":0}", 400, NULL },
        { C, "{\"prompt\":\"x\",\"n\":65}", 400, NULL },
        { C, "{\"prompt\":\"x\",\"n\":2,\"best_of\":3}", 400, NULL },
        { C, "{\"prompt\":\"x\",\"stream\":\"yes\"}", 400, NULL },
        { C, "{\"prompt\":\"x\",\"stream_options\":{\"include_usage\":true}}", 400, NULL },
        { C, "{\"prompt\":\"x\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", 400, NULL },
        { C, "{\"prompt\":\"x\",\"stop\":5}", 400, NULL },
        { C, "{\"prompt\":\"x\",\"stop\":[\"\"]}", 400, NULL },
        { C, "{\"prompt\":\"x\",\"logprobs\":21}", 400, NULL },
        { C, "{\"prompt\":\"x\",\"echo\":\"yes\"}", 400, NULL },
        { C, "{\"prompt\":\"x\",\"max_tokens\":0}", 400, NULL },
        { C, "{\"prompt\":\"x\",\"presence_penalty\":3}", 400, NULL },
        { C, "{\"prompt\":\"x\",\"logit_bias\":{\"999999\":1}}", 400, NULL },
        { C, "{\"prompt\":\"x\",\"min_tokens\":9,\"max_tokens\":2}", 400, NULL },
        { C, long_prompt, 400, "context_length_exceeded" },
        { C, fill_prompt, 400, "context_length_exceeded" },
        { H, "{\"max_tokens\":5}", 400, NULL },                        /* missing messages */
        { H, "{\"messages\":[]}", 400, NULL },
        { H, "{\"messages\":{\"role\":\"user\"}}", 400, NULL },
        { H, "{\"messages\":[{\"role\":\"robot\",\"content\":\"hi\"}]}", 400, NULL },
        { H, "{\"messages\":[{\"role\":5,\"content\":\"hi\"}]}", 400, NULL },
        { H, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\",\"tool_calls\":[]}]}", 400, NULL },
        { H, "{\"messages\":[{\"role\":\"user\",\"content\":7}]}", 400, NULL },
        { H, "{\"messages\":[{\"role\":\"user\"}]}", 400, NULL },
        { H, "{\"messages\":[\"hi\"]}", 400, NULL },
        { H, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"model\":\"other\"}", 404, "model_not_found" },
        { H, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_completion_tokens\":0}", 400, NULL },
    };
    int submits = f->submits;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        http_resp_t r;
        if (call(c, "POST", bad[i].path, bad[i].body, &r) != 0) continue;
        char what[128];
        snprintf(what, sizeof what, "bad request %zu (%.60s)", i, bad[i].body);
        check_error(&r, bad[i].status, bad[i].code, what);
        http_resp_free(&r);
    }
    CHECK(f->submits == submits, "a bad request reached the scheduler (%d submits)", f->submits - submits);
    /* the server is still fine */
    http_resp_t r;
    if (call(c, "POST", C, "{\"prompt\":\"still alive\",\"max_tokens\":20}", &r) == 0) {
        json_t *o = parse(r.body);
        CHECK(r.status == 200 &&
              strcmp(jstr(json_array_get(json_object_get(o, "choices"), 0), "text"), "still alive") == 0,
              "good request after bad ones: %d %s", r.status, r.body);
        json_decref(o);
        http_resp_free(&r);
    }
}

static void test_http_errors(client_t *c, fake_sched_t *f)
{
    http_resp_t r;
    char v[64];
    if (call(c, "GET", "/v1/nothing", NULL, &r) == 0) {
        check_error(&r, 404, NULL, "unknown path");
        http_resp_free(&r);
    }
    if (call(c, "GET", "/v1/completions", NULL, &r) == 0) {
        check_error(&r, 405, NULL, "GET completions");
        CHECK(http_header(&r, "Allow", v, sizeof v) == 0 && strcmp(v, "POST") == 0, "405 without Allow: POST");
        http_resp_free(&r);
    }
    if (call(c, "POST", "/health", "{}", &r) == 0) {
        check_error(&r, 405, NULL, "POST /health");
        http_resp_free(&r);
    }
    if (call(c, "DELETE", "/v1/chat/completions", NULL, &r) == 0) {
        check_error(&r, 405, NULL, "DELETE chat");
        http_resp_free(&r);
    }
    /* scheduler queue full -> 429 + Retry-After */
    f->busy = 1;
    if (call(c, "POST", "/v1/completions", "{\"prompt\":\"x\"}", &r) == 0) {
        check_error(&r, 429, NULL, "busy");
        CHECK(http_header(&r, "Retry-After", v, sizeof v) == 0 && atoi(v) >= 1, "429 without Retry-After");
        http_resp_free(&r);
    }
    f->busy = 0;
    /* body over --max-body-bytes: announced by Content-Length (answered before the body is read) ... */
    int fd = http_connect(c->port);
    const char *hdr = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      "Content-Length: 200000\r\n\r\n";
    if (fd >= 0 && http_send_all(fd, hdr, strlen(hdr)) == 0 && http_read_response(fd, &r) == 0) {
        c->n_status[r.status]++;
        check_error(&r, 413, "request_too_large", "Content-Length over the limit");
        http_resp_free(&r);
    } else {
        CHECK(0, "no answer to an oversized Content-Length");
    }
    if (fd >= 0) close(fd);
    /* ... or arriving chunked: read and dropped, then 413 */
    fd = http_connect(c->port);
    hdr = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
          "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    int ok = fd >= 0 && http_send_all(fd, hdr, strlen(hdr)) == 0;
    char *chunk = malloc(40000 + 32);
    int hl = sprintf(chunk, "%x\r\n", 40000);
    memset(chunk + hl, 'a', 40000);
    memcpy(chunk + hl + 40000, "\r\n", 2);
    for (int i = 0; ok && i < 3; i++) ok = http_send_all(fd, chunk, (size_t)hl + 40002) == 0;
    ok = ok && http_send_all(fd, "0\r\n\r\n", 5) == 0 && http_read_response(fd, &r) == 0;
    CHECK(ok, "no answer to an oversized chunked body");
    if (ok) {
        c->n_status[r.status]++;
        check_error(&r, 413, "request_too_large", "chunked body over the limit");
        http_resp_free(&r);
    }
    free(chunk);
    if (fd >= 0) close(fd);
    if (call(c, "POST", "/v1/completions", "{\"prompt\":\"after 413\",\"max_tokens\":20}", &r) == 0) {
        CHECK(r.status == 200 && strstr(r.body, "\"after 413\""), "request after 413: %d %s", r.status, r.body);
        http_resp_free(&r);
    }
}

/* The scheduler reports an engine failure: 500 for a whole response, an error event then [DONE] in a stream ([anthropic]
 * /v1/messages: in Anthropic's shapes). */
static void test_engine_error(client_t *c, fake_sched_t *f)
{
    static const int32_t script[3] = { 70, 71, 72 };
    f->script = script;
    f->n_script = 3;
    f->script_finish = SITS_FINISH_ERROR;
    http_resp_t r;
    if (call(c, "POST", "/v1/completions", "{\"prompt\":\"x\"}", &r) == 0) {
        check_error(&r, 500, NULL, "engine error");
        http_resp_free(&r);
    }
    if (call(c, "POST", "/v1/completions", "{\"prompt\":\"x\",\"stream\":true}", &r) == 0) {
        char *ev[64];
        int n = sse_split(r.body, ev, 64);
        json_t *e = n >= 2 ? parse(ev[n - 2]) : NULL;
        CHECK(r.status == 200 && n >= 2 && strcmp(ev[n - 1], "[DONE]") == 0 && json_is_object(json_object_get(e, "error")),
              "engine error in a stream: %s", r.body);
        json_decref(e);
        sse_free(ev, n > 0 ? n : 0);
        http_resp_free(&r);
    }
    /* [anthropic] /v1/messages: the 500 in Anthropic's shape; a stream's failure is its last event, "event: error" */
    static const char msg[] = "{\"model\":\"tiny-llama\",\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]";
    char body[256];
    snprintf(body, sizeof body, "%s}", msg);
    if (call(c, "POST", "/v1/messages", body, &r) == 0) {
        json_t *o = parse(r.body), *e = json_object_get(o, "error");
        CHECK(r.status == 500 && jstr(o, "type") && strcmp(jstr(o, "type"), "error") == 0 && jstr(e, "message") && jstr(e, "type") &&
                  strcmp(jstr(e, "type"), "api_error") == 0, "engine error, /v1/messages: %d %s", r.status, r.body);
        json_decref(o);
        http_resp_free(&r);
    }
    snprintf(body, sizeof body, "%s,\"stream\":true}", msg);
    if (call(c, "POST", "/v1/messages", body, &r) == 0) {
        const char *last = strstr(r.body, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\"");
        CHECK(r.status == 200 && strncmp(r.body, "event: message_start\n", 21) == 0 && last && !strstr(last + 1, "event: ") &&
                  !strstr(r.body, "message_stop") && !strstr(r.body, "[DONE]"),
              "engine error in a /v1/messages stream: %s", r.body);
        http_resp_free(&r);
    }
    f->script = NULL;
    f->n_script = 0;
}

/* Parallel streams must not mix: each echoes its own prompt. */
typedef struct {
    int port;
    int idx;
    int ok;
} par_t;

static void *par_main(void *arg)
{
    par_t *a = arg;
    char body[256], want[64];
    snprintf(want, sizeof want, "request number %d says hello %d", a->idx, a->idx * 7);
    snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":100,\"stream\":true}", want);
    http_resp_t r;
    a->ok = 0;
    if (http_request(a->port, "POST", "/v1/completions", NULL, body, strlen(body), &r) != 0) return NULL;
    char *ev[256], text[256] = "";
    int n = sse_split(r.body, ev, 256);
    for (int i = 0; i < n - 1; i++) {
        json_t *o = parse(ev[i]);
        const char *t = jstr(json_array_get(json_object_get(o, "choices"), 0), "text");
        if (t && strlen(text) + strlen(t) < sizeof text) strcat(text, t);
        json_decref(o);
    }
    a->ok = r.status == 200 && n > 1 && strcmp(ev[n - 1], "[DONE]") == 0 && strcmp(text, want) == 0;
    if (!a->ok) fprintf(stderr, "parallel %d: got '%s'\n", a->idx, text);
    sse_free(ev, n > 0 ? n : 0);
    http_resp_free(&r);
    return NULL;
}

static void test_parallel(client_t *c, fake_sched_t *f)
{
    enum { NPAR = 6 };
    pthread_t th[NPAR];
    par_t a[NPAR];
    f->delay_ms = 3;
    for (int i = 0; i < NPAR; i++) {
        a[i] = (par_t){ .port = c->port, .idx = i };
        pthread_create(&th[i], NULL, par_main, &a[i]);
    }
    int ok = 0;
    for (int i = 0; i < NPAR; i++) {
        pthread_join(th[i], NULL);
        ok += a[i].ok;
    }
    c->n_status[200] += NPAR;
    CHECK(ok == NPAR, "parallel streams: %d of %d correct", ok, NPAR);
    f->delay_ms = 1;
}

static void test_auth(const sits_server_params_t *base, const sits_tokenizer_t *tok, fake_sched_t *f)
{
    sits_server_params_t p = *base;
    p.api_key = "sekret";
    sits_server_t *srv = NULL;
    if (sits_server_create(&p, tok, &fake_sched_api, f, &srv) != SITS_OK) {
        CHECK(0, "second server (auth) did not start");
        return;
    }
    client_t none = { .port = sits_server_port(srv) };
    client_t wrong = { .port = none.port, .auth = "Authorization: Bearer sekreT\r\n" };
    client_t right = { .port = none.port, .auth = "Authorization: Bearer sekret\r\n" };
    http_resp_t r;
    char v[64];
    if (call(&none, "POST", "/v1/completions", "{\"prompt\":\"x\"}", &r) == 0) {
        check_error(&r, 401, "invalid_api_key", "no key");
        CHECK(r.body && strstr(r.body, "authentication_error"), "401 type");
        CHECK(http_header(&r, "WWW-Authenticate", v, sizeof v) == 0, "401 without WWW-Authenticate");
        http_resp_free(&r);
    }
    if (call(&wrong, "POST", "/v1/chat/completions", "{\"messages\":[]}", &r) == 0) {
        check_error(&r, 401, "invalid_api_key", "wrong key");
        http_resp_free(&r);
    }
    if (call(&none, "GET", "/v1/models", NULL, &r) == 0) {
        check_error(&r, 401, NULL, "models without key");
        http_resp_free(&r);
    }
    if (call(&right, "POST", "/v1/completions", "{\"prompt\":\"with key\",\"max_tokens\":10}", &r) == 0) {
        CHECK(r.status == 200 && strstr(r.body, "\"with key\""), "right key: %d %s", r.status, r.body);
        http_resp_free(&r);
    }
    if (call(&none, "GET", "/health", NULL, &r) == 0) {
        CHECK(r.status == 200, "/health needs no key: %d", r.status);
        http_resp_free(&r);
    }
    sits_server_destroy(srv);
}

static double metric(const char *text, const char *name)
{
    size_t nl = strlen(name);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, name, nl) == 0 && p[nl] == ' ') return strtod(p + nl + 1, NULL);
    return NAN;
}

static void test_metrics(client_t *c, fake_sched_t *f)
{
    http_resp_t r;
    char *text = NULL;
    int consistent = 0;
    /* completion callbacks run just after each response went out: give them a moment */
    for (int tries = 0; tries < 40 && !consistent; tries++) {
        int n200 = c->n_status[200], n400 = c->n_status[400];
        if (call(c, "GET", "/metrics", NULL, &r) != 0) return;
        free(text);
        text = r.body;
        r.body = NULL;
        pthread_mutex_lock(&f->mu);
        long long gen = f->delivered, prompt = f->prompt_total;
        int releases = f->releases, submits = f->submits;
        pthread_mutex_unlock(&f->mu);
        consistent = metric(text, "sits_requests_total{status=\"200\"}") == n200 &&
                     metric(text, "sits_requests_total{status=\"400\"}") == n400 &&
                     metric(text, "sits_generation_tokens_total") == (double)gen &&
                     metric(text, "sits_prompt_tokens_total") == (double)prompt &&
                     metric(text, "sits_e2e_request_latency_seconds_count") == releases &&
                     metric(text, "sits_time_to_first_token_seconds_count") == submits &&
                     metric(text, "sits_num_requests_inflight") == 0;
        if (!consistent) sleep_ms(50);
    }
    CHECK(consistent, "server counters never matched what the client and the fake saw:\n%s", text);
    static const char *const names[] = {
        "sits_requests_total counter", "sits_time_to_first_token_seconds histogram",
        "sits_inter_token_latency_seconds histogram", "sits_e2e_request_latency_seconds histogram",
        "sits_prompt_tokens_total counter", "sits_generation_tokens_total counter", "sits_num_requests_running gauge",
        "sits_num_requests_waiting gauge", "sits_kv_blocks_used gauge", "sits_kv_blocks_free gauge",
        "sits_preemptions_total counter", "sits_step_seconds histogram", "sits_kv_swapped_out_total counter",
        "sits_kv_swapped_in_total counter", "sits_kv_swap_failures_total counter", "sits_kv_swap_out_bytes_total counter",
        "sits_kv_swap_in_bytes_total counter", "sits_kv_swap_prefetched_total counter",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char want[128], help[128];   /* whole lines: text starts with "# HELP" or has it after a newline */
        snprintf(want, sizeof want, "\n# TYPE %s\n", names[i]);
        snprintf(help, sizeof help, "# HELP %.*s ", (int)(strchr(names[i], ' ') - names[i]), names[i]);
        const char *h = strstr(text, help);
        CHECK(strstr(text, want) && h && (h == text || h[-1] == '\n'), "/metrics lacks HELP/TYPE for '%s'", names[i]);
    }
    CHECK(metric(text, "sits_requests_total{status=\"404\"}") == c->n_status[404] &&
          metric(text, "sits_requests_total{status=\"413\"}") == 2 &&
          metric(text, "sits_requests_total{status=\"429\"}") == 1 &&
          metric(text, "sits_requests_total{status=\"500\"}") == 2 &&   /* test_engine_error's: completions, messages */
          metric(text, "sits_request_finished_total{finish_reason=\"error\"}") == 4, "/metrics error counts");
    CHECK(metric(text, "sits_num_requests_running") == 3 && metric(text, "sits_num_requests_waiting") == 2 &&
          metric(text, "sits_kv_blocks_used") == 42 && metric(text, "sits_kv_blocks_free") == 58 &&
          metric(text, "sits_preemptions_total") == 7, "/metrics scheduler gauges");
    CHECK(metric(text, "sits_num_requests_swapped") == 1 && metric(text, "sits_kv_swapped_out_total") == 5 &&
          metric(text, "sits_kv_swapped_in_total") == 4 && metric(text, "sits_kv_swap_failures_total") == 2 &&
          metric(text, "sits_kv_swap_prefetched_total") == 3 &&
          metric(text, "sits_kv_swap_out_bytes_total{tier=\"host\"}") == 4096 &&
          metric(text, "sits_kv_swap_out_bytes_total{tier=\"disk\"}") == 1024 &&
          metric(text, "sits_kv_swap_in_bytes_total{tier=\"host\"}") == 3072 &&
          metric(text, "sits_kv_swap_in_bytes_total{tier=\"disk\"}") == 512, "/metrics kv offload counters");
    CHECK(metric(text, "sits_step_seconds_bucket{le=\"0.001\"}") == 5 &&
          metric(text, "sits_step_seconds_bucket{le=\"0.002\"}") == 9 &&
          metric(text, "sits_step_seconds_bucket{le=\"2\"}") == 15 &&
          metric(text, "sits_step_seconds_bucket{le=\"+Inf\"}") == 16 && metric(text, "sits_step_seconds_count") == 16 &&
          fabs(metric(text, "sits_step_seconds_sum") - 1.25) < 1e-9, "/metrics step histogram");
    /* histograms: cumulative buckets, +Inf == _count */
    static const char *const hists[] = { "sits_time_to_first_token_seconds", "sits_inter_token_latency_seconds",
                                         "sits_e2e_request_latency_seconds" };
    for (int h = 0; h < 3; h++) {
        double prev = 0;
        int mono = 1, n_b = 0;
        char pre[128];
        snprintf(pre, sizeof pre, "%s_bucket{le=\"", hists[h]);
        for (const char *p = strstr(text, pre); p; p = strstr(p + 1, pre)) {
            const char *sp = strchr(p, ' ');
            double v = strtod(sp + 1, NULL);
            if (v < prev) mono = 0;
            prev = v;
            n_b++;
        }
        char inf[160], cnt[160];
        snprintf(inf, sizeof inf, "%s+Inf\"}", pre);
        snprintf(cnt, sizeof cnt, "%s_count", hists[h]);
        CHECK(mono && n_b > 5 && metric(text, inf) == metric(text, cnt) && metric(text, cnt) > 0,
              "%s buckets not cumulative or +Inf != count", hists[h]);
    }
    CHECK(metric(text, "sits_inter_token_latency_seconds_count") == f->delivered - f->submits,
          "inter-token count %g, want %lld", metric(text, "sits_inter_token_latency_seconds_count"),
          f->delivered - f->submits);
    free(text);
}

/* Sends a streaming request on a raw socket and reads until the first content chunk arrived. */
static int open_stream(int port, const char *body)
{
    int fd = http_connect(port);
    if (fd < 0) return -1;
    char head[512];
    int hl = snprintf(head, sizeof head, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                         "Content-Length: %zu\r\n\r\n", strlen(body));
    if (http_send_all(fd, head, (size_t)hl) != 0 || http_send_all(fd, body, strlen(body)) != 0) {
        close(fd);
        return -1;
    }
    char buf[8192];
    size_t n = 0;
    while (n < sizeof buf - 1) {
        ssize_t k = recv(fd, buf + n, sizeof buf - 1 - n, 0);
        if (k <= 0) break;
        n += (size_t)k;
        buf[n] = 0;
        if (strstr(buf, "\"text\":\"")) return fd;
    }
    close(fd);
    return -1;
}

static void test_disconnect(client_t *c, fake_sched_t *f, int32_t *script)
{
    for (int i = 0; i < 200; i++) script[i] = 65 + i % 26;
    f->script = script;
    f->n_script = 200;
    f->script_finish = SITS_FINISH_LENGTH;
    f->delay_ms = 20;
    int can = f->cancels, rel = f->releases, fin = f->finished_naturally;
    int fd = open_stream(c->port, "{\"prompt\":\"x\",\"max_tokens\":200,\"stream\":true}");
    CHECK(fd >= 0, "stream did not start");
    if (fd >= 0) close(fd);
    CHECK(fake_sched_wait(f, can + 1, rel + 1, 3000), "disconnect mid-stream: cancels %d->%d releases %d->%d", can,
          f->cancels, rel, f->releases);
    /* a client that gives up on a whole (non-streaming) response */
    fd = http_connect(c->port);
    const char *body = "{\"prompt\":\"x\",\"max_tokens\":200}";
    char head[256];
    int hl = snprintf(head, sizeof head, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n%s",
                      strlen(body), body);
    CHECK(fd >= 0 && http_send_all(fd, head, (size_t)hl) == 0, "send");
    sleep_ms(150);
    if (fd >= 0) close(fd);
    CHECK(fake_sched_wait(f, can + 2, rel + 2, 3000), "disconnect while waiting: cancels %d->%d releases %d->%d", can,
          f->cancels, rel, f->releases);
    CHECK(f->finished_naturally == fin && f->live == 0, "abandoned requests ran to the end (%d) or leaked (%d live)",
          f->finished_naturally - fin, f->live);
}

int main(int argc, char **argv)
{
    const char *srcdir = argc > 1 ? argv[1] : getenv("top_srcdir");
    if (!srcdir) srcdir = ".";
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/tokenizers/bytelevel", srcdir);
    sits_tokenizer_t *tok = NULL;
    if (sits_tokenizer_load(dir, &tok) != SITS_OK) {
        fprintf(stderr, "FAIL: cannot load the fixture tokenizer %s\n", dir);
        return 1;
    }
    fixtures_t fx;
    memset(&fx, 0, sizeof fx);
    if (load_fixtures(srcdir, tok, &fx) != 0) return 1;

    static fake_sched_t f;
    fake_sched_init(&f, tok, sits_tokenizer_eos_id(tok));
    f.delay_ms = 1;
    f.stats = (sits_sched_stats_t){ .running = 3, .waiting = 2, .swapped = 1, .kv_blocks_total = 100,
                                    .kv_blocks_free = 58, .max_model_len = MAX_LEN, .preemptions = 7, .steps = 16,
                                    .step_seconds_sum = 1.25, .step_hist = { 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 1 },
                                    .kv_swap_out = 5, .kv_swap_in = 4, .kv_swap_failed = 2, .kv_swap_prefetched = 3,
                                    .kv_swap_out_bytes = { 4096, 1024 }, .kv_swap_in_bytes = { 3072, 512 } };
    sits_chat_t *chat = NULL;
    if (sits_chat_load(dir, NULL, &chat) != SITS_OK) {
        fprintf(stderr, "FAIL: cannot load the fixture's chat template %s\n", dir);
        return 1;
    }
    sits_server_params_t p = { .host = "127.0.0.1", .port = 0, .model_name = MODEL, .max_model_len = MAX_LEN,
                               .max_body_bytes = 65536, .default_max_tokens = 16, .seed = 1234, .chat = chat };
    sits_server_t *srv = NULL;
    if (sits_server_create(&p, tok, &fake_sched_api, &f, &srv) != SITS_OK) {
        fprintf(stderr, "FAIL: the server did not start\n");
        return 1;
    }
    static client_t c;
    c.port = sits_server_port(srv);
    CHECK(c.port > 0, "port %d", c.port);

    test_health_models(&c);
    test_completions(&c, &f, &fx, tok);
    test_streaming(&c, &f, &fx, tok);
    test_stop(&c, &f);
    test_bad_requests(&c, &f);
    test_http_errors(&c, &f);
    test_engine_error(&c, &f);
    test_parallel(&c, &f);
    test_metrics(&c, &f);
    test_auth(&p, tok, &f);
    static int32_t script[256];
    test_disconnect(&c, &f, script);

    /* draining: new requests 503 + Retry-After, the open stream goes on; destroy cancels it */
    int can = f.cancels, rel = f.releases;
    int fd = open_stream(c.port, "{\"prompt\":\"x\",\"max_tokens\":200,\"stream\":true}");
    CHECK(fd >= 0, "stream before drain did not start");
    sits_server_stop_admitting(srv);
    http_resp_t r;
    char v[32];
    if (call(&c, "POST", "/v1/completions", "{\"prompt\":\"late\"}", &r) == 0) {
        check_error(&r, 503, NULL, "draining");
        CHECK(http_header(&r, "Retry-After", v, sizeof v) == 0, "503 without Retry-After");
        http_resp_free(&r);
    }
    if (call(&c, "GET", "/health", NULL, &r) == 0) {
        CHECK(r.status == 503, "/health while draining: %d", r.status);
        http_resp_free(&r);
    }
    CHECK(sits_server_inflight(srv) == 1, "in flight while draining: %d", sits_server_inflight(srv));
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    sits_server_destroy(srv);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double dt = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    CHECK(dt < 3.0, "destroy with an open stream took %.2f s", dt);
    CHECK(f.cancels == can + 1 && f.releases == rel + 1 && f.live == 0,
          "destroy: cancels +%d releases +%d live %d", f.cancels - can, f.releases - rel, f.live);
    if (fd >= 0) close(fd);

    json_decref(fx.chat_msgs);
    sits_chat_destroy(chat);
    fake_sched_fini(&f);
    sits_tokenizer_destroy(tok);
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("test_server: all checks passed\n");
    return 0;
}
