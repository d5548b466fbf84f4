/* engine.c -- one forward step on one rank; see engine.h for the flow.
 *
 * Step metadata lives in one device buffer, in two regions of the same layout (meta_layout_t):
 * the eager region sized for (max_tokens, max_seqs) and the graph region sized for the largest
 * graph bucket G. Each step fills one region on the host and uploads it with one copy (up to the
 * end of the block tables it uses); captured graphs point into the graph region only, so eager
 * steps (prefill) never disturb what a graph reads. Layout, in bytes from the region start:
 *   tokens | pos | seq | slot  int32 [cap_tokens] each; out_rows int32 [cap_seqs];
 *   sample rows sits_sample_row_t [cap_seqs]; block tables int32 [cap_seqs, max_blocks_per_seq].
 * Pad rows of a graph step (n .. B-1) repeat token 0 (id, position, sequence) with slot -1.
 * [pp micro-batches] A step split into micro-batches (enqueue_micro) uses the eager region: micro-batch
 * m reads its tokens' slice of it, with its outputs' rows relative to its first token. */
#include "engine/engine.h"
#include "engine/moe.h"
#include "spec/spec.h"
#include "util/log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ENGINE_GRAPH_MAX 1024    /* largest graph bucket */
#define ENGINE_GRAPH_SEQ_TOKENS (SITS_SPEC_MAX_K + 1)  /* most tokens of one sequence in a graph step: a verification */
#define ENGINE_GRAPH_STEP 64     /* buckets above 128 sequences: every 64 (TensorRT-LLM's large buckets are as fine) */
#define ENGINE_MAX_BUCKETS 24    /* 1, 2, 4, ..., 128 (8), then 192 .. 1024 (14), then cap */
#define ENGINE_MAX_MICRO 32      /* [pp micro-batches] most micro-batches of one step */
#define ENGINE_KV_STAGING_BYTES ((size_t)16 << 20)   /* [kv] device staging of block saves / loads */

typedef struct {
    size_t tok, pos, seq, slot, out, rows, bt; /* byte offsets from the region start */
    size_t bytes;                              /* whole region */
    int cap_tokens, cap_seqs;
} meta_layout_t;

/* Device pointers of one region. */
typedef struct {
    const int32_t *tok, *pos, *seq, *slot, *out, *bt;
    const sits_sample_row_t *rows;
    const int32_t *rope_sel;   /* [families] longrope: [tokens] 1 = the long set (e->rope_sel), else NULL */
} meta_view_t;

struct sits_engine {
    sits_engine_params_t p;
    sits_model_weights_t *w;
    sits_backend_t *be;
    sits_comm_t *comm;
    void **k_cache, **v_cache;     /* [n_layers] each [n_blocks, bs, nkv_loc, hd] */
    size_t kv_lbb;                 /* bytes of one block of one layer's K (or V) buffer */
    /* activations, act dtype unless noted */
    void *x;        /* [max_tokens, H]  residual stream (fp32 when res_f32) */
    void *h;        /* [max_tokens, H]  normed input of a sublayer */
    void *qkv;      /* [max_tokens, qkv_dim] */
    void *attn;     /* [max_tokens, nh_loc*hd] */
    void *proj;     /* [max_tokens, H]  embeddings, o / down partial sums, all-reduced in place */
    void *gu;       /* [max_tokens, 2*I_loc] */
    void *act;      /* [max_tokens, I_loc] */
    void *last;     /* [max_seqs, H]    rows that need logits */
    void *logits;   /* [max_seqs, v_count] fp32 when logits_f32 */
    void *recs;     /* [max_seqs] sampling records of SITS_SAMPLE_MAX_C candidates */
    void *masks;    /* [structured output] [mask_cap] masks of mask_words uint32, then [mask_cap] int32 rows; made with
                     * the step buffers (memory plan), remade only for masks of another size */
    int mask_cap, mask_words;
    /* [sampling controls + logprobs] samp: one buffer of [max_seqs] logit_process rows, logprob rows,
     * logprob records, row maxima, min_p cuts, picked logits (fp32) and picked ids (int32), at the
     * offsets of samp_layout_t; ents: [ent_cap] logit_process entries then [ent_cap] fp32 raw logits.
     * Both made with the step buffers (memory plan); ents grows past ent_cap only for a step with
     * more entries than the plan's bound (logged). Host images: samp_host (same layout), ents_host. */
    unsigned char *samp, *samp_host;
    void *ents;
    sits_logit_proc_ent_t *ents_host;
    size_t ent_cap, ent_host_cap;
    /* [fp8] the activations of the next FP8 GEMM, quantised by the kernel that produced them (the
     * RMSNorm before qkv / gate-up, SiLU*mul before down): xq_of is the buffer (h or act) that xq / xs
     * hold the E4M3 rows of, NULL when none; every linear() clears it. The fused kernels leave that buffer
     * unwritten (only the TP custom all-reduce's fused norm writes h too): linear() refuses to read it. */
    uint8_t *xq;    /* [max_tokens, max(H, I_loc)] E4M3 */
    float *xs;      /* [max_tokens] per-token scales */
    const void *xq_of;
    int fp8_fused;  /* the backend has the fused producers and the engine uses them */
    /* [kv] save / load through one flat buffer (backend kv_block_copy), set up at first use:
     * kv_bufs [2 * stage layers] = K, V of each layer (backend memory), kv_ids [kv_chunk] block ids,
     * kv_flat [kv_chunk * bytes per block] the device staging (device backends only) */
    void **kv_bufs;
    int32_t *kv_ids;
    void *kv_flat;
    int kv_chunk;
    int kv_copy_state;             /* 0 not set up, 1 ready, -1 not available (segment copies) */
    int res_f32, logits_f32;
    int fused_ar;                  /* the TP comm fuses all-reduce + residual add + RMSNorm (custom_ar) */
    /* step metadata: device buffer and its host image, two regions (eager, graph) */
    unsigned char *meta, *meta_host;
    meta_layout_t lay_eager, lay_graph;
    size_t off_graph;              /* byte offset of the graph region */
    /* host results (pinned when the backend has host_alloc) */
    float *logits_host;            /* [max_seqs, v_count] */
    unsigned char *recs_host;      /* [max_seqs] records */
    /* CUDA graphs */
    int n_buckets, buckets[ENGINE_MAX_BUCKETS];
    void *graphs[ENGINE_MAX_BUCKETS];
    void *graphs_many[ENGINE_MAX_BUCKETS]; /* [perf] the buckets' graphs of steps with >= SITS_ATTN_FEW_SEQ_TOKENS tokens of a
                                            * sequence (verification steps of k >= 15): attention's other kernels */
    int graphs_off;                /* disabled (params, backend, comm) or broken (a capture failed) */
    unsigned char *seq_seen;       /* [max_seqs] scratch of graph_bucket and sits_engine_run: tokens of each sequence */
    int seq_tokens;                /* the step's attention calls' max_seq_tokens (sits_attn_args_t) */
    /* the last run */
    int last_n_out, logits_ready, rows_ready;
    const sits_sample_row_t *last_rows_dev;
    unsigned char *last_rows_host; /* host image of the uploaded rows (meta_host inside the region) */
    /* [pp micro-batches] the step's split: micro-batch m = tokens [micro_tok[m], micro_tok[m+1]),
     * outputs [micro_out[m], micro_out[m+1]); micro_cur: the one being enqueued (-1: a whole step) */
    int max_micro, min_micro_tokens, n_micro, micro_cur;
    int micro_tok[ENGINE_MAX_MICRO + 1], micro_out[ENGINE_MAX_MICRO + 1];
    int *seq_last, *cuts;          /* [max_seqs], [max_tokens] scratch of the split */
    MPI_Request micro_recv[ENGINE_MAX_MICRO], micro_send[ENGINE_MAX_MICRO]; /* mpi: in flight */
    /* [families] longrope (Phi-3): per token of the step, 1 when its sequence's largest position in the step
     * + 1 exceeds original_max_position_embeddings (HF's per-call choice); device [max_tokens] uploaded with
     * each step, host image, and [max_seqs] scratch of the largest positions */
    int32_t *rope_sel, *rope_sel_host, *rope_seq_max;
    sits_engine_stats_t stats;
    sits_moe_t *moe;               /* [moe] the experts' MLP (cfg.moe.n_experts > 0), else NULL */
};

/* Bytes of one block in one layer's K (or V) buffer: the unit every KV copy moves. Each layer buffer
 * is [n_blocks] of these, so a block's part of a layer is contiguous. */
static size_t kv_layer_block_bytes(const sits_model_config_t *cfg, const sits_shard_dims_t *d, sits_dtype_t kv_dtype,
                                   int block_size)
{
    return sits_kv_layer_block_bytes(kv_dtype, block_size, d->nkv_loc, cfg->head_dim); /* I8: q + scales (backend.h) */
}

size_t sits_engine_kv_block_bytes(const sits_model_config_t *cfg, const sits_shard_dims_t *d, sits_dtype_t kv_dtype,
                                  int block_size)
{
    /* this pipeline stage's layers only: a stage holds the KV of its own layers */
    int layers = d->layer1 > d->layer0 ? d->layer1 - d->layer0 : cfg->n_layers;
    return (size_t)layers * 2 * kv_layer_block_bytes(cfg, d, kv_dtype, block_size);
}

static size_t align16(size_t x) { return (x + 15) & ~(size_t)15; }

static meta_layout_t meta_layout(int cap_tokens, int cap_seqs, int mb)
{
    meta_layout_t l;
    size_t t4 = align16(sizeof(int32_t) * (size_t)cap_tokens), s4 = align16(sizeof(int32_t) * (size_t)cap_seqs);
    l.cap_tokens = cap_tokens;
    l.cap_seqs = cap_seqs;
    l.tok = 0;
    l.pos = l.tok + t4;
    l.seq = l.pos + t4;
    l.slot = l.seq + t4;
    l.out = l.slot + t4;
    l.rows = l.out + s4;
    l.bt = l.rows + align16(sizeof(sits_sample_row_t) * (size_t)cap_seqs);
    l.bytes = l.bt + align16(sizeof(int32_t) * (size_t)cap_seqs * mb);
    return l;
}

static meta_view_t meta_view(const unsigned char *base, const meta_layout_t *l)
{
    meta_view_t v = {
        .tok = (const int32_t *)(base + l->tok), .pos = (const int32_t *)(base + l->pos),
        .seq = (const int32_t *)(base + l->seq), .slot = (const int32_t *)(base + l->slot),
        .out = (const int32_t *)(base + l->out), .bt = (const int32_t *)(base + l->bt),
        .rows = (const sits_sample_row_t *)(base + l->rows),
    };
    return v;
}

static sits_status_t host_alloc(sits_backend_t *be, size_t bytes, void **p_)
{
    if (be->ops->host_alloc) return be->ops->host_alloc(be, bytes, p_);
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) return SITS_ERR_NOMEM;
    *p_ = p;
    return SITS_OK;
}

static void host_free(sits_backend_t *be, void *p)
{
    if (!p) return;
    if (be->ops->host_free) be->ops->host_free(be, p);
    else free(p);
}

