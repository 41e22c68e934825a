//! The CPU backend: f32 tensors in host memory, GEMMs through the `gemm`
//! crate, everything else row-parallel with rayon. It is the reference the
//! CUDA backend is checked against, so clarity wins over speed where they
//! disagree. llama.cpp-quantised weights ([`DType::Quant`]) stay in their
//! blocks and their products run on the blocks ([`quant`]), unless the
//! backend is made with [`CpuBackend::with_f32_weights`].

mod attention;
pub mod quant;
pub mod sampling;
mod team;

use std::cell::RefCell;
use std::sync::Arc;

use rayon::prelude::*;

use super::comm::Communicator;
use super::shapes::{self, shape_err};
use super::{Backend, BackendError, DType, DeviceTensor, HostData, KvLayout, Sampled, StepMeta};
use crate::batch::SampleSpec;
use quant::{Kernels, QActs, QMatrix};

/// A dense row-major f32 tensor, or a quantised weight matrix (then `data`
/// is empty and `quant` holds the blocks).
#[derive(Clone, Debug, PartialEq)]
pub struct CpuTensor {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
    pub quant: Option<Arc<QMatrix>>,
}

impl DeviceTensor for CpuTensor {
    fn shape(&self) -> &[usize] {
        &self.shape
    }
}

impl CpuTensor {
    /// A dense f32 tensor.
    pub fn new(shape: Vec<usize>, data: Vec<f32>) -> Self {
        CpuTensor {
            shape,
            data,
            quant: None,
        }
    }

    fn rows_cols(&self, op: &'static str) -> Result<(usize, usize), BackendError> {
        shapes::rows_cols(&self.shape, op)
    }
}

/// Paged KV cache: per layer a K and a V buffer `[pages, page_size, kv_heads, head_dim]`.
#[derive(Debug)]
pub struct CpuKv {
    pub layout: KvLayout,
    pub k: Vec<Vec<f32>>,
    pub v: Vec<Vec<f32>>,
}

/// Per-step metadata (the host copy is all the CPU needs).
#[derive(Debug)]
pub struct CpuStep {
    pub meta: StepMeta,
}

/// The CPU backend. `threads` bounds GEMM parallelism (0 = rayon's pool size).
#[derive(Clone, Debug)]
pub struct CpuBackend {
    threads: usize,
    /// Tokens chosen by the latest `sample_launch`, by sample row.
    last_chosen: RefCell<Vec<u32>>,
    /// Dequantise quantised weights at upload (exact f32 products).
    f32_weights: bool,
    kernels: Kernels,
    /// Quantised activations, reused across products.
    acts: RefCell<QActs>,
    /// From this many activation rows on, a product with unpacked quantised
    /// weights dequantises them and runs the f32 GEMM.
    dequant_gemm_rows: usize,
    /// Activations rounded in two 8-bit parts (the default; ~15 bits) or one
    /// (`MINISGL_CPU_ACT_BITS=8`: faster, llama.cpp's rounding, flips
    /// near-tie tokens; see `quant/acts.rs`).
    split_acts: bool,
    /// The tensor-parallel group this backend is one rank of, if any.
    comm: Option<Arc<dyn Communicator>>,
    /// Fold the norms before the products into their weights
    /// ([`CpuBackend::with_folded_norms`]).
    fold_norms: bool,
    /// Which consumer weights (by shape) the model is told normalise their input
    /// themselves ([`CpuBackend::with_deferred_norms`]).
    defer_norms: Option<DeferRule>,
}

/// Picks, by a product weight's shape, whether that product takes its input norm
/// ([`Backend::norm_in_prologue`]).
#[derive(Clone)]
struct DeferRule(Arc<DeferFn>);

type DeferFn = dyn Fn(&[usize]) -> bool + Send + Sync;

impl std::fmt::Debug for DeferRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DeferRule")
    }
}

impl Default for CpuBackend {
    fn default() -> Self {
        CpuBackend {
            threads: 0,
            last_chosen: RefCell::default(),
            f32_weights: false,
            kernels: Kernels::detect(),
            acts: RefCell::default(),
            dequant_gemm_rows: crate::env::count(
                "MINISGL_CPU_DEQUANT_GEMM_ROWS",
                DEQUANT_GEMM_ROWS,
                |_| true,
                "a row count",
            ),
            split_acts: split_acts_from_env(),
            comm: None,
            fold_norms: false,
            defer_norms: None,
        }
    }
}

