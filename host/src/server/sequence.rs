//! One generated sequence as the HTTP layer sees it: submitted to the engine,
//! its token events turned into text chunks (incremental detokenisation,
//! stop strings), its timings recorded, and aborted if it is dropped early
//! (a client that disconnects frees its pages).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc::UnboundedReceiver;

use crate::engine::{Event, FinishReason, GenerateRequest, SubmitError};

use crate::model::IncrementalDecoder;

use super::error::ApiError;
use super::protocol::GenOptions;
use super::state::AppState;
use super::stop::{StopMatcher, StopStep};

/// A generated token with the log-probabilities the client asked for.
#[derive(Clone, Debug)]
pub struct TokenOut {
    pub id: u32,
    pub logprob: Option<f32>,
    pub top: Vec<(u32, f32)>,
}

/// A piece of one sequence's output.
#[derive(Clone, Debug, Default)]
pub struct Chunk {
    pub text: String,
    /// Tokens generated since the previous chunk (with logprobs when asked).
    pub tokens: Vec<TokenOut>,
    /// Set on the last chunk: `stop`, `length` or `abort`.
    pub finish: Option<&'static str>,
    /// Set on the last chunk.
    pub usage: Option<SeqUsage>,
}

/// Token counts of one finished sequence.
#[derive(Clone, Copy, Debug, Default)]
pub struct SeqUsage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub cached_tokens: u32,
}

/// A running sequence.
pub struct Sequence {
    state: Arc<AppState>,
    id: u64,
    rx: UnboundedReceiver<Event>,
    detok: IncrementalDecoder,
    stop: StopMatcher,
    pending_tokens: Vec<TokenOut>,
    pub usage: SeqUsage,
    finished: bool,
    start: Instant,
    first_token: Option<Instant>,
    last_token: Option<Instant>,
}

impl Sequence {
    /// Submits one sequence. `seed_offset` makes the `n` choices of a seeded
    /// request differ from each other while staying reproducible.
    pub fn submit(
        state: &Arc<AppState>,
        prompt: Vec<u32>,
        max_new_tokens: u32,
        opts: &GenOptions,
        seed_offset: u64,
    ) -> Result<Sequence, ApiError> {
        if state.shutting_down.load(Ordering::SeqCst) {
            return Err(ApiError::ShuttingDown);
        }
        let mut params = opts.params.clone();
        params.seed = params.seed.map(|s| s.wrapping_add(seed_offset));
        let prompt_len = prompt.len() as u32;
        let detok = IncrementalDecoder::new(&prompt, true);
        let req = GenerateRequest {
            prompt_tokens: prompt,
            params,
            logit_bias: opts.logit_bias.clone(),
            max_new_tokens,
            stop_token_ids: opts.stop_token_ids.clone(),
            ignore_eos: opts.ignore_eos,
            logprobs: opts.logprobs,
            priority: opts.priority,
            client_id: opts.client.client_id,
            deadline: opts.client.deadline,
        };
        let (id, rx) = state.engine.submit(req).map_err(|e| match e {
            SubmitError::QueueFull { limit } => ApiError::QueueFull {
                limit: limit as u32,
            },
            SubmitError::Invalid(m) => ApiError::field("prompt", m),
            SubmitError::ShuttingDown => ApiError::ShuttingDown,
        })?;
        state.metrics.in_flight.fetch_add(1, Ordering::Relaxed);
        state
            .metrics
            .prompt_tokens
            .fetch_add(u64::from(prompt_len), Ordering::Relaxed);
        Ok(Sequence {
            state: state.clone(),
            id,
            rx,
            detok,
            stop: StopMatcher::new(opts.stop.clone(), opts.include_stop),
            pending_tokens: Vec::new(),
            usage: SeqUsage {
                prompt_tokens: prompt_len,
                ..Default::default()
            },
            finished: false,
            start: Instant::now(),
            first_token: None,
            last_token: None,
        })
    }

