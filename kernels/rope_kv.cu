/* rope_kv.cu -- RoPE fused with writing K and V into the paged cache (bf16, int8 or fp8 E4M3): what
 * sits_k_rope over the q and k heads followed by sits_k_kv_write (or sits_k_kv_write_q8) does,
 * bit for bit, in one launch and one pass over the row.
 *
 * qkv: [n, row_stride] bf16, per row n_q q heads from column 0, then n_kv k heads, then n_kv v heads,
 * head_dim each. After the kernel the q and k heads of qkv are rotated (as sits_k_rope leaves them)
 * and k_cache / v_cache hold the rotated k and the v of every token with slot_mapping[t] >= 0.
 *
 * Grid (n, ceil(rows / RKV_WARPS)) with rows = n_q + 2 n_kv; warp w of block (t, b) takes row
 * b * RKV_WARPS + w of token t: a q head (rotate in place), a k head (rotate, write back, store)
 * or a v head (store). A block first puts cos / sin of the token's angles in shared memory (one
 * sincosf per pair instead of one per head and pair). A lane holds pairs (i, i + half) for
 * i = lane + 32 j, j < NP, so a k head's amax for the 8-bit scale is one warp reduction. The values
 * stored are the bf16-rounded rotated ones, so the int8 / fp8 bytes equal sits_k_kv_write_q8's.
 * [families] With q_norm / k_norm, a q or k head is first RMS-normalised as sits_k_rmsnorm_heads does (one
 * warp sum of the lane's squares), saving Qwen3 / Gemma 3 two launches a layer.
 * QM: what the cache holds (SITS_K_KV_BF16, _I8, _F8). */
#include "kernels/common.cuh"
#include "kernels/sits_kernels.h"

#define RKV_WARPS 8
#define RKV_MAX_HALF 128   /* head_dim <= 256 */

template <int NP, int QM>
static __global__ void __launch_bounds__(RKV_WARPS * 32)
rope_kv_kernel(sits_bf16_t *qkv, int row_stride, int n_q, int n_kv, int head_dim, const int32_t *pos, const float *inv_freq,
               void *k_cache, void *v_cache, int block_size, size_t q_bytes, size_t unit_bytes, const int32_t *slot_mapping,
               const float *q_norm, const float *k_norm, float eps)
{
    sits_k_pdl_trigger();   /* [perf: kv before wait] the decode attention may be placed now (rope_kv_vec_kernel) */
    __shared__ float s_cos[RKV_MAX_HALF], s_sin[RKV_MAX_HALF];
    const size_t t = blockIdx.x;
    const int half = head_dim / 2, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const float p = (float)pos[t];
    for (int i = threadIdx.x; i < half; i += blockDim.x) sincosf(p * inv_freq[i], &s_sin[i], &s_cos[i]);
    __syncthreads();
    const int r = blockIdx.y * RKV_WARPS + warp, rows = n_q + 2 * n_kv;
    if (r >= rows) return;
    const int slot = slot_mapping[t];
    sits_bf16_t *x = qkv + t * (size_t)row_stride + (size_t)r * head_dim;
    const bool is_q = r < n_q, is_k = !is_q && r < n_q + n_kv;
    if (!is_q && !is_k && slot < 0) return;   /* a padding token's v: nothing to do */
    float a[NP], b[NP];
#pragma unroll
    for (int j = 0; j < NP; j++) {
        int i = lane + 32 * j;
        a[j] = b[j] = 0.0f;
        if (i < half) {
            a[j] = sits_k_bf2f(x[i]);
            b[j] = sits_k_bf2f(x[i + half]);
        }
    }
    const float *nw = is_q ? q_norm : is_k ? k_norm : NULL;
    if (nw) {   /* [families] the head's RMSNorm first, the values sits_k_rmsnorm_heads stores: half % 32 == 0, so a
                 * lane's squares come in its order there (a[0 ..], then b[0 ..]) and the warp sum is the same */
        float ss = 0.0f;
#pragma unroll
        for (int j = 0; j < NP; j++)
            if (lane + 32 * j < half) ss += a[j] * a[j];
#pragma unroll
        for (int j = 0; j < NP; j++)
            if (lane + 32 * j < half) ss += b[j] * b[j];
        ss = sits_k_warp_sum(ss);
        const float inv = 1.0f / sqrtf(ss / (float)head_dim + eps);
#pragma unroll
        for (int j = 0; j < NP; j++) {
            int i = lane + 32 * j;
            if (i < half) {
                a[j] = sits_k_bf2f(sits_k_f2bf(nw[i] * (a[j] * inv)));
                b[j] = sits_k_bf2f(sits_k_f2bf(nw[i + half] * (b[j] * inv)));
            }
        }
    }
    if (is_q || is_k) {
#pragma unroll
        for (int j = 0; j < NP; j++) {
            int i = lane + 32 * j;
            if (i < half) {
                float c = s_cos[i], s = s_sin[i];
                /* rounded to bf16 as sits_k_rope stores them, then read back by the cache write */
                const sits_bf16_t ra = sits_k_f2bf(sits_k_rot_lo(a[j], b[j], c, s)), rb = sits_k_f2bf(sits_k_rot_hi(a[j], b[j], c, s));
                x[i] = ra;
                x[i + half] = rb;
                a[j] = sits_k_bf2f(ra);
                b[j] = sits_k_bf2f(rb);
            }
        }
    }
    if (is_q || slot < 0) return;   /* padding token: rotated, no cache write */
    const int h = is_k ? r - n_q : r - n_q - n_kv;
    if (QM == SITS_K_KV_BF16) {
        sits_bf16_t *dst = static_cast<sits_bf16_t *>(is_k ? k_cache : v_cache) + ((size_t)slot * n_kv + h) * head_dim;
#pragma unroll
        for (int j = 0; j < NP; j++) {
            int i = lane + 32 * j;
            if (i < half) {
                dst[i] = sits_k_f2bf(a[j]);
                dst[i + half] = sits_k_f2bf(b[j]);
            }
        }
        return;
    }
    /* [int8 kv] scale = amax / 127 over the head, q = rint(x / scale) clamped, as kv_write_q8_kernel;
     * [fp8 kv] scale = amax / 448 (1 for amax 0), q = e4m3(x / scale) saturating */
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < NP; j++) amax = fmaxf(amax, fmaxf(fabsf(a[j]), fabsf(b[j])));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float scale = QM == SITS_K_KV_F8 ? sits_k_fp8_scale(amax) : __fdiv_rn(amax, 127.0f);
    unsigned char *unit = static_cast<unsigned char *>(is_k ? k_cache : v_cache) + (size_t)(slot / block_size) * unit_bytes;
    const size_t row = (size_t)(slot % block_size) * (size_t)n_kv + (size_t)h;
    int8_t *q = reinterpret_cast<int8_t *>(unit) + row * (size_t)head_dim;
