//! A decoder layer's products at one decode row as one launch (`layer_chain`) against
//! the CPU's composed ops: `linear_add` (o), `rms_norm_linear_silu_mul` (gate_up),
//! `linear_add` (down), `rms_norm_linear` (the next layer's qkv). Shapes: Qwen3-0.6B's
//! and Qwen3-14B's widths, a Qwen2.5-1.5B-like layer with biases, a last layer (no
//! qkv), and a width the kernel refuses. Then the same launch with the layer's
//! attention in front (`layer_chain_attn_g*`) against the CPU's `qkv_attention` and the
//! products, over paged caches of 1 to 2,000 rows, with the cached K/V compared too; and
//! the products-only chain at two decode rows (`layer_chain_r2`), and the attention
//! chain at two sequences (`layer_chain_span_g2_r2`).

use anyhow::Result;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::attn::{metas, Case};
use super::inputs::{cache_f32, qwen3_inv_freq, randn, up};
use super::report::Report;
use minisgl::backend::cpu::CpuBackend;
use minisgl::backend::cuda::CudaBackend;
use minisgl::backend::{AttnParams, Backend, ChainInput, KvLayout, LayerChain, StepMeta};

type CpuT = <CpuBackend as Backend>::Tensor;
type GpuT = <CudaBackend as Backend>::Tensor;

/// (hidden, q width, intermediate, qkv width, biases, last layer)
type Shape = (usize, usize, usize, usize, bool, bool);

/// The same random values on both backends.
fn pair(
    rng: &mut ChaCha8Rng,
    cpu: &CpuBackend,
    gpu: &CudaBackend,
    shape: &[usize],
    std: f32,
) -> Result<(CpuT, GpuT)> {
    let v = randn(rng, shape.iter().product(), std);
    Ok((up(cpu, shape, &v)?, up(gpu, shape, &v)?))
}

/// Random values on the GPU only (what the trace launches; nothing compares them).
fn gpu_randn(rng: &mut ChaCha8Rng, gpu: &CudaBackend, shape: &[usize], std: f32) -> Result<GpuT> {
    up(gpu, shape, &randn(rng, shape.iter().product(), std))
}

/// A layer's products after its attention, and the next layer's norm and qkv, random:
/// each weight as (its CPU copy, its GPU copy), or `()` for the CPU half where nothing
/// compares against it (the trace).
struct Layer<C = CpuT> {
    w_o: (C, GpuT),
    b_o: (C, GpuT),
    post: (C, GpuT),
    w_gu: (C, GpuT),
    w_down: (C, GpuT),
    in_norm: (C, GpuT),
    w_qkv: (C, GpuT),
    b_qkv: (C, GpuT),
    bias: bool,
}

const EPS: f32 = 1e-6;

impl<C> Layer<C> {
    /// Each weight from `t(shape, std)`.
    fn build(
        (h, qd, inter, nqkv): (usize, usize, usize, usize),
        bias: bool,
        mut t: impl FnMut(&[usize], f32) -> Result<(C, GpuT)>,
    ) -> Result<Self> {
        Ok(Layer {
            w_o: t(&[h, qd], 0.03)?,
            b_o: t(&[h], 0.5)?,
            post: t(&[h], 1.0)?,
            w_gu: t(&[2 * inter, h], 0.05)?,
            w_down: t(&[h, inter], 0.03)?,
            in_norm: t(&[h], 1.0)?,
            w_qkv: t(&[nqkv, h], 0.05)?,
            b_qkv: t(&[nqkv], 0.5)?,
            bias,
        })
    }

    fn chain<'a>(&'a self, input: ChainInput<'a, GpuT>, last: bool) -> LayerChain<'a, GpuT> {
        let b_qkv = self.bias.then_some(&self.b_qkv.1);
        LayerChain {
            input,
            w_o: &self.w_o.1,
            b_o: self.bias.then_some(&self.b_o.1),
            post_norm: &self.post.1,
            w_gate_up: &self.w_gu.1,
            w_down: &self.w_down.1,
            next: (!last).then_some((&self.in_norm.1, &self.w_qkv.1, b_qkv)),
            eps: EPS,
        }
    }
}

impl Layer<()> {
    /// The GPU half only: the trace times launches and compares nothing (a CPU copy of
    /// each of its layers was ~1.3 GB of host memory at Qwen3-14B's shape).
    fn random_gpu(
        rng: &mut ChaCha8Rng,
        gpu: &CudaBackend,
        dims: (usize, usize, usize, usize),
    ) -> Result<Self> {
        Self::build(dims, false, |shape, std| {
            Ok(((), gpu_randn(rng, gpu, shape, std)?))
        })
    }
}

impl Layer {
    #[allow(clippy::too_many_arguments)]
    fn random(
        rng: &mut ChaCha8Rng,
        cpu: &CpuBackend,
        gpu: &CudaBackend,
        h: usize,
        qd: usize,
        inter: usize,
        nqkv: usize,
        bias: bool,
    ) -> Result<Self> {
        Self::build((h, qd, inter, nqkv), bias, |shape, std| {
            pair(rng, cpu, gpu, shape, std)
        })
    }

    /// The reference: the CPU's separate ops (o, gate_up, down) on the residual `r`.
    fn cpu_products(&self, cpu: &CpuBackend, attn: &CpuT, r: &mut CpuT) -> Result<()> {
        cpu.linear_add(attn, &self.w_o.0, self.bias.then_some(&self.b_o.0), r)?;
        let act = cpu.rms_norm_linear_silu_mul(r, &self.post.0, EPS, &self.w_gu.0)?;
        Ok(cpu.linear_add(&act, &self.w_down.0, None, r)?)
    }

    /// The next layer's qkv of the residual `r`, on the CPU.
    fn cpu_next_qkv(&self, cpu: &CpuBackend, r: &CpuT) -> Result<CpuT> {
        let b = self.bias.then_some(&self.b_qkv.0);
        Ok(cpu.rms_norm_linear(r, &self.in_norm.0, EPS, &self.w_qkv.0, b)?)
    }
}