/// `MINISGL_CPU_ACT_BITS`: `8` rounds activations in one 8-bit part, `16`
/// (the default) in two. Anything else is reported and the default kept: a
/// backend is made where no error can be returned, and a wrong speed knob
/// must not stop the server.
fn split_acts_from_env() -> bool {
    match std::env::var("MINISGL_CPU_ACT_BITS").as_deref() {
        Err(_) | Ok("16") => true,
        Ok("8") => false,
        Ok(other) => {
            tracing::warn!(
                "MINISGL_CPU_ACT_BITS={other:?} is not 8 or 16; activations keep 16 bits"
            );
            true
        }
    }
}

/// See [`CpuBackend`]'s `dequant_gemm_rows` (`MINISGL_CPU_DEQUANT_GEMM_ROWS`
/// overrides it).
const DEQUANT_GEMM_ROWS: usize = 32;

/// `q` dequantised to f32, rows in parallel.
fn dequantize_par(q: &QMatrix) -> Vec<f32> {
    let mut out = vec![0.0f32; q.rows * q.cols];
    if q.cols == 0 {
        return out;
    }
    const ROWS: usize = 16;
    out.par_chunks_mut(q.cols * ROWS)
        .enumerate()
        .for_each(|(c, chunk)| {
            let r0 = c * ROWS;
            let r1 = r0 + chunk.len() / q.cols;
            let bytes = &q.bytes[r0 * q.row_bytes()..r1 * q.row_bytes()];
            chunk.copy_from_slice(&crate::backend::ggml::dequantize_quant(q.ty, bytes));
        });
    out
}

impl CpuBackend {
    /// A backend using rayon's global pool. Quantised weights stay quantised
    /// unless the environment sets `MINISGL_CPU_F32_WEIGHTS=1`.
    pub fn new() -> Self {
        CpuBackend {
            f32_weights: crate::env::flag("MINISGL_CPU_F32_WEIGHTS", false),
            ..CpuBackend::default()
        }
    }

    /// A backend that tells the model to leave the norm after a residual add to the
    /// products whose weights `rule` picks ([`Backend::norm_in_prologue`]), as the CUDA
    /// backend does where a product normalises its own input at decode sizes: the
    /// model's deferred flow, including a layer whose qkv defers and whose gate_up
    /// does not, checked on the CPU against Hugging Face. The products then run the
    /// norm themselves (the trait's `rms_norm_linear*`), so only the order of the adds
    /// and norms moves.
    pub fn with_deferred_norms(rule: impl Fn(&[usize]) -> bool + Send + Sync + 'static) -> Self {
        CpuBackend {
            defer_norms: Some(DeferRule(Arc::new(rule))),
            ..CpuBackend::new()
        }
    }

    /// A backend that dequantises quantised weights to f32 at upload: the
    /// exact reference for the quantised products (slower, 4-7x the memory).
    pub fn with_f32_weights() -> Self {
        CpuBackend {
            f32_weights: true,
            ..CpuBackend::default()
        }
    }

    /// A backend that folds each norm before a product into the product's weight
    /// ([`Backend::fold_norm`]), as the CUDA backend does under `MINISGL_FOLD_NORMS`:
    /// the model's flow with folded weights and unit norms, checked against Hugging
    /// Face on the fixtures (the CPU keeps f32 weights, so only the order of the
    /// multiplications moves).
    pub fn with_folded_norms() -> Self {
        CpuBackend {
            fold_norms: true,
            ..CpuBackend::new()
        }
    }

    /// A backend whose quantised products use `kernels` (tests, benchmarks).
    pub fn with_kernels(kernels: Kernels) -> Self {
        CpuBackend {
            kernels,
            ..CpuBackend::default()
        }
    }

    /// This backend as one rank of a tensor-parallel group:
    /// [`Backend::all_reduce`] goes through `comm`.
    pub fn with_communicator(mut self, comm: Arc<dyn Communicator>) -> Self {
        self.comm = Some(comm);
        self
    }

