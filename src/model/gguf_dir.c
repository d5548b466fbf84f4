/* gguf_dir.c -- [gguf] a GGUF file served on its own (`--model file.gguf`, or a directory whose one *.gguf has no
 * config.json beside it), as llama.cpp serves it: the metadata is the config and the tokenizer.
 *
 * The files the loaders read are written into a private temporary directory (removed at exit) beside a link to the
 * GGUF, exactly as transformers rebuilds them from the same metadata (from_pretrained(dir, gguf_file=...)), which is
 * the reference the tests compare with:
 *   config.json            transformers' GGUF_CONFIG_MAPPING for the architectures gguf.c maps (llama, mistral --
 *                          llama with "mistral" in general.name --, qwen2, qwen3, gemma2, gemma3 -> gemma3_text,
 *                          [gguf phi3] phi3, [gguf moe] qwen3moe -> qwen3_moe): context_length, block_count,
 *                          feed_forward_length, embedding_length,
 *                          attention.head_count, head_count_kv, layer_norm_rms_epsilon, rope.freq_base, vocab_size, llama / mistral's
 *                          rope.dimension_count and gemma's attention.key_length as head_dim, gemma's
 *                          attention.sliding_window; qwen3moe's attention.key_length, expert_count, expert_used_count,
 *                          expert_feed_forward_length (moe_intermediate_size: not in transformers' mapping, which keeps
 *                          the class default 768) and norm_topk_prob true (transformers' GGUF default);
 *                          tie_word_embeddings when there is no output.weight; the
 *                          tokenizer's bos / eos / pad ids. Keys the file lacks keep the config class's defaults.
 *   tokenizer.json         tokenizer.ggml.model "gpt2" (byte-level BPE: Llama 3, Qwen, SmolLM, Phi-4, Mistral-Nemo...),
 *                          as transformers' byte_level_tokenizer + add_gguf_special_tokens + set_split_regex: the
 *                          tokens (respelled into the byte alphabet when they use other characters) and merges; a
 *                          ByteLevel pre-tokenizer with GPT-2's regex, or tokenizer.ggml.pre's split regex then ByteLevel
 *                          without one (transformers' table; and "smollm" as llama.cpp splits it: each digit alone, then
 *                          GPT-2's regex -- the pre-tokenizer of SmolLM's own tokenizer.json, which transformers' table
 *                          lacks); control tokens (type 3) special, user-defined ones (type 4) added; BOS
 *                          prepended when tokenizer.ggml.add_bos_token; [gguf spm] tokenizer.ggml.model "llama"
 *                          (sentencepiece BPE: Llama 2, Mistral 7B) as transformers' LlamaTokenizer from the file: the
 *                          tokens as stored, merges from the file or derived from the scores (generate_merges),
 *                          Metaspace prepending to the first piece, byte fallback, its decoder, BOS unless the file
 *                          says not to; the file's bos / eos / unk / pad tokens special; [gguf gemma] the sentencepiece
 *                          files of gemma architectures as transformers' gemma_tokenizer (GemmaTokenizer): tokens of
 *                          spaces respelled as U+2581s, merges derived from the file order (not the scores), spaces
 *                          replaced by U+2581 without a prefix, a split after each, no strip in the decoder, <mask>
 *                          special; [gguf phi3] phi3 files as transformers' phi3_tokenizer: LlamaTokenizer's with the
 *                          prefix and the spaces done by a normalizer (Prepend U+2581, Replace ' ') and no
 *                          pre-tokenizer. Other tokenizer models are refused with what to put beside the file.
 *   tokenizer_config.json  chat_template, add_bos_token / add_eos_token, the special tokens' names.
 * Files already in the directory (a tokenizer.json or generation_config.json beside the GGUF) are linked, not rebuilt. */
#include "model/gguf.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <jansson.h>

#include "util/log.h"

/* ---- the metadata ---- */

static const sits_gguf_kv_t *kv(const sits_gguf_t *g, const char *arch, const char *key)
{
    char k[160];
    if (arch) snprintf(k, sizeof k, "%s.%s", arch, key);
    else snprintf(k, sizeof k, "%s", key);
    return sits_gguf_kv_find(g, k);
}

/* An integer (or float for `real`) key into obj[name] when present; SITS_ERR_FORMAT naming it when not a number */
static sits_status_t put_num(json_t *obj, const sits_gguf_t *g, const char *arch, const char *key, const char *name, int real)
{
    const sits_gguf_kv_t *v = kv(g, arch, key);
    if (!v) return SITS_OK;
    if (v->type == SITS_GGUF_ARRAY || v->type == SITS_GGUF_STRING) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: %s.%s: expected a number", sits_gguf_path(g), arch ? arch : "", key);
        return SITS_ERR_FORMAT;
    }
    json_t *j;
    if (real) {
        double d;
        SITS_CHECK(sits_gguf_kv_get_f64(v, 0, &d));
        j = json_real(d);
    } else {
        int64_t i;
        if (sits_gguf_kv_get_i64(v, 0, &i) != SITS_OK) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: %s.%s: expected an integer", sits_gguf_path(g), arch ? arch : "", key);
            return SITS_ERR_FORMAT;
        }
        j = json_integer((json_int_t)i);
    }
    return j && json_object_set_new(obj, name, j) == 0 ? SITS_OK : SITS_ERR_NOMEM;
}

