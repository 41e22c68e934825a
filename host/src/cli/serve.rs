//! `minisgl-host [serve] --model PATH [flags]`: the OpenAI-compatible server
//! (the default action).
//!
//! Settings come from, lowest precedence first: built-in defaults,
//! `MINISGL_*` environment variables, the `--config` TOML file, then these
//! flags (see `crate::config`).

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};

use crate::config::{Config, ConfigLayer, PluginsLayer};
use crate::engine::{try_spawn, CacheMode, EngineConfig, EngineHandle};
use crate::model::runner::{build_runner_with, DeviceKind, RunnerOptions};
use crate::model::Tokenizer;
use crate::plugin::{Deadlines, PluginConfig, PluginKind, PluginSet};
use crate::server::compat::WorkerMeta;
use crate::server::protocol::Limits;
use crate::server::AppState;

#[derive(clap::Args, Debug, Clone, Default)]
pub struct ServeArgs {
    /// TOML config file (flags override it; it overrides MINISGL_* variables).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address to bind [default: 127.0.0.1].
    #[arg(long)]
    pub host: Option<std::net::IpAddr>,
    /// Port [default: 8000].
    #[arg(long)]
    pub port: Option<u16>,
    /// HF model directory or .gguf file.
    #[arg(long, value_name = "PATH")]
    pub model: Option<PathBuf>,
    /// Model name clients send [default: the model's file or folder name].
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// cpu, cuda or auto [default: cpu].
    #[arg(long)]
    pub device: Option<String>,
    /// Plugin component(s) whose kind is read from the world they implement.
    #[arg(long = "plugin", value_name = "WASM")]
    pub plugins: Vec<PathBuf>,
    /// Scheduler plugin component.
    #[arg(long, value_name = "WASM")]
    pub scheduler: Option<PathBuf>,
    /// Evictor plugin component.
    #[arg(long, value_name = "WASM")]
    pub evictor: Option<PathBuf>,
    /// Sampler plugin component.
    #[arg(long, value_name = "WASM")]
    pub sampler: Option<PathBuf>,
    /// Tokens per KV page [default: 16].
    #[arg(long)]
    pub page_size: Option<u32>,
    /// KV cache memory in MiB [default: 1024].
    #[arg(long, value_name = "MIB")]
    pub kv_memory_mb: Option<u64>,
    /// Most requests decoding at once [default: 256].
    #[arg(long)]
    pub max_running: Option<u32>,
    /// Prefill token budget per step (chunked prefill) [default: 8192].
    #[arg(long)]
    pub chunk_size: Option<u32>,
    /// Longest prompt + completion [default: what the model and KV allow].
    #[arg(long)]
    pub max_context: Option<u32>,
    /// Run the engine steps in series (no overlap scheduling).
    #[arg(long)]
    pub no_overlap: bool,
    /// Largest decode batch replayed from a CUDA graph; 0 disables graphs [default: 256].
    #[arg(long, value_name = "N")]
    pub cuda_graph_max_bs: Option<u32>,
    /// Most waiting requests; beyond it requests get 429 [default: 1024].
    #[arg(long)]
    pub max_waiting: Option<u32>,
    /// Bearer token for /admin/* (without it admin is loopback-only).
    #[arg(long)]
    pub admin_token: Option<String>,
    /// Seconds in-flight requests get after SIGINT/SIGTERM [default: 30].
    #[arg(long, value_name = "SECONDS")]
    pub shutdown_timeout: Option<u64>,
    /// max_tokens when a request gives none [default: 256].
    #[arg(long)]
    pub default_max_tokens: Option<u32>,
    /// Per-call plugin deadline, in milliseconds of the plugin's own CPU time.
    #[arg(long, value_name = "MS")]
    pub plugin_deadline_ms: Option<u64>,
    /// Cache compiled plugins in this folder.
    #[arg(long, value_name = "DIR")]
    pub plugin_cache_dir: Option<PathBuf>,
    /// Chat in the terminal instead of serving HTTP.
    #[arg(long)]
    pub shell: bool,
    /// Print the resolved configuration as JSON and exit.
    #[arg(long)]
    pub print_config: bool,
}