void sits_engine_destroy(sits_engine_t *e)
{
    if (!e) return;
    sits_backend_t *be = e->be;
    if (e->stats.micro_steps > 0)
        SITS_INFO(SITS_SUB_ENGINE, "engine: %ld steps ran as pipeline micro-batches (%ld micro-batches)", e->stats.micro_steps,
                  e->stats.micro_batches);
    for (int i = 0; i < e->n_buckets; i++) {
        if (e->graphs[i] && be->ops->graph_destroy) be->ops->graph_destroy(be, e->graphs[i]);
        if (e->graphs_many[i] && be->ops->graph_destroy) be->ops->graph_destroy(be, e->graphs_many[i]);
    }
    sits_moe_destroy(e->moe);   /* [moe] */
    void *bufs[] = { e->x, e->h, e->qkv, e->attn, e->proj, e->gu, e->act, e->last, e->logits, e->recs, e->meta, e->xq, e->xs,
                     e->kv_bufs, e->kv_ids, e->kv_flat, e->masks, e->samp, e->ents };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) be->ops->free(be, bufs[i]);
    for (int l = 0; e->k_cache && l < e->w->cfg.n_layers; l++) {
        if (e->k_cache[l]) be->ops->free(be, e->k_cache[l]);
        if (e->v_cache[l]) be->ops->free(be, e->v_cache[l]);
    }
    free(e->k_cache);
    free(e->v_cache);
    free(e->meta_host);
    free(e->seq_seen);
    if (e->rope_sel) be->ops->free(be, e->rope_sel);   /* [families] */
    free(e->rope_sel_host);
    free(e->rope_seq_max);
    free(e->seq_last);
    free(e->cuts);
    host_free(be, e->logits_host);
    host_free(be, e->recs_host);
    host_free(be, e->samp_host);
    free(e->ents_host);
    free(e);
}

/* [memory plan] Bytes of each step buffer (one definition for sits_engine_create's allocations and
 * sits_engine_mem_plan's figures). */
typedef struct {
    size_t x, h, qkv, attn, proj, gu, act, last, logits, recs, xq, xs;
    size_t masks;   /* [structured output] [max_seqs] masks over the whole vocabulary + [max_seqs] int32 rows */
    size_t samp, ents;   /* [sampling controls + logprobs] see struct sits_engine */
    size_t ent_cap;
} step_bytes_t;

/* [sampling controls + logprobs] byte offsets in samp of S rows each, in this order (a step uploads
 * proc_rows + lp_rows in one copy and downloads lp_recs + pick in one) */
typedef struct {
    size_t proc_rows, lp_rows, lp_recs, pick, rowmax, cut, ids, bytes;
} samp_layout_t;

static samp_layout_t samp_layout(size_t S)
{
    samp_layout_t l;
    l.proc_rows = 0;
    l.lp_rows = l.proc_rows + align16(S * sizeof(sits_logit_proc_row_t));
    l.lp_recs = l.lp_rows + align16(S * sizeof(sits_logprob_row_t));
    l.pick = l.lp_recs + align16(S * sizeof(sits_logprob_rec_t));   /* downloaded with the records */
    l.rowmax = l.pick + align16(S * sizeof(float));
    l.cut = l.rowmax + align16(S * sizeof(float));
    l.ids = l.cut + align16(S * sizeof(float));
    l.bytes = l.ids + align16(S * sizeof(int32_t));
    return l;
}

/* logit_process entries planned for: every row's whole history (max_blocks_per_seq * block_size
 * tokens) plus its bias list (logit_bias <= 1024, eos and stop ids), at most 1 Mi entries (20 MiB);
 * a step beyond grows the buffer. */
#define ENGINE_PROC_EXTRA 1152
#define ENGINE_PROC_MAX ((size_t)1 << 20)
static size_t ent_cap_of(const sits_engine_params_t *p)
{
    size_t per = (size_t)p->max_blocks_per_seq * (size_t)p->block_size + ENGINE_PROC_EXTRA;
    size_t cap = per * (size_t)p->max_seqs;
    return cap > ENGINE_PROC_MAX ? ENGINE_PROC_MAX : cap;
}
#define ENT_BYTES (sizeof(sits_logit_proc_ent_t) + sizeof(float))

/* [structured output] uint32 words of an allowed-token mask over the whole vocabulary (grammar.h's
 * SITS_GRAMMAR_MASK_WORDS; the engine does not depend on the grammar module). */
static int mask_words_of(const sits_model_config_t *c)
{
    return (int)(((size_t)c->vocab_size + 31) / 32);
}

static step_bytes_t step_bytes(const sits_engine_params_t *p, const sits_model_config_t *c, const sits_shard_dims_t *d,
                               const sits_backend_t *be, int res_f32, int logits_f32, int fp8_fused)
{
    size_t T = (size_t)p->max_tokens, S = (size_t)p->max_seqs, H = (size_t)c->hidden_size;
    size_t as = sits_dtype_size(be->act_dtype), vloc = d->v_count ? (size_t)d->v_count : 1;
    step_bytes_t b = {
        .x = T * H * (res_f32 ? sizeof(float) : as), .h = T * H * as, .qkv = T * (size_t)d->qkv_dim * as,
        .attn = T * (size_t)d->nh_loc * c->head_dim * as, .proj = T * H * as, .gu = T * 2 * (size_t)d->i_loc * as,
        .act = T * (size_t)d->i_loc * as, .last = S * H * as, .logits = S * vloc * (logits_f32 ? sizeof(float) : as),
        .recs = S * SITS_SAMPLE_REC_BYTES(SITS_SAMPLE_MAX_C),
        .samp = samp_layout(S).bytes, .ent_cap = ent_cap_of(p),
    };
    b.ents = b.ent_cap * ENT_BYTES;
    if (fp8_fused) {
        b.xq = T * (H > (size_t)d->i_loc ? H : (size_t)d->i_loc);
        b.xs = T * sizeof(float);
    }
    /* masked on the device only with fp32 logits there (else apply_masks masks the host copy) */
    if (be->ops->logit_mask && logits_f32 && d->v_count > 0)
        b.masks = S * ((size_t)mask_words_of(c) + 1) * sizeof(uint32_t);
    return b;
}

/* The largest graph bucket: steps of up to this many sequences replay captured graphs. */
static int graph_cap(const sits_engine_params_t *p)
{
    int cap = p->max_tokens < p->max_seqs ? p->max_tokens : p->max_seqs;
    return cap > ENGINE_GRAPH_MAX ? ENGINE_GRAPH_MAX : cap;
}

/* The backend's share of the plan: the shapes the step sends through it. */
static sits_status_t backend_mem_plan(const sits_engine_params_t *p, const sits_model_config_t *c, const sits_shard_dims_t *d,
                                      sits_backend_t *be, int fp8, int fp8_fused, int int4, int reserve, sits_mem_plan_t *plan)
{
    if (!be->ops->mem_plan) return SITS_OK;
    int max_in = c->hidden_size > d->i_loc ? c->hidden_size : d->i_loc;
    if (d->nh_loc * c->head_dim > max_in) max_in = d->nh_loc * c->head_dim;
    int max_out = d->qkv_dim > 2 * d->i_loc ? d->qkv_dim : 2 * d->i_loc;
    if (c->hidden_size > max_out) max_out = c->hidden_size;
    sits_mem_shape_t sh = {
        .n_tokens = p->max_tokens, .max_in = max_in, .max_out = max_out, .n_logits = p->max_seqs,
        .hidden_in = c->hidden_size, .vocab_out = d->v_count, .fp8 = fp8, .fp8_lm_head = fp8, .fp8_fused = fp8_fused,
    };
    if (int4) {   /* [int4] the block linears of this shard, [out, in]: qkv, o, gate_up, down */
        size_t H = (size_t)c->hidden_size, lin[4] = { (size_t)d->qkv_dim * H, H * (size_t)(d->nh_loc * c->head_dim),
                                                      2 * (size_t)d->i_loc * H, H * (size_t)d->i_loc };
        for (int i = 0; i < 4; i++)
            if (lin[i] > sh.w4_elems) sh.w4_elems = lin[i];
    }
    return be->ops->mem_plan(be, &sh, reserve, plan);
}

sits_status_t sits_engine_mem_plan(const sits_engine_params_t *p, const sits_model_config_t *c, const sits_shard_dims_t *d,
                                   sits_backend_t *be, int fp8, int int4, sits_mem_plan_t *plan)
{
    const sits_backend_ops_t *op = be->ops;
    int res_f32 = op->add_rmsnorm_f32res != NULL, logits_f32 = op->matmul_f32out != NULL;
    int fp8_fused = fp8 && res_f32 && !p->fp8_separate_quant && op->matmul_fp8q && op->add_rmsnorm_f32res_fp8 && op->silu_mul_fp8;
    step_bytes_t b = step_bytes(p, c, d, be, res_f32, logits_f32, fp8_fused);
    char name[64];
    snprintf(name, sizeof name, "activations (%d tokens a step)", p->max_tokens);
    sits_mem_plan_add(plan, name, b.x + b.h + b.qkv + b.attn + b.proj + b.gu + b.act + b.xq + b.xs, 0);
    snprintf(name, sizeof name, "logits (%d sequences x %d vocab)", p->max_seqs, d->v_count);
    sits_mem_plan_add(plan, name, b.last + b.logits, 0);
    sits_mem_plan_add(plan, "sampling records", b.recs, 0);
    sits_mem_plan_add(plan, "sampling controls and logprobs", b.samp + b.ents, 0);
    if (c->moe.n_experts)   /* [moe] */
        sits_mem_plan_add(plan, "mixture of experts (router, dispatch, expert rows)",
                          sits_moe_step_bytes(c, d, be->act_dtype, p->max_tokens, p->moe_dev_max), 0);
    if (b.masks) sits_mem_plan_add(plan, "structured output masks", b.masks, 0);
    int graphs = !p->no_cuda_graphs && op->graph_begin && op->graph_end && op->graph_launch, cap = graph_cap(p);
    size_t meta = meta_layout(p->max_tokens, p->max_seqs, p->max_blocks_per_seq).bytes +
                  meta_layout(graphs ? cap : 1, graphs ? cap : 1, p->max_blocks_per_seq).bytes;
    sits_mem_plan_add(plan, "step metadata (tokens, positions, block tables)", meta, 0);
    if (be->device >= 0 && op->kv_block_copy) {
        int layers = d->layer1 - d->layer0;
        size_t per_block = sits_engine_kv_block_bytes(c, d, be->kv_dtype, p->block_size);
        int chunk = (int)(ENGINE_KV_STAGING_BYTES / (per_block ? per_block : 1));
        if (chunk < 1) chunk = 1;
        sits_mem_plan_add(plan, "kv swap / move staging", (size_t)chunk * per_block + sizeof(int32_t) * (size_t)chunk +
                                                                 sizeof(void *) * 2 * (size_t)layers, 0);
    }
    return backend_mem_plan(p, c, d, be, fp8, fp8_fused, int4, 0, plan);
}

static int kv_copy_ready(sits_engine_t *e);

/* Graph buckets below cap: 1, 2, 4, ..., 128, then every ENGINE_GRAPH_STEP (a decode step of n sequences
 * replays the smallest bucket >= n: at most a third of padding rows above 128), then cap itself. */
static void make_buckets(sits_engine_t *e, int cap)
{
    e->n_buckets = 0;
    for (int b = 1; b < cap && e->n_buckets < ENGINE_MAX_BUCKETS - 1; b = b < 128 ? 2 * b : b + ENGINE_GRAPH_STEP)
        e->buckets[e->n_buckets++] = b;
    e->buckets[e->n_buckets++] = cap;
}

