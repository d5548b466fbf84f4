/* test_safetensors.c -- safetensors validation and reading.
 *
 * - a table of corrupt images built in memory, each refused with the expected status and a
 *   message naming the file, the tensor and the reason;
 * - the same on disk (sits_st_open_file) and sharded sets in a temp dir (missing shard, tensor
 *   absent from its shard, tensor in two files, ...);
 * - good.safetensors written by the Python `safetensors` package (gen_model_data.py) read back
 *   with exact values (BF16, F16, F32, I64, 0-d, empty), and the committed tiny checkpoints
 *   (sharded with an index, and single-file). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <dirent.h>
#include <sys/stat.h>
#include <jansson.h>

#include "model/safetensors.h"
#include "util/status.h"
#include "test_model_common.h"

#define WHAT "mem.safetensors"
#define NO_OVERRIDE UINT64_MAX

typedef struct {
    const char *name;
    const char *header;
    size_t data_len;
    uint64_t hlen;           /* NO_OVERRIDE: the real header length */
    size_t truncate;         /* 0: keep the whole image; else keep this many bytes */
    sits_status_t want;
    const char *msg1, *msg2; /* must appear in the log (with WHAT); NULL to skip */
} st_case_t;

#define T4 "{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":"
static const st_case_t corrupt[] = {
    { "truncated to 5 bytes", "{}      ", 0, NO_OVERRIDE, 5, SITS_ERR_FORMAT, "truncated", NULL },
    { "1-byte file", "{}      ", 0, NO_OVERRIDE, 1, SITS_ERR_FORMAT, "truncated", NULL },
    { "header length past EOF", "{\"a\":" T4 "[0,16]}}", 16, 1000, 0, SITS_ERR_FORMAT, "past the end", "1000" },
    { "header cut short by truncation", "{\"a\":" T4 "[0,16]}}", 16, NO_OVERRIDE, 20, SITS_ERR_FORMAT, "past the end", NULL },
    { "header length > 100MB", "{}      ", 0, 100000001ull, 0, SITS_ERR_FORMAT, "100000001", "limit" },
    { "header length 2^63", "{}      ", 0, 1ull << 63, 0, SITS_ERR_FORMAT, "limit", NULL },
    { "header length < 8", "{}      ", 0, 2, 0, SITS_ERR_FORMAT, "minimum", NULL },
    { "bad JSON", "{\"a\": {\"dtype\": ", 0, NO_OVERRIDE, 0, SITS_ERR_FORMAT, "not valid JSON", NULL },
    { "JSON array", "[1, 2, 3]   ", 0, NO_OVERRIDE, 0, SITS_ERR_FORMAT, "not an object", NULL },
    { "JSON string", "\"tensor\"    ", 0, NO_OVERRIDE, 0, SITS_ERR_FORMAT, "not valid JSON", NULL },
    { "entry not an object", "{\"a\": 5}    ", 0, NO_OVERRIDE, 0, SITS_ERR_FORMAT, "tensor a", "not a JSON object" },
    { "duplicate name", "{\"a\":" T4 "[0,16]},\"a\":" T4 "[16,32]}}", 32, NO_OVERRIDE, 0, SITS_ERR_FORMAT,
      "not valid JSON", "duplicate" },
    { "offsets outside data", "{\"w\":" T4 "[8,24]}}", 16, NO_OVERRIDE, 0, SITS_ERR_FORMAT, "tensor w", "past the end" },
    { "data truncated", "{\"w\":" T4 "[0,16]}}", 12, NO_OVERRIDE, 0, SITS_ERR_FORMAT, "tensor w", "past the end" },
    { "end < begin", "{\"w\":" T4 "[16,0]}}", 16, NO_OVERRIDE, 0, SITS_ERR_FORMAT, "tensor w", "begin <= end" },
    { "negative begin", "{\"w\":" T4 "[-4,12]}}", 16, NO_OVERRIDE, 0, SITS_ERR_FORMAT, "tensor w", "begin <= end" },
    { "offsets not two integers", "{\"w\":" T4 "[0,8,16]}}", 16, NO_OVERRIDE, 0, SITS_ERR_FORMAT, "tensor w",
      "data_offsets" },
    { "offsets missing", "{\"w\":{\"dtype\":\"F32\",\"shape\":[4]}}", 16, NO_OVERRIDE, 0, SITS_ERR_FORMAT, "tensor w",
      "data_offsets" },
    { "overlapping tensors", "{\"a\":" T4 "[0,16]},\"b\":" T4 "[8,24]}}", 24, NO_OVERRIDE, 0, SITS_ERR_FORMAT,
      "overlaps", "tensor b" },
    { "overlap inside a long tensor", "{\"long\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[0,32]},"
      "\"c\":" T4 "[40,56]},\"b\":" T4 "[16,32]}}", 56, NO_OVERRIDE, 0, SITS_ERR_FORMAT, "overlaps", "long" },
    { "same span twice", "{\"a\":" T4 "[0,16]},\"b\":" T4 "[0,16]}}", 16, NO_OVERRIDE, 0, SITS_ERR_FORMAT,
      "overlaps", NULL },
    { "unknown dtype", "{\"w\":{\"dtype\":\"F17\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16, NO_OVERRIDE, 0,
      SITS_ERR_FORMAT, "tensor w", "unknown dtype" },
    { "lower-case dtype", "{\"w\":{\"dtype\":\"bf16\",\"shape\":[4],\"data_offsets\":[0,8]}}", 8, NO_OVERRIDE, 0,
      SITS_ERR_FORMAT, "tensor w", "unknown dtype" },
    { "newer dtype", "{\"w\":{\"dtype\":\"F8_E8M0\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, NO_OVERRIDE, 0,
      SITS_ERR_UNSUPPORTED, "tensor w", "not supported" },
    { "dtype not a string", "{\"w\":{\"dtype\":4,\"shape\":[4],\"data_offsets\":[0,16]}}", 16, NO_OVERRIDE, 0,
      SITS_ERR_FORMAT, "tensor w", "dtype" },
    { "wrong dtype for the bytes", "{\"w\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16,
      NO_OVERRIDE, 0, SITS_ERR_FORMAT, "tensor w", "needs 8" },
    { "byte size != shape x dtype", "{\"w\":" T4 "[0,12]}}", 16, NO_OVERRIDE, 0, SITS_ERR_FORMAT, "tensor w",
      "needs 16" },
    { "negative shape", "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1,4],\"data_offsets\":[0,16]}}", 16, NO_OVERRIDE, 0,
      SITS_ERR_FORMAT, "tensor w", "shape[0]" },
    { "fractional shape", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,10]}}", 16, NO_OVERRIDE, 0,
      SITS_ERR_FORMAT, "tensor w", "shape[0]" },
    { "shape not a list", "{\"w\":{\"dtype\":\"F32\",\"shape\":4,\"data_offsets\":[0,16]}}", 16, NO_OVERRIDE, 0,
      SITS_ERR_FORMAT, "tensor w", "shape" },
    { "shape product overflows", "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],"
      "\"data_offsets\":[0,16]}}", 16, NO_OVERRIDE, 0, SITS_ERR_FORMAT, "tensor w", "overflows" },
    { "nine dimensions", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,4],\"data_offsets\":[0,16]}}", 16,
      NO_OVERRIDE, 0, SITS_ERR_FORMAT, "tensor w", "dimensions" },
};

