//! What a client asks of the engine and what comes back: requests, stream
//! events, finish reasons, usage and the offline result. It sits below the
//! scheduler (which keeps requests and sends their events) and the engine
//! (which re-exports it), so both layers speak it without pointing up.

use std::time::Duration;

use minisgl_plugin_sdk::{SamplingParams, TokenBias};
use thiserror::Error;

use crate::batch::TokenLogprob;

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
