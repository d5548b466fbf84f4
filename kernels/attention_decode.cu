/* attention_decode.cu -- GQA-aware split-K (flash-decoding) attention over the paged KV cache,
 * with tensor cores, for tokens that each attend their own sequence (decode steps, short chunks,
 * any mix), whose last CTA of a split token merges the split-K partials.
 *
 * Work item = (token, KV head, chunk of <= 16 of its group's q heads, split). The item's q rows
 * (the group's heads of that token, padded to 16 with zeros) are the A operand of
 * mma.m16n8k16; each K/V element of the token's context is read from memory once per token and
 * KV head, whatever the group size. The token's window [b, e] of L positions is cut into S
 * partitions of att_part_len(L, S, p.min_part) positions (whole 64-key tiles; about p.min_part when
 * ceil(L / S) is fewer); split i takes the i-th (none past the end). A CTA (4 warps) streams its
 * partition through double-buffered swizzled K/V
 * tiles (cp.async); warp w takes keys 16w .. 16w+15 of each tile (S = Q K^T, online softmax in
 * fp32, O += P V with P in bf16) and the 4 warps' states are merged through shared memory. A
 * token with one partition writes its output directly; otherwise the partial (m, l, O) goes to
 * the fp32 scratch and the CTA that finishes the token's (KV head, chunk) last combines them
 * (att_dec_merge: a counter per work unit; no separate reduce kernel, one launch less a layer).
 *
 * Work items are taken grid-stride, so the grid is fixed by the host: in list mode the tokens
 * are those the prefill kernel left (p.list, count on the device), else all p.n_tokens; S is
 * derived on the device from that count (att_splits), so a captured CUDA graph stays valid.
 *
 * [int8 kv] [fp8 kv] att_decode_q8_kernel reads 8-bit caches (int8, or E4M3 with F8) inside the MMA
 * operand loads, with the keys as the MMA's M side and up to 8 q heads as its N side (see above it). */
#include "kernels/attention_mma.cuh"

#define ATT_DEC_OPAD 8 /* floats of padding per row of the merge buffer (bank spread) */
#define ATT_VSC 256.0f /* [int8 kv] [fp8 kv] factor of the V scales in the f16 softmax weights */
template <int D> static constexpr int att_dec_smem() { return (16 + 4 * ATT_KT) * D * 2; }

/* The end of a work item, after each warp wrote its unnormalised O rows to sO [4][R][D + pad]
 * (and its m, l to s_m, s_l) and a barrier: merge the 4 warps (weight 2^(m_w - M); a warp that saw no
 * key has m = -inf, l = 0) and write the output (one partition; [gpt-oss] head h0 + r's sink added to its sum) or the
 * split-K partial (no sink: att_dec_merge_splits adds it once to the merged sum). With several
 * partitions, the CTA that finishes its unit's (token, KV head, chunk) partitions last -- counted in
 * p.counters after a fence -- merges them (att_dec_merge_splits) and sets the counter back to zero:
 * no separate reduce launch. Called by all the CTA's threads; every condition here is uniform over it. */
template <int D, int R>
static __device__ void att_dec_merge_splits(const att_params &p, float *sO, int n_rows, int n_active, int t, int li, int h0,
                                            int S);
template <int D, int R = 16>
static __device__ __forceinline__ void att_dec_merge(const att_params &p, float *sO, float (&s_m)[4][16],
                                                     float (&s_l)[4][16], int n_rows, int n_active, int t, int li, int h0,
                                                     int split, int S, int n_list)
{
    constexpr int OS = D + ATT_DEC_OPAD;
    const long long pidx0 = ((long long)li * p.n_heads + h0) * S + split;
    for (int i = threadIdx.x; i < n_rows * D; i += ATT_THREADS) {
        int r = i / D, d = i % D;
        float M = fmaxf(fmaxf(s_m[0][r], s_m[1][r]), fmaxf(s_m[2][r], s_m[3][r]));
        float Lsum = 0.0f, acc = 0.0f;
#pragma unroll
        for (int w = 0; w < 4; w++) {
            float wt = s_m[w][r] == -INFINITY ? 0.0f : exp2f(s_m[w][r] - M);
            Lsum += s_l[w][r] * wt;
            acc += sO[(w * R + r) * OS + d] * wt;
        }
        if (n_active == 1) {
            if (p.sinks) Lsum += att_sink(p.sinks, h0 + r, M); /* [gpt-oss] the final sum (one partition: no merge) */
            p.out[(size_t)t * p.n_heads * D + (size_t)(h0 + r) * D + d] = sits_k_f2bf(acc / Lsum);
        } else {
            long long pidx = pidx0 + (long long)r * S;
            att_part_o(p, n_list, S, D, pidx)[d] = acc;
            if (d == 0) {
                float *ml = att_part_ml(p, n_list, S, pidx);
                ml[0] = M;
                ml[1] = Lsum;
            }
        }
    }
    if (n_active == 1) return;
    __shared__ int s_last;
    const int kvh = h0 / p.group, unit = (li * p.n_kv_heads + kvh) * p.n_chunks + (h0 - kvh * p.group) / R;
    __threadfence();   /* this thread's partial, visible to the CTA that merges */
    __syncthreads();
    if (threadIdx.x == 0) s_last = atomicAdd(p.counters + unit, 1) == n_active - 1;
    __syncthreads();   /* sO is free from here */
    if (!s_last) return;
    __threadfence();
    att_dec_merge_splits<D, R>(p, sO, n_rows, n_active, t, li, h0, S);
    if (threadIdx.x == 0) p.counters[unit] = 0;
}

