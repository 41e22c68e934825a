//! The [`Backend`] ops on the device: shape checks, then one kernel or GEMM each.

use cudarc::cublas::{result as blas, sys as bsys};
use cudarc::driver::CudaSlice;

use super::{
    cfg, g, Arg, Buf, CudaBackend, CudaKv, CudaStep, CudaTensor, StepOffsets, PREFILL_TILE,
};
use crate::backend::{
    AttnParams, Backend, BackendError, DType, HostData, KvLayout, Sampled, StepMeta,
};
use crate::batch::SampleSpec;

fn shape_err(op: &'static str, detail: String) -> BackendError {
    BackendError::Shape { op, detail }
}

fn to_bf16_bits(data: &HostData<'_>) -> Vec<u16> {
    match data.dtype {
        DType::BF16 => data
            .bytes
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect(),
        _ => data
            .to_f32()
            .into_iter()
            .map(|x| half::bf16::from_f32(x).to_bits())
            .collect(),
    }
}

/// Every slot the step writes lies in the pool or the scratch page past it.
fn check_slots(l: KvLayout, step: &CudaStep) -> Result<(), BackendError> {
    let cap = (l.num_pages + 1) * l.page_size;
    match step.meta.slots.iter().find(|&&s| s as usize >= cap) {
        Some(s) => Err(BackendError::InvalidInput(format!(
            "slot {s} out of range ({cap})"
        ))),
        None => Ok(()),
    }
}

/// Widest output the skinny kernel takes. Measured on the H200 at one row:
/// 5.7 µs against cuBLAS's 11.0 µs for 4096×1024, but 87 µs against 77 µs for
/// the 151936×1024 LM head (docs/results/gpu-2026-11-30-graphs.md).
const GEMV_MAX_COLS: usize = 32_768;

