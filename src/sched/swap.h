/* swap.h -- one rank's part of a KV swap (a SITS_PLAN_KV_SWAP plan, plan.h): the leader's orders
 * to move swapped sequences' KV blocks between the device and this rank's offload tiers
 * (src/kv/offload.h, r->offload), named by slot ids the leader hands out.
 *
 * Every rank of the replica (each TP rank its KV heads, each pipeline stage its layers) runs the
 * orders in plan order:
 *   OUT  save the order's blocks to host (sits_engine_kv_save_blocks, into the store's staging
 *        buffer) and put them in the tiers under the slot;
 *   IN   take the slot from the tiers (validated) and load it into the order's blocks, which the
 *        leader has just allocated (sits_engine_kv_load_blocks); the slot is released either way;
 *        a prefetched slot's bytes are already in host memory (sits_kv_offload_take_buf);
 *   DROP release the slot (its request finished or was cancelled while swapped out);
 *   PREFETCH  start taking the slot's bytes from the tiers on the store's background thread
 *        (sits_kv_offload_prefetch; no blocks), for a later IN: the leader sends it for a request it
 *        will restore next while other sequences run, so the tier work overlaps their steps. It
 *        cannot fail visibly (a tier failure is reported by the IN); a plan of PREFETCH orders only
 *        has no agreement.
 * A local failure (tier full, disk error, checksum, no store) is never an error of the call: the
 * ranks then sum (failed ranks, bytes per tier) of every order over the replica's control comm
 * (r->ctl, the leader and any front-end shadow included), so that all agree; an OUT that failed
 * anywhere is dropped everywhere, and the leader preempts that sequence by recompute (an IN that
 * failed: the sequence's fresh blocks are freed and it recomputes). Only a comm failure is an
 * error (the job ends through the comm deadlines, never a hang). */
#ifndef SITS_SCHED_SWAP_H
#define SITS_SCHED_SWAP_H

#include <stdint.h>
#include "kv/offload.h"
#include "sched/generate.h"
#include "sched/plan.h"

enum { SITS_KV_SWAP_OUT = 1, SITS_KV_SWAP_IN = 2, SITS_KV_SWAP_DROP = 3, SITS_KV_SWAP_PREFETCH = 4 };

/* Per order, summed over the ranks of ctl. */
typedef struct {
    int64_t failed;                       /* ranks where it failed */
    int64_t bytes[SITS_KV_N_TIERS];       /* raw bytes moved to / from each tier */
} sits_kv_swap_result_t;

/* Run plan (cmd SITS_PLAN_KV_SWAP) on this rank; res (may be NULL: followers) gets one result per
 * order, [plan->n_seqs]. */
sits_status_t sits_kv_swap_run(sits_runner_t *r, const sits_plan_t *plan, sits_kv_swap_result_t *res);

#endif
