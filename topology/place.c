/* place.c -- the MPI side of placement (who shares a node with whom, each node's description)
 * and binding this process to its cores and NUMA domain with hwloc. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <hwloc.h>
#include "topology/topology.h"
#include "topology/topo_impl.h"
#include "util/check.h"
#include "util/log.h"

sits_status_t sits_topo_place(MPI_Comm world, const sits_topo_t *topo, int tp, int pp, int dp,
                              sits_placement_t **pl_p)
{
    sits_status_t st = SITS_OK;
    MPI_Comm local = MPI_COMM_NULL;
    int rank, size, local_rank, leader, n_nodes = 0;
    int *mine = NULL, *all = NULL, *node_of = NULL, *local_of = NULL;
    sits_topo_node_info_t *infos = NULL, *nodes = NULL;
    sits_placement_t *pl = NULL;

    SITS_MPI_CHECK(MPI_Comm_rank(world, &rank));
    SITS_MPI_CHECK(MPI_Comm_size(world, &size));
    SITS_MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local));
    SITS_MPI_CHECK_GOTO(MPI_Comm_rank(local, &local_rank), st, out);
    /* a node is named by the world rank of its local rank 0 */
    leader = rank;
    SITS_MPI_CHECK_GOTO(MPI_Bcast(&leader, 1, MPI_INT, 0, local), st, out);

    all = malloc((size_t)size * 2 * sizeof(*all));
    node_of = malloc((size_t)size * sizeof(*node_of));
    local_of = malloc((size_t)size * sizeof(*local_of));
    infos = malloc((size_t)size * sizeof(*infos));
    nodes = malloc((size_t)size * sizeof(*nodes));
    mine = malloc(2 * sizeof(*mine));
    if (!all || !node_of || !local_of || !infos || !nodes || !mine) {
        SITS_ERROR(SITS_SUB_TOPO, "out of memory gathering the placement of %d ranks", size);
        st = SITS_ERR_NOMEM;
        goto out;
    }
    mine[0] = leader;
    mine[1] = local_rank;
    SITS_MPI_CHECK_GOTO(MPI_Allgather(mine, 2, MPI_INT, all, 2, MPI_INT, world), st, out);
    SITS_MPI_CHECK_GOTO(MPI_Allgather(&topo->info, (int)sizeof(topo->info), MPI_BYTE, infos, (int)sizeof(topo->info),
                                      MPI_BYTE, world), st, out);

    /* nodes numbered in order of first appearance; each described by its leader */
    for (int r = 0; r < size; r++) {
        int n = -1;
        for (int q = 0; q < r; q++)
            if (all[2 * q] == all[2 * r]) {
                n = node_of[q];
                break;
            }
        if (n < 0) {
            n = n_nodes++;
            nodes[n] = infos[all[2 * r]];
        }
        node_of[r] = n;
        local_of[r] = all[2 * r + 1];
    }
    for (int r = 0; r < size; r++)
        if (memcmp(&infos[r], &nodes[node_of[r]], sizeof(infos[r])) != 0 && r == rank)
            SITS_WARN(SITS_SUB_TOPO, "rank %d sees a different topology than its node's first rank: using that one",
                      rank);

    SITS_CHECK_GOTO(sits_topo_plan(size, node_of, local_of, n_nodes, nodes, tp, pp, dp, &pl), st, out);
    pl->self = rank;
    *pl_p = pl;
out:
    if (local != MPI_COMM_NULL)
        MPI_Comm_free(&local);
    free(mine);
    free(all);
    free(node_of);
    free(local_of);
    free(infos);
    free(nodes);
    return st;
}

sits_status_t sits_topo_bind(const sits_topo_t *topo, const sits_placement_t *pl, int *n_cores_p)
{
    const sits_topo_rank_t *r;
    hwloc_bitmap_t set;
    char pus[256];

    if (n_cores_p)
        *n_cores_p = 0;
    if (pl->self < 0 || pl->self >= pl->world_size)
        return SITS_ERR_INVALID;
    r = &pl->ranks[pl->self];
    if (n_cores_p)
        *n_cores_p = r->n_cores;
    if (r->n_cores <= 0) {
        SITS_WARN(SITS_SUB_TOPO, "rank %d: no cores known for this rank: not bound", pl->self);
        return SITS_OK;
    }
    set = hwloc_bitmap_alloc();
    if (!set)
        return SITS_ERR_NOMEM;
    if (sits_topo_cores_cpuset(topo, r->core_first, r->n_cores, set) != SITS_OK) {
        SITS_ERROR(SITS_SUB_TOPO, "rank %d: cores %d..%d are not on this machine (%d cores)", pl->self, r->core_first,
                   r->core_first + r->n_cores - 1, topo->info.n_cores);
        hwloc_bitmap_free(set);
        return SITS_ERR_INVALID;
    }
    hwloc_bitmap_list_snprintf(pus, sizeof(pus), set);
    if (r->shared)
        SITS_WARN(SITS_SUB_TOPO, "rank %d: node oversubscribed (%d ranks): shares pu %s with other ranks", pl->self,
                  r->local_size, pus);
    if (topo->from_xml) {
        SITS_INFO(SITS_SUB_TOPO, "rank %d: topology from xml, not binding (would be gpu %d numa %d pus %s)", pl->self,
                  r->gpu, r->numa >= 0 ? topo->info.numa_os[r->numa] : -1, pus);
        hwloc_bitmap_free(set);
        return SITS_OK;
    }
    if (hwloc_set_cpubind(topo->hw, set, HWLOC_CPUBIND_PROCESS) < 0)
        SITS_WARN(SITS_SUB_TOPO, "rank %d: hwloc_set_cpubind(%s) failed: %s; running unbound", pl->self, pus,
                  strerror(errno));
    /* one NUMA node: nothing to choose (and kernels without NUMA support refuse the call) */
    if (topo->info.n_numa > 1 && r->numa >= 0 && topo->info.numa_os[r->numa] >= 0 &&
        hwloc_set_membind(topo->hw, topo->numa_nodeset[r->numa], HWLOC_MEMBIND_BIND,
                          HWLOC_MEMBIND_PROCESS | HWLOC_MEMBIND_BYNODESET) < 0)
        SITS_WARN(SITS_SUB_TOPO, "rank %d: hwloc_set_membind(numa %d) failed: %s", pl->self,
                  topo->info.numa_os[r->numa], strerror(errno));
    SITS_INFO(SITS_SUB_TOPO, "rank %d bound to gpu %d numa %d pus %s", pl->self, r->gpu,
              r->numa >= 0 ? topo->info.numa_os[r->numa] : -1, pus);
    hwloc_bitmap_free(set);
    return SITS_OK;
}

