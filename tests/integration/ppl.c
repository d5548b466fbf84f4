/* ppl.c -- held-out perplexity of a model with sits-dist's forward pass, compared with PyTorch's.
 *
 * usage: ppl MODEL_DIR REF_JSON [RTOL]        (any number of MPI ranks: TP = world size)
 * REF_JSON (written by launch/train_demo/train_demo.py): ids [n_seqs][seq_len] (token 0 is
 * <|begin_of_text|>), seq_mean_nll [n_seqs] and ppl from an fp32 PyTorch eval of the same weights.
 *
 * All sequences go through ONE engine step (n_seqs x seq_len tokens, each sequence its own block
 * table, logits for every position). Per position p < seq_len-1 of sequence s the NLL of ids[s][p+1]
 * is logsumexp(logits) - logits[target], with the log-sum-exp combined over the ranks' vocabulary
 * slices (max and sum of exp by MPI_Allreduce; padded ids >= vocab_size left out). Checks, rank 0:
 * exp(mean NLL) of each sequence and of all of them within RTOL (default 0.01) of PyTorch's,
 * |ppl - ref| <= RTOL * ref. Prints the first mismatches and the largest relative error.
 * Exit 0 pass, 1 fail. */
#include "backend/backend.h"
#include "comm/comm.h"
#include "engine/engine.h"
#include "model/config.h"
#include "model/weights.h"
#include "sched/generate.h"
#include "util/log.h"

