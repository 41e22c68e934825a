// The products of one decoder layer at one decode row, in one launch: the attention
// output through o (added to the residual), the post-attention norm and gate_up with
// SiLU, down (added to the residual), and the next layer's input norm and qkv.
//
// Why one launch: at one row each product is a weight read that a lone kernel pays a
// launch, its blocks' start-up, a first DRAM round trip and a tail for (Qwen3-0.6B: 5-9
// µs a product against 1-3 µs of bytes), and nothing of the next product's weights
// moves meanwhile. The weights do not depend on the activations, so here every block
// streams its share of all four matrices as one sequence (see lc_produce) from the
// moment it starts, and only the dot products wait for the previous phase. The phases
// meet at grid-wide barriers, during which the stream keeps going.
//
// Measured (H200, 2026-12-04, docs/results/gpu-2026-12-04-chain.md), batch-1 runner
// step against the separate products: Qwen3-14B 8.03 against 8.43 ms, Llama-3.1-8B 4.57
// against 4.72, Qwen3-0.6B 1.081 against 1.083. At 0.6B's 31 MB a layer the four
// phases' latency (grid barrier, input load, reduction, epilogue: ~5 µs each) eats what
// the continuous stream saves; the bigger the layer, the more the stream counts.
//
// Layout and rounding follow the separate kernels (gemv.cu's epilogues, norm.cu's
// RMSNorm): qkv and every product output is rounded to bf16 before its epilogue, the
// residual adds are bf16(residual + bf16(product + bias)), act = bf16(silu(bf16(gate)) *
// bf16(up)), the normed input bf16(x * inv * weight). Sums run in another order, so
// results agree with the separate kernels to f32 rounding, not bit for bit.
//
// One block per SM (grid = SMs, all resident: the ring takes the shared memory, and the
// host launches it only when nothing else runs on the stream), LC_THREADS threads (see
// lc_produce). Block b owns rows [b N / G, (b + 1) N / G) of each product (N its
// outputs, G the grid), and for gate_up the gate and the up rows of the same outputs. Every k (the products'
// input widths) is a multiple of 256, so a warp's 256-element piece of a chunk lies in
// one weight row.
//
// Dynamic shared memory: `stages` stages of LC_CHUNK bytes, then x (max k bf16), then
// the accumulators (acc_rows floats), then the stages' full and empty mbarriers.
#include "common.cuh"
#include "hopper.cuh"

// 16 consumer warps (the dot products and everything else) and one producer warp that
// only issues the weight stream.
#define LC_CONSUMERS 512
#define LC_WARPS (LC_CONSUMERS / 32)
#define LC_THREADS (LC_CONSUMERS + 32)
#define LC_CHUNK 32768
#define LC_SEGS 5

// One contiguous run of weight rows a block streams: `bytes` from `src`, rows of k
// elements, whose dot products add into acc[acc0 + row].
struct LcSeg {
    const bf16_t* src;
    u32 bytes;
    int k;
    int acc0;
    int phase;
};

// A barrier of the consumer warps only (the producer never joins one).
__device__ __forceinline__ void lc_sync() { asm volatile("bar.sync 1, %0;\n" ::"n"(LC_CONSUMERS) : "memory"); }

__device__ __forceinline__ float lc_block_sum(float v, float* scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    lc_sync();
    if (lane == 0) scratch[warp] = v;
    lc_sync();
    float r = lane < LC_WARPS ? scratch[lane] : 0.0f;
    return warp_sum(r);
}

// Grid-wide barrier over bar[0] (arrivals, back to 0 after every barrier) and bar[1]
// (generation). Both start at 0 (the host zeroes them once). Thread 0 of each block
// arrives with release semantics at gpu scope (after the block barrier, so the block's
// writes are ordered before it) and polls with acquire loads; __threadfence (fence.sc
// plus an L1 invalidate) cost more in the first build. A block that waits past ~2^24
// polls (seconds) traps: a grid that is not all resident fails instead of hanging.
__device__ __forceinline__ u32 ld_acquire_gpu(const u32* p) {
    u32 v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ u32 atom_add_acq_rel_gpu(u32* p, u32 v) {
    u32 old;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;\n"
                 : "=r"(old)
                 : "l"(p), "r"(v)
                 : "memory");
    return old;
}

