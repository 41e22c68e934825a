//! The scheduler loop: the request lifecycle, step by step.
//!
//! [`Scheduler::schedule_step`] and [`Scheduler::process_step`] read top to
//! bottom as the lifecycle of a step:
//!
//! 1. build the views (prefix-hit lengths from the radix tree) and the budget;
//! 2. ask the scheduler policy; check its decision with the one set of rules
//!    ([`validate`], the plugin contract's S1-S10) and execute it unchanged;
//! 3. lock the cached prefixes of the requests it prefills (so nothing later
//!    in the step can evict them), then preempt what it asked to preempt;
//! 4. allocate pages: decodes first, then prefill chunks (evicting radix
//!    leaves chosen by the evictor when short). Rule S10 guarantees the
//!    pages exist; the shortage paths remain only as a counted safety net;
//! 5. build the [`StepInput`] and the sampling recipe ([`sampling`]: greedy
//!    fast path, otherwise the sampler policy's plans);
//! 6. advance each request's state as if the step had run (this is what lets
//!    the next step be scheduled while this one runs: overlap);
//!
//! and, once the runner returns the step's tokens:
//!
//! 7. let the sampler policy pick among candidates where it asked to; append
//!    tokens, check stop conditions, stream events, and release finished
//!    requests (their KV goes into the radix cache, or back to the pool).
//!
//! The loop is at most one step ahead of the runner, and the runner executes
//! steps in order, so a page released while processing step N can only be
//! reused by step N+2, after step N+1 (which may still write it) has run.

pub mod clock;
mod kv_ops;
pub mod policy;
pub mod request;
mod sampling;
pub mod validate;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

pub use clock::{Clock, VirtualClock};

use minisgl_plugin_sdk::{Budget, RequestView};

use crate::batch::{SeqInput, StepInput, StepOutput};
use crate::kv::{CacheMode, PagePool, RadixTree};
use crate::metrics::{EngineMetrics, FixupCause};
use crate::request::{Event, FinishReason, GenerateRequest, Usage};
pub use policy::{NativePolicy, Policy};
use request::{Phase, Request};
pub use sampling::params_ok;
use tokio::sync::mpsc::UnboundedSender;

/// Settings the loop needs (the engine's `EngineConfig` narrows to these).
#[derive(Clone, Debug)]
pub struct SchedulerConfig {
    pub num_pages: u32,
    pub page_size: u32,
    pub max_running: u32,
    pub max_prefill_tokens: u32,
    pub cache: CacheMode,
    pub seed: u64,
    pub vocab_size: u32,
    pub eos_ids: Vec<u32>,
}

/// What the loop remembers about one sequence of a launched step.
#[derive(Clone, Debug)]
struct SeqMeta {
    id: u64,
    tokens: u32,
    /// The step samples a token for this sequence.
    sampled: bool,
    /// `Some(seed)` when the sampler policy picks among candidates.
    pick_seed: Option<u64>,
}

/// The loop's record of a launched step; hand it back with the step's output.
#[derive(Debug)]
pub struct StepTicket {
    pub step: u64,
    seqs: Vec<SeqMeta>,
}

/// The engine's request state and KV memory, driven one step at a time.
pub struct Scheduler {
    cfg: SchedulerConfig,
    policy: Arc<dyn Policy>,
    /// Used when the policy's decision would stall an idle engine.
    fallback: NativePolicy,
    pool: PagePool,
    tree: RadixTree,
    reqs: HashMap<u64, Request>,
    /// Waiting requests in arrival order.
    waiting: Vec<u64>,
    /// Running requests in admission order.
    running: Vec<u64>,
    clock: Clock,
    step: u64,
    in_flight: u32,
    metrics: EngineMetrics,
}

impl Scheduler {
    pub fn new(
        cfg: SchedulerConfig,
        policy: Arc<dyn Policy>,
        clock: Instant,
    ) -> Result<Self, crate::kv::PoolError> {
        Self::with_clock(cfg, policy, Clock::Wall(clock))
    }

