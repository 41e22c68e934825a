//! Shared server state: the engine handle, the tokenizer, the frozen config
//! and the HTTP-layer metrics.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::config::Config;
use crate::engine::EngineHandle;
use crate::model::Tokenizer;

use super::metrics::ServerMetrics;
use super::protocol::Limits;
use super::worker_meta::WorkerMeta;

/// Everything a handler needs; shared as `Arc<AppState>`.
pub struct AppState {
    pub engine: EngineHandle,
    pub tokenizer: Arc<Tokenizer>,
    pub limits: Limits,
    pub config: Arc<Config>,
    pub metrics: ServerMetrics,
    /// Set on SIGINT/SIGTERM: new requests get 503 while in-flight ones finish.
    pub shutting_down: AtomicBool,
    /// Unix time the server started (OpenAI's `created` of the model).
    pub started_unix: u64,
    /// Model facts for `/model_info` and `/server_info`, set once by the
    /// binary after loading.
    pub worker: std::sync::OnceLock<WorkerMeta>,
    next_id: AtomicU64,
}

impl AppState {
    pub fn new(
        engine: EngineHandle,
        tokenizer: Arc<Tokenizer>,
        limits: Limits,
        config: Arc<Config>,
    ) -> Arc<Self> {
        Arc::new(AppState {
            engine,
            tokenizer,
            limits,
            config,
            metrics: ServerMetrics::default(),
            shutting_down: AtomicBool::new(false),
            started_unix: unix_now(),
            worker: std::sync::OnceLock::new(),
            next_id: AtomicU64::new(1),
        })
    }

    /// A response id like `cmpl-17`.
    pub fn response_id(&self, prefix: &str) -> String {
        format!("{prefix}-{}", self.next_id.fetch_add(1, Ordering::Relaxed))
    }
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
