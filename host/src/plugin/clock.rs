//! What a plugin call's deadline measures: the CPU time of the thread running
//! the guest, not the wall clock. On a loaded machine a call can wait for a
//! core for longer than it computes; counting that against the plugin made a
//! 5 µs policy time out. The wall clock still bounds every call, generously,
//! against a host thread that is stuck or starved.
//!
//! Wasmtime checks deadlines through epoch interruption: a ticker advances the
//! epoch every millisecond, and when a call passes its epoch deadline the
//! store's callback ([`CallClock::verdict`]) either extends it (the guest has
//! used less CPU than its budget) or interrupts the call.
//!
//! A guest that has begun writing to stderr is reporting a crash (a Rust
//! panic message, a Python traceback): it is let finish up to the wall bound,
//! so the time spent formatting the report never turns a crash into a
//! timeout.

use std::time::{Duration, Instant};

use wasmtime::UpdateDeadline;

/// Epoch period: deadlines are enforced to within about one tick.
pub(crate) const TICK: Duration = Duration::from_millis(1);

/// CPU time the calling thread has used, or `None` where the platform has no
/// per-thread CPU clock (the wall clock is used then).
pub fn thread_cpu_time() -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, exclusively borrowed out-parameter for the
    // duration of the call; clock_gettime writes nothing else.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (rc == 0).then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

/// The limits of one call and where its clocks started.
#[derive(Clone, Debug)]
pub(crate) struct CallClock {
    /// CPU time the guest may use.
    pub cpu_limit: Duration,
    /// Wall time any call may take, crash reports included.
    pub wall_limit: Duration,
    cpu_start: Option<Duration>,
    wall_start: Instant,
    /// Bytes the guest had written to stderr when the call started.
    stderr_at_start: u64,
}

/// Epoch ticks covering `d`, plus one (the first tick may come at once).
pub(crate) fn ticks(d: Duration) -> u64 {
    (d.as_nanos().div_ceil(TICK.as_nanos()) as u64).max(1) + 1
}

impl CallClock {
    pub fn new(cpu_limit: Duration, wall_limit: Duration) -> CallClock {
        CallClock {
            cpu_limit,
            wall_limit: wall_limit.max(cpu_limit),
            cpu_start: thread_cpu_time(),
            wall_start: Instant::now(),
            stderr_at_start: 0,
        }
    }

    /// Starts the clocks for a call made now, on this thread; returns the
    /// first epoch deadline (CPU time never runs ahead of wall time, so no
    /// check is needed before `cpu_limit` of wall time has passed).
    pub fn start(&mut self, stderr_bytes: u64) -> u64 {
        self.cpu_start = thread_cpu_time();
        self.wall_start = Instant::now();
        self.stderr_at_start = stderr_bytes;
        ticks(self.cpu_limit)
    }

    /// CPU time used since [`CallClock::start`] (wall time without a CPU clock).
    pub fn cpu_used(&self) -> Duration {
        match (self.cpu_start, thread_cpu_time()) {
            (Some(a), Some(b)) => b.saturating_sub(a),
            _ => self.wall_start.elapsed(),
        }
    }

    pub fn wall_used(&self) -> Duration {
        self.wall_start.elapsed()
    }

    /// Whether the guest wrote to stderr during this call.
    pub fn reporting_crash(&self, stderr_bytes: u64) -> bool {
        stderr_bytes > self.stderr_at_start
    }

    /// Called by wasmtime when the call passes its epoch deadline.
    pub fn verdict(&self, stderr_bytes: u64) -> UpdateDeadline {
        if self.wall_used() >= self.wall_limit {
            return UpdateDeadline::Interrupt;
        }
        if self.reporting_crash(stderr_bytes) {
            return UpdateDeadline::Continue(1);
        }
        let cpu = self.cpu_used();
        if cpu < self.cpu_limit {
            // Check again once the rest of the budget could have been used.
            UpdateDeadline::Continue(ticks(self.cpu_limit - cpu) - 1)
        } else {
            UpdateDeadline::Interrupt
        }
    }

    /// Why a call was interrupted, for the failure detail.
    pub fn describe(&self) -> String {
        format!(
            "used {:.1} ms of CPU (limit {:.1} ms) in {:.1} ms of wall time (limit {:.0} ms)",
            self.cpu_used().as_secs_f64() * 1e3,
            self.cpu_limit.as_secs_f64() * 1e3,
            self.wall_used().as_secs_f64() * 1e3,
            self.wall_limit.as_secs_f64() * 1e3
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_cpu_time_counts_work_not_sleep() {
        let t0 = thread_cpu_time().expect("a thread CPU clock on this platform");
        std::thread::sleep(Duration::from_millis(30));
        let slept = thread_cpu_time().unwrap() - t0;
        assert!(
            slept < Duration::from_millis(10),
            "sleeping used {slept:?} of CPU"
        );
        let t1 = thread_cpu_time().unwrap();
        let start = Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let spun = thread_cpu_time().unwrap() - t1;
        assert!(
            spun >= Duration::from_millis(10),
            "spinning used {spun:?} of CPU"
        );
    }

    #[test]
    fn verdict_extends_while_cpu_is_under_budget() {
        let mut c = CallClock::new(Duration::from_millis(50), Duration::from_secs(5));
        c.start(0);
        // A sleeping guest (waiting for a core, as far as the CPU clock can
        // tell) is not interrupted.
        std::thread::sleep(Duration::from_millis(60));
        assert!(matches!(c.verdict(0), UpdateDeadline::Continue(_)));
        // Past the wall bound it is.
        c.wall_limit = Duration::from_millis(50);
        assert!(matches!(c.verdict(0), UpdateDeadline::Interrupt));
    }

    #[test]
    fn a_crash_report_gets_the_wall_bound() {
        let mut c = CallClock::new(Duration::from_millis(1), Duration::from_secs(5));
        c.start(10);
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(5) {
            std::hint::black_box(());
        }
        assert!(matches!(c.verdict(10), UpdateDeadline::Interrupt));
        assert!(matches!(c.verdict(11), UpdateDeadline::Continue(1)));
    }
}
