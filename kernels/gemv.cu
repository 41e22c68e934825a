// Skinny matrix products for decode: y = x · Wᵀ (+ bias) with few rows of x.
//
// At a handful of rows a linear layer is a pure weight read (one 2-byte weight per
// 2 FLOPs per row); cuBLAS's tiled kernels spend most of that time on tiles that are
// almost all padding. Here each warp owns one output column: its lanes stream that
// column's weight row with 16-byte loads (coalesced, read once), multiply by every row
// of x (small, served from L1/L2), and reduce across the warp in f32.
#include "common.cuh"

#define GEMV_MAX_ROWS 8
#define GEMV_WARPS 8

// x: [m, k] bf16 (m <= 8); w: [n, k] bf16; bias: [n] bf16 or null; y: [m, n] bf16
// (or f32 when `f32_out`), rows `y_stride` elements apart. k a multiple of 8.
// grid: ceil(n / 8); block: 256.
template <bool F32OUT>
__device__ __forceinline__ void gemv_impl(const bf16_t* __restrict__ x,
                                          const bf16_t* __restrict__ w,
                                          const bf16_t* __restrict__ bias, void* __restrict__ y,
                                          int m, int n, int k, int y_stride) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int col = blockIdx.x * GEMV_WARPS + warp;
    if (col >= n) return;
    float acc[GEMV_MAX_ROWS];
#pragma unroll
    for (int r = 0; r < GEMV_MAX_ROWS; r++) acc[r] = 0.0f;
    const u32x4* wr = reinterpret_cast<const u32x4*>(w + (size_t)col * k);
    int chunks = k / 8;
    for (int i = lane; i < chunks; i += 32) {
        u32x4 wv = wr[i];
        u32 ww[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
        for (int r = 0; r < GEMV_MAX_ROWS; r++) {
            if (r < m) {
                u32x4 xv = reinterpret_cast<const u32x4*>(x + (size_t)r * k)[i];
                u32 xw[4] = {xv.x, xv.y, xv.z, xv.w};
                float s = 0.0f;
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    s += bf_lo(ww[e]) * bf_lo(xw[e]);
                    s += bf_hi(ww[e]) * bf_hi(xw[e]);
                }
                acc[r] += s;
            }
        }
    }
    float b = bias != nullptr ? bf2f(bias[col]) : 0.0f;
#pragma unroll
    for (int r = 0; r < GEMV_MAX_ROWS; r++) {
        if (r < m) {
            float v = warp_sum(acc[r]) + b;
            if (lane == 0) {
                if (F32OUT)
                    reinterpret_cast<float*>(y)[(size_t)r * y_stride + col] = v;
                else
                    reinterpret_cast<bf16_t*>(y)[(size_t)r * y_stride + col] = f2bf(v);
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(256)
    gemv_bf16(const bf16_t* x, const bf16_t* w, const bf16_t* bias, bf16_t* y, int m, int n, int k,
              int y_stride) {
    gemv_impl<false>(x, w, bias, y, m, n, k, y_stride);
}

extern "C" __global__ void __launch_bounds__(256)
    gemv_f32(const bf16_t* x, const bf16_t* w, const bf16_t* bias, float* y, int m, int n, int k,
             int y_stride) {
    gemv_impl<true>(x, w, bias, y, m, n, k, y_stride);
}
