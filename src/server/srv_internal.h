/* srv_internal.h -- pieces of the HTTP front-end shared by its files (not a public contract):
 *   api.c      request parsing/validation and OpenAI-shaped JSON bodies (responses, chunks, errors)
 *   textout.c  incremental detokenization + stop-string matching with hold-back
 *   reasoning.c [reasoning] a reasoning model's thinking apart from its answer (--reasoning-parser)
 *   harmony.c  [reasoning] gpt-oss's harmony messages: reasoning, content and tool calls (openai_gptoss)
 *   responses.c [responses] POST /v1/responses as a chat request, its output in Responses shapes (responses.h)
 *   anthropic.c [anthropic] POST /v1/messages (Anthropic's Messages API) the same way (anthropic.h)
 *   translate.c [translated APIs] what those two share: the hooks server.c calls, the body, named SSE events
 *   metrics.c  counters and histograms, Prometheus text rendering
 *   server.c   libmicrohttpd daemon, routing, auth, body limits, the generation loops
 * Invariant: every text these files hand to a client is valid UTF-8. */
#ifndef SITS_SERVER_SRV_INTERNAL_H
#define SITS_SERVER_SRV_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include "sched/sched.h"
#include "sched/tenants.h"
#include "server/server.h"
#include "model/config.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

enum { SITS_SRV_MAX_STOP = 4, SITS_SRV_MAX_STOP_LEN = 256, SITS_SRV_MAX_N = 64, SITS_SRV_MAX_CHOICES = 256 };

/* [n] One more prompt of a batched completions request. */
typedef struct {
    int32_t *ids;             /* malloc'd */
    int n;
    char *echo;               /* its text when given as text and echo is on (malloc'd), else NULL */
    size_t echo_len;
} sits_srv_prompt_t;

typedef enum { SITS_SRV_COMPLETIONS = 0, SITS_SRV_CHAT = 1 } sits_srv_kind_t;

/* An OpenAI-style error: {"error": {"message", "type", "param", "code"}} with an HTTP status. */
typedef struct {
    int status;
    const char *type;     /* "invalid_request_error", "authentication_error", ... (static strings) */
    const char *code;     /* NULL -> null */
    const char *param;    /* NULL -> null */
    char message[512];
} sits_srv_error_t;

/* [structured output] compiled grammars shared among requests of the same constraint (tools.c) */
enum { SITS_SRV_GCACHE = 8 };
typedef struct {
    pthread_mutex_t mu;
    char *key[SITS_SRV_GCACHE];
    struct sits_grammar *g[SITS_SRV_GCACHE];
    uint64_t used[SITS_SRV_GCACHE], tick;
} sits_srv_gcache_t;
sits_status_t sits_srv_gcache_create(sits_srv_gcache_t **c_p);
void sits_srv_gcache_destroy(sits_srv_gcache_t *c);

/* What the server needs to validate a request (read-only after create). */
typedef struct {
    const sits_tokenizer_t *tok;
    const char *model_name;
    int max_model_len;
    int vocab_size;
    int default_max_tokens;
    const sits_chat_t *chat;     /* the model's chat template(s); none loaded: chat requests get 400 */
    sits_gen_defaults_t gen;     /* generation_config.json sampling defaults for fields a request leaves unset */
    int tool_parser;             /* [tool calls] SITS_SRV_TOOLS_* (--tool-call-parser); AUTO: from the template */
    int n_stop_ids;              /* the model's stop ids (constrained output needs one to end) */
    int reasoning;               /* [reasoning] SITS_SRV_REASONING_* (--reasoning-parser; auto resolved at start) */
    sits_srv_gcache_t *gcache;   /* [structured output] shared grammars (the pointer is fixed; NULL: none) */
} sits_srv_limits_t;

