/* w4a16.cu -- [int4] the W4A16 linear: y [n, out] bf16 = x [n, in] bf16 . w^T (+ bias [out] bf16),
 * w the packed INT4 weights of backend.h (sits_w4_t):
 *   q      uint8 [out, in / 2]   column 2j in the low nibble of byte j, 2j + 1 in the high one
 *   scale  fp32  [out, n_groups]
 *   zero   fp32  [out, n_groups]
 *   gidx   int32 [in] or NULL    group of column k (act-order); NULL: k / group_size
 *   w[o, k] = (q[o, k] - zero[o, g]) * scale[o, g] in fp32, dequantised in registers, fp32 accumulation.
 * [int4 tiles] The cuda backend holds every linear without g_idx, in % 128 == 0 and groups of a multiple of 32 in the
 * tiled layout (below: 16-row x 128-input units of 1 KB, made at load by sits_k_w4_tile), so the loads of the GEMVs
 * are whole 512-byte runs; the others (act-order, odd input counts) stay in rows.
 * Kernels, tiled:
 *   - n <= W4_PG_MAX_N (0: off by default; SITS_W4_PG_MAX_N), groups of 128k, in >= 1024, x in shared memory (n (in + 32)
 *     bf16 within W4_PG_SMEM_MAX with the rest): the persistent GEMV w4a16_pgemv_kernel (below);
 *   - otherwise n <= W4_TC_MAX_N (64): the tensor-core GEMV w4a16_tc_kernel (16 or 32 output rows a block -- 256, a
 *     warp's own 32, at 17-32 tokens on a large grid -- x^T as the MMA's 8-token side; below), up to 32 tokens a launch:
 *     33-64 tokens are two launches;
 *   - more tokens: the tensor-core tiles w4a16_mma_kernel<true> (below), or the backend's dequantise-then-GEMM
 *     (sits_k_w4_dequant + cuBLASLt) where it has the scratch (cuda.c).
 * Kernels, rows:
 *   - n <= W4_GEMV_MAX_N, no g_idx, group_size and in multiples of 32, 16-byte aligned rows: the
 *     GEMV w4a16_gemv_kernel<NT>: one warp per output row and per tile of NT (1, 2, 4, 8) tokens; a lane
 *     takes 32 inputs at a time with one 16-byte load of nibbles (streamed past L1), several loads in
 *     flight; the integers q - zero come from the nibble by the 2^23 trick (or-ing it into the mantissa of
 *     8388608.0f and subtracting 8388608 + zero: exact), the group's scale multiplies the 32-input partial
 *     sum once. x rows are read through L1 (every warp of a block reads the same ones).
 *   - the backend's dequantise-then-GEMM for larger batches where it has the scratch; the kernels below where it
 *     has not.
 *   - n < W4_MMA_MIN_N otherwise: one warp per output row and per tile of up to W4_TOK tokens; each lane
 *     walks the row 8 inputs at a time (one 32-bit word of nibbles, one 16-byte load of x per token), so
 *     a step reads every weight byte once. The word path needs in % 8 == 0 and 16-byte aligned x rows;
 *     otherwise a byte-wise path (any even in). Act-order g_idx: looked up per input.
 *   - n >= W4_MMA_MIN_N, no g_idx, group_size and in multiples of 32 (prefill, large batches): tensor
 *     cores (mma.sync m16n8k16 bf16 -> fp32). A block computes 64 tokens x 64 outputs; per 32 inputs it
 *     stages x [64, 32] and the integers (q - zero) [64 outputs, 32] (exact in bf16: |q - zero| <= 16)
 *     in shared memory, so each MMA product x * (q - zero) is exact; every group's partial sums are
 *     multiplied by the group's scale in fp32 when the group ends (the MMA accumulator layout names
 *     each element's output). The result differs from the cpu twin only in the fp32 summation order.
 *     (Marlin's layout -- weights pre-shuffled at load, cp.async pipelines, ldmatrix -- is the next step.) */
#include <stdlib.h>

#include "kernels/common.cuh"

#define W4_TOK 8       /* tokens per warp tile: accumulators held in registers */
#define W4_WARPS 4     /* warps (output rows) per block */

/* [int4 tiles] The tiled layout (backend.h sits_w4_t.tiled; made at load by sits_k_w4_tile): rows in tiles of 16
 * (out rounded up, the pad rows' nibbles, scales and zeros 0), inputs in k-blocks of 128 (in % 128 == 0):
 *   q      unit (tile t, k-block kb) = 1 KB at w4t_unit(t, kb): row 16 t + r's 64 bytes of the k-block at 64 r;
 *          [int4 interleave] in them the 32-bit word at byte 16 tq + 4 s (tq, s 0..3) holds the 8 inputs
 *          c = 32 s + 8 tq + j (c within the k-block, j 0..7), input j at bits 4 w4t_pos(j): the even j in nibbles
 *          0-3, the odd in 4-7 -- so (w & 0x000f000f) is the pair (j0, j1), w >> 4 (j2, j3), w >> 8 (j4, j5), w >> 12
 *          (j6, j7): each bf16 pair in the order of x's own pairs (MMA B fragments straight from x, no byte permutes),
 *          and a lane's 16-byte load at 16 tq holds the words of 4 steps whose inputs 32 s + 8 tq .. + 7 are, over the
 *          4 lanes tq, 32 consecutive ones (x's loads of a step: 64 contiguous bytes a token)
 *   scale  fp32 [tiles][n_groups][16]: (row 16 t + r, group gi) at w4t_sz(t, gi) + r
 *   zero   uint8, the same index (the zero points are integers 0..16: backend.h), in the first quarter of the fp32
 *          buffer the row layout allocated
 * so a warp's 16-byte loads of a unit are 512 contiguous bytes, a tile's units follow one another, and the 16 rows'
 * scales of a group are 64 contiguous bytes, their zeros 16 (a unit of 128 inputs: 1024 + 80 bytes, not 1152). */
static __device__ __forceinline__ size_t w4t_unit(int t, int kb, int in)
{
    return ((size_t)t * (size_t)(in / 128) + (size_t)kb) * 1024;
}
static __device__ __forceinline__ size_t w4t_sz(int t, int gi, int n_groups)
{
    return ((size_t)t * (size_t)n_groups + (size_t)gi) * 16;
}
/* [int4 interleave] the nibble of input j (0..7) of a tiled word */
static __host__ __device__ __forceinline__ int w4t_pos(int j)
{
    return (j >> 1) + 4 * (j & 1);
}
/* byte of row o's 32-bit word of inputs k .. k + 7 (k % 8 == 0); input k + j at bits w4_shift<TL>(j) of it; the
 * (row, group) scale / zero index: in either layout */
template <bool TL>
static __device__ __forceinline__ size_t w4_qoff(int o, int k, int in)
{
    return TL ? w4t_unit(o >> 4, k >> 7, in) + (size_t)((o & 15) * 64 + 16 * ((k >> 3) & 3) + 4 * ((k & 127) >> 5))
              : (size_t)o * (size_t)(in / 2) + (size_t)(k >> 1);
}
template <bool TL>
static __device__ __forceinline__ int w4_shift(int j)
{
    return 4 * (TL ? w4t_pos(j) : j);
}
template <bool TL>
static __device__ __forceinline__ size_t w4_szoff(int o, int gi, int n_groups)
{
    return TL ? w4t_sz(o >> 4, gi, n_groups) + (size_t)(o & 15) : (size_t)o * (size_t)n_groups + (size_t)gi;
}
/* the zero point at index i of w4_szoff: tiled, a byte */
template <bool TL>
static __device__ __forceinline__ float w4_zero(const float *zero, size_t i)
{
    return TL ? (float)reinterpret_cast<const uint8_t *>(zero)[i] : zero[i];
}

