/* kv_copy.cu -- [kv] paged KV blocks <-> one flat buffer, for swaps and moves (engine.c's
 * sits_engine_kv_save_blocks / load_blocks): one launch instead of a copy per (block, layer, K|V).
 *
 * Segment s = i * n_bufs + j (i < n_ids, j < n_bufs) is flat[s * seg, (s + 1) * seg) and the block
 * ids[i] of cache buffer j, bufs[j] + ids[i] * seg. One thread block per segment, 16-byte moves
 * (seg % 16 == 0, every pointer 16-byte aligned). */
#include "kernels/common.cuh"

static __global__ void kv_block_copy_kernel(unsigned char *flat, unsigned char *const *bufs, int n_bufs, const int32_t *ids,
                                            size_t seg, int to_cache)
{
    size_t s = blockIdx.x;
    int i = (int)(s / (size_t)n_bufs), j = (int)(s % (size_t)n_bufs);
    uint4 *c = reinterpret_cast<uint4 *>(bufs[j] + (size_t)ids[i] * seg);
    uint4 *f = reinterpret_cast<uint4 *>(flat + s * seg);
    size_t n16 = seg / 16;
    if (to_cache)
        for (size_t k = threadIdx.x; k < n16; k += blockDim.x) c[k] = f[k];
    else
        for (size_t k = threadIdx.x; k < n16; k += blockDim.x) f[k] = c[k];
}

extern "C" sits_status_t sits_k_kv_block_copy(void *flat, void *const *bufs, int n_bufs, const int32_t *ids, int n_ids,
                                              size_t seg, int to_cache, cudaStream_t stream)
{
    if (n_bufs <= 0 || n_ids < 0 || seg == 0 || seg % 16 || !sits_k_aligned16(flat)) return SITS_ERR_INVALID;
    if ((size_t)n_ids * (size_t)n_bufs > 0x7fffffffu) return SITS_ERR_INVALID;
    if (n_ids == 0) return SITS_OK;
    kv_block_copy_kernel<<<(unsigned)((size_t)n_ids * n_bufs), 256, 0, stream>>>(static_cast<unsigned char *>(flat),
                                                                                reinterpret_cast<unsigned char *const *>(bufs),
                                                                                n_bufs, ids, seg, to_cache);
    return SITS_K_LAUNCH_STATUS();
}
