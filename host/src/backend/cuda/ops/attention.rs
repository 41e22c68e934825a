//! Attention over the paged KV cache: the simple, decode and prefill kernels
//! (`kernels/attention_*.cu`), and the fused q/k norm, rope, KV store and
//! attention of one layer.

use cudarc::driver::CudaSlice;

use super::kv::check_slots;
use super::rope::QkvRopeStore;
use super::shape_err;
use crate::backend::cuda::device::{DecodeSchedule, PrefillOrder};
use crate::backend::cuda::{
    cfg, g, tma, Arg, CudaBackend, CudaKv, CudaStep, CudaTensor, Fold, MixedRows, PREFILL_TILE,
};
use crate::backend::{AttnParams, BackendError, KvLayout, StepMeta};

/// Which attention path a call takes (for tests and the benchmark).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttnPath {
    Simple,
    /// The CUDA-core split-KV decode kernel.
    Decode,
    /// The tensor-core split-KV decode kernel (GQA groups up to 16 heads).
    DecodeMma,
    /// The tensor-core decode kernel on a stream-K schedule (one wave of equal
    /// ranges of the step's tiles, cut pairs merged by a second kernel).
    DecodeMmaSk,
    /// The portable tensor-core prefill kernel (mma.sync, sm_80+).
    Prefill,
    /// The earlier Hopper prefill kernel (wgmma, sm_90), the fallback.
    PrefillHopper,
    /// The warp-specialised Hopper prefill kernel (sm_90's default).
    PrefillWs,
}

/// What [`CudaBackend::attention_raw`] is told beyond the step.
#[derive(Clone, Copy)]
pub(super) enum Fused<'a> {
    /// Take this path.
    Path(AttnPath),
    /// q is the unrotated qkv row and the new K/V are not cached; the path is the
    /// split-grid tensor-core decode. It finishes them itself (what `qkv_rope_store`
    /// would do) where the fold rule takes its grid ([`DecodeRope::folds`]), else
    /// `qkv_rope_store` runs first.
    ///
    /// [`DecodeRope::folds`]: crate::backend::cuda::device::DecodeRope::folds
    RopeStore(&'a QkvRopeStore),
}

/// One attention call's operands, as `attention_raw` takes them: q's address and row
/// stride, its query heads, the cache layer, the step, the scale and the output.
struct Attend<'a> {
    qp: u64,
    cols: usize,
    hq: usize,
    kv: &'a CudaKv,
    layer: usize,
    step: &'a CudaStep,
    scale: f32,
    op: u64,
}

/// What [`CudaBackend::mixed_tables`] finds, before it goes into the step's array.
#[derive(Debug, PartialEq)]
pub(super) struct MixedTables {
    pub seqs: Vec<i32>,
    pub max_kv: usize,
    pub kv_tokens: usize,
    pub tile_seq: Vec<i32>,
    pub tile_q0: Vec<i32>,
    pub num_wide_tiles: usize,
}

