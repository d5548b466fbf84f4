/* test_gguf.c -- the GGUF reader (model/gguf.h) and GGUF model directories (sits_st_open_dir).
 *
 * Reference: tests/unit/data/gguf, written by tests/ref/gen_gguf_fixture.py with gguf-py; the
 * expected values come from transformers' load_gguf_checkpoint (gguf.dequantize, the llama q/k
 * reverse permutation and its name map), so every comparison below is exact (same bits).
 *
 * - metadata of every value type (scalars, arrays of ints / floats / strings) read back;
 * - every tensor's shape, type and data offset as gguf-py reports them; each dequantised (F32,
 *   F16, BF16, Q8_0, Q4_0, Q4_1), q/k un-permuted and renamed, bit-identical to transformers;
 * - a model directory holding the .gguf loads through sits_st_open_dir with HF names/shapes;
 * - a Q6_K tensor is refused naming the type and the tensor;
 * - corrupt images (truncations at every header offset and many data offsets, bad magic,
 *   versions, counts, string lengths, value / ggml types, dims, offsets, duplicates) refused with
 *   a message naming the file and the key / tensor, never a crash (run under ASan too). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <fcntl.h>
#include <jansson.h>
#include <sys/stat.h>

#include "model/gguf.h"
#include "model/safetensors.h"
#include "util/le.h"
#include "util/status.h"
#include "test_model_common.h"

#ifndef SITS_GGUF_DATA_DIR
#error "SITS_GGUF_DATA_DIR must name tests/unit/data/gguf"
#endif
#define TINY SITS_GGUF_DATA_DIR "/tiny.gguf"
#define WHAT "mem.gguf"

static json_t *expected;
static unsigned char *expected_f32;
static size_t expected_len;
static unsigned char *tiny;
static size_t tiny_len;

static int setup(void **state)
{
    json_error_t err;
    expected = json_load_file(SITS_GGUF_DATA_DIR "/expected.json", 0, &err);
    expected_f32 = (unsigned char *)tm_read_file(SITS_GGUF_DATA_DIR "/expected.f32", &expected_len);
    tiny = (unsigned char *)tm_read_file(TINY, &tiny_len);
    if (!expected || !expected_f32 || !tiny) {
        printf("cannot read the fixture in %s (%s)\n", SITS_GGUF_DATA_DIR, err.text);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    json_decref(expected);
    free(expected_f32);
    free(tiny);
    return 0;
}

/* Compare n floats bit for bit; print the first mismatches. Returns the mismatch count. */
static size_t cmp_bits(const char *label, const float *got, const unsigned char *want, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t g, w = sits_le_get32(want + 4 * i);
        memcpy(&g, &got[i], 4);
        if (g != w && bad++ < 5) {
            float wf;
            memcpy(&wf, &w, 4);
            printf("  %s[%zu]: got %.9g (0x%08x) want %.9g (0x%08x)\n", label, i, (double)got[i], g, (double)wf, w);
        }
    }
    if (bad) printf("  %s: %zu of %zu values differ\n", label, bad, n);
    return bad;
}

