/* offload.c -- the host and disk KV offload tiers of one rank; see offload.h for the contract and
 * the file format. Slots sit in a small array (a rank holds at most a few hundred swapped
 * sequences; lookups are linear).
 * Prefetch: at most one background thread per store (pf_running); settle() joins it at the top of
 * every public call, so the thread may use the store (records, scratch buffer, warning count)
 * without a lock. Prefetch buffers are host buffers (pinned when the backend can); a released one
 * becomes the store's spare (the largest is kept) so that a rank does not pin memory per restore. */
#include "kv/offload.h"
#include "util/le.h"
#include "kv/shard.h"
#include "util/log.h"

#include <errno.h>
#include <fcntl.h>
#include <lz4.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define FB SITS_KV_OFFLOAD_FRAME_BYTES
#define RAW_FRAME 0x80000000u            /* csize flag: the frame is stored raw */
#define MAX_WARNINGS 20                  /* warnings per store before they go to DEBUG */
#define PAR_FRAMES 16                    /* fewer frames than this: one thread (a parallel region costs more) */

typedef struct {
    unsigned char *p;                    /* NULL: none */
    size_t cap;
    int pinned;                          /* from be->ops->host_alloc */
} hbuf_t;

typedef struct {
    int32_t slot;
    sits_kv_tier_t tier;
    int codec;                           /* 0 none, 1 lz4 */
    size_t raw, stored;
    unsigned char *data;                 /* host tier: the stored bytes */
    hbuf_t pf;                           /* prefetched: the raw bytes [raw] (valid once joined, when pf_st is OK) */
    sits_status_t pf_st;                 /* the prefetch's outcome */
} rec_t;

struct sits_kv_offload {
    sits_kv_offload_params_t p;
    char *dir;                           /* NULL: no disk tier */
    int codec;                           /* 0, 1; -1 auto undecided */
    rec_t *rec;
    int n_rec, cap_rec;
    void *staging;
    size_t staging_cap;
    int staging_pinned;
    unsigned char *scratch;              /* lz4 work buffer */
    size_t scratch_cap;
    int n_warn;
    sits_kv_offload_stats_t st;
    /* prefetch */
    pthread_t pf_thread;
    int pf_running;                      /* pf_thread started, not joined yet */
    int32_t pf_slot;                     /* the slot it works on */
    hbuf_t lent;                         /* take_buf's prefetched buffer, valid until the next call */
    hbuf_t spare;                        /* a released prefetch buffer kept for the next prefetch */
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define WARN_LIMITED(o_, ...) do { \
    if ((o_)->n_warn++ < MAX_WARNINGS) SITS_WARN(SITS_SUB_KV, __VA_ARGS__); else SITS_DEBUG(SITS_SUB_KV, __VA_ARGS__); \
} while (0)

sits_status_t sits_kv_lz4_mode_parse(const char *s, sits_kv_lz4_mode_t *mode_p)
{
    if (!s || !strcmp(s, "auto")) *mode_p = SITS_KV_LZ4_AUTO;
    else if (!strcmp(s, "on") || !strcmp(s, "1")) *mode_p = SITS_KV_LZ4_ON;
    else if (!strcmp(s, "off") || !strcmp(s, "0")) *mode_p = SITS_KV_LZ4_OFF;
    else return SITS_ERR_INVALID;
    return SITS_OK;
}

void sits_kv_offload_path(const sits_kv_offload_t *o, int32_t slot, char *buf, size_t len)
{
    snprintf(buf, len, "%s/sits-kv-%ld-r%d-s%d.bin", o->dir ? o->dir : ".", (long)getpid(), o->p.rank, (int)slot);
}

/* mkdir -p of dir, then a probe file: the disk tier is usable when both work. */
static int disk_usable(const char *dir, int rank)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", dir);
    for (char *c = tmp + 1; *c; c++)
        if (*c == '/') {
            *c = 0;
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return 0;
            *c = '/';
        }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) {
        SITS_WARN(SITS_SUB_KV, "kv offload: cannot create %s: %s", dir, strerror(errno));
        return 0;
    }
    snprintf(tmp, sizeof tmp, "%s/.sits-kv-probe-%ld-r%d", dir, (long)getpid(), rank);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        SITS_WARN(SITS_SUB_KV, "kv offload: cannot write in %s: %s", dir, strerror(errno));
        return 0;
    }
    close(fd);
    unlink(tmp);
    return 1;
}