    /// Name of the quantised-product kernels in use ("avx2", "scalar").
    pub fn kernels(&self) -> &'static str {
        self.kernels.name()
    }

    /// `out (m×n) = x (m×k) · wᵀ` for a row-major `w` (n×k), f32.
    fn gemm_f32(&self, x: &[f32], w: &[f32], m: usize, k: usize, n: usize, out: &mut [f32]) {
        assert!(x.len() == m * k && w.len() == n * k && out.len() == m * n);
        if m == 0 || n == 0 || k == 0 {
            return;
        }
        // SAFETY: dst is m×n row-major (col stride 1, row stride n); lhs is
        // x, m×k row-major; rhs is Wᵀ, k×n, read from W (n×k row-major) with
        // row stride 1 and column stride k. All buffers have exactly those
        // extents (asserted above) and do not alias.
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                out.as_mut_ptr(),
                1,
                n as isize,
                false,
                x.as_ptr(),
                1,
                k as isize,
                w.as_ptr(),
                k as isize,
                1,
                0.0,
                1.0,
                false,
                false,
                false,
                self.par(),
            );
        }
    }

    /// [`Backend::linear`] into the first `m · n` values of `out`.
    fn linear_to(
        &self,
        x: &CpuTensor,
        w: &CpuTensor,
        bias: Option<&CpuTensor>,
        out: &mut [f32],
    ) -> Result<(), BackendError> {
        let (m, k, n) = shapes::linear(
            &x.shape,
            &w.shape,
            bias.map(|b| (b.shape.as_slice(), b.data.len())),
        )?;
        let out = &mut out[..m * n];
        match &w.quant {
            // Many rows (prefill) without the packed GEMM: the weights
            // dequantised once per product, then the f32 GEMM, beats the
            // row kernels (each weight block would be unpacked per 4 rows).
            Some(q) if q.packed.is_none() && m >= self.dequant_gemm_rows => {
                let wf = dequantize_par(q);
                self.gemm_f32(&x.data, &wf, m, k, n, out);
            }
            // The two parts are summed inside the product (no buffer of
            // their own; see `QActs::parts`).
            Some(q) => {
                let mut acts = self.acts.borrow_mut();
                if self.split_acts {
                    quant::quantize_acts_split(&x.data, m, k, &mut acts);
                } else {
                    quant::quantize_acts(&x.data, m, k, &mut acts);
                }
                quant::matmul(&acts, q, self.kernels, out);
            }
            None => self.gemm_f32(&x.data, &w.data, m, k, n, out),
        }
        if let Some(b) = bias {
            for_rows(out, n, |_, row| {
                for (o, &bv) in row.iter_mut().zip(&b.data) {
                    *o += bv;
                }
            });
        }
        Ok(())
    }

    fn par(&self) -> gemm::Parallelism {
        let n = if self.threads == 0 {
            rayon::current_num_threads()
        } else {
            self.threads
        };
        if n <= 1 {
            gemm::Parallelism::None
        } else {
            gemm::Parallelism::Rayon(n)
        }
    }
}

/// Below this many elements an element-wise op runs on the calling thread:
/// handing a decode step's single row to the pool costs more than the work.
const PAR_MIN_ELEMS: usize = 1 << 14;

/// `f(i, chunk_i)` over the `n`-long chunks of `out`, in parallel only when
/// `out` is large.
fn for_rows(out: &mut [f32], n: usize, f: impl Fn(usize, &mut [f32]) + Sync + Send) {
    let n = n.max(1);
    if out.len() < PAR_MIN_ELEMS {
        out.chunks_mut(n).enumerate().for_each(|(i, c)| f(i, c));
    } else {
        team::for_chunks(out, n, f);
    }
}

fn rms_row(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let ss: f32 = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    let inv = 1.0 / (ss + eps).sqrt();
    for ((o, &xv), &wv) in out.iter_mut().zip(x).zip(w) {
        *o = xv * inv * wv;
    }
}

impl Backend for CpuBackend {
    type Tensor = CpuTensor;
    type Step = CpuStep;
    type Kv = CpuKv;
    type Graph = ();
    type Sampling = Vec<Sampled>;

