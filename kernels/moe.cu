/* moe.cu -- [moe] Mixture-of-Experts router top-k and weighted combine (contracts: backend.h
 * moe_topk / moe_combine; cpu twins sits_backend_cpu_moe_topk / _combine).
 *   topk:    logits [n, E] bf16 -> ids [n, k] int32, wts [n, k] fp32. One warp per token: lane l holds (in registers)
 *            experts l, l + 32, ... (E <= 1024: a 32-bit mask of the ones taken); k rounds of a warp
 *            argmax (value desc, index asc). The softmax sum is a warp tree (not index order: the
 *            weights match the cpu twin to fp32 rounding).
 *   combine: out [n, dim] bf16 = sum_j wts[t*kk + j] * y[pos[t*kk + j]] (fp32, j order, pos -1 skipped).
 *            One block per token, threads over the columns: no atomics, deterministic. */
#include "kernels/common.cuh"
#include "kernels/attention_mma.cuh"   /* [moe grouped] cp.async, ldmatrix, mma.sync helpers */

#include <math.h>
#include <stdlib.h>
#include <string.h>

static __device__ __forceinline__ void warp_argmax(float &v, int &e)
{
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, v, o);
        int oe = __shfl_xor_sync(0xffffffffu, e, o);
        if (ov > v || (ov == v && oe < e)) { v = ov; e = oe; }
    }
}

/* V = ceil(E / 32) <= 32 logits a lane, held in registers (read once: the max, the sum and the k rounds of
 * argmax run on them); entries past E are never taken. Same order of the sum and the same picks as before.
 * One warp, the token of logits row l (read through L2: [moe fuse] other blocks of the grid wrote it). */
template <int V>
static __device__ __forceinline__ void moe_topk_warp(int32_t *ids, float *wts, const sits_bf16_t *l, int E, int k, int norm, int lane)
{
    float v[V];
#pragma unroll
    for (int i = 0; i < V; i++) v[i] = lane + 32 * i < E ? sits_k_bf2f(__ldcg(l + lane + 32 * i)) : -INFINITY;
    float mx = -INFINITY, sum = 0.0f;
#pragma unroll
    for (int i = 0; i < V; i++)
        if (lane + 32 * i < E) mx = fmaxf(mx, v[i]);
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
#pragma unroll
    for (int i = 0; i < V; i++)
        if (lane + 32 * i < E) sum += expf(v[i] - mx);
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    uint32_t taken = 0;
    float wsum = 0.0f;
    for (int j = 0; j < k; j++) {
        float bv = -INFINITY;
        int be = 0x7fffffff;
#pragma unroll
        for (int i = 0; i < V; i++) {
            const int e = lane + 32 * i;
            if (e < E && !((taken >> i) & 1u) && (v[i] > bv || (v[i] == bv && e < be))) { bv = v[i]; be = e; }
        }
        warp_argmax(bv, be);
        if ((be & 31) == lane) taken |= 1u << (be >> 5);
        if (lane == 0) {
            float w = expf(bv - mx) / sum;
            ids[j] = be;
            wts[j] = w;
            wsum += w;
        }
    }
    if (norm && lane == 0)
        for (int j = 0; j < k; j++) wts[j] /= wsum;
}

template <int V>
static __global__ void moe_topk_kernel(int32_t *ids, float *wts, const sits_bf16_t *logits, int n, int E, int k, int norm)
{
    int t = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (t >= n) return;   /* whole warps leave together */
    moe_topk_warp<V>(ids + (size_t)t * k, wts + (size_t)t * k, logits + (size_t)t * E, E, k, norm, lane);
}

extern "C" sits_status_t sits_k_moe_topk(int32_t *ids, float *wts, const sits_bf16_t *logits, int n, int E, int k, int norm,
                                         cudaStream_t stream)
{
    if (n < 0 || E < 1 || E > 1024 || k < 1 || k > E || k > 32) return SITS_ERR_INVALID;
    if (n == 0) return SITS_OK;
    const int warps = 4;
    const unsigned blocks = (unsigned)((n + warps - 1) / warps);
    if (E <= 128) moe_topk_kernel<4><<<blocks, 32 * warps, 0, stream>>>(ids, wts, logits, n, E, k, norm);
    else if (E <= 256) moe_topk_kernel<8><<<blocks, 32 * warps, 0, stream>>>(ids, wts, logits, n, E, k, norm);
    else moe_topk_kernel<32><<<blocks, 32 * warps, 0, stream>>>(ids, wts, logits, n, E, k, norm);
    return SITS_K_LAUNCH_STATUS();
}

static __global__ void moe_combine_kernel(sits_bf16_t *out, const sits_bf16_t *y, const int32_t *pos, const float *wts, int kk,
                                          int dim)
{
    size_t t = blockIdx.x;
    const int32_t *p = pos + t * kk;
    const float *w = wts + t * kk;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < kk; j++)
            if (p[j] >= 0) acc += w[j] * sits_k_bf2f(y[(size_t)p[j] * dim + i]);
        out[t * dim + i] = sits_k_f2bf(acc);
    }
}

extern "C" sits_status_t sits_k_moe_combine(sits_bf16_t *out, const sits_bf16_t *y, const int32_t *pos, const float *wts, int n,
                                            int kk, int dim, cudaStream_t stream)
{
    if (n < 0 || kk < 1 || dim <= 0) return SITS_ERR_INVALID;
    if (n == 0) return SITS_OK;
    int threads = sits_k_row_threads(dim, 256);
    moe_combine_kernel<<<n, threads, 0, stream>>>(out, y, pos, wts, kk, dim);
    return SITS_K_LAUNCH_STATUS();
}

/* ---- [moe dev] the routed experts of a small step without the host ----------------------------------------
 * Slot s = t k + j is token t's j-th expert. Plan (int32, backend.h moe_route): [0] A experts with a slot,
 * [1 + a] those experts ascending, [1 + E + a] (a <= A) where each one's slots start in the list, [2 + 2 E + i]
 * the slot list (by expert, slots ascending). */
#define MOE_DEV_MAX_SLOTS 2048   /* backend.h SITS_MOE_DEV_MAX_SLOTS */
#define MOE_ROUTE_THREADS 256

/* One block: counts per expert (shared atomics: the counts do not depend on their order), the active experts
 * and offsets by a scan in warp 0 (lane l takes a contiguous run of experts), then each warp takes active
 * experts a = warp, warp + 8, ... and walks the slots 32 at a time: a ballot keeps them in order. */
static __device__ __forceinline__ void moe_route_block(int32_t *plan, unsigned long long *counts, const int32_t *ids,
                                                       const int32_t *mask, int n, int k, int E, int e0, int ne)
{
    __shared__ int sid[MOE_DEV_MAX_SLOTS];
    __shared__ int cnt[1024], mcnt[1024], alist[1024], aoff[1025];
    __shared__ int nact;
    const int nk = n * k, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    for (int e = tid; e < E; e += blockDim.x) cnt[e] = mcnt[e] = 0;
    __syncthreads();
    for (int s = tid; s < nk; s += blockDim.x) {
        const int e = __ldcg(ids + s);   /* [moe fuse] this block may have just written them */
        sid[s] = e;
        if (e >= 0 && e < E) {   /* an id out of range is dropped (moe_topk makes none) */
            atomicAdd(&cnt[e], 1);
            if (!mask || mask[s / k] >= 0) atomicAdd(&mcnt[e], 1);
        }
    }
    __syncthreads();
    if (warp == 0) {   /* the experts of the range [e0, e0 + ne) only (EP: this rank's); counts above cover all E */
        const int per = (ne + 31) / 32, lo = e0 + min(lane * per, ne), hi = e0 + min(lane * per + per, ne);
        int na = 0, ns = 0;
        for (int e = lo; e < hi; e++) {
            na += cnt[e] > 0;
            ns += cnt[e];
        }
        int ia = na, is = ns;   /* inclusive scans over the lanes */
        for (int o = 1; o < 32; o <<= 1) {
            const int ta = __shfl_up_sync(0xffffffffu, ia, o), ts = __shfl_up_sync(0xffffffffu, is, o);
            if (lane >= o) {
                ia += ta;
                is += ts;
            }
        }
        int a = ia - na, so = is - ns;
        for (int e = lo; e < hi; e++)
            if (cnt[e]) {
                alist[a] = e;
                aoff[a] = so;
                plan[1 + a] = e - e0;
                plan[1 + E + a] = so;
                a++;
                so += cnt[e];
            }
        if (lane == 31) {
            nact = ia;
            aoff[ia] = is;
            plan[0] = ia;
            plan[1 + E + ia] = is;
        }
    }
    __syncthreads();
    if (counts)
        for (int e = tid; e < E; e += blockDim.x)
            if (mcnt[e]) atomicAdd(counts + e, (unsigned long long)mcnt[e]);
    int32_t *slots = plan + 2 + 2 * E;
    for (int a = warp; a < nact; a += blockDim.x / 32) {
        const int e = alist[a];
        int p = aoff[a];
        for (int s0 = 0; s0 < nk; s0 += 32) {
            const int s = s0 + lane;
            const bool hit = s < nk && sid[s] == e;
            const unsigned m = __ballot_sync(0xffffffffu, hit);
            if (hit) slots[p + __popc(m & ((1u << lane) - 1u))] = s;
            p += __popc(m);
        }
    }
}

