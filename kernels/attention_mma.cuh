/* attention_mma.cuh -- internal to kernels/attention*.cu: the parameter block of the tensor-core
 * attention kernels, their launchers, and the device helpers they share (cp.async, ldmatrix,
 * mma.sync m16n8k16 bf16 -> fp32, the swizzled shared-memory tile layout, the paged K/V tile
 * loader and the online-softmax step).
 *
 * Shared-memory tiles are [rows][D] bf16 (D = head_dim, 64 or 128) stored in 16-byte chunks
 * whose index is XORed with (row & 7): ldmatrix of 8 rows at one logical chunk and cp.async of
 * whole rows are then free of bank conflicts.
 *
 * Fragment layouts (PTX ISA, mma.m16n8k16, g = lane / 4, q = lane % 4): A (16x16, row-major):
 * a0 (row g, cols 2q..2q+1), a1 (row g+8, same cols), a2 (row g, cols 2q+8..), a3 (row g+8, cols
 * 2q+8..); B (16x8): b0 (k rows 2q..2q+1, col g), b1 (k rows 2q+8.., col g); C (16x8 fp32):
 * c0,c1 (row g, cols 2q, 2q+1), c2,c3 (row g+8, same cols). Scores are kept in base 2: S is
 * multiplied by scale * log2(e) and exp2 is used, which is the same softmax.
 *
 * [int8 kv] [fp8 kv] 8-bit caches: the prefill kernel stages raw tiles and widens them to f16 tiles of
 * the unscaled values (att_load_tile, att_widen_kv); the decode kernel keeps the raw tiles, swizzled by
 * att_sw8, and converts them to f16 while it builds the MMA operands (att_q8x4_h2: cvt
 * e4m3x2 -> f16x2, or the 0x6400 magic-number widening of int8), with mma m16n8k16 f16 -> fp32. */
#ifndef SITS_KERNELS_ATTENTION_MMA_CUH
#define SITS_KERNELS_ATTENTION_MMA_CUH

#include "kernels/common.cuh"
#include <climits>
#include <cuda_fp16.h>

#define ATT_THREADS 128       /* 4 warps per CTA in both kernels */
#define ATT_KT 64             /* keys per shared-memory tile */
#define ATT_PF_ROWS 64        /* query rows (batch tokens) per prefill tile and m-fragment a warp (MF), 16 per warp and MF */
#define ATT_PF_OWN_MIN 16     /* a prefill tile owns the rows of a sequence with >= this many rows in it */
#define ATT_MAX_SPLITS 64     /* most split-K partitions per token */
#define ATT_SCRATCH_HDR 256   /* bytes before the token list in the scratch: the list's length (int) */
#define ATT_DEC_MAX_PER_SM SITS_K_ATT_DEC_MAX_PER_SM /* decode CTAs per SM the grid is sized for (target_ctas <= n_sms x this) */

/* Everything the tensor-core kernels need; passed by value. */
struct att_params {
    sits_bf16_t *out;             /* [n_tokens, n_heads * D] */
    const sits_bf16_t *q;         /* rows of q_row_stride, head h at h * D */
    const sits_bf16_t *k_cache, *v_cache; /* [n_blocks, block_size, n_kv_heads, D] */
    const int32_t *seq, *pos, *block_tables;
    int *list_count;              /* list mode: tokens the prefill kernel left to the decode kernel; NULL = all tokens */
    int *list;                    /* [n_tokens] their indices */
    float *part;                  /* split-K partials (see att_part_*); NULL = no split-K */
    int *counters;                /* [target_ctas] split CTAs done per work unit (token, KV head, chunk); zero between
                                   * launches: the last CTA of a unit merges its partials and resets its counter */
    long long part_floats;        /* capacity of part */
    int q_row_stride, max_blocks, block_size, bs_shift; /* bs_shift = log2(block_size) or -1 */
    int n_tokens, n_heads, n_kv_heads, group, n_chunks; /* n_chunks = ceil(group / 16), 8-bit KV: ceil(group / 8) */
    int window;
    int target_ctas;              /* split-K aims at about this many decode work items */
    int min_part;                 /* decode: a partition's length when ceil(L / S) is shorter (a multiple of ATT_KT; att_part_len) */
    float scale_log2;             /* scale * log2(e) */
    /* [int8 kv] kv_i8: k_cache / v_cache hold int8 block units (sits_kernels.h) of kv_unit bytes,
     * the scales kv_qbytes into each unit */
    int kv_i8, kv_qbytes;
    long long kv_unit;
    int kv_f8;                    /* [fp8 kv] with kv_i8: the 8-bit values are E4M3, not int8 */
    float softcap_log2;           /* [families] attention-logit soft-cap * log2(e); 0 = none (att_cap) */
    const int *pf_order;          /* prefill: [n_tiles] the tiles heaviest first (att_pf_order_kernel); NULL = from the last */
    const float *sinks;           /* [gpt-oss] [n_heads] fp32 sink logits (unscaled); NULL = none (att_sink) */
    int max_seq_tokens;           /* the caller's bound on a sequence's tokens in the step (sits_k_attn_ws_t); <= 0: none */
};

