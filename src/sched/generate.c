/* generate.c -- model loading onto one rank and the offline prefill + decode loop. */
#include "sched/generate.h"
#include "sched/worker.h"
#include "sched/kvmove.h"
#include "model/layout.h"
#include "kv/offload.h"
#include "util/log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MEM_PLAN_RESERVE_BYTES ((size_t)1 << 30)   /* cuda graphs, nccl channels, allocator slack */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- load progress (issue 12) ----
 * The TP leader prints one progress line while the weights load: bytes across the TP group, rate,
 * ETA. Aggregation without communication (no rank waits for another while loading): the group's
 * total is exact (each rank's shard size by arithmetic, sits_model_weights_shard_bytes); the bytes
 * done are estimated as the leader's own fraction of its shard times that total (shards are equal
 * up to the vocabulary remainder and tp-rank-0 biases, so the ranks progress together).
 * stderr a TTY: one line rewritten with \r (every 0.2 s); otherwise (log files, and under mpirun,
 * which gives ranks a pipe): a line at each quarter, only for loads that take 2 s or more. */
typedef struct {
    double t0, t_last;
    size_t group_total;
    int tp_size, tty, quarter, printed;
} load_progress_t;

static void load_progress(void *ctx, size_t done, size_t total)
{
    load_progress_t *lp = ctx;
    double t = now_s(), el = t - lp->t0;
    double frac = total ? (double)done / (double)total : 1.0;
    int end = done >= total, quarter = (int)(frac * 4.0);
    int show = lp->tty ? end || t - lp->t_last >= 0.2
                       : (end && lp->printed) || (el >= 2.0 && (end || quarter > lp->quarter));
    if (!show) return;
    double all = frac * (double)lp->group_total, rate = el > 0 ? all / el : 0.0;
    double unit = lp->group_total >= ((size_t)1 << 30) ? 1024.0 * 1024.0 * 1024.0 : 1024.0 * 1024.0;
    char tail[48] = "", line[160];
    if (!end && rate > 0) snprintf(tail, sizeof tail, ", ETA %.0f s", ((double)lp->group_total - all) / rate);
    else if (end) snprintf(tail, sizeof tail, " in %.1f s", el);
    snprintf(line, sizeof line, "loading weights: %.*f / %.*f %s (%3.0f%%) on %d rank%s, %.0f MiB/s%s", unit > 1.1e6 ? 2 : 1,
             all / unit, unit > 1.1e6 ? 2 : 1, (double)lp->group_total / unit, unit > 1.1e6 ? "GiB" : "MiB", 100.0 * frac,
             lp->tp_size, lp->tp_size > 1 ? "s" : "", rate / (1024.0 * 1024.0), tail);
    if (lp->tty) fprintf(stderr, "\r%-78s%s", line, end ? "\n" : "");   /* padded: covers a longer previous line */
    else fprintf(stderr, "%s\n", line);
    fflush(stderr);
    lp->t_last = t;
    lp->quarter = quarter;
    lp->printed = 1;
}
/* ---- end load progress ---- */

void sits_runner_destroy(sits_runner_t *r)
{
    if (!r) return;
    sits_kv_offload_destroy(r->offload);
    sits_kv_move_stage_destroy(r->kv_stage);
    sits_engine_destroy(r->engine);
    sits_model_weights_destroy(r->w);
    sits_kv_blocks_destroy(r->blocks);
    sits_st_close(r->st);
    free(r);
}

static double gib(double b) { return b / (double)(1ull << 30); }

/* [memory plan] What this rank sets aside, before its weights load, and the KV bytes that leaves
 * (*kv_bytes_p, when the caller did not fix them): on a GPU the share --gpu-memory-utilization gives,
 * less what is in use already (CUDA context, communicators, the backend's workspaces), the weights,
 * every buffer a step at --max-num-seqs / --max-num-batched-tokens needs (sits_engine_mem_plan) and a
 * reserve for what allocates outside our allocator (CUDA graphs, NCCL); on the CPU the sequences'
 * need capped at a share of the available memory. move_bytes: each buffer of the KV move staging
 * (0: none; on GPUs one of them is device memory, on the CPU two are counted). One log line per
 * item. Refuses (SITS_ERR_INVALID, with the numbers) a configuration whose KV would not hold one
 * sequence of max_model_len tokens. */