static __global__ void __launch_bounds__(MOE_ROUTE_THREADS)
moe_route_kernel(int32_t *plan, unsigned long long *counts, const int32_t *ids, const int32_t *mask, int n, int k, int E, int e0,
                 int ne)
{
    moe_route_block(plan, counts, ids, mask, n, k, E, e0, ne);
}

extern "C" sits_status_t sits_k_moe_route(int32_t *plan, unsigned long long *counts, const int32_t *ids, const int32_t *mask, int n,
                                          int k, int E, int e0, int ne, cudaStream_t stream)
{
    if (n < 1 || k < 1 || E < 1 || E > 1024 || n * k > MOE_DEV_MAX_SLOTS || e0 < 0 || ne < 1 || e0 + ne > E) return SITS_ERR_INVALID;
    moe_route_kernel<<<1, MOE_ROUTE_THREADS, 0, stream>>>(plan, counts, ids, mask, n, k, E, e0, ne);
    return SITS_K_LAUNCH_STATUS();
}

/* ---- [moe fuse] one token's router in one launch: the router GEMV, top-k and route (sits_k_moe_gate1) ----
 * Block b computes logits rows o0 = MOE_G1_ROWS b .. + MOE_G1_ROWS - 1 as kernels/gemv.cu's one-token kernels do (the
 * same bits: warp w, lane l takes 16-byte units s 256 + 32 w + l of each row in order, a unit's 8 products in order by
 * fmaf; the lanes by the butterfly of masks 16 .. 1; the 8 warps in order from 0; + bias; rounded to bf16), writes
 * them, and counts itself in on sync (threadfence reduction); the last block to arrive resets sync to 0 and runs
 * moe_topk's warp and moe_route's block on the logits of all blocks. Launched as a programmatic dependent launch:
 * the first weights are loaded before waiting for the kernel that wrote x. */
#define MOE_G1_ROWS 4

template <int V>
static __global__ void __launch_bounds__(MOE_ROUTE_THREADS)
moe_gate1_kernel(sits_bf16_t *logits, int32_t *ids, float *wts, int32_t *plan, unsigned long long *counts, unsigned *sync,
                 const sits_bf16_t *x, const sits_bf16_t *w, const sits_bf16_t *bias, const int32_t *mask, int H, int E, int k,
                 int norm, int e0, int ne)
{
    __shared__ float red[MOE_ROUTE_THREADS / 32][MOE_G1_ROWS];
    __shared__ int last;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nw = MOE_ROUTE_THREADS / 32;
    const int o0 = blockIdx.x * MOE_G1_ROWS, units = H / 8;
    const uint4 *xr = reinterpret_cast<const uint4 *>(x), *wr[MOE_G1_ROWS];
#pragma unroll
    for (int r = 0; r < MOE_G1_ROWS; r++) wr[r] = reinterpret_cast<const uint4 *>(w + (size_t)min(o0 + r, E - 1) * H);
    float acc[MOE_G1_ROWS];
#pragma unroll
    for (int r = 0; r < MOE_G1_ROWS; r++) acc[r] = 0.0f;
    int u = warp * 32 + lane;
    uint4 wv[MOE_G1_ROWS];
    if (u < units)
#pragma unroll
        for (int r = 0; r < MOE_G1_ROWS; r++) wv[r] = __ldcs(wr[r] + u);
    sits_k_pdl_wait();      /* x comes from the previous kernel */
    sits_k_pdl_trigger();   /* after the wait: the expert kernels' blocks are placed while the route runs (below) */
    for (; u < units; u += 32 * nw) {
        const uint4 xv = __ldg(xr + u);
        uint4 cur[MOE_G1_ROWS];
#pragma unroll
        for (int r = 0; r < MOE_G1_ROWS; r++) {
            cur[r] = wv[r];
            if (u + 32 * nw < units) wv[r] = __ldcs(wr[r] + u + 32 * nw);   /* one unit ahead */
        }
        const uint32_t xw[4] = { xv.x, xv.y, xv.z, xv.w };
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const float x0 = __uint_as_float(xw[q] << 16), x1 = __uint_as_float(xw[q] & 0xffff0000u);   /* bf16 pair */
#pragma unroll
            for (int r = 0; r < MOE_G1_ROWS; r++) {
                const uint32_t ww = q == 0 ? cur[r].x : q == 1 ? cur[r].y : q == 2 ? cur[r].z : cur[r].w;
                acc[r] = fmaf(__uint_as_float(ww << 16), x0, acc[r]);
                acc[r] = fmaf(__uint_as_float(ww & 0xffff0000u), x1, acc[r]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < MOE_G1_ROWS; r++) {
        float v = acc[r];
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0) red[warp][r] = v;
    }
    __syncthreads();
    if (tid < MOE_G1_ROWS && o0 + tid < E) {
        float sum = 0.0f;
        for (int j = 0; j < nw; j++) sum += red[j][tid];
        if (bias) sum += sits_k_bf2f(bias[o0 + tid]);
        logits[o0 + tid] = sits_k_f2bf(sum);
        __threadfence();   /* the logits before the arrival below */
    }
    __syncthreads();
    if (tid == 0) last = atomicAdd(sync, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();   /* every block's logits, after its arrival */
    if (tid == 0) *sync = 0u;   /* for the next launch (stream order) */
    if (warp == 0) moe_topk_warp<V>(ids, wts, logits, E, k, norm, lane);
    __syncthreads();
    moe_route_block(plan, counts, ids, mask, 1, k, E, e0, ne);
}

/* [moe fuse] the one-token fused kernels (sits_k_moe_gate1, sits_k_moe_experts_combine1), on by default since measured
 * (bench/RESULTS.md: Qwen3-30B-A3B batch 1 3.58 -> 3.12 ms on an H200, the same bits); SITS_MOE_FUSE=0 turns them off
 * (SITS_ERR_UNSUPPORTED: the caller runs the separate ops) for A/B runs */
static int moe_fuse_on(void)
{
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("SITS_MOE_FUSE");
        on = !(e && !strcmp(e, "0"));
    }
    return on;
}

extern "C" sits_status_t sits_k_moe_gate1(sits_bf16_t *logits, int32_t *ids, float *wts, int32_t *plan, unsigned long long *counts,
                                          unsigned *sync, const sits_bf16_t *x, const sits_bf16_t *w, const sits_bf16_t *bias,
                                          const int32_t *mask, int H, int E, int k, int norm, int e0, int ne, cudaStream_t stream)
{
    if (H < 8 || E < 1 || E > 1024 || k < 1 || k > E || k > 32 || e0 < 0 || ne < 1 || e0 + ne > E || !sync) return SITS_ERR_INVALID;
    /* the bits of sits_k_gemv's one-token CUDA-core kernels: not where SITS_GEMV_MMA puts one token on tensor cores */
    if (!moe_fuse_on() || H % 8 || !sits_k_aligned16(x) || !sits_k_aligned16(w) || sits_k_gemv_mma_mode() >= 2)
        return SITS_ERR_UNSUPPORTED;
    const unsigned grid = (unsigned)((E + MOE_G1_ROWS - 1) / MOE_G1_ROWS);
    cudaError_t c;
#define MOE_G1_LAUNCH(V)                                                                                                       \
    c = sits_k_launch_pdl(moe_gate1_kernel<V>, grid, MOE_ROUTE_THREADS, 0, stream, true, logits, ids, wts, plan, counts, sync, x, \
                          w, bias, mask, H, E, k, norm, e0, ne)
    if (E <= 128) MOE_G1_LAUNCH(4);
    else if (E <= 256) MOE_G1_LAUNCH(8);
    else MOE_G1_LAUNCH(32);
#undef MOE_G1_LAUNCH
    return c == cudaSuccess ? SITS_OK : SITS_ERR_CUDA;
}

/* ---- the expert kernels, on bf16 rows or ([moe fp8] F8) E4M3 rows ----
 * Eight consecutive elements of a row come as one uint4 of four 16-bit pairs (low half: the lower element): bf16
 * rows as stored (one 16-byte load), E4M3 rows as f16 pairs (one 8-byte load, cvt e4m3x2 -> f16x2: exact). */
template <bool F8> struct moe_el;
template <> struct moe_el<false> {
    typedef sits_bf16_t T;
    static __device__ __forceinline__ uint4 ld8(const T *p, int k) { return __ldg(reinterpret_cast<const uint4 *>(p + k)); }
    static __device__ __forceinline__ float lo(uint32_t w) { return __uint_as_float(w << 16); }
    static __device__ __forceinline__ float hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }
};
template <> struct moe_el<true> {
    typedef uint8_t T;
    static __device__ __forceinline__ uint32_t cvt2(uint32_t v16)
    {
        __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)v16, __NV_E4M3);
        return (uint32_t)h.x | ((uint32_t)h.y << 16);
    }
    static __device__ __forceinline__ uint4 ld8(const T *p, int k)
    {
        const uint2 v = __ldg(reinterpret_cast<const uint2 *>(p + k));
        return make_uint4(cvt2(v.x & 0xffffu), cvt2(v.x >> 16), cvt2(v.y & 0xffffu), cvt2(v.y >> 16));
    }
    static __device__ __forceinline__ float lo(uint32_t w) { return __half2float(__ushort_as_half((unsigned short)(w & 0xffffu))); }
    static __device__ __forceinline__ float hi(uint32_t w) { return __half2float(__ushort_as_half((unsigned short)(w >> 16))); }
};

