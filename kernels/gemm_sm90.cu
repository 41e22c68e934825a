// Decode-batch GEMM on Hopper: y[m, n] = x[m, k] · W[n, k]ᵀ (bf16 in, f32 accumulate,
// bf16 out) for the batches past the skinny kernel (gemv.cu, up to 64 rows), and the
// same with SiLU·mul in the epilogue for a gate_up weight ([2n, k]: y[m, n] =
// silu(x·Wgᵀ) · (x·Wuᵀ), rounded as the product then silu_mul would round).
//
// Why not cuBLAS: at Qwen3-0.6B batch 256 its four products take 31.9 µs a layer against
// 12 µs of FLOPs at the held rate, in grids of 96-128 tiles under one wave, and gate_up
// needs a silu_mul launch after it (docs/results/gpu-2026-12-04-fold.md). A stream-K
// build of 2026-12-02 lost to cuBLAS: one warpgroup both fed and multiplied, and tiles
// shared by CTAs were summed in the middle of their runs, so the pipeline drained
// (docs/results/gpu-2026-12-02-skgemm.md). This one keeps the two apart:
//
// - A tile is 128 rows (x) by BN weight rows (64 or 128); grid (tiles over n, tiles of
//   128 over m, splits of k). A CTA is a producer warpgroup (one thread issues the copy
//   engine's boxes into TG_STAGES stages) and two consumer warpgroups, each multiplying
//   its 64 rows of x by the stage's weight box on wgmma (m64nBNk16, both operands
//   K-major in shared memory, 128-byte swizzle). Boxes past the matrices are
//   zero-filled, so m, n and k need no padding (k a multiple of 8: the map's stride).
// - Splits of k are the CTAs of one cluster (its z dimension, up to 8). Each runs its
//   own equal share of k with no exchange until all its stages are done; then each
//   leaves its partial tile in its own shared memory, and CTA r of the cluster sums
//   column groups [r·Q/S, (r+1)·Q/S) of every partial (the _rope builds: rows, so that
//   a head's columns meet), in cluster rank order, and stores them. So the sum is the
//   same whatever order the CTAs finish in, and no workspace, atomic or second launch is
//   needed.
// - The _rope builds (BN = head_dim) end with qkv_rope_store's work (rope.cu) on their
//   tile, one head of every row: each row's head goes, rounded to bf16 as the product
//   would be stored, into shared memory, and a warp a row runs rope.cuh's code on it,
//   so q, the cached K and V equal the product then qkv_rope_store bit for bit. That
//   launch (2.9-4.7 µs a layer at Qwen3-0.6B) is gone from the step.
//
// Launch: grid (ceil(rows of W / BN), ceil(m / 128), S), 384 threads, TG_SMEM(BN) dynamic
// shared memory, cluster (1, 1, S) when S > 1. Args: x map (dims {k, m}, box {64, 128});
// W map (dims {k, rows of W}, box {64, BN}, or {64, BN / 2} for the SiLU builds); y
// (bf16 [m, n]); bias (bf16 [n], added before the rounding as cuBLAS adds a broadcast
// C; null: none; the SiLU builds take none); m; n (output columns: rows of W, or half
// of them for SiLU); k; and for the _rope builds qkv_rope_store's q_heads, kv_heads,
// q_norm, k_norm, pos, inv_freq, eps, slots, k_cache, v_cache (y is its qkv).
#include "common.cuh"
#include "hopper.cuh"
#include "rope.cuh"

#define TG_BM 128  // x rows a tile: two consumer warpgroups of 64
#define TG_BK 64   // k a stage: 128 bytes of bf16, the swizzle's row
#define TG_STAGES 6
#define TG_THREADS 384
#define TG_A_BYTES (TG_BM * TG_BK * 2)
#define TG_B_BYTES(BN) ((BN) * TG_BK * 2)
#define TG_STAGE_BYTES(BN) (TG_A_BYTES + TG_B_BYTES(BN))
#define TG_SMEM(BN) (TG_STAGES * TG_STAGE_BYTES(BN) + 1024)
// Floats a consumer thread's partial takes in the split-k exchange: its BN / 2
// accumulators and 4 of padding, so that eight threads' 16-byte stores and loads fall
// in distinct banks.
#define TG_PART_STRIDE(BN) ((BN) / 2 + 4)
#define TG_PART_BYTES(BN) (256 * TG_PART_STRIDE(BN) * 4)
// The _rope builds' bf16 tile of heads, after the partials: 128 rows of BN + 8 (the
// padding puts a warp's stores of eight rows in distinct banks).
#define TG_HEAD_STRIDE(BN) ((BN) + 8)

