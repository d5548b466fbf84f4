/* kv_write.cu -- scatter this step's K and V rows into the paged cache.
 * qkv: [n, row_stride] bf16 with K at columns k_col .. k_col + kv_dim and V at v_col ..;
 * k_cache, v_cache: [n_slots, kv_dim] bf16 (= [n_blocks, block_size, n_kv_heads, head_dim]);
 * slot_mapping: [n] int32, -1 = skip (padding token). One block per token.
 * [int8 kv] [fp8 kv] kv_write_q8_kernel: the same into int8 or fp8 (E4M3) caches (layout in sits_kernels.h), quantised. */
#include "kernels/common.cuh"

template <int V>
static __global__ void kv_write_kernel(sits_bf16_t *k_cache, sits_bf16_t *v_cache, const sits_bf16_t *qkv, int row_stride,
                                       int k_col, int v_col, int kv_dim, const int32_t *slot_mapping)
{
    size_t t = blockIdx.x;
    int slot = slot_mapping[t];
    if (slot < 0) return;
    const sits_bf16_t *row = qkv + t * (size_t)row_stride;
    sits_k_copy_row<V>(k_cache + (size_t)slot * kv_dim, row + k_col, kv_dim);
    sits_k_copy_row<V>(v_cache + (size_t)slot * kv_dim, row + v_col, kv_dim);
}

extern "C" sits_status_t sits_k_kv_write(sits_bf16_t *k_cache, sits_bf16_t *v_cache, const sits_bf16_t *qkv, int n,
                                         int row_stride, int k_col, int v_col, int kv_dim, const int32_t *slot_mapping,
                                         cudaStream_t stream)
{
    if (n < 0 || kv_dim <= 0 || k_col < 0 || v_col < 0 || k_col + kv_dim > row_stride || v_col + kv_dim > row_stride)
        return SITS_ERR_INVALID;
    if (n == 0) return SITS_OK;
    bool vec = sits_k_vec8_ok(qkv, kv_dim, row_stride) && k_col % 8 == 0 && v_col % 8 == 0 &&
               sits_k_aligned16(k_cache) && sits_k_aligned16(v_cache);
    int threads = sits_k_row_threads(vec ? kv_dim / 8 : kv_dim, 256);
    if (vec) kv_write_kernel<8><<<n, threads, 0, stream>>>(k_cache, v_cache, qkv, row_stride, k_col, v_col, kv_dim, slot_mapping);
    else kv_write_kernel<1><<<n, threads, 0, stream>>>(k_cache, v_cache, qkv, row_stride, k_col, v_col, kv_dim, slot_mapping);
    return SITS_K_LAUNCH_STATUS();
}

/* [int8 kv] [fp8 kv] One block per token; warp w quantises rows w, w + warps, ... of the token's
 * 2 * n_kv (K heads, then V heads) rows of head_dim: a warp max of |x|, then int8: scale = amax / 127,
 * q = rint(x / scale) clamped; F8: scale = amax / 448 (1 for amax 0), q = e4m3(x / scale) saturating,
 * round to nearest even. The divisions are IEEE (__fdiv_rn) so the bytes equal the cpu backend's. */
template <bool F8>
static __global__ void kv_write_q8_kernel(unsigned char *k_cache, unsigned char *v_cache, const sits_bf16_t *qkv,
                                          int row_stride, int k_col, int v_col, int n_kv, int head_dim, int block_size,
                                          size_t q_bytes, size_t unit_bytes, const int32_t *slot_mapping)
{
    size_t t = blockIdx.x;
    int slot = slot_mapping[t];
    if (slot < 0) return;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    const size_t blk = (size_t)(slot / block_size), off = (size_t)(slot % block_size);
    for (int r = warp; r < 2 * n_kv; r += n_warps) {
        const bool is_v = r >= n_kv;
        const int h = is_v ? r - n_kv : r;
        const sits_bf16_t *x = qkv + t * (size_t)row_stride + (is_v ? v_col : k_col) + (size_t)h * head_dim;
        unsigned char *unit = (is_v ? v_cache : k_cache) + blk * unit_bytes;
        const size_t row = off * (size_t)n_kv + (size_t)h;
        unsigned char *q = unit + row * (size_t)head_dim;
        float amax = 0.0f;
        for (int i = lane; i < head_dim; i += 32) amax = fmaxf(amax, fabsf(sits_k_bf2f(x[i])));
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        const float scale = F8 ? sits_k_fp8_scale(amax) : __fdiv_rn(amax, 127.0f);
        for (int i = lane; i < head_dim; i += 32) {
            if (F8) {
                q[i] = (unsigned char)__nv_cvt_float_to_fp8(__fdiv_rn(sits_k_bf2f(x[i]), scale), __NV_SATFINITE, __NV_E4M3);
            } else {
                float v = amax > 0.0f ? rintf(__fdiv_rn(sits_k_bf2f(x[i]), scale)) : 0.0f;
                v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
                q[i] = (unsigned char)(v == v ? (int8_t)v : (int8_t)0);
            }
        }
        if (lane == 0) reinterpret_cast<float *>(unit + q_bytes)[row] = scale;
    }
}

extern "C" sits_status_t sits_k_kv_write_q8(void *k_cache, void *v_cache, const sits_bf16_t *qkv, int n, int row_stride,
                                            int k_col, int v_col, int n_kv, int head_dim, int block_size, int fp8,
                                            const int32_t *slot_mapping, cudaStream_t stream)
{
    if (n < 0 || n_kv <= 0 || head_dim <= 0 || block_size <= 0 || k_col < 0 || v_col < 0 ||
        k_col + n_kv * head_dim > row_stride || v_col + n_kv * head_dim > row_stride || !sits_k_aligned16(k_cache) ||
        !sits_k_aligned16(v_cache))
        return SITS_ERR_INVALID;
    if (n == 0) return SITS_OK;
    int threads = sits_k_row_threads(2LL * n_kv * 32, 256);
    size_t qb = sits_k_kv_i8_q_bytes(block_size, n_kv, head_dim), ub = sits_k_kv_i8_unit_bytes(block_size, n_kv, head_dim);
    unsigned char *kc = static_cast<unsigned char *>(k_cache), *vc = static_cast<unsigned char *>(v_cache);
    if (fp8)
        kv_write_q8_kernel<true><<<n, threads, 0, stream>>>(kc, vc, qkv, row_stride, k_col, v_col, n_kv, head_dim, block_size,
                                                            qb, ub, slot_mapping);
    else
        kv_write_q8_kernel<false><<<n, threads, 0, stream>>>(kc, vc, qkv, row_stride, k_col, v_col, n_kv, head_dim, block_size,
                                                             qb, ub, slot_mapping);
    return SITS_K_LAUNCH_STATUS();
}
