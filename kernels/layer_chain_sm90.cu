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
// Traced phase by phase (LC_TRACE=1, docs/results/gpu-2026-12-04-latency.md and
// gpu-2026-12-04-consume.md), a 0.6B layer with its attention takes ~24 µs: the
// attention ~7, a barrier 1.2-1.3 each, and the four phases ~8: the consumers wait
// for landed chunks only ~1.2 µs of it (the waits are traced), the rest is consuming,
// ~0.65 µs a landed 32 KB chunk with the slowest warp's wait at a phase's end ≤ 0.2 µs
// (traced, gpu-2026-12-04-span.md), which a tensor-core consumer did not shorten.
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
// layer_chain_attn_g* put the layer's attention in front of o (see lc_attention): then
// the launch takes the layer's qkv row instead of the attention's output, and one launch
// replaces four (qkv_rope_store, the decode attention, its combine, the chain). Measured
// (docs/results/gpu-2026-12-04-chain-attn.md), batch-1 step against the separate
// attention: Qwen3-0.6B ~1.017 against 1.078 ms, Llama-3.1-8B ~4.39 against 4.59.
// layer_chain_span_g2 runs up to LC_MAX_LAYERS such layers (group ≤ 2) in one launch, each
// from the qkv row the one before wrote (see there).
//
// Dynamic shared memory: `stages` stages of LC_CHUNK bytes, then a region of `region`
// bytes (x, max k bf16, then the accumulators, acc_rows floats; before phase 0 the
// attention's scratch), then the stages' full and empty mbarriers, then (with the
// attention) the table of layers, LC_MAX_LAYERS LcLayer.
#include "common.cuh"
#include "hopper.cuh"
#include "rope.cuh"

// 16 consumer warps (the dot products and everything else) and one producer warp that
// only issues the weight stream.
#define LC_CONSUMERS 512
#define LC_WARPS (LC_CONSUMERS / 32)
#define LC_THREADS (LC_CONSUMERS + 32)
#define LC_CHUNK 32768
#define LC_SEGS 5
// Row sums two to a shuffle reduction (lc_row_done); 0 builds the per-row reduction.
#ifndef LC_REDUCE_PAIRS
#define LC_REDUCE_PAIRS 1
#endif

// One contiguous run of weight rows a block streams: `bytes` from element `off` of its
// phase's weight (o, gate_up, down, qkv: the same run in every layer), rows of k
// elements, whose dot products add into acc[acc0 + row].
struct LcSeg {
    u32 off;
    u32 bytes;
    int k;
    int acc0;
    int phase;
};

// One layer's weights and K/V caches (a row of the host's ChainLayers, in this order). in_norm,
// w_qkv and b_qkv are the next layer's (in_norm null: the model's last layer, no qkv
// phase); q_norm and k_norm may be null, like the biases.
struct LcLayer {
    const bf16_t* w_o;
    const bf16_t* b_o;
    const bf16_t* post_norm;
    const bf16_t* w_gate_up;
    const bf16_t* w_down;
    const bf16_t* in_norm;
    const bf16_t* w_qkv;
    const bf16_t* b_qkv;
    const bf16_t* q_norm;
    const bf16_t* k_norm;
    bf16_t* k_cache;
    bf16_t* v_cache;
};

// The layers one launch of layer_chain_span_g2 runs (the host's CHAIN_MAX_LAYERS),
// passed by value: 3 KB of kernel parameters, under the 4 KB every driver takes.
#define LC_MAX_LAYERS 32
struct LcLayers {
    LcLayer l[LC_MAX_LAYERS];
};

// The weight a segment of phase `phase` streams from.
__device__ __forceinline__ const bf16_t* lc_phase_weight(const LcLayer& ly, int phase) {
    return phase == 0 ? ly.w_o : phase == 1 ? ly.w_gate_up : phase == 2 ? ly.w_down : ly.w_qkv;
}

// A barrier of the consumer warps only (the producer never joins one).
__device__ __forceinline__ void lc_sync() { asm volatile("bar.sync 1, %0;\n" ::"n"(LC_CONSUMERS) : "memory"); }

// Named barriers of all LC_THREADS, one side arriving and the other waiting (the
// producer / consumer hand-offs of layer_chain_impl).
#define LC_BAR_SETUP 2
#define LC_BAR_GO 3
__device__ __forceinline__ void lc_bar_sync_all(int id) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(LC_THREADS) : "memory");
}
__device__ __forceinline__ void lc_bar_arrive_all(int id) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "n"(LC_THREADS) : "memory");
}

__device__ __forceinline__ float lc_block_sum(float v, float* scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    lc_sync();
    if (lane == 0) scratch[warp] = v;
    lc_sync();
    float r = lane < LC_WARPS ? scratch[lane] : 0.0f;
    return warp_sum(r);
}

__device__ __forceinline__ unsigned long long ld_acquire_gpu_u64(const unsigned long long* p) {
    unsigned long long v;
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];\n" : "=l"(v) : "l"(p) : "memory");
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

// Grid-wide barrier over bar[0..2], read as one 64-bit arrival count that only grows
// (never reset, so it cannot wrap in practice). Every barrier adds exactly the grid
// size, so at a launch's start the count is a multiple of it plus the arrivals of
// blocks already at this launch's first barrier, which cannot pass it without this
// block: `lc_bar_base` rounds down to the launch's base and each barrier waits for
// the next multiple. Thread 0 of each block arrives with release semantics at gpu
// scope (after the block barrier, so the block's writes are ordered before it) and
// polls with acquire loads. One L2 round trip after the last arrival releases every
// block; the first build (an arrival count returned to zero by the last block, then a
// generation word the others poll, 20dfa9d) took two: a barrier cost 2.1 µs from the
// last block's epilogue to every block past it, 1.2-1.3 µs now, and the 0.6B batch-1
// step measured 0.926x against it (2026-12-04).
// Tried and removed (2026-12-06, part 117, an H100): the three product-phase barriers
// (after o, gate_up, down) replaced by the rows themselves in 64-bit words of two bf16
// and the exchange's epoch, which readers polled (one L2 round trip after the last
// writer, no fence, no atomic). Correct (chain, model and engine checks), but the
// Qwen3-0.6B graph step ran 0.939x (batch 1) and 0.941x (batch 2) against the barriers.
// The phase trace said why: from o's last product to gate_up's normed input took 2.2 µs
// either way. The barrier is not the cost; the last block's rows reaching L2 and an L2
// round trip behind the weight stream are, and 132 x 512 polling threads slowed the
// stream (gate_up's consuming 2.68 -> 2.92 µs).
// A block that waits past ~2^24 polls (seconds) traps: a grid that is not all resident
// fails instead of hanging.
__device__ __forceinline__ unsigned long long lc_bar_base(u32* bar) {
    unsigned long long v = 0;
    if (threadIdx.x == 0) {
        asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];\n"
                     : "=l"(v)
                     : "l"(reinterpret_cast<unsigned long long*>(bar))
                     : "memory");
        v -= v % gridDim.x;
    }
    return v;
}

__device__ __forceinline__ void lc_grid_sync(u32* bar, unsigned long long& target) {
    lc_sync();
    if (threadIdx.x == 0) {
        u32 spins = 0;
        unsigned long long* cnt = reinterpret_cast<unsigned long long*>(bar);
        target += gridDim.x;
        asm volatile("red.release.gpu.global.add.u64 [%0], %1;\n" ::"l"(cnt), "l"(1ull)
                     : "memory");
        while (ld_acquire_gpu_u64(cnt) < target) {
            if (++spins > (1u << 24)) __trap();
        }
    }
    lc_sync();
}

// The first of block b's rows of n (its share ends where block b + 1's begins).
// (32-bit: every width times the grid stays far below 2^32.)
__device__ __forceinline__ int lc_split(int n, int b) {
    return (int)(((u32)n * (u32)b) / gridDim.x);
}

// Copies n bf16 of `src` (written by other blocks or kernels: read through L2) to x.
__device__ __forceinline__ void lc_load_x(bf16_t* x, const bf16_t* src, int n) {
    const u32x4* s4 = reinterpret_cast<const u32x4*>(src);
    u32x4* x4 = reinterpret_cast<u32x4*>(x);
    for (int i = threadIdx.x; i < n / 8; i += LC_CONSUMERS) x4[i] = ld_cg(s4 + i);
}

// This thread's sum of squares over its vectors of x ([n] in shared memory), in order.
__device__ __forceinline__ float lc_sumsq(const u32x4* x4, int n) {
    return sumsq_bf16x8(x4, threadIdx.x, n / 8, LC_CONSUMERS);
}

// x = bf16(x * inv * w) over this thread's vectors (w0: its first 8 weights).
__device__ __forceinline__ void lc_scale_x(u32x4* x4, const bf16_t* weight, u32x4 w0, float inv,
                                           int n) {
    const u32x4* w4 = reinterpret_cast<const u32x4*>(weight);
    for (int i = threadIdx.x; i < n / 8; i += LC_CONSUMERS) {
        u32x4 v = x4[i], g = i == (int)threadIdx.x ? w0 : w4[i];
        u32 w[4] = {v.x, v.y, v.z, v.w}, gw[4] = {g.x, g.y, g.z, g.w}, o[4];
#pragma unroll
        for (int j = 0; j < 4; j++)
            o[j] = pack_bf16x2(bf_lo(w[j]) * inv * bf_lo(gw[j]), bf_hi(w[j]) * inv * bf_hi(gw[j]));
        x4[i] = u32x4{o[0], o[1], o[2], o[3]};
    }
}

// x = bf16(r * rsqrt(mean(r^2) + eps) * w), r the residual ([n], read through L2): the math
// of gemv.cu's gemv_norm_row, written out over the consumer threads (the measured SASS).
// w0: this thread's first 8 weights (element 8 threadIdx.x on), loaded by the caller
// before the grid barrier that precedes this (lc_norm_w0), so that no weight load waits
// behind the block reduction.
// Returns the factor the product of x still owes: 1, or with `folded` (the norm's weight
// is folded into the product's, Fold::UnitNorm on the host) x is left as the residual
// and the factor is inv, applied to the f32 product, so that x · inv is not rounded to
// bf16 on top of the folded weight's own rounding (as gemv.cu's gemv_norm_row).
__device__ __forceinline__ float lc_norm_x(bf16_t* x, const bf16_t* residual,
                                           const bf16_t* weight, u32x4 w0, int n, float eps,
                                           bool folded, float* scratch) {
    lc_load_x(x, residual, n);
    lc_sync();
    u32x4* x4 = reinterpret_cast<u32x4*>(x);
    float inv = rsqrtf(lc_block_sum(lc_sumsq(x4, n), scratch) / (float)n + eps);
    if (folded) return inv;
    lc_scale_x(x4, weight, w0, inv, n);
    return 1.0f;
}

