/* quant.c -- int8 KV quantisation per (token, head) row; see quant.h for the rule.
 *
 * Rounding uses the 1.5 * 2^23 trick (exact round-to-nearest-even for |r| < 2^22, and |r| <= 127
 * here), which the compiler can vectorise, instead of a libm call per element. */
#include "kv/quant.h"
#include "util/log.h"

#include <string.h>

#define SITS_QUANT_RND 12582912.0f   /* 1.5 * 2^23 */

/* max over |x| as integer bit patterns (for non-negative floats the integer order is the float order,
 * and NaN / inf are the patterns >= 0x7f800000): integer max vectorises where float max with NaN
 * semantics does not. Chunks of 16 with fixed trip counts vectorise at -O2 (GCC's very-cheap model). */
static uint32_t absmax_bits(const float *x, int dim)
{
    int32_t m = 0;
    int i = 0;
    for (; i + 16 <= dim; i += 16) {
        int32_t c[16];
        memcpy(c, x + i, sizeof c);
        for (int j = 0; j < 16; j++) {
            int32_t a = c[j] & 0x7fffffff;
            m = a > m ? a : m;
        }
    }
    for (; i < dim; i++) {
        int32_t a;
        memcpy(&a, x + i, 4);
        a &= 0x7fffffff;
        m = a > m ? a : m;
    }
    return (uint32_t)m;
}

/* round(x / scale) clamped to [-127, 127], still as a float (an integer value) */
static inline float quant1f(float x, float scale)
{
    float r = x / scale;
    r = (r + SITS_QUANT_RND) - SITS_QUANT_RND;
    r = r > 127.0f ? 127.0f : r;
    return r < -127.0f ? -127.0f : r;
}

sits_status_t sits_kv_quant_row_i8(const float *x, int dim, int8_t *q, float *scale_p)
{
    uint32_t mb = absmax_bits(x, dim);
    if (mb >= 0x7f800000u) return SITS_ERR_INVALID;   /* NaN or inf */
    float m;
    memcpy(&m, &mb, 4);
    float scale = m / 127.0f;
    *scale_p = scale;
    if (scale == 0.0f) {   /* an all-zero row (or one of denormals below 127 * FLT_TRUE_MIN) */
        memset(q, 0, (size_t)dim);
        return SITS_OK;
    }
    int i = 0;
    for (; i + 16 <= dim; i += 16) {
        float r[16];   /* two fixed loops (divide + round + clamp, then narrow) each vectorise */
        for (int j = 0; j < 16; j++) r[j] = quant1f(x[i + j], scale);
        for (int j = 0; j < 16; j++) q[i + j] = (int8_t)(int32_t)r[j];
    }
    for (; i < dim; i++) q[i] = (int8_t)(int32_t)quant1f(x[i], scale);
    return SITS_OK;
}

sits_status_t sits_kv_quant_i8(const float *x, size_t rows, int dim, int8_t *q, float *scales)
{
    for (size_t r = 0; r < rows; r++) {
        const size_t o = r * (size_t)dim;
        if (sits_kv_quant_row_i8(x + o, dim, q + o, &scales[r]) != SITS_OK) {
            SITS_ERROR(SITS_SUB_KV, "int8 quantisation: row %zu holds a non-finite value", r);
            return SITS_ERR_INVALID;
        }
    }
    return SITS_OK;
}

void sits_kv_dequant_i8(const int8_t *q, const float *scales, size_t rows, int dim, float *x)
{
    for (size_t r = 0; r < rows; r++) {
        const float s = scales[r];
        const int8_t *qr = q + r * (size_t)dim;
        float *xr = x + r * (size_t)dim;
        int i = 0;
        for (; i + 16 <= dim; i += 16)
            for (int j = 0; j < 16; j++) xr[i + j] = (float)qr[i + j] * s;
        for (; i < dim; i++) xr[i] = (float)qr[i] * s;
    }
}
