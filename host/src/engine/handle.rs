//! The engine thread and the handle the server (and the offline API) use.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use super::api::{EngineConfig, EngineMetrics, Event, GenerateRequest, SubmitError};
use super::worker::Worker;
use crate::model::ModelRunner;
use crate::plugin::PluginSet;
use crate::scheduler::{params_ok, Policy, Scheduler, SchedulerConfig, StepTicket};

enum Command {
    Submit {
        id: u64,
        spec: GenerateRequest,
        arrival: Instant,
        tx: UnboundedSender<Event>,
    },
    Abort(u64),
    /// Drop the radix cache's unlocked entries; replies with the pages freed.
    FlushCache(tokio::sync::oneshot::Sender<u32>),
    Shutdown,
}

/// State shared by the handle(s) and the engine thread.
struct Shared {
    next_id: AtomicU64,
    /// Requests submitted and not yet admitted (the queue `max_waiting` bounds).
    waiting: AtomicUsize,
    shutting_down: AtomicBool,
    metrics: Mutex<EngineMetrics>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// A cheap, cloneable handle to a running engine (`Send + Sync`).
#[derive(Clone)]
pub struct EngineHandle {
    commands: Sender<Command>,
    shared: Arc<Shared>,
    plugins: Arc<PluginSet>,
    vocab_size: u32,
    max_context: u32,
    max_waiting: usize,
    max_top_logprobs: u32,
}

/// Starts the engine loop on its own thread (and the runner on another).
/// `eos_ids` end a request unless it sets `ignore_eos`.
///
/// # Panics
/// If the configuration is unusable (a page size of 0 or above 256, more
/// pages than the runner has); use [`try_spawn`] to get an error instead.
pub fn spawn(
    runner: Box<dyn ModelRunner>,
    plugins: Arc<PluginSet>,
    cfg: EngineConfig,
    eos_ids: Vec<u32>,
) -> EngineHandle {
    try_spawn(runner, plugins, cfg, eos_ids).unwrap_or_else(|e| panic!("{e}"))
}

/// [`spawn`], reporting a bad configuration as an error naming the field.
pub fn try_spawn(
    runner: Box<dyn ModelRunner>,
    plugins: Arc<PluginSet>,
    cfg: EngineConfig,
    eos_ids: Vec<u32>,
) -> Result<EngineHandle, String> {
    let policy: Arc<dyn Policy> = plugins.clone();
    spawn_with_policy(runner, policy, plugins, cfg, eos_ids)
}

/// [`try_spawn`] with the decisions taken by `policy` instead of `plugins`
/// (tests and experiments; `plugins` is still what [`EngineHandle::plugins`]
/// returns).
pub fn spawn_with_policy(
    runner: Box<dyn ModelRunner>,
    policy: Arc<dyn Policy>,
    plugins: Arc<PluginSet>,
    cfg: EngineConfig,
    eos_ids: Vec<u32>,
) -> Result<EngineHandle, String> {
    let page_size = runner.page_size();
    let runner_pages = runner.num_pages();
    let num_pages = cfg.num_pages.unwrap_or(runner_pages);
    if num_pages == 0 || num_pages > runner_pages {
        return Err(format!(
            "num_pages must be in 1..={runner_pages} (the runner's KV pages), got {num_pages}"
        ));
    }
    if cfg.max_running == 0 {
        return Err("max_running must be at least 1, got 0".into());
    }
    if cfg.max_prefill_tokens == 0 {
        return Err("max_prefill_tokens must be at least 1, got 0".into());
    }
    let capacity = num_pages.saturating_mul(page_size);
    let max_position = u32::try_from(runner.config().max_position_embeddings()).unwrap_or(u32::MAX);
    let max_context = cfg
        .max_context
        .unwrap_or(capacity)
        .min(capacity)
        .min(max_position);
    let vocab_size = runner.vocab_size();
    let sched_cfg = SchedulerConfig {
        num_pages,
        page_size,
        max_running: cfg.max_running,
        max_prefill_tokens: cfg.max_prefill_tokens,
        cache: cfg.cache,
        seed: cfg.seed,
        vocab_size,
        eos_ids,
    };
    let clock = Instant::now();
    let scheduler = Scheduler::new(sched_cfg, policy, clock).map_err(|e| e.to_string())?;
    let (tx, rx) = crossbeam_channel::unbounded();
    let shared = Arc::new(Shared {
        next_id: AtomicU64::new(1),
        waiting: AtomicUsize::new(0),
        shutting_down: AtomicBool::new(false),
        metrics: Mutex::new(scheduler.metrics()),
        thread: Mutex::new(None),
    });
    let overlap = cfg.overlap;
    let loop_shared = shared.clone();
    let thread = std::thread::Builder::new()
        .name("minisgl-engine".into())
        .spawn(move || {
            let worker = Worker::spawn(runner);
            EngineLoop {
                scheduler,
                worker,
                commands: rx,
                shared: loop_shared,
                overlap,
            }
            .run()
        })
        .map_err(|e| format!("cannot start the engine thread: {e}"))?;
    *shared.thread.lock() = Some(thread);
    Ok(EngineHandle {
        commands: tx,
        shared,
        plugins,
        vocab_size,
        max_context,
        max_waiting: cfg.max_waiting,
        max_top_logprobs: cfg.max_top_logprobs,
    })
}

impl EngineHandle {
    /// Queues a request. Returns its id and its event stream; the stream
    /// ends with `Finished` or `Error`. Dropping the receiver aborts the
    /// request at its next token.
    pub fn submit(
        &self,
        req: GenerateRequest,
    ) -> Result<(u64, UnboundedReceiver<Event>), SubmitError> {
        if self.shared.shutting_down.load(Ordering::SeqCst) {
            return Err(SubmitError::ShuttingDown);
        }
        self.check(&req).map_err(SubmitError::Invalid)?;
        let queued = self.shared.waiting.fetch_add(1, Ordering::SeqCst);
        if queued >= self.max_waiting {
            self.shared.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(SubmitError::QueueFull {
                limit: self.max_waiting,
            });
        }
        let id = self.shared.next_id.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = unbounded_channel();
        let cmd = Command::Submit {
            id,
            spec: req,
            arrival: Instant::now(),
            tx,
        };
        if self.commands.send(cmd).is_err() {
            self.shared.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(SubmitError::ShuttingDown);
        }
        Ok((id, rx))
    }

