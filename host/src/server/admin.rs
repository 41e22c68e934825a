//! `/admin/plugins`: report the policy serving each slot, load a new
//! component into a slot (switched in between two engine steps), and put
//! the built-in back (`DELETE`).
//!
//! Admin is reachable from loopback only, unless `admin_token` is set; then
//! every admin call needs `Authorization: Bearer <token>` (from anywhere).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::error::ApiError;
use super::fields::Fields;
use super::openai::parse_body;
use super::state::AppState;
use crate::plugin::PluginKind;

/// Longest an admin swap request waits for the loader (a Python
/// component compiles in up to ~25 s on 2 cores).
const SWAP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// Checks the caller: the bearer token when one is configured, else loopback.
fn authorize(state: &AppState, peer: SocketAddr, headers: &HeaderMap) -> Result<(), ApiError> {
    match &state.config.admin_token {
        Some(token) => {
            let given = headers
                .get(axum::http::header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .unwrap_or("");
            // Compare without an early exit so timing does not leak the prefix.
            let ok = given.len() == token.len()
                && given
                    .bytes()
                    .zip(token.bytes())
                    .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                    == 0;
            if ok {
                Ok(())
            } else {
                Err(ApiError::Unauthorized(
                    "admin endpoints need `Authorization: Bearer <admin token>`".into(),
                ))
            }
        }
        None if peer.ip().is_loopback() => Ok(()),
        None => Err(ApiError::Forbidden(format!(
            "admin endpoints are served to loopback clients only (you are {}); \
             start the server with --admin-token to allow remote admin",
            peer.ip()
        ))),
    }
}

/// `GET /admin/plugins`: every slot's plugin, source and counters.
pub async fn list(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    if let Err(e) = authorize(&state, peer, &headers) {
        return e.into_response();
    }
    Json(json!({"plugins": state.engine.plugins().stats()})).into_response()
}

/// `POST /admin/plugins/{kind}` with `{"path": "/abs/plugin.wasm"}`.
pub async fn swap(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(kind): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let resp = match swap_inner(&state, peer, &kind, &headers, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    };
    state.metrics.response("admin_swap", resp.status().as_u16());
    resp
}

/// `DELETE /admin/plugins/{kind}`: the built-in policy serves `kind` again
/// from the next call on (counted as a swap).
pub async fn reset(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(kind): Path<String>,
    headers: HeaderMap,
) -> Response {
    let result = authorize(&state, peer, &headers).and_then(|()| {
        kind.parse::<PluginKind>()
            .map_err(|e: String| ApiError::field("kind", e))
    });
    let resp = match result {
        Ok(kind) => {
            let plugins = state.engine.plugins();
            let previous = plugins
                .stats()
                .into_iter()
                .find(|s| s.kind == kind)
                .map(|s| s.plugin)
                .unwrap_or_default();
            plugins.reset_native(kind);
            let now = plugins
                .stats()
                .into_iter()
                .find(|s| s.kind == kind)
                .map(|s| s.plugin)
                .unwrap_or_default();
            tracing::info!(%kind, previous = %previous, "built-in policy restored");
            Json(json!({"reset": {"kind": kind, "name": now, "source": {"type": "native"}, "previous": previous}}))
                .into_response()
        }
        Err(e) => e.into_response(),
    };
    state
        .metrics
        .response("admin_reset", resp.status().as_u16());
    resp
}

async fn swap_inner(
    state: &Arc<AppState>,
    peer: SocketAddr,
    kind: &str,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    authorize(state, peer, headers)?;
    let kind: PluginKind = kind
        .parse()
        .map_err(|e: String| ApiError::field("kind", e))?;
    let body = parse_body(body)?;
    let f = Fields::body(&body)?;
    let path = match f.str("path")? {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => {
            return Err(ApiError::field(
                "path",
                "`path` (the component file to load) is required",
            ))
        }
    };
    let plugins = state.engine.plugins();
    let p2 = path.clone();
    // Compiling a component takes 100+ ms: keep it off the async workers,
    // and bound the wait (the loader only reads regular files of bounded
    // size, so this is a backstop, not the defence).
    let task = tokio::task::spawn_blocking(move || plugins.swap(kind, &p2));
    let result = match tokio::time::timeout(SWAP_TIMEOUT, task).await {
        Ok(r) => r.map_err(|e| ApiError::Internal(format!("swap task failed: {e}")))?,
        Err(_) => {
            let shown = path.display().to_string();
            state.metrics.swap(kind.as_str(), &shown, false);
            tracing::warn!(%kind, path = ?shown, "plugin swap timed out");
            return Err(ApiError::field(
                "path",
                format!(
                    "swap of {shown:?} did not finish within {} s; the current {kind} keeps serving",
                    SWAP_TIMEOUT.as_secs()
                ),
            ));
        }
    };
    let shown = path.display().to_string();
    match result {
        Ok(report) => {
            state.metrics.swap(kind.as_str(), &shown, true);
            tracing::info!(%kind, path = ?shown, plugin = %report.name, "plugin swapped in");
            Ok(Json(json!({"swapped": report})).into_response())
        }
        Err(e) => {
            state.metrics.swap(kind.as_str(), &shown, false);
            tracing::warn!(%kind, path = ?shown, error = %e, "plugin swap refused");
            Err(ApiError::field(
                "path",
                format!("swap refused; the current {kind} keeps serving: {e}"),
            ))
        }
    }
}
