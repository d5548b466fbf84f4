# bench/bench.mk -- sits-bench, the OpenAI-API load generator (TTFT, TPOT, E2E percentiles, goodput per
# tenant), its HTTP/1.1 client (raw sockets: libcurl is not a project dependency), the CPU serving
# experiments and their test. Included from bench/local.mk.
noinst_PROGRAMS += bench/sits-bench
bench_sits_bench_SOURCES = bench/sits_bench.c src/util/http_client.c src/util/http_client.h
bench_sits_bench_LDADD = $(JANSSON_LIBS) -lm
TESTS += tests/integration/sits_bench.sh
EXTRA_DIST += tests/integration/sits_bench.sh bench/experiments_cpu.sh bench/workloads
