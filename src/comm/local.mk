# src/comm: communicator vtable and its MPI implementation (NCCL with CUDA).
libsits_a_SOURCES += src/comm/comm.h src/comm/mpi.c
if HAVE_NCCL
libsits_a_SOURCES += src/comm/nccl.c
endif

# NCCL collectives on 2 GPUs against host sums (skips with 77 without NCCL or with fewer than 2 GPUs).
check_PROGRAMS += tests/gpu/test_nccl
tests_gpu_test_nccl_SOURCES = tests/gpu/test_nccl.c
TESTS += tests/gpu/nccl_tp2.sh
EXTRA_DIST += tests/gpu/nccl_tp2.sh
