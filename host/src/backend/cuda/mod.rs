//! The CUDA backend: bf16 weights and activations on one GPU, GEMMs through
//! cuBLAS (bf16 in, f32 accumulate), every other op a kernel from `kernels/`
//! compiled by NVRTC for the device (see [`nvrtc`]), sampling on the device.
//!
//! Everything is enqueued in order on one stream; only [`Backend::sample`] and
//! [`Backend::to_host`] wait for the device. Decode steps can be recorded as
//! CUDA graphs and replayed ([`graph`]). Libraries are loaded dynamically
//! ([`libs`]): on a machine without a driver, [`CudaBackend::new`] returns a
//! clear error instead of panicking.

pub mod device;
pub mod error;
mod gemm_lt;
mod gemm_sweep;
mod graph;
pub mod libs;
pub mod nccl;
pub mod nvrtc;
pub mod ops;
mod pdl;
mod sample;
pub mod timeline;
pub(crate) mod tma;
mod watchdog;

pub use sample::CudaSampling;

use std::cell::RefCell;

use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};

pub use device::{AttentionBackend, CudaOptions, Device};
pub use error::CudaError;
pub use gemm_lt::{cold_copies, GemmSurvey};
pub use gemm_sweep::{GemmSweep, LtConfig};
pub use ops::{GEMV_MAX_WEIGHT_BYTES, NORM_PROLOGUE_SMEM};

use super::{BackendError, DeviceTensor, KvLayout, StepMeta};

/// Storage of a tensor.
pub enum Buf {
    Bf16(CudaSlice<u16>),
    F32(CudaSlice<f32>),
}

/// A device tensor: bf16 (weights, activations) or f32 (logits).
pub struct CudaTensor {
    pub shape: Vec<usize>,
    pub buf: Buf,
    /// f32 copy of a 1-D upload (RoPE frequency tables need full precision).
    pub f32_copy: Option<CudaSlice<f32>>,
    /// Rows gathered for the LM head: a `linear` on this input writes f32 logits.
    pub(crate) logits_input: bool,
    /// Its part in a norm folded into a product ([`Fold`]).
    pub(crate) fold: Fold,
}

/// A tensor's part in an RMSNorm folded into the product after it
/// ([`Backend::fold_norm`](super::Backend::fold_norm)).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) enum Fold {
    #[default]
    None,
    /// A product weight with its input norm's weight folded in.
    Weight,
    /// The unit norm the model holds in place of a folded one.
    UnitNorm,
    /// Rows of a product of the raw residual stream, still to be scaled by their norm's
    /// factor (and given the product's bias) by the kernel that consumes them.
    RowRms(RowRms),
}

/// What the consumer of a [`Fold::RowRms`] product applies to each row before anything
/// else, in f32: `row · rsqrt(mean(res_row²) + eps) + bias`. The bias is added here, not
/// in the product, because it is not scaled by the factor. `res` (`[rows, hidden]` bf16)
/// and `bias` must not change before that kernel is enqueued.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct RowRms {
    pub res: u64,
    pub hidden: usize,
    pub eps: f32,
    /// `[row width]` bf16, 0 for none.
    pub bias: u64,
}

impl DeviceTensor for CudaTensor {
    fn shape(&self) -> &[usize] {
        &self.shape
    }
}

impl CudaTensor {
    fn rows_cols(&self, op: &'static str) -> Result<(usize, usize), BackendError> {
        super::shapes::rows_cols(&self.shape, op)
    }

    fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// Paged KV cache: per layer a K and a V buffer `[pages, page_size, kv_heads, head_dim]` (bf16).
pub struct CudaKv {
    pub layout: KvLayout,
    pub k: Vec<CudaSlice<u16>>,
    pub v: Vec<CudaSlice<u16>>,
}

/// One step's metadata on the device (one i32 array) plus its host copy.
pub struct CudaStep {
    pub meta: StepMeta,
    /// The array, when this step owns it; graph steps read the backend's
    /// fixed [`GraphArena`] instead.
    pub(crate) _buf: Option<CudaSlice<i32>>,
    /// Device address of the array.
    pub(crate) base: u64,
    pub(crate) off: StepOffsets,
    /// Every sequence has exactly one new token (the decode kernel applies).
    pub(crate) decode_only: bool,
    pub(crate) num_tiles: usize,
    /// The first `num_wide_tiles` tiles are the 128-row tiles of the Hopper kernel.
    pub(crate) num_wide_tiles: usize,
    /// Graph steps: the longest context any replay may bring, so that the
    /// recorded decode split count suits every later step.
    pub(crate) max_kv_hint: Option<usize>,
    /// A step of prefill chunks and one-token sequences: the tables that run them on
    /// separate kernels.
    pub(crate) mixed: Option<MixedRows>,
}

impl CudaStep {
    /// The one-token sequences of a step that mixes them with prefill chunks (0 when
    /// it does not): those the attention can hand to the decode kernel.
    pub fn mixed_decodes(&self) -> usize {
        self.mixed.map_or(0, |m| m.decodes)
    }
}

/// A step that mixes prefill chunks (2+ new tokens) with one-token sequences (decodes,
/// or a prompt's last token after a cache hit). The prefill kernels give every
/// sequence a work item per query head and read its whole context in it, so a decode
/// row there costs its context's K/V `group` times over, on a 128-row tensor-core tile
/// with one live row; the split-grid tensor-core decode reads each K/V row once for the
/// group. So where [`CudaOptions::mixed_split`](device::CudaOptions::mixed_split) is
/// on and that decode applies, the one-token sequences go to it and the prefill kernel
/// gets a tile table without them. Offsets are into the step's array.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MixedRows {
    /// The one-token sequences, longest context first (the decode launch's
    /// `seq_order` and the combine's `seqs`), and how many.
    pub seqs: usize,
    pub decodes: usize,
    /// Their longest context, and their contexts summed (the K/V rows they read).
    pub max_kv: usize,
    pub kv_tokens: usize,
    /// The prefill kernels' tile table over the other sequences, laid out as the
    /// step's own (`num_wide_tiles` 128-row tiles first).
    pub tile_seq: usize,
    pub tile_q0: usize,
    pub num_tiles: usize,
    pub num_wide_tiles: usize,
}

/// Metadata arrays at fixed addresses for recorded decode steps
/// ([`Backend::reserve_graph_steps`]).
pub(crate) struct GraphArena {
    pub buf: CudaSlice<i32>,
    pub max_seqs: usize,
    pub max_pages: usize,
    /// The page past the pool that padding rows use.
    pub scratch_page: u32,
    pub page_size: u32,
    pub off: StepOffsets,
}

/// A recorded decode step.
pub struct CudaGraphStep(pub(crate) cudarc::driver::CudaGraph);

// SAFETY: a graph is only touched by the thread that owns the runner (one at a
// time); CUDA graph objects need external serialisation, not thread affinity.
unsafe impl Send for CudaGraphStep {}

/// Element offsets of each array inside [`CudaStep::buf`].
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct StepOffsets {
    pub tokens: usize,
    pub positions: usize,
    pub slots: usize,
    pub q_start: usize,
    pub kv_len: usize,
    pub page_start: usize,
    pub page_ids: usize,
    pub tok_seq: usize,
    pub sample_rows: usize,
    pub tile_seq: usize,
    pub tile_q0: usize,
    /// The sequences by context, longest first ([`decode_order`]).
    pub seq_order: usize,
}

/// The sequences of a step by context length, longest first (ties in batch order): the
/// order in which the split-grid tensor-core decode starts its blocks
/// ([`CudaOptions::decode_order`](device::CudaOptions::decode_order)), so that a
/// ragged batch's long sequences do not start last and run on alone at the end.
pub(crate) fn decode_order(kv_lens: &[u32]) -> Vec<u32> {
    let mut order: Vec<u32> = (0..kv_lens.len() as u32).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(kv_lens[i as usize]));
    order
}

