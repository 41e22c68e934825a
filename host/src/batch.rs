//! What one engine step asks of the model, and what comes back.
//!
//! This is the only vocabulary shared by the scheduler loop and the model
//! runner: the loop speaks in requests, pages and tokens; the runner turns a
//! [`StepInput`] into device work (embedding → layers → logits → sampling) and
//! returns one [`SeqOutput`] per sequence that asked for a token. Logits never
//! leave the runner: on the GPU they stay on the device, and only sampled
//! tokens (plus the log-probabilities a client asked for, or a bounded top-K
//! candidate list for a sampler plugin) cross back.

use minisgl_plugin_sdk::{SamplingParams, TokenBias};

/// One sequence's share of a step: a prefill chunk or a single decode token.
#[derive(Clone, Debug)]
pub struct SeqInput {
    /// Engine request id; lets the runner find the token it sampled for this
    /// request in the previous step (see [`SeqInput::first_from_last_step`]).
    pub id: u64,
    /// Tokens to run through the model this step, at positions
    /// `start_pos .. start_pos + tokens.len()`.
    pub tokens: Vec<u32>,
    /// Overlap scheduling: the engine scheduled this decode before it knew the
    /// token sampled for this request by the step still in flight. When true,
    /// `tokens[0]` is a placeholder and the runner substitutes that token.
    pub first_from_last_step: bool,
    /// Tokens of this sequence whose KV is already in the cache (a radix-cache
    /// prefix, earlier chunks, earlier decode steps).
    pub start_pos: u32,
    /// KV page ids covering positions `0 .. start_pos + tokens.len()`, in order;
    /// position `p` lives in page `page_table[p / page_size]`, slot `p % page_size`.
    pub page_table: Vec<u32>,
    /// How to pick the next token after this chunk, or `None` for a prefill
    /// chunk that does not reach the end of the input (no logits needed).
    pub sample: Option<SampleSpec>,
}

/// How the next token of one sequence is chosen.
#[derive(Clone, Debug)]
pub struct SampleSpec {
    pub mode: SampleMode,
    /// Return the log-probability of the chosen token and of the `n` most
    /// likely tokens (OpenAI `logprobs`/`top_logprobs`); `None` for none.
    pub logprobs: Option<u32>,
}

/// The per-step sampling recipe for one sequence.
#[derive(Clone, Debug)]
pub enum SampleMode {
    /// Argmax over the full vocabulary (the fast path that skips plugins).
    Greedy,
    /// Exact sampling over the full vocabulary.
    Sample(ResolvedSampling),
    /// Return the `k` most likely tokens after processing; a sampler plugin
    /// picks among them (`SeqOutput::candidates`).
    Candidates {
        k: u32,
        processing: ResolvedSampling,
    },
}

/// A sampler plan, validated by the host, plus the history penalties need.
#[derive(Clone, Debug)]
pub struct ResolvedSampling {
    pub params: SamplingParams,
    /// Seed of this step's random stream (already mixed with the step).
    pub seed: u64,
    pub logit_bias: Vec<TokenBias>,
    pub allowed_tokens: Option<Vec<u32>>,
    /// Prompt tokens (for `repetition_penalty`); empty when no penalty needs them.
    pub prompt_tokens: Vec<u32>,
    /// Generated tokens so far (for presence/frequency/repetition penalties).
    pub output_tokens: Vec<u32>,
}

/// One engine step.
#[derive(Clone, Debug, Default)]
pub struct StepInput {
    pub seqs: Vec<SeqInput>,
}

impl StepInput {
    /// Total tokens run through the model this step.
    pub fn num_tokens(&self) -> usize {
        self.seqs.iter().map(|s| s.tokens.len()).sum()
    }
}

/// A token and its log-probability.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TokenLogprob {
    pub token: u32,
    pub logprob: f32,
}

/// The result for one sequence that had `sample: Some(..)`, in input order.
#[derive(Clone, Debug)]
pub struct SeqOutput {
    pub id: u64,
    /// The chosen token (for `Candidates`, the most likely candidate until a
    /// plugin picks).
    pub token: u32,
    /// Log-probability of `token` under the processed distribution, when asked.
    pub logprob: Option<f32>,
    /// The `n` most likely tokens, when `logprobs: Some(n)` with n > 0.
    pub top_logprobs: Vec<TokenLogprob>,
    /// For `SampleMode::Candidates`: the top-k, most likely first.
    pub candidates: Vec<TokenLogprob>,
}

/// Everything a step returns.
#[derive(Clone, Debug, Default)]
pub struct StepOutput {
    pub outputs: Vec<SeqOutput>,
}