    /// Field-by-field validation; the message names the field and the value.
    fn check(&self, req: &GenerateRequest) -> Result<(), String> {
        let vocab = self.vocab_size;
        if req.prompt_tokens.is_empty() {
            return Err("prompt_tokens must not be empty".into());
        }
        if let Some((i, t)) = req
            .prompt_tokens
            .iter()
            .enumerate()
            .find(|(_, &t)| t >= vocab)
        {
            return Err(format!(
                "prompt_tokens[{i}] = {t} is not below the vocabulary size {vocab}"
            ));
        }
        if req.max_new_tokens == 0 {
            return Err("max_new_tokens must be at least 1, got 0".into());
        }
        let total = req.prompt_tokens.len() as u64 + u64::from(req.max_new_tokens);
        if total > u64::from(self.max_context) {
            return Err(format!(
                "prompt_tokens ({}) + max_new_tokens ({}) = {total} exceeds the context limit {}",
                req.prompt_tokens.len(),
                req.max_new_tokens,
                self.max_context
            ));
        }
        let p = &req.params;
        if !params_ok(p) {
            return Err(format!(
                "sampling params out of range: temperature {} (0..=100), top_p {} (0 < p <= 1), \
                 min_p {} (0..=1), presence_penalty {}, frequency_penalty {} (finite), \
                 repetition_penalty {} (> 0)",
                p.temperature,
                p.top_p,
                p.min_p,
                p.presence_penalty,
                p.frequency_penalty,
                p.repetition_penalty
            ));
        }
        for (i, b) in req.logit_bias.iter().enumerate() {
            if b.token >= vocab {
                return Err(format!(
                    "logit_bias[{i}].token = {} is not below the vocabulary size {vocab}",
                    b.token
                ));
            }
            if !b.bias.is_finite() {
                return Err(format!("logit_bias[{i}].bias = {} is not finite", b.bias));
            }
        }
        if let Some(n) = req.logprobs {
            if n > self.max_top_logprobs {
                return Err(format!(
                    "logprobs = {n} exceeds the limit {}",
                    self.max_top_logprobs
                ));
            }
        }
        Ok(())
    }