/* string key -> malloc'd NUL-terminated copy (NULL when absent or not a string) */
static char *get_str(const sits_gguf_t *g, const char *key)
{
    const sits_gguf_kv_t *v = sits_gguf_kv_find(g, key);
    const char *s;
    size_t n;
    if (!v || v->type != SITS_GGUF_STRING || sits_gguf_kv_get_str(g, v, 0, &s, &n) != SITS_OK) return NULL;
    char *c = malloc(n + 1);
    if (c) {
        memcpy(c, s, n);
        c[n] = 0;
    }
    return c;
}

static int get_id(const sits_gguf_t *g, const char *key, int64_t *id)
{
    const sits_gguf_kv_t *v = sits_gguf_kv_find(g, key);
    return v && v->type != SITS_GGUF_ARRAY && sits_gguf_kv_get_i64(v, 0, id) == SITS_OK;
}

static int get_bool(const sits_gguf_t *g, const char *key, int def)
{
    int64_t b;
    return get_id(g, key, &b) ? b != 0 : def;
}

/* ---- config.json ---- */

static sits_status_t make_config(const sits_gguf_t *g, const char *arch, json_t **out_p)
{
    static const char *const archs[][2] = { { "llama", "llama" }, { "qwen2", "qwen2" }, { "qwen3", "qwen3" },
                                            { "gemma2", "gemma2" }, { "gemma3", "gemma3_text" }, { "phi3", "phi3" },
                                            { "qwen3moe", "qwen3_moe" } };
    const char *mt = NULL;
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (!strcmp(arch, archs[i][0])) mt = archs[i][1];
    if (!mt) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: general.architecture \"%s\": a GGUF of this architecture needs its config.json beside it "
                   "(built from the file: llama, mistral, qwen2, qwen3, gemma2, gemma3, phi3, qwen3moe)", sits_gguf_path(g), arch);
        return SITS_ERR_UNSUPPORTED;
    }
    char *name = get_str(g, "general.name");
    if (!strcmp(arch, "llama") && name && strstr(name, "mistral")) mt = "mistral";   /* transformers' own patch */
    free(name);
    json_t *c = json_object();
    if (!c) return SITS_ERR_NOMEM;
    sits_status_t st = json_object_set_new(c, "model_type", json_string(mt)) == 0 ? SITS_OK : SITS_ERR_NOMEM;
    static const struct { const char *key, *name; int real; } map[] = {
        { "context_length", "max_position_embeddings", 0 }, { "block_count", "num_hidden_layers", 0 },
        { "feed_forward_length", "intermediate_size", 0 }, { "embedding_length", "hidden_size", 0 },
        { "attention.head_count", "num_attention_heads", 0 }, { "attention.head_count_kv", "num_key_value_heads", 0 },
        { "attention.layer_norm_rms_epsilon", "rms_norm_eps", 1 }, { "rope.freq_base", "rope_theta", 1 },
        { "vocab_size", "vocab_size", 0 } };
    for (size_t i = 0; st == SITS_OK && i < sizeof map / sizeof map[0]; i++)
        st = put_num(c, g, arch, map[i].key, map[i].name, map[i].real);
    int gemma = !strncmp(arch, "gemma", 5);
    if (st == SITS_OK && (!strcmp(mt, "llama") || !strcmp(mt, "mistral"))) st = put_num(c, g, arch, "rope.dimension_count", "head_dim", 0);
    if (st == SITS_OK && gemma) st = put_num(c, g, arch, "attention.key_length", "head_dim", 0);
    if (st == SITS_OK && gemma) st = put_num(c, g, arch, "attention.sliding_window", "sliding_window", 0);
    if (!strcmp(mt, "qwen3_moe")) {   /* [gguf moe] transformers' qwen3_moe keys, and its GGUF default norm_topk_prob true */
        if (st == SITS_OK) st = put_num(c, g, arch, "attention.key_length", "head_dim", 0);
        if (st == SITS_OK) st = put_num(c, g, arch, "expert_count", "num_experts", 0);
        if (st == SITS_OK) st = put_num(c, g, arch, "expert_used_count", "num_experts_per_tok", 0);
        /* not in transformers' mapping (it keeps Qwen3MoeConfig's 768, Qwen3-30B-A3B's): llama.cpp writes the width */
        if (st == SITS_OK) st = put_num(c, g, arch, "expert_feed_forward_length", "moe_intermediate_size", 0);
        if (st == SITS_OK && json_object_set_new(c, "norm_topk_prob", json_true()) != 0) st = SITS_ERR_NOMEM;
    }
    if (st == SITS_OK && !json_object_get(c, "vocab_size")) {   /* transformers: len(tokenizer.ggml.tokens) where the key is absent */
        const sits_gguf_kv_t *t = sits_gguf_kv_find(g, "tokenizer.ggml.tokens");
        if (t && t->type == SITS_GGUF_ARRAY) st = json_object_set_new(c, "vocab_size", json_integer((json_int_t)t->n)) ? SITS_ERR_NOMEM : SITS_OK;
    }
    if (st == SITS_OK)
        st = json_object_set_new(c, "tie_word_embeddings", json_boolean(!sits_gguf_tensor_find(g, "output.weight"))) ? SITS_ERR_NOMEM
                                                                                                                    : SITS_OK;
    static const char *const ids[][2] = { { "tokenizer.ggml.bos_token_id", "bos_token_id" },
                                          { "tokenizer.ggml.eos_token_id", "eos_token_id" },
                                          { "tokenizer.ggml.padding_token_id", "pad_token_id" } };
    for (size_t i = 0; st == SITS_OK && i < sizeof ids / sizeof ids[0]; i++) {
        int64_t id;
        if (get_id(g, ids[i][0], &id) && json_object_set_new(c, ids[i][1], json_integer((json_int_t)id)) != 0) st = SITS_ERR_NOMEM;
    }
    if (st != SITS_OK) {
        json_decref(c);
        return st;
    }
    *out_p = c;
    return SITS_OK;
}

