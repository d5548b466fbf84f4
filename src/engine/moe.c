/* moe.c -- [moe] the Mixture-of-Experts MLP of one layer on one rank; see moe.h for the flow.
 *
 * Row layouts (H-wide rows of act_dtype; n tokens, k slots each, N = ep ranks, 1 without EP):
 *   send  (xs, ys)  this rank's own tokens' slots, expert-major (expert asc, token asc): experts are
 *                   contiguous per rank, so this is also destination-rank-major. ys holds the expert
 *                   outputs in the same rows, then the shared expert's n rows from row n * k.
 *   recv  (xr)      EP: source rank asc, then local expert asc, then token asc (what the all-to-all-v
 *                   delivers when every sender uses the send layout).
 *   expert (xe, ye) EP: local expert asc, then source asc, then token asc: each expert's rows are
 *                   contiguous for its GEMMs. perm / iperm map expert <-> recv rows (gather_rows).
 * Without EP the send layout is the expert layout: xs -> GEMMs -> ys directly.
 * [moe fp8] EP with FP8 experts: the dispatch carries what the experts' first FP8 GEMM reads, the rows
 * quantised per token (qs: H bytes of E4M3 a row, ss: one fp32 scale a row; H + 4 bytes instead of H
 * act_dtype values), in two all-to-all-v calls; xr / xe then hold H-byte rows and sr / se the scales,
 * and the gate/up GEMM runs on them as given (matmul_fp8q: bit for bit what matmul_fp8 makes of the row).
 * The expert outputs go back as act_dtype rows.
 * [moe dev] The device path (steps of up to dev_max tokens, 16-bit or FP8 experts): moe_topk, then
 * moe_route groups the slots by expert on the device (dplan), moe_experts runs every expert with a slot
 * in one launch for gate/up (+ SiLU * up) and one for down (rows by slot: ys row t k + j; weight pointers
 * from wptr, uploaded once), the shared expert as on the host path, and moe_combine_slots adds them up.
 * Nothing comes back to the host, so such steps can be CUDA graphs. The floats are the host path's (cpu:
 * bit for bit; cuda: up to the fp32 summation order of the GEMV vs cuBLASLt).
 * [moe grouped] The host path runs 16-bit experts (layers the device path takes with bf16 weights) through the backend's
 * optional moe_grouped -- every expert's rows in one launch for gate/up and one for down, over the expert-major rows
 * (xs, or xe with EP) -- instead of a GEMM pair per expert (run_ffn); cuda's moe_experts uses the same kernels from 64
 * tokens a step (kernels/moe.cu).
 * [moe fuse] A one-token step tries the backend's optional fused ops first, with the same bits: moe_select (router
 * linear + moe_topk + moe_route, one launch) and, without EP or a shared expert, moe_experts_combine (the experts
 * straight into out: no y rows, no combine launch).
 * With EP every rank holds every token (the TP group's attention output), so no token moves: a rank routes
 * them all, runs the slots of its own experts (moe_route's range), zeroes the other slots' rows, and its
 * combine is a partial sum that the all-reduce after the layer completes, as for TP-sliced experts; the
 * floats then differ from EP 1 only in the order of that sum. */
#include "engine/moe.h"
#include "util/log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct sits_moe {
    const sits_model_weights_t *w;
    sits_backend_t *be;
    sits_comm_t *comm;
    int T, E, k, kk, H, N, rank;
    size_t row;                 /* bytes of one H-wide activation row */
    /* backend buffers */
    void *logits;               /* [T, E] */
    int32_t *route_d;           /* [2 * T * k] 4-byte words: a step's ids [n * k], then its weights [n * k] (one download) */
    void *sg;                   /* [T] shared expert gate logits (act_dtype) */
    /* a step's plan, one upload each, 4-byte words: plan_d = gather rows [n * k] | combine slots pos [n * kk] |
     * combine weights (fp32) [n * kk]; perm_d (EP) = perm [nr] | iperm [nr] for nr received rows */
    int32_t *plan_d, *perm_d;   /* [T * k + 2 * T * kk], [2 * T * k] */
    void *xs, *ys, *xr, *xe, *ye;   /* [T * k, H]; ys [T * k + T, H]; xr, xe, ye with EP only */
    uint8_t *qs;                /* [moe fp8] [T * k, H] E4M3 rows to send (EP with FP8 experts only) */
    float *ss, *sr, *se;        /* [moe fp8] [T * k] their scales: send, recv, expert layout */
    /* host */
    int32_t *route_h, *plan_h, *perm_h;   /* as route_d, plan_d, perm_d */
    float *sg_h;
    int *cnt;                   /* [N, E] slots of tokens of slice s routed to expert e */
    int *eoff;                  /* [E + 1] */
    size_t *sb, *so, *rb, *ro;  /* [N] all-to-all-v bytes and offsets: send, recv */
    uint64_t *tokens;           /* [E] load-balance counters (host path) */
    /* [moe dev] the device path: steps of n <= dev_max tokens on layers whose experts are 16-bit or FP8 (dev_ok) */
    int dev_max, dev_all;       /* dev_max 0: off; dev_all: every layer of this stage can take it */
    uint8_t *dev_ok;            /* [layers of this stage] 1: 16-bit experts, 2: FP8 ones, 0: the host path */
    int32_t *dplan;             /* [SITS_MOE_PLAN_WORDS(E, dev_max * k)] moe_route's plan */
    uint64_t *dcount;           /* [E] slots routed on the device path (device), then one word more: */
    uint32_t *dsync;            /* [moe fuse] in dcount's word E: moe_select's arrival counter (0 between calls) */
    const void **wptr;          /* [layers][MOE_WPTRS E] device: exp_gu[e], exp_down[e], [moe fp8] exp_gu_scale[e], exp_down_scale[e],
                                 * [gpt-oss] exp_gu_bias[e], exp_down_bias[e] */
    void *dact;                 /* [dev_max * k, ie_loc] */
    void *dq8;                  /* [moe fp8] SITS_MOE_Q8_BYTES(dev_max, dev_max * k, H, ie_loc): FP8 layers only */
    uint64_t *dcount_h, *total; /* [E] dcount as last read; tokens + dcount_h */
    double dcount_t;            /* when dcount was last read (monotonic s) */
    /* [moe grouped] host-routed steps' experts in one moe_grouped call (layers with dev_ok 1; wptr's pointers) */
    void *gact;                 /* [T * k, ie_loc] NULL: off (no op, no device path, SITS_MOE_GROUPED=0, or no step past dev_max) */
    int32_t *gplan_d, *gplan_h; /* [MOE_GPLAN_WORDS]: off [E + 1], then tiles {e, r0} [2 * max tiles] */
};