/// A chain launch against the CPU's reference: `layer_chain_ok` must answer `want` (on
/// sm_90 a kernel that did not load fails here: a check that passes without its subject
/// is no check); where it runs, the residual and the next qkv are compared. Whether it
/// ran.
#[allow(clippy::too_many_arguments)]
fn run_against(
    cpu: &CpuBackend,
    gpu: &CudaBackend,
    rep: &mut Report,
    (group, what): (&'static str, &str),
    want: bool,
    chain: &LayerChain<'_, GpuT>,
    (kv, step): (
        &mut <CudaBackend as Backend>::Kv,
        &<CudaBackend as Backend>::Step,
    ),
    rg: &mut GpuT,
    (rc, qkv_c): (&CpuT, Option<&CpuT>),
) -> Result<bool> {
    const T: f64 = 1e-2;
    let on = gpu.layer_chain_ok(rg, chain, kv, step);
    rep.fact(
        group,
        format!("{what} runs"),
        on == want,
        format!("layer_chain_ok answered {on}, expected {want}"),
    );
    if !on {
        return Ok(false);
    }
    let qkv_g = gpu.layer_chain(chain, kv, step, rg)?;
    let residual = format!("{what} residual");
    rep.check(group, residual, &gpu.to_host(rg)?, &cpu.to_host(rc)?, T);
    match (qkv_g, qkv_c) {
        (Some(g), Some(c)) => {
            let (g, c) = (gpu.to_host(&g)?, cpu.to_host(c)?);
            rep.check(group, format!("{what} qkv"), &g, &c, T);
        }
        (None, None) => {}
        (g, c) => rep.fact(
            group,
            format!("{what} qkv"),
            false,
            format!(
                "returned a qkv: {}, expected one: {}",
                g.is_some(),
                c.is_some()
            ),
        ),
    }
    Ok(true)
}

/// One decode row of one sequence at position 0 of a one-page cache: what the
/// products-only chain is asked with (it reads neither).
fn one_row<B: Backend>(b: &B) -> Result<(B::Kv, B::Step)> {
    let layout = KvLayout {
        num_layers: 1,
        num_pages: 1,
        page_size: 16,
        kv_heads: 1,
        head_dim: 128,
    };
    let meta = StepMeta {
        tokens: vec![0],
        positions: vec![0],
        slots: vec![0],
        q_indptr: vec![0, 1],
        kv_lens: vec![1],
        page_table: vec![0],
        page_indptr: vec![0, 1],
        sample_rows: vec![0],
        page_size: 16,
        ..Default::default()
    };
    Ok((b.alloc_kv(layout)?, b.prepare_step(&meta)?))
}

pub fn run(cpu: &CpuBackend, gpu: &CudaBackend, seed: u64, rep: &mut Report) -> Result<()> {
    products(cpu, gpu, seed, rep)?;
    rows(cpu, gpu, seed, rep)?;
    attention(cpu, gpu, seed, rep)?;
    span(cpu, gpu, seed, rep)?;
    span_rows(cpu, gpu, seed, rep)?;
    // Any LC_TRACE entry builds the trace in (the kernel tests #ifdef LC_TRACE).
    use minisgl::backend::cuda::nvrtc::{parse_defines, DEFINES_ENV};
    let defines = std::env::var(DEFINES_ENV).unwrap_or_default();
    let traced =
        parse_defines(&defines).is_ok_and(|d| d.iter().any(|o| o.starts_with("-DLC_TRACE=")));
    if traced {
        trace(gpu, seed, rep)?;
    }
    Ok(())
}

fn products(cpu: &CpuBackend, gpu: &CudaBackend, seed: u64, rep: &mut Report) -> Result<()> {
    let rng = &mut ChaCha8Rng::seed_from_u64(seed ^ 0x1c);
    let (mut kv, step) = one_row(gpu)?;
    let shapes: [Shape; 5] = [
        (1024, 2048, 3072, 4096, false, false),
        (1024, 2048, 3072, 4096, false, true),
        (1536, 1536, 8960, 2048, true, false),
        (5120, 5120, 17408, 7168, false, false),
        // 64 is not a multiple of 256: the separate products run.
        (64, 64, 128, 128, false, false),
    ];
    for (h, qd, inter, nqkv, bias, last) in shapes {
        let what = format!("h={h} q={qd} inter={inter} qkv={nqkv} bias={bias} last={last}");
        let attn = pair(rng, cpu, gpu, &[1, qd], 1.0)?;
        let (mut rc, mut rg) = pair(rng, cpu, gpu, &[1, h], 1.0)?;
        let layer = Layer::random(rng, cpu, gpu, h, qd, inter, nqkv, bias)?;
        layer.cpu_products(cpu, &attn.0, &mut rc)?;
        let qkv_c = (!last).then(|| layer.cpu_next_qkv(cpu, &rc)).transpose()?;
        let chain = layer.chain(ChainInput::Attn(&attn.1), last);
        let want = h.is_multiple_of(256) && gpu.layer_chain_on() && gpu.dev.cc == (9, 0);
        let ran = run_against(
            cpu,
            gpu,
            rep,
            ("layer_chain", &what),
            want,
            &chain,
            (&mut kv, &step),
            &mut rg,
            (&rc, qkv_c.as_ref()),
        )?;
        if !ran {
            continue;
        }
        // Twice more on the same residuals: the grid barrier's counters must come back
        // to their start.
        let again = Again(cpu, gpu, &layer, &chain, &attn.0);
        again.run(
            rep,
            ("layer_chain", &what),
            2,
            (&mut kv, &step),
            &mut rg,
            &mut rc,
        )?;
    }
    Ok(())
}

/// A chain that ran once, with the reference's inputs, to launch again on the same
/// residuals.
struct Again<'a>(
    &'a CpuBackend,
    &'a CudaBackend,
    &'a Layer,
    &'a LayerChain<'a, GpuT>,
    &'a CpuT,
);

impl Again<'_> {
    /// `times` more launches on the same residuals, and the CPU's products as often;
    /// then the residuals compared.
    fn run(
        &self,
        rep: &mut Report,
        (group, what): (&'static str, &str),
        times: usize,
        (kv, step): (
            &mut <CudaBackend as Backend>::Kv,
            &<CudaBackend as Backend>::Step,
        ),
        rg: &mut GpuT,
        rc: &mut CpuT,
    ) -> Result<()> {
        let Again(cpu, gpu, layer, chain, attn) = *self;
        for _ in 0..times {
            gpu.layer_chain(chain, kv, step, rg)?;
            layer.cpu_products(cpu, attn, rc)?;
        }
        rep.check(
            group,
            format!("{what} residual after {times} more launches"),
            &gpu.to_host(rg)?,
            &cpu.to_host(rc)?,
            2e-2,
        );
        Ok(())
    }
}

