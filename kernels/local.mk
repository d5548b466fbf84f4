# kernels: the CUDA kernels of the cuda backend, one .cu per op, launchers in sits_kernels.h.
if HAVE_CUDA
libsits_a_SOURCES += kernels/sits_kernels.h kernels/common.cuh \
	kernels/embed.cu kernels/rmsnorm.cu kernels/rope.cu kernels/kv_write.cu kernels/attention.cu \
	kernels/silu_mul.cu kernels/gather_rows.cu
else
EXTRA_DIST += kernels/sits_kernels.h kernels/common.cuh \
	kernels/embed.cu kernels/rmsnorm.cu kernels/rope.cu kernels/kv_write.cu kernels/attention.cu \
	kernels/silu_mul.cu kernels/gather_rows.cu
endif