static void test_corrupt_table(void **state)
{
    int failed = 0;
    for (size_t i = 0; i < sizeof corrupt / sizeof corrupt[0]; i++) {
        const st_case_t *c = &corrupt[i];
        sits_st_t *st = (sits_st_t *)0x1;
        size_t len = 0;
        unsigned char *img = tm_st_image(c->header, c->data_len, c->hlen, &len);
        assert_non_null(img);
        if (c->truncate) len = c->truncate;
        tm_capture_t cap;
        tm_capture_begin(&cap);
        sits_status_t s = sits_st_parse(img, len, WHAT, &st);
        char *log = tm_capture_end(&cap);
        free(img);
        int ok = s == c->want && st == (sits_st_t *)0x1 && strstr(log, WHAT) &&
                 (!c->msg1 || strstr(log, c->msg1)) && (!c->msg2 || strstr(log, c->msg2));
        if (!ok) {
            printf("case %zu \"%s\": status %d (%s) want %d (%s); output %s; log %s \"%s\" \"%s\" \"%s\"\n", i,
                   c->name, s, sits_status_str(s), c->want, sits_status_str(c->want),
                   st == (sits_st_t *)0x1 ? "untouched" : "SET", "should name", WHAT, c->msg1 ? c->msg1 : "",
                   c->msg2 ? c->msg2 : "");
            if (s == SITS_OK) sits_st_close(st);
            failed++;
        }
        free(log);
    }
    printf("%zu corrupt images, %d not refused as expected\n", sizeof corrupt / sizeof corrupt[0], failed);
    assert_int_equal(failed, 0);
}

