/* attention_prefill.cu -- tiled flash attention (tensor cores) for chunks of many query tokens of
 * one sequence attending the paged cache causally (cached prefix + the chunk itself).
 *
 * Grid: (ceil(n_tokens / ROWS) query tiles, n_heads), ROWS = 64 or 128 (MF below; att_prefill_mf picks). A
 * tile is ROWS consecutive batch rows (tokens); it may hold rows of several sequences (a batch mixes chunks and
 * decode tokens). The
 * tile OWNS the rows of every sequence that has >= ATT_PF_OWN_MIN rows in it and runs one pass
 * per such sequence; the other rows are appended (by the head-0 CTA) to the list that the decode
 * kernel then processes, so every row is computed exactly once, whatever the mix.
 *
 * A pass: the rows of sequence s (others zero) are the ROWS x D Q tile, 16 * MF rows per warp (MF 1: kept in
 * registers as mma A fragments; MF 2: read from shared memory per k-step). Keys run from the smallest window
 * start to the largest position of those rows in tiles of 64, read into double-buffered swizzled shared
 * memory (cp.async) from per-key offsets that threads 0-63 compute a tile ahead (the block-table read off
 * the loads' path: att_key_fetch / att_key_store). Per tile and warp: S = Q K^T (mma.m16n8k16, fp32), mask
 * each row to its own [max(0, pos - window + 1), pos], online softmax in fp32 (base 2; the scale folded into
 * the exponent's FFMA; the O rescale skipped when no row's maximum moved), O += P V with P in bf16. A warp
 * whose rows see none of the tile's keys skips it (causal / window). Rows need not have consecutive
 * positions: each row carries its own range.
 *
 * Heaviest tiles first: with p.pf_order (the default; att_pf_order_kernel, launched by att_prefill_launch_t with the
 * launch's own tile height) the CTAs, in launch order (x fastest), take the tiles by decreasing work estimate over
 * the whole batch, each tile for every head before the next tile,
 * so the last CTAs to start are the lightest whatever the mix of chunks (a mixed step of 2048-token prompts: heavy
 * tiles of the last head used to start last); without it blockIdx.x counts from the last tile (the longest causal
 * ranges of a single prompt), head blockIdx.y.
 *
 * [wgmma] The warpgroup-MMA kernel (WG 2; sm_90a, head_dim 128; by default once tiles are 128 rows,
 * att_prefill_launch_q): two warpgroups of 64 rows share each K / V tile. S = Q K^T as 8 wgmma m64n64k16 from
 * shared memory (Q and K in the 128-byte-swizzled K-major layout, att_swz); O += P V as 4 m64n128k16 with P
 * from registers and V read MN-major. Pipelined as FlashAttention-3 within a warpgroup: tile it's S is issued
 * with tile it - 1's P V behind it, and (bf16 KV; 8-bit KV: the widening) tile it's softmax runs while that P V
 * does -- the P V's wait sits in a block of its own, else ptxas schedules it before the softmax; V is triple-buffered. The
 * MMAs are straight-line (every tile's, masked; P 0 before the first): a wgmma under a divergent branch makes
 * ptxas serialise them all. 8-bit KV (QW): raw tiles land in a ring of three (tile it + 2 loads during tile it; a
 * ring of four, loads an iteration earlier, changed nothing), and tile it + 1 is widened to f16 in att_swz's layout
 * while tile it's MMAs run (its raw reads issued before them), off the barriers' path; f16
 * MMAs (3-4 % faster than mma.sync; widening each tile in place before its MMAs, two more barriers a tile, was
 * 3 % slower). bf16 KV: 128-key tiles (KT; S m64n128, 64 registers), half the barriers and loop overhead a key
 * (kernel 1.89 -> 1.58 ms at 8192 tokens, 4-layer 8B). One barrier a tile: the loads of the next tile are issued
 * after it, into buffers every thread has left.
 *
 * [int8 kv] [fp8 kv] QM = SITS_K_KV_I8 / _F8 reads 8-bit caches: each tile is staged raw (cp.async) in
 * the upper half of its 16-bit buffer and widened in place to f16 once it lands (att_widen_kv: exact,
 * unscaled, one cvt per two values). The MMAs then run in f16 (Q converted once per pass): a key's
 * K scale multiplies its scores with scale_log2, its V scale multiplies its P column before P is
 * packed, as in the decode kernel. Widening with the scales (q * scale -> bf16, three conversions and
 * a multiply per value, session 12's kernel) took about as long as the tile's MMAs. */
#include "kernels/attention_mma.cuh"

#include <limits.h>
#include <string.h>

/* WG 0: the mma.sync kernel, 4 warps, ATT_PF_ROWS * MF rows, 2 CTAs an SM. [wgmma] WG 1 / 2: the warpgroup-MMA
 * kernel with WG warpgroups (128 threads each), 64 rows each (warpgroup w the rows 64w .. 64w + 63), MF 1; 2
 * warpgroups: one CTA an SM (registers), 1: two. Only 2 is launched: 1 was 4 % slower with bf16 KV, 5 % with fp8
 * KV (4-layer 8B, 8192 tokens; RESULTS 2026-12-02T22:40Z). */
template <int WG> static __host__ __device__ constexpr int att_pf_threads() { return WG ? WG * ATT_THREADS : ATT_THREADS; }
template <int MF, int WG> static __host__ __device__ constexpr int att_pf_rows() { return WG ? WG * ATT_PF_ROWS : ATT_PF_ROWS * MF; }
/* V tile buffers: 2, [wgmma] 3 (tile it - 1's V is still read while tile it + 1 loads); K: 2 */
template <int WG> static __host__ __device__ constexpr int att_pf_vstages() { return WG ? 3 : 2; }
/* [wgmma] [8-bit kv] raw tile buffers (K and V bytes, [3][2][ATT_KT][D]): tile it + 2 loads while tile it + 1 is widened */
template <int D, int WG, bool Q8> static __host__ __device__ constexpr int att_pf_raw_bytes() { return WG && Q8 ? 3 * 2 * ATT_KT * D : 0; }
template <int D, int MF, int WG, bool Q8, int KT = ATT_KT> static constexpr int att_pf_smem()
{
    return (att_pf_rows<MF, WG>() + (2 + att_pf_vstages<WG>()) * KT) * D * 2 + att_pf_raw_bytes<D, WG, Q8>() +
           (WG ? 1024 : 0); /* [wgmma] room to align the tiles to 1024 bytes */
}

