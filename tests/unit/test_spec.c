/* test_spec.c -- speculative decoding pieces (src/spec/spec.h) against independent references:
 *  - the n-gram drafter against hand-worked cases and against a brute-force search written the
 *    other way round (for each length from the longest down, the first occurrence in the sequence);
 *  - the acceptance rule and k adaptation on hand-worked cases; the config parser;
 *  - the KV rollback against the block allocator's own counts (blocks kept = ceil(valid / block size),
 *    no leak over many verifications, a registered prefix block still found);
 *  - the verification as the scheduler runs it (rows sampled by sits_sample with the counters of the
 *    tokens they score, drafts accepted while equal to the sample) on a closed-form model of 5 tokens:
 *    the distribution of 3-token outputs is chi-square tested against the exact probabilities (the
 *    product of the softmax conditionals), a deliberately wrong acceptance (always accept the draft)
 *    must fail the same test, and every speculative output equals the non-speculative one of the
 *    same seed. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "engine/sample.h"
#include "spec/spec.h"

static sits_comm_t *g_self;

static void test_ngram_cases(void **state)
{
    (void)state;
    int32_t d[8];
    /* a b c d a b -> suffix "a b" found at 0, drafts "c d a b" (up to the end) */
    const int32_t s1[] = { 1, 2, 3, 4, 1, 2 };
    assert_int_equal(sits_spec_ngram_propose(s1, 6, 1, 4, 8, d), 4);
    assert_int_equal(d[0], 3); assert_int_equal(d[1], 4); assert_int_equal(d[2], 1); assert_int_equal(d[3], 2);
    assert_int_equal(sits_spec_ngram_propose(s1, 6, 1, 4, 2, d), 2);
    assert_int_equal(d[0], 3); assert_int_equal(d[1], 4);
    /* min 3: "a b" is too short */
    assert_int_equal(sits_spec_ngram_propose(s1, 6, 3, 4, 8, d), 0);
    /* longest match wins over an earlier shorter one: x 2 9 | y 1 2 7 | 1 2 -> "1 2" at 4..5 -> 7 */
    const int32_t s2[] = { 5, 2, 9, 6, 1, 2, 7, 1, 2 };
    assert_int_equal(sits_spec_ngram_propose(s2, 9, 1, 4, 3, d), 3);
    assert_int_equal(d[0], 7); assert_int_equal(d[1], 1); assert_int_equal(d[2], 2);
    /* with max 1 only "2" is matched: its earliest occurrence (index 1) -> 9 6 1 */
    assert_int_equal(sits_spec_ngram_propose(s2, 9, 1, 1, 3, d), 3);
    assert_int_equal(d[0], 9); assert_int_equal(d[1], 6); assert_int_equal(d[2], 1);
    /* a run: 7 7 7 7 -> the match overlaps the suffix, the earliest occurrence ends at 3: drafts "7" */
    const int32_t s3[] = { 7, 7, 7, 7 };
    assert_int_equal(sits_spec_ngram_propose(s3, 4, 1, 4, 5, d), 1);
    assert_int_equal(d[0], 7);
    /* no repeat, too short */
    const int32_t s4[] = { 1, 2, 3 };
    assert_int_equal(sits_spec_ngram_propose(s4, 3, 1, 4, 5, d), 0);
    assert_int_equal(sits_spec_ngram_propose(s4, 1, 1, 4, 5, d), 0);
}

/* The reference: for len = max_n .. min_n, the first start s (s + len < n) with tokens[s .. s + len)
 * equal to the last len tokens; drafts follow it. */
static int ref_propose(const int32_t *t, int n, int min_n, int max_n, int k, int32_t *d)
{
    for (int len = max_n; len >= min_n; len--) {
        if (len >= n) continue;
        for (int s = 0; s + len < n; s++) {
            if (memcmp(t + s, t + n - len, sizeof(int32_t) * (size_t)len) != 0) continue;
            int m = 0;
            for (int j = s + len; j < n && m < k; j++) d[m++] = t[j];
            return m;
        }
    }
    return 0;
}

static void test_ngram_random(void **state)
{
    (void)state;
    unsigned x = 12345;
    int bad = 0;
    for (int trial = 0; trial < 20000; trial++) {
        int32_t t[64], d[16], r[16];
        x = x * 1103515245u + 12345u;
        int n = 1 + (int)((x >> 16) % 60), V = 2 + (int)((x >> 8) % 5);
        for (int i = 0; i < n; i++) { x = x * 1103515245u + 12345u; t[i] = (int32_t)((x >> 16) % (unsigned)V); }
        int mn = 1 + trial % 3, mx = mn + (trial / 3) % 4, k = 1 + trial % 8;
        int a = sits_spec_ngram_propose(t, n, mn, mx, k, d), b = ref_propose(t, n, mn, mx, k, r);
        if (a != b || memcmp(d, r, sizeof(int32_t) * (size_t)a) != 0) {
            if (bad++ < 5) printf("mismatch: n %d min %d max %d k %d: got %d drafts, reference %d\n", n, mn, mx, k, a, b);
        }
    }
    assert_int_equal(bad, 0);
}