size_t sits_kv_host_mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    if (f) fclose(f);
    if (kb) return (size_t)kb * 1024;
    long pages = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    return pages > 0 && psz > 0 ? (size_t)pages * (size_t)psz : 0;
}

sits_status_t sits_kv_offload_create(const sits_kv_offload_params_t *p, sits_kv_offload_t **o_p)
{
    if ((unsigned)p->lz4 > SITS_KV_LZ4_AUTO) return SITS_ERR_INVALID;
    sits_kv_offload_t *o = calloc(1, sizeof *o);
    if (!o) return SITS_ERR_NOMEM;
    o->p = *p;
    o->p.dir = NULL;
    size_t avail = sits_kv_host_mem_available();
    if (p->cap_to_free_ram && avail > 0 && o->p.host_bytes > avail / 2) {
        SITS_INFO(SITS_SUB_KV, "kv offload: host tier capped to half of the available memory: %.2f GiB (asked %.2f GiB)",
                  (double)(avail / 2) / (1u << 30), (double)p->host_bytes / (1u << 30));
        o->p.host_bytes = avail / 2;
    }
    o->codec = p->lz4 == SITS_KV_LZ4_AUTO ? -1 : p->lz4 == SITS_KV_LZ4_ON;
    if (p->dir && p->dir[0]) {
        if (disk_usable(p->dir, p->rank)) {
            o->dir = strdup(p->dir);
            if (!o->dir) {
                free(o);
                return SITS_ERR_NOMEM;
            }
        } else {
            SITS_WARN(SITS_SUB_KV, "kv offload: disk tier %s left out; swaps beyond the host tier fall back to recompute",
                      p->dir);
        }
    }
    o->st.codec = o->codec;
    o->st.host_cap = o->p.host_bytes;
    o->st.disk = o->dir != NULL;
    *o_p = o;
    return SITS_OK;
}

/* ---- host buffers, prefetch thread join ---- */

static sits_status_t hbuf_alloc(sits_kv_offload_t *o, size_t n, hbuf_t *b)
{
    b->pinned = 0;
    b->cap = n ? n : 1;
    void *p = NULL;
    if (o->p.be && o->p.be->ops->host_alloc && o->p.be->ops->host_alloc(o->p.be, b->cap, &p) == SITS_OK) b->pinned = 1;
    else if (!(p = malloc(b->cap))) return SITS_ERR_NOMEM;
    b->p = p;
    return SITS_OK;
}

static void hbuf_free(sits_kv_offload_t *o, hbuf_t *b)
{
    if (b->p) {
        if (b->pinned) o->p.be->ops->host_free(o->p.be, b->p);
        else free(b->p);
    }
    *b = (hbuf_t){ 0 };
}

/* b is no longer needed: it becomes the spare when larger than the one kept. */
static void hbuf_release(sits_kv_offload_t *o, hbuf_t *b)
{
    if (!b->p) return;
    if (b->cap > o->spare.cap) {
        hbuf_free(o, &o->spare);
        o->spare = *b;
        *b = (hbuf_t){ 0 };
    } else {
        hbuf_free(o, b);
    }
}

/* Top of every public call: wait for a running prefetch; take_buf's lent buffer expires. */
static void settle(sits_kv_offload_t *o)
{
    if (o->pf_running) {
        double t0 = now_s();
        pthread_join(o->pf_thread, NULL);
        o->st.prefetch_wait_s += now_s() - t0;
        o->pf_running = 0;
    }
    hbuf_release(o, &o->lent);
}

static void rec_free(sits_kv_offload_t *o, rec_t *r)
{
    if (r->tier == SITS_KV_TIER_DISK) {
        char path[4200];
        sits_kv_offload_path(o, r->slot, path, sizeof path);
        unlink(path);
    }
    free(r->data);
    hbuf_release(o, &r->pf);
    o->st.used[r->tier] -= r->stored;
    o->st.slots--;
}

