/* bench_offline.c -- offline throughput (vLLM benchmark_throughput / TensorRT-LLM trtllm-bench style):
 * N requests of IN random prompt tokens, each generating exactly OUT tokens (greedy, eos ignored),
 * run to completion with continuous batching and chunked prefill on one TP group. Not a test.
 *
 *   bench/sits-bench-offline [--model DIR] [--load-format dummy|auto] [--device cuda|cpu|auto] [--gpu N]
 *       [--threads N] [--input 2048] [--output 128] [--requests 512] [--max-num-seqs 256]
 *       [--max-num-batched-tokens 8192] [--quant SPEC] [--kv-cache-dtype auto|bf16|int8|fp8] [--cuda-graphs 1|0]
 *       [--gpu-memory-utilization F] [--commit SHA] [--json FILE] [--profile-steps prompt|decode:N[@SKIP]]
 *
 * Every rank of MPI_COMM_WORLD is one rank of the TP group (as sits-bench-decode); every rank runs
 * the same deterministic scheduler, and the sampled tokens are the same on all ranks, so no plan
 * needs broadcasting. Scheduler (one step): every running sequence that has finished its prompt
 * decodes one token; then prompt chunks of the others, oldest first, fill the remaining
 * --max-num-batched-tokens; a sequence whose prompt completes in the step samples its first token.
 * Waiting requests are admitted (KV blocks for IN + OUT tokens reserved) while fewer than
 * --max-num-seqs run and the free KV blocks hold them. The KV cache holds --max-num-seqs sequences of IN + OUT
 * tokens (refused when that does not fit), or with --gpu-memory-utilization F (cuda) all that F of the GPU's
 * memory leaves after the weights and a step's buffers -- then, as in vLLM's and TensorRT-LLM's offline benches,
 * the free blocks rather than --max-num-seqs may bound the batch. Timed: from the first step to the last token (weights loaded, engine warm:
 * one untimed step first). Reported: requests/s, output tokens/s, total (input + output) tokens/s,
 * steps, and the mean decode batch, and the time by step kind (decode-only, with prompt tokens). JSON: one object
 * with those and the settings.
 * --profile-steps KIND:N[@SKIP] (cuda builds): the CUDA profiler runs (cudaProfilerStart / Stop) over N timed
 * steps of that kind only, after the first SKIP of them (a row's first steps are all prompt: skip to the mix),
 * so `ncu --profile-from-start off` (bench/profile_offline.sh, OFFPROF_STEPS) profiles them and nothing else --
 * not the loading, warm-up, graph captures or the other steps. */
#include <jansson.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench_common.h"
#include "sched/generate.h"
#include "util/log.h"
#ifdef HAVE_CUDA
#include <cuda_profiler_api.h>
#endif

typedef struct {
    const char *model, *load_format, *device, *quant, *kv_dtype, *commit, *json;
    int gpu, threads, in, out, requests, max_seqs, budget, cuda_graphs;
    double gpu_mem_util;   /* --gpu-memory-utilization (0: the KV cache of max_seqs whole sequences) */
    int ep;   /* [moe] --ep */
    int prof_kind, prof_n, prof_skip;   /* --profile-steps: step kind (0 decode-only, 1 with prompt tokens), count
                                         * (0: off), timed steps of that kind passed over first */
} opts_t;

typedef struct {
    int32_t *bt;         /* [mb] KV blocks */
    int n_blocks;
    int done_prompt;     /* prompt tokens prefilled */
    int gen;             /* tokens generated */
    int32_t last;        /* last sampled token */
    int req;             /* request index */
} seq_t;

static void usage(const char *a0)
{
    fprintf(stderr, "usage: %s [--model DIR] [--load-format dummy|auto] [--device cuda|cpu|auto] [--gpu N] [--threads N]\n"
                    "       [--input 2048] [--output 128] [--requests 512] [--max-num-seqs 256] [--max-num-batched-tokens 8192]\n"
                    "       [--quant SPEC] [--kv-cache-dtype auto|bf16|int8|fp8] [--cuda-graphs 1|0] [--commit SHA] [--json FILE]\n"
                    "       [--ep N] [--gpu-memory-utilization F] [--profile-steps prompt|decode:N[@SKIP]]\n", a0);
}

