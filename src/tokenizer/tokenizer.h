/* tokenizer.h -- HF tokenizer.json tokenizers (every normalizer, pre-tokenizer, model, decoder and
 * post-processor of huggingface/tokenizers an LLM tokenizer uses), added tokens, streaming detokenization
 * and chat templates.
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

/* Reads model_dir/tokenizer.json (required), tokenizer_config.json (bos/eos token strings, chat_template),
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
/* Ids that end generation: eos ids of generation_config.json / config.json / tokenizer_config.json and
 * the end-of-turn token of the chat template (<|eot_id|>, <|im_end|>) when in the vocabulary. */
size_t sits_tokenizer_stop_ids(const sits_tokenizer_t *tok, const int32_t **ids_p);
int sits_tokenizer_is_special(const sits_tokenizer_t *tok, int32_t id);
/* Token string of an id (raw vocabulary form, e.g. "Ġthe"), NULL when out of range. */
const char *sits_tokenizer_id_to_token(const sits_tokenizer_t *tok, int32_t id);
/* Id of a token string (added tokens first, then the model vocabulary), -1 when absent. */
int32_t sits_tokenizer_token_to_id(const sits_tokenizer_t *tok, const char *token);
/* chat_template string of tokenizer_config.json, NULL when none. */
const char *sits_tokenizer_chat_template(const sits_tokenizer_t *tok);

/* Incremental decoder: push ids one at a time, get the bytes that are ready. Never emits a broken UTF-8
 * sequence; the concatenation of all pushes and the flush equals sits_tokenizer_decode of all ids.
 * *text_p stays valid until the next call on this decoder. */
sits_status_t sits_detok_create(const sits_tokenizer_t *tok, int skip_special, sits_detok_t **dt_p);
sits_status_t sits_detok_push(sits_detok_t *dt, int32_t id, const char **text_p, size_t *len_p);
sits_status_t sits_detok_flush(sits_detok_t *dt, const char **text_p, size_t *len_p);
void sits_detok_destroy(sits_detok_t *dt);

/* ---- chat templates ---- */
typedef enum {
    SITS_CHAT_NONE = 0,
    SITS_CHAT_LLAMA3,   /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> (Llama-3 Instruct) */
    SITS_CHAT_LLAMA2,   /* [INST] <<SYS>> ... [/INST] (Llama-2-chat) */
    SITS_CHAT_MISTRAL,  /* [INST] ... [/INST] without system (Mistral-Instruct v0.1/v0.2) */
    SITS_CHAT_CHATML    /* <|im_start|>role\n...<|im_end|>\n (Qwen2) */
} sits_chat_kind_t;

typedef struct {
    const char *role;     /* "system", "user", "assistant" */
    const char *content;  /* UTF-8, NUL-terminated */
} sits_chat_msg_t;

/* "llama3", "llama2", "mistral", "chatml" (also "qwen2") -> kind; unknown -> SITS_ERR_INVALID, logged. */
sits_status_t sits_chat_template_by_name(const char *name, sits_chat_kind_t *kind_p);
/* Recognise a tokenizer_config.json chat_template string; unknown -> SITS_ERR_UNSUPPORTED, logged. */
sits_status_t sits_chat_template_detect(const char *template_text, sits_chat_kind_t *kind_p);
const char *sits_chat_template_name(sits_chat_kind_t kind);
/* Render as transformers apply_chat_template(tokenize=False) does for that family. bos/eos: token
 * strings (may be ""). Role-order violations the real template raises on -> SITS_ERR_INVALID.
 * *out_p is malloc'd and NUL-terminated. */
sits_status_t sits_chat_render_kind(sits_chat_kind_t kind, const char *bos, const char *eos,
                                    const sits_chat_msg_t *msgs, size_t n, int add_generation_prompt, char **out_p);
/* template_name NULL or "": recognise tokenizer_config.json's chat_template (error when absent/unknown);
 * else the named family (e.g. from --chat-template). bos/eos strings come from tokenizer_config.json.
 * The rendered text already holds BOS: encode it with add_special = 0. */
sits_status_t sits_chat_render(const sits_tokenizer_t *tok, const char *template_name, const sits_chat_msg_t *msgs,
                               size_t n, int add_generation_prompt, char **out_p);

/* Strict UTF-8 check (no overlongs, surrogates or code points > U+10FFFF). Returns 1 when valid; else 0
 * and the offset of the first bad byte in *bad_p (if non-NULL). */
int sits_utf8_valid(const char *s, size_t len, size_t *bad_p);

#endif
