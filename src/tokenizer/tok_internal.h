/* tok_internal.h -- the tokenizer's internal representation, shared by the component families
 * (normalizers.c, pretok.c, models.c, decoders.c, postproc.c), tokenizer.c (load, added tokens, encode
 * driver) and chat.c. Not part of the module's contract.
 *
 * Each component family is an array of steps (a JSON "Sequence" is flattened into it); each step holds its
 * parameters and a pointer to a small ops table (parse once at load, apply per call, free). The model is one
 * ops table (BPE, Unigram, WordPiece) over the shared vocabulary.
 *
 * Ids: tokens[id] holds the token string of every id in [0, vocab_size); added tokens override the
 * model vocabulary. Hash tables use open addressing with linear probing over power-of-two sizes. */
#ifndef SITS_TOKENIZER_TOK_INTERNAL_H
#define SITS_TOKENIZER_TOK_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include <pcre2.h>
#include "tokenizer/tokenizer.h"
#include "util/log.h"

#define TOK_ERR(...) SITS_ERROR(SITS_SUB_TOK, __VA_ARGS__)

/* ------------------------------------------------------------------ growable buffers (tok_util.c) */

typedef struct { char *p; size_t n, cap; } tok_buf_t;           /* always NUL-terminated once used */
typedef struct { int32_t *p; size_t n, cap; } tok_ids_t;
typedef struct { size_t off, len; uint8_t at_zero; } tok_piece_t;  /* at_zero: starts at original offset 0 */
typedef struct { tok_piece_t *p; size_t n, cap; } tok_pieces_t;

int sits_tok_buf_reserve(tok_buf_t *b, size_t extra);
int sits_tok_buf_put(tok_buf_t *b, const char *s, size_t n);
int sits_tok_ids_push(tok_ids_t *v, int32_t id);
int sits_tok_pieces_push(tok_pieces_t *v, size_t off, size_t len, int at_zero);
uint32_t sits_tok_hash(const char *s, size_t n);
char *sits_tok_strndup(const char *s, size_t n);

/* ------------------------------------------------------------------ unicode (tok_util.c) */

uint32_t sits_tok_byte_to_cp(uint8_t b);  /* GPT-2 byte <-> unicode map */
int sits_tok_cp_to_byte(uint32_t cp);     /* -1 when cp is not in the map */
size_t sits_tok_utf8_encode(uint32_t cp, char *out);
size_t sits_tok_utf8_next(const char *s, size_t len, uint32_t *cp_p);  /* one code point of valid UTF-8 */
int sits_tok_is_white_space(uint32_t cp);                               /* Rust char::is_whitespace */
/* Rust Utf8Chunks step at s[0]: returns 1 valid (n bytes), 0 invalid (n bytes -> one U+FFFD),
 * 2 incomplete (a valid prefix truncated by the end of the buffer). */
int sits_tok_utf8_step(const unsigned char *s, size_t len, size_t *n_p);
/* Character classes (libutf8proc general categories; without it only ASCII is classified). */
int sits_tok_is_punct(uint32_t cp);      /* ASCII punctuation or Unicode P* (tokenizers is_punc) */
int sits_tok_is_numeric(uint32_t cp);   /* N* (Rust char::is_numeric; Digits splits on it) */
int sits_tok_is_mark_nonspacing(uint32_t cp);  /* Mn (BertNormalizer strip_accents) */
int sits_tok_is_mark(uint32_t cp);              /* M* (StripAccents: unicode-normalization is_combining_mark) */
int sits_tok_is_other(uint32_t cp);      /* C* (Cc Cf Cn Co Cs) */
int sits_tok_is_word_char(uint32_t cp);  /* L* M* Nd Pc (regex \w) */
int sits_tok_after_unicode9(uint32_t cp);  /* assigned after Unicode 9.0 (UnicodeScripts' table) */
/* Lowercase by Rust char::to_lowercase (U+0130 -> "i\u0307"); appends to out. */
int sits_tok_lower_append(uint32_t cp, tok_buf_t *out);

