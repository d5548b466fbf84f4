/* bench_kv_codec.c -- what int8 quantisation and LZ4 cost and gain on KV, to decide where the
 * runtime applies LZ4 (sits_kv_codec_choose, src/kv/shard.h). Not a test.
 *
 *   bench/sits-bench-kv-codec [--model DIR] [--tokens N] [--json OUT] [--min-s S]
 *
 * Data sets (K and V, fp32 [L][T][H][D]):
 *   fixture : the KV the CPU engine wrote while generating over DIR (default
 *             tests/fixtures/models/llama_small under $top_srcdir or .): 8 sequences of N prompt
 *             tokens (random ids, default 480) + 16 generated; read back with sits_engine_kv_layer
 *             from caches pre-filled with a NaN pattern, keeping only the slots the engine wrote
 *   random  : the same with random weights from DIR's config.json (dummy weights)
 *   gauss   : synthetic, head_dim 128, 8 heads, 2048 tokens, 2 layers: per (head, channel) Gaussian
 *             with its own mean and spread, 4 outlier channels per head at 10-30x
 *   uniform : synthetic, same shape, uniform in [-1, 1]
 * Measured on each: int8 quantise / dequantise GB/s (fp32 bytes); LZ4 (64 KiB independent frames, as
 * in the shard) ratio and compress / decompress GB/s of raw bytes on 1 and 2 threads for the fp32,
 * bf16 (truncated) and int8 (+ scales) payloads; the whole shard (int8, none | lz4) pack / unpack
 * GB/s of fp32 bytes; CRC-32 GB/s. The "link" of this machine is single-thread host memcpy GB/s.
 * CUDA builds with a GPU also time saving / loading one 8B sequence's KV blocks per segment vs through
 * kv_block_copy (measure_kv_block_io), and measure the links KV crosses there -- pinned host <-> GPU (offload) and
 * GPU 0 -> GPU 1 peer copies (migration inside a node) -- and print the decision for each. */
#include <mpi.h>
#include <jansson.h>
#include <lz4.h>
#include <lz4frame.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "engine/engine.h"
#include "kv/quant.h"
#include "kv/shard.h"
#include "sched/generate.h"
#include "util/log.h"

#define FRAME SITS_KV_SHARD_FRAME_BYTES

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double g_min_s = 0.15;   /* per repetition */

/* Best of 3 repetitions, each running fn until g_min_s passed: GB/s of `bytes` per call. */
#define RATE(bytes_, stmt_) ({ double best_ = 0; \
    for (int rep_ = 0; rep_ < 3; rep_++) { int it_ = 0; double t0_ = now(), t_; \
        do { stmt_; it_++; t_ = now() - t0_; } while (t_ < g_min_s); \
        double r_ = (double)(bytes_) * it_ / t_ / 1e9; if (r_ > best_) best_ = r_; } best_; })

typedef struct {
    const char *name, *source;
    int L, T, H, D;
    float *k, *v;
} kvset_t;

static uint64_t rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}
static double unif(uint64_t *s) { return (double)(rng(s) >> 11) / 9007199254740992.0; }
static double gauss(uint64_t *s) { return sqrt(-2 * log(unif(s) + 1e-300)) * cos(6.283185307179586 * unif(s)); }

static kvset_t synth(const char *name, int uniform)
{
    kvset_t s = { .name = name, .L = 2, .T = 2048, .H = 8, .D = 128 };
    s.source = uniform ? "synthetic uniform [-1,1]" : "synthetic Gaussian per (head, channel), 4 outlier channels/head at 10-30x";
    size_t n = (size_t)s.L * s.T * s.H * s.D;
    s.k = malloc(n * 4);
    s.v = malloc(n * 4);
    uint64_t st = 0x1234567ull;
    for (int kv = 0; kv < 2; kv++) {
        float *x = kv ? s.v : s.k;
        double *mu = malloc(sizeof(double) * s.H * s.D), *sd = malloc(sizeof(double) * s.H * s.D);
        for (int c = 0; c < s.H * s.D; c++) {
            mu[c] = 0.3 * gauss(&st);
            sd[c] = 0.5 + unif(&st);
            if (!kv && c % s.D < 4) { mu[c] *= 10 + 20 * unif(&st); sd[c] *= 10 + 20 * unif(&st); }  /* K outliers */
            if (kv && c % s.D < 4) sd[c] *= 10 + 20 * unif(&st);
        }
        for (size_t i = 0; i < n; i++) {
            size_t c = i % ((size_t)s.H * s.D);
            x[i] = uniform ? (float)(2 * unif(&st) - 1) : (float)(mu[c] + sd[c] * gauss(&st));
        }
        free(mu);
        free(sd);
    }
    return s;
}

