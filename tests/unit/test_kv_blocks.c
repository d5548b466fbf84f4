/* test_kv_blocks.c -- the KV block allocator and its prefix cache (src/kv/blocks.c): reference
 * counts, refusal when short, registration and lookup, LRU eviction of unreferenced cached blocks,
 * that a referenced cached block is never handed out, and [n > 1] shared blocks: reference counts
 * and copy on write (the last holder writes in place, a shared one is copied; a cow that finds no
 * block changes nothing). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "kv/blocks.h"
#include "util/log.h"

static void test_alloc_release(void **state)
{
    sits_kv_blocks_t *kb;
    int32_t ids[8], more[8];
    assert_int_equal(sits_kv_blocks_create(6, &kb), SITS_OK);
    assert_int_equal(sits_kv_blocks_alloc(kb, 4, ids), SITS_OK);
    assert_int_equal(sits_kv_blocks_free_count(kb), 2);
    assert_int_equal(sits_kv_blocks_alloc(kb, 3, more), SITS_ERR_BUSY);
    assert_int_equal(sits_kv_blocks_free_count(kb), 2); /* nothing taken */
    for (int i = 0; i < 4; i++)
        for (int j = i + 1; j < 4; j++) assert_int_not_equal(ids[i], ids[j]);
    sits_kv_blocks_release(kb, 4, ids);
    assert_int_equal(sits_kv_blocks_free_count(kb), 6);
    sits_kv_blocks_destroy(kb);
}

static void test_prefix_lookup_and_lru(void **state)
{
    sits_kv_blocks_t *kb;
    int32_t a[3], b[3], t0[4] = { 1, 2, 3, 4 }, t1[4] = { 5, 6, 7, 8 }, t2[4] = { 9, 9, 9, 9 };
    assert_int_equal(sits_kv_blocks_create(4, &kb), SITS_OK);
    uint64_t h0 = sits_kv_block_hash(0, t0, 4), h1 = sits_kv_block_hash(h0, t1, 4), h2 = sits_kv_block_hash(0, t2, 4);
    assert_true(h0 != h1 && h0 != h2 && sits_kv_block_hash(h2, t1, 4) != h1); /* the parent matters */
    assert_int_equal(sits_kv_blocks_alloc(kb, 3, a), SITS_OK);
    sits_kv_blocks_register(kb, a[0], h0);
    sits_kv_blocks_register(kb, a[1], h1);
    sits_kv_blocks_register(kb, a[2], h2);
    assert_int_equal(sits_kv_blocks_cached_count(kb), 3);
    /* a hit takes a reference: released once by the owner, the block stays in use */
    assert_int_equal(sits_kv_blocks_lookup(kb, h0), a[0]);
    sits_kv_blocks_release(kb, 3, a);
    assert_int_equal(sits_kv_blocks_free_count(kb), 1 + 2); /* 1 free + a[1], a[2] evictable */
    assert_int_equal(sits_kv_blocks_lookup(kb, 12345), -1);
    /* evictable blocks are reclaimed least recently used first; a[0] is referenced and must survive */
    assert_int_equal(sits_kv_blocks_lookup(kb, h2), a[2]);   /* a[2] back in use */
    sits_kv_blocks_release(kb, 1, &a[2]);                    /* now a[1] is older than a[2] */
    assert_int_equal(sits_kv_blocks_alloc(kb, 2, b), SITS_OK); /* the free one, then evicts a[1] */
    assert_true((b[0] == a[1]) ^ (b[1] == a[1]));
    assert_int_equal(sits_kv_blocks_lookup(kb, h1), -1);     /* evicted: no longer findable */
    assert_int_equal(sits_kv_blocks_lookup(kb, h2), a[2]);
    assert_int_equal(sits_kv_blocks_alloc(kb, 1, b + 2), SITS_ERR_BUSY); /* a[0], a[2] referenced, b[] in use */
    int32_t x[1] = { a[0] };
    sits_kv_blocks_release(kb, 1, x);
    assert_int_equal(sits_kv_blocks_alloc(kb, 1, b + 2), SITS_OK);
    assert_int_equal(b[2], a[0]);
    sits_kv_blocks_destroy(kb);
}

