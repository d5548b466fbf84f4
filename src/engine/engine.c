/* engine.c -- one forward step on one rank; see engine.h for the flow. */
#include "engine/engine.h"
#include "util/log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct sits_engine {
    sits_engine_params_t p;
    sits_model_weights_t *w;
    sits_backend_t *be;
    sits_comm_t *comm;
    void **k_cache, **v_cache;     /* [n_layers] each [n_blocks, bs, nkv_loc, hd] */
    /* activations, act dtype */
    void *x;        /* [max_tokens, H]  residual stream */
    void *h;        /* [max_tokens, H]  normed input of a sublayer */
    void *qkv;      /* [max_tokens, qkv_dim] */
    void *attn;     /* [max_tokens, nh_loc*hd] */
    void *proj;     /* [max_tokens, H]  o / down partial sums, all-reduced in place */
    void *gu;       /* [max_tokens, 2*I_loc] */
    void *act;      /* [max_tokens, I_loc] */
    void *last;     /* [max_seqs, H]    rows that need logits */
    void *logits;   /* [max_seqs, v_count] */
    /* step metadata on the device: tokens, pos, seq, slots [max_tokens] each, out_rows [max_seqs],
     * block tables [max_seqs * max_blocks_per_seq] */
    int32_t *meta;
    int32_t *meta_host;
    float *logits_host;   /* [max_seqs, v_count] */
};

size_t sits_engine_kv_block_bytes(const sits_model_config_t *cfg, const sits_shard_dims_t *d, sits_dtype_t kv_dtype,
                                  int block_size)
{
    return (size_t)cfg->n_layers * 2 * (size_t)block_size * (size_t)d->nkv_loc * (size_t)cfg->head_dim *
           sits_dtype_size(kv_dtype);
}

static size_t meta_elems(const sits_engine_params_t *p)
{
    return (size_t)4 * p->max_tokens + (size_t)p->max_seqs + (size_t)p->max_seqs * p->max_blocks_per_seq;
}

void sits_engine_destroy(sits_engine_t *e)
{
    if (!e) return;
    sits_backend_t *be = e->be;
    void *bufs[] = { e->x, e->h, e->qkv, e->attn, e->proj, e->gu, e->act, e->last, e->logits, e->meta };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) be->ops->free(be, bufs[i]);
    for (int l = 0; e->k_cache && l < e->w->cfg.n_layers; l++) {
        if (e->k_cache[l]) be->ops->free(be, e->k_cache[l]);
        if (e->v_cache[l]) be->ops->free(be, e->v_cache[l]);
    }
    free(e->k_cache);
    free(e->v_cache);
    free(e->meta_host);
    free(e->logits_host);
    free(e);
}

