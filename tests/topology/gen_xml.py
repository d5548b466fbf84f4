#!/usr/bin/env python3
"""gen_xml.py -- writes the synthetic hwloc 2.x XML topologies used by the topology tests.

hwloc's synthetic topologies (lstopo --input "pack:2 ...") have no PCI devices, so the GPU
machines are written here as XML directly, in the form hwloc's own exporter writes
(hwloc_topology_export_xml). Regenerate with:  python3 tests/topology/gen_xml.py tests/topology

  dgx8.xml   2 packages x (1 NUMA node, 32 cores x 2 PUs); PU os index = s*32+c and 64+s*32+c
             (Linux enumeration: first threads, then siblings). 8 NVIDIA H200 GPUs (10de:2335,
             class 0302), 4 under each package, and 4 NVSwitches (10de:22a3, class 0680) under
             package 1. NVLink: an "NVLinkBandwidth" distance matrix over the 12 PCI devices, as the
             hwloc NVML plugin builds it: GPU<->switch = links x 25000 MB/s (18 links per GPU split
             5/4/4/5 over the 4 switches), diagonal 1000000.
  numa4.xml  CPU only: 1 package, 4 NUMA nodes x 4 cores x 1 PU (an NPS4-style machine).
  gpu4_pcie.xml  1 package, 1 NUMA node, 16 cores, 4 GPUs without NVLink (PCIe only).
vm2.xml (this build machine) and h200x2.xml (a 2-GPU H200 machine) are not generated: they were
exported on those machines with hwloc_topology_export_xml after HWLOC_TYPE_FILTER_KEEP_IMPORTANT.
"""
import os
import sys


def mask(pus):
    """hwloc bitmap text: comma-separated 32-bit words, most significant first."""
    v = 0
    for p in pus:
        v |= 1 << p
    words = []
    while True:
        words.append(v & 0xffffffff)
        v >>= 32
        if v == 0:
            break
    return ",".join("0x%08x" % w for w in reversed(words))


class Gp:
    def __init__(self):
        self.n = 0

    def __call__(self):
        self.n += 1
        return self.n


def sets(pus, nodes):
    c, n = mask(pus), mask(nodes)
    return 'cpuset="%s" complete_cpuset="%s" nodeset="%s" complete_nodeset="%s"' % (c, c, n, n)


def pcidev(out, ind, gp, busid, cls, vendor, device, name, gp_list, subtype=None):
    g = gp()
    gp_list.append(g)
    # the NVML plugin marks NVSwitches with subtype NVSwitch so that the I/O filter keeps them
    sub = ' subtype="%s"' % subtype if subtype else ''
    out.append('%s<object type="PCIDev"%s gp_index="%d" pci_busid="%s" pci_type="%04x [%04x:%04x] [%04x:%04x] a1" '
               'pci_link_speed="0.000000">' % (ind, sub, g, busid, cls, vendor, device, vendor, device))
    out.append('%s  <info name="PCIVendor" value="NVIDIA Corporation"/>' % ind)
    out.append('%s  <info name="PCIDevice" value="%s"/>' % (ind, name))
    out.append('%s</object>' % ind)


