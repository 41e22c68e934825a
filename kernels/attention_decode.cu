// Split-KV paged decode attention (flash-decoding), GQA-aware: one block reads
// each K/V row of its kv head once and uses it for every query head of the group.
// Metadata layout: see attention_simple.cu. Only the last query row of each
// sequence is computed (a decode batch has exactly one new token per sequence).
#include "common.cuh"
#include "rope.cuh"

#define DECODE_WARPS 4

// Rows of the context handled by each split of sequence `ctx` long when the grid has
// `splits` splits of at least `min_part` rows (the host's MINISGL_DECODE_MIN_PART);
// shared with the combine kernels.
__device__ __forceinline__ int decode_part(int ctx, int splits, int min_part) {
    int part = (ctx + splits - 1) / splits;
    return part < min_part ? min_part : part;
}

// grid: (splits, kv_heads * head_chunks, B); block: 128.
// Block (s, y, b) handles query heads kvh * group + hc * GMAX + [0, GMAX) of sequence b
// over context rows [s * part, (s + 1) * part), kvh = y / head_chunks, hc = y % head_chunks.
// Writes normalized partial outputs o_part[b, h, s, :] (f32) and their log2-sum-exp
// lse_part[b, h, s] for attn_decode_combine; with one split and o_direct set, the
// block's result is the output, so it is written there in bf16 and no combine runs
// (at large batches the grid is full without splitting; the combine was 2-3% of a step).
// One (query head, dim) of a block's merged result: the bf16 output itself when the
// launch has one split and o_direct is set, else the normalized partial and (d == 0)
// its log2-sum-exp for attn_decode_combine. Shared by both decode kernels.
__device__ __forceinline__ void decode_store(bf16_t* __restrict__ o_direct,
                                             float* __restrict__ o_part,
                                             float* __restrict__ lse_part,
                                             const int* __restrict__ q_start, int b,
                                             int q_heads, int h, int hd, int d, int split,
                                             int splits, float M, float L, float O) {
    if (o_direct != nullptr) {
        o_direct[(size_t)(q_start[b + 1] - 1) * q_heads * hd + h * hd + d] = f2bf(O / L);
    } else {
        size_t bh = (size_t)b * q_heads + h;
        o_part[(bh * splits + split) * hd + d] = O / L;
        if (d == 0) lse_part[bh * splits + split] = M + log2f(L);
    }
}

template <int HD, int GMAX>
__device__ __forceinline__ void decode_impl(
    const bf16_t* __restrict__ q, int q_stride, const bf16_t* __restrict__ k_cache,
    const bf16_t* __restrict__ v_cache, const int* __restrict__ q_start,
    const int* __restrict__ kv_len, const int* __restrict__ page_start,
    const int* __restrict__ page_ids, int q_heads, int kv_heads, int page_size, float scale,
    int min_part, int head_chunks, float* __restrict__ o_part, float* __restrict__ lse_part,
    bf16_t* __restrict__ o_direct) {
    constexpr int LPR = HD / 8;                 // lanes per K/V row (16 bytes each)
    constexpr int RGW = 32 / LPR;               // row groups per warp
    constexpr int RG = DECODE_WARPS * RGW;      // row groups per block
    constexpr int R = GMAX >= 8 ? 2 : 4;        // rows per row group per iteration
    __shared__ float sm_m[RG][GMAX];
    __shared__ float sm_l[RG][GMAX];
    __shared__ float sm_acc[RG][GMAX][HD];

    int split = blockIdx.x, b = blockIdx.z;
    int kvh = blockIdx.y / head_chunks, hc = blockIdx.y % head_chunks;
    int group = q_heads / kv_heads;
    int h0 = kvh * group + hc * GMAX;
    int nh = min(GMAX, group - hc * GMAX);
    int ctx = kv_len[b];
    int part = decode_part(ctx, gridDim.x, min_part);
    int c0 = split * part;
    if (c0 >= ctx) return;
    int c1 = min(ctx, c0 + part);
    int t = q_start[b + 1] - 1;
    const int* pages = page_ids + page_start[b];

    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int rg = warp * RGW + lane / LPR, li = lane % LPR;
    float qs = scale * LOG2E;
    float qv[GMAX][8];
#pragma unroll
    for (int g = 0; g < GMAX; g++) {
        if (g < nh) {
            u32x4 w = *reinterpret_cast<const u32x4*>(q + (size_t)t * q_stride + (h0 + g) * HD + li * 8);
            u32 ww[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
            for (int e = 0; e < 4; e++) {
                qv[g][2 * e] = bf_lo(ww[e]) * qs;
                qv[g][2 * e + 1] = bf_hi(ww[e]) * qs;
            }
        } else {
#pragma unroll
            for (int e = 0; e < 8; e++) qv[g][e] = 0.0f;
        }
    }
    float m[GMAX], l[GMAX], acc[GMAX][8];
#pragma unroll
    for (int g = 0; g < GMAX; g++) {
        m[g] = NEG_INF;
        l[g] = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; e++) acc[g][e] = 0.0f;
    }

    // The trip count must be the same for every lane of a warp (the shuffles below
    // use a full mask), so iterate per warp and mask rows past the end instead.
    int rgw = lane / LPR;  // row group within the warp
    for (int wbase = c0 + warp * RGW * R; wbase < c1; wbase += RG * R) {
        int base = wbase + rgw * R;
        u32x4 kr[R], vr[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            int p = base + r;
            if (p < c1) {
                size_t row = ((size_t)pages[p / page_size] * page_size + p % page_size) * kv_heads + kvh;
                kr[r] = *reinterpret_cast<const u32x4*>(k_cache + row * HD + li * 8);
                vr[r] = *reinterpret_cast<const u32x4*>(v_cache + row * HD + li * 8);
            } else {
                kr[r] = u32x4{0u, 0u, 0u, 0u};
                vr[r] = u32x4{0u, 0u, 0u, 0u};
            }
        }
        float s[R][GMAX];
#pragma unroll
        for (int r = 0; r < R; r++) {
            u32 kw[4] = {kr[r].x, kr[r].y, kr[r].z, kr[r].w};
            float kf[8];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                kf[2 * e] = bf_lo(kw[e]);
                kf[2 * e + 1] = bf_hi(kw[e]);
            }
#pragma unroll
            for (int g = 0; g < GMAX; g++) {
                float d = 0.0f;
#pragma unroll
                for (int e = 0; e < 8; e++) d += qv[g][e] * kf[e];
#pragma unroll
                for (int off = LPR / 2; off > 0; off >>= 1) d += __shfl_xor_sync(0xffffffffu, d, off);
                s[r][g] = (base + r < c1) ? d : NEG_INF;
            }
        }
        float vf[R][8];
#pragma unroll
        for (int r = 0; r < R; r++) {
            u32 vw[4] = {vr[r].x, vr[r].y, vr[r].z, vr[r].w};
#pragma unroll
            for (int e = 0; e < 4; e++) {
                vf[r][2 * e] = bf_lo(vw[e]);
                vf[r][2 * e + 1] = bf_hi(vw[e]);
            }
        }
#pragma unroll
        for (int g = 0; g < GMAX; g++) {
            float mx = m[g];
#pragma unroll
            for (int r = 0; r < R; r++) mx = fmaxf(mx, s[r][g]);
            // A row group whose rows all lie past the end (warp-uniform loop) sees only
            // -inf: keep its state unchanged instead of computing exp2(-inf - -inf).
            float mref = mx == NEG_INF ? 0.0f : mx;
            float alpha = exp2f(m[g] - mref);
            float pr[R];
            float psum = 0.0f;
#pragma unroll
            for (int r = 0; r < R; r++) {
                pr[r] = exp2f(s[r][g] - mref);
                psum += pr[r];
            }
            l[g] = l[g] * alpha + psum;
            m[g] = mx;
#pragma unroll
            for (int e = 0; e < 8; e++) {
                float a = acc[g][e] * alpha;
#pragma unroll
                for (int r = 0; r < R; r++) a += pr[r] * vf[r][e];
                acc[g][e] = a;
            }
        }
    }

