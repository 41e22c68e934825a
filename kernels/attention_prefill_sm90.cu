// Paged prefill / extend attention for Hopper (sm_90a): causal, cached prefix, GQA,
// head_dim 64 or 128. Same contract and metadata as attention_prefill.cu, but the
// matrix products run on wgmma (warpgroup MMA) reading K and V from 128-byte-swizzled
// shared memory. A block is two warpgroups (256 threads), each owning 64 query rows
// of a 128-row tile; both share the K/V tiles, which halves the shared-memory and L2
// traffic per FLOP compared with 64-row tiles.
//
// Pipelining (what made it 2-3x faster than a plain wgmma loop):
// - K/V tiles ride a 3-stage cp.async ring, and the page ids of the tile after next
//   are fetched a whole iteration early, so no thread waits on a page-table read;
// - Q K^T of tile j+1 is issued before the softmax of tile j, so the tensor cores
//   work while the warps compute exponentials (FlashAttention-3's intra-warpgroup
//   overlap), and P V of tile j follows.
//
// Compiled only for sm_90a (wgmma does not exist elsewhere); other devices use
// attention_prefill.cu (mma.sync).
#include "common.cuh"
#include "hopper.cuh"

#define H_BQ 128
#define H_THREADS 256

#ifndef H_BK
#define H_BK 64
#endif

#define H_STAGES 3

__device__ __forceinline__ void wgmma_m64n64k16_rs_t0(float* d, const u32* a, u64 desc, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(acc));
}

__device__ __forceinline__ void wgmma_m64n64k16_rs_t1(float* d, const u32* a, u64 desc, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(acc));
}

__device__ __forceinline__ void wgmma_m64n128k16_rs_t0(float* d, const u32* a, u64 desc, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(acc));
}

__device__ __forceinline__ void wgmma_m64n128k16_rs_t1(float* d, const u32* a, u64 desc, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(acc));
}