/// The products-only chain at two decode rows (`layer_chain_r2`, allowed here whatever
/// `MINISGL_CHAIN_ROWS` says) against the CPU's separate ops on the same rows. Each shape
/// names the most rows its plan fits (x is R rows of the intermediate width): past that,
/// and at three rows (no build), the chain must refuse and the separate products run. A
/// fifth shape's x fits no second row.
fn rows(cpu: &CpuBackend, gpu: &CudaBackend, seed: u64, rep: &mut Report) -> Result<()> {
    let rng = &mut ChaCha8Rng::seed_from_u64(seed ^ 0x2d);
    let (mut kv, step) = one_row(gpu)?;
    let was = gpu.chain_rows();
    gpu.set_chain_rows(minisgl::backend::cuda::device::CHAIN_MAX_ROWS);
    // (shape, the most rows it plans on 132 SMs)
    let shapes: [(Shape, usize); 5] = [
        ((1024, 2048, 3072, 4096, false, false), 2),
        ((1024, 2048, 3072, 4096, false, true), 2),
        ((1536, 1536, 8960, 2048, true, false), 2),
        ((5120, 5120, 17408, 7168, false, false), 2),
        ((1024, 1024, 45056, 1024, false, false), 1),
    ];
    let sm90 = gpu.layer_chain_on() && gpu.dev.cc == (9, 0) && gpu.dev.num_sms == 132;
    let out = (|| -> Result<()> {
        for ((h, qd, inter, nqkv, bias, last), most) in shapes {
            let layer = Layer::random(rng, cpu, gpu, h, qd, inter, nqkv, bias)?;
            for m in 2..=3 {
                let what = format!(
                    "{m} rows, h={h} q={qd} inter={inter} qkv={nqkv} bias={bias} last={last}"
                );
                let attn = pair(rng, cpu, gpu, &[m, qd], 1.0)?;
                let (mut rc, mut rg) = pair(rng, cpu, gpu, &[m, h], 1.0)?;
                layer.cpu_products(cpu, &attn.0, &mut rc)?;
                let qkv_c = (!last).then(|| layer.cpu_next_qkv(cpu, &rc)).transpose()?;
                let chain = layer.chain(ChainInput::Attn(&attn.1), last);
                let ran = run_against(
                    cpu,
                    gpu,
                    rep,
                    ("layer_chain rows", &what),
                    sm90 && m <= most,
                    &chain,
                    (&mut kv, &step),
                    &mut rg,
                    (&rc, qkv_c.as_ref()),
                )?;
                if !ran {
                    continue;
                }
                // Once more on the same rows: the barrier's count must be back at a
                // multiple of the grid.
                let again = Again(cpu, gpu, &layer, &chain, &attn.0);
                let group = ("layer_chain rows", what.as_str());
                again.run(rep, group, 1, (&mut kv, &step), &mut rg, &mut rc)?;
            }
        }
        Ok(())
    })();
    gpu.set_chain_rows(was);
    out
}

/// The products-only chain over norms folded into gate_up's and qkv's weights
/// (`fold_norm`, the kernel's `folded`: x left raw, each row's factor on the f32
/// products) at one and two rows, against the CPU's unfolded separate ops; the same
/// layer unfolded first, so the log shows what the fold's rounding costs beside it.
/// Called by the fold group, which turns the fold on.
pub fn folded(cpu: &CpuBackend, gpu: &CudaBackend, seed: u64, rep: &mut Report) -> Result<()> {
    let rng = &mut ChaCha8Rng::seed_from_u64(seed ^ 0x3e);
    let (mut kv, step) = one_row(gpu)?;
    let was = gpu.chain_rows();
    gpu.set_chain_rows(minisgl::backend::cuda::device::CHAIN_MAX_ROWS);
    let sm90 = gpu.layer_chain_on() && gpu.dev.cc == (9, 0) && gpu.dev.num_sms == 132;
    let out = (|| -> Result<()> {
        for (h, qd, inter, nqkv, bias) in [
            (1024, 2048, 3072, 4096, false),
            (1536, 1536, 8960, 2048, true),
        ] {
            let mut layer = Layer::random(rng, cpu, gpu, h, qd, inter, nqkv, bias)?;
            let mut cases = Vec::new();
            for m in 1..=2 {
                let attn = pair(rng, cpu, gpu, &[m, qd], 1.0)?;
                let r = randn(rng, m * h, 1.0);
                let (mut rc, rg, rg_fold) = (
                    up(cpu, &[m, h], &r)?,
                    up(gpu, &[m, h], &r)?,
                    up(gpu, &[m, h], &r)?,
                );
                layer.cpu_products(cpu, &attn.0, &mut rc)?;
                let qkv_c = layer.cpu_next_qkv(cpu, &rc)?;
                cases.push((m, attn, rc, rg, rg_fold, qkv_c));
            }
            for folded in [false, true] {
                if folded {
                    let post = gpu.fold_norm(&mut layer.w_gu.1, &layer.post.1)?;
                    let inn = gpu.fold_norm(&mut layer.w_qkv.1, &layer.in_norm.1)?;
                    let (Some(post), Some(inn)) = (post, inn) else {
                        rep.fact(
                            "fold",
                            format!("fold_norm chain h={h}"),
                            false,
                            "no unit norm back".into(),
                        );
                        return Ok(());
                    };
                    (layer.post.1, layer.in_norm.1) = (post, inn);
                }
                for (m, attn, rc, rg, rg_fold, qkv_c) in cases.iter_mut() {
                    let what = format!(
                        "folded={folded} {m} rows, h={h} q={qd} inter={inter} qkv={nqkv} bias={bias}"
                    );
                    let chain = layer.chain(ChainInput::Attn(&attn.1), false);
                    run_against(
                        cpu,
                        gpu,
                        rep,
                        ("fold", &what),
                        sm90,
                        &chain,
                        (&mut kv, &step),
                        if folded { rg_fold } else { rg },
                        (rc, Some(qkv_c)),
                    )?;
                }
            }
        }
        Ok(())
    })();
    gpu.set_chain_rows(was);
    out
}

fn attn_params<'a, T>(
    hq: usize,
    hkv: usize,
    norms: bool,
    wq: &'a T,
    wk: &'a T,
    inv: &'a T,
) -> AttnParams<'a, T> {
    AttnParams {
        q_heads: hq,
        kv_heads: hkv,
        head_dim: 128,
        q_norm: norms.then_some(wq),
        k_norm: norms.then_some(wk),
        inv_freq: inv,
        eps: EPS,
        scale: 1.0 / (128f32).sqrt(),
    }
}

/// One sequence's step of one new token after `ctx - 1` cached rows, in 16-row pages of
/// head_dim 128 in random order: the cache's layout, the step that fills the prefix,
/// and the decode step.
fn one_seq_cache(
    rng: &mut ChaCha8Rng,
    name: &'static str,
    hq: usize,
    hkv: usize,
    ctx: usize,
) -> (KvLayout, StepMeta, StepMeta) {
    seqs_cache(rng, name, hq, hkv, &[ctx])
}

