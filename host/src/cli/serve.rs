//! `minisgl-host [serve] --model PATH [flags]`: the OpenAI-compatible server
//! (the default action).
//!
//! Settings come from, lowest precedence first: built-in defaults,
//! `MINISGL_*` environment variables, the `--config` TOML file, then these
//! flags (see `minisgl::config`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;

use super::settings::{AllSettings, SettingArgs};
use minisgl::config::{Config, ConfigLayer};
use minisgl::engine::EngineHandle;
use minisgl::model::Tokenizer;
use minisgl::server::protocol::Limits;
use minisgl::server::worker_meta::WorkerMeta;
use minisgl::server::AppState;

#[derive(clap::Args, Debug, Clone, Default)]
pub struct ServeArgs {
    /// TOML config file (flags override it; it overrides MINISGL_* variables).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub settings: SettingArgs<AllSettings>,
    /// Chat in the terminal instead of serving HTTP.
    #[arg(long)]
    pub shell: bool,
    /// Print the resolved configuration as JSON and exit.
    #[arg(long)]
    pub print_config: bool,
}

impl ServeArgs {
    /// Defaults < environment < config file < flags. Old spellings are
    /// logged, so logging starts here.
    pub fn resolve(&self) -> anyhow::Result<Config> {
        super::init_logging();
        Ok(Config::build(
            ConfigLayer::from_env()?,
            self.config.as_deref(),
            self.settings.layer()?,
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
    let a = minisgl::engine::builder::start(cfg)?;
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
        let loading_server = tokio::spawn(minisgl::server::conn::serve_until(
            loading,
            minisgl::server::probes::loading_router(),
            async {
                let _ = loaded_rx.await;
            },
        ));
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
        // Signals are caught from here on, before the line that says the server is up.
        let shutdown = minisgl::server::shutdown_signal();
        // The test harness and scripts wait for this exact line.
        tracing::info!("listening on http://{local}");
        eprintln!(
            "minisgl: serving {} on http://{local}",
            state.limits.model_name
        );
        minisgl::server::serve(listener, state, shutdown).await?;
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(())
}