static void test_accept_and_k(void **state)
{
    (void)state;
    const int32_t dr[] = { 4, 5, 6 };
    const int32_t s_all[] = { 4, 5, 6, 9 }, s_one[] = { 4, 8, 6, 9 }, s_none[] = { 3, 5, 6, 9 };
    assert_int_equal(sits_spec_accept(dr, s_all, 3), 3);
    assert_int_equal(sits_spec_accept(dr, s_one, 3), 1);
    assert_int_equal(sits_spec_accept(dr, s_none, 3), 0);
    /* draft model (drafts cost a forward pass each): all accepted -> k + 1, partly -> accepted + 1, none -> k / 2 */
    assert_int_equal(sits_spec_k_next(4, 8, 4, 4, 0), 5);
    assert_int_equal(sits_spec_k_next(8, 8, 8, 8, 0), 8);
    assert_int_equal(sits_spec_k_next(4, 8, 0, 4, 0), 2);
    assert_int_equal(sits_spec_k_next(1, 8, 0, 1, 0), 1);
    assert_int_equal(sits_spec_k_next(6, 8, 2, 6, 0), 3);
    assert_int_equal(sits_spec_k_next(6, 8, 3, 3, 0), 7);   /* fewer drafts than k came (the match ran out): all of them */
    /* n-gram (free drafts): any accepted -> k_max, none -> k / 2 */
    assert_int_equal(sits_spec_k_next(2, 8, 1, 2, 1), 8);
    assert_int_equal(sits_spec_k_next(8, 8, 8, 8, 1), 8);
    assert_int_equal(sits_spec_k_next(8, 8, 0, 8, 1), 4);
    assert_int_equal(sits_spec_k_next(1, 4, 0, 1, 1), 1);
}

static void test_config(void **state)
{
    (void)state;
    sits_spec_config_t c;
    char err[256];
    assert_int_equal(sits_spec_config_parse(NULL, &c, err, sizeof err), SITS_OK);
    assert_int_equal(c.method, SITS_SPEC_OFF);
    assert_int_equal(sits_spec_config_parse("{\"method\": \"ngram\", \"num_speculative_tokens\": 5, \"prompt_lookup_max\": 3, "
                                            "\"prompt_lookup_min\": 2}", &c, err, sizeof err), SITS_OK);
    assert_int_equal(c.method, SITS_SPEC_NGRAM);
    assert_int_equal(c.num_speculative_tokens, 5);
    assert_int_equal(c.prompt_lookup_max, 3);
    assert_int_equal(c.prompt_lookup_min, 2);
    assert_int_equal(sits_spec_config_parse("{\"method\": \"ngram\", \"num_speculative_tokens\": 3}", &c, err, sizeof err), SITS_OK);
    assert_int_equal(c.prompt_lookup_max, 4);
    assert_int_equal(c.prompt_lookup_min, 1);
    assert_int_equal(sits_spec_config_parse("{\"method\": \"draft_model\", \"model\": \"/m/draft\", \"num_speculative_tokens\": 4}",
                                            &c, err, sizeof err), SITS_OK);
    assert_int_equal(c.method, SITS_SPEC_DRAFT);
    assert_string_equal(c.model, "/m/draft");
    assert_int_equal(sits_spec_config_parse("{\"model\": \"/m/draft\", \"num_speculative_tokens\": 2}", &c, err, sizeof err), SITS_OK);
    assert_int_equal(c.method, SITS_SPEC_DRAFT);
    assert_int_equal(sits_spec_config_parse("{\"model\": \"[ngram]\", \"num_speculative_tokens\": 2}", &c, err, sizeof err), SITS_OK);
    assert_int_equal(c.method, SITS_SPEC_NGRAM);
    const char *bad[] = { "{\"method\": \"eagle\", \"num_speculative_tokens\": 3}", "{\"method\": \"ngram\"}",
                          "{\"method\": \"ngram\", \"num_speculative_tokens\": 0}",
                          "{\"method\": \"ngram\", \"num_speculative_tokens\": 3, \"prompt_lookup_min\": 5}",
                          "{\"method\": \"ngram\", \"num_speculative_tokens\": 3, \"draft_tensor_parallel_size\": 2}",
                          "{\"method\": \"draft_model\", \"num_speculative_tokens\": 3}",
                          "{\"method\": \"ngram\", \"num_speculative_tokens\": 3, \"lookahead\": 1}", "[1]", "{" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = 0;
        assert_int_not_equal(sits_spec_config_parse(bad[i], &c, err, sizeof err), SITS_OK);
        assert_true(err[0] != 0);
    }
}