__device__ __forceinline__ void lc_grid_sync(u32* bar) {
    lc_sync();
    if (threadIdx.x == 0) {
        u32 g = ld_acquire_gpu(bar + 1);
        if (atom_add_acq_rel_gpu(bar, 1u) == gridDim.x - 1) {
            // Every block has arrived, so none reads the count until the generation moves.
            asm volatile("st.relaxed.gpu.global.u32 [%0], %1;\n" ::"l"(bar), "r"(0u) : "memory");
            asm volatile("red.release.gpu.global.add.u32 [%0], %1;\n" ::"l"(bar + 1), "r"(1u)
                         : "memory");
        } else {
            u32 spins = 0;
            while (ld_acquire_gpu(bar + 1) == g) {
                if (++spins > (1u << 24)) __trap();
            }
        }
    }
    lc_sync();
}

// The first of block b's rows of n (its share ends where block b + 1's begins).
__device__ __forceinline__ int lc_split(int n, int b) {
    return (int)(((long long)n * b) / gridDim.x);
}

// Copies n bf16 of `src` (written by other blocks or kernels: read through L2) to x.
__device__ __forceinline__ void lc_load_x(bf16_t* x, const bf16_t* src, int n) {
    const u32x4* s4 = reinterpret_cast<const u32x4*>(src);
    u32x4* x4 = reinterpret_cast<u32x4*>(x);
    for (int i = threadIdx.x; i < n / 8; i += LC_CONSUMERS) x4[i] = ld_cg(s4 + i);
}

// x = bf16(r * rsqrt(mean(r^2) + eps) * w), r the residual ([n], read through L2): the math
// of gemv.cu's gemv_norm_row, written out over the consumer threads (the measured SASS).
__device__ __forceinline__ void lc_norm_x(bf16_t* x, const bf16_t* residual,
                                          const bf16_t* weight, int n, float eps,
                                          float* scratch) {
    lc_load_x(x, residual, n);
    lc_sync();
    u32x4* x4 = reinterpret_cast<u32x4*>(x);
    const u32x4* w4 = reinterpret_cast<const u32x4*>(weight);
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n / 8; i += LC_CONSUMERS) {
        u32x4 v = x4[i];
        u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float a = bf_lo(w[j]), b = bf_hi(w[j]);
            ss += a * a + b * b;
        }
    }
    float inv = rsqrtf(lc_block_sum(ss, scratch) / (float)n + eps);
    for (int i = threadIdx.x; i < n / 8; i += LC_CONSUMERS) {
        u32x4 v = x4[i], g = w4[i];
        u32 w[4] = {v.x, v.y, v.z, v.w}, gw[4] = {g.x, g.y, g.z, g.w}, o[4];
#pragma unroll
        for (int j = 0; j < 4; j++)
            o[j] = pack_bf16x2(bf_lo(w[j]) * inv * bf_lo(gw[j]), bf_hi(w[j]) * inv * bf_hi(gw[j]));
        x4[i] = u32x4{o[0], o[1], o[2], o[3]};
    }
}

// The stream of one block: segments in order, in shared memory, cut into chunks of at
// most LC_CHUNK bytes that do not cross segments. Stage i of the ring has a `full`
// mbarrier (every producer lane's copies of the chunk landed) and an `empty` one (all 16
// consumer warps are done with it). A warp of its own streams the chunks with 16-byte
// cp.async copies, each lane arriving on `full` once its copies land, so the consumers
// wait only on data. History (2026-12-04): the first build issued each chunk as one
// bulk copy from consumer thread 0, which held the block ~4.4 µs at each launch's start
// and cost a block barrier a chunk; a producer warp fixed that. Its bulk copies and
// these cp.async copies streamed equally slowly (~2.2 TB/s at Qwen3-14B): the consumers
// set the pace, until lc_consume reduced once per row instead of once per piece.
__device__ __forceinline__ void lc_produce(const LcSeg* segs, int nseg, u32 ring, u32 full,
                                           u32 empty, int stages) {
    const int lane = threadIdx.x & 31;
    u32 c = 0;
    for (int si = 0; si < nseg; si++) {
        const LcSeg s = segs[si];
        const unsigned char* src = reinterpret_cast<const unsigned char*>(s.src);
        for (u32 off = 0; off < s.bytes; off += LC_CHUNK, c++) {
            u32 n = min((u32)LC_CHUNK, s.bytes - off);
            u32 stage = c % stages;
            if (c >= (u32)stages) mbar_wait(empty + stage * 8, (c / stages - 1) & 1);
            u32 dst = ring + stage * LC_CHUNK;
            for (u32 i = lane * 16; i < n; i += 32 * 16) cp_async16(dst + i, src + off + i, true);
            mbar_arrive_on_copies(full + stage * 8);
        }
    }
}