/* Accepted edge cases: no tensors, __metadata__, zero-size tensors, unaligned data, 0-d, F8_E4M3. */
static void test_accepted_edges(void **state)
{
    static const struct { const char *header; size_t data_len; size_t n; } ok[] = {
        { "{}      ", 0, 0 },
        { "{\"__metadata__\":{\"format\":\"pt\"}}", 0, 0 },
        { "{\"__metadata__\":{\"format\":\"pt\"},\"w\":" T4 "[0,16]}}", 16, 1 },
        /* empty tensors may sit anywhere, even on top of others */
        { "{\"e\":{\"dtype\":\"F32\",\"shape\":[0,4],\"data_offsets\":[4,4]},\"w\":" T4 "[0,16]}}", 16, 2 },
        { "{\"s\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[0,8]}}", 8, 1 },
        { "{\"f8\":{\"dtype\":\"F8_E4M3\",\"shape\":[3],\"data_offsets\":[0,3]},"
          "\"b\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[3,4]}}", 4, 2 },
        /* a hole and trailing bytes are tolerated */
        { "{\"a\":" T4 "[0,16]},\"b\":" T4 "[20,36]}}", 40, 2 },
        /* header length not a multiple of 8: the data area starts unaligned */
        { "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, 1 },
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        size_t len = 0;
        unsigned char *img = tm_st_image(ok[i].header, ok[i].data_len, NO_OVERRIDE, &len);
        sits_st_t *st = NULL;
        sits_status_t s = sits_st_parse(img, len, WHAT, &st);
        if (s != SITS_OK) printf("accepted case %zu refused: %s\n", i, ok[i].header);
        assert_int_equal(s, SITS_OK);
        assert_int_equal(sits_st_count(st), ok[i].n);
        for (size_t k = 0; k < ok[i].n; k++) {
            const sits_st_tensor_t *t = sits_st_at(st, k);
            assert_ptr_equal(sits_st_find(st, t->name), t);
            assert_true((const unsigned char *)t->data >= img + 8 + strlen(ok[i].header));
            assert_true((const unsigned char *)t->data + t->nbytes <= img + len);
            assert_string_equal(t->file, WHAT);
        }
        assert_null(sits_st_at(st, ok[i].n));
        assert_null(sits_st_find(st, "__metadata__"));
        sits_st_close(st);
        free(img);
    }
}

/* [mm] Prefix renames (a multimodal checkpoint's language model): the index stays sorted and searchable, names
 * outside the prefix untouched; a rename onto a name already present is refused. */
static void test_rename_prefix(void **state)
{
    (void)state;
    const char *h = "{\"language_model.model.b\":" T4 "[0,16]},\"language_model.model.a\":" T4 "[16,32]},"
                    "\"vision_tower.a\":" T4 "[32,48]},\"model.c\":" T4 "[48,64]}}";
    size_t len = 0, n = 0;
    unsigned char *img = tm_st_image(h, 64, NO_OVERRIDE, &len);
    sits_st_t *st = NULL;
    assert_int_equal(sits_st_parse(img, len, WHAT, &st), SITS_OK);
    const void *b_data = sits_st_find(st, "language_model.model.b")->data;
    assert_int_equal(sits_st_rename_prefix(st, "language_model.model.", "model.", &n), SITS_OK);
    assert_int_equal(n, 2);
    assert_int_equal(sits_st_count(st), 4);
    assert_ptr_equal(sits_st_find(st, "model.b")->data, b_data);
    assert_non_null(sits_st_find(st, "model.a"));
    assert_non_null(sits_st_find(st, "model.c"));
    assert_non_null(sits_st_find(st, "vision_tower.a"));
    assert_null(sits_st_find(st, "language_model.model.a"));
    for (size_t i = 1; i < sits_st_count(st); i++) assert_true(strcmp(sits_st_at(st, i - 1)->name, sits_st_at(st, i)->name) < 0);
    assert_int_equal(sits_st_rename_prefix(st, "nothing.", "x.", &n), SITS_OK);
    assert_int_equal(n, 0);
    assert_int_equal(sits_st_rename_infix(st, "l.", "l_", &n), SITS_OK);   /* [glm] anywhere in a name: model.x -> model_x */
    assert_int_equal(n, 3);
    assert_non_null(sits_st_find(st, "model_b"));
    assert_non_null(sits_st_find(st, "vision_tower.a"));
    assert_int_equal(sits_st_rename_infix(st, "model_", "model.", &n), SITS_OK);
    assert_int_equal(n, 3);
    tm_capture_t cap;
    tm_capture_begin(&cap);
    assert_int_equal(sits_st_rename_prefix(st, "vision_tower.", "model.", &n), SITS_ERR_FORMAT);   /* model.a twice */
    char *log = tm_capture_end(&cap);
    assert_non_null(strstr(log, "tensor model.a: also present"));
    free(log);
    sits_st_close(st);
    free(img);
}

/* good.safetensors from safetensors.torch.save_file, values from torch (good_expected.json). */
static void test_good_file_values(void **state)
{
    sits_st_t *st = NULL;
    assert_int_equal(sits_st_open_file(SITS_TEST_DATA_DIR "/good.safetensors", &st), SITS_OK);
    json_error_t jerr;
    json_t *exp = json_load_file(SITS_TEST_DATA_DIR "/good_expected.json", 0, &jerr);
    if (!exp) fail_msg("good_expected.json: %s", jerr.text);
    assert_int_equal(sits_st_count(st), json_object_size(exp));
    assert_int_equal(sits_st_file_count(st), 1);
    size_t bad = 0, total = 0;
    const char *name;
    json_t *e;
    json_object_foreach(exp, name, e) {
        const sits_st_tensor_t *t = sits_st_find(st, name);
        assert_non_null(t);
        assert_string_equal(sits_dtype_name(t->dtype), json_string_value(json_object_get(e, "dtype")));
        const json_t *shape = json_object_get(e, "shape");
        assert_int_equal(t->ndim, json_array_size(shape));
        size_t numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            assert_int_equal(t->shape[d], json_integer_value(json_array_get(shape, (size_t)d)));
            numel *= (size_t)t->shape[d];
        }
        assert_int_equal(t->nbytes, numel * sits_dtype_size(t->dtype));
        const json_t *vals = json_object_get(e, "values");
        assert_int_equal(json_array_size(vals), numel);
        total += t->nbytes;
        if (t->dtype == SITS_DT_I64) {
            for (size_t k = 0; k < numel; k++) {
                int64_t v;
                memcpy(&v, (const char *)t->data + 8 * k, 8);
                if (v != json_integer_value(json_array_get(vals, k))) bad++;
            }
            continue;
        }
        float *got = calloc(numel + 1, sizeof *got);
        double *ref = calloc(numel + 1, sizeof *ref);
        assert_int_equal(sits_convert_to_f32(t->dtype, t->data, got, numel), 0);
        for (size_t k = 0; k < numel; k++) ref[k] = json_number_value(json_array_get(vals, k));
        bad += tm_compare(name, got, ref, numel, 0.0, 0.0); /* exact: the same bits */
        for (size_t k = 0; k < numel; k++) /* -0.0 stays -0.0 */
            if (!signbit(got[k]) != !signbit(ref[k])) { printf("  %s[%zu]: sign differs\n", name, k); bad++; }
        free(got);
        free(ref);
    }
    assert_int_equal(sits_st_total_bytes(st), total);
    assert_null(sits_st_find(st, "__metadata__"));
    assert_null(sits_st_find(st, "w.bf1"));
    assert_null(sits_st_find(st, "zzz"));
    json_decref(exp);
    sits_st_close(st);
    assert_int_equal(bad, 0);
}