#pragma unroll
    for (int j = 0; j < NP; j++) {
        int i = lane + 32 * j;
        if (i < half && QM == SITS_K_KV_F8) {
            q[i] = (int8_t)__nv_cvt_float_to_fp8(__fdiv_rn(a[j], scale), __NV_SATFINITE, __NV_E4M3);
            q[i + half] = (int8_t)__nv_cvt_float_to_fp8(__fdiv_rn(b[j], scale), __NV_SATFINITE, __NV_E4M3);
        } else if (i < half) {
            float va = amax > 0.0f ? rintf(__fdiv_rn(a[j], scale)) : 0.0f, vb = amax > 0.0f ? rintf(__fdiv_rn(b[j], scale)) : 0.0f;
            va = va > 127.0f ? 127.0f : va < -127.0f ? -127.0f : va;
            vb = vb > 127.0f ? 127.0f : vb < -127.0f ? -127.0f : vb;
            q[i] = va == va ? (int8_t)va : (int8_t)0;
            q[i + half] = vb == vb ? (int8_t)vb : (int8_t)0;
        }
    }
    if (lane == 0) reinterpret_cast<float *>(unit + q_bytes)[row] = scale;
}

/* [perf: row kernels] The vectorised form (no q_norm / k_norm, head_dim % 16 == 0, 16-byte aligned rows and
 * caches): L = head_dim / 16 lanes a head, a lane holding the 8 pairs (i, i + half), i = 8 l .. 8 l + 7 -- two
 * 16-byte loads and stores where rope_kv_kernel moves 2-byte values, and no block-wide barrier: each lane
 * computes the sincosf of its own 8 angles (the same calls on the same arguments, so the same values), the
 * 8-bit scale's amax is a shuffle over the head's L lanes. Heads of consecutive (token, row) jobs are packed
 * 256 / L to a block. Same bytes as rope_kv_kernel. 8B FP8 at 7827 tokens on the H200: rope_kv_kernel took
 * 111 us (~1.75 TB/s of the ~192 MB it moves). */
