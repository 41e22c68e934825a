//! `minisgl-host bench offline`: offline throughput on the Mini-SGLang /
//! nano-vllm workload (256 requests, seed 0, random token ids in [0, 10000),
//! input and output lengths uniform in [100, 1024], ignore_eos), or a
//! shared-prefix workload that shows the radix cache. Optional comparisons
//! in the same run: overlap on vs off, radix vs naive cache.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};
use minisgl_plugin_sdk::SamplingParams;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::bench_steps::{Breakdown, DecodeFit};
use super::settings::{Group, SettingArgs};
use minisgl::config::Config;
use minisgl::engine::{CacheMode, Engine, EngineConfig, EngineMetrics, GenerateRequest};
use minisgl::kv::pool::bytes_per_page;
use minisgl::model::placement::build_runner_with;
use minisgl::model::runner::{DeviceKind, RunnerOptions};
use minisgl::model::ModelRunner;
use minisgl::model::{load, load_random, LoadedModel};
use minisgl::plugin::{PluginConfig, PluginSet};
use minisgl::sim::{step_log, LoggingRunner};

#[derive(clap::Args, Debug, Clone)]
pub struct BenchOfflineArgs {
    /// Model, device and engine settings, spelled as for serving.
    #[command(flatten)]
    pub settings: SettingArgs<BenchSettings>,
    /// Random weights of the shape in this config.json (or its directory).
    #[arg(long, value_name = "CONFIG_DIR", conflicts_with = "model")]
    pub random_weights: Option<PathBuf>,
    /// Number of requests.
    #[arg(long, default_value_t = 256)]
    pub num_seqs: usize,
    #[arg(long, default_value_t = 100)]
    pub min_input_len: u32,
    #[arg(long, default_value_t = 1024)]
    pub max_input_len: u32,
    #[arg(long, default_value_t = 100)]
    pub min_output_len: u32,
    #[arg(long, default_value_t = 1024)]
    pub max_output_len: u32,
    /// `random` (nano-vllm) or `shared-prefix` (groups sharing a system prompt).
    #[arg(long, default_value = "random")]
    pub workload: Workload,
    /// shared-prefix: number of groups.
    #[arg(long, default_value_t = 8)]
    pub num_groups: usize,
    /// shared-prefix: which group each request joins. `popular` (default): drawn at
    /// random with weight 1/(g+1), as the synthetic serving workloads and the simulator
    /// draw them, so popular prefixes come back soon; `round-robin`: request i joins
    /// group i mod groups, which under a pool smaller than all the prefixes evicts each
    /// one before its group returns (0% cache hits on the GPU, 2026-12-05).
    #[arg(long, default_value = "popular")]
    pub group_order: GroupOrder,
    /// shared-prefix: tokens of each group's shared prompt.
    #[arg(long, default_value_t = 512)]
    pub prefix_len: u32,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// KV pages (default: from --kv-memory-mb, capped at what the workload needs).
    #[arg(long)]
    pub num_pages: Option<u32>,
    /// radix or naive.
    #[arg(long, default_value = "radix")]
    pub cache: CacheMode,
    /// Run twice, overlap on and off, and print the ratio.
    #[arg(long)]
    pub compare_overlap: bool,
    /// Run twice, radix and naive cache, and print both hit rates.
    #[arg(long)]
    pub compare_cache: bool,
    /// Also run every configuration with CUDA graphs off and print the ratio.
    #[arg(long)]
    pub compare_graphs: bool,
    /// Skip measuring the device ceilings (copy bandwidth, GEMM rate) at start.
    #[arg(long)]
    pub no_ceiling: bool,
    /// Append one JSON object per figure to this file (docs/results/bench.jsonl).
    #[arg(long)]
    pub jsonl: Option<PathBuf>,
    /// Shape name for --jsonl (default: the model's directory or file name).
    #[arg(long)]
    pub shape: Option<String>,
    /// Workload name for --jsonl (default: derived from the length flags).
    #[arg(long)]
    pub workload_name: Option<String>,
    /// Write every step of the last run (time, tokens, KV read, attention pairs) to
    /// this CSV, the simulator's steps format (`minisgl-host profile --refit P --steps FILE`).
    #[arg(long, value_name = "FILE")]
    pub steps_csv: Option<PathBuf>,
    /// Run the workload under this scheduler plugin (a Wasm component) instead of the
    /// built-in FCFS, e.g. `plugins/examples/sarathi`, which decodes while it
    /// prefills: the offline figures under another policy. Recorded in --jsonl.
    #[arg(long, value_name = "WASM")]
    pub scheduler: Option<PathBuf>,
}