void sits_kv_offload_destroy(sits_kv_offload_t *o)
{
    if (!o) return;
    settle(o);
    if (o->st.prefetches > 0)
        SITS_INFO(SITS_SUB_KV, "kv offload: %llu prefetches (%llu taken), %.3f s of tier work overlapped, %.3f s waited for",
                  (unsigned long long)o->st.prefetches, (unsigned long long)o->st.prefetch_takes, o->st.prefetch_work_s,
                  o->st.prefetch_wait_s);
    for (int i = 0; i < o->n_rec; i++) rec_free(o, &o->rec[i]);
    free(o->rec);
    hbuf_free(o, &o->lent);
    hbuf_free(o, &o->spare);
    if (o->staging) {
        if (o->staging_pinned) o->p.be->ops->host_free(o->p.be, o->staging);
        else free(o->staging);
    }
    free(o->scratch);
    free(o->dir);
    free(o);
}

static sits_status_t staging_get(sits_kv_offload_t *o, size_t n, void **buf_p)
{
    if (n > o->staging_cap) {
        if (o->staging) {
            if (o->staging_pinned) o->p.be->ops->host_free(o->p.be, o->staging);
            else free(o->staging);
            o->staging = NULL;
            o->staging_cap = 0;
        }
        size_t cap = n + n / 4;   /* room for a somewhat longer sequence next time */
        o->staging_pinned = 0;
        if (o->p.be && o->p.be->ops->host_alloc && o->p.be->ops->host_alloc(o->p.be, cap, &o->staging) == SITS_OK)
            o->staging_pinned = 1;
        else if (!(o->staging = malloc(cap))) return SITS_ERR_NOMEM;
        o->staging_cap = cap;
    }
    *buf_p = o->staging;
    return SITS_OK;
}

sits_status_t sits_kv_offload_staging(sits_kv_offload_t *o, size_t n, void **buf_p)
{
    settle(o);
    return staging_get(o, n, buf_p);
}

static rec_t *find(const sits_kv_offload_t *o, int32_t slot)
{
    for (int i = 0; i < o->n_rec; i++) if (o->rec[i].slot == slot) return &o->rec[i];
    return NULL;
}

int sits_kv_offload_holds(sits_kv_offload_t *o, int32_t slot)
{
    settle(o);
    return find(o, slot) != NULL;
}

static void rec_remove(sits_kv_offload_t *o, rec_t *r)
{
    rec_free(o, r);
    *r = o->rec[--o->n_rec];
}

void sits_kv_offload_drop(sits_kv_offload_t *o, int32_t slot)
{
    settle(o);
    rec_t *r = find(o, slot);
    if (r) rec_remove(o, r);
}

void sits_kv_offload_get_stats(sits_kv_offload_t *o, sits_kv_offload_stats_t *stats_p)
{
    settle(o);
    *stats_p = o->st;
}

/* ---- LZ4 frames ---- */

static size_t n_frames(size_t n) { return (n + FB - 1) / FB; }

static sits_status_t scratch_grow(sits_kv_offload_t *o, size_t n)
{
    if (n <= o->scratch_cap) return SITS_OK;
    unsigned char *s = realloc(o->scratch, n);
    if (!s) return SITS_ERR_NOMEM;
    o->scratch = s;
    o->scratch_cap = n;
    return SITS_OK;
}

/* raw[n] -> out (malloc'ed, *stored_p bytes): u32 csize[frames], then the frames. */
static sits_status_t lz4_encode(sits_kv_offload_t *o, const unsigned char *raw, size_t n, unsigned char **out_p,
                                size_t *stored_p)
{
    const long nf = (long)n_frames(n);
    const size_t bound = (size_t)LZ4_compressBound((int)FB);
    SITS_CHECK(scratch_grow(o, (size_t)nf * bound));
    uint32_t *csize = malloc(sizeof(uint32_t) * (size_t)(nf ? nf : 1));
    if (!csize) return SITS_ERR_NOMEM;
    unsigned char *scr = o->scratch;
    int threads = o->p.threads > 1 ? o->p.threads : 1;
    (void)threads;
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(dynamic, 4) if (threads > 1 && nf >= PAR_FRAMES)
#endif
    for (long f = 0; f < nf; f++) {
        size_t off = (size_t)f * FB, len = n - off < FB ? n - off : FB;
        int c = LZ4_compress_default((const char *)raw + off, (char *)scr + (size_t)f * bound, (int)len, (int)bound);
        csize[f] = c > 0 && (size_t)c < len ? (uint32_t)c : (RAW_FRAME | (uint32_t)len);
    }
    size_t total = 4 * (size_t)nf;
    for (long f = 0; f < nf; f++) total += csize[f] & ~RAW_FRAME;
    unsigned char *out = malloc(total ? total : 1), *q = out + 4 * (size_t)nf;
    if (!out) {
        free(csize);
        return SITS_ERR_NOMEM;
    }
    for (long f = 0; f < nf; f++) {
        size_t len = csize[f] & ~RAW_FRAME;
        memcpy(out + 4 * f, &csize[f], 4);
        memcpy(q, csize[f] & RAW_FRAME ? raw + (size_t)f * FB : scr + (size_t)f * bound, len);
        q += len;
    }
    free(csize);
    *out_p = out;
    *stored_p = total;
    return SITS_OK;
}

