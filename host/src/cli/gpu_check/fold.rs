//! Norms folded into the products after them (`Backend::fold_norm`, `MINISGL_FOLD_NORMS`)
//! against the CPU's unfolded ops: the gate_up product with its SiLU consumer, the qkv
//! product with `qkv_attention` (outputs and caches), and the residual add in cuBLAS's
//! epilogue. Run with the fold on whatever the environment says, and put back after.

use anyhow::Result;
use rand::RngCore;
use rand_chacha::ChaCha8Rng;

use super::attn::Case;
use super::inputs::{cache_f32, qwen3_inv_freq, randn, up};
use super::qkv_case::{draw, params, prefixed, QkvInputs};
use super::report::Report;
use minisgl::backend::cpu::CpuBackend;
use minisgl::backend::cuda::CudaBackend;
use minisgl::backend::Backend;

/// bf16 outputs whose rounding moved (g·W rounded at load, the add rounded once).
const T: f64 = 2e-2;

pub fn run(
    cpu: &CpuBackend,
    gpu: &CudaBackend,
    rng: &mut ChaCha8Rng,
    rep: &mut Report,
) -> Result<()> {
    let was = gpu.fold_norms();
    gpu.set_fold_norms(true);
    let seed = rng.next_u64();
    let r = silu_and_add(cpu, gpu, rng, rep)
        .and_then(|()| gemv_rows(cpu, gpu, rng, rep))
        .and_then(|()| qkv(cpu, gpu, rng, rep))
        .and_then(|()| super::chain::folded(cpu, gpu, seed, rep));
    gpu.set_fold_norms(was);
    r
}

/// `rms_norm_linear_silu_mul` over a folded gate_up weight (`silu_mul_rms`), and
/// `linear_add` with the add in the product: Qwen3-0.6B's and 14B's widths, rows past the
/// gemv kernels (8 to 256; at 4 the gemv prologue keeps the norm, which must still be
/// right with the unit norm).
fn silu_and_add(
    cpu: &CpuBackend,
    gpu: &CudaBackend,
    rng: &mut ChaCha8Rng,
    rep: &mut Report,
) -> Result<()> {
    for &(m, n, k) in &[
        (4usize, 3072usize, 1024usize),
        (8, 3072, 1024),
        (64, 1000, 2048),
        (256, 3072, 1024),
        (40, 8704, 5120),
    ] {
        let what = format!("m={m} n={n} k={k}");
        let x = randn(rng, m * k, 1.0);
        let g = randn(rng, k, 1.0);
        let w = randn(rng, 2 * n * k, 0.05);
        let (xc, xg) = (up(cpu, &[m, k], &x)?, up(gpu, &[m, k], &x)?);
        let (gc, gg) = (up(cpu, &[k], &g)?, up(gpu, &[k], &g)?);
        let wc = up(cpu, &[2 * n, k], &w)?;
        let mut wg = up(gpu, &[2 * n, k], &w)?;
        let unit = gpu.fold_norm(&mut wg, &gg)?;
        rep.fact(
            "fold",
            format!("fold_norm {what}"),
            unit.is_some(),
            "a unit norm back".into(),
        );
        let Some(unit) = unit else { continue };
        let consumer = gpu.norm_in_consumer(&xg, &wg);
        rep.fact(
            "fold",
            format!("norm_in_consumer {what}"),
            consumer == (m > 4),
            format!("answered {consumer} (cuBLAS past 4 rows)"),
        );
        let sc = cpu.rms_norm_linear_silu_mul(&xc, &gc, 1e-6, &wc)?;
        let sg = gpu.rms_norm_linear_silu_mul(&xg, &unit, 1e-6, &wg)?;
        rep.check(
            "fold",
            format!("rms_norm_linear_silu_mul {what}"),
            &gpu.to_host(&sg)?,
            &cpu.to_host(&sc)?,
            T,
        );

        // o / down: residual += act · Wᵀ, the add in cuBLAS's epilogue past 4 rows.
        let a = randn(rng, m * n, 1.0);
        let wd = randn(rng, k * n, 0.05);
        let r = randn(rng, m * k, 1.0);
        let (ac, ag) = (up(cpu, &[m, n], &a)?, up(gpu, &[m, n], &a)?);
        let (wdc, wdg) = (up(cpu, &[k, n], &wd)?, up(gpu, &[k, n], &wd)?);
        let (mut rc, mut rg) = (up(cpu, &[m, k], &r)?, up(gpu, &[m, k], &r)?);
        cpu.linear_add(&ac, &wdc, None, &mut rc)?;
        gpu.linear_add(&ag, &wdg, None, &mut rg)?;
        rep.check(
            "fold",
            format!("linear_add {what}"),
            &gpu.to_host(&rg)?,
            &cpu.to_host(&rc)?,
            T,
        );
    }
    Ok(())
}