impl CudaBackend {
    #[allow(clippy::too_many_arguments)]
    fn gemm(
        &self,
        x: u64,
        w: u64,
        y: u64,
        m: usize,
        n: usize,
        k: usize,
        f32_out: bool,
        beta: f32,
    ) -> Result<(), BackendError> {
        let alpha = 1.0f32;
        let out_bytes = if f32_out { 4 } else { 2 };
        super::timeline::cost(
            ((m * k + n * k) * 2 + m * n * out_bytes) as f64,
            2.0 * (m * n * k) as f64,
        );
        // Row-major Y[m,n] = X[m,k] · W[n,k]ᵀ is column-major Yᵀ = W · Xᵀ with W read transposed.
        // SAFETY: pointers address buffers of the sizes checked by the caller; alpha/beta are
        // host f32 scalars as CUBLAS_COMPUTE_32F requires.
        super::timeline::wrap(&self.dev, "cublas_gemm", || unsafe {
            blas::gemm_ex(
                *self.dev.blas.handle(),
                bsys::cublasOperation_t::CUBLAS_OP_T,
                bsys::cublasOperation_t::CUBLAS_OP_N,
                n as i32,
                m as i32,
                k as i32,
                &alpha as *const f32 as *const _,
                w as *const _,
                bsys::cudaDataType::CUDA_R_16BF,
                k as i32,
                x as *const _,
                bsys::cudaDataType::CUDA_R_16BF,
                k as i32,
                &beta as *const f32 as *const _,
                y as *mut _,
                if f32_out {
                    bsys::cudaDataType::CUDA_R_32F
                } else {
                    bsys::cudaDataType::CUDA_R_16BF
                },
                n as i32,
                bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                bsys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
            .map_err(|e| BackendError::Device(format!("cuBLAS GEMM {m}x{n}x{k}: {e:?}")))
        })
    }

    /// Whether the skinny-product kernel serves an `m × k` input against an
    /// `n × k` weight (decode batches). Past [`GEMV_MAX_COLS`] outputs (an LM
    /// head) cuBLAS streams the weight faster; cuBLAS also serves when the
    /// gemv family failed to build here.
    fn use_gemv(&self, m: usize, n: usize, k: usize) -> bool {
        (1..=self.gemv_rows.get()).contains(&m)
            && n <= GEMV_MAX_COLS
            && k.is_multiple_of(8)
            && self.dev.kernels.get("gemv_bf16").is_ok()
    }

    /// `y[m, n] = x · Wᵀ (+ bias)` through `gemv_bf16`/`gemv_f32`.
    #[allow(clippy::too_many_arguments)]
    fn gemv(
        &self,
        x: u64,
        w: u64,
        bias: u64,
        y: u64,
        m: usize,
        n: usize,
        k: usize,
        f32_out: bool,
    ) -> Result<(), BackendError> {
        let out_bytes = if f32_out { 4 } else { 2 };
        super::timeline::cost(
            ((m * k + n * k) * 2 + m * n * out_bytes) as f64,
            2.0 * (m * n * k) as f64,
        );
        self.launch(
            if f32_out { "gemv_f32" } else { "gemv_bf16" },
            cfg((g(n.div_ceil(8)), 1, 1), 256),
            &[
                Arg::U64(x),
                Arg::U64(w),
                Arg::U64(bias),
                Arg::U64(y),
                Arg::I32(m as i32),
                Arg::I32(n as i32),
                Arg::I32(k as i32),
                Arg::I32(n as i32),
            ],
        )
    }

    fn step_ptr(&self, step: &CudaStep, off: usize) -> u64 {
        step.base + (off * 4) as u64
    }

    /// The head_dim-specialised norm/rope kernel.
    #[allow(clippy::too_many_arguments)]
    fn norm_rope(
        &self,
        x: &mut CudaTensor,
        head_dim: usize,
        norm_w: u64,
        pos: u64,
        inv_freq: u64,
        eps: f32,
        op: &'static str,
    ) -> Result<(), BackendError> {
        let (rows, cols) = x.rows_cols(op)?;
        if head_dim == 0 || !cols.is_multiple_of(head_dim) {
            return Err(BackendError::Unsupported(format!(
                "{op}: head_dim {head_dim} does not divide cols {cols}"
            )));
        }
        let xp = self.bf16_ptr(x, op)?;
        let heads = cols / head_dim;
        self.norm_rope_raw(
            xp, rows, heads, cols, head_dim, norm_w, pos, inv_freq, eps, op,
        )
    }

    /// norm/rope on `heads` heads at `xp` of each of `rows` rows `row_stride`
    /// elements apart (a column block of a wider tensor works too).
    #[allow(clippy::too_many_arguments)]
    fn norm_rope_raw(
        &self,
        xp: u64,
        rows: usize,
        heads: usize,
        row_stride: usize,
        head_dim: usize,
        norm_w: u64,
        pos: u64,
        inv_freq: u64,
        eps: f32,
        op: &'static str,
    ) -> Result<(), BackendError> {
        if head_dim == 0 || !head_dim.is_multiple_of(2) || head_dim > 1024 {
            return Err(BackendError::Unsupported(format!(
                "{op}: head_dim {head_dim}; kernels need an even head_dim up to 1024"
            )));
        }
        let warps = rows * heads;
        if warps == 0 {
            return Ok(());
        }
        let mut args = vec![
            Arg::U64(xp),
            Arg::I32(rows as i32),
            Arg::I32(heads as i32),
            Arg::I32(row_stride as i32),
            Arg::U64(norm_w),
            Arg::U64(pos),
            Arg::U64(inv_freq),
            Arg::F32(eps),
        ];
        let name = if matches!(head_dim, 64 | 128 | 256) {
            format!("norm_rope_hd{head_dim}")
        } else {
            args.push(Arg::I32(head_dim as i32));
            "norm_rope_generic".to_string()
        };
        self.launch(&name, cfg((g(warps.div_ceil(4)), 1, 1), 128), &args)
    }

    /// Prefill tiles: (sequence, first new-token row) per 64-row tile, and how
    /// many of them lead the list as the 128-row tiles of the Hopper kernel.
    ///
    /// Tiles starting at a multiple of 128 come first (per sequence, shortest
    /// causal span first, which the Hopper kernel walks backwards to start the
    /// longest first); the portable kernel runs the whole list in any order.
    fn tiles(meta: &StepMeta) -> (Vec<i32>, Vec<i32>, usize) {
        let (mut ts, mut tq) = (Vec::new(), Vec::new());
        let (mut odd_s, mut odd_q) = (Vec::new(), Vec::new());
        for s in 0..meta.num_seqs() {
            let n = (meta.q_indptr[s + 1] - meta.q_indptr[s]) as usize;
            let mut q0 = 0;
            while q0 < n {
                let (a, b) = if q0 % (2 * PREFILL_TILE) == 0 {
                    (&mut ts, &mut tq)
                } else {
                    (&mut odd_s, &mut odd_q)
                };
                a.push(s as i32);
                b.push(q0 as i32);
                q0 += PREFILL_TILE;
            }
        }
        let wide = ts.len();
        ts.extend(odd_s);
        tq.extend(odd_q);
        (ts, tq, wide)
    }

    /// Decode splits so that the grid fills the device a few times over.
    pub(crate) fn decode_splits(
        &self,
        seqs: usize,
        kv_heads: usize,
        head_chunks: usize,
        max_kv: usize,
    ) -> usize {
        let base = (seqs * kv_heads * head_chunks).max(1);
        let want = (4 * self.dev.num_sms).div_ceil(base);
        want.clamp(1, max_kv.div_ceil(32).clamp(1, 256))
    }

    /// Merges the split-KV partials of either decode kernel into `op`.
    #[allow(clippy::too_many_arguments)]
    fn decode_combine(
        &self,
        o_part: &CudaSlice<f32>,
        lse: &CudaSlice<f32>,
        step: &CudaStep,
        op: u64,
        hq: usize,
        d: usize,
        splits: usize,
    ) -> Result<(), BackendError> {
        let off = step.off;
        let s = step.meta.num_seqs();
        self.launch(
            "attn_decode_combine",
            cfg((s as u32, hq as u32, 1), 128),
            &[
                Arg::U64(self.ptr(o_part)),
                Arg::U64(self.ptr(lse)),
                Arg::U64(self.step_ptr(step, off.q_start)),
                Arg::U64(self.step_ptr(step, off.kv_len)),
                Arg::U64(op),
                Arg::I32(hq as i32),
                Arg::I32(d as i32),
                Arg::I32(splits as i32),
            ],
        )
    }
}

impl Backend for CudaBackend {
    type Tensor = CudaTensor;
    type Step = CudaStep;
    type Kv = CudaKv;
    type Graph = super::CudaGraphStep;
    type Sampling = super::CudaSampling;

    fn name(&self) -> &'static str {
        "cuda"
    }

