//! One CUDA device: context, stream, cuBLAS handle and the loaded kernels.

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr};

use super::error::CudaError;
use super::watchdog::Watchdog;
use super::{libs, nvrtc};

/// Default of [`CudaOptions::decode_min_part`]: one tensor-core tile (64 rows). A
/// 32-row split leaves two of the tile's four warps idle and doubles the blocks: at
/// Qwen3-0.6B batch 8 x 256 the 32-row minimum made 512 blocks (two waves of 396) and
/// the step 6% slower than 64 rows (1.500 against 1.411 ms, one process, 2026-12-02
/// call 1 of docs/results/gpu-2026-12-02-steps.md); batch 1 and 64 within 1%.
pub const DECODE_MIN_PART_DEFAULT: usize = 64;

/// Default of [`CudaOptions::decode_full_part`]: 256 rows. At Qwen3-0.6B batch 64 x 256
/// (512 blocks a split on 396 slots) splits of 256+ rows, i.e. one working split a
/// sequence, ran the step 4.3% faster than 64+ (2.083 against 2.172 ms, one process,
/// 2026-12-02 call 3 of docs/results/gpu-2026-12-02-steps.md); long contexts still split.
pub const DECODE_FULL_PART_DEFAULT: usize = 256;

/// cuBLAS workspace (fixed so that graph capture never allocates inside cuBLAS).
const BLAS_WORKSPACE_BYTES: usize = 32 << 20;

/// Which attention kernels to use (`--attention-backend`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AttentionBackend {
    /// `flash` on sm_80 and newer, else `simple`.
    #[default]
    Auto,
    /// Tensor-core prefill + split-KV decode kernels (head_dim 64/128).
    Flash,
    /// The portable reference kernel for everything.
    Simple,
}

impl std::str::FromStr for AttentionBackend {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "flash" => Ok(Self::Flash),
            "simple" => Ok(Self::Simple),
            o => Err(format!(
                "attention backend must be auto, flash or simple, got {o:?}"
            )),
        }
    }
}

/// Which prefill attention kernel the flash backend uses (`MINISGL_PREFILL_KERNEL`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PrefillKernel {
    /// On sm_90 the warp-specialised kernel, else the earlier Hopper kernel if only
    /// that one built; the portable one elsewhere.
    #[default]
    Auto,
    /// The earlier Hopper kernel (`kernels/attention_prefill_sm90.cu`, 0.83-0.86x
    /// the ws kernel on 8 x 2048), or an error where it is unavailable; kept for
    /// comparisons and as a fallback.
    Hopper,
    /// The portable mma.sync kernel everywhere (for comparisons and checks).
    Mma,
    /// The warp-specialised Hopper kernel (`kernels/attention_prefill_ws_sm90.cu`),
    /// or an error where it is unavailable. The default on sm_90 since 2026-12-01
    /// (docs/results/gpu-2026-12-01-prefill.md: 1.16-1.56x the earlier kernel on
    /// every case; the 14B run that looked stuck was a 95 s start-up).
    Ws,
}

impl std::str::FromStr for PrefillKernel {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "hopper" => Ok(Self::Hopper),
            "mma" => Ok(Self::Mma),
            "ws" => Ok(Self::Ws),
            o => Err(format!(
                "prefill kernel must be auto, hopper, mma or ws, got {o:?}"
            )),
        }
    }
}

/// Which decode attention kernel the flash backend uses (`MINISGL_DECODE_KERNEL`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum DecodeKernel {
    /// The tensor-core kernel for groups of 2 to 16 query heads per KV head, the
    /// CUDA-core one for group 1 (not measured on the tensor-core kernel, which would
    /// compute 15 empty rows). Measured on the H200 (2026-12-01,
    /// docs/results/gpu-2026-12-01-decode2.md), group 2: the tensor-core kernel
    /// 3.99 / 3.74 / 3.60 TB/s at 256 x 1100, 64 x 4096 and a ragged batch against
    /// 3.67 / 3.49 / 2.95 for the CUDA-core one, which wins only at 8 x 16384 (3.46
    /// against 3.32); groups 5 and 8: 3.0-3.6x faster (the CUDA-core kernel walks the
    /// group's heads one after another).
    #[default]
    Auto,
    /// The tensor-core kernel wherever the group has at most 16 heads.
    Mma,
    /// The CUDA-core (shuffle-reduction) kernel everywhere.
    Simt,
}

impl std::str::FromStr for DecodeKernel {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "mma" => Ok(Self::Mma),
            "simt" => Ok(Self::Simt),
            o => Err(format!(
                "decode kernel must be auto, mma or simt, got {o:?}"
            )),
        }
    }
}

impl DecodeKernel {
    /// Whether a decode step with `group` query heads per kv head takes the
    /// tensor-core kernel.
    pub fn uses_mma(self, group: usize) -> bool {
        match self {
            DecodeKernel::Auto => (2..=16).contains(&group),
            DecodeKernel::Mma => (1..=16).contains(&group),
            DecodeKernel::Simt => false,
        }
    }
}

/// How the tensor-core decode kernel spreads a step over the GPU
/// (`MINISGL_DECODE_SCHEDULE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum DecodeSchedule {
    /// A block per (split, kv head, sequence), splits chosen from the batch
    /// (`attn_decode_mma_*`).
    #[default]
    Splits,
    /// Stream-K (`attn_decode_mma_sk_*`): each kv head's tiles cut into one wave of
    /// equal ranges, so no wave runs part-empty. Not the default. On the split grid's
    /// segment (docs/results/gpu-2026-12-01-decode2.md) it leads on a ragged batch
    /// (3.90 against 3.56 TB/s at group 5) and loses 4-6% at 256 x 1100; in the engine
    /// the default workload ran 0.4-0.8% slower than on the split grid, and its merge
    /// kernel costs ~30 us a layer at batch 1.
    Stream,
}

impl std::str::FromStr for DecodeSchedule {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "stream" => Ok(Self::Stream),
            "splits" => Ok(Self::Splits),
            o => Err(format!(
                "decode schedule must be stream or splits, got {o:?}"
            )),
        }
    }
}

