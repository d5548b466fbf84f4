/* gguf.h -- GGUF files (llama.cpp's single-file checkpoints, versions 2 and 3), mmapped: header,
 * metadata key/values, tensor infos, and the dequantisation of their data to fp32.
 *
 * File layout (all little-endian): "GGUF" u32 version, u64 tensor count, u64 kv count; kv count
 * times {string key, u32 value type, value}; tensor count times {string name, u32 n_dims (<= 4),
 * u64 ne[n_dims] (innermost first), u32 ggml type, u64 offset}; padding to general.alignment
 * (u32, a power of two, default 32); the data section, where each tensor starts at an aligned
 * offset. A string is u64 length + bytes (no NUL); an array value is u32 element type, u64 count,
 * elements (no nested arrays).
 *
 * Validation happens before any allocation proportional to something not yet checked against the
 * file size, and each failure names the file, the key or tensor and the reason: truncated file,
 * bad magic or version, counts or string lengths past the end of the file, duplicate keys or
 * tensor names, unknown value or ggml types, a dimension not a multiple of the type's block size,
 * byte sizes that overflow, offsets misaligned, past the data section or overlapping.
 *
 * Dequantisation (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and the K-quants Q2_K .. Q6_K of llama.cpp's
 * Q4_K_M / Q5_K_M / Q6_K files) gives the bits of gguf-py's numpy
 * dequantisers (gguf/quants.py, which transformers' GGUF loader calls): fp32 arithmetic, one
 * rounding per operation, no FMA contraction. Other ggml types are refused by name.
 *
 * GGUF dims list the innermost first: ne = [576, 49152] is a row-major [49152, 576] matrix. */
#ifndef SITS_MODEL_GGUF_H
#define SITS_MODEL_GGUF_H

#include <stddef.h>
#include <stdint.h>
#include "util/status.h"

#define SITS_GGUF_MAX_DIMS 4
#define SITS_GGUF_DEFAULT_ALIGNMENT 32u

/* Metadata value types (GGUF spec numbering). */
typedef enum {
    SITS_GGUF_UINT8 = 0, SITS_GGUF_INT8 = 1, SITS_GGUF_UINT16 = 2, SITS_GGUF_INT16 = 3,
    SITS_GGUF_UINT32 = 4, SITS_GGUF_INT32 = 5, SITS_GGUF_FLOAT32 = 6, SITS_GGUF_BOOL = 7,
    SITS_GGUF_STRING = 8, SITS_GGUF_ARRAY = 9, SITS_GGUF_UINT64 = 10, SITS_GGUF_INT64 = 11,
    SITS_GGUF_FLOAT64 = 12
} sits_gguf_vtype_t;

/* The ggml tensor types this module dequantises (ggml numbering; the others are known by name
 * and block size only). */
enum {
    SITS_GGML_F32 = 0, SITS_GGML_F16 = 1, SITS_GGML_Q4_0 = 2, SITS_GGML_Q4_1 = 3,
    SITS_GGML_Q5_0 = 6, SITS_GGML_Q5_1 = 7, SITS_GGML_Q8_0 = 8, SITS_GGML_Q2_K = 10, SITS_GGML_Q3_K = 11,
    SITS_GGML_Q4_K = 12, SITS_GGML_Q5_K = 13, SITS_GGML_Q6_K = 14, SITS_GGML_BF16 = 30
};

typedef struct {
    const char *key;            /* NUL-terminated copy */
    sits_gguf_vtype_t type;     /* SITS_GGUF_ARRAY for arrays */
    sits_gguf_vtype_t elem_type;/* arrays: the element type; scalars: == type */
    uint64_t n;                 /* arrays: element count; scalars: 1 */
    const unsigned char *raw;   /* into the file: the value (arrays: the first element) */
} sits_gguf_kv_t;

typedef struct {
    const char *name;           /* NUL-terminated copy */
    int ggml_type;
    int ndim;
    int64_t ne[SITS_GGUF_MAX_DIMS]; /* innermost first; unused dims 1 */
    uint64_t offset;            /* from the start of the data section */
    const void *data;           /* into the file */
    size_t nbytes;
} sits_gguf_tensor_t;

typedef struct sits_gguf sits_gguf_t;

/* Parse and validate a whole file image (len bytes at buf, which must outlive the handle); `what`
 * names it in messages. (Used by sits_gguf_open and the tests.) */
sits_status_t sits_gguf_parse(const void *buf, size_t len, const char *what, sits_gguf_t **g_p);
/* mmap and parse path. */
sits_status_t sits_gguf_open(const char *path, sits_gguf_t **g_p);
void sits_gguf_close(sits_gguf_t *g);

const char *sits_gguf_path(const sits_gguf_t *g);
uint32_t sits_gguf_version(const sits_gguf_t *g);
uint32_t sits_gguf_alignment(const sits_gguf_t *g);