    /// [`Scheduler::new`] on any clock (the simulator's is virtual).
    pub fn with_clock(
        cfg: SchedulerConfig,
        policy: Arc<dyn Policy>,
        clock: Clock,
    ) -> Result<Self, crate::kv::PoolError> {
        let pool = PagePool::new(cfg.num_pages, cfg.page_size)?;
        let tree = RadixTree::new(cfg.page_size);
        let metrics = EngineMetrics {
            kv_pages_total: u64::from(cfg.num_pages),
            ..EngineMetrics::default()
        };
        Ok(Scheduler {
            cfg,
            policy,
            fallback: NativePolicy::default(),
            pool,
            tree,
            reqs: HashMap::new(),
            waiting: Vec::new(),
            running: Vec::new(),
            clock,
            step: 0,
            in_flight: 0,
            metrics,
        })
    }

    fn now_us(&self) -> u64 {
        self.clock.now_us()
    }

    /// Requests not finished yet.
    pub fn num_requests(&self) -> usize {
        self.reqs.len()
    }

    /// Steps launched and not processed yet.
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    pub fn pool(&self) -> &PagePool {
        &self.pool
    }

    pub fn tree(&self) -> &RadixTree {
        &self.tree
    }

    /// Counters plus current gauges.
    pub fn metrics(&self) -> EngineMetrics {
        let usage = self.pool.usage();
        EngineMetrics {
            queue_len: self.waiting.len() as u64,
            running: self.running.len() as u64,
            kv_pages_used: u64::from(usage.in_use),
            kv_pages_cached: u64::from(usage.cached),
            kv_pages_evictable: u64::from(self.tree.evictable_pages()),
            kv_pages_free: u64::from(usage.free),
            ..self.metrics.clone()
        }
    }

    /// Verifies the running-slot limit and the KV ledger: pool and tree
    /// consistent, and every page owned by exactly what claims it (requests'
    /// own pages are `InUse`).
    pub fn check(&self) -> Result<(), String> {
        if self.running.len() > self.cfg.max_running as usize {
            return Err(format!(
                "{} requests running, over max_running = {}",
                self.running.len(),
                self.cfg.max_running
            ));
        }
        self.pool.check().map_err(|e| e.to_string())?;
        self.tree.check(&self.pool)?;
        let own: usize = self
            .reqs
            .values()
            .map(|r| r.pages.len() - r.shared_pages)
            .sum();
        let usage = self.pool.usage();
        if own != usage.in_use as usize {
            return Err(format!(
                "requests own {own} pages, the pool has {} in use",
                usage.in_use
            ));
        }
        Ok(())
    }

    /// Adds a request (already validated) to the waiting queue; its relative
    /// deadline is counted from `arrival`.
    pub fn add(
        &mut self,
        id: u64,
        spec: GenerateRequest,
        arrival: Instant,
        tx: UnboundedSender<Event>,
    ) {
        let arrival_us = self.clock.since_start_us(arrival);
        self.add_at(id, spec, arrival_us, tx);
    }

    /// [`Scheduler::add`] with the arrival given on the loop's clock, in
    /// microseconds (the simulator's requests arrive in virtual time).
    pub fn add_at(
        &mut self,
        id: u64,
        spec: GenerateRequest,
        arrival_us: u64,
        tx: UnboundedSender<Event>,
    ) {
        let req = Request::new(id, spec, arrival_us, tx);
        self.reqs.insert(id, req);
        self.enqueue_waiting(id);
    }

    fn enqueue_waiting(&mut self, id: u64) {
        let key = |s: &Self, id: u64| (s.reqs[&id].arrival_us, id);
        let k = key(self, id);
        let at = self.waiting.partition_point(|&w| key(self, w) < k);
        self.waiting.insert(at, id);
    }

