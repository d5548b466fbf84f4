/* kvmove.c -- one rank's part of a KV move; see kvmove.h. */
#include "sched/kvmove.h"
#include "kv/move.h"
#include "util/check.h"
#include "util/log.h"

#include <stdlib.h>
#include <string.h>

/* [memory plan] The staging of this rank's moves (kvmove.h): made at start-up, reused by every move. */
struct sits_kv_move_stage {
    sits_backend_t *be;
    size_t bytes;                 /* each buffer's size */
    int n_ranks;                  /* of the kv comm */
    void *dev;                    /* device backends: [bytes] device memory for NCCL; NULL on the cpu */
    unsigned char *msg;           /* [bytes] a chunk's messages (the cpu: from the backend's alloc) */
    unsigned char *blocks;        /* [bytes] a chunk's blocks as the engine saves / loads them */
    int msg_pinned, blocks_pinned;/* from be->ops->host_alloc */
    unsigned char empty[16];      /* the buffer of the direction a rank does not use (no bytes) */
    /* per world rank p of the kv comm: bytes to send / receive and their offsets in msg; desc[p]
     * the message's contents */
    size_t *sb, *so, *rb, *ro;
    sits_kv_move_desc_t *desc;
};

static sits_status_t host_buf(sits_backend_t *be, size_t n, unsigned char **p_p, int *pinned_p)
{
    void *p = NULL;
    *pinned_p = 0;
    if (be->device >= 0 && be->ops->host_alloc && be->ops->host_alloc(be, n, &p) == SITS_OK) *pinned_p = 1;
    else if (!(p = malloc(n))) return SITS_ERR_NOMEM;
    *p_p = p;
    return SITS_OK;
}

static void host_buf_free(sits_backend_t *be, void *p, int pinned)
{
    if (pinned) be->ops->host_free(be, p);
    else free(p);
}

sits_status_t sits_kv_move_stage_create(sits_backend_t *be, size_t bytes, int n_ranks, sits_kv_move_stage_t **stage_p)
{
    sits_status_t st = SITS_ERR_NOMEM;
    if (bytes < 1 || n_ranks < 1) return SITS_ERR_INVALID;
    sits_kv_move_stage_t *s = calloc(1, sizeof *s);
    if (!s) return SITS_ERR_NOMEM;
    s->be = be;
    s->bytes = bytes;
    s->n_ranks = n_ranks;
    s->sb = calloc((size_t)n_ranks * 4, sizeof(size_t));
    s->desc = calloc((size_t)n_ranks, sizeof *s->desc);
    if (!s->sb || !s->desc) goto err;
    s->so = s->sb + n_ranks;
    s->rb = s->so + n_ranks;
    s->ro = s->rb + n_ranks;
    if (be->device >= 0) {
        SITS_CHECK_GOTO(be->ops->alloc(be, bytes, &s->dev), st, err);
        SITS_CHECK_GOTO(host_buf(be, bytes, &s->msg, &s->msg_pinned), st, err);
    } else {
        /* the cpu's "device" memory is the message buffer itself: the comm sends from it */
        SITS_CHECK_GOTO(be->ops->alloc(be, bytes, (void **)&s->msg), st, err);
    }
    SITS_CHECK_GOTO(host_buf(be, bytes, &s->blocks, &s->blocks_pinned), st, err);
    *stage_p = s;
    return SITS_OK;
err:
    SITS_ERROR(SITS_SUB_KV, "kv move staging: cannot allocate %d x %zu bytes (%s)", be->device >= 0 ? 3 : 2, bytes,
               sits_status_str(st));
    sits_kv_move_stage_destroy(s);
    return st;
}

void sits_kv_move_stage_destroy(sits_kv_move_stage_t *s)
{
    if (!s) return;
    if (s->blocks) host_buf_free(s->be, s->blocks, s->blocks_pinned);
    if (s->dev) {
        s->be->ops->free(s->be, s->dev);
        if (s->msg) host_buf_free(s->be, s->msg, s->msg_pinned);
    } else if (s->msg) {
        s->be->ops->free(s->be, s->msg);
    }
    free(s->desc);
    free(s->sb);
    free(s);
}

