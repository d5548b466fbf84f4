/* weights.c -- load this rank's shard of every tensor onto the backend; see weights.h. */
#include "model/weights.h"
#include "model/layout.h"
#include "util/log.h"

#include <stdlib.h>
#include <string.h>

sits_status_t sits_shard_dims(const sits_model_config_t *cfg, const sits_shard_t *shard, sits_shard_dims_t *dims_p)
{
    int tp = shard->tp_size, r = shard->tp_rank;
    sits_shard_dims_t d;
    memset(&d, 0, sizeof d);
    if (tp < 1 || r < 0 || r >= tp) return SITS_ERR_INVALID;
    if (cfg->n_heads % tp) {
        SITS_ERROR(SITS_SUB_MODEL, "tensor parallel size %d does not divide num_attention_heads %d", tp, cfg->n_heads);
        return SITS_ERR_INVALID;
    }
    if (cfg->intermediate_size % tp) {
        SITS_ERROR(SITS_SUB_MODEL, "tensor parallel size %d does not divide intermediate_size %d", tp, cfg->intermediate_size);
        return SITS_ERR_INVALID;
    }
    d.nh_loc = cfg->n_heads / tp;
    d.q_head0 = r * d.nh_loc;
    if (tp <= cfg->n_kv_heads) {
        if (cfg->n_kv_heads % tp) {
            SITS_ERROR(SITS_SUB_MODEL, "tensor parallel size %d must divide num_key_value_heads %d (or be a multiple of it)",
                       tp, cfg->n_kv_heads);
            return SITS_ERR_INVALID;
        }
        d.nkv_loc = cfg->n_kv_heads / tp;
        d.kv_head0 = r * d.nkv_loc;
    } else {
        if (tp % cfg->n_kv_heads) {
            SITS_ERROR(SITS_SUB_MODEL, "tensor parallel size %d must be a multiple of num_key_value_heads %d (or divide it)",
                       tp, cfg->n_kv_heads);
            return SITS_ERR_INVALID;
        }
        d.nkv_loc = 1;
        d.kv_head0 = r / (tp / cfg->n_kv_heads); /* each KV head replicated on tp/nkv ranks */
    }
    d.i_loc = cfg->intermediate_size / tp;
    d.qkv_dim = (d.nh_loc + 2 * d.nkv_loc) * cfg->head_dim;
    d.v_pad = (cfg->vocab_size + 63) / 64 * 64;
    d.v_per_rank = (d.v_pad + tp - 1) / tp;
    d.v_start = r * d.v_per_rank;
    int v_end = d.v_start + d.v_per_rank;
    if (v_end > cfg->vocab_size) v_end = cfg->vocab_size;
    d.v_count = v_end > d.v_start ? v_end - d.v_start : 0;
    int pp = shard->pp_size > 0 ? shard->pp_size : 1, pr = shard->pp_rank;
    if (pr < 0 || pr >= pp) return SITS_ERR_INVALID;
    if (pp > cfg->n_layers) {
        SITS_ERROR(SITS_SUB_MODEL, "%d pipeline stages for %d layers: each stage needs a layer", pp, cfg->n_layers);
        return SITS_ERR_INVALID;
    }
    int base = cfg->n_layers / pp, extra = cfg->n_layers % pp;
    d.layer0 = pr * base + (pr < extra ? pr : extra);
    d.layer1 = d.layer0 + base + (pr < extra ? 1 : 0);
    d.first_stage = pr == 0;
    d.last_stage = pr == pp - 1;
    *dims_p = d;
    return SITS_OK;
}

/* Where a slice comes from: a safetensors tensor, or the dummy generator. */
typedef struct {
    const sits_model_config_t *cfg;
    const sits_st_t *st;
    sits_backend_t *be;
    unsigned long long seed;
    float *staging;        /* dummy: one chunk of rows, fp32 */
    size_t staging_elems;
    size_t bytes;
    /* load progress (issue 12): elem_size is the backend's weight dtype size; count_only: a dry pass
     * that only adds up bytes (no backend, no allocation); progress, when set, is told after the
     * embedding, each layer and the head */
    size_t elem_size;
    int count_only;
    size_t total;
    sits_weights_progress_fn progress;
    void *progress_ctx;
} loader_t;

