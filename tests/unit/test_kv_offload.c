/* test_kv_offload.c -- the KV offload tiers (src/kv/offload.c): host tier round trips and capacity
 * accounting, LZ4 round trips (compressible and incompressible data, many 64 KiB frames, 1 and 3
 * threads, a compressed host slot stored smaller), the spill to the disk tier when the host tier is
 * full (file present while held, removed after take / drop / destroy), refusal of a corrupted,
 * truncated or missing disk file (and of a wrong size) with the slot released, a store whose disk
 * directory cannot be created, no tier at all, and the lz4 auto decision. Prefetch: prefetch then
 * take_buf / take gives the exact bytes from the host, LZ4 and disk tiers (raw and LZ4), the tier file
 * is read once (deleting it after the prefetch joined changes nothing), a corrupted or missing disk
 * file found by the prefetch gives the synchronous take's status, drop and destroy of a prefetched
 * slot free it (ASan build), several prefetches queue (each joins the previous one). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "kv/offload.h"
#include "util/log.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* compressible: small floats with many repeated bytes; else random bytes */
static unsigned char *make_data(size_t n, int compressible, uint64_t seed)
{
    unsigned char *d = malloc(n);
    assert_non_null(d);
    uint64_t s = seed | 1;
    for (size_t i = 0; i < n; i++) d[i] = compressible ? (unsigned char)(i % 64 < 48 ? 0 : rng_next(&s) & 3) : (unsigned char)rng_next(&s);
    return d;
}

static char tmpdir[256];

static int setup_dir(void **state)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/sits-test-kv-offload-%ld", (long)getpid());
    return 0;
}

static int teardown_dir(void **state)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static int file_exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

static sits_kv_offload_t *make(size_t host, const char *dir, sits_kv_lz4_mode_t lz4, int threads)
{
    sits_kv_offload_params_t p = { .host_bytes = host, .dir = dir, .lz4 = lz4, .threads = threads, .rank = 3 };
    sits_kv_offload_t *o = NULL;
    assert_int_equal(sits_kv_offload_create(&p, &o), SITS_OK);
    return o;
}

static void round_trip(sits_kv_offload_t *o, int32_t slot, const unsigned char *d, size_t n, sits_kv_tier_t want_tier)
{
    sits_kv_tier_t t = SITS_KV_N_TIERS;
    size_t stored = 0;
    assert_int_equal(sits_kv_offload_put(o, slot, d, n, &t, &stored), SITS_OK);
    assert_int_equal(t, want_tier);
    assert_true(sits_kv_offload_holds(o, slot));
    unsigned char *back = calloc(1, n ? n : 1);
    assert_int_equal(sits_kv_offload_take(o, slot, back, n, &t), SITS_OK);
    assert_int_equal(t, want_tier);
    assert_memory_equal(back, d, n);
    assert_false(sits_kv_offload_holds(o, slot));
    free(back);
}

