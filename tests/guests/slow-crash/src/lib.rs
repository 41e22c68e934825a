//! Hostile test guest: on odd steps it crashes, but first writes a long
//! report to stderr (like a Python traceback on a slow machine), spending
//! about `budget.now-us` microseconds of CPU on it; on even steps it answers
//! like FCFS. The host must count the crash as a trap, never as a timeout,
//! however long the report takes (within the wall bound).

use std::io::Write;
use std::time::{Duration, Instant};

use minisgl_plugin_sdk::{Budget, RequestView, ScheduleDecision, Scheduler};
use minisgl_policies::Fcfs;

#[derive(Default)]
pub struct SlowCrash;

impl Scheduler for SlowCrash {
    fn name(&self) -> String {
        "guest-slow-crash".into()
    }

    fn schedule(&mut self, w: &[RequestView], r: &[RequestView], b: &Budget) -> ScheduleDecision {
        if b.step.is_multiple_of(2) {
            return Fcfs.schedule(w, r, b);
        }
        let mut err = std::io::stderr();
        let _ = writeln!(
            err,
            "guest-slow-crash: formatting a crash report at step {}",
            b.step
        );
        let start = Instant::now();
        let mut line = 0u64;
        let mut x = b.step;
        while start.elapsed() < Duration::from_micros(b.now_us) {
            for _ in 0..10_000 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
            line += 1;
            if line.is_multiple_of(256) {
                let _ = writeln!(err, "  frame {line}: {x:x}");
            }
        }
        panic!("guest-slow-crash: deliberate crash at step {}", b.step);
    }
}

minisgl_plugin_sdk::export_scheduler!(SlowCrash);
