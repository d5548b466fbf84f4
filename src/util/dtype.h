/* dtype.h -- element types of tensors (safetensors spellings) and host-side conversions. */
#ifndef SITS_UTIL_DTYPE_H
#define SITS_UTIL_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum {
    SITS_DT_F32, SITS_DT_F16, SITS_DT_BF16, SITS_DT_F64,
    SITS_DT_F8_E4M3, SITS_DT_F8_E5M2,
    SITS_DT_I8, SITS_DT_U8, SITS_DT_I16, SITS_DT_U16, SITS_DT_I32, SITS_DT_U32, SITS_DT_I64, SITS_DT_U64,
    SITS_DT_BOOL,
    SITS_DT_COUNT
} sits_dtype_t;

/* Bytes per element. */
size_t sits_dtype_size(sits_dtype_t dt);
/* "BF16" etc. (safetensors names). */
const char *sits_dtype_name(sits_dtype_t dt);
/* Parse a safetensors dtype name; returns -1 when unknown. */
int sits_dtype_from_name(const char *name);

static inline float sits_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Round to nearest even (as torch does). NaN stays NaN. */
static inline uint16_t sits_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float sits_f16_to_f32(uint16_t h);
uint16_t sits_f32_to_f16(float f);
float sits_f8e4m3_to_f32(uint8_t v);
/* [fp8] fp32 -> FP8 E4M3 (OCP "fn": no infinities, max 448): round to nearest even, saturating at
 * +-448 (as CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3)); NaN -> 0x7f. */
uint8_t sits_f32_to_f8e4m3(float f);
#define SITS_FP8_E4M3_MAX 448.0f
/* [fp8] Per-row scaling (weights per output row, activations per token): scale = absmax / 448 (1 for
 * an all-zero row), q[i] = e4m3(x[i] / scale) with an IEEE fp32 division; value = q * scale. */
static inline float sits_fp8_scale(float absmax) { return absmax > 0.0f ? absmax / SITS_FP8_E4M3_MAX : 1.0f; }
void sits_fp8_quantize_row(uint8_t *q, const float *x, size_t n, float scale);

/* Convert n elements of src (dtype dt, possibly unaligned) to fp32. F32/F16/BF16/F8_E4M3/F64 only. */
int sits_convert_to_f32(sits_dtype_t dt, const void *src, float *dst, size_t n);

#endif
