//! One live plugin: its compiled component, a store with the sandbox limits,
//! and an instance that is re-created after any trap (wasmtime poisons an
//! instance that trapped: every later call would fail).

use std::path::Path;
use std::time::Duration;

use minisgl_plugin_sdk as plain;
use wasmtime::component::Component;
use wasmtime::Store;

use super::bindings::{evictor, sampler, scheduler, w};
use super::clock::CallClock;
use super::runtime::{HostState, Runtime};
use super::{FailureCause, PluginError, PluginKind, PluginSource};

/// Pre-linked component of one world: instantiating it again costs ~10 µs.
enum Pre {
    Scheduler(scheduler::SchedulerPre<HostState>),
    Evictor(evictor::EvictorPre<HostState>),
    Sampler(sampler::SamplerPre<HostState>),
}

enum Exports {
    Scheduler(scheduler::Scheduler),
    Evictor(evictor::Evictor),
    Sampler(sampler::Sampler),
}

/// Why a call's result could not be used.
pub(crate) struct CallFailure {
    pub cause: FailureCause,
    pub detail: String,
}

pub(crate) struct WasmPlugin {
    pub name: String,
    pub source: PluginSource,
    engine: wasmtime::Engine,
    pre: Pre,
    store: Store<HostState>,
    /// `None` after a failure whose re-instantiation also failed; the next
    /// call tries again.
    exports: Option<Exports>,
    /// CPU time and wall-clock limits of every call ([`CallClock`]).
    cpu_limit: Duration,
    wall_limit: Duration,
    memory_limit_bytes: usize,
}

/// Limits of the first call (`name()`) and of instantiation, which may warm
/// an interpreter up.
const WARM_UP: Duration = Duration::from_secs(1);

impl WasmPlugin {
    /// Links `component` for `kind`'s world, instantiates it and calls
    /// `name()` once. Every call is limited to `deadline` of CPU time and
    /// `wall_limit` of wall time (the `name()` probe and instantiation get at
    /// least 1 s of each: first calls may warm up).
    pub fn new(
        rt: &Runtime,
        kind: PluginKind,
        path: &Path,
        component: &Component,
        sha256: String,
        (deadline, wall_limit): (Duration, Duration),
        memory_limit_bytes: usize,
    ) -> Result<WasmPlugin, PluginError> {
        let link_err = |e: wasmtime::Error| PluginError::Instantiate {
            kind,
            path: path.to_owned(),
            reason: format!("{e:#}"),
        };
        let instance_pre = rt.linker.instantiate_pre(component).map_err(link_err)?;
        let pre = match kind {
            PluginKind::Scheduler => {
                Pre::Scheduler(scheduler::SchedulerPre::new(instance_pre).map_err(link_err)?)
            }
            PluginKind::Evictor => {
                Pre::Evictor(evictor::EvictorPre::new(instance_pre).map_err(link_err)?)
            }
            PluginKind::Sampler => {
                Pre::Sampler(sampler::SamplerPre::new(instance_pre).map_err(link_err)?)
            }
        };
        let mut plugin = WasmPlugin {
            name: String::new(),
            source: PluginSource::Wasm {
                path: path.to_owned(),
                sha256,
            },
            engine: rt.engine.clone(),
            pre,
            store: new_store(&rt.engine, memory_limit_bytes),
            exports: None,
            cpu_limit: deadline,
            wall_limit,
            memory_limit_bytes,
        };
        plugin
            .instantiate()
            .map_err(|reason| PluginError::Instantiate {
                kind,
                path: path.to_owned(),
                reason,
            })?;
        let probe = CallClock::new(deadline.max(WARM_UP), wall_limit.max(WARM_UP));
        plugin.name = plugin
            .call_with(probe, |store, exports| match exports {
                Exports::Scheduler(e) => e.call_name(store),
                Exports::Evictor(e) => e.call_name(store),
                Exports::Sampler(e) => e.call_name(store),
            })
            .map_err(|f| PluginError::Probe {
                kind,
                path: path.to_owned(),
                reason: format!("{}: {}", f.cause, f.detail),
            })?;
        super::bounds::check_name(&plugin.name).map_err(|reason| PluginError::Probe {
            kind,
            path: path.to_owned(),
            reason,
        })?;
        Ok(plugin)
    }

    /// A fresh store (the old one may hold a poisoned instance and its
    /// memory) and a fresh instance.
    fn instantiate(&mut self) -> Result<(), String> {
        self.exports = None;
        self.store = new_store(&self.engine, self.memory_limit_bytes);
        // Instantiation runs guest start code: bound it like a call.
        let mut clock = CallClock::new(self.cpu_limit.max(WARM_UP), self.wall_limit.max(WARM_UP));
        let first = clock.start(0);
        self.store.data_mut().clock = clock;
        self.store.set_epoch_deadline(first);
        let store = &mut self.store;
        let exports = match &self.pre {
            Pre::Scheduler(p) => p.instantiate(store).map(Exports::Scheduler),
            Pre::Evictor(p) => p.instantiate(store).map(Exports::Evictor),
            Pre::Sampler(p) => p.instantiate(store).map(Exports::Sampler),
        }
        .map_err(|e| format!("{e:#}"))?;
        self.exports = Some(exports);
        Ok(())
    }

