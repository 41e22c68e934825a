// Paged attention for prefill / extend over a ragged batch: causal, with a cached
// prefix, GQA, head_dim 64 or 128. Tensor cores through mma.sync m16n8k16 (bf16 in,
// f32 accumulate; sm_80+, also the fast path on sm_90), FlashAttention-2 style
// online softmax. Metadata layout: see attention_simple.cu.
#include "common.cuh"

#define PF_BQ 64
#define PF_BK 64
#define PF_PAD 8
// P and the output tile are rounded to bf16 with one cvt a pair (the integer rounding
// was ~7 instructions a score in the inner loop: 2,400 -> 1,632 SASS instructions at
// hd128). Timed against the integer rounding on an H100 (2026-12-07,
// docs/results/gpu-2026-12-07-fold.md): 3-14% faster on each of attn_bench's 39 shapes.
#define PF_PACK pack_bf16x2_rn

// grid: (num_tiles, q_heads); block: 128 (4 warps x 16 query rows).
// Tile i covers new tokens tile_q0[i] .. tile_q0[i] + 64 of sequence tile_seq[i].
template <int HD>
__device__ __forceinline__ void prefill_impl(
    const bf16_t* __restrict__ q, int q_stride, bf16_t* __restrict__ o,
    const bf16_t* __restrict__ k_cache, const bf16_t* __restrict__ v_cache,
    const int* __restrict__ q_start, const int* __restrict__ kv_len,
    const int* __restrict__ page_start, const int* __restrict__ page_ids,
    const int* __restrict__ tile_seq, const int* __restrict__ tile_q0, int q_heads,
    int kv_heads, int page_size, float scale) {
    constexpr int LD = HD + PF_PAD;
    __shared__ __align__(16) bf16_t Ks[PF_BK * LD];
    __shared__ __align__(16) bf16_t Vs[PF_BK * LD];
    int tile = blockIdx.x, h = blockIdx.y;
    int s = tile_seq[tile], q0 = tile_q0[tile];
    int qs0 = q_start[s], n_new = q_start[s + 1] - qs0;
    int ctx = kv_len[s], prefix = ctx - n_new;
    int kvh = h / (q_heads / kv_heads);
    const int* pages = page_ids + page_start[s];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
    int r0 = q0 + warp * 16 + g, r1 = r0 + 8;
    int pos0 = prefix + r0, pos1 = prefix + r1;

    u32 qf[HD / 16][4];
    {
        const bf16_t* q0p = q + (size_t)(qs0 + (r0 < n_new ? r0 : 0)) * q_stride + h * HD;
        const bf16_t* q1p = q + (size_t)(qs0 + (r1 < n_new ? r1 : 0)) * q_stride + h * HD;
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
            qf[kk][0] = *reinterpret_cast<const u32*>(q0p + kk * 16 + 2 * tq);
            qf[kk][1] = *reinterpret_cast<const u32*>(q1p + kk * 16 + 2 * tq);
            qf[kk][2] = *reinterpret_cast<const u32*>(q0p + kk * 16 + 8 + 2 * tq);
            qf[kk][3] = *reinterpret_cast<const u32*>(q1p + kk * 16 + 8 + 2 * tq);
        }
    }
    float oacc[HD / 8][4];
#pragma unroll
    for (int i = 0; i < HD / 8; i++) oacc[i][0] = oacc[i][1] = oacc[i][2] = oacc[i][3] = 0.0f;
    float m0 = NEG_INF, m1 = NEG_INF, l0 = 0.0f, l1 = 0.0f;
    float sl2 = scale * LOG2E;
    int q_last = min(q0 + PF_BQ, n_new) - 1;
    int kv_end = prefix + q_last + 1;
    int warp_first_pos = prefix + q0 + warp * 16;

    for (int kb = 0; kb < kv_end; kb += PF_BK) {
        __syncthreads();
        for (int idx = threadIdx.x; idx < PF_BK * HD / 8; idx += blockDim.x) {
            int r = idx / (HD / 8), c = idx % (HD / 8);
            int p = kb + r;
            u32x4 kv4 = {0u, 0u, 0u, 0u}, vv4 = {0u, 0u, 0u, 0u};
            if (p < kv_end) {
                size_t row = ((size_t)pages[p / page_size] * page_size + p % page_size) * kv_heads + kvh;
                kv4 = *reinterpret_cast<const u32x4*>(k_cache + row * HD + c * 8);
                vv4 = *reinterpret_cast<const u32x4*>(v_cache + row * HD + c * 8);
            }
            *reinterpret_cast<u32x4*>(&Ks[r * LD + c * 8]) = kv4;
            *reinterpret_cast<u32x4*>(&Vs[r * LD + c * 8]) = vv4;
        }
        __syncthreads();

        float sacc[PF_BK / 8][4];
#pragma unroll
        for (int nt = 0; nt < PF_BK / 8; nt++) sacc[nt][0] = sacc[nt][1] = sacc[nt][2] = sacc[nt][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
#pragma unroll
            for (int nt = 0; nt < PF_BK / 8; nt++) {
                const bf16_t* kp = &Ks[(nt * 8 + g) * LD + kk * 16 + 2 * tq];
                u32 b0 = *reinterpret_cast<const u32*>(kp);
                u32 b1 = *reinterpret_cast<const u32*>(kp + 8);
                mma_bf16_16816(sacc[nt], qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3], b0, b1);
            }
        }
        bool diag = kb + PF_BK > warp_first_pos;
        float mx0 = NEG_INF, mx1 = NEG_INF;
