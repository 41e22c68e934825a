//! Where the scheduler loop reads the time.
//!
//! The engine runs on the wall clock. The simulator ([`crate::sim`]) runs the
//! same loop in virtual time: it sets the clock before each step, so that
//! arrivals, views' `now_us`, deadlines and radix access times all follow the
//! simulated device, and a run is reproducible bit for bit.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Microseconds since the engine started, from the wall or from a simulator.
#[derive(Clone, Debug)]
pub enum Clock {
    /// Real time since this instant.
    Wall(Instant),
    /// Virtual time in microseconds, advanced by whoever holds the other
    /// handle (see [`VirtualClock`]).
    Virtual(Arc<AtomicU64>),
}

impl Clock {
    /// Now, in microseconds since the start.
    pub fn now_us(&self) -> u64 {
        match self {
            Clock::Wall(t) => t.elapsed().as_micros() as u64,
            Clock::Virtual(v) => v.load(Ordering::Relaxed),
        }
    }

    /// `at` in microseconds since the start (0 when before it). A virtual
    /// clock has no relation to instants: it answers its own now.
    pub fn since_start_us(&self, at: Instant) -> u64 {
        match self {
            Clock::Wall(t) => at.saturating_duration_since(*t).as_micros() as u64,
            Clock::Virtual(v) => v.load(Ordering::Relaxed),
        }
    }
}

/// The driver's handle on a virtual [`Clock`].
#[derive(Clone, Debug, Default)]
pub struct VirtualClock(Arc<AtomicU64>);

impl VirtualClock {
    /// The clock to give the scheduler.
    pub fn clock(&self) -> Clock {
        Clock::Virtual(self.0.clone())
    }

    pub fn set_us(&self, us: u64) {
        self.0.store(us, Ordering::Relaxed);
    }

    pub fn now_us(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}