// This thread's w0 for lc_norm_x (zeros past the weight).
__device__ __forceinline__ u32x4 lc_norm_w0(const bf16_t* weight, int n) {
    return (int)threadIdx.x < n / 8 ? reinterpret_cast<const u32x4*>(weight)[threadIdx.x]
                                    : u32x4{0, 0, 0, 0};
}

// Kv heads the attention's merge counters cover (bar[2 .. 2 + LC_TICKETS]; the host's
// CHAIN_TICKETS).
#define LC_TICKETS 64

// The per-phase trace (built with LC_TRACE=1 only, for gpu-check's chain trace): thread
// 0 of each block adds the SM cycles from its start to each point into its own
// LC_T_POINTS u64 after the tickets, plus the wall time start to end (ns, %globaltimer)
// and a launch count, so the host reads means over launches.
enum {
    LC_T_A0,     // the attention entered
    LC_T_AQ,     // the attention's q heads normed and rotated (blocks with attention work)
    LC_T_AL,     // its rows done
    LC_T_AM,     // its split's partial written
    LC_T_AT,     // its head's ticket taken
    LC_T_ATT,    // the attention done (its merge too, in the last block of a head)
    LC_T_SYNC0,  // phase 0 (o) past its grid barrier
    LC_T_X0,     // its input loaded
    LC_T_C0,     // its dot products done
    LC_T_SYNC1,  // phase 1 (gate_up) past its barrier
    LC_T_X1,     // its input normed
    LC_T_W1F,    // its first chunk of weights landed (as consumer thread 0 saw it)
    LC_T_W1L,    // its last chunk landed
    LC_T_C1,
    LC_T_SYNC2,  // phase 2 (down)
    LC_T_X2,
    LC_T_C2,
    LC_T_SYNC3,  // phase 3 (the next qkv)
    LC_T_X3,
    LC_T_C3,
    LC_T_PI,   // the producer (its lane 0) issued the ring's first `stages` chunks
    LC_T_WT0,  // phase 0's cycles consumer thread 0 waited for chunks to land
    LC_T_WT1,
    LC_T_WT2,
    LC_T_WT3,
    LC_T_BS0,  // phase 0's cycles consumer thread 0 spent on landed chunks (wait to release)
    LC_T_BS1,
    LC_T_BS2,
    LC_T_BS3,
    LC_T_SL0,  // phase 0's cycles thread 0 waited at the phase's closing consumer barrier
    LC_T_SL1,
    LC_T_SL2,
    LC_T_SL3,
    LC_T_END,
    LC_T_NS,
    LC_T_COUNT,
    LC_T_POINTS
};

#ifdef LC_TRACE
// This launch's points, in shared memory until end() (at file scope: every use addresses
// it directly, no pointer held in registers).
__shared__ long long lc_trace_s[LC_T_POINTS];
#endif

struct LcTrace {
#ifdef LC_TRACE
    unsigned long long* t;
    long long c0;
    unsigned long long g0;
    __device__ __forceinline__ explicit LcTrace(u32* bar)
        : t(reinterpret_cast<unsigned long long*>(bar + 2 + LC_TICKETS) +
            (size_t)blockIdx.x * LC_T_POINTS),
          c0(clock64()) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g0));
        if (threadIdx.x == 0)
            for (int p = 0; p < LC_T_POINTS; p++) lc_trace_s[p] = 0;
    }
    int last_p = -1;
    long long last = 0;
    // A shared store: the first build added into global memory at each point, and the
    // load of that add held warp 0 an L2 round trip per point (~0.5-1 µs), inside the
    // phases it timed.
    __device__ __forceinline__ void mark(int p) {
        if (threadIdx.x == 0) lc_trace_s[p] = clock64() - c0;
    }
    __device__ __forceinline__ void mark_producer(int p) {
        if (threadIdx.x == LC_CONSUMERS) lc_trace_s[p] = clock64() - c0;
    }
    // 32-bit cycle stamps for durations summed in the chunk loop, added into point p.
    __device__ __forceinline__ u32 now() const { return (u32)clock(); }
    __device__ __forceinline__ void add(int p, u32 cycles) {
        if (threadIdx.x == 0) lc_trace_s[p] += cycles;
    }
    // Point p at the latest of several calls in a launch (kept at end()).
    __device__ __forceinline__ void mark_last(int p) {
        last_p = p;
        last = clock64() - c0;
    }
    __device__ __forceinline__ void end() {
        if (threadIdx.x == 0) {
            unsigned long long g1;
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g1));
            lc_trace_s[LC_T_END] = clock64() - c0;
            if (last_p >= 0) lc_trace_s[last_p] = last;
#pragma unroll 1  // unrolled over 36 points, the trace build spilled
            for (int p = 0; p <= LC_T_END; p++) t[p] += (unsigned long long)lc_trace_s[p];
            t[LC_T_NS] += g1 - g0;
            t[LC_T_COUNT] += 1;
        }
    }
#else
    __device__ __forceinline__ explicit LcTrace(u32*) {}
    __device__ __forceinline__ void mark(int) {}
    __device__ __forceinline__ void mark_producer(int) {}
    __device__ __forceinline__ u32 now() const { return 0; }
    __device__ __forceinline__ void add(int, u32) {}
    __device__ __forceinline__ void mark_last(int) {}
    __device__ __forceinline__ void end() {}
#endif
};

// The stream of one block: for each layer, its segments in order, in shared memory, cut
// into chunks of at most LC_CHUNK bytes that do not cross segments. Stage i of the ring
// has a `full` mbarrier (every producer lane's copies of the chunk landed) and an
// `empty` one (all 16 consumer warps are done with it). A warp of its own streams the
// chunks with 16-byte cp.async copies, each lane arriving on `full` once its copies
// land, so the consumers wait only on data. History (2026-12-04): the first build issued
// each chunk as one bulk copy from consumer thread 0, which held the block ~4.4 µs at
// each launch's start and cost a block barrier a chunk; a producer warp fixed that. Its
// bulk copies and these cp.async copies streamed equally slowly (~2.2 TB/s at
// Qwen3-14B): the consumers set the pace, until lc_consume reduced once per row instead
// of once per piece.
// hold is 0 (the host passes nothing else since 2026-12-06): the attention stages its K/V
// tiles in the ring (LC_ATT_STAGED), which must then be empty. What follows is why 0 was
// the measured choice before that; the parameter stays so that the default build is the
// one part 125 measured.
// With the attention in front (`go`), a layer's chunk `hold` on (chunk 0 on the first
// layer) goes out only once that layer's attention is done (LC_BAR_GO, one generation a
// layer): the attention's dependent loads would queue behind the copies. Measured
// (2026-12-04), batch-1 step, one layer a launch: holding the whole stream, 0.976x at
// Qwen3-0.6B and 0.994x at Llama-3.1-8B against starting at once; letting the first one
// or two chunks go first (o's rows), 1.010x and 1.020x at 0.6B, 1.009x at 8B. In a
// launch of several layers (layer_chain_span_g2) the next layer's first chunks could
// stream during this layer's phases as the ring frees up; the host passes hold = 0, as
// measured (2026-12-04, Qwen3-0.6B batch-1 step, 28 layers a launch): holding every
// chunk until the layer's attention is done 0.847 ms, four chunks ahead (those that go
// out before the qkv phase) 0.871, all of them 0.879. The sync comes before the layer's
// last chunk at the latest: the consumers then cannot arrive for the next layer's
// generation before the producer has passed this one.
// window > 0: chunk c goes out only once chunk c - window has landed, so that at most
// `window` chunks a block are in flight (0: the whole ring at once; the host chooses, see
// WINDOW in ops/chain.rs, with what was measured). The phase trace, one layer launched
// eagerly, shows no change in when chunks land, so how the window helps the recorded
// step is not shown: the guess was that the ring's start-up burst (0.6B: 6 x 32 KB x
// 132 = 25 MB at once) lands interleaved, behind chunks not yet needed.
// nseg[1] / nch[1]: the segments and chunks of a layer with a qkv phase, nseg[0] /
// nch[0] of the model's last layer (without).
__device__ __forceinline__ void lc_produce(const LcSeg* segs, const int* nseg, const u32* nch,
                                           const LcLayer* layers, int n_layers, bool go,
                                           int hold, u32 ring, u32 full, u32 empty,
                                           int stages, int window, LcTrace& tr) {
    const int lane = threadIdx.x & 31;
    u32 c = 0;
    for (int l = 0; l < n_layers; l++) {
        const LcLayer& ly = layers[l];
        const int q = ly.in_norm != nullptr;
        const u32 n_chunks = nch[q];
        // The chunk of this layer that waits for its attention (n_chunks: none).
        const u32 go_at = !go ? n_chunks : l == 0 ? 0 : min((u32)hold, n_chunks - 1);
        if (go && n_chunks == 0) lc_bar_sync_all(LC_BAR_GO);
        u32 lc = 0;
        for (int si = 0; si < nseg[q]; si++) {
            const LcSeg s = segs[si];
            const unsigned char* src =
                reinterpret_cast<const unsigned char*>(lc_phase_weight(ly, s.phase) + s.off);
            for (u32 off = 0; off < s.bytes; off += LC_CHUNK, c++, lc++) {
                if (lc == go_at) lc_bar_sync_all(LC_BAR_GO);
                u32 n = min((u32)LC_CHUNK, s.bytes - off);
                u32 stage = c % stages;
                if (c >= (u32)stages) mbar_wait(empty + stage * 8, (c / stages - 1) & 1);
                if (window > 0 && c >= (u32)window) {
                    const u32 w = c - window;
                    mbar_wait(full + (w % stages) * 8, (w / stages) & 1);
                }
                u32 dst = ring + stage * LC_CHUNK;
                for (u32 i = lane * 16; i < n; i += 32 * 16) cp_async16(dst + i, src + off + i, true);
                mbar_arrive_on_copies(full + stage * 8);
                if (c + 1 == (u32)stages) tr.mark_producer(LC_T_PI);
            }
        }
    }
}

// A row's dot product into its accumulator: stored where one warp's run held the whole
// row (no other warp adds to it), else added. Shared f32 atomics are a compare-and-swap
// loop on sm_90 (ATOMS.CAST.SPIN in the SASS): a load, an add and the swap on the
// consumer's path for every row.
__device__ __forceinline__ void lc_put(float* at, float d, bool whole) {
    if (whole) {
        *at = d;
    } else {
        atomicAdd(at, d);
    }
}

