/* test_plan.c -- step plan serialisation (src/sched/plan.c): round trip (step, stop, [n > 1] kv copy
 * plans), and refusal of every truncation and of corrupted headers/bodies. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "sched/plan.h"
#include "util/log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static sits_plan_t make_plan(int32_t *a, sits_sample_params_t *sp)
{
    /* 5 tokens of 2 sequences, 3 blocks each, 2 outputs */
    for (int i = 0; i < 5; i++) { a[i] = 100 + i; a[5 + i] = i; a[10 + i] = i < 3 ? 0 : 1; }
    for (int i = 0; i < 6; i++) a[15 + i] = 7 * i;
    a[21] = 2; a[22] = 4;
    /* [logprobs] [sampling controls] fields and lists on row 0 */
    static const sits_sample_bias_t bias[2] = { { 7, -INFINITY }, { 3, 2.5f } };
    static const sits_sample_hist_t hist[3] = { { 1, 0, 1 }, { 4, 2, 0 }, { 9, 1, 1 } };
    sp[0] = (sits_sample_params_t){ .temperature = 0.7f, .top_k = 40, .top_p = 0.9f, .seed = 0x1234567890abcdefull, .step = 3,
                                    .logprobs = 1, .top_logprobs = 5, .lp_target = 11, .presence_penalty = 0.5f,
                                    .frequency_penalty = -1.0f, .repetition_penalty = 1.3f, .min_p = 0.05f,
                                    .bias = bias, .n_bias = 2, .hist = hist, .n_hist = 3 };
    sp[1] = (sits_sample_params_t){ .temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .seed = 1, .step = 0 };
    return (sits_plan_t){ .cmd = SITS_PLAN_STEP, .step = 42, .n_tokens = 5, .tokens = a, .pos = a + 5, .seq = a + 10,
                          .n_seqs = 2, .max_blocks = 3, .block_tables = a + 15, .n_out = 2, .out_rows = a + 21, .sample = sp };
}

static void test_round_trip(void **state)
{
    int32_t a[32];
    sits_sample_params_t sp[2], store[8];
    sits_plan_t p = make_plan(a, sp), q;
    size_t len = 0, need = sits_plan_size(&p);
    unsigned char *buf = malloc(need);
    assert_int_equal(sits_plan_write(&p, buf, need, &len), SITS_OK);
    assert_int_equal(len, need);
    assert_int_equal(sits_plan_parse(buf, len, store, 8, &q), SITS_OK);
    assert_int_equal(q.cmd, SITS_PLAN_STEP);
    assert_int_equal(q.step, 42);
    assert_int_equal(q.n_tokens, 5);
    assert_int_equal(q.n_seqs, 2);
    assert_int_equal(q.max_blocks, 3);
    assert_int_equal(q.n_out, 2);
    assert_memory_equal(q.tokens, p.tokens, 5 * 4);
    assert_memory_equal(q.pos, p.pos, 5 * 4);
    assert_memory_equal(q.seq, p.seq, 5 * 4);
    assert_memory_equal(q.block_tables, p.block_tables, 6 * 4);
    assert_memory_equal(q.out_rows, p.out_rows, 2 * 4);
    for (int i = 0; i < 2; i++) {
        assert_true(q.sample[i].temperature == sp[i].temperature);
        assert_int_equal(q.sample[i].top_k, sp[i].top_k);
        assert_true(q.sample[i].top_p == sp[i].top_p);
        assert_true(q.sample[i].seed == sp[i].seed);
        assert_true(q.sample[i].step == sp[i].step);
        assert_int_equal(q.sample[i].logprobs, sp[i].logprobs);
        assert_int_equal(q.sample[i].top_logprobs, sp[i].top_logprobs);
        assert_int_equal(q.sample[i].lp_target, sp[i].lp_target);
        assert_true(q.sample[i].presence_penalty == sp[i].presence_penalty && q.sample[i].frequency_penalty == sp[i].frequency_penalty &&
                    q.sample[i].repetition_penalty == sp[i].repetition_penalty && q.sample[i].min_p == sp[i].min_p);
        assert_int_equal(q.sample[i].n_bias, sp[i].n_bias);
        assert_int_equal(q.sample[i].n_hist, sp[i].n_hist);
        if (sp[i].n_bias) assert_memory_equal(q.sample[i].bias, sp[i].bias, sizeof *sp[i].bias * (size_t)sp[i].n_bias);
        if (sp[i].n_hist) assert_memory_equal(q.sample[i].hist, sp[i].hist, sizeof *sp[i].hist * (size_t)sp[i].n_hist);
    }
    /* too small an output buffer is refused */
    assert_int_equal(sits_plan_write(&p, buf, need - 1, &len), SITS_ERR_INVALID);
    /* a stop plan carries nothing */
    sits_plan_t stop = { .cmd = SITS_PLAN_STOP };
    assert_int_equal(sits_plan_write(&stop, buf, need, &len), SITS_OK);
    assert_int_equal(len, SITS_PLAN_HEADER_BYTES);
    assert_int_equal(sits_plan_parse(buf, len, store, 8, &q), SITS_OK);
    assert_int_equal(q.cmd, SITS_PLAN_STOP);
    /* [n > 1] a KV_COPY plan: copy i is tokens[i] (source block) -> pos[i] (destination), seq[i] = i */
    int32_t cp[9] = { 5, 9, 12, 40, 41, 42, 0, 1, 2 };
    sits_plan_t kc = { .cmd = SITS_PLAN_KV_COPY, .step = 7, .n_tokens = 3, .n_seqs = 3, .tokens = cp, .pos = cp + 3, .seq = cp + 6 };
    assert_true(sits_plan_size(&kc) <= need);
    assert_int_equal(sits_plan_write(&kc, buf, need, &len), SITS_OK);
    assert_int_equal(sits_plan_parse(buf, len, store, 8, &q), SITS_OK);
    assert_int_equal(q.cmd, SITS_PLAN_KV_COPY);
    assert_int_equal(q.n_tokens, 3);
    assert_int_equal(q.n_out, 0);
    assert_memory_equal(q.tokens, cp, 3 * 4);
    assert_memory_equal(q.pos, cp + 3, 3 * 4);
    free(buf);
}

