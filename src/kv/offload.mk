# src/kv/offload.mk -- the KV offload tiers (issue 8 item 2): the per-rank store (host, disk, LZ4),
# the swap orders every rank runs (src/sched/swap.c), their unit test, the CPU integration test
# and the GPU test. Included at the end of src/kv/local.mk.
libsits_a_SOURCES += src/kv/offload.c src/kv/offload.h src/sched/swap.c src/sched/swap.h

if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_kv_offload
tests_unit_test_kv_offload_SOURCES = tests/unit/test_kv_offload.c
tests_unit_test_kv_offload_CPPFLAGS = $(AM_CPPFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_kv_offload_LDADD = $(SITS_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_kv_offload
endif

TESTS += tests/integration/kv_offload.sh tests/gpu/kv_offload_cuda.sh
EXTRA_DIST += tests/integration/kv_offload.sh tests/gpu/kv_offload_cuda.sh