// Consumes every chunk of phase `phase` (the next ones in the stream): acc[acc0 + row] +=
// w_row · x. `cs` is the next segment to consume and `used` the chunks consumed so far
// (the same on every consumer thread). Ends with a consumer barrier, so acc is complete.
__device__ __forceinline__ void lc_consume(const LcSeg* segs, int nseg, int phase, int& cs,
                                           u32& used, const bf16_t* x, float* acc, u32 full,
                                           u32 empty, int stages, const unsigned char* ring_ptr) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const u32x4* x4 = reinterpret_cast<const u32x4*>(x);
    for (; cs < nseg && segs[cs].phase == phase; cs++) {
        const LcSeg s = segs[cs];
        for (u32 off = 0; off < s.bytes; off += LC_CHUNK) {
            u32 n = min((u32)LC_CHUNK, s.bytes - off);
            u32 stage = used % stages;
            mbar_wait(full + stage * 8, (used / stages) & 1);
            const u32x4* w4 = reinterpret_cast<const u32x4*>(ring_ptr + (size_t)stage * LC_CHUNK);
            // Warp w takes a contiguous run of the chunk's 256-element pieces, so
            // consecutive pieces mostly share a row: it sums them per lane and reduces once
            // per row (the first build strided pieces over warps, one shuffle reduction
            // and one shared atomic a piece, and an integer division each).
            int pieces = n / 512;
            int p0 = warp * pieces / LC_WARPS, p1 = (warp + 1) * pieces / LC_WARPS;
            if (p0 < p1) {
                u32 e = off / 2 + (u32)p0 * 256;
                int row = e / s.k, col = e % s.k;
                float part = 0.0f;
                for (int p = p0; p < p1; p++) {
                    u32x4 wv = w4[p * 32 + lane];
                    u32x4 xv = x4[(col >> 3) + lane];
                    float xf[8] = {bf_lo(xv.x), bf_hi(xv.x), bf_lo(xv.y), bf_hi(xv.y),
                                   bf_lo(xv.z), bf_hi(xv.z), bf_lo(xv.w), bf_hi(xv.w)};
                    part += dot8(wv, xf);
                    col += 256;
                    if (col == s.k || p + 1 == p1) {
                        float d = warp_sum(part);
                        if (lane == 0) atomicAdd(acc + s.acc0 + row, d);
                        part = 0.0f;
                        col = col == s.k ? 0 : col;
                        row++;
                    }
                }
            }
            used++;
            // This warp's reads of the stage are done (the shuffles used them).
            __syncwarp();
            if (lane == 0) mbar_arrive_if(empty + stage * 8, true);
        }
    }
    lc_sync();
}

__device__ __forceinline__ void lc_zero(float* acc, int n) {
    for (int i = threadIdx.x; i < n; i += LC_CONSUMERS) acc[i] = 0.0f;
    lc_sync();
}

