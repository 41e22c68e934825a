//! Causal paged attention over a ragged batch, on the CPU.

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

    // One task per (token, query head): a decode step's single token still
    // spreads its heads over the threads.
    let head = |idx: usize, oh: &mut [f32]| {
        let (r, h) = (idx / hq, idx % hq);
        let s = seq_of[r];
        let q_len = meta.q_indptr[s + 1] - meta.q_indptr[s];
        let start = meta.kv_lens[s] - q_len;
        let pos = (start + (r as u32 - meta.q_indptr[s])) as usize;
        let pages =
            &meta.page_table[meta.page_indptr[s] as usize..meta.page_indptr[s + 1] as usize];
        let g = h / group;
        let qh = &q.data[r * cols + h * d..r * cols + (h + 1) * d];
        // Offsets of keys 0..=pos in the cache, page by page (no division
        // per key: the page size is not a compile-time constant).
        let n = pos + 1;
        let offsets = || {
            pages
                .iter()
                .flat_map(move |&pg| (0..ps).map(move |o| (pg as usize * ps + o) * kvw + g * d))
                .take(n)
        };
        let mut scores = vec![0.0f32; n];
        let mut m = f32::NEG_INFINITY;
        for (sc, at) in scores.iter_mut().zip(offsets()) {
            *sc = dot(qh, &kc[at..at + d]) * scale;
            m = m.max(*sc);
        }
        let mut denom = 0.0f32;
        for sc in scores.iter_mut() {
            *sc = (*sc - m).exp();
            denom += *sc;
        }
        let inv = 1.0 / denom;
        for (&p, at) in scores.iter().zip(offsets()) {
            let w = p * inv;
            for (o, &vv) in oh.iter_mut().zip(&vc[at..at + d]) {
                *o += w * vv;
            }
        }
    };
    let mut out = vec![0.0f32; rows * cols];
    let work = rows * hq * d * meta.max_kv_len() as usize;
    if work < 1 << 15 {
        out.chunks_mut(d).enumerate().for_each(|(i, o)| head(i, o));
    } else {
        super::team::for_chunks(&mut out, d, head);
    }
    Ok(CpuTensor::new(vec![rows, cols], out))
}

/// `a · b` with eight independent partial sums, so that the compiler can
/// keep them in SIMD lanes (a single running sum cannot be reordered).
#[allow(clippy::needless_range_loop)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}
