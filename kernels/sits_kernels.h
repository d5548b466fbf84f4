/* sits_kernels.h -- plain C launchers of the CUDA kernels (kernels/<op>.cu).
 *
 * Every launcher enqueues its kernel on the given stream, checks cudaGetLastError() and returns a
 * sits_status_t (SITS_ERR_CUDA on a launch error, SITS_ERR_INVALID on arguments the kernel does
 * not handle). Nothing here allocates or synchronises: kernels/ has no host logic.
 *
 * Types: activations, weights and the KV cache are bf16, passed as sits_bf16_t (the raw 16-bit
 * storage, so that C callers need no CUDA C++ types); index arrays are int32; all pointers are
 * device pointers. Shapes are row-major, row strides in elements. Math is fp32 throughout.
 *
 * Paged KV layout (per layer, K and V each): [n_blocks, block_size, n_kv_heads, head_dim]; a token
 * at position p of a sequence with block table bt is in slot bt[p / block_size] * block_size +
 * p % block_size. */
#ifndef SITS_KERNELS_H
#define SITS_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>
#include "util/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef uint16_t sits_bf16_t; /* bf16 bit pattern */

/* out[n, dim] = table[tok - v_start] when v_start <= tok < v_start + v_count, else 0.
 * table: [v_count, dim]; tokens: [n] (vocab-parallel embedding with the out-of-shard mask). */
sits_status_t sits_k_embed(sits_bf16_t *out, const sits_bf16_t *table, const int32_t *tokens, int n, int dim,
                           int v_start, int v_count, cudaStream_t stream);

/* out, x: [n, dim]; w: [dim]. out = x / sqrt(mean(x^2) + eps) * w. out may alias x. */
sits_status_t sits_k_rmsnorm(sits_bf16_t *out, const sits_bf16_t *x, const sits_bf16_t *w, int n, int dim, float eps,
                             cudaStream_t stream);

/* out, residual, x: [n, dim]; w: [dim]. residual += x (rounded to bf16); out = rmsnorm(residual) * w. */
sits_status_t sits_k_add_rmsnorm(sits_bf16_t *out, sits_bf16_t *residual, const sits_bf16_t *x, const sits_bf16_t *w,
                                 int n, int dim, float eps, cudaStream_t stream);

/* In place on x[n, row_stride]: heads 0..n_rot_heads-1 (head_dim wide, from column 0) rotated at
 * pos[t] in the HF half-split (rotate_half) layout: pair (i, i + head_dim/2), angle
 * (float)pos[t] * inv_freq[i]. inv_freq: [head_dim/2] fp32. head_dim even. */
sits_status_t sits_k_rope(sits_bf16_t *x, int n, int row_stride, int n_rot_heads, int head_dim, const int32_t *pos,
                          const float *inv_freq, cudaStream_t stream);

/* k_cache[slot[t], :] = qkv[t, k_col : k_col + kv_dim], v_cache likewise from v_col; caches
 * [n_slots, kv_dim]; qkv [n, row_stride]; slot_mapping [n], -1 = skip. */
sits_status_t sits_k_kv_write(sits_bf16_t *k_cache, sits_bf16_t *v_cache, const sits_bf16_t *qkv, int n, int row_stride,
                              int k_col, int v_col, int kv_dim, const int32_t *slot_mapping, cudaStream_t stream);

/* Paged attention, one block per (token, head), online softmax over the whole context.
 * out: [n_tokens, n_heads * head_dim]; q: rows of q_row_stride, head h at column h * head_dim;
 * token t of sequence seq[t] at pos[t] attends to positions max(0, pos - window + 1) .. pos
 * (window 0 = all), read through block_tables[seq[t] * max_blocks + p / block_size];
 * query head h reads KV head h / (n_heads / n_kv_heads) (GQA).
 * Requires head_dim even and <= 512, q_row_stride even, 4-byte aligned q and caches. */
sits_status_t sits_k_attention(sits_bf16_t *out, const sits_bf16_t *q, int q_row_stride, const sits_bf16_t *k_cache,
                               const sits_bf16_t *v_cache, const int32_t *seq, const int32_t *pos,
                               const int32_t *block_tables, int max_blocks, int block_size, int n_tokens, int n_heads,
                               int n_kv_heads, int head_dim, int window, float scale, cudaStream_t stream);

/* out[n, dim] = silu(gu[:, :dim]) * gu[:, dim:]; gu: [n, 2 * dim] (gate then up). */
sits_status_t sits_k_silu_mul(sits_bf16_t *out, const sits_bf16_t *gu, int n, int dim, cudaStream_t stream);

/* out[i, :] = x[rows[i], :] for i < n_rows; out [n_rows, dim], rows [n_rows]. */
sits_status_t sits_k_gather_rows(sits_bf16_t *out, const sits_bf16_t *x, const int32_t *rows, int n_rows, int dim,
                                 cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
