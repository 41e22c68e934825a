// Skinny GEMM on Hopper for decode batches: y[m, n] = x[m, k] · W[n, k]ᵀ (bf16 in, f32
// accumulate, bf16 or f32 out) for m ≤ 128, and the same with SiLU·mul in the epilogue
// for a gate_up weight ([2I, k]: y[m, I] = silu(x·Wgᵀ) · (x·Wuᵀ)). cuBLAS tiles such
// products over n only and needs a separate silu_mul launch after gate_up.
//
// Stream-K: the work is (tile of output columns, k chunk of SK_BK) units laid out tile
// by tile, and CTA c of the grid takes the contiguous units [first(c), first(c + 1)),
// so every CTA streams the same share of the weight whatever n and k are. A tile whose
// chunks two or more CTAs share is summed in the workspace: each adds its partial
// accumulators to the tile's f32 slot with vector atomics and takes a ticket; the CTA
// that draws the last ticket reads the sum, stores the tile, and zeroes the slot and
// the ticket for the next launch (and graph replays). Nobody waits on another CTA.
// (A first build had the last CTA read every other CTA's slot in turn: that serial
// tail made it 2x slower than cuBLAS: docs/results/gpu-2026-12-02-skgemm.md.)
//
// A CTA is one warpgroup (128 threads), one an SM. Thread 0 keeps SK_STAGES(MW) stages
// of (weight box 128 x 64, x box 64·MW x 64) in flight through the copy engine (TMA,
// 128-byte swizzle; boxes past the tensor are zero-filled, which pads m, n and k); the
// warpgroup multiplies each stage on wgmma (m64n128k16, both operands K-major in
// shared memory) into MW row blocks of 64 as the next stages land. The SiLU build
// loads the 64 gate rows and the 64 up rows of its output columns as the two halves
// of the 128-row weight box, so each thread holds a gate value and its up value.
//
// Launch: grid = min(units / SK_MIN_UNITS, SMs), 128 threads, SK_SMEM(MW) dynamic
// shared memory; args (x map: dims {k, m}, box {64, 64·MW}; W map: dims {k, rows of
// W}, box {64, 128} (SiLU: {64, 64}); out; f32_out; m; n (output columns); k;
// workspace: a zeroed slot of SK_SLOT_FLOATS(MW) floats per tile; zeroed tickets, one
// per tile).
#include "common.cuh"
#include "hopper.cuh"

#define SK_BN 128  // weight rows a tile (one wgmma's n): 128 outputs, or 64 with SiLU
#define SK_BK 64   // k a stage: 128 bytes of bf16, the swizzle's row
#define SK_W_BYTES (SK_BN * SK_BK * 2)
#define SK_X_BYTES(MW) ((MW) * 64 * SK_BK * 2)
#define SK_STAGE_BYTES(MW) (SK_W_BYTES + SK_X_BYTES(MW))
// 192 KB of stages: at one CTA an SM, 7 stages in flight hide DRAM latency under load.
#define SK_STAGES(MW) ((MW) == 1 ? 8 : 6)
#define SK_SMEM(MW) (SK_STAGES(MW) * SK_STAGE_BYTES(MW) + 1024)
#define SK_SLOT_FLOATS(MW) ((MW) * 64 * SK_BN)

// The first unit of CTA c.
__device__ __forceinline__ long long sk_first(int c, long long units, int ctas) {
    return units * c / ctas;
}
// The CTA whose units hold unit u: the largest c with first(c) <= u.
__device__ __forceinline__ int sk_owner(long long u, long long units, int ctas) {
    return (int)(((u + 1) * ctas + units - 1) / units) - 1;
}

__device__ __forceinline__ void red_add_v4(float4* p, float a, float b, float c, float d) {
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(a), "f"(b), "f"(c), "f"(d)
                 : "memory");
}

