// Warp-specialised Hopper prefill attention (FlashAttention-3's structure): the
// engine's prefill kernel on sm_90 (attention_prefill_sm90.cu is its fallback and
// MINISGL_PREFILL_KERNEL=hopper selects it). docs/results/gpu-2026-12-01-prefill.md:
// correct against an f32 reference on every attn_bench case and against the CPU backend
// in gpu-check, 1.16-1.56x the earlier kernel, memcheck clean in the engine; the
// Qwen3-14B run once thought stuck was a 95 s start-up (random weights) plus 20 s.
// Launch: grid = min(items, SMs), 384 threads, P_SMEM(HD) dynamic shared memory, a
// zeroed int counter, the watchdog's report (6 ints of host memory, or null), and the
// K and V caches' tensor maps (tma.rs; by value).
//
// Same contract and metadata as attention_prefill.cu: causal, cached prefix, GQA,
// head_dim 64 or 128.
//
// - Warpgroup 0 is the producer. It copies Q with cp.async, and the K/V tiles of one
//   KV head from the paged cache into 128-byte-swizzled shared memory: in the TMA
//   builds (attn_prefill_ws_hd*, pages of 8+ rows) its first P_KV_WARPS warps issue
//   one bulk tensor copy per page chunk between them, completing on the tile's
//   mbarrier with their bytes; in the gather builds (attn_prefill_ws_gather_hd*) all
//   128 threads copy with cp.async and each signals the mbarrier when its copies
//   land. Either way the producer never waits for its own loads, only for a stage to
//   be released. It runs on few registers (setmaxnreg) so the two consumers can hold
//   S, P and O.
// - Warpgroups 1 and 2 each own 64 query rows of a 128-row tile. Q K^T runs on wgmma
//   from shared memory (Q is in shared memory, not registers), P V with P in
//   registers. Within a warpgroup, Q K^T of tile j and P V of tile j-1 go to the tensor
//   cores together and the softmax of tile j runs while P V does (intra-warpgroup
//   overlap); between the two warpgroups, named barriers hand the tensor cores over
//   in turn (ping-pong). The causal mask is applied only on the tiles that cross the
//   diagonal. O leaves through the warpgroup's own rows of the Q slot, in 16-byte rows.
// - The grid is persistent (one block per SM): each block takes work items (one query
//   tile of one head, heaviest causal spans first) from a global counter as it frees
//   up, so uneven spans balance across SMs, and the producer runs ahead into the next
//   item while the consumers finish the current one. The counter resets itself: the
//   block that draws the last past-the-end number sets it back to zero.
#include "common.cuh"
#include "hopper.cuh"

#define P_BQ 128       // query rows per work item (two consumer warpgroups of 64)
#define P_THREADS 384  // warpgroup 0 loads, warpgroups 1 and 2 compute
// Keys per K/V tile. 64 was 17-18% slower at 8 x 2,048 and on the extend case
// (2026-12-03 call 5), and the cp.async gather's rows (4 warps x 32) assume 128.
#define P_BK 128
#ifndef P_KSTAGES
#define P_KSTAGES 2  // K tiles in flight
#endif
#ifndef P_VSTAGES
#define P_VSTAGES 3  // V tiles in flight (V is needed a round after K; with two, waits
                     // on V were a fifth of the consumers' time: gpu-2026-12-02-tma.md)
#endif
#ifndef P_QSLOTS
#define P_QSLOTS 2  // Q tiles: 2 lets the producer load the next item's Q early
#endif
#ifndef P_PINGPONG
#define P_PINGPONG 1
#endif
// 1: one P buffer, packed from S only once the previous P V has landed
// (FlashAttention-3's order; S, O and P hold 160 registers at head_dim 128). 0: two,
// the next P packed while P V still reads the other (192 registers: the consumers
// spilled 116-172 bytes at 224). Equal speed with the shared-memory epilogue, one P
// ahead on the ragged page-64 case (gpu-2026-12-02-epilogue.md).
#ifndef P_ONE_P
#define P_ONE_P 1
#endif
// 1: O leaves through this warpgroup's rows of the item's Q slot (its Q is dead once its
// last Q K^T has landed): fragments into shared memory, then 16-byte rows to global
// memory, and the slot is released after. 0: 4-byte fragment stores straight to global
// memory (a warp's store covers eight rows, half of each 32-byte sector). 1 was 4-5%
// faster at 8 x 2,048 (gpu-2026-12-02-epilogue.md).
#ifndef P_SMEM_EPI
#define P_SMEM_EPI 1
#endif
// Producer warps that issue K/V copies (TMA builds; 1, 2 or 4). Each waits on the
// stages itself and issues every P_KV_WARPS-th copy of a tile, arriving on the full
// barrier with its own bytes. At pages of 16 a tile of K or V is 16 copies; issued by
// one warp (a loop over its lanes, each copy's coordinates moved to uniform registers)
// they cost the kernel a quarter (8 x 2,048 on random pages: 388 / 403 TFLOP/s with
// one warp, 521 / 502 with four, gpu-2026-12-03-kvwarps.md call 1). With four, tiles
// on consecutive pages gain nothing from one copy per tile (the whole-tile maps of
// 2026-12-02 were removed).
#ifndef P_KV_WARPS
#define P_KV_WARPS 4
#endif
static_assert(P_KV_WARPS == 1 || P_KV_WARPS == 2 || P_KV_WARPS == 4, "P_KV_WARPS: 1, 2 or 4");
// The cp.async writes are ordinary (generic-proxy) stores that wgmma then reads
// through the async proxy: each consumer fences after its wait on the copies.
#ifndef P_CONSUMER_FENCE
#define P_CONSUMER_FENCE 1
#endif
#ifndef P_PRODUCER_REGS
#define P_PRODUCER_REGS 56
#endif
#ifndef P_CONSUMER_REGS
#define P_CONSUMER_REGS 224
#endif
// 1: producer thread 0 leaves the drawn work item's fields in shared memory beside its
// number, and the consumers read them there. 0: each consumer thread rebuilds the item
// from global memory (tile -> sequence -> its starts: two dependent loads between the
// end of one item and the first Q K^T of the next, on the consumers' critical path;
// at 32 x 512 an item lasts ~8 us).
#ifndef P_ITEM_SMEM
#define P_ITEM_SMEM 1
#endif
// Diagnostics for attn_bench only (wrong results): 1 = the producer signals K/V
// tiles without copying them (the consumers' bound with free loads).
#ifndef P_DIAG
#define P_DIAG 0
#endif

