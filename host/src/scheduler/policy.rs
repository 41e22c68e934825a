//! The decisions the loop asks for, behind one trait.
//!
//! The engine runs on [`crate::plugin::PluginSet`] (Wasm plugins with native
//! fallbacks); [`NativePolicy`] links the default policies directly and is the
//! loop's own last-resort fallback (e.g. when a plugin's decision would stall
//! the engine). The loop re-validates whatever comes back either way.

use std::sync::Mutex;

use minisgl_plugin_sdk::{
    Budget, CacheLeaf, CandidateList, Evictor, RequestView, SamplePlan, SampleRequest, Sampler,
    ScheduleDecision, Scheduler,
};
use minisgl_policies::{DefaultSampler, Fcfs, Lru};

/// Scheduler, evictor and sampler decisions.
pub trait Policy: Send + Sync {
    fn schedule(
        &self,
        waiting: &[RequestView],
        running: &[RequestView],
        budget: &Budget,
    ) -> ScheduleDecision;
    fn pick_victims(&self, leaves: &[CacheLeaf], pages_needed: u32) -> Vec<u64>;
    fn plan(&self, requests: &[SampleRequest], vocab_size: u32) -> Vec<SamplePlan>;
    fn pick(&self, lists: &[CandidateList]) -> Vec<u32>;
}

/// The default policies (FCFS, LRU, default sampler), linked natively.
#[derive(Default)]
pub struct NativePolicy {
    scheduler: Mutex<Fcfs>,
    evictor: Mutex<Lru>,
    sampler: Mutex<DefaultSampler>,
}

impl Policy for NativePolicy {
    fn schedule(
        &self,
        waiting: &[RequestView],
        running: &[RequestView],
        budget: &Budget,
    ) -> ScheduleDecision {
        lock(&self.scheduler).schedule(waiting, running, budget)
    }

    fn pick_victims(&self, leaves: &[CacheLeaf], pages_needed: u32) -> Vec<u64> {
        lock(&self.evictor).pick_victims(leaves, pages_needed)
    }

    fn plan(&self, requests: &[SampleRequest], vocab_size: u32) -> Vec<SamplePlan> {
        lock(&self.sampler).plan(requests, vocab_size)
    }

    fn pick(&self, lists: &[CandidateList]) -> Vec<u32> {
        lock(&self.sampler).pick(lists)
    }
}

/// The native policies hold no state a panic could leave half-updated.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Policy for crate::plugin::PluginSet {
    fn schedule(
        &self,
        waiting: &[RequestView],
        running: &[RequestView],
        budget: &Budget,
    ) -> ScheduleDecision {
        crate::plugin::PluginSet::schedule(self, waiting, running, budget)
    }

    fn pick_victims(&self, leaves: &[CacheLeaf], pages_needed: u32) -> Vec<u64> {
        crate::plugin::PluginSet::pick_victims(self, leaves, pages_needed)
    }

    fn plan(&self, requests: &[SampleRequest], vocab_size: u32) -> Vec<SamplePlan> {
        crate::plugin::PluginSet::plan(self, requests, vocab_size)
    }

    fn pick(&self, lists: &[CandidateList]) -> Vec<u32> {
        crate::plugin::PluginSet::pick(self, lists)
    }
}
