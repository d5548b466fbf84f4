/* bench_tokenizer.c -- tokenizer throughput on one core: encode MB/s over a large text and decode
 * tokens/s (full decode and streaming). Not a test.
 *
 *   bench/sits-bench-tokenizer [--model DIR] [--text FILE] [--mb N] [--json OUT]
 *
 * DIR defaults to tests/fixtures/tokenizers/bytelevel under $top_srcdir (or .); FILE defaults to the
 * Debian Reference text (/usr/share/debian-reference/debian-reference.en.txt.gz, read through zcat)
 * when present, else a synthetic mix of the fixture strings. The text is repeated up to N MB (8). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "tokenizer/tokenizer.h"
#include "util/log.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static char *read_all(FILE *f, size_t *n_p)
{
    size_t cap = 1 << 20, n = 0;
    char *p = malloc(cap);
    for (;;) {
        if (n == cap) p = realloc(p, cap *= 2);
        size_t r = fread(p + n, 1, cap - n, f);
        if (r == 0) break;
        n += r;
    }
    *n_p = n;
    return p;
}

int main(int argc, char **argv)
{
    const char *model = NULL, *textfile = NULL, *json = NULL;
    double mb = 8;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--text") && i + 1 < argc) textfile = argv[++i];
        else if (!strcmp(argv[i], "--mb") && i + 1 < argc) mb = atof(argv[++i]);
        else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--model DIR] [--text FILE] [--mb N] [--json OUT]\n", argv[0]);
            return 2;
        }
    }
    sits_log_init(-1);
    char defmodel[4096];
    if (!model) {
        const char *src = getenv("top_srcdir");
        snprintf(defmodel, sizeof(defmodel), "%s/tests/fixtures/tokenizers/bytelevel", src ? src : ".");
        model = defmodel;
    }
    sits_tokenizer_t *tok;
    if (sits_tokenizer_load(model, &tok) != SITS_OK) {
        fprintf(stderr, "cannot load the tokenizer of %s\n", model);
        return 1;
    }
    size_t n = 0;
    char *base = NULL;
    FILE *f = NULL;
    if (textfile) f = fopen(textfile, "rb");
    else if ((f = fopen("/usr/share/debian-reference/debian-reference.en.txt.gz", "rb"))) {
        fclose(f);
        f = popen("zcat /usr/share/debian-reference/debian-reference.en.txt.gz", "r");
        textfile = "debian-reference.en.txt";
    }
    if (f) {
        base = read_all(f, &n);
        if (!strcmp(textfile, "debian-reference.en.txt")) pclose(f); else fclose(f);
    }
    if (!n) {
        static const char synth[] = "The quick brown fox jumps over the lazy dog. It's 2024; don't panic!\n"
                                    "int main(void) { return 0; }\t日本語のテキスト 😀👍🏽\n    indented   spaces 12345\n";
        free(base);
        base = strdup(synth);
        n = strlen(synth);
        textfile = "synthetic";
    }
    size_t want = (size_t)(mb * 1e6), total = 0;
    char *text = malloc(want + n + 1);
    while (total < want) { memcpy(text + total, base, n); total += n; }
    free(base);
    /* encode in 64 KiB-ish chunks cut at newlines, as a server would see prompts */
    double t0 = now();
    size_t ntok = 0, cap = 0;
    int32_t *all = NULL;
    for (size_t off = 0; off < total;) {
        size_t end = off + 65536 < total ? off + 65536 : total;
        while (end < total && text[end - 1] != '\n') end++;
        int32_t *ids;
        size_t k;
        if (sits_tokenizer_encode(tok, text + off, end - off, 0, &ids, &k) != SITS_OK) {
            fprintf(stderr, "encode failed at offset %zu\n", off);
            return 1;
        }
        if (ntok + k > cap) { cap = (ntok + k) * 2; all = realloc(all, cap * sizeof(int32_t)); }
        memcpy(all + ntok, ids, k * sizeof(int32_t));
        ntok += k;
        free(ids);
        off = end;
    }
    double t_enc = now() - t0;
    t0 = now();
    char *out;
    size_t outlen;
    if (sits_tokenizer_decode(tok, all, ntok, 0, &out, &outlen) != SITS_OK) return 1;
    double t_dec = now() - t0;
    int roundtrip = outlen == total && memcmp(out, text, total) == 0;
    free(out);
    t0 = now();
    sits_detok_t *dt;
    sits_detok_create(tok, 0, &dt);
    size_t streamed = 0;
    for (size_t i = 0; i <= ntok; i++) {
        const char *p;
        size_t l;
        if (i < ntok) sits_detok_push(dt, all[i], &p, &l); else sits_detok_flush(dt, &p, &l);
        streamed += l;
    }
    double t_stream = now() - t0;
    sits_detok_destroy(dt);

    double enc_mbs = (double)total / 1e6 / t_enc, dec_tps = (double)ntok / t_dec, str_tps = (double)ntok / t_stream;
    printf("%-22s %s\n", "model", model);
    printf("%-22s %s x %.1f MB\n", "text", textfile, (double)total / 1e6);
    printf("%-22s %zu (%.2f bytes/token)\n", "tokens", ntok, (double)total / (double)ntok);
    printf("%-22s %.2f MB/s (goal >= 5)\n", "encode", enc_mbs);
    printf("%-22s %.0f tokens/s\n", "decode (full)", dec_tps);
    printf("%-22s %.0f tokens/s (%zu bytes)\n", "decode (streaming)", str_tps, streamed);
    /* SentencePiece-style tokenizers prepend a space-marker to every encoded chunk: not lossless */
    printf("%-22s %s\n", "round trip", roundtrip ? "exact" : "differs (normal for a Metaspace/Prepend tokenizer)");
    if (json) {
        FILE *o = fopen(json, "w");
        if (o) {
            fprintf(o, "{\"model\": \"%s\", \"bytes\": %zu, \"tokens\": %zu, \"encode_mb_s\": %.3f, "
                       "\"decode_tokens_s\": %.0f, \"stream_tokens_s\": %.0f, \"roundtrip\": %s}\n",
                    model, total, ntok, enc_mbs, dec_tps, str_tps, roundtrip ? "true" : "false");
            fclose(o);
        }
    }
    free(all);
    free(text);
    sits_tokenizer_destroy(tok);
    return 0;
}
