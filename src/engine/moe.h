/* moe.h -- [moe] the Mixture-of-Experts MLP of one layer on one rank (engine-internal; engine.c calls it
 * in place of the dense gate/up/down when cfg.moe.n_experts > 0).
 *
 * Flow for h [n, H] (the normed input, identical on every rank of the TP group):
 *   router logits = h . router^T [n, E] -> backend moe_topk (softmax, top-k, renormalised when the
 *   config says) -> ids / weights downloaded (the step waits here: expert row counts decide the GEMM
 *   shapes, so MoE steps run eagerly, never as CUDA graphs) -> the host groups the (token, slot) pairs
 *   by expert -> rows gathered in expert order -> per expert: gate/up GEMM, SiLU*mul, down GEMM over
 *   its rows -> backend moe_combine: out[t] = sum_j w[t, j] * y[slot (t, j)] (+ sigmoid(shared gate) *
 *   shared expert, Qwen2-MoE).
 * Tensor-parallel experts (ep 1): every rank runs every expert on every token with its slice of the
 *   intermediate dimension; out is a partial sum, all-reduced by the engine like a dense down_proj.
 * Expert parallelism (ep = tp = N): rank r holds experts [r E / N, (r + 1) E / N) whole. Tokens are
 *   split into N contiguous slices (rank s owns [s n / N, (s + 1) n / N)); each rank sends its own
 *   tokens' rows to the ranks of their experts with one all-to-all-v through the TP communicator,
 *   runs its experts over what it received, and sends the results back with a second one; the owner
 *   combines them, every other row of out is 0 (the shared expert stays TP-split and adds its partial
 *   sums everywhere), so the engine's all-reduce both sums and gathers. The routing is computed on
 *   every rank from the same h, so each rank knows every send and receive count without a count
 *   exchange (an attention-data-parallel layout, where ranks hold different tokens, would need one).
 * [moe dev] Steps of up to dev_max tokens (16-bit or FP8 experts) take the device path instead: the slots are
 *   grouped by expert on the device (backend moe_route) and every expert runs in one launch for gate/up and
 *   one for down (moe_experts), then moe_combine_slots; nothing comes back to the host, so the engine replays
 *   such decode steps as CUDA graphs (sits_moe_graph_max). With EP no token moves there: every rank holds every
 *   token, runs the slots of its own experts, and the layer's all-reduce sums the ranks' partial combines.
 * Load balance: tokens routed to each expert (summed over layers and steps) are counted on the host, and on
 * the device for the device path (read back at most 4 times a second). */
#ifndef SITS_ENGINE_MOE_H
#define SITS_ENGINE_MOE_H

#include <stdint.h>
#include "backend/backend.h"
#include "comm/comm.h"
#include "model/weights.h"

typedef struct sits_moe sits_moe_t;

/* Buffers for steps of up to max_tokens tokens; dev_max: [moe dev] the device path for steps of up to that many
 * tokens (0: the default, 256; < 0: off; at most SITS_MOE_DEV_MAX_SLOTS / top-k); SITS_ERR_UNSUPPORTED (logged) when the backend has no moe_topk /
 * moe_combine. */
sits_status_t sits_moe_create(const sits_model_weights_t *w, sits_backend_t *be, sits_comm_t *comm, int max_tokens, int dev_max,
                              sits_moe_t **moe_p);
void sits_moe_destroy(sits_moe_t *m);
/* Backend bytes sits_moe_create allocates (the memory plan; dev_max as there). */
size_t sits_moe_step_bytes(const sits_model_config_t *cfg, const sits_shard_dims_t *d, sits_dtype_t act_dtype, int max_tokens,
                           int dev_max);
/* out [n, H] = this rank's share of layer l's MoE output for h [n, H]; gu [n, 2 * i_loc] and act
 * [n, i_loc] are the engine's scratch (i_loc of the shard dims); mask [n] device int32: the step's KV slots
 * (-1: a graph step's pad row, not counted in the load-balance metrics; NULL: count every token). The host
 * path waits for the backend once; the device path never. */
sits_status_t sits_moe_forward(sits_moe_t *m, int layer, const void *h, void *out, void *gu, void *act, int n,
                               const int32_t *mask);
/* [moe dev] The largest step every layer runs on the device path (0: none): decode steps up to it can be graphs. */
int sits_moe_graph_max(const sits_moe_t *m);
/* Tokens routed to each of the E experts so far (every layer, every step; the same on every rank). Reads the
 * device's counters (at most 4 times a second): call it between steps, on the thread that drives the backend. */
const uint64_t *sits_moe_expert_tokens(sits_moe_t *m, int *n_experts_p);

#endif