static void test_metadata(void **state)
{
    sits_gguf_t *g = NULL;
    assert_int_equal(sits_gguf_open(TINY, &g), SITS_OK);
    assert_int_equal(sits_gguf_version(g), 3);
    assert_int_equal(sits_gguf_alignment(g), json_integer_value(json_object_get(expected, "alignment")));
    assert_int_equal(sits_gguf_tensor_count(g), json_integer_value(json_object_get(expected, "tensor_count")));
    assert_int_equal(sits_gguf_kv_count(g), json_integer_value(json_object_get(expected, "kv_count")));
    int n_checked = 0, failed = 0;
    const char *key;
    json_t *m;
    json_object_foreach(json_object_get(expected, "metadata"), key, m) {
        const sits_gguf_kv_t *kv = sits_gguf_kv_find(g, key);
        json_t *vals = json_object_get(m, "values");
        if (!kv || (int)kv->type != json_integer_value(json_object_get(m, "type")) ||
            (int)kv->elem_type != json_integer_value(json_object_get(m, "elem_type")) || kv->n != json_array_size(vals)) {
            printf("  %s: missing or wrong type / count\n", key);
            failed++;
            continue;
        }
        for (size_t i = 0; i < json_array_size(vals); i++) {
            json_t *v = json_array_get(vals, i);
            int ok = 0;
            if (json_is_string(v) && !strncmp(json_string_value(v), "u64:", 4)) {
                /* past int64: the generator writes it as text */
                uint64_t u;
                int64_t x;
                ok = sits_gguf_kv_get_u64(kv, i, &u) == SITS_OK && u == strtoull(json_string_value(v) + 4, NULL, 10) &&
                     sits_gguf_kv_get_i64(kv, i, &x) == SITS_ERR_INVALID;
            } else if (json_is_string(v)) {
                const char *s;
                size_t l;
                ok = sits_gguf_kv_get_str(g, kv, i, &s, &l) == SITS_OK && l == strlen(json_string_value(v)) &&
                     !memcmp(s, json_string_value(v), l);
            } else if (json_is_real(v)) {
                double d;
                ok = sits_gguf_kv_get_f64(kv, i, &d) == SITS_OK && d == json_real_value(v);
            } else if (json_is_boolean(v)) {
                int64_t x;
                ok = sits_gguf_kv_get_i64(kv, i, &x) == SITS_OK && x == json_is_true(v);
            } else {
                int64_t x;
                ok = sits_gguf_kv_get_i64(kv, i, &x) == SITS_OK && x == json_integer_value(v);
            }
            if (!ok) {
                printf("  %s[%zu]: value differs\n", key, i);
                failed++;
            }
            n_checked++;
        }
    }
    /* wrong-type accessors refuse */
    const sits_gguf_kv_t *s = sits_gguf_kv_find(g, "test.str"), *u = sits_gguf_kv_find(g, "test.u8");
    int64_t x;
    const char *p;
    size_t l;
    assert_int_equal(sits_gguf_kv_get_i64(s, 0, &x), SITS_ERR_INVALID);
    assert_int_equal(sits_gguf_kv_get_str(g, u, 0, &p, &l), SITS_ERR_INVALID);
    assert_int_equal(sits_gguf_kv_get_i64(u, 1, &x), SITS_ERR_INVALID);
    assert_null(sits_gguf_kv_find(g, "test.nosuch"));
    printf("%d metadata values checked, %d wrong\n", n_checked, failed);
    assert_true(n_checked >= 20);
    assert_int_equal(failed, 0);
    sits_gguf_close(g);
}

/* Each tensor's info, and its dequantised, un-permuted values vs transformers. */
static void test_tensors(void **state)
{
    sits_gguf_t *g = NULL;
    assert_int_equal(sits_gguf_parse(tiny, tiny_len, WHAT, &g), SITS_OK);
    int64_t heads = json_integer_value(json_object_get(expected, "heads"));
    int64_t kv_heads = json_integer_value(json_object_get(expected, "kv_heads"));
    uint64_t data_start = (uint64_t)json_integer_value(json_object_get(expected, "data_start"));
    size_t i, failed = 0, types_seen = 0;
    json_t *e;
    int seen[64] = { 0 };
    json_array_foreach(json_object_get(expected, "tensors"), i, e) {
        const char *name = json_string_value(json_object_get(e, "gguf_name"));
        const sits_gguf_tensor_t *t = sits_gguf_tensor_find(g, name);
        assert_non_null(t);
        json_t *ne = json_object_get(e, "gguf_ne");
        int ok = t->ndim == (int)json_array_size(ne) && !strcmp(sits_ggml_type_name(t->ggml_type),
                                                                json_string_value(json_object_get(e, "type"))) &&
                 (const unsigned char *)t->data - tiny == json_integer_value(json_object_get(e, "data_offset")) &&
                 t->offset + data_start == (uint64_t)json_integer_value(json_object_get(e, "data_offset"));
        for (int d = 0; ok && d < t->ndim; d++) ok = t->ne[d] == json_integer_value(json_array_get(ne, (size_t)d));
        if (!ok) {
            printf("  %s: info differs from gguf-py's\n", name);
            failed++;
            continue;
        }
        if (!seen[t->ggml_type]++) types_seen++;
        size_t n = (size_t)sits_gguf_tensor_numel(t);
        assert_int_equal(n, json_integer_value(json_object_get(e, "count")));
        float *out = malloc(n * sizeof *out), *tmp = malloc(n * sizeof *tmp);
        assert_int_equal(sits_gguf_dequantize(g, t, out), SITS_OK);
        char hf[256];
        const json_t *want_hf = json_object_get(e, "hf_name");
        sits_status_t hs = sits_gguf_hf_name(name, hf, sizeof hf);
        if (json_is_null(want_hf) ? hs != SITS_ERR_NOT_FOUND : (hs != SITS_OK || strcmp(hf, json_string_value(want_hf)))) {
            printf("  %s: HF name %s, transformers says %s\n", name, hs == SITS_OK ? hf : "(none)",
                   json_is_null(want_hf) ? "(none)" : json_string_value(want_hf));
            failed++;
        }
        if (strstr(name, ".attn_q.") || strstr(name, ".attn_k."))
            assert_int_equal(sits_gguf_unpermute_qk(out, t->ne[1], t->ne[0], strstr(name, ".attn_q.") ? heads : kv_heads,
                                                    tmp), SITS_OK);
        size_t off = (size_t)json_integer_value(json_object_get(e, "offset"));
        assert_true(off + 4 * n <= expected_len);
        failed += cmp_bits(name, out, expected_f32 + off, n) != 0;
        free(out);
        free(tmp);
    }
    printf("%zu tensors of %zu ggml types compared bit for bit with transformers, %zu wrong\n", i, types_seen, failed);
    assert_int_equal(types_seen, 6);
    assert_int_equal(failed, 0);
    assert_null(sits_gguf_tensor_find(g, "blk.9.attn_q.weight"));
    sits_gguf_close(g);
}