/* Heads [h0, h1) that rank `me` of group A (tp size ga) exchanges with rank j of group B (tp gb):
 * the heads both hold, counted only when the sender (A when sending, else B) is their first holder.
 * Returns 0 when there are none. */
static int overlap(int nkv, int ga, int me, int gb, int j, int sending, int *h0_p, int *h1_p)
{
    int a0, a1, b0, b1;
    sits_kv_move_heads(nkv, ga, me, &a0, &a1);
    sits_kv_move_heads(nkv, gb, j, &b0, &b1);
    int h0 = a0 > b0 ? a0 : b0, h1 = a1 < b1 ? a1 : b1;
    if (h0 >= h1) return 0;
    /* a replicated head (tp > nkv) is sent by its first holder only; a sender with tp <= nkv is
     * always the first (and only) holder of its heads */
    if (sending ? sits_kv_move_sender_of(nkv, ga, h0) != me : sits_kv_move_sender_of(nkv, gb, h0) != j) return 0;
    *h0_p = h0;
    *h1_p = h1;
    return 1;
}

sits_status_t sits_kv_move_need(const sits_model_config_t *cfg, int bs, sits_dtype_t dt, int src_tp, int dst_tp, int pp,
                                size_t *per_block_p, size_t *headers_p)
{
    int nkv = cfg->n_kv_heads, hd = cfg->head_dim;
    if (src_tp < 1 || dst_tp < 1 || pp < 1 || bs < 1) return SITS_ERR_INVALID;
    size_t worst = 0;
    for (int stage = 0; stage < pp; stage++)
        for (int side = 0; side < 2; side++) {   /* 0: the senders (src_tp), 1: the receivers */
            int ga = side ? dst_tp : src_tp, gb = side ? src_tp : dst_tp;
            for (int me = 0; me < ga; me++) {
                sits_shard_t sh = { me, ga, stage, pp, 0 };   /* [moe] the KV layout does not depend on --ep */
                sits_shard_dims_t d;
                SITS_CHECK(sits_shard_dims(cfg, &sh, &d));
                size_t stored = sits_engine_kv_block_bytes(cfg, &d, dt, bs), msg = 0;
                size_t units = (size_t)(d.layer1 - d.layer0) * 2;   /* (layer, K|V) slices a block */
                for (int j = 0; j < gb; j++) {
                    int h0, h1;
                    if (overlap(nkv, ga, me, gb, j, !side, &h0, &h1)) msg += units * sits_kv_move_slice_bytes(dt, bs, h1 - h0, hd);
                }
                if (stored > worst) worst = stored;
                if (msg > worst) worst = msg;
            }
        }
    *per_block_p = worst;
    *headers_p = (size_t)SITS_KV_MOVE_HEADER_BYTES * (size_t)(src_tp > dst_tp ? src_tp : dst_tp);
    return SITS_OK;
}

int sits_kv_move_chunk_blocks(size_t stage_bytes, size_t per_block, size_t headers)
{
    if (per_block == 0 || stage_bytes < headers + per_block) return 0;
    size_t c = (stage_bytes - headers) / per_block;
    return c > (1u << 24) ? 1 << 24 : (int)c;
}

/* Move one chunk's prepared messages (s->sb .. ro; totals ts, tr) over the kv comm (see kvmove.h
 * for the three ways). */
static sits_status_t transfer(sits_runner_t *r, const sits_plan_move_t *m, size_t ts, size_t tr)
{
    sits_comm_t *c = r->kv_comm;
    sits_kv_move_stage_t *s = r->kv_stage;
    int R = c->size, sending = m->role == SITS_KV_MOVE_SEND;
    if (s->dev) {
        /* NCCL: through the device staging; grouped ncclSend/ncclRecv with this rank's peers only */
        const sits_backend_ops_t *op = r->be->ops;
        if (ts) SITS_CHECK(op->upload(r->be, s->dev, s->msg, ts));
        SITS_CHECK(c->ops->alltoallv(c, s->dev, s->sb, s->so, s->dev, s->rb, s->ro));
        SITS_CHECK(op->sync(r->be));
        if (tr) SITS_CHECK(op->download(r->be, s->msg, s->dev, tr));
        return SITS_OK;
    }
    const unsigned char *send = sending ? s->msg : s->empty;
    unsigned char *recv = sending ? s->empty : s->msg;
    if (m->src_tp * m->src_pp + m->dst_tp * m->dst_pp == R)
        return c->ops->alltoallv(c, send, s->sb, s->so, recv, s->rb, s->ro);   /* MPI_Ialltoallv over the job */
    for (int p = 0; p < R; p++) {
        if (s->sb[p]) SITS_CHECK(c->ops->send(c, send + s->so[p], s->sb[p], p));
        if (s->rb[p]) SITS_CHECK(c->ops->recv(c, recv + s->ro[p], s->rb[p], p));
    }
    return SITS_OK;
}