/* Elements e = e0 + threadIdx.x + k ATT_THREADS (k < ATT_DEC_MPER, e < n_el) of att_dec_merge_splits' output (n_el = n_rows x
 * D): out[t, h0 + e / D, e % D] = sum_i o_i[e] w_i / sl (i in order). The partials are read ATT_DEC_MU at a time for
 * all of a thread's elements, MPER x MU loads in flight (a partial at a time for one element at a time -- an L2 round
 * trip each -- was most of a split token's time at batch 1). MPER x MU = 16: more (8 x 2) took the bf16 kernel from
 * 164 to 202 registers. */
#define ATT_DEC_MPER 4
#define ATT_DEC_MU 4
template <int D>
static __device__ __forceinline__ void att_dec_merge_o(const att_params &p, const float *sw, const float *sl, int e0, int n_el,
                                                       int n_active, int t, int li, int h0, int S, int n_list)
{
    constexpr int PER = ATT_DEC_MPER, U = ATT_DEC_MU;
    const float *po = att_part_o(p, n_list, S, D, ((long long)li * p.n_heads + h0) * S);   /* row r, partial i: po + (r S + i) D */
    float acc[PER];
#pragma unroll
    for (int k = 0; k < PER; k++) acc[k] = 0.0f;
    for (int i0 = 0; i0 < n_active; i0 += U) {
        float v[PER][U];
#pragma unroll
        for (int k = 0; k < PER; k++) {
            const int e = e0 + threadIdx.x + k * ATT_THREADS, r = e / D;
#pragma unroll
            for (int j = 0; j < U; j++)
                v[k][j] = e < n_el && i0 + j < n_active ? __ldcg(po + ((long long)r * S + i0 + j) * D + e % D) : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < PER; k++) {
            const int r = (e0 + threadIdx.x + k * ATT_THREADS) / D;
#pragma unroll
            for (int j = 0; j < U; j++)
                if (i0 + j < n_active) acc[k] += v[k][j] * sw[r * ATT_MAX_SPLITS + i0 + j];
        }
    }
#pragma unroll
    for (int k = 0; k < PER; k++) {
        const int e = e0 + threadIdx.x + k * ATT_THREADS;
        if (e < n_el) p.out[(size_t)t * p.n_heads * D + (size_t)h0 * D + e] = sits_k_f2bf(acc[k] / sl[e / D]);
    }
}

/* out[t, h0 + r] = sum_i 2^(m_i - M) o_i / (sum_i 2^(m_i - M) l_i [+ [gpt-oss] att_sink]) over the n_active partitions
 * of rows r < n_rows, read past L1 (other CTAs wrote them): warp w takes rows w, w + 4, .. for M, the weights (in sO:
 * [R][ATT_MAX_SPLITS], then the sums [R]); then the threads take the (row, column) elements, partitions in order.
 * [perf: merge chain] A partition's (m, l) is one 8-byte load, once (lane i: partitions i and i + 32), not m for M and
 * then m and l again for the weights: one L2 round trip less on a split token's chain (batch 1, context 129: the
 * split-K end was 2.6 us of a live CTA's 6.6, RESULTS.md 2026-12-06T04:10Z). Loading the o partials before the
 * weights too (one more round trip less) took the bf16 kernel from 164 to 189 registers (two CTAs an SM, not three)
 * and spilled the 8-bit one: not done. */
static_assert(ATT_MAX_SPLITS <= 64, "att_dec_merge_splits: two partitions a lane");
template <int D, int R>
static __device__ void att_dec_merge_splits(const att_params &p, float *sO, int n_rows, int n_active, int t, int li, int h0,
                                            int S)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int n_list = p.list_count ? *p.list_count : p.n_tokens;
    float *sw = sO, *sl = sO + R * ATT_MAX_SPLITS;
    for (int r = warp; r < n_rows; r += ATT_THREADS / 32) {
        const float2 *ml = reinterpret_cast<const float2 *>(att_part_ml(p, n_list, S, ((long long)li * p.n_heads + h0 + r) * S));
        const float2 a = lane < n_active ? __ldcg(ml + lane) : make_float2(-INFINITY, 0.0f);
        const float2 b = lane + 32 < n_active ? __ldcg(ml + lane + 32) : make_float2(-INFINITY, 0.0f);
        float M = fmaxf(a.x, b.x);
        for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
        float l = 0.0f;
        if (lane < n_active) {
            const float wt = exp2f(a.x - M);
            sw[r * ATT_MAX_SPLITS + lane] = wt;
            l += a.y * wt;
        }
        if (lane + 32 < n_active) {
            const float wt = exp2f(b.x - M);
            sw[r * ATT_MAX_SPLITS + lane + 32] = wt;
            l += b.y * wt;
        }
        for (int o = 16; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
        if (p.sinks) l += att_sink(p.sinks, h0 + r, M); /* [gpt-oss] once, to the merged sum (M: every lane's) */
        if (lane == 0) sl[r] = l;
    }
    __syncthreads();
    for (int e0 = 0; e0 < n_rows * D; e0 += ATT_DEC_MPER * ATT_THREADS)
        att_dec_merge_o<D>(p, sw, sl, e0, n_rows * D, n_active, t, li, h0, S, n_list);
}