#define TG_PLAIN 0
#define TG_SILU 1
#define TG_ROPE 2

// qkv_rope_store's arguments (rope.cu) less the qkv rows, which are y.
struct TgRope {
    int hq, hkv;
    RopeStoreArgs r;
    bf16_t* k_cache;
    bf16_t* v_cache;
};
// A wait of the producer past this traps, so that a deadlock fails the launch with an
// error instead of hanging the process with the GPU busy. The producer waits for every
// stage it loads (after the last, for the boxes still in flight), so a box that never
// lands or a stage never released reaches one of its waits.
#ifndef TG_WAIT_NS
#define TG_WAIT_NS 2000000000ull
#endif

__device__ __forceinline__ void tg_wait_watched(u32 bar, u32 parity) {
    if (mbar_try(bar, parity)) return;
    const u64 t0 = global_ns();
    while (!mbar_try(bar, parity))
        if (global_ns() - t0 > TG_WAIT_NS) asm volatile("trap;\n");
}

__device__ __forceinline__ void tg_store2(bf16_t* __restrict__ y, int m, int n, int r, int col, float a,
                                          float b) {
    if (r >= m || col >= n) return;
    bf16_t* o = y + (size_t)r * n + col;
    if (col + 1 < n && (n & 1) == 0) {
        *reinterpret_cast<u32*>(o) = pack_bf16x2(a, b);
    } else {
        o[0] = f2bf(a);
        if (col + 1 < n) o[1] = f2bf(b);
    }
}

// Stores column group q of a consumer thread's tile: v[e] is register 4q + e of the
// wgmma m64nBN accumulators, i.e. row 16 warp + lane / 4 (+ 8 for e >= 2) of the
// warpgroup's 64, column 8q + 2 (lane % 4) + (e & 1) of the tile. For SiLU, u[e] is the
// matching up value (register 4 (q + BN / 16) + e: the up rows are the box's second half).
template <bool SILU>
__device__ __forceinline__ void tg_store_group(bf16_t* __restrict__ y, const bf16_t* __restrict__ bias, int m,
                                               int n, int row0, int col0, int q, const float (&v)[4],
                                               const float (&u)[4]) {
    const int col = col0 + 8 * q;
    float b[2] = {0.f, 0.f};
    if (!SILU && bias != nullptr) {
        if (col < n) b[0] = bf2f(bias[col]);
        if (col + 1 < n) b[1] = bf2f(bias[col + 1]);
    }
    float o[4];
#pragma unroll
    for (int e = 0; e < 4; e++) o[e] = SILU ? silu(bf2f(f2bf(v[e]))) * bf2f(f2bf(u[e])) : v[e] + b[e & 1];
    tg_store2(y, m, n, row0, col, o[0], o[1]);
    tg_store2(y, m, n, row0 + 8, col, o[2], o[3]);
}