/* Rollback keeps ceil(n_valid / bs) blocks and gives the rest back; a block registered in the prefix
 * cache before stays findable; nothing leaks over many verifications. */
static void test_rollback(void **state)
{
    (void)state;
    sits_kv_blocks_t *kb;
    const int bs = 4, total = 12;
    assert_int_equal(sits_kv_blocks_create(total, &kb), SITS_OK);
    int32_t bt[8];
    /* 6 prompt tokens computed + the first generated token: positions 0..6, blocks 0..1 */
    assert_int_equal(sits_kv_blocks_alloc(kb, 2, bt), SITS_OK);
    const int32_t toks[4] = { 11, 12, 13, 14 };
    uint64_t h = sits_kv_block_hash(0, toks, bs);
    sits_kv_blocks_register(kb, bt[0], h);
    /* verification of 5 drafts: positions 6..11 need a third block */
    assert_int_equal(sits_kv_blocks_alloc(kb, 1, bt + 2), SITS_OK);
    assert_int_equal(sits_kv_blocks_free_count(kb), total - 3);
    /* nothing accepted: valid positions 0..6 (7): 2 blocks kept, the draft block freed */
    assert_int_equal(sits_spec_kv_rollback(kb, bs, 7, bt, 3), 2);
    assert_int_equal(sits_kv_blocks_free_count(kb), total - 2);
    /* again, 3 accepted and one emitted: valid 0..9 (10): 3 blocks */
    assert_int_equal(sits_kv_blocks_alloc(kb, 1, bt + 2), SITS_OK);
    assert_int_equal(sits_spec_kv_rollback(kb, bs, 10, bt, 3), 3);
    assert_int_equal(sits_kv_blocks_free_count(kb), total - 3);
    /* exactly on a block boundary: 8 valid positions -> 2 blocks */
    assert_int_equal(sits_spec_kv_rollback(kb, bs, 8, bt, 3), 2);
    assert_int_equal(sits_kv_blocks_free_count(kb), total - 2);
    /* fewer blocks than n_valid needs: nothing released */
    assert_int_equal(sits_spec_kv_rollback(kb, bs, 12, bt, 2), 2);
    /* the registered prefix block is still the one found for its hash */
    int32_t id = sits_kv_blocks_lookup(kb, h);
    assert_int_equal(id, bt[0]);
    sits_kv_blocks_release(kb, 1, &id);
    /* many verifications: allocate up to 4 draft blocks, roll back to a random valid length */
    unsigned x = 7;
    int nb = 2, valid = 7;
    for (int it = 0; it < 1000; it++) {
        x = x * 1103515245u + 12345u;
        int k = 1 + (int)((x >> 16) % 12), need = (valid + k + 1 + bs - 1) / bs;   /* positions valid .. valid + k */
        if (need > 8) { valid = 7; nb = sits_spec_kv_rollback(kb, bs, valid, bt, nb); continue; }
        if (need > nb) { assert_int_equal(sits_kv_blocks_alloc(kb, need - nb, bt + nb), SITS_OK); nb = need; }
        valid += 1 + (int)((x >> 8) % (unsigned)(k + 1));   /* 1 .. k + 1 emitted */
        nb = sits_spec_kv_rollback(kb, bs, valid, bt, nb);
        assert_int_equal(nb, (valid + bs - 1) / bs);
        assert_int_equal(sits_kv_blocks_free_count(kb), total - nb);
    }
    sits_kv_blocks_release(kb, nb, bt);
    assert_int_equal(sits_kv_blocks_free_count(kb), total);
    sits_kv_blocks_destroy(kb);
}

/* ---- the verification's output distribution on a closed-form model ---- */
#define V 5
#define LEN 3
static const float g_logits[V][V] = {   /* next-token logits given the previous token */
    { 1.0f, 0.2f, -0.5f, 0.7f, 0.0f }, { 0.1f, 1.3f, 0.4f, -1.0f, 0.3f }, { -0.3f, 0.5f, 0.9f, 0.2f, 0.0f },
    { 0.6f, -0.2f, 0.1f, 1.1f, -0.4f }, { 0.0f, 0.0f, 0.8f, 0.3f, 0.5f } };
static const float g_temp = 0.9f;

static double exact_p(int prev, int y)
{
    double z = 0;
    for (int i = 0; i < V; i++) z += exp((double)g_logits[prev][i] / g_temp);
    return exp((double)g_logits[prev][y] / g_temp) / z;
}

