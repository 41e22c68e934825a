//! The model runner on its own thread.
//!
//! Steps go in through one channel and results come back through another, in
//! launch order. While the worker runs step N, the engine loop prepares step
//! N+1 (overlap); with overlap off the loop simply waits for each result
//! before scheduling again. Either way the runner executes steps strictly in
//! order, which is what makes the loop's page reuse safe.

use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use crate::batch::{StepInput, StepOutput};
use crate::model::ModelRunner;

/// A step's result as the loop sees it (errors as text: they end requests).
pub type StepResult = Result<StepOutput, String>;

pub struct Worker {
    jobs: Option<Sender<StepInput>>,
    results: Receiver<(StepResult, Duration)>,
    thread: Option<JoinHandle<()>>,
}

impl Worker {
    pub fn spawn(mut runner: Box<dyn ModelRunner>) -> Worker {
        let (job_tx, job_rx) = crossbeam_channel::unbounded::<StepInput>();
        let (res_tx, res_rx) = crossbeam_channel::unbounded();
        let thread = std::thread::Builder::new()
            .name("minisgl-runner".into())
            .spawn(move || {
                for input in job_rx {
                    let t = std::time::Instant::now();
                    let out = runner.step(&input).map_err(|e| e.to_string());
                    if res_tx.send((out, t.elapsed())).is_err() {
                        break;
                    }
                }
            })
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
