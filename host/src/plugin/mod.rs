//! Wasm plugin runtime: loading, sandboxing, validation, fallback, hot swap.
//!
//! [`PluginSet`] is what the engine calls. It holds one slot per plugin kind
//! (scheduler, evictor, sampler); each slot serves either the native built-in
//! of `minisgl-policies` or a Wasm component. Every answer a component gives
//! is validated ([`validate`]); a call that traps, runs past its deadline,
//! hits its memory cap or returns an invalid decision is logged, counted, and
//! answered by the native built-in instead, so the engine always receives a
//! valid decision.
//!
//! Sandbox: components run in wasmtime with an empty WASI context (no files,
//! environment, arguments or network), a linear-memory cap per instance
//! (`StoreLimits`), and a per-call deadline on the plugin's own CPU time
//! plus a generous wall-clock bound, both checked at epoch interruptions (a
//! ticker thread advances the epoch every millisecond; see [`clock`]).
//! After a trap the instance is re-created from the compiled component
//! (~10 µs).

mod bindings;
pub mod bounds;
pub mod clock;
mod config;
mod error;
mod instance;
mod runtime;
mod stats;
mod stderr;
pub mod validate;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use minisgl_plugin_sdk::{
    Budget, CacheLeaf, CandidateList, Evictor, RequestView, SamplePlan, SampleRequest, Sampler,
    ScheduleDecision, Scheduler,
};
use minisgl_policies::{DefaultSampler, Fcfs, Lru};
use parking_lot::Mutex;

pub use config::{Deadlines, FailureMode, PluginConfig, PluginKind};
pub use error::{FailureCause, PluginError};
pub use runtime::precompile;
pub use stats::{FailureCounts, Histogram, PluginSource, SlotStats, CALL_TIME_BUCKETS};
pub use validate::InvalidDecision;

use instance::{CallFailure, WasmPlugin};
use runtime::Runtime;
use stats::Counters;

/// What a successful [`PluginSet::swap`] did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SwapReport {
    pub kind: PluginKind,
    /// `name()` of the plugin now serving.
    pub name: String,
    pub source: PluginSource,
    /// `name()` of the plugin it replaced.
    pub previous: String,
    /// Time to read and compile the component (or load a cached/precompiled
    /// artefact), in milliseconds.
    pub compile_ms: f64,
    /// Time to link, instantiate and probe `name()`, in milliseconds.
    pub instantiate_ms: f64,
    /// Whether the compiled code came from the on-disk cache or a `.cwasm`.
    pub cached: bool,
}

/// A failure that retired a plugin in [`FailureMode::Fail`].
#[derive(Clone, Debug)]
struct Retirement {
    name: String,
    cause: FailureCause,
    detail: String,
}

struct Slot {
    kind: PluginKind,
    counters: Counters,
    /// Held for the whole of a call, so a swap lands between two calls.
    state: Mutex<SlotState>,
}

#[derive(Default)]
struct SlotState {
    /// `None`: the native built-in serves.
    wasm: Option<Box<WasmPlugin>>,
    retired: Option<Retirement>,
    last_failure: Option<String>,
}

impl Slot {
    fn new(kind: PluginKind) -> Slot {
        Slot {
            kind,
            counters: Counters::default(),
            state: Mutex::new(SlotState::default()),
        }
    }
}

fn native_name(kind: PluginKind) -> String {
    match kind {
        PluginKind::Scheduler => Fcfs.name(),
        PluginKind::Evictor => Lru.name(),
        PluginKind::Sampler => DefaultSampler.name(),
    }
}

/// Records a call's duration in its slot's histogram when dropped (on every
/// return path of a dispatch).
struct CallTimer<'a>(&'a stats::LiveHistogram, Instant);

impl Drop for CallTimer<'_> {
    fn drop(&mut self) {
        self.0.observe(self.1.elapsed());
    }
}

/// Logs the first failures of a slot in full, then every power of two, so a
/// plugin failing every step cannot flood the log.
fn should_log(failures: u64) -> bool {
    failures <= 8 || failures.is_power_of_two()
}

