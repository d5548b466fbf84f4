/* engine.h -- the forward pass of one step on one rank:
 *   embed (vocab-parallel, all-reduce) -> per layer: RMSNorm -> QKV (column-parallel) -> RoPE ->
 *   write K,V into the paged cache -> attention over the cache -> O (row-parallel) -> all-reduce ->
 *   residual + RMSNorm -> gate/up (column-parallel) -> SiLU*mul -> down (row-parallel) -> all-reduce
 *   -> residual; final norm -> lm_head (vocab-parallel) on the rows that need logits.
 *
 * The engine owns the KV storage (per layer K and V of [n_blocks, block_size, nkv_loc, hd]) but
 * not the block allocation: a batch carries each sequence's block table, decided by the leader
 * (src/kv), identical on every rank of the TP group. */
#ifndef SITS_ENGINE_ENGINE_H
#define SITS_ENGINE_ENGINE_H

#include <stdint.h>
#include "backend/backend.h"
#include "comm/comm.h"
#include "model/weights.h"

typedef struct {
    int max_tokens;        /* most tokens in one step (prefill chunk + decodes) */
    int max_seqs;          /* most sequences in one step */
    int max_blocks_per_seq;
    int n_blocks;          /* KV blocks on this rank */
    int block_size;        /* tokens per block */
} sits_engine_params_t;

/* One step's input (host arrays). Token t belongs to sequence seq[t] (an index into the
 * batch's n_seqs block tables) at position pos[t]. Logits are produced for the n_out token
 * indices out_rows[]. */
typedef struct {
    int n_tokens;
    const int32_t *tokens;        /* [n_tokens] */
    const int32_t *pos;           /* [n_tokens] */
    const int32_t *seq;           /* [n_tokens] */
    int n_seqs;
    const int32_t *block_tables;  /* [n_seqs, max_blocks_per_seq] (engine params) */
    int n_out;
    const int32_t *out_rows;      /* [n_out] */
} sits_batch_t;

typedef struct sits_engine sits_engine_t;

/* comm: the TP group (size == weights shard size). Takes no ownership of weights, backend, comm. */
sits_status_t sits_engine_create(const sits_engine_params_t *params, sits_model_weights_t *weights, sits_backend_t *be,
                                 sits_comm_t *tp_comm, sits_engine_t **engine_p);
void sits_engine_destroy(sits_engine_t *e);

/* Runs the step; logits_p receives this rank's logits, host fp32 [n_out, v_count] (engine-owned,
 * valid until the next call). */
sits_status_t sits_engine_forward(sits_engine_t *e, const sits_batch_t *b, const float **logits_p);

/* KV bytes per block on this rank (all layers, K and V). */
size_t sits_engine_kv_block_bytes(const sits_model_config_t *cfg, const sits_shard_dims_t *d, sits_dtype_t kv_dtype,
                                  int block_size);

/* [kv export accessor, added for src/kv/shard.h and bench/bench_kv_codec.c] The paged K and V storage
 * of one layer: backend buffers (host memory on the cpu backend) of [n_blocks, block_size, nkv_loc,
 * head_dim] in be->kv_dtype. SITS_ERR_INVALID for a layer out of range. */
sits_status_t sits_engine_kv_layer(sits_engine_t *e, int layer, void **k_p, void **v_p);

#endif