/// The settings `bench offline` takes. With no `--kv-memory-mb` the CPU
/// budget is 4096 MiB, not the server's 1024: it sizes for a whole offline
/// workload (see [`num_pages`]).
pub struct BenchSettings;
impl Group for BenchSettings {
    const NAMES: Option<&'static [&'static str]> = Some(&[
        "model",
        "device",
        "page_size",
        "kv_memory_mb",
        "max_running",
        "max_prefill_tokens",
        "overlap",
        "cuda_graph_max_bs",
        "tp",
    ]);
    const DEFAULTS: &'static [(&'static str, &'static str)] = &[("device", "auto")];
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    Random,
    SharedPrefix,
}

impl std::str::FromStr for Workload {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "random" => Ok(Workload::Random),
            "shared-prefix" => Ok(Workload::SharedPrefix),
            o => Err(format!(
                "workload must be `random` or `shared-prefix`, got `{o}`"
            )),
        }
    }
}

/// How shared-prefix requests are dealt to their groups (`--group-order`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupOrder {
    Popular,
    RoundRobin,
}

impl std::str::FromStr for GroupOrder {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "popular" => Ok(GroupOrder::Popular),
            "round-robin" => Ok(GroupOrder::RoundRobin),
            o => Err(format!(
                "group order must be `popular` or `round-robin`, got `{o}`"
            )),
        }
    }
}

/// One measured run.
struct RunResult {
    label: String,
    seconds: f64,
    input_tokens: u64,
    output_tokens: u64,
    metrics: EngineMetrics,
    /// Time by step class against each step's floor (runs with ceilings).
    steps: Option<Breakdown>,
    /// Decode steps of 9+ sequences fitted (runs with ceilings and enough such steps).
    decode_fit: Option<DecodeFit>,
}

impl RunResult {
    fn out_tps(&self) -> f64 {
        self.output_tokens as f64 / self.seconds
    }
}

