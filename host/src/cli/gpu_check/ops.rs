//! Every elementwise / GEMM op of the Backend trait: CUDA vs CPU on random bf16 inputs.

use anyhow::Result;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::report::Report;
use minisgl::backend::cpu::CpuBackend;
use minisgl::backend::cuda::CudaBackend;
use minisgl::backend::{Backend, HostData, StepMeta};

/// Normal(0, std) values already rounded to bf16, so both backends see the same inputs.
pub fn randn(rng: &mut ChaCha8Rng, n: usize, std: f32) -> Vec<f32> {
    (0..n)
        .map(|_| {
            // Box-Muller
            let u1: f32 = rng.random::<f32>().max(1e-7);
            let u2: f32 = rng.random::<f32>();
            let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f32::consts::PI * u2).cos();
            half::bf16::from_f32(z * std).to_f32()
        })
        .collect()
}

pub fn up<B: Backend>(b: &B, shape: &[usize], v: &[f32]) -> Result<B::Tensor> {
    Ok(b.upload(shape, HostData::f32(v))?)
}

/// A step of `t` tokens at random positions, one sequence, no pages needed.
fn flat_step(t: usize, rng: &mut ChaCha8Rng, vocab: u32) -> StepMeta {
    StepMeta {
        tokens: (0..t).map(|_| rng.random_range(0..vocab)).collect(),
        positions: (0..t).map(|_| rng.random_range(0..32768)).collect(),
        slots: (0..t as u32).collect(),
        q_indptr: vec![0, t as u32],
        kv_lens: vec![t as u32],
        page_table: (0..t as u32).collect(),
        page_indptr: vec![0, t as u32],
        sample_rows: (0..t as u32).step_by(3).collect(),
        page_size: 1,
        from_last: Vec::new(),
    }
}

