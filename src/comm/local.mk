# src/comm: communicator vtable and its MPI implementation (NCCL with CUDA).
libsits_a_SOURCES += src/comm/comm.h src/comm/mpi.c
if HAVE_NCCL
libsits_a_SOURCES += src/comm/nccl.c
libsits_a_SOURCES += src/comm/custom_ar.c
else
EXTRA_DIST += src/comm/custom_ar.c
endif

# NCCL collectives on 2 GPUs against host sums (skips with 77 without NCCL or with fewer than 2 GPUs).
check_PROGRAMS += tests/gpu/test_nccl
tests_gpu_test_nccl_SOURCES = tests/gpu/test_nccl.c
TESTS += tests/gpu/nccl_tp2.sh
EXTRA_DIST += tests/gpu/nccl_tp2.sh

# The custom IPC all-reduce on 2 GPUs against fp32-sum-rounded-once references and NCCL, eager and
# under CUDA graph replay, plus the fused all-reduce + add + RMSNorm (77 without NCCL or 2 GPUs).
check_PROGRAMS += tests/gpu/test_custom_ar
tests_gpu_test_custom_ar_SOURCES = tests/gpu/test_custom_ar.c
TESTS += tests/gpu/custom_ar_tp2.sh
EXTRA_DIST += tests/gpu/custom_ar_tp2.sh
