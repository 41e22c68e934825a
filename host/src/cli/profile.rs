//! `minisgl-host profile`: measure a device's step times on a grid of decode
//! batches and prefill chunks, fit the simulator's cost model, and write a
//! profile file (JSON) for `compare --backend sim --profile FILE`.
//!
//! The CPU and CUDA paths are the same code ([`minisgl::sim::measure`]) over a
//! different runner.
//!
//! `--refit PROFILE --steps FILE...` measures nothing: it fits PROFILE's model
//! again on its points plus the steps a real replay logged
//! (`compare --backend cuda --out DIR` writes DIR/steps-POLICY.csv), and
//! prints the model's error per step class before and after.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};

use super::settings::{Group, SettingArgs};
use minisgl::model::placement::build_runner_with;
use minisgl::model::runner::{DeviceKind, RunnerOptions};
use minisgl::model::{load, load_random};
use minisgl::sim::measure::{measure, Grid};
use minisgl::sim::{step_log, Profile, StepRecord};

#[derive(clap::Args, Debug, Clone)]
pub struct ProfileArgs {
    /// Model, device (cpu or cuda) and page size, spelled as for serving.
    #[command(flatten)]
    pub settings: SettingArgs<ProfileSettings>,
    /// Random weights of the shape in this config.json (or its directory).
    #[arg(long, value_name = "CONFIG", conflicts_with = "model")]
    pub random_weights: Option<PathBuf>,
    /// Profile file to write.
    #[arg(long)]
    pub out: PathBuf,
    /// Name of the model in the profile [default: the directory's name].
    #[arg(long)]
    pub name: Option<String>,
    /// Decode batch sizes [default: 1,16,64,128,256 on cuda; 1,4,16 on cpu].
    #[arg(long, value_delimiter = ',')]
    pub decode_batches: Vec<u64>,
    /// Decode context lengths [default: 256,2048 on cuda; 32,256 on cpu].
    #[arg(long, value_delimiter = ',')]
    pub decode_contexts: Vec<u64>,
    /// Prefill chunk sizes [default: 128,512,2048,8192 on cuda; 16,64,256 on cpu].
    #[arg(long, value_delimiter = ',')]
    pub prefill_tokens: Vec<u64>,
    /// Cached prefix before a chunk [default: 0,4096 on cuda; 0,200 on cpu].
    #[arg(long, value_delimiter = ',')]
    pub prefill_contexts: Vec<u64>,
    /// Timed steps per point, run back to back as the engine's worker runs
    /// them (their mean is kept).
    #[arg(long, default_value_t = 4)]
    pub reps: usize,
    /// KV pages the simulator uses by default [default: the engine's memory
    /// budget on this device].
    #[arg(long)]
    pub kv_pages: Option<u32>,
    /// What to call the device in the profile (e.g. the GPU's name).
    #[arg(long)]
    pub device_label: Option<String>,
    /// Free-form note stored in the profile (commit, date, conditions).
    #[arg(long, default_value = "")]
    pub note: String,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Refit this profile instead of measuring (needs --steps).
    #[arg(long, value_name = "PROFILE", requires = "steps")]
    pub refit: Option<PathBuf>,
    /// Steps logged by a real replay (steps-POLICY.csv), for --refit.
    #[arg(long, value_name = "CSV", requires = "refit")]
    pub steps: Vec<PathBuf>,
}

/// `--refit`: the profile's model fitted again with a replay's steps.
fn refit(args: &ProfileArgs, path: &std::path::Path) -> anyhow::Result<()> {
    let prof = Profile::load(path)?;
    let mut steps = Vec::new();
    let mut names = Vec::new();
    for f in &args.steps {
        let text = std::fs::read_to_string(f)
            .with_context(|| format!("reading --steps {}", f.display()))?;
        let s = step_log::parse_csv(&text)
            .map_err(|e| anyhow::anyhow!("--steps {}: {e}", f.display()))?;
        steps.extend(s);
        names.push(f.display().to_string());
    }
    let note = format!(
        "refitted on {} replay steps ({}){}",
        steps.len(),
        names.join(", "),
        if args.note.is_empty() {
            String::new()
        } else {
            format!(", {}", args.note)
        }
    );
    let new = prof.refit_with_steps(&steps, &note)?;
    let recs: Vec<StepRecord> = steps
        .iter()
        .map(|&(shape, secs)| StepRecord {
            step_us: (secs * 1e6).round() as u64,
            shape,
            ..StepRecord::default()
        })
        .collect();
    println!(
        "model error on the {} steps, before:\n{}\nafter:\n{}",
        recs.len(),
        step_log::model_error_table(&recs, &prof.model_fit),
        step_log::model_error_table(&recs, &new.model_fit)
    );
    println!(
        "model error on the profile's own points: {:.1}% before, {:.1}% after",
        100.0 * prof.reproduction_error(),
        100.0 * new.reproduction_error()
    );
    std::fs::write(&args.out, new.to_json() + "\n")
        .with_context(|| format!("writing {}", args.out.display()))?;
    println!("wrote {}", args.out.display());
    Ok(())
}

