//! `minisgl-host gpu-check`: the CUDA backend against the CPU backend on this
//! machine's GPU. Each op on fresh random inputs of many shapes (ragged batches,
//! prefix + extend, long contexts, page sizes 1/16/256), device sampling against
//! the reference recipe, whole models (logits cosine, greedy tokens), and a short
//! benchmark (decode attention bandwidth, prefill attention, model decode steps),
//! and the engine's batching and overlap checks on the fixture models.
//! Prints a table and writes a Markdown report.

mod attn;
mod bench;
mod chain;
mod engine;
mod fold;
mod graphs;
mod inputs;
mod model;
mod ops;
mod qkv_case;
mod rates;
mod report;
mod rounded_cpu;
mod sampling;
mod timeline;
mod tp;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;

use minisgl::backend::cpu::CpuBackend;
use minisgl::backend::cuda::{AttentionBackend, CudaBackend, CudaOptions};
use minisgl::model::runner::DeviceKind;
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
    /// Draws of the three-prompt model comparison (prompt seeds 42, 43, ...; default 4
    /// for a fixture, 1 for a real shape): each gated on a per-row floor, then all on
    /// their mean 1 - cosine, steadier than one draw's minimum.
    #[arg(long)]
    pub model_seeds: Option<u64>,
    /// Skip the op and kernel tests.
    #[arg(long)]
    pub skip_ops: bool,
    /// Of the op and kernel tests, run only the layer chain's (with `LC_TRACE=1` in
    /// MINISGL_KERNEL_DEFINES, its phase trace too).
    #[arg(long)]
    pub chain_only: bool,
    /// Of the op and kernel tests, run only the folded norms' (`MINISGL_FOLD_NORMS`).
    #[arg(long)]
    pub fold_only: bool,
    /// Skip the benchmark.
    #[arg(long)]
    pub skip_bench: bool,
    /// Random-weight config to time full decode steps on (empty: skip).
    #[arg(long)]
    pub bench_model: Option<PathBuf>,
    /// Skip the CPU-vs-GPU model comparisons (the `--model` list still feeds
    /// the engine checks).
    #[arg(long)]
    pub skip_models: bool,
    /// Skip the engine checks (batching, paging, overlap, HF outputs).
    #[arg(long)]
    pub skip_engine: bool,
    /// Device the engine checks run on: cuda or cpu (cpu: a smoke run without a GPU).
    #[arg(long, default_value = "cuda")]
    pub engine_device: String,
    /// Largest accepted flip cost (sum of the two runs' top-2 logprob margins at
    /// a first difference) between engine runs on the GPU; the CPU allows none.
    #[arg(long, default_value_t = 0.3)]
    pub engine_flip_tol: f32,
    /// Largest accepted flip cost against the Hugging Face f32 outputs on the GPU.
    #[arg(long, default_value_t = 0.5)]
    pub engine_hf_flip_tol: f32,
    /// Seed of every random input.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Random-weight configs whose eager decode step is timed kernel by kernel
    /// against each kernel's floor (repeatable).
    #[arg(long = "timeline-model")]
    pub timeline_models: Vec<PathBuf>,
    /// Decode batch sizes of the timeline.
    #[arg(long, value_delimiter = ',', default_value = "1,64,256")]
    pub timeline_batches: Vec<usize>,
    /// Context length of every sequence in the timeline.
    #[arg(long, default_value_t = 1024)]
    pub timeline_context: usize,
    /// Also time one prefill step of this many prompt tokens per timeline model, kernel
    /// by kernel (0: none; `--timeline-batches 0` leaves out the decode tables).
    #[arg(long, default_value_t = 0)]
    pub timeline_prefill: usize,
    /// Shortest and longest prompt of that prefill step, drawn uniformly (the default
    /// workload's range).
    #[arg(long, value_name = "MIN,MAX", default_value = "100,1024")]
    pub timeline_prefill_lens: String,
    /// Write the timeline tables (Markdown) here.
    #[arg(long, default_value = "decode-timeline.md")]
    pub timeline_out: PathBuf,
    /// Models (HF folders, or config folders for random weights) to run split
    /// across `--tp` GPUs against one GPU (repeatable).
    #[arg(long = "tp-model")]
    pub tp_models: Vec<PathBuf>,
    /// Models whose decode step is timed on one GPU and on `--tp`, with the
    /// all-reduce's share (repeatable).
    #[arg(long = "tp-bench-model")]
    pub tp_bench_models: Vec<PathBuf>,
    /// GPUs of the tensor-parallel checks.
    #[arg(long, default_value_t = 2)]
    pub tp: usize,
    /// Write the tensor-parallel timing tables (Markdown) here.
    #[arg(long, default_value = "tp-bench.md")]
    pub tp_out: PathBuf,
}

