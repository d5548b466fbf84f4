/* gemv.cu -- [perf: decode gemv] y[n, out] = x[n, in] . w[out, in]^T (+ bias[out]) for n <= SITS_K_GEMV_MAX_N
 * tokens: the linears of decode and verification steps, where cuBLASLt's smallest tiles (n = 8 or 16) waste
 * most of each MMA and long rows become split-K partials plus a separate reduce kernel. Here every weight
 * byte is read once, streamed (__ldcs), in one launch; the few activation rows come through L1.
 *   bf16: w [out, in] bf16, x [n, in] bf16; y = sum_k x w.
 *   fp8:  w [out, in] E4M3 with per-row scales ws [out]; x [n, in] E4M3 with per-token scales xs [n] (the
 *         activations as matmul_fp8 quantises them); y = (sum_k x_q w_q) * xs[t] * ws[o] -- the product of two
 *         E4M3 values is exact in fp32 -- in the order sits_k_fp8_scale_out applies them to a GEMM's sums.
 *   y [n, out] bf16, or fp32 (y_f32); bias bf16 or NULL.
 *
 * Grid: ceil(out / R) blocks of GV_WARPS warps; block b computes rows b R .. b R + R - 1 for all n tokens
 * (R = 8 for one or two tokens, else 4, 2 for 8 tokens of E4M3: R x NT sums a lane, NT = n rounded up to 1, 2,
 * 4, 8; E4M3 at R 4 NT 8 would spill). A lane's unit is 16 bytes of a weight row (8 bf16 or 16 E4M3) and the
 * same columns of each token's row; warp w takes units 32 w + lane, 32 (w + GV_WARPS) + lane, ... of each of its
 * block's rows (a row's k range is split over the block's warps, never over blocks).
 * Measured on the H200 (bench/RESULTS.md): one token beats cuBLASLt (8B batch 1 -9 %), 2-8 tokens lose to it
 * (CUDA-core FMAs; batch 8 2.7x slower), so the backend sends only one-token steps here by default.
 * Sums, in fp32: a lane's units in order, a unit's products in order; then the 32 lanes by the butterfly of
 * masks 16, 8, 4, 2, 1 (run as a reduce-scatter: R NT - 1 shuffles leave each of the R NT sums in 32 / (R NT)
 * lanes, then the remaining masks); then the warps in order. None of it depends on n, on R or on the other
 * rows: a token's outputs are the same bits at any n <= SITS_K_GEMV_MAX_N (decode and verification steps of
 * one sequence see the same linears). Needs in % (16 / element bytes) == 0 and 16-byte aligned x and w.
 * [perf: pdl] Launched as a programmatic dependent launch: its blocks may be scheduled while the previous kernel
 * drains (the kernels feeding a linear -- the norms, attention, SiLU -- signal it as they start, see
 * sits_k_pdl_trigger); a lane loads its first unit of weights, which no kernel writes, then waits for the
 * previous grid (griddepcontrol.wait: completed, its writes visible) before it reads x. Weights stream one unit
 * ahead of the products.
 * [perf: swiglu gemv] sits_k_gemv_swiglu: the one-token gate/up linear with SwiGLU in the epilogue (GLU below).
 * [perf: ring gemv] One token (both entry points) runs gemv_ring_kernel by default: the same sums, read from a
 * shared-memory ring that bulk copies fill (below). */
#include "kernels/common.cuh"

#define GV_WARPS 8

/* The lane's V partial sums -> their warp sums: after the call lane l holds value l >> (5 - log2 V). */
template <int V>
static __device__ __forceinline__ float gv_reduce_scatter(float (&a)[V], int lane)
{
    int m = 16;
#pragma unroll
    for (int c = V; c > 1; c >>= 1) {
        const bool up = (lane & m) != 0;
#pragma unroll
        for (int i = 0; i < c / 2; i++) {
            const float send = up ? a[i] : a[i + c / 2];
            const float keep = up ? a[i + c / 2] : a[i];
            a[i] = keep + __shfl_xor_sync(0xffffffffu, send, m);
        }
        m >>= 1;
    }
    float v = a[0];
    for (; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
    return v;
}

/* the 2 (bf16) or 4 (E4M3) elements of one 32-bit word, as floats */
template <int F8>
static __device__ __forceinline__ void gv_word(uint32_t u, float (&f)[F8 ? 4 : 2])
{
    if constexpr (F8 != 0) {
        const float2 a = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(u & 0xffffu), __NV_E4M3)));
        const float2 b = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(u >> 16), __NV_E4M3)));
        f[0] = a.x;
        f[1] = a.y;
        f[2] = b.x;
        f[3] = b.y;
    } else {
        f[0] = __uint_as_float(u << 16);
        f[1] = __uint_as_float(u & 0xffff0000u);
    }
}