pub fn run(cpu: &CpuBackend, gpu: &CudaBackend, seed: u64, rep: &mut Report) -> Result<()> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x05);
    const T: f64 = 1e-2; // bf16 outputs: ~4e-3 expected
    for &(rows, hidden, vocab) in &[
        (1usize, 576usize, 1000usize),
        (37, 1024, 4096),
        (300, 4096, 512),
    ] {
        let meta = flat_step(rows, &mut rng, vocab as u32);
        let (sc, sg) = (cpu.prepare_step(&meta)?, gpu.prepare_step(&meta)?);
        let table = randn(&mut rng, vocab * hidden, 1.0);
        let (tc, tg) = (
            up(cpu, &[vocab, hidden], &table)?,
            up(gpu, &[vocab, hidden], &table)?,
        );
        let (ec, eg) = (cpu.embedding(&tc, &sc)?, gpu.embedding(&tg, &sg)?);
        rep.check(
            "embedding",
            format!("T={rows} hidden={hidden} vocab={vocab}"),
            &gpu.to_host(&eg)?,
            &cpu.to_host(&ec)?,
            0.0,
        );

        let w = randn(&mut rng, hidden, 1.0);
        let (wc, wg) = (up(cpu, &[hidden], &w)?, up(gpu, &[hidden], &w)?);
        let (nc, ng) = (cpu.rms_norm(&ec, &wc, 1e-6)?, gpu.rms_norm(&eg, &wg, 1e-6)?);
        rep.check(
            "rms_norm",
            format!("{rows}x{hidden}"),
            &gpu.to_host(&ng)?,
            &cpu.to_host(&nc)?,
            T,
        );

        let delta = randn(&mut rng, rows * hidden, 0.5);
        let (dc, dg) = (
            up(cpu, &[rows, hidden], &delta)?,
            up(gpu, &[rows, hidden], &delta)?,
        );
        let (mut rc, mut rg) = (ec, eg);
        let (oc, og) = (
            cpu.add_rms_norm(&mut rc, &dc, &wc, 1e-5)?,
            gpu.add_rms_norm(&mut rg, &dg, &wg, 1e-5)?,
        );
        rep.check(
            "add_rmsnorm",
            format!("{rows}x{hidden} out"),
            &gpu.to_host(&og)?,
            &cpu.to_host(&oc)?,
            T,
        );
        rep.check(
            "add_rmsnorm",
            format!("{rows}x{hidden} residual"),
            &gpu.to_host(&rg)?,
            &cpu.to_host(&rc)?,
            T,
        );
    }

    // GEMMs, with and without bias, and the f32 LM-head path: up to 8 rows the
    // skinny-product kernel (gemv.cu), beyond it cuBLAS (bf16, f32 accumulate).
    for &(m, n, k, bias) in &[
        (1usize, 1024usize, 1024usize, false),
        (37, 3072, 1024, true),
        (256, 2048, 576, false),
        (7, 896, 4864, true),
        (8, 6144, 1024, false),
        (3, 1000, 24, true),
        (9, 4096, 1024, false),
    ] {
        let x = randn(&mut rng, m * k, 1.0);
        let w = randn(&mut rng, n * k, 0.05);
        let b = randn(&mut rng, n, 0.5);
        let (xc, xg) = (up(cpu, &[m, k], &x)?, up(gpu, &[m, k], &x)?);
        let (wc, wg) = (up(cpu, &[n, k], &w)?, up(gpu, &[n, k], &w)?);
        let (bc, bg) = (up(cpu, &[n], &b)?, up(gpu, &[n], &b)?);
        let yc = cpu.linear(&xc, &wc, if bias { Some(&bc) } else { None })?;
        // Both paths on every shape: the skinny kernel (where m <= 8) and cuBLAS.
        for (path, rows) in [("gemv", 8usize), ("cuBLAS", 0)] {
            if path == "gemv" && m > 8 {
                continue;
            }
            gpu.set_gemv_rows(rows);
            let yg = gpu.linear(&xg, &wg, if bias { Some(&bg) } else { None })?;
            rep.check(
                "linear",
                format!("m={m} n={n} k={k} bias={bias} [{path}]"),
                &gpu.to_host(&yg)?,
                &cpu.to_host(&yc)?,
                T,
            );
        }
        gpu.set_gemv_rows(minisgl::backend::cuda::GEMV_ROWS_DEFAULT);
    }
    for t in [29usize, 7] {
        let (hidden, vocab) = (1024usize, 151_936usize);
        let meta = flat_step(t, &mut rng, 100);
        let (sc, sg) = (cpu.prepare_step(&meta)?, gpu.prepare_step(&meta)?);
        let x = randn(&mut rng, t * hidden, 1.0);
        let w = randn(&mut rng, vocab * hidden, 0.05);
        let (xc, xg) = (up(cpu, &[t, hidden], &x)?, up(gpu, &[t, hidden], &x)?);
        let (wc, wg) = (
            up(cpu, &[vocab, hidden], &w)?,
            up(gpu, &[vocab, hidden], &w)?,
        );
        let (lc, lg) = (cpu.gather_rows(&xc, &sc)?, gpu.gather_rows(&xg, &sg)?);
        rep.check(
            "gather",
            format!("{} of {t} rows", meta.sample_rows.len()),
            &gpu.to_host(&lg)?,
            &cpu.to_host(&lc)?,
            0.0,
        );
        let (yc, yg) = (cpu.linear(&lc, &wc, None)?, gpu.linear(&lg, &wg, None)?);
        // f32 logits: only the bf16 rounding of nothing — tighter than bf16 outputs.
        rep.check(
            "lm_head",
            format!("{}x{vocab} f32 logits", meta.sample_rows.len()),
            &gpu.to_host(&yg)?,
            &cpu.to_host(&yc)?,
            1e-3,
        );
    }

    for &(rows, widths) in &[
        (37usize, &[2048usize, 1024, 1024][..]),
        (5, &[3, 5, 8][..]),
        (1, &[896, 128, 128][..]),
    ] {
        let cols: usize = widths.iter().sum();
        let x = randn(&mut rng, rows * cols, 1.0);
        let (xc, xg) = (up(cpu, &[rows, cols], &x)?, up(gpu, &[rows, cols], &x)?);
        let (pc, pg) = (cpu.split_cols(&xc, widths)?, gpu.split_cols(&xg, widths)?);
        for (i, (a, b)) in pg.iter().zip(&pc).enumerate() {
            rep.check(
                "split_cols",
                format!("{rows}x{widths:?} part {i}"),
                &gpu.to_host(a)?,
                &cpu.to_host(b)?,
                0.0,
            );
        }
    }

    for &(rows, heads, hd) in &[
        (1usize, 16usize, 128usize),
        (77, 9, 64),
        (300, 8, 128),
        (3, 4, 256),
    ] {
        let meta = flat_step(rows, &mut rng, 10);
        let (sc, sg) = (cpu.prepare_step(&meta)?, gpu.prepare_step(&meta)?);
        let x = randn(&mut rng, rows * heads * hd, 1.0);
        let w = randn(&mut rng, hd, 1.0);
        let (wc, wg) = (up(cpu, &[hd], &w)?, up(gpu, &[hd], &w)?);
        let (mut xc, mut xg) = (
            up(cpu, &[rows, heads * hd], &x)?,
            up(gpu, &[rows, heads * hd], &x)?,
        );
        cpu.head_rms_norm(&mut xc, &wc, hd, 1e-6)?;
        gpu.head_rms_norm(&mut xg, &wg, hd, 1e-6)?;
        rep.check(
            "head_norm",
            format!("{rows}x{heads}x{hd}"),
            &gpu.to_host(&xg)?,
            &cpu.to_host(&xc)?,
            T,
        );
        // Llama-3-style scaled frequencies (any f32 table exercises the kernel).
        let inv: Vec<f32> = (0..hd / 2)
            .map(|i| {
                let f = 500_000f32.powf(-(2.0 * i as f32) / hd as f32);
                if i > hd / 4 {
                    f / 8.0
                } else {
                    f
                }
            })
            .collect();
        let (ic, ig) = (up(cpu, &[hd / 2], &inv)?, up(gpu, &[hd / 2], &inv)?);
        cpu.rope(&mut xc, hd, &ic, &sc)?;
        gpu.rope(&mut xg, hd, &ig, &sg)?;
        rep.check(
            "rope",
            format!("{rows}x{heads}x{hd} pos<32768"),
            &gpu.to_host(&xg)?,
            &cpu.to_host(&xc)?,
            T,
        );
    }

    for &(rows, n) in &[(1usize, 3072usize), (37, 4864), (256, 1536)] {
        let x = randn(&mut rng, rows * 2 * n, 2.0);
        let (xc, xg) = (up(cpu, &[rows, 2 * n], &x)?, up(gpu, &[rows, 2 * n], &x)?);
        let (oc, og) = (cpu.silu_mul(&xc)?, gpu.silu_mul(&xg)?);
        rep.check(
            "silu_mul",
            format!("{rows}x{n}"),
            &gpu.to_host(&og)?,
            &cpu.to_host(&oc)?,
            T,
        );
    }
    Ok(())
}