/// Up to how many rows linear layers use `gemv.cu` by default. Its scalar build beats
/// cuBLAS at one or two rows (about 2x on Qwen3-0.6B's layers), ties at four and
/// loses at eight, where every warp re-reads x once per row
/// (docs/results/gpu-2026-11-30-graphs.md). The tensor-core build (`_tc`, 3+ rows where
/// k is a multiple of 32) costs about the same at 8 rows as at 2, and measured on the
/// H200 (docs/results/gpu-2026-12-02-l2.md, Qwen3-0.6B, graphs, one process) the
/// batch-4 step took 1.256 ms against 1.496 through cuBLAS, but the batch-8 step 1.490
/// against 1.473 (every block's norm prologue copies all eight rows of x): four rows.
pub const GEMV_ROWS_DEFAULT: usize = 4;

/// Most rows `gemv.cu` handles: its `_tc` build's one tile of 16 rows.
/// `MINISGL_GEMV_ROWS` up to this routes batches of 5-16 rows through it, where k is a
/// multiple of 32, instead of cuBLAS. (Builds of two and four tiles, to 64 rows, ran
/// 2.7-6x slower than cuBLAS on 2026-12-05 and were removed:
/// docs/results/gpu-2026-12-05-h100.md §2.)
pub const GEMV_MAX_ROWS: usize = 16;

/// Most rows of the scalar gemv build (GEMV_MAX_ROWS in `gemv.cu`).
pub const GEMV_SIMT_MAX_ROWS: usize = 8;

/// Query rows per prefill tile (PF_BQ in attention_prefill.cu).
pub(crate) const PREFILL_TILE: usize = 64;

