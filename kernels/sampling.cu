// Logits processing and sampling on the device, exact over the full vocabulary.
// Rows are f32 logits, `vocab` long, `row_stride` elements apart; one block of
// 1024 threads per row. Ties in argmax and top-K go to the lower token id.
// row_partials, row_select and topk_rows also read bf16 rows (the `_bf16` builds: the
// LM head's own output under MINISGL_LOGITS_BF16, where no row is processed), each
// value widened to f32 as it is read; process_logits writes f32 only.
#include "common.cuh"

#define SAMPLE_THREADS 1024
#define TOPK_CAP 1024

struct ValIdx { float v; int i; };

__device__ __forceinline__ ValIdx better(ValIdx a, ValIdx b) {
    if (b.v > a.v || (b.v == a.v && b.i < a.i)) return b;
    return a;
}

// Block-wide argmax (NaN counts as -inf); every thread gets the result.
__device__ __forceinline__ ValIdx block_argmax(ValIdx x, float* sv, int* si) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        ValIdx y = {__shfl_xor_sync(0xffffffffu, x.v, o), __shfl_xor_sync(0xffffffffu, x.i, o)};
        x = better(x, y);
    }
    __syncthreads();
    if (lane == 0) { sv[warp] = x.v; si[warp] = x.i; }
    __syncthreads();
    ValIdx r = lane < nwarps ? ValIdx{sv[lane], si[lane]} : ValIdx{NEG_INF, 0x7fffffff};
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        ValIdx y = {__shfl_xor_sync(0xffffffffu, r.v, o), __shfl_xor_sync(0xffffffffu, r.i, o)};
        r = better(r, y);
    }
    return r;
}

__device__ __forceinline__ float clean(float v) { return v != v ? NEG_INF : v; }

// Logit i of a row, as f32.
__device__ __forceinline__ float ld(const float* x, int i) { return x[i]; }
__device__ __forceinline__ float ld(const bf16_t* x, int i) { return bf2f(x[i]); }

// Values of T in a 16-byte load.
template <typename T>
struct Per16 {
    static constexpr int value = 16 / (int)sizeof(T);
};

// Whether every row of `logits` starts 16-byte aligned.
template <typename T>
__device__ __forceinline__ bool vec_rows(const T* logits, int row_stride) {
    return (row_stride & (Per16<T>::value - 1)) == 0 && (reinterpret_cast<size_t>(logits) & 15) == 0;
}

struct __align__(16) f32x4 { float x, y, z, w; };

// Folds N cleaned logits with ids idx into a thread's argmax `best` and its sum
// s = sum exp(x - best.v) (online: s is rescaled when the max grows). A thread meets
// its ids in increasing order, so keeping the first of equal values is the lowest-id
// rule, without better()'s id compare (a row of only -inf still picks id 0: see `am`).
template <int N>
__device__ __forceinline__ void online_add(ValIdx& best, float& s, const float (&v)[N],
                                           const int (&idx)[N]) {
    float m = best.v;
#pragma unroll
    for (int j = 0; j < N; j++) {
        bool up = v[j] > best.v;
        best.v = up ? v[j] : best.v;
        best.i = up ? idx[j] : best.i;
    }
    if (best.v > m) s *= __expf(m - best.v);  // m = -inf: s is still 0
    if (best.v != NEG_INF) {
#pragma unroll
        for (int j = 0; j < N; j++) s += __expf(v[j] - best.v);
    }
}

__device__ __forceinline__ void online_add4(ValIdx& best, float& s, f32x4 q, int i0) {
    float v[4] = {clean(q.x), clean(q.y), clean(q.z), clean(q.w)};
    int idx[4] = {i0, i0 + 1, i0 + 2, i0 + 3};
    online_add<4>(best, s, v, idx);
}

// Eight bf16 logits of one 16-byte load, cleaned, into v[0, 8).
__device__ __forceinline__ void unpack8(const u32x4& q, float* v) {
    const u32 w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
        v[2 * j] = clean(bf_lo(w[j]));
        v[2 * j + 1] = clean(bf_hi(w[j]));
    }
}