impl CudaBackend {
    pub(super) fn attention_impl(
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

    pub(super) fn qkv_attention_impl(
        &self,
        qkv: CudaTensor,
        kv: &mut CudaKv,
        layer: usize,
        step: &CudaStep,
        p: &AttnParams<'_, CudaTensor>,
    ) -> Result<CudaTensor, BackendError> {
        let (rows, cols) = qkv.rows_cols("qkv_attention")?;
        let base = self.bf16_ptr(&qkv, "qkv_attention")?;
        let mut rs = self.rope_store_args(base, &qkv.shape, kv, layer, step, p)?;
        if let Fold::RowRms(r) = qkv.fold {
            rs.row_rms = Some(r);
        }
        if rows == 0 {
            return self.new_bf16(0, p.q_heads * p.head_dim);
        }
        // The split-grid tensor-core decode may take qkv_rope_store's work
        // (attention_raw decides, by its grid); every other path runs it first.
        let how = match self.attention_path(step, p.head_dim, p.q_heads / p.kv_heads) {
            AttnPath::DecodeMma => Fused::RopeStore(&rs),
            path => {
                self.qkv_rope_store_raw(&rs)?;
                Fused::Path(path)
            }
        };
        // qkv is dropped after this: freed in stream order, after the kernels.
        self.attend_qkv(base, (rows, cols), kv, layer, step, p, how)
    }

    /// The attention over the q columns of the qkv rows at `qkv` (`[rows, cols]`), told
    /// `how`, into a new `[rows, q_heads · head_dim]` tensor.
    #[allow(clippy::too_many_arguments)]
    fn attend_qkv(
        &self,
        qkv: u64,
        (rows, cols): (usize, usize),
        kv: &CudaKv,
        layer: usize,
        step: &CudaStep,
        p: &AttnParams<'_, CudaTensor>,
        how: Fused<'_>,
    ) -> Result<CudaTensor, BackendError> {
        let out = self.new_bf16(rows, p.q_heads * p.head_dim)?;
        let op = self.tptr(&out);
        let (hq, scale) = (p.q_heads, p.scale);
        self.attention_raw(qkv, cols, rows, hq, kv, layer, step, scale, op, Some(how))?;
        Ok(out)
    }

    /// What `qkv_rope_store` and the kernels that take its work need for the qkv rows
    /// at `qkv` (`shape` `[rows, (q_heads + 2 kv_heads) · head_dim]`), after checking
    /// them against the cache, the step and the parameters.
    fn rope_store_args(
        &self,
        qkv: u64,
        shape: &[usize],
        kv: &CudaKv,
        layer: usize,
        step: &CudaStep,
        p: &AttnParams<'_, CudaTensor>,
    ) -> Result<QkvRopeStore, BackendError> {
        let l = kv.layout;
        let d = p.head_dim;
        let &[rows, cols] = shape else {
            return Err(shape_err(
                "qkv_attention",
                format!("qkv {shape:?} must be 2-D"),
            ));
        };
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
                    "qkv {shape:?} for {}q/{}kv x {d}, layer {layer}, cache {l:?}, {} tokens, page size {}",
                    p.q_heads,
                    p.kv_heads,
                    step.meta.num_tokens(),
                    step.meta.page_size
                ),
            ));
        }
        if rows > 0 {
            check_slots(l, step)?;
        }
        let freq = p.inv_freq.f32_copy.as_ref().ok_or_else(|| {
            shape_err(
                "qkv_attention",
                format!("inv_freq {:?} must be a 1-D upload", p.inv_freq.shape),
            )
        })?;
        // The reference normalises q and k only when both weights are given.
        let (qw, kw) = match (p.q_norm, p.k_norm) {
            (Some(qn), Some(kn)) => {
                if qn.numel() != d || kn.numel() != d {
                    return Err(shape_err(
                        "qkv_attention",
                        format!("q/k norm {:?}/{:?}, head_dim {d}", qn.shape, kn.shape),
                    ));
                }
                (
                    self.bf16_ptr(qn, "qkv_attention")?,
                    self.bf16_ptr(kn, "qkv_attention")?,
                )
            }
            _ => (0, 0),
        };
        // q normed and rotated, k normed, rotated and written to the cache, v copied
        // to the cache.
        Ok(QkvRopeStore {
            qkv,
            rows,
            row_stride: cols,
            q_heads: p.q_heads,
            kv_heads: p.kv_heads,
            head_dim: d,
            q_norm: qw,
            k_norm: kw,
            pos: self.step_ptr(step, step.off.positions),
            inv_freq: self.ptr(freq),
            eps: p.eps,
            slots: self.step_ptr(step, step.off.slots),
            k_cache: self.ptr(&kv.k[layer]),
            v_cache: self.ptr(&kv.v[layer]),
            row_rms: None,
        })
    }

    /// Prefill tiles: (sequence, first new-token row) per 64-row tile, and how
    /// many of them lead the list as the 128-row tiles of the Hopper kernels.
    ///
    /// Tiles starting at a multiple of 128 come first. Both Hopper kernels walk the
    /// list backwards to start the longest causal spans first, so within a sequence
    /// each group runs shortest span first; `order` decides the sequences' order
    /// ([`PrefillOrder`]). The portable kernel runs the whole list in any order.
    pub(super) fn tiles(
        meta: &StepMeta,
        order: PrefillOrder,
        keep: impl Fn(usize) -> bool,
    ) -> (Vec<i32>, Vec<i32>, usize) {
        let mut seqs: Vec<usize> = (0..meta.num_seqs()).filter(|&s| keep(s)).collect();
        if order == PrefillOrder::Seqs {
            // Stable: sequences of equal length keep the batch's order.
            seqs.sort_by_key(|&s| meta.kv_lens[s]);
        }
        let (mut wide, mut odd) = (Vec::new(), Vec::new());
        for s in seqs {
            let n = (meta.q_indptr[s + 1] - meta.q_indptr[s]) as usize;
            let prefix = (meta.kv_lens[s] as usize).saturating_sub(n);
            let mut q0 = 0;
            while q0 < n {
                // Context rows the tile's last row attends to (its 128-row pair's for
                // the wide tiles).
                let (group, span) = if q0 % (2 * PREFILL_TILE) == 0 {
                    (&mut wide, 2 * PREFILL_TILE)
                } else {
                    (&mut odd, PREFILL_TILE)
                };
                group.push((prefix + (q0 + span).min(n), s as i32, q0 as i32));
                q0 += PREFILL_TILE;
            }
        }
        if order == PrefillOrder::Tiles {
            // Stable: equal spans keep the batch's order.
            wide.sort_by_key(|t| t.0);
            odd.sort_by_key(|t| t.0);
        }
        let n_wide = wide.len();
        let (ts, tq) = wide
            .into_iter()
            .chain(odd)
            .map(|(_, s, q0)| (s, q0))
            .unzip();
        (ts, tq, n_wide)
    }

    /// A mixed step's tables ([`MixedRows`](crate::backend::cuda::MixedRows)): its
    /// one-token sequences longest context first (`by_context`: the step's sequences in
    /// that order, [`decode_order`](crate::backend::cuda::decode_order)), their longest
    /// context and K/V rows, and the prefill tile table over the other sequences. None
    /// unless the step has both kinds.
    pub(super) fn mixed_tables(
        meta: &StepMeta,
        order: PrefillOrder,
        by_context: &[u32],
    ) -> Option<MixedTables> {
        let one_token = |i: usize| meta.q_indptr[i + 1] - meta.q_indptr[i] == 1;
        let seqs: Vec<i32> = by_context
            .iter()
            .filter(|&&i| one_token(i as usize))
            .map(|&i| i as i32)
            .collect();
        if seqs.is_empty() || seqs.len() == meta.num_seqs() {
            return None;
        }
        let ctx = |i: &i32| meta.kv_lens[*i as usize] as usize;
        let (tile_seq, tile_q0, num_wide_tiles) = Self::tiles(meta, order, |i| !one_token(i));
        Some(MixedTables {
            max_kv: ctx(&seqs[0]),
            kv_tokens: seqs.iter().map(ctx).sum(),
            seqs,
            tile_seq,
            tile_q0,
            num_wide_tiles,
        })
    }

    /// Blocks of the split-grid tensor-core decode resident at once (blocks per SM x SMs).
    fn mma_decode_slots(&self, head_dim: usize) -> usize {
        self.dev.num_sms * self.dev.mma_blocks_per_sm[usize::from(head_dim == 128)]
    }

    /// Fewest context rows a split of a decode launch over `seqs` sequences takes: the
    /// tensor-core grid whose unsplit blocks already fill every resident slot takes
    /// [`CudaOptions::decode_full_part`](crate::backend::cuda::CudaOptions::decode_full_part),
    /// everything else `decode_min_part`. A kernel argument (the combine's too), so a
    /// recorded graph keeps short contexts whole and splits long ones at replay.
    pub(crate) fn decode_part_rows(
        &self,
        mma: bool,
        seqs: usize,
        kv_heads: usize,
        head_dim: usize,
    ) -> usize {
        let min = self.decode_min_part.get();
        if mma && seqs * kv_heads >= self.mma_decode_slots(head_dim) {
            min.max(self.decode_full_part.get())
        } else {
            min
        }
    }

    /// Decode splits so that the grid fills the device a few times over, each of at
    /// least `part` rows.
    pub(crate) fn decode_splits(
        &self,
        seqs: usize,
        kv_heads: usize,
        head_chunks: usize,
        max_kv: usize,
        part: usize,
    ) -> usize {
        let base = (seqs * kv_heads * head_chunks).max(1);
        let want = (4 * self.dev.num_sms)
            .div_ceil(base)
            .max(self.decode_min_splits.get());
        want.clamp(1, max_decode_splits(max_kv, part))
    }

    /// Splits of the split-grid tensor-core decode: under two waves of blocks
    /// (`slots` = blocks per SM x SMs), the count whose blocks fill their last wave
    /// best, so a few long contexts do not leave a wave mostly empty (8 x 16384 on
    /// 396 slots: 9 splits make 576 blocks, 1.45 waves; 6 make one full wave). At
    /// two waves and more the tail is cheap (its blocks run with the bandwidth to
    /// themselves; at 256 x 1100 two splits were 4% slower than one) and the rule
    /// above applies. Opt-in (`MINISGL_DECODE_SPLITS=waves`): measured on the H200
    /// (Qwen3-0.6B, context 256) it gave -3.5% at batch 8 and +2.5% at batch 64.
    pub(crate) fn decode_mma_splits(
        &self,
        seqs: usize,
        kv_heads: usize,
        head_dim: usize,
        max_kv: usize,
        part: usize,
    ) -> usize {
        let fill = self.decode_splits(seqs, kv_heads, 1, max_kv, part);
        if !self.decode_wave_splits.get() {
            return fill;
        }
        let cap = max_decode_splits(max_kv, part);
        let slots = self.mma_decode_slots(head_dim);
        let (min, limit) = (self.decode_min_splits.get(), self.decode_wave_limit);
        wave_splits(seqs * kv_heads, slots, cap, min, limit).unwrap_or(fill)
    }

    /// Merges the split-KV partials of either decode kernel into `op`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn decode_combine(
        &self,
        o_part: &CudaSlice<f32>,
        lse: &CudaSlice<f32>,
        step: &CudaStep,
        op: u64,
        hq: usize,
        d: usize,
        splits: usize,
        part: usize,
        sub: Option<&MixedRows>,
    ) -> Result<(), BackendError> {
        let off = step.off;
        let s = sub.map_or(step.meta.num_seqs(), |m| m.decodes);
        let seqs = sub.map_or(0, |m| self.step_ptr(step, m.seqs));
        // A thread a dim, up to 128 (the kernel loops over the rest).
        self.launch(
            "attn_decode_combine",
            cfg((s as u32, hq as u32, 1), d.clamp(32, 128) as u32),
            &[
                Arg::U64(self.ptr(o_part)),
                Arg::U64(self.ptr(lse)),
                Arg::U64(self.step_ptr(step, off.q_start)),
                Arg::U64(self.step_ptr(step, off.kv_len)),
                Arg::U64(op),
                Arg::I32(hq as i32),
                Arg::I32(d as i32),
                Arg::I32(splits as i32),
                Arg::I32(part as i32),
                Arg::U64(seqs),
            ],
        )
    }

    /// The path `attention` would take for this step, head_dim and GQA group
    /// (query heads per kv head).
    pub fn attention_path(&self, step: &CudaStep, head_dim: usize, group: usize) -> AttnPath {
        if !self.dev.flash || !matches!(head_dim, 64 | 128) {
            AttnPath::Simple
        } else if step.decode_only
            && self.dev.decode_kernel.uses_mma(group)
            && step.meta.page_size.is_power_of_two()
        {
            if self.dev.decode_schedule == DecodeSchedule::Stream {
                AttnPath::DecodeMmaSk
            } else {
                AttnPath::DecodeMma
            }
        } else if step.decode_only {
            AttnPath::Decode
        } else if self.dev.ws_prefill {
            AttnPath::PrefillWs
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
            force.map(Fused::Path),
        )
    }

    /// Attention of `hq` query heads read at `qp` (rows `cols` elements apart,
    /// so q may be a column block of the fused qkv tensor) into `[rows, hq · D]` at `op`.
    /// `how`: a forced path (tests compare paths), or the q/k norm, RoPE and K/V store
    /// still to do (then `qp` is the qkv row and the path the split-grid tensor-core
    /// decode, whose `_rs` build does them).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn attention_raw(
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
        how: Option<Fused<'_>>,
    ) -> Result<(), BackendError> {
        let l = kv.layout;
        let d = l.head_dim;
        let group = hq / l.kv_heads;
        let (force, rope_store) = match how {
            Some(Fused::Path(p)) => (Some(p), None),
            Some(Fused::RopeStore(rs)) => (Some(AttnPath::DecodeMma), Some(rs)),
            None => (None, None),
        };
        let path = force.unwrap_or_else(|| self.attention_path(step, d, group));
        let kc = self.ptr(&kv.k[layer]);
        let vc = self.ptr(&kv.v[layer]);
        let sp = |o: usize| self.step_ptr(step, o);
        let off = step.off;
        let s = step.meta.num_seqs();
        // A mixed step's one-token sequences go to the tensor-core decode where it
        // applies (MixedRows), and the prefill kernels take the table without them.
        let prefill = matches!(
            path,
            AttnPath::PrefillWs | AttnPath::PrefillHopper | AttnPath::Prefill
        );
        let mixed = step.mixed.as_ref().filter(|_| {
            prefill
                && matches!(d, 64 | 128)
                && self.mixed_split.get()
                && self.dev.decode_kernel.uses_mma(group)
                && l.page_size.is_power_of_two()
        });
        let (tile_seq, tile_q0, num_tiles, num_wide_tiles) = match mixed {
            Some(m) => (m.tile_seq, m.tile_q0, m.num_tiles, m.num_wide_tiles),
            None => (
                off.tile_seq,
                off.tile_q0,
                step.num_tiles,
                step.num_wide_tiles,
            ),
        };
        let at = Attend {
            qp,
            cols,
            hq,
            kv,
            layer,
            step,
            scale,
            op,
        };
        if let Some(m) = mixed {
            self.split_decode(&at, true, None, Some(m))?;
        }
        // The prefill kernels' common signature (attention_prefill*.cu); the Hopper
        // ones also take the count of their 128-row tiles.
        let prefill_args = |wide_tiles: Option<usize>| {
            let mut a = vec![
                Arg::U64(qp),
                Arg::I32(cols as i32),
                Arg::U64(op),
                Arg::U64(kc),
                Arg::U64(vc),
                Arg::U64(sp(off.q_start)),
                Arg::U64(sp(off.kv_len)),
                Arg::U64(sp(off.page_start)),
                Arg::U64(sp(off.page_ids)),
                Arg::U64(sp(tile_seq)),
                Arg::U64(sp(tile_q0)),
            ];
            if let Some(n) = wide_tiles {
                a.push(Arg::I32(n as i32));
            }
            a.extend([
                Arg::I32(hq as i32),
                Arg::I32(l.kv_heads as i32),
                Arg::I32(l.page_size as i32),
                Arg::F32(scale),
            ]);
            a
        };
        // What every decode kernel needs; the tensor-core ones (either schedule) take
        // the whole group as mma rows.
        let tensor_core = matches!(path, AttnPath::DecodeMma | AttnPath::DecodeMmaSk);
        let decode = tensor_core || path == AttnPath::Decode;
        if decode
            && (!step.decode_only
                || !matches!(d, 64 | 128)
                || (tensor_core && (!(1..=16).contains(&group) || !l.page_size.is_power_of_two())))
        {
            return Err(BackendError::Unsupported(if tensor_core {
                format!(
                    "tensor-core decode needs one token per sequence, head_dim 64/128, at most 16 query heads per kv head and a power-of-two page size (got {group} heads per kv head, page size {})",
                    l.page_size
                )
            } else {
                "decode kernel needs one token per sequence and head_dim 64/128".into()
            }));
        }
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
                self.split_decode(&at, path == AttnPath::DecodeMma, rope_store, None)
            }
            AttnPath::DecodeMmaSk => {
                let name = format!("attn_decode_mma_sk_hd{d}");
                // One wave; blocks past the step's tiles return at once.
                let blocks = (self.dev.num_sms * self.dev.sk_blocks_per_sm[usize::from(d == 128)])
                    .max(l.kv_heads);
                let o_part = self.alloc_f32(blocks * 2 * 16 * d)?;
                let lse = self.alloc_f32(blocks * 2 * 16)?;
                // SAFETY: every block writes its record before the combine reads it.
                let rec = unsafe { self.dev.stream.alloc::<i32>(blocks * 4) }?;
                self.decode_cost(step, None, hq, l);
                let mut c = cfg((g(blocks), 1, 1), 128);
                c.shared_mem_bytes =
                    crate::backend::cuda::device::dynamic_smem(&name).unwrap_or(0) as u32;
                self.launch(
                    &name,
                    c,
                    &[
                        self.decode_args(&at),
                        vec![
                            Arg::I32(s as i32),
                            Arg::U64(self.ptr(&o_part)),
                            Arg::U64(self.ptr(&lse)),
                            Arg::U64(self.ptr(&rec)),
                            Arg::U64(op),
                        ],
                    ]
                    .concat(),
                )?;
                self.launch(
                    "attn_decode_sk_combine",
                    cfg((g(blocks), 1, 1), 128),
                    &[
                        Arg::U64(self.ptr(&o_part)),
                        Arg::U64(self.ptr(&lse)),
                        Arg::U64(self.ptr(&rec)),
                        Arg::U64(sp(off.q_start)),
                        Arg::U64(op),
                        Arg::I32(hq as i32),
                        Arg::I32(l.kv_heads as i32),
                        Arg::I32(d as i32),
                    ],
                )
            }
            AttnPath::PrefillHopper | AttnPath::PrefillWs => {
                if num_wide_tiles == 0 {
                    return Ok(());
                }
                let ws = path == AttnPath::PrefillWs;
                let name = if ws && tma::kv_pages_fit(l.page_size) {
                    format!("attn_prefill_ws_hd{d}")
                } else if ws {
                    format!("attn_prefill_ws_gather_hd{d}")
                } else {
                    format!("attn_prefill_sm90_hd{d}")
                };
                let smem = crate::backend::cuda::device::dynamic_smem(&name).ok_or_else(|| {
                    BackendError::Unsupported(format!("{path:?} kernel head_dim {d}"))
                })?;
                // The default kernel: a block per (128-row tile, head). The ws one is
                // persistent: a block per SM (its shared memory allows no more), each
                // drawing work items (tile, head) from the device's counter.
                let mut c = if ws {
                    let items = num_wide_tiles * hq;
                    cfg((g(items.min(self.dev.num_sms.max(1))), 1, 1), 384)
                } else {
                    cfg((g(num_wide_tiles), hq as u32, 1), 256)
                };
                c.shared_mem_bytes = smem as u32;
                let mut args = prefill_args(Some(num_wide_tiles));
                if ws {
                    args.push(Arg::U64(self.ptr(&self.dev.prefill_work)));
                    args.push(Arg::U64(
                        self.dev.watchdog.as_ref().map_or(0, |w| w.device_ptr()),
                    ));
                    // K/V tiles come through the copy engine by page chunk (the
                    // gather build for pages of under 8 rows takes the same
                    // arguments and ignores the maps).
                    let row = l.kv_heads * d;
                    let slots = kv.k[layer].len() / row;
                    for cache in [kc, vc] {
                        args.push(Arg::Map(tma::kv_cache_map(cache, slots, row, l.page_size)?));
                    }
                }
                self.prefill_cost(step, mixed, hq, l);
                self.launch(&name, c, &args)
            }
            AttnPath::Prefill => {
                if !matches!(d, 64 | 128) {
                    return Err(BackendError::Unsupported(format!(
                        "prefill kernel head_dim {d}"
                    )));
                }
                self.prefill_cost(step, mixed, hq, l);
                self.launch(
                    &format!("attn_prefill_hd{d}"),
                    cfg((g(num_tiles), hq as u32, 1), 128),
                    &prefill_args(None),
                )
            }
        }
    }

    /// The decode kernels' common leading arguments (attention_decode.cu).
    fn decode_args(&self, at: &Attend<'_>) -> Vec<Arg> {
        let l = at.kv.layout;
        let sp = |o: usize| self.step_ptr(at.step, o);
        let off = at.step.off;
        vec![
            Arg::U64(at.qp),
            Arg::I32(at.cols as i32),
            Arg::U64(self.ptr(&at.kv.k[at.layer])),
            Arg::U64(self.ptr(&at.kv.v[at.layer])),
            Arg::U64(sp(off.q_start)),
            Arg::U64(sp(off.kv_len)),
            Arg::U64(sp(off.page_start)),
            Arg::U64(sp(off.page_ids)),
            Arg::I32(at.hq as i32),
            Arg::I32(l.kv_heads as i32),
            Arg::I32(l.page_size as i32),
            Arg::F32(at.scale),
        ]
    }

    /// The decode floor for the timeline: each sequence's K and V read once, q read and
    /// o written (`sub`: a mixed step's one-token sequences only).
    fn decode_cost(&self, step: &CudaStep, sub: Option<&MixedRows>, hq: usize, l: KvLayout) {
        if !crate::backend::cuda::timeline::is_on() {
            return;
        }
        let m = &step.meta;
        let (seqs, kv_tokens) = match sub {
            Some(r) => (r.decodes, r.kv_tokens),
            None => (m.num_seqs(), m.kv_lens.iter().map(|&x| x as usize).sum()),
        };
        let d = l.head_dim;
        crate::backend::cuda::timeline::cost(
            (kv_tokens * l.kv_heads * d * 2 * 2 + 2 * seqs * hq * d * 2) as f64,
            (4 * kv_tokens * hq * d) as f64,
        );
    }

    /// The prefill floor for the timeline: every new row's causal dot products with
    /// its keys and values (`sub`: without a mixed step's one-token sequences, which
    /// the decode took), its q read and o written, each sequence's K and V read once.
    fn prefill_cost(&self, step: &CudaStep, sub: Option<&MixedRows>, hq: usize, l: KvLayout) {
        if !crate::backend::cuda::timeline::is_on() {
            return;
        }
        let m = &step.meta;
        let (mut pairs, mut rows, mut kv_tokens) = (0usize, 0usize, 0usize);
        for (s, &kv) in m.kv_lens.iter().enumerate() {
            let (kv, q) = (kv as usize, (m.q_indptr[s + 1] - m.q_indptr[s]) as usize);
            if sub.is_some() && q == 1 {
                continue;
            }
            // Rows attend kv - q + 1 ..= kv keys.
            pairs += q * kv - q * q.saturating_sub(1) / 2;
            rows += q;
            kv_tokens += kv;
        }
        let d = l.head_dim;
        crate::backend::cuda::timeline::cost(
            (kv_tokens * l.kv_heads * d * 2 * 2 + 2 * rows * hq * d * 2) as f64,
            (4 * pairs * hq * d) as f64,
        );
    }

    /// The split-grid decode (the tensor-core build if `mma`, else the CUDA-core one)
    /// into `at.op`: over every sequence of a decode step, or over a mixed step's one-token
    /// sequences (`sub`; tensor-core only, their q rows already rotated and their K/V
    /// cached). `rope_store`: a decode step's q/k norm, RoPE and K/V store still to do,
    /// folded in where the rule takes the grid.
    fn split_decode(
        &self,
        at: &Attend<'_>,
        mma: bool,
        rope_store: Option<&QkvRopeStore>,
        sub: Option<&MixedRows>,
    ) -> Result<(), BackendError> {
        let (hq, step) = (at.hq, at.step);
        let l = at.kv.layout;
        let d = l.head_dim;
        let group = hq / l.kv_heads;
        // The CUDA-core kernel covers a group in chunks of up to 8 heads;
        // the tensor-core one takes the whole group (up to 16) as mma rows.
        let gmax = match group {
            1 => 1,
            2 => 2,
            3 | 4 => 4,
            _ => 8,
        };
        let head_chunks = if mma { 1 } else { group.div_ceil(gmax) };
        let (s, max_kv) = match sub {
            Some(m) => (m.decodes, m.max_kv),
            None => (
                step.meta.num_seqs(),
                step.max_kv_hint.unwrap_or(step.meta.max_kv_len() as usize),
            ),
        };
        let part = self.decode_part_rows(mma, s, l.kv_heads, d);
        let splits = if mma {
            self.decode_mma_splits(s, l.kv_heads, d, max_kv, part)
        } else {
            self.decode_splits(s, l.kv_heads, head_chunks, max_kv, part)
        };
        // The fold only where the rule takes this grid; otherwise the q/k norm,
        // RoPE and K/V store go first, as their own launch.
        let folds = |blocks| {
            self.decode_rope
                .get()
                .folds(blocks, self.mma_decode_slots(d))
        };
        let rope_store = match rope_store {
            // The folded build has no place for a folded input norm's factor.
            Some(rs) if rs.row_rms.is_some() || !folds(splits * l.kv_heads * s) => {
                self.qkv_rope_store_raw(rs)?;
                None
            }
            rs => rs,
        };
        let name = if mma {
            let rs = if rope_store.is_some() { "rs_" } else { "" };
            format!("attn_decode_mma_{rs}hd{d}")
        } else {
            format!("attn_decode_hd{d}_g{gmax}")
        };
        // One split: the kernel writes the output itself, no partials. Partials are
        // indexed by the sequence's place in the whole step.
        let direct = splits == 1;
        let part_rows = if direct {
            0
        } else {
            step.meta.num_seqs() * hq * splits
        };
        let o_part = self.alloc_f32(part_rows * d)?;
        let lse = self.alloc_f32(part_rows)?;
        self.decode_cost(step, sub, hq, l);
        let mut args = self.decode_args(at);
        args.push(Arg::I32(part as i32));
        if !mma {
            args.push(Arg::I32(head_chunks as i32));
        }
        args.push(Arg::U64(self.ptr(&o_part)));
        args.push(Arg::U64(self.ptr(&lse)));
        args.push(Arg::U64(if direct { at.op } else { 0 }));
        if mma {
            let order = match sub {
                Some(m) => self.step_ptr(step, m.seqs),
                None if self.decode_order.get() => self.step_ptr(step, step.off.seq_order),
                None => 0,
            };
            args.push(Arg::U64(order));
        }
        if let Some(rs) = rope_store {
            args.extend(rs.norm_rope_args());
        }
        let mut c = cfg(
            (splits as u32, (l.kv_heads * head_chunks) as u32, s as u32),
            128,
        );
        c.shared_mem_bytes = crate::backend::cuda::device::dynamic_smem(&name).unwrap_or(0) as u32;
        self.launch(&name, c, &args)?;
        if direct {
            return Ok(());
        }
        self.decode_combine(&o_part, &lse, step, at.op, hq, d, splits, part, sub)
    }
}