/// The settings `profile` takes.
pub struct ProfileSettings;
impl Group for ProfileSettings {
    const NAMES: Option<&'static [&'static str]> = Some(&["model", "device", "page_size"]);
}

pub fn run(args: ProfileArgs) -> anyhow::Result<()> {
    if let Some(p) = &args.refit {
        return refit(&args, p);
    }
    super::init_warnings();
    let cfg = args.settings.config()?;
    let t0 = Instant::now();
    let (model, source) = match (&cfg.model, &args.random_weights) {
        (Some(p), None) => (
            load(p).with_context(|| format!("loading --model {}", p.display()))?,
            p,
        ),
        (None, Some(p)) => (
            load_random(p, args.seed)
                .with_context(|| format!("building --random-weights {}", p.display()))?,
            p,
        ),
        _ => bail!("give exactly one of --model PATH or --random-weights CONFIG"),
    };
    if cfg.device == DeviceKind::Auto {
        bail!("--device must be cpu or cuda, got auto");
    }
    let mut grid = if cfg.device == DeviceKind::Cuda {
        Grid::gpu()
    } else {
        Grid::cpu()
    };
    let or = |v: &Vec<u64>, d: Vec<u64>| if v.is_empty() { d } else { v.clone() };
    grid.decode_batches = or(&args.decode_batches, grid.decode_batches);
    grid.decode_contexts = or(&args.decode_contexts, grid.decode_contexts);
    grid.prefill_tokens = or(&args.prefill_tokens, grid.prefill_tokens);
    grid.prefill_contexts = or(&args.prefill_contexts, grid.prefill_contexts);
    grid.reps = args.reps.max(1);
    let c = &model.config;
    let ctx = c.max_position_embeddings() as u64;
    let too_long = grid
        .decode_contexts
        .iter()
        .copied()
        .chain(
            grid.prefill_tokens
                .iter()
                .flat_map(|n| grid.prefill_contexts.iter().map(move |c| c + n)),
        )
        .find(|&l| l >= ctx);
    if let Some(l) = too_long {
        bail!("the grid reaches {l} tokens, beyond the model's {ctx} positions");
    }
    // The engine's default pool on this device, read before our runner
    // takes memory.
    let kv_pages = match args.kv_pages {
        Some(n) => n,
        None => minisgl::engine::builder::kv_pages(c, cfg.device, cfg.page_size, None, 1)?,
    };
    let pages = grid.pages_needed(cfg.page_size);
    let mut runner = build_runner_with(
        &model,
        cfg.device,
        pages,
        cfg.page_size,
        &RunnerOptions::default(),
    )
    .with_context(|| format!("building the {:?} runner with {pages} KV pages", cfg.device))?;
    let device_name = args
        .device_label
        .clone()
        .unwrap_or_else(|| match cfg.device {
            DeviceKind::Cuda => "cuda".into(),
            _ => format!(
                "cpu ({} threads)",
                std::thread::available_parallelism().map_or(1, |n| n.get())
            ),
        });
    eprintln!(
        "profile: {} on {device_name}, {} points ({:.1} s to load)",
        source.display(),
        grid.points().len(),
        t0.elapsed().as_secs_f64()
    );
    let points = measure(runner.as_mut(), &grid, &mut |i, n| {
        eprint!("\r  point {i}/{n}");
    })?;
    eprintln!();
    let name = args.name.clone().unwrap_or_else(|| {
        let p = if source.is_dir() {
            source.as_path()
        } else {
            source.parent().unwrap_or(source)
        };
        p.file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    });
    let device = if cfg.device == DeviceKind::Cuda {
        "cuda"
    } else {
        "cpu"
    };
    let prof = Profile::fit(
        device,
        &device_name,
        &name,
        cfg.page_size,
        kv_pages,
        &args.note,
        points,
    )?;
    std::fs::write(&args.out, prof.to_json() + "\n")
        .with_context(|| format!("writing {}", args.out.display()))?;
    println!(
        "{:>6} {:>8} {:>8} {:>8} {:>10} {:>10} {:>7}",
        "decode", "context", "prefill", "context", "measured", "model", "error"
    );
    for (p, pred, err) in prof.reproduction() {
        println!(
            "{:>6} {:>8} {:>8} {:>8} {:>8.3}ms {:>8.3}ms {:>6.1}%",
            p.decode_batch,
            p.decode_context,
            p.prefill_tokens,
            p.prefill_context,
            p.seconds * 1e3,
            pred * 1e3,
            100.0 * err
        );
    }
    println!(
        "wrote {} ({} points, model error ≤ {:.1}%, {:.1} s)",
        args.out.display(),
        prof.points.len(),
        100.0 * prof.reproduction_error(),
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
