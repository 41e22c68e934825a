//! The Hopper decode GEMM (`kernels/gemm_sm90.cu`) against the CPU: its products, its
//! SiLU·mul and its qkv_rope_store epilogues. Run after every other op check, and a
//! failed launch is a failed check, not the end of the run: a kernel never run on a GPU
//! must not cost the checks before it.

use anyhow::Result;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::attn::{metas, Case};
use super::ops::{cache_f32, on_path, params, prefixed, qwen3_inv_freq, randn, up, QkvInputs};
use super::report::Report;
use minisgl::backend::cpu::CpuBackend;
use minisgl::backend::cuda::{CudaBackend, GemmEpi, GemmTile};
use minisgl::backend::{Backend, KvLayout};

/// The Hopper decode GEMM (`gemm_sm90.cu`) against the CPU: products with and without
/// bias, SiLU·mul of gate_up, and the residual add + norm after a product, by the tile rule ("tc gemm")
/// and, on one shape of each row-tile count, at every tile ("tc gemm 64x4"). Shapes:
/// one to 256 rows (ragged last row tiles), ragged n and k, Qwen3-0.6B's and 14B's
/// widths, SiLU halves that take only the 64-row tile or none (the fallback), k too
/// short to split. Run last, and a failed launch is a failed check, not the end of the
/// run: a kernel never run on a GPU must not cost the checks before it.
pub fn run(cpu: &CpuBackend, gpu: &CudaBackend, seed: u64, rep: &mut Report) -> Result<()> {
    let rng = &mut ChaCha8Rng::seed_from_u64(seed ^ 0x7c);
    const T: f64 = 1e-2;
    if !gpu.has_tc_gemm() {
        let hopper = gpu.dev.cc == (9, 0);
        rep.fact(
            "tc_gemm",
            "built".into(),
            !hopper,
            format!(
                "the Hopper GEMM's kernels are not built on this sm_{}{} device",
                gpu.dev.cc.0, gpu.dev.cc.1
            ),
        );
        return Ok(());
    }
    // The tile rule's choice, and on `sweep` every tile.
    let tc_paths = |sweep: bool| {
        let mut v = vec!["tc gemm".to_string()];
        if sweep {
            v.extend(
                GemmTile::ALL
                    .iter()
                    .map(|t| format!("tc gemm {}x{}", t.bn, t.splits)),
            );
        }
        v
    };
    for &(m, n, k, bias, sweep) in &[
        (1usize, 1024usize, 1024usize, false, false),
        (7, 896, 4864, true, false),
        (65, 4096, 1024, false, false),
        (100, 1003, 1000, true, true),
        (128, 1024, 2048, false, true),
        (129, 2048, 576, true, false),
        (200, 1024, 3072, false, false),
        (256, 4096, 1024, false, true),
        (96, 7168, 5120, false, false),
        (64, 1024, 256, true, false),
    ] {
        let x = randn(rng, m * k, 1.0);
        let w = randn(rng, n * k, 0.05);
        let b = randn(rng, n, 0.5);
        let (xc, xg) = (up(cpu, &[m, k], &x)?, up(gpu, &[m, k], &x)?);
        let (wc, wg) = (up(cpu, &[n, k], &w)?, up(gpu, &[n, k], &w)?);
        let (bc, bg) = (up(cpu, &[n], &b)?, up(gpu, &[n], &b)?);
        let yc = cpu.to_host(&cpu.linear(&xc, &wc, bias.then_some(&bc))?)?;
        for path in tc_paths(sweep) {
            let case = format!("m={m} n={n} k={k} bias={bias} [{path}]");
            let yg = on_path(gpu, &path, || {
                took_tc_gemm(gpu, rep, &path, &xg, &wg, false, true, "linear");
                Ok(gpu.to_host(&gpu.linear(&xg, &wg, bias.then_some(&bg))?)?)
            });
            check_or_fail(rep, "linear", case, yg, &yc, T);
        }
    }
    // 1,056 outputs take only the 64-row tile (32-row halves); 1,000 none (the
    // fallback, cuBLAS then silu_mul), which the routing facts show.
    for &(m, n, k, sweep) in &[
        (3, 1000, 512, false),
        (65, 1536, 1024, false),
        (128, 3072, 1024, true),
        (256, 3072, 1024, false),
        (200, 1056, 2048, false),
        (130, 1000, 1024, false),
    ] {
        let x = randn(rng, m * k, 1.0);
        let w = randn(rng, 2 * n * k, 0.05);
        let (xc, xg) = (up(cpu, &[m, k], &x)?, up(gpu, &[m, k], &x)?);
        let (wc, wg) = (up(cpu, &[2 * n, k], &w)?, up(gpu, &[2 * n, k], &w)?);
        let yc = cpu.to_host(&cpu.linear_silu_mul(&xc, &wc)?)?;
        for path in tc_paths(sweep) {
            let case = format!("m={m} n={n} k={k} [{path}]");
            let fits = n % 32 == 0;
            let yg = on_path(gpu, &path, || {
                took_tc_gemm(gpu, rep, &path, &xg, &wg, true, fits, "linear_silu_mul");
                Ok(gpu.to_host(&gpu.linear_silu_mul(&xg, &wg)?)?)
            });
            check_or_fail(rep, "linear_silu_mul", case, yg, &yc, T);
        }
    }
    // The o and down products of a decode batch: the product, then add_rmsnorm.
    for &(m, n, k) in &[(128usize, 1024usize, 2048usize), (256, 1024, 3072)] {
        let x = randn(rng, m * k, 1.0);
        let w = randn(rng, n * k, 0.05);
        let r = randn(rng, m * n, 1.0);
        let g = randn(rng, n, 1.0);
        let (xc, xg) = (up(cpu, &[m, k], &x)?, up(gpu, &[m, k], &x)?);
        let (wc, wg) = (up(cpu, &[n, k], &w)?, up(gpu, &[n, k], &w)?);
        let (gc, gg) = (up(cpu, &[n], &g)?, up(gpu, &[n], &g)?);
        let mut rc = up(cpu, &[m, n], &r)?;
        let oc = cpu.to_host(&cpu.linear_add_rms_norm(&xc, &wc, None, &mut rc, &gc, 1e-6)?)?;
        let rc = cpu.to_host(&rc)?;
        let mut rg = up(gpu, &[m, n], &r)?;
        let ran = on_path(gpu, "tc gemm", || {
            took_tc_gemm(
                gpu,
                rep,
                "tc gemm",
                &xg,
                &wg,
                false,
                true,
                "linear_add_rms_norm",
            );
            let og = gpu.linear_add_rms_norm(&xg, &wg, None, &mut rg, &gg, 1e-6)?;
            Ok((gpu.to_host(&og)?, gpu.to_host(&rg)?))
        });
        let what = format!("m={m} n={n} k={k} [tc gemm]");
        let (o, r) = match ran {
            Ok((o, r)) => (Ok(o), Ok(r)),
            Err(e) => (Err(anyhow::anyhow!("{e:#}")), Err(e)),
        };
        check_or_fail(
            rep,
            "linear_add_rms_norm",
            format!("{what} residual"),
            r,
            &rc,
            T,
        );
        check_or_fail(
            rep,
            "linear_add_rms_norm",
            format!("{what} normed"),
            o,
            &oc,
            T,
        );
    }
    qkv_attention(cpu, gpu, rng, rep)
}

