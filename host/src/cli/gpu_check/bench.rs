//! Short benchmark: decode attention bandwidth against the device's copy bandwidth,
//! prefill attention throughput, and full decode steps of a random-weight model
//! against their floors (both rates measured at start, [`Rates`]).

use std::path::Path;

use anyhow::{Context, Result};
use cudarc::driver::sys::CUevent_flags;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::attn::{metas, Case};
use super::inputs::randn;
use super::rates::Rates;
use super::report::Report;
use minisgl::backend::cuda::CudaBackend;
use minisgl::backend::{Backend, HostData, StepMeta};
use minisgl::model::placement::build_runner_with;
use minisgl::model::runner::{DeviceKind, RunnerOptions};

/// A one-layer cache of `c`'s sequences filled with random K/V, their step, and random
/// queries for it (head_dim and kv heads as `c` says, page size 16).
fn bench_case(
    gpu: &CudaBackend,
    c: &Case,
    rng: &mut ChaCha8Rng,
) -> Result<(
    minisgl::backend::cuda::CudaKv,
    StepMeta,
    minisgl::backend::cuda::CudaTensor,
)> {
    let (num_pages, fill, attn) = metas(c, rng);
    let mut kv = gpu.alloc_kv(c.layout(num_pages))?;
    fill_random(gpu, &mut kv, &fill, 1024)?;
    let t = attn.tokens.len();
    let width = c.q_heads * c.head_dim;
    let q = randn(rng, t * width, 1.0);
    let qg = gpu.upload(&[t, width], HostData::f32(&q))?;
    Ok((kv, attn, qg))
}

/// Fill every slot of the cache with random K/V by repeating one random chunk.
fn fill_random(
    gpu: &CudaBackend,
    kv: &mut <CudaBackend as Backend>::Kv,
    fill: &StepMeta,
    kvw: usize,
) -> Result<()> {
    let chunk = 8192usize;
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let k = randn(&mut rng, chunk * kvw, 1.0);
    let v = randn(&mut rng, chunk * kvw, 1.0);
    let kt = gpu.upload(&[chunk, kvw], minisgl::backend::HostData::f32(&k))?;
    let vt = gpu.upload(&[chunk, kvw], minisgl::backend::HostData::f32(&v))?;
    for s in fill.slots.chunks(chunk) {
        let mut m = fill.clone();
        m.slots = s.to_vec();
        m.tokens = vec![0; s.len()];
        m.positions = vec![0; s.len()];
        m.q_indptr = vec![0, s.len() as u32];
        m.kv_lens = vec![s.len() as u32];
        m.page_table = vec![];
        m.page_indptr = vec![0, 0];
        m.sample_rows = vec![];
        // store_kv only reads slots; page tables are irrelevant here.
        let st = gpu.prepare_step(&m)?;
        if s.len() == chunk {
            gpu.store_kv(kv, 0, &kt, &vt, &st)?;
        } else {
            let kk = gpu.upload(
                &[s.len(), kvw],
                minisgl::backend::HostData::f32(&k[..s.len() * kvw]),
            )?;
            let vv = gpu.upload(
                &[s.len(), kvw],
                minisgl::backend::HostData::f32(&v[..s.len() * kvw]),
            )?;
            gpu.store_kv(kv, 0, &kk, &vv, &st)?;
        }
    }
    Ok(())
}

fn time_ms(gpu: &CudaBackend, iters: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    for _ in 0..3 {
        f()?;
    }
    let ctx = &gpu.dev.ctx;
    let e0 = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
    let e1 = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
    e0.record(&gpu.dev.stream)?;
    for _ in 0..iters {
        f()?;
    }
    e1.record(&gpu.dev.stream)?;
    e1.synchronize()?;
    Ok(e0.elapsed_ms(&e1)? as f64 / iters as f64)
}

/// A gpu-check bench switch: off when unset; a value that is no on/off word is an
/// error naming the variable and the value (a typo must not run the whole bench).
fn bench_switch(var: &str) -> Result<bool> {
    match std::env::var(var) {
        Err(_) => Ok(false),
        Ok(v) => minisgl::env::parse_flag(&v).ok_or_else(|| {
            anyhow::anyhow!("{var} must be 1/on/true/yes or 0/off/false/no, got {v:?}")
        }),
    }
}

