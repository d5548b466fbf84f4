/* fuzz_kv_shard.c -- libFuzzer target: the compressed KV shard deserialisers of src/kv/shard.h
 * (sits_kv_shard_peek, sits_kv_shard_unpack, sits_kv_shard_unpack_paged), what a rank runs on a
 * shard received from another rank or read back from an offload tier.
 * Input byte 0: bit 0 set -> the harness rewrites both CRCs (payload, then header) to match, so
 * mutations reach the checks behind them; bit 1 -> also unpack into paged storage. The rest is the
 * shard (copied to an exact-size heap buffer).
 * Contract checked: peek and unpack agree; an accepted shard has sane ranges, decodes to finite
 * values when int8 (scales are validated; q is in [-127, 127]), and unpacking never writes past the
 * arrays sized from its desc (ASan). Outputs are capped at 4 MiB.
 * Known finding (tests/fuzz/findings/kv_shard-int8-scale-overflow): a scale in (FLT_MAX / 127, FLT_MAX]
 * passes the check and dequantises to inf; SITS_FUZZ_SKIP_KNOWN=1 skips that check. */
#include "fuzz_common.h"
#include "util/le.h"
#include "kv/shard.h"
#include <math.h>

enum { HDR = SITS_KV_SHARD_HEADER_BYTES };
static const size_t MAX_OUT_BYTES = 4u << 20;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    fuzz_log_quiet();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    size_t n = size - 1;
    unsigned char *buf = malloc(n ? n : 1);
    if (!buf) return 0;
    memcpy(buf, data + 1, n);
    if ((data[0] & 1) && n >= HDR) {
        uint64_t stored = sits_le_get32(buf + 48) | (uint64_t)sits_le_get32(buf + 52) << 32;
        if (stored <= n - HDR) sits_le_put32(buf + 64, sits_kv_crc32(0, buf + HDR, (size_t)stored));
        sits_le_put32(buf + 92, sits_kv_crc32(0, buf, 92));
    }
    sits_kv_shard_desc_t d, d2;
    sits_kv_codec_t codec;
    sits_status_t ps = sits_kv_shard_peek(buf, n, &d, &codec);
    if (ps == SITS_OK) {
        FUZZ_ASSERT(d.l0 >= 0 && d.l1 > d.l0 && d.h0 >= 0 && d.h1 > d.h0 && d.t0 >= 0 && d.t1 > d.t0 && d.head_dim > 0);
        FUZZ_ASSERT(codec == SITS_KV_CODEC_NONE || codec == SITS_KV_CODEC_LZ4);
        size_t elems = (size_t)(d.l1 - d.l0) * (size_t)(d.t1 - d.t0) * (size_t)(d.h1 - d.h0) * (size_t)d.head_dim;
        FUZZ_ASSERT(sits_kv_shard_raw_bytes(&d) > 0);
        if (elems <= MAX_OUT_BYTES / sizeof(float)) {
            float *k = malloc(sizeof(float) * elems), *v = malloc(sizeof(float) * elems);
            if (k && v && sits_kv_shard_unpack(buf, n, 1, &d2, k, v) == SITS_OK) {
                FUZZ_ASSERT(d2.l0 == d.l0 && d2.l1 == d.l1 && d2.h0 == d.h0 && d2.h1 == d.h1 && d2.t0 == d.t0 &&
                            d2.t1 == d.t1 && d2.head_dim == d.head_dim && d2.dtype == d.dtype);
                if (d.dtype == SITS_KV_SHARD_INT8 && !getenv("SITS_FUZZ_SKIP_KNOWN"))
                    for (size_t i = 0; i < elems; i++) FUZZ_ASSERT(isfinite(k[i]) && isfinite(v[i]));
                if (data[0] & 2) {
                    /* paged: block size 4, the shard's heads at head0 = h0 of a pool of h1 heads */
                    int L = d.l1 - d.l0, bs = 4, nb = (d.t1 + bs - 1) / bs + 1, H = d.h1;
                    size_t per_layer = (size_t)nb * bs * (size_t)H * (size_t)d.head_dim;
                    if (per_layer * (size_t)L <= MAX_OUT_BYTES / sizeof(float) && L <= 64) {
                        float *kc[64], *vc[64];
                        int32_t *table = malloc(sizeof(int32_t) * (size_t)nb);
                        for (int b = 0; b < nb; b++) table[b] = nb - 1 - b;
                        for (int l = 0; l < L; l++) {
                            kc[l] = calloc(per_layer, sizeof(float));
                            vc[l] = calloc(per_layer, sizeof(float));
                        }
                        sits_kv_paged_t pg = { .block_size = bs, .n_blocks = nb, .n_kv_heads = H, .head0 = 0,
                                               .block_table = table, .n_table = nb };
                        FUZZ_ASSERT(sits_kv_shard_unpack_paged(buf, n, 1, kc, vc, L, &pg, &d2) == SITS_OK);
                        /* spot check: paged slot of (layer 0, t0, h0, 0) equals the dense value */
                        int t = d.t0;
                        size_t off = ((size_t)table[t / bs] * bs + (size_t)(t % bs)) * H * d.head_dim +
                                     (size_t)d.h0 * d.head_dim;
                        FUZZ_ASSERT(!memcmp(&kc[0][off], &k[0], sizeof(float)) && !memcmp(&vc[0][off], &v[0], sizeof(float)));
                        for (int l = 0; l < L; l++) { free(kc[l]); free(vc[l]); }
                        free(table);
                    }
                }
            }
            free(k);
            free(v);
        }
    } else {
        float dummy[1];
        FUZZ_ASSERT(sits_kv_shard_unpack(buf, n, 1, &d2, dummy, dummy) != SITS_OK);
    }
    free(buf);
    return 0;
}