/// The gemv rows (1 to 16) over folded weights: `rms_norm_linear` (with a bias) and
/// `rms_norm_linear_silu_mul` in one `gemv_norm_*` launch each, whose prologue leaves x
/// raw and whose epilogue scales the f32 product by the row's factor. Against the CPU's
/// unfolded ops, with the same GPU ops unfolded checked first, so the log shows both.
fn gemv_rows(
    cpu: &CpuBackend,
    gpu: &CudaBackend,
    rng: &mut ChaCha8Rng,
    rep: &mut Report,
) -> Result<()> {
    // Every row count the gemv kernels have a build for, whatever MINISGL_GEMV_ROWS
    // says (past it, cuBLAS and the consumers take the rows: silu_and_add, qkv).
    let was = gpu.gemv_rows();
    gpu.set_gemv_rows(minisgl::backend::cuda::GEMV_MAX_ROWS);
    let r = gemv_rows_at_most_16(cpu, gpu, rng, rep);
    gpu.set_gemv_rows(was);
    r
}

fn gemv_rows_at_most_16(
    cpu: &CpuBackend,
    gpu: &CudaBackend,
    rng: &mut ChaCha8Rng,
    rep: &mut Report,
) -> Result<()> {
    for &(m, n, k) in &[
        (1usize, 4096usize, 1024usize),
        (2, 3072, 1024),
        (3, 4096, 1024),
        (8, 3072, 1024),
        (15, 4096, 1024),
        (16, 4096, 1024),
        // 14B's width at the prologue's most rows (2n x k within the gemv's 32 MB).
        (1, 1536, 5120),
        (2, 1536, 5120),
    ] {
        let x = randn(rng, m * k, 1.0);
        let g = randn(rng, k, 1.0);
        let w = randn(rng, 2 * n * k, 0.05);
        let bias = randn(rng, n, 1.0);
        let (xc, xg) = (up(cpu, &[m, k], &x)?, up(gpu, &[m, k], &x)?);
        let (gc, gg) = (up(cpu, &[k], &g)?, up(gpu, &[k], &g)?);
        let (wc, wc1) = (up(cpu, &[2 * n, k], &w)?, up(cpu, &[n, k], &w[..n * k])?);
        let (bc, bg) = (up(cpu, &[n], &bias)?, up(gpu, &[n], &bias)?);
        let sc = cpu.to_host(&cpu.rms_norm_linear_silu_mul(&xc, &gc, 1e-6, &wc)?)?;
        let lc = cpu.to_host(&cpu.rms_norm_linear(&xc, &gc, 1e-6, &wc1, Some(&bc))?)?;
        for folded in [false, true] {
            let what = format!("gemv rows folded={folded} m={m} n={n} k={k}");
            let mut wg = up(gpu, &[2 * n, k], &w)?;
            let mut wg1 = up(gpu, &[n, k], &w[..n * k])?;
            let (norm, norm1) = if folded {
                let (Some(u), Some(u1)) =
                    (gpu.fold_norm(&mut wg, &gg)?, gpu.fold_norm(&mut wg1, &gg)?)
                else {
                    rep.fact(
                        "fold",
                        format!("fold_norm {what}"),
                        false,
                        "no unit norm back".into(),
                    );
                    continue;
                };
                (u, u1)
            } else {
                (up(gpu, &[k], &g)?, up(gpu, &[k], &g)?)
            };
            // The prologue holds the rows and the norm weight (a folded one's unit weight
            // is not loaded) in its shared memory budget: past that (16 rows of 1,024,
            // unfolded) the norm runs as its own launch.
            let fits =
                (m + usize::from(!folded)) * k * 2 <= minisgl::backend::cuda::NORM_PROLOGUE_SMEM;
            let prologue = gpu.norm_in_prologue(&xg, &[&wg, &wg1]);
            rep.fact(
                "fold",
                format!("norm_in_prologue {what}"),
                prologue == fits,
                format!("answered {prologue}, expected {fits} (its shared memory budget)"),
            );
            let sg = gpu.rms_norm_linear_silu_mul(&xg, &norm, 1e-6, &wg)?;
            rep.check(
                "fold",
                format!("rms_norm_linear_silu_mul {what}"),
                &gpu.to_host(&sg)?,
                &sc,
                T,
            );
            let lg = gpu.rms_norm_linear(&xg, &norm1, 1e-6, &wg1, Some(&bg))?;
            rep.check(
                "fold",
                format!("rms_norm_linear +bias {what}"),
                &gpu.to_host(&lg)?,
                &lc,
                T,
            );
        }
    }
    Ok(())
}

