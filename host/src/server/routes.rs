//! Small endpoints: `/health`, `/v1/models`, `/metrics`, and the JSON
//! answers for unknown routes and methods.

use std::fmt::Write;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::error::ApiError;
use super::metrics::label;
use super::state::AppState;
use crate::plugin::PluginSource;

/// 200 while serving, 503 once shutdown has begun (load balancers stop
/// sending traffic).
pub async fn health(State(state): State<Arc<AppState>>) -> Response {
    if state.shutting_down.load(Ordering::SeqCst) {
        return ApiError::ShuttingDown.into_response();
    }
    Json(json!({"status": "ok"})).into_response()
}

pub async fn models(State(state): State<Arc<AppState>>) -> Response {
    let l = &state.limits;
    Json(json!({
        "object": "list",
        "data": [{
            "id": l.model_name,
            "object": "model",
            "created": state.started_unix,
            "owned_by": "minisgl",
            "max_model_len": l.max_context,
            "vocab_size": l.vocab_size,
        }],
    }))
    .into_response()
}

/// Prometheus text: the HTTP layer's counters, the engine's gauges and the
/// plugin slots' counters.
pub async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let mut out = String::new();
    state.metrics.render(&mut out);
    let m = state.engine.metrics();
    let mut gauge = |name: &str, help: &str, kind: &str, v: f64| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
        );
    };
    gauge(
        "minisgl_queue_length",
        "Requests waiting for admission.",
        "gauge",
        m.queue_len as f64,
    );
    gauge(
        "minisgl_running_requests",
        "Requests in the running batch.",
        "gauge",
        m.running as f64,
    );
    gauge(
        "minisgl_kv_pages_total",
        "KV pages in the pool.",
        "gauge",
        m.kv_pages_total as f64,
    );
    gauge(
        "minisgl_kv_pages_used",
        "KV pages owned by requests (not shared through the cache).",
        "gauge",
        m.kv_pages_used as f64,
    );
    gauge(
        "minisgl_kv_pages_cached",
        "KV pages held by the radix prefix cache.",
        "gauge",
        m.kv_pages_cached as f64,
    );
    gauge(
        "minisgl_kv_pages_evictable",
        "Cache pages no request locks (evictable when memory is needed).",
        "gauge",
        m.kv_pages_evictable as f64,
    );
    gauge(
        "minisgl_cache_hit_rate",
        "Prompt tokens served from the prefix cache / prompt tokens.",
        "gauge",
        m.cache_hit_rate(),
    );
    gauge(
        "minisgl_engine_requests_done_total",
        "Requests the engine finished.",
        "counter",
        m.requests_done as f64,
    );
    gauge(
        "minisgl_engine_requests_aborted_total",
        "Requests the engine aborted.",
        "counter",
        m.requests_aborted as f64,
    );
    gauge(
        "minisgl_engine_steps_total",
        "Engine steps run.",
        "counter",
        m.steps as f64,
    );
    gauge(
        "minisgl_engine_preemptions_total",
        "Requests preempted.",
        "counter",
        m.preemptions as f64,
    );
    gauge(
        "minisgl_engine_evicted_pages_total",
        "Cache pages evicted.",
        "counter",
        m.evicted_pages as f64,
    );
    let _ = writeln!(
        out,
        "# HELP minisgl_engine_decision_fixups_total Policy decisions the host corrected or replaced, by cause.\n# TYPE minisgl_engine_decision_fixups_total counter"
    );
    for cause in crate::engine::FixupCause::ALL {
        let _ = writeln!(
            out,
            "minisgl_engine_decision_fixups_total{{cause=\"{}\"}} {}",
            cause.label(),
            m.fixups.get(cause)
        );
    }
    let mut gauge = |name: &str, help: &str, kind: &str, v: f64| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
        );
    };
    gauge(
        "minisgl_engine_wasted_tokens_total",
        "Tokens computed and discarded (overlap).",
        "counter",
        m.wasted_tokens as f64,
    );
    render_plugins(&state, &mut out);
    super::vllm_metrics::render(&state, &m, &mut out);
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        out,
    )
        .into_response()
}

