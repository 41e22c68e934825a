//! Compute backends: `cpu` (pure Rust, the reference) and `cuda`.
//!
//! The model (`crate::model::llama`) is written once against [`Backend`]; a
//! backend only knows tensors, pages and per-step metadata, never requests or
//! policies.
//!
//! # Memory model
//! * Every tensor is an opaque, backend-owned [`Backend::Tensor`]. The CPU
//!   backend keeps f32 on the host (and llama.cpp-quantised weights in their
//!   blocks, [`DType::Quant`]); the CUDA backend keeps weights in bf16 and
//!   activations in whatever it likes (bf16 with f32 accumulation is the
//!   intended choice) on the device. Nothing crosses back to the host during a
//!   forward pass: the only device → host traffic of a step is the result of
//!   [`Backend::sample`] (tokens, requested log-probabilities, top-K
//!   candidates). [`Backend::to_host`] exists for tests and debugging only.
//! * Activations are always 2-D `[rows, cols]`, row-major. A step processes a
//!   flat, ragged batch of `T = StepMeta::tokens.len()` tokens: sequence `s`
//!   owns rows `q_indptr[s] .. q_indptr[s + 1]`.
//!   Multi-head activations are `[T, heads * head_dim]` (head-major within a row).
//! * Weights are uploaded once from host data ([`HostData`]) in the HF layout:
//!   a linear weight is `[out_features, in_features]`; the model fuses q/k/v and
//!   gate/up by concatenating rows before upload.
//! * The paged KV cache ([`Backend::Kv`]) holds, per layer, a K and a V buffer of
//!   shape `[num_pages, page_size, kv_heads, head_dim]`. Token position `p` of a
//!   sequence lives in page `page_table[p / page_size]`, slot `p % page_size`;
//!   its flat slot id is `page * page_size + p % page_size`.
//! * An op's input rules (shapes, token ids) that both backends check live
//!   once in `shapes.rs`, so a bad call is the same error on either.
//!
//! # Per-step metadata
//! The runner builds one host-side [`StepMeta`] per step and calls
//! [`Backend::prepare_step`] once; the returned [`Backend::Step`] (positions,
//! slot ids, page tables, lengths — uploaded once) is passed by reference to
//! every layer's ops.
//!
//! # Call sequence of one step (what the model does)
//! ```text
//! step   = prepare_step(meta)
//! h      = embedding(embed, step)                       // [T, hidden]
//! x      = rms_norm(h, ln1[0]); residual = h
//! for each layer l:
//!     qkv      = linear(x, w_qkv[l], b_qkv[l])           // [T, (Hq+2Hkv)·D]
//!     [q,k,v]  = split_cols(qkv, [Hq·D, Hkv·D, Hkv·D])
//!     head_rms_norm(q, q_norm[l]); head_rms_norm(k, k_norm[l])   // Qwen3 only
//!     rope(q, D, inv_freq, step); rope(k, D, inv_freq, step)
//!     store_kv(kv, l, k, v, step)
//!     a        = attention(q, kv, l, step, 1/sqrt(D))    // [T, Hq·D]
//!     x        = linear_add_rms_norm(a, w_o[l], None, residual, ln2[l])
//!                  // = add_rms_norm(residual, linear(a, w_o[l]), ln2[l])
//!     act      = linear_silu_mul(x, w_gate_up[l])       // = silu_mul(linear(..)), [T, I]
//!     x        = linear_add_rms_norm(act, w_down[l], None, residual,
//!                                    ln1[l+1] or final_norm)
//! (split across GPUs, o and down are linear, all_reduce, add_rms_norm instead)
//! last   = gather_rows(x, step)                          // [S_sample, hidden]
//! logits = linear(last, lm_head, None)                   // [S_sample, vocab]
//! out    = sample(logits, specs)                         // host results
//! ```

pub mod comm;
pub mod cpu;
pub mod cuda;
mod device_kind;
pub mod ggml;
mod shapes;

pub use device_kind::DeviceKind;

use crate::batch::{SampleSpec, TokenLogprob};

/// Element type of host data handed to [`Backend::upload`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DType {
    F32,
    BF16,
    F16,
    /// llama.cpp block-quantised data (a GGUF tensor as stored): every row
    /// is a whole number of blocks. A backend may compute on the blocks
    /// directly (the CPU backend does) or dequantise at upload.
    Quant(QuantType),
}

/// The llama.cpp block formats a backend may receive without dequantisation
/// (ggml's layouts, `ggml-common.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum QuantType {
    Q4_0,
    Q4_1,
    Q8_0,
    Q4_K,
    Q6_K,
}

impl QuantType {
    /// Elements per block.
    pub fn block_elems(self) -> usize {
        match self {
            QuantType::Q4_0 | QuantType::Q4_1 | QuantType::Q8_0 => 32,
            QuantType::Q4_K | QuantType::Q6_K => 256,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            QuantType::Q4_0 => 18,
            QuantType::Q4_1 => 20,
            QuantType::Q8_0 => 34,
            QuantType::Q4_K => 144,
            QuantType::Q6_K => 210,
        }
    }

