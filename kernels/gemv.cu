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
 * (CUDA-core FMAs; batch 8 2.7x slower). By default one token runs gemv_ring_kernel and [perf: mma gemv] 2-16 tokens
 * gemv_mma_kernel (tensor cores; below), which beats cuBLASLt there; gemv_kernel is the fallback (SITS_GEMV_MMA=0,
 * SITS_GEMV_RING=0: A/B).
 * Sums, in fp32: a lane's units in order, a unit's products in order; then the 32 lanes by the butterfly of
 * masks 16, 8, 4, 2, 1 (run as a reduce-scatter: R NT - 1 shuffles leave each of the R NT sums in 32 / (R NT)
 * lanes, then the remaining masks); then the warps in order. None of it depends on n, on R or on the other
 * rows: a token's outputs are the same bits at any n <= 8 (the tensor-core form's: at any n <= 16). Needs
 * in % (16 / element bytes) == 0 and 16-byte aligned x and w.
 * [perf: pdl] Launched as a programmatic dependent launch: its blocks may be scheduled while the previous kernel
 * drains (the kernels feeding a linear -- the norms, attention, SiLU -- signal it as they start, see
 * sits_k_pdl_trigger); a lane loads its first unit of weights, which no kernel writes, then waits for the
 * previous grid (griddepcontrol.wait: completed, its writes visible) before it reads x. Weights stream one unit
 * ahead of the products.
 * [perf: gemv trigger] Each block signals its own dependent (the row kernel after the linear) once past its last
 * k loop, so that kernel's blocks are placed while the last blocks sum and write -- not only as they exit.
 * [perf: swiglu gemv] sits_k_gemv_swiglu: the one-token gate/up linear with SwiGLU in the epilogue (GLU below).
 * [perf: ring gemv] One token (both entry points) runs gemv_ring_kernel by default: the same sums, read from a
 * shared-memory ring that bulk copies fill (below). */
#include "kernels/common.cuh"

#define GV_WARPS 8
#define GV_MAX_N 8   /* gemv_kernel's tokens (SITS_K_GEMV_MAX_N: the MMA form's) */

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

/* the weight row of row r of the tile starting at output o0 (R rows; GLU: R / 2 gate rows, then the up rows of the same
 * features); rows past the end repeat the last one (their sums are not stored) */
