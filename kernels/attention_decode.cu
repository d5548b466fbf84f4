/* attention_decode.cu -- GQA-aware split-K (flash-decoding) attention over the paged KV cache,
 * with tensor cores, for tokens that each attend their own sequence (decode steps, short chunks,
 * any mix); and the reduce kernel that merges the split-K partials.
 *
 * Work item = (token, KV head, chunk of <= 16 of its group's q heads, split). The item's q rows
 * (the group's heads of that token, padded to 16 with zeros) are the A operand of
 * mma.m16n8k16; each K/V element of the token's context is read from memory once per token and
 * KV head, whatever the group size. The token's window [b, e] of L positions is cut into S
 * partitions of att_part_len(L, S) positions (whole 64-key tiles); split i takes the i-th (none
 * past the end). A CTA (4 warps) streams its partition through double-buffered swizzled K/V
 * tiles (cp.async); warp w takes keys 16w .. 16w+15 of each tile (S = Q K^T, online softmax in
 * fp32, O += P V with P in bf16) and the 4 warps' states are merged through shared memory. A
 * token with one partition writes its output directly; otherwise the partial (m, l, O) goes to
 * the fp32 scratch and att_reduce_kernel combines them.
 *
 * Work items are taken grid-stride, so the grid is fixed by the host: in list mode the tokens
 * are those the prefill kernel left (p.list, count on the device), else all p.n_tokens; S is
 * derived on the device from that count (att_splits), so a captured CUDA graph stays valid.
 *
 * [int8 kv] Q8 = true reads int8 caches: each tile is staged raw (cp.async) in the upper half of
 * its bf16 buffer and widened in place (q * scale -> bf16) after it lands (att_dequant_kv); the
 * rest of the kernel is the bf16 one. */
#include "kernels/attention_mma.cuh"

#define ATT_DEC_OPAD 8 /* floats of padding per row of the merge buffer (bank spread) */

template <int D> static constexpr int att_dec_smem() { return (16 + 4 * ATT_KT) * D * 2; }

