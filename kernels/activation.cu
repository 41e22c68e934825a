// SiLU(gate) * up over a merged gate_up projection.
#include "common.cuh"

// 16-byte vectors per thread: all of a thread's loads are issued before any math, so a
// block keeps 4x the bytes in flight of one vector a thread (and a decode step's grid
// fits in one wave instead of two). ops/activation.rs sizes the grid with the same number.
#define SILU_VPT 4

// gate_up: [T, 2 * inter] (gate in the first half of each row, up in the second);
// out: [T, inter]. Block y of row t covers vectors [y * 128 * SILU_VPT, +128 * SILU_VPT),
// thread x the ones at x + 128 k. grid: (T, ceil(inter / 8 / (128 * SILU_VPT))); block:
// 128. `inter` a multiple of 8.
extern "C" __global__ void silu_mul(const bf16_t* __restrict__ gate_up, bf16_t* __restrict__ out,
                                    int inter) {
    int t = blockIdx.x;
    int base = blockIdx.y * blockDim.x * SILU_VPT + threadIdx.x;
    int nvec = inter / 8;
    const u32x4* g4 = reinterpret_cast<const u32x4*>(gate_up + (size_t)t * 2 * inter);
    const u32x4* u4 = reinterpret_cast<const u32x4*>(gate_up + (size_t)t * 2 * inter + inter);
    u32x4* o4 = reinterpret_cast<u32x4*>(out + (size_t)t * inter);
    u32x4 g[SILU_VPT], u[SILU_VPT];
#pragma unroll
    for (int k = 0; k < SILU_VPT; k++) {
        int i = base + k * blockDim.x;
        if (i < nvec) {
            g[k] = g4[i];
            u[k] = u4[i];
        }
    }
#pragma unroll
    for (int k = 0; k < SILU_VPT; k++) {
        int i = base + k * blockDim.x;
        if (i >= nvec) continue;
        u32 gw[4] = {g[k].x, g[k].y, g[k].z, g[k].w};
        u32 uw[4] = {u[k].x, u[k].y, u[k].z, u[k].w};
        u32 o[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float a = bf_lo(gw[j]), b = bf_hi(gw[j]);
            a = a / (1.0f + __expf(-a));
            b = b / (1.0f + __expf(-b));
            o[j] = pack_bf16x2(a * bf_lo(uw[j]), b * bf_hi(uw[j]));
        }
        o4[i] = u32x4{o[0], o[1], o[2], o[3]};
    }
}