sits_status_t sits_engine_create(const sits_engine_params_t *params, sits_model_weights_t *w, sits_backend_t *be,
                                 sits_comm_t *tp_comm, sits_engine_t **engine_p)
{
    const sits_model_config_t *c = &w->cfg;
    const sits_shard_dims_t *d = &w->dims;
    const sits_backend_ops_t *op = be->ops;
    if (params->max_tokens < 1 || params->max_seqs < 1 || params->max_blocks_per_seq < 1 || params->n_blocks < 1 ||
        params->block_size < 1) {
        SITS_ERROR(SITS_SUB_ENGINE, "engine: bad sizes (max_tokens %d, max_seqs %d, blocks/seq %d, blocks %d, block %d)",
                   params->max_tokens, params->max_seqs, params->max_blocks_per_seq, params->n_blocks, params->block_size);
        return SITS_ERR_INVALID;
    }
    if (c->head_dim > 512) {
        SITS_ERROR(SITS_SUB_ENGINE, "head_dim %d > 512 is not supported", c->head_dim);
        return SITS_ERR_UNSUPPORTED;
    }
    if ((c->qk_norm && !op->rmsnorm_heads) || (c->embed_scale && !op->scale) || (c->act_gelu_tanh && !op->gelu_tanh_mul) ||
        (c->final_softcap > 0.0f && !op->softcap) || (c->rope_type == SITS_ROPE_LONGROPE && !op->rope_sel)) {   /* [families] */
        SITS_ERROR(SITS_SUB_ENGINE, "%s needs an op (per-head norms, scale, gelu_tanh_mul or softcap) the %s backend does not have",
                   c->model_type, op->name);
        return SITS_ERR_UNSUPPORTED;
    }
    if (tp_comm->size != w->shard.tp_size) {
        SITS_ERROR(SITS_SUB_ENGINE, "tp group has %d ranks but the weights are sharded %d ways", tp_comm->size,
                   w->shard.tp_size);
        return SITS_ERR_INVALID;
    }
    sits_status_t st = SITS_OK;
    sits_engine_t *e = calloc(1, sizeof *e);
    if (!e) return SITS_ERR_NOMEM;
    e->p = *params;
    e->w = w;
    e->be = be;
    e->comm = tp_comm;
    e->res_f32 = op->add_rmsnorm_f32res != NULL;
    e->logits_f32 = op->matmul_f32out != NULL;
    if (w->n_fp8 > 0 && !op->matmul_fp8) { /* [fp8] */
        SITS_ERROR(SITS_SUB_ENGINE, "the weights hold %d fp8 linear layers but the %s backend has no fp8 GEMM", w->n_fp8,
                   op->name);
        free(e);
        return SITS_ERR_UNSUPPORTED;
    }
    if (w->n_int4 > 0 && !op->matmul_w4) { /* [int4] */
        SITS_ERROR(SITS_SUB_ENGINE, "the weights hold %d int4 linear layers but the %s backend has no W4A16 GEMM", w->n_int4,
                   op->name);
        free(e);
        return SITS_ERR_UNSUPPORTED;
    }
    size_t S = (size_t)params->max_seqs;
    size_t vloc = d->v_count ? (size_t)d->v_count : 1;
    size_t rec_max = SITS_SAMPLE_REC_BYTES(SITS_SAMPLE_MAX_C);
    e->fp8_fused = w->n_fp8 > 0 && e->res_f32 && !params->fp8_separate_quant && op->matmul_fp8q && op->add_rmsnorm_f32res_fp8 &&
                   op->silu_mul_fp8;
    step_bytes_t b = step_bytes(params, c, d, be, e->res_f32, e->logits_f32, e->fp8_fused);   /* as planned */
    SITS_CHECK_GOTO(op->alloc(be, b.x, &e->x), st, err);
    SITS_CHECK_GOTO(op->alloc(be, b.h, &e->h), st, err);
    SITS_CHECK_GOTO(op->alloc(be, b.qkv, &e->qkv), st, err);
    SITS_CHECK_GOTO(op->alloc(be, b.attn, &e->attn), st, err);
    SITS_CHECK_GOTO(op->alloc(be, b.proj, &e->proj), st, err);
    SITS_CHECK_GOTO(op->alloc(be, b.gu, &e->gu), st, err);
    SITS_CHECK_GOTO(op->alloc(be, b.act, &e->act), st, err);
    SITS_CHECK_GOTO(op->alloc(be, b.last, &e->last), st, err);
    SITS_CHECK_GOTO(op->alloc(be, b.logits, &e->logits), st, err);
    SITS_CHECK_GOTO(op->alloc(be, b.recs, &e->recs), st, err);
    SITS_CHECK_GOTO(op->alloc(be, b.samp, (void **)&e->samp), st, err);
    SITS_CHECK_GOTO(op->alloc(be, b.ents, &e->ents), st, err);
    e->ent_cap = b.ent_cap;
    if (b.masks) {   /* [structured output] now, not at the first constrained step */
        SITS_CHECK_GOTO(op->alloc(be, b.masks, &e->masks), st, err);
        e->mask_cap = params->max_seqs;
        e->mask_words = mask_words_of(c);
    }
    if (e->fp8_fused) {
        SITS_CHECK_GOTO(op->alloc(be, b.xq, (void **)&e->xq), st, err);
        SITS_CHECK_GOTO(op->alloc(be, b.xs, (void **)&e->xs), st, err);
    }
    if (be->ops->mem_plan) {   /* [memory plan] the backend's scratch for the largest shapes, now */
        sits_mem_plan_t bp;
        memset(&bp, 0, sizeof bp);
        SITS_CHECK_GOTO(backend_mem_plan(params, c, d, be, w->n_fp8 > 0, e->fp8_fused, w->n_int4 > 0, 1, &bp), st, err);
    }

#ifdef HAVE_NCCL
    e->fused_ar = be->act_dtype == SITS_DT_BF16 && sits_comm_custom_ar_enabled(tp_comm) == 1;
#endif
    /* graphs: the backend must have them, the comm must be capturable (a no-op at size 1, nccl, or
     * the custom all-reduce, whose kernels synchronise through device memory) */
    int comm_ok = tp_comm->size == 1 ||
                  (tp_comm->ops->name && (!strcmp(tp_comm->ops->name, "nccl") || !strcmp(tp_comm->ops->name, "custom_ar")));
    int cap = graph_cap(params);
    /* pipeline stages exchange activations with blocking host calls on the CPU path: no graphs then */
    if (params->pp_comm && params->pp_comm->size > 1) comm_ok = 0;
    if (!(w->dims.first_stage && w->dims.last_stage) && !params->pp_comm) {
        SITS_ERROR(SITS_SUB_ENGINE, "the weights are a pipeline stage (layers %d..%d) but no pipeline communicator was given (or the reverse)",
                   w->dims.layer0, w->dims.layer1);
        sits_engine_destroy(e);
        return SITS_ERR_INVALID;
    }
    e->graphs_off = params->no_cuda_graphs || !op->graph_begin || !op->graph_end || !op->graph_launch || !comm_ok;
    if (c->moe.n_experts) {   /* [moe] the host path reads expert row counts back every layer: graphs only up to the device path's steps */
        SITS_CHECK_GOTO(sits_moe_create(w, be, tp_comm, params->max_tokens, params->moe_dev_max, &e->moe), st, err);
        int gmax = sits_moe_graph_max(e->moe);
        if (!gmax) e->graphs_off = 1;
        else if (cap > gmax) cap = gmax;
    }
    if (!e->graphs_off) make_buckets(e, cap);
    e->lay_eager = meta_layout(params->max_tokens, params->max_seqs, params->max_blocks_per_seq);
    e->lay_graph = meta_layout(e->graphs_off ? 1 : cap, e->graphs_off ? 1 : cap, params->max_blocks_per_seq);
    e->off_graph = e->lay_eager.bytes;
    size_t meta_bytes = e->off_graph + e->lay_graph.bytes;
    SITS_CHECK_GOTO(op->alloc(be, meta_bytes, (void **)&e->meta), st, err);
    /* the graph region's pad entries are read by captured kernels before any step writes them */
    SITS_CHECK_GOTO(op->memset0(be, e->meta, meta_bytes), st, err);
    e->meta_host = calloc(1, meta_bytes);
    e->seq_seen = calloc(S, 1);
    if (c->rope_type == SITS_ROPE_LONGROPE) {   /* [families] */
        SITS_CHECK_GOTO(op->alloc(be, sizeof(int32_t) * (size_t)params->max_tokens, (void **)&e->rope_sel), st, err);
        e->rope_sel_host = calloc((size_t)params->max_tokens, sizeof(int32_t));
        e->rope_seq_max = calloc(S, sizeof(int32_t));
        if (!e->rope_sel_host || !e->rope_seq_max) { st = SITS_ERR_NOMEM; goto err; }
    }
    /* [pp micro-batches] only with more than one stage */
    e->max_micro = params->pp_comm && params->pp_comm->size > 1 ? params->pp_microbatches : 1;
    if (e->max_micro > ENGINE_MAX_MICRO) {
        SITS_WARN(SITS_SUB_ENGINE, "engine: %d pipeline micro-batches asked, %d used", e->max_micro, ENGINE_MAX_MICRO);
        e->max_micro = ENGINE_MAX_MICRO;
    }
    if (e->max_micro > 1) {
        e->seq_last = malloc(sizeof(int) * S);
        e->cuts = malloc(sizeof(int) * (size_t)params->max_tokens);
        if (!e->seq_last || !e->cuts) { st = SITS_ERR_NOMEM; goto err; }
    }
    e->micro_cur = -1;
    /* 0 = auto: on a GPU a decode step is bound by reading the stage's weights, which every
     * micro-batch does again (2 x H200, 8B --pp 2: 3168 tok/s served at 32 streams with 2
     * micro-batches a step, against 5231 offline at batch 32 with whole steps; bench/RESULTS.md),
     * so only steps of >= 128 tokens a micro-batch (prefill) split there; the cpu splits any step. */
    e->min_micro_tokens = params->pp_microbatch_min_tokens > 0 ? params->pp_microbatch_min_tokens : be->device >= 0 ? 128 : 1;
    SITS_CHECK_GOTO(host_alloc(be, S * vloc * sizeof(float), (void **)&e->logits_host), st, err);
    SITS_CHECK_GOTO(host_alloc(be, S * rec_max, (void **)&e->recs_host), st, err);
    SITS_CHECK_GOTO(host_alloc(be, b.samp, (void **)&e->samp_host), st, err);
    e->k_cache = calloc((size_t)c->n_layers, sizeof(void *));
    e->v_cache = calloc((size_t)c->n_layers, sizeof(void *));
    if (!e->meta_host || !e->seq_seen || !e->k_cache || !e->v_cache) { st = SITS_ERR_NOMEM; goto err; }
    e->kv_lbb = kv_layer_block_bytes(c, d, be->kv_dtype, params->block_size);
    size_t kv_layer = (size_t)params->n_blocks * e->kv_lbb;
    for (int l = d->layer0; l < d->layer1; l++) { /* this stage's layers; the others stay NULL */
        SITS_CHECK_GOTO(op->alloc(be, kv_layer, &e->k_cache[l]), st, err);
        SITS_CHECK_GOTO(op->alloc(be, kv_layer, &e->v_cache[l]), st, err);
    }
    SITS_CHECK_GOTO(op->sync(be), st, err);
    kv_copy_ready(e);   /* [memory plan] the swap / move staging now, not in a step (on the cpu too: no alloc later) */
    SITS_INFO(SITS_SUB_ENGINE, "engine: %d KV blocks of %d tokens (%.1f MiB, %s), up to %d tokens / %d sequences a step",
              params->n_blocks, params->block_size,
              (double)kv_layer * 2 * (d->layer1 - d->layer0) / (1 << 20), sits_dtype_name(be->kv_dtype), params->max_tokens,
              params->max_seqs);
    SITS_INFO(SITS_SUB_ENGINE, "engine: residual %s%s, logits %s, sampling reduction %s, cuda graphs %s (up to %d tokens)%s",
              e->res_f32 ? "fp32" : sits_dtype_name(be->act_dtype), e->fused_ar ? " (fused all-reduce + rmsnorm)" : "", e->logits_f32 ? "fp32" : sits_dtype_name(be->act_dtype),
              op->sample_reduce ? "on the backend" : "on the host",
              e->graphs_off ? (params->no_cuda_graphs ? "off (--no-cuda-graphs)" : !comm_ok ? "off (tp comm not capturable)"
                               : !op->graph_begin || !op->graph_end || !op->graph_launch ? "off (backend)"
                               : "off (mixture of experts: routing on the host)")
                            : "on",
              e->graphs_off ? 0 : cap,
              w->n_fp8 == 0    ? ""
              : e->fp8_fused ? ", fp8 activations quantised in the rmsnorm / silu*mul kernels"
                             : ", fp8 activations quantised by a kernel of their own");
    *engine_p = e;
    return SITS_OK;
err:
    sits_engine_destroy(e);
    return st;
}

