/* plan.c -- the pure placement planner: world size, node membership, local ranks and each node's
 * cores/NUMA/GPU locality in; every rank's (dp, pp, tp) coordinates, GPU and core range out.
 * No MPI, no hwloc: unit-tested on hand-made node descriptions. Rules: topology/topology.h. */
#include <stdlib.h>
#include <string.h>
#include "topology/topology.h"
#include "util/log.h"

void sits_topo_placement_destroy(sits_placement_t *pl)
{
    if (!pl)
        return;
    free(pl->ranks);
    free(pl->slot_rank);
    free(pl);
}

/* Splits the m ranks (indexes into local[]) sharing domain d among its cores. */
static void split_domain(const sits_topo_node_info_t *ni, int d, sits_topo_rank_t **members, int m)
{
    int first = ni->numa_first_core[d], n = ni->numa_n_cores[d];
    for (int k = 0; k < m; k++) {
        sits_topo_rank_t *r = members[k];
        r->numa = d;
        if (n <= 0) {
            r->core_first = 0;
            r->n_cores = 0;
        } else if (m <= n) {
            int lo = (int)((long)k * n / m), hi = (int)((long)(k + 1) * n / m);
            r->core_first = first + lo;
            r->n_cores = hi - lo;
            r->shared = 0;
        } else {
            r->core_first = first + k % n;
            r->n_cores = 1;
            r->shared = 1;
        }
    }
}

/* Number of ranks per domain for a CPU-only spread: proportional to the domain's cores, largest
 * remainder first (ties: lower domain). While L <= cores this never gives a domain more ranks than
 * cores: a domain at its cap has a zero remainder. */
static void spread_counts(const sits_topo_node_info_t *ni, int L, int *count)
{
    long C = 0, rem[SITS_TOPO_MAX_NUMA];
    int assigned = 0;
    for (int d = 0; d < ni->n_numa; d++)
        C += ni->numa_n_cores[d];
    for (int d = 0; d < ni->n_numa; d++) {
        count[d] = C ? (int)((long)L * ni->numa_n_cores[d] / C) : (d == 0 ? L : 0);
        rem[d] = C ? (long)L * ni->numa_n_cores[d] % C : 0;
        assigned += count[d];
    }
    for (; assigned < L; assigned++) {  /* fewer than n_numa rounds: each takes a distinct domain */
        int best = 0;
        for (int d = 1; d < ni->n_numa; d++)
            if (rem[d] > rem[best])
                best = d;
        count[best]++;
        rem[best] = -1;
    }
}

/* Places the L local ranks of one node (local[l] is local rank l). */
static void place_node(const sits_topo_node_info_t *ni, int node, sits_topo_rank_t **local, int L)
{
    sits_topo_rank_t *members[L > 0 ? L : 1];
    int gpu_mode = ni->n_gpus > 0 && L <= ni->n_gpus;

    for (int l = 0; l < L; l++) {
        local[l]->gpu = l < ni->n_gpus ? l : -1;
        local[l]->numa = -1;
        local[l]->core_first = 0;
        local[l]->n_cores = 0;
        local[l]->shared = 0;
        if (gpu_mode) {
            int d = ni->gpu_numa[l];
            if (d < 0 || d >= ni->n_numa || ni->numa_n_cores[d] <= 0)
                gpu_mode = 0;
        }
    }
    if (ni->n_gpus > 0 && L > ni->n_gpus)
        SITS_WARN(SITS_SUB_TOPO, "node %d runs %d ranks but has %d gpus: local ranks %d..%d get no gpu", node, L,
                  ni->n_gpus, ni->n_gpus, L - 1);
    if (ni->n_numa <= 0 || ni->n_cores <= 0)
        return;  /* nothing known about the cores: no binding */

    if (gpu_mode) {
        for (int d = 0; d < ni->n_numa; d++) {
            int m = 0;
            for (int l = 0; l < L; l++)
                if (ni->gpu_numa[l] == d)
                    members[m++] = local[l];
            split_domain(ni, d, members, m);
        }
        return;
    }
    int count[SITS_TOPO_MAX_NUMA];
    spread_counts(ni, L, count);
    for (int d = 0, l = 0; d < ni->n_numa; d++) {
        for (int k = 0; k < count[d]; k++)
            members[k] = local[l++];
        split_domain(ni, d, members, count[d]);
    }
}

