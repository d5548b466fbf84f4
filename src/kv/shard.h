/* shard.h -- the compressed KV shard: the K and V of one sequence for a layer range [l0, l1), a
 * KV-head range [h0, h1) and a token range [t0, t1), as one self-checking byte buffer. It is what
 * moves between ranks (migration, disaggregated prefill -> decode, resharding) and what the offload
 * tiers store. Host-side reference implementation (fp32 in and out).
 *
 * Wire format, version 1, little-endian, no padding:
 *   header (SITS_KV_SHARD_HEADER_BYTES = 96):
 *     0  u32 magic "SKVS"          4  u16 version (1)        6  u16 header bytes (96)
 *     8  u8  dtype (sits_kv_shard_dtype_t)   9 u8 codec (sits_kv_codec_t)   10 u16 flags (0)
 *    12  i32 l0  16 i32 l1  20 i32 h0  24 i32 h1  28 i32 t0  32 i32 t1  36 i32 head_dim
 *    40  u64 raw bytes (payload before the codec)
 *    48  u64 stored bytes (what follows the header)
 *    56  u32 frame bytes (raw bytes per LZ4 frame; 0 for codec none)
 *    60  u32 frames (0 for codec none)
 *    64  u32 payload crc (CRC-32 of the stored bytes)
 *    68  24 reserved bytes, zero
 *    92  u32 header crc (CRC-32 of bytes 0..91)
 *   stored bytes:
 *     codec none: the raw payload
 *     codec lz4 : u32 compressed size of each frame [frames], then the frames back to back; frame i
 *                 is an independent LZ4 frame (LZ4F, 64 KiB independent blocks, content size set) of
 *                 raw bytes [i * frame bytes, min(raw, (i + 1) * frame bytes)) -- independent frames
 *                 so several host threads can (de)compress one shard.
 *   raw payload, with L = l1-l0, T = t1-t0, H = h1-h0, D = head_dim:
 *     int8: scales f32 [L][2][T][H] (index 0 = K, 1 = V), then q i8 [L][2][T][H][D]
 *     fp32: f32 [L][2][T][H][D]      bf16: bf16 [L][2][T][H][D] (round to nearest even)
 *   Checksums are CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320, init and xor-out 0xffffffff;
 *   crc("123456789") = 0xcbf43926), computed slice-by-8.
 *
 * Host arrays: dense K and V are fp32 [L][T][H][D] (layer l0 + i at index i). Paged storage is the
 * engine's (src/backend/backend.h): per layer [n_blocks, block_size, n_kv_heads, head_dim] fp32 whose
 * head index 0 is KV head head0; token p of the sequence sits in block block_table[p / block_size],
 * slot p % block_size (p is the absolute position, so t0 indexes the table directly).
 *
 * Unpacking validates everything -- magic, version, header size and crc, flags, dtype, codec, ranges,
 * sizes against the ranges, the payload crc, every LZ4 frame's size and content -- before it writes
 * any output; a corrupt or truncated shard gives SITS_ERR_FORMAT with the reason logged. */
#ifndef SITS_KV_SHARD_H
#define SITS_KV_SHARD_H

#include <stddef.h>
#include <stdint.h>
#include "util/status.h"

#define SITS_KV_SHARD_MAGIC 0x53564b53u   /* "SKVS" as bytes */
#define SITS_KV_SHARD_VERSION 1
#define SITS_KV_SHARD_HEADER_BYTES 96
#define SITS_KV_SHARD_FRAME_BYTES 65536u  /* raw bytes per LZ4 frame: one 64 KiB LZ4 block */

typedef enum { SITS_KV_SHARD_INT8 = 0, SITS_KV_SHARD_FP32 = 1, SITS_KV_SHARD_BF16 = 2 } sits_kv_shard_dtype_t;
typedef enum { SITS_KV_CODEC_NONE = 0, SITS_KV_CODEC_LZ4 = 1 } sits_kv_codec_t;

typedef struct {
    int l0, l1;        /* layers [l0, l1) */
    int h0, h1;        /* KV heads [h0, h1) */
    int t0, t1;        /* token positions [t0, t1) */
    int head_dim;
    sits_kv_shard_dtype_t dtype;   /* payload dtype */
    /* Not part of the format: host threads for LZ4 frames when packing / unpacking (<= 1: one). */
    int threads;
} sits_kv_shard_desc_t;