pub fn run(args: GpuCheckArgs) -> anyhow::Result<()> {
    let attention: AttentionBackend = args
        .attention_backend
        .parse()
        .map_err(|e: String| anyhow::anyhow!("--attention-backend: {e}"))?;
    let prefill_lens = timeline::len_range(&args.timeline_prefill_lens)?;
    let engine_device: DeviceKind = match args.engine_device.as_str() {
        "cuda" => DeviceKind::Cuda,
        "cpu" => DeviceKind::Cpu,
        other => anyhow::bail!("--engine-device must be `cuda` or `cpu`, got `{other}`"),
    };
    let compares_models =
        !args.skip_models && (!args.models.is_empty() || !args.random_models.is_empty());
    let runs_engine = !args.skip_engine && !args.models.is_empty();
    let needs_gpu = !args.timeline_models.is_empty()
        || !args.tp_models.is_empty()
        || !args.tp_bench_models.is_empty()
        || !args.skip_ops
        || !args.skip_bench
        || compares_models
        || (runs_engine && engine_device == DeviceKind::Cuda);
    let mut rep = Report::default();
    let gpu = if needs_gpu {
        let t0 = Instant::now();
        let gpu = CudaBackend::new(&CudaOptions {
            ordinal: args.device,
            attention,
            ..CudaOptions::default()
        })
        .context("opening the CUDA device")?;
        let open_s = t0.elapsed().as_secs_f64();
        let k = &gpu.dev.kernels;
        rep.note(format!(
            "device {} `{}` sm_{}{} with {} SMs; attention: {}; stream-K decode blocks per SM (hd 64, 128): {:?}; add_rmsnorm 256-thread blocks per SM: {}; kernels: {} families compiled, {} from cache, failed: {:?}; open took {:.2} s",
            args.device,
            gpu.dev.name,
            gpu.dev.cc.0,
            gpu.dev.cc.1,
            gpu.dev.num_sms,
            gpu.dev.attention_summary(),
            gpu.dev.sk_blocks_per_sm,
            gpu.dev.norm_blocks_per_sm,
            k.compiled,
            k.cache_hits,
            k.failed,
            open_s
        ));
        Some(gpu)
    } else {
        rep.note("no CUDA device opened (only CPU checks requested)".into());
        None
    };
    println!("{}", rep.notes.last().map(String::as_str).unwrap_or(""));
    let cpu = CpuBackend::new();
    if let (false, Some(gpu)) = (args.skip_ops, &gpu) {
        if args.chain_only {
            chain::run(&cpu, gpu, args.seed, &mut rep)?;
        } else if args.fold_only {
            fold_group(&cpu, gpu, args.seed, &mut rep)?;
        } else {
            ops::run(&cpu, gpu, args.seed, &mut rep)?;
            fold_group(&cpu, gpu, args.seed, &mut rep)?;
            chain::run(&cpu, gpu, args.seed, &mut rep)?;
            attn::run(&cpu, gpu, args.seed, &mut rep)?;
            sampling::run(&cpu, gpu, args.seed, &mut rep)?;
        }
    }
    let model_list = args
        .models
        .iter()
        .map(|m| (m, false))
        .chain(args.random_models.iter().map(|m| (m, true)));
    for (m, random) in model_list.filter(|_| compares_models) {
        if let Err(e) = model::compare(m, random, args.decode_steps, args.model_seeds, &mut rep) {
            rep.fact(
                "model",
                m.display().to_string(),
                false,
                format!("error: {e:#}"),
            );
        }
        if let Err(e) = graphs::check(m, random, &mut rep) {
            rep.fact(
                "graphs",
                m.display().to_string(),
                false,
                format!("error: {e:#}"),
            );
        }
    }
    if runs_engine {
        let tol = engine::FlipTolerance::for_device(
            engine_device,
            args.engine_flip_tol,
            args.engine_hf_flip_tol,
        );
        rep.note(format!(
            "engine checks on {engine_device:?}: {}",
            if tol.exact {
                format!(
                    "outputs must be identical (HF bf16 references: flip cost up to {})",
                    tol.vs_hf
                )
            } else {
                format!(
                    "accepted flip cost between runs {}, vs HF {}",
                    tol.same_device, tol.vs_hf
                )
            }
        ));
        let t0 = Instant::now();
        for m in &args.models {
            engine::run(m, engine_device, tol, &mut rep)?;
        }
        rep.note(format!(
            "engine checks took {:.1} s",
            t0.elapsed().as_secs_f64()
        ));
    }
    // The rates the bench's and the timeline's floors use, measured once on this device.
    let rates = match &gpu {
        Some(gpu) if !args.skip_bench || !args.timeline_models.is_empty() => {
            Some(rates::Rates::get(gpu)?)
        }
        _ => None,
    };
    if let (false, Some(gpu), Some(rates)) = (args.skip_bench, &gpu, &rates) {
        bench::run(gpu, rates, args.bench_model.as_deref(), &mut rep)?;
    }
    if let (false, Some(rates)) = (args.timeline_models.is_empty(), &rates) {
        let mut md = format!(
            "# Step timeline (eager, CUDA events per launch)\n\n{}\n",
            rates.describe()
        );
        for m in &args.timeline_models {
            md.push_str(&timeline::run(
                m,
                &args.timeline_batches,
                args.timeline_context,
                rates,
            )?);
            if args.timeline_prefill > 0 {
                md.push_str(&timeline::run_prefill(
                    m,
                    args.timeline_prefill,
                    prefill_lens,
                    rates,
                )?);
            }
        }
        println!("{md}");
        std::fs::write(&args.timeline_out, &md)
            .with_context(|| format!("writing {}", args.timeline_out.display()))?;
    }
    for m in &args.tp_models {
        if let Err(e) = tp::check(m, args.tp, args.decode_steps, &mut rep) {
            rep.fact(
                "tp",
                m.display().to_string(),
                false,
                format!("error: {e:#}"),
            );
        }
    }
    if !args.tp_bench_models.is_empty() {
        let mut md = String::from("# Tensor parallelism: decode steps and all-reduces\n");
        for m in &args.tp_bench_models {
            md.push_str(&tp::timing(
                m,
                args.tp,
                &args.timeline_batches,
                args.timeline_context,
                &mut rep,
            )?);
        }
        println!("{md}");
        std::fs::write(&args.tp_out, &md)
            .with_context(|| format!("writing {}", args.tp_out.display()))?;
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

/// The fold group (`gpu_check/fold.rs`) on its own seed, so that `--fold-only` and a whole
/// op run draw the same cases.
fn fold_group(
    cpu: &CpuBackend,
    gpu: &CudaBackend,
    seed: u64,
    rep: &mut Report,
) -> anyhow::Result<()> {
    let mut rng = rand::SeedableRng::seed_from_u64(seed ^ 0xf0);
    fold::run(cpu, gpu, &mut rng, rep)
}