/* Committed HF checkpoints: tiny_llama is sharded (index), tiny_qwen2 a single model.safetensors. */
static void test_committed_dirs(void **state)
{
    sits_st_t *st = NULL;
    assert_int_equal(sits_st_open_dir(SITS_TEST_DATA_DIR "/tiny_llama", &st), SITS_OK);
    json_t *idx = json_load_file(SITS_TEST_DATA_DIR "/tiny_llama/model.safetensors.index.json", 0, NULL);
    assert_non_null(idx);
    const json_t *wm = json_object_get(idx, "weight_map");
    assert_int_equal(sits_st_count(st), json_object_size(wm));
    assert_int_equal(sits_st_file_count(st), 2);
    const char *name;
    json_t *f;
    json_object_foreach((json_t *)wm, name, f) {
        const sits_st_tensor_t *t = sits_st_find(st, name);
        assert_non_null(t);
        const char *slash = strrchr(t->file, '/');
        assert_non_null(slash);
        assert_string_equal(slash + 1, json_string_value(f));
        assert_int_equal(t->dtype, SITS_DT_BF16);
    }
    /* metadata.total_size is the sum of the tensor bytes */
    assert_int_equal(sits_st_total_bytes(st), json_integer_value(json_object_get(json_object_get(idx, "metadata"),
                                                                                  "total_size")));
    json_decref(idx);
    sits_st_close(st);

    assert_int_equal(sits_st_open_dir(SITS_TEST_DATA_DIR "/tiny_qwen2", &st), SITS_OK);
    assert_int_equal(sits_st_file_count(st), 1);
    assert_non_null(sits_st_find(st, "model.layers.1.self_attn.q_proj.bias"));
    assert_null(sits_st_find(st, "lm_head.weight"));
    sits_st_close(st);
}

