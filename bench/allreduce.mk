# Custom IPC all-reduce vs NCCL (eager and CUDA-graph latency, bus bandwidth, the fused all-reduce +
# add + RMSNorm) on the GPUs of one node: mpirun -np 2 bench/sits-bench-allreduce [--json FILE].
noinst_PROGRAMS += bench/sits-bench-allreduce
bench_sits_bench_allreduce_SOURCES = bench/bench_allreduce.c
bench_sits_bench_allreduce_LDADD = $(SITS_LIBS)