/* A warp's row sums over its quad, then m, l of rows g and g + 8 to s_m, s_l. */
static __device__ __forceinline__ void att_dec_stats(float (&s_m)[4][16], float (&s_l)[4][16], int warp, int g, int tq, float m0,
                                                     float m1, float l0, float l1)
{
#pragma unroll
    for (int off = 1; off <= 2; off <<= 1) {
        l0 += __shfl_xor_sync(0xffffffffu, l0, off);
        l1 += __shfl_xor_sync(0xffffffffu, l1, off);
    }
    if (tq == 0) {
        s_m[warp][g] = m0;
        s_m[warp][g + 8] = m1;
        s_l[warp][g] = l0;
        s_l[warp][g + 8] = l1;
    }
}

template <int D>
static __global__ void __launch_bounds__(ATT_THREADS) att_decode_kernel(att_params p)
{
    sits_k_pdl_trigger();   /* [perf: pdl] the linear reading this output may start (kernels/gemv.cu) */
    extern __shared__ uint4 att_dec_smem_raw[];
    sits_bf16_t *sQ = reinterpret_cast<sits_bf16_t *>(att_dec_smem_raw);   /* [16][D] */
    sits_bf16_t *sK = sQ + 16 * D;                                          /* [2][ATT_KT][D] */
    sits_bf16_t *sV = sK + 2 * ATT_KT * D;                                  /* [2][ATT_KT][D] */
    float *sO = reinterpret_cast<float *>(sK);  /* [4][16][D + pad], over sK/sV once the loop is done */
    __shared__ float s_m[4][16], s_l[4][16];

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, tq = lane & 3;
    if (p.list_count) sits_k_pdl_wait();   /* [perf: pdl] the list comes from the prefill kernel */
    const int n_list = p.list_count ? *p.list_count : p.n_tokens;
    const int S = att_splits(n_list, p.n_kv_heads, p.n_chunks, p.n_heads, D, p.target_ctas, p.part_floats, p.part != NULL);
    const long long n_items = (long long)n_list * p.n_kv_heads * p.n_chunks * S;
    bool waited = p.list_count != NULL;

    for (long long item = blockIdx.x; item < n_items; item += gridDim.x) {
        const int split = (int)(item % S);
        long long rest = item / S;
        const int chunk = (int)(rest % p.n_chunks);
        rest /= p.n_chunks;
        const int kvh = (int)(rest % p.n_kv_heads), li = (int)(rest / p.n_kv_heads);
        const int t = p.list_count ? p.list[li] : li;
        const int p_end = p.pos[t], p_begin = att_window_begin(p.window, p_end);
        const int L = p_end - p_begin + 1, part = att_part_len(L, S, p.min_part), n_active = (L + part - 1) / part;
        if (split >= n_active) continue; /* uniform over the CTA */
        const int kb = p_begin + split * part, ke = min(kb + part, p_end + 1) - 1;
        const int h0 = kvh * p.group + chunk * 16, n_rows = min(16, p.group - chunk * 16);
        const int32_t *bt = p.block_tables + (size_t)p.seq[t] * p.max_blocks;

        /* [perf: kv before wait] the first tile's keys up to cut (all of them once waited), then the wait, q, the rest */
        const int cut = waited ? ke : att_kv_safe_end(p, p_end);
        const int n_kt = (ke - kb + ATT_KT) / ATT_KT;
        att_load_kv<D>(sK, sV, p, bt, kvh * D, kb, kb, ke, 1, cut);
        att_cp_commit();
        if (!waited) {
            sits_k_pdl_wait();   /* [perf: pdl] launched as a dependent (sits_k_launch_dep): q and this step's keys from RoPE + KV write */
            waited = true;
        }
        /* q rows h0 .. h0 + n_rows - 1 of token t, zero rows after. */
        {
            constexpr int CH = D / 8;
            const sits_bf16_t *qt = p.q + (size_t)t * p.q_row_stride + (size_t)h0 * D;
            for (int i = threadIdx.x; i < 16 * CH; i += ATT_THREADS) {
                int r = i / CH, ch = i % CH;
                att_cp16(sQ + att_sw<D>(r, ch), qt + (size_t)r * D + ch * 8, r < n_rows);
            }
            att_cp_commit();
        }
        att_load_kv<D>(sK, sV, p, bt, kvh * D, kb, kb, ke, 2, cut);
        att_cp_commit();
        att_cp_wait<1>();   /* the first tile's head and q (its tail: the loop's first wait) */
        __syncthreads();
        uint32_t qf[D / 16][4];
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) att_ldsm4(qf[kk], sQ + att_sw<D>(lane & 15, 2 * kk + (lane >> 4)));

        float o[D / 8][4];
#pragma unroll
        for (int j = 0; j < D / 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
        float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;

        for (int it = 0; it < n_kt; it++) {
            const int buf = it & 1;
            if (it + 1 < n_kt) {
                int nb = buf ^ 1;
                att_load_kv<D>(sK + nb * ATT_KT * D, sV + nb * ATT_KT * D, p, bt, kvh * D, kb + (it + 1) * ATT_KT, kb, ke);
                att_cp_commit();
                att_cp_wait<1>();
            } else {
                att_cp_wait<0>();
            }
            __syncthreads();
            const int k0 = kb + it * ATT_KT + warp * 16; /* this warp's first key */
            if (k0 <= ke) {
                const sits_bf16_t *tK = sK + buf * ATT_KT * D, *tV = sV + buf * ATT_KT * D;
                float s[2][4];
#pragma unroll
                for (int j = 0; j < 2; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
                for (int kk = 0; kk < D / 16; kk++) {
                    uint32_t b[4];
                    att_ldsm4(b, tK + att_sw<D>(warp * 16 + (lane & 7) + ((lane >> 4) << 3), 2 * kk + ((lane >> 3) & 1)));
                    att_mma(s[0], qf[kk], b[0], b[1]);
                    att_mma(s[1], qf[kk], b[2], b[3]);
                }
#pragma unroll
                for (int j = 0; j < 2; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) s[j][e] *= p.scale_log2;
                att_cap_frag<2>(s, p.softcap_log2);
#pragma unroll
                for (int j = 0; j < 2; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        int key = k0 + 8 * j + 2 * tq + (e & 1);
                        s[j][e] = key <= ke ? s[j][e] : -INFINITY;
                    }
                float c0, c1;
                att_softmax_step<2>(s, 1.0f, m0, m1, l0, l1, c0, c1);
#pragma unroll
                for (int j = 0; j < D / 8; j++) {
                    o[j][0] *= c0;
                    o[j][1] *= c0;
                    o[j][2] *= c1;
                    o[j][3] *= c1;
                }
                uint32_t a[4] = { att_pack(s[0][0], s[0][1]), att_pack(s[0][2], s[0][3]), att_pack(s[1][0], s[1][1]),
                                  att_pack(s[1][2], s[1][3]) };
#pragma unroll
                for (int dp = 0; dp < D / 16; dp++) {
                    uint32_t b[4];
                    att_ldsm4_t(b, tV + att_sw<D>(warp * 16 + (lane & 15), 2 * dp + (lane >> 4)));
                    att_mma(o[2 * dp], a, b[0], b[1]);
                    att_mma(o[2 * dp + 1], a, b[2], b[3]);
                }
            }
            __syncthreads();
        }

        att_dec_stats(s_m, s_l, warp, g, tq, m0, m1, l0, l1);
        constexpr int OS = D + ATT_DEC_OPAD;
        float *wO = sO + warp * 16 * OS;
#pragma unroll
        for (int j = 0; j < D / 8; j++) {
            int col = 8 * j + 2 * tq;
            *reinterpret_cast<float2 *>(wO + g * OS + col) = make_float2(o[j][0], o[j][1]);
            *reinterpret_cast<float2 *>(wO + (g + 8) * OS + col) = make_float2(o[j][2], o[j][3]);
        }
        __syncthreads();
        att_dec_merge<D>(p, sO, s_m, s_l, n_rows, n_active, t, li, h0, split, S, n_list);
        __syncthreads(); /* the next item reuses the shared memory */
    }
}

/* [int8 kv] [fp8 kv] Decode attention over 8-bit caches, transposed: the keys are the MMA's M side and
 * the q heads its N side (8), so a group of 4 (Llama-3 8B) fills half of each MMA instead of a quarter,
 * a group of 8 (70B) all of it; per 16 keys a warp runs D / 16 MMAs for S^T = K Q^T and D / 16 for
 * O^T += V^T P^T (the q-rows-as-M kernel ran twice that), and holds D / 4 accumulators (not D / 2):
 * fewer registers, more CTAs per SM, fewer instructions per byte (the 8-bit kernel was issue-bound at
 * ~2 TB/s on the H200). Work item = (token, KV head, chunk of <= 8 q heads, split); partitions, split-K
 * partials and the reduce as att_decode_kernel.
 *  - S^T = K Q^T (m16n8k16 f16): A = 16 keys x 16 head dims of K, B = the 16 dims x 8 heads of q. The head
 *    dimension is permuted (a sum does not care): in k-step kk lane (g, q) takes d = 16 kk + 4q .. 4q + 3,
 *    i.e. one 32-bit shared load of key g (a0 low pair, a2 high pair) and one of key g + 8 (a1, a3); the q
 *    fragments (b0 = q[head g][16 kk + 4q, +1], b1 = [.. + 2, + 3]) are read once per work item. Each key's
 *    row of scores is multiplied by its K scale.
 *  - Online softmax per head column: lane (g, q) holds keys g and g + 8 of heads 2q, 2q + 1; the maxima
 *    reduce over g (xor 4, 8, 16); l stays a per-lane partial sum until the end.
 *  - O^T += V^T P^T: B = P^T (16 keys x 8 heads): the probabilities times the key's V scale and ATT_VSC,
 *    packed to f16 in the C layout (rows = keys) and transposed in registers (movmatrix.trans: rows =
 *    heads), b0 from keys 0..7, b1 from keys 8..15. A = 16 head dims x 16 keys of V: ldmatrix.x4.trans of
 *    the raw bytes taken as b16 pairs gives lane (g, q) bytes (d 2g, 2g + 1) of keys 2q, 2q + 1; a byte
 *    permute makes the pair of keys of d = 2g (the A row g: a0 / a2) and of d = 2g + 1 (row g + 8: a1 /
 *    a3). So m-tile c holds d = 16 c + 2g (rows g) and 16 c + 2g + 1 (rows g + 8).
 *  - Loads: the 64 keys' cache offsets of a tile (block table -> byte offset, att_key_fetch / att_key_store) are read
 *    into s_off a tile ahead of the tile's cp.async issue, so no block-table read sits between a load and its
 *    address (the loads took ~45 instructions a row with the read and its latency inline: 128/2048's decode kernel
 *    -5 % with this, the mixed step's decode rows -11 %, RESULTS 2026-12-03T15:10Z). O's rescale is skipped when no
 *    head's maximum moved (warp vote). A pipeline per warp (each warp loading only its own 16 keys, no CTA barrier
 *    in the loop) was measured and dropped: 1 % slower (more instructions, long-scoreboard stalls for barrier ones).
 * Shared memory: ATT_T8_STAGES byte tiles of K and V (cp.async, swizzled by att_sw8), the merge buffer
 * [4][8][D + pad] over them once the loop is done. */
#define ATT_T8_STAGES 3 /* [int8 kv] [fp8 kv] tiles in flight + 1 (3: 4 CTAs of 128 threads fit an SM at D = 128) */

template <int D> static constexpr int att_dec_t8_smem()
{
    return 2 * ATT_T8_STAGES * ATT_KT * D > 4 * 8 * (D + ATT_DEC_OPAD) * 4 ? 2 * ATT_T8_STAGES * ATT_KT * D
                                                                            : 4 * 8 * (D + ATT_DEC_OPAD) * 4;
}

/* lane (g, q) of the result holds elements (2q, g), (2q + 1, g) of the 8x8 b16 matrix whose row g,
 * columns 2q, 2q + 1 this lane held (the mma C / A fragment layout) */
static __device__ __forceinline__ uint32_t att_movt(uint32_t x)
{
    uint32_t r;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(r) : "r"(x));
    return r;
}