static void test_truncated(void **state)
{
    int32_t a[32];
    sits_sample_params_t sp[2], store[8];
    sits_plan_t p = make_plan(a, sp), q;
    size_t len = 0, need = sits_plan_size(&p);
    unsigned char *buf = malloc(need);
    assert_int_equal(sits_plan_write(&p, buf, need, &len), SITS_OK);
    for (size_t cut = 0; cut < len; cut++) {
        unsigned char *copy = malloc(cut ? cut : 1);
        memcpy(copy, buf, cut);
        if (sits_plan_parse(copy, cut, store, 8, &q) != SITS_ERR_FORMAT) fail_msg("truncated to %zu bytes: accepted", cut);
        free(copy);
    }
    free(buf);
}

static void test_corrupt(void **state)
{
    int32_t a[32];
    sits_sample_params_t sp[2], store[8];
    sits_plan_t p = make_plan(a, sp), q;
    size_t len = 0, need = sits_plan_size(&p);
    unsigned char *buf = malloc(need), *c = malloc(need);
    assert_int_equal(sits_plan_write(&p, buf, need, &len), SITS_OK);
    /* every single-byte change is refused (header fields are checked, the body is checksummed) */
    for (size_t i = 0; i < len; i++) {
        if (i >= 8 && i < 16) continue; /* the step counter is free-form */
        memcpy(c, buf, len);
        c[i] ^= 0x5a;
        if (sits_plan_parse(c, len, store, 8, &q) == SITS_OK) fail_msg("byte %zu flipped: accepted", i);
    }
    /* more outputs than the caller can hold */
    assert_int_equal(sits_plan_parse(buf, len, store, 1, &q), SITS_ERR_FORMAT);
    /* a consistent plan whose token names a sequence that does not exist */
    a[12] = 5;
    assert_int_equal(sits_plan_write(&p, buf, need, &len), SITS_OK);
    assert_int_equal(sits_plan_parse(buf, len, store, 8, &q), SITS_ERR_FORMAT);
    a[12] = 0;
    a[21] = 9; /* output row past the tokens */
    assert_int_equal(sits_plan_write(&p, buf, need, &len), SITS_OK);
    assert_int_equal(sits_plan_parse(buf, len, store, 8, &q), SITS_ERR_FORMAT);
    free(buf);
    free(c);
}

