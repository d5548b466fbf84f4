/* params.c -- the parameter table and its parser; see params.h. */
#include "util/params.h"
#include "util/log.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define OFF(f) offsetof(sits_config_t, f)

const sits_param_t sits_params[] = {
    { "model", "SITS_MODEL", SITS_PT_STR, "", NULL, OFF(model), "model directory: config.json, *.safetensors, tokenizer.json" },
    { "load-format", "SITS_LOAD_FORMAT", SITS_PT_STR, "auto", NULL, OFF(load_format), "auto | safetensors | dummy (config.json only, random weights)" },
    { "device", "SITS_DEVICE", SITS_PT_STR, "auto", NULL, OFF(device), "auto | cpu | cuda" },
    { "cuda-graphs", "SITS_CUDA_GRAPHS", SITS_PT_BOOL, "1", "1", OFF(cuda_graphs), "cuda: replay decode steps as CUDA graphs, one per batch-size bucket (--no-cuda-graphs to debug)" },
    { "quant", "SITS_QUANT", SITS_PT_STR, "", NULL, OFF(quant), "weight precision per layer type: bf16 | fp8 | int4 | e.g. ffn=fp8,attn=bf16,ffn[0:4]=bf16,lm_head=bf16 or ffn=int4,attn=fp8 (default auto: bf16, FP8 and INT4 (AWQ / GPTQ / compressed-tensors) checkpoints as stored)" },
    { "max-model-len", "SITS_MAX_MODEL_LEN", SITS_PT_INT, "0", NULL, OFF(max_model_len), "context length limit; 0: the model's max_position_embeddings" },
    { "prompt-ids", NULL, SITS_PT_STR, "", NULL, OFF(prompt_ids), "offline: comma-separated prompt token ids" },
    { "prompt", NULL, SITS_PT_STR, "", NULL, OFF(prompt), "offline: prompt text (encoded with the model's tokenizer.json)" },
    { "tokenize", NULL, SITS_PT_STR, "", NULL, OFF(tokenize), "print the token ids of this text and exit" },
    { "detokenize", NULL, SITS_PT_STR, "", NULL, OFF(detokenize), "print the text of these comma-separated ids and exit" },
    { "chat-template", "SITS_CHAT_TEMPLATE", SITS_PT_STR, "", NULL, OFF(chat_template), "chat template: a Jinja file, a named template of the model, or a built-in (llama3, llama2, mistral, chatml); default: the model's chat_template.jinja / tokenizer_config.json" },
    { "tool-call-parser", "SITS_TOOL_CALL_PARSER", SITS_PT_STR, "auto", NULL, OFF(tool_call_parser), "the format of the model's tool calls: hermes (<tool_call> JSON: Hermes, Qwen2.5, Qwen3), llama3_json (Llama 3.1 / 3.2 JSON), mistral ([TOOL_CALLS]), qwen3_coder (Qwen3-Coder / Qwen3.5 XML calls), openai (gpt-oss's harmony; needs --reasoning-parser openai_gptoss), or auto (from the chat template's text)" },
    { "reasoning-parser", "SITS_REASONING_PARSER", SITS_PT_STR, "", NULL, OFF(reasoning_parser), "split a reasoning model's chat output into reasoning_content and content, as vLLM's parser of that name: deepseek_r1 (DeepSeek-R1 and its distills, QwQ: reasoning until </think>), qwen3 (Qwen3: reasoning between <think> and </think>), mistral (Magistral, Ministral 3 reasoning: [THINK] ... [/THINK]), openai_gptoss (gpt-oss's harmony: analysis channel -> reasoning, final -> content, commentary to=functions.NAME -> tool calls), or auto (from the chat template); default: none" },
    { "render-chat", NULL, SITS_PT_STR, "", NULL, OFF(render_chat), "render the chat template on FILE ({\"messages\": [...], \"tools\": [...], \"add_generation_prompt\": bool, ...}), print the prompt exactly and exit" },
    { "generation-config", "SITS_GENERATION_CONFIG", SITS_PT_STR, "auto", NULL, OFF(generation_config), "sampling defaults for requests that leave temperature / top_p / top_k unset: auto (the model's generation_config.json), vllm (none: temperature 1, top_p 1, top_k off), or a directory holding a generation_config.json" },
    { "chat", NULL, SITS_PT_BOOL, "0", "1", OFF(chat), "offline: send --prompt as a user message through the chat template" },
    { "max-tokens", NULL, SITS_PT_INT, "16", NULL, OFF(max_tokens), "offline: tokens to generate" },
    { "temperature", NULL, SITS_PT_FLOAT, "1.0", NULL, OFF(temperature), "sampling temperature; 0 = greedy" },
    { "top-k", NULL, SITS_PT_INT, "0", NULL, OFF(top_k), "sample among the k most likely tokens; 0 or -1 = off" },
    { "top-p", NULL, SITS_PT_FLOAT, "1.0", NULL, OFF(top_p), "nucleus sampling mass, (0, 1]" },
    { "seed", "SITS_SEED", SITS_PT_INT, "-1", NULL, OFF(seed), "sampling seed; -1 = random" },
    { "ignore-eos", NULL, SITS_PT_BOOL, "0", "1", OFF(ignore_eos), "offline: keep generating past end-of-sequence tokens" },
    { "batch", NULL, SITS_PT_INT, "1", NULL, OFF(batch), "offline: decode this many copies of the prompt as one batch" },
    { "tp", "SITS_TP", SITS_PT_INT, "0", NULL, OFF(tp), "tensor-parallel size; 0: world size / (pp x dp)" },
    { "pp", "SITS_PP", SITS_PT_INT, "1", NULL, OFF(pp), "pipeline-parallel stages" },
    { "moe-device-max-tokens", "SITS_MOE_DEVICE_MAX_TOKENS", SITS_PT_INT, "256", NULL, OFF(moe_device_max_tokens), "mixture of experts (16-bit or FP8 experts): steps of up to N tokens route on the device and run all their experts (with --ep: this rank's) in one launch for gate/up and one for down (no wait for the host, so such decode steps replay as CUDA graphs); at most 2048 / top-k; larger steps read the routing back and run a GEMM pair per expert (with --ep: tokens sent by all-to-all-v) (0: always that)" },
    { "ep", "SITS_EP", SITS_PT_INT, "1", NULL, OFF(ep), "mixture of experts: split the experts whole over the N ranks of the tensor-parallel group (N = --tp; tokens go to their experts' ranks by all-to-all); 1: every rank holds a TP slice of every expert" },
    { "pp-microbatches", "SITS_PP_MICROBATCHES", SITS_PT_INT, "0", NULL, OFF(pp_microbatches), "pipeline: split each step into up to N micro-batches (by sequences) so that the stages overlap; 0: the number of stages, 1: off" },
    { "pp-microbatch-min-tokens", "SITS_PP_MICROBATCH_MIN_TOKENS", SITS_PT_INT, "0", NULL, OFF(pp_microbatch_min_tokens), "pipeline: fewer micro-batches when they would hold fewer tokens than this on average; 0: auto = 128 on cuda (a GPU decode step is bound by reading the weights, once per micro-batch), 1 on cpu" },
    { "dp", "SITS_DP", SITS_PT_INT, "1", NULL, OFF(dp), "data-parallel replicas" },
    { "topology", NULL, SITS_PT_STR, "", "text", OFF(topology), "print the topology map (text or json) and exit" },
    { "topology-xml", "SITS_TOPOLOGY_XML", SITS_PT_STR, "", NULL, OFF(topology_xml), "use this hwloc XML topology instead of discovering the machine" },
    { "bind", "SITS_BIND", SITS_PT_BOOL, "1", "1", OFF(bind), "bind each rank to the cores and memory of its GPU / share of the node" },
    { "threads", "SITS_THREADS", SITS_PT_INT, "0", NULL, OFF(threads), "CPU backend threads per rank; 0: the cores of this rank's binding divided among the ranks of the node that share them (OpenMP waits passively unless OMP_WAIT_POLICY is set)" },
    { "step-timeout", "SITS_STEP_TIMEOUT", SITS_PT_FLOAT, "60", NULL, OFF(step_timeout), "seconds a step or collective may take before the job aborts" },
    { "startup-timeout", "SITS_STARTUP_TIMEOUT", SITS_PT_FLOAT, "300", NULL, OFF(startup_timeout), "seconds MPI start-up may take before a rank gives up and the job ends (a peer stopped or lost before MPI_Init returned); 0: no limit" },
    { "block-size", "SITS_BLOCK_SIZE", SITS_PT_INT, "16", NULL, OFF(block_size), "KV cache block size in tokens" },
    { "kv-cache-dtype", "SITS_KV_CACHE_DTYPE", SITS_PT_STR, "auto", NULL, OFF(kv_cache_dtype), "KV cache storage: auto (the activation dtype: fp32 on cpu, bf16 on cuda) | bf16 | fp32 (cpu) | int8 | fp8 (e4m3; both per-token, per-head fp32 scale)" },
    { "kv-cache-memory", "SITS_KV_CACHE_MEMORY", SITS_PT_SIZE, "0", NULL, OFF(kv_cache_memory), "bytes of KV cache per rank (e.g. 2G); 0: on GPUs what --gpu-memory-utilization leaves, on the CPU --max-num-seqs x --max-model-len capped at 25% of the available memory / ranks per node (offline: the batch)" },
    { "kv-offload-threshold", "SITS_KV_OFFLOAD_THRESHOLD", SITS_PT_FLOAT, "0.85", NULL, OFF(kv_offload_threshold), "server with an offload tier: swap running sequences out when more than this share of the KV blocks is in use (admission stays below it)" },
    { "kv-host-bytes", "SITS_KV_HOST_BYTES", SITS_PT_SIZE, "4G", NULL, OFF(kv_host_bytes), "server: host memory per rank for swapped-out KV (at most half of the available memory); 0: no host tier" },
    { "kv-offload-dir", "SITS_KV_OFFLOAD_DIR", SITS_PT_STR, "", NULL, OFF(kv_offload_dir), "server: directory for swapped-out KV when the host tier is full (one file per sequence and rank); unset: no disk tier" },
    { "kv-offload-lz4", "SITS_KV_OFFLOAD_LZ4", SITS_PT_STR, "auto", NULL, OFF(kv_offload_lz4), "LZ4 for offloaded KV (64 KiB frames, host threads): on | off | auto (measured at the first swap: on only when it beats a host memory copy)" },
    { "host", "SITS_HOST", SITS_PT_STR, "127.0.0.1", NULL, OFF(host), "server: address to bind (0.0.0.0 for all)" },
    { "port", "SITS_PORT", SITS_PT_INT, "8000", NULL, OFF(port), "server: TCP port (0: any free port)" },
    { "api-key", "SITS_API_KEY", SITS_PT_STR, "", NULL, OFF(api_key), "server: require 'Authorization: Bearer KEY' (or 'x-api-key: KEY')" },
    { "served-model-name", NULL, SITS_PT_STR, "", NULL, OFF(served_model_name), "server: model id in the API (default: the model directory's name)" },
    { "max-body-bytes", "SITS_MAX_BODY_BYTES", SITS_PT_SIZE, "1M", NULL, OFF(max_body_bytes), "server: larger request bodies get 413" },
    { "max-connections", "SITS_MAX_CONNECTIONS", SITS_PT_INT, "10000", NULL, OFF(max_connections), "server: open connections answered normally; beyond, new requests get 503 with Retry-After (served from an event loop: idle connections cost no thread)" },
    { "max-connections-per-client", "SITS_MAX_CONNECTIONS_PER_CLIENT", SITS_PT_INT, "1024", NULL, OFF(max_connections_per_client), "server: open connections from one client address before its new requests get 503 with Retry-After (0: no limit)" },
    { "http-threads", "SITS_HTTP_THREADS", SITS_PT_INT, "4", NULL, OFF(http_threads), "server: event-loop threads of the HTTP server (each serves many connections)" },
    { "request-read-timeout", "SITS_REQUEST_READ_TIMEOUT", SITS_PT_FLOAT, "30", NULL, OFF(request_read_timeout), "server: seconds a client may take to send a request body once its headers arrived (slower: the connection is closed); headers that stall and idle keep-alive connections are closed after 60 s without a byte" },
    { "max-waiting", "SITS_MAX_WAITING", SITS_PT_INT, "1024", NULL, OFF(max_waiting), "server: queued requests before 429" },
    { "max-num-seqs", "SITS_MAX_NUM_SEQS", SITS_PT_INT, "64", NULL, OFF(max_num_seqs), "sequences decoded together in one step" },
    { "max-num-batched-tokens", "SITS_MAX_NUM_BATCHED_TOKENS", SITS_PT_INT, "2048", NULL, OFF(max_num_batched_tokens), "tokens in one step (prefill chunks + decodes)" },
    { "shutdown-timeout", "SITS_SHUTDOWN_TIMEOUT", SITS_PT_FLOAT, "30", NULL, OFF(shutdown_timeout), "server: seconds to finish running requests after SIGTERM/SIGINT" },
    { "enable-prefix-caching", "SITS_PREFIX_CACHING", SITS_PT_BOOL, "1", "1", OFF(prefix_caching), "share the KV blocks of identical prompt prefixes (--no-enable-prefix-caching to turn off)" },
    { "tenants", "SITS_TENANTS", SITS_PT_STR, "", NULL, OFF(tenants), "server: tenants file (JSON: API keys, weights, priorities, SLOs, concurrency limits)" },
    { "custom-allreduce", "SITS_CUSTOM_ALLREDUCE", SITS_PT_BOOL, "1", "1", OFF(custom_allreduce), "cuda, TP inside a node: one-/two-shot all-reduce over CUDA IPC for small messages, NCCL above (--no-custom-allreduce: NCCL only)" },
    { "custom-allreduce-max-bytes", "SITS_CUSTOM_AR_MAX_BYTES", SITS_PT_SIZE, "8M", NULL, OFF(custom_allreduce_max_bytes), "largest all-reduce sent through the custom path" },
    { "speculative-config", "SITS_SPECULATIVE_CONFIG", SITS_PT_STR, "", NULL, OFF(speculative_config), "server: speculative decoding, vLLM's JSON: {\"method\": \"ngram\", \"num_speculative_tokens\": k, \"prompt_lookup_max\": 4, \"prompt_lookup_min\": 1} or {\"method\": \"draft_model\", \"model\": DIR, \"num_speculative_tokens\": k} (a small model of the same vocabulary, on the leader); requests opt out with \"speculative\": false" },
    { "trace-file", "SITS_TRACE_FILE", SITS_PT_STR, "", NULL, OFF(trace_file), "server: append one JSON line per finished request (queued, first scheduled, first token, finished, tokens, preemptions)" },
    { "gemm-autotune", "SITS_GEMM_AUTOTUNE", SITS_PT_BOOL, "1", "1", OFF(gemm_autotune), "cuda: time cuBLASLt's candidate algorithms for each decode GEMM shape on first use and keep the fastest (--no-gemm-autotune: the heuristic's first)" },
    { "gemv-max-tokens", "SITS_GEMV_MAX_TOKENS", SITS_PT_INT, "16", NULL, OFF(gemv_max_tokens), "cuda: linears (bf16 and FP8 weights) of steps of up to this many tokens (at most 16) run the GEMV kernels (one token: a bulk-copy ring; 2-16: tensor cores) instead of cuBLASLt (0: always cuBLASLt)" },
    { "otlp-endpoint", "SITS_OTLP_ENDPOINT", SITS_PT_STR, "", NULL, OFF(otlp_endpoint), "server: export each request's timeline as OTLP/HTTP JSON spans to http://HOST:PORT (POST /v1/traces)" },
    { "target-tpot-p99-ms", "SITS_TARGET_TPOT_P99_MS", SITS_PT_FLOAT, "0", NULL, OFF(target_tpot_p99_ms), "adaptive batching: keep the P99 TPOT of finished requests near this (0: off)" },
    { "controller-interval", "SITS_CONTROLLER_INTERVAL", SITS_PT_FLOAT, "0.1", NULL, OFF(controller_interval), "adaptive batching: seconds between adjustments" },
    { "gpu-memory-utilization", "SITS_GPU_MEMORY_UTILIZATION", SITS_PT_FLOAT, "0.9", NULL, OFF(gpu_memory_utilization), "server on GPUs: share of each GPU's memory for weights, activations and the KV cache (when --kv-cache-memory is 0)" },
    { "kv-migrate-threshold", "SITS_KV_MIGRATE_THRESHOLD", SITS_PT_FLOAT, "0.85", NULL, OFF(kv_migrate_threshold), "--dp: when a replica uses more than this share of its KV blocks, move a running sequence (with its KV) to a replica with room (0 or 1: off)" },
    { "kv-migrate-every", "SITS_KV_MIGRATE_EVERY", SITS_PT_INT, "0", NULL, OFF(kv_migrate_every), "test knob (--dp): also force one KV migration every N steps (0: off)" },
    { "kv-migrate-corrupt-every", NULL, SITS_PT_INT, "0", NULL, OFF(kv_migrate_corrupt_every), "test knob: corrupt the payload of every N-th KV move (the destination must reject it and recompute; 0: off)" },
    { "kv-move-buffer", "SITS_KV_MOVE_BUFFER", SITS_PT_SIZE, "64M", NULL, OFF(kv_move_buffer), "--dp / --disaggregate: bytes of each buffer every rank sets aside at start-up for KV moves (GPU: one of device memory, two of pinned host memory; CPU: two), counted in the memory plan; a larger move goes through them in chunks (raised to one block of a move when smaller)" },
    { "disaggregate", "SITS_DISAGGREGATE", SITS_PT_STR, "", NULL, OFF(disaggregate), "P:D (P + D = ranks): prefill on the first P ranks (TP P), decode on the last D (TP D); the KV moves after the first token" },
    { "log-level", "SITS_LOG_LEVEL", SITS_PT_STR, "warn", NULL, OFF(log_level), "error | warn | info | debug | trace" },
};
const size_t sits_params_count = sizeof sits_params / sizeof sits_params[0];