/* [perf: swiglu gemv] GLU: the gate/up linear of one token with SwiGLU in the epilogue (sits_k_gemv_swiglu): w is
 * [2 inter, in] (out = 2 inter: gate rows, then up rows), block b takes gate rows 4b .. 4b + 3 and the up rows
 * inter + 4b .. inter + 4b + 3 (R 8), rounds each sum to bf16 as y would be stored, and writes
 * y[j] = bf16(silu(gate_j) * up_j) [1, inter] -- the bits silu_mul makes of the [1, 2 inter] output. */
template <int F8, int NT, int R, bool GLU = false>
static __global__ void __launch_bounds__(GV_WARPS * 32, NT == 1 ? 3 : 2)   /* one token: 3 blocks an SM (GLU: one 8-byte spill) */
gemv_kernel(void *y, int y_f32, const void *x, const float *xs, const void *w, const float *ws, const sits_bf16_t *bias, int n,
            int in, int out)
{
    static_assert(!GLU || (NT == 1 && R == 8), "the SwiGLU epilogue: one token, 4 gate + 4 up rows a block");
    constexpr int V = R * NT, EW = F8 ? 4 : 2;   /* sums a lane; elements a 32-bit word */
    __shared__ float red[GV_WARPS][V];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int o0 = blockIdx.x * (GLU ? R / 2 : R);
    const int units = in / (4 * EW);             /* 16-byte units a row */
    const size_t row_units = (size_t)units;
    const uint4 *wr[R], *xr[NT];
    auto row_of = [&](int r) {   /* the weight row of sum r */
        if (GLU) return (r < R / 2 ? 0 : out / 2) + min(o0 + (r & (R / 2 - 1)), out / 2 - 1);
        return min(o0 + r, out - 1);
    };
#pragma unroll
    for (int r = 0; r < R; r++) wr[r] = static_cast<const uint4 *>(w) + (size_t)row_of(r) * row_units;
#pragma unroll
    for (int t = 0; t < NT; t++) xr[t] = static_cast<const uint4 *>(x) + (size_t)min(t, n - 1) * row_units;
    float acc[V];   /* acc[r * NT + t] */
#pragma unroll
    for (int i = 0; i < V; i++) acc[i] = 0.0f;
    constexpr int STEP = GV_WARPS * 32;
    int k = warp * 32 + lane;
    uint4 wv[R];   /* the weights of unit k, loaded one unit ahead; streamed: every weight byte is read once a step */
#pragma unroll
    for (int r = 0; r < R; r++) wv[r] = k < units ? __ldcs(wr[r] + k) : make_uint4(0u, 0u, 0u, 0u);
    sits_k_pdl_wait();   /* the weights above do not depend on the previous kernel; x does */
    for (; k < units; k += STEP) {
        uint4 xv[NT], wn[R];
#pragma unroll
        for (int t = 0; t < NT; t++) xv[t] = __ldg(xr[t] + k);
#pragma unroll
        for (int r = 0; r < R; r++) wn[r] = k + STEP < units ? __ldcs(wr[r] + k + STEP) : make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
        for (int q = 0; q < 4; q++) {
            float xf[NT][EW];
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const uint32_t u = q == 0 ? xv[t].x : q == 1 ? xv[t].y : q == 2 ? xv[t].z : xv[t].w;
                gv_word<F8>(u, xf[t]);
            }
#pragma unroll
            for (int r = 0; r < R; r++) {
                float wf[EW];
                const uint32_t u = q == 0 ? wv[r].x : q == 1 ? wv[r].y : q == 2 ? wv[r].z : wv[r].w;
                gv_word<F8>(u, wf);
#pragma unroll
                for (int t = 0; t < NT; t++)
#pragma unroll
                    for (int e = 0; e < EW; e++) acc[r * NT + t] = fmaf(wf[e], xf[t][e], acc[r * NT + t]);
            }
        }
#pragma unroll
        for (int r = 0; r < R; r++) wv[r] = wn[r];
    }
    const float v = gv_reduce_scatter<V>(acc, lane);
    constexpr int SPAN = 32 / V;   /* lanes holding each sum */
    if ((lane & (SPAN - 1)) == 0) red[warp][lane / SPAN] = v;
    __syncthreads();
    if (GLU) {
        if (threadIdx.x < V) {   /* lanes 0-7 of warp 0: sum r; lane r < 4 then pairs gate r with up r */
            const int r = threadIdx.x;
            float s = 0.0f;
#pragma unroll
            for (int j = 0; j < GV_WARPS; j++) s += red[j][r];
            if (F8) s = s * xs[0] * ws[row_of(r)];
            const float g = sits_k_round_bf(s), u = __shfl_down_sync(0xffu, g, R / 2, 8);
            if (r < R / 2 && o0 + r < out / 2) static_cast<sits_bf16_t *>(y)[o0 + r] = sits_k_f2bf(sits_k_silu_mul1(g, u));
        }
        return;
    }
    if (threadIdx.x < V) {
        const int i = threadIdx.x, r = i / NT, t = i % NT, o = o0 + r;
        if (o < out && t < n) {
            float s = 0.0f;
#pragma unroll
            for (int j = 0; j < GV_WARPS; j++) s += red[j][i];
            if (F8) s = s * xs[t] * ws[o];
            if (bias) s += sits_k_bf2f(bias[o]);
            const size_t at = (size_t)t * out + o;
            if (y_f32) static_cast<float *>(y)[at] = s;
            else static_cast<sits_bf16_t *>(y)[at] = sits_k_f2bf(s);
        }
    }
}