/* Runs the CPU engine over the model and gathers the KV slots it wrote. 0 on success. */
static int engine_kv(const char *dir, int dummy, int prompt_tokens, sits_backend_t *be, sits_comm_t *tp, kvset_t *out)
{
    enum { NSEQ = 8, NEW = 16 };
    sits_runner_params_t rp = { .model_dir = dir, .dummy = dummy, .dummy_seed = 7, .max_seqs = NSEQ, .max_tokens = 512,
                                .block_size = 16 };
    sits_runner_t *r = NULL;
    if (sits_runner_create(&rp, be, tp, NULL, &r) != SITS_OK) { fprintf(stderr, "%s: load failed\n", dir); return 1; }
    const sits_model_config_t *c = &r->cfg;
    int L = c->n_layers, H = r->w->dims.nkv_loc, D = c->head_dim, bs = r->ep.block_size, nb = r->ep.n_blocks;
    if (prompt_tokens + NEW > r->max_model_len) prompt_tokens = r->max_model_len - NEW;
    size_t per_layer = (size_t)nb * bs * H * D;
    float **kc = calloc((size_t)L, sizeof *kc), **vc = calloc((size_t)L, sizeof *vc);
    for (int l = 0; l < L; l++) {
        void *k, *v;
        sits_engine_kv_layer(r->engine, l, &k, &v);
        kc[l] = k;
        vc[l] = v;
        memset(kc[l], 0xff, per_layer * 4);   /* NaN pattern: slots never written keep it */
        memset(vc[l], 0xff, per_layer * 4);
    }
    int32_t *prompts[NSEQ], *outs[NSEQ];
    int plen[NSEQ], olen[NSEQ];
    uint64_t s = 99;
    sits_sample_params_t sp[NSEQ];
    for (int i = 0; i < NSEQ; i++) {
        prompts[i] = malloc(sizeof(int32_t) * prompt_tokens);
        outs[i] = malloc(sizeof(int32_t) * NEW);
        plen[i] = prompt_tokens;
        for (int t = 0; t < prompt_tokens; t++) prompts[i][t] = 3 + (int32_t)(rng(&s) % (uint64_t)(c->vocab_size - 3));
        sp[i] = (sits_sample_params_t){ .temperature = 0.8f, .top_p = 0.95f, .seed = (uint64_t)i + 1 };
    }
    sits_gen_stats_t gs;
    int rc = sits_generate(r, NSEQ, (const int32_t *const *)prompts, plen, NEW, sp, 1, outs, olen, NULL, NULL, &gs) != SITS_OK;
    int T = 0;
    if (!rc) {
        /* written slots: layer 0's K row of head 0 is no longer the NaN pattern */
        int32_t *slots = malloc(sizeof(int32_t) * (size_t)nb * bs);
        for (int sl = 0; sl < nb * bs; sl++) {
            uint32_t u;
            memcpy(&u, kc[0] + (size_t)sl * H * D, 4);
            if (u != 0xffffffffu) slots[T++] = sl;
        }
        out->L = L; out->T = T; out->H = H; out->D = D;
        size_t n = (size_t)L * T * H * D;
        out->k = malloc(n * 4);
        out->v = malloc(n * 4);
        for (int l = 0; l < L; l++)
            for (int t = 0; t < T; t++) {
                size_t dst = ((size_t)l * T + t) * H * D, src = (size_t)slots[t] * H * D;
                memcpy(out->k + dst, kc[l] + src, (size_t)H * D * 4);
                memcpy(out->v + dst, vc[l] + src, (size_t)H * D * 4);
            }
        free(slots);
        printf("# %s%s: %d layers, %d kv heads, head_dim %d, %d written slots (%d seqs x %d tokens), prefill %.2f s\n", dir,
               dummy ? " (random weights)" : "", L, H, D, T, NSEQ, prompt_tokens + NEW - 1, gs.prefill_s);
    }
    for (int i = 0; i < NSEQ; i++) { free(prompts[i]); free(outs[i]); }
    free(kc);
    free(vc);
    sits_runner_destroy(r);
    return rc || T == 0;
}