/* [tool calls] output formats (tools.c) */
enum { SITS_SRV_TOOLS_NONE = 0, SITS_SRV_TOOLS_HERMES = 1, SITS_SRV_TOOLS_LLAMA3 = 2, SITS_SRV_TOOLS_MISTRAL = 3,
       SITS_SRV_TOOLS_AUTO = 4, SITS_SRV_TOOLS_OPENAI = 5 /* harmony (gpt-oss): harmony.c parses the calls */,
       SITS_SRV_TOOLS_QWEN3_CODER = 6 /* XML calls (Qwen3-Coder, Qwen3.5): the values typed by the request's tools */ };

/* A validated request. */
typedef struct {
    sits_srv_kind_t kind;
    int32_t *prompt;          /* malloc'd */
    int n_prompt;
    int max_tokens;
    sits_sample_params_t sample;
    int has_seed;
    int ignore_eos;
    int no_speculation;       /* [speculative] "speculative": false opts out of --speculative-config */
    uint64_t cache_salt;      /* [prefix cache] vLLM's cache_salt, hashed (0: none) */
    int add_special;          /* add_special_tokens (vLLM's; default: completions 1, chat 0) */
    char *stop[SITS_SRV_MAX_STOP];   /* malloc'd, non-empty, valid UTF-8 */
    size_t stop_len[SITS_SRV_MAX_STOP];
    int n_stop;
    int stream;
    int include_usage;
    int usage_each;           /* vLLM's stream_options.continuous_usage_stats (with include_usage): every chunk carries the
                               * usage of its choice so far */
    int n;                    /* [n] choices per prompt, each its own sequence (1..SITS_SRV_MAX_N) */
    sits_srv_prompt_t *more;  /* [n] prompts 2.. of a batched completions prompt (choice i: prompt i / n) */
    int n_more;
    /* [logprobs] completions: logprobs N (top N); chat: logprobs true + top_logprobs N. echo
     * (completions): the prompt text (echo_text, malloc'd) precedes the output, and with logprobs the
     * prompt tokens are scored. max_tokens 0 (echo only): scoring, no output tokens. */
    int logprobs, top_logprobs, echo;
    int lp_ids;               /* return_tokens_as_token_ids (vLLM): tokens as "token_id:N" */
    int return_ids;           /* return_token_ids (vLLM): prompt_token_ids and the output's token_ids beside the text
                               * (streamed: the prompt's in the first chunk, each chunk's own ids) */
    /* [sampling controls] (penalties and min_p are in sample) */
    sits_sample_bias_t *bias;      /* logit_bias, malloc'd */
    int n_bias, min_tokens;
    int32_t *stop_token_ids;       /* malloc'd; with the model's stop ids they end generation */
    int n_stop_token_ids;
    int32_t *bad_ids, *bad_off;    /* [bad_words] the words' token sequences (sits_req_params_t), malloc'd */
    int n_bad;
    int include_stop_str, skip_special;
    char *echo_text;
    size_t echo_len;
    /* [structured output] the compiled constraint (NULL: none), handed to the scheduler at submit */
    struct sits_grammar *grammar;
    int restricted;                /* [allowed_token_ids] grammar is another constraint restricted to the ids */
    int tool_parser;          /* [tool calls] parse the output into tool_calls with this format (0: no) */
    int tool_forced;          /* tool_choice required / named: the grammar forces the call */
    int tool_single;          /* parallel_tool_calls false: at most one call is returned */
    struct json_t *tools;     /* [tool calls] qwen3_coder: the request's tools (a reference), which type the values */
    int reasoning;            /* [reasoning] chat: split the output with this parser (0: no) */
    int reasoning_closed;     /* [reasoning] the rendered prompt's last marker is </think> */
    int include_reasoning;    /* [reasoning] vLLM's include_reasoning (default true): false drops the reasoning */
} sits_srv_request_t;

/* [logprobs] The "logprobs" member of one choice: completions' {tokens, token_logprobs, top_logprobs,
 * text_offset} (prompt entries first when n_plp > 0, plp[0] scored null) or chat's {content: [...]};
 * text_offset counts from text_base; as_ids: tokens as "token_id:N". Returns a new reference (NULL: out of memory). */