template <int D, bool Q8>
static __global__ void __launch_bounds__(ATT_THREADS) att_decode_kernel(att_params p)
{
    extern __shared__ uint4 att_dec_smem_raw[];
    sits_bf16_t *sQ = reinterpret_cast<sits_bf16_t *>(att_dec_smem_raw);   /* [16][D] */
    sits_bf16_t *sK = sQ + 16 * D;                                          /* [2][ATT_KT][D] */
    sits_bf16_t *sV = sK + 2 * ATT_KT * D;                                  /* [2][ATT_KT][D] */
    float *sO = reinterpret_cast<float *>(sK);  /* [4][16][D + pad], over sK/sV once the loop is done */
    __shared__ float s_m[4][16], s_l[4][16];
    __shared__ float s_kvs[Q8 ? 2 * 2 * ATT_KT : 1]; /* [int8 kv] scales [buffer][K, V][ATT_KT] */

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, tq = lane & 3;
    const int n_list = p.list_count ? *p.list_count : p.n_tokens;
    const int S = att_splits(n_list, p.n_kv_heads, p.n_chunks, p.n_heads, D, p.target_ctas, p.part_floats, p.part != NULL);
    const long long n_items = (long long)n_list * p.n_kv_heads * p.n_chunks * S;

    for (long long item = blockIdx.x; item < n_items; item += gridDim.x) {
        const int split = (int)(item % S);
        long long rest = item / S;
        const int chunk = (int)(rest % p.n_chunks);
        rest /= p.n_chunks;
        const int kvh = (int)(rest % p.n_kv_heads), li = (int)(rest / p.n_kv_heads);
        const int t = p.list_count ? p.list[li] : li;
        const int p_end = p.pos[t], p_begin = att_window_begin(p.window, p_end);
        const int L = p_end - p_begin + 1, part = att_part_len(L, S), n_active = (L + part - 1) / part;
        if (split >= n_active) continue; /* uniform over the CTA */
        const int kb = p_begin + split * part, ke = min(kb + part, p_end + 1) - 1;
        const int h0 = kvh * p.group + chunk * 16, n_rows = min(16, p.group - chunk * 16);
        const int32_t *bt = p.block_tables + (size_t)p.seq[t] * p.max_blocks;

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
        const int n_kt = (ke - kb + ATT_KT) / ATT_KT;
        att_load_tile<D, Q8>(sK, sV, s_kvs, p, bt, kvh, kb, kb, ke);
        att_cp_commit();
        att_cp_wait<1>();
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
                att_load_tile<D, Q8>(sK + nb * ATT_KT * D, sV + nb * ATT_KT * D, s_kvs + (Q8 ? nb * 2 * ATT_KT : 0), p, bt,
                                     kvh, kb + (it + 1) * ATT_KT, kb, ke);
                att_cp_commit();
                att_cp_wait<1>();
            } else {
                att_cp_wait<0>();
            }
            __syncthreads();
            if (Q8) att_dequant_kv<D>(sK + buf * ATT_KT * D, sV + buf * ATT_KT * D, s_kvs + buf * 2 * ATT_KT);
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
                    for (int e = 0; e < 4; e++) {
                        int key = k0 + 8 * j + 2 * tq + (e & 1);
                        s[j][e] = key <= ke ? att_cap(s[j][e] * p.scale_log2, p.softcap_log2) : -INFINITY;
                    }
                float c0, c1;
                att_softmax_step<2>(s, m0, m1, l0, l1, c0, c1);
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

        /* Merge the 4 warps: weight each by 2^(m_w - M); a warp that saw no key has m = -inf, l = 0. */
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
        constexpr int OS = D + ATT_DEC_OPAD;
        float *wO = sO + warp * 16 * OS;
#pragma unroll
        for (int j = 0; j < D / 8; j++) {
            int col = 8 * j + 2 * tq;
            *reinterpret_cast<float2 *>(wO + g * OS + col) = make_float2(o[j][0], o[j][1]);
            *reinterpret_cast<float2 *>(wO + (g + 8) * OS + col) = make_float2(o[j][2], o[j][3]);
        }
        __syncthreads();
        const long long pidx0 = ((long long)li * p.n_heads + h0) * S + split;
        for (int i = threadIdx.x; i < n_rows * D; i += ATT_THREADS) {
            int r = i / D, d = i % D;
            float M = fmaxf(fmaxf(s_m[0][r], s_m[1][r]), fmaxf(s_m[2][r], s_m[3][r]));
            float Lsum = 0.0f, acc = 0.0f;
#pragma unroll
            for (int w = 0; w < 4; w++) {
                float wt = s_m[w][r] == -INFINITY ? 0.0f : exp2f(s_m[w][r] - M);
                Lsum += s_l[w][r] * wt;
                acc += sO[(w * 16 + r) * OS + d] * wt;
            }
            if (n_active == 1) {
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
        __syncthreads(); /* the next item reuses the shared memory */
    }
}

/* out[t, h] = sum_i 2^(m_i - M) o_i / sum_i 2^(m_i - M) l_i over the token's partitions, for the
 * tokens the decode kernel split (more than one partition); grid-stride over (token, head). */
template <int D>
static __global__ void __launch_bounds__(ATT_THREADS) att_reduce_kernel(att_params p)
{
    const int n_list = p.list_count ? *p.list_count : p.n_tokens;
    const int S = att_splits(n_list, p.n_kv_heads, p.n_chunks, p.n_heads, D, p.target_ctas, p.part_floats, p.part != NULL);
    if (S == 1) return;
    const long long n_items = (long long)n_list * p.n_heads;
    for (long long item = blockIdx.x; item < n_items; item += gridDim.x) {
        const int li = (int)(item / p.n_heads), h = (int)(item % p.n_heads);
        const int t = p.list_count ? p.list[li] : li;
        const int p_end = p.pos[t], p_begin = att_window_begin(p.window, p_end);
        const int L = p_end - p_begin + 1, part = att_part_len(L, S), n_active = (L + part - 1) / part;
        if (n_active <= 1) continue; /* written by the decode kernel */
        const long long pidx0 = ((long long)li * p.n_heads + h) * S;
        float M = -INFINITY;
        for (int i = 0; i < n_active; i++) M = fmaxf(M, att_part_ml(p, n_list, S, pidx0 + i)[0]);
        for (int d = threadIdx.x; d < D; d += ATT_THREADS) {
            float Lsum = 0.0f, acc = 0.0f;
            for (int i = 0; i < n_active; i++) {
                const float *ml = att_part_ml(p, n_list, S, pidx0 + i);
                float wt = exp2f(ml[0] - M);
                Lsum += ml[1] * wt;
                acc += att_part_o(p, n_list, S, D, pidx0 + i)[d] * wt;
            }
            p.out[(size_t)t * p.n_heads * D + (size_t)h * D + d] = sits_k_f2bf(acc / Lsum);
        }
    }
}

int att_decode_smem_bytes(int head_dim)
{
    return head_dim == 64 ? att_dec_smem<64>() : att_dec_smem<128>();
}

template <int D, bool Q8> static sits_status_t att_decode_launch_t(const att_params &p, int grid, cudaStream_t stream)
{
    constexpr int smem = att_dec_smem<D>();
    static_assert(4 * 16 * (D + ATT_DEC_OPAD) * 4 <= 4 * ATT_KT * D * 2, "merge buffer must fit over the K/V tiles");
    if (cudaFuncSetAttribute(att_decode_kernel<D, Q8>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess)
        return SITS_ERR_CUDA;
    att_decode_kernel<D, Q8><<<grid, ATT_THREADS, smem, stream>>>(p);
    return SITS_K_LAUNCH_STATUS();
}

sits_status_t att_launch_decode(const att_params &p, int head_dim, int grid, cudaStream_t stream)
{
    if (p.kv_i8) /* [int8 kv] */
        return head_dim == 64 ? att_decode_launch_t<64, true>(p, grid, stream) : att_decode_launch_t<128, true>(p, grid, stream);
    return head_dim == 64 ? att_decode_launch_t<64, false>(p, grid, stream) : att_decode_launch_t<128, false>(p, grid, stream);
}

sits_status_t att_launch_reduce(const att_params &p, int head_dim, int grid, cudaStream_t stream)
{
    if (head_dim == 64) att_reduce_kernel<64><<<grid, ATT_THREADS, 0, stream>>>(p);
    else att_reduce_kernel<128><<<grid, ATT_THREADS, 0, stream>>>(p);
    return SITS_K_LAUNCH_STATUS();
}
