/* attention_prefill.cu -- tiled flash attention (tensor cores) for chunks of many query tokens of
 * one sequence attending the paged cache causally (cached prefix + the chunk itself).
 *
 * Grid: (ceil(n_tokens / 64) query tiles, n_heads). A tile is 64 consecutive batch rows
 * (tokens); it may hold rows of several sequences (a batch mixes chunks and decode tokens). The
 * tile OWNS the rows of every sequence that has >= ATT_PF_OWN_MIN rows in it and runs one pass
 * per such sequence; the other rows are appended (by the head-0 CTA) to the list that the decode
 * kernel then processes, so every row is computed exactly once, whatever the mix.
 *
 * A pass: the rows of sequence s (others zero) are the 64 x D Q tile, 16 rows per warp, kept in
 * registers as mma A fragments. Keys run from the smallest window start to the largest position
 * of those rows in tiles of 64, read through the block table into double-buffered swizzled
 * shared memory (cp.async). Per tile and warp: S = Q K^T (mma.m16n8k16, fp32), mask each row to
 * its own [max(0, pos - window + 1), pos], online softmax in fp32 (base 2), O += P V with P in
 * bf16. A warp whose 16 rows see none of the tile's keys skips it (causal / window). Rows need
 * not have consecutive positions: each row carries its own range.
 *
 * Heaviest tiles first: blockIdx.x counts from the last tile (the longest causal ranges).
 *
 * [int8 kv] [fp8 kv] QM = SITS_K_KV_I8 / _F8 reads 8-bit caches: each tile is staged raw (cp.async) in
 * the upper half of its 16-bit buffer and widened in place to f16 once it lands (att_widen_kv: exact,
 * unscaled, one cvt per two values). The MMAs then run in f16 (Q converted once per pass): a key's
 * K scale multiplies its scores with scale_log2, its V scale multiplies its P column before P is
 * packed, as in the decode kernel. Widening with the scales (q * scale -> bf16, three conversions and
 * a multiply per value, session 12's kernel) took about as long as the tile's MMAs. */
#include "kernels/attention_mma.cuh"

#include <limits.h>

template <int D> static constexpr int att_pf_smem() { return (ATT_PF_ROWS + 4 * ATT_KT) * D * 2; }

