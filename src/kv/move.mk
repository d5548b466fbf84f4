# src/kv/move.mk -- the KV move message (migration between replicas, prefill -> decode; issue 8
# item 4) and its unit test. Included at the end of src/kv/local.mk.
libsits_a_SOURCES += src/kv/move.c src/kv/move.h

if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_kv_move
tests_unit_test_kv_move_SOURCES = tests/unit/test_kv_move.c
tests_unit_test_kv_move_CPPFLAGS = $(AM_CPPFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_kv_move_LDADD = $(SITS_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_kv_move
endif
