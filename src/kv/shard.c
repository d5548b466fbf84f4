/* shard.c -- the compressed KV shard (format in shard.h): pack from dense or paged host fp32,
 * validate completely, then unpack to dense or paged host fp32.
 *
 * Both layouts are read through one row accessor: for (layer index i, K|V, token index j) it gives
 * the H * D contiguous floats of heads [h0, h1) -- contiguous in the dense [L][T][H][D] layout and in
 * a paged slot [n_kv_heads][D] alike. LZ4 frames are (de)compressed with OpenMP over frames when
 * threads > 1; the CRC runs on one thread. */
#include "kv/shard.h"
#include "util/le.h"
#include "kv/quant.h"
#include "util/dtype.h"
#include "util/log.h"

#include <lz4frame.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the KV shard payload is written in host order, which must be little-endian"
#endif

#define HDR SITS_KV_SHARD_HEADER_BYTES
#define MAX_RAW_BYTES ((uint64_t)1 << 40)        /* 1 TiB: keeps every size product far from overflow */
#define MIN_FRAME_BYTES 4096u
#define MAX_FRAME_BYTES ((uint32_t)1 << 26)

/* ---- CRC-32, slice-by-8; the tables are built on the stack per call (about 4k operations) so that
 * the module keeps no global state ---- */

uint32_t sits_kv_crc32(uint32_t crc, const void *p_, size_t n)
{
    uint32_t t[8][256];
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
        t[0][i] = c;
    }
    for (int s = 1; s < 8; s++)
        for (int i = 0; i < 256; i++) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
    const unsigned char *p = p_;
    crc = ~crc;
    while (n >= 8) {
        uint32_t a = crc ^ sits_le_get32(p), b = sits_le_get32(p + 4);
        crc = t[7][a & 0xff] ^ t[6][(a >> 8) & 0xff] ^ t[5][(a >> 16) & 0xff] ^ t[4][a >> 24] ^
              t[3][b & 0xff] ^ t[2][(b >> 8) & 0xff] ^ t[1][(b >> 16) & 0xff] ^ t[0][b >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xff];
    return ~crc;
}

/* ---- geometry ---- */

typedef struct {
    size_t L, T, H, D;
    size_t rows;          /* L * 2 * T * H: (token, head) rows of the shard */
    size_t raw;           /* raw payload bytes */
} geom_t;

static int dtype_ok(int dt) { return dt == SITS_KV_SHARD_INT8 || dt == SITS_KV_SHARD_FP32 || dt == SITS_KV_SHARD_BF16; }

/* why_p: the reason when invalid (for the caller's log line). */
static int geom_of(const sits_kv_shard_desc_t *d, geom_t *g, const char **why_p)
{
    if (d->l0 < 0 || d->l1 <= d->l0) { *why_p = "empty or negative layer range"; return 0; }
    if (d->h0 < 0 || d->h1 <= d->h0) { *why_p = "empty or negative head range"; return 0; }
    if (d->t0 < 0 || d->t1 <= d->t0) { *why_p = "empty or negative token range"; return 0; }
    if (d->head_dim < 1) { *why_p = "head_dim < 1"; return 0; }
    if (!dtype_ok((int)d->dtype)) { *why_p = "unknown dtype"; return 0; }
    /* each factor < 2^31, so products of two fit; check the total against MAX_RAW_BYTES step by step */
    uint64_t L = (uint64_t)(d->l1 - d->l0), T = (uint64_t)(d->t1 - d->t0), H = (uint64_t)(d->h1 - d->h0);
    uint64_t D = (uint64_t)d->head_dim;
    uint64_t rows = L * 2 * T;
    if (rows > MAX_RAW_BYTES || rows * H > MAX_RAW_BYTES) { *why_p = "shard too large"; return 0; }
    rows *= H;
    if (rows * D > MAX_RAW_BYTES / 4) { *why_p = "shard too large"; return 0; }
    uint64_t elems = rows * D;
    uint64_t raw = d->dtype == SITS_KV_SHARD_INT8 ? rows * 4 + elems : elems * (d->dtype == SITS_KV_SHARD_FP32 ? 4 : 2);
    *g = (geom_t){ .L = L, .T = T, .H = H, .D = D, .rows = rows, .raw = raw };
    return 1;
}