/* [perf: ring gemv] The one-token GEMV (and its SwiGLU form) as a persistent kernel fed by bulk copies: grid = SMs x
 * blocks an SM (at most the tiles), block b takes tiles [b T / G, (b + 1) T / G) (a tile: gemv_kernel's block of R = 8
 * rows, GLU 4 gate + 4 up). A producer warp (warp GV_WARPS, one lane) walks the block's (tile, step) sequence -- a step:
 * 256 units of 16 bytes of each of the tile's 8 rows, gemv_kernel's STEP -- and copies each step's 8 row pieces into a
 * ring of `stages` 32 KB stages of shared memory (cp.async.bulk, completion counted in bytes on the stage's `full`
 * mbarrier, L2 evict-first); the 8 consumer warps read a stage as gemv_kernel reads global memory (warp w, lane l: unit
 * 32 w + l of the step), release it on its `empty` mbarrier (one arrival a warp) and reduce each tile as gemv_kernel
 * does. Same sums in the same order: the bytes of gemv_kernel<F8, 1, 8, GLU>. Bytes in flight are not held in
 * registers (up to stages x 32 KB an SM, ahead across tiles), and no block waits in a second wave. The weights do not
 * depend on the previous kernel: the producer starts at once; the consumers wait for it (PDL) before reading x.
 * Dynamic shared memory: 128 bytes of barriers (stages <= 8) + stages x GR_STAGE. */
#define GR_ROWB 4096                 /* bytes of a row a stage holds: STEP units of 16 bytes */
#define GR_STAGE (8 * GR_ROWB)       /* a stage: the 8 rows of a tile */
#define GR_MAX_STAGES 7              /* 128 + 7 x 32 KB fits the 227 KB of an sm_90 block */

