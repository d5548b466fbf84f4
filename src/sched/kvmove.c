/* kvmove.c -- one rank's part of a KV move; see kvmove.h. */
#include "sched/kvmove.h"
#include "kv/move.h"
#include "util/check.h"
#include "util/log.h"

#include <stdlib.h>
#include <string.h>

/* The messages of this rank: per world rank p of the kv comm, bytes to send / receive and their
 * offsets in one buffer; desc[p] the message's contents. */
typedef struct {
    size_t *sb, *so, *rb, *ro;
    sits_kv_move_desc_t *desc;
    size_t total_send, total_recv;
} plan_bufs_t;

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

/* Move the prepared messages over the kv comm (see kvmove.h for the three ways). */
static sits_status_t transfer(sits_runner_t *r, const sits_plan_move_t *m, const plan_bufs_t *b, const void *send,
                              void *recv)
{
    sits_comm_t *c = r->kv_comm;
    int R = c->size;
    if (sits_backend_cuda_stream(r->be)) {
        /* NCCL: device buffers; grouped ncclSend/ncclRecv with this rank's peers only */
        const sits_backend_ops_t *op = r->be->ops;
        void *ds = NULL, *dr = NULL;
        sits_status_t st = op->alloc(r->be, b->total_send ? b->total_send : 16, &ds);
        if (st == SITS_OK) st = op->alloc(r->be, b->total_recv ? b->total_recv : 16, &dr);
        if (st == SITS_OK && b->total_send) st = op->upload(r->be, ds, send, b->total_send);
        if (st == SITS_OK) st = c->ops->alltoallv(c, ds, b->sb, b->so, dr, b->rb, b->ro);
        if (st == SITS_OK) st = op->sync(r->be);
        if (st == SITS_OK && b->total_recv) st = op->download(r->be, recv, dr, b->total_recv);
        if (dr) op->free(r->be, dr);
        if (ds) op->free(r->be, ds);
        return st;
    }
    if (m->src_tp * m->src_pp + m->dst_tp * m->dst_pp == R)
        return c->ops->alltoallv(c, send, b->sb, b->so, recv, b->rb, b->ro);   /* MPI_Ialltoallv over the job */
    for (int p = 0; p < R; p++) {
        if (b->sb[p]) SITS_CHECK(c->ops->send(c, (const unsigned char *)send + b->so[p], b->sb[p], p));
        if (b->rb[p]) SITS_CHECK(c->ops->recv(c, (unsigned char *)recv + b->ro[p], b->rb[p], p));
    }
    return SITS_OK;
}

