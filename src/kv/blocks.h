/* blocks.h -- the KV block allocator of the leader: a free list of block ids with reference
 * counts (shared prefix blocks later). Block ids index the engine's paged KV storage and are
 * the same on every rank of a TP group. */
#ifndef SITS_KV_BLOCKS_H
#define SITS_KV_BLOCKS_H

#include <stdint.h>
#include "util/status.h"

typedef struct sits_kv_blocks sits_kv_blocks_t;

sits_status_t sits_kv_blocks_create(int n_blocks, sits_kv_blocks_t **kb_p);
void sits_kv_blocks_destroy(sits_kv_blocks_t *kb);
/* n fresh blocks (refcount 1) into ids[n]; SITS_ERR_BUSY when fewer than n are free (nothing taken). */
sits_status_t sits_kv_blocks_alloc(sits_kv_blocks_t *kb, int n, int32_t *ids);
/* Drop one reference of each; a block returns to the free list at zero. */
void sits_kv_blocks_release(sits_kv_blocks_t *kb, int n, const int32_t *ids);
int sits_kv_blocks_free_count(const sits_kv_blocks_t *kb);
int sits_kv_blocks_total(const sits_kv_blocks_t *kb);

#endif
