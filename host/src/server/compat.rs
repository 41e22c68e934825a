//! The worker endpoints SGLang's and vLLM's routers call beside the
//! inference APIs: server and model info, load, cache flush, version and a
//! generating health check. Shapes follow SGLang's `http_server.py` (the
//! routers parse `model_path`, `served_model_name`, `model_type`,
//! `architectures` and `/get_load`'s `num_tokens`) and vLLM's `/version`.
//!
//! Routes: `GET /server_info` and `/get_server_info`, `GET /model_info` and
//! `/get_model_info`, `GET /get_load`, `GET|POST /flush_cache`,
//! `GET /health_generate`, `GET /version`.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::error::ApiError;
use super::state::AppState;
pub use super::worker_meta::WorkerMeta;
use crate::engine::{Event, GenerateRequest};
use crate::plugin::PluginKind;

/// The crate version, reported as the worker's `version`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// How long `/health_generate` waits for its one token.
const HEALTH_GENERATE_TIMEOUT: Duration = Duration::from_secs(20);

fn model_path(state: &AppState) -> String {
    state
        .config
        .model
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

fn meta(state: &AppState) -> WorkerMeta {
    state.worker.get().cloned().unwrap_or_default()
}

/// `GET /server_info` (and SGLang's older `/get_server_info`): the server
/// arguments under SGLang's names plus the engine's current state.
pub async fn server_info(State(state): State<Arc<AppState>>) -> Response {
    let c = &state.config;
    let l = &state.limits;
    let m = state.engine.metrics();
    let w = meta(&state);
    let page = u64::from(c.page_size);
    let tokenizer_path = w
        .tokenizer_path
        .clone()
        .unwrap_or_else(|| model_path(&state));
    Json(json!({
        "model_path": model_path(&state),
        "tokenizer_path": tokenizer_path,
        "served_model_name": l.model_name,
        "host": c.host.to_string(),
        "port": c.port,
        "device": w.device,
        "page_size": c.page_size,
        "context_length": l.max_context,
        "max_req_input_len": l.max_context.saturating_sub(1),
        "max_total_num_tokens": m.kv_pages_total * page,
        "max_running_requests": c.max_running,
        "max_queued_requests": c.max_waiting,
        "chunked_prefill_size": c.max_prefill_tokens,
        "max_prefill_tokens": c.max_prefill_tokens,
        "kv_memory_mb": c.kv_memory_mb,
        "disable_radix_cache": false,
        "enable_overlap_schedule": c.overlap,
        "schedule_policy": state.engine.plugins().stats().iter()
            .find(|s| s.kind == PluginKind::Scheduler)
            .map(|s| s.plugin.clone())
            .unwrap_or_default(),
        "tp_size": 1,
        "dp_size": 1,
        "vocab_size": l.vocab_size,
        "internal_states": [{
            "num_running_reqs": m.running,
            "num_queue_reqs": m.queue_len,
            "kv_pages_used": m.kv_pages_used,
            "kv_pages_cached": m.kv_pages_cached,
            "kv_pages_free": m.kv_pages_free,
            "cache_hit_rate": m.cache_hit_rate(),
        }],
        "version": VERSION,
    }))
    .into_response()
}

/// `GET /model_info` (and `/get_model_info`): SGLang's model description.
pub async fn model_info(State(state): State<Arc<AppState>>) -> Response {
    let w = meta(&state);
    let tokenizer_path = w
        .tokenizer_path
        .clone()
        .unwrap_or_else(|| model_path(&state));
    Json(json!({
        "model_path": model_path(&state),
        "tokenizer_path": tokenizer_path,
        "served_model_name": state.limits.model_name,
        "is_generation": true,
        "preferred_sampling_params": Value::Null,
        "weight_version": "default",
        "has_image_understanding": false,
        "has_audio_understanding": false,
        "model_type": w.model_type,
        "architectures": w.architectures,
        "max_context_length": state.limits.max_context,
        "vocab_size": state.limits.vocab_size,
    }))
    .into_response()
}

/// `GET /get_load`: one entry per data-parallel rank (minisgl has one), as
/// SGLang answers it. `num_tokens` is the KV held by requests (pages not
/// evictable, in tokens): what the routers' `power_of_two` compares.
pub async fn get_load(State(state): State<Arc<AppState>>) -> Response {
    let m = state.engine.metrics();
    let held_pages = m
        .kv_pages_total
        .saturating_sub(m.kv_pages_free + m.kv_pages_evictable);
    Json(json!([{
        "dp_rank": 0,
        "num_reqs": m.running + m.queue_len,
        "num_waiting_reqs": m.queue_len,
        "num_tokens": held_pages * u64::from(state.config.page_size),
    }]))
    .into_response()
}

/// `GET|POST /flush_cache`: drops every prefix-cache entry no request
/// holds. Unlike SGLang (which refuses while requests run) it always
/// succeeds: pages of running requests and the prefixes they lock stay.
pub async fn flush_cache(State(state): State<Arc<AppState>>) -> Response {
    match state.engine.flush_cache().await {
        Some(freed) => (
            StatusCode::OK,
            format!(
                "Cache flushed: {freed} pages freed (pages held by running requests are kept).\n"
            ),
        )
            .into_response(),
        None => ApiError::ShuttingDown.into_response(),
    }
}

/// `GET /version`.
pub async fn version() -> Response {
    Json(json!({"version": VERSION})).into_response()
}

/// `GET /health_generate`: runs a one-token greedy generation through the
/// engine, so a wedged engine thread fails it even while `/health` (which
/// only checks the HTTP layer) passes. 503 when draining or on failure.
pub async fn health_generate(State(state): State<Arc<AppState>>) -> Response {
    if state.shutting_down.load(Ordering::SeqCst) {
        return ApiError::ShuttingDown.into_response();
    }
    let prompt = vec![state.tokenizer.bos_id().unwrap_or(0)];
    let mut req = GenerateRequest::greedy(prompt, 1);
    req.ignore_eos = true;
    let (id, mut rx) = match state.engine.submit(req) {
        Ok(x) => x,
        Err(e) => return unhealthy(format!("cannot submit the probe: {e}")),
    };
    let wait = async {
        while let Some(ev) = rx.recv().await {
            match ev {
                Event::Finished { .. } => return Ok(()),
                Event::Error(e) => return Err(e),
                Event::Token { .. } => {}
            }
        }
        Err("the engine dropped the probe".to_string())
    };
    match tokio::time::timeout(HEALTH_GENERATE_TIMEOUT, wait).await {
        Ok(Ok(())) => Json(json!({"status": "ok"})).into_response(),
        Ok(Err(e)) => unhealthy(e),
        Err(_) => {
            state.engine.abort(id);
            unhealthy(format!(
                "no token within {} s",
                HEALTH_GENERATE_TIMEOUT.as_secs()
            ))
        }
    }
}

fn unhealthy(reason: String) -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({"status": "unhealthy", "reason": reason})),
    )
        .into_response()
}
