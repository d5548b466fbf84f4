/* blocks.h -- the KV block allocator of the leader, with a prefix cache.
 *
 * Block ids index the engine's paged KV storage and are the same on every rank of a TP group.
 * Each block has a reference count. A full block can be registered under the hash of its
 * contents (sits_kv_block_hash: the parent block's hash and the block's token ids), which makes
 * it findable by later sequences with the same prefix (shared read-only: new tokens are only ever
 * written to blocks past the shared prefix). A registered block whose count drops to zero is not
 * freed but kept, least recently used first, and reclaimed only when no free block is left.
 *
 * [n > 1] Sequences may share blocks (sits_kv_blocks_share: one reference each): the choices of one
 * request share its prompt's blocks, the last one possibly partial. A sequence about to write into a
 * block that others hold too copies it first (sits_kv_blocks_cow: copy on write); the holder left
 * alone writes in place. */
#ifndef SITS_KV_BLOCKS_H
#define SITS_KV_BLOCKS_H

#include <stdint.h>
#include "util/status.h"

typedef struct sits_kv_blocks sits_kv_blocks_t;

sits_status_t sits_kv_blocks_create(int n_blocks, sits_kv_blocks_t **kb_p);
void sits_kv_blocks_destroy(sits_kv_blocks_t *kb);
/* n fresh blocks (refcount 1) into ids[n], evicting cached blocks (LRU) when the free list is empty;
 * SITS_ERR_BUSY when fewer than n can be had (nothing taken). */
sits_status_t sits_kv_blocks_alloc(sits_kv_blocks_t *kb, int n, int32_t *ids);
/* Drop one reference of each; at zero a block is freed, or kept as evictable when registered. */
void sits_kv_blocks_release(sits_kv_blocks_t *kb, int n, const int32_t *ids);
/* Blocks that an alloc can still hand out (free + evictable cached ones). */
int sits_kv_blocks_free_count(const sits_kv_blocks_t *kb);
int sits_kv_blocks_total(const sits_kv_blocks_t *kb);

/* [n > 1] One more reference to each of ids[n] (another sequence shares them). */
void sits_kv_blocks_share(sits_kv_blocks_t *kb, int n, const int32_t *ids);
/* References held on block id (0: free or evictable). */
int sits_kv_blocks_refs(const sits_kv_blocks_t *kb, int32_t id);
/* Copy on write: the caller holds a reference to id and will write into it. When nobody else holds
 * it, *id_p = id (write in place); else *id_p = a fresh block that takes over the caller's reference
 * (id keeps the others'), and the caller must copy id's contents into it before writing.
 * SITS_ERR_BUSY when no block can be had (nothing changed). */
sits_status_t sits_kv_blocks_cow(sits_kv_blocks_t *kb, int32_t id, int32_t *id_p);

/* [sliding window] Leading blocks of a sequence that no layer reads any more when every layer reads at
 * most window positions back (window 0: unlimited, none): the next position computed, n_computed,
 * reads max(0, n_computed - window + 1) on, and later positions read no earlier. The caller gives
 * them back and keeps -1 placeholders in their block-table entries. */
static inline int sits_kv_window_dead_blocks(int window, int block_size, int n_computed)
{
    int lo = n_computed - window + 1;
    return window > 0 && lo > 0 ? lo / block_size : 0;
}
/* [sliding window] Blocks one sequence holds at most at once when a step computes up to step_tokens of
 * its positions and reads the window - 1 before the first of them (window 0: no bound, INT32_MAX). */
static inline int sits_kv_window_max_blocks(int window, int block_size, int step_tokens)
{
    return window > 0 ? (step_tokens + window - 1) / block_size + 2 : INT32_MAX;
}

/* ---- prefix cache ---- */
/* Hash of a full block: parent (0 for the first block) and its block_size token ids. */
uint64_t sits_kv_block_hash(uint64_t parent, const int32_t *tokens, int n);
/* The block registered under hash, with one more reference (taken off the evictable list), or -1. */
int32_t sits_kv_blocks_lookup(sits_kv_blocks_t *kb, uint64_t hash);
/* Register a full, allocated block under hash (no-op when the hash is already registered). */
void sits_kv_blocks_register(sits_kv_blocks_t *kb, int32_t id, uint64_t hash);
/* Cached (registered) blocks, in use or evictable. */
int sits_kv_blocks_cached_count(const sits_kv_blocks_t *kb);

#endif