/* acc += w . x over 8 elements (one moe_el load each) */
template <bool F8>
static __device__ __forceinline__ float moe_dot8(const uint4 w, const uint4 x, float acc)
{
    const uint32_t wv[4] = { w.x, w.y, w.z, w.w }, xv[4] = { x.x, x.y, x.z, x.w };
#pragma unroll
    for (int i = 0; i < 4; i++) {
        acc = fmaf(moe_el<F8>::lo(wv[i]), moe_el<F8>::lo(xv[i]), acc);
        acc = fmaf(moe_el<F8>::hi(wv[i]), moe_el<F8>::hi(xv[i]), acc);
    }
    return acc;
}

#define MOE_WARPS 4      /* warps a block of the expert GEMVs */
#define MOE_GU_ROWS 2    /* gate rows (and as many up rows) a warp */
#define MOE_DN_ROWS 4    /* down rows a warp */

/* The GEMV of R weight rows wr[r] [K] with CT input rows xr[c] [K] (NULL: no such row): lane l takes inputs
 * 8 l, 8 l + 256, ... (one load of 8 a row), acc[r][c] is the warp's whole sum on every lane. K % 8 == 0, rows
 * 16-byte (F8: 8-byte) aligned. */
template <bool F8, int R, int CT>
static __device__ __forceinline__ void moe_gemv(float (&acc)[R][CT], const typename moe_el<F8>::T *const (&wr)[R],
                                                const typename moe_el<F8>::T *const (&xr)[CT], int K, int lane)
{
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int c = 0; c < CT; c++) acc[r][c] = 0.0f;
#pragma unroll 4
    for (int kb = 8 * lane; kb < K; kb += 256) {
        uint4 wv[R];
#pragma unroll
        for (int r = 0; r < R; r++) wv[r] = moe_el<F8>::ld8(wr[r], kb);
#pragma unroll
        for (int c = 0; c < CT; c++) {
            if (!xr[c]) continue;
            const uint4 xv = moe_el<F8>::ld8(xr[c], kb);
#pragma unroll
            for (int r = 0; r < R; r++) acc[r][c] = moe_dot8<F8>(wv[r], xv, acc[r][c]);
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int c = 0; c < CT; c++)
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) acc[r][c] += __shfl_xor_sync(0xffffffffu, acc[r][c], o);
}

/* [moe fp8] What the step's FP8 linears add (NULL pointers on bf16 experts): the input rows' E4M3 copies and
 * scales (xq / xs: x per token; aq / as: act per slot) and the experts' row-scale arrays. */
struct moe_f8_args {
    const uint8_t *xq, *aq;
    const float *xs, *as;
    const float *const *s_gu, *const *s_down;
    /* [gpt-oss] the epilogue (sits_k_moe_epi_t): biases by local expert (NULL array or entry: none), the activation */
    const sits_bf16_t *const *b_gu, *const *b_down;
    int oai;
    float alpha, limit;
};

/* [gpt-oss] g, u of feature f of expert e (fp32 sums, scaled) -> act: each plus its bias, rounded to bf16 (a biased GEMM's
 * output), then silu(g) u or the clamped SwiGLU */
template <bool EPI = true>
static __device__ __forceinline__ sits_bf16_t moe_act(const moe_f8_args &a, int e, int f, int I, float gs, float us)
{
    const sits_bf16_t *b = EPI && a.b_gu ? a.b_gu[e] : NULL;
    if (b) {
        gs += sits_k_bf2f(b[f]);
        us += sits_k_bf2f(b[I + f]);
    }
    const float g = sits_k_bf2f(sits_k_f2bf(gs)), u = sits_k_bf2f(sits_k_f2bf(us));
    return sits_k_f2bf(EPI && a.oai ? sits_k_swiglu_oai1(g, u, a.alpha, a.limit) : g / (1.0f + expf(-g)) * u);
}

/* [gpt-oss] output h of expert e's down projection (the fp32 sum, scaled) plus its bias, rounded to bf16 */
template <bool EPI = true>
static __device__ __forceinline__ sits_bf16_t moe_out(const moe_f8_args &a, int e, int h, float v)
{
    const sits_bf16_t *b = EPI && a.b_down ? a.b_down[e] : NULL;
    return sits_k_f2bf(b ? v + sits_k_bf2f(b[h]) : v);
}

/* Block blockIdx.x's active expert of the plan (its id, its slots [s0, s1) of the list); false past the step's A */
struct moe_blk {
    int e, s0, s1;
    const int32_t *slots;
};
static __device__ __forceinline__ bool moe_blk_of(const int32_t *plan, int E, moe_blk &b)
{
    const int a = blockIdx.x;
    if (a >= plan[0]) return false;
    b.e = plan[1 + a];
    b.s0 = plan[1 + E + a];
    b.s1 = plan[2 + E + a];
    b.slots = plan + 2 + 2 * E;
    return true;
}

/* The input row of list entry ci of block b (x: row slot / k, act: row slot -- div 1) of K elements, NULL past s1 */
template <typename T>
static __device__ __forceinline__ const T *moe_row(const moe_blk &b, int ci, const T *base, int div, int K)
{
    return ci < b.s1 ? base + (size_t)(b.slots[ci] / div) * K : NULL;
}

/* Gate/up + SiLU * up: block (a, rows r0 = MOE_WARPS MOE_GU_ROWS blockIdx.y ..) of active expert a; warp w takes
 * gate rows r0 + 2 w, + 1 and the up rows of the same features, over the expert's slots CT at a time:
 * act[s, r] = silu(bf16(g)) * bf16(u) rounded to bf16 (what the GEMM's bf16 output then silu_mul make);
 * F8: g = dot * xs[t] * s_gu[e][r] (matmul_fp8's). */
template <bool F8, int CT, bool EPI>
static __global__ void __launch_bounds__(32 * MOE_WARPS)
moe_gu_kernel(sits_bf16_t *act, const sits_bf16_t *x, const int32_t *plan, const void *const *w_gu, moe_f8_args f8, int k, int E,
              int H, int I)
{
    typedef typename moe_el<F8>::T T;
    if (blockIdx.y == 0 && (int)threadIdx.x * 16 < E)   /* the experts' row pointers (constant) into L2, 16 a line */
        asm volatile("prefetch.global.L2 [%0];" ::"l"(w_gu + 16 * threadIdx.x));
    sits_k_pdl_wait();      /* [moe fuse] launched as a dependent of moe_gate1: the plan is its (a no-op otherwise) */
    sits_k_pdl_trigger();   /* after the wait: the down kernel's blocks are placed and load their first weights */
    moe_blk b;
    if (!moe_blk_of(plan, E, b)) return;
    const int e = b.e, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int r0 = (blockIdx.y * MOE_WARPS + warp) * MOE_GU_ROWS;
    if (r0 >= I) return;
    const T *W = static_cast<const T *>(w_gu[e]);
    const T *wr[2 * MOE_GU_ROWS];
#pragma unroll
    for (int r = 0; r < MOE_GU_ROWS; r++) {   /* rows past I: read (row I - 1), never written */
        wr[r] = W + (size_t)min(r0 + r, I - 1) * H;
        wr[MOE_GU_ROWS + r] = W + (size_t)(I + min(r0 + r, I - 1)) * H;
    }
    const T *X = F8 ? reinterpret_cast<const T *>(f8.xq) : reinterpret_cast<const T *>(x);
    for (int c0 = b.s0; c0 < b.s1; c0 += CT) {
        const T *xr[CT];
        int sl[CT];
#pragma unroll
        for (int c = 0; c < CT; c++) {
            sl[c] = c0 + c < b.s1 ? b.slots[c0 + c] : -1;
            xr[c] = moe_row(b, c0 + c, X, k, H);
        }
        float acc[2 * MOE_GU_ROWS][CT];
        moe_gemv<F8, 2 * MOE_GU_ROWS, CT>(acc, wr, xr, H, lane);
#pragma unroll
        for (int c = 0; c < CT; c++)
#pragma unroll
            for (int r = 0; r < MOE_GU_ROWS; r++)
                if (lane == c * MOE_GU_ROWS + r && sl[c] >= 0 && r0 + r < I) {
                    float gs = acc[r][c], us = acc[MOE_GU_ROWS + r][c];
                    if (F8) {
                        const float xs = f8.xs[sl[c] / k];
                        gs = gs * xs * f8.s_gu[e][r0 + r];
                        us = us * xs * f8.s_gu[e][I + r0 + r];
                    }
                    act[(size_t)sl[c] * I + r0 + r] = moe_act<EPI>(f8, e, r0 + r, I, gs, us);
                }
    }
}

