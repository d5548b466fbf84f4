/* move.c -- the KV move message; see move.h for the wire format. */
#include "kv/move.h"
#include "util/le.h"
#include "kv/shard.h"
#include "backend/backend.h"
#include "util/log.h"

#include <string.h>

void sits_kv_move_heads(int nkv, int tp, int rank, int *h0_p, int *h1_p)
{
    if (tp <= nkv) {
        *h0_p = rank * (nkv / tp);
        *h1_p = *h0_p + nkv / tp;
    } else {
        *h0_p = rank / (tp / nkv);
        *h1_p = *h0_p + 1;
    }
}

int sits_kv_move_sender_of(int nkv, int tp, int h)
{
    return tp <= nkv ? h / (nkv / tp) : h * (tp / nkv);
}

static int dtype_code(sits_dtype_t dt)
{
    return dt == SITS_DT_F32 ? 0 : dt == SITS_DT_BF16 ? 1 : dt == SITS_DT_I8 ? 2 : dt == SITS_DT_F8_E4M3 ? 3 : -1;
}

size_t sits_kv_move_slice_bytes(sits_dtype_t dt, int bs, int n_heads, int hd)
{
    size_t rows = (size_t)bs * (size_t)n_heads;
    if (dt == SITS_DT_F32 || dt == SITS_DT_BF16) return rows * (size_t)hd * sits_dtype_size(dt);
    if (sits_kv_dtype_is_q8(dt)) return rows * (size_t)hd + rows * 4;
    return 0;
}

static int desc_ok(const sits_kv_move_desc_t *d)
{
    return d->l0 >= 0 && d->l1 > d->l0 && d->h0 >= 0 && d->h1 > d->h0 && d->n_blocks > 0 && d->block_size > 0 &&
           d->head_dim > 0 && dtype_code(d->dtype) >= 0 && d->l1 - d->l0 <= (1 << 16) && d->h1 - d->h0 <= (1 << 16) &&
           d->n_blocks <= (1 << 24) && d->block_size <= (1 << 16) && d->head_dim <= (1 << 16);
}

static size_t payload_bytes(const sits_kv_move_desc_t *d)
{
    return (size_t)d->n_blocks * (size_t)(d->l1 - d->l0) * 2 *
           sits_kv_move_slice_bytes(d->dtype, d->block_size, d->h1 - d->h0, d->head_dim);
}

size_t sits_kv_move_msg_bytes(const sits_kv_move_desc_t *d)
{
    return desc_ok(d) ? SITS_KV_MOVE_HEADER_BYTES + payload_bytes(d) : 0;
}

/* Copy heads [h0, h1) (global) between a block unit of n_kv heads from head0 and a dense slice
 * of H = h1 - h0 heads. to_slice: unit -> slice, else slice -> unit. */
static void copy_slice(const sits_kv_move_desc_t *d, unsigned char *unit, int n_kv, int head0, unsigned char *slice,
                       int to_slice)
{
    int bs = d->block_size, hd = d->head_dim, H = d->h1 - d->h0, off = d->h0 - head0;
    size_t es = sits_dtype_size(d->dtype), row = (size_t)H * hd * es;
    for (int s = 0; s < bs; s++) {
        unsigned char *u = unit + ((size_t)s * n_kv + off) * hd * es, *x = slice + (size_t)s * row;
        if (to_slice) memcpy(x, u, row);
        else memcpy(u, x, row);
    }
    if (!sits_kv_dtype_is_q8(d->dtype)) return;
    unsigned char *us = unit + sits_kv_i8_q_bytes(bs, n_kv, hd), *xs = slice + (size_t)bs * H * hd;
    for (int s = 0; s < bs; s++) {
        unsigned char *u = us + ((size_t)s * n_kv + off) * 4, *x = xs + (size_t)s * H * 4;
        if (to_slice) memcpy(x, u, (size_t)H * 4);
        else memcpy(u, x, (size_t)H * 4);
    }
}

