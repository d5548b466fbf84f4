/* test_plan.c -- the pure planner (sits_topo_plan) on hand-made node descriptions: rank -> GPU ->
 * NUMA -> cores, TP/PP/DP layouts and groups, refusals, CPU-only spreading and oversubscription.
 * Expected values are written out by hand from the rules in topology/topology.h. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include "topology/topology.h"
#include "util/log.h"

/* 2 sockets x 32 cores, one NUMA node each, 8 GPUs: 4 per socket. */
static sits_topo_node_info_t dgx8(void)
{
    sits_topo_node_info_t ni;
    memset(&ni, 0, sizeof(ni));
    ni.n_cores = 64;
    ni.n_numa = 2;
    ni.numa_os[0] = 0;
    ni.numa_os[1] = 1;
    ni.numa_first_core[0] = 0;
    ni.numa_first_core[1] = 32;
    ni.numa_n_cores[0] = ni.numa_n_cores[1] = 32;
    ni.n_gpus = 8;
    for (int g = 0; g < 8; g++)
        ni.gpu_numa[g] = g / 4;
    return ni;
}

/* CPU only: n_numa domains of `per` cores each. */
static sits_topo_node_info_t cpu_node(int n_numa, int per)
{
    sits_topo_node_info_t ni;
    memset(&ni, 0, sizeof(ni));
    ni.n_numa = n_numa;
    for (int d = 0; d < n_numa; d++) {
        ni.numa_os[d] = d;
        ni.numa_first_core[d] = d * per;
        ni.numa_n_cores[d] = per;
    }
    ni.n_cores = n_numa * per;
    return ni;
}

/* n_nodes identical nodes, `per_node` ranks each, block mapping (rank r on node r / per_node). */
static sits_status_t plan_block(const sits_topo_node_info_t *ni, int n_nodes, int per_node, int tp, int pp, int dp,
                                sits_placement_t **pl_p)
{
    int world = n_nodes * per_node;
    int node_of[256], local[256];
    sits_topo_node_info_t nodes[16];
    for (int r = 0; r < world; r++) {
        node_of[r] = r / per_node;
        local[r] = r % per_node;
    }
    for (int n = 0; n < n_nodes; n++)
        nodes[n] = *ni;
    return sits_topo_plan(world, node_of, local, n_nodes, nodes, tp, pp, dp, pl_p);
}

/* Ranks on the same node either have disjoint core ranges or are marked shared. */
static void assert_disjoint(const sits_placement_t *pl)
{
    for (int a = 0; a < pl->world_size; a++)
        for (int b = a + 1; b < pl->world_size; b++) {
            const sits_topo_rank_t *x = &pl->ranks[a], *y = &pl->ranks[b];
            if (x->node != y->node || x->shared || y->shared)
                continue;
            int overlap = x->core_first < y->core_first + y->n_cores && y->core_first < x->core_first + x->n_cores;
            if (overlap)
                print_error("ranks %d and %d overlap: cores %d+%d and %d+%d\n", a, b, x->core_first, x->n_cores,
                            y->core_first, y->n_cores);
            assert_false(overlap);
        }
}

static void assert_group(const sits_placement_t *pl, sits_topo_group_t kind, int rank, const int *expect)
{
    int members[64], size = sits_topo_group_size(pl, kind);
    sits_topo_group_of(pl, kind, rank, NULL, NULL, members);
    for (int i = 0; i < size; i++) {
        if (members[i] != expect[i])
            print_error("group kind %d of rank %d: member %d is %d, expected %d\n", kind, rank, i, members[i],
                        expect[i]);
        assert_int_equal(members[i], expect[i]);
    }
}

