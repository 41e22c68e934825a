//! Tensors on the device: uploads, copies back, the step's index buffer,
//! column splits and row gathers (`kernels/tensor.cu`).

use crate::backend::cuda::{
    cfg, g, Arg, Buf, CudaBackend, CudaStep, CudaTensor, Fold, StepOffsets,
};
use crate::backend::{shapes, BackendError, DType, HostData, StepMeta};

/// bf16 bytes as they are (no copy) when they are 2-aligned, which host
/// allocations are: a model's weights are ~30 GB at 14B, and copying them once more
/// before the upload was seconds of start-up.
fn bf16_view<'a>(data: &HostData<'a>) -> Option<&'a [u16]> {
    if data.dtype == DType::BF16 && cfg!(target_endian = "little") {
        bytemuck::try_cast_slice(data.bytes).ok()
    } else {
        None
    }
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

impl CudaBackend {
    /// `y += x` in bf16, elementwise (same shapes).
    pub(super) fn add_inplace_impl(
        &self,
        y: &mut CudaTensor,
        x: &CudaTensor,
    ) -> Result<(), BackendError> {
        if y.shape != x.shape {
            return Err(super::shape_err(
                "add_inplace",
                format!("y {:?} x {:?}", y.shape, x.shape),
            ));
        }
        let n = y.numel();
        if n == 0 {
            return Ok(());
        }
        self.launch(
            "add_inplace_bf16",
            cfg((g(n.div_ceil(256)), 1, 1), 256),
            &[
                Arg::U64(self.bf16_ptr(y, "add_inplace")?),
                Arg::U64(self.bf16_ptr(x, "add_inplace")?),
                Arg::I64(n as i64),
            ],
        )
    }

    pub(super) fn upload_impl(
        &self,
        shape: &[usize],
        data: HostData<'_>,
    ) -> Result<CudaTensor, BackendError> {
        shapes::upload(shape, &data)?;
        let buf = match bf16_view(&data) {
            Some(bits) => self.dev.stream.clone_htod(bits)?,
            None => self.dev.stream.clone_htod(&to_bf16_bits(&data))?,
        };
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
            fold: Fold::None,
        })
    }

    pub(super) fn to_host_impl(&self, t: &CudaTensor) -> Result<Vec<f32>, BackendError> {
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

    pub(super) fn alloc_logits_impl(
        &self,
        rows: usize,
        cols: usize,
    ) -> Result<CudaTensor, BackendError> {
        let n = (rows * cols).max(1);
        Ok(CudaTensor {
            shape: vec![rows, cols],
            buf: if self.logits_bf16 {
                Buf::Bf16(self.dev.stream.alloc_zeros::<u16>(n)?)
            } else {
                Buf::F32(self.dev.stream.alloc_zeros::<f32>(n)?)
            },
            f32_copy: None,
            logits_input: false,
            fold: Fold::None,
        })
    }

    pub(super) fn prepare_step_impl(&self, meta: &StepMeta) -> Result<CudaStep, BackendError> {
        let t = meta.num_tokens();
        let s = meta.num_seqs();
        let order = self.prefill_order.get();
        let (ts, tq, wide_tiles) = Self::tiles(meta, order, |_| true);
        let mut h: Vec<i32> =
            Vec::with_capacity(5 * t + 4 * s + meta.page_table.len() + 2 * ts.len() + 8);
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
        let by_context = super::super::decode_order(&meta.kv_lens);
        put!(seq_order, by_context.iter().map(|&x| x as i32));
        let mixed = Self::mixed_tables(meta, order, &by_context).map(|m| {
            let seqs = h.len();
            h.extend(m.seqs.iter().copied());
            let tile_seq = h.len();
            h.extend(m.tile_seq.iter().copied());
            let tile_q0 = h.len();
            h.extend(m.tile_q0.iter().copied());
            super::super::MixedRows {
                seqs,
                decodes: m.seqs.len(),
                max_kv: m.max_kv,
                kv_tokens: m.kv_tokens,
                tile_seq,
                tile_q0,
                num_tiles: m.tile_seq.len(),
                num_wide_tiles: m.num_wide_tiles,
            }
        });
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
            mixed,
        })
    }

    pub(super) fn split_cols_impl(
        &self,
        x: &CudaTensor,
        widths: &[usize],
    ) -> Result<Vec<CudaTensor>, BackendError> {
        let (rows, cols) = shapes::split_cols(&x.shape, widths)?;
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

    pub(super) fn gather_rows_impl(
        &self,
        mut x: CudaTensor,
        step: &CudaStep,
    ) -> Result<CudaTensor, BackendError> {
        let (rows, cols) = x.rows_cols("gather_rows")?;
        let idx = &step.meta.sample_rows;
        if let Some(r) = idx.iter().find(|&&r| r as usize >= rows) {
            return Err(BackendError::InvalidInput(format!("row {r} out of {rows}")));
        }
        // A decode step samples every row: no copy (a launch and its gap a step).
        if crate::backend::every_row(idx, rows) {
            x.logits_input = true;
            return Ok(x);
        }
        let mut out = self.new_bf16(idx.len(), cols)?;
        out.logits_input = true;
        if !idx.is_empty() {
            self.launch(
                "gather_rows",
                cfg((g(idx.len()), 1, 1), 128),
                &[
                    Arg::U64(self.bf16_ptr(&x, "gather_rows")?),
                    Arg::U64(self.step_ptr(step, step.off.sample_rows)),
                    Arg::U64(self.tptr(&out)),
                    Arg::I32(cols as i32),
                ],
            )?;
        }
        Ok(out)
    }
}