/* in[stored] -> raw[n], every frame checked to decode to exactly its size. */
static sits_status_t lz4_decode(const sits_kv_offload_t *o, const unsigned char *in, size_t stored, unsigned char *raw,
                                size_t n)
{
    const long nf = (long)n_frames(n);
    if (stored < 4 * (size_t)nf) return SITS_ERR_FORMAT;
    size_t *off = malloc(sizeof(size_t) * (size_t)(nf ? nf : 1));
    if (!off) return SITS_ERR_NOMEM;
    size_t at = 4 * (size_t)nf;
    int ok = 1;
    for (long f = 0; f < nf && ok; f++) {
        uint32_t c;
        memcpy(&c, in + 4 * f, 4);
        size_t want = n - (size_t)f * FB < FB ? n - (size_t)f * FB : FB, len = c & ~RAW_FRAME;
        if ((c & RAW_FRAME) && len != want) ok = 0;
        off[f] = at;
        at += len;
        if (at > stored) ok = 0;
    }
    if (!ok || at != stored) {
        free(off);
        return SITS_ERR_FORMAT;
    }
    int bad = 0, threads = o->p.threads > 1 ? o->p.threads : 1;
    (void)threads;
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(dynamic, 4) reduction(| : bad) if (threads > 1 && nf >= PAR_FRAMES)
#endif
    for (long f = 0; f < nf; f++) {
        uint32_t c;
        memcpy(&c, in + 4 * f, 4);
        size_t want = n - (size_t)f * FB < FB ? n - (size_t)f * FB : FB, len = c & ~RAW_FRAME;
        if (c & RAW_FRAME) memcpy(raw + (size_t)f * FB, in + off[f], len);
        else if (LZ4_decompress_safe((const char *)in + off[f], (char *)raw + (size_t)f * FB, (int)len, (int)want) != (int)want)
            bad |= 1;
    }
    free(off);
    return bad ? SITS_ERR_FORMAT : SITS_OK;
}

/* SITS_KV_LZ4_AUTO: measure on this data and decide once. */
static void decide_codec(sits_kv_offload_t *o, const unsigned char *data, size_t n)
{
    if (o->codec >= 0) return;
    unsigned char *copy = malloc(n ? n : 1), *enc = NULL;
    size_t stored = 0;
    if (!copy) { o->codec = 0; return; }
    int reps = (int)((2u << 20) / (n ? n : 1));   /* about 2 MiB through each path */
    if (reps < 1) reps = 1;
    if (reps > 16) reps = 16;
    double t0 = now_s();
    for (int i = 0; i < reps; i++) memcpy(copy, data, n);
    double t_copy = now_s() - t0;
    t0 = now_s();
    int ok = 1;
    for (int i = 0; i < reps && ok; i++) {
        free(enc);
        enc = NULL;
        ok = lz4_encode(o, data, n, &enc, &stored) == SITS_OK;
    }
    double t_comp = now_s() - t0;
    t0 = now_s();
    for (int i = 0; i < reps && ok; i++) ok = lz4_decode(o, enc, stored, copy, n) == SITS_OK;
    double t_dec = now_s() - t0;
    double gb = (double)n * reps / 1e9;
    sits_kv_codec_perf_t perf = { .ratio = ok && stored ? (double)n / (double)stored : 0,
                                  .compress_gbps = t_comp > 0 ? gb / t_comp : 0, .decompress_gbps = t_dec > 0 ? gb / t_dec : 0 };
    double link = t_copy > 0 ? gb / t_copy : 0;
    o->codec = ok && sits_kv_codec_choose(link, &perf) == SITS_KV_CODEC_LZ4;
    o->st.codec = o->codec;
    SITS_INFO(SITS_SUB_KV, "kv offload: lz4 auto on %zu bytes: ratio %.2f, compress %.2f GB/s, decompress %.2f GB/s vs "
              "host copy %.2f GB/s -> %s", n, perf.ratio, perf.compress_gbps, perf.decompress_gbps, link,
              o->codec ? "lz4" : "none");
    free(enc);
    free(copy);
}