/* Paged storage of one sequence (see the file comment). */
typedef struct {
    int block_size;
    int n_blocks;             /* blocks in each layer buffer (ids must be below) */
    int n_kv_heads;           /* heads in each slot of the buffers */
    int head0;                /* the KV head of slot head index 0 */
    const int32_t *block_table;
    int n_table;              /* entries of block_table */
} sits_kv_paged_t;

/* Most bytes a shard of desc packed with codec takes (0 for an invalid desc). */
size_t sits_kv_shard_size_bound(const sits_kv_shard_desc_t *desc, sits_kv_codec_t codec);
/* Bytes of the raw payload (before the codec) of desc (0 for an invalid desc). */
size_t sits_kv_shard_raw_bytes(const sits_kv_shard_desc_t *desc);

/* Packs dense host K, V (fp32 [L][T][H][D]) into out[cap]; *len_p = bytes written.
 * SITS_ERR_INVALID: bad desc or codec, cap below what is needed, a non-finite value for int8. */
sits_status_t sits_kv_shard_pack(const sits_kv_shard_desc_t *desc, const float *k, const float *v, sits_kv_codec_t codec,
                                 void *out, size_t cap, size_t *len_p);
/* Same, gathering from paged storage: k_cache_layer[i], v_cache_layer[i] are layer l0 + i. */
sits_status_t sits_kv_shard_pack_paged(const sits_kv_shard_desc_t *desc, const float *const *k_cache_layer,
                                       const float *const *v_cache_layer, const sits_kv_paged_t *pg, sits_kv_codec_t codec,
                                       void *out, size_t cap, size_t *len_p);

/* Validates the header of buf[len] (and that len holds the whole shard) and returns its desc
 * (threads 0) and codec; does not check the payload. codec_p may be NULL. */
sits_status_t sits_kv_shard_peek(const void *buf, size_t len, sits_kv_shard_desc_t *desc_p, sits_kv_codec_t *codec_p);
/* Validates the whole shard, then writes K, V as fp32 [L][T][H][D] (int8 dequantised) and *desc_p.
 * threads: host threads for LZ4 frames (<= 1: one). */
sits_status_t sits_kv_shard_unpack(const void *buf, size_t len, int threads, sits_kv_shard_desc_t *desc_p, float *k,
                                   float *v);
/* Validates the whole shard, checks it fits the paged storage (heads within [head0, head0 + n_kv_heads),
 * layers within n_layers buffers given, every needed block id in range), then scatters it.
 * k_cache_layer[i] is layer l0 + i of the shard (caller passes the shard's layers: peek first). */
sits_status_t sits_kv_shard_unpack_paged(const void *buf, size_t len, int threads, float *const *k_cache_layer,
                                         float *const *v_cache_layer, int n_layers, const sits_kv_paged_t *pg,
                                         sits_kv_shard_desc_t *desc_p);

/* CRC-32 (IEEE, see above) of p[n], continuing from crc (0 to start). */
uint32_t sits_kv_crc32(uint32_t crc, const void *p, size_t n);

/* Measured codec performance on one path (bench/bench_kv_codec.c prints these). Rates are GB/s of
 * raw (uncompressed) bytes, with the host threads the path will use. */
typedef struct {
    double ratio;            /* raw bytes / compressed bytes */
    double compress_gbps;
    double decompress_gbps;
} sits_kv_codec_perf_t;

/* Margin by which compression must beat the plain link (10 %), so that noise does not flip it. */
#define SITS_KV_CODEC_MARGIN 0.10

/* The decision rule for LZ4 on a path of link_gbps (raw GB/s the path moves uncompressed):
 * frames are independent, so compression, transfer and decompression pipeline frame by frame and
 * the compressed path moves raw bytes at
 *     effective = min(compress_gbps, decompress_gbps, link_gbps * ratio).
 * LZ4 is used iff effective > (1 + SITS_KV_CODEC_MARGIN) * link_gbps; otherwise (and for any
 * non-positive or non-finite input) SITS_KV_CODEC_NONE. */
sits_kv_codec_t sits_kv_codec_choose(double link_gbps, const sits_kv_codec_perf_t *perf);

#endif
