//! `minisgl-host compare`: replay one workload against several policy sets
//! and write a table (Markdown, CSV) and plots (SVG and PNG).
//!
//! Every policy set sees the same requests with the same arrival times. The
//! backend is the simulator (`sim`: the real loop, KV pool, radix cache and
//! plugins in virtual time against a profile's cost model) or the real
//! engine on the CPU or a GPU (`cpu`, `cuda`: wall time).

mod plots;
mod real;
mod report;
mod spec;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};

use super::settings::{Group, SettingArgs};
use minisgl::config::Config;
use minisgl::engine::{CacheMode, EngineConfig};
use minisgl::model::placement::build_runner_with;
use minisgl::model::runner::{DeviceKind, RunnerOptions};
use minisgl::model::{load, load_random, LoadedModel};
use minisgl::scheduler::Policy;
use minisgl::sim::{
    simulate, step_log, PolicyTime, Profile, RunRecord, SimConfig, Slo, Summary, Timing,
};
use minisgl::workload::synth::{SynthKind, SynthSpec};
use minisgl::workload::trace::TraceOptions;
use minisgl::workload::{fit_context, TimedRequest};

/// The settings `compare` takes.
pub struct CompareSettings;
impl Group for CompareSettings {
    const NAMES: Option<&'static [&'static str]> = Some(&[
        "model",
        "page_size",
        "max_running",
        "max_prefill_tokens",
        "overlap",
    ]);
    const SHOWN_DEFAULTS: &'static [(&'static str, &'static str)] =
        &[("page_size", "sim: the profile's; else 16")];
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// The simulator (needs --profile).
    Sim,
    /// The real engine on the CPU backend.
    Cpu,
    /// The real engine on the CUDA backend.
    Cuda,
}

#[derive(clap::Args, Debug, Clone)]
pub struct CompareArgs {
    /// Policy set to compare: NAME=SCHEDULER[,EVICTOR[,SAMPLER]], each part
    /// `native`, a component path, or a short name in --plugin-dir (e.g.
    /// `lpm=lpm`, `lfu=native,lfu`). Repeat for each set.
    #[arg(long = "policy", required = true)]
    pub policies: Vec<String>,
    /// Where short plugin names are looked up.
    #[arg(long, default_value = "target/wasm32-wasip2/plugin")]
    pub plugin_dir: PathBuf,
    #[arg(long, value_enum, default_value = "sim")]
    pub backend: Backend,
    /// Profile file (from `minisgl-host profile`): the cost model of `sim`; with
    /// `cpu`/`cuda`, checked against every measured step (steps.md).
    #[arg(long)]
    pub profile: Option<PathBuf>,
    /// Model (for `cpu`/`cuda`), page size (`sim` defaults to the
    /// profile's) and engine settings, spelled as for serving.
    #[command(flatten)]
    pub settings: SettingArgs<CompareSettings>,
    /// Random weights of this config's shape, for `cpu`/`cuda`; with `sim`
    /// it only sets the vocabulary.
    #[arg(long, value_name = "CONFIG", conflicts_with = "model")]
    pub random_weights: Option<PathBuf>,
    /// Trace: Mooncake `.jsonl` or Azure `.csv` (else --synthetic).
    #[arg(long, conflicts_with = "synthetic")]
    pub trace: Option<PathBuf>,
    /// Synthetic workload instead of a trace.
    #[arg(long, value_enum)]
    pub synthetic: Option<SynthKind>,
    /// Requests to replay (the first N of a trace).
    #[arg(long, default_value_t = 200)]
    pub num_requests: usize,
    /// Multiply trace inter-arrival gaps (0.1 = ten times faster).
    #[arg(long, default_value_t = 1.0)]
    pub time_scale: f64,
    /// Multiply trace lengths and the Mooncake block size.
    #[arg(long, default_value_t = 1.0)]
    pub length_scale: f64,
    #[arg(long)]
    pub max_input_len: Option<usize>,
    #[arg(long)]
    pub max_output_len: Option<usize>,
    /// Trace: spread requests over this many clients (ids 0..N, priority
    /// `id % 3`) for fairness and priority policies; traces carry none.
    #[arg(long, default_value_t = 1)]
    pub trace_clients: u64,
    /// Synthetic: mean arrival rate (requests/s).
    #[arg(long, default_value_t = 4.0)]
    pub rate: f64,
    /// Synthetic: prompt tokens, N or MIN:MAX.
    #[arg(long, default_value = "64:256")]
    pub input_len: String,
    /// Synthetic: output tokens, N or MIN:MAX.
    #[arg(long, default_value = "16:64")]
    pub output_len: String,
    /// shared-prefix: number of shared system prompts.
    #[arg(long, default_value_t = 8)]
    pub num_groups: usize,
    /// shared-prefix: tokens of each shared prompt.
    #[arg(long, default_value_t = 512)]
    pub prefix_len: u32,
    /// multi-tenant: number of clients.
    #[arg(long, default_value_t = 4)]
    pub num_clients: usize,
    /// bursty: rate multiplier inside bursts.
    #[arg(long, default_value_t = 4.0)]
    pub burst_factor: f64,
    /// bursty: burst length in seconds.
    #[arg(long, default_value_t = 5.0)]
    pub burst_s: f64,
    /// Relative deadline on every synthetic request (ms).
    #[arg(long)]
    pub deadline_ms: Option<u64>,
    /// Prompt token ids are drawn below this [default: the model's
    /// vocabulary, else 32000].
    #[arg(long)]
    pub vocab: Option<u32>,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// KV pages [default: sim: the profile's; cpu/cuda: the memory budget].
    #[arg(long)]
    pub num_pages: Option<u32>,
    /// radix or naive.
    #[arg(long, default_value = "radix")]
    pub cache: CacheMode,
    /// SLO target for TTFT (ms).
    #[arg(long, default_value_t = 2000.0)]
    pub slo_ttft_ms: f64,
    /// SLO target for TPOT (ms).
    #[arg(long, default_value_t = 100.0)]
    pub slo_tpot_ms: f64,
    /// sim: `report` measures plugin time only (deterministic); `charge` also
    /// adds it to virtual time where the pipeline would not hide it.
    #[arg(long, value_enum, default_value = "report")]
    pub policy_time: PolicyTime,
    /// Output directory.
    #[arg(long, default_value = "compare-out")]
    pub out: PathBuf,
}