#pragma unroll
    for (int g = 0; g < GMAX; g++) {
        if (li == 0) {
            sm_m[rg][g] = m[g];
            sm_l[rg][g] = l[g];
        }
#pragma unroll
        for (int e = 0; e < 8; e++) sm_acc[rg][g][li * 8 + e] = acc[g][e];
    }
    __syncthreads();
    int splits = gridDim.x;
    for (int idx = threadIdx.x; idx < nh * HD; idx += blockDim.x) {
        int g = idx / HD, d = idx % HD;
        float M = NEG_INF;
#pragma unroll
        for (int i = 0; i < RG; i++) M = fmaxf(M, sm_m[i][g]);
        float L = 0.0f, O = 0.0f;
#pragma unroll
        for (int i = 0; i < RG; i++) {
            float w = sm_m[i][g] == NEG_INF ? 0.0f : exp2f(sm_m[i][g] - M);
            L += sm_l[i][g] * w;
            O += sm_acc[i][g][d] * w;
        }
        decode_store(o_direct, o_part, lse_part, q_start, b, q_heads, h0 + g, HD, d, split,
                     splits, M, L, O);
    }
}

#define DECODE(HD, G)                                                                          \
    extern "C" __global__ void __launch_bounds__(128) attn_decode_hd##HD##_g##G(                \
        const bf16_t* q, int q_stride, const bf16_t* k_cache, const bf16_t* v_cache,          \
        const int* q_start, const int* kv_len, const int* page_start, const int* page_ids,   \
        int q_heads, int kv_heads, int page_size, float scale, int min_part, int head_chunks,  \
        float* o_part, float* lse_part, bf16_t* o_direct) {                                    \
        decode_impl<HD, G>(q, q_stride, k_cache, v_cache, q_start, kv_len, page_start,         \
                           page_ids, q_heads, kv_heads, page_size, scale, min_part,            \
                           head_chunks, o_part, lse_part, o_direct);                           \
    }
DECODE(64, 1)
DECODE(64, 2)
DECODE(64, 4)
DECODE(64, 8)
DECODE(128, 1)
DECODE(128, 2)
DECODE(128, 4)
DECODE(128, 8)

// Tensor-core decode for GQA: the query heads of one kv head become the 16 rows of
// an mma.sync m16n8k16 A operand (heads past the group are zero rows), so each K/V
// row is read once and multiplied against the whole group on tensor cores instead
// of a shuffle reduction per head. Same split-KV partials as decode_impl, merged by
// attn_decode_combine. Needs group <= 16 and a power-of-two page size.
//
// grid: (splits, kv_heads, B); block: 128 (4 warps). The block stages DM_BK context
// rows of K and V in shared memory, two tiles deep: the next tile's cp.async copies
// are in flight while the warps compute on the current one. Warp w computes scores
// and P.V for rows [16 w, 16 w + 16) of each tile with its own online-softmax state,
// and the four states are merged at the end. Dynamic shared memory:
// 2 * 2 * DM_BK * (HD + DM_PAD) bf16 (device.rs `dynamic_smem` must agree).
//
// The loop is bound by instruction issue more than by memory: the warps that wait
// for a tile also issue the next one's copies. Measured on the H200 (2026-12-01,
// docs/results/gpu-2026-12-01-decode2.md): the first version paid an integer
// division by the page size and 64-bit index products per 16-byte piece and loaded
// fragments element by element, and ran at 79% of copy bandwidth (256 x 1100, group
// 5); splitting its page lookup out, which doubled the divisions, cost another 14%.
// This one uses shift and mask, per-block copy addresses and ldmatrix fragments
// (35% fewer instructions) and runs at 92%. Reading page ids a tile ahead and three
// stages (two blocks per SM) were measured too and gave nothing / lost 20%.
#define DM_BK 64
#define DM_PAD 8

struct __align__(8) f32x2 { float x, y; };