/// As [`one_seq_cache`] for several sequences, of `ctxs[i]` rows after the step.
fn seqs_cache(
    rng: &mut ChaCha8Rng,
    name: &'static str,
    hq: usize,
    hkv: usize,
    ctxs: &[usize],
) -> (KvLayout, StepMeta, StepMeta) {
    let c = Case {
        name,
        page_size: 16,
        page_runs: false,
        head_dim: 128,
        q_heads: hq,
        kv_heads: hkv,
        seqs: ctxs.iter().map(|&ctx| (ctx - 1, 1)).collect(),
    };
    let (num_pages, fill, step) = metas(&c, rng);
    let layout = KvLayout {
        num_layers: 1,
        num_pages,
        page_size: 16,
        kv_heads: hkv,
        head_dim: 128,
    };
    (layout, fill, step)
}

/// An attention-in-front case: (name, q heads, kv heads, hidden, intermediate, q/k
/// norms, biases, contexts after the step).
type AttnShape = (
    &'static str,
    usize,
    usize,
    usize,
    usize,
    bool,
    bool,
    &'static [usize],
);

fn attention(cpu: &CpuBackend, gpu: &CudaBackend, seed: u64, rep: &mut Report) -> Result<()> {
    let rng = &mut ChaCha8Rng::seed_from_u64(seed ^ 0xa1c);
    const HD: usize = 128;
    let shapes: [AttnShape; 5] = [
        // Contexts of one row (the new one only), a part of a split, five splits, and
        // the 16-split cap; then splits of more K/V tiles than the ring stages them at
        // once (lc_attention): 3,201 rows (four-tile splits, the last split's three tiles
        // with the new row in the third, copied before q is ready) and 9,000 (nine-tile
        // splits, the new row in a tile copied after).
        (
            "qwen3-0.6b",
            16,
            8,
            1024,
            3072,
            true,
            false,
            &[1, 40, 300, 2000, 3201, 9000],
        ),
        (
            "group 4, biases, no q/k norm",
            8,
            2,
            1024,
            2048,
            false,
            true,
            &[129, 1100, 5000],
        ),
        ("group 3", 6, 2, 1024, 2048, true, false, &[77]),
        ("group 1", 8, 8, 1024, 2048, false, false, &[513]),
        // A group of 5: past the kernel's 4, the separate attention runs.
        ("group 5", 10, 2, 1024, 2048, true, false, &[64]),
    ];
    let inv = qwen3_inv_freq(HD);
    let invf = (up(cpu, &[HD / 2], &inv)?, up(gpu, &[HD / 2], &inv)?);
    for (name, hq, hkv, h, inter, norms, bias, ctxs) in shapes {
        let (qd, cols) = (hq * HD, (hq + 2 * hkv) * HD);
        for &ctx in ctxs {
            let what = format!("{name} {hq}q/{hkv}kv h={h} ctx={ctx}");
            let (layout, fill, step) = one_seq_cache(rng, name, hq, hkv, ctx);
            let nf = fill.tokens.len();
            let k = pair(rng, cpu, gpu, &[nf, hkv * HD], 1.0)?;
            let v = pair(rng, cpu, gpu, &[nf, hkv * HD], 1.0)?;
            let qkv = pair(rng, cpu, gpu, &[1, cols], 1.0)?;
            let wq = pair(rng, cpu, gpu, &[HD], 1.0)?;
            let wk = pair(rng, cpu, gpu, &[HD], 1.0)?;
            let (mut rc, mut rg) = pair(rng, cpu, gpu, &[1, h], 1.0)?;
            let layer = Layer::random(rng, cpu, gpu, h, qd, inter, cols, bias)?;

            // The CPU: the prefix cached, qkv_attention, then the separate products.
            let mut kvc = cpu.alloc_kv(layout)?;
            cpu.store_kv(&mut kvc, 0, &k.0, &v.0, &cpu.prepare_step(&fill)?)?;
            let sc = cpu.prepare_step(&step)?;
            let pc = attn_params(hq, hkv, norms, &wq.0, &wk.0, &invf.0);
            let attn_c = cpu.qkv_attention(qkv.0, &mut kvc, 0, &sc, &pc)?;
            layer.cpu_products(cpu, &attn_c, &mut rc)?;
            let qkv_c = layer.cpu_next_qkv(cpu, &rc)?;

            // The GPU: the same prefix, then one chain launch from qkv.
            let mut kvg = gpu.alloc_kv(layout)?;
            gpu.store_kv(&mut kvg, 0, &k.1, &v.1, &gpu.prepare_step(&fill)?)?;
            let sg = gpu.prepare_step(&step)?;
            let pg = attn_params(hq, hkv, norms, &wq.1, &wk.1, &invf.1);
            let input = ChainInput::Qkv {
                qkv: &qkv.1,
                layer: 0,
                params: &pg,
            };
            let chain = layer.chain(input, false);
            let want = hq / hkv <= 4
                && gpu.layer_chain_on()
                && gpu.chain_attn_on()
                && gpu.dev.cc == (9, 0);
            let ran = run_against(
                cpu,
                gpu,
                rep,
                ("chain_attn", &what),
                want,
                &chain,
                (&mut kvg, &sg),
                &mut rg,
                (&rc, Some(&qkv_c)),
            )?;
            if !ran {
                continue;
            }
            // The new row's K (normed, rotated) and V in the cache, as the CPU wrote them.
            let kvw = hkv * HD;
            let slot = step.slots[0] as usize * kvw;
            let kg = &cache_f32(gpu, &kvg.k[0])?[slot..slot + kvw];
            let vg = &cache_f32(gpu, &kvg.v[0])?[slot..slot + kvw];
            let kc = &kvc.k[0][slot..slot + kvw];
            rep.check("chain_attn", format!("{what} cached K"), kg, kc, 1e-2);
            let vc = &kvc.v[0][slot..slot + kvw];
            rep.check("chain_attn", format!("{what} cached V"), vg, vc, 0.0);
        }
    }
    Ok(())
}

/// `n` random layers over caches the fill step `fill` (`nf` rows) wrote: each layer's
/// random K and V rows into the CPU cache `kvc` and every GPU cache in `kvg`; the layers
/// and their q/k norm weights.
#[allow(clippy::too_many_arguments)]
fn span_layers(
    rng: &mut ChaCha8Rng,
    cpu: &CpuBackend,
    gpu: &CudaBackend,
    (hq, hkv, h, inter, bias): (usize, usize, usize, usize, bool),
    n: usize,
    (nf, fc, fg): (
        usize,
        &<CpuBackend as Backend>::Step,
        &<CudaBackend as Backend>::Step,
    ),
    kvc: &mut <CpuBackend as Backend>::Kv,
    kvg: &mut [&mut <CudaBackend as Backend>::Kv],
) -> Result<(Vec<Layer>, Vec<QkNorms>)> {
    const HD: usize = 128;
    let (qd, cols) = (hq * HD, (hq + 2 * hkv) * HD);
    let mut layers = Vec::with_capacity(n);
    let mut norms_w = Vec::with_capacity(n);
    for l in 0..n {
        let k = pair(rng, cpu, gpu, &[nf, hkv * HD], 1.0)?;
        let v = pair(rng, cpu, gpu, &[nf, hkv * HD], 1.0)?;
        cpu.store_kv(kvc, l, &k.0, &v.0, fc)?;
        for g in kvg.iter_mut() {
            gpu.store_kv(g, l, &k.1, &v.1, fg)?;
        }
        norms_w.push((
            pair(rng, cpu, gpu, &[HD], 1.0)?,
            pair(rng, cpu, gpu, &[HD], 1.0)?,
        ));
        layers.push(Layer::random(rng, cpu, gpu, h, qd, inter, cols, bias)?);
    }
    Ok((layers, norms_w))
}

