/* sample.cu -- [perf: device sampling] the per-rank candidate reduction of the distributed sampler,
 * on the device next to the logits, so only [n, c] candidates cross PCIe instead of [n, vocab].
 *
 * logits: [n, v_count] fp32 (ids v_start ..); rows: [n] sits_k_sample_row_t; recs: n records of
 * 16 + 8 c bytes ({lse, n, best{logit, id}} then c {logit, id}). One block of SR_THREADS per row.
 * The results equal sits_backend_cpu_sample_reduce (src/backend/cpu.c) bit for bit:
 *   GREEDY   best = argmax, lowest id on ties (values that are -inf or NaN never win: id -1);
 *   GUMBEL   best = argmax of fl(fl(l * inv_temp) + g) with g = (float)-log(-log(u)), u the
 *            splitmix64 hash below in double -- explicit _rn intrinsics, so nvcc cannot fuse the
 *            multiply-add into an FMA the host does not do;
 *   TOPC     the c largest (logit desc, id asc): radix select of the c-th key over the
 *            order-preserving uint32 image of the floats (-0 folded onto +0, as the host's ==
 *            does), then one ordered pass that takes every key above it and the lowest ids equal
 *            to it. Candidates are written greater-first, each group by id (the merge sorts);
 *   TOPC_LSE TOPC and lse = max + log(sum exp(l / T - max)) in double (1 / T in double).
 * NaN logits give unspecified candidates (the host comparator is not a total order on NaN either).
 * The second part of the file (logit_process, logprob_reduce, logit_pick) is the device side of the
 * sampling controls and logprobs, sharing these block reductions; its comment is there. */
#include "kernels/common.cuh"

#define SR_THREADS 1024
#define SR_WARPS (SR_THREADS / 32)

/* ---- the counter-based RNG (bit-exact port of sits_backend_sample_uniform) -------------------- */

static __device__ __forceinline__ uint64_t sr_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static __device__ __forceinline__ double sr_uniform(uint64_t seed, uint64_t step, int64_t id)
{
    uint64_t h = sr_mix64(seed + 0x9e3779b97f4a7c15ull);
    h = sr_mix64(h ^ (step * 0xd1b54a32d192ed03ull + 0x632be59bd9b4e019ull));
    h = sr_mix64(h ^ ((uint64_t)id * 0x8cb92ba72f3d8dd7ull + 0x9e3779b97f4a7c15ull));
    /* h >> 11 < 2^53 converts exactly; + 0.5 rounds to nearest even like the host */
    return __dmul_rn(__dadd_rn((double)(h >> 11), 0.5), 1.0 / 9007199254740992.0);
}

static __device__ __forceinline__ float sr_gumbel(uint64_t seed, uint64_t step, int64_t id)
{
    return (float)(-log(-log(sr_uniform(seed, step, id))));
}

/* ---- block reductions -------------------------------------------------------------------------- */

/* a beats b: a is a value (id >= 0) and b is none, or a's value is greater, or equal with a lower id. */
static __device__ __forceinline__ bool sr_better(float av, int aid, float bv, int bid)
{
    return aid >= 0 && (bid < 0 || av > bv || (av == bv && aid < bid));
}

/* (v, id) of the block's best; valid in every thread. */
static __device__ void sr_block_best(float &v, int &id)
{
    __shared__ float s_v[SR_WARPS];
    __shared__ int s_id[SR_WARPS];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, v, o);
        int oid = __shfl_xor_sync(0xffffffffu, id, o);
        if (sr_better(ov, oid, v, id)) { v = ov; id = oid; }
    }
    if (lane == 0) { s_v[warp] = v; s_id[warp] = id; }
    __syncthreads();
    v = lane < SR_WARPS ? s_v[lane] : -INFINITY;
    id = lane < SR_WARPS ? s_id[lane] : -1;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, v, o);
        int oid = __shfl_xor_sync(0xffffffffu, id, o);
        if (sr_better(ov, oid, v, id)) { v = ov; id = oid; }
    }
    __syncthreads(); /* s_v / s_id may be reused */
}

