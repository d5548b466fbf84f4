/* allreduce.cu -- the custom all-reduce of the GPUs of one node over CUDA IPC (bf16 sums), and the
 * same fused with the residual add + RMSNorm that follows it in the forward pass.
 *
 * Memory (set up by src/comm/custom_ar.c; see sits_k_ar_peers_t): every rank owns one IPC buffer,
 * mapped into every other rank: the signal words (flags written by peers, a call counter per
 * block), then two staging halves used by alternate calls (parity = call number & 1). All data
 * moves by PUSH: a rank writes its contribution into the peers' staging (remote stores over
 * NVLink), raises a flag in each peer with a release store, waits for the peers' flags with
 * acquire loads, and then reads only its own (local) memory.
 *   one-shot (small):  push all of `in` into slot [me] of every peer; barrier; every rank sums the
 *                      N contributions in rank order 0..N-1 (so every rank gets the same bits).
 *   two-shot (medium): push partition p of `in` to rank p (reduce-scatter); barrier; rank p sums
 *                      partition p and pushes the result to every peer (all-gather); barrier; copy.
 *   fused:             one-shot per row, then residual += bf16(sum); out = rmsnorm(residual) * w,
 *                      the same arithmetic, thread mapping and reduction order as rmsnorm.cu's
 *                      add_rmsnorm kernels (bitwise the unfused result when the pointers are 16-byte
 *                      aligned and dim % 8 == 0). [fp8] Optionally also quantises each out row to
 *                      E4M3 for the FP8 GEMM that reads it (common.cuh's per-row definition).
 * Sums: fp32 accumulation of the bf16 inputs in rank order, one rounding to bf16 (round to nearest).
 *
 * Synchronisation without host involvement, safe under CUDA graph replay: kernel arguments never
 * change between calls; what changes lives in device memory. Block b of every kernel increments its
 * own call counter c (signal word) and, at its barrier, stores the value 2c+1 / 2c+2 into the flag
 * [b][me] of each peer, then waits until its own flags [b][p] reach that value (wrap-safe >=).
 * Invariants that make ONE barrier per one-shot call enough:
 *   - every kernel here launches exactly SITS_K_AR_BLOCKS blocks and every block takes part in the
 *     barrier(s) of every call, so block b's counter is the same on all ranks and across blocks;
 *   - a block pushes exactly the units it later reads from the peers (the same unit -> thread map on
 *     every rank: it depends only on the element count, which all ranks share);
 *   - all calls of one communicator run in order on one stream per rank.
 * Then when rank r starts call c, every peer has finished call c - 2 (r's call c - 1 passed its
 * barrier, so every peer had started call c - 1), so the staging half of parity c & 1 is free; a
 * peer can be at most one call ahead, so the monotonic flags never skip a barrier. A rank that
 * dies leaves its peers spinning: the backend's health check (the wrapped NCCL communicator's)
 * aborts the job at the step deadline.
 *
 * Units: 8 bf16 (16 bytes). Unit u of a message of n elements holds elements [8u, 8u + 8); the
 * tail past n is zero in staging and never stored. Staging is 16-byte aligned; user buffers may be
 * misaligned (they are then moved element by element), any n > 0. Small messages are spread over
 * all blocks: 32-unit chunks (one warp's worth) go round-robin over the blocks. */
#include "kernels/common.cuh"

#define AR_THREADS 512
#define AR_CHUNK 32                 /* units per warp-chunk (one unit per lane) */
#define AR_FLAG_STRIDE 32           /* uint32 words between the flag rows of two blocks (128 bytes) */
#define AR_SEQ_OFF (SITS_K_AR_BLOCKS * AR_FLAG_STRIDE)  /* word offset of the call counters */

static_assert((AR_SEQ_OFF + SITS_K_AR_BLOCKS) * 4 <= SITS_K_AR_SIGNAL_BYTES, "signal words fit");
static_assert(SITS_K_AR_MAX_RANKS <= AR_FLAG_STRIDE, "a flag row holds every source rank");

/* ---- memory-model helpers ---------------------------------------------------------------------- */

