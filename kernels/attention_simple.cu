// Plain paged attention: one block per (query token, query head), any head_dim
// that is a multiple of 8 and at most 256, any page size. Portable (no tensor cores,
// no warp-size tricks beyond shuffles) and easy to read: the GPU-side reference
// for the fast kernels and the `--attention-backend simple` fallback.
#include "common.cuh"

#define SIMPLE_TILE 128

// Ragged batch metadata, shared by every attention kernel:
//   q_start[B + 1]:   cumulative query-token offsets (tokens of sequence b are rows
//                     q_start[b] .. q_start[b + 1] of q and o);
//   kv_len[B]:        context length of b after this step (cached prefix + new tokens);
//                     new token i of b sits at position kv_len[b] - n_new + i and attends
//                     to positions 0 ..= its own (causal);
//   page_start[B + 1], page_ids[]: page table of b is page_ids[page_start[b] ..];
//                     position p lives in page page_ids[page_start[b] + p / page_size],
//                     slot p % page_size;
//   tok_seq[T]:       sequence index of each query row.
// Caches: [num_pages, page_size, kv_heads, HD]. q rows are `q_stride` elements apart
// (head h at h * HD); o is [T, q_heads * HD]. grid: (T, q_heads); block: 128.
extern "C" __global__ void attn_simple(const bf16_t* __restrict__ q, int q_stride,
                                       bf16_t* __restrict__ o, const bf16_t* __restrict__ k_cache,
                                       const bf16_t* __restrict__ v_cache,
                                       const int* __restrict__ q_start,
                                       const int* __restrict__ kv_len,
                                       const int* __restrict__ page_start,
                                       const int* __restrict__ page_ids,
                                       const int* __restrict__ tok_seq, int q_heads, int kv_heads,
                                       int hd, int page_size, float scale) {
    __shared__ float qs[256];
    __shared__ float ps[SIMPLE_TILE];
    __shared__ size_t rows[SIMPLE_TILE];
    __shared__ float scratch[32];
    int t = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
    int s = tok_seq[t];
    int n_new = q_start[s + 1] - q_start[s];
    int my_pos = kv_len[s] - n_new + (t - q_start[s]);
    int n_ctx = my_pos + 1;
    int kvh = h / (q_heads / kv_heads);
    const int* pages = page_ids + page_start[s];
    for (int d = tid; d < hd; d += blockDim.x) qs[d] = bf2f(q[(size_t)t * q_stride + h * hd + d]);
    float m = NEG_INF, l = 0.0f;
    float acc[2] = {0.0f, 0.0f};  // dims tid and tid + 128
    __syncthreads();
    for (int base = 0; base < n_ctx; base += SIMPLE_TILE) {
        int j = base + tid;
        float sc = NEG_INF;
        if (j < n_ctx) {
            size_t row = ((size_t)pages[j / page_size] * page_size + j % page_size) * kv_heads + kvh;
            rows[tid] = row;
            const u32x4* k4 = reinterpret_cast<const u32x4*>(k_cache + row * hd);
            float dot = 0.0f;
            for (int i = 0; i < hd / 8; i++) {
                u32x4 kv = k4[i];
                u32 w[4] = {kv.x, kv.y, kv.z, kv.w};
#pragma unroll
                for (int e = 0; e < 4; e++)
                    dot += qs[i * 8 + 2 * e] * bf_lo(w[e]) + qs[i * 8 + 2 * e + 1] * bf_hi(w[e]);
            }
            sc = dot * scale;
        }
        float m_new = fmaxf(m, block_max(sc, scratch));
        float p = j < n_ctx ? __expf(sc - m_new) : 0.0f;
        ps[tid] = p;
        float alpha = __expf(m - m_new);
        l = l * alpha + block_sum(p, scratch);
        m = m_new;
        __syncthreads();
        int cnt = min(SIMPLE_TILE, n_ctx - base);
#pragma unroll
        for (int r = 0; r < 2; r++) {
            int d = tid + r * 128;
            if (d < hd) {
                float a = acc[r] * alpha;
                for (int jj = 0; jj < cnt; jj++) a += ps[jj] * bf2f(v_cache[rows[jj] * hd + d]);
                acc[r] = a;
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int d = tid + r * 128;
        if (d < hd) o[(size_t)t * q_heads * hd + h * hd + d] = f2bf(acc[r] / l);
    }
}
