//! A small team of helper threads that spin between the short parallel
//! regions of a forward step, with the calling thread working alongside.
//!
//! Why not rayon's pool: the engine calls the backend from a thread outside
//! the pool, so every `par_iter` injected a job, woke the workers, and put
//! the caller to sleep on a futex until they finished; a decode step has
//! ~150 such regions (four products and attention per layer, the LM head),
//! each a few tens of microseconds of work, and the two hand-offs (wake,
//! then wake the caller) cost a noticeable share of that. Here the caller
//! takes tasks itself, the helpers are usually still spinning from the
//! previous region (no system call to start), and the caller waits for the
//! last task by spinning. Tasks are claimed one at a time from a shared
//! counter, so a helper descheduled by a busy machine only delays the task
//! it holds.
//!
//! Helpers spin for `MINISGL_CPU_SPIN_US` microseconds (default 300) after
//! a region, then park until the next one. One caller at a time: a second
//! thread that finds the team busy (another backend, e.g. a tensor-parallel
//! rank) runs its region on rayon instead.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::OnceLock;
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use rayon::prelude::*;

/// `ctl` layout: generation in the high 32 bits, [`CLOSED`], and the count
/// of helpers inside the current region in the low bits.
const CLOSED: u64 = 1 << 31;
const ACTIVE: u64 = CLOSED - 1;

type Job<'a> = &'a (dyn Fn(usize) + Sync);

struct Team {
    /// Held by the thread whose region runs.
    busy: AtomicBool,
    ctl: AtomicU64,
    /// `*const Job` of the current region (valid while a helper is counted
    /// in `ctl`'s active bits).
    job: AtomicUsize,
    tasks: AtomicUsize,
    next: AtomicUsize,
    /// A helper's task panicked (the caller re-raises it).
    panicked: AtomicBool,
    helpers: Vec<Helper>,
    spin: Duration,
}

struct Helper {
    sleeping: AtomicBool,
    thread: OnceLock<Thread>,
}

fn team() -> Option<&'static Team> {
    static TEAM: OnceLock<Option<&'static Team>> = OnceLock::new();
    *TEAM.get_or_init(|| {
        let n = rayon::current_num_threads().saturating_sub(1);
        if n == 0 {
            return None;
        }
        let spin_us = crate::env::count("MINISGL_CPU_SPIN_US", 300, |_| true, "microseconds");
        let t: &'static Team = Box::leak(Box::new(Team {
            busy: AtomicBool::new(false),
            ctl: AtomicU64::new(0),
            job: AtomicUsize::new(0),
            tasks: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            helpers: (0..n)
                .map(|_| Helper {
                    sleeping: AtomicBool::new(false),
                    thread: OnceLock::new(),
                })
                .collect(),
            spin: Duration::from_micros(spin_us as u64),
        }));
        for i in 0..n {
            let spawned = thread::Builder::new()
                .name(format!("minisgl-cpu-{i}"))
                .spawn(move || t.helper_loop(i));
            match spawned {
                Ok(h) => {
                    let _ = t.helpers[i].thread.set(h.thread().clone());
                }
                // Without its helpers the team would wait forever; rayon
                // does the work instead.
                Err(e) => {
                    tracing::warn!("cpu helper thread: {e}; parallel regions use rayon");
                    return None;
                }
            }
        }
        Some(t)
    })
}

impl Team {
    /// Claims and runs tasks of the current region until none are left.
    fn work(&self, job: Job<'_>) {
        let tasks = self.tasks.load(Relaxed);
        loop {
            let t = self.next.fetch_add(1, Relaxed);
            if t >= tasks {
                break;
            }
            job(t);
        }
    }

    fn helper_loop(&self, me: usize) {
        let h = &self.helpers[me];
        let mut seen = 0u64;
        let mut idle_since = Instant::now();
        let mut spins = 0u32;
        loop {
            let c = self.ctl.load(Acquire);
            let gen = c >> 32;
            if gen != seen {
                seen = gen;
                if c & CLOSED == 0
                    && self
                        .ctl
                        .compare_exchange(c, c + 1, Acquire, Relaxed)
                        .is_ok()
                {
                    // SAFETY: counted as active in an open region, whose
                    // caller does not return (nor drop the job) before the
                    // count is back to zero.
                    let job = unsafe { *(self.job.load(Relaxed) as *const Job<'_>) };
                    if catch_unwind(AssertUnwindSafe(|| self.work(job))).is_err() {
                        self.panicked.store(true, Relaxed);
                    }
                    self.ctl.fetch_sub(1, Release);
                } else if c & CLOSED == 0 {
                    // The CAS lost to another helper entering: look again.
                    seen = gen.wrapping_sub(1);
                }
                idle_since = Instant::now();
                spins = 0;
                continue;
            }
            spins += 1;
            if !spins.is_multiple_of(64) || idle_since.elapsed() < self.spin {
                std::hint::spin_loop();
                continue;
            }
            // Park; the caller unparks whoever says it is sleeping after it
            // publishes a region (both sides SeqCst, so one sees the other).
            h.sleeping.store(true, SeqCst);
            if self.ctl.load(SeqCst) >> 32 == seen {
                thread::park();
            }
            h.sleeping.store(false, SeqCst);
            idle_since = Instant::now();
        }
    }
}

/// Closes the region and waits for the helpers inside it, also when the
/// caller's own task panics (they may still hold the job).
struct Close<'a>(&'a Team);

impl Drop for Close<'_> {
    fn drop(&mut self) {
        let t = self.0;
        // No task is left to claim once `next` passed `tasks`; a helper that
        // has not entered yet must not start now.
        t.next.store(usize::MAX / 2, Relaxed);
        t.ctl.fetch_or(CLOSED, AcqRel);
        let mut spins = 0u32;
        while t.ctl.load(Acquire) & ACTIVE != 0 {
            spins += 1;
            if spins < 1 << 14 {
                std::hint::spin_loop();
            } else {
                // A helper was descheduled mid-task (a busy machine).
                thread::yield_now();
            }
        }
        t.busy.store(false, Release);
    }
}