// Argmax (ties lowest id) of x[0, vocab) and the sum of exp(x - max) in one read:
// each thread keeps an online (max, sum), then the block merges the maxima and
// rescales each thread's sum to the row max. 16-byte loads when `vec` (x 16-byte
// aligned). The sum is 0 when every value is -inf (or NaN).
template <typename T>
__device__ __forceinline__ void row_max_sum(const T* __restrict__ x, int vocab, bool vec,
                                            float* sv, int* si, ValIdx* best_out,
                                            float* sum_out) {
    ValIdx best = {NEG_INF, 0x7fffffff};
    float s = 0.0f;
    int start = 0;
    if constexpr (sizeof(T) == 2) {
        if (vec) {
            // Two 16-byte loads (16 values) a step, both issued before either is used.
            const u32x4* x8 = reinterpret_cast<const u32x4*>(x);
            int nv = vocab >> 3, nt = blockDim.x;
            int i = threadIdx.x;
            for (; i + nt < nv; i += 2 * nt) {
                u32x4 a = x8[i], b = x8[i + nt];
                float v[16];
                unpack8(a, v);
                unpack8(b, v + 8);
                int idx[16];
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    idx[j] = 8 * i + j;
                    idx[8 + j] = 8 * (i + nt) + j;
                }
                online_add<16>(best, s, v, idx);
            }
            if (i < nv) {
                float v[8];
                unpack8(x8[i], v);
                int idx[8];
#pragma unroll
                for (int j = 0; j < 8; j++) idx[j] = 8 * i + j;
                online_add<8>(best, s, v, idx);
            }
            start = nv * 8;
        }
    } else if (vec) {
        const f32x4* x4 = reinterpret_cast<const f32x4*>(x);
        int nv = vocab >> 2, nt = blockDim.x;
        int i = threadIdx.x;
        // Two vectors a step, both loads issued before either is used.
        for (; i + nt < nv; i += 2 * nt) {
            f32x4 a = x4[i], b = x4[i + nt];
            float v[8] = {clean(a.x), clean(a.y), clean(a.z), clean(a.w),
                          clean(b.x), clean(b.y), clean(b.z), clean(b.w)};
            int ia = 4 * i, ib = 4 * (i + nt);
            int idx[8] = {ia, ia + 1, ia + 2, ia + 3, ib, ib + 1, ib + 2, ib + 3};
            online_add<8>(best, s, v, idx);
        }
        if (i < nv) online_add4(best, s, x4[i], 4 * i);
        start = nv * 4;
    }
    for (int i = start + threadIdx.x; i < vocab; i += blockDim.x) {
        float v[1] = {clean(ld(x, i))};
        int idx[1] = {i};
        online_add<1>(best, s, v, idx);
    }
    float m = best.v;
    best = block_argmax(best, sv, si);
    float z = m == NEG_INF ? 0.0f : s * __expf(m - best.v);
    *best_out = best;
    *sum_out = block_sum(z, sv);
}

// Rows of the logits are cut into `gridDim.y` chunks of `chunk` values (a multiple of
// 8, so a chunk of an aligned row starts 16-byte aligned in f32 and bf16) when a step has fewer rows than SMs: one block a row streams 600 KB (Qwen3's
// 151,936 f32 logits) with one SM's loads in flight, 16.6 µs at batch 1 (Nsight
// Compute, 2026-12-04) against the LM head's 77 µs for 311 MB. Block (b, c) writes
// chunk c's argmax (id within the row; 0x7fffffff for a chunk of only -inf / NaN) and
// sum of exp(x - its max) to [b * chunks + c]; row_select merges them.
// grid: (B, chunks); block: 1024 (at 256 threads a batch-64 step's 320 blocks had too
// few loads in flight: 17.0 µs against row_select's 21.5 for 39 MB, 2026-12-04).
template <typename T>
__device__ __forceinline__ void row_partials_impl(const T* __restrict__ logits, int vocab,
                                                  int row_stride, int chunk,
                                                  float* __restrict__ part_v,
                                                  int* __restrict__ part_i,
                                                  float* __restrict__ part_s) {
    __shared__ float sv[32];
    __shared__ int si[32];
    int b = blockIdx.x, c = blockIdx.y;
    int c0 = c * chunk;
    int n = min(chunk, vocab - c0);
    const T* x = logits + (size_t)b * row_stride + c0;
    bool vec = vec_rows(logits, row_stride) && (c0 & (Per16<T>::value - 1)) == 0;
    ValIdx best;
    float z;
    row_max_sum(x, n, vec, sv, si, &best, &z);
    if (threadIdx.x == 0) {
        size_t at = (size_t)b * gridDim.y + c;
        part_v[at] = best.v;
        part_i[at] = best.i == 0x7fffffff ? best.i : best.i + c0;
        part_s[at] = z;
    }
}