/* row layout (q_src [out, in / 2], s_src / z_src [out, n_groups]) -> tiled (q, scale, zero): a thread a 16-byte piece
 * of a unit (its 4 words from the row's words at 16 s + 4 tq, nibbles interleaved), then a scale and a zero */
static __global__ void w4_tile_kernel(uint8_t *q, float *scale, float *zero, const uint8_t *q_src, const float *s_src,
                                      const float *z_src, int in, int out, int n_groups)
{
    const int tiles = (out + 15) / 16, nkb = in / 128;
    const size_t pieces = (size_t)tiles * (size_t)nkb * 64, sz = (size_t)tiles * 16 * (size_t)n_groups;
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < pieces) {   /* piece i: unit i / 64, its row (i / 4) % 16, 16 bytes tq = i % 4 */
        const size_t unit = i / 64;
        const int t = (int)(unit / (size_t)nkb), kb = (int)(unit % (size_t)nkb), r = (int)(i / 4) % 16, o = 16 * t + r;
        const int tq = (int)(i % 4);
        uint32_t w[4] = { 0u, 0u, 0u, 0u };   /* word s: inputs 32 s + 8 tq .. + 7 of the k-block */
        if (o < out)
#pragma unroll
            for (int s = 0; s < 4; s++) {
                const uint32_t v = *reinterpret_cast<const uint32_t *>(q_src + (size_t)o * (size_t)(in / 2) + (size_t)kb * 64 + 16 * s + 4 * tq);
#pragma unroll
                for (int j = 0; j < 8; j++) w[s] |= (v >> (4 * j) & 15u) << (4 * w4t_pos(j));
            }
        *reinterpret_cast<uint4 *>(q + 16 * i) = make_uint4(w[0], w[1], w[2], w[3]);
    }
    if (i < sz) {   /* index i: tile i / (16 n_groups), group (i / 16) % n_groups, row 16 t + i % 16 */
        const int t = (int)(i / (16 * (size_t)n_groups)), gi = (int)(i / 16 % (size_t)n_groups), o = 16 * t + (int)(i % 16);
        scale[i] = o < out ? s_src[(size_t)o * n_groups + gi] : 0.0f;
        reinterpret_cast<uint8_t *>(zero)[i] = o < out ? (uint8_t)z_src[(size_t)o * n_groups + gi] : 0;   /* integers 0..16 */
    }
}

extern "C" sits_status_t sits_k_w4_tile(uint8_t *q, float *scale, float *zero, const uint8_t *q_src, const float *s_src,
                                        const float *z_src, int in, int out, int n_groups, cudaStream_t stream)
{
    if (in <= 0 || in % 128 || out <= 0 || n_groups < 1 || !sits_k_aligned16(q) || !sits_k_aligned16(q_src)) return SITS_ERR_INVALID;
    const size_t tiles = (size_t)(out + 15) / 16, pieces = tiles * (size_t)(in / 128) * 64, sz = tiles * 16 * (size_t)n_groups;
    const size_t m = pieces > sz ? pieces : sz;
    w4_tile_kernel<<<(unsigned)((m + 255) / 256), 256, 0, stream>>>(q, scale, zero, q_src, s_src, z_src, in, out, n_groups);
    return SITS_K_LAUNCH_STATUS();
}

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

#define W4_GEMV_MAX_N 32  /* tokens up to which the GEMV kernel runs (above: n / 8 passes over the weights) */
#define W4_GEMV_WARPS 8   /* warps (output rows) per block */

/* Block: 8 warps, warp w output row o = 8 blockIdx.x + w, tokens t0 = NT blockIdx.y .. + NT (nt real).
 * Lane l takes the 16-byte chunks c = l, l + 32, ... of the row (inputs 32 c .. 32 c + 32, one group:
 * group_size % 32 == 0); part[t] sums x[t0 + t, k] (q - zero) over the chunk, acc[t] += scale * part[t]. */
template <int NT>
static __global__ void __launch_bounds__(32 * W4_GEMV_WARPS)
w4a16_gemv_kernel(sits_bf16_t *y, const sits_bf16_t *x, const uint8_t *q, const float *scale, const float *zero,
                  const sits_bf16_t *bias, int n, int in, int out, int group_size, int n_groups)
{
    int lane = threadIdx.x & 31, o = blockIdx.x * W4_GEMV_WARPS + (threadIdx.x >> 5);
    int t0 = blockIdx.y * NT;
    if (o >= out) return;
    int nt = n - t0 < NT ? n - t0 : NT;
    const uint4 *qrow = reinterpret_cast<const uint4 *>(q + (size_t)o * (size_t)(in / 2));
    const float *srow = scale + (size_t)o * n_groups, *zrow = zero + (size_t)o * n_groups;
    const sits_bf16_t *xt = x + (size_t)t0 * in;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = 0.0f;
    int chunks = in / 32;
#pragma unroll 4
    for (int c = lane; c < chunks; c += 32) {
        uint4 wv = __ldcs(qrow + c);   /* streamed: every weight byte is read once a step */
        int k0 = 32 * c, g = k0 / group_size;
        float s = srow[g], zb = zrow[g] + 8388608.0f;
        uint32_t words[4] = { wv.x, wv.y, wv.z, wv.w };
        float part[NT];
#pragma unroll
        for (int t = 0; t < NT; t++) part[t] = 0.0f;
#pragma unroll
        for (int wi = 0; wi < 4; wi++) {
            float w[8];
#pragma unroll
            for (int i = 0; i < 8; i++) w[i] = __uint_as_float(0x4b000000u | ((words[wi] >> (4 * i)) & 15u)) - zb;
#pragma unroll
            for (int t = 0; t < NT; t++) {
                if (t < nt) {
                    float xv[8];
                    sits_k_load<8>(xt + (size_t)t * in + k0 + 8 * wi, xv);
#pragma unroll
                    for (int i = 0; i < 8; i++) part[t] = fmaf(xv[i], w[i], part[t]);
                }
            }
        }
#pragma unroll
        for (int t = 0; t < NT; t++) acc[t] = fmaf(s, part[t], acc[t]);
    }
    float b = bias ? sits_k_bf2f(bias[o]) : 0.0f;
#pragma unroll
    for (int t = 0; t < NT; t++) {
        float v = sits_k_warp_sum(acc[t]);
        if (lane == 0 && t < nt) y[(size_t)(t0 + t) * out + o] = sits_k_f2bf(v + b);
    }
}

/* w [out, in] bf16 = (q - zero) * scale (g_idx or k / group_size): one thread per 8 inputs (a 32-bit word
 * of nibbles, one 16-byte store); in % 8 == 0, 16-byte aligned w and 4-byte aligned q. */