// qkv_rope_store_impl (rope.cu) for head `head` of rows [r0, r1) of the tile, a warp a
// row (w: this warp of the CTA's twelve): the same loads, math and stores, from the
// bf16 tile in shared memory instead of the qkv row. k and v also go to y raw, as the
// product leaves them for qkv_rope_store.
template <int HD>
__device__ __forceinline__ void tg_rope_rows(const bf16_t* heads, int r0, int r1, int w, int lane, int row_base,
                                             int head, bf16_t* __restrict__ y, int m, int n, const TgRope& a) {
    constexpr int PER = HD / 32;
    constexpr int WARPS = TG_THREADS / 32;
    const bool rotate = a.r.inv_freq != nullptr && head < a.hq + a.hkv;
    // Rows are independent: two at a time, so that one row's loads, sincosf and
    // shuffles may overlap the other's (a warp has 3-11 rows here, one after another).
#pragma unroll 2
    for (int r = r0 + w; r < r1; r += WARPS) {
        const int t = row_base + r;
        if (t >= m) continue;
        float v[PER];
        load_head<HD>(heads + r * TG_HEAD_STRIDE(HD), lane, v);
        bf16_t* row = y + (size_t)t * n;
        if (head >= a.hq) store_head<HD>(row + (size_t)head * HD, lane, v);
        const size_t slot = head >= a.hq ? (size_t)(unsigned)a.r.slots[t] : 0;
        if (head >= a.hq + a.hkv) {
            store_head<HD>(a.v_cache + (slot * a.hkv + (head - a.hq - a.hkv)) * HD, lane, v);
            continue;
        }
        const bool is_q = head < a.hq;
        float sn[HD / 64], cs[HD / 64];
        if (rotate) rope_angles<HD>(sn, cs, lane, t, a.r.pos, a.r.inv_freq);
        norm_rope_regs<HD>(v, lane, is_q ? a.r.q_norm : a.r.k_norm, a.r.eps, rotate, sn, cs);
        bf16_t* dst = is_q ? row + (size_t)head * HD : a.k_cache + (slot * a.hkv + (head - a.hq)) * HD;
        store_head<HD>(dst, lane, v);
    }
}

// Column group q of a consumer thread's values into the _rope builds' tile, rounded as
// tg_store2 rounds them (bias added first); rl is the thread's first row in the tile.
__device__ __forceinline__ void tg_tile_group(bf16_t* heads, int stride, const bf16_t* __restrict__ bias, int rl,
                                              int cl, int col, int q, const float (&v)[4]) {
    float b[2] = {0.f, 0.f};
    if (bias != nullptr) b[0] = bf2f(bias[col + 8 * q]), b[1] = bf2f(bias[col + 8 * q + 1]);
    u32* p0 = reinterpret_cast<u32*>(heads + rl * stride + cl + 8 * q);
    u32* p1 = reinterpret_cast<u32*>(heads + (rl + 8) * stride + cl + 8 * q);
    *p0 = pack_bf16x2(v[0] + b[0], v[1] + b[1]);
    *p1 = pack_bf16x2(v[2] + b[0], v[3] + b[1]);
}

template <int BN>
__device__ __forceinline__ void tg_wgmma(float* acc, u64 da, u64 db) {
    if constexpr (BN == 64) {
        wgmma_ss_n64(acc, da, db, 1);
    } else {
        wgmma_ss_n128(acc, da, db, 1);
    }
}

