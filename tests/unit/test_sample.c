/* test_sample.c -- the distributed sampler (src/engine/sample.c).
 *
 * Runs on any number of MPI ranks (the vocabulary is split over them) and checks:
 *   - greedy picks the argmax (lowest id on ties);
 *   - seeded determinism: the same (seed, step) gives the same token, on every rank;
 *   - top-k / top-p never emit an id outside the set computed here independently (sorted softmax);
 *   - sampled frequencies follow softmax(l / T) restricted to the allowed set (within 5 sigma);
 *   - the vocabulary split does not change the result: every rank's token equals the one a single
 *     rank (MPI_COMM_SELF) samples from the whole vocabulary;
 *   - top-p whose nucleus is wider than the candidate budget (256 per rank) is still exact;
 *   - [perf] the pieces of the engine's device path: parameter rows and modes, the reduction's
 *     records against plain loops, and reduce + merge over the slices = the whole-vocabulary token. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "comm/comm.h"
#include "engine/sample.h"

#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

static sits_comm_t *g_world, *g_self;

/* this rank's slice of a V-vocab split like the engine's (padded to 64, ceil per rank) */
static void slice(int V, int *v_start, int *v_count)
{
    int R = g_world->size, r = g_world->rank;
    int pad = (V + 63) / 64 * 64, per = (pad + R - 1) / R;
    *v_start = r * per;
    int end = *v_start + per > V ? V : *v_start + per;
    *v_count = end > *v_start ? end - *v_start : 0;
}

static void fill_logits(float *l, int V, unsigned seed, float scale)
{
    srand(seed);
    for (int i = 0; i < V; i++) l[i] = scale * ((float)rand() / RAND_MAX - 0.5f);
}

/* sample token for one sequence on the world (sliced) and on self (whole vocab); both must agree */
static int32_t sample_both(const float *full, int V, const sits_sample_params_t *p)
{
    int vs, vc;
    slice(V, &vs, &vc);
    int32_t t_world = -1, t_self = -1;
    assert_int_equal(sits_sample(g_world, full + vs, 1, vs, vc, p, &t_world), SITS_OK);
    assert_int_equal(sits_sample(g_self, full, 1, 0, V, p, &t_self), SITS_OK);
    assert_int_equal(t_world, t_self);
    int32_t t0 = t_world;
    MPI_Bcast(&t0, 1, MPI_INT32_T, 0, MPI_COMM_WORLD);
    assert_int_equal(t0, t_world);
    return t_world;
}

static void test_greedy(void **state)
{
    enum { V = 301 };
    float l[V];
    fill_logits(l, V, 1, 10.0f);
    l[17] = 100.0f;
    l[250] = 100.0f; /* tie: lowest id wins */
    sits_sample_params_t p = { .temperature = 0.0f, .top_p = 1.0f };
    assert_int_equal(sample_both(l, V, &p), 17);
    p.temperature = 0.7f;
    p.top_k = 1;
    assert_int_equal(sample_both(l, V, &p), 17);
}

static void test_determinism(void **state)
{
    enum { V = 500 };
    float l[V];
    fill_logits(l, V, 2, 4.0f);
    sits_sample_params_t p = { .temperature = 1.0f, .top_p = 1.0f, .seed = 1234, .step = 7 };
    int32_t a = sample_both(l, V, &p), b = sample_both(l, V, &p);
    assert_int_equal(a, b);
    int differ = 0;
    for (uint64_t s = 0; s < 40; s++) {
        p.seed = s;
        differ += sample_both(l, V, &p) != a;
    }
    assert_true(differ > 10); /* different seeds explore the distribution */
}

static int cmp_desc(const void *a, const void *b)
{
    const double *x = a, *y = b;
    return (x[0] < y[0]) - (x[0] > y[0]);
}

/* the allowed set: top-k by logit, then the smallest prefix whose (renormalised) mass >= top_p */
static void allowed_set(const float *l, int V, const sits_sample_params_t *p, char *allowed)
{
    double (*s)[2] = malloc(sizeof *s * (size_t)V);
    for (int i = 0; i < V; i++) { s[i][0] = l[i]; s[i][1] = i; }
    qsort(s, (size_t)V, sizeof *s, cmp_desc);
    int keep = p->top_k > 0 && p->top_k < V ? p->top_k : V;
    double z = 0;
    for (int i = 0; i < keep; i++) z += exp((s[i][0] - s[0][0]) / p->temperature);
    double cum = 0;
    memset(allowed, 0, (size_t)V);
    for (int i = 0; i < keep; i++) {
        allowed[(int)s[i][1]] = 1;
        cum += exp((s[i][0] - s[0][0]) / p->temperature) / z;
        if (cum >= p->top_p) break;
    }
    free(s);
}

