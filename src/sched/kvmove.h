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
 * the sequences recompute there. Comm stalls end the job through the comm deadlines (never a hang). */
#ifndef SITS_SCHED_KVMOVE_H
#define SITS_SCHED_KVMOVE_H

#include <stdint.h>
#include "sched/generate.h"
#include "sched/plan.h"

typedef struct {
    int failed;      /* some receiving rank rejected a message (or could not take the blocks) */
    int64_t bytes;   /* message bytes received by the receiving group */
} sits_kv_move_result_t;

/* Run plan (cmd SITS_PLAN_KV_MOVE) on this rank for runner r. res_p (may be NULL) is filled from the
 * receiving group's status after a RECV order; it is only meaningful on ctl rank 0 (the leader). */
sits_status_t sits_kv_move_run(sits_runner_t *r, const sits_plan_t *plan, sits_kv_move_result_t *res_p);

#endif