static __device__ __forceinline__ void ar_st_release(uint32_t *p, uint32_t v)
{
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

static __device__ __forceinline__ uint32_t ar_ld_acquire(const uint32_t *p)
{
    uint32_t v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

/* This block's call number (1, 2, ...): read and bumped by thread 0, shared with the block. */
static __device__ __forceinline__ uint32_t ar_begin(const sits_k_ar_peers_t &P)
{
    __shared__ uint32_t s_call;
    if (threadIdx.x == 0) {
        volatile uint32_t *seq = P.sig[P.rank] + AR_SEQ_OFF + blockIdx.x;
        uint32_t c = *seq + 1;
        *seq = c;
        s_call = c;
    }
    __syncthreads();
    return s_call;
}

/* Block-level barrier with the same block of every peer: everything this block stored before it
 * (remote pushes included) is visible to the peers' blocks after theirs, and vice versa. */
template <int NR>
static __device__ __forceinline__ void ar_barrier(const sits_k_ar_peers_t &P, uint32_t want)
{
    __syncthreads();
    int t = threadIdx.x;
    if (t < NR && t != P.rank) {
        ar_st_release(P.sig[t] + blockIdx.x * AR_FLAG_STRIDE + P.rank, want);
        const uint32_t *mine = P.sig[P.rank] + blockIdx.x * AR_FLAG_STRIDE + t;
        while ((int32_t)(ar_ld_acquire(mine) - want) < 0) {
        }
    }
    __syncthreads();
}

/* ---- 8-element units ----------------------------------------------------------------------------- */

/* Elements [8u, 8u + 8) of p (n elements), zero past n; vec: p is 16-byte aligned. */
static __device__ __forceinline__ uint4 ar_load_unit(const sits_bf16_t *p, size_t u, size_t n, bool vec)
{
    size_t e0 = u * 8;
    if (vec && e0 + 8 <= n) return *reinterpret_cast<const uint4 *>(p + e0);
    uint4 r;
    uint16_t *h = reinterpret_cast<uint16_t *>(&r);
#pragma unroll
    for (int k = 0; k < 8; k++) h[k] = e0 + k < n ? p[e0 + k] : (uint16_t)0;
    return r;
}

static __device__ __forceinline__ void ar_store_unit(sits_bf16_t *p, size_t u, size_t n, bool vec, uint4 v)
{
    size_t e0 = u * 8;
    if (vec && e0 + 8 <= n) {
        *reinterpret_cast<uint4 *>(p + e0) = v;
        return;
    }
    const uint16_t *h = reinterpret_cast<const uint16_t *>(&v);
#pragma unroll
    for (int k = 0; k < 8; k++)
        if (e0 + k < n) p[e0 + k] = h[k];
}

static __device__ __forceinline__ void ar_acc_unit(float (&acc)[8], uint4 v)
{
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&v);
#pragma unroll
    for (int k = 0; k < 4; k++) {
        float2 f = __bfloat1622float2(h[k]);
        acc[2 * k] += f.x;
        acc[2 * k + 1] += f.y;
    }
}

static __device__ __forceinline__ uint4 ar_round_unit(const float (&acc)[8])
{
    uint4 r;
    __nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&r);
#pragma unroll
    for (int k = 0; k < 4; k++) h[k] = __floats2bfloat162_rn(acc[2 * k], acc[2 * k + 1]);
    return r;
}

static __device__ __forceinline__ uint4 *ar_unit_ptr(unsigned char *base, size_t off, size_t u)
{
    return reinterpret_cast<uint4 *>(base + off) + u;
}

/* The units [0, n_units) a thread owns: warp-chunks of AR_CHUNK units go round-robin over the
 * blocks, then over the warps of a block, so that even a small message is spread over every block:
 *   for (size_t u = ar_first_unit(); u < n_units; u += ar_unit_stride()) */
static __device__ __forceinline__ size_t ar_first_unit(void)
{
    return ((size_t)(threadIdx.x / 32) * gridDim.x + blockIdx.x) * AR_CHUNK + (threadIdx.x & 31);
}

static __device__ __forceinline__ size_t ar_unit_stride(void)
{
    return (size_t)blockDim.x * gridDim.x; /* (warps per block) x (blocks) x AR_CHUNK, AR_CHUNK == 32 */
}

/* ---- one-shot ----------------------------------------------------------------------------------- */

