/* plan.c -- step plan serialisation; see plan.h for the wire format. */
#include "sched/plan.h"
#include "util/le.h"
#include "util/log.h"

#include <string.h>

#define SAMPLE_BYTES 72

static uint32_t fnv1a(const unsigned char *p, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 16777619u;
    return h;
}

static size_t body_size(int64_t n_tokens, int64_t n_seqs, int64_t max_blocks, int64_t n_out)
{
    return (size_t)(4 * (3 * n_tokens + n_seqs * max_blocks + n_out) + SAMPLE_BYTES * n_out);
}

/* [sampling controls] the lists after the sample records (only when n_out > 0): u32 total_bias,
 * u32 total_hist, then bias {i32 id, f32 bias}[total_bias], hist {i32 id, i32 out_count, i32
 * in_prompt}[total_hist] (row i's entries follow row i-1's) */
static size_t lists_size(int n_out, int64_t total_bias, int64_t total_hist)
{
    return n_out > 0 ? (size_t)(8 + 8 * total_bias + 12 * total_hist) : 0;
}

static void list_totals(const sits_plan_t *p, int64_t *tb_p, int64_t *th_p)
{
    int64_t tb = 0, th = 0;
    for (int i = 0; i < p->n_out; i++) {
        tb += p->sample[i].n_bias > 0 ? p->sample[i].n_bias : 0;
        th += p->sample[i].n_hist > 0 ? p->sample[i].n_hist : 0;
    }
    *tb_p = tb;
    *th_p = th;
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* [structured output] bytes of the mask trailer (0 without masks); follow: without the masks themselves */
static size_t masks_size(const sits_sample_masks_t *m, int follow)
{
    return m->n > 0 ? 8 + 4 * (size_t)m->n * (1 + (follow ? 0 : (size_t)m->words)) + 4 : 0;
}

/* the trailer's own checksum: FNV-1a over 64-bit words (the byte-wise one costs ~0.5 ms on the 512 KB of
 * a batch of 32 masks over a 128k vocabulary); n % 4 == 0 */
static uint32_t words_sum(const unsigned char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull, w;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
    }
    if (i < n) {
        uint32_t t;
        memcpy(&t, p + i, 4);
        h = (h ^ t) * 0x100000001b3ull;
    }
    return (uint32_t)(h ^ (h >> 32));
}

/* ---- [kv move] KV move orders (plan.h): a body of i32 only ---- */
#define MOVE_FIXED 8

static unsigned char *put_i32s(unsigned char *q, const int32_t *a, int n);

static int64_t move_items(const sits_plan_move_t *m)
{
    return MOVE_FIXED + (int64_t)m->n_blocks + (int64_t)m->src_tp * m->src_pp + (int64_t)m->dst_tp * m->dst_pp;
}

static int move_counts_ok(const sits_plan_move_t *m)
{
    return (m->role == SITS_KV_MOVE_SEND || m->role == SITS_KV_MOVE_RECV) && m->n_blocks > 0 && m->src_tp > 0 &&
           m->src_pp > 0 && m->dst_tp > 0 && m->dst_pp > 0 && m->n_blocks <= SITS_PLAN_MAX_ITEMS &&
           m->src_tp <= 65536 && m->src_pp <= 65536 && m->dst_tp <= 65536 && m->dst_pp <= 65536 &&
           move_items(m) <= SITS_PLAN_MAX_ITEMS;
}

static void put_header(unsigned char *h, uint16_t cmd, uint64_t step, const int32_t counts[4], uint32_t body, uint32_t sum);

