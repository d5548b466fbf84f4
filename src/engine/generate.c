/* generate.c -- model loading onto one rank and the offline prefill + decode loop. */
#include "engine/generate.h"
#include "util/log.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void sits_runner_destroy(sits_runner_t *r)
{
    if (!r) return;
    sits_engine_destroy(r->engine);
    sits_model_weights_destroy(r->w);
    sits_kv_blocks_destroy(r->blocks);
    sits_st_close(r->st);
    free(r);
}

sits_status_t sits_runner_create(const sits_runner_params_t *p, sits_backend_t *be, sits_comm_t *tp, sits_runner_t **r_p)
{
    sits_status_t st = SITS_OK;
    double t0 = now_s();
    sits_runner_t *r = calloc(1, sizeof *r);
    if (!r) return SITS_ERR_NOMEM;
    r->be = be;
    r->tp = tp;
    SITS_CHECK_GOTO(sits_model_config_load(p->model_dir, &r->cfg), st, err);
    if (!p->dummy) SITS_CHECK_GOTO(sits_st_open_dir(p->model_dir, &r->st), st, err);
    sits_shard_t shard = { tp->rank, tp->size };
    SITS_CHECK_GOTO(sits_model_weights_load(&r->cfg, r->st, be, &shard, p->dummy_seed, &r->w), st, err);
    int mml = p->max_model_len > 0 ? p->max_model_len : r->cfg.max_position_embeddings;
    r->max_model_len = mml;
    int bs = p->block_size > 0 ? p->block_size : 16;
    sits_engine_params_t ep = {
        .max_tokens = p->max_tokens, .max_seqs = p->max_seqs, .block_size = bs,
        .max_blocks_per_seq = (mml + bs - 1) / bs,
    };
    size_t per_block = sits_engine_kv_block_bytes(&r->cfg, &r->w->dims, be->kv_dtype, bs);
    ep.n_blocks = p->kv_bytes > 0 ? (int)((size_t)p->kv_bytes / per_block) : ep.max_blocks_per_seq * p->max_seqs;
    if (ep.n_blocks < 1) {
        SITS_ERROR(SITS_SUB_KV, "--kv-cache-memory %lld bytes holds no KV block of %zu bytes", (long long)p->kv_bytes, per_block);
        st = SITS_ERR_INVALID;
        goto err;
    }
    r->ep = ep;
    SITS_CHECK_GOTO(sits_engine_create(&ep, r->w, be, tp, &r->engine), st, err);
    SITS_CHECK_GOTO(sits_kv_blocks_create(ep.n_blocks, &r->blocks), st, err);
    r->load_s = now_s() - t0;
    *r_p = r;
    return SITS_OK;
err:
    sits_runner_destroy(r);
    return st;
}

static int is_eos(const sits_model_config_t *c, int32_t id)
{
    for (int i = 0; i < c->n_eos; i++) if (c->eos_token_ids[i] == id) return 1;
    return 0;
}