/* This rank's exchange; *failed_p: a message was rejected or the blocks could not be written. */
static sits_status_t exchange(sits_runner_t *r, const sits_plan_move_t *m, int *failed_p, int64_t *bytes_p)
{
    sits_status_t st = SITS_OK;
    sits_comm_t *c = r->kv_comm;
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
    size_t bpb = sits_engine_kv_bytes_per_block(r->engine);
    plan_bufs_t b = { 0 };
    unsigned char *blocks = NULL, *sendbuf = NULL, *recvbuf = NULL;
    b.sb = calloc((size_t)R * 4, sizeof(size_t));
    b.desc = calloc((size_t)R, sizeof *b.desc);
    blocks = malloc(bpb * (size_t)m->n_blocks);
    if (!b.sb || !b.desc || !blocks) c->ops->abort(c, 2, "kv move: out of host memory");
    b.so = b.sb + R;
    b.rb = b.so + R;
    b.ro = b.rb + R;
    for (int j = 0; j < gb; j++) {
        int p = peers[j], h0, h1;
        if (p < 0 || p >= R || !overlap(nkv, ga, me, gb, j, sending, &h0, &h1)) continue;
        sits_kv_move_desc_t de = { .l0 = d->layer0, .l1 = d->layer1, .h0 = h0, .h1 = h1, .n_blocks = m->n_blocks,
                                   .block_size = r->ep.block_size, .head_dim = r->cfg.head_dim, .dtype = r->be->kv_dtype,
                                   .move_id = m->move_id };
        b.desc[p] = de;
        size_t n = sits_kv_move_msg_bytes(&de);
        if (sending) { b.so[p] = b.total_send; b.sb[p] = n; b.total_send += n; }
        else { b.ro[p] = b.total_recv; b.rb[p] = n; b.total_recv += n; }
    }
    sendbuf = malloc(b.total_send ? b.total_send : 1);
    recvbuf = malloc(b.total_recv ? b.total_recv : 1);
    if (!sendbuf || !recvbuf) c->ops->abort(c, 2, "kv move: out of host memory");
    if (sending) {
        /* a failure here still sends (zeroed) messages: the receivers reject them, nobody waits forever */
        memset(sendbuf, 0, b.total_send ? b.total_send : 1);
        sits_status_t ls = sits_engine_kv_save_blocks(r->engine, m->n_blocks, m->blocks, blocks);
        for (int p = 0; p < R && ls == SITS_OK; p++) {
            if (!b.sb[p]) continue;
            size_t len = 0;
            ls = sits_kv_move_pack(&b.desc[p], blocks, d->nkv_loc, d->kv_head0, sendbuf + b.so[p], b.sb[p], &len);
            if (ls == SITS_OK && (m->flags & SITS_KV_MOVE_F_CORRUPT))
                sendbuf[b.so[p] + SITS_KV_MOVE_HEADER_BYTES] ^= 0x5a;   /* test knob: the receiver must reject it */
        }
        if (ls != SITS_OK) {
            SITS_ERROR(SITS_SUB_KV, "kv move %u: packing failed (%s); sending empty messages", m->move_id, sits_status_str(ls));
            memset(sendbuf, 0, b.total_send ? b.total_send : 1);
        }
    }
    st = transfer(r, m, &b, sendbuf, recvbuf);
    if (st != SITS_OK) goto out;
    if (!sending) {
        int failed = 0;
        memset(blocks, 0, bpb * (size_t)m->n_blocks);
        for (int p = 0; p < R && !failed; p++)
            if (b.rb[p] && sits_kv_move_unpack(recvbuf + b.ro[p], b.rb[p], &b.desc[p], blocks, d->nkv_loc, d->kv_head0) != SITS_OK)
                failed = 1;
        if (!failed && sits_engine_kv_load_blocks(r->engine, m->n_blocks, m->blocks, blocks) != SITS_OK) failed = 1;
        *failed_p = failed;
        *bytes_p = (int64_t)b.total_recv;
    }
out:
    free(recvbuf);
    free(sendbuf);
    free(blocks);
    free(b.desc);
    free(b.sb);
    return st;
}

sits_status_t sits_kv_move_run(sits_runner_t *r, const sits_plan_t *pl, sits_kv_move_result_t *res_p)
{
    const sits_plan_move_t *m = &pl->move;
    int64_t v[2] = { 0, 0 };   /* failed ranks, bytes received */
    if (r->engine) {
        if (!r->kv_comm) {
            SITS_ERROR(SITS_SUB_KV, "kv move order on a rank without a kv communicator");
            return SITS_ERR_INTERNAL;
        }
        int failed = 0;
        SITS_CHECK(exchange(r, m, &failed, &v[1]));
        v[0] = failed;
        if (failed) SITS_WARN(SITS_SUB_KV, "kv move %u: rejected here, the blocks are not written", m->move_id);
    }
    if (m->role == SITS_KV_MOVE_RECV && r->ctl->size > 1) {
        MPI_Request req;
        SITS_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, v, 2, MPI_INT64_T, MPI_SUM, r->ctl->mpi, &req));
        SITS_CHECK(sits_comm_mpi_wait(&req, r->ctl->timeout_s, "kv move status", r->ctl->mpi));
    }
    if (res_p) {
        res_p->failed = v[0] > 0;
        res_p->bytes = v[1];
    }
    return SITS_OK;
}