static sits_status_t move_write(const sits_plan_t *p, void *buf, size_t cap, size_t *len_p)
{
    const sits_plan_move_t *m = &p->move;
    if (!move_counts_ok(m)) return SITS_ERR_INVALID;
    size_t body = 4 * (size_t)move_items(m);
    if (cap < SITS_PLAN_HEADER_BYTES + body) return SITS_ERR_INVALID;
    unsigned char *h = buf, *q = h + SITS_PLAN_HEADER_BYTES;
    int32_t fixed[MOVE_FIXED] = { m->role, m->n_blocks, m->src_tp, m->src_pp, m->dst_tp, m->dst_pp, (int32_t)m->move_id, m->flags };
    q = put_i32s(q, fixed, MOVE_FIXED);
    q = put_i32s(q, m->blocks, m->n_blocks);
    q = put_i32s(q, m->src_ranks, m->src_tp * m->src_pp);
    q = put_i32s(q, m->dst_ranks, m->dst_tp * m->dst_pp);
    static const int32_t zero[4] = { 0, 0, 0, 0 };
    put_header(h, SITS_PLAN_KV_MOVE, p->step, zero, (uint32_t)body, fnv1a(h + SITS_PLAN_HEADER_BYTES, body));
    *len_p = SITS_PLAN_HEADER_BYTES + body;
    return SITS_OK;
}

/* h: a header with good magic and version and command KV_MOVE */
static sits_status_t move_parse(const unsigned char *h, size_t len, sits_plan_t *plan_p)
{
    size_t body = sits_le_get32(h + 32);
    if (sits_le_get32(h + 16) || sits_le_get32(h + 20) || sits_le_get32(h + 24) || sits_le_get32(h + 28) || body < 4 * MOVE_FIXED ||
        len != SITS_PLAN_HEADER_BYTES + body || body % 4) {
        SITS_ERROR(SITS_SUB_SCHED, "kv move plan: bad counts or size (%zu bytes)", len);
        return SITS_ERR_FORMAT;
    }
    const unsigned char *q = h + SITS_PLAN_HEADER_BYTES;
    if (fnv1a(q, body) != sits_le_get32(h + 36)) {
        SITS_ERROR(SITS_SUB_SCHED, "kv move plan: checksum mismatch");
        return SITS_ERR_FORMAT;
    }
    const int32_t *a = (const int32_t *)q;  /* 4-byte aligned like the step plan's arrays */
    sits_plan_move_t m = { .role = a[0], .n_blocks = a[1], .src_tp = a[2], .src_pp = a[3], .dst_tp = a[4], .dst_pp = a[5],
                           .move_id = (uint32_t)a[6], .flags = a[7] };
    if (!move_counts_ok(&m) || (size_t)move_items(&m) * 4 != body) {
        SITS_ERROR(SITS_SUB_SCHED, "kv move plan: counts out of range");
        return SITS_ERR_FORMAT;
    }
    m.blocks = a + MOVE_FIXED;
    m.src_ranks = m.blocks + m.n_blocks;
    m.dst_ranks = m.src_ranks + m.src_tp * m.src_pp;
    for (int i = 0; i < m.n_blocks; i++)
        if (m.blocks[i] < 0) {
            SITS_ERROR(SITS_SUB_SCHED, "kv move plan: negative block id");
            return SITS_ERR_FORMAT;
        }
    *plan_p = (sits_plan_t){ .cmd = SITS_PLAN_KV_MOVE, .step = sits_le_get64(h + 8), .move = m };
    return SITS_OK;
}

static void put_header(unsigned char *h, uint16_t cmd, uint64_t step, const int32_t counts[4], uint32_t body, uint32_t sum)
{
    sits_le_put32(h, SITS_PLAN_MAGIC);
    sits_le_put16(h + 4, SITS_PLAN_VERSION);
    sits_le_put16(h + 6, cmd);
    sits_le_put64(h + 8, step);
    for (int i = 0; i < 4; i++) sits_le_put32(h + 16 + 4 * i, (uint32_t)counts[i]);
    sits_le_put32(h + 32, body);
    sits_le_put32(h + 36, sum);
}
/* ---- end kv move ---- */

size_t sits_plan_size(const sits_plan_t *p)
{
    if (p->cmd == SITS_PLAN_KV_MOVE) return SITS_PLAN_HEADER_BYTES + 4 * (size_t)move_items(&p->move);
    int64_t tb, th;
    list_totals(p, &tb, &th);
    return SITS_PLAN_HEADER_BYTES + body_size(p->n_tokens, p->n_seqs, p->max_blocks, p->n_out) + lists_size(p->n_out, tb, th) +
           masks_size(&p->masks, p->masks_follow);
}

static unsigned char *put_i32s(unsigned char *q, const int32_t *a, int n)
{
    for (int i = 0; i < n; i++, q += 4) sits_le_put32(q, (uint32_t)a[i]);
    return q;
}