fn parse_range(s: &str, what: &str) -> anyhow::Result<(u32, u32)> {
    let p = |x: &str| {
        x.trim()
            .parse::<u32>()
            .ok()
            .filter(|&v| v > 0)
            .with_context(|| {
                format!("--{what} must be N or MIN:MAX with positive integers, got {s:?}")
            })
    };
    Ok(match s.split_once(':') {
        Some((a, b)) => (p(a)?, p(b)?),
        None => (p(s)?, p(s)?),
    })
}

fn load_model(args: &CompareArgs, cfg: &Config) -> anyhow::Result<Option<LoadedModel>> {
    Ok(match (&cfg.model, &args.random_weights) {
        (Some(p), _) => Some(load(p).with_context(|| format!("loading --model {}", p.display()))?),
        (None, Some(p)) => Some(
            load_random(p, args.seed)
                .with_context(|| format!("building --random-weights {}", p.display()))?,
        ),
        _ => None,
    })
}

fn workload(args: &CompareArgs, vocab: u32) -> anyhow::Result<(Vec<TimedRequest>, String)> {
    if let Some(path) = &args.trace {
        let o = TraceOptions {
            num_requests: args.num_requests,
            time_scale: args.time_scale,
            length_scale: args.length_scale,
            max_input_len: args.max_input_len,
            max_output_len: args.max_output_len,
            vocab,
            seed: args.seed,
        };
        let mut w = minisgl::workload::trace::load(path, &o)?;
        minisgl::workload::assign_tenants(&mut w, args.trace_clients, args.seed);
        let name = format!(
            "trace {} (first {} requests, {} clients, time scale {}, length scale {}, caps in {:?} out {:?}, seed {})",
            path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default(),
            w.len(),
            args.trace_clients.max(1),
            args.time_scale,
            args.length_scale,
            args.max_input_len,
            args.max_output_len,
            args.seed
        );
        return Ok((w, name));
    }
    let Some(kind) = args.synthetic else {
        bail!("give --trace FILE or --synthetic KIND");
    };
    let spec = SynthSpec {
        kind,
        num_requests: args.num_requests,
        rate: args.rate,
        input_len: parse_range(&args.input_len, "input-len")?,
        output_len: parse_range(&args.output_len, "output-len")?,
        groups: args.num_groups,
        prefix_len: args.prefix_len,
        clients: args.num_clients,
        burst_factor: args.burst_factor,
        burst_s: args.burst_s,
        deadline_ms: args.deadline_ms,
        vocab,
        seed: args.seed,
    };
    let w = minisgl::workload::synth::generate(&spec)?;
    let name = format!(
        "synthetic {kind:?} ({} requests, {} req/s, in {}, out {}, groups {} × {} tokens, clients {}, deadline {:?} ms, seed {})",
        w.len(),
        args.rate,
        args.input_len,
        args.output_len,
        args.num_groups,
        args.prefix_len,
        args.num_clients,
        args.deadline_ms,
        args.seed
    );
    Ok((w, name))
}

