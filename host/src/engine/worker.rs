//! The model runner on its own thread.
//!
//! Steps go in through one channel and results come back through another, in
//! launch order. While the worker runs step N, the engine loop prepares step
//! N+1 (overlap); with overlap off the loop simply waits for each result
//! before scheduling again. Either way the runner executes steps strictly in
//! order, which is what makes the loop's page reuse safe.
//!
//! On a runner that launches asynchronously (CUDA), the worker enqueues step
//! N+1 as soon as it arrives, even while step N still runs on the device, and
//! collects N's result when the device is done: the GPU never waits for the
//! host between steps.

use std::collections::VecDeque;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use crate::batch::{StepInput, StepOutput};
use crate::model::runner::Launched;
use crate::model::ModelRunner;

/// A step's result as the loop sees it (errors as text: they end requests).
pub type StepResult = Result<StepOutput, String>;

pub struct Worker {
    jobs: Option<Sender<StepInput>>,
    results: Receiver<(StepResult, Duration)>,
    thread: Option<JoinHandle<()>>,
}

/// How often a worker with a step in flight checks for a new job or the end
/// of that step (it must launch a job that arrives meanwhile at once, so it
/// cannot block on either alone).
const POLL: Duration = Duration::from_micros(20);

/// A launched step: when it was launched, and its result if already known
/// (the runner ran it at launch, or the launch failed).
type InFlight = (Instant, Option<StepResult>);

impl Worker {
    pub fn spawn(mut runner: Box<dyn ModelRunner>) -> Worker {
        let (job_tx, job_rx) = crossbeam_channel::unbounded::<StepInput>();
        let (res_tx, res_rx) = crossbeam_channel::unbounded();
        let thread = std::thread::Builder::new()
            .name("minisgl-runner".into())
            .spawn(move || serve(runner.as_mut(), &job_rx, &res_tx))
            .expect("spawn the model runner thread");
        Worker {
            jobs: Some(job_tx),
            results: res_rx,
            thread: Some(thread),
        }
    }

    /// Queues a step; returns at once.
    pub fn launch(&self, input: StepInput) {
        let sent = self.jobs.as_ref().map(|j| j.send(input));
        debug_assert!(matches!(sent, Some(Ok(()))), "runner thread is gone");
    }

    /// The oldest launched step's result (blocks until it is ready) and how
    /// long the runner spent on it.
    pub fn wait(&self) -> (StepResult, Duration) {
        self.results.recv().unwrap_or_else(|_| {
            (
                Err("the model runner thread stopped".into()),
                Duration::ZERO,
            )
        })
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.jobs.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The worker thread: launch every job as soon as it arrives, deliver results
/// in launch order as soon as they are ready.
fn serve(
    runner: &mut dyn ModelRunner,
    jobs: &Receiver<StepInput>,
    results: &Sender<(StepResult, Duration)>,
) {
    let mut inflight: VecDeque<InFlight> = VecDeque::new();
    let mut open = true;
    loop {
        // Deliver every finished step at the front.
        while let Some((t, known)) = inflight.front_mut() {
            let res = match known.take() {
                Some(r) => r,
                None if runner.ready() || !open => runner.finish().map_err(|e| e.to_string()),
                None => break,
            };
            let elapsed = t.elapsed();
            inflight.pop_front();
            if results.send((res, elapsed)).is_err() {
                return;
            }
        }
        if !open && inflight.is_empty() {
            return;
        }
        // The engine has at most two steps out; with two in flight no job can
        // come before a result goes back, so wait on the device.
        let job = if inflight.is_empty() {
            jobs.recv().ok()
        } else if inflight.len() >= 2 {
            if let Some((_, known @ None)) = inflight.front_mut() {
                *known = Some(runner.finish().map_err(|e| e.to_string()));
            }
            continue;
        } else {
            match jobs.recv_timeout(POLL) {
                Ok(j) => Some(j),
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => continue,
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => None,
            }
        };
        let Some(input) = job else {
            open = false;
            continue;
        };
        let t = Instant::now();
        let known = match runner.launch(&input) {
            Ok(Launched::Done(out)) => Some(Ok(out)),
            Ok(Launched::Pending) => None,
            Err(e) => Some(Err(e.to_string())),
        };
        inflight.push_back((t, known));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use super::Worker;
    use crate::batch::{SeqOutput, StepInput, StepOutput};
    use crate::model::runner::Launched;
    use crate::model::{ModelConfig, ModelError, ModelRunner};

    /// A runner whose steps take 200 ms "on the device" after launch.
    struct Async {
        log: Arc<Mutex<Vec<String>>>,
        pending: std::collections::VecDeque<(u64, Instant)>,
        next: u64,
        config: ModelConfig,
    }

    impl ModelRunner for Async {
        fn step(&mut self, _: &StepInput) -> Result<StepOutput, ModelError> {
            unreachable!("the worker launches and finishes")
        }
        fn launch(&mut self, _: &StepInput) -> Result<Launched, ModelError> {
            self.log
                .lock()
                .unwrap()
                .push(format!("launch {}", self.next));
            self.pending.push_back((self.next, Instant::now()));
            self.next += 1;
            Ok(Launched::Pending)
        }
        fn ready(&self) -> bool {
            self.pending
                .front()
                .is_some_and(|p| p.1.elapsed() >= Duration::from_millis(200))
        }
        fn finish(&mut self) -> Result<StepOutput, ModelError> {
            let (id, t) = self.pending.pop_front().expect("a pending step");
            if let Some(rest) = Duration::from_millis(200).checked_sub(t.elapsed()) {
                std::thread::sleep(rest);
            }
            self.log.lock().unwrap().push(format!("finish {id}"));
            let mut out = StepOutput::default();
            out.outputs.push(SeqOutput {
                id,
                token: id as u32,
                logprob: None,
                top_logprobs: vec![],
                candidates: vec![],
            });
            Ok(out)
        }
        fn logits(&mut self, _: &StepInput) -> Result<Vec<Vec<f32>>, ModelError> {
            Ok(vec![])
        }
        fn page_size(&self) -> u32 {
            1
        }
        fn num_pages(&self) -> u32 {
            1
        }
        fn vocab_size(&self) -> u32 {
            8
        }
        fn config(&self) -> &ModelConfig {
            &self.config
        }
        fn device_name(&self) -> &'static str {
            "test"
        }
    }

    #[test]
    fn the_next_step_is_launched_while_the_previous_one_runs() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let config = ModelConfig::from_json_str(
            r#"{"architectures": ["LlamaForCausalLM"], "hidden_size": 8,
                "num_attention_heads": 1, "intermediate_size": 8, "num_hidden_layers": 1,
                "vocab_size": 8}"#,
        )
        .unwrap();
        let w = Worker::spawn(Box::new(Async {
            log: log.clone(),
            pending: Default::default(),
            next: 0,
            config,
        }));
        // The engine's overlap pattern: launch N+1, then wait for N.
        w.launch(StepInput::default());
        w.launch(StepInput::default());
        let (a, _) = w.wait();
        w.launch(StepInput::default());
        let (b, _) = w.wait();
        let (c, _) = w.wait();
        let ids: Vec<u64> = [a, b, c]
            .into_iter()
            .map(|r| r.unwrap().outputs[0].id)
            .collect();
        assert_eq!(ids, vec![0, 1, 2], "results in launch order");
        let log = log.lock().unwrap().clone();
        assert_eq!(
            &log[..3],
            ["launch 0", "launch 1", "finish 0"],
            "step 1 must be launched before step 0 finishes: {log:?}"
        );
        assert_eq!(log.len(), 6, "{log:?}");
    }
}