template <int L, int QM>
static __global__ void __launch_bounds__(256)
rope_kv_vec_kernel(sits_bf16_t *qkv, int row_stride, int n_q, int n_kv, int head_dim, long long n_jobs, const int32_t *pos,
                   const float *inv_freq, void *k_cache, void *v_cache, int block_size, size_t q_bytes, size_t unit_bytes,
                   const int32_t *slot_mapping)
{
    /* [perf: kv before wait] the decode attention reading this step's keys may be placed now: its first loads (the
     * earlier keys) need nothing of this kernel (attention_mma.cuh att_kv_safe_end) */
    sits_k_pdl_trigger();
    const int lane = threadIdx.x & 31, sub = lane & (L - 1);
    const unsigned gmask = (L == 32 ? 0xffffffffu : ((1u << L) - 1u) << (lane & ~(L - 1)));
    const long long job = (long long)blockIdx.x * (256 / L) + threadIdx.x / L;
    const int rows = n_q + 2 * n_kv, half = head_dim / 2;
    const size_t t = (size_t)(job / rows);
    const int r = (int)(job - (long long)t * rows);
    const bool is_q = r < n_q, is_k = !is_q && r < n_q + n_kv;
    const int i0 = 8 * sub;
    /* the angles before the wait: positions, slots and inverse frequencies come from the host, not the kernel before */
    float cs[8], sn[8];
    int slot = -1;
    if (job < n_jobs) {
        slot = slot_mapping[t];
        if (is_q || is_k) {
            const float p = (float)pos[t];
#pragma unroll
            for (int k = 0; k < 8; k++) sincosf(p * inv_freq[i0 + k], &sn[k], &cs[k]);
        }
    }
    sits_k_pdl_wait();   /* [perf: pdl] launched as a dependent (sits_k_launch_dep): qkv comes from the linear before */
    if (job >= n_jobs) return;   /* whole head groups leave together */
    if (!is_q && !is_k && slot < 0) return;   /* a padding token's v: nothing to do */
    sits_bf16_t *x = qkv + t * (size_t)row_stride + (size_t)r * head_dim;
    uint4 lo = *reinterpret_cast<const uint4 *>(x + i0), hi = *reinterpret_cast<const uint4 *>(x + half + i0);
    float a[8], b[8];
    sits_k_unpack8(lo, a);
    sits_k_unpack8(hi, b);
    if (is_q || is_k) {
#pragma unroll
        for (int k = 0; k < 8; k++) {
            /* rounded to bf16 as sits_k_rope stores them, then read back by the cache write */
            const float ra = sits_k_rot_lo(a[k], b[k], cs[k], sn[k]), rb = sits_k_rot_hi(a[k], b[k], cs[k], sn[k]);
            a[k] = ra;
            b[k] = rb;
        }
        lo = sits_k_pack8(a);
        hi = sits_k_pack8(b);
        *reinterpret_cast<uint4 *>(x + i0) = lo;
        *reinterpret_cast<uint4 *>(x + half + i0) = hi;
        sits_k_unpack8(lo, a);
        sits_k_unpack8(hi, b);
    }
    if (is_q || slot < 0) return;   /* padding token: rotated, no cache write */
    const int h = is_k ? r - n_q : r - n_q - n_kv;
    if (QM == SITS_K_KV_BF16) {
        sits_bf16_t *dst = static_cast<sits_bf16_t *>(is_k ? k_cache : v_cache) + ((size_t)slot * n_kv + h) * head_dim;
        *reinterpret_cast<uint4 *>(dst + i0) = lo;
        *reinterpret_cast<uint4 *>(dst + half + i0) = hi;
        return;
    }
    /* [int8 kv] [fp8 kv] as rope_kv_kernel: scale from the head's amax, one 8-byte store per half */
    float amax = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; k++) amax = fmaxf(amax, fmaxf(fabsf(a[k]), fabsf(b[k])));
#pragma unroll
    for (int o = L / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(gmask, amax, o));
    const float scale = QM == SITS_K_KV_F8 ? sits_k_fp8_scale(amax) : __fdiv_rn(amax, 127.0f);
    unsigned char *unit = static_cast<unsigned char *>(is_k ? k_cache : v_cache) + (size_t)(slot / block_size) * unit_bytes;
    const size_t row = (size_t)(slot % block_size) * (size_t)n_kv + (size_t)h;
    int8_t *q = reinterpret_cast<int8_t *>(unit) + row * (size_t)head_dim;
    uint2 qa, qb;
    int8_t *ba = reinterpret_cast<int8_t *>(&qa), *bb = reinterpret_cast<int8_t *>(&qb);
#pragma unroll
    for (int k = 0; k < 8; k++) {
        if (QM == SITS_K_KV_F8) {
            ba[k] = (int8_t)__nv_cvt_float_to_fp8(__fdiv_rn(a[k], scale), __NV_SATFINITE, __NV_E4M3);
            bb[k] = (int8_t)__nv_cvt_float_to_fp8(__fdiv_rn(b[k], scale), __NV_SATFINITE, __NV_E4M3);
        } else {
            float va = amax > 0.0f ? rintf(__fdiv_rn(a[k], scale)) : 0.0f, vb = amax > 0.0f ? rintf(__fdiv_rn(b[k], scale)) : 0.0f;
            va = va > 127.0f ? 127.0f : va < -127.0f ? -127.0f : va;
            vb = vb > 127.0f ? 127.0f : vb < -127.0f ? -127.0f : vb;
            ba[k] = va == va ? (int8_t)va : (int8_t)0;
            bb[k] = vb == vb ? (int8_t)vb : (int8_t)0;
        }
    }
    *reinterpret_cast<uint2 *>(q + i0) = qa;
    *reinterpret_cast<uint2 *>(q + half + i0) = qb;
    if (sub == 0) reinterpret_cast<float *>(unit + q_bytes)[row] = scale;
}

