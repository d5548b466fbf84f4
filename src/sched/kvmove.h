/* kvmove.h -- one rank's part of a KV move (a SITS_PLAN_KV_MOVE plan, plan.h): KV blocks of some
 * sequences go from one group of ranks (a data-parallel replica, or the prefill ranks of
 * --disaggregate) to another, which may have another TP size.
 *
 * The leader sends the group that holds the blocks a SEND order (its block ids) and the group that
 * takes them a RECV order (freshly allocated ids), both naming the world ranks of the two groups,
 * then runs its own part for each (a shadow runner's part is only the status below). On every rank:
 *   send: save the blocks to host (sits_engine_kv_save_blocks), and for each rank of the other
 *         group at the same pipeline stage cut out the KV heads it owns that this rank is the first
 *         holder of (src/kv/move.h: a message with a header and CRC-32 checksums);
 *   both: exchange the messages over r->kv_comm -- MPI_Alltoallv when the two groups are the whole
 *         job, otherwise ordered point-to-point sends and receives (deadlock-free: senders only send,
 *         in rank order, receivers only receive, in rank order); on GPUs the messages are staged in
 *         device memory and moved by grouped ncclSend/ncclRecv (the NCCL comm's alltoallv);
 *   recv: validate every message completely (sizes, ranges, checksums), and only if all of them are
 *         good write the blocks (sits_engine_kv_load_blocks); then the receiving group's ranks
 *         sum (failed ranks, bytes received) to the leader over the group's control comm (r->ctl).
 * A failed move is reported, never loaded: the leader frees the destination's blocks and makes
 * the sequences recompute there. Comm stalls end the job through the comm deadlines (never a hang).
 *
 * [memory plan] A move allocates nothing: every rank that may take part in one holds a staging
 * (sits_kv_move_stage_t, r->kv_stage) made at start-up and counted in its memory plan: buffers of
 * S bytes (--kv-move-buffer) -- on GPUs three: one of device memory for NCCL and two of pinned host
 * memory for the messages and the blocks; on the CPU two: the message buffer from the backend's
 * alloc (counted like device memory) and the blocks buffer from the host. A move of n blocks runs
 * in chunks of c blocks, c the same on every rank of both groups (sits_kv_move_chunk_blocks: what
 * the rank that needs the most bytes per block fits in S), each chunk a complete exchange of
 * messages of c blocks as above; a receiver that rejected a chunk takes part in the rest but
 * writes nothing more, and reports the move failed. */
#ifndef SITS_SCHED_KVMOVE_H
#define SITS_SCHED_KVMOVE_H

#include <stdint.h>
#include "sched/generate.h"
#include "sched/plan.h"

typedef struct {
    int failed;      /* some receiving rank rejected a message (or could not take the blocks) */
    int64_t bytes;   /* message bytes received by the receiving group */
    int chunks;      /* exchanges the move took (its blocks in chunks through the staging) */
} sits_kv_move_result_t;

typedef struct sits_kv_move_stage sits_kv_move_stage_t;

/* [memory plan] The most bytes per moved block (its messages' payload, or its blocks as the engine
 * saves them) that any rank needs in a move from a group of src_tp ranks to one of dst_tp ranks,
 * both pp stages deep, of cfg's KV in dtype dt and blocks of block_size tokens; *headers_p: the
 * message headers of one chunk on the rank with the most peers. */
sits_status_t sits_kv_move_need(const sits_model_config_t *cfg, int block_size, sits_dtype_t dt, int src_tp, int dst_tp,
                                int pp, size_t *per_block_p, size_t *headers_p);
/* Blocks a chunk of that move carries through a staging of stage_bytes: (stage_bytes - headers) /
 * per_block, at least 1 when one block fits, 0 when not even one does. */
int sits_kv_move_chunk_blocks(size_t stage_bytes, size_t per_block, size_t headers);

/* The staging of this rank's moves: buffers of `bytes` each (see the top), on backend be, and the
 * message tables of a kv comm of n_ranks ranks. */
sits_status_t sits_kv_move_stage_create(sits_backend_t *be, size_t bytes, int n_ranks, sits_kv_move_stage_t **stage_p);
void sits_kv_move_stage_destroy(sits_kv_move_stage_t *stage);

/* Run plan (cmd SITS_PLAN_KV_MOVE) on this rank for runner r (a rank with an engine needs r->kv_stage).
 * res_p (may be NULL) is filled from the receiving group's status after a RECV order; it is only
 * meaningful on ctl rank 0 (the leader). */
sits_status_t sits_kv_move_run(sits_runner_t *r, const sits_plan_t *plan, sits_kv_move_result_t *res_p);

#endif