template <int BN, int EPI>
__device__ __forceinline__ void gemm_tc_impl(const TmaDesc* xm, const TmaDesc* wm, bf16_t* __restrict__ y,
                                             const bf16_t* __restrict__ bias, int m, int n, int k,
                                             const TgRope& rope) {
    static_assert(BN == 64 || BN == 128, "wgmma builds for BN 64 and 128");
    constexpr bool SILU = EPI == TG_SILU;
    constexpr int ST = TG_STAGES;
    constexpr int SB = TG_STAGE_BYTES(BN);
    constexpr int NR = BN / 2;              // accumulators a consumer thread
    constexpr int TN = SILU ? BN / 2 : BN;  // output columns a tile
    constexpr int Q = TN / 8;               // column groups a consumer thread stores
    extern __shared__ __align__(1024) unsigned char tg_smem[];
    __shared__ __align__(8) u64 full[ST];
    __shared__ __align__(8) u64 empty[ST];
    const u32 base = (smem_u32(tg_smem) + 1023) & ~1023u;
    const u32 full0 = smem_u32(&full[0]), empty0 = smem_u32(&empty[0]);
    const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
    const int tile = blockIdx.x, mt = blockIdx.y;
    const int split = cluster_rank(), splits = cluster_size();
    const int kb = (k + TG_BK - 1) / TG_BK;
    const int kb0 = kb * split / splits, nk = kb * (split + 1) / splits - kb0;

    if (tid == 0) {
        // The maps are read by the copy engine at the first box: fetch them now, under
        // the barriers' set-up.
        asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<u64>(xm)) : "memory");
        asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<u64>(wm)) : "memory");
        for (int s = 0; s < ST; s++) {
            mbar_init(full0 + 8 * s, 1);
            mbar_init(empty0 + 8 * s, 8);  // one arrival a consumer warp
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    float acc[NR];
#pragma unroll
    for (int j = 0; j < NR; j++) acc[j] = 0.f;
    if (wg == 0) {
        if (tid == 0) {
            for (int i = 0; i < nk; i++) {
                const int s = i % ST;
                // Use i - ST of this stage released by all eight consumer warps.
                if (i >= ST) tg_wait_watched(empty0 + 8 * s, ((i / ST) - 1) & 1);
                const u32 dst = base + s * SB, bar = full0 + 8 * s;
                const int kx = (kb0 + i) * TG_BK;
                mbar_arrive_expect_tx(bar, SB);
                tma_load_2d(dst, xm, kx, mt * TG_BM, bar);
                if (SILU) {
                    tma_load_2d(dst + TG_A_BYTES, wm, kx, tile * TN, bar);                // gate rows
                    tma_load_2d(dst + TG_A_BYTES + TN * 128, wm, kx, n + tile * TN, bar);  // up rows
                } else {
                    tma_load_2d(dst + TG_A_BYTES, wm, kx, tile * BN, bar);
                }
            }
            // The boxes still in flight: every one must land.
            for (int i = nk > ST ? nk - ST : 0; i < nk; i++) tg_wait_watched(full0 + 8 * (i % ST), (i / ST) & 1);
        }
    } else {
        const int cw = wg - 1;
        for (int i = 0; i < nk; i++) {
            const int s = i % ST;
            mbar_wait(full0 + 8 * s, (i / ST) & 1);
            const u32 a_s = base + s * SB + cw * 64 * 128, b_s = base + s * SB + TG_A_BYTES;
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < TG_BK / 16; kk++)
                tg_wgmma<BN>(acc, desc_sw128(a_s + kk * 32, 16, 1024), desc_sw128(b_s + kk * 32, 16, 1024));
            wgmma_commit();
            // This warp's products of the stage before are done: release it.
            wgmma_wait<1>();
            if (i > 0) mbar_arrive_if(empty0 + 8 * ((i - 1) % ST), lane == 0);
        }
        wgmma_wait<0>();
        fence_regs(acc);
    }

    // Consumer warp 0-7 (warpgroup-major) and its rows: 16 cw + lane / 4 (+ 8) of the tile.
    const int cw = (wg - 1) * 4 + warp;
    const int rl = cw * 16 + (lane >> 2);
    const int row0 = mt * TG_BM + rl;
    const int col0 = tile * TN + 2 * (lane & 3);
    // The _rope builds' tile of heads, past the partials (both in the stages, free now).
    bf16_t* heads = reinterpret_cast<bf16_t*>(tg_smem + (base - smem_u32(tg_smem)) + TG_PART_BYTES(BN));
    if (splits == 1) {
        if constexpr (EPI == TG_ROPE) {
            // The producer's warps take rows too: all twelve wait for the tile.
            __syncthreads();  // both consumer warpgroups past their last reads of the stages
            if (wg > 0) {
#pragma unroll
                for (int q = 0; q < Q; q++) {
                    const float v[4] = {acc[4 * q], acc[4 * q + 1], acc[4 * q + 2], acc[4 * q + 3]};
                    tg_tile_group(heads, TG_HEAD_STRIDE(BN), bias, rl, 2 * (lane & 3), col0, q, v);
                }
            }
            __syncthreads();
            tg_rope_rows<BN>(heads, 0, TG_BM, tid >> 5, lane, mt * TG_BM, tile, y, m, n, rope);
        } else {
            if (wg == 0) return;
#pragma unroll
            for (int q = 0; q < Q; q++) {
                float v[4], u[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    v[e] = acc[4 * q + e];
                    if constexpr (SILU) u[e] = acc[4 * (q + Q) + e];
                }
                tg_store_group<SILU>(y, bias, m, n, row0, col0, q, v, u);
            }
        }
        return;
    }

    // Split k: every consumer thread's partial into this CTA's stages (both consumer
    // warpgroups are past their last reads of them first), then the cluster's sum.
    const int ct = tid - 128;
    const u32 part = base + (u32)(ct * TG_PART_STRIDE(BN)) * 4;
    if (wg > 0) {
        named_sync(1, 256);
#pragma unroll
        for (int j = 0; j < NR; j += 4)
            asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(part + 4 * j), "f"(acc[j]),
                         "f"(acc[j + 1]), "f"(acc[j + 2]), "f"(acc[j + 3])
                         : "memory");
    }
    cluster_sync();
    if constexpr (EPI == TG_ROPE) {
        // By rows: CTA `split` sums every column of the rows of consumer warps
        // [8 split / S, 8 (split + 1) / S) (a head's columns must meet in one CTA),
        // then its warps run the heads of those rows.
        const int w0 = 8 * split / splits, w1 = 8 * (split + 1) / splits;
        if (wg > 0 && cw >= w0 && cw < w1) {
            for (int q = 0; q < Q; q++) {
                float v[4] = {0.f, 0.f, 0.f, 0.f};
                for (int p = 0; p < splits; p++) {
                    const float4 a = ld_cluster_f4(part + 16 * q, p);
                    v[0] += a.x, v[1] += a.y, v[2] += a.z, v[3] += a.w;
                }
                tg_tile_group(heads, TG_HEAD_STRIDE(BN), bias, rl, 2 * (lane & 3), col0, q, v);
            }
        }
        __syncthreads();
        tg_rope_rows<BN>(heads, 16 * w0, 16 * w1, tid >> 5, lane, mt * TG_BM, tile, y, m, n, rope);
    } else if (wg > 0) {
        const int q0 = Q * split / splits, q1 = Q * (split + 1) / splits;
        for (int q = q0; q < q1; q++) {
            float v[4] = {0.f, 0.f, 0.f, 0.f}, u[4] = {0.f, 0.f, 0.f, 0.f};
            for (int p = 0; p < splits; p++) {
                const float4 a = ld_cluster_f4(part + 16 * q, p);
                v[0] += a.x, v[1] += a.y, v[2] += a.z, v[3] += a.w;
                if (SILU) {
                    const float4 b = ld_cluster_f4(part + 16 * (q + Q), p);
                    u[0] += b.x, u[1] += b.y, u[2] += b.z, u[3] += b.w;
                }
            }
            tg_store_group<SILU>(y, bias, m, n, row0, col0, q, v, u);
        }
    }
    // No CTA leaves while another may still read its partial.
    cluster_sync();
}

