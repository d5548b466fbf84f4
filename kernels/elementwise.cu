/* elementwise.cu -- [families] in-place elementwise ops on flat buffers:
 *   sits_k_scale:   x [n] bf16 *= s (one rounding; Gemma's embedding scale)
 *   sits_k_softcap: x [n] fp32 or bf16 = cap * tanh(x / cap) (final-logit soft-capping), fp32 math.
 * Grid-stride loops, any size and alignment. */
#include "kernels/common.cuh"

static __global__ void scale_kernel(sits_bf16_t *x, size_t n, float s)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = sits_k_f2bf(sits_k_bf2f(x[i]) * s);
}

template <typename T>
static __global__ void softcap_kernel(T *x, size_t n, float cap)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        if constexpr (sizeof(T) == 4) x[i] = tanhf(x[i] / cap) * cap;
        else x[i] = sits_k_f2bf(tanhf(sits_k_bf2f(x[i]) / cap) * cap);
    }
}

static unsigned grid_of(size_t n)
{
    size_t blocks = (n + 255) / 256;
    return (unsigned)(blocks > 132 * 32 ? 132 * 32 : blocks);
}

extern "C" sits_status_t sits_k_scale(sits_bf16_t *x, size_t n, float s, cudaStream_t stream)
{
    if (n == 0) return SITS_OK;
    scale_kernel<<<grid_of(n), 256, 0, stream>>>(x, n, s);
    return SITS_K_LAUNCH_STATUS();
}

extern "C" sits_status_t sits_k_softcap(void *x, size_t n, int f32, float cap, cudaStream_t stream)
{
    if (!(cap > 0.0f)) return SITS_ERR_INVALID;
    if (n == 0) return SITS_OK;
    if (f32) softcap_kernel<float><<<grid_of(n), 256, 0, stream>>>(static_cast<float *>(x), n, cap);
    else softcap_kernel<sits_bf16_t><<<grid_of(n), 256, 0, stream>>>(static_cast<sits_bf16_t *>(x), n, cap);
    return SITS_K_LAUNCH_STATUS();
}