static void test_hf_names(void **state)
{
    static const char *const map[][2] = {
        { "token_embd.weight", "model.embed_tokens.weight" }, { "output.weight", "lm_head.weight" },
        { "output_norm.weight", "model.norm.weight" },
        { "blk.0.attn_norm.weight", "model.layers.0.input_layernorm.weight" },
        { "blk.12.attn_q.weight", "model.layers.12.self_attn.q_proj.weight" },
        { "blk.3.attn_k.bias", "model.layers.3.self_attn.k_proj.bias" },
        { "blk.3.attn_v.weight", "model.layers.3.self_attn.v_proj.weight" },
        { "blk.29.attn_output.weight", "model.layers.29.self_attn.o_proj.weight" },
        { "blk.1.ffn_norm.weight", "model.layers.1.post_attention_layernorm.weight" },
        { "blk.1.ffn_gate.weight", "model.layers.1.mlp.gate_proj.weight" },
        { "blk.1.ffn_up.weight", "model.layers.1.mlp.up_proj.weight" },
        { "blk.1.ffn_down.weight", "model.layers.1.mlp.down_proj.weight" },
    };
    static const char *const unmapped[] = { "rope_freqs.weight", "blk.x.attn_q.weight", "blk.0.attn_q",
                                            "blk.0.attn_qq.weight", "blk..attn_q.weight", "output", "blk.0.weight",
                                            "token_embd.scale", "blk.1234567.attn_q.weight", "" };
    char buf[128];
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        assert_int_equal(sits_gguf_hf_name(map[i][0], buf, sizeof buf), SITS_OK);
        assert_string_equal(buf, map[i][1]);
    }
    for (size_t i = 0; i < sizeof unmapped / sizeof unmapped[0]; i++)
        assert_int_equal(sits_gguf_hf_name(unmapped[i], buf, sizeof buf), SITS_ERR_NOT_FOUND);
    assert_int_equal(sits_gguf_hf_name("blk.1.ffn_down.weight", buf, 10), SITS_ERR_INVALID);
    float w[12], tmp[12];
    assert_int_equal(sits_gguf_unpermute_qk(w, 6, 2, 2, tmp), SITS_ERR_INVALID); /* head_dim 3 is odd */
    assert_int_equal(sits_gguf_unpermute_qk(w, 6, 2, 4, tmp), SITS_ERR_INVALID); /* 6 rows, 4 heads */
    /* no columns: nothing to move, at once whatever the row count (fuzz_gguf timed out on this) */
    assert_int_equal(sits_gguf_unpermute_qk(w, (int64_t)1 << 40, 0, 4, tmp), SITS_OK);
}

