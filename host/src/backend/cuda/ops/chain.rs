//! A decoder layer's products at one decode row in one launch (`layer_chain`,
//! `kernels/layer_chain_sm90.cu`): o into the residual, norm + gate_up + SiLU, down into
//! the residual, and the next layer's norm + qkv, with every block streaming its share
//! of all four weights from the start.

use crate::backend::cuda::{cfg, Arg, Buf, CudaBackend, CudaTensor};
use crate::backend::{BackendError, LayerChain};

/// Dynamic shared memory the kernel may take: Hopper's per-block maximum (227 KB) less
/// 1 KB for its static shared memory (the driver refuses an opt-in that the two together
/// exceed: CUDA_ERROR_INVALID_VALUE at load, 2026-12-04).
pub const LAYER_CHAIN_MAX_SMEM: usize = 226 * 1024;
/// Bytes of one stage of the weight ring (`LC_CHUNK`).
const CHUNK: usize = 32768;
/// Threads a block (`LC_THREADS`: 16 consumer warps and a producer warp).
const THREADS: u32 = 544;
/// Fewest ring stages worth launching with: fewer would leave too little in flight.
const MIN_STAGES: usize = 4;
/// Most stages: 6 x 32 KB keeps ~25 MB in flight over 132 SMs, past the copy rate's
/// need; more only takes shared memory.
const MAX_STAGES: usize = 6;

/// The launch's shape: (h, qd, inter, nqkv), from the weights.
struct Dims {
    h: usize,
    qd: usize,
    inter: usize,
    nqkv: usize,
}