/// `f(t)` for every `t < tasks`, on the calling thread and the team (or
/// rayon when the team is busy or there is none), returning when all are
/// done.
pub fn for_each(tasks: usize, f: impl Fn(usize) + Sync) {
    if tasks <= 1 {
        (0..tasks).for_each(f);
        return;
    }
    let Some(t) = team().filter(|t| {
        t.busy
            .compare_exchange(false, true, Acquire, Relaxed)
            .is_ok()
    }) else {
        (0..tasks).into_par_iter().for_each(&f);
        return;
    };
    let job: Job<'_> = &f;
    t.job.store(&job as *const Job<'_> as usize, Relaxed);
    t.tasks.store(tasks, Relaxed);
    t.next.store(0, Relaxed);
    // A new generation, open, nobody inside: the Release publishes the
    // fields above to the helpers that enter.
    let gen = (t.ctl.load(Relaxed) >> 32).wrapping_add(1) & 0xffff_ffff;
    t.ctl.store(gen << 32, SeqCst);
    for h in &t.helpers {
        if h.sleeping.load(SeqCst) {
            if let Some(th) = h.thread.get() {
                th.unpark();
            }
        }
    }
    {
        let _close = Close(t);
        t.work(job);
    }
    if t.panicked.swap(false, Relaxed) {
        panic!("a CPU backend task panicked on a helper thread");
    }
}

/// A raw view of a mutable slice that tasks write disjoint parts of.
pub struct Shared<T>(*mut T, usize);

// SAFETY: tasks write disjoint ranges (the caller of `chunk` promises).
unsafe impl<T: Send> Sync for Shared<T> {}

impl<T> Shared<T> {
    pub fn new(s: &mut [T]) -> Self {
        Shared(s.as_mut_ptr(), s.len())
    }

    /// `[start, end)` of the slice (clamped to its length).
    ///
    /// # Safety
    /// No two live borrows from one `Shared` may overlap.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn range(&self, start: usize, end: usize) -> &mut [T] {
        let end = end.min(self.1);
        let start = start.min(end);
        std::slice::from_raw_parts_mut(self.0.add(start), end - start)
    }
}

/// `f(i, chunk_i)` over the `n`-long chunks of `out`, on the team.
pub fn for_chunks<T: Send>(out: &mut [T], n: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    let n = n.max(1);
    let chunks = out.len().div_ceil(n);
    let s = Shared::new(out);
    // SAFETY: chunk i is [i·n, (i+1)·n), disjoint from every other chunk.
    for_each(chunks, |i| f(i, unsafe { s.range(i * n, (i + 1) * n) }));
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    use super::*;

    /// Every task runs exactly once, also with callers on several threads at
    /// once (one gets the team, the others rayon) and regions nested inside
    /// a task (rayon, since the team is busy).
    #[test]
    fn every_task_runs_once() {
        std::thread::scope(|s| {
            for caller in 0..3 {
                s.spawn(move || {
                    for round in 0..200 {
                        let tasks = 1 + (round * 7 + caller) % 37;
                        let hits: Vec<AtomicUsize> =
                            (0..tasks).map(|_| AtomicUsize::new(0)).collect();
                        let inner = AtomicUsize::new(0);
                        for_each(tasks, |t| {
                            hits[t].fetch_add(1, Relaxed);
                            if t == 0 && round % 50 == 0 {
                                for_each(5, |_| {
                                    inner.fetch_add(1, Relaxed);
                                });
                            }
                        });
                        assert!(hits.iter().all(|h| h.load(Relaxed) == 1));
                        if round % 50 == 0 {
                            assert_eq!(inner.load(Relaxed), 5);
                        }
                    }
                });
            }
        });
        let mut v = vec![0usize; 1000];
        for_chunks(&mut v, 7, |i, c| c.iter_mut().for_each(|x| *x = i));
        assert!(v.iter().enumerate().all(|(j, &x)| x == j / 7));
    }
}
