/* safetensors.h -- mmapped safetensors checkpoints: one file or a sharded set with
 * model.safetensors.index.json.
 *
 * File layout: u64 LE header length N (8 <= N <= 100 000 000, 8 + N <= file size), N bytes of JSON
 * object {name: {dtype, shape, data_offsets: [b, e]}, "__metadata__": {str: str}}, then the data
 * area. Validation (each failure names the file, the tensor and the reason, and happens before
 * any large allocation): header within the file, JSON well-formed and an object, dtype known,
 * shape non-negative integers, 0 <= b <= e <= data size, e - b == prod(shape) * dtype size,
 * no two tensors overlapping; index: weight_map an object of strings naming files that exist,
 * every tensor listed present in its file. Data is never cast in place: it may be unaligned.
 *
 * GGUF: a directory whose weights are one *.gguf file (no index, no *.safetensors) loads through
 * model/gguf.h: its llama-architecture tensors are dequantised to one fp32 buffer owned by the
 * handle and exposed as F32 entries under their transformers names and shapes (q/k rows
 * un-permuted, as transformers' GGUF loader does). config.json and the tokenizer files still come
 * from the directory. */
#ifndef SITS_MODEL_SAFETENSORS_H
#define SITS_MODEL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include "util/dtype.h"
#include "util/status.h"

#define SITS_ST_MAX_DIMS 8
#define SITS_ST_MAX_HEADER 100000000ull

typedef struct {
    char *name;
    sits_dtype_t dtype;
    int ndim;
    int64_t shape[SITS_ST_MAX_DIMS];
    const void *data;        /* into the mapping; not aligned */
    size_t nbytes;
    const char *file;        /* path of the file that holds it */
    /* [gpt-oss] a view (view.kind != SITS_ST_VIEW_NONE): data NULL, nbytes 0; its elements (i, j) of shape [rows, cols]
     * ([cols] when 1-D, i = 0) live in another tensor's bytes and are read with sits_st_view_rows_f32 only:
     *   STRIDED  element off + i s0 + j s1 of base, of dtype view.dt (F32 / F16 / BF16; dtype says the same)
     *   MXFP4    row off + i s0 of an MXFP4 tensor pair: base [*, cols / 32, 16] bytes of FP4 E2M1 codes, two a byte
     *            (element 2m in the low nibble), scales [*, cols / 32] E8M0 bytes (2^(b - 127)); dtype F32 */
    struct {
        int kind;
        sits_dtype_t dt;
        const void *base, *scales;
        int64_t off, s0, s1;
    } view;
} sits_st_tensor_t;

enum { SITS_ST_VIEW_NONE = 0, SITS_ST_VIEW_STRIDED = 1, SITS_ST_VIEW_MXFP4 = 2 };

typedef struct sits_st sits_st_t;

/* Parse and validate a header from memory: buf is the whole file (len bytes); `what` names it in
 * messages. Tensors' data pointers point into buf. (Used by sits_st_open and the fuzz/unit tests.) */
sits_status_t sits_st_parse(const void *buf, size_t len, const char *what, sits_st_t **st_p);
/* mmap one .safetensors file. */
sits_status_t sits_st_open_file(const char *path, sits_st_t **st_p);
/* A model directory: model.safetensors.index.json if present (all its shards), else the single
 * *.safetensors file (model.safetensors preferred; several unindexed files are merged, and a
 * tensor name present twice is an error), else the one *.gguf file (several are an error). */
sits_status_t sits_st_open_dir(const char *dir, sits_st_t **st_p);
void sits_st_close(sits_st_t *st);
/* [mm] Tensors named from... renamed to... (the rest kept), the index sorted again; *n_p (may be NULL): how many.
 * SITS_ERR_FORMAT, logged, when a new name is already taken. */
sits_status_t sits_st_rename_prefix(sits_st_t *st, const char *from, const char *to, size_t *n_p);
/* [glm] The same for `from` anywhere in a name (its first occurrence). */
sits_status_t sits_st_rename_infix(sits_st_t *st, const char *from, const char *to, size_t *n_p);

/* [gpt-oss] Add views (sits_st_tensor_t.view) named names[i] with the shapes and views of proto[i] (their name, data,
 * nbytes and file fields are ignored; file is set to `file`), the index then sorted again. A name already taken is
 * refused (SITS_ERR_FORMAT, logged). */
sits_status_t sits_st_add_views(sits_st_t *st, const sits_st_tensor_t *proto, char *const *names, size_t n, const char *file);
/* fp32 values of rows [r, r + n) x cols [c0, c0 + w) of view t into out [n, w]. */
void sits_st_view_rows_f32(const sits_st_tensor_t *t, int64_t r, int64_t n, int64_t c0, int64_t w, float *out);
size_t sits_st_count(const sits_st_t *st);
const sits_st_tensor_t *sits_st_at(const sits_st_t *st, size_t i);
/* NULL when absent. */
const sits_st_tensor_t *sits_st_find(const sits_st_t *st, const char *name);
/* Total bytes of tensor data. */
size_t sits_st_total_bytes(const sits_st_t *st);
/* Number of files mapped (each shard once). */
size_t sits_st_file_count(const sits_st_t *st);

#endif
