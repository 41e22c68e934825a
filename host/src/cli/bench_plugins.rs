//! `minisgl-host bench plugins`: what a plugin call costs, Wasm vs native.
//!
//! For each plugin kind and batch size, calls the default Wasm plugin through
//! the host's [`PluginSet`] (argument conversion, the sandboxed call and the
//! host's validation included: what the engine pays) and the same policy
//! linked natively, on identical seeded inputs, and prints the median and p99
//! cost per call and their ratio. A custom component (`--scheduler` etc.)
//! is expected to decide differently from the built-in: the differences are
//! reported, not an error; failed calls (trap, timeout, memory, invalid)
//! are.

mod synth;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::settings::{Group, SettingArgs};
use anyhow::{bail, Context};
use minisgl::config::Alias;
use minisgl::plugin::{validate, Deadlines, PluginConfig, PluginSet};
use minisgl_plugin_sdk::{Evictor, Sampler, Scheduler};
use minisgl_policies::{DefaultSampler, Fcfs, Lru};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

#[derive(clap::Args, Debug, Clone)]
pub struct BenchPluginsArgs {
    /// Batch sizes: waiting and running requests for the scheduler, leaves
    /// for the evictor, requests/lists for the sampler.
    #[arg(long, value_delimiter = ',', default_value = "8,256")]
    pub batches: Vec<usize>,
    /// Timed calls per kind, batch size and implementation.
    #[arg(long, default_value_t = 2000)]
    pub iterations: usize,
    /// The components to time (`--scheduler`, `--evictor`, `--sampler`,
    /// default: the built ones) and their compile cache, spelled as for serving.
    #[command(flatten)]
    pub settings: SettingArgs<BenchPluginSettings>,
    /// Vocabulary size for sampler inputs (Qwen3's by default).
    #[arg(long, default_value_t = 151_936)]
    pub vocab: u32,
    /// Seed of the generated inputs.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

impl Default for BenchPluginsArgs {
    fn default() -> Self {
        BenchPluginsArgs {
            batches: vec![8, 256],
            iterations: 2000,
            settings: SettingArgs::default(),
            vocab: 151_936,
            seed: 0,
        }
    }
}

/// Median and 99th percentile of a set of call durations, in microseconds.
struct Summary {
    median_us: f64,
    p99_us: f64,
}

fn summarize(mut samples: Vec<Duration>) -> Summary {
    samples.sort_unstable();
    let at = |q: f64| {
        let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
        samples[i].as_secs_f64() * 1e6
    };
    Summary {
        median_us: at(0.5),
        p99_us: at(0.99),
    }
}

/// Times `call` on each input in turn, `iterations` calls in total, after a
/// short warm-up; returns the summary and how many answers differed from
/// `expected`.
fn time_calls<I, R: PartialEq>(
    inputs: &[I],
    iterations: usize,
    expected: &[R],
    mut call: impl FnMut(&I) -> R,
) -> (Summary, usize) {
    for input in inputs.iter().take(16) {
        std::hint::black_box(call(input));
    }
    let mut samples = Vec::with_capacity(iterations);
    let mut mismatches = 0;
    for i in 0..iterations {
        let k = i % inputs.len();
        let start = Instant::now();
        let out = std::hint::black_box(call(&inputs[k]));
        samples.push(start.elapsed());
        mismatches += usize::from(out != expected[k]);
    }
    (summarize(samples), mismatches)
}

struct Row {
    kind: &'static str,
    batch: usize,
    native: Summary,
    wasm: Summary,
    /// The host's validation of the native answer alone (part of `wasm`).
    checks: Summary,
    mismatches: usize,
}

/// Times `check(k)` for every input index in turn (the validation share of a
/// Wasm call; for `pick-victims` and `plan` it includes cloning the answer,
/// which validation consumes).
fn time_checks(n: usize, iterations: usize, mut check: impl FnMut(usize) -> bool) -> Summary {
    let idx: Vec<usize> = (0..n).collect();
    let ok = vec![true; n];
    time_calls(&idx, iterations, &ok, |&k| check(k)).0
}

fn plugin_path(given: &Option<PathBuf>, crate_name: &str) -> anyhow::Result<PathBuf> {
    match given {
        Some(p) => Ok(p.clone()),
        None => synth::built_plugin(crate_name).map_err(anyhow::Error::msg),
    }
}

/// The settings `bench plugins` takes; large components compile for
/// seconds, so `--plugin-cache-dir` pays off here.
pub struct BenchPluginSettings;
impl Group for BenchPluginSettings {
    const NAMES: Option<&'static [&'static str]> =
        Some(&["scheduler", "evictor", "sampler", "plugin_cache_dir"]);
    const SHOWN_DEFAULTS: &'static [(&'static str, &'static str)] = &[
        ("scheduler", "the built minisgl-fcfs-scheduler"),
        ("evictor", "the built minisgl-lru-evictor"),
        ("sampler", "the built minisgl-default-sampler"),
    ];
    const LOCAL_ALIASES: &'static [(&'static str, Alias)] =
        &[("plugin_cache_dir", Alias::flag("--cache-dir"))];
}