template <bool TL>
static __global__ void w4_dequant_kernel(sits_bf16_t *w, const uint8_t *q, const float *scale, const float *zero,
                                         const int32_t *gidx, int in, int out, int group_size, int n_groups)
{
    size_t words = (size_t)out * (size_t)(in / 8), i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= words) return;
    size_t o = i / (size_t)(in / 8);
    int k0 = (int)(i - o * (size_t)(in / 8)) * 8;
    uint32_t word = *reinterpret_cast<const uint32_t *>(q + w4_qoff<TL>((int)o, k0, in));
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const size_t sz = w4_szoff<TL>((int)o, gidx ? gidx[k0 + j] : (k0 + j) / group_size, n_groups);
        v[j] = ((float)((word >> w4_shift<TL>(j)) & 15u) - w4_zero<TL>(zero, sz)) * scale[sz];
    }
    sits_k_store<8>(w + o * (size_t)in + k0, v);
}

extern "C" sits_status_t sits_k_w4_dequant(sits_bf16_t *w, const uint8_t *q, const float *scale, const float *zero,
                                           const int32_t *gidx, int tiled, int in, int out, int group_size, int n_groups,
                                           cudaStream_t stream)
{
    if (in <= 0 || in % 8 || out <= 0 || n_groups < 1 || (!gidx && group_size < 1) || !sits_k_aligned16(w) ||
        ((uintptr_t)q & 3u) || (tiled && in % 128))
        return SITS_ERR_INVALID;
    size_t words = (size_t)out * (size_t)(in / 8);
    const unsigned blocks = (unsigned)((words + 255) / 256);
    if (tiled) w4_dequant_kernel<true><<<blocks, 256, 0, stream>>>(w, q, scale, zero, gidx, in, out, group_size, n_groups);
    else w4_dequant_kernel<false><<<blocks, 256, 0, stream>>>(w, q, scale, zero, gidx, in, out, group_size, n_groups);
    return SITS_K_LAUNCH_STATUS();
}

#define W4_MMA_MIN_N 16   /* tokens from which the tensor-core kernel runs */
#define W4_BM 64          /* tokens per block (16 per warp) */
#define W4_BN 64          /* outputs per block (8 MMA column tiles per warp) */
#define W4_BK 32          /* inputs per shared-memory stage */
#define W4_SK (W4_BK + 8) /* shared row stride in bf16 (80 bytes: the fragment loads of 8 rows fall in distinct banks) */

/* d += a . b (16x16 bf16 by 16x8 bf16, fp32 accumulate); fragment layouts as kernels/attention_mma.cuh */
static __device__ __forceinline__ void w4_mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

#define W4_TC_MAX_N 64 /* tokens up to which the tensor-core GEMV runs */

/* Tensor-core GEMV for 1 .. 32 tokens (NT8 n-tiles of 8: 1, 2, 4): mma m16n8k16 bf16 with the weights as A (MT m-tiles
 * of 16 output rows) and x^T as B (8 tokens). Block = WARPS warps (8; at 1-8 tokens 16 on a small grid, 4 on a
 * mid-size one: [perf: w4 waves]) on RW = WARPS / KW row tiles of 16 MT rows (KW = WARPS: one; [int4 rows] KW = 1: a
 * warp a row tile), tile r of the block at rows o0 = 16 MT (RW blockIdx.x + r) ..; warp w = KW r + kw takes the
 * 128-input k-blocks kw, kw + KW, ... (in % 128 == 0) of all MT m-tiles, which share each x fragment (MT = 2 at 9-32
 * tokens halves the x traffic per weight: at 16 tokens measured 1.1-2x faster than MT = 1, at 1-8 0.85x); a tile's KW
 * warps' C fragments are summed in shared memory, one m-tile at a time.
 * [perf: pdl] Launched as a programmatic dependent: the block's setup overlaps the end of the kernel that writes x.
 * A lane (g = lane / 4, tq = lane % 4) reads rows o0 + g and o0 + g + 8: per k-block one 16-byte load a row, 4 words
 * of 8 nibbles, word s = inputs kin(s) .. + 7 with kin(s) = 32 s + 8 tq ([int4 interleave]; step s is in one group:
 * WIDE, group_size % 128 == 0, the whole k-block; otherwise group_size % 32 == 0). The input order inside an MMA is
 * free (a sum); the tiled layout's nibble order makes (w & 0x000f000f) | 0x43004300 the bf16 pair (128 + n0, 128 + n1)
 * of inputs kin, kin + 1, w >> 4 gives (n2, n3), w >> 8 (n4, n5), w >> 12 (n6, n7); minus 128 + zero (an integer
 * 0..16) that is q - zero, exact in bf16. Step s is two MMAs: A = {(n0, n1) row g, row g + 8, (n2, n3) row g, row
 * g + 8}, B = {x (0, 1), x (2, 3)} of token 8 nt + g, then {(n4, n5) .., (n6, n7) ..} with x (4, 5), (6, 7): one
 * 16-byte load of x per token, step and lane is the four B registers as they are, and the 4 lanes tq of a token read
 * 64 contiguous bytes. The products x (q - zero) are exact and sum in fp32 per group,
 * then times the group's scale in fp32: as w4a16_gemv_kernel, only the summation order differs from the
 * cpu twin. C: part[m][nt] = (row 16 m + g, tokens 8 nt + 2 tq, + 1), (row 16 m + g + 8, same tokens). */
static __device__ __forceinline__ uint32_t w4_pair(uint32_t w, uint32_t z2)
{
    uint32_t v = (w & 0x000f000fu) | 0x43004300u;
    __nv_bfloat162 d = __hsub2(*reinterpret_cast<__nv_bfloat162 *>(&v), *reinterpret_cast<__nv_bfloat162 *>(&z2));
    return *reinterpret_cast<uint32_t *>(&d);
}

