//! Per-head RMS norm and rotary embedding, one fused kernel (`kernels/rope.cu`), and
//! the same fused with a layer's K/V cache write over its qkv projection.

use super::shape_err;
use crate::backend::cuda::{cfg, g, timeline, Arg, CudaBackend, CudaStep, CudaTensor, RowRms};
use crate::backend::{shapes, BackendError};

/// Where [`CudaBackend::qkv_rope_store_raw`] finds and puts one layer's q, k and v.
pub(super) struct QkvRopeStore {
    /// `rows` rows of `row_stride` elements: `q_heads`, then `kv_heads` k, then
    /// `kv_heads` v heads of `head_dim` each.
    pub qkv: u64,
    pub rows: usize,
    pub row_stride: usize,
    pub q_heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// Per-head RMSNorm weights, 0 for none.
    pub q_norm: u64,
    pub k_norm: u64,
    pub pos: u64,
    pub inv_freq: u64,
    pub eps: f32,
    /// `[rows]` cache slots and the layer's `[slot][kv_heads][head_dim]` caches.
    pub slots: u64,
    pub k_cache: u64,
    pub v_cache: u64,
    /// The rows are a product of the raw residual stream (a folded norm,
    /// [`Fold::RowRms`](crate::backend::cuda::Fold)), each first scaled by its norm's
    /// factor and given the product's bias.
    pub row_rms: Option<RowRms>,
}

impl QkvRopeStore {
    /// The kernels' shared run of arguments: q_norm, k_norm, pos, inv_freq, eps, slots
    /// (`qkv_rope_store_*` and `attn_decode_mma_rs_*` take them in this order).
    pub(super) fn norm_rope_args(&self) -> [Arg; 6] {
        [
            Arg::U64(self.q_norm),
            Arg::U64(self.k_norm),
            Arg::U64(self.pos),
            Arg::U64(self.inv_freq),
            Arg::F32(self.eps),
            Arg::U64(self.slots),
        ]
    }
}

impl CudaBackend {
    pub(super) fn head_rms_norm_impl(
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

    pub(super) fn rope_impl(
        &self,
        x: &mut CudaTensor,
        head_dim: usize,
        inv_freq: &CudaTensor,
        step: &CudaStep,
    ) -> Result<(), BackendError> {
        shapes::rope(
            &x.shape,
            head_dim,
            (&inv_freq.shape, inv_freq.numel()),
            step.meta.positions.len(),
        )?;
        // The kernel reads the frequencies in f32, which only a 1-D upload keeps.
        let freq = inv_freq.f32_copy.as_ref().ok_or_else(|| {
            shape_err(
                "rope",
                format!("inv_freq {:?} must be a 1-D upload", inv_freq.shape),
            )
        })?;
        let fp = self.ptr(freq);
        let pos = self.step_ptr(step, step.off.positions);
        self.norm_rope(x, head_dim, 0, pos, fp, 0.0, "rope")
    }

    /// The head_dim-specialised norm/rope kernel.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn norm_rope(
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
    pub(super) fn norm_rope_raw(
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
    /// q/k norm + RoPE and the K/V cache write of one layer in one launch
    /// (`qkv_rope_store_*`): q rotated in place, k and v written to the caches.
    pub(super) fn qkv_rope_store_raw(&self, a: &QkvRopeStore) -> Result<(), BackendError> {
        let d = a.head_dim;
        // The v copy moves 16 bytes a lane from every head start.
        if d == 0 || !d.is_multiple_of(8) || d > 1024 || !a.row_stride.is_multiple_of(8) {
            return Err(BackendError::Unsupported(format!(
                "qkv_attention: head_dim {d}, row stride {}; the kernels need multiples of 8 \
                 and a head_dim up to 1024",
                a.row_stride
            )));
        }
        let heads = a.q_heads + 2 * a.kv_heads;
        if a.rows * heads == 0 {
            return Ok(());
        }
        let mut args = vec![
            Arg::U64(a.qkv),
            Arg::I32(a.rows as i32),
            Arg::I32(a.q_heads as i32),
            Arg::I32(a.kv_heads as i32),
            Arg::I32(a.row_stride as i32),
        ];
        args.extend(a.norm_rope_args());
        args.extend([Arg::U64(a.k_cache), Arg::U64(a.v_cache)]);
        if let Some(RowRms {
            res,
            hidden,
            eps,
            bias,
        }) = a.row_rms
        {
            if !hidden.is_multiple_of(8) {
                return Err(BackendError::Unsupported(format!(
                    "qkv_attention: a folded norm over a residual of width {hidden} (needs a \
                     multiple of 8)"
                )));
            }
            if matches!(d, 64 | 128 | 256) {
                // Runs of four heads a warp. A block a token (its norm factor taken once)
                // where the tokens fill the SMs; else four warps a block and as many blocks
                // a token as its runs need, each taking the factor again.
                let runs = heads.div_ceil(4);
                let (y, warps) = if a.rows >= self.dev.num_sms {
                    (1, runs.min(16))
                } else {
                    (runs.div_ceil(4), 4)
                };
                args.extend([
                    Arg::U64(res),
                    Arg::I32(hidden as i32),
                    Arg::F32(eps),
                    Arg::U64(bias),
                ]);
                timeline::cost(((2 * heads * d + y * hidden) * a.rows * 2) as f64, 0.0);
                return self.launch(
                    &format!("qkv_rope_store_rms_hd{d}"),
                    cfg((g(a.rows), g(y), 1), 32 * warps as u32),
                    &args,
                );
            }
            // Any other head_dim: a block a token takes the factor once, a warp a head.
            args.extend([
                Arg::I32(d as i32),
                Arg::U64(res),
                Arg::I32(hidden as i32),
                Arg::F32(eps),
                Arg::U64(bias),
            ]);
            timeline::cost(((2 * heads * d + hidden) * a.rows * 2) as f64, 0.0);
            return self.launch(
                "qkv_rope_store_rms_generic",
                cfg((g(a.rows), 1, 1), 32 * heads.min(8) as u32),
                &args,
            );
        }
        let (name, per_warp) = if matches!(d, 64 | 128 | 256) {
            match self.rope_heads_per_warp(a.rows * heads) {
                1 => (format!("qkv_rope_store_hd{d}"), 1),
                n => (format!("qkv_rope_store_x{n}_hd{d}"), n),
            }
        } else {
            args.push(Arg::I32(d as i32));
            ("qkv_rope_store_generic".to_string(), 1)
        };
        let warps = a.rows * heads.div_ceil(per_warp);
        // Every head read once and written once (q in place, k and v to the cache).
        timeline::cost((2 * a.rows * heads * d * 2) as f64, 0.0);
        self.launch(&name, cfg((g(warps.div_ceil(4)), 1, 1), 128), &args)
    }

    /// Heads a warp of `qkv_rope_store_hd*` takes for `warp_heads` (rows x heads) of
    /// work: the most of 4 and 2 that still leaves a full wave of warps (64 an SM), else
    /// one. Long prefills then keep several heads' loads in flight a warp, while decode
    /// keeps one head a warp and every SM busy. A count set by hand (1, 2, 4) wins; a
    /// count of 3 runs as 2.
    fn rope_heads_per_warp(&self, warp_heads: usize) -> usize {
        match self.rope_heads.get() {
            0 => {
                let wave = 64 * self.dev.num_sms;
                [4, 2]
                    .into_iter()
                    .find(|&n| warp_heads >= n * wave)
                    .unwrap_or(1)
            }
            n if n >= 4 => 4,
            n if n >= 2 => 2,
            _ => 1,
        }
    }
}
