//! OpenAI-compatible HTTP server.
//!
//! The server knows requests and streams, never tensors or pages: it parses
//! and validates requests ([`protocol`]), hands token ids to the engine,
//! turns the engine's token events back into text and stop-string matches
//! ([`sequence`], [`stop`]) and answers in OpenAI's JSON and SSE shapes
//! ([`openai`], [`native`]). Every error goes through one mapping to HTTP
//! status and body ([`error`]).
//!
//! Routes: `POST /v1/completions`, `POST /v1/chat/completions`,
//! `GET /v1/models`, `POST /generate`, `GET /health`, `GET /metrics`,
//! `GET /admin/plugins`, `POST|DELETE /admin/plugins/{kind}`; for routers and
//! Kubernetes ([`compat`], [`tokenize`], [`probes`]): `/server_info`,
//! `/model_info` (and their `get_` forms), `/get_load`, `/flush_cache`,
//! `/health_generate`, `/version`, `/tokenize`, `/detokenize`, the
//! `/render` endpoints, `/live` and `/ready`.

pub mod admin;
pub mod body;
pub mod client;
pub mod compat;
pub mod conn;
pub mod error;
pub mod fields;
pub mod metrics;
pub mod native;
pub mod openai;
pub mod probes;
pub mod protocol;
pub mod routes;
pub mod sequence;
pub mod state;
pub mod stop;
pub mod tokenize;
pub mod vllm_metrics;
pub mod worker_meta;

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;
use tokio::net::TcpListener;

pub use conn::HttpLimits;
pub use state::AppState;

/// Largest request body accepted (a 100k-token prompt as JSON ids fits).
pub const MAX_BODY_BYTES: usize = 8 << 20;

/// The application's routes, with request bodies read under `body_timeout`
/// (see [`body`]).
pub fn router(state: Arc<AppState>, body_timeout: Duration) -> Router {
    Router::new()
        .route("/v1/completions", post(openai::completions))
        .route("/v1/chat/completions", post(openai::chat_completions))
        .route("/v1/models", get(routes::models))
        .route("/generate", post(native::generate))
        .route("/health", get(routes::health))
        .route("/metrics", get(routes::metrics))
        .route("/admin/plugins", get(admin::list))
        .route(
            "/admin/plugins/{kind}",
            post(admin::swap).delete(admin::reset),
        )
        .merge(worker_routes())
        .fallback(routes::not_found)
        .method_not_allowed_fallback(routes::method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                body::bound_body(body_timeout, req, next)
            },
        ))
        .with_state(state)
}

/// The endpoints SGLang's and vLLM's routers and Kubernetes call on a worker.
fn worker_routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/server_info", get(compat::server_info))
        .route("/get_server_info", get(compat::server_info))
        .route("/model_info", get(compat::model_info))
        .route("/get_model_info", get(compat::model_info))
        .route("/get_load", get(compat::get_load))
        .route(
            "/flush_cache",
            get(compat::flush_cache).post(compat::flush_cache),
        )
        .route("/health_generate", get(compat::health_generate))
        .route("/version", get(compat::version))
        .route("/tokenize", post(tokenize::tokenize))
        .route("/detokenize", post(tokenize::detokenize))
        .route("/v1/completions/render", post(tokenize::render_completion))
        .route("/v1/chat/completions/render", post(tokenize::render_chat))
        .route("/live", get(probes::live))
        .route("/health/live", get(probes::live))
        .route("/ready", get(probes::ready))
        .route("/health/ready", get(probes::ready))
}

/// Serves until `shutdown` resolves, then drains: new requests (and
/// `/ready`) get 503 while in-flight ones get `config.shutdown_timeout_s` to
/// finish before the engine aborts them; the listener closes once nothing is
/// in flight; returns once every connection is closed and the engine has
/// stopped. Connections are bounded by [`HttpLimits::from_config`].
pub async fn serve(
    listener: TcpListener,
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = HttpLimits::from_config(&state.config);
    serve_with(listener, state, limits, shutdown).await
}

/// [`serve`] with explicit connection limits.
pub async fn serve_with(
    listener: TcpListener,
    state: Arc<AppState>,
    mut limits: HttpLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let fd_limit = conn::raise_fd_limit();
    let cap = conn::effective_cap(limits.max_connections, fd_limit);
    if cap < limits.max_connections {
        tracing::warn!(
            configured = limits.max_connections,
            cap,
            fd_limit,
            "connection cap lowered to fit the open-file limit"
        );
    }
    limits.max_connections = cap;
    tracing::info!(
        max_connections = cap,
        header_timeout_s = limits.header_timeout.as_secs_f64(),
        body_timeout_s = limits.body_timeout.as_secs_f64(),
        "connection limits"
    );
    let st = state.clone();
    let grace = Duration::from_secs(state.config.shutdown_timeout_s);
    let signal = async move {
        shutdown.await;
        st.shutting_down.store(true, Ordering::SeqCst);
        tracing::info!(
            grace_s = grace.as_secs(),
            "shutting down: no new requests; finishing in-flight ones"
        );
        let engine = st.engine.clone();
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            tracing::warn!("grace period over: aborting in-flight requests");
            let _ = tokio::task::spawn_blocking(move || engine.shutdown()).await;
        });
        // Keep the socket open while requests drain, so that probes see
        // `/ready` = 503 and requests that still arrive (a router or
        // Service that has not noticed yet) get a retryable 503 rather than
        // a refused connection; close it once nothing is in flight (the
        // grace timer above bounds the wait).
        while st.metrics.in_flight.load(Ordering::SeqCst) > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let app = router(state.clone(), limits.body_timeout);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        signal.await;
        let _ = stop_tx.send(true);
    });
    conn::accept_loop(listener, app, limits, stop_rx).await;
    let engine = state.engine.clone();
    let _ = tokio::task::spawn_blocking(move || engine.shutdown()).await;
    tracing::info!("server stopped");
    Ok(())
}

/// A future that resolves on SIGINT (Ctrl-C) or SIGTERM. The handlers are installed
/// by this call, not at the future's first poll: the server announces "serving"
/// before its accept loop polls the future, and a signal in between took the
/// default action (the process died instead of draining; seen as a flaky
/// test_sigint_exits_0 under load). Call it inside the runtime.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let interrupt = signal(SignalKind::interrupt());
        let terminate = signal(SignalKind::terminate());
        async move {
            let recv = |s: std::io::Result<tokio::signal::unix::Signal>| async move {
                match s {
                    Ok(mut s) => {
                        s.recv().await;
                    }
                    Err(_) => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                _ = recv(interrupt) => {},
                _ = recv(terminate) => {},
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}
