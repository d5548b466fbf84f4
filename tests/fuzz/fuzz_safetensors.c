/* fuzz_safetensors.c -- libFuzzer target: sits_st_parse on one safetensors file image (u64 header
 * length + JSON header + data). The input is copied into an exact-size heap buffer so ASan sees any
 * read past its end. On success every tensor must lie inside the data area, have nbytes ==
 * prod(shape) * dtype size, and no two tensors may overlap (the documented contract). */
#include "fuzz_common.h"
#include "model/safetensors.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    fuzz_log_quiet();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    unsigned char *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    sits_st_t *st = NULL;
    if (sits_st_parse(buf, size, "fuzz", &st) == SITS_OK) {
        size_t n = sits_st_count(st);
        for (size_t i = 0; i < n; i++) {
            const sits_st_tensor_t *t = sits_st_at(st, i);
            FUZZ_ASSERT(t && t->name);
            FUZZ_ASSERT(t->ndim >= 0 && t->ndim <= SITS_ST_MAX_DIMS);
            uint64_t elems = 1;
            for (int d = 0; d < t->ndim; d++) { FUZZ_ASSERT(t->shape[d] >= 0); elems *= (uint64_t)t->shape[d]; }
            FUZZ_ASSERT(elems * sits_dtype_size(t->dtype) == t->nbytes);
            const unsigned char *p = t->data;
            FUZZ_ASSERT(p >= buf && p + t->nbytes <= buf + size);
            if (t->nbytes) { volatile unsigned char x = p[0] ^ p[t->nbytes - 1]; (void)x; }
            FUZZ_ASSERT(sits_st_find(st, t->name) == t);
            for (size_t j = i + 1; j < n && j < i + 64; j++) {   /* overlap check, bounded cost */
                const sits_st_tensor_t *u = sits_st_at(st, j);
                const unsigned char *q = u->data;
                if (t->nbytes && u->nbytes) FUZZ_ASSERT(p + t->nbytes <= q || q + u->nbytes <= p);
            }
        }
        (void)sits_st_total_bytes(st);
        sits_st_close(st);
    }
    free(buf);
    return 0;
}