/// The CUDA backend.
pub struct CudaBackend {
    pub dev: Device,
    pub(crate) graph_arena: RefCell<Option<GraphArena>>,
    /// Tokens chosen by the latest sampling (device, by sample row) and their
    /// count: what the next step's `from_last` rows read.
    pub(crate) last_chosen: RefCell<Option<(CudaSlice<u32>, usize)>>,
    /// Reusable pinned buffers for sampling results.
    pub(crate) pinned_pool: RefCell<Vec<cudarc::driver::PinnedHostSlice<u32>>>,
    /// Linear layers with at most this many rows use the skinny-product kernel
    /// (`gemv.cu`) instead of cuBLAS; 0 = always cuBLAS.
    pub(crate) gemv_rows: std::cell::Cell<usize>,
    /// Fewest splits of a split-grid decode launch ([`CudaOptions::decode_min_splits`]);
    /// benchmarks switch it to compare in one process.
    pub(crate) decode_min_splits: std::cell::Cell<usize>,
    /// Whether the tensor-core decode sizes its splits by waves
    /// ([`CudaOptions::decode_wave_splits`]; benchmarks compare both rules).
    pub(crate) decode_wave_splits: std::cell::Cell<bool>,
    /// [`CudaOptions::decode_wave_limit`].
    pub(crate) decode_wave_limit: usize,
    /// Fewest context rows a decode split takes ([`CudaOptions::decode_min_part`]).
    pub(crate) decode_min_part: std::cell::Cell<usize>,
    /// The same where the tensor-core grid is full unsplit ([`CudaOptions::decode_full_part`]).
    pub(crate) decode_full_part: std::cell::Cell<usize>,
    /// Whether decode-size products normalise their input themselves
    /// ([`Backend::norm_in_prologue`](super::Backend::norm_in_prologue);
    /// [`CudaOptions::norm_prologue`]; benchmarks compare both).
    pub(crate) norm_prologue: std::cell::Cell<bool>,
    /// [`CudaOptions::fold_norms`] (read when the model loads its weights).
    pub(crate) fold_norms: std::cell::Cell<bool>,
    /// [`CudaOptions::fold_defer`].
    pub(crate) fold_defer: bool,
    /// Whether skinny products of 3+ rows take the tensor-core build
    /// ([`CudaOptions::gemv_tc`]; benchmarks and checks compare).
    pub(crate) gemv_tc: std::cell::Cell<bool>,
    /// [`CudaOptions::gemv_tc_two`].
    pub(crate) gemv_tc_two: std::cell::Cell<bool>,
    /// Heads a warp of `qkv_rope_store_hd*` takes, 0 = by the launch's size
    /// ([`CudaOptions::rope_heads`]; checks run every count).
    pub(crate) rope_heads: std::cell::Cell<usize>,
    /// Where the split-grid tensor-core decode folds in qkv_rope_store
    /// ([`CudaOptions::decode_rope`]; checks run both ways).
    pub(crate) decode_rope: std::cell::Cell<device::DecodeRope>,
    /// Whether the split-grid tensor-core decode starts the longest sequences first
    /// ([`CudaOptions::decode_order`]; checks run both ways).
    pub(crate) decode_order: std::cell::Cell<bool>,
    /// Whether a mixed step's one-token sequences take the decode kernel
    /// ([`CudaOptions::mixed_split`]; checks run both ways).
    pub(crate) mixed_split: std::cell::Cell<bool>,
    /// The order of the Hopper prefill kernels' tiles ([`CudaOptions::prefill_order`]).
    pub(crate) prefill_order: std::cell::Cell<device::PrefillOrder>,
    /// Threads a block of `add_rmsnorm`, 0 = by the row's width
    /// ([`CudaOptions::norm_threads`]; checks run several).
    pub(crate) norm_threads: std::cell::Cell<usize>,
    /// Largest weight (bytes) the skinny kernel streams
    /// ([`CudaOptions::gemv_max_weight`], [`GEMV_MAX_WEIGHT_BYTES`] by default; benchmarks
    /// lift it to time the gemv against cuBLAS).
    pub(crate) gemv_max_weight: std::cell::Cell<usize>,
    /// Whether sampling splits each logits row over several blocks when a step has
    /// fewer rows than SMs ([`CudaOptions::sample_split`]; checks run both paths).
    pub(crate) sample_split: std::cell::Cell<bool>,
    /// Whether sampling copies logits that no row processes ([`CudaOptions::sample_copy`]).
    pub(crate) sample_copy: bool,
    /// Whether the LM head writes bf16 logits ([`CudaOptions::logits_bf16`]).
    pub(crate) logits_bf16: bool,
    /// Whether a layer's products at one decode row run as one `layer_chain` launch
    /// ([`CudaOptions::layer_chain`]; checks and benchmarks compare both).
    pub(crate) layer_chain: std::cell::Cell<bool>,
    /// Whether the chain runs the layer's attention too ([`CudaOptions::chain_attn`]).
    pub(crate) chain_attn: std::cell::Cell<bool>,
    /// [`CudaOptions::chain_attn_part`].
    pub(crate) chain_attn_part: usize,
    /// [`CudaOptions::chain_window`].
    pub(crate) chain_window: Option<usize>,
    /// [`CudaOptions::chain_span`].
    pub(crate) chain_span: usize,
    /// [`CudaOptions::chain_rows`] (checks and benchmarks set it).
    pub(crate) chain_rows: std::cell::Cell<usize>,
    /// [`CudaOptions::chain_attn_rows`] (checks and benchmarks set it).
    pub(crate) chain_attn_rows: std::cell::Cell<usize>,
    /// This device's rank when the model is split across GPUs
    /// ([`Backend::all_reduce`](super::Backend::all_reduce) goes through it).
    pub(crate) nccl: Option<nccl::NcclRank>,
}