static LZ4F_preferences_t lz4_prefs(size_t frame_raw)
{
    LZ4F_preferences_t p;
    memset(&p, 0, sizeof p);
    p.frameInfo.blockSizeID = LZ4F_max64KB;
    p.frameInfo.blockMode = LZ4F_blockIndependent;
    p.frameInfo.contentChecksumFlag = LZ4F_noContentChecksum;  /* the shard crc covers it */
    p.frameInfo.contentSize = frame_raw;
    p.compressionLevel = 0;   /* fast */
    return p;
}

static size_t n_frames_of(size_t raw, size_t fb) { return (raw + fb - 1) / fb; }

size_t sits_kv_shard_raw_bytes(const sits_kv_shard_desc_t *desc)
{
    geom_t g;
    const char *why;
    return geom_of(desc, &g, &why) ? g.raw : 0;
}

size_t sits_kv_shard_size_bound(const sits_kv_shard_desc_t *desc, sits_kv_codec_t codec)
{
    geom_t g;
    const char *why;
    if (!geom_of(desc, &g, &why)) return 0;
    if (codec == SITS_KV_CODEC_NONE) return HDR + g.raw;
    if (codec != SITS_KV_CODEC_LZ4) return 0;
    const size_t fb = SITS_KV_SHARD_FRAME_BYTES, nf = n_frames_of(g.raw, fb);
    LZ4F_preferences_t p = lz4_prefs(fb);
    size_t full = LZ4F_compressFrameBound(fb, &p);
    return HDR + 4 * nf + nf * full;   /* a short last frame is bounded by a full one */
}

/* ---- the row accessor over dense or paged storage ---- */

typedef struct {
    float *const *k, *const *v;   /* dense: k[0], v[0] are [L][T][H][D]; paged: per layer buffers */
    const sits_kv_paged_t *pg;    /* NULL: dense */
    const sits_kv_shard_desc_t *d;
    const geom_t *g;
} rows_t;

/* The H * D floats of (layer index i, kv 0|1, token index j). */
static float *row_at(const rows_t *r, size_t i, int kv, size_t j)
{
    const geom_t *g = r->g;
    if (!r->pg) {
        float *base = kv ? r->v[0] : r->k[0];
        return base + ((i * g->T + j) * g->H) * g->D;
    }
    const sits_kv_paged_t *pg = r->pg;
    size_t p = (size_t)r->d->t0 + j;
    size_t slot = (size_t)pg->block_table[p / (size_t)pg->block_size] * (size_t)pg->block_size + p % (size_t)pg->block_size;
    float *base = kv ? r->v[i] : r->k[i];
    return base + (slot * (size_t)pg->n_kv_heads + (size_t)(r->d->h0 - pg->head0)) * g->D;
}

/* Paged storage able to hold every token and head of d: SITS_ERR_INVALID with a reason otherwise. */
static sits_status_t check_paged(const sits_kv_shard_desc_t *d, const sits_kv_paged_t *pg)
{
    if (!pg || !pg->block_table || pg->block_size < 1 || pg->n_blocks < 1 || pg->n_kv_heads < 1 || pg->head0 < 0 ||
        pg->n_table < 0) {
        SITS_ERROR(SITS_SUB_KV, "kv shard: bad paged storage description");
        return SITS_ERR_INVALID;
    }
    if (d->h0 < pg->head0 || d->h1 > pg->head0 + pg->n_kv_heads) {
        SITS_ERROR(SITS_SUB_KV, "kv shard: heads [%d, %d) outside the cache's [%d, %d)", d->h0, d->h1, pg->head0,
                   pg->head0 + pg->n_kv_heads);
        return SITS_ERR_INVALID;
    }
    int64_t need = ((int64_t)d->t1 + pg->block_size - 1) / pg->block_size;
    if (need > pg->n_table) {
        SITS_ERROR(SITS_SUB_KV, "kv shard: tokens up to %d need %lld blocks, the table has %d", d->t1, (long long)need,
                   pg->n_table);
        return SITS_ERR_INVALID;
    }
    for (int64_t b = d->t0 / pg->block_size; b < need; b++)
        if (pg->block_table[b] < 0 || pg->block_table[b] >= pg->n_blocks) {
            SITS_ERROR(SITS_SUB_KV, "kv shard: block table entry %lld = %d outside [0, %d)", (long long)b,
                       pg->block_table[b], pg->n_blocks);
            return SITS_ERR_INVALID;
        }
    return SITS_OK;
}