pub fn run(args: BenchOfflineArgs) -> anyhow::Result<()> {
    super::init_warnings();
    let cfg = args.settings.config()?;
    let model = load_model(&args, &cfg)?;
    let vocab = model.config.vocab_size() as u32;
    let reqs = workload(&args, vocab)?;
    let input_tokens: u64 = reqs.iter().map(|r| r.prompt_tokens.len() as u64).sum();
    let output_tokens: u64 = reqs.iter().map(|r| u64::from(r.max_new_tokens)).sum();
    // Ceilings first, on an empty device: the KV budget below is sized from
    // what is free.
    let ceiling = measure_ceiling(&args, &cfg)?;
    let num_pages = num_pages(&args, &cfg, &model, &reqs)?;
    let lens: Vec<(u64, u64)> = reqs
        .iter()
        .map(|r| (r.prompt_tokens.len() as u64, u64::from(r.max_new_tokens)))
        .collect();
    let tp = cfg.tp as usize;
    let all_reduce = match &ceiling {
        Some(_) if tp > 1 => Some(
            super::bench_floor::measure_all_reduce(tp, &[])
                .context("measuring the NCCL all-reduce (--no-ceiling skips it)")?,
        ),
        _ => None,
    };
    // The all-reduces come on top of either floor.
    let ar_s = all_reduce.as_ref().map_or(0.0, |ar| {
        super::bench_floor::all_reduce_floor_seconds(&model.config, &lens, ar)
    });
    let floor = ceiling
        .as_ref()
        .map(|(c, _)| super::bench_floor::floor_seconds(&model.config, &lens, c, tp) + ar_s);
    // The same floor with each decode step also bounded by its FLOPs: how far a run is
    // from what its kernels could reach at all.
    let roofline = ceiling
        .as_ref()
        .map(|(c, _)| super::bench_floor::roofline_seconds(&model.config, &lens, c, tp) + ar_s);
    if let (Some((c, dev)), Some(f)) = (&ceiling, floor) {
        let ar = all_reduce.as_ref().map_or(String::new(), |ar| {
            format!(
                ", NCCL all-reduce {:.0} GB/s bus bandwidth over {tp} GPUs",
                ar.bus_bytes_s / 1e9
            )
        });
        println!(
            "{dev}: copy {:.2} TB/s, bf16 GEMM {:.0} TFLOP/s held ({:.0} in its first milliseconds, before the power limit lowers the clock){ar} (measured now); workload floor {f:.2} s = {:.0} output tok/s; attention {}",
            c.copy_bytes_s / 1e12,
            c.gemm_flops_s / 1e12,
            c.gemm_burst_flops_s / 1e12,
            output_tokens as f64 / f,
            c.attention
        );
        if let Some(rf) = roofline {
            println!(
                "roofline floor (each decode step also bounded by its FLOPs at the GEMM rate) {rf:.2} s = {:.0} output tok/s",
                output_tokens as f64 / rf
            );
        }
    }
    println!(
        "model {} ({} layers, hidden {}, vocab {vocab}); {} requests, {input_tokens} input + {output_tokens} output tokens; \
         {num_pages} KV pages of {} tokens",
        model.source.display(),
        model.config.num_layers(),
        model.config.hidden_size(),
        reqs.len(),
        cfg.page_size
    );
    if let Some(path) = &args.scheduler {
        println!(
            "scheduler: {} (instead of the built-in FCFS)",
            path.display()
        );
    }

    let mut plans: Vec<(String, bool, CacheMode)> = Vec::new();
    let overlap = cfg.overlap;
    match (args.compare_overlap, args.compare_cache) {
        (false, false) => plans.push((label(overlap, args.cache), overlap, args.cache)),
        (true, false) => {
            plans.push((label(true, args.cache), true, args.cache));
            plans.push((label(false, args.cache), false, args.cache));
        }
        (false, true) => {
            plans.push((label(overlap, CacheMode::Radix), overlap, CacheMode::Radix));
            plans.push((label(overlap, CacheMode::Naive), overlap, CacheMode::Naive));
        }
        (true, true) => {
            for cache in [CacheMode::Radix, CacheMode::Naive] {
                for o in [true, false] {
                    plans.push((label(o, cache), o, cache));
                }
            }
        }
    }

    let mut runs: Vec<(String, bool, CacheMode, usize)> = Vec::new();
    for (label, overlap, cache) in plans {
        if args.compare_graphs {
            runs.push((format!("{label}, graphs off"), overlap, cache, 0));
        }
        runs.push((label, overlap, cache, cfg.cuda_graph_max_bs as usize));
    }
    let mut results = Vec::new();
    for (label, overlap, cache, graph_bs) in runs {
        let opts = RunnerOptions {
            cuda_graph_max_bs: graph_bs,
            tp: cfg.tp as usize,
        };
        let built = Instant::now();
        let runner = build_runner_with(&model, cfg.device, num_pages, cfg.page_size, &opts)
            .context("building the model runner")?;
        // Every step with its shape and time: where the run loses against its floor.
        let (runner, step_log) = LoggingRunner::new(runner, Instant::now());
        let runner: Box<dyn ModelRunner> = Box::new(runner);
        let engine_cfg = EngineConfig {
            num_pages: Some(num_pages),
            max_running: cfg.max_running,
            max_prefill_tokens: cfg.max_prefill_tokens,
            max_waiting: reqs.len().max(1),
            cache,
            overlap,
            seed: args.seed,
            ..EngineConfig::default()
        };
        let plugins = match &args.scheduler {
            None => PluginSet::native(),
            Some(path) => PluginSet::load(&PluginConfig {
                scheduler: Some(path.clone()),
                ..PluginConfig::default()
            })
            .with_context(|| format!("loading --scheduler {}", path.display()))?,
        };
        let engine = Engine::new(
            runner,
            Arc::new(plugins),
            engine_cfg,
            model.config.eos_token_ids().to_vec(),
        )
        .map_err(anyhow::Error::msg)?;
        let bar = ProgressBar::new(output_tokens).with_style(
            ProgressStyle::with_template(
                "{prefix:>22} [{bar:30}] {pos}/{len} tok {per_sec} eta {eta}",
            )
            .expect("static template")
            .progress_chars("=> "),
        );
        bar.set_prefix(label.clone());
        // Off a terminal (device scripts, CI) the bar is hidden: a line every 10 s
        // instead, so a run that stalls shows where (the 14B long-prompt runs of
        // 2026-12-01 printed nothing for 100 s).
        let plain = !std::io::IsTerminal::is_terminal(&std::io::stderr());
        if plain {
            eprintln!(
                "{label}: runner and engine ready in {:.1} s",
                built.elapsed().as_secs_f64()
            );
        }
        let start = Instant::now();
        let mut last_note = start;
        let outs = engine.generate_with_progress(reqs.clone(), &mut |_, tokens| {
            bar.set_position(tokens);
            if plain && last_note.elapsed().as_secs() >= 10 {
                last_note = Instant::now();
                eprintln!(
                    "{label}: {tokens}/{output_tokens} output tokens after {:.0} s",
                    start.elapsed().as_secs_f64()
                );
            }
        });
        let seconds = start.elapsed().as_secs_f64();
        bar.finish_and_clear();
        if let Some(e) = outs.iter().find_map(|o| o.error.clone()) {
            bail!("a request failed: {e}");
        }
        let produced: u64 = outs
            .iter()
            .map(|o| u64::from(o.usage.completion_tokens))
            .sum();
        let metrics = engine.metrics();
        engine.shutdown();
        let records = step_log.lock().expect("step log").clone();
        if let Some(path) = &args.steps_csv {
            std::fs::write(path, step_log::csv(&records))
                .with_context(|| format!("writing {}", path.display()))?;
        }
        let steps = ceiling.as_ref().map(|(c, _)| {
            Breakdown::of(&records, seconds, |s| {
                super::bench_floor::step_floor_seconds(&model.config, s, c, tp)
            })
        });
        // Per GPU: each rank reads its share of the weights and of the KV.
        let decode_fit = ceiling.as_ref().and_then(|(c, _)| {
            let (weights, kv_token) = super::bench_floor::decode_bytes(&model.config);
            let tp = tp.max(1) as f64;
            let weight_s = weights / tp / c.copy_bytes_s;
            DecodeFit::of(&records, 9, kv_token / tp, weight_s, c.copy_bytes_s)
        });
        let r = RunResult {
            label,
            seconds,
            input_tokens,
            output_tokens: produced,
            metrics,
            steps,
            decode_fit,
        };
        print_run(&r);
        if let Some(b) = &r.steps {
            b.print(&r.label);
        }
        if let Some(f) = &r.decode_fit {
            f.print(&r.label);
        }
        if let Some(f) = floor {
            let ceil_tps = output_tokens as f64 / f;
            println!(
                "{:>22}: {:.1}% of the ceiling ({:.0} output tok/s)",
                r.label,
                100.0 * r.out_tps() / ceil_tps,
                ceil_tps
            );
            // The ceiling prefills every prompt token: a run whose cache skipped some did
            // less work than it counts, and can pass it. Its own steps' floors price the
            // work it did (policies compare on both: the first says how much work a
            // policy saved, this one how fast the engine did the rest).
            if let Some(b) = r.steps.as_ref().filter(|_| r.metrics.cache_hit_tokens > 0) {
                println!(
                    "{:>22}: {:.1}% of the cache hits' prompt tokens skipped; {:.1}% of the floor of the work it did ({:.3} s of step floors in {:.3} s)",
                    r.label,
                    100.0 * r.metrics.cache_hit_rate(),
                    100.0 * b.as_run_fraction(),
                    b.floor_seconds(),
                    r.seconds
                );
            }
        }
        if let Some(rf) = roofline {
            let roof_tps = output_tokens as f64 / rf;
            println!(
                "{:>22}: {:.1}% of the roofline ceiling ({:.0} output tok/s)",
                r.label,
                100.0 * r.out_tps() / roof_tps,
                roof_tps
            );
        }
        if let Some(path) = &args.jsonl {
            append_jsonl(
                path,
                &args,
                &cfg,
                &model,
                &r,
                floor,
                roofline,
                ceiling.as_ref(),
                all_reduce.as_ref(),
                num_pages,
                graph_bs,
            )?;
        }
        results.push(r);
    }
    print_comparisons(&results);
    Ok(())
}