/// A layer's q and k norm weights, each on both backends.
type QkNorms = ((CpuT, GpuT), (CpuT, GpuT));

/// The CPU reference of a span: each layer's attention and products on the residual `r`,
/// then its next qkv (the last one's is returned).
#[allow(clippy::too_many_arguments)]
fn cpu_span(
    cpu: &CpuBackend,
    layers: &[Layer],
    norms_w: &[QkNorms],
    (hq, hkv, norms): (usize, usize, bool),
    inv: &CpuT,
    kv: &mut <CpuBackend as Backend>::Kv,
    step: &<CpuBackend as Backend>::Step,
    mut qkv: CpuT,
    r: &mut CpuT,
) -> Result<CpuT> {
    for (l, layer) in layers.iter().enumerate() {
        let (wq, wk) = &norms_w[l];
        let p = attn_params(hq, hkv, norms, &wq.0, &wk.0, inv);
        let attn = cpu.qkv_attention(qkv, kv, l, step, &p)?;
        layer.cpu_products(cpu, &attn, r)?;
        qkv = layer.cpu_next_qkv(cpu, r)?;
    }
    Ok(qkv)
}

/// The span's chains: the first layer from `qkv0`, each later one chained to the one
/// before (the last one the model's last where `model_last`).
fn span_chains<'a>(
    layers: &'a [Layer],
    qkv0: &'a GpuT,
    params: &'a [AttnParams<'a, GpuT>],
    model_last: bool,
) -> Vec<LayerChain<'a, GpuT>> {
    let n = layers.len();
    layers
        .iter()
        .enumerate()
        .map(|(l, layer)| {
            let input = match l {
                0 => ChainInput::Qkv {
                    qkv: qkv0,
                    layer: 0,
                    params: &params[0],
                },
                _ => ChainInput::Chained {
                    layer: l,
                    params: &params[l],
                },
            };
            layer.chain(input, model_last && l + 1 == n)
        })
        .collect()
}

/// A span check's case: the layers' heads and widths, q/k norms, biases, layers, each
/// sequence's context after the step, and whether the last layer is the model's last.
#[derive(Clone, Copy)]
struct SpanCase {
    name: &'static str,
    hq: usize,
    hkv: usize,
    h: usize,
    inter: usize,
    norms: bool,
    bias: bool,
    layers: usize,
    ctxs: &'static [usize],
    model_last: bool,
}

impl SpanCase {
    /// Qwen3-0.6B's layer (16 q / 8 kv heads, hidden 1024, intermediate 3072, q/k norms).
    const fn qwen3_06b(name: &'static str, layers: usize, ctxs: &'static [usize]) -> Self {
        SpanCase {
            name,
            hq: 16,
            hkv: 8,
            h: 1024,
            inter: 3072,
            norms: true,
            bias: false,
            layers,
            ctxs,
            model_last: false,
        }
    }

    const fn model_last(self) -> Self {
        SpanCase {
            model_last: true,
            ..self
        }
    }

    fn what(&self) -> String {
        let SpanCase {
            name, hq, hkv, h, ..
        } = *self;
        let ctx = match self.ctxs {
            [one] => one.to_string(),
            many => format!("{many:?}"),
        };
        format!(
            "{name} {hq}q/{hkv}kv h={h} ctx={ctx} {} layers",
            self.layers
        )
    }
}

/// A span case's inputs on both backends and the CPU's answer: the layers with their
/// q/k norms; one CPU cache and `gpu_caches` GPU caches filled with the same rows; the
/// decode step; the first qkv rows (GPU) and residual rows (as values); the CPU's
/// residual and next qkv after running the layers one after the other on every sequence.
struct SpanFixture {
    layers: Vec<Layer>,
    norms_w: Vec<QkNorms>,
    kvc: <CpuBackend as Backend>::Kv,
    kvg: Vec<<CudaBackend as Backend>::Kv>,
    step: StepMeta,
    sg: <CudaBackend as Backend>::Step,
    qkv_g0: GpuT,
    r0: Vec<f32>,
    rc: CpuT,
    qkv_c: CpuT,
}

fn span_fixture(
    rng: &mut ChaCha8Rng,
    cpu: &CpuBackend,
    gpu: &CudaBackend,
    c: &SpanCase,
    inv: &CpuT,
    gpu_caches: usize,
) -> Result<SpanFixture> {
    const HD: usize = 128;
    let (m, cols) = (c.ctxs.len(), (c.hq + 2 * c.hkv) * HD);
    let (mut layout, fill, step) = seqs_cache(rng, c.name, c.hq, c.hkv, c.ctxs);
    layout.num_layers = c.layers;
    let nf = fill.tokens.len();
    let mut kvc = cpu.alloc_kv(layout)?;
    let mut kvg = (0..gpu_caches)
        .map(|_| gpu.alloc_kv(layout))
        .collect::<Result<Vec<_>, _>>()?;
    let (fc, fg) = (cpu.prepare_step(&fill)?, gpu.prepare_step(&fill)?);
    let (layers, norms_w) = span_layers(
        rng,
        cpu,
        gpu,
        (c.hq, c.hkv, c.h, c.inter, c.bias),
        c.layers,
        (nf, &fc, &fg),
        &mut kvc,
        &mut kvg.iter_mut().collect::<Vec<_>>(),
    )?;
    let (qkv_c0, qkv_g0) = pair(rng, cpu, gpu, &[m, cols], 1.0)?;
    let r0 = randn(rng, m * c.h, 1.0);
    let mut rc = up(cpu, &[m, c.h], &r0)?;
    let sc = cpu.prepare_step(&step)?;
    let heads = (c.hq, c.hkv, c.norms);
    let qkv_c = cpu_span(
        cpu, &layers, &norms_w, heads, inv, &mut kvc, &sc, qkv_c0, &mut rc,
    )?;
    let sg = gpu.prepare_step(&step)?;
    Ok(SpanFixture {
        layers,
        norms_w,
        kvc,
        kvg,
        step,
        sg,
        qkv_g0,
        r0,
        rc,
        qkv_c,
    })
}