/* ---- raw payload <-> rows ---- */

static sits_status_t raw_write(const rows_t *r, unsigned char *raw)
{
    const geom_t *g = r->g;
    const size_t hd = g->H * g->D;
    sits_kv_shard_dtype_t dt = r->d->dtype;
    float *scales = NULL;
    uint16_t *b16 = NULL;
    if (dt == SITS_KV_SHARD_INT8 && !(scales = malloc(sizeof(float) * g->H))) return SITS_ERR_NOMEM;
    if (dt == SITS_KV_SHARD_BF16 && !(b16 = malloc(sizeof(uint16_t) * hd))) return SITS_ERR_NOMEM;
    sits_status_t st = SITS_OK;
    size_t grp = 0;   /* (i, kv, j) in payload order */
    for (size_t i = 0; i < g->L; i++)
        for (int kv = 0; kv < 2; kv++)
            for (size_t j = 0; j < g->T; j++, grp++) {
                const float *x = row_at(r, i, kv, j);
                if (dt == SITS_KV_SHARD_FP32) {
                    memcpy(raw + grp * hd * 4, x, hd * 4);
                } else if (dt == SITS_KV_SHARD_BF16) {
                    for (size_t e = 0; e < hd; e++) b16[e] = sits_f32_to_bf16(x[e]);
                    memcpy(raw + grp * hd * 2, b16, hd * 2);
                } else {
                    int8_t *q = (int8_t *)(raw + g->rows * 4) + grp * hd;
                    for (size_t h = 0; h < g->H; h++)
                        if (sits_kv_quant_row_i8(x + h * g->D, (int)g->D, q + h * g->D, &scales[h]) != SITS_OK) {
                            SITS_ERROR(SITS_SUB_KV, "kv shard: non-finite value at layer %d %s token %d head %d",
                                       r->d->l0 + (int)i, kv ? "v" : "k", r->d->t0 + (int)j, r->d->h0 + (int)h);
                            st = SITS_ERR_INVALID;
                            goto out;
                        }
                    memcpy(raw + grp * g->H * 4, scales, g->H * 4);
                }
            }
out:
    free(scales);
    free(b16);
    return st;
}

/* raw was validated (scales finite); writes every row. */
static sits_status_t raw_read(const rows_t *r, const unsigned char *raw)
{
    const geom_t *g = r->g;
    const size_t hd = g->H * g->D;
    sits_kv_shard_dtype_t dt = r->d->dtype;
    float *scales = NULL;
    uint16_t *b16 = NULL;
    if (dt == SITS_KV_SHARD_INT8 && !(scales = malloc(sizeof(float) * g->H))) return SITS_ERR_NOMEM;
    if (dt == SITS_KV_SHARD_BF16 && !(b16 = malloc(sizeof(uint16_t) * hd))) return SITS_ERR_NOMEM;
    size_t grp = 0;
    for (size_t i = 0; i < g->L; i++)
        for (int kv = 0; kv < 2; kv++)
            for (size_t j = 0; j < g->T; j++, grp++) {
                float *x = row_at(r, i, kv, j);
                if (dt == SITS_KV_SHARD_FP32) {
                    memcpy(x, raw + grp * hd * 4, hd * 4);
                } else if (dt == SITS_KV_SHARD_BF16) {
                    memcpy(b16, raw + grp * hd * 2, hd * 2);
                    for (size_t e = 0; e < hd; e++) x[e] = sits_bf16_to_f32(b16[e]);
                } else {
                    memcpy(scales, raw + grp * g->H * 4, g->H * 4);
                    sits_kv_dequant_i8((const int8_t *)(raw + g->rows * 4) + grp * hd, scales, g->H, (int)g->D, x);
                }
            }
    free(scales);
    free(b16);
    return SITS_OK;
}