static unsigned long long splitmix64(unsigned long long *s)
{
    unsigned long long z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Copy rows [r0, r1) x cols [c0, c1) of tensor (kind, layer) into dst at row dst_row0. */
static sits_status_t load_slice(loader_t *L, void *dst, int64_t dst_row0, sits_wkind_t kind, int layer, int64_t r0, int64_t r1,
                                int64_t c0, int64_t c1)
{
    int64_t shape[2];
    int nd = sits_wkind_shape(L->cfg, kind, shape);
    int64_t cols = nd == 2 ? shape[1] : shape[0];
    int64_t rows = nd == 2 ? shape[0] : 1;
    if (r1 <= r0 || c1 <= c0) return SITS_OK;
    if (r1 > rows || c1 > cols) return SITS_ERR_INTERNAL;
    L->bytes += (size_t)(r1 - r0) * (size_t)(c1 - c0) * L->elem_size;
    if (L->count_only) return SITS_OK;   /* load progress (issue 12): dry pass */
    if (L->st) {
        char name[160];
        sits_wkind_name(kind, layer, name, sizeof name);
        const sits_st_tensor_t *t = sits_st_find(L->st, name);
        if (!t) {
            SITS_ERROR(SITS_SUB_MODEL, "tensor %s is missing", name);
            return SITS_ERR_NOT_FOUND;
        }
        return L->be->ops->upload_weight(L->be, dst, dst_row0, t->data, t->dtype, cols, r0, r1, c0, c1);
    }
    /* dummy: value(row, col) is a hash of (seed, tensor, layer, row, col) -- the same whatever the
     * slice, so every TP size holds the same model. Generated in chunks of rows in fp32; norms are 1. */
    int is_norm = kind == SITS_W_ATTN_NORM || kind == SITS_W_FFN_NORM || kind == SITS_W_FINAL_NORM;
    int64_t w = c1 - c0;
    int64_t chunk = (int64_t)(L->staging_elems / (size_t)w);
    if (chunk < 1) return SITS_ERR_INTERNAL;
    for (int64_t r = r0; r < r1; r += chunk) {
        int64_t n = r1 - r < chunk ? r1 - r : chunk;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++) {
            unsigned long long rs = L->seed ^ ((unsigned long long)kind << 56) ^ ((unsigned long long)layer << 40) ^
                                    (unsigned long long)(r + i);
            rs = splitmix64(&rs);
            for (int64_t j = 0; j < w; j++) {
                /* splitmix64 is counter-based: element c of the row is the (c+1)-th output */
                unsigned long long st = rs + (unsigned long long)(c0 + j) * 0x9e3779b97f4a7c15ull;
                float u = (float)(splitmix64(&st) >> 40) / (float)(1 << 24);
                L->staging[i * w + j] = is_norm ? 1.0f : (u - 0.5f) * 0.1f;
            }
        }
        SITS_CHECK(L->be->ops->upload_weight(L->be, dst, dst_row0 + (r - r0), L->staging, SITS_DT_F32, w, 0, n, 0, w));
    }
    return SITS_OK;
}

static sits_status_t alloc_w(loader_t *L, size_t elems, void **p)
{
    if (L->count_only) {   /* load progress (issue 12): dry pass */
        *p = NULL;
        return SITS_OK;
    }
    return L->be->ops->alloc(L->be, elems * L->elem_size, p);
}

/* base + elems weights (NULL in the dry pass, where nothing is allocated) */
static void *elem_at(const loader_t *L, void *base, size_t elems)
{
    return L->count_only ? NULL : (char *)base + elems * L->elem_size;
}

