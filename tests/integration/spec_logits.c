/* spec_logits.c -- the premise of bit-exact speculative decoding on the CPU backend: the logits of a
 * position do not depend on how many positions its step computes, nor on the other sequences of the
 * step, nor on KV left at later positions by rejected drafts.
 *
 * usage: spec_logits MODEL_DIR          (any number of MPI ranks: TP = world size; each rank compares
 *                                        its vocabulary slice, the verdict is reduced over the ranks)
 * Reference: sequence A prefills P tokens, then decodes one position per step (n_out 1) for positions
 * P .. P + K; its rows are kept. Checked against it, bit for bit (memcmp of fp32 logits):
 *  1. sequence B (its own blocks) prefills the same P tokens, then ONE step of K + 1 positions with
 *     every position an output row (a verification step);
 *  2. sequence C the same, its verification step batched with a 5-token prefill chunk of sequence D
 *     and a decode of sequence A (a mixed step);
 *  3. sequence E: a verification step whose drafts are wrong from draft J on (K + 1 positions, rows
 *     after J differ and are ignored), then -- rolled back to J + 1 valid positions -- a second
 *     verification step from position P + J + 1 with the right tokens over the stale KV: its rows
 *     equal the reference's (and, as a control, the rows after the wrong draft differ from it).
 * Prints the first mismatching rows and their largest difference. Exit 0 pass, 1 fail. */
#include "backend/backend.h"
#include "comm/comm.h"
#include "engine/engine.h"
#include "model/config.h"
#include "model/weights.h"
#include "sched/generate.h"
#include "util/log.h"

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { P = 37, K = 6, J = 2, BS = 16, MB = 4, NSEQ = 5, MAXT = 64 };

typedef struct {
    sits_runner_t *r;
    int32_t bt[NSEQ * MB];
    int32_t tok[MAXT], pos[MAXT], seq[MAXT], rows[MAXT];
    int n;
    size_t vc;
} ctx_t;

static void add(ctx_t *c, int s, int32_t token, int p) { c->tok[c->n] = token; c->pos[c->n] = p; c->seq[c->n] = s; c->n++; }

