// Rotary position embedding (rotate-half / NeoX layout), optionally preceded by a
// per-head RMSNorm (Qwen3's q_norm / k_norm), in place; and the same fused with the
// layer's K/V cache write over the qkv projection (qkv_rope_store_*).
#include "common.cuh"

// One warp per (token, head). Lane l holds elements l + 32 j, j < HD / 32; element i
// (i < HD / 2) pairs with i + HD / 2, which lives in the same lane at j + HD / 64.
//
// x:        [T, row_stride] bf16; head h of token t starts at x + t * row_stride + h * HD.
// norm_w:   [HD] bf16 per-head RMSNorm weight, or null for no norm.
// pos:      [T] positions.
// inv_freq: [HD / 2] f32 inverse frequencies, already scaled (Llama-3 scaling is
//           applied by the host when it builds this table), or null for no rotation.
// grid: ceil(T * heads / 4); block: 128.
//
// The norm and rotation of one head in that layout, shared by norm_rope_hd* and
// qkv_rope_store_hd* so the fused path rounds exactly as the unfused one (same f32 sum
// order, same expressions).
template <int HD>
__device__ __forceinline__ void norm_rope_regs(float (&v)[HD / 32], int lane, int t,
                                               const bf16_t* __restrict__ norm_w,
                                               const int* __restrict__ pos,
                                               const float* __restrict__ inv_freq, float eps) {
    constexpr int PER = HD / 32;
    if (norm_w != nullptr) {
        float ss = 0.0f;
#pragma unroll
        for (int j = 0; j < PER; j++) ss += v[j] * v[j];
        float inv = rsqrtf(warp_sum(ss) / (float)HD + eps);
#pragma unroll
        for (int j = 0; j < PER; j++) v[j] = v[j] * inv * bf2f(norm_w[lane + 32 * j]);
    }
    if (inv_freq != nullptr) {
        float fp = (float)pos[t];
#pragma unroll
        for (int j = 0; j < PER / 2; j++) {
            float s, c;
            sincosf(fp * inv_freq[lane + 32 * j], &s, &c);
            float a = v[j], b = v[j + PER / 2];
            v[j] = a * c - b * s;
            v[j + PER / 2] = b * c + a * s;
        }
    }
}

template <int HD>
__device__ __forceinline__ void norm_rope_impl(bf16_t* __restrict__ x, int T, int heads,
                                               int row_stride, const bf16_t* __restrict__ norm_w,
                                               const int* __restrict__ pos,
                                               const float* __restrict__ inv_freq, float eps) {
    constexpr int PER = HD / 32;
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (warp >= T * heads) return;
    int t = warp / heads, h = warp % heads;
    bf16_t* p = x + (size_t)t * row_stride + (size_t)h * HD;
    float v[PER];
#pragma unroll
    for (int j = 0; j < PER; j++) v[j] = bf2f(p[lane + 32 * j]);
    norm_rope_regs<HD>(v, lane, t, norm_w, pos, inv_freq, eps);
#pragma unroll
    for (int j = 0; j < PER; j++) p[lane + 32 * j] = f2bf(v[j]);
}

// Everything between the fused QKV projection and attention, in one launch over
// qkv: [T, row_stride] bf16 whose row t holds hq q heads, then hkv k heads, then hkv v
// heads of HD each. One warp per (token, head):
//   q head: per-head RMSNorm with q_norm (null: none), then RoPE, in place;
//   k head: the same with k_norm, written only to k_cache at slots[t] (attention reads
//           K from the cache, so qkv's k columns are left as they were);
//   v head: copied to v_cache at slots[t], 16 bytes a lane.
// Caches: [slot][hkv][HD] bf16. The q/k math is norm_rope_hd*'s (norm_rope_regs), so the
// cached K equals norm_rope then kv_store bit for bit; that is also why q/k keep its lane
// layout (2-byte accesses, still coalesced: a warp has the head's bytes in flight either
// way) instead of 16-byte vectors, which would change the norm's f32 sum order.
// row_stride a multiple of 8.
// grid: ceil(T * (hq + 2 hkv) / 4); block: 128.
template <int HD>
__device__ __forceinline__ void qkv_rope_store_impl(
    bf16_t* __restrict__ qkv, int T, int hq, int hkv, int row_stride,
    const bf16_t* __restrict__ q_norm, const bf16_t* __restrict__ k_norm,
    const int* __restrict__ pos, const float* __restrict__ inv_freq, float eps,
    const int* __restrict__ slots, bf16_t* __restrict__ k_cache, bf16_t* __restrict__ v_cache) {
    constexpr int PER = HD / 32;
    pdl_trigger();
    pdl_wait();
    int heads = hq + 2 * hkv;
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (warp >= T * heads) return;
    int t = warp / heads, h = warp % heads;
    bf16_t* p = qkv + (size_t)t * row_stride + (size_t)h * HD;
    if (h >= hq + hkv) {
        size_t slot = (size_t)(unsigned)slots[t];
        bf16_t* dst = v_cache + (slot * hkv + (h - hq - hkv)) * HD;
        if (lane < HD / 8)
            reinterpret_cast<u32x4*>(dst)[lane] = reinterpret_cast<const u32x4*>(p)[lane];
        return;
    }
    bool is_q = h < hq;
    // The slot load issues beside the head's loads instead of after the math.
    bf16_t* dst = is_q ? p : k_cache + ((size_t)(unsigned)slots[t] * hkv + (h - hq)) * HD;
    float v[PER];
#pragma unroll
    for (int j = 0; j < PER; j++) v[j] = bf2f(p[lane + 32 * j]);
    norm_rope_regs<HD>(v, lane, t, is_q ? q_norm : k_norm, pos, inv_freq, eps);
#pragma unroll
    for (int j = 0; j < PER; j++) dst[lane + 32 * j] = f2bf(v[j]);
}