    /// ggml's name of the format.
    pub fn name(self) -> &'static str {
        match self {
            QuantType::Q4_0 => "Q4_0",
            QuantType::Q4_1 => "Q4_1",
            QuantType::Q8_0 => "Q8_0",
            QuantType::Q4_K => "Q4_K",
            QuantType::Q6_K => "Q6_K",
        }
    }
}

impl DType {
    /// Bytes per element; for [`DType::Quant`], bytes per block (see
    /// [`DType::block_elems`]).
    pub fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::BF16 | DType::F16 => 2,
            DType::Quant(q) => q.block_bytes(),
        }
    }

    /// Elements per [`DType::size`] bytes: 1, or a quantised block's length.
    pub fn block_elems(self) -> usize {
        match self {
            DType::Quant(q) => q.block_elems(),
            _ => 1,
        }
    }

    /// Bytes of `n` elements (`None` when `n` is not a whole number of blocks).
    pub fn bytes_for(self, n: usize) -> Option<usize> {
        let b = self.block_elems();
        n.is_multiple_of(b).then(|| n / b * self.size())
    }
}

/// Host-side tensor data, little-endian bytes (possibly unaligned, e.g. straight
/// from a memory-mapped safetensors file).
#[derive(Clone, Copy, Debug)]
pub struct HostData<'a> {
    pub dtype: DType,
    pub bytes: &'a [u8],
}

impl<'a> HostData<'a> {
    /// Wrap an f32 slice.
    pub fn f32(data: &'a [f32]) -> Self {
        HostData {
            dtype: DType::F32,
            bytes: bytemuck::cast_slice(data),
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.bytes.len() / self.dtype.size() * self.dtype.block_elems()
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Convert to f32 (copies; dequantises [`DType::Quant`] data).
    pub fn to_f32(&self) -> Vec<f32> {
        let b = self.bytes;
        match self.dtype {
            DType::F32 => b
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            DType::BF16 => b
                .chunks_exact(2)
                .map(|c| half::bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
                .collect(),
            DType::F16 => b
                .chunks_exact(2)
                .map(|c| half::f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
                .collect(),
            DType::Quant(q) => ggml::dequantize_quant(q, b),
        }
    }
}

/// One layer's attention shapes and weights for [`Backend::qkv_attention`].
pub struct AttnParams<'a, T> {
    pub q_heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// Qwen3's per-head RMSNorm weights of q and k (`[head_dim]`), if any.
    pub q_norm: Option<&'a T>,
    pub k_norm: Option<&'a T>,
    /// `[head_dim / 2]` RoPE inverse frequencies (see [`Backend::rope`]).
    pub inv_freq: &'a T,
    pub eps: f32,
    /// Softmax scale, `1 / sqrt(head_dim)`.
    pub scale: f32,
}

/// What a [`LayerChain`] starts from.
pub enum ChainInput<'a, T> {
    /// The attention's output row, `[1, q_heads * head_dim]`.
    Attn(&'a T),
    /// The layer's qkv row, `[1, (q_heads + 2 kv_heads) * head_dim]`, of cache layer
    /// `layer`: the chain first does what [`Backend::qkv_attention`] would (q/k norm,
    /// RoPE, the new row's K/V into the cache, the attention), then the products.
    Qkv {
        qkv: &'a T,
        layer: usize,
        params: &'a AttnParams<'a, T>,
    },
    /// As [`ChainInput::Qkv`], from the qkv row the chain before it in the same
    /// [`Backend::layer_span`] produces (it never leaves the device).
    Chained {
        layer: usize,
        params: &'a AttnParams<'a, T>,
    },
}

/// The products of one decoder layer after its attention, for
/// [`Backend::layer_chain`]: the attention output (or the attention itself, see
/// [`ChainInput`]) through `w_o` (+ `b_o`) into the residual, the post-attention norm
/// and `w_gate_up` with SiLU, `w_down` into the residual, and, unless this is the last
/// layer, the next layer's input norm and qkv product.
pub struct LayerChain<'a, T> {
    pub input: ChainInput<'a, T>,
    pub w_o: &'a T,
    pub b_o: Option<&'a T>,
    pub post_norm: &'a T,
    pub w_gate_up: &'a T,
    pub w_down: &'a T,
    /// The next layer's input norm, qkv weight and qkv bias.
    pub next: Option<(&'a T, &'a T, Option<&'a T>)>,
    pub eps: f32,
}

/// Whether `sample_rows` picks every one of `rows` rows in order, so that
/// [`Backend::gather_rows`] has nothing to gather.
pub fn every_row(sample_rows: &[u32], rows: usize) -> bool {
    sample_rows.len() == rows
        && sample_rows
            .iter()
            .enumerate()
            .all(|(i, &r)| r as usize == i)
}

/// Shape of the paged KV cache, fixed at allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvLayout {
    pub num_layers: usize,
    pub num_pages: usize,
    pub page_size: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
}

impl KvLayout {
    /// Elements of one layer's K (or V) buffer.
    pub fn layer_elems(&self) -> usize {
        self.num_pages * self.page_size * self.kv_heads * self.head_dim
    }
}

/// Host description of one step's ragged batch, built by the runner.
///
/// `S` sequences, `T` tokens in all. Invariants (checked by
/// [`StepMeta::validate`], which the runner calls before `prepare_step`):
/// * `tokens`, `positions`, `slots` have length `T`;
/// * `q_indptr` and `page_indptr` have length `S + 1`, start at 0, are
///   non-decreasing, and end at `T` and `page_table.len()`;
/// * sequence `s` has `q_len = q_indptr[s+1] - q_indptr[s]` new tokens at
///   positions `kv_lens[s] - q_len .. kv_lens[s]`, and its pages are
///   `page_table[page_indptr[s] .. page_indptr[s+1]]`, enough to hold `kv_lens[s]`
///   tokens;
/// * `sample_rows` lists rows (indices into `0..T`) whose hidden state goes to
///   the LM head, one per sampling sequence, in output order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StepMeta {
    pub tokens: Vec<u32>,
    /// Absolute position of each token within its sequence (for RoPE).
    pub positions: Vec<u32>,
    /// Flat KV slot of each token: `page * page_size + position % page_size`.
    pub slots: Vec<u32>,
    /// Row offsets of each sequence's new tokens (CSR style).
    pub q_indptr: Vec<u32>,
    /// Tokens of each sequence in the cache after this step (`start_pos + q_len`).
    pub kv_lens: Vec<u32>,
    /// Concatenated page tables of all sequences.
    pub page_table: Vec<u32>,
    /// Offsets into `page_table` (CSR style).
    pub page_indptr: Vec<u32>,
    /// Rows gathered by [`Backend::gather_rows`].
    pub sample_rows: Vec<u32>,
    /// Page size of the cache these slots address.
    pub page_size: u32,
    /// Overlap scheduling: `[row, sample_row]` pairs; the token of `row` is
    /// the one chosen for `sample_row` by the latest [`Backend::sample_launch`],
    /// which may still be running (`tokens[row]` is a placeholder). The backend
    /// substitutes it where that token lives (on the GPU, on the device).
    pub from_last: Vec<[u32; 2]>,
}

impl StepMeta {
    /// Number of sequences.
    pub fn num_seqs(&self) -> usize {
        self.kv_lens.len()
    }