template <int NR>
static __global__ void __launch_bounds__(AR_THREADS) ar_oneshot_kernel(sits_k_ar_peers_t P, sits_bf16_t *out,
                                                                          const sits_bf16_t *in, size_t n)
{
    uint32_t call = ar_begin(P);
    size_t n_units = (n + 7) / 8, half = (size_t)(call & 1) * P.half_bytes, slot = P.os_slot_bytes;
    int me = P.rank;
    bool vin = sits_k_aligned16(in), vout = sits_k_aligned16(out);

    for (size_t u = ar_first_unit(); u < n_units; u += ar_unit_stride()) {
        uint4 v = ar_load_unit(in, u, n, vin);
#pragma unroll
        for (int p = 0; p < NR; p++)
            if (p != me) __stcg(ar_unit_ptr(P.stage[p], half + (size_t)me * slot, u), v);
    }

    ar_barrier<NR>(P, 2 * call + 2);

    for (size_t u = ar_first_unit(); u < n_units; u += ar_unit_stride()) {
        float acc[8] = { 0, 0, 0, 0, 0, 0, 0, 0 };
#pragma unroll
        for (int q = 0; q < NR; q++)
            ar_acc_unit(acc, q == me ? ar_load_unit(in, u, n, vin) : __ldcg(ar_unit_ptr(P.stage[me], half + (size_t)q * slot, u)));
        ar_store_unit(out, u, n, vout, ar_round_unit(acc));
    }
}

/* ---- two-shot ----------------------------------------------------------------------------------- */

/* Staging half: [0, NR * ts) reduce-scatter slots (slot q: rank q's copy of my partition), then
 * [NR * ts, 2 * NR * ts) all-gather slots (slot p: partition p's sum from rank p). */
template <int NR>
static __global__ void __launch_bounds__(AR_THREADS) ar_twoshot_kernel(sits_k_ar_peers_t P, sits_bf16_t *out,
                                                                          const sits_bf16_t *in, size_t n)
{
    uint32_t call = ar_begin(P);
    size_t n_units = (n + 7) / 8, part = (n_units + NR - 1) / NR;
    size_t half = (size_t)(call & 1) * P.half_bytes, ts = P.ts_slot_bytes, ag = half + (size_t)NR * ts;
    int me = P.rank;
    bool vin = sits_k_aligned16(in), vout = sits_k_aligned16(out);

    /* reduce-scatter: partition p of my input goes to rank p's slot [me] */
    for (size_t i = ar_first_unit(); i < part; i += ar_unit_stride()) {
#pragma unroll
        for (int p = 0; p < NR; p++) {
            size_t u = (size_t)p * part + i;
            if (p != me && u < n_units) __stcg(ar_unit_ptr(P.stage[p], half + (size_t)me * ts, i), ar_load_unit(in, u, n, vin));
        }
    }

    ar_barrier<NR>(P, 2 * call + 1);

    /* my partition: sum in rank order, store, push to every peer's all-gather slot [me] */
    for (size_t i = ar_first_unit(); i < part; i += ar_unit_stride()) {
        size_t u = (size_t)me * part + i;
        if (u < n_units) {
            float acc[8] = { 0, 0, 0, 0, 0, 0, 0, 0 };
#pragma unroll
            for (int q = 0; q < NR; q++)
                ar_acc_unit(acc, q == me ? ar_load_unit(in, u, n, vin) : __ldcg(ar_unit_ptr(P.stage[me], half + (size_t)q * ts, i)));
            uint4 s = ar_round_unit(acc);
            ar_store_unit(out, u, n, vout, s);
#pragma unroll
            for (int p = 0; p < NR; p++)
                if (p != me) __stcg(ar_unit_ptr(P.stage[p], ag + (size_t)me * ts, i), s);
        }
    }

    ar_barrier<NR>(P, 2 * call + 2);

    /* all-gather: the other partitions from my slots */
    for (size_t i = ar_first_unit(); i < part; i += ar_unit_stride()) {
#pragma unroll
        for (int p = 0; p < NR; p++) {
            size_t u = (size_t)p * part + i;
            if (p != me && u < n_units) ar_store_unit(out, u, n, vout, __ldcg(ar_unit_ptr(P.stage[me], ag + (size_t)p * ts, i)));
        }
    }
}

