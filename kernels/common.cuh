/* common.cuh -- device helpers shared by kernels/*.cu: bf16 <-> fp32, 8-wide (16-byte) bf16
 * loads/stores, warp and block sums, row copies. Device code and tiny launch helpers only.
 * Vector width V is 8 (one uint4 = 8 bf16, needs 16-byte alignment and a multiple of 8 elements)
 * or 1 (any size, any alignment); launchers pick it with sits_k_vec8_ok(). */
#ifndef SITS_KERNELS_COMMON_CUH
#define SITS_KERNELS_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/sits_kernels.h"

/* Status of the launch just enqueued (launch errors: bad configuration, no kernel image...). */
#define SITS_K_LAUNCH_STATUS() (cudaGetLastError() == cudaSuccess ? SITS_OK : SITS_ERR_CUDA)

/* [perf: pdl] Programmatic dependent launch (sm_90): a kernel launched with the programmatic-serialization attribute
 * (kernels/gemv.cu) may start before the previous kernel on its stream has finished; it calls sits_k_pdl_wait
 * before touching anything that kernel writes (wait = the previous grid completed and its writes are visible; a
 * no-op for a normal launch). sits_k_pdl_trigger in a kernel lets that dependent start as soon as every block of
 * the trigger's grid has run it (without it: as the blocks exit); it changes nothing else. */
static __device__ __forceinline__ void sits_k_pdl_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
static __device__ __forceinline__ void sits_k_pdl_trigger(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

static __host__ __device__ __forceinline__ bool sits_k_aligned16(const void *p)
{
    return ((uintptr_t)p & 15u) == 0;
}

/* True when rows of n elements at p (and at every multiple of stride) can move in uint4s. */
static inline bool sits_k_vec8_ok(const void *p, long long n, long long stride)
{
    return sits_k_aligned16(p) && n % 8 == 0 && stride % 8 == 0;
}

/* The RoPE rotation of the pair (a, b) by the angle with cosine c and sine s, as a c - b s and
 * b c + a s with every product and sum rounded on its own (no FMA contraction), so rope.cu and the
 * fused rope_kv.cu give the same bits (and the cpu reference's fp32 arithmetic). */
static __device__ __forceinline__ float sits_k_rot_lo(float a, float b, float c, float s)
{
    return __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
}
static __device__ __forceinline__ float sits_k_rot_hi(float a, float b, float c, float s)
{
    return __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
}

static __device__ __forceinline__ float sits_k_bf2f(sits_bf16_t h) { return __bfloat162float(__ushort_as_bfloat16(h)); }
static __device__ __forceinline__ sits_bf16_t sits_k_f2bf(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }

/* V consecutive bf16 at p <-> fp32 f[V]. */
template <int V> static __device__ __forceinline__ void sits_k_load(const sits_bf16_t *p, float (&f)[V]);
template <int V> static __device__ __forceinline__ void sits_k_store(sits_bf16_t *p, const float (&f)[V]);

template <> __device__ __forceinline__ void sits_k_load<1>(const sits_bf16_t *p, float (&f)[1]) { f[0] = sits_k_bf2f(*p); }
template <> __device__ __forceinline__ void sits_k_store<1>(sits_bf16_t *p, const float (&f)[1]) { *p = sits_k_f2bf(f[0]); }

/* 8 bf16 packed in a uint4 <-> fp32 f[8] (round to nearest even) */
static __device__ __forceinline__ void sits_k_unpack8(const uint4 &u, float (&f)[8])
{
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&u);
#pragma unroll
    for (int k = 0; k < 4; k++) {
        float2 t = __bfloat1622float2(h[k]);
        f[2 * k] = t.x;
        f[2 * k + 1] = t.y;
    }
}

static __device__ __forceinline__ uint4 sits_k_pack8(const float (&f)[8])
{
    uint4 u;
    __nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&u);
#pragma unroll
    for (int k = 0; k < 4; k++) h[k] = __floats2bfloat162_rn(f[2 * k], f[2 * k + 1]);
    return u;
}

template <> __device__ __forceinline__ void sits_k_load<8>(const sits_bf16_t *p, float (&f)[8])
{
    sits_k_unpack8(*reinterpret_cast<const uint4 *>(p), f);
}