sits_status_t sits_kv_move_pack(const sits_kv_move_desc_t *d, const void *src, int n_kv, int head0, void *out, size_t cap,
                                size_t *len_p)
{
    size_t need = sits_kv_move_msg_bytes(d);
    if (!need || cap < need || d->h0 < head0 || d->h1 > head0 + n_kv) {
        SITS_ERROR(SITS_SUB_KV, "kv move pack: bad request (heads %d..%d of %d..%d, %zu of %zu bytes)", d->h0, d->h1, head0,
                   head0 + n_kv, cap, need);
        return SITS_ERR_INVALID;
    }
    size_t ub = sits_kv_layer_block_bytes(d->dtype, d->block_size, n_kv, d->head_dim);
    size_t sb = sits_kv_move_slice_bytes(d->dtype, d->block_size, d->h1 - d->h0, d->head_dim);
    size_t n_units = (size_t)d->n_blocks * (size_t)(d->l1 - d->l0) * 2;
    unsigned char *h = out, *p = h + SITS_KV_MOVE_HEADER_BYTES;
    for (size_t i = 0; i < n_units; i++)
        copy_slice(d, (unsigned char *)src + i * ub, n_kv, head0, p + i * sb, 1);
    size_t pay = n_units * sb;
    memset(h, 0, SITS_KV_MOVE_HEADER_BYTES);
    sits_le_put32(h, SITS_KV_MOVE_MAGIC);
    sits_le_put16(h + 4, SITS_KV_MOVE_VERSION);
    sits_le_put16(h + 6, SITS_KV_MOVE_HEADER_BYTES);
    h[8] = (unsigned char)dtype_code(d->dtype);
    int32_t f[7] = { d->l0, d->l1, d->h0, d->h1, d->n_blocks, d->block_size, d->head_dim };
    for (int i = 0; i < 7; i++) sits_le_put32(h + 12 + 4 * i, (uint32_t)f[i]);
    sits_le_put64(h + 40, pay);
    sits_le_put32(h + 48, d->move_id);
    sits_le_put32(h + 52, sits_kv_crc32(0, p, pay));
    sits_le_put32(h + 60, sits_kv_crc32(0, h, 60));
    *len_p = need;
    return SITS_OK;
}

static sits_status_t reject(uint32_t id, const char *why)
{
    SITS_ERROR(SITS_SUB_KV, "kv move %u: rejected message: %s", id, why);
    return SITS_ERR_FORMAT;
}

sits_status_t sits_kv_move_unpack(const void *msg, size_t len, const sits_kv_move_desc_t *e, void *dst, int n_kv, int head0)
{
    const unsigned char *h = msg;
    size_t need = sits_kv_move_msg_bytes(e);
    if (!need || e->h0 < head0 || e->h1 > head0 + n_kv) {
        SITS_ERROR(SITS_SUB_KV, "kv move unpack: bad expectation (heads %d..%d into %d..%d)", e->h0, e->h1, head0, head0 + n_kv);
        return SITS_ERR_INVALID;
    }
    if (len < SITS_KV_MOVE_HEADER_BYTES) return reject(e->move_id, "truncated header");
    if (sits_le_get32(h) != SITS_KV_MOVE_MAGIC) return reject(e->move_id, "bad magic (no message, or the sender failed)");
    if (sits_le_get16(h + 4) != SITS_KV_MOVE_VERSION || sits_le_get16(h + 6) != SITS_KV_MOVE_HEADER_BYTES)
        return reject(e->move_id, "unknown version or header size");
    if (sits_kv_crc32(0, h, 60) != sits_le_get32(h + 60)) return reject(e->move_id, "header checksum mismatch");
    int32_t f[7];
    for (int i = 0; i < 7; i++) f[i] = (int32_t)sits_le_get32(h + 12 + 4 * i);
    int32_t want[7] = { e->l0, e->l1, e->h0, e->h1, e->n_blocks, e->block_size, e->head_dim };
    if (h[8] != dtype_code(e->dtype) || h[9] || sits_le_get16(h + 10) || sits_le_get32(h + 56) || memcmp(f, want, sizeof f) ||
        sits_le_get32(h + 48) != e->move_id)
        return reject(e->move_id, "header does not match the move (ranges, dtype, id)");
    size_t pay = payload_bytes(e);
    if (sits_le_get64(h + 40) != pay || len != need) return reject(e->move_id, "payload size mismatch");
    const unsigned char *p = h + SITS_KV_MOVE_HEADER_BYTES;
    if (sits_kv_crc32(0, p, pay) != sits_le_get32(h + 52)) return reject(e->move_id, "payload checksum mismatch");
    size_t ub = sits_kv_layer_block_bytes(e->dtype, e->block_size, n_kv, e->head_dim);
    size_t sb = sits_kv_move_slice_bytes(e->dtype, e->block_size, e->h1 - e->h0, e->head_dim);
    size_t n_units = (size_t)e->n_blocks * (size_t)(e->l1 - e->l0) * 2;
    for (size_t i = 0; i < n_units; i++)
        copy_slice(e, (unsigned char *)dst + i * ub, n_kv, head0, (unsigned char *)p + i * sb, 0);
    return SITS_OK;
}