// attn: [qd] bf16, the layer's attention output. residual: [h] bf16, in place. act:
// [inter] bf16 scratch. qkv_out: [nqkv] bf16, the next layer's qkv (in_norm null: no
// qkv phase, the last layer). Biases may be null. bar: two u32, zero.
extern "C" __global__ void __launch_bounds__(LC_THREADS, 1)
    layer_chain(const bf16_t* attn, const bf16_t* w_o, const bf16_t* b_o, bf16_t* residual,
                const bf16_t* post_norm, const bf16_t* w_gate_up, const bf16_t* w_down,
                bf16_t* act, const bf16_t* in_norm, const bf16_t* w_qkv, const bf16_t* b_qkv,
                bf16_t* qkv_out, u32* bar, int h, int qd, int inter, int nqkv, float eps,
                int stages, int xmax, int acc_rows) {
    extern __shared__ __align__(128) unsigned char lc_smem[];
    __shared__ float scratch[32];
    const int b = blockIdx.x;
    bf16_t* x = reinterpret_cast<bf16_t*>(lc_smem + (size_t)stages * LC_CHUNK);
    float* acc = reinterpret_cast<float*>(lc_smem + (size_t)stages * LC_CHUNK + (size_t)xmax * 2);
    const u32 ring = smem_u32(lc_smem);
    const u32 full = smem_u32(acc + acc_rows), empty = full + stages * 8;

    // This block's rows of each product.
    const int o0 = lc_split(h, b), o1 = lc_split(h, b + 1);
    const int j0 = lc_split(inter, b), j1 = lc_split(inter, b + 1);
    const int d0 = o0, d1 = o1;
    const int q0 = lc_split(nqkv, b), q1 = lc_split(nqkv, b + 1);
    const int nj = j1 - j0;
    __shared__ LcSeg segs[LC_SEGS];
    __shared__ int nseg_s;
    if (threadIdx.x == 0) {
        int n = 0;
        auto add = [&](const bf16_t* w, int r0, int r1, int k, int acc0, int phase) {
            if (r1 > r0)
                segs[n++] = LcSeg{w + (size_t)r0 * k, (u32)((r1 - r0) * k * 2), k, acc0, phase};
        };
        add(w_o, o0, o1, qd, 0, 0);
        add(w_gate_up, j0, j1, h, 0, 1);
        add(w_gate_up, inter + j0, inter + j1, h, nj, 1);
        add(w_down, d0, d1, inter, 0, 2);
        if (in_norm != nullptr) add(w_qkv, q0, q1, h, 0, 3);
        nseg_s = n;
        for (int s = 0; s < stages; s++) {
            mbar_init(full + s * 8, 32);
            mbar_init(empty + s * 8, LC_WARPS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();  // the last barrier of the whole block: then the roles split
    if (threadIdx.x >= LC_CONSUMERS) {
        lc_produce(segs, nseg_s, ring, full, empty, stages);
        return;
    }
    const unsigned char* ring_ptr = lc_smem;
    int cs = 0;
    u32 used = 0;

    // Phase 0: residual += bf16(attn · W_oᵀ + b_o) on this block's rows.
    lc_load_x(x, attn, qd);
    lc_zero(acc, acc_rows);
    lc_consume(segs, nseg_s, 0, cs, used, x, acc, full, empty, stages, ring_ptr);
    for (int r = o0 + threadIdx.x; r < o1; r += LC_CONSUMERS) {
        float bo = b_o != nullptr ? bf2f(b_o[r]) : 0.0f;
        float o = bf2f(f2bf(acc[r - o0] + bo));
        residual[r] = f2bf(bf2f(ld_cg_bf16(residual + r)) + o);
    }
    lc_grid_sync(bar);

    // Phase 1: act = silu(gate) * up of the post-attention-normed residual.
    lc_norm_x(x, residual, post_norm, h, eps, scratch);
    lc_zero(acc, acc_rows);
    lc_consume(segs, nseg_s, 1, cs, used, x, acc, full, empty, stages, ring_ptr);
    for (int j = threadIdx.x; j < nj; j += LC_CONSUMERS) {
        float gt = bf2f(f2bf(acc[j])), up = bf2f(f2bf(acc[nj + j]));
        act[j0 + j] = f2bf(silu(gt) * up);
    }
    lc_grid_sync(bar);

    // Phase 2: residual += bf16(act · W_downᵀ).
    lc_load_x(x, act, inter);
    lc_zero(acc, acc_rows);
    lc_consume(segs, nseg_s, 2, cs, used, x, acc, full, empty, stages, ring_ptr);
    for (int r = d0 + threadIdx.x; r < d1; r += LC_CONSUMERS) {
        float o = bf2f(f2bf(acc[r - d0]));
        residual[r] = f2bf(bf2f(ld_cg_bf16(residual + r)) + o);
    }
    if (in_norm == nullptr) return;
    lc_grid_sync(bar);

    // Phase 3: the next layer's qkv of its input-normed residual.
    lc_norm_x(x, residual, in_norm, h, eps, scratch);
    lc_zero(acc, acc_rows);
    lc_consume(segs, nseg_s, 3, cs, used, x, acc, full, empty, stages, ring_ptr);
    for (int r = q0 + threadIdx.x; r < q1; r += LC_CONSUMERS) {
        float bq = b_qkv != nullptr ? bf2f(b_qkv[r]) : 0.0f;
        qkv_out[r] = f2bf(acc[r - q0] + bq);
    }
}