template <> __device__ __forceinline__ void sits_k_store<8>(sits_bf16_t *p, const float (&f)[8])
{
    *reinterpret_cast<uint4 *>(p) = sits_k_pack8(f);
}

static __device__ __forceinline__ float sits_k_warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread gets the total.
 * Call at most once per kernel (the scratch is not re-synchronised for reuse). */
static __device__ __forceinline__ float sits_k_block_sum(float v)
{
    __shared__ float red[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    v = sits_k_warp_sum(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = lane < n_warps ? red[lane] : 0.0f;
    return sits_k_warp_sum(v);
}

/* Max over the block (same rules as sits_k_block_sum, its own scratch). */
static __device__ __forceinline__ float sits_k_block_max(float v)
{
    __shared__ float red_max[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0) red_max[warp] = v;
    __syncthreads();
    v = lane < n_warps ? red_max[lane] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* [perf: ring gemv] mbarriers and bulk copies (sm_90) for kernels that stream weights through a shared-memory ring
 * (kernels/gemv.cu gemv_ring_kernel, gemv_mma_kernel and [int4 ring] gemv_w4_kernel): a stage's `full` barrier
 * completes when its copies' bytes (expect_tx) and its arrivals are in; its `empty` barrier when every consumer has
 * released it. */
static __device__ __forceinline__ uint32_t sits_k_smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
static __device__ __forceinline__ void sits_k_mbar_init(uint64_t *b, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(sits_k_smem_addr(b)), "r"(count) : "memory");
}
/* after the inits, before the block's barrier that publishes them */
static __device__ __forceinline__ void sits_k_mbar_init_fence(void) { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
static __device__ __forceinline__ void sits_k_mbar_expect_tx(uint64_t *b, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sits_k_smem_addr(b)), "r"(bytes) : "memory");
}
static __device__ __forceinline__ void sits_k_mbar_arrive(uint64_t *b)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(sits_k_smem_addr(b)) : "memory");
}
static __device__ __forceinline__ void sits_k_mbar_wait(uint64_t *b, unsigned parity)
{
    asm volatile("{\n"
                 ".reg .pred P1;\n"
                 "SITS_MBAR_WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
                 "@P1 bra SITS_MBAR_DONE;\n"
                 "bra SITS_MBAR_WAIT;\n"
                 "SITS_MBAR_DONE:\n"
                 "}\n" ::"r"(sits_k_smem_addr(b)),
                 "r"(parity)
                 : "memory");
}
/* an L2 policy for bytes read once a step (weights) */
static __device__ __forceinline__ uint64_t sits_k_l2_evict_first(void)
{
    uint64_t pol;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    return pol;
}
/* bytes (a multiple of 16; dst, src 16-byte aligned) global -> shared, counted on bar's transaction bytes */
static __device__ __forceinline__ void sits_k_bulk_load(void *dst, const void *src, unsigned bytes, uint64_t *bar, uint64_t policy)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
                     sits_k_smem_addr(dst)),
                 "l"(src), "r"(bytes), "r"(sits_k_smem_addr(bar)), "l"(policy)
                 : "memory");
}

/* SwiGLU's activation of one element, fp32: silu(a) * b (kernels/silu_mul.cu, and the SwiGLU epilogue of
 * kernels/gemv.cu: one definition, the same bits) */
static __device__ __forceinline__ float sits_k_silu_mul1(float a, float b) { return a / (1.0f + expf(-a)) * b; }

/* [gpt-oss] gpt-oss's experts' activation (transformers' GptOssExperts): the gate clamped above, the up projection
 * on both sides, fp32. Comparisons, not fminf / fmaxf: a NaN stays NaN, as torch.clamp leaves it. */
static __device__ __forceinline__ float sits_k_swiglu_oai1(float a, float b, float alpha, float limit)
{
    a = a > limit ? limit : a;
    b = b > limit ? limit : b < -limit ? -limit : b;
    return (b + 1.0f) * (a / (1.0f + expf(-alpha * a)));
}