/* ---- the forward pass --------------------------------------------------------------------------- */

/* residual += x; out = rmsnorm(residual) * w, in whichever residual dtype the engine keeps.
 * [fp8] fp8_next: an FP8 GEMM reads h next; quantise it here when the engine fuses that -- and then only
 * the E4M3 rows are made (h itself is not written: the FP8 GEMM, or GEMV, is its only reader; xq_of names
 * h as what xq stands for). */
static sits_status_t add_norm(sits_engine_t *e, const void *x, const void *w, int n, int fp8_next)
{
    const sits_model_config_t *c = &e->w->cfg;
    if (fp8_next && e->fp8_fused) {
        SITS_CHECK(e->be->ops->add_rmsnorm_f32res_fp8(e->be, NULL, e->xq, e->xs, e->x, x, w, n, c->hidden_size, c->rms_norm_eps));
        e->xq_of = e->h;
        return SITS_OK;
    }
    if (e->res_f32) return e->be->ops->add_rmsnorm_f32res(e->be, e->h, e->x, x, w, n, c->hidden_size, c->rms_norm_eps);
    return e->be->ops->add_rmsnorm(e->be, e->h, e->x, x, w, n, c->hidden_size, c->rms_norm_eps);
}

/* proj [n, H] holds this rank's partial sums: all-reduce them, residual += proj, h = rmsnorm(residual) * w;
 * one fused kernel on a custom all-reduce communicator. */
/* [fp8] y [n, out] = x . w^T (+ bias): the FP8 GEMM when the weights are FP8 (w_scale set), [int4] the
 * W4A16 GEMM when they are INT4 (w4->q set), else the backend-dtype one. */
static sits_status_t linear(sits_engine_t *e, void *y, const void *x, const void *w, const float *w_scale, const sits_w4_t *w4,
                            const void *bias, int n, int in, int out)
{
    const void *q_of = e->xq_of;
    e->xq_of = NULL;
    if (x == q_of && (!w_scale || (w4 && w4->q))) return SITS_ERR_INTERNAL;   /* x itself was not written (add_norm) */
    if (w4 && w4->q) return e->be->ops->matmul_w4(e->be, y, x, w4, bias, n, in, out);
    if (w_scale && x == q_of) return e->be->ops->matmul_fp8q(e->be, y, 0, e->xq, e->xs, w, w_scale, bias, n, in, out);
    if (w_scale) return e->be->ops->matmul_fp8(e->be, y, 0, x, w, w_scale, bias, n, in, out);
    return e->be->ops->matmul(e->be, y, x, w, bias, n, in, out);
}

/* [perf: swiglu gemv] act = silu_mul(h . gu^T) in one backend op (backend.h matmul_swiglu) where the backend has a
 * kernel for it: the gate/up linear's input as linear() takes it (the E4M3 rows add_norm made of h for FP8 weights).
 * SITS_ERR_UNSUPPORTED, nothing done, otherwise: the caller runs linear + silu_mul. */
static sits_status_t swiglu(sits_engine_t *e, const sits_layer_weights_t *lw, int n, int in, int inter)
{
    if (!e->be->ops->matmul_swiglu || lw->gu_bias || lw->gu_w4.q || (lw->gu_scale && e->xq_of != e->h))
        return SITS_ERR_UNSUPPORTED;
    sits_status_t st = e->be->ops->matmul_swiglu(e->be, e->act, lw->gu_scale ? e->xq : e->h, lw->gu_scale ? e->xs : NULL, lw->gu,
                                                 lw->gu_scale, n, in, inter);   /* act [n, inter] */
    if (st == SITS_OK) e->xq_of = NULL;
    return st;
}

static sits_status_t reduce_add_norm(sits_engine_t *e, const void *w, int n, int fp8_next)
{
    const sits_model_config_t *c = &e->w->cfg;
#ifdef HAVE_NCCL
    if (e->fused_ar) {
        int q = fp8_next && e->fp8_fused;
        SITS_CHECK(sits_comm_custom_ar_add_rmsnorm(e->comm, e->h, q ? e->xq : NULL, q ? e->xs : NULL, e->x, e->res_f32, e->proj, w,
                                                   n, c->hidden_size, c->rms_norm_eps));
        if (q) e->xq_of = e->h;
        return SITS_OK;
    }
#endif
    SITS_CHECK(e->comm->ops->allreduce_sum(e->comm, e->proj, (size_t)n * c->hidden_size, e->be->act_dtype));
    return add_norm(e, e->proj, w, n, fp8_next);
}

/* [families] Sandwich norms (Gemma 2/3): proj [n, H] holds this rank's partial sums of a sublayer's
 * output: all-reduce, proj = rmsnorm(proj) * post_w, then residual += proj and h = rmsnorm(residual) *
 * next_w. Not fused with the custom all-reduce (its kernel has no second norm). */
static sits_status_t reduce_post_norm_add_norm(sits_engine_t *e, const void *post_w, const void *next_w, int n, int fp8_next)
{
    const sits_model_config_t *c = &e->w->cfg;
    SITS_CHECK(e->comm->ops->allreduce_sum(e->comm, e->proj, (size_t)n * c->hidden_size, e->be->act_dtype));
    SITS_CHECK(e->be->ops->rmsnorm(e->be, e->proj, e->proj, post_w, n, c->hidden_size, c->rms_norm_eps));
    return add_norm(e, e->proj, next_w, n, fp8_next);
}

/* [families] Gemma's embedding scale sqrt(hidden_size), rounded to the activation dtype as HF does
 * (embed_scale.to(weight.dtype)); [granite] Granite's embedding_multiplier. */
static float embed_scale_of(const sits_engine_t *e)
{
    if (e->w->cfg.embed_mult > 0.0f) return e->w->cfg.embed_mult;   /* [granite] embedding_multiplier, as given */
    float s = sqrtf((float)e->w->cfg.hidden_size);
    return e->be->act_dtype == SITS_DT_BF16 ? sits_bf16_to_f32(sits_f32_to_bf16(s)) : s;
}

/* [pp micro-batches] The residual stream x [n, H] from the previous stage. Micro-batch m on mpi: the
 * receive posted at the step's start (enqueue_micro); otherwise (a whole step, nccl) a receive now. */
#define ENGINE_MICRO_TAG 32 /* + m: the pp comm's tag of micro-batch m (whole steps use send/recv's own) */
static sits_status_t pp_recv(sits_engine_t *e, sits_comm_t *pp, size_t x_bytes)
{
    if (e->micro_cur >= 0 && pp->ops->irecv) {
        SITS_CHECK(sits_comm_mpi_wait(&e->micro_recv[e->micro_cur], pp->timeout_s, "pipeline micro-batch recv", pp->mpi));
        SITS_TRACE(SITS_SUB_ENGINE, "engine: micro-batch %d received", e->micro_cur);
        return SITS_OK;
    }
    return pp->ops->recv(pp, e->x, x_bytes, pp->rank - 1);
}

/* x [n, H] on to the next stage: micro-batch m on mpi does not wait (enqueue_micro completes the
 * sends at the step's end, x keeps each micro-batch's rows apart until then). */
static sits_status_t pp_send(sits_engine_t *e, sits_comm_t *pp, size_t x_bytes)
{
    if (e->micro_cur >= 0 && pp->ops->isend)
        return pp->ops->isend(pp, e->x, x_bytes, pp->rank + 1, ENGINE_MICRO_TAG + e->micro_cur, &e->micro_send[e->micro_cur]);
    return pp->ops->send(pp, e->x, x_bytes, pp->rank + 1);
}

/* Enqueues the whole step (embed .. lm_head) for n tokens and n_out output rows reading the
 * metadata at v: no upload, no download, no wait -- what a graph records. */
