/* offload.h -- the KV offload tiers of one rank: where a swapped-out sequence's KV blocks wait
 * until it resumes (issue 8, item 2).
 *
 * The leader decides every swap (src/sched/sched.c) and names each swapped sequence by a slot id;
 * every rank of the replica then stores its own share of the blocks (its KV heads, its pipeline
 * stage's layers: the bytes sits_engine_kv_save_blocks writes) under that id in its own store and
 * gives them back on restore (src/sched/swap.c runs the orders). The store knows nothing of blocks:
 * it keeps opaque byte strings per slot.
 *
 * Tiers, tried in order on put:
 *   host  up to params.host_bytes of stored bytes in host memory (malloc'ed per slot; the device copy
 *         goes through one staging buffer, pinned when the backend has host_alloc);
 *   disk  one file per slot under params.dir, "sits-kv-<pid>-r<rank>-s<slot>.bin", when the host tier
 *         is full (or off). The file has a 64-byte header (magic "SKVO", version 1, slot, codec, raw and
 *         stored sizes, CRC-32 of the stored bytes, CRC-32 of the header) and the stored bytes; get
 *         checks all of it. Files are removed on get, drop and destroy.
 * A put that fits no tier fails (SITS_ERR_BUSY), a disk error (full, unwritable, short read, bad
 * checksum) gives SITS_ERR_IO / SITS_ERR_FORMAT with a warning: the caller falls back to recompute.
 *
 * Codec (per store; each slot records its own): none, or LZ4 in independent 64 KiB frames
 * (LZ4 block format; stored = u32 size[frames] then the frames; a size with the top bit set marks
 * a frame kept raw because it did not shrink), compressed and decompressed by params.threads
 * host threads (OpenMP over frames, from 16 frames up). SITS_KV_LZ4_AUTO decides at the first put by measurement on
 * that put's data: the LZ4 ratio and compress / decompress rates against the host memory copy rate
 * (the host tier's "link"), through sits_kv_codec_choose (kv/shard.h); the decision is logged.
 *
 * Prefetch (the restore overlapped with forward steps): sits_kv_offload_prefetch starts taking one
 * slot's bytes from its tier (host copy, LZ4 decode, or disk read + checks) on one background
 * thread of the store, into a buffer the store owns for that slot (pinned like the staging buffer
 * when the backend can); the later take of that slot returns those bytes without reading the tier
 * again, and a failure of the prefetch is reported by that take (same status, same warning).
 *
 * Not thread-safe, by one rule: one store per rank, used by its main thread; every public function
 * except sits_kv_offload_path first waits for (joins) a running prefetch, so the prefetch thread
 * alone touches the store while the main thread does anything else (forward steps). */
#ifndef SITS_KV_OFFLOAD_H
#define SITS_KV_OFFLOAD_H

#include <stddef.h>
#include <stdint.h>
#include "backend/backend.h"
#include "util/status.h"

typedef enum { SITS_KV_TIER_HOST = 0, SITS_KV_TIER_DISK = 1, SITS_KV_N_TIERS = 2 } sits_kv_tier_t;
typedef enum { SITS_KV_LZ4_OFF = 0, SITS_KV_LZ4_ON = 1, SITS_KV_LZ4_AUTO = 2 } sits_kv_lz4_mode_t;

#define SITS_KV_OFFLOAD_FRAME_BYTES 65536u
#define SITS_KV_OFFLOAD_FILE_MAGIC 0x4f564b53u   /* "SKVO" as bytes */
#define SITS_KV_OFFLOAD_FILE_VERSION 1
#define SITS_KV_OFFLOAD_FILE_HEADER 64

typedef struct {
    size_t host_bytes;          /* host tier capacity in stored bytes (0: no host tier) */
    int cap_to_free_ram;        /* 1: at most half of the memory available at create (/proc/meminfo) */
    const char *dir;            /* disk tier directory, created when missing (NULL or "": no disk tier) */
    sits_kv_lz4_mode_t lz4;
    int threads;                /* host threads for LZ4 frames (<= 1: one) */
    int rank;                   /* world rank, in the file names */
    sits_backend_t *be;         /* staging buffer via be->ops->host_alloc when present (NULL: malloc) */
} sits_kv_offload_params_t;