    /// Aborts a request (no-op for unknown or finished ids).
    pub fn abort(&self, id: u64) {
        let _ = self.commands.send(Command::Abort(id));
    }

    /// Drops every radix-cache entry that no request holds and returns the
    /// pages freed. Pages of running requests (and the cached prefixes they
    /// lock) are never touched. `None` when the engine has stopped.
    pub async fn flush_cache(&self) -> Option<u32> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.commands.send(Command::FlushCache(tx)).ok()?;
        rx.await.ok()
    }

    /// A snapshot of the engine's counters (updated after every step).
    pub fn metrics(&self) -> EngineMetrics {
        self.shared.metrics.lock().clone()
    }

    pub fn plugins(&self) -> Arc<PluginSet> {
        self.plugins.clone()
    }

    pub fn vocab_size(&self) -> u32 {
        self.vocab_size
    }

    /// Longest prompt + max_new_tokens a request may ask for.
    pub fn max_context(&self) -> u32 {
        self.max_context
    }

    /// Aborts every request still in the engine (their streams get
    /// `Finished { reason: Abort }`), waits for the step in flight, and stops
    /// the engine and runner threads. Later submits fail with `ShuttingDown`.
    pub fn shutdown(&self) {
        self.shared.shutting_down.store(true, Ordering::SeqCst);
        let _ = self.commands.send(Command::Shutdown);
        if let Some(t) = self.shared.thread.lock().take() {
            let _ = t.join();
        }
    }
}

// The server shares one handle across tasks and threads.
const _: fn() = || {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<EngineHandle>();
};

/// The loop thread's state.
struct EngineLoop {
    scheduler: Scheduler,
    worker: Worker,
    commands: Receiver<Command>,
    shared: Arc<Shared>,
    overlap: bool,
}

impl EngineLoop {
    fn run(mut self) {
        let mut in_flight: Option<StepTicket> = None;
        let mut stop = false;
        loop {
            // Receive: block only when there is nothing else to do.
            let idle = self.scheduler.num_requests() == 0 && in_flight.is_none();
            if idle {
                if stop {
                    break;
                }
                match self.commands.recv() {
                    Ok(cmd) => stop |= self.handle(cmd),
                    Err(_) => break,
                }
            }
            while let Ok(cmd) = self.commands.try_recv() {
                stop |= self.handle(cmd);
            }
            if stop {
                self.scheduler.abort_all();
            }

            // Schedule step N+1 and launch it...
            let next = self.scheduler.schedule_step();
            let launched = next.map(|(input, ticket)| {
                self.worker.launch(input);
                ticket
            });
            // ...then process step N while N+1 runs (overlap), or wait for
            // the step just launched (serial).
            if self.overlap {
                if let Some(prev) = in_flight.take() {
                    self.finish_step(prev);
                }
                in_flight = launched;
            } else if let Some(ticket) = launched {
                self.finish_step(ticket);
            }
            self.publish();
        }
        self.publish();
    }

    fn finish_step(&mut self, ticket: StepTicket) {
        let (result, _elapsed) = self.worker.wait();
        self.scheduler.process_step(ticket, result);
    }

    /// Returns true for `Shutdown`.
    fn handle(&mut self, cmd: Command) -> bool {
        match cmd {
            Command::Submit {
                id,
                spec,
                arrival,
                tx,
            } => {
                self.scheduler.add(id, spec, arrival, tx);
                false
            }
            Command::Abort(id) => {
                self.scheduler.abort(id);
                false
            }
            Command::FlushCache(reply) => {
                let freed = self.scheduler.flush_cache();
                tracing::info!(pages = freed, "prefix cache flushed");
                // Publish first: a caller reading /metrics after the reply
                // sees the flushed cache.
                self.publish();
                let _ = reply.send(freed);
                false
            }
            Command::Shutdown => true,
        }
    }

    fn publish(&self) {
        let m = self.scheduler.metrics();
        // The submit-side queue bound counts requests not yet running.
        self.shared
            .waiting
            .store(m.queue_len as usize + self.commands.len(), Ordering::SeqCst);
        *self.shared.metrics.lock() = m;
    }
}
