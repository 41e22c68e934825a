//! Matrix products: cuBLAS GEMMs, the skinny decode kernel (`kernels/gemv.cu`) and,
//! past its rows, the Hopper decode GEMM (`ops/gemm.rs`).

use cudarc::cublas::{result as blas, sys as bsys};
use cudarc::driver::LaunchConfig;

use super::shape_err;
use crate::backend::cuda::{
    cfg, g, Arg, Buf, CudaBackend, CudaTensor, Fold, RowRms, GEMV_MAX_ROWS, GEMV_SIMT_MAX_ROWS,
};
use crate::backend::{shapes, BackendError, HostData};

/// Widest output the skinny kernel takes. Measured on the H200 at one row:
/// 5.7 µs against cuBLAS's 11.0 µs for 4096×1024, but 87 µs against 77 µs for
/// the 151936×1024 LM head (docs/results/gpu-2026-11-30-graphs.md).
const GEMV_MAX_COLS: usize = 32_768;

/// Largest weight (bytes) the skinny kernel streams. Timed from graph replays on the
/// H200 (docs/results/gpu-2026-12-02-prologue.md), weights past L2 (50 MB) stream
/// faster through cuBLAS even at one row: Qwen3-14B's down projection (178 MB) 48.9
/// against 57.2 µs, its o projection (52 MB) 15.2 against 17.9; the 0.6B's products
/// (2-13 MB) are the gemv's.
pub const GEMV_MAX_WEIGHT_BYTES: usize = 32 << 20;

/// Fewest rows the tensor-core gemv build takes, but for wide products
/// ([`GEMV_TC_TWO_ROWS_MIN_COLS`]). At two rows the scalar build stays for narrow ones:
/// timed eagerly on the H200 (2026-12-02, docs/results/gpu-2026-12-02-l2.md) the
/// tensor-core build won on Qwen3-0.6B's qkv (5.8 against 7.0 µs) but lost on its down
/// projection (7.1 against 6.2: 1,024 columns make only 128 warps of eight).
const GEMV_TC_MIN_ROWS: usize = 3;

/// Fewest output columns for which the tensor-core build takes two rows too
/// ([`CudaOptions::gemv_tc_two`](crate::backend::cuda::CudaOptions::gemv_tc_two)). Timed in
/// graphs with weights past L2 on an H100 (2026-12-06, part 111 call 1,
/// docs/results/gpu-2026-12-06-rows.md), scalar against tensor-core build at two rows:
/// 1,024 columns 4.6 against 5.6 µs (0.6B o) and 5.8 against 7.4 (0.6B down); 2,048
/// columns 15.0 against 15.0 (1.7B down); 2,560 and more the tensor-core build by 12-25%
/// (4B o 15.3 against 12.6, 0.6B qkv 6.6 against 5.8, gate_up 9.7 against 7.5, Llama-3.1-8B
/// o 21.7 against 16.4). (The tensor-core figures are its three-row times; its cost grows
/// little with the rows.)
const GEMV_TC_TWO_ROWS_MIN_COLS: usize = 2560;

/// Most shared memory (bytes) the norm prologue of `gemv_norm_*` takes for its rows
/// and the norm weight: under the 48 KB a launch gets without opting in.
pub const NORM_PROLOGUE_SMEM: usize = 32 * 1024;