/* ------------------------------------------------------------------ regex and JSON helpers (tok_util.c) */

/* pattern as Oniguruma (tokenizers) reads it; literal: a String pattern. */
sits_status_t sits_tok_regex_compile(const char *pattern, int literal, pcre2_code **re_p);
/* Next match of re in s[pos..n) -> [*ms_p, *me_p); 0 found, 1 none, <0 error (logged). */
int sits_tok_regex_next(const pcre2_code *re, pcre2_match_data *md, const char *s, size_t n, size_t pos,
                        size_t *ms_p, size_t *me_p);
/* Replace every match of re in s by content into out (appends). */
sits_status_t sits_tok_regex_replace(const pcre2_code *re, const char *content, const char *s, size_t n,
                                     tok_buf_t *out);
/* A {"String": s} pattern -> *str_p (malloc'd), a {"Regex": r} one -> *re_p (compiled); the other is NULL. */
sits_status_t sits_tok_pattern_parse(const json_t *pat, const char *what, pcre2_code **re_p, char **str_p);
const char *sits_tok_jstr(const json_t *o, const char *key);
int sits_tok_jbool(const json_t *o, const char *key, int def);

/* string -> id (keys are looked up through a string table) */
typedef struct {
    int32_t *slots;  /* -1 empty */
    uint32_t mask;
} sits_tok_strmap_t;
typedef struct { char **s; uint32_t *len; } tok_keys_t;
int sits_tok_strmap_init(sits_tok_strmap_t *m, size_t n);
int32_t sits_tok_strmap_get(const sits_tok_strmap_t *m, const tok_keys_t *k, const char *s, size_t n);
void sits_tok_strmap_put(sits_tok_strmap_t *m, const tok_keys_t *k, int32_t id);

/* ------------------------------------------------------------------ components */

typedef struct sits_tok_norm sits_tok_norm_t;
typedef struct sits_tok_pre sits_tok_pre_t;
typedef struct sits_tok_dec sits_tok_dec_t;
typedef struct tok_ctx tok_ctx_t;

typedef enum {
    SITS_SPLIT_REMOVED, SITS_SPLIT_ISOLATED, SITS_SPLIT_MERGED_PREV, SITS_SPLIT_MERGED_NEXT, SITS_SPLIT_CONTIGUOUS
} sits_tok_split_behavior_t;
typedef enum { SITS_PREPEND_ALWAYS, SITS_PREPEND_FIRST, SITS_PREPEND_NEVER } sits_tok_prepend_t;

/* normalizers.c: in[0..n) -> out (appended; out is empty on entry). */
typedef struct {
    const char *name;
    sits_status_t (*apply)(const sits_tok_norm_t *nm, const char *in, size_t n, tok_buf_t *out);
} sits_tok_norm_ops_t;
struct sits_tok_norm {
    const sits_tok_norm_ops_t *ops;
    char *a, *b;        /* Prepend text; Replace pattern string / content */
    pcre2_code *re;     /* Replace Regex */
    int flag1, flag2, flag3, flag4;  /* Strip left/right; Bert clean/chinese/accents/lower; NF* form */
    uint32_t *trie;     /* Precompiled: darts double array units */
    size_t n_trie;
    char *normalized;   /* Precompiled: NUL-separated replacement strings */
    size_t n_normalized;
};
sits_status_t sits_tok_norm_parse(const json_t *o, sits_tok_norm_t **steps_p, size_t *n_p);
sits_status_t sits_tok_norm_run(const sits_tok_norm_t *steps, size_t n, const char *in, size_t len, tok_buf_t *tmp,
                                tok_buf_t *out);
void sits_tok_norm_free(sits_tok_norm_t *steps, size_t n);

/* pretok.c: buf holds the text; pieces index it. A step may rewrite the text into dst (then *buf_p points
 * at dst->p). */