    fn upload(&self, shape: &[usize], data: HostData<'_>) -> Result<CudaTensor, BackendError> {
        let n: usize = shape.iter().product();
        if data.len() != n || !data.bytes.len().is_multiple_of(data.dtype.size()) {
            return Err(shape_err(
                "upload",
                format!(
                    "shape {shape:?} needs {n} elements, data has {}",
                    data.len()
                ),
            ));
        }
        let bits = to_bf16_bits(&data);
        let buf = self.dev.stream.clone_htod(&bits)?;
        let f32_copy = if shape.len() == 1 {
            Some(self.dev.stream.clone_htod(&data.to_f32())?)
        } else {
            None
        };
        Ok(CudaTensor {
            shape: shape.to_vec(),
            buf: Buf::Bf16(buf),
            f32_copy,
            logits_input: false,
        })
    }

    fn to_host(&self, t: &CudaTensor) -> Result<Vec<f32>, BackendError> {
        let n = t.numel();
        match &t.buf {
            Buf::Bf16(s) => {
                let v: Vec<u16> = self.dev.stream.clone_dtoh(s)?;
                Ok(v[..n]
                    .iter()
                    .map(|&b| half::bf16::from_bits(b).to_f32())
                    .collect())
            }
            Buf::F32(s) => {
                let mut v: Vec<f32> = self.dev.stream.clone_dtoh(s)?;
                v.truncate(n);
                Ok(v)
            }
        }
    }

    fn alloc_kv(&self, layout: KvLayout) -> Result<CudaKv, BackendError> {
        if !layout.head_dim.is_multiple_of(8) {
            return Err(BackendError::Unsupported(format!(
                "head_dim {} (the CUDA kernels need a multiple of 8)",
                layout.head_dim
            )));
        }
        // One page past the pool: the scratch page that padding rows of
        // recorded decode steps read and write.
        let n = (layout.num_pages + 1) * layout.page_size * layout.kv_heads * layout.head_dim;
        let mut k = Vec::with_capacity(layout.num_layers);
        let mut v = Vec::with_capacity(layout.num_layers);
        for _ in 0..layout.num_layers {
            k.push(self.dev.stream.alloc_zeros::<u16>(n.max(1))?);
            v.push(self.dev.stream.alloc_zeros::<u16>(n.max(1))?);
        }
        Ok(CudaKv { layout, k, v })
    }

    fn prepare_step(&self, meta: &StepMeta) -> Result<CudaStep, BackendError> {
        let t = meta.num_tokens();
        let s = meta.num_seqs();
        let (ts, tq, wide_tiles) = Self::tiles(meta);
        let mut h: Vec<i32> =
            Vec::with_capacity(5 * t + 3 * s + meta.page_table.len() + 2 * ts.len() + 8);
        let mut off = StepOffsets::default();
        macro_rules! put {
            ($field:ident, $it:expr) => {
                off.$field = h.len();
                h.extend($it);
            };
        }
        put!(tokens, meta.tokens.iter().map(|&x| x as i32));
        put!(positions, meta.positions.iter().map(|&x| x as i32));
        put!(slots, meta.slots.iter().map(|&x| x as i32));
        put!(q_start, meta.q_indptr.iter().map(|&x| x as i32));
        put!(kv_len, meta.kv_lens.iter().map(|&x| x as i32));
        put!(page_start, meta.page_indptr.iter().map(|&x| x as i32));
        put!(page_ids, meta.page_table.iter().map(|&x| x as i32));
        let mut tok_seq = vec![0i32; t];
        for si in 0..s {
            for r in meta.q_indptr[si]..meta.q_indptr[si + 1] {
                tok_seq[r as usize] = si as i32;
            }
        }
        put!(tok_seq, tok_seq);
        put!(sample_rows, meta.sample_rows.iter().map(|&x| x as i32));
        put!(tile_seq, ts.iter().copied());
        put!(tile_q0, tq.iter().copied());
        h.push(0);
        let buf = self.dev.stream.clone_htod(&h)?;
        self.take_last_tokens(self.ptr(&buf) + (off.tokens * 4) as u64, &meta.from_last)?;
        let decode_only = s > 0 && meta.q_indptr.windows(2).all(|w| w[1] - w[0] == 1);
        Ok(CudaStep {
            meta: meta.clone(),
            base: self.ptr(&buf),
            _buf: Some(buf),
            off,
            decode_only,
            num_tiles: ts.len(),
            num_wide_tiles: wide_tiles,
            max_kv_hint: None,
        })
    }

    fn embedding(&self, table: &CudaTensor, step: &CudaStep) -> Result<CudaTensor, BackendError> {
        let (vocab, hidden) = table.rows_cols("embedding")?;
        let toks = &step.meta.tokens;
        if let Some(t) = toks.iter().find(|&&t| t as usize >= vocab) {
            return Err(BackendError::InvalidInput(format!(
                "token id {t} out of range (vocab {vocab})"
            )));
        }
        if !hidden.is_multiple_of(8) {
            return Err(BackendError::Unsupported(format!(
                "embedding: hidden {hidden} not a multiple of 8"
            )));
        }
        let out = self.new_bf16(toks.len(), hidden)?;
        if !toks.is_empty() {
            self.launch(
                "embedding_gather",
                cfg((g(toks.len()), 1, 1), 128),
                &[
                    Arg::U64(self.bf16_ptr(table, "embedding")?),
                    Arg::U64(self.step_ptr(step, step.off.tokens)),
                    Arg::U64(self.tptr(&out)),
                    Arg::I32(hidden as i32),
                    Arg::I32(vocab as i32),
                ],
            )?;
        }
        Ok(out)
    }