/* ---- fused: all-reduce + residual add + RMSNorm --------------------------------------------------- */

/* V elements at p (element offset e) <-> fp32; vec: the pointer is 16-byte aligned (V = 8 then moves
 * one uint4 of bf16, two float4 of fp32). */
template <int V> static __device__ __forceinline__ void ar_ld_bf(const sits_bf16_t *p, size_t e, bool vec, float (&f)[V])
{
    if constexpr (V == 8) {
        if (vec) {
            sits_k_load<8>(p + e, f);
            return;
        }
    }
#pragma unroll
    for (int k = 0; k < V; k++) f[k] = sits_k_bf2f(p[e + k]);
}

template <int V> static __device__ __forceinline__ void ar_st_bf(sits_bf16_t *p, size_t e, bool vec, const float (&f)[V])
{
    if constexpr (V == 8) {
        if (vec) {
            sits_k_store<8>(p + e, f);
            return;
        }
    }
#pragma unroll
    for (int k = 0; k < V; k++) p[e + k] = sits_k_f2bf(f[k]);
}

template <int V> static __device__ __forceinline__ void ar_ld_f32(const float *p, size_t e, bool vec, float (&f)[V])
{
    if constexpr (V == 8) {
        if (vec) {
            float4 a = reinterpret_cast<const float4 *>(p + e)[0], b = reinterpret_cast<const float4 *>(p + e)[1];
            f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
            f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
            return;
        }
    }
#pragma unroll
    for (int k = 0; k < V; k++) f[k] = p[e + k];
}

template <int V> static __device__ __forceinline__ void ar_st_f32(float *p, size_t e, bool vec, const float (&f)[V])
{
    if constexpr (V == 8) {
        if (vec) {
            reinterpret_cast<float4 *>(p + e)[0] = make_float4(f[0], f[1], f[2], f[3]);
            reinterpret_cast<float4 *>(p + e)[1] = make_float4(f[4], f[5], f[6], f[7]);
            return;
        }
    }
#pragma unroll
    for (int k = 0; k < V; k++) p[e + k] = f[k];
}

/* Push V bf16 (raw bits) of a user row (any alignment when !vec) at element e into staging (aligned,
 * same element offset). */
template <int V> static __device__ __forceinline__ void ar_push(unsigned char *dst, const sits_bf16_t *src, size_t e, bool vec)
{
    if constexpr (V == 8) __stcg(reinterpret_cast<uint4 *>(dst) + e / 8, ar_load_unit(src + e, 0, 8, vec));
    else reinterpret_cast<sits_bf16_t *>(dst)[e] = src[e];
}

template <int V> static __device__ __forceinline__ void ar_acc_staged(float (&acc)[V], const unsigned char *src, size_t e)
{
    if constexpr (V == 8) ar_acc_unit(acc, __ldcg(reinterpret_cast<const uint4 *>(src) + e / 8));
    else acc[0] += sits_k_bf2f(__ldcg(reinterpret_cast<const unsigned short *>(src) + e));
}