sits_status_t sits_engine_create(const sits_engine_params_t *params, sits_model_weights_t *w, sits_backend_t *be,
                                 sits_comm_t *tp_comm, sits_engine_t **engine_p)
{
    const sits_model_config_t *c = &w->cfg;
    const sits_shard_dims_t *d = &w->dims;
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
    size_t T = (size_t)params->max_tokens, S = (size_t)params->max_seqs, H = (size_t)c->hidden_size;
    size_t as = sits_dtype_size(be->act_dtype);
    size_t vloc = d->v_count ? (size_t)d->v_count : 1;
    SITS_CHECK_GOTO(be->ops->alloc(be, T * H * as, &e->x), st, err);
    SITS_CHECK_GOTO(be->ops->alloc(be, T * H * as, &e->h), st, err);
    SITS_CHECK_GOTO(be->ops->alloc(be, T * (size_t)d->qkv_dim * as, &e->qkv), st, err);
    SITS_CHECK_GOTO(be->ops->alloc(be, T * (size_t)d->nh_loc * c->head_dim * as, &e->attn), st, err);
    SITS_CHECK_GOTO(be->ops->alloc(be, T * H * as, &e->proj), st, err);
    SITS_CHECK_GOTO(be->ops->alloc(be, T * 2 * (size_t)d->i_loc * as, &e->gu), st, err);
    SITS_CHECK_GOTO(be->ops->alloc(be, T * (size_t)d->i_loc * as, &e->act), st, err);
    SITS_CHECK_GOTO(be->ops->alloc(be, S * H * as, &e->last), st, err);
    SITS_CHECK_GOTO(be->ops->alloc(be, S * vloc * as, &e->logits), st, err);
    SITS_CHECK_GOTO(be->ops->alloc(be, meta_elems(params) * sizeof(int32_t), (void **)&e->meta), st, err);
    e->meta_host = calloc(meta_elems(params), sizeof(int32_t));
    e->logits_host = calloc(S * vloc, sizeof(float));
    e->k_cache = calloc((size_t)c->n_layers, sizeof(void *));
    e->v_cache = calloc((size_t)c->n_layers, sizeof(void *));
    if (!e->meta_host || !e->logits_host || !e->k_cache || !e->v_cache) { st = SITS_ERR_NOMEM; goto err; }
    size_t kv_layer = (size_t)params->n_blocks * params->block_size * d->nkv_loc * c->head_dim * sits_dtype_size(be->kv_dtype);
    for (int l = 0; l < c->n_layers; l++) {
        SITS_CHECK_GOTO(be->ops->alloc(be, kv_layer, &e->k_cache[l]), st, err);
        SITS_CHECK_GOTO(be->ops->alloc(be, kv_layer, &e->v_cache[l]), st, err);
    }
    SITS_INFO(SITS_SUB_ENGINE, "engine: %d KV blocks of %d tokens (%.1f MiB), up to %d tokens / %d sequences a step",
              params->n_blocks, params->block_size, (double)kv_layer * 2 * c->n_layers / (1 << 20), params->max_tokens,
              params->max_seqs);
    *engine_p = e;
    return SITS_OK;
err:
    sits_engine_destroy(e);
    return st;
}