/// The engine settings shared by every backend.
fn engine_config(args: &CompareArgs, cfg: &Config, num_pages: u32) -> EngineConfig {
    EngineConfig {
        num_pages: Some(num_pages),
        max_running: cfg.max_running,
        max_prefill_tokens: cfg.max_prefill_tokens,
        max_waiting: usize::MAX,
        cache: args.cache,
        overlap: cfg.overlap,
        seed: args.seed,
        ..EngineConfig::default()
    }
}

fn progress_bar(name: &str, n: usize) -> ProgressBar {
    let pb = ProgressBar::new(n as u64);
    pb.set_style(
        ProgressStyle::with_template("{prefix:>12} [{bar:30}] {pos}/{len} requests {msg}")
            .expect("a valid progress template")
            .progress_chars("=> "),
    );
    pb.set_prefix(name.to_string());
    pb
}

pub fn run(args: CompareArgs) -> anyhow::Result<()> {
    let specs = args
        .policies
        .iter()
        .map(|p| spec::parse(p, &args.plugin_dir))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut names = std::collections::HashSet::new();
    for s in &specs {
        if !names.insert(s.name.clone()) {
            bail!("--policy name {:?} is given twice", s.name);
        }
    }
    super::init_warnings();
    // `sim` takes the profile's page size unless one is given.
    let page_size_given = args.settings.layer()?.page_size;
    let settings = args.settings.config()?;
    let model = load_model(&args, &settings)?;
    let vocab = args
        .vocab
        .or_else(|| model.as_ref().map(|m| m.config.vocab_size() as u32))
        .unwrap_or(32000);
    let (mut reqs, workload_name) = workload(&args, vocab)?;
    reqs.sort_by_key(|r| r.at_us);

    // Pool shape and the backend's description.
    let (page_size, num_pages, backend_desc, profile) = match args.backend {
        Backend::Sim => {
            let path = args
                .profile
                .as_ref()
                .context("--backend sim needs --profile FILE")?;
            let prof = Profile::load(path)?;
            let ps = page_size_given.unwrap_or(prof.page_size);
            let pages = args.num_pages.unwrap_or(prof.kv_pages);
            let desc = format!(
                "sim, profile `{}` ({} on {}, {} points, model error on them ≤ {:.1}%)",
                path.display(),
                prof.model,
                prof.device_name,
                prof.points.len(),
                100.0 * prof.reproduction_error()
            );
            (ps, pages, desc, Some(prof))
        }
        Backend::Cpu | Backend::Cuda => {
            let m = model
                .as_ref()
                .context("--backend cpu/cuda needs --model DIR or --random-weights CONFIG")?;
            let device = if args.backend == Backend::Cpu {
                DeviceKind::Cpu
            } else {
                DeviceKind::Cuda
            };
            let ps = settings.page_size;
            let pages = match args.num_pages {
                Some(n) => n,
                None => minisgl::engine::builder::kv_pages(&m.config, device, ps, None, 1)?,
            };
            let desc =
                format!("{:?} engine, model `{}`", args.backend, m.source.display()).to_lowercase();
            // A profile given to a real backend is checked against every step
            // the replay runs (steps.md): the simulator's fidelity, step by step.
            let prof = args.profile.as_deref().map(Profile::load).transpose()?;
            (ps, pages, desc, prof)
        }
    };
    let mut max_ctx = num_pages.saturating_mul(page_size);
    if let Some(m) = &model {
        max_ctx =
            max_ctx.min(u32::try_from(m.config.max_position_embeddings()).unwrap_or(u32::MAX));
    }
    fit_context(&mut reqs, max_ctx);

    let slo = Slo {
        ttft_ms: args.slo_ttft_ms,
        tpot_ms: args.slo_tpot_ms,
    };
    let cfg = engine_config(&args, &settings, num_pages);
    let mut runs: Vec<(String, RunRecord)> = Vec::new();
    for s in &specs {
        let plugins = Arc::new(s.load()?);
        let pb = progress_bar(&s.name, reqs.len());
        // Called after every step: redraw only when a request finished or
        // every 256 steps.
        let (mut last, mut calls) = (usize::MAX, 0u64);
        let mut progress = |done: usize, _n: usize, t_us: u64| {
            calls += 1;
            if done != last || calls % 256 == 0 {
                last = done;
                pb.set_position(done as u64);
                pb.set_message(format!("t = {:.1} s", t_us as f64 / 1e6));
            }
        };
        let rec = match (args.backend, &profile) {
            (Backend::Sim, Some(prof)) => {
                let policy: Arc<dyn Policy> = plugins.clone();
                let sim_cfg = SimConfig {
                    engine: cfg.clone(),
                    num_pages,
                    page_size,
                    vocab_size: vocab,
                    policy_time: args.policy_time,
                };
                simulate(&reqs, &prof.model_fit, policy, &sim_cfg, &mut progress)
                    .map_err(|e| anyhow::anyhow!("simulating {}: {e}", s.name))?
            }
            _ => {
                let m = model.as_ref().expect("checked above");
                let device = if args.backend == Backend::Cpu {
                    DeviceKind::Cpu
                } else {
                    DeviceKind::Cuda
                };
                let runner =
                    build_runner_with(m, device, num_pages, page_size, &RunnerOptions::default())
                        .with_context(|| format!("building the {device:?} runner"))?;
                real::replay(
                    &reqs,
                    runner,
                    plugins.clone(),
                    cfg.clone(),
                    m.config.eos_token_ids().to_vec(),
                    &mut progress,
                )?
            }
        };
        pb.finish();
        runs.push((s.name.clone(), rec));
    }

    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let summaries: Vec<(Summary, Timing)> = runs
        .iter()
        .map(|(_, r)| (Summary::of(r, slo), Timing::of(r)))
        .collect();
    let rows: Vec<report::Row> = specs
        .iter()
        .zip(&summaries)
        .map(|(s, (sum, t))| report::Row {
            name: &s.name,
            spec: &s.spec,
            summary: sum,
            timing: t,
        })
        .collect();
    let header = format!(
        "# minisgl compare\n\nWorkload: {workload_name}.\n\nBackend: {backend_desc}; KV pool {num_pages} pages × {page_size} tokens; \
         max_running {}, chunk {} tokens, cache {:?}, overlap {}.",
        settings.max_running,
        settings.max_prefill_tokens,
        args.cache,
        if settings.overlap { "on" } else { "off" }
    );
    let md = report::markdown(&header, slo, &rows);
    let write = |name: &str, text: &str| -> anyhow::Result<()> {
        let p = args.out.join(name);
        std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))
    };
    write("results.md", &md)?;
    write("results.csv", &report::csv(&rows))?;
    write("timing.md", &report::timing(&rows))?;
    let mut steps_md = String::from("# Steps\n");
    for (name, r) in &runs {
        write(&format!("steps-{name}.csv"), &step_log::csv(&r.steps))?;
        if let Some(prof) = profile.as_ref().filter(|_| args.backend != Backend::Sim) {
            steps_md.push_str(&format!(
                "\n## {name}: profile `{}` against the {} measured steps\n\n{}",
                prof.model,
                r.steps.len(),
                step_log::model_error_table(&r.steps, &prof.model_fit)
            ));
        }
    }
    if profile.is_some() && args.backend != Backend::Sim {
        write("steps.md", &steps_md)?;
        println!("{steps_md}");
    }
    let plotted: Vec<(String, &RunRecord)> = runs.iter().map(|(n, r)| (n.clone(), r)).collect();
    let files = plots::write_all(&args.out, &plotted, u64::from(num_pages))?;
    println!("{md}");
    println!("{}", report::timing(&rows));
    println!(
        "wrote results.md, results.csv, timing.md, {}, steps-*.csv{} in {}",
        files.join(", "),
        if profile.is_some() && args.backend != Backend::Sim {
            ", steps.md"
        } else {
            ""
        },
        args.out.display()
    );
    Ok(())
}
