/* grammar.h -- structured output: JSON schema / json_object / regex / choice -> a byte-level
 * context-free grammar -> per-step allowed-token bitmasks over a tokenizer's vocabulary.
 *
 * Grammar: rules of alternatives of sequences of elements; an element is a byte set (256 bits) or a
 * reference to a rule. The compilers (json schema, regex, choice) emit no left recursion, and they
 * emit UTF-8 structure explicitly (a JSON string's characters are valid UTF-8 sequences), so matching
 * bytes is matching text.
 * Matcher: the state of a sequence is the set of parse stacks that are still alive (llama.cpp's
 * grammar sampler method); stacks are hash-consed nodes (position, parent) in an arena owned by the
 * grammar, so two stacks are equal iff their node ids are, and a set of stacks is a sorted id list.
 * The empty stack means "the document is complete".
 * Token masks (exact): a token is allowed iff its bytes, fed one by one, keep some stack alive (or,
 * for a stop token, iff the document is complete). The vocabulary is a byte trie built once per
 * tokenizer (sits_grammar_vocab_t); a mask walks the trie depth-first, advancing the stack set one
 * byte per edge and pruning dead subtrees. Masks are cached per stack set in the grammar (the set
 * determines the language that may follow, hence the mask), so a state seen before -- the inside of
 * a string, the digits of a number, another sequence of the same batch at the same place -- costs a
 * hash lookup and a copy.
 * Threads: a grammar's matcher and its states are used by one thread at a time (the scheduler's); its
 * reference count is atomic; the vocabulary is immutable and may be shared.
 * Mask layout: uint32 words [ceil(vocab / 32)], bit (id & 31) of word (id >> 5) set = allowed. */
#ifndef SITS_GRAMMAR_GRAMMAR_H
#define SITS_GRAMMAR_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>
#include "tokenizer/tokenizer.h"
#include "util/status.h"

typedef struct sits_grammar sits_grammar_t;
typedef struct sits_grammar_vocab sits_grammar_vocab_t;
typedef struct sits_grammar_state sits_grammar_state_t;

#define SITS_GRAMMAR_MASK_WORDS(v_) (((size_t)(v_) + 31) / 32)

/* The byte trie of a vocabulary: token i's bytes (sits_tokenizer_token_bytes; special tokens hold
 * none and are never allowed except stop ids), stop_ids[n_stop] end a complete document.
 * vocab_size may exceed the tokenizer's (padded lm_head rows: never allowed). */
sits_status_t sits_grammar_vocab_create(const sits_tokenizer_t *tok, int vocab_size, const int32_t *stop_ids, int n_stop,
                                        sits_grammar_vocab_t **vocab_p);
/* Same from explicit token byte strings (tests, benches): bytes[i] of lens[i] bytes, NULL = no text. */
sits_status_t sits_grammar_vocab_create_bytes(const char *const *bytes, const size_t *lens, int vocab_size,
                                              const int32_t *stop_ids, int n_stop, sits_grammar_vocab_t **vocab_p);
void sits_grammar_vocab_destroy(sits_grammar_vocab_t *vocab);
int sits_grammar_vocab_size(const sits_grammar_vocab_t *vocab);

/* Compilers. On SITS_ERR_INVALID, err (err_len bytes) says why, naming the unsupported keyword or the
 * position of the error. schema: JSON text of a JSON schema (draft 2020-12 subset: type (one or a list),
 * properties, required, additionalProperties (false, or absent with properties: no extra keys; true /
 * a schema: extra keys after the listed ones), items, prefixItems, minItems, maxItems, enum, const,
 * anyOf, oneOf (as anyOf), allOf of one schema, $ref to #/$defs or #/definitions (recursion allowed),
 * minLength, maxLength, pattern (the regex subset below); title, description, default, examples,
 * $schema, $id, $comment, strict are ignored; anything else is refused).
 * Output is compact JSON with at most one space after ':' and ','; properties come in schema order. */