impl CudaBackend {
    pub(super) fn linear_impl(
        &self,
        x: &CudaTensor,
        w: &CudaTensor,
        bias: Option<&CudaTensor>,
    ) -> Result<CudaTensor, BackendError> {
        let (m, k, n) = shapes::linear(
            &x.shape,
            &w.shape,
            bias.map(|b| (b.shape.as_slice(), b.numel())),
        )?;
        // The LM head's product (its input marked by gather_rows): f32 logits unless the
        // backend writes them in bf16.
        let f32_out = x.logits_input && !self.logits_bf16;
        let out = if f32_out {
            CudaTensor {
                shape: vec![m, n],
                buf: Buf::F32(self.alloc_f32(m * n)?),
                f32_copy: None,
                logits_input: false,
                fold: Fold::None,
            }
        } else {
            self.new_bf16(m, n)?
        };
        if m == 0 || n == 0 {
            return Ok(out);
        }
        let (xp, wp) = (self.bf16_ptr(x, "linear")?, self.bf16_ptr(w, "linear")?);
        let bp = match bias {
            Some(b) => self.bf16_ptr(b, "linear")?,
            None => 0,
        };
        if self.use_gemv(m, n, k) {
            self.gemv(xp, wp, bp, self.tptr(&out), m, n, k, f32_out)?;
            return Ok(out);
        }
        let mut beta = 0.0f32;
        if bias.is_some() {
            beta = 1.0;
            self.launch(
                if f32_out {
                    "bcast_rows_f32"
                } else {
                    "bcast_rows_bf16"
                },
                cfg((g(m), 1, 1), 256),
                &[Arg::U64(bp), Arg::U64(self.tptr(&out)), Arg::I32(n as i32)],
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
        self.gemm(xp, wp, self.tptr(&out), m, n, k, f32_out, beta)?;
        Ok(out)
    }

    pub(super) fn linear_into_impl(
        &self,
        x: &CudaTensor,
        w: &CudaTensor,
        out: &mut CudaTensor,
    ) -> Result<(), BackendError> {
        let (m, k, n) = shapes::linear_into(&x.shape, &w.shape, &out.shape)?;
        // alloc_logits' buffer: f32, or bf16 under `logits_bf16`.
        let f32_out = matches!(out.buf, Buf::F32(_));
        if m == 0 || n == 0 || k == 0 {
            return Ok(());
        }
        if self.use_gemv(m, n, k) {
            let (xp, wp) = (
                self.bf16_ptr(x, "linear_into")?,
                self.bf16_ptr(w, "linear_into")?,
            );
            return self.gemv(xp, wp, 0, self.tptr(out), m, n, k, f32_out);
        }
        self.gemm(
            self.bf16_ptr(x, "linear_into")?,
            self.bf16_ptr(w, "linear_into")?,
            self.tptr(out),
            m,
            n,
            k,
            f32_out,
            0.0,
        )
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn gemm(
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
        crate::backend::cuda::timeline::cost(
            ((m * k + n * k) * 2 + m * n * out_bytes) as f64,
            2.0 * (m * n * k) as f64,
        );
        // Row-major Y[m,n] = X[m,k] · W[n,k]ᵀ is column-major Yᵀ = W · Xᵀ with W read transposed.
        // SAFETY: pointers address buffers of the sizes checked by the caller; alpha/beta are
        // host f32 scalars as CUBLAS_COMPUTE_32F requires.
        crate::backend::cuda::timeline::wrap(&self.dev, "cublas_gemm", || unsafe {
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
    /// gemv family failed to build here, and past 8 rows where no tensor-core build
    /// takes `m` rows of this `k`.
    pub(super) fn use_gemv(&self, m: usize, n: usize, k: usize) -> bool {
        (1..=self.gemv_rows.get()).contains(&m)
            && n <= GEMV_MAX_COLS
            && n * k * 2 <= self.gemv_max_weight.get()
            && k.is_multiple_of(8)
            && self.gemv_kernel("gemv_bf16", m, n, k).is_some()
    }

    /// The build of gemv product `base` for `m` rows of `cols` outputs over `k` here: see
    /// [`gemv_build`].
    fn gemv_kernel(
        &self,
        base: &'static str,
        m: usize,
        cols: usize,
        k: usize,
    ) -> Option<&'static str> {
        let tc = match self.gemv_tc.get() && self.dev.cc.0 >= 8 {
            false => Tc::Off,
            true if self.gemv_tc_two.get() => Tc::FromTwoRows,
            true => Tc::On,
        };
        gemv_build(base, m, cols, k, tc, |name| self.dev.kernels.has(name))
    }

    /// How many warps share one unit's reduction (1, 2, 4 or 8) when `kernel` computes
    /// `units` warp-sized units of output (a column, or the tensor-core build's eight),
    /// each over `steps` k steps. At decode sizes the kernel is bound by loads in flight
    /// and by waves, not by bandwidth, so: the widest split whose grid still runs in one
    /// wave (a second, part-empty wave costs a whole DRAM round trip), keeping at least
    /// `min_steps` steps a warp.
    fn gemv_ksplit(&self, kernel: &str, units: usize, steps: usize, min_steps: usize) -> usize {
        let wave_warps = 8 * self.gemv_blocks_per_sm(kernel) * self.dev.num_sms.max(1);
        let mut ks = 1;
        while ks < 8 && units * ks * 2 <= wave_warps && steps / (2 * ks) >= min_steps {
            ks *= 2;
        }
        ks
    }

    /// Blocks of gemv build `kernel` that fit an SM (the driver's answer at load).
    fn gemv_blocks_per_sm(&self, kernel: &str) -> usize {
        self.dev
            .gemv_blocks_per_sm
            .iter()
            .find(|(n, _)| n == kernel)
            .map_or(1, |(_, b)| *b)
    }

    /// The kernel, launch shape and `ksplit` of gemv product `base` with `m` rows and
    /// `cols` output columns over `k`: `GEMV_WARPS / ksplit` units (columns, or the
    /// tensor-core build's groups of eight) a block of 256 threads.
    fn gemv_plan(
        &self,
        base: &'static str,
        m: usize,
        cols: usize,
        k: usize,
    ) -> Result<(&'static str, LaunchConfig, i32), BackendError> {
        // The callers asked use_gemv / norm_in_prologue first, which answer from the
        // same builds: a miss here is a routing bug, refused rather than launched.
        let kernel = self.gemv_kernel(base, m, cols, k).ok_or_else(|| {
            BackendError::Unsupported(format!("{base}: no build takes m={m} rows of k={k}"))
        })?;
        // A warp's unit: one column over 16-byte chunks of k, at least one a lane; or
        // the tensor-core build's eight columns over 32-wide k blocks, at least two.
        let (units, steps, min_steps) = if kernel.ends_with("_tc") {
            (cols.div_ceil(8), k / 32, 2)
        } else {
            (cols, k / 8, 32)
        };
        let ks = self.gemv_ksplit(kernel, units, steps, min_steps);
        Ok((
            kernel,
            cfg((g(units.div_ceil(8 / ks)), 1, 1), 256),
            ks as i32,
        ))
    }

    /// `y[m, n] = x · Wᵀ (+ bias)` through `gemv_bf16`/`gemv_f32`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn gemv(
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
        crate::backend::cuda::timeline::cost(
            ((m * k + n * k) * 2 + m * n * out_bytes) as f64,
            2.0 * (m * n * k) as f64,
        );
        let base = if f32_out { "gemv_f32" } else { "gemv_bf16" };
        let (kernel, c, ks) = self.gemv_plan(base, m, n, k)?;
        self.launch(
            kernel,
            c,
            &[
                Arg::U64(x),
                Arg::U64(w),
                Arg::U64(bias),
                Arg::U64(y),
                Arg::I32(m as i32),
                Arg::I32(n as i32),
                Arg::I32(k as i32),
                Arg::I32(n as i32),
                Arg::I32(ks),
            ],
        )
    }

    /// `silu_mul(x · W_gate_upᵀ)`: at decode sizes one `gemv_silu` launch (the
    /// activation in the product's epilogue), otherwise the product then `silu_mul`.
    pub(super) fn linear_silu_mul_impl(
        &self,
        x: &CudaTensor,
        w: &CudaTensor,
    ) -> Result<CudaTensor, BackendError> {
        let (m, k, n2) = shapes::linear(&x.shape, &w.shape, None)?;
        if m > 0 && n2.is_multiple_of(16) && !x.logits_input && self.use_gemv(m, n2, k) {
            let n = n2 / 2;
            let out = self.new_bf16(m, n)?;
            crate::backend::cuda::timeline::cost(
                ((m * k + n2 * k) * 2 + m * n * 2) as f64,
                2.0 * (m * n2 * k) as f64,
            );
            let (kernel, c, ks) = self.gemv_plan("gemv_silu", m, n, k)?;
            self.launch(
                kernel,
                c,
                &[
                    Arg::U64(self.bf16_ptr(x, "linear_silu_mul")?),
                    Arg::U64(self.bf16_ptr(w, "linear_silu_mul")?),
                    Arg::U64(self.tptr(&out)),
                    Arg::I32(m as i32),
                    Arg::I32(n as i32),
                    Arg::I32(k as i32),
                    Arg::I32(ks),
                ],
            )?;
            return Ok(out);
        }
        let gu = self.linear_impl(x, w, None)?;
        self.silu_mul_impl(&gu)
    }

    /// `residual += x · Wᵀ (+ bias)`, then `rms_norm(residual, norm, eps)`: at decode
    /// sizes the add in the gemv's epilogue (`gemv_residual`) and the norm after it,
    /// otherwise the product then `add_rmsnorm`. Both round as that pair does. (A gemv
    /// whose last block also normalised cost more than the separate norm launch: see
    /// kernels/gemv.cu.)
    pub(super) fn linear_add_rms_norm_impl(
        &self,
        x: &CudaTensor,
        w: &CudaTensor,
        bias: Option<&CudaTensor>,
        residual: &mut CudaTensor,
        norm: &CudaTensor,
        eps: f32,
    ) -> Result<CudaTensor, BackendError> {
        let (m, k, n) = shapes::linear(
            &x.shape,
            &w.shape,
            bias.map(|b| (b.shape.as_slice(), b.numel())),
        )?;
        // Shapes checked before the add, so that a bad norm leaves the residual as it was.
        let fits = residual.shape == [m, n] && norm.numel() == n && n.is_multiple_of(8);
        if m > 0 && fits && !x.logits_input && self.use_gemv(m, n, k) {
            self.linear_add_impl(x, w, bias, residual)?;
            return self.rms_norm_impl(residual, norm, eps);
        }
        let o = self.linear_impl(x, w, bias)?;
        self.add_rms_norm_impl(residual, &o, norm, eps)
    }

    /// Whether the next products should normalise `residual` themselves
    /// ([`Backend::norm_in_prologue`](crate::backend::Backend::norm_in_prologue)): its
    /// rows fit the prologue's shared memory, the prologue kernels were built, and every
    /// consumer weight goes through the gemv kernels (the model asks for qkv and gate_up
    /// apart). Where one goes through cuBLAS, deferring its norm costs a launch: the
    /// product before it adds without the norm (`add_inplace_bf16` after a cuBLAS
    /// product) and the consumer normalises in a launch of its own. The earlier test, a
    /// square hidden x hidden weight within the gemv limit, answered true for
    /// Llama-3.1-8B (4096 x 4096 x 2 bytes is exactly the limit) whose qkv and gate_up
    /// run on cuBLAS: 31 extra launches a batch-1 step (Nsight Compute, 2026-12-04).
    pub(super) fn norm_in_prologue_impl(
        &self,
        residual: &CudaTensor,
        consumers: &[&CudaTensor],
    ) -> bool {
        let &[m, k] = residual.shape.as_slice() else {
            return false;
        };
        let folded = consumers.iter().all(|w| w.fold == Fold::Weight);
        let smem_rows = prologue_smem_rows(m, folded);
        self.norm_prologue.get()
            && (1..=self.gemv_rows.get()).contains(&m)
            && k.is_multiple_of(8)
            && smem_rows * k * 2 <= NORM_PROLOGUE_SMEM
            && matches!(residual.buf, Buf::Bf16(_))
            // Some build for the rows (the consumers' widths pick which, at launch).
            && self.gemv_kernel("gemv_norm_bf16", m, 0, k).is_some()
            && self.gemv_kernel("gemv_norm_silu", m, 0, k).is_some()
            && !consumers.is_empty()
            && consumers.iter().all(|w| match w.shape.as_slice() {
                &[n, kw] => kw == k && self.use_gemv(m, n, k),
                _ => false,
            })
    }

    /// [`Backend::fold_norm`](crate::backend::Backend::fold_norm): with `fold_norms` on,
    /// a bf16 `[n, k]` weight's columns scaled by a `[k]` norm weight in place
    /// (`scale_cols_bf16`, k a multiple of 8), and a unit norm for the model to hold.
    /// The scale is the norm's f32 copy (every 1-D upload keeps one), the weight as
    /// loaded, so g · W is rounded once, as a reference folding in f32 rounds it.
    pub(super) fn fold_norm_impl(
        &self,
        w: &mut CudaTensor,
        norm: &CudaTensor,
    ) -> Result<Option<CudaTensor>, BackendError> {
        let (&[n, k], Some(g32)) = (w.shape.as_slice(), norm.f32_copy.as_ref()) else {
            return Ok(None);
        };
        if !self.fold_norms.get()
            || w.fold != Fold::None
            || n == 0
            || !k.is_multiple_of(8)
            || norm.shape != [k]
            || !matches!(w.buf, Buf::Bf16(_))
            || !matches!(norm.buf, Buf::Bf16(_))
        {
            return Ok(None);
        }
        let vectors = n * k / 8;
        self.launch(
            "scale_cols_bf16",
            cfg((g(vectors.div_ceil(256)), 1, 1), 256),
            &[
                Arg::U64(self.tptr(w)),
                Arg::U64(self.ptr(g32)),
                Arg::I64(vectors as i64),
                Arg::I32(k as i32),
            ],
        )?;
        w.fold = Fold::Weight;
        let mut unit = self.upload_impl(&[k], HostData::f32(&vec![1.0; k]))?;
        unit.fold = Fold::UnitNorm;
        Ok(Some(unit))
    }

    /// [`Backend::norm_in_consumer`](crate::backend::Backend::norm_in_consumer): `w`
    /// holds a folded norm and cuBLAS runs its product at the residual's rows (the gemv
    /// kernels normalise in their prologue instead, `norm_in_prologue`).
    pub(super) fn norm_in_consumer_impl(&self, residual: &CudaTensor, w: &CudaTensor) -> bool {
        match (residual.shape.as_slice(), w.shape.as_slice()) {
            (&[m, k], &[n, kw]) => {
                self.fold_norms.get()
                    && self.fold_defer
                    && w.fold == Fold::Weight
                    && matches!(residual.buf, Buf::Bf16(_))
                    && !residual.logits_input
                    && m > 0
                    && k == kw
                    && k.is_multiple_of(8)
                    && !self.use_gemv(m, n, k)
            }
            _ => false,
        }
    }

    /// The norm weight a `gemv_norm_*` launch over `m` rows gets, and the rows of its
    /// shared memory: a folded norm's unit weight is passed as null, so the kernel scales
    /// the f32 product by each row's factor instead of rounding the normalised rows to
    /// bf16 before a product whose weight was already rounded with g folded in.
    fn prologue_norm(
        &self,
        norm: &CudaTensor,
        m: usize,
        op: &'static str,
    ) -> Result<(u64, usize), BackendError> {
        Ok(match norm.fold {
            Fold::UnitNorm => (0, prologue_smem_rows(m, true)),
            _ => (self.bf16_ptr(norm, op)?, prologue_smem_rows(m, false)),
        })
    }

    /// `linear(rms_norm(x, norm, eps), w, bias)`: at decode sizes one `gemv_norm_bf16`
    /// launch (each block normalises x itself), otherwise the two ops.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn rms_norm_linear_impl(
        &self,
        x: &CudaTensor,
        norm: &CudaTensor,
        eps: f32,
        w: &CudaTensor,
        bias: Option<&CudaTensor>,
    ) -> Result<CudaTensor, BackendError> {
        let (m, k, n) = shapes::linear(
            &x.shape,
            &w.shape,
            bias.map(|b| (b.shape.as_slice(), b.numel())),
        )?;
        if m > 0 && norm.numel() == k && self.norm_in_prologue_impl(x, &[w]) {
            let out = self.new_bf16(m, n)?;
            crate::backend::cuda::timeline::cost(
                ((m * k + n * k + k) * 2 + m * n * 2) as f64,
                2.0 * (m * n * k) as f64,
            );
            let (kernel, mut c, ks) = self.gemv_plan("gemv_norm_bf16", m, n, k)?;
            let (np, smem_rows) = self.prologue_norm(norm, m, "rms_norm_linear")?;
            c.shared_mem_bytes = (smem_rows * k * 2) as u32;
            let bp = match bias {
                Some(b) => self.bf16_ptr(b, "rms_norm_linear")?,
                None => 0,
            };
            self.launch(
                kernel,
                c,
                &[
                    Arg::U64(self.bf16_ptr(x, "rms_norm_linear")?),
                    Arg::U64(np),
                    Arg::F32(eps),
                    Arg::U64(self.bf16_ptr(w, "rms_norm_linear")?),
                    Arg::U64(bp),
                    Arg::U64(self.tptr(&out)),
                    Arg::I32(m as i32),
                    Arg::I32(n as i32),
                    Arg::I32(k as i32),
                    Arg::I32(ks),
                ],
            )?;
            return Ok(out);
        }
        if norm.fold == Fold::UnitNorm && self.norm_in_consumer_impl(x, w) {
            // The product of the residual as it is; its consumer (qkv_attention) scales
            // each row by the norm's factor, then adds the bias: in the product it would
            // be scaled too.
            let mut out = self.linear_impl(x, w, None)?;
            out.fold = Fold::RowRms(RowRms {
                res: self.bf16_ptr(x, "rms_norm_linear")?,
                hidden: k,
                eps,
                bias: match bias {
                    Some(b) => self.bf16_ptr(b, "rms_norm_linear")?,
                    None => 0,
                },
            });
            return Ok(out);
        }
        let normed = self.rms_norm_impl(x, norm, eps)?;
        self.linear_impl(&normed, w, bias)
    }

    /// `linear_silu_mul(rms_norm(x, norm, eps), w)`: at decode sizes one
    /// `gemv_norm_silu` launch, otherwise the norm then [`Self::linear_silu_mul_impl`].
    pub(super) fn rms_norm_linear_silu_mul_impl(
        &self,
        x: &CudaTensor,
        norm: &CudaTensor,
        eps: f32,
        w: &CudaTensor,
    ) -> Result<CudaTensor, BackendError> {
        let (m, k, n2) = shapes::linear(&x.shape, &w.shape, None)?;
        if m > 0
            && n2.is_multiple_of(16)
            && norm.numel() == k
            && self.norm_in_prologue_impl(x, &[w])
        {
            let n = n2 / 2;
            let out = self.new_bf16(m, n)?;
            crate::backend::cuda::timeline::cost(
                ((m * k + n2 * k + k) * 2 + m * n * 2) as f64,
                2.0 * (m * n2 * k) as f64,
            );
            let (kernel, mut c, ks) = self.gemv_plan("gemv_norm_silu", m, n, k)?;
            let (np, smem_rows) = self.prologue_norm(norm, m, "rms_norm_linear_silu_mul")?;
            c.shared_mem_bytes = (smem_rows * k * 2) as u32;
            self.launch(
                kernel,
                c,
                &[
                    Arg::U64(self.bf16_ptr(x, "rms_norm_linear_silu_mul")?),
                    Arg::U64(np),
                    Arg::F32(eps),
                    Arg::U64(self.bf16_ptr(w, "rms_norm_linear_silu_mul")?),
                    Arg::U64(self.tptr(&out)),
                    Arg::I32(m as i32),
                    Arg::I32(n as i32),
                    Arg::I32(k as i32),
                    Arg::I32(ks),
                ],
            )?;
            return Ok(out);
        }
        if n2.is_multiple_of(16) && norm.fold == Fold::UnitNorm && self.norm_in_consumer_impl(x, w)
        {
            // The product of the residual as it is, then SiLU·up of its rows scaled by
            // the norm's factor.
            let gate_up = self.linear_impl(x, w, None)?;
            return self.silu_mul_rms_impl(&gate_up, x, eps);
        }
        let normed = self.rms_norm_impl(x, norm, eps)?;
        self.linear_silu_mul_impl(&normed, w)
    }

    /// `residual += linear(x, w, bias)` (bf16 add, as add_rms_norm rounds it): at decode
    /// sizes one `gemv_residual` launch, otherwise the product then `add_inplace`.
    pub(super) fn linear_add_impl(
        &self,
        x: &CudaTensor,
        w: &CudaTensor,
        bias: Option<&CudaTensor>,
        residual: &mut CudaTensor,
    ) -> Result<(), BackendError> {
        let (m, k, n) = shapes::linear(
            &x.shape,
            &w.shape,
            bias.map(|b| (b.shape.as_slice(), b.numel())),
        )?;
        if residual.shape != [m, n] {
            return Err(shape_err(
                "linear_add",
                format!("residual {:?} for a [{m}, {n}] product", residual.shape),
            ));
        }
        if m == 0 || n == 0 {
            return Ok(());
        }
        let bp = match bias {
            Some(b) => self.bf16_ptr(b, "linear_add")?,
            None => 0,
        };
        if !x.logits_input && self.use_gemv(m, n, k) {
            crate::backend::cuda::timeline::cost(
                ((m * k + n * k) * 2 + 2 * m * n * 2) as f64,
                2.0 * (m * n * k) as f64,
            );
            let (kernel, c, ks) = self.gemv_plan("gemv_residual", m, n, k)?;
            return self.launch(
                kernel,
                c,
                &[
                    Arg::U64(self.bf16_ptr(x, "linear_add")?),
                    Arg::U64(self.bf16_ptr(w, "linear_add")?),
                    Arg::U64(bp),
                    Arg::U64(self.bf16_ptr(residual, "linear_add")?),
                    Arg::I32(m as i32),
                    Arg::I32(n as i32),
                    Arg::I32(k as i32),
                    Arg::I32(ks),
                ],
            );
        }
        if self.fold_norms.get() && bias.is_none() && !x.logits_input {
            // The add in cuBLAS's epilogue (beta = 1), rounded once: with the norms folded
            // this product is the only launch between the attention (or SiLU) and the next
            // product.
            let rp = self.bf16_ptr(residual, "linear_add")?;
            let (xp, wp) = (
                self.bf16_ptr(x, "linear_add")?,
                self.bf16_ptr(w, "linear_add")?,
            );
            return self.gemm(xp, wp, rp, m, n, k, false, 1.0);
        }
        let o = self.linear_impl(x, w, bias)?;
        self.add_inplace_impl(residual, &o)
    }
}

/// Rows of k bf16 the `gemv_norm_*` prologue keeps in shared memory for `m` rows: the
/// rows and the norm weight, or for a folded norm the rows only (its unit weight is
/// never loaded; the kernel gets a null norm).
fn prologue_smem_rows(m: usize, folded: bool) -> usize {
    if folded {
        m
    } else {
        m + 1
    }
}

/// Where the tensor-core gemv build may run: not at all (before sm_80, or turned off),
/// from [`GEMV_TC_MIN_ROWS`] rows, or also at two rows of at least
/// [`GEMV_TC_TWO_ROWS_MIN_COLS`] columns.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Tc {
    Off,
    On,
    FromTwoRows,
}

/// The build of gemv product `base` (`gemv_bf16`, `gemv_f32`, `gemv_silu`,
/// `gemv_residual`, `gemv_norm_bf16`, `gemv_norm_silu`) that takes `m` rows of `cols`
/// outputs over `k`, if one was loaded (`has`): `_m1` (fewer registers, more blocks an
/// SM) for one row; where `tc` allows it for the rows and columns and k is a multiple of
/// 32, the tensor-core build `_tc` (whose cost grows little with the rows) to
/// [`GEMV_MAX_ROWS`]; else the scalar build, unrolled for up to [`GEMV_SIMT_MAX_ROWS`]
/// rows.
fn gemv_build(
    base: &'static str,
    m: usize,
    cols: usize,
    k: usize,
    tc: Tc,
    has: impl Fn(&str) -> bool,
) -> Option<&'static str> {
    macro_rules! builds {
        ($b:literal) => {
            [$b, concat!($b, "_m1"), concat!($b, "_tc")]
        };
    }
    let [simt, m1, tc16] = match base {
        "gemv_bf16" => builds!("gemv_bf16"),
        "gemv_f32" => builds!("gemv_f32"),
        "gemv_silu" => builds!("gemv_silu"),
        "gemv_residual" => builds!("gemv_residual"),
        "gemv_norm_bf16" => builds!("gemv_norm_bf16"),
        "gemv_norm_silu" => builds!("gemv_norm_silu"),
        _ => return None,
    };
    let built = |name: &'static str| has(name).then_some(name);
    let scalar = || (m <= GEMV_SIMT_MAX_ROWS).then(|| built(simt)).flatten();
    let tc_rows = match tc {
        Tc::Off => false,
        Tc::On => m >= GEMV_TC_MIN_ROWS,
        Tc::FromTwoRows => m >= GEMV_TC_MIN_ROWS || (m == 2 && cols >= GEMV_TC_TWO_ROWS_MIN_COLS),
    };
    match m {
        0 => None,
        1 => built(m1),
        _ if tc_rows && k.is_multiple_of(32) => (m <= GEMV_MAX_ROWS)
            .then(|| built(tc16))
            .flatten()
            .or_else(scalar),
        _ => scalar(),
    }
}

#[cfg(test)]
mod tests {
    use super::{gemv_build, Tc, GEMV_TC_TWO_ROWS_MIN_COLS};

