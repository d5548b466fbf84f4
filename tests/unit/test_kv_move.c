/* test_kv_move.c -- the KV move message (src/kv/move.c) and the KV_MOVE step plan (src/sched/plan.c):
 * head ownership under TP (every head has exactly one sender, held by it); resharding between TP
 * sizes 1..8 for fp32, bf16 and int8 block units: each destination rank's blocks, assembled from the
 * messages of the source ranks, equal blocks built directly from the global (block, layer, K|V,
 * slot, head, dim) -> bytes function, pads zero; rejection, with the output untouched, of truncated
 * messages, of every single-byte corruption, and of a message that does not match the expected move;
 * the KV_MOVE plan's round trip and its rejection when corrupt; [memory plan] the staging a move
 * needs per block (src/sched/kvmove.c) against figures worked out by hand from the wire format and
 * the block layout, and the chunk it fits. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "kv/move.h"
#include "sched/kvmove.h"
#include "sched/plan.h"
#include "util/log.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { NKV = 4, HD = 8, BS = 4, NB = 3, L0 = 1, L1 = 3 };

/* the byte of element (block, layer, kv, slot, head, dim, byte) in the global cache */
static unsigned char val(int i, int l, int c, int s, int h, int x, int b)
{
    uint32_t u = (uint32_t)(((((i * 7 + l) * 2 + c) * 31 + s) * 17 + h) * 131 + x) * 8 + (uint32_t)b;
    u ^= u >> 13;
    u *= 0x9e3779b1u;
    return (unsigned char)(u >> 24);
}

/* Block buffers (engine layout) of a rank holding heads [h0, h0 + n_kv), zero pads. */
static unsigned char *make_blocks(sits_dtype_t dt, int h0, int n_kv)
{
    size_t ub = sits_kv_layer_block_bytes(dt, BS, n_kv, HD), es = sits_dtype_size(dt);
    unsigned char *buf = calloc((size_t)NB * (L1 - L0) * 2, ub);
    assert_non_null(buf);
    unsigned char *u = buf;
    for (int i = 0; i < NB; i++)
        for (int l = L0; l < L1; l++)
            for (int c = 0; c < 2; c++, u += ub)
                for (int s = 0; s < BS; s++)
                    for (int k = 0; k < n_kv; k++) {
                        for (int x = 0; x < HD; x++)
                            for (size_t b = 0; b < es; b++) u[(((size_t)s * n_kv + k) * HD + x) * es + b] = val(i, l, c, s, h0 + k, x, (int)b);
                        if (sits_kv_dtype_is_q8(dt)) /* [fp8 kv] I8 and F8_E4M3: scales after the 8-bit part */
                            for (int b = 0; b < 4; b++)
                                u[sits_kv_i8_q_bytes(BS, n_kv, HD) + ((size_t)s * n_kv + k) * 4 + b] = val(i, l, c, s, h0 + k, 99, b);
                    }
    return buf;
}

static sits_kv_move_desc_t desc_of(sits_dtype_t dt, int h0, int h1, uint32_t id)
{
    return (sits_kv_move_desc_t){ .l0 = L0, .l1 = L1, .h0 = h0, .h1 = h1, .n_blocks = NB, .block_size = BS, .head_dim = HD,
                                  .dtype = dt, .move_id = id };
}

static void test_heads(void **state)
{
    (void)state;
    for (int tp = 1; tp <= 8; tp *= 2) {
        int count[NKV] = { 0 };
        for (int r = 0; r < tp; r++) {
            int h0, h1;
            sits_kv_move_heads(NKV, tp, r, &h0, &h1);
            assert_true(h0 >= 0 && h1 <= NKV && h1 > h0);
            for (int h = h0; h < h1; h++) count[h]++;
        }
        for (int h = 0; h < NKV; h++) {
            assert_int_equal(count[h], tp > NKV ? tp / NKV : 1);
            int s = sits_kv_move_sender_of(NKV, tp, h), h0, h1;
            sits_kv_move_heads(NKV, tp, s, &h0, &h1);
            assert_true(h >= h0 && h < h1);
        }
    }
}