/* [perf: kv before wait] The decode kernels are programmatic dependents of RoPE + KV write (sits_k_launch_dep), which
 * writes q and the step's own keys; every other key of a sequence was written by an earlier step (and the metadata --
 * positions, sequences, block tables -- by the host's upload before the step). In a step of fewer than ATT_PF_OWN_MIN
 * tokens a sequence (p.max_seq_tokens: decode steps, verifications) without list mode, a CTA's first item may therefore
 * request its keys <= att_kv_safe_end (pos - max_seq_tokens: before the sequence's first token of this step) before
 * sits_k_pdl_wait, while RoPE + KV write runs, and only q and the later keys after it. Else nothing before the wait. */
static __device__ __forceinline__ int att_kv_safe_end(const att_params &p, int p_end)
{
    return !p.list_count && p.max_seq_tokens > 0 && p.max_seq_tokens < ATT_PF_OWN_MIN ? p_end - p.max_seq_tokens : INT_MIN;
}

/* Launchers (attention_decode.cu, attention_prefill.cu); D = 64 or 128. */
sits_status_t att_launch_decode(const att_params &p, int head_dim, int grid, cudaStream_t stream);
/* zeroes *p.list_count (ranking the tiles into p.pf_order when set), then runs the prefill kernel */
sits_status_t att_launch_prefill(const att_params &p, int head_dim, int mf, cudaStream_t stream); /* mf: att_prefill_mf */
int att_prefill_mf(int n_tokens, int n_heads, int n_sms);
#define ATT_PF_ORDER_MAX 1024 /* tiles att_launch_prefill ranks (p.pf_order: room for n_tokens / ATT_PF_ROWS + 1) */
#define ATT_PF_MMA2 3 /* att_prefill_mf's answers when forced (SITS_ATT_PF_ROWS): the mma.sync kernel's 128 rows, */
#define ATT_PF_WG 4   /* [wgmma] the warpgroup-MMA kernel, */
#define ATT_PF_WG128 5 /* with 128-key tiles (bf16 KV; else 64) */
int att_decode_smem_bytes(int head_dim, int q8);

/* Split-K partition count for n_list decode tokens: enough work items for target_ctas, bounded
 * by the scratch capacity (m, l and D floats per token, head and split) and ATT_MAX_SPLITS.
 * Host and device compute it identically (the host to size the grid in the plain mode). */
static __host__ __device__ __forceinline__ int att_splits(int n_list, int n_kv_heads, int n_chunks, int n_heads, int D,
                                                          int target_ctas, long long part_floats, int have_part)
{
    if (!have_part || n_list <= 0) return 1;
    long long units = (long long)n_list * n_kv_heads * n_chunks;
    long long s = (target_ctas + units - 1) / units;
    long long cap = (part_floats - 4) / ((long long)n_list * n_heads * (D + 2)); /* 4: ml's rounding up */
    if (s > cap) s = cap;
    if (s > ATT_MAX_SPLITS) s = ATT_MAX_SPLITS;
    return s < 1 ? 1 : (int)s;
}

/* Positions per partition for a context of L positions cut in S: ceil(L / S) rounded up to whole tiles; when that is
 * under min_part, L cut in ceil(L / min_part) instead (so a context of <= min_part positions is one partition, no
 * split-K merge, and longer ones get partitions of about min_part positions, as even as whole tiles allow). */
static __device__ __forceinline__ int att_part_len(int L, int S, int min_part)
{
    int per = (L + S - 1) / S;
    per = (per + ATT_KT - 1) / ATT_KT * ATT_KT;
    if (per < min_part) {
        const int n = (L + min_part - 1) / min_part;
        per = ((L + n - 1) / n + ATT_KT - 1) / ATT_KT * ATT_KT;
    }
    return per;
}

/* Partials of n_list tokens: ml [n_list, n_heads, S, 2] (m in base 2, l), then o [n_list, n_heads, S, D]
 * (unnormalised, relative to m). */
static __device__ __forceinline__ float *att_part_ml(const att_params &p, int n_list, int S, long long idx)
{
    (void)n_list; (void)S;
    return p.part + idx * 2;
}
static __device__ __forceinline__ float *att_part_o(const att_params &p, int n_list, int S, int D, long long idx)
{
    long long ml = ((long long)n_list * p.n_heads * S * 2 + 3) / 4 * 4;
    return p.part + ml + idx * D;
}

/* [families] Soft-capping of a score x = s * scale * log2(e) with c = cap * log2(e): c tanh(x / c) is
 * log2(e) cap tanh(s scale / cap), the capped score in the kernels' base-2 units; c = 0: x unchanged. */
static __device__ __forceinline__ float att_cap(float x, float c)
{
    return c > 0.0f ? c * tanhf(x / c) : x;
}

/* [families] att_cap over a warp's score fragment, in place: one uniform branch on c for the whole
 * fragment (the tensor-core kernels; a branch per score splits their straight-line code). */
template <int NT> static __device__ __forceinline__ void att_cap_frag(float (&s)[NT][4], float c)
{
    if (c > 0.0f)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[j][e] = c * tanhf(s[j][e] / c);
}

/* [gpt-oss] Attention sinks: head h's sink logit as a term of a row's softmax sum l, relative to the row's running
 * maximum m in the kernels' base-2 units: 2^(sink log2 e - m) = e^sink / 2^m (the sink is not scaled by the score
 * scale). Added to l only where a row's output is finally normalised (never to a split-K partial, whose l the merge
 * rescales and sums); the callers test sinks != NULL first, so the no-sinks path is one uniform branch. A row with
 * no key (m = -inf: no such row is ever written) gets +inf, whose 1 / l is 0. */