/* A model directory whose weights are the .gguf: HF names, HF shapes, transformers' values. */
static void test_model_dir(void **state)
{
    char dir[] = "/tmp/test_gguf_XXXXXX", path[512];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/model.gguf", dir);
    assert_int_equal(tm_write_file(path, tiny, tiny_len), 0);
    sits_st_t *st = NULL;
    assert_int_equal(sits_st_open_dir(dir, &st), SITS_OK);
    size_t i, n_hf = 0, failed = 0;
    json_t *e;
    json_array_foreach(json_object_get(expected, "tensors"), i, e) {
        const json_t *hf = json_object_get(e, "hf_name");
        if (json_is_null(hf)) continue;
        n_hf++;
        const sits_st_tensor_t *t = sits_st_find(st, json_string_value(hf));
        json_t *shape = json_object_get(e, "hf_shape");
        int ok = t && t->dtype == SITS_DT_F32 && t->ndim == (int)json_array_size(shape) && !strcmp(t->file, path);
        for (int d = 0; ok && d < t->ndim; d++) ok = t->shape[d] == json_integer_value(json_array_get(shape, (size_t)d));
        size_t n = (size_t)json_integer_value(json_object_get(e, "count"));
        if (!ok || t->nbytes != 4 * n) {
            printf("  %s: missing, or dtype / shape / size / file differ\n", json_string_value(hf));
            failed++;
            continue;
        }
        float *v = malloc(4 * n);
        memcpy(v, t->data, 4 * n);
        failed += cmp_bits(json_string_value(hf), v, expected_f32 + json_integer_value(json_object_get(e, "offset")), n) != 0;
        free(v);
    }
    printf("%zu of %zu HF tensors loaded from the directory as transformers has them, %zu wrong\n", n_hf - failed, n_hf,
           failed);
    assert_int_equal(sits_st_count(st), n_hf);
    assert_null(sits_st_find(st, "rope_freqs.weight"));
    assert_int_equal(failed, 0);
    sits_st_close(st);

    /* two .gguf files: ambiguous */
    char path2[512];
    snprintf(path2, sizeof path2, "%s/other.gguf", dir);
    assert_int_equal(tm_write_file(path2, tiny, tiny_len), 0);
    tm_capture_t cap;
    tm_capture_begin(&cap);
    sits_status_t s = sits_st_open_dir(dir, &st);
    char *log = tm_capture_end(&cap);
    assert_int_equal(s, SITS_ERR_INVALID);
    assert_non_null(strstr(log, "2 *.gguf files"));
    free(log);
    unlink(path2);

    /* a type not read (IQ2_XXS): refused by type and name */
    size_t klen = 0;
    char *k = tm_read_file(SITS_GGUF_DATA_DIR "/kquant.gguf", &klen);
    assert_non_null(k);
    assert_int_equal(tm_write_file(path, k, klen), 0);
    sits_gguf_t *g = NULL;
    assert_int_equal(sits_gguf_parse(k, klen, "kquant.gguf", &g), SITS_OK);
    const sits_gguf_tensor_t *t = sits_gguf_tensor_find(g, "blk.0.ffn_up.weight");
    assert_non_null(t);
    float out[512];
    tm_capture_begin(&cap);
    s = sits_gguf_dequantize(g, t, out);
    log = tm_capture_end(&cap);
    assert_int_equal(s, SITS_ERR_UNSUPPORTED);
    assert_non_null(strstr(log, "IQ2_XXS"));
    assert_non_null(strstr(log, "blk.0.ffn_up.weight"));
    free(log);
    sits_gguf_close(g);
    tm_capture_begin(&cap);
    s = sits_st_open_dir(dir, &st);
    log = tm_capture_end(&cap);
    assert_int_equal(s, SITS_ERR_UNSUPPORTED);
    assert_non_null(strstr(log, "IQ2_XXS"));
    assert_non_null(strstr(log, "blk.0.ffn_up.weight"));
    assert_non_null(strstr(log, path));
    free(log);
    free(k);
    unlink(path);
    rmdir(dir);
}