/// The policies the engine consults, one slot per kind.
///
/// `Send + Sync`: the engine thread calls it while the server swaps plugins
/// through an `Arc`. Calls of one kind are serialised (each slot owns one
/// instance); a swap compiles and instantiates the new plugin without
/// blocking calls and replaces the instance between two calls.
pub struct PluginSet {
    slots: [Slot; 3],
    config: PluginConfig,
    /// Created on the first Wasm load; a native-only set starts no threads.
    runtime: OnceLock<Arc<Runtime>>,
}

impl PluginSet {
    /// Built-in policies only (the default when no plugin is configured).
    pub fn native() -> PluginSet {
        PluginSet::with_config(PluginConfig::default())
    }

    fn with_config(config: PluginConfig) -> PluginSet {
        PluginSet {
            slots: PluginKind::ALL.map(Slot::new),
            config,
            runtime: OnceLock::new(),
        }
    }

    /// Loads the configured components (kinds without a path stay native).
    /// Any component that cannot be loaded is an error naming its path.
    pub fn load(cfg: &PluginConfig) -> Result<PluginSet, PluginError> {
        let set = PluginSet::with_config(cfg.clone());
        for kind in PluginKind::ALL {
            if let Some(path) = cfg.path(kind) {
                set.install(Some(kind), path, true)?;
            }
        }
        Ok(set)
    }

    /// The configuration this set was loaded with.
    pub fn config(&self) -> &PluginConfig {
        &self.config
    }

    fn slot(&self, kind: PluginKind) -> &Slot {
        &self.slots[kind.index()]
    }

    fn runtime(&self) -> Result<Arc<Runtime>, PluginError> {
        if let Some(rt) = self.runtime.get() {
            return Ok(rt.clone());
        }
        let rt = Arc::new(Runtime::new(self.config.cache_dir.clone())?);
        // A concurrent first load may have won the race; use the winner.
        Ok(self.runtime.get_or_init(|| rt).clone())
    }

    /// Runs `call` on the slot's plugin, validates its answer with `check`,
    /// and falls back to `native` on any failure.
    fn dispatch<R>(
        &self,
        kind: PluginKind,
        call: impl FnOnce(&mut WasmPlugin) -> Result<R, CallFailure>,
        check: impl FnOnce(R) -> Result<R, InvalidDecision>,
        native: impl FnOnce() -> R,
    ) -> R {
        let slot = self.slot(kind);
        Counters::bump(&slot.counters.calls);
        let start = Instant::now();
        let _timer = CallTimer(&slot.counters.call_time, start);
        let mut state = slot.state.lock();
        let Some(plugin) = state.wasm.as_deref_mut() else {
            drop(state);
            return native();
        };
        let failure = match call(plugin) {
            Ok(answer) => match check(answer) {
                Ok(answer) => return answer,
                Err(e) => CallFailure {
                    cause: FailureCause::Invalid,
                    detail: e.0,
                },
            },
            Err(f) => f,
        };
        slot.counters.failure(failure.cause);
        Counters::bump(&slot.counters.fallbacks);
        let name = plugin.name.clone();
        state.last_failure = Some(format!("{}: {}", failure.cause, failure.detail));
        if should_log(slot.counters.failures().total()) {
            tracing::warn!(
                kind = %kind, plugin = %name, cause = %failure.cause,
                "plugin call failed, answered by the native built-in: {}", failure.detail
            );
        }
        if self.config.failure_mode == FailureMode::Fail {
            tracing::error!(kind = %kind, plugin = %name, "failure mode is `fail`: plugin retired");
            state.wasm = None;
            state.retired = Some(Retirement {
                name,
                cause: failure.cause,
                detail: failure.detail,
            });
        }
        drop(state);
        native()
    }

    /// This step's scheduling decision, always valid for these views (rules
    /// in [`validate`]); the native FCFS answers when the plugin fails.
    pub fn schedule(
        &self,
        waiting: &[RequestView],
        running: &[RequestView],
        budget: &Budget,
    ) -> ScheduleDecision {
        self.dispatch(
            PluginKind::Scheduler,
            |p| p.schedule(waiting, running, budget),
            |d| validate::schedule(&d, waiting, running, budget).map(|()| d),
            || Fcfs.schedule(waiting, running, budget),
        )
    }