// Two warp sums in five shuffles: lane 0 ends with the sum of a over the warp, lane 16
// with that of b, each added in warp_sum's order (the first step's pairs commute), so the
// results are warp_sum's bit for bit.
__device__ __forceinline__ float lc_sum2(float a, float b, int lane) {
    const bool lo = lane < 16;
    float v = (lo ? a : b) + __shfl_xor_sync(0xffffffffu, lo ? b : a, 16);
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// A one-row run's sum waiting for the next one, so that two rows share lc_sum2's
// shuffles (at: null, none waits).
struct LcPending {
    float sum = 0.0f;
    float* at = nullptr;
    bool whole = false;
};

// The end of a run over a row (its R lanes' partial sums in part, zeroed here) into
// acc_row + r acc_rows for each row r of x (the default; LC_REDUCE_PAIRS=0 builds the
// per-row reduction it replaced). Dropping the per-row shuffle reduction
// altogether (a timing-only build, wrong results) ran the Qwen3-0.6B graph step 1.029x
// faster at batch 1 and 1.050x at batch 2 (an H200, 2026-12-06, part 115): two sums
// in one lc_sum2 halve the shuffles, R = 2 from its two rows, R = 1 from a run and the
// one before it. Measured (part 116, 2026-12-06, an H100, graph steps against the
// per-row reduction, medians of 7 alternating rounds): Qwen3-0.6B batch 1 0.997x and
// 1.000x (contexts 256, 1,024), batch 2 1.039x and 1.044x faster; Llama-3.1-8B 1.002x
// and 1.006x.
template <int R>
__device__ __forceinline__ void lc_row_done(float* part, float* acc_row, int acc_rows, bool whole,
                                            LcPending& pend, int lane) {
    if constexpr (R == 1) {
        if (pend.at == nullptr) {
            pend = LcPending{part[0], acc_row, whole};
        } else {
            const float v = lc_sum2(pend.sum, part[0], lane);
            if (lane == 0 || lane == 16) {
                const bool second = lane == 16;
                lc_put(second ? acc_row : pend.at, v, second ? whole : pend.whole);
            }
            pend.at = nullptr;
        }
    } else {
#pragma unroll
        for (int r = 0; r + 1 < R; r += 2) {
            const float v = lc_sum2(part[r], part[r + 1], lane);
            if (lane == 0 || lane == 16) lc_put(acc_row + (r + (lane == 16)) * acc_rows, v, whole);
        }
        if constexpr (R % 2 == 1) {
            const float d = warp_sum(part[R - 1]);
            if (lane == 0) lc_put(acc_row + (R - 1) * acc_rows, d, whole);
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++) part[r] = 0.0f;
}

// Consumes every chunk of phase `phase` (the next ones in the stream): acc[acc0 + row] +=
// w_row · x, for each of R rows of x (row r: x + r xmax into acc + r acc_rows; each
// piece's weights converted once for all of them). `cs` is the next segment to consume
// and `used` the chunks consumed so far (the same on every consumer thread). Ends with a
// consumer barrier, so acc is complete. Phase 1 traces when its first and last chunks
// landed.
template <int R = 1>
__device__ __forceinline__ void lc_consume(const LcSeg* segs, int nseg, int phase, int& cs,
                                           u32& used, const bf16_t* x, float* acc, u32 full,
                                           u32 empty, int stages, const unsigned char* ring_ptr,
                                           LcTrace& tr, int xmax = 0, int acc_rows = 0) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const u32x4* x4 = reinterpret_cast<const u32x4*>(x);
    bool first = true;
    u32 waited = 0, busy = 0;  // cycles (the trace build only)
#if LC_REDUCE_PAIRS
    LcPending pend;
#endif
    for (; cs < nseg && segs[cs].phase == phase; cs++) {
        const LcSeg s = segs[cs];
        for (u32 off = 0; off < s.bytes; off += LC_CHUNK) {
            u32 n = min((u32)LC_CHUNK, s.bytes - off);
            u32 stage = used % stages;
            const u32 w0 = tr.now();
            mbar_wait(full + stage * 8, (used / stages) & 1);
            const u32 w1 = tr.now();
            waited += w1 - w0;
            if (phase == 1) {
                if (first) tr.mark(LC_T_W1F);
                tr.mark_last(LC_T_W1L);
                first = false;
            }
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
                float part[R];
#pragma unroll
                for (int r = 0; r < R; r++) part[r] = 0.0f;
                bool from0 = col == 0;  // this run holds the row from its first column
                for (int p = p0; p < p1; p++) {
                    u32x4 wv = w4[p * 32 + lane];
                    if constexpr (R == 1) {
                        u32x4 xv = x4[(col >> 3) + lane];
                        float xf[8] = {bf_lo(xv.x), bf_hi(xv.x), bf_lo(xv.y), bf_hi(xv.y),
                                       bf_lo(xv.z), bf_hi(xv.z), bf_lo(xv.w), bf_hi(xv.w)};
                        part[0] += dot8(wv, xf);
                    } else {
                        const float wf[8] = {bf_lo(wv.x), bf_hi(wv.x), bf_lo(wv.y), bf_hi(wv.y),
                                             bf_lo(wv.z), bf_hi(wv.z), bf_lo(wv.w), bf_hi(wv.w)};
#pragma unroll
                        for (int r = 0; r < R; r++) {
                            const u32x4 xv = x4[r * (xmax / 8) + (col >> 3) + lane];
                            part[r] += bf_lo(xv.x) * wf[0] + bf_hi(xv.x) * wf[1] +
                                       bf_lo(xv.y) * wf[2] + bf_hi(xv.y) * wf[3] +
                                       bf_lo(xv.z) * wf[4] + bf_hi(xv.z) * wf[5] +
                                       bf_lo(xv.w) * wf[6] + bf_hi(xv.w) * wf[7];
                        }
                    }
                    col += 256;
                    if (col == s.k || p + 1 == p1) {
#if LC_REDUCE_PAIRS
                        lc_row_done<R>(part, acc + s.acc0 + row, acc_rows, from0 && col == s.k,
                                       pend, lane);
#else
                        // Each row's sum reduced on its own and added with a shared atomic.
#pragma unroll
                        for (int r = 0; r < R; r++) {
                            float d = warp_sum(part[r]);
                            if (lane == 0) atomicAdd(acc + r * acc_rows + s.acc0 + row, d);
                            part[r] = 0.0f;
                        }
#endif
                        col = col == s.k ? 0 : col;
                        from0 = true;
                        row++;
                    }
                }
            }
            used++;
            // This warp's reads of the stage are done (the shuffles used them).
            __syncwarp();
            if (lane == 0) mbar_arrive_if(empty + stage * 8, true);
            busy += tr.now() - w1;
        }
    }
#if LC_REDUCE_PAIRS
    if (pend.at != nullptr) {
        const float d = warp_sum(pend.sum);
        if (lane == 0) lc_put(pend.at, d, pend.whole);
    }
#endif
    tr.add(LC_T_WT0 + phase, waited);
    tr.add(LC_T_BS0 + phase, busy);
    const u32 s0 = tr.now();
    lc_sync();
    tr.add(LC_T_SL0 + phase, tr.now() - s0);
}

__device__ __forceinline__ void lc_zero(float* acc, int n) {
    for (int i = threadIdx.x; i < n; i += LC_CONSUMERS) acc[i] = 0.0f;
    lc_sync();
}

// ---- The attention phase (layer_chain_attn_g*) ----
//
// At one decode row and a short context the attention is three launches of latency
// (Qwen3-0.6B, context 256: qkv_rope_store 3.1, the split decode 4.9, its combine 3.3
// µs) around ~1 MB of K/V. Here it is the launch's first phase, while the weight ring
// fills: block b < hkv * S takes kv head b / S and split b % S of the context (S and the
// split length from kv_len at run time, so a recorded graph follows the context). Its
// first G warps normalise and rotate the group's q heads into shared memory (rope.cuh:
// the separate kernel's math), the block of the last split writes the new token's K and
// V to the cache first, then its 32 half-warps take one context row at a time (16 lanes
// of 8 elements: 16-byte loads), keep a running softmax per head in registers, and the
// block merges them into one normalized partial and log2-sum-exp per head and split,
// the split decode's format; the last block of each kv head to finish merges the splits
// into the bf16 row, which phase 0 loads after a grid barrier.
#define LC_HD 128
#define LC_MAX_SPLITS 16
// The attention stages its K/V tiles in the ring's first LC_ATT_STAGES stages (at most
// the host's MIN_STAGES); LC_ATT_STAGED=0 builds the register loads they replaced.
#define LC_ATT_STAGES 4
#ifndef LC_ATT_STAGED
#define LC_ATT_STAGED 1
#endif
#define LC_LOG2E 1.4426950408889634f

// Splits of a context of ctx rows at `part` rows a split, at most one block each of
// `blocks` (the sequence's share of the grid) per kv head and LC_MAX_SPLITS (phase 0 reads every split of every head); span is
// the rows a split. No split is empty.
__device__ __forceinline__ int lc_att_splits(int ctx, int part, int hkv, int blocks, int& span) {
    int s = min(min(max((ctx + part - 1) / part, 1), blocks / hkv), LC_MAX_SPLITS);
    span = (ctx + s - 1) / s;
    return (ctx + span - 1) / span;
}

