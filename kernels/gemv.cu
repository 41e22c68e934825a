// Skinny matrix products for decode: y = x · Wᵀ (+ bias) with few rows of x, and the
// same product with the op that follows it in a decoder layer done in its epilogue.
//
// At a handful of rows a linear layer is a pure weight read (one 2-byte weight per
// 2 FLOPs per row); cuBLAS's tiled kernels spend most of that time on tiles that are
// almost all padding. Here a warp streams one weight row (an output column) with
// 16-byte loads, coalesced and read once, multiplies it by every row of x (small,
// served from L1/L2) and reduces in f32.
//
// What sets the speed at one row is memory-level parallelism, not bandwidth: the
// first version issued one 16-byte load per lane, waited for it, then issued the
// next, so an n = 1024 product (128 blocks, one per SM) ran at a fifth of the copy
// rate, one DRAM latency per 512 bytes a warp (Nsight Compute, 2026-12-01: 7.5 µs for
// 4-6 MB). Now every lane issues GEMV_LOADS loads before it uses any, and narrow
// products split each column's reduction over up to 8 warps (`ksplit`, chosen by the
// host from the SM count), so the whole weight is in flight at once.
//
// Epilogues (one launch instead of two in a decode layer):
//   gemv_bf16 / gemv_f32: y = x·Wᵀ + bias, bf16 or f32 (the LM head's logits);
//   gemv_silu:  W is a fused [gate; up] of 2·n rows, y[:, j] = silu(gate_j) · up_j,
//               rounded as linear then silu_mul would round;
//   gemv_residual: residual += bf16(x·Wᵀ + bias) in place (each element by the warp
//               that computes it), with no norm after it (linear_add);
// and a prologue:
//   gemv_norm_bf16 / gemv_norm_silu: x is the un-normed residual; every block first
//               RMS-normalises its rows into shared memory (rms_norm then linear, or
//               then linear_silu_mul). The prologue was meant to hide under the first
//               weight loads, but costs 1.6-2.5 µs a product at one row (2026-12-02;
//               gemv_dot says why).
// A residual epilogue that also normalised (the last block to finish, counted on a
// ticket, normalised the updated rows) was removed on 2026-12-04: it waited for the
// slowest block and then ran a chain of L2 round trips, and cost more than a separate
// add_rmsnorm launch at both sizes measured (Nsight Compute, one row: 8.42 against
// 5.23 + ~2.6 µs for Qwen3-0.6B's down, 16.81 against 12.70 + ~2.7 for
// Llama-3.1-8B's o).
#include "common.cuh"

#define GEMV_MAX_ROWS 8
#define GEMV_WARPS 8
// 16-byte weight loads a lane has in flight per weight row it streams.
#define GEMV_LOADS 4

#define EPI_BF16 0
#define EPI_F32 1
#define EPI_SILU 2
#define EPI_RESIDUAL 3