extern "C" sits_status_t sits_k_rope_kv_write(sits_bf16_t *qkv, int n, int row_stride, int n_q, int n_kv, int head_dim,
                                              const int32_t *pos, const float *inv_freq, void *k_cache, void *v_cache,
                                              int kv, int block_size, const int32_t *slot_mapping, const float *q_norm,
                                              const float *k_norm, float eps, cudaStream_t stream)
{
    if (!q_norm != !k_norm || (q_norm && head_dim % 64)) return SITS_ERR_INVALID;
    if (n < 0 || n_q < 0 || n_kv <= 0 || head_dim <= 0 || head_dim % 2 || head_dim > 2 * RKV_MAX_HALF ||
        (long long)(n_q + 2 * n_kv) * head_dim > row_stride || kv < 0 || kv > SITS_K_KV_F8 || (kv && (block_size <= 0 || !sits_k_aligned16(k_cache) ||
                                                                           !sits_k_aligned16(v_cache))))
        return SITS_ERR_INVALID;
    if (n == 0) return SITS_OK;
    const int rows = n_q + 2 * n_kv, half = head_dim / 2;
    size_t qb = kv ? sits_k_kv_i8_q_bytes(block_size, n_kv, head_dim) : 0;
    size_t ub = kv ? sits_k_kv_i8_unit_bytes(block_size, n_kv, head_dim) : 0;
    const int lanes = head_dim / 16;
    if (!q_norm && head_dim % 16 == 0 && (lanes == 4 || lanes == 8 || lanes == 16) && row_stride % 8 == 0 &&
        sits_k_aligned16(qkv) && sits_k_aligned16(k_cache) && sits_k_aligned16(v_cache) && (!kv || ub % 16 == 0)) {
        const long long jobs = (long long)n * rows, per = 256 / lanes;   /* [perf: row kernels] */
        const unsigned blocks = (unsigned)((jobs + per - 1) / per);
        cudaError_t e = cudaSuccess;   /* [perf: pdl] a dependent launch (common.cuh sits_k_launch_dep) */
#define RKV_VEC(l_, q8_) e = sits_k_launch_dep(rope_kv_vec_kernel<l_, q8_>, blocks, 256, 0, stream, qkv, row_stride, n_q, n_kv, \
        head_dim, jobs, pos, inv_freq, k_cache, v_cache, block_size, qb, ub, slot_mapping)
#define RKV_VEC_KV(l_) do { if (kv == SITS_K_KV_F8) RKV_VEC(l_, SITS_K_KV_F8); \
        else if (kv == SITS_K_KV_I8) RKV_VEC(l_, SITS_K_KV_I8); else RKV_VEC(l_, SITS_K_KV_BF16); } while (0)
        if (lanes == 4) RKV_VEC_KV(4);
        else if (lanes == 8) RKV_VEC_KV(8);
        else RKV_VEC_KV(16);
#undef RKV_VEC_KV
#undef RKV_VEC
        return e == cudaSuccess ? SITS_K_LAUNCH_STATUS() : SITS_ERR_CUDA;
    }
    dim3 grid((unsigned)n, (unsigned)((rows + RKV_WARPS - 1) / RKV_WARPS)), block(RKV_WARPS * 32);
#define RKV_LAUNCH(np_, q8_) rope_kv_kernel<np_, q8_><<<grid, block, 0, stream>>>(qkv, row_stride, n_q, n_kv, head_dim, pos, \
        inv_freq, k_cache, v_cache, block_size, qb, ub, slot_mapping, q_norm, k_norm, eps)
#define RKV_LAUNCH_KV(np_) do { if (kv == SITS_K_KV_F8) RKV_LAUNCH(np_, SITS_K_KV_F8); \
        else if (kv == SITS_K_KV_I8) RKV_LAUNCH(np_, SITS_K_KV_I8); else RKV_LAUNCH(np_, SITS_K_KV_BF16); } while (0)
    if (half <= 32) RKV_LAUNCH_KV(1);
    else if (half <= 64) RKV_LAUNCH_KV(2);
    else RKV_LAUNCH_KV(4);
#undef RKV_LAUNCH_KV
#undef RKV_LAUNCH
    return SITS_K_LAUNCH_STATUS();
}
