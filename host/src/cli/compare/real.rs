//! Replaying a workload on the real engine (CPU or CUDA runner) in wall time:
//! requests are submitted at their arrival times, and every event is stamped
//! when the replay sees it. Produces the same [`RunRecord`] as the simulator.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::mpsc::UnboundedReceiver;

use minisgl::engine::{spawn_with_policy, EngineConfig, Event};
use minisgl::model::ModelRunner;
use minisgl::plugin::PluginSet;
use minisgl::sim::timed::TimedPolicy;
use minisgl::sim::{LoggingRunner, RunRecord, Sample};
use minisgl::workload::TimedRequest;

/// How often the engine's gauges are sampled.
const SAMPLE_EVERY: Duration = Duration::from_millis(10);

/// Runs `workload` on a fresh engine over `runner`.
pub fn replay(
    workload: &[TimedRequest],
    runner: Box<dyn ModelRunner>,
    plugins: Arc<PluginSet>,
    cfg: EngineConfig,
    eos_ids: Vec<u32>,
    on_progress: &mut dyn FnMut(usize, usize, u64),
) -> anyhow::Result<RunRecord> {
    let timed = Arc::new(TimedPolicy::new(plugins.clone()));
    let policy_ns = timed.counter();
    let start = Instant::now();
    let (runner, steps) = LoggingRunner::new(runner, start);
    let handle = spawn_with_policy(Box::new(runner), timed, plugins, cfg, eos_ids)
        .map_err(|e| anyhow::anyhow!("starting the engine: {e}"))?;
    let mut rec = RunRecord::for_workload(workload);
    let us = || start.elapsed().as_micros() as u64;
    let mut streams: Vec<(usize, UnboundedReceiver<Event>)> = Vec::new();
    let (mut next, mut done) = (0usize, 0usize);
    let mut last_sample = Instant::now();
    while done < workload.len() {
        while next < workload.len() && workload[next].at_us <= us() {
            match handle.submit(workload[next].request.clone()) {
                Ok((_, rx)) => streams.push((next, rx)),
                Err(e) => {
                    rec.requests[next].error = Some(e.to_string());
                    done += 1;
                }
            }
            next += 1;
        }
        let now = us();
        let mut progressed = false;
        streams.retain_mut(|(i, rx)| loop {
            let r = &mut rec.requests[*i];
            match rx.try_recv() {
                Ok(Event::Token { .. }) => {
                    progressed = true;
                    r.first_token_us.get_or_insert(now);
                    r.last_token_us = Some(now);
                }
                Ok(Event::Finished { usage, .. }) => {
                    r.first_token_us.get_or_insert(now);
                    r.last_token_us = Some(now);
                    r.finish_us = Some(now);
                    r.output_tokens = usage.completion_tokens;
                    r.cached_tokens = usage.cached_tokens;
                    done += 1;
                    return false;
                }
                Ok(Event::Error(e)) => {
                    r.error = Some(e);
                    r.finish_us = Some(now);
                    done += 1;
                    return false;
                }
                Err(TryRecvError::Empty) => return true,
                Err(TryRecvError::Disconnected) => {
                    r.error.get_or_insert_with(|| "the engine stopped".into());
                    done += 1;
                    return false;
                }
            }
        });
        if last_sample.elapsed() >= SAMPLE_EVERY {
            last_sample = Instant::now();
            let m = handle.metrics();
            rec.samples.push(Sample {
                t_us: now,
                queue_len: m.queue_len,
                running: m.running,
                kv_used_pages: m.kv_pages_used,
                kv_cached_pages: m.kv_pages_cached,
                output_tokens: m.output_tokens,
            });
            on_progress(done, workload.len(), now);
        }
        if !progressed {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    rec.metrics = handle.metrics();
    handle.shutdown();
    rec.steps = std::mem::take(&mut *steps.lock().expect("step log"));
    rec.policy_wall_us = policy_ns.load(Ordering::Relaxed) as f64 / 1e3;
    // Real time: every policy call is on the loop's clock already.
    rec.policy_charged_us = rec.policy_wall_us;
    rec.wall_s = start.elapsed().as_secs_f64();
    Ok(rec)
}
