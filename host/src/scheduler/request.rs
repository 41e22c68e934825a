//! One request's state inside the loop.

use minisgl_plugin_sdk::RequestView;
use tokio::sync::mpsc::UnboundedSender;

use crate::kv::{NodeId, PageId};
use crate::request::{Event, GenerateRequest};

/// Where a request is in its lifecycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Its input (prompt, plus generated tokens after a preemption) is not
    /// fully prefilled yet.
    Waiting,
    /// Decodes one token per step.
    Running,
}

/// A request in the engine.
#[derive(Debug)]
pub struct Request {
    pub id: u64,
    /// What the client asked for, fixed for the life of the request (its
    /// relative `deadline` is superseded by `deadline_us`).
    pub spec: GenerateRequest,
    /// Latest completion time on the engine clock (arrival + the request's
    /// relative deadline).
    pub deadline_us: Option<u64>,
    pub arrival_us: u64,
    pub last_scheduled_us: u64,
    pub phase: Phase,
    /// Generated tokens whose values are known.
    pub output: Vec<u32>,
    /// Tokens sampled by steps still in flight (values not known yet).
    pub pending: u32,
    /// The pending token will be chosen by the host (a plugin `pick`) or the
    /// next draw needs the full output history: the request cannot decode
    /// again before that token is known.
    pub needs_known_token: bool,
    /// Page table: positions `0..computed` live in these pages, in order.
    pub pages: Vec<PageId>,
    /// Leading entries of `pages` owned by the radix cache (read under `node`'s lock).
    pub shared_pages: usize,
    /// The radix node this request holds locked, if any.
    pub node: Option<NodeId>,
    /// Tokens whose KV is written, or will be by a step already launched.
    pub computed: u32,
    /// Prompt tokens served from the prefix cache at first admission.
    pub cached_tokens: u32,
    /// First admission happened (hit-rate metrics count each request once).
    pub admitted: bool,
    /// Prefix-cache hit cached for views: (tree version, hit length).
    pub hit_memo: Option<(u64, u32)>,
    pub tx: UnboundedSender<Event>,
}

impl Request {
    pub fn new(
        id: u64,
        spec: GenerateRequest,
        arrival_us: u64,
        tx: UnboundedSender<Event>,
    ) -> Self {
        let deadline_us = spec
            .deadline
            .map(|d| arrival_us.saturating_add(d.as_micros() as u64));
        Request {
            id,
            spec,
            deadline_us,
            arrival_us,
            last_scheduled_us: arrival_us,
            phase: Phase::Waiting,
            output: Vec::new(),
            pending: 0,
            needs_known_token: false,
            pages: Vec::new(),
            shared_pages: 0,
            node: None,
            computed: 0,
            cached_tokens: 0,
            admitted: false,
            hit_memo: None,
            tx,
        }
    }

    /// Tokens to prefill: the prompt and, after a preemption, the known output.
    pub fn input_len(&self) -> u32 {
        (self.spec.prompt_tokens.len() + self.output.len()) as u32
    }

    /// Token at sequence position `pos` (prompt then output), if known.
    pub fn token_at(&self, pos: usize) -> Option<u32> {
        let p = self.spec.prompt_tokens.len();
        if pos < p {
            Some(self.spec.prompt_tokens[pos])
        } else {
            self.output.get(pos - p).copied()
        }
    }

    /// Known tokens `start..end` of the sequence.
    pub fn tokens(&self, start: usize, end: usize) -> Vec<u32> {
        (start..end)
            .map(|p| self.token_at(p).unwrap_or(0))
            .collect()
    }

    /// The whole known sequence (prompt then output).
    pub fn sequence(&self) -> Vec<u32> {
        let mut s = self.spec.prompt_tokens.clone();
        s.extend_from_slice(&self.output);
        s
    }

    /// Generated tokens including those in flight.
    pub fn generated(&self) -> u32 {
        self.output.len() as u32 + self.pending
    }

    /// Tokens whose KV is valid and whose values are known (what can be
    /// handed to the prefix cache).
    pub fn kv_len(&self) -> u32 {
        self.computed.min(self.input_len())
    }

    /// May decode this step: running, below its token limit, and its last
    /// token either known or one the runner can substitute itself.
    pub fn can_decode(&self) -> bool {
        self.phase == Phase::Running
            && self.generated() < self.spec.max_new_tokens
            && (self.pending == 0 || !self.needs_known_token)
    }

    pub fn view(&self, prefix_hit_len: u32) -> RequestView {
        RequestView {
            id: self.id,
            arrival_us: self.arrival_us,
            prompt_len: match self.phase {
                Phase::Waiting => self.input_len(),
                Phase::Running => self.spec.prompt_tokens.len() as u32,
            },
            prefix_hit_len,
            computed_len: self.computed,
            generated_len: self.generated(),
            max_new_tokens: self.spec.max_new_tokens,
            priority: self.spec.priority,
            client_id: self.spec.client_id,
            deadline_us: self.deadline_us,
            pages_held: self.pages.len() as u32,
            last_scheduled_us: self.last_scheduled_us,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn relative_deadline_becomes_absolute_at_arrival() {
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let mut spec = GenerateRequest::greedy(vec![1, 2, 3], 4);
        spec.deadline = Some(Duration::from_millis(5));
        let r = Request::new(7, spec.clone(), 1_000, tx.clone());
        assert_eq!(r.view(0).deadline_us, Some(6_000));
        spec.deadline = None;
        assert_eq!(Request::new(8, spec, 1_000, tx).view(0).deadline_us, None);
    }
}