static sits_status_t plan_memory(sits_runner_t *r, const sits_runner_params_t *p, sits_backend_t *be, const sits_shard_t *shard,
                                 const sits_shard_dims_t *d, const sits_engine_params_t *ep, size_t per_block,
                                 size_t move_bytes, int64_t *kv_bytes_p)
{
    size_t weights = 0;
    int n_fp8 = 0, n_int4 = 0;
    SITS_CHECK(sits_model_weights_shard_plan(&r->cfg, shard, be->weight_dtype, p->quant, r->st, &weights, &n_fp8, &n_int4));
    sits_mem_plan_t plan;
    memset(&plan, 0, sizeof plan);
    SITS_CHECK(sits_engine_mem_plan(ep, &r->cfg, d, be, n_fp8 > 0, n_int4 > 0, &plan));
    size_t gfree = 0, gtotal = 0;
    int gpu = sits_backend_cuda_mem_info(be, &gfree, &gtotal) == SITS_OK;
    if (move_bytes) {   /* [kv move] the staging of KV moves (sched/kvmove.h) */
        char name[64];
        snprintf(name, sizeof name, "kv move staging (--kv-move-buffer, %s)", be->device >= 0 ? "device" : "2 buffers");
        sits_mem_plan_add(&plan, name, be->device >= 0 ? move_bytes : 2 * move_bytes, 0);
    }
    size_t reserve = gpu ? MEM_PLAN_RESERVE_BYTES : 0;
    /* [sliding window] a sequence of an all-sliding model holds at most the window and a step's tokens */
    int seq_blocks = sits_kv_window_max_blocks(sits_model_kv_window(&r->cfg), ep->block_size, ep->max_tokens);
    if (seq_blocks > ep->max_blocks_per_seq) seq_blocks = ep->max_blocks_per_seq;
    double one_seq = (double)seq_blocks * (double)per_block, need = one_seq * ep->max_seqs;
    double budget, in_use, kv;
    const char *where = gpu ? "gpu" : "host";
    if (gpu) {
        budget = (p->gpu_memory_utilization > 0 ? p->gpu_memory_utilization : 0.9) * (double)gtotal;
        in_use = (double)(gtotal - gfree);
    } else {
        budget = (double)sits_kv_host_mem_available() / (p->host_ranks > 0 ? p->host_ranks : 1);
        in_use = 0;
    }
    double left = budget - in_use - (double)weights - (double)plan.total - (double)reserve;
    int set = *kv_bytes_p > 0;
    if (set) kv = (double)*kv_bytes_p;                       /* --kv-cache-memory */
    else if (gpu && p->gpu_memory_utilization > 0) kv = left;  /* server: the rest of the share */
    else if (!gpu && p->host_kv_share > 0) kv = fmin(need, p->host_kv_share * budget);   /* a 135M model would reserve 25 GB */
    else kv = need;                                          /* offline: the batch */
    int rank = shard->tp_rank;
    SITS_INFO(SITS_SUB_KV, "memory plan (tp rank %d, %s): %s %.2f GiB%s", rank, where, gpu ? "usable" : "available / ranks",
              gib(budget), gpu ? "" : " (the KV cache takes at most its configured share)");
    if (gpu) SITS_INFO(SITS_SUB_KV, "memory plan:   in use before loading (context, communicators): %.3f GiB", gib(in_use));
    SITS_INFO(SITS_SUB_KV, "memory plan:   weights: %.3f GiB (%d fp8, %d int4 linears)", gib((double)weights), n_fp8, n_int4);
    for (int i = 0; i < plan.n; i++)
        SITS_INFO(SITS_SUB_KV, "memory plan:   %s: %.3f GiB%s", plan.item[i].name, gib((double)plan.item[i].bytes),
                  plan.item[i].held ? " (held already)" : "");
    if (reserve) SITS_INFO(SITS_SUB_KV, "memory plan:   reserve (cuda graphs, nccl, allocator): %.3f GiB", gib((double)reserve));
    SITS_INFO(SITS_SUB_KV, "memory plan:   kv cache: %.3f GiB = %d blocks of %d tokens (%d sequences of %d tokens need %.3f GiB)",
              gib(kv), kv > 0 ? (int)(kv / (double)per_block) : 0, ep->block_size, ep->max_seqs, r->max_model_len, gib(need));
    /* sized here: at least one whole sequence; set by hand: at least one block (longer requests get 400) */
    int fits = kv >= (set ? (double)per_block : one_seq) && (gpu ? kv <= left : kv + (double)weights + (double)plan.total <= budget);
    if (!fits) {
        SITS_ERROR(SITS_SUB_KV, "memory plan: the configuration does not fit on the %s of tp rank %d: %.2f GiB %s - %.2f GiB in "
                   "use - %.2f GiB weights - %.2f GiB for steps of %d tokens / %d sequences - %.2f GiB reserve = %.2f GiB, and "
                   "the KV cache %s %.2f GiB (one sequence of %d tokens: %.3f GiB). Lower --max-num-seqs, "
                   "--max-num-batched-tokens, --max-model-len or --kv-cache-memory, or raise --gpu-memory-utilization",
                   where, rank, gib(budget), gpu ? "usable" : "available", gib(in_use), gib((double)weights),
                   gib((double)plan.total), ep->max_tokens, ep->max_seqs, gib((double)reserve), gib(left),
                   set ? "was set to" : "would get", gib(kv), r->max_model_len, gib(one_seq));
        return SITS_ERR_INVALID;
    }
    *kv_bytes_p = (int64_t)kv;
    return SITS_OK;
}