// setmaxnreg moves registers within the block's own allocation (384 threads at the
// 168 that __launch_bounds__(384, 1) gives): asking for more makes the consumers'
// setmaxnreg.inc wait forever.
static_assert(128 * P_PRODUCER_REGS + 256 * P_CONSUMER_REGS <= P_THREADS * 168,
              "register split exceeds the block's allocation");
static_assert(P_PRODUCER_REGS % 8 == 0 && P_CONSUMER_REGS % 8 == 0, "setmaxnreg takes multiples of 8");

// Dynamic shared memory of a launch (the host computes the same): Q slots, then
// P_KSTAGES K tiles and P_VSTAGES V tiles, plus 1 KB to align to 1024 bytes.
#define P_SMEM(HD) ((P_QSLOTS * P_BQ + (P_KSTAGES + P_VSTAGES) * P_BK) * (HD) * 2 + 1024)

// A wait that never ends would hang the engine with the GPU busy and nothing said (the
// open 14B defect looked like that): past P_WAIT_NS the waiting warp writes which
// barrier of which block it waited on into `diag` (host memory the engine watches;
// printf here would be a call, which serialises every wgmma of the kernel) and traps,
// so the launch fails with an error instead.
#ifndef P_WAIT_NS
#define P_WAIT_NS 4000000000ull
#endif
struct Diag {
    int* p;  // [flag, block, warp, barrier, parity, item] or null
    __device__ __forceinline__ void stuck(u32 bar_index, u32 parity, int item) const {
        if (p != nullptr && (threadIdx.x & 31) == 0) {
            volatile int* v = p;
            v[1] = (int)blockIdx.x;
            v[2] = (int)(threadIdx.x >> 5);
            v[3] = (int)bar_index;
            v[4] = (int)parity;
            v[5] = item;
            __threadfence_system();
            v[0] = 1;
            __threadfence_system();
        }
        asm volatile("trap;\n");
    }
};
// mbar_wait (hopper.cuh) with the watchdog, for the producer only (in the consumers its registers
// made ptxas serialise the wgmmas). Any deadlock of the block reaches a producer
// wait: the producer waits for the consumers to release every stage, up to its tail.
__device__ __forceinline__ void mbar_wait_watched(u32 bar, u32 parity, u32 base, int item, Diag diag) {
    if (mbar_try(bar, parity)) return;
    const u64 t0 = global_ns();
    while (!mbar_try(bar, parity))
        if (global_ns() - t0 > P_WAIT_NS) diag.stuck((bar - base) / 8, parity, item);
}

