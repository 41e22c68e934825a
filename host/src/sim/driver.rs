//! The simulator: the real scheduler loop, KV pool, radix cache and policies
//! (plugins included), stepped synchronously in virtual time; only the model
//! runner is replaced, by a [`CostModel`] of the step's device time.
//!
//! Time follows the engine's overlap pipeline. With overlap on, step N+1 is
//! scheduled and launched before the loop waits for step N, so the device
//! starts N+1 at `max(end of N, launch of N+1)`; the loop processes N's tokens
//! at the end of N. With overlap off every step is launched, run and
//! processed before the next one is scheduled. Policy calls are measured for
//! real; with [`PolicyTime::Charge`] they delay the launch they belong to,
//! which the device only notices when they outlast the step it is running
//! (or when it is idle). With [`PolicyTime::Report`] (the default) they are
//! measured and reported but not charged, and a run is a pure function of its
//! inputs: the same workload, profile, policies and seed give identical
//! records.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use crate::batch::{SeqOutput, StepInput, StepOutput};
use crate::engine::{EngineConfig, Event};
use crate::scheduler::{Policy, Scheduler, SchedulerConfig, StepTicket, VirtualClock};
use crate::workload::TimedRequest;

use super::cost::{CostModel, StepShape};
use super::record::{RunRecord, Sample};
use super::step_log::StepRecord;
use super::timed::TimedPolicy;

/// Whether measured policy time moves virtual time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum PolicyTime {
    /// Measured and reported only (deterministic runs).
    #[default]
    Report,
    /// Also charged to virtual time where the pipeline would not hide it.
    Charge,
}

/// The simulated engine's settings.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub engine: EngineConfig,
    /// KV pages of the simulated pool.
    pub num_pages: u32,
    pub page_size: u32,
    pub vocab_size: u32,
    pub policy_time: PolicyTime,
}

/// The sampled token the simulator reports: a fixed function of the request
/// and position (requests in a replay ignore EOS, so values do not matter).
fn fake_token(id: u64, pos: u64, vocab: u32) -> u32 {
    let h = (id.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ pos).wrapping_mul(0xff51_afd7_ed55_8ccd);
    (16 + (h >> 33) % u64::from(vocab.saturating_sub(16).max(1))) as u32
}

fn fake_output(input: &StepInput, vocab: u32) -> StepOutput {
    StepOutput {
        outputs: input
            .seqs
            .iter()
            .filter(|s| s.sample.is_some())
            .map(|s| SeqOutput {
                id: s.id,
                token: fake_token(s.id, u64::from(s.start_pos) + s.tokens.len() as u64, vocab),
                logprob: None,
                top_logprobs: Vec::new(),
                candidates: Vec::new(),
            })
            .collect(),
    }
}

/// A launched step: its ticket and when the device finishes it.
struct Flight {
    ticket: StepTicket,
    end_us: u64,
    /// The tokens the step samples (known at launch in a simulation).
    out: StepOutput,
}