/// The device ceilings when the run is on a GPU (and not turned off).
fn measure_ceiling(
    args: &BenchOfflineArgs,
    cfg: &Config,
) -> anyhow::Result<Option<(super::bench_floor::Ceilings, String)>> {
    if args.no_ceiling || cfg.device == DeviceKind::Cpu {
        return Ok(None);
    }
    match super::bench_floor::measure_cuda() {
        Ok(c) => Ok(Some(c)),
        Err(e) if cfg.device == DeviceKind::Auto => {
            tracing::info!("no device ceilings ({e}); the CPU run reports none");
            Ok(None)
        }
        Err(e) => Err(e.context("measuring the device ceilings (--no-ceiling skips it)")),
    }
}

/// One JSON line per run: the figure, its ceiling and every setting that moves it.
#[allow(clippy::too_many_arguments)]
fn append_jsonl(
    path: &std::path::Path,
    args: &BenchOfflineArgs,
    cfg: &Config,
    model: &LoadedModel,
    r: &RunResult,
    floor: Option<f64>,
    roofline: Option<f64>,
    ceiling: Option<&(super::bench_floor::Ceilings, String)>,
    all_reduce: Option<&super::bench_floor::AllReduceTimes>,
    num_pages: u32,
    graph_bs: usize,
) -> anyhow::Result<()> {
    use std::io::Write as _;
    let shape = args.shape.clone().unwrap_or_else(|| {
        let p = args
            .random_weights
            .as_ref()
            .or(cfg.model.as_ref())
            .cloned()
            .unwrap_or_default();
        p.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    });
    let workload = args.workload_name.clone().unwrap_or_else(|| {
        let groups = match args.workload {
            Workload::Random => String::new(),
            Workload::SharedPrefix => format!(
                " groups={} prefix={} order={:?}",
                args.num_groups, args.prefix_len, args.group_order
            ),
        };
        format!(
            "{:?} n={} in={}-{} out={}-{}{groups} seed={}",
            args.workload,
            args.num_seqs,
            args.min_input_len,
            args.max_input_len,
            args.min_output_len,
            args.max_output_len,
            args.seed
        )
    });
    let ceil_tps = floor.map(|f| r.output_tokens as f64 / f);
    let roof_tps = roofline.map(|f| r.output_tokens as f64 / f);
    let kv_gib = num_pages as f64
        * bytes_per_page(
            cfg.page_size,
            model.config.num_layers() as u32,
            (model.config.num_kv_heads() / (cfg.tp as usize).max(1)) as u32,
            model.config.head_dim() as u32,
            cfg.device.kv_elem_bytes(),
        ) as f64
        / (1u64 << 30) as f64;
    let r3 = |x: f64| (x * 1000.0).round() / 1000.0;
    let mut v = serde_json::json!({
        "date": std::env::var("MINISGL_BENCH_DATE").unwrap_or_default(),
        "commit": std::env::var("MINISGL_COMMIT").unwrap_or_default(),
        "machine": ceiling.map(|c| c.1.clone()).unwrap_or_else(|| "cpu".into()),
        "shape": shape,
        "tp": cfg.tp,
        "workload": workload,
        "metric": "offline_output_tok_s",
        "value": (r.out_tps() * 10.0).round() / 10.0,
        "unit": "tok/s",
        "ceiling": ceil_tps.map(|c| c.round()),
        "fraction": ceil_tps.map(|c| r3(r.out_tps() / c)),
        "roofline_ceiling": roof_tps.map(|c| c.round()),
        "roofline_fraction": roof_tps.map(|c| r3(r.out_tps() / c)),
        "run": r.label,
        "kv_pages": num_pages,
        "kv_gib": (kv_gib * 100.0).round() / 100.0,
        "page_size": cfg.page_size,
        "chunk": cfg.max_prefill_tokens,
        "max_running": cfg.max_running,
        "cuda_graph_max_bs": graph_bs,
        "copy_tbps": ceiling.map(|c| (c.0.copy_bytes_s / 1e10).round() / 100.0),
        // Held under the power limit (the floor's rate); before 2026-12-03 (commit
        // cf76096 and earlier) this field was the burst rate, now gemm_burst_tflops.
        "gemm_tflops": ceiling.map(|c| (c.0.gemm_flops_s / 1e12).round()),
        "gemm_burst_tflops": ceiling.map(|c| (c.0.gemm_burst_flops_s / 1e12).round()),
        "attention": ceiling.map(|c| c.0.attention.clone()),
        "allreduce_busbw_gbs": all_reduce.map(|a| (a.bus_bytes_s / 1e9).round()),
        "seconds": r3(r.seconds),
        "steps": r.steps.as_ref().map(Breakdown::json),
        // The ceiling above counts every prompt token as prefill; these price what the
        // run did after its cache hits (see `Breakdown::as_run_fraction`).
        "cache_hit_rate": r3(r.metrics.cache_hit_rate()),
        "as_run_floor_seconds": r.steps.as_ref().map(|b| r3(b.floor_seconds())),
        "as_run_fraction": r.steps.as_ref().map(|b| r3(b.as_run_fraction())),
        "decode_fit": r.decode_fit.as_ref().map(DecodeFit::json),
        "kernel_defines": std::env::var(minisgl::backend::cuda::nvrtc::DEFINES_ENV).unwrap_or_default(),
        "scheduler": args.scheduler.as_ref().map_or_else(
            || "fcfs (built in)".to_string(),
            |p| p.display().to_string()
        ),
    });
    record_kernel_switches(&mut v);
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    writeln!(f, "{v}")?;
    Ok(())
}