static void test_truncation_never_escapes(void **state)
{
    enum { V = 1000 };
    float l[V];
    char allowed[V];
    const struct { int k; float p; float t; } cases[] = { { 5, 1.0f, 1.0f }, { 40, 0.9f, 0.8f }, { 0, 0.5f, 1.0f },
                                                          { 0, 0.95f, 2.0f }, { 3, 0.3f, 0.5f } };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        fill_logits(l, V, 10 + (unsigned)c, 6.0f);
        sits_sample_params_t p = { .temperature = cases[c].t, .top_k = cases[c].k, .top_p = cases[c].p };
        allowed_set(l, V, &p, allowed);
        for (uint64_t s = 0; s < 300; s++) {
            p.seed = s;
            p.step = s * 3;
            int32_t t = sample_both(l, V, &p);
            assert_true(t >= 0 && t < V);
            if (!allowed[t]) fail_msg("case %zu: token %d outside the allowed set", c, t);
        }
    }
}

static void test_wide_nucleus_exact(void **state)
{
    /* flat logits: top-p 0.99 needs ~99% of 2000 ids, far beyond the 256-candidate budget */
    enum { V = 2000 };
    float l[V];
    char allowed[V];
    fill_logits(l, V, 99, 0.01f);
    sits_sample_params_t p = { .temperature = 1.0f, .top_p = 0.99f };
    allowed_set(l, V, &p, allowed);
    int n_allowed = 0;
    for (int i = 0; i < V; i++) n_allowed += allowed[i];
    assert_true(n_allowed > 1000);
    int seen_far = 0;
    for (uint64_t s = 0; s < 200; s++) {
        p.seed = s;
        int32_t t = sample_both(l, V, &p);
        assert_true(allowed[t]);
        /* the sampled id ranks beyond 256 in the sorted order at least sometimes */
        int rank = 0;
        for (int i = 0; i < V; i++) rank += l[i] > l[t];
        seen_far += rank >= 256;
    }
    assert_true(seen_far > 50);
}

static void test_distribution(void **state)
{
    enum { V = 8, N = 20000 };
    float l[V] = { 1.0f, 0.5f, -0.2f, 2.0f, 0.0f, -1.0f, 1.5f, 0.3f };
    const float T = 0.8f;
    double prob[V], z = 0;
    for (int i = 0; i < V; i++) z += exp(l[i] / T);
    for (int i = 0; i < V; i++) prob[i] = exp(l[i] / T) / z;
    int count[V] = { 0 };
    sits_sample_params_t p = { .temperature = T, .top_p = 1.0f, .seed = 42 };
    for (int s = 0; s < N; s++) {
        p.step = (uint64_t)s;
        int32_t t = -1;
        assert_int_equal(sits_sample(g_self, l, 1, 0, V, &p, &t), SITS_OK);
        count[t]++;
    }
    for (int i = 0; i < V; i++) {
        double mean = N * prob[i], sd = sqrt(N * prob[i] * (1 - prob[i]));
        if (fabs(count[i] - mean) > 5 * sd) fail_msg("id %d: %d draws, expected %.1f +- %.1f", i, count[i], mean, sd);
    }
    /* top-k 3: the three best ids (3, 6, 0) only, renormalised */
    p.top_k = 3;
    memset(count, 0, sizeof count);
    double z3 = exp(l[3] / T) + exp(l[6] / T) + exp(l[0] / T);
    for (int s = 0; s < N; s++) {
        p.step = (uint64_t)s;
        int32_t t = -1;
        assert_int_equal(sits_sample(g_self, l, 1, 0, V, &p, &t), SITS_OK);
        count[t]++;
    }
    for (int i = 0; i < V; i++) {
        double pi = (i == 3 || i == 6 || i == 0) ? exp(l[i] / T) / z3 : 0.0;
        double mean = N * pi, sd = sqrt(N * pi * (1 - pi)) + 1e-9;
        if (fabs(count[i] - mean) > 5 * sd + 0.5) fail_msg("top-k id %d: %d draws, expected %.1f", i, count[i], mean);
    }
}