sits_status_t sits_parse_size(const char *s, int64_t *bytes_p)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || v < 0) return SITS_ERR_INVALID;
    while (*end == ' ') end++;
    double mul = 1;
    switch (toupper((unsigned char)*end)) {
    case '\0': break;
    case 'B': end++; break;
    case 'K': mul = 1024.0; end++; break;
    case 'M': mul = 1024.0 * 1024; end++; break;
    case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: return SITS_ERR_INVALID;
    }
    if (mul > 1) {
        if (*end == 'i' || *end == 'I') end++;
        if (*end == 'b' || *end == 'B') end++;
    }
    if (*end) return SITS_ERR_INVALID;
    *bytes_p = (int64_t)(v * mul);
    return SITS_OK;
}

static sits_status_t set_value(sits_config_t *cfg, const sits_param_t *p, const char *val, char *err, size_t err_len)
{
    char *field = (char *)cfg + p->offset;
    char *end;
    switch (p->type) {
    case SITS_PT_INT: {
        errno = 0;
        long long v = strtoll(val, &end, 10);
        if (end == val || *end || errno) goto bad;
        *(int64_t *)field = v;
        return SITS_OK;
    }
    case SITS_PT_FLOAT: {
        errno = 0;
        double v = strtod(val, &end);
        if (end == val || *end || errno) goto bad;
        *(double *)field = v;
        return SITS_OK;
    }
    case SITS_PT_SIZE:
        if (sits_parse_size(val, (int64_t *)field) != SITS_OK) goto bad;
        return SITS_OK;
    case SITS_PT_BOOL:
        if (!strcmp(val, "1") || !strcasecmp(val, "true") || !strcasecmp(val, "yes") || !strcasecmp(val, "on"))
            *(int *)field = 1;
        else if (!strcmp(val, "0") || !strcasecmp(val, "false") || !strcasecmp(val, "no") || !strcasecmp(val, "off"))
            *(int *)field = 0;
        else goto bad;
        return SITS_OK;
    case SITS_PT_STR: {
        char **sp = (char **)field;
        free(*sp);
        *sp = NULL;
        if (*val) {
            *sp = strdup(val);
            if (!*sp) return SITS_ERR_NOMEM;
        }
        return SITS_OK;
    }
    }
bad:
    snprintf(err, err_len, "invalid value '%s' for --%s", val, p->name);
    return SITS_ERR_INVALID;
}

