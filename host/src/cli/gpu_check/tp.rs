//! Tensor parallelism on this machine's GPUs: the model split `tp` ways
//! (NCCL between the GPUs) against the same weights on one GPU, and the
//! all-reduce's share of a decode step.

use std::path::Path;

use anyhow::{Context, Result};

use super::model::{decode_throughput, greedy_step, random_seqs, Agreement};
use super::report::Report;
use crate::cli::bench_floor::measure_all_reduce;
use minisgl::model::placement::build_runner_with;
use minisgl::model::runner::{DeviceKind, RunnerOptions};
use minisgl::model::{load, load_random, LoadedModel, ModelRunner};

/// A checkpoint when the folder has weights, else its config with random
/// weights (the benchmark shapes).
fn load_any(path: &Path) -> Result<(LoadedModel, String)> {
    let has_weights = std::fs::read_dir(path)
        .map(|rd| {
            rd.flatten()
                .any(|e| e.file_name().to_string_lossy().ends_with(".safetensors"))
        })
        .unwrap_or(false);
    let name = path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok(if has_weights {
        (load(path)?, name)
    } else {
        (load_random(path, 1)?, format!("{name} (random weights)"))
    })
}

fn runner(
    lm: &LoadedModel,
    pages: u32,
    ps: u32,
    tp: usize,
    graphs: usize,
) -> Result<Box<dyn ModelRunner>> {
    let opts = RunnerOptions {
        cuda_graph_max_bs: graphs,
        tp,
    };
    build_runner_with(lm, DeviceKind::Cuda, pages, ps, &opts)
        .with_context(|| format!("building the tp = {tp} runner"))
}

/// TP = `tp` against TP = 1 on the same weights: prompts of several lengths,
/// then `steps` greedy decode steps teacher-forced on the one-GPU choice;
/// logits cosine > 0.999 and greedy tokens equal except at near ties (the
/// rule of the CPU-vs-GPU model check). Decode steps replay recorded graphs
/// on both sides, so the all-reduces inside graphs are covered.
pub fn check(path: &Path, tp: usize, steps: usize, rep: &mut Report) -> Result<()> {
    let (lm, name) = load_any(path).with_context(|| format!("loading {}", path.display()))?;
    let vocab = lm.config.vocab_size() as u32;
    let ps = 16u32;
    let prompts = [37usize, 11, 300, 64];
    let per_seq = (prompts.iter().max().unwrap() + steps + 1).div_ceil(ps as usize) as u32;
    let pages = per_seq * prompts.len() as u32 + 1;
    let mut one = runner(&lm, pages, ps, 1, 8)?;
    let mut split = runner(&lm, pages, ps, tp, 8)?;
    let mut seqs = random_seqs(&prompts, vocab, per_seq);
    let mut agree = Agreement::default();
    let mut done = vec![0usize; seqs.len()];
    for step in 0..=steps {
        let input = greedy_step(&seqs, &done);
        let l1 = one.logits(&input)?;
        let ln = split.logits(&input)?;
        for (i, (a, b)) in l1.iter().zip(&ln).enumerate() {
            let next = agree.add(step, i, a, b);
            done[i] = seqs[i].0.len();
            seqs[i].0.push(next);
        }
    }
    // The engine path too: device sampling on every rank must agree (the TP
    // runner fails a step whose ranks sampled differently).
    let sampled = split
        .step(&greedy_step(&seqs, &done))
        .map(|o| o.outputs.len());
    let sampled_ok = matches!(sampled, Ok(n) if n == seqs.len());
    rep.fact(
        "tp",
        format!("{name}: tp = {tp} vs one GPU, prefill {prompts:?} + {steps} decode steps"),
        agree.pass() && sampled_ok,
        format!(
            "tp = {tp} (other) vs tp = 1 (reference): {}; sampling on every rank: {}",
            agree.summary(),
            match sampled {
                Ok(n) => format!("{n} rows, ranks agree"),
                Err(e) => format!("error: {e}"),
            }
        ),
    );
    Ok(())
}

/// Decode steps on one GPU and on `tp`, at each batch size with `context`
/// tokens of prompt, and what the all-reduces alone cost at the same sizes:
/// the all-reduce share of a split decode step (two per layer).
pub fn timing(
    path: &Path,
    tp: usize,
    batches: &[usize],
    context: usize,
    rep: &mut Report,
) -> Result<String> {
    let (lm, name) = load_any(path).with_context(|| format!("loading {}", path.display()))?;
    let (layers, hidden) = (lm.config.num_layers(), lm.config.hidden_size());
    let ps = 16u32;
    let steps = 20;
    let max_b = batches.iter().copied().max().unwrap_or(1);
    let pages = ((context + steps + 2).div_ceil(ps as usize) * max_b) as u32 + 1;
    let mut step_ms = Vec::new();
    for world in [1, tp] {
        // One runner at a time: the one-GPU KV cache of a 14B model at batch
        // 256 takes a third of the device.
        let mut r = runner(&lm, pages, ps, world, 256)?;
        let mut row = Vec::new();
        for &b in batches {
            let (tps, _) = decode_throughput(r.as_mut(), b, context, steps)?;
            row.push(1e3 * b as f64 / tps);
        }
        step_ms.push(row);
    }
    let sizes: Vec<usize> = batches.iter().map(|&b| b * hidden).collect();
    let ar = measure_all_reduce(tp, &sizes)?;
    let mut md = format!(
        "\n## {name}: decode step, one GPU vs tp = {tp} (graphs, context {context})\n\n\
         NCCL bus bandwidth (256 MiB bf16 sum): {:.0} GB/s\n\n\
         | batch | tp=1 step ms | tp={tp} step ms | speed-up | one all-reduce µs | all-reduces per step ms | share of the tp={tp} step |\n\
         |---|---|---|---|---|---|---|\n",
        ar.bus_bytes_s / 1e9
    );
    for (i, &b) in batches.iter().enumerate() {
        let (t1, tn) = (step_ms[0][i], step_ms[1][i]);
        let one_ar = ar.per_call[i].1;
        let per_step = 2.0 * layers as f64 * one_ar * 1e3;
        md.push_str(&format!(
            "| {b} | {t1:.3} | {tn:.3} | {:.2}x | {:.1} | {per_step:.3} | {:.0}% |\n",
            t1 / tn,
            one_ar * 1e6,
            100.0 * per_step / tn
        ));
        rep.fact(
            "tp-bench",
            format!("{name}: batch {b}, context {context}"),
            true,
            format!(
                "step {t1:.3} ms on one GPU, {tn:.3} ms on {tp} ({:.2}x); all-reduces {per_step:.3} ms of it ({:.0}%)",
                t1 / tn,
                100.0 * per_step / tn
            ),
        );
    }
    Ok(md)
}
