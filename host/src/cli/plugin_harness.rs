//! `minisgl-host plugin check|diff|cost|gen`: what a policy author runs before
//! deploying a plugin, with no model and no GPU.
//!
//! - `check` feeds a plugin seeded synthetic views (or recorded ones) through
//!   the host's own plugin runtime, in `fail` mode, and stops at the first
//!   call that traps, runs past its deadline, hits its memory cap or returns a
//!   decision the host's validation rejects — printing the rule it broke and
//!   the case, ready to replay with `--views`.
//! - `diff` gives two plugins (or a plugin and `native`, the built-in) the
//!   same inputs and reports every call where their decisions differ
//!   (differing is what a new policy does: not an error; a failed call is).
//! - `cost` times calls at fixed batch sizes (default 8 and 256), or on the
//!   recorded cases of `--views`, and prints p50/p99 next to the native
//!   built-in's, which tells which `--deadline-ms` a plugin needs.
//! - `gen` writes the synthetic cases as JSON lines, the `--views` format.

mod views;

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use minisgl_plugin_sdk::{SamplePlan, ScheduleDecision};

use super::settings::{Group, SettingArgs};
use minisgl::config::Alias;
use minisgl::plugin::clock::thread_cpu_time;
use minisgl::plugin::{Deadlines, FailureMode, PluginConfig, PluginKind, PluginSet};
use views::{Case, Size};

#[derive(clap::Subcommand, Debug)]
pub enum PluginCommand {
    /// Check that every decision of PLUGIN passes the host's validation.
    Check(CheckArgs),
    /// Compare the decisions of two plugins (`native` names the built-in).
    Diff(DiffArgs),
    /// Time calls at fixed batch sizes; p50/p99 against the built-in.
    Cost(CostArgs),
    /// Write the synthetic cases as JSON lines (the `--views` format).
    Gen(GenArgs),
}

/// Inputs and runtime settings shared by the subcommands.
#[derive(clap::Args, Debug, Clone)]
pub struct Inputs {
    /// Which world the plugin implements: scheduler, evictor or sampler.
    #[arg(long, default_value = "scheduler")]
    pub kind: PluginKind,
    /// Number of synthetic cases.
    #[arg(long, default_value_t = 2000)]
    pub cases: u64,
    /// Seed of the synthetic cases.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Replay recorded cases (JSON lines, see `plugin gen`) instead.
    #[arg(long)]
    pub views: Option<PathBuf>,
    /// The plugin deadline and compile cache, spelled as for serving.
    #[command(flatten)]
    pub settings: SettingArgs<HarnessSettings>,
}

/// The settings the harness takes. A compile cache pays off here: a 17 MB
/// Python component takes ~10-20 s to compile once, then loads in tens of
/// milliseconds.
pub struct HarnessSettings;
impl Group for HarnessSettings {
    const NAMES: Option<&'static [&'static str]> =
        Some(&["plugin_deadline_ms", "plugin_cache_dir"]);
    const READS_ENV: bool = true;
    const LOCAL_ALIASES: &'static [(&'static str, Alias)] = &[
        ("plugin_deadline_ms", Alias::flag("--deadline-ms")),
        ("plugin_cache_dir", Alias::flag("--cache-dir")),
    ];
}

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// The component (`.wasm` or precompiled `.cwasm`).
    pub plugin: PathBuf,
    #[command(flatten)]
    pub inputs: Inputs,
}

#[derive(clap::Args, Debug)]
pub struct DiffArgs {
    /// First plugin, or `native`.
    pub a: String,
    /// Second plugin, or `native`.
    pub b: String,
    #[command(flatten)]
    pub inputs: Inputs,
    /// Differences printed in full.
    #[arg(long, default_value_t = 3)]
    pub show: usize,
}