    fn name(&self) -> &'static str {
        "cpu"
    }

    fn upload(&self, shape: &[usize], data: HostData<'_>) -> Result<CpuTensor, BackendError> {
        shapes::upload(shape, &data)?;
        if let (DType::Quant(ty), [rows, cols]) = (data.dtype, shape) {
            if !self.f32_weights && cols.is_multiple_of(ty.block_elems()) {
                let mut q = QMatrix::new(ty, *rows, *cols, data.bytes.to_vec());
                if self.kernels.packs() {
                    q.pack();
                }
                return Ok(CpuTensor {
                    shape: shape.to_vec(),
                    data: Vec::new(),
                    quant: Some(Arc::new(q)),
                });
            }
        }
        Ok(CpuTensor::new(shape.to_vec(), data.to_f32()))
    }

    fn norm_in_prologue(&self, _residual: &CpuTensor, consumers: &[&CpuTensor]) -> bool {
        self.defer_norms
            .as_ref()
            .is_some_and(|r| !consumers.is_empty() && consumers.iter().all(|w| (r.0)(&w.shape)))
    }

    fn fold_norm(
        &self,
        w: &mut CpuTensor,
        norm: &CpuTensor,
    ) -> Result<Option<CpuTensor>, BackendError> {
        let &[_, k] = w.shape.as_slice() else {
            return Ok(None);
        };
        if !self.fold_norms || w.quant.is_some() || norm.quant.is_some() || norm.shape != [k] {
            return Ok(None);
        }
        for row in w.data.chunks_exact_mut(k) {
            for (x, g) in row.iter_mut().zip(&norm.data) {
                *x *= g;
            }
        }
        Ok(Some(CpuTensor::new(vec![k], vec![1.0; k])))
    }

    fn to_host(&self, t: &CpuTensor) -> Result<Vec<f32>, BackendError> {
        Ok(match &t.quant {
            Some(q) => q.to_f32(),
            None => t.data.clone(),
        })
    }

    fn alloc_kv(&self, layout: KvLayout) -> Result<CpuKv, BackendError> {
        let n = layout.layer_elems();
        let mut k = Vec::new();
        let mut v = Vec::new();
        for _ in 0..layout.num_layers {
            let mut kb = Vec::new();
            let mut vb = Vec::new();
            kb.try_reserve_exact(n)
                .and_then(|_| vb.try_reserve_exact(n))
                .map_err(|e| BackendError::OutOfMemory(format!("KV cache {layout:?}: {e}")))?;
            kb.resize(n, 0.0);
            vb.resize(n, 0.0);
            k.push(kb);
            v.push(vb);
        }
        Ok(CpuKv { layout, k, v })
    }

    fn prepare_step(&self, meta: &StepMeta) -> Result<CpuStep, BackendError> {
        let mut meta = meta.clone();
        let last = self.last_chosen.borrow();
        for &[row, src] in &meta.from_last {
            meta.tokens[row as usize] = *last.get(src as usize).ok_or_else(|| {
                BackendError::InvalidInput(format!(
                    "from_last refers to sample row {src}; the latest sampling had {}",
                    last.len()
                ))
            })?;
        }
        Ok(CpuStep { meta })
    }

    fn embedding(&self, table: &CpuTensor, step: &CpuStep) -> Result<CpuTensor, BackendError> {
        let toks = &step.meta.tokens;
        let (_, hidden) = shapes::embedding(&table.shape, toks)?;
        let mut data = vec![0.0f32; toks.len() * hidden];
        for (row, &t) in data.chunks_mut(hidden.max(1)).zip(toks) {
            match &table.quant {
                Some(q) => row.copy_from_slice(&q.row_f32(t as usize)),
                None => {
                    let s = t as usize * hidden;
                    row.copy_from_slice(&table.data[s..s + hidden]);
                }
            }
        }
        Ok(CpuTensor::new(vec![toks.len(), hidden], data))
    }

    fn rms_norm(&self, x: &CpuTensor, w: &CpuTensor, eps: f32) -> Result<CpuTensor, BackendError> {
        let (rows, n) = x.rows_cols("rms_norm")?;
        if w.data.len() != n {
            return Err(shape_err(
                "rms_norm",
                format!("x {:?} weight {:?}", x.shape, w.shape),
            ));
        }
        let mut data = vec![0.0f32; rows * n];
        for_rows(&mut data, n, |r, o| {
            rms_row(&x.data[r * n..(r + 1) * n], &w.data, eps, o)
        });
        Ok(CpuTensor::new(vec![rows, n], data))
    }

    fn add_rms_norm(
        &self,
        residual: &mut CpuTensor,
        x: &CpuTensor,
        w: &CpuTensor,
        eps: f32,
    ) -> Result<CpuTensor, BackendError> {
        if residual.shape != x.shape {
            return Err(shape_err(
                "add_rms_norm",
                format!("residual {:?} x {:?}", residual.shape, x.shape),
            ));
        }
        for_rows(&mut residual.data, 4096, |i, r| {
            for (r, &v) in r.iter_mut().zip(&x.data[i * 4096..]) {
                *r += v;
            }
        });
        self.rms_norm(residual, w, eps)
    }

    fn linear_add(
        &self,
        x: &CpuTensor,
        w: &CpuTensor,
        bias: Option<&CpuTensor>,
        residual: &mut CpuTensor,
    ) -> Result<(), BackendError> {
        let o = self.linear(x, w, bias)?;
        if residual.shape != o.shape {
            return Err(shape_err(
                "linear_add",
                format!("residual {:?} product {:?}", residual.shape, o.shape),
            ));
        }
        for (r, v) in residual.data.iter_mut().zip(&o.data) {
            *r += v;
        }
        Ok(())
    }

    fn linear(
        &self,
        x: &CpuTensor,
        w: &CpuTensor,
        bias: Option<&CpuTensor>,
    ) -> Result<CpuTensor, BackendError> {
        let (m, _) = x.rows_cols("linear")?;
        let (n, _) = w.rows_cols("linear")?;
        let mut out = vec![0.0f32; m * n];
        self.linear_to(x, w, bias, &mut out)?;
        Ok(CpuTensor::new(vec![m, n], out))
    }

    fn split_cols(&self, x: &CpuTensor, widths: &[usize]) -> Result<Vec<CpuTensor>, BackendError> {
        let (rows, cols) = shapes::split_cols(&x.shape, widths)?;
        let mut outs = Vec::with_capacity(widths.len());
        let mut off = 0;
        for &wd in widths {
            let mut data = Vec::with_capacity(rows * wd);
            for r in 0..rows {
                data.extend_from_slice(&x.data[r * cols + off..r * cols + off + wd]);
            }
            outs.push(CpuTensor::new(vec![rows, wd], data));
            off += wd;
        }
        Ok(outs)
    }

    fn head_rms_norm(
        &self,
        x: &mut CpuTensor,
        w: &CpuTensor,
        head_dim: usize,
        eps: f32,
    ) -> Result<(), BackendError> {
        let (_, cols) = x.rows_cols("head_rms_norm")?;
        if head_dim == 0 || !cols.is_multiple_of(head_dim) || w.data.len() != head_dim {
            return Err(shape_err(
                "head_rms_norm",
                format!("x {:?}, weight {:?}, head_dim {head_dim}", x.shape, w.shape),
            ));
        }
        for_rows(&mut x.data, head_dim, |_, h| {
            let mut tmp = vec![0.0f32; head_dim];
            rms_row(h, &w.data, eps, &mut tmp);
            h.copy_from_slice(&tmp);
        });
        Ok(())
    }

    fn rope(
        &self,
        x: &mut CpuTensor,
        head_dim: usize,
        inv_freq: &CpuTensor,
        step: &CpuStep,
    ) -> Result<(), BackendError> {
        let (_, cols) = shapes::rope(
            &x.shape,
            head_dim,
            (&inv_freq.shape, inv_freq.data.len()),
            step.meta.positions.len(),
        )?;
        let half = head_dim / 2;
        let pos = &step.meta.positions;
        for_rows(&mut x.data, cols, |r, row| {
            let p = pos[r];
            let (sin, cos): (Vec<f32>, Vec<f32>) = inv_freq
                .data
                .iter()
                .map(|&f| (p as f32 * f).sin_cos())
                .unzip();
            for h in row.chunks_mut(head_dim) {
                for i in 0..half {
                    let (a, b) = (h[i], h[i + half]);
                    h[i] = a * cos[i] - b * sin[i];
                    h[i + half] = b * cos[i] + a * sin[i];
                }
            }
        });
        Ok(())
    }

    fn silu_mul(&self, gate_up: &CpuTensor) -> Result<CpuTensor, BackendError> {
        let (rows, cols) = gate_up.rows_cols("silu_mul")?;
        if !cols.is_multiple_of(2) {
            return Err(shape_err("silu_mul", format!("odd width {cols}")));
        }
        let n = cols / 2;
        let mut data = vec![0.0f32; rows * n];
        for_rows(&mut data, n, |r, o| {
            let (g, u) = gate_up.data[r * cols..(r + 1) * cols].split_at(n);
            for ((o, &g), &u) in o.iter_mut().zip(g).zip(u) {
                *o = g / (1.0 + (-g).exp()) * u;
            }
        });
        Ok(CpuTensor::new(vec![rows, n], data))
    }

    fn store_kv(
        &self,
        kv: &mut CpuKv,
        layer: usize,
        k: &CpuTensor,
        v: &CpuTensor,
        step: &CpuStep,
    ) -> Result<(), BackendError> {
        let l = kv.layout;
        let width = l.kv_heads * l.head_dim;
        let (rows, cols) = k.rows_cols("store_kv")?;
        if layer >= l.num_layers || cols != width || v.shape != k.shape {
            return Err(shape_err(
                "store_kv",
                format!(
                    "layer {layer}, k {:?}, v {:?}, cache {l:?}",
                    k.shape, v.shape
                ),
            ));
        }
        let slots = &step.meta.slots;
        if slots.len() != rows {
            return Err(shape_err(
                "store_kv",
                format!("{} slots for {rows} rows", slots.len()),
            ));
        }
        let cap = l.num_pages * l.page_size;
        for (r, &s) in slots.iter().enumerate() {
            let s = s as usize;
            if s >= cap {
                return Err(BackendError::InvalidInput(format!(
                    "slot {s} out of range ({cap})"
                )));
            }
            kv.k[layer][s * width..(s + 1) * width]
                .copy_from_slice(&k.data[r * width..(r + 1) * width]);
            kv.v[layer][s * width..(s + 1) * width]
                .copy_from_slice(&v.data[r * width..(r + 1) * width]);
        }
        Ok(())
    }

    fn attention(
        &self,
        q: &CpuTensor,
        kv: &CpuKv,
        layer: usize,
        step: &CpuStep,
        scale: f32,
    ) -> Result<CpuTensor, BackendError> {
        attention::paged_attention(q, kv, layer, &step.meta, scale)
    }

    fn gather_rows(&self, x: CpuTensor, step: &CpuStep) -> Result<CpuTensor, BackendError> {
        let (rows, cols) = x.rows_cols("gather_rows")?;
        let idx = &step.meta.sample_rows;
        if crate::backend::every_row(idx, rows) {
            return Ok(x);
        }
        let mut data = Vec::with_capacity(idx.len() * cols);
        for &r in idx {
            let r = r as usize;
            if r >= rows {
                return Err(BackendError::InvalidInput(format!("row {r} out of {rows}")));
            }
            data.extend_from_slice(&x.data[r * cols..(r + 1) * cols]);
        }
        Ok(CpuTensor::new(vec![idx.len(), cols], data))
    }

    fn all_reduce(&self, x: &mut CpuTensor) -> Result<(), BackendError> {
        let comm = self.comm.as_ref().ok_or_else(|| {
            BackendError::Unsupported(
                "all-reduce: this CPU backend is not a rank of a tensor-parallel group".into(),
            )
        })?;
        if x.quant.is_some() {
            return Err(shape_err(
                "all_reduce",
                "a quantised weight is not an activation".into(),
            ));
        }
        comm.all_reduce_sum(&mut x.data)
    }

    fn alloc_logits(&self, rows: usize, cols: usize) -> Result<CpuTensor, BackendError> {
        Ok(CpuTensor::new(vec![rows, cols], vec![0.0; rows * cols]))
    }

    fn linear_into(
        &self,
        x: &CpuTensor,
        w: &CpuTensor,
        out: &mut CpuTensor,
    ) -> Result<(), BackendError> {
        // Straight into `out` (the logits: a fresh 2-row product buffer
        // per step was page faults and a copy).
        shapes::linear_into(&x.shape, &w.shape, &out.shape)?;
        self.linear_to(x, w, None, &mut out.data)
    }

    fn sample_finish(&self, sampling: Vec<Sampled>) -> Result<Vec<Sampled>, BackendError> {
        Ok(sampling)
    }

    fn sample_launch(
        &self,
        logits: &CpuTensor,
        specs: &[SampleSpec],
    ) -> Result<Vec<Sampled>, BackendError> {
        let (rows, vocab) = logits.rows_cols("sample")?;
        if rows < specs.len() {
            return Err(shape_err(
                "sample",
                format!("{rows} rows for {} specs", specs.len()),
            ));
        }
        let rows = logits.data[..specs.len() * vocab].chunks(vocab.max(1));
        // One row (a single decode stream) on this thread: a pool hand-off
        // per token costs more than sampling it.
        let out: Vec<Sampled> = if specs.len() <= 1 {
            rows.zip(specs)
                .map(|(row, spec)| sampling::sample_row(row, spec))
                .collect()
        } else {
            logits.data[..specs.len() * vocab]
                .par_chunks(vocab.max(1))
                .zip(specs.par_iter())
                .map(|(row, spec)| sampling::sample_row(row, spec))
                .collect()
        };
        *self.last_chosen.borrow_mut() = out.iter().map(|s| s.token).collect();
        Ok(out)
    }
}
