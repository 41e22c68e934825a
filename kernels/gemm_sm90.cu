// Skinny GEMM on Hopper for decode batches: y[m, n] = x[m, k] · W[n, k]ᵀ (bf16 in, f32
// accumulate, bf16 or f32 out) for m ≤ 128. cuBLAS tiles such products over n only, so
// at 14B sizes a few dozen tiles each stream a long k while most SMs wait; its decode
// products ran at 1.3-1.6x their weight-streaming floor (docs/results/
// gpu-2026-12-01-decode2.md, batch 64).
//
// Stream-K: the work is (tile of SK_BN columns, k chunk of SK_BK) units laid out tile
// by tile, and CTA c of the grid takes the contiguous units [first(c), first(c + 1)),
// so every CTA streams the same share of the weight whatever n and k are. A tile whose
// chunks two or more CTAs share is summed by the last of them to finish: each writes
// its partial accumulators to a workspace slot and takes a ticket; the CTA that draws
// the last ticket adds the others' slots to its own and stores the tile (and resets
// the ticket, so the next launch and graph replays find it zero). Nobody waits on
// another CTA.
//
// A CTA is one warpgroup (128 threads). Thread 0 keeps SK_STAGES(MW) stages of (weight
// box 128 x 64, x box 64·MW x 64) in flight through the copy engine (TMA, 128-byte
// swizzle; boxes past the tensor are zero-filled, which pads m, n and k); the
// warpgroup multiplies each stage on wgmma (m64n128k16, both operands K-major in
// shared memory) into MW row blocks of 64 as the next stages land.
//
// Launch: grid = min(units, CTAs that fit the GPU), 128 threads, SK_SMEM(MW) dynamic
// shared memory; args (x map: dims {k, m}, box {64, 64·MW}; W map: dims {k, n}, box
// {64, 128}; out; f32_out; m; n; k; workspace of 2 · grid slots of SK_SLOT_FLOATS(MW)
// floats; zeroed tickets, one per tile).
#include "common.cuh"
#include "hopper.cuh"