template <int F8, bool GLU>
static __global__ void __launch_bounds__((GV_WARPS + 1) * 32, 4)   /* up to 4 blocks an SM: <= 56 registers */
gemv_ring_kernel(void *y, int y_f32, const void *x, const float *xs, const void *w, const float *ws, const sits_bf16_t *bias,
                 int in, int out, int stages)
{
    constexpr int R = 8, EW = F8 ? 4 : 2, STEP = GV_WARPS * 32, RH = GLU ? R / 2 : R;
    extern __shared__ __align__(128) unsigned char gr_sm[];
    __shared__ float red[2][GV_WARPS][R];   /* tile parity: a tile's partials are not overwritten while read */
    uint64_t *full = reinterpret_cast<uint64_t *>(gr_sm), *empty = full + stages;
    unsigned char *ring = gr_sm + 128;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int units = in / (4 * EW), steps = (units + STEP - 1) / STEP;
    const size_t rowb = (size_t)units * 16;
    const int rows = GLU ? out / 2 : out, tiles = (rows + RH - 1) / RH;
    const int t_begin = (int)((long long)blockIdx.x * tiles / gridDim.x), t_end = (int)((long long)(blockIdx.x + 1) * tiles / gridDim.x);
    auto row_of = [&](int o0, int r) {   /* the weight row of sum r, as gemv_kernel */
        if (GLU) return (r < R / 2 ? 0 : out / 2) + min(o0 + (r & (R / 2 - 1)), out / 2 - 1);
        return min(o0 + r, out - 1);
    };
    if (threadIdx.x == 0) {
        for (int s = 0; s < stages; s++) {
            sits_k_mbar_init(&full[s], 1);
            sits_k_mbar_init(&empty[s], GV_WARPS);
        }
        sits_k_mbar_init_fence();
    }
    __syncthreads();
    if (warp == GV_WARPS) {   /* the producer */
        if (lane == 0) {
            const uint64_t pol = sits_k_l2_evict_first();
            unsigned i = 0;
            for (int t = t_begin; t < t_end; t++)
                for (int s = 0; s < steps; s++, i++) {
                    const unsigned st = i % (unsigned)stages, ph = (i / (unsigned)stages) & 1u;
                    if (i >= (unsigned)stages) sits_k_mbar_wait(&empty[st], ph ^ 1u);   /* the consumers released it */
                    const unsigned cb = (unsigned)min((size_t)GR_ROWB, rowb - (size_t)s * GR_ROWB);
                    sits_k_mbar_expect_tx(&full[st], R * cb);
#pragma unroll
                    for (int r = 0; r < R; r++)
                        sits_k_bulk_load(ring + (size_t)st * GR_STAGE + r * GR_ROWB,
                                         static_cast<const unsigned char *>(w) + (size_t)row_of(t * RH, r) * rowb + (size_t)s * GR_ROWB, cb,
                                         &full[st], pol);
                }
        }
        return;
    }
    sits_k_pdl_wait();   /* x comes from the previous kernel */
    const uint4 *xr = static_cast<const uint4 *>(x);
    unsigned i = 0;
    for (int t = t_begin, p = 0; t < t_end; t++, p ^= 1) {
        const int o0 = t * RH;
        float acc[R];
#pragma unroll
        for (int r = 0; r < R; r++) acc[r] = 0.0f;
        for (int s = 0; s < steps; s++, i++) {
            const unsigned st = i % (unsigned)stages, ph = (i / (unsigned)stages) & 1u;
            const int k = s * STEP + warp * 32 + lane;
            const uint4 xv = k < units ? __ldg(xr + k) : make_uint4(0u, 0u, 0u, 0u);
            sits_k_mbar_wait(&full[st], ph);
            if (k < units) {
                const uint4 *sw = reinterpret_cast<const uint4 *>(ring + (size_t)st * GR_STAGE) + warp * 32 + lane;
                uint4 wv[R];
#pragma unroll
                for (int r = 0; r < R; r++) wv[r] = sw[r * (GR_ROWB / 16)];
#pragma unroll
                for (int q = 0; q < 4; q++) {   /* gemv_kernel's products, in its order */
                    float xf[EW];
                    gv_word<F8>(q == 0 ? xv.x : q == 1 ? xv.y : q == 2 ? xv.z : xv.w, xf);
#pragma unroll
                    for (int r = 0; r < R; r++) {
                        float wf[EW];
                        gv_word<F8>(q == 0 ? wv[r].x : q == 1 ? wv[r].y : q == 2 ? wv[r].z : wv[r].w, wf);
#pragma unroll
                        for (int e = 0; e < EW; e++) acc[r] = fmaf(wf[e], xf[e], acc[r]);
                    }
                }
            }
            __syncwarp();
            if (lane == 0) sits_k_mbar_arrive(&empty[st]);
        }
        const float v = gv_reduce_scatter<R>(acc, lane);
        constexpr int SPAN = 32 / R;
        if ((lane & (SPAN - 1)) == 0) red[p][warp][lane / SPAN] = v;
        asm volatile("bar.sync 1, %0;" ::"n"(GV_WARPS * 32) : "memory");   /* the consumer warps only */
        if (threadIdx.x < R) {
            const int r = threadIdx.x;
            float sum = 0.0f;
#pragma unroll
            for (int j = 0; j < GV_WARPS; j++) sum += red[p][j][r];
            if (GLU) {   /* lane r < 4 pairs gate r with up r */
                if (F8) sum = sum * xs[0] * ws[row_of(o0, r)];
                const float g = sits_k_round_bf(sum), u = __shfl_down_sync(0xffu, g, R / 2, 8);
                if (r < R / 2 && o0 + r < out / 2) static_cast<sits_bf16_t *>(y)[o0 + r] = sits_k_f2bf(sits_k_silu_mul1(g, u));
            } else if (o0 + r < out) {
                const int o = o0 + r;
                if (F8) sum = sum * xs[0] * ws[o];
                if (bias) sum += sits_k_bf2f(bias[o]);
                if (y_f32) static_cast<float *>(y)[o] = sum;
                else static_cast<sits_bf16_t *>(y)[o] = sits_k_f2bf(sum);
            }
        }
    }
}