/* Source group tp S -> destination group tp D, through messages, for dtype dt. */
static void reshard(sits_dtype_t dt, int S, int D)
{
    for (int j = 0; j < D; j++) {
        int d0, d1;
        sits_kv_move_heads(NKV, D, j, &d0, &d1);
        unsigned char *want = make_blocks(dt, d0, d1 - d0);
        size_t total = (size_t)NB * (L1 - L0) * 2 * sits_kv_layer_block_bytes(dt, BS, d1 - d0, HD);
        unsigned char *got = calloc(1, total);
        assert_non_null(got);
        int covered = 0;
        for (int i = 0; i < S; i++) {
            int s0, s1;
            sits_kv_move_heads(NKV, S, i, &s0, &s1);
            int h0 = s0 > d0 ? s0 : d0, h1 = s1 < d1 ? s1 : d1;
            if (h0 >= h1 || sits_kv_move_sender_of(NKV, S, h0) != i) continue;
            unsigned char *src = make_blocks(dt, s0, s1 - s0);
            sits_kv_move_desc_t de = desc_of(dt, h0, h1, 7);
            size_t n = sits_kv_move_msg_bytes(&de), len = 0;
            unsigned char *msg = malloc(n);
            assert_non_null(msg);
            assert_int_equal(sits_kv_move_pack(&de, src, s1 - s0, s0, msg, n, &len), SITS_OK);
            assert_int_equal(len, n);
            assert_int_equal(sits_kv_move_unpack(msg, len, &de, got, d1 - d0, d0), SITS_OK);
            covered += h1 - h0;
            free(msg);
            free(src);
        }
        assert_int_equal(covered, d1 - d0);
        assert_memory_equal(got, want, total);
        free(got);
        free(want);
    }
}

static void test_reshard(void **state)
{
    (void)state;
    static const sits_dtype_t dts[4] = { SITS_DT_F32, SITS_DT_BF16, SITS_DT_I8, SITS_DT_F8_E4M3 };
    static const int pairs[][2] = { { 1, 1 }, { 2, 2 }, { 1, 2 }, { 2, 1 }, { 2, 4 }, { 4, 2 }, { 1, 4 }, { 4, 8 }, { 8, 2 }, { 8, 1 }, { 1, 8 } };
    for (int t = 0; t < 4; t++)
        for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++) reshard(dts[t], pairs[p][0], pairs[p][1]);
}

