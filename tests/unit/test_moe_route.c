/* test_moe_route.c -- [moe dev] the reference moe_route (sits_backend_cpu_moe_route, backend.h): the plan of a
 * hand-worked step (expected values worked out by hand from backend.h's definition, not by the code), the
 * load-balance counts with a masked pad row and their accumulation over calls, the limits and refusals. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"

/* 3 tokens of top 2 over 5 experts: slot s = 2 t + j; token 1 is a pad row (mask -1).
 *   ids   = 3 1 | 1 4 | 3 0
 *   experts with a slot: 0 (slot 5), 1 (slots 1, 2), 3 (slots 0, 4), 4 (slot 3) -> A = 4
 *   offsets 0 1 3 5 6; the slot list 5 | 1 2 | 0 4 | 3
 *   counts without token 1's slots (2, 3): e0 1, e1 1, e2 0, e3 2, e4 0 */
static void test_hand_worked(void **state)
{
    (void)state;
    const int32_t ids[6] = { 3, 1, 1, 4, 3, 0 }, mask[3] = { 0, -1, 2 };
    int32_t plan[SITS_MOE_PLAN_WORDS(5, 6)];
    uint64_t counts[5] = { 0 };
    memset(plan, 0x7f, sizeof plan);
    assert_int_equal(sits_backend_cpu_moe_route(plan, counts, ids, mask, 3, 2, 5, 0, 5), SITS_OK);
    const int32_t want_list[4] = { 0, 1, 3, 4 }, want_off[5] = { 0, 1, 3, 5, 6 }, want_slots[6] = { 5, 1, 2, 0, 4, 3 };
    const uint64_t want_counts[5] = { 1, 1, 0, 2, 0 };
    assert_int_equal(plan[0], 4);
    assert_memory_equal(plan + 1, want_list, sizeof want_list);
    assert_memory_equal(plan + 1 + 5, want_off, sizeof want_off);
    assert_memory_equal(plan + 2 + 2 * 5, want_slots, sizeof want_slots);
    assert_memory_equal(counts, want_counts, sizeof want_counts);
    /* counts add up over calls; without a mask every slot counts; NULL counts: none kept */
    assert_int_equal(sits_backend_cpu_moe_route(plan, counts, ids, NULL, 3, 2, 5, 0, 5), SITS_OK);
    const uint64_t want2[5] = { 2, 3, 0, 4, 1 };
    assert_memory_equal(counts, want2, sizeof want2);
    assert_int_equal(sits_backend_cpu_moe_route(plan, NULL, ids, mask, 3, 2, 5, 0, 5), SITS_OK);
    assert_int_equal(plan[0], 4);
}

/* The hand-worked step of test_hand_worked as two EP ranks of experts [0, 3) and [3, 5) (by hand again):
 *   rank 0: experts 0 (slot 5), 1 (slots 1, 2) -> A = 2, local ids 0 1, offsets 0 1 3, list 5 | 1 2
 *   rank 1: experts 3 (slots 0, 4), 4 (slot 3) -> A = 2, local ids 0 1, offsets 0 2 3, list 0 4 | 3
 *   counts on either rank: every expert's (1 1 0 2 0 with the mask) */
static void expect_plan(const int32_t *plan, int E, int A, const int32_t *list, const int32_t *off, const int32_t *slots)
{
    assert_int_equal(plan[0], A);
    assert_memory_equal(plan + 1, list, sizeof(int32_t) * (size_t)A);
    assert_memory_equal(plan + 1 + E, off, sizeof(int32_t) * (size_t)(A + 1));
    assert_memory_equal(plan + 2 + 2 * E, slots, sizeof(int32_t) * (size_t)off[A]);
}

