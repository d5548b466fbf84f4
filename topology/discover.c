/* discover.c -- hwloc discovery of one machine: NUMA domains and their core ranges, NVIDIA GPUs
 * and their NUMA locality, NVLink bandwidth between GPUs (hwloc "NVLinkBandwidth" distances, or
 * NVML through dlopen), and the CUDA runtime's view of the GPUs when built with CUDA.
 * Invariants: domains own disjoint, contiguous core ranges covering every core (else one domain
 * holds them all); GPU order is the CUDA device order (live, CUDA reporting devices) or PCI bus
 * order; nvlink[a][b] is GB/s per direction, symmetric, 0 on the diagonal. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <hwloc.h>
#ifdef HAVE_CUDA
#include <cuda_runtime.h>
#endif
#include "topology/topology.h"
#include "topology/topo_impl.h"
#include "util/log.h"

/* Endpoints of the NVLink graph: GPUs [0, n_gpus) then hubs (NVSwitches). bw in MB/s. */
#define SITS_TOPO_MAX_EP (SITS_TOPO_MAX_GPUS + 32)
typedef struct {
    int n_hubs;
    uint32_t hub_bdf[SITS_TOPO_MAX_EP];  /* domain<<16 | bus<<8 | dev (function dropped) */
    uint64_t bw[SITS_TOPO_MAX_GPUS][SITS_TOPO_MAX_EP];
} nvl_graph_t;

static uint32_t bdf_key(unsigned domain, unsigned bus, unsigned dev)
{
    return (domain & 0xffff) << 16 | (bus & 0xff) << 8 | (dev & 0xff);
}

static int gpu_by_bdf(const sits_topo_t *t, uint32_t key)
{
    for (int g = 0; g < t->info.n_gpus; g++)
        if ((t->gpu_bdf[g] >> 8) == key)  /* gpu_bdf keeps the function in the low byte */
            return g;
    return -1;
}

static int hub_index(nvl_graph_t *nv, int n_gpus, uint32_t key)
{
    for (int h = 0; h < nv->n_hubs; h++)
        if (nv->hub_bdf[h] == key)
            return n_gpus + h;
    if (n_gpus + nv->n_hubs >= SITS_TOPO_MAX_EP)
        return -1;
    nv->hub_bdf[nv->n_hubs] = key;
    return n_gpus + nv->n_hubs++;
}

/* GPU-to-GPU bandwidth = direct links + sum over hubs of min(a->hub, b->hub). */
static void nvl_finish(sits_topo_t *t, const nvl_graph_t *nv)
{
    int n = t->info.n_gpus;
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++) {
            uint64_t direct = a == b ? 0 : nv->bw[a][b], sw = 0;
            for (int h = 0; h < nv->n_hubs && a != b; h++) {
                uint64_t x = nv->bw[a][n + h], y = nv->bw[b][n + h];
                sw += x < y ? x : y;
            }
            t->nvlink_gbps[a][b] = (double)(direct + sw) / 1000.0;
            t->nvlink_via_switch[a][b] = sw > 0;
        }
}

/* hwloc's NVLinkBandwidth matrix (MB/s): objects are GPU OS devices, GPU PCI devices, NVSwitch PCI
 * devices, or CPU-side objects (POWER, ignored). */
static int nvlink_from_hwloc(sits_topo_t *t, nvl_graph_t *nv)
{
    struct hwloc_distances_s *d[4];
    unsigned nr = 4;
    int found = 0;
    if (hwloc_distances_get_by_name(t->hw, "NVLinkBandwidth", &nr, d, 0) < 0 || nr == 0)
        return 0;
    struct hwloc_distances_s *m = d[0];
    int ep[SITS_TOPO_MAX_EP * 2];
    unsigned nobj = m->nbobjs < SITS_TOPO_MAX_EP * 2 ? m->nbobjs : SITS_TOPO_MAX_EP * 2;
    for (unsigned i = 0; i < nobj; i++) {
        hwloc_obj_t o = m->objs[i];
        ep[i] = -1;
        while (o && o->type == HWLOC_OBJ_OS_DEVICE)
            o = o->parent;
        if (!o || o->type != HWLOC_OBJ_PCI_DEVICE)
            continue;
        uint32_t key = bdf_key(o->attr->pcidev.domain, o->attr->pcidev.bus, o->attr->pcidev.dev);
        ep[i] = gpu_by_bdf(t, key);
        if (ep[i] < 0 && (o->attr->pcidev.class_id >> 8) == 0x06)  /* a bridge: NVSwitch */
            ep[i] = hub_index(nv, t->info.n_gpus, key);
    }
    for (unsigned i = 0; i < nobj; i++)
        for (unsigned j = 0; j < nobj; j++) {
            uint64_t v = m->values[i * m->nbobjs + j];
            if (i == j || ep[i] < 0 || ep[j] < 0 || ep[i] >= t->info.n_gpus || !v)
                continue;
            nv->bw[ep[i]][ep[j]] = v;
            found = 1;
        }
    for (unsigned k = 0; k < nr; k++)
        hwloc_distances_release(t->hw, d[k]);
    return found;
}

