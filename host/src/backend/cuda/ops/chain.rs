//! A decoder layer's products at one decode row in one launch (`layer_chain`,
//! `kernels/layer_chain_sm90.cu`): o into the residual, norm + gate_up + SiLU, down into
//! the residual, and the next layer's norm + qkv, with every block streaming its share
//! of all four weights from the start. `layer_chain_attn_g*` run the layer's attention
//! first, from its qkv row (q/k norm, RoPE, the K/V store, split attention and its merge);
//! `layer_chain_span_g2` runs several such layers in one launch ([`CHAIN_MAX_LAYERS`] at
//! most, their pointers as a table passed by value), each from the qkv the one before
//! wrote. Past one row: `layer_chain_r2`, the products-only chain over two rows, and
//! `layer_chain_span_g2_r2`, the span over two sequences, each sequence's attention on
//! half the grid.

use cudarc::driver::DeviceRepr;

use super::kv::check_slots;
use crate::backend::cuda::device::{CHAIN_MAX_LAYERS, CHAIN_TICKETS, CHAIN_TRACE_POINTS};
use crate::backend::cuda::{cfg, Arg, Buf, CudaBackend, CudaKv, CudaStep, CudaTensor, Fold};
use crate::backend::{AttnParams, BackendError, ChainInput, LayerChain};

/// Dynamic shared memory the kernel may take: Hopper's per-block maximum (227 KB) less
/// 1 KB for its static shared memory (the driver refuses an opt-in that the two together
/// exceed: CUDA_ERROR_INVALID_VALUE at load, 2026-12-04).
pub const LAYER_CHAIN_MAX_SMEM: usize = 226 * 1024;
/// Bytes of one stage of the weight ring (`LC_CHUNK`).
const CHUNK: usize = 32768;
/// Threads a block (`LC_THREADS`: 16 consumer warps and a producer warp).
const THREADS: u32 = 544;
/// Consumer warps a block (`LC_WARPS`): the attention's partials in shared memory.
const WARPS: usize = 16;
/// Fewest ring stages worth launching with: fewer would leave too little in flight.
const MIN_STAGES: usize = 4;
/// Ring stages the attention phase stages its K/V tiles in (`LC_ATT_STAGES`): every plan
/// has them.
const ATT_STAGES: usize = 4;
const _: () = assert!(MIN_STAGES >= ATT_STAGES);
/// Most stages: 6 x 32 KB keeps ~25 MB in flight over 132 SMs, past the copy rate's
/// need; more only takes shared memory.
const MAX_STAGES: usize = 6;
/// Chunks a block keeps in flight where its share of the layer's weights is at most
/// [`WINDOW_RING_SHARES`] rings: such a layer arrives as the ring's start-up burst, and
/// the window makes it land in the order the phases consume it. Measured (2026-12-04 PM,
/// batch-1 runner step, window 2 against the whole ring at once): Qwen3-0.6B (a block's
/// share 1.2 rings) 1.011-1.029x faster in five A/Bs; Llama-3.1-8B (21 rings) 0.995x and
/// 1.000x; Qwen3-14B (31 rings) 1.024x, then 0.963x and 0.988x in noisier calls (rounds
/// 7.6-8.7 ms, the power cap in half the samples). Larger layers stream steadily, where a
/// window only caps the bytes in flight, so they keep the whole ring.
const WINDOW: usize = 2;
const WINDOW_RING_SHARES: usize = 2;
/// The attention phase's head size (`LC_HD`) and most splits (`LC_MAX_SPLITS`).
const ATT_HD: usize = 128;
const ATT_MAX_SPLITS: usize = 16;

/// Pointers a layer of the table (`LcLayer`: w_o, b_o, post_norm, w_gate_up, w_down,
/// the next layer's in_norm, w_qkv and b_qkv, q_norm, k_norm, the K and V caches).
const LAYER_PTRS: usize = 12;

/// The attention chain's table of layers, passed by value (`LcLayers`); null pointers
/// where a layer has no such weight.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ChainLayers([[u64; LAYER_PTRS]; CHAIN_MAX_LAYERS]);