static __device__ __forceinline__ float att_sink(const float *sinks, int h, float m)
{
    return exp2f(fmaf(sinks[h], 1.4426950408889634f, -m));
}

/* First key position of token t's window. */
static __device__ __forceinline__ int att_window_begin(int window, int p_end)
{
    return window > 0 && p_end - window + 1 > 0 ? p_end - window + 1 : 0;
}

/* ---- PTX wrappers ---------------------------------------------------------------------------- */

static __device__ __forceinline__ uint32_t att_smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared, asynchronously; zero-filled when !valid (src is then not read). */
static __device__ __forceinline__ void att_cp16(void *dst, const void *src, bool valid)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(att_smem_addr(dst)), "l"(src),
                 "r"(valid ? 16 : 0));
}
/* [int8 kv] 4 bytes global -> shared, asynchronously; zero-filled when !valid. */
static __device__ __forceinline__ void att_cp4(void *dst, const void *src, bool valid)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(att_smem_addr(dst)), "l"(src),
                 "r"(valid ? 4 : 0));
}
static __device__ __forceinline__ void att_cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> static __device__ __forceinline__ void att_cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

static __device__ __forceinline__ void att_ldsm4(uint32_t (&r)[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(att_smem_addr(p)));
}
static __device__ __forceinline__ void att_ldsm4_t(uint32_t (&r)[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(att_smem_addr(p)));
}

/* d += a . b (16x16 bf16 by 16x8 bf16, fp32 accumulate). */
static __device__ __forceinline__ void att_mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Two floats -> bf16x2 (lo in the low half: the lower column of a fragment). */
static __device__ __forceinline__ uint32_t att_pack(float lo, float hi)
{
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&h);
}

/* Element offset of (row, 16-byte chunk) in a swizzled [rows][D] tile. */
template <int D> static __device__ __forceinline__ int att_sw(int row, int chunk)
{
    return row * D + ((chunk ^ (row & 7)) << 3);
}

/* ---- [wgmma] warpgroup MMAs (sm_90a; the prefill kernel's WG variant) ------------------------------- */

/* Element offset of (row, 16-byte chunk) in an R-row [R][D] tile in wgmma's canonical K-major layout with the
 * 128-byte swizzle: D = 128 as two [R][64] halves (R * 128 bytes apart), each row 128 bytes, chunk c of a row
 * at (c ^ (row & 7)) * 16 bytes -- the tile's base 1024-byte aligned (the hardware swizzles address bits 4-6
 * with 7-9). The same bytes serve as an MN-major operand (V: keys are K, D is N). */
template <int D, int R> static __device__ __forceinline__ int att_swz(int row, int chunk)
{
    return (chunk >> 3) * R * 64 + row * 64 + (((chunk & 7) ^ (row & 7)) << 3);
}

/* Shared-memory matrix descriptor: start address, leading / stride byte offsets, 128-byte swizzle (PTX ISA,
 * "matrix descriptor"; addresses and offsets in 16-byte units). */
static __device__ __forceinline__ uint64_t att_wg_desc(const void *smem, uint32_t lbo, uint32_t sbo)
{
    const uint64_t a = att_smem_addr(smem);
    return ((a & 0x3ffffu) >> 4) | ((uint64_t)((lbo >> 4) & 0x3fffu) << 16) | ((uint64_t)((sbo >> 4) & 0x3fffu) << 32) |
           (1ull << 62);
}