typedef struct {
    uint64_t puts[SITS_KV_N_TIERS], put_raw_bytes[SITS_KV_N_TIERS], put_stored_bytes[SITS_KV_N_TIERS];
    uint64_t gets[SITS_KV_N_TIERS], get_raw_bytes[SITS_KV_N_TIERS];
    uint64_t failures;                       /* puts and gets that failed */
    size_t used[SITS_KV_N_TIERS];            /* stored bytes held now */
    int slots;                               /* slots held now */
    int codec;                               /* 0 none, 1 lz4, -1 auto not decided yet */
    size_t host_cap;                         /* host tier capacity after the cap (0: off) */
    int disk;                                /* 1: the disk tier is usable */
    /* prefetch: started, takes served from a prefetch (those whose prefetch failed included), seconds the main
     * thread waited for a running prefetch (joins at any call, ideally ~0), seconds the prefetch
     * thread worked (overlapped with whatever the main thread did meanwhile) */
    uint64_t prefetches, prefetch_takes;
    double prefetch_wait_s, prefetch_work_s;
} sits_kv_offload_stats_t;

typedef struct sits_kv_offload sits_kv_offload_t;

/* A store with no usable tier is still created (every put then fails); a disk directory that cannot
 * be created or written is logged and left out. SITS_ERR_INVALID for a bad lz4 mode. */
sits_status_t sits_kv_offload_create(const sits_kv_offload_params_t *p, sits_kv_offload_t **o_p);
/* Joins a running prefetch, frees every slot (files removed, prefetch buffers) and the staging buffer. */
void sits_kv_offload_destroy(sits_kv_offload_t *o);

/* A host buffer of at least n bytes for the device copies (pinned when the backend can), owned by
 * the store and valid until the next call. */
sits_status_t sits_kv_offload_staging(sits_kv_offload_t *o, size_t n, void **buf_p);

/* Store data[n] under slot (replacing nothing: SITS_ERR_INVALID when slot is held). *tier_p (may be
 * NULL) and *stored_p (may be NULL) say where it went and its stored size. On failure the slot is
 * not held. */
sits_status_t sits_kv_offload_put(sits_kv_offload_t *o, int32_t slot, const void *data, size_t n, sits_kv_tier_t *tier_p,
                                  size_t *stored_p);
/* Copy the slot's bytes, validated, into data[n] (n must be its size) and release the slot, whether
 * this succeeds or not. *tier_p (may be NULL): the tier it came from. SITS_ERR_NOT_FOUND: no such slot.
 * A prefetched slot's bytes come from its prefetch (its failure, if any, is returned here). */
sits_status_t sits_kv_offload_take(sits_kv_offload_t *o, int32_t slot, void *data, size_t n, sits_kv_tier_t *tier_p);
/* The same take without a copy: *data_p points at the slot's n bytes, in the slot's prefetch buffer
 * when it was prefetched, else in the staging buffer (read there from the tier now); valid until
 * the next call on the store. Failures as sits_kv_offload_take (the slot is released either way). */
sits_status_t sits_kv_offload_take_buf(sits_kv_offload_t *o, int32_t slot, size_t n, const void **data_p,
                                       sits_kv_tier_t *tier_p);
/* Start taking slot's bytes from its tier on the store's background thread (after joining a
 * running one), for a later take; the slot stays held. SITS_OK also when the slot is already
 * prefetched. SITS_ERR_NOT_FOUND: no such slot; SITS_ERR_NOMEM / SITS_ERR_INTERNAL (no buffer, no
 * thread): nothing started, the take then reads the tier itself. A tier failure is not seen here. */
sits_status_t sits_kv_offload_prefetch(sits_kv_offload_t *o, int32_t slot);
/* Release a slot (no-op when not held); a prefetched slot's buffer too. */
void sits_kv_offload_drop(sits_kv_offload_t *o, int32_t slot);
int sits_kv_offload_holds(sits_kv_offload_t *o, int32_t slot);

void sits_kv_offload_get_stats(sits_kv_offload_t *o, sits_kv_offload_stats_t *stats_p);
/* The disk file a slot of this store would use (tests corrupt it). */
void sits_kv_offload_path(const sits_kv_offload_t *o, int32_t slot, char *buf, size_t len);

/* "auto" | "on" | "off" -> mode. */
sits_status_t sits_kv_lz4_mode_parse(const char *s, sits_kv_lz4_mode_t *mode_p);

/* MemAvailable of /proc/meminfo (what the kernel can hand out without swapping; else free pages), in
 * bytes; 0 when unknown. Sizes the host tier here and the CPU backend's KV cache (sched/generate.c). */
size_t sits_kv_host_mem_available(void);

#endif
