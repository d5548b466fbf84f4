/* server.c -- the HTTP front-end: libmicrohttpd as an event loop (epoll, a pool of --http-threads
 * threads, connections suspended while they wait for tokens), routing, bearer auth, body limits,
 * connection limits, and the generation pump.
 *
 * Request flow (MHD calls `handle` several times per request, on one of its event-loop threads):
 *   1st call: headers only. Connection over the limits (503 + Retry-After), route (404), method
 *             (405 + Allow), auth on /v1/, /tokenize and /detokenize (401), draining (503),
 *             Content-Length over max_body_bytes (413) are answered before any body is read.
 *             (Headers that stall are cut by MHD's idle timeout: idle_timeout_s, 60 s, without a byte.)
 *   next calls: body pieces, appended up to max_body_bytes (beyond: discarded, 413 at the end); a body
 *             still arriving after the read timeout closes the connection.
 *   last call: parse + validate + tokenize (api.c), submit to the scheduler one sequence per choice
 *     (n > 1, batched prompts; busy -> 429), hand the request to the pump, then
 *     - non-streaming: suspend the connection; the pump resumes it once the output is over and the
 *       handler, called again, queues the JSON;
 *     - streaming: queue a chunked response whose reader hands MHD the SSE events the pump queued,
 *       and suspends the connection (0 bytes) when there are none yet.
 *   The pump thread (pump_main) polls every unfinished choice of every submitted request without
 *   blocking, detokenizes, applies stop strings, queues stream events, resumes parked connections, and
 *   checks whether the peer of a parked connection closed its socket (recv MSG_PEEK == 0: cancel every
 *   choice). A request is over when all its choices are; at shutdown every choice still running ends
 *   with finish "abort" and the response stays complete (every choice, usage, [DONE]).
 *   [structured output / tool calls] The pump does no grammar work: the request's grammar is compiled
 *   by the parse (api.c, on the MHD thread, shared through the grammar cache), the vocabulary trie is
 *   built once by the first constrained gen_start, and the scheduler thread computes the masks and
 *   feeds the sampled tokens to the grammar state; each choice is its own scheduler sequence with its
 *   own grammar state (and its own reference to the shared grammar). With a tool-call parser a whole
 *   response parses each choice's text into tool calls at the end (run_whole); a stream sends each
 *   choice's content and tool-call deltas as the parser tells them apart (tools.c's stream step: a
 *   call's head once its name is complete, its arguments as they come), and stream_end sends what was
 *   held (finish "abort" at the shutdown timeout: the held text as content when no call went out).
 *   `completed` (MHD_OPTION_NOTIFY_COMPLETED) runs once per request after its response was sent (or
 *   the client went away): it takes the request off the pump, cancels it if it did not finish,
 *   releases it and frees the connection state. `inflight` counts submitted requests until then, so
 *   inflight == 0 means every admitted client received its whole response.
 * Locks: gen_mu (the pump's list) before conn_t.mu (a request's generation state and stream buffer);
 * MHD callbacks take only conn_t.mu, except gen_start / completed which take only gen_mu.
 * A connection is only suspended by an MHD callback holding conn_t.mu and seeing `stopping` clear, and
 * the pump's last pass (after `stopping` is set) resumes every suspended one, so MHD_stop_daemon never
 * meets a suspended connection.
 * The connection's idle timeout is switched off while a request generates (a long generation is not
 * idleness) and switched back on after (which restarts MHD's timer). */
#include "server/server.h"
#include "server/chat_page.h"   /* chat page (issue 12) */
#include "server/srv_internal.h"
#include "server/responses.h"   /* [responses] */
#include "server/anthropic.h"   /* [anthropic] */
#include "grammar/grammar.h"
#include "util/log.h"

#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { TOK_BATCH = 64, IP_BUCKETS = 1024, MHD_LIMIT_SLACK = 256 };
#define PUMP_IDLE_NS 2000000L   /* the pump sleeps this long when a pass found nothing (or a submit wakes it) */
#define PEER_CHECK_S 0.2        /* how often the pump looks whether a parked connection's client left */

/* Open connections from one client address. */
typedef struct ip_entry {
    struct ip_entry *next;
    unsigned char addr[16];
    int len, count;
} ip_entry_t;

/* MHD's socket context: one per TCP connection (several requests with keep-alive). */
typedef struct {
    ip_entry_t *ip;
    double t_open;
    int over_limit;    /* opened beyond --max-connections or the per-client limit: every request 503 */
} sock_ctx_t;

typedef struct conn conn_t;

struct sits_server {
    char *host, *api_key, *model_name;
    int port;
    size_t max_body;
    unsigned idle_timeout;
    uint64_t seed;
    sits_srv_limits_t lim;
    const int32_t *stop_ids;
    size_t n_stop_ids;
    int32_t hm_ids[8];        /* [reasoning] openai_gptoss: harmony's markup tokens, kept as text for harmony.c */
    int n_hm_ids;
    int32_t ms_ids[4];        /* [tool calls] Mistral's call markup tokens that are special, kept as text for its parser */
    int n_ms_ids;
    int32_t th_ids[2];        /* [reasoning] mistral's [THINK] / [/THINK] where special, kept as text for its parser */
    int n_th_ids;
    int32_t own_eos;          /* the tokenizer's own eos (stop_reason null for it, as vLLM), -1: none */
    const sits_sched_api_t *api;
    void *sched;
    struct MHD_Daemon *mhd;
    long long start_time;
    uint64_t id_salt;
    atomic_int draining;
    atomic_int stopping;
    atomic_int inflight;
    const sits_tenants_t *tenants;
    atomic_int t_inflight[SITS_MAX_TENANTS];
    atomic_uint_fast64_t counter;
    sits_srv_metrics_t metrics;
    sits_otlp_t *otlp;
    double read_timeout;
    int drain_signals;      /* a pending SIGTERM / SIGINT counts as draining (our threads block them) */
    /* the pump: requests being generated */
    pthread_mutex_t gen_mu;
    pthread_cond_t gen_cv;
    conn_t *gen_head;
    /* HTTP threads waiting for gen_mu (gen_lock): the pump, which holds gen_mu through a pass, hands it
     * over after each pass until none waits (gen_yield_cv) -- with tokens arriving at every pass it would
     * otherwise never let go, and admissions and completions would trickle */
    atomic_int gen_waiters;
    pthread_cond_t gen_yield_cv;
    pthread_t pump;
    int pump_started;
    /* open connections, in total and by client address */
    pthread_mutex_t cn_mu;
    int n_conns, max_conns, max_per_client;
    ip_entry_t *ip[IP_BUCKETS];
    atomic_uint_fast64_t conns_refused;
    /* [structured output] the vocabulary trie, built at the first constrained request */
    pthread_mutex_t gmu;
    sits_grammar_vocab_t *gvocab;
};

typedef enum { R_NONE = 0, R_COMPLETIONS, R_CHAT, R_MODELS, R_MODEL, R_HEALTH, R_METRICS, R_PAGE, R_TOKENIZE, R_DETOKENIZE,
               R_RESPONSES, R_RESPONSE_ID /* [responses] POST /v1/responses, /v1/responses/{id} */,
               R_MESSAGES, R_MESSAGES_COUNT /* [anthropic] POST /v1/messages, /v1/messages/count_tokens */ } route_t;

/* Routes that take a POST body. */
static int has_body(route_t r)
{
    return r == R_COMPLETIONS || r == R_CHAT || r == R_TOKENIZE || r == R_DETOKENIZE || r == R_RESPONSES || r == R_MESSAGES ||
           r == R_MESSAGES_COUNT;
}

/* [translated APIs] The API a route translates into a chat request (NULL: none; srv_internal.h). */
static const sits_srv_dialect_t *dialect_of(route_t r)
{
    return r == R_RESPONSES ? &sits_srv_resp_dialect : r == R_MESSAGES || r == R_MESSAGES_COUNT ? &sits_srv_anth_dialect : NULL;
}

/* [n] One choice of a request: its own sequence in the scheduler, its own text. */
typedef struct {
    sits_req_t *req;
    int pi;                 /* its prompt: 0 = rq.prompt, k > 0 = rq.more[k - 1] */
    const int32_t *prompt;
    int n_prompt;
    int cancelled;
    int over;               /* finished, stop string, cancelled or error */
    sits_finish_t finish;
    int n_gen;
    int n_lp;               /* [logprobs] generated tokens whose logprobs were streamed */
    size_t lp_off;          /* [logprobs] text_offset of the next streamed token: the offsets run on over the
                             * tokens' texts as in the whole response (special tokens count, held text not) */
    sits_srv_textout_t to;
    int to_valid;
    int tool_calls;         /* [tool calls] its stream ended with tool-call deltas (finish "tool_calls") */
    int got;                /* tokens the scheduler delivered (an echo-scoring token included) */
    int echoed;             /* [logprobs] echo + stream: its prompt chunk went out */
    sits_srv_tool_stream_t ts;   /* [tool calls] the stream's calls so far (to.out keeps the whole text) */
    int rs_on;              /* [reasoning] a chat output split into reasoning and content */
    sits_srv_reasoning_stream_t rs;   /* [reasoning] the stream's splitter: it takes to.out's text as it comes
                                       * and keeps the content part whole for the tool-call parser */
    int hm_on;              /* [reasoning] openai_gptoss: harmony messages -> reasoning, content, tool calls */
    sits_srv_harmony_t hm;
    int32_t *ids;           /* [token ids] return_token_ids: the n_gen ids of the output (malloc'd) */
    int ids_cap;
    int ids_sent;           /* [token ids] of them, in chunks sent */
    int head_sent;          /* [token ids] its first chunk (with the prompt's ids) went out */
    int32_t last_id;        /* the last token generated (stop_reason: the stop id that ended it) */
} choice_t;

