/* gen_seeds.c -- writes the binary seed corpora of the step-plan and KV-shard fuzz targets with the
 * library's own writers (sits_plan_write, sits_kv_shard_pack): gen_seeds CORPUS_DIR writes
 * CORPUS_DIR/plan/seed_* and CORPUS_DIR/kv_shard/seed_*. Each seed starts with the target's mode
 * byte (see fuzz_plan.c, fuzz_kv_shard.c). Run by make_seeds.sh. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kv/shard.h"
#include "sched/plan.h"

static void write_seed(const char *dir, const char *name, unsigned char mode, const void *p, size_t n)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); exit(1); }
    fputc(mode, f);
    fwrite(p, 1, n, f);
    fclose(f);
}

static void plans(const char *dir)
{
    int32_t tokens[6] = { 1, 2, 3, 9, 8, 7 }, pos[6] = { 0, 1, 2, 0, 1, 5 }, seq[6] = { 0, 0, 0, 1, 1, 1 };
    int32_t bt[2 * 3] = { 0, 1, -1, 2, 3, 4 }, rows[2] = { 2, 5 }, row0[1] = { 0 };
    sits_sample_params_t sp[2] = { { 0.0f, 0, 1.0f, 0, 3 }, { 0.8f, 40, 0.95f, 1234, 6 } };
    sits_plan_t p[3] = {
        { .cmd = SITS_PLAN_STEP, .step = 7, .n_tokens = 6, .n_seqs = 2, .max_blocks = 3, .n_out = 2, .tokens = tokens,
          .pos = pos, .seq = seq, .block_tables = bt, .out_rows = rows, .sample = sp },
        { .cmd = SITS_PLAN_STEP, .step = 8, .n_tokens = 1, .n_seqs = 1, .max_blocks = 1, .n_out = 1, .tokens = tokens,
          .pos = pos, .seq = seq, .block_tables = bt, .out_rows = row0, .sample = sp },
        { .cmd = SITS_PLAN_STOP, .step = 9 },
    };
    for (int i = 0; i < 3; i++) {
        size_t n = sits_plan_size(&p[i]), len = 0;
        unsigned char *buf = malloc(n);
        if (sits_plan_write(&p[i], buf, n, &len) != SITS_OK) { fprintf(stderr, "plan write failed\n"); exit(1); }
        char name[64];
        snprintf(name, sizeof name, "seed_%d_raw", i);
        write_seed(dir, name, 0, buf, len);
        snprintf(name, sizeof name, "seed_%d_fix", i);
        write_seed(dir, name, 1, buf, len);
        free(buf);
    }
}

static void shards(const char *dir)
{
    const sits_kv_shard_desc_t descs[4] = {
        { .l0 = 0, .l1 = 2, .h0 = 0, .h1 = 2, .t0 = 0, .t1 = 5, .head_dim = 8, .dtype = SITS_KV_SHARD_INT8 },
        { .l0 = 1, .l1 = 2, .h0 = 1, .h1 = 2, .t0 = 3, .t1 = 7, .head_dim = 4, .dtype = SITS_KV_SHARD_FP32 },
        { .l0 = 0, .l1 = 1, .h0 = 0, .h1 = 1, .t0 = 0, .t1 = 9, .head_dim = 4, .dtype = SITS_KV_SHARD_BF16 },
        { .l0 = 0, .l1 = 3, .h0 = 0, .h1 = 1, .t0 = 2, .t1 = 4, .head_dim = 2, .dtype = SITS_KV_SHARD_INT8 },
    };
    for (int i = 0; i < 4; i++) {
        for (int c = 0; c < 2; c++) {
            const sits_kv_shard_desc_t *d = &descs[i];
            size_t elems = (size_t)(d->l1 - d->l0) * (d->t1 - d->t0) * (d->h1 - d->h0) * d->head_dim;
            float *k = malloc(sizeof(float) * elems), *v = malloc(sizeof(float) * elems);
            for (size_t e = 0; e < elems; e++) { k[e] = sinf((float)e * 0.37f) * 3; v[e] = cosf((float)e * 0.11f); }
            sits_kv_codec_t codec = c ? SITS_KV_CODEC_LZ4 : SITS_KV_CODEC_NONE;
            size_t cap = sits_kv_shard_size_bound(d, codec), len = 0;
            unsigned char *buf = malloc(cap);
            if (sits_kv_shard_pack(d, k, v, codec, buf, cap, &len) != SITS_OK) { fprintf(stderr, "pack failed\n"); exit(1); }
            char name[64];
            snprintf(name, sizeof name, "seed_%d_%s_raw", i, c ? "lz4" : "none");
            write_seed(dir, name, 2, buf, len);
            snprintf(name, sizeof name, "seed_%d_%s_fix", i, c ? "lz4" : "none");
            write_seed(dir, name, 3, buf, len);
            free(buf); free(k); free(v);
        }
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) { fprintf(stderr, "usage: gen_seeds CORPUS_DIR\n"); return 2; }
    char d[1024];
    snprintf(d, sizeof d, "%s/plan", argv[1]);
    plans(d);
    snprintf(d, sizeof d, "%s/kv_shard", argv[1]);
    shards(d);
    return 0;
}
