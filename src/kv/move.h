/* move.h -- the KV move message: one rank's slice of a set of KV blocks (a layer range, a KV-head
 * range) as one self-checking byte buffer, sent from a rank of one group (a data-parallel replica,
 * or the prefill ranks of --disaggregate) to a rank of another, which scatters it into its own
 * blocks. The payload is the blocks exactly as the engine stores them (any KV dtype: fp32, bf16,
 * int8 / fp8 q + per-(token, head) scales), cut down to the head range, so a move is bit-exact and a
 * destination with another TP size (other heads per rank) takes what it owns from each source.
 *
 * Why not the compressed shard of shard.h: that one packs from fp32 and re-quantises int8, which
 * is not bit-exact for an int8 cache; this message keeps the stored bytes and the same CRC-32.
 *
 * Wire format, version 1, little-endian, no padding:
 *   header (SITS_KV_MOVE_HEADER_BYTES = 64):
 *     0  u32 magic "SKVM"   4 u16 version (1)   6 u16 header bytes (64)
 *     8  u8  dtype (0 fp32, 1 bf16, 2 int8, 3 fp8 e4m3)   9 u8 flags (0)   10 u16 reserved (0)
 *    12  i32 l0  16 i32 l1  20 i32 h0  24 i32 h1  28 i32 n_blocks  32 i32 block_size  36 i32 head_dim
 *    40  u64 payload bytes
 *    48  u32 move id (the leader's number of the move)
 *    52  u32 payload crc (CRC-32 of the payload, sits_kv_crc32)
 *    56  u32 reserved (0)
 *    60  u32 header crc (CRC-32 of bytes 0..59)
 *   payload, H = h1 - h0: for each block i < n_blocks, layer l0..l1-1, K then V, the heads [h0, h1)
 *   of every slot of that block:
 *     fp32 / bf16: [block_size][H][head_dim] elements
 *     int8 / fp8 : q i8 | e4m3 [block_size][H][head_dim], then scales f32 [block_size][H]
 *
 * Block buffers (what sits_engine_kv_save_blocks writes and kv_load_blocks reads): for each block,
 * each layer l0..l1-1, K then V, one block unit of that layer's buffer (src/backend/backend.h), of
 * n_kv heads whose first is global KV head head0.
 *
 * Head ownership under TP (src/model/weights.c): with tp <= nkv rank r holds heads
 * [r * nkv/tp, (r+1) * nkv/tp); with tp > nkv it holds head r / (tp/nkv) (replicated). A head is
 * sent by its first holder only (sits_kv_move_sender_of). */
#ifndef SITS_KV_MOVE_H
#define SITS_KV_MOVE_H

#include <stddef.h>
#include <stdint.h>
#include "util/dtype.h"
#include "util/status.h"

#define SITS_KV_MOVE_MAGIC 0x4d564b53u   /* "SKVM" as bytes */
#define SITS_KV_MOVE_VERSION 1
#define SITS_KV_MOVE_HEADER_BYTES 64

typedef struct {
    int l0, l1;           /* layers [l0, l1) */
    int h0, h1;           /* global KV heads [h0, h1) */
    int n_blocks, block_size, head_dim;
    sits_dtype_t dtype;   /* F32, BF16, I8 or F8_E4M3 */
    uint32_t move_id;
} sits_kv_move_desc_t;

/* KV heads [h0, h1) held by rank `rank` of a TP group of size tp, for nkv heads. */
void sits_kv_move_heads(int nkv, int tp, int rank, int *h0_p, int *h1_p);
/* The rank of a TP group of size tp that sends head h (its first holder). */
int sits_kv_move_sender_of(int nkv, int tp, int h);

/* Payload bytes of one (block, layer, K|V) slice of n_heads heads; 0 for an unsupported dtype. */
size_t sits_kv_move_slice_bytes(sits_dtype_t dt, int block_size, int n_heads, int head_dim);
/* Header + payload bytes of a message of desc (0 for an invalid desc). */
size_t sits_kv_move_msg_bytes(const sits_kv_move_desc_t *desc);

/* Cut heads [desc->h0, desc->h1) out of block buffers src (n_kv heads per unit starting at global
 * head head0; desc->n_blocks blocks of layers desc->l0..l1) into a message in out[cap].
 * SITS_ERR_INVALID when the heads are not all in src or cap is too small. */
sits_status_t sits_kv_move_pack(const sits_kv_move_desc_t *desc, const void *src, int n_kv, int head0, void *out,
                                size_t cap, size_t *len_p);
/* Validate msg[len] completely (magic, version, header crc, sizes, payload crc) and that its header
 * equals `expect` (every field), then scatter it into block buffers dst (n_kv heads per unit from
 * global head head0). Nothing is written unless it is valid: SITS_ERR_FORMAT with the reason logged. */
sits_status_t sits_kv_move_unpack(const void *msg, size_t len, const sits_kv_move_desc_t *expect, void *dst, int n_kv,
                                  int head0);

#endif