    /// Aborts a request (client gone): releases its KV and ends its stream.
    pub fn abort(&mut self, id: u64) {
        if self.reqs.contains_key(&id) {
            self.finish(id, FinishReason::Abort);
        }
    }

    /// Aborts every request (shutdown).
    pub fn abort_all(&mut self) {
        let ids: Vec<u64> = self.reqs.keys().copied().collect();
        for id in ids {
            self.finish(id, FinishReason::Abort);
        }
    }

    // ---------------------------------------------------------------- step

    /// Plans and prepares the next step, or `None` when there is nothing to
    /// run now. The returned input goes to the runner; the ticket comes back
    /// to [`Scheduler::process_step`] with the runner's output.
    pub fn schedule_step(&mut self) -> Option<(StepInput, StepTicket)> {
        if self.reqs.is_empty() {
            return None;
        }
        let now = self.now_us();

        // 1. Views and budget.
        let (waiting, running) = self.views();
        if waiting.is_empty() && running.is_empty() {
            return None;
        }
        let budget = self.budget(now, running.len());

        // 2. Ask the policy; check its answer with the contract's rules.
        let decision = self.policy.schedule(&waiting, &running, &budget);
        let mut plan = match validate::accept(&decision, &waiting, &running, &budget) {
            Ok(plan) => plan,
            Err(e) => {
                tracing::error!(error = %e, "scheduling decision refused by the loop");
                self.fixup(FixupCause::Invalid);
                let decision = self.fallback.schedule(&waiting, &running, &budget);
                validate::accept(&decision, &waiting, &running, &budget).unwrap_or_default()
            }
        };
        if plan.is_empty() && self.in_flight == 0 {
            // Nothing would ever change: the built-in answers this step.
            let decision = self.fallback.schedule(&waiting, &running, &budget);
            let builtin =
                validate::accept(&decision, &waiting, &running, &budget).unwrap_or_default();
            if !builtin.is_empty() {
                self.fixup(FixupCause::Idle);
                plan = builtin;
            }
        }

        // 3. Lock the cached prefixes the chunks start from, exactly as the
        // views reported them (before a preemption can grow the tree or an
        // allocation evict from it), then preempt.
        for &(id, _) in &plan.prefill {
            self.admit(id, now);
        }
        for &id in &plan.preempt {
            self.preempt(id);
        }

        // 4. Allocate pages.
        let decodes = self.alloc_decodes(&plan.decode);
        let prefills = self.alloc_prefills(&plan.prefill);
        if decodes.is_empty() && prefills.is_empty() {
            if self.in_flight == 0 && plan.preempt.is_empty() {
                self.fixup(FixupCause::Stall);
                self.break_stall();
            }
            return None;
        }

        // 5. Build the step: decodes, then prefill chunks.
        let ps = self.cfg.page_size as usize;
        let mut seqs = Vec::with_capacity(decodes.len() + prefills.len());
        let mut metas = Vec::with_capacity(seqs.capacity());
        for &id in &decodes {
            let r = &self.reqs[&id];
            let pos = r.computed as usize;
            let (token, from_last) = match r.pending {
                0 => (r.token_at(pos).expect("last token known"), false),
                _ => (0, true),
            };
            seqs.push(SeqInput {
                id,
                tokens: vec![token],
                first_from_last_step: from_last,
                start_pos: r.computed,
                page_table: r.pages[..(pos + 1).div_ceil(ps)].to_vec(),
                sample: None,
            });
            metas.push(SeqMeta {
                id,
                tokens: 1,
                sampled: true,
                pick_seed: None,
            });
        }
        for &(id, start, n) in &prefills {
            let r = &self.reqs[&id];
            let end = (start + n) as usize;
            seqs.push(SeqInput {
                id,
                tokens: r.tokens(start as usize, end),
                first_from_last_step: false,
                start_pos: start,
                page_table: r.pages[..end.div_ceil(ps)].to_vec(),
                sample: None,
            });
            metas.push(SeqMeta {
                id,
                tokens: n,
                sampled: start + n == r.input_len(),
                pick_seed: None,
            });
        }
        self.attach_sampling(&mut seqs, &mut metas);

        // 6. Advance state as if the step had run.
        for &id in &decodes {
            let r = self.reqs.get_mut(&id).expect("scheduled request exists");
            r.computed += 1;
            r.pending += 1;
            r.last_scheduled_us = now;
        }
        for &(id, _, n) in &prefills {
            let r = self.reqs.get_mut(&id).expect("scheduled request exists");
            r.computed += n;
            r.last_scheduled_us = now;
            if r.computed == r.input_len() {
                r.phase = Phase::Running;
                r.pending += 1;
                self.waiting.retain(|&w| w != id);
                self.running.push(id);
            }
            // Share the prefilled prefix at once (a shared system prompt is
            // reused by requests admitted next step, not only after this one
            // finishes; a preempted request finds its own work again).
            self.cache_prefix(id, now);
        }

        self.step += 1;
        self.in_flight += 1;
        self.metrics.steps += 1;
        debug_assert!(self.check().is_ok(), "{:?}", self.check());
        Some((
            StepInput { seqs },
            StepTicket {
                step: self.step - 1,
                seqs: metas,
            },
        ))
    }