static __device__ __forceinline__ void att_wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
static __device__ __forceinline__ void att_wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
static __device__ __forceinline__ void att_wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
static __device__ __forceinline__ void att_wg_wait1() { asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory"); }
/* generic-proxy shared-memory writes (cp.async, st.shared) made visible to wgmma's operand reads */
static __device__ __forceinline__ void att_fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

/* Pins registers around an asynchronous wgmma region: the compiler sees them read and written here, so it neither
 * reuses A's registers nor touches the accumulators between the issue and the wait (CUTLASS's
 * warpgroup_fence_operand). */
template <int N> static __device__ __forceinline__ void att_wg_keep(float (&x)[N][4])
{
#pragma unroll
    for (int j = 0; j < N; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) asm volatile("" : "+f"(x[j][e])::"memory");
}
template <int N> static __device__ __forceinline__ void att_wg_keep(uint32_t (&x)[N][4])
{
#pragma unroll
    for (int j = 0; j < N; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) asm volatile("" : "+r"(x[j][e])::"memory");
}

/* The operand lists of the wgmma shapes below: 32 or 64 fp32 accumulators a[j][e] (8 or 16 n-tiles of 8). */
#define ATT_WG_ACC32(a) \
    "+f"(a[0][0]), "+f"(a[0][1]), "+f"(a[0][2]), "+f"(a[0][3]), "+f"(a[1][0]), "+f"(a[1][1]), "+f"(a[1][2]), \
    "+f"(a[1][3]), "+f"(a[2][0]), "+f"(a[2][1]), "+f"(a[2][2]), "+f"(a[2][3]), "+f"(a[3][0]), "+f"(a[3][1]), \
    "+f"(a[3][2]), "+f"(a[3][3]), "+f"(a[4][0]), "+f"(a[4][1]), "+f"(a[4][2]), "+f"(a[4][3]), "+f"(a[5][0]), \
    "+f"(a[5][1]), "+f"(a[5][2]), "+f"(a[5][3]), "+f"(a[6][0]), "+f"(a[6][1]), "+f"(a[6][2]), "+f"(a[6][3]), \
    "+f"(a[7][0]), "+f"(a[7][1]), "+f"(a[7][2]), "+f"(a[7][3])
#define ATT_WG_ACC64(a) \
    "+f"(a[0][0]), "+f"(a[0][1]), "+f"(a[0][2]), "+f"(a[0][3]), "+f"(a[1][0]), "+f"(a[1][1]), "+f"(a[1][2]), \
    "+f"(a[1][3]), "+f"(a[2][0]), "+f"(a[2][1]), "+f"(a[2][2]), "+f"(a[2][3]), "+f"(a[3][0]), "+f"(a[3][1]), \
    "+f"(a[3][2]), "+f"(a[3][3]), "+f"(a[4][0]), "+f"(a[4][1]), "+f"(a[4][2]), "+f"(a[4][3]), "+f"(a[5][0]), \
    "+f"(a[5][1]), "+f"(a[5][2]), "+f"(a[5][3]), "+f"(a[6][0]), "+f"(a[6][1]), "+f"(a[6][2]), "+f"(a[6][3]), \
    "+f"(a[7][0]), "+f"(a[7][1]), "+f"(a[7][2]), "+f"(a[7][3]), "+f"(a[8][0]), "+f"(a[8][1]), "+f"(a[8][2]), \
    "+f"(a[8][3]), "+f"(a[9][0]), "+f"(a[9][1]), "+f"(a[9][2]), "+f"(a[9][3]), "+f"(a[10][0]), "+f"(a[10][1]), \
    "+f"(a[10][2]), "+f"(a[10][3]), "+f"(a[11][0]), "+f"(a[11][1]), "+f"(a[11][2]), "+f"(a[11][3]), "+f"(a[12][0]), \
    "+f"(a[12][1]), "+f"(a[12][2]), "+f"(a[12][3]), "+f"(a[13][0]), "+f"(a[13][1]), "+f"(a[13][2]), "+f"(a[13][3]), \
    "+f"(a[14][0]), "+f"(a[14][1]), "+f"(a[14][2]), "+f"(a[14][3]), "+f"(a[15][0]), "+f"(a[15][1]), "+f"(a[15][2]), \
    "+f"(a[15][3])
#define ATT_WG_S_OUT ATT_WG_ACC32(s)
#define ATT_WG_O_OUT ATT_WG_ACC64(o)
#define ATT_WG_S128_OUT ATT_WG_ACC64(s)

/* s (+)= A . B, m64n64k16, A and B from shared memory (both K-major), fp32 accumulators in the mma.sync
 * fragment order per 8-column n-tile (s[j][e]: rows g / g + 8 of the warp's 16, columns 8j + 2q + (e & 1)).
 * F16: f16 operands ([int8 kv] [fp8 kv] widened tiles), else bf16. */
#define ATT_WG_SS64(T)                                                                                                      \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                             \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." T "." T " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,"   \
                 "%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n" \
                 : ATT_WG_S_OUT                                                                                             \
                 : "l"(da), "l"(db), "r"(acc))
template <bool F16> static __device__ __forceinline__ void att_wg_ss64(float (&s)[8][4], uint64_t da, uint64_t db, int acc)
{
    if constexpr (F16) ATT_WG_SS64("f16");
    else ATT_WG_SS64("bf16");
}

/* s (+)= A . B, m64n128k16, both from shared memory (K-major): [wgmma] 128-key tiles; s[j][e] as above, 16 n-tiles. */
#define ATT_WG_SS128(T)                                                                                                     \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                             \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." T "." T " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,"     \
                 "%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34," \
                 "%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57," \
                 "%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, 0, 0;\n}\n"                                              \
                 : ATT_WG_S128_OUT                                                                                          \
                 : "l"(da), "l"(db), "r"(acc))
template <bool F16> static __device__ __forceinline__ void att_wg_ss128(float (&s)[16][4], uint64_t da, uint64_t db, int acc)
{
    if constexpr (F16) ATT_WG_SS128("f16");
    else ATT_WG_SS128("bf16");
}

/* o += A . B, m64n128k16, A = P from registers (the mma.sync A fragment of the warp's 16 rows), B from shared
 * memory MN-major (V [keys][D]: imm-trans-b 1); o[j][e] as s above, 16 n-tiles of 8. */
#define ATT_WG_RS128(T)                                                                                                     \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                                             \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." T "." T " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,"     \
                 "%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34," \
                 "%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57," \
                 "%58,%59,%60,%61,%62,%63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"                                   \
                 : ATT_WG_O_OUT                                                                                             \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1))
template <bool F16> static __device__ __forceinline__ void att_wg_rs128(float (&o)[16][4], const uint32_t (&a)[4], uint64_t db)
{
    if constexpr (F16) ATT_WG_RS128("f16");
    else ATT_WG_RS128("bf16");
}

/* ---- tiles ----------------------------------------------------------------------------------- */

/* K and V of key positions k0 .. k0 + ATT_KT - 1 of one sequence (block table bt) and KV head
 * (element offset kv_off in a slot) into the swizzled tiles sK, sV; positions outside
 * [k_lo, k_hi] are zero-filled (never read from memory). All ATT_THREADS threads call it. */
