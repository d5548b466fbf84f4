/* fuzz_gguf.c -- libFuzzer target: sits_gguf_parse on one GGUF file image. The input is copied into
 * an exact-size heap buffer so ASan sees any read past its end. On success (the documented
 * contract): every tensor lies inside the image with nbytes matching its shape and type, no two
 * overlap, names and keys are found again; every string value and string-array element lies inside
 * the image; supported tensors dequantise without touching anything outside their bytes; the HF
 * name map and the q/k un-permutation accept whatever names and shapes come through. */
#include "fuzz_common.h"
#include "model/gguf.h"

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
    sits_gguf_t *g = NULL;
    if (sits_gguf_parse(buf, size, "fuzz", &g) == SITS_OK) {
        for (size_t i = 0; i < sits_gguf_kv_count(g); i++) {
            const sits_gguf_kv_t *kv = sits_gguf_kv_at(g, i);
            FUZZ_ASSERT(kv && kv->key && sits_gguf_kv_find(g, kv->key) == kv);
            for (uint64_t j = 0; j < kv->n && j < 64; j++) {
                const char *s;
                size_t l;
                int64_t x;
                double d;
                if (sits_gguf_kv_get_str(g, kv, j, &s, &l) == SITS_OK) {
                    FUZZ_ASSERT((const unsigned char *)s >= buf && (const unsigned char *)s + l <= buf + size);
                    if (l) { volatile char c = s[0] ^ s[l - 1]; (void)c; }
                }
                (void)sits_gguf_kv_get_i64(kv, j, &x);
                (void)sits_gguf_kv_get_f64(kv, j, &d);
            }
        }
        size_t n = sits_gguf_tensor_count(g);
        for (size_t i = 0; i < n; i++) {
            const sits_gguf_tensor_t *t = sits_gguf_tensor_at(g, i);
            FUZZ_ASSERT(t && t->name && sits_gguf_tensor_find(g, t->name) == t);
            const unsigned char *p = t->data;
            FUZZ_ASSERT(p >= buf && p + t->nbytes <= buf + size);
            for (size_t j = i + 1; j < n && j < i + 64; j++) {
                const sits_gguf_tensor_t *u = sits_gguf_tensor_at(g, j);
                const unsigned char *q = u->data;
                if (t->nbytes && u->nbytes) FUZZ_ASSERT(p + t->nbytes <= q || q + u->nbytes <= p);
            }
            uint64_t numel = sits_gguf_tensor_numel(t);
            char hf[320];
            (void)sits_gguf_hf_name(t->name, hf, sizeof hf);
            if (!sits_ggml_type_supported(t->ggml_type) || numel > (1u << 20)) continue;
            float *out = malloc(numel ? numel * sizeof *out : 1), *tmp = malloc(numel ? numel * sizeof *tmp : 1);
            if (out && tmp && sits_gguf_dequantize(g, t, out) == SITS_OK && t->ndim == 2)
                (void)sits_gguf_unpermute_qk(out, t->ne[1], t->ne[0], 1 + (int64_t)(t->ne[1] % 7), tmp);
            free(out);
            free(tmp);
        }
        sits_gguf_close(g);
    }
    free(buf);
    return 0;
}