    fn rms_norm(
        &self,
        x: &CudaTensor,
        w: &CudaTensor,
        eps: f32,
    ) -> Result<CudaTensor, BackendError> {
        let (rows, n) = x.rows_cols("rms_norm")?;
        if w.numel() != n || !n.is_multiple_of(8) {
            return Err(shape_err(
                "rms_norm",
                format!("x {:?} weight {:?}", x.shape, w.shape),
            ));
        }
        let out = self.new_bf16(rows, n)?;
        if rows > 0 {
            self.launch(
                "add_rmsnorm",
                cfg((g(rows), 1, 1), 256),
                &[
                    Arg::U64(self.bf16_ptr(x, "rms_norm")?),
                    Arg::U64(0),
                    Arg::U64(self.bf16_ptr(w, "rms_norm")?),
                    Arg::U64(self.tptr(&out)),
                    Arg::I32(n as i32),
                    Arg::F32(eps),
                ],
            )?;
        }
        Ok(out)
    }

    fn add_rms_norm(
        &self,
        residual: &mut CudaTensor,
        x: &CudaTensor,
        w: &CudaTensor,
        eps: f32,
    ) -> Result<CudaTensor, BackendError> {
        let (rows, n) = residual.rows_cols("add_rms_norm")?;
        if residual.shape != x.shape || w.numel() != n || !n.is_multiple_of(8) {
            return Err(shape_err(
                "add_rms_norm",
                format!(
                    "residual {:?} x {:?} weight {:?}",
                    residual.shape, x.shape, w.shape
                ),
            ));
        }
        let out = self.new_bf16(rows, n)?;
        if rows > 0 {
            self.launch(
                "add_rmsnorm",
                cfg((g(rows), 1, 1), 256),
                &[
                    Arg::U64(self.bf16_ptr(residual, "add_rms_norm")?),
                    Arg::U64(self.bf16_ptr(x, "add_rms_norm")?),
                    Arg::U64(self.bf16_ptr(w, "add_rms_norm")?),
                    Arg::U64(self.tptr(&out)),
                    Arg::I32(n as i32),
                    Arg::F32(eps),
                ],
            )?;
        }
        Ok(out)
    }

    fn linear(
        &self,
        x: &CudaTensor,
        w: &CudaTensor,
        bias: Option<&CudaTensor>,
    ) -> Result<CudaTensor, BackendError> {
        let (m, k) = x.rows_cols("linear")?;
        let (n, kw) = w.rows_cols("linear")?;
        if k != kw {
            return Err(shape_err(
                "linear",
                format!("x {:?} w {:?}", x.shape, w.shape),
            ));
        }
        if let Some(b) = bias {
            if b.numel() != n {
                return Err(shape_err(
                    "linear",
                    format!("bias {:?} for {n} outputs", b.shape),
                ));
            }
        }
        let f32_out = x.logits_input;
        let out = if f32_out {
            CudaTensor {
                shape: vec![m, n],
                buf: Buf::F32(self.alloc_f32(m * n)?),
                f32_copy: None,
                logits_input: false,
            }
        } else {
            self.new_bf16(m, n)?
        };
        if m == 0 || n == 0 {
            return Ok(out);
        }
        if self.use_gemv(m, n, k) {
            let bp = match bias {
                Some(b) => self.bf16_ptr(b, "linear")?,
                None => 0,
            };
            let (xp, wp) = (self.bf16_ptr(x, "linear")?, self.bf16_ptr(w, "linear")?);
            self.gemv(xp, wp, bp, self.tptr(&out), m, n, k, f32_out)?;
            return Ok(out);
        }
        let mut beta = 0.0f32;
        if let Some(b) = bias {
            beta = 1.0;
            self.launch(
                if f32_out {
                    "bcast_rows_f32"
                } else {
                    "bcast_rows_bf16"
                },
                cfg((g(m), 1, 1), 256),
                &[
                    Arg::U64(self.bf16_ptr(b, "linear")?),
                    Arg::U64(self.tptr(&out)),
                    Arg::I32(n as i32),
                ],
            )?;
        }
        if k == 0 {
            // No reduction: y = bias (or zeros).
            if bias.is_none() {
                match &out.buf {
                    Buf::Bf16(_) | Buf::F32(_) => {
                        return Err(BackendError::Unsupported(
                            "linear with in_features 0".into(),
                        ))
                    }
                }
            }
            return Ok(out);
        }
        self.gemm(
            self.bf16_ptr(x, "linear")?,
            self.bf16_ptr(w, "linear")?,
            self.tptr(&out),
            m,
            n,
            k,
            f32_out,
            beta,
        )?;
        Ok(out)
    }

    fn split_cols(
        &self,
        x: &CudaTensor,
        widths: &[usize],
    ) -> Result<Vec<CudaTensor>, BackendError> {
        let (rows, cols) = x.rows_cols("split_cols")?;
        if widths.iter().sum::<usize>() != cols {
            return Err(shape_err(
                "split_cols",
                format!("{widths:?} do not sum to {cols}"),
            ));
        }
        let xp = self.bf16_ptr(x, "split_cols")?;
        let mut outs = Vec::with_capacity(widths.len());
        let mut off = 0usize;
        for &wd in widths {
            let o = self.new_bf16(rows, wd)?;
            if rows > 0 && wd > 0 {
                let vec = wd.is_multiple_of(8) && off.is_multiple_of(8) && cols.is_multiple_of(8);
                let (name, grid_x, block) = if vec {
                    ("copy_cols", (wd / 8).div_ceil(128), 128)
                } else {
                    ("copy_cols_scalar", wd.div_ceil(256), 256)
                };
                self.launch(
                    name,
                    cfg((rows as u32, g(grid_x), 1), block),
                    &[
                        Arg::U64(xp),
                        Arg::I32(cols as i32),
                        Arg::I32(off as i32),
                        Arg::U64(self.tptr(&o)),
                        Arg::I32(wd as i32),
                    ],
                )?;
            }
            outs.push(o);
            off += wd;
        }
        Ok(outs)
    }

