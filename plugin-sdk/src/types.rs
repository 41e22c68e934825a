//! Plain Rust mirrors of the records in `wit/types.wit`.
//!
//! Policies are written against these types so the same code runs natively in
//! the host (as its built-in fallback) and inside a Wasm component. Field
//! meanings are documented once, in the WIT file.
//!
//! With the `serde` feature the inputs of the three worlds serialize as
//! JSON with their field names; a missing field takes its default, a token
//! bias is a `[token, bias]` pair, a candidate a `[token, logprob]` pair,
//! and a sample request's parameters sit inline beside its other fields.

/// Host identifier of a request.
pub type RequestId = u64;

/// See `request-view` in `wit/types.wit`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(default)
)]
pub struct RequestView {
    pub id: RequestId,
    pub arrival_us: u64,
    pub prompt_len: u32,
    pub prefix_hit_len: u32,
    pub computed_len: u32,
    pub generated_len: u32,
    pub max_new_tokens: u32,
    pub priority: i32,
    pub client_id: u64,
    pub deadline_us: Option<u64>,
    pub pages_held: u32,
    pub last_scheduled_us: u64,
}

impl RequestView {
    /// Input tokens that still need a forward pass (cached prefix excluded).
    pub fn remaining_prefill(&self) -> u32 {
        self.prompt_len
            .saturating_sub(self.computed_len.max(self.prefix_hit_len))
    }
}

/// See `budget` in `wit/types.wit`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(default)
)]
pub struct Budget {
    pub max_prefill_tokens: u32,
    pub max_running: u32,
    pub free_pages: u32,
    pub evictable_pages: u32,
    pub page_size: u32,
    pub now_us: u64,
    pub step: u64,
}

/// See `prefill-chunk` in `wit/types.wit`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PrefillChunk {
    pub id: RequestId,
    pub tokens: u32,
}

/// See `schedule-decision` in `wit/types.wit`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScheduleDecision {
    pub prefill: Vec<PrefillChunk>,
    pub decode: Vec<RequestId>,
    pub preempt: Vec<RequestId>,
}

/// See `cache-leaf` in `wit/types.wit`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(default)
)]
pub struct CacheLeaf {
    pub node: u64,
    pub depth: u32,
    pub tokens: u32,
    pub pages: u32,
    pub last_access_us: u64,
    pub hit_count: u32,
    pub created_us: u64,
    pub priority: i32,
}

/// See `sampling-params` in `wit/types.wit`.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(default)
)]
pub struct SamplingParams {
    pub temperature: f32,
    pub top_k: i32,
    pub top_p: f32,
    pub min_p: f32,
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    pub repetition_penalty: f32,
    pub seed: Option<u64>,
}

impl Default for SamplingParams {
    /// OpenAI's defaults: temperature 1, no truncation, no penalties.
    fn default() -> Self {
        SamplingParams {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            repetition_penalty: 1.0,
            seed: None,
        }
    }
}

impl SamplingParams {
    /// Greedy decoding: the host can take an argmax and skip the sampler.
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }

    /// Whether any penalty changes the logits.
    pub fn has_penalties(&self) -> bool {
        self.presence_penalty != 0.0
            || self.frequency_penalty != 0.0
            || self.repetition_penalty != 1.0
    }
}

/// See `token-bias` in `wit/types.wit`.
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(from = "(u32, f32)", into = "(u32, f32)")
)]
pub struct TokenBias {
    pub token: u32,
    pub bias: f32,
}

/// See `sample-request` in `wit/types.wit`.
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(default)
)]
pub struct SampleRequest {
    pub id: RequestId,
    #[cfg_attr(feature = "serde", serde(flatten))]
    pub params: SamplingParams,
    pub logit_bias: Vec<TokenBias>,
    pub generated_len: u32,
    pub prompt_len: u32,
    pub entropy: u64,
}

/// See `sample-plan` in `wit/types.wit`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SamplePlan {
    pub id: RequestId,
    pub params: SamplingParams,
    pub seed: u64,
    pub logit_bias: Vec<TokenBias>,
    pub allowed_tokens: Option<Vec<u32>>,
    pub pick_from_top: u32,
}

/// See `candidate` in `wit/types.wit`.
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(from = "(u32, f32)", into = "(u32, f32)")
)]
pub struct Candidate {
    pub token: u32,
    pub logprob: f32,
}

/// See `candidate-list` in `wit/types.wit`.
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(default)
)]
pub struct CandidateList {
    pub id: RequestId,
    pub seed: u64,
    pub candidates: Vec<Candidate>,
}

impl From<(u32, f32)> for TokenBias {
    fn from((token, bias): (u32, f32)) -> Self {
        TokenBias { token, bias }
    }
}

impl From<TokenBias> for (u32, f32) {
    fn from(x: TokenBias) -> Self {
        (x.token, x.bias)
    }
}

impl From<(u32, f32)> for Candidate {
    fn from((token, logprob): (u32, f32)) -> Self {
        Candidate { token, logprob }
    }
}

impl From<Candidate> for (u32, f32) {
    fn from(x: Candidate) -> Self {
        (x.token, x.logprob)
    }
}