fn label(overlap: bool, cache: CacheMode) -> String {
    format!(
        "{}, overlap {}",
        match cache {
            CacheMode::Radix => "radix",
            CacheMode::Naive => "naive",
        },
        if overlap { "on" } else { "off" }
    )
}

fn load_model(args: &BenchOfflineArgs, cfg: &Config) -> anyhow::Result<LoadedModel> {
    match (&cfg.model, &args.random_weights) {
        (Some(p), None) => load(p).with_context(|| format!("loading --model {}", p.display())),
        (None, Some(p)) => load_random(p, args.seed)
            .with_context(|| format!("building --random-weights {}", p.display())),
        _ => bail!("give exactly one of --model PATH or --random-weights CONFIG_DIR"),
    }
}

/// The requests of the chosen workload (deterministic for a seed).
fn workload(args: &BenchOfflineArgs, vocab: u32) -> anyhow::Result<Vec<GenerateRequest>> {
    if args.num_seqs == 0 {
        bail!("--num-seqs must be at least 1, got 0");
    }
    if args.max_input_len == 0 || args.max_output_len == 0 {
        bail!(
            "--max-input-len ({}) and --max-output-len ({}) must be at least 1",
            args.max_input_len,
            args.max_output_len
        );
    }
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
    let token_range = 10_000.min(vocab);
    let in_lo = args.min_input_len.clamp(1, args.max_input_len);
    let out_lo = args.min_output_len.clamp(1, args.max_output_len);
    let prefixes: Vec<Vec<u32>> = match args.workload {
        Workload::Random => Vec::new(),
        Workload::SharedPrefix => {
            if args.num_groups == 0 {
                bail!("--num-groups must be at least 1, got 0");
            }
            (0..args.num_groups)
                .map(|_| {
                    (0..args.prefix_len)
                        .map(|_| rng.random_range(0..token_range))
                        .collect()
                })
                .collect()
        }
    };
    // Popular groups: weight 1/(g+1), by the cumulative sum.
    let cum: Vec<f64> = (0..prefixes.len())
        .scan(0.0, |acc, g| {
            *acc += 1.0 / (g as f64 + 1.0);
            Some(*acc)
        })
        .collect();
    Ok((0..args.num_seqs)
        .map(|i| {
            let input_len = rng.random_range(in_lo..=args.max_input_len);
            let output_len = rng.random_range(out_lo..=args.max_output_len);
            let group = match (args.group_order, cum.last()) {
                (GroupOrder::Popular, Some(&total)) => {
                    let x = rng.random_range(0.0..total);
                    cum.partition_point(|&c| c <= x).min(cum.len() - 1)
                }
                _ => i % prefixes.len().max(1),
            };
            let mut prompt = prefixes.get(group).cloned().unwrap_or_default();
            prompt.extend((0..input_len).map(|_| rng.random_range(0..token_range)));
            GenerateRequest {
                ignore_eos: true,
                params: SamplingParams {
                    temperature: 0.0,
                    ..SamplingParams::default()
                },
                ..GenerateRequest::greedy(prompt, output_len)
            }
        })
        .collect())
}