static void test_host_tier(void **state)
{
    sits_kv_offload_t *o = make(10000, NULL, SITS_KV_LZ4_OFF, 1);
    unsigned char *a = make_data(4000, 0, 1), *b = make_data(4000, 0, 2), *c = make_data(4000, 0, 3);
    round_trip(o, 7, a, 4000, SITS_KV_TIER_HOST);
    /* two fit, the third does not (no disk tier): refused, nothing held for it */
    assert_int_equal(sits_kv_offload_put(o, 1, a, 4000, NULL, NULL), SITS_OK);
    assert_int_equal(sits_kv_offload_put(o, 2, b, 4000, NULL, NULL), SITS_OK);
    assert_int_equal(sits_kv_offload_put(o, 1, c, 10, NULL, NULL), SITS_ERR_INVALID);   /* slot held */
    assert_int_equal(sits_kv_offload_put(o, 3, c, 4000, NULL, NULL), SITS_ERR_BUSY);
    assert_false(sits_kv_offload_holds(o, 3));
    sits_kv_offload_stats_t st;
    sits_kv_offload_get_stats(o, &st);
    assert_int_equal(st.used[SITS_KV_TIER_HOST], 8000);
    assert_int_equal(st.slots, 2);
    assert_int_equal(st.puts[SITS_KV_TIER_HOST], 3);
    assert_int_equal(st.failures, 1);
    /* a wrong size is refused and releases the slot; drop frees room */
    unsigned char *back = malloc(4000);
    assert_int_equal(sits_kv_offload_take(o, 2, back, 3999, NULL), SITS_ERR_INVALID);
    assert_false(sits_kv_offload_holds(o, 2));
    assert_int_equal(sits_kv_offload_take(o, 2, back, 4000, NULL), SITS_ERR_NOT_FOUND);
    sits_kv_offload_drop(o, 1);
    sits_kv_offload_drop(o, 1);
    sits_kv_offload_get_stats(o, &st);
    assert_int_equal(st.used[SITS_KV_TIER_HOST], 0);
    assert_int_equal(st.slots, 0);
    round_trip(o, 3, c, 4000, SITS_KV_TIER_HOST);
    round_trip(o, 4, c, 0, SITS_KV_TIER_HOST);
    /* the staging buffer grows and keeps its bytes' room */
    void *s1 = NULL;
    assert_int_equal(sits_kv_offload_staging(o, 100, &s1), SITS_OK);
    memset(s1, 1, 100);
    assert_int_equal(sits_kv_offload_staging(o, 1 << 20, &s1), SITS_OK);
    memset(s1, 2, 1 << 20);
    free(back);
    free(a);
    free(b);
    free(c);
    sits_kv_offload_destroy(o);
}

static void test_lz4(void **state)
{
    const size_t n = 5 * 65536 + 1234;   /* 6 frames, the last one short */
    for (int threads = 1; threads <= 3; threads += 2) {
        sits_kv_offload_t *o = make(1 << 24, NULL, SITS_KV_LZ4_ON, threads);
        unsigned char *z = make_data(n, 1, 5), *r = make_data(n, 0, 6);
        size_t stored = 0;
        assert_int_equal(sits_kv_offload_put(o, 1, z, n, NULL, &stored), SITS_OK);
        assert_true(stored < n / 2);   /* it really compressed */
        assert_int_equal(sits_kv_offload_put(o, 2, r, n, NULL, &stored), SITS_OK);
        assert_true(stored <= n + 4 * 6);   /* incompressible frames kept raw */
        unsigned char *back = malloc(n);
        assert_int_equal(sits_kv_offload_take(o, 1, back, n, NULL), SITS_OK);
        assert_memory_equal(back, z, n);
        assert_int_equal(sits_kv_offload_take(o, 2, back, n, NULL), SITS_OK);
        assert_memory_equal(back, r, n);
        round_trip(o, 9, z, 1000, SITS_KV_TIER_HOST);
        sits_kv_offload_stats_t st;
        sits_kv_offload_get_stats(o, &st);
        assert_int_equal(st.codec, 1);
        assert_true(st.put_stored_bytes[SITS_KV_TIER_HOST] < st.put_raw_bytes[SITS_KV_TIER_HOST]);
        free(back);
        free(z);
        free(r);
        sits_kv_offload_destroy(o);
    }
}