#include <float.h>
#include <jansson.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    sits_log_init(rank);
    if (argc < 3) { fprintf(stderr, "usage: %s MODEL_DIR REF_JSON [RTOL]\n", argv[0]); MPI_Finalize(); return 1; }
    double rtol = argc > 3 ? atof(argv[3]) : 0.01;

    json_error_t jerr;
    json_t *ref = json_load_file(argv[2], 0, &jerr);
    if (!ref) { fprintf(stderr, "%s: %s\n", argv[2], jerr.text); MPI_Abort(MPI_COMM_WORLD, 1); }
    json_t *ids = json_object_get(ref, "ids"), *ref_seq = json_object_get(ref, "seq_mean_nll");
    int ns = (int)json_array_size(ids);
    int L = ns > 0 ? (int)json_array_size(json_array_get(ids, 0)) : 0;
    double ref_ppl = json_real_value(json_object_get(ref, "ppl"));
    if (ns < 1 || L < 2 || (int)json_array_size(ref_seq) != ns || !(ref_ppl > 0.0)) {
        fprintf(stderr, "%s: needs ids [n][L>=2], seq_mean_nll [n], ppl\n", argv[2]);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    int n = ns * L;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n), *pos = malloc(sizeof(int32_t) * (size_t)n);
    int32_t *seq = malloc(sizeof(int32_t) * (size_t)n), *rows = malloc(sizeof(int32_t) * (size_t)n);
    if (!tok || !pos || !seq || !rows) { fprintf(stderr, "out of memory\n"); MPI_Abort(MPI_COMM_WORLD, 1); }
    for (int s = 0; s < ns; s++) {
        json_t *row = json_array_get(ids, (size_t)s);
        if ((int)json_array_size(row) != L) { fprintf(stderr, "%s: ragged ids\n", argv[2]); MPI_Abort(MPI_COMM_WORLD, 1); }
        for (int p = 0; p < L; p++) {
            int t = s * L + p;
            tok[t] = (int32_t)json_integer_value(json_array_get(row, (size_t)p));
            pos[t] = p;
            seq[t] = s;
            rows[t] = t;
        }
    }

    sits_backend_t *be = NULL;
    sits_comm_t *tp = NULL;
    sits_backend_params_t bp = { .threads = 1, .device = rank };
    if (sits_backend_cpu_create(&bp, &be) != SITS_OK || sits_comm_mpi_create(MPI_COMM_WORLD, 300.0, &tp) != SITS_OK) {
        fprintf(stderr, "set-up failed\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* one step: logits for all n positions need max_seqs >= n outputs; KV for just ns x mb blocks */
    const int bs = 16, mb = (L + bs - 1) / bs;
    sits_model_config_t cfg;
    sits_shard_dims_t dims;
    sits_shard_t shard = { .tp_rank = rank, .tp_size = world };
    if (sits_model_config_load(argv[1], &cfg) != SITS_OK || sits_shard_dims(&cfg, &shard, &dims) != SITS_OK) {
        fprintf(stderr, "%s: bad config\n", argv[1]);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    size_t per_block = sits_engine_kv_block_bytes(&cfg, &dims, be->kv_dtype, bs);
    sits_runner_params_t rp = { .model_dir = argv[1], .max_seqs = n, .max_tokens = n, .block_size = bs,
                                .max_model_len = mb * bs, .kv_bytes = (int64_t)(per_block * (size_t)(ns * mb)) };
    sits_runner_t *r = NULL;
    if (sits_runner_create(&rp, be, tp, NULL, &r) != SITS_OK) {
        fprintf(stderr, "%s: load failed\n", argv[1]);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* sequence s owns blocks [s*mb, (s+1)*mb) */
    int32_t *bt = malloc(sizeof(int32_t) * (size_t)ns * (size_t)mb);
    if (!bt) { fprintf(stderr, "out of memory\n"); MPI_Abort(MPI_COMM_WORLD, 1); }
    for (int i = 0; i < ns * mb; i++) bt[i] = i;
    sits_batch_t b = { .n_tokens = n, .tokens = tok, .pos = pos, .seq = seq, .n_seqs = ns, .block_tables = bt,
                       .n_out = n, .out_rows = rows };
    const float *logits = NULL;
    double t0 = MPI_Wtime();
    if (sits_engine_forward(r->engine, &b, &logits) != SITS_OK) {
        fprintf(stderr, "forward failed\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    double fwd_s = MPI_Wtime() - t0;

    /* this rank's vocabulary slice [v0, v0+vc) of the real (unpadded) vocabulary */
    const sits_shard_dims_t *d = &r->w->dims;
    int V = r->cfg.vocab_size, v0 = d->v_start, vc = d->v_count;
    int vreal = v0 >= V ? 0 : (v0 + vc > V ? V - v0 : vc);
    double *mx = malloc(sizeof(double) * (size_t)n), *se = malloc(sizeof(double) * (size_t)n);
    double *tg = malloc(sizeof(double) * (size_t)n);
    if (!mx || !se || !tg) { fprintf(stderr, "out of memory\n"); MPI_Abort(MPI_COMM_WORLD, 1); }
    for (int t = 0; t < n; t++) {
        const float *row = logits + (size_t)t * (size_t)vc;
        double m = -DBL_MAX;
        for (int v = 0; v < vreal; v++) m = row[v] > m ? row[v] : m;
        mx[t] = m;
    }
    MPI_Allreduce(MPI_IN_PLACE, mx, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    for (int t = 0; t < n; t++) {
        const float *row = logits + (size_t)t * (size_t)vc;
        double s = 0.0;
        for (int v = 0; v < vreal; v++) s += exp((double)row[v] - mx[t]);
        se[t] = s;
        int p = t % L;
        int target = p + 1 < L ? tok[t + 1] : -1;
        tg[t] = (target >= v0 && target < v0 + vreal) ? (double)row[target - v0] : 0.0;
    }
    MPI_Allreduce(MPI_IN_PLACE, se, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, tg, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);

    int fail = 0;
    if (rank == 0) {
        double tot = 0.0, max_rel = 0.0;
        int shown = 0;
        for (int s = 0; s < ns; s++) {
            double sum = 0.0;
            for (int p = 0; p + 1 < L; p++) {
                int t = s * L + p;
                sum += mx[t] + log(se[t]) - tg[t];
            }
            tot += sum;
            double got = exp(sum / (L - 1)), want = exp(json_real_value(json_array_get(ref_seq, (size_t)s)));
            double rel = fabs(got - want) / want;
            max_rel = rel > max_rel ? rel : max_rel;
            if (!(fabs(got - want) <= rtol * want)) {
                fail++;
                if (shown++ < 5) printf("mismatch: sequence %d ppl %.5f, PyTorch %.5f (rel %.2e)\n", s, got, want, rel);
            }
        }
        double ppl = exp(tot / ((double)ns * (L - 1)));
        double rel = fabs(ppl - ref_ppl) / ref_ppl;
        max_rel = rel > max_rel ? rel : max_rel;
        if (!(fabs(ppl - ref_ppl) <= rtol * ref_ppl)) {
            fail++;
            printf("mismatch: overall ppl %.5f, PyTorch %.5f (rel %.2e)\n", ppl, ref_ppl, rel);
        }
        printf("%s: sits-dist ppl %.4f, PyTorch %.4f over %d x %d tokens (TP %d, forward %.1f s); "
               "max rel error %.2e (rtol %g)\n", fail ? "FAIL" : "PASS", ppl, ref_ppl, ns, L, world, fwd_s, max_rel, rtol);
    }
    MPI_Bcast(&fail, 1, MPI_INT, 0, MPI_COMM_WORLD);
    free(mx);
    free(se);
    free(tg);
    free(bt);
    sits_runner_destroy(r);
    sits_comm_destroy(tp);
    sits_backend_destroy(be);
    free(tok);
    free(pos);
    free(seq);
    free(rows);
    json_decref(ref);
    MPI_Finalize();
    return fail ? 1 : 0;
}