typedef struct {
    const char *name;
    sits_status_t (*apply)(const sits_tok_pre_t *p, tok_ctx_t *c, const char **buf_p, tok_buf_t *dst,
                           const tok_pieces_t *in, tok_pieces_t *out);
} sits_tok_pre_ops_t;
struct sits_tok_pre {
    const sits_tok_pre_ops_t *ops;
    pcre2_code *re;                      /* Split, ByteLevel (use_regex), Whitespace, UnicodeScripts */
    sits_tok_split_behavior_t behavior;
    int invert;
    int flag;                            /* ByteLevel add_prefix_space; Digits individual; Metaspace split */
    int map_bytes;                       /* ByteLevel: map bytes to the GPT-2 alphabet here (not last) */
    uint32_t delim;                      /* CharDelimiterSplit */
    char *replacement;                   /* Metaspace */
    sits_tok_prepend_t prepend;          /* Metaspace */
    int scripts[5];                      /* UnicodeScripts: group numbers of Han, Hiragana, Katakana, Hangul, Unknown */
};
sits_status_t sits_tok_pre_parse(const json_t *o, sits_tok_pre_t **steps_p, size_t *n_p);
int sits_tok_pre_is_bytelevel(const sits_tok_pre_t *p);
/* prepend_scheme (or the legacy add_prefix_space) of Metaspace pre-tokenizers and decoders */
sits_status_t sits_tok_prepend_parse(const json_t *o, sits_tok_prepend_t *p);
void sits_tok_pre_free(sits_tok_pre_t *steps, size_t n);

/* decoders.c: a list of strings -> a list of strings (tokenizers decode_chain). */
typedef struct { tok_buf_t *v; size_t n, cap; } tok_strs_t;
typedef struct {
    const char *name;
    int (*apply)(const sits_tok_dec_t *d, const tok_strs_t *in, tok_strs_t *out);  /* -1 on ENOMEM */
} sits_tok_dec_ops_t;
struct sits_tok_dec {
    const sits_tok_dec_ops_t *ops;
    char *a, *b;        /* Replace pattern/content; Strip content; Metaspace replacement; WordPiece prefix;
                           BPEDecoder suffix; CTC pad / word delimiter */
    pcre2_code *re;     /* Replace Regex */
    int start, stop;    /* Strip */
    int cleanup;        /* WordPiece, CTC */
    sits_tok_prepend_t prepend;
};
sits_status_t sits_tok_dec_parse(const json_t *o, sits_tok_dec_t **steps_p, size_t *n_p);
void sits_tok_dec_free(sits_tok_dec_t *steps, size_t n);

/* postproc.c: ids added around the sequence by add_special. */
sits_status_t sits_tok_post_parse(const json_t *o, const sits_tokenizer_t *t, int32_t **prefix_p, size_t *n_prefix_p,
                                  int32_t **suffix_p, size_t *n_suffix_p);

/* models.c */
typedef struct {
    const char *name;
    /* word w[0..n) (a pre-token) -> ids appended to c->out; 0 ok, -1 out of memory, -2 not encodable (logged) */
    int (*encode_word)(const sits_tokenizer_t *t, tok_ctx_t *c, const char *w, size_t n);
} sits_tok_model_ops_t;

typedef struct {
    char **keys;   /* model vocabulary strings by id (NULL holes) */
    uint32_t *lens;
    size_t n;
} tok_model_keys_t;
/* Reads the model's vocabulary, sizes the id space over it and the added tokens (max id + 1), fills
 * t->tokens from it and builds t->vocab; then the model's own parts (merges, scores, unk). */
sits_status_t sits_tok_model_parse(sits_tokenizer_t *t, const json_t *m, const json_t *added, tok_model_keys_t *mk);
void sits_tok_model_free(sits_tokenizer_t *t);

/* (left id, right id) -> (rank, merged id) */
typedef struct {
    uint64_t *keys;  /* UINT64_MAX empty */
    int32_t *rank;
    int32_t *merged;
    uint32_t mask;
} sits_tok_mergemap_t;

/* ------------------------------------------------------------------ the tokenizer */

typedef struct {
    char *s;        /* NUL-terminated; may be NULL for holes in the id space */
    uint32_t len;
    uint8_t added;  /* from added_tokens */
    uint8_t special;
} sits_tok_entry_t;