// The end of a segment: the four warps' online-softmax states (this lane's rows g and
// g + 8 of its warp's O) merged through shared memory at `scratch` (one stage of the
// tiles' memory, 64 rows of HD + 8 floats, that no copy in flight writes) and handed to
// `store` per (query head, dim).
template <int HD, bool HI, typename Store>
__device__ __forceinline__ void decode_mma_merge(int warp, int g, int tq, float m0, float m1,
                                                 float l0, float l1, float (&oacc)[HD / 8][4],
                                                 int group, float (&sm_m)[4][16],
                                                 float (&sm_l)[4][16], float* scratch,
                                                 Store store) {
    int wr = warp * 16;
    l0 = quad_sum(l0);
    if constexpr (HI) l1 = quad_sum(l1);

    // Merge the four warps' states (the tiles' memory now holds the partial outputs).
    // Rows OS = HD + 8 floats apart and 8-byte stores: each half-warp's 16 stores fall
    // in 16 different banks. Rows HD apart put a warp's 8 row groups in one bank, a
    // 7.5-way conflict that Nsight Compute counted as 75% of this kernel's shared
    // store wavefronts (Qwen3-0.6B batch 256 x 256, 2026-12-02).
    constexpr int OS = HD + 8;
    __syncthreads();
    float* sm_o = scratch;
    if (tq == 0) {
        sm_m[warp][g] = l0 > 0.0f ? m0 : NEG_INF;
        sm_l[warp][g] = l0;
        if constexpr (HI) {
            sm_m[warp][g + 8] = l1 > 0.0f ? m1 : NEG_INF;
            sm_l[warp][g + 8] = l1;
        }
    }
#pragma unroll
    for (int dt = 0; dt < HD / 8; dt++) {
        int col = dt * 8 + 2 * tq;
        *reinterpret_cast<f32x2*>(sm_o + (wr + g) * OS + col) = f32x2{oacc[dt][0], oacc[dt][1]};
        if constexpr (HI)
            *reinterpret_cast<f32x2*>(sm_o + (wr + g + 8) * OS + col) =
                f32x2{oacc[dt][2], oacc[dt][3]};
    }
    int nh = min(group, 16);
    // Each head's max, sum and four warp weights once (threads 0..nh-1), not once per
    // output element (four exp2f an element before).
    __shared__ float sm_w[4][16], sm_ml[2][16];
    __syncthreads();
    if (threadIdx.x < nh) {
        int gi = threadIdx.x;
        float M = NEG_INF;
#pragma unroll
        for (int w = 0; w < 4; w++) M = fmaxf(M, sm_m[w][gi]);
        float L = 0.0f;
#pragma unroll
        for (int w = 0; w < 4; w++) {
            float wt = sm_m[w][gi] == NEG_INF ? 0.0f : exp2f(sm_m[w][gi] - M);
            L += sm_l[w][gi] * wt;
            sm_w[w][gi] = wt;
        }
        sm_ml[0][gi] = M;
        sm_ml[1][gi] = L;
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < nh * HD; idx += blockDim.x) {
        int gi = idx / HD, d = idx % HD;
        float O = 0.0f;
#pragma unroll
        for (int w = 0; w < 4; w++) O += sm_o[(w * 16 + gi) * OS + d] * sm_w[w][gi];
        store(gi, d, sm_ml[0][gi], sm_ml[1][gi], O);
    }
}

// The staging geometry of one tile per head_dim; a thread copies rows r0 + RPP i.
template <int HD>
struct DmTile {
    static constexpr int LD = HD + DM_PAD;     // bf16 per staged row
    static constexpr int TILE = DM_BK * LD;    // bf16 per staged K (or V) tile
    static constexpr int CPR = HD / 8;         // 16-byte pieces per row
    static constexpr int RPP = 128 / CPR;      // rows one pass of the block covers
    static constexpr int PIECES = DM_BK / RPP; // pieces per thread per tile
};

// Page ids of the rows this thread copies in the tile at kb (0 past c1).
template <int HD>
__device__ __forceinline__ void decode_mma_pages(int (&pg)[DmTile<HD>::PIECES], const int* pages,
                                                 int kb, int r0, int c1, int shift) {
#pragma unroll
    for (int i = 0; i < DmTile<HD>::PIECES; i++) {
        int p = kb + r0 + i * DmTile<HD>::RPP;
        pg[i] = p < c1 ? __ldg(pages + (p >> shift)) : 0;
    }
}

// Issues the copies of the tile at kb into the stage at shared address `dst`
// (K, then V TILE elements later). kp / vp: this thread's column of kv head kvh
// in slot 0; `stride`: elements per slot.
template <int HD>
__device__ __forceinline__ void decode_mma_copy(u32 dst, const bf16_t* kp, const bf16_t* vp,
                                                const int (&pg)[DmTile<HD>::PIECES], int kb,
                                                int r0, int c1, int shift, u32 stride) {
    const int mask = (1 << shift) - 1;
#pragma unroll
    for (int i = 0; i < DmTile<HD>::PIECES; i++) {
        int p = kb + r0 + i * DmTile<HD>::RPP;
        bool valid = p < c1;
        u32 slot = ((u32)pg[i] << shift) | (u32)(p & mask);
        size_t off = valid ? (size_t)slot * stride : 0;
        u32 d = dst + (u32)(i * DmTile<HD>::RPP * DmTile<HD>::LD * 2);
        cp_async16(d, kp + off, valid);
        cp_async16(d + DmTile<HD>::TILE * 2, vp + off, valid);
    }
}

// This lane's A fragments of query heads h0 + [0, 16) of token row t (heads past the
// group are zero rows).
template <int HD>
__device__ __forceinline__ void decode_mma_q(u32 (&qf)[HD / 16][4], const bf16_t* __restrict__ q,
                                             int q_stride, int t, int h0, int group, int g,
                                             int tq) {
    bool ok0 = g < group, ok1 = g + 8 < group;
    const bf16_t* q0p = q + (size_t)t * q_stride + (h0 + (ok0 ? g : 0)) * HD;
    const bf16_t* q1p = q + (size_t)t * q_stride + (h0 + (ok1 ? g + 8 : 0)) * HD;
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++) {
        qf[kk][0] = ok0 ? *reinterpret_cast<const u32*>(q0p + kk * 16 + 2 * tq) : 0u;
        qf[kk][1] = ok1 ? *reinterpret_cast<const u32*>(q1p + kk * 16 + 2 * tq) : 0u;
        qf[kk][2] = ok0 ? *reinterpret_cast<const u32*>(q0p + kk * 16 + 8 + 2 * tq) : 0u;
        qf[kk][3] = ok1 ? *reinterpret_cast<const u32*>(q1p + kk * 16 + 8 + 2 * tq) : 0u;
    }
}