/// The kernel's shared-memory plan for `d` on `sms` blocks: (stages, x elements,
/// accumulator rows, bytes), or `None` when too few stages fit.
fn plan(d: &Dims, sms: usize) -> Option<(usize, usize, usize, usize)> {
    let per = |n: usize| n.div_ceil(sms);
    let acc = per(d.h)
        .max(2 * per(d.inter))
        .max(per(d.nqkv))
        .next_multiple_of(4);
    let xmax = d.h.max(d.qd).max(d.inter).next_multiple_of(8);
    let fixed = xmax * 2 + acc * 4;
    // Each stage: its bytes and two mbarriers (full, empty).
    let stages = (LAYER_CHAIN_MAX_SMEM.checked_sub(fixed)? / (CHUNK + 16)).min(MAX_STAGES);
    (stages >= MIN_STAGES).then_some((stages, xmax, acc, stages * CHUNK + fixed + stages * 16))
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

impl CudaBackend {
    /// The chain's shape when the kernel can run it on `residual`, else `None`.
    fn chain_dims(&self, residual: &CudaTensor, c: &LayerChain<'_, CudaTensor>) -> Option<Dims> {
        if !self.layer_chain.get() || self.dev.kernels.get("layer_chain").is_err() {
            return None;
        }
        let (1, h) = bf16_2d(residual)? else {
            return None;
        };
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
        let shapes = ho == h
            && hg == h
            && gu == 2 * inter
            && hd == h
            && bf16_1d(c.post_norm, h)
            && c.b_o.is_none_or(|b| bf16_1d(b, h))
            && bf16_2d(c.attn) == Some((1, qd));
        // Each warp's 256-element piece of a chunk must lie in one weight row.
        let widths = [h, qd, inter].iter().all(|k| k.is_multiple_of(256));
        let d = Dims { h, qd, inter, nqkv };
        (shapes && widths && plan(&d, self.dev.num_sms).is_some()).then_some(d)
    }

    pub(super) fn layer_chain_ok_impl(
        &self,
        residual: &CudaTensor,
        c: &LayerChain<'_, CudaTensor>,
    ) -> bool {
        self.chain_dims(residual, c).is_some()
    }

    pub(super) fn layer_chain_impl(
        &self,
        c: &LayerChain<'_, CudaTensor>,
        residual: &mut CudaTensor,
    ) -> Result<Option<CudaTensor>, BackendError> {
        let d = self.chain_dims(residual, c).ok_or_else(|| {
            BackendError::Unsupported(format!(
                "layer_chain: residual {:?}, w_o {:?}, w_gate_up {:?}, w_down {:?}: not a shape the kernel runs (or turned off)",
                residual.shape, c.w_o.shape, c.w_gate_up.shape, c.w_down.shape
            ))
        })?;
        let sms = self.dev.num_sms;
        let (stages, xmax, acc, smem) = plan(&d, sms).expect("chain_dims checked the plan");
        let act = self.new_bf16(1, d.inter)?;
        let qkv = match c.next {
            Some(_) => Some(self.new_bf16(1, d.nqkv)?),
            None => None,
        };
        let weights = d.h * d.qd + 3 * d.h * d.inter + d.nqkv * d.h;
        crate::backend::cuda::timeline::cost((weights * 2) as f64, 2.0 * weights as f64);
        let opt = |t: Option<&CudaTensor>| -> Result<u64, BackendError> {
            t.map_or(Ok(0), |t| self.bf16_ptr(t, "layer_chain"))
        };
        let (in_norm, w_qkv, b_qkv) = match c.next {
            Some((n, w, b)) => (Some(n), Some(w), b),
            None => (None, None, None),
        };
        let mut lc = cfg((sms as u32, 1, 1), THREADS);
        lc.shared_mem_bytes = smem as u32;
        self.launch(
            "layer_chain",
            lc,
            &[
                Arg::U64(self.bf16_ptr(c.attn, "layer_chain")?),
                Arg::U64(self.bf16_ptr(c.w_o, "layer_chain")?),
                Arg::U64(opt(c.b_o)?),
                Arg::U64(self.bf16_ptr(residual, "layer_chain")?),
                Arg::U64(self.bf16_ptr(c.post_norm, "layer_chain")?),
                Arg::U64(self.bf16_ptr(c.w_gate_up, "layer_chain")?),
                Arg::U64(self.bf16_ptr(c.w_down, "layer_chain")?),
                Arg::U64(self.bf16_ptr(&act, "layer_chain")?),
                Arg::U64(opt(in_norm)?),
                Arg::U64(opt(w_qkv)?),
                Arg::U64(opt(b_qkv)?),
                Arg::U64(opt(qkv.as_ref())?),
                Arg::U64(self.ptr(&self.dev.chain_bar)),
                Arg::I32(d.h as i32),
                Arg::I32(d.qd as i32),
                Arg::I32(d.inter as i32),
                Arg::I32(d.nqkv as i32),
                Arg::F32(c.eps),
                Arg::I32(stages as i32),
                Arg::I32(xmax as i32),
                Arg::I32(acc as i32),
            ],
        )?;
        Ok(qkv)
    }
}

#[cfg(test)]
mod tests {
    use super::{plan, Dims, LAYER_CHAIN_MAX_SMEM};

    #[test]
    fn plan_fits_the_shapes_it_serves() {
        // Qwen3-0.6B and Qwen3-14B on 132 SMs: the whole plan within the limit.
        for (d, stages) in [
            (
                Dims {
                    h: 1024,
                    qd: 2048,
                    inter: 3072,
                    nqkv: 4096,
                },
                6,
            ),
            (
                Dims {
                    h: 5120,
                    qd: 5120,
                    inter: 17408,
                    nqkv: 7168,
                },
                5,
            ),
        ] {
            let (s, xmax, acc, bytes) = plan(&d, 132).unwrap();
            assert_eq!(s, stages);
            assert!(bytes <= LAYER_CHAIN_MAX_SMEM);
            assert!(xmax >= d.inter && acc >= 2 * d.inter.div_ceil(132));
            assert_eq!(acc % 4, 0);
        }
        // An intermediate width whose x alone takes the shared memory: no plan.
        let huge = Dims {
            h: 4096,
            qd: 4096,
            inter: 110_592,
            nqkv: 6144,
        };
        assert!(plan(&huge, 132).is_none());
    }
}