typedef struct {
    int32_t id;
    uint8_t lstrip, rstrip, special, single_word, normalized;
    char *pattern;      /* the text matched: content, or content through the normalizer when normalized */
    uint32_t plen;
} sits_tok_added_t;

/* one set of added-token patterns (raw or normalized), by first byte, longest first */
typedef struct {
    uint32_t *by_byte[256];  /* indices into added */
    uint32_t n_by_byte[256];
    size_t n;
} sits_tok_addset_t;

#define SITS_TOK_CACHE_SLOTS 8192
#define SITS_TOK_CACHE_KEY_MAX 48
#define SITS_TOK_CACHE_IDS_MAX 16
typedef struct {
    uint32_t hash;
    uint8_t klen, nids;  /* klen 0: empty */
    char key[SITS_TOK_CACHE_KEY_MAX];
    int32_t ids[SITS_TOK_CACHE_IDS_MAX];
} sits_tok_cache_slot_t;

struct sits_tokenizer {
    sits_tok_entry_t *tokens;
    size_t vocab_size;
    sits_tok_strmap_t vocab;  /* model vocabulary (keys: tokens[] for ids not overridden) */
    sits_tok_strmap_t added_map;
    /* model */
    const sits_tok_model_ops_t *model;
    sits_tok_mergemap_t merges;     /* BPE */
    int ignore_merges, byte_fallback, fuse_unk;
    int32_t unk_id;
    int32_t byte_token[256];        /* <0xXX> ids, -1 when absent */
    char *csp, *eow;                /* BPE continuing_subword_prefix / end_of_word_suffix; WordPiece prefix */
    size_t csp_len, eow_len;
    int max_input_chars;            /* WordPiece */
    double *scores;                 /* Unigram, by id */
    double unk_score;               /* Unigram: min score - 10 */
    uint32_t max_token_len;         /* Unigram: longest vocab string in bytes */
    /* added tokens */
    sits_tok_added_t *added;
    size_t n_added;
    sits_tok_addset_t add_raw, add_norm;
    /* pipeline */
    sits_tok_norm_t *norm;
    size_t n_norm;
    sits_tok_pre_t *pre;
    size_t n_pre;
    int bytelevel;                  /* words reach the model as raw bytes to map lazily (ByteLevel last) */
    int32_t bytelevel_id[256];      /* id of the one-char token of each byte (-1 absent) */
    int need_regex_md;              /* some pre-tokenizer step matches a regex */
    sits_tok_dec_t *dec;
    size_t n_dec;
    int has_decoder;
    int32_t *post_prefix, *post_suffix;
    size_t n_post_prefix, n_post_suffix;
    /* configs */
    char *bos_token, *eos_token;
    int32_t bos_id;
    int32_t *stop_ids;
    size_t n_stop_ids;
    /* word cache (the only mutable part; trylock so encoders never wait on each other) */
    pthread_mutex_t cache_lock;
    sits_tok_cache_slot_t *cache;
};

/* per-encode scratch */
typedef struct { size_t s, e; int m; } tok_seg_t;
typedef struct { int32_t rank, pos, merged; } tok_merge_t;
struct tok_ctx {
    int32_t *id, *prev, *next;   /* BPE symbols */
    tok_merge_t *heap;
    size_t cap, nheap;
    double *score;               /* Unigram Viterbi */
    int32_t *best_id, *best_from;
    size_t vcap;
    pcre2_match_data *md;
    tok_buf_t mapped;            /* byte-level mapped word, prefixed/suffixed strings */
    tok_buf_t work[2];           /* pre-tokenizer text buffers */
    tok_buf_t norm[2];           /* normalizer buffers */
    tok_pieces_t pieces[2];
    tok_ids_t out;
    tok_seg_t *segs;
    size_t nsegcap;
};

/* Lookup in the model vocabulary during encode (ids overridden by an added token are not found). */
int32_t sits_tok_vocab_get(const sits_tokenizer_t *t, const char *s, size_t n);

#endif
