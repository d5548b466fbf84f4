/* test_model_common.h -- helpers shared by the model-layer unit tests (test_model_*.c,
 * test_safetensors.c): the committed data directory, whole-file reads, capture of the log
 * (stderr) so that tests can check what a refusal says, a tolerance comparison that prints the
 * first mismatches and the max error, and an in-memory safetensors image builder. */
#ifndef SITS_TEST_MODEL_COMMON_H
#define SITS_TEST_MODEL_COMMON_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef SITS_TEST_DATA_DIR
#error "SITS_TEST_DATA_DIR must name tests/unit/data/model"
#endif

/* Whole file, NUL-terminated; NULL when it cannot be read. */
static inline char *tm_read_file(const char *path, size_t *len_p)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); buf = NULL; }
    fclose(f);
    if (buf) { buf[n] = '\0'; if (len_p) *len_p = (size_t)n; }
    return buf;
}

static inline int tm_write_file(const char *path, const void *buf, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(buf, 1, len, f);
    return fclose(f) == 0 && w == len ? 0 : -1;
}

/* Redirect stderr (where the logger writes) to a temp file until tm_capture_end, which returns
 * what was written (caller frees). */
typedef struct { int saved_fd; FILE *tmp; } tm_capture_t;

static inline void tm_capture_begin(tm_capture_t *c)
{
    fflush(stderr);
    c->saved_fd = dup(2);
    c->tmp = tmpfile();
    if (c->tmp) dup2(fileno(c->tmp), 2);
}

static inline char *tm_capture_end(tm_capture_t *c)
{
    fflush(stderr);
    dup2(c->saved_fd, 2);
    close(c->saved_fd);
    char *out = NULL;
    if (c->tmp) {
        long n = ftell(c->tmp);
        if (n < 0) n = 0;
        out = calloc(1, (size_t)n + 1);
        rewind(c->tmp);
        if (out && n > 0 && fread(out, 1, (size_t)n, c->tmp) != (size_t)n) out[0] = '\0';
        fclose(c->tmp);
    }
    if (!out) out = calloc(1, 1);
    fputs(out, stderr); /* keep the log visible in the test output */
    return out;
}

/* |got - ref| <= atol + rtol * |ref| elementwise; prints the first mismatches and the max error.
 * Returns the number of mismatches. */
static inline size_t tm_compare(const char *label, const float *got, const double *ref, size_t n, double atol,
                                double rtol)
{
    size_t bad = 0;
    double max_err = 0.0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - ref[i]);
        int ok = err <= atol + rtol * fabs(ref[i]) && !isnan(got[i]) == !isnan(ref[i]);
        if (err > max_err) max_err = err;
        if (!ok && bad++ < 5)
            printf("  %s[%zu]: got %.9g want %.9g (err %.3g)\n", label, i, (double)got[i], ref[i], err);
    }
    printf("  %s: %zu values, %zu mismatches, max abs error %.3g (atol %g rtol %g)\n", label, n, bad, max_err, atol,
           rtol);
    return bad;
}

/* A safetensors image: u64 LE header length, the header text, data_len zero bytes. hlen_override
 * (when != UINT64_MAX) replaces the real header length in the first 8 bytes. */
static inline unsigned char *tm_st_image(const char *header, size_t data_len, uint64_t hlen_override, size_t *len_p)
{
    size_t h = strlen(header);
    *len_p = 0;
    size_t len = 8 + h + data_len;
    unsigned char *buf = calloc(1, len ? len : 1);
    if (!buf) return NULL;
    uint64_t hl = hlen_override != UINT64_MAX ? hlen_override : (uint64_t)h;
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(hl >> (8 * i));
    memcpy(buf + 8, header, h);
    for (size_t i = 0; i < data_len; i++) buf[8 + h + i] = (unsigned char)(i * 7 + 1);
    *len_p = len;
    return buf;
}

#endif