static sits_status_t enqueue_forward(sits_engine_t *e, const meta_view_t *v, int n, int n_out, int max_context)
{
    const sits_model_config_t *c = &e->w->cfg;
    const sits_shard_dims_t *d = &e->w->dims;
    const sits_backend_ops_t *op = e->be->ops;
    sits_backend_t *be = e->be;
    sits_model_weights_t *w = e->w;
    int H = c->hidden_size, hd = c->head_dim;
    sits_attn_args_t aa = {
        .n_tokens = n, .seq = v->seq, .pos = v->pos, .block_tables = v->bt, .max_blocks = e->p.max_blocks_per_seq,
        .block_size = e->p.block_size, .n_heads = d->nh_loc, .n_kv_heads = d->nkv_loc, .head_dim = hd,
        .window = c->sliding_window, .scale = 1.0f / sqrtf((float)hd), .max_context = max_context,
        .softcap = c->attn_softcap,   /* [families] */
        .max_seq_tokens = e->seq_tokens,   /* [perf] */
    };
    if (c->attn_scale > 0.0f) aa.scale = c->attn_scale;   /* [families] Gemma: query_pre_attn_scalar^-0.5 */
    const float scale_nope = aa.scale;   /* [smollm3] NoPE layers: no cos / sin, so no attention factor */
    /* [families] longrope (and [rope] yarn) scale cos and sin by attention_factor, so q.k by its square */
    if (c->rope_attn_factor != 1.0 && c->rope_attn_factor > 0.0) aa.scale *= (float)(c->rope_attn_factor * c->rope_attn_factor);
    const float scale_rope = aa.scale;
    int q_dim = d->nh_loc * hd, kv_dim = d->nkv_loc * hd;
    sits_comm_t *pp = e->p.pp_comm;
    size_t x_bytes = (size_t)n * H * (e->res_f32 ? sizeof(float) : sits_dtype_size(be->act_dtype));

    if (!d->first_stage) {
        /* the residual stream from the previous stage; h = rmsnorm(x) for this stage's first layer */
        SITS_CHECK(pp_recv(e, pp, x_bytes));
        if (e->res_f32) {
            SITS_CHECK(op->memset0(be, e->proj, (size_t)n * H * sits_dtype_size(be->act_dtype)));
            SITS_CHECK(add_norm(e, e->proj, w->layers[d->layer0].attn_norm, n, w->layers[d->layer0].qkv_scale != NULL));
        } else {
            SITS_CHECK(op->rmsnorm(be, e->h, e->x, w->layers[d->layer0].attn_norm, n, H, c->rms_norm_eps));
        }
    } else if (e->res_f32) {
        /* embeddings in act dtype, all-reduced, then x = 0 + emb (fp32) and h = rmsnorm(x) */
        SITS_CHECK(op->embed(be, e->proj, w->embed, v->tok, n, H, d->v_start, d->v_count));       /* [n, H] */
        if (c->embed_scale) SITS_CHECK(op->scale(be, e->proj, (size_t)n * H, embed_scale_of(e)));  /* [families] */
        SITS_CHECK(op->memset0(be, e->x, (size_t)n * H * sizeof(float)));
        SITS_CHECK(reduce_add_norm(e, w->layers[0].attn_norm, n, w->layers[0].qkv_scale != NULL));
    } else {
        SITS_CHECK(op->embed(be, e->x, w->embed, v->tok, n, H, d->v_start, d->v_count));          /* x [n, H] */
        if (c->embed_scale) SITS_CHECK(op->scale(be, e->x, (size_t)n * H, embed_scale_of(e)));     /* [families] */
        SITS_CHECK(e->comm->ops->allreduce_sum(e->comm, e->x, (size_t)n * H, be->act_dtype));
        SITS_CHECK(op->rmsnorm(be, e->h, e->x, w->layers[0].attn_norm, n, H, c->rms_norm_eps));
    }
    for (int l = d->layer0; l < d->layer1; l++) {
        const sits_layer_weights_t *lw = &w->layers[l];
        /* [families] per-layer window (sliding / global layers) and RoPE base (Gemma 3's local layers) */
        aa.window = sits_model_layer_window(c, l);
        aa.sinks = lw->sinks;   /* [gpt-oss] NULL unless attn_sinks */
        const float *inv_freq = aa.window > 0 && w->inv_freq_local ? w->inv_freq_local : w->inv_freq;
        if (c->layer_nope[l] && w->inv_freq_none) inv_freq = w->inv_freq_none;   /* [smollm3] a NoPE layer */
        aa.scale = c->layer_nope[l] ? scale_nope : scale_rope;
        SITS_CHECK(linear(e, e->qkv, e->h, lw->qkv, lw->qkv_scale, &lw->qkv_w4, lw->qkv_bias, n, H, d->qkv_dim));  /* [n, qkv_dim] */
        /* [families] per-head q / k RMSNorm before RoPE (Qwen3, Gemma 3): inside the fused rope + kv write where
         * it can be (head_dim % 64 == 0), else its own op */
        const int fuse_rkv = !v->rope_sel && op->rope_kv_write && hd <= 256, fuse_qkn = fuse_rkv && c->qk_norm && hd % 64 == 0;
        if (c->qk_norm && !fuse_qkn) {
            SITS_CHECK(op->rmsnorm_heads(be, e->qkv, n, d->qkv_dim, 0, d->nh_loc, hd, lw->q_norm, c->rms_norm_eps));
            SITS_CHECK(op->rmsnorm_heads(be, e->qkv, n, d->qkv_dim, q_dim, d->nkv_loc, hd, lw->k_norm, c->rms_norm_eps));
        }
        if (v->rope_sel) {   /* [families] longrope: each token's set, then the cache write */
            SITS_CHECK(op->rope_sel(be, e->qkv, n, d->qkv_dim, d->nh_loc + d->nkv_loc, hd, v->pos, w->inv_freq, w->inv_freq_long,
                                    v->rope_sel));
            SITS_CHECK(op->kv_write(be, e->k_cache[l], e->v_cache[l], e->qkv, n, d->qkv_dim, q_dim, q_dim + kv_dim, kv_dim, hd,
                                    e->p.block_size, v->slot));
        } else if (fuse_rkv) { /* [rope + kv write] fused */
            SITS_CHECK(op->rope_kv_write(be, e->qkv, n, d->qkv_dim, d->nh_loc, d->nkv_loc, hd, v->pos, inv_freq, e->k_cache[l],
                                         e->v_cache[l], e->p.block_size, v->slot, fuse_qkn ? lw->q_norm : NULL,
                                         fuse_qkn ? lw->k_norm : NULL, c->rms_norm_eps));
        } else {
            SITS_CHECK(op->rope(be, e->qkv, n, d->qkv_dim, d->nh_loc + d->nkv_loc, hd, v->pos, inv_freq));
            SITS_CHECK(op->kv_write(be, e->k_cache[l], e->v_cache[l], e->qkv, n, d->qkv_dim, q_dim, q_dim + kv_dim, kv_dim, hd,
                                    e->p.block_size, v->slot));
        }
        SITS_CHECK(op->attention(be, e->attn, e->qkv, d->qkv_dim, e->k_cache[l], e->v_cache[l], &aa));  /* [n, q_dim] */
        SITS_CHECK(linear(e, e->proj, e->attn, lw->o, lw->o_scale, &lw->o_w4, lw->o_bias, n, q_dim, H));   /* [n, H] partial */
        if (c->sandwich_norms) SITS_CHECK(reduce_post_norm_add_norm(e, lw->post_attn_norm, lw->ffn_norm, n, lw->gu_scale != NULL));
        else SITS_CHECK(reduce_add_norm(e, lw->ffn_norm, n, lw->gu_scale != NULL));
        if (e->moe) {                                                                          /* [moe] [n, H] partial */
            e->xq_of = NULL;
            SITS_CHECK(sits_moe_forward(e->moe, l, e->h, e->proj, e->gu, e->act, n, v->slot));
        } else {
            /* [perf: swiglu gemv] gate/up + SwiGLU as one kernel where the activation stays bf16 (not the fused E4M3 rows) */
            sits_status_t sw = c->act_gelu_tanh || (lw->down_scale && e->fp8_fused) ? SITS_ERR_UNSUPPORTED
                                                                                       : swiglu(e, lw, n, H, d->i_loc);
            if (sw != SITS_ERR_UNSUPPORTED) {
                SITS_CHECK(sw);                                                                    /* act [n, I_loc] */
            } else {
                SITS_CHECK(linear(e, e->gu, e->h, lw->gu, lw->gu_scale, &lw->gu_w4, lw->gu_bias, n, H, 2 * d->i_loc));  /* [n, 2*I_loc] */
                if (c->act_gelu_tanh) {                                                            /* [families] GeGLU */
                    SITS_CHECK(op->gelu_tanh_mul(be, e->act, e->gu, n, d->i_loc));                 /* [n, I_loc] */
                } else if (lw->down_scale && e->fp8_fused) {          /* E4M3 [n, I_loc] + [n]; act not written */
                    SITS_CHECK(op->silu_mul_fp8(be, NULL, e->xq, e->xs, e->gu, n, d->i_loc));
                    e->xq_of = e->act;
                } else {
                    SITS_CHECK(op->silu_mul(be, e->act, e->gu, n, d->i_loc));                      /* [n, I_loc] */
                }
            }
            SITS_CHECK(linear(e, e->proj, e->act, lw->down, lw->down_scale, &lw->down_w4, lw->down_bias, n, d->i_loc, H));  /* [n, H] partial */
        }
        /* the last layer of a middle stage only needs the residual add: its h is not used (any norm
         * weight will do) */
        const void *next_norm = l + 1 < d->layer1 ? w->layers[l + 1].attn_norm
                                : d->last_stage   ? w->final_norm
                                                  : lw->attn_norm;
        int fp8_next = l + 1 < d->layer1 && w->layers[l + 1].qkv_scale != NULL;
        if (c->sandwich_norms) SITS_CHECK(reduce_post_norm_add_norm(e, lw->post_ffn_norm, next_norm, n, fp8_next));
        else SITS_CHECK(reduce_add_norm(e, next_norm, n, fp8_next));
    }
    if (!d->last_stage) return pp_send(e, pp, x_bytes);
    if (n_out > 0 && d->v_count > 0) {
        SITS_CHECK(op->gather_rows(be, e->last, e->h, v->out, n_out, H));                  /* [n_out, H] */
        if (w->lm_head_scale)                                                              /* [fp8] */
            SITS_CHECK(op->matmul_fp8(be, e->logits, e->logits_f32, e->last, w->lm_head, w->lm_head_scale, NULL, n_out, H,
                                      d->v_count));
        else if (e->logits_f32)                                                            /* [n_out, v_count] */
            SITS_CHECK(op->matmul_f32out(be, e->logits, e->last, w->lm_head, NULL, n_out, H, d->v_count));
        else
            SITS_CHECK(op->matmul(be, e->logits, e->last, w->lm_head, NULL, n_out, H, d->v_count));
        if (c->final_softcap > 0.0f)                                                       /* [families] Gemma 2 */
            SITS_CHECK(op->softcap(be, e->logits, (size_t)n_out * d->v_count, e->logits_f32, c->final_softcap));
    }
    return SITS_OK;
}

/* [pp micro-batches] The step as e->n_micro micro-batches, one after the other through this stage:
 * micro-batch m reads the metadata of its tokens (v shifted by its first token and first output;
 * the outputs' rows were made relative to its first token) and keeps its residual stream in its own
 * rows of x and its logits in its own rows of logits, so that a send in flight is never overwritten
 * and the logits come out as in one pass. The scratch buffers (h, qkv, ...) are reused from row 0.
 * On mpi every receive is posted first (the previous stage's micro-batch m lands while this one
 * works on m - 1) and the sends complete at the end; on nccl everything is enqueued in order on the
 * stream (recv m, layers, send m), which overlaps the stages by itself. On an error the requests
 * in flight are left: the caller ends the job. */
static sits_status_t enqueue_micro(sits_engine_t *e, const meta_view_t *v, int max_context)
{
    const sits_shard_dims_t *d = &e->w->dims;
    sits_backend_t *be = e->be;
    sits_comm_t *pp = e->p.pp_comm;
    size_t act = sits_dtype_size(be->act_dtype);
    size_t x_row = (size_t)e->w->cfg.hidden_size * (e->res_f32 ? sizeof(float) : act);
    size_t l_row = (size_t)d->v_count * (e->logits_f32 ? sizeof(float) : act);
    unsigned char *x0 = e->x, *l0 = e->logits;
    int M = e->n_micro, async = pp->ops->isend && pp->ops->irecv, sent = 0;
    sits_status_t st = SITS_OK;
    for (int m = 0; async && !d->first_stage && m < M && st == SITS_OK; m++)
        st = pp->ops->irecv(pp, x0 + (size_t)e->micro_tok[m] * x_row, (size_t)(e->micro_tok[m + 1] - e->micro_tok[m]) * x_row,
                            pp->rank - 1, ENGINE_MICRO_TAG + m, &e->micro_recv[m]);
    for (int m = 0; m < M && st == SITS_OK; m++) {
        int t0 = e->micro_tok[m], o0 = e->micro_out[m];
        meta_view_t vm = *v;
        vm.tok += t0;
        vm.pos += t0;
        vm.seq += t0;
        vm.slot += t0;
        vm.out += o0;
        if (vm.rope_sel) vm.rope_sel += t0;   /* [families] */
        e->x = x0 + (size_t)t0 * x_row;
        e->logits = l0 + (size_t)o0 * l_row;
        e->micro_cur = m;
        st = enqueue_forward(e, &vm, e->micro_tok[m + 1] - t0, e->micro_out[m + 1] - o0, max_context);
        if (st == SITS_OK && async && !d->last_stage) sent = m + 1;
        SITS_TRACE(SITS_SUB_ENGINE, "engine: micro-batch %d of %d (%d tokens) enqueued", m, M, e->micro_tok[m + 1] - t0);
    }
    e->x = x0;
    e->logits = l0;
    e->micro_cur = -1;
    for (int m = 0; m < sent && st == SITS_OK; m++)
        st = sits_comm_mpi_wait(&e->micro_send[m], pp->timeout_s, "pipeline micro-batch send", pp->mpi);
    return st;
}

/* [pp micro-batches] The split of batch b (see sits_engine_run in engine.h) into e->micro_tok /
 * micro_out; returns the count. b's sequence indices are already checked. A cut k (between tokens
 * k - 1 and k) is possible when no sequence of tokens [0, k) has a token at k or later. M is at most
 * the possible cuts + 1 and n / min_micro_tokens. Cut m of M is the possible one nearest to m * n / M
 * that leaves enough possible cuts for the ones after it. */
static int micro_split(sits_engine_t *e, const sits_batch_t *b)
{
    int n = b->n_tokens, nc = 0;
    e->micro_tok[0] = 0;
    e->micro_out[0] = 0;
    for (int i = 1; i < b->n_out; i++)
        if (b->out_rows[i] <= b->out_rows[i - 1]) goto one;
    for (int s = 0; s < b->n_seqs; s++) e->seq_last[s] = -1;
    for (int t = 0; t < n; t++) e->seq_last[b->seq[t]] = t;
    for (int t = 0, reach = 0; t + 1 < n; t++) {
        if (e->seq_last[b->seq[t]] > reach) reach = e->seq_last[b->seq[t]];
        if (reach <= t) e->cuts[nc++] = t + 1;
    }
    int M = nc + 1 < e->max_micro ? nc + 1 : e->max_micro;
    if (M > n / e->min_micro_tokens) M = n / e->min_micro_tokens;
    if (M < 2) goto one;
    for (int m = 1, prev = -1; m < M; m++) {
        double target = (double)n * m / M;
        int best = prev + 1;
        for (int i = prev + 2; i <= nc - (M - m); i++)
            if (fabs(e->cuts[i] - target) < fabs(e->cuts[best] - target)) best = i;
        e->micro_tok[m] = e->cuts[best];
        prev = best;
    }
    e->micro_tok[M] = n;
    for (int m = 1, o = 0; m <= M; m++) {
        while (o < b->n_out && b->out_rows[o] < e->micro_tok[m]) o++;
        e->micro_out[m] = o;
    }
    return M;
one:
    e->micro_tok[1] = n;
    e->micro_out[1] = b->n_out;
    return 1;
}