sits_status_t sits_grammar_from_json_schema(const char *schema, size_t len, char *err, size_t err_len,
                                            sits_grammar_t **g_p);
/* [tool calls] JSON documents of a schema inside literal text: before, then 1..max_items (max_items < 0:
 * unbounded) items item_open DOC item_close separated by sep, then after. All strings non-NULL. */
typedef struct {
    const char *before, *item_open, *item_close, *sep, *after;
    int max_items;
} sits_grammar_frame_t;
sits_status_t sits_grammar_from_json_schema_framed(const char *schema, size_t len, const sits_grammar_frame_t *frame, char *err,
                                                   size_t err_len, sits_grammar_t **g_p);
/* Any JSON object (response_format json_object). */
sits_status_t sits_grammar_from_json_object(sits_grammar_t **g_p);
/* A regex (whole-match): literals, escapes (\d \w \s \D \W \S \. \n \t \\ ...), ., [...] / [^...] classes of
 * ASCII, groups (...) (?:...), |, * + ? {m} {m,} {m,n}; ^ at the start and $ at the end are accepted. */
sits_status_t sits_grammar_from_regex(const char *re, size_t len, char *err, size_t err_len, sits_grammar_t **g_p);
/* One of n literal strings. */
sits_status_t sits_grammar_from_choice(const char *const *choices, const size_t *lens, int n, sits_grammar_t **g_p);
/* [allowed_token_ids] vLLM's allowed_token_ids: not a language of bytes but a set of n >= 1 token ids (copied), every
 * step's mask -- nothing else is sampled, eos and stop ids only when listed (a listed one ends the output). */
sits_status_t sits_grammar_from_token_ids(const int32_t *ids, int n, sits_grammar_t **g_p);
/* [allowed_token_ids] inner (a grammar of bytes, kept by a reference) restricted to n >= 1 token ids: every mask is
 * inner's and the set's, a token is accepted when both take it (vLLM applies allowed_token_ids beside structured
 * output). A step where they share no token has an empty mask. */
sits_status_t sits_grammar_restrict(sits_grammar_t *inner, const int32_t *ids, int n, sits_grammar_t **g_p);
/* Grammars are reference-counted (a server shares one among the requests of the same constraint): ref adds
 * one (any thread), destroy drops one and frees at zero. The matcher state inside (arena, transitions, mask
 * cache) is still one thread's at a time: the scheduler's. */
sits_grammar_t *sits_grammar_ref(sits_grammar_t *g);
void sits_grammar_destroy(sits_grammar_t *g);

/* A sequence's matcher at the start of the document. The grammar and vocab must outlive it. */
sits_status_t sits_grammar_state_create(sits_grammar_t *g, const sits_grammar_vocab_t *vocab, sits_grammar_state_t **st_p);
void sits_grammar_state_destroy(sits_grammar_state_t *st);
/* mask: SITS_GRAMMAR_MASK_WORDS(vocab size) words, written whole. */
sits_status_t sits_grammar_state_mask(sits_grammar_state_t *st, uint32_t *mask);
/* Feed the sampled token. SITS_ERR_INVALID when the mask would not have allowed it (state unchanged). */
sits_status_t sits_grammar_state_accept(sits_grammar_state_t *st, int32_t token);
/* Whether accept would take token now (1), byte by byte, without the mask (the state is unchanged):
 * the definition a mask must equal. -1 out of memory. */
int sits_grammar_state_accepts(sits_grammar_state_t *st, int32_t token);
/* Bytes fed so far form a complete document (a stop token is allowed now). */
int sits_grammar_state_complete(const sits_grammar_state_t *st);
/* Whether text (len bytes) is a complete document of the grammar (tests; 0 for a token-id set). */
int sits_grammar_matches(sits_grammar_t *g, const char *text, size_t len);

/* Counters of the mask cache (bench). */
void sits_grammar_cache_stats(const sits_grammar_t *g, long *hits_p, long *misses_p);

#endif