/// Where the split-grid tensor-core decode does `qkv_rope_store`'s work itself
/// (`attn_decode_mma_rs_*`; `MINISGL_DECODE_ROPE` = 0 | waves | always).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum DecodeRope {
    /// Never: `qkv_rope_store`, then the decode (two launches a layer).
    Off,
    /// Where the decode grid is at most [`DECODE_ROPE_MAX_WAVES`] wave of resident
    /// blocks. Measured on the H200 (context 256, seven-round A/Bs against `Off`,
    /// docs/results/gpu-2026-12-04-fold.md): Qwen3-0.6B batch 8 (320 blocks, 0.8 waves)
    /// 0.973-0.977x in four calls and even in two others (a slower machine), Llama-3.1-8B
    /// batch 8 0.993x; at 1.3-1.9 waves 0.995-1.009x (within the A/B's spread), at 2.6
    /// waves 1.023x, at 5.2 waves 1.007x.
    /// The kernel is bound by instruction issue: past a wave the preparation costs
    /// what the separate launch did and no longer hides under the first tile's copies.
    /// (The same fold, always on, was built and reverted once before, f853245: it was
    /// measured at batch 1, 64 and 256 only.)
    #[default]
    Waves,
    /// Always (checks; A/Bs).
    Always,
}

/// See [`DecodeRope::Waves`].
pub const DECODE_ROPE_MAX_WAVES: usize = 1;

impl DecodeRope {
    /// Whether a split-grid decode of `blocks` blocks folds in the q/k norm, RoPE and
    /// K/V store, on a device that keeps `slots` of its blocks resident at once.
    pub fn folds(self, blocks: usize, slots: usize) -> bool {
        match self {
            Self::Off => false,
            Self::Always => true,
            Self::Waves => blocks <= DECODE_ROPE_MAX_WAVES * slots,
        }
    }
}

impl std::str::FromStr for DecodeRope {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "0" | "off" => Ok(Self::Off),
            "1" | "waves" => Ok(Self::Waves),
            "always" => Ok(Self::Always),
            o => Err(format!("decode rope must be 0, waves or always, got {o:?}")),
        }
    }
}

/// The order in which the Hopper prefill kernels take a step's query tiles
/// (`MINISGL_PREFILL_ORDER` = 0 | seqs | tiles). The kernels walk the tile list from its
/// end, a tile's heads one after another, so the list's tail runs first and the tiles
/// running at once are neighbours in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PrefillOrder {
    /// The batch's order: the last sequence first, each from its longest causal span.
    Batch,
    /// Sequences by their longest causal span (the KV length), that sequence first; a
    /// sequence's tiles stay together, so the tiles running at once share its K/V in L2.
    #[default]
    Seqs,
    /// Every tile of the step by its own span, longest first, sequences interleaved
    /// (equal spans of different sequences run side by side, each reading its own K/V).
    Tiles,
}

impl std::str::FromStr for PrefillOrder {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "0" | "batch" => Ok(Self::Batch),
            "1" | "seqs" => Ok(Self::Seqs),
            "tiles" => Ok(Self::Tiles),
            o => Err(format!("prefill order must be 0, seqs or tiles, got {o:?}")),
        }
    }
}