// Read-only, no L1 allocation: a weight is read once.
__device__ __forceinline__ u32x4 ld_stream(const u32x4* p) {
    u32x4 v;
    asm("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

// The norm prologue in two halves. gemv_norm_issue copies rows 0..m-1 of x ([m, k],
// the residual the previous kernel wrote) and the norm weight ([k], if not folded) into
// this block's dynamic shared memory ((m + 1) * k bf16, or m * k) with cp.async;
// gemv_norm_finish waits for
// them, RMS-normalises the rows in place and returns them. The copies are issued
// before the block's weight stream: behind it they would queue for DRAM, and the
// first build, which loaded x after the weights and the norm weight after the sum,
// cost 1.7-2.9 µs a product instead of a fraction of one (Nsight Compute, 2026-12-02).
// Every thread of the block calls both. Rounds as add_rmsnorm_row with no delta does
// at the same block size: thread i sums vectors i, i + blockDim, ... in that order,
// and writes bf16(x * inv * w) with the same expression.
__device__ __forceinline__ void gemv_norm_issue(const bf16_t* __restrict__ x,
                                                const bf16_t* __restrict__ norm, int m,
                                                int kc) {
    extern __shared__ u32x4 gemv_xs[];
    const u32x4* x4 = reinterpret_cast<const u32x4*>(x);
    const u32x4* w4 = reinterpret_cast<const u32x4*>(norm);
    int rows = norm != nullptr ? m + 1 : m;
    for (int i = threadIdx.x; i < rows * kc; i += blockDim.x) {
        const u32x4* src = i < m * kc ? x4 + i : w4 + (i - m * kc);
        cp_async16(smem_u32(gemv_xs + i), src, true);
    }
    cp_async_commit();
}

// RMS-normalises `row` ([kc] vectors of 8 bf16) in place with the norm weight `w4`: this
// thread's share is vectors i0, i0 + step, ...; `sum` adds up the partial sums of
// every thread that shares the row. Each thread rewrites only the vectors it summed, so
// the reduction's ordering (barriers or shuffles) already put every read of the row
// before these writes.
// With no norm weight (`w4` null: a unit norm whose weight is folded into the product's,
// Fold::UnitNorm on the host) the row stays as it is and its factor goes to `scale`, which
// the epilogue applies to the f32 product: normalising here would round x · inv to bf16
// on top of the folded weight's own rounding, two roundings where the unfolded path has
// one (docs/results/gpu-2026-12-07-fold3.md §1, item 2). Otherwise `scale` is 1.
template <typename Sum>
__device__ __forceinline__ void gemv_norm_row(u32x4* row, const u32x4* w4, int kc, int i0,
                                              int step, float eps, float* scale, Sum sum) {
    float inv = rsqrtf(sum(sumsq_bf16x8(row, i0, kc, step)) / (float)(kc * 8) + eps);
    if (i0 == 0) *scale = w4 != nullptr ? 1.0f : inv;
    if (w4 == nullptr) return;
    for (int i = i0; i < kc; i += step) {
        u32x4 v = row[i], g = w4[i];
        u32 w[4] = {v.x, v.y, v.z, v.w}, gw[4] = {g.x, g.y, g.z, g.w}, o[4];
#pragma unroll
        for (int j = 0; j < 4; j++)
            o[j] = pack_bf16x2(bf_lo(w[j]) * inv * bf_lo(gw[j]), bf_hi(w[j]) * inv * bf_hi(gw[j]));
        row[i] = u32x4{o[0], o[1], o[2], o[3]};
    }
}

__device__ __forceinline__ const u32x4* gemv_norm_finish(int m, int kc, float eps,
                                                         bool unit, float* scale) {
    extern __shared__ u32x4 gemv_xs[];
    __shared__ float scratch[32];
    const u32x4* w4 = unit ? nullptr : gemv_xs + (size_t)m * kc;
    int nt = blockDim.x;
    cp_async_wait<0>();
    __syncthreads();
    if (m > 1) {
        // A warp a row, summed with shuffles only: the block-wide order below costs a
        // block reduction (two barriers) a row in series, which at eight rows made the
        // prologue slower than the separate norm it replaces (2026-12-02, the batch-8
        // step 1.660 against 1.446 ms). Rounds like rms_norm up to the sum's order.
        int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
        for (int r = warp; r < m; r += nt >> 5)
            gemv_norm_row(gemv_xs + (size_t)r * kc, w4, kc, lane, 32, eps, scale + r,
                          [](float v) { return warp_sum(v); });
    } else {
        gemv_norm_row(gemv_xs, w4, kc, threadIdx.x, nt, eps, scale,
                      [&](float v) { return block_sum(v, scratch); });
    }
    __syncthreads();
    return gemv_xs;
}

// One round of a lane's weight loads: U chunks of 8 from each of the NW rows, 32 apart.
template <int NW, int U>
__device__ __forceinline__ void gemv_issue(const u32x4* const (&wr)[NW], u32x4 (&wv)[NW][U],
                                           int base, int c1) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        int i = base + u * 32;
        if (i < c1) {
#pragma unroll
            for (int j = 0; j < NW; j++) wv[j][u] = ld_stream(wr[j] + i);
        }
    }
}