template <int R, bool GLU>
static __device__ __forceinline__ int gr_row_of(int o0, int r, int out)
{
    if (GLU) return (r < R / 2 ? 0 : out / 2) + min(o0 + (r & (R / 2 - 1)), out / 2 - 1);
    return min(o0 + r, out - 1);
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
    auto row_of = [&](int r) { return gr_row_of<R, GLU>(o0, r, out); };   /* the weight row of sum r */
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
    sits_k_pdl_trigger();   /* [perf: gemv trigger] (above) */
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

/* [perf: ring gemv] A block's tiles: first, first + step, ... below end. Ranges (step 1: block b takes tiles [b T / G,
 * (b + 1) T / G)) or strides (SITS_GEMV_TILES=stride: block b takes b, b + G, b + 2 G, ...). With ranges a block
 * holds floor or ceil of T / G tiles in a pattern of period G / gcd(T, G); where that period divides the SM count
 * (8B qkv: 384 tiles of 16 rows over 264 blocks, period 11, 132 SMs) the blocks sharing an SM all hold the longer
 * count -- 4 tiles on some SMs against 2.9 on average. With strides the first T mod G blocks hold one more, so blocks
 * b and b + SMs (one SM, where blocks are placed round-robin) differ. Same sums either way: a tile's bytes do not
 * depend on its block. */
struct gr_tiles_t {
    int first, step, end;
};

/* [perf: ring gemv] The producer of a ring kernel (one lane): walks the block's (tile, step) sequence -- tiles tl of rh
 * outputs, `steps` pieces of up to ROWB bytes of each of the tile's R weight rows (row_of(t rh, r)) --
 * and bulk-copies each step's R row pieces into the next of `stages` stages (row r at r PITCH), after the consumers
 * released that stage (its `empty` barrier) and counting the bytes on its `full` barrier. */
template <int R, int ROWB, int PITCH, typename RowOf>
static __device__ __forceinline__ void gr_produce(unsigned char *ring, uint64_t *full, uint64_t *empty, int stages, gr_tiles_t tl,
                                                  int steps, size_t rowb, const void *w, int rh, RowOf row_of)
{
    const uint64_t pol = sits_k_l2_evict_first();
    unsigned i = 0;
    for (int t = tl.first; t < tl.end; t += tl.step)
        for (int s = 0; s < steps; s++, i++) {
            const unsigned st = i % (unsigned)stages, ph = (i / (unsigned)stages) & 1u;
            if (i >= (unsigned)stages) sits_k_mbar_wait(&empty[st], ph ^ 1u);   /* the consumers released it */
            const unsigned cb = (unsigned)min((size_t)ROWB, rowb - (size_t)s * ROWB);
            sits_k_mbar_expect_tx(&full[st], R * cb);
#pragma unroll
            for (int r = 0; r < R; r++)
                sits_k_bulk_load(ring + (size_t)st * R * PITCH + r * PITCH,
                                 static_cast<const unsigned char *>(w) + (size_t)row_of(t * rh, r) * rowb + (size_t)s * ROWB, cb, &full[st],
                                 pol);
        }
}

/* A ring kernel's tiles and barriers: this block's share *tl of `tiles` tiles (ranges, or strides when strided), the
 * stages' barriers (full: one arrival + bytes; empty: one arrival a consumer warp). True for the producer warp (warp
 * GV_WARPS), which then runs its producer and returns. */
static __device__ __forceinline__ bool gr_setup(uint64_t *full, uint64_t *empty, int stages, int tiles, int strided, gr_tiles_t *tl)
{
    if (strided) *tl = { (int)blockIdx.x, (int)gridDim.x, tiles };
    else *tl = { (int)((long long)blockIdx.x * tiles / gridDim.x), 1, (int)((long long)(blockIdx.x + 1) * tiles / gridDim.x) };
    if (threadIdx.x == 0) {
        for (int s = 0; s < stages; s++) {
            sits_k_mbar_init(&full[s], 1);
            sits_k_mbar_init(&empty[s], GV_WARPS);
        }
        sits_k_mbar_init_fence();
    }
    __syncthreads();
    return (threadIdx.x >> 5) == GV_WARPS;
}

/* A ring kernel's start: this block's tiles *tl of R rows (GLU: R / 2 features; ranges, or strides when strided), the
 * stages' barriers, and the producer warp (warp GV_WARPS: its lane 0 runs gr_produce). True for the producer warp,
 * which then returns. */
template <int R, int ROWB, int PITCH, bool GLU>
static __device__ __forceinline__ bool gr_start(unsigned char *ring, uint64_t *full, uint64_t *empty, int stages, int steps, size_t rowb,
                                                const void *w, int out, int strided, gr_tiles_t *tl)
{
    constexpr int RH = GLU ? R / 2 : R;
    if (!gr_setup(full, empty, stages, ((GLU ? out / 2 : out) + RH - 1) / RH, strided, tl)) return false;
    if ((threadIdx.x & 31) == 0)
        gr_produce<R, ROWB, PITCH>(ring, full, empty, stages, *tl, steps, rowb, w, RH,
                                   [&](int o0, int r) { return gr_row_of<R, GLU>(o0, r, out); });
    return true;
}

template <int F8, bool GLU>
static __global__ void __launch_bounds__((GV_WARPS + 1) * 32, 4)   /* up to 4 blocks an SM: <= 56 registers */
gemv_ring_kernel(void *y, int y_f32, const void *x, const float *xs, const void *w, const float *ws, const sits_bf16_t *bias,
                 int in, int out, int stages, int strided)
{
    constexpr int R = 8, EW = F8 ? 4 : 2, STEP = GV_WARPS * 32, RH = GLU ? R / 2 : R;
    extern __shared__ __align__(128) unsigned char gr_sm[];
    __shared__ float red[2][GV_WARPS][R];   /* tile parity: a tile's partials are not overwritten while read */
    uint64_t *full = reinterpret_cast<uint64_t *>(gr_sm), *empty = full + stages;
    unsigned char *ring = gr_sm + 128;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int units = in / (4 * EW), steps = (units + STEP - 1) / STEP;
    const size_t rowb = (size_t)units * 16;
    gr_tiles_t tl;   /* tiles of R rows as gemv_kernel's blocks */
    if (gr_start<R, GR_ROWB, GR_ROWB, GLU>(ring, full, empty, stages, steps, rowb, w, out, strided, &tl)) return;   /* the producer */
    sits_k_pdl_wait();   /* x comes from the previous kernel */
    const uint4 *xr = static_cast<const uint4 *>(x);
    unsigned i = 0;
    for (int t = tl.first, p = 0; t < tl.end; t += tl.step, p ^= 1) {
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
        if (t + tl.step >= tl.end) sits_k_pdl_trigger();   /* [perf: gemv trigger] the block's last tile: (above) */
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
                if (F8) sum = sum * xs[0] * ws[gr_row_of<R, GLU>(o0, r, out)];
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

/* [perf: mma gemv] 1-16 tokens on tensor cores, weights through the same kind of ring: gemv_mma_kernel<F8, NB, GLU>.
 * A tile is 16 weight rows (GLU: 8 gate rows o0 .. o0 + 7 and the up rows inter + o0 .. + 7, so a lane holds a gate and
 * its up sum); the producer (gr_produce) copies each step's 2 KB of each of the tile's rows into a stage (row pitch
 * 2 KB + 64 bytes: rows g and g + 8, read by the same quarter-warp, on other banks). Consumer warp w takes 64-byte
 * chunks c = w, w + 8, w + 16, w + 24 of the stage (k order fixed: stage, then chunk); lane (g = lane / 4, tq = lane %
 * 4) loads 16 bytes at chunk offset 16 tq of rows g and g + 8 (A) and of token rows g + 8 nb (B, nb < NB: x^T in 8-token
 * blocks; tokens >= n are zeros). A 16-byte piece feeds two MMAs (mma.sync m16n8k32 E4M3 -> fp32, or m16n8k16 bf16 ->
 * fp32): words .x, .y are the first MMA's (k 4 tq .. + 3 | 2 tq .. + 1) and (16 + 4 tq .. | 8 + 2 tq ..) slots, .z, .w
 * the second's -- every lane maps a piece's words to the same k slots in A and in B, so each MMA sums 32 (16) inputs
 * once; where the row ends inside a chunk the lanes past it give zeros to A and B. C: c[0], c[1] = (row g, tokens 2 tq,
 * 2 tq + 1 of the block), c[2], c[3] = (row g + 8, the same). E4M3: a chunk's two MMAs start from zero and are added to
 * the fp32 sums (the tensor cores' own FP8 accumulation is not relied on past 64 products). Then the warps' sums in
 * order through shared memory, the scales (E4M3: * xs[t] * ws[o]), bias, bf16 / fp32 y [n, out] (GLU: act [n, inter] =
 * bf16(silu(bf16 gate) * bf16 up), the bits of the plain form then silu_mul).
 * A token's column of an MMA does not see the other columns and nothing else depends on n: a token's outputs are the
 * same bits at any n <= 16 -- decode (n = 1) and verification (n = k + 1) steps run the same linears.
 * Dynamic shared memory: 128 bytes of barriers + stages x GM_STAGE + the warps' sums (2 x 8 x NB x 4 x 32 floats). */
#define GM_ROWB 2048                  /* bytes of a row a stage holds */
#define GM_PITCH (GM_ROWB + 64)       /* a stage's row pitch in shared memory */
#define GM_STAGE (16 * GM_PITCH)      /* a stage: the 16 rows of a tile */
#define GM_MAX_STAGES 6

template <int F8>
static __device__ __forceinline__ void gm_mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1)
{
    if constexpr (F8 != 0)
        asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                     "{%0, %1, %2, %3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                     "{%0, %1, %2, %3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <int F8, int NB, bool GLU>
static __global__ void __launch_bounds__((GV_WARPS + 1) * 32, 2)   /* 2 blocks an SM */
gemv_mma_kernel(void *y, int y_f32, const void *x, const float *xs, const void *w, const float *ws, const sits_bf16_t *bias, int n,
                int in, int out, int stages, int strided, int early)
{
    constexpr int R = 16, RH = GLU ? R / 2 : R, CH = GM_ROWB / 64 / GV_WARPS, ROWB = GM_ROWB, PITCH = GM_PITCH;   /* CH: chunks a warp a stage (4) */
    constexpr int CP = NB == 2 && !F8 ? CH / 2 : CH;   /* chunks a pass: bf16 16 tokens in two (8B b9 / b16 -2.7 / -2.4 %, FP8 not) */
    extern __shared__ __align__(128) unsigned char gm_sm[];
    uint64_t *full = reinterpret_cast<uint64_t *>(gm_sm), *empty = full + stages;
    unsigned char *ring = gm_sm + 128;
    float(*red)[GV_WARPS][NB * 4][32] = reinterpret_cast<float(*)[GV_WARPS][NB * 4][32]>(ring + (size_t)stages * GM_STAGE);   /* [parity][warp][nb*4+q][lane] */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, tq = lane & 3;
    const size_t rowb = (size_t)in * (F8 ? 1 : 2);
    const int steps = (int)((rowb + ROWB - 1) / ROWB);
    gr_tiles_t tl;
    if (gr_start<R, ROWB, PITCH, GLU>(ring, full, empty, stages, steps, rowb, w, out, strided, &tl)) return;   /* the producer */
    sits_k_pdl_wait();   /* x comes from the previous kernel */
    const unsigned char *xb = static_cast<const unsigned char *>(x);
    unsigned i = 0;
    for (int t = tl.first, p = 0; t < tl.end; t += tl.step, p ^= 1) {
        const int o0 = t * RH;
        float acc[NB][4];
#pragma unroll
        for (int b = 0; b < NB; b++)
#pragma unroll
            for (int q = 0; q < 4; q++) acc[b][q] = 0.0f;
        for (int s = 0; s < steps; s++, i++) {
            const unsigned st = i % (unsigned)stages, ph = (i / (unsigned)stages) & 1u;
            const int cb = (int)min((size_t)ROWB, rowb - (size_t)s * ROWB);   /* bytes of each row in this stage */
            const unsigned char *sg = ring + (size_t)st * GM_STAGE;
#pragma unroll
            for (int h = 0; h < CH / CP; h++) {   /* passes of CP chunks */
                uint4 xv[CP][NB], wa[CP], wb[CP];
#pragma unroll
                for (int j = 0; j < CP; j++) {
                    const int off = ((h * CP + j) * GV_WARPS + warp) * 64 + tq * 16;
#pragma unroll
                    for (int b = 0; b < NB; b++) {
                        const int tk = b * 8 + g;
                        xv[j][b] = off < cb && tk < n ? __ldg(reinterpret_cast<const uint4 *>(xb + (size_t)tk * rowb + (size_t)s * ROWB + off))
                                                      : make_uint4(0u, 0u, 0u, 0u);
                    }
                }
                if (h == 0) sits_k_mbar_wait(&full[st], ph);
#pragma unroll
                for (int j = 0; j < CP; j++) {
                    const int off = ((h * CP + j) * GV_WARPS + warp) * 64 + tq * 16;
                    wa[j] = off < cb ? *reinterpret_cast<const uint4 *>(sg + g * PITCH + off) : make_uint4(0u, 0u, 0u, 0u);
                    wb[j] = off < cb ? *reinterpret_cast<const uint4 *>(sg + (g + 8) * PITCH + off) : make_uint4(0u, 0u, 0u, 0u);
                }
                if (early && h == CH / CP - 1) {   /* SITS_GEMV_EARLY_RELEASE=1: the old release, before the MMAs (A/B) */
                    __syncwarp();
                    if (lane == 0) sits_k_mbar_arrive(&empty[st]);
                }
#pragma unroll
                for (int j = 0; j < CP; j++)
#pragma unroll
                    for (int b = 0; b < NB; b++) {
                        if (F8) {   /* a chunk's 64 products from zero, then into the fp32 sums */
                            float d[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
                            gm_mma<F8>(d, wa[j].x, wb[j].x, wa[j].y, wb[j].y, xv[j][b].x, xv[j][b].y);
                            gm_mma<F8>(d, wa[j].z, wb[j].z, wa[j].w, wb[j].w, xv[j][b].z, xv[j][b].w);
#pragma unroll
                            for (int q = 0; q < 4; q++) acc[b][q] += d[q];
                        } else {
                            gm_mma<F8>(acc[b], wa[j].x, wb[j].x, wa[j].y, wb[j].y, xv[j][b].x, xv[j][b].y);
                            gm_mma<F8>(acc[b], wa[j].z, wb[j].z, wa[j].w, wb[j].w, xv[j][b].z, xv[j][b].w);
                        }
                    }
                if (!early && h == CH / CP - 1) {   /* the stage's words are in the MMAs: its reads are done (gm_release) */
                    __syncwarp();
                    if (lane == 0) sits_k_mbar_arrive(&empty[st]);
                }
            }
        }
        if (t + tl.step >= tl.end) sits_k_pdl_trigger();   /* [perf: gemv trigger] the block's last tile: (above) */
#pragma unroll
        for (int b = 0; b < NB; b++)
#pragma unroll
            for (int q = 0; q < 4; q++) red[p][warp][b * 4 + q][lane] = acc[b][q];
        asm volatile("bar.sync 1, %0;" ::"n"(GV_WARPS * 32) : "memory");   /* the consumer warps only */
        /* GLU: entries (nb, q < 2, lane) pair gate q with up q + 2; else every (nb, q, lane) */
        constexpr int ENTRIES = NB * (GLU ? 2 : 4) * 32;
        for (int e = threadIdx.x; e < ENTRIES; e += GV_WARPS * 32) {
            const int L = e & 31, q = (e >> 5) % (GLU ? 2 : 4), b = (e >> 5) / (GLU ? 2 : 4);
            const int tk = b * 8 + (L & 3) * 2 + (q & 1), r = (L >> 2) + (q >= 2 ? 8 : 0);
            if (tk >= n) continue;
            float sum = 0.0f;
#pragma unroll
            for (int j = 0; j < GV_WARPS; j++) sum += red[p][j][b * 4 + q][L];
            if (GLU) {
                float su = 0.0f;
#pragma unroll
                for (int j = 0; j < GV_WARPS; j++) su += red[p][j][b * 4 + q + 2][L];
                const int o = o0 + r;   /* r < 8: the gate row's feature */
                if (o < out / 2) {
                    if (F8) {
                        sum = sum * xs[tk] * ws[gr_row_of<R, GLU>(o0, r, out)];
                        su = su * xs[tk] * ws[gr_row_of<R, GLU>(o0, r + 8, out)];
                    }
                    static_cast<sits_bf16_t *>(y)[(size_t)tk * (out / 2) + o] =
                        sits_k_f2bf(sits_k_silu_mul1(sits_k_round_bf(sum), sits_k_round_bf(su)));
                }
            } else {
                const int o = o0 + r;
                if (o < out) {
                    if (F8) sum = sum * xs[tk] * ws[o];
                    if (bias) sum += sits_k_bf2f(bias[o]);
                    const size_t at = (size_t)tk * out + o;
                    if (y_f32) static_cast<float *>(y)[at] = sum;
                    else static_cast<sits_bf16_t *>(y)[at] = sits_k_f2bf(sum);
                }
            }
        }
    }
}

/* [perf: ring gemv] SITS_GEMV_TILES=stride hands the ring kernels' tiles out in strides instead of ranges (gr_tiles_t;
 * default ranges until measured on a GPU: bench/RESULTS.md) */
static int gr_strided(void)
{
    const char *e = getenv("SITS_GEMV_TILES");
    return e && !strcmp(e, "stride");
}

/* [perf: mma gemv] SITS_GEMV_MMA (default GM_DEFAULT): 1 runs 2-16 tokens here and one token on gemv_ring_kernel (faster
 * there on the H200: bench/RESULTS.md); 2 runs one token here too (decode and verification steps then see the same
 * bits); 0 sends 2-8 tokens to gemv_kernel and leaves 9-16 to the caller's GEMM (A/B). SITS_GEMV_MMA_STAGES (1-6,
 * default 3) and SITS_GEMV_MMA_BPS (blocks an SM, 1-2, default 2) shape the ring (stages clamped so the blocks fit an
 * SM's 228 KB); defaults from the H200 sweep in RESULTS.md. */
#define GM_DEFAULT 1
/* gm_release: a consumer warp gives a stage back (its empty barrier) only once the MMAs have taken the words it read
 * from it. Given back right after its shared-memory loads (as until 2026-12-05), a 16-token E4M3 linear once came back
 * with the first 8 rows of one tile wrong for every token (test_fp8_parity, H200): those rows are a stage's first bulk
 * copies, as if the producer's next copies into the stage had landed before the loads were performed -- nothing
 * orders generic-proxy loads still in flight at the arrive before the async-proxy writes the producer issues once it
 * sees the barrier. Using the values first makes the loads complete. test_fp8_parity's run_repeat_case (400 calls on
 * the same inputs): with the old order 1 call of 399 differed in each of 3 runs (bf16 weights, H100), none with this
 * one; whole 8B steps at batch 8 / 16 unchanged (-0.9 .. +0.1 %). SITS_GEMV_EARLY_RELEASE=1: the old order (A/B). */
static int gm_early_release(void)
{
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("SITS_GEMV_EARLY_RELEASE");
        v = e && atoi(e) != 0;
    }
    return v;
}
#define GM_SM_SMEM (228 * 1024 - 2048)   /* an sm_90 SM's shared memory less the blocks' reserved 1 KB each */
template <int F8, int NB, bool GLU>
static cudaError_t gm_launch_nb(void *y, int y_f32, const void *x, const float *xs, const void *w, const float *ws,
                                const sits_bf16_t *bias, int n, int in, int out, cudaStream_t stream)
{
    const char *es = getenv("SITS_GEMV_MMA_STAGES"), *eb = getenv("SITS_GEMV_MMA_BPS");
    const int bps = eb ? min(max(atoi(eb), 1), 2) : 2;
    const size_t red = (size_t)2 * GV_WARPS * NB * 4 * 32 * sizeof(float);
    const int fit = (int)min((size_t)GM_MAX_STAGES, (GM_SM_SMEM / bps - 128 - red) / GM_STAGE);
    const int stages = max(min(es ? max(atoi(es), 1) : 3, fit), 1);
    const size_t smem = 128 + (size_t)stages * GM_STAGE + red;
    static int smem_set[SITS_K_DEV_CACHE];   /* as gr_launch */
    int dev = 0, n_sms = 0;
    cudaError_t c;
    if ((c = sits_k_sm_count(&dev, &n_sms)) != cudaSuccess || (c = sits_k_smem_limit(gemv_mma_kernel<F8, NB, GLU>, dev, (int)smem, smem_set)) != cudaSuccess)
        return c;
    const int tiles = GLU ? (out / 2 + 7) / 8 : (out + 15) / 16;
    const unsigned grid = (unsigned)min(tiles, n_sms * bps);
    return sits_k_launch_pdl(gemv_mma_kernel<F8, NB, GLU>, grid, (GV_WARPS + 1) * 32, smem, stream, true, y, y_f32, x, xs, w, ws, bias,
                             n, in, out, stages, gr_strided(), gm_early_release());
}

extern "C" int sits_k_gemv_mma_mode(void)
{
    const char *e = getenv("SITS_GEMV_MMA");
    return e ? atoi(e) : GM_DEFAULT;
}

template <bool GLU>
static cudaError_t gm_launch(void *y, int y_f32, const void *x, const float *xs, const void *w, const float *ws, const sits_bf16_t *bias,
                             int fp8, int n, int in, int out, cudaStream_t stream, bool *taken)
{
    *taken = false;
    const int mode = sits_k_gemv_mma_mode();
    if (mode <= 0 || n < (mode >= 2 ? 1 : 2) || n > 16) return cudaSuccess;
    *taken = true;
    if (fp8) return n <= 8 ? gm_launch_nb<1, 1, GLU>(y, y_f32, x, xs, w, ws, bias, n, in, out, stream)
                           : gm_launch_nb<1, 2, GLU>(y, y_f32, x, xs, w, ws, bias, n, in, out, stream);
    return n <= 8 ? gm_launch_nb<0, 1, GLU>(y, y_f32, x, xs, w, ws, bias, n, in, out, stream)
                  : gm_launch_nb<0, 2, GLU>(y, y_f32, x, xs, w, ws, bias, n, in, out, stream);
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
    /* the current device's SM count and shared-memory limit (a process may drive more than one device), asked of the
     * driver once a device and kernel: [perf: launch cost] */
    static int smem_set[SITS_K_DEV_CACHE];
    int dev = 0, n_sms = 0;
    cudaError_t c;
    if ((c = sits_k_sm_count(&dev, &n_sms)) != cudaSuccess || (c = sits_k_smem_limit(gemv_ring_kernel<F8, GLU>, dev, (int)smem, smem_set)) != cudaSuccess)
        return c;
    const int tiles = GLU ? (out / 2 + 3) / 4 : (out + 7) / 8;
    const unsigned grid = (unsigned)min(tiles, n_sms * bps);
    *taken = true;
    return sits_k_launch_pdl(gemv_ring_kernel<F8, GLU>, grid, (GV_WARPS + 1) * 32, smem, stream, true, y, y_f32, x, xs, w, ws, bias, in, out,
                             stages, gr_strided());
}

extern "C" sits_status_t sits_k_gemv(void *y, int y_f32, const void *x, const float *xs, const void *w, const float *ws,
                                     const sits_bf16_t *bias, int fp8, int n, int in, int out, cudaStream_t stream)
{
    if (n < 0 || in <= 0 || out <= 0 || (fp8 && (!xs || !ws))) return SITS_ERR_INVALID;
    if (n > SITS_K_GEMV_MAX_N || in % (fp8 ? 16 : 8) || !sits_k_aligned16(x) || !sits_k_aligned16(w)) return SITS_ERR_UNSUPPORTED;
    if (n == 0) return SITS_OK;
    {   /* [perf: mma gemv] */
        bool taken = false;
        const cudaError_t me = gm_launch<false>(y, y_f32, x, xs, w, ws, bias, fp8, n, in, out, stream, &taken);
        if (taken || me != cudaSuccess) return me == cudaSuccess ? SITS_K_LAUNCH_STATUS() : SITS_ERR_CUDA;
    }
    if (n > GV_MAX_N) return SITS_ERR_UNSUPPORTED;   /* the caller's GEMM */
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
    if (n < 1 || n > SITS_K_GEMV_MAX_N || in % (fp8 ? 16 : 8) || !sits_k_aligned16(x) || !sits_k_aligned16(w)) return SITS_ERR_UNSUPPORTED;
    bool taken = false;
    {   /* [perf: mma gemv] 1-16 tokens */
        const cudaError_t me = gm_launch<true>(act, 0, x, xs, w, ws, NULL, fp8, n, in, 2 * inter, stream, &taken);
        if (taken || me != cudaSuccess) return me == cudaSuccess ? SITS_K_LAUNCH_STATUS() : SITS_ERR_CUDA;
    }
    if (n != 1) return SITS_ERR_UNSUPPORTED;
    /* [perf: ring gemv] */
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