static const sits_param_t *find_param(const char *name, size_t len)
{
    for (size_t i = 0; i < sits_params_count; i++)
        if (strlen(sits_params[i].name) == len && !strncmp(sits_params[i].name, name, len)) return &sits_params[i];
    return NULL;
}

sits_status_t sits_config_parse(int argc, char **argv, sits_config_t *cfg, char *err, size_t err_len)
{
    sits_status_t st;
    memset(cfg, 0, sizeof *cfg);
    for (size_t i = 0; i < sits_params_count; i++)
        SITS_CHECK_GOTO(set_value(cfg, &sits_params[i], sits_params[i].def, err, err_len), st, fail);
    for (size_t i = 0; i < sits_params_count; i++) {
        const char *ev = sits_params[i].env ? getenv(sits_params[i].env) : NULL;
        if (ev && *ev) {
            st = set_value(cfg, &sits_params[i], ev, err, err_len);
            if (st != SITS_OK) {
                size_t n = strlen(err);
                snprintf(err + n, err_len - n, " (from %s)", sits_params[i].env);
                goto fail;
            }
        }
    }
    for (int a = 1; a < argc; a++) {
        const char *arg = argv[a];
        if (strncmp(arg, "--", 2) != 0) {
            snprintf(err, err_len, "unexpected argument '%s' (flags start with --; see --help)", arg);
            st = SITS_ERR_INVALID;
            goto fail;
        }
        const char *name = arg + 2;
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const sits_param_t *p = find_param(name, len);
        int negate = 0;
        if (!p && len > 3 && !strncmp(name, "no-", 3)) {
            p = find_param(name + 3, len - 3);
            negate = p && p->type == SITS_PT_BOOL;
            if (!negate) p = NULL;
        }
        if (!p) {
            snprintf(err, err_len, "unknown flag '--%.*s' (see --help)", (int)len, name);
            st = SITS_ERR_INVALID;
            goto fail;
        }
        const char *val;
        if (negate) {
            if (eq) { snprintf(err, err_len, "--%s takes no value", name); st = SITS_ERR_INVALID; goto fail; }
            val = "0";
        } else if (eq) {
            val = eq + 1;
        } else if (p->implicit) {
            val = p->implicit;
        } else if (a + 1 < argc) {
            val = argv[++a];
        } else {
            snprintf(err, err_len, "--%s needs a value", p->name);
            st = SITS_ERR_INVALID;
            goto fail;
        }
        SITS_CHECK_GOTO(set_value(cfg, p, val, err, err_len), st, fail);
    }
    return SITS_OK;
fail:
    sits_config_free(cfg);
    return st;
}

