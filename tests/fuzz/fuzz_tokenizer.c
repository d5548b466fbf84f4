/* fuzz_tokenizer.c -- libFuzzer target: encode/decode with a real tokenizer.json (the byte-level
 * fixture, tests/fixtures/tokenizers/bytelevel; SITS_FUZZ_TOKENIZER overrides the path).
 * Input byte 0 picks the mode, the rest is the payload:
 *   even: payload is text. Invalid UTF-8 must be refused; valid UTF-8 must encode to in-vocabulary
 *         ids, and decode(encode(text)) must give the text back (byte-level BPE without a normalizer
 *         is lossless) unless an added token matched: those may strip whitespace around them
 *         (lstrip/rstrip), as HF tokenizers does.
 *   odd:  payload is a list of u16 ids (some outside the vocabulary). decode must refuse exactly when
 *         an id is out of range; otherwise its text is valid UTF-8 and equals the concatenation of the
 *         incremental decoder's pushes and flush (the contract of tokenizer.h). */
#include "fuzz_common.h"
#include "tokenizer/tokenizer.h"
#include <jansson.h>

#ifndef SITS_FUZZ_TOKENIZER_DEFAULT
#define SITS_FUZZ_TOKENIZER_DEFAULT "tests/fixtures/tokenizers/bytelevel/tokenizer.json"
#endif

static sits_tokenizer_t *g_tok;
static unsigned char *g_added;   /* [vocab]: 1 for the ids of added_tokens */
static size_t g_vocab;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    fuzz_log_quiet();
    const char *path = getenv("SITS_FUZZ_TOKENIZER");
    if (!path) path = SITS_FUZZ_TOKENIZER_DEFAULT;
    size_t len;
    char *json = fuzz_read_file(path, &len);
    if (sits_tokenizer_load_json_string(json, len, &g_tok) != SITS_OK) {
        fprintf(stderr, "fuzz: cannot load %s\n", path);
        exit(2);
    }
    g_vocab = sits_tokenizer_vocab_size(g_tok);
    g_added = calloc(g_vocab, 1);
    json_t *root = json_loadb(json, len, 0, NULL);
    json_t *at = root ? json_object_get(root, "added_tokens") : NULL;
    for (size_t i = 0; i < json_array_size(at); i++) {
        json_int_t id = json_integer_value(json_object_get(json_array_get(at, i), "id"));
        if (id >= 0 && (size_t)id < g_vocab) g_added[id] = 1;
    }
    json_decref(root);
    free(json);
    return 0;
}

static void fuzz_text(const uint8_t *p, size_t n)
{
    char *text = malloc(n ? n : 1);
    if (!text) return;
    memcpy(text, p, n);
    int32_t *ids = NULL;
    size_t n_ids = 0;
    sits_status_t st = sits_tokenizer_encode(g_tok, text, n, 0, &ids, &n_ids);
    int valid = fuzz_utf8_valid(p, n);
    if (!valid) FUZZ_ASSERT(st != SITS_OK);
    if (st == SITS_OK) {
        size_t vocab = sits_tokenizer_vocab_size(g_tok);
        int added = 0;
        for (size_t i = 0; i < n_ids; i++) {
            FUZZ_ASSERT(ids[i] >= 0 && (size_t)ids[i] < vocab);
            added |= g_added[ids[i]];
        }
        char *out = NULL;
        size_t out_len = 0;
        FUZZ_ASSERT(sits_tokenizer_decode(g_tok, ids, n_ids, 0, &out, &out_len) == SITS_OK);
        if (!added && (out_len != n || memcmp(out, text, n) != 0)) {
            fprintf(stderr, "round trip: %zu bytes in, %zu out\n", n, out_len);
            FUZZ_ASSERT(!"decode(encode(text)) == text");
        }
        free(out);
        /* with the post-processor: a superset of the plain ids */
        int32_t *ids2 = NULL;
        size_t n2 = 0;
        FUZZ_ASSERT(sits_tokenizer_encode(g_tok, text, n, 1, &ids2, &n2) == SITS_OK);
        FUZZ_ASSERT(n2 >= n_ids);
        free(ids2);
    }
    free(ids);
    free(text);
}

static void fuzz_ids(const uint8_t *p, size_t n, int skip_special)
{
    size_t n_ids = n / 2;
    int32_t *ids = malloc(sizeof(int32_t) * (n_ids ? n_ids : 1));
    if (!ids) return;
    size_t vocab = sits_tokenizer_vocab_size(g_tok);
    int in_range = 1;
    for (size_t i = 0; i < n_ids; i++) {
        ids[i] = (int32_t)(p[2 * i] | (p[2 * i + 1] << 8));
        if (p[2 * i + 1] == 0xff) ids[i] = -ids[i];   /* negative ids too */
        if (ids[i] < 0 || (size_t)ids[i] >= vocab) in_range = 0;
    }
    char *out = NULL;
    size_t out_len = 0;
    sits_status_t st = sits_tokenizer_decode(g_tok, ids, n_ids, skip_special, &out, &out_len);
    FUZZ_ASSERT((st == SITS_OK) == in_range);
    if (st == SITS_OK) {
        FUZZ_ASSERT(out[out_len] == '\0');
        /* incremental decoder: same bytes, valid UTF-8 at every push */
        sits_detok_t *dt = NULL;
        FUZZ_ASSERT(sits_detok_create(g_tok, skip_special, &dt) == SITS_OK);
        char *acc = malloc(out_len + 1);
        size_t acc_len = 0;
        int ok = 1;
        for (size_t i = 0; i < n_ids && ok; i++) {
            const char *t;
            size_t tl;
            FUZZ_ASSERT(sits_detok_push(dt, ids[i], &t, &tl) == SITS_OK);
            FUZZ_ASSERT(fuzz_utf8_valid((const unsigned char *)t, tl));
            if (acc_len + tl > out_len) ok = 0;
            else { memcpy(acc + acc_len, t, tl); acc_len += tl; }
        }
        const char *t;
        size_t tl;
        FUZZ_ASSERT(sits_detok_flush(dt, &t, &tl) == SITS_OK);
        if (ok && acc_len + tl <= out_len) { memcpy(acc + acc_len, t, tl); acc_len += tl; } else ok = 0;
        if (!ok || acc_len != out_len || memcmp(acc, out, out_len) != 0) {
            fprintf(stderr, "incremental decode: %zu bytes vs %zu\n", acc_len, out_len);
            FUZZ_ASSERT(!"incremental == whole decode");
        }
        free(acc);
        sits_detok_destroy(dt);
        free(out);
    }
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    if ((data[0] & 1) == 0) fuzz_text(data + 1, size - 1);
    else fuzz_ids(data + 1, size - 1, (data[0] >> 1) & 1);
    return 0;
}
