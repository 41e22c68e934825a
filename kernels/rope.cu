// Rotary position embedding (rotate-half / NeoX layout), optionally preceded by a
// per-head RMSNorm (Qwen3's q_norm / k_norm), in place; and the same fused with the
// layer's K/V cache write over the qkv projection (qkv_rope_store_*).
#include "common.cuh"
#include "rope.cuh"

// grid: ceil(T * heads / 4); block: 128.
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
    float v[PER], sn[HD / 64], cs[HD / 64];
    load_head<HD>(p, lane, v);
    bool rotate = inv_freq != nullptr;
    if (rotate) rope_angles<HD>(sn, cs, lane, t, pos, inv_freq);
    norm_rope_regs<HD>(v, lane, norm_w, eps, rotate, sn, cs);
    store_head<HD>(p, lane, v);
}

// The rest of qkv_rope_store's work on head h of token row `row`, loaded into v: a v head
// copied to v_cache at `slot`, a q head normed and rotated in place, a k head normed,
// rotated and written to k_cache (shared by qkv_rope_store_* and qkv_rope_store_rms_*).
template <int HD>
__device__ __forceinline__ void rope_store_head(float (&v)[HD / 32], int h, int lane, bf16_t* row,
                                                int hq, int hkv, size_t slot,
                                                const bf16_t* __restrict__ q_norm,
                                                const bf16_t* __restrict__ k_norm, float eps,
                                                bool rotate, const float (&sn)[HD / 64],
                                                const float (&cs)[HD / 64],
                                                bf16_t* __restrict__ k_cache,
                                                bf16_t* __restrict__ v_cache) {
    if (h >= hq + hkv) {
        store_head<HD>(v_cache + (slot * hkv + (h - hq - hkv)) * HD, lane, v);
        return;
    }
    bool is_q = h < hq;
    norm_rope_regs<HD>(v, lane, is_q ? q_norm : k_norm, eps, rotate, sn, cs);
    bf16_t* dst = is_q ? row + (size_t)h * HD : k_cache + (slot * hkv + (h - hq)) * HD;
    store_head<HD>(dst, lane, v);
}

// Everything between the fused QKV projection and attention, in one launch over
// qkv: [T, row_stride] bf16 whose row t holds hq q heads, then hkv k heads, then hkv v
// heads of HD each:
//   q head: per-head RMSNorm with q_norm (null: none), then RoPE, in place;
//   k head: the same with k_norm, written only to k_cache at slots[t] (attention reads
//           K from the cache, so qkv's k columns are left as they were);
//   v head: copied to v_cache at slots[t].
// Caches: [slot][hkv][HD] bf16. The q/k math is norm_rope_hd*'s (norm_rope_regs), so the
// cached K equals norm_rope then kv_store bit for bit.
//
// One warp per G (1, 2 or 4) consecutive heads of one token: qkv_rope_store_hd* take
// one, qkv_rope_store_x2_hd* / _x4_hd* two and four. A warp issues all its heads' loads
// before any math and shares the token's sin/cos among them. With one head a warp a
// long prefill moved its bytes at ~40% of the copy rate (8,190 tokens of Qwen3-0.6B:
// 81 us); four a warp, 50 us. G is a template argument because the registers of four
// heads would also cut the one-head build's occupancy (43 registers a thread against
// 27: 40 warps an SM instead of 64), which costs decode, where the host picks one.
// row_stride even.
// grid: ceil(T * ceil(heads / G) / 4); block: 128.
template <int HD, int G>
__device__ __forceinline__ void qkv_rope_store_impl(
    bf16_t* __restrict__ qkv, int T, int hq, int hkv, int row_stride,
    const bf16_t* __restrict__ q_norm, const bf16_t* __restrict__ k_norm,
    const int* __restrict__ pos, const float* __restrict__ inv_freq, float eps,
    const int* __restrict__ slots, bf16_t* __restrict__ k_cache, bf16_t* __restrict__ v_cache) {
    constexpr int PER = HD / 32;
    pdl_trigger();
    pdl_wait();
    int heads = hq + 2 * hkv;
    int chunks = (heads + G - 1) / G;
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (warp >= T * chunks) return;
    int t = warp / chunks, h0 = (warp % chunks) * G;
    int n = min(G, heads - h0);
    bf16_t* row = qkv + (size_t)t * row_stride;
    float v[G][PER];
#pragma unroll
    for (int g = 0; g < G; g++)
        if (g < n) load_head<HD>(row + (size_t)(h0 + g) * HD, lane, v[g]);
    // The slot and angle loads issue beside the heads' loads instead of after them.
    size_t slot = h0 + n > hq ? (size_t)(unsigned)slots[t] : 0;
    bool rotate = inv_freq != nullptr && h0 < hq + hkv;
    float sn[HD / 64], cs[HD / 64];
    if (rotate) rope_angles<HD>(sn, cs, lane, t, pos, inv_freq);
#pragma unroll
    for (int g = 0; g < G; g++) {
        if (g >= n) break;
        rope_store_head<HD>(v[g], h0 + g, lane, row, hq, hkv, slot, q_norm, k_norm, eps, rotate,
                            sn, cs, k_cache, v_cache);
    }
}