void sits_config_free(sits_config_t *cfg)
{
    for (size_t i = 0; i < sits_params_count; i++)
        if (sits_params[i].type == SITS_PT_STR) {
            char **sp = (char **)((char *)cfg + sits_params[i].offset);
            free(*sp);
            *sp = NULL;
        }
}

static void format_value(const sits_config_t *cfg, const sits_param_t *p, char *buf, size_t len)
{
    const char *field = (const char *)cfg + p->offset;
    switch (p->type) {
    case SITS_PT_INT: case SITS_PT_SIZE: snprintf(buf, len, "%lld", (long long)*(const int64_t *)field); break;
    case SITS_PT_FLOAT: snprintf(buf, len, "%g", *(const double *)field); break;
    case SITS_PT_BOOL: snprintf(buf, len, "%d", *(const int *)field); break;
    case SITS_PT_STR: snprintf(buf, len, "%s", *(char *const *)field ? *(char *const *)field : ""); break;
    }
}

static int is_default(const sits_config_t *cfg, const sits_param_t *p)
{
    sits_config_t d;
    char err[8], a[512], b[512];
    memset(&d, 0, sizeof d);
    if (set_value(&d, p, p->def, err, sizeof err) != SITS_OK) return 0;
    format_value(cfg, p, a, sizeof a);
    format_value(&d, p, b, sizeof b);
    if (p->type == SITS_PT_STR) free(*(char **)((char *)&d + p->offset));
    return !strcmp(a, b);
}

