/* engine.h -- the forward pass of one step on one rank:
 *   embed (vocab-parallel, all-reduce) -> per layer: RMSNorm -> QKV (column-parallel) -> RoPE ->
 *   write K,V into the paged cache -> attention over the cache -> O (row-parallel) -> all-reduce ->
 *   residual + RMSNorm -> gate/up (column-parallel) -> SiLU*mul -> down (row-parallel) -> all-reduce
 *   -> residual; final norm -> lm_head (vocab-parallel) on the rows that need logits.
 * [families] Per config: per-head q/k RMSNorm before RoPE (Qwen3, Gemma 3); Gemma 2/3: embeddings x sqrt(H),
 *   sandwich norms (the attention and MLP outputs are normed after their all-reduce, before the residual
 *   add), GeGLU instead of SwiGLU, query_pre_attn_scalar, attention-logit and final-logit soft-capping,
 *   the window and RoPE base of each layer (sliding / global); Phi-3's longrope: each token rotated with the
 *   short or long factor set chosen from its sequence's largest position in the step (+ 1 > original
 *   length: long), attention_factor^2 folded into the attention scale.
 *   [moe] For a mixture-of-experts model (cfg.moe.n_experts > 0) gate/up/down is the experts' MLP of
 *   engine/moe.h (router top-k, experts TP-sliced or, with --ep, dispatched by all-to-all-v); its steps
 *   run eagerly (no CUDA graphs).
 *
 * The engine owns the KV storage (per layer of its pipeline stage, K and V of [n_blocks, block_size,
 * nkv_loc, hd]) but not the block allocation: a batch carries each sequence's block table, decided by
 * the leader (src/kv), identical on every rank of the TP group.
 *
 * [perf] A step is sits_engine_run (enqueue, no wait), then either sits_engine_sample (the
 * per-rank candidate reduction on the device, only [n_out, c] candidates come back) or
 * sits_engine_logits (all of this rank's logits on the host, for tests and the logits callback).
 * sits_engine_forward = run + logits, as before.
 *   - Residual stream: fp32 on the device when the backend has add_rmsnorm_f32res (sublayer
 *     outputs stay bf16); logits fp32 straight from the lm_head GEMM when it has matmul_f32out.
 *   - CUDA graphs: a decode-only step (one token per sequence, an output for each) of n tokens
 *     runs padded to the next bucket B (1, 2, 4, ..., up to min(max_tokens, max_seqs, 256)); the
 *     first step of a bucket runs eagerly and records the bucket's graph, later ones upload the
 *     step's metadata (one copy into fixed device buffers) and replay it. Pad rows repeat token
 *     0 with KV slot -1 (no cache write). Only on a backend with graph slots, a TP comm of size 1
 *     or nccl, and unless params->no_cuda_graphs. */
#ifndef SITS_ENGINE_ENGINE_H
#define SITS_ENGINE_ENGINE_H

#include <stdint.h>
#include "backend/backend.h"
#include "comm/comm.h"
#include "engine/sample.h"
#include "model/weights.h"

typedef struct {
    int max_tokens;        /* most tokens in one step (prefill chunk + decodes) */
    int max_seqs;          /* most sequences in one step */
    int max_blocks_per_seq;
    int n_blocks;          /* KV blocks on this rank */
    int block_size;        /* tokens per block */
    int no_cuda_graphs;    /* [perf] 1: never capture / replay CUDA graphs (--no-cuda-graphs) */
    /* pipeline parallelism: this rank's stage is the weights' shard (dims.layer0/layer1); pp_comm
     * joins the ranks of the same TP rank across the stages (group rank = stage). A stage receives
     * the residual stream [n, H] from the previous one and sends it on; the last one produces the
     * logits. NULL: one stage. */
    struct sits_comm *pp_comm;
    /* [pp micro-batches] with pp_comm of more than one stage: split a step into up to this many
     * micro-batches (0 or 1: never) so that the stages overlap; see sits_engine_run. A step of n
     * tokens gets at most n / pp_microbatch_min_tokens of them (0: auto, 128 on cuda, 1 on cpu). */
    int pp_microbatches, pp_microbatch_min_tokens;
    /* [fp8] 1: FP8 GEMMs quantise their activations in a kernel of their own instead of in the
     * RMSNorm / SiLU*mul kernel before them (for the benchmark that measures the fusion) */
    int fp8_separate_quant;
    /* [kv] blocks per chunk of sits_engine_kv_save_blocks / load_blocks through the backend's
     * kv_block_copy (0: as many as 16 MiB of device staging hold; -1: one copy per block, layer and
     * K|V instead -- tests) */
    int kv_copy_chunk;
    /* [moe dev] MoE steps of up to this many tokens route on the device (no host round trip; their decode steps
     * can be CUDA graphs): 0 the default (256), < 0 never (engine/moe.h) */
    int moe_dev_max;
} sits_engine_params_t;