static void test_disk_spill(void **state)
{
    const size_t n = 3 * 65536 + 17;
    for (int lz4 = 0; lz4 <= 1; lz4++) {
        sits_kv_offload_t *o = make(n + 64, tmpdir, lz4 ? SITS_KV_LZ4_ON : SITS_KV_LZ4_OFF, 2);   /* one raw slot (+ frame table) */
        unsigned char *a = make_data(n, 0, 11), *b = make_data(n, 1, 12);
        sits_kv_tier_t t;
        assert_int_equal(sits_kv_offload_put(o, 1, a, n, &t, NULL), SITS_OK);
        assert_int_equal(t, SITS_KV_TIER_HOST);
        assert_int_equal(sits_kv_offload_put(o, 2, b, n, &t, NULL), SITS_OK);
        assert_int_equal(t, SITS_KV_TIER_DISK);   /* host full: spilled */
        char path[4200];
        sits_kv_offload_path(o, 2, path, sizeof path);
        assert_true(file_exists(path));
        sits_kv_offload_stats_t st;
        sits_kv_offload_get_stats(o, &st);
        assert_int_equal(st.puts[SITS_KV_TIER_DISK], 1);
        assert_true(st.used[SITS_KV_TIER_DISK] > 0);
        unsigned char *back = malloc(n);
        assert_int_equal(sits_kv_offload_take(o, 2, back, n, &t), SITS_OK);
        assert_int_equal(t, SITS_KV_TIER_DISK);
        assert_memory_equal(back, b, n);
        assert_false(file_exists(path));   /* removed once taken */
        /* drop and destroy remove files too */
        assert_int_equal(sits_kv_offload_put(o, 3, b, n, &t, NULL), SITS_OK);
        assert_int_equal(t, SITS_KV_TIER_DISK);
        sits_kv_offload_path(o, 3, path, sizeof path);
        assert_true(file_exists(path));
        sits_kv_offload_drop(o, 3);
        assert_false(file_exists(path));
        assert_int_equal(sits_kv_offload_put(o, 4, b, n, &t, NULL), SITS_OK);
        sits_kv_offload_path(o, 4, path, sizeof path);
        assert_true(file_exists(path));
        assert_int_equal(sits_kv_offload_take(o, 1, back, n, &t), SITS_OK);
        assert_memory_equal(back, a, n);
        sits_kv_offload_destroy(o);
        assert_false(file_exists(path));
        free(back);
        free(a);
        free(b);
    }
}

/* flip one byte at off of the file (or truncate it to off when trunc) */
static void damage(const char *path, long off, int trunc)
{
    if (trunc) {
        assert_int_equal(truncate(path, off), 0);
        return;
    }
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, off, SEEK_SET), 0);
    int c = fgetc(f);
    assert_int_equal(fseek(f, off, SEEK_SET), 0);
    fputc(c ^ 0x40, f);
    fclose(f);
}

static void test_corrupt_files(void **state)
{
    const size_t n = 2 * 65536 + 100;
    struct { long off; int trunc; const char *what; } cases[] = {
        { 0, 0, "magic" },       { 16, 0, "raw size" },       { 61, 0, "header crc" },
        { 64 + 5, 0, "payload" }, { 64 + (long)n - 1, 0, "last byte" }, { 64 + 100, 1, "truncated" },
        { 10, 1, "truncated header" },
    };
    for (int lz4 = 0; lz4 <= 1; lz4++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            sits_kv_offload_t *o = make(0, tmpdir, lz4 ? SITS_KV_LZ4_ON : SITS_KV_LZ4_OFF, 1);
            unsigned char *a = make_data(n, 1, 20 + c), *back = malloc(n);
            memset(back, 0x5a, n);
            assert_int_equal(sits_kv_offload_put(o, 5, a, n, NULL, NULL), SITS_OK);
            char path[4200];
            sits_kv_offload_path(o, 5, path, sizeof path);
            struct stat sb;
            assert_int_equal(stat(path, &sb), 0);
            long off = cases[c].off < sb.st_size ? cases[c].off : (long)sb.st_size - 1;
            damage(path, off, cases[c].trunc);
            sits_status_t st = sits_kv_offload_take(o, 5, back, n, NULL);
            if (st == SITS_OK) fail_msg("corruption '%s' (lz4 %d) not detected", cases[c].what, lz4);
            assert_false(sits_kv_offload_holds(o, 5));
            assert_false(file_exists(path));
            sits_kv_offload_stats_t s;
            sits_kv_offload_get_stats(o, &s);
            assert_int_equal(s.failures, 1);
            free(a);
            free(back);
            sits_kv_offload_destroy(o);
        }
    /* a missing file */
    sits_kv_offload_t *o = make(0, tmpdir, SITS_KV_LZ4_OFF, 1);
    unsigned char *a = make_data(1000, 0, 30), *back = malloc(1000);
    assert_int_equal(sits_kv_offload_put(o, 6, a, 1000, NULL, NULL), SITS_OK);
    char path[4200];
    sits_kv_offload_path(o, 6, path, sizeof path);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(sits_kv_offload_take(o, 6, back, 1000, NULL), SITS_ERR_IO);
    assert_false(sits_kv_offload_holds(o, 6));
    free(a);
    free(back);
    sits_kv_offload_destroy(o);
}

