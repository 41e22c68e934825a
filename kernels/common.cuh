// Shared device helpers for every kernel family.
//
// The kernels include no CUDA headers: bf16 values travel as raw 16-bit words
// (`bf16_t`) and are converted with bit operations or PTX, so NVRTC needs no
// include path (CI compiles them with nothing but libnvrtc). Each `.cu` file is
// compiled as its own NVRTC program with this header pasted in front by the host.
#pragma once

typedef unsigned short bf16_t;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

#define NEG_INF (-__int_as_float(0x7f800000))
#define POS_INF (__int_as_float(0x7f800000))
#define LOG2E 1.4426950408889634f

__device__ __forceinline__ float bf2f(bf16_t v) { return __uint_as_float(((u32)v) << 16); }

// Two floats to bf16 in one conversion instruction (lo in the low half), rounded to
// nearest even like the integer path below; only a NaN's payload differs. The packed
// form (F2FP) even for one value: cvt.rn.bf16.f32 is F2F, a slower pipe.
#if __CUDA_ARCH__ >= 800
__device__ __forceinline__ u32 cvt_bf16x2(float lo, float hi) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
#endif

// Round-to-nearest-even, NaN kept quiet; same rounding as the CPU backend (`half::bf16::from_f32`).
// The integer rounding costs ~7 instructions a value. MINISGL_HW_BF16 (opt-in, sm_80+)
// rounds with cvt_bf16x2 instead. Everywhere it left the 0.6B decode step unchanged on
// the H100: two A/Bs with the builds swapped moved by the A/B's own runner order, not by
// the build (docs/results/gpu-2026-12-06-pack.md §4). The op checks passed with it on
// everywhere in an earlier form (single values through F2F); with this form they have
// not run.
#if defined(MINISGL_HW_BF16) && __CUDA_ARCH__ < 800
#error "MINISGL_HW_BF16 needs sm_80 or newer"
#endif
__device__ __forceinline__ bf16_t f2bf(float f) {
#ifdef MINISGL_HW_BF16
    return (bf16_t)cvt_bf16x2(f, 0.0f);
#else
    u32 u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (bf16_t)(u >> 16);
#endif
}

// Two floats into one 32-bit word of bf16 (lo in the low half), round-to-nearest-even.
__device__ __forceinline__ u32 pack_bf16x2(float lo, float hi) {
#ifdef MINISGL_HW_BF16
    return cvt_bf16x2(lo, hi);
#else
    return (u32)f2bf(lo) | ((u32)f2bf(hi) << 16);
#endif
}

// pack_bf16x2 in one instruction on sm_80+ whatever the build: the prefill attention
// kernels write a head's whole output tile with it, and the portable one packs P. Their
// integer rounding was ~450 instructions a thread per work item, 14% of a 32 x 512
// launch's warp samples (H100: 32 x 512 +8-12%, 8 x 2,048 +1.5-4%;
// docs/results/gpu-2026-12-06-pack.md).
__device__ __forceinline__ u32 pack_bf16x2_rn(float lo, float hi) {
#if __CUDA_ARCH__ >= 800
    return cvt_bf16x2(lo, hi);
#else
    return pack_bf16x2(lo, hi);
#endif
}

// SiLU as every kernel computes it (silu_mul and gemv_silu must round alike).
__device__ __forceinline__ float silu(float a) { return a / (1.0f + __expf(-a)); }

__device__ __forceinline__ float bf_lo(u32 w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf_hi(u32 w) { return __uint_as_float(w & 0xffff0000u); }

struct __align__(16) u32x4 { u32 x, y, z, w; };

// Reductions over the four lanes that hold one row of an mma.sync / wgmma accumulator
// fragment (lanes 4r .. 4r + 3).
__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Block-wide sum; `scratch` holds at least 32 floats. Every thread gets the result.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float r = lane < nwarps ? scratch[lane] : 0.0f;
    return warp_sum(r);
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float r = lane < nwarps ? scratch[lane] : NEG_INF;
    return warp_max(r);
}

