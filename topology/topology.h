/* topology.h -- where each rank runs: hwloc discovery, rank -> GPU -> NUMA binding, TP/PP/DP
 * group planning, and the `--topology` map.
 *
 * Flow on every rank, after MPI_Init:
 *
 *     sits_topo_t *topo;  sits_placement_t *pl;  int n_cores;
 *     sits_topo_discover(cfg->topology_xml, &topo);               // hwloc (+ CUDA, NVML)
 *     sits_topo_place(MPI_COMM_WORLD, topo, tp, pp, dp, &pl);      // collective; refuses bad flags
 *     sits_topo_bind(topo, pl, &n_cores);                          // a failed bind only warns
 *     sits_topo_report(MPI_COMM_WORLD, topo, pl, json, stdout);    // collective; rank 0 prints
 *     ...
 *     sits_topo_placement_destroy(pl);  sits_topo_destroy(topo);
 *
 * Discovery. GPUs are the NVIDIA PCI devices (vendor 0x10de, class 0x0300/0x0302) that hwloc
 * finds, ordered by PCI bus id (CUDA_DEVICE_ORDER=PCI_BUS_ID). When built with CUDA and the
 * topology is the live machine, the CUDA runtime's device list replaces it when it reports
 * devices (so GPU index i is cudaSetDevice(i), CUDA_VISIBLE_DEVICES included); zero devices or
 * an error falls back to the PCI list. NVLink comes from hwloc's "NVLinkBandwidth" distance
 * matrix when the topology has one (hwloc's NVML plugin, or an XML file: this is how tests inject
 * NVLink peers, see tests/topology/gen_xml.py), else from NVML loaded with dlopen (as NCCL
 * does) on the live machine; neither -> no NVLink information, not an error.
 *
 * NUMA domains: the NUMA nodes that have cores, one per distinct cpuset (memory-only nodes such as
 * HBM or GPU memory are left out). Cores are numbered 0..n_cores-1 in hwloc logical order; each
 * domain owns a contiguous range of them (if the machine breaks that, one domain with every core).
 *
 * Planning (sits_topo_plan, a pure function). Ranks are laid out in node-major "slot" order
 * (node of first appearance, then local rank); under mpirun/srun block mapping slot == world rank.
 *   slot = ((dp_rank * pp) + pp_rank) * tp + tp_rank
 * so a TP group is tp consecutive slots, the PP stages of a replica follow each other (and cross
 * nodes when a node holds fewer than tp*pp ranks), and DP replicas come last. Use the group
 * helpers below rather than assuming consecutive world ranks.
 *   - tp = 0: auto, world / (pp * dp). Negative tp, pp < 1, dp < 1, tp*pp*dp != world: refused.
 *   - A TP group must sit inside one node (its NVLink domain): tp = 16 on 8-rank nodes, or a node
 *     whose rank count is not a multiple of tp, is REFUSED with a message suggesting --pp.
 *   - GPU: local rank l gets GPU l of its node; -1 without GPUs. More local ranks than GPUs: ranks
 *     past the last GPU get -1 (warned) and the node is bound as if CPU-only.
 *   - Cores: with GPUs (each with a known NUMA domain), the cores of a GPU's NUMA domain are split
 *     evenly among the local ranks whose GPUs sit there (disjoint ranges). CPU-only: local ranks are
 *     spread over the NUMA domains in proportion to their cores (consecutive ranks together), then
 *     each domain's cores split among its ranks. A domain with more ranks than cores is
 *     oversubscribed: each of its ranks gets one core, round-robin, and `shared` is set.
 * Binding: hwloc_set_cpubind (the rank's cores, all their PUs, whole process) and
 * hwloc_set_membind (its NUMA domain, HWLOC_MEMBIND_BIND, by nodeset). Not done for a topology
 * loaded from XML (it is not this machine). */
#ifndef SITS_TOPOLOGY_TOPOLOGY_H
#define SITS_TOPOLOGY_TOPOLOGY_H

#include <stdio.h>
#include <mpi.h>
#include <jansson.h>
#include "util/status.h"

#define SITS_TOPO_MAX_GPUS 64
#define SITS_TOPO_MAX_NUMA 64

typedef struct sits_topo sits_topo_t;

/* What the planner needs to know about one node: plain data (sent over MPI as bytes). */
typedef struct {
    int n_cores;                              /* cores this process may use, hwloc logical order */
    int n_numa;                               /* NUMA domains with cores */
    int numa_os[SITS_TOPO_MAX_NUMA];          /* OS index of domain d (-1: unknown, no membind) */
    int numa_first_core[SITS_TOPO_MAX_NUMA];  /* domain d owns cores [first, first + n) */
    int numa_n_cores[SITS_TOPO_MAX_NUMA];
    int n_gpus;
    int gpu_numa[SITS_TOPO_MAX_GPUS];         /* domain index of GPU g, -1: unknown locality */
} sits_topo_node_info_t;

/* One GPU of this machine. */
typedef struct {
    char busid[16];         /* "0000:18:00.0" (lower-case hex) */
    char name[96];          /* model name when known, else "" */
    int numa;               /* domain index, -1 unknown */
} sits_topo_gpu_t;

/* The placement of one rank. */
typedef struct {
    int world_rank;
    int node;               /* 0..n_nodes-1, in order of first appearance in world rank order */
    int local_rank, local_size;
    int slot;               /* node-major position; == world rank under block mapping */
    int tp_rank, pp_rank, dp_rank;
    int gpu;                /* GPU index on its node, -1 none */
    int numa;               /* domain index on its node, -1 none/unknown */
    int core_first, n_cores;/* cores [core_first, core_first + n_cores) of its node; n_cores 0: unknown */
    int shared;             /* 1: oversubscribed, shares its core with other ranks */
} sits_topo_rank_t;