/* The bucket of a step of n tokens, or -1 when it does not run as a graph: graphs on, every token an
 * output, at most ENGINE_GRAPH_SEQ_TOKENS tokens of any sequence (decode steps; [speculative]
 * verification steps, k + 1 positions of each speculating sequence; not prefill chunks, which the
 * eager path sizes to their context), n within the largest bucket. A graph depends only on the
 * bucket: the kernels read tokens, positions and sequences from the step's metadata. */
static int graph_bucket(sits_engine_t *e, const sits_batch_t *b)
{
    int n = b->n_tokens;
    if (e->graphs_off || b->n_out != n || n > e->buckets[e->n_buckets - 1]) return -1;
    memset(e->seq_seen, 0, (size_t)b->n_seqs);
    for (int t = 0; t < n; t++) {
        int s = b->seq[t];
        if (s < 0 || s >= b->n_seqs || e->seq_seen[s] >= ENGINE_GRAPH_SEQ_TOKENS) return -1;
        e->seq_seen[s]++;
    }
    int i = 0;
    while (e->buckets[i] < n) i++;
    return i;
}

/* Records bucket i's graph from the metadata already uploaded in the graph region. A failed capture
 * disables graphs: at TP 1 the engine goes on eagerly; in a TP group it is an error (every rank
 * must take the same path through the collectives). */
static sits_status_t capture(sits_engine_t *e, int i, void **slot, const meta_view_t *v, int max_context)
{
    sits_backend_t *be = e->be;
    int B = e->buckets[i];
    void *g = NULL;
    sits_status_t st = be->ops->graph_begin(be), st_end = SITS_OK;
    if (st == SITS_OK) {
        st = enqueue_forward(e, v, B, B, max_context);
        st_end = be->ops->graph_end(be, &g); /* always: ends the capture even after a failed op */
    }
    if (st == SITS_OK && st_end == SITS_OK) {
        *slot = g; /* e->graphs[i] or e->graphs_many[i] */
        e->stats.graph_captures++;
        SITS_DEBUG(SITS_SUB_ENGINE, "engine: recorded the cuda graph of bucket %d", B);
        return SITS_OK;
    }
    if (g) be->ops->graph_destroy(be, g);
    e->graphs_off = 1;
    if (e->comm->size > 1) {
        SITS_ERROR(SITS_SUB_ENGINE, "engine: recording the cuda graph of bucket %d failed (%s); rerun with --no-cuda-graphs", B,
                   sits_status_str(st != SITS_OK ? st : st_end));
        return st != SITS_OK ? st : st_end;
    }
    SITS_WARN(SITS_SUB_ENGINE, "engine: recording the cuda graph of bucket %d failed (%s); cuda graphs off from now on", B,
              sits_status_str(st != SITS_OK ? st : st_end));
    return SITS_OK;
}

sits_status_t sits_engine_run(sits_engine_t *e, const sits_batch_t *b)
{
    const sits_model_config_t *c = &e->w->cfg;
    const sits_backend_ops_t *op = e->be->ops;
    sits_backend_t *be = e->be;
    int n = b->n_tokens, bs = e->p.block_size, mb = e->p.max_blocks_per_seq;
    int bw = b->bt_stride > 0 ? b->bt_stride : mb;   /* [scale] the batch's block-table row length */
    if (n < 1 || n > e->p.max_tokens || b->n_seqs < 1 || b->n_seqs > e->p.max_seqs || b->n_out < 0 || b->n_out > e->p.max_seqs ||
        bw > mb) {
        SITS_ERROR(SITS_SUB_ENGINE, "step of %d tokens / %d sequences / %d outputs / %d blocks a sequence exceeds the engine's "
                   "%d / %d / %d", n, b->n_seqs, b->n_out, bw, e->p.max_tokens, e->p.max_seqs, mb);
        return SITS_ERR_INVALID;
    }
    int gi = graph_bucket(e, b);
    int nb = gi >= 0 ? e->buckets[gi] : n;            /* tokens (and outputs) as enqueued */
    const meta_layout_t *L = gi >= 0 ? &e->lay_graph : &e->lay_eager;
    size_t base = gi >= 0 ? e->off_graph : 0;
    unsigned char *mh = e->meta_host + base;
    int32_t *tok_h = (int32_t *)(mh + L->tok), *pos_h = (int32_t *)(mh + L->pos), *seq_h = (int32_t *)(mh + L->seq);
    int32_t *slot_h = (int32_t *)(mh + L->slot), *out_h = (int32_t *)(mh + L->out), *bt_h = (int32_t *)(mh + L->bt);
    int max_pos = 0, seq_tokens = 0; /* the most tokens of one sequence (counted to 255) */
    memset(e->seq_seen, 0, (size_t)b->n_seqs);
    for (int t = 0; t < n; t++) {
        int s = b->seq[t], p = b->pos[t];
        if (s < 0 || s >= b->n_seqs || p < 0 || p / bs >= bw) {
            SITS_ERROR(SITS_SUB_ENGINE, "token %d: sequence %d position %d out of range", t, s, p);
            return SITS_ERR_INVALID;
        }
        if (e->seq_seen[s] < 255) e->seq_seen[s]++;
        if (e->seq_seen[s] > seq_tokens) seq_tokens = e->seq_seen[s];
        int blk = b->block_tables[(size_t)s * bw + p / bs];
        if (blk < 0 || blk >= e->p.n_blocks) {
            SITS_ERROR(SITS_SUB_ENGINE, "token %d: block %d out of range", t, blk);
            return SITS_ERR_INVALID;
        }
        if (b->tokens[t] < 0 || b->tokens[t] >= c->vocab_size) {
            SITS_ERROR(SITS_SUB_ENGINE, "token id %d outside the vocabulary (%d)", b->tokens[t], c->vocab_size);
            return SITS_ERR_INVALID;
        }
        tok_h[t] = b->tokens[t];
        pos_h[t] = p;
        seq_h[t] = s;
        slot_h[t] = blk * bs + p % bs;
        if (p > max_pos) max_pos = p;
    }
    for (int t = n; t < nb; t++) { /* pad rows: token 0 at position 0 (one key to attend), no cache write */
        tok_h[t] = tok_h[0];
        pos_h[t] = 0;
        seq_h[t] = seq_h[0];
        slot_h[t] = -1;
    }
    /* [perf] attention's bound on a sequence's tokens (sits_attn_args_t.max_seq_tokens): a graph's holds for every
     * replay of it, so a bucket keeps two (fewer than SITS_ATTN_FEW_SEQ_TOKENS tokens of any sequence: decode steps,
     * short verifications; or up to graph_bucket's ENGINE_GRAPH_SEQ_TOKENS); the pad rows, one key each, are the
     * exception that costs nothing */
    const int few = seq_tokens < SITS_ATTN_FEW_SEQ_TOKENS;
    e->seq_tokens = gi < 0 ? seq_tokens : few ? SITS_ATTN_FEW_SEQ_TOKENS - 1 : ENGINE_GRAPH_SEQ_TOKENS;
    void **gslot = gi < 0 ? NULL : few ? &e->graphs[gi] : &e->graphs_many[gi];
    for (int i = 0; i < b->n_out; i++) {
        if (b->out_rows[i] < 0 || b->out_rows[i] >= n) {
            SITS_ERROR(SITS_SUB_ENGINE, "output %d: row %d outside the step's %d tokens", i, b->out_rows[i], n);
            return SITS_ERR_INVALID;
        }
        out_h[i] = b->out_rows[i];
    }
    /* [pp micro-batches] the split (graphs are off with a pipeline: gi is -1 then); each output's
     * row relative to its micro-batch's first token */
    e->n_micro = e->max_micro > 1 && gi < 0 ? micro_split(e, b) : 1;
    for (int m = 0; e->n_micro > 1 && m < e->n_micro; m++)
        for (int i = e->micro_out[m]; i < e->micro_out[m + 1]; i++) out_h[i] -= e->micro_tok[m];
    for (int i = b->n_out; i < (gi >= 0 ? nb : 0); i++) out_h[i] = 0;
    if (b->sample && b->n_out > 0) sits_sample_rows(b->n_out, b->sample, (sits_sample_row_t *)(mh + L->rows));
    /* block tables [n_seqs, mb] on the device (the kernels' row stride, fixed for the graphs); the step's
     * [n_seqs, bw] go up as bw columns of each row (the others are never read: a token's blocks are < bw) */
    memcpy(bt_h, b->block_tables, sizeof(int32_t) * (size_t)b->n_seqs * bw);
    if (bw < mb && op->upload_rows) {
        SITS_CHECK(op->upload(be, e->meta + base, mh, L->bt));
        SITS_CHECK(op->upload_rows(be, e->meta + base + L->bt, sizeof(int32_t) * (size_t)mb, bt_h, sizeof(int32_t) * (size_t)bw,
                                   sizeof(int32_t) * (size_t)bw, b->n_seqs));
    } else {
        for (int s = b->n_seqs - 1; bw < mb && s > 0; s--)   /* rows to stride mb, last first (they overlap) */
            memmove(bt_h + (size_t)s * mb, bt_h + (size_t)s * bw, sizeof(int32_t) * (size_t)bw);
        /* one copy: everything up to the end of the block tables in use */
        SITS_CHECK(op->upload(be, e->meta + base, mh, L->bt + sizeof(int32_t) * (size_t)b->n_seqs * mb));
    }
    meta_view_t v = meta_view(e->meta + base, L);
    if (e->rope_sel) {   /* [families] longrope: the set of each token, as HF picks it per forward call */
        for (int s = 0; s < b->n_seqs; s++) e->rope_seq_max[s] = -1;
        for (int t = 0; t < n; t++)
            if (pos_h[t] > e->rope_seq_max[seq_h[t]]) e->rope_seq_max[seq_h[t]] = pos_h[t];
        for (int t = 0; t < nb; t++) e->rope_sel_host[t] = e->rope_seq_max[seq_h[t]] + 1 > c->rope_orig_max_pos;
        SITS_CHECK(op->upload(be, e->rope_sel, e->rope_sel_host, sizeof(int32_t) * (size_t)nb));
        v.rope_sel = e->rope_sel;
    }

    e->last_n_out = b->n_out;
    e->logits_ready = 0;
    e->rows_ready = b->sample != NULL && b->n_out > 0;
    e->last_rows_dev = v.rows;
    e->last_rows_host = mh + L->rows;
    if (e->n_micro > 1) {
        e->stats.micro_steps++;
        e->stats.micro_batches += e->n_micro;
        SITS_DEBUG(SITS_SUB_ENGINE, "engine: step of %d tokens as %d pipeline micro-batches", n, e->n_micro);
        return enqueue_micro(e, &v, max_pos + 1);
    }
    if (gi < 0) return enqueue_forward(e, &v, n, b->n_out, max_pos + 1);
    int graph_ctx = mb * bs; /* any length a later replay may see */
    if (*gslot) {
        SITS_CHECK(op->graph_launch(be, *gslot));
        e->stats.graph_replays++;
        return SITS_OK;
    }
    /* first step of this bucket: run it eagerly at the padded size (which also builds the GEMM plans
     * and loads the kernels outside the capture), then record the graph for the next ones */
    SITS_CHECK(enqueue_forward(e, &v, nb, nb, graph_ctx));
    return capture(e, gi, gslot, &v, graph_ctx);
}