/// Most splits a decode launch over contexts up to `max_kv` rows takes: at least
/// `min_part` rows a split ([`crate::backend::cuda::CudaOptions::decode_min_part`]), at
/// most 256 (the combines' shared weights).
fn max_decode_splits(max_kv: usize, min_part: usize) -> usize {
    max_kv.div_ceil(min_part.max(1)).clamp(1, 256)
}

/// The wave rule of [`CudaBackend::decode_mma_splits`] for `base` blocks a split on
/// `slots` resident blocks, `min..=cap` splits allowed: None at `limit` waves and
/// more (2 by default). Among the counts up to four waves a split, the fewest whose
/// last wave is fullest (a count must beat the best so far by 2% of the slots: each
/// split costs a partial write and a share of the combine).
pub(crate) fn wave_splits(
    base: usize,
    slots: usize,
    cap: usize,
    min: usize,
    limit: usize,
) -> Option<usize> {
    let (base, slots) = (base.max(1), slots.max(1));
    if base >= limit * slots {
        return None;
    }
    let eff = |s: usize| {
        let blocks = base * s;
        blocks as f64 / (blocks.div_ceil(slots) * slots) as f64
    };
    let first = min.clamp(1, cap.max(1));
    let mut best = first;
    for s in first..=cap.min(4 * slots.div_ceil(base)) {
        if eff(s) > eff(best) + 0.02 {
            best = s;
        }
    }
    Some(best)
}