typedef struct {
    int world_size, tp, pp, dp, n_nodes;
    int self;                   /* this process's world rank; -1 for a plan made without MPI */
    sits_topo_rank_t *ranks;    /* [world_size], indexed by world rank */
    int *slot_rank;             /* [world_size] world rank at each slot */
} sits_placement_t;

typedef enum { SITS_TOPO_GROUP_TP = 0, SITS_TOPO_GROUP_PP = 1, SITS_TOPO_GROUP_DP = 2 } sits_topo_group_t;

/* Discovery. xml_path: an hwloc XML file, or NULL for this machine. */
sits_status_t sits_topo_discover(const char *xml_path, sits_topo_t **topo_p);
void sits_topo_destroy(sits_topo_t *topo);

const char *sits_topo_hostname(const sits_topo_t *topo);     /* XML's HostName, else gethostname */
int sits_topo_from_xml(const sits_topo_t *topo);
const sits_topo_node_info_t *sits_topo_node_info(const sits_topo_t *topo);
int sits_topo_gpu_count(const sits_topo_t *topo);
const sits_topo_gpu_t *sits_topo_gpu(const sits_topo_t *topo, int gpu);
/* NVLink bandwidth GPU a -> GPU b in GB/s per direction (direct links plus the links both have to
 * common NVSwitches); 0: none known. *via_switch_p (may be NULL) is set when NVSwitches carry it. */
double sits_topo_nvlink_gbps(const sits_topo_t *topo, int a, int b, int *via_switch_p);
const char *sits_topo_nvlink_source(const sits_topo_t *topo);  /* "hwloc", "nvml" or "none" */
int sits_topo_package_count(const sits_topo_t *topo);
/* hwloc list string of the PU OS indexes of cores [first, first+n): "0-7,64-71". */
sits_status_t sits_topo_cores_pus(const sits_topo_t *topo, int core_first, int n_cores, char *buf, size_t len);

/* Pure planner (no MPI, no hwloc). node_of_rank, local_rank: [world_size]; nodes: [n_nodes].
 * Refusals return SITS_ERR_INVALID with an error logged. */
sits_status_t sits_topo_plan(int world_size, const int *node_of_rank, const int *local_rank, int n_nodes,
                             const sits_topo_node_info_t *nodes, int tp, int pp, int dp,
                             sits_placement_t **pl_p);
void sits_topo_placement_destroy(sits_placement_t *pl);

/* Group helpers. The group of kind `kind` containing world rank r: its index (0..n_groups-1, a
 * colour for MPI_Comm_split), the rank's position in it (the key), and the world ranks of the
 * members in group order (ranks_out: [tp], [pp] or [dp] entries; may be NULL). */
int sits_topo_group_count(const sits_placement_t *pl, sits_topo_group_t kind);
int sits_topo_group_size(const sits_placement_t *pl, sits_topo_group_t kind);
void sits_topo_group_of(const sits_placement_t *pl, sits_topo_group_t kind, int world_rank,
                        int *color_p, int *key_p, int *ranks_out);
/* World rank at layout coordinates (dp_rank, pp_rank, tp_rank). */
int sits_topo_layout_rank(const sits_placement_t *pl, int dp_rank, int pp_rank, int tp_rank);

/* Collective over `world`: gathers every rank's node (MPI_Comm_split_type SHARED) and local rank,
 * and each node's info, then plans. Every rank gets the same placement (with self set). */
sits_status_t sits_topo_place(MPI_Comm world, const sits_topo_t *topo, int tp, int pp, int dp,
                              sits_placement_t **pl_p);

/* Binds this process (pl->self) to its cores and NUMA domain. A failed bind is a warning; a
 * topology from XML is not bound. *n_cores_p (may be NULL): the cores this rank was given (the CPU
 * backend's thread count); 0 when unknown. */
sits_status_t sits_topo_bind(const sits_topo_t *topo, const sits_placement_t *pl, int *n_cores_p);

/* Collective over `world`: the CPU threads this rank should run. The cores of its current binding
 * (sits_topo_bind's, or what the launcher set: mpirun --bind-to, a Slurm cpuset, taskset; the whole
 * machine when unbound), each counted 1/k when k ranks of the node have it in theirs; at least 1.
 * *n_share_p (may be NULL): the most ranks sharing one of its cores. Two ranks left unbound on two
 * cores get 1 thread each, not 2 (oversubscribed OpenMP teams run many times slower). A topology
 * loaded from XML is not this machine's: *threads_p = 0 (unknown). */
sits_status_t sits_topo_rank_threads(MPI_Comm world, const sits_topo_t *topo, int *threads_p, int *n_share_p);

/* Reports. A record describes one rank (host, node summary, GPU, NVLink peers, NUMA, cores);
 * the document holds the layout, the groups and every rank's record. */
sits_status_t sits_topo_report_record(const sits_topo_t *topo, const sits_placement_t *pl, int world_rank,
                                      json_t **rec_p);
/* records: [pl->world_size], borrowed. */
sits_status_t sits_topo_report_doc(const sits_placement_t *pl, json_t *const *records, json_t **doc_p);
void sits_topo_report_text(FILE *out, const json_t *doc);
void sits_topo_report_json(FILE *out, const json_t *doc);
/* Collective: every rank sends its record to rank 0 of `comm`, which prints the map (json: 0 text,
 * 1 JSON) to out. Other ranks print nothing. */
sits_status_t sits_topo_report(MPI_Comm comm, const sits_topo_t *topo, const sits_placement_t *pl, int json,
                               FILE *out);

#endif