struct conn {
    sits_server_t *srv;
    struct MHD_Connection *mc;
    route_t route;
    double t_arrival;
    int tenant;             /* from the bearer key with a tenants file, else 0 */
    double t_first;         /* first token (0: none yet) */
    int replied;            /* a response was queued */
    /* body */
    char *body;
    size_t body_len, body_cap;
    int body_too_big;
    /* generation */
    sits_srv_request_t rq;
    int rq_valid;
    choice_t *ch;           /* [n] rq.n choices (NULL until gen_start) */
    int n_ch;               /* choices submitted */
    int started;            /* every choice was submitted (counted in inflight) */
    int prompt_tokens;      /* over the prompts of a batch (usage) */
    int over;               /* no more output from any choice */
    double t_last, t_over;
    int n_gen;              /* tokens generated over all choices */
    char id[48];
    long long created;
    /* streaming */
    char *pend;
    size_t pend_len, pend_off, pend_cap;
    int stream_done;        /* [DONE] is in pend */
    int32_t keep[16];       /* [reasoning] [tool calls] the special tokens its parsers read as text (textout_keep) */
    int n_keep;
    /* the pump (guarded by mu once the request was submitted) */
    pthread_mutex_t mu;
    int in_gen;             /* on the pump's list (gen_mu) */
    conn_t *gnext, *gprev;
    int suspended;          /* parked by an MHD callback, waiting for the pump */
    int gone;               /* the client left or the stream failed: no response */
    double t_check;         /* last peer_closed check */
    const sits_srv_dialect_t *dl;   /* [translated APIs] /v1/responses, /v1/messages: the hooks (NULL: another endpoint) */
    void *dl_st;                    /* their translation state */
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Draining: stop_admitting / drain_signal was called, or (drain_signals) a SIGTERM / SIGINT is
 * pending on the process: sent, not yet handled by the thread the kernel chose (the main thread may
 * be busy computing a step for milliseconds). The server's threads block both signals, so sigpending
 * shows them here from the instant kill() returned: no request is admitted after the signal. */
static int draining(sits_server_t *srv)
{
    if (atomic_load(&srv->draining) || atomic_load(&srv->stopping)) return 1;
    if (!srv->drain_signals) return 0;
    sigset_t pend;
    if (sigpending(&pend) != 0 || !(sigismember(&pend, SIGTERM) == 1 || sigismember(&pend, SIGINT) == 1)) return 0;
    atomic_store(&srv->draining, 1);
    return 1;
}

/* ---------------- responses ---------------- */

/* Queues body (malloc'd; MHD frees it) with status; hdrs: name, value, ..., NULL. */
static enum MHD_Result reply(conn_t *c, int status, const char *ctype, char *body, size_t len, const char *const *hdrs)
{
    if (!body) {
        status = 500;
        ctype = "application/json";
        body = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,"
                      "\"code\":null}}");
        if (!body) return MHD_NO;
        len = strlen(body);
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    for (; hdrs && hdrs[0]; hdrs += 2) MHD_add_response_header(r, hdrs[0], hdrs[1]);
    enum MHD_Result ok = MHD_queue_response(c->mc, (unsigned)status, r);
    MHD_destroy_response(r);
    if (ok == MHD_YES) {
        c->replied = 1;
        sits_srv_metrics_status(&c->srv->metrics, status);
    }
    return ok;
}

static enum MHD_Result reply_error(conn_t *c, const sits_srv_error_t *err)
{
    const char *hdrs[5] = { NULL, NULL, NULL, NULL, NULL };
    if (err->status == 401) {
        hdrs[0] = MHD_HTTP_HEADER_WWW_AUTHENTICATE;
        hdrs[1] = "Bearer";
    } else if (err->status == 405) {
        hdrs[0] = MHD_HTTP_HEADER_ALLOW;
        hdrs[1] = has_body(c->route) ? "POST" : "GET, HEAD";
    } else if (err->status == 429 || err->status == 503) {
        hdrs[0] = MHD_HTTP_HEADER_RETRY_AFTER;
        hdrs[1] = "1";
        if (err->code && strcmp(err->code, "too_many_connections") == 0) {   /* free the slot */
            hdrs[2] = MHD_HTTP_HEADER_CONNECTION;
            hdrs[3] = "close";
        }
    }
    if (err->status == 500) SITS_WARN(SITS_SUB_HTTP, "answering %d: %s", err->status, err->message);
    else SITS_DEBUG(SITS_SUB_HTTP, "answering %d: %s", err->status, err->message);
    const sits_srv_dialect_t *dl = dialect_of(c->route);   /* [translated APIs] the API's error shape */
    char *body = dl && dl->error_json ? dl->error_json(err) : sits_srv_error_json(err);
    return reply(c, err->status, "application/json", body, body ? strlen(body) : 0, hdrs);
}

static enum MHD_Result reply_json(conn_t *c, int status, char *body)
{
    return reply(c, status, "application/json", body, body ? strlen(body) : 0, NULL);
}

/* ---------------- generation ---------------- */

static int peer_closed(struct MHD_Connection *mc)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 0;
    char b;
    ssize_t r = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static void choice_cancel(conn_t *c, choice_t *g)
{
    if (g->req && !g->cancelled) {
        g->cancelled = 1;
        c->srv->api->cancel(g->req);
    }
}

static void gen_cancel(conn_t *c)
{
    for (int i = 0; i < c->n_ch; i++) choice_cancel(c, &c->ch[i]);
}

/* g ends with f; the request is over once every choice is. */
static void choice_over(conn_t *c, choice_t *g, sits_finish_t f)
{
    g->over = 1;
    g->finish = f;
    for (int i = 0; i < c->n_ch; i++) if (!c->ch[i].over) return;
    c->over = 1;
    c->t_over = now_s();
}

static void gen_over(conn_t *c, sits_finish_t f)
{
    for (int i = 0; i < c->n_ch; i++) if (!c->ch[i].over) choice_over(c, &c->ch[i], f);
    c->over = 1;
    c->t_over = now_s();
}

/* One choice's end: flush what its detokenizer and stop-string matcher hold. */
static void choice_end(conn_t *c, choice_t *g, sits_finish_t f)
{
    if (sits_srv_textout_finish(&g->to) != SITS_OK) f = SITS_FINISH_ERROR;
    else if (g->to.stopped) f = SITS_FINISH_STOP;
    choice_over(c, g, f);
}

/* The end of the output: every choice still running ends with f (after its held text). */
static void gen_end(conn_t *c, sits_finish_t f)
{
    for (int i = 0; i < c->n_ch; i++)
        if (!c->ch[i].over) choice_end(c, &c->ch[i], f);
    if (!c->over) gen_over(c, f);
}

/* Shutdown (or the client is gone): cancel every choice and end its output with finish_reason "abort". */
static void gen_abort(conn_t *c)
{
    gen_cancel(c);
    gen_end(c, SITS_FINISH_CANCELLED);
}

/* The request's finish reason for metrics and logs: an error or abort of any choice, else choice 0's. */
static sits_finish_t gen_finish(const conn_t *c)
{
    for (int i = 0; i < c->n_ch; i++)
        if (c->ch[i].finish == SITS_FINISH_ERROR || c->ch[i].finish == SITS_FINISH_CANCELLED) return c->ch[i].finish;
    return c->n_ch ? c->ch[0].finish : SITS_FINISH_NONE;
}

/* An HTTP thread's hold of gen_mu (the pump's list): counted as waiting until it has it, so that the
 * pump lets go after its pass; the last waiter out wakes the pump. */
static void gen_lock(sits_server_t *srv)
{
    atomic_fetch_add(&srv->gen_waiters, 1);
    pthread_mutex_lock(&srv->gen_mu);
    atomic_fetch_sub(&srv->gen_waiters, 1);
}

static void gen_unlock(sits_server_t *srv)
{
    if (atomic_load(&srv->gen_waiters) == 0) pthread_cond_signal(&srv->gen_yield_cv);
    pthread_mutex_unlock(&srv->gen_mu);
}

static int is_stop_id(const conn_t *c, int32_t id)
{
    for (size_t i = 0; i < c->srv->n_stop_ids; i++)
        if (c->srv->stop_ids[i] == id) return 1;
    for (int i = 0; i < c->rq.n_stop_token_ids; i++)   /* the request's stop_token_ids */
        if (c->rq.stop_token_ids[i] == id) return 1;
    return 0;
}

/* [token ids] ids[n] appended to choice g's output ids. */
static sits_status_t ids_push(choice_t *g, const int32_t *ids, int n)
{
    if (g->n_gen + n > g->ids_cap) {
        int cap = g->ids_cap ? g->ids_cap : 64;
        while (cap < g->n_gen + n) cap *= 2;
        int32_t *p = realloc(g->ids, sizeof *p * (size_t)cap);
        if (!p) return SITS_ERR_NOMEM;
        g->ids = p;
        g->ids_cap = cap;
    }
    if (n > 0) memcpy(g->ids + g->n_gen, ids, sizeof *ids * (size_t)n);
    return SITS_OK;
}

/* Takes choice g's tokens that arrived (without waiting) and turns them into text (g->to.out). Returns 1
 * when something changed (tokens or the end). Caller holds c->mu. */
static int choice_poll(conn_t *c, choice_t *g)
{
    sits_server_t *srv = c->srv;
    int32_t toks[TOK_BATCH];
    sits_finish_t fin = SITS_FINISH_NONE;
    int n = srv->api->next(g->req, toks, TOK_BATCH, &fin, 0), got = n;
    if (got > 0) g->got += got;
    if (n > 0 && c->rq.max_tokens == 0) n = 0;   /* [logprobs] echo scoring: the one token generated is not output */
    if (n > 0) {
        double t = now_s();
        if (c->n_gen == 0) {
            c->t_first = t;
            sits_srv_metrics_ttft(&srv->metrics, t - c->t_arrival);
            if (n > 1) sits_srv_metrics_itl(&srv->metrics, 0.0, n - 1);
        } else {
            sits_srv_metrics_itl(&srv->metrics, t - c->t_last, n);
        }
        c->t_last = t;
        /* eos / stop ids end the output; they are not text (even when not special tokens). The tokens
         * go in one at a time: a stop string ends the output at the token that completed it and the
         * usage counts the tokens up to it, however many arrived at once (speculative steps) */
        sits_status_t st = SITS_OK;
        int used = 0;
        while (used < n && st == SITS_OK && !g->to.stopped) {
            if (c->rq.ignore_eos || !is_stop_id(c, toks[used])) st = sits_srv_textout_push(&g->to, toks + used, 1);
            used++;
        }
        if (c->rq.return_ids && st == SITS_OK) st = ids_push(g, toks, used);
        if (used > 0) g->last_id = toks[used - 1];
        c->n_gen += used;
        g->n_gen += used;
        if (st != SITS_OK) {
            SITS_ERROR(SITS_SUB_HTTP, "request %s: detokenizing failed: %s", c->id, sits_status_str(st));
            choice_cancel(c, g);
            choice_over(c, g, SITS_FINISH_ERROR);
            return 1;
        }
        if (g->to.stopped) {   /* a stop string: the output is complete, stop the sequence */
            choice_cancel(c, g);
            choice_over(c, g, SITS_FINISH_STOP);
            return 1;
        }
    }
    if (n < 0) fin = SITS_FINISH_ERROR;
    if (fin != SITS_FINISH_NONE) choice_end(c, g, fin);
    return got != 0 || fin != SITS_FINISH_NONE;
}

/* [n] One pass over the choices still running, none waited for (the pump serves every connection).
 * Returns 1 when any of them changed. Caller holds c->mu. */
static int gen_poll(conn_t *c)
{
    int changed = 0;
    for (int i = 0; i < c->n_ch; i++)
        if (!c->ch[i].over) changed |= choice_poll(c, &c->ch[i]);
    return changed;
}

/* Prompt tokens found in the prefix cache, over the prompts (each prompt's first choice). */
static int cached_tokens(conn_t *c)
{
    if (!c->srv->api->cached_tokens) return -1;
    int per = c->rq.n > 0 ? c->rq.n : 1, n = 0;
    for (int i = 0; i < c->n_ch; i += per) n += c->srv->api->cached_tokens(c->ch[i].req);
    return n;
}

/* [logprobs] Choice g's logprobs of generated tokens [from, to) (and of the prompt when prompt is
 * set) into *lp_p. Returns 0, or -1 when out of memory. */
static int logprobs_json(conn_t *c, const choice_t *g, int prompt, int from, int to, size_t base, json_t **lp_p)
{
    sits_server_t *srv = c->srv;
    int np = prompt ? g->n_prompt : 0, ng = to > from ? to - from : 0;
    sits_logprob_t *buf = calloc((size_t)(np + ng) + 1, sizeof *buf);
    if (!buf) return -1;
    int got_p = np > 0 ? srv->api->logprobs(g->req, 1, 0, np, buf) : 0;
    int got_g = ng > 0 ? srv->api->logprobs(g->req, 0, from, ng, buf + got_p) : 0;
    *lp_p = sits_srv_logprobs_json(c->rq.kind, srv->lim.tok, buf, got_p, g->prompt, buf + got_p, got_g, base, c->rq.lp_ids);
    free(buf);
    return *lp_p ? 0 : -1;
}

/* [logprobs] echo: choice g's prompt text (as given, or decoded from ids) followed by text (malloc'd). */
static char *echo_text(conn_t *c, const choice_t *g, const char *text, size_t text_len, size_t *len_p)
{
    char *ptext = NULL, *given = g->pi ? c->rq.more[g->pi - 1].echo : c->rq.echo_text;
    size_t plen = 0;
    if (given) {
        ptext = given;
        plen = g->pi ? c->rq.more[g->pi - 1].echo_len : c->rq.echo_len;
    } else if (sits_tokenizer_decode(c->srv->lim.tok, g->prompt, (size_t)g->n_prompt, 1, &ptext, &plen) != SITS_OK) {
        return NULL;
    }
    char *out = malloc(plen + text_len + 1);
    if (out) {
        memcpy(out, ptext, plen);
        memcpy(out + plen, text, text_len);
        out[plen + text_len] = 0;
        *len_p = plen + text_len;
    }
    if (ptext != given) free(ptext);
    return out;
}

/* [tool calls] The tool-call ids' seed of choice i (choice 0: the request's). */
static uint64_t tool_seed(const conn_t *c, int i)
{
    return mix64(c->srv->id_salt ^ (uint64_t)c->created) + (uint64_t)i * 0x9e3779b97f4a7c15ull;
}

/* [reasoning] msg.reasoning and msg.reasoning_content (vLLM's field and its older name, both set: clients read either)
 * = r[len] when has and the request includes reasoning, else null */
static int set_reasoning(json_t *msg, const conn_t *c, const char *r, size_t len, int has)
{
    const int on = has && c->rq.include_reasoning;
    return json_object_set_new(msg, "reasoning", on ? json_stringn(r, len) : json_null()) != 0 ||
           json_object_set_new(msg, "reasoning_content", on ? json_stringn(r, len) : json_null()) != 0;
}

/* Choice i of a whole response (a new reference; NULL when out of memory). */
static json_t *whole_choice(conn_t *c, int i)
{
    choice_t *g = &c->ch[i];
    json_t *lp = NULL;
    if (c->rq.logprobs && logprobs_json(c, g, c->rq.echo, 0, g->n_gen, 0, &lp) != 0) return NULL;
    const char *text = g->to.out ? g->to.out : "";
    size_t text_len = g->to.out_len;
    char *joined = NULL;
    if (c->rq.echo) {   /* the prompt's text, then the output */
        joined = echo_text(c, g, text, text_len, &text_len);
        if (!joined) {
            json_decref(lp);
            return NULL;
        }
        text = joined;
    }
    json_t *o = NULL;
    if (g->hm_on) {   /* [reasoning] harmony: the messages' reasoning, content and calls */
        sits_srv_harmony_out_t h;
        if (sits_srv_harmony_parse(text, text_len, c->rq.tool_parser == SITS_SRV_TOOLS_OPENAI, g->finish == SITS_FINISH_STOP,
                                   tool_seed(c, i), &h) != SITS_OK) {
            json_decref(lp);
            free(joined);
            return NULL;
        }
        if (h.calls && c->rq.tool_single) while (json_array_size(h.calls) > 1) json_array_remove(h.calls, 1);
        /* as the other parsers: calls make finish_reason "tool_calls" when the output ended by itself */
        o = h.calls && g->finish == SITS_FINISH_STOP ? sits_srv_choice_tools_json(i, h.content, h.c_len, h.calls, lp)
                                                      : sits_srv_choice_json(c->rq.kind, i, h.content ? h.content : "", h.c_len,
                                                                             sits_srv_finish_str(g->finish), lp);
        json_t *msg = json_object_get(o, "message");
        if (msg && h.calls && g->finish != SITS_FINISH_STOP && json_object_set(msg, "tool_calls", h.calls) != 0) msg = NULL;
        if (!msg || set_reasoning(msg, c, h.reasoning, h.r_len, h.r_len > 0) ||
            (h.c_len == 0 && json_object_set_new(msg, "content", json_null()) != 0)) {
            json_decref(o);
            o = NULL;
        }
        sits_srv_harmony_out_free(&h);
        free(joined);
        return o;
    }
    /* [reasoning] the thinking apart; the content part is what the tool-call parser and content get */
    sits_srv_reasoning_split_t rs = { .c_len = text_len };
    if (g->rs_on) sits_srv_reasoning_split(c->rq.reasoning, c->rq.reasoning_closed, text, text_len, &rs);
    const char *content = text + rs.c_off;
    if (c->rq.tool_parser && g->finish == SITS_FINISH_STOP) {
        /* [tool calls] the output parsed into calls when it ended by itself (not at max_tokens or an abort) */
        size_t content_len = 0;
        json_t *calls = sits_srv_tool_calls_parse(c->rq.tool_parser, c->rq.tools, content, rs.c_len, tool_seed(c, i), &content_len);
        if (calls && c->rq.tool_single) while (json_array_size(calls) > 1) json_array_remove(calls, 1);
        if (calls) {
            o = sits_srv_choice_tools_json(i, content, content_len, calls, lp);
            json_decref(calls);
        }
    }
    if (!o) o = sits_srv_choice_json(c->rq.kind, i, content, rs.c_len, sits_srv_finish_str(g->finish), lp);
    json_t *msg = json_object_get(o, "message");
    if (g->rs_on && msg &&   /* vLLM: reasoning a string or null, content null when empty */
        (set_reasoning(msg, c, text + rs.r_off, rs.r_len, rs.has_r) ||
         (rs.c_len == 0 && json_object_set_new(msg, "content", json_null()) != 0))) {
        json_decref(o);
        o = NULL;
    }
    free(joined);
    return o;
}

/* [structured output] the vocabulary trie of the grammar masks, made once (any connection thread) */
static const sits_grammar_vocab_t *grammar_vocab(sits_server_t *srv)
{
    pthread_mutex_lock(&srv->gmu);
    if (!srv->gvocab) {
        sits_status_t st = sits_grammar_vocab_create(srv->lim.tok, srv->lim.vocab_size, srv->stop_ids, (int)srv->n_stop_ids,
                                                     &srv->gvocab);
        if (st != SITS_OK) SITS_ERROR(SITS_SUB_HTTP, "grammar vocabulary: %s", sits_status_str(st));
        else SITS_INFO(SITS_SUB_HTTP, "structured output: vocabulary trie of %d ids built", srv->lim.vocab_size);
    }
    pthread_mutex_unlock(&srv->gmu);
    return srv->gvocab;
}

/* Appends s[len] (malloc'd, consumed; NULL: out of memory) to the pending output as it is. */
static int pend_raw(conn_t *c, char *s, size_t len)
{
    if (!s) return -1;
    if (c->pend_off == c->pend_len) c->pend_off = c->pend_len = 0;
    if (c->pend_len + len > c->pend_cap) {
        size_t cap = c->pend_cap ? c->pend_cap : 1024;
        while (cap < c->pend_len + len) cap *= 2;
        char *p = realloc(c->pend, cap);
        if (!p) {
            free(s);
            return -1;
        }
        c->pend = p;
        c->pend_cap = cap;
    }
    memcpy(c->pend + c->pend_len, s, len);
    c->pend_len += len;
    free(s);
    return 0;
}

/* Appends an SSE event ("data: ...\n\n", malloc'd s, consumed) to the pending output; [translated APIs] as the API's
 * events (the text parsed back: the usage chunk, an error, [DONE] -- the chunks go as objects, pend_chunk). */
static int pend_add(conn_t *c, char *s, size_t len)
{
    if (s && c->dl) {
        json_t *ev = NULL;
        int done = len >= 12 && strncmp(s + 6, "[DONE]", 6) == 0;
        if (!done && (len < 6 || !(ev = json_loadb(s + 6, len - 6, JSON_DISABLE_EOF_CHECK | JSON_ALLOW_NUL, NULL)))) {
            free(s);
            return -1;
        }
        free(s);
        s = c->dl->sse(c->dl_st, ev, &len);
    }
    return pend_raw(c, s, len);
}

/* vLLM's stop_reason of choice g (a new reference): the stop string that ended it, or the stop id -- a request's
 * stop_token_ids or a model stop id other than the tokenizer's own eos (vLLM adds generation_config's others to the
 * stop ids) --, null when the tokenizer's eos, max_tokens or an abort ended it. */
static json_t *stop_reason(const conn_t *c, const choice_t *g)
{
    if (g->finish != SITS_FINISH_STOP) return json_null();
    if (g->to.stopped > 0 && g->to.stopped <= c->rq.n_stop)
        return json_stringn(c->rq.stop[g->to.stopped - 1], c->rq.stop_len[g->to.stopped - 1]);
    if (g->n_gen > 0 && g->last_id != c->srv->own_eos && is_stop_id(c, g->last_id)) return json_integer(g->last_id);
    return json_null();
}

/* [token ids] ids[n] as a JSON array (a new reference; NULL out of memory). */
static json_t *ids_json(const int32_t *ids, int n)
{
    json_t *a = json_array();
    for (int k = 0; a && k < n; k++) {
        if (json_array_append_new(a, json_integer(ids[k])) != 0) {
            json_decref(a);
            a = NULL;
        }
    }
    return a;
}

/* [token ids] Choice g's whole output ids as choice o's token_ids; completions: its prompt's ids beside them (vLLM's
 * CompletionResponseChoice). 0, or -1 out of memory. */
static int set_ids(const conn_t *c, const choice_t *g, json_t *o)
{
    return json_object_set_new(o, "token_ids", ids_json(g->ids, g->n_gen)) != 0 ||
           (c->rq.kind == SITS_SRV_COMPLETIONS && json_object_set_new(o, "prompt_token_ids", ids_json(g->prompt, g->n_prompt)) != 0)
               ? -1 : 0;
}

/* Choice i's chunk o (consumed; NULL: out of memory) -> the pending output. [token ids] With return_token_ids a chunk
 * carries the ids generated since the choice's last chunk (choices[0].token_ids), and the choice's first chunk its
 * prompt's ids: chat at the top (vLLM's ChatCompletionStreamResponse), completions in the choice. With
 * continuous_usage_stats, its usage so far. */
static int pend_chunk(conn_t *c, int i, json_t *o)
{
    choice_t *g = &c->ch[i];
    if (o && c->rq.return_ids) {
        json_t *ch = json_array_get(json_object_get(o, "choices"), 0);
        int bad = !ch || json_object_set_new(ch, "token_ids", ids_json(g->ids ? g->ids + g->ids_sent : NULL,
                                                                       g->n_gen - g->ids_sent)) != 0;
        if (!bad && !g->head_sent)
            bad = json_object_set_new(c->rq.kind == SITS_SRV_CHAT ? o : ch, "prompt_token_ids", ids_json(g->prompt, g->n_prompt)) != 0;
        if (bad) {
            json_decref(o);
            o = NULL;
        } else {
            g->ids_sent = g->n_gen;
            g->head_sent = 1;
        }
    }
    if (o && c->rq.usage_each &&   /* continuous_usage_stats: the choice's usage so far (vLLM's per-choice counts) */
        json_object_set_new(o, "usage", json_pack("{s:i, s:i, s:i}", "prompt_tokens", g->n_prompt, "completion_tokens", g->n_gen,
                                                  "total_tokens", g->n_prompt + g->n_gen)) != 0) {
        json_decref(o);
        o = NULL;
    }
    size_t len = 0;
    if (c->dl && !o) return -1;
    /* [translated APIs] the chunk object straight to the API's events */
    char *s = c->dl ? c->dl->sse(c->dl_st, o, &len) : sits_srv_sse(o, &len);
    return pend_raw(c, s, len);
}

/* Submits the validated request: one scheduler sequence per choice, then hands the connection to the
 * pump. Returns 0, or -1 with err set. */
static int gen_start(conn_t *c, sits_srv_error_t *err)
{
    sits_server_t *srv = c->srv;
    const sits_grammar_vocab_t *gv = NULL;
    if (c->rq.grammar && !(gv = grammar_vocab(srv))) {
        sits_srv_error_set(err, 500, "server_error", NULL, NULL, "the grammar vocabulary could not be built");
        return -1;
    }
    uint64_t k = atomic_fetch_add(&srv->counter, 1);
    if (!c->rq.has_seed) c->rq.sample.seed = mix64(srv->seed + k);
    c->rq.sample.step = 0;
    snprintf(c->id, sizeof c->id, "%s%016llx%08llx", c->dl ? c->dl->id_prefix : c->rq.kind == SITS_SRV_CHAT ? "chatcmpl-" : "cmpl-",
             (unsigned long long)mix64(srv->id_salt ^ k), (unsigned long long)(k & 0xffffffffu));
    c->created = (long long)time(NULL);
    int per = c->rq.n > 0 ? c->rq.n : 1, n = per * (1 + c->rq.n_more);
    c->ch = calloc((size_t)n, sizeof *c->ch);
    if (!c->ch) {
        sits_srv_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    /* [reasoning] harmony reads its markup: those special tokens stay text, the others go as usual; [tool calls] so does
     * the mistral parser ([TOOL_CALLS], [ARGS], [CALL_ID]: control tokens in Mistral's tokenizers, as vLLM keeps the special
     * tokens for it) and [reasoning] the mistral reasoning parser ([THINK], [/THINK]) */
    int harmony = c->rq.kind == SITS_SRV_CHAT && c->rq.reasoning == SITS_SRV_REASONING_HARMONY;
    c->n_keep = 0;
    if (harmony) {
        memcpy(c->keep, srv->hm_ids, sizeof *c->keep * (size_t)srv->n_hm_ids);
        c->n_keep = srv->n_hm_ids;
    } else {
        if (c->rq.tool_parser == SITS_SRV_TOOLS_MISTRAL)
            for (int k = 0; k < srv->n_ms_ids; k++) c->keep[c->n_keep++] = srv->ms_ids[k];
        if (c->rq.kind == SITS_SRV_CHAT && c->rq.reasoning == SITS_SRV_REASONING_MISTRAL)
            for (int k = 0; k < srv->n_th_ids; k++) c->keep[c->n_keep++] = srv->th_ids[k];
    }
    int keep = c->rq.skip_special && c->n_keep > 0;
    for (int i = 0; i < n; i++) {
        if (sits_srv_textout_init_ex(&c->ch[i].to, srv->lim.tok, (const char *const *)c->rq.stop, c->rq.stop_len, c->rq.n_stop,
                                     c->rq.skip_special && !keep, c->rq.include_stop_str) != SITS_OK) {
            sits_srv_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
            return -1;
        }
        c->ch[i].to_valid = 1;
        if (keep) sits_srv_textout_keep(&c->ch[i].to, c->keep, c->n_keep);
        c->ch[i].rs_on = c->rq.kind == SITS_SRV_CHAT && c->rq.reasoning != SITS_SRV_REASONING_NONE && !harmony;
        if (c->ch[i].rs_on) sits_srv_reasoning_stream_init(&c->ch[i].rs, c->rq.reasoning, c->rq.reasoning_closed);
        c->ch[i].hm_on = harmony;
        if (harmony) sits_srv_harmony_init(&c->ch[i].hm, c->rq.tool_parser == SITS_SRV_TOOLS_OPENAI);
        c->ch[i].pi = i / per;
        c->ch[i].prompt = c->ch[i].pi ? c->rq.more[c->ch[i].pi - 1].ids : c->rq.prompt;
        c->ch[i].n_prompt = c->ch[i].pi ? c->rq.more[c->ch[i].pi - 1].n : c->rq.n_prompt;
        if (i % per == 0) c->prompt_tokens += c->ch[i].n_prompt;
    }
    if (c->rq.logprobs && !srv->api->logprobs) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "logprobs", "this scheduler does not compute logprobs");
        return -1;
    }
    for (int i = 0; c->rq.stream && c->rq.kind == SITS_SRV_CHAT && i < n; i++) {   /* each choice's first chunk carries the role, before any token */
        if (pend_chunk(c, i, sits_srv_chunk(c->rq.kind, c->id, c->created, srv->model_name, i, "assistant", "", 0, NULL,
                                            c->rq.include_usage, NULL)) != 0) {
            sits_srv_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
            return -1;
        }
    }
    sits_req_params_t p = {
        .prompt = c->rq.prompt, .n_prompt = c->rq.n_prompt, .max_tokens = c->rq.max_tokens, .sample = c->rq.sample,
        .ignore_eos = c->rq.ignore_eos, .tenant = c->tenant, .id = c->id,
        .stop_ids = c->rq.ignore_eos ? NULL : srv->stop_ids, .n_stop_ids = c->rq.ignore_eos ? 0 : (int)srv->n_stop_ids,
        .logprobs = c->rq.logprobs, .top_logprobs = c->rq.top_logprobs, .prompt_logprobs = c->rq.logprobs && c->rq.echo,
        .bias = c->rq.bias, .n_bias = c->rq.n_bias, .min_tokens = c->rq.min_tokens, .grammar_vocab = gv,
        .no_speculation = c->rq.no_speculation, .cache_salt = c->rq.cache_salt,
        .bad_ids = c->rq.bad_ids, .bad_off = c->rq.bad_off, .n_bad = c->rq.n_bad,
    };
    int32_t *stops = NULL;
    if (c->rq.n_stop_token_ids > 0 && !c->rq.ignore_eos) {   /* the model's stop ids + the request's */
        stops = malloc(sizeof *stops * (srv->n_stop_ids + (size_t)c->rq.n_stop_token_ids));
        if (!stops) {
            sits_srv_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
            return -1;
        }
        if (srv->n_stop_ids) memcpy(stops, srv->stop_ids, sizeof *stops * srv->n_stop_ids);
        memcpy(stops + srv->n_stop_ids, c->rq.stop_token_ids, sizeof *stops * (size_t)c->rq.n_stop_token_ids);
        p.stop_ids = stops;
        p.n_stop_ids = (int)srv->n_stop_ids + c->rq.n_stop_token_ids;
    }
    if (p.max_tokens == 0) p.max_tokens = 1;   /* echo scoring: one step computes the prompt's logits */
    if (srv->tenants) {
        int lim = srv->tenants->t[c->tenant].max_concurrent;
        if (lim > 0 && atomic_fetch_add(&srv->t_inflight[c->tenant], 1) >= lim) {
            atomic_fetch_sub(&srv->t_inflight[c->tenant], 1);
            sits_srv_error_set(err, 429, "rate_limit_error", "tenant_concurrency_limit", NULL,
                               "tenant '%s' already has %d requests in flight", srv->tenants->t[c->tenant].name, lim);
            free(stops);
            return -1;
        }
        if (lim <= 0) atomic_fetch_add(&srv->t_inflight[c->tenant], 1);
    }
    char msg[256] = "";
    sits_status_t st = SITS_OK;
    /* [n] one sequence per choice; choice i > 0 samples with its own seed */
    for (int i = 0; i < n && st == SITS_OK; i++) {
        p.sample.seed = i ? mix64(c->rq.sample.seed + (uint64_t)i) : c->rq.sample.seed;
        p.prompt = c->ch[i].prompt;
        p.n_prompt = c->ch[i].n_prompt;
        p.share_prompt_with = i % per ? c->ch[i - i % per].req : NULL;   /* [n] the prompt's KV blocks are computed once */
        p.n_sharing = i % per ? 0 : per - 1;
        /* [structured output] each choice's sequence owns a reference to the shared grammar (its own state) */
        p.grammar = c->rq.grammar ? sits_grammar_ref(c->rq.grammar) : NULL;
        st = srv->api->submit(srv->sched, &p, &c->ch[i].req, msg, sizeof msg);
        if (st == SITS_OK) c->n_ch = i + 1;
        else sits_grammar_destroy(p.grammar);   /* a failed submit did not take it */
    }
    free(stops);   /* submit copied them */
    if (st != SITS_OK) gen_cancel(c);   /* the choices already in (completed() releases them) */
    if (st != SITS_OK && srv->tenants) atomic_fetch_sub(&srv->t_inflight[c->tenant], 1);
    if (st == SITS_ERR_BUSY && draining(srv)) {   /* the scheduler stopped admitting first */
        sits_srv_error_set(err, 503, "server_error", "service_unavailable", NULL,
                           "the server is draining and admits no new requests");
        return -1;
    }
    if (st == SITS_ERR_BUSY) {
        sits_srv_error_set(err, 429, "rate_limit_error", "queue_full", NULL,
                           "the server has too many waiting requests; retry later");
        return -1;
    }
    if (st == SITS_ERR_UNSUPPORTED) {
        sits_srv_error_set(err, 400, "invalid_request_error", NULL, "logprobs", "%s", msg);
        return -1;
    }
    if (st == SITS_ERR_INVALID) {
        sits_srv_error_set(err, 400, "invalid_request_error", "context_length_exceeded", NULL, "%s",
                           msg[0] ? msg : "the request does not fit the model's context");
        return -1;
    }
    if (st != SITS_OK) {
        sits_srv_error_set(err, 500, "server_error", NULL, NULL, "the scheduler refused the request: %s",
                           msg[0] ? msg : sits_status_str(st));
        return -1;
    }
    atomic_fetch_add(&srv->inflight, 1);
    c->started = 1;
    c->t_last = c->t_arrival;
    MHD_set_connection_option(c->mc, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    /* hand the request to the pump; from now on c's generation state is guarded by c->mu */
    gen_lock(srv);
    c->gnext = srv->gen_head;
    c->gprev = NULL;
    if (srv->gen_head) srv->gen_head->gprev = c;
    srv->gen_head = c;
    c->in_gen = 1;
    pthread_cond_signal(&srv->gen_cv);
    gen_unlock(srv);
    return 0;
}

/* Generation no longer needs the connection's idle timer off; setting it from 0 restarts the timer. */
static void gen_restore_timeout(conn_t *c)
{
    MHD_set_connection_option(c->mc, MHD_CONNECTION_OPTION_TIMEOUT, c->srv->idle_timeout);
}

/* Parks the connection until the pump has something for it (caller holds c->mu, inside an MHD callback). */
static void gen_park(conn_t *c)
{
    c->suspended = 1;
    MHD_suspend_connection(c->mc);
}

/* [anthropic] The translator learns which stop string ended the output (its stop_sequence), before the finish. */
static void dl_stopped(conn_t *c)
{
    if (c->dl->stopped && c->n_ch > 0 && c->ch[0].to.stopped > 0 && c->ch[0].to.stopped <= c->rq.n_stop)
        c->dl->stopped(c->dl_st, c->rq.stop[c->ch[0].to.stopped - 1]);
}

/* The error of a generation that ended in SITS_FINISH_ERROR (logged by the scheduler); a request whose structured-output
 * constraint is restricted to allowed_token_ids says so: a step where the two share no token ends it this way. */
static void gen_failed(const conn_t *c, sits_srv_error_t *err)
{
    sits_srv_error_set(err, 500, "server_error", NULL, NULL,
                       c->rq.restricted ? "generation failed: with allowed_token_ids beside a structured-output constraint, a "
                                          "step where the two share no token ends the request" : "generation failed");
}

/* Whole response: called when the request was submitted and again each time the pump resumes the
 * connection; queues the body (every choice) once the output of every choice is over. */
static enum MHD_Result run_whole(conn_t *c)
{
    sits_server_t *srv = c->srv;
    pthread_mutex_lock(&c->mu);
    if (!c->over && atomic_load(&srv->stopping)) gen_abort(c);   /* the pump is gone */
    if (!c->over) {
        gen_park(c);
        pthread_mutex_unlock(&c->mu);
        return MHD_YES;
    }
    int gone = c->gone;
    pthread_mutex_unlock(&c->mu);
    if (gone) return MHD_NO;
    gen_restore_timeout(c);
    sits_srv_error_t err;
    if (gen_finish(c) == SITS_FINISH_ERROR) {
        gen_failed(c, &err);
        return reply_error(c, &err);
    }
    /* finish "abort" (shutdown timeout / immediate stop): the text so far, still a whole response */
    json_t *choices = json_array();
    for (int i = 0; choices && i < c->n_ch; i++) {
        json_t *o = whole_choice(c, i);
        if (o && ((c->rq.return_ids && set_ids(c, &c->ch[i], o) != 0) ||
                  json_object_set_new(o, "stop_reason", stop_reason(c, &c->ch[i])) != 0)) {
            json_decref(o);
            o = NULL;
        }
        if (!o || json_array_append_new(choices, o) != 0) {
            json_decref(choices);
            choices = NULL;
        }
    }
    if (!choices) {
        sits_srv_error_set(&err, 500, "server_error", NULL, NULL, "out of memory");
        return reply_error(c, &err);
    }
    int n_gen = c->rq.max_tokens == 0 ? 0 : c->n_gen;
    json_t *extra = NULL;   /* [token ids] chat: the prompt's ids at the top (vLLM's ChatCompletionResponse) */
    if (c->rq.return_ids && c->rq.kind == SITS_SRV_CHAT && !(extra = json_pack("{s:o}", "prompt_token_ids",
                                                                                 ids_json(c->rq.prompt, c->rq.n_prompt)))) {
        json_decref(choices);
        sits_srv_error_set(&err, 500, "server_error", NULL, NULL, "out of memory");
        return reply_error(c, &err);
    }
    char *body = sits_srv_response_json(c->rq.kind, c->id, c->created, srv->model_name, choices, c->prompt_tokens, n_gen,
                                        cached_tokens(c), extra);
    if (c->dl) {   /* [translated APIs] the chat body in the API's shape */
        dl_stopped(c);
        body = c->dl->body(c->dl_st, body);
    }
    return reply_json(c, 200, body);
}

/* [logprobs] The text offset after completions logprobs lp whose first token is at base (chat: base). */
static size_t lp_end(json_t *lp, size_t base)
{
    json_t *toks = json_object_get(lp, "tokens");
    for (size_t k = 0; k < json_array_size(toks); k++) base += json_string_length(json_array_get(toks, k));
    return base;
}

/* [logprobs] The logprobs of choice g's tokens that arrived since its last chunk (*lp_p NULL without logprobs). */
static int chunk_logprobs(conn_t *c, choice_t *g, json_t **lp_p)
{
    *lp_p = NULL;
    if (!c->rq.logprobs) return 0;
    if (logprobs_json(c, g, 0, g->n_lp, g->n_gen, g->lp_off, lp_p) != 0) return -1;
    g->n_lp = g->n_gen;
    g->lp_off = lp_end(*lp_p, g->lp_off);
    return 0;
}

/* text[len] of choice i -> one content chunk (with the logprobs of the tokens since the last one). */
static int stream_content(conn_t *c, int i, const char *text, size_t text_len)
{
    choice_t *g = &c->ch[i];
    if (text_len == 0) return 0;
    json_t *lp = NULL;
    if (chunk_logprobs(c, g, &lp) != 0) return -1;
    return pend_chunk(c, i, sits_srv_chunk(c->rq.kind, c->id, c->created, c->srv->model_name, i, NULL, text, text_len, NULL,
                                           c->rq.include_usage, lp));
}

/* [reasoning] text[len] of choice i -> one chunk with delta.reasoning and delta.reasoning_content (vLLM's DeltaMessage
 * sets both) and the logprobs since the last chunk; nothing when the request does not include reasoning. */
static int stream_reasoning_text(conn_t *c, int i, const char *text, size_t text_len)
{
    json_t *lp = NULL;
    if (text_len == 0 || !c->rq.include_reasoning) return 0;
    if (chunk_logprobs(c, &c->ch[i], &lp) != 0) return -1;
    json_t *d = json_pack("{s:s%, s:s%}", "reasoning", text, text_len, "reasoning_content", text, text_len);
    return pend_chunk(c, i, d ? sits_srv_chunk_delta(c->id, c->created, c->srv->model_name, i, d, NULL, c->rq.include_usage, lp)
                              : (json_decref(lp), NULL));
}

/* Choice i's released text -> one content chunk. */
static int stream_choice_text(conn_t *c, int i)
{
    choice_t *g = &c->ch[i];
    int rc = stream_content(c, i, g->to.out, g->to.out_len);
    g->to.out_len = 0;
    return rc;
}

/* [logprobs] echo + stream, as vLLM streams it: choice i's first chunk is its prompt's text, with the
 * prompt tokens' logprobs (the first one null) when asked, sent once they exist (the choice's first
 * token arrived) or the choice is over; the text offsets of its output continue after the prompt's. */
static int stream_echo(conn_t *c, int i)
{
    choice_t *g = &c->ch[i];
    if (!c->rq.echo || g->echoed || (g->got == 0 && !g->over)) return 0;
    g->echoed = 1;
    size_t plen = 0;
    char *ptext = echo_text(c, g, "", 0, &plen);
    if (!ptext) return -1;
    json_t *lp = NULL;
    if (c->rq.logprobs) {
        if (logprobs_json(c, g, 1, 0, 0, 0, &lp) != 0) {
            free(ptext);
            return -1;
        }
        g->lp_off = lp_end(lp, 0);
    }
    json_t *o = sits_srv_chunk(c->rq.kind, c->id, c->created, c->srv->model_name, i, NULL, ptext, plen, NULL,
                               c->rq.include_usage, lp);
    free(ptext);
    return pend_chunk(c, i, o);
}

/* [tool calls] The text a stream's tool-call parser reads: choice g's whole output so far (to.out keeps all of
 * it), or with a reasoning parser its content part so far (the splitter keeps it). */
static const char *tool_text(choice_t *g, size_t *len_p)
{
    if (g->rs_on) {
        *len_p = g->rs.content_len;
        return g->rs.content ? g->rs.content : "";
    }
    *len_p = g->to.out_len;
    return g->to.out ? g->to.out : "";
}

/* [tool calls] Choice i's text so far (tool_text) as OpenAI streams calls (tools.c's
 * sits_srv_tool_stream_step): the content that is content for sure, then one chunk per tool-call delta.
 * final: the output is over (it ended by itself: stop) -- what was held goes out as calls or content. */
static int stream_tool_calls(conn_t *c, int i, int final)
{
    choice_t *g = &c->ch[i];
    size_t text_len = 0, from = 0, n = 0;
    const char *text = tool_text(g, &text_len);
    json_t *deltas = NULL;
    if (sits_srv_tool_stream_step(c->rq.tool_parser, c->rq.tools, text, text_len, final, tool_seed(c, i), c->rq.tool_single, &g->ts,
                                  &from, &n, &deltas) != 0)
        return -1;
    int rc = stream_content(c, i, text + from, n);
    for (size_t k = 0; rc == 0 && k < json_array_size(deltas); k++) {
        json_t *d = json_pack("{s:[O]}", "tool_calls", json_array_get(deltas, k));
        rc = pend_chunk(c, i, d ? sits_srv_chunk_delta(c->id, c->created, c->srv->model_name, i, d, NULL, c->rq.include_usage, NULL)
                                : NULL);
    }
    json_decref(deltas);
    if (g->ts.heads > 0) g->tool_calls = 1;
    return rc;
}

/* [reasoning] Choice i's released text through its splitter, in output order: reasoning chunks
 * (delta.reasoning_content), then content -- content chunks, or with a tool-call parser the tool-call
 * stream over the content so far. final: the output is over; what the splitter held goes out too. */
static int stream_reasoning(conn_t *c, int i, int final)
{
    choice_t *g = &c->ch[i];
    if (sits_srv_reasoning_stream_push(&g->rs, g->to.out, g->to.out_len) != SITS_OK) return -1;
    g->to.out_len = 0;
    int reasoning = 0, r;
    const char *t = NULL;
    size_t n = 0;
    while ((r = sits_srv_reasoning_stream_next(&g->rs, final, &reasoning, &t, &n)) == 1) {
        int rc = reasoning ? stream_reasoning_text(c, i, t, n) : c->rq.tool_parser ? stream_tool_calls(c, i, 0)
                                                                                 : stream_content(c, i, t, n);
        if (rc != 0) return -1;
    }
    return r;
}

/* [reasoning] Choice i's released text through its harmony parser: reasoning chunks, content chunks and
 * tool-call deltas (a call's head {index, id, type, function {name, arguments ""}} once its header is
 * complete, then its arguments as they come) in output order; parallel_tool_calls false: the first call
 * only. final: the output is over; what the parser held goes out too. */
static int stream_harmony(conn_t *c, int i, int final)
{
    choice_t *g = &c->ch[i];
    if (sits_srv_harmony_push(&g->hm, g->to.out, g->to.out_len) != SITS_OK) return -1;
    g->to.out_len = 0;
    sits_srv_harmony_seg_t seg;
    int r;
    while ((r = sits_srv_harmony_next(&g->hm, final, &seg)) == 1) {
        int rc = 0;
        if (seg.kind == SITS_SRV_HARMONY_REASONING) {
            rc = stream_reasoning_text(c, i, seg.text, seg.len);
        } else if (seg.kind == SITS_SRV_HARMONY_CONTENT) {
            rc = stream_content(c, i, seg.text, seg.len);
        } else if (seg.call == 0 || !c->rq.tool_single) {
            char id[40];
            json_t *d;
            if (seg.kind == SITS_SRV_HARMONY_CALL) {
                sits_srv_tool_call_id(tool_seed(c, i), seg.call, id);
                d = json_pack("{s:[{s:i, s:s, s:s, s:{s:s%, s:s}}]}", "tool_calls", "index", seg.call, "id", id, "type",
                              "function", "function", "name", seg.text, seg.len, "arguments", "");
                g->tool_calls = 1;
            } else {
                d = json_pack("{s:[{s:i, s:{s:s%}}]}", "tool_calls", "index", seg.call, "function", "arguments", seg.text, seg.len);
            }
            rc = pend_chunk(c, i, d ? sits_srv_chunk_delta(c->id, c->created, c->srv->model_name, i, d, NULL, c->rq.include_usage,
                                                           NULL)
                                    : NULL);
        }
        if (rc != 0) return -1;
    }
    return r;
}

/* Released text of each choice -> one content chunk per choice that has some; [tool calls] with a
 * tool-call parser, content and tool-call deltas as the parser tells them apart; [reasoning] with a
 * reasoning parser, reasoning chunks first. */
static int stream_text(conn_t *c)
{
    for (int i = 0; i < c->n_ch; i++) {
        int rc = c->ch[i].hm_on ? stream_harmony(c, i, 0) : c->ch[i].rs_on ? stream_reasoning(c, i, 0)
               : c->rq.tool_parser ? stream_tool_calls(c, i, 0)
               : stream_echo(c, i) != 0 ? -1 : stream_choice_text(c, i);
        if (rc != 0) return -1;
    }
    return 0;
}

/* The end of a stream: last text, the finish chunks (or an error event), the usage chunk, [DONE]. */
static int stream_end(conn_t *c)
{
    sits_server_t *srv = c->srv;
    size_t len = 0;
    char *s;
    if (c->dl) dl_stopped(c);
    for (int i = 0; i < c->n_ch; i++) {
        choice_t *g = &c->ch[i];
        if (g->hm_on) {   /* [reasoning] harmony: what its parser held (it takes the calls too) */
            if (stream_harmony(c, i, 1) != 0) return -1;
            continue;
        }
        if (g->rs_on && stream_reasoning(c, i, 1) != 0) return -1;   /* [reasoning] what the splitter held */
        if (!c->rq.tool_parser) continue;
        /* [tool calls] what was held */
        if (stream_tool_calls(c, i, g->finish == SITS_FINISH_STOP) != 0) return -1;
        size_t text_len = 0;
        const char *text = tool_text(g, &text_len);
        if (g->finish != SITS_FINISH_STOP && g->ts.heads == 0 &&   /* cut short: no calls, as the whole response */
            stream_content(c, i, text + g->ts.content_sent, text_len - g->ts.content_sent) != 0)
            return -1;
        g->to.out_len = 0;
    }
    if (stream_text(c) != 0) return -1;
    if (gen_finish(c) == SITS_FINISH_ERROR) {
        sits_srv_error_t err;
        gen_failed(c, &err);
        s = sits_srv_error_sse(&err, &len);
        if (pend_add(c, s, len) != 0) return -1;
    } else {
        for (int i = 0; i < c->n_ch; i++) {
            choice_t *g = &c->ch[i];
            const char *empty = c->rq.kind == SITS_SRV_COMPLETIONS ? "" : NULL;   /* chat: delta {} */
            json_t *lp = NULL;
            if (c->rq.logprobs && g->n_lp < g->n_gen) {   /* tokens that made no text (eos, held bytes) */
                if (logprobs_json(c, g, 0, g->n_lp, g->n_gen, g->lp_off, &lp) != 0) return -1;
                g->n_lp = g->n_gen;
                g->lp_off = lp_end(lp, g->lp_off);
            }
            json_t *o = sits_srv_chunk(c->rq.kind, c->id, c->created, srv->model_name, i, NULL, empty, 0,
                                       g->tool_calls && g->finish == SITS_FINISH_STOP ? "tool_calls"
                                                                                      : sits_srv_finish_str(g->finish),
                                       c->rq.include_usage, lp);
            if (o && json_object_set_new(json_array_get(json_object_get(o, "choices"), 0), "stop_reason", stop_reason(c, g)) != 0) {
                json_decref(o);
                o = NULL;
            }
            if (pend_chunk(c, i, o) != 0) return -1;
        }
    }
    if (c->rq.include_usage) {
        s = sits_srv_usage_sse(c->rq.kind, c->id, c->created, srv->model_name, c->prompt_tokens, c->n_gen, cached_tokens(c), &len);
        if (pend_add(c, s, len) != 0) return -1;
    }
    s = strdup("data: [DONE]\n\n");
    if (pend_add(c, s, s ? strlen(s) : 0) != 0) return -1;
    c->stream_done = 1;
    gen_restore_timeout(c);
    return 0;
}

/* MHD asks for more of the stream: hand it what the pump queued; with nothing queued, park the
 * connection (returning 0 bytes) until the pump resumes it. */
static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    conn_t *c = cls;
    ssize_t ret;
    (void)pos;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        if (c->pend_off < c->pend_len) {
            size_t n = c->pend_len - c->pend_off;
            if (n > max) n = max;
            memcpy(buf, c->pend + c->pend_off, n);
            c->pend_off += n;
            ret = (ssize_t)n;
            break;
        }
        if (c->stream_done) {
            ret = MHD_CONTENT_READER_END_OF_STREAM;
            break;
        }
        if (c->gone) {
            ret = MHD_CONTENT_READER_END_WITH_ERROR;
            break;
        }
        if (c->over) {
            if (stream_end(c) != 0) {
                ret = MHD_CONTENT_READER_END_WITH_ERROR;
                break;
            }
            continue;
        }
        if (atomic_load(&c->srv->stopping)) {   /* the pump is gone: end the stream here */
            gen_abort(c);
            continue;
        }
        gen_park(c);
        ret = 0;
        break;
    }
    pthread_mutex_unlock(&c->mu);
    return ret;
}