/* [int4 interleave] 9-16 tokens, groups of 128k: two blocks an SM (<= 128 registers; without the bound 138 at KW = 8) */
template <int NT8, int MT, bool WIDE, int WARPS, int KW>
static __global__ void __launch_bounds__(32 * WARPS, NT8 == 2 && WARPS == 8 && WIDE ? 2 : 0)
w4a16_tc_kernel(sits_bf16_t *y, const sits_bf16_t *x, const uint8_t *q, const float *scale, const float *zero,
                const sits_bf16_t *bias, int n, int in, int out, int group_size, int n_groups)
{
    constexpr int RW = WARPS / KW;   /* warps along the rows: RW x 16 MT rows a block */
    __shared__ float red[WARPS][NT8][4][32];   /* one m-tile's C fragments of every warp, [warp][n-tile][element][lane] */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, tq = lane & 3;
    /* this warp's row tile and k-worker (RW == 1 spelled out: the compiler does not know warp < WARPS) */
    const int rw = RW == 1 ? 0 : warp / KW, kw = RW == 1 ? warp : warp % KW;
    const int o0 = (blockIdx.x * RW + rw) * 16 * MT;   /* this warp's first row */
    const uint8_t *qa[MT], *qb[MT];   /* [int4 tiles] rows g, g + 8 of m-tile m in k-block 0; k-block kb at + 1024 kb */
    const float *sa[MT], *sb[MT];   /* their scales of group 0; group gi at + 16 gi */
    const uint8_t *za[MT], *zb[MT];   /* their zero points (bytes), the same */
#pragma unroll
    for (int m = 0; m < MT; m++) {   /* tiles past out are read (the pad rows of the last tile: zeros) but never written */
        const int t = min(o0 / 16 + m, (out - 1) / 16);
        qa[m] = q + w4t_unit(t, 0, in) + 64 * g;
        qb[m] = qa[m] + 512;
        sa[m] = scale + w4t_sz(t, 0, n_groups) + g;
        sb[m] = sa[m] + 8;
        za[m] = reinterpret_cast<const uint8_t *>(zero) + w4t_sz(t, 0, n_groups) + g;
        zb[m] = za[m] + 8;
    }
    const int nkb = in / 128;
    sits_k_pdl_wait();   /* [perf: pdl] launched as a programmatic dependent: x comes from the kernel before */
    float acc[MT][NT8][4];
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int nt = 0; nt < NT8; nt++) acc[m][nt][0] = acc[m][nt][1] = acc[m][nt][2] = acc[m][nt][3] = 0.0f;
#pragma unroll 2
    for (int kb = kw; kb < nkb; kb += KW) {
        uint32_t wa[MT][4], wb[MT][4];   /* [int4 interleave] word s: inputs kb 128 + 32 s + 8 tq .. + 7 */
#pragma unroll
        for (int m = 0; m < MT; m++) {
            const uint4 va = __ldcs(reinterpret_cast<const uint4 *>(qa[m] + (size_t)kb * 1024 + 16 * tq));
            const uint4 vb = __ldcs(reinterpret_cast<const uint4 *>(qb[m] + (size_t)kb * 1024 + 16 * tq));
            wa[m][0] = va.x; wa[m][1] = va.y; wa[m][2] = va.z; wa[m][3] = va.w;
            wb[m][0] = vb.x; wb[m][1] = vb.y; wb[m][2] = vb.z; wb[m][3] = vb.w;
        }
        float part[MT][NT8][4];
#pragma unroll
        for (int m = 0; m < MT; m++)
#pragma unroll
            for (int nt = 0; nt < NT8; nt++) part[m][nt][0] = part[m][nt][1] = part[m][nt][2] = part[m][nt][3] = 0.0f;
        int gi = kb * 128 / group_size;
        uint32_t za2[MT], zb2[MT];
#pragma unroll
        for (int s = 0; s < 4; s++) {
            if (!WIDE) gi = (kb * 128 + 32 * s) / group_size;
            if (s == 0 || !WIDE) {
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    __nv_bfloat162 h = __float2bfloat162_rn(128.0f + za[m][16 * gi]);
                    za2[m] = *reinterpret_cast<uint32_t *>(&h);
                    h = __float2bfloat162_rn(128.0f + zb[m][16 * gi]);
                    zb2[m] = *reinterpret_cast<uint32_t *>(&h);
                }
            }
            uint32_t a0[MT][4], a1[MT][4];
#pragma unroll
            for (int m = 0; m < MT; m++) {
                a0[m][0] = w4_pair(wa[m][s], za2[m]);
                a0[m][1] = w4_pair(wb[m][s], zb2[m]);
                a0[m][2] = w4_pair(wa[m][s] >> 4, za2[m]);
                a0[m][3] = w4_pair(wb[m][s] >> 4, zb2[m]);
                a1[m][0] = w4_pair(wa[m][s] >> 8, za2[m]);
                a1[m][1] = w4_pair(wb[m][s] >> 8, zb2[m]);
                a1[m][2] = w4_pair(wa[m][s] >> 12, za2[m]);
                a1[m][3] = w4_pair(wb[m][s] >> 12, zb2[m]);
            }
            const int kin = kb * 128 + 32 * s + 8 * tq;
#pragma unroll
            for (int nt = 0; nt < NT8; nt++) {   /* x pairs (0, 1), (2, 3) | (4, 5), (6, 7): the B fragments as they are */
                const int tok = 8 * nt + g;
                uint4 v = make_uint4(0u, 0u, 0u, 0u);
                if (tok < n) v = __ldg(reinterpret_cast<const uint4 *>(x + (size_t)tok * in + kin));
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    w4_mma(part[m][nt], a0[m], v.x, v.y);
                    w4_mma(part[m][nt], a1[m], v.z, v.w);
                }
            }
            if (!WIDE || s == 3) {   /* the group's partial sums times its scale */
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    const float fa = sa[m][16 * gi], fb = sb[m][16 * gi];
#pragma unroll
                    for (int nt = 0; nt < NT8; nt++) {
                        acc[m][nt][0] = fmaf(fa, part[m][nt][0], acc[m][nt][0]);
                        acc[m][nt][1] = fmaf(fa, part[m][nt][1], acc[m][nt][1]);
                        acc[m][nt][2] = fmaf(fb, part[m][nt][2], acc[m][nt][2]);
                        acc[m][nt][3] = fmaf(fb, part[m][nt][3], acc[m][nt][3]);
                        part[m][nt][0] = part[m][nt][1] = part[m][nt][2] = part[m][nt][3] = 0.0f;
                    }
                }
            }
        }
    }
    sits_k_pdl_trigger();   /* [perf: gemv trigger] the kernel reading y may be placed while the last blocks sum and write */
#pragma unroll
    for (int m = 0; m < MT; m++) {   /* the sums over each row tile's KW warps, one m-tile at a time */
        if (m) __syncthreads();          /* the previous m-tile's sums are read */
#pragma unroll
        for (int nt = 0; nt < NT8; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) red[warp][nt][i][lane] = acc[m][nt][i];
        __syncthreads();
        for (int idx = threadIdx.x; idx < RW * NT8 * 128; idx += 32 * WARPS) {
            const int r = idx / (NT8 * 128), nt = (idx / 128) % NT8, i = (idx / 32) % 4, l = idx % 32;
            const int row = (blockIdx.x * RW + r) * 16 * MT + 16 * m + (l >> 2) + (i >= 2 ? 8 : 0);
            const int tok = 8 * nt + 2 * (l & 3) + (i & 1);
            if (row >= out || tok >= n) continue;
            float v = 0.0f;
#pragma unroll
            for (int w = 0; w < KW; w++) v += red[r * KW + w][nt][i][l];
            y[(size_t)tok * out + row] = sits_k_f2bf(v + (bias ? sits_k_bf2f(bias[row]) : 0.0f));
        }
    }
}

