# topology: hwloc/NVML discovery, rank -> GPU -> NUMA binding, TP/PP/DP planning, the --topology map.
libsits_a_SOURCES += topology/topology.h topology/topo_impl.h topology/discover.c topology/plan.c \
	topology/place.c topology/report.c

# Tests: the pure planner, discovery on committed hwloc XML topologies (dgx8, numa4, gpu4_pcie written
# by tests/topology/gen_xml.py; vm2 and h200x2 captured on real machines with hwloc_topology_export_xml),
# and discover+place+bind+report under mpirun -np 2.
EXTRA_DIST += tests/topology/gen_xml.py tests/topology/dgx8.xml tests/topology/numa4.xml \
	tests/topology/gpu4_pcie.xml tests/topology/vm2.xml tests/topology/h200x2.xml \
	tests/topology/mpi_topo.sh
check_PROGRAMS += tests/topology/mpi_topo
tests_topology_mpi_topo_SOURCES = tests/topology/mpi_topo.c
TESTS += tests/topology/mpi_topo.sh
if HAVE_CMOCKA
check_PROGRAMS += tests/topology/test_plan tests/topology/test_discover
tests_topology_test_plan_SOURCES = tests/topology/test_plan.c
tests_topology_test_plan_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_topology_test_plan_LDADD = $(SITS_LIBS) $(CMOCKA_LIBS)
tests_topology_test_discover_SOURCES = tests/topology/test_discover.c
tests_topology_test_discover_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_topology_test_discover_LDADD = $(SITS_LIBS) $(CMOCKA_LIBS)
TESTS += tests/topology/test_plan tests/topology/test_discover
endif