// This lane's share of the dot products of rows 0..m-1 of x ([m, k]) with the NW weight
// rows `wr` over 8-element chunks [c0, c1): acc[j][r] += x[r] · w_j. MR is the row count
// the code is unrolled for (m <= MR). Every thread of the block calls it (c0 = c1 for a
// warp without a column): with NORM, x is the un-normed residual and the block
// normalises it (gemv_norm_issue / gemv_norm_finish) with the first round of weights
// issued in between. In the 40-register _m1 builds ptxas schedules the last load of
// that round below the copies' wait (SASS, 2026-12-02), so it does not overlap the
// prologue; volatile loads moved all four below it, and an L2 prefetch in their place
// was slower still.
template <int MR, int NW, bool NORM>
__device__ __forceinline__ void gemv_dot(const u32x4* const (&wr)[NW],
                                         const bf16_t* __restrict__ x, int m, int kc, int c0,
                                         int c1, int lane, float (&acc)[NW][MR],
                                         const bf16_t* __restrict__ norm, float eps,
                                         float* scale) {
    constexpr int U = GEMV_LOADS / NW;
    u32x4 wv[NW][U];
    int first = c0 + lane;
    if (NORM) {
        // x comes from the previous kernel: its copies wait for it, and go first.
        pdl_wait();
        gemv_norm_issue(x, norm, m, kc);
    }
    gemv_issue<NW, U>(wr, wv, first, c1);
    // Under PDL the first weights are in flight before the previous kernel ends.
    if (!NORM) pdl_wait();
    const u32x4* x4 = NORM ? gemv_norm_finish(m, kc, eps, norm == nullptr, scale)
                           : reinterpret_cast<const u32x4*>(x);
    for (int base = first; base < c1; base += 32 * U) {
        if (base != first) gemv_issue<NW, U>(wr, wv, base, c1);
#pragma unroll
        for (int u = 0; u < U; u++) {
            int i = base + u * 32;
            if (i >= c1) continue;
#pragma unroll
            for (int r = 0; r < MR; r++) {
                if (r >= m) continue;
                u32x4 xv = x4[(size_t)r * kc + i];
                float xf[8] = {bf_lo(xv.x), bf_hi(xv.x), bf_lo(xv.y), bf_hi(xv.y),
                               bf_lo(xv.z), bf_hi(xv.z), bf_lo(xv.w), bf_hi(xv.w)};
#pragma unroll
                for (int j = 0; j < NW; j++) acc[j][r] += dot8(wv[j][u], xf);
            }
        }
    }
}

// Sums over the warp and then over the `ksplit` warps of a column (shared memory);
// afterwards lane 0 of the column's first warp holds the totals. Every thread of the
// block must call it (it synchronises when ksplit > 1).
template <int MR, int NW>
__device__ __forceinline__ void gemv_reduce(float (&acc)[NW][MR], int ksplit) {
    __shared__ float part[GEMV_WARPS][NW][MR];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int j = 0; j < NW; j++)
#pragma unroll
        for (int r = 0; r < MR; r++) acc[j][r] = warp_sum(acc[j][r]);
    if (ksplit == 1) return;
    if (lane == 0) {
#pragma unroll
        for (int j = 0; j < NW; j++)
#pragma unroll
            for (int r = 0; r < MR; r++) part[warp][j][r] = acc[j][r];
    }
    __syncthreads();
    if (warp % ksplit == 0 && lane == 0) {
        for (int s = 1; s < ksplit; s++)
#pragma unroll
            for (int j = 0; j < NW; j++)
#pragma unroll
                for (int r = 0; r < MR; r++) acc[j][r] += part[warp + s][j][r];
    }
}

// One launch: grid ceil(n / (GEMV_WARPS / ksplit)), block GEMV_WARPS * 32 threads; warp w
// of a block takes column blockIdx.x * (GEMV_WARPS / ksplit) + w / ksplit and part
// w % ksplit of its k chunks. n: output columns (for EPI_SILU, of the activation: W has
// 2n rows). k a multiple of 8. NORM: x is normalised with `norm` first (dynamic shared
// memory (m + 1) * k * 2 bytes), or with `norm` null its rows' factors scale the
// product (m * k * 2 bytes).
// One output element of either build: `a` the product (for EPI_SILU the gate), `u` the
// up product (EPI_SILU only), `b` the bias; `at` its index in y (for EPI_RESIDUAL, the
// residual stream, added to in place).
template <int EPI>
__device__ __forceinline__ void gemv_store(void* __restrict__ y, size_t at, float a, float u,
                                           float b) {
    if (EPI == EPI_F32) {
        reinterpret_cast<float*>(y)[at] = a + b;
    } else if (EPI == EPI_SILU) {
        float gt = bf2f(f2bf(a)), up = bf2f(f2bf(u));
        reinterpret_cast<bf16_t*>(y)[at] = f2bf(silu(gt) * up);
    } else if (EPI == EPI_RESIDUAL) {
        bf16_t* res = reinterpret_cast<bf16_t*>(y);
        float o = bf2f(f2bf(a + b));
        res[at] = f2bf(bf2f(ld_cg_bf16(res + at)) + o);
    } else {
        reinterpret_cast<bf16_t*>(y)[at] = f2bf(a + b);
    }
}