// Shared memory: q [G][LC_HD] f32 (scaled to log2 units), then the warps' partials
// o [LC_WARPS][G][LC_HD], m [LC_WARPS][G], l [LC_WARPS][G]; the host sizes the region.
// GM is 2 or 4: the running state of more heads spills (GM = 6 and 8 were built and
// measured, 2026-12-04: 58-264 bytes of spills, and Qwen3-14B's group of 5 ran 1.016x
// slower than the separate attention, inlined or out of line).
// Block b of `blocks` (a sequence's share of the grid: all of it at one decode row) takes
// one split of one kv head; the pointers are the sequence's own (its qkv row, position,
// slot, context length and page start, partials, tickets and output row).
// Tried and removed (2026-12-06, an H100, part 122): a span's later layers reusing what
// the first layer loaded of the step (context length, page start, position, new slot),
// so that their q loads went out right after the grid barrier, in shared memory: the
// Qwen3-0.6B graph step ran 1.005x (batch 1) and 1.007-1.023x (batch 2) slower at
// contexts 256-4,096; with each thread's first rows' cache slots kept in registers too
// (no round trip before the first K/V loads), layer_chain_span_g2 spilled and ran
// 1.041-1.048x slower at batch 1. Loading them at every layer is not the cost it looks.
// Letting the layer's weights stream during the attention (the MINISGL_CHAIN_HOLD knob,
// part 121) gained only at context 2,048 (1.013x) and lost 3.3% at 256; the knob went
// when the attention began to stage its rows in the ring (below).
template <int GM>
__device__ __forceinline__ void lc_attention(
    const bf16_t* qkv, bool fresh, const bf16_t* q_norm, const bf16_t* k_norm, const int* pos,
    const float* inv_freq, float eps, float scale, const int* slots, bf16_t* k_cache,
    bf16_t* v_cache, const int* kv_len, const int* page_start, const int* page_ids, int hq,
    int hkv, int page_size, int part, float* o_part, float* lse, float* att, u32* tickets,
    bf16_t* attn_out, unsigned char* ring_g, LcTrace& tr, int b, int blocks) {
    tr.mark(LC_T_A0);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int ctx = kv_len[0];
    int span;
    const int S = lc_att_splits(ctx, part, hkv, blocks, span);
    if (b >= hkv * S) return;
    const int kvh = b / S, s = b % S, G = hq / hkv;
    const int lo = s * span, hi = min(ctx, lo + span);
    float* qs = att;
    float* red = qs + G * LC_HD;
    float* rm = red + LC_WARPS * G * LC_HD;
    float* rl = rm + LC_WARPS * G;

    // Half-warp h takes rows lo + h, lo + h + 32, ...; lane li of it elements 8 li..8 li+7.
    // The loop is warp-uniform (the shuffles need both halves): U rows a half an
    // iteration. The first iteration's rows load before q is ready (they are cached
    // already), except the new row, which this block writes below.
    constexpr int U = 2;
    constexpr int STEP = U * LC_CONSUMERS / 16;
    const int half = lane >> 4, li = lane & 15;
    const int* pages = page_ids + page_start[0];
#if LC_ATT_STAGED
    // The rows go through the weight ring, a tile of STEP rows (K, then V: one stage) at a
    // time, LC_ATT_STAGES tiles in flight: the stream leaves the ring empty until the
    // layer's attention is done (lc_produce, with hold 0). Thread i copies the 16-byte
    // piece i % 16 of the tile's rows i / 16 and i / 16 + 32. Why: loaded into registers,
    // a block had STEP rows (32 KB) in flight, and under Nsight Compute the loop waited
    // on them with ~0.6 eligible warps a scheduler (2026-12-06, part 124). Measured
    // against the register loads (part 125, an H100, Qwen3-0.6B graph steps, batch 1 /
    // 2): 1.049x / 1.083x faster at context 16,384, 1.020x / 1.009x at 2,048, 1.008x /
    // 1.012x at 256.
    static_assert(STEP * LC_HD * 2 * 2 == LC_CHUNK, "a tile of K and V is one ring stage");
    const u32 ring = smem_u32(ring_g);
    const int n_tiles = (hi - lo + STEP - 1) / STEP;
    const int cr = threadIdx.x >> 4, cpc = threadIdx.x & 15;
    // The page of this thread's row u of tile `tile` (-1: past the split).
    auto page_of = [&](int tile, int u) {
        const int t = lo + tile * STEP + cr + 32 * u;
        return t < hi ? pages[t / page_size] : -1;
    };
    // Tile `tile`'s copies into its stage, one commit group (empty past the split). Early
    // (before the q heads are ready), the new row is left to the warps that store it.
    auto issue = [&](int tile, const int (&pg)[2], bool early) {
        const u32 st = ring + (u32)(tile % LC_ATT_STAGES) * LC_CHUNK;
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const int rr = cr + 32 * u, t = lo + tile * STEP + rr;
            if (pg[u] >= 0 && !(early && t == ctx - 1)) {
                const size_t slot = (size_t)(unsigned)pg[u] * page_size + t % page_size;
                const size_t off = (slot * hkv + kvh) * LC_HD + cpc * 8;
                cp_async16(st + rr * 256 + cpc * 16, k_cache + off, true);
                cp_async16(st + STEP * 256 + rr * 256 + cpc * 16, v_cache + off, true);
            }
        }
        cp_async_commit();
    };
#else
    u32x4 kw[U], vw[U];
    bool ok[U];
    // Context row t's K and V (this lane's 8 elements) into kw[u], vw[u].
    auto load_row = [&](int u, int t) {
        size_t slot = (size_t)(unsigned)pages[t / page_size] * page_size + t % page_size;
        size_t off = (slot * hkv + kvh) * LC_HD + li * 8;
        kw[u] = *reinterpret_cast<const u32x4*>(k_cache + off);
        vw[u] = *reinterpret_cast<const u32x4*>(v_cache + off);
    };
    auto load = [&](int t0, bool skip_new) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int t = t0 + half + u * (LC_CONSUMERS / 16);
            ok[u] = t < hi;
            if (ok[u] && !(skip_new && t == ctx - 1)) {
                load_row(u, t);
            } else {
                kw[u] = vw[u] = u32x4{0, 0, 0, 0};
            }
        }
    };
#endif
    // q heads of the group (warps < G); the new row's k and v (warps G and G + 1, stored
    // by the last split's block). Their inputs load before the first rows' page ids
    // arrive, so that they take one round trip after kv_len instead of three (after the
    // rows' loads, as the first build had them: 0.6B batch-1 step 0.991x against it).
    const int head = warp < G ? kvh * G + warp : warp == G ? hq + kvh : hq + hkv + kvh;
    const bool rotate = inv_freq != nullptr;
    const bf16_t* norm_w = warp < G ? q_norm : k_norm;
    float v[LC_HD / 32], nw[LC_HD / 32] = {}, fr[LC_HD / 64] = {}, fp = 0.0f;
    auto load_q = [&]() {
        if (warp < G + 2) {
            const bf16_t* src = qkv + (size_t)head * LC_HD;
            if (fresh) {
                // Through L2: other blocks of this launch wrote the row.
#pragma unroll
                for (int j = 0; j < LC_HD / 32; j += 2) {
                    const u32 w =
                        ld_cg_u32(reinterpret_cast<const u32*>(src + head_elem<LC_HD>(j, lane)));
                    v[j] = bf_lo(w);
                    v[j + 1] = bf_hi(w);
                }
            } else {
                load_head<LC_HD>(src, lane, v);
            }
            if (warp <= G && norm_w != nullptr) {
#pragma unroll
                for (int j = 0; j < LC_HD / 32; j++) nw[j] = bf2f(norm_w[head_elem<LC_HD>(j, lane)]);
            }
            if (warp <= G && rotate) {
#pragma unroll
                for (int j = 0; j < LC_HD / 64; j++) fr[j] = inv_freq[head_elem<LC_HD>(j, lane)];
                fp = (float)pos[0];
            }
        }
    };
    load_q();
#if LC_ATT_STAGED
    // The first tiles' page ids all in flight at once, then their copies.
    int pg[LC_ATT_STAGES - 1][2];
#pragma unroll
    for (int i = 0; i < LC_ATT_STAGES - 1; i++) {
        pg[i][0] = page_of(i, 0);
        pg[i][1] = page_of(i, 1);
    }
#pragma unroll
    for (int i = 0; i < LC_ATT_STAGES - 1; i++) issue(i, pg[i], true);
    int next[2] = {page_of(LC_ATT_STAGES - 1, 0), page_of(LC_ATT_STAGES - 1, 1)};
    // The new row's place in an early tile (null: none, or a tile copied later).
    const int nt = (ctx - 1 - lo) / STEP;
    unsigned char* new_row = hi == ctx && nt < LC_ATT_STAGES - 1
                                 ? ring_g + (size_t)nt * LC_CHUNK + (ctx - 1 - lo - nt * STEP) * 256
                                 : nullptr;
#else
    int t0 = lo + 2 * warp;
    load(t0, true);
#endif

    const bool last = hi == ctx;
    if (warp < G || (last && warp < G + 2)) {
        float sn[LC_HD / 64] = {}, cs[LC_HD / 64] = {};
        const size_t slot = (size_t)(unsigned)slots[0];
        if (warp == G + 1) {
            store_head<LC_HD>(v_cache + (slot * hkv + kvh) * LC_HD, lane, v);
#if LC_ATT_STAGED
            if (new_row != nullptr)
                store_head<LC_HD>(reinterpret_cast<bf16_t*>(new_row + STEP * 256), lane, v);
#endif
        } else {
            if (rotate) rope_angles_by<LC_HD>(sn, cs, fp, [&](int j) { return fr[j]; });
            norm_rope_regs_by<LC_HD>(
                v, [&](int j) { return nw[j]; }, norm_w != nullptr, eps, rotate, sn, cs);
            if (warp == G) {
                store_head<LC_HD>(k_cache + (slot * hkv + kvh) * LC_HD, lane, v);
#if LC_ATT_STAGED
                if (new_row != nullptr) store_head<LC_HD>(reinterpret_cast<bf16_t*>(new_row), lane, v);
#endif
            } else {
                // The separate path stores q as bf16 and the decode reads it back.
#pragma unroll
                for (int j = 0; j < LC_HD / 32; j++)
                    qs[warp * LC_HD + head_elem<LC_HD>(j, lane)] =
                        bf2f(f2bf(v[j])) * (scale * LC_LOG2E);
            }
        }
    }
    // Orders the new row's cache writes before this block's reads of them (and, staged,
    // its copy in an early tile before that tile's use).
    lc_sync();
    tr.mark(LC_T_AQ);
#if !LC_ATT_STAGED
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int t = t0 + half + u * (LC_CONSUMERS / 16);
        if (t == ctx - 1 && t < hi) load_row(u, t);
    }
#endif

    float m[GM], l[GM], o[GM][8];
#pragma unroll
    for (int g = 0; g < GM; g++) {
        m[g] = NEG_INF;
        l[g] = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++) o[g][i] = 0.0f;
    }
