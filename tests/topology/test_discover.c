/* test_discover.c -- discovery on the committed hwloc XML topologies (tests/topology/ *.xml, see
 * gen_xml.py): NUMA domains, core ranges, GPUs in PCI order with their NUMA node, NVLink bandwidth
 * from the XML's NVLinkBandwidth matrix; then plan + report on the 8-GPU machine and check the
 * text and JSON map. Expected values follow from how gen_xml.py builds each machine. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "topology/topology.h"
#include "util/log.h"

static sits_topo_t *load(const char *name)
{
    char path[4096];
    const char *src = getenv("top_srcdir");
    sits_topo_t *t = NULL;
    snprintf(path, sizeof(path), "%s/tests/topology/%s", src ? src : ".", name);
    sits_status_t st = sits_topo_discover(path, &t);
    if (st != SITS_OK)
        print_error("cannot load %s: %s\n", path, sits_status_str(st));
    assert_int_equal(st, SITS_OK);
    return t;
}

static void test_dgx8(void **state)
{
    static const char *const bus[8] = {"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
                                       "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"};
    sits_topo_t *t = load("dgx8.xml");
    const sits_topo_node_info_t *ni = sits_topo_node_info(t);
    char pus[256];
    assert_string_equal(sits_topo_hostname(t), "dgx8");
    assert_true(sits_topo_from_xml(t));
    assert_int_equal(sits_topo_package_count(t), 2);
    assert_int_equal(ni->n_cores, 64);
    assert_int_equal(ni->n_numa, 2);
    assert_int_equal(ni->numa_first_core[0], 0);
    assert_int_equal(ni->numa_n_cores[0], 32);
    assert_int_equal(ni->numa_first_core[1], 32);
    assert_int_equal(ni->numa_n_cores[1], 32);
    assert_int_equal(ni->numa_os[1], 1);
    assert_int_equal(sits_topo_gpu_count(t), 8);
    for (int g = 0; g < 8; g++) {
        assert_string_equal(sits_topo_gpu(t, g)->busid, bus[g]);
        assert_string_equal(sits_topo_gpu(t, g)->name, "GH100 [H200 SXM 141GB]");
        assert_int_equal(ni->gpu_numa[g], g / 4);
    }
    /* 18 links per GPU over 4 NVSwitches (5/4/4/5) x 25 GB/s = 450 GB/s between any two GPUs */
    assert_string_equal(sits_topo_nvlink_source(t), "hwloc");
    for (int a = 0; a < 8; a++)
        for (int b = 0; b < 8; b++) {
            int via = -1;
            double bw = sits_topo_nvlink_gbps(t, a, b, &via);
            double want = a == b ? 0.0 : 450.0;
            if (bw < want - 1e-9 || bw > want + 1e-9)
                print_error("nvlink %d->%d: %g GB/s, expected %g\n", a, b, bw, want);
            assert_true(bw >= want - 1e-9 && bw <= want + 1e-9);
            assert_int_equal(via, a != b);
        }
    /* SMT-2, Linux numbering: core c has PUs c and 64 + c */
    assert_int_equal(sits_topo_cores_pus(t, 0, 8, pus, sizeof(pus)), SITS_OK);
    assert_string_equal(pus, "0-7,64-71");
    assert_int_equal(sits_topo_cores_pus(t, 56, 8, pus, sizeof(pus)), SITS_OK);
    assert_string_equal(pus, "56-63,120-127");
    assert_int_equal(sits_topo_cores_pus(t, 60, 8, pus, sizeof(pus)), SITS_ERR_INVALID);
    sits_topo_destroy(t);
}

static void test_numa4(void **state)
{
    sits_topo_t *t = load("numa4.xml");
    const sits_topo_node_info_t *ni = sits_topo_node_info(t);
    assert_int_equal(ni->n_cores, 16);
    assert_int_equal(ni->n_numa, 4);
    for (int d = 0; d < 4; d++) {
        assert_int_equal(ni->numa_first_core[d], 4 * d);
        assert_int_equal(ni->numa_n_cores[d], 4);
        assert_int_equal(ni->numa_os[d], d);
    }
    assert_int_equal(sits_topo_gpu_count(t), 0);
    assert_string_equal(sits_topo_nvlink_source(t), "none");
    sits_topo_destroy(t);
}

static void test_gpu4_pcie(void **state)
{
    sits_topo_t *t = load("gpu4_pcie.xml");
    const sits_topo_node_info_t *ni = sits_topo_node_info(t);
    assert_int_equal(ni->n_numa, 1);
    assert_int_equal(sits_topo_gpu_count(t), 4);
    assert_string_equal(sits_topo_gpu(t, 2)->busid, "0000:41:00.0");
    for (int g = 0; g < 4; g++)
        assert_int_equal(ni->gpu_numa[g], 0);
    assert_true(sits_topo_nvlink_gbps(t, 0, 1, NULL) == 0.0);
    assert_string_equal(sits_topo_nvlink_source(t), "none");
    sits_topo_destroy(t);
}

/* this build machine, captured with hwloc_topology_export_xml: 2 cores, 1 NUMA node, virtio only */
static void test_vm2(void **state)
{
    sits_topo_t *t = load("vm2.xml");
    assert_int_equal(sits_topo_node_info(t)->n_cores, 2);
    assert_int_equal(sits_topo_node_info(t)->n_numa, 1);
    assert_int_equal(sits_topo_gpu_count(t), 0);
    sits_topo_destroy(t);
}

/* a 2-GPU H200 virtual machine of the lent GPU kind, captured there with hwloc_topology_export_xml
 * (nvidia-smi: GPU0 00000000:00:06.0, GPU1 00000000:00:07.0, CPU affinity 0-31, NUMA 0) */