impl CudaBackend {
    /// Open a device. Fails cleanly (no panic) when no driver or library is present.
    pub fn new(opts: &CudaOptions) -> Result<Self, CudaError> {
        Ok(CudaBackend {
            dev: Device::open(opts)?,
            graph_arena: RefCell::new(None),
            last_chosen: RefCell::new(None),
            pinned_pool: RefCell::new(Vec::new()),
            gemv_rows: std::cell::Cell::new(opts.gemv_rows.min(GEMV_MAX_ROWS)),
            decode_min_splits: std::cell::Cell::new(opts.decode_min_splits.max(1)),
            decode_wave_splits: std::cell::Cell::new(opts.decode_wave_splits),
            decode_wave_limit: opts.decode_wave_limit.max(1),
            decode_min_part: std::cell::Cell::new(opts.decode_min_part.max(1)),
            decode_full_part: std::cell::Cell::new(opts.decode_full_part.max(1)),
            gemv_max_weight: std::cell::Cell::new(opts.gemv_max_weight),
            norm_prologue: std::cell::Cell::new(opts.norm_prologue),
            fold_norms: std::cell::Cell::new(opts.fold_norms),
            fold_defer: opts.fold_defer,
            gemv_tc: std::cell::Cell::new(opts.gemv_tc),
            gemv_tc_two: std::cell::Cell::new(opts.gemv_tc_two),
            rope_heads: std::cell::Cell::new(opts.rope_heads),
            decode_rope: std::cell::Cell::new(opts.decode_rope),
            decode_order: std::cell::Cell::new(opts.decode_order),
            mixed_split: std::cell::Cell::new(opts.mixed_split),
            prefill_order: std::cell::Cell::new(opts.prefill_order),
            norm_threads: std::cell::Cell::new(opts.norm_threads),
            sample_split: std::cell::Cell::new(opts.sample_split),
            sample_copy: opts.sample_copy,
            logits_bf16: opts.logits_bf16,
            layer_chain: std::cell::Cell::new(opts.layer_chain),
            chain_attn: std::cell::Cell::new(opts.chain_attn),
            chain_attn_part: opts.chain_attn_part.max(1),
            chain_window: opts.chain_window,
            chain_span: opts.chain_span.clamp(1, device::CHAIN_MAX_LAYERS),
            chain_rows: std::cell::Cell::new(opts.chain_rows.clamp(1, device::CHAIN_MAX_ROWS)),
            chain_attn_rows: std::cell::Cell::new(
                opts.chain_attn_rows.clamp(1, device::CHAIN_MAX_ROWS),
            ),
            nccl: None,
        })
    }

    /// Rank `rank` of a tensor-parallel group: opens the rank's device and
    /// sums through its communicator.
    pub fn for_rank(opts: &CudaOptions, rank: nccl::NcclRank) -> Result<Self, CudaError> {
        let opts = CudaOptions {
            ordinal: rank.ordinal(),
            ..opts.clone()
        };
        let mut b = Self::new(&opts)?;
        b.nccl = Some(rank);
        Ok(b)
    }

    /// Route linear layers of at most `rows` rows to the skinny-product kernel
    /// (0: always cuBLAS). Benchmarks compare the two; the default is
    /// [`GEMV_ROWS_DEFAULT`].
    pub fn set_gemv_rows(&self, rows: usize) {
        self.gemv_rows.set(rows.min(GEMV_MAX_ROWS));
    }

    /// The most rows a product routed to the skinny kernel has now.
    pub fn gemv_rows(&self) -> usize {
        self.gemv_rows.get()
    }

    /// Let sampling split logits rows over several blocks at small batches (see
    /// `sample::logit_chunks`); checks compare both paths.
    pub fn set_sample_split(&self, on: bool) {
        self.sample_split.set(on);
    }

    /// Whether sampling splits logits rows at small batches now.
    pub fn sample_split(&self) -> bool {
        self.sample_split.get()
    }

    /// Let a layer's products at one decode row run as one launch (`layer_chain`)
    /// where the shapes allow; checks and benchmarks compare both.
    pub fn set_layer_chain(&self, on: bool) {
        self.layer_chain.set(on);
    }

    /// Whether `layer_chain` is allowed now.
    pub fn layer_chain_on(&self) -> bool {
        self.layer_chain.get()
    }

    /// Let the products-only chain take up to `rows` decode rows (1 to
    /// [`device::CHAIN_MAX_ROWS`]); checks and benchmarks compare.
    pub fn set_chain_rows(&self, rows: usize) {
        self.chain_rows.set(rows.clamp(1, device::CHAIN_MAX_ROWS));
    }

    /// The most rows the products-only chain takes now.
    pub fn chain_rows(&self) -> usize {
        self.chain_rows.get()
    }