/// How to open a device.
#[derive(Clone, Debug)]
pub struct CudaOptions {
    /// Device ordinal.
    pub ordinal: usize,
    pub attention: AttentionBackend,
    pub prefill_kernel: PrefillKernel,
    pub decode_kernel: DecodeKernel,
    pub decode_schedule: DecodeSchedule,
    /// Fewest splits of a split-grid decode launch (`MINISGL_DECODE_MIN_SPLITS`;
    /// 1: as many as fill the device).
    pub decode_min_splits: usize,
    /// Tensor-core decode splits sized by waves of blocks under two waves
    /// (`MINISGL_DECODE_SPLITS=waves`) or by the fill rule alone (`fill`, the default:
    /// measured on the H200 the wave rule was 3.5% faster at batch 8 and 2.5% slower
    /// at batch 64, docs/results/gpu-2026-12-02-prologue.md).
    pub decode_wave_splits: bool,
    /// Below how many waves of unsplit blocks the wave rule decides (2; `wavesN` in
    /// `MINISGL_DECODE_SPLITS` sets N, for measuring).
    pub decode_wave_limit: usize,
    /// Fewest context rows a split of a split-grid decode launch takes
    /// (`MINISGL_DECODE_MIN_PART`, default [`DECODE_MIN_PART_DEFAULT`]).
    pub decode_min_part: usize,
    /// The same minimum where the tensor-core grid's unsplit blocks (sequences x kv
    /// heads) already fill every resident block slot (`MINISGL_DECODE_FULL_PART`,
    /// default [`DECODE_FULL_PART_DEFAULT`]): there more blocks only add their start-up
    /// and the combine's reads, so short contexts stay whole and long ones still split.
    pub decode_full_part: usize,
    /// Programmatic dependent launch for the kernels written for it (sm_90+;
    /// `MINISGL_PDL=1` turns it on, see `pdl.rs`).
    pub pdl: bool,
    /// Linear layers of at most this many rows use the skinny-product kernel
    /// (`MINISGL_GEMV_ROWS`; default [`super::GEMV_ROWS_DEFAULT`], at most
    /// [`super::GEMV_MAX_ROWS`]).
    pub gemv_rows: usize,
    /// Decode-size products normalise their input themselves (on unless
    /// `MINISGL_NORM_PROLOGUE=0`; see `Backend::norm_in_prologue`).
    pub norm_prologue: bool,
    /// The norms before the qkv and gate_up products folded into their weights at load,
    /// each row's factor applied after the product: by the kernel that consumes a cuBLAS
    /// product, in the gemv kernels' and the layer chain's epilogues (`MINISGL_FOLD_NORMS`,
    /// default on since 2026-12-07: 0.75-1.09x the unfolded path's logits noise against
    /// the f32 CPU on every fixture over six prompt draws, the 0.6B step 1.8-2.2% faster
    /// at batch 1-256; `=0` turns it off. See `Backend::fold_norm`).
    pub fold_norms: bool,
    /// With `fold_norms`, whether the folded norms' row factors move into the kernels
    /// after the products (`MINISGL_FOLD_DEFER`, default on). Off, the weights are
    /// still folded at load and unit norms run as launches of their own: a diagnostic
    /// that parts the fold's rounding at load from the deferral's kernels.
    pub fold_defer: bool,
    /// Skinny products of 3+ rows (2 where `gemv_tc_two` says) use the tensor-core gemv
    /// build where k allows (sm_80+; on unless `MINISGL_GEMV_TC=0`).
    pub gemv_tc: bool,
    /// The tensor-core gemv build at two rows too, for products of at least 2,560 outputs
    /// (`MINISGL_GEMV_TC_TWO`, default on; see `GEMV_TC_TWO_ROWS_MIN_COLS`).
    pub gemv_tc_two: bool,
    /// Heads a warp of the fused q/k norm + RoPE + K/V store takes (1, 2 or 4;
    /// `MINISGL_ROPE_HEADS`, default 0 = by the launch's size, see `rope_heads_per_warp`).
    pub rope_heads: usize,
    /// Where the split-grid tensor-core decode does qkv_rope_store's work itself
    /// (`MINISGL_DECODE_ROPE`, [`DecodeRope`]).
    pub decode_rope: DecodeRope,
    /// The split-grid tensor-core decode starts its blocks longest context first (on
    /// unless `MINISGL_DECODE_ORDER=0`, which keeps the batch's order; see
    /// `super::decode_order`).
    pub decode_order: bool,
    /// A step that mixes prefill chunks with one-token sequences runs the one-token
    /// ones on the split-grid tensor-core decode and only the rest on the prefill
    /// kernel (on unless `MINISGL_MIXED_SPLIT=0`; see `super::MixedRows`).
    pub mixed_split: bool,
    /// The order of the Hopper prefill kernels' tiles (`MINISGL_PREFILL_ORDER`,
    /// [`PrefillOrder`]).
    pub prefill_order: PrefillOrder,
    /// Threads a block of `add_rmsnorm` (a row a block; `MINISGL_NORM_THREADS`, a
    /// multiple of 32 up to 1024, default 0 = by the row's width, see `norm_threads`).
    pub norm_threads: usize,
    /// Sampling splits each logits row over several blocks when a step has fewer rows
    /// than SMs (on unless `MINISGL_SAMPLE_SPLIT=0`; see `sample::logit_chunks`).
    pub sample_split: bool,
    /// Sampling copies the logits into a buffer of its own even where no row processes
    /// them (`MINISGL_SAMPLE_COPY=1`, off by default: the copy the sampler made before
    /// 2026-12-07, kept for A/Bs; see `sample_launch_impl`).
    pub sample_copy: bool,
    /// The LM head writes bf16 logits (on unless `MINISGL_LOGITS_BF16=0`): half the f32
    /// logits' bytes written by the head and read by the sampler, which reads them as
    /// they are where no row processes them (else widens them to f32 first). The values
    /// are the bf16 rounding of the f32 ones, as a bf16 model in transformers (and the
    /// LM head of vLLM and SGLang) produces them. Qwen3-0.6B on an H100: batch-256 step
    /// 1.3% faster, default workload 0.5% (docs/results/gpu-2026-12-07-sample.md).
    pub logits_bf16: bool,
    /// Largest weight the skinny kernel streams, in bytes (`MINISGL_GEMV_MAX_WEIGHT_MB`,
    /// default [`super::GEMV_MAX_WEIGHT_BYTES`]); larger ones go through cuBLAS.
    pub gemv_max_weight: usize,
    /// A layer's products at one decode row in one launch where the shapes allow
    /// (`MINISGL_LAYER_CHAIN`, default on; `0` runs the separate products).
    pub layer_chain: bool,
    /// With the chain, the layer's attention in the same launch, in front of o
    /// (`MINISGL_CHAIN_ATTN`, default on; `0` runs qkv_rope_store, the decode
    /// attention and its combine as their own launches).
    pub chain_attn: bool,
    /// Context rows a split of the chain's attention takes at least
    /// (`MINISGL_CHAIN_ATTN_PART`, default [`CHAIN_ATTN_PART_DEFAULT`]; at most 16
    /// splits a head).
    pub chain_attn_part: usize,
    /// Chunks of the chain's weight stream a block keeps in flight
    /// (`MINISGL_CHAIN_WINDOW`; unset: the host's rule, see `ops/chain.rs`; 0: the whole
    /// ring at once).
    pub chain_window: Option<usize>,
    /// Layers one launch of the attention chain runs at most (`MINISGL_CHAIN_SPAN`,
    /// default [`CHAIN_MAX_LAYERS`]; 1: a launch a layer).
    pub chain_span: usize,
    /// Most decode rows the products-only chain takes (`layer_chain_r2`;
    /// `MINISGL_CHAIN_ROWS`, 1 to [`CHAIN_MAX_ROWS`], default [`CHAIN_ROWS_DEFAULT`]);
    /// more rows run the separate products.
    pub chain_rows: usize,
    /// Most decode rows (sequences) the attention chain takes (`layer_chain_span_g2_r2`;
    /// `MINISGL_CHAIN_ATTN_ROWS`, 1 to [`CHAIN_MAX_ROWS`], default [`CHAIN_MAX_ROWS`]); more
    /// rows run the attention as its own launches before the products-only chain.
    pub chain_attn_rows: usize,
}

/// Most rows the products-only chain has a build for (`layer_chain_r2`; the r3 / r4
/// builds lost to the separate products and were removed, see the kernel).
pub const CHAIN_MAX_ROWS: usize = 2;
/// Default of [`CudaOptions::chain_rows`]: two rows. Graph steps at batch 2, context
/// 1,024, against the separate products (part 111, 2026-12-06, an H100): Qwen3-0.6B
/// 1.050x, Llama-3.1-8B 1.060x, Qwen3-14B 1.055x faster
/// (docs/results/gpu-2026-12-06-rows.md).
pub const CHAIN_ROWS_DEFAULT: usize = 2;