// SAFETY: plain data laid out as the kernel's `LcLayers` (12 x 8-byte pointers a layer,
// LC_MAX_LAYERS = CHAIN_MAX_LAYERS layers), passed by value.
unsafe impl DeviceRepr for ChainLayers {}

/// The launch's shape: (h, qd, inter, nqkv) from the weights, with the attention in
/// front its GQA group (query heads a kv head; 0 without), and the decode rows.
struct Dims {
    h: usize,
    qd: usize,
    inter: usize,
    nqkv: usize,
    group: usize,
    rows: usize,
}

/// The kernel's shared-memory plan for `d` on `sms` blocks.
struct Plan {
    stages: usize,
    /// x's elements (the widest product input).
    xmax: usize,
    /// The accumulators' floats (the most rows of a product a block owns).
    acc: usize,
    /// Bytes between the ring and the mbarriers: x and the accumulators (a copy of each
    /// a row), or the attention's scratch where that is larger.
    region: usize,
    bytes: usize,
    /// Chunks in flight a block (0: the whole ring), unless the options say otherwise.
    window: usize,
}

/// The plan, or `None` when too few stages fit.
fn plan(d: &Dims, sms: usize) -> Option<Plan> {
    let per = |n: usize| n.div_ceil(sms);
    let acc = per(d.h)
        .max(2 * per(d.inter))
        .max(per(d.nqkv))
        .next_multiple_of(4);
    let xmax = d.h.max(d.qd).max(d.inter).next_multiple_of(8);
    // lc_attention's q (G x 128 f32) and each consumer warp's partial per head (128
    // values, a max and a sum).
    let att = d.group * ATT_HD * 4 + WARPS * d.group * (ATT_HD + 2) * 4;
    let region = ((xmax * 2 + acc * 4) * d.rows)
        .max(att)
        .next_multiple_of(16);
    // With the attention, the kernel's copy of its table of layers after the mbarriers.
    let table = if d.group > 0 {
        std::mem::size_of::<ChainLayers>()
    } else {
        0
    };
    // Each stage: its bytes and two mbarriers (full, empty).
    let stages = (LAYER_CHAIN_MAX_SMEM.checked_sub(region + table)? / (CHUNK + 16)).min(MAX_STAGES);
    let share = 2 * (d.h * d.qd + 3 * d.inter * d.h + d.nqkv * d.h) / sms;
    let window = if share <= WINDOW_RING_SHARES * stages * CHUNK {
        WINDOW
    } else {
        0
    };
    (stages >= MIN_STAGES).then_some(Plan {
        stages,
        xmax,
        acc,
        region,
        bytes: stages * CHUNK + region + stages * 16 + table,
        window,
    })
}

fn bf16_2d(t: &CudaTensor) -> Option<(usize, usize)> {
    match (t.shape.as_slice(), &t.buf) {
        (&[r, c], Buf::Bf16(_)) => Some((r, c)),
        _ => None,
    }
}

fn bf16_1d(t: &CudaTensor, n: usize) -> bool {
    matches!(t.buf, Buf::Bf16(_)) && t.shape.iter().product::<usize>() == n
}

/// A unit norm standing for one folded into its product's weight.
fn unit(norm: &CudaTensor) -> bool {
    norm.fold == Fold::UnitNorm
}

/// The kernel's `folded` flag: the layer's norms are folded into gate_up and qkv, so the
/// chain scales their products by each row's factor instead of normalising x.
fn folded(c: &LayerChain<'_, CudaTensor>) -> bool {
    unit(c.post_norm)
}

/// The products-only kernel for `rows` decode rows.
fn rows_kernel(rows: usize) -> Option<&'static str> {
    match rows {
        1 => Some("layer_chain"),
        2 => Some("layer_chain_r2"),
        _ => None,
    }
}

/// The attention chain of several layers a launch at `rows` sequences (group ≤ 2).
fn span_kernel(rows: usize) -> Option<&'static str> {
    match rows {
        1 => Some("layer_chain_span_g2"),
        2 => Some("layer_chain_span_g2_r2"),
        _ => None,
    }
}