__device__ __forceinline__ u32 warp_sum_u32(u32 v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ u32 block_sum_u32(u32 v, u32* scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
    v = warp_sum_u32(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    u32 r = lane < nwarps ? scratch[lane] : 0u;
    return warp_sum_u32(r);
}

// Order-preserving map of a float onto an unsigned key (larger float -> larger key).
__device__ __forceinline__ u32 float_key(float f) {
    u32 u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float key_float(u32 k) {
    u32 u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
    return __uint_as_float(u);
}

// D += A·B on tensor cores: m16n8k16, A row-major and B column-major bf16 fragments,
// f32 accumulators (sm_80+; only families that need sm_80 call it).
__device__ __forceinline__ void mma_bf16_16816(float* c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0,
                                               u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Asynchronous global -> shared copies of 16 bytes (sm_80+), for kernels that keep
// many tile loads in flight without holding them in registers.
__device__ __forceinline__ u32 smem_u32(const void* p) {
    u32 r;
    asm volatile("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
    return r;
}

__device__ __forceinline__ void cp_async16(u32 dst, const void* src, bool valid) {
    int n = valid ? 16 : 0;  // 0: the 16 bytes are zero-filled, src is not read
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
// Four 8 x 8 bf16 matrices from shared memory (sm_75+): lanes 8 m .. 8 m + 7 give the
// 16-byte row addresses of matrix m, r[m] receives this lane's pair of it (row lane / 4,
// columns 2 (lane % 4) and + 1; with .trans the same of the transpose), i.e. an mma
// operand fragment without per-element loads.
__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&r)[4], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Programmatic dependent launch (sm_90+). A kernel the host launches with the PDL
// attribute may start while the kernel before it is still running: before any thread
// reads what that kernel wrote, or writes anything, it calls pdl_wait(), and every
// block calls it (so the kernel cannot finish before its predecessor has; the next
// kernel's wait then covers both). What a kernel does before the wait may read only
// constants (weights). pdl_trigger() lets the next kernel start launching now; it
// still waits for this one in its own pdl_wait(). On an ordinary launch, or below
// sm_90, both do nothing.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// 16 bytes through L2, bypassing L1 (data other blocks of this launch wrote).
__device__ __forceinline__ u32x4 ld_cg(const u32x4* p) {
    u32x4 v;
    asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}
__device__ __forceinline__ bf16_t ld_cg_bf16(const bf16_t* p) {
    unsigned short v;
    asm volatile("ld.global.cg.u16 %0, [%1];" : "=h"(v) : "l"(p));
    return v;
}
__device__ __forceinline__ u32 ld_cg_u32(const u32* p) {
    u32 v;
    asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}
__device__ __forceinline__ float ld_cg_f32(const float* p) {
    float v;
    asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p));
    return v;
}

// Dot product of 8 bf16 weights (one 16-byte vector) with 8 f32 values (the skinny
// products: gemv.cu, layer_chain_sm90.cu).
__device__ __forceinline__ float dot8(const u32x4& w, const float (&x)[8]) {
    return bf_lo(w.x) * x[0] + bf_hi(w.x) * x[1] + bf_lo(w.y) * x[2] + bf_hi(w.y) * x[3] +
           bf_lo(w.z) * x[4] + bf_hi(w.z) * x[5] + bf_lo(w.w) * x[6] + bf_hi(w.w) * x[7];
}

// This thread's sum of squares over vectors i0, i0 + step, ... below n8 (8 bf16 each), in
// that order: its share of an RMSNorm's row (gemv.cu's prologue, the layer chain, the
// folded norms' consumers).
__device__ __forceinline__ float sumsq_bf16x8(const u32x4* x4, int i0, int n8, int step) {
    float ss = 0.0f;
    for (int i = i0; i < n8; i += step) {
        u32x4 v = x4[i];
        u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float a = bf_lo(w[j]), b = bf_hi(w[j]);
            ss += a * a + b * b;
        }
    }
    return ss;
}

// rsqrt(mean(x²) + eps) of one row of `hidden` bf16 values (a multiple of 8, 16-byte
// aligned), by the whole block: an RMSNorm's factor, taken by the kernels that apply a
// norm folded into the product before them (rope.cu, activation.cu). `scratch`: 32 floats.
__device__ __forceinline__ float row_rms_inv(const bf16_t* __restrict__ x, int hidden, float eps,
                                             float* scratch) {
    const u32x4* x4 = reinterpret_cast<const u32x4*>(x);
    float ss = sumsq_bf16x8(x4, threadIdx.x, hidden / 8, blockDim.x);
    return rsqrtf(block_sum(ss, scratch) / (float)hidden + eps);
}