/// Kv heads the attention chain's per-head counters cover (`Device::chain_bar`;
/// `LC_TICKETS` in the kernel).
pub const CHAIN_TICKETS: usize = 64;
/// Context rows a split of the chain's attention takes at least, unless
/// `MINISGL_CHAIN_ATTN_PART` says otherwise. 32 against 64 at Qwen3-0.6B batch 1, context
/// 256 (2026-12-04): step 0.890 against 0.908 ms (8 splits a head against 4); 128 took
/// 0.978.
pub const CHAIN_ATTN_PART_DEFAULT: usize = 32;
/// Layers one launch of the attention chain runs at most (`LC_MAX_LAYERS`: its table of
/// layers is a kernel parameter, 96 bytes a layer, under the 4 KB every driver takes).
pub const CHAIN_MAX_LAYERS: usize = 32;
/// u64 slots a block of the chain writes when its kernels are built with `LC_TRACE=1`
/// (`LC_T_POINTS`: cycles to each phase point, wall ns, launches), after the tickets.
pub const CHAIN_TRACE_POINTS: usize = 36;

/// `MINISGL_DECODE_SPLITS`: `fill` (the default), `waves` (below 2 waves) or `wavesN`,
/// as (the wave rule on, its wave limit).
fn parse_splits_rule(v: &str) -> Option<(bool, usize)> {
    match v.strip_prefix("waves") {
        Some("") => Some((true, 2)),
        Some(n) => n.parse().ok().filter(|&n| n >= 1).map(|n| (true, n)),
        None if v == "fill" || v.is_empty() => Some((false, 2)),
        None => None,
    }
}

impl Default for CudaOptions {
    /// Device 0 and `auto` attention, overridden by `MINISGL_CUDA_DEVICE` and
    /// `MINISGL_ATTENTION_BACKEND` (auto|flash|simple) when set, so that code that
    /// opens a default device can still be steered from the command line.
    fn default() -> Self {
        let ordinal = crate::env::count("MINISGL_CUDA_DEVICE", 0, |_| true, "a device ordinal");
        let attention = crate::env::choice("MINISGL_ATTENTION_BACKEND");
        let prefill_kernel = crate::env::choice("MINISGL_PREFILL_KERNEL");
        let decode_kernel = crate::env::choice("MINISGL_DECODE_KERNEL");
        let decode_schedule = crate::env::choice("MINISGL_DECODE_SCHEDULE");
        let decode_min_splits = crate::env::count(
            "MINISGL_DECODE_MIN_SPLITS",
            1,
            |n| n >= 1,
            "a split count of at least 1",
        );
        let (decode_wave_splits, decode_wave_limit) = match std::env::var("MINISGL_DECODE_SPLITS")
        {
            Ok(v) => parse_splits_rule(&v).unwrap_or_else(|| {
                tracing::warn!(
                    "MINISGL_DECODE_SPLITS={v:?}: must be fill, waves or wavesN (N >= 1); using fill"
                );
                (false, 2)
            }),
            Err(_) => (false, 2),
        };
        let rows = |var: &str, default: usize| {
            crate::env::count(var, default, |n| n >= 1, "a row count of at least 1")
        };
        let decode_min_part = rows("MINISGL_DECODE_MIN_PART", DECODE_MIN_PART_DEFAULT);
        let decode_full_part = rows("MINISGL_DECODE_FULL_PART", DECODE_FULL_PART_DEFAULT);
        let pdl = crate::env::flag("MINISGL_PDL", false);
        let gemv_rows = crate::env::count(
            "MINISGL_GEMV_ROWS",
            super::GEMV_ROWS_DEFAULT,
            |n| n <= super::GEMV_MAX_ROWS,
            "a row count up to 16 (0: always cuBLAS)",
        );
        let norm_prologue = crate::env::flag("MINISGL_NORM_PROLOGUE", true);
        let fold_norms = crate::env::flag("MINISGL_FOLD_NORMS", true);
        let fold_defer = crate::env::flag("MINISGL_FOLD_DEFER", true);
        let gemv_tc = crate::env::flag("MINISGL_GEMV_TC", true);
        let gemv_tc_two = crate::env::flag("MINISGL_GEMV_TC_TWO", true);
        let decode_rope: DecodeRope = crate::env::choice("MINISGL_DECODE_ROPE");
        let rope_heads = crate::env::count(
            "MINISGL_ROPE_HEADS",
            0,
            |n| matches!(n, 0 | 1 | 2 | 4),
            "0 (auto), 1, 2 or 4",
        );
        let norm_threads = crate::env::count(
            "MINISGL_NORM_THREADS",
            0,
            |n| n <= 1024 && n.is_multiple_of(32),
            "0 (by width) or a multiple of 32 up to 1024",
        );
        let gemv_max_weight = crate::env::count(
            "MINISGL_GEMV_MAX_WEIGHT_MB",
            super::GEMV_MAX_WEIGHT_BYTES >> 20,
            |_| true,
            "a size in MiB",
        ) << 20;
        let sample_split = crate::env::flag("MINISGL_SAMPLE_SPLIT", true);
        let sample_copy = crate::env::flag("MINISGL_SAMPLE_COPY", false);
        let logits_bf16 = crate::env::flag("MINISGL_LOGITS_BF16", true);
        let decode_order = crate::env::flag("MINISGL_DECODE_ORDER", true);
        let mixed_split = crate::env::flag("MINISGL_MIXED_SPLIT", true);
        let prefill_order: PrefillOrder = crate::env::choice("MINISGL_PREFILL_ORDER");
        let layer_chain = crate::env::flag("MINISGL_LAYER_CHAIN", true);
        let chain_attn = crate::env::flag("MINISGL_CHAIN_ATTN", true);
        let chain_attn_part = crate::env::count(
            "MINISGL_CHAIN_ATTN_PART",
            CHAIN_ATTN_PART_DEFAULT,
            |n| (1..=1 << 20).contains(&n),
            "a row count from 1",
        );
        let chain_window = std::env::var("MINISGL_CHAIN_WINDOW").ok().map(|_| {
            crate::env::count(
                "MINISGL_CHAIN_WINDOW",
                0,
                |n| n <= 64,
                "a chunk count from 0 to 64",
            )
        });
        let chain_span = crate::env::count(
            "MINISGL_CHAIN_SPAN",
            CHAIN_MAX_LAYERS,
            |n| (1..=CHAIN_MAX_LAYERS).contains(&n),
            "a layer count from 1 to 32",
        );
        let chain_rows = crate::env::count(
            "MINISGL_CHAIN_ROWS",
            CHAIN_ROWS_DEFAULT,
            |n| (1..=CHAIN_MAX_ROWS).contains(&n),
            "a row count from 1 to 2",
        );
        let chain_attn_rows = crate::env::count(
            "MINISGL_CHAIN_ATTN_ROWS",
            CHAIN_MAX_ROWS,
            |n| (1..=CHAIN_MAX_ROWS).contains(&n),
            "a row count from 1 to 2",
        );
        CudaOptions {
            ordinal,
            attention,
            prefill_kernel,
            decode_kernel,
            decode_schedule,
            decode_min_splits,
            decode_wave_splits,
            decode_wave_limit,
            decode_min_part,
            decode_full_part,
            pdl,
            gemv_rows,
            norm_prologue,
            fold_norms,
            fold_defer,
            gemv_tc,
            gemv_tc_two,
            rope_heads,
            decode_rope,
            decode_order,
            mixed_split,
            prefill_order,
            norm_threads,
            gemv_max_weight,
            sample_split,
            sample_copy,
            logits_bf16,
            layer_chain,
            chain_attn,
            chain_attn_part,
            chain_window,
            chain_span,
            chain_rows,
            chain_attn_rows,
        }
    }
}