static void test_batch_rows(void **state)
{
    /* several sequences in one call, each with its own parameters */
    enum { V = 300, S = 4 };
    float l[S * V];
    for (int s = 0; s < S; s++) fill_logits(l + s * V, V, 50 + (unsigned)s, 5.0f);
    sits_sample_params_t p[S] = {
        { .temperature = 0.0f, .top_p = 1.0f }, { .temperature = 1.0f, .top_k = 10, .top_p = 1.0f, .seed = 3 },
        { .temperature = 0.7f, .top_p = 0.8f, .seed = 4 }, { .temperature = 1.3f, .top_p = 1.0f, .seed = 5 } };
    int vs, vc;
    slice(V, &vs, &vc);
    float *mine = malloc(sizeof(float) * S * (size_t)(vc ? vc : 1));
    for (int s = 0; s < S; s++) memcpy(mine + s * vc, l + s * V + vs, sizeof(float) * (size_t)vc);
    int32_t tw[S], ts[S];
    assert_int_equal(sits_sample(g_world, mine, S, vs, vc, p, tw), SITS_OK);
    for (int s = 0; s < S; s++) {
        assert_int_equal(sits_sample(g_self, l + s * V, 1, 0, V, &p[s], &ts[s]), SITS_OK);
        assert_int_equal(tw[s], ts[s]);
    }
    free(mine);
}

/* ---- [perf] the pieces of the engine's device path ------------------------------------------------ */

static void test_rows_modes(void **state)
{
    sits_sample_params_t p[6] = {
        { .temperature = 0.0f, .top_p = 1.0f }, { .temperature = 0.9f, .top_k = 1, .top_p = 0.5f },
        { .temperature = 0.8f, .top_p = 1.0f, .seed = 3, .step = 4 }, { .temperature = 1.0f, .top_k = 40, .top_p = 1.0f },
        { .temperature = 0.7f, .top_p = 0.9f }, { .temperature = 0.7f, .top_k = 10, .top_p = 0.9f } };
    const int want[6] = { SITS_SAMPLE_GREEDY, SITS_SAMPLE_GREEDY, SITS_SAMPLE_GUMBEL, SITS_SAMPLE_TOPC, SITS_SAMPLE_TOPC_LSE,
                          SITS_SAMPLE_TOPC };
    sits_sample_row_t rows[6];
    sits_sample_rows(6, p, rows);
    for (int i = 0; i < 6; i++) {
        if (rows[i].mode != want[i]) fail_msg("params %d: mode %d, expected %d", i, rows[i].mode, want[i]);
        if (rows[i].mode == SITS_SAMPLE_GUMBEL && rows[i].inv_temp != 1.0f / p[i].temperature) fail_msg("params %d: 1/T", i);
    }
    assert_true(rows[2].seed == 3 && rows[2].step == 4);
    assert_int_equal(sits_sample_cands(1, &p[0]), 1);
    assert_int_equal(sits_sample_cands(6, p), 256); /* top-p without top-k: the 256 budget */
    assert_int_equal(sits_sample_cands(4, p), 40);
}