template <int MR, int EPI, bool NORM>
__device__ __forceinline__ void gemv_body_simt(const bf16_t* __restrict__ x,
                                               const bf16_t* __restrict__ w,
                                               const bf16_t* __restrict__ bias,
                                               void* __restrict__ y, int m, int n, int k,
                                               int y_stride, int ksplit,
                                               const bf16_t* __restrict__ norm, float eps) {
    constexpr int NW = EPI == EPI_SILU ? 2 : 1;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int col = blockIdx.x * (GEMV_WARPS / ksplit) + warp / ksplit;
    int kc = k / 8;
    int per = (kc + ksplit - 1) / ksplit;
    bool live = col < n;
    // A warp past the last column loads nothing but still takes part in the prologue.
    int c0 = live ? (warp % ksplit) * per : 0;
    int c1 = live ? min(kc, c0 + per) : 0;
    pdl_trigger();
    float acc[NW][MR];
#pragma unroll
    for (int j = 0; j < NW; j++)
#pragma unroll
        for (int r = 0; r < MR; r++) acc[j][r] = 0.0f;
    const u32x4* wr[NW];
#pragma unroll
    for (int j = 0; j < NW; j++)
        wr[j] = reinterpret_cast<const u32x4*>(w + ((size_t)(live ? col : 0) + (size_t)j * n) * k);
    // Each row's factor from the norm prologue (1 unless the norm is folded).
    __shared__ float row_scale[MR];
    gemv_dot<MR, NW, NORM>(wr, x, m, kc, c0, c1, lane, acc, norm, eps, row_scale);
    gemv_reduce<MR, NW>(acc, ksplit);
    if (!live || warp % ksplit != 0 || lane != 0) return;
    float b = bias != nullptr ? bf2f(bias[col]) : 0.0f;
#pragma unroll
    for (int r = 0; r < MR; r++) {
        if (r >= m) continue;
        float sc = NORM ? row_scale[r] : 1.0f;
        gemv_store<EPI>(y, (size_t)r * y_stride + col, acc[0][r] * sc, acc[NW - 1][r] * sc, b);
    }
}

// The tensor-core builds (`<name>_tc`, 2 to 16 rows; the host picks them from 3). The scalar
// builds' cost grows with each row (every lane re-reads and converts x per row and
// weight chunk), so past two rows they lost to cuBLAS (gpu-2026-12-02-prologue.md §4,
// m = 8: 10.5 µs against 3.7 for the 0.6B qkv). Here mma.sync m16n8k16 does the rows:
// A = 16 rows of x (rows past m are zero), B = 8 weight rows (output columns), so a warp
// owns 8 columns and a lane streams one 16-byte weight chunk per 32 values of k, as the
// scalar build does, while the row count costs only x loads and mmas. The reduction
// order over k is free, so each lane's chunk at k = 32 b + 8 t supplies both mmas of
// block b: the first takes its elements 0-3 as the fragment's k pairs (2t, 2t+1) and
// (2t+8, 2t+9), the second elements 4-7, and x is read with the same map. k a multiple
// of 32; same grid as the scalar build with 8 columns a warp:
// ceil(ceil(n / 8) / (GEMV_WARPS / ksplit)) blocks, and warp w takes column group
// blockIdx.x * (GEMV_WARPS / ksplit) + w / ksplit and part w % ksplit of the k blocks.
#define GEMV_TC_LOADS 4  // k blocks of 32 a lane has in flight per weight row