/* [structured output] masks[nw] onto the wire */
static unsigned char *put_masks(unsigned char *q, const uint32_t *m, size_t nw)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(q, m, 4 * nw);   /* already the wire's byte order */
    return q + 4 * nw;
#else
    for (size_t i = 0; i < nw; i++, q += 4) sits_le_put32(q, m[i]);
    return q;
#endif
}

size_t sits_plan_masks_size(const sits_plan_t *p) { return 4 * (size_t)p->masks.n * (size_t)p->masks.words + 4; }

void sits_plan_masks_write(const sits_plan_t *p, const uint32_t *masks, void *buf)
{
    unsigned char *q = put_masks(buf, masks, (size_t)p->masks.n * p->masks.words);
    sits_le_put32(q, words_sum(buf, (size_t)(q - (unsigned char *)buf)));
}

sits_status_t sits_plan_masks_parse(sits_plan_t *p, const void *buf, size_t len)
{
    size_t nb = 4 * (size_t)p->masks.n * (size_t)p->masks.words;
    if (!p->masks_follow || len != nb + 4 || words_sum(buf, nb) != sits_le_get32((const unsigned char *)buf + nb)) {
        SITS_ERROR(SITS_SUB_SCHED, "step %llu: the masks after the plan: %zu bytes, %zu expected, or a bad checksum",
                   (unsigned long long)p->step, len, nb + 4);
        return SITS_ERR_FORMAT;
    }
    p->masks.masks = buf;   /* 4-byte aligned (a malloc'ed buffer), little-endian host */
    return SITS_OK;
}

