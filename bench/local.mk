# bench: benchmark programs (never timed tests) and their peer-comparison scripts; see bench/README.md.

# Decode ms/step at several (batch, context) and prefill 1xN beside the bandwidth floor.
# bench/run_decode.sh runs it with the HF transformers peer (bench/hf_decode.py) and merges the JSON.
noinst_PROGRAMS += bench/sits-bench-decode
bench_sits_bench_decode_SOURCES = bench/bench_decode.c bench/bench_common.c bench/bench_common.h
bench_sits_bench_decode_LDADD = $(SITS_LIBS)
EXTRA_DIST += bench/README.md bench/RESULTS.md bench/run_decode.sh bench/hf_decode.py bench/gpt_fast_decode.py bench/run_pp_mb.sh bench/trtllm_table.sh bench/sched_scale.sh \
	bench/kv_step.sh bench/spec_bench.py bench/spec_project.py bench/env_ab.py bench/commit_ab.sh \
	bench/configs/llama3-8b/config.json bench/configs/llama3-70b/config.json bench/configs/llama3.1-8b/config.json bench/configs/llama3.3-70b/config.json bench/configs/qwen3-30b-a3b/config.json
# [fp8] accuracy of the --quant policies vs bf16 (top-1 agreement, KL); tests/integration/fp8_accuracy.sh bounds it.
noinst_PROGRAMS += bench/sits-fp8-accuracy
bench_sits_fp8_accuracy_SOURCES = bench/fp8_accuracy.c bench/bench_common.c bench/bench_common.h
bench_sits_fp8_accuracy_LDADD = $(SITS_LIBS)
# Offline throughput (IN/OUT tokens per request, continuous batching, chunked prefill), e.g. 2048/128 and 128/2048.
noinst_PROGRAMS += bench/sits-bench-offline
bench_sits_bench_offline_SOURCES = bench/bench_offline.c bench/bench_common.c bench/bench_common.h
bench_sits_bench_offline_LDADD = $(SITS_LIBS)
# [sampling controls] [logprobs] a step's sampling with penalties, bias, min_p and logprobs: the device path
# (backend ops on the vocabulary shard) against the host path it replaced (download + host loops).
noinst_PROGRAMS += bench/sits-bench-controls
bench_sits_bench_controls_SOURCES = bench/bench_controls.c bench/bench_common.c bench/bench_common.h
bench_sits_bench_controls_LDADD = $(SITS_LIBS)
include bench/bench.mk
include bench/allreduce.mk
# [int8 kv] accuracy (top-1, KL, greedy) and capacity of --kv-cache-dtype int8 vs fp32 / bf16 KV;
# tests/integration/kv_int8_accuracy.sh bounds it.
noinst_PROGRAMS += bench/sits-kv-int8-accuracy
bench_sits_kv_int8_accuracy_SOURCES = bench/kv_int8_accuracy.c bench/bench_common.c bench/bench_common.h
bench_sits_kv_int8_accuracy_LDADD = $(SITS_LIBS)
# [fp8] cuBLASLt's FP8 scale modes at the engine's GEMM shapes (available? how fast? right?) and, with --sweep,
# where outer-vector scales beat unit scales + the scale_out pass: the evidence for cuda_fp8.c's outer_pays.
if HAVE_CUDA
noinst_PROGRAMS += bench/sits-bench-fp8-gemm
bench_sits_bench_fp8_gemm_SOURCES = bench/bench_fp8_gemm.c
bench_sits_bench_fp8_gemm_LDADD = $(SITS_LIBS)
endif
# [int4] the W4A16 linear alone at the 8B / 70B decode shapes beside the floor of reading its weights; --compare: the
# same rows without the persistent GEMV (kernels/w4a16.cu), in the same run.
noinst_PROGRAMS += bench/sits-bench-w4
bench_sits_bench_w4_SOURCES = bench/bench_w4.c bench/bench_common.c bench/bench_common.h
bench_sits_bench_w4_LDADD = $(SITS_LIBS)
# The attention op alone on a serving step's batch (prompts + decode rows, paged KV): prefill TFLOP/s, decode KV GB/s
# beside the copy bandwidth; --trace (cuda, make NVCCFLAGS=-DSITS_ATT_PF_TRACE) the prefill kernel's per-CTA time split.
EXTRA_DIST += bench/pf_model.py
noinst_PROGRAMS += bench/sits-bench-attention
bench_sits_bench_attention_SOURCES = bench/bench_attention.c bench/bench_common.c bench/bench_common.h
bench_sits_bench_attention_LDADD = $(SITS_LIBS)
