//! The engine's public vocabulary: configuration, requests, events, metrics.

use std::time::Duration;

use minisgl_plugin_sdk::{SamplingParams, TokenBias};
use thiserror::Error;

use crate::batch::TokenLogprob;

/// Whether finished requests leave their KV in the radix prefix cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CacheMode {
    /// Prefix reuse through the radix tree.
    #[default]
    Radix,
    /// No reuse: every request prefills its whole prompt (for comparison).
    Naive,
}

impl std::str::FromStr for CacheMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "radix" => Ok(CacheMode::Radix),
            "naive" => Ok(CacheMode::Naive),
            other => Err(format!(
                "cache mode must be `radix` or `naive`, got `{other}`"
            )),
        }
    }
}

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
    /// Prepare step N+1 while step N runs. Also turned off by the environment
    /// variable `MINISGL_DISABLE_OVERLAP_SCHEDULING=1`.
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

impl EngineConfig {
    /// Overlap as configured, unless the environment disables it.
    pub fn overlap_enabled(&self) -> bool {
        let disabled = std::env::var("MINISGL_DISABLE_OVERLAP_SCHEDULING")
            .map(|v| !matches!(v.trim(), "" | "0" | "false" | "no" | "off"))
            .unwrap_or(false);
        self.overlap && !disabled
    }
}

/// One generation request.
#[derive(Clone, Debug)]
pub struct GenerateRequest {
    pub prompt_tokens: Vec<u32>,
    pub params: SamplingParams,
    pub logit_bias: Vec<TokenBias>,
    /// At least 1.
    pub max_new_tokens: u32,
    /// Tokens that end the request (like EOS) when generated.
    pub stop_token_ids: Vec<u32>,
    /// Keep generating through the model's EOS tokens.
    pub ignore_eos: bool,
    /// Return the chosen token's log-probability and this many alternatives.
    pub logprobs: Option<u32>,
    pub priority: i32,
    pub client_id: u64,
    /// Latest completion time, relative to submission (a scheduling hint).
    pub deadline: Option<Duration>,
}

impl GenerateRequest {
    /// A greedy request with no stop conditions but the length.
    pub fn greedy(prompt_tokens: Vec<u32>, max_new_tokens: u32) -> Self {
        GenerateRequest {
            prompt_tokens,
            params: SamplingParams {
                temperature: 0.0,
                ..SamplingParams::default()
            },
            logit_bias: Vec::new(),
            max_new_tokens,
            stop_token_ids: Vec::new(),
            ignore_eos: false,
            logprobs: None,
            priority: 0,
            client_id: 0,
            deadline: None,
        }
    }
}

/// What a request's stream carries.
///
/// Every generated token is sent as `Token` except the one that stops the
/// request (an EOS or stop token id), which is counted in
/// `usage.completion_tokens` but not sent. `Finished` or `Error` is always
/// the last event.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    Token {
        token: u32,
        logprob: Option<f32>,
        top_logprobs: Vec<TokenLogprob>,
    },
    Finished {
        reason: FinishReason,
        usage: Usage,
    },
    Error(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// An EOS or stop token id was generated.
    Stop,
    /// `max_new_tokens` (or the context limit) was reached.
    Length,
    /// Aborted (client gone, or engine shutting down).
    Abort,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: u32,
    /// Generated tokens, including a final stop token.
    pub completion_tokens: u32,
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: u32,
}

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum SubmitError {
    #[error("too many waiting requests (limit {limit})")]
    QueueFull { limit: usize },
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error("the engine is shutting down")]
    ShuttingDown,
}

/// Counters and gauges of a running engine.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EngineMetrics {
    pub requests_done: u64,
    pub requests_aborted: u64,
    /// Prompt tokens of admitted requests.
    pub prompt_tokens: u64,
    /// Generated tokens.
    pub output_tokens: u64,
    /// Prompt tokens served from the prefix cache (at first admission).
    pub cache_hit_tokens: u64,
    /// Prompt tokens of requests at first admission (hit-rate denominator).
    pub cache_prompt_tokens: u64,
    pub queue_len: u64,
    pub running: u64,
    pub kv_pages_total: u64,
    /// Pages owned by requests and not shared through the cache.
    pub kv_pages_used: u64,
    /// Pages held by the radix cache.
    pub kv_pages_cached: u64,
    /// Cache pages no request locks (all of `kv_pages_cached` when idle).
    pub kv_pages_evictable: u64,
    /// Pages on the free list.
    pub kv_pages_free: u64,
    pub steps: u64,
    pub preemptions: u64,
    pub evicted_pages: u64,
    /// Plugin decisions the host had to correct or replace.
    pub decision_fixups: u64,
    /// Tokens computed by steps whose results were discarded (requests that
    /// stopped while already scheduled again under overlap).
    pub wasted_tokens: u64,
}

impl EngineMetrics {
    /// Cache hit tokens / prompt tokens at first admission.
    pub fn cache_hit_rate(&self) -> f64 {
        if self.cache_prompt_tokens == 0 {
            0.0
        } else {
            self.cache_hit_tokens as f64 / self.cache_prompt_tokens as f64
        }
    }
}

/// One request's result from the offline API.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerateOutput {
    /// Generated tokens, without a final stop token.
    pub tokens: Vec<u32>,
    pub finish_reason: FinishReason,
    pub usage: Usage,
    /// Per token (when `logprobs` was asked): the chosen token's log-probability.
    pub logprobs: Vec<f32>,
    /// Per token (when `logprobs: Some(n)` with n > 0): the top alternatives.
    pub top_logprobs: Vec<Vec<TokenLogprob>>,
    /// The error, if the request failed.
    pub error: Option<String>,
}