// One staged tile (context rows [kb, kb + DM_BK) of a segment ending at c1, in the stage
// at shared address `stage`): this warp's 16 rows of scores against the group, its
// online-softmax update and P.V into (m, l, oacc). k_lm / v_lm: this lane's ldmatrix
// offsets; sl2: scale * log2(e).
//
// HI: the group has more than 8 query heads, so A rows 8-15 (this lane's row g + 8: m1,
// l1, oacc[.][2..3]) hold live heads. Without it (every group of 8 or fewer: Qwen3,
// Llama 3, Mistral) those rows are zero queries whose softmax and rescale are never read,
// and the build skips them: their P fragments are zero, so P.V leaves their accumulators
// at zero. That work was a third of the loop's non-mma instructions, but removing it
// gained only 0.5-1.5% at short contexts and nothing at long ones (H100, 2026-12-05,
// docs/results/gpu-2026-12-05-lean.md): the loop is not bound by their issue.
//
// The accumulators are rescaled only when some row's running max moved (warp-uniform):
// o * 1.0f is o, so skipping it changes no bit, and after the first tiles of a segment
// the max rarely moves.
template <int HD, bool HI>
__device__ __forceinline__ void decode_mma_tile(u32 stage, u32 k_lm, u32 v_lm,
                                                const u32 (&qf)[HD / 16][4], int kb, int wr,
                                                int c1, int tq, float sl2, float& m0, float& m1,
                                                float& l0, float& l1, float (&oacc)[HD / 8][4]) {
    if (kb + wr < c1) {  // else this warp's rows of the tile are all past the end
        float sacc[2][4];
#pragma unroll
        for (int nt = 0; nt < 2; nt++) sacc[nt][0] = sacc[nt][1] = sacc[nt][2] = sacc[nt][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
            u32 b[4];
            ldmatrix_x4(b, stage + k_lm + kk * 32);
            mma_bf16_16816(sacc[0], qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3], b[0], b[1]);
            mma_bf16_16816(sacc[1], qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3], b[2], b[3]);
        }
        float mx0 = NEG_INF, mx1 = NEG_INF;
#pragma unroll
        for (int nt = 0; nt < 2; nt++) {
#pragma unroll
            for (int e = 0; e < (HI ? 4 : 2); e++) {
                int col = kb + wr + nt * 8 + 2 * tq + (e & 1);
                sacc[nt][e] = col < c1 ? sacc[nt][e] * sl2 : NEG_INF;
            }
            mx0 = fmaxf(mx0, fmaxf(sacc[nt][0], sacc[nt][1]));
            if constexpr (HI) mx1 = fmaxf(mx1, fmaxf(sacc[nt][2], sacc[nt][3]));
        }
        mx0 = quad_max(mx0);
        if constexpr (HI) mx1 = quad_max(mx1);
        // At least one column of this warp's slice is valid, so mx is finite.
        float mn0 = fmaxf(m0, mx0), mn1 = HI ? fmaxf(m1, mx1) : m1;
        float al0 = exp2f(m0 - mn0), al1 = HI ? exp2f(m1 - mn1) : 1.0f;
        m0 = mn0;
        m1 = mn1;
        float rs0 = 0.0f, rs1 = 0.0f;
#pragma unroll
        for (int nt = 0; nt < 2; nt++) {
            sacc[nt][0] = exp2f(sacc[nt][0] - mn0);
            sacc[nt][1] = exp2f(sacc[nt][1] - mn0);
            rs0 += sacc[nt][0] + sacc[nt][1];
            if constexpr (HI) {
                sacc[nt][2] = exp2f(sacc[nt][2] - mn1);
                sacc[nt][3] = exp2f(sacc[nt][3] - mn1);
                rs1 += sacc[nt][2] + sacc[nt][3];
            }
        }
        l0 = l0 * al0 + rs0;
        if constexpr (HI) l1 = l1 * al1 + rs1;
        u32 a0 = pack_bf16x2(sacc[0][0], sacc[0][1]);
        u32 a1 = HI ? pack_bf16x2(sacc[0][2], sacc[0][3]) : 0u;
        u32 a2 = pack_bf16x2(sacc[1][0], sacc[1][1]);
        u32 a3 = HI ? pack_bf16x2(sacc[1][2], sacc[1][3]) : 0u;
        if (__any_sync(0xffffffffu, al0 != 1.0f || al1 != 1.0f)) {
#pragma unroll
            for (int i = 0; i < HD / 8; i++) {
                oacc[i][0] *= al0;
                oacc[i][1] *= al0;
                if constexpr (HI) {
                    oacc[i][2] *= al1;
                    oacc[i][3] *= al1;
                }
            }
        }
#pragma unroll
        for (int dp = 0; dp < HD / 16; dp++) {
            u32 b[4];
            ldmatrix_x4_trans(b, stage + v_lm + dp * 32);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float* o = oacc[2 * dp + h];
                mma_bf16_16816(o, a0, a1, a2, a3, b[2 * h], b[2 * h + 1]);
            }
        }
    }
}