/// Kernel functions by name, plus the families that failed to build here.
pub struct Kernels {
    funcs: HashMap<String, CudaFunction>,
    pub failed: Vec<(String, String)>,
    /// Families served from the on-disk cache / compiled now.
    pub cache_hits: usize,
    pub compiled: usize,
}

impl Kernels {
    /// Whether the named kernel was loaded (no error built for a miss).
    pub fn has(&self, name: &str) -> bool {
        self.funcs.contains_key(name)
    }

    /// The named kernel, or why it is unavailable.
    pub fn get(&self, name: &str) -> Result<&CudaFunction, CudaError> {
        self.funcs.get(name).ok_or_else(|| {
            CudaError::Unsupported(format!(
                "kernel {name} is not available on this device (failed families: {:?})",
                self.failed.iter().map(|f| &f.0).collect::<Vec<_>>()
            ))
        })
    }
}

/// Kernel names of each family (loaded from its module after compilation).
/// `tests/kernels_nvrtc.rs` holds this list against the compiled CUBINs.
pub fn kernel_names(family: &str) -> Vec<String> {
    let v: Vec<&str> = match family {
        "embedding" => vec!["embedding_gather"],
        "norm" => vec!["add_rmsnorm", "scale_cols_bf16"],
        "rope" => vec![
            "norm_rope_hd64",
            "norm_rope_hd128",
            "norm_rope_hd256",
            "norm_rope_generic",
            "qkv_rope_store_hd64",
            "qkv_rope_store_hd128",
            "qkv_rope_store_hd256",
            "qkv_rope_store_x2_hd64",
            "qkv_rope_store_x2_hd128",
            "qkv_rope_store_x2_hd256",
            "qkv_rope_store_x4_hd64",
            "qkv_rope_store_x4_hd128",
            "qkv_rope_store_x4_hd256",
            "qkv_rope_store_generic",
            "qkv_rope_store_rms_hd64",
            "qkv_rope_store_rms_hd128",
            "qkv_rope_store_rms_hd256",
            "qkv_rope_store_rms_generic",
        ],
        "activation" => vec!["silu_mul", "silu_mul_rms"],
        "kv_store" => vec!["kv_store"],
        "tensor" => vec![
            "copy_cols",
            "copy_cols_scalar",
            "gather_rows",
            "bcast_rows_bf16",
            "bcast_rows_f32",
            "bf16_to_f32",
            "take_tokens",
            "add_inplace_bf16",
        ],
        "attention_simple" => vec!["attn_simple"],
        "attention_decode" => {
            let mut v = vec![
                "attn_decode_combine".to_string(),
                "attn_decode_sk_combine".to_string(),
            ];
            for hd in [64, 128] {
                for g in [1, 2, 4, 8] {
                    v.push(format!("attn_decode_hd{hd}_g{g}"));
                }
                v.push(format!("attn_decode_mma_hd{hd}"));
                v.push(format!("attn_decode_mma_rs_hd{hd}"));
                v.push(format!("attn_decode_mma_sk_hd{hd}"));
            }
            return v;
        }
        "attention_prefill" => vec!["attn_prefill_hd64", "attn_prefill_hd128"],
        "attention_prefill_sm90" => vec!["attn_prefill_sm90_hd64", "attn_prefill_sm90_hd128"],
        "attention_prefill_ws_sm90" => vec![
            "attn_prefill_ws_hd64",
            "attn_prefill_ws_hd128",
            "attn_prefill_ws_gather_hd64",
            "attn_prefill_ws_gather_hd128",
        ],
        "layer_chain_sm90" => vec![
            "layer_chain",
            "layer_chain_attn_g2",
            "layer_chain_attn_g4",
            "layer_chain_span_g2",
            "layer_chain_r2",
            "layer_chain_span_g2_r2",
        ],
        "gemv" => {
            let base = [
                "gemv_bf16",
                "gemv_f32",
                "gemv_silu",
                "gemv_residual",
                "gemv_norm_bf16",
                "gemv_norm_silu",
            ];
            return base
                .iter()
                .flat_map(|b| [b.to_string(), format!("{b}_m1"), format!("{b}_tc")])
                .collect();
        }
        "sampling" => vec![
            "process_logits",
            "row_partials",
            "row_partials_bf16",
            "row_select",
            "row_select_bf16",
            "topk_rows",
            "topk_rows_bf16",
            "chosen_tokens",
        ],
        _ => vec![],
    };
    v.into_iter().map(String::from).collect()
}