#if LC_ATT_STAGED
    for (int i = 0; i < n_tiles; i++) {
        // This thread's copies of tile i have landed. It copies exactly the pieces it
        // reads (the copy and the loop map thread 32 w + 16 h + l to rows 2 w + h and
        // 2 w + h + 32, piece l), so no block barrier is needed: tile i + LC_ATT_STAGES - 1
        // takes the stage of tile i - 1, which this thread alone has read. (The first
        // build synchronised the block at every tile: no faster than the register loads,
        // 0.968-1.022x, part 119, 2026-12-06.) The new row, stored by other warps into an
        // early tile, is ordered by the barrier after q.
        cp_async_wait<LC_ATT_STAGES - 2>();
        issue(i + LC_ATT_STAGES - 1, next, false);
        next[0] = page_of(i + LC_ATT_STAGES, 0);
        next[1] = page_of(i + LC_ATT_STAGES, 1);
        const unsigned char* st = ring_g + (size_t)(i % LC_ATT_STAGES) * LC_CHUNK;
        u32x4 kw[U], vw[U];
        bool ok[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int rr = 2 * warp + half + u * (LC_CONSUMERS / 16);
            ok[u] = lo + i * STEP + rr < hi;
            kw[u] = vw[u] = u32x4{0, 0, 0, 0};
            if (ok[u]) {
                kw[u] = *reinterpret_cast<const u32x4*>(st + rr * 256 + li * 16);
                vw[u] = *reinterpret_cast<const u32x4*>(st + STEP * 256 + rr * 256 + li * 16);
            }
        }
#else
    while (t0 < hi) {
#endif
#pragma unroll
        for (int u = 0; u < U; u++) {
            float kf[8] = {bf_lo(kw[u].x), bf_hi(kw[u].x), bf_lo(kw[u].y), bf_hi(kw[u].y),
                           bf_lo(kw[u].z), bf_hi(kw[u].z), bf_lo(kw[u].w), bf_hi(kw[u].w)};
#pragma unroll
            for (int g = 0; g < GM; g++) {
                if (g >= G) break;
                const float4* q4 = reinterpret_cast<const float4*>(qs + g * LC_HD + li * 8);
                float4 a = q4[0], c = q4[1];
                float sc = a.x * kf[0] + a.y * kf[1] + a.z * kf[2] + a.w * kf[3] + c.x * kf[4] +
                           c.y * kf[5] + c.z * kf[6] + c.w * kf[7];
#pragma unroll
                for (int x = 8; x > 0; x >>= 1) sc += __shfl_xor_sync(0xffffffffu, sc, x);
                if (ok[u]) {
                    float mn = fmaxf(m[g], sc);
                    float al = exp2f(m[g] - mn), p = exp2f(sc - mn);
                    l[g] = l[g] * al + p;
                    float vf[8] = {bf_lo(vw[u].x), bf_hi(vw[u].x), bf_lo(vw[u].y), bf_hi(vw[u].y),
                                   bf_lo(vw[u].z), bf_hi(vw[u].z), bf_lo(vw[u].w), bf_hi(vw[u].w)};
#pragma unroll
                    for (int i = 0; i < 8; i++) o[g][i] = o[g][i] * al + p * vf[i];
                    m[g] = mn;
                }
            }
        }
#if !LC_ATT_STAGED
        t0 += STEP;
        if (t0 < hi) load(t0, false);
#endif
    }

    tr.mark(LC_T_AL);
    // Merge the two halves of each warp (lanes li and li + 16 hold the same elements),
    // then the warps through shared memory.
#pragma unroll
    for (int g = 0; g < GM; g++) {
        if (g >= G) break;
        float mo = __shfl_xor_sync(0xffffffffu, m[g], 16);
        float lo2 = __shfl_xor_sync(0xffffffffu, l[g], 16);
        float mn = fmaxf(m[g], mo);
        float a = mn == NEG_INF ? 0.0f : exp2f(m[g] - mn);
        float c = mn == NEG_INF ? 0.0f : exp2f(mo - mn);
        float ov[8];
#pragma unroll
        for (int i = 0; i < 8; i++) ov[i] = o[g][i] * a + __shfl_xor_sync(0xffffffffu, o[g][i], 16) * c;
        if (half == 0) {
            float4* r4 = reinterpret_cast<float4*>(red + (warp * G + g) * LC_HD + li * 8);
            r4[0] = make_float4(ov[0], ov[1], ov[2], ov[3]);
            r4[1] = make_float4(ov[4], ov[5], ov[6], ov[7]);
        }
        if (lane == 0) {
            rm[warp * G + g] = mn;
            rl[warp * G + g] = l[g] * a + lo2 * c;
        }
    }
    lc_sync();
    for (int i = threadIdx.x; i < G * LC_HD; i += LC_CONSUMERS) {
        const int g = i / LC_HD, d = i % LC_HD;
        float M = NEG_INF;
        for (int w = 0; w < LC_WARPS; w++) M = fmaxf(M, rm[w * G + g]);
        float L = 0.0f, O = 0.0f;
        for (int w = 0; w < LC_WARPS; w++) {
            float mw = rm[w * G + g];
            if (mw == NEG_INF) continue;
            float e = exp2f(mw - M);
            L += rl[w * G + g] * e;
            O += red[(w * G + g) * LC_HD + d] * e;
        }
        const int hh = kvh * G + g;
        o_part[((size_t)hh * S + s) * LC_HD + d] = O / L;
        if (d == 0) lse[hh * S + s] = M + log2f(L);
    }
    // The last of the kv head's S blocks to finish merges the head group's splits into
    // the bf16 row, as attn_decode_combine does (partials normalized, weights 2^lse);
    // tickets: one counter a kv head, back to zero after each launch. History
    // (2026-12-04): the first build had every block merge the whole row after a grid
    // barrier, 132 reads of the same partials through L2 (~40% of the launch at context
    // 2,048); the next, a slice of the row a block between two grid barriers; this one
    // saves that second barrier (0.6B batch-1 step 0.976x against it).
    // The ticket releases this block's partials (written before the block barrier) and
    // acquires the other blocks' for the last one, as the grid barrier does (the first
    // build's __threadfence on each side: 0.6B batch-1 step 0.997x against it).
    __shared__ int lc_last;
    tr.mark(LC_T_AM);
    lc_sync();
    if (threadIdx.x == 0) lc_last = atom_add_acq_rel_gpu(tickets + kvh, 1u) == (u32)(S - 1);
    lc_sync();
    tr.mark(LC_T_AT);
    if (!lc_last) return;
    for (int i = threadIdx.x; i < G * LC_HD; i += LC_CONSUMERS) {
        const int hh = kvh * G + i / LC_HD, d = i % LC_HD;
        float M = NEG_INF;
        for (int k = 0; k < S; k++) M = fmaxf(M, ld_cg_f32(lse + hh * S + k));
        float L = 0.0f, O = 0.0f;
        for (int k = 0; k < S; k++) {
            float e = exp2f(ld_cg_f32(lse + hh * S + k) - M);
            L += e;
            O += e * ld_cg_f32(o_part + ((size_t)hh * S + k) * LC_HD + d);
        }
        attn_out[hh * LC_HD + d] = f2bf(O / L);
    }
    if (threadIdx.x == 0) tickets[kvh] = 0;
}

// The attention's arguments (layer_chain_attn_g*; layer_chain passes none of them):
// what every layer of a launch shares. qkv is the first layer's qkv row; each later
// layer's is the one the layer before it wrote to qkv_out.
struct LcAttnArgs {
    const bf16_t* qkv;
    const int* pos;
    const float* inv_freq;
    const int* slots;
    const int* kv_len;
    const int* page_start;
    const int* page_ids;
    float* o_part;
    float* lse;
    bf16_t* attn_out;
    int hq, hkv, page_size, part;
    float scale;
};

