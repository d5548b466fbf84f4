/* bench_template.c -- chat-template speed: compile time and µs per render of every corpus template
 * (tests/fixtures/templates/NAME.jinja) on a 10-message conversation (system + 9 alternating turns,
 * add_generation_prompt). Not a test.
 *
 *   bench/sits-bench-template [--iters N] [--dir DIR]
 *
 * DIR defaults to tests/fixtures/templates under $top_srcdir (or .). Templates that fail on this
 * conversation (as they do in transformers, e.g. tool-use-only templates) are listed as such. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <dirent.h>
#include <jansson.h>
#include "template/template.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int iters = 1000;
    const char *top = getenv("top_srcdir");
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s/tests/fixtures/templates", top ? top : ".");
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc) snprintf(dir, sizeof(dir), "%s", argv[++i]);
        else { fprintf(stderr, "usage: %s [--iters N] [--dir DIR]\n", argv[0]); return 2; }
    }
    json_t *msgs = json_array();
    json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "system", "content", "You are a helpful assistant."));
    for (int i = 0; i < 9; i++)
        json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", i % 2 ? "assistant" : "user", "content",
                                              "A message of moderate length, a sentence or two, with some words in it."));
    json_t *vars = json_pack("{s:o,s:b,s:s,s:s,s:n,s:n}", "messages", msgs, "add_generation_prompt", 1, "bos_token", "<s>",
                             "eos_token", "</s>", "tools", "documents");
    DIR *d = opendir(dir);
    if (!d) { fprintf(stderr, "cannot open %s\n", dir); return 1; }
    struct dirent *e;
    double per[128];
    int n = 0;
    printf("%-55s %10s %12s\n", "template", "compile us", "render us");
    while ((e = readdir(d)) && n < 128) {
        size_t nl = strlen(e->d_name);
        if (nl < 7 || strcmp(e->d_name + nl - 6, ".jinja")) continue;
        char path[2048];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        fseek(f, 0, SEEK_END);
        long len = ftell(f);
        fseek(f, 0, SEEK_SET);
        char *src = malloc((size_t)len + 1);
        size_t got = fread(src, 1, (size_t)len, f);
        fclose(f);
        sits_tmpl_t *t = NULL;
        sits_tmpl_error_t err;
        double t0 = now();
        sits_status_t st = sits_tmpl_compile(src, got, &t, &err);
        double tc = (now() - t0) * 1e6;
        free(src);
        if (st != SITS_OK) { printf("%-55s refused: %s\n", e->d_name, err.msg); continue; }
        char *out = NULL;
        size_t ol;
        sits_tmpl_render_opts_t opts = { .now = 1721995200 };
        if (sits_tmpl_render(t, vars, &opts, &out, &ol, &err) != SITS_OK) {
            printf("%-55s %10.1f %12s (%s)\n", e->d_name, tc, "fails", err.msg);
            sits_tmpl_destroy(t);
            continue;
        }
        free(out);
        t0 = now();
        for (int k = 0; k < iters; k++)
            if (sits_tmpl_render(t, vars, &opts, &out, &ol, &err) == SITS_OK) free(out);
        per[n] = (now() - t0) * 1e6 / iters;
        printf("%-55s %10.1f %12.1f\n", e->d_name, tc, per[n]);
        n++;
        sits_tmpl_destroy(t);
    }
    closedir(d);
    if (n) {
        qsort(per, (size_t)n, sizeof(double), cmp_double);
        printf("%d templates rendered: median %.1f us, max %.1f us per render (%d iterations each)\n", n, per[n / 2],
               per[n - 1], iters);
    }
    json_decref(vars);
    return 0;
}
