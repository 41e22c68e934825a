//! `minisgl-host gpu-check`: the CUDA backend against the CPU backend on this
//! machine's GPU. Each op on fresh random inputs of many shapes (ragged batches,
//! prefix + extend, long contexts, page sizes 1/16/256), device sampling against
//! the reference recipe, whole models (logits cosine, greedy tokens), and a short
//! benchmark (decode attention bandwidth, prefill attention, model decode steps).
//! Prints a table and writes a Markdown report.

mod attn;
mod bench;
mod model;
mod ops;
mod report;
mod rounded_cpu;
mod sampling;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;

use crate::backend::cpu::CpuBackend;
use crate::backend::cuda::{AttentionBackend, CudaBackend, CudaOptions};
use report::Report;

#[derive(clap::Args, Debug, Clone)]
pub struct GpuCheckArgs {
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// Attention kernels under test: auto, flash or simple.
    #[arg(long, default_value = "auto")]
    pub attention_backend: String,
    /// Write the Markdown report here.
    #[arg(long, default_value = "gpu-check.md")]
    pub report: PathBuf,
    /// HF model directories to compare end to end (CPU vs GPU logits).
    #[arg(long = "model")]
    pub models: Vec<PathBuf>,
    /// config.json directories to compare with random weights (e.g. Qwen3-0.6B).
    #[arg(long = "random-model")]
    pub random_models: Vec<PathBuf>,
    /// Decode steps per model comparison.
    #[arg(long, default_value_t = 12)]
    pub decode_steps: usize,
    /// Skip the op and kernel tests.
    #[arg(long)]
    pub skip_ops: bool,
    /// Skip the benchmark.
    #[arg(long)]
    pub skip_bench: bool,
    /// Random-weight config to time full decode steps on (empty: skip).
    #[arg(long)]
    pub bench_model: Option<PathBuf>,
    /// Seed of every random input.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

pub fn run(args: GpuCheckArgs) -> anyhow::Result<()> {
    let attention: AttentionBackend = args
        .attention_backend
        .parse()
        .map_err(|e: String| anyhow::anyhow!("--attention-backend: {e}"))?;
    let t0 = Instant::now();
    let gpu = CudaBackend::new(&CudaOptions {
        ordinal: args.device,
        attention,
    })
    .context("opening the CUDA device")?;
    let open_s = t0.elapsed().as_secs_f64();
    let cpu = CpuBackend::new();
    let mut rep = Report::default();
    let k = &gpu.dev.kernels;
    rep.note(format!(
        "device {} `{}` sm_{}{} with {} SMs; attention backend: {}; kernels: {} families compiled, {} from cache, failed: {:?}; open took {:.2} s",
        args.device,
        gpu.dev.name,
        gpu.dev.cc.0,
        gpu.dev.cc.1,
        gpu.dev.num_sms,
        if gpu.uses_flash() { "flash" } else { "simple" },
        k.compiled,
        k.cache_hits,
        k.failed,
        open_s
    ));
    println!("{}", rep.notes.last().map(String::as_str).unwrap_or(""));
    if !args.skip_ops {
        ops::run(&cpu, &gpu, args.seed, &mut rep)?;
        attn::run(&cpu, &gpu, args.seed, &mut rep)?;
        sampling::run(&cpu, &gpu, args.seed, &mut rep)?;
    }
    for (m, random) in args
        .models
        .iter()
        .map(|m| (m, false))
        .chain(args.random_models.iter().map(|m| (m, true)))
    {
        if let Err(e) = model::compare(m, random, args.decode_steps, &mut rep) {
            rep.fact(
                "model",
                m.display().to_string(),
                false,
                format!("error: {e:#}"),
            );
        }
    }
    if !args.skip_bench {
        bench::run(&gpu, args.bench_model.as_deref(), &mut rep)?;
    }
    rep.print();
    std::fs::write(&args.report, rep.markdown())
        .with_context(|| format!("writing {}", args.report.display()))?;
    println!("report written to {}", args.report.display());
    if rep.failures() > 0 {
        anyhow::bail!("{} checks failed", rep.failures());
    }
    Ok(())
}