// Block blockIdx.x's segments of the stream (the same in every layer) and, for a layer
// without and with the qkv phase, their count and chunks; the ring's mbarriers. One
// thread runs it.
__device__ __forceinline__ void lc_setup(LcSeg* segs, int* nseg_s, u32* nch_s, int h, int qd,
                                         int inter, int nqkv, u32 full, u32 empty, int stages) {
    const int b = blockIdx.x;
    const int o0 = lc_split(h, b), o1 = lc_split(h, b + 1);
    const int j0 = lc_split(inter, b), j1 = lc_split(inter, b + 1);
    const int q0 = lc_split(nqkv, b), q1 = lc_split(nqkv, b + 1);
    const int nj = j1 - j0;
    int n = 0;
    u32 chunks = 0;
    auto add = [&](int phase, int row0, int r0, int r1, int k, int acc0) {
        if (r1 > r0) {
            const u32 bytes = (u32)((r1 - r0) * k * 2);
            segs[n++] = LcSeg{(u32)(row0 + r0) * (u32)k, bytes, k, acc0, phase};
            chunks += (bytes + LC_CHUNK - 1) / LC_CHUNK;
        }
    };
    add(0, 0, o0, o1, qd, 0);
    add(1, 0, j0, j1, h, 0);
    add(1, inter, j0, j1, h, nj);
    add(2, 0, o0, o1, inter, 0);
    nseg_s[0] = n;
    nch_s[0] = chunks;
    add(3, 0, q0, q1, h, 0);
    nseg_s[1] = n;
    nch_s[1] = chunks;
    for (int s = 0; s < stages; s++) {
        mbar_init(full + s * 8, 32);
        mbar_init(empty + s * 8, LC_WARPS);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// attn: [qd] bf16, the layer's attention output (GM = 0: one layer, layers[0]), or with
// GM > 0 each of the n_layers layers runs its attention first (from a.qkv, then from
// qkv_out: GM the group size rounded up to 2 or 4).
// residual: [h] bf16, in place. act: [inter] bf16 scratch. qkv_out: [nqkv] bf16, each
// layer's next qkv (the last layer's is the launch's result; in_norm null: no qkv
// phase, the model's last layer, which must be the launch's last). Biases may be null.
// folded: the norms' weights are folded into gate_up's and qkv's (post_norm and in_norm
// are unit weights): x stays raw and each row's factor scales the f32 products.
// bar: two u32, zero. window: chunks of the weight stream a block keeps in flight (0:
// the whole ring); hold: a layer's chunks that may stream before its attention is done
// (see lc_produce).
template <int GM, bool SPAN>
__device__ __forceinline__ void layer_chain_impl(
    const bf16_t* attn, const LcAttnArgs& a, const LcLayer* layers, int n_layers,
    bf16_t* residual, bf16_t* act, bf16_t* qkv_out, u32* bar, int h, int qd, int inter,
    int nqkv, float eps, int folded, int stages, int xmax, int acc_rows, int region, int window, int hold) {
    extern __shared__ __align__(128) unsigned char lc_smem[];
    __shared__ float scratch[32];
    LcTrace tr(bar);
    const int b = blockIdx.x;
    bf16_t* x = reinterpret_cast<bf16_t*>(lc_smem + (size_t)stages * LC_CHUNK);
    float* acc = reinterpret_cast<float*>(lc_smem + (size_t)stages * LC_CHUNK + (size_t)xmax * 2);
    const u32 ring = smem_u32(lc_smem);
    const u32 full = smem_u32(lc_smem + (size_t)stages * LC_CHUNK + region), empty = full + stages * 8;
    // With the attention in front, the table of layers after the mbarriers (the host
    // sizes the region for LC_MAX_LAYERS); the products-only chain reads its one layer.
    // A span (layer_chain_span_g2) reads its table of layers from shared memory; the
    // one-layer kernels read their layer from the parameters.
    constexpr bool multi = SPAN;
    const LcLayer* table_s =
        multi ? reinterpret_cast<const LcLayer*>(lc_smem + (size_t)stages * (LC_CHUNK + 16) + region)
              : layers;
    // This block's rows of each product (o's and down's are the same: [o0, o1) of h),
    // computed where used: held in registers across the attention, they pushed the
    // group-of-4 build into spilling.
    auto rows = [&](int n, int& r0, int& r1) {
        r0 = lc_split(n, b);
        r1 = lc_split(n, b + 1);
    };
    // The block's segments (the same in every layer) and, for a layer without and with
    // the qkv phase, their count and chunks.
    __shared__ LcSeg segs[LC_SEGS];
    __shared__ int nseg_s[2];
    __shared__ u32 nch_s[2];
    // With the attention in front, the producer warp sets up the stream while the
    // consumers start the attention, and named barriers join them: LC_BAR_SETUP (the
    // set-up is done: the consumers wait on it before phase 0) and LC_BAR_GO (a layer's
    // attention is done: the stream waits on it, see lc_produce). Consumer thread 0 set
    // up while the block waited in the first build: the attention then entered ~1 µs
    // after the block's start (0.6B batch-1 step 0.987x against it, 2026-12-04).
    // Without the attention the stream starts at once after a block barrier.
    constexpr bool split_roles = GM > 0;
    if constexpr (!multi) n_layers = 1;
    if (threadIdx.x == (split_roles ? LC_CONSUMERS : 0))
        lc_setup(segs, nseg_s, nch_s, h, qd, inter, nqkv, full, empty, stages);
    if constexpr (split_roles) {
        if (threadIdx.x >= LC_CONSUMERS) {
            // The table of layers into shared memory (after the mbarriers), while the
            // consumers run the first layer's attention from the parameters. Read through
            // the parameters, each layer's row was a constant-cache miss on the path of
            // its attention and phases.
            if constexpr (multi) {
                const unsigned long long* src = reinterpret_cast<const unsigned long long*>(layers);
                unsigned long long* dst =
                    reinterpret_cast<unsigned long long*>(const_cast<LcLayer*>(table_s));
                const int words = n_layers * (int)(sizeof(LcLayer) / 8);
                for (int i = threadIdx.x - LC_CONSUMERS; i < words; i += 32) dst[i] = src[i];
                __syncwarp();
            }
            lc_bar_arrive_all(LC_BAR_SETUP);
            lc_produce(segs, nseg_s, nch_s, table_s, n_layers, true, hold, ring, full, empty,
                       stages, window, tr);
            return;
        }
    } else {
        __syncthreads();  // the last barrier of the whole block: then the roles split
        if (threadIdx.x >= LC_CONSUMERS) {
            lc_produce(segs, nseg_s, nch_s, layers, n_layers, false, 0, ring, full, empty,
                       stages, window, tr);
            return;
        }
    }
    const unsigned char* ring_ptr = lc_smem;
    u32 used = 0;
    // The grid barrier's next target, in shared memory: only thread 0 uses it (a register
    // held across the attention pushed the group-of-4 build into spilling).
    __shared__ unsigned long long bar_target;
    if (threadIdx.x == 0) bar_target = lc_bar_base(bar);

    // Loads that depend on nothing this launch writes go out once phase 0's input is in,
    // so that they are back before their first use in its epilogue (the first build
    // loaded each where it was used). Issued earlier they delayed what followed them: a
    // warp's loads complete in order, and behind the stream's copies DRAM loads take
    // microseconds (traced 2026-12-04: issued before the x load, they moved the
    // products-only chain's phase 0 at Qwen3-14B from 2.8 to 6.7 µs after the start;
    // issued before the first barrier, the 0.6B batch-1 step measured 1.009x against
    // here). Block b is the only writer of its residual rows [o0, o1) (o's and down's), so
    // it keeps their values: phase 2 adds to what phase 0 wrote without reading it back.
    // (Per layer, in the loop: nothing of it stays live across the next attention.)
    for (int l = 0; l < n_layers; l++) {
        // (The first layer's row in shared memory only after its attention.)
        const LcLayer& ly = table_s[l];
        int cs = 0;
        // Phase 0: residual += bf16(attn · W_oᵀ + b_o) on this block's rows.
        if constexpr (GM > 0) {
            // Past the first layer, every block's rows of this layer's qkv must be in.
            if (l > 0) lc_grid_sync(bar, bar_target);
            const LcLayer& la = l == 0 ? layers[0] : ly;
            lc_attention<GM>(l == 0 ? a.qkv : qkv_out, multi && l > 0, la.q_norm, la.k_norm, a.pos,
                             a.inv_freq, eps, a.scale, a.slots, la.k_cache, la.v_cache,
                             a.kv_len, a.page_start, a.page_ids, a.hq, a.hkv, a.page_size,
                             a.part, a.o_part, a.lse, reinterpret_cast<float*>(x), bar + 2,
                             a.attn_out, lc_smem, tr, (int)blockIdx.x, (int)gridDim.x);
            lc_bar_arrive_all(LC_BAR_GO);
            if (l == 0) lc_bar_sync_all(LC_BAR_SETUP);
            tr.mark(LC_T_ATT);
            lc_grid_sync(bar, bar_target);
            tr.mark(LC_T_SYNC0);
            lc_load_x(x, a.attn_out, qd);
        } else {
            lc_load_x(x, attn, qd);
        }
        int o0, o1, j0, j1, q0, q1;
        rows(h, o0, o1);
        rows(inter, j0, j1);
        rows(nqkv, q0, q1);
        const int nj = j1 - j0;
        const int my_r = o0 + threadIdx.x;
        const int my_q = q0 + threadIdx.x;
        float res_keep = 0.0f, bo_keep = 0.0f, bq_keep = 0.0f;
        u32x4 post_w0 = u32x4{0, 0, 0, 0}, in_w0 = u32x4{0, 0, 0, 0};
        auto early_loads = [&]() {
            if (my_r < o1) {
                res_keep = bf2f(ld_cg_bf16(residual + my_r));
                if (ly.b_o != nullptr) bo_keep = bf2f(ly.b_o[my_r]);
            }
            if (my_q < q1 && ly.b_qkv != nullptr) bq_keep = bf2f(ly.b_qkv[my_q]);
            post_w0 = lc_norm_w0(ly.post_norm, h);
            if (ly.in_norm != nullptr) in_w0 = lc_norm_w0(ly.in_norm, h);
        };
        // residual[r] += o on this block's rows (r's first value kept or read through L2).
        auto add_rows = [&](int r0, int r1, const bf16_t* bias, float keep_bias) {
            for (int r = r0 + threadIdx.x; r < r1; r += LC_CONSUMERS) {
                const bool mine = r == my_r;
                float bv = mine ? keep_bias : bias != nullptr ? bf2f(bias[r]) : 0.0f;
                float o = bf2f(f2bf(acc[r - r0] + bv));
                float prev = mine ? res_keep : bf2f(ld_cg_bf16(residual + r));
                bf16_t nv = f2bf(prev + o);
                residual[r] = nv;
                if (mine) res_keep = bf2f(nv);
            }
        };
        lc_zero(acc, acc_rows);
        early_loads();
        tr.mark(LC_T_X0);
        lc_consume(segs, nseg_s[1], 0, cs, used, x, acc, full, empty, stages, ring_ptr, tr);
        tr.mark(LC_T_C0);
        add_rows(o0, o1, ly.b_o, bo_keep);
        lc_grid_sync(bar, bar_target);
        tr.mark(LC_T_SYNC1);

        // Phase 1: act = silu(gate) * up of the post-attention-normed residual.
        const float s1 = lc_norm_x(x, residual, ly.post_norm, post_w0, h, eps, folded, scratch);
        lc_zero(acc, acc_rows);
        tr.mark(LC_T_X1);
        lc_consume(segs, nseg_s[1], 1, cs, used, x, acc, full, empty, stages, ring_ptr, tr);
        tr.mark(LC_T_C1);
        for (int j = threadIdx.x; j < nj; j += LC_CONSUMERS) {
            float gt = bf2f(f2bf(acc[j] * s1)), up = bf2f(f2bf(acc[nj + j] * s1));
            act[j0 + j] = f2bf(silu(gt) * up);
        }
        lc_grid_sync(bar, bar_target);
        tr.mark(LC_T_SYNC2);

        // Phase 2: residual += bf16(act · W_downᵀ).
        lc_load_x(x, act, inter);
        lc_zero(acc, acc_rows);
        tr.mark(LC_T_X2);
        lc_consume(segs, nseg_s[1], 2, cs, used, x, acc, full, empty, stages, ring_ptr, tr);
        tr.mark(LC_T_C2);
        add_rows(o0, o1, nullptr, 0.0f);
        if (ly.in_norm == nullptr) break;
        lc_grid_sync(bar, bar_target);
        tr.mark(LC_T_SYNC3);

        // Phase 3: the next layer's qkv of its input-normed residual.
        const float s3 = lc_norm_x(x, residual, ly.in_norm, in_w0, h, eps, folded, scratch);
        lc_zero(acc, acc_rows);
        tr.mark(LC_T_X3);
        lc_consume(segs, nseg_s[1], 3, cs, used, x, acc, full, empty, stages, ring_ptr, tr);
        tr.mark(LC_T_C3);
        for (int r = q0 + threadIdx.x; r < q1; r += LC_CONSUMERS) {
            float bq = r == my_q ? bq_keep : ly.b_qkv != nullptr ? bf2f(ly.b_qkv[r]) : 0.0f;
            qkv_out[r] = f2bf(acc[r - q0] * s3 + bq);
        }
    }
    tr.end();
}

extern "C" __global__ void __launch_bounds__(LC_THREADS, 1)
    layer_chain(const bf16_t* attn, const bf16_t* w_o, const bf16_t* b_o, bf16_t* residual,
                const bf16_t* post_norm, const bf16_t* w_gate_up, const bf16_t* w_down,
                bf16_t* act, const bf16_t* in_norm, const bf16_t* w_qkv, const bf16_t* b_qkv,
                bf16_t* qkv_out, u32* bar, int h, int qd, int inter, int nqkv, float eps, int folded,
                int stages, int xmax, int acc_rows, int region, int window) {
    const LcLayer one{w_o,    b_o,   post_norm, w_gate_up, w_down,  in_norm,
                      w_qkv,  b_qkv, nullptr,   nullptr,   nullptr, nullptr};
    layer_chain_impl<0, false>(attn, LcAttnArgs{}, &one, 1, residual, act, qkv_out, bar, h,
                               qd, inter, nqkv, eps, folded, stages, xmax, acc_rows, region, window, 0);
}

// The same launch with the layer's attention first (layer_chain_attn_g2/_g4: GQA groups
// of up to 2 and 4 query heads a kv head; head_dim 128). The arguments after window
// are the attention's: qkv, the layer's q/k norms and caches, then LcAttnArgs' order.
#define LAYER_CHAIN_ATTN(GM)                                                                   \
    extern "C" __global__ void __launch_bounds__(LC_THREADS, 1) layer_chain_attn_g##GM(       \
        const bf16_t* w_o, const bf16_t* b_o, bf16_t* residual, const bf16_t* post_norm,      \
        const bf16_t* w_gate_up, const bf16_t* w_down, bf16_t* act, const bf16_t* in_norm,    \
        const bf16_t* w_qkv, const bf16_t* b_qkv, bf16_t* qkv_out, u32* bar, int h, int qd,   \
        int inter, int nqkv, float eps, int folded, int stages, int xmax, int acc_rows, int region,       \
        int window, const bf16_t* qkv, const bf16_t* q_norm, const bf16_t* k_norm,            \
        const int* pos, const float* inv_freq, const int* slots, bf16_t* k_cache,             \
        bf16_t* v_cache, const int* kv_len, const int* page_start, const int* page_ids,       \
        float* o_part, float* lse, bf16_t* attn_out, int hq, int hkv, int page_size,          \
        int part, float scale) {                                                              \
        const LcLayer one{w_o,   b_o,    post_norm, w_gate_up, w_down,  in_norm,              \
                          w_qkv, b_qkv,  q_norm,    k_norm,    k_cache, v_cache};             \
        LcAttnArgs a{qkv,    pos, inv_freq, slots, kv_len,    page_start, page_ids, o_part,   \
                     lse,    attn_out, hq, hkv, page_size, part, scale};                      \
        layer_chain_impl<GM, false>(nullptr, a, &one, 1, residual, act, qkv_out, bar, h, qd,  \
                                    inter, nqkv, eps, folded, stages, xmax, acc_rows, region, window, \
                                    0);                                                       \
    }
LAYER_CHAIN_ATTN(2)
LAYER_CHAIN_ATTN(4)

// Up to LC_MAX_LAYERS consecutive layers of group 2 or less in one launch, each with its
// attention first: the first from qkv, each later one from the qkv the one before it
// wrote to qkv_out. The table of layers comes last among the arguments, so that the
// scalars keep their few constant lines at the front; the others follow LcAttnArgs.
// Tried and reverted (2026-12-04): each layer's attention inputs (this block's context
// rows of K and V, the q/k norms) prefetched into L2 during the layer before, as its
// down or its o phase started: 0.874 and 0.863 against 0.853 ms without, 1.019 against
// 1.002 at context 2,048. Extra DRAM requests during the phases cost more than the
// attention's round trips they save, as streaming the next layer's chunks ahead did.
// The q/k norms alone prefetched (four lines a layer, from block 0): 0.837 against
// 0.837 ms, nothing. The model's final norm applied at the span's end (a grid barrier,
// then block 0): 0.862 against 0.851 ms with the norm's own launch, 0.994 against 0.989
// at context 2,048.
// Why: each launch boundary costs the grid's drain and start and the set-up (Qwen3-0.6B
// batch-1 step 0.847 against 0.871-0.890 ms a launch a layer, 2026-12-04). In the group-of-4
// build the layer loop spilled 84-234 bytes (its attention's state is twice as large,
// and what the loop keeps live pushes it past the 96 registers of a 544-thread block),
// so there is none.
// A span's parameters (layer_chain_span_g2 and its two-row build) and the attention's
// share of them.
#define LC_SPAN_PARAMS                                                                         \
    bf16_t *residual, bf16_t *act, bf16_t *qkv_out, u32 *bar, int h, int qd, int inter,      \
        int nqkv, float eps, int folded, int stages, int xmax, int acc_rows, int region, int window,     \
        int hold, int n_layers, const bf16_t *qkv, const int *pos, const float *inv_freq,    \
        const int *slots, const int *kv_len, const int *page_start, const int *page_ids,     \
        float *o_part, float *lse, bf16_t *attn_out, int hq, int hkv, int page_size, int part, \
        float scale, const __grid_constant__ LcLayers layers
#define LC_SPAN_ATTN_ARGS                                                                   \
    LcAttnArgs{qkv,      pos, inv_freq, slots,     kv_len, page_start, page_ids, o_part, lse, \
               attn_out, hq,  hkv,      page_size, part,   scale}
extern "C" __global__ void __launch_bounds__(LC_THREADS, 1) layer_chain_span_g2(LC_SPAN_PARAMS) {
    const LcAttnArgs a = LC_SPAN_ATTN_ARGS;
    layer_chain_impl<2, true>(nullptr, a, layers.l, n_layers, residual, act, qkv_out, bar, h,
                              qd, inter, nqkv, eps, folded, stages, xmax, acc_rows, region, window,
                              hold);
}

// ---- Two decode rows: layer_chain_r2 ----
//
// The products-only chain over R rows (R sequences' decode tokens): the same weight
// stream and phases, each landed chunk multiplied into all R rows. Why: past one row the
// layer's products are four launches again (gemv.cu's builds), each paying its launch,
// its blocks' start-up and its tail above its bytes: ~7.5 µs a product under graphs, and
// Llama-3.1-8B's graph steps of 2-64 rows at 1.31-1.35x their floor against the chain's
// 1.14x at one row (part 109, 2026-12-05, an H100). x and the accumulators are R deep
// (row r at x + r xmax and acc + r acc_rows). The products run on CUDA cores, each
// piece's weights converted once for all R rows: a chunk of a row-major weight holds a
// few whole rows, not the 16 x 16 tiles an mma takes, so the arithmetic grows with R.
// Measured (part 111, 2026-12-06, an H100, graph steps at context 1,024 against the
// separate products, medians of 7 alternating rounds): two rows 1.050x faster at
// Qwen3-0.6B, 1.060x at Llama-3.1-8B, 1.055x at Qwen3-14B; four rows (r4, also serving
// batch 3 through the graphs' padding) 0.905x, 0.785x and 0.794x, with 6, 3 and 2 ring
// stages: slower everywhere, the small model included, where the ring was full, so the
// consumers' arithmetic rather than the stages bounded it. The r3 and r4 builds were
// removed; the template keeps R general.

// lc_load_x of R rows (row r: src + r n into x + r xmax), each thread's loads of all R
// rows issued before any of them is stored, so that the rows cost one L2 round trip. The
// first build loaded row after row (and read each epilogue's residual row after row):
// its r4 ran the 0.6B step 1.28x slower than the separate products where r2 was 1.04x
// faster (part 111 call 1, 2026-12-06, an H100); loads together, 0.905x and 1.050x
// (call 2).
template <int R>
__device__ __forceinline__ void lc_load_rows(bf16_t* x, int xmax, const bf16_t* src, int n) {
    for (int i = threadIdx.x; i < n / 8; i += LC_CONSUMERS) {
        u32x4 v[R];
#pragma unroll
        for (int r = 0; r < R; r++) v[r] = ld_cg(reinterpret_cast<const u32x4*>(src + (size_t)r * n) + i);
#pragma unroll
        for (int r = 0; r < R; r++) reinterpret_cast<u32x4*>(x + (size_t)r * xmax)[i] = v[r];
    }
}

// lc_norm_x on R rows at once (row r: x + r xmax from residual + r n): every row's loads
// go out before one consumer barrier, and one pair of barriers sums all R rows' squares
// (red: LC_WARPS x R floats), so R rows cost one L2 round trip and one block reduction
// rather than R of each. Each row's sums run in lc_norm_x's order, so it rounds alike.
// sc[r]: the factor row r's product still owes (see lc_norm_x; 1 unless `folded`).
template <int R>
__device__ __forceinline__ void lc_norm_rows(bf16_t* x, int xmax, const bf16_t* residual,
                                             const bf16_t* weight, u32x4 w0, int n, float eps,
                                             bool folded, float* red, float (&sc)[R]) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    lc_load_rows<R>(x, xmax, residual, n);
    lc_sync();
    float ss[R];
#pragma unroll
    for (int r = 0; r < R; r++)
        ss[r] = warp_sum(lc_sumsq(reinterpret_cast<const u32x4*>(x + (size_t)r * xmax), n));
    if (lane == 0) {
#pragma unroll
        for (int r = 0; r < R; r++) red[warp * R + r] = ss[r];
    }
    lc_sync();
#pragma unroll
    for (int r = 0; r < R; r++) {
        const float inv =
            rsqrtf(warp_sum(lane < LC_WARPS ? red[lane * R + r] : 0.0f) / (float)n + eps);
        sc[r] = folded ? inv : 1.0f;
        if (!folded) lc_scale_x(reinterpret_cast<u32x4*>(x + (size_t)r * xmax), weight, w0, inv, n);
    }
}