/// A check of `gpu` against `cpu`, or a failed fact naming the error where the GPU side
/// did not run.
fn check_or_fail(
    rep: &mut Report,
    group: &'static str,
    case: String,
    gpu: Result<Vec<f32>>,
    cpu: &[f32],
    tol: f64,
) {
    match gpu {
        Ok(g) => {
            rep.check(group, case, &g, cpu, tol);
        }
        Err(e) => rep.fact(group, case, false, format!("did not run: {e:#}")),
    }
}

/// On a "tc gemm" path, a fact that the Hopper GEMM takes this product exactly when
/// `want` (else the check after it would test a fallback under the kernel's name, or
/// the kernel where a tile does not fit).
#[allow(clippy::too_many_arguments)]
fn took_tc_gemm(
    gpu: &CudaBackend,
    rep: &mut Report,
    path: &str,
    x: &<CudaBackend as Backend>::Tensor,
    w: &<CudaBackend as Backend>::Tensor,
    silu: bool,
    want: bool,
    group: &'static str,
) {
    if path.starts_with("tc gemm") {
        let epi = if silu { GemmEpi::Silu } else { GemmEpi::Plain };
        let took = gpu.tc_gemm_takes(x, w, epi);
        rep.fact(
            group,
            format!("{:?} x {:?} [{path}] routed", x.shape, w.shape),
            took == want,
            format!("the Hopper GEMM takes it: {took}, expected {want}"),
        );
    }
}