/* [moe grouped] words of a step's moe_grouped plan for T tokens of top k over E experts: the offsets, then at most one
 * tile more an expert than whole tiles of the rows */
#define MOE_GPLAN_WORDS(E, T, k) ((size_t)(E) + 1 + 2 * ((size_t)(T) * (size_t)(k) / SITS_MOE_GROUPED_ROWS + (size_t)(E)))

/* [moe dev] Weight pointers a layer holds in wptr, E of each: gate/up, down, [moe fp8] their row scales, [gpt-oss] their
 * biases (NULL entries: none) */
#define MOE_WPTRS 6

/* [moe dev] Steps of up to this many tokens take the device path by default (engine param moe_dev_max 0; fewer
 * where n k would pass SITS_MOE_DEV_MAX_SLOTS). */
#define MOE_DEV_MAX_DEFAULT 256

/* [moe dev] The device path's largest step for engine param v (0: default, < 0: off), max_tokens and E experts of
 * top k: 0 when off or the slots would not fit moe_route. */
static int dev_max_of(int v, int max_tokens, int k)
{
    int t = v == 0 ? MOE_DEV_MAX_DEFAULT : v < 0 ? 0 : v;
    if (t > max_tokens) t = max_tokens;
    while (t > 0 && (size_t)t * (size_t)k > SITS_MOE_DEV_MAX_SLOTS) t--;
    return t;
}

size_t sits_moe_step_bytes(const sits_model_config_t *cfg, const sits_shard_dims_t *d, sits_dtype_t act_dtype, int max_tokens,
                           int dev_max)
{
    size_t T = (size_t)max_tokens, E = (size_t)cfg->moe.n_experts, k = (size_t)cfg->moe.top_k, kk = k + 1;
    size_t es = sits_dtype_size(act_dtype), row = (size_t)cfg->hidden_size * es;
    size_t b = T * E * es + T * k * (sizeof(int32_t) + sizeof(float)) + T * es + 3 * T * k * sizeof(int32_t) +
               T * kk * (sizeof(int32_t) + sizeof(float));
    b += T * k * row + (T * k + T) * row;
    if (d->ep > 1) b += 3 * T * k * row + T * k * ((size_t)cfg->hidden_size + 3 * sizeof(float));   /* [moe fp8] qs, ss, sr, se */
    size_t D = (size_t)dev_max_of(dev_max, max_tokens, (int)k);
    if (D)   /* [moe dev] dplan, dcount, wptr, dact, dq8 (counted whether or not the experts are FP8) */
        b += SITS_MOE_PLAN_WORDS(E, D * k) * sizeof(int32_t) + (E + 1) * sizeof(uint64_t) +
             (size_t)(d->layer1 - d->layer0) * MOE_WPTRS * E * sizeof(void *) + D * k * (size_t)d->ie_loc * es +
             SITS_MOE_Q8_BYTES(D, D * k, cfg->hidden_size, d->ie_loc);
    if (D && D < T)   /* [moe grouped] gact, gplan (whenever steps past the device path's exist) */
        b += T * k * (size_t)d->ie_loc * es + MOE_GPLAN_WORDS(E, T, k) * sizeof(int32_t);
    return b;
}

void sits_moe_destroy(sits_moe_t *m)
{
    if (!m) return;
    sits_backend_t *be = m->be;
    void *dev[] = { m->logits, m->route_d, m->sg, m->plan_d, m->perm_d,
                    m->xs, m->ys, m->xr, m->xe, m->ye, m->qs, m->ss, m->sr, m->se,
                    m->dplan, m->dcount, (void *)m->wptr, m->dact, m->dq8, m->gact, m->gplan_d };
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        if (dev[i]) be->ops->free(be, dev[i]);
    void *host[] = { m->route_h, m->plan_h, m->perm_h, m->sg_h, m->cnt, m->gplan_h,
                     m->eoff, m->sb, m->so, m->rb, m->ro, m->tokens, m->dev_ok, m->dcount_h, m->total };
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
    free(m);
}