/* Runs the c->n queued tokens with output rows rows[0..n_out); returns the logits [n_out, vc]. */
static const float *step(ctx_t *c, int n_out)
{
    sits_batch_t b = { .n_tokens = c->n, .tokens = c->tok, .pos = c->pos, .seq = c->seq, .n_seqs = NSEQ,
                       .block_tables = c->bt, .n_out = n_out, .out_rows = c->rows };
    const float *lg = NULL;
    if (sits_engine_forward(c->r->engine, &b, &lg) != SITS_OK) {
        fprintf(stderr, "forward failed\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    c->n = 0;
    return lg;
}

static void prefill(ctx_t *c, int s, const int32_t *ids)
{
    for (int p = 0; p < P; p++) add(c, s, ids[p], p);
    step(c, 0);
}

/* Row i of got vs row i of ref: 0 equal bit for bit, else 1 (printed). */
static int cmp_row(const char *what, int i, const float *got, const float *ref, size_t vc, int *shown)
{
    if (memcmp(got, ref, sizeof(float) * vc) == 0) return 0;
    double md = 0;
    size_t first = vc;
    for (size_t v = 0; v < vc; v++) {
        double d = fabs((double)got[v] - (double)ref[v]);
        if (d > md) md = d;
        if (got[v] != ref[v] && first == vc) first = v;
    }
    if ((*shown)++ < 8)
        fprintf(stderr, "MISMATCH %s: position %d, first differing id %zu (%.9g vs %.9g), max |diff| %.3g\n", what, P + i, first,
                (double)got[first], (double)ref[first], md);
    return 1;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    sits_log_init(rank);
    if (argc < 2) { fprintf(stderr, "usage: %s MODEL_DIR\n", argv[0]); MPI_Finalize(); return 1; }
    sits_backend_t *be = NULL;
    sits_comm_t *tp = NULL;
    sits_backend_params_t bp = { .threads = 1, .device = rank };
    if (sits_backend_cpu_create(&bp, &be) != SITS_OK || sits_comm_mpi_create(MPI_COMM_WORLD, 300.0, &tp) != SITS_OK) {
        fprintf(stderr, "set-up failed\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    sits_model_config_t cfg;
    sits_shard_dims_t dims;
    sits_shard_t shard = { .tp_rank = rank, .tp_size = world };
    if (sits_model_config_load(argv[1], &cfg) != SITS_OK || sits_shard_dims(&cfg, &shard, &dims) != SITS_OK) {
        fprintf(stderr, "%s: bad config\n", argv[1]);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    size_t per_block = sits_engine_kv_block_bytes(&cfg, &dims, be->kv_dtype, BS);
    sits_runner_params_t rp = { .model_dir = argv[1], .max_seqs = 16, .max_tokens = MAXT, .block_size = BS,
                                .max_model_len = MB * BS, .kv_bytes = (int64_t)(per_block * NSEQ * MB) };
    ctx_t c = { 0 };
    if (sits_runner_create(&rp, be, tp, NULL, &c.r) != SITS_OK) {
        fprintf(stderr, "%s: load failed\n", argv[1]);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (int i = 0; i < NSEQ * MB; i++) c.bt[i] = i;   /* sequence s owns blocks [s*MB, (s+1)*MB) */
    c.vc = (size_t)c.r->w->dims.v_count;
    int32_t ids[P + K + 1];
    uint64_t x = 0x5eedull;
    for (int i = 0; i < P + K + 1; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((x >> 33) % (uint64_t)cfg.vocab_size);
    }
    float *ref = malloc(sizeof(float) * c.vc * (K + 1)), *tmp = malloc(sizeof(float) * c.vc * (K + 1));
    if (!ref || !tmp) MPI_Abort(MPI_COMM_WORLD, 1);

    /* reference: A (seq 0) one position per step */
    prefill(&c, 0, ids);
    for (int j = 0; j <= K; j++) {
        add(&c, 0, ids[P + j], P + j);
        c.rows[0] = 0;
        memcpy(ref + c.vc * j, step(&c, 1), sizeof(float) * c.vc);
    }
    int bad = 0, shown = 0;
    /* 1. B (seq 1): one verification step of K + 1 positions */
    prefill(&c, 1, ids);
    for (int j = 0; j <= K; j++) { add(&c, 1, ids[P + j], P + j); c.rows[j] = j; }
    const float *lg = step(&c, K + 1);
    for (int j = 0; j <= K; j++) bad += cmp_row("verification step", j, lg + c.vc * j, ref + c.vc * j, c.vc, &shown);
    /* 2. C (seq 2) in a mixed step: D's (seq 3) prefill chunk, C's K + 1 positions, A's decode */
    prefill(&c, 2, ids);
    for (int p = 0; p < 5; p++) add(&c, 3, ids[p], p);
    for (int j = 0; j <= K; j++) { add(&c, 2, ids[P + j], P + j); c.rows[j] = 5 + j; }
    add(&c, 0, ids[P + K], P + K + 1);
    c.rows[K + 1] = c.n - 1;
    lg = step(&c, K + 2);
    for (int j = 0; j <= K; j++) bad += cmp_row("mixed step", j, lg + c.vc * j, ref + c.vc * j, c.vc, &shown);
    /* 3. E (seq 4): drafts wrong from J on, then roll back and verify again over the stale KV */
    prefill(&c, 4, ids);
    for (int j = 0; j <= K; j++) {
        add(&c, 4, j <= J ? ids[P + j] : (ids[P + j] + 1) % cfg.vocab_size, P + j);
        c.rows[j] = j;
    }
    lg = step(&c, K + 1);
    for (int j = 0; j <= J; j++) bad += cmp_row("before the wrong draft", j, lg + c.vc * j, ref + c.vc * j, c.vc, &shown);
    /* control: rows after a wrong draft must differ (the comparison sees a changed context) */
    int quiet = 1 << 30;
    for (int j = J + 1; j <= K; j++)
        if (!cmp_row("control", j, lg + c.vc * j, ref + c.vc * j, c.vc, &quiet)) {
            fprintf(stderr, "MISMATCH control: position %d after a wrong draft has the reference's logits\n", P + j);
            bad++;
        }
    for (int j = J + 1; j <= K; j++) { add(&c, 4, ids[P + j], P + j); c.rows[j - J - 1] = j - J - 1; }
    lg = step(&c, K - J);
    for (int j = J + 1; j <= K; j++)
        bad += cmp_row("after rollback", j, lg + c.vc * (j - J - 1), ref + c.vc * j, c.vc, &shown);
    int all = 0;
    MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("%s: %d of %d rows differ (tp %d, %d positions per verification, vocabulary slice %zu)\n",
               all ? "FAIL" : "PASS", all, 3 * (K + 1), world, K + 1, c.vc);
    free(ref);
    free(tmp);
    sits_runner_destroy(c.r);
    sits_comm_destroy(tp);
    sits_backend_destroy(be);
    MPI_Finalize();
    return all ? 1 : 0;
}