/* ---- on-disk cases in a temp dir ---- */

static char tmp_root[256];

static int setup_tmp(void **state)
{
    snprintf(tmp_root, sizeof tmp_root, "/tmp/sits_test_st_XXXXXX");
    return mkdtemp(tmp_root) ? 0 : -1;
}

static void rm_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    char p[1024];
    for (struct dirent *de; (de = readdir(d));) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        struct stat sb;
        if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) rm_tree(p);
        else unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static int teardown_tmp(void **state)
{
    rm_tree(tmp_root);
    return 0;
}

/* A fresh directory under tmp_root. */
static const char *mkcase(const char *name, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", tmp_root, name);
    assert_int_equal(mkdir(buf, 0755), 0);
    return buf;
}

/* DIR/FILE: a valid safetensors with F32 [4] tensors named by the comma-separated list. */
static void write_shard(const char *dir, const char *file, const char *names)
{
    char header[2048], path[1024], list[256];
    size_t n = 0, h = (size_t)snprintf(header, sizeof header, "{");
    snprintf(list, sizeof list, "%s", names);
    for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save), n++)
        h += (size_t)snprintf(header + h, sizeof header - h, "%s\"%s\":" T4 "[%zu,%zu]}", n ? "," : "", tok, 16 * n,
                              16 * n + 16);
    snprintf(header + h, sizeof header - h, "}");
    size_t len;
    unsigned char *img = tm_st_image(header, 16 * n, NO_OVERRIDE, &len);
    snprintf(path, sizeof path, "%s/%s", dir, file);
    assert_int_equal(tm_write_file(path, img, len), 0);
    free(img);
}

static void write_text(const char *dir, const char *file, const char *text)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    assert_int_equal(tm_write_file(path, text, strlen(text)), 0);
}

static sits_status_t open_dir_logged(const char *dir, sits_st_t **st_p, char **log_p)
{
    tm_capture_t cap;
    tm_capture_begin(&cap);
    sits_status_t s = sits_st_open_dir(dir, st_p);
    *log_p = tm_capture_end(&cap);
    return s;
}

#define INDEX(wm_) "{\"metadata\": {\"total_size\": 0}, \"weight_map\": " wm_ "}"