/* sits_k_block_sum's arithmetic (same order), reusable within a kernel. */
static __device__ __forceinline__ float ar_block_sum(float v)
{
    __shared__ float red[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    v = sits_k_warp_sum(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = lane < n_warps ? red[lane] : 0.0f;
    v = sits_k_warp_sum(v);
    __syncthreads(); /* red[] is free for the next row */
    return v;
}

static __device__ __forceinline__ float ar_block_max(float v)
{
    v = sits_k_block_max(v);
    __syncthreads(); /* its scratch is free for the next row */
    return v;
}

/* x [n, dim]: this rank's partial sums; rows go round-robin over the blocks (row r: block r % G).
 * RF: fp32 residual (residual += sum, never rounded) else bf16 (rounded after the add).
 * [fp8] q != NULL: also q [n, dim] E4M3 + q_scale [n] of each out row as stored (common.cuh). */
template <int NR, int V, bool RF>
static __global__ void __launch_bounds__(256) ar_add_rmsnorm_kernel(sits_k_ar_peers_t P, sits_bf16_t *out, uint8_t *q,
                                                                       float *q_scale, void *residual, const sits_bf16_t *x,
                                                                       const float *w, int n, int dim, float eps)
{
    uint32_t call = ar_begin(P);
    size_t half = (size_t)(call & 1) * P.half_bytes, slot = P.os_slot_bytes;
    int me = P.rank, n_groups = dim / V;
    bool vx = sits_k_aligned16(x), vo = sits_k_aligned16(out), vr = sits_k_aligned16(residual), vw = sits_k_aligned16(w);

    for (int row = blockIdx.x; row < n; row += gridDim.x) {
        size_t e_row = (size_t)row * dim;
        for (int g = threadIdx.x; g < n_groups; g += blockDim.x) {
            size_t e = e_row + (size_t)g * V;
#pragma unroll
            for (int p = 0; p < NR; p++)
                if (p != me) ar_push<V>(P.stage[p] + half + (size_t)me * slot, x, e, vx);
        }
    }

    ar_barrier<NR>(P, 2 * call + 2);

    for (int row = blockIdx.x; row < n; row += gridDim.x) {
        size_t e_row = (size_t)row * dim;
        float ss = 0.0f;
        for (int g = threadIdx.x; g < n_groups; g += blockDim.x) {
            size_t e = e_row + (size_t)g * V;
            float acc[V], r[V];
#pragma unroll
            for (int k = 0; k < V; k++) acc[k] = 0.0f;
#pragma unroll
            for (int q = 0; q < NR; q++) {
                if (q == me) {
                    float f[V];
                    ar_ld_bf<V>(x, e, vx, f);
#pragma unroll
                    for (int k = 0; k < V; k++) acc[k] += f[k];
                } else {
                    ar_acc_staged<V>(acc, P.stage[me] + half + (size_t)q * slot, e);
                }
            }
            if (RF) {
                float *rr = static_cast<float *>(residual);
                ar_ld_f32<V>(rr, e, vr, r);
#pragma unroll
                for (int k = 0; k < V; k++) {
                    r[k] += __bfloat162float(__float2bfloat16_rn(acc[k])); /* the all-reduced value as stored */
                    ss += r[k] * r[k];
                }
                ar_st_f32<V>(rr, e, vr, r);
            } else {
                sits_bf16_t *rr = static_cast<sits_bf16_t *>(residual);
                ar_ld_bf<V>(rr, e, vr, r);
#pragma unroll
                for (int k = 0; k < V; k++) {
                    float s = __bfloat162float(__float2bfloat16_rn(acc[k]));
                    r[k] = __bfloat162float(__float2bfloat16_rn(r[k] + s));
                    ss += r[k] * r[k];
                }
                ar_st_bf<V>(rr, e, vr, r);
            }
        }
        ss = ar_block_sum(ss);
        float inv = 1.0f / sqrtf(ss / (float)dim + eps), mx = 0.0f;
        for (int g = threadIdx.x; g < n_groups; g += blockDim.x) {
            size_t e = e_row + (size_t)g * V;
            float r[V], wf[V];
            if (RF) ar_ld_f32<V>(static_cast<const float *>(residual), e, vr, r);
            else ar_ld_bf<V>(static_cast<const sits_bf16_t *>(residual), e, vr, r);
            ar_ld_f32<V>(w, (size_t)g * V, vw, wf);   /* fp32 norm weights */
#pragma unroll
            for (int k = 0; k < V; k++) r[k] = wf[k] * (r[k] * inv);
            ar_st_bf<V>(out, e, vo, r);
            if (q) mx = sits_k_absmax_bf<V>(mx, r);
        }
        if (q) {
            float s = sits_k_fp8_scale(ar_block_max(mx));
            if (threadIdx.x == 0) q_scale[row] = s;
            for (int g = threadIdx.x; g < n_groups; g += blockDim.x) { /* the thread's own stores */
                size_t e = e_row + (size_t)g * V;
                float f[V];
                ar_ld_bf<V>(out, e, vo, f);
                sits_k_store_e4m3<V>(q + e, f, s);
            }
        }
    }
}

/* ---- launchers ---------------------------------------------------------------------------------- */

static bool ar_peers_ok(const sits_k_ar_peers_t *P)
{
    if (!P || P->rank < 0 || P->rank >= P->size) return false;
    for (int p = 0; p < P->size; p++)
        if (!P->stage[p] || !P->sig[p] || !sits_k_aligned16(P->stage[p])) return false;
    return P->half_bytes % 16 == 0 && P->os_slot_bytes % 16 == 0 && P->ts_slot_bytes % 16 == 0;
}

#define AR_DISPATCH(size_, launch_) \
    switch (size_) { \
    case 2: launch_(2); break; \
    case 4: launch_(4); break; \
    case 8: launch_(8); break; \
    default: return SITS_ERR_UNSUPPORTED; \
    }

extern "C" int sits_k_ar_size_supported(int size)
{
    return size == 2 || size == 4 || size == 8;
}

extern "C" sits_status_t sits_k_ar_oneshot(const sits_k_ar_peers_t *peers, sits_bf16_t *out, const sits_bf16_t *in, size_t n,
                                           cudaStream_t stream)
{
    if (!ar_peers_ok(peers) || n == 0 || (n + 7) / 8 * 16 > peers->os_slot_bytes) return SITS_ERR_INVALID;
#define L_(nr_) ar_oneshot_kernel<nr_><<<SITS_K_AR_BLOCKS, AR_THREADS, 0, stream>>>(*peers, out, in, n)
    AR_DISPATCH(peers->size, L_)
#undef L_
    return SITS_K_LAUNCH_STATUS();
}

extern "C" sits_status_t sits_k_ar_twoshot(const sits_k_ar_peers_t *peers, sits_bf16_t *out, const sits_bf16_t *in, size_t n,
                                           cudaStream_t stream)
{
    if (!ar_peers_ok(peers) || n == 0) return SITS_ERR_INVALID;
    size_t part = ((n + 7) / 8 + peers->size - 1) / peers->size;
    if (part * 16 > peers->ts_slot_bytes || 2 * (size_t)peers->size * peers->ts_slot_bytes > peers->half_bytes)
        return SITS_ERR_INVALID;
#define L_(nr_) ar_twoshot_kernel<nr_><<<SITS_K_AR_BLOCKS, AR_THREADS, 0, stream>>>(*peers, out, in, n)
    AR_DISPATCH(peers->size, L_)
#undef L_
    return SITS_K_LAUNCH_STATUS();
}

extern "C" sits_status_t sits_k_ar_add_rmsnorm(const sits_k_ar_peers_t *peers, sits_bf16_t *out, uint8_t *q, float *q_scale,
                                               void *residual, int residual_f32, const sits_bf16_t *x, const float *w,
                                               int n, int dim, float eps, cudaStream_t stream)
{
    if (!ar_peers_ok(peers) || n <= 0 || dim <= 0 || (size_t)n * dim * 2 > peers->os_slot_bytes) return SITS_ERR_INVALID;
    if ((q != NULL) != (q_scale != NULL) || ((uintptr_t)q & 7u)) return SITS_ERR_INVALID;
    /* rmsnorm.cu's choices: 8-wide groups when dim allows, its thread count per row */
    int v8 = dim % 8 == 0;
    int threads = sits_k_row_threads(v8 ? dim / 8 : dim, 256);
#define L_(nr_) \
    do { \
        if (v8 && residual_f32) \
            ar_add_rmsnorm_kernel<nr_, 8, true><<<SITS_K_AR_BLOCKS, threads, 0, stream>>>(*peers, out, q, q_scale, residual, x, w, n, dim, eps); \
        else if (v8) \
            ar_add_rmsnorm_kernel<nr_, 8, false><<<SITS_K_AR_BLOCKS, threads, 0, stream>>>(*peers, out, q, q_scale, residual, x, w, n, dim, eps); \
        else if (residual_f32) \
            ar_add_rmsnorm_kernel<nr_, 1, true><<<SITS_K_AR_BLOCKS, threads, 0, stream>>>(*peers, out, q, q_scale, residual, x, w, n, dim, eps); \
        else \
            ar_add_rmsnorm_kernel<nr_, 1, false><<<SITS_K_AR_BLOCKS, threads, 0, stream>>>(*peers, out, q, q_scale, residual, x, w, n, dim, eps); \
    } while (0)
    AR_DISPATCH(peers->size, L_)
#undef L_
    return SITS_K_LAUNCH_STATUS();
}