/// Explicit, or what the memory budget holds, capped at what the whole
/// workload could ever use (every request resident at once).
fn num_pages(
    args: &BenchOfflineArgs,
    cfg: &Config,
    model: &LoadedModel,
    reqs: &[GenerateRequest],
) -> anyhow::Result<u32> {
    if let Some(n) = args.num_pages {
        return Ok(n);
    }
    // The bench's CPU default is larger than the server's: it sizes for a
    // whole offline workload, not for a few interactive users.
    let budget_bytes = match (cfg.kv_memory_mb, cfg.device) {
        (Some(mb), _) => Some(mb << 20),
        (None, DeviceKind::Cpu) => Some(4096 << 20),
        (None, _) => None,
    };
    let budget = minisgl::engine::builder::kv_pages(
        &model.config,
        cfg.device,
        cfg.page_size,
        budget_bytes,
        cfg.tp as usize,
    )?;
    let needed: u64 = reqs
        .iter()
        .map(|r| {
            u64::from((r.prompt_tokens.len() as u32 + r.max_new_tokens).div_ceil(cfg.page_size))
        })
        .sum();
    Ok(budget.min(needed.min(u64::from(u32::MAX)) as u32))
}

fn print_run(r: &RunResult) {
    let m = &r.metrics;
    println!(
        "{:>22}: {:>8.1} output tok/s, {:>8.1} total tok/s, {:.2} s; cache hit {:.1}% ({} / {} prompt tokens); \
         {} steps, {} preemptions, {} evicted pages, {} discarded overlap tokens",
        r.label,
        r.out_tps(),
        (r.input_tokens + r.output_tokens) as f64 / r.seconds,
        r.seconds,
        100.0 * m.cache_hit_rate(),
        m.cache_hit_tokens,
        m.cache_prompt_tokens,
        m.steps,
        m.preemptions,
        m.evicted_pages,
        m.wasted_tokens,
    );
}