fn render_plugins(state: &AppState, out: &mut String) {
    let stats = state.engine.plugins().stats();
    let mut family = |name: &str, help: &str, kind: &str, rows: Vec<(String, u64)>| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (labels, v) in rows {
            let _ = writeln!(out, "{name}{{{labels}}} {v}");
        }
    };
    let info = stats
        .iter()
        .map(|s| {
            let (source, path) = match &s.source {
                PluginSource::Native => ("native", String::new()),
                PluginSource::Wasm { path, .. } => ("wasm", path.display().to_string()),
            };
            (
                format!(
                    "kind=\"{}\",plugin=\"{}\",source=\"{source}\",path=\"{}\"",
                    s.kind,
                    label(&s.plugin),
                    label(&path)
                ),
                1,
            )
        })
        .collect();
    family(
        "minisgl_plugin_info",
        "The policy serving each plugin slot.",
        "gauge",
        info,
    );
    // Counters are per slot (they survive swaps), so they carry only the
    // kind; `minisgl_plugin_info` says which plugin serves the slot now.
    let per_kind = |f: &dyn Fn(&crate::plugin::SlotStats) -> u64| -> Vec<(String, u64)> {
        stats
            .iter()
            .map(|s| (format!("kind=\"{}\"", s.kind), f(s)))
            .collect()
    };
    family(
        "minisgl_plugin_calls_total",
        "Calls made to each plugin slot.",
        "counter",
        per_kind(&|s| s.calls),
    );
    family(
        "minisgl_plugin_fallbacks_total",
        "Calls answered by the native built-in because the plugin failed.",
        "counter",
        per_kind(&|s| s.fallbacks),
    );
    family(
        "minisgl_plugin_swaps_total",
        "Successful hot swaps per slot.",
        "counter",
        per_kind(&|s| s.swaps),
    );
    family(
        "minisgl_plugin_refused_swaps_total",
        "Swaps refused because the new plugin could not be loaded.",
        "counter",
        per_kind(&|s| s.refused_swaps),
    );
    let failures = stats
        .iter()
        .flat_map(|s| {
            let f = s.failures;
            [
                ("trap", f.trap),
                ("timeout", f.timeout),
                ("memory", f.memory),
                ("invalid", f.invalid),
            ]
            .into_iter()
            .map(move |(cause, v)| (format!("kind=\"{}\",cause=\"{cause}\"", s.kind), v))
        })
        .collect();
    family(
        "minisgl_plugin_failures_total",
        "Failed plugin calls by cause.",
        "counter",
        failures,
    );
    render_call_time(&stats, out);
}

/// `minisgl_plugin_call_seconds{kind}`: a histogram of every call's time per
/// slot (plugin or built-in, validation included).
fn render_call_time(stats: &[crate::plugin::SlotStats], out: &mut String) {
    let name = "minisgl_plugin_call_seconds";
    let _ = writeln!(
        out,
        "# HELP {name} Time of each plugin slot call (plugin or built-in, validation included).\n# TYPE {name} histogram"
    );
    for s in stats {
        let h = &s.call_time;
        let mut cumulative = 0;
        for (le, n) in crate::plugin::CALL_TIME_BUCKETS.iter().zip(&h.buckets) {
            cumulative += n;
            let _ = writeln!(
                out,
                "{name}_bucket{{kind=\"{}\",le=\"{le}\"}} {cumulative}",
                s.kind
            );
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{kind=\"{}\",le=\"+Inf\"}} {}\n{name}_sum{{kind=\"{}\"}} {}\n{name}_count{{kind=\"{}\"}} {}",
            s.kind,
            h.count,
            s.kind,
            h.sum_ns as f64 / 1e9,
            s.kind,
            h.count
        );
    }
}

pub async fn not_found(method: Method, uri: Uri) -> Response {
    ApiError::NotFound(format!("no route for {method} {}", uri.path())).into_response()
}

pub async fn method_not_allowed(method: Method, uri: Uri) -> Response {
    ApiError::MethodNotAllowed {
        method: method.to_string(),
        path: uri.path().to_string(),
    }
    .into_response()
}