json_t *sits_srv_logprobs_json(sits_srv_kind_t kind, const sits_tokenizer_t *tok, const sits_logprob_t *plp, int n_plp,
                               const int32_t *prompt, const sits_logprob_t *glp, int n_glp, size_t text_base, int as_ids);

/* api.c */
/* Parses and validates body (len bytes). On success fills req (free with sits_srv_request_free) and
 * returns 0; else fills err and returns -1. */
int sits_srv_request_parse(const sits_srv_limits_t *lim, sits_srv_kind_t kind, const char *body, size_t len,
                           sits_srv_request_t *req, sits_srv_error_t *err);
void sits_srv_request_free(sits_srv_request_t *req);
void sits_srv_error_set(sits_srv_error_t *err, int status, const char *type, const char *code, const char *param,
                        const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* malloc'd JSON text of the error body. */
char *sits_srv_error_json(const sits_srv_error_t *err);
const char *sits_srv_finish_str(sits_finish_t f);   /* "stop", "length", "abort", ... */
/* One choice of a whole response; logprobs: its "logprobs" (consumed; NULL -> null). New reference. */
json_t *sits_srv_choice_json(sits_srv_kind_t kind, int index, const char *text, size_t text_len, const char *finish,
                             json_t *logprobs);
/* Whole (non-streaming) response body: choices (consumed), usage (cached:
 * usage.prompt_tokens_details.cached_tokens, < 0: no details), extra (consumed; NULL: none): members set at the top
 * level (chat's prompt_token_ids). */
char *sits_srv_response_json(sits_srv_kind_t kind, const char *id, long long created, const char *model, json_t *choices,
                             int n_prompt, int n_gen, int cached, json_t *extra);
/* One chunk object of a stream (a new reference; NULL out of memory). text may be NULL (no content key in the chat
 * delta), role non-NULL only in the first chat chunk, finish NULL while running. usage_null adds
 * "usage": null (stream_options.include_usage). logprobs consumed (NULL -> null). */
json_t *sits_srv_chunk(sits_srv_kind_t kind, const char *id, long long created, const char *model, int index,
                       const char *role, const char *text, size_t text_len, const char *finish, int usage_null,
                       json_t *logprobs);
/* One SSE event "data: {...}\n\n" of o (consumed; malloc'd, *len_p set; NULL out of memory or o NULL). */
char *sits_srv_sse(json_t *o, size_t *len_p);
/* The usage chunk: choices [] and usage. */
char *sits_srv_usage_sse(sits_srv_kind_t kind, const char *id, long long created, const char *model,
                         int n_prompt, int n_gen, int cached, size_t *len_p);
/* POST /tokenize (detok 0) or /detokenize (detok 1): the JSON reply (malloc'd), or NULL with err set. */
char *sits_srv_tokenize(const sits_srv_limits_t *lim, int detok, const char *body, size_t len, sits_srv_error_t *err);
/* An error event in a stream (the status line was already sent): data: {"error": {...}}. */
char *sits_srv_error_sse(const sits_srv_error_t *err, size_t *len_p);

/* tools.c -- [structured output + tool calls] (see the file's opening comment) */
struct json_t;
/* response_format / structured_outputs / guided_* / tools / tool_choice / parallel_tool_calls of root into
 * req->grammar, req->tool_parser, req->tool_forced. 0, or -1 with err naming the parameter (400). */
int sits_srv_structured_parse(const sits_srv_limits_t *lim, struct json_t *root, sits_srv_kind_t kind,
                              sits_srv_request_t *req, sits_srv_error_t *err);
int sits_srv_tool_parser_from_name(const char *name);   /* -1: unknown name */
const char *sits_srv_tool_parser_name(int parser);
int sits_srv_tool_parser_detect(const char *template_text);
/* The tool calls in a model's output: a new array of OpenAI tool_calls ({id, type, function: {name,
 * arguments (a JSON string)}}) and *content_len_p, the length of the text before them; NULL when the text
 * holds no call that parses (it is then plain content). seed makes the call ids; tools (the request's, NULL:
 * none) type qwen3_coder's values. */
struct json_t *sits_srv_tool_calls_parse(int parser, struct json_t *tools, const char *text, size_t len, uint64_t seed,
                                         size_t *content_len_p);
/* The id of a request's call k (0-based) made from seed, as the parsers above number them: call_ + 24 characters. */
void sits_srv_tool_call_id(uint64_t seed, int k, char id[40]);
/* [tool calls] A stream's tool calls as they come (OpenAI's deltas): per choice, the state below, zeroed at
 * the start; each step looks at all of the choice's text so far (final: the whole output, ended by itself)
 * and returns the content not sent yet that is content for sure ([*content_from_p, + *content_len_p):
 * held while it could be the start of a call's marker or white space before one) and, in *deltas_p (NULL:
 * none), new tool_calls delta items in order: a call's first {index, id, type, function {name,
 * arguments ""}} once its name is complete, then {index, function {arguments}} with the arguments' next
 * bytes as the model writes them (a JSON object's own text; a JSON string's value at once when it ends).
 * Joined, the deltas are what sits_srv_tool_calls_parse returns for the whole text (ids from the same
 * seed); single: the first call only (parallel_tool_calls false). A call's deltas are out once sent: when
 * the whole text turns out not to parse (a truncated call), the stream keeps them and ends there.
 * 0, or -1 out of memory. */
typedef struct {
    size_t content_sent;
    int heads;                   /* calls whose first delta went out */
    size_t args_sent;            /* bytes of the last of them's arguments sent */
} sits_srv_tool_stream_t;
int sits_srv_tool_stream_step(int parser, struct json_t *tools, const char *text, size_t len, int final, uint64_t seed, int single,
                              sits_srv_tool_stream_t *st, size_t *content_from_p, size_t *content_len_p, struct json_t **deltas_p);
/* api.c: choice index of a whole chat response carrying tool calls (content null when empty), finish
 * "tool_calls"; calls borrowed, logprobs consumed (NULL -> null). New reference. */
json_t *sits_srv_choice_tools_json(int index, const char *content, size_t content_len, struct json_t *calls,
                                   struct json_t *logprobs);
/* api.c: a chat chunk object of choice index with this delta (consumed) and logprobs (consumed; NULL -> null). */
json_t *sits_srv_chunk_delta(const char *id, long long created, const char *model, int index, struct json_t *delta,
                             const char *finish, int usage_null, struct json_t *logprobs);

/* reasoning.c -- [reasoning] (see the file's opening comment) */
/* buf (cap bytes) grown to hold need bytes (doubling). 0, or -1 out of memory. */
int sits_srv_grow(char **buf, size_t *cap, size_t need);
/* A parser's pending text (*in)[*off, *len): what was taken dropped, text[n] appended. */
sits_status_t sits_srv_pending_push(char **in, size_t *off, size_t *len, size_t *cap, const char *text, size_t n);
enum { SITS_SRV_REASONING_NONE = 0, SITS_SRV_REASONING_DEEPSEEK_R1 = 1, SITS_SRV_REASONING_QWEN3 = 2,
       SITS_SRV_REASONING_AUTO = 3, SITS_SRV_REASONING_HARMONY = 4 /* openai_gptoss: harmony.c */,
       SITS_SRV_REASONING_MISTRAL = 5 /* [THINK] ... [/THINK] (Magistral, Ministral 3 reasoning) */ };
int sits_srv_reasoning_from_name(const char *name);   /* NULL / "": none; -1: unknown name */
const char *sits_srv_reasoning_name(int parser);
/* auto: openai_gptoss when the template's text holds <|channel|> (harmony), deepseek_r1 when gen_prompt (the template rendered on one user message with the generation prompt;
 * NULL: it did not render) ends by opening <think>, qwen3 when the template's text holds <think> and
 * </think>, else none. */
int sits_srv_reasoning_detect(const char *template_text, const char *gen_prompt);
/* --reasoning-parser auto: detect on the chat's default template, rendered on one user message with the
 * generation prompt and enable_thinking true (templates that open <think> only when thinking is on). */
int sits_srv_reasoning_auto(const sits_chat_t *chat);
/* 1 when the last marker of a rendered prompt is </think> (the template closed the reasoning). */
int sits_srv_reasoning_prompt_closed(const char *prompt, size_t len);
/* A whole output: reasoning text[r_off, + r_len) when has_r (else none), content text[c_off, + c_len). */
typedef struct {
    size_t r_off, r_len, c_off, c_len;
    int has_r;
} sits_srv_reasoning_split_t;
void sits_srv_reasoning_split(int parser, int closed, const char *text, size_t len, sits_srv_reasoning_split_t *out);
/* A stream: push the text as it comes, then take segments with next until it returns 0 (nothing more is
 * decided; final: the output is over and nothing is held). A segment is reasoning (*reasoning_p 1) or
 * content, non-empty, in output order; *text_p stays valid until the next push / next. Content segments
 * are also kept whole in content[content_len] (NUL-terminated when non-empty). next returns -1 out of memory. */
typedef struct {
    int parser, state;
    char *in;                     /* pushed text; [in_off, in_len) not yet taken */
    size_t in_off, in_len, in_cap;
    char *content;                /* every content byte so far */
    size_t content_len, content_cap;
} sits_srv_reasoning_stream_t;
sits_status_t sits_srv_reasoning_stream_init(sits_srv_reasoning_stream_t *r, int parser, int closed);
sits_status_t sits_srv_reasoning_stream_push(sits_srv_reasoning_stream_t *r, const char *text, size_t len);
int sits_srv_reasoning_stream_next(sits_srv_reasoning_stream_t *r, int final, int *reasoning_p, const char **text_p,
                                   size_t *len_p);
void sits_srv_reasoning_stream_fini(sits_srv_reasoning_stream_t *r);

/* harmony.c -- [reasoning] gpt-oss's harmony output (see the file's opening comment). A stream: push the
 * text as it comes, take segments with next until it returns 0 (final: the output is over, nothing held).
 * Segments in output order: REASONING / CONTENT text, a tool call's head CALL (text: its name) once its
 * header is complete, then its ARGS as they come; call: the call's index (0, 1, ...). Non-empty except a
 * CALL's name; *seg's text stays valid until the next push / next. tools: recipients functions.NAME are
 * calls (the request has tools), else such messages are dropped. next returns -1 out of memory. */
enum { SITS_SRV_HARMONY_REASONING = 0, SITS_SRV_HARMONY_CONTENT = 1, SITS_SRV_HARMONY_CALL = 2, SITS_SRV_HARMONY_ARGS = 3 };
typedef struct {
    int kind, call;
    const char *text;
    size_t len;
} sits_srv_harmony_seg_t;
typedef struct {
    int tools;
    int state, role_given;        /* header / body / between messages; a header without its role word */
    int kind, sep, call;          /* the open message: its kind (-1 dropped), a "\n" owed before it, its call index */
    int n_msgs[2], n_calls;       /* reasoning / content messages and calls begun */
    size_t head_seen;             /* bytes of the pending header already searched for its end */
    char *name;                   /* the open call's name (malloc'd) */
    size_t name_len;
    char *in;                     /* pushed text; [in_off, in_len) not yet taken */
    size_t in_off, in_len, in_cap;
} sits_srv_harmony_t;
sits_status_t sits_srv_harmony_init(sits_srv_harmony_t *h, int tools);
sits_status_t sits_srv_harmony_push(sits_srv_harmony_t *h, const char *text, size_t len);
int sits_srv_harmony_next(sits_srv_harmony_t *h, int final, sits_srv_harmony_seg_t *seg);
void sits_srv_harmony_fini(sits_srv_harmony_t *h);
/* A whole output: reasoning / content (malloc'd, NULL when empty) and calls (OpenAI tool_calls with ids
 * from seed; NULL when none) -- the stream's segments joined. complete: the output ended by itself (its
 * open message is complete); else an open call is dropped (its head was streamed). */
typedef struct {
    char *reasoning, *content;
    size_t r_len, c_len;
    struct json_t *calls;
} sits_srv_harmony_out_t;
sits_status_t sits_srv_harmony_parse(const char *text, size_t len, int tools, int complete, uint64_t seed,
                                     sits_srv_harmony_out_t *out);
void sits_srv_harmony_out_free(sits_srv_harmony_out_t *out);

/* textout.c -- ids -> text that is safe to emit. Text that could still become the start of a stop string
 * is held back; once a stop string appears, the text before it is released and *stopped is set. */
typedef struct {
    sits_detok_t *dt;
    const char *const *stop;
    const size_t *stop_len;
    int n_stop;
    char *held;           /* decoded, not yet released */
    size_t held_len, held_cap;
    char *out;            /* released, not yet taken by the caller */
    size_t out_len, out_cap;
    int stopped;          /* a stop string matched (1 + its index in stop); later pushes are ignored */
    int include_stop;     /* include_stop_str_in_output: the matched stop string is released too */
    const sits_tokenizer_t *tok;
    const int32_t *keep;  /* [reasoning] n_keep > 0: of the special tokens only these are text (harmony's markup) */
    int n_keep;
} sits_srv_textout_t;

sits_status_t sits_srv_textout_init(sits_srv_textout_t *t, const sits_tokenizer_t *tok, const char *const *stop,
                                    const size_t *stop_len, int n_stop);
/* [sampling controls] skip_special 0 keeps special tokens' text (skip_special_tokens false). */
sits_status_t sits_srv_textout_init_ex(sits_srv_textout_t *t, const sits_tokenizer_t *tok, const char *const *stop,
                                       const size_t *stop_len, int n_stop, int skip_special, int include_stop);
/* [reasoning] Keep the special tokens ids[n] as text and drop the other special tokens (t made with skip_special
 * 0; ids must outlive t): a parser that reads a format's special-token markup (harmony.c). */
void sits_srv_textout_keep(sits_srv_textout_t *t, const int32_t *ids, int n);
sits_status_t sits_srv_textout_push(sits_srv_textout_t *t, const int32_t *ids, int n);
/* End of generation: flush the detokenizer, release what is held (after a last stop check). */
sits_status_t sits_srv_textout_finish(sits_srv_textout_t *t);
void sits_srv_textout_fini(sits_srv_textout_t *t);

/* metrics.c */
enum { SITS_SRV_MAX_STATUS = 24 };

typedef struct {
    const double *le;      /* upper bounds, increasing; +Inf implied */
    int n_le;
    uint64_t counts[24];   /* per bucket (not cumulative), [n_le] = +Inf */
    uint64_t count;
    double sum;
} sits_srv_hist_t;

typedef struct {
    pthread_mutex_t mu;
    int status_code[SITS_SRV_MAX_STATUS];
    uint64_t status_count[SITS_SRV_MAX_STATUS];
    int n_status;
    uint64_t finish_count[5];    /* by sits_finish_t */
    sits_srv_hist_t ttft, itl, e2e;
    uint64_t prompt_tokens, generation_tokens;
    /* per tenant (tenants file; index 0 only without one) */
    const sits_tenants_t *tenants;   /* NULL: no tenants file */
    uint64_t t_requests[SITS_MAX_TENANTS], t_generation_tokens[SITS_MAX_TENANTS];
    uint64_t t_ttft_met[SITS_MAX_TENANTS], t_tpot_met[SITS_MAX_TENANTS], t_slo_met[SITS_MAX_TENANTS];
} sits_srv_metrics_t;

void sits_srv_metrics_init(sits_srv_metrics_t *m);
void sits_srv_metrics_fini(sits_srv_metrics_t *m);
void sits_srv_metrics_status(sits_srv_metrics_t *m, int status);
void sits_srv_metrics_ttft(sits_srv_metrics_t *m, double s);
/* n tokens arrived dt seconds after the previous ones: n observations of dt / n. */
void sits_srv_metrics_itl(sits_srv_metrics_t *m, double dt, int n);
/* A finished request: its tenant, end-to-end time, time to first token and mean time per output
 * token after the first (tpot_s < 0: fewer than 2 tokens). */
void sits_srv_metrics_done(sits_srv_metrics_t *m, double e2e_s, int n_prompt, int n_gen, sits_finish_t f, int tenant,
                           double ttft_s, double tpot_s);
/* Prometheus text exposition (malloc'd). st may be NULL (no scheduler gauges). */
/* otlp: the exporter's counters, NULL when --otlp-endpoint is off. */
char *sits_srv_metrics_render(sits_srv_metrics_t *m, const sits_sched_stats_t *st, const sits_otlp_stats_t *otlp, int inflight,
                              size_t *len_p);

/* translate.c -- [translated APIs] An API served as the chat request it means (responses.c: OpenAI's Responses API,
 * anthropic.c: Anthropic's Messages API): its parser fills a chat request and the request's translation state, the
 * server generates it as a chat request, and these hooks translate the chat output back. server.c calls them on the
 * state (st) of the request's route. */
typedef struct {
    const char *id_prefix;                                     /* the request id's ("resp_", "msg_") */
    char *(*body)(void *st, char *chat_body);                 /* the whole body (chat_body consumed; NULL: no memory) */
    /* one event of the chat stream -- a chunk object (consumed), or NULL for its "[DONE]" -- as the API's events
     * (malloc'd, *len_p set, possibly empty; NULL: no memory). server.c hands the chunks it builds over as objects (no
     * text round trip) and parses the few events it queues as text (the usage chunk, an error) */
    char *(*sse)(void *st, json_t *chat_event, size_t *len_p);
    void (*stopped)(void *st, const char *stop);              /* the stop string that ended the output (NULL: unused) */
    char *(*error_json)(const sits_srv_error_t *err);         /* an error body in the API's shape (NULL: OpenAI's) */
    void (*free)(void *st);
} sits_srv_dialect_t;

/* The body (len bytes) as a JSON object (a new reference), or NULL with err set (400: not UTF-8, malformed, not an
 * object). */
json_t *sits_srv_json_object_body(const char *body, size_t len, sits_srv_error_t *err);

/* Named SSE events ("event: TYPE\ndata: {...}\n\n") built up in a buffer; failed: out of memory. */
typedef struct {
    char *p;
    size_t len, cap;
    int failed;
} sits_srv_sse_buf_t;
/* ev (consumed; NULL: out of memory) as event type, its "type" member set to type (first when ev has none). 0, or -1
 * (b->failed set). */
int sits_srv_sse_named(sits_srv_sse_buf_t *b, const char *type, json_t *ev);
/* The buffer's text (malloc'd, possibly empty; *len_p set), or NULL (freed) when it failed or is out of memory. */
char *sits_srv_sse_take(sits_srv_sse_buf_t *b, size_t *len_p);

/* The pieces of a chat stream chunk's choice, in the order the translated streams show them: its reasoning text, its
 * content text, then each tool_calls delta (index; id NULL unless the delta has one, i.e. starts a call; name "" when
 * absent; its arguments' text). fn is called on each with ctx; returns the choice's finish_reason (NULL: none yet). */
enum { SITS_SRV_PIECE_REASONING = 0, SITS_SRV_PIECE_CONTENT, SITS_SRV_PIECE_CALL };
typedef void sits_srv_piece_fn(void *ctx, int kind, int index, const char *id, const char *name, const char *text, size_t len);
const char *sits_srv_chunk_pieces(json_t *ch, sits_srv_piece_fn *fn, void *ctx);

#endif