static void test_share_cow(void **state)
{
    sits_kv_blocks_t *kb;
    int32_t p[2], x[2], id;
    assert_int_equal(sits_kv_blocks_create(4, &kb), SITS_OK);
    assert_int_equal(sits_kv_blocks_alloc(kb, 2, p), SITS_OK);   /* a prompt: one full, one partial block */
    sits_kv_blocks_share(kb, 2, p);                             /* choice 1 */
    sits_kv_blocks_share(kb, 2, p);                             /* choice 2 */
    assert_int_equal(sits_kv_blocks_refs(kb, p[0]), 3);
    assert_int_equal(sits_kv_blocks_refs(kb, p[1]), 3);
    assert_int_equal(sits_kv_blocks_free_count(kb), 2);
    /* choice 0 writes into the partial block: a fresh copy, its reference moves there */
    int32_t c0, c1, c2;
    assert_int_equal(sits_kv_blocks_cow(kb, p[1], &c0), SITS_OK);
    assert_int_not_equal(c0, p[1]);
    assert_int_not_equal(c0, p[0]);
    assert_int_equal(sits_kv_blocks_refs(kb, p[1]), 2);
    assert_int_equal(sits_kv_blocks_refs(kb, c0), 1);
    assert_int_equal(sits_kv_blocks_free_count(kb), 1);
    assert_int_equal(sits_kv_blocks_cow(kb, p[1], &c1), SITS_OK);   /* choice 1 copies too */
    assert_true(c1 != p[1] && c1 != c0 && c1 != p[0]);
    assert_int_equal(sits_kv_blocks_refs(kb, p[1]), 1);
    assert_int_equal(sits_kv_blocks_free_count(kb), 0);
    /* choice 2 holds the block alone now: it writes in place, no block taken */
    assert_int_equal(sits_kv_blocks_cow(kb, p[1], &c2), SITS_OK);
    assert_int_equal(c2, p[1]);
    assert_int_equal(sits_kv_blocks_refs(kb, p[1]), 1);
    /* no block left: a cow of the shared full block is refused and changes nothing */
    assert_int_equal(sits_kv_blocks_cow(kb, p[0], &id), SITS_ERR_BUSY);
    assert_int_equal(sits_kv_blocks_refs(kb, p[0]), 3);
    assert_int_equal(sits_kv_blocks_cow(kb, 99, &id), SITS_ERR_INVALID);
    /* each choice releases its table: the shared block is freed with the last reference only */
    x[0] = p[0]; x[1] = c0;
    sits_kv_blocks_release(kb, 2, x);
    assert_int_equal(sits_kv_blocks_refs(kb, p[0]), 2);
    assert_int_equal(sits_kv_blocks_free_count(kb), 1);
    x[1] = c1;
    sits_kv_blocks_release(kb, 2, x);
    assert_int_equal(sits_kv_blocks_free_count(kb), 2);
    sits_kv_blocks_release(kb, 2, p);
    assert_int_equal(sits_kv_blocks_refs(kb, p[0]), 0);
    assert_int_equal(sits_kv_blocks_free_count(kb), 4);
    sits_kv_blocks_destroy(kb);
}

/* [sliding window] position n_computed reads n_computed - window + 1 on: blocks wholly before it are dead */
static void test_window_dead_blocks(void **state)
{
    (void)state;
    assert_int_equal(sits_kv_window_dead_blocks(0, 4, 1000), 0);    /* no window */
    assert_int_equal(sits_kv_window_dead_blocks(16, 4, 15), 0);     /* reads 0 .. 15 */
    assert_int_equal(sits_kv_window_dead_blocks(16, 4, 18), 0);     /* reads 3 .. 18: block 0 still holds 3 */
    assert_int_equal(sits_kv_window_dead_blocks(16, 4, 19), 1);     /* reads 4 .. 19: block 0 (0..3) dead */
    assert_int_equal(sits_kv_window_dead_blocks(16, 4, 23), 2);     /* reads 8 .. 23: blocks 0, 1 dead */
    assert_int_equal(sits_kv_window_dead_blocks(1, 16, 16), 1);     /* reads only itself */
    assert_int_equal(sits_kv_window_dead_blocks(1, 16, 15), 0);
}

int main(void)
{
    sits_log_init(0);
    sits_log_set_level(SITS_LOG_NONE);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alloc_release),
        cmocka_unit_test(test_prefix_lookup_and_lru),
        cmocka_unit_test(test_share_cow),
        cmocka_unit_test(test_window_dead_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