// layer_chain's arguments with every activation R rows deep: attn [R, qd], residual
// [R, h] (in place), act [R, inter] scratch, qkv_out [R, nqkv]. The rounding is the
// one-row chain's, row by row. GM = 0: one layer (layers[0]), from attn. GM > 0 (the
// group of the attention, rounded up): n_layers layers, each with the attention of its R
// sequences first (a.qkv [R, nqkv] for the first, qkv_out for each later one), the
// table of layers copied to shared memory after the mbarriers, as layer_chain_span_g2.
template <int R, int GM = 0>
__device__ __forceinline__ void layer_chain_rows_impl(
    const bf16_t* attn, const LcAttnArgs& a, const LcLayer* layers, int n_layers,
    bf16_t* residual, bf16_t* act, bf16_t* qkv_out, u32* bar, int h, int qd, int inter,
    int nqkv, float eps, int folded, int stages, int xmax, int acc_rows, int region, int window, int hold) {
    extern __shared__ __align__(128) unsigned char lc_smem[];
    __shared__ float red[LC_WARPS * R];
    __shared__ LcSeg segs[LC_SEGS];
    __shared__ int nseg_s[2];
    __shared__ u32 nch_s[2];
    __shared__ unsigned long long bar_target;
    constexpr bool ATT = GM > 0;
    LcTrace tr(bar);
    const int b = blockIdx.x;
    bf16_t* x = reinterpret_cast<bf16_t*>(lc_smem + (size_t)stages * LC_CHUNK);
    float* acc = reinterpret_cast<float*>(lc_smem + (size_t)stages * LC_CHUNK + (size_t)R * xmax * 2);
    const u32 ring = smem_u32(lc_smem);
    const u32 full = smem_u32(lc_smem + (size_t)stages * LC_CHUNK + region), empty = full + stages * 8;
    const LcLayer* table = layers;
    if constexpr (ATT) {
        // The table into shared memory: read through the parameters with a run-time
        // index, each layer's row is a constant-cache miss (see layer_chain_impl).
        LcLayer* t = reinterpret_cast<LcLayer*>(lc_smem + (size_t)stages * (LC_CHUNK + 16) + region);
        const unsigned long long* src = reinterpret_cast<const unsigned long long*>(layers);
        unsigned long long* dst = reinterpret_cast<unsigned long long*>(t);
        const int words = n_layers * (int)(sizeof(LcLayer) / 8);
        for (int i = threadIdx.x; i < words; i += LC_THREADS) dst[i] = src[i];
        table = t;
    } else {
        n_layers = 1;
    }
    if (threadIdx.x == 0) lc_setup(segs, nseg_s, nch_s, h, qd, inter, nqkv, full, empty, stages);
    __syncthreads();  // the last barrier of the whole block: then the roles split
    if (threadIdx.x >= LC_CONSUMERS) {
        lc_produce(segs, nseg_s, nch_s, table, n_layers, ATT, hold, ring, full, empty, stages,
                   window, tr);
        return;
    }
    if (threadIdx.x == 0) bar_target = lc_bar_base(bar);
    const unsigned char* ring_ptr = lc_smem;
    u32 used = 0;
    const int o0 = lc_split(h, b), o1 = lc_split(h, b + 1);
    const int j0 = lc_split(inter, b), j1 = lc_split(inter, b + 1), nj = j1 - j0;
    const int q0 = lc_split(nqkv, b), q1 = lc_split(nqkv, b + 1);
    // residual[r] += bf16(acc + bias) on this block's outputs [o0, o1) of each row r.
    // Only this block writes them, so it keeps them: thread t's output o0 + t of every
    // row (all of them while o1 - o0 <= LC_CONSUMERS, every shape here) lives in `keep`
    // from its one load at the start, and any further output is read back with all R
    // rows' loads in flight at once.
    const int mine = o0 + threadIdx.x;
    float keep[R];
    // Each row's factor its phase-1 or phase-3 product still owes (lc_norm_rows).
    float sc[R];
    for (int l = 0; l < n_layers; l++) {
        const LcLayer& ly = table[l];
        if constexpr (ATT) {
            // Past the first layer, every block's rows of this layer's qkv must be in.
            if (l > 0) lc_grid_sync(bar, bar_target);
            // Sequence r takes the r-th of R equal shares of the grid (the blocks past
            // them sit the attention out), each with its own partials and tickets.
            const int share = (int)gridDim.x / R, r = b / share;
            if (r < R) {
                const size_t parts = (size_t)a.hq * LC_MAX_SPLITS;
                lc_attention<GM>((l == 0 ? a.qkv : qkv_out) + (size_t)r * nqkv, l > 0, ly.q_norm,
                                 ly.k_norm, a.pos + r, a.inv_freq, eps, a.scale, a.slots + r,
                                 ly.k_cache, ly.v_cache, a.kv_len + r, a.page_start + r,
                                 a.page_ids, a.hq, a.hkv, a.page_size, a.part,
                                 a.o_part + parts * LC_HD * r, a.lse + parts * r,
                                 reinterpret_cast<float*>(x), bar + 2 + a.hkv * r,
                                 a.attn_out + (size_t)r * qd, lc_smem, tr, b - r * share,
                                 share);
            }
            lc_bar_arrive_all(LC_BAR_GO);
            tr.mark(LC_T_ATT);
            lc_grid_sync(bar, bar_target);
        }
        int cs = 0;
        auto add_rows = [&](const bf16_t* bias) {
            for (int i = mine; i < o1; i += LC_CONSUMERS) {
                const float bv = bias != nullptr ? bf2f(bias[i]) : 0.0f;
                float prev[R];
#pragma unroll
                for (int r = 0; r < R; r++)
                    prev[r] = i == mine ? keep[r] : bf2f(ld_cg_bf16(residual + (size_t)r * h + i));
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const bf16_t nv = f2bf(prev[r] + bf2f(f2bf(acc[r * acc_rows + i - o0] + bv)));
                    residual[(size_t)r * h + i] = nv;
                    if (i == mine) keep[r] = bf2f(nv);
                }
            }
        };

        // The four phases as one loop, so that the consumer loop is inlined once: four
        // inlined copies made the (since removed) r4 build 175 KB of machine code (one:
        // 101 KB). 0: residual += bf16(attn · W_oᵀ + b_o); 1: act = silu(gate) * up of the
        // post-attention-normed residual; 2: residual += bf16(act · W_downᵀ); 3: the next
        // layer's qkv of its input-normed residual (none after the model's last layer).
        const int phases = ly.in_norm != nullptr ? 4 : 3;
        // The trace's points of each phase: past its barrier, its input in, its products.
        constexpr int at_sync[4] = {LC_T_SYNC0, LC_T_SYNC1, LC_T_SYNC2, LC_T_SYNC3};
        constexpr int at_x[4] = {LC_T_X0, LC_T_X1, LC_T_X2, LC_T_X3};
        constexpr int at_c[4] = {LC_T_C0, LC_T_C1, LC_T_C2, LC_T_C3};
#pragma unroll 1
        for (int phase = 0; phase < phases; phase++) {
            if (phase > 0) lc_grid_sync(bar, bar_target);
            tr.mark(at_sync[phase]);
            if (phase == 0 || phase == 2) {
                const bf16_t* src = phase == 2 ? act : ATT ? a.attn_out : attn;
                lc_load_rows<R>(x, xmax, src, phase == 0 ? qd : inter);
                // After x's loads, as the one-row chain's early loads: a warp's loads
                // complete in order, and issued first they would hold x's behind them.
                if (phase == 0) {
#pragma unroll
                    for (int r = 0; r < R; r++)
                        keep[r] = mine < o1 ? bf2f(ld_cg_bf16(residual + (size_t)r * h + mine)) : 0.0f;
                }
            } else {
                const bf16_t* w = phase == 1 ? ly.post_norm : ly.in_norm;
                lc_norm_rows<R>(x, xmax, residual, w, lc_norm_w0(w, h), h, eps, folded, red, sc);
            }
            lc_zero(acc, R * acc_rows);
            tr.mark(at_x[phase]);
            lc_consume<R>(segs, nseg_s[1], phase, cs, used, x, acc, full, empty, stages, ring_ptr,
                          tr, xmax, acc_rows);
            tr.mark(at_c[phase]);
            if (phase == 0 || phase == 2) {
                add_rows(phase == 0 ? ly.b_o : nullptr);
            } else if (phase == 1) {
                for (int j = threadIdx.x; j < nj; j += LC_CONSUMERS) {
#pragma unroll
                    for (int r = 0; r < R; r++) {
                        float gt = bf2f(f2bf(acc[r * acc_rows + j] * sc[r]));
                        float up = bf2f(f2bf(acc[r * acc_rows + nj + j] * sc[r]));
                        act[(size_t)r * inter + j0 + j] = f2bf(silu(gt) * up);
                    }
                }
            } else {
                for (int i = q0 + threadIdx.x; i < q1; i += LC_CONSUMERS) {
                    const float bq = ly.b_qkv != nullptr ? bf2f(ly.b_qkv[i]) : 0.0f;
#pragma unroll
                    for (int r = 0; r < R; r++)
                        qkv_out[(size_t)r * nqkv + i] = f2bf(acc[r * acc_rows + i - q0] * sc[r] + bq);
                }
            }
        }
        if (ly.in_norm == nullptr) break;
    }
    tr.end();
}

