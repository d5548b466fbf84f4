/* quant.h -- int8 KV quantisation with one fp32 scale per (token, head) row: the host reference.
 *
 * A row is the head_dim values of one head of one token. For a row x[dim]:
 *   scale = max_i |x_i| / 127          (0 for an all-zero row)
 *   q_i   = clamp(round(x_i / scale), -127, 127)   round: to nearest, ties to even
 *   x'_i  = q_i * scale                 so |x_i - x'_i| <= scale / 2
 * -128 is never produced. Rows hold finite values only: a row with a NaN or an infinity is refused
 * (SITS_ERR_INVALID) because its scale would poison every value of the row. */
#ifndef SITS_KV_QUANT_H
#define SITS_KV_QUANT_H

#include <stddef.h>
#include <stdint.h>
#include "util/status.h"

/* One row: q[dim], *scale_p. SITS_ERR_INVALID (nothing logged: callers say which row) when x holds
 * a non-finite value; q and *scale_p are then unspecified. */
sits_status_t sits_kv_quant_row_i8(const float *x, int dim, int8_t *q, float *scale_p);

/* rows x dim values, row-major: q[rows, dim], scales[rows]. Logs the first bad row. */
sits_status_t sits_kv_quant_i8(const float *x, size_t rows, int dim, int8_t *q, float *scales);

/* x[rows, dim] = q * scales[row]. */
void sits_kv_dequant_i8(const int8_t *q, const float *scales, size_t rows, int dim, float *x);

#endif