    /// The next chunk with text (or the final chunk); `None` after the end.
    pub async fn next(&mut self) -> Option<Result<Chunk, ApiError>> {
        if self.finished {
            return None;
        }
        loop {
            let Some(ev) = self.rx.recv().await else {
                // The engine dropped the request without finishing it.
                return Some(self.finish(String::new(), "abort"));
            };
            match ev {
                Event::Token {
                    token,
                    logprob,
                    top_logprobs,
                } => {
                    let now = Instant::now();
                    self.first_token.get_or_insert(now);
                    self.last_token = Some(now);
                    self.usage.completion_tokens += 1;
                    self.pending_tokens.push(TokenOut {
                        id: token,
                        logprob,
                        top: top_logprobs.iter().map(|t| (t.token, t.logprob)).collect(),
                    });
                    let delta = match self.detok.push(&self.state.tokenizer, token) {
                        Ok(d) => d,
                        Err(e) => return Some(self.fail(e.to_string())),
                    };
                    match self.stop.push(&delta) {
                        StopStep::Continue(t) if t.is_empty() => continue,
                        StopStep::Continue(t) => {
                            return Some(Ok(Chunk {
                                text: t,
                                tokens: std::mem::take(&mut self.pending_tokens),
                                finish: None,
                                usage: None,
                            }))
                        }
                        StopStep::Stopped(t) => {
                            // Matched a stop string: the engine need not go on.
                            self.state.engine.abort(self.id);
                            return Some(self.finish(t, "stop"));
                        }
                    }
                }
                Event::Finished { reason, usage } => {
                    // The engine counts a final EOS/stop token it did not send.
                    self.usage.completion_tokens =
                        self.usage.completion_tokens.max(usage.completion_tokens);
                    self.usage.cached_tokens = usage.cached_tokens;
                    let tail = match self.detok.flush(&self.state.tokenizer) {
                        Ok(t) => t,
                        Err(e) => return Some(self.fail(e.to_string())),
                    };
                    let (mut out, stopped) = match self.stop.push(&tail) {
                        StopStep::Continue(t) => (t, false),
                        StopStep::Stopped(t) => (t, true),
                    };
                    if !stopped {
                        out.push_str(&self.stop.flush());
                    }
                    let reason = match reason {
                        _ if stopped => "stop",
                        FinishReason::Stop => "stop",
                        FinishReason::Length => "length",
                        FinishReason::Abort => "abort",
                    };
                    return Some(self.finish(out, reason));
                }
                Event::Error(msg) => return Some(self.fail(msg)),
            }
        }
    }

    fn fail(&mut self, msg: String) -> Result<Chunk, ApiError> {
        if !self.finished {
            self.state.engine.abort(self.id);
            self.finished = true;
            self.release();
            self.state.metrics.finished("error");
        }
        Err(ApiError::Internal(msg))
    }

    fn finish(&mut self, text: String, reason: &'static str) -> Result<Chunk, ApiError> {
        self.finished = true;
        self.release();
        let m = &self.state.metrics;
        m.finished(reason);
        m.generation_tokens
            .fetch_add(u64::from(self.usage.completion_tokens), Ordering::Relaxed);
        m.cached_tokens
            .fetch_add(u64::from(self.usage.cached_tokens), Ordering::Relaxed);
        if let Some(first) = self.first_token {
            m.ttft.observe((first - self.start).as_secs_f64());
            let n = self.usage.completion_tokens;
            if let (Some(last), true) = (self.last_token, n > 1) {
                m.tpot
                    .observe((last - first).as_secs_f64() / f64::from(n - 1));
            }
        }
        m.e2e.observe(self.start.elapsed().as_secs_f64());
        Ok(Chunk {
            text,
            tokens: std::mem::take(&mut self.pending_tokens),
            finish: Some(reason),
            usage: Some(self.usage),
        })
    }

    fn release(&mut self) {
        self.state.metrics.in_flight.fetch_sub(1, Ordering::Relaxed);
    }

    /// Runs to the end and returns the whole text, the tokens (when logprobs
    /// were asked for) and the finish reason.
    pub async fn collect(mut self) -> Result<Chunk, ApiError> {
        let mut all = Chunk::default();
        while let Some(c) = self.next().await {
            let c = c?;
            all.text.push_str(&c.text);
            all.tokens.extend(c.tokens);
            all.finish = c.finish;
            all.usage = c.usage;
        }
        Ok(all)
    }
}

impl Drop for Sequence {
    fn drop(&mut self) {
        if !self.finished {
            // The client went away (or the response was dropped): abort so the
            // engine frees the request's pages.
            self.state.engine.abort(self.id);
            self.state
                .metrics
                .disconnects
                .fetch_add(1, Ordering::Relaxed);
            self.release();
        }
    }
}