static sits_status_t load_layer(loader_t *L, const sits_shard_dims_t *d, int tp_rank, int l, sits_layer_weights_t *lw)
{
    const sits_model_config_t *c = L->cfg;
    int64_t H = c->hidden_size, hd = c->head_dim, I = c->intermediate_size;
    int64_t q_rows = (int64_t)d->nh_loc * hd, kv_rows = (int64_t)d->nkv_loc * hd;
    int64_t q0 = (int64_t)d->q_head0 * hd, kv0 = (int64_t)d->kv_head0 * hd, i0 = (int64_t)tp_rank * d->i_loc;
    SITS_CHECK(alloc_w(L, H, &lw->attn_norm));
    SITS_CHECK(load_slice(L, lw->attn_norm, 0, SITS_W_ATTN_NORM, l, 0, 1, 0, H));
    SITS_CHECK(alloc_w(L, (size_t)d->qkv_dim * H, &lw->qkv));
    SITS_CHECK(load_slice(L, lw->qkv, 0, SITS_W_Q, l, q0, q0 + q_rows, 0, H));
    SITS_CHECK(load_slice(L, lw->qkv, q_rows, SITS_W_K, l, kv0, kv0 + kv_rows, 0, H));
    SITS_CHECK(load_slice(L, lw->qkv, q_rows + kv_rows, SITS_W_V, l, kv0, kv0 + kv_rows, 0, H));
    if (c->qkv_bias) {
        /* a bias [n] is a [1, n] tensor: its slice is columns, packed one after the other */
        SITS_CHECK(alloc_w(L, (size_t)d->qkv_dim, &lw->qkv_bias));
        SITS_CHECK(load_slice(L, lw->qkv_bias, 0, SITS_W_Q_BIAS, l, 0, 1, q0, q0 + q_rows));
        void *kb = elem_at(L, lw->qkv_bias, (size_t)q_rows);
        void *vb = elem_at(L, lw->qkv_bias, (size_t)(q_rows + kv_rows));
        SITS_CHECK(load_slice(L, kb, 0, SITS_W_K_BIAS, l, 0, 1, kv0, kv0 + kv_rows));
        SITS_CHECK(load_slice(L, vb, 0, SITS_W_V_BIAS, l, 0, 1, kv0, kv0 + kv_rows));
    }
    SITS_CHECK(alloc_w(L, (size_t)H * q_rows, &lw->o));
    SITS_CHECK(load_slice(L, lw->o, 0, SITS_W_O, l, 0, H, q0, q0 + q_rows));
    if (c->o_bias && tp_rank == 0) {
        SITS_CHECK(alloc_w(L, H, &lw->o_bias));
        SITS_CHECK(load_slice(L, lw->o_bias, 0, SITS_W_O_BIAS, l, 0, 1, 0, H));
    }
    SITS_CHECK(alloc_w(L, H, &lw->ffn_norm));
    SITS_CHECK(load_slice(L, lw->ffn_norm, 0, SITS_W_FFN_NORM, l, 0, 1, 0, H));
    SITS_CHECK(alloc_w(L, (size_t)2 * d->i_loc * H, &lw->gu));
    SITS_CHECK(load_slice(L, lw->gu, 0, SITS_W_GATE, l, i0, i0 + d->i_loc, 0, H));
    SITS_CHECK(load_slice(L, lw->gu, d->i_loc, SITS_W_UP, l, i0, i0 + d->i_loc, 0, H));
    if (c->mlp_bias) {
        SITS_CHECK(alloc_w(L, (size_t)2 * d->i_loc, &lw->gu_bias));
        SITS_CHECK(load_slice(L, lw->gu_bias, 0, SITS_W_GATE_BIAS, l, 0, 1, i0, i0 + d->i_loc));
        void *ub = elem_at(L, lw->gu_bias, (size_t)d->i_loc);
        SITS_CHECK(load_slice(L, ub, 0, SITS_W_UP_BIAS, l, 0, 1, i0, i0 + d->i_loc));
        if (tp_rank == 0) {
            SITS_CHECK(alloc_w(L, H, &lw->down_bias));
            SITS_CHECK(load_slice(L, lw->down_bias, 0, SITS_W_DOWN_BIAS, l, 0, 1, 0, H));
        }
    }
    SITS_CHECK(alloc_w(L, (size_t)H * d->i_loc, &lw->down));
    SITS_CHECK(load_slice(L, lw->down, 0, SITS_W_DOWN, l, 0, H, i0, i0 + d->i_loc));
    (void)I;
    return SITS_OK;
}