#[derive(clap::Args, Debug)]
pub struct CostArgs {
    /// The plugin to time, or `native`.
    pub plugin: String,
    #[command(flatten)]
    pub inputs: Inputs,
    /// Batch sizes (waiting = running = N views; N leaves; N requests).
    #[arg(long, value_delimiter = ',', default_value = "8,256")]
    pub batch: Vec<usize>,
    /// Timed calls per batch size (after 20 warm-up calls).
    #[arg(long, default_value_t = 500)]
    pub iters: usize,
    /// Print one JSON object per batch size instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct GenArgs {
    /// Output file (JSON lines).
    #[arg(long, short)]
    pub out: PathBuf,
    #[command(flatten)]
    pub inputs: Inputs,
}

pub fn run(cmd: PluginCommand) -> Result<()> {
    match cmd {
        PluginCommand::Check(args) => check(args),
        PluginCommand::Diff(args) => diff(args),
        PluginCommand::Cost(args) => cost(args),
        PluginCommand::Gen(args) => gen(args),
    }
}

/// Loads `spec` (a path, or `native`) into the slot of `kind`.
fn load(spec: &str, inputs: &Inputs, mode: FailureMode) -> Result<PluginSet> {
    if spec == "native" {
        return Ok(PluginSet::native());
    }
    let path = PathBuf::from(spec);
    if !path.is_file() {
        bail!("plugin {spec:?}: no such file (give a .wasm/.cwasm path or `native`)");
    }
    let settings = inputs.settings.config()?;
    let mut cfg = PluginConfig {
        failure_mode: mode,
        cache_dir: settings.plugin_cache_dir,
        ..PluginConfig::default()
    };
    if let Some(ms) = settings.plugin_deadline_ms {
        cfg.deadlines = Deadlines::all(Duration::from_millis(ms));
    }
    let set = PluginSet::load(&cfg).context("starting the plugin runtime")?;
    let report = set
        .swap(inputs.kind, &path)
        .with_context(|| format!("loading {spec} as a {} plugin", inputs.kind))?;
    eprintln!(
        "loaded {spec}: `{}`, compile {:.0} ms{}, instantiate {:.1} ms",
        report.name,
        report.compile_ms,
        if report.cached { " (cached)" } else { "" },
        report.instantiate_ms
    );
    Ok(set)
}

/// The cases to feed, recorded or synthetic.
fn cases(inputs: &Inputs) -> Result<Box<dyn Iterator<Item = Case>>> {
    if let Some(path) = &inputs.views {
        let cases = views::read_jsonl(path)?;
        let kind = inputs.kind;
        if let Some((i, _)) = cases.iter().enumerate().find(|(_, c)| case_kind(c) != kind) {
            bail!("{}: case {} is not a {kind} case", path.display(), i + 1);
        }
        return Ok(Box::new(cases.into_iter()));
    }
    let (kind, seed) = (inputs.kind, inputs.seed);
    Ok(Box::new((0..inputs.cases).map(move |i| {
        views::synthetic(kind, seed, i, Size::Varied)
    })))
}

fn case_kind(case: &Case) -> PluginKind {
    match case {
        Case::Schedule { .. } => PluginKind::Scheduler,
        Case::Evict { .. } => PluginKind::Evictor,
        Case::Sample { .. } => PluginKind::Sampler,
    }
}

/// What a plugin answered to one case.
#[derive(Debug, PartialEq)]
enum Answer {
    Schedule(ScheduleDecision),
    Evict(Vec<u64>),
    Sample(Vec<SamplePlan>, Vec<u32>),
}

fn call(set: &PluginSet, case: &Case) -> Answer {
    match case {
        Case::Schedule {
            waiting,
            running,
            budget,
        } => Answer::Schedule(set.schedule(waiting, running, budget)),
        Case::Evict {
            leaves,
            pages_needed,
        } => Answer::Evict(set.pick_victims(leaves, *pages_needed)),
        Case::Sample {
            requests,
            vocab_size,
            lists,
        } => Answer::Sample(set.plan(requests, *vocab_size), set.pick(lists)),
    }
}

