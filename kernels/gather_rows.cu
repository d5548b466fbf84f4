/* gather_rows.cu -- out[i, :] = x[rows[i], :] (e.g. the last token of each sequence before lm_head).
 * out: [n_rows, dim] bf16; x: [*, dim] bf16; rows: [n_rows] int32. One block per output row. */
#include "kernels/common.cuh"

template <int V>
static __global__ void gather_rows_kernel(sits_bf16_t *out, const sits_bf16_t *x, const int32_t *rows, int dim)
{
    size_t i = blockIdx.x;
    sits_k_copy_row<V>(out + i * (size_t)dim, x + (size_t)rows[i] * dim, dim);
}

extern "C" sits_status_t sits_k_gather_rows(sits_bf16_t *out, const sits_bf16_t *x, const int32_t *rows, int n_rows, int dim,
                                            cudaStream_t stream)
{
    if (n_rows < 0 || dim <= 0) return SITS_ERR_INVALID;
    if (n_rows == 0) return SITS_OK;
    bool vec = sits_k_vec8_ok(out, dim, dim) && sits_k_aligned16(x);
    int threads = sits_k_row_threads(vec ? dim / 8 : dim, 256);
    if (vec) gather_rows_kernel<8><<<n_rows, threads, 0, stream>>>(out, x, rows, dim);
    else gather_rows_kernel<1><<<n_rows, threads, 0, stream>>>(out, x, rows, dim);
    return SITS_K_LAUNCH_STATUS();
}