    fn head_rms_norm(
        &self,
        x: &mut CudaTensor,
        w: &CudaTensor,
        head_dim: usize,
        eps: f32,
    ) -> Result<(), BackendError> {
        if w.numel() != head_dim {
            return Err(shape_err(
                "head_rms_norm",
                format!("weight {:?}, head_dim {head_dim}", w.shape),
            ));
        }
        let wp = self.bf16_ptr(w, "head_rms_norm")?;
        self.norm_rope(x, head_dim, wp, 0, 0, eps, "head_rms_norm")
    }

    fn rope(
        &self,
        x: &mut CudaTensor,
        head_dim: usize,
        inv_freq: &CudaTensor,
        step: &CudaStep,
    ) -> Result<(), BackendError> {
        let (rows, _) = x.rows_cols("rope")?;
        let freq = inv_freq.f32_copy.as_ref().ok_or_else(|| {
            shape_err(
                "rope",
                format!("inv_freq {:?} must be a 1-D upload", inv_freq.shape),
            )
        })?;
        if inv_freq.numel() * 2 != head_dim || rows != step.meta.positions.len() {
            return Err(shape_err(
                "rope",
                format!(
                    "x {:?}, head_dim {head_dim}, inv_freq {:?}, {} positions",
                    x.shape,
                    inv_freq.shape,
                    step.meta.positions.len()
                ),
            ));
        }
        let fp = self.ptr(freq);
        let pos = self.step_ptr(step, step.off.positions);
        self.norm_rope(x, head_dim, 0, pos, fp, 0.0, "rope")
    }

    fn silu_mul(&self, gate_up: &CudaTensor) -> Result<CudaTensor, BackendError> {
        let (rows, cols) = gate_up.rows_cols("silu_mul")?;
        if !cols.is_multiple_of(16) {
            return Err(shape_err(
                "silu_mul",
                format!("width {cols} (need a multiple of 16)"),
            ));
        }
        let n = cols / 2;
        let out = self.new_bf16(rows, n)?;
        if rows > 0 {
            self.launch(
                "silu_mul",
                cfg((rows as u32, g((n / 8).div_ceil(128)), 1), 128),
                &[
                    Arg::U64(self.bf16_ptr(gate_up, "silu_mul")?),
                    Arg::U64(self.tptr(&out)),
                    Arg::I32(n as i32),
                ],
            )?;
        }
        Ok(out)
    }

    fn store_kv(
        &self,
        kv: &mut CudaKv,
        layer: usize,
        k: &CudaTensor,
        v: &CudaTensor,
        step: &CudaStep,
    ) -> Result<(), BackendError> {
        let l = kv.layout;
        let width = l.kv_heads * l.head_dim;
        let (rows, cols) = k.rows_cols("store_kv")?;
        if layer >= l.num_layers
            || cols != width
            || v.shape != k.shape
            || step.meta.slots.len() != rows
        {
            return Err(shape_err(
                "store_kv",
                format!(
                    "layer {layer}, k {:?}, v {:?}, cache {l:?}, {} slots",
                    k.shape,
                    v.shape,
                    step.meta.slots.len()
                ),
            ));
        }
        check_slots(l, step)?;
        if rows == 0 {
            return Ok(());
        }
        let kc = self.ptr(&kv.k[layer]);
        let vc = self.ptr(&kv.v[layer]);
        self.launch(
            "kv_store",
            cfg((g(rows), 1, 1), 128),
            &[
                Arg::U64(self.bf16_ptr(k, "store_kv")?),
                Arg::U64(self.bf16_ptr(v, "store_kv")?),
                Arg::I32(width as i32),
                Arg::I32(width as i32),
                Arg::U64(self.step_ptr(step, step.off.slots)),
                Arg::U64(kc),
                Arg::U64(vc),
                Arg::I32(width as i32),
            ],
        )
    }

    fn attention(
        &self,
        q: &CudaTensor,
        kv: &CudaKv,
        layer: usize,
        step: &CudaStep,
        scale: f32,
    ) -> Result<CudaTensor, BackendError> {
        let l = kv.layout;
        let d = l.head_dim;
        let (rows, cols) = q.rows_cols("attention")?;
        if layer >= l.num_layers
            || d == 0
            || !cols.is_multiple_of(d)
            || rows != step.meta.num_tokens()
        {
            return Err(shape_err(
                "attention",
                format!(
                    "q {:?}, layer {layer}, cache {l:?}, {} tokens",
                    q.shape,
                    step.meta.num_tokens()
                ),
            ));
        }
        let hq = cols / d;
        if l.kv_heads == 0 || !hq.is_multiple_of(l.kv_heads) {
            return Err(shape_err(
                "attention",
                format!(
                    "{hq} query heads are not a multiple of {} KV heads",
                    l.kv_heads
                ),
            ));
        }
        if step.meta.page_size as usize != l.page_size {
            return Err(BackendError::InvalidInput(format!(
                "step page size {} differs from the cache's {}",
                step.meta.page_size, l.page_size
            )));
        }
        let out = self.new_bf16(rows, cols)?;
        if rows == 0 {
            return Ok(out);
        }
        self.attention_into(q, kv, layer, step, scale, &out, None)?;
        Ok(out)
    }

