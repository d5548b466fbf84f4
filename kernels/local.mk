# kernels: the CUDA kernels of the cuda backend, one .cu per op, launchers in sits_kernels.h.
if HAVE_CUDA
libsits_a_SOURCES += kernels/sits_kernels.h kernels/common.cuh \
	kernels/embed.cu kernels/rmsnorm.cu kernels/rope.cu kernels/kv_write.cu kernels/attention_mma.cuh kernels/attention.cu \
	kernels/attention_decode.cu kernels/attention_prefill.cu \
	kernels/silu_mul.cu kernels/gather_rows.cu kernels/sample.cu
else
EXTRA_DIST += kernels/sits_kernels.h kernels/common.cuh \
	kernels/embed.cu kernels/rmsnorm.cu kernels/rope.cu kernels/kv_write.cu kernels/attention_mma.cuh kernels/attention.cu \
	kernels/attention_decode.cu kernels/attention_prefill.cu \
	kernels/silu_mul.cu kernels/gather_rows.cu kernels/sample.cu
endif
# [fp8] per-token FP8 quantisation and the fallback GEMM epilogue (used by src/backend/cuda_fp8.c).
if HAVE_CUDA
libsits_a_SOURCES += kernels/fp8.cu
else
EXTRA_DIST += kernels/fp8.cu
endif
# [allreduce] the custom all-reduce of one node's GPUs over CUDA IPC (used by src/comm/custom_ar.c).
if HAVE_CUDA
libsits_a_SOURCES += kernels/allreduce.cu
else
EXTRA_DIST += kernels/allreduce.cu
endif
# [rope + kv write] RoPE fused with the paged-cache write (bf16 and int8 caches).
if HAVE_CUDA
libsits_a_SOURCES += kernels/rope_kv.cu
else
EXTRA_DIST += kernels/rope_kv.cu
endif