// qkv_rope_store over a product of the raw residual stream whose input norm's weight was
// folded into w_qkv (norm.cu, scale_cols_bf16): every head of token t is first multiplied
// by the row's norm factor rsqrt(mean(res[t]^2) + res_eps), then gets qkv_rope_store's
// work (the same norm_rope_regs). Block (t, y) takes the factor once for the heads it
// covers (a warp a head would read the row once a head): its warps take runs of four
// heads, warp w of block y the runs y * warps + w, + gridDim.y * warps, ..., each run's
// loads issued before its math. Large batches use one block a token; small ones spread a
// token over gridDim.y blocks to keep the SMs busy. res: [T, hidden]. bias: the product's
// [heads * HD] bias (null: none), added after the factor, as the unfolded product adds it
// to the normed row's product (it is read in the math loop: the benchmark shapes have
// none, and their loads stay as they were).
// grid: (T, Y); block: 32 * warps.
template <int HD>
__device__ __forceinline__ void qkv_rope_store_rms_impl(
    bf16_t* __restrict__ qkv, int hq, int hkv, int row_stride, const bf16_t* __restrict__ q_norm,
    const bf16_t* __restrict__ k_norm, const int* __restrict__ pos,
    const float* __restrict__ inv_freq, float eps, const int* __restrict__ slots,
    bf16_t* __restrict__ k_cache, bf16_t* __restrict__ v_cache, const bf16_t* __restrict__ res,
    int hidden, float res_eps, const bf16_t* __restrict__ bias) {
    constexpr int PER = HD / 32, G = 4;
    __shared__ float scratch[32];
    pdl_trigger();
    pdl_wait();
    const int t = blockIdx.x;
    const int heads = hq + 2 * hkv;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    const float inv = row_rms_inv(res + (size_t)t * hidden, hidden, res_eps, scratch);
    bf16_t* row = qkv + (size_t)t * row_stride;
    const size_t slot = (size_t)(unsigned)slots[t];
    const bool rotate = inv_freq != nullptr;
    float sn[HD / 64], cs[HD / 64];
    if (rotate) rope_angles<HD>(sn, cs, lane, t, pos, inv_freq);
    for (int h0 = (blockIdx.y * warps + warp) * G; h0 < heads; h0 += gridDim.y * warps * G) {
        const int n = min(G, heads - h0);
        float v[G][PER];
#pragma unroll
        for (int g = 0; g < G; g++)
            if (g < n) load_head<HD>(row + (size_t)(h0 + g) * HD, lane, v[g]);
#pragma unroll
        for (int g = 0; g < G; g++) {
            if (g >= n) break;
#pragma unroll
            for (int j = 0; j < PER; j++) v[g][j] *= inv;
            if (bias != nullptr) {
                float b[PER];
                load_head<HD>(bias + (size_t)(h0 + g) * HD, lane, b);
#pragma unroll
                for (int j = 0; j < PER; j++) v[g][j] += b[j];
            }
            rope_store_head<HD>(v[g], h0 + g, lane, row, hq, hkv, slot, q_norm, k_norm, eps,
                                rotate, sn, cs, k_cache, v_cache);
        }
    }
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

#define QKV_ROPE_STORE(NAME, HD, G)                                                            \
    extern "C" __global__ void NAME(bf16_t* qkv, int T, int hq, int hkv, int row_stride,      \
                                    const bf16_t* q_norm, const bf16_t* k_norm, const int* pos, \
                                    const float* inv_freq, float eps, const int* slots,        \
                                    bf16_t* k_cache, bf16_t* v_cache) {                        \
        qkv_rope_store_impl<HD, G>(qkv, T, hq, hkv, row_stride, q_norm, k_norm, pos, inv_freq, \
                                   eps, slots, k_cache, v_cache);                              \
    }
QKV_ROPE_STORE(qkv_rope_store_hd64, 64, 1)
QKV_ROPE_STORE(qkv_rope_store_hd128, 128, 1)
QKV_ROPE_STORE(qkv_rope_store_hd256, 256, 1)
QKV_ROPE_STORE(qkv_rope_store_x2_hd64, 64, 2)
QKV_ROPE_STORE(qkv_rope_store_x2_hd128, 128, 2)
QKV_ROPE_STORE(qkv_rope_store_x2_hd256, 256, 2)
QKV_ROPE_STORE(qkv_rope_store_x4_hd64, 64, 4)
QKV_ROPE_STORE(qkv_rope_store_x4_hd128, 128, 4)
QKV_ROPE_STORE(qkv_rope_store_x4_hd256, 256, 4)

#define QKV_ROPE_STORE_RMS(HD)                                                                 \
    extern "C" __global__ void qkv_rope_store_rms_hd##HD(                                      \
        bf16_t* qkv, int T, int hq, int hkv, int row_stride, const bf16_t* q_norm,             \
        const bf16_t* k_norm, const int* pos, const float* inv_freq, float eps,                \
        const int* slots, bf16_t* k_cache, bf16_t* v_cache, const bf16_t* res, int hidden,     \
        float res_eps, const bf16_t* bias) {                                                   \
        (void)T;                                                                               \
        qkv_rope_store_rms_impl<HD>(qkv, hq, hkv, row_stride, q_norm, k_norm, pos, inv_freq,   \
                                    eps, slots, k_cache, v_cache, res, hidden, res_eps, bias); \
    }