    /// Radix leaves to evict, most expendable first, cut once they cover
    /// `pages_needed`; only ids of `leaves` (pass unlocked leaves only). The
    /// native LRU answers when the plugin fails.
    pub fn pick_victims(&self, leaves: &[CacheLeaf], pages_needed: u32) -> Vec<u64> {
        self.dispatch(
            PluginKind::Evictor,
            |p| p.pick_victims(leaves, pages_needed),
            |v| validate::victims(v, leaves, pages_needed),
            || Lru.pick_victims(leaves, pages_needed),
        )
    }

    /// One plan per request, in request order (`plans[i].id == reqs[i].id`),
    /// each within the vocabulary and parameter ranges. The native default
    /// sampler answers when the plugin fails.
    pub fn plan(&self, reqs: &[SampleRequest], vocab_size: u32) -> Vec<SamplePlan> {
        self.dispatch(
            PluginKind::Sampler,
            |p| p.plan(reqs, vocab_size),
            |plans| validate::plans(plans, reqs, vocab_size),
            || DefaultSampler.plan(reqs, vocab_size),
        )
    }

    /// One token per candidate list, each one of its list's candidates (lists
    /// must be non-empty). The native default sampler answers when the
    /// plugin fails.
    pub fn pick(&self, lists: &[CandidateList]) -> Vec<u32> {
        self.dispatch(
            PluginKind::Sampler,
            |p| p.pick(lists),
            |picks| validate::picks(&picks, lists).map(|()| picks),
            || DefaultSampler.pick(lists),
        )
    }

    /// Loads the component at `path` (`.wasm`, or `.cwasm` precompiled by
    /// [`precompile`]) for `kind` and switches to it between two calls.
    ///
    /// Reading, compiling (or loading from the cache), linking, instantiating
    /// and probing `name()` all happen on a separate thread while the slot
    /// keeps serving its current plugin; only the final switch takes the
    /// slot's lock. On any error the current plugin keeps serving, the
    /// refusal is counted, and the error names the file and the reason.
    pub fn swap(&self, kind: PluginKind, path: &Path) -> Result<SwapReport, PluginError> {
        self.install(Some(kind), path, false)
    }

    /// Loads a component given at start (`--plugin X.wasm`) into the slot of
    /// the world it exports, read from the compiled component's type (so it is
    /// compiled, or taken from the cache, once).
    pub fn swap_inferred(&self, path: &Path) -> Result<SwapReport, PluginError> {
        self.install(None, path, true)
    }

    /// [`PluginSet::swap`] into `kind`'s slot, or the exported world's when
    /// `None`; `at_start` only changes the log line (a plugin given at start is
    /// "loaded", not "swapped in" over the built-in one).
    fn install(
        &self,
        kind: Option<PluginKind>,
        path: &Path,
        at_start: bool,
    ) -> Result<SwapReport, PluginError> {
        // Compiling a large component (Python's is 17 MiB) takes seconds;
        // say so before the wait, not only after it.
        tracing::info!(path = %path.display(), "loading plugin (compiling it unless cached)");
        let loaded = self.runtime().and_then(|rt| {
            let cfg = self.config.clone();
            let path = path.to_owned();
            let thread = kind.map_or("any".to_string(), |k| k.to_string());
            std::thread::Builder::new()
                .name(format!("minisgl-plugin-load-{thread}"))
                .spawn(move || load(&rt, &cfg, kind, &path))
                .map_err(|e| PluginError::Engine(format!("cannot start a loader thread: {e}")))?
                .join()
                .unwrap_or_else(|_| {
                    Err(PluginError::Engine(
                        "the plugin loader thread panicked".into(),
                    ))
                })
        });
        let (kind, plugin, compile_ms, instantiate_ms, cached) = match loaded {
            Ok(l) => l,
            Err(e) => {
                let refused = kind.or(e.kind()).unwrap_or(PluginKind::Scheduler);
                Counters::bump(&self.slot(refused).counters.refused_swaps);
                // Debug formatting escapes newlines in the caller's path.
                tracing::warn!(kind = %refused, path = ?path, "plugin swap refused: {e}");
                return Err(e);
            }
        };
        let slot = self.slot(kind);
        let name = plugin.name.clone();
        let source = plugin.source.clone();
        let previous = {
            let mut state = slot.state.lock();
            let previous = match &state.wasm {
                Some(p) => p.name.clone(),
                None => native_name(kind),
            };
            state.wasm = Some(plugin);
            state.retired = None;
            previous
        };
        Counters::bump(&slot.counters.swaps);
        if at_start {
            tracing::info!(
                kind = %kind, plugin = %name, source = %source,
                compile_ms, instantiate_ms, cached, "plugin loaded"
            );
        } else {
            tracing::info!(
                kind = %kind, plugin = %name, source = %source, previous = %previous,
                compile_ms, instantiate_ms, cached, "plugin swapped in"
            );
        }
        Ok(SwapReport {
            kind,
            name,
            source,
            previous,
            compile_ms,
            instantiate_ms,
            cached,
        })
    }