static __device__ double sr_block_max_d(double v)
{
    __shared__ double s[SR_WARPS];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0) s[warp] = v;
    __syncthreads();
    v = lane < SR_WARPS ? s[lane] : -INFINITY;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    return v;
}

static __device__ double sr_block_sum_d(double v)
{
    __shared__ double s[SR_WARPS];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) s[warp] = v;
    __syncthreads();
    v = lane < SR_WARPS ? s[lane] : 0.0;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    return v;
}

/* Order-preserving image of a float (greater float -> greater key); -0 and +0 share a key. */
static __device__ __forceinline__ uint32_t sr_key(float x)
{
    uint32_t u = __float_as_uint(x);
    if ((u << 1) == 0) u = 0;
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* ---- the kernel -------------------------------------------------------------------------------- */

static __global__ void __launch_bounds__(SR_THREADS)
sample_reduce_kernel(unsigned char *recs, const float *logits, int v_start, int v_count, const sits_k_sample_row_t *rows,
                     int c)
{
    __shared__ uint32_t s_hist[256];
    __shared__ uint32_t s_prefix, s_k;
    __shared__ int s_wgt[SR_WARPS], s_weq[SR_WARPS];
    __shared__ int s_gt_base, s_eq_base;

    int s = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const sits_k_sample_row_t p = rows[s];
    const float *row = logits + (size_t)s * v_count;
    size_t rec_bytes = sizeof(sits_k_sample_rec_t) + sizeof(sits_k_sample_cand_t) * (size_t)c;
    sits_k_sample_rec_t *h = reinterpret_cast<sits_k_sample_rec_t *>(recs + rec_bytes * s);
    sits_k_sample_cand_t *cd = reinterpret_cast<sits_k_sample_cand_t *>(h + 1);

    if (p.mode == 0 || p.mode == 1) {
        float bv = -INFINITY;
        int bid = -1;
        if (p.mode == 0) {
            for (int i = tid; i < v_count; i += SR_THREADS) {
                float x = row[i];
                if (x > bv) { bv = x; bid = v_start + i; } /* increasing i: the first maximum = lowest id */
            }
        } else {
            for (int i = tid; i < v_count; i += SR_THREADS) {
                float score = __fadd_rn(__fmul_rn(row[i], p.inv_temp), sr_gumbel(p.seed, p.step, (int64_t)v_start + i));
                if (score > bv) { bv = score; bid = v_start + i; }
            }
        }
        sr_block_best(bv, bid);
        if (tid == 0) {
            h->lse = -INFINITY;
            h->n = 0;
            h->best.logit = bid >= 0 ? bv : -INFINITY;
            h->best.id = bid;
        }
        return;
    }

    /* TOPC / TOPC_LSE */
    float lse = -INFINITY;
    if (p.mode == 3 && v_count > 0) {
        double inv_t = 1.0 / (double)p.temperature, mx = -INFINITY, sum = 0.0;
        for (int i = tid; i < v_count; i += SR_THREADS) mx = fmax(mx, (double)row[i] * inv_t);
        mx = sr_block_max_d(mx);
        for (int i = tid; i < v_count; i += SR_THREADS) sum += exp((double)row[i] * inv_t - mx);
        sum = sr_block_sum_d(sum);
        lse = (float)(mx + log(sum));
    }
    int n_out;
    if (v_count <= c) {
        /* the whole slice */
        for (int i = tid; i < v_count; i += SR_THREADS) {
            cd[i].logit = row[i];
            cd[i].id = v_start + i;
        }
        n_out = v_count;
    } else {
        /* radix select: the key of the c-th largest element and how many elements equal to it to take */
        uint32_t prefix = 0, mask = 0, k = (uint32_t)c;
        for (int shift = 24; shift >= 0; shift -= 8) {
            for (int b = tid; b < 256; b += SR_THREADS) s_hist[b] = 0;
            __syncthreads();
            for (int base = 0; base < v_count; base += SR_THREADS) {
                int i = base + tid;
                uint32_t bin = 256;
                if (i < v_count) {
                    uint32_t key = sr_key(row[i]);
                    if ((key & mask) == prefix) bin = (key >> shift) & 255u;
                }
                /* warp-aggregated: one shared atomic per distinct bin of the warp */
                uint32_t peers = __match_any_sync(0xffffffffu, bin);
                if (bin != 256 && lane == __ffs(peers) - 1) atomicAdd(&s_hist[bin], (uint32_t)__popc(peers));
            }
            __syncthreads();
            if (tid == 0) {
                uint32_t cum = 0;
                int b = 255;
                for (; b > 0; b--) {
                    if (cum + s_hist[b] >= k) break;
                    cum += s_hist[b];
                }
                s_prefix = prefix | ((uint32_t)b << shift);
                s_k = k - cum;
            }
            __syncthreads();
            prefix = s_prefix;
            k = s_k;
            mask |= 0xFFu << shift;
        }
        const uint32_t T = prefix;
        const int k_eq = (int)k, n_gt = c - k_eq;
        /* ordered collection: keys above T go to [0, n_gt), the first k_eq keys equal to T after them */
        if (tid == 0) { s_gt_base = 0; s_eq_base = 0; }
        __syncthreads();
        const uint32_t lt_mask = (1u << lane) - 1u;
        for (int base = 0; base < v_count; base += SR_THREADS) {
            int i = base + tid;
            bool gt = false, eq = false;
            float x = 0.0f;
            if (i < v_count) {
                x = row[i];
                uint32_t key = sr_key(x);
                gt = key > T;
                eq = key == T;
            }
            uint32_t bgt = __ballot_sync(0xffffffffu, gt), beq = __ballot_sync(0xffffffffu, eq);
            if (lane == 0) { s_wgt[warp] = __popc(bgt); s_weq[warp] = __popc(beq); }
            __syncthreads();
            int off_gt = s_gt_base, off_eq = s_eq_base, tot_gt = 0, tot_eq = 0;
            for (int w = 0; w < SR_WARPS; w++) {
                if (w < warp) { off_gt += s_wgt[w]; off_eq += s_weq[w]; }
                tot_gt += s_wgt[w];
                tot_eq += s_weq[w];
            }
            if (gt) {
                int pos = off_gt + __popc(bgt & lt_mask);
                if (pos < n_gt) { cd[pos].logit = x; cd[pos].id = v_start + i; }
            } else if (eq) {
                int r = off_eq + __popc(beq & lt_mask);
                if (r < k_eq) { cd[n_gt + r].logit = x; cd[n_gt + r].id = v_start + i; }
            }
            __syncthreads(); /* everyone has read s_wgt / s_weq / the bases */
            if (tid == 0) { s_gt_base += tot_gt; s_eq_base += tot_eq; }
            __syncthreads();
            if (s_gt_base >= n_gt && s_eq_base >= k_eq) break; /* uniform: shared values after a barrier */
        }
        n_out = c;
    }
    if (tid == 0) {
        h->lse = lse;
        h->n = n_out;
        h->best.logit = -INFINITY;
        h->best.id = -1;
    }
}

extern "C" sits_status_t sits_k_sample_reduce(void *recs, const float *logits, int n, int v_start, int v_count,
                                              const sits_k_sample_row_t *rows, int c, cudaStream_t stream)
{
    if (n < 0 || v_count < 0 || c < 1 || c > SITS_K_SAMPLE_MAX_C || ((uintptr_t)recs & 3u) || ((uintptr_t)logits & 3u))
        return SITS_ERR_INVALID;
    if (n == 0) return SITS_OK;
    sample_reduce_kernel<<<n, SR_THREADS, 0, stream>>>(static_cast<unsigned char *>(recs), logits, v_start, v_count, rows, c);
    return SITS_K_LAUNCH_STATUS();
}

/* ==== [sampling controls] [logprobs] the device side of penalties, logit_bias, min_p and log-probabilities,
 * on this rank's vocabulary shard, for every row of a step at once. The cpu twins are
 * sits_backend_cpu_logit_process / _logprob_reduce / _logit_pick (src/backend/cpu.c); backend.h defines
 * the semantics.
 * logit_process  grid n (a block per row): the row's entries (sorted unique ids, few) one per thread,
 *                each operation rounded once (_rn intrinsics, no FMA contraction) so the results
 *                equal the host's bit for bit; then, after a barrier, the min_p cut and / or the
 *                row's max over the shard.
 * logprob_reduce grid n_rows (a block per scored row): the shard's max (fp32), the sum of
 *                exp((double)l - max) in double (block tree: the last bits may differ from the host's
 *                sequential sum), the target's logit, and the top-N (N <= 20) by (logit desc, id asc)
 *                as N block arg-max passes, each over the ids ordered after the previous pick --
 *                exact, and cheap for the N that logprobs ask for.
 * logit_pick     one thread per row: the raw logit of ids[s] (a binary search of the row's entries
 *                first, whose raw values logit_process saved). ==== */

/* ---- logit_process ----------------------------------------------------------------------------- */

static __global__ void __launch_bounds__(SR_THREADS)
logit_process_kernel(float *logits, int v_start, int v_count, const sits_k_proc_row_t *rows, const sits_k_proc_ent_t *ents,
                     float *ent_raw, const float *cut, float *rowmax)
{
    int s = blockIdx.x, tid = threadIdx.x;
    float *row = logits + (size_t)s * v_count;
    if (rows && ents) {
        const sits_k_proc_row_t p = rows[s];
        bool rep = p.repetition > 0.0f && p.repetition != 1.0f;
        for (int k = p.ent0 + tid; k < p.ent0 + p.n_ent; k += SR_THREADS) {
            const sits_k_proc_ent_t t = ents[k];
            long long i = (long long)t.id - v_start;
            if (i < 0 || i >= v_count) continue;
            float l = row[i];
            if (ent_raw) ent_raw[k] = l;
            l = (t.flags & SITS_K_PROC_BAN) ? -INFINITY : __fadd_rn(l, t.bias);
            if (rep && ((t.flags & SITS_K_PROC_PROMPT) || t.out_count > 0))
                l = l > 0.0f ? __fdiv_rn(l, p.repetition) : __fmul_rn(l, p.repetition);
            if (t.out_count > 0) l = __fsub_rn(l, __fadd_rn(__fmul_rn(p.frequency, (float)t.out_count), p.presence));
            row[i] = l; /* ids are unique within a row: no other thread writes it */
        }
    }
    if (!cut && !rowmax) return;
    __syncthreads(); /* the entries' writes are visible to the whole block */
    float c = cut ? cut[s] : -INFINITY, m = -INFINITY;
    for (int i = tid; i < v_count; i += SR_THREADS) {
        float x = row[i];
        if (cut && x < c) { x = -INFINITY; row[i] = x; }
        if (x > m) m = x;
    }
    if (!rowmax) return;
    m = (float)sr_block_max_d((double)m); /* exact: fp32 -> fp64 -> fp32 */
    if (tid == 0) rowmax[s] = m;
}

extern "C" sits_status_t sits_k_logit_process(float *logits, int n, int v_start, int v_count, const sits_k_proc_row_t *rows,
                                              const sits_k_proc_ent_t *ents, float *ent_raw, const float *cut, float *rowmax,
                                              cudaStream_t stream)
{
    if (n < 0 || v_count < 0) return SITS_ERR_INVALID;
    if (n == 0 || (!(rows && ents) && !cut && !rowmax)) return SITS_OK;
    logit_process_kernel<<<n, SR_THREADS, 0, stream>>>(logits, v_start, v_count, rows && ents ? rows : NULL,
                                                       rows && ents ? ents : NULL, ent_raw, cut, rowmax);
    return SITS_K_LAUNCH_STATUS();
}

/* ---- logprob_reduce ---------------------------------------------------------------------------- */

static __global__ void __launch_bounds__(SR_THREADS)
logprob_reduce_kernel(sits_k_logprob_rec_t *recs, const float *logits, int v_start, int v_count,
                      const sits_k_logprob_row_t *rows)
{
    int k = blockIdx.x, tid = threadIdx.x;
    const sits_k_logprob_row_t p = rows[k];
    const float *row = logits + (size_t)p.row * v_count;
    sits_k_logprob_rec_t *r = &recs[k];
    int top = p.top < 0 ? 0 : p.top > SITS_K_LOGPROB_MAX_TOP ? SITS_K_LOGPROB_MAX_TOP : p.top;
    if (v_count <= 0) {
        if (tid == 0) {
            r->lse = -INFINITY;
            r->tgt = 0.0f;
            r->has_tgt = 0;
            r->n = 0;
            r->pad_ = 0;
        }
        return;
    }
    float m = -INFINITY;
    for (int i = tid; i < v_count; i += SR_THREADS) if (row[i] > m) m = row[i];
    m = (float)sr_block_max_d((double)m);
    double sum = 0.0;
    for (int i = tid; i < v_count; i += SR_THREADS) sum += exp((double)row[i] - (double)m);
    sum = sr_block_sum_d(sum);
    /* top-N: pick t is the best of the ids ordered after pick t - 1 */
    float pv = INFINITY;
    int pid = -1, n = 0;
    for (int t = 0; t < top; t++) {
        float bv = -INFINITY;
        int bid = -1;
        for (int i = tid; i < v_count; i += SR_THREADS) {
            float x = row[i];
            int id = v_start + i;
            bool after = t == 0 || x < pv || (x == pv && id > pid);
            if (after && sr_better(x, id, bv, bid)) { bv = x; bid = id; }
        }
        sr_block_best(bv, bid);
        if (bid < 0) break;   /* uniform: every thread has the block's result */
        if (tid == 0) { r->top[t].logit = bv; r->top[t].id = bid; }
        pv = bv;
        pid = bid;
        n = t + 1;
    }
    if (tid == 0) {
        r->lse = (double)m + log(sum);
        bool has = p.target >= v_start && (long long)p.target - v_start < v_count;
        r->tgt = has ? row[p.target - v_start] : 0.0f;
        r->has_tgt = has;
        r->n = n;
        r->pad_ = 0;
    }
}

extern "C" sits_status_t sits_k_logprob_reduce(sits_k_logprob_rec_t *recs, const float *logits, int v_start, int v_count,
                                               const sits_k_logprob_row_t *rows, int n_rows, cudaStream_t stream)
{
    if (n_rows < 0 || v_count < 0) return SITS_ERR_INVALID;
    if (n_rows == 0) return SITS_OK;
    logprob_reduce_kernel<<<n_rows, SR_THREADS, 0, stream>>>(recs, logits, v_start, v_count, rows);
    return SITS_K_LAUNCH_STATUS();
}

/* ---- logit_pick -------------------------------------------------------------------------------- */

#define PICK_THREADS 128

static __global__ void logit_pick_kernel(float *out, const float *logits, int n, int v_start, int v_count, const int32_t *ids,
                                         const sits_k_proc_row_t *rows, const sits_k_proc_ent_t *ents, const float *ent_raw)
{
    int s = blockIdx.x * PICK_THREADS + threadIdx.x;
    if (s >= n) return;
    int id = ids[s];
    long long i = (long long)id - v_start;
    if (id < 0 || i < 0 || i >= v_count) { out[s] = __int_as_float(0x7fc00000); return; }
    float v = logits[(size_t)s * v_count + i];
    if (rows && ents && ent_raw) {
        int lo = rows[s].ent0, end = rows[s].ent0 + rows[s].n_ent, hi = end;
        while (lo < hi) {
            int mid = lo + (hi - lo) / 2;
            if (ents[mid].id < id) lo = mid + 1;
            else hi = mid;
        }
        if (lo < end && ents[lo].id == id) v = ent_raw[lo];
    }
    out[s] = v;
}

extern "C" sits_status_t sits_k_logit_pick(float *out, const float *logits, int n, int v_start, int v_count, const int32_t *ids,
                                           const sits_k_proc_row_t *rows, const sits_k_proc_ent_t *ents, const float *ent_raw,
                                           cudaStream_t stream)
{
    if (n < 0 || v_count < 0) return SITS_ERR_INVALID;
    if (n == 0) return SITS_OK;
    logit_pick_kernel<<<(n + PICK_THREADS - 1) / PICK_THREADS, PICK_THREADS, 0, stream>>>(out, logits, n, v_start, v_count, ids,
                                                                                          rows, ents, ent_raw);
    return SITS_K_LAUNCH_STATUS();
}