fn print_comparisons(results: &[RunResult]) {
    let find = |l: &str| results.iter().find(|r| r.label == l);
    for off in results {
        if let Some(base) = off.label.strip_suffix(", graphs off") {
            if let Some(on) = find(base) {
                println!(
                    "CUDA graphs on / off ({base}): {:.3}x output tok/s",
                    on.out_tps() / off.out_tps()
                );
            }
        }
    }
    for cache in ["radix", "naive"] {
        if let (Some(on), Some(off)) = (
            find(&format!("{cache}, overlap on")),
            find(&format!("{cache}, overlap off")),
        ) {
            println!(
                "overlap on / off ({cache}): {:.3}x output tok/s",
                on.out_tps() / off.out_tps()
            );
        }
    }
    for o in ["on", "off"] {
        if let (Some(radix), Some(naive)) = (
            find(&format!("radix, overlap {o}")),
            find(&format!("naive, overlap {o}")),
        ) {
            println!(
                "radix vs naive (overlap {o}): hit rate {:.1}% vs {:.1}%, {:.3}x output tok/s",
                100.0 * radix.metrics.cache_hit_rate(),
                100.0 * naive.metrics.cache_hit_rate(),
                radix.out_tps() / naive.out_tps()
            );
        }
    }
}

/// The kernel switches that change a figure, as the device parsed them from the
/// environment (not the raw variables: a value it refused runs the default, and the
/// record says so). Flags are "1"/"0" as in earlier lines of bench.jsonl.
fn record_kernel_switches(v: &mut serde_json::Value) {
    let o = minisgl::backend::cuda::CudaOptions::default();
    let name = |d: &dyn std::fmt::Debug| format!("{d:?}").to_lowercase();
    let flag = |b: bool| if b { "1" } else { "0" };
    v["decode_kernel"] = name(&o.decode_kernel).into();
    v["prefill_kernel"] = name(&o.prefill_kernel).into();
    v["decode_schedule"] = name(&o.decode_schedule).into();
    v["decode_min_splits"] = o.decode_min_splits.to_string().into();
    v["decode_splits"] = if o.decode_wave_splits {
        format!("waves{}", o.decode_wave_limit)
    } else {
        "fill".into()
    }
    .into();
    v["pdl"] = flag(o.pdl).into();
    v["norm_prologue"] = flag(o.norm_prologue).into();
    v["fold_norms"] = flag(o.fold_norms).into();
    v["gemv_rows"] = o.gemv_rows.to_string().into();
    v["rope_heads"] = o.rope_heads.to_string().into();
    v["norm_threads"] = o.norm_threads.to_string().into();
    v["gemv_max_weight_mb"] = (o.gemv_max_weight >> 20).to_string().into();
    v["layer_chain"] = flag(o.layer_chain).into();
    v["chain_attn"] = flag(o.chain_attn).into();
    v["chain_attn_part"] = o.chain_attn_part.to_string().into();
    // None: 2 chunks where a block's share of a layer is at most two rings, else 0.
    v["chain_window"] = o
        .chain_window
        .map_or_else(|| "rule".into(), |w| w.to_string())
        .into();
    v["chain_span"] = o.chain_span.to_string().into();
    v["decode_rope"] = name(&o.decode_rope).into();
    v["decode_order"] = flag(o.decode_order).into();
    // By name: before 2026-12-05's fifteenth session "1" meant what is now "tiles".
    v["prefill_order"] = name(&o.prefill_order).into();
    v["sample_split"] = flag(o.sample_split).into();
    v["mixed_split"] = flag(o.mixed_split).into();
    // Recorded since 2026-12-07 (gpu-2026-12-07-sample.md). Older lines ran f32 logits,
    // and before bf7c156 the sampler copied them every step; that session's own lines
    // carry their settings in "env".
    v["logits_bf16"] = flag(o.logits_bf16).into();
    v["sample_copy"] = flag(o.sample_copy).into();
    v["fold_defer"] = flag(o.fold_defer).into();
}