// gemm_tc_bnN: weight tiles of N rows; gemm_tc_silu_bnN: SiLU·mul of a gate_up product
// (N / 2 gate and N / 2 up rows a tile).
#define GEMM_TC(NAME, BN, EPI)                                                                              \
    extern "C" __global__ void __launch_bounds__(TG_THREADS, 1)                                           \
        NAME(const __grid_constant__ TmaDesc xm, const __grid_constant__ TmaDesc wm, bf16_t* y,             \
             const bf16_t* bias, int m, int n, int k) {                                                   \
        gemm_tc_impl<BN, EPI>(&xm, &wm, y, bias, m, n, k, TgRope{});                                      \
    }
GEMM_TC(gemm_tc_bn64, 64, TG_PLAIN)
GEMM_TC(gemm_tc_bn128, 128, TG_PLAIN)
GEMM_TC(gemm_tc_silu_bn64, 64, TG_SILU)
GEMM_TC(gemm_tc_silu_bn128, 128, TG_SILU)

// gemm_tc_rope_hdN: the qkv product of heads of N, then qkv_rope_store's work.
#define GEMM_TC_ROPE(NAME, HD)                                                                              \
    extern "C" __global__ void __launch_bounds__(TG_THREADS, 1)                                           \
        NAME(const __grid_constant__ TmaDesc xm, const __grid_constant__ TmaDesc wm, bf16_t* y,             \
             const bf16_t* bias, int m, int n, int k, int hq, int hkv, const bf16_t* q_norm,               \
             const bf16_t* k_norm, const int* pos, const float* inv_freq, float eps, const int* slots,     \
             bf16_t* k_cache, bf16_t* v_cache) {                                                          \
        const TgRope rope{hq, hkv, {q_norm, k_norm, pos, inv_freq, eps, slots}, k_cache, v_cache};           \
        gemm_tc_impl<HD, TG_ROPE>(&xm, &wm, y, bias, m, n, k, rope);                                      \
    }
GEMM_TC_ROPE(gemm_tc_rope_hd64, 64)
GEMM_TC_ROPE(gemm_tc_rope_hd128, 128)