/* [trace] Built with -DSITS_ATT_PF_TRACE (as the prefill kernel's; read by sits_k_att_dec_trace, printed by
 * `bench/sits-bench-attention --trace` for a decodes-only batch): thread 0 of every CTA of the last 8-bit decode launch
 * records [0] / [1] / [2] %globaltimer (ns) at entry, when its first tile has landed (after the first item's first
 * barrier) and at exit; [3] items, [4] key tiles; clock64 cycles [5] of the items' set-up (item start -> first tile
 * landed), [6] of their ends (after the key loop -> merged and written); [7] %smid. Accumulated in shared memory (no
 * registers). Without the macro: no code, no memory. */
#ifdef SITS_ATT_PF_TRACE
#define ATT_DEC_TRACE_MAX 8192
__device__ unsigned long long att_dec_trace_buf[ATT_DEC_TRACE_MAX][8];
__device__ int att_dec_trace_n;
#define ATT_DEC_TR(stmt) (threadIdx.x == 0 ? (void)(stmt) : (void)0)
#else
#define ATT_DEC_TR(stmt) ((void)0)
#endif

/* [perf: kv before wait] rows of a tile from key k0 whose keys are <= cut (0 .. ATT_KT; cut may be INT_MIN) */
static __device__ __forceinline__ int att_rows_upto(int cut, int k0)
{
    return cut < k0 ? 0 : min(cut - k0 + 1, ATT_KT);
}