static enum MHD_Result run_stream(conn_t *c)
{
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_reader, c, NULL);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result ok = MHD_queue_response(c->mc, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    if (ok == MHD_YES) {
        c->replied = 1;
        sits_srv_metrics_status(&c->srv->metrics, 200);
    }
    return ok;
}

/* One request of the pump's pass (caller holds gen_mu and c->mu). Returns 1 when it made progress. */
static int pump_one(conn_t *c, int stop, double t)
{
    int progress = 0;
    if (!c->over && !c->gone) {
        if (stop) {
            gen_abort(c);
            progress = 1;
        } else {
            progress = gen_poll(c);
            if (!c->over && c->rq.stream && stream_text(c) != 0) {
                SITS_ERROR(SITS_SUB_HTTP, "request %s: out of memory for the stream", c->id);
                c->gone = 1;
                gen_abort(c);
            }
        }
    }
    /* a parked connection is not watched by MHD: look for a client that went away ourselves */
    if (c->suspended && !c->over && t - c->t_check >= PEER_CHECK_S) {
        c->t_check = t;
        if (peer_closed(c->mc)) {
            SITS_INFO(SITS_SUB_HTTP, "request %s: client went away, cancelling", c->id);
            c->gone = 1;
            gen_abort(c);
        }
    }
    if (c->suspended && (c->over || c->gone || c->pend_off < c->pend_len)) {
        c->suspended = 0;
        MHD_resume_connection(c->mc);
        progress = 1;
    }
    return progress;
}