/* ---- LZ4 over independent 64 KiB frames, as the shard does ---- */

typedef struct {
    unsigned char *dst;   /* frames in slots of `slot` bytes */
    size_t slot, nf;
    uint32_t *cs;
    unsigned char *back;
} lz4buf_t;

static LZ4F_preferences_t prefs(size_t n)
{
    LZ4F_preferences_t p;
    memset(&p, 0, sizeof p);
    p.frameInfo.blockSizeID = LZ4F_max64KB;
    p.frameInfo.blockMode = LZ4F_blockIndependent;
    p.frameInfo.contentSize = n;
    return p;
}

static size_t lz4_compress(lz4buf_t *b, const unsigned char *src, size_t n, int threads)
{
    size_t total = 0;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 4) reduction(+ : total)
    for (long f = 0; f < (long)b->nf; f++) {
        size_t o = (size_t)f * FRAME, len = n - o < FRAME ? n - o : FRAME;
        LZ4F_preferences_t p = prefs(len);
        size_t r = LZ4F_compressFrame(b->dst + (size_t)f * b->slot, b->slot, src + o, len, &p);
        if (LZ4F_isError(r)) abort();
        b->cs[f] = (uint32_t)r;
        total += r;
    }
    return total;
}

static void lz4_decompress(lz4buf_t *b, size_t n, int threads)
{
#pragma omp parallel num_threads(threads)
    {
        LZ4F_dctx *d;
        LZ4F_createDecompressionContext(&d, LZ4F_VERSION);
#pragma omp for schedule(dynamic, 4)
        for (long f = 0; f < (long)b->nf; f++) {
            size_t o = (size_t)f * FRAME, want = n - o < FRAME ? n - o : FRAME, dl = want, sl = b->cs[f];
            LZ4F_resetDecompressionContext(d);
            size_t r = LZ4F_decompress(d, b->back + o, &dl, b->dst + (size_t)f * b->slot, &sl, NULL);
            if (LZ4F_isError(r) || dl != want) abort();
        }
        LZ4F_freeDecompressionContext(d);
    }
}

typedef struct {
    double ratio, c1, c2, d1, d2;
} lz4perf_t;

static lz4perf_t measure_lz4(const unsigned char *src, size_t n)
{
    lz4buf_t b;
    LZ4F_preferences_t p = prefs(FRAME);
    b.nf = (n + FRAME - 1) / FRAME;
    b.slot = LZ4F_compressFrameBound(FRAME, &p);
    b.dst = malloc(b.nf * b.slot);
    b.cs = malloc(sizeof(uint32_t) * b.nf);
    b.back = malloc(n);
    lz4perf_t r;
    size_t comp = lz4_compress(&b, src, n, 1);
    r.ratio = (double)n / (double)(comp + 4 * b.nf);   /* with the shard's frame table */
    r.c1 = RATE(n, lz4_compress(&b, src, n, 1));
    r.c2 = RATE(n, lz4_compress(&b, src, n, 2));
    r.d1 = RATE(n, lz4_decompress(&b, n, 1));
    r.d2 = RATE(n, lz4_decompress(&b, n, 2));
    if (memcmp(b.back, src, n)) { fprintf(stderr, "lz4 round trip differs\n"); abort(); }
    free(b.dst);
    free(b.cs);
    free(b.back);
    return r;
}

static json_t *perf_json(const lz4perf_t *p)
{
    return json_pack("{s:f,s:f,s:f,s:f,s:f}", "ratio", p->ratio, "compress_gbps_1t", p->c1, "compress_gbps_2t", p->c2,
                     "decompress_gbps_1t", p->d1, "decompress_gbps_2t", p->d2);
}

