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