/* One step's input (host arrays). Token t belongs to sequence seq[t] (an index into the
 * batch's n_seqs block tables) at position pos[t]. Logits are produced for the n_out token
 * indices out_rows[]. */
typedef struct {
    int n_tokens;
    const int32_t *tokens;        /* [n_tokens] */
    const int32_t *pos;           /* [n_tokens] */
    const int32_t *seq;           /* [n_tokens] */
    int n_seqs;
    const int32_t *block_tables;  /* [n_seqs, bt_stride] */
    int bt_stride;                /* [scale] block-table row length, at most max_blocks_per_seq (0: that) -- the
                                   * longest table of the step, so a step uploads what it uses, not the whole
                                   * context's columns */
    int n_out;
    const int32_t *out_rows;      /* [n_out] */
    /* [perf] [n_out] or NULL: the sampling parameters of the outputs, uploaded with the step's
     * metadata for sits_engine_sample's device path (which uploads them itself when NULL). */
    const sits_sample_params_t *sample;
} sits_batch_t;

typedef struct sits_engine sits_engine_t;

/* comm: the TP group (size == weights shard size). Takes no ownership of weights, backend, comm. */
sits_status_t sits_engine_create(const sits_engine_params_t *params, sits_model_weights_t *weights, sits_backend_t *be,
                                 sits_comm_t *tp_comm, sits_engine_t **engine_p);
void sits_engine_destroy(sits_engine_t *e);

/* Runs the step; logits_p receives this rank's logits, host fp32 [n_out, v_count] (engine-owned,
 * valid until the next call). = sits_engine_run + sits_engine_logits (+ a wait when n_out is 0). */
sits_status_t sits_engine_forward(sits_engine_t *e, const sits_batch_t *b, const float **logits_p);

/* [perf] Enqueues the step on the backend and returns without waiting (the batch's arrays may be
 * reused at once). The logits of its n_out rows stay on the device for sits_engine_sample or
 * sits_engine_logits. Collective over the TP comm like forward.
 * [pp micro-batches] With a pipeline and params.pp_microbatches M > 1 the step runs as up to M
 * micro-batches: each stage runs micro-batch m through its layers and passes it on while the
 * previous stage already works on m + 1 (MPI: the receives of every micro-batch are posted at the
 * step's start and the sends do not wait; NCCL: all of it enqueued in order). The split is a pure function of
 * the batch (every rank of every stage computes the same one): cuts fall only between sequences
 * (a sequence's tokens stay in one micro-batch) and balance the token counts; one micro-batch when
 * no cut is possible or the outputs' rows are not increasing. Each row's math is the same as in
 * one pass (the logits are the same rows in the same order), so the results do not change. */
sits_status_t sits_engine_run(sits_engine_t *e, const sits_batch_t *b);

/* [perf] This rank's logits of the last run, host fp32 [n_out, v_count] (engine-owned, valid until
 * the next run; downloaded on the first call after a run). */
sits_status_t sits_engine_logits(sits_engine_t *e, const float **logits_p);

/* [perf] Samples the last run's n_out outputs: params[n_out] (the batch's sample params when the run
 * had them), collective over comm (host buffers: the TP group's mpi comm); tokens_p[n_out] is the
 * same on every rank and equal to sits_sample on sits_engine_logits' logits. The reduction runs on
 * the backend (sample_reduce) when it has one, the logits are fp32 and the candidate count is at
 * most SITS_SAMPLE_MAX_C; otherwise, and when a top-p nucleus needs whole slices, on the host.
 * Rows with sampling controls get them first (= sits_engine_sample_step without masks or logprobs). */
sits_status_t sits_engine_sample(sits_engine_t *e, sits_comm_t *comm, const sits_sample_params_t *params, int32_t *tokens_p);
/* The whole of a step's sampling, on the device: [logprobs] when lp_p is not NULL and some row asks,
 * each rank reduces its shard of the raw logits (logprob_reduce) before anything changes them; then
 * [structured output] the allowed-token masks (sample.h; NULL: none), [sampling controls] the rows'
 * bias, penalties and min_p (logit_process; min_p's maxima are all-gathered), the sampler as
 * sits_engine_sample, and for the rows whose scored id is the sampled token that token's raw logit
 * (logit_pick) from the rank holding it; the records are all-gathered and merged into lp_p[n_out]
 * (rows without logprobs untouched). Only records, maxima and candidates leave the device -- never
 * the [n_out, v_count] logits, except where sits_engine_sample falls back to the host (a top-p nucleus
 * wider than the candidates, top_k > SITS_SAMPLE_MAX_C). The logits stay transformed afterwards.
 * SITS_ERR_UNSUPPORTED on a backend without the ops (both built-in backends have them). */