/* ---- tokenizer.json (byte-level BPE) ---- */

/* GPT-2's byte -> code point map (transformers' bytes_to_unicode): printable bytes map to themselves, the other 68 to
 * 256, 257, ... in byte order; every code point of the alphabet is below 324 */
static uint32_t byte_cp(unsigned b)
{
    static uint32_t map[256];
    static int made;
    if (!made) {   /* (filled once: the loader runs on one thread) */
        unsigned n = 0;
        for (unsigned x = 0; x < 256; x++)
            map[x] = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174 ? x : 256 + n++;
        made = 1;
    }
    return map[b & 255];
}

static size_t put_utf8(char *o, uint32_t cp)
{
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xc0 | cp >> 6); o[1] = (char)(0x80 | (cp & 0x3f)); return 2; }
    o[0] = (char)(0xe0 | cp >> 12); o[1] = (char)(0x80 | (cp >> 6 & 0x3f)); o[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
}

/* 1 when every character of the UTF-8 token s is in the byte alphabet (then it is already byte-level spelled) */
static int in_alphabet(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l;
        if (s[i] < 0x80) { cp = s[i]; l = 1; }
        else if ((s[i] & 0xe0) == 0xc0 && i + 1 < n) { cp = (uint32_t)(s[i] & 0x1f) << 6 | (s[i + 1] & 0x3f); l = 2; }
        else if ((s[i] & 0xf0) == 0xe0 && i + 2 < n) {
            cp = (uint32_t)(s[i] & 0x0f) << 12 | (uint32_t)(s[i + 1] & 0x3f) << 6 | (s[i + 2] & 0x3f);
            l = 3;
        } else return 0;
        /* the alphabet: code points 33-126, 161-172, 174-255 (the bytes themselves) and 256-323 (the others) */
        if (!((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp < 324))) return 0;
        i += l;
    }
    return 1;
}

/* the token as the vocabulary spells it: as stored, or each UTF-8 byte through byte_cp (malloc'd) */
static char *spell(const char *s, size_t n)
{
    char *o = malloc(3 * n + 1);
    if (!o) return NULL;
    if (in_alphabet((const unsigned char *)s, n)) {
        memcpy(o, s, n);
        o[n] = 0;
        return o;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += put_utf8(o + k, byte_cp((unsigned char)s[i]));
    o[k] = 0;
    return o;
}

/* transformers' GGUF_PRE_TOKENIZER_SPLITS (integrations/gguf/gguf_tokenizer_mapping.py) */
static const char *split_regex(const char *pre)
{
    static const char *const llama3 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"
                                      "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    static const char *const qwen2 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
                                     "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    static const char *const tekken = "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
                                      "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
                                      "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    static const char *const gpt4o = "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
                                     "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
                                     "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
                                     "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
                                     "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    static const struct { const char *pre, *re; } t[] = {
        { "llama3", NULL }, { "llama-v3", NULL }, { "llama-bpe", NULL }, { "falcon3", NULL }, { "falcon-h1", NULL },
        { "pixtral", NULL }, { "midm-2.0", NULL }, { "lfm2", NULL }, { "jina-v5-nano", NULL }, { "dbrx", NULL },
        { "smaug-bpe", NULL }, { "tekken", NULL }, { "qwen2", NULL }, { "deepseek-r1-qwen", NULL }, { "kormo", NULL },
        { "f2llmv2", NULL }, { "megrez", NULL }, { "gpt-4o", NULL }, { "llama4", NULL }, { "kanana2", NULL },
        { "talkie", NULL }, { "minimax-m2", NULL } };
    if (!pre) return NULL;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        if (strcmp(pre, t[i].pre) != 0) continue;
        if (i <= 10) return llama3;
        if (i == 11) return tekken;
        if (i <= 16) return qwen2;
        return gpt4o;
    }
    return NULL;
}

