//! Liveness and readiness, kept apart as Kubernetes wants them:
//!
//! - `GET /live` (also `/health/live`): 200 whenever the process answers
//!   HTTP — while loading, serving and draining. A failing liveness probe
//!   restarts the pod, so it must not fail just because weights are still
//!   loading or requests are draining.
//! - `GET /ready` (also `/health/ready`): 200 only while new requests are
//!   accepted; 503 with `{"status": "loading"}` while the model and plugins
//!   load and compile, and `{"status": "draining"}` after SIGTERM. Routers
//!   and Services send traffic only to ready replicas.
//! - `GET /health` keeps its meaning (the routers' health check): 200 while
//!   serving, 503 when loading or draining.
//!
//! While loading, the binary serves [`loading_router`] on the same socket;
//! the full application replaces it once the engine is up.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use super::state::AppState;

/// `GET /live`: the process is up.
pub async fn live() -> Response {
    Json(json!({"status": "alive"})).into_response()
}

/// `GET /ready` on the serving application: ready unless draining.
pub async fn ready(State(state): State<Arc<AppState>>) -> Response {
    if state.shutting_down.load(Ordering::SeqCst) {
        return not_ready("draining");
    }
    Json(json!({"status": "ready"})).into_response()
}

fn not_ready(status: &str) -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(axum::http::header::RETRY_AFTER, "1")],
        Json(json!({"status": status})),
    )
        .into_response()
}

/// What the socket answers while the model and plugins load: alive, not
/// ready, and 503 (retryable) for everything else.
pub fn loading_router() -> Router {
    let loading = || async { not_ready("loading") };
    Router::new()
        .route("/live", get(live))
        .route("/health/live", get(live))
        .route("/ready", get(loading))
        .route("/health/ready", get(loading))
        .fallback(|| async {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                [(axum::http::header::RETRY_AFTER, "1")],
                Json(json!({"error": {
                    "message": "the model is still loading; retry when /ready answers 200",
                    "type": "service_unavailable",
                    "param": null,
                    "code": "loading",
                }})),
            )
        })
}