/* [gguf k-quants] Q5_0, Q5_1 and the K-quants Q2_K .. Q6_K (quants.gguf) against gguf-py's gguf.dequantize, bit for bit */
static void test_quants(void **state)
{
    (void)state;
    size_t glen = 0, flen = 0;
    char *img = tm_read_file(SITS_GGUF_DATA_DIR "/quants.gguf", &glen);
    unsigned char *want = (unsigned char *)tm_read_file(SITS_GGUF_DATA_DIR "/quants.f32", &flen);
    json_error_t jerr;
    json_t *doc = json_load_file(SITS_GGUF_DATA_DIR "/quants.json", 0, &jerr);
    assert_non_null(img);
    assert_non_null(want);
    assert_non_null(doc);
    sits_gguf_t *g = NULL;
    assert_int_equal(sits_gguf_parse(img, glen, "quants.gguf", &g), SITS_OK);
    size_t i, failed = 0;
    json_t *e;
    json_array_foreach(json_object_get(doc, "tensors"), i, e) {
        const char *name = json_string_value(json_object_get(e, "name"));
        const sits_gguf_tensor_t *t = sits_gguf_tensor_find(g, name);
        assert_non_null(t);
        assert_string_equal(sits_ggml_type_name(t->ggml_type), json_string_value(json_object_get(e, "type")));
        assert_true(sits_ggml_type_supported(t->ggml_type));
        size_t n = (size_t)sits_gguf_tensor_numel(t), off = (size_t)json_integer_value(json_object_get(e, "offset"));
        assert_int_equal(n, json_integer_value(json_object_get(e, "count")));
        assert_true(off + 4 * n <= flen);
        float *out = malloc(n * sizeof *out);
        assert_int_equal(sits_gguf_dequantize(g, t, out), SITS_OK);
        size_t bad = cmp_bits(name, out, want + off, n);
        printf("  %s (%s): %zu values, %zu differ from gguf-py\n", name, json_string_value(json_object_get(e, "type")), n, bad);
        failed += bad != 0;
        free(out);
    }
    assert_int_equal(i, 7);
    assert_int_equal(failed, 0);
    sits_gguf_close(g);
    json_decref(doc);
    free(img);
    free(want);
}

static size_t after_str(const unsigned char *buf, size_t len, const char *s);

/* [gguf qwen] qwen2 (q/k/v biases), qwen3 (q/k norms) and [gguf gemma] gemma3 / gemma2 (sandwich norms stored as 1 + w) GGUF
 * directories: every tensor under transformers' name with transformers' values (load_gguf_checkpoint; no q/k permutation
 * in these architectures), bit for bit */
static void test_arch_dirs(void **state)
{
    (void)state;
    static const char *const arch[] = { "qwen2", "qwen3", "gemma3", "gemma2" };
    for (int a = 0; a < 4; a++) {
        char src[512], dir[] = "/tmp/test_gguf_qwen_XXXXXX", path[600];
        size_t glen = 0, flen = 0;
        snprintf(src, sizeof src, "%s/%s.gguf", SITS_GGUF_DATA_DIR, arch[a]);
        char *img = tm_read_file(src, &glen);
        snprintf(src, sizeof src, "%s/%s.f32", SITS_GGUF_DATA_DIR, arch[a]);
        unsigned char *want = (unsigned char *)tm_read_file(src, &flen);
        snprintf(src, sizeof src, "%s/%s.json", SITS_GGUF_DATA_DIR, arch[a]);
        json_error_t jerr;
        json_t *doc = json_load_file(src, 0, &jerr);
        assert_non_null(img);
        assert_non_null(want);
        assert_non_null(doc);
        assert_non_null(mkdtemp(dir));
        snprintf(path, sizeof path, "%s/model.gguf", dir);
        assert_int_equal(tm_write_file(path, img, glen), 0);
        sits_st_t *st = NULL;
        assert_int_equal(sits_st_open_dir(dir, &st), SITS_OK);
        size_t i, failed = 0;
        json_t *e;
        json_array_foreach(json_object_get(doc, "tensors"), i, e) {
            const char *name = json_string_value(json_object_get(e, "hf_name"));
            const sits_st_tensor_t *t = sits_st_find(st, name);
            size_t n = (size_t)json_integer_value(json_object_get(e, "count")), off = (size_t)json_integer_value(json_object_get(e, "offset"));
            if (!t || t->dtype != SITS_DT_F32 || t->nbytes != 4 * n || off + 4 * n > flen) {
                printf("  %s %s: missing, or dtype / size differ\n", arch[a], name);
                failed++;
                continue;
            }
            float *v = malloc(4 * n);
            memcpy(v, t->data, 4 * n);
            failed += cmp_bits(name, v, want + off, n) != 0;
            free(v);
        }
        printf("%s: %zu tensors as transformers loads them, %zu wrong\n", arch[a], i, failed);
        assert_int_equal(sits_st_count(st), i);
        assert_int_equal(failed, 0);
        sits_st_close(st);
        unlink(path);
        rmdir(dir);
        json_decref(doc);
        if (a == 0) {   /* another architecture ("gemma", its string patched in place): refused by name */
            size_t at = after_str((const unsigned char *)img, glen, "general.architecture") + 4 + 8;
            assert_memory_equal(img + at, "qwen2", 5);
            memcpy(img + at, "gemma", 5);
            assert_non_null(mkdtemp(strcpy(dir, "/tmp/test_gguf_qwen_XXXXXX")));
            snprintf(path, sizeof path, "%s/model.gguf", dir);
            assert_int_equal(tm_write_file(path, img, glen), 0);
            tm_capture_t cap;
            tm_capture_begin(&cap);
            sits_status_t s = sits_st_open_dir(dir, &st);
            char *log = tm_capture_end(&cap);
            assert_int_equal(s, SITS_ERR_UNSUPPORTED);
            assert_non_null(strstr(log, "\"gemma\": only llama, qwen2, qwen3, gemma2, gemma3, phi3 and qwen3moe GGUF files can be loaded"));
            free(log);
            unlink(path);
            rmdir(dir);
        }
        free(img);
        free(want);
    }
}

