// RMSNorm, optionally fused with the residual add that precedes it.
#include "common.cuh"

// Vectors of 8 bf16 each thread keeps in registers on the one-pass path: with 256
// threads, rows up to 8192 wide (every model config here is at most 5120).
#define NORM_VPT 4

// One row, by the whole block (`hidden` a multiple of 8):
//   if delta != 0:  residual = bf16(residual + delta)
//   out = bf16(residual * rsqrt(mean(residual^2) + eps) * weight)
// With delta == 0 this is a plain RMSNorm of `residual` (left unchanged). `scratch`:
// 32 floats of shared memory. The residual is read through L2 (ld.global.cg): a gemv
// epilogue that normalised rows other blocks wrote shared this code until 2026-12-04,
// and the kernel's figures were measured with these loads.
//
// Thread i owns vectors i, i + blockDim, i + 2 blockDim, ... on both paths and sums
// them in that order, so the two paths round identically (and as gemv.cu's norm
// prologue does at the same block size).
__device__ __forceinline__ void add_rmsnorm_row(bf16_t* __restrict__ residual,
                                                const bf16_t* __restrict__ delta,
                                                const bf16_t* __restrict__ weight,
                                                bf16_t* __restrict__ out, int hidden, float eps,
                                                float* scratch) {
    u32x4* r4 = reinterpret_cast<u32x4*>(residual);
    const u32x4* d4 = reinterpret_cast<const u32x4*>(delta);
    const u32x4* w4 = reinterpret_cast<const u32x4*>(weight);
    u32x4* o4 = reinterpret_cast<u32x4*>(out);
    int nvec = hidden / 8;
    int nt = blockDim.x;
    if (nvec <= NORM_VPT * nt) {
        // One pass over memory: every load of the row (and of the weight, which the
        // write needs after the block sum) is issued before any of it is used, so the
        // row costs one memory latency instead of a chain of them.
        u32x4 r[NORM_VPT], d[NORM_VPT], g[NORM_VPT];
#pragma unroll
        for (int k = 0; k < NORM_VPT; k++) {
            int i = threadIdx.x + k * nt;
            if (i < nvec) {
                r[k] = ld_cg(r4 + i);
                if (delta != nullptr) d[k] = d4[i];
                g[k] = w4[i];
            }
        }
        float ss = 0.0f;
#pragma unroll
        for (int k = 0; k < NORM_VPT; k++) {
            int i = threadIdx.x + k * nt;
            if (i >= nvec) continue;
            u32 w[4] = {r[k].x, r[k].y, r[k].z, r[k].w};
            if (delta != nullptr) {
                u32 dw[4] = {d[k].x, d[k].y, d[k].z, d[k].w};
#pragma unroll
                for (int j = 0; j < 4; j++)
                    w[j] = pack_bf16x2(bf_lo(w[j]) + bf_lo(dw[j]), bf_hi(w[j]) + bf_hi(dw[j]));
                r[k] = u32x4{w[0], w[1], w[2], w[3]};
                r4[i] = r[k];
            }
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float a = bf_lo(w[j]), b = bf_hi(w[j]);
                ss += a * a + b * b;
            }
        }
        float inv = rsqrtf(block_sum(ss, scratch) / (float)hidden + eps);
#pragma unroll
        for (int k = 0; k < NORM_VPT; k++) {
            int i = threadIdx.x + k * nt;
            if (i >= nvec) continue;
            u32 w[4] = {r[k].x, r[k].y, r[k].z, r[k].w};
            u32 gw[4] = {g[k].x, g[k].y, g[k].z, g[k].w};
            u32 o[4];
#pragma unroll
            for (int j = 0; j < 4; j++)
                o[j] = pack_bf16x2(bf_lo(w[j]) * inv * bf_lo(gw[j]),
                                   bf_hi(w[j]) * inv * bf_hi(gw[j]));
            o4[i] = u32x4{o[0], o[1], o[2], o[3]};
        }
        return;
    }
    // Wider rows: two passes, the second re-reading the (updated) residual.
    float ss = 0.0f;
    for (int i = threadIdx.x; i < nvec; i += nt) {
        u32x4 r = ld_cg(r4 + i);
        u32 w[4] = {r.x, r.y, r.z, r.w};
        if (delta != nullptr) {
            u32x4 d = d4[i];
            u32 dw[4] = {d.x, d.y, d.z, d.w};
#pragma unroll
            for (int k = 0; k < 4; k++)
                w[k] = pack_bf16x2(bf_lo(w[k]) + bf_lo(dw[k]), bf_hi(w[k]) + bf_hi(dw[k]));
            r4[i] = u32x4{w[0], w[1], w[2], w[3]};
        }
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float a = bf_lo(w[k]), b = bf_hi(w[k]);
            ss += a * a + b * b;
        }
    }
    float inv = rsqrtf(block_sum(ss, scratch) / (float)hidden + eps);
    for (int i = threadIdx.x; i < nvec; i += nt) {
        u32x4 r = ld_cg(r4 + i);
        u32x4 g = w4[i];
        u32 w[4] = {r.x, r.y, r.z, r.w};
        u32 gw[4] = {g.x, g.y, g.z, g.w};
        u32 o[4];
#pragma unroll
        for (int k = 0; k < 4; k++)
            o[k] = pack_bf16x2(bf_lo(w[k]) * inv * bf_lo(gw[k]), bf_hi(w[k]) * inv * bf_hi(gw[k]));
        o4[i] = u32x4{o[0], o[1], o[2], o[3]};
    }
}