/* Links the decision is printed for: nominal ones, then (CUDA builds with a GPU) the ones measured
 * here by measure_gpu_links. */
#define N_LINKS_MAX 12
static struct { char name[64]; double gbps; } NOMINAL[N_LINKS_MAX] = {
    { "NVMe SSD (nominal 7 GB/s)", 7 }, { "100GbE (nominal 12.5 GB/s)", 12.5 }, { "IB NDR400 (nominal 50 GB/s)", 50 },
    { "PCIe5 x16 (nominal 64 GB/s)", 64 }, { "NVLink4 H100/H200 (nominal 450 GB/s)", 450 },
};
static size_t n_links = 5;

#ifdef HAVE_CUDA
#include <cuda_runtime.h>
/* GB/s of one cudaMemcpy of `bytes` (best of 5 after a warm-up). */
static double cuda_rate(void *dst, const void *src, size_t bytes, int peer_dst, int peer_src)
{
    double best = 0;
    for (int r = 0; r < 6; r++) {
        double t0 = now();
        cudaError_t e = peer_dst >= 0 ? cudaMemcpyPeer(dst, peer_dst, src, peer_src, bytes) : cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
        if (e != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) return 0;
        double g = (double)bytes / (now() - t0) / 1e9;
        if (r > 0 && g > best) best = g;
    }
    return best;
}

/* The links KV moves over on a GPU node, measured: pinned host <-> GPU 0 (offload tier, PCIe) and
 * GPU 0 -> GPU 1 with peer access (migration / disaggregation inside a node, NVLink). */
static void measure_gpu_links(json_t *root)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) { (void)cudaGetLastError(); return; }
    size_t bytes = (size_t)256 << 20;
    void *h = NULL, *d0 = NULL, *d1 = NULL;
    json_t *jl = json_object();
    cudaSetDevice(0);
    if (cudaMallocHost(&h, bytes) == cudaSuccess && cudaMalloc(&d0, bytes) == cudaSuccess) {
        memset(h, 1, bytes);
        double h2d = cuda_rate(d0, h, bytes, -1, -1), d2h = cuda_rate(h, d0, bytes, -1, -1);
        snprintf(NOMINAL[n_links].name, sizeof NOMINAL[0].name, "host->GPU pinned (measured %.1f GB/s)", h2d);
        NOMINAL[n_links++].gbps = h2d;
        snprintf(NOMINAL[n_links].name, sizeof NOMINAL[0].name, "GPU->host pinned (measured %.1f GB/s)", d2h);
        NOMINAL[n_links++].gbps = d2h;
        json_object_set_new(jl, "h2d_pinned_gbps", json_real(h2d));
        json_object_set_new(jl, "d2h_pinned_gbps", json_real(d2h));
        printf("# measured: host->GPU pinned %.1f GB/s, GPU->host pinned %.1f GB/s\n", h2d, d2h);
        int can = 0;
        if (n >= 2 && cudaDeviceCanAccessPeer(&can, 0, 1) == cudaSuccess && can) {
            cudaDeviceEnablePeerAccess(1, 0);
            cudaSetDevice(1);
            cudaDeviceEnablePeerAccess(0, 0);
            if (cudaMalloc(&d1, bytes) == cudaSuccess) {
                cudaSetDevice(0);
                double p2p = cuda_rate(d1, d0, bytes, 1, 0);
                snprintf(NOMINAL[n_links].name, sizeof NOMINAL[0].name, "GPU0->GPU1 peer (measured %.1f GB/s)", p2p);
                NOMINAL[n_links++].gbps = p2p;
                json_object_set_new(jl, "p2p_gbps", json_real(p2p));
                printf("# measured: GPU0->GPU1 peer copy %.1f GB/s\n", p2p);
            }
        }
    }
    cudaSetDevice(0);
    if (h) cudaFreeHost(h);
    if (d0) cudaFree(d0);
    if (d1) cudaFree(d1);
    (void)cudaGetLastError();
    json_object_set_new(root, "gpu_links", jl);
}

