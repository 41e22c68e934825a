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
//! `GET /admin/plugins`, `POST /admin/plugins/{kind}`, `DELETE /admin/plugins/{kind}`.

pub mod admin;
pub mod client;
pub mod error;
pub mod fields;
pub mod metrics;
pub mod native;
pub mod openai;
pub mod protocol;
pub mod routes;
pub mod sequence;
pub mod state;
pub mod stop;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;
use tokio::net::TcpListener;

pub use state::AppState;

/// Largest request body accepted (a 100k-token prompt as JSON ids fits).
pub const MAX_BODY_BYTES: usize = 8 << 20;

/// The application's routes.
pub fn router(state: Arc<AppState>) -> Router {
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
        .fallback(routes::not_found)
        .method_not_allowed_fallback(routes::method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// Serves until `shutdown` resolves, then drains: new requests get 503,
/// in-flight ones get `config.shutdown_timeout_s` to finish before the
/// engine aborts them; returns once every connection is closed and the
/// engine has stopped.
pub async fn serve(
    listener: TcpListener,
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
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
    };
    let app = router(state.clone()).into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, app)
        .with_graceful_shutdown(signal)
        .await?;
    let engine = state.engine.clone();
    let _ = tokio::task::spawn_blocking(move || engine.shutdown()).await;
    tracing::info!("server stopped");
    Ok(())
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
