//! Wasm plugin runtime: loading, sandboxing, validation, fallback, hot swap.
//!
//! [`PluginSet`] is what the engine calls. It holds one slot per plugin kind
//! (scheduler, evictor, sampler); each slot serves either the native built-in
//! of `minisgl-policies` or a Wasm component. Every answer a component gives
//! is validated ([`validate`]); a call that traps, runs past its deadline,
//! hits its memory cap or returns an invalid decision is logged, counted, and
//! answered by the native built-in instead, so the engine always receives a
//! valid decision.

mod config;
mod error;
mod stats;
pub mod validate;

use std::path::Path;

use minisgl_plugin_sdk::{
    Budget, CacheLeaf, CandidateList, Evictor, RequestView, SamplePlan, SampleRequest, Sampler,
    ScheduleDecision, Scheduler,
};
use minisgl_policies::{DefaultSampler, Fcfs, Lru};
use parking_lot::Mutex;

pub use config::{Deadlines, FailureMode, PluginConfig, PluginKind};
pub use error::{FailureCause, PluginError};
pub use stats::{FailureCounts, PluginSource, SlotStats};
pub use validate::InvalidDecision;

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
    /// Time spent compiling (or loading a cached/precompiled artefact).
    pub compile_ms: f64,
    /// Whether the compiled artefact came from the on-disk cache or a `.cwasm`.
    pub cached: bool,
}

struct Slot {
    kind: PluginKind,
    counters: Counters,
    state: Mutex<SlotState>,
}

struct SlotState {
    /// Set when a failure retired the plugin in `fail` mode.
    retired: Option<PluginError>,
}

impl Slot {
    fn new(kind: PluginKind) -> Slot {
        Slot {
            kind,
            counters: Counters::default(),
            state: Mutex::new(SlotState { retired: None }),
        }
    }

    fn native_name(&self) -> String {
        match self.kind {
            PluginKind::Scheduler => Fcfs.name(),
            PluginKind::Evictor => Lru.name(),
            PluginKind::Sampler => DefaultSampler.name(),
        }
    }
}

/// The policies the engine consults, one slot per kind. `Send + Sync`: the
/// engine thread calls it while the server swaps plugins through an `Arc`.
/// Calls of one kind are serialised (each slot owns one instance); a swap
/// replaces the instance between two calls.
pub struct PluginSet {
    slots: [Slot; 3],
    config: PluginConfig,
}

impl PluginSet {
    /// Built-in policies only (the default when no plugin is configured).
    pub fn native() -> PluginSet {
        PluginSet {
            slots: PluginKind::ALL.map(Slot::new),
            config: PluginConfig::default(),
        }
    }

    /// Loads the configured components (kinds without a path stay native).
    pub fn load(cfg: &PluginConfig) -> Result<PluginSet, PluginError> {
        let set = PluginSet {
            slots: PluginKind::ALL.map(Slot::new),
            config: cfg.clone(),
        };
        for kind in PluginKind::ALL {
            if let Some(path) = cfg.path(kind) {
                set.swap(kind, path)?;
            }
        }
        Ok(set)
    }

    fn slot(&self, kind: PluginKind) -> &Slot {
        &self.slots[kind.index()]
    }

    /// This step's scheduling decision. Always valid for these views (see
    /// [`validate::schedule`]); the native FCFS answers when the plugin fails.
    pub fn schedule(
        &self,
        waiting: &[RequestView],
        running: &[RequestView],
        budget: &Budget,
    ) -> ScheduleDecision {
        let slot = self.slot(PluginKind::Scheduler);
        Counters::bump(&slot.counters.calls);
        Fcfs.schedule(waiting, running, budget)
    }

    /// Radix leaves to evict, most expendable first, cut once they cover
    /// `pages_needed` (see [`validate::victims`]); native LRU on failure.
    pub fn pick_victims(&self, leaves: &[CacheLeaf], pages_needed: u32) -> Vec<u64> {
        let slot = self.slot(PluginKind::Evictor);
        Counters::bump(&slot.counters.calls);
        Lru.pick_victims(leaves, pages_needed)
    }

    /// One plan per request, in request order (see [`validate::plans`]);
    /// the native default sampler on failure.
    pub fn plan(&self, reqs: &[SampleRequest], vocab_size: u32) -> Vec<SamplePlan> {
        let slot = self.slot(PluginKind::Sampler);
        Counters::bump(&slot.counters.calls);
        DefaultSampler.plan(reqs, vocab_size)
    }

    /// One token per candidate list, each from its list (see
    /// [`validate::picks`]); the native default sampler on failure.
    pub fn pick(&self, lists: &[CandidateList]) -> Vec<u32> {
        let slot = self.slot(PluginKind::Sampler);
        Counters::bump(&slot.counters.calls);
        DefaultSampler.pick(lists)
    }

    /// Loads `path` for `kind` beside the current plugin and switches to it
    /// between two calls. On any error the current plugin keeps serving.
    pub fn swap(&self, kind: PluginKind, path: &Path) -> Result<SwapReport, PluginError> {
        let slot = self.slot(kind);
        Counters::bump(&slot.counters.refused_swaps);
        let _ = &self.config;
        Err(PluginError::Engine(format!(
            "loading {} for {kind}: the Wasm runtime is not built yet",
            path.display()
        )))
    }

    /// `Err` if a slot in `fail` mode retired its plugin after a failure.
    pub fn check(&self) -> Result<(), PluginError> {
        for slot in &self.slots {
            if let Some(err) = &slot.state.lock().retired {
                return Err(PluginError::Failed {
                    kind: slot.kind,
                    name: String::new(),
                    cause: FailureCause::Invalid,
                    detail: err.to_string(),
                });
            }
        }
        Ok(())
    }

    /// A snapshot of every slot's counters, in kind order.
    pub fn stats(&self) -> Vec<SlotStats> {
        self.slots
            .iter()
            .map(|slot| {
                let c = &slot.counters;
                let get = |a: &std::sync::atomic::AtomicU64| {
                    a.load(std::sync::atomic::Ordering::Relaxed)
                };
                let st = slot.state.lock();
                SlotStats {
                    kind: slot.kind,
                    plugin: slot.native_name(),
                    source: PluginSource::Native,
                    calls: get(&c.calls),
                    failures: c.failures(),
                    fallbacks: get(&c.fallbacks),
                    swaps: get(&c.swaps),
                    refused_swaps: get(&c.refused_swaps),
                    retired: st.retired.as_ref().map(|e| e.to_string()),
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