/// The kernel entry for a GQA group: the smallest of 2 and 4 that holds it. Larger
/// groups run the separate attention: the running state of 6 or 8 heads spilled, and
/// Qwen3-14B's group of 5 measured 1.016x slower than the separate attention
/// (2026-12-04, docs/results/gpu-2026-12-04-chain-attn.md).
fn attn_kernel(group: usize) -> Option<&'static str> {
    match group {
        1..=2 => Some("layer_chain_attn_g2"),
        3..=4 => Some("layer_chain_attn_g4"),
        _ => None,
    }
}

impl CudaBackend {
    /// The attention-in-front's group size when the kernel can run it: `rows` sequences
    /// of one new token each (past one, up to `chain_attn_rows`, a group of at most 2:
    /// the span kernel), head_dim 128, a group of at most 4, q and k norms both or
    /// neither, f32 inverse frequencies, the kv heads each taking a block of each
    /// sequence's share of the grid.
    fn chain_attn_group(
        &self,
        qkv: Option<&CudaTensor>,
        layer: usize,
        p: &AttnParams<'_, CudaTensor>,
        kv: &CudaKv,
        step: &CudaStep,
    ) -> Option<usize> {
        let l = kv.layout;
        let (hq, hkv) = (p.q_heads, p.kv_heads);
        let group = hq.checked_div(hkv)?;
        let norms = p.q_norm.is_some() == p.k_norm.is_some()
            && [p.q_norm, p.k_norm]
                .iter()
                .flatten()
                .all(|n| bf16_1d(n, ATT_HD));
        let rows = step.meta.num_seqs();
        let rows_ok = rows == 1
            || (rows <= self.chain_attn_rows.get()
                && group <= 2
                && span_kernel(rows).is_some_and(|k| self.dev.kernels.get(k).is_ok()));
        let ok = self.chain_attn.get()
            && step.decode_only
            && rows_ok
            && step.meta.num_tokens() == rows
            && p.head_dim == ATT_HD
            && l.head_dim == ATT_HD
            && l.kv_heads == hkv
            && layer < l.num_layers
            && l.page_size > 0
            && hq == group * hkv
            && hkv * rows <= self.dev.num_sms.min(CHAIN_TICKETS)
            && norms
            && p.inv_freq.f32_copy.is_some()
            && p.inv_freq.numel() * 2 == ATT_HD
            && qkv.is_none_or(|t| bf16_2d(t) == Some((rows, (hq + 2 * hkv) * ATT_HD)));
        let name = attn_kernel(group)?;
        (ok && self.dev.kernels.get(name).is_ok()).then_some(group)
    }

    pub(super) fn layer_chain_ok_impl(
        &self,
        residual: &CudaTensor,
        c: &LayerChain<'_, CudaTensor>,
        kv: &CudaKv,
        step: &CudaStep,
    ) -> bool {
        !matches!(c.input, ChainInput::Chained { .. })
            && self.chain_plan(residual, c, kv, step).is_some()
    }