    fn gather_rows(&self, x: &CudaTensor, step: &CudaStep) -> Result<CudaTensor, BackendError> {
        let (rows, cols) = x.rows_cols("gather_rows")?;
        let idx = &step.meta.sample_rows;
        if let Some(r) = idx.iter().find(|&&r| r as usize >= rows) {
            return Err(BackendError::InvalidInput(format!("row {r} out of {rows}")));
        }
        let mut out = self.new_bf16(idx.len(), cols)?;
        out.logits_input = true;
        if !idx.is_empty() {
            self.launch(
                "gather_rows",
                cfg((g(idx.len()), 1, 1), 128),
                &[
                    Arg::U64(self.bf16_ptr(x, "gather_rows")?),
                    Arg::U64(self.step_ptr(step, step.off.sample_rows)),
                    Arg::U64(self.tptr(&out)),
                    Arg::I32(cols as i32),
                ],
            )?;
        }
        Ok(out)
    }

    fn sample_launch(
        &self,
        logits: &CudaTensor,
        specs: &[SampleSpec],
    ) -> Result<super::CudaSampling, BackendError> {
        self.sample_launch_impl(logits, specs)
    }

    fn sample_ready(&self, s: &super::CudaSampling) -> bool {
        self.sample_ready_impl(s)
    }

    fn sample_finish(&self, s: super::CudaSampling) -> Result<Vec<Sampled>, BackendError> {
        self.sample_finish_impl(s)
    }

    fn qkv_attention(
        &self,
        qkv: CudaTensor,
        kv: &mut CudaKv,
        layer: usize,
        step: &CudaStep,
        p: &AttnParams<'_, CudaTensor>,
    ) -> Result<CudaTensor, BackendError> {
        let l = kv.layout;
        let d = p.head_dim;
        let (rows, cols) = qkv.rows_cols("qkv_attention")?;
        let (qd, kvd) = (p.q_heads * d, p.kv_heads * d);
        if cols != qd + 2 * kvd
            || layer >= l.num_layers
            || d != l.head_dim
            || p.kv_heads != l.kv_heads
            || p.kv_heads == 0
            || !p.q_heads.is_multiple_of(p.kv_heads)
            || rows != step.meta.num_tokens()
            || step.meta.page_size as usize != l.page_size
            || p.inv_freq.numel() * 2 != d
            || !cols.is_multiple_of(8)
        {
            return Err(shape_err(
                "qkv_attention",
                format!(
                    "qkv {:?} for {}q/{}kv x {d}, layer {layer}, cache {l:?}, {} tokens, page size {}",
                    qkv.shape,
                    p.q_heads,
                    p.kv_heads,
                    step.meta.num_tokens(),
                    step.meta.page_size
                ),
            ));
        }
        let out = self.new_bf16(rows, qd)?;
        if rows == 0 {
            return Ok(out);
        }
        check_slots(l, step)?;
        let freq = p.inv_freq.f32_copy.as_ref().ok_or_else(|| {
            shape_err(
                "qkv_attention",
                format!("inv_freq {:?} must be a 1-D upload", p.inv_freq.shape),
            )
        })?;
        let fp = self.ptr(freq);
        let pos = self.step_ptr(step, step.off.positions);
        let base = self.bf16_ptr(&qkv, "qkv_attention")?;
        let kp = base + (qd * 2) as u64;
        let vp = kp + (kvd * 2) as u64;
        // q and k in place inside qkv: norm and rotation in one pass; without
        // per-head norms q and k are adjacent heads of one launch.
        match (p.q_norm, p.k_norm) {
            (Some(qn), Some(kn)) => {
                let (qw, kw) = (
                    self.bf16_ptr(qn, "qkv_attention")?,
                    self.bf16_ptr(kn, "qkv_attention")?,
                );
                if qn.numel() != d || kn.numel() != d {
                    return Err(shape_err(
                        "qkv_attention",
                        format!("q/k norm {:?}/{:?}, head_dim {d}", qn.shape, kn.shape),
                    ));
                }
                self.norm_rope_raw(
                    base,
                    rows,
                    p.q_heads,
                    cols,
                    d,
                    qw,
                    pos,
                    fp,
                    p.eps,
                    "qkv_attention",
                )?;
                self.norm_rope_raw(
                    kp,
                    rows,
                    p.kv_heads,
                    cols,
                    d,
                    kw,
                    pos,
                    fp,
                    p.eps,
                    "qkv_attention",
                )?;
            }
            _ => self.norm_rope_raw(
                base,
                rows,
                p.q_heads + p.kv_heads,
                cols,
                d,
                0,
                pos,
                fp,
                0.0,
                "qkv_attention",
            )?,
        }
        self.launch(
            "kv_store",
            cfg((g(rows), 1, 1), 128),
            &[
                Arg::U64(kp),
                Arg::U64(vp),
                Arg::I32(cols as i32),
                Arg::I32(cols as i32),
                Arg::U64(self.step_ptr(step, step.off.slots)),
                Arg::U64(self.ptr(&kv.k[layer])),
                Arg::U64(self.ptr(&kv.v[layer])),
                Arg::I32(kvd as i32),
            ],
        )?;
        self.attention_raw(
            base,
            cols,
            rows,
            p.q_heads,
            kv,
            layer,
            step,
            p.scale,
            self.tptr(&out),
            None,
        )?;
        // qkv is dropped here: freed in stream order, after the kernels above.
        Ok(out)
    }

    fn reserve_graph_steps(
        &self,
        kv: &CudaKv,
        max_seqs: usize,
        max_pages: usize,
    ) -> Result<bool, BackendError> {
        self.reserve_graph_arena(kv.layout, max_seqs, max_pages)?;
        Ok(true)
    }

