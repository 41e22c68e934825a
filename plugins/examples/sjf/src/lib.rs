//! Shortest-job-first by `max_new_tokens`.
//!
//! Output length dominates a request's time in the engine (one decode step per
//! token), and the client's `max_tokens` is the only bound known in advance, so
//! requests asking for fewer tokens are admitted first. This lowers mean
//! completion time when lengths vary, at the cost of fairness to long jobs
//! (combine with an age bound, as `lpm` does, if that matters). Ties keep
//! arrival order; half-prefilled requests continue first; steps are
//! prefill-or-decode as in the default FCFS.

use minisgl_example_kit::{admit_in_order, continuing_then_sorted_by, prefill_or_decode};
use minisgl_plugin_sdk::{Budget, RequestView, ScheduleDecision, Scheduler};

/// Fewest `max_new_tokens` first.
#[derive(Clone, Debug, Default)]
pub struct Sjf;

impl Scheduler for Sjf {
    fn name(&self) -> String {
        "sjf".to_string()
    }

    fn schedule(
        &mut self,
        waiting: &[RequestView],
        running: &[RequestView],
        budget: &Budget,
    ) -> ScheduleDecision {
        // Tokens still to generate: a preempted request keeps `generated_len`.
        let order = continuing_then_sorted_by(waiting, |r| {
            r.max_new_tokens.saturating_sub(r.generated_len)
        });
        prefill_or_decode(
            admit_in_order(order, budget, running.len()),
            running,
            budget,
        )
    }
}

minisgl_plugin_sdk::export_scheduler!(Sjf);
