//! A small engine simulator for policy tests: requests arrive, the scheduler
//! under test decides each step, the host's validation checks the decision,
//! and the simulator applies it (chunked prefill, decode, preemption with
//! recompute, page accounting). It is the host's contract in miniature, so a
//! policy's defining behaviour can be shown without a model.
//!
//! Shared by the `plugin_examples_*` tests (included with `#[path]`), which
//! run each policy twice: the native Rust type, and the Wasm component built
//! from the same crate, loaded through the host's plugin runtime.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;

use minisgl::plugin::{validate, PluginConfig, PluginKind, PluginSet};
use minisgl_plugin_sdk::{Budget, CacheLeaf, Evictor, RequestView, ScheduleDecision, Scheduler};

/// A request to submit.
#[derive(Clone, Debug, Default)]
pub struct Spec {
    pub id: u64,
    pub arrival_us: u64,
    pub prompt_len: u32,
    pub prefix_hit_len: u32,
    pub max_new_tokens: u32,
    pub priority: i32,
    pub client_id: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Waiting,
    Running,
    Finished,
}

/// One request's life in the simulator.
#[derive(Clone, Debug)]
pub struct Req {
    pub spec: Spec,
    pub view: RequestView,
    pub state: State,
    /// When its first chunk was scheduled.
    pub first_scheduled_us: Option<u64>,
    pub finished_us: Option<u64>,
    pub preemptions: u32,
}

/// Engine limits for a simulation.
#[derive(Clone, Debug)]
pub struct Limits {
    pub max_prefill_tokens: u32,
    pub max_running: u32,
    pub total_pages: u32,
    pub page_size: u32,
    /// Simulated time one step takes.
    pub step_us: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_prefill_tokens: 512,
            max_running: 8,
            total_pages: 4096,
            page_size: 16,
            step_us: 10_000,
        }
    }
}

/// Service in the VTC paper's units: 1 per prefilled token, 2 per generated one.
pub const SERVICE_IN: u64 = 1;
pub const SERVICE_OUT: u64 = 2;

pub struct Sim {
    pub limits: Limits,
    pub reqs: Vec<Req>,
    pub now_us: u64,
    pub step: u64,
    /// Service each client received, counted by the simulator.
    pub served: BTreeMap<u64, u64>,
    /// Every decision made, in order.
    pub decisions: Vec<ScheduleDecision>,
}

impl Sim {
    pub fn new(limits: Limits) -> Sim {
        Sim {
            limits,
            reqs: Vec::new(),
            now_us: 0,
            step: 0,
            served: BTreeMap::new(),
            decisions: Vec::new(),
        }
    }

    pub fn submit(&mut self, spec: Spec) {
        let view = RequestView {
            id: spec.id,
            arrival_us: spec.arrival_us,
            prompt_len: spec.prompt_len,
            prefix_hit_len: spec.prefix_hit_len,
            max_new_tokens: spec.max_new_tokens,
            priority: spec.priority,
            client_id: spec.client_id,
            last_scheduled_us: spec.arrival_us,
            ..RequestView::default()
        };
        self.reqs.push(Req {
            spec,
            view,
            state: State::Waiting,
            first_scheduled_us: None,
            finished_us: None,
            preemptions: 0,
        });
    }

    pub fn req(&self, id: u64) -> &Req {
        self.reqs
            .iter()
            .find(|r| r.spec.id == id)
            .expect("known request")
    }

    fn free_pages(&self) -> u32 {
        let held: u32 = self.reqs.iter().map(|r| r.view.pages_held).sum();
        self.limits.total_pages - held
    }

    /// The views and budget the host would hand the scheduler now.
    pub fn inputs(&self) -> (Vec<RequestView>, Vec<RequestView>, Budget) {
        let arrived = |r: &&Req| r.spec.arrival_us <= self.now_us;
        let mut waiting: Vec<&Req> = self
            .reqs
            .iter()
            .filter(arrived)
            .filter(|r| r.state == State::Waiting)
            .collect();
        waiting.sort_by_key(|r| (r.spec.arrival_us, r.spec.id));
        let running = self.reqs.iter().filter(|r| r.state == State::Running);
        let budget = Budget {
            max_prefill_tokens: self.limits.max_prefill_tokens,
            max_running: self.limits.max_running,
            free_pages: self.free_pages(),
            evictable_pages: 0,
            page_size: self.limits.page_size,
            now_us: self.now_us,
            step: self.step,
        };
        (
            waiting.iter().map(|r| r.view.clone()).collect(),
            running.map(|r| r.view.clone()).collect(),
            budget,
        )
    }

    pub fn all_finished(&self) -> bool {
        self.reqs.iter().all(|r| r.state == State::Finished)
    }

    /// One engine step; panics if the decision breaks the host's rules.
    pub fn step(&mut self, sched: &mut dyn Scheduler) -> ScheduleDecision {
        let (waiting, running, budget) = self.inputs();
        let d = sched.schedule(&waiting, &running, &budget);
        if let Err(e) = validate::schedule(&d, &waiting, &running, &budget) {
            panic!(
                "{} made an invalid decision at step {}: {e}",
                sched.name(),
                self.step
            );
        }
        self.apply(&d);
        self.decisions.push(d.clone());
        self.step += 1;
        self.now_us += self.limits.step_us;
        d
    }