/* Every int8 scale finite and >= 0 (a shard with a valid crc can still have been written wrong). */
static int scales_ok(const geom_t *g, const unsigned char *raw, size_t *bad_p)
{
    for (size_t i = 0; i < g->rows; i++) {
        float s;
        memcpy(&s, raw + 4 * i, 4);
        /* finite and small enough that q * s stays finite when dequantised for any int8 q, -128
         * included (the writer clamps to [-127, 127], a forged payload need not; fuzz_kv_shard) */
        if (!(s >= 0.0f && s <= 3.4028234663852886e38f / 128.0f)) { *bad_p = i; return 0; }
    }
    return 1;
}

/* ---- LZ4 frames ---- */

static int nthreads(int threads) { return threads > 1 ? threads : 1; }

/* Compresses raw[n] in frames of fb into slots of slot bytes at dst (frame i at dst + i * slot);
 * csize[i] = compressed size. */
static sits_status_t lz4_frames_compress(const unsigned char *raw, size_t n, size_t fb, unsigned char *dst, size_t slot,
                                         uint32_t *csize, int threads)
{
    const long nf = (long)n_frames_of(n, fb);
    int failed = 0;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nthreads(threads)) schedule(dynamic, 4) reduction(| : failed) if (threads > 1 && nf > 1)
#endif
    for (long f = 0; f < nf; f++) {
        size_t off = (size_t)f * fb, len = n - off < fb ? n - off : fb;
        LZ4F_preferences_t p = lz4_prefs(len);
        size_t r = LZ4F_compressFrame(dst + (size_t)f * slot, slot, raw + off, len, &p);
        if (LZ4F_isError(r)) failed |= 1;
        else csize[f] = (uint32_t)r;
    }
    if (failed) {
        SITS_ERROR(SITS_SUB_KV, "kv shard: lz4 compression failed");
        return SITS_ERR_INTERNAL;
    }
    return SITS_OK;
}

/* Decompresses nf frames (frame f at src + off[f], csize[f] bytes) into raw[n] in frames of fb.
 * Every frame must decode completely to exactly its raw size and consume exactly its bytes. */
static sits_status_t lz4_frames_decompress(const unsigned char *src, const uint64_t *off, const uint32_t *csize, size_t nf,
                                           unsigned char *raw, size_t n, size_t fb, int threads)
{
    long bad = -1;
#ifdef _OPENMP
#pragma omp parallel num_threads(nthreads(threads)) if (threads > 1 && nf > 1)
#endif
    {
        LZ4F_dctx *dctx = NULL;
        int ok = !LZ4F_isError(LZ4F_createDecompressionContext(&dctx, LZ4F_VERSION));
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 4)
#endif
        for (long f = 0; f < (long)nf; f++) {
            size_t o = (size_t)f * fb, want = n - o < fb ? n - o : fb;
            size_t dlen = want, slen = csize[f];
            int good = ok;
            if (good) {
                LZ4F_resetDecompressionContext(dctx);
                LZ4F_decompressOptions_t opt = { .stableDst = 1 };
                size_t r = LZ4F_decompress(dctx, raw + o, &dlen, src + off[f], &slen, &opt);
                good = !LZ4F_isError(r) && r == 0 && dlen == want && slen == csize[f];
            }
            if (!good) {
#ifdef _OPENMP
#pragma omp critical(sits_kv_shard_bad)
#endif
                if (bad < 0 || f < bad) bad = f;
            }
        }
        LZ4F_freeDecompressionContext(dctx);
    }
    if (bad >= 0) {
        SITS_ERROR(SITS_SUB_KV, "kv shard: lz4 frame %ld of %zu does not decode to its %zu bytes", bad, nf,
                   (size_t)bad * fb + fb > n ? n - (size_t)bad * fb : fb);
        return SITS_ERR_FORMAT;
    }
    return SITS_OK;
}

/* ---- pack ---- */