/* This rank's exchange, chunk by chunk; *failed_p: a message was rejected or the blocks could not be
 * written; *bytes_p: message bytes received; *chunks_p: the chunks. */
static sits_status_t exchange(sits_runner_t *r, const sits_plan_move_t *m, int *failed_p, int64_t *bytes_p, int *chunks_p)
{
    sits_comm_t *c = r->kv_comm;
    sits_kv_move_stage_t *s = r->kv_stage;
    const sits_shard_dims_t *d = &r->w->dims;
    int nkv = r->cfg.n_kv_heads, R = c->size, sending = m->role == SITS_KV_MOVE_SEND;
    int stage = r->pp ? r->pp->rank : 0, me = r->tp->rank;
    int ga = sending ? m->src_tp : m->dst_tp, gb = sending ? m->dst_tp : m->src_tp;
    const int32_t *peers = (sending ? m->dst_ranks : m->src_ranks) + (size_t)stage * gb;
    if (m->src_pp != m->dst_pp || ga != r->tp->size || stage >= m->src_pp) {
        SITS_ERROR(SITS_SUB_KV, "kv move %u: the order does not fit this rank (tp %d of %d, stage %d)", m->move_id, me,
                   r->tp->size, stage);
        c->ops->abort(c, 3, "kv move order does not match the rank layout");
    }
    /* every rank of both groups computes the same chunk from the same figures */
    size_t bpb = sits_engine_kv_bytes_per_block(r->engine), per_block = 0, headers = 0;
    int chunk = 0;
    if (sits_kv_move_need(&r->cfg, r->ep.block_size, r->be->kv_dtype, m->src_tp, m->dst_tp, m->src_pp, &per_block,
                          &headers) == SITS_OK && s && s->n_ranks == R)
        chunk = sits_kv_move_chunk_blocks(s->bytes, per_block, headers);
    if (chunk < 1 || (size_t)chunk * bpb > s->bytes) {
        SITS_ERROR(SITS_SUB_KV, "kv move %u: no staging for one block (%zu bytes a block + %zu of headers, staging %zu)",
                   m->move_id, per_block, headers, s ? s->bytes : 0);
        c->ops->abort(c, 3, "kv move staging too small (start-up sizes it for the layout)");
    }
    int failed = 0, pack_failed = 0, n_chunks = 0;
    int64_t bytes = 0;
    for (int b0 = 0; b0 < m->n_blocks; b0 += chunk, n_chunks++) {
        int k = m->n_blocks - b0 < chunk ? m->n_blocks - b0 : chunk;
        size_t ts = 0, tr = 0;
        memset(s->sb, 0, sizeof(size_t) * 4 * (size_t)R);
        for (int j = 0; j < gb; j++) {
            int p = peers[j], h0, h1;
            if (p < 0 || p >= R || !overlap(nkv, ga, me, gb, j, sending, &h0, &h1)) continue;
            sits_kv_move_desc_t de = { .l0 = d->layer0, .l1 = d->layer1, .h0 = h0, .h1 = h1, .n_blocks = k,
                                       .block_size = r->ep.block_size, .head_dim = r->cfg.head_dim,
                                       .dtype = r->be->kv_dtype, .move_id = m->move_id };
            s->desc[p] = de;
            size_t n = sits_kv_move_msg_bytes(&de);
            if (sending) { s->so[p] = ts; s->sb[p] = n; ts += n; }
            else { s->ro[p] = tr; s->rb[p] = n; tr += n; }
        }
        if (ts > s->bytes || tr > s->bytes) {   /* sits_kv_move_need bounds both: a bug */
            SITS_ERROR(SITS_SUB_KV, "kv move %u: a chunk of %d blocks needs %zu bytes, the staging holds %zu", m->move_id, k,
                       ts > tr ? ts : tr, s->bytes);
            c->ops->abort(c, 3, "kv move chunk larger than its staging");
        }
        if (sending) {
            /* a failure here still sends (zeroed) messages: the receivers reject them, nobody waits forever */
            memset(s->msg, 0, ts);
            sits_status_t ls = pack_failed ? SITS_ERR_INVALID : sits_engine_kv_save_blocks(r->engine, k, m->blocks + b0, s->blocks);
            for (int p = 0; p < R && ls == SITS_OK; p++) {
                if (!s->sb[p]) continue;
                size_t len = 0;
                ls = sits_kv_move_pack(&s->desc[p], s->blocks, d->nkv_loc, d->kv_head0, s->msg + s->so[p], s->sb[p], &len);
                if (ls == SITS_OK && (m->flags & SITS_KV_MOVE_F_CORRUPT))
                    s->msg[s->so[p] + SITS_KV_MOVE_HEADER_BYTES] ^= 0x5a;   /* test knob: the receiver must reject it */
            }
            if (ls != SITS_OK) {
                if (!pack_failed)
                    SITS_ERROR(SITS_SUB_KV, "kv move %u: packing failed (%s); sending empty messages", m->move_id,
                               sits_status_str(ls));
                pack_failed = 1;
                memset(s->msg, 0, ts);
            }
        }
        SITS_CHECK(transfer(r, m, ts, tr));
        if (!sending) {
            /* after a rejected chunk the rest still arrive (the senders do not know), unread */
            if (!failed) {
                memset(s->blocks, 0, bpb * (size_t)k);
                for (int p = 0; p < R && !failed; p++)
                    if (s->rb[p] && sits_kv_move_unpack(s->msg + s->ro[p], s->rb[p], &s->desc[p], s->blocks, d->nkv_loc,
                                                        d->kv_head0) != SITS_OK)
                        failed = 1;
                if (!failed && sits_engine_kv_load_blocks(r->engine, k, m->blocks + b0, s->blocks) != SITS_OK) failed = 1;
            }
            bytes += (int64_t)tr;
        }
    }
    SITS_DEBUG(SITS_SUB_KV, "kv move %u: %d blocks in %d chunk%s of up to %d", m->move_id, m->n_blocks, n_chunks,
               n_chunks == 1 ? "" : "s", chunk);
    *failed_p = failed;
    *bytes_p = bytes;
    *chunks_p = n_chunks;
    return SITS_OK;
}