    fn call_with<R>(
        &mut self,
        mut clock: CallClock,
        f: impl FnOnce(&mut Store<HostState>, &Exports) -> wasmtime::Result<R>,
    ) -> Result<R, CallFailure> {
        if self.exports.is_none() {
            self.instantiate().map_err(|e| CallFailure {
                cause: FailureCause::Trap,
                detail: format!("cannot re-instantiate after an earlier failure: {e}"),
            })?;
        }
        let Some(exports) = &self.exports else {
            return Err(CallFailure {
                cause: FailureCause::Trap,
                detail: "no instance".into(),
            });
        };
        let state = self.store.data_mut();
        state.limiter.denied = false;
        let stderr_at_start = state.stderr.bytes();
        let first = clock.start(stderr_at_start);
        state.clock = clock;
        self.store.set_epoch_deadline(first);
        match f(&mut self.store, exports) {
            Ok(r) => Ok(r),
            Err(e) => {
                let state = self.store.data();
                let interrupted =
                    e.downcast_ref::<wasmtime::Trap>() == Some(&wasmtime::Trap::Interrupt);
                // A crash report on stderr got the wall bound to finish in
                // (so it ends as a trap); interrupted even then is a timeout.
                let reported = state.clock.reporting_crash(state.stderr.bytes());
                let cause = if state.limiter.denied {
                    FailureCause::Memory
                } else if interrupted {
                    FailureCause::Timeout
                } else {
                    FailureCause::Trap
                };
                let mut detail = format!("{e:#}");
                if interrupted {
                    detail = format!("{detail}: {}", state.clock.describe());
                }
                if reported {
                    let text = state.stderr.text_since(stderr_at_start);
                    detail = format!("{detail}; guest stderr: {text}");
                }
                // Re-create the instance now, so the next call finds it ready.
                if let Err(again) = self.instantiate() {
                    tracing::warn!(plugin = %self.name, "re-instantiation failed: {again}");
                }
                Err(CallFailure { cause, detail })
            }
        }
    }

    fn call<R>(
        &mut self,
        f: impl FnOnce(&mut Store<HostState>, &Exports) -> wasmtime::Result<R>,
    ) -> Result<R, CallFailure> {
        self.call_with(CallClock::new(self.cpu_limit, self.wall_limit), f)
    }

    pub fn schedule(
        &mut self,
        waiting: &[plain::RequestView],
        running: &[plain::RequestView],
        budget: &plain::Budget,
    ) -> Result<plain::ScheduleDecision, CallFailure> {
        let waiting: Vec<_> = waiting.iter().cloned().map(w::RequestView::from).collect();
        let running: Vec<_> = running.iter().cloned().map(w::RequestView::from).collect();
        let budget = w::Budget::from(budget.clone());
        self.call(|store, exports| match exports {
            Exports::Scheduler(e) => e.call_schedule(store, &waiting, &running, budget),
            _ => Err(wasmtime::Error::msg("scheduler slot holds a scheduler")),
        })
        .map(plain::ScheduleDecision::from)
    }

    pub fn pick_victims(
        &mut self,
        leaves: &[plain::CacheLeaf],
        pages_needed: u32,
    ) -> Result<Vec<u64>, CallFailure> {
        let leaves: Vec<_> = leaves.iter().cloned().map(w::CacheLeaf::from).collect();
        self.call(|store, exports| match exports {
            Exports::Evictor(e) => e.call_pick_victims(store, &leaves, pages_needed),
            _ => Err(wasmtime::Error::msg("evictor slot holds an evictor")),
        })
    }

    pub fn plan(
        &mut self,
        reqs: &[plain::SampleRequest],
        vocab_size: u32,
    ) -> Result<Vec<plain::SamplePlan>, CallFailure> {
        let reqs: Vec<_> = reqs.iter().cloned().map(w::SampleRequest::from).collect();
        self.call(|store, exports| match exports {
            Exports::Sampler(e) => e.call_plan(store, &reqs, vocab_size),
            _ => Err(wasmtime::Error::msg("sampler slot holds a sampler")),
        })
        .map(|plans| plans.into_iter().map(plain::SamplePlan::from).collect())
    }

    pub fn pick(&mut self, lists: &[plain::CandidateList]) -> Result<Vec<u32>, CallFailure> {
        let lists: Vec<_> = lists.iter().cloned().map(w::CandidateList::from).collect();
        self.call(|store, exports| match exports {
            Exports::Sampler(e) => e.call_pick(store, &lists),
            _ => Err(wasmtime::Error::msg("sampler slot holds a sampler")),
        })
    }
}

fn new_store(engine: &wasmtime::Engine, memory_limit_bytes: usize) -> Store<HostState> {
    let clock = CallClock::new(WARM_UP, WARM_UP);
    let mut store = Store::new(engine, HostState::new(memory_limit_bytes, clock));
    store.limiter(|s| &mut s.limiter);
    // At each passed epoch deadline: extend while the guest's CPU time is
    // under its limit (and the wall bound is not reached), else interrupt.
    store.epoch_deadline_callback(|ctx| {
        let state = ctx.data();
        Ok(state.clock.verdict(state.stderr.bytes()))
    });
    store
}
