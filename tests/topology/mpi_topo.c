/* mpi_topo.c -- discover + place + bind + report under MPI (driven by mpi_topo.sh).
 * usage: mpi_topo XML|- TP PP DP text|json
 * Prints the map on rank 0 and, on every rank, "rank R bound_cores N gpu G" and (live topology)
 * "rank R pus P cpubind Q": the PUs it was given and the binding the OS reports afterwards.
 * Exits 1 on a refusal. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <mpi.h>
#include <hwloc.h>
#include "topology/topology.h"
#include "util/log.h"

int main(int argc, char **argv)
{
    int rank, rc = 0, n_cores = 0;
    sits_topo_t *topo = NULL;
    sits_placement_t *pl = NULL;
    if (argc != 6) {
        fprintf(stderr, "usage: %s XML|- TP PP DP text|json\n", argv[0]);
        return 2;
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    sits_log_init(rank);
    if (sits_topo_discover(strcmp(argv[1], "-") ? argv[1] : NULL, &topo) != SITS_OK ||
        sits_topo_place(MPI_COMM_WORLD, topo, atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), &pl) != SITS_OK) {
        rc = 1;
        goto out;
    }
    if (sits_topo_bind(topo, pl, &n_cores) != SITS_OK)
        rc = 1;
    if (sits_topo_report(MPI_COMM_WORLD, topo, pl, !strcmp(argv[5], "json"), stdout) != SITS_OK)
        rc = 1;
    MPI_Barrier(MPI_COMM_WORLD);
    if (!strcmp(argv[5], "text")) {
        printf("rank %d bound_cores %d gpu %d\n", rank, n_cores, pl->ranks[rank].gpu);
        if (!sits_topo_from_xml(topo)) {
            char want[256] = "", got[256] = "";
            hwloc_topology_t hw;
            hwloc_bitmap_t set = hwloc_bitmap_alloc();
            sits_topo_cores_pus(topo, pl->ranks[rank].core_first, pl->ranks[rank].n_cores, want, sizeof(want));
            if (hwloc_topology_init(&hw) == 0 && hwloc_topology_load(hw) == 0 &&
                hwloc_get_cpubind(hw, set, HWLOC_CPUBIND_PROCESS) == 0)
                hwloc_bitmap_list_snprintf(got, sizeof(got), set);
            hwloc_topology_destroy(hw);
            hwloc_bitmap_free(set);
            printf("rank %d pus %s cpubind %s\n", rank, want, got);
        }
    }
    fflush(stdout);
out:
    sits_topo_placement_destroy(pl);
    sits_topo_destroy(topo);
    MPI_Finalize();
    return rc;
}
