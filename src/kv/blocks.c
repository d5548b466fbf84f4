/* blocks.c -- free-list block allocator with reference counts; see blocks.h. */
#include "kv/blocks.h"
#include "util/log.h"

#include <stdlib.h>

struct sits_kv_blocks {
    int n;
    int n_free;
    int32_t *free_ids;   /* stack of free ids [n] */
    int32_t *refs;       /* [n] */
};

sits_status_t sits_kv_blocks_create(int n_blocks, sits_kv_blocks_t **kb_p)
{
    if (n_blocks < 1) return SITS_ERR_INVALID;
    sits_kv_blocks_t *kb = calloc(1, sizeof *kb);
    if (!kb) return SITS_ERR_NOMEM;
    kb->n = kb->n_free = n_blocks;
    kb->free_ids = malloc(sizeof(int32_t) * (size_t)n_blocks);
    kb->refs = calloc((size_t)n_blocks, sizeof(int32_t));
    if (!kb->free_ids || !kb->refs) {
        sits_kv_blocks_destroy(kb);
        return SITS_ERR_NOMEM;
    }
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
    free(kb);
}

sits_status_t sits_kv_blocks_alloc(sits_kv_blocks_t *kb, int n, int32_t *ids)
{
    if (n < 0) return SITS_ERR_INVALID;
    if (n > kb->n_free) return SITS_ERR_BUSY;
    for (int i = 0; i < n; i++) {
        int32_t id = kb->free_ids[--kb->n_free];
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
        if (--kb->refs[id] == 0) kb->free_ids[kb->n_free++] = id;
    }
}

int sits_kv_blocks_free_count(const sits_kv_blocks_t *kb) { return kb->n_free; }
int sits_kv_blocks_total(const sits_kv_blocks_t *kb) { return kb->n; }
