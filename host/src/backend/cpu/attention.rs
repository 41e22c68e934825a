//! Causal paged attention over a ragged batch, on the CPU.

use rayon::prelude::*;

use super::{CpuKv, CpuTensor};
use crate::backend::{BackendError, StepMeta};

/// See [`crate::backend::Backend::attention`].
pub(super) fn paged_attention(
    q: &CpuTensor,
    kv: &CpuKv,
    layer: usize,
    meta: &StepMeta,
    scale: f32,
) -> Result<CpuTensor, BackendError> {
    let l = kv.layout;
    let d = l.head_dim;
    let (rows, cols) = q.rows_cols("attention")?;
    if layer >= l.num_layers || d == 0 || !cols.is_multiple_of(d) || rows != meta.num_tokens() {
        return Err(BackendError::Shape {
            op: "attention",
            detail: format!(
                "q {:?}, layer {layer}, cache {l:?}, {} tokens",
                q.shape,
                meta.num_tokens()
            ),
        });
    }
    let hq = cols / d;
    if l.kv_heads == 0 || !hq.is_multiple_of(l.kv_heads) {
        return Err(BackendError::Shape {
            op: "attention",
            detail: format!(
                "{hq} query heads are not a multiple of {} KV heads",
                l.kv_heads
            ),
        });
    }
    let group = hq / l.kv_heads;
    let kvw = l.kv_heads * d;
    let ps = l.page_size;
    let (kc, vc) = (&kv.k[layer], &kv.v[layer]);

    // Row → sequence, so each token can be processed independently.
    let mut seq_of = vec![0usize; rows];
    for s in 0..meta.num_seqs() {
        for r in meta.q_indptr[s]..meta.q_indptr[s + 1] {
            seq_of[r as usize] = s;
        }
    }

    let mut out = vec![0.0f32; rows * cols];
    out.par_chunks_mut(cols).enumerate().for_each(|(r, orow)| {
        let s = seq_of[r];
        let q_len = meta.q_indptr[s + 1] - meta.q_indptr[s];
        let start = meta.kv_lens[s] - q_len;
        let pos = (start + (r as u32 - meta.q_indptr[s])) as usize;
        let pages =
            &meta.page_table[meta.page_indptr[s] as usize..meta.page_indptr[s + 1] as usize];
        let n = pos + 1;
        let mut scores = vec![0.0f32; n];
        for h in 0..hq {
            let g = h / group;
            let qh = &q.data[r * cols + h * d..r * cols + (h + 1) * d];
            let mut m = f32::NEG_INFINITY;
            for (j, sc) in scores.iter_mut().enumerate() {
                let slot = pages[j / ps] as usize * ps + j % ps;
                let kh = &kc[slot * kvw + g * d..slot * kvw + (g + 1) * d];
                let dot: f32 = qh.iter().zip(kh).map(|(a, b)| a * b).sum();
                *sc = dot * scale;
                m = m.max(*sc);
            }
            let mut denom = 0.0f32;
            for sc in scores.iter_mut() {
                *sc = (*sc - m).exp();
                denom += *sc;
            }
            let oh = &mut orow[h * d..(h + 1) * d];
            for (j, &p) in scores.iter().enumerate() {
                let slot = pages[j / ps] as usize * ps + j % ps;
                let vh = &vc[slot * kvw + g * d..slot * kvw + (g + 1) * d];
                let w = p / denom;
                for (o, &vv) in oh.iter_mut().zip(vh) {
                    *o += w * vv;
                }
            }
        }
    });
    Ok(CpuTensor {
        shape: vec![rows, cols],
        data: out,
    })
}