/// `rms_norm_linear` over a folded qkv weight, then `qkv_attention` on its rows
/// (`qkv_rope_store_rms_hd*`, or `qkv_rope_store_rms_generic` at head_dim 96): the
/// output and the step's cached K and V against the CPU's norm, product and
/// `qkv_attention`. Decode rows that the split-grid decode would take with the rope
/// folded in, a mixed step, a prefill, head_dims 64 / 96 / 128 / 256, and a prefill of
/// more rows than SMs (the launch shape of long prefills and large decode batches); each
/// without and with a qkv bias (Qwen2's), which the rope kernel adds after the row factor.
fn qkv(cpu: &CpuBackend, gpu: &CudaBackend, rng: &mut ChaCha8Rng, rep: &mut Report) -> Result<()> {
    let hidden = 512;
    let decode: Vec<(usize, usize)> = (0..24).map(|i| (37 * i + 5, 1)).collect();
    let cases = [
        Case::new("decode", 16, 128, 16, 8, &decode[..]),
        Case::new(
            "mixed prefill+decode",
            16,
            128,
            40,
            8,
            [(700, 1), (0, 90), (33, 1)],
        ),
        Case::new(
            "mixed prefill+decode",
            1,
            64,
            16,
            8,
            [(5, 3), (100, 1), (0, 40)],
        ),
        Case::new("prefill+decode", 16, 256, 4, 2, [(0, 20), (10, 1)]),
        Case::new("prefill+decode", 16, 96, 6, 2, [(0, 9), (30, 1)]),
        // At least as many rows as an H100 / H200 has SMs: a block a token, and with 80
        // heads (20 runs of four, 16 warps) some warps take a second run.
        Case::new("prefill, a block a token", 16, 128, 64, 8, [(0, 150)]),
    ];
    for (c, with_bias) in cases.iter().flat_map(|c| [(c, false), (c, true)]) {
        let (hd, hq, hkv) = (c.head_dim, c.q_heads, c.kv_heads);
        let inv = qwen3_inv_freq(hd);
        let d = draw(c, rng);
        let attn = &d.attn;
        let (kvw, t, cols) = (hkv * hd, attn.tokens.len(), (hq + 2 * hkv) * hd);
        let (wq, wk) = (randn(rng, hd, 1.0), randn(rng, hd, 1.0));
        let x = randn(rng, t * hidden, 1.0);
        let g = randn(rng, hidden, 1.0);
        let w = randn(rng, cols * hidden, 0.05);
        let bias = with_bias.then(|| randn(rng, cols, 1.0));
        let inputs = QkvInputs {
            c,
            norms: true,
            layout: d.layout,
            fill: &d.fill,
            attn,
            k: &d.kf,
            v: &d.vf,
            qkv: &[],
            wq: &wq,
            wk: &wk,
            inv: &inv,
        };
        let desc = format!(
            "{}{} ps={} hd={hd} {hq}q/{hkv}kv T={t}",
            c.name,
            if with_bias { " +bias" } else { "" },
            c.page_size
        );
        // The CPU: the norm, the product, then qkv_attention.
        let mut sc = prefixed(cpu, &inputs)?;
        let (xc, gc, wc) = (
            up(cpu, &[t, hidden], &x)?,
            up(cpu, &[hidden], &g)?,
            up(cpu, &[cols, hidden], &w)?,
        );
        let bc = bias.as_ref().map(|b| up(cpu, &[cols], b)).transpose()?;
        let qkv_c = cpu.rms_norm_linear(&xc, &gc, 1e-6, &wc, bc.as_ref())?;
        let pc = params(c, true, &sc.wq, &sc.wk, &sc.inv);
        let oc = cpu.qkv_attention(qkv_c, &mut sc.kv, 0, &sc.st, &pc)?;
        // The GPU: the weight folded, the raw product, its rows scaled in the rope kernel.
        let mut sg = prefixed(gpu, &inputs)?;
        let (xg, gg) = (up(gpu, &[t, hidden], &x)?, up(gpu, &[hidden], &g)?);
        let mut wg = up(gpu, &[cols, hidden], &w)?;
        let Some(unit) = gpu.fold_norm(&mut wg, &gg)? else {
            rep.fact(
                "fold",
                format!("fold_norm qkv {desc}"),
                false,
                "no unit norm back".into(),
            );
            continue;
        };
        let consumer = gpu.norm_in_consumer(&xg, &wg);
        rep.fact(
            "fold",
            format!("norm_in_consumer qkv {desc}"),
            consumer,
            format!("answered {consumer}"),
        );
        let bg = bias.as_ref().map(|b| up(gpu, &[cols], b)).transpose()?;
        let qkv_g = gpu.rms_norm_linear(&xg, &unit, 1e-6, &wg, bg.as_ref())?;
        let pg = params(c, true, &sg.wq, &sg.wk, &sg.inv);
        let og = gpu.qkv_attention(qkv_g, &mut sg.kv, 0, &sg.st, &pg)?;
        rep.check(
            "fold",
            format!("qkv_attention {desc} out"),
            &gpu.to_host(&og)?,
            &cpu.to_host(&oc)?,
            3e-2,
        );
        // The step's slots: the rotated K and the scaled V.
        let rows = |cache: &[f32]| -> Vec<f32> {
            attn.slots
                .iter()
                .flat_map(|&s| {
                    cache[s as usize * kvw..(s as usize + 1) * kvw]
                        .iter()
                        .copied()
                })
                .collect()
        };
        for (what, gk, ck) in [
            ("K", &sg.kv.k[0], &sc.kv.k[0]),
            ("V", &sg.kv.v[0], &sc.kv.v[0]),
        ] {
            rep.check(
                "fold",
                format!("qkv_attention {desc} cached {what}"),
                &rows(&cache_f32(gpu, gk)?),
                &rows(ck),
                T,
            );
        }
    }
    Ok(())
}
