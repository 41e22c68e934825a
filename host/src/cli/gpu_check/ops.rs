//! Every elementwise / GEMM op of the Backend trait: CUDA vs CPU on random bf16 inputs.

use anyhow::Result;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::attn::Case;
use super::inputs::{cache_f32, qwen3_inv_freq, randn, up};
use super::qkv_case::{draw, params, prefixed, QkvInputs};
use super::report::Report;
use minisgl::backend::cpu::CpuBackend;
use minisgl::backend::cuda::device::DecodeRope;
use minisgl::backend::cuda::ops::AttnPath;
use minisgl::backend::cuda::{CudaBackend, GEMV_MAX_ROWS, GEMV_SIMT_MAX_ROWS};
use minisgl::backend::{Backend, StepMeta};

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

    // add_rmsnorm keeps rows up to 8192 wide in registers: 10240 and 8200 take its
    // two-pass fallback; 800 leaves part of the block without a vector, and 2048 rows
    // are a prefill chunk's launch.
    for &(rows, hidden, vocab) in &[
        (1usize, 576usize, 1000usize),
        (37, 1024, 4096),
        (2048, 1024, 64),
        (5, 800, 64),
        (300, 4096, 512),
        (256, 5120, 300),
        (3, 10240, 64),
        (2, 8200, 64),
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
        let delta = randn(&mut rng, rows * hidden, 0.5);
        let (dc, dg) = (
            up(cpu, &[rows, hidden], &delta)?,
            up(gpu, &[rows, hidden], &delta)?,
        );
        let nc = cpu.rms_norm(&ec, &wc, 1e-6)?;
        let mut rc = cpu.embedding(&tc, &sc)?;
        let oc = cpu.add_rms_norm(&mut rc, &dc, &wc, 1e-5)?;
        let (nc, rc, oc) = (cpu.to_host(&nc)?, cpu.to_host(&rc)?, cpu.to_host(&oc)?);
        // The block size by width (0), one warp (two passes past 1,024 wide) and the
        // old fixed 256 (two passes past 8,192).
        for threads in [0, 32, 256] {
            gpu.set_norm_threads(threads);
            let ng = gpu.rms_norm(&eg, &wg, 1e-6);
            // A fresh residual: add_rms_norm updates it in place.
            let mut rg = gpu.embedding(&tg, &sg)?;
            let og = gpu.add_rms_norm(&mut rg, &dg, &wg, 1e-5);
            gpu.set_norm_threads(0);
            let case = format!("{rows}x{hidden} threads={threads}");
            rep.check("rms_norm", case.clone(), &gpu.to_host(&ng?)?, &nc, T);
            rep.check(
                "add_rmsnorm",
                format!("{case} out"),
                &gpu.to_host(&og?)?,
                &oc,
                T,
            );
            rep.check(
                "add_rmsnorm",
                format!("{case} residual"),
                &gpu.to_host(&rg)?,
                &rc,
                T,
            );
        }
    }

    // GEMMs, with and without bias, and the f32 LM-head path: up to 16 rows the
    // skinny-product kernel (gemv.cu), and cuBLAS (bf16, f32 accumulate).
    let configured_limit = gpu.gemv_max_weight();
    gpu.set_gemv_max_weight(usize::MAX);
    for &(m, n, k, bias) in &[
        (1usize, 1024usize, 1024usize, false),
        (2, 4096, 1024, true),
        (37, 3072, 1024, true),
        (256, 2048, 576, false),
        (7, 896, 4864, true),
        (8, 6144, 1024, false),
        (3, 1000, 24, true),
        (5, 1003, 1024, true),
        (16, 1003, 1024, false),
        (9, 4096, 1024, false),
        (24, 1024, 2048, true),
        (32, 4096, 1024, false),
        (33, 1000, 3072, true),
        (64, 6144, 1024, false),
    ] {
        let x = randn(&mut rng, m * k, 1.0);
        let w = randn(&mut rng, n * k, 0.05);
        let b = randn(&mut rng, n, 0.5);
        let (xc, xg) = (up(cpu, &[m, k], &x)?, up(gpu, &[m, k], &x)?);
        let (wc, wg) = (up(cpu, &[n, k], &w)?, up(gpu, &[n, k], &w)?);
        let (bc, bg) = (up(cpu, &[n], &b)?, up(gpu, &[n], &b)?);
        let yc = cpu.linear(&xc, &wc, if bias { Some(&bc) } else { None })?;
        // Every path on every shape it takes (`paths`): the skinny kernel (where m <= 64,
        // at any weight size: the size rule is lifted for these and the fused checks)
        // and cuBLAS. From 3 rows the skinny kernel runs its tensor-core builds where k
        // allows (16, 32 or 64 rows), and to 8 rows its scalar build as well ("gemv
        // simt"). 37 rows of k = 1024 take the 64-row build with its last tile ragged.
        for path in paths(m) {
            let yg = on_path(gpu, path, || {
                Ok(gpu.linear(&xg, &wg, if bias { Some(&bg) } else { None })?)
            })?;
            rep.check(
                "linear",
                format!("m={m} n={n} k={k} bias={bias} [{path}]"),
                &gpu.to_host(&yg)?,
                &cpu.to_host(&yc)?,
                T,
            );
        }
    }
    fused_linears(cpu, gpu, &mut rng, rep)?;
    // The prologue checks run under the engine's size rule (k = 5120 takes the fallback).
    gpu.set_gemv_max_weight(minisgl::backend::cuda::GEMV_MAX_WEIGHT_BYTES);
    norm_prologue_linears(cpu, gpu, &mut rng, rep)?;
    gpu.set_gemv_max_weight(configured_limit);
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
        let (lc, lg) = (cpu.gather_rows(xc, &sc)?, gpu.gather_rows(xg, &sg)?);
        rep.check(
            "gather",
            format!("{} of {t} rows", meta.sample_rows.len()),
            &gpu.to_host(&lg)?,
            &cpu.to_host(&lc)?,
            0.0,
        );
        let (yc, yg) = (cpu.linear(&lc, &wc, None)?, gpu.linear(&lg, &wg, None)?);
        // f32 logits: only the sums' order moves them; bf16 logits (the default,
        // MINISGL_LOGITS_BF16) are rounded once more (measured 1.65e-3 on an H100).
        let (kind, tol) = if gpu.logits_bf16() {
            ("bf16", 3e-3)
        } else {
            ("f32", 1e-3)
        };
        rep.check(
            "lm_head",
            format!("{}x{vocab} {kind} logits", meta.sample_rows.len()),
            &gpu.to_host(&yg)?,
            &cpu.to_host(&yc)?,
            tol,
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

    for &(rows, n) in &[(1usize, 3072usize), (37, 4864), (256, 1536), (4, 17408)] {
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
    qkv_attention(cpu, gpu, &mut rng, rep)
}

/// Every position of `fill` cached first (the prefix), then `qkv_attention` over
/// `attn`: its output, the cache after it and the step.
fn qkv_attention_on<B: Backend>(b: &B, x: &QkvInputs<'_>) -> Result<(B::Tensor, B::Kv, B::Step)> {
    let c = x.c;
    let t = x.attn.tokens.len();
    let cols = (c.q_heads + 2 * c.kv_heads) * c.head_dim;
    let mut s = prefixed(b, x)?;
    let p = params(c, x.norms, &s.wq, &s.wk, &s.inv);
    let out = b.qkv_attention(up(b, &[t, cols], x.qkv)?, &mut s.kv, 0, &s.st, &p)?;
    Ok((out, s.kv, s.st))
}

/// `qkv_attention`: the CUDA backend's one launch for q/k norm + RoPE + the K/V cache
/// write (then attention) against the trait's default sequence of single ops on the
/// CPU, with the caches compared afterwards.
fn qkv_attention(
    cpu: &CpuBackend,
    gpu: &CudaBackend,
    rng: &mut ChaCha8Rng,
    rep: &mut Report,
) -> Result<()> {
    const T: f64 = 1e-2;
    let decode: Vec<(usize, usize)> = (0..32).map(|_| (rng.random_range(0..2000), 1)).collect();
    let cases = [
        Case::new(
            "mixed prefill+decode",
            16,
            128,
            40,
            8,
            [(700, 1), (0, 90), (33, 1), (1200, 64)],
        ),
        Case::new(
            "mixed prefill+decode",
            1,
            64,
            16,
            8,
            [(5, 3), (100, 1), (0, 40), (63, 1)],
        ),
        Case::new("decode", 16, 128, 16, 8, &decode[..]),
        Case::new("decode", 1, 64, 40, 8, &decode[..9]),
        // Contexts where the new token opens a decode tile, closes one, or is the
        // whole context; group 5 and 1.
        Case::new(
            "decode short",
            16,
            128,
            40,
            8,
            [
                (0, 1),
                (1, 1),
                (31, 1),
                (63, 1),
                (64, 1),
                (127, 1),
                (300, 1),
            ],
        ),
        Case::new(
            "decode short",
            4,
            64,
            8,
            8,
            [(0, 1), (64, 1), (65, 1), (9, 1)],
        ),
        // Head dims the attention kernels leave to the simple one: the fused
        // kernel's hd256 build and its generic one.
        Case::new("prefill+decode", 16, 256, 4, 2, [(0, 20), (10, 1)]),
        Case::new("prefill+decode", 16, 96, 6, 2, [(0, 9), (30, 1)]),
        // Head counts (7) that leave a fused warp's last group of heads short, and a
        // prefill long enough that the launch itself picks several heads a warp.
        Case::new(
            "prefill+decode",
            16,
            128,
            5,
            1,
            [(0, 37), (20, 1), (100, 5)],
        ),
        Case::new("prefill+decode", 16, 64, 5, 1, [(3, 21), (40, 1)]),
        Case::new("prefill+decode", 16, 256, 5, 1, [(0, 13), (7, 1)]),
        Case::new("long prefill", 16, 128, 16, 8, [(0, 1500), (200, 700)]),
    ];
    for c in &cases {
        let (hd, hq, hkv) = (c.head_dim, c.q_heads, c.kv_heads);
        let inv = qwen3_inv_freq(hd);
        for norms in [true, false] {
            let d = draw(c, rng);
            let (attn, num_pages) = (&d.attn, d.layout.num_pages);
            let (kvw, t, cols) = (hkv * hd, attn.tokens.len(), (hq + 2 * hkv) * hd);
            let qkv = randn(rng, t * cols, 1.0);
            let (wq, wk) = (randn(rng, hd, 1.0), randn(rng, hd, 1.0));
            let inputs = QkvInputs {
                c,
                norms,
                layout: d.layout,
                fill: &d.fill,
                attn,
                k: &d.kf,
                v: &d.vf,
                qkv: &qkv,
                wq: &wq,
                wk: &wk,
                inv: &inv,
            };
            let (oc, kvc, _) = qkv_attention_on(cpu, &inputs)?;
            // Every head count a warp of qkv_rope_store can take (the launch's size
            // picks one), then (where the step decodes on the split-grid tensor-core
            // kernel) that kernel doing the same work itself, each against the same CPU
            // result; the folded-in kernel also against the two launches bit for bit.
            let mut two_launch: Option<[Vec<f32>; 3]> = None;
            let (off, always) = (DecodeRope::Off, DecodeRope::Always);
            for (per_warp, rope) in [(1, off), (2, off), (4, off), (0, always)] {
                let fold = rope == always;
                gpu.set_rope_heads(per_warp);
                gpu.set_decode_rope(rope);
                let run = qkv_attention_on(gpu, &inputs);
                gpu.set_rope_heads(0);
                gpu.set_decode_rope(DecodeRope::default());
                let (og, kvg, ag) = run?;
                let group = hq / hkv;
                let path = gpu.attention_path(&ag, hd, group);
                if fold && path != AttnPath::DecodeMma {
                    continue;
                }
                let how = if fold {
                    "decode kernel".to_string()
                } else {
                    format!("heads/warp={per_warp}")
                };
                let desc = format!(
                    "{} ps={} hd={hd} {hq}q/{hkv}kv T={t} norms={norms} {how}",
                    c.name, c.page_size
                );
                let got = gpu.to_host(&og)?;
                let kg = cache_f32(gpu, &kvg.k[0])?;
                let vg = cache_f32(gpu, &kvg.v[0])?;
                if fold {
                    if let Some(two) = &two_launch {
                        for (what, a, b) in [
                            ("out", &got, &two[0]),
                            ("K cache", &kg, &two[1]),
                            ("V cache", &vg, &two[2]),
                        ] {
                            rep.check(
                                "qkv_attn",
                                format!("{desc} {what} against qkv_rope_store + attention"),
                                a,
                                b,
                                0.0,
                            );
                        }
                    }
                } else if per_warp == 1 && path == AttnPath::DecodeMma {
                    two_launch = Some([got.clone(), kg.clone(), vg.clone()]);
                }
                rep.check(
                    "qkv_attn",
                    format!("{desc} out [{path:?}]"),
                    &got,
                    &cpu.to_host(&oc)?,
                    2e-2,
                );
                // The step's slots hold the rotated K and the copied V; every other slot
                // (the CPU cache has no scratch page) still holds what the fill wrote.
                let mut new = vec![false; num_pages * c.page_size];
                for &s in &attn.slots {
                    new[s as usize] = true;
                }
                let rows_of = |x: &[f32], want: bool| -> Vec<f32> {
                    (0..new.len())
                        .filter(|&s| new[s] == want)
                        .flat_map(|s| x[s * kvw..(s + 1) * kvw].iter().copied())
                        .collect()
                };
                for (what, g, cc, tol) in [("K", &kg, &kvc.k[0], T), ("V", &vg, &kvc.v[0], 0.0)] {
                    rep.check(
                        "qkv_attn",
                        format!("{desc} cached {what} of the step"),
                        &rows_of(g, true),
                        &rows_of(cc, true),
                        tol,
                    );
                    rep.check(
                        "qkv_attn",
                        format!("{desc} cached {what} elsewhere"),
                        &rows_of(g, false),
                        &rows_of(cc, false),
                        0.0,
                    );
                }
            }
        }
    }
    Ok(())
}

/// The products that normalise their input in a prologue (gemv.cu's `gemv_norm_bf16`,
/// `gemv_norm_silu`) and the residual add without the norm (`gemv_residual`) against
/// the CPU's composed ops, on the skinny kernel and on the fallback (cuBLAS after the
/// norm's own launch). Shapes: one to 64 rows (the prologue to 16: at 20 rows it must be
/// refused), bias, columns that do not fill the last block, Qwen3-0.6B's and 14B's
/// widths.
fn norm_prologue_linears(
    cpu: &CpuBackend,
    gpu: &CudaBackend,
    rng: &mut ChaCha8Rng,
    rep: &mut Report,
) -> Result<()> {
    const T: f64 = 1e-2;
    // k = 5120 (Qwen3-14B) is past the prologue's weight limit: the fallback.
    for &(m, n, k, bias) in &[
        (1usize, 4096usize, 1024usize, false),
        (1, 1000, 4096, true),
        (2, 6144, 4096, true),
        (1, 1000, 5120, true),
        (2, 7168, 5120, true),
        (3, 200, 64, false),
        (8, 2048, 2048, false),
        (12, 2048, 1024, true),
        (20, 512, 64, false),
    ] {
        let x = randn(rng, m * k, 1.0);
        let g = randn(rng, k, 1.0);
        let w = randn(rng, 2 * n * k, 0.05);
        let b = randn(rng, n, 0.5);
        let (xc, xg) = (up(cpu, &[m, k], &x)?, up(gpu, &[m, k], &x)?);
        let (gc, gg) = (up(cpu, &[k], &g)?, up(gpu, &[k], &g)?);
        let (wc, wg) = (
            up(cpu, &[n, k], &w[..n * k])?,
            up(gpu, &[n, k], &w[..n * k])?,
        );
        let (w2c, w2g) = (up(cpu, &[2 * n, k], &w)?, up(gpu, &[2 * n, k], &w)?);
        let (bc, bg) = (up(cpu, &[n], &b)?, up(gpu, &[n], &b)?);
        let yc = cpu.rms_norm_linear(&xc, &gc, 1e-6, &wc, bias.then_some(&bc))?;
        let sc = cpu.rms_norm_linear_silu_mul(&xc, &gc, 1e-6, &w2c)?;
        for path in ["gemv", "cuBLAS"] {
            on_path(gpu, path, || {
                let what = format!("m={m} n={n} k={k} bias={bias} [{path}]");
                let weight_limit = minisgl::backend::cuda::GEMV_MAX_WEIGHT_BYTES;
                if path == "gemv" {
                    // True exactly where both products (w and the twice-as-wide
                    // gate_up w2) take the gemv kernels: else the checks below would
                    // only test the fallback, or the model would defer the norm to a
                    // cuBLAS product and pay a launch for it. The prologue builds take
                    // up to 8 rows (scalar) or 16 (tensor cores, k a multiple of 32).
                    let built = m <= 8 || (m <= 16 && k % 32 == 0);
                    let want =
                        (m + 1) * k * 2 <= 32 * 1024 && 2 * n * k * 2 <= weight_limit && built;
                    let on = gpu.norm_in_prologue(&xg, &[&wg, &w2g]);
                    rep.fact(
                        "norm_in_prologue",
                        what.clone(),
                        on == want,
                        format!("answered {on}, expected {want}"),
                    );
                }
                let yg = gpu.rms_norm_linear(&xg, &gg, 1e-6, &wg, bias.then_some(&bg))?;
                rep.check(
                    "rms_norm_linear",
                    what.clone(),
                    &gpu.to_host(&yg)?,
                    &cpu.to_host(&yc)?,
                    T,
                );
                let sg = gpu.rms_norm_linear_silu_mul(&xg, &gg, 1e-6, &w2g)?;
                rep.check(
                    "rms_norm_linear_silu_mul",
                    what.clone(),
                    &gpu.to_host(&sg)?,
                    &cpu.to_host(&sc)?,
                    T,
                );
                Ok(())
            })?;
        }
    }
    for &(m, n, k, bias) in &[
        (1usize, 1024usize, 2048usize, false),
        (1, 5120, 17408, true),
        (2, 1000, 3072, true),
        (8, 896, 4864, false),
        (24, 1024, 2048, false),
        (64, 1000, 3072, true),
    ] {
        let x = randn(rng, m * k, 1.0);
        let w = randn(rng, n * k, 0.05);
        let b = randn(rng, n, 0.5);
        let r = randn(rng, m * n, 1.0);
        let (xc, xg) = (up(cpu, &[m, k], &x)?, up(gpu, &[m, k], &x)?);
        let (wc, wg) = (up(cpu, &[n, k], &w)?, up(gpu, &[n, k], &w)?);
        let (bc, bg) = (up(cpu, &[n], &b)?, up(gpu, &[n], &b)?);
        let mut rc = up(cpu, &[m, n], &r)?;
        cpu.linear_add(&xc, &wc, bias.then_some(&bc), &mut rc)?;
        for path in ["gemv", "cuBLAS"] {
            let mut rg = up(gpu, &[m, n], &r)?;
            on_path(gpu, path, || {
                Ok(gpu.linear_add(&xg, &wg, bias.then_some(&bg), &mut rg)?)
            })?;
            rep.check(
                "linear_add",
                format!("m={m} n={n} k={k} bias={bias} [{path}]"),
                &gpu.to_host(&rg)?,
                &cpu.to_host(&rc)?,
                T,
            );
        }
    }
    Ok(())
}

/// The product paths a check of `m` rows runs: the skinny kernel's two builds up to
/// 8 rows, its tensor-core build to 16, and cuBLAS.
fn paths(m: usize) -> Vec<&'static str> {
    if m <= GEMV_SIMT_MAX_ROWS {
        vec!["gemv", "gemv simt", "cuBLAS"]
    } else if m <= GEMV_MAX_ROWS {
        vec!["gemv", "cuBLAS"]
    } else {
        vec!["cuBLAS"]
    }
}

