//! Hostile test guest: `name()` returns 16 MiB. Before names were bounded
//! such a plugin was accepted and every `/metrics` and `/admin/plugins`
//! answer carried its name; the host must now refuse it at load and swap.

use minisgl_plugin_sdk::{Budget, RequestView, ScheduleDecision, Scheduler};
use minisgl_policies::Fcfs;

#[derive(Default)]
pub struct HugeName(Fcfs);

impl Scheduler for HugeName {
    fn name(&self) -> String {
        "x".repeat(16 << 20)
    }

    fn schedule(&mut self, w: &[RequestView], r: &[RequestView], b: &Budget) -> ScheduleDecision {
        self.0.schedule(w, r, b)
    }
}

minisgl_plugin_sdk::export_scheduler!(HugeName);