static void test_unusable(void **state)
{
    /* a path under a regular file cannot be a directory: the disk tier is left out */
    char file[300], dir[400];
    snprintf(file, sizeof file, "%s-file", tmpdir);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(dir, sizeof dir, "%s/sub", file);
    sits_kv_offload_t *o = make(0, dir, SITS_KV_LZ4_OFF, 1);
    sits_kv_offload_stats_t st;
    sits_kv_offload_get_stats(o, &st);
    assert_int_equal(st.disk, 0);
    unsigned char d[100] = { 0 };
    assert_int_equal(sits_kv_offload_put(o, 1, d, sizeof d, NULL, NULL), SITS_ERR_BUSY);
    sits_kv_offload_destroy(o);
    unlink(file);
    /* a bad mode; the mode parser */
    sits_kv_offload_params_t p = { .lz4 = (sits_kv_lz4_mode_t)7 };
    assert_int_equal(sits_kv_offload_create(&p, &o), SITS_ERR_INVALID);
    sits_kv_lz4_mode_t m;
    assert_int_equal(sits_kv_lz4_mode_parse("auto", &m), SITS_OK);
    assert_int_equal(m, SITS_KV_LZ4_AUTO);
    assert_int_equal(sits_kv_lz4_mode_parse("on", &m), SITS_OK);
    assert_int_equal(m, SITS_KV_LZ4_ON);
    assert_int_equal(sits_kv_lz4_mode_parse("off", &m), SITS_OK);
    assert_int_equal(m, SITS_KV_LZ4_OFF);
    assert_int_equal(sits_kv_lz4_mode_parse("maybe", &m), SITS_ERR_INVALID);
}

static void test_auto(void **state)
{
    /* auto decides at the first put (either way is legitimate, it depends on the machine) and keeps it */
    sits_kv_offload_t *o = make(1 << 24, NULL, SITS_KV_LZ4_AUTO, 1);
    sits_kv_offload_stats_t st;
    sits_kv_offload_get_stats(o, &st);
    assert_int_equal(st.codec, -1);
    unsigned char *z = make_data(1 << 18, 1, 40);
    round_trip(o, 1, z, 1 << 18, SITS_KV_TIER_HOST);
    sits_kv_offload_get_stats(o, &st);
    assert_true(st.codec == 0 || st.codec == 1);
    int c = st.codec;
    round_trip(o, 2, z, 1000, SITS_KV_TIER_HOST);
    sits_kv_offload_get_stats(o, &st);
    assert_int_equal(st.codec, c);
    free(z);
    sits_kv_offload_destroy(o);
}