/// `f` with products routed the way `path` names: "gemv" (the skinny kernel to 16
/// rows, its tensor-core build where k allows), "gemv simt" (its scalar build) or
/// "cuBLAS"; then the routing as it was.
pub(super) fn on_path<T>(
    gpu: &CudaBackend,
    path: &str,
    f: impl FnOnce() -> Result<T>,
) -> Result<T> {
    let tc = gpu.gemv_tc();
    gpu.set_gemv_rows(if path.starts_with("gemv") {
        GEMV_MAX_ROWS
    } else {
        0
    });
    gpu.set_gemv_tc(tc && path != "gemv simt");
    let r = f();
    gpu.set_gemv_rows(minisgl::backend::cuda::GEMV_ROWS_DEFAULT);
    gpu.set_gemv_tc(tc);
    r
}

/// The products with the next op in their epilogue (gemv.cu's `gemv_silu`, and
/// `gemv_residual` followed by the norm) against the CPU's two ops, on both CUDA paths
/// (the skinny kernel and cuBLAS + the separate kernel). The shapes cover every split of a
/// column's reduction (1 to 8 warps), every row count a build is made for (1, 8, 16, 32,
/// 64, and ragged last tiles), bias, and the norm's two-pass width (past 8192).
fn fused_linears(
    cpu: &CpuBackend,
    gpu: &CudaBackend,
    rng: &mut ChaCha8Rng,
    rep: &mut Report,
) -> Result<()> {
    const T: f64 = 1e-2;
    for &(m, n, k) in &[
        (1usize, 3072usize, 1024usize),
        (1, 512, 3072),
        (2, 8704, 5120),
        (5, 64, 24),
        (3, 1000, 512),
        (8, 1024, 2048),
        (24, 1536, 1024),
        (40, 1000, 512),
        (64, 3072, 1024),
    ] {
        let x = randn(rng, m * k, 1.0);
        let w = randn(rng, 2 * n * k, 0.05);
        let (xc, xg) = (up(cpu, &[m, k], &x)?, up(gpu, &[m, k], &x)?);
        let (wc, wg) = (up(cpu, &[2 * n, k], &w)?, up(gpu, &[2 * n, k], &w)?);
        let yc = cpu.linear_silu_mul(&xc, &wc)?;
        for path in paths(m) {
            let yg = on_path(gpu, path, || Ok(gpu.linear_silu_mul(&xg, &wg)?))?;
            rep.check(
                "linear_silu_mul",
                format!("m={m} n={n} k={k} [{path}]"),
                &gpu.to_host(&yg)?,
                &cpu.to_host(&yc)?,
                T,
            );
        }
    }
    for &(m, n, k, bias) in &[
        (1usize, 1024usize, 2048usize, false),
        (1, 1024, 3072, true),
        (1, 5120, 17408, false),
        (2, 896, 4864, true),
        (3, 1000, 24, false),
        (8, 2048, 1024, true),
        (2, 10240, 512, false),
        (16, 1024, 2048, true),
        (33, 2048, 1024, true),
        (64, 1024, 3072, false),
    ] {
        let x = randn(rng, m * k, 1.0);
        let w = randn(rng, n * k, 0.05);
        let b = randn(rng, n, 0.5);
        let r = randn(rng, m * n, 1.0);
        let g = randn(rng, n, 1.0);
        let (xc, xg) = (up(cpu, &[m, k], &x)?, up(gpu, &[m, k], &x)?);
        let (wc, wg) = (up(cpu, &[n, k], &w)?, up(gpu, &[n, k], &w)?);
        let (bc, bg) = (up(cpu, &[n], &b)?, up(gpu, &[n], &b)?);
        let (gc, gg) = (up(cpu, &[n], &g)?, up(gpu, &[n], &g)?);
        let mut rc = up(cpu, &[m, n], &r)?;
        let oc = cpu.linear_add_rms_norm(&xc, &wc, bias.then_some(&bc), &mut rc, &gc, 1e-6)?;
        for path in paths(m) {
            let mut rg = up(gpu, &[m, n], &r)?;
            let og = on_path(gpu, path, || {
                Ok(gpu.linear_add_rms_norm(&xg, &wg, bias.then_some(&bg), &mut rg, &gg, 1e-6)?)
            })?;
            let what = format!("m={m} n={n} k={k} bias={bias} [{path}]");
            rep.check(
                "linear_add_rms_norm",
                format!("{what} residual"),
                &gpu.to_host(&rg)?,
                &cpu.to_host(&rc)?,
                T,
            );
            rep.check(
                "linear_add_rms_norm",
                format!("{what} normed"),
                &gpu.to_host(&og)?,
                &cpu.to_host(&oc)?,
                T,
            );
        }
    }
    Ok(())
}
