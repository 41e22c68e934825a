// Layout helpers: column slices, row gathers and bias broadcast (bf16).
#include "common.cuh"

// dst[r, c] = src[r, col0 + c] for c < width; src rows are `src_cols` wide.
// grid: (rows, ceil(width / 8 / 128)); block: 128. width, col0, src_cols multiples of 8.
extern "C" __global__ void copy_cols(const bf16_t* __restrict__ src, int src_cols, int col0,
                                     bf16_t* __restrict__ dst, int width) {
    int r = blockIdx.x;
    int i = blockIdx.y * blockDim.x + threadIdx.x;
    if (i >= width / 8) return;
    reinterpret_cast<u32x4*>(dst + (size_t)r * width)[i] =
        reinterpret_cast<const u32x4*>(src + (size_t)r * src_cols + col0)[i];
}

// Scalar fallback of copy_cols for widths or offsets that are not multiples of 8.
// grid: (rows, ceil(width / 256)); block: 256.
extern "C" __global__ void copy_cols_scalar(const bf16_t* __restrict__ src, int src_cols,
                                            int col0, bf16_t* __restrict__ dst, int width) {
    int r = blockIdx.x;
    int i = blockIdx.y * blockDim.x + threadIdx.x;
    if (i < width) dst[(size_t)r * width + i] = src[(size_t)r * src_cols + col0 + i];
}

// dst[i, :] = src[rows[i], :] (cols wide). grid: n; block: 128.
extern "C" __global__ void gather_rows(const bf16_t* __restrict__ src, const int* __restrict__ rows,
                                       bf16_t* __restrict__ dst, int cols) {
    const bf16_t* s = src + (size_t)rows[blockIdx.x] * cols;
    bf16_t* d = dst + (size_t)blockIdx.x * cols;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) d[i] = s[i];
}

// out[r, :] = bias (bf16 bias into a bf16 or f32 output), ahead of a GEMM with beta = 1.
// grid: rows; block: 256.
extern "C" __global__ void bcast_rows_bf16(const bf16_t* __restrict__ bias, bf16_t* __restrict__ out,
                                           int n) {
    bf16_t* o = out + (size_t)blockIdx.x * n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) o[i] = bias[i];
}
extern "C" __global__ void bcast_rows_f32(const bf16_t* __restrict__ bias, float* __restrict__ out,
                                          int n) {
    float* o = out + (size_t)blockIdx.x * n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) o[i] = bf2f(bias[i]);
}

// bf16 -> f32 copy (sampling logits that arrive in bf16).
// grid: ceil(n / 256); block: 256.
extern "C" __global__ void bf16_to_f32(const bf16_t* __restrict__ src, float* __restrict__ dst,
                                       long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = bf2f(src[i]);
}

// Overlap scheduling: a decode token sampled by the step still in flight is
// taken on the device. tokens[pairs[2i]] = last[pairs[2i + 1]] for i < n, where
// `last` holds the tokens the previous step chose, by sample row.
// grid: ceil(n / 128); block: 128.
extern "C" __global__ void take_tokens(int* __restrict__ tokens, const int* __restrict__ pairs,
                                       int n, const u32* __restrict__ last) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) tokens[pairs[2 * i]] = (int)last[pairs[2 * i + 1]];
}

// y += x elementwise in bf16 (f32 sum, rounded once, as add_rmsnorm's add rounds):
// linear_add's product-then-add path. grid: ceil(n / 256); block: 256.
extern "C" __global__ void add_inplace_bf16(bf16_t* __restrict__ y, const bf16_t* __restrict__ x,
                                            long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = f2bf(bf2f(y[i]) + bf2f(x[i]));
}

// A hint, not a copy: bring [p, p + bytes) into L2 ahead of the product that reads it.
// A recorded decode step runs it on a second stream beside the product before that one
// (host/src/backend/cuda/prefetch.rs), so DRAM streams the next weights while the
// current product reads its own from L2. Writes nothing; nothing waits for it.
// Each thread covers one L2_PF_CHUNK-byte chunk a grid-stride round; a tail under
// 16 bytes is left out (the bulk prefetch's granule).
// grid: any; block: any. p 16-byte aligned.
#define L2_PF_CHUNK 4096ull
extern "C" __global__ void l2_prefetch(const char* __restrict__ p, unsigned long long bytes) {
    unsigned long long step = (unsigned long long)gridDim.x * blockDim.x * L2_PF_CHUNK;
    for (unsigned long long off = ((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x) * L2_PF_CHUNK;
         off < bytes; off += step) {
        unsigned long long n = bytes - off < L2_PF_CHUNK ? bytes - off : L2_PF_CHUNK;
#if __CUDA_ARCH__ >= 900
        // One bulk request a chunk: the copy engine walks its lines, not the threads.
        unsigned int n16 = (unsigned int)(n & ~15ull);
        if (n16 != 0)
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + off), "r"(n16)
                         : "memory");
#else
        for (unsigned long long i = 0; i < n; i += 128)
            asm volatile("prefetch.global.L2 [%0];" ::"l"(p + off + i));
#endif
    }
}