/* ---- corrupt images ---------------------------------------------------------------------------- */

/* Offset just past the GGUF string s (its u64 length prefix must precede it). */
static size_t after_str(const unsigned char *buf, size_t len, const char *s)
{
    size_t l = strlen(s);
    for (size_t i = 8; i + l <= len; i++)
        if (!memcmp(buf + i, s, l) && sits_le_get64(buf + i - 8) == l) return i + l;
    fail_msg("string %s not found in the fixture", s);
    return 0;
}

/* Parse img (len bytes) quietly; returns the status and the log. */
static sits_status_t parse_quiet(const unsigned char *img, size_t len, char **log_p)
{
    sits_gguf_t *g = (sits_gguf_t *)0x1;
    tm_capture_t cap;
    tm_capture_begin(&cap);
    sits_status_t s = sits_gguf_parse(img, len, WHAT, &g);
    char *log = tm_capture_end(&cap);
    if (s == SITS_OK) sits_gguf_close(g);
    else assert_ptr_equal(g, (sits_gguf_t *)0x1); /* outputs set only on success */
    if (log_p) *log_p = log;
    else free(log);
    return s;
}

static void test_truncations(void **state)
{
    uint64_t data_start = (uint64_t)json_integer_value(json_object_get(expected, "data_start"));
    size_t n = 0, failed = 0;
    /* every cut inside the header, then one every 97 bytes through the data; stderr to /dev/null */
    fflush(stderr);
    int saved = dup(2), devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 2);
    for (size_t cut = 0; cut < tiny_len; cut += cut < data_start + 64 ? 1 : 97) {
        unsigned char *img = malloc(cut ? cut : 1); /* exactly cut bytes: ASan sees any over-read */
        memcpy(img, tiny, cut);
        sits_gguf_t *g = NULL;
        sits_status_t s = sits_gguf_parse(img, cut, WHAT, &g);
        if (s == SITS_OK) sits_gguf_close(g);
        if (s != SITS_ERR_FORMAT && failed++ < 5) fprintf(stdout, "  cut at %zu: status %d\n", cut, s);
        free(img);
        n++;
    }
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(devnull);
    char *log;
    assert_int_equal(parse_quiet(tiny, 20, &log), SITS_ERR_FORMAT);
    assert_non_null(strstr(log, WHAT));
    assert_non_null(strstr(log, "truncated"));
    free(log);
    assert_int_equal(parse_quiet(tiny, tiny_len - 1, &log), SITS_ERR_FORMAT);
    assert_non_null(strstr(log, "past the end of the data section"));
    free(log);
    printf("%zu truncated images, %zu not refused as corrupt\n", n, failed);
    assert_true(n > data_start);
    assert_int_equal(failed, 0);
}

typedef struct {
    const char *name;
    const char *anchor;  /* a key or tensor name in the fixture; NULL: from the file start */
    long delta;          /* patch position relative to the end of the anchor string */
    int width;           /* 4 or 8 bytes */
    uint64_t value;
    sits_status_t want;
    const char *msg1, *msg2;
} patch_t;

