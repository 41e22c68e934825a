//! Per-slot counters, read by `/metrics` and the benchmarks.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{FailureCause, PluginKind};

/// Where the policy of a slot comes from.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum PluginSource {
    /// The built-in policy of `minisgl-policies`, linked into the host.
    Native,
    /// A Wasm component loaded from `path`, whose bytes hash to `sha256` (hex).
    Wasm { path: PathBuf, sha256: String },
}

impl std::fmt::Display for PluginSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PluginSource::Native => f.write_str("native"),
            PluginSource::Wasm { path, sha256 } => {
                write!(
                    f,
                    "{} (sha256 {})",
                    path.display(),
                    &sha256[..12.min(sha256.len())]
                )
            }
        }
    }
}

/// Failed plugin calls, by cause.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct FailureCounts {
    pub trap: u64,
    pub timeout: u64,
    pub memory: u64,
    pub invalid: u64,
}

impl FailureCounts {
    pub fn total(&self) -> u64 {
        self.trap + self.timeout + self.memory + self.invalid
    }
}

/// A snapshot of one slot (one plugin kind).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SlotStats {
    pub kind: PluginKind,
    /// The serving policy's `name()` (the native built-in's when native).
    pub plugin: String,
    pub source: PluginSource,
    /// Calls made to this slot (every `schedule`/`pick_victims`/`plan`/`pick`).
    pub calls: u64,
    pub failures: FailureCounts,
    /// Calls answered by the native built-in because the plugin failed.
    pub fallbacks: u64,
    /// Plugins put in place: the initial loads, hot swaps and
    /// [`super::PluginSet::reset_native`] calls.
    pub swaps: u64,
    /// Swaps refused because the new plugin could not be loaded.
    pub refused_swaps: u64,
    /// The most recent failure: `cause: detail` (for an invalid decision,
    /// the detail starts with the broken rule, e.g. `S5`).
    pub last_failure: Option<String>,
    /// Set when the failure mode is `fail` and the plugin was retired.
    pub retired: Option<String>,
    /// Wall time of every call of this slot (plugin or built-in, validation
    /// included): what the engine waited.
    pub call_time: Histogram,
}

/// Upper bounds (seconds) of the call-time histogram buckets: 10 µs to 1 s,
/// which spans a compiled plugin's few microseconds up to the deadline.
pub const CALL_TIME_BUCKETS: [f64; 12] = [
    1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.02, 0.05, 0.1, 0.3, 1.0,
];

/// A Prometheus-style histogram snapshot: counts per bucket of
/// [`CALL_TIME_BUCKETS`] (not cumulative), plus the calls above the last.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Histogram {
    pub buckets: Vec<u64>,
    pub overflow: u64,
    /// Sum of the observations, in nanoseconds.
    pub sum_ns: u64,
    pub count: u64,
}

/// The live histogram: one atomic per bucket.
#[derive(Debug, Default)]
pub(crate) struct LiveHistogram {
    buckets: [AtomicU64; CALL_TIME_BUCKETS.len() + 1],
    sum_ns: AtomicU64,
}

impl LiveHistogram {
    pub fn observe(&self, d: std::time::Duration) {
        let s = d.as_secs_f64();
        let i = CALL_TIME_BUCKETS
            .iter()
            .position(|&b| s <= b)
            .unwrap_or(CALL_TIME_BUCKETS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_ns
            .fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> Histogram {
        let counts: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        Histogram {
            buckets: counts[..CALL_TIME_BUCKETS.len()].to_vec(),
            overflow: counts[CALL_TIME_BUCKETS.len()],
            sum_ns: self.sum_ns.load(Ordering::Relaxed),
            count: counts.iter().sum(),
        }
    }
}

/// The live counters of one slot; cheap to bump from the calling thread.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub calls: AtomicU64,
    pub trap: AtomicU64,
    pub timeout: AtomicU64,
    pub memory: AtomicU64,
    pub invalid: AtomicU64,
    pub fallbacks: AtomicU64,
    pub swaps: AtomicU64,
    pub refused_swaps: AtomicU64,
    pub call_time: LiveHistogram,
}

impl Counters {
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn failure(&self, cause: FailureCause) {
        Self::bump(match cause {
            FailureCause::Trap => &self.trap,
            FailureCause::Timeout => &self.timeout,
            FailureCause::Memory => &self.memory,
            FailureCause::Invalid => &self.invalid,
        });
    }

    pub fn failures(&self) -> FailureCounts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        FailureCounts {
            trap: get(&self.trap),
            timeout: get(&self.timeout),
            memory: get(&self.memory),
            invalid: get(&self.invalid),
        }
    }
}