/// Failed calls of the slot `kind` so far: the total and a per-cause summary.
fn failures(set: &PluginSet, kind: PluginKind) -> (u64, String) {
    let stats = set.stats().into_iter().find(|s| s.kind == kind);
    stats.map_or((0, String::new()), |s| {
        let f = s.failures;
        let detail = format!(
            "{} trap, {} timeout, {} memory, {} invalid",
            f.trap, f.timeout, f.memory, f.invalid
        );
        (f.total(), detail)
    })
}

fn check(args: CheckArgs) -> Result<()> {
    let inputs = &args.inputs;
    let spec = args.plugin.to_string_lossy().into_owned();
    let set = load(&spec, inputs, FailureMode::Fail)?;
    let mut n = 0u64;
    for (i, case) in cases(inputs)?.enumerate() {
        call(&set, &case);
        n += 1;
        if let Err(err) = set.check() {
            let json = serde_json::to_string(&case)?;
            bail!(
                "case {i} (seed {}): {err}\nthe case, replayable with --views FILE:\n{json}",
                inputs.seed
            );
        }
    }
    println!(
        "ok: {n} {} calls of {spec} passed the host's validation",
        inputs.kind
    );
    Ok(())
}

fn diff(args: DiffArgs) -> Result<()> {
    let inputs = &args.inputs;
    let a = load(&args.a, inputs, FailureMode::Fallback)?;
    let b = load(&args.b, inputs, FailureMode::Fallback)?;
    let (mut n, mut differ) = (0u64, 0u64);
    for (i, case) in cases(inputs)?.enumerate() {
        let (x, y) = (call(&a, &case), call(&b, &case));
        n += 1;
        if x != y {
            differ += 1;
            if differ as usize <= args.show {
                println!(
                    "case {i} differs:\n  {}: {x:?}\n  {}: {y:?}\n  case: {}",
                    args.a,
                    args.b,
                    serde_json::to_string(&case)?
                );
            }
        }
    }
    let ((fa, da), (fb, db)) = (failures(&a, inputs.kind), failures(&b, inputs.kind));
    println!(
        "{n} cases (seed {}): {differ} differ; failed calls: {fa} in {} ({da}), {fb} in {} ({db})",
        inputs.seed, args.a, args.b
    );
    if fa > 0 || fb > 0 {
        bail!(
            "{fa} + {fb} failed calls (answered by the built-in, so those cases compare the \
             built-in; `plugin check` shows the first failure)"
        );
    }
    Ok(())
}

/// Call-time percentiles, in microseconds.
#[derive(Debug, serde::Serialize)]
struct Timing {
    plugin: String,
    kind: PluginKind,
    /// Views per call (synthetic), or the largest case of `--views`.
    batch: usize,
    /// `synthetic`, or the `--views` file the cases came from.
    cases: String,
    calls: usize,
    p50_us: f64,
    p99_us: f64,
    mean_us: f64,
    /// The calling thread's CPU time per call (what the deadline measures).
    cpu_p99_us: f64,
    native_p50_us: f64,
    ratio_p50: f64,
}