static int parse_args(int argc, char **argv, opts_t *o)
{
    static char defmodel[4096];
    const char *src = getenv("top_srcdir");
    snprintf(defmodel, sizeof defmodel, "%s/bench/configs/llama3-8b", src ? src : ".");
    *o = (opts_t){ .model = defmodel, .load_format = "dummy", .device = "auto", .in = 2048, .out = 128, .requests = 512,
                   .max_seqs = 256, .budget = 8192, .cuda_graphs = 1, .kv_dtype = "auto", .commit = getenv("SITS_COMMIT") };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) { usage(argv[0]); return -1; }
        if (!strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "--load-format")) o->load_format = v;
        else if (!strcmp(a, "--device")) o->device = v;
        else if (!strcmp(a, "--gpu")) o->gpu = atoi(v);
        else if (!strcmp(a, "--threads")) o->threads = atoi(v);
        else if (!strcmp(a, "--input")) o->in = atoi(v);
        else if (!strcmp(a, "--output")) o->out = atoi(v);
        else if (!strcmp(a, "--requests")) o->requests = atoi(v);
        else if (!strcmp(a, "--max-num-seqs")) o->max_seqs = atoi(v);
        else if (!strcmp(a, "--max-num-batched-tokens")) o->budget = atoi(v);
        else if (!strcmp(a, "--quant")) o->quant = v;
        else if (!strcmp(a, "--kv-cache-dtype")) o->kv_dtype = v;
        else if (!strcmp(a, "--ep")) o->ep = atoi(v);   /* [moe] experts over the ranks (== world size) */
        else if (!strcmp(a, "--cuda-graphs")) o->cuda_graphs = atoi(v);
        else if (!strcmp(a, "--gpu-memory-utilization")) {
            char *end = NULL;
            o->gpu_mem_util = strtod(v, &end);
            if (end == v || *end) o->gpu_mem_util = -1.0;   /* not a number: refused below */
        }
        else if (!strcmp(a, "--commit")) o->commit = v;
        else if (!strcmp(a, "--json")) o->json = v;
        else if (!strcmp(a, "--profile-steps")) {
            const char *c = strchr(v, ':');
            o->prof_kind = !strncmp(v, "prompt:", 7) ? 1 : !strncmp(v, "decode:", 7) ? 0 : -1;
            o->prof_n = c ? atoi(c + 1) : 0;
            const char *at = strchr(v, '@');
            o->prof_skip = at ? atoi(at + 1) : 0;
            if (o->prof_kind < 0 || o->prof_n < 1) { fprintf(stderr, "--profile-steps %s: want prompt:N[@SKIP] or decode:N[@SKIP]\n", v); return -1; }
#ifndef HAVE_CUDA
            fprintf(stderr, "--profile-steps: a cuda build only\n");
            return -1;
#endif
        }
        else { usage(argv[0]); return -1; }
        i++;
    }
    if (o->in < 1 || o->out < 1 || o->requests < 1 || o->max_seqs < 1 || o->budget < o->max_seqs || !(o->gpu_mem_util >= 0.0) ||
        o->gpu_mem_util > 1.0 ||
        (strcmp(o->load_format, "dummy") && strcmp(o->load_format, "auto"))) {
        usage(argv[0]);
        fprintf(stderr, "(--max-num-batched-tokens must be >= --max-num-seqs; --gpu-memory-utilization in [0, 1])\n");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    int provided, rank = 0, world = 1, rc = 1;
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) return 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    sits_log_init(rank);
    opts_t o;
    if (parse_args(argc, argv, &o)) { MPI_Finalize(); return 2; }
    sits_status_t st = SITS_OK;
    sits_backend_t *be = NULL;
    sits_comm_t *tp = NULL, *tp_dev = NULL;
    sits_runner_t *r = NULL;
    seq_t *run = NULL;
    int32_t *tok = NULL, *pos = NULL, *seqi = NULL, *rows = NULL, *bt = NULL, *sampled = NULL, *prompt = NULL, **spare = NULL;
    sits_sample_params_t *sp = NULL;
    int use_cuda = 0;
    st = sits_bench_backend(o.device, o.gpu, o.threads, &be, &use_cuda);
    if (st != SITS_OK) goto out;
    sits_dtype_t kv_dt;   /* [kv dtype] --kv-cache-dtype, as the server's */
    if ((st = sits_backend_kv_dtype_parse(o.kv_dtype, be->act_dtype, &kv_dt)) != SITS_OK ||
        (st = sits_backend_set_kv_dtype(be, kv_dt)) != SITS_OK) {
        fprintf(stderr, "sits-bench-offline: --kv-cache-dtype %s: not on this backend\n", o.kv_dtype);
        goto out;
    }
    if ((st = sits_comm_mpi_create(MPI_COMM_WORLD, 600.0, &tp)) != SITS_OK) goto out;
