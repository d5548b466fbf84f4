/* embed.cu -- vocab-parallel embedding gather.
 * out: [n, dim] bf16; table: [v_count, dim] bf16 (this rank's rows v_start .. v_start + v_count);
 * tokens: [n] int32. Rows of tokens outside the shard are zero (the all-reduce sums the shards).
 * One block per token. */
#include "kernels/common.cuh"

template <int V>
static __global__ void embed_kernel(sits_bf16_t *out, const sits_bf16_t *table, const int32_t *tokens, int dim,
                                    int v_start, int v_count)
{
    size_t t = blockIdx.x;
    int local = tokens[t] - v_start;
    sits_bf16_t *o = out + t * (size_t)dim;
    if (local >= 0 && local < v_count) sits_k_copy_row<V>(o, table + (size_t)local * dim, dim);
    else sits_k_zero_row<V>(o, dim);
}

extern "C" sits_status_t sits_k_embed(sits_bf16_t *out, const sits_bf16_t *table, const int32_t *tokens, int n, int dim,
                                      int v_start, int v_count, cudaStream_t stream)
{
    if (n < 0 || dim <= 0 || v_count < 0) return SITS_ERR_INVALID;
    if (n == 0) return SITS_OK;
    bool vec = sits_k_vec8_ok(out, dim, dim) && sits_k_aligned16(table);
    int threads = sits_k_row_threads(vec ? dim / 8 : dim, 256);
    if (vec) embed_kernel<8><<<n, threads, 0, stream>>>(out, table, tokens, dim, v_start, v_count);
    else embed_kernel<1><<<n, threads, 0, stream>>>(out, table, tokens, dim, v_start, v_count);
    return SITS_K_LAUNCH_STATUS();
}