/* One tile's scores S [MF][NJ][4] (NJ: keys / 8) of the warp's rows (keys k0 ..) before the softmax step: scaled (8-bit
 * KV: times the keys' K scales ks; [families] then the soft-cap; returns 1), else left for the softmax's FFMA
 * (returns the scale); masked unless every row of the warp sees every key (all_in). Straight-line loops behind
 * warp-uniform branches (a per-score branch on the cap or the mask made one basic block per score: no overlap of
 * the scores' latencies, the kernel ran at ~110 TFLOP/s). */
template <int MF, bool Q8, int NJ>
static __device__ __forceinline__ float att_pf_mask(float (&s)[MF][NJ][4], const att_params &p, const float *ks, int k0,
                                                    bool all_in, const int *s_lo, const int *s_hi, int rw)
{
    const int lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
    const bool cap = p.softcap_log2 > 0.0f;
    if (Q8 || cap) {
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            float sa = p.scale_log2, sb = p.scale_log2;
            if (Q8) {
                float2 kq = *reinterpret_cast<const float2 *>(ks + 8 * j + 2 * tq);
                sa *= kq.x;
                sb *= kq.y;
            }
#pragma unroll
            for (int f = 0; f < MF; f++) {
                s[f][j][0] *= sa;
                s[f][j][1] *= sb;
                s[f][j][2] *= sa;
                s[f][j][3] *= sb;
            }
        }
#pragma unroll
        for (int f = 0; f < MF; f++) att_cap_frag<NJ>(s[f], p.softcap_log2);
    }
    if (!all_in) {
#pragma unroll
        for (int f = 0; f < MF; f++) {
            const int r0 = rw + 16 * f + g, lo0 = s_lo[r0], hi0 = s_hi[r0], lo1 = s_lo[r0 + 8], hi1 = s_hi[r0 + 8];
#pragma unroll
            for (int j = 0; j < NJ; j++) {
                int key = k0 + 8 * j + 2 * tq;
                s[f][j][0] = key >= lo0 && key <= hi0 ? s[f][j][0] : -INFINITY;
                s[f][j][1] = key + 1 >= lo0 && key + 1 <= hi0 ? s[f][j][1] : -INFINITY;
                s[f][j][2] = key >= lo1 && key <= hi1 ? s[f][j][2] : -INFINITY;
                s[f][j][3] = key + 1 >= lo1 && key + 1 <= hi1 ? s[f][j][3] : -INFINITY;
            }
        }
    }
    return Q8 || cap ? 1.0f : p.scale_log2;
}

/* The online softmax step of one m-fragment (P in s); c: its rows' O corrections; returns whether any row's
 * maximum moved (warp vote; else every c is 1). */
template <int NJ>
static __device__ __forceinline__ bool att_pf_softmax(float (&s)[NJ][4], float sc, float (&m)[2], float (&l)[2], float (&c)[2])
{
    return __any_sync(0xffffffffu, att_softmax_step<NJ>(s, sc, m[0], m[1], l[0], l[1], c[0], c[1]));
}

/* O [D / 8][4] (one m-fragment) times its rows' corrections, unless no row's maximum moved. */
template <int D> static __device__ __forceinline__ void att_pf_rescale(float (&o)[D / 8][4], const float (&c)[2], bool moved)
{
    if (moved)
#pragma unroll
        for (int j = 0; j < D / 8; j++) {
            o[j][0] *= c[0];
            o[j][1] *= c[0];
            o[j][2] *= c[1];
            o[j][3] *= c[1];
        }
}

/* The A fragment of P's keys 16 kk .. 16 kk + 15 (one m-fragment's s): bf16, or [8-bit kv] times the keys' V
 * scales vs, in f16. */
