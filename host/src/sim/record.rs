//! What one replay of a workload produced, whatever ran it (the simulator or
//! the real engine): per-request timings and a time series of the engine's
//! gauges. Times are microseconds since the replay started.

use super::step_log::StepRecord;
use crate::metrics::EngineMetrics;
use crate::workload::TimedRequest;

/// One request's life.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RequestRecord {
    pub arrival_us: u64,
    pub first_token_us: Option<u64>,
    pub last_token_us: Option<u64>,
    pub finish_us: Option<u64>,
    pub prompt_tokens: u32,
    pub output_tokens: u32,
    /// Prompt tokens served from the radix cache.
    pub cached_tokens: u32,
    pub client_id: u64,
    pub priority: i32,
    /// Set when the request failed (it counts as missing its SLO).
    pub error: Option<String>,
}

impl RequestRecord {
    pub fn ok(&self) -> bool {
        self.error.is_none() && self.finish_us.is_some()
    }

    pub fn ttft_us(&self) -> Option<u64> {
        Some(self.first_token_us?.saturating_sub(self.arrival_us))
    }

    /// Mean time between output tokens after the first.
    pub fn tpot_us(&self) -> Option<f64> {
        let (a, b) = (self.first_token_us?, self.last_token_us?);
        (self.output_tokens > 1).then(|| (b - a) as f64 / f64::from(self.output_tokens - 1))
    }

    pub fn e2e_us(&self) -> Option<u64> {
        Some(self.finish_us?.saturating_sub(self.arrival_us))
    }
}

/// The engine's gauges after one step.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    pub t_us: u64,
    pub queue_len: u64,
    pub running: u64,
    /// Pages held by requests (not shared through the cache).
    pub kv_used_pages: u64,
    /// Pages held by the radix cache.
    pub kv_cached_pages: u64,
    /// Output tokens generated so far.
    pub output_tokens: u64,
}

/// A whole replay.
#[derive(Clone, Debug, Default)]
pub struct RunRecord {
    /// In workload order.
    pub requests: Vec<RequestRecord>,
    pub samples: Vec<Sample>,
    pub metrics: EngineMetrics,
    /// Wall-clock time spent in policy calls (plugins), in microseconds:
    /// measured, so it differs between runs.
    pub policy_wall_us: f64,
    /// Wall-clock time of the whole replay, in seconds (measured).
    pub wall_s: f64,
    /// Virtual (sim) or wall time policy calls were charged, in microseconds.
    pub policy_charged_us: f64,
    /// Every model step, in order (priced by the cost model in the
    /// simulator, timed on the real engine).
    pub steps: Vec<StepRecord>,
}

impl RunRecord {
    /// An empty record with one entry per request of `workload`, holding
    /// what is known before the replay (arrival, prompt length, client).
    pub fn for_workload(workload: &[TimedRequest]) -> RunRecord {
        RunRecord {
            requests: workload
                .iter()
                .map(|r| RequestRecord {
                    arrival_us: r.at_us,
                    prompt_tokens: r.request.prompt_tokens.len() as u32,
                    client_id: r.request.client_id,
                    priority: r.request.priority,
                    ..RequestRecord::default()
                })
                .collect(),
            ..RunRecord::default()
        }
    }
}
