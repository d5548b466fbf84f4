# src/engine: the forward pass of one step, distributed sampling.
libsits_a_SOURCES += src/engine/engine.c src/engine/engine.h src/engine/sample.c src/engine/sample.h \
	src/engine/moe.c src/engine/moe.h

# [perf] The engine's step paths against each other: device vs host sampling, CUDA graph replays vs
# eager steps (cpu always; cuda too where a GPU is usable).
check_PROGRAMS += tests/gpu/test_engine_step
TESTS += tests/gpu/test_engine_step
tests_gpu_test_engine_step_SOURCES = tests/gpu/test_engine_step.c

# [moe] Mixture-of-Experts fixtures vs HF at TP 1/2/4 and EP 2/4 (cpu); on GPUs where there are some.
TESTS += tests/integration/moe.sh tests/gpu/moe_cuda.sh
EXTRA_DIST += tests/integration/moe.sh tests/gpu/moe_cuda.sh tests/ref/gen_moe_fixtures.py tests/fixtures/models/mixtral \
	tests/fixtures/models/qwen2_moe
# [moe] /metrics sits_moe_expert_tokens_total{expert} under --ep 2 (server, cpu)
TESTS += tests/integration/moe_metrics.sh
EXTRA_DIST += tests/integration/moe_metrics.sh
# [moe fp8] FP8 experts: the FP8 MoE checkpoint dequantised == HF (TP / EP), as published, quantised at load
TESTS += tests/integration/moe_fp8.sh
EXTRA_DIST += tests/integration/moe_fp8.sh tests/fixtures/models/qwen3_moe_fp8