static void test_sharded(void **state)
{
    char d[512];
    char *log;
    sits_st_t *st = NULL;

    /* good: two shards, each opened once */
    mkcase("good", d, sizeof d);
    write_shard(d, "model-00001-of-00002.safetensors", "a,b,c");
    write_shard(d, "model-00002-of-00002.safetensors", "d,e");
    write_text(d, "model.safetensors.index.json",
               INDEX("{\"a\": \"model-00001-of-00002.safetensors\", \"b\": \"model-00001-of-00002.safetensors\","
                     " \"c\": \"model-00001-of-00002.safetensors\", \"d\": \"model-00002-of-00002.safetensors\","
                     " \"e\": \"model-00002-of-00002.safetensors\"}"));
    assert_int_equal(open_dir_logged(d, &st, &log), SITS_OK);
    free(log);
    assert_int_equal(sits_st_count(st), 5);
    assert_int_equal(sits_st_file_count(st), 2);
    assert_int_equal(sits_st_total_bytes(st), 5 * 16);
    assert_non_null(strstr(sits_st_find(st, "e")->file, "model-00002-of-00002.safetensors"));
    assert_non_null(strstr(sits_st_find(st, "a")->file, "model-00001-of-00002.safetensors"));
    /* data of "b" is the second 16 bytes of the first shard's data area */
    const unsigned char *bd = sits_st_find(st, "b")->data;
    assert_int_equal(bd[0], (unsigned char)(16 * 7 + 1));
    sits_st_close(st);

    static const struct {
        const char *name, *index, *msg1, *msg2;
        sits_status_t want;
    } bad[] = {
        { "missing_shard", INDEX("{\"a\": \"s1.safetensors\", \"x\": \"s9.safetensors\"}"), "s9.safetensors",
          "does not exist", SITS_ERR_NOT_FOUND },
        { "absent_from_shard", INDEX("{\"a\": \"s1.safetensors\", \"zz\": \"s1.safetensors\"}"), "tensor zz",
          "absent", SITS_ERR_FORMAT },
        { "listed_in_wrong_shard", INDEX("{\"a\": \"s2.safetensors\", \"b\": \"s1.safetensors\", \"c\": \"s2.safetensors\"}"), "tensor a",
          "found in", SITS_ERR_FORMAT },
        { "tensor_in_two_files", INDEX("{\"a\": \"s1.safetensors\", \"b\": \"s3.safetensors\"}"), "tensor b",
          "also present", SITS_ERR_FORMAT },
        { "index_not_json", "{\"weight_map\": {", "model.safetensors.index.json", "invalid JSON", SITS_ERR_FORMAT },
        { "no_weight_map", "{\"metadata\": {}}", "weight_map", NULL, SITS_ERR_FORMAT },
        { "weight_map_array", INDEX("[\"s1.safetensors\"]"), "weight_map", NULL, SITS_ERR_FORMAT },
        { "value_not_string", INDEX("{\"a\": 1}"), "tensor a", "file name", SITS_ERR_FORMAT },
        { "value_with_path", INDEX("{\"a\": \"../s1.safetensors\"}"), "tensor a", "file name", SITS_ERR_FORMAT },
        { "corrupt_shard", INDEX("{\"a\": \"s1.safetensors\", \"q\": \"bad.safetensors\"}"), "bad.safetensors",
          "past the end", SITS_ERR_FORMAT },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mkcase(bad[i].name, d, sizeof d);
        write_shard(d, "s1.safetensors", "a,b");
        write_shard(d, "s2.safetensors", "c");
        write_shard(d, "s3.safetensors", "b,d");
        size_t len = 0;
        unsigned char *img = tm_st_image("{\"q\":" T4 "[0,16]}}", 8, NO_OVERRIDE, &len);
        char p[1024];
        snprintf(p, sizeof p, "%s/bad.safetensors", d);
        assert_int_equal(tm_write_file(p, img, len), 0);
        free(img);
        write_text(d, "model.safetensors.index.json", bad[i].index);
        st = (sits_st_t *)0x1;
        sits_status_t s = open_dir_logged(d, &st, &log);
        int ok = s == bad[i].want && st == (sits_st_t *)0x1 && strstr(log, bad[i].msg1) &&
                 (!bad[i].msg2 || strstr(log, bad[i].msg2));
        if (!ok) printf("sharded case %s: status %d want %d\n", bad[i].name, s, bad[i].want);
        free(log);
        assert_true(ok);
    }
}