#ifdef HAVE_NCCL
    if (use_cuda && world > 1 && (st = sits_comm_custom_ar_create(MPI_COMM_WORLD, be, 600.0, -1, -1, 1, &tp_dev)) != SITS_OK) goto out;
#else
    if (use_cuda && world > 1) { fprintf(stderr, "sits-bench-offline: TP > 1 on cuda needs NCCL\n"); goto out; }
#endif
    int S = o.max_seqs, B = o.budget, mml = o.in + o.out;
    sits_runner_params_t rp = { .model_dir = o.model, .dummy = !strcmp(o.load_format, "dummy"), .dummy_seed = 0x5175d157ull,
                                .max_seqs = S, .max_tokens = B, .max_model_len = mml, .block_size = 16, .kv_bytes = 0,
                                .no_cuda_graphs = !o.cuda_graphs, .quant = o.quant, .ep = o.ep,
                                .gpu_memory_utilization = o.gpu_mem_util };
    double t0 = sits_bench_now_s();
    if ((st = sits_runner_create(&rp, be, tp, tp_dev, &r)) != SITS_OK) goto out;
    double load_s = sits_bench_now_s() - t0;
    int mb = r->ep.max_blocks_per_seq, need = (mml + r->ep.block_size - 1) / r->ep.block_size, V = r->cfg.vocab_size;
    run = calloc((size_t)S, sizeof *run);
    tok = malloc(sizeof(int32_t) * (size_t)B);
    pos = malloc(sizeof(int32_t) * (size_t)B);
    seqi = malloc(sizeof(int32_t) * (size_t)B);
    rows = malloc(sizeof(int32_t) * (size_t)S);
    sampled = malloc(sizeof(int32_t) * (size_t)S);
    bt = calloc((size_t)S * mb, sizeof(int32_t));
    sp = calloc((size_t)S, sizeof *sp);
    prompt = malloc(sizeof(int32_t) * (size_t)o.in);
    spare = malloc(sizeof *spare * (size_t)S);
    if (!run || !tok || !pos || !seqi || !rows || !sampled || !bt || !sp || !prompt || !spare) { st = SITS_ERR_NOMEM; goto out; }
    for (int i = 0; i < S; i++) {
        run[i].bt = malloc(sizeof(int32_t) * (size_t)mb);
        if (!run[i].bt) { st = SITS_ERR_NOMEM; goto out; }
        sp[i] = (sits_sample_params_t){ .temperature = 0.0f, .top_p = 1.0f };
    }
    if (rank == 0)
        printf("sits-bench-offline: %s (%s weights), quant %s, %d fp8 linears, tp %d, %s backend; %d requests of %d in / %d out, "
               "max %d seqs, %d tokens a step; loaded in %.1f s\n", o.model, o.load_format, o.quant ? o.quant : "auto",
               r->w->n_fp8, world, be->ops->name, o.requests, o.in, o.out, S, B, load_s);
    /* the same pseudo-random prompt for every request (no prefix caching here: each prefills in full) */
    uint64_t rng = 0x5eed0002ull;
    for (int i = 0; i < o.in; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        prompt[i] = (int32_t)((rng >> 33) % (uint64_t)V);
    }
    int n_run = 0, next_req = 0, finished = 0, steps = 0, decode_steps = 0;
    long out_tokens = 0, decode_rows = 0;
    double t_start = 0;
    /* where the time goes, by step kind (each step ends synchronised: sample or sync): [0] decode-only steps,
     * [1] steps with prompt tokens; seconds, steps, prompt tokens, decode rows */
    double kind_s[2] = { 0, 0 };
    long kind_n[2] = { 0, 0 }, kind_prompt[2] = { 0, 0 }, kind_dec[2] = { 0, 0 };
    for (int warm = 1; finished < o.requests; warm = 0) {
        /* admit */
        while (n_run < S && next_req < o.requests && sits_kv_blocks_free_count(r->blocks) >= need) {
            seq_t *q = &run[n_run++];
            if ((st = sits_kv_blocks_alloc(r->blocks, need, q->bt)) != SITS_OK) goto out;
            q->n_blocks = need;
            q->done_prompt = q->gen = 0;
            q->req = next_req++;
        }
        if (n_run == 0) { fprintf(stderr, "sits-bench-offline: no KV room for one request\n"); st = SITS_ERR_NOMEM; goto out; }
        /* build the step: decodes first (one row each), then prompt chunks */
        int nt = 0, n_out = 0, left = B;
        for (int i = 0; i < n_run; i++) {
            seq_t *q = &run[i];
            memcpy(bt + (size_t)i * mb, q->bt, sizeof(int32_t) * (size_t)q->n_blocks);
            if (q->done_prompt == o.in) {
                tok[nt] = q->last; pos[nt] = o.in + q->gen - 1; seqi[nt] = i;
                rows[n_out++] = nt++;
                left--;
            }
        }
        int decodes = n_out;
        for (int i = 0; i < n_run && left > 0; i++) {
            seq_t *q = &run[i];
            if (q->done_prompt == o.in) continue;
            int take = o.in - q->done_prompt < left ? o.in - q->done_prompt : left;
            for (int j = 0; j < take; j++) { tok[nt + j] = prompt[q->done_prompt + j]; pos[nt + j] = q->done_prompt + j; seqi[nt + j] = i; }
            nt += take;
            left -= take;
            q->done_prompt += take;
            if (q->done_prompt == o.in) rows[n_out++] = nt - 1;
        }
        /* --profile-steps: the profiler on over this step when it is one of the prof_n timed steps of its kind
         * after the first prof_skip */
        int prof = !warm && o.prof_n > 0 && (nt > decodes) == o.prof_kind && kind_n[o.prof_kind] >= o.prof_skip &&
                   kind_n[o.prof_kind] < o.prof_skip + o.prof_n;
#ifdef HAVE_CUDA
        if (prof) cudaProfilerStart();
#else
        (void)prof;
#endif
        double t_step = sits_bench_now_s();
        sits_batch_t b = { .n_tokens = nt, .tokens = tok, .pos = pos, .seq = seqi, .n_seqs = n_run, .block_tables = bt,
                           .n_out = n_out, .out_rows = rows, .sample = n_out ? sp : NULL };
        if ((st = sits_engine_run(r->engine, &b)) != SITS_OK) goto out;
        if (n_out && (st = sits_engine_sample(r->engine, tp, sp, sampled)) != SITS_OK) goto out;
        if (!n_out && (st = be->ops->sync(be)) != SITS_OK) goto out;
#ifdef HAVE_CUDA
        if (prof) cudaProfilerStop();
#endif
        if (warm) { /* the untimed first step: start the clock after it */
            MPI_Barrier(MPI_COMM_WORLD);
            t_start = sits_bench_now_s();
        } else {
            int k = nt > decodes;
            kind_s[k] += sits_bench_now_s() - t_step;
            kind_n[k]++;
            kind_prompt[k] += nt - decodes;
            kind_dec[k] += decodes;
        }
        steps++;
        if (decodes == n_out && nt == n_out) { decode_steps++; decode_rows += n_out; }
        for (int k = 0; k < n_out; k++) { /* each output row belongs to one sequence */
            seq_t *q = &run[seqi[rows[k]]];
            q->last = sampled[k];
            q->gen++;
            out_tokens++;
        }
        /* retire finished sequences, keeping the others in order (oldest first); their KV-table
         * buffers go to the freed tail slots */
        int w = 0, nf = 0;
        for (int i = 0; i < n_run; i++) {
            if (run[i].gen >= o.out) {
                sits_kv_blocks_release(r->blocks, run[i].n_blocks, run[i].bt);
                spare[nf++] = run[i].bt;
                finished++;
            } else {
                run[w++] = run[i];
            }
        }
        for (int i = w; i < n_run; i++) run[i].bt = spare[i - w];
        n_run = w;
    }
    double el = sits_bench_now_s() - t_start;
    long total_out = (long)o.requests * o.out;
    if (rank == 0) {
        printf("%d requests in %.2f s (%d steps, %d decode-only, mean decode batch %.1f): %.2f req/s, %.1f output tok/s, "
               "%.1f total tok/s\n", o.requests, el, steps, decode_steps, decode_steps ? (double)decode_rows / decode_steps : 0.0,
               o.requests / el, total_out / el, ((double)o.requests * (o.in + o.out)) / el);
        static const char *kname[2] = { "decode-only", "with prompt tokens" };
        for (int k = 0; k < 2; k++)
            printf("  steps %-18s %6ld in %7.2f s (%4.1f %%): %8.2f ms a step, %7.1f prompt + %6.1f decode tokens a step\n",
                   kname[k], kind_n[k], kind_s[k], 100.0 * kind_s[k] / el, kind_n[k] ? 1e3 * kind_s[k] / kind_n[k] : 0.0,
                   kind_n[k] ? (double)kind_prompt[k] / kind_n[k] : 0.0, kind_n[k] ? (double)kind_dec[k] / kind_n[k] : 0.0);
        if (o.json) {
            json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:i, s:f, s:s}",
                                  "bench", "offline", "model", o.model, "backend", be->ops->name, "quant", o.quant ? o.quant : "auto",
                                  "kv_cache_dtype", o.kv_dtype,
                                  "fp8_linears", r->w->n_fp8, "tp", world, "input", o.in, "output", o.out, "requests", o.requests,
                                  "max_num_seqs", S, "max_num_batched_tokens", B, "seconds", el, "requests_per_s",
                                  o.requests / el, "output_tok_s", total_out / el, "total_tok_s",
                                  ((double)o.requests * (o.in + o.out)) / el, "steps", steps, "load_s", load_s, "commit",
                                  o.commit ? o.commit : "unknown");
            if (j) json_object_set_new(j, "gpu_memory_utilization", json_real(o.gpu_mem_util));
            if (j) json_object_set_new(j, "kv_blocks", json_integer(sits_kv_blocks_total(r->blocks)));
            for (int k = 0; j && k < 2; k++)
                json_object_set_new(j, k ? "prompt_steps" : "decode_steps",
                                    json_pack("{s:i, s:f, s:I, s:I}", "steps", (int)kind_n[k], "seconds", kind_s[k],
                                              "prompt_tokens", (json_int_t)kind_prompt[k], "decode_tokens", (json_int_t)kind_dec[k]));
            if (!j || json_dump_file(j, o.json, JSON_INDENT(2) | JSON_PRESERVE_ORDER)) fprintf(stderr, "cannot write %s\n", o.json);
            else printf("wrote %s\n", o.json);
            json_decref(j);
        }
    }
    (void)out_tokens;
    rc = 0;
out:
    if (st != SITS_OK) { fprintf(stderr, "sits-bench-offline: rank %d: %s\n", rank, sits_status_str(st)); rc = 1; }
    for (int i = 0; run && i < S; i++) free(run[i].bt);
    free(run); free(tok); free(pos); free(seqi); free(rows); free(sampled); free(bt); free(sp); free(prompt); free(spare);
    sits_runner_destroy(r);
    sits_comm_destroy(tp_dev);
    sits_comm_destroy(tp);
    sits_backend_destroy(be);
    if (rc && world > 1) MPI_Abort(MPI_COMM_WORLD, rc);
    MPI_Finalize();
    return rc;
}
