/* tokenizer.h -- HF tokenizer.json tokenizers (every normalizer, pre-tokenizer, model, decoder and
 * post-processor of huggingface/tokenizers an LLM tokenizer uses), added tokens, streaming detokenization
 * (chat templates: chat.h).
 *
 * Encoding follows huggingface/tokenizers exactly: added tokens with normalized=false are split out of the
 * raw text first (leftmost-longest, single_word, lstrip/rstrip), each remaining segment goes through the
 * normalizer (NFC/NFD/NFKC/NFKD, Lowercase, Strip, StripAccents, Replace, Prepend, BertNormalizer,
 * Precompiled, ByteLevel), then added tokens with normalized=true are split out of the normalized text, the
 * rest goes through the pre-tokenizer (ByteLevel, Split, Digits, Metaspace, Whitespace, WhitespaceSplit,
 * Punctuation, CharDelimiterSplit, UnicodeScripts, BertPreTokenizer; PCRE2, UTF + UCP, JIT) and the model
 * (BPE, Unigram, WordPiece), then the post-processor (TemplateProcessing, Bert/RobertaProcessing) adds its
 * ids when add_special is set. Decoding maps ids to token strings and runs the decoder chain (ByteLevel,
 * Metaspace, WordPiece, BPEDecoder, Replace, ByteFallback, Fuse, Strip, CTC); invalid UTF-8 produced by byte
 * tokens becomes U+FFFD (as Rust's from_utf8_lossy). Components that are not implemented (WordLevel, Nmt,
 * BPE dropout, ...) are refused at load, naming them.
 *
 * A loaded tokenizer is immutable except for an internal word cache guarded by a mutex: encode and
 * decode may be called from several threads at once. A sits_detok_t belongs to one thread/sequence. */
#ifndef SITS_TOKENIZER_TOKENIZER_H
#define SITS_TOKENIZER_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>
#include "util/status.h"

typedef struct sits_tokenizer sits_tokenizer_t;
typedef struct sits_detok sits_detok_t;

/* Reads model_dir/tokenizer.json (required), tokenizer_config.json (bos/eos token strings),
 * generation_config.json and config.json (bos_token_id, eos_token_id: int or list), all optional. */
sits_status_t sits_tokenizer_load(const char *model_dir, sits_tokenizer_t **tok_p);
/* Only a tokenizer.json document (no side files); used by tests for refused components. */
sits_status_t sits_tokenizer_load_json_string(const char *json, size_t len, sits_tokenizer_t **tok_p);
void sits_tokenizer_destroy(sits_tokenizer_t *tok);

/* text: len bytes of UTF-8 (invalid UTF-8 -> SITS_ERR_INVALID). add_special: apply the post-processor
 * (e.g. BOS of TemplateProcessing; the empty text then gives only those ids). *ids_p is malloc'd (free());
 * may be NULL when *n_p == 0. */
sits_status_t sits_tokenizer_encode(const sits_tokenizer_t *tok, const char *text, size_t len, int add_special,
                                    int32_t **ids_p, size_t *n_p);
/* ids -> UTF-8 text (malloc'd, NUL-terminated; *len_p excludes the NUL). skip_special drops special
 * added tokens. Ids outside the vocabulary -> SITS_ERR_INVALID. */
sits_status_t sits_tokenizer_decode(const sits_tokenizer_t *tok, const int32_t *ids, size_t n, int skip_special,
                                    char **text_p, size_t *len_p);

size_t sits_tokenizer_vocab_size(const sits_tokenizer_t *tok);      /* max id + 1 over model and added tokens */
int32_t sits_tokenizer_bos_id(const sits_tokenizer_t *tok);         /* -1 when none */
int32_t sits_tokenizer_eos_id(const sits_tokenizer_t *tok);         /* first stop id, -1 when none */
/* The tokenizer's own eos: tokenizer_config.json's eos_token when it names a token (what HF's / vLLM's
 * tokenizer.eos_token_id is), else the first stop id; -1 when none. */
int32_t sits_tokenizer_own_eos_id(const sits_tokenizer_t *tok);
/* Ids that end generation: eos ids of generation_config.json (one or a list, in its order), then
 * config.json's, then tokenizer_config.json's eos_token -- what transformers' generate and vLLM stop on. */
size_t sits_tokenizer_stop_ids(const sits_tokenizer_t *tok, const int32_t **ids_p);
int sits_tokenizer_is_special(const sits_tokenizer_t *tok, int32_t id);
/* Token string of an id (raw vocabulary form, e.g. "Ġthe"), NULL when out of range. */
const char *sits_tokenizer_id_to_token(const sits_tokenizer_t *tok, int32_t id);
/* Id of a token string (added tokens first, then the model vocabulary), -1 when absent. */
int32_t sits_tokenizer_token_to_id(const sits_tokenizer_t *tok, const char *token);
/* [structured output] The bytes token `id` adds to decoded text, independent of its neighbours:
 * byte-level vocabularies map the GPT-2 alphabet back to bytes, SentencePiece-style ones turn U+2581
 * into a space and <0xXX> into its byte; a non-special added token is its content. Returns 0 with
 * *len_p bytes written to out (at least 4 * strlen(token) + 1 bytes: SITS_TOKEN_BYTES_MAX is enough for
 * any token of a loaded vocabulary up to that size), or -1 for special tokens, holes and ids out of range. */
#define SITS_TOKEN_BYTES_MAX 1024
int sits_tokenizer_token_bytes(const sits_tokenizer_t *tok, int32_t id, char *out, size_t cap, size_t *len_p);


/* Incremental decoder: push ids one at a time, get the bytes that are ready. Never emits a broken UTF-8
 * sequence; the concatenation of all pushes and the flush equals sits_tokenizer_decode of all ids.
 * *text_p stays valid until the next call on this decoder. */
sits_status_t sits_detok_create(const sits_tokenizer_t *tok, int skip_special, sits_detok_t **dt_p);
sits_status_t sits_detok_push(sits_detok_t *dt, int32_t id, const char **text_p, size_t *len_p);
sits_status_t sits_detok_flush(sits_detok_t *dt, const char **text_p, size_t *len_p);
void sits_detok_destroy(sits_detok_t *dt);

/* Strict UTF-8 check (no overlongs, surrogates or code points > U+10FFFF). Returns 1 when valid; else 0
 * and the offset of the first bad byte in *bad_p (if non-NULL). */
int sits_utf8_valid(const char *s, size_t len, size_t *bad_p);

#endif