#[cfg(test)]
mod tests {
    use super::{workload, BenchOfflineArgs, GroupOrder, Workload};
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: BenchOfflineArgs,
    }

    fn args(extra: &[&str]) -> BenchOfflineArgs {
        let mut argv = vec![
            "bench",
            "--random-weights",
            "x",
            "--workload",
            "shared-prefix",
        ];
        argv.extend([
            "--num-seqs",
            "400",
            "--num-groups",
            "8",
            "--prefix-len",
            "4",
            "--min-input-len",
            "1",
            "--max-input-len",
            "2",
            "--max-output-len",
            "1",
        ]);
        argv.extend(extra);
        Cli::try_parse_from(argv).unwrap().args
    }

    /// Each request's group, read off its prompt's first token against the prefixes
    /// (the prompts of group g start with the same 4 tokens).
    fn groups(a: &BenchOfflineArgs) -> Vec<usize> {
        let reqs = workload(a, 1000).unwrap();
        let mut firsts: Vec<Vec<u32>> = Vec::new();
        reqs.iter()
            .map(|r| {
                let head = r.prompt_tokens[..4].to_vec();
                match firsts.iter().position(|f| *f == head) {
                    Some(g) => g,
                    None => {
                        firsts.push(head);
                        firsts.len() - 1
                    }
                }
            })
            .collect()
    }

    #[test]
    fn round_robin_deals_request_i_to_group_i_mod_groups() {
        let a = args(&["--group-order", "round-robin"]);
        assert_eq!(
            (a.workload, a.group_order),
            (Workload::SharedPrefix, GroupOrder::RoundRobin)
        );
        let g = groups(&a);
        assert!(g.iter().enumerate().all(|(i, &g)| g == i % 8), "{g:?}");
    }

    #[test]
    fn popular_order_is_the_default_and_favours_the_first_groups() {
        let a = args(&[]);
        assert_eq!(a.group_order, GroupOrder::Popular);
        // Groups are numbered by first appearance here, so count each prompt head.
        let reqs = workload(&a, 1000).unwrap();
        let mut counts: std::collections::HashMap<Vec<u32>, usize> = Default::default();
        for r in &reqs {
            *counts.entry(r.prompt_tokens[..4].to_vec()).or_default() += 1;
        }
        let mut c: Vec<usize> = counts.into_values().collect();
        c.sort_unstable_by(|a, b| b.cmp(a));
        // Weights 1/(g+1) over 8 groups: the most popular takes ~37% of 400, the least
        // ~5%; every group appears, and the same seed gives the same requests.
        assert_eq!(c.len(), 8, "{c:?}");
        assert!(c[0] > 110 && c[7] < 40, "{c:?}");
        assert_eq!(groups(&a), groups(&args(&[])));
        // Not dealt in turn.
        assert!(groups(&a).windows(2).any(|w| w[0] == w[1]));
    }

    #[test]
    fn a_bad_group_order_names_the_value() {
        let argv = ["bench", "--random-weights", "x", "--group-order", "zipf"];
        let err = Cli::try_parse_from(argv).err().unwrap().to_string();
        assert!(err.contains("zipf") && err.contains("round-robin"), "{err}");
    }
}