/* Down: block (a, rows h0 = MOE_WARPS MOE_DN_ROWS blockIdx.y ..); warp w takes rows h0 + 4 w .. + 3 of the
 * expert's down [H, I] over its slots' act rows, CT at a time: y[s, h] = bf16(act[s] . down[h]) (F8: the act
 * row's E4M3 copy, times as[s] * s_down[e][h]). */
template <bool F8, int CT, bool EPI>
static __global__ void __launch_bounds__(32 * MOE_WARPS)
moe_down_kernel(sits_bf16_t *y, const sits_bf16_t *act, const int32_t *plan, const void *const *w_down, moe_f8_args f8, int E,
                int H, int I)
{
    typedef typename moe_el<F8>::T T;
    moe_blk b;
    if (!moe_blk_of(plan, E, b)) return;
    const int e = b.e, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int h0 = (blockIdx.y * MOE_WARPS + warp) * MOE_DN_ROWS;
    if (h0 >= H) return;
    const T *W = static_cast<const T *>(w_down[e]);
    const T *wr[MOE_DN_ROWS];
#pragma unroll
    for (int r = 0; r < MOE_DN_ROWS; r++) wr[r] = W + (size_t)min(h0 + r, H - 1) * I;
    const T *A = F8 ? reinterpret_cast<const T *>(f8.aq) : reinterpret_cast<const T *>(act);
    for (int c0 = b.s0; c0 < b.s1; c0 += CT) {
        const T *xr[CT];
        int sl[CT];
#pragma unroll
        for (int c = 0; c < CT; c++) {
            sl[c] = c0 + c < b.s1 ? b.slots[c0 + c] : -1;
            xr[c] = moe_row(b, c0 + c, A, 1, I);
        }
        float acc[MOE_DN_ROWS][CT];
        moe_gemv<F8, MOE_DN_ROWS, CT>(acc, wr, xr, I, lane);
#pragma unroll
        for (int c = 0; c < CT; c++)
#pragma unroll
            for (int r = 0; r < MOE_DN_ROWS; r++)
                if (lane == (c * MOE_DN_ROWS + r) % 32 && sl[c] >= 0 && h0 + r < H) {
                    float v = acc[r][c];
                    if (F8) v = v * f8.as[sl[c]] * f8.s_down[e][h0 + r];
                    y[(size_t)sl[c] * H + h0 + r] = moe_out<EPI>(f8, e, h0 + r, v);
                }
    }
}

/* [moe fuse] Down and combine of one token (sits_k_moe_experts_combine1): block rows h0 = MOE_DC_WARPS MOE_DC_ROWS
 * blockIdx.x ..; warp w takes rows h0 + MOE_DC_ROWS w .. of every slot j < k (expert ids[j], act row j) at once -- K
 * MOE_DC_ROWS weight loads in flight a lane -- with moe_down_kernel's sums (lane l: inputs 8 l, 8 l + 256, ... in
 * order, moe_dot8, the butterfly), y_j = moe_out(...) as it rounds them, then out[h] = sum_j wts[j] y_j by fmaf in j
 * order: the bits of moe_down_kernel then moe_combine_slots8_kernel, without y's round trip or the combine's launch. */
#define MOE_DC_WARPS 4
#define MOE_DC_ROWS 2
template <bool F8, int K>
static __global__ void __launch_bounds__(32 * MOE_DC_WARPS)
moe_down_combine1_kernel(sits_bf16_t *out, const sits_bf16_t *act, const int32_t *ids, const float *wts, const void *const *w_down,
                         moe_f8_args f8, int k, int H, int I)
{
    typedef typename moe_el<F8>::T T;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int h0 = (blockIdx.x * MOE_DC_WARPS + warp) * MOE_DC_ROWS;
    if (h0 >= H) return;
    const T *A = F8 ? reinterpret_cast<const T *>(f8.aq) : reinterpret_cast<const T *>(act);
    /* Launched as a dependent of the gate/up kernel (FP8: of the act rows' quantisation), which triggers after its own
     * wait for moe_gate1: ids (moe_gate1's) are final when this starts, act only after the wait below. The expert
     * rows and the first unit of each are loaded before it. */
    const T *wr[K][MOE_DC_ROWS];
    int ex[K];
#pragma unroll
    for (int j = 0; j < K; j++) {
        ex[j] = j < k ? ids[j] : ids[0];   /* slots past k: read (expert ids[0]), never summed */
        const T *W = static_cast<const T *>(w_down[ex[j]]);
#pragma unroll
        for (int r = 0; r < MOE_DC_ROWS; r++) wr[j][r] = W + (size_t)min(h0 + r, H - 1) * I;
    }
    float acc[K][MOE_DC_ROWS];
#pragma unroll
    for (int j = 0; j < K; j++)
#pragma unroll
        for (int r = 0; r < MOE_DC_ROWS; r++) acc[j][r] = 0.0f;
    uint4 wv[K][MOE_DC_ROWS];
    if (8 * lane < I)
#pragma unroll
        for (int j = 0; j < K; j++)
#pragma unroll
            for (int r = 0; r < MOE_DC_ROWS; r++) wv[j][r] = moe_el<F8>::ld8(wr[j][r], 8 * lane);
    sits_k_pdl_wait();      /* act */
    sits_k_pdl_trigger();   /* the next layer's first kernel may be placed */
    for (int kb = 8 * lane; kb < I; kb += 256) {
        uint4 xv[K];
#pragma unroll
        for (int j = 0; j < K; j++) {
            xv[j] = moe_el<F8>::ld8(A + (size_t)min(j, k - 1) * I, kb);
            if (kb != 8 * lane)
#pragma unroll
                for (int r = 0; r < MOE_DC_ROWS; r++) wv[j][r] = moe_el<F8>::ld8(wr[j][r], kb);
        }
#pragma unroll
        for (int j = 0; j < K; j++)
#pragma unroll
            for (int r = 0; r < MOE_DC_ROWS; r++) acc[j][r] = moe_dot8<F8>(wv[j][r], xv[j], acc[j][r]);
    }
    float o[MOE_DC_ROWS];
#pragma unroll
    for (int r = 0; r < MOE_DC_ROWS; r++) o[r] = 0.0f;
#pragma unroll
    for (int j = 0; j < K; j++)
#pragma unroll
        for (int r = 0; r < MOE_DC_ROWS; r++) {
            float v = acc[j][r];
#pragma unroll
            for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
            if (j < k) {
                const int h = min(h0 + r, H - 1);
                if (F8) v = v * f8.as[j] * f8.s_down[ex[j]][h];
                o[r] = fmaf(wts[j], sits_k_bf2f(moe_out(f8, ex[j], h, v)), o[r]);
            }
        }
#pragma unroll
    for (int r = 0; r < MOE_DC_ROWS; r++)
        if (lane == r && h0 + r < H) out[h0 + r] = sits_k_f2bf(o[r]);
}

/* ---- the same on tensor cores, for steps whose experts hold several slots each ----
 * mma.sync m16n8k16 (bf16, F8: f16 -- E4M3 converts to f16 exactly) -> fp32 with 16 weight rows as A and 8 slots'
 * input rows as B (x^T): a warp takes 16 rows (gate/up: 16 gate rows and the 16 up rows of the same features, two
 * accumulator sets) and the expert's slots 8 NT8 at a time. The inputs inside one MMA may come in any order (a
 * sum), so each lane loads 8 consecutive elements: lane (g = lane / 4, tq = lane % 4) of k-block kb (128 inputs)
 * reads inputs kin = kb + 32 tq + 8 s .. + 7 (s = 0..3) of its rows g and g + 8 and of its n-tiles' slot g; words
 * .x, .y (inputs kin .. kin + 3) are one MMA's (2 tq, 2 tq + 1) and (2 tq + 8, 2 tq + 9) pairs, words .z, .w the
 * next MMA's. Every lane of a given tq maps its slots to the same inputs, in A and in B, and over tq and s the 16
 * MMA k-slots x 8 cover the 128 inputs once. Inputs past K read as 0. C fragment: c[0], c[1] = (row g, slots
 * 2 tq, 2 tq + 1 of the n-tile), c[2], c[3] = (row g + 8, the same). */
#define MOE_MMA_WARPS 4