/// Dynamic shared memory a kernel is launched with, for those that use it.
pub fn dynamic_smem(name: &str) -> Option<usize> {
    // attention_prefill_sm90.cu: H_STAGES (3) stages of a K and a V tile of
    // 64 rows x head_dim bf16, plus 1 KB to align the ring to 1024 bytes.
    match name {
        "attn_prefill_sm90_hd64" => Some(3 * 2 * 64 * 64 * 2 + 1024),
        "attn_prefill_sm90_hd128" => Some(3 * 2 * 64 * 128 * 2 + 1024),
        // attention_prefill_ws_sm90.cu (P_SMEM): P_QSLOTS (2) Q tiles of P_BQ (128)
        // rows, P_KSTAGES (2) K tiles and P_VSTAGES (3) V tiles of P_BK (128) rows,
        // head_dim bf16 each, plus 1 KB of alignment (225 KB at head_dim 128).
        n if n.starts_with("attn_prefill_ws_") && n.ends_with("_hd64") => {
            Some((2 * 128 + (2 + 3) * 128) * 64 * 2 + 1024)
        }
        n if n.starts_with("attn_prefill_ws_") && n.ends_with("_hd128") => {
            Some((2 * 128 + (2 + 3) * 128) * 128 * 2 + 1024)
        }
        // attention_decode.cu: two stages of a K and a V tile of DM_BK (64) rows x
        // (head_dim + DM_PAD (8)) bf16, every build.
        n if n.starts_with("attn_decode_mma") && n.ends_with("_hd64") => {
            Some(2 * 2 * 64 * (64 + 8) * 2)
        }
        n if n.starts_with("attn_decode_mma") && n.ends_with("_hd128") => {
            Some(2 * 2 * 64 * (128 + 8) * 2)
        }
        // layer_chain_sm90.cu sizes its ring from the model at launch, within what a
        // Hopper block may opt in to less its static shared memory.
        n if n.starts_with("layer_chain") => Some(super::ops::LAYER_CHAIN_MAX_SMEM),
        _ => None,
    }
}

/// An opened device.
pub struct Device {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub blas: CudaBlas,
    /// cuBLAS's workspace; declared after `blas` so it is freed after the handle.
    _blas_workspace: CudaSlice<u8>,
    pub kernels: Kernels,
    pub name: String,
    pub cc: (i32, i32),
    pub num_sms: usize,
    /// Resolved attention choice: true = flash kernels where shapes allow.
    pub flash: bool,
    /// The earlier Hopper (wgmma) prefill kernel is available and allowed (`auto` or
    /// `hopper`); prefill takes it where `ws_prefill` is false.
    pub hopper_prefill: bool,
    /// Prefill attention through the warp-specialised Hopper kernel (sm_90's default;
    /// false on other devices, a failed build, or `MINISGL_PREFILL_KERNEL=hopper|mma`).
    pub ws_prefill: bool,
    pub decode_kernel: DecodeKernel,
    pub decode_schedule: DecodeSchedule,
    /// Blocks of the stream-K decode kernel per SM (its one wave), by head_dim.
    pub sk_blocks_per_sm: [usize; 2],
    /// Blocks of the split-grid tensor-core decode kernel per SM, by head_dim.
    pub mma_blocks_per_sm: [usize; 2],
    /// The ws kernel's work counter (one i32, zero between launches: the kernel
    /// resets it itself; launches on the one stream never overlap).
    pub prefill_work: CudaSlice<i32>,
    /// `layer_chain`'s grid barrier: one u64 count of arrivals that only grows (zero at
    /// first), then [`CHAIN_TICKETS`] u32 counters, one a kv head, for the attention
    /// chain's merge (back to zero after every launch), then [`CHAIN_TRACE_POINTS`] u64
    /// a block for the phase trace (written only by an `LC_TRACE=1` build).
    pub chain_bar: CudaSlice<u32>,
    /// Blocks of each gemv kernel that fit an SM (the driver's answer), which sizes
    /// its launches to one wave.
    pub gemv_blocks_per_sm: Vec<(String, usize)>,
    /// Blocks of 256 threads of `add_rmsnorm` that fit an SM (the driver's answer; 4
    /// without it): below one wave of them a launch keeps 256 threads a row.
    pub norm_blocks_per_sm: usize,
    /// Kernels written for it launch with programmatic dependent launch (asked for
    /// and the device is sm_90 or later).
    pub pdl: bool,
    /// Where the ws kernel reports a barrier wait that did not end (it then traps);
    /// present when that kernel was built.
    pub watchdog: Option<Watchdog>,
}