#define SK_BN 128  // output columns a tile (one wgmma's n)
#define SK_BK 64   // k a stage: 128 bytes of bf16, the swizzle's row
#define SK_W_BYTES (SK_BN * SK_BK * 2)
#define SK_X_BYTES(MW) ((MW) * 64 * SK_BK * 2)
#define SK_STAGE_BYTES(MW) (SK_W_BYTES + SK_X_BYTES(MW))
// Two CTAs an SM (96 KB of stages each), so one streams while the other sums or stores.
#define SK_STAGES(MW) ((MW) == 1 ? 4 : 3)
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
// CTA c's workspace slot for tile t: 0 for the tile its range starts in, 1 for the
// one it ends in (any tile between is whole and needs none).
__device__ __forceinline__ size_t sk_slot(int c, int t, long long units, int ctas, int ki) {
    return 2 * (size_t)c + ((int)(sk_first(c, units, ctas) / ki) == t ? 0 : 1);
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

template <int MW>
__device__ __forceinline__ void gemm_sk_impl(const TmaDesc* xm, const TmaDesc* wm, void* out, int f32_out, int m,
                                             int n, int k, float* ws, int* tickets) {
    constexpr int ST = SK_STAGES(MW);
    constexpr int SB = SK_STAGE_BYTES(MW);
    extern __shared__ __align__(1024) unsigned char sk_smem[];
    __shared__ __align__(8) u64 full[ST];
    __shared__ int ticket;
    const u32 base = (smem_u32(sk_smem) + 1023) & ~1023u;
    const u32 bar0 = smem_u32(&full[0]);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int ki = (k + SK_BK - 1) / SK_BK;
    const long long units = (long long)((n + SK_BN - 1) / SK_BN) * ki;
    const int ctas = gridDim.x, me = blockIdx.x;
    const long long u0 = sk_first(me, units, ctas), u1 = sk_first(me + 1, units, ctas);
    const long long nu = u1 - u0;

    if (tid == 0) {
        for (int s = 0; s < ST; s++) mbar_init(bar0 + 8 * s, 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    // Thread 0: unit u into stage s, both boxes completing on the stage's barrier.
    auto issue = [&](long long u, int s) {
        const int t = (int)(u / ki), c = (int)(u % ki);
        const u32 dst = base + s * SB, bar = bar0 + 8 * s;
        mbar_arrive_expect_tx(bar, SB);
        tma_load_2d(dst, wm, c * SK_BK, t * SK_BN, bar);
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
            // A shared tile: leave this share in the workspace, in the register order
            // (the same thread of whichever CTA finishes reads it back), and take a ticket.
            const int cf = sk_owner((long long)t * ki, units, ctas);
            const int cl = sk_owner((long long)(t + 1) * ki - 1, units, ctas);
            float4* mine = reinterpret_cast<float4*>(ws + sk_slot(me, t, units, ctas, ki) * SK_SLOT_FLOATS(MW));
#pragma unroll
            for (int mw = 0; mw < MW; mw++)
#pragma unroll
                for (int q = 0; q < 16; q++)
                    __stcg(mine + (mw * 16 + q) * 128 + tid,
                           make_float4(acc[mw][4 * q], acc[mw][4 * q + 1], acc[mw][4 * q + 2], acc[mw][4 * q + 3]));
            __threadfence();
            __syncthreads();
            if (tid == 0) ticket = atomicAdd(tickets + t, 1);
            __syncthreads();
            if (ticket != cl - cf) continue;  // another CTA finishes this tile
            __threadfence();
            for (int c = cf; c <= cl; c++) {
                if (c == me) continue;
                const float4* p = reinterpret_cast<const float4*>(ws + sk_slot(c, t, units, ctas, ki) * SK_SLOT_FLOATS(MW));
#pragma unroll
                for (int mw = 0; mw < MW; mw++)
#pragma unroll
                    for (int q = 0; q < 16; q++) {
                        const float4 v = __ldcg(p + (mw * 16 + q) * 128 + tid);
                        acc[mw][4 * q] += v.x;
                        acc[mw][4 * q + 1] += v.y;
                        acc[mw][4 * q + 2] += v.z;
                        acc[mw][4 * q + 3] += v.w;
                    }
            }
            if (tid == 0) tickets[t] = 0;
        }
        // wgmma m64n128 accumulators: register 4q + e of thread (warp, lane) is row
        // 16 warp + lane / 4 (+ 8 for e >= 2), column 8q + 2 (lane % 4) + (e & 1).
        const int n0 = t * SK_BN + 2 * (lane & 3);
#pragma unroll
        for (int mw = 0; mw < MW; mw++) {
            const int r = mw * 64 + warp * 16 + (lane >> 2);
#pragma unroll
            for (int q = 0; q < 16; q++) {
                sk_store2(out, f32_out, m, n, r, n0 + 8 * q, acc[mw][4 * q], acc[mw][4 * q + 1]);
                sk_store2(out, f32_out, m, n, r + 8, n0 + 8 * q, acc[mw][4 * q + 2], acc[mw][4 * q + 3]);
            }
        }
    }
}

// gemm_sk_m64: up to 64 rows (one row block); gemm_sk_m128: up to 128 (two).
#define GEMM_SK(NAME, MW)                                                                              \
    extern "C" __global__ void __launch_bounds__(128, 2)                                               \
        NAME(const __grid_constant__ TmaDesc xm, const __grid_constant__ TmaDesc wm, void* out,         \
             int f32_out, int m, int n, int k, float* ws, int* tickets) {                              \
        gemm_sk_impl<MW>(&xm, &wm, out, f32_out, m, n, k, ws, tickets);                                 \
    }
GEMM_SK(gemm_sk_m64, 1)
GEMM_SK(gemm_sk_m128, 2)