sits_status_t sits_moe_create(const sits_model_weights_t *w, sits_backend_t *be, sits_comm_t *comm, int max_tokens, int dev_max,
                              sits_moe_t **moe_p)
{
    const sits_model_config_t *c = &w->cfg;
    const sits_backend_ops_t *op = be->ops;
    if (!op->moe_topk || !op->moe_combine) {
        SITS_ERROR(SITS_SUB_ENGINE, "the %s backend has no mixture-of-experts ops (moe_topk, moe_combine)", op->name);
        return SITS_ERR_UNSUPPORTED;
    }
    if (c->moe.act_oai && !op->swiglu_oai) {   /* [gpt-oss] */
        SITS_ERROR(SITS_SUB_ENGINE, "the %s backend has no swiglu_oai op (gpt-oss experts)", op->name);
        return SITS_ERR_UNSUPPORTED;
    }
    if (w->dims.ep > 1 && comm->size != w->dims.ep) {
        SITS_ERROR(SITS_SUB_ENGINE, "expert parallelism over %d ranks needs a group of %d ranks (got %d)", w->dims.ep,
                   w->dims.ep, comm->size);
        return SITS_ERR_INVALID;
    }
    sits_status_t st = SITS_OK;
    sits_moe_t *m = calloc(1, sizeof *m);
    if (!m) return SITS_ERR_NOMEM;
    m->w = w;
    m->be = be;
    m->comm = comm;
    m->T = max_tokens;
    m->E = c->moe.n_experts;
    m->k = c->moe.top_k;
    m->kk = m->k + (c->moe.shared_inter > 0);
    m->H = c->hidden_size;
    m->N = w->dims.ep > 1 ? w->dims.ep : 1;
    m->rank = m->N > 1 ? comm->rank : 0;   /* the token slice and expert range index (0 without EP) */
    size_t es = sits_dtype_size(be->act_dtype), T = (size_t)max_tokens, Tk = T * (size_t)m->k, Tkk = T * (size_t)m->kk;
    m->row = (size_t)m->H * es;
    SITS_CHECK_GOTO(op->alloc(be, T * (size_t)m->E * es, &m->logits), st, err);
    SITS_CHECK_GOTO(op->alloc(be, 2 * Tk * sizeof(int32_t), (void **)&m->route_d), st, err);
    SITS_CHECK_GOTO(op->alloc(be, T * es, &m->sg), st, err);
    SITS_CHECK_GOTO(op->alloc(be, (Tk + 2 * Tkk) * sizeof(int32_t), (void **)&m->plan_d), st, err);
    SITS_CHECK_GOTO(op->alloc(be, 2 * Tk * sizeof(int32_t), (void **)&m->perm_d), st, err);
    SITS_CHECK_GOTO(op->alloc(be, Tk * m->row, &m->xs), st, err);
    SITS_CHECK_GOTO(op->alloc(be, (Tk + T) * m->row, &m->ys), st, err);
    if (m->N > 1) {
        SITS_CHECK_GOTO(op->alloc(be, Tk * m->row, &m->xr), st, err);
        SITS_CHECK_GOTO(op->alloc(be, Tk * m->row, &m->xe), st, err);
        SITS_CHECK_GOTO(op->alloc(be, Tk * m->row, &m->ye), st, err);
        /* [moe fp8] the FP8 payload: when some layer's experts are FP8, the backend quantises rows, and an
         * H-byte row and a scale are whole act_dtype elements (gather_rows moves them as such) */
        int fp8_exp = 0;
        for (int l = 0; l < c->n_layers; l++) fp8_exp |= w->layers[l].exp_gu_scale != NULL;
        if (fp8_exp && op->quant_fp8_rows && op->matmul_fp8q && (size_t)m->H % es == 0 && sizeof(float) % es == 0) {
            SITS_CHECK_GOTO(op->alloc(be, Tk * (size_t)m->H, (void **)&m->qs), st, err);
            SITS_CHECK_GOTO(op->alloc(be, Tk * sizeof(float), (void **)&m->ss), st, err);
            SITS_CHECK_GOTO(op->alloc(be, Tk * sizeof(float), (void **)&m->sr), st, err);
            SITS_CHECK_GOTO(op->alloc(be, Tk * sizeof(float), (void **)&m->se), st, err);
        }
    }
    m->route_h = malloc(2 * Tk * sizeof(int32_t));
    m->plan_h = malloc((Tk + 2 * Tkk) * sizeof(int32_t));
    m->perm_h = malloc(2 * Tk * sizeof(int32_t));
    m->sg_h = malloc(T * sizeof(float));
    m->cnt = calloc((size_t)m->N * m->E, sizeof(int));
    m->eoff = calloc((size_t)m->E + 1, sizeof(int));
    m->sb = calloc((size_t)m->N, sizeof(size_t));
    m->so = calloc((size_t)m->N, sizeof(size_t));
    m->rb = calloc((size_t)m->N, sizeof(size_t));
    m->ro = calloc((size_t)m->N, sizeof(size_t));
    m->tokens = calloc((size_t)m->E, sizeof(uint64_t));
    if (!m->route_h || !m->plan_h || !m->perm_h || !m->sg_h ||
        !m->cnt || !m->eoff || !m->sb || !m->so || !m->rb || !m->ro || !m->tokens) {
        st = SITS_ERR_NOMEM;
        goto err;
    }
    /* [moe dev] the device path: the backend's ops, 16-byte rows; per layer 16-bit or FP8 experts (both linears
     * FP8, as --quant ffn=fp8 and FP8 checkpoints have them), not INT4; with EP this rank's experts exp0 .. */
    const sits_shard_dims_t *d = &w->dims;
    int L = d->layer1 - d->layer0;
    m->dev_max = dev_max_of(dev_max, max_tokens, m->k);
    if (!op->moe_route || !op->moe_experts || !op->moe_combine_slots || (m->N > 1 && !op->memset0) || m->H % 8 ||
        d->ie_loc % 8 || L < 1)
        m->dev_max = 0;
    if (m->dev_max) {
        size_t D = (size_t)m->dev_max * (size_t)m->k;
        m->dev_ok = calloc((size_t)L, 1);
        m->dcount_h = calloc((size_t)m->E, sizeof(uint64_t));
        m->total = calloc((size_t)m->E, sizeof(uint64_t));
        const void **wp = calloc((size_t)L * MOE_WPTRS * m->E, sizeof(void *));
        if (!m->dev_ok || !m->dcount_h || !m->total || !wp) {
            free(wp);
            st = SITS_ERR_NOMEM;
            goto err;
        }
        m->dev_all = 1;
        int any_f8 = 0;
        for (int l = 0; l < L; l++) {
            const sits_layer_weights_t *lw = &w->layers[d->layer0 + l];
            int f8 = lw->exp_gu_scale && lw->exp_down_scale, f16 = !lw->exp_gu_scale && !lw->exp_down_scale;
            m->dev_ok[l] = lw->exp_gu_w4 || lw->exp_down_w4 ? 0 : f8 ? 2 : f16 ? 1 : 0;
            m->dev_all &= m->dev_ok[l] != 0;
            any_f8 |= m->dev_ok[l] == 2;
            const void **lp = wp + (size_t)l * MOE_WPTRS * m->E;   /* by local expert: moe_route's plan indexes them so */
            for (int e = 0; m->dev_ok[l] && e < d->n_exp_loc; e++) {
                lp[e] = lw->exp_gu[e];
                lp[m->E + e] = lw->exp_down[e];
                lp[4 * m->E + e] = lw->exp_gu_bias ? lw->exp_gu_bias[e] : NULL;   /* [gpt-oss] */
                lp[5 * m->E + e] = lw->exp_down_bias ? lw->exp_down_bias[e] : NULL;
                if (f8) {
                    lp[2 * m->E + e] = lw->exp_gu_scale[e];
                    lp[3 * m->E + e] = lw->exp_down_scale[e];
                }
            }
        }
        st = op->alloc(be, SITS_MOE_PLAN_WORDS(m->E, D) * sizeof(int32_t), (void **)&m->dplan);
        if (st == SITS_OK) st = op->alloc(be, ((size_t)m->E + 1) * sizeof(uint64_t), (void **)&m->dcount);
        if (st == SITS_OK) st = op->memset0(be, m->dcount, ((size_t)m->E + 1) * sizeof(uint64_t));
        if (st == SITS_OK) m->dsync = (uint32_t *)(m->dcount + m->E);
        if (st == SITS_OK) st = op->alloc(be, (size_t)L * MOE_WPTRS * m->E * sizeof(void *), (void **)&m->wptr);
        if (st == SITS_OK) st = op->upload(be, (void *)m->wptr, wp, (size_t)L * MOE_WPTRS * m->E * sizeof(void *));
        if (st == SITS_OK) st = op->alloc(be, D * (size_t)d->ie_loc * es, &m->dact);
        if (st == SITS_OK && any_f8) st = op->alloc(be, SITS_MOE_Q8_BYTES(m->dev_max, D, m->H, d->ie_loc), &m->dq8);
        free(wp);
        if (st != SITS_OK) goto err;
        /* [moe grouped] SITS_MOE_GROUPED=0 keeps the per-expert GEMMs (A/B) */
        const char *ge = getenv("SITS_MOE_GROUPED");
        int any16 = 0;
        for (int l = 0; l < L; l++) any16 |= m->dev_ok[l] == 1;
        if (op->moe_grouped && !(ge && atoi(ge) == 0) && any16 && m->dev_max < max_tokens) {
            size_t gw = MOE_GPLAN_WORDS(m->E, max_tokens, m->k);
            SITS_CHECK_GOTO(op->alloc(be, Tk * (size_t)d->ie_loc * es, &m->gact), st, err);
            SITS_CHECK_GOTO(op->alloc(be, gw * sizeof(int32_t), (void **)&m->gplan_d), st, err);
            if (!(m->gplan_h = malloc(gw * sizeof(int32_t)))) {
                st = SITS_ERR_NOMEM;
                goto err;
            }
        }
    }
    SITS_INFO(SITS_SUB_ENGINE, "engine: mixture of experts, %d experts top %d, %s (experts %d..%d here, ffn %d each)%s%s; "
              "device routing for steps of up to %d tokens%s%s", m->E,
              m->k, m->N > 1 ? "expert parallel" : "tensor-parallel experts", w->dims.exp0, w->dims.exp0 + w->dims.n_exp_loc - 1,
              w->dims.ie_loc, c->moe.shared_inter > 0 ? ", shared expert" : "",
              m->qs ? ", fp8 dispatch payload (H + 4 bytes a row)" : "", m->dev_max,
              m->dev_max && !m->dev_all ? " (16-bit and FP8 expert layers only)" : "",
              m->gact ? ", longer steps' 16-bit experts as grouped GEMMs" : "");
    *moe_p = m;
    return SITS_OK;
err:
    sits_moe_destroy(m);
    return st;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const uint64_t *sits_moe_expert_tokens(sits_moe_t *m, int *n_experts_p)
{
    *n_experts_p = m->E;
    if (!m->dev_max) return m->tokens;
    double now = now_s();
    if (now - m->dcount_t >= 0.25) {   /* [moe dev] the device's counters, read at most 4 times a second */
        m->dcount_t = now;
        if (m->be->ops->download(m->be, m->dcount_h, m->dcount, (size_t)m->E * sizeof(uint64_t)) != SITS_OK)
            SITS_WARN(SITS_SUB_ENGINE, "moe: reading the device's expert token counters failed; the metric shows older counts");
    }
    for (int e = 0; e < m->E; e++) m->total[e] = m->tokens[e] + m->dcount_h[e];
    return m->total;
}

int sits_moe_graph_max(const sits_moe_t *m) { return m->dev_all ? m->dev_max : 0; }

/* One expert's SwiGLU MLP on c rows: gu [c, 2 i] = x [c, H] . gu_w^T; act [c, i] = silu(gate) * up;
 * y [c, H] = act . down_w^T. [moe fp8] gu_s / down_s non-NULL: that linear is FP8 E4M3 with those row
 * scales (matmul_fp8 quantises its input rows per token); xs non-NULL: x is already quantised (E4M3 rows
 * [c, H], scales xs [c]; gu_s then non-NULL too); [moe int4] gu4 / down4 non-NULL: that linear is packed INT4
 * (matmul_w4; gu_w / down_w then unused). */
static sits_status_t run_ffn(sits_moe_t *m, void *y, const void *x, const float *xs, const void *gu_w, const float *gu_s,
                             const sits_w4_t *gu4, const void *down_w, const float *down_s, const sits_w4_t *down4, int c, int i,
                             void *gu, void *act, const void *gu_b, const void *down_b)
{
    const sits_backend_ops_t *op = m->be->ops;
    const sits_model_config_t *cfg = &m->w->cfg;
    if (c == 0) return SITS_OK;
    /* [gpt-oss] gu_b [2 i] / down_b [H] (NULL: none) are the GEMMs' biases */
    if (xs) SITS_CHECK(op->matmul_fp8q(m->be, gu, 0, x, xs, gu_w, gu_s, gu_b, c, m->H, 2 * i));   /* [moe fp8] x: E4M3 rows */
    else if (gu_s) SITS_CHECK(op->matmul_fp8(m->be, gu, 0, x, gu_w, gu_s, gu_b, c, m->H, 2 * i));               /* [c, 2i] */
    else if (gu4) SITS_CHECK(op->matmul_w4(m->be, gu, x, gu4, gu_b, c, m->H, 2 * i));                          /* [moe int4] */
    else SITS_CHECK(op->matmul(m->be, gu, x, gu_w, gu_b, c, m->H, 2 * i));
    if (cfg->moe.act_oai) SITS_CHECK(op->swiglu_oai(m->be, act, gu, c, i, cfg->moe.swiglu_alpha, cfg->moe.swiglu_limit));
    else SITS_CHECK(op->silu_mul(m->be, act, gu, c, i));                                                       /* [c, i] */
    if (down_s) return op->matmul_fp8(m->be, y, 0, act, down_w, down_s, down_b, c, i, m->H);                  /* [c, H] */
    if (down4) return op->matmul_w4(m->be, y, act, down4, down_b, c, i, m->H);                                /* [moe int4] */
    return op->matmul(m->be, y, act, down_w, down_b, c, i, m->H);
}

static void *row_at(const sits_moe_t *m, void *base, size_t r) { return (char *)base + r * m->row; }

/* [moe fp8] the all-to-all-v byte counts and offsets (sb, so, rb, ro: whole rows of `from` bytes) as rows of `to` bytes */
static void rescale_counts(sits_moe_t *m, size_t from, size_t to)
{
    size_t *v[4] = { m->sb, m->so, m->rb, m->ro };
    for (int a = 0; a < 4; a++)
        for (int q = 0; q < m->N; q++) v[a][q] = v[a][q] / from * to;
}

/* [moe grouped] The experts of a host-routed step in one moe_grouped call: rows [off[e], off[e + 1]) of x (expert-major,
 * cnt[e] rows of local expert e < ne) through local expert e into the same rows of y. SITS_ERR_UNSUPPORTED, nothing
 * done: the caller runs them one by one (run_ffn). */
static sits_status_t run_grouped(sits_moe_t *m, const sits_layer_weights_t *lw, int l, void *y, const void *x, const int *cnt, int ne)
{
    if (!m->gact || m->dev_ok[l] != 1) return SITS_ERR_UNSUPPORTED;
    int32_t *off = m->gplan_h, *tiles = m->gplan_h + m->E + 1;
    int nt = 0;
    off[0] = 0;
    for (int e = 0; e < ne; e++) {
        off[e + 1] = off[e] + cnt[e];
        for (int r = off[e]; r < off[e + 1]; r += SITS_MOE_GROUPED_ROWS, nt++) {   /* [n tiles] {e, r0} */
            tiles[2 * nt] = e;
            tiles[2 * nt + 1] = r;
        }
    }
    if (nt == 0) return SITS_OK;
    const sits_backend_ops_t *op = m->be->ops;
    SITS_CHECK(op->upload(m->be, m->gplan_d, m->gplan_h, ((size_t)m->E + 1 + 2 * (size_t)nt) * sizeof(int32_t)));
    const void *const *wp = m->wptr + (size_t)l * MOE_WPTRS * m->E;
    const sits_model_config_t *c = &m->w->cfg;   /* [gpt-oss] biases, the clamped SwiGLU */
    const sits_moe_epi_t epi = { wp + 4 * m->E, wp + 5 * m->E, c->moe.act_oai, c->moe.swiglu_alpha, c->moe.swiglu_limit };
    const int has_epi = lw->exp_gu_bias || c->moe.act_oai;
    return op->moe_grouped(m->be, y, m->gact, x, m->gplan_d, m->gplan_d + m->E + 1, nt, wp, wp + m->E, has_epi ? &epi : NULL, m->H,
                           m->w->dims.ie_loc);   /* act [rows, ie_loc], y [rows, H] */
}

/* [moe dev] see the header comment: routing, experts and combine without the host */
static sits_status_t forward_dev(sits_moe_t *m, const sits_layer_weights_t *lw, int l, const void *h, void *out, void *gu,
                                 void *act, int n, const int32_t *mask)
{
    sits_backend_t *be = m->be;
    const sits_backend_ops_t *op = be->ops;
    int E = m->E, k = m->k;
    float *wts = (float *)(m->route_d + (size_t)n * k);
    sits_status_t st = SITS_ERR_UNSUPPORTED;
    if (n == 1 && op->moe_select)   /* [moe fuse] the three below in one launch */
        st = op->moe_select(be, m->logits, m->route_d, wts, m->dplan, m->dcount, m->dsync, h, lw->router, lw->router_bias, mask,
                            m->H, E, k, m->w->cfg.moe.norm_topk, m->w->dims.exp0, m->w->dims.n_exp_loc);
    if (st != SITS_ERR_UNSUPPORTED) {
        SITS_CHECK(st);
    } else {
        SITS_CHECK(op->matmul(be, m->logits, h, lw->router, lw->router_bias, n, m->H, E));           /* [n, E] */
        SITS_CHECK(op->moe_topk(be, m->route_d, wts, m->logits, n, E, k, m->w->cfg.moe.norm_topk));   /* [n, k] ids, wts */
        SITS_CHECK(op->moe_route(be, m->dplan, m->dcount, m->route_d, mask, n, k, E, m->w->dims.exp0, m->w->dims.n_exp_loc));
    }
    if (m->N > 1) SITS_CHECK(op->memset0(be, m->ys, (size_t)n * k * m->row));   /* [n k, H]: other ranks' slots add 0 */
    const void *const *wp = m->wptr + (size_t)l * MOE_WPTRS * E;
    const float *const *sp = m->dev_ok[l] == 2 ? (const float *const *)(wp + 2 * E) : NULL;   /* [moe fp8] row scales */
    const sits_model_config_t *c = &m->w->cfg;   /* [gpt-oss] biases, the clamped SwiGLU */
    const sits_moe_epi_t epi = { wp + 4 * E, wp + 5 * E, c->moe.act_oai, c->moe.swiglu_alpha, c->moe.swiglu_limit };
    const int has_epi = lw->exp_gu_bias || c->moe.act_oai;
    if (n == 1 && m->N == 1 && !lw->sh_route && op->moe_experts_combine) {   /* [moe fuse] experts and combine, no y */
        st = op->moe_experts_combine(be, out, m->dact, h, m->dplan, m->route_d, wts, wp, wp + E, sp, sp ? sp + E : NULL, m->dq8,
                                     has_epi ? &epi : NULL, k, E, m->H, m->w->dims.ie_loc);
        if (st != SITS_ERR_UNSUPPORTED) return st;
    }
    SITS_CHECK(op->moe_experts(be, m->ys, m->dact, h, m->dplan, wp, wp + E, sp, sp ? sp + E : NULL, m->dq8, has_epi ? &epi : NULL,
                               n, k, E, m->H,
                               m->w->dims.ie_loc));                                                                 /* [n k, H] */
    if (lw->sh_route) {
        SITS_CHECK(op->matmul(be, m->sg, h, lw->sh_route, NULL, n, m->H, 1));                   /* [n, 1] */
        SITS_CHECK(run_ffn(m, row_at(m, m->ys, (size_t)n * k), h, NULL, lw->sh_gu, lw->sh_gu_scale, NULL, lw->sh_down,
                           lw->sh_down_scale, NULL, n, m->w->dims.is_loc, gu, act, NULL, NULL));
    }
    return op->moe_combine_slots(be, out, m->ys, wts, lw->sh_route ? m->sg : NULL, n, k, m->H);
}

sits_status_t sits_moe_forward(sits_moe_t *m, int layer, const void *h, void *out, void *gu, void *act, int n,
                               const int32_t *mask)
{
    const sits_layer_weights_t *lw = &m->w->layers[layer];
    const sits_shard_dims_t *d = &m->w->dims;
    const sits_model_config_t *c = &m->w->cfg;
    sits_backend_t *be = m->be;
    const sits_backend_ops_t *op = be->ops;
    int E = m->E, k = m->k, kk = m->kk, N = m->N, r = m->rank, epr = E / N;
    if (n < 1 || n > m->T) return SITS_ERR_INVALID;
    if (n <= m->dev_max && m->dev_ok[layer - d->layer0]) return forward_dev(m, lw, layer - d->layer0, h, out, gu, act, n, mask);
    /* 1. router, top-k and the shared expert's gate logit, back on the host */
    SITS_CHECK(op->matmul(be, m->logits, h, lw->router, lw->router_bias, n, m->H, E));           /* [n, E] */
    size_t nk = (size_t)n * k;
    SITS_CHECK(op->moe_topk(be, m->route_d, (float *)(m->route_d + nk), m->logits, n, E, k, c->moe.norm_topk));
    if (lw->sh_route) {
        SITS_CHECK(op->matmul(be, m->sg, h, lw->sh_route, NULL, n, m->H, 1));                   /* [n, 1] */
        SITS_CHECK(op->download_f32(be, m->sg_h, m->sg, (size_t)n));
    }
    SITS_CHECK(op->download(be, m->route_h, m->route_d, 2 * sizeof(int32_t) * nk));           /* ids, weights */
    const int32_t *ids_h = m->route_h;
    const float *wts_h = (const float *)(m->route_h + nk);
    int32_t *rows_h = m->plan_h, *pos_h = m->plan_h + nk, *pos_d = m->plan_d + nk;
    float *cw_h = (float *)(pos_h + (size_t)n * kk), *cw_d = (float *)(pos_d + (size_t)n * kk);
    /* 2. counts per (token slice, expert): slice s = tokens [s n / N, (s + 1) n / N) */
    memset(m->cnt, 0, sizeof(int) * (size_t)N * E);
    for (int s = 0; s < N; s++)
        for (int t = (int)((long)s * n / N); t < (int)((long)(s + 1) * n / N); t++)
            for (int j = 0; j < k; j++) {
                int e = ids_h[(size_t)t * k + j];
                if (e < 0 || e >= E) {
                    SITS_ERROR(SITS_SUB_ENGINE, "moe layer %d: token %d routed to expert %d of %d", layer, t, e, E);
                    return SITS_ERR_INTERNAL;
                }
                m->cnt[(size_t)s * E + e]++;
                m->tokens[e]++;
            }
    /* 3. this rank's tokens in the send layout (expert-major), and the combine slots */
    int t0 = (int)((long)r * n / N), t1 = (int)((long)(r + 1) * n / N), ns = 0;
    const int *mine = m->cnt + (size_t)r * E;
    m->eoff[0] = 0;
    for (int e = 0; e < E; e++) m->eoff[e + 1] = m->eoff[e] + mine[e];
    ns = m->eoff[E];
    for (int t = 0; t < n; t++)
        for (int j = 0; j < kk; j++) {
            pos_h[(size_t)t * kk + j] = -1;
            cw_h[(size_t)t * kk + j] = 0.0f;
        }
    for (int t = t0; t < t1; t++)
        for (int j = 0; j < k; j++) {
            int e = ids_h[(size_t)t * k + j], p = m->eoff[e]++;
            rows_h[p] = t;
            pos_h[(size_t)t * kk + j] = p;
            cw_h[(size_t)t * kk + j] = wts_h[(size_t)t * k + j];
        }
    for (int e = E; e > 0; e--) m->eoff[e] = m->eoff[e - 1];   /* back to the starts */
    m->eoff[0] = 0;
    if (lw->sh_route)
        for (int t = 0; t < n; t++) {
            pos_h[(size_t)t * kk + k] = n * k + t;
            cw_h[(size_t)t * kk + k] = 1.0f / (1.0f + expf(-m->sg_h[t]));
        }
    SITS_CHECK(op->upload(be, m->plan_d, m->plan_h, sizeof(int32_t) * (nk + 2 * (size_t)n * kk)));   /* one copy */
    if (ns) SITS_CHECK(op->gather_rows(be, m->xs, h, m->plan_d, ns, m->H));                    /* [ns, H] */
    /* 4. the experts */
    sits_status_t gst = SITS_ERR_UNSUPPORTED;
    if (N == 1) gst = run_grouped(m, lw, layer - d->layer0, m->ys, m->xs, mine, E);   /* [moe grouped] */
    if (gst != SITS_ERR_UNSUPPORTED) {
        SITS_CHECK(gst);
    } else if (N == 1) {
        for (int e = 0; e < E; e++)
            SITS_CHECK(run_ffn(m, row_at(m, m->ys, (size_t)m->eoff[e]), row_at(m, m->xs, (size_t)m->eoff[e]), NULL, lw->exp_gu[e],
                               lw->exp_gu_scale ? lw->exp_gu_scale[e] : NULL, lw->exp_gu_w4 ? &lw->exp_gu_w4[e] : NULL,
                               lw->exp_down[e], lw->exp_down_scale ? lw->exp_down_scale[e] : NULL,
                               lw->exp_down_w4 ? &lw->exp_down_w4[e] : NULL, mine[e], d->ie_loc, gu, act,
                               lw->exp_gu_bias ? lw->exp_gu_bias[e] : NULL, lw->exp_down_bias ? lw->exp_down_bias[e] : NULL));
    } else {
        /* send: to rank q the rows of its experts [q epr, (q + 1) epr); receive from s its tokens' rows
         * for this rank's experts, in s's send layout */
        size_t soff = 0, roff = 0;
        for (int q = 0; q < N; q++) {
            int sc = 0, rc = 0;
            for (int e = q * epr; e < (q + 1) * epr; e++) sc += mine[e];
            for (int e = r * epr; e < (r + 1) * epr; e++) rc += m->cnt[(size_t)q * E + e];
            m->sb[q] = (size_t)sc * m->row;
            m->so[q] = soff;
            m->rb[q] = (size_t)rc * m->row;
            m->ro[q] = roff;
            soff += m->sb[q];
            roff += m->rb[q];
        }
        int nr = (int)(roff / m->row);
        int32_t *perm_h = m->perm_h, *iperm_h = m->perm_h + nr;
        /* expert layout: local expert j, then source s, then token; perm[expert row] = recv row */
        int xe_row = 0;
        for (int j = 0; j < epr; j++) {
            int e = r * epr + j;
            for (int s = 0; s < N; s++) {
                int rrow = (int)(m->ro[s] / m->row);
                for (int e2 = r * epr; e2 < e; e2++) rrow += m->cnt[(size_t)s * E + e2];
                for (int i = 0; i < m->cnt[(size_t)s * E + e]; i++, xe_row++) {
                    perm_h[xe_row] = rrow + i;
                    iperm_h[rrow + i] = xe_row;
                }
            }
        }
        const int q8 = m->qs && lw->exp_gu_scale;   /* [moe fp8] the FP8 payload */
        const size_t es = m->row / (size_t)m->H;
        if (q8) {   /* the same rows and offsets in rows of H bytes, then of one fp32 scale, then back */
            if (ns) SITS_CHECK(op->quant_fp8_rows(be, m->qs, m->ss, m->xs, ns, m->H));                 /* [ns, H] E4M3, [ns] */
            rescale_counts(m, m->row, (size_t)m->H);
            SITS_CHECK(m->comm->ops->alltoallv(m->comm, m->qs, m->sb, m->so, m->xr, m->rb, m->ro));
            rescale_counts(m, (size_t)m->H, sizeof(float));
            SITS_CHECK(m->comm->ops->alltoallv(m->comm, m->ss, m->sb, m->so, m->sr, m->rb, m->ro));
            rescale_counts(m, sizeof(float), m->row);   /* act_dtype rows for the return trip */
        } else {
            SITS_CHECK(m->comm->ops->alltoallv(m->comm, m->xs, m->sb, m->so, m->xr, m->rb, m->ro));
        }
        if (nr) {
            SITS_CHECK(op->upload(be, m->perm_d, m->perm_h, 2 * sizeof(int32_t) * (size_t)nr));   /* perm | iperm */
            if (q8) {   /* H-byte rows and 4-byte scales, moved as H / es and 4 / es act_dtype elements */
                SITS_CHECK(op->gather_rows(be, m->xe, m->xr, m->perm_d, nr, (int)((size_t)m->H / es)));
                SITS_CHECK(op->gather_rows(be, m->se, m->sr, m->perm_d, nr, (int)(sizeof(float) / es)));
            } else {
                SITS_CHECK(op->gather_rows(be, m->xe, m->xr, m->perm_d, nr, m->H));
            }
        }
        if (!q8) {   /* [moe grouped] the local experts' rows (eoff is free again: counts by local expert) */
            for (int j = 0; j < epr; j++) {
                m->eoff[j] = 0;
                for (int s = 0; s < N; s++) m->eoff[j] += m->cnt[(size_t)s * E + r * epr + j];
            }
            gst = run_grouped(m, lw, layer - d->layer0, m->ye, m->xe, m->eoff, epr);
            if (gst != SITS_ERR_UNSUPPORTED) SITS_CHECK(gst);
        }
        for (int j = 0, off = 0; gst == SITS_ERR_UNSUPPORTED && j < epr; j++) {
            int e = r * epr + j, rows = 0;
            for (int s = 0; s < N; s++) rows += m->cnt[(size_t)s * E + e];
            const void *xin = q8 ? (const void *)((uint8_t *)m->xe + (size_t)off * m->H) : row_at(m, m->xe, (size_t)off);
            SITS_CHECK(run_ffn(m, row_at(m, m->ye, (size_t)off), xin, q8 ? m->se + off : NULL, lw->exp_gu[j],
                               lw->exp_gu_scale ? lw->exp_gu_scale[j] : NULL, lw->exp_gu_w4 ? &lw->exp_gu_w4[j] : NULL,
                               lw->exp_down[j], lw->exp_down_scale ? lw->exp_down_scale[j] : NULL,
                               lw->exp_down_w4 ? &lw->exp_down_w4[j] : NULL, rows, d->ie_loc, gu, act,
                               lw->exp_gu_bias ? lw->exp_gu_bias[j] : NULL, lw->exp_down_bias ? lw->exp_down_bias[j] : NULL));
            off += rows;
        }
        if (nr) SITS_CHECK(op->gather_rows(be, m->xr, m->ye, m->perm_d + nr, nr, m->H));      /* back to the recv layout */
        SITS_CHECK(m->comm->ops->alltoallv(m->comm, m->xr, m->rb, m->ro, m->ys, m->sb, m->so));
    }
    /* 5. the shared expert (TP slice, every token), then the weighted combine */
    if (lw->sh_route)
        SITS_CHECK(run_ffn(m, row_at(m, m->ys, (size_t)n * k), h, NULL, lw->sh_gu, lw->sh_gu_scale, NULL, lw->sh_down,
                           lw->sh_down_scale, NULL, n, d->is_loc, gu, act, NULL, NULL));
    return op->moe_combine(be, out, m->ys, pos_d, cw_d, n, kk, m->H);
}
