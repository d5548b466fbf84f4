# src/comm: communicator vtable and its MPI implementation (NCCL with CUDA).
libsits_a_SOURCES += src/comm/comm.h src/comm/mpi.c