static json_t *bytelevel(int use_regex)
{
    return json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 1, "use_regex", use_regex);
}

/* [gguf spm] one candidate merge of transformers' generate_merges: pieces l, r (vocabulary ids) of a token whose score
 * it carries, their lengths in code points, and its place in generate_merges' list before the final (stable) sort */
typedef struct { int32_t l, r; double score; int ll, lr; size_t seq; } spm_merge_t;

static int spm_local_cmp(const void *a, const void *b)   /* within one token: (vocab[l], vocab[r]) ascending */
{
    const spm_merge_t *x = a, *y = b;
    return x->l != y->l ? (x->l < y->l ? -1 : 1) : x->r != y->r ? (x->r < y->r ? -1 : 1) : 0;
}

static int spm_cmp(const void *a, const void *b)   /* (score, len l, len r) descending, then the list order */
{
    const spm_merge_t *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    if (x->ll != y->ll) return x->ll > y->ll ? -1 : 1;
    if (x->lr != y->lr) return x->lr > y->lr ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int utf8_len1(unsigned char c) { return c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 1; }

/* [gguf spm] transformers' generate_merges(vocab, scores) for a sentencepiece file without merges: every split of every
 * token into two pieces both in the vocabulary, each token's splits by (vocab[l], vocab[r]), all of them sorted by the
 * token's score, then the pieces' lengths, descending (Python's stable sort). Appends [l, r] pairs to ml. by_pos: the
 * score of token i is -i (transformers' gemma_tokenizer: Gemma's scores do not follow its merge order, its file order does). */
static sits_status_t spm_merges(const sits_gguf_t *g, const sits_gguf_kv_t *scores, char *const *names, uint64_t n,
                                const json_t *vocab, json_t *ml, int by_pos)
{
    size_t cap = 1024, cnt = 0;
    spm_merge_t *m = malloc(cap * sizeof *m);
    if (!m) return SITS_ERR_NOMEM;
    sits_status_t st = SITS_OK;
    for (uint64_t i = 0; i < n && st == SITS_OK; i++) {
        if ((uint64_t)json_integer_value(json_object_get(vocab, names[i])) != i) continue;   /* a repeated token: its last copy */
        double sc = -(double)i;
        if (!by_pos && sits_gguf_kv_get_f64(scores, i, &sc) != SITS_OK) {
            st = SITS_ERR_FORMAT;
            break;
        }
        const char *t = names[i];
        size_t len = strlen(t), c0 = cnt;
        int cps = 0;
        for (size_t k = 0; k < len; k += (size_t)utf8_len1((unsigned char)t[k])) cps++;
        int ll = 0;
        for (size_t k = 0; k < len;) {
            k += (size_t)utf8_len1((unsigned char)t[k]);
            ll++;
            if (k >= len) break;
            char *left = strndup(t, k);
            const json_t *jl = left ? json_object_get(vocab, left) : NULL, *jr = json_object_get(vocab, t + k);
            free(left);
            if (!jl || !jr) continue;
            if (cnt == cap && !(m = realloc(m, (cap *= 2) * sizeof *m))) return SITS_ERR_NOMEM;
            m[cnt++] = (spm_merge_t){ (int32_t)json_integer_value(jl), (int32_t)json_integer_value(jr), sc, ll, cps - ll, 0 };
        }
        qsort(m + c0, cnt - c0, sizeof *m, spm_local_cmp);
    }
    for (size_t k = 0; k < cnt; k++) m[k].seq = k;
    qsort(m, cnt, sizeof *m, spm_cmp);
    for (size_t k = 0; k < cnt && st == SITS_OK; k++)
        if (json_array_append_new(ml, json_pack("[ss]", names[m[k].l], names[m[k].r])) != 0) st = SITS_ERR_NOMEM;
    free(m);
    if (st == SITS_ERR_FORMAT) SITS_ERROR(SITS_SUB_MODEL, "%s: tokenizer.ggml.scores: missing or not numbers", sits_gguf_path(g));
    return st;
}

static sits_status_t make_tokenizer(const sits_gguf_t *g, const char *arch, json_t **tok_p, json_t **tcfg_p)
{
    const char *path = sits_gguf_path(g);
    char *model = get_str(g, "tokenizer.ggml.model");
    const int spm = model && !strcmp(model, "llama");   /* sentencepiece BPE (Llama 2, Mistral 7B; Gemma) */
    const int gemma = spm && !strncmp(arch, "gemma", 5);   /* [gguf gemma] transformers' gemma_tokenizer */
    const int phi3 = spm && !strcmp(arch, "phi3");          /* [gguf phi3] transformers' phi3_tokenizer */
    if (!model || (strcmp(model, "gpt2") != 0 && !spm)) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: tokenizer.ggml.model \"%s\": only byte-level BPE (\"gpt2\") and sentencepiece BPE "
                   "(\"llama\") tokenizers are rebuilt from a GGUF; put the model's tokenizer.json and tokenizer_config.json "
                   "beside the file", path, model ? model : "(none)");
        free(model);
        return SITS_ERR_UNSUPPORTED;
    }
    free(model);
    const sits_gguf_kv_t *tokens = sits_gguf_kv_find(g, "tokenizer.ggml.tokens"), *merges = sits_gguf_kv_find(g, "tokenizer.ggml.merges");
    const sits_gguf_kv_t *types = sits_gguf_kv_find(g, "tokenizer.ggml.token_type"), *scores = sits_gguf_kv_find(g, "tokenizer.ggml.scores");
    if (!tokens || tokens->type != SITS_GGUF_ARRAY || tokens->elem_type != SITS_GGUF_STRING ||
        (merges && (merges->type != SITS_GGUF_ARRAY || merges->elem_type != SITS_GGUF_STRING)) || (!merges && !spm) ||
        (!merges && (!scores || scores->type != SITS_GGUF_ARRAY || scores->n != tokens->n)) ||
        (types && (types->type != SITS_GGUF_ARRAY || types->n != tokens->n))) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: tokenizer.ggml.tokens / merges (or scores) / token_type: missing or not arrays of the "
                   "vocabulary's size", path);
        return SITS_ERR_FORMAT;
    }
    sits_status_t st = SITS_ERR_NOMEM;
    json_t *vocab = json_object(), *ml = json_array(), *added = json_array(), *tok = NULL, *tcfg = NULL;
    char **names = calloc((size_t)tokens->n, sizeof *names);
    if (!vocab || !ml || !added || !names) goto out;
    for (uint64_t i = 0; i < tokens->n; i++) {
        const char *s;
        size_t n;
        if (sits_gguf_kv_get_str(g, tokens, i, &s, &n) != SITS_OK || !(names[i] = malloc(n + 1))) goto out;
        memcpy(names[i], s, n);
        names[i][n] = 0;
        /* [gguf gemma] a blank token with a space in it (" ", "  ", " \n": transformers' `" " in t and not t.strip()`,
         * ASCII whitespace here) is looked up as that many U+2581s */
        if (gemma && n && memchr(names[i], ' ', n) && strspn(names[i], " \t\n\r\v\f") == n) {
            free(names[i]);
            if (!(names[i] = malloc(3 * n + 1))) goto out;
            for (size_t k = 0; k <= n; k++) strcpy(names[i] + 3 * k, k < n ? "\u2581" : "");
        }
        char *sp = spm ? strdup(names[i]) : spell(s, n);
        if (!sp || json_object_set_new(vocab, sp, json_integer((json_int_t)i)) != 0) {
            free(sp);
            goto out;
        }
        free(sp);
    }
    if (!merges) SITS_CHECK_GOTO(spm_merges(g, scores, names, tokens->n, vocab, ml, gemma), st, out);
    for (uint64_t i = 0; merges && i < merges->n; i++) {
        const char *s;
        size_t n;
        if (sits_gguf_kv_get_str(g, merges, i, &s, &n) != SITS_OK) goto out;
        const char *sp = memchr(s, ' ', n);
        if (!sp) {
            SITS_ERROR(SITS_SUB_MODEL, "%s: tokenizer.ggml.merges[%llu]: no space between the pair", path, (unsigned long long)i);
            st = SITS_ERR_FORMAT;
            goto out;
        }
        if (json_array_append_new(ml, json_pack("[s%s%]", s, (size_t)(sp - s), sp + 1, (size_t)(n - (size_t)(sp - s) - 1))) != 0)
            goto out;
    }
    /* add_gguf_special_tokens: control (3) special when spelled in the byte alphabet; user-defined (4) plain */
    for (uint64_t i = 0; types && i < tokens->n; i++) {
        int64_t ty;
        if (sits_gguf_kv_get_i64(types, i, &ty) != SITS_OK) goto out;
        if (ty != 3 && ty != 4) continue;
        if (ty == 3 && !spm && !in_alphabet((const unsigned char *)names[i], strlen(names[i]))) continue;
        if (ty == 4 && !json_object_get(vocab, names[i])) continue;
        if (json_array_append_new(added, json_pack("{s:I, s:s, s:b, s:b, s:b, s:b, s:b}", "id", (json_int_t)i, "content", names[i],
                                                   "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0, "special",
                                                   ty == 3)) != 0)
            goto out;
    }
    char *pre = get_str(g, "tokenizer.ggml.pre");
    const char *re = split_regex(pre);
    const int smollm = pre && !strcmp(pre, "smollm");   /* llama.cpp's: digits one by one, then GPT-2's regex */
    free(pre);
    /* [gguf spm] LlamaTokenizer's: Metaspace (prepend to the first piece), byte fallback, its decoder; [gguf gemma]
     * GemmaTokenizer's: spaces replaced by U+2581 (no prefix), split after each space, the decoder without the strip;
     * [gguf phi3] the prefix and the spaces by the normalizer (Prepend + Replace), no pre-tokenizer */
    json_t *norm = gemma ? json_pack("{s:s, s:{s:s}, s:s}", "type", "Replace", "pattern", "String", " ", "content", "\u2581")
                   : phi3 ? json_pack("{s:s, s:[{s:s, s:s}, {s:s, s:{s:s}, s:s}]}", "type", "Sequence", "normalizers", "type",
                                      "Prepend", "prepend", "\u2581", "type", "Replace", "pattern", "String", " ", "content", "\u2581")
                          : json_null();
    json_t *pt = phi3 ? json_null() : gemma ? json_pack("{s:s, s:{s:s}, s:s, s:b}", "type", "Split", "pattern", "String", " ", "behavior",
                                   "MergedWithPrevious", "invert", 0)
                 : spm ? json_pack("{s:s, s:s, s:s, s:b}", "type", "Metaspace", "replacement", "\u2581", "prepend_scheme", "first",
                                 "split", 0)
                 : re ? json_pack("{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, o]}", "type", "Sequence", "pretokenizers", "type", "Split",
                                  "pattern", "Regex", re, "behavior", "Isolated", "invert", 0, bytelevel(0))
                 : smollm ? json_pack("{s:s, s:[{s:s, s:b}, o]}", "type", "Sequence", "pretokenizers", "type", "Digits",
                                      "individual_digits", 1, bytelevel(1))
                          : bytelevel(1);
    json_t *dec = gemma ? json_pack("{s:s, s:[{s:s, s:{s:s}, s:s}, {s:s}, {s:s}]}", "type", "Sequence", "decoders", "type", "Replace",
                                    "pattern", "String", "\u2581", "content", " ", "type", "ByteFallback", "type", "Fuse")
                  : spm ? json_pack("{s:s, s:[{s:s, s:{s:s}, s:s}, {s:s}, {s:s}, {s:s, s:s, s:i, s:i}]}", "type", "Sequence", "decoders",
                                  "type", "Replace", "pattern", "String", "\u2581", "content", " ", "type", "ByteFallback", "type", "Fuse",
                                  "type", "Strip", "content", " ", "start", 1, "stop", 0)
                      : json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 1, "trim_offsets", 1, "use_regex", 1);
    json_t *bpe = spm ? json_pack("{s:s, s:n, s:o, s:n, s:n, s:b, s:b, s:b, s:O, s:O}", "type", "BPE", "dropout", "unk_token",
                                  gemma ? json_string("<unk>") : json_null(), "continuing_subword_prefix", "end_of_word_suffix",
                                  "fuse_unk", 1, "byte_fallback", 1, "ignore_merges", 0, "vocab", vocab, "merges", ml)
                      : json_pack("{s:s, s:n, s:n, s:s, s:s, s:b, s:b, s:b, s:O, s:O}", "type", "BPE", "dropout", "unk_token",
                                  "continuing_subword_prefix", "", "end_of_word_suffix", "", "fuse_unk", 0, "byte_fallback", 0,
                                  "ignore_merges", 0, "vocab", vocab, "merges", ml);
    /* transformers: a sentencepiece file adds BOS unless it says not to (llama.cpp's default) */
    int add_bos = get_bool(g, "tokenizer.ggml.add_bos_token", spm), add_eos = get_bool(g, "tokenizer.ggml.add_eos_token", 0);
    int64_t bos = -1, eos = -1, unk = -1, pad = -1;
    get_id(g, "tokenizer.ggml.bos_token_id", &bos);
    get_id(g, "tokenizer.ggml.eos_token_id", &eos);
    get_id(g, "tokenizer.ggml.unknown_token_id", &unk);
    get_id(g, "tokenizer.ggml.padding_token_id", &pad);
    const int64_t nv = (int64_t)tokens->n;
    if ((add_bos && (bos < 0 || bos >= nv)) || (add_eos && (eos < 0 || eos >= nv))) {
        SITS_ERROR(SITS_SUB_MODEL, "%s: tokenizer.ggml.add_bos_token / add_eos_token without a bos / eos id in the vocabulary", path);
        st = SITS_ERR_FORMAT;
        goto out;
    }
    /* the post-processor: BOS / EOS around each sequence when the file says so (TemplateProcessing, as transformers) */
    json_t *single = json_array(), *pair = json_array(), *sp = json_object();
    int ok = single && pair && sp;
    for (int part = 0; ok && part < 2; part++) {
        json_t *seqs[2] = { part ? NULL : single, pair };
        for (int s = 0; s < 2; s++) {
            if (!seqs[s]) continue;
            if (add_bos) ok &= json_array_append_new(seqs[s], json_pack("{s:{s:s, s:i}}", "SpecialToken", "id", names[bos], "type_id", part)) == 0;
            ok &= json_array_append_new(seqs[s], json_pack("{s:{s:s, s:i}}", "Sequence", "id", part ? "B" : "A", "type_id", part)) == 0;
            if (add_eos) ok &= json_array_append_new(seqs[s], json_pack("{s:{s:s, s:i}}", "SpecialToken", "id", names[eos], "type_id", part)) == 0;
        }
    }
    if (ok && add_bos)
        ok = json_object_set_new(sp, names[bos], json_pack("{s:s, s:[I], s:[s]}", "id", names[bos], "ids", (json_int_t)bos, "tokens",
                                                           names[bos])) == 0;
    if (ok && add_eos)
        ok = json_object_set_new(sp, names[eos], json_pack("{s:s, s:[I], s:[s]}", "id", names[eos], "ids", (json_int_t)eos, "tokens",
                                                           names[eos])) == 0;
    ok = ok && norm && pt && dec && bpe;
    /* the special tokens the tokenizer is given by name (bos / eos / unk / pad of the file) are special too, as
     * transformers adds them when it builds the tokenizer */
    const json_t *jm = gemma ? json_object_get(vocab, "<mask>") : NULL;   /* [gguf gemma] GemmaTokenizer's mask token */
    const int64_t named[5] = { bos, eos, unk, pad, jm ? (int64_t)json_integer_value(jm) : -1 };
    for (int k = 0; ok && k < 5; k++) {
        if (named[k] < 0 || named[k] >= nv) continue;
        int have = 0;
        for (size_t a = 0; a < json_array_size(added) && !have; a++)
            have = json_integer_value(json_object_get(json_array_get(added, a), "id")) == named[k];
        if (!have)
            ok = json_array_append_new(added, json_pack("{s:I, s:s, s:b, s:b, s:b, s:b, s:b}", "id", (json_int_t)named[k], "content",
                                                        names[named[k]], "single_word", 0, "lstrip", 0, "rstrip", 0,
                                                        "normalized", 0, "special", 1)) == 0;
    }
    if (!ok) {
        json_decref(single);
        json_decref(pair);
        json_decref(sp);
        json_decref(norm);
        json_decref(pt);
        json_decref(dec);
        json_decref(bpe);
        goto out;
    }
    tok = json_pack("{s:s, s:n, s:n, s:O, s:o, s:o, s:{s:s, s:o, s:o, s:o}, s:o, s:o}",
                    "version", "1.0", "truncation", "padding", "added_tokens", added, "normalizer", norm, "pre_tokenizer", pt,
                    "post_processor", "type", "TemplateProcessing", "single", single, "pair", pair, "special_tokens", sp,
                    "decoder", dec, "model", bpe);
    tcfg = json_pack("{s:b, s:b}", "add_bos_token", add_bos, "add_eos_token", add_eos);
    if (!tok || !tcfg) goto out;
    static const char *const special[4] = { "bos_token", "eos_token", "unk_token", "pad_token" };
    const int64_t sid[4] = { bos, eos, unk, pad };
    for (int i = 0; i < 4; i++)
        if (sid[i] >= 0 && sid[i] < nv) json_object_set_new(tcfg, special[i], json_string(names[sid[i]]));
    char *tmpl = get_str(g, "tokenizer.chat_template");
    if (tmpl) json_object_set_new(tcfg, "chat_template", json_string(tmpl));
    free(tmpl);
    *tok_p = tok;
    *tcfg_p = tcfg;
    tok = tcfg = NULL;
    st = SITS_OK;
