/* gen_seeds.c -- writes the binary seed corpora of the step-plan, KV-shard and KV-move fuzz targets
 * with the library's own writers (sits_plan_write, sits_kv_shard_pack, sits_kv_move_pack):
 * gen_seeds CORPUS_DIR writes CORPUS_DIR/{plan,kv_shard,kv_move}/seed_*. Each seed starts with the
 * target's mode byte(s) (see fuzz_plan.c, fuzz_kv_shard.c, fuzz_kv_move.c). Run by make_seeds.sh. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/backend.h"
#include "kv/move.h"
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
    /* [kv offload] a swap plan: orders out / in / drop in tokens, slots in pos */
    int32_t kinds[3] = { 1, 2, 3 } /* SITS_KV_SWAP_OUT, IN, DROP (sched/swap.h) */, slots[3] = { 4, 5, 6 }, idx[3] = { 0, 1, 2 };
    int32_t sbt[3 * 2] = { 0, 1, 2, -1, -1, -1 };
    /* [kv move] a move plan: 3 blocks from a tp 2 group to a tp 1 group */
    int32_t mblocks[3] = { 4, 9, 2 }, msrc[2] = { 0, 1 }, mdst[1] = { 2 };
    sits_plan_t p[5] = {
        { .cmd = SITS_PLAN_STEP, .step = 7, .n_tokens = 6, .n_seqs = 2, .max_blocks = 3, .n_out = 2, .tokens = tokens,
          .pos = pos, .seq = seq, .block_tables = bt, .out_rows = rows, .sample = sp },
        { .cmd = SITS_PLAN_STEP, .step = 8, .n_tokens = 1, .n_seqs = 1, .max_blocks = 1, .n_out = 1, .tokens = tokens,
          .pos = pos, .seq = seq, .block_tables = bt, .out_rows = row0, .sample = sp },
        { .cmd = SITS_PLAN_STOP, .step = 9 },
        { .cmd = SITS_PLAN_KV_SWAP, .step = 10, .n_tokens = 3, .n_seqs = 3, .max_blocks = 2, .tokens = kinds, .pos = slots,
          .seq = idx, .block_tables = sbt },
        { .cmd = SITS_PLAN_KV_MOVE, .step = 11,
          .move = { .role = SITS_KV_MOVE_SEND, .n_blocks = 3, .src_tp = 2, .src_pp = 1, .dst_tp = 1, .dst_pp = 1, .flags = 0,
                    .move_id = 5, .blocks = mblocks, .src_ranks = msrc, .dst_ranks = mdst } },
    };
    for (int i = 0; i < 5; i++) {
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

/* [kv move] messages of each dtype; mode byte 3 (fix CRCs, expectation from the header) and the
 * harness's 7 pick bytes (the receiver's head window: head0 0, one spare head). */
static void moves(const char *dir)
{
    const sits_dtype_t dts[3] = { SITS_DT_F32, SITS_DT_BF16, SITS_DT_I8 };
    for (int i = 0; i < 3; i++) {
        sits_kv_move_desc_t d = { .l0 = 1, .l1 = 3, .h0 = 1, .h1 = 3, .n_blocks = 2, .block_size = 4, .head_dim = 8,
                                  .dtype = dts[i], .move_id = 42 };
        int n_kv = 4, head0 = 0;
        size_t ub = sits_kv_layer_block_bytes(d.dtype, d.block_size, n_kv, d.head_dim);
        size_t units = (size_t)d.n_blocks * (size_t)(d.l1 - d.l0) * 2;
        unsigned char *src = malloc(units * ub);
        for (size_t e = 0; e < units * ub; e++) src[e] = (unsigned char)(e * 37u + 11u);
        if (d.dtype == SITS_DT_I8) /* finite scales */
            for (size_t u = 0; u < units; u++) {
                float *sc = (float *)(src + u * ub + sits_kv_i8_q_bytes(d.block_size, n_kv, d.head_dim));
                for (int k = 0; k < d.block_size * n_kv; k++) sc[k] = 0.01f * (float)(k + 1);
            }
        size_t cap = sits_kv_move_msg_bytes(&d), len = 0;
        unsigned char *buf = malloc(cap + 7);
        memset(buf, 0, 7);
        buf[1] = 1;   /* n_kv = h1 - head0 + 1 */
        if (sits_kv_move_pack(&d, src, n_kv, head0, buf + 7, cap, &len) != SITS_OK) { fprintf(stderr, "move pack failed\n"); exit(1); }
        char name[64];
        snprintf(name, sizeof name, "seed_%s", i == 0 ? "f32" : i == 1 ? "bf16" : "i8");
        write_seed(dir, name, 3, buf, len + 7);
        free(buf);
        free(src);
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
    snprintf(d, sizeof d, "%s/kv_move", argv[1]);
    moves(d);
    return 0;
}
