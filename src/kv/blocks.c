/* blocks.c -- free list + reference counts + a hash-indexed prefix cache with LRU eviction;
 * see blocks.h. Everything is O(1) per block except hash-table probing. */
#include "kv/blocks.h"
#include "util/log.h"

#include <stdlib.h>
#include <string.h>

struct sits_kv_blocks {
    int n;
    int n_free;
    int32_t *free_ids;   /* stack of free ids [n] */
    int32_t *refs;       /* [n] */
    /* prefix cache */
    uint64_t *hash;      /* [n] hash of a registered block */
    uint8_t *cached;     /* [n] 1 when registered */
    int n_cached;
    int32_t *lru_prev, *lru_next;   /* [n] evictable list (refs == 0 && cached), head = least recent */
    int32_t lru_head, lru_tail;
    int n_evictable;
    int32_t *table;      /* open addressing [cap] of block ids, -1 empty, -2 deleted */
    int cap;
};

uint64_t sits_kv_block_hash(uint64_t parent, const int32_t *tokens, int n)
{
    uint64_t h = parent ^ 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < n; i++) {
        h ^= (uint64_t)(uint32_t)tokens[i] + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 33;
    }
    return h ? h : 1;
}

sits_status_t sits_kv_blocks_create(int n_blocks, sits_kv_blocks_t **kb_p)
{
    if (n_blocks < 1) return SITS_ERR_INVALID;
    sits_kv_blocks_t *kb = calloc(1, sizeof *kb);
    if (!kb) return SITS_ERR_NOMEM;
    kb->n = kb->n_free = n_blocks;
    kb->cap = 16;
    while (kb->cap < 2 * n_blocks) kb->cap *= 2;
    kb->free_ids = malloc(sizeof(int32_t) * (size_t)n_blocks);
    kb->refs = calloc((size_t)n_blocks, sizeof(int32_t));
    kb->hash = calloc((size_t)n_blocks, sizeof(uint64_t));
    kb->cached = calloc((size_t)n_blocks, 1);
    kb->lru_prev = malloc(sizeof(int32_t) * (size_t)n_blocks);
    kb->lru_next = malloc(sizeof(int32_t) * (size_t)n_blocks);
    kb->table = malloc(sizeof(int32_t) * (size_t)kb->cap);
    if (!kb->free_ids || !kb->refs || !kb->hash || !kb->cached || !kb->lru_prev || !kb->lru_next || !kb->table) {
        sits_kv_blocks_destroy(kb);
        return SITS_ERR_NOMEM;
    }
    for (int i = 0; i < kb->cap; i++) kb->table[i] = -1;
    kb->lru_head = kb->lru_tail = -1;
    /* low ids are handed out first */
    for (int i = 0; i < n_blocks; i++) kb->free_ids[i] = n_blocks - 1 - i;
    *kb_p = kb;
    return SITS_OK;
}

void sits_kv_blocks_destroy(sits_kv_blocks_t *kb)
{
    if (!kb) return;
    free(kb->free_ids);
    free(kb->refs);
    free(kb->hash);
    free(kb->cached);
    free(kb->lru_prev);
    free(kb->lru_next);
    free(kb->table);
    free(kb);
}

static void lru_remove(sits_kv_blocks_t *kb, int32_t id)
{
    int32_t p = kb->lru_prev[id], q = kb->lru_next[id];
    if (p >= 0) kb->lru_next[p] = q; else kb->lru_head = q;
    if (q >= 0) kb->lru_prev[q] = p; else kb->lru_tail = p;
    kb->n_evictable--;
}

static void lru_push(sits_kv_blocks_t *kb, int32_t id)
{
    kb->lru_prev[id] = kb->lru_tail;
    kb->lru_next[id] = -1;
    if (kb->lru_tail >= 0) kb->lru_next[kb->lru_tail] = id; else kb->lru_head = id;
    kb->lru_tail = id;
    kb->n_evictable++;
}