sits_status_t sits_engine_logits(sits_engine_t *e, const float **logits_p)
{
    const sits_shard_dims_t *d = &e->w->dims;
    if (e->last_n_out > 0 && d->v_count > 0 && d->last_stage && !e->logits_ready) {
        size_t n = (size_t)e->last_n_out * d->v_count;
        if (e->logits_f32) SITS_CHECK(e->be->ops->download(e->be, e->logits_host, e->logits, n * sizeof(float)));
        else SITS_CHECK(e->be->ops->download_f32(e->be, e->logits_host, e->logits, n));
        e->logits_ready = 1;
        e->stats.logits_downloads++;
    }
    *logits_p = e->logits_host;
    return SITS_OK;
}

sits_status_t sits_engine_forward(sits_engine_t *e, const sits_batch_t *b, const float **logits_p)
{
    SITS_CHECK(sits_engine_run(e, b));
    if (b->n_out == 0 || e->w->dims.v_count == 0 || !e->w->dims.last_stage) SITS_CHECK(e->be->ops->sync(e->be));
    return sits_engine_logits(e, logits_p);
}

static sits_status_t sample_on_host(sits_engine_t *e, sits_comm_t *comm, const sits_sample_params_t *params, int32_t *tokens_p)
{
    const float *logits;
    SITS_CHECK(sits_engine_logits(e, &logits));
    e->stats.host_samples++;
    return sits_sample(comm, logits, e->last_n_out, e->w->dims.v_start, e->w->dims.v_count, params, tokens_p);
}

/* [structured output] the masks applied to this rank's logits: on the device when the backend has
 * logit_mask and the logits are fp32 there, else on the host copy (*host_p = 1: sample there). */
static sits_status_t apply_masks(sits_engine_t *e, const sits_sample_masks_t *m, int *host_p)
{
    const sits_shard_dims_t *d = &e->w->dims;
    sits_backend_t *be = e->be;
    *host_p = 0;
    if (!m || m->n == 0 || d->v_count == 0) return SITS_OK;
    for (int k = 0; k < m->n; k++)
        if (m->rows[k] < 0 || m->rows[k] >= e->last_n_out) {
            SITS_ERROR(SITS_SUB_ENGINE, "mask row %d out of range (%d outputs)", m->rows[k], e->last_n_out);
            return SITS_ERR_INVALID;
        }
    if (!be->ops->logit_mask || !e->logits_f32) {
        const float *logits;
        SITS_CHECK(sits_engine_logits(e, &logits));
        sits_backend_cpu_logit_mask(e->logits_host, d->v_start, d->v_count, m->masks, m->words, m->rows, m->n);
        *host_p = 1;
        return SITS_OK;
    }
    if (m->n > e->mask_cap || m->words != e->mask_words) {
        if (e->masks) be->ops->free(be, e->masks);
        e->masks = NULL;
        e->mask_cap = 0;
        int cap = e->p.max_seqs > m->n ? e->p.max_seqs : m->n;
        SITS_CHECK(be->ops->alloc(be, ((size_t)m->words + 1) * sizeof(uint32_t) * (size_t)cap, &e->masks));
        e->mask_cap = cap;
        e->mask_words = m->words;
    }
    size_t mbytes = sizeof(uint32_t) * (size_t)m->words * m->n;
    int32_t *rows_dev = (int32_t *)((uint32_t *)e->masks + (size_t)m->words * e->mask_cap);
    SITS_CHECK(be->ops->upload(be, e->masks, m->masks, mbytes));
    SITS_CHECK(be->ops->upload(be, rows_dev, m->rows, sizeof(int32_t) * (size_t)m->n));
    SITS_CHECK(be->ops->logit_mask(be, e->logits, d->v_start, d->v_count, e->masks, m->words, rows_dev, m->n));
    e->logits_ready = 0;   /* a host copy made before is stale */
    return SITS_OK;
}

/* The sampler on the (already transformed) logits: the backend's sample_reduce, or the host when
 * it has none, the candidate count is beyond it, or a top-p nucleus needs whole slices. */
static sits_status_t sample_logits(sits_engine_t *e, sits_comm_t *comm, const sits_sample_params_t *params, int32_t *tokens_p)
{
    const sits_shard_dims_t *d = &e->w->dims;
    sits_backend_t *be = e->be;
    int n = e->last_n_out;
    int c = sits_sample_cands(n, params);
    if (!be->ops->sample_reduce || !e->logits_f32 || c > SITS_SAMPLE_MAX_C) return sample_on_host(e, comm, params, tokens_p);
    /* the rows: uploaded with the step when the batch had them and they are these params */
    sits_sample_row_t rows_stack[64], *rows = n <= 64 ? rows_stack : malloc(sizeof *rows * (size_t)n);
    if (!rows) return SITS_ERR_NOMEM;
    sits_sample_rows(n, params, rows);
    sits_status_t st = SITS_OK;
    if (!e->rows_ready || memcmp(rows, e->last_rows_host, sizeof *rows * (size_t)n) != 0) {
        memcpy(e->last_rows_host, rows, sizeof *rows * (size_t)n);
        st = be->ops->upload(be, (void *)e->last_rows_dev, rows, sizeof *rows * (size_t)n);
        e->rows_ready = st == SITS_OK;
    }
    if (rows != rows_stack) free(rows);
    SITS_CHECK(st);
    SITS_CHECK(be->ops->sample_reduce(be, e->recs, e->logits, n, d->v_start, d->v_count, e->last_rows_dev, c));
    SITS_CHECK(be->ops->download(be, e->recs_host, e->recs, SITS_SAMPLE_REC_BYTES(c) * (size_t)n));
    int need_full = 0;
    SITS_CHECK(sits_sample_merge(comm, e->recs_host, n, c, params, tokens_p, &need_full));
    e->stats.device_samples++;
    if (need_full) return sample_on_host(e, comm, params, tokens_p); /* the same decision on every rank */
    return SITS_OK;
}

/* [sampling controls] The rows' lists on the host (samp_host's proc_rows, ents_host): *m_p entries,
 * *min_p_p = 1 when some row needs the min_p cut. ents grows past its planned size only for an
 * unusually long list (logged). */
static sits_status_t proc_lists(sits_engine_t *e, const sits_sample_params_t *params, size_t *m_p, int *min_p_p)
{
    sits_backend_t *be = e->be;
    int n = e->last_n_out;
    samp_layout_t L = samp_layout((size_t)e->p.max_seqs);
    size_t bound = sits_sample_proc_bound(n, params);
    if (bound > e->ent_cap) {
        size_t cap = bound + bound / 2;
        SITS_WARN(SITS_SUB_ENGINE, "engine: a step with %zu sampling-control entries (planned %zu): growing the buffer", bound,
                  e->ent_cap);
        void *nb = NULL;
        SITS_CHECK(be->ops->alloc(be, cap * ENT_BYTES, &nb));
        be->ops->free(be, e->ents);
        e->ents = nb;
        e->ent_cap = cap;
    }
    size_t want = bound > 1024 ? bound : 1024;   /* the host list grows with the largest step seen */
    if (want > e->ent_host_cap) {
        sits_logit_proc_ent_t *h = realloc(e->ents_host, sizeof *h * want);
        if (!h) return SITS_ERR_NOMEM;
        e->ents_host = h;
        e->ent_host_cap = want;
    }
    *m_p = sits_sample_proc_build(n, params, (sits_logit_proc_row_t *)(e->samp_host + L.proc_rows), e->ents_host, min_p_p);
    return SITS_OK;
}

/* ents' raw logits (after the entries) */
static float *ents_raw(sits_engine_t *e) { return (float *)((unsigned char *)e->ents + e->ent_cap * sizeof(sits_logit_proc_ent_t)); }

/* [sampling controls] bias, penalties and min_p on this rank's logits shard, on the device (rows and
 * entries uploaded): one logit_process call; for min_p the rows' maxima are all-gathered and a
 * second call cuts. */
static sits_status_t process_logits(sits_engine_t *e, sits_comm_t *comm, const sits_sample_params_t *params, int min_p)
{
    const sits_shard_dims_t *d = &e->w->dims;
    sits_backend_t *be = e->be;
    int n = e->last_n_out, R = comm->size;
    samp_layout_t L = samp_layout((size_t)e->p.max_seqs);
    float *rowmax_d = (float *)(e->samp + L.rowmax), *cut_d = (float *)(e->samp + L.cut);
    SITS_CHECK(be->ops->logit_process(be, e->logits, n, d->v_start, d->v_count, (const sits_logit_proc_row_t *)(e->samp + L.proc_rows),
                                      e->ents, ents_raw(e), NULL, min_p ? rowmax_d : NULL));
    e->logits_ready = 0;
    if (!min_p) return SITS_OK;
    /* min_p: the threshold is relative to the row's max over the whole vocabulary */
    float *mx = malloc(sizeof(float) * (size_t)n * (size_t)(R + 1)), *all = mx + n, *cut_h = (float *)(e->samp_host + L.cut);
    if (!mx) return SITS_ERR_NOMEM;
    sits_status_t st = be->ops->download(be, mx, rowmax_d, sizeof(float) * (size_t)n);
    if (st == SITS_OK && R > 1) st = comm->ops->allgather(comm, mx, all, sizeof(float) * (size_t)n);
    else if (st == SITS_OK) memcpy(all, mx, sizeof(float) * (size_t)n);
    if (st == SITS_OK) {
        sits_sample_min_p_cut(n, params, all, R, cut_h);
        st = be->ops->upload(be, cut_d, cut_h, sizeof(float) * (size_t)n);
    }
    if (st == SITS_OK) st = be->ops->logit_process(be, e->logits, n, d->v_start, d->v_count, NULL, NULL, NULL, cut_d, NULL);
    free(mx);
    return st;
}