#[cfg(test)]
mod tests {
    use super::wave_splits;
    use crate::backend::cuda::device::PrefillOrder;
    use crate::backend::cuda::CudaBackend;
    use crate::backend::StepMeta;

    /// A step of (prefix, new tokens) per sequence; only what `tiles` reads.
    fn step(seqs: &[(u32, u32)]) -> StepMeta {
        let mut m = StepMeta {
            q_indptr: vec![0],
            ..Default::default()
        };
        for &(p, n) in seqs {
            m.q_indptr.push(m.q_indptr.last().unwrap() + n);
            m.kv_lens.push(p + n);
        }
        m
    }

    /// The (sequence, row) pairs of a tile list, sorted: what every order must cover.
    fn tile_set(ts: &[i32], tq: &[i32]) -> Vec<(i32, i32)> {
        let mut v: Vec<_> = ts.iter().copied().zip(tq.iter().copied()).collect();
        v.sort();
        v
    }

    #[test]
    fn prefill_tile_orders_start_the_longest_spans() {
        // Sequence 0 extends a 6,000-token prefix by 200; sequence 1 is 300 fresh tokens.
        let m = step(&[(6000, 200), (0, 300)]);
        // The batch's order: wide tiles (q0 % 128 == 0) of 0 then 1, then the others.
        let (ts, tq, wide) = CudaBackend::tiles(&m, PrefillOrder::Batch, |_| true);
        assert_eq!(wide, 5);
        assert_eq!(ts, vec![0, 0, 1, 1, 1, 0, 0, 1, 1]);
        assert_eq!(tq, vec![0, 128, 0, 128, 256, 64, 192, 64, 192]);
        let all = tile_set(&ts, &tq);
        // By sequence and by tile alike, sequence 0's tiles, which attend to the whole
        // prefix, end each group, so the kernels (which walk the list backwards) start
        // them.
        for order in [PrefillOrder::Seqs, PrefillOrder::Tiles] {
            let (ts, tq, wide) = CudaBackend::tiles(&m, order, |_| true);
            assert_eq!(wide, 5, "{order:?}");
            assert_eq!(ts, vec![1, 1, 1, 0, 0, 1, 1, 0, 0], "{order:?}");
            assert_eq!(tq, vec![0, 128, 256, 0, 128, 64, 192, 64, 192], "{order:?}");
            assert_eq!(tile_set(&ts, &tq), all, "{order:?}");
        }
    }

