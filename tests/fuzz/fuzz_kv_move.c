/* fuzz_kv_move.c -- libFuzzer target: the KV move message deserialiser of src/kv/move.h
 * (sits_kv_move_unpack), what a rank of a data-parallel replica or of the decode group of
 * --disaggregate runs on bytes received from another rank.
 * Input: byte 0 flags -- bit 0: the harness rewrites both CRCs (payload, then header) to match, so
 * mutations reach the checks behind them; bit 1: the expectation is read from the message's own
 * header (small ranges only), so accepted messages reach the scatter. Otherwise bytes 1..7 pick the
 * expectation (dtype, layers, heads, blocks, block size, head dim, the receiver's head window).
 * The rest is the message, copied to an exact-size heap buffer.
 * Contract checked: an accepted message is exactly sits_kv_move_msg_bytes(expect) long and its header
 * carries the expectation; the scatter stays inside the destination's block units (ASan: the
 * destination is allocated to the exact size); a rejected message leaves the destination untouched. */
#include "fuzz_common.h"
#include "util/le.h"
#include "backend/backend.h"
#include "kv/move.h"
#include "kv/shard.h"

enum { HDR = SITS_KV_MOVE_HEADER_BYTES };
static const size_t MAX_DST_BYTES = 4u << 20;
static const sits_dtype_t DTS[4] = { SITS_DT_F32, SITS_DT_BF16, SITS_DT_I8, SITS_DT_F8_E4M3 }; /* [fp8 kv] code 3 */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    fuzz_log_quiet();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 8) return 0;
    const uint8_t flags = data[0];
    const uint8_t *pick = data + 1;
    size_t n = size - 8;
    unsigned char *buf = malloc(n ? n : 1);
    if (!buf) return 0;
    memcpy(buf, data + 8, n);
    if ((flags & 1) && n >= HDR) {
        uint64_t pay = sits_le_get32(buf + 40) | (uint64_t)sits_le_get32(buf + 44) << 32;
        if (pay <= n - HDR) sits_le_put32(buf + 52, sits_kv_crc32(0, buf + HDR, (size_t)pay));
        sits_le_put32(buf + 60, sits_kv_crc32(0, buf, 60));
    }
    sits_kv_move_desc_t e;
    int n_kv, head0;
    if ((flags & 2) && n >= HDR) { /* the message's own header, if small */
        int32_t f[7];
        for (int i = 0; i < 7; i++) f[i] = (int32_t)sits_le_get32(buf + 12 + 4 * i);
        e = (sits_kv_move_desc_t){ .l0 = f[0], .l1 = f[1], .h0 = f[2], .h1 = f[3], .n_blocks = f[4], .block_size = f[5],
                                   .head_dim = f[6], .dtype = DTS[buf[8] % 4], .move_id = sits_le_get32(buf + 48) };
        if (e.l0 < 0 || e.l0 > 64 || e.l1 < e.l0 + 1 || e.l1 > e.l0 + 4 || e.h0 < 0 || e.h0 > 7 || e.h1 < e.h0 + 1 || e.h1 > 8 || e.n_blocks < 1 ||
            e.n_blocks > 4 || e.block_size < 1 || e.block_size > 16 || e.head_dim < 1 || e.head_dim > 64) {
            free(buf);
            return 0;
        }
        head0 = pick[0] % (e.h0 + 1);
        n_kv = e.h1 - head0 + pick[1] % 3;
    } else {
        e = (sits_kv_move_desc_t){ .dtype = DTS[pick[0] % 4], .l0 = pick[1] % 4, .n_blocks = 1 + pick[2] % 3,
                                   .block_size = 1 + pick[3] % 8, .head_dim = 1 + pick[4] % 32, .move_id = 7 };
        e.l1 = e.l0 + 1 + pick[1] / 64;
        n_kv = 1 + pick[5] % 4;
        head0 = pick[6] % 3;
        e.h0 = head0 + pick[5] / 64 % n_kv;
        e.h1 = e.h0 + 1 + pick[6] / 85 % (head0 + n_kv - e.h0);
    }
    size_t ub = sits_kv_layer_block_bytes(e.dtype, e.block_size, n_kv, e.head_dim);
    size_t units = (size_t)e.n_blocks * (size_t)(e.l1 - e.l0) * 2;
    if (ub == 0 || units * ub > MAX_DST_BYTES) { free(buf); return 0; }
    size_t dbytes = units * ub;
    unsigned char *dst = malloc(dbytes), *before = malloc(dbytes);
    if (!dst || !before) { free(buf); free(dst); free(before); return 0; }
    for (size_t i = 0; i < dbytes; i++) dst[i] = (unsigned char)(i * 131u + 7u);
    memcpy(before, dst, dbytes);
    sits_status_t st = sits_kv_move_unpack(buf, n, &e, dst, n_kv, head0);
    if (st == SITS_OK) {
        FUZZ_ASSERT(n == sits_kv_move_msg_bytes(&e));
        FUZZ_ASSERT(sits_le_get32(buf) == SITS_KV_MOVE_MAGIC && sits_le_get32(buf + 48) == e.move_id);
        int32_t want[7] = { e.l0, e.l1, e.h0, e.h1, e.n_blocks, e.block_size, e.head_dim };
        for (int i = 0; i < 7; i++) FUZZ_ASSERT((int32_t)sits_le_get32(buf + 12 + 4 * i) == want[i]);
    } else {
        FUZZ_ASSERT(st == SITS_ERR_FORMAT || st == SITS_ERR_INVALID);
        FUZZ_ASSERT(memcmp(dst, before, dbytes) == 0);
    }
    free(buf);
    free(dst);
    free(before);
    return 0;
}