sits_status_t sits_plan_write(const sits_plan_t *p, void *buf, size_t cap, size_t *len_p)
{
    if (p->cmd == SITS_PLAN_KV_MOVE) return move_write(p, buf, cap, len_p);
    if (p->n_tokens < 0 || p->n_seqs < 0 || p->max_blocks < 0 || p->n_out < 0 || p->masks.n < 0 || p->masks.n > p->n_out ||
        p->masks.words < 0 || (p->masks_follow && (p->cmd != SITS_PLAN_STEP || p->masks.n == 0)))
        return SITS_ERR_INVALID;
    size_t need = sits_plan_size(p);
    if (cap < need) return SITS_ERR_INVALID;
    unsigned char *h = buf, *q = h + SITS_PLAN_HEADER_BYTES;
    q = put_i32s(q, p->tokens, p->n_tokens);
    q = put_i32s(q, p->pos, p->n_tokens);
    q = put_i32s(q, p->seq, p->n_tokens);
    q = put_i32s(q, p->block_tables, p->n_seqs * p->max_blocks);
    q = put_i32s(q, p->out_rows, p->n_out);
    for (int i = 0; i < p->n_out; i++, q += SAMPLE_BYTES) {
        const sits_sample_params_t *s = &p->sample[i];
        uint32_t t, tp;
        memcpy(&t, &s->temperature, 4);
        memcpy(&tp, &s->top_p, 4);
        sits_le_put32(q, t);
        sits_le_put32(q + 4, (uint32_t)s->top_k);
        sits_le_put32(q + 8, tp);
        sits_le_put32(q + 12, 0);
        sits_le_put64(q + 16, s->seed);
        sits_le_put64(q + 24, s->step);
        sits_le_put32(q + 32, (uint32_t)s->logprobs);
        sits_le_put32(q + 36, (uint32_t)s->top_logprobs);
        sits_le_put32(q + 40, (uint32_t)s->lp_target);
        sits_le_put32(q + 44, 0);
        sits_le_put32(q + 48, f32_bits(s->presence_penalty));
        sits_le_put32(q + 52, f32_bits(s->frequency_penalty));
        sits_le_put32(q + 56, f32_bits(s->repetition_penalty));
        sits_le_put32(q + 60, f32_bits(s->min_p));
        sits_le_put32(q + 64, (uint32_t)(s->n_bias > 0 ? s->n_bias : 0));
        sits_le_put32(q + 68, (uint32_t)(s->n_hist > 0 ? s->n_hist : 0));
    }
    int64_t tb, th;
    list_totals(p, &tb, &th);
    if (p->n_out > 0) {
        sits_le_put32(q, (uint32_t)tb);
        sits_le_put32(q + 4, (uint32_t)th);
        q += 8;
    }
    for (int i = 0; i < p->n_out; i++)
        for (int b = 0; b < p->sample[i].n_bias; b++, q += 8) {
            sits_le_put32(q, (uint32_t)p->sample[i].bias[b].id);
            sits_le_put32(q + 4, f32_bits(p->sample[i].bias[b].bias));
        }
    for (int i = 0; i < p->n_out; i++)
        for (int h = 0; h < p->sample[i].n_hist; h++, q += 12) {
            sits_le_put32(q, (uint32_t)p->sample[i].hist[h].id);
            sits_le_put32(q + 4, (uint32_t)p->sample[i].hist[h].out_count);
            sits_le_put32(q + 8, (uint32_t)p->sample[i].hist[h].in_prompt);
        }
    /* base: the bytes the header's checksum covers (everything before the mask trailer) */
    size_t base = (size_t)(q - (h + SITS_PLAN_HEADER_BYTES));
    if (p->masks.n > 0) {
        unsigned char *t = q;
        int32_t mh[2] = { p->masks.n, p->masks.words };
        q = put_i32s(q, mh, 2);
        q = put_i32s(q, p->masks.rows, p->masks.n);
        if (!p->masks_follow) q = put_masks(q, p->masks.masks, (size_t)p->masks.n * p->masks.words);
        sits_le_put32(q, words_sum(t, (size_t)(q - t)));
        q += 4;
    }
    size_t body = (size_t)(q - (h + SITS_PLAN_HEADER_BYTES));
    sits_le_put32(h, SITS_PLAN_MAGIC);
    sits_le_put16(h + 4, SITS_PLAN_VERSION);
    sits_le_put16(h + 6, (uint16_t)(p->cmd | (p->masks_follow ? SITS_PLAN_F_MASKS_FOLLOW : 0)));
    sits_le_put64(h + 8, p->step);
    sits_le_put32(h + 16, (uint32_t)p->n_tokens);
    sits_le_put32(h + 20, (uint32_t)p->n_seqs);
    sits_le_put32(h + 24, (uint32_t)p->max_blocks);
    sits_le_put32(h + 28, (uint32_t)p->n_out);
    sits_le_put32(h + 32, (uint32_t)body);
    sits_le_put32(h + 36, fnv1a(h + SITS_PLAN_HEADER_BYTES, base));   /* the mask trailer has its own */
    *len_p = need;
    return SITS_OK;
}

