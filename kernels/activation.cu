// SiLU(gate) * up over a merged gate_up projection.
#include "common.cuh"

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
    for (int k = 0; k < 4; k++) {
        float a = bf_lo(gw[k]), b = bf_hi(gw[k]);
        o[k] = pack_bf16x2(silu(a) * bf_lo(uw[k]), silu(b) * bf_hi(uw[k]));
    }
    reinterpret_cast<u32x4*>(out + (size_t)t * inter)[i] = u32x4{o[0], o[1], o[2], o[3]};
}