size_t sits_gguf_kv_count(const sits_gguf_t *g);
const sits_gguf_kv_t *sits_gguf_kv_at(const sits_gguf_t *g, size_t i);
/* NULL when absent. */
const sits_gguf_kv_t *sits_gguf_kv_find(const sits_gguf_t *g, const char *key);
/* Scalar value i of kv (i < n; for scalars i = 0) as a number: integers and bools exactly into
 * *i64_p / *u64_p (SITS_ERR_INVALID when out of range or not an integer type), floats into *f64_p
 * (any numeric type). */
sits_status_t sits_gguf_kv_get_i64(const sits_gguf_kv_t *kv, uint64_t i, int64_t *i64_p);
sits_status_t sits_gguf_kv_get_u64(const sits_gguf_kv_t *kv, uint64_t i, uint64_t *u64_p);
sits_status_t sits_gguf_kv_get_f64(const sits_gguf_kv_t *kv, uint64_t i, double *f64_p);
/* String value i of a string or string-array kv: pointer into the file (not NUL-terminated). */
sits_status_t sits_gguf_kv_get_str(const sits_gguf_t *g, const sits_gguf_kv_t *kv, uint64_t i, const char **s_p,
                                   size_t *len_p);

size_t sits_gguf_tensor_count(const sits_gguf_t *g);
const sits_gguf_tensor_t *sits_gguf_tensor_at(const sits_gguf_t *g, size_t i);
const sits_gguf_tensor_t *sits_gguf_tensor_find(const sits_gguf_t *g, const char *name);
static inline uint64_t sits_gguf_tensor_numel(const sits_gguf_tensor_t *t)
{
    uint64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= (uint64_t)t->ne[d];
    return n;
}

/* "Q4_1" etc.; NULL for a number ggml does not define. */
const char *sits_ggml_type_name(int ggml_type);
/* 1 when sits_gguf_dequantize handles the type. */
int sits_ggml_type_supported(int ggml_type);

/* All numel elements of t as fp32, row-major (innermost dim fastest), into out. Refuses an
 * unsupported type (SITS_ERR_UNSUPPORTED, naming the type and the tensor). */
sits_status_t sits_gguf_dequantize(const sits_gguf_t *g, const sits_gguf_tensor_t *t, float *out);

/* The HF (transformers) name of a llama-architecture GGUF tensor name into buf: token_embd ->
 * model.embed_tokens, blk.N.attn_q -> model.layers.N.self_attn.q_proj, ... output -> lm_head
 * (the suffix .weight / .bias kept). SITS_ERR_NOT_FOUND (nothing logged) for a name without
 * an HF counterpart (rope_freqs, ...). */
sits_status_t sits_gguf_hf_name(const char *gguf_name, char *buf, size_t len);
/* [gguf gemma] The same for architecture arch: gemma2 / gemma3 name their four norms a layer otherwise
 * (attn_norm, post_attention_norm, ffn_norm -> pre_feedforward_layernorm, post_ffw_norm); llama, qwen2, qwen3 as above;
 * [gguf phi3] phi3's fused attn_qkv / ffn_up -> self_attn.qkv_proj / mlp.gate_up_proj; [gguf moe] qwen3moe's router
 * ffn_gate_inp -> mlp.gate and its experts' 3D tensors ffn_{gate,up,down}_exps [E, rows, cols] ->
 * mlp.experts.*.{gate,up,down}_proj: a '*' the caller replaces with each expert's index (one slice each). */
sits_status_t sits_gguf_hf_name_arch(const char *arch, const char *gguf_name, char *buf, size_t len);
/* Undo llama.cpp's row permutation of attn_q / attn_k (convert_hf_to_gguf.py permute()) in place,
 * as transformers' LlamaTensorProcessor._reverse_permute_weights does: w is [rows, cols] with
 * rows = n_head * head_dim; HF row h*hd + j*(hd/2) + i comes from GGUF row h*hd + 2*i + j.
 * n_head is num_attention_heads for q and num_key_value_heads for k. tmp holds rows * cols floats. */
sits_status_t sits_gguf_unpermute_qk(float *w, int64_t rows, int64_t cols, int64_t n_head, float *tmp);

/* [gguf] A GGUF served on its own (gguf_dir.c): when `model` is a *.gguf file, or a directory holding one GGUF and no
 * config.json, *dir_p = a new private directory (removed at exit) with a link to the file and the config.json,
 * tokenizer.json and tokenizer_config.json transformers would rebuild from its metadata (files the directory has are
 * linked instead); else *dir_p = NULL (nothing to do). A file that cannot be served so is refused with the key and
 * why (an architecture or tokenizer model not rebuilt here). */
sits_status_t sits_gguf_model_dir(const char *model, char **dir_p);

#endif
