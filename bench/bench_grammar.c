/* bench_grammar.c -- [structured output] what a constrained batch adds to a step on the host: each step,
 * for B sequences, the allowed-token mask (src/grammar), the accept of the drawn token, the mask applied
 * to [B, V] fp32 logits by the cpu twin of logit_mask (on a GPU it is one kernel), and the plan's mask
 * trailer serialised. Tokens are drawn uniformly among the allowed ones (what a random-weight model does:
 * the hardest case for the mask cache, as its strings are arbitrary). Grammars: one per sequence (separate
 * requests of the same schema, separate caches), one shared (n > 1 / the same schema: the server shares one
 * compiled grammar per constraint), or --distinct: 32 different schemas (the default one with an extra
 * property of its own per sequence: different grammars, nothing shared but the vocabulary). --regex RE
 * constrains with a regex instead (e.g. a counted one, "[a-z ]{1000}": every step is a new grammar state).
 * Times are the thread's CPU time (CLOCK_THREAD_CPUTIME_ID), so a shared machine's load does not inflate them.
 * Prints a table and writes JSON (--json FILE).
 * usage: sits-bench-grammar --tokenizer DIR [--batch 32] [--steps 200] [--shared | --distinct] [--schema FILE | --regex RE]
 *        [--json FILE] */
#include "grammar/grammar.h"
#include "backend/backend.h"
#include "sched/plan.h"
#include "tokenizer/tokenizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int dcmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static const char *default_schema =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}},\"address\":{\"type\":\"object\",\"properties\":"
    "{\"city\":{\"type\":\"string\"},\"zip\":{\"type\":\"string\",\"pattern\":\"[0-9]{5}\"}},\"required\":[\"city\"]},"
    "\"kind\":{\"enum\":[\"a\",\"b\",\"c\"]},\"score\":{\"type\":\"number\"}},\"required\":[\"name\",\"age\",\"tags\"]}";