static void test_dgx8_tp8(void **state)
{
    sits_topo_node_info_t ni = dgx8();
    sits_placement_t *pl = NULL;
    assert_int_equal(plan_block(&ni, 1, 8, 8, 1, 1, &pl), SITS_OK);
    assert_int_equal(pl->tp, 8);
    for (int r = 0; r < 8; r++) {
        const sits_topo_rank_t *x = &pl->ranks[r];
        assert_int_equal(x->gpu, r);
        assert_int_equal(x->numa, r / 4);
        /* 4 ranks share a socket's 32 cores: 8 each, in GPU order */
        assert_int_equal(x->core_first, (r / 4) * 32 + (r % 4) * 8);
        assert_int_equal(x->n_cores, 8);
        assert_int_equal(x->shared, 0);
        assert_int_equal(x->tp_rank, r);
        assert_int_equal(x->pp_rank, 0);
        assert_int_equal(x->dp_rank, 0);
    }
    assert_disjoint(pl);
    static const int all[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    assert_group(pl, SITS_TOPO_GROUP_TP, 5, all);
    assert_int_equal(sits_topo_group_count(pl, SITS_TOPO_GROUP_TP), 1);
    assert_int_equal(sits_topo_group_count(pl, SITS_TOPO_GROUP_DP), 8);
    sits_topo_placement_destroy(pl);
}

static void test_auto_tp(void **state)
{
    sits_topo_node_info_t ni = dgx8();
    sits_placement_t *pl = NULL;
    assert_int_equal(plan_block(&ni, 1, 8, 0, 1, 2, &pl), SITS_OK);
    assert_int_equal(pl->tp, 4);
    assert_int_equal(pl->dp, 2);
    sits_topo_placement_destroy(pl);
}

static void test_tp4_dp2(void **state)
{
    sits_topo_node_info_t ni = dgx8();
    sits_placement_t *pl = NULL;
    assert_int_equal(plan_block(&ni, 1, 8, 4, 1, 2, &pl), SITS_OK);
    for (int r = 0; r < 8; r++) {
        assert_int_equal(pl->ranks[r].tp_rank, r % 4);
        assert_int_equal(pl->ranks[r].dp_rank, r / 4);
        assert_int_equal(pl->ranks[r].gpu, r);
    }
    static const int tp1[4] = {4, 5, 6, 7}, dp2[2] = {2, 6};
    assert_group(pl, SITS_TOPO_GROUP_TP, 6, tp1);
    assert_group(pl, SITS_TOPO_GROUP_DP, 2, dp2);
    int color, key;
    sits_topo_group_of(pl, SITS_TOPO_GROUP_TP, 6, &color, &key, NULL);
    assert_int_equal(color, 1);
    assert_int_equal(key, 2);
    assert_int_equal(sits_topo_layout_rank(pl, 1, 0, 3), 7);
    sits_topo_placement_destroy(pl);
}

static void test_tp2_pp2_dp2(void **state)
{
    sits_topo_node_info_t ni = dgx8();
    sits_placement_t *pl = NULL;
    assert_int_equal(plan_block(&ni, 1, 8, 2, 2, 2, &pl), SITS_OK);
    for (int r = 0; r < 8; r++) {
        assert_int_equal(pl->ranks[r].tp_rank, r % 2);
        assert_int_equal(pl->ranks[r].pp_rank, (r / 2) % 2);
        assert_int_equal(pl->ranks[r].dp_rank, r / 4);
    }
    static const int tp[2] = {2, 3}, pp[2] = {5, 7}, dp[2] = {3, 7};
    assert_group(pl, SITS_TOPO_GROUP_TP, 3, tp);
    assert_group(pl, SITS_TOPO_GROUP_PP, 7, pp);
    assert_group(pl, SITS_TOPO_GROUP_DP, 3, dp);
    assert_int_equal(sits_topo_group_count(pl, SITS_TOPO_GROUP_PP), 4);
    sits_topo_placement_destroy(pl);
}

/* 2 nodes x 8 GPUs, tp 8 pp 2: a TP group per node, PP across the nodes. */
static void test_two_nodes_tp8_pp2(void **state)
{
    sits_topo_node_info_t ni = dgx8();
    sits_placement_t *pl = NULL;
    assert_int_equal(plan_block(&ni, 2, 8, 8, 2, 1, &pl), SITS_OK);
    assert_int_equal(pl->n_nodes, 2);
    for (int r = 0; r < 16; r++) {
        const sits_topo_rank_t *x = &pl->ranks[r];
        assert_int_equal(x->node, r / 8);
        assert_int_equal(x->pp_rank, r / 8);
        assert_int_equal(x->tp_rank, r % 8);
        assert_int_equal(x->gpu, r % 8);
        assert_int_equal(x->core_first, ((r % 8) / 4) * 32 + (r % 4) * 8);
    }
    static const int tp1[8] = {8, 9, 10, 11, 12, 13, 14, 15}, pp3[2] = {3, 11};
    assert_group(pl, SITS_TOPO_GROUP_TP, 12, tp1);
    assert_group(pl, SITS_TOPO_GROUP_PP, 3, pp3);
    assert_disjoint(pl);
    sits_topo_placement_destroy(pl);
}

/* Round-robin (by node) mapping: world ranks alternate nodes; TP groups still stay on a node. */
static void test_round_robin_mapping(void **state)
{
    sits_topo_node_info_t nodes[2] = {dgx8(), dgx8()};
    int node_of[8], local[8];
    sits_placement_t *pl = NULL;
    for (int r = 0; r < 8; r++) {
        node_of[r] = r % 2;
        local[r] = r / 2;
    }
    assert_int_equal(sits_topo_plan(8, node_of, local, 2, nodes, 4, 2, 1, &pl), SITS_OK);
    static const int tp0[4] = {0, 2, 4, 6}, tp1[4] = {1, 3, 5, 7}, pp[2] = {2, 3};
    assert_group(pl, SITS_TOPO_GROUP_TP, 4, tp0);
    assert_group(pl, SITS_TOPO_GROUP_TP, 7, tp1);
    assert_group(pl, SITS_TOPO_GROUP_PP, 3, pp);
    assert_int_equal(pl->ranks[5].gpu, 2);  /* local rank 2 on node 1 */
    assert_int_equal(pl->ranks[5].slot, 6);
    sits_topo_placement_destroy(pl);
}

static void test_refusals(void **state)
{
    sits_topo_node_info_t ni = dgx8();
    sits_placement_t *pl = NULL;
    sits_log_set_level(SITS_LOG_NONE);  /* the refusals log errors by design */
    assert_int_equal(plan_block(&ni, 1, 8, 3, 1, 1, &pl), SITS_ERR_INVALID);   /* 3 != 8 */
    assert_int_equal(plan_block(&ni, 1, 8, 4, 1, 1, &pl), SITS_ERR_INVALID);   /* 4 x 1 x 1 != 8 */
    assert_int_equal(plan_block(&ni, 2, 8, 16, 1, 1, &pl), SITS_ERR_INVALID);  /* tp 16 straddles nodes */
    assert_int_equal(plan_block(&ni, 1, 8, -1, 1, 1, &pl), SITS_ERR_INVALID);
    assert_int_equal(plan_block(&ni, 1, 8, 8, 0, 1, &pl), SITS_ERR_INVALID);
    assert_int_equal(plan_block(&ni, 1, 8, 8, 1, -2, &pl), SITS_ERR_INVALID);
    assert_int_equal(plan_block(&ni, 1, 8, 0, 3, 1, &pl), SITS_ERR_INVALID);   /* 8 % 3: no auto tp */
    assert_int_equal(plan_block(&ni, 2, 6, 4, 3, 1, &pl), SITS_ERR_INVALID);   /* 6 ranks/node, tp 4 */
    int node_of[2] = {0, 0}, local[2] = {0, 0};                               /* local rank twice */
    assert_int_equal(sits_topo_plan(2, node_of, local, 1, &ni, 2, 1, 1, &pl), SITS_ERR_INVALID);
    assert_null(pl);
    sits_log_set_level(SITS_LOG_WARN);
}

/* CPU only, 2 cores: 4 ranks share them (oversubscribed), 2 ranks get one core each. */
static void test_cpu_oversubscribed(void **state)
{
    sits_topo_node_info_t ni = cpu_node(1, 2);
    sits_placement_t *pl = NULL;
    sits_log_set_level(SITS_LOG_NONE);
    assert_int_equal(plan_block(&ni, 1, 4, 4, 1, 1, &pl), SITS_OK);
    sits_log_set_level(SITS_LOG_WARN);
    for (int r = 0; r < 4; r++) {
        assert_int_equal(pl->ranks[r].gpu, -1);
        assert_int_equal(pl->ranks[r].shared, 1);
        assert_int_equal(pl->ranks[r].n_cores, 1);
        assert_int_equal(pl->ranks[r].core_first, r % 2);
        assert_int_equal(pl->ranks[r].numa, 0);
    }
    sits_topo_placement_destroy(pl);
    assert_int_equal(plan_block(&ni, 1, 2, 2, 1, 1, &pl), SITS_OK);
    for (int r = 0; r < 2; r++) {
        assert_int_equal(pl->ranks[r].shared, 0);
        assert_int_equal(pl->ranks[r].core_first, r);
        assert_int_equal(pl->ranks[r].n_cores, 1);
    }
    sits_topo_placement_destroy(pl);
}

/* CPU only, 4 NUMA domains x 4 cores: 8 ranks -> 2 per domain, 3 ranks -> one domain each. */
static void test_cpu_spread_numa(void **state)
{
    sits_topo_node_info_t ni = cpu_node(4, 4);
    sits_placement_t *pl = NULL;
    assert_int_equal(plan_block(&ni, 1, 8, 8, 1, 1, &pl), SITS_OK);
    for (int r = 0; r < 8; r++) {
        assert_int_equal(pl->ranks[r].numa, r / 2);
        assert_int_equal(pl->ranks[r].core_first, (r / 2) * 4 + (r % 2) * 2);
        assert_int_equal(pl->ranks[r].n_cores, 2);
        assert_int_equal(pl->ranks[r].shared, 0);
    }
    sits_topo_placement_destroy(pl);
    assert_int_equal(plan_block(&ni, 1, 3, 3, 1, 1, &pl), SITS_OK);
    for (int r = 0; r < 3; r++) {
        assert_int_equal(pl->ranks[r].numa, r);
        assert_int_equal(pl->ranks[r].core_first, r * 4);
        assert_int_equal(pl->ranks[r].n_cores, 4);
    }
    sits_topo_placement_destroy(pl);
    /* unequal domains (2 and 6 cores), 8 ranks: 2 + 6, nobody shares */
    ni = cpu_node(2, 4);
    ni.numa_n_cores[0] = 2;
    ni.numa_first_core[1] = 2;
    ni.numa_n_cores[1] = 6;
    assert_int_equal(plan_block(&ni, 1, 8, 8, 1, 1, &pl), SITS_OK);
    for (int r = 0; r < 8; r++) {
        assert_int_equal(pl->ranks[r].numa, r < 2 ? 0 : 1);
        assert_int_equal(pl->ranks[r].core_first, r);
        assert_int_equal(pl->ranks[r].shared, 0);
    }
    sits_topo_placement_destroy(pl);
}

/* More ranks than GPUs: the extra ranks get no GPU and the node is spread as CPU-only. */
static void test_more_ranks_than_gpus(void **state)
{
    sits_topo_node_info_t ni = dgx8();
    sits_placement_t *pl = NULL;
    ni.n_gpus = 4;
    sits_log_set_level(SITS_LOG_NONE);
    assert_int_equal(plan_block(&ni, 1, 8, 8, 1, 1, &pl), SITS_OK);
    sits_log_set_level(SITS_LOG_WARN);
    for (int r = 0; r < 8; r++) {
        assert_int_equal(pl->ranks[r].gpu, r < 4 ? r : -1);
        assert_int_equal(pl->ranks[r].numa, r / 4);
        assert_int_equal(pl->ranks[r].core_first, r * 8);
        assert_int_equal(pl->ranks[r].n_cores, 8);
    }
    sits_topo_placement_destroy(pl);
}

/* GPUs whose NUMA node is unknown: spread like CPU-only, GPUs still assigned. 2 ranks, GPUs on
 * socket 1 but unknown for one: ranks go 1 per domain. */
static void test_gpu_unknown_numa(void **state)
{
    sits_topo_node_info_t ni = dgx8();
    sits_placement_t *pl = NULL;
    ni.gpu_numa[1] = -1;
    assert_int_equal(plan_block(&ni, 1, 2, 2, 1, 1, &pl), SITS_OK);
    assert_int_equal(pl->ranks[0].gpu, 0);
    assert_int_equal(pl->ranks[1].gpu, 1);
    assert_int_equal(pl->ranks[0].numa, 0);
    assert_int_equal(pl->ranks[1].numa, 1);
    assert_int_equal(pl->ranks[1].core_first, 32);
    assert_int_equal(pl->ranks[1].n_cores, 32);
    sits_topo_placement_destroy(pl);
    /* both GPUs known on socket 0: both ranks share socket 0's cores */
    ni = dgx8();
    assert_int_equal(plan_block(&ni, 1, 2, 2, 1, 1, &pl), SITS_OK);
    assert_int_equal(pl->ranks[1].numa, 0);
    assert_int_equal(pl->ranks[1].core_first, 16);
    assert_int_equal(pl->ranks[1].n_cores, 16);
    sits_topo_placement_destroy(pl);
}

int main(void)
{
    sits_log_init(-1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dgx8_tp8),          cmocka_unit_test(test_auto_tp),
        cmocka_unit_test(test_tp4_dp2),           cmocka_unit_test(test_tp2_pp2_dp2),
        cmocka_unit_test(test_two_nodes_tp8_pp2), cmocka_unit_test(test_round_robin_mapping),
        cmocka_unit_test(test_refusals),          cmocka_unit_test(test_cpu_oversubscribed),
        cmocka_unit_test(test_cpu_spread_numa),   cmocka_unit_test(test_more_ranks_than_gpus),
        cmocka_unit_test(test_gpu_unknown_numa),
    };
    return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