template <int D, bool F8>
static __global__ void __launch_bounds__(ATT_THREADS, 4) att_decode_q8_kernel(att_params p)
{
    sits_k_pdl_trigger();   /* [perf: pdl] the linear reading this output may start (kernels/gemv.cu) */
    extern __shared__ uint4 att_dq8_smem_raw[];
    constexpr int NST = ATT_T8_STAGES;
    unsigned char *sK = reinterpret_cast<unsigned char *>(att_dq8_smem_raw);  /* [NST][ATT_KT][D] bytes */
    unsigned char *sV = sK + NST * ATT_KT * D;                                /* [NST][ATT_KT][D] bytes */
    float *sO = reinterpret_cast<float *>(att_dq8_smem_raw); /* [4][8][D + pad], over the tiles once the loop is done */
    __shared__ float s_m[4][16], s_l[4][16];
    __shared__ float s_kvs[NST * 2 * ATT_KT]; /* scales [buffer][K, V][ATT_KT] */
    __shared__ long long s_off[NST][ATT_KT], s_soff[NST][ATT_KT]; /* the tiles' key offsets [buffer][key] (att_key_store) */
#ifdef SITS_ATT_PF_TRACE
    __shared__ unsigned long long s_dt[9]; /* the record (see above); [8] the current part's start (clock64) */
    ATT_DEC_TR((s_dt[0] = att_gtimer(), s_dt[1] = s_dt[3] = s_dt[4] = s_dt[5] = s_dt[6] = 0));
#endif

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, tq = lane & 3;
    if (p.list_count) sits_k_pdl_wait();   /* [perf: pdl] the list comes from the prefill kernel */
    const int n_list = p.list_count ? *p.list_count : p.n_tokens;
    const int S = att_splits(n_list, p.n_kv_heads, p.n_chunks, p.n_heads, D, p.target_ctas, p.part_floats, p.part != NULL);
    const long long n_items = (long long)n_list * p.n_kv_heads * p.n_chunks * S;
    bool waited = p.list_count != NULL;

    for (long long item = blockIdx.x; item < n_items; item += gridDim.x) {
        const int split = (int)(item % S);
        long long rest = item / S;
        const int chunk = (int)(rest % p.n_chunks);
        rest /= p.n_chunks;
        const int kvh = (int)(rest % p.n_kv_heads), li = (int)(rest / p.n_kv_heads);
        const int t = p.list_count ? p.list[li] : li;
        const int p_end = p.pos[t], p_begin = att_window_begin(p.window, p_end);
        const int L = p_end - p_begin + 1, part = att_part_len(L, S, p.min_part), n_active = (L + part - 1) / part;
        if (split >= n_active) continue; /* uniform over the CTA */
        const int kb = p_begin + split * part, ke = min(kb + part, p_end + 1) - 1;
        const int h0 = kvh * p.group + chunk * 8, n_rows = min(8, p.group - chunk * 8);
        const int32_t *bt = p.block_tables + (size_t)p.seq[t] * p.max_blocks;

        /* the key offsets of tiles 0 .. NST - 1 (a thread a key, the block-table reads in flight together), then tiles
         * 0 .. NST - 2 in flight (one cp.async group each, empty past the end) */
        const int n_kt = (ke - kb + ATT_KT) / ATT_KT;
#ifdef SITS_ATT_PF_TRACE
        ATT_DEC_TR((s_dt[8] = clock64(), s_dt[3]++, s_dt[4] += n_kt));
#endif
        if (threadIdx.x < ATT_KT) {
            att_key_ref kr[NST];
#pragma unroll
            for (int st = 0; st < NST; st++)
                kr[st] = st < n_kt ? att_key_fetch(p, bt, kb + st * ATT_KT, threadIdx.x, kb, ke) : att_key_ref{ -1, 0 };
#pragma unroll
            for (int st = 0; st < NST; st++) att_key_store<D, true>(s_off[st], s_soff[st], p, kvh, threadIdx.x, kr[st]);
        }
        __syncthreads();
        /* [perf: kv before wait] tiles 0 .. NST - 2's keys up to cut (all of them once waited), then the wait, the rest of
         * them as one more group (tail: the first tile's wait takes every group), then q */
        const int cut = waited ? ke : att_kv_safe_end(p, p_end);
        const bool tail = cut < min(ke, kb + (NST - 1) * ATT_KT - 1);   /* uniform over the CTA */
#pragma unroll
        for (int st = 0; st < NST - 1; st++) {
            if (st < n_kt)
                att_load_raw8<D, ATT_THREADS, true>(sK + st * ATT_KT * D, sV + st * ATT_KT * D, s_kvs + st * 2 * ATT_KT, p,
                                                    s_off[st], s_soff[st], tail ? 1 : 0, att_rows_upto(cut, kb + st * ATT_KT));
            att_cp_commit();
        }
        if (!waited) {
            sits_k_pdl_wait();   /* [perf: pdl] launched as a dependent (sits_k_launch_dep): q and this step's keys from RoPE + KV write */
            waited = true;
        }
        if (tail) {
#pragma unroll
            for (int st = 0; st < NST - 1; st++)
                if (st < n_kt)
                    att_load_raw8<D, ATT_THREADS, true>(sK + st * ATT_KT * D, sV + st * ATT_KT * D, s_kvs + st * 2 * ATT_KT, p,
                                                        s_off[st], s_soff[st], 2, att_rows_upto(cut, kb + st * ATT_KT));
            att_cp_commit();
        }
        /* q of head h0 + g as f16 B fragments in the permuted order: qf[kk] = q[16 kk + 4 tq .. + 3] (zeros past n_rows) */
        uint32_t qf[D / 16][2];
        {
            const sits_bf16_t *qr = p.q + (size_t)t * p.q_row_stride + (size_t)(h0 + g) * D + 4 * tq;
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                uint2 v = g < n_rows ? *reinterpret_cast<const uint2 *>(qr + 16 * kk) : make_uint2(0u, 0u);
                qf[kk][0] = att_bf2_h2(v.x);
                qf[kk][1] = att_bf2_h2(v.y);
            }
        }

        /* o[c]: m-tile c of O^T: [0] (d 16c + 2g, head 2tq), [1] (same d, head 2tq + 1), [2] / [3] d + 1 */
        float o[D / 16][4];
#pragma unroll
        for (int c = 0; c < D / 16; c++) o[c][0] = o[c][1] = o[c][2] = o[c][3] = 0.0f;
        float mA = -INFINITY, mB = -INFINITY, lA = 0.0f, lB = 0.0f; /* heads 2tq (A) and 2tq + 1 (B) */

        for (int it = 0; it < n_kt; it++) {
            /* one barrier a tile: tile it has landed when at most NST - 2 groups are pending (the prologue's NST - 1
             * and one an iteration); after the barrier every warp has left tile it - 1's buffer, so tile it + NST - 1
             * goes into it (its key offsets, s_off[nb], were stored before this barrier). One barrier, not two
             * (loads before the first, a second ending the iteration): batch 512 x 2048 -2 % (RESULTS 2026-12-03T17:40Z) */
            const int buf = it % NST, nxt = it + NST - 1, nb = nxt % NST;
            /* tile it + NST's block ids, read now (off the loads' path), stored after this tile's math into slot buf
             * (tile it's, whose loads were issued NST - 1 iterations ago); read after the next iteration's barrier */
            const bool ahead = it + NST < n_kt && threadIdx.x < ATT_KT;
            att_key_ref nk = { -1, 0 };
            if (ahead) nk = att_key_fetch(p, bt, kb + (it + NST) * ATT_KT, threadIdx.x, kb, ke);
            if (tail && it == 0) att_cp_wait<0>();   /* [perf: kv before wait] the prologue's tail group too */
            else att_cp_wait<NST - 2>();
            __syncthreads();
#ifdef SITS_ATT_PF_TRACE
            if (it == 0) ATT_DEC_TR((s_dt[5] += clock64() - s_dt[8], s_dt[1] = s_dt[1] ? s_dt[1] : att_gtimer()));
#endif
            if (nxt < n_kt)
                att_load_raw8<D, ATT_THREADS, true>(sK + nb * ATT_KT * D, sV + nb * ATT_KT * D, s_kvs + nb * 2 * ATT_KT, p,
                                                    s_off[nb], s_soff[nb]);
            att_cp_commit();
            const int k0 = kb + it * ATT_KT + warp * 16; /* this warp's first key */
            if (k0 <= ke) {
                const unsigned char *tK = sK + buf * ATT_KT * D, *tV = sV + buf * ATT_KT * D;
                const float *ks = s_kvs + buf * 2 * ATT_KT, *vs = ks + ATT_KT;
                const int r0 = warp * 16 + g; /* tile rows (keys) r0, r0 + 8 */
                float s[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
#pragma unroll
                for (int kk = 0; kk < D / 16; kk++) {
                    const uint32_t w0 = *reinterpret_cast<const uint32_t *>(tK + att_sw8<D>(r0, kk) + 4 * tq);
                    const uint32_t w1 = *reinterpret_cast<const uint32_t *>(tK + att_sw8<D>(r0 + 8, kk) + 4 * tq);
                    uint32_t a[4];
                    att_q8x4_h2<F8>(w0, a[0], a[2]);
                    att_q8x4_h2<F8>(w1, a[1], a[3]);
                    att_mma_f16(s, a, qf[kk][0], qf[kk][1]);
                }
                const bool ok0 = k0 + g <= ke, ok1 = k0 + g + 8 <= ke;
                const float sc0 = p.scale_log2 * ks[r0], sc1 = p.scale_log2 * ks[r0 + 8];
                {
                    float sf[1][4] = { { s[0] * sc0, s[1] * sc0, s[2] * sc1, s[3] * sc1 } };
                    att_cap_frag<1>(sf, p.softcap_log2);
                    s[0] = ok0 ? sf[0][0] : -INFINITY;
                    s[1] = ok0 ? sf[0][1] : -INFINITY;
                    s[2] = ok1 ? sf[0][2] : -INFINITY;
                    s[3] = ok1 ? sf[0][3] : -INFINITY;
                }
                float xA = fmaxf(s[0], s[2]), xB = fmaxf(s[1], s[3]);
#pragma unroll
                for (int off = 4; off <= 16; off <<= 1) {
                    xA = fmaxf(xA, __shfl_xor_sync(0xffffffffu, xA, off));
                    xB = fmaxf(xB, __shfl_xor_sync(0xffffffffu, xB, off));
                }
                const float nA = fmaxf(mA, xA), nB = fmaxf(mB, xB);
                const float uA = nA == -INFINITY ? 0.0f : nA, uB = nB == -INFINITY ? 0.0f : nB;
                const float cA = exp2f(mA - uA), cB = exp2f(mB - uB);
                const bool moved = __any_sync(0xffffffffu, nA != mA || nB != mB); /* else every c is 1: O as it is */
                mA = nA;
                mB = nB;
                s[0] = exp2f(s[0] - uA);
                s[1] = exp2f(s[1] - uB);
                s[2] = exp2f(s[2] - uA);
                s[3] = exp2f(s[3] - uB);
                lA = lA * cA + s[0] + s[2];
                lB = lB * cB + s[1] + s[3];
                if (moved)
#pragma unroll
                    for (int c = 0; c < D / 16; c++) {
                        o[c][0] *= cA;
                        o[c][1] *= cB;
                        o[c][2] *= cA;
                        o[c][3] *= cB;
                    }
                const float v0 = vs[r0] * ATT_VSC, v1 = vs[r0 + 8] * ATT_VSC;
                const uint32_t b0 = att_movt(att_pack_h(s[0] * v0, s[1] * v0)), b1 = att_movt(att_pack_h(s[2] * v1, s[3] * v1));
                const int mi = lane >> 3, vkey = warp * 16 + ((mi & 1) << 3) + (lane & 7);
#pragma unroll
                for (int dp = 0; dp < D / 32; dp++) {
                    uint32_t r[4];
                    att_ldsm4_t(r, tV + att_sw8<D>(vkey, 2 * dp + (mi >> 1)));
                    /* r[0] keys 0-7 / r[1] keys 8-15 of chunk 2dp, r[2] / r[3] of chunk 2dp + 1; bytes (k 2q d 2g,
                     * k 2q d 2g+1, k 2q+1 d 2g, k 2q+1 d 2g+1) -> the d 2g pair of keys low, the d 2g + 1 pair high */
                    const uint32_t e0 = __byte_perm(r[0], 0, 0x3120), e1 = __byte_perm(r[1], 0, 0x3120);
                    const uint32_t e2 = __byte_perm(r[2], 0, 0x3120), e3 = __byte_perm(r[3], 0, 0x3120);
                    uint32_t a0[4], a1[4];
                    att_q8x4_h2<F8>(e0, a0[0], a0[1]);
                    att_q8x4_h2<F8>(e1, a0[2], a0[3]);
                    att_q8x4_h2<F8>(e2, a1[0], a1[1]);
                    att_q8x4_h2<F8>(e3, a1[2], a1[3]);
                    att_mma_f16(o[2 * dp], a0, b0, b1);
                    att_mma_f16(o[2 * dp + 1], a1, b0, b1);
                }
            }
            if (ahead) att_key_store<D, true>(s_off[buf], s_soff[buf], p, kvh, threadIdx.x, nk);
        }
        __syncthreads(); /* every warp past its last tile before sO (over the tiles) is written */
#ifdef SITS_ATT_PF_TRACE
        ATT_DEC_TR(s_dt[8] = clock64());
#endif

        /* l over the warp's keys (lanes g), then m, l of heads 2tq, 2tq + 1 to s_m, s_l */
#pragma unroll
        for (int off = 4; off <= 16; off <<= 1) {
            lA += __shfl_xor_sync(0xffffffffu, lA, off);
            lB += __shfl_xor_sync(0xffffffffu, lB, off);
        }
        if (g == 0) {
            s_m[warp][2 * tq] = mA;
            s_m[warp][2 * tq + 1] = mB;
            s_l[warp][2 * tq] = lA;
            s_l[warp][2 * tq + 1] = lB;
        }
        constexpr int OS = D + ATT_DEC_OPAD;
        float *wO = sO + warp * 8 * OS;
        const float inv = 1.0f / ATT_VSC;
#pragma unroll
        for (int c = 0; c < D / 16; c++) {
            const int d = 16 * c + 2 * g;
            wO[(2 * tq) * OS + d] = o[c][0] * inv;
            wO[(2 * tq + 1) * OS + d] = o[c][1] * inv;
            wO[(2 * tq) * OS + d + 1] = o[c][2] * inv;
            wO[(2 * tq + 1) * OS + d + 1] = o[c][3] * inv;
        }
        __syncthreads();
        att_dec_merge<D, 8>(p, sO, s_m, s_l, n_rows, n_active, t, li, h0, split, S, n_list);
        __syncthreads(); /* the next item reuses the shared memory */
#ifdef SITS_ATT_PF_TRACE
        ATT_DEC_TR(s_dt[6] += clock64() - s_dt[8]);
#endif
    }
#ifdef SITS_ATT_PF_TRACE
    if (threadIdx.x == 0 && blockIdx.x < ATT_DEC_TRACE_MAX) {
        unsigned sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        unsigned long long *r = att_dec_trace_buf[blockIdx.x];
        for (int k = 0; k < 7; k++) r[k] = s_dt[k];
        r[2] = att_gtimer();
        r[7] = sm;
        if (blockIdx.x == 0) att_dec_trace_n = (int)min((unsigned)gridDim.x, (unsigned)ATT_DEC_TRACE_MAX);
    }
#endif
}