template <bool Q8, int NJ>
static __device__ __forceinline__ void att_pf_pack(uint32_t (&a)[4], const float (&s)[NJ][4], const float *vs, int kk)
{
    if (Q8) {
        const int tq = threadIdx.x & 3;
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
}

/* [trace] Built with -DSITS_ATT_PF_TRACE (`make NVCCFLAGS=-DSITS_ATT_PF_TRACE`; read by sits_k_att_pf_trace,
 * printed by `bench/sits-bench-attention --trace`): thread 0 of every CTA of the last prefill launch records where its
 * time went -- [0] / [1] %globaltimer (ns) at entry / exit; clock64 cycles [2] entry -> ownership and decode list
 * done, [3] -> the first pass's key loop starts (Q, key offsets, first tiles landed and widened), [4] -> that loop's
 * end, [5] -> exit (epilogue, other passes); [6] %smid | the first pass's key tiles << 16 | passes << 40. Without the
 * macro: no code, no memory. */
#ifdef SITS_ATT_PF_TRACE
#define ATT_PF_TRACE_MAX 32768
__device__ unsigned long long att_pf_trace_buf[ATT_PF_TRACE_MAX][8];
__device__ int att_pf_trace_n;
#define ATT_PF_MARK(i) (threadIdx.x == 0 ? (void)(s_tr[i] = clock64()) : (void)0) /* in shared memory: no registers */
#else
#define ATT_PF_MARK(i) ((void)0)
#endif

/* The first row >= from that leads a pass (a set bit of m [ROWS / 32]), or ROWS: a word a step, not a row */
template <int ROWS> static __device__ __forceinline__ int att_pf_next_lead(const unsigned *m, int from)
{
#pragma unroll 1
    for (int w = from >> 5; w < ROWS / 32; w++) {
        const unsigned b = m[w] & (w == from >> 5 ? ~0u << (from & 31) : ~0u);
        if (b) return w * 32 + __ffs(b) - 1;
    }
    return ROWS;
}

/* MF: m-fragments (16 query rows each) per warp: a tile is ATT_PF_ROWS * MF rows. MF 1 keeps the warp's Q
 * fragments in registers; MF 2 reads them from shared memory at every k-step (32 rows of Q, O and S in
 * registers would not fit) but every K / V fragment a warp loads then feeds twice the MMAs: shared-memory
 * reads per MMA drop from 0.5 ldmatrix.x4 to 0.31 (FlashAttention-2's 128-row tile at head_dim 128). */
template <int D, int QM, int MF, int WG = 0, int KTW = ATT_KT>
static __global__ void __launch_bounds__(att_pf_threads<WG>(), WG == 2 ? 1 : 2) att_prefill_kernel(att_params p)
{
    constexpr int KT = WG ? KTW : ATT_KT; /* keys a tile: [wgmma] 64 or, bf16 KV, 128 */
    static_assert(KT == ATT_KT || (KT == 128 && WG && QM == SITS_K_KV_BF16), "[wgmma] 128-key tiles: bf16 KV");
    constexpr int NT = att_pf_threads<WG>(), NW = NT / 32, ROWS = att_pf_rows<MF, WG>(), WR = ROWS / NW; /* WR: rows per warp, 16 * MF */
    constexpr bool QREG = MF == 1 && !WG;
    static_assert(WR == 16 * MF && ROWS <= NT && ROWS % 32 == 0, "16 rows per m-fragment, one thread per row");
    static_assert(!WG || (MF == 1 && D == 128), "[wgmma] 16 rows a warp, head_dim 128");
    extern __shared__ uint4 att_pf_smem_raw[];
    unsigned char *smem_base = reinterpret_cast<unsigned char *>(att_pf_smem_raw);
    if (WG) smem_base += (1024u - (att_smem_addr(smem_base) & 1023u)) & 1023u; /* [wgmma] swizzle atoms at 1024 bytes */
    sits_bf16_t *sQ = reinterpret_cast<sits_bf16_t *>(smem_base);       /* [ROWS][D] (8-bit KV, MF 2: f16; WG: att_swz) */
    constexpr int NSV = att_pf_vstages<WG>();
    sits_bf16_t *sK = sQ + ROWS * D;                                     /* [2][KT][D] */
    sits_bf16_t *sV = sK + 2 * KT * D;                               /* [NSV][KT][D] */
    __shared__ int s_seq[ROWS], s_lo[ROWS], s_hi[ROWS];
    __shared__ unsigned s_leadm[ROWS / 32]; /* bit r % 32 of word r / 32: row r leads a pass */
    __shared__ int s_cnt[ROWS / 32], s_base, s_rng[ROWS / 32][2];
    constexpr bool Q8 = QM != SITS_K_KV_BF16;
    constexpr bool QW = WG && Q8; /* [wgmma] [8-bit kv]: tiles widened a tile ahead, from a ring of three raw tiles */
    unsigned char *sR = reinterpret_cast<unsigned char *>(sV + NSV * KT * D); /* QW: [3][K, V][KT][D] bytes */
    __shared__ __align__(16) float s_kvs[Q8 ? (QW ? 3 : 2) * 2 * KT : 2]; /* [int8 kv] scales [buffer][K, V][KT] (read as float2) */
    __shared__ long long s_off[2][KT], s_soff[Q8 ? 2 : 1][KT]; /* the tiles' key offsets [buffer][key] (att_key_store) */

#ifdef SITS_ATT_PF_TRACE
    __shared__ long long s_tr[8]; /* [0..4] the marks, [5] entry globaltimer, [6] the first pass's key tiles, [7] passes */
    if (threadIdx.x == 0) {
        s_tr[5] = (long long)att_gtimer();
        s_tr[6] = s_tr[7] = 0;
    }
    ATT_PF_MARK(0);
#endif
    int tile = gridDim.x - 1 - blockIdx.x, h = blockIdx.y;
    if (p.pf_order) {   /* launch rank r = linear index / heads: the r-th heaviest tile, head = the remainder */
        const int L = blockIdx.y * gridDim.x + blockIdx.x, r = L / gridDim.y;
        tile = p.pf_order[r];
        h = L - r * gridDim.y;
    }
    const int kvh = h / p.group, T0 = tile * ROWS;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, tq = lane & 3;

    /* Ownership: row r is owned when its sequence has >= ATT_PF_OWN_MIN rows in the tile; the first
     * such row of each sequence leads a pass. A tile of one sequence (a long prompt's: most tiles) is decided by
     * one barrier: every row owned, row 0 the only lead, no row left (or no valid row); else each row counts its
     * sequence's rows (ROWS shared-memory reads a thread). */
    static_assert(ATT_PF_OWN_MIN <= ROWS, "a tile of one sequence owns its rows");
    if (tid < ROWS) s_seq[tid] = T0 + tid < p.n_tokens ? p.seq[T0 + tid] : -1;
    __syncthreads();
    const int seq0 = s_seq[0];
    const bool one = __syncthreads_and(tid >= ROWS || s_seq[tid] == seq0) != 0; /* uniform */
    bool left = false;    /* a valid row not owned: for the decode kernel */
    unsigned left_bal = 0;
    if (one) {
        if (tid < ROWS / 32) s_leadm[tid] = tid == 0 && seq0 >= 0 ? 1u : 0u;
    } else if (tid < ROWS) {
        int s = s_seq[tid], cnt = 0;
        bool first = true;
        for (int r = 0; r < ROWS; r++) {
            int sr = s_seq[r];
            cnt += sr == s;
            first = first && !(r < tid && sr == s);
        }
        bool owned = s >= 0 && cnt >= ATT_PF_OWN_MIN;
        const unsigned lead_bal = __ballot_sync(0xffffffffu, owned && first);
        left = s >= 0 && !owned;
        left_bal = __ballot_sync(0xffffffffu, left);
        if (lane == 0) {
            s_cnt[warp] = __popc(left_bal);
            s_leadm[warp] = lead_bal;
        }
    }
    __syncthreads();
    if (!one && p.list_count && h == 0) {
        if (tid == 0) {
            int n = 0;
#pragma unroll
            for (int w = 0; w < ROWS / 32; w++) n += s_cnt[w];
            s_base = n > 0 ? atomicAdd(p.list_count, n) : 0;
        }
        __syncthreads();
        if (left) {
            int at = s_base + __popc(left_bal & ((1u << lane) - 1u));
            for (int w = 0; w < warp; w++) at += s_cnt[w];
            p.list[at] = T0 + tid;
        }
    }

    ATT_PF_MARK(1);
    /* the passes: the set bits of s_leadm in order (uniform: shared memory, stable since the sync above) */
    for (int lead = att_pf_next_lead<ROWS>(s_leadm, 0); lead < ROWS; lead = att_pf_next_lead<ROWS>(s_leadm, lead + 1)) {
        const int ps = s_seq[lead];
        const int32_t *bt = p.block_tables + (size_t)ps * p.max_blocks;

        /* Per-row key ranges (empty for rows of other sequences) and the pass's range. */
        if (tid < ROWS) {
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
            for (int i = tid; i < ROWS * CH; i += NT) {
                int r = i / CH, ch = i % CH;
                bool in = s_seq[r] == ps;
                const sits_bf16_t *src = in ? p.q + (size_t)(T0 + r) * p.q_row_stride + (size_t)h * D + ch * 8 : p.q;
                att_cp16(sQ + (WG ? att_swz<D, ROWS>(r, ch) : att_sw<D>(r, ch)), src, in);
            }
            att_cp_commit();
        }
        __syncthreads();
        int k_lo = s_rng[0][0], k_hi = s_rng[0][1];
#pragma unroll
        for (int w = 1; w < ROWS / 32; w++) {
            k_lo = min(k_lo, s_rng[w][0]);
            k_hi = max(k_hi, s_rng[w][1]);
        }
        const int rw = warp * WR, wl = rw + (lane & (WR - 1));
        const int w_lo = __reduce_min_sync(0xffffffffu, s_lo[wl]), w_hi = __reduce_max_sync(0xffffffffu, s_hi[wl]);
        /* keys every row of the warp sees: a tile inside [w_lo_max, w_hi_min] needs no mask (empty for a warp
         * with a row of another sequence: its lo is INT_MAX) */
        const int w_lo_max = __reduce_max_sync(0xffffffffu, s_lo[wl]), w_hi_min = __reduce_min_sync(0xffffffffu, s_hi[wl]);
        const int n_kt = (k_hi - k_lo + KT) / KT;

        if (tid < 2 * KT) { /* the first two tiles' key offsets, a thread a key */
            const int t = tid / KT, r = tid & (KT - 1);
            att_key_store<D, Q8>(s_off[t], s_soff[Q8 ? t : 0], p, kvh, r, att_key_fetch(p, bt, k_lo + t * KT, r, k_lo, k_hi));
        }
        __syncthreads();
        if constexpr (QW) { /* raw tiles 0 and 1; tile 2's offsets to slot 0 once tile 0's loads are issued; tile 0 widened */
            constexpr int RT = 2 * KT * D;
            att_load_raw8<D, NT, true>(sR, sR + KT * D, s_kvs, p, s_off[0], s_soff[0]);
            att_cp_commit();
            if (n_kt > 1) att_load_raw8<D, NT, true>(sR + RT, sR + RT + KT * D, s_kvs + 2 * KT, p, s_off[1], s_soff[1]);
            att_cp_commit();
            att_key_ref k2 = { -1, 0 };
            if (n_kt > 2 && tid < KT) k2 = att_key_fetch(p, bt, k_lo + 2 * KT, tid, k_lo, k_hi);
            att_cp_wait<1>();
            __syncthreads();
            if (n_kt > 2 && tid < KT) att_key_store<D, Q8>(s_off[0], s_soff[0], p, kvh, tid, k2);
            {
                att_widen8_regs<D> w8;
                att_widen8_read<D, NT>(w8, sR, sR + KT * D);
                att_widen8_write<D, QM == SITS_K_KV_F8, NT>(w8, sK, sV);
            }
            __syncthreads();
        } else {
            att_load_tile<D, Q8, WG != 0, NT, KT>(sK, sV, s_kvs, p, s_off[0], s_soff[0]);
            att_cp_commit();
            att_cp_wait<1>();
            __syncthreads();
        }
        uint32_t qf[QREG ? D / 16 : 1][4]; /* MF 1: the warp's Q fragments */
        if (QREG) {
#pragma unroll
            for (int kk = 0; kk < (QREG ? D / 16 : 0); kk++) {
                att_ldsm4(qf[kk], sQ + att_sw<D>(rw + (lane & 15), 2 * kk + (lane >> 4)));
                if (Q8)
#pragma unroll
                    for (int e = 0; e < 4; e++) qf[kk][e] = att_bf2_h2(qf[kk][e]);
            }
        } else if (Q8) { /* MF 2 / WG, 8-bit KV: Q to f16 in place, each thread its own chunks (the loop's barrier follows) */
            uint4 *q4 = reinterpret_cast<uint4 *>(sQ);
            for (int i = tid; i < ROWS * D / 8; i += NT) {
                uint4 v = q4[i];
                q4[i] = make_uint4(att_bf2_h2(v.x), att_bf2_h2(v.y), att_bf2_h2(v.z), att_bf2_h2(v.w));
            }
        }
        const int wg = warp >> 2; /* [wgmma] the warp's warpgroup */

        float o[MF][D / 8][4];
        float m[MF][2], l[MF][2];
#pragma unroll
        for (int f = 0; f < MF; f++) {
#pragma unroll
            for (int j = 0; j < D / 8; j++) o[f][j][0] = o[f][j][1] = o[f][j][2] = o[f][j][3] = 0.0f;
            m[f][0] = m[f][1] = -INFINITY;
            l[f][0] = l[f][1] = 0.0f;
        }
#ifdef SITS_ATT_PF_TRACE
        if (threadIdx.x == 0 && s_tr[7] == 0) {
            ATT_PF_MARK(2);
            s_tr[6] = n_kt;
        }
#endif

        if constexpr (WG) {
            /* [wgmma] pipelined (FlashAttention-3's intra-warpgroup overlap): tile it's S = Q K^T is issued with tile
             * it - 1's O += P V behind it; tile it's softmax runs while P V does; then O's rescale and tile it's P.
             * V triple-buffered (tile it - 1's is read while tile it + 1 loads), K double-buffered. */
            /* Straight-line MMAs (wgmma in a divergent branch makes ptxas serialise them all): every tile's S, also a
             * tile none of the warpgroup's rows sees (masked to -inf: P 0), and a P V every tile, the first with P 0
             * (tile 0's V: finite data). */
            uint32_t pa[KT / 16][4]; /* the previous tile's P (A fragments); pV: its V tile */
#pragma unroll
            for (int kk = 0; kk < KT / 16; kk++) pa[kk][0] = pa[kk][1] = pa[kk][2] = pa[kk][3] = 0u;
            const sits_bf16_t *pV = sV;
            for (int it = 0; it < n_kt; it++) {
                const int vb = it % NSV, sb = it & 1, k0 = k_lo + it * KT; /* sb: K's, the offsets' and scales' buffer */
                const sits_bf16_t *tK = sK + sb * KT * D, *tV = sV + vb * KT * D;
                /* One barrier a tile: the last group issued (last iteration) held tile it (QW: raw tile it + 1); past the
                 * barrier every thread has left tile it - 1, so the buffers it read may be refilled */
                att_cp_wait<0>();
                att_fence_async_smem(); /* this tile (and the pass's Q) visible to the wgmma operand reads */
                __syncthreads();
                if constexpr (QW) { /* raw tile it + 2 into the ring slot tile it - 1 used (offsets in slot it & 1) */
                    const int rn = (it + 2) % 3;
                    if (it + 2 < n_kt)
                        att_load_raw8<D, NT, true>(sR + rn * 2 * KT * D, sR + rn * 2 * KT * D + KT * D, s_kvs + rn * 2 * KT, p,
                                             s_off[sb], s_soff[sb]);
                    att_cp_commit();
                } else if (it + 1 < n_kt) { /* tile it + 1 into tile it - 1's K buffer and tile it - 2's V buffer */
                    const int nb = (it + 1) % NSV, ns = sb ^ 1;
                    att_load_tile<D, Q8, true, NT, KT>(sK + ns * KT * D, sV + nb * KT * D, s_kvs + (Q8 ? ns * 2 * KT : 0), p,
                                                       s_off[ns], s_soff[Q8 ? ns : 0]);
                    att_cp_commit();
                }
                /* the block ids of tile it + 2 (QW: it + 3), read now, stored after this tile's math in the slot whose loads
                 * were issued last iteration: s_off[sb] (QW: [sb ^ 1]); read after the next barrier */
                const int ah = QW ? 3 : 2;
                const bool ahead = it + ah < n_kt && tid < KT;
                att_key_ref nk = { -1, 0 };
                if (ahead) nk = att_key_fetch(p, bt, k0 + ah * KT, tid, k_lo, k_hi);
                /* QW: raw tile it + 1 (landed: the wait above) read now, widened once the MMAs are issued */
                att_widen8_regs<QW ? D : 128> w8;
                if constexpr (QW)
                    if (it + 1 < n_kt) att_widen8_read<D, NT>(w8, sR + (it + 1) % 3 * 2 * KT * D, sR + (it + 1) % 3 * 2 * KT * D + KT * D);
                float s[1][KT / 8][4];
#pragma unroll
                for (int j = 0; j < KT / 8; j++) s[0][j][0] = s[0][j][1] = s[0][j][2] = s[0][j][3] = 0.0f;
                att_wg_keep(s[0]);
                att_wg_keep(o[0]);
                att_wg_keep(pa);
                att_wg_fence();
#pragma unroll
                for (int kk = 0; kk < D / 16; kk++) { /* S = Q K^T: 8 x m64n64k16, Q (the warpgroup's 64 rows) and K K-major */
                    const int aq = (kk >> 2) * ROWS * 64 + wg * 64 * 64 + (kk & 3) * 16, ak = (kk >> 2) * KT * 64 + (kk & 3) * 16;
                    if constexpr (KT == 128) att_wg_ss128<Q8>(s[0], att_wg_desc(sQ + aq, 16, 1024), att_wg_desc(tK + ak, 16, 1024), kk > 0);
                    else att_wg_ss64<Q8>(s[0], att_wg_desc(sQ + aq, 16, 1024), att_wg_desc(tK + ak, 16, 1024), kk > 0);
                }
                att_wg_commit();
#pragma unroll
                for (int kk = 0; kk < KT / 16; kk++) /* O += P V of the previous tile: 4 x m64n128k16, V MN-major */
                    att_wg_rs128<Q8>(o[0], pa[kk], att_wg_desc(pV + kk * 16 * 64, KT * 128, 1024));
                att_wg_commit();
                if constexpr (QW) { /* tile it + 1 widened while the MMAs run: its K buffer held tile it - 1's (S waited last
                                     * iteration), its V buffer tile it - 2's (P V waited last iteration) */
                    if (it + 1 < n_kt) att_widen8_write<D, QM == SITS_K_KV_F8, NT>(w8, sK + (sb ^ 1) * KT * D, sV + (it + 1) % NSV * KT * D);
                }
                att_wg_wait1(); /* S landed; P V may still run */
                att_wg_keep(s[0]);
                const float *ks = s_kvs + (Q8 ? (QW ? it % 3 : sb) * 2 * KT : 0), *vs = ks + KT;
                const float sc = att_pf_mask<1, Q8>(s, p, ks, k0, k0 >= w_lo_max && k0 + KT - 1 <= w_hi_min, s_lo, s_hi, rw);
                float c[2];
                const bool moved = att_pf_softmax(s[0], sc, m[0], l[0], c);
                /* bf16 KV: tile it - 1's P V waited for in a block of its own behind the softmax's vote. In one block with
                 * the softmax, ptxas puts the wait before the softmax's arithmetic (SASS: WARPGROUP.DEPBAR right after the
                 * mask), so the softmax does not overlap the P V: 4 x 2048 prompts 0.4390 -> 0.4303-0.4309 ms. 8-bit KV
                 * (the P V then also overlaps the widening) keeps the one block: split, it was 0.3-1.2 % slower (RESULTS
                 * 2026-12-03T18:20Z; both forms pass the attention parity cases of every KV type). */
                if constexpr (Q8) {
                    att_wg_wait0();
                    att_wg_keep(o[0]);
                    att_pf_rescale<D>(o[0], c, moved);
                } else if (moved) {
                    att_wg_wait0();
                    att_wg_keep(o[0]);
                    att_pf_rescale<D>(o[0], c, true);
                } else {
                    att_wg_wait0();
                    att_wg_keep(o[0]);
                }
                att_wg_keep(pa);
#pragma unroll
                for (int kk = 0; kk < KT / 16; kk++) att_pf_pack<Q8>(pa[kk], s[0], vs, kk);
                pV = tV;
                if (ahead) att_key_store<D, Q8>(s_off[sb ^ (QW ? 1 : 0)], s_soff[Q8 ? sb ^ (QW ? 1 : 0) : 0], p, kvh, tid, nk);
            }
            att_wg_keep(o[0]);
            att_wg_keep(pa);
            att_wg_fence();
#pragma unroll
            for (int kk = 0; kk < KT / 16; kk++) att_wg_rs128<Q8>(o[0], pa[kk], att_wg_desc(pV + kk * 16 * 64, KT * 128, 1024));
            att_wg_commit();
            att_wg_wait0();
            att_wg_keep(o[0]);
        } else { /* mma.sync */
            for (int it = 0; it < n_kt; it++) {
                const int buf = it & 1, k0 = k_lo + it * KT;
                if (it + 1 < n_kt) {
                    int nb = buf ^ 1;
                    att_load_tile<D, Q8>(sK + nb * KT * D, sV + nb * KT * D, s_kvs + (Q8 ? nb * 2 * KT : 0), p, s_off[nb],
                                         s_soff[Q8 ? nb : 0]);
                    att_cp_commit();
                    att_cp_wait<1>();
                } else {
                    att_cp_wait<0>();
                }
                __syncthreads();
                /* tile it + 2's block ids, read now and stored after this tile's math into s_off[buf] (every thread has
                 * issued tile it's loads from it: the barrier above; tile it + 2's loads read it after the one below) */
                const bool ahead = it + 2 < n_kt && tid < KT;
                att_key_ref nk = { -1, 0 };
                if (ahead) nk = att_key_fetch(p, bt, k0 + 2 * KT, tid, k_lo, k_hi);
                if (Q8) att_widen_kv<D, QM == SITS_K_KV_F8>(sK + buf * KT * D, sV + buf * KT * D);
                if (w_hi >= k0 && w_lo <= k0 + KT - 1) {
                    const sits_bf16_t *tK = sK + buf * KT * D, *tV = sV + buf * KT * D;
                    float s[MF][KT / 8][4];
#pragma unroll
                    for (int f = 0; f < MF; f++)
#pragma unroll
                        for (int j = 0; j < KT / 8; j++) s[f][j][0] = s[f][j][1] = s[f][j][2] = s[f][j][3] = 0.0f;
#pragma unroll
                    for (int kk = 0; kk < D / 16; kk++) {
                        uint32_t qa[MF][4];
#pragma unroll
                        for (int f = 0; f < MF; f++) {
                            if (QREG)
#pragma unroll
                                for (int e = 0; e < 4; e++) qa[f][e] = qf[QREG ? kk : 0][e];
                            else
                                att_ldsm4(qa[f], sQ + att_sw<D>(rw + 16 * f + (lane & 15), 2 * kk + (lane >> 4)));
                        }
#pragma unroll
                        for (int np = 0; np < KT / 16; np++) {
                            uint32_t b[4];
                            att_ldsm4(b, tK + att_sw<D>(np * 16 + (lane & 7) + ((lane >> 4) << 3), 2 * kk + ((lane >> 3) & 1)));
#pragma unroll
                            for (int f = 0; f < MF; f++) {
                                att_mma_t<Q8>(s[f][2 * np], qa[f], b[0], b[1]);
                                att_mma_t<Q8>(s[f][2 * np + 1], qa[f], b[2], b[3]);
                            }
                        }
                    }
                    const float *ks = s_kvs + (Q8 ? buf * 2 * KT : 0), *vs = ks + KT; /* [8-bit kv] this tile's scales */
                    const float sc = att_pf_mask<MF, Q8>(s, p, ks, k0, k0 >= w_lo_max && k0 + KT - 1 <= w_hi_min, s_lo, s_hi, rw);
#pragma unroll
                    for (int f = 0; f < MF; f++) {
                        float c[2];
                        const bool moved = att_pf_softmax(s[f], sc, m[f], l[f], c);
                        att_pf_rescale<D>(o[f], c, moved);
                    }
#pragma unroll
                    for (int kk = 0; kk < KT / 16; kk++) {
                        uint32_t a[MF][4];
#pragma unroll
                        for (int f = 0; f < MF; f++) att_pf_pack<Q8>(a[f], s[f], vs, kk);
#pragma unroll
                        for (int dp = 0; dp < D / 16; dp++) {
                            uint32_t b[4];
                            att_ldsm4_t(b, tV + att_sw<D>(kk * 16 + (lane & 15), 2 * dp + (lane >> 4)));
#pragma unroll
                            for (int f = 0; f < MF; f++) {
                                att_mma_t<Q8>(o[f][2 * dp], a[f], b[0], b[1]);
                                att_mma_t<Q8>(o[f][2 * dp + 1], a[f], b[2], b[3]);
                            }
                        }
                    }
                }
                if (ahead) att_key_store<D, Q8>(s_off[buf], s_soff[Q8 ? buf : 0], p, kvh, tid, nk);
                __syncthreads();
            }
        }

#ifdef SITS_ATT_PF_TRACE
        if (threadIdx.x == 0 && s_tr[7]++ == 0) ATT_PF_MARK(3);
#endif
        /* Epilogue: O / l ([gpt-oss] l + head h's sink term) for this pass's rows (bf16), staged in the warp's own rows
         * of sQ (in Q's layout: no other warp reads them, and this warp's last MMA reading them has completed), then
         * stored 16 bytes a thread: a row's 2 D bytes by D / 8 consecutive lanes (the fragments' 4-byte stores used
         * half of every 32-byte sector they wrote). Rows of other sequences are left alone. */
#pragma unroll
        for (int f = 0; f < MF; f++) {
            float l0 = l[f][0], l1 = l[f][1];
#pragma unroll
            for (int off = 1; off <= 2; off <<= 1) {
                l0 += __shfl_xor_sync(0xffffffffu, l0, off);
                l1 += __shfl_xor_sync(0xffffffffu, l1, off);
            }
            if (p.sinks) { /* [gpt-oss] head h's sink in both rows' sums (m: the quad's, reduced in the softmax step) */
                l0 += att_sink(p.sinks, h, m[f][0]);
                l1 += att_sink(p.sinks, h, m[f][1]);
            }
            const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
            const int r0 = rw + 16 * f + g;
#pragma unroll
            for (int j = 0; j < D / 8; j++) { /* chunk j of rows r0, r0 + 8: columns 8 j + 2 tq, + 1 */
                const int e0 = WG ? att_swz<D, ROWS>(r0, j) : att_sw<D>(r0, j), e1 = WG ? att_swz<D, ROWS>(r0 + 8, j) : att_sw<D>(r0 + 8, j);
                *reinterpret_cast<__nv_bfloat162 *>(sQ + e0 + 2 * tq) = __floats2bfloat162_rn(o[f][j][0] * inv0, o[f][j][1] * inv0);
                *reinterpret_cast<__nv_bfloat162 *>(sQ + e1 + 2 * tq) = __floats2bfloat162_rn(o[f][j][2] * inv1, o[f][j][3] * inv1);
            }
        }
        __syncwarp();
#pragma unroll 1
        for (int i = lane; i < WR * (D / 8); i += 32) { /* row rw + i / (D / 8), chunk i % (D / 8) */
            const int r = rw + i / (D / 8), ch = i % (D / 8);
            if (s_seq[r] == ps)
                *reinterpret_cast<uint4 *>(p.out + (size_t)(T0 + r) * p.n_heads * D + (size_t)h * D + ch * 8) =
                    *reinterpret_cast<const uint4 *>(sQ + (WG ? att_swz<D, ROWS>(r, ch) : att_sw<D>(r, ch)));
        }
        __syncthreads(); /* the next pass rewrites s_lo / s_hi / s_rng and the tiles */
    }
#ifdef SITS_ATT_PF_TRACE
    const long long L = (long long)blockIdx.y * gridDim.x + blockIdx.x;
    if (threadIdx.x == 0 && L < ATT_PF_TRACE_MAX) {
        ATT_PF_MARK(4);
        if (s_tr[7] == 0) s_tr[2] = s_tr[3] = s_tr[4]; /* no pass (no owned rows) */
        unsigned sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        unsigned long long *r = att_pf_trace_buf[L];
        r[0] = (unsigned long long)s_tr[5];
        r[1] = att_gtimer();
        r[2] = (unsigned long long)(s_tr[1] - s_tr[0]);
        r[3] = (unsigned long long)(s_tr[2] - s_tr[1]);
        r[4] = (unsigned long long)(s_tr[3] - s_tr[2]);
        r[5] = (unsigned long long)(s_tr[4] - s_tr[3]);
        r[6] = sm | (unsigned long long)s_tr[6] << 16 | (unsigned long long)s_tr[7] << 40;
        r[7] = 0;
    }
    if (L == 0 && threadIdx.x == 0) att_pf_trace_n = (int)min((long long)gridDim.x * gridDim.y, (long long)ATT_PF_TRACE_MAX);
#endif
}

/* A tile's work estimate for the order: the causal key range (last position + 1) of the sequence of its last row
 * and of its first row's, each where it has >= ATT_PF_OWN_MIN rows in the tile (a sequence's rows are consecutive;
 * rows left to the decode kernel count nothing). */
static __device__ int att_pf_key(const att_params &p, int t, int rows)
{
    const int T0 = t * rows, last = min(T0 + rows, p.n_tokens) - 1, sl = p.seq[last], sf = p.seq[T0];
    constexpr int M = ATT_PF_OWN_MIN - 1;
    int key = 0;
    if (last - M >= T0 && p.seq[last - M] == sl) key += p.pos[last] + 1;
    if (sf != sl && T0 + M <= last && p.seq[T0 + M] == sf) key += p.pos[T0 + M] + 1;
    return key;
}

/* One CTA: *list_count = 0; pf_order[r] = the tile of rank r by decreasing key, ties to the later tile (a strict
 * order: every rank has one tile). n_tiles <= ATT_PF_ORDER_MAX. */
static __global__ void __launch_bounds__(256) att_pf_order_kernel(att_params p, int rows, int n_tiles)
{
    __shared__ int s_key[ATT_PF_ORDER_MAX];
    if (threadIdx.x == 0) *p.list_count = 0;
    for (int t = threadIdx.x; t < n_tiles; t += blockDim.x) s_key[t] = att_pf_key(p, t, rows);
    __syncthreads();
    for (int t = threadIdx.x; t < n_tiles; t += blockDim.x) {
        const int k = s_key[t];
        int rank = 0;
        for (int u = 0; u < n_tiles; u++) {
            const int ku = s_key[u];
            rank += ku > k || (ku == k && u > t);
        }
        const_cast<int *>(p.pf_order)[rank] = t;
    }
}

/* The list's length zeroed, and with p.pf_order the tiles ranked (one CTA; tiles of this launch's height), then the
 * prefill kernel. */
template <int D, int QM, int MF, int WG = 0, int KT = ATT_KT>
static sits_status_t att_prefill_launch_t(const att_params &p, cudaStream_t stream)
{
    constexpr int smem = att_pf_smem<D, MF, WG, QM != SITS_K_KV_BF16, KT>();
    static int smem_set[SITS_K_DEV_CACHE];   /* [perf: launch cost] */
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || sits_k_smem_limit(att_prefill_kernel<D, QM, MF, WG, KT>, dev, smem, smem_set) != cudaSuccess)
        return SITS_ERR_CUDA;
    constexpr int rows = att_pf_rows<MF, WG>();
    const int n_tiles = (p.n_tokens + rows - 1) / rows;
    if (p.pf_order) {   /* the caller keeps n_tiles <= ATT_PF_ORDER_MAX */
        if (n_tiles > ATT_PF_ORDER_MAX || !p.list_count) return SITS_ERR_INVALID;
        att_pf_order_kernel<<<1, 256, 0, stream>>>(p, rows, n_tiles);
    } else if (p.list_count && cudaMemsetAsync(p.list_count, 0, sizeof(int), stream) != cudaSuccess) {
        return SITS_ERR_CUDA;
    }
    dim3 grid((unsigned)n_tiles, (unsigned)p.n_heads);
    att_prefill_kernel<D, QM, MF, WG, KT><<<grid, att_pf_threads<WG>(), smem, stream>>>(p);
    return SITS_K_LAUNCH_STATUS();
}