#define ROW_PARTIALS(NAME, T)                                                                  \
    extern "C" __global__ void __launch_bounds__(SAMPLE_THREADS, 2)                           \
        NAME(const T* __restrict__ logits, int vocab, int row_stride, int chunk,               \
             float* __restrict__ part_v, int* __restrict__ part_i, float* __restrict__ part_s) { \
        row_partials_impl<T>(logits, vocab, row_stride, chunk, part_v, part_i, part_s);        \
    }
ROW_PARTIALS(row_partials, float)
ROW_PARTIALS(row_partials_bf16, bf16_t)

// In-place logits processing, the CPU reference's order (backend/cpu/sampling.rs), row b:
//   1. allowed tokens: when allowed_start[b + 1] > allowed_start[b], every other token
//      becomes -inf (`mask` is a [B, ceil(vocab / 32)] u32 scratch);
//   2. logit bias entries bias_start[b] ..: x += bias (ids unique per row, < vocab);
//   3. penalties over the distinct history tokens pen_start[b] .. pen_start[b + 1]
//      (prompt and output): repetition (x > 0 ? x / rep : x * rep) when rep != 1, then
//      x -= frequency * out_count + presence when out_count > 0;
//   4. x /= temperature[b] (1 for none).
// grid: B; block: 1024.
extern "C" __global__ void process_logits(
    float* __restrict__ logits, int vocab, int row_stride, const int* __restrict__ pen_start,
    const int* __restrict__ pen_tok, const int* __restrict__ pen_out_count,
    const float* __restrict__ rep_pen, const float* __restrict__ presence,
    const float* __restrict__ frequency, const int* __restrict__ bias_start,
    const int* __restrict__ bias_tok, const float* __restrict__ bias_val,
    const int* __restrict__ allowed_start, const int* __restrict__ allowed_tok,
    u32* __restrict__ mask, const float* __restrict__ temperature) {
    int b = blockIdx.x;
    float* x = logits + (size_t)b * row_stride;
    int a0 = allowed_start[b], a1 = allowed_start[b + 1];
    if (a1 > a0) {
        int words = (vocab + 31) / 32;
        u32* mrow = mask + (size_t)b * words;
        for (int i = threadIdx.x; i < words; i += blockDim.x) mrow[i] = 0u;
        __syncthreads();
        for (int e = a0 + threadIdx.x; e < a1; e += blockDim.x) {
            int tok = allowed_tok[e];
            atomicOr(&mrow[tok >> 5], 1u << (tok & 31));
        }
        __syncthreads();
        for (int i = threadIdx.x; i < vocab; i += blockDim.x)
            if (!((mrow[i >> 5] >> (i & 31)) & 1u)) x[i] = NEG_INF;
    }
    __syncthreads();
    for (int e = bias_start[b] + threadIdx.x; e < bias_start[b + 1]; e += blockDim.x)
        x[bias_tok[e]] += bias_val[e];
    __syncthreads();
    float rep = rep_pen[b], pres = presence[b], freq = frequency[b];
    for (int e = pen_start[b] + threadIdx.x; e < pen_start[b + 1]; e += blockDim.x) {
        int tok = pen_tok[e];
        float v = x[tok];
        if (rep != 1.0f) v = v > 0.0f ? v / rep : v * rep;
        int c = pen_out_count[e];
        if (c > 0) v -= freq * (float)c + pres;
        x[tok] = v;
    }
    __syncthreads();
    float t = temperature[b];
    if (t != 1.0f)
        for (int i = threadIdx.x; i < vocab; i += blockDim.x) x[i] = x[i] / t;
}