sits_status_t sits_plan_parse(const void *buf, size_t len, sits_sample_params_t *store, int max_out, sits_plan_t *plan_p)
{
    const unsigned char *h = buf;
    if (len < SITS_PLAN_HEADER_BYTES) {
        SITS_ERROR(SITS_SUB_SCHED, "step plan truncated: %zu bytes, header needs %d", len, SITS_PLAN_HEADER_BYTES);
        return SITS_ERR_FORMAT;
    }
    if (sits_le_get32(h) != SITS_PLAN_MAGIC || sits_le_get16(h + 4) != SITS_PLAN_VERSION) {
        SITS_ERROR(SITS_SUB_SCHED, "step plan: bad magic or version %u", sits_le_get16(h + 4));
        return SITS_ERR_FORMAT;
    }
    uint16_t cmd = sits_le_get16(h + 6), follow = cmd & SITS_PLAN_F_MASKS_FOLLOW;
    cmd &= (uint16_t)~SITS_PLAN_F_MASKS_FOLLOW;
    if (cmd == SITS_PLAN_KV_MOVE && !follow) return move_parse(h, len, plan_p);
    if (follow && cmd != SITS_PLAN_STEP) {
        SITS_ERROR(SITS_SUB_SCHED, "step plan: masks that follow a command %u", cmd);
        return SITS_ERR_FORMAT;
    }
    int32_t nt = (int32_t)sits_le_get32(h + 16), ns = (int32_t)sits_le_get32(h + 20), mb = (int32_t)sits_le_get32(h + 24),
            no = (int32_t)sits_le_get32(h + 28);
    if (cmd != SITS_PLAN_STEP && cmd != SITS_PLAN_STOP && cmd != SITS_PLAN_KV_SWAP && cmd != SITS_PLAN_KV_COPY) {
        SITS_ERROR(SITS_SUB_SCHED, "step plan: unknown command %u", cmd);
        return SITS_ERR_FORMAT;
    }
    if (nt < 0 || ns < 0 || mb < 0 || no < 0 || nt > SITS_PLAN_MAX_ITEMS || ns > SITS_PLAN_MAX_ITEMS ||
        mb > SITS_PLAN_MAX_ITEMS || no > SITS_PLAN_MAX_ITEMS || (int64_t)ns * mb > SITS_PLAN_MAX_ITEMS || no > max_out) {
        SITS_ERROR(SITS_SUB_SCHED, "step plan: counts out of range (tokens %d, seqs %d, blocks %d, outputs %d)", nt, ns, mb, no);
        return SITS_ERR_FORMAT;
    }
    size_t body = body_size(nt, ns, mb, no), lists = no > 0 ? 8 : 0;
    if (len < SITS_PLAN_HEADER_BYTES + body + lists) {
        SITS_ERROR(SITS_SUB_SCHED, "step plan: %zu bytes, counts say at least %zu", len, SITS_PLAN_HEADER_BYTES + body + lists);
        return SITS_ERR_FORMAT;
    }
    uint32_t tb = no > 0 ? sits_le_get32(h + SITS_PLAN_HEADER_BYTES + body) : 0;
    uint32_t th = no > 0 ? sits_le_get32(h + SITS_PLAN_HEADER_BYTES + body + 4) : 0;
    if (tb > SITS_PLAN_MAX_ITEMS || th > SITS_PLAN_MAX_ITEMS) {
        SITS_ERROR(SITS_SUB_SCHED, "step plan: list totals out of range (bias %u, history %u)", tb, th);
        return SITS_ERR_FORMAT;
    }
    size_t fixed = body;   /* the sample records end here; the lists follow */
    body += lists_size(no, tb, th);
    size_t base = body;    /* the header's checksum covers [0, base) */
    sits_sample_masks_t masks = { 0 };
    if (len >= SITS_PLAN_HEADER_BYTES + base + 8 && cmd == SITS_PLAN_STEP) {
        /* [structured output] the mask trailer */
        const unsigned char *t = h + SITS_PLAN_HEADER_BYTES + base;
        int32_t n = (int32_t)sits_le_get32(t), w = (int32_t)sits_le_get32(t + 4);
        if (n < 1 || n > no || w < 1 || w > SITS_PLAN_MAX_ITEMS) {
            SITS_ERROR(SITS_SUB_SCHED, "step plan: mask trailer counts out of range (%d masks of %d words)", n, w);
            return SITS_ERR_FORMAT;
        }
        masks = (sits_sample_masks_t){ .n = n, .words = w, .rows = (const int32_t *)(t + 8) };
        masks.masks = follow ? NULL : (const uint32_t *)(masks.rows + n);
        body += masks_size(&masks, follow);
    }
    if (follow && masks.n == 0) {
        SITS_ERROR(SITS_SUB_SCHED, "step plan: masks follow but the plan names no masked row");
        return SITS_ERR_FORMAT;
    }
    if (sits_le_get32(h + 32) != body || len != SITS_PLAN_HEADER_BYTES + body) {
        SITS_ERROR(SITS_SUB_SCHED, "step plan: %zu bytes, counts say %zu", len, SITS_PLAN_HEADER_BYTES + body);
        return SITS_ERR_FORMAT;
    }
    const unsigned char *q = h + SITS_PLAN_HEADER_BYTES;
    if (fnv1a(q, base) != sits_le_get32(h + 36) ||
        (masks.n > 0 && words_sum(q + base, body - base - 4) != sits_le_get32(q + body - 4))) {
        SITS_ERROR(SITS_SUB_SCHED, "step plan: checksum mismatch");
        return SITS_ERR_FORMAT;
    }
    sits_plan_t p = { .cmd = (sits_plan_cmd_t)cmd, .step = sits_le_get64(h + 8), .n_tokens = nt, .n_seqs = ns, .max_blocks = mb,
                      .n_out = no };
    /* arrays are 4-byte aligned when buf is (the broadcast buffer is malloc'ed) */
    p.tokens = (const int32_t *)q;
    p.pos = p.tokens + nt;
    p.seq = p.pos + nt;
    p.block_tables = p.seq + nt;
    p.out_rows = p.block_tables + (size_t)ns * mb;
    const unsigned char *s = (const unsigned char *)(p.out_rows + no);
    for (int i = 0; i < no; i++, s += SAMPLE_BYTES) {
        uint32_t t = sits_le_get32(s), tp = sits_le_get32(s + 8);
        memcpy(&store[i].temperature, &t, 4);
        store[i].top_k = (int32_t)sits_le_get32(s + 4);
        memcpy(&store[i].top_p, &tp, 4);
        store[i].seed = sits_le_get64(s + 16);
        store[i].step = sits_le_get64(s + 24);
        store[i].logprobs = (int32_t)sits_le_get32(s + 32) != 0;
        store[i].top_logprobs = (int32_t)sits_le_get32(s + 36);
        store[i].lp_target = (int32_t)sits_le_get32(s + 40);
        store[i].presence_penalty = bits_f32(sits_le_get32(s + 48));
        store[i].frequency_penalty = bits_f32(sits_le_get32(s + 52));
        store[i].repetition_penalty = bits_f32(sits_le_get32(s + 56));
        store[i].min_p = bits_f32(sits_le_get32(s + 60));
        store[i].n_bias = (int32_t)sits_le_get32(s + 64);
        store[i].n_hist = (int32_t)sits_le_get32(s + 68);
        if (store[i].top_logprobs < 0 || store[i].top_logprobs > SITS_LOGPROB_MAX_TOP) {
            SITS_ERROR(SITS_SUB_SCHED, "step plan: top_logprobs %d out of range", store[i].top_logprobs);
            return SITS_ERR_FORMAT;
        }
    }
    /* [sampling controls] each row's lists point into the buffer (4-byte aligned, little-endian host) */
    const sits_sample_bias_t *bias = (const sits_sample_bias_t *)(q + fixed + 8);
    const sits_sample_hist_t *hist = (const sits_sample_hist_t *)(q + fixed + 8 + 8 * (size_t)tb);
    int64_t ub = 0, uh = 0;
    for (int i = 0; i < no; i++) {
        if (store[i].n_bias < 0 || store[i].n_hist < 0 || (ub += store[i].n_bias) > tb || (uh += store[i].n_hist) > th) {
            SITS_ERROR(SITS_SUB_SCHED, "step plan: sample row %d's lists exceed the totals", i);
            return SITS_ERR_FORMAT;
        }
        store[i].bias = store[i].n_bias ? bias + (ub - store[i].n_bias) : NULL;
        store[i].hist = store[i].n_hist ? hist + (uh - store[i].n_hist) : NULL;
    }
    if (ub != tb || uh != th) {
        SITS_ERROR(SITS_SUB_SCHED, "step plan: list totals %u/%u, rows use %lld/%lld", tb, th, (long long)ub, (long long)uh);
        return SITS_ERR_FORMAT;
    }
    p.sample = store;
    p.masks = masks;
    p.masks_follow = follow != 0;
    for (int i = 0; i < masks.n; i++)
        if (masks.rows[i] < 0 || masks.rows[i] >= no) {
            SITS_ERROR(SITS_SUB_SCHED, "step plan: mask row %d out of range", masks.rows[i]);
            return SITS_ERR_FORMAT;
        }
    for (int i = 0; i < nt; i++)
        if (p.seq[i] < 0 || p.seq[i] >= ns) {
            SITS_ERROR(SITS_SUB_SCHED, "step plan: token %d names sequence %d of %d", i, p.seq[i], ns);
            return SITS_ERR_FORMAT;
        }
    for (int i = 0; i < no; i++)
        if (p.out_rows[i] < 0 || p.out_rows[i] >= nt) {
            SITS_ERROR(SITS_SUB_SCHED, "step plan: output row %d out of range", p.out_rows[i]);
            return SITS_ERR_FORMAT;
        }
    *plan_p = p;
    return SITS_OK;
}
