//! A decoder layer's products at one decode row as one launch (`layer_chain`) against
//! the CPU's composed ops: `linear_add` (o), `rms_norm_linear_silu_mul` (gate_up),
//! `linear_add` (down), `rms_norm_linear` (the next layer's qkv). Shapes: Qwen3-0.6B's
//! and Qwen3-14B's widths, a Qwen2.5-1.5B-like layer with biases, a last layer (no
//! qkv), and a width the kernel refuses. Then the same launch with the layer's
//! attention in front (`layer_chain_attn_g*`) against the CPU's `qkv_attention` and the
//! products, over paged caches of 1 to 2,000 rows, with the cached K/V compared too.

use anyhow::Result;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::attn::{metas, Case};
use super::ops::{randn, up};
use super::report::Report;
use minisgl::backend::cpu::CpuBackend;
use minisgl::backend::cuda::CudaBackend;
use minisgl::backend::{AttnParams, Backend, ChainInput, KvLayout, LayerChain, StepMeta};

/// (hidden, q width, intermediate, qkv width, biases, last layer)
type Shape = (usize, usize, usize, usize, bool, bool);

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
    attention(cpu, gpu, seed, rep)
}

fn products(cpu: &CpuBackend, gpu: &CudaBackend, seed: u64, rep: &mut Report) -> Result<()> {
    let rng = &mut ChaCha8Rng::seed_from_u64(seed ^ 0x1c);
    let (mut kv, step) = one_row(gpu)?;
    const T: f64 = 1e-2;
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
        let eps = 1e-6;
        let mut t = |shape: &[usize], std: f32| -> Result<_> {
            let n = shape.iter().product();
            let v = randn(rng, n, std);
            Ok((up(cpu, shape, &v)?, up(gpu, shape, &v)?))
        };
        let attn = t(&[1, qd], 1.0)?;
        let (rc0, rg0) = t(&[1, h], 1.0)?;
        let w_o = t(&[h, qd], 0.03)?;
        let b_o = t(&[h], 0.5)?;
        let post = t(&[h], 1.0)?;
        let w_gu = t(&[2 * inter, h], 0.05)?;
        let w_down = t(&[h, inter], 0.03)?;
        let in_norm = t(&[h], 1.0)?;
        let w_qkv = t(&[nqkv, h], 0.05)?;
        let b_qkv = t(&[nqkv], 0.5)?;

        // The reference: the CPU's separate ops (o, gate_up, down on the residual).
        let products = |r: &mut _| -> Result<()> {
            cpu.linear_add(&attn.0, &w_o.0, bias.then_some(&b_o.0), r)?;
            let act = cpu.rms_norm_linear_silu_mul(r, &post.0, eps, &w_gu.0)?;
            Ok(cpu.linear_add(&act, &w_down.0, None, r)?)
        };
        let mut rc = rc0;
        products(&mut rc)?;
        let qkv_c = if last {
            None
        } else {
            Some(cpu.rms_norm_linear(&rc, &in_norm.0, eps, &w_qkv.0, bias.then_some(&b_qkv.0))?)
        };

        let chain = LayerChain {
            input: ChainInput::Attn(&attn.1),
            w_o: &w_o.1,
            b_o: bias.then_some(&b_o.1),
            post_norm: &post.1,
            w_gate_up: &w_gu.1,
            w_down: &w_down.1,
            next: (!last).then_some((&in_norm.1, &w_qkv.1, bias.then_some(&b_qkv.1))),
            eps,
        };
        let mut rg = rg0;
        // On sm_90 the kernel must have loaded: a check that passes without its
        // subject is no check.
        let want = h.is_multiple_of(256) && gpu.layer_chain_on() && gpu.dev.cc == (9, 0);
        let on = gpu.layer_chain_ok(&rg, &chain, &kv, &step);
        rep.fact(
            "layer_chain",
            format!("{what} runs"),
            on == want,
            format!("layer_chain_ok answered {on}, expected {want}"),
        );
        if !on {
            continue;
        }
        let qkv_g = gpu.layer_chain(&chain, &mut kv, &step, &mut rg)?;
        rep.check(
            "layer_chain",
            format!("{what} residual"),
            &gpu.to_host(&rg)?,
            &cpu.to_host(&rc)?,
            T,
        );
        match (qkv_g, qkv_c) {
            (Some(g), Some(c)) => {
                rep.check(
                    "layer_chain",
                    format!("{what} qkv"),
                    &gpu.to_host(&g)?,
                    &cpu.to_host(&c)?,
                    T,
                );
            }
            (None, None) => {}
            (g, _) => rep.fact(
                "layer_chain",
                format!("{what} qkv"),
                false,
                format!("returned a qkv: {}, expected one: {}", g.is_some(), !last),
            ),
        }
        // Twice more on the same residuals: the grid barrier's counters must come back
        // to their start.
        for _ in 0..2 {
            gpu.layer_chain(&chain, &mut kv, &step, &mut rg)?;
            products(&mut rc)?;
        }
        rep.check(
            "layer_chain",
            format!("{what} residual after two more launches"),
            &gpu.to_host(&rg)?,
            &cpu.to_host(&rc)?,
            2.0 * T,
        );
    }
    Ok(())
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
        eps: 1e-6,
        scale: 1.0 / (128f32).sqrt(),
    }
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
    const T: f64 = 1e-2;
    const HD: usize = 128;
    let shapes: [AttnShape; 5] = [
        // Contexts of one row (the new one only), a part of a split, five splits, and
        // the 16-split cap.
        (
            "qwen3-0.6b",
            16,
            8,
            1024,
            3072,
            true,
            false,
            &[1, 40, 300, 2000],
        ),
        (
            "group 4, biases, no q/k norm",
            8,
            2,
            1024,
            2048,
            false,
            true,
            &[129, 1100],
        ),
        ("group 3", 6, 2, 1024, 2048, true, false, &[77]),
        ("group 1", 8, 8, 1024, 2048, false, false, &[513]),
        // A group of 5: past the kernel's 4, the separate attention runs.
        ("group 5", 10, 2, 1024, 2048, true, false, &[64]),
    ];
    let inv: Vec<f32> = (0..HD / 2)
        .map(|i| 1_000_000f32.powf(-(2.0 * i as f32) / HD as f32))
        .collect();
    for (name, hq, hkv, h, inter, norms, bias, ctxs) in shapes {
        let (qd, cols) = (hq * HD, (hq + 2 * hkv) * HD);
        let eps = 1e-6;
        for &ctx in ctxs {
            let what = format!("{name} {hq}q/{hkv}kv h={h} ctx={ctx}");
            let c = Case {
                name,
                page_size: 16,
                page_runs: false,
                head_dim: HD,
                q_heads: hq,
                kv_heads: hkv,
                seqs: vec![(ctx - 1, 1)],
            };
            let (num_pages, fill, step) = metas(&c, rng);
            let layout = KvLayout {
                num_layers: 1,
                num_pages,
                page_size: 16,
                kv_heads: hkv,
                head_dim: HD,
            };
            let mut t = |shape: &[usize], std: f32| -> Result<_> {
                let n = shape.iter().product();
                let v = randn(rng, n, std);
                Ok((up(cpu, shape, &v)?, up(gpu, shape, &v)?, v))
            };
            let nf = fill.tokens.len();
            let (k, v) = (t(&[nf, hkv * HD], 1.0)?, t(&[nf, hkv * HD], 1.0)?);
            let qkv = t(&[1, cols], 1.0)?;
            let (wq, wk, invf) = (
                t(&[HD], 1.0)?,
                t(&[HD], 1.0)?,
                (up(cpu, &[HD / 2], &inv)?, up(gpu, &[HD / 2], &inv)?),
            );
            let (rc0, rg0, _) = t(&[1, h], 1.0)?;
            let w_o = t(&[h, qd], 0.03)?;
            let b_o = t(&[h], 0.5)?;
            let post = t(&[h], 1.0)?;
            let w_gu = t(&[2 * inter, h], 0.05)?;
            let w_down = t(&[h, inter], 0.03)?;
            let in_norm = t(&[h], 1.0)?;
            let w_qkv = t(&[cols, h], 0.05)?;
            let b_qkv = t(&[cols], 0.5)?;
            // The CPU: the prefix cached, qkv_attention, then the separate products.
            let mut kvc = cpu.alloc_kv(layout)?;
            cpu.store_kv(&mut kvc, 0, &k.0, &v.0, &cpu.prepare_step(&fill)?)?;
            let sc = cpu.prepare_step(&step)?;
            let pc = attn_params(hq, hkv, norms, &wq.0, &wk.0, &invf.0);
            let attn_c = cpu.qkv_attention(qkv.0, &mut kvc, 0, &sc, &pc)?;
            let mut rc = rc0;
            cpu.linear_add(&attn_c, &w_o.0, bias.then_some(&b_o.0), &mut rc)?;
            let act = cpu.rms_norm_linear_silu_mul(&rc, &post.0, eps, &w_gu.0)?;
            cpu.linear_add(&act, &w_down.0, None, &mut rc)?;
            let qkv_c =
                cpu.rms_norm_linear(&rc, &in_norm.0, eps, &w_qkv.0, bias.then_some(&b_qkv.0))?;

            // The GPU: the same prefix, then one chain launch from qkv.
            let mut kvg = gpu.alloc_kv(layout)?;
            gpu.store_kv(&mut kvg, 0, &k.1, &v.1, &gpu.prepare_step(&fill)?)?;
            let sg = gpu.prepare_step(&step)?;
            let pg = attn_params(hq, hkv, norms, &wq.1, &wk.1, &invf.1);
            let chain = LayerChain {
                input: ChainInput::Qkv {
                    qkv: &qkv.1,
                    layer: 0,
                    params: &pg,
                },
                w_o: &w_o.1,
                b_o: bias.then_some(&b_o.1),
                post_norm: &post.1,
                w_gate_up: &w_gu.1,
                w_down: &w_down.1,
                next: Some((&in_norm.1, &w_qkv.1, bias.then_some(&b_qkv.1))),
                eps,
            };
            let mut rg = rg0;
            let want = hq / hkv <= 4
                && gpu.layer_chain_on()
                && gpu.chain_attn_on()
                && gpu.dev.cc == (9, 0);
            let on = gpu.layer_chain_ok(&rg, &chain, &kvg, &sg);
            rep.fact(
                "chain_attn",
                format!("{what} runs"),
                on == want,
                format!("layer_chain_ok answered {on}, expected {want}"),
            );
            if !on {
                continue;
            }
            let qkv_g = gpu.layer_chain(&chain, &mut kvg, &sg, &mut rg)?;
            rep.check(
                "chain_attn",
                format!("{what} residual"),
                &gpu.to_host(&rg)?,
                &cpu.to_host(&rc)?,
                T,
            );
            match qkv_g {
                Some(g) => {
                    rep.check(
                        "chain_attn",
                        format!("{what} next qkv"),
                        &gpu.to_host(&g)?,
                        &cpu.to_host(&qkv_c)?,
                        T,
                    );
                }
                None => rep.fact(
                    "chain_attn",
                    format!("{what} next qkv"),
                    false,
                    "no qkv returned".into(),
                ),
            }
            // The new row's K (normed, rotated) and V in the cache, as the CPU wrote them.
            let kvw = hkv * HD;
            let slot = step.slots[0] as usize * kvw;
            let bf = |x: Vec<u16>| -> Vec<f32> {
                x[slot..slot + kvw]
                    .iter()
                    .map(|&b| half::bf16::from_bits(b).to_f32())
                    .collect()
            };
            let kg = bf(gpu.dev.stream.clone_dtoh(&kvg.k[0])?);
            let vg = bf(gpu.dev.stream.clone_dtoh(&kvg.v[0])?);
            rep.check(
                "chain_attn",
                format!("{what} cached K"),
                &kg,
                &kvc.k[0][slot..slot + kvw],
                T,
            );
            rep.check(
                "chain_attn",
                format!("{what} cached V"),
                &vg,
                &kvc.v[0][slot..slot + kvw],
                0.0,
            );
        }
    }
    Ok(())
}
