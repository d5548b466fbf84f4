/* topo_impl.h -- the inside of sits_topo_t, shared by the topology/ sources only. */
#ifndef SITS_TOPOLOGY_TOPO_IMPL_H
#define SITS_TOPOLOGY_TOPO_IMPL_H

#include <stdint.h>
#include <hwloc.h>
#include "topology/topology.h"

struct sits_topo {
    hwloc_topology_t hw;
    int from_xml;
    char hostname[256];
    hwloc_obj_type_t core_type;                        /* HWLOC_OBJ_CORE, or PU where there are no cores */
    int n_packages;
    sits_topo_node_info_t info;
    hwloc_bitmap_t numa_set[SITS_TOPO_MAX_NUMA];       /* cpuset of domain d */
    hwloc_bitmap_t numa_nodeset[SITS_TOPO_MAX_NUMA];   /* nodeset of domain d (membind) */
    sits_topo_gpu_t gpus[SITS_TOPO_MAX_GPUS];
    uint64_t gpu_bdf[SITS_TOPO_MAX_GPUS];              /* (domain<<16 | bus<<8 | dev) << 8 | function */
    const char *nvlink_source;                          /* "hwloc", "nvml", "none" */
    double nvlink_gbps[SITS_TOPO_MAX_GPUS][SITS_TOPO_MAX_GPUS];
    unsigned char nvlink_via_switch[SITS_TOPO_MAX_GPUS][SITS_TOPO_MAX_GPUS];
};

/* cpuset of cores [core_first, core_first + n_cores) (all their PUs) into set. */
sits_status_t sits_topo_cores_cpuset(const sits_topo_t *topo, int core_first, int n_cores, hwloc_bitmap_t set);

#endif