// layer_chain's parameters, R rows deep (see layer_chain_rows_impl).
#define LAYER_CHAIN_ROWS(R)                                                                      \
    extern "C" __global__ void __launch_bounds__(LC_THREADS, 1) layer_chain_r##R(               \
        const bf16_t* attn, const bf16_t* w_o, const bf16_t* b_o, bf16_t* residual,             \
        const bf16_t* post_norm, const bf16_t* w_gate_up, const bf16_t* w_down, bf16_t* act,    \
        const bf16_t* in_norm, const bf16_t* w_qkv, const bf16_t* b_qkv, bf16_t* qkv_out,       \
        u32* bar, int h, int qd, int inter, int nqkv, float eps, int folded, int stages, int xmax,          \
        int acc_rows, int region, int window) {                                                 \
        const LcLayer one{w_o,   b_o,   post_norm, w_gate_up, w_down,  in_norm,                 \
                          w_qkv, b_qkv, nullptr,   nullptr,   nullptr, nullptr};                \
        layer_chain_rows_impl<R>(attn, LcAttnArgs{}, &one, 1, residual, act, qkv_out, bar, h,   \
                                 qd, inter, nqkv, eps, folded, stages, xmax, acc_rows, region, window,  \
                                 0);                                                            \
    }
LAYER_CHAIN_ROWS(2)

// layer_chain_span_g2 at two decode rows (two sequences of one new token each): its
// arguments, every activation and the step's per-sequence arrays two deep. Why: past one
// row the attention was three launches a layer again (qkv_rope_store, the decode
// attention and its combine) around the products-only chain: the Qwen3-0.6B graph step
// went from 0.898 ms at batch 1 to 1.190 at batch 2 (an H100, 2026-12-06), most of it
// 28 x 3 launch boundaries.
extern "C" __global__ void __launch_bounds__(LC_THREADS, 1) layer_chain_span_g2_r2(LC_SPAN_PARAMS) {
    const LcAttnArgs a = LC_SPAN_ATTN_ARGS;
    layer_chain_rows_impl<2, 2>(nullptr, a, layers.l, n_layers, residual, act, qkv_out, bar, h,
                                qd, inter, nqkv, eps, folded, stages, xmax, acc_rows, region, window,
                                hold);
}