impl ServeArgs {
    /// The command-line layer of the configuration.
    pub fn layer(&self) -> ConfigLayer {
        ConfigLayer {
            host: self.host,
            port: self.port,
            model: self.model.clone(),
            served_model_name: self.served_model_name.clone(),
            device: self.device.clone(),
            page_size: self.page_size,
            kv_memory_mb: self.kv_memory_mb,
            max_running: self.max_running,
            chunk_size: self.chunk_size,
            max_context: self.max_context,
            plugin_deadline_ms: self.plugin_deadline_ms,
            plugin_cache_dir: self.plugin_cache_dir.clone(),
            overlap: self.no_overlap.then_some(false),
            cuda_graph_max_bs: self.cuda_graph_max_bs,
            max_waiting: self.max_waiting,
            admin_token: self.admin_token.clone(),
            shutdown_timeout_s: self.shutdown_timeout,
            default_max_tokens: self.default_max_tokens,
            plugins: PluginsLayer {
                scheduler: self.scheduler.clone(),
                evictor: self.evictor.clone(),
                sampler: self.sampler.clone(),
                extra: self.plugins.clone(),
            },
        }
    }

    /// Defaults < environment < config file < flags.
    pub fn resolve(&self) -> anyhow::Result<Config> {
        Ok(Config::build(
            ConfigLayer::from_env()?,
            self.config.as_deref(),
            self.layer(),
        )?)
    }
}

/// A started engine and what the front ends need beside it.
pub struct Started {
    pub engine: EngineHandle,
    pub tokenizer: Arc<Tokenizer>,
    pub limits: Limits,
    /// What `/model_info` and `/server_info` report about the model.
    pub meta: WorkerMeta,
}