static void test_unindexed_dirs(void **state)
{
    char d[512];
    char *log;
    sits_st_t *st = NULL;

    /* several *.safetensors without an index are merged */
    mkcase("merge", d, sizeof d);
    write_shard(d, "part-b.safetensors", "x,y");
    write_shard(d, "part-a.safetensors", "z");
    write_text(d, "notes.txt", "not a checkpoint");
    assert_int_equal(open_dir_logged(d, &st, &log), SITS_OK);
    free(log);
    assert_int_equal(sits_st_count(st), 3);
    assert_int_equal(sits_st_file_count(st), 2);
    sits_st_close(st);

    /* ... and a name present twice is an error */
    mkcase("dup", d, sizeof d);
    write_shard(d, "one.safetensors", "x,y");
    write_shard(d, "two.safetensors", "y");
    assert_int_equal(open_dir_logged(d, &st, &log), SITS_ERR_FORMAT);
    assert_non_null(strstr(log, "tensor y"));
    assert_non_null(strstr(log, "one.safetensors"));
    assert_non_null(strstr(log, "two.safetensors"));
    free(log);

    /* model.safetensors is preferred over the others */
    mkcase("preferred", d, sizeof d);
    write_shard(d, "model.safetensors", "m");
    write_shard(d, "consolidated.safetensors", "m,n");
    assert_int_equal(open_dir_logged(d, &st, &log), SITS_OK);
    free(log);
    assert_int_equal(sits_st_count(st), 1);
    assert_non_null(strstr(sits_st_find(st, "m")->file, "/model.safetensors"));
    sits_st_close(st);

    /* nothing there */
    mkcase("empty", d, sizeof d);
    assert_int_equal(open_dir_logged(d, &st, &log), SITS_ERR_NOT_FOUND);
    free(log);
    char nod[600];
    snprintf(nod, sizeof nod, "%s/no_such_dir", tmp_root);
    assert_int_equal(open_dir_logged(nod, &st, &log), SITS_ERR_NOT_FOUND);
    free(log);
}

/* sits_st_open_file on corrupt files: the same refusals as in memory, the path in the message. */
static void test_open_file_errors(void **state)
{
    char d[512], p[1024];
    char *log;
    sits_st_t *st = (sits_st_t *)0x1;
    mkcase("files", d, sizeof d);

    snprintf(p, sizeof p, "%s/short.safetensors", d);
    assert_int_equal(tm_write_file(p, "\x10\x00\x00", 3), 0);
    tm_capture_t cap;
    tm_capture_begin(&cap);
    assert_int_equal(sits_st_open_file(p, &st), SITS_ERR_FORMAT);
    log = tm_capture_end(&cap);
    assert_non_null(strstr(log, p));
    free(log);

    snprintf(p, sizeof p, "%s/empty.safetensors", d);
    assert_int_equal(tm_write_file(p, "", 0), 0);
    tm_capture_begin(&cap);
    assert_int_equal(sits_st_open_file(p, &st), SITS_ERR_FORMAT);
    free(tm_capture_end(&cap));

    for (size_t i = 0; i < sizeof corrupt / sizeof corrupt[0]; i++) {
        size_t len = 0;
        unsigned char *img = tm_st_image(corrupt[i].header, corrupt[i].data_len, corrupt[i].hlen, &len);
        if (corrupt[i].truncate) len = corrupt[i].truncate;
        snprintf(p, sizeof p, "%s/corrupt%zu.safetensors", d, i);
        assert_int_equal(tm_write_file(p, img, len), 0);
        free(img);
        tm_capture_begin(&cap);
        sits_status_t s = sits_st_open_file(p, &st);
        log = tm_capture_end(&cap);
        if (s != corrupt[i].want || !strstr(log, p)) printf("file case %zu \"%s\": status %d\n", i, corrupt[i].name, s);
        assert_int_equal(s, corrupt[i].want);
        assert_non_null(strstr(log, p));
        free(log);
    }
    assert_ptr_equal(st, (sits_st_t *)0x1);

    snprintf(p, sizeof p, "%s/absent.safetensors", d);
    tm_capture_begin(&cap);
    assert_int_equal(sits_st_open_file(p, &st), SITS_ERR_NOT_FOUND);
    free(tm_capture_end(&cap));
    tm_capture_begin(&cap);
    assert_int_equal(sits_st_open_file(d, &st), SITS_ERR_IO); /* a directory */
    free(tm_capture_end(&cap));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_corrupt_table),
        cmocka_unit_test(test_accepted_edges),
        cmocka_unit_test(test_rename_prefix),
        cmocka_unit_test(test_good_file_values),
        cmocka_unit_test(test_committed_dirs),
        cmocka_unit_test(test_sharded),
        cmocka_unit_test(test_unindexed_dirs),
        cmocka_unit_test(test_open_file_errors),
    };
    return cmocka_run_group_tests(tests, setup_tmp, teardown_tmp);
}
