//! A decoder layer's products at one decode row as one launch (`layer_chain`) against
//! the CPU's composed ops: `linear_add` (o), `rms_norm_linear_silu_mul` (gate_up),
//! `linear_add` (down), `rms_norm_linear` (the next layer's qkv). Shapes: Qwen3-0.6B's
//! and Qwen3-14B's widths, a Qwen2.5-1.5B-like layer with biases, a last layer (no
//! qkv), and a width the kernel refuses.

use anyhow::Result;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::ops::{randn, up};
use super::report::Report;
use minisgl::backend::cpu::CpuBackend;
use minisgl::backend::cuda::CudaBackend;
use minisgl::backend::{Backend, LayerChain};

/// (hidden, q width, intermediate, qkv width, biases, last layer)
type Shape = (usize, usize, usize, usize, bool, bool);

pub fn run(cpu: &CpuBackend, gpu: &CudaBackend, seed: u64, rep: &mut Report) -> Result<()> {
    let rng = &mut ChaCha8Rng::seed_from_u64(seed ^ 0x1c);
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
            attn: &attn.1,
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
        let on = gpu.layer_chain_ok(&rg, &chain);
        rep.fact(
            "layer_chain",
            format!("{what} runs"),
            on == want,
            format!("layer_chain_ok answered {on}, expected {want}"),
        );
        if !on {
            continue;
        }
        let qkv_g = gpu.layer_chain(&chain, &mut rg)?;
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
            gpu.layer_chain(&chain, &mut rg)?;
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