/* The pump: one thread moves every request's tokens from the scheduler to its connection and wakes
 * the connection's event loop; HTTP threads never block on generation. On stop it ends every request
 * still running (finish "abort") and resumes every parked connection (MHD_stop_daemon needs that). */
static void *pump_main(void *arg)
{
    sits_server_t *srv = arg;
    pthread_mutex_lock(&srv->gen_mu);
    for (;;) {
        int stop = atomic_load(&srv->stopping), progress = 0;
        double t = now_s();
        for (conn_t *c = srv->gen_head; c; c = c->gnext) {
            pthread_mutex_lock(&c->mu);
            progress |= pump_one(c, stop, t);
            pthread_mutex_unlock(&c->mu);
        }
        if (stop) break;
        /* HTTP threads waiting to add or drop a request: theirs until none waits (a pass making progress
         * at every step must not keep them out: admissions, /metrics and completions wait on them) */
        while (atomic_load(&srv->gen_waiters) > 0) pthread_cond_wait(&srv->gen_yield_cv, &srv->gen_mu);
        if (!progress) {
            struct timespec dl;
            clock_gettime(CLOCK_REALTIME, &dl);
            dl.tv_nsec += PUMP_IDLE_NS;
            if (dl.tv_nsec >= 1000000000L) { dl.tv_sec++; dl.tv_nsec -= 1000000000L; }
            pthread_cond_timedwait(&srv->gen_cv, &srv->gen_mu, &dl);
        }
    }
    pthread_mutex_unlock(&srv->gen_mu);
    return NULL;
}