/* [perf: ring gemv] SITS_GEMV_RING (default GR_DEFAULT_ON): 0 sends one-token linears to gemv_kernel (A/B);
 * SITS_GEMV_RING_STAGES (1-7) and SITS_GEMV_RING_BPS (blocks an SM, 1-4) shape the ring. Defaults, from the H200
 * sweep in bench/RESULTS.md: E4M3 1 stage x 4 blocks an SM (its products, not its bytes in flight, want warps),
 * bf16 3 stages x 2 blocks. */
#define GR_DEFAULT_ON 1
template <int F8, bool GLU>
static cudaError_t gr_launch(void *y, int y_f32, const void *x, const float *xs, const void *w, const float *ws,
                             const sits_bf16_t *bias, int in, int out, cudaStream_t stream, bool *taken)
{
    *taken = false;
    const char *e = getenv("SITS_GEMV_RING");
    if (!(e ? atoi(e) != 0 : GR_DEFAULT_ON)) return cudaSuccess;
    const char *es = getenv("SITS_GEMV_RING_STAGES"), *eb = getenv("SITS_GEMV_RING_BPS");
    const int stages = es ? min(max(atoi(es), 1), GR_MAX_STAGES) : F8 ? 1 : 3, bps = eb ? min(max(atoi(eb), 1), 4) : F8 ? 4 : 2;
    const size_t smem = 128 + (size_t)stages * GR_STAGE;
    /* the current device's SM count and shared-memory limit at each launch (as attention_decode.cu: a process may
     * drive more than one device; graphs capture the launch once) */
    int dev = 0, n_sms = 0;
    cudaError_t c;
    if ((c = cudaGetDevice(&dev)) != cudaSuccess || (c = cudaDeviceGetAttribute(&n_sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess ||
        (c = cudaFuncSetAttribute(gemv_ring_kernel<F8, GLU>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)) != cudaSuccess)
        return c;
    const int tiles = GLU ? (out / 2 + 3) / 4 : (out + 7) / 8;
    const unsigned grid = (unsigned)min(tiles, n_sms * bps);
    *taken = true;
    return sits_k_launch_pdl(gemv_ring_kernel<F8, GLU>, grid, (GV_WARPS + 1) * 32, smem, stream, true, y, y_f32, x, xs, w, ws, bias, in, out,
                             stages);
}

extern "C" sits_status_t sits_k_gemv(void *y, int y_f32, const void *x, const float *xs, const void *w, const float *ws,
                                     const sits_bf16_t *bias, int fp8, int n, int in, int out, cudaStream_t stream)
{
    if (n < 0 || in <= 0 || out <= 0 || (fp8 && (!xs || !ws))) return SITS_ERR_INVALID;
    if (n > SITS_K_GEMV_MAX_N || in % (fp8 ? 16 : 8) || !sits_k_aligned16(x) || !sits_k_aligned16(w)) return SITS_ERR_UNSUPPORTED;
    if (n == 0) return SITS_OK;
    if (n == 1) {   /* [perf: ring gemv] */
        bool taken = false;
        const cudaError_t re = fp8 ? gr_launch<1, false>(y, y_f32, x, xs, w, ws, bias, in, out, stream, &taken)
                                   : gr_launch<0, false>(y, y_f32, x, xs, w, ws, bias, in, out, stream, &taken);
        if (taken || re != cudaSuccess) return re == cudaSuccess ? SITS_K_LAUNCH_STATUS() : SITS_ERR_CUDA;
    }
    const int nt = n <= 1 ? 1 : n <= 2 ? 2 : n <= 4 ? 4 : 8, rows = nt <= 2 ? 8 : fp8 && nt == 8 ? 2 : 4;
    /* programmatic dependent launch: the kernel may start while the previous one finishes (it waits for it before
     * reading x) */
    const unsigned grid = (unsigned)((out + rows - 1) / rows);
    cudaError_t e = cudaSuccess;
#define GV_LAUNCH(F8_, NT_, R_) \
    e = sits_k_launch_pdl(gemv_kernel<F8_, NT_, R_>, grid, GV_WARPS * 32, 0, stream, true, y, y_f32, x, xs, w, ws, bias, n, in, out)
    if (fp8) {
        if (nt == 1) GV_LAUNCH(1, 1, 8);
        else if (nt == 2) GV_LAUNCH(1, 2, 8);
        else if (nt == 4) GV_LAUNCH(1, 4, 4);
        else GV_LAUNCH(1, 8, 2);
    } else {
        if (nt == 1) GV_LAUNCH(0, 1, 8);
        else if (nt == 2) GV_LAUNCH(0, 2, 8);
        else if (nt == 4) GV_LAUNCH(0, 4, 4);
        else GV_LAUNCH(0, 8, 4);
    }
#undef GV_LAUNCH
    return e == cudaSuccess ? SITS_K_LAUNCH_STATUS() : SITS_ERR_CUDA;
}

extern "C" sits_status_t sits_k_gemv_swiglu(sits_bf16_t *act, const void *x, const float *xs, const void *w, const float *ws,
                                            int fp8, int n, int in, int inter, cudaStream_t stream)
{
    if (n < 0 || in <= 0 || inter <= 0 || (fp8 && (!xs || !ws))) return SITS_ERR_INVALID;
    if (n != 1 || in % (fp8 ? 16 : 8) || !sits_k_aligned16(x) || !sits_k_aligned16(w)) return SITS_ERR_UNSUPPORTED;
    bool taken = false;   /* [perf: ring gemv] */
    const cudaError_t re = fp8 ? gr_launch<1, true>(act, 0, x, xs, w, ws, NULL, in, 2 * inter, stream, &taken)
                               : gr_launch<0, true>(act, 0, x, xs, w, ws, NULL, in, 2 * inter, stream, &taken);
    if (taken || re != cudaSuccess) return re == cudaSuccess ? SITS_K_LAUNCH_STATUS() : SITS_ERR_CUDA;
    const unsigned grid = (unsigned)((inter + 3) / 4);   /* programmatic dependent launch, as sits_k_gemv */
    const cudaError_t e =
        fp8 ? sits_k_launch_pdl(gemv_kernel<1, 1, 8, true>, grid, GV_WARPS * 32, 0, stream, true, (void *)act, 0, x, xs, w, ws,
                                (const sits_bf16_t *)NULL, 1, in, 2 * inter)
            : sits_k_launch_pdl(gemv_kernel<0, 1, 8, true>, grid, GV_WARPS * 32, 0, stream, true, (void *)act, 0, x, xs, w, ws,
                                (const sits_bf16_t *)NULL, 1, in, 2 * inter);
    return e == cudaSuccess ? SITS_K_LAUNCH_STATUS() : SITS_ERR_CUDA;
}