__device__ __forceinline__ u32 pack_bf16x2_fast(float lo, float hi) {
    u32 r;  // round-to-nearest-even, as f2bf; P holds no NaN
    // volatile: keeps the packing above the next wgmma.fence, so ptxas need not
    // inject a warpgroup.arrive of its own.
    asm volatile("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// Tile layout in shared memory (K and V alike): head_dim split into 64-column blocks;
// block b is [H_BK rows][128 bytes], the 16-byte chunk c of row r stored at chunk
// c ^ (r & 7) (the hardware's 128-byte swizzle; the tile base is 1024-byte aligned).
__device__ __forceinline__ u32 tile_off(int r, int c) {
    return (u32)((c >> 3) * (H_BK * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

template <int HD>
struct Loader {
    static constexpr int CH = HD / 8;                   // 16-byte chunks per row
    static constexpr int PASS = H_THREADS / CH;          // rows covered per pass
    static constexpr int ROWS = H_BK / PASS;             // rows per thread
    const bf16_t* k_cache;
    const bf16_t* v_cache;
    const int* pages;
    int kv_end, kv_heads, kvh, page_size, page_shift;  // page_shift < 0: not a power of 2

    __device__ __forceinline__ int page_of(int p) const {
        return page_shift >= 0 ? (p >> page_shift) : p / page_size;
    }
    __device__ __forceinline__ int in_page(int p) const {
        return page_shift >= 0 ? (p & (page_size - 1)) : p % page_size;
    }
    // Page ids of this thread's rows of the tile starting at kb.
    __device__ __forceinline__ void fetch(int kb, int (&pg)[ROWS]) const {
        int r0 = threadIdx.x / CH;
#pragma unroll
        for (int i = 0; i < ROWS; i++) {
            int p = kb + r0 + i * PASS;
            pg[i] = p < kv_end ? __ldg(pages + page_of(p)) : 0;
        }
    }
    __device__ __forceinline__ void copy(u32 ks, int kb, const int (&pg)[ROWS]) const {
        u32 vs = ks + H_BK * HD * 2;
        int c = threadIdx.x % CH, r0 = threadIdx.x / CH;
#pragma unroll
        for (int i = 0; i < ROWS; i++) {
            int r = r0 + i * PASS, p = kb + r;
            bool valid = p < kv_end;
            size_t row = ((size_t)pg[i] * page_size + in_page(p)) * kv_heads + kvh;
            u32 off = tile_off(r, c);
            cp_async16(ks + off, k_cache + row * HD + c * 8, valid);
            cp_async16(vs + off, v_cache + row * HD + c * 8, valid);
        }
    }
};

// One warpgroup's state over a 64-row slice of the query tile.
template <int HD>
struct Rows {
    float oacc[HD / 2];
    float m0, m1, l0, l1;
    int pos0, pos1, first_pos;
    float sl2;

    // S -> P (bf16 A fragments), running max and sum; returns in al0/al1 the factors
    // by which O must be rescaled once the previous P V has landed.
    __device__ __forceinline__ void softmax(float (&s)[H_BK / 2], int kb, u32 (&pf)[H_BK / 16][4],
                                            float& al0, float& al1) {
        int tq = threadIdx.x & 3;
        bool diag = kb + H_BK > first_pos;
        float mx0 = NEG_INF, mx1 = NEG_INF;
#pragma unroll
        for (int nt = 0; nt < H_BK / 8; nt++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float v = s[nt * 4 + e] * sl2;
                if (diag) {
                    int col = kb + nt * 8 + 2 * tq + (e & 1);
                    if (col > (e < 2 ? pos0 : pos1)) v = NEG_INF;
                }
                s[nt * 4 + e] = v;
            }
            mx0 = fmaxf(mx0, fmaxf(s[nt * 4 + 0], s[nt * 4 + 1]));
            mx1 = fmaxf(mx1, fmaxf(s[nt * 4 + 2], s[nt * 4 + 3]));
        }
        mx0 = quad_max(mx0);
        mx1 = quad_max(mx1);
        float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
        if (mn0 == NEG_INF) mn0 = 0.0f;  // rows past the sequence see only masked scores
        if (mn1 == NEG_INF) mn1 = 0.0f;
        al0 = exp2f(m0 - mn0);
        al1 = exp2f(m1 - mn1);
        m0 = mn0;
        m1 = mn1;
        float rs0 = 0.0f, rs1 = 0.0f;
#pragma unroll
        for (int nt = 0; nt < H_BK / 8; nt++) {
            s[nt * 4 + 0] = exp2f(s[nt * 4 + 0] - mn0);
            s[nt * 4 + 1] = exp2f(s[nt * 4 + 1] - mn0);
            s[nt * 4 + 2] = exp2f(s[nt * 4 + 2] - mn1);
            s[nt * 4 + 3] = exp2f(s[nt * 4 + 3] - mn1);
            rs0 += s[nt * 4 + 0] + s[nt * 4 + 1];
            rs1 += s[nt * 4 + 2] + s[nt * 4 + 3];
        }
        l0 = l0 * al0 + rs0;
        l1 = l1 * al1 + rs1;
#pragma unroll
        for (int c = 0; c < H_BK / 16; c++) {
            pf[c][0] = pack_bf16x2_fast(s[(2 * c) * 4 + 0], s[(2 * c) * 4 + 1]);
            pf[c][1] = pack_bf16x2_fast(s[(2 * c) * 4 + 2], s[(2 * c) * 4 + 3]);
            pf[c][2] = pack_bf16x2_fast(s[(2 * c + 1) * 4 + 0], s[(2 * c + 1) * 4 + 1]);
            pf[c][3] = pack_bf16x2_fast(s[(2 * c + 1) * 4 + 2], s[(2 * c + 1) * 4 + 3]);
        }
    }

    __device__ __forceinline__ void rescale(float al0, float al1) {
#pragma unroll
        for (int dt = 0; dt < HD / 8; dt++) {
            oacc[dt * 4 + 0] *= al0;
            oacc[dt * 4 + 1] *= al0;
            oacc[dt * 4 + 2] *= al1;
            oacc[dt * 4 + 3] *= al1;
        }
    }
};

template <int HD>
__device__ __forceinline__ void issue_qk(float (&s)[H_BK / 2], const u32 (&qf)[HD / 16][4], u32 ks) {
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++) {
        u64 d = desc_sw128(ks + (kk >> 2) * (H_BK * 128) + (kk & 3) * 32, 16, 1024);
        if constexpr (H_BK == 64)
            wgmma_m64n64k16_rs_t0(s, qf[kk], d, kk);
        else
            wgmma_m64n128k16_rs_t0(s, qf[kk], d, kk);
    }
}

// V is N-major (head_dim contiguous): LBO steps between 64-column blocks, SBO between
// groups of 8 key rows.
template <int HD>
__device__ __forceinline__ void issue_pv(float (&o)[HD / 2], const u32 (&pf)[H_BK / 16][4], u32 vs) {
#pragma unroll
    for (int c = 0; c < H_BK / 16; c++) {
        u64 d = desc_sw128(vs + c * 16 * 128, H_BK * 128, 1024);
        if constexpr (HD == 64)
            wgmma_m64n64k16_rs_t1(o, pf[c], d, 1);
        else
            wgmma_m64n128k16_rs_t1(o, pf[c], d, 1);
    }
}

template <int HD>
__device__ __forceinline__ void prefill_sm90_impl(
    const bf16_t* __restrict__ q, int q_stride, bf16_t* __restrict__ o,
    const bf16_t* __restrict__ k_cache, const bf16_t* __restrict__ v_cache,
    const int* __restrict__ q_start, const int* __restrict__ kv_len,
    const int* __restrict__ page_start, const int* __restrict__ page_ids,
    const int* __restrict__ tile_seq, const int* __restrict__ tile_q0, int num_tiles, int q_heads,
    int kv_heads, int page_size, float scale) {
    extern __shared__ unsigned char smem_raw[];
    constexpr int STAGE_BYTES = 2 * H_BK * HD * 2;  // K then V
    u32 base = (smem_u32(smem_raw) + 1023u) & ~1023u;

    // Heaviest tiles first: within a sequence the tile list runs from short to long
    // causal spans.
    int tile = num_tiles - 1 - blockIdx.x, h = blockIdx.y;
    int s = tile_seq[tile], q0 = tile_q0[tile];
    int qs0 = q_start[s], n_new = q_start[s + 1] - qs0;
    int ctx = kv_len[s], prefix = ctx - n_new;

    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
    int wq0 = q0 + (warp >> 2) * 64;                  // this warpgroup's first row
    int r0 = wq0 + (warp & 3) * 16 + g, r1 = r0 + 8;  // this thread's two rows
    int q_last = min(q0 + H_BQ, n_new) - 1;
    int kv_end = prefix + q_last + 1;

    Loader<HD> ld;
    ld.k_cache = k_cache;
    ld.v_cache = v_cache;
    ld.pages = page_ids + page_start[s];
    ld.kv_end = kv_end;
    ld.kv_heads = kv_heads;
    ld.kvh = h / (q_heads / kv_heads);
    ld.page_size = page_size;
    ld.page_shift = (page_size & (page_size - 1)) == 0 ? __ffs(page_size) - 1 : -1;

    Rows<HD> st;
    st.pos0 = prefix + r0;
    st.pos1 = prefix + r1;
    st.first_pos = prefix + wq0;
    st.sl2 = scale * LOG2E;
    st.m0 = st.m1 = NEG_INF;
    st.l0 = st.l1 = 0.0f;
#pragma unroll
    for (int i = 0; i < HD / 2; i++) st.oacc[i] = 0.0f;

    u32 qf[HD / 16][4];
    {
        const bf16_t* q0p = q + (size_t)(qs0 + (r0 < n_new ? r0 : 0)) * q_stride + h * HD;
        const bf16_t* q1p = q + (size_t)(qs0 + (r1 < n_new ? r1 : 0)) * q_stride + h * HD;
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
            qf[kk][0] = *reinterpret_cast<const u32*>(q0p + kk * 16 + 2 * tq);
            qf[kk][1] = *reinterpret_cast<const u32*>(q1p + kk * 16 + 2 * tq);
            qf[kk][2] = *reinterpret_cast<const u32*>(q0p + kk * 16 + 8 + 2 * tq);
            qf[kk][3] = *reinterpret_cast<const u32*>(q1p + kk * 16 + 8 + 2 * tq);
        }
    }

    int n = (kv_end + H_BK - 1) / H_BK;
    int pg[Loader<HD>::ROWS];
    // Prologue: tiles 0 and 1 in flight, page ids of tile 2 in registers.
    ld.fetch(0, pg);
    ld.copy(base, 0, pg);
    cp_async_commit();
    ld.fetch(H_BK, pg);
    if (n > 1) ld.copy(base + STAGE_BYTES, H_BK, pg);
    cp_async_commit();
    ld.fetch(2 * H_BK, pg);
    cp_async_wait<1>();
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();

    // S_0, then P_0. O starts at zero, so P_0's rescale factor is moot.
    float sacc[H_BK / 2];
    u32 pa[H_BK / 16][4], pb[H_BK / 16][4];
    float al0, al1;
    wgmma_fence();
    issue_qk<HD>(sacc, qf, base);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(sacc);
    st.softmax(sacc, 0, pa, al0, al1);

    // Iteration j < n - 1: P_j is in `cur`; tile j+1 is landing; tile j+2 is loaded
    // here. Q K^T of tile j+1 and P_j V_j go to the tensor cores together; the
    // softmax of tile j+1 runs while P_j V_j does; O is rescaled after it lands.
    // Each step is one whole wgmma stage with no branch inside it: a branch or an
    // accumulator touched inside a stage makes ptxas serialize the wgmmas.
    auto step = [&](const u32 (&cur)[H_BK / 16][4], u32 (&nxt)[H_BK / 16][4], int j) {
        cp_async_wait<0>();  // tile j+1 (issued one iteration ago)
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();  // tile j+1 visible; every warpgroup is done with tile j-1
        if (j + 2 < n) ld.copy(base + ((j + 2) % H_STAGES) * STAGE_BYTES, (j + 2) * H_BK, pg);
        cp_async_commit();
        ld.fetch((j + 3) * H_BK, pg);
        wgmma_fence();
        issue_qk<HD>(sacc, qf, base + ((j + 1) % H_STAGES) * STAGE_BYTES);
        wgmma_commit();
        issue_pv<HD>(st.oacc, cur, base + (j % H_STAGES) * STAGE_BYTES + H_BK * HD * 2);
        wgmma_commit();
        wgmma_wait<1>();
        fence_regs(sacc);
        float a0, a1;
        st.softmax(sacc, (j + 1) * H_BK, nxt, a0, a1);
        wgmma_wait<0>();
        fence_regs(st.oacc);
        st.rescale(a0, a1);
    };
    // The last tile: P V only.
    auto last = [&](const u32 (&cur)[H_BK / 16][4], int j) {
        wgmma_fence();
        issue_pv<HD>(st.oacc, cur, base + (j % H_STAGES) * STAGE_BYTES + H_BK * HD * 2);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(st.oacc);
    };
    int j = 0;
    while (true) {
        if (j + 1 >= n) { last(pa, j); break; }
        step(pa, pb, j++);
        if (j + 1 >= n) { last(pb, j); break; }
        step(pb, pa, j++);
    }

    float l0 = st.l0, l1 = st.l1;
    l0 = quad_sum(l0);
    l1 = quad_sum(l1);
    float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
    size_t ostride = (size_t)q_heads * HD;
#pragma unroll
    for (int dt = 0; dt < HD / 8; dt++) {
        int col = h * HD + dt * 8 + 2 * tq;
        if (r0 < n_new)
            *reinterpret_cast<u32*>(o + (size_t)(qs0 + r0) * ostride + col) =
                pack_bf16x2_rn(st.oacc[dt * 4 + 0] * inv0, st.oacc[dt * 4 + 1] * inv0);
        if (r1 < n_new)
            *reinterpret_cast<u32*>(o + (size_t)(qs0 + r1) * ostride + col) =
                pack_bf16x2_rn(st.oacc[dt * 4 + 2] * inv1, st.oacc[dt * 4 + 3] * inv1);
    }
}

// Dynamic shared memory of a launch: H_STAGES stages of K and V, plus 1 KB so the
// ring can start on a 1024-byte boundary.
#define PREFILL_SM90(HD)                                                                         \
    extern "C" __global__ void __launch_bounds__(H_THREADS, 1) attn_prefill_sm90_hd##HD(          \
        const bf16_t* q, int q_stride, bf16_t* o, const bf16_t* k_cache, const bf16_t* v_cache,  \
        const int* q_start, const int* kv_len, const int* page_start, const int* page_ids,      \
        const int* tile_seq, const int* tile_q0, int num_tiles, int q_heads, int kv_heads,      \
        int page_size, float scale) {                                                           \
        prefill_sm90_impl<HD>(q, q_stride, o, k_cache, v_cache, q_start, kv_len, page_start,    \
                              page_ids, tile_seq, tile_q0, num_tiles, q_heads, kv_heads,        \
                              page_size, scale);                                                \
    }
PREFILL_SM90(64)
PREFILL_SM90(128)