__device__ __forceinline__ void sk_store2(void* out, int f32_out, int m, int n, int r, int col, float a, float b) {
    if (r >= m || col >= n) return;
    const size_t at = (size_t)r * n + col;
    const bool pair = col + 1 < n && (n & 1) == 0;  // aligned pair stores need an even n
    if (f32_out) {
        float* o = static_cast<float*>(out) + at;
        if (pair) {
            *reinterpret_cast<float2*>(o) = make_float2(a, b);
        } else {
            o[0] = a;
            if (col + 1 < n) o[1] = b;
        }
    } else {
        bf16_t* o = static_cast<bf16_t*>(out) + at;
        if (pair) {
            *reinterpret_cast<u32*>(o) = pack_bf16x2(a, b);
        } else {
            o[0] = f2bf(a);
            if (col + 1 < n) o[1] = f2bf(b);
        }
    }
}

template <int MW, bool SILU>
__device__ __forceinline__ void gemm_sk_impl(const TmaDesc* xm, const TmaDesc* wm, void* out, int f32_out, int m,
                                             int n, int k, float* ws, int* tickets) {
    constexpr int ST = SK_STAGES(MW);
    constexpr int SB = SK_STAGE_BYTES(MW);
    constexpr int TN = SILU ? SK_BN / 2 : SK_BN;  // output columns a tile
    extern __shared__ __align__(1024) unsigned char sk_smem[];
    __shared__ __align__(8) u64 full[ST];
    __shared__ int ticket;
    const u32 base = (smem_u32(sk_smem) + 1023) & ~1023u;
    const u32 bar0 = smem_u32(&full[0]);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int ki = (k + SK_BK - 1) / SK_BK;
    const long long units = (long long)((n + TN - 1) / TN) * ki;
    const int ctas = gridDim.x, me = blockIdx.x;
    const long long u0 = sk_first(me, units, ctas), u1 = sk_first(me + 1, units, ctas);
    const long long nu = u1 - u0;

    if (tid == 0) {
        for (int s = 0; s < ST; s++) mbar_init(bar0 + 8 * s, 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    // Thread 0: unit u into stage s, all boxes completing on the stage's barrier.
    auto issue = [&](long long u, int s) {
        const int t = (int)(u / ki), c = (int)(u % ki);
        const u32 dst = base + s * SB, bar = bar0 + 8 * s;
        mbar_arrive_expect_tx(bar, SB);
        if (SILU) {
            tma_load_2d(dst, wm, c * SK_BK, t * TN, bar);                      // gate rows
            tma_load_2d(dst + SK_W_BYTES / 2, wm, c * SK_BK, n + t * TN, bar);  // up rows
        } else {
            tma_load_2d(dst, wm, c * SK_BK, t * TN, bar);
        }
        tma_load_2d(dst + SK_W_BYTES, xm, c * SK_BK, 0, bar);
    };
    if (tid == 0)
        for (int i = 0; i < ST && i < nu; i++) issue(u0 + i, i);

    float acc[MW][64];
    long long u = u0;
    while (u < u1) {
        const int t = (int)(u / ki);
        const long long seg0 = u, seg1 = min(u1, (long long)(t + 1) * ki);
        for (; u < seg1; u++) {
            const int i = (int)(u - u0), s = i % ST;
            mbar_wait(bar0 + 8 * s, (i / ST) & 1);
            const u32 w_s = base + s * SB, x_s = w_s + SK_W_BYTES;
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < SK_BK / 16; kk++) {
                const u64 db = desc_sw128(w_s + kk * 32, 16, 1024);
#pragma unroll
                for (int mw = 0; mw < MW; mw++)
                    wgmma_ss_n128(acc[mw], desc_sw128(x_s + mw * 64 * 128 + kk * 32, 16, 1024), db,
                                  (u == seg0 && kk == 0) ? 0 : 1);
            }
            wgmma_commit();
            // The previous unit's products are done in every warp: its stage refills.
            wgmma_wait<1>();
            __syncthreads();
            if (tid == 0 && i >= 1 && i - 1 + ST < nu) issue(u0 + i - 1 + ST, (i - 1) % ST);
        }
        wgmma_wait<0>();
#pragma unroll
        for (int mw = 0; mw < MW; mw++) fence_regs(acc[mw]);

        if (seg0 != (long long)t * ki || seg1 != (long long)(t + 1) * ki) {
            // A shared tile: add this share into the tile's slot, in register order (the
            // same thread of whichever CTA finishes reads it back), then take a ticket.
            const int cf = sk_owner((long long)t * ki, units, ctas);
            const int cl = sk_owner((long long)(t + 1) * ki - 1, units, ctas);
            float4* slot = reinterpret_cast<float4*>(ws + (size_t)t * SK_SLOT_FLOATS(MW));
#pragma unroll
            for (int mw = 0; mw < MW; mw++)
#pragma unroll
                for (int q = 0; q < 16; q++)
                    red_add_v4(slot + (mw * 16 + q) * 128 + tid, acc[mw][4 * q], acc[mw][4 * q + 1],
                               acc[mw][4 * q + 2], acc[mw][4 * q + 3]);
            __threadfence();
            __syncthreads();
            if (tid == 0) ticket = atomicAdd(tickets + t, 1);
            __syncthreads();
            if (ticket != cl - cf) continue;  // another CTA finishes this tile
            __threadfence();
#pragma unroll
            for (int mw = 0; mw < MW; mw++)
#pragma unroll
                for (int q = 0; q < 16; q++) {
                    float4* p = slot + (mw * 16 + q) * 128 + tid;
                    const float4 v = __ldcg(p);
                    acc[mw][4 * q] = v.x;
                    acc[mw][4 * q + 1] = v.y;
                    acc[mw][4 * q + 2] = v.z;
                    acc[mw][4 * q + 3] = v.w;
                    __stcg(p, make_float4(0.f, 0.f, 0.f, 0.f));
                }
            if (tid == 0) tickets[t] = 0;
        }
        // wgmma m64n128 accumulators: register 4q + e of thread (warp, lane) is row
        // 16 warp + lane / 4 (+ 8 for e >= 2), column 8q + 2 (lane % 4) + (e & 1).
        const int n0 = t * TN + 2 * (lane & 3);
#pragma unroll
        for (int mw = 0; mw < MW; mw++) {
            const int r = mw * 64 + warp * 16 + (lane >> 2);
#pragma unroll
            for (int q = 0; q < TN / 8; q++) {
                float v[4];
#pragma unroll
                for (int e = 0; e < 4; e++)
                    v[e] = SILU ? silu(acc[mw][4 * q + e]) * acc[mw][4 * (q + 8) + e] : acc[mw][4 * q + e];
                sk_store2(out, f32_out, m, n, r, n0 + 8 * q, v[0], v[1]);
                sk_store2(out, f32_out, m, n, r + 8, n0 + 8 * q, v[2], v[3]);
            }
        }
    }
}

// gemm_sk_m64: up to 64 rows (one row block); gemm_sk_m128: up to 128 (two); _silu_:
// SiLU·mul of a gate_up product.
#define GEMM_SK(NAME, MW, SILU)                                                                        \
    extern "C" __global__ void __launch_bounds__(128, 1)                                               \
        NAME(const __grid_constant__ TmaDesc xm, const __grid_constant__ TmaDesc wm, void* out,         \
             int f32_out, int m, int n, int k, float* ws, int* tickets) {                              \
        gemm_sk_impl<MW, SILU>(&xm, &wm, out, f32_out, m, n, k, ws, tickets);                           \
    }
GEMM_SK(gemm_sk_m64, 1, false)
GEMM_SK(gemm_sk_m128, 2, false)
GEMM_SK(gemm_sk_silu_m64, 1, true)
GEMM_SK(gemm_sk_silu_m128, 2, true)
