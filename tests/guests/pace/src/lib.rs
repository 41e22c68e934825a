//! Test guest: FCFS that spends about 2 ms per call. The Python tests that
//! need a request to wait for its first token (keep-alive, drain and
//! bench_serving tests) run the tiny fixture models, which a release build
//! decodes in a fraction of a millisecond per step; with this scheduler every
//! step takes at least [`PACE`], so a queue behind one running request lasts
//! for seconds on any machine. 2 ms stays far inside the 20 ms deadline.

use std::time::{Duration, Instant};

use minisgl_plugin_sdk::{Budget, RequestView, ScheduleDecision, Scheduler};
use minisgl_policies::Fcfs;

/// Wall time each scheduling call takes.
const PACE: Duration = Duration::from_millis(2);

#[derive(Default)]
pub struct Pace;

impl Scheduler for Pace {
    fn name(&self) -> String {
        "guest-pace".into()
    }

    fn schedule(&mut self, w: &[RequestView], r: &[RequestView], b: &Budget) -> ScheduleDecision {
        let start = Instant::now();
        let decision = Fcfs.schedule(w, r, b);
        let mut x = b.step;
        while start.elapsed() < PACE {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        decision
    }
}

minisgl_plugin_sdk::export_scheduler!(Pace);