template <bool F8>
static __device__ __forceinline__ void moe_mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                               uint32_t b1)
{
    if (F8)
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    else
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* 8 elements at p + k when k < K, else zeros */
template <bool F8>
static __device__ __forceinline__ uint4 moe_ld8z(const typename moe_el<F8>::T *p, int k, int K)
{
    return k < K ? moe_el<F8>::ld8(p, k) : make_uint4(0u, 0u, 0u, 0u);
}

/* c[m][nt] += rows (m: MT row pairs ra[m] / rb[m] = rows g, g + 8 of the tile) . inputs of the n-tiles' slot rows xr[nt]
 * (NULL: a slot past the expert's, zeros) over K inputs */
template <bool F8, int MT, int NT8>
static __device__ __forceinline__ void moe_mma_rows(float (&c)[MT][NT8][4], const typename moe_el<F8>::T *const (&ra)[MT],
                                                    const typename moe_el<F8>::T *const (&rb)[MT],
                                                    const typename moe_el<F8>::T *const (&xr)[NT8], int K, int tq)
{
    for (int kb = 0; kb < K; kb += 128) {
#pragma unroll
        for (int s = 0; s < 4; s++) {
            const int kin = kb + 32 * tq + 8 * s;
            uint4 wa[MT], wb[MT];
#pragma unroll
            for (int m = 0; m < MT; m++) {
                wa[m] = moe_ld8z<F8>(ra[m], kin, K);
                wb[m] = moe_ld8z<F8>(rb[m], kin, K);
            }
#pragma unroll
            for (int nt = 0; nt < NT8; nt++) {
                const uint4 xv = xr[nt] ? moe_ld8z<F8>(xr[nt], kin, K) : make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    moe_mma<F8>(c[m][nt], wa[m].x, wb[m].x, wa[m].y, wb[m].y, xv.x, xv.y);
                    moe_mma<F8>(c[m][nt], wa[m].z, wb[m].z, wa[m].w, wb[m].w, xv.z, xv.w);
                }
            }
        }
    }
}

/* Gate/up + SiLU * up on tensor cores: block (a, 16 MOE_MMA_WARPS features a block), warp w: features r0 .. r0 + 15 */
template <bool F8, int NT8, bool EPI>
static __global__ void __launch_bounds__(32 * MOE_MMA_WARPS)
moe_gu_mma_kernel(sits_bf16_t *act, const sits_bf16_t *x, const int32_t *plan, const void *const *w_gu, moe_f8_args f8, int k,
                  int E, int H, int I)
{
    typedef typename moe_el<F8>::T T;
    moe_blk b;
    if (!moe_blk_of(plan, E, b)) return;
    const int e = b.e, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, tq = lane & 3;
    const int r0 = (blockIdx.y * MOE_MMA_WARPS + warp) * 16;
    if (r0 >= I) return;
    const T *W = static_cast<const T *>(w_gu[e]);
    const int fa = min(r0 + g, I - 1), fb = min(r0 + g + 8, I - 1);   /* features past I: read, never written */
    const T *const ra[2] = { W + (size_t)fa * H, W + (size_t)(I + fa) * H };   /* m 0: gate, m 1: up */
    const T *const rb[2] = { W + (size_t)fb * H, W + (size_t)(I + fb) * H };
    const T *X = F8 ? reinterpret_cast<const T *>(f8.xq) : reinterpret_cast<const T *>(x);
    for (int c0 = b.s0; c0 < b.s1; c0 += 8 * NT8) {
        const T *xr[NT8];
#pragma unroll
        for (int nt = 0; nt < NT8; nt++) xr[nt] = moe_row(b, c0 + 8 * nt + g, X, k, H);
        float c[2][NT8][4];
#pragma unroll
        for (int m = 0; m < 2; m++)
#pragma unroll
            for (int nt = 0; nt < NT8; nt++) c[m][nt][0] = c[m][nt][1] = c[m][nt][2] = c[m][nt][3] = 0.0f;
        moe_mma_rows<F8, 2, NT8>(c, ra, rb, xr, H, tq);
#pragma unroll
        for (int nt = 0; nt < NT8; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int f = r0 + g + (i >= 2 ? 8 : 0), ci = c0 + 8 * nt + 2 * tq + (i & 1);
                if (f < I && ci < b.s1) {
                    const int sl = b.slots[ci];
                    float gs = c[0][nt][i], us = c[1][nt][i];
                    if (F8) {
                        const float xs = f8.xs[sl / k];
                        gs = gs * xs * f8.s_gu[e][f];
                        us = us * xs * f8.s_gu[e][I + f];
                    }
                    act[(size_t)sl * I + f] = moe_act<EPI>(f8, e, f, I, gs, us);
                }
            }
    }
}

/* Down on tensor cores: block (a, 16 MOE_MMA_WARPS outputs a block), warp w: outputs h0 .. h0 + 15 */
template <bool F8, int NT8, bool EPI>
static __global__ void __launch_bounds__(32 * MOE_MMA_WARPS)
moe_down_mma_kernel(sits_bf16_t *y, const sits_bf16_t *act, const int32_t *plan, const void *const *w_down, moe_f8_args f8,
                    int E, int H, int I)
{
    typedef typename moe_el<F8>::T T;
    moe_blk b;
    if (!moe_blk_of(plan, E, b)) return;
    const int e = b.e, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, tq = lane & 3;
    const int h0 = (blockIdx.y * MOE_MMA_WARPS + warp) * 16;
    if (h0 >= H) return;
    const T *W = static_cast<const T *>(w_down[e]);
    const T *const ra[1] = { W + (size_t)min(h0 + g, H - 1) * I };
    const T *const rb[1] = { W + (size_t)min(h0 + g + 8, H - 1) * I };
    const T *A = F8 ? reinterpret_cast<const T *>(f8.aq) : reinterpret_cast<const T *>(act);
    for (int c0 = b.s0; c0 < b.s1; c0 += 8 * NT8) {
        const T *xr[NT8];
#pragma unroll
        for (int nt = 0; nt < NT8; nt++) xr[nt] = moe_row(b, c0 + 8 * nt + g, A, 1, I);
        float c[1][NT8][4];
#pragma unroll
        for (int nt = 0; nt < NT8; nt++) c[0][nt][0] = c[0][nt][1] = c[0][nt][2] = c[0][nt][3] = 0.0f;
        moe_mma_rows<F8, 1, NT8>(c, ra, rb, xr, I, tq);
#pragma unroll
        for (int nt = 0; nt < NT8; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int h = h0 + g + (i >= 2 ? 8 : 0), ci = c0 + 8 * nt + 2 * tq + (i & 1);
                if (h < H && ci < b.s1) {
                    const int sl = b.slots[ci];
                    float v = c[0][nt][i];
                    if (F8) v = v * f8.as[sl] * f8.s_down[e][h];
                    y[(size_t)sl * H + h] = moe_out<EPI>(f8, e, h, v);
                }
            }
    }
}

/* [moe grouped] steps of the device path that run on the grouped kernels instead (bf16 experts; defined below) */
static bool moe_dev_grouped(int n);
static void moe_grouped_dev_launch(sits_bf16_t *y, sits_bf16_t *act, const sits_bf16_t *x, const int32_t *plan, const void *const *w_gu,
                                   const void *const *w_down, const moe_f8_args &f8, int n, int k, int E, int H, int I,
                                   cudaStream_t stream);

/* The two kernels of one kind (GEMV CT, or MMA NT8) for the step: tensor cores once the experts average 4 slots
 * or more (the CUDA-core GEMV would then be bound by its FMAs); [moe grouped] from moe_dev_grouped's tokens on (bf16),
 * the grouped kernels. */
template <bool F8, bool EPI>
static void moe_experts_launch(sits_bf16_t *y, sits_bf16_t *act, const sits_bf16_t *x, const int32_t *plan, const void *const *w_gu,
                               const void *const *w_down, const moe_f8_args &f8, int n, int k, int E, int H, int I,
                               cudaStream_t stream)
{
    if (!F8 && moe_dev_grouped(n)) {   /* [moe grouped] */
        moe_grouped_dev_launch(y, act, x, plan, w_gu, w_down, f8, n, k, E, H, I, stream);
        return;
    }
    const unsigned A = (unsigned)min(E, n * k);   /* blocks past the step's active experts return at once */
    if (n >= 8 && n * k >= 4 * E) {
        const dim3 mgu(A, (unsigned)((I + 16 * MOE_MMA_WARPS - 1) / (16 * MOE_MMA_WARPS)));
        const dim3 mdn(A, (unsigned)((H + 16 * MOE_MMA_WARPS - 1) / (16 * MOE_MMA_WARPS)));
#define MOE_MMA_LAUNCH(NT8)                                                                                        \
    do {                                                                                                           \
        moe_gu_mma_kernel<F8, NT8, EPI><<<mgu, 32 * MOE_MMA_WARPS, 0, stream>>>(act, x, plan, w_gu, f8, k, E, H, I);    \
        if (F8) sits_k_quant_fp8_rows(const_cast<uint8_t *>(f8.aq), const_cast<float *>(f8.as), act, n * k, I, stream); \
        moe_down_mma_kernel<F8, NT8, EPI><<<mdn, 32 * MOE_MMA_WARPS, 0, stream>>>(y, act, plan, w_down, f8, E, H, I);   \
    } while (0)
        if (n * k < 16 * E) MOE_MMA_LAUNCH(1);   /* about 4 .. 16 slots an expert: one n-tile of 8 */
        else if (n * k < 32 * E) MOE_MMA_LAUNCH(2);
        else MOE_MMA_LAUNCH(4);
#undef MOE_MMA_LAUNCH
        return;
    }
    const dim3 ggu(A, (unsigned)((I + MOE_WARPS * MOE_GU_ROWS - 1) / (MOE_WARPS * MOE_GU_ROWS)));
    const dim3 gdn(A, (unsigned)((H + MOE_WARPS * MOE_DN_ROWS - 1) / (MOE_WARPS * MOE_DN_ROWS)));
#define MOE_LAUNCH(CT)                                                                                             \
    do {                                                                                                           \
        moe_gu_kernel<F8, CT, EPI><<<ggu, 32 * MOE_WARPS, 0, stream>>>(act, x, plan, w_gu, f8, k, E, H, I);             \
        if (F8) sits_k_quant_fp8_rows(const_cast<uint8_t *>(f8.aq), const_cast<float *>(f8.as), act, n * k, I, stream); \
        moe_down_kernel<F8, CT, EPI><<<gdn, 32 * MOE_WARPS, 0, stream>>>(y, act, plan, w_down, f8, E, H, I);            \
    } while (0)
    if (n == 1) MOE_LAUNCH(1);       /* an expert has at most n slots (a token takes an expert once) */
    else if (n == 2) MOE_LAUNCH(2);
    else if (n <= 4) MOE_LAUNCH(4);
    else MOE_LAUNCH(8);
#undef MOE_LAUNCH
}