sits_status_t sits_engine_forward(sits_engine_t *e, const sits_batch_t *b, const float **logits_p)
{
    const sits_model_config_t *c = &e->w->cfg;
    const sits_shard_dims_t *d = &e->w->dims;
    const sits_backend_ops_t *op = e->be->ops;
    sits_backend_t *be = e->be;
    sits_model_weights_t *w = e->w;
    int n = b->n_tokens, H = c->hidden_size, hd = c->head_dim, bs = e->p.block_size, mb = e->p.max_blocks_per_seq;
    if (n < 1 || n > e->p.max_tokens || b->n_seqs < 1 || b->n_seqs > e->p.max_seqs || b->n_out < 0 || b->n_out > e->p.max_seqs) {
        SITS_ERROR(SITS_SUB_ENGINE, "step of %d tokens / %d sequences / %d outputs exceeds the engine's %d / %d", n, b->n_seqs,
                   b->n_out, e->p.max_tokens, e->p.max_seqs);
        return SITS_ERR_INVALID;
    }
    /* metadata: tokens | pos | seq | slot [max_tokens each] | out_rows [max_seqs] | block tables */
    int32_t *mh = e->meta_host;
    int32_t *tok_h = mh, *pos_h = mh + e->p.max_tokens, *seq_h = pos_h + e->p.max_tokens, *slot_h = seq_h + e->p.max_tokens;
    int32_t *out_h = slot_h + e->p.max_tokens, *bt_h = out_h + e->p.max_seqs;
    for (int t = 0; t < n; t++) {
        int s = b->seq[t], p = b->pos[t];
        if (s < 0 || s >= b->n_seqs || p < 0 || p / bs >= mb) {
            SITS_ERROR(SITS_SUB_ENGINE, "token %d: sequence %d position %d out of range", t, s, p);
            return SITS_ERR_INVALID;
        }
        int blk = b->block_tables[(size_t)s * mb + p / bs];
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
    }
    for (int i = 0; i < b->n_out; i++) {
        if (b->out_rows[i] < 0 || b->out_rows[i] >= n) return SITS_ERR_INVALID;
        out_h[i] = b->out_rows[i];
    }
    memcpy(bt_h, b->block_tables, sizeof(int32_t) * (size_t)b->n_seqs * mb);
    SITS_CHECK(op->upload(be, e->meta, mh, sizeof(int32_t) * meta_elems(&e->p)));
    const int32_t *tok_d = e->meta, *pos_d = e->meta + e->p.max_tokens, *seq_d = pos_d + e->p.max_tokens;
    const int32_t *slot_d = seq_d + e->p.max_tokens, *out_d = slot_d + e->p.max_tokens, *bt_d = out_d + e->p.max_seqs;

    sits_attn_args_t aa = {
        .n_tokens = n, .seq = seq_d, .pos = pos_d, .block_tables = bt_d, .max_blocks = mb, .block_size = bs,
        .n_heads = d->nh_loc, .n_kv_heads = d->nkv_loc, .head_dim = hd, .window = c->sliding_window,
        .scale = 1.0f / sqrtf((float)hd),
    };
    int q_dim = d->nh_loc * hd, kv_dim = d->nkv_loc * hd;

    SITS_CHECK(op->embed(be, e->x, w->embed, tok_d, n, H, d->v_start, d->v_count));       /* x [n, H] */
    SITS_CHECK(e->comm->ops->allreduce_sum(e->comm, e->x, (size_t)n * H, be->act_dtype));
    SITS_CHECK(op->rmsnorm(be, e->h, e->x, w->layers[0].attn_norm, n, H, c->rms_norm_eps));
    for (int l = 0; l < c->n_layers; l++) {
        const sits_layer_weights_t *lw = &w->layers[l];
        SITS_CHECK(op->matmul(be, e->qkv, e->h, lw->qkv, lw->qkv_bias, n, H, d->qkv_dim));  /* [n, qkv_dim] */
        SITS_CHECK(op->rope(be, e->qkv, n, d->qkv_dim, d->nh_loc + d->nkv_loc, hd, pos_d, w->inv_freq));
        SITS_CHECK(op->kv_write(be, e->k_cache[l], e->v_cache[l], e->qkv, n, d->qkv_dim, q_dim, q_dim + kv_dim, kv_dim, slot_d));
        SITS_CHECK(op->attention(be, e->attn, e->qkv, d->qkv_dim, e->k_cache[l], e->v_cache[l], &aa));  /* [n, q_dim] */
        SITS_CHECK(op->matmul(be, e->proj, e->attn, lw->o, lw->o_bias, n, q_dim, H));        /* [n, H] partial */
        SITS_CHECK(e->comm->ops->allreduce_sum(e->comm, e->proj, (size_t)n * H, be->act_dtype));
        SITS_CHECK(op->add_rmsnorm(be, e->h, e->x, e->proj, lw->ffn_norm, n, H, c->rms_norm_eps));
        SITS_CHECK(op->matmul(be, e->gu, e->h, lw->gu, lw->gu_bias, n, H, 2 * d->i_loc));    /* [n, 2*I_loc] */
        SITS_CHECK(op->silu_mul(be, e->act, e->gu, n, d->i_loc));                             /* [n, I_loc] */
        SITS_CHECK(op->matmul(be, e->proj, e->act, lw->down, lw->down_bias, n, d->i_loc, H));  /* [n, H] partial */
        SITS_CHECK(e->comm->ops->allreduce_sum(e->comm, e->proj, (size_t)n * H, be->act_dtype));
        const void *next_norm = l + 1 < c->n_layers ? w->layers[l + 1].attn_norm : w->final_norm;
        SITS_CHECK(op->add_rmsnorm(be, e->h, e->x, e->proj, next_norm, n, H, c->rms_norm_eps));
    }
    if (b->n_out > 0 && d->v_count > 0) {
        SITS_CHECK(op->gather_rows(be, e->last, e->h, out_d, b->n_out, H));                  /* [n_out, H] */
        SITS_CHECK(op->matmul(be, e->logits, e->last, w->lm_head, NULL, b->n_out, H, d->v_count));  /* [n_out, v_count] */
        SITS_CHECK(op->download_f32(be, e->logits_host, e->logits, (size_t)b->n_out * d->v_count));
    }
    SITS_CHECK(op->sync(be));
    *logits_p = e->logits_host;
    return SITS_OK;
}

/* [kv export accessor] see engine.h */
sits_status_t sits_engine_kv_layer(sits_engine_t *e, int layer, void **k_p, void **v_p)
{
    if (!e || layer < 0 || layer >= e->w->cfg.n_layers) {
        SITS_ERROR(SITS_SUB_ENGINE, "kv layer %d out of range", layer);
        return SITS_ERR_INVALID;
    }
    *k_p = e->k_cache[layer];
    *v_p = e->v_cache[layer];
    return SITS_OK;
}
