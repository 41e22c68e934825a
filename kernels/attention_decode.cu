// Split-KV paged decode attention (flash-decoding), GQA-aware: one block reads
// each K/V row of its kv head once and uses it for every query head of the group.
// Metadata layout: see attention_simple.cu. Only the last query row of each
// sequence is computed (a decode batch has exactly one new token per sequence).
#include "common.cuh"

#define DECODE_WARPS 4
#define DECODE_MIN_PART 32

// Rows of the context handled by each split of sequence `ctx` long when the grid has
// `splits` splits; shared with the combine kernel.
__device__ __forceinline__ int decode_part(int ctx, int splits) {
    int part = (ctx + splits - 1) / splits;
    return part < DECODE_MIN_PART ? DECODE_MIN_PART : part;
}

// grid: (splits, kv_heads * head_chunks, B); block: 128.
// Block (s, y, b) handles query heads kvh * group + hc * GMAX + [0, GMAX) of sequence b
// over context rows [s * part, (s + 1) * part), kvh = y / head_chunks, hc = y % head_chunks.
// Writes normalized partial outputs o_part[b, h, s, :] (f32) and their log2-sum-exp
// lse_part[b, h, s] for attn_decode_combine.
template <int HD, int GMAX>
__device__ __forceinline__ void decode_impl(
    const bf16_t* __restrict__ q, int q_stride, const bf16_t* __restrict__ k_cache,
    const bf16_t* __restrict__ v_cache, const int* __restrict__ q_start,
    const int* __restrict__ kv_len, const int* __restrict__ page_start,
    const int* __restrict__ page_ids, int q_heads, int kv_heads, int page_size, float scale,
    int head_chunks, float* __restrict__ o_part, float* __restrict__ lse_part) {
    constexpr int LPR = HD / 8;                 // lanes per K/V row (16 bytes each)
    constexpr int RGW = 32 / LPR;               // row groups per warp
    constexpr int RG = DECODE_WARPS * RGW;      // row groups per block
    constexpr int R = GMAX >= 8 ? 2 : 4;        // rows per row group per iteration
    __shared__ float sm_m[RG][GMAX];
    __shared__ float sm_l[RG][GMAX];
    __shared__ float sm_acc[RG][GMAX][HD];

    int split = blockIdx.x, b = blockIdx.z;
    int kvh = blockIdx.y / head_chunks, hc = blockIdx.y % head_chunks;
    int group = q_heads / kv_heads;
    int h0 = kvh * group + hc * GMAX;
    int nh = min(GMAX, group - hc * GMAX);
    int ctx = kv_len[b];
    int part = decode_part(ctx, gridDim.x);
    int c0 = split * part;
    if (c0 >= ctx) return;
    int c1 = min(ctx, c0 + part);
    int t = q_start[b + 1] - 1;
    const int* pages = page_ids + page_start[b];

    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int rg = warp * RGW + lane / LPR, li = lane % LPR;
    float qs = scale * LOG2E;
    float qv[GMAX][8];
#pragma unroll
    for (int g = 0; g < GMAX; g++) {
        if (g < nh) {
            u32x4 w = *reinterpret_cast<const u32x4*>(q + (size_t)t * q_stride + (h0 + g) * HD + li * 8);
            u32 ww[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
            for (int e = 0; e < 4; e++) {
                qv[g][2 * e] = bf_lo(ww[e]) * qs;
                qv[g][2 * e + 1] = bf_hi(ww[e]) * qs;
            }
        } else {
#pragma unroll
            for (int e = 0; e < 8; e++) qv[g][e] = 0.0f;
        }
    }
    float m[GMAX], l[GMAX], acc[GMAX][8];
#pragma unroll
    for (int g = 0; g < GMAX; g++) {
        m[g] = NEG_INF;
        l[g] = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; e++) acc[g][e] = 0.0f;
    }

    // The trip count must be the same for every lane of a warp (the shuffles below
    // use a full mask), so iterate per warp and mask rows past the end instead.
    int rgw = lane / LPR;  // row group within the warp
    for (int wbase = c0 + warp * RGW * R; wbase < c1; wbase += RG * R) {
        int base = wbase + rgw * R;
        u32x4 kr[R], vr[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            int p = base + r;
            if (p < c1) {
                size_t row = ((size_t)pages[p / page_size] * page_size + p % page_size) * kv_heads + kvh;
                kr[r] = *reinterpret_cast<const u32x4*>(k_cache + row * HD + li * 8);
                vr[r] = *reinterpret_cast<const u32x4*>(v_cache + row * HD + li * 8);
            } else {
                kr[r] = u32x4{0u, 0u, 0u, 0u};
                vr[r] = u32x4{0u, 0u, 0u, 0u};
            }
        }
        float s[R][GMAX];
#pragma unroll
        for (int r = 0; r < R; r++) {
            u32 kw[4] = {kr[r].x, kr[r].y, kr[r].z, kr[r].w};
            float kf[8];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                kf[2 * e] = bf_lo(kw[e]);
                kf[2 * e + 1] = bf_hi(kw[e]);
            }
#pragma unroll
            for (int g = 0; g < GMAX; g++) {
                float d = 0.0f;
#pragma unroll
                for (int e = 0; e < 8; e++) d += qv[g][e] * kf[e];
#pragma unroll
                for (int off = LPR / 2; off > 0; off >>= 1) d += __shfl_xor_sync(0xffffffffu, d, off);
                s[r][g] = (base + r < c1) ? d : NEG_INF;
            }
        }
        float vf[R][8];
#pragma unroll
        for (int r = 0; r < R; r++) {
            u32 vw[4] = {vr[r].x, vr[r].y, vr[r].z, vr[r].w};
#pragma unroll
            for (int e = 0; e < 4; e++) {
                vf[r][2 * e] = bf_lo(vw[e]);
                vf[r][2 * e + 1] = bf_hi(vw[e]);
            }
        }
#pragma unroll
        for (int g = 0; g < GMAX; g++) {
            float mx = m[g];
#pragma unroll
            for (int r = 0; r < R; r++) mx = fmaxf(mx, s[r][g]);
            // A row group whose rows all lie past the end (warp-uniform loop) sees only
            // -inf: keep its state unchanged instead of computing exp2(-inf - -inf).
            float mref = mx == NEG_INF ? 0.0f : mx;
            float alpha = exp2f(m[g] - mref);
            float pr[R];
            float psum = 0.0f;
#pragma unroll
            for (int r = 0; r < R; r++) {
                pr[r] = exp2f(s[r][g] - mref);
                psum += pr[r];
            }
            l[g] = l[g] * alpha + psum;
            m[g] = mx;
#pragma unroll
            for (int e = 0; e < 8; e++) {
                float a = acc[g][e] * alpha;
#pragma unroll
                for (int r = 0; r < R; r++) a += pr[r] * vf[r][e];
                acc[g][e] = a;
            }
        }
    }