    #[test]
    fn prefill_tiles_by_sequence_keep_a_sequence_together() {
        // Three fresh prompts, the middle one longest: by sequence it runs first and
        // whole, then the last, then the first, each whole; by tile the three
        // prompts' equal spans interleave.
        let m = step(&[(0, 256), (0, 384), (0, 256)]);
        let (ts, tq, wide) = CudaBackend::tiles(&m, PrefillOrder::Seqs, |_| true);
        assert_eq!(wide, 7);
        assert_eq!(ts, vec![0, 0, 2, 2, 1, 1, 1, 0, 0, 2, 2, 1, 1, 1]);
        assert_eq!(
            tq,
            vec![0, 128, 0, 128, 0, 128, 256, 64, 192, 64, 192, 64, 192, 320]
        );
        let (ts_t, _, _) = CudaBackend::tiles(&m, PrefillOrder::Tiles, |_| true);
        assert_eq!(ts_t, vec![0, 1, 2, 0, 1, 2, 1, 0, 1, 2, 0, 1, 2, 1]);
        // Equal lengths: the batch's order, tile for tile.
        let u = step(&[(0, 512), (0, 512)]);
        assert_eq!(
            CudaBackend::tiles(&u, PrefillOrder::Seqs, |_| true),
            CudaBackend::tiles(&u, PrefillOrder::Batch, |_| true)
        );
        let (ts, tq, _) = CudaBackend::tiles(&m, PrefillOrder::Batch, |_| true);
        let (ts_s, tq_s, _) = CudaBackend::tiles(&m, PrefillOrder::Seqs, |_| true);
        assert_eq!(tile_set(&ts, &tq), tile_set(&ts_s, &tq_s));
    }