/// One `linear_qkv_attention` check's inputs, for either backend: `qkv_attention`'s
/// (its qkv rows left empty) and the product's.
struct QkvCase<'a> {
    step: QkvInputs<'a>,
    hidden: usize,
    bias: bool,
    x: &'a [f32],
    w: &'a [f32],
    b: &'a [f32],
}

/// The prefix cached, then the step's qkv product and attention: fused
/// (`linear_qkv_attention`) or the product then `qkv_attention`. Returns whether the
/// backend said it fuses, the output and the cache.
fn qkv_step<B: Backend>(be: &B, q: &QkvCase<'_>, fused: bool) -> Result<(bool, Vec<f32>, B::Kv)> {
    let c = q.step.c;
    let cols = (c.q_heads + 2 * c.kv_heads) * c.head_dim;
    let t = q.step.attn.tokens.len();
    let mut s = prefixed(be, &q.step)?;
    let p = params(c, q.step.norms, &s.wq, &s.wk, &s.inv);
    let x = up(be, &[t, q.hidden], q.x)?;
    let w = up(be, &[cols, q.hidden], q.w)?;
    let b = up(be, &[cols], q.b)?;
    let bias = q.bias.then_some(&b);
    let fuses = be.fuses_qkv_product(&x, &w, &p);
    let out = if fused {
        be.linear_qkv_attention(&x, &w, bias, &mut s.kv, 0, &s.st, &p)?
    } else {
        let qkv = be.linear(&x, &w, bias)?;
        be.qkv_attention(qkv, &mut s.kv, 0, &s.st, &p)?
    };
    Ok((fuses, be.to_host(&out)?, s.kv))
}

