/* dtype.c -- dtype names, sizes and host conversions to fp32. */
#include "util/dtype.h"

#include <math.h>

static const struct { const char *name; size_t size; } dt_info[SITS_DT_COUNT] = {
    [SITS_DT_F32] = { "F32", 4 }, [SITS_DT_F16] = { "F16", 2 }, [SITS_DT_BF16] = { "BF16", 2 },
    [SITS_DT_F64] = { "F64", 8 }, [SITS_DT_F8_E4M3] = { "F8_E4M3", 1 }, [SITS_DT_F8_E5M2] = { "F8_E5M2", 1 },
    [SITS_DT_I8] = { "I8", 1 }, [SITS_DT_U8] = { "U8", 1 }, [SITS_DT_I16] = { "I16", 2 }, [SITS_DT_U16] = { "U16", 2 },
    [SITS_DT_I32] = { "I32", 4 }, [SITS_DT_U32] = { "U32", 4 }, [SITS_DT_I64] = { "I64", 8 }, [SITS_DT_U64] = { "U64", 8 },
    [SITS_DT_BOOL] = { "BOOL", 1 },
};

size_t sits_dtype_size(sits_dtype_t dt) { return (unsigned)dt < SITS_DT_COUNT ? dt_info[dt].size : 0; }
const char *sits_dtype_name(sits_dtype_t dt) { return (unsigned)dt < SITS_DT_COUNT ? dt_info[dt].name : "?"; }

int sits_dtype_from_name(const char *name)
{
    for (int i = 0; i < SITS_DT_COUNT; i++)
        if (!strcmp(name, dt_info[i].name)) return i;
    return -1;
}

float sits_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0) {
        if (man == 0) u = sign;
        else { /* subnormal: value = man * 2^-24 */
            float f = ldexpf((float)man, -24);
            return sign ? -f : f;
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 112) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t sits_f32_to_f16(float f)
{
    /* Round to nearest even via the hardware-free path: scale into the half range. */
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000;
    float a = fabsf(f);
    if (isnan(f)) return (uint16_t)(sign | 0x7e00);
    if (a >= 65520.0f) return (uint16_t)(sign | 0x7c00);
    if (a < 6.103515625e-05f) { /* subnormal or zero: units of 2^-24 */
        float q = nearbyintf(a * 16777216.0f);
        return (uint16_t)(sign | (uint16_t)q);
    }
    int e;
    float m = frexpf(a, &e);             /* a = m * 2^e, m in [0.5, 1) */
    float q = nearbyintf(m * 2048.0f);   /* 11 significant bits */
    if (q >= 2048.0f) { q = 1024.0f; e++; }
    uint32_t exp = (uint32_t)(e - 1 + 15), man = (uint32_t)q - 1024;
    return (uint16_t)(sign | (exp << 10) | man);
}

float sits_f8e4m3_to_f32(uint8_t v)
{
    int sign = v >> 7, exp = (v >> 3) & 0xf, man = v & 7;
    float f;
    if (exp == 15 && man == 7) return NAN;
    if (exp == 0) f = ldexpf((float)man, -9);            /* subnormal: man/8 * 2^-6 */
    else f = ldexpf(1.0f + (float)man / 8.0f, exp - 7);
    return sign ? -f : f;
}

/* On the bits: NaN -> 0x7f; |f| >= 448 (0x43e00000) -> +-448; |f| < 2^-6 (0x3c800000): subnormal, units of
 * 2^-9, rounded by nearbyintf; otherwise the float's exponent and top 3 mantissa bits are the code once
 * rounded to nearest even at mantissa bit 20 (a carry moves into the exponent), rebased from bias 127 to 7. */
static inline uint8_t f32_to_f8e4m3(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return 0x7f;
    if (a >= 0x43e00000u) return (uint8_t)(sign | 0x7e);   /* satfinite */
    if (a < 0x3c800000u) {
        float x;
        memcpy(&x, &a, 4);
        return (uint8_t)(sign | (uint8_t)nearbyintf(x * 512.0f));   /* 8: the smallest normal, whose code is 8 */
    }
    a += 0x7ffffu + ((a >> 20) & 1u);
    return (uint8_t)(sign | ((a >> 20) - (120u << 3)));
}

uint8_t sits_f32_to_f8e4m3(float f) { return f32_to_f8e4m3(f); }

void sits_fp8_quantize_row(uint8_t *q, const float *x, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++) q[i] = f32_to_f8e4m3(x[i] / scale);
}

int sits_convert_to_f32(sits_dtype_t dt, const void *src, float *dst, size_t n)
{
    const unsigned char *s = src;
    switch (dt) {
    case SITS_DT_F32: memcpy(dst, src, n * 4); return 0;
    case SITS_DT_BF16:
        for (size_t i = 0; i < n; i++) { uint16_t h; memcpy(&h, s + 2 * i, 2); dst[i] = sits_bf16_to_f32(h); }
        return 0;
    case SITS_DT_F16:
        for (size_t i = 0; i < n; i++) { uint16_t h; memcpy(&h, s + 2 * i, 2); dst[i] = sits_f16_to_f32(h); }
        return 0;
    case SITS_DT_F64:
        for (size_t i = 0; i < n; i++) { double d; memcpy(&d, s + 8 * i, 8); dst[i] = (float)d; }
        return 0;
    case SITS_DT_F8_E4M3:
        for (size_t i = 0; i < n; i++) dst[i] = sits_f8e4m3_to_f32(s[i]);
        return 0;
    default:
        return -1;
    }
}
