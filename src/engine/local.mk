# src/engine: the forward pass of one step, distributed sampling.
libsits_a_SOURCES += src/engine/engine.c src/engine/engine.h src/engine/sample.c src/engine/sample.h

# [perf] The engine's step paths against each other: device vs host sampling, CUDA graph replays vs
# eager steps (cpu always; cuda too where a GPU is usable).
check_PROGRAMS += tests/gpu/test_engine_step
TESTS += tests/gpu/test_engine_step
tests_gpu_test_engine_step_SOURCES = tests/gpu/test_engine_step.c