impl Device {
    /// Open device `opts.ordinal`: probe libraries, create the context, compile
    /// (or load from cache) every kernel family for its architecture.
    pub fn open(opts: &CudaOptions) -> Result<Device, CudaError> {
        libs::require_all()?;
        let n = CudaContext::device_count()?;
        if n <= 0 {
            return Err(CudaError::Missing(
                "the CUDA driver reports no GPU; use --device cpu".into(),
            ));
        }
        if opts.ordinal >= n as usize {
            return Err(CudaError::Missing(format!(
                "device ordinal {} out of range ({n} GPUs)",
                opts.ordinal
            )));
        }
        let ctx = CudaContext::new(opts.ordinal)?;
        // One stream, in order: the per-buffer events cudarc records for multi-stream
        // safety are pure overhead here.
        // SAFETY: every op of this backend runs on `stream`, so no cross-stream hazards.
        unsafe { ctx.disable_event_tracking() };
        // A created stream, not the legacy default one: only those can be captured
        // into CUDA graphs.
        let stream = ctx.new_stream()?;
        let blas = CudaBlas::new(stream.clone())?;
        // cuBLAS must not allocate while a graph is being recorded; give it its
        // workspace up front (32 MiB covers Hopper's largest recommendation).
        let blas_workspace = stream.alloc_zeros::<u8>(BLAS_WORKSPACE_BYTES)?;
        // SAFETY: the workspace outlives the handle (field order in `Device`) and is
        // used only by work on `stream`, the handle's stream.
        let st = unsafe {
            cudarc::cublas::sys::cublasSetWorkspace_v2(
                *blas.handle(),
                dptr(&blas_workspace, &stream) as *mut std::ffi::c_void,
                BLAS_WORKSPACE_BYTES,
            )
        };
        if st != cudarc::cublas::sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            return Err(CudaError::Unsupported(format!(
                "cublasSetWorkspace failed: {st:?}"
            )));
        }
        let cc = ctx.compute_capability()?;
        let num_sms = ctx.attribute(
            cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        )? as usize;
        let name = ctx.name()?;
        let arch = format!("sm_{}{}", cc.0, cc.1);
        let kernels = load_kernels(&ctx, &arch);
        // The Hopper prefill kernel is optional: without it prefill runs the
        // portable kernel.
        let flash_ok = kernels
            .failed
            .iter()
            .all(|(f, _)| !f.starts_with("attention_") || f.ends_with("_sm90"));
        let flash = match opts.attention {
            AttentionBackend::Simple => false,
            AttentionBackend::Flash => {
                if cc.0 < 8 || !flash_ok {
                    return Err(CudaError::Unsupported(format!(
                        "--attention-backend flash needs sm_80+ and its kernels (device {arch}, failed: {:?})",
                        kernels.failed
                    )));
                }
                true
            }
            AttentionBackend::Auto => cc.0 >= 8 && flash_ok,
        };
        for (f, e) in &kernels.failed {
            tracing::warn!("kernel family {f} unavailable on {arch}: {e}");
        }
        let ws_prefill = flash
            && matches!(opts.prefill_kernel, PrefillKernel::Auto | PrefillKernel::Ws)
            && kernels.get("attn_prefill_ws_hd128").is_ok();
        if opts.prefill_kernel == PrefillKernel::Ws && flash && !ws_prefill {
            return Err(CudaError::Unsupported(format!(
                "MINISGL_PREFILL_KERNEL=ws needs an sm_90 device and its kernel (device {arch}, failed: {:?})",
                kernels.failed
            )));
        }
        let hopper_prefill = flash
            && matches!(
                opts.prefill_kernel,
                PrefillKernel::Auto | PrefillKernel::Hopper
            )
            && kernels.get("attn_prefill_sm90_hd128").is_ok();
        if opts.prefill_kernel == PrefillKernel::Hopper && flash && !hopper_prefill {
            return Err(CudaError::Unsupported(format!(
                "MINISGL_PREFILL_KERNEL=hopper needs an sm_90 device and its kernel (device {arch}, failed: {:?})",
                kernels.failed
            )));
        }
        let prefill_work = stream.alloc_zeros::<i32>(1)?;
        let chain_bar =
            stream.alloc_zeros::<u32>(2 + CHAIN_TICKETS + 2 * CHAIN_TRACE_POINTS * num_sms)?;
        // The stream-K grid is one wave and the split grid is sized in waves: ask the
        // driver how many blocks of each fit an SM.
        let blocks_per_sm = |kernel: &str| {
            [64usize, 128].map(|hd| {
                let name = format!("{kernel}_hd{hd}");
                kernels
                    .get(&name)
                    .ok()
                    .and_then(|f| {
                        f.occupancy_max_active_blocks_per_multiprocessor(
                            128,
                            dynamic_smem(&name).unwrap_or(0),
                            None,
                        )
                        .ok()
                    })
                    // Without the driver's answer: what shared memory allows (228 KB an
                    // SM on Hopper, 1 KB reserved a block), at most the 3 of its launch
                    // bounds.
                    .map_or_else(
                        || (228 * 1024 / (dynamic_smem(&name).unwrap_or(0) + 1024)).clamp(1, 3),
                        |n| (n as usize).max(1),
                    )
            })
        };
        let sk_blocks_per_sm = blocks_per_sm("attn_decode_mma_sk");
        let gemv_blocks_per_sm = kernel_names("gemv")
            .into_iter()
            .filter_map(|name| {
                let f = kernels.get(&name).ok()?;
                let n = f
                    .occupancy_max_active_blocks_per_multiprocessor(256, 0, None)
                    .ok()?;
                Some((name, (n as usize).max(1)))
            })
            .collect();
        let mma_blocks_per_sm = blocks_per_sm("attn_decode_mma");
        let norm_blocks_per_sm = kernels
            .get("add_rmsnorm")
            .ok()
            .and_then(|f| {
                f.occupancy_max_active_blocks_per_multiprocessor(256, 0, None)
                    .ok()
            })
            .map_or(4, |n| (n as usize).max(1));
        let watchdog = if kernels.get("attn_prefill_ws_hd128").is_ok() {
            Some(Watchdog::new(&ctx, "attn_prefill_ws")?)
        } else {
            None
        };
        let dev = Device {
            ctx,
            stream,
            blas,
            _blas_workspace: blas_workspace,
            kernels,
            name,
            cc,
            num_sms,
            flash,
            hopper_prefill,
            ws_prefill,
            decode_kernel: opts.decode_kernel,
            decode_schedule: opts.decode_schedule,
            sk_blocks_per_sm,
            mma_blocks_per_sm,
            prefill_work,
            chain_bar,
            gemv_blocks_per_sm,
            norm_blocks_per_sm,
            pdl: opts.pdl && cc.0 >= 9,
            watchdog,
        };
        tracing::info!(
            "CUDA device {} ({}, {arch}, {num_sms} SMs): attention {}; stream-K decode {:?} blocks per SM (head_dim 64, 128)",
            opts.ordinal,
            dev.name,
            dev.attention_summary(),
            dev.sk_blocks_per_sm
        );
        Ok(dev)
    }
}

impl Device {
    /// The attention kernels this device runs, and the families that failed to
    /// build (a benchmark records it: a failed family silently moves every figure).
    pub fn attention_summary(&self) -> String {
        let mut out = if self.flash {
            let prefill = if self.ws_prefill {
                "ws"
            } else if self.hopper_prefill {
                "hopper"
            } else {
                "portable"
            };
            format!(
                "flash (prefill {prefill}, decode {:?}, schedule {:?})",
                self.decode_kernel, self.decode_schedule
            )
            .to_lowercase()
        } else {
            "simple".to_string()
        };
        if !self.kernels.failed.is_empty() {
            let names: Vec<&str> = self.kernels.failed.iter().map(|f| f.0.as_str()).collect();
            out += &format!("; failed to build: {}", names.join(", "));
        }
        out
    }
}

/// GPUs the driver shows this process (after `CUDA_VISIBLE_DEVICES`).
pub fn device_count() -> Result<usize, CudaError> {
    libs::require_all()?;
    Ok(CudaContext::device_count()?.max(0) as usize)
}