def machine(name, packages, gpus_by_pkg, switches_by_pkg, smt, nvlinks):
    """packages: list of lists of NUMA nodes, each a core count. gpus_by_pkg: bus numbers per package."""
    gp = Gp()
    out = ['<?xml version="1.0" encoding="UTF-8"?>', '<!DOCTYPE topology SYSTEM "hwloc2.dtd">',
           '<topology version="2.0">']
    n_cores = sum(sum(p) for p in packages)
    all_pus = list(range(n_cores * smt))
    n_numa = sum(len(p) for p in packages)
    allset = mask(all_pus)
    allnodes = mask(range(n_numa))
    out.append('  <object type="Machine" os_index="0" cpuset="%s" complete_cpuset="%s" allowed_cpuset="%s" '
               'nodeset="%s" complete_nodeset="%s" allowed_nodeset="%s" gp_index="%d">'
               % (allset, allset, allset, allnodes, allnodes, allnodes, gp()))
    out.append('    <info name="Backend" value="Linux"/>')
    out.append('    <info name="HostName" value="%s"/>' % name)
    out.append('    <info name="Architecture" value="x86_64"/>')
    gpu_gps, sw_gps = [], []
    core = 0
    numa = 0
    for s, numas in enumerate(packages):
        pkg_cores = sum(numas)
        pkg_pus = [core + i for i in range(pkg_cores)] + ([n_cores + core + i for i in range(pkg_cores)] if smt == 2 else [])
        pkg_nodes = list(range(numa, numa + len(numas)))
        out.append('    <object type="Package" os_index="%d" %s gp_index="%d">' % (s, sets(pkg_pus, pkg_nodes), gp()))
        out.append('      <info name="CPUModel" value="Synthetic CPU"/>')
        for nc in numas:
            pus = [core + i for i in range(nc)] + ([n_cores + core + i for i in range(nc)] if smt == 2 else [])
            ind = '      '
            if len(numas) > 1:
                out.append('      <object type="Group" %s gp_index="%d">' % (sets(pus, [numa]), gp()))
                ind = '        '
            out.append('%s<object type="NUMANode" os_index="%d" %s gp_index="%d" local_memory="%d"/>'
                       % (ind, numa, sets(pus, [numa]), gp(), 64 << 30))
            for c in range(nc):
                cpus = [core + c] + ([n_cores + core + c] if smt == 2 else [])
                out.append('%s<object type="Core" os_index="%d" %s gp_index="%d">' % (ind, core + c, sets(cpus, [numa]), gp()))
                for p in cpus:
                    out.append('%s  <object type="PU" os_index="%d" %s gp_index="%d"/>' % (ind, p, sets([p], [numa]), gp()))
                out.append('%s</object>' % ind)
            if len(numas) > 1:
                out.append('      </object>')
            core += nc
            numa += 1
        for bus in gpus_by_pkg[s]:
            out.append('      <object type="Bridge" gp_index="%d" bridge_type="0-1" depth="0" bridge_pci="0000:[%02x-%02x]">'
                       % (gp(), bus, bus))
            pcidev(out, '        ', gp, "0000:%02x:00.0" % bus, 0x0302, 0x10de, 0x2335, "GH100 [H200 SXM 141GB]", gpu_gps)
            out.append('      </object>')
        for bus in switches_by_pkg[s]:
            out.append('      <object type="Bridge" gp_index="%d" bridge_type="0-1" depth="0" bridge_pci="0000:[%02x-%02x]">'
                       % (gp(), bus, bus))
            pcidev(out, '        ', gp, "0000:%02x:00.0" % bus, 0x0680, 0x10de, 0x22a3, "GH100 [H100 NVSwitch]", sw_gps, "NVSwitch")
            out.append('      </object>')
        out.append('    </object>')
    out.append('  </object>')
    if nvlinks:
        objs = gpu_gps + sw_gps
        n = len(objs)
        bw = [[0] * n for _ in range(n)]
        for i in range(n):
            bw[i][i] = 1000000
        for g in range(len(gpu_gps)):
            for w, links in enumerate(nvlinks):
                j = len(gpu_gps) + w
                bw[g][j] = bw[j][g] = links * 25000
        out.append('  <distances2 type="PCIDev" nbobjs="%d" kind="%d" name="NVLinkBandwidth" indexing="gp">'
                   % (n, 1 | 8))  # HWLOC_DISTANCES_KIND_FROM_OS | KIND_MEANS_BANDWIDTH
        # hwloc's "length" is the length of the text content
        idx = " ".join(str(x) for x in objs)
        out.append('    <indexes length="%d">%s</indexes>' % (len(idx), idx))
        vals = " ".join(str(bw[i][j]) for i in range(n) for j in range(n))
        out.append('    <u64values length="%d">%s</u64values>' % (len(vals), vals))
        out.append('  </distances2>')
    out.append('</topology>')
    return "\n".join(out) + "\n"


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    files = {
        "dgx8.xml": machine("dgx8", [[32], [32]], [[0x18, 0x2a, 0x3a, 0x5d], [0x9a, 0xab, 0xba, 0xdb]],
                            [[], [0xe5, 0xe6, 0xe7, 0xe8]], 2, [5, 4, 4, 5]),
        "numa4.xml": machine("numa4", [[4, 4, 4, 4]], [[]], [[]], 1, None),
        "gpu4_pcie.xml": machine("gpu4", [[16]], [[0x01, 0x02, 0x41, 0x42]], [[]], 1, None),
    }
    for name, text in files.items():
        with open(os.path.join(d, name), "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