template <int D>
static __device__ __forceinline__ void att_load_kv(sits_bf16_t *sK, sits_bf16_t *sV, const att_params &p, const int32_t *bt,
                                                   int kv_off, int k0, int k_lo, int k_hi, int part = 0, int cut = 0)
{
    constexpr int CH = D / 8, STEP = ATT_THREADS / CH;
    const int ch = threadIdx.x % CH, kv_row = p.n_kv_heads * D;
#pragma unroll
    for (int r = threadIdx.x / CH; r < ATT_KT; r += STEP) {
        int key = k0 + r;
        bool ok = key >= k_lo && key <= k_hi;
        /* [perf: kv before wait] part 1: every row but the keys in (cut, k_hi]; part 2: those alone; 0: all */
        if (part && (part == 2) != (ok && key > cut)) continue;
        const sits_bf16_t *ks = p.k_cache, *vs = p.v_cache;
        if (ok) {
            int blk = p.bs_shift >= 0 ? key >> p.bs_shift : key / p.block_size;
            size_t slot = (size_t)bt[blk] * (size_t)p.block_size + (size_t)(key - blk * p.block_size);
            size_t off = slot * (size_t)kv_row + (size_t)kv_off + (size_t)ch * 8;
            ks += off;
            vs += off;
        }
        att_cp16(sK + att_sw<D>(r, ch), ks, ok);
        att_cp16(sV + att_sw<D>(r, ch), vs, ok);
    }
}

/* [int8 kv] [fp8 kv] Byte offset of (row, 16-byte chunk) in an 8-bit [rows][D] tile of the decode
 * kernel: the chunk index XORed with row (D = 128) or row / 2 (D = 64, two rows per 128 bytes), so
 * the 8 rows of one ldmatrix phase and the 8 keys of a K fragment load hit distinct banks. */
template <int D> static __device__ __forceinline__ int att_sw8(int row, int chunk)
{
    constexpr int CH = D / 16, SH = D == 64 ? 1 : 0;
    return row * D + ((chunk ^ ((row >> SH) & (CH - 1))) << 4);
}

/* [fp8 kv] One E4M3 byte -> fp32 (exact). */
static __device__ __forceinline__ float att_e4m3_f(unsigned char b)
{
    __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)b, __NV_E4M3);
    return __half2float(__half(h));
}

/* [int8 kv] [fp8 kv] Two 8-bit values (generic kernel) -> fp32, unscaled. */
template <int QM> static __device__ __forceinline__ float2 att_q8_pair(char2 c)
{
    if (QM == SITS_K_KV_F8) return make_float2(att_e4m3_f((unsigned char)c.x), att_e4m3_f((unsigned char)c.y));
    return make_float2((float)c.x, (float)c.y);
}

/* [int8 kv] [fp8 kv] The four 8-bit values of w -> f16x2 lo (bytes 0, 1; the lower byte in the lower half) and hi
 * (bytes 2, 3), exactly: E4M3 by the hardware conversion (sm_89+), which reads either 16-bit half of its register
 * (F2FP ... R.H1: no shift for hi); int8 b as the f16 0x64XX with XX = b ^ 0x80, which is 1024 + b + 128, minus 1152. */
template <bool F8> static __device__ __forceinline__ void att_q8x4_h2(uint32_t w, uint32_t &lo, uint32_t &hi)
{
    if (F8) {
        asm("{\n\t.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.rn.f16x2.e4m3x2 %0, l;\n\tcvt.rn.f16x2.e4m3x2 %1, h;\n\t}\n"
            : "=r"(lo), "=r"(hi)
            : "r"(w));
        return;
    }
    const uint32_t x = w ^ 0x80808080u;
    uint32_t u[2] = { __byte_perm(x, 0x64646464u, 0x4140), __byte_perm(x, 0x64646464u, 0x4342) };
    const __half2 m = __float2half2_rn(1152.0f);
    __half2 a = __hsub2(*reinterpret_cast<__half2 *>(&u[0]), m), b = __hsub2(*reinterpret_cast<__half2 *>(&u[1]), m);
    lo = *reinterpret_cast<uint32_t *>(&a);
    hi = *reinterpret_cast<uint32_t *>(&b);
}

/* bf16x2 -> f16x2, and two floats -> f16x2 (lo in the low half). */
static __device__ __forceinline__ uint32_t att_pack_h(float lo, float hi)
{
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&h);
}
static __device__ __forceinline__ uint32_t att_bf2_h2(uint32_t x)
{
    float2 f = __bfloat1622float2(*reinterpret_cast<__nv_bfloat162 *>(&x));
    return att_pack_h(f.x, f.y);
}