#define NORM_ROPE(HD)                                                                          \
    extern "C" __global__ void norm_rope_hd##HD(bf16_t* x, int T, int heads, int row_stride,  \
                                                const bf16_t* norm_w, const int* pos,        \
                                                const float* inv_freq, float eps) {          \
        norm_rope_impl<HD>(x, T, heads, row_stride, norm_w, pos, inv_freq, eps);             \
    }
NORM_ROPE(64)
NORM_ROPE(128)
NORM_ROPE(256)

#define QKV_ROPE_STORE(HD)                                                                     \
    extern "C" __global__ void qkv_rope_store_hd##HD(                                          \
        bf16_t* qkv, int T, int hq, int hkv, int row_stride, const bf16_t* q_norm,           \
        const bf16_t* k_norm, const int* pos, const float* inv_freq, float eps,              \
        const int* slots, bf16_t* k_cache, bf16_t* v_cache) {                                \
        qkv_rope_store_impl<HD>(qkv, T, hq, hkv, row_stride, q_norm, k_norm, pos, inv_freq,  \
                                eps, slots, k_cache, v_cache);                               \
    }
QKV_ROPE_STORE(64)
QKV_ROPE_STORE(128)
QKV_ROPE_STORE(256)

// One head of norm_rope_generic: read from src, written to dst (the same head in place,
// or a cache row), elements strided over the warp as there.
__device__ __forceinline__ void norm_rope_generic_head(const bf16_t* src, bf16_t* dst, int hd,
                                                       int lane, int t, const bf16_t* norm_w,
                                                       const int* pos, const float* inv_freq,
                                                       float eps) {
    float inv = 1.0f;
    if (norm_w != nullptr) {
        float ss = 0.0f;
        for (int i = lane; i < hd; i += 32) {
            float v = bf2f(src[i]);
            ss += v * v;
        }
        inv = rsqrtf(warp_sum(ss) / (float)hd + eps);
    }
    int half = hd / 2;
    float fp = pos != nullptr ? (float)pos[t] : 0.0f;
    for (int i = lane; i < half; i += 32) {
        float a = bf2f(src[i]), b = bf2f(src[i + half]);
        if (norm_w != nullptr) {
            a = a * inv * bf2f(norm_w[i]);
            b = b * inv * bf2f(norm_w[i + half]);
        }
        if (inv_freq != nullptr) {
            float s, c;
            sincosf(fp * inv_freq[i], &s, &c);
            float ra = a * c - b * s, rb = b * c + a * s;
            a = ra;
            b = rb;
        }
        dst[i] = f2bf(a);
        dst[i + half] = f2bf(b);
    }
}

// Any even head_dim up to 1024 (tiny test models use 16 and 32): same contract as
// norm_rope_hd*, reading each element from memory instead of keeping the head in registers.
extern "C" __global__ void norm_rope_generic(bf16_t* x, int T, int heads, int row_stride,
                                             const bf16_t* norm_w, const int* pos,
                                             const float* inv_freq, float eps, int hd) {
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (warp >= T * heads) return;
    int t = warp / heads, h = warp % heads;
    bf16_t* p = x + (size_t)t * row_stride + (size_t)h * hd;
    norm_rope_generic_head(p, p, hd, lane, t, norm_w, pos, inv_freq, eps);
}

// qkv_rope_store_hd*'s contract for any head_dim that is a multiple of 8 (the v copy
// moves 16 bytes a lane), with norm_rope_generic's math.
extern "C" __global__ void qkv_rope_store_generic(bf16_t* qkv, int T, int hq, int hkv,
                                                  int row_stride, const bf16_t* q_norm,
                                                  const bf16_t* k_norm, const int* pos,
                                                  const float* inv_freq, float eps,
                                                  const int* slots, bf16_t* k_cache,
                                                  bf16_t* v_cache, int hd) {
    int heads = hq + 2 * hkv;
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (warp >= T * heads) return;
    int t = warp / heads, h = warp % heads;
    bf16_t* p = qkv + (size_t)t * row_stride + (size_t)h * hd;
    if (h < hq) {
        norm_rope_generic_head(p, p, hd, lane, t, q_norm, pos, inv_freq, eps);
        return;
    }
    size_t slot = (size_t)(unsigned)slots[t];
    if (h < hq + hkv) {
        bf16_t* dst = k_cache + (slot * hkv + (h - hq)) * hd;
        norm_rope_generic_head(p, dst, hd, lane, t, k_norm, pos, inv_freq, eps);
        return;
    }
    const u32x4* s4 = reinterpret_cast<const u32x4*>(p);
    u32x4* d4 = reinterpret_cast<u32x4*>(v_cache + (slot * hkv + (h - hq - hkv)) * hd);
    for (int i = lane; i < hd / 8; i += 32) d4[i] = s4[i];
}
