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
} sits_st_tensor_t;

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

size_t sits_st_count(const sits_st_t *st);
const sits_st_tensor_t *sits_st_at(const sits_st_t *st, size_t i);
/* NULL when absent. */
const sits_st_tensor_t *sits_st_find(const sits_st_t *st, const char *name);
/* Total bytes of tensor data. */
size_t sits_st_total_bytes(const sits_st_t *st);
/* Number of files mapped (each shard once). */
size_t sits_st_file_count(const sits_st_t *st);

#endif
