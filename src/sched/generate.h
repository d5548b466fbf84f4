/* generate.h -- the offline generation loop: load a model onto this rank (its TP shard), then
 * prefill a set of prompts in one step and decode them together until each stops.
 *
 * Every rank of the TP group calls sits_generate; the TP leader (group rank 0) schedules: it
 * allocates KV blocks, builds each step's plan (src/sched/plan.h) and broadcasts it; the other
 * ranks execute the plans they receive until a STOP plan. The sampler leaves the same tokens on
 * every rank, so every rank returns the same outputs.
 */
#ifndef SITS_SCHED_GENERATE_H
#define SITS_SCHED_GENERATE_H

#include <stdint.h>
#include "backend/backend.h"
#include "comm/comm.h"
#include "engine/engine.h"
#include "engine/sample.h"
#include "kv/blocks.h"
#include "model/config.h"
#include "model/safetensors.h"
#include "model/weights.h"

typedef struct {
    const char *model_dir;
    int dummy;             /* random weights from config.json only */
    uint64_t dummy_seed;
    int max_seqs;          /* sequences decoded together */
    int max_tokens;        /* tokens per step (>= prompt tokens of one prefill) */
    int max_model_len;     /* positions per sequence; 0: max_position_embeddings */
    int block_size;
    int64_t kv_bytes;      /* 0: gpu_memory_utilization on GPUs, else enough blocks for max_seqs x max_model_len */
    double gpu_memory_utilization; /* share of the GPU's memory for weights + activations + KV (0: off) */
    double host_kv_share;  /* CPU backend, kv_bytes 0: KV blocks for max_seqs x max_model_len, but at most this
                            * share of the host's available memory divided by host_ranks (0: no cap) */
    int host_ranks;        /* ranks sharing this host's memory (0: 1) */
    /* pipeline parallelism (NULL / 0: one stage): pp joins this TP rank's peers across the stages
     * (group rank = stage, activations); ctl spans every rank of the model instance (plans, and the
     * sampled tokens broadcast from token_root = the last stage's TP rank 0, as a rank of ctl) */
    sits_comm_t *pp, *ctl;
    int token_root;
    int no_cuda_graphs;    /* [perf] --no-cuda-graphs: never replay decode steps as CUDA graphs */
    const char *quant;     /* [fp8] --quant spec (model/precision.h); NULL / "": auto */
    int pp_microbatches;   /* [pp micro-batches] with pp: most micro-batches a step is split into (0, 1: none) */
    int pp_microbatch_min_tokens; /* [pp micro-batches] at least this many tokens a micro-batch on average (0: auto) */
    int fp8_separate_quant; /* [fp8] engine param of the same name (benchmarks) */
    /* [kv move] ranks that may move KV (--dp > 1, --disaggregate): the staging of every move, made at
     * start-up and counted in the memory plan (sched/kvmove.h): kv_move_bytes per buffer (raised to
     * what one block of a move between groups of kv_move_tp[0] and kv_move_tp[1] ranks, kv_move_pp
     * stages, needs), for a kv comm of kv_move_ranks ranks. kv_move_bytes 0: no moves, no staging. */
    int64_t kv_move_bytes;
    int kv_move_tp[2], kv_move_pp, kv_move_ranks;
    int ep;                /* [moe] --ep: experts split over the TP group (== its size), 0 / 1: TP-sharded experts */
    int moe_dev_max;       /* [moe dev] engine param moe_dev_max (0: its default, < 0: off) */
} sits_runner_params_t;

typedef struct {
    sits_model_config_t cfg;
    sits_st_t *st;
    sits_model_weights_t *w;
    sits_engine_t *engine;
    sits_kv_blocks_t *blocks;
    sits_backend_t *be;
    sits_comm_t *tp;       /* the TP group on host buffers (MPI): plans, sampling candidates */
    sits_comm_t *tp_dev;   /* the TP group on the backend's buffers (NCCL on GPUs; == tp on the CPU) */
    sits_comm_t *pp;       /* pipeline peers (NULL: one stage) */
    sits_comm_t *ctl;      /* plans and sampled tokens: the whole model instance (== tp without a pipeline) */
    int token_root;        /* ctl rank that holds the sampled tokens (the last stage's TP rank 0) */
    int bcast_tokens;      /* ctl spans more than this TP group: tokens are broadcast over it after each step */
    sits_comm_t *kv_comm;  /* [kv move] every rank of the job (MPI on the CPU, NCCL on GPUs), for KV moves between
                            * replicas / prefill and decode ranks (src/sched/kvmove.h); NULL: none. Not owned. */
    struct sits_kv_move_stage *kv_stage; /* [kv move] the staging of KV moves (sched/kvmove.h); NULL: none */
    struct sits_kv_offload *offload; /* [kv offload] this rank's offload tiers (src/kv/offload.h) for the KV swap
                            * orders (src/sched/swap.h); NULL: none. Set by the caller, destroyed with the runner. */
    sits_engine_params_t ep;
    int max_model_len;
    double load_s;
} sits_runner_t;

/* tp_dev NULL: tp carries the tensors too (CPU backend). */
sits_status_t sits_runner_create(const sits_runner_params_t *p, sits_backend_t *be, sits_comm_t *tp, sits_comm_t *tp_dev,
                                 sits_runner_t **r_p);
void sits_runner_destroy(sits_runner_t *r);
/* Hand out only n_blocks (<= the engine's) KV blocks: block ids are shared by every rank of a
 * replica and by the front-end's shadows of the other replicas, so the job uses the smallest count
 * over its ranks (the CLI agrees on it after loading). */
sits_status_t sits_runner_limit_blocks(sits_runner_t *r, int n_blocks);

/* Data parallelism, on the front-end rank: a runner without weights or engine that stands for a
 * remote replica (tp_size ranks per stage, same model and sizes as p): its KV block table is kept
 * here, its plans go out over ctl (this rank is ctl rank 0) and its tokens come back from
 * token_root. Its sizes (blocks, tokens, sequences) are the local runner's (after
 * sits_runner_limit_blocks, the same on every rank). */
sits_status_t sits_runner_create_shadow(const sits_runner_t *local, sits_comm_t *ctl, int token_root, sits_runner_t **r_p);

typedef struct {
    int n_prompt_tokens, n_generated;
    double prefill_s, decode_s;
    int decode_steps;
} sits_gen_stats_t;

/* prompts[i] of prompt_len[i] ids; out[i] receives up to max_new ids (out_len[i] of them).
 * Stops a sequence at an eos id of the config unless ignore_eos. params[i] per sequence (step is set here).
 * all_logits_cb, when not NULL, is called after every step with this rank's logits of each sequence
 * ([n_seqs, v_count], row i = sequence i's next-token logits) -- tests use it. */
typedef void (*sits_logits_cb_t)(void *ctx, int step, const float *logits, int n_seqs, int v_start, int v_count);
sits_status_t sits_generate(sits_runner_t *r, int n, const int32_t *const *prompts, const int *prompt_len, int max_new,
                            const sits_sample_params_t *params, int ignore_eos, int32_t **out, int *out_len,
                            sits_logits_cb_t cb, void *cb_ctx, sits_gen_stats_t *stats_p);

#endif