    /// The names `kernels/gemv.cu` defines, as the loader lists them.
    fn loaded(name: &str) -> bool {
        crate::backend::cuda::device::kernel_names("gemv")
            .iter()
            .any(|n| n == name)
    }

    #[test]
    fn each_row_count_takes_the_build_made_for_it() {
        let pick = |base, m, k| gemv_build(base, m, 1024, k, Tc::FromTwoRows, loaded);
        assert_eq!(pick("gemv_bf16", 0, 1024), None);
        assert_eq!(pick("gemv_bf16", 1, 1024), Some("gemv_bf16_m1"));
        assert_eq!(pick("gemv_bf16", 2, 1024), Some("gemv_bf16"));
        assert_eq!(pick("gemv_bf16", 3, 1024), Some("gemv_bf16_tc"));
        assert_eq!(pick("gemv_silu", 16, 1024), Some("gemv_silu_tc"));
        assert_eq!(pick("gemv_residual", 16, 3072), Some("gemv_residual_tc"));
        assert_eq!(
            pick("gemv_silu", 17, 1024),
            None,
            "past 16 rows cuBLAS serves"
        );
        assert_eq!(pick("gemv_bf16", 64, 1024), None);
        assert_eq!(pick("gemv_norm_bf16", 16, 1024), Some("gemv_norm_bf16_tc"));
        assert_eq!(pick("gemv_norm_silu", 17, 1024), None);
        assert_eq!(pick("gemv_unknown", 4, 1024), None);
        // Two rows: the tensor-core build from GEMV_TC_TWO_ROWS_MIN_COLS columns, where
        // turned on; k must still be a multiple of 32.
        let two = |cols, k, tc| gemv_build("gemv_silu", 2, cols, k, tc, loaded);
        let wide = GEMV_TC_TWO_ROWS_MIN_COLS;
        assert_eq!(two(wide, 1024, Tc::FromTwoRows), Some("gemv_silu_tc"));
        assert_eq!(two(wide - 1, 1024, Tc::FromTwoRows), Some("gemv_silu"));
        assert_eq!(two(wide, 1000, Tc::FromTwoRows), Some("gemv_silu"));
        assert_eq!(two(wide, 1024, Tc::On), Some("gemv_silu"));
        assert_eq!(two(wide, 1024, Tc::Off), Some("gemv_silu"));
    }

    #[test]
    fn without_tensor_cores_only_the_scalar_builds_serve() {
        // k not a multiple of 32, or tensor cores off: the scalar build to 8 rows.
        assert_eq!(
            gemv_build("gemv_bf16", 8, 1024, 1000, Tc::On, loaded),
            Some("gemv_bf16")
        );
        assert_eq!(gemv_build("gemv_bf16", 9, 1024, 1000, Tc::On, loaded), None);
        assert_eq!(
            gemv_build("gemv_bf16", 5, 1024, 1024, Tc::Off, loaded),
            Some("gemv_bf16")
        );
        assert_eq!(
            gemv_build("gemv_bf16", 24, 1024, 1024, Tc::Off, loaded),
            None
        );
        // A tensor-core build that failed to load falls back where the scalar one fits.
        let no_tc = |n: &str| loaded(n) && !n.ends_with("_tc");
        assert_eq!(
            gemv_build("gemv_bf16", 6, 1024, 1024, Tc::On, no_tc),
            Some("gemv_bf16")
        );
        assert_eq!(gemv_build("gemv_bf16", 12, 1024, 1024, Tc::On, no_tc), None);
    }
}