static enum MHD_Result handle_generate(conn_t *c)
{
    sits_server_t *srv = c->srv;
    sits_srv_error_t err;
    if (c->started) return c->rq.stream ? MHD_YES : run_whole(c);   /* resumed by the pump */
    if (draining(srv)) {
        sits_srv_error_set(&err, 503, "server_error", "service_unavailable", NULL,
                           "the server is draining and admits no new requests");
        return reply_error(c, &err);
    }
    if (c->body_too_big) {
        sits_srv_error_set(&err, 413, "invalid_request_error", "request_too_large", NULL,
                           "the request body is larger than %zu bytes", srv->max_body);
        return reply_error(c, &err);
    }
    sits_srv_kind_t kind = c->route == R_CHAT ? SITS_SRV_CHAT : SITS_SRV_COMPLETIONS;
    const char *body = c->body ? c->body : "";
    sits_srv_resp_t *resp = NULL;   /* [translated APIs] the request's translation state */
    sits_srv_anth_t *anth = NULL;
    int rc = c->route == R_RESPONSES ? sits_srv_resp_parse(&srv->lim, body, c->body_len, &c->rq, &resp, &err)
             : c->route == R_MESSAGES ? sits_srv_anth_parse(&srv->lim, body, c->body_len, &c->rq, &anth, &err)
                                      : sits_srv_request_parse(&srv->lim, kind, body, c->body_len, &c->rq, &err);
    if (rc != 0) return reply_error(c, &err);
    c->dl = dialect_of(c->route);
    c->dl_st = resp ? (void *)resp : (void *)anth;
    c->rq_valid = 1;
    free(c->body);
    c->body = NULL;
    if (gen_start(c, &err) != 0) return reply_error(c, &err);
    return c->rq.stream ? run_stream(c) : run_whole(c);
}