    /// Let the attention chain take up to `rows` sequences (1 to
    /// [`device::CHAIN_MAX_ROWS`]); checks and benchmarks compare.
    pub fn set_chain_attn_rows(&self, rows: usize) {
        self.chain_attn_rows
            .set(rows.clamp(1, device::CHAIN_MAX_ROWS));
    }

    /// The most sequences the attention chain takes now.
    pub fn chain_attn_rows(&self) -> usize {
        self.chain_attn_rows.get()
    }

    /// Let the chain run the layer's attention too (`layer_chain_attn_g*`) where it
    /// applies; checks compare both.
    pub fn set_chain_attn(&self, on: bool) {
        self.chain_attn.set(on);
    }

    /// Whether the chain may run the attention now.
    pub fn chain_attn_on(&self) -> bool {
        self.chain_attn.get()
    }

    /// Split the split-grid decode kernels' work at least `min_splits` ways
    /// (benchmarks compare; the default comes from [`CudaOptions`]).
    pub fn set_decode_min_splits(&self, min_splits: usize) {
        self.decode_min_splits.set(min_splits.max(1));
    }

    /// Size the tensor-core decode's splits by waves (true) or by the fill rule
    /// alone (false); see `decode_mma_splits`.
    pub fn set_decode_wave_splits(&self, on: bool) {
        self.decode_wave_splits.set(on);
    }

    /// Let every decode split take at least `rows` context rows (see
    /// [`CudaOptions::decode_min_part`]).
    pub fn set_decode_min_part(&self, rows: usize) {
        self.decode_min_part.set(rows.max(1));
    }

    /// The fewest context rows a decode split takes.
    pub fn decode_min_part(&self) -> usize {
        self.decode_min_part.get()
    }

    /// Route products with weights of at most `bytes` to the skinny kernel (within
    /// `gemv_rows`); the default is [`GEMV_MAX_WEIGHT_BYTES`].
    pub fn set_gemv_max_weight(&self, bytes: usize) {
        self.gemv_max_weight.set(bytes);
    }

    /// The largest weight (bytes) the skinny kernel streams now.
    pub fn gemv_max_weight(&self) -> usize {
        self.gemv_max_weight.get()
    }

    /// Let decode-size products normalise their input themselves (true) or normalise
    /// right after the residual add before them (false).
    pub fn set_norm_prologue(&self, on: bool) {
        self.norm_prologue.set(on);
    }

    /// Fold the norms before the products into their weights from now on (a model loaded
    /// earlier keeps what it was loaded with), or stop applying folded ones in the
    /// products' consumers ([`CudaOptions::fold_norms`]; checks compare both).
    pub fn set_fold_norms(&self, on: bool) {
        self.fold_norms.set(on);
    }

    /// [`Self::set_fold_norms`]' setting.
    pub fn fold_norms(&self) -> bool {
        self.fold_norms.get()
    }

    /// Whether the LM head writes bf16 logits ([`CudaOptions::logits_bf16`]).
    pub fn logits_bf16(&self) -> bool {
        self.logits_bf16
    }

    /// Let skinny products of 3+ rows take the tensor-core build (true) or the scalar
    /// one (false).
    pub fn set_gemv_tc(&self, on: bool) {
        self.gemv_tc.set(on);
    }

    /// Let every warp of the fused q/k norm + RoPE + K/V store take `heads` heads
    /// (1, 2 or 4; 0 = by the launch's size).
    pub fn set_rope_heads(&self, heads: usize) {
        self.rope_heads.set(heads);
    }

    /// Where the split-grid tensor-core decode does the q/k norm, RoPE and K/V store
    /// itself instead of `qkv_rope_store`.
    pub fn set_decode_rope(&self, rule: device::DecodeRope) {
        self.decode_rope.set(rule);
    }

    /// Whether the split-grid tensor-core decode starts the longest sequences first
    /// (else in the batch's order).
    pub fn set_decode_order(&self, longest_first: bool) {
        self.decode_order.set(longest_first);
    }

    /// [`set_decode_order`](Self::set_decode_order)'s setting.
    pub fn decode_order(&self) -> bool {
        self.decode_order.get()
    }