sits_status_t sits_engine_sample_step(sits_engine_t *e, sits_comm_t *comm, const sits_sample_params_t *params,
                                      const sits_sample_masks_t *masks, int32_t *tokens_p, sits_logprob_t *lp_p)
{
    const sits_shard_dims_t *d = &e->w->dims;
    sits_backend_t *be = e->be;
    const sits_backend_ops_t *op = be->ops;
    int n = e->last_n_out, on_host = 0;
    if (n == 0) return SITS_OK;
    int want_lp = lp_p && sits_sample_wants_logprobs(n, params), proc = sits_sample_wants_process(n, params), min_p = 0;
    if ((want_lp && (!op->logprob_reduce || !op->logit_pick)) || (proc && !op->logit_process) || ((want_lp || proc) && !e->logits_f32)) {
        SITS_ERROR(SITS_SUB_ENGINE, "engine: the %s backend has no device logprobs / sampling controls (fp32 logits, "
                   "logit_process, logprob_reduce, logit_pick)", op->name);
        return SITS_ERR_UNSUPPORTED;
    }
    samp_layout_t L = samp_layout((size_t)e->p.max_seqs);
    sits_logprob_row_t *lp_rows_h = (sits_logprob_row_t *)(e->samp_host + L.lp_rows);
    sits_logprob_rec_t *lp_recs_h = (sits_logprob_rec_t *)(e->samp_host + L.lp_recs);
    int k = want_lp ? sits_sample_logprob_rows(n, params, lp_rows_h) : 0;
    size_t m = 0;
    if (proc) SITS_CHECK(proc_lists(e, params, &m, &min_p));
    /* one copy of the rows (proc_rows, then lp_rows), one of the entries */
    if (proc || k) SITS_CHECK(op->upload(be, e->samp, e->samp_host, k ? L.lp_rows + sizeof *lp_rows_h * (size_t)k
                                                                           : sizeof(sits_logit_proc_row_t) * (size_t)n));
    if (m) SITS_CHECK(op->upload(be, e->ents, e->ents_host, sizeof *e->ents_host * m));
    if (k)   /* [logprobs] on the raw logits, before any transform */
        SITS_CHECK(op->logprob_reduce(be, (sits_logprob_rec_t *)(e->samp + L.lp_recs), e->logits, d->v_start, d->v_count,
                                      (const sits_logprob_row_t *)(e->samp + L.lp_rows), k));
    /* [structured output] masks, then [sampling controls], then the sampler; each rank on its shard */
    SITS_CHECK(apply_masks(e, masks, &on_host));
    if (on_host && (want_lp || proc)) {
        SITS_ERROR(SITS_SUB_ENGINE, "engine: masks on the host copy cannot combine with device logprobs / sampling controls");
        return SITS_ERR_UNSUPPORTED;
    }
    if (on_host) return sample_on_host(e, comm, params, tokens_p);
    if (proc) SITS_CHECK(process_logits(e, comm, params, min_p));
    SITS_CHECK(sample_logits(e, comm, params, tokens_p));
    if (!want_lp) return SITS_OK;
    /* [logprobs] the sampled tokens' raw logits from the ranks that hold them (logit_pick), downloaded
     * with the records (pick follows lp_recs in samp) */
    int32_t *ids_h = (int32_t *)(e->samp_host + L.ids);
    float *pick_h = (float *)(e->samp_host + L.pick);
    int picks = 0;
    for (int i = 0; i < n; i++) {
        ids_h[i] = params[i].logprobs && params[i].lp_target < 0 ? tokens_p[i] : -1;
        if (ids_h[i] >= 0) picks = 1;
    }
    if (picks) {
        SITS_CHECK(op->upload(be, e->samp + L.ids, ids_h, sizeof(int32_t) * (size_t)n));
        SITS_CHECK(op->logit_pick(be, (float *)(e->samp + L.pick), e->logits, n, d->v_start, d->v_count,
                                  (const int32_t *)(e->samp + L.ids), proc ? (const sits_logit_proc_row_t *)(e->samp + L.proc_rows) : NULL,
                                  proc ? e->ents : NULL, proc ? ents_raw(e) : NULL));
    }
    SITS_CHECK(op->download(be, lp_recs_h, e->samp + L.lp_recs, picks ? L.pick - L.lp_recs + sizeof(float) * (size_t)n
                                                                      : sizeof *lp_recs_h * (size_t)k));
    for (int j = 0; j < k; j++) {
        int i = lp_rows_h[j].row;
        if (lp_rows_h[j].target >= 0) continue;
        lp_recs_h[j].has_tgt = !isnan(pick_h[i]);
        lp_recs_h[j].tgt = lp_recs_h[j].has_tgt ? pick_h[i] : 0.0f;
    }
    e->stats.device_logprobs++;
    return sits_sample_logprob_merge(comm, lp_recs_h, n, params, tokens_p, lp_p);
}

sits_status_t sits_engine_sample(sits_engine_t *e, sits_comm_t *comm, const sits_sample_params_t *params, int32_t *tokens_p)
{
    return sits_engine_sample_step(e, comm, params, NULL, tokens_p, NULL);
}

void sits_engine_get_stats(const sits_engine_t *e, sits_engine_stats_t *stats_p) { *stats_p = e->stats; }

/* [moe] see engine.h */
const uint64_t *sits_engine_moe_expert_tokens(sits_engine_t *e, int *n_experts_p)
{
    *n_experts_p = 0;
    return e->moe ? sits_moe_expert_tokens(e->moe, n_experts_p) : NULL;
}

/* [kv export accessor] see engine.h */
sits_status_t sits_engine_kv_layer(sits_engine_t *e, int layer, void **k_p, void **v_p)
{
    if (!e || layer < e->w->dims.layer0 || layer >= e->w->dims.layer1) {
        SITS_ERROR(SITS_SUB_ENGINE, "kv layer %d out of range", layer);
        return SITS_ERR_INVALID;
    }
    *k_p = e->k_cache[layer];
    *v_p = e->v_cache[layer];
    return SITS_OK;
}

/* [kv movement] see engine.h */
size_t sits_engine_kv_bytes_per_block(const sits_engine_t *e)
{
    return (size_t)(e->w->dims.layer1 - e->w->dims.layer0) * 2 * e->kv_lbb;
}

static sits_status_t kv_check_ids(const sits_engine_t *e, int n, const int32_t *ids)
{
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= e->p.n_blocks) {
            SITS_ERROR(SITS_SUB_ENGINE, "kv block %d out of range (%d blocks)", ids[i], e->p.n_blocks);
            return SITS_ERR_INVALID;
        }
    return SITS_OK;
}

/* [kv] Set up the flat-buffer copies once; 0 when they are not available (the caller copies
 * segment by segment). A device backend stages kv_chunk blocks at a time in kv_flat. */
static int kv_copy_ready(sits_engine_t *e)
{
    if (e->kv_copy_state) return e->kv_copy_state > 0;
    e->kv_copy_state = -1;
    sits_backend_t *be = e->be;
    const sits_backend_ops_t *op = be->ops;
    int nbuf = 2 * (e->w->dims.layer1 - e->w->dims.layer0);
    size_t per_block = sits_engine_kv_bytes_per_block(e);
    if (!op->kv_block_copy || e->p.kv_copy_chunk < 0 || e->kv_lbb % 16 || nbuf < 1) return 0;
    int chunk = e->p.kv_copy_chunk > 0 ? e->p.kv_copy_chunk : (int)(ENGINE_KV_STAGING_BYTES / per_block);
    if (chunk < 1) chunk = 1;
    if (chunk > e->p.n_blocks) chunk = e->p.n_blocks;
    void **bufs = malloc(sizeof(void *) * (size_t)nbuf);
    if (!bufs) return 0;
    for (int l = e->w->dims.layer0, j = 0; l < e->w->dims.layer1; l++) { /* the order of a block's bytes on the host */
        bufs[j++] = e->k_cache[l];
        bufs[j++] = e->v_cache[l];
    }
    sits_status_t st = op->alloc(be, sizeof(void *) * (size_t)nbuf, (void **)&e->kv_bufs);
    if (st == SITS_OK) st = op->upload(be, e->kv_bufs, bufs, sizeof(void *) * (size_t)nbuf);
    if (st == SITS_OK) st = op->alloc(be, sizeof(int32_t) * (size_t)chunk, (void **)&e->kv_ids);
    if (st == SITS_OK && be->device >= 0) st = op->alloc(be, (size_t)chunk * per_block, &e->kv_flat);
    free(bufs);
    if (st != SITS_OK) {
        SITS_WARN(SITS_SUB_ENGINE, "engine: no room for the kv copy staging (%d blocks of %zu bytes): kv swaps and moves copy "
                  "block by block", chunk, per_block);
        return 0;
    }
    e->kv_chunk = chunk;
    e->kv_copy_state = 1;
    SITS_DEBUG(SITS_SUB_ENGINE, "engine: kv save / load %d blocks (%zu bytes) a copy", chunk, (size_t)chunk * per_block);
    return 1;
}

/* host [n, layers, K|V, kv_lbb] <-> the blocks ids[n] (to_cache 1: load). A device backend gathers /
 * scatters chunks of kv_chunk blocks through kv_flat with one kernel and one copy each; on the cpu
 * the host buffer is the flat buffer. Without kv_block_copy: one copy per (block, layer, K|V). */
static sits_status_t kv_blocks_io(sits_engine_t *e, int n, const int32_t *ids, unsigned char *host, int to_cache)
{
    SITS_CHECK(kv_check_ids(e, n, ids));
    sits_backend_t *be = e->be;
    const sits_backend_ops_t *op = be->ops;
    if (kv_copy_ready(e)) {
        int nbuf = 2 * (e->w->dims.layer1 - e->w->dims.layer0);
        size_t per_block = sits_engine_kv_bytes_per_block(e);
        for (int c0 = 0; c0 < n; c0 += e->kv_chunk) {
            int k = n - c0 < e->kv_chunk ? n - c0 : e->kv_chunk;
            unsigned char *h = host + (size_t)c0 * per_block;
            void *flat = be->device >= 0 ? e->kv_flat : h;                            /* [k, nbuf, kv_lbb] */
            SITS_CHECK(op->upload(be, e->kv_ids, ids + c0, sizeof(int32_t) * (size_t)k));
            if (to_cache && flat != h) SITS_CHECK(op->upload(be, flat, h, (size_t)k * per_block));
            SITS_CHECK(op->kv_block_copy(be, flat, e->kv_bufs, nbuf, e->kv_ids, k, e->kv_lbb, to_cache));
            if (!to_cache && flat != h) SITS_CHECK(op->download(be, h, flat, (size_t)k * per_block));
        }
        return to_cache ? op->sync(be) : SITS_OK;
    }
    for (int i = 0; i < n; i++)
        for (int l = e->w->dims.layer0; l < e->w->dims.layer1; l++) {
            size_t off = (size_t)ids[i] * e->kv_lbb;
            unsigned char *kb = (unsigned char *)e->k_cache[l] + off, *vb = (unsigned char *)e->v_cache[l] + off;
            if (to_cache) {
                SITS_CHECK(op->upload(be, kb, host, e->kv_lbb));
                SITS_CHECK(op->upload(be, vb, host + e->kv_lbb, e->kv_lbb));
            } else {
                SITS_CHECK(op->download(be, host, kb, e->kv_lbb));
                SITS_CHECK(op->download(be, host + e->kv_lbb, vb, e->kv_lbb));
            }
            host += 2 * e->kv_lbb;
        }
    return SITS_OK;
}

sits_status_t sits_engine_kv_save_blocks(sits_engine_t *e, int n, const int32_t *ids, void *host)
{
    return kv_blocks_io(e, n, ids, host, 0);
}

sits_status_t sits_engine_kv_load_blocks(sits_engine_t *e, int n, const int32_t *ids, const void *host)
{
    return kv_blocks_io(e, n, ids, (unsigned char *)host, 1);
}

sits_status_t sits_engine_kv_copy_blocks(sits_engine_t *e, int n, const int32_t *src, const int32_t *dst)
{
    SITS_CHECK(kv_check_ids(e, n, src));
    SITS_CHECK(kv_check_ids(e, n, dst));
    if (n <= 0) return SITS_OK;
    sits_backend_t *be = e->be;
    const sits_backend_ops_t *op = be->ops;
    size_t per_block = sits_engine_kv_bytes_per_block(e);
    if (be->device >= 0 && kv_copy_ready(e)) {
        /* device to device through kv_flat, kv_chunk blocks at a time (each upload is stream-ordered) */
        int nbuf = 2 * (e->w->dims.layer1 - e->w->dims.layer0);
        for (int c0 = 0; c0 < n; c0 += e->kv_chunk) {
            int k = n - c0 < e->kv_chunk ? n - c0 : e->kv_chunk;
            SITS_CHECK(op->upload(be, e->kv_ids, src + c0, sizeof(int32_t) * (size_t)k));
            SITS_CHECK(op->kv_block_copy(be, e->kv_flat, e->kv_bufs, nbuf, e->kv_ids, k, e->kv_lbb, 0));
            SITS_CHECK(op->upload(be, e->kv_ids, dst + c0, sizeof(int32_t) * (size_t)k));
            SITS_CHECK(op->kv_block_copy(be, e->kv_flat, e->kv_bufs, nbuf, e->kv_ids, k, e->kv_lbb, 1));
        }
        return op->sync(be);
    }
    unsigned char *host = malloc(per_block);   /* one block at a time: the cpu backend's copies are memcpys */
    if (!host) return SITS_ERR_NOMEM;
    sits_status_t st = SITS_OK;
    for (int i = 0; i < n && st == SITS_OK; i++) {
        st = kv_blocks_io(e, 1, src + i, host, 0);
        if (st == SITS_OK) st = kv_blocks_io(e, 1, dst + i, host, 1);
    }
    free(host);
    return st;
}
