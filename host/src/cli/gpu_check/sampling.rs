//! Device sampling vs the CPU reference recipe on random logits rows.

use anyhow::Result;
use minisgl_plugin_sdk::{SamplingParams, TokenBias};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::inputs::randn;
use super::report::Report;
use minisgl::backend::cpu::CpuBackend;
use minisgl::backend::cuda::CudaBackend;
use minisgl::backend::{Backend, HostData};
use minisgl::batch::{ResolvedSampling, SampleMode, SampleSpec};

fn resolved(rng: &mut ChaCha8Rng, params: SamplingParams, vocab: usize) -> ResolvedSampling {
    ResolvedSampling {
        params,
        seed: rng.random(),
        logit_bias: vec![],
        allowed_tokens: None,
        prompt_tokens: (0..20).map(|_| rng.random_range(0..vocab as u32)).collect(),
        output_tokens: (0..30).map(|_| rng.random_range(0..200u32)).collect(),
    }
}

fn specs(rng: &mut ChaCha8Rng, vocab: usize) -> Vec<(String, SampleSpec)> {
    let p = |f: &dyn Fn(&mut SamplingParams)| {
        let mut s = SamplingParams::default();
        f(&mut s);
        s
    };
    let mut v: Vec<(String, SampleSpec)> = Vec::new();
    v.push((
        "greedy".into(),
        SampleSpec {
            mode: SampleMode::Greedy,
            logprobs: None,
        },
    ));
    v.push((
        "greedy+top5 logprobs".into(),
        SampleSpec {
            mode: SampleMode::Greedy,
            logprobs: Some(5),
        },
    ));
    let mk = |rng: &mut ChaCha8Rng, name: &str, params: SamplingParams, lp: Option<u32>| {
        (
            name.to_string(),
            SampleSpec {
                mode: SampleMode::Sample(resolved(rng, params, vocab)),
                logprobs: lp,
            },
        )
    };
    v.push(mk(
        rng,
        "T=0.7 top_k=50",
        p(&|s| {
            s.temperature = 0.7;
            s.top_k = 50
        }),
        Some(0),
    ));
    v.push(mk(rng, "T=1 top_p=0.9", p(&|s| s.top_p = 0.9), None));
    v.push(mk(rng, "T=1 plain", p(&|_| {}), Some(2)));
    v.push(mk(
        rng,
        "T=0.8 min_p=0.05",
        p(&|s| {
            s.temperature = 0.8;
            s.min_p = 0.05
        }),
        None,
    ));
    let mut pen = mk(
        rng,
        "penalties+bias T=0.9 top_k=100 top_p=0.8",
        p(&|s| {
            s.temperature = 0.9;
            s.top_k = 100;
            s.top_p = 0.8;
            s.repetition_penalty = 1.3;
            s.frequency_penalty = 0.5;
            s.presence_penalty = 0.2;
        }),
        Some(3),
    );
    if let SampleMode::Sample(r) = &mut pen.1.mode {
        r.logit_bias = (0..10)
            .map(|i| TokenBias {
                token: i * 7,
                bias: 3.0,
            })
            .collect();
    }
    v.push(pen);
    let mut allowed = mk(
        rng,
        "allowed 100 ids T=1.2",
        p(&|s| s.temperature = 1.2),
        Some(1),
    );
    if let SampleMode::Sample(r) = &mut allowed.1.mode {
        r.allowed_tokens = Some((0..100).map(|i| (i * 131 % vocab) as u32).collect());
    }
    v.push(allowed);
    let mut t0 = mk(
        rng,
        "T=0 with bias (greedy over processed)",
        p(&|s| s.temperature = 0.0),
        Some(1),
    );
    if let SampleMode::Sample(r) = &mut t0.1.mode {
        r.logit_bias = vec![TokenBias {
            token: 5,
            bias: 2.0,
        }];
    }
    v.push(t0);
    v.push(mk(rng, "top_k=1", p(&|s| s.top_k = 1), None));
    v.push((
        "candidates k=16 top_k=40 top_p=0.95 T=0.9".into(),
        SampleSpec {
            mode: SampleMode::Candidates {
                k: 16,
                processing: resolved(
                    rng,
                    p(&|s| {
                        s.temperature = 0.9;
                        s.top_k = 40;
                        s.top_p = 0.95
                    }),
                    vocab,
                ),
            },
            logprobs: Some(2),
        },
    ));
    v
}