    /// Number of tokens.
    pub fn num_tokens(&self) -> usize {
        self.tokens.len()
    }

    /// Longest query chunk of any sequence (useful for kernel launch shapes).
    pub fn max_q_len(&self) -> u32 {
        self.q_indptr
            .windows(2)
            .map(|w| w[1] - w[0])
            .max()
            .unwrap_or(0)
    }

    /// Longest KV length of any sequence.
    pub fn max_kv_len(&self) -> u32 {
        self.kv_lens.iter().copied().max().unwrap_or(0)
    }

    /// Check the invariants listed on the type against a cache of `num_pages`.
    pub fn validate(&self, num_pages: u32) -> Result<(), BackendError> {
        let bad = |m: String| Err(BackendError::InvalidInput(m));
        let t = self.tokens.len();
        let s = self.kv_lens.len();
        if self.page_size == 0 {
            return bad("page_size is 0".into());
        }
        if self.positions.len() != t || self.slots.len() != t {
            return bad(format!(
                "tokens/positions/slots lengths differ: {t}/{}/{}",
                self.positions.len(),
                self.slots.len()
            ));
        }
        if self.q_indptr.len() != s + 1 || self.page_indptr.len() != s + 1 {
            return bad(format!(
                "q_indptr/page_indptr must have {} entries, got {}/{}",
                s + 1,
                self.q_indptr.len(),
                self.page_indptr.len()
            ));
        }
        if self.q_indptr[0] != 0 || self.q_indptr[s] as usize != t {
            return bad(format!("q_indptr must span 0..{t}: {:?}", self.q_indptr));
        }
        if self.page_indptr[0] != 0 || self.page_indptr[s] as usize != self.page_table.len() {
            return bad("page_indptr must span the page table".into());
        }
        for i in 0..s {
            let (q0, q1) = (self.q_indptr[i], self.q_indptr[i + 1]);
            let (p0, p1) = (self.page_indptr[i], self.page_indptr[i + 1]);
            if q1 < q0 || p1 < p0 {
                return bad(format!("indptr decreases at sequence {i}"));
            }
            let q_len = q1 - q0;
            let kv = self.kv_lens[i];
            if kv < q_len {
                return bad(format!("sequence {i}: kv_len {kv} < q_len {q_len}"));
            }
            let pages_needed = kv.div_ceil(self.page_size);
            if p1 - p0 < pages_needed {
                return bad(format!(
                    "sequence {i}: {} pages cannot hold {kv} tokens at page size {}",
                    p1 - p0,
                    self.page_size
                ));
            }
        }
        if let Some(p) = self.page_table.iter().find(|&&p| p >= num_pages) {
            return bad(format!("page id {p} out of range (num_pages {num_pages})"));
        }
        if let Some(r) = self.sample_rows.iter().find(|&&r| r as usize >= t) {
            return bad(format!("sample row {r} out of range (tokens {t})"));
        }
        if let Some(p) = self.from_last.iter().find(|p| p[0] as usize >= t) {
            return bad(format!("from_last row {} out of range (tokens {t})", p[0]));
        }
        Ok(())
    }
}

/// What [`Backend::sample`] returns for one row.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sampled {
    /// The chosen token (for `Candidates`, the most likely candidate).
    pub token: u32,
    /// Log-probability of `token`, when `spec.logprobs` is `Some`.
    pub logprob: Option<f32>,
    /// `n` most likely tokens with log-probabilities, for `logprobs: Some(n)`.
    pub top_logprobs: Vec<TokenLogprob>,
    /// For `SampleMode::Candidates { k, .. }`: up to `k` tokens, most likely first.
    pub candidates: Vec<TokenLogprob>,
}