#pragma unroll
        for (int nt = 0; nt < PF_BK / 8; nt++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float v = sacc[nt][e] * sl2;
                if (diag) {
                    int col = kb + nt * 8 + 2 * tq + (e & 1);
                    if (col > (e < 2 ? pos0 : pos1)) v = NEG_INF;
                }
                sacc[nt][e] = v;
            }
            mx0 = fmaxf(mx0, fmaxf(sacc[nt][0], sacc[nt][1]));
            mx1 = fmaxf(mx1, fmaxf(sacc[nt][2], sacc[nt][3]));
        }
        mx0 = quad_max(mx0);
        mx1 = quad_max(mx1);
        float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
        // A row past the end of the sequence can see only masked scores; keep it finite.
        if (mn0 == NEG_INF) mn0 = 0.0f;
        if (mn1 == NEG_INF) mn1 = 0.0f;
        float al0 = exp2f(m0 - mn0), al1 = exp2f(m1 - mn1);
        m0 = mn0;
        m1 = mn1;
        float rs0 = 0.0f, rs1 = 0.0f;
#pragma unroll
        for (int nt = 0; nt < PF_BK / 8; nt++) {
            sacc[nt][0] = exp2f(sacc[nt][0] - mn0);
            sacc[nt][1] = exp2f(sacc[nt][1] - mn0);
            sacc[nt][2] = exp2f(sacc[nt][2] - mn1);
            sacc[nt][3] = exp2f(sacc[nt][3] - mn1);
            rs0 += sacc[nt][0] + sacc[nt][1];
            rs1 += sacc[nt][2] + sacc[nt][3];
        }
        l0 = l0 * al0 + rs0;
        l1 = l1 * al1 + rs1;
#pragma unroll
        for (int dt = 0; dt < HD / 8; dt++) {
            oacc[dt][0] *= al0;
            oacc[dt][1] *= al0;
            oacc[dt][2] *= al1;
            oacc[dt][3] *= al1;
        }
#pragma unroll
        for (int c = 0; c < PF_BK / 16; c++) {
            u32 a0 = PF_PACK(sacc[2 * c][0], sacc[2 * c][1]);
            u32 a1 = PF_PACK(sacc[2 * c][2], sacc[2 * c][3]);
            u32 a2 = PF_PACK(sacc[2 * c + 1][0], sacc[2 * c + 1][1]);
            u32 a3 = PF_PACK(sacc[2 * c + 1][2], sacc[2 * c + 1][3]);
            int kr = c * 16 + 2 * tq;
#pragma unroll
            for (int dt = 0; dt < HD / 8; dt++) {
                int col = dt * 8 + g;
                u32 b0 = (u32)Vs[kr * LD + col] | ((u32)Vs[(kr + 1) * LD + col] << 16);
                u32 b1 = (u32)Vs[(kr + 8) * LD + col] | ((u32)Vs[(kr + 9) * LD + col] << 16);
                mma_bf16_16816(oacc[dt], a0, a1, a2, a3, b0, b1);
            }
        }
    }
    l0 = quad_sum(l0);
    l1 = quad_sum(l1);
    float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
    size_t ostride = (size_t)q_heads * HD;
#pragma unroll
    for (int dt = 0; dt < HD / 8; dt++) {
        int col = h * HD + dt * 8 + 2 * tq;
        if (r0 < n_new)
            *reinterpret_cast<u32*>(o + (size_t)(qs0 + r0) * ostride + col) =
                PF_PACK(oacc[dt][0] * inv0, oacc[dt][1] * inv0);
        if (r1 < n_new)
            *reinterpret_cast<u32*>(o + (size_t)(qs0 + r1) * ostride + col) =
                PF_PACK(oacc[dt][2] * inv1, oacc[dt][3] * inv1);
    }
}

#define PREFILL(HD)                                                                            \
    extern "C" __global__ void __launch_bounds__(128) attn_prefill_hd##HD(                      \
        const bf16_t* q, int q_stride, bf16_t* o, const bf16_t* k_cache, const bf16_t* v_cache, \
        const int* q_start, const int* kv_len, const int* page_start, const int* page_ids,     \
        const int* tile_seq, const int* tile_q0, int q_heads, int kv_heads, int page_size,     \
        float scale) {                                                                         \
        prefill_impl<HD>(q, q_stride, o, k_cache, v_cache, q_start, kv_len, page_start,        \
                         page_ids, tile_seq, tile_q0, q_heads, kv_heads, page_size, scale);    \
    }
PREFILL(64)
PREFILL(128)