/* [structured output] the mask trailer after the [sampling controls] lists: round trip of both, every truncation and byte flip refused, bad rows refused */
static void test_masks(void **state)
{
    int32_t a[32], rows[1] = { 1 };
    uint32_t masks[3] = { 0xdeadbeefu, 0x1u, 0x80000000u };
    sits_sample_params_t sp[2], store[8];
    sits_plan_t p = make_plan(a, sp), q;
    size_t base = sits_plan_size(&p);
    p.masks = (sits_sample_masks_t){ .n = 1, .words = 3, .rows = rows, .masks = masks };
    size_t len = 0, need = sits_plan_size(&p);
    assert_int_equal(need, base + 8 + 4 + 12 + 4);   /* counts, row, mask, trailer sum */
    unsigned char *buf = malloc(need), *c = malloc(need);
    assert_int_equal(sits_plan_write(&p, buf, need, &len), SITS_OK);
    assert_int_equal(sits_plan_parse(buf, len, store, 8, &q), SITS_OK);
    assert_int_equal(q.masks.n, 1);
    assert_int_equal(q.masks.words, 3);
    assert_int_equal(q.masks.rows[0], 1);
    assert_memory_equal(q.masks.masks, masks, sizeof masks);
    assert_memory_equal(q.out_rows, p.out_rows, 2 * 4);
    /* [logprobs] [sampling controls] row 0's v2 fields and its bias / history lists come back alongside */
    assert_int_equal(q.sample[0].top_logprobs, 5);
    assert_int_equal(q.sample[0].lp_target, 11);
    assert_true(q.sample[0].min_p == sp[0].min_p);
    assert_true(q.sample[0].repetition_penalty == sp[0].repetition_penalty);
    assert_int_equal(q.sample[0].n_bias, 2);
    assert_int_equal(q.sample[0].n_hist, 3);
    assert_memory_equal(q.sample[0].bias, sp[0].bias, sizeof *sp[0].bias * 2);
    assert_memory_equal(q.sample[0].hist, sp[0].hist, sizeof *sp[0].hist * 3);
    assert_int_equal(q.sample[1].n_bias, 0);
    assert_int_equal(q.sample[1].n_hist, 0);
    for (size_t cut = 0; cut < len; cut++)
        if (sits_plan_parse(buf, cut, store, 8, &q) != SITS_ERR_FORMAT) fail_msg("masked plan cut to %zu bytes: accepted", cut);
    for (size_t i = 0; i < len; i++) {
        if (i >= 8 && i < 16) continue;
        memcpy(c, buf, len);
        c[i] ^= 0x5a;
        if (sits_plan_parse(c, len, store, 8, &q) == SITS_OK) fail_msg("masked plan byte %zu flipped: accepted", i);
    }
    rows[0] = 2;   /* past the outputs */
    assert_int_equal(sits_plan_write(&p, buf, need, &len), SITS_OK);
    assert_int_equal(sits_plan_parse(buf, len, store, 8, &q), SITS_ERR_FORMAT);
    p.masks.n = 3; /* more masks than outputs */
    assert_int_equal(sits_plan_write(&p, buf, need, &len), SITS_ERR_INVALID);
    free(buf);
    free(c);
}

/* [structured output] masks that follow the plan: the plan names the rows and words, the masks come as
 * their own message with their own checksum */
static void test_masks_follow(void **state)
{
    (void)state;
    int32_t a[32], rows[1] = { 1 };
    uint32_t masks[3] = { 0xdeadbeefu, 0x1u, 0x80000000u };
    sits_sample_params_t sp[2], store[8];
    sits_plan_t p = make_plan(a, sp), q;
    size_t base = sits_plan_size(&p);
    p.masks = (sits_sample_masks_t){ .n = 1, .words = 3, .rows = rows, .masks = NULL };
    p.masks_follow = 1;
    size_t len = 0, need = sits_plan_size(&p);
    assert_int_equal(need, base + 8 + 4 + 4);   /* counts, row, trailer sum: no masks */
    unsigned char *buf = malloc(need), *c = malloc(need), msg[16];
    assert_int_equal(sits_plan_write(&p, buf, need, &len), SITS_OK);
    assert_int_equal(sits_plan_parse(buf, len, store, 8, &q), SITS_OK);
    assert_int_equal(q.masks_follow, 1);
    assert_int_equal(q.masks.n, 1);
    assert_int_equal(q.masks.words, 3);
    assert_int_equal(q.masks.rows[0], 1);
    assert_null(q.masks.masks);
    assert_int_equal(sits_plan_masks_size(&q), sizeof msg);
    sits_plan_masks_write(&p, masks, msg);
    assert_int_equal(sits_plan_masks_parse(&q, msg, sizeof msg), SITS_OK);
    assert_memory_equal(q.masks.masks, masks, sizeof masks);
    for (size_t i = 0; i < sizeof msg; i++) {   /* any flipped byte of the message: refused */
        msg[i] ^= 0x21;
        assert_int_equal(sits_plan_masks_parse(&q, msg, sizeof msg), SITS_ERR_FORMAT);
        msg[i] ^= 0x21;
    }
    assert_int_equal(sits_plan_masks_parse(&q, msg, sizeof msg - 4), SITS_ERR_FORMAT);   /* the wrong size */
    for (size_t i = 0; i < len; i++) {
        if (i >= 8 && i < 16) continue;
        memcpy(c, buf, len);
        c[i] ^= 0x5a;
        if (sits_plan_parse(c, len, store, 8, &q) == SITS_OK) fail_msg("plan with following masks, byte %zu flipped: accepted", i);
    }
    for (size_t cut = 0; cut < len; cut++)
        if (sits_plan_parse(buf, cut, store, 8, &q) != SITS_ERR_FORMAT) fail_msg("plan cut to %zu bytes: accepted", cut);
    p.masks.n = 0;   /* masks follow, but no row is masked */
    assert_int_equal(sits_plan_write(&p, buf, need, &len), SITS_ERR_INVALID);
    p.masks.n = 1;
    p.cmd = SITS_PLAN_KV_COPY;   /* only a step has masks */
    assert_int_equal(sits_plan_write(&p, buf, need, &len), SITS_ERR_INVALID);
    free(buf);
    free(c);
}

int main(void)
{
    sits_log_init(0);
    sits_log_set_level(SITS_LOG_NONE);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_corrupt),
        cmocka_unit_test(test_masks),
        cmocka_unit_test(test_masks_follow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