/* ---------------- other endpoints ---------------- */

static enum MHD_Result handle_models(conn_t *c, const char *url)
{
    sits_server_t *srv = c->srv;
    if (c->route == R_MODEL && strcmp(url + strlen("/v1/models/"), srv->model_name) != 0) {
        sits_srv_error_t err;
        sits_srv_error_set(&err, 404, "invalid_request_error", "model_not_found", "model", "The model '%.200s' does not exist",
                           url + strlen("/v1/models/"));
        return reply_error(c, &err);
    }
    /* the card; the name as a JSON string (--served-model-name may hold any character) */
    json_t *one = json_pack("{s:s, s:s, s:I, s:s, s:i}", "id", srv->model_name, "object", "model", "created",
                            (json_int_t)srv->start_time, "owned_by", "sits-dist", "max_model_len", srv->lim.max_model_len);
    json_t *o = c->route == R_MODEL ? one : json_pack("{s:s, s:[o]}", "object", "list", "data", one);
    char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return reply_json(c, 200, body);
}

static enum MHD_Result handle_metrics(conn_t *c)
{
    sits_server_t *srv = c->srv;
    sits_sched_stats_t st;
    memset(&st, 0, sizeof st);
    if (srv->api->stats) srv->api->stats(srv->sched, &st);
    size_t len = 0;
    sits_otlp_stats_t ot;
    sits_otlp_get_stats(srv->otlp, &ot);
    char *body = sits_srv_metrics_render(&srv->metrics, srv->api->stats ? &st : NULL, srv->otlp ? &ot : NULL,
                                         atomic_load(&srv->inflight), &len);
    return reply(c, 200, "text/plain; version=0.0.4; charset=utf-8", body, len, NULL);
}

/* ---- chat page (issue 12): GET / serves the embedded page; open like /health (the page asks for
 * the API key itself when /v1/ answers 401) ---- */
static enum MHD_Result handle_page(conn_t *c)
{
    static const char *const hdrs[] = { MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache", NULL };
    char *body = malloc(sits_srv_chat_page_len + 1);
    if (body) memcpy(body, sits_srv_chat_page, sits_srv_chat_page_len + 1);
    return reply(c, 200, "text/html; charset=utf-8", body, sits_srv_chat_page_len, hdrs);
}
/* ---- end chat page ---- */

/* /tokenize, /detokenize (vLLM's shapes; api.c) */
static enum MHD_Result handle_tokenize(conn_t *c)
{
    sits_srv_error_t err;
    if (c->body_too_big) {
        sits_srv_error_set(&err, 413, "invalid_request_error", "request_too_large", NULL, "the request body is too large");
        return reply_error(c, &err);
    }
    const char *body = c->body ? c->body : "";
    char *out = c->route == R_MESSAGES_COUNT ? sits_srv_anth_count_tokens(&c->srv->lim, body, c->body_len, &err)   /* [anthropic] */
                                             : sits_srv_tokenize(&c->srv->lim, c->route == R_DETOKENIZE, body, c->body_len, &err);
    return out ? reply_json(c, 200, out) : reply_error(c, &err);
}

/* ---------------- routing ---------------- */

static route_t route_of(const char *url)
{
    if (strcmp(url, "/v1/completions") == 0) return R_COMPLETIONS;
    if (strcmp(url, "/v1/chat/completions") == 0) return R_CHAT;
    if (strcmp(url, "/v1/responses") == 0) return R_RESPONSES;
    if (strncmp(url, "/v1/responses/", 14) == 0) return R_RESPONSE_ID;
    if (strcmp(url, "/v1/messages") == 0) return R_MESSAGES;   /* [anthropic] */
    if (strcmp(url, "/v1/messages/count_tokens") == 0) return R_MESSAGES_COUNT;
    if (strcmp(url, "/v1/models") == 0) return R_MODELS;
    if (strncmp(url, "/v1/models/", 11) == 0 && url[11]) return R_MODEL;
    if (strcmp(url, "/health") == 0) return R_HEALTH;
    if (strcmp(url, "/metrics") == 0) return R_METRICS;
    if (strcmp(url, "/") == 0) return R_PAGE;   /* chat page (issue 12) */
    if (strcmp(url, "/tokenize") == 0) return R_TOKENIZE;      /* vLLM's paths (no /v1/) */
    if (strcmp(url, "/detokenize") == 0) return R_DETOKENIZE;
    return R_NONE;
}

/* The request's API key: the Authorization header's "Bearer <key>", else [anthropic] the x-api-key header that
 * Anthropic's clients send (NULL: neither). */
static const char *request_key(struct MHD_Connection *mc)
{
    const char *h = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) return MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "x-api-key");
    h += 7;
    while (*h == ' ') h++;
    return h;
}

/* With a tenants file: the tenant of the request's key, -1 when missing or unknown. */
static int auth_tenant(const sits_server_t *srv, struct MHD_Connection *mc)
{
    const char *h = request_key(mc);
    return h ? sits_tenants_find_key(srv->tenants, h) : -1;
}