/* [kv move] Each buffer of the KV move staging: --kv-move-buffer, raised to what one block of a move
 * in either direction between the two groups needs (a move of more blocks goes in chunks). */
static sits_status_t kv_move_staging_bytes(const sits_runner_t *r, const sits_runner_params_t *p, const sits_backend_t *be,
                                           size_t *bytes_p)
{
    size_t need = 0;
    for (int dir = 0; dir < 2; dir++) {
        size_t per_block = 0, headers = 0;
        SITS_CHECK(sits_kv_move_need(&r->cfg, p->block_size > 0 ? p->block_size : 16, be->kv_dtype, p->kv_move_tp[dir],
                                     p->kv_move_tp[!dir], p->kv_move_pp > 0 ? p->kv_move_pp : 1, &per_block, &headers));
        if (headers + per_block > need) need = headers + per_block;
    }
    size_t bytes = (size_t)p->kv_move_bytes;
    if (bytes < need) {
        SITS_WARN(SITS_SUB_KV, "--kv-move-buffer %zu bytes holds no KV block of a move (%zu bytes with its headers): %zu used",
                  bytes, need, need);
        bytes = need;
    }
    *bytes_p = bytes;
    return SITS_OK;
}

sits_status_t sits_runner_create(const sits_runner_params_t *p, sits_backend_t *be, sits_comm_t *tp, sits_comm_t *tp_dev,
                                 sits_runner_t **r_p)
{
    sits_status_t st = SITS_OK;
    double t0 = now_s();
    sits_runner_t *r = calloc(1, sizeof *r);
    if (!r) return SITS_ERR_NOMEM;
    r->be = be;
    r->tp = tp;
    r->tp_dev = tp_dev ? tp_dev : tp;
    r->pp = p->pp && p->pp->size > 1 ? p->pp : NULL;
    r->ctl = p->ctl ? p->ctl : tp;
    /* tokens travel over ctl only when it holds ranks outside this TP group (stages, the front-end) */
    r->bcast_tokens = r->ctl->size > tp->size;
    r->token_root = r->bcast_tokens ? p->token_root : 0;
    SITS_CHECK_GOTO(sits_model_config_load(p->model_dir, &r->cfg), st, err);
    if (!p->dummy) SITS_CHECK_GOTO(sits_st_open_dir(p->model_dir, &r->st), st, err);
    if (r->st) SITS_CHECK_GOTO(sits_model_st_adapt(&r->cfg, r->st), st, err);   /* [mm] */
    sits_shard_t shard = { tp->rank, tp->size, r->pp ? r->pp->rank : 0, r->pp ? r->pp->size : 1, p->ep };
    /* load progress (issue 12): the TP leader reports */
    load_progress_t lp = { .t0 = now_s(), .tp_size = tp->size, .tty = isatty(STDERR_FILENO) };
    int report = tp->rank == 0;
    for (int q = 0; report && q < tp->size; q++) {
        size_t b = 0;
        sits_shard_t sq = { q, tp->size, shard.pp_rank, shard.pp_size, shard.ep_size };
        SITS_CHECK_GOTO(sits_model_weights_shard_bytes_quant(&r->cfg, &sq, be->weight_dtype, p->quant, r->st, &b), st, err);
        lp.group_total += b;
    }
    int mml = p->max_model_len > 0 ? p->max_model_len : r->cfg.max_position_embeddings;
    r->max_model_len = mml;
    int bs = p->block_size > 0 ? p->block_size : 16;
    sits_engine_params_t ep = {
        .max_tokens = p->max_tokens, .max_seqs = p->max_seqs, .block_size = bs,
        .max_blocks_per_seq = (mml + bs - 1) / bs, .no_cuda_graphs = p->no_cuda_graphs, .pp_comm = r->pp,
        .pp_microbatches = p->pp_microbatches, .pp_microbatch_min_tokens = p->pp_microbatch_min_tokens,
        .fp8_separate_quant = p->fp8_separate_quant, .moe_dev_max = p->moe_dev_max,
    };
    /* [memory plan] before the weights load: a configuration that cannot fit is refused here */
    int64_t kv_bytes = p->kv_bytes;
    sits_shard_dims_t dims;
    SITS_CHECK_GOTO(sits_shard_dims(&r->cfg, &shard, &dims), st, err);
    size_t per_block = sits_engine_kv_block_bytes(&r->cfg, &dims, be->kv_dtype, bs);
    size_t move_bytes = 0;
    if (p->kv_move_bytes > 0)   /* [kv move] */
        SITS_CHECK_GOTO(kv_move_staging_bytes(r, p, be, &move_bytes), st, err);
    SITS_CHECK_GOTO(plan_memory(r, p, be, &shard, &dims, &ep, per_block, move_bytes, &kv_bytes), st, err);
    SITS_CHECK_GOTO(sits_model_weights_load_quant(&r->cfg, r->st, be, &shard, p->dummy_seed, p->quant,
                                                  report ? load_progress : NULL, &lp, &r->w), st, err);
    ep.n_blocks = kv_bytes > 0 ? (int)((size_t)kv_bytes / per_block) : ep.max_blocks_per_seq * p->max_seqs;
    if (ep.n_blocks < 1) {
        SITS_ERROR(SITS_SUB_KV, "--kv-cache-memory %lld bytes holds no KV block of %zu bytes", (long long)p->kv_bytes, per_block);
        st = SITS_ERR_INVALID;
        goto err;
    }
    r->ep = ep;
    SITS_CHECK_GOTO(sits_engine_create(&ep, r->w, be, r->tp_dev, &r->engine), st, err);
    if (move_bytes) SITS_CHECK_GOTO(sits_kv_move_stage_create(be, move_bytes, p->kv_move_ranks, &r->kv_stage), st, err);
    size_t gfree = 0, gtotal = 0;
    if (sits_backend_cuda_mem_info(be, &gfree, &gtotal) == SITS_OK)   /* [memory plan] what the reserve has left */
        SITS_INFO(SITS_SUB_KV, "memory plan: after allocation %.3f GiB free of %.2f GiB (cuda graphs and nccl take theirs "
                  "from here; 1 - utilization leaves %.2f GiB beyond the plan's reserve)", gib((double)gfree), gib((double)gtotal),
                  gib((1.0 - (p->gpu_memory_utilization > 0 ? p->gpu_memory_utilization : 0.9)) * (double)gtotal));
    SITS_CHECK_GOTO(sits_kv_blocks_create(ep.n_blocks, &r->blocks), st, err);
    r->load_s = now_s() - t0;
    *r_p = r;
    return SITS_OK;
err:
    sits_runner_destroy(r);
    return st;
}