/* tensor info after the name: u32 n_dims, u64 ne[n_dims], u32 type, u64 offset (2-D tensors) */
#define TI_NDIMS 0
#define TI_NE0 4
#define TI_NE1 12
#define TI_TYPE 20
#define TI_OFFSET 24
static const patch_t patches[] = {
    { "bad magic", NULL, 0, 4, 0x46554746u, SITS_ERR_FORMAT, "bad magic", NULL },
    { "version 1", NULL, 4, 4, 1, SITS_ERR_UNSUPPORTED, "version 1", NULL },
    { "version 4", NULL, 4, 4, 4, SITS_ERR_FORMAT, "version 4", NULL },
    { "version 2^31", NULL, 4, 4, 0x80000000u, SITS_ERR_FORMAT, "version", NULL },
    { "tensor count 2^63", NULL, 8, 8, 1ull << 63, SITS_ERR_FORMAT, "tensor infos cannot fit", NULL },
    { "tensor count +1", NULL, 8, 8, 23, SITS_ERR_FORMAT, NULL, NULL },
    { "kv count 2^64-1", NULL, 16, 8, UINT64_MAX, SITS_ERR_FORMAT, "metadata entries cannot fit", NULL },
    { "kv count 1e6", NULL, 16, 8, 1000000, SITS_ERR_FORMAT, "cannot fit", NULL },
    { "kv count +1", NULL, 16, 8, 30, SITS_ERR_FORMAT, NULL, NULL },
    { "first key length 2^40", NULL, 24, 8, 1ull << 40, SITS_ERR_FORMAT, "string length", "past the end" },
    { "first key length 0", NULL, 24, 8, 0, SITS_ERR_FORMAT, "key is empty", NULL },
    { "value type 13", "test.u8", 0, 4, 13, SITS_ERR_FORMAT, "test.u8", "unknown value type 13" },
    { "string value length huge", "test.str", 4, 8, 1ull << 62, SITS_ERR_FORMAT, "test.str", "past the end" },
    { "nested array", "test.arr_i32", 4, 4, 9, SITS_ERR_FORMAT, "test.arr_i32", "nested arrays" },
    { "array element type 77", "test.arr_i32", 4, 4, 77, SITS_ERR_FORMAT, "test.arr_i32", "unknown array element type" },
    { "array length huge", "test.arr_i32", 8, 8, 1ull << 61, SITS_ERR_FORMAT, "test.arr_i32", "past the end" },
    { "string array length huge", "test.arr_str", 8, 8, 1ull << 40, SITS_ERR_FORMAT, "test.arr_str", "past the end" },
    { "array string length huge", "test.arr_str", 16, 8, 1ull << 40, SITS_ERR_FORMAT, "test.arr_str", "past the end" },
    { "duplicate key", "test.u16", -4, 4, 0x3233752eu /* ".u32" */, SITS_ERR_FORMAT, "test.u32", "present twice" },
    { "n_dims 5", "blk.0.attn_q.weight", TI_NDIMS, 4, 5, SITS_ERR_FORMAT, "blk.0.attn_q.weight", "5 dimensions" },
    { "ggml type 99", "blk.0.attn_q.weight", TI_TYPE, 4, 99, SITS_ERR_FORMAT, "blk.0.attn_q.weight", "unknown ggml type 99" },
    { "ggml type 2^32-1021", "blk.0.attn_q.weight", TI_TYPE, 4, 0xfffffc03u, SITS_ERR_FORMAT, "blk.0.attn_q.weight",
      "unknown ggml type 4294966275" }, /* found by fuzz_gguf: a u32 read as a negative int */
    { "ggml type 4 (removed)", "blk.0.attn_q.weight", TI_TYPE, 4, 4, SITS_ERR_FORMAT, "blk.0.attn_q.weight",
      "unknown ggml type 4" },
    { "ne0 not a block multiple", "blk.0.attn_q.weight", TI_NE0, 8, 48, SITS_ERR_FORMAT, "blk.0.attn_q.weight",
      "block size 32" },
    { "ne negative", "blk.0.attn_q.weight", TI_NE1, 8, UINT64_MAX, SITS_ERR_FORMAT, "blk.0.attn_q.weight", "negative" },
    { "shape overflows", "blk.0.attn_q.weight", TI_NE1, 8, 1ull << 62, SITS_ERR_FORMAT, "blk.0.attn_q.weight", "overflows" },
    { "shape past the data", "blk.0.attn_q.weight", TI_NE1, 8, 1ull << 20, SITS_ERR_FORMAT, "blk.0.attn_q.weight",
      "past the end" },
    { "offset misaligned", "blk.0.attn_q.weight", TI_OFFSET, 8, 16, SITS_ERR_FORMAT, "blk.0.attn_q.weight", "alignment 32" },
    { "offset past the data", "blk.0.attn_q.weight", TI_OFFSET, 8, 1ull << 40, SITS_ERR_FORMAT, "blk.0.attn_q.weight",
      "past the end" },
    { "offset 2^64-32", "blk.0.attn_q.weight", TI_OFFSET, 8, UINT64_MAX - 31, SITS_ERR_FORMAT, "blk.0.attn_q.weight",
      "past the end" },
    { "overlapping tensors", "blk.0.attn_q.weight", TI_OFFSET, 8, 0, SITS_ERR_FORMAT, "overlaps", "token_embd.weight" },
    { "duplicate tensor name", "blk.1.attn_q.weight", -17, 4, 0x2e302e6bu /* "k.0." */, SITS_ERR_FORMAT,
      "blk.0.attn_q.weight", "present twice" },
    { "tensor name length huge", "blk.0.attn_q.weight", -27, 8, 1ull << 50, SITS_ERR_FORMAT, "string length", NULL },
};