/* Samples rows (each scoring the token after prev[j]) with seed and counters step0 + j. */
static void sample_rows(const int *prev, int n, uint64_t seed, int step0, int32_t *out)
{
    float lg[(LEN + 1) * V];
    sits_sample_params_t sp[LEN + 1];
    for (int j = 0; j < n; j++) {
        memcpy(lg + j * V, g_logits[prev[j]], sizeof(float) * V);
        sp[j] = (sits_sample_params_t){ .temperature = g_temp, .top_p = 1.0f, .seed = seed, .step = (uint64_t)(step0 + j) };
    }
    assert_int_equal(sits_sample(g_self, lg, n, 0, V, sp, out), SITS_OK);
}

/* One output of LEN tokens after token `start`: speculative with drafter `draft` (a fixed guess of
 * the continuation, up to k tokens per step); wrong_accept takes every draft as accepted (a negative
 * control). Returns the number of accepted drafts; out[LEN]. */
static int generate(int start, uint64_t seed, int k, const int *guess, int wrong_accept, int *out)
{
    int n = 0, acc = 0;
    while (n < LEN) {
        int kk = LEN - n - 1 < k ? LEN - n - 1 : k;   /* drafts never pass the length */
        int prev[LEN + 1];
        int32_t dr[LEN], smp[LEN + 1];
        prev[0] = n ? out[n - 1] : start;
        for (int j = 0; j < kk; j++) { dr[j] = guess[n + j]; prev[j + 1] = dr[j]; }
        sample_rows(prev, kk + 1, seed, n, smp);
        int m = wrong_accept ? kk : sits_spec_accept(dr, smp, kk);
        for (int j = 0; j < m; j++) out[n++] = dr[j];
        out[n++] = smp[m];
        acc += m;
    }
    return acc;
}

/* Chi-square statistic of counts[V^LEN] over N trials against the exact joint probabilities. */
static double chi2(const int *counts, int N, int start)
{
    double x = 0;
    for (int c = 0; c < V * V * V; c++) {
        int a = c / (V * V), b = (c / V) % V, d = c % V;
        double e = N * exact_p(start, a) * exact_p(a, b) * exact_p(b, d);
        x += (counts[c] - e) * (counts[c] - e) / e;
    }
    return x;
}

static void test_rejection_distribution(void **state)
{
    (void)state;
    const int N = 40000, start = 2;
    const int guess[LEN] = { 2, 2, 2 };   /* a plausible continuation (p ~ 0.3 each) */
    /* chi-square 0.999 quantile with 124 degrees of freedom (scipy.stats.chi2.ppf(0.999, 124)) */
    const double crit = 178.41;
    int *cs = calloc(V * V * V, sizeof(int)), *cw = calloc(V * V * V, sizeof(int)), *cp = calloc(V * V * V, sizeof(int));
    assert_non_null(cs); assert_non_null(cw); assert_non_null(cp);
    long accepted = 0;
    int differ = 0;
    for (int t = 0; t < N; t++) {
        int o[LEN], w[LEN], p[LEN];
        uint64_t seed = 0x9e3779b97f4a7c15ull * (uint64_t)(t + 1);
        accepted += generate(start, seed, 2, guess, 0, o);
        generate(start, seed, 2, guess, 1, w);
        generate(start, seed, 0, guess, 0, p);   /* k = 0: plain decoding */
        cs[(o[0] * V + o[1]) * V + o[2]]++;
        cw[(w[0] * V + w[1]) * V + w[2]]++;
        cp[(p[0] * V + p[1]) * V + p[2]]++;
        if (memcmp(o, p, sizeof o) != 0 && differ++ < 5)
            printf("seed %d: speculative %d %d %d, plain %d %d %d\n", t, o[0], o[1], o[2], p[0], p[1], p[2]);
    }
    double xs = chi2(cs, N, start), xw = chi2(cw, N, start), xp = chi2(cp, N, start);
    printf("chi-square (124 dof, critical %.1f at p = 0.001): speculative %.1f, plain %.1f, always-accept control %.1f; "
           "drafts accepted %ld\n", crit, xs, xp, xw, accepted);
    assert_true(xs < crit);
    assert_true(xp < crit);
    assert_true(xw > crit);   /* the test can tell a wrong acceptance rule */
    assert_true(accepted > 0);
    assert_int_equal(differ, 0);
    free(cs); free(cw); free(cp);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    if (sits_comm_mpi_create(MPI_COMM_SELF, 60.0, &g_self) != SITS_OK) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ngram_cases), cmocka_unit_test(test_ngram_random), cmocka_unit_test(test_accept_and_k),
        cmocka_unit_test(test_config), cmocka_unit_test(test_rollback), cmocka_unit_test(test_rejection_distribution),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    sits_comm_destroy(g_self);
    MPI_Finalize();
    return rc ? 1 : 0;
}
