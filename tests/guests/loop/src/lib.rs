//! Hostile test guest: `schedule` spins forever. The host must cut it at its
//! deadline, count a timeout, and answer with the native FCFS.

use minisgl_plugin_sdk::{Budget, RequestView, ScheduleDecision, Scheduler};

#[derive(Default)]
pub struct Spin;

impl Scheduler for Spin {
    fn name(&self) -> String {
        "guest-loop".into()
    }

    fn schedule(&mut self, _: &[RequestView], _: &[RequestView], _: &Budget) -> ScheduleDecision {
        let mut n: u64 = 0;
        loop {
            n = std::hint::black_box(n.wrapping_add(1));
        }
    }
}

minisgl_plugin_sdk::export_scheduler!(Spin);