/// Sorted wall times and sorted thread CPU times of `iters` calls, in µs.
fn time_calls(set: &PluginSet, cases: &[Case], iters: usize) -> (Vec<f64>, Vec<f64>) {
    for case in cases.iter().cycle().take(20) {
        call(set, case);
    }
    let cpu_now = || thread_cpu_time().unwrap_or_default();
    let (mut us, mut cpu): (Vec<f64>, Vec<f64>) = cases
        .iter()
        .cycle()
        .take(iters)
        .map(|case| {
            let (t, c) = (Instant::now(), cpu_now());
            std::hint::black_box(call(set, case));
            (
                t.elapsed().as_secs_f64() * 1e6,
                (cpu_now().saturating_sub(c)).as_secs_f64() * 1e6,
            )
        })
        .unzip();
    us.sort_by(f64::total_cmp);
    cpu.sort_by(f64::total_cmp);
    (us, cpu)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn cost(args: CostArgs) -> Result<()> {
    let inputs = &args.inputs;
    if args.iters == 0 {
        bail!("--iters must be at least 1 (got 0)");
    }
    let set = load(&args.plugin, inputs, FailureMode::Fallback)?;
    let native = PluginSet::native();
    if !args.json {
        println!(
            "{:<28} {:>6} {:>10} {:>10} {:>10} {:>11} {:>12} {:>8}",
            "plugin", "batch", "p50 µs", "p99 µs", "mean µs", "cpu p99 µs", "native p50", "ratio"
        );
    }
    for (batch, source, cases) in cost_inputs(&args)? {
        let failed_before = failures(&set, inputs.kind).0;
        let (us, cpu) = time_calls(&set, &cases, args.iters);
        let failed = failures(&set, inputs.kind).0 - failed_before;
        if failed > 0 {
            bail!("{} failed {failed} of its timed calls at batch {batch} (deadline too short? see --deadline-ms); timings would be the built-in's", args.plugin);
        }
        let (native_us, _) = time_calls(&native, &cases, args.iters);
        let t = Timing {
            plugin: args.plugin.clone(),
            kind: inputs.kind,
            batch,
            cases: source,
            calls: us.len(),
            p50_us: percentile(&us, 0.5),
            p99_us: percentile(&us, 0.99),
            mean_us: us.iter().sum::<f64>() / us.len() as f64,
            cpu_p99_us: percentile(&cpu, 0.99),
            native_p50_us: percentile(&native_us, 0.5),
            ratio_p50: percentile(&us, 0.5) / percentile(&native_us, 0.5),
        };
        if args.json {
            println!("{}", serde_json::to_string(&t)?);
        } else {
            let name = std::path::Path::new(&t.plugin)
                .file_name()
                .map_or(t.plugin.clone(), |f| f.to_string_lossy().into_owned());
            println!(
                "{name:<28} {:>6} {:>10.1} {:>10.1} {:>10.1} {:>11.1} {:>12.2} {:>7.0}x",
                t.batch, t.p50_us, t.p99_us, t.mean_us, t.cpu_p99_us, t.native_p50_us, t.ratio_p50
            );
        }
    }
    Ok(())
}

/// The case sets `cost` times: the `--views` file as one set (every case of
/// it, cycled), else 16 synthetic cases per `--batch` size, cycled, so a
/// plugin cannot cache one answer.
fn cost_inputs(args: &CostArgs) -> Result<Vec<(usize, String, Vec<Case>)>> {
    let inputs = &args.inputs;
    if let Some(path) = &inputs.views {
        let recorded: Vec<Case> = cases(inputs)?.collect();
        if recorded.is_empty() {
            bail!("{}: no cases to time", path.display());
        }
        let batch = recorded.iter().map(views::size).max().unwrap_or(0);
        return Ok(vec![(batch, path.display().to_string(), recorded)]);
    }
    Ok(args
        .batch
        .iter()
        .map(|&batch| {
            let cases = (0..16)
                .map(|i| views::synthetic(inputs.kind, inputs.seed, i, Size::Batch(batch)))
                .collect();
            (batch, "synthetic".to_string(), cases)
        })
        .collect())
}

fn gen(args: GenArgs) -> Result<()> {
    let file = std::fs::File::create(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let mut w = std::io::BufWriter::new(file);
    let mut n = 0;
    for case in cases(&args.inputs)? {
        serde_json::to_writer(&mut w, &case)?;
        w.write_all(b"\n")?;
        n += 1;
    }
    w.flush()?;
    println!(
        "wrote {n} {} cases to {}",
        args.inputs.kind,
        args.out.display()
    );
    Ok(())
}
