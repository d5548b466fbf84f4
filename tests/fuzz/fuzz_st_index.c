/* fuzz_st_index.c -- libFuzzer target: model.safetensors.index.json parsing through sits_st_open_dir.
 * A private directory (created once) holds two small valid shards, a.safetensors (tensors x, y) and
 * b.safetensors (tensor z); each input is written as the index file and the directory opened. On
 * success every tensor the index lists must be found, in the file the index names. Paths that try to
 * leave the directory ("../", "/") must be refused (the index names plain file names only). */
#include "fuzz_common.h"
#include "model/safetensors.h"
#include <unistd.h>
#include <sys/stat.h>

static char g_dir[256];
static char g_index[320];

static void write_file(const char *dir, const char *name, const void *p, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n) { fprintf(stderr, "fuzz: cannot write %s\n", path); exit(2); }
    fclose(f);
}

static void write_shard(const char *name, const char *header, size_t data_bytes)
{
    unsigned char buf[512];
    uint64_t hl = strlen(header);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(hl >> (8 * i));
    memcpy(buf + 8, header, hl);
    for (size_t i = 0; i < data_bytes; i++) buf[8 + hl + i] = (unsigned char)i;
    write_file(g_dir, name, buf, 8 + hl + data_bytes);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    fuzz_log_quiet();
    snprintf(g_dir, sizeof g_dir, "/tmp/sits-fuzz-index-%d", (int)getpid());
    mkdir(g_dir, 0700);
    write_shard("a.safetensors", "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                                 "\"y\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[8,16]}}", 16);
    write_shard("b.safetensors", "{\"z\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[0,6]}}", 6);
    snprintf(g_index, sizeof g_index, "%s/model.safetensors.index.json", g_dir);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FILE *f = fopen(g_index, "wb");
    if (!f) return 0;
    if (size) fwrite(data, 1, size, f);
    fclose(f);
    sits_st_t *st = NULL;
    if (sits_st_open_dir(g_dir, &st) == SITS_OK) {
        size_t n = sits_st_count(st);
        FUZZ_ASSERT(n <= 3);
        for (size_t i = 0; i < n; i++) {
            const sits_st_tensor_t *t = sits_st_at(st, i);
            FUZZ_ASSERT(t && t->name && t->file);
            FUZZ_ASSERT(strncmp(t->file, g_dir, strlen(g_dir)) == 0);
            FUZZ_ASSERT(strstr(t->file + strlen(g_dir), "..") == NULL);
            const char *base = strrchr(t->file, '/');
            base = base ? base + 1 : t->file;
            if (!strcmp(t->name, "z")) FUZZ_ASSERT(!strcmp(base, "b.safetensors"));
            else FUZZ_ASSERT(!strcmp(base, "a.safetensors"));
            if (t->nbytes) { volatile unsigned char x = ((const unsigned char *)t->data)[t->nbytes - 1]; (void)x; }
        }
        sits_st_close(st);
    }
    return 0;
}
