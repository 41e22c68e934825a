// RMSNorm, optionally fused with the residual add that precedes it.
#include "common.cuh"

// Per row t (one block a row, of as many threads as the host's `norm_threads` gives for
// the width): add_rmsnorm_row (common.cuh), which gemv.cu's residual epilogue shares so
// that the two round identically at the same block size.
extern "C" __global__ void add_rmsnorm(bf16_t* __restrict__ residual,
                                       const bf16_t* __restrict__ delta,
                                       const bf16_t* __restrict__ weight,
                                       bf16_t* __restrict__ out, int hidden, float eps) {
    __shared__ float scratch[32];
    size_t row = (size_t)blockIdx.x * hidden;
    add_rmsnorm_row(residual + row, delta != nullptr ? delta + row : nullptr, weight, out + row,
                    hidden, eps, scratch);
}