/* [perf: int4 decode] Persistent tensor-core GEMV for 1 .. 8 tokens (w4a16_pgemv_kernel). The MMA layout of
 * w4a16_tc_kernel<1, 1, true> (weights as A: rows 16 t + g and + 8, 16-byte nibble loads, inputs kb 128 + 32 s4 + 8 tq ..
 * + 7 in step s4; x^T as B), but
 *   - the zero point leaves the inner loop: A is the raw pair (128 + q) (one LOP3 a pair, no subtraction), and a
 *     k-block's sum of (128 + q) x is corrected by (128 + zero) times the k-block's sum of x (xsum, fp32, per token,
 *     made once per block: 8-input sums, then 16 of them by shuffles), then times the group's scale:
 *     sum (q - zero) x = sum (128 + q) x - (128 + zero) sum x. The products (128 + q) x stay exact in fp32 (8-bit by
 *     8-bit mantissas); the correction cancels about 8 bits of the k-block's sum (|128 + q| <= 143 against
 *     |q - zero| <= 16), an error of ~2^-16 of its terms, below the bf16 output's 2^-9;
 *   - x [n, in] is staged once per block in shared memory as it is ([int4 interleave]: one LDS.128 gives a step's
 *     two B pairs), rows padded by 64 bytes (a quarter warp's 8 lanes, tokens g, g + 1 by 4 lanes tq of 16 bytes,
 *     on distinct banks);
 *   - a block walks the 16-row tiles blockIdx.x, + gridDim.x, ... (grid: W4_PG_BLOCKS_SM blocks an SM, at most a
 *     block a tile); warp w takes k-blocks w, w + 8, ... of each (c of them a tile, in >= 1024 so c >= 1); its units
 *     (tile, k-block) in that order keep a ring of W4_PG_D units' nibbles, zeros and scales in registers (the zeros
 *     and scales one register a unit), refilled D units ahead across tile boundaries;
 *   - a tile's warp sums meet in shared memory at one barrier (two buffers, alternate tiles: the next write to a
 *     buffer comes after the next tile's barrier, which its readers have passed);
 *   - a programmatic dependent launch: the first D units' weights are requested before waiting for the kernel that
 *     writes x (kernels/gemv.cu).
 * Shared memory: red [2][W4_PG_WARPS][4][32] fp32 | xsum [in / 128][8] fp32 (tokens >= n: 0) | xs [n][in + 32] bf16.
 * Measured on the H200 (RESULTS.md 2026-12-04), one token: 1.1-1.34x w4a16_tc_kernel's speed on the linears with >= 14336
 * outputs or inputs, 0.81-0.99x on the others (whole step: 8B -7 %, 70B on one GPU -14 %); still 1.5-2.6 TB/s, not the
 * ~4 TB/s of kernels/gemv.cu's FP8 GEMV on twice the bytes. Nsight Compute (57344 x 8192): DRAM 54 %, L2 71 %, 0.52
 * instructions issued a scheduler cycle with 3.65 of 16 warps resident (registers) -- latency-bound; D = 6 or 8, 3
 * blocks an SM, and fewer instructions a nibble (this zero-point form) each moved it by < 10 %. */
/* tokens it takes by default (the kernel runs up to 8; SITS_W4_PG_MAX_N): 0 since the tiled layout -- on the H100
 * (RESULTS.md 2026-12-05) the tiled w4a16_tc_kernel was faster at 1-2 tokens on every Llama-3 8B / 70B linear (8B qkv
 * 10.1 us against 12.7, 70B gate_up 101.5 against 117.9). In rows, on the H200, it was this kernel that was faster
 * (RESULTS.md 2026-12-04: 2 tokens; at 4 and 8 the step 2 % and 6 % slower); tiled, on the H200: not yet measured. */
#define W4_PG_MAX_N 0
#define W4_PG_WARPS 8
#define W4_PG_D 4 /* units a warp has in flight (6 and 8 measured no faster) */
#define W4_PG_BLOCKS_SM 2
#define W4_PG_SMEM_MAX (100 * 1024)
#define W4_PG_RED_BYTES (2 * W4_PG_WARPS * 4 * 32 * (int)sizeof(float))

static __host__ __device__ __forceinline__ size_t w4pg_smem_bytes(int n, int in)
{
    return (size_t)W4_PG_RED_BYTES + (size_t)(in / 128) * 8 * sizeof(float) + (size_t)n * (size_t)(in + 32) * 2;
}

/* the weights of one unit (16-row tile t, k-block kb) a lane holds, from the tiled layout ([int4 tiles]: the unit's
 * 1 KB of nibbles in one piece, rows g and g + 8 at 64 g and 512 + 64 g: a warp's two loads are 512 contiguous bytes
 * each), and one of the 32 zeros and scales of the tile's rows in the k-block's group (lane l: the zero of row l,
 * l < 16, or the scale of row l - 16: 16 and 64 contiguous bytes), shuffled to the lanes that use them */
struct w4pg_unit_t {
    uint4 wa, wb;
    float zs;
};

static __device__ __forceinline__ void w4pg_fetch(w4pg_unit_t &u, const uint8_t *q, const float *scale, const float *zero, int t,
                                                  int kb, int lane, int in, int group_size, int n_groups)
{
    const int g = lane >> 2, tq = lane & 3, gi = kb * 128 / group_size;
    const uint8_t *c = q + w4t_unit(t, kb, in);
    u.wa = __ldcs(reinterpret_cast<const uint4 *>(c + 64 * g + 16 * tq));
    u.wb = __ldcs(reinterpret_cast<const uint4 *>(c + 512 + 64 * g + 16 * tq));
    const size_t i = w4t_sz(t, gi, n_groups) + (lane & 15);
    u.zs = lane < 16 ? (float)reinterpret_cast<const uint8_t *>(zero)[i] : scale[i];
}

/* the bf16 pair (128 + n0, 128 + n4) of the nibbles at bits 0-3 and 16-19 of w: one LOP3 */
static __device__ __forceinline__ uint32_t w4_raw_pair(uint32_t w)
{
    return (w & 0x000f000fu) | 0x43004300u;
}