int sits_config_is_set(const sits_config_t *cfg, const char *name)
{
    for (size_t i = 0; i < sits_params_count; i++)
        if (!strcmp(sits_params[i].name, name)) return !is_default(cfg, &sits_params[i]);
    return 0;
}

void sits_config_print(const sits_config_t *cfg, FILE *out)
{
    char val[512];
    fprintf(out, "%-18s %-24s %-22s %s\n", "# flag", "value", "env", "help");
    for (size_t i = 0; i < sits_params_count; i++) {
        const sits_param_t *p = &sits_params[i];
        format_value(cfg, p, val, sizeof val);
        fprintf(out, "--%-16s %-24s %-22s %s%s\n", p->name, val[0] ? val : "\"\"", p->env ? p->env : "-", p->help,
                is_default(cfg, p) ? "" : " [set]");
    }
}

void sits_config_log_nondefaults(const sits_config_t *cfg)
{
    char val[512];
    for (size_t i = 0; i < sits_params_count; i++) {
        if (is_default(cfg, &sits_params[i])) continue;
        format_value(cfg, &sits_params[i], val, sizeof val);
        SITS_INFO(SITS_SUB_INIT, "config %s = %s", sits_params[i].name, val);
    }
}

/* Text for troff: backslash -> \e, '-' -> \- (a real minus: flags stay copy-pastable), and a line
 * must not start with '.' or '\'' (a request): the writer only emits text inside lines it opened. */