    fn prepare_graph_step(
        &self,
        meta: &StepMeta,
        padded_seqs: usize,
    ) -> Result<CudaStep, BackendError> {
        self.graph_step(meta, padded_seqs)
    }

    fn begin_capture(&self) -> Result<(), BackendError> {
        self.begin_capture_impl()
    }

    fn end_capture(&self) -> Result<super::CudaGraphStep, BackendError> {
        self.end_capture_impl()
    }

    fn replay(&self, graph: &super::CudaGraphStep) -> Result<(), BackendError> {
        graph.0.launch()?;
        Ok(())
    }

    fn alloc_logits(&self, rows: usize, cols: usize) -> Result<CudaTensor, BackendError> {
        Ok(CudaTensor {
            shape: vec![rows, cols],
            buf: Buf::F32(self.dev.stream.alloc_zeros::<f32>((rows * cols).max(1))?),
            f32_copy: None,
            logits_input: false,
        })
    }

    fn linear_into(
        &self,
        x: &CudaTensor,
        w: &CudaTensor,
        out: &mut CudaTensor,
    ) -> Result<(), BackendError> {
        let (m, k) = x.rows_cols("linear_into")?;
        let (n, kw) = w.rows_cols("linear_into")?;
        let (rows, cols) = out.rows_cols("linear_into")?;
        if k != kw || rows < m || cols != n || !matches!(out.buf, Buf::F32(_)) {
            return Err(shape_err(
                "linear_into",
                format!("x {:?} w {:?} out {:?}", x.shape, w.shape, out.shape),
            ));
        }
        if m == 0 || n == 0 || k == 0 {
            return Ok(());
        }
        if self.use_gemv(m, n, k) {
            let (xp, wp) = (
                self.bf16_ptr(x, "linear_into")?,
                self.bf16_ptr(w, "linear_into")?,
            );
            return self.gemv(xp, wp, 0, self.tptr(out), m, n, k, true);
        }
        self.gemm(
            self.bf16_ptr(x, "linear_into")?,
            self.bf16_ptr(w, "linear_into")?,
            self.tptr(out),
            m,
            n,
            k,
            true,
            0.0,
        )
    }
}

/// Which attention path a call takes (for tests and the benchmark).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttnPath {
    Simple,
    /// The CUDA-core split-KV decode kernel.
    Decode,
    /// The tensor-core split-KV decode kernel (GQA groups up to 16 heads).
    DecodeMma,
    /// The portable tensor-core prefill kernel (mma.sync, sm_80+).
    Prefill,
    /// The Hopper prefill kernel (wgmma, sm_90).
    PrefillHopper,
}

impl CudaBackend {
    /// The path `attention` would take for this step, head_dim and GQA group
    /// (query heads per kv head).
    pub fn attention_path(&self, step: &CudaStep, head_dim: usize, group: usize) -> AttnPath {
        if !self.dev.flash || !matches!(head_dim, 64 | 128) {
            AttnPath::Simple
        } else if step.decode_only && self.dev.decode_kernel.uses_mma(group) {
            AttnPath::DecodeMma
        } else if step.decode_only {
            AttnPath::Decode
        } else if self.dev.hopper_prefill {
            AttnPath::PrefillHopper
        } else {
            AttnPath::Prefill
        }
    }

    /// Attention into `out`, optionally forcing a path (tests compare paths).
    #[allow(clippy::too_many_arguments)]
    pub fn attention_into(
        &self,
        q: &CudaTensor,
        kv: &CudaKv,
        layer: usize,
        step: &CudaStep,
        scale: f32,
        out: &CudaTensor,
        force: Option<AttnPath>,
    ) -> Result<(), BackendError> {
        let (rows, cols) = q.rows_cols("attention")?;
        let qp = self.bf16_ptr(q, "attention")?;
        let hq = cols / kv.layout.head_dim;
        self.attention_raw(
            qp,
            cols,
            rows,
            hq,
            kv,
            layer,
            step,
            scale,
            self.tptr(out),
            force,
        )
    }

