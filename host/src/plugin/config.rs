//! How the plugin runtime is set up: which component serves each kind, and the
//! sandbox limits every call runs under.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// The three plugin kinds, one per WIT world.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PluginKind {
    Scheduler,
    Evictor,
    Sampler,
}

impl PluginKind {
    /// Every kind, in slot order.
    pub const ALL: [PluginKind; 3] = [
        PluginKind::Scheduler,
        PluginKind::Evictor,
        PluginKind::Sampler,
    ];

    /// The WIT world name (`scheduler`, `evictor`, `sampler`).
    pub fn as_str(self) -> &'static str {
        match self {
            PluginKind::Scheduler => "scheduler",
            PluginKind::Evictor => "evictor",
            PluginKind::Sampler => "sampler",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for PluginKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for PluginKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "scheduler" => Ok(PluginKind::Scheduler),
            "evictor" => Ok(PluginKind::Evictor),
            "sampler" => Ok(PluginKind::Sampler),
            other => Err(format!(
                "unknown plugin kind {other:?}: expected scheduler, evictor or sampler"
            )),
        }
    }
}

/// What happens when a plugin call traps, times out, hits its memory cap or
/// returns an invalid decision. In both modes the failing call is answered by
/// the native built-in, so the engine always gets a valid decision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FailureMode {
    /// Count it, re-instantiate the plugin if it trapped, and keep using the
    /// plugin for later calls.
    #[default]
    Fallback,
    /// Count it and retire the plugin: the slot serves the native built-in
    /// from then on (until a swap) and [`super::PluginSet::check`] reports the
    /// failure, so a caller that wants to stop (a benchmark comparing
    /// policies) can.
    Fail,
}

impl std::str::FromStr for FailureMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fallback" => Ok(FailureMode::Fallback),
            "fail" => Ok(FailureMode::Fail),
            other => Err(format!(
                "unknown failure mode {other:?}: expected fallback or fail"
            )),
        }
    }
}

/// Per-call time limits, one per kind (`plan` and `pick` share the sampler's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadlines {
    pub scheduler: Duration,
    pub evictor: Duration,
    pub sampler: Duration,
}

impl Deadlines {
    /// The same limit for every kind.
    pub fn all(limit: Duration) -> Deadlines {
        Deadlines {
            scheduler: limit,
            evictor: limit,
            sampler: limit,
        }
    }

    /// The limit of one kind.
    pub fn get(&self, kind: PluginKind) -> Duration {
        match kind {
            PluginKind::Scheduler => self.scheduler,
            PluginKind::Evictor => self.evictor,
            PluginKind::Sampler => self.sampler,
        }
    }
}

impl Default for Deadlines {
    /// 20 ms of the plugin's own CPU time. A compiled plugin answers in
    /// microseconds; the interpreted ones' p99 at batch 256 (256 waiting +
    /// 256 running views) is 3.7 ms (Python) and 4.5 ms (JavaScript) on an
    /// idle server CPU (docs/results/plugin-languages.md): 20 ms is over 4x
    /// the slower, room for a first call's warm-up and for deeper queues,
    /// while bounding a stuck plugin to a fraction of a step's stall.
    fn default() -> Self {
        Deadlines::all(DEFAULT_CPU_DEADLINE)
    }
}

/// The default per-call CPU-time limit.
pub const DEFAULT_CPU_DEADLINE: Duration = Duration::from_millis(20);

/// The wall-clock bound of a call is this many times its CPU limit, and at
/// least [`MIN_WALL_LIMIT`]: generous, because it is only there for a host
/// thread that is stuck or starved, and for a crash report being written.
pub const WALL_LIMIT_FACTOR: u32 = 10;
/// The least wall-clock bound of a call.
pub const MIN_WALL_LIMIT: Duration = Duration::from_millis(250);

/// Everything [`super::PluginSet::load`] needs.
#[derive(Clone, Debug)]
pub struct PluginConfig {
    /// Component (`.wasm`) or precompiled artefact (`.cwasm`) serving the
    /// scheduler world; `None` keeps the native FCFS.
    pub scheduler: Option<PathBuf>,
    /// Same for the evictor world; `None` keeps the native LRU.
    pub evictor: Option<PathBuf>,
    /// Same for the sampler world; `None` keeps the native default sampler.
    pub sampler: Option<PathBuf>,
    /// Per-call limits on the plugin's own CPU time (the thread CPU clock,
    /// checked at epoch interruptions).
    pub deadlines: Deadlines,
    /// Per-call wall-clock bound; `None`: [`WALL_LIMIT_FACTOR`] times the
    /// kind's CPU limit, at least [`MIN_WALL_LIMIT`].
    pub wall_limit: Option<Duration>,
    /// Most linear memory (all memories together) and table elements one
    /// plugin instance may grow to, in bytes.
    pub memory_limit_bytes: usize,
    pub failure_mode: FailureMode,
    /// Where compiled components are cached, keyed by the sha256 of the
    /// component bytes and the wasmtime version; `None` disables the cache.
    pub cache_dir: Option<PathBuf>,
}

impl PluginConfig {
    /// The wall-clock bound of one kind's calls.
    pub fn wall_limit(&self, kind: PluginKind) -> Duration {
        self.wall_limit
            .unwrap_or_else(|| (self.deadlines.get(kind) * WALL_LIMIT_FACTOR).max(MIN_WALL_LIMIT))
    }

    /// The path configured for one kind.
    pub fn path(&self, kind: PluginKind) -> Option<&PathBuf> {
        match kind {
            PluginKind::Scheduler => self.scheduler.as_ref(),
            PluginKind::Evictor => self.evictor.as_ref(),
            PluginKind::Sampler => self.sampler.as_ref(),
        }
    }
}

impl Default for PluginConfig {
    /// No plugins (all native), default deadlines, 256 MiB per instance
    /// (an interpreted Python component starts at tens of MiB), fallback mode,
    /// no cache.
    fn default() -> Self {
        PluginConfig {
            scheduler: None,
            evictor: None,
            sampler: None,
            deadlines: Deadlines::default(),
            wall_limit: None,
            memory_limit_bytes: 256 << 20,
            failure_mode: FailureMode::Fallback,
            cache_dir: None,
        }
    }
}