/* Every tensor of this shard, in file order: embedding, layers, final norm, lm_head. The same
 * sequence serves the dry pass (count_only: L->bytes becomes the shard's total) and the real load
 * (progress reported after the embedding, each layer and the head). */
static void report(loader_t *L)
{
    if (L->progress && !L->count_only) L->progress(L->progress_ctx, L->bytes, L->total);
}

static sits_status_t load_tensors(loader_t *L, const sits_shard_t *shard, sits_model_weights_t *w)
{
    const sits_model_config_t *cfg = L->cfg;
    const sits_shard_dims_t *d = &w->dims;
    int64_t H = cfg->hidden_size;
    /* the embedding on the first stage, and on the last when lm_head is tied to it */
    if (d->first_stage || (d->last_stage && cfg->tie_word_embeddings)) {
        SITS_CHECK(alloc_w(L, (size_t)(d->v_count ? d->v_count : 1) * H, &w->embed));
        SITS_CHECK(load_slice(L, w->embed, 0, SITS_W_EMBED, 0, d->v_start, d->v_start + d->v_count, 0, H));
    }
    report(L);
    for (int l = d->layer0; l < d->layer1; l++) {
        SITS_CHECK(load_layer(L, d, shard->tp_rank, l, &w->layers[l]));
        if (!L->count_only) SITS_DEBUG(SITS_SUB_MODEL, "layer %d loaded", l);
        report(L);
    }
    if (d->last_stage) {
        SITS_CHECK(alloc_w(L, H, &w->final_norm));
        SITS_CHECK(load_slice(L, w->final_norm, 0, SITS_W_FINAL_NORM, 0, 0, 1, 0, H));
        if (cfg->tie_word_embeddings) {
            w->lm_head = w->embed;
        } else {
            SITS_CHECK(alloc_w(L, (size_t)(d->v_count ? d->v_count : 1) * H, &w->lm_head));
            SITS_CHECK(load_slice(L, w->lm_head, 0, SITS_W_LM_HEAD, 0, d->v_start, d->v_start + d->v_count, 0, H));
        }
    }
    report(L);
    return SITS_OK;
}

sits_status_t sits_model_weights_shard_bytes(const sits_model_config_t *cfg, const sits_shard_t *shard,
                                             sits_dtype_t weight_dtype, size_t *bytes_p)
{
    sits_model_weights_t w;
    memset(&w, 0, sizeof w);
    SITS_CHECK(sits_shard_dims(cfg, shard, &w.dims));
    w.layers = calloc((size_t)cfg->n_layers, sizeof *w.layers);
    if (!w.layers) return SITS_ERR_NOMEM;
    loader_t L = { .cfg = cfg, .elem_size = sits_dtype_size(weight_dtype), .count_only = 1 };
    sits_status_t st = load_tensors(&L, shard, &w);
    free(w.layers);
    if (st == SITS_OK) *bytes_p = L.bytes;
    return st;
}

sits_status_t sits_model_weights_load(const sits_model_config_t *cfg, const sits_st_t *st, sits_backend_t *be,
                                      const sits_shard_t *shard, unsigned long long seed, sits_model_weights_t **w_p)
{
    return sits_model_weights_load_progress(cfg, st, be, shard, seed, NULL, NULL, w_p);
}