/* d += a . b (16x16 f16 by 16x8 f16, fp32 accumulate). */
static __device__ __forceinline__ void att_mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* d += a . b in f16 (F16: the 8-bit-KV prefill's operands) or bf16. */
template <bool F16> static __device__ __forceinline__ void att_mma_t(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    if (F16) att_mma_f16(d, a, b0, b1);
    else att_mma(d, a, b0, b1);
}

/* [int8 kv] [fp8 kv] The staged 8-bit K / V tiles (att_load_tile) -> swizzled f16 tiles of the unscaled
 * values (exact: every int8 and E4M3 value is an f16), in place: every thread reads its 16-byte chunks,
 * a barrier, then writes two 16-byte f16 chunks for each. The scales stay in sS; the prefill kernel
 * applies them to the scores (K) and to P (V), as the decode kernel does. Called by all threads after
 * the tile's cp.async group has landed and a barrier; ends with a barrier. */
/* 16 raw 8-bit values -> 16 f16 (lo: the first 8). */
template <bool F8> static __device__ __forceinline__ void att_widen16(const uint4 &r, uint4 &lo, uint4 &hi)
{
    const uint32_t w[4] = { r.x, r.y, r.z, r.w };
    uint32_t h[8];
#pragma unroll
    for (int q = 0; q < 4; q++) {
        att_q8x4_h2<F8>(w[q], h[2 * q], h[2 * q + 1]);
    }
    lo = make_uint4(h[0], h[1], h[2], h[3]);
    hi = make_uint4(h[4], h[5], h[6], h[7]);
}

/* [wgmma] [8-bit kv] Widening: the raw 8-bit K / V rows [ATT_KT][D] rK, rV (att_load_raw8, att_sw8's layout) -> f16 tiles
 * sK, sV in att_swz's layout (other buffers: no barrier inside; the caller fences the async proxy and syncs). A thread a
 * 16-byte raw chunk c of row r, written as f16 chunks 2c, 2c + 1. The 8 threads of a 16-byte access phase take
 * chunks 0-3 of one row of a pair and 4-7 of the other: their raw reads (chunk ^ row) and their f16 writes (2c ^ row,
 * even slots for one row, odd for the other) hit 8 distinct 16-byte bank groups; a row's chunks 0-7 in one phase
 * wrote chunks c and c + 4 to the same banks (ncu: 6.4 wavefronts a shared store request, 4 the least). Two halves:
 * att_widen8_read, the raw chunks to registers (the kernel issues a tile's reads before the MMAs that hide their
 * latency: each conversion waited on its own read, ncu's short-scoreboard stalls on the F2FPs were 17 % of the
 * samples), and att_widen8_write, convert and store. */
template <int D> struct att_widen8_regs { uint4 k[ATT_KT * (D / 16) / (2 * ATT_THREADS)], v[ATT_KT * (D / 16) / (2 * ATT_THREADS)]; };
template <int D, int NT> static __device__ __forceinline__ int att_widen8_row(int j, int &c)
{
    const int i = threadIdx.x + j * NT, u = i & 15;
    c = u & 7;
    return 2 * (i >> 4) + (((u >> 2) ^ (u >> 3)) & 1);
}
template <int D, int NT>
static __device__ __forceinline__ void att_widen8_read(att_widen8_regs<D> &x, const unsigned char *rK, const unsigned char *rV)
{
    static_assert(D == 128 && NT == 2 * ATT_THREADS, "[wgmma] head_dim 128, two warpgroups: 8 raw chunks a row, 2 a thread");
#pragma unroll
    for (int j = 0; j < ATT_KT * (D / 16) / NT; j++) {
        int c;
        const int r = att_widen8_row<D, NT>(j, c);
        x.k[j] = *reinterpret_cast<const uint4 *>(rK + att_sw8<D>(r, c));
        x.v[j] = *reinterpret_cast<const uint4 *>(rV + att_sw8<D>(r, c));
    }
}
template <int D, bool F8, int NT>
static __device__ __forceinline__ void att_widen8_write(const att_widen8_regs<D> &x, sits_bf16_t *sK, sits_bf16_t *sV)
{
#pragma unroll
    for (int j = 0; j < ATT_KT * (D / 16) / NT; j++) {
        int c;
        const int r = att_widen8_row<D, NT>(j, c);
        const int e0 = att_swz<D, ATT_KT>(r, 2 * c), e1 = att_swz<D, ATT_KT>(r, 2 * c + 1);
        uint4 lo, hi;
        att_widen16<F8>(x.k[j], lo, hi);
        *reinterpret_cast<uint4 *>(sK + e0) = lo;
        *reinterpret_cast<uint4 *>(sK + e1) = hi;
        att_widen16<F8>(x.v[j], lo, hi);
        *reinterpret_cast<uint4 *>(sV + e0) = lo;
        *reinterpret_cast<uint4 *>(sV + e1) = hi;
    }
}

template <int D, bool F8, bool WGL = false, int NT = ATT_THREADS>
static __device__ __forceinline__ void att_widen_kv(sits_bf16_t *sK, sits_bf16_t *sV)
{
    constexpr int CH = D / 16, PER = ATT_KT * CH / NT; /* WGL: [wgmma] written in att_swz's layout */
    const unsigned char *stK = reinterpret_cast<const unsigned char *>(sK) + ATT_KT * D;
    const unsigned char *stV = reinterpret_cast<const unsigned char *>(sV) + ATT_KT * D;
    uint4 rk[PER], rv[PER];
#pragma unroll
    for (int j = 0; j < PER; j++) {
        int i = threadIdx.x + j * NT, r = i / CH, c = i % CH;
        rk[j] = *reinterpret_cast<const uint4 *>(stK + r * D + c * 16);
        rv[j] = *reinterpret_cast<const uint4 *>(stV + r * D + c * 16);
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < PER; j++) {
        int i = threadIdx.x + j * NT, r = i / CH, c = i % CH;
        const uint32_t wk[4] = { rk[j].x, rk[j].y, rk[j].z, rk[j].w }, wv[4] = { rv[j].x, rv[j].y, rv[j].z, rv[j].w };
        uint32_t hk[8], hv[8];
#pragma unroll
        for (int q = 0; q < 4; q++) {
            att_q8x4_h2<F8>(wk[q], hk[2 * q], hk[2 * q + 1]);
            att_q8x4_h2<F8>(wv[q], hv[2 * q], hv[2 * q + 1]);
        }
        const int e0 = WGL ? att_swz<D, ATT_KT>(r, 2 * c) : att_sw<D>(r, 2 * c);
        const int e1 = WGL ? att_swz<D, ATT_KT>(r, 2 * c + 1) : att_sw<D>(r, 2 * c + 1);
        *reinterpret_cast<uint4 *>(sK + e0) = make_uint4(hk[0], hk[1], hk[2], hk[3]);
        *reinterpret_cast<uint4 *>(sK + e1) = make_uint4(hk[4], hk[5], hk[6], hk[7]);
        *reinterpret_cast<uint4 *>(sV + e0) = make_uint4(hv[0], hv[1], hv[2], hv[3]);
        *reinterpret_cast<uint4 *>(sV + e1) = make_uint4(hv[4], hv[5], hv[6], hv[7]);
    }
    if (WGL) att_fence_async_smem(); /* [wgmma] these writes visible to the MMAs' operand reads */
    __syncthreads();
}

/* The prefill kernel's K / V tiles come through per-key offsets that it computes a tile ahead (one thread a
 * key, the block-table read off the loads' path): att_key_fetch reads key k0 + r's block id, att_key_store
 * writes its offsets -- bf16 caches: the element offset of its K / V row for KV head kvh in so; 8-bit: the
 * byte offsets of its row (so) and of its scale (sso) in the block units; -1: outside [k_lo, k_hi]. */
struct att_key_ref {
    long long b; /* physical block, -1: none */
    int in_blk;  /* slot in the block */
};
static __device__ __forceinline__ att_key_ref att_key_fetch(const att_params &p, const int32_t *bt, int k0, int r, int k_lo, int k_hi)
{
    att_key_ref k = { -1, 0 };
    const int key = k0 + r;
    if (key >= k_lo && key <= k_hi) {
        int blk = p.bs_shift >= 0 ? key >> p.bs_shift : key / p.block_size;
        k.b = bt[blk];
        k.in_blk = key - blk * p.block_size;
    }
    return k;
}
template <int D, bool Q8>
static __device__ __forceinline__ void att_key_store(long long *so, long long *sso, const att_params &p, int kvh, int r, att_key_ref k)
{
    if (Q8) {
        long long row = (long long)k.in_blk * p.n_kv_heads + kvh;
        so[r] = k.b < 0 ? -1 : k.b * p.kv_unit + row * D;
        sso[r] = k.b < 0 ? -1 : k.b * p.kv_unit + p.kv_qbytes + row * 4;
    } else {
        so[r] = k.b < 0 ? -1 : (k.b * p.block_size + k.in_blk) * ((long long)p.n_kv_heads * D) + (long long)kvh * D;
    }
}

/* [int8 kv] [fp8 kv] The raw 8-bit rows [ATT_KT][D] of one tile from its key offsets (att_key_store) to the byte
 * tiles tK, tV (SW: swizzled by att_sw8: the decode kernel, the [wgmma] prefill kernel's raw ring; else dense rows), their scales to sS [K, V][ATT_KT];
 * zeros for keys of offset -1. All NT threads call it. */
template <int D, int NT, bool SW = false>
static __device__ __forceinline__ void att_load_raw8(unsigned char *tK, unsigned char *tV, float *sS, const att_params &p,
                                                     const long long *so, const long long *sso, int part = 0, int n_head = 0)
{
    constexpr int CH = D / 16, STEP = NT / CH;
    static_assert(NT >= 2 * ATT_KT, "one thread per scale");
    const int ch = threadIdx.x % CH;
    const unsigned char *kb = reinterpret_cast<const unsigned char *>(p.k_cache);
    const unsigned char *vb = reinterpret_cast<const unsigned char *>(p.v_cache);
    /* [perf: kv before wait] part 1: every row but the keys from row n_head on (inside the partition: offset >= 0);
     * part 2: those alone; 0: all */
#pragma unroll
    for (int r = threadIdx.x / CH; r < ATT_KT; r += STEP) {
        const long long off = so[r];
        const bool ok = off >= 0;
        if (part && (part == 2) != (ok && r >= n_head)) continue;
        const long long at = ok ? off + ch * 16 : 0;
        const int dst = SW ? att_sw8<D>(r, ch) : r * D + ch * 16;
        att_cp16(tK + dst, kb + at, ok);
        att_cp16(tV + dst, vb + at, ok);
    }
    if (threadIdx.x < 2 * ATT_KT) {
        const int r = threadIdx.x & (ATT_KT - 1);
        const long long off = sso[r];
        if (!part || (part == 2) == (off >= 0 && r >= n_head))
            att_cp4(sS + threadIdx.x, (threadIdx.x >= ATT_KT ? vb : kb) + (off >= 0 ? off : 0), off >= 0);
    }
}

/* One K/V tile of the prefill kernel from its key offsets (att_key_store) into the bf16 tiles (bf16 caches,
 * swizzled), or [int8 kv] [fp8 kv] the raw 8-bit rows [ATT_KT][D] into the upper half of the tiles (bytes
 * ATT_KT * D .. 2 * ATT_KT * D of sK, sV) and their scales into sS [K, V][ATT_KT] (att_widen_kv must run
 * after the wait). Zeros for keys of offset -1. All NT threads call it. */
template <int D, bool Q8, bool WGL = false, int NT = ATT_THREADS, int KT = ATT_KT>
static __device__ __forceinline__ void att_load_tile(sits_bf16_t *sK, sits_bf16_t *sV, float *sS, const att_params &p,
                                                     const long long *so, const long long *sso)
{
    if (!Q8) { /* WGL: [wgmma] the tiles in att_swz's layout */
        constexpr int CH = D / 8, STEP = NT / CH;
        const int ch = threadIdx.x % CH;
#pragma unroll
        for (int r = threadIdx.x / CH; r < KT; r += STEP) {
            const long long off = so[r];
            const bool ok = off >= 0;
            const long long at = ok ? off + ch * 8 : 0;
            const int e = WGL ? att_swz<D, KT>(r, ch) : att_sw<D>(r, ch);
            att_cp16(sK + e, p.k_cache + at, ok);
            att_cp16(sV + e, p.v_cache + at, ok);
        }
    } else {
        static_assert(!Q8 || KT == ATT_KT, "8-bit tiles of ATT_KT keys");
        att_load_raw8<D, NT>(reinterpret_cast<unsigned char *>(sK) + ATT_KT * D, reinterpret_cast<unsigned char *>(sV) + ATT_KT * D, sS, p,
                             so, sso);
    }
}

/* 2^x with denormal results flushed to zero: one MUFU.EX2 (exp2f's non-ftz ex2.approx.f32 is four
 * instructions: a range test and two scalings around it). exp2(-inf) = 0; results under 2^-126, which a
 * softmax weight relative to its row's maximum never needs, become 0. */
static __device__ __forceinline__ float att_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* One online-softmax step over a warp's score fragment s [NT n-tiles of 8 keys] for its rows g
 * (m0, l0) and g + 8 (m1, l1), with the scores in base-2 units after multiplying by sc (sc > 0; 1 when
 * they are scaled already): s becomes exp2(s sc - m_new) (one FFMA and one MUFU a score); l are this
 * thread's partial row sums (summed over the quad at the end); c0, c1 are the factors to rescale the
 * accumulators by. Returns whether either row's maximum moved (else c0 = c1 = 1 and the caller may
 * skip the rescale, warp-uniformly). A row with no valid key so far keeps m = -inf and contributes nothing. */
