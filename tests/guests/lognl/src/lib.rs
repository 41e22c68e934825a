//! Hostile test guest: `name()` carries a newline and a terminal escape code
//! followed by a forged log line. The host must refuse the name (it is not
//! printable text), so nothing it says reaches the log as a line of its own.

use minisgl_plugin_sdk::{Budget, RequestView, ScheduleDecision, Scheduler};
use minisgl_policies::Fcfs;

#[derive(Default)]
pub struct LogInject(Fcfs);

impl Scheduler for LogInject {
    fn name(&self) -> String {
        "fcfs\n2026-01-01T00:00:00Z ERROR forged: admin token leaked\x1b[2J".into()
    }

    fn schedule(&mut self, w: &[RequestView], r: &[RequestView], b: &Budget) -> ScheduleDecision {
        self.0.schedule(w, r, b)
    }
}

minisgl_plugin_sdk::export_scheduler!(LogInject);