    /// Takes a launched step's output: picks, appends tokens, stops, streams,
    /// releases. A runner error fails every request (their KV may be garbage).
    pub fn process_step(&mut self, ticket: StepTicket, output: Result<StepOutput, String>) {
        self.in_flight -= 1;
        let output = match output {
            Ok(o) => o,
            Err(msg) => return self.fail_all(&msg),
        };
        let mut by_id: HashMap<u64, crate::batch::SeqOutput> =
            output.outputs.into_iter().map(|o| (o.id, o)).collect();
        let picks = self.pick_candidates(&ticket, &by_id);
        let now = self.now_us();
        for meta in ticket.seqs.iter().filter(|m| m.sampled) {
            let Some(r) = self.reqs.get_mut(&meta.id) else {
                // Finished or aborted after this step was launched.
                self.metrics.wasted_tokens += u64::from(meta.tokens);
                continue;
            };
            r.pending -= 1;
            let Some(out) = by_id.remove(&meta.id) else {
                let msg = format!("the model returned no token for request {}", meta.id);
                self.fail(meta.id, &msg);
                continue;
            };
            let (token, logprob) = match picks.get(&meta.id) {
                Some(&(t, lp)) => (t, lp),
                None => (out.token, out.logprob),
            };
            if token >= self.cfg.vocab_size {
                let msg = format!("the model returned token {token} outside the vocabulary");
                self.fail(meta.id, &msg);
                continue;
            }
            r.output.push(token);
            r.last_scheduled_us = r.last_scheduled_us.max(now);
            self.metrics.output_tokens += 1;
            let spec = &r.spec;
            let stop = spec.stop_token_ids.contains(&token)
                || (!spec.ignore_eos && self.cfg.eos_ids.contains(&token));
            if stop {
                self.finish(meta.id, FinishReason::Stop);
                continue;
            }
            let event = Event::Token {
                token,
                logprob: spec.logprobs.and(logprob),
                top_logprobs: out.top_logprobs,
            };
            if r.tx.send(event).is_err() {
                // The client is gone.
                self.finish(meta.id, FinishReason::Abort);
            } else if r.output.len() as u32 >= r.spec.max_new_tokens {
                self.finish(meta.id, FinishReason::Length);
            }
        }
        debug_assert!(self.check().is_ok(), "{:?}", self.check());
    }

    // --------------------------------------------------------- the parts