static void man_text(FILE *out, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\') fputs("\\e", out);
        else if (*s == '-') fputs("\\-", out);
        else fputc(*s, out);
    }
}

void sits_config_print_man(const char *version, FILE *out)
{
    static const char *const type_arg[] = { [SITS_PT_INT] = "INT", [SITS_PT_FLOAT] = "NUM", [SITS_PT_STR] = "STR",
                                              [SITS_PT_BOOL] = "", [SITS_PT_SIZE] = "BYTES" };
    fprintf(out, ".TH SITS\\-DIST 1 \"\" \"sits\\-dist %s\" \"User Commands\"\n", version);
    fputs(".nh\n.ad l\n"   /* no hyphenation, ragged right: flag and variable names stay whole */
          ".SH NAME\nsits\\-dist \\- distributed tensor\\-parallel LLM inference server\n"
          ".SH SYNOPSIS\n"
          ".B mpirun \\-np\n.I N\n.B sits\\-dist \\-\\-model\n.I DIR\n[\\fIflags\\fR]\n.br\n"
          ".B srun \\-\\-mpi=pmix \\-n\n.I N\n.B sits\\-dist \\-\\-model\n.I DIR\n[\\fIflags\\fR]\n.br\n"
          ".B sits\\-dist \\-\\-model\n.I DIR\n.B \\-\\-prompt\n.I TEXT\n[\\fIflags\\fR]\n.br\n"
          ".B sits\\-dist\n\\-\\-print\\-config | \\-\\-help | \\-\\-help\\-man | \\-\\-version\n"
          ".SH DESCRIPTION\n"
          "One MPI rank per GPU (or per CPU share with the CPU backend). Without an offline flag\n"
          "(\\-\\-prompt, \\-\\-prompt\\-ids, \\-\\-tokenize, \\-\\-detokenize, \\-\\-topology) rank 0 serves an\n"
          "OpenAI\\-compatible HTTP API (/v1/chat/completions, /v1/completions, /v1/models, /health, /metrics).\n"
          "SIGTERM or SIGINT drains: new requests get 503, running ones finish (\\-\\-shutdown\\-timeout).\n"
          ".SH OPTIONS\n"
          "Every flag is \\-\\-name value or \\-\\-name=value; booleans are also \\-\\-name and \\-\\-no\\-name.\n"
          "Precedence: defaults, then the environment variable, then the command line.\n", out);
    for (size_t i = 0; i < sits_params_count; i++) {
        const sits_param_t *p = &sits_params[i];
        fputs(".TP\n\\fB\\-\\-", out);   /* the tag: one line, "--name ARG" or "--name[=ARG]" */
        man_text(out, p->name);
        fputs("\\fR", out);
        if (p->type != SITS_PT_BOOL) fprintf(out, p->implicit ? "[=\\fI%s\\fR]" : " \\fI%s\\fR", type_arg[p->type]);
        fputs("\n", out);
        man_text(out, p->help);
        fputs(".\n", out);
        if (p->def[0]) {
            fputs("Default: ", out);
            man_text(out, p->def);
            fputs(".\n", out);
        }
        if (p->env) fprintf(out, "Environment: \\fB%s\\fR.\n", p->env);
    }
    fputs(".SH ENVIRONMENT\n"
          ".TP\n.B SITS_LOG_LEVEL\nerror | warn | info | debug | trace.\n"
          ".TP\n.B SITS_LOG_SUBSYS\ncomma\\-separated subsystems to log (default all).\n"
          ".TP\n.B SITS_LOG_FILE\nlog file; %r is replaced by the rank.\n"
          ".SH SEE ALSO\n.BR mpirun (1),\n.BR srun (1),\n.BR sbatch (1)\n", out);
}