/* [kv] Saving / loading one sequence's KV blocks on GPU 0 through the cuda backend, the two ways
 * sits_engine_kv_save_blocks / load_blocks can: one copy per (block, layer, K|V) segment, or the
 * backend's kv_block_copy gathering / scattering 16 MiB chunks through a device buffer with one copy
 * each (the engine's default). Llama-3-8B shape, bf16: 32 layers, blocks of 16 tokens x 8 KV heads x
 * 128 = 32 KiB per layer and K|V; a 2048-token sequence = 128 blocks (shuffled ids) = 256 MiB, to and
 * from pinned host memory. */
static double ms_since(double t0) { return (now() - t0) * 1e3; }

static void measure_kv_block_io(json_t *root)
{
    sits_backend_t *g = NULL;
    sits_backend_params_t gp = { .device = 0 };
    if (sits_backend_cuda_create(&gp, &g) != SITS_OK) return;
    const sits_backend_ops_t *op = g->ops;
    enum { LAYERS = 32, NBUF = 2 * LAYERS, CACHE_BLOCKS = 256, SEQ_BLOCKS = 128 };
    size_t seg = 16 * 8 * 128 * 2, per_block = NBUF * seg, total = SEQ_BLOCKS * per_block;
    int chunk = (int)(((size_t)16 << 20) / per_block);
    void *bufs[NBUF] = { 0 }, **d_bufs = NULL, *flat = NULL, *host = NULL;
    int32_t ids[SEQ_BLOCKS], *d_ids = NULL;
    for (int i = 0; i < SEQ_BLOCKS; i++) ids[i] = (i * 37 + 11) % CACHE_BLOCKS;   /* scattered, distinct */
    int ok = op->host_alloc(g, total, &host) == SITS_OK;
    for (int j = 0; ok && j < NBUF; j++) ok = op->alloc(g, CACHE_BLOCKS * seg, &bufs[j]) == SITS_OK && op->memset0(g, bufs[j], CACHE_BLOCKS * seg) == SITS_OK;
    ok = ok && op->alloc(g, sizeof bufs, (void **)&d_bufs) == SITS_OK && op->upload(g, d_bufs, bufs, sizeof bufs) == SITS_OK &&
         op->alloc(g, sizeof ids, (void **)&d_ids) == SITS_OK && op->alloc(g, (size_t)chunk * per_block, &flat) == SITS_OK;
    double ms[2][2] = { { 0 } };   /* [per segment, flat][save, load], best of 3 after a warm-up */
    for (int rep = 0; ok && rep < 4; rep++)
        for (int way = 0; way < 2; way++)
            for (int load = 0; load < 2; load++) {
                double t0 = now();
                if (way == 0) {
                    unsigned char *h = host;
                    for (int i = 0; i < SEQ_BLOCKS; i++)
                        for (int j = 0; j < NBUF; j++, h += seg) {
                            unsigned char *c = (unsigned char *)bufs[j] + (size_t)ids[i] * seg;
                            ok = ok && (load ? op->upload(g, c, h, seg) : op->download(g, h, c, seg)) == SITS_OK;
                        }
                } else {
                    for (int c0 = 0; c0 < SEQ_BLOCKS; c0 += chunk) {
                        int k = SEQ_BLOCKS - c0 < chunk ? SEQ_BLOCKS - c0 : chunk;
                        unsigned char *h = (unsigned char *)host + (size_t)c0 * per_block;
                        ok = ok && op->upload(g, d_ids, ids + c0, sizeof(int32_t) * (size_t)k) == SITS_OK;
                        if (load) ok = ok && op->upload(g, flat, h, (size_t)k * per_block) == SITS_OK;
                        ok = ok && op->kv_block_copy(g, flat, d_bufs, NBUF, d_ids, k, seg, load) == SITS_OK;
                        if (!load) ok = ok && op->download(g, h, flat, (size_t)k * per_block) == SITS_OK;
                    }
                }
                ok = ok && op->sync(g) == SITS_OK;
                double t = ms_since(t0);
                if (rep > 0 && (ms[way][load] == 0 || t < ms[way][load])) ms[way][load] = t;
            }
    if (ok) {
        printf("# kv blocks of one 2048-token Llama-3-8B sequence (%d blocks x %d buffers x %zu B = %zu MiB) <-> pinned host, GPU 0:\n",
               SEQ_BLOCKS, NBUF, seg, total >> 20);
        printf("#   %-34s %10s %10s\n", "", "save ms", "load ms");
        printf("#   %-34s %10.2f %10.2f   (%d copies each)\n", "one copy per (block, layer, K|V)", ms[0][0], ms[0][1], SEQ_BLOCKS * NBUF);
        printf("#   %-34s %10.2f %10.2f   (%.1f / %.1f GB/s)\n", "kv_block_copy, 16 MiB chunks", ms[1][0], ms[1][1],
               total / ms[1][0] / 1e6, total / ms[1][1] / 1e6);
        json_object_set_new(root, "kv_block_io", json_pack("{s:i,s:I,s:f,s:f,s:f,s:f}", "blocks", SEQ_BLOCKS, "bytes", (json_int_t)total,
                                                             "save_per_segment_ms", ms[0][0], "load_per_segment_ms", ms[0][1],
                                                             "save_flat_ms", ms[1][0], "load_flat_ms", ms[1][1]));
    } else {
        printf("# kv block io: set-up or a copy failed on the GPU; not measured\n");
    }
    for (int j = 0; j < NBUF; j++) if (bufs[j]) op->free(g, bufs[j]);
    if (d_bufs) op->free(g, d_bufs);
    if (d_ids) op->free(g, d_ids);
    if (flat) op->free(g, flat);
    if (host) op->host_free(g, host);
    sits_backend_destroy(g);
}
#endif