/* NVML through dlopen: only the few entry points we need, with their types copied from nvml.h. */
typedef struct nvml_dev *nvml_dev_t;
typedef struct {
    char bus_id_legacy[16];
    unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
    char reserved[64];  /* room for layouts we do not know */
} nvml_pci_t;

typedef struct {
    int (*init)(void);
    int (*shutdown)(void);
    int (*by_busid)(const char *, nvml_dev_t *);
    int (*link_state)(nvml_dev_t, unsigned, int *);
    int (*link_remote)(nvml_dev_t, unsigned, nvml_pci_t *);
    int (*link_version)(nvml_dev_t, unsigned, unsigned *);
    int (*name)(nvml_dev_t, char *, unsigned);
} nvml_fns_t;

/* MB/s per direction per link from nvmlDeviceGetNvLinkVersion, whose values are nvml.h's
 * nvmlNvlinkVersion_t: 1 = 1.0 (P100, 20 GB/s), 2 = 2.0, 3 = 2.2, 4 = 3.0, 5 = 3.1, 6 = 4.0 (V100 to
 * H100/H200, 25 GB/s as hwloc's NVML plugin counts them), 7 = 5.0 (Blackwell, 50 GB/s). */
static uint64_t nvlink_link_mbps(unsigned version)
{
    return version == 1 ? 20000 : version >= 7 ? 50000 : 25000;
}

