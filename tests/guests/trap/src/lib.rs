//! Hostile test guest: traps (panics) on odd steps, behaves like FCFS on even
//! ones, so a test can see the host re-create the poisoned instance.

use minisgl_plugin_sdk::{Budget, RequestView, ScheduleDecision, Scheduler};
use minisgl_policies::Fcfs;

#[derive(Default)]
pub struct Trap;

impl Scheduler for Trap {
    fn name(&self) -> String {
        "guest-trap".into()
    }

    fn schedule(&mut self, w: &[RequestView], r: &[RequestView], b: &Budget) -> ScheduleDecision {
        if b.step % 2 == 1 {
            panic!("guest-trap: deliberate trap at step {}", b.step);
        }
        Fcfs.schedule(w, r, b)
    }
}

minisgl_plugin_sdk::export_scheduler!(Trap);