static sits_status_t pack_rows(const rows_t *r, sits_kv_codec_t codec, void *out_, size_t cap, size_t *len_p)
{
    const sits_kv_shard_desc_t *d = r->d;
    const geom_t *g = r->g;
    unsigned char *out = out_;
    unsigned char *raw = NULL, *scratch = NULL;
    uint32_t *csize = NULL;
    sits_status_t st = SITS_OK;
    size_t stored = 0, fb = 0, nf = 0;
    if (!out || !len_p) { SITS_ERROR(SITS_SUB_KV, "kv shard: no output buffer"); return SITS_ERR_INVALID; }
    if (codec == SITS_KV_CODEC_NONE) {
        if (cap < HDR + g->raw) {
            SITS_ERROR(SITS_SUB_KV, "kv shard: %zu bytes of output for a %zu-byte shard", cap, (size_t)HDR + g->raw);
            return SITS_ERR_INVALID;
        }
        SITS_CHECK(raw_write(r, out + HDR));
        stored = g->raw;
    } else if (codec == SITS_KV_CODEC_LZ4) {
        fb = SITS_KV_SHARD_FRAME_BYTES;
        nf = n_frames_of(g->raw, fb);
        LZ4F_preferences_t p = lz4_prefs(fb);
        const size_t slot = LZ4F_compressFrameBound(fb, &p);
        if (cap < HDR + 4 * nf) {
            SITS_ERROR(SITS_SUB_KV, "kv shard: %zu bytes of output cannot hold the frame table", cap);
            return SITS_ERR_INVALID;
        }
        raw = malloc(g->raw);
        csize = malloc(sizeof(uint32_t) * nf);
        SITS_ALLOC_CHECK_GOTO(raw, st, out_free);
        SITS_ALLOC_CHECK_GOTO(csize, st, out_free);
        SITS_CHECK_GOTO(raw_write(r, raw), st, out_free);
        /* frames go into fixed slots (so threads need no coordination), then are compacted; the slots
         * sit in the output itself when it is large enough for the bound */
        unsigned char *base = out + HDR + 4 * nf;
        if (cap - HDR - 4 * nf >= nf * slot) {
            scratch = NULL;
        } else {
            scratch = malloc(nf * slot);
            SITS_ALLOC_CHECK_GOTO(scratch, st, out_free);
        }
        unsigned char *slots = scratch ? scratch : base;
        SITS_CHECK_GOTO(lz4_frames_compress(raw, g->raw, fb, slots, slot, csize, d->threads), st, out_free);
        for (size_t f = 0; f < nf; f++) stored += csize[f];
        if (cap - HDR - 4 * nf < stored) {
            SITS_ERROR(SITS_SUB_KV, "kv shard: %zu bytes of output for a %zu-byte shard", cap, HDR + 4 * nf + stored);
            st = SITS_ERR_INVALID;
            goto out_free;
        }
        size_t pos = 0;
        for (size_t f = 0; f < nf; f++) {   /* destinations never pass their sources: memmove is safe */
            memmove(base + pos, slots + f * slot, csize[f]);
            sits_le_put32(out + HDR + 4 * f, csize[f]);
            pos += csize[f];
        }
        stored += 4 * nf;
    } else {
        SITS_ERROR(SITS_SUB_KV, "kv shard: unknown codec %d", (int)codec);
        return SITS_ERR_INVALID;
    }
    unsigned char *h = out;
    memset(h, 0, HDR);
    sits_le_put32(h + 0, SITS_KV_SHARD_MAGIC);
    sits_le_put16(h + 4, SITS_KV_SHARD_VERSION);
    sits_le_put16(h + 6, HDR);
    h[8] = (unsigned char)d->dtype;
    h[9] = (unsigned char)codec;
    sits_le_put16(h + 10, 0);
    const int32_t f32[7] = { d->l0, d->l1, d->h0, d->h1, d->t0, d->t1, d->head_dim };
    for (int i = 0; i < 7; i++) sits_le_put32(h + 12 + 4 * i, (uint32_t)f32[i]);
    sits_le_put64(h + 40, g->raw);
    sits_le_put64(h + 48, stored);
    sits_le_put32(h + 56, (uint32_t)fb);
    sits_le_put32(h + 60, (uint32_t)nf);
    sits_le_put32(h + 64, sits_kv_crc32(0, out + HDR, stored));
    sits_le_put32(h + 92, sits_kv_crc32(0, h, 92));
    *len_p = HDR + stored;
out_free:
    free(scratch);
    free(csize);
    free(raw);
    return st;
}

static sits_status_t desc_check(const sits_kv_shard_desc_t *d, geom_t *g)
{
    const char *why = NULL;
    if (!d) { SITS_ERROR(SITS_SUB_KV, "kv shard: no descriptor"); return SITS_ERR_INVALID; }
    if (!geom_of(d, g, &why)) {
        SITS_ERROR(SITS_SUB_KV, "kv shard: bad descriptor: %s", why);
        return SITS_ERR_INVALID;
    }
    return SITS_OK;
}

