/* plan.h -- the step plan: what every rank of a TP group runs in one step, serialised by the
 * leader and broadcast over the group's control communicator.
 *
 * Wire format (version 3, little-endian, 4-byte aligned, no padding between arrays):
 *   u32 magic "SITP" | u16 version | u16 cmd | u64 step | i32 n_tokens | i32 n_seqs |
 *   i32 max_blocks | i32 n_out | u32 body_bytes | u32 checksum (FNV-1a of the body)
 *   body: tokens[n_tokens] pos[n_tokens] seq[n_tokens]          (i32)
 *         block_tables[n_seqs * max_blocks]                      (i32)
 *         out_rows[n_out]                                        (i32)
 *         sample[n_out] { f32 temperature, i32 top_k, f32 top_p, u32 pad, u64 seed, u64 step,
 *                         i32 logprobs, i32 top_logprobs, i32 lp_target, u32 pad,
 *                         f32 presence, f32 frequency, f32 repetition, f32 min_p, i32 n_bias, i32 n_hist }  (72 bytes)
 *         (n_out > 0 only:) u32 total_bias | u32 total_hist | bias {i32 id, f32 bias}[total_bias]
 *         | hist {i32 id, i32 out_count, i32 in_prompt}[total_hist]        (rows' lists in row order)
 *         [structured output] optional trailer after the lists, present when some output is constrained:
 *         i32 n_masks | i32 words | rows[n_masks] (output indices) | u32 masks[n_masks * words] | u32 sum
 *         (body_bytes counts it; the header's checksum covers the body before it; sum is FNV-1a over the
 *         trailer's 64-bit words)
 *         [structured output, masks after the forward] with SITS_PLAN_F_MASKS_FOLLOW in cmd's flag bits the
 *         trailer holds no masks (i32 n_masks | i32 words | rows[n_masks] | u32 sum): the leader makes them
 *         while the device runs the step's forward pass and broadcasts them then as their own message,
 *         u32 masks[n_masks * words] | u32 sum (sits_plan_masks_write / _parse; worker.c)
 * A parsed plan points into the buffer it was parsed from. Parsing refuses anything
 * inconsistent: bad magic/version/cmd, negative or oversized counts, a body whose size does not
 * match the counts, a bad checksum, a truncated buffer. */
#ifndef SITS_SCHED_PLAN_H
#define SITS_SCHED_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include "engine/sample.h"
#include "util/status.h"

#define SITS_PLAN_MAGIC 0x50544953u  /* "SITP" little-endian */
#define SITS_PLAN_VERSION 4   /* 2: logprob and sampling-control fields, bias / history lists; 3: + the mask trailer;
                                 4: + masks that follow the plan (cmd's flag bits) */
#define SITS_PLAN_F_MASKS_FOLLOW 0x8000u   /* cmd's flag bits: the step's masks come after the plan */
#define SITS_PLAN_HEADER_BYTES 40
#define SITS_PLAN_MAX_ITEMS (1 << 24)

typedef enum {
    SITS_PLAN_STEP = 1,   /* run the forward pass and sample */
    SITS_PLAN_STOP = 2,   /* leave the worker loop */
    SITS_PLAN_KV_MOVE = 3, /* [kv move] send or receive KV blocks (plan.move; see "KV move orders" below) */
    SITS_PLAN_KV_SWAP = 4, /* [kv offload] swap KV blocks out to / in from the offload tiers (see below) */
    SITS_PLAN_KV_COPY = 5  /* [n > 1] copy KV blocks before they are written (copy on write, see below) */
} sits_plan_cmd_t;

/* [kv offload] KV swap orders (src/sched/swap.h). A KV_SWAP plan has the step plan's layout with
 * n_tokens = n_seqs = the number of orders and n_out = 0; order i is
 *   tokens[i] = SITS_KV_SWAP_OUT | IN | DROP | PREFETCH, pos[i] = its slot id, seq[i] = i,
 *   block_tables row i = its block ids, then -1 to the end of the row (max_blocks); DROP and
 *   PREFETCH orders have no blocks (a row of -1). */

/* [n > 1] KV copies (copy on write of blocks that sequences share). A KV_COPY plan has the step
 * plan's layout with n_tokens = n_seqs = the number of copies, max_blocks = n_out = 0; copy i is
 *   tokens[i] = the source block, pos[i] = the destination block, seq[i] = i.
 * Every rank copies its layers and KV heads of each (sits_engine_kv_copy_blocks), in plan order,
 * before the next plan runs. */

/* [kv move] KV move orders (src/sched/kvmove.h). A KV_MOVE plan has no tokens, sequences or outputs
 * (those counts are 0); its body is instead, as i32:
 *   role | n_blocks | src_tp | src_pp | dst_tp | dst_pp | move_id | flags |
 *   blocks[n_blocks] | src_ranks[src_pp * src_tp] | dst_ranks[dst_pp * dst_tp]
 * blocks: this group's block ids (the source's when sending, the destination's when receiving),
 * ranks: world ranks of the two groups, [stage][tp rank]. */
enum { SITS_KV_MOVE_SEND = 1, SITS_KV_MOVE_RECV = 2 };
enum { SITS_KV_MOVE_F_CORRUPT = 1 };   /* test knob: the sender flips a payload byte after packing */
typedef struct {
    int role, n_blocks, src_tp, src_pp, dst_tp, dst_pp, flags;
    uint32_t move_id;
    const int32_t *blocks, *src_ranks, *dst_ranks;
} sits_plan_move_t;

typedef struct {
    sits_plan_cmd_t cmd;
    uint64_t step;
    int n_tokens, n_seqs, max_blocks, n_out;
    const int32_t *tokens, *pos, *seq;  /* [n_tokens] */
    const int32_t *block_tables;        /* [n_seqs * max_blocks] */
    const int32_t *out_rows;            /* [n_out] */
    const sits_sample_params_t *sample; /* [n_out]; parse: copied into the plan's own storage */
    sits_sample_masks_t masks;          /* [structured output] n == 0: none; parse: points into the buffer */
    int masks_follow;                   /* [structured output] 1: masks.masks is NULL in the plan; the n masks
                                         * arrive after it (worker.c), rows and words are here */
    sits_plan_move_t move;              /* [kv move] cmd SITS_PLAN_KV_MOVE only */
} sits_plan_t;

/* Bytes of the serialised plan. */
size_t sits_plan_size(const sits_plan_t *plan);
/* Serialise into buf (at least sits_plan_size bytes). */
sits_status_t sits_plan_write(const sits_plan_t *plan, void *buf, size_t cap, size_t *len_p);
/* Parse buf[len]; the plan's arrays point into buf, sample params into sample_store[n_out]
 * (caller-provided, at least max_out entries). */
sits_status_t sits_plan_parse(const void *buf, size_t len, sits_sample_params_t *sample_store, int max_out,
                              sits_plan_t *plan_p);

/* [structured output] the masks message of a plan with masks_follow: bytes, writing (masks[n * words]
 * of the plan's masks.n rows), and parsing into plan->masks.masks (points into buf; a bad size or
 * checksum is refused). */
size_t sits_plan_masks_size(const sits_plan_t *p);
void sits_plan_masks_write(const sits_plan_t *p, const uint32_t *masks, void *buf);
sits_status_t sits_plan_masks_parse(sits_plan_t *p, const void *buf, size_t len);

#endif