static void run_set(const kvset_t *s, double link, json_t *jsets)
{
    const size_t n = (size_t)s->L * s->T * s->H * s->D, rows = n / (size_t)s->D;
    const size_t f32b = 2 * n * 4;
    /* payloads, K then V: fp32, bf16 truncated, int8 (scales then q, as in the shard) */
    unsigned char *p32 = malloc(f32b), *p16 = malloc(f32b / 2), *p8 = malloc(2 * rows * 4 + 2 * n);
    memcpy(p32, s->k, n * 4);
    memcpy(p32 + n * 4, s->v, n * 4);
    for (size_t i = 0; i < 2 * n; i++) {
        uint32_t u;
        memcpy(&u, p32 + 4 * i, 4);
        uint16_t h = (uint16_t)(u >> 16);
        memcpy(p16 + 2 * i, &h, 2);
    }
    float *sc = (float *)p8;
    int8_t *q = (int8_t *)(p8 + 2 * rows * 4);
    float *back = malloc(n * 4);
    double tq = RATE(n * 4, sits_kv_quant_i8(s->k, rows, s->D, q, sc));
    double td = RATE(n * 4, sits_kv_dequant_i8(q, sc, rows, s->D, back));
    sits_kv_quant_i8(s->v, rows, s->D, q + n, sc + rows);
    double maxrel = 0;   /* max |err| / scale over K, must be <= 0.5 */
    for (size_t i = 0; i < n; i++) {
        double sc_i = sc[i / (size_t)s->D];
        if (sc_i > 0) maxrel = fmax(maxrel, fabs((double)back[i] - s->k[i]) / sc_i);
    }
    size_t n8 = 2 * rows * 4 + 2 * n;
    lz4perf_t l32 = measure_lz4(p32, f32b), l16 = measure_lz4(p16, f32b / 2), l8 = measure_lz4(p8, n8);
    double crc = RATE(f32b, (void)sits_kv_crc32(0, p32, f32b));
    /* the whole shard: int8, none and lz4, 1 and 2 threads; GB/s of fp32 K+V bytes */
    sits_kv_shard_desc_t d = { .l0 = 0, .l1 = s->L, .h0 = 0, .h1 = s->H, .t0 = 0, .t1 = s->T, .head_dim = s->D,
                               .dtype = SITS_KV_SHARD_INT8 };
    size_t cap = sits_kv_shard_size_bound(&d, SITS_KV_CODEC_LZ4), len0 = 0, len1 = 0, tmp;
    unsigned char *sh0 = malloc(cap), *sh1 = malloc(cap);
    float *k2 = malloc(n * 4), *v2 = malloc(n * 4);
    double pk[2][2], up[2][2];
    for (int c = 0; c < 2; c++)
        for (int t = 0; t < 2; t++) {
            d.threads = t + 1;
            unsigned char *sh = c ? sh1 : sh0;
            size_t *len = c ? &len1 : &len0;
            if (sits_kv_shard_pack(&d, s->k, s->v, (sits_kv_codec_t)c, sh, cap, len) != SITS_OK) abort();
            pk[c][t] = RATE(f32b, sits_kv_shard_pack(&d, s->k, s->v, (sits_kv_codec_t)c, sh, cap, &tmp));
            up[c][t] = RATE(f32b, sits_kv_shard_unpack(sh, *len, t + 1, NULL, k2, v2));
        }
    printf("\n## %s: %s; L %d T %d H %d D %d; %.1f MB fp32 K+V\n", s->name, s->source, s->L, s->T, s->H, s->D, f32b / 1e6);
    printf("int8 quantise %.2f GB/s, dequantise %.2f GB/s (fp32 bytes); max |err|/scale %.3f; crc32 %.2f GB/s\n", tq, td,
           maxrel, crc);
    printf("%-10s %8s %9s %9s %9s %9s   %-s\n", "payload", "ratio", "comp 1t", "comp 2t", "dec 1t", "dec 2t",
           "lz4 on memcpy link (1t / 2t)");
    const char *pn[3] = { "fp32", "bf16", "int8" };
    const lz4perf_t *pp[3] = { &l32, &l16, &l8 };
    json_t *jp = json_object();
    for (int i = 0; i < 3; i++) {
        sits_kv_codec_perf_t a = { pp[i]->ratio, pp[i]->c1, pp[i]->d1 }, b = { pp[i]->ratio, pp[i]->c2, pp[i]->d2 };
        int c1 = sits_kv_codec_choose(link, &a) == SITS_KV_CODEC_LZ4, c2 = sits_kv_codec_choose(link, &b) == SITS_KV_CODEC_LZ4;
        printf("%-10s %8.3f %9.2f %9.2f %9.2f %9.2f   %s / %s\n", pn[i], pp[i]->ratio, pp[i]->c1, pp[i]->c2, pp[i]->d1,
               pp[i]->d2, c1 ? "lz4" : "none", c2 ? "lz4" : "none");
        json_t *o = perf_json(pp[i]);
        json_object_set_new(o, "lz4_on_memcpy_link_1t", json_boolean(c1));
        json_object_set_new(o, "lz4_on_memcpy_link_2t", json_boolean(c2));
        json_t *nom = json_object();
        for (size_t j = 0; j < n_links; j++)
            json_object_set_new(nom, NOMINAL[j].name, json_string(sits_kv_codec_choose(NOMINAL[j].gbps, &b) ? "lz4" : "none"));
        json_object_set_new(o, "choice_2t_on_nominal_links", nom);
        json_object_set_new(jp, pn[i], o);
    }
    printf("links (nominal, then measured here), int8 payload, 2 threads:");
    for (size_t j = 0; j < n_links; j++) {
        sits_kv_codec_perf_t b = { l8.ratio, l8.c2, l8.d2 };
        printf(" %s -> %s;", NOMINAL[j].name, sits_kv_codec_choose(NOMINAL[j].gbps, &b) ? "lz4" : "none");
    }
    printf("\nshard int8 (GB/s of fp32 K+V): pack none %.2f/%.2f, pack lz4 %.2f/%.2f, unpack none %.2f/%.2f, "
           "unpack lz4 %.2f/%.2f (1t/2t); sizes none %zu lz4 %zu (%.2fx, %.2fx vs fp32)\n",
           pk[0][0], pk[0][1], pk[1][0], pk[1][1], up[0][0], up[0][1], up[1][0], up[1][1], len0, len1,
           (double)len0 / len1, (double)f32b / len1);
    json_t *o = json_pack("{s:s,s:s,s:i,s:i,s:i,s:i,s:f,s:f,s:f,s:f,s:o}", "name", s->name, "source", s->source, "layers",
                          s->L, "tokens", s->T, "kv_heads", s->H, "head_dim", s->D, "quant_gbps", tq, "dequant_gbps", td,
                          "max_err_over_scale", maxrel, "crc32_gbps", crc, "lz4", jp);
    json_object_set_new(o, "shard_int8", json_pack("{s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:I,s:I}", "pack_none_1t", pk[0][0],
                                                   "pack_none_2t", pk[0][1], "pack_lz4_1t", pk[1][0], "pack_lz4_2t", pk[1][1],
                                                   "unpack_none_1t", up[0][0], "unpack_none_2t", up[0][1], "unpack_lz4_1t",
                                                   up[1][0], "unpack_lz4_2t", up[1][1], "bytes_none", (json_int_t)len0,
                                                   "bytes_lz4", (json_int_t)len1));
    json_array_append_new(jsets, o);
    free(p32); free(p16); free(p8); free(back); free(sh0); free(sh1); free(k2); free(v2);
}