    /// Whether a step mixing prefill chunks with one-token sequences runs those on the
    /// tensor-core decode (else every row on the prefill kernel).
    pub fn set_mixed_split(&self, on: bool) {
        self.mixed_split.set(on);
    }

    /// [`set_mixed_split`](Self::set_mixed_split)'s setting.
    pub fn mixed_split(&self) -> bool {
        self.mixed_split.get()
    }

    /// The order in which the Hopper prefill kernels take a step's tiles (for the
    /// steps prepared from now on).
    pub fn set_prefill_order(&self, order: device::PrefillOrder) {
        self.prefill_order.set(order);
    }

    /// Give every `add_rmsnorm` block `threads` threads (a multiple of 32 up to 1024;
    /// 0 = by the row's width).
    pub fn set_norm_threads(&self, threads: usize) {
        self.norm_threads.set(threads);
    }

    /// Whether skinny products of 3+ rows take the tensor-core build.
    pub fn gemv_tc(&self) -> bool {
        self.gemv_tc.get()
    }

    /// Whether the tensor-core decode sizes its splits by waves.
    pub fn decode_wave_splits(&self) -> bool {
        self.decode_wave_splits.get()
    }

    /// The fewest splits of a split-grid decode launch in use.
    pub fn decode_min_splits(&self) -> usize {
        self.decode_min_splits.get()
    }

    /// `tokens[row] = latest chosen[sample_row]` on the device for each
    /// `from_last` pair (overlap scheduling), `tokens` at device address `tokens`.
    pub(crate) fn take_last_tokens(
        &self,
        tokens: u64,
        pairs: &[[u32; 2]],
    ) -> Result<(), BackendError> {
        if pairs.is_empty() {
            return Ok(());
        }
        let last = self.last_chosen.borrow();
        let (chosen, n) = last.as_ref().ok_or_else(|| {
            BackendError::InvalidInput("from_last with no sampling before it".into())
        })?;
        if let Some(p) = pairs.iter().find(|p| p[1] as usize >= *n) {
            return Err(BackendError::InvalidInput(format!(
                "from_last refers to sample row {}; the latest sampling had {n}",
                p[1]
            )));
        }
        let flat: Vec<i32> = pairs
            .iter()
            .flat_map(|p| [p[0] as i32, p[1] as i32])
            .collect();
        let dev_pairs = self.dev.stream.clone_htod(&flat)?;
        self.launch(
            "take_tokens",
            cfg(((pairs.len().div_ceil(128)) as u32, 1, 1), 128),
            &[
                Arg::U64(tokens),
                Arg::U64(self.ptr(&dev_pairs)),
                Arg::I32(pairs.len() as i32),
                Arg::U64(self.ptr(chosen)),
            ],
        )
    }

    /// Whether the flash attention kernels are in use.
    pub fn uses_flash(&self) -> bool {
        self.dev.flash
    }

    /// Wait for all queued work and surface any asynchronous error.
    pub fn synchronize(&self) -> Result<(), BackendError> {
        self.dev.stream.synchronize()?;
        Ok(())
    }

    fn ptr<T>(&self, s: &CudaSlice<T>) -> u64 {
        device::dptr(s, &self.dev.stream)
    }

    fn tptr(&self, t: &CudaTensor) -> u64 {
        match &t.buf {
            Buf::Bf16(s) => self.ptr(s),
            Buf::F32(s) => self.ptr(s),
        }
    }

    fn bf16_ptr(&self, t: &CudaTensor, op: &'static str) -> Result<u64, BackendError> {
        match &t.buf {
            Buf::Bf16(s) => Ok(self.ptr(s)),
            Buf::F32(_) => Err(BackendError::Shape {
                op,
                detail: format!("expected a bf16 tensor, got f32 {:?}", t.shape),
            }),
        }
    }

    fn alloc_bf16(&self, n: usize) -> Result<CudaSlice<u16>, BackendError> {
        // SAFETY: every caller writes all `n` elements before they are read.
        Ok(unsafe { self.dev.stream.alloc::<u16>(n.max(1)) }?)
    }