    #[test]
    fn mixed_tables_part_one_token_sequences_from_the_prefill_tiles() {
        // Two decodes (contexts 700 and 34), a 90-token prompt, a one-token extend of
        // a 1,199-token cached prefix, and a 200-token chunk after 1,000 cached.
        let m = step(&[(699, 1), (0, 90), (33, 1), (1199, 1), (1000, 200)]);
        for order in [PrefillOrder::Batch, PrefillOrder::Seqs, PrefillOrder::Tiles] {
            let by_context = crate::backend::cuda::decode_order(&m.kv_lens);
            let t = CudaBackend::mixed_tables(&m, order, &by_context).expect("a mixed step");
            // Longest context first: the extend (1,200), then 700, then 34.
            assert_eq!(t.seqs, vec![3, 0, 2], "{order:?}");
            assert_eq!(t.max_kv, 1200, "{order:?}");
            assert_eq!(t.kv_tokens, 1200 + 700 + 34, "{order:?}");
            // Exactly the multi-token sequences' tiles, in the order the whole step's
            // table gives them.
            let (ts, tq, wide) = CudaBackend::tiles(&m, order, |_| true);
            let keep: Vec<(i32, i32)> = ts
                .iter()
                .zip(&tq)
                .filter(|(&s, _)| s == 1 || s == 4)
                .map(|(&s, &q)| (s, q))
                .collect();
            let got: Vec<(i32, i32)> = t.tile_seq.iter().copied().zip(t.tile_q0.clone()).collect();
            assert_eq!(got, keep, "{order:?}");
            // Wide tiles first: 90 -> 1 (q0 0); 200 -> 2 (0, 128); one per decode dropped.
            assert_eq!(t.num_wide_tiles, 3, "{order:?}");
            assert_eq!(wide, 6, "{order:?}");
            assert!(t.tile_seq[..3]
                .iter()
                .zip(&t.tile_q0[..3])
                .all(|(_, &q)| q % 128 == 0));
        }
        // Only decodes, or no decode: not mixed.
        for m in [step(&[(5, 1), (9, 1)]), step(&[(0, 5), (9, 2)])] {
            let by_context = crate::backend::cuda::decode_order(&m.kv_lens);
            assert_eq!(
                CudaBackend::mixed_tables(&m, PrefillOrder::Batch, &by_context),
                None
            );
        }
    }