    /// Attention of `hq` query heads read at `qp` (rows `cols` elements apart,
    /// so q may be a column block of the fused qkv tensor) into `[rows, hq · D]` at `op`.
    #[allow(clippy::too_many_arguments)]
    fn attention_raw(
        &self,
        qp: u64,
        cols: usize,
        rows: usize,
        hq: usize,
        kv: &CudaKv,
        layer: usize,
        step: &CudaStep,
        scale: f32,
        op: u64,
        force: Option<AttnPath>,
    ) -> Result<(), BackendError> {
        let l = kv.layout;
        let d = l.head_dim;
        let group = hq / l.kv_heads;
        let path = force.unwrap_or_else(|| self.attention_path(step, d, group));
        let kc = self.ptr(&kv.k[layer]);
        let vc = self.ptr(&kv.v[layer]);
        let sp = |o: usize| self.step_ptr(step, o);
        let off = step.off;
        let s = step.meta.num_seqs();
        match path {
            AttnPath::Simple => {
                if d > 256 {
                    return Err(BackendError::Unsupported(format!(
                        "attention head_dim {d} > 256"
                    )));
                }
                self.launch(
                    "attn_simple",
                    cfg((rows as u32, hq as u32, 1), 128),
                    &[
                        Arg::U64(qp),
                        Arg::I32(cols as i32),
                        Arg::U64(op),
                        Arg::U64(kc),
                        Arg::U64(vc),
                        Arg::U64(sp(off.q_start)),
                        Arg::U64(sp(off.kv_len)),
                        Arg::U64(sp(off.page_start)),
                        Arg::U64(sp(off.page_ids)),
                        Arg::U64(sp(off.tok_seq)),
                        Arg::I32(hq as i32),
                        Arg::I32(l.kv_heads as i32),
                        Arg::I32(d as i32),
                        Arg::I32(l.page_size as i32),
                        Arg::F32(scale),
                    ],
                )
            }
            AttnPath::Decode | AttnPath::DecodeMma => {
                let mma = path == AttnPath::DecodeMma;
                if !step.decode_only
                    || !matches!(d, 64 | 128)
                    || (mma && !(1..=16).contains(&group))
                {
                    return Err(BackendError::Unsupported(if mma {
                        "tensor-core decode needs one token per sequence, head_dim 64/128 and at most 16 query heads per kv head".into()
                    } else {
                        "decode kernel needs one token per sequence and head_dim 64/128".into()
                    }));
                }
                // The CUDA-core kernel covers a group in chunks of up to 8 heads;
                // the tensor-core one takes the whole group (up to 16) as mma rows.
                let (name, head_chunks) = if mma {
                    (format!("attn_decode_mma_hd{d}"), 1)
                } else {
                    let gmax = match group {
                        1 => 1,
                        2 => 2,
                        3 | 4 => 4,
                        _ => 8,
                    };
                    (format!("attn_decode_hd{d}_g{gmax}"), group.div_ceil(gmax))
                };
                let max_kv = step.max_kv_hint.unwrap_or(step.meta.max_kv_len() as usize);
                let splits = self.decode_splits(s, l.kv_heads, head_chunks, max_kv);
                let o_part = self.alloc_f32(s * hq * splits * d)?;
                let lse = self.alloc_f32(s * hq * splits)?;
                // Floor: each sequence's K and V read once, q read and o written.
                let kv_tokens: u64 = step.meta.kv_lens.iter().map(|&x| u64::from(x)).sum();
                super::timeline::cost(
                    (kv_tokens as usize * l.kv_heads * d * 2 * 2 + 2 * s * hq * d * 2) as f64,
                    (4 * kv_tokens as usize * hq * d) as f64,
                );
                let mut args = vec![
                    Arg::U64(qp),
                    Arg::I32(cols as i32),
                    Arg::U64(kc),
                    Arg::U64(vc),
                    Arg::U64(sp(off.q_start)),
                    Arg::U64(sp(off.kv_len)),
                    Arg::U64(sp(off.page_start)),
                    Arg::U64(sp(off.page_ids)),
                    Arg::I32(hq as i32),
                    Arg::I32(l.kv_heads as i32),
                    Arg::I32(l.page_size as i32),
                    Arg::F32(scale),
                ];
                if !mma {
                    args.push(Arg::I32(head_chunks as i32));
                }
                args.push(Arg::U64(self.ptr(&o_part)));
                args.push(Arg::U64(self.ptr(&lse)));
                let mut c = cfg(
                    (splits as u32, (l.kv_heads * head_chunks) as u32, s as u32),
                    128,
                );
                c.shared_mem_bytes = super::device::dynamic_smem(&name).unwrap_or(0) as u32;
                self.launch(&name, c, &args)?;
                self.decode_combine(&o_part, &lse, step, op, hq, d, splits)
            }
            AttnPath::PrefillHopper => {
                if step.num_wide_tiles == 0 {
                    return Ok(());
                }
                let name = format!("attn_prefill_sm90_hd{d}");
                let smem = super::device::dynamic_smem(&name).ok_or_else(|| {
                    BackendError::Unsupported(format!("Hopper prefill kernel head_dim {d}"))
                })?;
                let mut c = cfg((g(step.num_wide_tiles), hq as u32, 1), 256);
                c.shared_mem_bytes = smem as u32;
                self.launch(
                    &name,
                    c,
                    &[
                        Arg::U64(qp),
                        Arg::I32(cols as i32),
                        Arg::U64(op),
                        Arg::U64(kc),
                        Arg::U64(vc),
                        Arg::U64(sp(off.q_start)),
                        Arg::U64(sp(off.kv_len)),
                        Arg::U64(sp(off.page_start)),
                        Arg::U64(sp(off.page_ids)),
                        Arg::U64(sp(off.tile_seq)),
                        Arg::U64(sp(off.tile_q0)),
                        Arg::I32(step.num_wide_tiles as i32),
                        Arg::I32(hq as i32),
                        Arg::I32(l.kv_heads as i32),
                        Arg::I32(l.page_size as i32),
                        Arg::F32(scale),
                    ],
                )
            }
            AttnPath::Prefill => {
                if !matches!(d, 64 | 128) {
                    return Err(BackendError::Unsupported(format!(
                        "prefill kernel head_dim {d}"
                    )));
                }
                self.launch(
                    &format!("attn_prefill_hd{d}"),
                    cfg((g(step.num_tiles), hq as u32, 1), 128),
                    &[
                        Arg::U64(qp),
                        Arg::I32(cols as i32),
                        Arg::U64(op),
                        Arg::U64(kc),
                        Arg::U64(vc),
                        Arg::U64(sp(off.q_start)),
                        Arg::U64(sp(off.kv_len)),
                        Arg::U64(sp(off.page_start)),
                        Arg::U64(sp(off.page_ids)),
                        Arg::U64(sp(off.tile_seq)),
                        Arg::U64(sp(off.tile_q0)),
                        Arg::I32(hq as i32),
                        Arg::I32(l.kv_heads as i32),
                        Arg::I32(l.page_size as i32),
                        Arg::F32(scale),
                    ],
                )
            }
        }
    }
}
