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

use anyhow::Context;

use crate::config::{Config, ConfigLayer, PluginsLayer};
use crate::engine::EngineHandle;
use crate::model::Tokenizer;
use crate::server::protocol::Limits;
use crate::server::worker_meta::WorkerMeta;
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
    /// Tensor-parallel ranks [default: 1]. On the CPU, N > 1 splits the model
    /// across N threads (for testing the sharded math); CUDA needs the NCCL
    /// communicator, not built yet.
    #[arg(long, value_name = "N")]
    pub tp: Option<u32>,
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
            tp: self.tp,
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

/// Starts the engine from `cfg` and adds what the HTTP front end needs.
pub fn start_engine(cfg: &Config) -> anyhow::Result<Started> {
    let a = crate::engine::builder::start(cfg)?;
    let limits = Limits {
        model_name: cfg.model_name(),
        vocab_size: a.engine.vocab_size(),
        max_context: a.engine.max_context(),
        default_max_tokens: cfg.default_max_tokens,
    };
    Ok(Started {
        meta: WorkerMeta::new(&a.model, &a.source, a.device_name),
        engine: a.engine,
        tokenizer: Arc::new(a.tokenizer),
        limits,
    })
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let cfg = args.resolve()?;
    if args.print_config {
        println!("{}", serde_json::to_string_pretty(&cfg)?);
        return Ok(());
    }
    super::init_logging();
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