out:
    for (uint64_t i = 0; names && i < tokens->n; i++) free(names[i]);
    free(names);
    json_decref(vocab);
    json_decref(ml);
    json_decref(added);
    json_decref(tok);
    json_decref(tcfg);
    return st;
}

/* ---- the directory ---- */

#define GGUF_DIR_MAX 8
static char *made[GGUF_DIR_MAX];
static int n_made;

static void remove_made(void)
{
    for (int i = 0; i < n_made; i++) {
        DIR *d = opendir(made[i]);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char p[2 * PATH_MAX];
            snprintf(p, sizeof p, "%s/%s", made[i], e->d_name);
            unlink(p);
        }
        if (d) closedir(d);
        rmdir(made[i]);
        free(made[i]);
    }
    n_made = 0;
}

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static int exists_in(const char *dir, const char *name)
{
    char p[2 * PATH_MAX];
    struct stat sb;
    return dir && snprintf(p, sizeof p, "%s/%s", dir, name) < (int)sizeof p && stat(p, &sb) == 0;
}

static sits_status_t write_json(const char *dir, const char *name, json_t *j)
{
    char p[2 * PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    if (json_dump_file(j, p, JSON_INDENT(1) | JSON_ENSURE_ASCII) != 0) {
        SITS_ERROR(SITS_SUB_MODEL, "cannot write %s: %s", p, strerror(errno));
        return SITS_ERR_IO;
    }
    return SITS_OK;
}

sits_status_t sits_gguf_model_dir(const char *model, char **dir_p)
{
    *dir_p = NULL;
    struct stat sb;
    if (!model || stat(model, &sb) != 0) return SITS_OK;   /* the loaders say what is missing */
    char gguf[PATH_MAX], src[PATH_MAX];
    int have_src = 0;
    if (S_ISREG(sb.st_mode)) {
        if (!ends_with(model, ".gguf")) return SITS_OK;
        if (!realpath(model, gguf)) return SITS_ERR_IO;
    } else if (S_ISDIR(sb.st_mode)) {
        if (exists_in(model, "config.json")) return SITS_OK;
        DIR *d = opendir(model);
        struct dirent *e;
        int n = 0;
        while (d && (e = readdir(d)))
            if (ends_with(e->d_name, ".gguf") && n++ == 0) snprintf(src, sizeof src, "%s/%s", model, e->d_name);
        if (d) closedir(d);
        if (n != 1) return SITS_OK;   /* none: not a GGUF directory; several: sits_st_open_dir says so */
        if (!realpath(src, gguf) || !realpath(model, src)) return SITS_ERR_IO;
        have_src = 1;
    } else {
        return SITS_OK;
    }
    if (n_made >= GGUF_DIR_MAX) return SITS_ERR_INVALID;
    sits_gguf_t *g = NULL;
    SITS_CHECK(sits_gguf_open(gguf, &g));
    char *arch = get_str(g, "general.architecture");
    json_t *cfg = NULL, *tok = NULL, *tcfg = NULL;
    sits_status_t st = arch ? SITS_OK : SITS_ERR_FORMAT;
    if (!arch) SITS_ERROR(SITS_SUB_MODEL, "%s: general.architecture: missing", gguf);
    if (st == SITS_OK) st = make_config(g, arch, &cfg);
    int own_tok = !(have_src && exists_in(src, "tokenizer.json"));
    if (st == SITS_OK && own_tok) st = make_tokenizer(g, arch, &tok, &tcfg);
    const char *tmp = getenv("TMPDIR");
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/sits-gguf-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (st == SITS_OK && !mkdtemp(dir)) {
        SITS_ERROR(SITS_SUB_MODEL, "cannot create a directory for %s's config and tokenizer: %s", gguf, strerror(errno));
        st = SITS_ERR_IO;
    }
    if (st == SITS_OK) {
        if (!n_made) atexit(remove_made);
        made[n_made++] = strdup(dir);
        char p[2 * PATH_MAX], q[2 * PATH_MAX];
        snprintf(p, sizeof p, "%s/model.gguf", dir);
        if (symlink(gguf, p) != 0) st = SITS_ERR_IO;
        DIR *d = have_src ? opendir(src) : NULL;   /* what the directory has besides, linked */
        struct dirent *e;
        while (st == SITS_OK && d && (e = readdir(d))) {
            if (e->d_name[0] == '.' || ends_with(e->d_name, ".gguf")) continue;
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            snprintf(q, sizeof q, "%s/%s", src, e->d_name);
            if (symlink(q, p) != 0) st = SITS_ERR_IO;
        }
        if (d) closedir(d);
        if (st == SITS_OK) st = write_json(dir, "config.json", cfg);
        if (st == SITS_OK && own_tok) st = write_json(dir, "tokenizer.json", tok);
        if (st == SITS_OK && own_tok) st = write_json(dir, "tokenizer_config.json", tcfg);
    }
    if (st == SITS_OK) {
        *dir_p = strdup(dir);
        SITS_INFO(SITS_SUB_MODEL, "%s: config%s from the GGUF's metadata (%s, %lld layers) in %s", gguf,
                  own_tok ? ", tokenizer and chat template" : "", arch,
                  (long long)json_integer_value(json_object_get(cfg, "num_hidden_layers")), dir);
        if (!*dir_p) st = SITS_ERR_NOMEM;
    }
    free(arch);
    json_decref(cfg);
    json_decref(tok);
    json_decref(tcfg);
    sits_gguf_close(g);
    return st;
}