static void test_ep_ranges(void **state)
{
    (void)state;
    const int32_t ids[6] = { 3, 1, 1, 4, 3, 0 }, mask[3] = { 0, -1, 2 };
    int32_t plan[SITS_MOE_PLAN_WORDS(5, 6)];
    const uint64_t want_counts[5] = { 1, 1, 0, 2, 0 };
    const int32_t local[2] = { 0, 1 }, o0[3] = { 0, 1, 3 }, s0[3] = { 5, 1, 2 }, o1[3] = { 0, 2, 3 }, s1[3] = { 0, 4, 3 };
    const int32_t *offs[2] = { o0, o1 }, *slots[2] = { s0, s1 };
    const int e0[2] = { 0, 3 }, ne[2] = { 3, 2 };
    for (int r = 0; r < 2; r++) {
        uint64_t counts[5] = { 0 };
        memset(plan, 0x7f, sizeof plan);
        assert_int_equal(sits_backend_cpu_moe_route(plan, counts, ids, mask, 3, 2, 5, e0[r], ne[r]), SITS_OK);
        expect_plan(plan, 5, 2, local, offs[r], slots[r]);
        assert_memory_equal(counts, want_counts, sizeof want_counts);
    }
}

/* every token on the same experts (the top k of a degenerate router): one run of slots per expert, in order */
static void test_all_same(void **state)
{
    (void)state;
    enum { N = 256, K = 8, E = 128 };
    int32_t *ids = malloc(sizeof(int32_t) * N * K), *plan = malloc(sizeof(int32_t) * SITS_MOE_PLAN_WORDS(E, N * K));
    assert_non_null(ids);
    assert_non_null(plan);
    for (int t = 0; t < N; t++)
        for (int j = 0; j < K; j++) ids[t * K + j] = 120 - 10 * j;   /* 120, 110, ..., 50: descending in j */
    assert_int_equal(sits_backend_cpu_moe_route(plan, NULL, ids, NULL, N, K, E, 0, E), SITS_OK);
    assert_int_equal(plan[0], K);
    for (int a = 0; a < K; a++) {
        assert_int_equal(plan[1 + a], 50 + 10 * a);                /* ascending: expert 50 is j = 7 */
        assert_int_equal(plan[1 + E + a], a * N);
        for (int t = 0; t < N; t++) assert_int_equal(plan[2 + 2 * E + a * N + t], t * K + (K - 1 - a));
    }
    assert_int_equal(plan[1 + E + K], N * K);
    free(ids);
    free(plan);
}

/* an id outside [0, E), more slots than SITS_MOE_DEV_MAX_SLOTS, more than 1024 experts: refused */
static void test_refusals(void **state)
{
    (void)state;
    int32_t plan[SITS_MOE_PLAN_WORDS(4, 4)];
    const int32_t bad_hi[4] = { 0, 1, 4, 2 }, bad_lo[4] = { 0, -1, 2, 3 }, ok_ids[4] = { 0, 1, 2, 3 };
    assert_int_equal(sits_backend_cpu_moe_route(plan, NULL, bad_hi, NULL, 2, 2, 4, 0, 4), SITS_ERR_INVALID);
    assert_int_equal(sits_backend_cpu_moe_route(plan, NULL, bad_lo, NULL, 2, 2, 4, 0, 4), SITS_ERR_INVALID);
    assert_int_equal(sits_backend_cpu_moe_route(plan, NULL, ok_ids, NULL, 2, 2, 4, 0, 4), SITS_OK);
    /* the expert range: empty, negative, past E */
    assert_int_equal(sits_backend_cpu_moe_route(plan, NULL, ok_ids, NULL, 2, 2, 4, 0, 0), SITS_ERR_INVALID);
    assert_int_equal(sits_backend_cpu_moe_route(plan, NULL, ok_ids, NULL, 2, 2, 4, -1, 2), SITS_ERR_INVALID);
    assert_int_equal(sits_backend_cpu_moe_route(plan, NULL, ok_ids, NULL, 2, 2, 4, 3, 2), SITS_ERR_INVALID);
    assert_int_equal(sits_backend_cpu_moe_route(plan, NULL, ok_ids, NULL, 0, 2, 4, 0, 4), SITS_ERR_INVALID);
    assert_int_equal(sits_backend_cpu_moe_route(plan, NULL, ok_ids, NULL, SITS_MOE_DEV_MAX_SLOTS / 2 + 1, 2, 4, 0, 4),
                     SITS_ERR_INVALID);
    assert_int_equal(sits_backend_cpu_moe_route(plan, NULL, ok_ids, NULL, 2, 2, 1025, 0, 1025), SITS_ERR_INVALID);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_worked),
        cmocka_unit_test(test_ep_ranges),
        cmocka_unit_test(test_all_same),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