/// Each layer's attention parameters on the GPU (its q/k norms from `norms_w`).
fn span_params<'a>(
    c: &SpanCase,
    norms_w: &'a [QkNorms],
    inv: &'a GpuT,
) -> Vec<AttnParams<'a, GpuT>> {
    norms_w
        .iter()
        .map(|(wq, wk)| attn_params(c.hq, c.hkv, c.norms, &wq.1, &wk.1, inv))
        .collect()
}

/// Several layers in one launch (`layer_span`), each from the qkv the one before it
/// wrote, against the CPU running the same layers one after the other: the residual,
/// the last layer's next qkv, and each layer's new K/V row in its own cache. The launch
/// must take all of them where the group is 2 or less, one layer at a time past it.
fn span(cpu: &CpuBackend, gpu: &CudaBackend, seed: u64, rep: &mut Report) -> Result<()> {
    let rng = &mut ChaCha8Rng::seed_from_u64(seed ^ 0x5a4);
    const HD: usize = 128;
    let group1 = SpanCase {
        hq: 8,
        inter: 2048,
        norms: false,
        bias: true,
        ..SpanCase::qwen3_06b("group 1, biases", 4, &[1100])
    };
    let group4 = SpanCase {
        hq: 8,
        hkv: 2,
        inter: 2048,
        ..SpanCase::qwen3_06b("group 4", 2, &[129])
    };
    let cases = [
        SpanCase::qwen3_06b("qwen3-0.6b", 3, &[300]),
        SpanCase::qwen3_06b("qwen3-0.6b, long context", 2, &[6000]),
        SpanCase::qwen3_06b("qwen3-0.6b, model's last layer", 2, &[40]).model_last(),
        group1,
        group4,
    ];
    let inv = qwen3_inv_freq(HD);
    let invf = (up(cpu, &[HD / 2], &inv)?, up(gpu, &[HD / 2], &inv)?);
    for c in &cases {
        let (n, h, hkv, model_last, what) = (c.layers, c.h, c.hkv, c.model_last, c.what());
        // A second GPU cache for the same layers launched one at a time.
        let mut f = span_fixture(rng, cpu, gpu, c, &invf.0, 2)?;
        let mut rg = up(gpu, &[1, h], &f.r0)?;
        let mut r1 = up(gpu, &[1, h], &f.r0)?;
        let pg = span_params(c, &f.norms_w, &invf.1);
        let chains = span_chains(&f.layers, &f.qkv_g0, &pg, model_last);
        let (kvg, kv1) = match f.kvg.as_mut_slice() {
            [a, b] => (a, b),
            _ => unreachable!("two GPU caches asked for"),
        };
        let want = if c.hq / hkv <= 2 { n } else { 1 };
        let on = gpu.layer_chain_on() && gpu.chain_attn_on() && gpu.dev.cc == (9, 0);
        let took = gpu.layer_span_len(&rg, &chains, kvg, &f.sg);
        rep.fact(
            "chain_span",
            format!("{what} takes {want}"),
            !on || took == want,
            format!("layer_span_len answered {took}"),
        );
        if !on || took < 2 {
            continue;
        }
        let qkv_g = gpu.layer_span(&chains, kvg, &f.sg, &mut rg)?;
        // The same layers one launch each, each from the qkv the one before returned:
        // the span does the same arithmetic, so it must agree to f32 noise.
        let mut q1: Option<GpuT> = None;
        for (l, layer) in f.layers.iter().enumerate() {
            let input = ChainInput::Qkv {
                qkv: q1.as_ref().unwrap_or(&f.qkv_g0),
                layer: l,
                params: &pg[l],
            };
            let chain = layer.chain(input, model_last && l + 1 == n);
            q1 = gpu.layer_chain(&chain, kv1, &f.sg, &mut r1)?;
        }
        const SAME: f64 = 1e-6;
        let one = format!("{what} residual against a launch a layer");
        rep.check(
            "chain_span",
            one,
            &gpu.to_host(&rg)?,
            &gpu.to_host(&r1)?,
            SAME,
        );
        // Against the CPU the bf16 roundings of each layer's qkv, taken in another
        // order, compound: ~0.5% a layer on these random weights (a layer's new K row
        // 0.16%, 0.6%, 0.75%, 0.95% off at layers 0-3, measured 2026-12-04).
        let t = 5e-3 * (n + 1) as f64;
        let residual = format!("{what} residual");
        rep.check(
            "chain_span",
            residual,
            &gpu.to_host(&rg)?,
            &cpu.to_host(&f.rc)?,
            t,
        );
        match qkv_g {
            Some(g) if !model_last => {
                let g = gpu.to_host(&g)?;
                let same = gpu.to_host(q1.as_ref().expect("a qkv per layer"))?;
                let one = format!("{what} qkv against a launch a layer");
                rep.check("chain_span", one, &g, &same, SAME);
                let cq = cpu.to_host(&f.qkv_c)?;
                rep.check("chain_span", format!("{what} qkv"), &g, &cq, t);
            }
            None if model_last => {}
            g => rep.fact(
                "chain_span",
                format!("{what} qkv"),
                false,
                format!(
                    "returned a qkv: {}, after the model's last layer: {model_last}",
                    g.is_some()
                ),
            ),
        }
        // Each layer's new row of K (normed, rotated) and V in its own cache.
        let kvw = hkv * HD;
        let slot = f.step.slots[0] as usize * kvw;
        for l in 0..n {
            let kg = &cache_f32(gpu, &kvg.k[l])?[slot..slot + kvw];
            let vg = &cache_f32(gpu, &kvg.v[l])?[slot..slot + kvw];
            let kc = &f.kvc.k[l][slot..slot + kvw];
            let vc = &f.kvc.v[l][slot..slot + kvw];
            rep.check(
                "chain_span",
                format!("{what} layer {l} cached K"),
                kg,
                kc,
                t,
            );
            rep.check(
                "chain_span",
                format!("{what} layer {l} cached V"),
                vg,
                vc,
                t,
            );
            let k1 = &cache_f32(gpu, &kv1.k[l])?[slot..slot + kvw];
            let v1 = &cache_f32(gpu, &kv1.v[l])?[slot..slot + kvw];
            let one = format!("{what} layer {l} cached K, V against a launch a layer");
            rep.check(
                "chain_span",
                one,
                &[kg, vg].concat(),
                &[k1, v1].concat(),
                SAME,
            );
        }
    }
    Ok(())
}