/* slot 1 on the host tier, slot 2 on the disk tier of a store of the given codec */
static void test_prefetch(void **state)
{
    const size_t n = 3 * 65536 + 777;
    for (int lz4 = 0; lz4 <= 1; lz4++) {
        sits_kv_offload_t *o = make(n + 64, tmpdir, lz4 ? SITS_KV_LZ4_ON : SITS_KV_LZ4_OFF, 2);
        unsigned char *a = make_data(n, 1, 50 + lz4), *b = make_data(n, 0, 60 + lz4);
        sits_kv_tier_t t;
        assert_int_equal(sits_kv_offload_put(o, 1, a, n, &t, NULL), SITS_OK);
        assert_int_equal(t, SITS_KV_TIER_HOST);
        assert_int_equal(sits_kv_offload_put(o, 2, b, n, &t, NULL), SITS_OK);
        assert_int_equal(t, SITS_KV_TIER_DISK);
        char path[4200];
        sits_kv_offload_path(o, 2, path, sizeof path);
        /* both prefetched (the second joins the first); twice is a no-op; an unknown slot is refused */
        assert_int_equal(sits_kv_offload_prefetch(o, 1), SITS_OK);
        assert_int_equal(sits_kv_offload_prefetch(o, 2), SITS_OK);
        assert_int_equal(sits_kv_offload_prefetch(o, 2), SITS_OK);
        assert_int_equal(sits_kv_offload_prefetch(o, 99), SITS_ERR_NOT_FOUND);
        assert_true(sits_kv_offload_holds(o, 1) && sits_kv_offload_holds(o, 2));
        /* the disk slot's bytes are in memory now: its file is not read again */
        assert_true(file_exists(path));
        assert_int_equal(unlink(path), 0);
        const void *p = NULL;
        assert_int_equal(sits_kv_offload_take_buf(o, 2, n, &p, &t), SITS_OK);
        assert_int_equal(t, SITS_KV_TIER_DISK);
        assert_memory_equal(p, b, n);
        assert_false(sits_kv_offload_holds(o, 2));
        unsigned char *back = malloc(n);
        assert_int_equal(sits_kv_offload_take(o, 1, back, n, &t), SITS_OK);   /* the copying take of a prefetch */
        assert_int_equal(t, SITS_KV_TIER_HOST);
        assert_memory_equal(back, a, n);
        /* take_buf without a prefetch: the staging buffer */
        assert_int_equal(sits_kv_offload_put(o, 3, b, n, &t, NULL), SITS_OK);
        assert_int_equal(t, SITS_KV_TIER_HOST);
        void *stage = NULL;
        assert_int_equal(sits_kv_offload_staging(o, n, &stage), SITS_OK);
        assert_int_equal(sits_kv_offload_take_buf(o, 3, n, &p, &t), SITS_OK);
        assert_ptr_equal(p, stage);
        assert_memory_equal(p, b, n);
        /* a prefetched slot asked with the wrong size: refused and released, as a synchronous take */
        assert_int_equal(sits_kv_offload_put(o, 4, a, n, NULL, NULL), SITS_OK);
        assert_int_equal(sits_kv_offload_prefetch(o, 4), SITS_OK);
        assert_int_equal(sits_kv_offload_take_buf(o, 4, n - 1, &p, NULL), SITS_ERR_INVALID);
        assert_false(sits_kv_offload_holds(o, 4));
        /* a prefetch reuses the spare buffer: many rounds, each bytes exact */
        for (int i = 0; i < 5; i++) {
            assert_int_equal(sits_kv_offload_put(o, 10 + i, i % 2 ? a : b, n, &t, NULL), SITS_OK);
            assert_int_equal(sits_kv_offload_prefetch(o, 10 + i), SITS_OK);
            assert_int_equal(sits_kv_offload_take_buf(o, 10 + i, n, &p, NULL), SITS_OK);
            assert_memory_equal(p, i % 2 ? a : b, n);
        }
        /* drop of a prefetched slot (host and disk) frees it and removes its file; destroy of one too */
        assert_int_equal(sits_kv_offload_put(o, 5, a, n, &t, NULL), SITS_OK);
        assert_int_equal(sits_kv_offload_put(o, 6, b, n, &t, NULL), SITS_OK);
        assert_int_equal(t, SITS_KV_TIER_DISK);
        sits_kv_offload_path(o, 6, path, sizeof path);
        assert_int_equal(sits_kv_offload_prefetch(o, 5), SITS_OK);
        sits_kv_offload_drop(o, 5);
        assert_int_equal(sits_kv_offload_prefetch(o, 6), SITS_OK);
        sits_kv_offload_drop(o, 6);
        assert_false(file_exists(path));
        assert_int_equal(sits_kv_offload_put(o, 7, b, n, &t, NULL), SITS_OK);
        assert_int_equal(sits_kv_offload_put(o, 8, b, n, &t, NULL), SITS_OK);
        sits_kv_offload_path(o, 8, path, sizeof path);
        assert_int_equal(sits_kv_offload_prefetch(o, 7), SITS_OK);
        assert_int_equal(sits_kv_offload_prefetch(o, 8), SITS_OK);
        sits_kv_offload_stats_t st;
        sits_kv_offload_get_stats(o, &st);
        assert_int_equal(st.prefetches, 12);   /* a second prefetch of a slot is not one */
        assert_int_equal(st.prefetch_takes, 7);   /* the wrong-size take is not served */
        assert_int_equal(st.failures, 1);
        assert_int_equal(st.gets[SITS_KV_TIER_DISK], 1);
        assert_int_equal(st.gets[SITS_KV_TIER_HOST], 7);
        assert_true(st.prefetch_work_s > 0);
        sits_kv_offload_destroy(o);   /* slot 8 may still be prefetching */
        assert_false(file_exists(path));
        free(back);
        free(a);
        free(b);
    }
}