static void test_reject(void **state)
{
    (void)state;
    sits_dtype_t dt = SITS_DT_I8;
    unsigned char *src = make_blocks(dt, 0, NKV);
    sits_kv_move_desc_t de = desc_of(dt, 1, 3, 42);
    size_t n = sits_kv_move_msg_bytes(&de), len = 0, total = (size_t)NB * (L1 - L0) * 2 * sits_kv_layer_block_bytes(dt, BS, 2, HD);
    unsigned char *msg = malloc(n), *bad = malloc(n), *dst = malloc(total), *zero = calloc(1, total);
    assert_true(msg && bad && dst && zero);
    assert_int_equal(sits_kv_move_pack(&de, src, NKV, 0, msg, n, &len), SITS_OK);
    memset(dst, 0, total);
    for (size_t cut = 0; cut < n; cut += 1 + cut / 3)
        assert_int_equal(sits_kv_move_unpack(msg, cut, &de, dst, 2, 1), SITS_ERR_FORMAT);
    for (size_t pos = 0; pos < n; pos++) {
        memcpy(bad, msg, n);
        bad[pos] ^= (unsigned char)(1u << (pos % 8));
        assert_int_equal(sits_kv_move_unpack(bad, n, &de, dst, 2, 1), SITS_ERR_FORMAT);
    }
    assert_memory_equal(dst, zero, total);
    sits_kv_move_desc_t other = de;
    other.move_id = 43;
    assert_int_equal(sits_kv_move_unpack(msg, n, &other, dst, 2, 1), SITS_ERR_FORMAT);
    other = de;
    other.h0 = 0;
    other.h1 = 2;   /* other heads: another size too */
    assert_int_equal(sits_kv_move_unpack(msg, n, &other, dst, 2, 0), SITS_ERR_FORMAT);
    assert_memory_equal(dst, zero, total);
    /* an all-zero message (what a sender that failed sends) */
    memset(bad, 0, n);
    assert_int_equal(sits_kv_move_unpack(bad, n, &de, dst, 2, 1), SITS_ERR_FORMAT);
    /* heads outside the source or the destination */
    assert_int_equal(sits_kv_move_pack(&de, src, 1, 0, msg, n, &len), SITS_ERR_INVALID);
    assert_int_equal(sits_kv_move_pack(&de, src, NKV, 0, msg, n - 1, &len), SITS_ERR_INVALID);
    assert_int_equal(sits_kv_move_unpack(msg, n, &de, dst, 1, 1), SITS_ERR_INVALID);
    assert_memory_equal(dst, zero, total);
    free(msg); free(bad); free(dst); free(zero); free(src);
}

static void test_plan(void **state)
{
    (void)state;
    int32_t blocks[5] = { 3, 9, 0, 7, 12 }, src[4] = { 0, 1, 2, 3 }, dst[2] = { 4, 5 };
    sits_plan_t p = { .cmd = SITS_PLAN_KV_MOVE, .step = 77,
                      .move = { .role = SITS_KV_MOVE_RECV, .n_blocks = 5, .src_tp = 2, .src_pp = 2, .dst_tp = 1, .dst_pp = 2,
                                .flags = SITS_KV_MOVE_F_CORRUPT, .move_id = 0xfffffff0u, .blocks = blocks, .src_ranks = src,
                                .dst_ranks = dst } };
    size_t n = sits_plan_size(&p), len = 0;
    unsigned char *buf = malloc(n);
    assert_non_null(buf);
    assert_int_equal(sits_plan_write(&p, buf, n, &len), SITS_OK);
    assert_int_equal(len, n);
    sits_sample_params_t store[1];
    sits_plan_t q;
    assert_int_equal(sits_plan_parse(buf, len, store, 1, &q), SITS_OK);
    assert_int_equal(q.cmd, SITS_PLAN_KV_MOVE);
    assert_int_equal(q.step, 77);
    assert_int_equal(q.n_tokens + q.n_seqs + q.n_out, 0);
    assert_int_equal(q.move.role, SITS_KV_MOVE_RECV);
    assert_int_equal(q.move.move_id, 0xfffffff0u);
    assert_int_equal(q.move.flags, SITS_KV_MOVE_F_CORRUPT);
    assert_int_equal(q.move.src_tp * q.move.src_pp, 4);
    assert_int_equal(q.move.dst_tp * q.move.dst_pp, 2);
    assert_memory_equal(q.move.blocks, blocks, sizeof blocks);
    assert_memory_equal(q.move.src_ranks, src, sizeof src);
    assert_memory_equal(q.move.dst_ranks, dst, sizeof dst);
    for (size_t pos = 8; pos < n; pos++) {   /* past magic / version / cmd: counts, body and checksum */
        buf[pos] ^= 0x10;
        sits_status_t st = sits_plan_parse(buf, len, store, 1, &q);
        buf[pos] ^= 0x10;
        if (pos >= 8 && pos < 16) continue;   /* the step number is not checksummed */
        assert_int_equal(st, SITS_ERR_FORMAT);
    }
    assert_int_equal(sits_plan_parse(buf, len - 4, store, 1, &q), SITS_ERR_FORMAT);
    p.move.n_blocks = 0;
    assert_int_equal(sits_plan_write(&p, buf, n, &len), SITS_ERR_INVALID);
    free(buf);
}