/* The cores (logical indexes of topo->core_type objects) that intersect this process's current CPU
 * binding, as a bit array of `words` 64-bit words. */
static sits_status_t bound_core_bits(const sits_topo_t *topo, uint64_t *bits, int words, int *n_p)
{
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (!set) return SITS_ERR_NOMEM;
    int n = 0;
    if (hwloc_get_cpubind(topo->hw, set, HWLOC_CPUBIND_PROCESS) < 0) {   /* unknown: all of the machine */
        hwloc_bitmap_copy(set, hwloc_topology_get_topology_cpuset(topo->hw));
    }
    int n_cores = hwloc_get_nbobjs_by_type(topo->hw, topo->core_type);
    for (int i = 0; i < n_cores && i < 64 * words; i++) {
        hwloc_obj_t o = hwloc_get_obj_by_type(topo->hw, topo->core_type, (unsigned)i);
        if (o && o->cpuset && hwloc_bitmap_intersects(o->cpuset, set)) {
            bits[i / 64] |= 1ull << (i % 64);
            n++;
        }
    }
    hwloc_bitmap_free(set);
    *n_p = n;
    return SITS_OK;
}

sits_status_t sits_topo_rank_threads(MPI_Comm world, const sits_topo_t *topo, int *threads_p, int *n_share_p)
{
    sits_status_t st = SITS_OK;
    MPI_Comm local = MPI_COMM_NULL;
    uint64_t *all = NULL;
    int rank, n_local, me, n_mine = 0;
    int n_cores = hwloc_get_nbobjs_by_type(topo->hw, topo->core_type);
    int words = n_cores > 0 ? (n_cores + 63) / 64 : 1;
    *threads_p = 0;
    if (n_share_p) *n_share_p = 0;
    if (topo->from_xml) return SITS_OK;   /* not this machine's binding: unknown (every rank alike) */
    uint64_t *mine = calloc((size_t)words, sizeof *mine);
    if (!mine) return SITS_ERR_NOMEM;
    SITS_MPI_CHECK_GOTO(MPI_Comm_rank(world, &rank), st, out);
    SITS_MPI_CHECK_GOTO(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local), st, out);
    SITS_MPI_CHECK_GOTO(MPI_Comm_size(local, &n_local), st, out);
    SITS_MPI_CHECK_GOTO(MPI_Comm_rank(local, &me), st, out);
    SITS_CHECK_GOTO(bound_core_bits(topo, mine, words, &n_mine), st, out);
    all = malloc((size_t)n_local * (size_t)words * sizeof *all);
    if (!all) {
        st = SITS_ERR_NOMEM;
        goto out;
    }
    /* every rank of the node describes the machine the same way (same hwloc topology) */
    SITS_MPI_CHECK_GOTO(MPI_Allgather(mine, words, MPI_UINT64_T, all, words, MPI_UINT64_T, local), st, out);
    double share = 0;
    int most = 1;
    for (int i = 0; i < 64 * words; i++) {
        if (!(mine[i / 64] >> (i % 64) & 1)) continue;
        int k = 0;
        for (int q = 0; q < n_local; q++) k += (int)(all[(size_t)q * (size_t)words + (size_t)(i / 64)] >> (i % 64) & 1);
        share += 1.0 / k;
        if (k > most) most = k;
    }
    int threads = (int)(share + 1e-9);
    *threads_p = threads > 0 ? threads : 1;
    if (n_share_p) *n_share_p = most;
    SITS_INFO(SITS_SUB_TOPO, "rank %d: %d cores in its binding, shared by up to %d ranks of the node: %d threads", rank,
              n_mine, most, *threads_p);
out:
    if (local != MPI_COMM_NULL) MPI_Comm_free(&local);
    free(all);
    free(mine);
    return st;
}
