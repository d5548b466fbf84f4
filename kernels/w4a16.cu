/* w4a16.cu -- [int4] the W4A16 linear: y [n, out] bf16 = x [n, in] bf16 . w^T (+ bias [out] bf16),
 * w the packed INT4 weights of backend.h (sits_w4_t):
 *   q      uint8 [out, in / 2]   column 2j in the low nibble of byte j, 2j + 1 in the high one
 *   scale  fp32  [out, n_groups]
 *   zero   fp32  [out, n_groups]
 *   gidx   int32 [in] or NULL    group of column k (act-order); NULL: k / group_size
 *   w[o, k] = (q[o, k] - zero[o, g]) * scale[o, g] in fp32, dequantised in registers, fp32 accumulation.
 * One warp per output row and per tile of up to TOK tokens: each lane walks the row 8 inputs at a
 * time (one 32-bit word of nibbles, one 16-byte load of x per token), so a decode step (n <= TOK)
 * reads every weight byte once; larger n re-reads the row once per tile (prefill is correct, not
 * fast: a tensor-core tile with dequantisation into shared memory, as Marlin does, is the next step).
 * The word path needs in % 8 == 0 and 16-byte aligned x rows; otherwise a byte-wise path (any even in). */
#include "kernels/common.cuh"

#define W4_TOK 8       /* tokens per warp tile: accumulators held in registers */
#define W4_WARPS 4     /* warps (output rows) per block */

/* the weight of input k of a row (scales srow, zeros zrow) whose nibble is u */
static __device__ __forceinline__ float w4_deq(const float *srow, const float *zrow, const int32_t *gidx, int group_size, int k,
                                               uint32_t u)
{
    int g = gidx ? gidx[k] : k / group_size;
    return ((float)u - zrow[g]) * srow[g];
}

template <bool WORD>
static __global__ void __launch_bounds__(32 * W4_WARPS)
w4a16_kernel(sits_bf16_t *y, const sits_bf16_t *x, const uint8_t *q, const float *scale, const float *zero, const int32_t *gidx,
             const sits_bf16_t *bias, int n, int in, int out, int group_size, int n_groups)
{
    int lane = threadIdx.x & 31, o = blockIdx.x * W4_WARPS + (threadIdx.x >> 5);
    int t0 = blockIdx.y * W4_TOK;
    if (o >= out) return;
    int nt = n - t0 < W4_TOK ? n - t0 : W4_TOK;
    const uint8_t *qrow = q + (size_t)o * (size_t)(in / 2);
    const float *srow = scale + (size_t)o * n_groups, *zrow = zero + (size_t)o * n_groups;
    const sits_bf16_t *xt = x + (size_t)t0 * in;
    float acc[W4_TOK];
#pragma unroll
    for (int t = 0; t < W4_TOK; t++) acc[t] = 0.0f;
    if (WORD) {
        const uint32_t *qw = reinterpret_cast<const uint32_t *>(qrow);
        /* groups of whole words: one scale / zero per word unless act-order or a group size not a multiple of 8 */
        bool one_group = !gidx && group_size % 8 == 0;
        for (int j = lane; j < in / 8; j += 32) {
            uint32_t word = qw[j];
            int k0 = 8 * j;
            float w[8];
            if (one_group) {
                float s = srow[k0 / group_size], z = zrow[k0 / group_size];
#pragma unroll
                for (int i = 0; i < 8; i++) w[i] = ((float)((word >> (4 * i)) & 15u) - z) * s;
            } else {
#pragma unroll
                for (int i = 0; i < 8; i++) w[i] = w4_deq(srow, zrow, gidx, group_size, k0 + i, (word >> (4 * i)) & 15u);
            }
#pragma unroll
            for (int t = 0; t < W4_TOK; t++) {
                if (t < nt) {
                    float xv[8];
                    sits_k_load<8>(xt + (size_t)t * in + k0, xv);
#pragma unroll
                    for (int i = 0; i < 8; i++) acc[t] = fmaf(xv[i], w[i], acc[t]);
                }
            }
        }
    } else {
        for (int j = lane; j < in / 2; j += 32) {
            uint32_t b = qrow[j];
            int k0 = 2 * j;
            float w0 = w4_deq(srow, zrow, gidx, group_size, k0, b & 15u);
            float w1 = w4_deq(srow, zrow, gidx, group_size, k0 + 1, b >> 4);
#pragma unroll
            for (int t = 0; t < W4_TOK; t++)
                if (t < nt)
                    acc[t] = fmaf(sits_k_bf2f(xt[(size_t)t * in + k0 + 1]), w1, fmaf(sits_k_bf2f(xt[(size_t)t * in + k0]), w0, acc[t]));
        }
    }
    float b = bias ? sits_k_bf2f(bias[o]) : 0.0f;
#pragma unroll
    for (int t = 0; t < W4_TOK; t++) {
        float v = sits_k_warp_sum(acc[t]);
        if (lane == 0 && t < nt) y[(size_t)(t0 + t) * out + o] = sits_k_f2bf(v + b);
    }
}

extern "C" sits_status_t sits_k_matmul_w4(sits_bf16_t *y, const sits_bf16_t *x, const uint8_t *q, const float *scale,
                                          const float *zero, const int32_t *gidx, const sits_bf16_t *bias, int n, int in, int out,
                                          int group_size, int n_groups, cudaStream_t stream)
{
    if (n < 0 || in <= 0 || in % 2 || out <= 0 || n_groups < 1 || (!gidx && (group_size < 1 || in % group_size)))
        return SITS_ERR_INVALID;
    if (n == 0) return SITS_OK;
    bool word = in % 8 == 0 && sits_k_aligned16(x) && ((uintptr_t)q & 3u) == 0;
    dim3 grid((unsigned)((out + W4_WARPS - 1) / W4_WARPS), (unsigned)((n + W4_TOK - 1) / W4_TOK));
    if (grid.y > 65535u) return SITS_ERR_INVALID;
    if (word)
        w4a16_kernel<true><<<grid, 32 * W4_WARPS, 0, stream>>>(y, x, q, scale, zero, gidx, bias, n, in, out, group_size, n_groups);
    else
        w4a16_kernel<false><<<grid, 32 * W4_WARPS, 0, stream>>>(y, x, q, scale, zero, gidx, bias, n, in, out, group_size, n_groups);
    return SITS_K_LAUNCH_STATUS();
}
