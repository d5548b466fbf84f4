# bench: benchmark programs (never timed tests) and their peer-comparison scripts; see bench/README.md.

# Decode ms/step at several (batch, context) and prefill 1xN beside the bandwidth floor.
# bench/run_decode.sh runs it with the HF transformers peer (bench/hf_decode.py) and merges the JSON.
noinst_PROGRAMS += bench/sits-bench-decode
bench_sits_bench_decode_SOURCES = bench/bench_decode.c
bench_sits_bench_decode_LDADD = $(SITS_LIBS)
EXTRA_DIST += bench/README.md bench/RESULTS.md bench/run_decode.sh bench/hf_decode.py \
	bench/configs/llama3-8b/config.json bench/configs/llama3-70b/config.json
include bench/bench.mk
include bench/allreduce.mk