// One (sequence, kv head) over context rows [c0, c1) (c0 < c1): the whole group's
// scores, online softmax and P.V, the four warps' states merged at the end;
// `store(gi, d, M, L, O)` receives each (query head gi of the group, dim d) of the
// merged state (O / L the output, M + log2 L its log2-sum-exp). `t` is the token row
// of the query. Shared by the split-KV and the stream-K kernels below.
//
// RS (decode_mma_rs_hd*): q is not ready in memory and the new token's K/V row
// `newrow` (-1: not in this segment) is not cached yet. The block issues the first
// tile's copies, then `prep()` writes the group's finished q heads to q (shared
// memory, head gi at q + gi * HD), the new row to the caches and its K and V to
// new_kv[0, HD) and [HD, 2 HD). Copies issued after prep's barrier read the row from
// the cache; in the first tile, the threads that copied it overwrite it from new_kv
// once their copies landed. The loop is otherwise the plain kernel's: it is bound by
// instruction issue, and a first build that skipped the row in every copy and issued
// both stages before prep() ran 24% more instructions (0.6B batch 256, Nsight Compute).
template <int HD, bool RS, bool HI, typename Store, typename Prep>
__device__ __forceinline__ void decode_mma_segment_g(
    const bf16_t* __restrict__ q, int q_stride, const bf16_t* __restrict__ k_cache,
    const bf16_t* __restrict__ v_cache, const int* pages, int t, int kvh, int group,
    int kv_heads, int page_size, float scale, int c0, int c1, int newrow,
    const bf16_t* new_kv, Store store, Prep prep) {
    using C = DmTile<HD>;
    constexpr int LD = C::LD;
    constexpr int TILE = C::TILE;
    extern __shared__ __align__(16) unsigned char dm_smem[];
    bf16_t* smem = reinterpret_cast<bf16_t*>(dm_smem);
    __shared__ float sm_m[4][16];
    __shared__ float sm_l[4][16];

    const int h0 = kvh * group;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
    const int shift = __ffs(page_size) - 1;
    const int r0 = threadIdx.x / C::CPR, cc = threadIdx.x % C::CPR;
    const u32 stride = (u32)(kv_heads * HD);
    const bf16_t* kp = k_cache + kvh * HD + cc * 8;
    const bf16_t* vp = v_cache + kvh * HD + cc * 8;
    const u32 smem0 = smem_u32(smem);
    // This thread's first piece in a stage (stage s at + 2 s TILE elements).
    const u32 my_dst = smem0 + (u32)((r0 * LD + cc * 8) * 2);

    int pg[C::PIECES];
    decode_mma_pages<HD>(pg, pages, c0, r0, c1, shift);
    decode_mma_copy<HD>(my_dst, kp, vp, pg, c0, r0, c1, shift, stride);
    cp_async_commit();
    if constexpr (RS) {
        prep();
        __syncthreads();
    }

    u32 qf[HD / 16][4];
    decode_mma_q<HD>(qf, q, q_stride, t, RS ? 0 : h0, group, g, tq);
    float oacc[HD / 8][4];
#pragma unroll
    for (int i = 0; i < HD / 8; i++) oacc[i][0] = oacc[i][1] = oacc[i][2] = oacc[i][3] = 0.0f;
    float m0 = NEG_INF, m1 = NEG_INF, l0 = 0.0f, l1 = 0.0f;
    const float sl2 = scale * LOG2E;
    const int wr = warp * 16;  // this warp's rows within a tile
    // ldmatrix row addresses (bytes within a stage). K, x4 per 16 dims: matrices
    // (rows +0..7 | +8..15) x (dims +0..7 | +8..15) = b0/b1 of n-tiles 0 and 1.
    // V, x4.trans per 16 dims: (tokens +0..7 | +8..15) x (dims +0..7 | +8..15) =
    // b0/b1 of two d-tiles.
    const int lm = lane >> 3, lr = lane & 7;
    const u32 k_lm = (u32)(((wr + (lm >> 1) * 8 + lr) * LD + (lm & 1) * 8) * 2);
    const u32 v_lm = (u32)(((wr + (lm & 1) * 8 + lr) * LD + (lm >> 1) * 8) * 2 + TILE * 2);

    for (int kb = c0, it = 0; kb < c1; kb += DM_BK, it++) {
        const u32 stage = smem0 + (u32)((it & 1) * 2 * TILE * 2);
        // The next tile goes to the other stage, which every warp finished reading
        // before the barrier at the end of the previous iteration; the group is
        // committed even when empty so that wait<1> means "the current tile landed".
        int kn = kb + DM_BK;
        if (kn < c1) {
            decode_mma_pages<HD>(pg, pages, kn, r0, c1, shift);
            decode_mma_copy<HD>(my_dst + (u32)((((it + 1) & 1) * 2 * TILE) * 2), kp, vp, pg, kn,
                                r0, c1, shift, stride);
        }
        cp_async_commit();
        cp_async_wait<1>();
        if constexpr (RS) {
            // The first tile's copy of the new row may have read the slot before prep()
            // wrote it: the thread that copied each piece (its copy has landed) puts
            // the row's K and V there from new_kv (published by prep's barrier).
            const int nr = newrow - c0;
            if (it == 0 && (unsigned)nr < (unsigned)DM_BK && r0 == nr % C::RPP) {
                bf16_t* row = smem + nr * LD + cc * 8;
                *reinterpret_cast<uint4*>(row) = *reinterpret_cast<const uint4*>(new_kv + cc * 8);
                *reinterpret_cast<uint4*>(row + TILE) =
                    *reinterpret_cast<const uint4*>(new_kv + HD + cc * 8);
            }
        }
        __syncthreads();
        decode_mma_tile<HD, HI>(stage, k_lm, v_lm, qf, kb, wr, c1, tq, sl2, m0, m1, l0, l1, oacc);
        // The next iteration's copies overwrite this stage.
        __syncthreads();
    }
    cp_async_wait<0>();
    decode_mma_merge<HD, HI>(warp, g, tq, m0, m1, l0, l1, oacc, group, sm_m, sm_l,
                         reinterpret_cast<float*>(dm_smem), store);
}

// decode_mma_segment_g for the group: HI (decode_mma_tile) where rows 8-15 of the A
// operand hold live heads, so both are instantiated and each launch takes one.
template <int HD, bool RS, typename Store, typename Prep>
__device__ __forceinline__ void decode_mma_segment(
    const bf16_t* __restrict__ q, int q_stride, const bf16_t* __restrict__ k_cache,
    const bf16_t* __restrict__ v_cache, const int* pages, int t, int kvh, int group,
    int kv_heads, int page_size, float scale, int c0, int c1, int newrow,
    const bf16_t* new_kv, Store store, Prep prep) {
    if (group > 8) {
        decode_mma_segment_g<HD, RS, true>(q, q_stride, k_cache, v_cache, pages, t, kvh, group,
                                           kv_heads, page_size, scale, c0, c1, newrow, new_kv,
                                           store, prep);
    } else {
        decode_mma_segment_g<HD, RS, false>(q, q_stride, k_cache, v_cache, pages, t, kvh, group,
                                            kv_heads, page_size, scale, c0, c1, newrow, new_kv,
                                            store, prep);
    }
}

// What the folded build (decode_mma_rs_hd*) reads beyond the plain kernel's arguments:
// qkv_rope_store's (rope.cuh).
typedef RopeStoreArgs DecodeRope;