/// Free and total memory of device `ordinal` in bytes, as the driver reports
/// them now (what a KV cache sized after the weights can take).
pub fn memory_info(ordinal: usize) -> Result<(u64, u64), CudaError> {
    libs::require_all()?;
    let ctx = CudaContext::new(ordinal)?;
    ctx.bind_to_thread()?;
    let (free, total) = cudarc::driver::result::mem_get_info()?;
    Ok((free as u64, total as u64))
}

/// A family's CUBIN and whether it came from the cache, or why not.
type Compiled = Result<(Vec<u8>, bool), CudaError>;

/// Compiles (or loads from the cache) every family that applies to `arch`.
fn load_kernels(ctx: &Arc<CudaContext>, arch: &str) -> Kernels {
    // NVRTC programs are independent: compile the families in parallel.
    let results: Vec<(&'static str, Compiled)> = std::thread::scope(|s| {
        let hs: Vec<_> = nvrtc::FAMILIES
            .iter()
            .filter_map(|&(fam, src)| {
                let a = nvrtc::family_arch(fam, arch)?;
                Some((fam, s.spawn(move || nvrtc::compile_cached(fam, src, &a))))
            })
            .collect();
        hs.into_iter()
            .map(|(fam, h)| {
                (
                    fam,
                    h.join().unwrap_or_else(|_| {
                        Err(CudaError::Compile {
                            family: fam,
                            arch: arch.into(),
                            log: "compiler thread panicked".into(),
                        })
                    }),
                )
            })
            .collect()
    });
    let mut k = Kernels {
        funcs: HashMap::new(),
        failed: Vec::new(),
        cache_hits: 0,
        compiled: 0,
    };
    for (fam, r) in results {
        let loaded = r.and_then(|(bin, hit)| {
            if hit {
                k.cache_hits += 1;
            } else {
                k.compiled += 1;
            }
            let m = ctx.load_module(cudarc::nvrtc::Ptx::from_binary(bin))?;
            let mut fs = Vec::new();
            for name in kernel_names(fam) {
                let f = m.load_function(&name)?;
                if let Some(bytes) = dynamic_smem(&name) {
                    // Past 48 KB a kernel must opt in to its dynamic shared memory.
                    f.set_attribute(
                        cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                        bytes as i32,
                    )?;
                }
                fs.push((name, f));
            }
            Ok::<_, CudaError>(fs)
        });
        match loaded {
            Ok(fs) => k.funcs.extend(fs),
            Err(e) => k.failed.push((fam.to_string(), e.to_string())),
        }
    }
    k
}

/// Raw device address of a buffer (event tracking is off, so no guard is needed).
pub fn dptr<T>(s: &CudaSlice<T>, stream: &CudaStream) -> u64 {
    let (p, _g) = s.device_ptr(stream);
    p
}

#[cfg(test)]
mod tests {
    use super::{nvrtc, DecodeKernel, DecodeRope, PrefillKernel};

    #[test]
    fn the_splits_rule_parses_fill_waves_and_a_wave_count() {
        assert_eq!(super::parse_splits_rule("fill"), Some((false, 2)));
        assert_eq!(super::parse_splits_rule("waves"), Some((true, 2)));
        assert_eq!(super::parse_splits_rule("waves3"), Some((true, 3)));
        assert_eq!(super::parse_splits_rule("waves0"), None);
        assert_eq!(super::parse_splits_rule("wavesx"), None);
        assert_eq!(super::parse_splits_rule("wave"), None);
    }

    #[test]
    fn decode_rope_folds_within_one_wave_and_parses_its_setting() {
        // 132 SMs x 3 blocks: Qwen3-0.6B batch 8 x 8 kv heads x 5 splits = 320 blocks
        // fold, batch 16 (640) and 64 (1,024) do not.
        let slots = 396;
        assert!(DecodeRope::Waves.folds(320, slots));
        assert!(DecodeRope::Waves.folds(396, slots));
        assert!(!DecodeRope::Waves.folds(397, slots));
        assert!(!DecodeRope::Waves.folds(1024, slots));
        assert!(DecodeRope::Always.folds(2048, slots));
        assert!(!DecodeRope::Off.folds(1, slots));
        assert_eq!("0".parse(), Ok(DecodeRope::Off));
        assert_eq!("waves".parse(), Ok(DecodeRope::Waves));
        assert_eq!("1".parse(), Ok(DecodeRope::Waves));
        assert_eq!("always".parse(), Ok(DecodeRope::Always));
        assert_eq!(DecodeRope::default(), DecodeRope::Waves);
        let err = crate::env::parse_choice::<DecodeRope>("MINISGL_DECODE_ROPE", "2").unwrap_err();
        assert!(
            err.contains("MINISGL_DECODE_ROPE=\"2\"") && err.contains("waves"),
            "{err}"
        );
    }

    #[test]
    fn prefill_kernel_choices_parse_and_both_hopper_families_are_built() {
        assert_eq!("ws".parse(), Ok(PrefillKernel::Ws));
        assert_eq!("auto".parse(), Ok(PrefillKernel::Auto));
        assert_eq!("hopper".parse(), Ok(PrefillKernel::Hopper));
        assert!("fast"
            .parse::<PrefillKernel>()
            .unwrap_err()
            .contains("\"fast\""));
        // The default (ws) and its fallback (the earlier Hopper kernel) are both
        // compiled on sm_90.
        for fam in ["attention_prefill_ws_sm90", "attention_prefill_sm90"] {
            assert!(nvrtc::FAMILIES.iter().any(|(f, _)| *f == fam));
            assert!(nvrtc::family_arch(fam, "sm_90").is_some());
        }
    }

    #[test]
    fn auto_takes_the_tensor_core_kernel_from_group_two() {
        let auto: Vec<usize> = (1..=20)
            .filter(|&g| DecodeKernel::Auto.uses_mma(g))
            .collect();
        assert_eq!(auto, (2..=16).collect::<Vec<_>>());
        assert!(DecodeKernel::Mma.uses_mma(1) && !DecodeKernel::Mma.uses_mma(17));
        assert!(!(1..=16).any(|g| DecodeKernel::Simt.uses_mma(g)));
        assert_eq!("mma".parse(), Ok(DecodeKernel::Mma));
        assert!("tensor"
            .parse::<DecodeKernel>()
            .unwrap_err()
            .contains("\"tensor\""));
    }
}