/* [trace] The records of the last 8-bit decode launch (see ATT_DEC_TR) to dst [max_ctas][8]: their count, or -1 when
 * built without SITS_ATT_PF_TRACE (or on a CUDA error). Synchronous; a debugging aid of the benchmark. */
extern "C" int sits_k_att_dec_trace(unsigned long long *dst, int max_ctas)
{
#ifdef SITS_ATT_PF_TRACE
    return att_trace_read(att_dec_trace_n, att_dec_trace_buf, dst, max_ctas);
#else
    (void)dst;
    (void)max_ctas;
    return -1;
#endif
}

int att_decode_smem_bytes(int head_dim, int q8)
{
    if (q8) return head_dim == 64 ? att_dec_t8_smem<64>() : att_dec_t8_smem<128>();
    return head_dim == 64 ? att_dec_smem<64>() : att_dec_smem<128>();
}

template <int D> static sits_status_t att_decode_launch_t(const att_params &p, int grid, cudaStream_t stream)
{
    constexpr int smem = att_dec_smem<D>();
    static_assert(4 * 16 * (D + ATT_DEC_OPAD) * 4 <= 4 * ATT_KT * D * 2, "merge buffer must fit over the K/V tiles");
    static int smem_set[SITS_K_DEV_CACHE];   /* [perf: launch cost] */
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || sits_k_smem_limit(att_decode_kernel<D>, dev, smem, smem_set) != cudaSuccess)
        return SITS_ERR_CUDA;
    const cudaError_t e = sits_k_launch_dep(att_decode_kernel<D>, (unsigned)grid, ATT_THREADS, smem, stream, p);
    return e == cudaSuccess ? SITS_K_LAUNCH_STATUS() : SITS_ERR_CUDA;
}

