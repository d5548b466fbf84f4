/* dummy.cu -- [dummy] --load-format dummy's weights drawn on the device, so that a 70B-shaped model need not be
 * generated on the host and copied (68 GiB of FP8 at ~1 GB/s). The values are src/util/dummy.h's, repeated here
 * as device functions: the same integer hash, the same two fp32 roundings ((u - 0.5) then * 0.1, no contraction:
 * explicit _rn intrinsics), then
 *   bf16: round to nearest even (the host's sits_f32_to_bf16 of the same value);
 *   fp8:  per row scale = absmax over the row's cols [0, cols) / 448 (1 for an all-zero row), q = e4m3(v / scale)
 *         with an IEEE division and __NV_SATFINITE (common.cuh's definition, the host's sits_fp8_quantize_row).
 * tests/gpu/dummy_cuda.sh checks that a model drawn here generates the tokens of the same model drawn on the host. */
#include "kernels/common.cuh"

static __device__ __forceinline__ uint64_t dummy_splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static __device__ __forceinline__ uint64_t dummy_stream(uint64_t base, int64_t row)
{
    uint64_t rs = base ^ (uint64_t)row;
    return dummy_splitmix64(&rs);
}

static __device__ __forceinline__ float dummy_value(uint64_t stream, int64_t col)
{
    uint64_t st = stream + (uint64_t)col * 0x9e3779b97f4a7c15ull;
    float u = (float)(dummy_splitmix64(&st) >> 40) * (1.0f / 16777216.0f);   /* exact: a 24-bit integer times 2^-24 */
    return __fmul_rn(__fsub_rn(u, 0.5f), 0.1f);
}

/* dst [n, w] bf16: element (i, j) = value(row r + i, col c0 + j); grid-stride over the n * w elements */
static __global__ void dummy_bf16_kernel(sits_bf16_t *dst, uint64_t base, int64_t r, int64_t n, int64_t c0, int64_t w)
{
    const int64_t total = n * w;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = e / w, j = e - i * w;
        dst[e] = __bfloat16_as_ushort(__float2bfloat16_rn(dummy_value(dummy_stream(base, r + i), c0 + j)));
    }
}

/* one block a row (grid-stride over rows): q [n, w] E4M3, s [n] */
static __global__ void dummy_fp8_kernel(uint8_t *q, float *s, uint64_t base, int64_t r, int64_t n, int64_t cols, int64_t c0,
                                        int64_t w)
{
    for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
        const uint64_t rs = dummy_stream(base, r + i);
        float mx = 0.0f;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) mx = fmaxf(mx, fabsf(dummy_value(rs, j)));
        const float sc = sits_k_fp8_scale(sits_k_block_max(mx));
        if (threadIdx.x == 0) s[i] = sc;
        uint8_t *qr = q + i * w;
        for (int64_t j = threadIdx.x; j < w; j += blockDim.x)
            qr[j] = (uint8_t)__nv_cvt_float_to_fp8(__fdiv_rn(dummy_value(rs, c0 + j), sc), __NV_SATFINITE, __NV_E4M3);
        __syncthreads();   /* sits_k_block_max's shared slots are written again by the next row */
    }
}

extern "C" sits_status_t sits_k_dummy_rows_bf16(sits_bf16_t *dst, uint64_t base, int64_t r, int64_t n, int64_t c0, int64_t w,
                                               cudaStream_t stream)
{
    if (n < 0 || w < 0 || c0 < 0) return SITS_ERR_INVALID;
    if (n == 0 || w == 0) return SITS_OK;
    int64_t blocks = (n * w + 255) / 256;
    dummy_bf16_kernel<<<(unsigned)(blocks < 16384 ? blocks : 16384), 256, 0, stream>>>(dst, base, r, n, c0, w);
    return cudaGetLastError() == cudaSuccess ? SITS_OK : SITS_ERR_CUDA;
}

extern "C" sits_status_t sits_k_dummy_rows_fp8(uint8_t *q, float *s, uint64_t base, int64_t r, int64_t n, int64_t cols,
                                              int64_t c0, int64_t w, cudaStream_t stream)
{
    if (n < 0 || w < 0 || c0 < 0 || c0 + w > cols) return SITS_ERR_INVALID;
    if (n == 0 || w == 0) return SITS_OK;
    dummy_fp8_kernel<<<(unsigned)(n < 16384 ? n : 16384), 256, 0, stream>>>(q, s, base, r, n, cols, c0, w);
    return cudaGetLastError() == cudaSuccess ? SITS_OK : SITS_ERR_CUDA;
}