static int by_logit_id(const void *a_, const void *b_)
{
    const sits_sample_cand_t *a = a_, *b = b_;
    if (a->logit != b->logit) return a->logit > b->logit ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

/* The reduction's records against plain loops written here: argmax, Gumbel argmax, a full sort,
 * a double log-sum-exp. Logits with many ties (values in steps of 0.25). */
static void test_reduce_records(void **state)
{
    enum { V = 700, C = 37, V0 = 1000 };
    float l[V];
    srand(7);
    for (int i = 0; i < V; i++) l[i] = 0.25f * (float)(rand() % 40) - 5.0f;
    for (int mode = 0; mode < 4; mode++) {
        sits_sample_row_t row = { .temperature = 0.6f, .inv_temp = 1.0f / 0.6f, .mode = mode, .seed = 99, .step = 5 };
        unsigned char rec[SITS_SAMPLE_REC_BYTES(C)];
        sits_backend_cpu_sample_reduce(rec, l, 1, V0, V, &row, C);
        const sits_sample_rec_t *h = (const sits_sample_rec_t *)rec;
        const sits_sample_cand_t *cd = (const sits_sample_cand_t *)(h + 1);
        if (mode == SITS_SAMPLE_GREEDY || mode == SITS_SAMPLE_GUMBEL) {
            int best = -1;
            float bv = 0;
            for (int i = 0; i < V; i++) {
                float v = mode == 0 ? l[i] : l[i] * row.inv_temp + (float)-log(-log(sits_sample_uniform(99, 5, V0 + i)));
                if (best < 0 || v > bv) { best = i; bv = v; }
            }
            assert_int_equal(h->best.id, V0 + best);
            assert_true(h->best.logit == bv);
            assert_int_equal(h->n, 0);
            continue;
        }
        sits_sample_cand_t all[V];
        for (int i = 0; i < V; i++) { all[i].logit = l[i]; all[i].id = V0 + i; }
        qsort(all, V, sizeof all[0], by_logit_id);
        assert_int_equal(h->n, C);
        sits_sample_cand_t got[C];
        memcpy(got, cd, sizeof got);
        qsort(got, C, sizeof got[0], by_logit_id);
        for (int i = 0; i < C; i++)
            if (got[i].id != all[i].id || got[i].logit != all[i].logit)
                fail_msg("mode %d candidate %d: id %d (%g), expected %d (%g)", mode, i, got[i].id, got[i].logit, all[i].id,
                         all[i].logit);
        assert_int_equal(h->best.id, -1);
        if (mode == SITS_SAMPLE_TOPC_LSE) {
            double z = 0;
            for (int i = 0; i < V; i++) z += exp(l[i] / 0.6);
            if (fabs(h->lse - log(z)) > 1e-5 * fabs(log(z))) fail_msg("lse %.8g, expected %.8g", h->lse, log(z));
        } else {
            assert_true(isinf(h->lse) && h->lse < 0);
        }
    }
}

/* Records reduced from each rank's slice and merged with sits_sample_merge give the token sits_sample
 * gives on the whole vocabulary on one rank (the engine's device path is TP-invariant too). */
static void test_merge_pieces(void **state)
{
    enum { V = 900, N = 4 };
    float l[N * V];
    for (int s = 0; s < N; s++) fill_logits(l + s * V, V, 300 + (unsigned)s, 6.0f);
    sits_sample_params_t p[N] = { { .temperature = 0.0f, .top_p = 1.0f }, { .temperature = 1.1f, .top_p = 1.0f, .seed = 8 },
                                  { .temperature = 0.9f, .top_k = 25, .top_p = 0.95f, .seed = 9 },
                                  { .temperature = 0.8f, .top_p = 0.9f, .seed = 10 } };
    int vs, vc;
    slice(V, &vs, &vc);
    for (int it = 0; it < 20; it++) {
        for (int s = 0; s < N; s++) p[s].step = (uint64_t)it;
        int c = sits_sample_cands(N, p);
        sits_sample_row_t rows[N];
        sits_sample_rows(N, p, rows);
        float *mine = malloc(sizeof(float) * N * (size_t)(vc ? vc : 1));
        for (int s = 0; s < N; s++) memcpy(mine + s * vc, l + s * V + vs, sizeof(float) * (size_t)vc);
        unsigned char *rec = calloc(N, SITS_SAMPLE_REC_BYTES(c));
        sits_backend_cpu_sample_reduce(rec, mine, N, vs, vc, rows, c);
        int32_t t[N], ref[N];
        int need_full = -1;
        assert_int_equal(sits_sample_merge(g_world, rec, N, c, p, t, &need_full), SITS_OK);
        assert_true(need_full == 0 || need_full == 1);
        for (int s = 0; s < N; s++) {
            assert_int_equal(sits_sample(g_self, l + s * V, 1, 0, V, &p[s], &ref[s]), SITS_OK);
            if (!need_full && t[s] != ref[s]) fail_msg("iteration %d row %d: merged %d, whole-vocabulary %d", it, s, t[s], ref[s]);
        }
        free(rec);
        free(mine);
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    if (sits_comm_mpi_create(MPI_COMM_WORLD, 60.0, &g_world) != SITS_OK || sits_comm_mpi_create(MPI_COMM_SELF, 60.0, &g_self) != SITS_OK)
        MPI_Abort(MPI_COMM_WORLD, 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_truncation_never_escapes),
        cmocka_unit_test(test_wide_nucleus_exact),
        cmocka_unit_test(test_distribution),
        cmocka_unit_test(test_batch_rows),
        cmocka_unit_test(test_rows_modes),
        cmocka_unit_test(test_reduce_records),
        cmocka_unit_test(test_merge_pieces),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    int total = 0;
    MPI_Allreduce(&failed, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    sits_comm_destroy(g_world);
    sits_comm_destroy(g_self);
    MPI_Finalize();
    return total ? 1 : 0;
}