sits_status_t sits_kv_move_run(sits_runner_t *r, const sits_plan_t *pl, sits_kv_move_result_t *res_p)
{
    const sits_plan_move_t *m = &pl->move;
    int64_t v[3] = { 0, 0, 0 };   /* failed ranks, bytes received, chunks (counted by one rank) */
    if (r->engine) {
        if (!r->kv_comm || !r->kv_stage) {
            SITS_ERROR(SITS_SUB_KV, "kv move order on a rank without a kv communicator or staging");
            return SITS_ERR_INTERNAL;
        }
        int failed = 0, chunks = 0;
        SITS_CHECK(exchange(r, m, &failed, &v[1], &chunks));
        v[0] = failed;
        if (r->tp->rank == 0 && (!r->pp || r->pp->rank == 0)) v[2] = chunks;
        if (failed) SITS_WARN(SITS_SUB_KV, "kv move %u: rejected here, the blocks are not written", m->move_id);
    }
    if (m->role == SITS_KV_MOVE_RECV && r->ctl->size > 1) {
        MPI_Request req;
        SITS_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, v, 3, MPI_INT64_T, MPI_SUM, r->ctl->mpi, &req));
        SITS_CHECK(sits_comm_mpi_wait(&req, r->ctl->timeout_s, "kv move status", r->ctl->mpi));
    }
    if (res_p) {
        res_p->failed = v[0] > 0;
        res_p->bytes = v[1];
        res_p->chunks = (int)v[2];
    }
    return SITS_OK;
}