template <int D, int BLOCKS_SM>
static __global__ void __launch_bounds__(32 * W4_PG_WARPS, BLOCKS_SM)
w4a16_pgemv_kernel(sits_bf16_t *y, const sits_bf16_t *x, const uint8_t *q, const float *scale, const float *zero,
                   const sits_bf16_t *bias, int n, int in, int out, int group_size, int n_groups)
{
    extern __shared__ __align__(16) unsigned char w4pg_smem[];
    float(*red)[W4_PG_WARPS][4][32] = reinterpret_cast<float(*)[W4_PG_WARPS][4][32]>(w4pg_smem);   /* [2][warp][element][lane] */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, tq = lane & 3;
    const int nkb = in / 128, c = (nkb - warp + W4_PG_WARPS - 1) / W4_PG_WARPS;   /* k-blocks of this warp a tile */
    const int xstride = in + 32;                                                   /* xs row stride (bf16) */
    float *xsum = reinterpret_cast<float *>(w4pg_smem + W4_PG_RED_BYTES);          /* [nkb][8] */
    sits_bf16_t *xs = reinterpret_cast<sits_bf16_t *>(w4pg_smem + W4_PG_RED_BYTES + (size_t)nkb * 8 * sizeof(float));
    const int n_tiles = (out + 15) / 16;
    const int my_tiles = (int)blockIdx.x < n_tiles ? (n_tiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
    const int units = my_tiles * c;
    w4pg_unit_t ring[D];
    int ft = blockIdx.x, fj = 0;   /* the next unit to fetch: tile ft, k-block warp + 8 fj */
#pragma unroll
    for (int s = 0; s < D; s++)
        if (s < units) {
            w4pg_fetch(ring[s], q, scale, zero, ft, warp + W4_PG_WARPS * fj, lane, in, group_size, n_groups);
            if (++fj == c) fj = 0, ft += gridDim.x;
        }
    sits_k_pdl_wait();   /* the weights above do not depend on the previous kernel; x does */
    /* x -> xs (fragment order) and xsum: a thread a 16-byte chunk (8 inputs) at a time; the 16 chunks of a (token,
     * k-block) sit in 16 aligned lanes (in / 8 is a multiple of 16), whose partial sums meet by shuffles */
    for (int i = threadIdx.x; i < nkb * 8; i += 32 * W4_PG_WARPS)
        if ((i & 7) >= n) xsum[i] = 0.0f;   /* tokens past n: their B columns are 0 */
    {
        const int chunks = n * (in / 8), row_chunks = in / 8;
        for (int i0 = 0; i0 < chunks; i0 += 32 * W4_PG_WARPS) {   /* the warp's lanes all take part in the shuffles */
            const int i = i0 + threadIdx.x, t = i / row_chunks, j = i % row_chunks;
            float sum = 0.0f;
            if (i < chunks) {
                const uint4 v = __ldg(reinterpret_cast<const uint4 *>(x) + i);
                const uint32_t u[4] = { v.x, v.y, v.z, v.w };
#pragma unroll
                for (int e = 0; e < 8; e++) sum += __uint_as_float(e & 1 ? u[e >> 1] & 0xffff0000u : u[e >> 1] << 16);
                *reinterpret_cast<uint4 *>(xs + (size_t)t * xstride + 8 * j) = v;   /* [int4 interleave] as it is */
            }
#pragma unroll
            for (int m = 8; m > 0; m >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, m);
            if (i < chunks && (j & 15) == 0) xsum[(j >> 4) * 8 + t] = sum;
        }
    }
    __syncthreads();
    float acc[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
    int ct = 0, cj = 0;   /* the unit computed next: the block's tile ct (blockIdx.x + ct gridDim.x), k-block warp + 8 cj */
    for (int u0 = 0; u0 < units; u0 += D) {
#pragma unroll
        for (int s = 0; s < D; s++) {
            if (u0 + s >= units) break;
            const w4pg_unit_t &w = ring[s];
            const int kb = warp + W4_PG_WARPS * cj;
            const uint32_t wa[4] = { w.wa.x, w.wa.y, w.wa.z, w.wa.w }, wb[4] = { w.wb.x, w.wb.y, w.wb.z, w.wb.w };
            float part[4] = { 0.0f, 0.0f, 0.0f, 0.0f };   /* sum (128 + q) x: rows g, g + 8 x tokens 2 tq, + 1 */
#pragma unroll
            for (int s4 = 0; s4 < 4; s4++) {
                const uint32_t a0[4] = { w4_raw_pair(wa[s4]), w4_raw_pair(wb[s4]), w4_raw_pair(wa[s4] >> 4),
                                         w4_raw_pair(wb[s4] >> 4) };
                const uint32_t a1[4] = { w4_raw_pair(wa[s4] >> 8), w4_raw_pair(wb[s4] >> 8), w4_raw_pair(wa[s4] >> 12),
                                         w4_raw_pair(wb[s4] >> 12) };
                uint4 v = make_uint4(0u, 0u, 0u, 0u);
                if (g < n) v = *reinterpret_cast<const uint4 *>(xs + (size_t)g * xstride + kb * 128 + 32 * s4 + 8 * tq);
                w4_mma(part, a0, v.x, v.y);
                w4_mma(part, a1, v.z, v.w);
            }
            const float2 xk = *reinterpret_cast<const float2 *>(xsum + kb * 8 + 2 * tq);   /* tokens 2 tq, + 1 */
            const float ca = 128.0f + __shfl_sync(0xffffffffu, w.zs, g);
            const float cb = 128.0f + __shfl_sync(0xffffffffu, w.zs, g + 8);
            const float sa = __shfl_sync(0xffffffffu, w.zs, g + 16), sb = __shfl_sync(0xffffffffu, w.zs, g + 24);
            acc[0] = fmaf(sa, fmaf(-ca, xk.x, part[0]), acc[0]);
            acc[1] = fmaf(sa, fmaf(-ca, xk.y, part[1]), acc[1]);
            acc[2] = fmaf(sb, fmaf(-cb, xk.x, part[2]), acc[2]);
            acc[3] = fmaf(sb, fmaf(-cb, xk.y, part[3]), acc[3]);
            if (u0 + s + D < units) {   /* refill the slot D units ahead */
                w4pg_fetch(ring[s], q, scale, zero, ft, warp + W4_PG_WARPS * fj, lane, in, group_size, n_groups);
                if (++fj == c) fj = 0, ft += gridDim.x;
            }
            if (++cj == c) {   /* the warp's last k-block of the tile: the warps' sums meet */
                const int buf = ct & 1;
#pragma unroll
                for (int i = 0; i < 4; i++) red[buf][warp][i][lane] = acc[i], acc[i] = 0.0f;
                /* every warp reaches this barrier once a tile (at different unit counts): a named barrier counted by threads */
                asm volatile("bar.sync 1, %0;" ::"r"(32 * W4_PG_WARPS) : "memory");
                /* output (row r, token t) = element (r >= 8 ? 2 : 0) + (t & 1) of lane 4 (r & 7) + t / 2 */
                if (threadIdx.x < 16 * 8) {
                    const int r = threadIdx.x >> 3, t = threadIdx.x & 7, row = 16 * ((int)blockIdx.x + ct * (int)gridDim.x) + r;
                    if (row < out && t < n) {
                        const int l = 4 * (r & 7) + (t >> 1), i = (r >= 8 ? 2 : 0) + (t & 1);
                        float v = 0.0f;
#pragma unroll
                        for (int w2 = 0; w2 < W4_PG_WARPS; w2++) v += red[buf][w2][i][l];
                        y[(size_t)t * out + row] = sits_k_f2bf(v + (bias ? sits_k_bf2f(bias[row]) : 0.0f));
                    }
                }
                cj = 0;
                ct++;
            }
        }
    }
}

/* Block (blockIdx.x: outputs o0 = 64 bx .., blockIdx.y: tokens t0 = 64 by ..), 4 warps; warp w owns
 * tokens t0 + 16 w .. + 16 and all 64 outputs (8 column tiles of 8). Per thread (g = lane / 4,
 * q = lane % 4): acc[j] / part[j] hold, for column tile j, tokens (16 w + g, 16 w + g + 8) x
 * outputs (8 j + 2 q, 8 j + 2 q + 1) in the C layout (c0 c1 | c2 c3). */
template <bool TL>
static __global__ void __launch_bounds__(128)
w4a16_mma_kernel(sits_bf16_t *y, const sits_bf16_t *x, const uint8_t *q, const float *scale, const float *zero,
                 const sits_bf16_t *bias, int n, int in, int out, int group_size, int n_groups)
{
    __shared__ __align__(16) sits_bf16_t xs[W4_BM * W4_SK];   /* [64 tokens][W4_SK]: x[t0 + m, k0 .. k0 + 32) */
    __shared__ __align__(16) sits_bf16_t ws[W4_BN * W4_SK];   /* [64 outputs][W4_SK]: q - zero, same inputs */
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, qd = lane & 3;
    int o0 = blockIdx.x * W4_BN, t0 = blockIdx.y * W4_BM;
    float acc[8][4], part[8][4];
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) acc[j][i] = part[j][i] = 0.0f;
    for (int k0 = 0; k0 < in; k0 += W4_BK) {
        __syncthreads();   /* the previous stage's fragments are read */
        /* x: 64 rows x 32 bf16 = 64 B a row, 4 x 16 B; 256 chunks, 2 a thread (zero past the last token) */
        for (int c = tid; c < W4_BM * 4; c += 128) {
            int m = c >> 2, part16 = c & 3;
            uint4 v = make_uint4(0, 0, 0, 0);
            if (t0 + m < n) v = *reinterpret_cast<const uint4 *>(x + (size_t)(t0 + m) * in + k0 + part16 * 8);
            *reinterpret_cast<uint4 *>(xs + m * W4_SK + part16 * 8) = v;
        }
        /* weights: 64 rows x 16 bytes of nibbles (32 inputs, one group: group_size % 32 == 0); a thread
         * takes 8 inputs (one 32-bit word) of a row and writes q - zero as 8 bf16 (0 past the last output) */
        for (int c = tid; c < W4_BN * 4; c += 128) {
            int r = c >> 2, w4 = c & 3, o = o0 + r;
            uint32_t word = 0;
            float z = 0.0f;
            if (o < out) {
                word = *reinterpret_cast<const uint32_t *>(q + w4_qoff<TL>(o, k0 + 8 * w4, in));
                z = w4_zero<TL>(zero, w4_szoff<TL>(o, k0 / group_size, n_groups));
            }
            uint32_t pk[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                float lo = (float)((word >> w4_shift<TL>(2 * i)) & 15u) - z, hi = (float)((word >> w4_shift<TL>(2 * i + 1)) & 15u) - z;
                __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);   /* exact: integers in [-16, 15] */
                pk[i] = *reinterpret_cast<uint32_t *>(&h);
            }
            *reinterpret_cast<uint4 *>(ws + r * W4_SK + w4 * 8) = make_uint4(pk[0], pk[1], pk[2], pk[3]);
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < W4_BK; kk += 16) {
            const sits_bf16_t *xa = xs + (warp * 16 + g) * W4_SK + kk + 2 * qd;
            uint32_t a[4] = { *reinterpret_cast<const uint32_t *>(xa), *reinterpret_cast<const uint32_t *>(xa + 8 * W4_SK),
                              *reinterpret_cast<const uint32_t *>(xa + 8), *reinterpret_cast<const uint32_t *>(xa + 8 * W4_SK + 8) };
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const sits_bf16_t *wb = ws + (j * 8 + g) * W4_SK + kk + 2 * qd;
                w4_mma(part[j], a, *reinterpret_cast<const uint32_t *>(wb), *reinterpret_cast<const uint32_t *>(wb + 8));
            }
        }
        if ((k0 + W4_BK) % group_size == 0) {   /* the group ends: acc += scale * part, per output column */
            int gi = k0 / group_size;
#pragma unroll
            for (int j = 0; j < 8; j++) {
                int oa = o0 + j * 8 + 2 * qd;
                float s0 = oa < out ? scale[w4_szoff<TL>(oa, gi, n_groups)] : 0.0f;
                float s1 = oa + 1 < out ? scale[w4_szoff<TL>(oa + 1, gi, n_groups)] : 0.0f;
                acc[j][0] = fmaf(s0, part[j][0], acc[j][0]);
                acc[j][1] = fmaf(s1, part[j][1], acc[j][1]);
                acc[j][2] = fmaf(s0, part[j][2], acc[j][2]);
                acc[j][3] = fmaf(s1, part[j][3], acc[j][3]);
#pragma unroll
                for (int i = 0; i < 4; i++) part[j][i] = 0.0f;
            }
        }
    }