int main(int argc, char **argv)
{
    const char *tok_dir = NULL, *schema_file = NULL, *json_out = NULL, *regex = NULL;
    int B = 32, steps = 200, shared = 0, distinct = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) tok_dir = argv[++i];
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) B = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--schema") && i + 1 < argc) schema_file = argv[++i];
        else if (!strcmp(argv[i], "--json") && i + 1 < argc) json_out = argv[++i];
        else if (!strcmp(argv[i], "--regex") && i + 1 < argc) regex = argv[++i];
        else if (!strcmp(argv[i], "--shared")) shared = 1;
        else if (!strcmp(argv[i], "--distinct")) distinct = 1;
        else {
            fprintf(stderr, "usage: %s --tokenizer DIR [--batch 32] [--steps 200] [--shared | --distinct] [--schema FILE | --regex RE] "
                            "[--json FILE]\n", argv[0]);
            return 2;
        }
    }
    if (!tok_dir || B < 1 || steps < 1) { fprintf(stderr, "--tokenizer DIR is required\n"); return 2; }
    char *schema = NULL;
    if (schema_file) {
        FILE *f = fopen(schema_file, "rb");
        if (!f) { perror(schema_file); return 1; }
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        schema = calloc((size_t)n + 1, 1);
        if (fread(schema, 1, (size_t)n, f) != (size_t)n) { fclose(f); return 1; }
        fclose(f);
    } else {
        schema = strdup(default_schema);
    }
    sits_tokenizer_t *tok = NULL;
    if (sits_tokenizer_load(tok_dir, &tok) != SITS_OK) return 1;
    int V = (int)sits_tokenizer_vocab_size(tok);
    const int32_t *stops;
    int n_stop = (int)sits_tokenizer_stop_ids(tok, &stops);
    double t0 = now_s();
    sits_grammar_vocab_t *voc = NULL;
    if (sits_grammar_vocab_create(tok, V, stops, n_stop, &voc) != SITS_OK) return 1;
    double t_vocab = now_s() - t0;
    int W = (int)SITS_GRAMMAR_MASK_WORDS(V);
    sits_grammar_t **g = calloc((size_t)B, sizeof *g);
    sits_grammar_state_t **st = calloc((size_t)B, sizeof *st);
    uint32_t *masks = malloc(sizeof *masks * (size_t)W * B);
    int32_t *rows = malloc(sizeof *rows * (size_t)B), *cand = malloc(sizeof *cand * (size_t)V);
    float *logits = malloc(sizeof *logits * (size_t)V * B);
    double *t_mask = calloc((size_t)steps, sizeof *t_mask), *t_apply = calloc((size_t)steps, sizeof *t_apply);
    double *t_plan = calloc((size_t)steps, sizeof *t_plan);
    char err[256];
    t0 = now_s();
    for (int b = 0; b < B; b++) {
        if (b == 0 || !shared) {
            /* --distinct: the schema with a property "f<b>" of its own */
            const char *at = strstr(schema, "\"properties\":{");
            char *own = NULL;
            if (distinct && at) {
                size_t head = (size_t)(at - schema) + strlen("\"properties\":{");
                own = malloc(strlen(schema) + 64);
                if (!own) return 1;
                snprintf(own, strlen(schema) + 64, "%.*s\"f%d\":{\"type\":\"string\"},%s", (int)head, schema, b, schema + head);
            }
            const char *text = own ? own : schema;
            sits_status_t st_g = regex ? sits_grammar_from_regex(regex, strlen(regex), err, sizeof err, &g[b])
                                       : sits_grammar_from_json_schema(text, strlen(text), err, sizeof err, &g[b]);
            free(own);
            if (st_g != SITS_OK) {
                fprintf(stderr, "%s: %s\n", regex ? "regex" : "schema", err);
                return 1;
            }
        } else {
            g[b] = g[0];
        }
        if (sits_grammar_state_create(g[b], voc, &st[b]) != SITS_OK) return 1;
        rows[b] = b;
    }
    double t_compile = (now_s() - t0) / (shared ? 1 : B);
    uint64_t rng = 12345;
    int32_t *a = calloc((size_t)4 * B + 8, sizeof *a);
    sits_sample_params_t *sp = calloc((size_t)B, sizeof *sp);
    unsigned char *pbuf = NULL;
    long restarts = 0;
    for (int s = 0; s < steps; s++) {
        double m0 = now_s();
        for (int b = 0; b < B; b++) sits_grammar_state_mask(st[b], masks + (size_t)b * W);
        t_mask[s] = now_s() - m0;
        /* the step plan with its mask trailer (what the leader broadcasts) */
        for (int b = 0; b < B; b++) { a[b] = 1; a[B + b] = s; a[2 * B + b] = b; a[3 * B + b] = b; }
        sits_plan_t pl = { .cmd = SITS_PLAN_STEP, .n_tokens = B, .tokens = a, .pos = a + B, .seq = a + 2 * B, .n_seqs = B,
                           .max_blocks = 0, .block_tables = a, .n_out = B, .out_rows = a + 3 * B, .sample = sp,
                           .masks = { .n = B, .words = W, .rows = rows, .masks = masks } };
        size_t need = sits_plan_size(&pl), len;
        if (!pbuf) pbuf = malloc(need);
        m0 = now_s();
        sits_plan_write(&pl, pbuf, need, &len);
        t_plan[s] = now_s() - m0;
        for (size_t i = 0; i < (size_t)V * B; i++) logits[i] = (float)(i % 97);
        m0 = now_s();
        sits_backend_cpu_logit_mask(logits, 0, V, masks, W, rows, B);
        t_apply[s] = now_s() - m0;
        /* draw and accept (accept is timed with the mask) */
        for (int b = 0; b < B; b++) {
            const uint32_t *m = masks + (size_t)b * W;
            int nc = 0;
            for (int i = 0; i < V; i++) if ((m[i >> 5] >> (i & 31)) & 1) cand[nc++] = i;
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            int32_t t = nc ? cand[(rng >> 33) % (uint64_t)nc] : -1;
            int is_stop = 0;
            for (int k = 0; k < n_stop; k++) if (t == stops[k]) is_stop = 1;
            m0 = now_s();
            if (t < 0 || is_stop || sits_grammar_state_accept(st[b], t) != SITS_OK) {
                /* finished (or dead: never seen): a new document in the same slot */
                sits_grammar_state_destroy(st[b]);
                sits_grammar_state_create(g[b], voc, &st[b]);
                restarts++;
            }
            t_mask[s] += now_s() - m0;
        }
    }
    long hits = 0, misses = 0;
    for (int b = 0; b < (shared ? 1 : B); b++) {
        long h, m;
        sits_grammar_cache_stats(g[b], &h, &m);
        hits += h;
        misses += m;
    }
    double *srt = malloc(sizeof *srt * (size_t)steps);
    double mean[3] = { 0 }, p50[3], p99[3];
    double *series[3] = { t_mask, t_apply, t_plan };
    for (int k = 0; k < 3; k++) {
        for (int s = 0; s < steps; s++) mean[k] += series[k][s] / steps;
        memcpy(srt, series[k], sizeof *srt * (size_t)steps);
        qsort(srt, (size_t)steps, sizeof *srt, dcmp);
        p50[k] = srt[steps / 2];
        p99[k] = srt[(int)(0.99 * (steps - 1))];
    }
    printf("grammar bench: vocab %d (%s), batch %d, %d steps, %s grammars, %s\n", V, tok_dir, B, steps,
           shared ? "one shared" : distinct ? "distinct" : "per-sequence", regex ? regex : "json schema");
    printf("  vocabulary trie (once per tokenizer)  %8.1f ms\n", t_vocab * 1e3);
    printf("  schema compile (per grammar)          %8.3f ms\n", t_compile * 1e3);
    printf("  %-36s %9s %9s %9s\n", "per step, whole batch", "mean ms", "p50 ms", "p99 ms");
    const char *names[3] = { "masks + accepts (host)", "apply masks [B, V] (cpu twin)", "plan mask trailer write" };
    for (int k = 0; k < 3; k++) printf("  %-36s %9.3f %9.3f %9.3f\n", names[k], mean[k] * 1e3, p50[k] * 1e3, p99[k] * 1e3);
    printf("  mask cache: %ld hits, %ld misses (%.1f%% hits); %ld documents finished\n", hits, misses,
           100.0 * hits / (hits + misses > 0 ? hits + misses : 1), restarts);
    if (json_out) {
        FILE *f = fopen(json_out, "w");
        if (f) {
            fprintf(f, "{\"vocab\": %d, \"batch\": %d, \"steps\": %d, \"shared\": %d, \"distinct\": %d, \"regex\": %d, "
                       "\"vocab_ms\": %.3f, \"compile_ms\": %.4f, "
                       "\"mask_accept_ms\": {\"mean\": %.4f, \"p50\": %.4f, \"p99\": %.4f}, \"apply_cpu_ms\": {\"mean\": %.4f}, "
                       "\"plan_ms\": {\"mean\": %.4f}, \"cache_hits\": %ld, \"cache_misses\": %ld}\n",
                    V, B, steps, shared, distinct, regex != NULL, t_vocab * 1e3, t_compile * 1e3, mean[0] * 1e3, p50[0] * 1e3, p99[0] * 1e3, mean[1] * 1e3,
                    mean[2] * 1e3, hits, misses);
            fclose(f);
        }
    }
    for (int b = 0; b < B; b++) {
        sits_grammar_state_destroy(st[b]);
        if (b == 0 || !shared) sits_grammar_destroy(g[b]);
    }
    sits_grammar_vocab_destroy(voc);
    sits_tokenizer_destroy(tok);
    free(g); free(st); free(masks); free(rows); free(cand); free(logits); free(t_mask); free(t_apply); free(t_plan);
    free(srt); free(a); free(sp); free(pbuf); free(schema);
    return 0;
}