sits_status_t sits_model_weights_load_progress(const sits_model_config_t *cfg, const sits_st_t *st, sits_backend_t *be,
                                               const sits_shard_t *shard, unsigned long long seed,
                                               sits_weights_progress_fn progress, void *progress_ctx,
                                               sits_model_weights_t **w_p)
{
    sits_status_t st_ = SITS_OK;
    sits_model_weights_t *w = calloc(1, sizeof *w);
    if (!w) return SITS_ERR_NOMEM;
    w->cfg = *cfg;
    w->shard = *shard;
    w->be = be;
    loader_t L = { .cfg = &w->cfg, .st = st, .be = be, .seed = seed, .elem_size = sits_dtype_size(be->weight_dtype),
                   .progress = progress, .progress_ctx = progress_ctx };
    SITS_CHECK_GOTO(sits_shard_dims(cfg, shard, &w->dims), st_, err);
    if (st) SITS_CHECK_GOTO(sits_model_check_tensors(cfg, st, "model"), st_, err);
    else {
        L.staging_elems = (size_t)1 << 22;
        if (L.staging_elems < (size_t)cfg->hidden_size * 4) L.staging_elems = (size_t)cfg->hidden_size * 4;
        if (L.staging_elems < (size_t)cfg->intermediate_size * 4) L.staging_elems = (size_t)cfg->intermediate_size * 4;
        L.staging = malloc(L.staging_elems * sizeof(float));
        SITS_ALLOC_CHECK_GOTO(L.staging, st_, err);
    }
    const sits_shard_dims_t *d = &w->dims;
    w->layers = calloc((size_t)cfg->n_layers, sizeof *w->layers);
    SITS_ALLOC_CHECK_GOTO(w->layers, st_, err);
    if (progress) SITS_CHECK_GOTO(sits_model_weights_shard_bytes(cfg, shard, be->weight_dtype, &L.total), st_, err);
    SITS_CHECK_GOTO(load_tensors(&L, shard, w), st_, err);
    {
        int half = cfg->head_dim / 2;
        float *inv = malloc(sizeof(float) * (size_t)half);
        SITS_ALLOC_CHECK_GOTO(inv, st_, err);
        sits_model_rope_inv_freq(cfg, inv);
        st_ = be->ops->alloc(be, sizeof(float) * (size_t)half, (void **)&w->inv_freq);
        if (st_ == SITS_OK) st_ = be->ops->upload(be, w->inv_freq, inv, sizeof(float) * (size_t)half);
        free(inv);
        if (st_ != SITS_OK) goto err;
    }
    SITS_CHECK_GOTO(be->ops->sync(be), st_, err);
    w->bytes = L.bytes;
    free(L.staging);
    SITS_INFO(SITS_SUB_MODEL, "tp rank %d/%d holds %.1f MiB of weights (vocab %d..%d, %d q heads, %d kv heads)", shard->tp_rank,
              shard->tp_size, (double)w->bytes / (1 << 20), d->v_start, d->v_start + d->v_count, d->nh_loc, d->nkv_loc);
    *w_p = w;
    return SITS_OK;
err:
    free(L.staging);
    sits_model_weights_destroy(w);
    return st_;
}

void sits_model_weights_destroy(sits_model_weights_t *w)
{
    if (!w) return;
    sits_backend_t *be = w->be;
    if (w->layers) {
        for (int l = 0; l < w->cfg.n_layers; l++) {
            sits_layer_weights_t *lw = &w->layers[l];
            void *ptrs[] = { lw->attn_norm, lw->qkv, lw->qkv_bias, lw->o, lw->o_bias, lw->ffn_norm, lw->gu, lw->gu_bias,
                             lw->down, lw->down_bias };
            for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
                if (ptrs[i]) be->ops->free(be, ptrs[i]);
        }
        free(w->layers);
    }
    if (w->lm_head && w->lm_head != w->embed) be->ops->free(be, w->lm_head);
    if (w->embed) be->ops->free(be, w->embed);
    if (w->final_norm) be->ops->free(be, w->final_norm);
    if (w->inv_freq) be->ops->free(be, w->inv_freq);
    free(w);
}