#pragma unroll
    for (int j = 0; j < 8; j++) {
        int oa = o0 + j * 8 + 2 * qd;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int t = t0 + warp * 16 + g + (i >= 2 ? 8 : 0), o = oa + (i & 1);
            if (t < n && o < out) y[(size_t)t * out + o] = sits_k_f2bf(acc[j][i] + (bias ? sits_k_bf2f(bias[o]) : 0.0f));
        }
    }
}

extern "C" sits_status_t sits_k_matmul_w4(sits_bf16_t *y, const sits_bf16_t *x, const uint8_t *q, const float *scale,
                                          const float *zero, const int32_t *gidx, int tiled, const sits_bf16_t *bias, int n, int in,
                                          int out, int group_size, int n_groups, cudaStream_t stream)
{
    if (n < 0 || in <= 0 || in % 2 || out <= 0 || n_groups < 1 || (!gidx && (group_size < 1 || in % group_size)))
        return SITS_ERR_INVALID;
    if (n == 0) return SITS_OK;
    if (tiled) {   /* [int4 tiles] the persistent GEMV, the tensor-core GEMV, or the tensor-core tiles */
        if (gidx || in % 128 || group_size % 32 || !sits_k_aligned16(x) || !sits_k_aligned16(q)) return SITS_ERR_INVALID;
        /* SITS_W4_PG_MAX_N (0-8) moves the persistent GEMV's token limit: 0 turns it off (A/B in sits-bench-w4 --compare) */
        const char *pg_env = getenv("SITS_W4_PG_MAX_N");
        const int pg_max_n = pg_env ? min(max(atoi(pg_env), 0), 8) : W4_PG_MAX_N;
        if (n <= pg_max_n && group_size % 128 == 0 && in >= 128 * W4_PG_WARPS && w4pg_smem_bytes(n, in) <= W4_PG_SMEM_MAX) {
            static int smem_set[SITS_K_DEV_CACHE];   /* [perf: launch cost] */
            int dev = 0, n_sms = 0;
            if (sits_k_sm_count(&dev, &n_sms) != cudaSuccess ||
                sits_k_smem_limit(w4a16_pgemv_kernel<W4_PG_D, W4_PG_BLOCKS_SM>, dev, W4_PG_SMEM_MAX, smem_set) != cudaSuccess)
                return SITS_ERR_CUDA;
            const int n_tiles = (out + 15) / 16;
            cudaLaunchAttribute attr[1];
            attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
            attr[0].val.programmaticStreamSerializationAllowed = 1;
            cudaLaunchConfig_t cfg = {};
            cfg.gridDim = dim3((unsigned)min(n_tiles, W4_PG_BLOCKS_SM * n_sms));
            cfg.blockDim = dim3(32 * W4_PG_WARPS);
            cfg.dynamicSmemBytes = w4pg_smem_bytes(n, in);
            cfg.stream = stream;
            cfg.attrs = attr;
            cfg.numAttrs = 1;
            const cudaError_t e = cudaLaunchKernelEx(&cfg, w4a16_pgemv_kernel<W4_PG_D, W4_PG_BLOCKS_SM>, y, x, q, scale, zero, bias,
                                                     n, in, out, group_size, n_groups);
            return e == cudaSuccess ? SITS_K_LAUNCH_STATUS() : SITS_ERR_CUDA;
        }
        if (n <= W4_TC_MAX_N) {
            const bool wide = group_size % 128 == 0;
            /* 1-8 tokens on a small grid (at most two 16-row tiles an SM: Llama-3 8B o and down at TP 1) with 16 warps a
             * block: twice the nibble loads in flight (H100, linears alone: 8B o 7.9 -> 6.8 us, down 19.5 -> 16.6; on
             * larger grids 16 warps were slower: 8B gate_up 28.8 -> 33.6). */
            int dev = 0, n_sms = 0;
            if (sits_k_sm_count(&dev, &n_sms) != cudaSuccess) return SITS_ERR_CUDA;
            /* [perf: w4 waves] 4 warps a block where the 8-warp blocks would spill into a second, partial wave (more than 4
             * tiles an SM -- four 8-warp blocks of 60 registers fit an SM -- and at most 8: Llama-3 70B qkv at TP 1, 640
             * tiles on 132 SMs): every tile resident at once (eight 4-warp blocks an SM), 19-20 warps an SM streaming 16
             * k-blocks each, instead of 1.2 waves. H100, linears alone (RESULTS.md 2026-12-06T08:35Z): 70B qkv 23.8 ->
             * 22.3 us at 1 token, 25.4 -> 22.1 at 8; on the other Llama-3 grids 4 warps lost (70B o 16.6 -> 19.8, down
             * 48.6 -> 61.8, 8B qkv 8.6 -> 10.4). SITS_W4_TC_W=4 / 8 / 16 sets the warps at 1-8 tokens (A/B). */
            const char *w_env = getenv("SITS_W4_TC_W");
            const int tiles = (out + 15) / 16;
            const int w_tc = w_env ? atoi(w_env) : tiles <= 2 * n_sms ? 16 : tiles > 4 * n_sms && tiles <= 8 * n_sms ? 4 : 8;
            /* [int4 rows] 17-32 tokens on a large grid (gate_up: at least 3/4 of a block an SM with 8 row tiles of 32
             * rows a block): the 8 warps of a block each on a row tile of its own (KW = 1), reading the same x fragments
             * at about the same time -- from L1 after the first; with one row tile a block (the k range over its 8 warps)
             * every block reads all of x from L2 (at 32 tokens 4x its nibbles' bytes). H100, linears alone at 32 tokens,
             * us (one row tile a block -> eight): 8B gate_up 66.3 -> 60.0, 70B gate_up 232.1 -> 226.1; at 16 tokens it
             * lost (33.7 -> 41.5, 116.7 -> 130.4: the one-tile form holds 128 registers there, two blocks an SM), and on
             * smaller grids 2, 4 or 8 row tiles a block lost everywhere: too few blocks (RESULTS.md).
             * SITS_W4_TC_RW=1 / 8 sets it at 9-32 tokens (A/B; at 1-8 tokens, 16-row tiles, 8 a block tripled the 8B
             * batch-1 step: not offered). */
            const char *rw_env = getenv("SITS_W4_TC_RW");
            const int rw_force = rw_env ? atoi(rw_env) : 0;
            cudaError_t e = cudaSuccess;
            /* 33-64 tokens: two passes of at most 32 (weights read twice, x from L2 4x the nibbles a pass) -- measured
             * faster than one pass of eight n-tiles with one m-tile (x 16x the nibbles at 64 tokens: RESULTS.md) */
            for (int t0 = 0; t0 < n; t0 += 32) {
                const int nn = min(32, n - t0);
                const sits_bf16_t *xp = x + (size_t)t0 * in;
                sits_bf16_t *yp = y + (size_t)t0 * out;
                const bool rows = nn > 8 && (rw_force ? rw_force == 8 : nn > 16 && (out + 255) / 256 * 4 >= 3 * n_sms);
                /* [perf: pdl] a programmatic dependent: its setup overlaps the kernel before (3 % off the 8B INT4 batch-1
                 * step on the H100; a prefetch of its first k-blocks into L2 before the wait cost 2.4 %: RESULTS.md) */
#define W4_TC(NT8, MT, WIDE, W, KW)                                                                                            \
    e = sits_k_launch_pdl(w4a16_tc_kernel<NT8, MT, WIDE, W, KW>,                                                               \
                          dim3((unsigned)((out + 16 * (MT) * ((W) / (KW)) - 1) / (16 * (MT) * ((W) / (KW))))), 32 * (W), 0,    \
                          stream, true, yp, xp, q, scale, zero, bias, nn, in, out, group_size, n_groups)
#define W4_TCR(NT8, MT)                                                                                                        \
    do {                                                                                                                       \
        if (wide && rows) W4_TC(NT8, MT, true, 8, 1);                                                                          \
        else if (wide) W4_TC(NT8, MT, true, 8, 8);                                                                             \
        else if (rows) W4_TC(NT8, MT, false, 8, 1);                                                                            \
        else W4_TC(NT8, MT, false, 8, 8);                                                                                      \
    } while (0)
#define W4_TC1(W)                                                                                                              \
    do {                                                                                                                       \
        if (wide) W4_TC(1, 1, true, W, W);                                                                                     \
        else W4_TC(1, 1, false, W, W);                                                                                         \
    } while (0)
                if (nn <= 8 && w_tc == 16) W4_TC1(16);
                else if (nn <= 8 && w_tc == 4) W4_TC1(4);
                else if (nn <= 8) W4_TC1(8);
                else if (nn <= 16) {   /* two m-tiles share each x fragment: half the x traffic per weight */
                    W4_TCR(2, 2);
                } else {
                    W4_TCR(4, 2);
                }
#undef W4_TC
#undef W4_TC1
#undef W4_TCR
                if (e != cudaSuccess) return SITS_ERR_CUDA;
            }
            return SITS_K_LAUNCH_STATUS();
        }
        dim3 mgrid((unsigned)((out + W4_BN - 1) / W4_BN), (unsigned)((n + W4_BM - 1) / W4_BM));
        if (mgrid.y > 65535u) return SITS_ERR_INVALID;
        w4a16_mma_kernel<true><<<mgrid, 128, 0, stream>>>(y, x, q, scale, zero, bias, n, in, out, group_size, n_groups);
        return SITS_K_LAUNCH_STATUS();
    }
    if (n <= W4_GEMV_MAX_N && !gidx && group_size % 32 == 0 && in % 32 == 0 && sits_k_aligned16(x) && sits_k_aligned16(q)) {
        int nt = n == 1 ? 1 : n == 2 ? 2 : n <= 4 ? 4 : 8;
        dim3 ggrid((unsigned)((out + W4_GEMV_WARPS - 1) / W4_GEMV_WARPS), (unsigned)((n + nt - 1) / nt));
#define W4_GEMV(NT) w4a16_gemv_kernel<NT><<<ggrid, 32 * W4_GEMV_WARPS, 0, stream>>>(y, x, q, scale, zero, bias, n, in, out, \
                                                                                    group_size, n_groups)
        if (nt == 1) W4_GEMV(1);
        else if (nt == 2) W4_GEMV(2);
        else if (nt == 4) W4_GEMV(4);
        else W4_GEMV(8);
#undef W4_GEMV
        return SITS_K_LAUNCH_STATUS();
    }
    if (n >= W4_MMA_MIN_N && !gidx && group_size % W4_BK == 0 && in % W4_BK == 0 && sits_k_aligned16(x) &&
        ((uintptr_t)q & 3u) == 0) {
        dim3 mgrid((unsigned)((out + W4_BN - 1) / W4_BN), (unsigned)((n + W4_BM - 1) / W4_BM));
        if (mgrid.y > 65535u) return SITS_ERR_INVALID;
        w4a16_mma_kernel<false><<<mgrid, 128, 0, stream>>>(y, x, q, scale, zero, bias, n, in, out, group_size, n_groups);
        return SITS_K_LAUNCH_STATUS();
    }
    bool word = in % 8 == 0 && sits_k_aligned16(x) && ((uintptr_t)q & 3u) == 0;
    dim3 grid((unsigned)((out + W4_WARPS - 1) / W4_WARPS), (unsigned)((n + W4_TOK - 1) / W4_TOK));
    if (grid.y > 65535u) return SITS_ERR_INVALID;
    if (word)
        w4a16_kernel<true><<<grid, 32 * W4_WARPS, 0, stream>>>(y, x, q, scale, zero, gidx, bias, n, in, out, group_size, n_groups);
    else
        w4a16_kernel<false><<<grid, 32 * W4_WARPS, 0, stream>>>(y, x, q, scale, zero, gidx, bias, n, in, out, group_size, n_groups);
    return SITS_K_LAUNCH_STATUS();
}