pub fn run(
    gpu: &CudaBackend,
    rates: &Rates,
    bench_model: Option<&Path>,
    rep: &mut Report,
) -> Result<()> {
    rep.bench_line(rates.describe());
    // MINISGL_BENCH_RUNNER_ONLY=1: the runner step alone (a short device call).
    if bench_switch("MINISGL_BENCH_RUNNER_ONLY")? {
        return runner_steps(bench_model, rates, rep);
    }
    // MINISGL_BENCH_GEMV_ONLY=1: the skinny products against cuBLAS in graphs alone.
    if bench_switch("MINISGL_BENCH_GEMV_ONLY")? {
        return gemv_in_graphs(gpu, &mut ChaCha8Rng::seed_from_u64(99), rep);
    }
    // MINISGL_BENCH_GEMM_HOLD=S: the cuBLASLt survey alone, every candidate timed at
    // the clock the device holds at its power limit after S seconds of the product.
    if let Ok(v) = std::env::var("MINISGL_BENCH_GEMM_HOLD") {
        let hold: f64 = v
            .parse()
            .map_err(|_| anyhow::anyhow!("MINISGL_BENCH_GEMM_HOLD must be seconds, got {v:?}"))?;
        return gemm_algos(gpu, rep, hold);
    }
    // MINISGL_BENCH_GEMM_SWEEP=1: every cuBLASLt configuration of the decode products
    // at 128 and 256 rows, weights from memory (gemm_sweep.rs).
    if bench_switch("MINISGL_BENCH_GEMM_SWEEP")? {
        return gemm_sweep(gpu, rep);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(99);
    // MINISGL_BENCH_PREFILL_ONLY=1: the Hopper prefill kernel under each tile order.
    if bench_switch("MINISGL_BENCH_PREFILL_ONLY")? {
        return prefill_orders(gpu, &mut rng, rep);
    }
    // MINISGL_BENCH_DECODE_ONLY=1: the decode kernels' table alone (a kernel A/B run
    // twice in one call, once under MINISGL_KERNEL_DEFINES).
    if bench_switch("MINISGL_BENCH_DECODE_ONLY")? {
        return decode_kernels(gpu, rates, &mut rng, rep);
    }
    // MINISGL_BENCH_MIXED_ONLY=1: mixed prefill + decode steps' attention alone.
    if bench_switch("MINISGL_BENCH_MIXED_ONLY")? {
        return mixed_steps(gpu, rates, &mut rng, rep);
    }
    let shapes: &[(&str, usize, usize, usize)] = &[
        ("decode", 256, 1100, 1),
        ("decode", 8, 16384, 1),
        ("decode", 64, 4096, 1),
        ("prefill", 8, 2048, 2048),
    ];
    for &(kind, batch, ctx, new) in shapes {
        let c = Case::new("bench", 16, 128, 16, 8, vec![(ctx - new, new); batch]);
        let (kv, attn, qg) = bench_case(gpu, &c, &mut rng)?;
        let t = attn.tokens.len();
        let st = gpu.prepare_step(&attn)?;
        let out = gpu.new_output(t, 2048)?;
        let path = gpu.attention_path(&st, 128, 2);
        let ms = time_ms(gpu, 20, || {
            Ok(gpu.attention_into(&qg, &kv, 0, &st, 0.088, &out, None)?)
        })?;
        let ms_simple = time_ms(gpu, 3, || {
            Ok(gpu.attention_into(
                &qg,
                &kv,
                0,
                &st,
                0.088,
                &out,
                Some(minisgl::backend::cuda::ops::AttnPath::Simple),
            )?)
        })?;
        if kind == "decode" {
            let bytes = (batch * ctx * 8 * 128 * 2 * 2) as f64;
            let bw = bytes / (ms * 1e-3);
            rep.bench_line(format!(
                "decode attention [{path:?}] batch {batch} x ctx {ctx}, 16q/8kv x 128, page 16: {:.3} ms, {:.2} TB/s = {:.0}% of the {:.2} TB/s copy ceiling (simple kernel: {:.3} ms, {:.2} TB/s)",
                ms,
                bw / 1e12,
                100.0 * bw / rates.copy_bytes_s,
                rates.copy_tbps(),
                ms_simple,
                bytes / (ms_simple * 1e-3) / 1e12
            ));
        } else {
            let flops = 4.0 * 128.0 * 16.0 * batch as f64 * (new * (new + 1) / 2) as f64;
            let ms_portable = time_ms(gpu, 10, || {
                Ok(gpu.attention_into(
                    &qg,
                    &kv,
                    0,
                    &st,
                    0.088,
                    &out,
                    Some(minisgl::backend::cuda::ops::AttnPath::Prefill),
                )?)
            })?;
            rep.bench_line(format!(
                "prefill attention [{path:?}] {batch} x {new} new tokens causal, 16q/8kv x 128: {:.3} ms, {:.0} TFLOP/s (portable mma kernel: {:.3} ms, {:.0} TFLOP/s; simple kernel: {:.3} ms)",
                ms,
                flops / (ms * 1e-3) / 1e12,
                ms_portable,
                flops / (ms_portable * 1e-3) / 1e12,
                ms_simple
            ));
        }
    }
    decode_kernels(gpu, rates, &mut rng, rep)?;
    mixed_steps(gpu, rates, &mut rng, rep)?;
    // Skinny linear layers (decode batches): the gemv kernel against cuBLAS on
    // Qwen3-0.6B's qkv, down and LM-head shapes; bytes = the weight read.
    for &(n, k) in &[(4096usize, 1024usize), (1024, 3072), (151_936, 1024)] {
        let w = gpu.upload(&[n, k], HostData::f32(&randn(&mut rng, n * k, 0.05)))?;
        let mut line = format!("linear n={n} k={k}:");
        for m in [1usize, 2, 4, 8] {
            let x = gpu.upload(&[m, k], HostData::f32(&randn(&mut rng, m * k, 1.0)))?;
            let mut ms = [0.0f64; 2];
            for (i, rows) in [8usize, 0].into_iter().enumerate() {
                gpu.set_gemv_rows(rows);
                ms[i] = time_ms(gpu, 50, || {
                    gpu.linear(&x, &w, None)?;
                    Ok(())
                })?;
            }
            let gbs = |t: f64| (n * k * 2) as f64 / (t * 1e-3) / 1e9;
            line.push_str(&format!(
                " m={m} gemv {:.1} us ({:.0} GB/s) / cuBLAS {:.1} us ({:.0} GB/s);",
                ms[0] * 1e3,
                gbs(ms[0]),
                ms[1] * 1e3,
                gbs(ms[1])
            ));
        }
        gpu.set_gemv_rows(minisgl::backend::cuda::GEMV_ROWS_DEFAULT);
        rep.bench_line(line);
    }
    fused_products(gpu, &mut rng, rep)?;
    gemm_algos(gpu, rep, 0.0)?;
    gemv_in_graphs(gpu, &mut rng, rep)?;
    runner_steps(bench_model, rates, rep)
}

/// Rounds of an A/B runner comparison (MINISGL_BENCH_AB), in alternating order, unless
/// MINISGL_BENCH_AB_ROUNDS says otherwise (a noisy shape: more rounds, same medians).
const AB_ROUNDS: usize = 3;

/// The median of `v` (sorted in place; the upper middle of an even count).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The runner's decode step at a few batch sizes (MINISGL_BENCH_BATCHES, a comma list;
/// 1, 4, 8, 64, 256 by default) and context (MINISGL_BENCH_CONTEXT, 256 by default;
/// the default workload's large batches run at 600-1,300), CUDA graphs against eager,
/// with the floor.
fn runner_steps(bench_model: Option<&Path>, rates: &Rates, rep: &mut Report) -> Result<()> {
    if let Some(p) = bench_model {
        let lm = minisgl::model::load_random(p, 1)?;
        let prompt: usize = match std::env::var("MINISGL_BENCH_CONTEXT") {
            Ok(v) => v.trim().parse().with_context(|| {
                format!("MINISGL_BENCH_CONTEXT must be a token count, got {v:?}")
            })?,
            Err(_) => 256,
        };
        let batches: Vec<usize> = match std::env::var("MINISGL_BENCH_BATCHES") {
            Ok(v) => v
                .split(',')
                .map(|b| b.trim().parse())
                .collect::<Result<_, _>>()
                .with_context(|| {
                    format!("MINISGL_BENCH_BATCHES must list batch sizes, got {v:?}")
                })?,
            Err(_) => vec![1, 4, 8, 64, 256],
        };
        let (steps, ps) = (16usize, 16u32);
        // KV for the largest batch timed only: two runners of Llama-3.1-8B with KV for 256
        // sequences at context 1,024 (35 GB each) ran an H100 out of memory (2026-12-06).
        let most = batches.iter().copied().max().unwrap_or(1).max(1);
        let pages = ((prompt + steps + 2).div_ceil(16) * most) as u32 + 1;
        let c = &lm.config;
        // A decode step reads every weight once and each sequence's KV once.
        let kv_per_token = (c.kv_elems_per_token() * 2) as f64;
        // The timed steps read contexts of prompt + 2 .. prompt + 1 + steps rows (after
        // the prefill and one warm-up step): their mean, not the prompt alone.
        let mean_ctx = prompt as f64 + 1.5 + steps as f64 / 2.0;
        let kv_ms =
            |batch: usize| 1e3 * batch as f64 * mean_ctx * kv_per_token / rates.copy_bytes_s;
        let weights_ms = 1e3 * weight_bytes(c) / rates.copy_bytes_s;
        let floor_ms = |batch: usize| weights_ms + kv_ms(batch);
        let t0 = std::time::Instant::now();
        let mut graphs =
            build_runner_with(&lm, DeviceKind::Cuda, pages, ps, &RunnerOptions::default())?;
        let setup_s = t0.elapsed().as_secs_f64();
        // The eager runner holds a second copy of the weights: Qwen3-32B's 65 GB do not
        // fit an H200 twice (out of memory on 2026-12-04), so past what is free it is
        // left out and only the graph steps are timed.
        let ordinal = minisgl::backend::cuda::CudaOptions::default().ordinal;
        let free = minisgl::backend::cuda::device::memory_info(ordinal).map_or(0, |(f, _)| f);
        // MINISGL_BENCH_NO_EAGER=1 leaves it out too (a 14B A/B then builds two runners).
        let no_eager = bench_switch("MINISGL_BENCH_NO_EAGER")?;
        let mut eager = if no_eager {
            rep.bench_line("runner.step: eager runner left out (MINISGL_BENCH_NO_EAGER=1)".into());
            None
        } else if (free as f64) > 1.1 * weight_bytes(c) + 4e9 {
            Some(eager_cuda_runner(&lm, pages, ps)?)
        } else {
            rep.bench_line(format!(
                "runner.step: eager runner left out ({:.1} GB free, {:.1} GB of weights): graph steps only",
                free as f64 / 1e9,
                weight_bytes(c) / 1e9
            ));
            None
        };
        // MINISGL_BENCH_AB=VAR=VALUE: the same graphs recorded with VAR=VALUE (read
        // when a backend opens) beside the default ones, for a ratio in this run.
        let mut ab = match std::env::var("MINISGL_BENCH_AB").ok() {
            Some(spec) => {
                let (var, val) = spec
                    .split_once('=')
                    .with_context(|| format!("MINISGL_BENCH_AB must be VAR=VALUE, got {spec:?}"))?;
                let before = std::env::var(var).ok();
                std::env::set_var(var, val);
                let r =
                    build_runner_with(&lm, DeviceKind::Cuda, pages, ps, &RunnerOptions::default());
                match before {
                    Some(v) => std::env::set_var(var, v),
                    None => std::env::remove_var(var),
                }
                Some((spec, r?))
            }
            None => None,
        };
        rep.bench_line(format!(
            "{} random weights: floor of a decode step = (bf16 weights {:.2} GB + KV of batch x {mean_ctx:.1} tokens, the timed steps' mean context) at {:.2} TB/s; runner with decode graphs up to batch 256 built in {setup_s:.2} s",
            p.display(),
            weight_bytes(c) / 1e9,
            rates.copy_tbps()
        ));
        for &batch in &batches {
            let tps_e = match eager.as_mut() {
                Some(r) => {
                    Some(super::model::decode_throughput(r.as_mut(), batch, prompt, steps)?.0)
                }
                None => None,
            };
            let (mut tps_g, _) =
                super::model::decode_throughput(graphs.as_mut(), batch, prompt, steps)?;
            let mut ms_g = 1e3 * batch as f64 / tps_g;
            let f = floor_ms(batch);
            if let Some((spec, r)) = ab.as_mut() {
                let rounds = match std::env::var("MINISGL_BENCH_AB_ROUNDS") {
                    Ok(v) => v.trim().parse::<usize>().ok().filter(|&n| n >= 1).with_context(|| {
                        format!("MINISGL_BENCH_AB_ROUNDS must be a round count of 1 or more, got {v:?}")
                    })?,
                    Err(_) => AB_ROUNDS,
                };
                // AB_ROUNDS rounds in alternating order (A B, B A, A B, ...), the median of
                // each side: with one round in one order a null A/B (a variable nothing
                // reads) put the second runner 6-9% behind at batches 1, 8 and 16
                // (2026-12-04, docs/results/gpu-2026-12-04-sample.md).
                let (mut a, mut b) = (vec![ms_g], Vec::new());
                for round in 0..rounds {
                    let order: [usize; 2] = if round % 2 == 0 { [1, 0] } else { [0, 1] };
                    for side in order {
                        if side == 0 && round == 0 {
                            continue; // the default's first round is ms_g above
                        }
                        let run: &mut dyn minisgl::model::ModelRunner = if side == 0 {
                            graphs.as_mut()
                        } else {
                            r.as_mut()
                        };
                        let (tps, _) = super::model::decode_throughput(run, batch, prompt, steps)?;
                        let ms = 1e3 * batch as f64 / tps;
                        if side == 0 {
                            a.push(ms)
                        } else {
                            b.push(ms)
                        }
                    }
                }
                ms_g = median(&mut a);
                tps_g = 1e3 * batch as f64 / ms_g;
                let ms_b = median(&mut b);
                rep.bench_line(format!(
                    "runner.step A/B, batch {batch}, context ~{prompt}: CUDA graphs {ms_g:.3} ms/step as built ({:.2}x the floor), {ms_b:.3} with {spec} ({:.2}x); default / {spec} {:.3}x (medians of {rounds} rounds in alternating order; as built {a:.3?}, with {spec} {b:.3?})",
                    ms_g / f,
                    ms_b / f,
                    ms_g / ms_b
                ));
            }
            // The products' FLOPs at the GEMM rate (2 FLOPs a row for each 2-byte
            // weight): above the bytes floor at large batches of large models, where no
            // kernel can reach the bytes floor.
            let flops_ms = 1e3 * weight_bytes(c) * batch as f64 / rates.gemm_flops_s;
            // Kernels run one after another: the products at the larger of their bytes
            // and their FLOPs, then the KV at the copy rate (the "bytes or FLOPs"
            // floor, summed per kernel rather than overlapped).
            let serial = weights_ms.max(flops_ms) + kv_ms(batch);
            let eager_part = match tps_e {
                None => "eager left out".to_string(),
                Some(tps_e) => {
                    let ms_e = 1e3 * batch as f64 / tps_e;
                    format!(
                        "eager {tps_e:.0} tok/s ({ms_e:.3} ms/step, {:.2}x the floor); graphs / eager {:.2}x",
                        ms_e / f,
                        tps_g / tps_e
                    )
                }
            };
            rep.bench_line(format!(
                "runner.step greedy decode, batch {batch}, context ~{prompt}: floor {f:.3} ms (products' FLOPs at {:.0} TFLOP/s: {flops_ms:.3} ms); CUDA graphs {tps_g:.0} tok/s ({ms_g:.3} ms/step, {:.2}x the floor), {eager_part}; serial floor {serial:.3} ms ({:.2}x)",
                rates.gemm_tflops(),
                ms_g / f,
                ms_g / serial
            ));
        }
    }
    Ok(())
}

/// A runner on the CUDA device that records no decode graphs: every step launches its
/// kernels one by one (the eager half of the runner bench, and the timeline, which
/// times each launch).
pub(super) fn eager_cuda_runner(
    lm: &minisgl::model::LoadedModel,
    pages: u32,
    page_size: u32,
) -> Result<Box<dyn minisgl::model::runner::ModelRunner>> {
    let opts = RunnerOptions {
        cuda_graph_max_bs: 0,
        ..RunnerOptions::default()
    };
    Ok(build_runner_with(
        lm,
        DeviceKind::Cuda,
        pages,
        page_size,
        &opts,
    )?)
}

/// Bytes a decode step must read at least: every weight once (bf16), the LM
/// head included. An untied input embedding is left out: its gather reads
/// only a few rows.
pub(super) fn weight_bytes(c: &minisgl::model::ModelConfig) -> f64 {
    let untied_embedding = if c.tie_word_embeddings() {
        0
    } else {
        c.vocab_size() * c.hidden_size()
    };
    (2 * (c.num_params() - untied_embedding)) as f64
}

/// The decode products with their neighbour in the epilogue (gemv.cu) against the two
/// launches they replace, both through the skinny kernel, at one and two rows: the down
/// projections of Qwen3-0.6B and 14B, the gate_up of the 0.6B and of a 14B shard over
/// two GPUs; bytes = the weight read.
fn fused_products(gpu: &CudaBackend, rng: &mut ChaCha8Rng, rep: &mut Report) -> Result<()> {
    let gbs = |bytes: usize, ms: f64| bytes as f64 / (ms * 1e-3) / 1e9;
    for &(n, k) in &[(1024usize, 3072usize), (5120, 17408)] {
        let w = gpu.upload(&[n, k], HostData::f32(&randn(rng, n * k, 0.05)))?;
        let g = gpu.upload(&[n], HostData::f32(&randn(rng, n, 1.0)))?;
        let mut line = format!("linear + add_rms_norm n={n} k={k}:");
        for m in [1usize, 2] {
            let x = gpu.upload(&[m, k], HostData::f32(&randn(rng, m * k, 1.0)))?;
            let mut r = gpu.upload(&[m, n], HostData::f32(&randn(rng, m * n, 1.0)))?;
            let fused = time_ms(gpu, 50, || {
                gpu.linear_add_rms_norm(&x, &w, None, &mut r, &g, 1e-6)?;
                Ok(())
            })?;
            let pair = time_ms(gpu, 50, || {
                let o = gpu.linear(&x, &w, None)?;
                gpu.add_rms_norm(&mut r, &o, &g, 1e-6)?;
                Ok(())
            })?;
            // The add alone: what the product costs when the next one normalises.
            let add = time_ms(gpu, 50, || {
                gpu.linear_add(&x, &w, None, &mut r)?;
                Ok(())
            })?;
            line.push_str(&format!(
                " m={m} add in the epilogue, then the norm {:.1} us ({:.0} GB/s) / product, then add + norm {:.1} us / add only {:.1} us ({:.0} GB/s);",
                fused * 1e3,
                gbs(n * k * 2, fused),
                pair * 1e3,
                add * 1e3,
                gbs(n * k * 2, add)
            ));
        }
        rep.bench_line(line);
    }
    // 14B's gate_up (34,816 rows) is past the gemv limit; half of it is a two-GPU shard.
    for &(n, k) in &[(3072usize, 1024usize), (8704, 5120)] {
        let w = gpu.upload(&[2 * n, k], HostData::f32(&randn(rng, 2 * n * k, 0.05)))?;
        let gk = gpu.upload(&[k], HostData::f32(&randn(rng, k, 1.0)))?;
        let mut line = format!("linear_silu_mul n={n} k={k}:");
        for m in [1usize, 2] {
            let x = gpu.upload(&[m, k], HostData::f32(&randn(rng, m * k, 1.0)))?;
            let fused = time_ms(gpu, 50, || {
                gpu.linear_silu_mul(&x, &w)?;
                Ok(())
            })?;
            let pair = time_ms(gpu, 50, || {
                gpu.silu_mul(&gpu.linear(&x, &w, None)?)?;
                Ok(())
            })?;
            let normed = time_ms(gpu, 50, || {
                gpu.rms_norm_linear_silu_mul(&x, &gk, 1e-6, &w)?;
                Ok(())
            })?;
            line.push_str(&format!(
                " m={m} fused {:.1} us ({:.0} GB/s) / two launches {:.1} us / with the norm in its prologue {:.1} us;",
                fused * 1e3,
                gbs(2 * n * k * 2, fused),
                pair * 1e3,
                normed * 1e3
            ));
        }
        rep.bench_line(line);
    }
    // The qkv products of Qwen3-0.6B and 14B with their input norm: in the prologue,
    // against the norm's own launch before the product.
    for &(n, k) in &[(4096usize, 1024usize), (7168, 5120)] {
        let w = gpu.upload(&[n, k], HostData::f32(&randn(rng, n * k, 0.05)))?;
        let gk = gpu.upload(&[k], HostData::f32(&randn(rng, k, 1.0)))?;
        let mut line = format!("rms_norm_linear n={n} k={k}:");
        for m in [1usize, 2] {
            let x = gpu.upload(&[m, k], HostData::f32(&randn(rng, m * k, 1.0)))?;
            let fused = time_ms(gpu, 50, || {
                gpu.rms_norm_linear(&x, &gk, 1e-6, &w, None)?;
                Ok(())
            })?;
            let plain = time_ms(gpu, 50, || {
                gpu.linear(&x, &w, None)?;
                Ok(())
            })?;
            let pair = time_ms(gpu, 50, || {
                gpu.linear(&gpu.rms_norm(&x, &gk, 1e-6)?, &w, None)?;
                Ok(())
            })?;
            line.push_str(&format!(
                " m={m} prologue {:.1} us ({:.0} GB/s) / product alone {:.1} us / norm then product {:.1} us;",
                fused * 1e3,
                gbs(n * k * 2, fused),
                plain * 1e3,
                pair * 1e3
            ));
        }
        rep.bench_line(line);
    }
    Ok(())
}

/// The prefill attention kernel the engine picks, under each order of a step's tiles
/// ([`PrefillOrder`]), on steps shaped like the workloads': uniform fresh prompts, a
/// prefix + extend chunk beside fresh prompts (the long-prompt workload), a chunk of
/// short prompts of mixed lengths (the default workload), at Qwen3-0.6B's and 14B's
/// heads. The orders take turns over three rounds (medians), each round led by another,
/// and their outputs must be equal bit for bit: a tile computes the same whatever runs
/// beside it.
fn prefill_orders(gpu: &CudaBackend, rng: &mut ChaCha8Rng, rep: &mut Report) -> Result<()> {
    use minisgl::backend::cuda::device::PrefillOrder;
    const ORDERS: [PrefillOrder; 3] =
        [PrefillOrder::Batch, PrefillOrder::Seqs, PrefillOrder::Tiles];
    let mixed: Vec<(usize, usize)> = {
        let (mut v, mut total) = (Vec::new(), 0);
        while total < 7_200 {
            let n = rng.random_range(100..=1024);
            v.push((0, n));
            total += n;
        }
        v
    };
    let steps: Vec<(&str, Vec<(usize, usize)>)> = vec![
        ("8 x 2,048 fresh", vec![(0, 2048); 8]),
        ("1 x 8,192 fresh", vec![(0, 8192)]),
        ("32 x 512 fresh", vec![(0, 512); 32]),
        ("4 x 1,024 extending 3,072", vec![(3072, 1024); 4]),
        (
            "extend 2,200 on 4,000 + fresh 4,000 + 1,992",
            vec![(4000, 2200), (0, 4000), (0, 1992)],
        ),
        ("fresh 100-1,024 (default workload chunk)", mixed),
    ];
    for (label, seqs) in &steps {
        for (shape, q_heads) in [("0.6B", 16usize), ("14B", 40)] {
            let c = Case::new("bench", 16, 128, q_heads, 8, seqs.clone());
            let (kv, attn, qg) = bench_case(gpu, &c, rng)?;
            let t = attn.tokens.len();
            let out = gpu.new_output(t, q_heads * 128)?;
            let mut ms: [Vec<f64>; 3] = Default::default();
            let mut outs: Vec<Vec<f32>> = Vec::new();
            let mut path = None;
            // Each round starts with the next order: a launch run first in a round ran
            // at a higher clock (1 x 8,192 at 14B heads: identical tile lists 5% apart
            // when one order always went first).
            for round in 0..3 {
                for i in (0..3).map(|j| (round + j) % 3) {
                    let order = ORDERS[i];
                    gpu.set_prefill_order(order);
                    let st = gpu.prepare_step(&attn)?;
                    path.get_or_insert(gpu.attention_path(&st, 128, q_heads / 8));
                    ms[i].push(time_ms(gpu, 20, || {
                        Ok(gpu.attention_into(&qg, &kv, 0, &st, 0.088, &out, None)?)
                    })?);
                    if round == 0 {
                        outs.push(gpu.to_host(&out)?);
                    }
                }
            }
            let same = outs.iter().all(|o| o == &outs[0]);
            let flops: f64 = seqs
                .iter()
                .map(|&(p, n)| 4.0 * 128.0 * q_heads as f64 * (n * p + n * (n + 1) / 2) as f64)
                .sum();
            let tf = |v: &mut Vec<f64>| {
                v.sort_by(f64::total_cmp);
                flops / (v[1] * 1e-3) / 1e12
            };
            let [b, q, w] = ms.each_mut().map(tf);
            rep.bench_line(format!(
                "prefill order {label}, {shape} ({q_heads}q/8kv x 128, page 16) [{:?}]: batch {b:.1} / seqs {q:.1} / tiles {w:.1} TFLOP/s (seqs {:.3}x, tiles {:.3}x the batch's order); outputs {}",
                path.unwrap(),
                q / b,
                w / b,
                if same { "equal" } else { "DIFFER" }
            ));
            anyhow::ensure!(
                same,
                "prefill outputs differ between tile orders: {label}, {shape}"
            );
        }
    }
    gpu.set_prefill_order(PrefillOrder::default());
    Ok(())
}

/// The decode-batch products of Qwen3-0.6B and 14B (qkv, o, gate_up, down) through
/// `cublasGemmEx`'s own algorithm against cuBLASLt's heuristic candidates, each timed
/// alone: what an algorithm tuner in `linear` would gain at batch 16-256. With
/// `hold_s > 0` each shape's candidates are timed in turns after `hold_s` seconds of
/// the product, at the clock the power limit leaves (`survey_gemm`).
fn gemm_algos(gpu: &CudaBackend, rep: &mut Report, hold_s: f64) -> Result<()> {
    for &(shape, n, k) in &[
        ("0.6B qkv", 4096usize, 1024usize),
        ("0.6B o", 1024, 2048),
        ("0.6B gate_up", 6144, 1024),
        ("0.6B down", 1024, 3072),
        ("14B qkv", 7168, 5120),
        ("14B o", 5120, 5120),
        ("14B gate_up", 34816, 5120),
        ("14B down", 5120, 17408),
    ] {
        let held = if hold_s > 0.0 {
            " (held at the power limit)"
        } else {
            ""
        };
        let mut line = format!("gemm algorithms{held} {shape} n={n} k={k}:");
        for m in [16usize, 64, 128, 256] {
            let s = gpu.survey_gemm(m, n, k, 16, 20, hold_s)?;
            let first = s.candidates_us.first().copied().flatten();
            match (first, s.best()) {
                (Some(f), Some((i, b))) => line.push_str(&format!(
                    " m={m} cublasGemmEx {:.1} us / Lt first {f:.1} / best {b:.1} (#{i} of {}, {:.2}x);",
                    s.default_us,
                    s.candidates_us.len(),
                    s.default_us / b
                )),
                _ => line.push_str(&format!(
                    " m={m} cublasGemmEx {:.1} us / no Lt candidate ran;",
                    s.default_us
                )),
            }
        }
        rep.bench_line(line);
    }
    Ok(())
}

/// Every cuBLASLt configuration the library accepts for the 0.6B products at 128 and
/// 256 rows and the 14B o and down at 256, each timed from graph replays with its
/// weight read from memory, against `cublasGemmEx` (what `linear` runs) and
/// cuBLASLt's first heuristic candidate: one line a shape and row count, with the five
/// fastest configurations.
fn gemm_sweep(gpu: &CudaBackend, rep: &mut Report) -> Result<()> {
    let cases: &[(&str, usize, usize, &[usize])] = &[
        ("0.6B qkv", 4096, 1024, &[128, 256]),
        ("0.6B o", 1024, 2048, &[128, 256]),
        ("0.6B gate_up", 6144, 1024, &[128, 256]),
        ("0.6B down", 1024, 3072, &[128, 256]),
        ("14B o", 5120, 5120, &[256]),
        ("14B down", 5120, 17408, &[256]),
    ];
    for &(shape, n, k, rows) in cases {
        for &m in rows {
            let s = gpu.sweep_gemm(m, n, k, 1500)?;
            let mut line = format!(
                "gemm sweep {shape} n={n} k={k} m={m} ({:.1} MB weight, {} copies, cold): \
                 cublasGemmEx {:.2} us;",
                (n * k * 2) as f64 / 1e6,
                s.copies,
                s.default_us
            );
            match s.heuristic {
                Some((cfg, us)) => line.push_str(&format!(" Lt heuristic {us:.2} us [{cfg}];")),
                None => line.push_str(" no Lt heuristic;"),
            }
            line.push_str(&format!(
                " {} configurations checked, {} accepted, {} timed;",
                s.tried,
                s.valid,
                s.timed.len()
            ));
            for (cfg, us) in s.timed.iter().take(5) {
                line.push_str(&format!(" {us:.2} us ({:.2}x) [{cfg}];", s.default_us / us));
            }
            rep.bench_line(line);
        }
    }
    Ok(())
}

/// The skinny kernel against cuBLAS at the row counts that choose between them
/// (`gemv_rows`), and past the weight size that does (`GEMV_MAX_WEIGHT_BYTES`, lifted
/// for the gemv column), both timed from graph replays as decode steps run them: the
/// eager `linear n= k=` lines above count cuBLAS's host cost too.
fn gemv_in_graphs(gpu: &CudaBackend, rng: &mut ChaCha8Rng, rep: &mut Report) -> Result<()> {
    let configured_limit = gpu.gemv_max_weight();
    gpu.set_gemv_max_weight(usize::MAX);
    // Products of Qwen3-0.6B / 1.7B / 4B / 14B and Llama-3.1-8B around the skinny
    // kernel's weight limit (GEMV_MAX_WEIGHT_BYTES, 32 MiB).
    for &(shape, n, k) in &[
        ("0.6B qkv", 4096usize, 1024usize),
        ("0.6B o", 1024, 2048),
        ("0.6B gate_up", 6144, 1024),
        ("0.6B down", 1024, 3072),
        ("1.7B qkv", 4096, 2048),
        ("4B o", 2560, 4096),
        ("1.7B down", 2048, 6144),
        ("4B qkv", 6144, 2560),
        ("8B o", 4096, 4096),
        ("14B o", 5120, 5120),
        ("14B down", 5120, 17408),
    ] {
        // A decode step streams every weight once, from memory.
        let (copies, iters) = minisgl::backend::cuda::cold_copies(n * k * 2);
        let data = randn(rng, n * k, 0.05);
        let ws = (0..copies)
            .map(|_| gpu.upload(&[n, k], HostData::f32(&data)))
            .collect::<Result<Vec<_>, _>>()?;
        let mut line = format!(
            "linear in graphs {shape} n={n} k={k} ({:.1} MB, {copies} copies, cold):",
            (n * k * 2) as f64 / 1e6
        );
        // Up to 16 rows, as MINISGL_GEMV_ROWS may route them (3+: the tensor-core build).
        for m in [1usize, 2, 3, 4, 8, 16] {
            let x = gpu.upload(&[m, k], HostData::f32(&randn(rng, m * k, 1.0)))?;
            let mut res = gpu.upload(&[m, n], HostData::f32(&vec![0.0; m * n]))?;
            // (plain product, product added into the residual as o and down are) for
            // the skinny kernel, then for cuBLAS.
            let mut us = [[0.0f64; 2]; 2];
            for (i, rows) in [minisgl::backend::cuda::GEMV_MAX_ROWS, 0]
                .into_iter()
                .enumerate()
            {
                gpu.set_gemv_rows(rows);
                let mut at = 0;
                us[i][0] = gpu.time_in_graph(iters, &mut || {
                    gpu.linear(&x, &ws[at % copies], None)?;
                    at += 1;
                    Ok(())
                })?;
                us[i][1] = gpu.time_in_graph(iters, &mut || {
                    gpu.linear_add(&x, &ws[at % copies], None, &mut res)?;
                    at += 1;
                    Ok(())
                })?;
            }
            line.push_str(&format!(
                " m={m} gemv {:.1} / +residual {:.1} us, cuBLAS {:.1} / +residual {:.1} us;",
                us[0][0], us[0][1], us[1][0], us[1][1]
            ));
        }
        gpu.set_gemv_rows(minisgl::backend::cuda::GEMV_ROWS_DEFAULT);
        rep.bench_line(line);
    }
    gpu.set_gemv_max_weight(configured_limit);
    Ok(())
}

/// The decode kernels side by side (CUDA-core, tensor-core with splits, and
/// tensor-core on the stream-K schedule) over GQA groups of 2 (Qwen3-0.6B),
/// 5 (Qwen3-14B) and 8 (Qwen3-32B), 8 kv heads of 128: one bench line per batch and group.
fn decode_kernels(
    gpu: &CudaBackend,
    rates: &Rates,
    rng: &mut ChaCha8Rng,
    rep: &mut Report,
) -> Result<()> {
    // The decode kernels side by side (CUDA-core, tensor-core with splits, and
    // tensor-core on the stream-K schedule) over GQA groups of 2 (Qwen3-0.6B),
    // 5 (Qwen3-14B) and 8 (Qwen3-32B), 8 kv heads of 128.
    // 256 x 256 is a short-context large batch (four tiles a block: start-up and merge
    // weigh most there; 84% of copy against 94% at 256 x 1,100 on 2026-12-04). One and two
    // sequences of 16,384 rows are the long single-user context, whose K/V the decode
    // step reads at about half the copy rate (2026-12-06). Besides
    // the uniform batches, a ragged one (contexts 100-8000): real decode
    // batches are not uniform, and a schedule tuned on equal blocks may not carry over.
    use minisgl::backend::cuda::ops::AttnPath;
    use rand::Rng;
    let mut ragged_rng = ChaCha8Rng::seed_from_u64(5);
    let ragged: Vec<usize> = (0..100)
        .map(|_| ragged_rng.random_range(100..=8000))
        .collect();
    let batches: Vec<(String, Vec<usize>)> = [
        (256usize, 1100usize),
        (256, 256),
        (64, 4096),
        (8, 16384),
        (1, 16384),
        (2, 16384),
    ]
    .iter()
    .map(|&(b, ctx)| (format!("batch {b} x ctx {ctx}"), vec![ctx; b]))
    .chain(std::iter::once((
        "batch 100 x ctx 100-8000 (ragged, seed 5)".to_string(),
        ragged,
    )))
    .collect();
    for (label, ctxs) in &batches {
        for &q_heads in &[16usize, 40, 64] {
            let seqs: Vec<_> = ctxs.iter().map(|&ctx| (ctx - 1, 1)).collect();
            let c = Case::new("bench", 16, 128, q_heads, 8, seqs);
            let (kv, attn, qg) = bench_case(gpu, &c, rng)?;
            let t = attn.tokens.len();
            let st = gpu.prepare_step(&attn)?;
            let out = gpu.new_output(t, q_heads * 128)?;
            let mut line = format!(
                "decode kernels, {label}, {q_heads}q/8kv x 128 (group {}):",
                q_heads / 8
            );
            let bytes = (ctxs.iter().sum::<usize>() * 8 * 128 * 2 * 2) as f64;
            // The split grid also with at least two splits: on the ragged batch the
            // longest sequences' blocks are the tail (2026-12-01: +6% there, -3% at
            // 256 x 1100).
            let default_splits = gpu.decode_min_splits();
            let default_waves = gpu.decode_wave_splits();
            // "fill": the split count without the wave rule (decode_mma_splits).
            // "batch order": the split grid's blocks in the batch's order rather than
            // longest context first (MINISGL_DECODE_ORDER).
            let order0 = gpu.decode_order();
            let (splits, waves) = (default_splits, default_waves);
            let mma = AttnPath::DecodeMma;
            let runs = [
                ("Decode", AttnPath::Decode, splits, waves, order0),
                ("DecodeMma/waves", mma, splits, true, order0),
                ("DecodeMma/fill", mma, splits, false, order0),
                ("DecodeMma/2 splits", mma, 2, waves, order0),
                ("DecodeMmaSk", AttnPath::DecodeMmaSk, splits, waves, order0),
                ("DecodeMma/batch order", mma, splits, waves, false),
            ];
            for (name, path, min_splits, wave_rule, order) in runs {
                gpu.set_decode_min_splits(min_splits);
                gpu.set_decode_wave_splits(wave_rule);
                gpu.set_decode_order(order);
                let ms = time_ms(gpu, 20, || {
                    Ok(gpu.attention_into(&qg, &kv, 0, &st, 0.088, &out, Some(path))?)
                })?;
                let bw = bytes / (ms * 1e-3);
                line += &format!(
                    " {name} {ms:.4} ms = {:.2} TB/s ({:.0}% of copy);",
                    bw / 1e12,
                    100.0 * bw / rates.copy_bytes_s
                );
            }
            gpu.set_decode_min_splits(default_splits);
            gpu.set_decode_wave_splits(default_waves);
            gpu.set_decode_order(order0);
            rep.bench_line(line);
        }
    }
    Ok(())
}

/// The attention of steps that mix prefill chunks with decodes (what a scheduler that
/// decodes while it prefills, e.g. plugins/examples/sarathi, runs every step), 8 kv
/// heads of 128, pages of 16, groups of 2 and 5: the one-token sequences on the decode
/// kernel (MINISGL_MIXED_SPLIT, the default) against every row on the prefill kernel,
/// and against the same decodes and chunks as steps of their own (the sum of the two
/// is what a mixed step should cost at most).
fn mixed_steps(
    gpu: &CudaBackend,
    rates: &Rates,
    rng: &mut ChaCha8Rng,
    rep: &mut Report,
) -> Result<()> {
    // (label, decodes, their context, the chunks as (cached prefix, new tokens)).
    type MixedCase = (&'static str, usize, usize, Vec<(usize, usize)>);
    let cases: [MixedCase; 4] = [
        (
            "255 decodes x ctx 1024 + a 2,048-token prompt",
            255,
            1024,
            vec![(0, 2048)],
        ),
        (
            "64 decodes x ctx 4096 + 1,024 tokens after 3,072 cached",
            64,
            4096,
            vec![(3072, 1024)],
        ),
        (
            "8 decodes x ctx 16384 + an 8,192-token prompt",
            8,
            16384,
            vec![(0, 8192)],
        ),
        (
            "32 decodes x ctx 700 + 4 prompts of 512",
            32,
            700,
            vec![(0, 512); 4],
        ),
    ];
    let split0 = gpu.mixed_split();
    for (label, n_dec, ctx, chunks) in &cases {
        for &q_heads in &[16usize, 40] {
            let decodes = vec![(ctx - 1, 1); *n_dec];
            // One cache and step per case, timed with the split on then off (a step of
            // one kind does not split, so it is timed once).
            let time_case = |seqs: Vec<(usize, usize)>, splits: &[bool], rng: &mut ChaCha8Rng| {
                let c = Case::new("bench", 16, 128, q_heads, 8, seqs);
                let (kv, attn, qg) = bench_case(gpu, &c, rng)?;
                let st = gpu.prepare_step(&attn)?;
                let out = gpu.new_output(attn.tokens.len(), q_heads * 128)?;
                let mut ms = Vec::with_capacity(splits.len());
                for &split in splits {
                    gpu.set_mixed_split(split);
                    let r = time_ms(gpu, 10, || {
                        Ok(gpu.attention_into(&qg, &kv, 0, &st, 0.088, &out, None)?)
                    });
                    gpu.set_mixed_split(split0);
                    ms.push(r?);
                }
                Ok::<_, anyhow::Error>(ms)
            };
            let mixed: Vec<_> = decodes.iter().chain(chunks.iter()).copied().collect();
            let both = time_case(mixed, &[true, false], rng)?;
            let (split, whole) = (both[0], both[1]);
            let dec = time_case(decodes.clone(), &[split0], rng)?[0];
            let pre = time_case(chunks.clone(), &[split0], rng)?[0];
            let kv_bytes = (n_dec * ctx * 8 * 128 * 2 * 2) as f64;
            let dec_tbps = kv_bytes / (dec * 1e-3) / 1e12;
            rep.bench_line(format!(
                "mixed step attention, {label}, {q_heads}q/8kv x 128 (group {}): decodes on the decode kernel {split:.3} ms, every row on the prefill kernel {whole:.3} ms ({:.2}x); as separate steps: the decodes {dec:.3} ms ({dec_tbps:.2} TB/s, {:.0}% of copy) + the chunks {pre:.3} ms = {:.3} ms (mixed split / their sum {:.3}x)",
                q_heads / 8,
                whole / split,
                100.0 * dec_tbps * 1e12 / rates.copy_bytes_s,
                dec + pre,
                split / (dec + pre)
            ));
        }
    }
    Ok(())
}