/// The attention chain at several sequences (`layer_chain_span_g2_r2`): 1-3 layers in
/// one launch over two sequences of different contexts, against the CPU running the same
/// layers one after the other on both rows (the residuals, the last layer's next qkv,
/// each layer's new K/V rows), and once more from the same inputs (the grid barrier's
/// count and the tickets must be back where they started). Three sequences, a group past
/// 2, or `MINISGL_CHAIN_ATTN_ROWS=1` must be refused.
fn span_rows(cpu: &CpuBackend, gpu: &CudaBackend, seed: u64, rep: &mut Report) -> Result<()> {
    let rng = &mut ChaCha8Rng::seed_from_u64(seed ^ 0x5a42);
    const HD: usize = 128;
    let q = SpanCase::qwen3_06b;
    let group1 = SpanCase {
        hq: 8,
        inter: 2048,
        norms: false,
        bias: true,
        ..q("group 1, biases", 2, &[1100, 129])
    };
    let group4 = SpanCase {
        hq: 8,
        hkv: 2,
        inter: 2048,
        ..q("group 4", 2, &[129, 64])
    };
    // (case, the attention rows setting)
    let cases = [
        (q("qwen3-0.6b", 3, &[300, 41]), 2),
        (q("qwen3-0.6b, one layer", 1, &[1, 2000]), 2),
        (q("qwen3-0.6b, long contexts", 2, &[6000, 3201]), 2),
        (
            q("qwen3-0.6b, model's last layer", 2, &[17, 17]).model_last(),
            2,
        ),
        (group1, 2),
        // Refused: a group of 4, three sequences, the rows setting at 1.
        (group4, 2),
        (q("three sequences", 2, &[40, 50, 60]), 2),
        (q("attention rows 1", 2, &[40, 50]), 1),
    ];
    let inv = qwen3_inv_freq(HD);
    let invf = (up(cpu, &[HD / 2], &inv)?, up(gpu, &[HD / 2], &inv)?);
    let was = gpu.chain_attn_rows();
    let out = (|| -> Result<()> {
        for (c, allowed) in &cases {
            let (n, h, hkv, model_last, what) = (c.layers, c.h, c.hkv, c.model_last, c.what());
            gpu.set_chain_attn_rows(*allowed);
            let m = c.ctxs.len();
            let mut f = span_fixture(rng, cpu, gpu, c, &invf.0, 1)?;
            let rg = up(gpu, &[m, h], &f.r0)?;
            let pg = span_params(c, &f.norms_w, &invf.1);
            let chains = span_chains(&f.layers, &f.qkv_g0, &pg, model_last);
            let kvg = &mut f.kvg[0];
            let on = gpu.layer_chain_on() && gpu.chain_attn_on() && gpu.dev.cc == (9, 0);
            let want = on && c.hq / hkv <= 2 && m <= 2 && *allowed >= m;
            let ok = gpu.layer_chain_ok(&rg, &chains[0], kvg, &f.sg);
            let took = if ok {
                gpu.layer_span_len(&rg, &chains, kvg, &f.sg)
            } else {
                0
            };
            let expect = if want { n } else { 0 };
            rep.fact(
                "chain_span_rows",
                format!("{what} takes {expect}"),
                took == expect,
                format!("layer_chain_ok {ok}, layer_span_len {took}"),
            );
            if !want || took != n {
                continue;
            }
            // The launch from the first residual rows: the residual and the next qkv.
            let mut launch = || -> Result<(GpuT, Option<GpuT>)> {
                let mut r = up(gpu, &[m, h], &f.r0)?;
                let q = match n {
                    1 => gpu.layer_chain(&chains[0], kvg, &f.sg, &mut r)?,
                    _ => gpu.layer_span(&chains, kvg, &f.sg, &mut r)?,
                };
                Ok((r, q))
            };
            let (first, q1) = launch()?;
            let (second, q2) = launch()?;
            // Against the CPU the bf16 roundings of each layer's qkv, taken in another
            // order, compound (see span).
            let t = 5e-3 * (n + 1) as f64;
            let g = gpu.to_host(&first)?;
            rep.check(
                "chain_span_rows",
                format!("{what} residual"),
                &g,
                &cpu.to_host(&f.rc)?,
                t,
            );
            let again = format!("{what} residual, launched again");
            rep.check("chain_span_rows", again, &gpu.to_host(&second)?, &g, 1e-6);
            match (q1, q2) {
                (Some(q1), Some(q2)) if !model_last => {
                    let q = gpu.to_host(&q1)?;
                    let cq = cpu.to_host(&f.qkv_c)?;
                    rep.check("chain_span_rows", format!("{what} qkv"), &q, &cq, t);
                    let again = format!("{what} qkv, launched again");
                    rep.check("chain_span_rows", again, &gpu.to_host(&q2)?, &q, 1e-6);
                }
                (None, None) if model_last => {}
                (q1, _) => rep.fact(
                    "chain_span_rows",
                    format!("{what} qkv"),
                    false,
                    format!(
                        "returned a qkv: {}, after the model's last layer: {model_last}",
                        q1.is_some()
                    ),
                ),
            }
            // Each sequence's new row of K (normed, rotated) and V in each layer's cache
            // (each layer's cache copied to the host once for all the sequences).
            let kvw = hkv * HD;
            for l in 0..n {
                let (kl, vl) = (cache_f32(gpu, &kvg.k[l])?, cache_f32(gpu, &kvg.v[l])?);
                for (i, &slot) in f.step.slots.iter().enumerate() {
                    let at = slot as usize * kvw;
                    let (kg, vg) = (&kl[at..at + kvw], &vl[at..at + kvw]);
                    let kc = &f.kvc.k[l][at..at + kvw];
                    let vc = &f.kvc.v[l][at..at + kvw];
                    let row = format!("{what} sequence {i} layer {l} cached");
                    rep.check("chain_span_rows", format!("{row} K"), kg, kc, t);
                    rep.check("chain_span_rows", format!("{row} V"), vg, vc, t);
                }
            }
        }
        Ok(())
    })();
    gpu.set_chain_attn_rows(was);
    out
}

