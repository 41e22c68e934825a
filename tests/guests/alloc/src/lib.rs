//! Hostile test guest: on odd steps allocates (and touches) 1 MiB blocks
//! without bound; on even steps behaves like FCFS.

use minisgl_plugin_sdk::{Budget, RequestView, ScheduleDecision, Scheduler};
use minisgl_policies::Fcfs;

#[derive(Default)]
pub struct Hog {
    kept: Vec<Vec<u8>>,
}

impl Scheduler for Hog {
    fn name(&self) -> String {
        "guest-alloc".into()
    }

    fn schedule(&mut self, w: &[RequestView], r: &[RequestView], b: &Budget) -> ScheduleDecision {
        if b.step % 2 == 1 {
            loop {
                self.kept.push(vec![b.step as u8; 1 << 20]);
            }
        }
        Fcfs.schedule(w, r, b)
    }
}

minisgl_plugin_sdk::export_scheduler!(Hog);
