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
 * [perf: swiglu gemv] sits_k_gemv_swiglu: the one-token gate/up linear with SwiGLU in the epilogue (GLU below). */
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

extern "C" sits_status_t sits_k_gemv(void *y, int y_f32, const void *x, const float *xs, const void *w, const float *ws,
                                     const sits_bf16_t *bias, int fp8, int n, int in, int out, cudaStream_t stream)
{
    if (n < 0 || in <= 0 || out <= 0 || (fp8 && (!xs || !ws))) return SITS_ERR_INVALID;
    if (n > SITS_K_GEMV_MAX_N || in % (fp8 ? 16 : 8) || !sits_k_aligned16(x) || !sits_k_aligned16(w)) return SITS_ERR_UNSUPPORTED;
    if (n == 0) return SITS_OK;
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
    const unsigned grid = (unsigned)((inter + 3) / 4);   /* programmatic dependent launch, as sits_k_gemv */
    const cudaError_t e =
        fp8 ? sits_k_launch_pdl(gemv_kernel<1, 1, 8, true>, grid, GV_WARPS * 32, 0, stream, true, (void *)act, 0, x, xs, w, ws,
                                (const sits_bf16_t *)NULL, 1, in, 2 * inter)
            : sits_k_launch_pdl(gemv_kernel<0, 1, 8, true>, grid, GV_WARPS * 32, 0, stream, true, (void *)act, 0, x, xs, w, ws,
                                (const sits_bf16_t *)NULL, 1, in, 2 * inter);
    return e == cudaSuccess ? SITS_K_LAUNCH_STATUS() : SITS_ERR_CUDA;
}