/* sits_k_moe_experts' checks and its FP8 / epilogue arguments (the x rows quantised into q8 when s_gu) */
static sits_status_t moe_experts_args(moe_f8_args *f8, const sits_bf16_t *x, const sits_bf16_t *act, const float *const *s_gu,
                                      const float *const *s_down, void *q8, const sits_k_moe_epi_t *epi, int n, int k, int E, int H,
                                      int I, cudaStream_t stream)
{
    if (n < 1 || k < 1 || E < 1 || H < 8 || I < 8 || H % 8 || I % 8 || n * k > MOE_DEV_MAX_SLOTS || !sits_k_aligned16(x) ||
        !sits_k_aligned16(act) || (s_gu == NULL) != (s_down == NULL) || (s_gu && !sits_k_aligned16(q8)))
        return SITS_ERR_INVALID;
    *f8 = { NULL, NULL, NULL, NULL, s_gu, s_down, NULL, NULL, 0, 0.0f, 0.0f };
    if (epi) {   /* [gpt-oss] */
        f8->b_gu = reinterpret_cast<const sits_bf16_t *const *>(epi->b_gu);
        f8->b_down = reinterpret_cast<const sits_bf16_t *const *>(epi->b_down);
        f8->oai = epi->oai;
        f8->alpha = epi->alpha;
        f8->limit = epi->limit;
    }
    if (!s_gu) return SITS_OK;
    /* [moe fp8] backend.h SITS_MOE_Q8_BYTES: xs [n] | as [n k] fp32, then xq [n, H], aq [n k, I] bytes */
    const size_t nk = (size_t)n * k, o1 = (4 * ((size_t)n + nk) + 15) / 16 * 16, o2 = o1 + ((size_t)n * H + 15) / 16 * 16;
    f8->xs = static_cast<const float *>(q8);
    f8->as = f8->xs + n;
    f8->xq = static_cast<const uint8_t *>(q8) + o1;
    f8->aq = static_cast<const uint8_t *>(q8) + o2;
    return sits_k_quant_fp8_rows(const_cast<uint8_t *>(f8->xq), const_cast<float *>(f8->xs), x, n, H, stream);
}

/* [gpt-oss] whether the kernels take the epilogue's biases / clamped SwiGLU (an instantiation of their own: without it,
 * 13eda74 took a Qwen3-30B-A3B batch-32 step from 25.17 to 27.09 ms on an H100). SITS_MOE_EPI_ALWAYS=1: the epilogue
 * kernels for every model (A/B; the same bits) */
static bool moe_epi_on(const moe_f8_args &f8)
{
    static int always = -1;
    if (always < 0) {
        const char *e = getenv("SITS_MOE_EPI_ALWAYS");
        always = e && atoi(e) != 0;
    }
    return always || f8.b_gu || f8.b_down || f8.oai;
}

extern "C" sits_status_t sits_k_moe_experts(sits_bf16_t *y, sits_bf16_t *act, const sits_bf16_t *x, const int32_t *plan,
                                            const void *const *w_gu, const void *const *w_down, const float *const *s_gu,
                                            const float *const *s_down, void *q8, const sits_k_moe_epi_t *epi, int n, int k,
                                            int E, int H, int I, cudaStream_t stream)
{
    moe_f8_args f8;
    sits_status_t st = moe_experts_args(&f8, x, act, s_gu, s_down, q8, epi, n, k, E, H, I, stream);
    if (st != SITS_OK) return st;
    const bool ep = moe_epi_on(f8);
    if (s_gu && ep) moe_experts_launch<true, true>(y, act, x, plan, w_gu, w_down, f8, n, k, E, H, I, stream);
    else if (s_gu) moe_experts_launch<true, false>(y, act, x, plan, w_gu, w_down, f8, n, k, E, H, I, stream);
    else if (ep) moe_experts_launch<false, true>(y, act, x, plan, w_gu, w_down, f8, n, k, E, H, I, stream);
    else moe_experts_launch<false, false>(y, act, x, plan, w_gu, w_down, f8, n, k, E, H, I, stream);
    return SITS_K_LAUNCH_STATUS();
}

/* [moe fuse] One token: gate/up as sits_k_moe_experts, then moe_down_combine1_kernel (K: k rounded up to 1, 2, 4, 8); the
 * epilogue kernels for every model here: the split of moe_experts (moe_epi_on) measured 1.4 % slower on the Qwen3-30B-A3B
 * batch-1 step (3.612 vs 3.561 ms, H100), where it gains 7-8 % at batch 8 and 32 */
template <bool F8, int K>
static void moe_experts_combine1_launch(sits_bf16_t *out, sits_bf16_t *act, const sits_bf16_t *x, const int32_t *plan,
                                        const int32_t *ids, const float *wts, const void *const *w_gu, const void *const *w_down,
                                        const moe_f8_args &f8, int k, int E, int H, int I, cudaStream_t stream)
{
    const dim3 ggu((unsigned)min(E, k), (unsigned)((I + MOE_WARPS * MOE_GU_ROWS - 1) / (MOE_WARPS * MOE_GU_ROWS)));
    /* [perf: pdl] both as programmatic dependents (SITS_ROW_PDL=0: plainly): see the kernels' waits and triggers */
    sits_k_launch_dep(moe_gu_kernel<F8, 1, true>, ggu, 32 * MOE_WARPS, 0, stream, act, x, plan, w_gu, f8, k, E, H, I);
    if (F8) sits_k_quant_fp8_rows(const_cast<uint8_t *>(f8.aq), const_cast<float *>(f8.as), act, k, I, stream);
    const unsigned gdc = (unsigned)((H + MOE_DC_WARPS * MOE_DC_ROWS - 1) / (MOE_DC_WARPS * MOE_DC_ROWS));
    sits_k_launch_dep(moe_down_combine1_kernel<F8, K>, gdc, 32 * MOE_DC_WARPS, 0, stream, out, act, ids, wts, w_down, f8, k, H, I);
}

extern "C" sits_status_t sits_k_moe_experts_combine1(sits_bf16_t *out, sits_bf16_t *act, const sits_bf16_t *x, const int32_t *plan,
                                                     const int32_t *ids, const float *wts, const void *const *w_gu,
                                                     const void *const *w_down, const float *const *s_gu, const float *const *s_down,
                                                     void *q8, const sits_k_moe_epi_t *epi, int k, int E, int H, int I,
                                                     cudaStream_t stream)
{
    if (!out || !ids || !wts || k > E) return SITS_ERR_INVALID;
    if (!moe_fuse_on() || k > 8) return SITS_ERR_UNSUPPORTED;
    moe_f8_args f8;
    sits_status_t st = moe_experts_args(&f8, x, act, s_gu, s_down, q8, epi, 1, k, E, H, I, stream);
    if (st != SITS_OK) return st;
#define MOE_EC1(F8, K) moe_experts_combine1_launch<F8, K>(out, act, x, plan, ids, wts, w_gu, w_down, f8, k, E, H, I, stream)
    if (s_gu) {
        if (k == 1) MOE_EC1(true, 1);
        else if (k == 2) MOE_EC1(true, 2);
        else if (k <= 4) MOE_EC1(true, 4);
        else MOE_EC1(true, 8);
    } else {
        if (k == 1) MOE_EC1(false, 1);
        else if (k == 2) MOE_EC1(false, 2);
        else if (k <= 4) MOE_EC1(false, 4);
        else MOE_EC1(false, 8);
    }
#undef MOE_EC1
    return SITS_K_LAUNCH_STATUS();
}