sits_status_t sits_runner_limit_blocks(sits_runner_t *r, int n_blocks)
{
    if (n_blocks < 1 || n_blocks > r->ep.n_blocks) return SITS_ERR_INVALID;
    if (n_blocks == r->ep.n_blocks) return SITS_OK;
    sits_kv_blocks_t *kb = NULL;
    SITS_CHECK(sits_kv_blocks_create(n_blocks, &kb));
    sits_kv_blocks_destroy(r->blocks);
    r->blocks = kb;
    r->ep.n_blocks = n_blocks;   /* the engine keeps its larger storage; ids stay below n_blocks */
    return SITS_OK;
}

sits_status_t sits_runner_create_shadow(const sits_runner_t *local, sits_comm_t *ctl, int token_root, sits_runner_t **r_p)
{
    sits_status_t st = SITS_OK;
    sits_runner_t *r = calloc(1, sizeof *r);
    if (!r) return SITS_ERR_NOMEM;
    r->tp = r->tp_dev = r->ctl = ctl;
    r->bcast_tokens = 1;
    r->token_root = token_root;
    r->cfg = local->cfg;
    r->ep = local->ep;
    r->max_model_len = local->max_model_len;
    SITS_CHECK_GOTO(sits_kv_blocks_create(r->ep.n_blocks, &r->blocks), st, err);
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

/* Append each output's sampled token to its sequence. */
static void append_outputs(const sits_plan_t *pl, const int32_t *tokens, int32_t **out, int *out_len)
{
    for (int i = 0; i < pl->n_out; i++) {
        int s = pl->seq[pl->out_rows[i]];
        out[s][out_len[s]++] = tokens[i];
    }
}

/* [sliding window] Gives back the blocks of a sequence (table bt, *ndead of them given back already)
 * that no layer reads once n_computed positions are in the cache; -1 placeholders stay in bt. */
static void window_trim(sits_runner_t *r, int window, int n_computed, int32_t *bt, int *ndead)
{
    int dead = sits_kv_window_dead_blocks(window, r->ep.block_size, n_computed);
    if (dead <= *ndead) return;
    sits_kv_blocks_release(r->blocks, dead - *ndead, bt + *ndead);
    for (int b = *ndead; b < dead; b++) bt[b] = -1;
    *ndead = dead;
}

sits_status_t sits_generate(sits_runner_t *r, int n, const int32_t *const *prompts, const int *prompt_len, int max_new,
                            const sits_sample_params_t *params, int ignore_eos, int32_t **out, int *out_len,
                            sits_logits_cb_t cb, void *cb_ctx, sits_gen_stats_t *stats_p)
{
    const sits_engine_params_t *ep = &r->ep;
    sits_status_t st = SITS_OK;
    int total_prompt = 0, leader = r->ctl->rank == 0;
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
    int mb = ep->max_blocks_per_seq, bs = ep->block_size;
    int cap = total_prompt > n ? total_prompt : n;
    sits_worker_t wk = { 0 };
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)cap * 3), *pos = tok ? tok + cap : NULL, *seq = pos ? pos + cap : NULL;
    int32_t *bt = calloc((size_t)n * mb, sizeof(int32_t));
    int32_t *out_rows = malloc(sizeof(int32_t) * (size_t)n);
    int *live = calloc((size_t)n, sizeof(int)), *nblk = calloc((size_t)n, sizeof(int)), *ndead = calloc((size_t)n, sizeof(int));
    int window = sits_model_kv_window(&r->cfg);   /* [sliding window] blocks out of every layer's window go back */
    sits_sample_params_t *sp = malloc(sizeof *sp * (size_t)ep->max_seqs);
    if (!tok || !bt || !out_rows || !live || !nblk || !ndead || !sp) { st = SITS_ERR_NOMEM; goto out; }
    SITS_CHECK_GOTO(sits_worker_init(&wk, ep->max_seqs), st, out);
    double t0 = now_s(), t1 = t0;
    int steps = 0;
    uint64_t step_no = 0;
    sits_plan_t pl;
    if (!leader) {
        /* follower: execute the leader's plans until it says stop */
        for (;;) {
            SITS_CHECK_GOTO(sits_worker_recv(r, &wk, 0, &pl), st, out);
            if (pl.cmd == SITS_PLAN_STOP) break;
            SITS_CHECK_GOTO(sits_worker_exec(r, &wk, &pl, cb, cb_ctx), st, out);
            append_outputs(&pl, wk.tokens, out, out_len);
        }
        goto out;
    }
    /* prefill: as many whole prompts per step as fit in max_tokens (a longer prompt is split) */
    int seq_i = 0, seq_off = 0;
    while (seq_i < n) {
        int nt = 0, no = 0;
        while (seq_i < n && nt < ep->max_tokens) {
            int take = prompt_len[seq_i] - seq_off;
            if (take > ep->max_tokens - nt) take = ep->max_tokens - nt;
            int need = (seq_off + take + bs - 1) / bs;
            window_trim(r, window, seq_off, bt + (size_t)seq_i * mb, &ndead[seq_i]);
            if (need > nblk[seq_i]) {
                st = sits_kv_blocks_alloc(r->blocks, need - nblk[seq_i], bt + (size_t)seq_i * mb + nblk[seq_i]);
                if (st != SITS_OK) { SITS_ERROR(SITS_SUB_KV, "out of KV blocks during prefill"); goto stop; }
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
                sp[no] = params[seq_i];
                sp[no].step = 0;
                out_rows[no++] = nt - 1;
                live[seq_i] = 1;
                seq_i++;
                seq_off = 0;
            }
        }
        pl = (sits_plan_t){ .cmd = SITS_PLAN_STEP, .step = step_no++, .n_tokens = nt, .tokens = tok, .pos = pos, .seq = seq,
                            .n_seqs = n, .max_blocks = mb, .block_tables = bt, .n_out = no, .out_rows = out_rows, .sample = sp };
        SITS_CHECK_GOTO(sits_worker_send(r, &wk, &pl), st, stop);
        SITS_CHECK_GOTO(sits_worker_exec(r, &wk, &pl, cb, cb_ctx), st, stop);
        append_outputs(&pl, wk.tokens, out, out_len);
    }
    t1 = now_s();
    /* decode: one token per live sequence per step */
    for (;;) {
        for (int i = 0; i < n; i++)
            if (live[i] && ((!ignore_eos && is_eos(&r->cfg, out[i][out_len[i] - 1])) || out_len[i] >= max_new)) live[i] = 0;
        int nt = 0;
        for (int i = 0; i < n; i++) {
            if (!live[i]) continue;
            int p = prompt_len[i] + out_len[i] - 1;  /* position of the token fed back */
            window_trim(r, window, p, bt + (size_t)i * mb, &ndead[i]);
            if (p / bs >= nblk[i]) {
                st = sits_kv_blocks_alloc(r->blocks, 1, bt + (size_t)i * mb + nblk[i]);
                if (st != SITS_OK) { SITS_ERROR(SITS_SUB_KV, "out of KV blocks during decode"); goto stop; }
                nblk[i]++;
            }
            tok[nt] = out[i][out_len[i] - 1];
            pos[nt] = p;
            seq[nt] = i;
            out_rows[nt] = nt;
            sp[nt] = params[i];
            sp[nt].step = (uint64_t)out_len[i];
            nt++;
        }
        if (nt == 0) break;
        pl = (sits_plan_t){ .cmd = SITS_PLAN_STEP, .step = step_no++, .n_tokens = nt, .tokens = tok, .pos = pos, .seq = seq,
                            .n_seqs = n, .max_blocks = mb, .block_tables = bt, .n_out = nt, .out_rows = out_rows, .sample = sp };
        SITS_CHECK_GOTO(sits_worker_send(r, &wk, &pl), st, stop);
        SITS_CHECK_GOTO(sits_worker_exec(r, &wk, &pl, cb, cb_ctx), st, stop);
        append_outputs(&pl, wk.tokens, out, out_len);
        steps++;
    }
stop:
    {
        /* followers leave their loop whatever happened here (a failed collective has aborted the job already) */
        sits_plan_t stop_pl = { .cmd = SITS_PLAN_STOP };
        sits_status_t st2 = sits_worker_send(r, &wk, &stop_pl);
        if (st == SITS_OK) st = st2;
    }
    if (st == SITS_OK && stats_p) {
        double t2 = now_s();
        int generated = 0;
        for (int i = 0; i < n; i++) generated += out_len[i];
        stats_p->n_prompt_tokens = total_prompt;
        stats_p->n_generated = generated;
        stats_p->prefill_s = t1 - t0;
        stats_p->decode_s = t2 - t1;
        stats_p->decode_steps = steps;
    }
out:
    if (bt && nblk && ndead)
        for (int i = 0; i < n; i++)
            if (nblk[i] > ndead[i]) sits_kv_blocks_release(r->blocks, nblk[i] - ndead[i], bt + (size_t)i * mb + ndead[i]);
    sits_worker_fini(&wk);
    free(tok);
    free(bt);
    free(out_rows);
    free(live);
    free(nblk);
    free(ndead);
    free(sp);
    return st;
}