/* [memory plan] A 3-layer model of 8 query and 2 KV heads of 16 dims (hidden 128, intermediate 256). */
static sits_model_config_t stage_cfg(void)
{
    sits_model_config_t c;
    memset(&c, 0, sizeof c);
    c.vocab_size = 256;
    c.hidden_size = 128;
    c.intermediate_size = 256;
    c.n_layers = 3;
    c.n_heads = 8;
    c.n_kv_heads = 2;
    c.head_dim = 16;
    return c;
}

static void test_stage_need(void **state)
{
    (void)state;
    sits_model_config_t c = stage_cfg();
    size_t pb = 0, hd = 0;
    /* fp32, 16-token blocks: one (layer, K|V) slice of one head is 16 x 16 x 4 = 1024 bytes.
     * tp 1 -> 2: the sender stores and sends 3 layers x K,V x 2 heads = 12288 a block, 2 messages */
    assert_int_equal(sits_kv_move_need(&c, 16, SITS_DT_F32, 1, 2, 1, &pb, &hd), SITS_OK);
    assert_int_equal(pb, 12288);
    assert_int_equal(hd, 128);
    /* tp 1 -> 4: each head is held by two receivers and the sender sends it to both: 2 x 12288 */
    assert_int_equal(sits_kv_move_need(&c, 16, SITS_DT_F32, 1, 4, 1, &pb, &hd), SITS_OK);
    assert_int_equal(pb, 24576);
    assert_int_equal(hd, 256);
    /* tp 4 -> 1: the receiver takes both heads (12288); each first holder sends one (6144) */
    assert_int_equal(sits_kv_move_need(&c, 16, SITS_DT_F32, 4, 1, 1, &pb, &hd), SITS_OK);
    assert_int_equal(pb, 12288);
    assert_int_equal(hd, 256);
    /* two stages of 2 and 1 layers, tp 1 -> 1: stage 0 stores 2 x 2 x 2048 = 8192 a block */
    assert_int_equal(sits_kv_move_need(&c, 16, SITS_DT_F32, 1, 1, 2, &pb, &hd), SITS_OK);
    assert_int_equal(pb, 8192);
    assert_int_equal(hd, 64);
    /* int8, 3-token blocks, 6 dims: a stored unit of one head is q 18 -> 32 (16-byte aligned) plus
     * scales 12 -> 16 = 48 bytes, its message slice 18 + 12 = 30: the stored 3 x 2 x 48 = 288 is
     * the larger, tp 2 -> 2 */
    c.head_dim = 6;
    assert_int_equal(sits_kv_move_need(&c, 3, SITS_DT_I8, 2, 2, 1, &pb, &hd), SITS_OK);
    assert_int_equal(pb, 288);
    assert_int_equal(hd, 128);
    assert_int_equal(sits_kv_move_need(&c, 3, SITS_DT_I8, 0, 2, 1, &pb, &hd), SITS_ERR_INVALID);
    /* the chunk: whole blocks after the headers, none when one block does not fit */
    assert_int_equal(sits_kv_move_chunk_blocks(20480, 8192, 128), 2);
    assert_int_equal(sits_kv_move_chunk_blocks(8256, 8192, 64), 1);
    assert_int_equal(sits_kv_move_chunk_blocks(8255, 8192, 64), 0);
    assert_int_equal(sits_kv_move_chunk_blocks(100, 0, 64), 0);
}

int main(void)
{
    sits_log_init(-1);
    sits_log_set_level(SITS_LOG_NONE);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_heads),
        cmocka_unit_test(test_reshard),
        cmocka_unit_test(test_reject),
        cmocka_unit_test(test_plan),
        cmocka_unit_test(test_stage_need),
    };
    return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