static int valid_node_info(const sits_topo_node_info_t *ni)
{
    if (ni->n_numa < 0 || ni->n_numa > SITS_TOPO_MAX_NUMA || ni->n_gpus < 0 || ni->n_gpus > SITS_TOPO_MAX_GPUS ||
        ni->n_cores < 0)
        return 0;
    for (int d = 0; d < ni->n_numa; d++)
        if (ni->numa_first_core[d] < 0 || ni->numa_n_cores[d] < 0 ||
            ni->numa_first_core[d] + ni->numa_n_cores[d] > ni->n_cores)
            return 0;
    for (int g = 0; g < ni->n_gpus; g++)
        if (ni->gpu_numa[g] < -1 || ni->gpu_numa[g] >= ni->n_numa)
            return 0;
    return 1;
}

sits_status_t sits_topo_plan(int world_size, const int *node_of_rank, const int *local_rank, int n_nodes,
                             const sits_topo_node_info_t *nodes, int tp, int pp, int dp,
                             sits_placement_t **pl_p)
{
    sits_status_t st = SITS_ERR_INVALID;
    sits_placement_t *pl = NULL;
    int *local_size = NULL, *node_start = NULL;

    if (world_size < 1 || n_nodes < 1 || n_nodes > world_size) {
        SITS_ERROR(SITS_SUB_TOPO, "bad plan input: %d ranks on %d nodes", world_size, n_nodes);
        return SITS_ERR_INVALID;
    }
    if (tp < 0 || pp < 1 || dp < 1) {
        SITS_ERROR(SITS_SUB_TOPO, "--tp must be >= 0 (0: auto), --pp and --dp >= 1; got tp %d pp %d dp %d", tp, pp,
                   dp);
        return SITS_ERR_INVALID;
    }
    if (tp == 0) {
        if (world_size % (pp * dp) != 0) {
            SITS_ERROR(SITS_SUB_TOPO, "cannot choose --tp: %d ranks are not a multiple of pp x dp = %d x %d", world_size,
                       pp, dp);
            return SITS_ERR_INVALID;
        }
        tp = world_size / (pp * dp);
    }
    if ((long)tp * pp * dp != world_size) {
        SITS_ERROR(SITS_SUB_TOPO, "tp x pp x dp = %d x %d x %d = %ld, but the job has %d ranks", tp, pp, dp,
                   (long)tp * pp * dp, world_size);
        return SITS_ERR_INVALID;
    }

    local_size = calloc((size_t)n_nodes, sizeof(*local_size));
    node_start = calloc((size_t)n_nodes + 1, sizeof(*node_start));
    pl = calloc(1, sizeof(*pl));
    if (!local_size || !node_start || !pl)
        goto err_nomem;
    pl->ranks = calloc((size_t)world_size, sizeof(*pl->ranks));
    pl->slot_rank = malloc((size_t)world_size * sizeof(*pl->slot_rank));
    if (!pl->ranks || !pl->slot_rank)
        goto err_nomem;
    pl->world_size = world_size;
    pl->tp = tp;
    pl->pp = pp;
    pl->dp = dp;
    pl->n_nodes = n_nodes;
    pl->self = -1;

    for (int r = 0; r < world_size; r++) {
        if (node_of_rank[r] < 0 || node_of_rank[r] >= n_nodes) {
            SITS_ERROR(SITS_SUB_TOPO, "rank %d: node %d out of range [0, %d)", r, node_of_rank[r], n_nodes);
            goto err;
        }
        local_size[node_of_rank[r]]++;
    }
    for (int n = 0; n < n_nodes; n++) {
        if (local_size[n] == 0 || !valid_node_info(&nodes[n])) {
            SITS_ERROR(SITS_SUB_TOPO, "node %d: %s", n, local_size[n] ? "inconsistent node info" : "no ranks");
            goto err;
        }
        node_start[n + 1] = node_start[n] + local_size[n];
    }
    /* slot = node_start[node] + local rank; each slot taken once */
    for (int s = 0; s < world_size; s++)
        pl->slot_rank[s] = -1;
    for (int r = 0; r < world_size; r++) {
        int n = node_of_rank[r], l = local_rank[r];
        if (l < 0 || l >= local_size[n] || pl->slot_rank[node_start[n] + l] >= 0) {
            SITS_ERROR(SITS_SUB_TOPO, "rank %d: local rank %d is out of range or taken on node %d (%d ranks)", r, l, n,
                       local_size[n]);
            goto err;
        }
        pl->slot_rank[node_start[n] + l] = r;
        sits_topo_rank_t *x = &pl->ranks[r];
        x->world_rank = r;
        x->node = n;
        x->local_rank = l;
        x->local_size = local_size[n];
        x->slot = node_start[n] + l;
        x->tp_rank = x->slot % tp;
        x->pp_rank = (x->slot / tp) % pp;
        x->dp_rank = x->slot / (tp * pp);
    }

    /* A TP group is slots [g*tp, (g+1)*tp): all on one node. */
    for (int g = 0; g < world_size / tp; g++) {
        int n0 = pl->ranks[pl->slot_rank[g * tp]].node;
        int n1 = pl->ranks[pl->slot_rank[g * tp + tp - 1]].node;
        if (n0 != n1) {
            int max_local = 0;
            for (int n = 0; n < n_nodes; n++)
                if (local_size[n] > max_local)
                    max_local = local_size[n];
            if (tp > max_local)
                SITS_ERROR(SITS_SUB_TOPO,
                           "--tp %d is larger than the %d ranks of a node: a tensor-parallel group must stay inside "
                           "one node (its NVLink domain); span nodes with --pp instead (e.g. --tp %d --pp %d)",
                           tp, max_local, max_local, world_size / (max_local * dp) > 0 ? world_size / (max_local * dp) : 1);
            else
                SITS_ERROR(SITS_SUB_TOPO,
                           "tensor-parallel group %d (slots %d..%d) would span nodes %d and %d: node %d runs %d ranks, "
                           "not a multiple of --tp %d", g, g * tp, g * tp + tp - 1, n0, n1, n0, local_size[n0], tp);
            goto err;
        }
    }

    for (int n = 0; n < n_nodes; n++) {
        sits_topo_rank_t **local = malloc((size_t)local_size[n] * sizeof(*local));
        if (!local)
            goto err_nomem;
        for (int l = 0; l < local_size[n]; l++)
            local[l] = &pl->ranks[pl->slot_rank[node_start[n] + l]];
        place_node(&nodes[n], n, local, local_size[n]);
        free(local);
    }
    free(local_size);
    free(node_start);
    *pl_p = pl;
    return SITS_OK;

err_nomem:
    SITS_ERROR(SITS_SUB_TOPO, "out of memory planning %d ranks", world_size);
    st = SITS_ERR_NOMEM;
err:
    sits_topo_placement_destroy(pl);
    free(local_size);
    free(node_start);
    return st;
}