pub fn run(cpu: &CpuBackend, gpu: &CudaBackend, seed: u64, rep: &mut Report) -> Result<()> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5a5);
    // 1003: rows not 16-byte aligned, row_select's scalar first pass.
    // Each vocabulary with row_select reading whole rows and, where row_partials splits
    // them (rows < SMs, 2,048+ values a chunk), with split rows; 49,155: split rows that
    // are not 16-byte aligned.
    let cases = [
        (151_936usize, 2.5f32),
        (49_152, 4.0),
        (49_155, 3.0),
        (1000, 1.0),
        (1003, 1.0),
    ];
    let configured = gpu.sample_split();
    let runs = cases
        .iter()
        .flat_map(|&(v, s)| [(v, s, false), (v, s, true)]);
    for (vocab, std, split) in runs {
        gpu.set_sample_split(split);
        let path = if split { "split rows" } else { "whole rows" };
        let base = specs(&mut rng, vocab);
        // Several rows per recipe, each with fresh logits and seeds.
        let mut rows: Vec<(String, SampleSpec)> = Vec::new();
        for r in 0..4 {
            for (n, s) in &base {
                let mut s = s.clone();
                match &mut s.mode {
                    SampleMode::Sample(x) | SampleMode::Candidates { processing: x, .. } => {
                        x.seed = rng.random::<u64>() ^ r
                    }
                    SampleMode::Greedy => {}
                }
                rows.push((n.clone(), s));
            }
        }
        // Every recipe in one step: the sampler processes a copy of the logits.
        let logits = randn(&mut rng, rows.len() * vocab, std);
        let lg = gpu.upload_f32(&[rows.len(), vocab], &logits)?;
        compare(cpu, gpu, &rows, vocab, &logits, &lg, path, rep)?;
        // Only greedy rows: the kernels read the logits where they are, f32 and bf16
        // (the LM head's output under MINISGL_LOGITS_BF16; the CPU gets the same
        // bf16-rounded values).
        let greedy: Vec<(String, SampleSpec)> = rows
            .iter()
            .filter(|r| matches!(r.1.mode, SampleMode::Greedy))
            .cloned()
            .collect();
        let logits = randn(&mut rng, greedy.len() * vocab, std);
        let lg = gpu.upload_f32(&[greedy.len(), vocab], &logits)?;
        compare(cpu, gpu, &greedy, vocab, &logits, &lg, path, rep)?;
        compare_bf16(cpu, gpu, &greedy, vocab, &logits, path, rep)?;
        // bf16 logits with processed rows: widened to f32 first.
        let logits = randn(&mut rng, rows.len() * vocab, std);
        compare_bf16(cpu, gpu, &rows, vocab, &logits, path, rep)?;
    }
    gpu.set_sample_split(configured);
    Ok(())
}

/// [`compare`] on `logits` uploaded as bf16 (the LM head's output), the CPU given the
/// same bf16-rounded values.
fn compare_bf16(
    cpu: &CpuBackend,
    gpu: &CudaBackend,
    rows: &[(String, SampleSpec)],
    vocab: usize,
    logits: &[f32],
    path: &str,
    rep: &mut Report,
) -> Result<()> {
    let rounded: Vec<f32> = logits
        .iter()
        .map(|&v| half::bf16::from_f32(v).to_f32())
        .collect();
    let lb = gpu.upload(&[rows.len(), vocab], HostData::f32(logits))?;
    let path = format!("{path}, bf16");
    compare(cpu, gpu, rows, vocab, &rounded, &lb, &path, rep)
}

/// One step of `rows` on `lg` (the device's logits) against the CPU on `logits` (the same
/// values in f32): every token, logprob and top-K list.
#[allow(clippy::too_many_arguments)]
fn compare(
    cpu: &CpuBackend,
    gpu: &CudaBackend,
    rows: &[(String, SampleSpec)],
    vocab: usize,
    logits: &[f32],
    lg: &<CudaBackend as Backend>::Tensor,
    path: &str,
    rep: &mut Report,
) -> Result<()> {
    let n = rows.len();
    let what = if rows.iter().all(|r| matches!(r.1.mode, SampleMode::Greedy)) {
        "greedy rows, in place"
    } else {
        "mixed recipes"
    };
    let specs: Vec<SampleSpec> = rows.iter().map(|r| r.1.clone()).collect();
    let lc = cpu.upload(&[n, vocab], HostData::f32(logits))?;
    let t0 = std::time::Instant::now();
    let og = gpu.sample(lg, &specs)?;
    let gpu_ms = t0.elapsed().as_secs_f64() * 1e3;
    let oc = cpu.sample(&lc, &specs)?;
    let mut tok_mismatch = Vec::new();
    let mut max_lp = 0.0f32;
    let mut list_mismatch = 0;
    for (i, (a, b)) in og.iter().zip(&oc).enumerate() {
        if a.token != b.token {
            tok_mismatch.push(format!(
                "row {i} ({}): gpu {} cpu {}",
                rows[i].0, a.token, b.token
            ));
        }
        if let (Some(x), Some(y)) = (a.logprob, b.logprob) {
            max_lp = max_lp.max((x - y).abs());
        } else if a.logprob.is_some() != b.logprob.is_some() {
            list_mismatch += 1;
        }
        for (la, lb) in [
            (&a.top_logprobs, &b.top_logprobs),
            (&a.candidates, &b.candidates),
        ] {
            if la.len() != lb.len() || la.iter().zip(lb.iter()).any(|(x, y)| x.token != y.token) {
                list_mismatch += 1;
            }
            for (x, y) in la.iter().zip(lb.iter()) {
                max_lp = max_lp.max((x.logprob - y.logprob).abs());
            }
        }
    }
    rep.fact(
        "sampling",
        format!("vocab={vocab} rows={n} {what} tokens ({path})"),
        tok_mismatch.is_empty(),
        if tok_mismatch.is_empty() {
            format!("all {n} tokens identical; device sample() {gpu_ms:.2} ms")
        } else {
            tok_mismatch.join("; ")
        },
    );
    rep.fact(
        "sampling",
        format!("vocab={vocab} rows={n} {what} logprobs/top-K lists ({path})"),
        list_mismatch == 0 && max_lp < 2e-3,
        format!("{list_mismatch} list mismatches; max |Δ logprob| {max_lp:.2e}"),
    );
    Ok(())
}
