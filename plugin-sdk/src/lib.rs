//! Guest SDK for minisgl policy plugins.
//!
//! A policy implements one of the plain traits below against the plain types in
//! [`types`]; `export_scheduler!`, `export_evictor!` or `export_sampler!` turn
//! it into a Wasm component for the matching world of `wit/`. The same policy
//! type can be linked natively (the host does this for its built-in fallbacks).

pub mod types;

pub use types::*;

/// Chooses each step's batch. See the `scheduler` world in `wit/worlds.wit`.
pub trait Scheduler {
    /// Short human-readable name.
    fn name(&self) -> String;
    /// One decision per engine step.
    fn schedule(
        &mut self,
        waiting: &[RequestView],
        running: &[RequestView],
        budget: &Budget,
    ) -> ScheduleDecision;
}

/// Chooses radix-cache victims. See the `evictor` world in `wit/worlds.wit`.
pub trait Evictor {
    /// Short human-readable name.
    fn name(&self) -> String;
    /// Leaves to evict, most expendable first.
    fn pick_victims(&mut self, leaves: &[CacheLeaf], pages_needed: u32) -> Vec<u64>;
}

/// Chooses how tokens are drawn. See the `sampler` world in `wit/worlds.wit`.
pub trait Sampler {
    /// Short human-readable name.
    fn name(&self) -> String;
    /// One plan per request, same order.
    fn plan(&mut self, requests: &[SampleRequest], vocab_size: u32) -> Vec<SamplePlan>;
    /// One token per candidate list, same order.
    fn pick(&mut self, lists: &[CandidateList]) -> Vec<u32>;
}