sits_status_t sits_kv_shard_pack(const sits_kv_shard_desc_t *desc, const float *k, const float *v, sits_kv_codec_t codec,
                                 void *out, size_t cap, size_t *len_p)
{
    geom_t g;
    SITS_CHECK(desc_check(desc, &g));
    if (!k || !v) { SITS_ERROR(SITS_SUB_KV, "kv shard: no K or V input"); return SITS_ERR_INVALID; }
    /* the accessor serves pack and unpack alike, hence non-const; pack only reads through it */
    float *kk = (float *)k, *vv = (float *)v;
    rows_t r = { .k = &kk, .v = &vv, .pg = NULL, .d = desc, .g = &g };
    return pack_rows(&r, codec, out, cap, len_p);
}

sits_status_t sits_kv_shard_pack_paged(const sits_kv_shard_desc_t *desc, const float *const *k_cache_layer,
                                       const float *const *v_cache_layer, const sits_kv_paged_t *pg, sits_kv_codec_t codec,
                                       void *out, size_t cap, size_t *len_p)
{
    geom_t g;
    SITS_CHECK(desc_check(desc, &g));
    SITS_CHECK(check_paged(desc, pg));
    if (!k_cache_layer || !v_cache_layer) { SITS_ERROR(SITS_SUB_KV, "kv shard: no K or V caches"); return SITS_ERR_INVALID; }
    for (size_t i = 0; i < g.L; i++)
        if (!k_cache_layer[i] || !v_cache_layer[i]) {
            SITS_ERROR(SITS_SUB_KV, "kv shard: no cache for layer %d", desc->l0 + (int)i);
            return SITS_ERR_INVALID;
        }
    rows_t r = { .k = (float *const *)k_cache_layer, .v = (float *const *)v_cache_layer, .pg = pg, .d = desc, .g = &g };
    return pack_rows(&r, codec, out, cap, len_p);
}

/* ---- validate + unpack ---- */

typedef struct {
    sits_kv_shard_desc_t d;
    sits_kv_codec_t codec;
    geom_t g;
    uint64_t stored;
    uint32_t fb, nf, payload_crc;
} parsed_t;

#define BAD(...) do { SITS_ERROR(SITS_SUB_KV, "kv shard: " __VA_ARGS__); return SITS_ERR_FORMAT; } while (0)