// RS = false: attn_decode_mma_hd*, q read rotated at q + t * q_stride (r unused).
// RS = true: attn_decode_mma_rs_hd*, qkv_rope_store's work folded in. q is the fused qkv
// row, unrotated (q_stride its row stride; k and v heads follow the hq q heads, as in
// qkv_rope_store), and the new token's K/V are not cached yet. Each block normalises and
// rotates its group's q heads into shared memory while its first K/V tile is in flight
// (every split recomputes them: a few hundred bytes). The block of the last split also
// finishes the new token's K (norm, rotation) and V, writes them to the caches at
// slots[t] for later steps and hands them to decode_mma_segment for its first tile.
// rope.cuh's math and bf16 roundings are qkv_rope_store's, so the output and the caches
// equal the two-launch path bit for bit (gpu-check compares them). The host folds only
// where the grid fits one wave (DecodeRope in device.rs has the measurements).
template <int HD, bool RS>
__device__ __forceinline__ void decode_mma_impl(
    const bf16_t* __restrict__ q, int q_stride, bf16_t* __restrict__ k_cache,
    bf16_t* __restrict__ v_cache, const int* __restrict__ q_start,
    const int* __restrict__ kv_len, const int* __restrict__ page_start,
    const int* __restrict__ page_ids, int q_heads, int kv_heads, int page_size, float scale,
    int min_part, float* __restrict__ o_part, float* __restrict__ lse_part,
    bf16_t* __restrict__ o_direct, const int* __restrict__ seq_order, const DecodeRope& r) {
    // The folded build's (RS) q heads and new K/V row; unused, they take no memory.
    __shared__ __align__(16) bf16_t qs[16 * HD];
    __shared__ __align__(16) bf16_t new_kv[2 * HD];
    pdl_trigger();
    pdl_wait();
    // seq_order (null: the batch's order) lists the sequences longest context first.
    // Blocks start in blockIdx order, so the longest ones start first and the short
    // ones fill the last wave's gaps; in the batch's order a long sequence drawn late
    // runs on alone at the end (a ragged batch of 100 at 86% of copy against 94-96% for
    // the balanced stream-K schedule, 2026-12-05).
    // Tried and removed (2026-12-06, an H100, part 123): a sequence's blocks ordered kv
    // heads fastest, so that blocks running together read whole cache slots (2 KB at 8 x
    // 128) rather than one head of rows 2 KB apart. One sequence of 16,384 rows read at
    // 1.84 TB/s (61% of copy) either way, and the graph steps moved within ±2%.
    int split = blockIdx.x, kvh = blockIdx.y,
        b = seq_order != nullptr ? seq_order[blockIdx.z] : (int)blockIdx.z;
    int group = q_heads / kv_heads;
    int ctx = kv_len[b];
    int splits = gridDim.x;
    int part = decode_part(ctx, splits, min_part);
    int c0 = split * part;
    if (c0 >= ctx) return;
    int c1 = min(ctx, c0 + part);
    const int* pages = page_ids + page_start[b];
    int t = q_start[b + 1] - 1;
    auto store = [&](int gi, int d, float M, float L, float O) {
        decode_store(o_direct, o_part, lse_part, q_start, b, q_heads, kvh * group + gi, HD, d,
                     split, splits, M, L, O);
    };
    if constexpr (!RS) {
        decode_mma_segment<HD, false>(q, q_stride, k_cache, v_cache, pages, t, kvh, group,
                                      kv_heads, page_size, scale, c0, c1, -1, nullptr, store,
                                      [] {});
    } else {
        const bool last = c1 == ctx;
        auto prep = [&]() {
            const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
            const bf16_t* row = q + (size_t)t * q_stride;
            // Jobs: the group's q heads, then (last split) the new row's k and v.
            const int jobs = group + (last ? 2 : 0);
            for (int j = warp; j < jobs; j += 4) {
                const int head = j < group ? kvh * group + j
                                 : j == group ? q_heads + kvh
                                              : q_heads + kv_heads + kvh;
                float v[HD / 32];
                load_head<HD>(row + (size_t)head * HD, lane, v);
                const size_t dst = ((size_t)(unsigned)r.slots[t] * kv_heads + kvh) * HD;
                if (j == group + 1) {
                    store_head<HD>(v_cache + dst, lane, v);
                    store_head<HD>(new_kv + HD, lane, v);
                    continue;
                }
                const bool rotate = r.inv_freq != nullptr;
                float sn[HD / 64] = {}, cs[HD / 64] = {};
                if (rotate) rope_angles<HD>(sn, cs, lane, t, r.pos, r.inv_freq);
                norm_rope_regs<HD>(v, lane, j < group ? r.q_norm : r.k_norm, r.eps, rotate, sn,
                                   cs);
                if (j < group) {
                    store_head<HD>(qs + j * HD, lane, v);
                } else {
                    store_head<HD>(k_cache + dst, lane, v);
                    store_head<HD>(new_kv, lane, v);
                }
            }
        };
        decode_mma_segment<HD, true>(qs, 0, k_cache, v_cache, pages, 0, kvh, group, kv_heads,
                                     page_size, scale, c0, c1, last ? ctx - 1 : -1, new_kv,
                                     store, prep);
    }
}

#define DECODE_MMA(HD)                                                                         \
    extern "C" __global__ void __launch_bounds__(128, 3) attn_decode_mma_hd##HD(                 \
        const bf16_t* q, int q_stride, const bf16_t* k_cache, const bf16_t* v_cache,          \
        const int* q_start, const int* kv_len, const int* page_start, const int* page_ids,   \
        int q_heads, int kv_heads, int page_size, float scale, int min_part, float* o_part,   \
        float* lse_part, bf16_t* o_direct, const int* seq_order) {                             \
        decode_mma_impl<HD, false>(q, q_stride, const_cast<bf16_t*>(k_cache),                  \
                                   const_cast<bf16_t*>(v_cache), q_start, kv_len, page_start,  \
                                   page_ids, q_heads, kv_heads, page_size, scale, min_part,    \
                                   o_part, lse_part, o_direct, seq_order, DecodeRope{});       \
    }
DECODE_MMA(64)
DECODE_MMA(128)

#define DECODE_MMA_RS(HD)                                                                      \
    extern "C" __global__ void __launch_bounds__(128, 3) attn_decode_mma_rs_hd##HD(              \
        const bf16_t* qkv, int q_stride, bf16_t* k_cache, bf16_t* v_cache, const int* q_start,   \
        const int* kv_len, const int* page_start, const int* page_ids, int q_heads,            \
        int kv_heads, int page_size, float scale, int min_part, float* o_part,                 \
        float* lse_part, bf16_t* o_direct, const int* seq_order, const bf16_t* q_norm,        \
        const bf16_t* k_norm, const int* pos, const float* inv_freq, float eps,                \
        const int* slots) {                                                                    \
        decode_mma_impl<HD, true>(qkv, q_stride, k_cache, v_cache, q_start, kv_len, page_start, \
                                  page_ids, q_heads, kv_heads, page_size, scale, min_part,     \
                                  o_part, lse_part, o_direct, seq_order,                       \
                                  DecodeRope{q_norm, k_norm, pos, inv_freq, eps, slots});     \
    }
