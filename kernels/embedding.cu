// Embedding gather: out[t, :] = table[ids[t], :] (bf16 rows, 16-byte copies).
#include "common.cuh"

// grid: T blocks; block: 128 threads. `hidden` must be a multiple of 8.
// An id outside [0, vocab) writes a zero row (the host validates ids first;
// this only keeps a bad id from reading out of bounds).
extern "C" __global__ void embedding_gather(const bf16_t* __restrict__ table,
                                            const u32* __restrict__ ids,
                                            bf16_t* __restrict__ out, int hidden, int vocab) {
    int t = blockIdx.x;
    u32 id = ids[t];
    const u32x4* src = reinterpret_cast<const u32x4*>(table + (size_t)id * hidden);
    u32x4* dst = reinterpret_cast<u32x4*>(out + (size_t)t * hidden);
    int nvec = hidden / 8;
    bool ok = id < (u32)vocab;
    for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
        u32x4 v = {0u, 0u, 0u, 0u};
        if (ok) v = src[i];
        dst[i] = v;
    }
}