template <int D, int QM>
static __global__ void __launch_bounds__(ATT_THREADS, 2) att_prefill_kernel(att_params p)
{
    extern __shared__ uint4 att_pf_smem_raw[];
    sits_bf16_t *sQ = reinterpret_cast<sits_bf16_t *>(att_pf_smem_raw); /* [64][D] */
    sits_bf16_t *sK = sQ + ATT_PF_ROWS * D;                              /* [2][ATT_KT][D] */
    sits_bf16_t *sV = sK + 2 * ATT_KT * D;                               /* [2][ATT_KT][D] */
    __shared__ int s_seq[ATT_PF_ROWS], s_lo[ATT_PF_ROWS], s_hi[ATT_PF_ROWS], s_lead[ATT_PF_ROWS];
    __shared__ int s_cnt[2], s_base, s_rng[2][2];
    constexpr bool Q8 = QM != SITS_K_KV_BF16;
    __shared__ __align__(16) float s_kvs[Q8 ? 2 * 2 * ATT_KT : 2]; /* [int8 kv] scales [buffer][K, V][ATT_KT] (read as float2) */

    const int tile = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, kvh = h / p.group, T0 = tile * ATT_PF_ROWS;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, tq = lane & 3;

    /* Ownership: row r is owned when its sequence has >= ATT_PF_OWN_MIN rows in the tile; the first
     * such row of each sequence leads a pass. */
    if (tid < ATT_PF_ROWS) s_seq[tid] = T0 + tid < p.n_tokens ? p.seq[T0 + tid] : -1;
    __syncthreads();
    bool left = false;    /* a valid row not owned: for the decode kernel */
    unsigned left_bal = 0;
    if (tid < ATT_PF_ROWS) {
        int s = s_seq[tid], cnt = 0;
        bool first = true;
        for (int r = 0; r < ATT_PF_ROWS; r++) {
            int sr = s_seq[r];
            cnt += sr == s;
            first = first && !(r < tid && sr == s);
        }
        bool owned = s >= 0 && cnt >= ATT_PF_OWN_MIN;
        s_lead[tid] = owned && first;
        left = s >= 0 && !owned;
        left_bal = __ballot_sync(0xffffffffu, left);
        if (lane == 0) s_cnt[warp] = __popc(left_bal);
    }
    __syncthreads();
    if (p.list_count && h == 0) {
        if (tid == 0) s_base = s_cnt[0] + s_cnt[1] > 0 ? atomicAdd(p.list_count, s_cnt[0] + s_cnt[1]) : 0;
        __syncthreads();
        if (left) p.list[s_base + (warp ? s_cnt[0] : 0) + __popc(left_bal & ((1u << lane) - 1u))] = T0 + tid;
    }

    for (int lead = 0; lead < ATT_PF_ROWS; lead++) {
        if (!s_lead[lead]) continue; /* uniform: shared memory, stable since the sync above */
        const int ps = s_seq[lead];
        const int32_t *bt = p.block_tables + (size_t)ps * p.max_blocks;

        /* Per-row key ranges (empty for rows of other sequences) and the pass's range. */
        if (tid < ATT_PF_ROWS) {
            bool in = s_seq[tid] == ps;
            int pe = in ? p.pos[T0 + tid] : -1;
            int pb = in ? att_window_begin(p.window, pe) : INT_MAX;
            s_lo[tid] = pb;
            s_hi[tid] = pe;
            int mn = __reduce_min_sync(0xffffffffu, pb), mx = __reduce_max_sync(0xffffffffu, pe);
            if (lane == 0) {
                s_rng[warp][0] = mn;
                s_rng[warp][1] = mx;
            }
        }
        /* Q rows of this pass (zero for the others). */
        {
            constexpr int CH = D / 8;
            for (int i = tid; i < ATT_PF_ROWS * CH; i += ATT_THREADS) {
                int r = i / CH, ch = i % CH;
                bool in = s_seq[r] == ps;
                const sits_bf16_t *src = in ? p.q + (size_t)(T0 + r) * p.q_row_stride + (size_t)h * D + ch * 8 : p.q;
                att_cp16(sQ + att_sw<D>(r, ch), src, in);
            }
            att_cp_commit();
        }
        __syncthreads();
        const int k_lo = min(s_rng[0][0], s_rng[1][0]), k_hi = max(s_rng[0][1], s_rng[1][1]);
        const int rw = warp * 16;
        const int lo0 = s_lo[rw + g], hi0 = s_hi[rw + g], lo1 = s_lo[rw + g + 8], hi1 = s_hi[rw + g + 8];
        const int w_lo = __reduce_min_sync(0xffffffffu, s_lo[rw + (lane & 15)]);
        const int w_hi = __reduce_max_sync(0xffffffffu, s_hi[rw + (lane & 15)]);
        /* keys every row of the warp sees: a tile inside [w_lo_max, w_hi_min] needs no mask (empty for a warp
         * with a row of another sequence: its lo is INT_MAX) */
        const int w_lo_max = __reduce_max_sync(0xffffffffu, s_lo[rw + (lane & 15)]);
        const int w_hi_min = __reduce_min_sync(0xffffffffu, s_hi[rw + (lane & 15)]);
        const int n_kt = (k_hi - k_lo + ATT_KT) / ATT_KT;

        att_load_tile<D, Q8>(sK, sV, s_kvs, p, bt, kvh, k_lo, k_lo, k_hi);
        att_cp_commit();
        att_cp_wait<1>();
        __syncthreads();
        uint32_t qf[D / 16][4];
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            att_ldsm4(qf[kk], sQ + att_sw<D>(rw + (lane & 15), 2 * kk + (lane >> 4)));
            if (Q8)
#pragma unroll
                for (int e = 0; e < 4; e++) qf[kk][e] = att_bf2_h2(qf[kk][e]);
        }

        float o[D / 8][4];
#pragma unroll
        for (int j = 0; j < D / 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
        float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;

        for (int it = 0; it < n_kt; it++) {
            const int buf = it & 1, k0 = k_lo + it * ATT_KT;
            if (it + 1 < n_kt) {
                int nb = buf ^ 1;
                att_load_tile<D, Q8>(sK + nb * ATT_KT * D, sV + nb * ATT_KT * D, s_kvs + (Q8 ? nb * 2 * ATT_KT : 0), p, bt,
                                     kvh, k0 + ATT_KT, k_lo, k_hi);
                att_cp_commit();
                att_cp_wait<1>();
            } else {
                att_cp_wait<0>();
            }
            __syncthreads();
            if (Q8) att_widen_kv<D, QM == SITS_K_KV_F8>(sK + buf * ATT_KT * D, sV + buf * ATT_KT * D);
            if (w_hi >= k0 && w_lo <= k0 + ATT_KT - 1) {
                const sits_bf16_t *tK = sK + buf * ATT_KT * D, *tV = sV + buf * ATT_KT * D;
                float s[ATT_KT / 8][4];
#pragma unroll
                for (int j = 0; j < ATT_KT / 8; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
                for (int kk = 0; kk < D / 16; kk++)
#pragma unroll
                    for (int np = 0; np < ATT_KT / 16; np++) {
                        uint32_t b[4];
                        att_ldsm4(b, tK + att_sw<D>(np * 16 + (lane & 7) + ((lane >> 4) << 3), 2 * kk + ((lane >> 3) & 1)));
                        if (Q8) {
                            att_mma_f16(s[2 * np], qf[kk], b[0], b[1]);
                            att_mma_f16(s[2 * np + 1], qf[kk], b[2], b[3]);
                        } else {
                            att_mma(s[2 * np], qf[kk], b[0], b[1]);
                            att_mma(s[2 * np + 1], qf[kk], b[2], b[3]);
                        }
                    }
                const float *ks = s_kvs + (Q8 ? buf * 2 * ATT_KT : 0), *vs = ks + ATT_KT; /* [8-bit kv] this tile's scales */
                /* scale (and [families] soft-cap), then the mask: straight-line loops behind warp-uniform branches
                 * (a per-score branch on the cap or the mask made one basic block per score: no overlap of the
                 * scores' latencies, the kernel ran at ~110 TFLOP/s) */
#pragma unroll
                for (int j = 0; j < ATT_KT / 8; j++) {
                    float sa = p.scale_log2, sb = p.scale_log2;
                    if (Q8) {
                        float2 kq = *reinterpret_cast<const float2 *>(ks + 8 * j + 2 * tq);
                        sa *= kq.x;
                        sb *= kq.y;
                    }
                    s[j][0] *= sa;
                    s[j][1] *= sb;
                    s[j][2] *= sa;
                    s[j][3] *= sb;
                }
                att_cap_frag<ATT_KT / 8>(s, p.softcap_log2);
                if (!(k0 >= w_lo_max && k0 + ATT_KT - 1 <= w_hi_min)) { /* some row of the warp does not see every key */
#pragma unroll
                    for (int j = 0; j < ATT_KT / 8; j++) {
                        int key = k0 + 8 * j + 2 * tq;
                        s[j][0] = key >= lo0 && key <= hi0 ? s[j][0] : -INFINITY;
                        s[j][1] = key + 1 >= lo0 && key + 1 <= hi0 ? s[j][1] : -INFINITY;
                        s[j][2] = key >= lo1 && key <= hi1 ? s[j][2] : -INFINITY;
                        s[j][3] = key + 1 >= lo1 && key + 1 <= hi1 ? s[j][3] : -INFINITY;
                    }
                }
                float c0, c1;
                att_softmax_step<ATT_KT / 8>(s, m0, m1, l0, l1, c0, c1);
#pragma unroll
                for (int j = 0; j < D / 8; j++) {
                    o[j][0] *= c0;
                    o[j][1] *= c0;
                    o[j][2] *= c1;
                    o[j][3] *= c1;
                }
#pragma unroll
                for (int kk = 0; kk < ATT_KT / 16; kk++) {
                    uint32_t a[4];
                    if (Q8) { /* P times the keys' V scales, in f16 */
                        float2 v0 = *reinterpret_cast<const float2 *>(vs + 16 * kk + 2 * tq);
                        float2 v1 = *reinterpret_cast<const float2 *>(vs + 16 * kk + 8 + 2 * tq);
                        a[0] = att_pack_h(s[2 * kk][0] * v0.x, s[2 * kk][1] * v0.y);
                        a[1] = att_pack_h(s[2 * kk][2] * v0.x, s[2 * kk][3] * v0.y);
                        a[2] = att_pack_h(s[2 * kk + 1][0] * v1.x, s[2 * kk + 1][1] * v1.y);
                        a[3] = att_pack_h(s[2 * kk + 1][2] * v1.x, s[2 * kk + 1][3] * v1.y);
                    } else {
                        a[0] = att_pack(s[2 * kk][0], s[2 * kk][1]);
                        a[1] = att_pack(s[2 * kk][2], s[2 * kk][3]);
                        a[2] = att_pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
                        a[3] = att_pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
                    }
#pragma unroll
                    for (int dp = 0; dp < D / 16; dp++) {
                        uint32_t b[4];
                        att_ldsm4_t(b, tV + att_sw<D>(kk * 16 + (lane & 15), 2 * dp + (lane >> 4)));
                        if (Q8) {
                            att_mma_f16(o[2 * dp], a, b[0], b[1]);
                            att_mma_f16(o[2 * dp + 1], a, b[2], b[3]);
                        } else {
                            att_mma(o[2 * dp], a, b[0], b[1]);
                            att_mma(o[2 * dp + 1], a, b[2], b[3]);
                        }
                    }
                }
            }
            __syncthreads();
        }

        /* Epilogue: O / l for this pass's rows; rows of other sequences are left alone. */
#pragma unroll
        for (int off = 1; off <= 2; off <<= 1) {
            l0 += __shfl_xor_sync(0xffffffffu, l0, off);
            l1 += __shfl_xor_sync(0xffffffffu, l1, off);
        }
        const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
        const bool w0 = s_seq[rw + g] == ps, w1 = s_seq[rw + g + 8] == ps;
        sits_bf16_t *o0 = p.out + (size_t)(T0 + rw + g) * p.n_heads * D + (size_t)h * D + 2 * tq;
        sits_bf16_t *o1 = o0 + (size_t)8 * p.n_heads * D;
#pragma unroll
        for (int j = 0; j < D / 8; j++) {
            if (w0) *reinterpret_cast<__nv_bfloat162 *>(o0 + 8 * j) = __floats2bfloat162_rn(o[j][0] * inv0, o[j][1] * inv0);
            if (w1) *reinterpret_cast<__nv_bfloat162 *>(o1 + 8 * j) = __floats2bfloat162_rn(o[j][2] * inv1, o[j][3] * inv1);
        }
        __syncthreads(); /* the next pass rewrites s_lo / s_hi / s_rng and the tiles */
    }
}

template <int D, int QM> static sits_status_t att_prefill_launch_t(const att_params &p, cudaStream_t stream)
{
    constexpr int smem = att_pf_smem<D>();
    if (cudaFuncSetAttribute(att_prefill_kernel<D, QM>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess)
        return SITS_ERR_CUDA;
    dim3 grid((unsigned)((p.n_tokens + ATT_PF_ROWS - 1) / ATT_PF_ROWS), (unsigned)p.n_heads);
    att_prefill_kernel<D, QM><<<grid, ATT_THREADS, smem, stream>>>(p);
    return SITS_K_LAUNCH_STATUS();
}

sits_status_t att_launch_prefill(const att_params &p, int head_dim, cudaStream_t stream)
{
    if (p.kv_f8) /* [fp8 kv] */
        return head_dim == 64 ? att_prefill_launch_t<64, SITS_K_KV_F8>(p, stream) : att_prefill_launch_t<128, SITS_K_KV_F8>(p, stream);
    if (p.kv_i8) /* [int8 kv] */
        return head_dim == 64 ? att_prefill_launch_t<64, SITS_K_KV_I8>(p, stream) : att_prefill_launch_t<128, SITS_K_KV_I8>(p, stream);
    return head_dim == 64 ? att_prefill_launch_t<64, SITS_K_KV_BF16>(p, stream)
                          : att_prefill_launch_t<128, SITS_K_KV_BF16>(p, stream);
}