template <int NT>
static __device__ __forceinline__ bool att_softmax_step(float (&s)[NT][4], float sc, float &m0, float &m1, float &l0, float &l1,
                                                        float &c0, float &c1)
{
    float x0 = -INFINITY, x1 = -INFINITY;
#pragma unroll
    for (int j = 0; j < NT; j++) {
        x0 = fmaxf(x0, fmaxf(s[j][0], s[j][1]));
        x1 = fmaxf(x1, fmaxf(s[j][2], s[j][3]));
    }
#pragma unroll
    for (int o = 1; o <= 2; o <<= 1) {
        x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, o));
        x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, o));
    }
    float n0 = fmaxf(m0, x0 * sc), n1 = fmaxf(m1, x1 * sc);
    float u0 = n0 == -INFINITY ? 0.0f : n0, u1 = n1 == -INFINITY ? 0.0f : n1;
    const bool moved = n0 != m0 || n1 != m1;
    c0 = att_exp2(m0 - u0);
    c1 = att_exp2(m1 - u1);
    float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
    for (int j = 0; j < NT; j++) {
        s[j][0] = att_exp2(fmaf(s[j][0], sc, -u0));
        s[j][1] = att_exp2(fmaf(s[j][1], sc, -u0));
        s[j][2] = att_exp2(fmaf(s[j][2], sc, -u1));
        s[j][3] = att_exp2(fmaf(s[j][3], sc, -u1));
        sum0 += s[j][0] + s[j][1];
        sum1 += s[j][2] + s[j][3];
    }
    l0 = l0 * c0 + sum0;
    l1 = l1 * c1 + sum1;
    m0 = n0;
    m1 = n1;
    return moved;
}

/* [trace] %globaltimer (ns, one clock for every SM): the trace builds' entry / exit times. */
static __device__ __forceinline__ unsigned long long att_gtimer()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* [trace] A trace build's records (SITS_ATT_PF_TRACE: the prefill and 8-bit decode kernels' per-CTA records, 8 words
 * each): the count the last launch wrote to n_sym, at most max_ctas, and that many records of buf_sym to dst; -1 on a
 * CUDA error. Synchronous. */
template <class NS, class BS> static int att_trace_read(const NS &n_sym, const BS &buf_sym, unsigned long long *dst, int max_ctas)
{
    int n = 0;
    if (cudaDeviceSynchronize() != cudaSuccess || cudaMemcpyFromSymbol(&n, n_sym, sizeof n) != cudaSuccess) return -1;
    n = n < max_ctas ? n : max_ctas;
    if (n > 0 && cudaMemcpyFromSymbol(dst, buf_sym, (size_t)n * 8 * sizeof(unsigned long long)) != cudaSuccess) return -1;
    return n;
}

#endif