/// Errors from a backend.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// An op got tensors whose shapes do not fit together.
    #[error("{op}: shape mismatch: {detail}")]
    Shape { op: &'static str, detail: String },
    /// Metadata or arguments that violate an invariant.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// Device memory exhausted.
    #[error("out of device memory: {0}")]
    OutOfMemory(String),
    /// The device (driver, kernel launch, library call) failed.
    #[error("device error: {0}")]
    Device(String),
    /// The backend cannot do this (e.g. a dtype or head size it has no kernel for).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A collective was abandoned because another rank of the group failed.
    #[error("collective aborted: {0}")]
    Aborted(String),
}

/// Shapes of a tensor as seen by the model.
pub trait DeviceTensor {
    /// Dimensions, row-major. Activations are always `[rows, cols]`.
    fn shape(&self) -> &[usize];
}

/// One compute device. The model calls these ops in the order sketched in the
/// module docs; every op is enqueued in order on the backend's single stream,
/// so only [`Backend::sample`] and [`Backend::to_host`] synchronise.
///
/// Ops take `&self` (a backend is used by one thread at a time, but may hold
/// interior state such as an allocator or a cuBLAS handle) and return fresh
/// output tensors unless they are documented as in-place. Numerical contract:
/// f32 accumulation everywhere (GEMMs, norms, softmax); the CPU backend is the
/// reference the CUDA backend is checked against.
pub trait Backend: Send + 'static {
    /// A device-resident tensor.
    type Tensor: DeviceTensor + Send;
    /// Per-step metadata after [`Backend::prepare_step`] (uploaded once per step).
    type Step: Send;
    /// The paged KV cache of all layers.
    type Kv: Send;
    /// A recorded decode step that can be replayed with new metadata (a CUDA
    /// graph); `()` on backends that cannot record.
    type Graph: Send;
    /// Sampling enqueued by [`Backend::sample_launch`] whose results
    /// [`Backend::sample_finish`] collects.
    type Sampling: Send;

    /// Short name for logs ("cpu", "cuda").
    fn name(&self) -> &'static str;

    /// Upload a weight (or any constant) of `shape` from host data in any
    /// [`DType`]; the backend converts to its storage type. `data.len()` must
    /// equal the product of `shape`.
    fn upload(&self, shape: &[usize], data: HostData<'_>) -> Result<Self::Tensor, BackendError>;

    /// Copy a tensor back as f32 (tests and debugging only; synchronises).
    fn to_host(&self, t: &Self::Tensor) -> Result<Vec<f32>, BackendError>;

    /// Allocate a zeroed paged KV cache.
    fn alloc_kv(&self, layout: KvLayout) -> Result<Self::Kv, BackendError>;

    /// Upload one step's metadata; called once per step, before any op that
    /// takes a `step`. `meta` has been validated.
    fn prepare_step(&self, meta: &StepMeta) -> Result<Self::Step, BackendError>;

    /// Rows of `table` (`[vocab, hidden]`) for `meta.tokens` → `[T, hidden]`.
    fn embedding(
        &self,
        table: &Self::Tensor,
        step: &Self::Step,
    ) -> Result<Self::Tensor, BackendError>;

    /// `y = x / sqrt(mean(x²) + eps) * weight`, per row. `x`: `[rows, n]`, weight `[n]`.
    fn rms_norm(
        &self,
        x: &Self::Tensor,
        weight: &Self::Tensor,
        eps: f32,
    ) -> Result<Self::Tensor, BackendError>;

    /// Fused residual add + RMSNorm: `residual += x` (in place), then returns
    /// `rms_norm(residual, weight, eps)`. The residual stream keeps the
    /// backend's activation precision (HF adds in the model dtype).
    fn add_rms_norm(
        &self,
        residual: &mut Self::Tensor,
        x: &Self::Tensor,
        weight: &Self::Tensor,
        eps: f32,
    ) -> Result<Self::Tensor, BackendError>;

    /// `y = x · Wᵀ (+ bias)`. `x`: `[rows, in]`, `w`: `[out, in]`, bias `[out]`
    /// → `[rows, out]`.
    fn linear(
        &self,
        x: &Self::Tensor,
        w: &Self::Tensor,
        bias: Option<&Self::Tensor>,
    ) -> Result<Self::Tensor, BackendError>;

    /// Split `[rows, sum(widths)]` by columns into contiguous `[rows, widths[i]]`.
    fn split_cols(
        &self,
        x: &Self::Tensor,
        widths: &[usize],
    ) -> Result<Vec<Self::Tensor>, BackendError>;

    /// In place, per head: `x` is `[rows, heads * head_dim]`; every
    /// `head_dim`-long head vector is RMS-normalised and scaled by `weight`
    /// (`[head_dim]`). Qwen3's q/k norm.
    fn head_rms_norm(
        &self,
        x: &mut Self::Tensor,
        weight: &Self::Tensor,
        head_dim: usize,
        eps: f32,
    ) -> Result<(), BackendError>;

    /// In place rotary embedding, HF "rotate half" (NeoX) layout, full rotary
    /// dimension. `x`: `[T, heads * head_dim]`; `inv_freq`: `[head_dim / 2]`
    /// (already includes any Llama-3 scaling; computed by the model). For token
    /// `t` at position `p = positions[t]` and pair `i < head_dim/2`:
    /// `θ = (p as f32) * inv_freq[i]` (f32 product, as HF computes it),
    /// `x[i], x[i + d/2] = x[i]·cosθ − x[i+d/2]·sinθ, x[i+d/2]·cosθ + x[i]·sinθ`.
    fn rope(
        &self,
        x: &mut Self::Tensor,
        head_dim: usize,
        inv_freq: &Self::Tensor,
        step: &Self::Step,
    ) -> Result<(), BackendError>;

    /// `gate_up`: `[rows, 2 * n]` with gate in columns `0..n` and up in `n..2n`
    /// → `silu(gate) * up`, `[rows, n]`.
    fn silu_mul(&self, gate_up: &Self::Tensor) -> Result<Self::Tensor, BackendError>;

    /// `silu_mul(linear(x, w_gate_up))`: SwiGLU's fused gate/up projection and its
    /// activation. A backend may apply the activation in the product's epilogue
    /// (one launch instead of two at decode sizes), rounding as the two ops do.
    fn linear_silu_mul(
        &self,
        x: &Self::Tensor,
        w_gate_up: &Self::Tensor,
    ) -> Result<Self::Tensor, BackendError> {
        let gate_up = self.linear(x, w_gate_up, None)?;
        self.silu_mul(&gate_up)
    }

    /// `add_rms_norm(residual, linear(x, w, bias), norm, eps)`: the projection that
    /// ends an attention or MLP block, the residual add and the next norm. A backend
    /// may do the add and the norm in the product's epilogue (one launch instead of
    /// two at decode sizes), rounding as the two ops do.
    fn linear_add_rms_norm(
        &self,
        x: &Self::Tensor,
        w: &Self::Tensor,
        bias: Option<&Self::Tensor>,
        residual: &mut Self::Tensor,
        norm: &Self::Tensor,
        eps: f32,
    ) -> Result<Self::Tensor, BackendError> {
        let o = self.linear(x, w, bias)?;
        self.add_rms_norm(residual, &o, norm, eps)
    }

    /// Whether the model should leave the norm after a residual add to the product
    /// that consumes it: [`Backend::linear_add`] instead of
    /// [`Backend::linear_add_rms_norm`], then [`Backend::rms_norm_linear`] or
    /// [`Backend::rms_norm_linear_silu_mul`] on the residual. A backend answers true
    /// where it normalises inside the next product (a prologue each block runs, at
    /// decode sizes) more cheaply than after the add; `residual` is the stream the
    /// norms would read and `consumers` the weights of the products that would
    /// normalise it (the model asks for a layer's qkv and its gate_up apart, and defers
    /// each norm where its own product says so). A backend that answers true
    /// implements `linear_add`.
    fn norm_in_prologue(&self, residual: &Self::Tensor, consumers: &[&Self::Tensor]) -> bool {
        let _ = (residual, consumers);
        false
    }

    /// Folds the weight `norm` of the RMSNorm before product `w` into `w` (column c of
    /// `w` times `norm[c]`, in place) where the backend is set to (the CUDA backend then
    /// applies the norm's row factor in the product's consumer,
    /// [`Backend::norm_in_consumer`]), and returns the unit norm the model then holds in
    /// its place; `None` (the default) leaves both as they are. Called
    /// once at load. `rms_norm(x) · g · Wᵀ` and `rms_norm(x, 1) · (W · diag(g))ᵀ` are
    /// the same product; only the bf16 rounding moves (`g · W` is rounded once, here).
    fn fold_norm(
        &self,
        w: &mut Self::Tensor,
        norm: &Self::Tensor,
    ) -> Result<Option<Self::Tensor>, BackendError> {
        let _ = (w, norm);
        Ok(None)
    }

    /// Whether the model should leave the (folded, [`Backend::fold_norm`]) norm before
    /// product `w` to the product and the kernel after it, for this residual stream:
    /// [`Backend::linear_add`] instead of [`Backend::linear_add_rms_norm`] before it,
    /// then [`Backend::rms_norm_linear`] or [`Backend::rms_norm_linear_silu_mul`] with
    /// the unit norm. The product then reads the residual as it is and its consumer scales
    /// each row by the norm's factor, so no norm launch runs between the products.
    fn norm_in_consumer(&self, residual: &Self::Tensor, w: &Self::Tensor) -> bool {
        let _ = (residual, w);
        false
    }

    /// `residual += linear(x, w, bias)` (in place, in the activation precision, as
    /// [`Backend::add_rms_norm`] adds), with no norm after it. Only called where
    /// [`Backend::norm_in_prologue`] answered true; the default reports that the
    /// backend lacks it.
    fn linear_add(
        &self,
        x: &Self::Tensor,
        w: &Self::Tensor,
        bias: Option<&Self::Tensor>,
        residual: &mut Self::Tensor,
    ) -> Result<(), BackendError> {
        let _ = (x, w, bias, residual);
        Err(BackendError::Unsupported(
            "linear_add (a backend whose norm_in_prologue answers true implements it)".into(),
        ))
    }

    /// `linear(rms_norm(x, norm, eps), w, bias)`: the norm before a product, which a
    /// backend may do inside the product.
    fn rms_norm_linear(
        &self,
        x: &Self::Tensor,
        norm: &Self::Tensor,
        eps: f32,
        w: &Self::Tensor,
        bias: Option<&Self::Tensor>,
    ) -> Result<Self::Tensor, BackendError> {
        let normed = self.rms_norm(x, norm, eps)?;
        self.linear(&normed, w, bias)
    }

    /// `linear_silu_mul(rms_norm(x, norm, eps), w_gate_up)`.
    fn rms_norm_linear_silu_mul(
        &self,
        x: &Self::Tensor,
        norm: &Self::Tensor,
        eps: f32,
        w_gate_up: &Self::Tensor,
    ) -> Result<Self::Tensor, BackendError> {
        let normed = self.rms_norm(x, norm, eps)?;
        self.linear_silu_mul(&normed, w_gate_up)
    }

    /// Whether [`Backend::layer_chain`] runs `chain` with this residual stream in
    /// `step` (whose cache is `kv`). The model asks each layer, first with the layer's
    /// qkv ([`ChainInput::Qkv`]), then after the attention with its output.
    fn layer_chain_ok(
        &self,
        residual: &Self::Tensor,
        chain: &LayerChain<'_, Self::Tensor>,
        kv: &Self::Kv,
        step: &Self::Step,
    ) -> bool {
        let _ = (residual, chain, kv, step);
        false
    }

    /// A layer's products after its attention in one go (see [`LayerChain`]), and
    /// with [`ChainInput::Qkv`] the attention too (its K/V written to `kv`):
    /// `residual` is updated in place as `linear_add` twice would, and the next
    /// layer's qkv (`rms_norm_linear` of the updated residual) is returned, or
    /// `None` after the last layer. Rounds as the separate ops do. Only called where
    /// [`Backend::layer_chain_ok`] answered true.
    fn layer_chain(
        &self,
        chain: &LayerChain<'_, Self::Tensor>,
        kv: &mut Self::Kv,
        step: &Self::Step,
        residual: &mut Self::Tensor,
    ) -> Result<Option<Self::Tensor>, BackendError> {
        let _ = (chain, kv, step, residual);
        Err(BackendError::Unsupported(
            "layer_chain (a backend whose layer_chain_ok answers true implements it)".into(),
        ))
    }

    /// How many of `chains`, consecutive layers from the first, [`Backend::layer_span`]
    /// runs as one launch: `chains[0]` starts from [`ChainInput::Qkv`] and each later
    /// one from [`ChainInput::Chained`]. 0 or 1: run them one by one
    /// ([`Backend::layer_chain`]).
    fn layer_span_len(
        &self,
        residual: &Self::Tensor,
        chains: &[LayerChain<'_, Self::Tensor>],
        kv: &Self::Kv,
        step: &Self::Step,
    ) -> usize {
        let _ = (residual, chains, kv, step);
        0
    }

    /// [`Backend::layer_chain`] for each of `chains` in turn, each from the qkv the one
    /// before it produced, as one launch: the last one's qkv is returned (`None` after
    /// the model's last layer). Only called with as many chains as
    /// [`Backend::layer_span_len`] answered.
    fn layer_span(
        &self,
        chains: &[LayerChain<'_, Self::Tensor>],
        kv: &mut Self::Kv,
        step: &Self::Step,
        residual: &mut Self::Tensor,
    ) -> Result<Option<Self::Tensor>, BackendError> {
        let _ = (chains, kv, step, residual);
        Err(BackendError::Unsupported(
            "layer_span (a backend whose layer_span_len answers 2+ implements it)".into(),
        ))
    }

    /// Write `k`, `v` (`[T, kv_heads * head_dim]`) of layer `layer` into the
    /// cache at `meta.slots`.
    fn store_kv(
        &self,
        kv: &mut Self::Kv,
        layer: usize,
        k: &Self::Tensor,
        v: &Self::Tensor,
        step: &Self::Step,
    ) -> Result<(), BackendError>;

    /// Causal paged attention over the ragged batch, after `store_kv` of the
    /// same layer. `q`: `[T, q_heads * head_dim]` (`q_heads` = cols / head_dim,
    /// a multiple of `kv_heads`; query head `h` reads KV head
    /// `h / (q_heads / kv_heads)`). The query at position `p` of sequence `s`
    /// attends to that sequence's cached keys at positions `0..=p`, read
    /// through its page table (so a chunk continues any earlier prefix).
    /// Softmax of `scale · q·k` in f32. Returns `[T, q_heads * head_dim]`.
    fn attention(
        &self,
        q: &Self::Tensor,
        kv: &Self::Kv,
        layer: usize,
        step: &Self::Step,
        scale: f32,
    ) -> Result<Self::Tensor, BackendError>;

    /// Everything between the fused QKV projection and the output projection:
    /// `qkv` is `[T, (q_heads + 2 kv_heads) · head_dim]` (q, k, v columns in
    /// that order); q and k get the per-head norm (when given) and RoPE, k and
    /// v go into the cache, and the attention output `[T, q_heads · head_dim]`
    /// comes back. The default is the sequence of single ops in the module
    /// docs; a backend may work inside `qkv` instead (no split copies, norm and
    /// rotation in one pass: fewer launches per layer).
    fn qkv_attention(
        &self,
        qkv: Self::Tensor,
        kv: &mut Self::Kv,
        layer: usize,
        step: &Self::Step,
        p: &AttnParams<'_, Self::Tensor>,
    ) -> Result<Self::Tensor, BackendError> {
        let (qd, kvd) = (p.q_heads * p.head_dim, p.kv_heads * p.head_dim);
        let mut parts = self.split_cols(&qkv, &[qd, kvd, kvd])?.into_iter();
        let (Some(mut q), Some(mut k), Some(v)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(BackendError::Shape {
                op: "qkv_attention",
                detail: "expected three column blocks".into(),
            });
        };
        if let (Some(qn), Some(kn)) = (p.q_norm, p.k_norm) {
            self.head_rms_norm(&mut q, qn, p.head_dim, p.eps)?;
            self.head_rms_norm(&mut k, kn, p.head_dim, p.eps)?;
        }
        self.rope(&mut q, p.head_dim, p.inv_freq, step)?;
        self.rope(&mut k, p.head_dim, p.inv_freq, step)?;
        self.store_kv(kv, layer, &k, &v, step)?;
        self.attention(&q, kv, layer, step, p.scale)
    }

    /// Rows `meta.sample_rows` of `x` → `[sample_rows.len(), cols]`. Where they are
    /// every row in order (every decode step, recorded ones included: their padded
    /// rows sample too), `x` itself, with no copy.
    fn gather_rows(&self, x: Self::Tensor, step: &Self::Step)
        -> Result<Self::Tensor, BackendError>;

    /// Choose one token per row of `logits` (`[rows, vocab]`, `rows >=
    /// specs.len()`; row `i` belongs to `specs[i]` and rows past the specs are
    /// padding and ignored), following exactly the recipe of
    /// [`cpu::sampling::sample_row`] (the reference implementation and the
    /// documentation of the algorithm: processing order, tie rules, the
    /// counter-based Gumbel noise derived from the seed). Only the results
    /// cross to the host. Enqueues the work and returns at once; the chosen
    /// tokens become the "latest" ones [`StepMeta::from_last`] refers to.
    fn sample_launch(
        &self,
        logits: &Self::Tensor,
        specs: &[SampleSpec],
    ) -> Result<Self::Sampling, BackendError>;

    /// Whether `sampling` has finished (so `sample_finish` will not wait).
    fn sample_ready(&self, _sampling: &Self::Sampling) -> bool {
        true
    }

    /// The results of [`Backend::sample_launch`] (waits for the device; the
    /// step's one device → host synchronisation).
    fn sample_finish(&self, sampling: Self::Sampling) -> Result<Vec<Sampled>, BackendError>;

    /// [`Backend::sample_launch`] then [`Backend::sample_finish`].
    fn sample(
        &self,
        logits: &Self::Tensor,
        specs: &[SampleSpec],
    ) -> Result<Vec<Sampled>, BackendError> {
        let s = self.sample_launch(logits, specs)?;
        self.sample_finish(s)
    }

    /// Tensor parallelism: replace `x` (`[rows, cols]` activations, f32 on
    /// the CPU, bf16 on CUDA) with its element-wise sum over every rank of
    /// the backend's group, identical on every rank (see
    /// [`comm::Communicator`]). The model calls
    /// it after each row-parallel projection, and only when it is one shard
    /// of several, so a backend that was built without a group never sees it;
    /// the default says so instead of pretending to be a group of one.
    fn all_reduce(&self, _x: &mut Self::Tensor) -> Result<(), BackendError> {
        Err(BackendError::Unsupported(format!(
            "all-reduce: the {} backend was built without a communicator",
            self.name()
        )))
    }

    // ---- Decode graphs --------------------------------------------------
    //
    // A decode step launches a few hundred small kernels; at small batch sizes
    // the launches, not the GPU, set the pace. A backend that can record a
    // step once and replay it (CUDA graphs) implements the methods below; the
    // runner (`model::graphs`) captures one graph per padded batch size at
    // start and replays it for every decode step that fits. Recorded ops read
    // their metadata from arrays at fixed addresses, so a replay only rewrites
    // those arrays. The defaults say "unsupported", which the runner treats as
    // "run eagerly".

    /// Reserve metadata arrays at fixed device addresses for decode steps of
    /// up to `max_seqs` sequences of up to `max_pages` pages each, against
    /// `kv`. Returns `false` when this backend cannot record graphs.
    fn reserve_graph_steps(
        &self,
        _kv: &Self::Kv,
        _max_seqs: usize,
        _max_pages: usize,
    ) -> Result<bool, BackendError> {
        Ok(false)
    }

    /// Write the decode step `meta` (one token per sequence, every sequence
    /// sampling, in order) into the reserved arrays, padded to
    /// `padded_seqs` sequences with rows that read and write only a scratch
    /// page outside the pool, and return a step that reads those arrays. Ops
    /// recorded on such a step replay correctly for any later step prepared
    /// with the same `padded_seqs`.
    fn prepare_graph_step(
        &self,
        _meta: &StepMeta,
        _padded_seqs: usize,
    ) -> Result<Self::Step, BackendError> {
        Err(BackendError::Unsupported("decode graphs".into()))
    }

    /// Start recording: ops enqueued until [`Backend::end_capture`] are
    /// recorded, not run.
    fn begin_capture(&self) -> Result<(), BackendError> {
        Err(BackendError::Unsupported("decode graphs".into()))
    }

    /// Stop recording and return the graph (always leaves recording mode,
    /// also on error).
    fn end_capture(&self) -> Result<Self::Graph, BackendError> {
        Err(BackendError::Unsupported("decode graphs".into()))
    }

    /// Run a recorded graph (enqueued like any op).
    fn replay(&self, _graph: &Self::Graph) -> Result<(), BackendError> {
        Err(BackendError::Unsupported("decode graphs".into()))
    }

    /// A zeroed f32 `[rows, cols]` tensor for [`Backend::linear_into`].
    fn alloc_logits(&self, _rows: usize, _cols: usize) -> Result<Self::Tensor, BackendError> {
        Err(BackendError::Unsupported("alloc_logits".into()))
    }

    /// `out[0..rows] = x · Wᵀ` in f32, into a tensor from
    /// [`Backend::alloc_logits`] with at least `x`'s rows (rows past them are
    /// left as they are). A recorded step writes its logits here, at an address
    /// that outlives the recording. `x` comes from [`Backend::gather_rows`].
    fn linear_into(
        &self,
        _x: &Self::Tensor,
        _w: &Self::Tensor,
        _out: &mut Self::Tensor,
    ) -> Result<(), BackendError> {
        Err(BackendError::Unsupported("linear_into".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::every_row;

    #[test]
    fn every_row_is_the_identity_only() {
        assert!(every_row(&[0, 1, 2], 3));
        assert!(every_row(&[], 0));
        // A prefill chunk samples its last token; a step may skip a row or reorder.
        assert!(!every_row(&[2], 3));
        assert!(!every_row(&[0, 2], 3));
        assert!(!every_row(&[1, 0], 2));
        assert!(!every_row(&[0, 1], 3));
    }
}