/// Replays `workload` (sorted by arrival) on the simulated engine.
/// `on_progress(done, total, virtual_us)` is called after every step.
pub fn simulate(
    workload: &[TimedRequest],
    cost: &CostModel,
    policy: Arc<dyn Policy>,
    cfg: &SimConfig,
    on_progress: &mut dyn FnMut(usize, usize, u64),
) -> Result<RunRecord, String> {
    let wall = Instant::now();
    let timed = Arc::new(TimedPolicy::new(policy));
    let policy_ns = timed.counter();
    let vclock = VirtualClock::default();
    let sched_cfg = SchedulerConfig {
        num_pages: cfg.num_pages,
        page_size: cfg.page_size,
        max_running: cfg.engine.max_running,
        max_prefill_tokens: cfg.engine.max_prefill_tokens,
        cache: cfg.engine.cache,
        seed: cfg.engine.seed,
        vocab_size: cfg.vocab_size,
        eos_ids: Vec::new(),
    };
    let mut sched =
        Scheduler::with_clock(sched_cfg, timed, vclock.clock()).map_err(|e| e.to_string())?;
    let capacity = u64::from(cfg.num_pages) * u64::from(cfg.page_size);
    let overlap = cfg.engine.overlap;

    let mut rec = RunRecord::for_workload(workload);
    // Engine id -> (workload index, event stream); ordered for determinism.
    let mut live: BTreeMap<u64, (usize, UnboundedReceiver<Event>)> = BTreeMap::new();
    let mut next_arrival = 0usize;
    let mut done = 0usize;
    let mut now = 0u64; // the host's (loop's) time
    let mut device_free = 0u64;
    let mut flights: std::collections::VecDeque<Flight> = Default::default();
    let mut charged_ns = 0u64;
    let mut idle_rounds = 0u32;

    // Charges the policy time spent since the last call (in Charge mode).
    let mut charge = |now: &mut u64, seen: &mut u64| {
        let total = policy_ns.load(Ordering::Relaxed);
        let delta = total - *seen;
        *seen = total;
        if cfg.policy_time == PolicyTime::Charge {
            charged_ns += delta;
            *now += delta / 1000;
        }
    };
    let mut seen_ns = 0u64;

    loop {
        // Admit every request that has arrived by now.
        while next_arrival < workload.len() && workload[next_arrival].at_us <= now {
            let i = next_arrival;
            next_arrival += 1;
            let r = &workload[i].request;
            let len = r.prompt_tokens.len() as u64 + u64::from(r.max_new_tokens);
            if r.prompt_tokens.is_empty() || len > capacity {
                rec.requests[i].error = Some(format!(
                    "prompt ({}) + max_new_tokens ({}) does not fit the KV pool ({capacity} tokens)",
                    r.prompt_tokens.len(),
                    r.max_new_tokens
                ));
                done += 1;
                continue;
            }
            let (tx, rx) = unbounded_channel();
            let id = i as u64 + 1;
            vclock.set_us(workload[i].at_us);
            sched.add_at(id, r.clone(), workload[i].at_us, tx);
            live.insert(id, (i, rx));
        }
        if sched.num_requests() == 0 && flights.is_empty() {
            match workload.get(next_arrival) {
                Some(r) => {
                    now = now.max(r.at_us);
                    continue;
                }
                None => break,
            }
        }

        // Schedule the next step and launch it.
        vclock.set_us(now);
        let next = sched.schedule_step();
        charge(&mut now, &mut seen_ns);
        let launched = next.is_some();
        if let Some((input, ticket)) = next {
            let start = now.max(device_free);
            let shape = StepShape::of(&input);
            let dur = cost.step_us(&shape).round() as u64;
            device_free = start + dur.max(1);
            rec.steps.push(StepRecord {
                launch_us: now,
                done_us: device_free,
                step_us: dur.max(1),
                seqs: input.seqs.len() as u32,
                shape,
            });
            flights.push_back(Flight {
                ticket,
                end_us: device_free,
                out: fake_output(&input, cfg.vocab_size),
            });
        }

        // Wait for a step: the previous one (overlap) or this one (serial),
        // or the oldest when nothing new could be launched.
        let must_wait = if overlap {
            flights.len() >= 2 || (!launched && !flights.is_empty())
        } else {
            !flights.is_empty()
        };
        if must_wait {
            let f = flights.pop_front().expect("a step in flight");
            now = now.max(f.end_us);
            vclock.set_us(now);
            sched.process_step(f.ticket, Ok(f.out));
            charge(&mut now, &mut seen_ns);
            drain(&mut live, &mut rec, now, &mut done);
            let m = sched.metrics();
            rec.samples.push(Sample {
                t_us: now,
                queue_len: m.queue_len,
                running: m.running,
                kv_used_pages: m.kv_pages_used,
                kv_cached_pages: m.kv_pages_cached,
                output_tokens: m.output_tokens,
            });
            on_progress(done, workload.len(), now);
            idle_rounds = 0;
        } else if launched {
            idle_rounds = 0;
        } else {
            // Nothing runs and nothing could be scheduled. The real loop
            // spins (a stall is broken by preempting) and then blocks on its
            // queue: retry a few times, then wait for the next arrival.
            idle_rounds += 1;
            if idle_rounds > 3 {
                match workload.get(next_arrival) {
                    Some(r) => {
                        now = now.max(r.at_us);
                        idle_rounds = 0;
                    }
                    None if idle_rounds > 1000 => {
                        return Err(format!(
                            "the simulated engine stalled with {} requests left",
                            sched.num_requests()
                        ));
                    }
                    None => {}
                }
            }
        }
    }
    rec.metrics = sched.metrics();
    rec.policy_wall_us = policy_ns.load(Ordering::Relaxed) as f64 / 1e3;
    rec.policy_charged_us = charged_ns as f64 / 1e3;
    rec.wall_s = wall.elapsed().as_secs_f64();
    Ok(rec)
}

/// Folds the events of live requests into their records.
fn drain(
    live: &mut BTreeMap<u64, (usize, UnboundedReceiver<Event>)>,
    rec: &mut RunRecord,
    now: u64,
    done: &mut usize,
) {
    live.retain(|_, (i, rx)| {
        let r = &mut rec.requests[*i];
        while let Ok(ev) = rx.try_recv() {
            match ev {
                Event::Token { .. } => {
                    r.first_token_us.get_or_insert(now);
                    r.last_token_us = Some(now);
                }
                Event::Finished { usage, .. } => {
                    // The final token (counted in usage) may not be streamed.
                    r.first_token_us.get_or_insert(now);
                    r.last_token_us = Some(now);
                    r.finish_us = Some(now);
                    r.output_tokens = usage.completion_tokens;
                    r.cached_tokens = usage.cached_tokens;
                    *done += 1;
                    return false;
                }
                Event::Error(e) => {
                    r.error = Some(e);
                    r.finish_us = Some(now);
                    *done += 1;
                    return false;
                }
            }
        }
        true
    });
}
