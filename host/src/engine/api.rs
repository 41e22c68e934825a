//! The engine's settings, and the vocabulary it shares with the layers below
//! (requests, events, metrics), re-exported so users need one import path.

pub use crate::kv::CacheMode;
pub use crate::metrics::{DecisionFixups, EngineMetrics, FixupCause};
pub use crate::request::{
    Event, FinishReason, GenerateOutput, GenerateRequest, SubmitError, Usage,
};

/// Engine settings, fixed for the engine's life.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// KV pages the engine may use; `None` uses all of the runner's pages.
    /// (To size from a memory budget, see [`crate::kv::pool::pages_for_budget`]
    /// and build the runner with that many pages.)
    pub num_pages: Option<u32>,
    /// Most requests decoding at once.
    pub max_running: u32,
    /// Most prompt tokens prefilled per step, all chunks together (chunked
    /// prefill splits longer prompts).
    pub max_prefill_tokens: u32,
    /// Most requests waiting for admission; `submit` fails beyond it.
    pub max_waiting: usize,
    /// Longest sequence (prompt + generated); `None`: what the KV pool holds.
    pub max_context: Option<u32>,
    pub cache: CacheMode,
    /// Prepare step N+1 while step N runs. (`MINISGL_DISABLE_OVERLAP_SCHEDULING=1`
    /// reaches it through the settings table, `config::Config::overlap`; the
    /// engine itself reads no environment.)
    pub overlap: bool,
    /// Mixed into the entropy given to the sampler for unseeded requests.
    pub seed: u64,
    /// Largest `logprobs` (top alternatives) a request may ask for.
    pub max_top_logprobs: u32,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            num_pages: None,
            max_running: 256,
            max_prefill_tokens: 8192,
            max_waiting: 4096,
            max_context: None,
            cache: CacheMode::Radix,
            overlap: true,
            seed: 0,
            max_top_logprobs: 20,
        }
    }
}