static void test_corrupt_fields(void **state)
{
    int failed = 0;
    for (size_t i = 0; i < sizeof patches / sizeof patches[0]; i++) {
        const patch_t *p = &patches[i];
        unsigned char *img = malloc(tiny_len);
        memcpy(img, tiny, tiny_len);
        size_t at = (p->anchor ? after_str(img, tiny_len, p->anchor) : 0) + (size_t)p->delta;
        if (p->width == 4) sits_le_put32(img + at, (uint32_t)p->value);
        else sits_le_put64(img + at, p->value);
        char *log;
        sits_status_t s = parse_quiet(img, tiny_len, &log);
        int ok = s == p->want && strstr(log, WHAT) && (!p->msg1 || strstr(log, p->msg1)) && (!p->msg2 || strstr(log, p->msg2));
        if (!ok) {
            printf("case %zu \"%s\": status %d (%s) want %d; log should name %s \"%s\" \"%s\"\n", i, p->name, s,
                   sits_status_str(s), p->want, WHAT, p->msg1 ? p->msg1 : "", p->msg2 ? p->msg2 : "");
            failed++;
        }
        free(log);
        free(img);
    }
    /* version 2 has the same layout: accepted */
    unsigned char *img = malloc(tiny_len);
    memcpy(img, tiny, tiny_len);
    sits_le_put32(img + 4, 2);
    sits_gguf_t *g = NULL;
    assert_int_equal(sits_gguf_parse(img, tiny_len, WHAT, &g), SITS_OK);
    assert_int_equal(sits_gguf_version(g), 2);
    sits_gguf_close(g);
    free(img);
    printf("%zu corrupt images, %d not refused as expected\n", sizeof patches / sizeof patches[0], failed);
    assert_int_equal(failed, 0);
}

static void test_open_errors(void **state)
{
    sits_gguf_t *g = NULL;
    tm_capture_t cap;
    tm_capture_begin(&cap);
    sits_status_t s = sits_gguf_open(SITS_GGUF_DATA_DIR "/nosuch.gguf", &g);
    char *log = tm_capture_end(&cap);
    assert_int_equal(s, SITS_ERR_NOT_FOUND);
    assert_non_null(strstr(log, "nosuch.gguf"));
    free(log);
    tm_capture_begin(&cap);
    s = sits_gguf_open(SITS_GGUF_DATA_DIR "/expected.json", &g); /* not a GGUF */
    log = tm_capture_end(&cap);
    assert_int_equal(s, SITS_ERR_FORMAT);
    assert_non_null(strstr(log, "expected.json: bad magic"));
    free(log);
    assert_null(sits_ggml_type_name(4));
    assert_null(sits_ggml_type_name(-1));
    assert_null(sits_ggml_type_name(1000));
    assert_string_equal(sits_ggml_type_name(12), "Q4_K");
    assert_true(sits_ggml_type_supported(12));    /* [gguf k-quants] */
    assert_false(sits_ggml_type_supported(16));   /* IQ2_XXS */
    assert_false(sits_ggml_type_supported(15));   /* Q8_K: llama.cpp's intermediate, never in a file's weights */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metadata),     cmocka_unit_test(test_tensors),       cmocka_unit_test(test_hf_names),
        cmocka_unit_test(test_model_dir),    cmocka_unit_test(test_truncations),   cmocka_unit_test(test_corrupt_fields),
        cmocka_unit_test(test_open_errors),  cmocka_unit_test(test_quants),        cmocka_unit_test(test_arch_dirs),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
