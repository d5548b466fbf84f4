# kernels: the CUDA kernels of the cuda backend, one .cu per op, launchers in sits_kernels.h.
if HAVE_CUDA
libsits_a_SOURCES += kernels/sits_kernels.h kernels/common.cuh \
	kernels/embed.cu kernels/rmsnorm.cu kernels/rope.cu kernels/kv_write.cu kernels/attention_mma.cuh kernels/attention.cu \
	kernels/attention_decode.cu kernels/attention_prefill.cu \
	kernels/silu_mul.cu kernels/gather_rows.cu kernels/sample.cu kernels/logit_mask.cu
else
EXTRA_DIST += kernels/sits_kernels.h kernels/common.cuh \
	kernels/embed.cu kernels/rmsnorm.cu kernels/rope.cu kernels/kv_write.cu kernels/attention_mma.cuh kernels/attention.cu \
	kernels/attention_decode.cu kernels/attention_prefill.cu \
	kernels/silu_mul.cu kernels/gather_rows.cu kernels/sample.cu kernels/logit_mask.cu
endif
# [fp8] per-token FP8 quantisation and the fallback GEMM epilogue (used by src/backend/cuda_fp8.c).
# [dummy] --load-format dummy's weights drawn on the device (bf16, FP8).
if HAVE_CUDA
libsits_a_SOURCES += kernels/fp8.cu kernels/dummy.cu
else
EXTRA_DIST += kernels/fp8.cu kernels/dummy.cu
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
# [kv] paged KV blocks <-> one flat buffer (swaps and moves).
if HAVE_CUDA
libsits_a_SOURCES += kernels/kv_copy.cu
else
EXTRA_DIST += kernels/kv_copy.cu
endif
# [families] model-family kernels (per-head RMSNorm, ...).
SITS_FAMILY_CU = kernels/rmsnorm_heads.cu kernels/elementwise.cu
if HAVE_CUDA
libsits_a_SOURCES += $(SITS_FAMILY_CU)
else
EXTRA_DIST += $(SITS_FAMILY_CU)
endif
# The .cu.o suffix rule tracks no headers: every kernel object depends on the shared ones.
if HAVE_CUDA
SITS_KERNEL_OBJS = kernels/embed.$(OBJEXT) kernels/rmsnorm.$(OBJEXT) kernels/rope.$(OBJEXT) kernels/kv_write.$(OBJEXT) \
	kernels/attention.$(OBJEXT) kernels/attention_decode.$(OBJEXT) kernels/attention_prefill.$(OBJEXT) \
	kernels/silu_mul.$(OBJEXT) kernels/gather_rows.$(OBJEXT) kernels/sample.$(OBJEXT) kernels/fp8.$(OBJEXT) \
	kernels/allreduce.$(OBJEXT) kernels/rope_kv.$(OBJEXT) kernels/kv_copy.$(OBJEXT) kernels/logit_mask.$(OBJEXT) \
	kernels/rmsnorm_heads.$(OBJEXT) kernels/elementwise.$(OBJEXT)
$(SITS_KERNEL_OBJS): $(top_srcdir)/kernels/common.cuh $(top_srcdir)/kernels/sits_kernels.h $(top_srcdir)/src/util/status.h
kernels/attention.$(OBJEXT) kernels/attention_decode.$(OBJEXT) kernels/attention_prefill.$(OBJEXT): $(top_srcdir)/kernels/attention_mma.cuh
endif
# [moe] Mixture-of-Experts router top-k and weighted combine.
if HAVE_CUDA
libsits_a_SOURCES += kernels/moe.cu
else
EXTRA_DIST += kernels/moe.cu
endif
# [int4] the W4A16 linear (packed INT4 weights, per-group scales / zeros, dequantised in registers).
if HAVE_CUDA
libsits_a_SOURCES += kernels/w4a16.cu
else
EXTRA_DIST += kernels/w4a16.cu
endif
# [perf: decode gemv] the linears of steps of <= 8 tokens, bf16 and FP8 weights (used by src/backend/cuda.c).
if HAVE_CUDA
libsits_a_SOURCES += kernels/gemv.cu
else
EXTRA_DIST += kernels/gemv.cu
endif