/* ---- [moe grouped] a host-routed step's experts as two grouped GEMMs on tensor cores (sits_k_moe_grouped) ----
 * Rows [off[e], off[e + 1]) of x [rows, H] (expert-major, as the host path gathers them) go through expert e:
 * act[r, f] = moe_act(x_r . Wgu[e][f], x_r . Wgu[e][I + f]) [rows, I], then y[r, h] = moe_out(act_r . Wdown[e][h]) [rows, H].
 * A block computes MG_BM rows of one expert (the caller's tile list: {e, r0} pairs, rows r0 .. min(r0 + MG_BM, off[e + 1]))
 * by MG_BN columns (gate/up: 64 features' gate rows, then the same features' up rows, so a lane holds a feature's gate and
 * up sums) -- grid (column tiles, row tiles): the blocks of one row tile run together and share its x rows in L2, an
 * expert's row tiles follow each other and share its weights. K in steps of MG_BK (64-byte rows) through an MG_ST-stage
 * cp.async ring (zero-filled past the rows, the columns and K), 8 warps of 32 rows x 32 columns (wm = warp % 2, wn =
 * warp / 2), mma.sync m16n8k16 bf16 -> fp32 from ldmatrix. A stage row's 16-byte chunk c sits at c ^ ((row / 2) % 4): the
 * 8 rows of an ldmatrix phase land on distinct banks. The sums are in fp32 in k order within a thread's MMAs (not the
 * cuBLASLt order of the per-expert GEMMs: the same values up to fp32 rounding). */
#define MG_BM 64    /* rows a block: backend.h SITS_MOE_GROUPED_ROWS */
#define MG_BN 128   /* columns a block */
#define MG_BK 32    /* K a stage */
#define MG_ST 3     /* stages */
#define MG_THREADS 256

static __device__ __forceinline__ int mg_off(int r, int c) { return r * 64 + ((c ^ ((r >> 1) & 3)) << 4); }

/* [moe grouped] DEV: tile t of a moe_route plan -- the active experts' slot lists cut into runs of MG_BM, expert after
 * expert -- found by warp 0 (a running scan of ceil(slots / MG_BM) over the active experts): its active expert index
 * (-1 past the last tile) and list range [r0, r1) */
static __device__ __forceinline__ void mg_plan_tile(const int32_t *plan, int E, int t, int &a_out, int &r0_out, int &r1_out)
{
    __shared__ int s_t[3];
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x, A = plan[0];
        const int32_t *ao = plan + 1 + E;
        int base = 0, found = -1, r0 = 0, r1 = 0;
        for (int a0 = 0; a0 < A && found < 0; a0 += 32) {
            const int a = a0 + lane, c = a < A ? (ao[a + 1] - ao[a] + MG_BM - 1) / MG_BM : 0;
            int inc = c;
            for (int o = 1; o < 32; o <<= 1) {
                const int v = __shfl_up_sync(0xffffffffu, inc, o);
                if (lane >= o) inc += v;
            }
            const int ex = base + inc - c;
            const unsigned m = __ballot_sync(0xffffffffu, c > 0 && t >= ex && t < ex + c);
            if (m) {
                const int src = __ffs(m) - 1;
                found = __shfl_sync(0xffffffffu, a, src);
                r0 = ao[found] + (t - __shfl_sync(0xffffffffu, ex, src)) * MG_BM;
                r1 = min(r0 + MG_BM, ao[found + 1]);
            }
            base += __shfl_sync(0xffffffffu, inc, 31);   /* this chunk's tiles */
        }
        if (lane == 0) {
            s_t[0] = found;
            s_t[1] = r0;
            s_t[2] = r1;
        }
    }
    __syncthreads();
    a_out = s_t[0];
    r0_out = s_t[1];
    r1_out = s_t[2];
}

/* DEV false: tiles = the caller's {e, r0} pairs, off = its row offsets; list entry i is row i of in and of out.
 * DEV true (the device path, sits_k_moe_experts): tiles = a moe_route plan, off unused; list entry i is slot s = the
 * plan's slots[i]: in row s / div (x: div k, a token's row; act: div 1), out row s (act, y by slot as moe_experts). */
template <bool GLU, bool DEV>
static __global__ void __launch_bounds__(MG_THREADS)
moe_grouped_kernel(sits_bf16_t *out, const sits_bf16_t *in, const int32_t *tiles, const int32_t *off, const void *const *w,
                   moe_f8_args epi, int K, int N, int E, int div)
{
    __shared__ __align__(128) unsigned char sa[MG_ST][MG_BM * 64];
    __shared__ __align__(128) unsigned char sb[MG_ST][MG_BN * 64];
    int e, r0, r1;
    const int32_t *slots = NULL;
    if (DEV) {
        int a;
        mg_plan_tile(tiles, E, (int)blockIdx.y, a, r0, r1);
        if (a < 0) return;   /* past the step's tiles (the grid is sized for the most there can be) */
        e = tiles[1 + a];
        slots = tiles + 2 + 2 * E;
    } else {
        e = tiles[2 * blockIdx.y];
        r0 = tiles[2 * blockIdx.y + 1];
        r1 = min(r0 + MG_BM, off[e + 1]);
    }
    const int n0 = blockIdx.x * (GLU ? MG_BN / 2 : MG_BN);
    const sits_bf16_t *W = static_cast<const sits_bf16_t *>(w[e]);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp & 1, wn = warp >> 1;
    /* loads: thread -> row lr of A (and rows lr, lr + 64 of B), chunk lc */
    const int lr = tid >> 2, lc = tid & 3;
    const bool va = r0 + lr < r1;
    const int ir = va ? r0 + lr : r0;
    const sits_bf16_t *ga = in + (size_t)(DEV ? slots[ir] / div : ir) * K + lc * 8;
    int ra, rb;
    bool vb0, vb1;
    if (GLU) {   /* row lr: gate of feature n0 + lr; row lr + 64: its up */
        vb0 = vb1 = n0 + lr < N;
        ra = vb0 ? n0 + lr : 0;
        rb = vb0 ? N + n0 + lr : 0;
    } else {
        vb0 = n0 + lr < N;
        vb1 = n0 + 64 + lr < N;
        ra = vb0 ? n0 + lr : 0;
        rb = vb1 ? n0 + 64 + lr : 0;
    }
    const sits_bf16_t *gb0 = W + (size_t)ra * K + lc * 8, *gb1 = W + (size_t)rb * K + lc * 8;
    const int ks_n = (K + MG_BK - 1) / MG_BK;
    auto load = [&](int ks, int st) {
        const bool kin = ks * MG_BK + lc * 8 < K;
        att_cp16(sa[st] + mg_off(lr, lc), ga + ks * MG_BK, va && kin);
        att_cp16(sb[st] + mg_off(lr, lc), gb0 + ks * MG_BK, vb0 && kin);
        att_cp16(sb[st] + mg_off(lr + 64, lc), gb1 + ks * MG_BK, vb1 && kin);
    };
    float acc[2][4][4];   /* [m-tile of 16 rows][n-tile of 8 columns][C fragment] */
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nt = 0; nt < 4; nt++) acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.0f;
#pragma unroll
    for (int s = 0; s < MG_ST - 1; s++) {
        if (s < ks_n) load(s, s);
        att_cp_commit();
    }
    /* the warp's n-tile pairs: column bases (GLU: pair 0 = its 16 features' gate rows, pair 1 = their up rows) */
    const int cb0 = GLU ? wn * 16 : wn * 32, cb1 = GLU ? 64 + wn * 16 : wn * 32 + 16;
    for (int ks = 0; ks < ks_n; ks++) {
        att_cp_wait<MG_ST - 2>();   /* stage ks landed (this thread's copies), */
        __syncthreads();            /* everyone's, and stage ks - 1 is no longer read */
        if (ks + MG_ST - 1 < ks_n) load(ks + MG_ST - 1, (ks + MG_ST - 1) % MG_ST);
        att_cp_commit();
        const unsigned char *A = sa[ks % MG_ST], *B = sb[ks % MG_ST];
#pragma unroll
        for (int kh = 0; kh < 2; kh++) {   /* the two k16 halves of the stage: chunks 2 kh, 2 kh + 1 */
            uint32_t a[2][4], b[2][4];
#pragma unroll
            for (int mt = 0; mt < 2; mt++) att_ldsm4(a[mt], A + mg_off(wm * 32 + mt * 16 + (lane & 15), 2 * kh + (lane >> 4)));
#pragma unroll
            for (int p = 0; p < 2; p++)   /* regs: n-tile 2 p (b0, b1), n-tile 2 p + 1 (b0, b1) */
                att_ldsm4(b[p], B + mg_off((p ? cb1 : cb0) + ((lane >> 4) << 3) + (lane & 7), 2 * kh + ((lane >> 3) & 1)));
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int nt = 0; nt < 4; nt++) att_mma(acc[mt][nt], a[mt], b[nt >> 1][(nt & 1) * 2], b[nt >> 1][(nt & 1) * 2 + 1]);
        }
    }
    const int g = lane >> 2, tq = lane & 3;
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {   /* C rows g, g + 8 */
            const int ri = r0 + wm * 32 + mt * 16 + g + 8 * h;
            if (ri >= r1) continue;
            const int r = DEV ? slots[ri] : ri;   /* the output row */
            if (GLU) {
#pragma unroll
                for (int nt = 0; nt < 2; nt++) {
                    const int f = n0 + wn * 16 + nt * 8 + 2 * tq;
                    if (f >= N) continue;   /* N % 8 == 0: f + 1 < N too */
                    const sits_bf16_t v0 = moe_act(epi, e, f, N, acc[mt][nt][2 * h], acc[mt][nt + 2][2 * h]);
                    const sits_bf16_t v1 = moe_act(epi, e, f + 1, N, acc[mt][nt][2 * h + 1], acc[mt][nt + 2][2 * h + 1]);
                    *reinterpret_cast<uint32_t *>(out + (size_t)r * N + f) = (uint32_t)v0 | (uint32_t)v1 << 16;   /* bf16 bits */
                }
            } else {
#pragma unroll
                for (int nt = 0; nt < 4; nt++) {
                    const int c = n0 + wn * 32 + nt * 8 + 2 * tq;
                    if (c >= N) continue;
                    const sits_bf16_t v0 = moe_out(epi, e, c, acc[mt][nt][2 * h]), v1 = moe_out(epi, e, c + 1, acc[mt][nt][2 * h + 1]);
                    *reinterpret_cast<uint32_t *>(out + (size_t)r * N + c) = (uint32_t)v0 | (uint32_t)v1 << 16;
                }
            }
        }
}