// Largest key K such that the weight of elements with key(x) >= max(K, floor) reaches
// `target` (weight 1 per element when `mass` is false, exp(x - mx) when true), by a
// 4-pass most-significant-digit radix select over 8-bit digits.
template <typename T>
__device__ u32 radix_select(const T* __restrict__ x, int vocab, u32 floor_key, bool mass,
                            float mx, float target, float* hist, u32* shared_prefix) {
    u32 prefix = 0, prefix_mask = 0;
    float above = 0.0f;  // weight already known to lie above the current bin range
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0.0f;
        __syncthreads();
        for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
            float v = clean(ld(x, i));
            u32 k = float_key(v);
            if (k < floor_key || (k & prefix_mask) != prefix) continue;
            atomicAdd(&hist[(k >> shift) & 255u], mass ? __expf(v - mx) : 1.0f);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            float acc = above;
            int bin = 0;
            for (int d = 255; d >= 0; d--) {
                if (acc + hist[d] >= target) { bin = d; break; }
                acc += hist[d];
            }
            shared_prefix[0] = prefix | ((u32)bin << shift);
            reinterpret_cast<float*>(shared_prefix)[1] = acc;
        }
        __syncthreads();
        prefix = shared_prefix[0];
        above = reinterpret_cast<float*>(shared_prefix)[1];
        prefix_mask |= 255u << shift;
        __syncthreads();
    }
    return prefix;
}