    /// Waiting and running requests as the policy sees them. Left out: waiting
    /// requests whose last token is still in flight (preempted mid-step) and
    /// running requests that cannot decode this step. The slots the running
    /// ones left out hold are taken out of the budget's `max_running`, so
    /// rule S9 can be met from the views alone.
    fn views(&mut self) -> (Vec<RequestView>, Vec<RequestView>) {
        let version = self.tree.version();
        let mut waiting = Vec::with_capacity(self.waiting.len());
        for &id in &self.waiting {
            let r = self.reqs.get_mut(&id).expect("waiting request exists");
            if r.pending > 0 {
                continue;
            }
            let hit = if r.node.is_some() || r.computed > 0 {
                (r.shared_pages as u32) * self.cfg.page_size
            } else if self.cfg.cache == CacheMode::Naive {
                0
            } else {
                match r.hit_memo {
                    Some((v, hit)) if v == version => hit,
                    _ => {
                        let hit = kv_ops::match_len(&self.tree, r);
                        r.hit_memo = Some((version, hit));
                        hit
                    }
                }
            };
            waiting.push(r.view(hit));
        }
        let running = self
            .running
            .iter()
            .map(|id| &self.reqs[id])
            .filter(|r| r.can_decode())
            .map(|r| r.view((r.shared_pages as u32) * self.cfg.page_size))
            .collect();
        (waiting, running)
    }

    /// `offered_running`: how many running requests the views include.
    fn budget(&self, now_us: u64, offered_running: usize) -> Budget {
        let hidden = (self.running.len() - offered_running) as u32;
        Budget {
            max_prefill_tokens: self.cfg.max_prefill_tokens,
            max_running: self.cfg.max_running.saturating_sub(hidden),
            free_pages: self.pool.free_pages(),
            evictable_pages: self.tree.evictable_pages(),
            page_size: self.cfg.page_size,
            now_us,
            step: self.step,
        }
    }

    /// Counts one host correction of a policy decision.
    pub(crate) fn fixup(&mut self, cause: FixupCause) {
        if cause != FixupCause::Idle {
            tracing::warn!(
                cause = cause.label(),
                "policy decision corrected by the host"
            );
        }
        self.metrics.fixups.bump(cause);
        self.metrics.decision_fixups += 1;
    }

    /// Gives each decode the page its next token needs. When pages run out
    /// (after eviction), preempts the most recently admitted candidates,
    /// possibly the request itself. Returns the decodes that got their pages.
    fn alloc_decodes(&mut self, ids: &[u64]) -> Vec<u64> {
        let ps = self.cfg.page_size;
        let mut queue: std::collections::VecDeque<u64> = ids.iter().copied().collect();
        let mut granted = Vec::with_capacity(ids.len());
        while let Some(id) = queue.pop_front() {
            loop {
                let r = &self.reqs[&id];
                let need = (r.computed + 1)
                    .div_ceil(ps)
                    .saturating_sub(r.pages.len() as u32);
                if need == 0 || self.alloc_pages(id, need) {
                    granted.push(id);
                    break;
                }
                // Unreachable for a decision that passed S10.
                self.fixup(FixupCause::Pages);
                match queue.pop_back() {
                    Some(victim) => self.preempt(victim),
                    None => {
                        self.preempt(id);
                        break;
                    }
                }
            }
        }
        granted
    }

    /// Gives each chunk its pages (the chunks' cached prefixes are already
    /// locked). Shrinking or dropping a chunk that does not fit is a safety
    /// net, unreachable for a decision that passed S10.
    /// Returns (request, start position, tokens).
    fn alloc_prefills(&mut self, chunks: &[(u64, u32)]) -> Vec<(u64, u32, u32)> {
        let ps = self.cfg.page_size;
        let mut out = Vec::with_capacity(chunks.len());
        for &(id, tokens) in chunks {
            let r = &self.reqs[&id];
            let start = r.computed;
            let mut tokens = tokens.min(r.input_len() - start);
            let held = r.pages.len() as u32;
            let need = (start + tokens).div_ceil(ps).saturating_sub(held);
            if !self.alloc_pages(id, need) {
                self.fixup(FixupCause::Pages);
                // Take what fits in the pages that are free now.
                let fit = (held + self.pool.free_pages()) * ps;
                tokens = tokens.min(fit.saturating_sub(start));
                let need = (start + tokens).div_ceil(ps).saturating_sub(held);
                if tokens == 0 || !self.alloc_pages(id, need) {
                    self.unadmit(id);
                    continue;
                }
            }
            out.push((id, start, tokens));
        }
        out
    }