static sits_status_t parse_header(const void *buf_, size_t len, parsed_t *ps)
{
    const unsigned char *h = buf_;
    if (!h) { SITS_ERROR(SITS_SUB_KV, "kv shard: no buffer"); return SITS_ERR_INVALID; }
    if (len < HDR) BAD("truncated: %zu bytes, the header alone is %d", len, HDR);
    if (sits_le_get32(h) != SITS_KV_SHARD_MAGIC) BAD("bad magic 0x%08x", sits_le_get32(h));
    if (sits_le_get16(h + 4) != SITS_KV_SHARD_VERSION) BAD("version %u, expected %d", sits_le_get16(h + 4), SITS_KV_SHARD_VERSION);
    if (sits_le_get16(h + 6) != HDR) BAD("header size %u, expected %d", sits_le_get16(h + 6), HDR);
    if (sits_kv_crc32(0, h, 92) != sits_le_get32(h + 92)) BAD("header checksum mismatch");
    /* fields; the crc matched, so a failure below is a writer's bug or a forged header */
    if (!dtype_ok(h[8])) BAD("unknown dtype %u", h[8]);
    if (h[9] != SITS_KV_CODEC_NONE && h[9] != SITS_KV_CODEC_LZ4) BAD("unknown codec %u", h[9]);
    if (sits_le_get16(h + 10) != 0) BAD("unknown flags 0x%04x", sits_le_get16(h + 10));
    for (int i = 68; i < 92; i++)
        if (h[i]) BAD("reserved byte %d is not zero", i);
    int32_t f[7];
    for (int i = 0; i < 7; i++) f[i] = (int32_t)sits_le_get32(h + 12 + 4 * i);
    ps->d = (sits_kv_shard_desc_t){ .l0 = f[0], .l1 = f[1], .h0 = f[2], .h1 = f[3], .t0 = f[4], .t1 = f[5],
                                    .head_dim = f[6], .dtype = (sits_kv_shard_dtype_t)h[8], .threads = 0 };
    ps->codec = (sits_kv_codec_t)h[9];
    const char *why = NULL;
    if (!geom_of(&ps->d, &ps->g, &why)) BAD("bad ranges: %s", why);
    uint64_t raw = sits_le_get64(h + 40);
    ps->stored = sits_le_get64(h + 48);
    ps->fb = sits_le_get32(h + 56);
    ps->nf = sits_le_get32(h + 60);
    ps->payload_crc = sits_le_get32(h + 64);
    if (raw != ps->g.raw) BAD("raw size %llu does not match the ranges (%zu)", (unsigned long long)raw, ps->g.raw);
    if (ps->codec == SITS_KV_CODEC_NONE) {
        if (ps->fb || ps->nf) BAD("frame fields set without a codec");
        if (ps->stored != raw) BAD("stored size %llu differs from raw size %llu without a codec",
                                   (unsigned long long)ps->stored, (unsigned long long)raw);
    } else {
        if (ps->fb < MIN_FRAME_BYTES || ps->fb > MAX_FRAME_BYTES) BAD("frame size %u out of range", ps->fb);
        if (ps->nf != n_frames_of(raw, ps->fb)) BAD("%u frames for %llu bytes in frames of %u", ps->nf,
                                                    (unsigned long long)raw, ps->fb);
        /* each frame takes at least a frame header, block header and end mark (>= 11 bytes) */
        if (ps->stored < (uint64_t)ps->nf * 15) BAD("stored size %llu too small for %u frames",
                                                    (unsigned long long)ps->stored, ps->nf);
    }
    if (ps->stored > len - HDR) BAD("truncated: %zu bytes, the shard is %llu", len,
                                    (unsigned long long)(HDR + ps->stored));
    if (ps->stored < len - HDR) BAD("%zu trailing bytes after the shard", (size_t)(len - HDR - ps->stored));
    return SITS_OK;
}

sits_status_t sits_kv_shard_peek(const void *buf, size_t len, sits_kv_shard_desc_t *desc_p, sits_kv_codec_t *codec_p)
{
    parsed_t ps;
    SITS_CHECK(parse_header(buf, len, &ps));
    if (desc_p) *desc_p = ps.d;
    if (codec_p) *codec_p = ps.codec;
    return SITS_OK;
}

/* Validates the whole shard; *raw_p = its raw payload (inside buf for codec none, else *owned_p,
 * which the caller frees). */
static sits_status_t validate(const void *buf, size_t len, int threads, parsed_t *ps, const unsigned char **raw_p,
                              unsigned char **owned_p)
{
    const unsigned char *b = buf;
    *owned_p = NULL;
    SITS_CHECK(parse_header(buf, len, ps));
    const unsigned char *pl = b + HDR;
    if (sits_kv_crc32(0, pl, ps->stored) != ps->payload_crc) BAD("payload checksum mismatch");
    const unsigned char *raw = pl;
    if (ps->codec == SITS_KV_CODEC_LZ4) {
        const size_t nf = ps->nf;
        uint64_t *off = malloc(sizeof(uint64_t) * (nf ? nf : 1));
        uint32_t *cs = malloc(sizeof(uint32_t) * (nf ? nf : 1));
        unsigned char *dst = malloc(ps->g.raw);
        sits_status_t st = SITS_OK;
        if (!off || !cs || !dst) {
            SITS_ERROR(SITS_SUB_KV, "kv shard: out of memory for %zu raw bytes", ps->g.raw);
            st = SITS_ERR_NOMEM;
            goto lz4_out;
        }
        uint64_t pos = 4 * (uint64_t)nf;
        for (size_t f = 0; f < nf; f++) {
            cs[f] = sits_le_get32(pl + 4 * f);
            off[f] = pos;
            if (cs[f] == 0 || cs[f] > ps->stored - pos) {
                SITS_ERROR(SITS_SUB_KV, "kv shard: frame %zu size %u overruns the payload", f, cs[f]);
                st = SITS_ERR_FORMAT;
                goto lz4_out;
            }
            pos += cs[f];
        }
        if (pos != ps->stored) {
            SITS_ERROR(SITS_SUB_KV, "kv shard: frames end at %llu of %llu stored bytes", (unsigned long long)pos,
                       (unsigned long long)ps->stored);
            st = SITS_ERR_FORMAT;
            goto lz4_out;
        }
        st = lz4_frames_decompress(pl, off, cs, nf, dst, ps->g.raw, ps->fb, threads);
    lz4_out:
        free(off);
        free(cs);
        if (st != SITS_OK) { free(dst); return st; }
        raw = dst;
        *owned_p = dst;
    }
    size_t bad;
    if (ps->d.dtype == SITS_KV_SHARD_INT8 && !scales_ok(&ps->g, raw, &bad)) {
        free(*owned_p);
        *owned_p = NULL;
        BAD("int8 scale %zu is negative, not finite or above FLT_MAX/128", bad);
    }
    *raw_p = raw;
    return SITS_OK;
}

