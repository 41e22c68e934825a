// Rotary position embedding (rotate-half / NeoX layout), optionally preceded by a
// per-head RMSNorm (Qwen3's q_norm / k_norm), in place.
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
#pragma unroll
    for (int j = 0; j < PER; j++) p[lane + 32 * j] = f2bf(v[j]);
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
    float inv = 1.0f;
    if (norm_w != nullptr) {
        float ss = 0.0f;
        for (int i = lane; i < hd; i += 32) {
            float v = bf2f(p[i]);
            ss += v * v;
        }
        inv = rsqrtf(warp_sum(ss) / (float)hd + eps);
    }
    int half = hd / 2;
    float fp = pos != nullptr ? (float)pos[t] : 0.0f;
    for (int i = lane; i < half; i += 32) {
        float a = bf2f(p[i]), b = bf2f(p[i + half]);
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
        p[i] = f2bf(a);
        p[i + half] = f2bf(b);
    }
}