__device__ __forceinline__ u64 splitmix64(u64 z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// The CPU reference's counter-based Gumbel noise for token t under `seed`.
__device__ __forceinline__ float gumbel(u64 seed, u32 t) {
    u64 bits = splitmix64(seed ^ ((u64)t * 0x9e3779b97f4a7c15ull));
    float u = ((float)(bits >> 40) + 0.5f) * (1.0f / 16777216.0f);
    return -logf(-logf(u));
}

// Per row of processed logits l: argmax (ties lowest id), log-sum-exp, and when
// `truncate[b]` the truncation threshold (a float_key: a token is kept when its key is
// >= thr[b]; top-k ties at the boundary all kept; top-p keeps a token when the kept mass
// strictly above it is < top_p; min-p keeps p >= min_p * max p; the argmax is always
// kept), the log of the kept probability mass, and when `seed_on[b]` the Gumbel-max
// draw over the kept tokens; chosen_lp[b] = log-softmax at the drawn (else argmax) token. top_k <= 0 or >= vocab, top_p >= 1, min_p <= 0: off.
// With chunks > 0 the argmax and log-sum-exp come from row_partials' chunks instead of
// a pass over the row. grid: B; block: 1024.
template <typename T>
__device__ __forceinline__ void row_select_impl(
    const T* __restrict__ logits, int vocab, int row_stride, const int* __restrict__ truncate,
    const int* __restrict__ top_k, const float* __restrict__ top_p,
    const float* __restrict__ min_p, const int* __restrict__ seed_on,
    const u64* __restrict__ seed, u32* __restrict__ argmax_tok, float* __restrict__ lse_out,
    u32* __restrict__ thr_out, float* __restrict__ lkept_out, u32* __restrict__ drawn,
    float* __restrict__ chosen_lp, const float* __restrict__ part_v,
    const int* __restrict__ part_i, const float* __restrict__ part_s, int chunks) {
    __shared__ float sv[32];
    __shared__ int si[32];
    __shared__ float hist[256];
    __shared__ u32 sp[2];
    int b = blockIdx.x;
    const T* x = logits + (size_t)b * row_stride;
    bool vec = vec_rows(logits, row_stride);
    ValIdx best;
    float z;
    if (chunks > 0) {
        // Merge row_partials' chunks: the argmax over them (ties lowest id), and each
        // chunk's sum rescaled to the row max.
        best = ValIdx{NEG_INF, 0x7fffffff};
        const size_t p0 = (size_t)b * chunks;
        for (int c = threadIdx.x; c < chunks; c += blockDim.x)
            best = better(best, ValIdx{part_v[p0 + c], part_i[p0 + c]});
        best = block_argmax(best, sv, si);
        float zs = 0.0f;
        for (int c = threadIdx.x; c < chunks; c += blockDim.x)
            if (part_v[p0 + c] != NEG_INF) zs += part_s[p0 + c] * __expf(part_v[p0 + c] - best.v);
        z = block_sum(zs, sv);
    } else {
        row_max_sum(x, vocab, vec, sv, si, &best, &z);
    }
    float lse = best.v + logf(z);
    int am = best.i == 0x7fffffff ? 0 : best.i;
    float mx = best.v;
    if (threadIdx.x == 0) {
        argmax_tok[b] = (u32)am;
        lse_out[b] = lse;
    }
    if (!truncate[b] || mx == NEG_INF) {
        if (threadIdx.x == 0) {
            thr_out[b] = float_key(NEG_INF) + 1u;
            lkept_out[b] = 0.0f;
            drawn[b] = (u32)am;
            chosen_lp[b] = clean(ld(x, am)) - lse;
        }
        return;
    }
    // Tokens at -inf are never kept.
    u32 thr = float_key(NEG_INF) + 1u;
    int k = top_k[b];
    if (k > 0 && k < vocab) thr = max(thr, radix_select(x, vocab, 0u, false, mx, (float)k, hist, sp));
    float p = top_p[b];
    if (p < 1.0f) {
        float zk = 0.0f;
        for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
            float v = clean(ld(x, i));
            if (float_key(v) >= thr) zk += __expf(v - mx);
        }
        zk = block_sum(zk, sv);
        thr = max(thr, radix_select(x, vocab, thr, true, mx, p * zk, hist, sp));
    }
    float mp = min_p[b];
    if (mp > 0.0f) thr = max(thr, float_key(mx + logf(mp)));
    thr = min(thr, float_key(mx));
    float kept = 0.0f;
    ValIdx pick = {NEG_INF, 0x7fffffff};
    bool draw = seed_on[b] != 0;
    u64 sd = seed[b];
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        float v = clean(ld(x, i));
        if (float_key(v) < thr) continue;
        kept += __expf(v - mx);
        if (draw) pick = better(pick, ValIdx{v + gumbel(sd, (u32)i), i});
    }
    kept = block_sum(kept, sv);
    if (draw) pick = block_argmax(pick, sv, si);
    if (threadIdx.x == 0) {
        thr_out[b] = thr;
        lkept_out[b] = logf(kept) + mx - lse;
        int c = draw && pick.i != 0x7fffffff ? pick.i : am;
        drawn[b] = (u32)c;
        chosen_lp[b] = clean(ld(x, c)) - lse;
    }
}

#define ROW_SELECT(NAME, T)                                                                    \
    extern "C" __global__ void __launch_bounds__(SAMPLE_THREADS, 2) NAME(                     \
        const T* __restrict__ logits, int vocab, int row_stride,                               \
        const int* __restrict__ truncate, const int* __restrict__ top_k,                       \
        const float* __restrict__ top_p, const float* __restrict__ min_p,                      \
        const int* __restrict__ seed_on, const u64* __restrict__ seed,                         \
        u32* __restrict__ argmax_tok, float* __restrict__ lse_out, u32* __restrict__ thr_out,  \
        float* __restrict__ lkept_out, u32* __restrict__ drawn, float* __restrict__ chosen_lp, \
        const float* __restrict__ part_v, const int* __restrict__ part_i,                      \
        const float* __restrict__ part_s, int chunks) {                                        \
        row_select_impl<T>(logits, vocab, row_stride, truncate, top_k, top_p, min_p, seed_on,  \
                           seed, argmax_tok, lse_out, thr_out, lkept_out, drawn, chosen_lp,    \
                           part_v, part_i, part_s, chunks);                                    \
    }