/* [trace] The records of the last prefill launch (see ATT_PF_MARK) to dst [max_ctas][8]: their count, or -1 when built
 * without SITS_ATT_PF_TRACE (or on a CUDA error). Synchronous; a debugging aid of the benchmark, not of the engine. */
extern "C" int sits_k_att_pf_trace(unsigned long long *dst, int max_ctas)
{
#ifdef SITS_ATT_PF_TRACE
    return att_trace_read(att_pf_trace_n, att_pf_trace_buf, dst, max_ctas);
#else
    (void)dst;
    (void)max_ctas;
    return -1;
#endif
}

/* mf (att_prefill_mf): 1: 64-row tiles; 2: 128 rows -- [wgmma] at head_dim 128 the warpgroup-MMA kernel (bf16 KV:
 * 128-key tiles; 8-bit KV: 64), else the mma.sync kernel; ATT_PF_MMA2: the mma.sync kernel's 128 rows; ATT_PF_WG /
 * ATT_PF_WG128: the warpgroup-MMA kernel with 64- / 128-key tiles at head dim 128 (128 keys: bf16 KV only; 64-row
 * mma.sync tiles at other head sizes). */
template <int QM> static sits_status_t att_prefill_launch_q(const att_params &p, int head_dim, int mf, cudaStream_t stream)
{
    if constexpr (QM == SITS_K_KV_BF16)
        if (head_dim == 128 && (mf == ATT_PF_WG128 || mf == 2)) return att_prefill_launch_t<128, QM, 1, 2, 128>(p, stream);
    if (head_dim == 128 && (mf == ATT_PF_WG || mf == ATT_PF_WG128 || mf == 2))
        return att_prefill_launch_t<128, QM, 1, 2>(p, stream);
    mf = mf == ATT_PF_MMA2 ? 2 : mf == 2 ? 2 : 1;
    if (head_dim == 64) return mf == 2 ? att_prefill_launch_t<64, QM, 2>(p, stream) : att_prefill_launch_t<64, QM, 1>(p, stream);
    return mf == 2 ? att_prefill_launch_t<128, QM, 2>(p, stream) : att_prefill_launch_t<128, QM, 1>(p, stream);
}