    fn alloc_f32(&self, n: usize) -> Result<CudaSlice<f32>, BackendError> {
        // SAFETY: as above.
        Ok(unsafe { self.dev.stream.alloc::<f32>(n.max(1)) }?)
    }

    /// A fresh bf16 `[rows, cols]` tensor (contents undefined until written).
    pub fn new_output(&self, rows: usize, cols: usize) -> Result<CudaTensor, BackendError> {
        self.new_bf16(rows, cols)
    }

    /// Upload f32 data as an f32 tensor (logits in tests; `upload` stores bf16).
    pub fn upload_f32(&self, shape: &[usize], data: &[f32]) -> Result<CudaTensor, BackendError> {
        Ok(CudaTensor {
            shape: shape.to_vec(),
            buf: Buf::F32(self.dev.stream.clone_htod(data)?),
            f32_copy: None,
            logits_input: false,
            fold: Fold::None,
        })
    }

    fn new_bf16(&self, rows: usize, cols: usize) -> Result<CudaTensor, BackendError> {
        Ok(CudaTensor {
            shape: vec![rows, cols],
            buf: Buf::Bf16(self.alloc_bf16(rows * cols)?),
            f32_copy: None,
            logits_input: false,
            fold: Fold::None,
        })
    }

    /// Launch `name` with `cfg` and `args` (by value, in the kernel's order).
    fn launch(&self, name: &str, cfg: LaunchConfig, args: &[Arg]) -> Result<(), BackendError> {
        self.launch_with_table(name, cfg, args, None)
    }

    /// [`Self::launch`] with `table` by value after `args` (the layer chain's
    /// `__grid_constant__` table of layers).
    fn launch_with_table(
        &self,
        name: &str,
        cfg: LaunchConfig,
        args: &[Arg],
        table: Option<&ops::chain::ChainLayers>,
    ) -> Result<(), BackendError> {
        let f = self.dev.kernels.get(name)?;
        if table.is_none() && self.dev.pdl && pdl::pdl_kernel(name) {
            return timeline::wrap(&self.dev, name, || self.launch_pdl(f, cfg, args));
        }
        let mut b = self.dev.stream.launch_builder(f);
        for a in args {
            match a {
                Arg::U64(v) => b.arg(v),
                Arg::I32(v) => b.arg(v),
                Arg::F32(v) => b.arg(v),
                Arg::I64(v) => b.arg(v),
                Arg::Map(v) => b.arg(v),
            };
        }
        if let Some(t) = table {
            b.arg(t);
        }
        timeline::wrap(&self.dev, name, || {
            // SAFETY: every kernel's argument list is documented in its .cu file and the
            // callers in ops/ and sample.rs push exactly those, with buffers sized for them.
            unsafe { b.launch(cfg) }?;
            Ok(())
        })
    }
}

/// A grid dimension of at least 1 block.
fn g(n: usize) -> u32 {
    n.max(1) as u32
}

fn cfg(grid: (u32, u32, u32), block: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: grid,
        block_dim: (block, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// A kernel argument by value.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Arg {
    U64(u64),
    I32(i32),
    F32(f32),
    I64(i64),
    /// A `__grid_constant__` tensor map (128 bytes).
    Map(tma::TensorMap),
}

#[cfg(test)]
mod tests {
    use super::decode_order;

    #[test]
    fn decode_order_is_longest_first_and_stable() {
        assert_eq!(decode_order(&[5, 900, 5, 17, 900]), vec![1, 4, 3, 0, 2]);
        assert!(decode_order(&[]).is_empty());
        // A permutation of the batch, whatever the lengths.
        let lens: Vec<u32> = (0..300).map(|i| (i * 7919 % 1000) as u32).collect();
        let mut o = decode_order(&lens);
        assert!(o
            .windows(2)
            .all(|w| lens[w[0] as usize] >= lens[w[1] as usize]));
        o.sort_unstable();
        assert_eq!(o, (0..300).collect::<Vec<u32>>());
    }
}