static int nvlink_from_nvml(sits_topo_t *t, nvl_graph_t *nv)
{
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    nvml_fns_t f;
    int found = 0;
    if (!lib) {
        SITS_DEBUG(SITS_SUB_TOPO, "no nvml (%s): no nvlink information", dlerror());
        return 0;
    }
    *(void **)&f.init = dlsym(lib, "nvmlInit_v2");
    *(void **)&f.shutdown = dlsym(lib, "nvmlShutdown");
    *(void **)&f.by_busid = dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2");
    *(void **)&f.link_state = dlsym(lib, "nvmlDeviceGetNvLinkState");
    *(void **)&f.link_remote = dlsym(lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
    *(void **)&f.link_version = dlsym(lib, "nvmlDeviceGetNvLinkVersion");
    *(void **)&f.name = dlsym(lib, "nvmlDeviceGetName");
    if (!f.init || !f.shutdown || !f.by_busid || !f.link_state || !f.link_remote) {
        SITS_WARN(SITS_SUB_TOPO, "libnvidia-ml.so.1 lacks the nvlink entry points: no nvlink information");
        goto out_close;
    }
    if (f.init() != 0) {
        SITS_WARN(SITS_SUB_TOPO, "nvmlInit_v2 failed: no nvlink information");
        goto out_close;
    }
    for (int g = 0; g < t->info.n_gpus; g++) {
        nvml_dev_t dev;
        if (f.by_busid(t->gpus[g].busid, &dev) != 0)
            continue;
        if (!t->gpus[g].name[0] && f.name)
            f.name(dev, t->gpus[g].name, sizeof(t->gpus[g].name));
        for (unsigned link = 0; link < 64; link++) {
            int active = 0;
            unsigned version = 0;
            nvml_pci_t pci;
            if (f.link_state(dev, link, &active) != 0)
                break;  /* past the last link */
            memset(&pci, 0, sizeof(pci));
            if (!active || f.link_remote(dev, link, &pci) != 0)
                continue;
            if (!f.link_version || f.link_version(dev, link, &version) != 0)
                version = 0;  /* unknown: counted at 25 GB/s */
            uint32_t key = bdf_key(pci.domain, pci.bus, pci.device);
            int peer = gpu_by_bdf(t, key);
            if (peer < 0)  /* not one of our GPUs: an NVSwitch (or a GPU hidden from us) */
                peer = hub_index(nv, t->info.n_gpus, key);
            if (peer < 0 || peer == g)
                continue;
            nv->bw[g][peer] += nvlink_link_mbps(version);
            SITS_DEBUG(SITS_SUB_TOPO, "gpu %d nvlink %u: version %u to %04x:%02x:%02x (%s)", g, link, version,
                       pci.domain & 0xffff, pci.bus & 0xff, pci.device & 0xff, peer < t->info.n_gpus ? "gpu" : "switch");
            found = 1;
        }
    }
    f.shutdown();
out_close:
    dlclose(lib);
    return found;
}

/* Domains: NUMA nodes with cores and a cpuset not seen before, in logical order. */
static void find_domains(sits_topo_t *t)
{
    sits_topo_node_info_t *ni = &t->info;
    int ok = 1, covered = 0;
    ni->n_numa = 0;
    for (hwloc_obj_t n = NULL; (n = hwloc_get_next_obj_by_type(t->hw, HWLOC_OBJ_NUMANODE, n));) {
        int first = -1, count = 0, dup = 0;
        if (!n->cpuset || hwloc_bitmap_iszero(n->cpuset))
            continue;
        for (int d = 0; d < ni->n_numa; d++)
            if (hwloc_bitmap_isequal(t->numa_set[d], n->cpuset))
                dup = 1;
        if (dup)
            continue;
        if (ni->n_numa == SITS_TOPO_MAX_NUMA) {
            ok = 0;
            break;
        }
        for (int c = 0; c < ni->n_cores; c++) {
            hwloc_obj_t core = hwloc_get_obj_by_type(t->hw, t->core_type, (unsigned)c);
            if (!hwloc_bitmap_isincluded(core->cpuset, n->cpuset))
                continue;
            if (first < 0)
                first = c;
            else if (c != first + count)
                ok = 0;  /* not contiguous */
            count++;
        }
        if (count == 0)
            continue;
        t->numa_set[ni->n_numa] = hwloc_bitmap_dup(n->cpuset);
        t->numa_nodeset[ni->n_numa] = hwloc_bitmap_dup(n->nodeset);
        ni->numa_os[ni->n_numa] = (int)n->os_index;
        ni->numa_first_core[ni->n_numa] = first;
        ni->numa_n_cores[ni->n_numa] = count;
        covered += count;
        ni->n_numa++;
    }
    if (ok && covered == ni->n_cores && ni->n_numa > 0)
        return;
    SITS_WARN(SITS_SUB_TOPO, "numa nodes do not split the %d cores into ranges: treating the machine as one domain",
              ni->n_cores);
    for (int d = 0; d < ni->n_numa; d++) {
        hwloc_bitmap_free(t->numa_set[d]);
        hwloc_bitmap_free(t->numa_nodeset[d]);
    }
    t->numa_set[0] = hwloc_bitmap_dup(hwloc_topology_get_topology_cpuset(t->hw));
    t->numa_nodeset[0] = hwloc_bitmap_dup(hwloc_topology_get_topology_nodeset(t->hw));
    ni->n_numa = 1;
    ni->numa_os[0] = -1;
    ni->numa_first_core[0] = 0;
    ni->numa_n_cores[0] = ni->n_cores;
}

/* The domain a device's locality cpuset falls in: the single domain it intersects, else -1. */
static int domain_of(const sits_topo_t *t, hwloc_const_cpuset_t set)
{
    int found = -1;
    if (!set || hwloc_bitmap_iszero(set))
        return -1;
    for (int d = 0; d < t->info.n_numa; d++)
        if (hwloc_bitmap_intersects(set, t->numa_set[d])) {
            if (found >= 0)
                return -1;
            found = d;
        }
    return found;
}

static int is_nvidia_gpu(hwloc_obj_t o)
{
    return o->attr->pcidev.vendor_id == 0x10de &&
           (o->attr->pcidev.class_id == 0x0302 || o->attr->pcidev.class_id == 0x0300);
}

static void add_gpu(sits_topo_t *t, hwloc_obj_t pci, unsigned domain, unsigned bus, unsigned dev, unsigned fn)
{
    int g = t->info.n_gpus;
    if (g == SITS_TOPO_MAX_GPUS)
        return;
    sits_topo_gpu_t *x = &t->gpus[g];
    snprintf(x->busid, sizeof(x->busid), "%04x:%02x:%02x.%x", domain & 0xffff, bus & 0xff, dev & 0x1f, fn & 7);
    t->gpu_bdf[g] = (uint64_t)bdf_key(domain, bus, dev) << 8 | (fn & 0xff);
    x->name[0] = '\0';
    x->numa = -1;
    if (pci) {
        const char *name = NULL;
        for (hwloc_obj_t c = pci->io_first_child; c && !name; c = c->next_sibling)
            name = hwloc_obj_get_info_by_name(c, "GPUModel");
        if (!name)
            name = hwloc_obj_get_info_by_name(pci, "PCIDevice");
        if (name)
            snprintf(x->name, sizeof(x->name), "%s", name);
        hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t->hw, pci);
        x->numa = anc ? domain_of(t, anc->cpuset) : -1;
    }
    t->info.gpu_numa[g] = x->numa;
    t->info.n_gpus++;
}