sits_status_t sits_engine_sample_step(sits_engine_t *e, sits_comm_t *comm, const sits_sample_params_t *params,
                                      const sits_sample_masks_t *masks, int32_t *tokens_p, sits_logprob_t *lp_p);

/* [perf] Counters for tests and benchmarks: steps replayed from a graph, graphs recorded, steps
 * sampled on the device, steps sampled on the host; [logprobs] steps whose logprobs came from the
 * device records; downloads of the whole [n_out, v_count] logits to the host (sits_engine_logits:
 * the host sampler's fallbacks and logits callbacks -- 0 on a serving path without them). */
typedef struct {
    long graph_replays, graph_captures, device_samples, host_samples;
    long device_logprobs, logits_downloads;
    long micro_steps, micro_batches; /* [pp micro-batches] steps split into micro-batches, their micro-batches */
} sits_engine_stats_t;
void sits_engine_get_stats(const sits_engine_t *e, sits_engine_stats_t *stats_p);
/* [moe] Tokens routed to each expert so far (summed over layers and steps; *n_experts_p of them), or
 * NULL (and 0) for a dense model. Load balance: the same figures on every rank of the group. */
const uint64_t *sits_engine_moe_expert_tokens(sits_engine_t *e, int *n_experts_p);

/* [memory plan] What steps at p's sizes (max_tokens, max_seqs, max_blocks_per_seq; n_blocks is not
 * read) need on be besides the weights and the KV blocks, item by item into plan (appended):
 * activations, logits, sampling records, step metadata, KV swap staging, and the backend's own
 * (be->ops->mem_plan: workspaces, FP8 GEMM scratch). Computed from the config and shard before the
 * weights load; fp8: some linears will be FP8 (lm_head counted as one of them); int4: some block linears
 * will be INT4 (the backend's dequantisation scratch for large batches). sits_engine_create
 * allocates exactly these (and reserves the backend's), so that no step allocates device memory. */
sits_status_t sits_engine_mem_plan(const sits_engine_params_t *p, const sits_model_config_t *cfg, const sits_shard_dims_t *d,
                                   sits_backend_t *be, int fp8, int int4, sits_mem_plan_t *plan);

/* KV bytes per block on this rank: K and V of its pipeline stage's layers (d->layer0 .. layer1; all
 * layers without a pipeline). */
size_t sits_engine_kv_block_bytes(const sits_model_config_t *cfg, const sits_shard_dims_t *d, sits_dtype_t kv_dtype,
                                  int block_size);

/* [kv export accessor, added for src/kv/shard.h and bench/bench_kv_codec.c] The paged K and V storage
 * of one layer: backend buffers (host memory on the cpu backend) of [n_blocks, block_size, nkv_loc,
 * head_dim] in be->kv_dtype (I8: the block units of backend.h, q then scales per block).
 * SITS_ERR_INVALID for a layer outside this rank's pipeline stage. */
sits_status_t sits_engine_kv_layer(sits_engine_t *e, int layer, void **k_p, void **v_p);

/* [kv movement: offload tiers, migration] Whole blocks of this rank's KV (its pipeline stage's
 * layers, its KV heads) copied as stored (kv dtype, any per-token scales included) to or from one
 * host buffer of n * sits_engine_kv_bytes_per_block bytes, laid out
 *     [n blocks][layer0 .. layer1)[K, V][one block of that layer's buffer].
 * save: ids[n] -> host; load: host -> ids[n]. Both wait for the copies (ordered after the work
 * already enqueued). SITS_ERR_INVALID for an id out of range. */
size_t sits_engine_kv_bytes_per_block(const sits_engine_t *e);
sits_status_t sits_engine_kv_save_blocks(sits_engine_t *e, int n, const int32_t *ids, void *host);
sits_status_t sits_engine_kv_load_blocks(sits_engine_t *e, int n, const int32_t *ids, const void *host);
/* [n > 1: copy on write] Block dst[i] becomes a copy of block src[i] (every layer of this rank, K and
 * V, as stored), i < n, ordered after the work already enqueued. A device backend copies on the
 * device (the backend's kv_block_copy: gather into the staging buffer, scatter out of it); else
 * through a host buffer. SITS_ERR_INVALID for an id out of range. */
sits_status_t sits_engine_kv_copy_blocks(sits_engine_t *e, int n, const int32_t *src, const int32_t *dst);

#endif