DECODE_MMA_RS(64)
DECODE_MMA_RS(128)

// Merge the splits: o[t, h, :] = sum_s w_s o_part[b, h, s, :] / sum_s w_s,
// w_s = 2^(lse_s - max lse). grid: (B, q_heads); block: any size, thread i takes dims
// i, i + blockDim.x, ... (the host launches one a dim, up to 128). `splits` is the grid.x
// of the decode launch. `seqs` (null: the batch's order) maps blockIdx.x to the
// sequence, as the decode launch's seq_order did: in a mixed step, only its one-token
// sequences (the host's MixedRows); the prefill kernel writes the other rows.
//
// No shared memory and no barrier: each thread reads the splits' log2-sum-exps itself
// (the same few words for the whole block, one L1 line) and merges its own dims online,
// COMBINE_CH splits at a time with every load of a chunk in flight together, so a
// sequence of at most COMBINE_CH splits waits on kv_len and then one round of loads.
// The block-reduction build it replaced (one max and one sum over the splits, five
// barriers, then the partials) was 1.3-1.7% slower per step at Qwen3-0.6B batch 8 and
// 0.7% at 32, even elsewhere (H100, 2026-12-06, gpu-2026-12-06-combine.md).
#define COMBINE_CH 8
extern "C" __global__ void attn_decode_combine(const float* __restrict__ o_part,
                                               const float* __restrict__ lse_part,
                                               const int* __restrict__ q_start,
                                               const int* __restrict__ kv_len,
                                               bf16_t* __restrict__ o, int q_heads, int hd,
                                               int splits, int min_part,
                                               const int* __restrict__ seqs) {
    pdl_trigger();
    pdl_wait();
    int b = seqs != nullptr ? seqs[blockIdx.x] : (int)blockIdx.x, h = blockIdx.y;
    int ctx = kv_len[b];
    int part = decode_part(ctx, splits, min_part);
    int n = (ctx + part - 1) / part;
    size_t bh = (size_t)b * q_heads + h;
    const float* lp = lse_part + bh * splits;
    const float* op = o_part + bh * splits * hd;
    bf16_t* out = o + ((size_t)(q_start[b + 1] - 1) * q_heads + h) * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        // Every split that holds rows has a finite log2-sum-exp, so after the first
        // chunk M is finite and exp2f(M - m) is 0 only where it should be.
        float M = NEG_INF, tot = 0.0f, acc = 0.0f;
        for (int s0 = 0; s0 < n; s0 += COMBINE_CH) {
            float l[COMBINE_CH], v[COMBINE_CH];
#pragma unroll
            for (int j = 0; j < COMBINE_CH; j++) {
                bool live = s0 + j < n;
                l[j] = live ? lp[s0 + j] : NEG_INF;
                v[j] = live ? op[(size_t)(s0 + j) * hd + d] : 0.0f;
            }
            float m = M;
#pragma unroll
            for (int j = 0; j < COMBINE_CH; j++) m = fmaxf(m, l[j]);
            float sc = exp2f(M - m);
            tot *= sc;
            acc *= sc;
#pragma unroll
            for (int j = 0; j < COMBINE_CH; j++) {
                float w = exp2f(l[j] - m);
                tot += w;
                acc += w * v[j];
            }
            M = m;
        }
        out[d] = f2bf(acc / tot);
    }
}

// Stream-K decode on the tensor-core kernel. With one block per (split, kv head,
// sequence) the grid runs in waves of (blocks per SM x SMs) and the last wave can run
// part-empty (2,048 equal blocks on 396 slots: 5.2 waves of work in 6). Here each kv
// head's work, the DM_BK-row tiles of every sequence in order, is cut into R equal
// contiguous ranges, R = gridDim.x / kv_heads (one wave); block i takes head
// i % kv_heads and range i / kv_heads, so the blocks that run together read the same
// tokens of every head (a cache slot holds all kv heads of a token side by side; the
// first version, ranges over (sequence, head) pairs, read one head of a token per
// block and ran at 71% of copy bandwidth against 79% for the split grid). A block
// walks the sequences of its range; a (sequence, head) pair inside one range is
// written out directly, a pair cut by range ends leaves normalized partials in
// per-block slots (slot 0: the block's first pair, slot 1: its last) that
// attn_decode_sk_combine merges. Everything is computed here from kv_len, so a
// recorded graph replays with any lengths.
//
// grid: (G); block: 128; dynamic smem as attn_decode_mma. o_part: [G][2][16][HD] f32,
// lse_part: [G][2][16], rec: [G][4] ints, written by block i for the cut pair that
// starts in its range: {sequence or -1, kv head, last block holding a piece, slot}.
#define SK_SCAN 128

// Tiles of sequence b (per kv head).
__device__ __forceinline__ int sk_tiles(const int* kv_len, int b) {
    return (kv_len[b] + DM_BK - 1) / DM_BK;
}
// The range [floor(k U / R), floor((k + 1) U / R)) that holds tile x.
__device__ __forceinline__ int sk_range_of(int x, int U, int R) {
    return (int)(((long long)(x + 1) * R - 1) / U);
}

template <int HD>
__device__ __forceinline__ void decode_mma_sk_impl(
    const bf16_t* __restrict__ q, int q_stride, const bf16_t* __restrict__ k_cache,
    const bf16_t* __restrict__ v_cache, const int* __restrict__ q_start,
    const int* __restrict__ kv_len, const int* __restrict__ page_start,
    const int* __restrict__ page_ids, int q_heads, int kv_heads, int page_size, float scale,
    int num_seqs, float* __restrict__ o_part, float* __restrict__ lse_part,
    int* __restrict__ rec, bf16_t* __restrict__ o) {
    __shared__ int sh_warp[4];
    __shared__ int sh_found[2];  // sequence holding the range's first tile, tiles before it
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int group = q_heads / kv_heads;
    const int blk = blockIdx.x;

    // Tiles per head U (every block computes the same).
    int mine = 0;
    for (int b = tid; b < num_seqs; b += blockDim.x) mine += sk_tiles(kv_len, b);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) mine += __shfl_xor_sync(0xffffffffu, mine, off);
    if (lane == 0) sh_warp[warp] = mine;
    __syncthreads();
    // Tiles fit an int: 2^31 tiles of 64 rows would be 137 G context rows.
    const int U = sh_warp[0] + sh_warp[1] + sh_warp[2] + sh_warp[3];
    const int R = min((int)gridDim.x / kv_heads, U);
    const int kvh = blk % kv_heads, r = blk / kv_heads;
    if (r >= R) {
        if (tid == 0) rec[4 * blk] = -1;
        return;
    }
    const int u0 = (int)((long long)r * U / R), u1 = (int)((long long)(r + 1) * U / R);

    // The sequence holding tile u0: a block-wide scan over chunks of sequences.
    if (tid == 0) sh_found[0] = -1;
    int before = 0;  // tiles in the chunks already scanned
    for (int base = 0; base < num_seqs; base += SK_SCAN) {
        __syncthreads();
        int b = base + tid;
        int n = b < num_seqs ? sk_tiles(kv_len, b) : 0;
        int incl = n;  // inclusive scan within the warp, then across the four warps
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
            int y = __shfl_up_sync(0xffffffffu, incl, off);
            if (lane >= off) incl += y;
        }
        if (lane == 31) sh_warp[warp] = incl;
        __syncthreads();
        int wbefore = 0, chunk = 0;
