# src/kv/shard.mk -- the compressed KV shard format and int8 KV quantisation (issue 8), its unit
# test and the codec benchmark. Included at the end of src/kv/local.mk.
libsits_a_SOURCES += src/kv/shard.c src/kv/shard.h src/kv/quant.c src/kv/quant.h

if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_kv_shard
tests_unit_test_kv_shard_SOURCES = tests/unit/test_kv_shard.c
tests_unit_test_kv_shard_CPPFLAGS = $(AM_CPPFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_kv_shard_LDADD = $(SITS_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_kv_shard
endif

# sits-bench-kv-codec (bench/bench_kv_codec.c): int8 / LZ4 rates and ratios on engine KV and synthetic KV (bench/RESULTS.md).
noinst_PROGRAMS += bench/sits-bench-kv-codec
bench_sits_bench_kv_codec_SOURCES = bench/bench_kv_codec.c
bench_sits_bench_kv_codec_LDADD = $(SITS_LIBS)