/* ---- [fp8] per-row E4M3 quantisation of activations, the definition of util/dtype.h --------------
 * s = absmax(row) / 448 (1 for an all-zero row), q = e4m3(v / s): IEEE division, round to nearest
 * even, saturating. Row producers (kernels/fp8.cu, rmsnorm.cu, silu_mul.cu, allreduce.cu) track
 * absmax over the bf16 values they store, take the block max, then requantise their own stores. */
static __device__ __forceinline__ float sits_k_fp8_scale(float absmax) { return absmax > 0.0f ? __fdiv_rn(absmax, 448.0f) : 1.0f; }

/* f rounded to bf16 (round to nearest even), as a float: the value a bf16 store would hold */
static __device__ __forceinline__ float sits_k_round_bf(float f) { return __bfloat162float(__float2bfloat16_rn(f)); }

/* max(mx, |bf16(f[k])|) over the group: the magnitudes of the values as they are stored */
template <int V> static __device__ __forceinline__ float sits_k_absmax_bf(float mx, const float (&f)[V])
{
#pragma unroll
    for (int k = 0; k < V; k++) mx = fmaxf(mx, fabsf(__bfloat162float(__float2bfloat16_rn(f[k]))));
    return mx;
}

/* q[0..V) = e4m3(f / s); V = 8 stores one uint2 (q 8-byte aligned). */
template <int V> static __device__ __forceinline__ void sits_k_store_e4m3(uint8_t *q, const float (&f)[V], float s)
{
    if constexpr (V == 8) {
        uint2 u;
        uint8_t *b = reinterpret_cast<uint8_t *>(&u);
#pragma unroll
        for (int k = 0; k < 8; k++) b[k] = (uint8_t)__nv_cvt_float_to_fp8(__fdiv_rn(f[k], s), __NV_SATFINITE, __NV_E4M3);
        *reinterpret_cast<uint2 *>(q) = u;
    } else {
#pragma unroll
        for (int k = 0; k < V; k++) q[k] = (uint8_t)__nv_cvt_float_to_fp8(__fdiv_rn(f[k], s), __NV_SATFINITE, __NV_E4M3);
    }
}

/* [perf: row kernels] The quantising end of a register-resident row kernel: u[j] holds the row's group
 * threadIdx.x + j * blockDim.x as stored (8 bf16), mx the thread's absmax of them; the block's scale goes to
 * *scale_out and q_row[g * 8 ..] = e4m3(u / scale) -- sits_k_quant_fp8_rows' bytes. */
template <int G>
static __device__ __forceinline__ void sits_k_reg_row_to_e4m3(const uint4 (&u)[G], float mx, int n_groups, uint8_t *q_row,
                                                              float *scale_out)
{
    const float s = sits_k_fp8_scale(sits_k_block_max(mx));
    if (threadIdx.x == 0) *scale_out = s;
#pragma unroll
    for (int j = 0; j < G; j++) {
        const int g = threadIdx.x + j * blockDim.x;
        if (g < n_groups) {
            float f[8];
            sits_k_unpack8(u[j], f);
            sits_k_store_e4m3<8>(q_row + (size_t)g * 8, f, s);
        }
    }
}

/* dst[0..n) = src[0..n) by the whole block; V = 8 moves uint4s (n % 8 == 0, both 16-byte aligned). */
template <int V> static __device__ __forceinline__ void sits_k_copy_row(sits_bf16_t *dst, const sits_bf16_t *src, int n)
{
    if (V == 8) {
        const uint4 *s = reinterpret_cast<const uint4 *>(src);
        uint4 *d = reinterpret_cast<uint4 *>(dst);
        for (int i = threadIdx.x; i < n / 8; i += blockDim.x) d[i] = s[i];
    } else {
        for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
    }
}

template <int V> static __device__ __forceinline__ void sits_k_zero_row(sits_bf16_t *dst, int n)
{
    if (V == 8) {
        uint4 *d = reinterpret_cast<uint4 *>(dst);
        for (int i = threadIdx.x; i < n / 8; i += blockDim.x) d[i] = make_uint4(0, 0, 0, 0);
    } else {
        for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = 0;
    }
}