// Per row t: one block a row, of as many threads as the host's `norm_threads` gives for
// the rows and the width.
extern "C" __global__ void add_rmsnorm(bf16_t* __restrict__ residual,
                                       const bf16_t* __restrict__ delta,
                                       const bf16_t* __restrict__ weight,
                                       bf16_t* __restrict__ out, int hidden, float eps) {
    __shared__ float scratch[32];
    size_t row = (size_t)blockIdx.x * hidden;
    add_rmsnorm_row(residual + row, delta != nullptr ? delta + row : nullptr, weight, out + row,
                    hidden, eps, scratch);
}

// ---- A norm's weight folded into the product that consumes it ---------------------
// rms_norm(x) · g · Wᵀ = inv(x) · (x · (W · diag(g))ᵀ), inv(x) = rsqrt(mean(x²) + eps) of
// the row: with g folded into W once at load (scale_cols_bf16), the product reads the
// residual stream as it is and the kernel after it (silu_mul_rms, qkv_rope_store_rms_*)
// multiplies its row by inv. At decode batches past the gemv kernels that removes the
// add_rmsnorm launch between the cuBLAS products; the add itself goes into the product
// before (cuBLAS's beta = 1). Rounding differs from the unfused pair: g · W is rounded to
// bf16 once at load where the pair rounds the normed row, and the add is rounded once.

// w: [n, k] bf16 in place, column c scaled by g[c]. g is the norm weight as loaded (f32):
// its bf16 copy would round g before the product is rounded, two roundings where an f32
// checkpoint's reference folds with one. grid: ceil(n * k / 8 / 256); block: 256.
// k a multiple of 8.
extern "C" __global__ void scale_cols_bf16(bf16_t* __restrict__ w, const float* __restrict__ g,
                                           long long n8, int k) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n8) return;
    int c = (int)((i * 8) % k);
    u32x4* w4 = reinterpret_cast<u32x4*>(w) + i;
    u32x4 v = *w4;
    const float4* g4 = reinterpret_cast<const float4*>(g + c);
    float4 s0 = g4[0], s1 = g4[1];
    float s[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};
    u32 a[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; j++)
        a[j] = pack_bf16x2(bf_lo(a[j]) * s[2 * j], bf_hi(a[j]) * s[2 * j + 1]);
    *w4 = u32x4{a[0], a[1], a[2], a[3]};
}
