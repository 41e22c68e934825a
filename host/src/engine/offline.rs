//! The offline API: a batch of requests in, their outputs out.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::mpsc::UnboundedReceiver;

use super::api::{
    EngineConfig, EngineMetrics, Event, FinishReason, GenerateOutput, GenerateRequest, SubmitError,
    Usage,
};
use super::handle::{try_spawn, EngineHandle};
use crate::model::ModelRunner;
use crate::plugin::PluginSet;

/// An engine for batch generation. Requests of one `generate` call run
/// concurrently (continuous batching); outputs come back in input order.
pub struct Engine {
    handle: EngineHandle,
}

impl Engine {
    /// Starts the engine threads. The error names the bad setting.
    pub fn new(
        runner: Box<dyn ModelRunner>,
        plugins: Arc<PluginSet>,
        cfg: EngineConfig,
        eos_ids: Vec<u32>,
    ) -> Result<Engine, String> {
        Ok(Engine {
            handle: try_spawn(runner, plugins, cfg, eos_ids)?,
        })
    }

    /// Wraps an engine started another way (e.g. [`super::spawn_with_policy`]).
    pub fn from_handle(handle: EngineHandle) -> Engine {
        Engine { handle }
    }

    /// The handle (metrics, plugins, vocabulary size).
    pub fn handle(&self) -> &EngineHandle {
        &self.handle
    }

    pub fn metrics(&self) -> EngineMetrics {
        self.handle.metrics()
    }

    /// Runs every request to completion. An invalid request gets an output
    /// with `error` set and no tokens; the others are unaffected.
    pub fn generate(&self, requests: Vec<GenerateRequest>) -> Vec<GenerateOutput> {
        self.generate_with_progress(requests, &mut |_, _| {})
    }

    /// [`Engine::generate`], calling `progress(finished_requests,
    /// generated_tokens)` as results arrive and while waiting for them.
    pub fn generate_with_progress(
        &self,
        requests: Vec<GenerateRequest>,
        progress: &mut dyn FnMut(usize, u64),
    ) -> Vec<GenerateOutput> {
        let n = requests.len();
        let mut outputs: Vec<Option<GenerateOutput>> = vec![None; n];
        let mut streams: Vec<(usize, UnboundedReceiver<Event>, GenerateOutput)> = Vec::new();
        let mut pending = requests.into_iter().enumerate().peekable();
        let (mut done, mut tokens) = (0usize, 0u64);
        while pending.peek().is_some() || !streams.is_empty() {
            // Submit as many as the queue takes.
            while let Some((i, req)) = pending.peek() {
                match self.handle.submit(req.clone()) {
                    Ok((_, rx)) => {
                        streams.push((*i, rx, empty_output()));
                        pending.next();
                    }
                    Err(SubmitError::QueueFull { .. }) => break,
                    Err(e) => {
                        let mut out = empty_output();
                        out.finish_reason = FinishReason::Abort;
                        out.error = Some(e.to_string());
                        outputs[*i] = Some(out);
                        done += 1;
                        pending.next();
                    }
                }
            }
            // Drain what has arrived.
            let mut progressed = false;
            streams.retain_mut(|(i, rx, out)| loop {
                match rx.try_recv() {
                    Ok(event) => {
                        progressed = true;
                        if let Event::Token { .. } = event {
                            tokens += 1;
                        }
                        if apply(out, event) {
                            outputs[*i] = Some(std::mem::replace(out, empty_output()));
                            done += 1;
                            return false;
                        }
                    }
                    Err(TryRecvError::Empty) => return true,
                    Err(TryRecvError::Disconnected) => {
                        let mut out = std::mem::replace(out, empty_output());
                        out.finish_reason = FinishReason::Abort;
                        out.error.get_or_insert_with(|| "the engine stopped".into());
                        outputs[*i] = Some(out);
                        done += 1;
                        return false;
                    }
                }
            });
            // Called on idle rounds too, so a caller can tell a stall from silence.
            progress(done, tokens);
            if !progressed {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        progress(done, tokens);
        outputs
            .into_iter()
            .map(|o| o.expect("every request has an output"))
            .collect()
    }

    /// Stops the engine (also done on drop).
    pub fn shutdown(&self) {
        self.handle.shutdown();
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.handle.shutdown();
    }
}

fn empty_output() -> GenerateOutput {
    GenerateOutput {
        tokens: Vec::new(),
        finish_reason: FinishReason::Length,
        usage: Usage::default(),
        logprobs: Vec::new(),
        top_logprobs: Vec::new(),
        error: None,
    }
}

/// Folds one event into `out`; true when the request is over.
fn apply(out: &mut GenerateOutput, event: Event) -> bool {
    match event {
        Event::Token {
            token,
            logprob,
            top_logprobs,
        } => {
            out.tokens.push(token);
            if let Some(lp) = logprob {
                out.logprobs.push(lp);
            }
            if !top_logprobs.is_empty() {
                out.top_logprobs.push(top_logprobs);
            }
            false
        }
        Event::Finished { reason, usage } => {
            out.finish_reason = reason;
            out.usage = usage;
            true
        }
        Event::Error(msg) => {
            out.finish_reason = FinishReason::Abort;
            out.error = Some(msg);
            true
        }
    }
}
