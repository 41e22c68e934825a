// SiLU(gate) * up over a merged gate_up projection.
#include "common.cuh"

// silu(gate) * up of the two bf16 pairs in words g and u, rounded once; with S, gate and
// up are first multiplied by s (silu_mul_rms's norm factor).
template <bool S>
__device__ __forceinline__ u32 silu_mul2(u32 g, u32 u, float s) {
    float a = bf_lo(g), b = bf_hi(g);
    if (S) {
        a *= s;
        b *= s;
        return pack_bf16x2(silu(a) * (bf_lo(u) * s), silu(b) * (bf_hi(u) * s));
    }
    return pack_bf16x2(silu(a) * bf_lo(u), silu(b) * bf_hi(u));
}

// gate_up: [T, 2 * inter] (gate in the first half of each row, up in the second);
// out: [T, inter]. grid: (T, ceil(inter / 8 / 128)); block: 128. `inter` a multiple of 8.
extern "C" __global__ void silu_mul(const bf16_t* __restrict__ gate_up, bf16_t* __restrict__ out,
                                    int inter) {
    int t = blockIdx.x;
    int i = blockIdx.y * blockDim.x + threadIdx.x;
    if (i >= inter / 8) return;
    const u32x4* g4 = reinterpret_cast<const u32x4*>(gate_up + (size_t)t * 2 * inter);
    const u32x4* u4 = reinterpret_cast<const u32x4*>(gate_up + (size_t)t * 2 * inter + inter);
    u32x4 g = g4[i], u = u4[i];
    u32 gw[4] = {g.x, g.y, g.z, g.w};
    u32 uw[4] = {u.x, u.y, u.z, u.w};
    u32 o[4];
#pragma unroll
    for (int k = 0; k < 4; k++) o[k] = silu_mul2<false>(gw[k], uw[k], 1.0f);
    reinterpret_cast<u32x4*>(out + (size_t)t * inter)[i] = u32x4{o[0], o[1], o[2], o[3]};
}

// silu_mul over a product of the raw residual stream whose norm weight was folded into
// the gate_up weight (norm.cu, scale_cols_bf16): gate and up of row t are first scaled by
// the row's norm factor rsqrt(mean(res[t]²) + eps), so no norm launch precedes the
// product. res: [T, hidden] (hidden a multiple of 8). grid: (T, Y), block 128; each block
// takes the row's factor once and every Y-th run of 128 vectors of the row.
extern "C" __global__ void silu_mul_rms(const bf16_t* __restrict__ gate_up,
                                        const bf16_t* __restrict__ res, bf16_t* __restrict__ out,
                                        int inter, int hidden, float eps) {
    __shared__ float scratch[32];
    const size_t t = blockIdx.x;
    const float inv = row_rms_inv(res + t * hidden, hidden, eps, scratch);
    const u32x4* g4 = reinterpret_cast<const u32x4*>(gate_up + t * 2 * inter);
    const u32x4* u4 = reinterpret_cast<const u32x4*>(gate_up + t * 2 * inter + inter);
    u32x4* o4 = reinterpret_cast<u32x4*>(out + t * inter);
    for (int i = blockIdx.y * blockDim.x + threadIdx.x; i < inter / 8; i += gridDim.y * blockDim.x) {
        u32x4 g = g4[i], u = u4[i];
        u32 gw[4] = {g.x, g.y, g.z, g.w};
        u32 uw[4] = {u.x, u.y, u.z, u.w};
        u32 o[4];
#pragma unroll
        for (int k = 0; k < 4; k++) o[k] = silu_mul2<true>(gw[k], uw[k], inv);
        o4[i] = u32x4{o[0], o[1], o[2], o[3]};
    }
}