    #[test]
    fn wave_splits_fill_the_last_wave() {
        // 396 slots (132 SMs x 3 blocks). 8 sequences x 8 kv heads of 16384: one full
        // wave of 6 splits, not 9 splits in 1.45 waves.
        assert_eq!(wave_splits(64, 396, 256, 1, 2), Some(6));
        // 64 x 8 heads: 3 splits (1,536 blocks, 3.9 waves) rather than 2 (2.6).
        assert_eq!(wave_splits(512, 396, 128, 1, 2), Some(3));
        // Batch 1 with 1,024 rows: as many splits as the 32-row minimum allows.
        assert_eq!(wave_splits(8, 396, 32, 1, 2), Some(32));
        // Batch 1 under a graph's long capacity: 49 splits, 392 of 396 slots.
        assert_eq!(wave_splits(8, 396, 256, 1, 2), Some(49));
        // Two waves and more: the fill rule decides.
        assert_eq!(wave_splits(2048, 396, 256, 1, 2), None);
        assert_eq!(wave_splits(800, 396, 256, 1, 2), None);
        // The floor holds.
        assert_eq!(wave_splits(64, 396, 256, 8, 2), Some(12));
        assert_eq!(wave_splits(64, 396, 4, 8, 2), Some(4));
        // A higher limit takes 128 x 8 heads (2.6 waves unsplit): 3 splits, 7.8 waves.
        assert_eq!(wave_splits(1024, 396, 256, 1, 4), Some(3));
        assert_eq!(wave_splits(1024, 396, 256, 1, 2), None);
    }
}