    fn index(&self, id: u64) -> usize {
        self.reqs
            .iter()
            .position(|r| r.spec.id == id)
            .expect("validated id")
    }

    fn apply(&mut self, d: &ScheduleDecision) {
        let (ps, now) = (self.limits.page_size, self.now_us);
        for &id in &d.preempt {
            let i = self.index(id);
            let r = &mut self.reqs[i];
            // Released KV: the prompt and the tokens generated so far are
            // recomputed when the request is admitted again.
            r.view.prompt_len = r.spec.prompt_len + r.view.generated_len;
            r.view.computed_len = 0;
            r.view.prefix_hit_len = 0;
            r.view.pages_held = 0;
            r.state = State::Waiting;
            r.preemptions += 1;
        }
        for chunk in &d.prefill {
            let i = self.index(chunk.id);
            let r = &mut self.reqs[i];
            let v = &mut r.view;
            v.computed_len = v.computed_len.max(v.prefix_hit_len) + chunk.tokens;
            v.pages_held = v.computed_len.div_ceil(ps);
            v.last_scheduled_us = now;
            r.first_scheduled_us.get_or_insert(now);
            *self.served.entry(r.spec.client_id).or_default() +=
                u64::from(chunk.tokens) * SERVICE_IN;
            if v.computed_len == v.prompt_len {
                // The last chunk's forward pass yields the first output token.
                r.state = State::Running;
                v.generated_len += 1;
                *self.served.entry(r.spec.client_id).or_default() += SERVICE_OUT;
            }
        }
        for &id in &d.decode {
            let i = self.index(id);
            let r = &mut self.reqs[i];
            let v = &mut r.view;
            v.computed_len += 1;
            v.pages_held = v.computed_len.div_ceil(ps);
            v.generated_len += 1;
            v.last_scheduled_us = now;
            *self.served.entry(r.spec.client_id).or_default() += SERVICE_OUT;
        }
        for r in &mut self.reqs {
            if r.state == State::Running && r.view.generated_len >= r.view.max_new_tokens {
                r.state = State::Finished;
                r.finished_us = Some(now);
                r.view.pages_held = 0;
            }
        }
    }

    /// Steps until every request finished (panics after `max_steps`).
    pub fn run(&mut self, sched: &mut dyn Scheduler, max_steps: u64) {
        while !self.all_finished() {
            assert!(
                self.step < max_steps,
                "{} did not finish within {max_steps} steps",
                sched.name()
            );
            self.step(sched);
        }
    }
}

/// A plugin built by scripts/build-plugins.sh (or build-lang-plugins.sh).
pub fn plugin_path(file: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../target/wasm32-wasip2/plugin")
        .join(file);
    assert!(
        p.is_file(),
        "{} is missing: run scripts/build-plugins.sh first",
        p.display()
    );
    p
}

/// Compiled components are cached here between test runs.
pub fn cache_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/plugin-cache")
}

/// Loads a component into the host's runtime for one kind.
pub fn load(kind: PluginKind, file: &str) -> PluginSet {
    let path = plugin_path(file);
    let mut cfg = PluginConfig {
        cache_dir: Some(cache_dir()),
        ..PluginConfig::default()
    };
    match kind {
        PluginKind::Scheduler => cfg.scheduler = Some(path),
        PluginKind::Evictor => cfg.evictor = Some(path),
        PluginKind::Sampler => cfg.sampler = Some(path),
    }
    PluginSet::load(&cfg).unwrap_or_else(|e| panic!("loading {file}: {e}"))
}

fn assert_no_failures(set: &PluginSet, kind: PluginKind) {
    let s = set
        .stats()
        .into_iter()
        .find(|s| s.kind == kind)
        .expect("slot");
    assert_eq!(
        s.failures.total(),
        0,
        "plugin {} failed calls (answered by the built-in): {s:?}",
        s.plugin
    );
}

/// A scheduler component driven through the host's runtime, as the engine
/// drives it. Panics if a call failed (the built-in would have answered).
pub struct WasmScheduler(pub PluginSet);

impl WasmScheduler {
    pub fn load(file: &str) -> Self {
        WasmScheduler(load(PluginKind::Scheduler, file))
    }
}

impl Scheduler for WasmScheduler {
    fn name(&self) -> String {
        self.0.stats()[PluginKind::Scheduler as usize]
            .plugin
            .clone()
    }

    fn schedule(
        &mut self,
        waiting: &[RequestView],
        running: &[RequestView],
        budget: &Budget,
    ) -> ScheduleDecision {
        let d = self.0.schedule(waiting, running, budget);
        assert_no_failures(&self.0, PluginKind::Scheduler);
        d
    }
}

/// An evictor component driven through the host's runtime.
pub struct WasmEvictor(pub PluginSet);

impl WasmEvictor {
    pub fn load(file: &str) -> Self {
        WasmEvictor(load(PluginKind::Evictor, file))
    }
}

impl Evictor for WasmEvictor {
    fn name(&self) -> String {
        self.0.stats()[PluginKind::Evictor as usize].plugin.clone()
    }

    fn pick_victims(&mut self, leaves: &[CacheLeaf], pages_needed: u32) -> Vec<u64> {
        let v = self.0.pick_victims(leaves, pages_needed);
        assert_no_failures(&self.0, PluginKind::Evictor);
        v
    }
}