int sits_topo_group_count(const sits_placement_t *pl, sits_topo_group_t kind)
{
    return pl->world_size / sits_topo_group_size(pl, kind);
}

int sits_topo_group_size(const sits_placement_t *pl, sits_topo_group_t kind)
{
    return kind == SITS_TOPO_GROUP_TP ? pl->tp : kind == SITS_TOPO_GROUP_PP ? pl->pp : pl->dp;
}

int sits_topo_layout_rank(const sits_placement_t *pl, int dp_rank, int pp_rank, int tp_rank)
{
    if (dp_rank < 0 || dp_rank >= pl->dp || pp_rank < 0 || pp_rank >= pl->pp || tp_rank < 0 || tp_rank >= pl->tp)
        return -1;
    return pl->slot_rank[(dp_rank * pl->pp + pp_rank) * pl->tp + tp_rank];
}

void sits_topo_group_of(const sits_placement_t *pl, sits_topo_group_t kind, int world_rank, int *color_p,
                        int *key_p, int *ranks_out)
{
    const sits_topo_rank_t *r = &pl->ranks[world_rank];
    int color, key, size = sits_topo_group_size(pl, kind);
    switch (kind) {
    case SITS_TOPO_GROUP_TP:  /* same (dp, pp) */
        color = r->dp_rank * pl->pp + r->pp_rank;
        key = r->tp_rank;
        break;
    case SITS_TOPO_GROUP_PP:  /* same (dp, tp) */
        color = r->dp_rank * pl->tp + r->tp_rank;
        key = r->pp_rank;
        break;
    default:                  /* same (pp, tp) */
        color = r->pp_rank * pl->tp + r->tp_rank;
        key = r->dp_rank;
        break;
    }
    if (color_p)
        *color_p = color;
    if (key_p)
        *key_p = key;
    if (ranks_out)
        for (int i = 0; i < size; i++)
            ranks_out[i] = kind == SITS_TOPO_GROUP_TP   ? sits_topo_layout_rank(pl, r->dp_rank, r->pp_rank, i)
                           : kind == SITS_TOPO_GROUP_PP ? sits_topo_layout_rank(pl, r->dp_rank, i, r->tp_rank)
                                                        : sits_topo_layout_rank(pl, i, r->pp_rank, r->tp_rank);
}