pub fn run(args: BenchPluginsArgs) -> anyhow::Result<()> {
    super::init_warnings();
    let settings = args.settings.config()?;
    if args.iterations == 0 || args.batches.is_empty() {
        bail!(
            "--iterations and --batches must be non-empty (got {} and {:?})",
            args.iterations,
            args.batches
        );
    }
    let cfg = PluginConfig {
        scheduler: Some(plugin_path(&settings.scheduler, "minisgl-fcfs-scheduler")?),
        evictor: Some(plugin_path(&settings.evictor, "minisgl-lru-evictor")?),
        sampler: Some(plugin_path(&settings.sampler, "minisgl-default-sampler")?),
        // Generous: a benchmark measures, it does not police.
        deadlines: Deadlines::all(Duration::from_secs(1)),
        cache_dir: settings.plugin_cache_dir.clone(),
        ..PluginConfig::default()
    };
    let set = PluginSet::load(&cfg).context("loading the plugins to benchmark")?;
    const DISTINCT_INPUTS: usize = 64;
    let mut rows = Vec::new();
    for &batch in &args.batches {
        let mut rng = ChaCha8Rng::seed_from_u64(args.seed ^ batch as u64);

        let inputs: Vec<_> = (0..DISTINCT_INPUTS)
            .map(|_| synth::schedule_input(&mut rng, batch, true))
            .collect();
        let expected: Vec<_> = inputs
            .iter()
            .map(|i| Fcfs.schedule(&i.waiting, &i.running, &i.budget))
            .collect();
        let (native, _) = time_calls(&inputs, args.iterations, &expected, |i| {
            Fcfs.schedule(&i.waiting, &i.running, &i.budget)
        });
        let (wasm, mismatches) = time_calls(&inputs, args.iterations, &expected, |i| {
            set.schedule(&i.waiting, &i.running, &i.budget)
        });
        let checks = time_checks(inputs.len(), args.iterations, |k| {
            let i = &inputs[k];
            validate::schedule(&expected[k], &i.waiting, &i.running, &i.budget).is_ok()
        });
        rows.push(Row {
            kind: "schedule",
            batch,
            native,
            wasm,
            checks,
            mismatches,
        });

        let inputs: Vec<_> = (0..DISTINCT_INPUTS)
            .map(|_| synth::evict_input(&mut rng, batch, true))
            .collect();
        let expected: Vec<_> = inputs.iter().map(|i| Lru.pick_victims(&i.0, i.1)).collect();
        let (native, _) = time_calls(&inputs, args.iterations, &expected, |i| {
            Lru.pick_victims(&i.0, i.1)
        });
        let (wasm, mismatches) = time_calls(&inputs, args.iterations, &expected, |i| {
            set.pick_victims(&i.0, i.1)
        });
        let checks = time_checks(inputs.len(), args.iterations, |k| {
            validate::victims(expected[k].clone(), &inputs[k].0, inputs[k].1).is_ok()
        });
        rows.push(Row {
            kind: "pick-victims",
            batch,
            native,
            wasm,
            checks,
            mismatches,
        });

        let vocab = args.vocab;
        let inputs: Vec<_> = (0..DISTINCT_INPUTS)
            .map(|_| synth::sample_input(&mut rng, batch, true, vocab))
            .collect();
        let expected: Vec<_> = inputs
            .iter()
            .map(|r| DefaultSampler.plan(r, vocab))
            .collect();
        let (native, _) = time_calls(&inputs, args.iterations, &expected, |r: &Vec<_>| {
            DefaultSampler.plan(r, vocab)
        });
        let (wasm, mismatches) = time_calls(&inputs, args.iterations, &expected, |r: &Vec<_>| {
            set.plan(r, vocab)
        });
        let checks = time_checks(inputs.len(), args.iterations, |k| {
            validate::plans(expected[k].clone(), &inputs[k], vocab).is_ok()
        });
        rows.push(Row {
            kind: "plan",
            batch,
            native,
            wasm,
            checks,
            mismatches,
        });

        let inputs: Vec<_> = (0..DISTINCT_INPUTS)
            .map(|_| synth::candidate_input(&mut rng, batch, true, vocab))
            .collect();
        let expected: Vec<_> = inputs.iter().map(|l| DefaultSampler.pick(l)).collect();
        let (native, _) = time_calls(&inputs, args.iterations, &expected, |l: &Vec<_>| {
            DefaultSampler.pick(l)
        });
        let (wasm, mismatches) = time_calls(&inputs, args.iterations, &expected, |l: &Vec<_>| {
            set.pick(l)
        });
        let checks = time_checks(inputs.len(), args.iterations, |k| {
            validate::picks(&expected[k], &inputs[k]).is_ok()
        });
        rows.push(Row {
            kind: "pick",
            batch,
            native,
            wasm,
            checks,
            mismatches,
        });
    }

    println!(
        "{:<13} {:>5} {:>12} {:>12} {:>12} {:>12} {:>9} {:>9} {:>12} {:>8}",
        "call",
        "batch",
        "native p50",
        "native p99",
        "wasm p50",
        "wasm p99",
        "p50 ratio",
        "p99 ratio",
        "checks p50",
        "differ"
    );
    for r in &rows {
        println!(
            "{:<13} {:>5} {:>10.2}us {:>10.2}us {:>10.2}us {:>10.2}us {:>8.1}x {:>8.1}x {:>10.2}us {:>8}",
            r.kind,
            r.batch,
            r.native.median_us,
            r.native.p99_us,
            r.wasm.median_us,
            r.wasm.p99_us,
            r.wasm.median_us / r.native.median_us.max(1e-3),
            r.wasm.p99_us / r.native.p99_us.max(1e-3),
            r.checks.median_us,
            r.mismatches,
        );
    }
    println!(
        "({} calls per cell, {DISTINCT_INPUTS} distinct seeded inputs; wasm = through PluginSet: \
         conversion + sandboxed call + validation; checks = the validation share; \
         differ = calls whose answer differs from the built-in's)",
        args.iterations
    );
    let failures: u64 = set.stats().iter().map(|s| s.failures.total()).sum();
    if failures > 0 {
        bail!(
            "{failures} plugin calls failed (answered by the built-in, so their timings are \
             the built-in's; `plugin check` shows the first): {:?}",
            set.stats()
        );
    }
    Ok(())
}