__device__ __forceinline__ u32 pack_bf16x2_fast(float lo, float hi) {
    u32 r;  // round-to-nearest-even, as f2bf; P holds no NaN
    // volatile: keeps the packing above the next wgmma.fence, so ptxas need not
    // inject a warpgroup.arrive of its own.
    asm volatile("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
// volatile: stays on its side of the wgmma waits (ptxas otherwise sinks half the
// softmax below the wait for P V, which serialises it with the tensor cores).
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm volatile("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ void sts32(u32 addr, u32 v) {
    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ u32x4 lds128(u32 addr) {
    u32x4 v;
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(addr)
                 : "memory");
    return v;
}

// Tile layout in shared memory (Q, K and V alike): head_dim split into 64-column
// blocks; block b is [ROWS][128 bytes], the 16-byte chunk c of row r stored at chunk
// c ^ (r & 7) (the hardware's 128-byte swizzle; every tile starts 1024-byte aligned).
template <int ROWS>
__device__ __forceinline__ u32 tile_off(int r, int c) {
    return (u32)((c >> 3) * (ROWS * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

// One work item: query rows [q0, q0 + P_BQ) of sequence s, query head h.
struct Item {
    int s, h, qs0, n_new, prefix, q0, kv_end, n;
    static constexpr int FIELDS = 8;
    __device__ __forceinline__ Item() {}
    __device__ __forceinline__ void store(int* f) const {
        f[0] = s, f[1] = h, f[2] = qs0, f[3] = n_new, f[4] = prefix, f[5] = q0, f[6] = kv_end, f[7] = n;
    }
    __device__ __forceinline__ void load(const int* f) {
        s = f[0], h = f[1], qs0 = f[2], n_new = f[3], prefix = f[4], q0 = f[5], kv_end = f[6], n = f[7];
    }
    __device__ __forceinline__ Item(int t, const int* q_start, const int* kv_len, const int* tile_seq,
                                    const int* tile_q0, int num_tiles, int q_heads) {
        // Heaviest first: within a sequence the tile list runs from short to long causal
        // spans; consecutive items are the heads of one tile, which share K/V in L2.
        int tile = num_tiles - 1 - t / q_heads;
        h = t % q_heads;
        s = tile_seq[tile];
        q0 = tile_q0[tile];
        qs0 = q_start[s];
        n_new = q_start[s + 1] - qs0;
        prefix = kv_len[s] - n_new;
        kv_end = prefix + min(q0 + P_BQ, n_new);
        n = (kv_end + P_BK - 1) / P_BK;
    }
};

// The producer warpgroup's copies. Warp w moves rows [32w, 32w + 32) of each
// 128-row tile; lane l owns row 32w + l's cache slot (a page-table read, fetched a
// tile ahead so the copies never wait on it) and the warp copies its rows LPR lanes
// to a row, each lane 16 bytes, slots passed by shuffles.
template <int HD>
struct Producer {
    static constexpr int LPR = HD / 8;    // lanes per row
    static constexpr int RPI = 32 / LPR;  // rows per iteration
    const bf16_t* k_cache;
    const bf16_t* v_cache;
    const int* pages;
    int kv_end, kv_heads, kvh, page_size, page_shift;  // page_shift < 0: not a power of 2
    int row0, lane;                                     // 32 * warp, lane

    // This lane's row of the tile at kb: its slot in the cache (rows times heads),
    // or -1 past the end.
    __device__ __forceinline__ int slot(int kb) const {
        int p = kb + row0 + lane;
        if (p >= kv_end) return -1;
        int pg = __ldg(pages + (page_shift >= 0 ? (p >> page_shift) : p / page_size));
        int in = page_shift >= 0 ? (p & (page_size - 1)) : p % page_size;
        return (pg * page_size + in) * kv_heads + kvh;
    }
    // Copies the warp's 32 rows of a tile whose slots the lanes hold in `my_slot`.
    __device__ __forceinline__ void tile(u32 dst, const bf16_t* cache, int my_slot) const {
        int c = lane % LPR;
#pragma unroll
        for (int i = 0; i < 32 / RPI; i++) {
            int rr = i * RPI + lane / LPR;
            int sl = __shfl_sync(0xffffffffu, my_slot, rr);
            const bf16_t* src = cache + (size_t)(sl < 0 ? 0 : sl) * HD + c * 8;
            cp_async16(dst + tile_off<P_BK>(row0 + rr, c), src, sl >= 0);
        }
    }
    // The TMA path (page_size >= 8): a tile is 128 / R chunks of R = min(page_size,
    // 128) consecutive cache rows (a chunk never crosses a page), each copied as
    // HD / 64 boxes of R rows x 128 bytes, copy i by lane i of warp i % P_KV_WARPS. The copy
    // engine applies the 128-byte swizzle, so a box lands in the same layout as
    // tile_off gives the cp.async gather.
    static constexpr int NB = HD / 64;  // boxes per chunk
    int box_rows;                       // R
    // The cache slot (the map's y) of the first row of this lane's chunk of the
    // tile at kb, or -256 past the end (a box wholly outside the map: zero-filled).
    // Rows of a chunk past kv_end but inside its page are read as they are: the pool
    // is zeroed at allocation and the causal mask gives them zero weight.
    __device__ __forceinline__ int tma_row(int kb) const {
        int p = kb + (lane / NB) * box_rows;
        if (lane >= (P_BK / box_rows) * NB || p >= kv_end) return -256;
        int pg = __ldg(pages + (p >> page_shift));
        return pg * page_size + (p & (page_size - 1));
    }
    // Copy i of the tile (lane i holds its row) is issued by warp i % P_KV_WARPS; each
    // warp arrives once on `bar` with the bytes of its own copies (a zero-filled box
    // counts its bytes too), so the stage fills on P_KV_WARPS arrivals.
    __device__ __forceinline__ void tma_tile(u32 dst, const TmaDesc* map, int my_row, u32 bar) const {
        const int w = row0 >> 5;
        const int copies = (P_BK / box_rows) * NB;
        const int mine = copies > w ? (copies - 1 - w) / P_KV_WARPS + 1 : 0;
        if (lane == 0) mbar_arrive_expect_tx(bar, mine * box_rows * 128);
        __syncwarp();
        if (lane >= copies || lane % P_KV_WARPS != w) return;
        int c = lane / NB, b = lane % NB;
        tma_load_2d(dst + b * (P_BK * 128) + c * box_rows * 128, map, kvh * HD + b * 64, my_row, bar);
    }
    __device__ __forceinline__ void q_tile(u32 dst, const bf16_t* q, int q_stride, const Item& it) const {
        int c = lane % LPR;
#pragma unroll
        for (int i = 0; i < 32 / RPI; i++) {
            int r = row0 + i * RPI + lane / LPR;
            bool valid = it.q0 + r < it.n_new;
            const bf16_t* src = q + (size_t)(it.qs0 + (valid ? it.q0 + r : 0)) * q_stride + it.h * HD + c * 8;
            cp_async16(dst + tile_off<P_BQ>(r, c), src, valid);
        }
    }
};

// Barriers in shared memory: Q slots, then K and V stages, each a full/empty pair.
struct Bars {
    u32 base;
    Diag diag;
    __device__ __forceinline__ u32 full_q(int i) const { return base + 8 * i; }
    __device__ __forceinline__ u32 empty_q(int i) const { return base + 8 * (P_QSLOTS + i); }
    __device__ __forceinline__ u32 full_k(int i) const { return base + 8 * (2 * P_QSLOTS + i); }
    __device__ __forceinline__ u32 empty_k(int i) const { return base + 8 * (2 * P_QSLOTS + P_KSTAGES + i); }
    __device__ __forceinline__ u32 full_v(int i) const { return base + 8 * (2 * P_QSLOTS + 2 * P_KSTAGES + i); }
    __device__ __forceinline__ u32 empty_v(int i) const {
        return base + 8 * (2 * P_QSLOTS + 2 * P_KSTAGES + P_VSTAGES + i);
    }
    static constexpr int COUNT = 2 * P_QSLOTS + 2 * P_KSTAGES + 2 * P_VSTAGES;
    __device__ __forceinline__ void wait_watched(u32 bar, u32 parity, int item) const {
        mbar_wait_watched(bar, parity, base, item, diag);
    }
};

// Folds x[0, 2W) and y[0, 2W) in halves until x[0] and y[0] hold the whole of each:
// a tree of depth log2(2W) instead of a chain of 2W - 1 dependent operations.
template <int W, typename F>
__device__ __forceinline__ void tree_reduce(float* x, float* y, F op) {
#pragma unroll
    for (int i = 0; i < W; i++) {
        x[i] = op(x[i], x[i + W]);
        y[i] = op(y[i], y[i + W]);
    }
    if constexpr (W > 1) tree_reduce<W / 2>(x, y, op);
}

// One consumer warpgroup's state over its 64 rows of the query tile.
template <int HD>
struct Rows {
    float oacc[HD / 2];
    float m0, m1, l0, l1;  // running max (scaled to log2 units) and sum per row
    int pos0, pos1, first_pos;
    float sl2;

    // S -> exponentials in s, running max and sum (and, with two P buffers, P packed
    // into pf); returns in al0/al1 the factors by which O must be rescaled once the
    // previous P V has landed.
    // MASK: the tile reaches past this warpgroup's first row, so the causal mask
    // applies (decided per round by the caller: masking every tile cost a compare and
    // a select per score, a fifth of the softmax's instructions).
    template <bool MASK>
    __device__ __forceinline__ void softmax(float (&s)[P_BK / 2], int kb, u32 (&pf)[P_BK / 16][4],
                                            float& al0, float& al1) {
        int tq = threadIdx.x & 3;
        if (MASK) {
            // Score (row, nt * 8 + c) of this thread is key kb + 2 tq + nt * 8 + c: masked
            // past the row's position, compared with the column as an immediate.
            const int lim0 = pos0 - kb - 2 * tq, lim1 = pos1 - kb - 2 * tq;
#pragma unroll
            for (int nt = 0; nt < P_BK / 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    if (nt * 8 + (e & 1) > (e < 2 ? lim0 : lim1)) s[nt * 4 + e] = NEG_INF;
        }
        // Row maxima as a tree (a chain of 32 dependent FMNMX per row was most of the
        // softmax's latency before the exponentials can start).
        float t0[P_BK / 8], t1[P_BK / 8];
#pragma unroll
        for (int nt = 0; nt < P_BK / 8; nt++) {
            t0[nt] = fmaxf(s[nt * 4 + 0], s[nt * 4 + 1]);
            t1[nt] = fmaxf(s[nt * 4 + 2], s[nt * 4 + 3]);
        }
        tree_reduce<P_BK / 16>(t0, t1, [](float a, float b) { return fmaxf(a, b); });
        float mx0 = quad_max(t0[0]);
        float mx1 = quad_max(t1[0]);
        float mn0 = fmaxf(m0, mx0 * sl2), mn1 = fmaxf(m1, mx1 * sl2);
        if (mn0 == NEG_INF) mn0 = 0.0f;  // rows past the sequence see only masked scores
        if (mn1 == NEG_INF) mn1 = 0.0f;
        al0 = ex2(m0 - mn0);
        al1 = ex2(m1 - mn1);
        m0 = mn0;
        m1 = mn1;
#pragma unroll
        for (int nt = 0; nt < P_BK / 8; nt++) {
            // exp2(s * scale·log2e - max): one FFMA and one MUFU per score.
            s[nt * 4 + 0] = ex2(fmaf(s[nt * 4 + 0], sl2, -mn0));
            s[nt * 4 + 1] = ex2(fmaf(s[nt * 4 + 1], sl2, -mn0));
            s[nt * 4 + 2] = ex2(fmaf(s[nt * 4 + 2], sl2, -mn1));
            s[nt * 4 + 3] = ex2(fmaf(s[nt * 4 + 3], sl2, -mn1));
            t0[nt] = s[nt * 4 + 0] + s[nt * 4 + 1];
            t1[nt] = s[nt * 4 + 2] + s[nt * 4 + 3];
        }
        // Row sums as a tree too.
        tree_reduce<P_BK / 16>(t0, t1, [](float a, float b) { return a + b; });
        l0 = l0 * al0 + t0[0];
        l1 = l1 * al1 + t1[0];
        if (!P_ONE_P) pack(s, pf);
    }

    // P (bf16 A fragments of P V) from the exponentials softmax left in s.
    __device__ __forceinline__ static void pack(const float (&s)[P_BK / 2], u32 (&pf)[P_BK / 16][4]) {
#pragma unroll
        for (int c = 0; c < P_BK / 16; c++) {
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

// S = Q K^T for this warpgroup's 64 rows: Q rows [wg*64, wg*64+64) of the Q tile.
// Each k-step's descriptors are the tile's first plus a constant (desc_step): building
// each from its address cost ~9 instructions per wgmma, a fifth of a round's issue.
template <int HD>
__device__ __forceinline__ void issue_qk(float (&s)[P_BK / 2], u32 qs, u32 ks) {
    const u64 da0 = desc_sw128(qs, 16, 1024), db0 = desc_sw128(ks, 16, 1024);
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++) {
        u64 da = desc_step(da0, (kk >> 2) * (P_BQ * 128) + (kk & 3) * 32);
        u64 db = desc_step(db0, (kk >> 2) * (P_BK * 128) + (kk & 3) * 32);
        wgmma_ss_n128(s, da, db, kk);
    }
}

// O += P V. V is N-major (head_dim contiguous): LBO steps between 64-column blocks,
// SBO between groups of 8 key rows.
template <int HD>
__device__ __forceinline__ void issue_pv(float (&o)[HD / 2], const u32 (&pf)[P_BK / 16][4], u32 vs) {
    const u64 d0 = desc_sw128(vs, P_BK * 128, 1024);
#pragma unroll
    for (int c = 0; c < P_BK / 16; c++) {
        u64 d = desc_step(d0, c * 16 * 128);
        if constexpr (HD == 64)
            wgmma_rs_n64_tb(o, pf[c], d);
        else
            wgmma_rs_n128_tb(o, pf[c], d);
    }
}

// TMA: K/V tiles through the copy engine (pages of 8+ rows, a power of two); else the
// producer warpgroup gathers them with cp.async. Two builds rather than a run-time
// switch: the switch cost the gather path 14% (ragged page-1 case, 2026-12-02 call 3).
template <int HD, bool TMA>
__device__ __forceinline__ void prefill_sm90_impl(
    const bf16_t* __restrict__ q, int q_stride, bf16_t* __restrict__ o,
    const bf16_t* __restrict__ k_cache, const bf16_t* __restrict__ v_cache,
    const int* __restrict__ q_start, const int* __restrict__ kv_len,
    const int* __restrict__ page_start, const int* __restrict__ page_ids,
    const int* __restrict__ tile_seq, const int* __restrict__ tile_q0, int num_tiles, int q_heads,
    int kv_heads, int page_size, float scale, int* __restrict__ work_counter, int* diag,
    const TmaDesc* tmk, const TmaDesc* tmv) {
    extern __shared__ unsigned char smem_raw[];
    __shared__ __align__(8) u64 bar_mem[Bars::COUNT];
    __shared__ int item_of_slot[P_QSLOTS];  // the work item whose Q a slot holds
    __shared__ int item_fields[P_QSLOTS][Item::FIELDS];  // its fields (P_ITEM_SMEM)
    constexpr int Q_BYTES = P_BQ * HD * 2, TILE_BYTES = P_BK * HD * 2;
    const u32 base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const u32 kv_base = base + P_QSLOTS * Q_BYTES;  // K stage i at +i·TILE, V stage i at +(P_KSTAGES+i)·TILE
    Bars bars{smem_u32(bar_mem), Diag{diag}};

    const int page_shift = (page_size & (page_size - 1)) == 0 ? __ffs(page_size) - 1 : -1;
    if (threadIdx.x == 0) {
        for (int i = 0; i < P_QSLOTS; i++) {
            // One cp.async arrival per producer thread, and thread 0's once the
            // slot's item number is written.
            mbar_init(bars.full_q(i), 129);
            mbar_init(bars.empty_q(i), 8);   // one arrival per consumer warp
        }
        // A K/V tile lands on one arrival per copying warp with its bytes (TMA) or
        // on one per producer thread once its copies have (cp.async).
        const u32 arrivals = TMA ? P_KV_WARPS : 128;
        for (int i = 0; i < P_KSTAGES; i++) {
            mbar_init(bars.full_k(i), arrivals);
            mbar_init(bars.empty_k(i), 8);
        }
        for (int i = 0; i < P_VSTAGES; i++) {
            mbar_init(bars.full_v(i), arrivals);
            mbar_init(bars.empty_v(i), 8);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    const int total = num_tiles * q_heads;
    const int group = q_heads / kv_heads;

    if (threadIdx.x < 128) {
        // ---- producer -----------------------------------------------------------
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(P_PRODUCER_REGS));
        Producer<HD> pr;
        pr.row0 = (threadIdx.x >> 5) * 32;
        pr.lane = threadIdx.x & 31;
        pr.k_cache = k_cache;
        pr.v_cache = v_cache;
        pr.kv_heads = kv_heads;
        pr.page_size = page_size;
        pr.page_shift = page_shift;
        pr.box_rows = min(page_size, P_BK);
        // With TMA the first P_KV_WARPS warps move K/V; the others copy Q alone.
        const bool kv_warp = !TMA || threadIdx.x < 32 * P_KV_WARPS;
        if (TMA && threadIdx.x == 0) {
            asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<u64>(tmk)) : "memory");
            asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<u64>(tmv)) : "memory");
        }
        int qc = 0, kc = 0, vc = 0;  // tiles issued so far, for slot and parity
        while (true) {
            const int slot = qc % P_QSLOTS;
            bars.wait_watched(bars.empty_q(slot), ((qc / P_QSLOTS) & 1) ^ 1, -1);
            if (threadIdx.x == 0) {
                int t = atomicAdd(work_counter, 1);
                if (t == total + (int)(gridDim.x * gridDim.y) - 1) atomicExch(work_counter, 0);
                item_of_slot[slot] = t;
            }
            named_sync(3, 128);  // the producer warps read the item thread 0 drew
            const int t = item_of_slot[slot];
            if (t >= total) {
                // Past the end: tell the consumers, with no copies in the slot. Plain
                // arrivals, not ones triggered by copies, so that none is pending when
                // the producer returns.
                mbar_arrive_if(bars.full_q(slot), true);
                if (threadIdx.x == 0) mbar_arrive_if(bars.full_q(slot), true);
                break;
            }
            Item it(t, q_start, kv_len, tile_seq, tile_q0, num_tiles, q_heads);
            pr.kv_end = it.kv_end;
            pr.kvh = it.h / group;
            pr.pages = page_ids + page_start[it.s];
            // A lane's slot (cp.async) or chunk row (TMA) in the tile at kb.
            auto row_of = [&](int kb) { return TMA ? pr.tma_row(kb) : pr.slot(kb); };
            pr.q_tile(base + slot * Q_BYTES, q, q_stride, it);
            mbar_arrive_on_copies(bars.full_q(slot));
            // The arrival releases the fields with the item number to the consumers'
            // wait on full_q.
            if (P_ITEM_SMEM && threadIdx.x == 0) it.store(item_fields[slot]);
            if (threadIdx.x == 0) mbar_arrive_if(bars.full_q(slot), true);
            qc++;
            if (!kv_warp) continue;
            int sl_cur = row_of(0), sl_prev = -1;
            // Issues the K or V tile whose rows this lane holds in `rows`.
            auto copy = [&](u32 dst, const bf16_t* cache, const TmaDesc* map, int rows, u32 full) {
                if (P_DIAG == 1) {
                    if (TMA) {
                        if (pr.lane == 0) mbar_arrive_if(full, true);
                    } else {
                        mbar_arrive_if(full, true);
                    }
                } else if (TMA) {
                    pr.tma_tile(dst, map, rows, full);
                } else {
                    pr.tile(dst, cache, rows);
                    mbar_arrive_on_copies(full);
                }
            };
            // K runs one tile ahead of V: V(k) is needed one step after K(k).
            for (int k = 0; k <= it.n; k++) {
                // Page ids of tile k + 1, in flight while tiles k and k - 1 are issued.
                int sl_next = k + 1 < it.n ? row_of((k + 1) * P_BK) : -1;
                if (k < it.n) {
                    int st = kc % P_KSTAGES;
                    bars.wait_watched(bars.empty_k(st), ((kc / P_KSTAGES) & 1) ^ 1, t);
                    copy(kv_base + st * TILE_BYTES, k_cache, tmk, sl_cur, bars.full_k(st));
                    kc++;
                }
                if (k > 0) {
                    int st = vc % P_VSTAGES;
                    bars.wait_watched(bars.empty_v(st), ((vc / P_VSTAGES) & 1) ^ 1, t);
                    copy(kv_base + (P_KSTAGES + st) * TILE_BYTES, v_cache, tmv, sl_prev, bars.full_v(st));
                    vc++;
                }
                sl_prev = sl_cur;
                sl_cur = sl_next;
            }
        }
        // Producer tail: return only once the consumers have released the last
        // K and V stages, so every copy this thread issued has landed and its
        // arrival has been taken (a producer that retired with arrivals in flight was
        // a suspect for the open 14B defect, §4 of docs/results/gpu-2026-12-01-prefill.md).
        for (int i = max(0, kc - P_KSTAGES); i < kc; i++)
            bars.wait_watched(bars.empty_k(i % P_KSTAGES), (i / P_KSTAGES) & 1, -2);
        for (int i = max(0, vc - P_VSTAGES); i < vc; i++)
            bars.wait_watched(bars.empty_v(i % P_VSTAGES), (i / P_VSTAGES) & 1, -2);
        return;
    }

    // ---- consumers ----------------------------------------------------------------
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(P_CONSUMER_REGS));
    const int wg = (threadIdx.x >> 7) - 1;  // 0 or 1
    const int ctid = threadIdx.x & 127;
    const int warp = ctid >> 5, lane = ctid & 31, g = lane >> 2, tq = lane & 3;
    const bool leader = lane == 0;
    // Ping-pong: warpgroup wg issues its matrix work after barrier 1 + wg, then opens
    // the other's. Warpgroup 1 opens warpgroup 0's first turn.
    const int my_turn = 1 + wg, their_turn = 2 - wg;
    if (P_PINGPONG && wg == 1) named_arrive(1, 256);

    int qc = 0, kc = 0, vc = 0;
    while (true) {
        const int qslot = qc % P_QSLOTS;
        mbar_wait(bars.full_q(qslot), (qc / P_QSLOTS) & 1);
        const int t = item_of_slot[qslot];
        if (t >= total) break;
#if P_ITEM_SMEM
        Item it;
        it.load(item_fields[qslot]);
#else
        Item it(t, q_start, kv_len, tile_seq, tile_q0, num_tiles, q_heads);
#endif
        const int n = it.n;
        const int wq0 = it.q0 + wg * 64;
        const int r0 = wq0 + warp * 16 + g, r1 = r0 + 8;

        Rows<HD> st;
        st.pos0 = it.prefix + r0;
        st.pos1 = it.prefix + r1;
        st.first_pos = it.prefix + wq0;
        st.sl2 = scale * LOG2E;
        st.m0 = st.m1 = NEG_INF;
        st.l0 = st.l1 = 0.0f;
#pragma unroll
        for (int i = 0; i < HD / 2; i++) st.oacc[i] = 0.0f;

        const u32 qs = base + qslot * Q_BYTES + wg * 64 * 128;
        if (P_CONSUMER_FENCE) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");

        auto k_stage = [&](int i) { return kv_base + (i % P_KSTAGES) * TILE_BYTES; };
        auto v_stage = [&](int i) { return kv_base + (P_KSTAGES + i % P_VSTAGES) * TILE_BYTES; };
        // Tiles the copy engine wrote are already in the async proxy; cp.async
        // writes are generic stores that need the fence before wgmma reads them.
        auto wait_k = [&](int i) {
            mbar_wait(bars.full_k(i % P_KSTAGES), (i / P_KSTAGES) & 1);
            if (P_CONSUMER_FENCE && !TMA) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        };
        auto wait_v = [&](int i) {
            mbar_wait(bars.full_v(i % P_VSTAGES), (i / P_VSTAGES) & 1);
            if (P_CONSUMER_FENCE && !TMA) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        };
        auto turn_begin = [&]() {
            if (P_PINGPONG) named_sync(my_turn, 256);
        };
        auto turn_end = [&]() {
            if (P_PINGPONG) named_arrive(their_turn, 256);
        };

        float sacc[P_BK / 2];
        u32 pa[P_BK / 16][4];
#if P_ONE_P
        auto& pb = pa;
#else
        u32 pb[P_BK / 16][4];
#endif
        float al0, al1;

        // Round 0: S_0 only. O starts at zero, so P_0's rescale factor is moot.
        wait_k(kc);
        turn_begin();
        wgmma_fence();
        issue_qk<HD>(sacc, qs, k_stage(kc));
        wgmma_commit();
        turn_end();
        wgmma_wait<0>();
        fence_regs(sacc);
        mbar_arrive_if(bars.empty_k(kc % P_KSTAGES), leader);
        mbar_arrive_if(bars.empty_q(qslot), !P_SMEM_EPI && leader && n == 1);
        kc++;
        if (P_BK > st.first_pos)
            st.template softmax<true>(sacc, 0, pa, al0, al1);
        else
            st.template softmax<false>(sacc, 0, pa, al0, al1);
        if (P_ONE_P) Rows<HD>::pack(sacc, pa);

        // Round j (1 <= j < n): Q K_j^T goes to the tensor cores, O is rescaled by
        // the factors of softmax j-1 while it runs, then P_{j-1} V_{j-1} follows;
        // the softmax of S_j runs while P V does (FlashAttention-3's order). No
        // branch and no access to a running wgmma's registers between it and its
        // wait: either makes ptxas serialise the wgmmas.
        // Two copies of a round, with and without the causal mask (NVRTC takes no
        // generic lambdas, so the flag is a macro argument).
#define PREFILL_ROUND(MASK)                                                          \
    [&](const u32(&cur)[P_BK / 16][4], u32(&nxt)[P_BK / 16][4], int j) {            \
        wait_k(kc);                                                                  \
        wait_v(vc);                                                                  \
        turn_begin();                                                                \
        wgmma_fence();                                                               \
        issue_qk<HD>(sacc, qs, k_stage(kc));                                         \
        wgmma_commit();                                                              \
        st.rescale(al0, al1);                                                        \
        wgmma_fence();                                                               \
        issue_pv<HD>(st.oacc, cur, v_stage(vc));                                     \
        wgmma_commit();                                                              \
        turn_end();                                                                  \
        wgmma_wait<1>();                                                             \
        fence_regs(sacc);                                                            \
        mbar_arrive_if(bars.empty_k(kc % P_KSTAGES), leader);                         \
        mbar_arrive_if(bars.empty_q(qslot), !P_SMEM_EPI && leader && j == n - 1);   \
        st.template softmax<MASK>(sacc, j * P_BK, nxt, al0, al1);                    \
        wgmma_wait<0>();                                                             \
        fence_regs(st.oacc);                                                         \
        mbar_arrive_if(bars.empty_v(vc % P_VSTAGES), leader);                         \
        if (P_ONE_P) Rows<HD>::pack(sacc, nxt);                                      \
        kc++;                                                                        \
        vc++;                                                                        \
    }
        auto step = PREFILL_ROUND(false);
        auto step_masked = PREFILL_ROUND(true);
#undef PREFILL_ROUND
        // ptxas (CUDA 13.0) moves a round's wait for P V up to just after the first
        // row's max, so most of the softmax runs after P V has landed, not beside it.
        // Pinning the wait below the softmax (a shared store of the row sums before it)
        // measured slower on 32 of 36 attn_bench cases (by up to 4%) across this kernel
        // and the fallback: the other warpgroup's turn already fills the tensor cores
        // (gpu-2026-12-06-pack.md §1).
        // The last round: P V only.
        auto last = [&](const u32 (&cur)[P_BK / 16][4]) {
            wait_v(vc);
            turn_begin();
            st.rescale(al0, al1);
            wgmma_fence();
            issue_pv<HD>(st.oacc, cur, v_stage(vc));
            wgmma_commit();
            turn_end();
            wgmma_wait<0>();
            fence_regs(st.oacc);
            mbar_arrive_if(bars.empty_v(vc % P_VSTAGES), leader);
            vc++;
        };
        // Tiles from `diag` on reach past the warpgroup's first row.
        const int diag = max(1, (st.first_pos + 1) / P_BK);
        int j = 1;
        while (true) {
            if (j >= n) { last(pa); break; }
            if (j >= diag) step_masked(pa, pb, j++); else step(pa, pb, j++);
            if (j >= n) { last(pb); break; }
            if (j >= diag) step_masked(pb, pa, j++); else step(pb, pa, j++);
        }
        qc++;

        float l0 = st.l0, l1 = st.l1;
        l0 = quad_sum(l0);
        l1 = quad_sum(l1);
        float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
        size_t ostride = (size_t)q_heads * HD;
#if P_SMEM_EPI
        // The Q rows were read by wgmma (the async proxy); order those reads before
        // these generic writes over them.
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        const int lr0 = wg * 64 + warp * 16 + g;  // r0's row of the slot
        const u32 os = base + qslot * Q_BYTES;
#pragma unroll
        for (int dt = 0; dt < HD / 8; dt++) {
            u32 at = os + tile_off<P_BQ>(lr0, dt) + 4 * tq;
            sts32(at, pack_bf16x2_rn(st.oacc[dt * 4 + 0] * inv0, st.oacc[dt * 4 + 1] * inv0));
            sts32(at + 8 * 128, pack_bf16x2_rn(st.oacc[dt * 4 + 2] * inv1, st.oacc[dt * 4 + 3] * inv1));
        }
        named_sync(4 + wg, 128);
        // 64 rows of HD / 8 16-byte chunks; a warp writes whole rows.
#pragma unroll
        for (int i = ctid; i < 64 * (HD / 8); i += 128) {
            int r = i / (HD / 8), c = i % (HD / 8);
            if (wq0 + r < it.n_new)
                *reinterpret_cast<u32x4*>(o + (size_t)(it.qs0 + wq0 + r) * ostride + it.h * HD + c * 8) =
                    lds128(os + tile_off<P_BQ>(wg * 64 + r, c));
        }
        // Each warp's reads have returned (its stores used them): the slot may refill.
        mbar_arrive_if(bars.empty_q(qslot), leader);
#else
#pragma unroll
        for (int dt = 0; dt < HD / 8; dt++) {
            int col = it.h * HD + dt * 8 + 2 * tq;
            if (r0 < it.n_new)
                *reinterpret_cast<u32*>(o + (size_t)(it.qs0 + r0) * ostride + col) =
                    pack_bf16x2_rn(st.oacc[dt * 4 + 0] * inv0, st.oacc[dt * 4 + 1] * inv0);
            if (r1 < it.n_new)
                *reinterpret_cast<u32*>(o + (size_t)(it.qs0 + r1) * ostride + col) =
                    pack_bf16x2_rn(st.oacc[dt * 4 + 2] * inv1, st.oacc[dt * 4 + 3] * inv1);
        }
#endif
    }
    // Warpgroup 1's opening arrival is still pending on barrier 1: take it.
    if (P_PINGPONG && wg == 0) named_sync(1, 256);
}

// attn_prefill_ws_hd*: K/V through the copy engine, for pages of 8+ rows (a power of
// two); attn_prefill_ws_gather_hd*: the cp.async gather, for any page size. One
// argument list: the gather build ignores the tensor maps. tmk / tmv have boxes of
// min(page, P_BK) rows.
#define PREFILL_WS(NAME, HD, TMA)                                                              \
    extern "C" __global__ void __launch_bounds__(P_THREADS, 1) NAME(                            \
        const bf16_t* q, int q_stride, bf16_t* o, const bf16_t* k_cache, const bf16_t* v_cache,  \
        const int* q_start, const int* kv_len, const int* page_start, const int* page_ids,      \
        const int* tile_seq, const int* tile_q0, int num_tiles, int q_heads, int kv_heads,      \
        int page_size, float scale, int* work_counter, int* diag,                               \
        const __grid_constant__ TmaDesc tmk, const __grid_constant__ TmaDesc tmv) {             \
        prefill_sm90_impl<HD, TMA>(q, q_stride, o, k_cache, v_cache, q_start, kv_len,           \
                                   page_start, page_ids, tile_seq, tile_q0, num_tiles, q_heads, \
                                   kv_heads, page_size, scale, work_counter, diag, &tmk, &tmv); \
    }
PREFILL_WS(attn_prefill_ws_hd64, 64, true)
PREFILL_WS(attn_prefill_ws_hd128, 128, true)
PREFILL_WS(attn_prefill_ws_gather_hd64, 64, false)
PREFILL_WS(attn_prefill_ws_gather_hd128, 128, false)