static int cmp_pci(const void *a, const void *b)
{
    hwloc_obj_t x = *(hwloc_obj_t const *)a, y = *(hwloc_obj_t const *)b;
    unsigned long kx = (unsigned long)x->attr->pcidev.domain << 24 | x->attr->pcidev.bus << 16 |
                       x->attr->pcidev.dev << 8 | x->attr->pcidev.func;
    unsigned long ky = (unsigned long)y->attr->pcidev.domain << 24 | y->attr->pcidev.bus << 16 |
                       y->attr->pcidev.dev << 8 | y->attr->pcidev.func;
    return kx < ky ? -1 : kx > ky;
}

static void find_gpus_pci(sits_topo_t *t)
{
    hwloc_obj_t list[SITS_TOPO_MAX_GPUS];
    int n = 0;
    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_pcidev(t->hw, o));)
        if (is_nvidia_gpu(o) && n < SITS_TOPO_MAX_GPUS)
            list[n++] = o;
    qsort(list, (size_t)n, sizeof(list[0]), cmp_pci);
    for (int i = 0; i < n; i++)
        add_gpu(t, list[i], list[i]->attr->pcidev.domain, list[i]->attr->pcidev.bus, list[i]->attr->pcidev.dev,
                list[i]->attr->pcidev.func);
}

#ifdef HAVE_CUDA
/* The CUDA runtime's devices in CUDA order. Returns 0 when it reports none (then the PCI list
 * stays: a machine without a driver, or a build machine). */
static int find_gpus_cuda(sits_topo_t *t)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n <= 0) {
        SITS_DEBUG(SITS_SUB_TOPO, "cuda runtime reports no devices (%s): gpus from pci",
                   e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        (void)cudaGetLastError();
        return 0;
    }
    for (int i = 0; i < n && i < SITS_TOPO_MAX_GPUS; i++) {
        char bus[32];
        unsigned domain = 0, b = 0, dev = 0, fn = 0;
        if (cudaDeviceGetPCIBusId(bus, sizeof(bus), i) != cudaSuccess ||
            sscanf(bus, "%x:%x:%x.%x", &domain, &b, &dev, &fn) != 4) {
            SITS_WARN(SITS_SUB_TOPO, "cuda device %d: no pci bus id: gpus from pci", i);
            t->info.n_gpus = 0;
            return 0;
        }
        hwloc_obj_t pci = hwloc_get_pcidev_by_busid(t->hw, domain, b, dev, fn);
        add_gpu(t, pci, domain, b, dev, fn);
        struct cudaDeviceProp prop;
        if (!t->gpus[i].name[0] && cudaGetDeviceProperties(&prop, i) == cudaSuccess)
            snprintf(t->gpus[i].name, sizeof(t->gpus[i].name), "%.95s", prop.name);
    }
    return 1;
}
#endif