//
// Builds of two and four row tiles (to 32 and 64 rows) ran 2.7-6x slower than cuBLAS on
// 2026-12-05 (docs/results/gpu-2026-12-05-h100.md §2) and were removed: past 16 rows the
// products go to cuBLAS.
template <int EPI, bool NORM>
__device__ __forceinline__ void gemv_body_tc(const bf16_t* __restrict__ x,
                                             const bf16_t* __restrict__ w,
                                             const bf16_t* __restrict__ bias,
                                             void* __restrict__ y, int m, int n, int k,
                                             int y_stride, int ksplit,
                                             const bf16_t* __restrict__ norm, float eps) {
    constexpr int NW = EPI == EPI_SILU ? 2 : 1;
    constexpr int U = GEMV_TC_LOADS;
    __shared__ float part[GEMV_WARPS][NW][4][32];
    // Each row's factor from the norm prologue (1 unless the norm is folded).
    __shared__ float row_scale[16];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int col0 = (blockIdx.x * (GEMV_WARPS / ksplit) + warp / ksplit) * 8;
    int kb = k / 32, kc = k / 8;
    int per = (kb + ksplit - 1) / ksplit;
    bool live = col0 < n;
    int b0 = live ? (warp % ksplit) * per : 0;
    int b1 = live ? min(kb, b0 + per) : 0;
    pdl_trigger();
    // A ragged last group loads a valid row in place of those past n and stores nothing
    // for them.
    int wrow = min(col0 + g, n - 1);
    const u32x4* wr[NW];
#pragma unroll
    for (int j = 0; j < NW; j++)
        wr[j] = reinterpret_cast<const u32x4*>(w + ((size_t)wrow + (size_t)j * n) * k) + t;
    float acc[NW][4];
#pragma unroll
    for (int j = 0; j < NW; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) acc[j][i] = 0.0f;
    u32x4 wv[NW][U];
    auto issue = [&](int b) {
#pragma unroll
        for (int u = 0; u < U; u++)
            if (b + u < b1)
#pragma unroll
                for (int j = 0; j < NW; j++) wv[j][u] = ld_stream(wr[j] + 4 * (b + u));
    };
    if (NORM) {
        pdl_wait();
        gemv_norm_issue(x, norm, m, kc);
    }
    issue(b0);
    if (!NORM) pdl_wait();
    const u32x4* x4 = NORM ? gemv_norm_finish(m, kc, eps, norm == nullptr, row_scale)
                           : reinterpret_cast<const u32x4*>(x);
    const u32x4 zero = {0u, 0u, 0u, 0u};
    for (int b = b0; b < b1; b += U) {
        if (b != b0) issue(b);
#pragma unroll
        for (int u = 0; u < U; u++) {
            int bb = b + u;
            if (bb >= b1) continue;
            u32x4 xl = g < m ? x4[(size_t)g * kc + 4 * bb + t] : zero;
            u32x4 xh = g + 8 < m ? x4[(size_t)(g + 8) * kc + 4 * bb + t] : zero;
#pragma unroll
            for (int j = 0; j < NW; j++) {
                mma_bf16_16816(acc[j], xl.x, xh.x, xl.y, xh.y, wv[j][u].x, wv[j][u].y);
                mma_bf16_16816(acc[j], xl.z, xh.z, xl.w, xh.w, wv[j][u].z, wv[j][u].w);
            }
        }
    }
    // The ksplit warps of a column group add up through shared memory.
    if (ksplit > 1) {
#pragma unroll
        for (int j = 0; j < NW; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) part[warp][j][i][lane] = acc[j][i];
        __syncthreads();
        if (warp % ksplit == 0) {
            for (int s = 1; s < ksplit; s++)
#pragma unroll
                for (int j = 0; j < NW; j++)
#pragma unroll
                    for (int i = 0; i < 4; i++) acc[j][i] += part[warp + s][j][i][lane];
        }
    }
    if (!live || warp % ksplit != 0) return;
    // acc[j][0..1]: row g, columns col0 + 2t and + 1; [2..3]: row g + 8.
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int r = g + (i >> 1) * 8, col = col0 + 2 * t + (i & 1);
        if (r >= m || col >= n) continue;
        float b = bias != nullptr ? bf2f(bias[col]) : 0.0f;
        float sc = NORM ? row_scale[r] : 1.0f;
        gemv_store<EPI>(y, (size_t)r * y_stride + col, acc[0][i] * sc, acc[NW - 1][i] * sc, b);
    }
}

