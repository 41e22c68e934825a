// Write this step's K and V rows into the paged KV cache of one layer.
#include "common.cuh"

// k, v: rows of `width = kv_heads * head_dim` bf16 at row strides k_stride / v_stride
// (elements), so they may point into a fused qkv buffer. slots[t] = page * page_size + offset.
// Caches: [num_pages * page_size, width]. grid: T; block: 128. `width` a multiple of 8,
// strides multiples of 8.
extern "C" __global__ void kv_store(const bf16_t* __restrict__ k, const bf16_t* __restrict__ v,
                                    int k_stride, int v_stride, const int* __restrict__ slots,
                                    bf16_t* __restrict__ k_cache, bf16_t* __restrict__ v_cache,
                                    int width) {
    int t = blockIdx.x;
    size_t slot = (size_t)(unsigned)slots[t];
    const u32x4* ks = reinterpret_cast<const u32x4*>(k + (size_t)t * k_stride);
    const u32x4* vs = reinterpret_cast<const u32x4*>(v + (size_t)t * v_stride);
    u32x4* kd = reinterpret_cast<u32x4*>(k_cache + (size_t)slot * width);
    u32x4* vd = reinterpret_cast<u32x4*>(v_cache + (size_t)slot * width);
    for (int i = threadIdx.x; i < width / 8; i += blockDim.x) {
        kd[i] = ks[i];
        vd[i] = vs[i];
    }
}
