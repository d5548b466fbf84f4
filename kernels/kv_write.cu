/* kv_write.cu -- scatter this step's K and V rows into the paged cache.
 * qkv: [n, row_stride] bf16 with K at columns k_col .. k_col + kv_dim and V at v_col ..;
 * k_cache, v_cache: [n_slots, kv_dim] bf16 (= [n_blocks, block_size, n_kv_heads, head_dim]);
 * slot_mapping: [n] int32, -1 = skip (padding token). One block per token. */
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