/* a damaged or missing disk file found by the prefetch: the take returns the synchronous take's status */
static void test_prefetch_corrupt(void **state)
{
    const size_t n = 2 * 65536 + 100;
    struct { long off; int trunc; int unlink; } cases[] = {
        { 0, 0, 0 }, { 16, 0, 0 }, { 64 + 5, 0, 0 }, { 64 + 100, 1, 0 }, { 0, 0, 1 },
    };
    for (int lz4 = 0; lz4 <= 1; lz4++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            sits_status_t want = SITS_OK, got = SITS_OK;
            for (int pf = 0; pf <= 1; pf++) {
                sits_kv_offload_t *o = make(0, tmpdir, lz4 ? SITS_KV_LZ4_ON : SITS_KV_LZ4_OFF, 1);
                unsigned char *a = make_data(n, 1, 70 + c);
                assert_int_equal(sits_kv_offload_put(o, 5, a, n, NULL, NULL), SITS_OK);
                char path[4200];
                sits_kv_offload_path(o, 5, path, sizeof path);
                if (cases[c].unlink) assert_int_equal(unlink(path), 0);
                else damage(path, cases[c].off, cases[c].trunc);
                if (pf) assert_int_equal(sits_kv_offload_prefetch(o, 5), SITS_OK);
                const void *p = NULL;
                sits_status_t st = sits_kv_offload_take_buf(o, 5, n, &p, NULL);
                if (pf) got = st;
                else want = st;
                assert_false(sits_kv_offload_holds(o, 5));
                assert_false(file_exists(path));
                sits_kv_offload_stats_t s;
                sits_kv_offload_get_stats(o, &s);
                assert_int_equal(s.failures, 1);
                assert_int_equal(s.prefetch_takes, (uint64_t)pf);
                free(a);
                sits_kv_offload_destroy(o);
            }
            if (want == SITS_OK) fail_msg("case %zu (lz4 %d): damage not detected", c, lz4);
            assert_int_equal(got, want);
        }
}

int main(void)
{
    sits_log_init(-1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_tier),
        cmocka_unit_test(test_lz4),
        cmocka_unit_test(test_disk_spill),
        cmocka_unit_test(test_corrupt_files),
        cmocka_unit_test(test_unusable),
        cmocka_unit_test(test_auto),
        cmocka_unit_test(test_prefetch),
        cmocka_unit_test(test_prefetch_corrupt),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir) ? 1 : 0;
}
