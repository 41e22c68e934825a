// The per-head layout, RMSNorm and rotation of rope.cu's kernels, shared with
// layer_chain_sm90.cu, whose attention phase must cache K exactly as qkv_rope_store does
// (a later step may read it through either path). Included after common.cuh (the
// NVRTC build pastes headers once each, in the order a family includes them).

// One warp per head. Lane l holds PER = HD / 32 elements of it, v[j], where v[j] and
// v[j + PER / 2] are a rotate-half pair (elements i and i + HD / 2), so the rotation
// stays in the lane. At HD >= 128 a lane's elements come in bf16 pairs, 2l and 2l + 1
// of each 64-element block, so a warp moves a head in 4-byte words (PER / 2 loads of
// 128 contiguous bytes); at HD = 64 a lane holds elements l and l + 32.
//
// x:        [T, row_stride] bf16; head h of token t starts at x + t * row_stride + h * HD.
// norm_w:   [HD] bf16 per-head RMSNorm weight, or null for no norm.
// pos:      [T] positions.
// inv_freq: [HD / 2] f32 inverse frequencies, already scaled (Llama-3 scaling is
//           applied by the host when it builds this table), or null for no rotation.
template <int HD>
__device__ __forceinline__ int head_elem(int j, int lane) {
    constexpr int PER = HD / 32;
    if constexpr (HD == 64) {
        return j * 32 + lane;
    } else {
        return (j / (PER / 2)) * (HD / 2) + ((j % (PER / 2)) / 2) * 64 + 2 * lane + (j & 1);
    }
}

template <int HD>
__device__ __forceinline__ void load_head(const bf16_t* __restrict__ p, int lane,
                                          float (&v)[HD / 32]) {
    constexpr int PER = HD / 32;
    if constexpr (HD == 64) {
        v[0] = bf2f(p[lane]);
        v[1] = bf2f(p[lane + 32]);
    } else {
#pragma unroll
        for (int j = 0; j < PER; j += 2) {
            u32 w = *reinterpret_cast<const u32*>(p + head_elem<HD>(j, lane));
            v[j] = bf_lo(w);
            v[j + 1] = bf_hi(w);
        }
    }
}

template <int HD>
__device__ __forceinline__ void store_head(bf16_t* __restrict__ p, int lane,
                                           const float (&v)[HD / 32]) {
    constexpr int PER = HD / 32;
    if constexpr (HD == 64) {
        p[lane] = f2bf(v[0]);
        p[lane + 32] = f2bf(v[1]);
    } else {
#pragma unroll
        for (int j = 0; j < PER; j += 2)
            *reinterpret_cast<u32*>(p + head_elem<HD>(j, lane)) = pack_bf16x2(v[j], v[j + 1]);
    }
}

// The rotation's sin and cos of a lane's first-half elements at position fp, freq(j) its
// j-th inverse frequency: the same for every head of the token, so the fused kernel
// computes them once per warp. freq reads inv_freq where it is used (rope_angles), or
// values loaded ahead (the layer chain's attention).
template <int HD, typename Freq>
__device__ __forceinline__ void rope_angles_by(float (&sn)[HD / 64], float (&cs)[HD / 64],
                                               float fp, Freq freq) {
#pragma unroll
    for (int j = 0; j < HD / 64; j++) sincosf(fp * freq(j), &sn[j], &cs[j]);
}

template <int HD>
__device__ __forceinline__ void rope_angles(float (&sn)[HD / 64], float (&cs)[HD / 64], int lane,
                                            int t, const int* __restrict__ pos,
                                            const float* __restrict__ inv_freq) {
    rope_angles_by<HD>(sn, cs, (float)pos[t],
                       [&](int j) { return inv_freq[head_elem<HD>(j, lane)]; });
}

// The norm (by weights weight(j), when `norm`) and rotation of one head in that layout,
// shared by norm_rope_hd*, qkv_rope_store_hd* and the layer chain's attention so the
// fused paths round exactly as the unfused one (same f32 sum order, same expressions).
// sn / cs: rope_angles', or null-rotation when !rotate. weight(j) reads the norm weight
// where it is used (norm_rope_regs: loading it ahead put rope.cu's x2 kernels at 39
// registers a thread against 32) or returns values loaded ahead (the layer chain).
template <int HD, typename Weight>
__device__ __forceinline__ void norm_rope_regs_by(float (&v)[HD / 32], Weight weight, bool norm,
                                                  float eps, bool rotate,
                                                  const float (&sn)[HD / 64],
                                                  const float (&cs)[HD / 64]) {
    constexpr int PER = HD / 32;
    if (norm) {
        float ss = 0.0f;
#pragma unroll
        for (int j = 0; j < PER; j++) ss += v[j] * v[j];
        float inv = rsqrtf(warp_sum(ss) / (float)HD + eps);
#pragma unroll
        for (int j = 0; j < PER; j++) v[j] = v[j] * inv * weight(j);
    }
    if (rotate) {
#pragma unroll
        for (int j = 0; j < PER / 2; j++) {
            float a = v[j], b = v[j + PER / 2];
            v[j] = a * cs[j] - b * sn[j];
            v[j + PER / 2] = b * cs[j] + a * sn[j];
        }
    }
}

// qkv_rope_store's arguments past the qkv rows and the head counts, in its order: what
// the kernels that take over its work (the folded decode, the Hopper GEMM's rope
// epilogue) read too. Null norms: none; null inv_freq: no rotation.
struct RopeStoreArgs {
    const bf16_t* q_norm;
    const bf16_t* k_norm;
    const int* pos;
    const float* inv_freq;
    float eps;
    const int* slots;
};

// norm_rope_regs_by with the norm weight read where it is used (null: no norm).
template <int HD>
__device__ __forceinline__ void norm_rope_regs(float (&v)[HD / 32], int lane,
                                               const bf16_t* __restrict__ norm_w, float eps,
                                               bool rotate, const float (&sn)[HD / 64],
                                               const float (&cs)[HD / 64]) {
    norm_rope_regs_by<HD>(
        v, [&](int j) { return bf2f(norm_w[head_elem<HD>(j, lane)]); }, norm_w != nullptr, eps,
        rotate, sn, cs);
}