/* [moe grouped] SITS_MOE_DEV_GROUPED_MIN (tokens, default MG_DEV_MIN): device-path steps of at least that many tokens
 * with bf16 experts run on moe_grouped_kernel's device form (the plan's slot lists as tiles, rows gathered and scattered
 * by slot) instead of the GEMV / MMA kernels above. Qwen3-30B-A3B steps on an H100 (bench/RESULTS.md), ms, those kernels
 * -> grouped: batch 16 18.0 -> 21.5, 32 25.0 -> 29.2, 64 33.9 -> 32.0, 96 49.2 -> 33.3, 128 47.4 -> 33.6, 256 41.3 -> 36.8 */
#define MG_DEV_MIN 64
static bool moe_dev_grouped(int n)
{
    static int min_n = -1;
    if (min_n < 0) {
        const char *e = getenv("SITS_MOE_DEV_GROUPED_MIN");
        min_n = e ? max(atoi(e), 1) : MG_DEV_MIN;
    }
    return n >= min_n;
}

static void moe_grouped_dev_launch(sits_bf16_t *y, sits_bf16_t *act, const sits_bf16_t *x, const int32_t *plan, const void *const *w_gu,
                                   const void *const *w_down, const moe_f8_args &f8, int n, int k, int E, int H, int I,
                                   cudaStream_t stream)
{
    const int nk = n * k, tiles = (nk + MG_BM - 1) / MG_BM + min(E, nk);   /* at most: blocks past the plan's return */
    const dim3 ggu((unsigned)((I + MG_BN / 2 - 1) / (MG_BN / 2)), (unsigned)tiles), gdn((unsigned)((H + MG_BN - 1) / MG_BN), (unsigned)tiles);
    moe_grouped_kernel<true, true><<<ggu, MG_THREADS, 0, stream>>>(act, x, plan, NULL, w_gu, f8, H, I, E, k);      /* act [nk, I] by slot */
    moe_grouped_kernel<false, true><<<gdn, MG_THREADS, 0, stream>>>(y, act, plan, NULL, w_down, f8, I, H, E, 1);   /* y [nk, H] by slot */
}

extern "C" sits_status_t sits_k_moe_grouped(sits_bf16_t *y, sits_bf16_t *act, const sits_bf16_t *x, const int32_t *tiles, int n_tiles,
                                            const int32_t *off, const void *const *w_gu, const void *const *w_down,
                                            const sits_k_moe_epi_t *epi, int H, int I, cudaStream_t stream)
{
    if (n_tiles < 0 || n_tiles > 65535 || H < 8 || I < 8 || H % 8 || I % 8 || !sits_k_aligned16(x) || !sits_k_aligned16(act) ||
        !sits_k_aligned16(y))
        return SITS_ERR_INVALID;
    if (n_tiles == 0) return SITS_OK;
    moe_f8_args a = { NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, 0.0f, 0.0f };
    if (epi) {   /* [gpt-oss] */
        a.b_gu = reinterpret_cast<const sits_bf16_t *const *>(epi->b_gu);
        a.b_down = reinterpret_cast<const sits_bf16_t *const *>(epi->b_down);
        a.oai = epi->oai;
        a.alpha = epi->alpha;
        a.limit = epi->limit;
    }
    const dim3 ggu((unsigned)((I + MG_BN / 2 - 1) / (MG_BN / 2)), (unsigned)n_tiles), gdn((unsigned)((H + MG_BN - 1) / MG_BN), (unsigned)n_tiles);
    moe_grouped_kernel<true, false><<<ggu, MG_THREADS, 0, stream>>>(act, x, tiles, off, w_gu, a, H, I, 0, 1);      /* act [rows, I] */
    moe_grouped_kernel<false, false><<<gdn, MG_THREADS, 0, stream>>>(y, act, tiles, off, w_down, a, I, H, 0, 1);   /* y [rows, H] */
    return SITS_K_LAUNCH_STATUS();
}

static __global__ void moe_combine_slots_kernel(sits_bf16_t *out, const sits_bf16_t *y, const float *wts, const sits_bf16_t *sg,
                                                int n, int k, int H)
{
    const size_t t = blockIdx.x;
    const float *w = wts + t * k;
    const float ws = sg ? 1.0f / (1.0f + expf(-sits_k_bf2f(sg[t]))) : 0.0f;
    for (int i = threadIdx.x; i < H; i += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < k; j++) acc += w[j] * sits_k_bf2f(y[(t * k + j) * H + i]);
        if (sg) acc += ws * sits_k_bf2f(y[((size_t)n * k + t) * H + i]);
        out[t * H + i] = sits_k_f2bf(acc);
    }
}

/* H % 8 == 0 and 16-byte aligned rows: thread (blockIdx.x, threadIdx.x) of token blockIdx.y takes 8 consecutive
 * columns with one 16-byte load per slot, the k (+ 1) loads of a thread independent (in flight together); the
 * same fp32 sums in the same order as above. */
#define MOE_COMBINE8_THREADS 128
static __global__ void __launch_bounds__(MOE_COMBINE8_THREADS)
moe_combine_slots8_kernel(sits_bf16_t *out, const sits_bf16_t *y, const float *wts, const sits_bf16_t *sg, int n, int k, int H)
{
    const size_t t = blockIdx.y;
    const int c = 8 * (blockIdx.x * MOE_COMBINE8_THREADS + threadIdx.x);
    if (c >= H) return;
    const float *w = wts + t * k;
    float acc[8];
#pragma unroll
    for (int i = 0; i < 8; i++) acc[i] = 0.0f;
#pragma unroll 8
    for (int j = 0; j < k; j++) {
        const uint4 v = __ldg(reinterpret_cast<const uint4 *>(y + (t * k + j) * H + c));
        const uint32_t u[4] = { v.x, v.y, v.z, v.w };
        const float wj = w[j];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            acc[2 * i] = fmaf(wj, moe_el<false>::lo(u[i]), acc[2 * i]);
            acc[2 * i + 1] = fmaf(wj, moe_el<false>::hi(u[i]), acc[2 * i + 1]);
        }
    }
    if (sg) {
        const float ws = 1.0f / (1.0f + expf(-sits_k_bf2f(sg[t])));
        const uint4 v = __ldg(reinterpret_cast<const uint4 *>(y + ((size_t)n * k + t) * H + c));
        const uint32_t u[4] = { v.x, v.y, v.z, v.w };
#pragma unroll
        for (int i = 0; i < 4; i++) {
            acc[2 * i] = fmaf(ws, moe_el<false>::lo(u[i]), acc[2 * i]);
            acc[2 * i + 1] = fmaf(ws, moe_el<false>::hi(u[i]), acc[2 * i + 1]);
        }
    }
    uint32_t o[4];
#pragma unroll
    for (int i = 0; i < 4; i++)
        o[i] = (uint32_t)sits_k_f2bf(acc[2 * i]) | ((uint32_t)sits_k_f2bf(acc[2 * i + 1]) << 16);
    *reinterpret_cast<uint4 *>(out + t * H + c) = make_uint4(o[0], o[1], o[2], o[3]);
}

extern "C" sits_status_t sits_k_moe_combine_slots(sits_bf16_t *out, const sits_bf16_t *y, const float *wts, const sits_bf16_t *sg,
                                                  int n, int k, int H, cudaStream_t stream)
{
    if (n < 0 || k < 1 || H <= 0) return SITS_ERR_INVALID;
    if (n == 0) return SITS_OK;
    if (H % 8 == 0 && sits_k_aligned16(out) && sits_k_aligned16(y) && n <= 65535) {
        const dim3 grid((unsigned)((H / 8 + MOE_COMBINE8_THREADS - 1) / MOE_COMBINE8_THREADS), (unsigned)n);
        moe_combine_slots8_kernel<<<grid, MOE_COMBINE8_THREADS, 0, stream>>>(out, y, wts, sg, n, k, H);
    } else {
        moe_combine_slots_kernel<<<n, sits_k_row_threads(H, 256), 0, stream>>>(out, y, wts, sg, n, k, H);
    }
    return SITS_K_LAUNCH_STATUS();
}
