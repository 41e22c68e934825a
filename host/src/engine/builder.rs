//! The one place that turns settings into a running engine: plugins, model,
//! KV sizing, runner, loop thread. `serve` and `shell` start from a whole
//! [`Config`] with [`start`]; tools that vary one setting across runs
//! (`bench offline`, `generate`) use the same pieces ([`kv_pages`],
//! [`load_plugins`], [`engine_config`]) so a rule such as how the KV budget
//! becomes pages exists once.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::{try_spawn, CacheMode, EngineConfig, EngineHandle};
use crate::config::Config;
use crate::kv::pool::{bytes_per_page, pages_for_budget};
use crate::model::config::ModelConfig;
use crate::model::placement::{auto_kv_budget, build_runner_with};
use crate::model::runner::{DeviceKind, RunnerOptions};
use crate::model::Tokenizer;
use crate::plugin::{Deadlines, PluginConfig, PluginKind, PluginSet};

/// A running engine and what front ends need beside it.
pub struct Assembled {
    pub engine: EngineHandle,
    pub tokenizer: Tokenizer,
    /// The model's shape (for `/model_info` and friends).
    pub model: ModelConfig,
    /// Where the model came from.
    pub source: PathBuf,
    /// `cpu` or the GPU's name.
    pub device_name: &'static str,
    pub num_pages: u32,
}

/// Pages of `page_size` tokens that a KV budget holds for `model` on
/// `device`, split `tp` ways. `budget_bytes` is per rank (each GPU's pool
/// holds its share of the KV heads for every page); `None` sizes from free
/// device memory (CUDA: the least free of the `tp` GPUs, after that rank's
/// shard of the weights) or the CPU default (see [`auto_kv_budget`]).
pub fn kv_pages(
    model: &ModelConfig,
    device: DeviceKind,
    page_size: u32,
    budget_bytes: Option<u64>,
    tp: usize,
) -> anyhow::Result<u32> {
    let tp = tp.max(1);
    let per_page = bytes_per_page(
        page_size,
        model.num_layers() as u32,
        (model.num_kv_heads() / tp).max(1) as u32,
        model.head_dim() as u32,
        device.kv_elem_bytes(),
    );
    let budget = match budget_bytes {
        Some(b) => b,
        None => auto_kv_budget(device, rank_weight_bytes(model, tp), tp)
            .context("sizing the KV cache from device memory (set kv_memory_mb to choose)")?,
    };
    pages_for_budget(budget, per_page).with_context(|| format!("KV budget {} MiB", budget >> 20))
}

/// bf16 bytes of one rank's weights: the split matrices' share plus the
/// replicated embedding and LM head (see `model::tp`).
fn rank_weight_bytes(model: &ModelConfig, tp: usize) -> u64 {
    let total = model.num_params() as u64;
    let tied = if model.tie_word_embeddings() { 1 } else { 2 };
    let replicated = (model.vocab_size() * model.hidden_size() * tied) as u64;
    2 * (total.saturating_sub(replicated) / tp as u64 + replicated)
}

/// The plugin set `cfg` names: typed slots first, then components whose
/// kind is read from the component itself; a kind given twice is an error.
pub fn load_plugins(cfg: &Config) -> anyhow::Result<PluginSet> {
    let mut plugin_cfg = PluginConfig {
        scheduler: cfg.scheduler.clone(),
        evictor: cfg.evictor.clone(),
        sampler: cfg.sampler.clone(),
        cache_dir: cfg.plugin_cache_dir.clone(),
        ..PluginConfig::default()
    };
    if let Some(ms) = cfg.plugin_deadline_ms {
        plugin_cfg.deadlines = Deadlines::all(Duration::from_millis(ms));
    }
    let plugins = PluginSet::load(&plugin_cfg).context("loading plugins")?;
    load_untyped(&plugins, &plugin_cfg, &cfg.plugin)?;
    Ok(plugins)
}

/// Loads the `--plugin` components into the slots of the worlds they
/// export. Each is compiled once (through the compile cache) and its kind
/// read from the compiled component.
fn load_untyped(plugins: &PluginSet, cfg: &PluginConfig, paths: &[PathBuf]) -> anyhow::Result<()> {
    let mut taken: Vec<(PluginKind, PathBuf)> = PluginKind::ALL
        .iter()
        .filter_map(|&k| cfg.path(k).map(|p| (k, p.to_owned())))
        .collect();
    for p in paths {
        let report = plugins
            .swap_inferred(p)
            .with_context(|| format!("loading plugin {}", p.display()))?;
        if let Some((kind, prev)) = taken.iter().find(|(k, _)| *k == report.kind) {
            bail!(
                "two {kind} plugins given: {} and {}",
                prev.display(),
                p.display()
            );
        }
        taken.push((report.kind, p.clone()));
    }
    Ok(())
}

/// The loop settings `cfg` gives.
pub fn engine_config(cfg: &Config) -> EngineConfig {
    EngineConfig {
        num_pages: None,
        max_running: cfg.max_running,
        max_prefill_tokens: cfg.max_prefill_tokens,
        max_waiting: cfg.max_waiting as usize,
        max_context: cfg.max_context,
        cache: CacheMode::Radix,
        overlap: cfg.overlap,
        ..EngineConfig::default()
    }
}

/// Loads the plugins and the model, sizes the KV cache and starts the
/// engine. The model must carry a tokenizer (front ends speak text).
pub fn start(cfg: &Config) -> anyhow::Result<Assembled> {
    let Some(model_path) = &cfg.model else {
        bail!(
            "no model given: pass --model PATH (an HF directory or a .gguf file), set MINISGL_MODEL, \
             or put `model = \"...\"` in the --config file (scripts/fetch_default_model.sh fetches \
             the default SmolLM2-135M-Instruct)"
        );
    };
    let plugins = load_plugins(cfg)?;
    let t0 = Instant::now();
    tracing::info!(model = %model_path.display(), device = %cfg.device, "loading model");
    let mut loaded = crate::model::load(model_path)
        .with_context(|| format!("loading model {}", model_path.display()))?;
    let Some(tokenizer) = loaded.tokenizer.take() else {
        bail!(
            "{} has no tokenizer; the server needs one to turn text into tokens",
            model_path.display()
        );
    };
    let device = cfg.device;
    let num_pages = kv_pages(
        &loaded.config,
        device,
        cfg.page_size,
        cfg.kv_memory_mb.map(|mb| mb << 20),
        cfg.tp as usize,
    )?;
    let runner_opts = RunnerOptions {
        cuda_graph_max_bs: cfg.cuda_graph_max_bs as usize,
        tp: cfg.tp as usize,
    };
    let runner = build_runner_with(&loaded, device, num_pages, cfg.page_size, &runner_opts)
        .context("building the model runner")?;
    let device_name = runner.device_name();
    // The host copy of the weights is not needed once the runner holds them.
    let (model, source) = (loaded.config.clone(), loaded.source.clone());
    drop(loaded);
    let eos = tokenizer.eos_ids();
    let engine = try_spawn(runner, Arc::new(plugins), engine_config(cfg), eos)
        .map_err(|e| anyhow::anyhow!("starting the engine: {e}"))?;
    tracing::info!(
        model = %model_path.display(),
        device = device_name,
        kv_pages = num_pages,
        page_size = cfg.page_size,
        max_context = engine.max_context(),
        load_s = format!("{:.1}", t0.elapsed().as_secs_f64()),
        "engine ready"
    );
    Ok(Assembled {
        engine,
        tokenizer,
        model,
        source,
        device_name,
        num_pages,
    })
}
