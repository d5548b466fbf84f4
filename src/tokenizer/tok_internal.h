/* tok_internal.h -- the tokenizer's internal representation, shared by tokenizer.c (load, encode),
 * decode.c (decode, streaming) and chat.c. Not part of the module's contract.
 *
 * Ids: tokens[id] holds the token string of every id in [0, vocab_size); added tokens override the
 * model vocabulary. Hash tables use open addressing with linear probing over power-of-two sizes. */
#ifndef SITS_TOKENIZER_TOK_INTERNAL_H
#define SITS_TOKENIZER_TOK_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <pcre2.h>
#include "tokenizer/tokenizer.h"

typedef struct {
    char *s;        /* NUL-terminated; may be NULL for holes in the id space */
    uint32_t len;
    uint8_t added;  /* from added_tokens */
    uint8_t special;
} sits_tok_entry_t;

typedef struct {
    int32_t id;
    uint8_t lstrip, rstrip, special;
} sits_tok_added_t;

/* string -> id (keys live in tokens[]) */
typedef struct {
    int32_t *slots;  /* -1 empty */
    uint32_t mask;
} sits_tok_strmap_t;

/* (left id, right id) -> (rank, merged id) */
typedef struct {
    uint64_t *keys;  /* UINT64_MAX empty */
    int32_t *rank;
    int32_t *merged;
    uint32_t mask;
} sits_tok_mergemap_t;

typedef enum { SITS_NORM_PREPEND, SITS_NORM_REPLACE, SITS_NORM_NFC } sits_tok_norm_kind_t;
typedef struct {
    sits_tok_norm_kind_t kind;
    char *a, *b;  /* PREPEND: a = text; REPLACE: a = pattern, b = content */
} sits_tok_norm_t;

typedef enum {
    SITS_SPLIT_REMOVED, SITS_SPLIT_ISOLATED, SITS_SPLIT_MERGED_PREV, SITS_SPLIT_MERGED_NEXT, SITS_SPLIT_CONTIGUOUS
} sits_tok_split_behavior_t;

typedef enum { SITS_PRE_SPLIT, SITS_PRE_BYTELEVEL, SITS_PRE_METASPACE } sits_tok_pre_kind_t;
typedef enum { SITS_PREPEND_ALWAYS, SITS_PREPEND_FIRST, SITS_PREPEND_NEVER } sits_tok_prepend_t;
typedef struct {
    sits_tok_pre_kind_t kind;
    pcre2_code *re;              /* SPLIT, and BYTELEVEL with use_regex */
    sits_tok_split_behavior_t behavior;
    int invert;
    int add_prefix_space;        /* BYTELEVEL */
    char *replacement;           /* METASPACE */
    sits_tok_prepend_t prepend;  /* METASPACE */
    int split;                   /* METASPACE */
} sits_tok_pre_t;

typedef enum {
    SITS_DEC_REPLACE, SITS_DEC_BYTEFALLBACK, SITS_DEC_FUSE, SITS_DEC_STRIP, SITS_DEC_METASPACE, SITS_DEC_BYTELEVEL
} sits_tok_dec_kind_t;
typedef struct {
    sits_tok_dec_kind_t kind;
    char *a, *b;                 /* REPLACE pattern/content; STRIP content (one char); METASPACE replacement */
    int start, stop;             /* STRIP */
    sits_tok_prepend_t prepend;  /* METASPACE */
} sits_tok_dec_t;

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
    sits_tok_strmap_t vocab;  /* model vocabulary */
    sits_tok_strmap_t added_map;
    sits_tok_mergemap_t merges;
    /* BPE model */
    int ignore_merges, byte_fallback, fuse_unk;
    int32_t unk_id;
    int32_t byte_token[256];  /* <0xXX> ids, -1 when absent */
    /* added tokens, by first byte, longest first */
    sits_tok_added_t *added;
    size_t n_added;
    uint32_t *added_by_byte[256];  /* indices into added */
    uint32_t n_added_by_byte[256];
    /* pipeline */
    sits_tok_norm_t *norm;
    size_t n_norm;
    sits_tok_pre_t *pre;
    size_t n_pre;
    int bytelevel;                 /* a ByteLevel pre-tokenizer maps bytes to the GPT-2 alphabet */
    int32_t bytelevel_id[256];     /* id of the one-char token of each byte (-1 absent) */
    sits_tok_dec_t *dec;
    size_t n_dec;
    int has_decoder;
    int32_t *post_prefix, *post_suffix;
    size_t n_post_prefix, n_post_suffix;
    /* configs */
    char *bos_token, *eos_token, *chat_template;
    int32_t bos_id;
    int32_t *stop_ids;
    size_t n_stop_ids;
    /* word cache (the only mutable part; trylock so encoders never wait on each other) */
    pthread_mutex_t cache_lock;
    sits_tok_cache_slot_t *cache;
};

/* GPT-2 byte <-> unicode map */
uint32_t sits_tok_byte_to_cp(uint8_t b);
int sits_tok_cp_to_byte(uint32_t cp);  /* -1 when cp is not in the map */
/* UTF-8 helpers */
size_t sits_tok_utf8_encode(uint32_t cp, char *out);
/* Decode one code point from valid UTF-8, return its length. */
size_t sits_tok_utf8_next(const char *s, size_t len, uint32_t *cp_p);
int sits_tok_is_white_space(uint32_t cp);
/* Rust Utf8Chunks step at s[0]: returns 1 valid (n bytes), 0 invalid (n bytes -> one U+FFFD),
 * 2 incomplete (a valid prefix truncated by the end of the buffer). */
int sits_tok_utf8_step(const unsigned char *s, size_t len, size_t *n_p);

#endif