/* [int8 kv] [fp8 kv] */
template <int D, bool F8> static sits_status_t att_decode_q8_launch_t(const att_params &p, int grid, cudaStream_t stream)
{
    constexpr int smem = att_dec_t8_smem<D>();
    static int smem_set[SITS_K_DEV_CACHE];   /* [perf: launch cost] */
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || sits_k_smem_limit(att_decode_q8_kernel<D, F8>, dev, smem, smem_set) != cudaSuccess)
        return SITS_ERR_CUDA;
    const cudaError_t e = sits_k_launch_dep(att_decode_q8_kernel<D, F8>, (unsigned)grid, ATT_THREADS, smem, stream, p);
    return e == cudaSuccess ? SITS_K_LAUNCH_STATUS() : SITS_ERR_CUDA;
}

sits_status_t att_launch_decode(const att_params &p, int head_dim, int grid, cudaStream_t stream)
{
    if (p.kv_i8 && p.kv_f8) /* [fp8 kv] */
        return head_dim == 64 ? att_decode_q8_launch_t<64, true>(p, grid, stream) : att_decode_q8_launch_t<128, true>(p, grid, stream);
    if (p.kv_i8) /* [int8 kv] */
        return head_dim == 64 ? att_decode_q8_launch_t<64, false>(p, grid, stream)
                              : att_decode_q8_launch_t<128, false>(p, grid, stream);
    return head_dim == 64 ? att_decode_launch_t<64>(p, grid, stream) : att_decode_launch_t<128>(p, grid, stream);
}
