/* fuzz_plan.c -- libFuzzer target: sits_plan_parse, the step-plan deserialiser every follower rank
 * runs on what the leader broadcasts. Input byte 0, bit 0 set: the harness first rewrites the header's
 * body_bytes and checksum fields to match the rest (so mutations reach the checks behind the
 * checksum); the rest is the plan (copied to a malloc'd, 4-byte aligned buffer, as in the worker).
 * On success every array must lie inside the buffer, every seq / out_row index must be in range, and
 * write(parse(x)) must parse again to the same plan, of the same size. */
#include "fuzz_common.h"
#include "util/le.h"
#include "sched/plan.h"

enum { MAX_OUT = 4096 };
static sits_sample_params_t g_store[MAX_OUT], g_store2[MAX_OUT];

static uint32_t fnv1a(const unsigned char *p, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 16777619u;
    return h;
}

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
    if ((data[0] & 1) && n >= SITS_PLAN_HEADER_BYTES) {
        sits_le_put32(buf + 32, (uint32_t)(n - SITS_PLAN_HEADER_BYTES));
        sits_le_put32(buf + 36, fnv1a(buf + SITS_PLAN_HEADER_BYTES, n - SITS_PLAN_HEADER_BYTES));
    }
    sits_plan_t p;
    if (sits_plan_parse(buf, n, g_store, MAX_OUT, &p) == SITS_OK && p.cmd == SITS_PLAN_KV_MOVE) {
        /* [kv move] the move body: sane counts, arrays inside the buffer, and a lossless round trip */
        const sits_plan_move_t *m = &p.move;
        FUZZ_ASSERT(m->role == SITS_KV_MOVE_SEND || m->role == SITS_KV_MOVE_RECV);
        FUZZ_ASSERT(m->n_blocks > 0 && m->src_tp > 0 && m->src_pp > 0 && m->dst_tp > 0 && m->dst_pp > 0);
        size_t ns = (size_t)m->src_tp * (size_t)m->src_pp, nd = (size_t)m->dst_tp * (size_t)m->dst_pp;
        const unsigned char *end = buf + n;
        FUZZ_ASSERT((const unsigned char *)(m->blocks + m->n_blocks) <= end);
        FUZZ_ASSERT((const unsigned char *)(m->src_ranks + ns) <= end && (const unsigned char *)(m->dst_ranks + nd) <= end);
        size_t sz = sits_plan_size(&p);
        FUZZ_ASSERT(sz == n);
        unsigned char *w = malloc(sz);
        size_t wl = 0;
        FUZZ_ASSERT(w && sits_plan_write(&p, w, sz, &wl) == SITS_OK && wl == sz && !memcmp(w, buf, sz));
        free(w);
    } else if (sits_plan_parse(buf, n, g_store, MAX_OUT, &p) == SITS_OK) {
        /* STEP, STOP, and [kv offload] KV_SWAP, which has the step layout */
        FUZZ_ASSERT(p.cmd == SITS_PLAN_STEP || p.cmd == SITS_PLAN_STOP || p.cmd == SITS_PLAN_KV_SWAP);
        FUZZ_ASSERT(p.n_tokens >= 0 && p.n_seqs >= 0 && p.max_blocks >= 0 && p.n_out >= 0 && p.n_out <= MAX_OUT);
        const unsigned char *end = buf + n;
        FUZZ_ASSERT((const unsigned char *)(p.tokens + p.n_tokens) <= end);
        FUZZ_ASSERT((const unsigned char *)(p.pos + p.n_tokens) <= end);
        FUZZ_ASSERT((const unsigned char *)(p.seq + p.n_tokens) <= end);
        FUZZ_ASSERT((const unsigned char *)(p.block_tables + (size_t)p.n_seqs * p.max_blocks) <= end);
        FUZZ_ASSERT((const unsigned char *)(p.out_rows + p.n_out) <= end);
        for (int i = 0; i < p.n_tokens; i++) FUZZ_ASSERT(p.seq[i] >= 0 && p.seq[i] < p.n_seqs);
        for (int i = 0; i < p.n_out; i++) FUZZ_ASSERT(p.out_rows[i] >= 0 && p.out_rows[i] < p.n_tokens);
        size_t sz = sits_plan_size(&p);
        FUZZ_ASSERT(sz == n);
        unsigned char *w = malloc(sz);
        size_t wl = 0;
        FUZZ_ASSERT(w && sits_plan_write(&p, w, sz, &wl) == SITS_OK && wl == sz);
        sits_plan_t q;
        FUZZ_ASSERT(sits_plan_parse(w, wl, g_store2, MAX_OUT, &q) == SITS_OK);
        FUZZ_ASSERT(q.cmd == p.cmd && q.step == p.step && q.n_tokens == p.n_tokens && q.n_seqs == p.n_seqs &&
                    q.max_blocks == p.max_blocks && q.n_out == p.n_out);
        FUZZ_ASSERT(!memcmp(q.tokens, p.tokens, sizeof(int32_t) * (size_t)p.n_tokens));
        FUZZ_ASSERT(!memcmp(q.pos, p.pos, sizeof(int32_t) * (size_t)p.n_tokens));
        FUZZ_ASSERT(!memcmp(q.seq, p.seq, sizeof(int32_t) * (size_t)p.n_tokens));
        FUZZ_ASSERT(!memcmp(q.block_tables, p.block_tables, sizeof(int32_t) * (size_t)p.n_seqs * p.max_blocks));
        FUZZ_ASSERT(!memcmp(q.out_rows, p.out_rows, sizeof(int32_t) * (size_t)p.n_out));
        for (int i = 0; i < p.n_out; i++)
            FUZZ_ASSERT(!memcmp(&q.sample[i].temperature, &p.sample[i].temperature, 4) &&
                        q.sample[i].top_k == p.sample[i].top_k &&
                        !memcmp(&q.sample[i].top_p, &p.sample[i].top_p, 4) && q.sample[i].seed == p.sample[i].seed &&
                        q.sample[i].step == p.sample[i].step);
        for (int i = 0; i < p.n_out; i++) {   /* [logprobs] [sampling controls] fields and lists */
            const sits_sample_params_t *a = &p.sample[i], *b = &q.sample[i];
            FUZZ_ASSERT(a->logprobs == b->logprobs && a->top_logprobs == b->top_logprobs && a->lp_target == b->lp_target &&
                        !memcmp(&a->presence_penalty, &b->presence_penalty, 4) &&
                        !memcmp(&a->frequency_penalty, &b->frequency_penalty, 4) &&
                        !memcmp(&a->repetition_penalty, &b->repetition_penalty, 4) && !memcmp(&a->min_p, &b->min_p, 4) &&
                        a->n_bias == b->n_bias && a->n_hist == b->n_hist);
            FUZZ_ASSERT(!a->n_bias || !memcmp(a->bias, b->bias, sizeof *a->bias * (size_t)a->n_bias));
            FUZZ_ASSERT(!a->n_hist || !memcmp(a->hist, b->hist, sizeof *a->hist * (size_t)a->n_hist));
        }
        free(w);
    }
    free(buf);
    return 0;
}