    /// Nothing can run and nothing is in flight: free memory held by
    /// half-prefilled requests (the most recent first) so the oldest can go
    /// on. A request that could never run alone fails.
    fn break_stall(&mut self) {
        let holder = self
            .waiting
            .iter()
            .rev()
            .chain(self.running.iter().rev())
            .copied()
            .find(|id| !self.reqs[id].pages.is_empty());
        if let Some(id) = holder {
            tracing::debug!(id, "stalled: preempting a page holder");
            self.preempt(id);
            return;
        }
        if let Some(&id) = self.waiting.first() {
            let r = &self.reqs[&id];
            let msg = format!(
                "request {id} cannot be scheduled: {} input tokens, {} KV pages of {} tokens in total",
                r.input_len(),
                self.cfg.num_pages,
                self.cfg.page_size
            );
            self.fail(id, &msg);
        }
    }

    /// Releases a request's KV and sends it back to the waiting queue; it is
    /// recomputed (prompt plus the tokens generated so far) later.
    fn preempt(&mut self, id: u64) {
        let now = self.now_us();
        self.release(id, now);
        let r = self.reqs.get_mut(&id).expect("preempted request exists");
        self.metrics.preemptions += 1;
        if r.phase == Phase::Running {
            r.phase = Phase::Waiting;
            self.running.retain(|&x| x != id);
            self.enqueue_waiting(id);
        }
    }

    /// Ends a request: releases its KV (into the cache) and sends `Finished`.
    fn finish(&mut self, id: u64, reason: FinishReason) {
        let now = self.now_us();
        self.release(id, now);
        let r = self.reqs.remove(&id).expect("finished request exists");
        self.waiting.retain(|&x| x != id);
        self.running.retain(|&x| x != id);
        match reason {
            FinishReason::Abort => self.metrics.requests_aborted += 1,
            _ => self.metrics.requests_done += 1,
        }
        let usage = Usage {
            prompt_tokens: r.spec.prompt_tokens.len() as u32,
            completion_tokens: r.output.len() as u32,
            cached_tokens: r.cached_tokens,
        };
        // A closed stream just means the client left first.
        let _ = r.tx.send(Event::Finished { reason, usage });
    }

    /// Ends one request with an error.
    fn fail(&mut self, id: u64, msg: &str) {
        let now = self.now_us();
        self.release(id, now);
        if let Some(r) = self.reqs.remove(&id) {
            self.waiting.retain(|&x| x != id);
            self.running.retain(|&x| x != id);
            self.metrics.requests_aborted += 1;
            let _ = r.tx.send(Event::Error(msg.to_string()));
        }
    }

    /// The runner failed: every request fails, and the cache (whose KV may be
    /// incomplete) is emptied.
    fn fail_all(&mut self, msg: &str) {
        tracing::error!(error = msg, "model step failed");
        let ids: Vec<u64> = self.reqs.keys().copied().collect();
        let msg = format!("model step failed: {msg}");
        for id in ids {
            self.fail(id, &msg);
        }
        self.evict_all();
    }

    /// Ids of requests in this step that the policy picks for: `(token, logprob)`.
    fn pick_candidates(
        &mut self,
        ticket: &StepTicket,
        outputs: &HashMap<u64, crate::batch::SeqOutput>,
    ) -> HashMap<u64, (u32, Option<f32>)> {
        sampling::pick(self, ticket, outputs)
    }
}