#pragma unroll
        for (int w = 0; w < 4; w++) {
            if (w < warp) wbefore += sh_warp[w];
            chunk += sh_warp[w];
        }
        int start = before + wbefore + incl - n;
        if (n > 0 && start <= u0 && u0 < start + n) {
            sh_found[0] = b;
            sh_found[1] = start;
        }
        __syncthreads();
        if (sh_found[0] >= 0) break;
        before += chunk;
    }
    int b = sh_found[0];
    int pair_start = sh_found[1];  // the sequence's first tile
    int ctx = kv_len[b];
    int nt = (ctx + DM_BK - 1) / DM_BK;
    int pos = u0;
    bool first = true;
    if (tid == 0) rec[4 * blk] = -1;
    while (pos < u1) {
        const int pair_end = pair_start + nt;
        const int seg_end = min(u1, pair_end);
        const int c0 = (pos - pair_start) * DM_BK;
        const int c1 = min(ctx, (seg_end - pair_start) * DM_BK);
        const bool whole = pos == pair_start && seg_end == pair_end;
        const int slot = first ? 0 : 1;
        const int t = q_start[b + 1] - 1;
        const int h0 = kvh * group;
        auto store = [&](int gi, int d, float M, float L, float O) {
            if (whole) {
                o[(size_t)t * q_heads * HD + (h0 + gi) * HD + d] = f2bf(O / L);
            } else {
                size_t rr = ((size_t)blk * 2 + slot) * 16 + gi;
                o_part[rr * HD + d] = O / L;
                if (d == 0) lse_part[rr] = M + log2f(L);
            }
        };
        decode_mma_segment<HD, false>(q, q_stride, k_cache, v_cache, page_ids + page_start[b], t,
                                      kvh, group, kv_heads, page_size, scale, c0, c1, -1, nullptr,
                                      store, [] {});
        // A cut pair that starts in this range: this block's combine merges it.
        if (!whole && pos == pair_start && tid == 0) {
            rec[4 * blk] = b;
            rec[4 * blk + 1] = kvh;
            rec[4 * blk + 2] = sk_range_of(pair_end - 1, U, R) * kv_heads + kvh;
            rec[4 * blk + 3] = slot;
        }
        first = false;
        pos = seg_end;
        if (pos >= u1) break;
        // The next sequence with work.
        do {
            pair_start += nt;
            ctx = kv_len[++b];
            nt = (ctx + DM_BK - 1) / DM_BK;
        } while (nt == 0);
        // The segment's merge read the tiles' memory that the next one loads into.
        __syncthreads();
    }
}

#define DECODE_MMA_SK(HD)                                                                      \
    extern "C" __global__ void __launch_bounds__(128, 3) attn_decode_mma_sk_hd##HD(              \
        const bf16_t* q, int q_stride, const bf16_t* k_cache, const bf16_t* v_cache,          \
        const int* q_start, const int* kv_len, const int* page_start, const int* page_ids,   \
        int q_heads, int kv_heads, int page_size, float scale, int num_seqs, float* o_part,   \
        float* lse_part, int* rec, bf16_t* o) {                                               \
        decode_mma_sk_impl<HD>(q, q_stride, k_cache, v_cache, q_start, kv_len, page_start,     \
                               page_ids, q_heads, kv_heads, page_size, scale, num_seqs,        \
                               o_part, lse_part, rec, o);                                      \
    }
DECODE_MMA_SK(64)
DECODE_MMA_SK(128)

// Merges the pieces of the pair cut by stream-K ranges that block blockIdx.x's range
// starts: its piece is in its own slot rec[3], the others in slot 0 of the blocks of
// the same head (every kv_heads-th) up to block rec[2]. grid: (G of the decode
// launch); block: 128.
extern "C" __global__ void attn_decode_sk_combine(const float* __restrict__ o_part,
                                                  const float* __restrict__ lse_part,
                                                  const int* __restrict__ rec,
                                                  const int* __restrict__ q_start,
                                                  bf16_t* __restrict__ o, int q_heads,
                                                  int kv_heads, int hd) {
    const int i = blockIdx.x;
    const int b = rec[4 * i];
    if (b < 0) return;
    const int kvh = rec[4 * i + 1], last = rec[4 * i + 2], slot0 = rec[4 * i + 3];
    const int group = q_heads / kv_heads;
    const int nh = min(group, 16);
    const int t = q_start[b + 1] - 1;
    for (int idx = threadIdx.x; idx < nh * hd; idx += blockDim.x) {
        const int gi = idx / hd, d = idx % hd;
        float M = NEG_INF;
        for (int k = i; k <= last; k += kv_heads) {
            size_t r = ((size_t)k * 2 + (k == i ? slot0 : 0)) * 16 + gi;
            M = fmaxf(M, lse_part[r]);
        }
        float W = 0.0f, acc = 0.0f;
        for (int k = i; k <= last; k += kv_heads) {
            size_t r = ((size_t)k * 2 + (k == i ? slot0 : 0)) * 16 + gi;
            float w = exp2f(lse_part[r] - M);
            W += w;
            acc += w * o_part[r * hd + d];
        }
        o[(size_t)t * q_heads * hd + (kvh * group + gi) * hd + d] = f2bf(acc / W);
    }
}