/* Constant-time comparison of the request's key with the server's. */
static int auth_ok(const sits_server_t *srv, struct MHD_Connection *mc)
{
    const char *h = request_key(mc);
    if (!h) return 0;
    size_t a = strlen(h), b = strlen(srv->api_key);
    unsigned char diff = (unsigned char)(a != b);
    for (size_t i = 0; i < b; i++) diff |= (unsigned char)(h[i < a ? i : 0] ^ srv->api_key[i]);
    return diff == 0 && a > 0;
}

/* First call of a request: everything decidable from the request line and headers. Returns 1 when a
 * response was queued (*ret set). */
static int early_checks(conn_t *c, const char *url, const char *method, enum MHD_Result *ret)
{
    sits_server_t *srv = c->srv;
    sits_srv_error_t err;
    int is_post_route = has_body(c->route);
    int authed = strncmp(url, "/v1/", 4) == 0 || c->route == R_TOKENIZE || c->route == R_DETOKENIZE;
    int get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c->mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    const sock_ctx_t *sc = ci ? ci->socket_context : NULL;
    if (sc && sc->over_limit) {
        atomic_fetch_add(&srv->conns_refused, 1);
        sits_srv_error_set(&err, 503, "server_error", "too_many_connections", NULL,
                           "the server holds too many connections (from this client or in all); retry later");
        *ret = reply_error(c, &err);
        return 1;
    }
    if (c->route == R_NONE) {
        sits_srv_error_set(&err, 404, "invalid_request_error", "not_found", NULL, "no such endpoint: %s %.200s",
                           method, url);
    } else if (is_post_route ? strcmp(method, "POST") != 0 : !get && c->route != R_RESPONSE_ID /* [responses] 404 for any */) {
        sits_srv_error_set(&err, 405, "invalid_request_error", "method_not_allowed", NULL,
                           "method %s is not allowed on %.200s (use %s)", method, url, is_post_route ? "POST" : "GET");
    } else if (srv->tenants && authed && (c->tenant = auth_tenant(srv, c->mc)) < 0) {
        c->tenant = 0;
        sits_srv_error_set(&err, 401, "authentication_error", "invalid_api_key", NULL,
                           "missing or unknown API key: send 'Authorization: Bearer <key>' with a key of the tenants file");
    } else if (!srv->tenants && srv->api_key && authed && !auth_ok(srv, c->mc)) {
        sits_srv_error_set(&err, 401, "authentication_error", "invalid_api_key", NULL,
                           "missing or invalid API key: send 'Authorization: Bearer <key>' (or 'x-api-key: <key>')");
    } else if ((c->route == R_COMPLETIONS || c->route == R_CHAT || c->route == R_RESPONSES || c->route == R_MESSAGES) && draining(srv)) {
        sits_srv_error_set(&err, 503, "server_error", "service_unavailable", NULL,
                           "the server is draining and admits no new requests");
    } else {
        const char *cl = MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (!is_post_route || !cl || strtoull(cl, NULL, 10) <= srv->max_body) return 0;
        sits_srv_error_set(&err, 413, "invalid_request_error", "request_too_large", NULL,
                           "the request body (%s bytes) is larger than %zu bytes", cl, srv->max_body);
    }
    *ret = reply_error(c, &err);
    return 1;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *mc, const char *url, const char *method,
                              const char *version, const char *upload_data, size_t *upload_data_size, void **con_cls)
{
    sits_server_t *srv = cls;
    conn_t *c = *con_cls;
    (void)version;
    if (!c) {
        c = calloc(1, sizeof *c);
        if (!c) return MHD_NO;
        c->srv = srv;
        c->mc = mc;
        pthread_mutex_init(&c->mu, NULL);
        c->t_arrival = now_s();
        c->route = route_of(url);
        *con_cls = c;
        enum MHD_Result ret;
        if (early_checks(c, url, method, &ret)) return ret;
        return MHD_YES;
    }
    if (c->replied) {   /* answered early; drop whatever body still comes */
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (!has_body(c->route)) return MHD_YES;
        if (now_s() - c->t_arrival > srv->read_timeout) {   /* a body that trickles in: close */
            SITS_INFO(SITS_SUB_HTTP, "request body not complete after %.0f s: closing the connection", srv->read_timeout);
            return MHD_NO;
        }
        if (c->body_too_big || c->body_len + n > c->srv->max_body) {
            c->body_too_big = 1;
            return MHD_YES;
        }
        if (c->body_len + n + 1 > c->body_cap) {
            size_t cap = c->body_cap ? c->body_cap : 4096;
            while (cap < c->body_len + n + 1) cap *= 2;
            char *b = realloc(c->body, cap);
            if (!b) return MHD_NO;
            c->body = b;
            c->body_cap = cap;
        }
        memcpy(c->body + c->body_len, upload_data, n);
        c->body_len += n;
        c->body[c->body_len] = 0;
        return MHD_YES;
    }
    switch (c->route) {
    case R_COMPLETIONS:
    case R_CHAT:
    case R_RESPONSES:
    case R_MESSAGES: return handle_generate(c);
    case R_RESPONSE_ID: {   /* [responses] nothing is stored */
        sits_srv_error_t err;
        sits_srv_resp_not_found(url + 14, &err);
        return reply_error(c, &err);
    }
    case R_MODELS:
    case R_MODEL: return handle_models(c, url);
    case R_METRICS: return handle_metrics(c);
    case R_PAGE: return handle_page(c);   /* chat page (issue 12) */
    case R_TOKENIZE:
    case R_DETOKENIZE:
    case R_MESSAGES_COUNT: return handle_tokenize(c);
    case R_HEALTH:
        if (draining(srv)) return reply_json(c, 503, strdup("{\"status\":\"draining\"}"));
        return reply_json(c, 200, strdup("{\"status\":\"ok\"}"));
    default: return MHD_NO;
    }
}

static void completed(void *cls, struct MHD_Connection *mc, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    sits_server_t *srv = cls;
    conn_t *c = *con_cls;
    (void)mc;
    if (!c) return;
    *con_cls = NULL;
    if (c->in_gen) {   /* off the pump's list: from here on this thread alone touches c */
        gen_lock(srv);
        if (c->gprev) c->gprev->gnext = c->gnext;
        else srv->gen_head = c->gnext;
        if (c->gnext) c->gnext->gprev = c->gprev;
        gen_unlock(srv);
        c->in_gen = 0;
    }
    if (c->started) {
        if (!c->over) {   /* the client went away (or MHD gave up on it) before the end */
            if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK)
                SITS_INFO(SITS_SUB_HTTP, "request %s: connection ended (%d) before the response did", c->id, (int)toe);
            gen_cancel(c);
            gen_over(c, SITS_FINISH_CANCELLED);
        }
        sits_finish_t f = gen_finish(c);
        sits_srv_metrics_done(&srv->metrics, c->t_over - c->t_arrival, c->prompt_tokens, c->n_gen, f, c->tenant,
                              c->t_first > 0 ? c->t_first - c->t_arrival : -1.0,
                              c->n_gen > 1 ? (c->t_over - c->t_first) / (c->n_gen - 1) : -1.0);
        if (srv->tenants) atomic_fetch_sub(&srv->t_inflight[c->tenant], 1);
        SITS_INFO(SITS_SUB_HTTP, "request %s: %d prompt + %d generated tokens (%d choices), %s, %.3f s", c->id, c->prompt_tokens,
                  c->n_gen, c->n_ch, sits_srv_finish_str(f), c->t_over - c->t_arrival);
        atomic_fetch_sub(&srv->inflight, 1);
    }
    for (int i = 0; c->ch && i < c->n_ch; i++) srv->api->release(c->ch[i].req);
    int n = (c->rq.n > 0 ? c->rq.n : 1) * (1 + c->rq.n_more);
    for (int i = 0; c->ch && i < n; i++) {
        if (c->ch[i].to_valid) sits_srv_textout_fini(&c->ch[i].to);
        free(c->ch[i].ids);
        sits_srv_reasoning_stream_fini(&c->ch[i].rs);
        sits_srv_harmony_fini(&c->ch[i].hm);
    }
    free(c->ch);
    if (c->rq_valid) sits_srv_request_free(&c->rq);
    if (c->dl) c->dl->free(c->dl_st);
    free(c->body);
    free(c->pend);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* ---------------- connections ---------------- */

static unsigned ip_hash(const unsigned char *a, int len)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < len; i++) h = (h ^ a[i]) * 1099511628211ull;
    return (unsigned)(h % IP_BUCKETS);
}

/* The entry of addr with its count raised (NULL: not an IP address, or out of memory). Holds cn_mu. */
static ip_entry_t *ip_ref(sits_server_t *srv, const struct sockaddr *sa)
{
    unsigned char a[16];
    int len;
    if (sa->sa_family == AF_INET) {
        memcpy(a, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        len = 4;
    } else if (sa->sa_family == AF_INET6) {
        memcpy(a, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
        len = 16;
    } else {
        return NULL;
    }
    unsigned h = ip_hash(a, len);
    ip_entry_t *e = srv->ip[h];
    while (e && (e->len != len || memcmp(e->addr, a, (size_t)len) != 0)) e = e->next;
    if (!e) {
        e = calloc(1, sizeof *e);
        if (!e) return NULL;
        memcpy(e->addr, a, (size_t)len);
        e->len = len;
        e->next = srv->ip[h];
        srv->ip[h] = e;
    }
    e->count++;
    return e;
}

static void ip_unref(sits_server_t *srv, ip_entry_t *e)
{
    if (--e->count > 0) return;
    ip_entry_t **pp = &srv->ip[ip_hash(e->addr, e->len)];
    while (*pp != e) pp = &(*pp)->next;
    *pp = e->next;
    free(e);
}

/* MHD_OPTION_NOTIFY_CONNECTION: counts open connections, in all and per client address, and marks a
 * connection opened beyond a limit (its requests get 503 + Retry-After, see early_checks). Idle
 * connections cost no thread (event loop), only a socket and MHD's per-connection memory. */
static void conn_notify(void *cls, struct MHD_Connection *mc, void **socket_context, enum MHD_ConnectionNotificationCode code)
{
    sits_server_t *srv = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        sock_ctx_t *sc = calloc(1, sizeof *sc);
        if (!sc) return;
        sc->t_open = now_s();
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        pthread_mutex_lock(&srv->cn_mu);
        srv->n_conns++;
        if (ci && ci->client_addr) sc->ip = ip_ref(srv, ci->client_addr);
        sc->over_limit = srv->n_conns > srv->max_conns ||
                         (srv->max_per_client > 0 && sc->ip && sc->ip->count > srv->max_per_client);
        pthread_mutex_unlock(&srv->cn_mu);
        *socket_context = sc;
        return;
    }
    sock_ctx_t *sc = *socket_context;
    if (!sc) return;
    pthread_mutex_lock(&srv->cn_mu);
    srv->n_conns--;
    if (sc->ip) ip_unref(srv, sc->ip);
    pthread_mutex_unlock(&srv->cn_mu);
    free(sc);
    *socket_context = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char b[512];
    vsnprintf(b, sizeof b, fmt, ap);
    size_t n = strlen(b);
    while (n && (b[n - 1] == '\n' || b[n - 1] == '\r')) b[--n] = 0;
    /* our own reader/handler refusals when a client went away: already logged (INFO) where they happen */
    if (strstr(b, "application error generating response") || strstr(b, "Application reported internal error"))
        SITS_DEBUG(SITS_SUB_HTTP, "microhttpd: %s", b);
    else
        SITS_WARN(SITS_SUB_HTTP, "microhttpd: %s", b);
}

/* ---------------- lifecycle ---------------- */

static sits_status_t open_listener(const char *host, int port, int *fd_p, int *port_p, int *v6_p)
{
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
    struct addrinfo *res = NULL;
    int e = getaddrinfo(host, ps, &hints, &res);
    if (e != 0) {
        SITS_ERROR(SITS_SUB_HTTP, "cannot resolve host '%s': %s", host, gai_strerror(e));
        return SITS_ERR_INVALID;
    }
    int fd = -1, err = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 4096) == 0) {   /* capped by somaxconn */
            *v6_p = ai->ai_family == AF_INET6;
            break;
        }
        err = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        SITS_ERROR(SITS_SUB_HTTP, "cannot listen on %s:%d: %s", host, port, strerror(err));
        return SITS_ERR_IO;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
        SITS_ERROR(SITS_SUB_HTTP, "getsockname: %s", strerror(errno));
        close(fd);
        return SITS_ERR_IO;
    }
    *port_p = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                       : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    *fd_p = fd;
    return SITS_OK;
}

