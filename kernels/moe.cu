/* moe.cu -- [moe] Mixture-of-Experts router top-k and weighted combine (contracts: backend.h
 * moe_topk / moe_combine; cpu twins sits_backend_cpu_moe_topk / _combine).
 *   topk:    logits [n, E] bf16 -> ids [n, k] int32, wts [n, k] fp32. One warp per token: lane l holds
 *            experts l, l + 32, ... (E <= 1024: a 32-bit mask of the ones taken); k rounds of a warp
 *            argmax (value desc, index asc). The softmax sum is a warp tree (not index order: the
 *            weights match the cpu twin to fp32 rounding).
 *   combine: out [n, dim] bf16 = sum_j wts[t*kk + j] * y[pos[t*kk + j]] (fp32, j order, pos -1 skipped).
 *            One block per token, threads over the columns: no atomics, deterministic. */
#include "kernels/common.cuh"

#include <math.h>

static __device__ __forceinline__ void warp_argmax(float &v, int &e)
{
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, v, o);
        int oe = __shfl_xor_sync(0xffffffffu, e, o);
        if (ov > v || (ov == v && oe < e)) { v = ov; e = oe; }
    }
}

static __global__ void moe_topk_kernel(int32_t *ids, float *wts, const sits_bf16_t *logits, int n, int E, int k, int norm)
{
    int t = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (t >= n) return;   /* whole warps leave together */
    const sits_bf16_t *l = logits + (size_t)t * E;
    float mx = -INFINITY, sum = 0.0f;
    for (int e = lane; e < E; e += 32) mx = fmaxf(mx, sits_k_bf2f(l[e]));
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    for (int e = lane; e < E; e += 32) sum += expf(sits_k_bf2f(l[e]) - mx);
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    uint32_t taken = 0;
    float wsum = 0.0f;
    for (int j = 0; j < k; j++) {
        float bv = -INFINITY;
        int be = 0x7fffffff;
        for (int i = 0, e = lane; e < E; i++, e += 32) {
            float v = sits_k_bf2f(l[e]);
            if (!((taken >> i) & 1u) && (v > bv || (v == bv && e < be))) { bv = v; be = e; }
        }
        warp_argmax(bv, be);
        if ((be & 31) == lane) taken |= 1u << (be >> 5);
        if (lane == 0) {
            float w = expf(bv - mx) / sum;
            ids[(size_t)t * k + j] = be;
            wts[(size_t)t * k + j] = w;
            wsum += w;
        }
    }
    if (norm && lane == 0)
        for (int j = 0; j < k; j++) wts[(size_t)t * k + j] /= wsum;
}

extern "C" sits_status_t sits_k_moe_topk(int32_t *ids, float *wts, const sits_bf16_t *logits, int n, int E, int k, int norm,
                                         cudaStream_t stream)
{
    if (n < 0 || E < 1 || E > 1024 || k < 1 || k > E || k > 32) return SITS_ERR_INVALID;
    if (n == 0) return SITS_OK;
    const int warps = 4;
    moe_topk_kernel<<<(n + warps - 1) / warps, 32 * warps, 0, stream>>>(ids, wts, logits, n, E, k, norm);
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