sits_status_t sits_kv_shard_unpack(const void *buf, size_t len, int threads, sits_kv_shard_desc_t *desc_p, float *k,
                                   float *v)
{
    parsed_t ps;
    const unsigned char *raw;
    unsigned char *owned;
    if (!k || !v) { SITS_ERROR(SITS_SUB_KV, "kv shard: no K or V output"); return SITS_ERR_INVALID; }
    SITS_CHECK(validate(buf, len, threads, &ps, &raw, &owned));
    rows_t r = { .k = &k, .v = &v, .pg = NULL, .d = &ps.d, .g = &ps.g };
    sits_status_t st = raw_read(&r, raw);
    free(owned);
    if (st == SITS_OK && desc_p) *desc_p = ps.d;
    return st;
}

sits_status_t sits_kv_shard_unpack_paged(const void *buf, size_t len, int threads, float *const *k_cache_layer,
                                         float *const *v_cache_layer, int n_layers, const sits_kv_paged_t *pg,
                                         sits_kv_shard_desc_t *desc_p)
{
    parsed_t ps;
    const unsigned char *raw;
    unsigned char *owned;
    SITS_CHECK(parse_header(buf, len, &ps));
    /* the destination must fit before the (costly) payload validation and before any write */
    if ((int64_t)ps.g.L > n_layers) {
        SITS_ERROR(SITS_SUB_KV, "kv shard: %zu layers, %d cache layers given", ps.g.L, n_layers);
        return SITS_ERR_INVALID;
    }
    SITS_CHECK(check_paged(&ps.d, pg));
    if (!k_cache_layer || !v_cache_layer) { SITS_ERROR(SITS_SUB_KV, "kv shard: no K or V caches"); return SITS_ERR_INVALID; }
    for (size_t i = 0; i < ps.g.L; i++)
        if (!k_cache_layer[i] || !v_cache_layer[i]) {
            SITS_ERROR(SITS_SUB_KV, "kv shard: no cache for layer %d", ps.d.l0 + (int)i);
            return SITS_ERR_INVALID;
        }
    SITS_CHECK(validate(buf, len, threads, &ps, &raw, &owned));
    rows_t r = { .k = k_cache_layer, .v = v_cache_layer, .pg = pg, .d = &ps.d, .g = &ps.g };
    sits_status_t st = raw_read(&r, raw);
    free(owned);
    if (st == SITS_OK && desc_p) *desc_p = ps.d;
    return st;
}

/* ---- codec choice ---- */

sits_kv_codec_t sits_kv_codec_choose(double link_gbps, const sits_kv_codec_perf_t *perf)
{
    if (!perf || !(link_gbps > 0) || !isfinite(link_gbps)) return SITS_KV_CODEC_NONE;
    const double c = perf->compress_gbps, dz = perf->decompress_gbps, r = perf->ratio;
    if (!(c > 0) || !(dz > 0) || !(r > 0) || !isfinite(c) || !isfinite(dz) || !isfinite(r)) return SITS_KV_CODEC_NONE;
    double eff = link_gbps * r;
    if (c < eff) eff = c;
    if (dz < eff) eff = dz;
    return eff > (1.0 + SITS_KV_CODEC_MARGIN) * link_gbps ? SITS_KV_CODEC_LZ4 : SITS_KV_CODEC_NONE;
}