/// Where a chain launch's time goes, phase by phase (kernels built with `LC_TRACE=1`):
/// repeated launches of a Qwen3-0.6B layer with its attention at context 256, a
/// Llama-3.1-8B one (group 4) and Qwen3-14B's products (its group of 5 keeps the
/// attention separate), each block's mean time from its start to each phase point.
fn trace(gpu: &CudaBackend, seed: u64, rep: &mut Report) -> Result<()> {
    use minisgl::backend::cuda::device::CHAIN_TRACE_POINTS;
    const HD: usize = 128;
    const LAUNCHES: usize = 200;
    // The kernel's LC_T_* points up to LC_T_END, then wall ns and the launch count.
    const NAMES: [&str; CHAIN_TRACE_POINTS - 2] = [
        "entry",
        "q",
        "rows",
        "split",
        "ticket",
        "attention",
        "sync0",
        "x0",
        "o",
        "sync1",
        "norm1",
        "gate_up first chunk in",
        "last chunk in",
        "gate_up",
        "sync2",
        "x2",
        "down",
        "sync3",
        "norm3",
        "qkv",
        "producer issued its ring",
        "o waited",
        "gate_up waited",
        "down waited",
        "qkv waited",
        "o consuming",
        "gate_up consuming",
        "down consuming",
        "qkv consuming",
        "o closing barrier",
        "gate_up closing barrier",
        "down closing barrier",
        "qkv closing barrier",
        "end",
    ];
    const END: usize = CHAIN_TRACE_POINTS - 3;
    const NS: usize = CHAIN_TRACE_POINTS - 2;
    let rng = &mut ChaCha8Rng::seed_from_u64(seed ^ 0x7ace);
    // (name, q heads, kv heads, hidden, intermediate, attention in front, sequences: two
    // take the two-row span kernel, one layer a launch; context rows)
    let shapes = [
        ("qwen3-0.6b ctx 256", 16, 8, 1024, 3072, true, 1, 256),
        (
            "qwen3-0.6b two sequences ctx 256",
            16,
            8,
            1024,
            3072,
            true,
            2,
            256,
        ),
        ("qwen3-0.6b ctx 2048", 16, 8, 1024, 3072, true, 1, 2048),
        ("qwen3-0.6b ctx 16384", 16, 8, 1024, 3072, true, 1, 16384),
        ("llama-3.1-8b ctx 256", 32, 8, 4096, 14336, true, 1, 256),
        ("qwen3-14b products", 40, 8, 5120, 17408, false, 1, 256),
    ];
    let invf = up(gpu, &[HD / 2], &qwen3_inv_freq(HD))?;
    for (name, hq, hkv, h, inter, attn, m, ctx) in shapes {
        let (qd, cols) = (hq * HD, (hq + 2 * hkv) * HD);
        let (layout, fill, step) = seqs_cache(rng, name, hq, hkv, &vec![ctx; m]);
        let nf = fill.tokens.len();
        let g = |rng: &mut ChaCha8Rng, shape: &[usize], std: f32| gpu_randn(rng, gpu, shape, std);
        let (k, v) = (g(rng, &[nf, hkv * HD], 1.0)?, g(rng, &[nf, hkv * HD], 1.0)?);
        let qkv = g(rng, &[m, cols], 1.0)?;
        let (wq, wk) = (g(rng, &[HD], 1.0)?, g(rng, &[HD], 1.0)?);
        let attn_row = g(rng, &[m, qd], 1.0)?;
        let mut rg = g(rng, &[m, h], 1.0)?;
        // Copies of the layer, launched in turn, so that its weights stream from DRAM as
        // in a model's step: a Qwen3-0.6B layer's 31 MB fits the H200's L2, and one
        // layer launched over and over streamed from there (the traces before
        // 2026-12-04 PM's call 5 did; their 0.6B chunk arrivals are L2's).
        let layer_bytes = 2 * (h * qd + 3 * inter * h + cols * h);
        let copies = (128usize << 20).div_ceil(layer_bytes).clamp(1, 8);
        let layers = (0..copies)
            .map(|_| Layer::random_gpu(rng, gpu, (h, qd, inter, cols)))
            .collect::<Result<Vec<_>>>()?;
        // A K/V cache a copy too: a long context's K/V (64 MB a layer at 16,384 rows)
        // would otherwise come from L2 at every launch after the first.
        let fs = gpu.prepare_step(&fill)?;
        let mut kvs = (0..copies)
            .map(|_| {
                let mut kv = gpu.alloc_kv(layout)?;
                gpu.store_kv(&mut kv, 0, &k, &v, &fs)?;
                Ok(kv)
            })
            .collect::<Result<Vec<_>>>()?;
        let sg = gpu.prepare_step(&step)?;
        let pg = attn_params(hq, hkv, true, &wq, &wk, &invf);
        let input = || {
            if attn {
                ChainInput::Qkv {
                    qkv: &qkv,
                    layer: 0,
                    params: &pg,
                }
            } else {
                ChainInput::Attn(&attn_row)
            }
        };
        let chains: Vec<_> = layers.iter().map(|l| l.chain(input(), false)).collect();
        let on = gpu.layer_chain_ok(&rg, &chains[0], &kvs[0], &sg);
        rep.fact(
            "chain_trace",
            format!("{name} runs"),
            on,
            format!("layer_chain_ok answered {on}"),
        );
        if !on {
            continue;
        }
        for i in 0..20 {
            gpu.layer_chain(&chains[i % copies], &mut kvs[i % copies], &sg, &mut rg)?;
        }
        let before = gpu.chain_trace()?;
        for i in 0..LAUNCHES {
            gpu.layer_chain(&chains[i % copies], &mut kvs[i % copies], &sg, &mut rg)?;
        }
        let after = gpu.chain_trace()?;
        let d: Vec<[u64; CHAIN_TRACE_POINTS]> = after
            .iter()
            .zip(&before)
            .map(|(a, b)| std::array::from_fn(|p| a[p].wrapping_sub(b[p])))
            .collect();
        let launches = d[0][CHAIN_TRACE_POINTS - 1];
        rep.fact(
            "chain_trace",
            format!("{name} traced"),
            launches == LAUNCHES as u64,
            format!("block 0 counted {launches} launches of {LAUNCHES} (is LC_TRACE=1 built?)"),
        );
        if launches == 0 {
            continue;
        }
        // Cycles a ns from block 0's wall time against its cycles start to end.
        let ghz = d[0][END] as f64 / d[0][NS] as f64;
        let us = |cycles: u64| cycles as f64 / launches as f64 / ghz / 1e3;
        let mut line = format!(
            "chain_trace {name}: {} blocks, {launches} launches over {copies} copies of the layer, block 0 {:.2} µs start to end at {ghz:.3} GHz; µs from a block's start (the waited / consuming / closing barrier points: µs consumer thread 0 waited for its phase's chunks, spent on landed ones, waited for the other warps at the phase's end), mean / max over blocks / block 0 (attention) / the last block (none):",
            d.len(),
            d[0][NS] as f64 / launches as f64 / 1e3
        );
        let last = d.len() - 1;
        for (p, n) in NAMES.iter().enumerate() {
            let v: Vec<f64> = d.iter().map(|b| us(b[p])).collect();
            let mean = v.iter().sum::<f64>() / v.len() as f64;
            let max = v.iter().cloned().fold(0.0, f64::max);
            line += &format!(" {n} {mean:.2}/{max:.2}/{:.2}/{:.2}", v[0], v[last]);
        }
        rep.bench_line(line);
    }
    Ok(())
}