static void server_free(sits_server_t *s)
{
    free(s->host);
    free(s->api_key);
    free(s->model_name);
    for (int i = 0; i < IP_BUCKETS; i++)
        while (s->ip[i]) {
            ip_entry_t *e = s->ip[i];
            s->ip[i] = e->next;
            free(e);
        }
    pthread_mutex_destroy(&s->gen_mu);
    pthread_cond_destroy(&s->gen_cv);
    pthread_cond_destroy(&s->gen_yield_cv);
    pthread_mutex_destroy(&s->cn_mu);
    pthread_mutex_destroy(&s->gmu);
    sits_srv_metrics_fini(&s->metrics);
    sits_srv_gcache_destroy(s->lim.gcache);
    sits_grammar_vocab_destroy(s->gvocab);
    free(s);
}

/* Room for max_conns sockets: the soft file limit raised towards the hard one (logged when short). */
static void raise_fd_limit(unsigned want)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= want) return;
    rlim_t cur = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want ? want : rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) rl.rlim_cur = cur;
    if (rl.rlim_cur < want)
        SITS_WARN(SITS_SUB_HTTP, "open files limited to %llu (hard limit): fewer than the %u connections allowed",
                  (unsigned long long)rl.rlim_cur, want);
}

sits_status_t sits_server_create(const sits_server_params_t *p, const sits_tokenizer_t *tok,
                                 const sits_sched_api_t *api, void *sched, sits_server_t **srv_p)
{
    if (!p || !tok || !api || !api->submit || !api->next || !api->cancel || !api->release || !p->model_name ||
        !p->model_name[0] || p->max_model_len <= 0 || p->port < 0 || p->port > 65535) {
        SITS_ERROR(SITS_SUB_HTTP, "server: bad parameters (model name, max_model_len > 0, port, api table required)");
        return SITS_ERR_INVALID;
    }
    sits_status_t st = SITS_OK;
    sits_server_t *s = calloc(1, sizeof *s);
    if (!s) return SITS_ERR_NOMEM;
    sits_srv_metrics_init(&s->metrics);
    pthread_mutex_init(&s->gen_mu, NULL);
    pthread_cond_init(&s->gen_cv, NULL);
    pthread_cond_init(&s->gen_yield_cv, NULL);
    pthread_mutex_init(&s->cn_mu, NULL);
    pthread_mutex_init(&s->gmu, NULL);
    s->tenants = p->tenants && p->tenants->n > 0 ? p->tenants : NULL;
    s->metrics.tenants = s->tenants;
    s->host = strdup(p->host && p->host[0] ? p->host : "127.0.0.1");
    s->model_name = strdup(p->model_name);
    s->api_key = p->api_key && p->api_key[0] ? strdup(p->api_key) : NULL;
    SITS_ALLOC_CHECK_GOTO(s->host, st, err_free);
    SITS_ALLOC_CHECK_GOTO(s->model_name, st, err_free);
    if (p->api_key && p->api_key[0]) SITS_ALLOC_CHECK_GOTO(s->api_key, st, err_free);

    if (!sits_chat_available(p->chat))
        SITS_WARN(SITS_SUB_HTTP, "the model has no chat template: /v1/chat/completions will answer 400 "
                                 "(use --chat-template FILE|NAME)");
    s->max_body = p->max_body_bytes ? p->max_body_bytes : (size_t)1 << 20;
    s->idle_timeout = p->idle_timeout_s > 0 ? (unsigned)p->idle_timeout_s : 60u;
    s->seed = p->seed;
    s->read_timeout = p->read_timeout_s > 0 ? p->read_timeout_s : 30.0;
    s->max_conns = p->max_connections > 0 ? p->max_connections : 10000;
    s->max_per_client = p->max_connections_per_client;
    s->drain_signals = p->drain_signals;
    s->otlp = p->otlp;
    s->api = api;
    s->sched = sched;
    s->n_stop_ids = sits_tokenizer_stop_ids(tok, &s->stop_ids);
    int tool_parser = sits_srv_tool_parser_from_name(p->tool_call_parser);
    if (tool_parser < 0) {
        SITS_ERROR(SITS_SUB_HTTP, "--tool-call-parser '%s' is not one of hermes, llama3_json, mistral, qwen3_coder, openai, auto",
                   p->tool_call_parser);
        st = SITS_ERR_INVALID;
        goto err_free;
    }
    if (tool_parser == SITS_SRV_TOOLS_AUTO && sits_chat_available(p->chat))
        SITS_INFO(SITS_SUB_HTTP, "tool calls: the chat template's format is %s",
                  sits_srv_tool_parser_name(sits_srv_tool_parser_detect(sits_chat_template_text(p->chat, 1))));
    int reasoning = sits_srv_reasoning_from_name(p->reasoning_parser);
    if (reasoning < 0) {
        SITS_ERROR(SITS_SUB_HTTP, "--reasoning-parser '%s' is not one of deepseek_r1, qwen3, mistral, openai_gptoss, auto",
                   p->reasoning_parser);
        st = SITS_ERR_INVALID;
        goto err_free;
    }
    if (reasoning == SITS_SRV_REASONING_AUTO) {
        reasoning = sits_srv_reasoning_auto(p->chat);
        SITS_INFO(SITS_SUB_HTTP, "reasoning: the chat template's parser is %s", sits_srv_reasoning_name(reasoning));
    }
    if (reasoning == SITS_SRV_REASONING_HARMONY) {   /* harmony's markup: special tokens the detokenizer keeps */
        static const char *const mk[] = { "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>",
                                          "<|return|>", "<|call|>" };
        for (size_t k = 0; k < sizeof mk / sizeof mk[0]; k++) {
            int32_t id = sits_tokenizer_token_to_id(tok, mk[k]);
            if (id >= 0) s->hm_ids[s->n_hm_ids++] = id;
        }
    }
    static const char *const ms[] = { "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]" };
    for (size_t k = 0; k < sizeof ms / sizeof ms[0]; k++) {   /* [tool calls] Mistral's markup, where the vocabulary has it */
        int32_t id = sits_tokenizer_token_to_id(tok, ms[k]);
        if (id >= 0 && sits_tokenizer_is_special(tok, id)) s->ms_ids[s->n_ms_ids++] = id;
    }
    s->own_eos = sits_tokenizer_own_eos_id(tok);
    static const char *const th[] = { "[THINK]", "[/THINK]" };
    for (size_t k = 0; k < sizeof th / sizeof th[0]; k++) {   /* [reasoning] mistral's markup, where the vocabulary has it */
        int32_t id = sits_tokenizer_token_to_id(tok, th[k]);
        if (id >= 0 && sits_tokenizer_is_special(tok, id)) s->th_ids[s->n_th_ids++] = id;
    }
    sits_srv_gcache_t *gcache = NULL;
    SITS_CHECK_GOTO(sits_srv_gcache_create(&gcache), st, err_free);
    s->lim = (sits_srv_limits_t){
        .tok = tok, .model_name = s->model_name, .max_model_len = p->max_model_len,
        .vocab_size = p->vocab_size > 0 ? p->vocab_size : (int)sits_tokenizer_vocab_size(tok),
        .default_max_tokens = p->default_max_tokens > 0 ? p->default_max_tokens : 16,
        .chat = p->chat, .gen = p->gen, .tool_parser = tool_parser, .n_stop_ids = (int)s->n_stop_ids, .gcache = gcache,
        .reasoning = reasoning,
    };
    s->start_time = (long long)time(NULL);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    s->id_salt = mix64((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^ (uint64_t)getpid();

    int fd = -1, v6 = 0;
    SITS_CHECK_GOTO(open_listener(s->host, p->port, &fd, &s->port, &v6), st, err_free);
    /* the server's threads (pump, MHD's pool) inherit a mask that blocks SIGTERM / SIGINT: they leave
     * the handler to the main thread, and a sent signal stays visible to draining() until handled */
    sigset_t block, old_mask;
    sigemptyset(&block);
    if (s->drain_signals) {
        sigaddset(&block, SIGTERM);
        sigaddset(&block, SIGINT);
    }
    pthread_sigmask(SIG_BLOCK, &block, &old_mask);
    /* the pump first: a request submitted by MHD is on its list */
    if (pthread_create(&s->pump, NULL, pump_main, s) != 0) {
        SITS_ERROR(SITS_SUB_HTTP, "cannot start the generation pump thread");
        pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
        close(fd);
        st = SITS_ERR_NOMEM;
        goto err_free;
    }
    s->pump_started = 1;
    /* an event loop: epoll on a pool of threads; connections waiting for tokens are suspended */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG |
                     (v6 ? MHD_USE_IPv6 : 0);
    unsigned pool = p->http_threads > 0 ? (unsigned)p->http_threads : 4u;
    /* MHD's own limit lies above ours, so that a connection past ours is still answered (503), not dropped */
    unsigned hard = (unsigned)s->max_conns + MHD_LIMIT_SLACK;
    raise_fd_limit(hard + 64);
    s->mhd = MHD_start_daemon(flags, 0, NULL, NULL, handle, s,
                              MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,   /* first, or MHD logs some to stderr */
                              MHD_OPTION_LISTEN_SOCKET, fd,
                              MHD_OPTION_NOTIFY_COMPLETED, completed, s,
                              MHD_OPTION_NOTIFY_CONNECTION, conn_notify, s,
                              MHD_OPTION_CONNECTION_TIMEOUT, s->idle_timeout,
                              MHD_OPTION_CONNECTION_LIMIT, hard,
                              MHD_OPTION_THREAD_POOL_SIZE, pool,
                              MHD_OPTION_END);
    pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
    if (!s->mhd) {
        SITS_ERROR(SITS_SUB_HTTP, "MHD_start_daemon failed on %s:%d", s->host, s->port);
        close(fd);
        st = SITS_ERR_IO;
        goto err_stop_pump;
    }
    SITS_INFO(SITS_SUB_HTTP, "serving '%s' on http://%s:%d (auth %s, max body %zu bytes, chat template %s)",
              s->model_name, s->host, s->port, s->api_key ? "on" : "off", s->max_body,
              sits_chat_source(p->chat));
    *srv_p = s;
    return SITS_OK;
err_stop_pump:
    atomic_store(&s->stopping, 1);
    pthread_join(s->pump, NULL);
err_free:
    server_free(s);
    return st;
}

int sits_server_port(const sits_server_t *srv)
{
    return srv->port;
}

void sits_server_stop_admitting(sits_server_t *srv)
{
    atomic_store(&srv->draining, 1);
    SITS_INFO(SITS_SUB_HTTP, "draining: new requests get 503, %d in flight", atomic_load(&srv->inflight));
}

void sits_server_drain_signal(sits_server_t *srv)
{
    atomic_store(&srv->draining, 1);
}

int sits_server_inflight(const sits_server_t *srv)
{
    return atomic_load(&((sits_server_t *)srv)->inflight);
}

void sits_server_destroy(sits_server_t *srv)
{
    if (!srv) return;
    atomic_store(&srv->stopping, 1);
    /* the pump's last pass ends what still runs (finish "abort") and resumes every parked connection */
    pthread_mutex_lock(&srv->gen_mu);
    pthread_cond_signal(&srv->gen_cv);
    pthread_mutex_unlock(&srv->gen_mu);
    if (srv->pump_started) pthread_join(srv->pump, NULL);
    MHD_stop_daemon(srv->mhd);   /* closes the sockets, joins the event-loop threads */
    server_free(srv);
}