ROW_SELECT(row_select, float)
ROW_SELECT(row_select_bf16, bf16_t)

// The k most likely tokens of each row (k <= 256) among those with key >= floor[b]
// (floor null: all), with their raw values, most likely first, ties to the lower id.
// Fewer than k qualifying tokens leave id 0xffffffff. out_tok / out_val: [B, k].
// grid: B; block: 1024.
template <typename T>
__device__ __forceinline__ void topk_rows_impl(const T* __restrict__ logits, int vocab,
                                               int row_stride, int k,
                                               const u32* __restrict__ floor,
                                               u32* __restrict__ out_tok,
                                               float* __restrict__ out_val) {
    __shared__ float hist[256];
    __shared__ u32 sp[2];
    __shared__ u64 cand[TOPK_CAP];
    __shared__ int count;
    int b = blockIdx.x;
    const T* x = logits + (size_t)b * row_stride;
    u32 fl = floor != nullptr ? floor[b] : 0u;
    u32 thr = k < vocab ? max(fl, radix_select(x, vocab, fl, false, 0.0f, (float)k, hist, sp)) : fl;
    if (threadIdx.x == 0) count = 0;
    for (int i = threadIdx.x; i < TOPK_CAP; i += blockDim.x) cand[i] = 0ull;
    __syncthreads();
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        u32 key = float_key(clean(ld(x, i)));
        if (key >= thr) {
            int slot = atomicAdd(&count, 1);
            // Key high, inverted id low: sorting descending puts ties in id order.
            if (slot < TOPK_CAP) cand[slot] = ((u64)key << 32) | (u64)(0xffffffffu - (u32)i);
        }
    }
    __syncthreads();
    // Bitonic sort, descending, of TOPK_CAP entries.
    for (int size = 2; size <= TOPK_CAP; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = threadIdx.x; i < TOPK_CAP; i += blockDim.x) {
                int j = i ^ stride;
                if (j > i) {
                    bool desc = (i & size) == 0;
                    u64 a = cand[i], c = cand[j];
                    if ((a < c) == desc) { cand[i] = c; cand[j] = a; }
                }
            }
            __syncthreads();
        }
    }
    for (int i = threadIdx.x; i < k; i += blockDim.x) {
        u64 c = cand[i];
        out_tok[(size_t)b * k + i] = c == 0ull ? 0xffffffffu : 0xffffffffu - (u32)(c & 0xffffffffull);
        out_val[(size_t)b * k + i] = c == 0ull ? NEG_INF : key_float((u32)(c >> 32));
    }
}

#define TOPK_ROWS(NAME, T)                                                                     \
    extern "C" __global__ void NAME(const T* __restrict__ logits, int vocab, int row_stride,  \
                                    int k, const u32* __restrict__ floor,                      \
                                    u32* __restrict__ out_tok, float* __restrict__ out_val) {  \
        topk_rows_impl<T>(logits, vocab, row_stride, k, floor, out_tok, out_val);              \
    }
TOPK_ROWS(topk_rows, float)
TOPK_ROWS(topk_rows_bf16, bf16_t)

// The token each row chose: the Gumbel-max draw where the row samples, else the
// argmax of the processed row (row_select's outputs). Kept on the device for the
// next step's take_tokens. grid: ceil(rows / 128); block: 128.
extern "C" __global__ void chosen_tokens(const u32* __restrict__ argmax_tok,
                                         const u32* __restrict__ drawn,
                                         const int* __restrict__ seed_on, int rows,
                                         u32* __restrict__ out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows) out[i] = seed_on[i] ? drawn[i] : argmax_tok[i];
}