/* ---- disk files ---- */

/* header: 0 u32 magic | 4 u16 version | 6 u16 header bytes | 8 i32 slot | 12 u32 codec | 16 u64 raw |
 * 24 u64 stored | 32 u32 payload crc | 36..59 zero | 60 u32 header crc (of bytes 0..59) */
static void header_write(unsigned char *h, int32_t slot, int codec, size_t raw, size_t stored, uint32_t crc)
{
    memset(h, 0, SITS_KV_OFFLOAD_FILE_HEADER);
    sits_le_put32(h, SITS_KV_OFFLOAD_FILE_MAGIC);
    h[4] = SITS_KV_OFFLOAD_FILE_VERSION;
    h[6] = SITS_KV_OFFLOAD_FILE_HEADER;
    sits_le_put32(h + 8, (uint32_t)slot);
    sits_le_put32(h + 12, (uint32_t)codec);
    sits_le_put64(h + 16, raw);
    sits_le_put64(h + 24, stored);
    sits_le_put32(h + 32, crc);
    sits_le_put32(h + 60, sits_kv_crc32(0, h, 60));
}

static sits_status_t write_all(int fd, const unsigned char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = ENOSPC;
            return SITS_ERR_IO;
        }
        p += w;
        n -= (size_t)w;
    }
    return SITS_OK;
}

static sits_status_t read_all(int fd, unsigned char *p, size_t n)
{
    while (n > 0) {
        ssize_t r = read(fd, p, n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return SITS_ERR_IO;
        if (r == 0) return SITS_ERR_FORMAT;   /* short file */
        p += r;
        n -= (size_t)r;
    }
    return SITS_OK;
}

static sits_status_t disk_write(sits_kv_offload_t *o, int32_t slot, int codec, size_t raw, const unsigned char *stored,
                                size_t n)
{
    char path[4200];
    unsigned char h[SITS_KV_OFFLOAD_FILE_HEADER];
    sits_kv_offload_path(o, slot, path, sizeof path);
    header_write(h, slot, codec, raw, n, sits_kv_crc32(0, stored, n));
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        WARN_LIMITED(o, "kv offload: cannot create %s: %s; the sequence falls back to recompute", path, strerror(errno));
        return SITS_ERR_IO;
    }
    sits_status_t st = write_all(fd, h, sizeof h);
    if (st == SITS_OK) st = write_all(fd, stored, n);
    int e = errno;
    if (close(fd) != 0 && st == SITS_OK) {
        st = SITS_ERR_IO;
        e = errno;
    }
    if (st != SITS_OK) {
        WARN_LIMITED(o, "kv offload: writing %zu bytes to %s failed: %s (disk full?); the sequence falls back to recompute",
                     n + sizeof h, path, strerror(e));
        unlink(path);
    }
    return st;
}

