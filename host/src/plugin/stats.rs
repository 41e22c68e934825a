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