#pragma unroll
    for (int g = 0; g < GMAX; g++) {
        if (li == 0) {
            sm_m[rg][g] = m[g];
            sm_l[rg][g] = l[g];
        }
#pragma unroll
        for (int e = 0; e < 8; e++) sm_acc[rg][g][li * 8 + e] = acc[g][e];
    }
    __syncthreads();
    int splits = gridDim.x;
    for (int idx = threadIdx.x; idx < nh * HD; idx += blockDim.x) {
        int g = idx / HD, d = idx % HD;
        float M = NEG_INF;
#pragma unroll
        for (int i = 0; i < RG; i++) M = fmaxf(M, sm_m[i][g]);
        float L = 0.0f, O = 0.0f;
#pragma unroll
        for (int i = 0; i < RG; i++) {
            float w = sm_m[i][g] == NEG_INF ? 0.0f : exp2f(sm_m[i][g] - M);
            L += sm_l[i][g] * w;
            O += sm_acc[i][g][d] * w;
        }
        size_t bh = (size_t)b * q_heads + h0 + g;
        o_part[(bh * splits + split) * HD + d] = O / L;
        if (d == 0) lse_part[bh * splits + split] = M + log2f(L);
    }
}

#define DECODE(HD, G)                                                                          \
    extern "C" __global__ void __launch_bounds__(128) attn_decode_hd##HD##_g##G(                \
        const bf16_t* q, int q_stride, const bf16_t* k_cache, const bf16_t* v_cache,          \
        const int* q_start, const int* kv_len, const int* page_start, const int* page_ids,   \
        int q_heads, int kv_heads, int page_size, float scale, int head_chunks, float* o_part, \
        float* lse_part) {                                                                     \
        decode_impl<HD, G>(q, q_stride, k_cache, v_cache, q_start, kv_len, page_start,         \
                           page_ids, q_heads, kv_heads, page_size, scale, head_chunks, o_part, \
                           lse_part);                                                          \
    }
DECODE(64, 1)
DECODE(64, 2)
DECODE(64, 4)
DECODE(64, 8)
DECODE(128, 1)
DECODE(128, 2)
DECODE(128, 4)
DECODE(128, 8)

// Merge the splits: o[t, h, :] = sum_s w_s o_part[b, h, s, :] / sum_s w_s,
// w_s = 2^(lse_s - max lse). grid: (B, q_heads); block: 128. `splits` is the grid.x
// of the decode launch.
extern "C" __global__ void attn_decode_combine(const float* __restrict__ o_part,
                                               const float* __restrict__ lse_part,
                                               const int* __restrict__ q_start,
                                               const int* __restrict__ kv_len,
                                               bf16_t* __restrict__ o, int q_heads, int hd,
                                               int splits) {
    __shared__ float w[256];
    __shared__ float scratch[32];
    int b = blockIdx.x, h = blockIdx.y;
    int ctx = kv_len[b];
    int part = decode_part(ctx, splits);
    int n = (ctx + part - 1) / part;
    size_t bh = (size_t)b * q_heads + h;
    float M = NEG_INF;
    for (int s = threadIdx.x; s < n; s += blockDim.x) M = fmaxf(M, lse_part[bh * splits + s]);
    M = block_max(M, scratch);
    float tot = 0.0f;
    for (int s = threadIdx.x; s < n; s += blockDim.x) {
        float ws = exp2f(lse_part[bh * splits + s] - M);
        w[s] = ws;
        tot += ws;
    }
    tot = block_sum(tot, scratch);
    __syncthreads();
    int t = q_start[b + 1] - 1;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float acc = 0.0f;
        for (int s = 0; s < n; s++) acc += w[s] * o_part[(bh * splits + s) * hd + d];
        o[(size_t)t * q_heads * hd + h * hd + d] = f2bf(acc / tot);
    }
}