int main(int argc, char **argv)
{
    const char *model = NULL, *json = NULL;
    int tokens = 480;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) tokens = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
        else if (!strcmp(argv[i], "--min-s") && i + 1 < argc) g_min_s = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--model DIR] [--tokens N] [--json OUT] [--min-s S]\n", argv[0]);
            return 2;
        }
    }
    MPI_Init(&argc, &argv);
    sits_log_init(0);
    char defmodel[4096];
    if (!model) {
        const char *src = getenv("top_srcdir");
        snprintf(defmodel, sizeof defmodel, "%s/tests/fixtures/models/llama_small", src ? src : ".");
        model = defmodel;
    }
    /* the link stand-in: single-thread memcpy of 64 MiB */
    size_t mb = (size_t)64 << 20;
    char *a = malloc(mb), *b = malloc(mb);
    memset(a, 1, mb);
    memset(b, 2, mb);
    double link = RATE(mb, memcpy(b, a, mb));
    free(a);
    free(b);
    int cores = 1;
#ifdef _OPENMP
    cores = omp_get_num_procs();
#endif
    printf("# KV codec bench: %d cores, lz4 %s, frames of %u raw bytes; link stand-in = host memcpy %.2f GB/s (1 thread)\n",
           cores, LZ4_versionString(), FRAME, link);
    printf("# rule: lz4 iff min(compress, decompress, link x ratio) > %.2f x link (sits_kv_codec_choose)\n",
           1 + SITS_KV_CODEC_MARGIN);
    json_t *root = json_pack("{s:i,s:s,s:f,s:i,s:f}", "cores", cores, "lz4_version", LZ4_versionString(), "memcpy_gbps", link,
                             "frame_bytes", (int)FRAME, "margin", SITS_KV_CODEC_MARGIN);