/* slot of hash in the table, or -1 */
static int table_find(const sits_kv_blocks_t *kb, uint64_t h)
{
    for (int i = (int)(h & (uint64_t)(kb->cap - 1)), k = 0; k < kb->cap; i = (i + 1) & (kb->cap - 1), k++) {
        int32_t id = kb->table[i];
        if (id == -1) return -1;
        if (id >= 0 && kb->hash[id] == h) return i;
    }
    return -1;
}

static void unregister(sits_kv_blocks_t *kb, int32_t id)
{
    int slot = table_find(kb, kb->hash[id]);
    if (slot >= 0 && kb->table[slot] == id) kb->table[slot] = -2;
    kb->cached[id] = 0;
    kb->n_cached--;
}

sits_status_t sits_kv_blocks_alloc(sits_kv_blocks_t *kb, int n, int32_t *ids)
{
    if (n < 0) return SITS_ERR_INVALID;
    if (n > kb->n_free + kb->n_evictable) return SITS_ERR_BUSY;
    for (int i = 0; i < n; i++) {
        int32_t id;
        if (kb->n_free > 0) {
            id = kb->free_ids[--kb->n_free];
        } else {
            id = kb->lru_head;  /* evict the least recently used cached block */
            lru_remove(kb, id);
            unregister(kb, id);
        }
        kb->refs[id] = 1;
        ids[i] = id;
    }
    return SITS_OK;
}

void sits_kv_blocks_release(sits_kv_blocks_t *kb, int n, const int32_t *ids)
{
    for (int i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= kb->n || kb->refs[id] <= 0) {
            SITS_ERROR(SITS_SUB_KV, "release of block %d that is not allocated", id);
            continue;
        }
        if (--kb->refs[id] > 0) continue;
        if (kb->cached[id]) lru_push(kb, id);
        else kb->free_ids[kb->n_free++] = id;
    }
}

void sits_kv_blocks_share(sits_kv_blocks_t *kb, int n, const int32_t *ids)
{
    for (int i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= kb->n || kb->refs[id] <= 0) {
            SITS_ERROR(SITS_SUB_KV, "share of block %d that is not allocated", id);
            continue;
        }
        kb->refs[id]++;
    }
}

int sits_kv_blocks_refs(const sits_kv_blocks_t *kb, int32_t id)
{
    return id >= 0 && id < kb->n ? kb->refs[id] : 0;
}

sits_status_t sits_kv_blocks_cow(sits_kv_blocks_t *kb, int32_t id, int32_t *id_p)
{
    if (id < 0 || id >= kb->n || kb->refs[id] <= 0) return SITS_ERR_INVALID;
    if (kb->refs[id] == 1) {
        *id_p = id;
        return SITS_OK;
    }
    int32_t fresh;
    SITS_CHECK(sits_kv_blocks_alloc(kb, 1, &fresh));
    kb->refs[id]--;   /* > 0: the other holders keep it */
    *id_p = fresh;
    return SITS_OK;
}

int32_t sits_kv_blocks_lookup(sits_kv_blocks_t *kb, uint64_t hash)
{
    int slot = table_find(kb, hash);
    if (slot < 0) return -1;
    int32_t id = kb->table[slot];
    if (kb->refs[id] == 0) lru_remove(kb, id);
    kb->refs[id]++;
    return id;
}

void sits_kv_blocks_register(sits_kv_blocks_t *kb, int32_t id, uint64_t hash)
{
    if (id < 0 || id >= kb->n || kb->refs[id] <= 0 || kb->cached[id] || table_find(kb, hash) >= 0) return;
    if (kb->n_cached * 2 + 2 > kb->cap) return; /* cannot happen: cap >= 2n */
    int i = (int)(hash & (uint64_t)(kb->cap - 1));
    while (kb->table[i] >= 0) i = (i + 1) & (kb->cap - 1);
    kb->table[i] = id;
    kb->hash[id] = hash;
    kb->cached[id] = 1;
    kb->n_cached++;
}

int sits_kv_blocks_free_count(const sits_kv_blocks_t *kb) { return kb->n_free + kb->n_evictable; }
int sits_kv_blocks_total(const sits_kv_blocks_t *kb) { return kb->n; }
int sits_kv_blocks_cached_count(const sits_kv_blocks_t *kb) { return kb->n_cached; }