static void test_h200x2(void **state)
{
    sits_topo_t *t = load("h200x2.xml");
    const sits_topo_node_info_t *ni = sits_topo_node_info(t);
    sits_topo_node_info_t copy = *ni;
    sits_placement_t *pl = NULL;
    int node_of[2] = {0, 0}, local[2] = {0, 1};
    assert_int_equal(ni->n_cores, 32);
    assert_int_equal(ni->n_numa, 1);
    assert_int_equal(sits_topo_gpu_count(t), 2);
    assert_string_equal(sits_topo_gpu(t, 0)->busid, "0000:00:06.0");
    assert_string_equal(sits_topo_gpu(t, 1)->busid, "0000:00:07.0");
    assert_int_equal(ni->gpu_numa[0], 0);
    assert_int_equal(ni->gpu_numa[1], 0);
    assert_int_equal(sits_topo_plan(2, node_of, local, 1, &copy, 0, 1, 1, &pl), SITS_OK);
    assert_int_equal(pl->tp, 2);
    assert_int_equal(pl->ranks[1].gpu, 1);
    assert_int_equal(pl->ranks[1].core_first, 16);
    assert_int_equal(pl->ranks[1].n_cores, 16);
    sits_topo_placement_destroy(pl);
    sits_topo_destroy(t);
}

static void test_missing_xml(void **state)
{
    sits_topo_t *t = NULL;
    sits_log_set_level(SITS_LOG_NONE);
    assert_int_not_equal(sits_topo_discover("/nonexistent/topology.xml", &t), SITS_OK);
    sits_log_set_level(SITS_LOG_WARN);
    assert_null(t);
}

/* Plan 8 ranks on dgx8.xml with tp 4 dp 2 and check the rendered map. */
static void test_report_dgx8(void **state)
{
    sits_topo_t *t = load("dgx8.xml");
    sits_topo_node_info_t ni = *sits_topo_node_info(t);
    sits_placement_t *pl = NULL;
    int node_of[8] = {0}, local[8];
    json_t *recs[8], *doc = NULL;
    char *text = NULL;
    size_t len = 0;
    for (int r = 0; r < 8; r++)
        local[r] = r;
    assert_int_equal(sits_topo_plan(8, node_of, local, 1, &ni, 4, 1, 2, &pl), SITS_OK);
    for (int r = 0; r < 8; r++)
        assert_int_equal(sits_topo_report_record(t, pl, r, &recs[r]), SITS_OK);
    assert_int_equal(sits_topo_report_doc(pl, recs, &doc), SITS_OK);

    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    sits_topo_report_text(f, doc);
    fclose(f);
    static const char *const want[] = {
        "topology: 8 ranks on 1 node: tp 4 x pp 1 x dp 2\n",
        "node 0 dgx8: 2 packages, 2 numa nodes, 64 cores, 8 gpus, nvlink from hwloc; ranks 0 1 2 3 4 5 6 7\n",
        "rank 0: host dgx8 local 0/8, gpu 0 0000:18:00.0 (GH100 [H200 SXM 141GB]), numa 0, cores 0-7 (pus 0-7,64-71), "
        "tp 0 pp 0 dp 0\n      nvlink: 450 GB/s to gpu 1,2,3,4,5,6,7 (nvswitch)\n",
        "rank 7: host dgx8 local 7/8, gpu 7 0000:db:00.0 (GH100 [H200 SXM 141GB]), numa 1, cores 56-63 "
        "(pus 56-63,120-127), tp 3 pp 0 dp 1\n",
        "tp groups (2): [0 1 2 3] [4 5 6 7]\n",
        "pp groups (8): [0] [1] [2] [3] [4] [5] [6] [7]\n",
        "dp groups (4): [0 4] [1 5] [2 6] [3 7]\n",
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        if (!strstr(text, want[i]))
            print_error("report lacks:\n%s\n--- report:\n%s\n", want[i], text);
        assert_non_null(strstr(text, want[i]));
    }
    free(text);

    /* JSON: round-trip through the serialiser and read a few fields back */
    text = NULL;
    f = open_memstream(&text, &len);
    sits_topo_report_json(f, doc);
    fclose(f);
    json_error_t err;
    json_t *back = json_loads(text, 0, &err);
    assert_non_null(back);
    json_t *r5 = json_array_get(json_object_get(back, "ranks"), 5);
    assert_string_equal(json_string_value(json_object_get(json_object_get(r5, "gpu"), "pci_bus_id")), "0000:ab:00.0");
    assert_int_equal(json_integer_value(json_object_get(r5, "numa")), 1);
    assert_string_equal(json_string_value(json_object_get(json_object_get(r5, "cores"), "pus")), "40-47,104-111");
    assert_int_equal(json_array_size(json_object_get(json_object_get(r5, "gpu"), "nvlink")), 7);
    json_t *dp = json_object_get(json_object_get(back, "groups"), "dp");
    assert_int_equal(json_array_size(dp), 4);
    assert_int_equal(json_integer_value(json_array_get(json_array_get(dp, 1), 1)), 5);
    json_decref(back);
    free(text);

    json_decref(doc);
    for (int r = 0; r < 8; r++)
        json_decref(recs[r]);
    sits_topo_placement_destroy(pl);
    sits_topo_destroy(t);
}

int main(void)
{
    sits_log_init(-1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dgx8),    cmocka_unit_test(test_numa4),       cmocka_unit_test(test_gpu4_pcie),
        cmocka_unit_test(test_vm2),     cmocka_unit_test(test_h200x2),  cmocka_unit_test(test_missing_xml), cmocka_unit_test(test_report_dgx8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
