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
    attention_with(q, kv, layer, meta, scale, true)
}

/// [`paged_attention`]; `simd: false` keeps to the portable code (the
/// reference the AVX-512 path is tested against).
fn attention_with(
    q: &CpuTensor,
    kv: &CpuKv,
    layer: usize,
    meta: &StepMeta,
    scale: f32,
    simd: bool,
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

    #[cfg(target_arch = "x86_64")]
    if simd && d.is_multiple_of(16) && d <= simd::DMAX && is_x86_feature_detected!("avx512f") {
        let a = simd::Attn {
            q: &q.data,
            kc,
            vc,
            meta,
            seq_of: &seq_of,
            d,
            hq,
            group,
            kvw,
            ps,
            scale,
        };
        return Ok(CpuTensor::new(vec![rows, cols], a.run()));
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

/// Attention with AVX-512F: one task per (token, KV head) covers all the
/// query heads that share the KV head, so each key and value is read once
/// per group rather than once per query head; online softmax over blocks
/// of 64 keys (no score buffer the length of the context), a vectorised
/// `exp`. A decode step has too few (token, KV head) pairs to keep the
/// threads busy (SmolLM2: 3 KV heads, 2 threads), so then the keys are
/// split into chunks too and the partial results merged (flash-decoding).
#[cfg(target_arch = "x86_64")]
mod simd {
    use std::arch::x86_64::*;

    use crate::backend::cpu::team;
    use crate::backend::StepMeta;

    /// Largest head dimension (in floats) the kernel keeps on its stack.
    pub const DMAX: usize = 256;
    /// Query heads handled together in one pass over the keys.
    const GMAX: usize = 4;
    /// Keys per online-softmax block.
    const BLOCK: usize = 64;

    pub struct Attn<'a> {
        pub q: &'a [f32],
        pub kc: &'a [f32],
        pub vc: &'a [f32],
        pub meta: &'a StepMeta,
        pub seq_of: &'a [usize],
        pub d: usize,
        pub hq: usize,
        pub group: usize,
        pub kvw: usize,
        pub ps: usize,
        pub scale: f32,
    }

    /// Running softmax state of one query head over some keys:
    /// `o = Σ exp(s_i - m) · v_i`, `l = Σ exp(s_i - m)`.
    struct Part {
        m: f32,
        l: f32,
        o: [f32; DMAX],
    }

    impl Attn<'_> {
        pub fn run(&self) -> Vec<f32> {
            let rows = self.seq_of.len();
            let kvh = self.hq / self.group;
            let cols = self.hq * self.d;
            let mut out = vec![0.0f32; rows * cols];
            let pairs = rows * kvh;
            let threads = rayon::current_num_threads();
            let max_kv = self.meta.max_kv_len() as usize;
            // Key chunks per (token, KV head): enough tasks for ~4 per thread,
            // none shorter than one block.
            let chunks = if pairs >= 4 * threads {
                1
            } else {
                (4 * threads)
                    .div_ceil(pairs)
                    .min(max_kv.div_ceil(BLOCK))
                    .max(1)
            };
            let chunk_len = max_kv.div_ceil(chunks).next_multiple_of(16).max(16);
            let serial = rows * cols * max_kv < 1 << 15;
            let each = |tasks: usize, f: &(dyn Fn(usize) + Sync)| {
                if serial {
                    (0..tasks).for_each(f);
                } else {
                    team::for_each(tasks, f);
                }
            };
            let gd = self.group * self.d;
            if chunks == 1 {
                let o = team::Shared::new(&mut out);
                each(pairs, &|t| {
                    // SAFETY: task t writes the group's heads of its own
                    // token, [t·gd, (t+1)·gd), disjoint from other tasks'.
                    let dst = unsafe { o.range(t * gd, (t + 1) * gd) };
                    self.task(t / kvh, t % kvh, 0, usize::MAX, |h, p| {
                        let inv = if p.l > 0.0 { 1.0 / p.l } else { 0.0 };
                        for (x, &v) in dst[h * self.d..(h + 1) * self.d].iter_mut().zip(&p.o) {
                            *x = v * inv;
                        }
                    });
                });
                return out;
            }
            // Partial states, [pair][chunk][head in group]: m, l, o[d].
            let stride = self.d + 2;
            let mut parts = vec![0.0f32; pairs * chunks * self.group * stride];
            let pp = team::Shared::new(&mut parts);
            let per = self.group * stride;
            each(pairs * chunks, &|t| {
                let (pair, c) = (t / chunks, t % chunks);
                // SAFETY: task t writes its own [t·per, (t+1)·per).
                let dst = unsafe { pp.range(t * per, (t + 1) * per) };
                self.task(
                    pair / kvh,
                    pair % kvh,
                    c * chunk_len,
                    (c + 1) * chunk_len,
                    |h, p| {
                        let x = &mut dst[h * stride..(h + 1) * stride];
                        x[0] = p.m;
                        x[1] = p.l;
                        x[2..].copy_from_slice(&p.o[..self.d]);
                    },
                );
            });
            // Merge the chunks of each (token, query head).
            for pair in 0..pairs {
                let (r, g) = (pair / kvh, pair % kvh);
                for h in 0..self.group {
                    let at = |c: usize| ((pair * chunks + c) * self.group + h) * stride;
                    let m = (0..chunks).fold(f32::NEG_INFINITY, |m, c| m.max(parts[at(c)]));
                    let o = &mut out[r * cols + (g * self.group + h) * self.d..][..self.d];
                    if m == f32::NEG_INFINITY {
                        continue;
                    }
                    let mut l = 0.0f32;
                    for c in 0..chunks {
                        let x = &parts[at(c)..at(c) + stride];
                        let w = (x[0] - m).exp();
                        l += w * x[1];
                        for (o, &v) in o.iter_mut().zip(&x[2..]) {
                            *o += w * v;
                        }
                    }
                    let inv = 1.0 / l;
                    o.iter_mut().for_each(|v| *v *= inv);
                }
            }
            out
        }

        /// Keys `[k0, k1)` (clipped to the causal range) of token `r`
        /// against the query heads of KV head `g`; `emit(h, state)` for each
        /// head `h` of the group.
        fn task(
            &self,
            r: usize,
            g: usize,
            k0: usize,
            k1: usize,
            mut emit: impl FnMut(usize, &Part),
        ) {
            let m = self.meta;
            let s = self.seq_of[r];
            let q_len = (m.q_indptr[s + 1] - m.q_indptr[s]) as usize;
            let start = m.kv_lens[s] as usize - q_len;
            let pos = start + (r - m.q_indptr[s] as usize);
            let pages = &m.page_table[m.page_indptr[s] as usize..m.page_indptr[s + 1] as usize];
            let k1 = k1.min(pos + 1);
            let mut offs = [0usize; BLOCK];
            let mut h0 = 0;
            while h0 < self.group {
                let hn = (self.group - h0).min(GMAX);
                let mut st: [Part; GMAX] = std::array::from_fn(|_| Part {
                    m: f32::NEG_INFINITY,
                    l: 0.0,
                    o: [0.0; DMAX],
                });
                let qrow = &self.q[r * self.hq * self.d..];
                let qs: [&[f32]; GMAX] = std::array::from_fn(|i| {
                    let h = g * self.group + h0 + i.min(hn - 1);
                    &qrow[h * self.d..(h + 1) * self.d]
                });
                let mut b0 = k0;
                while b0 < k1 {
                    let bn = (k1 - b0).min(BLOCK);
                    for (j, o) in offs[..bn].iter_mut().enumerate() {
                        let i = b0 + j;
                        *o = (pages[i / self.ps] as usize * self.ps + i % self.ps) * self.kvw
                            + g * self.d;
                    }
                    // SAFETY: avx512f was detected by the caller; every offset
                    // is a slot of this sequence's pages, inside the cache.
                    unsafe { self.block(&qs[..hn], &offs[..bn], &mut st[..hn]) };
                    b0 += bn;
                }
                for (i, p) in st[..hn].iter().enumerate() {
                    emit(h0 + i, p);
                }
                h0 += hn;
            }
        }

        /// One block of keys (cache offsets `offs`) folded into the states
        /// of the query heads `qs`.
        #[target_feature(enable = "avx512f")]
        unsafe fn block(&self, qs: &[&[f32]], offs: &[usize], st: &mut [Part]) {
            let nd = self.d / 16;
            let bn = offs.len();
            let mut sc = [[f32::NEG_INFINITY; BLOCK]; GMAX];
            for (j, &at) in offs.iter().enumerate() {
                let kp = self.kc.as_ptr().add(at);
                for (h, q) in qs.iter().enumerate() {
                    let mut acc = _mm512_setzero_ps();
                    for c in 0..nd {
                        acc = _mm512_fmadd_ps(
                            _mm512_loadu_ps(q.as_ptr().add(16 * c)),
                            _mm512_loadu_ps(kp.add(16 * c)),
                            acc,
                        );
                    }
                    sc[h][j] = _mm512_reduce_add_ps(acc) * self.scale;
                }
            }
            for (h, p) in st.iter_mut().enumerate() {
                let bm = sc[h][..bn].iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
                let nm = p.m.max(bm);
                if nm == f32::NEG_INFINITY {
                    continue;
                }
                // Rescale what the earlier blocks summed to the new maximum.
                let alpha = (p.m - nm).exp();
                if alpha != 1.0 {
                    p.l *= alpha;
                    p.o[..self.d].iter_mut().for_each(|v| *v *= alpha);
                }
                p.m = nm;
                let nmv = _mm512_set1_ps(nm);
                let mut lsum = _mm512_setzero_ps();
                for c in (0..bn).step_by(16) {
                    let mask: __mmask16 = if bn - c >= 16 {
                        0xffff
                    } else {
                        (1u16 << (bn - c)) - 1
                    };
                    let x = _mm512_sub_ps(_mm512_loadu_ps(sc[h].as_ptr().add(c)), nmv);
                    let e = _mm512_maskz_mov_ps(mask, exp512(x));
                    _mm512_storeu_ps(sc[h].as_mut_ptr().add(c), e);
                    lsum = _mm512_add_ps(lsum, e);
                }
                p.l += _mm512_reduce_add_ps(lsum);
            }
            for (j, &at) in offs.iter().enumerate() {
                let vp = self.vc.as_ptr().add(at);
                for c in 0..nd {
                    let v = _mm512_loadu_ps(vp.add(16 * c));
                    for (h, p) in st.iter_mut().enumerate() {
                        let o = p.o.as_mut_ptr().add(16 * c);
                        let w = _mm512_set1_ps(sc[h][j]);
                        _mm512_storeu_ps(o, _mm512_fmadd_ps(w, v, _mm512_loadu_ps(o)));
                    }
                }
            }
        }
    }

    /// `exp(x)` for `x <= 0` (softmax arguments), Cephes' single-precision
    /// polynomial after `x = n·ln2 + r`, `|r| <= ln2/2`, then `· 2^n` with
    /// `vscalefps`: within a few ulp of `expf`. Below -87.3 it returns ~0
    /// (at most 1e-38, beside the block maximum's 1).
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn exp512(x: __m512) -> __m512 {
        let x = _mm512_max_ps(x, _mm512_set1_ps(-87.3));
        let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)),
        );
        let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693_359_4), x);
        let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.121_944_4e-4), r);
        let mut p = _mm512_set1_ps(1.987_569_1e-4);
        for c in [
            1.398_199_9e-3,
            8.333_452e-3,
            4.166_579_6e-2,
            0.166_666_65,
            0.5,
        ] {
            p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
        }
        let r2 = _mm512_mul_ps(r, r);
        let p = _mm512_add_ps(_mm512_fmadd_ps(p, r2, r), _mm512_set1_ps(1.0));
        _mm512_scalef_ps(p, n)
    }
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;
    use crate::backend::KvLayout;

    /// The AVX-512 path (GQA groups, online softmax in blocks, key chunks
    /// merged for few tasks) against the portable one, on a ragged batch
    /// over scattered pages: a decode-like step (one token per sequence,
    /// long contexts: chunked) and a prefill-like one (many tokens).
    #[test]
    fn simd_attention_matches_the_portable_path() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let (ps, kvh, d, hq) = (16usize, 3usize, 64usize, 9usize);
        let layout = KvLayout {
            num_layers: 1,
            num_pages: 64,
            page_size: ps,
            kv_heads: kvh,
            head_dim: d,
        };
        let n = layout.layer_elems();
        let kv = CpuKv {
            layout,
            k: vec![(0..n).map(|_| rng.random_range(-2.0..2.0)).collect()],
            v: vec![(0..n).map(|_| rng.random_range(-1.0..1.0)).collect()],
        };
        // (kv_len, q_len) per sequence.
        for seqs in [
            vec![(300, 1)],
            vec![(5, 1), (200, 1)],
            vec![(70, 70), (130, 3)],
        ] {
            let mut meta = StepMeta {
                page_size: ps as u32,
                ..StepMeta::default()
            };
            meta.q_indptr.push(0);
            meta.page_indptr.push(0);
            let mut free: Vec<u32> = (0..64).rev().collect();
            for &(kv_len, q_len) in &seqs {
                for _ in 0..(kv_len as usize).div_ceil(ps) {
                    // Scattered pages: every other free one.
                    let p = free.remove(free.len() / 2);
                    meta.page_table.push(p);
                }
                for i in 0..q_len {
                    meta.tokens.push(0);
                    meta.positions.push(kv_len - q_len + i);
                }
                meta.kv_lens.push(kv_len);
                meta.q_indptr.push(meta.tokens.len() as u32);
                meta.page_indptr.push(meta.page_table.len() as u32);
            }
            let rows = meta.tokens.len();
            let q = CpuTensor::new(
                vec![rows, hq * d],
                (0..rows * hq * d)
                    .map(|_| rng.random_range(-1.0..1.0))
                    .collect(),
            );
            let fast = attention_with(&q, &kv, 0, &meta, 0.125, true).unwrap();
            let slow = attention_with(&q, &kv, 0, &meta, 0.125, false).unwrap();
            let err = fast
                .data
                .iter()
                .zip(&slow.data)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(err < 1e-5, "{seqs:?}: max difference {err}");
        }
    }
}