/* Reads and checks the file of r into data[r->raw] (through the scratch buffer when compressed). */
static sits_status_t disk_read(sits_kv_offload_t *o, const rec_t *r, unsigned char *data)
{
    char path[4200];
    unsigned char h[SITS_KV_OFFLOAD_FILE_HEADER];
    sits_kv_offload_path(o, r->slot, path, sizeof path);
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        WARN_LIMITED(o, "kv offload: cannot open %s: %s", path, strerror(errno));
        return SITS_ERR_IO;
    }
    sits_status_t st = read_all(fd, h, sizeof h);
    const char *why = st == SITS_ERR_IO ? strerror(errno) : "short file";
    if (st == SITS_OK) {
        why = "bad header";
        if (sits_le_get32(h) != SITS_KV_OFFLOAD_FILE_MAGIC || h[4] != SITS_KV_OFFLOAD_FILE_VERSION || h[6] != SITS_KV_OFFLOAD_FILE_HEADER ||
            sits_le_get32(h + 60) != sits_kv_crc32(0, h, 60) || (int32_t)sits_le_get32(h + 8) != r->slot ||
            sits_le_get32(h + 12) != (uint32_t)r->codec || sits_le_get64(h + 16) != r->raw || sits_le_get64(h + 24) != r->stored)
            st = SITS_ERR_FORMAT;
    }
    unsigned char *buf = data;
    if (st == SITS_OK && r->codec) {
        st = scratch_grow(o, r->stored);
        buf = o->scratch;
        why = "out of memory";
    }
    if (st == SITS_OK) {
        st = read_all(fd, buf, r->stored);
        why = st == SITS_ERR_IO ? strerror(errno) : "short file";
    }
    if (st == SITS_OK) {
        unsigned char extra;
        ssize_t x = read(fd, &extra, 1);
        if (x != 0) { st = SITS_ERR_FORMAT; why = "trailing bytes"; }
    }
    if (st == SITS_OK && sits_kv_crc32(0, buf, r->stored) != sits_le_get32(h + 32)) {
        st = SITS_ERR_FORMAT;
        why = "checksum mismatch";
    }
    if (st == SITS_OK && r->codec) {
        st = lz4_decode(o, buf, r->stored, data, r->raw);
        why = "lz4 frames do not decode";
    }
    close(fd);
    if (st != SITS_OK)
        WARN_LIMITED(o, "kv offload: %s: %s; the sequence falls back to recompute", path, why);
    return st;
}

/* ---- put / take ---- */

sits_status_t sits_kv_offload_put(sits_kv_offload_t *o, int32_t slot, const void *data_, size_t n, sits_kv_tier_t *tier_p,
                                  size_t *stored_p)
{
    const unsigned char *data = data_;
    settle(o);
    if (find(o, slot)) return SITS_ERR_INVALID;
    if (o->n_rec == o->cap_rec) {
        int cap = o->cap_rec ? 2 * o->cap_rec : 16;
        rec_t *nr = realloc(o->rec, sizeof *nr * (size_t)cap);
        if (!nr) return SITS_ERR_NOMEM;
        o->rec = nr;
        o->cap_rec = cap;
    }
    if (o->codec < 0) decide_codec(o, data, n);
    rec_t r = { .slot = slot, .codec = o->codec, .raw = n };
    unsigned char *enc = NULL;
    sits_status_t st = SITS_OK;
    if (r.codec) {
        st = lz4_encode(o, data, n, &enc, &r.stored);
        if (st != SITS_OK) goto fail;
    } else {
        r.stored = n;
    }
    if (o->p.host_bytes > 0 && o->st.used[SITS_KV_TIER_HOST] + r.stored <= o->p.host_bytes) {
        r.tier = SITS_KV_TIER_HOST;
        if (enc) {
            r.data = enc;
            enc = NULL;
        } else if ((r.data = malloc(n ? n : 1))) {
            memcpy(r.data, data, n);
        } else {
            st = SITS_ERR_NOMEM;
            goto fail;
        }
    } else if (o->dir) {
        r.tier = SITS_KV_TIER_DISK;
        st = disk_write(o, slot, r.codec, n, enc ? enc : data, r.stored);
        if (st != SITS_OK) goto fail;
    } else {
        st = SITS_ERR_BUSY;
        WARN_LIMITED(o, "kv offload: no room for %zu bytes (host tier %zu of %zu bytes used%s); the sequence falls back to "
                     "recompute", r.stored, o->st.used[SITS_KV_TIER_HOST], o->p.host_bytes, o->dir ? "" : ", no disk tier");
        goto fail;
    }
    free(enc);
    o->rec[o->n_rec++] = r;
    o->st.used[r.tier] += r.stored;
    o->st.slots++;
    o->st.puts[r.tier]++;
    o->st.put_raw_bytes[r.tier] += n;
    o->st.put_stored_bytes[r.tier] += r.stored;
    if (tier_p) *tier_p = r.tier;
    if (stored_p) *stored_p = r.stored;
    return SITS_OK;
fail:
    free(enc);
    o->st.failures++;
    return st;
}