    /// [`PluginSet::swap`] on a background thread, for callers that must not
    /// block (an async request handler): join the handle for the report.
    pub fn swap_in_background(
        self: &Arc<Self>,
        kind: PluginKind,
        path: &Path,
    ) -> std::thread::JoinHandle<Result<SwapReport, PluginError>> {
        let set = Arc::clone(self);
        let path = path.to_owned();
        std::thread::spawn(move || set.swap(kind, &path))
    }

    /// Puts the native built-in back in charge of `kind` (counted as a swap).
    pub fn reset_native(&self, kind: PluginKind) {
        let slot = self.slot(kind);
        let mut state = slot.state.lock();
        state.wasm = None;
        state.retired = None;
        Counters::bump(&slot.counters.swaps);
    }

    /// `Err` when a slot in [`FailureMode::Fail`] retired its plugin after a
    /// failure (the native built-in serves that slot meanwhile).
    pub fn check(&self) -> Result<(), PluginError> {
        for slot in &self.slots {
            if let Some(r) = &slot.state.lock().retired {
                return Err(PluginError::Failed {
                    kind: slot.kind,
                    name: r.name.clone(),
                    cause: r.cause,
                    detail: r.detail.clone(),
                });
            }
        }
        Ok(())
    }

    /// A snapshot of every slot, in kind order (scheduler, evictor, sampler).
    pub fn stats(&self) -> Vec<SlotStats> {
        self.slots
            .iter()
            .map(|slot| {
                let c = &slot.counters;
                let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
                let state = slot.state.lock();
                let (plugin, source) = match &state.wasm {
                    Some(p) => (p.name.clone(), p.source.clone()),
                    None => (native_name(slot.kind), PluginSource::Native),
                };
                SlotStats {
                    kind: slot.kind,
                    plugin,
                    source,
                    calls: get(&c.calls),
                    failures: c.failures(),
                    fallbacks: get(&c.fallbacks),
                    swaps: get(&c.swaps),
                    refused_swaps: get(&c.refused_swaps),
                    last_failure: state.last_failure.clone(),
                    retired: state
                        .retired
                        .as_ref()
                        .map(|r| format!("{} ({}): {}", r.name, r.cause, r.detail)),
                    call_time: c.call_time.snapshot(),
                }
            })
            .collect()
    }
}

impl Default for PluginSet {
    fn default() -> Self {
        PluginSet::native()
    }
}

/// A loaded plugin: its kind, the instance, compile and instantiate times
/// (ms), and whether the compiled code came from a cache.
type Loaded = (PluginKind, Box<WasmPlugin>, f64, f64, bool);

/// Compiles and instantiates one plugin (runs on a loader thread). Without a
/// `kind`, the kind is the world the compiled component exports.
fn load(
    rt: &Runtime,
    cfg: &PluginConfig,
    kind: Option<PluginKind>,
    path: &Path,
) -> Result<Loaded, PluginError> {
    let compiled = rt.compile(kind.unwrap_or(PluginKind::Scheduler), path)?;
    let kind = match kind {
        Some(k) => k,
        None => rt
            .world_of(&compiled.component)
            .ok_or_else(|| PluginError::UnknownWorld {
                path: path.to_owned(),
            })?,
    };
    let start = Instant::now();
    let plugin = WasmPlugin::new(
        rt,
        kind,
        path,
        &compiled.component,
        compiled.sha256,
        (cfg.deadlines.get(kind), cfg.wall_limit(kind)),
        cfg.memory_limit_bytes,
    )?;
    Ok((
        kind,
        Box::new(plugin),
        compiled.elapsed.as_secs_f64() * 1e3,
        start.elapsed().as_secs_f64() * 1e3,
        compiled.cached,
    ))
}
