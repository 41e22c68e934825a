//! A [`Policy`] wrapper that measures the wall time of every decision, so the
//! simulator can report plugin time per step and charge it to virtual time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use minisgl_plugin_sdk::{
    Budget, CacheLeaf, CandidateList, RequestView, SamplePlan, SampleRequest, ScheduleDecision,
};

use crate::scheduler::Policy;

/// Forwards every call and adds its duration to a shared counter.
pub struct TimedPolicy {
    inner: Arc<dyn Policy>,
    nanos: Arc<AtomicU64>,
}

impl TimedPolicy {
    pub fn new(inner: Arc<dyn Policy>) -> TimedPolicy {
        TimedPolicy {
            inner,
            nanos: Arc::default(),
        }
    }

    /// The counter (nanoseconds spent in calls so far).
    pub fn counter(&self) -> Arc<AtomicU64> {
        self.nanos.clone()
    }

    fn timed<R>(&self, f: impl FnOnce() -> R) -> R {
        let t = Instant::now();
        let r = f();
        self.nanos
            .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        r
    }
}

impl Policy for TimedPolicy {
    fn schedule(
        &self,
        waiting: &[RequestView],
        running: &[RequestView],
        budget: &Budget,
    ) -> ScheduleDecision {
        self.timed(|| self.inner.schedule(waiting, running, budget))
    }

    fn pick_victims(&self, leaves: &[CacheLeaf], pages_needed: u32) -> Vec<u64> {
        self.timed(|| self.inner.pick_victims(leaves, pages_needed))
    }

    fn plan(&self, requests: &[SampleRequest], vocab_size: u32) -> Vec<SamplePlan> {
        self.timed(|| self.inner.plan(requests, vocab_size))
    }

    fn pick(&self, lists: &[CandidateList]) -> Vec<u32> {
        self.timed(|| self.inner.pick(lists))
    }
}