sits_status_t sits_generate(sits_runner_t *r, int n, const int32_t *const *prompts, const int *prompt_len, int max_new,
                            const sits_sample_params_t *params, int ignore_eos, int32_t **out, int *out_len,
                            sits_logits_cb_t cb, void *cb_ctx, sits_gen_stats_t *stats_p)
{
    const sits_engine_params_t *ep = &r->ep;
    const sits_shard_dims_t *d = &r->w->dims;
    sits_status_t st = SITS_OK;
    int total_prompt = 0;
    if (n < 1 || n > ep->max_seqs) {
        SITS_ERROR(SITS_SUB_ENGINE, "%d sequences, the runner was sized for %d", n, ep->max_seqs);
        return SITS_ERR_INVALID;
    }
    for (int i = 0; i < n; i++) {
        if (prompt_len[i] < 1) {
            SITS_ERROR(SITS_SUB_ENGINE, "prompt %d is empty", i);
            return SITS_ERR_INVALID;
        }
        if (prompt_len[i] + max_new > r->max_model_len) {
            SITS_ERROR(SITS_SUB_ENGINE, "prompt %d: %d prompt tokens + %d new tokens exceed the model length %d", i,
                       prompt_len[i], max_new, r->max_model_len);
            return SITS_ERR_INVALID;
        }
        for (int j = 0; j < prompt_len[i]; j++)
            if (prompts[i][j] < 0 || prompts[i][j] >= r->cfg.vocab_size) {
                SITS_ERROR(SITS_SUB_ENGINE, "prompt %d: token id %d outside the vocabulary (%d)", i, prompts[i][j],
                           r->cfg.vocab_size);
                return SITS_ERR_INVALID;
            }
        total_prompt += prompt_len[i];
        out_len[i] = 0;
    }
    int mb = ep->max_blocks_per_seq;
    /* step buffers: [max(total_prompt, n)] tokens; block tables [n, mb] */
    int cap = total_prompt > n ? total_prompt : n;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)cap * 3), *pos = tok + cap, *seq = pos + cap;
    int32_t *bt = malloc(sizeof(int32_t) * (size_t)n * mb);
    int32_t *out_rows = malloc(sizeof(int32_t) * (size_t)n), *next = malloc(sizeof(int32_t) * (size_t)n);
    int *live = calloc((size_t)n, sizeof(int)), *nblk = calloc((size_t)n, sizeof(int)), *len = calloc((size_t)n, sizeof(int));
    sits_sample_params_t *sp = malloc(sizeof *sp * (size_t)n);
    if (!tok || !bt || !out_rows || !next || !live || !nblk || !len || !sp) { st = SITS_ERR_NOMEM; goto out; }
    for (int i = 0; i < n * mb; i++) bt[i] = 0;
    /* prefill chunks: as many whole prompts as fit in max_tokens (a prompt longer than that is split) */
    int bs = ep->block_size;
    double t0 = now_s();
    int seq_i = 0, seq_off = 0;
    const float *logits = NULL;
    while (seq_i < n) {
        int nt = 0, no = 0;
        while (seq_i < n && nt < ep->max_tokens) {
            int take = prompt_len[seq_i] - seq_off;
            if (take > ep->max_tokens - nt) take = ep->max_tokens - nt;
            int need = (seq_off + take + bs - 1) / bs;
            if (need > nblk[seq_i]) {
                st = sits_kv_blocks_alloc(r->blocks, need - nblk[seq_i], bt + (size_t)seq_i * mb + nblk[seq_i]);
                if (st != SITS_OK) { SITS_ERROR(SITS_SUB_KV, "out of KV blocks during prefill"); goto out; }
                nblk[seq_i] = need;
            }
            for (int j = 0; j < take; j++) {
                tok[nt + j] = prompts[seq_i][seq_off + j];
                pos[nt + j] = seq_off + j;
                seq[nt + j] = seq_i;
            }
            nt += take;
            seq_off += take;
            if (seq_off == prompt_len[seq_i]) {
                out_rows[no++] = nt - 1;
                live[seq_i] = 1;
                len[seq_i] = prompt_len[seq_i];
                seq_i++;
                seq_off = 0;
            }
        }
        sits_batch_t b = { .n_tokens = nt, .tokens = tok, .pos = pos, .seq = seq, .n_seqs = n, .block_tables = bt,
                           .n_out = no, .out_rows = out_rows };
        SITS_CHECK_GOTO(sits_engine_forward(r->engine, &b, &logits), st, out);
        if (no > 0) {
            /* the sequences that finished their prompt in this chunk are the last `no` with live set */
            int first = seq_i - no;
            for (int k = 0; k < no; k++) { sp[k] = params[first + k]; sp[k].step = 0; }
            if (cb) cb(cb_ctx, 0, logits, no, d->v_start, d->v_count);
            SITS_CHECK_GOTO(sits_sample(r->tp, logits, no, d->v_start, d->v_count, sp, next + first), st, out);
        }
    }
    double t1 = now_s();
    int steps = 0, generated = 0;
    for (int i = 0; i < n; i++) {
        out[i][out_len[i]++] = next[i];
        generated++;
        if ((!ignore_eos && is_eos(&r->cfg, next[i])) || out_len[i] >= max_new) live[i] = 0;
    }
    /* decode: one token per live sequence per step */
    for (;;) {
        int nt = 0;
        for (int i = 0; i < n; i++) {
            if (!live[i]) continue;
            int p = len[i];
            if (p / bs >= nblk[i]) {
                st = sits_kv_blocks_alloc(r->blocks, 1, bt + (size_t)i * mb + nblk[i]);
                if (st != SITS_OK) { SITS_ERROR(SITS_SUB_KV, "out of KV blocks during decode"); goto out; }
                nblk[i]++;
            }
            tok[nt] = next[i];
            pos[nt] = p;
            seq[nt] = i;
            out_rows[nt] = nt;
            sp[nt] = params[i];
            sp[nt].step = (uint64_t)out_len[i];
            nt++;
        }
        if (nt == 0) break;
        sits_batch_t b = { .n_tokens = nt, .tokens = tok, .pos = pos, .seq = seq, .n_seqs = n, .block_tables = bt,
                           .n_out = nt, .out_rows = out_rows };
        SITS_CHECK_GOTO(sits_engine_forward(r->engine, &b, &logits), st, out);
        steps++;
        if (cb) cb(cb_ctx, steps, logits, nt, d->v_start, d->v_count);
        /* the engine is done with out_rows: the sampled tokens go there */
        SITS_CHECK_GOTO(sits_sample(r->tp, logits, nt, d->v_start, d->v_count, sp, out_rows), st, out);
        int k = 0;
        for (int i = 0; i < n; i++) {
            if (!live[i]) continue;
            len[i]++;
            next[i] = out_rows[k++];
            out[i][out_len[i]++] = next[i];
            generated++;
            if ((!ignore_eos && is_eos(&r->cfg, next[i])) || out_len[i] >= max_new) live[i] = 0;
        }
    }
    double t2 = now_s();
    if (stats_p) {
        stats_p->n_prompt_tokens = total_prompt;
        stats_p->n_generated = generated;
        stats_p->prefill_s = t1 - t0;
        stats_p->decode_s = t2 - t1;
        stats_p->decode_steps = steps;
    }
out:
    if (bt) for (int i = 0; i < n; i++) if (nblk && nblk[i]) sits_kv_blocks_release(r->blocks, nblk[i], bt + (size_t)i * mb);
    free(tok);
    free(bt);
    free(out_rows);
    free(next);
    free(live);
    free(nblk);
    free(len);
    free(sp);
    return st;
}
