/* fuzz_common.h -- shared by the libFuzzer targets of tests/fuzz (built by build.sh with clang,
 * -fsanitize=fuzzer,address,undefined; not part of make check).
 * Invariant: every target is deterministic and keeps no state between inputs except read-only data
 * loaded once in LLVMFuzzerInitialize. A broken invariant aborts via FUZZ_ASSERT (a finding). */
#ifndef SITS_FUZZ_COMMON_H
#define SITS_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "util/log.h"

#define FUZZ_ASSERT(c_) do { if (!(c_)) { fprintf(stderr, "fuzz invariant broken: %s (%s:%d)\n", #c_, \
    __FILE__, __LINE__); abort(); } } while (0)

/* The library logs every refusal; format the messages (that is code under test too) but send them to
 * /dev/null unless SITS_LOG_FILE is set. */
static inline void fuzz_log_quiet(void)
{
    setenv("SITS_LOG_FILE", "/dev/null", 0);
    sits_log_init(-1);
}

/* Read a whole file (malloc'd, NUL-terminated); exits on failure (set-up error, not a finding). */
static inline char *fuzz_read_file(const char *path, size_t *len_p)
{
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "fuzz: cannot open %s\n", path); exit(2); }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) { fprintf(stderr, "fuzz: cannot read %s\n", path); exit(2); }
    buf[n] = '\0';
    fclose(f);
    *len_p = (size_t)n;
    return buf;
}

/* Valid UTF-8 (RFC 3629: no overlongs, no surrogates, <= U+10FFFF). */
static inline int fuzz_utf8_valid(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t k;
        unsigned min;
        if (c < 0x80) { i++; continue; }
        else if ((c & 0xe0) == 0xc0) { k = 1; min = 0x80; c &= 0x1f; }
        else if ((c & 0xf0) == 0xe0) { k = 2; min = 0x800; c &= 0x0f; }
        else if ((c & 0xf8) == 0xf0) { k = 3; min = 0x10000; c &= 0x07; }
        else return 0;
        if (i + k >= n) return 0;   /* truncated sequence */
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return 0;
            c = (c << 6) | (s[i + j] & 0x3f);
        }
        if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return 0;
        i += k + 1;
    }
    return 1;
}

#endif