/// `linear_qkv_attention` with the q/k norm, RoPE and K/V cache write in the Hopper
/// GEMM's epilogue (its _rope builds) against the CPU's product then `qkv_attention`:
/// the output and the step's K and V in the cache. On the paths that force a tile, also
/// against the same GPU product unfused (the plain build at that tile, then
/// qkv_rope_store and the attention) bit for bit, as the kernel claims. Layouts:
/// Qwen3-0.6B (16q/8kv x 128, q/k norms), Qwen3-14B (40q/8kv), Qwen2.5-0.5B (14q/2kv x
/// 64, qkv bias, no norms, pages of 1); decode batches of 70-256 rows and a mixed
/// prefill + decode step.
fn qkv_attention(
    cpu: &CpuBackend,
    gpu: &CudaBackend,
    rng: &mut ChaCha8Rng,
    rep: &mut Report,
) -> Result<()> {
    use rand::Rng;
    const T: f64 = 2e-2;
    let decode = |n: usize, rng: &mut ChaCha8Rng| -> Vec<(usize, usize)> {
        (0..n).map(|_| (rng.random_range(0..600), 1)).collect()
    };
    let mut mixed = decode(70, rng);
    mixed.push((30, 80));
    // (case, hidden, norms, bias, every tile)
    let cases = [
        (
            Case::new("decode", 16, 128, 16, 8, decode(100, rng)),
            1024,
            true,
            false,
            true,
        ),
        (
            Case::new("decode", 16, 128, 16, 8, decode(256, rng)),
            1024,
            true,
            false,
            false,
        ),
        (
            Case::new("prefill+decode", 16, 128, 40, 8, mixed),
            5120,
            true,
            false,
            false,
        ),
        (
            Case::new("decode", 1, 64, 14, 2, decode(70, rng)),
            896,
            false,
            true,
            false,
        ),
    ];
    for (c, hidden, norms, bias, sweep) in &cases {
        let (hd, hq, hkv) = (c.head_dim, c.q_heads, c.kv_heads);
        let (num_pages, fill, attn) = metas(c, rng);
        let (kvw, cols) = (hkv * hd, (hq + 2 * hkv) * hd);
        let (nf, t) = (fill.tokens.len(), attn.tokens.len());
        let (kf, vf) = (randn(rng, nf * kvw, 1.0), randn(rng, nf * kvw, 1.0));
        let (x, w) = (randn(rng, t * hidden, 1.0), randn(rng, cols * hidden, 0.05));
        let (b, wq, wk) = (
            randn(rng, cols, 0.5),
            randn(rng, hd, 1.0),
            randn(rng, hd, 1.0),
        );
        let inv = qwen3_inv_freq(hd);
        let q = QkvCase {
            step: QkvInputs {
                c,
                norms: *norms,
                layout: KvLayout {
                    num_layers: 1,
                    num_pages,
                    page_size: c.page_size,
                    kv_heads: hkv,
                    head_dim: hd,
                },
                fill: &fill,
                attn: &attn,
                k: &kf,
                v: &vf,
                qkv: &[],
                wq: &wq,
                wk: &wk,
                inv: &inv,
            },
            hidden: *hidden,
            bias: *bias,
            x: &x,
            w: &w,
            b: &b,
        };
        // The step's rows of a cache ([slot][kv_heads x head_dim]).
        let step_rows = |cache: &[f32]| -> Vec<f32> {
            attn.slots
                .iter()
                .flat_map(|&s| {
                    cache[s as usize * kvw..(s as usize + 1) * kvw]
                        .iter()
                        .copied()
                })
                .collect()
        };
        let gpu_rows = |kv: &<CudaBackend as Backend>::Kv| -> Result<[Vec<f32>; 2]> {
            Ok([
                step_rows(&cache_f32(gpu, &kv.k[0])?),
                step_rows(&cache_f32(gpu, &kv.v[0])?),
            ])
        };
        let (_, oc, kvc) = qkv_step(cpu, &q, false)?;
        let [kc, vc] = [step_rows(&kvc.k[0]), step_rows(&kvc.v[0])];
        let mut paths = vec!["tc gemm".to_string()];
        if *sweep {
            paths.extend([1, 2, 4, 8].map(|s| format!("tc gemm {hd}x{s}")));
        }
        for path in paths {
            let desc = format!(
                "{} ps={} hd={hd} {hq}q/{hkv}kv T={t} norms={norms} bias={bias} [{path}]",
                c.name, c.page_size
            );
            let fused = on_path(gpu, &path, || {
                let (fuses, o, kv) = qkv_step(gpu, &q, true)?;
                Ok((fuses, o, gpu_rows(&kv)?))
            });
            let (fuses, og, [kg, vg]) = match fused {
                Ok(r) => r,
                Err(e) => {
                    rep.fact("qkv_attn_tc", desc, false, format!("did not run: {e:#}"));
                    continue;
                }
            };
            rep.fact(
                "qkv_attn_tc",
                format!("{desc} routed"),
                fuses,
                format!("the rope epilogue takes it: {fuses}"),
            );
            for (what, g, c) in [
                ("out", &og, &oc),
                ("step K", &kg, &kc),
                ("step V", &vg, &vc),
            ] {
                rep.check("qkv_attn_tc", format!("{desc} {what}"), g, c, T);
            }
            if path == "tc gemm" {
                continue;
            }
            // The same tile unfused: the plain build, qkv_rope_store, the attention.
            let unfused = on_path(gpu, &path, || {
                let (_, o, kv) = qkv_step(gpu, &q, false)?;
                Ok((o, gpu_rows(&kv)?))
            });
            match unfused {
                Ok((ou, [ku, vu])) => {
                    for (what, g, u) in [
                        ("out", &og, &ou),
                        ("step K", &kg, &ku),
                        ("step V", &vg, &vu),
                    ] {
                        let case = format!("{desc} {what} against the product then qkv_rope_store");
                        rep.check("qkv_attn_tc", case, g, u, 0.0);
                    }
                }
                Err(e) => {
                    let case = format!("{desc} unfused");
                    rep.fact("qkv_attn_tc", case, false, format!("did not run: {e:#}"));
                }
            }
        }
    }
    Ok(())
}