/* [perf: row kernels] A row kernel that keeps its row in registers: each thread takes G groups of 8 (groups
 * threadIdx.x + j * blockDim.x, j < G), G the smallest of 1, 2, 4, 8 with ceil(groups / G) <= cap threads
 * (cap 256 or 512; G 8 may take up to 512 threads: rows of up to 32768 values); 0 when the row is longer.
 * *threads_p: a multiple of 32. */
static inline int sits_k_reg_row_g(int groups, int cap, int *threads_p)
{
    int g = 1;
    while (g < 8 && groups > cap * g) g *= 2;
    int t = (groups + g - 1) / g;
    if (t > 512) return 0;
    *threads_p = (t + 31) / 32 * 32;
    return g;
}

/* [perf: pdl] Launch a row kernel (grid blocks of block threads, smem bytes of dynamic shared memory) -- or the RoPE + KV
 * write and decode attention kernels -- as a programmatic dependent launch, or plainly when SITS_ROW_PDL=0 (A/B): its blocks are placed while the kernel before it drains. The kernel calls sits_k_pdl_wait
 * before it reads or writes anything the kernels before it touch (reads of weights may come first). */
static inline int sits_k_row_pdl(void)
{
    const char *e = getenv("SITS_ROW_PDL");
    return !(e && atoi(e) == 0);
}
/* The launch itself: as a programmatic dependent when pdl, else plainly (the linears of kernels/gemv.cu: always). */
template <typename... P, typename... A>
static inline cudaError_t sits_k_launch_pdl(void (*kernel)(P...), dim3 grid, unsigned block, size_t smem, cudaStream_t stream,
                                           bool pdl, A... args)
{
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(block);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kernel, args...);
}
template <typename... P, typename... A>
static inline cudaError_t sits_k_launch_dep(void (*kernel)(P...), dim3 grid, unsigned block, size_t smem, cudaStream_t stream,
                                           A... args)
{
    return sits_k_launch_pdl(kernel, grid, block, smem, stream, sits_k_row_pdl(), args...);
}

/* [perf: launch cost] The current device (*dev_p) and its SM count, asked of the driver once a device (devices below
 * SITS_K_DEV_CACHE; the rest each call): the eager verification steps launch ~128 linears a step. */
#define SITS_K_DEV_CACHE 16
static inline cudaError_t sits_k_sm_count(int *dev_p, int *n_sms)
{
    static int cache[SITS_K_DEV_CACHE];   /* 0: not yet asked */
    cudaError_t c = cudaGetDevice(dev_p);
    if (c != cudaSuccess) return c;
    const int dev = *dev_p;
    if (dev >= 0 && dev < SITS_K_DEV_CACHE && (*n_sms = __atomic_load_n(&cache[dev], __ATOMIC_RELAXED)) > 0) return cudaSuccess;
    if ((c = cudaDeviceGetAttribute(n_sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess) return c;
    if (dev >= 0 && dev < SITS_K_DEV_CACHE) __atomic_store_n(&cache[dev], *n_sms, __ATOMIC_RELAXED);
    return cudaSuccess;
}
/* Raise kernel's dynamic shared-memory limit on device dev to at least smem bytes; set[] (one array a kernel, in its
 * launcher) remembers the largest limit set a device, so the driver is asked only when a launch needs more. */
template <typename... P>
static inline cudaError_t sits_k_smem_limit(void (*kernel)(P...), int dev, int smem, int (&set)[SITS_K_DEV_CACHE])
{
    const bool cached = dev >= 0 && dev < SITS_K_DEV_CACHE;
    if (cached && __atomic_load_n(&set[dev], __ATOMIC_RELAXED) >= smem) return cudaSuccess;
    const cudaError_t c = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (c == cudaSuccess && cached) __atomic_store_n(&set[dev], smem, __ATOMIC_RELAXED);
    return c;
}

/* Threads for a row kernel with `work` items per row: a multiple of 32 in [32, max_threads]. */
static inline int sits_k_row_threads(long long work, int max_threads)
{
    long long t = (work + 31) / 32 * 32;
    if (t < 32) t = 32;
    if (t > max_threads) t = max_threads;
    return (int)t;
}

#endif