// MR = 0 selects the tensor-core build.
template <int MR, int EPI, bool NORM>
__device__ __forceinline__ void gemv_body(const bf16_t* __restrict__ x,
                                          const bf16_t* __restrict__ w,
                                          const bf16_t* __restrict__ bias, void* __restrict__ y,
                                          int m, int n, int k, int y_stride, int ksplit,
                                          const bf16_t* __restrict__ norm, float eps) {
    if constexpr (MR == 0) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
        __trap();  // bf16 mma needs sm_80; the host never picks this build below it
#else
        gemv_body_tc<EPI, NORM>(x, w, bias, y, m, n, k, y_stride, ksplit, norm, eps);
#endif
    } else
        gemv_body_simt<MR, EPI, NORM>(x, w, bias, y, m, n, k, y_stride, ksplit, norm, eps);
}

// Each product comes in these builds: `<name>_tc` (above) for 2 to 16 rows where k is a
// multiple of 32, `<name>` for 1 < m <= 8 otherwise, and `<name>_m1` for one row, with code free of the
// row loop and few enough registers (launch bounds 256 x 8) that eight blocks share an
// SM: the host sizes `ksplit` so the whole product runs in one wave of blocks, which is
// what a latency-bound launch needs (Nsight Compute, 2026-12-01: the first split build,
// 80 registers and three blocks an SM, ran its 0.6B products in two to three waves and
// lost 20-40% to the build before it).
#define GEMV_PLAIN(SUFFIX, MR, MINB)                                                             \
    extern "C" __global__ void __launch_bounds__(256, MINB)                                      \
        gemv_bf16##SUFFIX(const bf16_t* x, const bf16_t* w, const bf16_t* bias, bf16_t* y,       \
                          int m, int n, int k, int y_stride, int ksplit) {                       \
        gemv_body<MR, EPI_BF16, false>(x, w, bias, y, m, n, k, y_stride, ksplit, nullptr, 0.0f); \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(256, MINB)                                      \
        gemv_f32##SUFFIX(const bf16_t* x, const bf16_t* w, const bf16_t* bias, float* y,         \
                         int m, int n, int k, int y_stride, int ksplit) {                        \
        gemv_body<MR, EPI_F32, false>(x, w, bias, y, m, n, k, y_stride, ksplit, nullptr, 0.0f);  \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(256, MINB)                                      \
        gemv_silu##SUFFIX(const bf16_t* x, const bf16_t* w, bf16_t* y, int m, int n, int k,      \
                          int ksplit) {                                                          \
        gemv_body<MR, EPI_SILU, false>(x, w, nullptr, y, m, n, k, n, ksplit, nullptr, 0.0f);     \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(256, MINB)                                      \
        gemv_residual##SUFFIX(const bf16_t* x, const bf16_t* w, const bf16_t* bias,              \
                              bf16_t* residual, int m, int n, int k, int ksplit) {               \
        gemv_body<MR, EPI_RESIDUAL, false>(x, w, bias, residual, m, n, k, n, ksplit, nullptr,    \
                                           0.0f);                                                \
    }

#define GEMV_NORM(SUFFIX, MR, MINB)                                                            \
    extern "C" __global__ void __launch_bounds__(256, MINB) gemv_norm_bf16##SUFFIX(            \
        const bf16_t* x, const bf16_t* norm, float eps, const bf16_t* w, const bf16_t* bias,  \
        bf16_t* y, int m, int n, int k, int ksplit) {                                          \
        gemv_body<MR, EPI_BF16, true>(x, w, bias, y, m, n, k, n, ksplit, norm, eps);          \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(256, MINB) gemv_norm_silu##SUFFIX(            \
        const bf16_t* x, const bf16_t* norm, float eps, const bf16_t* w, bf16_t* y, int m,    \
        int n, int k, int ksplit) {                                                            \
        gemv_body<MR, EPI_SILU, true>(x, w, nullptr, y, m, n, k, n, ksplit, norm, eps);       \
    }

// Shapes (every build): x: [m, k] bf16; w: [n, k] bf16 (gemv_silu, gemv_norm_silu:
// [2n, k], gate rows then up rows); bias: [n] bf16 or null; y: [m, n] with rows
// `y_stride` apart (the gemv_norm_* kernels: n apart); residual: [m, n]; norm: [k].
GEMV_PLAIN(, GEMV_MAX_ROWS, 2)
GEMV_NORM(, GEMV_MAX_ROWS, 2)
GEMV_PLAIN(_m1, 1, 6)
GEMV_NORM(_m1, 1, 6)
GEMV_PLAIN(_tc, 0, 2)
GEMV_NORM(_tc, 0, 2)
