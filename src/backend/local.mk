# src/backend: the backend vtable, the cpu reference backend and the CUDA backend (kernels/ holds
# its .cu files). Without CUDA, cuda_stub.c provides sits_backend_cuda_create/_device_count.
libsits_a_SOURCES += src/backend/backend.h src/backend/cpu.c src/backend/kv_dtype.c
if HAVE_CUDA
libsits_a_SOURCES += src/backend/cuda.c src/backend/cuda_check.h src/backend/cuda_fp8.c src/backend/cuda_fp8.h \
                     src/backend/cuda_optime.c src/backend/cuda_optime.h
else
libsits_a_SOURCES += src/backend/cuda_stub.c
EXTRA_DIST += src/backend/cuda_fp8.c src/backend/cuda_fp8.h src/backend/cuda_optime.c src/backend/cuda_optime.h
endif

# [moe dev] the reference moe_route: a hand-worked plan, counts, refusals.
check_PROGRAMS += tests/unit/test_moe_route
TESTS += tests/unit/test_moe_route
tests_unit_test_moe_route_SOURCES = tests/unit/test_moe_route.c
tests_unit_test_moe_route_CPPFLAGS = $(AM_CPPFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_moe_route_LDADD = $(SITS_LIBS) $(CMOCKA_LIBS)

# Op parity: every op on the cpu and cuda backends (skips with 77 where no GPU is usable).
check_PROGRAMS += tests/gpu/test_op_parity
TESTS += tests/gpu/test_op_parity
tests_gpu_test_op_parity_SOURCES = tests/gpu/test_op_parity.c
# [fp8] matmul_fp8 cpu vs cuda (run by tests/gpu/fp8_cuda.sh; skips with 77 where no GPU is usable).
check_PROGRAMS += tests/gpu/test_fp8_parity
tests_gpu_test_fp8_parity_SOURCES = tests/gpu/test_fp8_parity.c
