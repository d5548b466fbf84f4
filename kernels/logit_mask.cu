/* logit_mask.cu -- [structured output] the allowed-token bitmask applied to the logits before sampling.
 * logits: [*, v_count] fp32 (this rank's vocabulary shard, ids v_start ..); masks: [n_masks, words] uint32
 * over the whole vocabulary (bit id & 31 of word id >> 5; 1 = allowed); rows: [n_masks] the logits row of
 * each mask. Grid (ceil(v_count / 256), n_masks), one thread per logit; disallowed logits become -inf,
 * exactly as sits_backend_cpu_logit_mask (src/backend/cpu.c). */
#include "kernels/common.cuh"

#define LM_THREADS 256

static __global__ void logit_mask_kernel(float *logits, int v_start, int v_count, const uint32_t *masks, int words,
                                         const int32_t *rows)
{
    int k = blockIdx.y;
    int i = blockIdx.x * LM_THREADS + threadIdx.x;
    if (i >= v_count) return;
    int64_t id = (int64_t)v_start + i;
    const uint32_t *m = masks + (size_t)k * words;
    if (id >= (int64_t)words * 32 || !((m[id >> 5] >> (id & 31)) & 1u))
        logits[(size_t)rows[k] * v_count + i] = -__int_as_float(0x7f800000);
}

extern "C" sits_status_t sits_k_logit_mask(float *logits, int v_start, int v_count, const uint32_t *masks, int words,
                                           const int32_t *rows, int n_masks, cudaStream_t stream)
{
    if (v_count < 0 || words < 0 || n_masks < 0 || n_masks > 65535) return SITS_ERR_INVALID;
    if (v_count == 0 || n_masks == 0) return SITS_OK;
    dim3 grid((unsigned)((v_count + LM_THREADS - 1) / LM_THREADS), (unsigned)n_masks);
    logit_mask_kernel<<<grid, LM_THREADS, 0, stream>>>(logits, v_start, v_count, masks, words, rows);
    return SITS_K_LAUNCH_STATUS();
}