    /// How many of `chains` one launch runs: the first from its qkv, each later one
    /// from the qkv the one before it wrote, all of one shape and rotation, in the
    /// group-of-2 build (the group-of-4 one runs one layer a launch: see the kernel),
    /// at most `chain_span` of them.
    pub(super) fn layer_span_len_impl(
        &self,
        residual: &CudaTensor,
        chains: &[LayerChain<'_, CudaTensor>],
        kv: &CudaKv,
        step: &CudaStep,
    ) -> usize {
        let Some(first) = chains.first() else {
            return 0;
        };
        let ChainInput::Qkv { params: p0, .. } = &first.input else {
            return 0;
        };
        let Some((d0, _)) = self.chain_plan(residual, first, kv, step) else {
            return 0;
        };
        let spans =
            d0.group <= 2 && span_kernel(d0.rows).is_some_and(|k| self.dev.kernels.get(k).is_ok());
        let max = if spans { self.chain_span } else { 1 };
        let mut n = 1;
        while n < chains.len().min(max) {
            let c = &chains[n];
            let ChainInput::Chained { params, .. } = &c.input else {
                break;
            };
            let same = chains[n - 1].next.is_some()
                && d0.nqkv == (params.q_heads + 2 * params.kv_heads) * ATT_HD
                && std::ptr::eq(params.inv_freq, p0.inv_freq)
                && params.scale == p0.scale
                && c.eps == first.eps
                && folded(c) == folded(first)
                && self
                    .chain_plan(residual, c, kv, step)
                    .is_some_and(|(d, _)| {
                        // The model's last layer has no qkv product (nqkv 0).
                        let nqkv = if c.next.is_some() { d.nqkv } else { d0.nqkv };
                        (d.h, d.qd, d.inter, nqkv, d.group)
                            == (d0.h, d0.qd, d0.inter, d0.nqkv, d0.group)
                    });
            if !same {
                break;
            }
            n += 1;
        }
        n
    }

    /// The chain's shape and plan when the kernel can run it on `residual`, else `None`.
    fn chain_plan(
        &self,
        residual: &CudaTensor,
        c: &LayerChain<'_, CudaTensor>,
        kv: &CudaKv,
        step: &CudaStep,
    ) -> Option<(Dims, Plan)> {
        if !self.layer_chain.get() || self.dev.kernels.get("layer_chain").is_err() {
            return None;
        }
        // The chain's attention takes finished qkv rows, not ones still owed a folded
        // norm's factor.
        if let ChainInput::Qkv { qkv, .. } = &c.input {
            if qkv.fold != Fold::None {
                return None;
            }
        }
        let (rows, h) = bf16_2d(residual)?;
        // Past one row: the products-only chain, or the span kernel with the attention
        // (chain_attn_group checks its rows), up to the rows allowed now.
        let kernel = match &c.input {
            ChainInput::Attn(_) => (rows <= self.chain_rows.get()).then(|| rows_kernel(rows))?,
            _ if rows == 1 => rows_kernel(1),
            _ => span_kernel(rows),
        };
        if self.dev.kernels.get(kernel?).is_err() {
            return None;
        }
        let (ho, qd) = bf16_2d(c.w_o)?;
        let (gu, hg) = bf16_2d(c.w_gate_up)?;
        let (hd, inter) = bf16_2d(c.w_down)?;
        let nqkv = match c.next {
            Some((norm, w, bias)) => {
                let (n, hq) = bf16_2d(w)?;
                let bias_ok = bias.is_none_or(|b| bf16_1d(b, n));
                (hq == h && bf16_1d(norm, h) && bias_ok).then_some(n)?
            }
            None => 0,
        };
        let group = match &c.input {
            ChainInput::Attn(a) => (bf16_2d(a) == Some((rows, qd))).then_some(0)?,
            ChainInput::Qkv { qkv, layer, params } => {
                let g = self.chain_attn_group(Some(qkv), *layer, params, kv, step)?;
                (params.q_heads * ATT_HD == qd).then_some(g)?
            }
            ChainInput::Chained { layer, params } => {
                let g = self.chain_attn_group(None, *layer, params, kv, step)?;
                (params.q_heads * ATT_HD == qd).then_some(g)?
            }
        };
        // One `folded` flag covers both of a layer's norms.
        let norms = c.next.is_none_or(|(n, _, _)| unit(n) == unit(c.post_norm));
        let shapes = norms
            && ho == h
            && hg == h
            && gu == 2 * inter
            && hd == h
            && bf16_1d(c.post_norm, h)
            && c.b_o.is_none_or(|b| bf16_1d(b, h));
        // Each warp's 256-element piece of a chunk must lie in one weight row, and the
        // kernel addresses each weight's elements in 32 bits.
        let widths = [h, qd, inter].iter().all(|k| k.is_multiple_of(256))
            && [h * qd, 2 * inter * h, nqkv * h]
                .iter()
                .all(|&e| e < 1 << 32);
        let d = Dims {
            h,
            qd,
            inter,
            nqkv,
            group,
            rows,
        };
        let p = plan(&d, self.dev.num_sms)?;
        (shapes && widths).then_some((d, p))
    }

    /// `chains` in one launch: one products-only chain ([`ChainInput::Attn`]), or
    /// attention chains, the first from its qkv and each later one from the qkv the one
    /// before it wrote (as many as [`Self::layer_span_len_impl`] takes).
    pub(super) fn layer_span_impl(
        &self,
        chains: &[LayerChain<'_, CudaTensor>],
        kv: &mut CudaKv,
        step: &CudaStep,
        residual: &mut CudaTensor,
    ) -> Result<Option<CudaTensor>, BackendError> {
        let refuse = |why: String| Err(BackendError::Unsupported(format!("layer_chain: {why}")));
        let Some(c) = chains.first() else {
            return refuse("no layers".into());
        };
        let Some((d, p)) = self.chain_plan(residual, c, kv, step) else {
            return refuse(format!(
                "residual {:?}, w_o {:?}, w_gate_up {:?}, w_down {:?}: not a shape the kernel runs (or turned off)",
                residual.shape, c.w_o.shape, c.w_gate_up.shape, c.w_down.shape
            ));
        };
        if chains.len() > 1 && self.layer_span_len_impl(residual, chains, kv, step) < chains.len() {
            return refuse(format!(
                "{} layers in one launch: more than it takes (see layer_span_len)",
                chains.len()
            ));
        }
        let last = &chains[chains.len() - 1];
        let sms = self.dev.num_sms;
        let act = self.new_bf16(d.rows, d.inter)?;
        // Each layer's next qkv; past the first layer also the input of the next.
        let qkv_out = match chains.len() > 1 || c.next.is_some() {
            true => Some(self.new_bf16(d.rows, d.nqkv)?),
            false => None,
        };
        let weights = d.h * d.qd + 3 * d.h * d.inter + d.nqkv * d.h;
        let layers = chains.len();
        let cost = |kv_bytes: usize, flops: usize| {
            let bytes = layers * (weights * 2 + kv_bytes);
            let flops = layers * (2 * weights * d.rows + flops);
            crate::backend::cuda::timeline::cost(bytes as f64, flops as f64);
        };
        let opt = |t: Option<&CudaTensor>| -> Result<u64, BackendError> {
            t.map_or(Ok(0), |t| self.bf16_ptr(t, "layer_chain"))
        };
        // The next layer's (in_norm, w_qkv, b_qkv) pointers (0: none).
        let next = |c: &LayerChain<'_, CudaTensor>| -> Result<[u64; 3], BackendError> {
            match c.next {
                Some((n, w, b)) => Ok([
                    self.bf16_ptr(n, "layer_chain")?,
                    self.bf16_ptr(w, "layer_chain")?,
                    opt(b)?,
                ]),
                None => Ok([0; 3]),
            }
        };
        let mut lc = cfg((sms as u32, 1, 1), THREADS);
        lc.shared_mem_bytes = p.bytes as u32;
        let window = self.chain_window.unwrap_or(p.window) as i32;
        // Each layer's pointers in the kernel's LcLayer order (q/k norms and caches 0
        // for the products-only chain).
        let mut table = ChainLayers([[0; LAYER_PTRS]; CHAIN_MAX_LAYERS]);
        for (row, c) in table.0.iter_mut().zip(chains) {
            let (mut qn, mut kn, mut kc, mut vc) = (0, 0, 0, 0);
            match &c.input {
                ChainInput::Qkv { layer, params, .. } | ChainInput::Chained { layer, params } => {
                    if let (Some(q), Some(k)) = (params.q_norm, params.k_norm) {
                        qn = self.bf16_ptr(q, "layer_chain")?;
                        kn = self.bf16_ptr(k, "layer_chain")?;
                    }
                    kc = self.ptr(&kv.k[*layer]);
                    vc = self.ptr(&kv.v[*layer]);
                }
                ChainInput::Attn(_) => {}
            }
            let [in_norm, w_qkv, b_qkv] = next(c)?;
            *row = [
                self.bf16_ptr(c.w_o, "layer_chain")?,
                opt(c.b_o)?,
                self.bf16_ptr(c.post_norm, "layer_chain")?,
                self.bf16_ptr(c.w_gate_up, "layer_chain")?,
                self.bf16_ptr(c.w_down, "layer_chain")?,
                in_norm,
                w_qkv,
                b_qkv,
                qn,
                kn,
                kc,
                vc,
            ];
        }
        let [w_o, b_o, post, w_gu, w_down, in_norm, w_qkv, b_qkv, qn, kn, kc, vc] = table.0[0];
        let (res, act_p) = (
            self.bf16_ptr(residual, "layer_chain")?,
            self.bf16_ptr(&act, "layer_chain")?,
        );
        let qkv_out_p = opt(qkv_out.as_ref())?;
        let bar = self.ptr(&self.dev.chain_bar);
        let scalars = [
            Arg::I32(d.h as i32),
            Arg::I32(d.qd as i32),
            Arg::I32(d.inter as i32),
            Arg::I32(d.nqkv as i32),
            Arg::F32(c.eps),
            Arg::I32(folded(c) as i32),
            Arg::I32(p.stages as i32),
            Arg::I32(p.xmax as i32),
            Arg::I32(p.acc as i32),
            Arg::I32(p.region as i32),
            Arg::I32(window),
        ];
        // One layer's arguments up to `window` (layer_chain after its attn row).
        let mut one = vec![
            Arg::U64(w_o),
            Arg::U64(b_o),
            Arg::U64(res),
            Arg::U64(post),
            Arg::U64(w_gu),
            Arg::U64(w_down),
            Arg::U64(act_p),
            Arg::U64(in_norm),
            Arg::U64(w_qkv),
            Arg::U64(b_qkv),
            Arg::U64(qkv_out_p),
            Arg::U64(bar),
        ];
        one.extend(scalars);
        let ChainInput::Qkv { qkv, params, .. } = &c.input else {
            let ChainInput::Attn(a) = &c.input else {
                return refuse("a chained layer without the layer before it".into());
            };
            let mut args = vec![Arg::U64(self.bf16_ptr(a, "layer_chain")?)];
            args.extend(one);
            cost(0, 0);
            let name = rows_kernel(d.rows).expect("chain_plan checked the rows");
            self.launch(name, lc, &args)?;
            return Ok(qkv_out);
        };
        let l = kv.layout;
        check_slots(l, step)?;
        // The attention's partials (every head's splits, at most ATT_MAX_SPLITS) and its
        // merged output row, read back later in the same launch (each layer in turn).
        let (hq, hkv) = (params.q_heads, params.kv_heads);
        let o_part = self.alloc_f32(d.rows * hq * ATT_MAX_SPLITS * ATT_HD)?;
        let lse = self.alloc_f32(d.rows * hq * ATT_MAX_SPLITS)?;
        let attn_out = self.new_bf16(d.rows, d.qd)?;
        let freq = params.inv_freq.f32_copy.as_ref().ok_or_else(|| {
            BackendError::Unsupported("layer_chain: inv_freq without its f32 upload".into())
        })?;
        let off = step.off;
        let qkv_p = self.bf16_ptr(qkv, "layer_chain")?;
        let (pos, slots) = (
            self.step_ptr(step, off.positions),
            self.step_ptr(step, off.slots),
        );
        let pages = [
            Arg::U64(self.step_ptr(step, off.kv_len)),
            Arg::U64(self.step_ptr(step, off.page_start)),
            Arg::U64(self.step_ptr(step, off.page_ids)),
            Arg::U64(self.ptr(&o_part)),
            Arg::U64(self.ptr(&lse)),
            Arg::U64(self.tptr(&attn_out)),
            Arg::I32(hq as i32),
            Arg::I32(hkv as i32),
            Arg::I32(l.page_size as i32),
            Arg::I32(self.chain_attn_part as i32),
            Arg::F32(params.scale),
        ];
        // Past one row the span kernel runs even one layer (there is no one-layer build).
        let (name, args, table) = if layers == 1 && d.rows == 1 {
            // layer_chain_attn_g*: the layer's own arguments, then its attention's.
            let mut args = one;
            args.extend([
                Arg::U64(qkv_p),
                Arg::U64(qn),
                Arg::U64(kn),
                Arg::U64(pos),
                Arg::U64(self.ptr(freq)),
                Arg::U64(slots),
                Arg::U64(kc),
                Arg::U64(vc),
            ]);
            args.extend(pages);
            let name = attn_kernel(d.group).expect("chain_plan checked the group");
            (name, args, None)
        } else {
            // layer_chain_span_g2: what the layers share, the table last.
            let mut args = vec![
                Arg::U64(res),
                Arg::U64(act_p),
                Arg::U64(qkv_out_p),
                Arg::U64(bar),
            ];
            args.extend(scalars);
            args.extend([
                // hold: none of a layer's weight chunks goes before its attention is done,
                // which stages its K/V tiles in the ring (lc_produce, lc_attention).
                Arg::I32(0),
                Arg::I32(layers as i32),
                Arg::U64(qkv_p),
                Arg::U64(pos),
                Arg::U64(self.ptr(freq)),
                Arg::U64(slots),
            ]);
            args.extend(pages);
            let name = span_kernel(d.rows).expect("chain_plan checked the rows");
            (name, args, Some(&table))
        };
        // K and V of every context row once; q·k and p·v for every query head.
        let ctx: usize = step.meta.kv_lens.iter().map(|&n| n as usize).sum();
        cost(ctx * hkv * ATT_HD * 4, ctx * hq * ATT_HD * 4);
        self.launch_with_table(name, lc, &args, table)?;
        // The scratch is dropped here: freed in stream order, after the launch.
        Ok(qkv_out.filter(|_| last.next.is_some()))
    }

    /// The chain's phase trace so far, one row a block: `CHAIN_TRACE_POINTS` sums over
    /// its launches (`LC_T_*` in the kernel: SM cycles from the block's start to each
    /// phase point, then wall ns start to end, then the launch count). All zero unless
    /// the kernels were built with `LC_TRACE=1` (`MINISGL_KERNEL_DEFINES`).
    pub fn chain_trace(&self) -> Result<Vec<[u64; CHAIN_TRACE_POINTS]>, BackendError> {
        let words = self.dev.stream.clone_dtoh(&self.dev.chain_bar)?;
        let trace = &words[2 + CHAIN_TICKETS..];
        Ok(trace
            .chunks_exact(2 * CHAIN_TRACE_POINTS)
            .map(|b| std::array::from_fn(|p| b[2 * p] as u64 | ((b[2 * p + 1] as u64) << 32)))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::{
        attn_kernel, plan, ChainLayers, Dims, ATT_STAGES, CHAIN_MAX_LAYERS, LAYER_CHAIN_MAX_SMEM,
        LAYER_PTRS, WINDOW,
    };

    #[test]
    fn layer_table_matches_the_kernel() {
        // The kernel's table of layers is LC_MAX_LAYERS LcLayer structs of pointers,
        // passed by value: the host's must have its size, under 4 KB of parameters.
        let src = include_str!("../../../../../kernels/layer_chain_sm90.cu");
        let max = format!("#define LC_MAX_LAYERS {CHAIN_MAX_LAYERS}\n");
        assert!(src.contains(&max), "{max:?} not in the kernel");
        let start = src.find("struct LcLayer {").expect("LcLayer in the kernel");
        let body = &src[start..start + src[start..].find("};").unwrap()];
        assert_eq!(body.matches("* ").count(), LAYER_PTRS, "{body}");
        assert_eq!(
            std::mem::size_of::<ChainLayers>(),
            CHAIN_MAX_LAYERS * LAYER_PTRS * 8
        );
        assert!(std::mem::size_of::<ChainLayers>() + 256 < 4096);
        // The attention's K/V tiles take the ring's first LC_ATT_STAGES stages.
        let att = format!("#define LC_ATT_STAGES {ATT_STAGES}\n");
        assert!(src.contains(&att), "{att:?} not in the kernel");
    }

    #[test]
    fn groups_past_four_run_the_separate_attention() {
        // Qwen3-0.6B (2), Llama-3.1-8B (4), a group of 3: the smallest build that
        // holds it; Qwen3-14B (5) and Qwen3-32B (8) take the products-only chain.
        let names: Vec<_> = [1, 2, 3, 4, 5, 8, 0].map(attn_kernel).into();
        assert_eq!(
            names,
            [
                Some("layer_chain_attn_g2"),
                Some("layer_chain_attn_g2"),
                Some("layer_chain_attn_g4"),
                Some("layer_chain_attn_g4"),
                None,
                None,
                None
            ]
        );
    }

    #[test]
    fn plan_fits_the_shapes_it_serves() {
        // Qwen3-0.6B, Qwen3-14B and Llama-3.1-8B on 132 SMs, with and without the
        // attention in front: the whole plan within the limit.
        let dims = |h, qd, inter, nqkv, group| Dims {
            h,
            qd,
            inter,
            nqkv,
            group,
            rows: 1,
        };
        for (d, stages) in [
            (dims(1024, 2048, 3072, 4096, 0), 6),
            (dims(1024, 2048, 3072, 4096, 2), 6),
            (dims(5120, 5120, 17408, 7168, 0), 5),
            (dims(4096, 4096, 14336, 6144, 4), 5),
        ] {
            let p = plan(&d, 132).unwrap();
            assert_eq!(p.stages, stages, "h={} group={}", d.h, d.group);
            assert!(p.bytes <= LAYER_CHAIN_MAX_SMEM);
            assert!(p.xmax >= d.inter && p.acc >= 2 * d.inter.div_ceil(132));
            assert!(p.region >= p.xmax * 2 + p.acc * 4);
            assert!(
                p.region >= 17 * d.group * 128 * 4,
                "the attention's scratch fits"
            );
            assert_eq!((p.acc % 4, p.region % 16), (0, 0));
            // The window orders a small layer's start-up burst only.
            assert_eq!(p.window, if d.h == 1024 { WINDOW } else { 0 }, "h={}", d.h);
        }
        // An intermediate width whose x alone takes the shared memory: no plan.
        assert!(plan(&dims(4096, 4096, 110_592, 6144, 0), 132).is_none());
    }

    #[test]
    fn rows_take_x_and_the_accumulators_once_each() {
        // The stages each shape plans at 1-5 rows on 132 SMs (0: no plan, under
        // MIN_STAGES): x is R rows of the intermediate width, so the widest MLPs keep
        // fewest.
        let stages = |h, qd, inter, nqkv| {
            (1..=5)
                .map(|rows| {
                    let d = Dims {
                        h,
                        qd,
                        inter,
                        nqkv,
                        group: 0,
                        rows,
                    };
                    plan(&d, 132).map_or(0, |p| {
                        assert!(p.bytes <= LAYER_CHAIN_MAX_SMEM);
                        assert!(p.region >= rows * (p.xmax * 2 + p.acc * 4));
                        p.stages
                    })
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            stages(1024, 2048, 3072, 4096),
            [6, 6, 6, 6, 6],
            "Qwen3-0.6B"
        );
        assert_eq!(
            stages(4096, 4096, 14336, 6144),
            [6, 5, 4, 0, 0],
            "Llama-3.1-8B"
        );
        assert_eq!(
            stages(5120, 5120, 17408, 7168),
            [5, 4, 0, 0, 0],
            "Qwen3-14B"
        );
        // An intermediate width whose two rows of x leave one stage: no plan.
        let d = Dims {
            h: 4096,
            qd: 4096,
            inter: 45056,
            nqkv: 6144,
            group: 0,
            rows: 2,
        };
        assert!(plan(&d, 132).is_none());
        assert_eq!(super::rows_kernel(2), Some("layer_chain_r2"));
        assert_eq!(super::rows_kernel(3), None);
        assert_eq!(super::span_kernel(1), Some("layer_chain_span_g2"));
        assert_eq!(super::span_kernel(2), Some("layer_chain_span_g2_r2"));
        assert_eq!(super::span_kernel(3), None);
    }
}