QKV_ROPE_STORE_RMS(64)
QKV_ROPE_STORE_RMS(128)
QKV_ROPE_STORE_RMS(256)

// Element i of a head at src as the generic kernels take it: times `pre` (a folded input
// norm's row factor; 1 otherwise), plus bias[i] (the folded product's bias; null: none),
// in f32, so neither adds a rounding of its own.
__device__ __forceinline__ float generic_in(const bf16_t* src, int i, float pre,
                                            const bf16_t* bias) {
    float v = bf2f(src[i]) * pre;
    return bias != nullptr ? v + bf2f(bias[i]) : v;
}

// One head of norm_rope_generic: read from src, written to dst (the same head in place,
// or a cache row), elements strided over the warp as there, each taken as generic_in.
__device__ __forceinline__ void norm_rope_generic_head(const bf16_t* src, bf16_t* dst, int hd,
                                                       int lane, int t, const bf16_t* norm_w,
                                                       const int* pos, const float* inv_freq,
                                                       float eps, float pre = 1.0f,
                                                       const bf16_t* bias = nullptr) {
    float inv = 1.0f;
    if (norm_w != nullptr) {
        float ss = 0.0f;
        for (int i = lane; i < hd; i += 32) {
            float v = generic_in(src, i, pre, bias);
            ss += v * v;
        }
        inv = rsqrtf(warp_sum(ss) / (float)hd + eps);
    }
    int half = hd / 2;
    float fp = pos != nullptr ? (float)pos[t] : 0.0f;
    for (int i = lane; i < half; i += 32) {
        float a = generic_in(src, i, pre, bias), b = generic_in(src, i + half, pre, bias);
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

// The rest of qkv_rope_store_generic's work on head h of token t, at p in its qkv row:
// a q head normed and rotated in place, a k head normed, rotated and written to k_cache,
// a v head copied to v_cache; each element taken as generic_in with `pre` and this head's
// part of `bias` (shared by qkv_rope_store_generic and qkv_rope_store_rms_generic).
__device__ __forceinline__ void rope_store_generic_head(
    bf16_t* p, int h, int t, int lane, int hq, int hkv, size_t slot, const bf16_t* q_norm,
    const bf16_t* k_norm, const int* pos, const float* inv_freq, float eps, bf16_t* k_cache,
    bf16_t* v_cache, int hd, float pre = 1.0f, const bf16_t* bias = nullptr) {
    const bf16_t* hb = bias != nullptr ? bias + (size_t)h * hd : nullptr;
    if (h < hq) {
        norm_rope_generic_head(p, p, hd, lane, t, q_norm, pos, inv_freq, eps, pre, hb);
    } else if (h < hq + hkv) {
        bf16_t* dst = k_cache + (slot * hkv + (h - hq)) * hd;
        norm_rope_generic_head(p, dst, hd, lane, t, k_norm, pos, inv_freq, eps, pre, hb);
    } else {
        bf16_t* dst = v_cache + (slot * hkv + (h - hq - hkv)) * hd;
        if (pre == 1.0f && hb == nullptr) {  // a plain copy, 16 bytes a lane
            const u32x4* s4 = reinterpret_cast<const u32x4*>(p);
            u32x4* d4 = reinterpret_cast<u32x4*>(dst);
            for (int i = lane; i < hd / 8; i += 32) d4[i] = s4[i];
        } else {
            for (int i = lane; i < hd; i += 32) dst[i] = f2bf(generic_in(p, i, pre, hb));
        }
    }
}

// qkv_rope_store_hd*'s contract for any head_dim that is a multiple of 8 (the v copy
// moves 16 bytes a lane), with norm_rope_generic's math.
extern "C" __global__ void qkv_rope_store_generic(bf16_t* qkv, int T, int hq, int hkv,
                                                  int row_stride, const bf16_t* q_norm,
                                                  const bf16_t* k_norm, const int* pos,
                                                  const float* inv_freq, float eps,
                                                  const int* slots, bf16_t* k_cache,
                                                  bf16_t* v_cache, int hd) {
    // Launched with PDL under MINISGL_PDL like every qkv_rope_store_* (pdl.rs): the
    // product before it may still be writing qkv.
    pdl_trigger();
    pdl_wait();
    int heads = hq + 2 * hkv;
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (warp >= T * heads) return;
    int t = warp / heads, h = warp % heads;
    rope_store_generic_head(qkv + (size_t)t * row_stride + (size_t)h * hd, h, t, lane, hq, hkv,
                            (size_t)(unsigned)slots[t], q_norm, k_norm, pos, inv_freq, eps,
                            k_cache, v_cache, hd);
}

// qkv_rope_store_generic over a product of the raw residual stream whose input norm's
// weight was folded into w_qkv: each head is scaled by the token's norm factor
// rsqrt(mean(res[t]^2) + res_eps), then given its part of bias (null: none), as it is read
// (qkv_rope_store_rms_hd*'s contract for any head_dim that is a multiple of 8). Scaling in
// a pass of its own would round q and k to bf16 once more before the rotation.
// grid: T; block: 32 * warps (a warp a head, in turn).
extern "C" __global__ void qkv_rope_store_rms_generic(
    bf16_t* qkv, int T, int hq, int hkv, int row_stride, const bf16_t* q_norm,
    const bf16_t* k_norm, const int* pos, const float* inv_freq, float eps, const int* slots,
    bf16_t* k_cache, bf16_t* v_cache, int hd, const bf16_t* __restrict__ res, int hidden,
    float res_eps, const bf16_t* __restrict__ bias) {
    (void)T;
    __shared__ float scratch[32];
    pdl_trigger();
    pdl_wait();
    const int t = blockIdx.x;
    const float inv = row_rms_inv(res + (size_t)t * hidden, hidden, res_eps, scratch);
    const int heads = hq + 2 * hkv;
    const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    const size_t slot = (size_t)(unsigned)slots[t];
    for (int h = threadIdx.x >> 5; h < heads; h += warps)
        rope_store_generic_head(qkv + (size_t)t * row_stride + (size_t)h * hd, h, t, lane, hq,
                                hkv, slot, q_norm, k_norm, pos, inv_freq, eps, k_cache, v_cache,
                                hd, inv, bias);
}
