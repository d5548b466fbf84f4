/* swap.c -- the KV swap orders on one rank; see swap.h, and plan.h for the plan's layout. */
#include "sched/swap.h"
#include "util/check.h"
#include "util/log.h"

#include <stdlib.h>

/* Blocks of order i: row i of the block tables up to the first negative entry. */
static int order_blocks(const sits_plan_t *pl, int i, const int32_t **ids_p)
{
    const int32_t *row = pl->block_tables + (size_t)i * pl->max_blocks;
    int n = 0;
    while (n < pl->max_blocks && row[n] >= 0) n++;
    *ids_p = row;
    return n;
}

static const char *const kind_name[] = { "?", "out", "in", "drop", "prefetch" };

/* One order on this rank; fills v[0] (failed) and v[1 + tier] (bytes). */
static void run_order(sits_runner_t *r, const sits_plan_t *pl, int i, int64_t *v)
{
    int kind = pl->tokens[i];
    int32_t slot = pl->pos[i];
    const int32_t *ids;
    int nb = order_blocks(pl, i, &ids);
    sits_kv_offload_t *o = r->offload;
    sits_kv_tier_t tier = SITS_KV_TIER_HOST;
    sits_status_t st = SITS_OK;
    if (kind == SITS_KV_SWAP_DROP) {
        if (o) sits_kv_offload_drop(o, slot);
        return;
    }
    if (kind == SITS_KV_SWAP_PREFETCH) {   /* no agreement: a failure shows at the IN */
        st = o ? sits_kv_offload_prefetch(o, slot) : SITS_ERR_UNSUPPORTED;
        SITS_DEBUG(SITS_SUB_KV, "kv swap prefetch of slot %d: %s", (int)slot, sits_status_str(st));
        return;
    }
    if (kind != SITS_KV_SWAP_OUT && kind != SITS_KV_SWAP_IN) {
        SITS_WARN(SITS_SUB_KV, "kv swap: unknown order %d", kind);
        v[0] = 1;
        return;
    }
    size_t bytes = (size_t)nb * sits_engine_kv_bytes_per_block(r->engine);
    void *stage = NULL;
    if (!o) {
        SITS_WARN(SITS_SUB_KV, "kv swap %s of slot %d: this rank has no offload store", kind_name[kind], (int)slot);
        st = SITS_ERR_UNSUPPORTED;
    } else if (nb < 1) {
        st = SITS_ERR_INVALID;
    }
    if (kind == SITS_KV_SWAP_OUT) {
        if (st == SITS_OK) st = sits_kv_offload_staging(o, bytes, &stage);
        if (st == SITS_OK) st = sits_engine_kv_save_blocks(r->engine, nb, ids, stage);
        if (st == SITS_OK) st = sits_kv_offload_put(o, slot, stage, bytes, &tier, NULL);
    } else {
        const void *src = NULL;   /* the prefetched bytes, or the staging buffer */
        if (st == SITS_OK) st = sits_kv_offload_take_buf(o, slot, bytes, &src, &tier);
        else if (o) sits_kv_offload_drop(o, slot);
        if (st == SITS_OK) st = sits_engine_kv_load_blocks(r->engine, nb, ids, src);
    }
    if (st != SITS_OK) {
        v[0] = 1;
        SITS_DEBUG(SITS_SUB_KV, "kv swap %s of slot %d (%d blocks) failed here: %s", kind_name[kind], (int)slot, nb,
                   sits_status_str(st));
        return;
    }
    v[1 + tier] = (int64_t)bytes;
    SITS_DEBUG(SITS_SUB_KV, "kv swap %s of slot %d: %d blocks, %zu bytes, %s tier", kind_name[kind], (int)slot, nb, bytes,
               tier == SITS_KV_TIER_HOST ? "host" : "disk");
}

sits_status_t sits_kv_swap_run(sits_runner_t *r, const sits_plan_t *pl, sits_kv_swap_result_t *res)
{
    int n = pl->n_seqs;
    if (pl->cmd != SITS_PLAN_KV_SWAP || pl->n_tokens != n || pl->n_out != 0) {
        SITS_ERROR(SITS_SUB_SCHED, "kv swap plan: %d orders, %d tokens, %d outputs", n, pl->n_tokens, pl->n_out);
        return SITS_ERR_FORMAT;
    }
    const int W = 1 + SITS_KV_N_TIERS;
    int64_t *v = calloc((size_t)(n > 0 ? n : 1) * W, sizeof *v);
    if (!v) return SITS_ERR_NOMEM;
    /* a shadow of a remote replica stores nothing: it only takes part in the agreement */
    for (int i = 0; r->engine && i < n; i++) run_order(r, pl, i, v + (size_t)i * W);
    sits_status_t st = SITS_OK;
    int agree = 0;   /* PREFETCH orders alone need no agreement (the same plan on every rank) */
    for (int i = 0; i < n; i++) agree |= pl->tokens[i] != SITS_KV_SWAP_PREFETCH;
    if (r->ctl->size > 1 && agree) {
        MPI_Request req;
        if (MPI_Iallreduce(MPI_IN_PLACE, v, n * W, MPI_INT64_T, MPI_SUM, r->ctl->mpi, &req) != MPI_SUCCESS) st = SITS_ERR_MPI;
        else st = sits_comm_mpi_wait(&req, r->ctl->timeout_s, "kv swap agreement", r->ctl->mpi);
    }
    for (int i = 0; st == SITS_OK && i < n; i++) {
        const int64_t *vi = v + (size_t)i * W;
        if (vi[0] > 0 && pl->tokens[i] == SITS_KV_SWAP_OUT && r->offload) sits_kv_offload_drop(r->offload, pl->pos[i]);
        if (res) {
            res[i].failed = vi[0];
            for (int t = 0; t < SITS_KV_N_TIERS; t++) res[i].bytes[t] = vi[1 + t];
        }
    }
    free(v);
    return st;
}