sits_status_t sits_topo_discover(const char *xml_path, sits_topo_t **topo_p)
{
    sits_topo_t *t = calloc(1, sizeof(*t));
    nvl_graph_t *nv = NULL;
    if (!t) {
        SITS_ERROR(SITS_SUB_TOPO, "out of memory");
        return SITS_ERR_NOMEM;
    }
    if (hwloc_topology_init(&t->hw) < 0) {
        SITS_ERROR(SITS_SUB_TOPO, "hwloc_topology_init failed");
        free(t);
        return SITS_ERR_INTERNAL;
    }
    t->from_xml = xml_path && xml_path[0];
    if (t->from_xml && hwloc_topology_set_xml(t->hw, xml_path) < 0) {
        SITS_ERROR(SITS_SUB_TOPO, "hwloc cannot read xml topology %s", xml_path);
        goto err;
    }
    hwloc_topology_set_io_types_filter(t->hw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    if (hwloc_topology_load(t->hw) < 0) {
        SITS_ERROR(SITS_SUB_TOPO, "hwloc_topology_load failed%s%s", t->from_xml ? " for " : "",
                   t->from_xml ? xml_path : "");
        goto err;
    }

    const char *host = t->from_xml ? hwloc_obj_get_info_by_name(hwloc_get_root_obj(t->hw), "HostName") : NULL;
    if (host)
        snprintf(t->hostname, sizeof(t->hostname), "%s", host);
    else if (gethostname(t->hostname, sizeof(t->hostname) - 1) != 0)
        snprintf(t->hostname, sizeof(t->hostname), "unknown");

    t->core_type = hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
    t->info.n_cores = hwloc_get_nbobjs_by_type(t->hw, t->core_type);
    t->n_packages = hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_PACKAGE);
    find_domains(t);

    int from_cuda = 0;
#ifdef HAVE_CUDA
    if (!t->from_xml)
        from_cuda = find_gpus_cuda(t);
#endif
    if (!from_cuda)
        find_gpus_pci(t);

    nv = calloc(1, sizeof(*nv));
    if (!nv) {
        SITS_ERROR(SITS_SUB_TOPO, "out of memory");
        goto err;
    }
    t->nvlink_source = "none";
    if (nvlink_from_hwloc(t, nv))
        t->nvlink_source = "hwloc";
    else if (!t->from_xml && t->info.n_gpus > 0 && nvlink_from_nvml(t, nv))
        t->nvlink_source = "nvml";
    nvl_finish(t, nv);
    free(nv);

    SITS_INFO(SITS_SUB_TOPO, "%s: %d packages, %d numa domains, %d cores, %d gpus (%s), nvlink from %s", t->hostname,
              t->n_packages, t->info.n_numa, t->info.n_cores, t->info.n_gpus, from_cuda ? "cuda order" : "pci order",
              t->nvlink_source);
    *topo_p = t;
    return SITS_OK;
err:
    sits_topo_destroy(t);
    return SITS_ERR_IO;
}

void sits_topo_destroy(sits_topo_t *t)
{
    if (!t)
        return;
    for (int d = 0; d < t->info.n_numa; d++) {
        hwloc_bitmap_free(t->numa_set[d]);
        hwloc_bitmap_free(t->numa_nodeset[d]);
    }
    hwloc_topology_destroy(t->hw);
    free(t);
}

const char *sits_topo_hostname(const sits_topo_t *t) { return t->hostname; }
int sits_topo_from_xml(const sits_topo_t *t) { return t->from_xml; }
const sits_topo_node_info_t *sits_topo_node_info(const sits_topo_t *t) { return &t->info; }
int sits_topo_gpu_count(const sits_topo_t *t) { return t->info.n_gpus; }
const char *sits_topo_nvlink_source(const sits_topo_t *t) { return t->nvlink_source; }
int sits_topo_package_count(const sits_topo_t *t) { return t->n_packages; }

const sits_topo_gpu_t *sits_topo_gpu(const sits_topo_t *t, int gpu)
{
    return gpu >= 0 && gpu < t->info.n_gpus ? &t->gpus[gpu] : NULL;
}

double sits_topo_nvlink_gbps(const sits_topo_t *t, int a, int b, int *via_switch_p)
{
    if (a < 0 || b < 0 || a >= t->info.n_gpus || b >= t->info.n_gpus) {
        if (via_switch_p)
            *via_switch_p = 0;
        return 0.0;
    }
    if (via_switch_p)
        *via_switch_p = t->nvlink_via_switch[a][b];
    return t->nvlink_gbps[a][b];
}

sits_status_t sits_topo_cores_cpuset(const sits_topo_t *t, int core_first, int n_cores, hwloc_bitmap_t set)
{
    hwloc_bitmap_zero(set);
    if (core_first < 0 || n_cores < 0 || core_first + n_cores > t->info.n_cores)
        return SITS_ERR_INVALID;
    for (int c = core_first; c < core_first + n_cores; c++)
        hwloc_bitmap_or(set, set, hwloc_get_obj_by_type(t->hw, t->core_type, (unsigned)c)->cpuset);
    return SITS_OK;
}

sits_status_t sits_topo_cores_pus(const sits_topo_t *t, int core_first, int n_cores, char *buf, size_t len)
{
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (!set)
        return SITS_ERR_NOMEM;
    sits_status_t st = sits_topo_cores_cpuset(t, core_first, n_cores, set);
    if (st == SITS_OK)
        hwloc_bitmap_list_snprintf(buf, len, set);
    else if (len)
        buf[0] = '\0';
    hwloc_bitmap_free(set);
    return st;
}
