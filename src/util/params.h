/* params.h -- every tunable of sits-dist, declared once in a table (name, env var, default, help)
 * and read once into an immutable sits_config_t: defaults < environment < command line.
 * Non-defaults are logged at start; `sits-dist --print-config` dumps the table. */
#ifndef SITS_UTIL_PARAMS_H
#define SITS_UTIL_PARAMS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "util/status.h"

typedef enum {
    SITS_PT_INT,    /* int64_t */
    SITS_PT_FLOAT,  /* double */
    SITS_PT_STR,    /* char * (owned by the config, NULL when empty) */
    SITS_PT_BOOL,   /* int: --flag / --no-flag / --flag=0|1|true|false */
    SITS_PT_SIZE    /* int64_t bytes: 123, 64K, 256M, 2G, 1.5GiB */
} sits_param_type_t;

typedef struct sits_config {
    /* model and weights */
    char *model;            /* model directory (config.json + safetensors) */
    char *load_format;      /* auto | safetensors | dummy */
    char *device;           /* auto | cpu | cuda */
    int cuda_graphs;        /* decode steps as CUDA graphs (cuda backend) */
    int64_t max_model_len;  /* 0: the model's max_position_embeddings */
    char *quant;            /* [fp8] weight precision policy per layer type (model/precision.h); "" = auto */
    /* offline generation */
    char *prompt_ids;       /* comma-separated token ids */
    char *prompt;           /* text prompt (needs tokenizer.json) */
    char *tokenize;         /* text to encode and print */
    char *detokenize;       /* ids to decode and print */
    char *chat_template;    /* chat template override: a file, a named template of the model, or a built-in */
    char *tool_call_parser; /* [tool calls] hermes | llama3_json | mistral | auto */
    char *reasoning_parser; /* [reasoning] deepseek_r1 | qwen3 | auto; NULL: none */
    char *render_chat;      /* --render-chat FILE: print the rendered chat prompt and exit */
    char *generation_config;/* auto | vllm | DIR: where request sampling defaults come from */
    int chat;               /* offline: render --prompt as a user message with the chat template */
    int64_t max_tokens;
    double temperature;
    int64_t top_k;
    double top_p;
    int64_t seed;
    int ignore_eos;
    int64_t batch;          /* offline: copies of the prompt decoded together */
    /* parallelism and placement */
    int64_t tp, pp, dp;
    int64_t pp_microbatches;  /* micro-batches of a pipeline step; 0: pp */
    int64_t pp_microbatch_min_tokens; /* fewer micro-batches below this many tokens each on average */
    char *topology;         /* NULL, "text" or "json": print the topology map and exit */
    char *topology_xml;     /* load this hwloc XML instead of discovering (tests) */
    int bind;               /* bind each rank to its cores / NUMA node */
    int64_t threads;        /* CPU backend threads per rank; 0: cores of this rank */
    double step_timeout;    /* seconds a collective may take before the job is aborted */
    double startup_timeout; /* [faults] seconds MPI start-up (MPI_Init) may take before this rank gives up */
    /* KV cache */
    int64_t block_size;
    int64_t kv_cache_memory;  /* bytes per rank for KV blocks; 0: enough for max_model_len x batch */
    char *kv_cache_dtype;     /* auto | bf16 | fp32 | int8 */
    double gpu_memory_utilization;
    /* [kv offload] tiers for swapped-out sequences (server) */
    double kv_offload_threshold;  /* share of KV blocks in use beyond which running sequences swap out */
    int64_t kv_host_bytes;        /* host tier per rank (capped to half the available memory); 0: off */
    char *kv_offload_dir;         /* disk tier directory; NULL: off */
    char *kv_offload_lz4;         /* auto | on | off */
    /* [kv move] KV migration between replicas, prefill -> decode disaggregation */
    double kv_migrate_threshold;     /* --dp: a replica above this share of its KV blocks hands sequences over */
    int64_t kv_migrate_every;        /* test knob: force a migration every N steps (0: off) */
    int64_t kv_migrate_corrupt_every;/* test knob: corrupt every N-th move's payload (0: off) */
    char *disaggregate;              /* "P:D": prefill on ranks [0, P), decode on the last D (NULL: off) */
    int64_t kv_move_buffer;          /* bytes of each buffer of the KV move staging (sched/kvmove.h) */
    /* server */
    char *host;
    int64_t port;
    char *api_key;
    char *served_model_name;
    int64_t max_body_bytes;
    int64_t max_waiting;
    int64_t max_connections;             /* soft limit: beyond it new requests get 503 + Retry-After */
    int64_t max_connections_per_client;  /* per client address; 0: none */
    int64_t http_threads;                /* HTTP event-loop threads */
    double request_read_timeout;         /* seconds for a request's headers + body */
    int64_t max_num_seqs;
    int64_t max_num_batched_tokens;
    double shutdown_timeout;
    int prefix_caching;
    double target_tpot_p99_ms;
    char *tenants;
    char *trace_file;
    char *speculative_config;   /* [speculative] JSON, src/spec/spec.h */
    char *otlp_endpoint;
    int gemm_autotune;
    int64_t gemv_max_tokens;   /* SITS_PT_INT: int64_t like every INT parameter */
    int custom_allreduce;
    int64_t custom_allreduce_max_bytes;
    double controller_interval;
    /* logging */
    char *log_level;
    int64_t ep;             /* [moe] expert parallelism over the TP group (== tp), 1: TP-sharded experts */
    int64_t moe_device_max_tokens; /* [moe dev] MoE steps of up to this many tokens route on the device (0: never) */
} sits_config_t;

typedef struct {
    const char *name;       /* flag without the leading "--" */
    const char *env;        /* environment variable or NULL */
    sits_param_type_t type;
    const char *def;        /* default, as text ("" = unset) */
    const char *implicit;   /* value used for "--name" without a value (optional-value flags), else NULL */
    size_t offset;          /* offset in sits_config_t */
    const char *help;
} sits_param_t;

extern const sits_param_t sits_params[];
extern const size_t sits_params_count;

/* Defaults, then the environment, then argv[1..argc). Unknown flags and bad values are errors
 * (message written to err, up to err_len). Does not handle --help / --version / --print-config:
 * the CLI does, before calling this. */
sits_status_t sits_config_parse(int argc, char **argv, sits_config_t *cfg, char *err, size_t err_len);
void sits_config_free(sits_config_t *cfg);
/* One line per parameter: name, value, env var, help. */
void sits_config_print(const sits_config_t *cfg, FILE *out);
/* 1 when parameter `name` (as on the command line, e.g. "temperature") differs from its default. */
int sits_config_is_set(const sits_config_t *cfg, const char *name);
/* The man page sits-dist.1 (troff -man) written from the table: synopsis, one .TP entry per flag
 * with its type, default and environment variable, then the logging variables. `version` goes into
 * the title line. */
void sits_config_print_man(const char *version, FILE *out);
/* INFO-log every parameter that differs from its default. */
void sits_config_log_nondefaults(const sits_config_t *cfg);
/* "64K", "2G", "1.5GiB" -> bytes. */
sits_status_t sits_parse_size(const char *s, int64_t *bytes_p);

#endif
