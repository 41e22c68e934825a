//! One `qkv_attention` check case's inputs and the state either backend holds before
//! its step (norm weights, frequencies, the cached prefix). The op group and the fold
//! group both build their qkv checks on it, so it stands apart from either.

use anyhow::Result;
use rand_chacha::ChaCha8Rng;

use super::attn::{metas, Case};
use super::inputs::{randn, up};
use minisgl::backend::{AttnParams, Backend, KvLayout, StepMeta};

/// The attention parameters of case `c` (with its q / k norms where `norms`).
pub fn params<'a, T>(c: &Case, norms: bool, wq: &'a T, wk: &'a T, inv: &'a T) -> AttnParams<'a, T> {
    AttnParams {
        q_heads: c.q_heads,
        kv_heads: c.kv_heads,
        head_dim: c.head_dim,
        q_norm: norms.then_some(wq),
        k_norm: norms.then_some(wk),
        inv_freq: inv,
        eps: 1e-6,
        scale: 1.0 / (c.head_dim as f32).sqrt(),
    }
}

/// A `qkv_attention` case's steps (the prefix to cache, then the step under test), its
/// cache layout and the prefix's K and V, drawn from `rng`.
pub struct Drawn {
    pub layout: KvLayout,
    pub fill: StepMeta,
    pub attn: StepMeta,
    pub kf: Vec<f32>,
    pub vf: Vec<f32>,
}

pub fn draw(c: &Case, rng: &mut ChaCha8Rng) -> Drawn {
    let (num_pages, fill, attn) = metas(c, rng);
    let layout = KvLayout {
        num_layers: 1,
        num_pages,
        page_size: c.page_size,
        kv_heads: c.kv_heads,
        head_dim: c.head_dim,
    };
    let n = fill.tokens.len() * c.kv_heads * c.head_dim;
    let (kf, vf) = (randn(rng, n, 1.0), randn(rng, n, 1.0));
    Drawn {
        layout,
        fill,
        attn,
        kf,
        vf,
    }
}

/// What one `qkv_attention` check feeds either backend.
pub struct QkvInputs<'a> {
    pub c: &'a Case,
    pub norms: bool,
    pub layout: KvLayout,
    pub fill: &'a StepMeta,
    pub attn: &'a StepMeta,
    pub k: &'a [f32],
    pub v: &'a [f32],
    /// The qkv rows (empty where a check computes them from a product).
    pub qkv: &'a [f32],
    pub wq: &'a [f32],
    pub wk: &'a [f32],
    pub inv: &'a [f32],
}

/// One check's state on a backend before its step: the norm weights and frequencies
/// uploaded, every position of `fill` cached (the prefix), the `attn` step prepared.
pub struct Prefixed<B: Backend> {
    pub wq: B::Tensor,
    pub wk: B::Tensor,
    pub inv: B::Tensor,
    pub kv: B::Kv,
    pub st: B::Step,
}

pub fn prefixed<B: Backend>(b: &B, x: &QkvInputs<'_>) -> Result<Prefixed<B>> {
    let hd = x.c.head_dim;
    let kvw = x.c.kv_heads * hd;
    let nf = x.fill.tokens.len();
    let mut kv = b.alloc_kv(x.layout)?;
    let fs = b.prepare_step(x.fill)?;
    let (k, v) = (up(b, &[nf, kvw], x.k)?, up(b, &[nf, kvw], x.v)?);
    b.store_kv(&mut kv, 0, &k, &v, &fs)?;
    Ok(Prefixed {
        wq: up(b, &[hd], x.wq)?,
        wk: up(b, &[hd], x.wk)?,
        inv: up(b, &[hd / 2], x.inv)?,
        kv,
        st: b.prepare_step(x.attn)?,
    })
}