/* r's raw bytes, read from its tier and validated, into data[r->raw] (the prefetch thread or a take). */
static sits_status_t tier_read(sits_kv_offload_t *o, const rec_t *r, unsigned char *data)
{
    sits_status_t st = SITS_OK;
    if (r->tier == SITS_KV_TIER_DISK) {
        st = disk_read(o, r, data);
    } else if (r->codec) {
        st = lz4_decode(o, r->data, r->stored, data, r->raw);
        if (st != SITS_OK) WARN_LIMITED(o, "kv offload: slot %d: lz4 frames do not decode", (int)r->slot);
    } else {
        memcpy(data, r->data, r->raw);
    }
    return st;
}

/* Both takes: into data[n], or (data NULL) into the prefetch buffer, lent, or the staging buffer. */
static sits_status_t take(sits_kv_offload_t *o, int32_t slot, void *data, size_t n, const void **data_p,
                          sits_kv_tier_t *tier_p)
{
    settle(o);
    rec_t *r = find(o, slot);
    sits_status_t st = SITS_OK;
    if (!r) {
        WARN_LIMITED(o, "kv offload: slot %d is not held here", (int)slot);
        o->st.failures++;
        return SITS_ERR_NOT_FOUND;
    }
    if (r->raw != n) {
        WARN_LIMITED(o, "kv offload: slot %d holds %zu bytes, %zu asked for", (int)slot, r->raw, n);
        st = SITS_ERR_INVALID;
    } else if (r->pf.p) {
        o->st.prefetch_takes++;
        st = r->pf_st;   /* warned by the prefetch thread */
        if (st == SITS_OK && data) {
            memcpy(data, r->pf.p, n);
        } else if (st == SITS_OK) {
            o->lent = r->pf;
            r->pf = (hbuf_t){ 0 };
            data = o->lent.p;
        }
    } else {
        if (!data) st = staging_get(o, n, &data);
        if (st == SITS_OK) st = tier_read(o, r, data);
    }
    if (tier_p) *tier_p = r->tier;
    if (st == SITS_OK) {
        o->st.gets[r->tier]++;
        o->st.get_raw_bytes[r->tier] += n;
        if (data_p) *data_p = data;
    } else {
        o->st.failures++;
    }
    rec_remove(o, r);
    return st;
}

sits_status_t sits_kv_offload_take(sits_kv_offload_t *o, int32_t slot, void *data, size_t n, sits_kv_tier_t *tier_p)
{
    return take(o, slot, data, n, NULL, tier_p);
}

sits_status_t sits_kv_offload_take_buf(sits_kv_offload_t *o, int32_t slot, size_t n, const void **data_p,
                                       sits_kv_tier_t *tier_p)
{
    return take(o, slot, NULL, n, data_p, tier_p);
}

/* ---- prefetch ---- */

static void *prefetch_main(void *arg)
{
    sits_kv_offload_t *o = arg;
    double t0 = now_s();
    rec_t *r = find(o, o->pf_slot);   /* the main thread changes no record until it joins */
    r->pf_st = tier_read(o, r, r->pf.p);
    o->st.prefetch_work_s += now_s() - t0;
    return NULL;
}

sits_status_t sits_kv_offload_prefetch(sits_kv_offload_t *o, int32_t slot)
{
    settle(o);
    rec_t *r = find(o, slot);
    if (!r) return SITS_ERR_NOT_FOUND;
    if (r->pf.p) return SITS_OK;
    if (o->spare.p && o->spare.cap >= r->raw) {
        r->pf = o->spare;
        o->spare = (hbuf_t){ 0 };
    } else {
        SITS_CHECK(hbuf_alloc(o, r->raw + r->raw / 4, &r->pf));   /* room for a somewhat longer sequence next time */
    }
    r->pf_st = SITS_ERR_INTERNAL;
    o->pf_slot = slot;
    int e = pthread_create(&o->pf_thread, NULL, prefetch_main, o);
    if (e != 0) {
        WARN_LIMITED(o, "kv offload: no prefetch thread for slot %d: %s; restored when taken", (int)slot, strerror(e));
        hbuf_release(o, &r->pf);
        return SITS_ERR_INTERNAL;
    }
    o->pf_running = 1;
    o->st.prefetches++;
    return SITS_OK;
}