/* Tile height: 128 rows (2) once their CTAs fill the GPU at least ATT_PF_MF2_WAVES times over (2 CTAs an SM),
 * else 64 rows, whose twice as many CTAs balance short prefills better (8B FP8 on the H200, 2048 tokens = 1.94
 * waves of 128-row CTAs: 35.87 ms with 64 rows, 36.14 with 128; 8192 tokens: 128 rows 8 % faster; [wgmma] the
 * warpgroup-MMA kernel as fast at 2048 tokens; at 8192 (4-layer 8B FP8, RESULTS 2026-12-03T01:50Z) bf16 KV 20.26
 * ms with 128-key tiles against 21.27 with 64 and 21.6-22.5 with mma.sync; fp8 KV 22.56 against mma.sync's 23.36,
 * int8 23.19 against 24.04: so 2 picks it for every KV type, att_prefill_launch_q). SITS_ATT_PF_ROWS=
 * 64|128|wg|wg128 forces the mma.sync kernel's 64 or 128 rows, or the warpgroup-MMA kernel with 64- or 128-key
 * tiles (A/B in the benchmarks; the parity test runs each). Host-visible arguments only (graph capture). */
#define ATT_PF_MF2_WAVES 2
int att_prefill_mf(int n_tokens, int n_heads, int n_sms)
{
    const char *e = getenv("SITS_ATT_PF_ROWS");
    if (e && !strcmp(e, "wg")) return ATT_PF_WG;
    if (e && !strcmp(e, "wg128")) return ATT_PF_WG128;
    if (e && atoi(e) == 64) return 1;
    if (e && atoi(e) == 128) return ATT_PF_MMA2;
    long long ctas = (long long)(n_tokens + 2 * ATT_PF_ROWS - 1) / (2 * ATT_PF_ROWS) * n_heads;
    return ctas >= (long long)ATT_PF_MF2_WAVES * 2 * n_sms ? 2 : 1;
}

sits_status_t att_launch_prefill(const att_params &p, int head_dim, int mf, cudaStream_t stream)
{
    if (p.kv_f8) return att_prefill_launch_q<SITS_K_KV_F8>(p, head_dim, mf, stream); /* [fp8 kv] */
    if (p.kv_i8) return att_prefill_launch_q<SITS_K_KV_I8>(p, head_dim, mf, stream); /* [int8 kv] */
    return att_prefill_launch_q<SITS_K_KV_BF16>(p, head_dim, mf, stream);
}