#ifdef HAVE_CUDA
    measure_gpu_links(root);
    measure_kv_block_io(root);
#endif
    json_t *sets = json_array();
    sits_backend_t *be = NULL;
    sits_comm_t *tp = NULL;
    sits_backend_params_t bp = { .threads = 1 };
    int rc = 0;
    if (sits_backend_cpu_create(&bp, &be) != SITS_OK || sits_comm_mpi_create(MPI_COMM_WORLD, 120.0, &tp) != SITS_OK) {
        fprintf(stderr, "set-up failed\n");
        rc = 1;
        goto out;
    }
    kvset_t fx = { .name = "fixture", .source = "CPU engine KV, fixture weights" };
    kvset_t rnd = { .name = "random", .source = "CPU engine KV, random (dummy) weights" };
    if (engine_kv(model, 0, tokens, be, tp, &fx) || engine_kv(model, 1, tokens, be, tp, &rnd)) { rc = 1; goto out; }
    kvset_t ga = synth("gauss", 0), un = synth("uniform", 1);
    kvset_t *all[4] = { &fx, &rnd, &ga, &un };
    for (int i = 0; i < 4; i++) {
        run_set(all[i], link, sets);
        free(all[i]->k);
        free(all[i]->v);
    }
out:
    json_object_set_new(root, "sets", sets);
    if (json && !rc && json_dump_file(root, json, JSON_INDENT(1)) != 0) { fprintf(stderr, "cannot write %s\n", json); rc = 1; }
    json_decref(root);
    sits_comm_destroy(tp);
    sits_backend_destroy(be);
    MPI_Finalize();
    return rc;
}