/// Loads the `--plugin` components into the slots of the worlds they
/// export. Each is compiled once (through the compile cache) and its kind
/// read from the compiled component; a kind given twice is an error.
fn load_untyped(
    plugins: &PluginSet,
    cfg: &PluginConfig,
    paths: &[std::path::PathBuf],
) -> anyhow::Result<()> {
    let mut taken: Vec<(PluginKind, std::path::PathBuf)> = PluginKind::ALL
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

/// Loads the model and plugins and starts the engine.
pub fn start_engine(cfg: &Config) -> anyhow::Result<Started> {
    let Some(model_path) = &cfg.model else {
        bail!(
            "no model given: pass --model PATH (an HF directory or a .gguf file), set MINISGL_MODEL, \
             or put `model = \"...\"` in the --config file (scripts/fetch_default_model.sh fetches \
             the default SmolLM2-135M-Instruct)"
        );
    };
    let mut plugin_cfg = PluginConfig {
        scheduler: cfg.plugins.get(&PluginKind::Scheduler).cloned(),
        evictor: cfg.plugins.get(&PluginKind::Evictor).cloned(),
        sampler: cfg.plugins.get(&PluginKind::Sampler).cloned(),
        cache_dir: cfg.plugin_cache_dir.clone(),
        ..PluginConfig::default()
    };
    if let Some(ms) = cfg.plugin_deadline_ms {
        plugin_cfg.deadlines = Deadlines::all(Duration::from_millis(ms));
    }
    let plugins = PluginSet::load(&plugin_cfg).context("loading plugins")?;
    load_untyped(&plugins, &plugin_cfg, &cfg.plugins_untyped)?;

    let t0 = std::time::Instant::now();
    tracing::info!(model = %model_path.display(), device = %cfg.device, "loading model");
    let mut loaded = crate::model::load(model_path)
        .with_context(|| format!("loading model {}", model_path.display()))?;
    let Some(tokenizer) = loaded.tokenizer.take() else {
        bail!(
            "{} has no tokenizer; the server needs one to turn text into tokens",
            model_path.display()
        );
    };
    let device: DeviceKind = cfg.device.parse().map_err(anyhow::Error::msg)?;
    let elem_bytes = u64::from(crate::kv::pool::kv_elem_bytes(device));
    let per_page =
        loaded.config.kv_elems_per_token() as u64 * elem_bytes * u64::from(cfg.page_size);
    let kv_budget = match cfg.kv_memory_mb {
        Some(mb) => mb << 20,
        None => crate::model::runner::auto_kv_budget(device, 2 * loaded.config.num_params() as u64)
            .context("sizing the KV cache from device memory (set kv_memory_mb to choose)")?,
    };
    let num_pages = crate::kv::pool::pages_for_budget(kv_budget, per_page)
        .with_context(|| format!("KV budget {} MiB", kv_budget >> 20))?;
    let runner_opts = RunnerOptions {
        cuda_graph_max_bs: cfg.cuda_graph_max_bs as usize,
    };
    let runner = build_runner_with(&loaded, device, num_pages, cfg.page_size, &runner_opts)
        .context("building the model runner")?;
    let device_name = runner.device_name();
    let meta = WorkerMeta::new(&loaded.config, &loaded.source, device_name);
    drop(loaded);
    let engine_cfg = EngineConfig {
        num_pages: None,
        max_running: cfg.max_running,
        max_prefill_tokens: cfg.chunk_size,
        max_waiting: cfg.max_waiting as usize,
        max_context: cfg.max_context,
        cache: CacheMode::Radix,
        overlap: cfg.overlap,
        ..EngineConfig::default()
    };
    let eos = tokenizer.eos_ids();
    let engine = try_spawn(runner, Arc::new(plugins), engine_cfg, eos)
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
    let limits = Limits {
        model_name: cfg.model_name(),
        vocab_size: engine.vocab_size(),
        max_context: engine.max_context(),
        default_max_tokens: cfg.default_max_tokens,
    };
    Ok(Started {
        engine,
        tokenizer: Arc::new(tokenizer),
        limits,
        meta,
    })
}

/// Logs to stderr; `RUST_LOG` overrides the `info` default. Colour only on a
/// terminal: redirected logs (files, CI) stay plain text.
pub fn init_logging() {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let cfg = args.resolve()?;
    if args.print_config {
        println!("{}", serde_json::to_string_pretty(&cfg)?);
        return Ok(());
    }
    if args.shell {
        return super::shell::run_with(&cfg, &super::shell::ChatOptions::default());
    }
    init_logging();
    // Bind first: a port in use is reported before the model loads, not after.
    let addr = SocketAddr::new(cfg.host, cfg.port);
    let std_listener = std::net::TcpListener::bind(addr)
        .with_context(|| format!("cannot listen on {addr} (--port / --host)"))?;
    std_listener
        .set_nonblocking(true)
        .context("making the listener non-blocking")?;
    let cfg = Arc::new(cfg);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(std_listener)
            .context("handing the listener to the async runtime")?;
        let local = listener.local_addr()?;
        // Answer probes while loading (alive, not ready) on a second handle
        // of the same socket; the full application takes over once loaded.
        let socket = listener.into_std()?;
        let loading = tokio::net::TcpListener::from_std(socket.try_clone()?)?;
        let listener = tokio::net::TcpListener::from_std(socket)?;
        let (loaded_tx, loaded_rx) = tokio::sync::oneshot::channel::<()>();
        let loading_server = tokio::spawn(
            axum::serve(loading, crate::server::probes::loading_router())
                .with_graceful_shutdown(async {
                    let _ = loaded_rx.await;
                })
                .into_future(),
        );
        // Printed before loading so probes can be pointed at the port now;
        // `/ready` answers 503 until the "serving" line below.
        eprintln!("minisgl: loading {} on http://{local}", cfg.model_name());
        let load_cfg = cfg.clone();
        let started = tokio::task::spawn_blocking(move || start_engine(&load_cfg))
            .await
            .context("the loading task failed")??;
        let _ = loaded_tx.send(());
        let _ = loading_server.await;
        let state = AppState::new(started.engine, started.tokenizer, started.limits, cfg);
        let _ = state.worker.set(started.meta);
        // The test harness and scripts wait for this exact line.
        tracing::info!("listening on http://{local}");
        eprintln!(
            "minisgl: serving {} on http://{local}",
            state.limits.model_name
        );
        crate::server::serve(listener, state, crate::server::shutdown_signal()).await?;
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(())
}
