//! Collective communication between tensor-parallel ranks.
//!
//! The model needs one collective, a sum all-reduce of activations, twice per
//! layer. A backend reaches its group through [`Backend::all_reduce`]; how
//! the bytes move is the backend's business: the CPU backend hands its f32
//! rows to a [`Communicator`], the CUDA backend calls NCCL on device
//! memory (`cuda::nccl`). [`ThreadGroup`] is the in-memory group for ranks that are threads
//! of one process (tests and `--tp N` on the CPU).
//!
//! [`Backend::all_reduce`]: super::Backend::all_reduce

use std::fmt;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use super::BackendError;

/// One rank's membership of a group of `world` ranks: what the
/// tensor-parallel runner needs to keep the group in step, whatever moves
/// the bytes (an in-memory [`ThreadGroup`], or NCCL on device memory, see
/// `cuda::nccl`).
pub trait Group: Send + Sync + fmt::Debug {
    /// This rank, `0..world`.
    fn rank(&self) -> usize;
    /// Ranks in the group.
    fn world(&self) -> usize;
    /// Make every rank blocked in, or later entering, a collective fail with
    /// [`BackendError::Aborted`] carrying `reason`: a rank that fails in the
    /// middle of a step calls it so that the others do not wait for it forever.
    fn abort(&self, reason: &str);
    /// Make an aborted group usable again. Only called once no rank is inside
    /// a collective (the TP runner calls it after every rank has answered
    /// the failed step). A group that cannot recover says so, and its runner
    /// fails every later step.
    fn recover(&self) -> Result<(), BackendError>;
}

/// A shared handle is a member too (the runner keeps one per rank thread).
impl<T: Group + ?Sized> Group for Arc<T> {
    fn rank(&self) -> usize {
        (**self).rank()
    }
    fn world(&self) -> usize {
        (**self).world()
    }
    fn abort(&self, reason: &str) {
        (**self).abort(reason)
    }
    fn recover(&self) -> Result<(), BackendError> {
        (**self).recover()
    }
}

/// A [`Group`] whose ranks sum host memory.
///
/// Contract: every rank calls [`Communicator::all_reduce_sum`] the same
/// number of times with buffers of the same length, and every rank gets
/// bit-identical results. The TP runner relies on the latter: each rank
/// samples from its own logits and feeds the sampled token to its own next
/// step, so the ranks stay in lockstep only if their sums agree exactly.
pub trait Communicator: Group {
    /// Replace `data` (host memory) with the element-wise sum of every
    /// rank's `data`. A device backend sums its activations where they live,
    /// in its own [`Backend::all_reduce`](super::Backend::all_reduce); this is
    /// the path of backends whose activations are on the host.
    fn all_reduce_sum(&self, data: &mut [f32]) -> Result<(), BackendError>;
}

/// An abort that waits: [`DeferredAbort::arm`] starts a grace period, and
/// unless [`DeferredAbort::cancel`] comes before it ends, the given action
/// runs (once, on a thread of its own). A device group uses it when one rank
/// fails mid-step: the ranks that did not fail may be blocked on their
/// devices, waiting for a collective only an abort can end, or they may all
/// have failed at the same point before any collective, in which case the
/// runner cancels and the group lives on.
#[derive(Debug, Default)]
pub struct DeferredAbort {
    state: Mutex<Deferred>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct Deferred {
    /// Armed with this reason.
    pending: Option<String>,
    /// The action ran, for this reason.
    fired: Option<String>,
}

impl DeferredAbort {
    fn lock(&self) -> MutexGuard<'_, Deferred> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Start the grace period; `fire(reason)` runs when it ends uncancelled.
    /// Returns `false` (and does nothing) when already armed or fired.
    pub fn arm(
        self: &Arc<Self>,
        reason: String,
        grace: std::time::Duration,
        fire: impl FnOnce(&str) + Send + 'static,
    ) -> bool {
        let mut st = self.lock();
        if st.pending.is_some() || st.fired.is_some() {
            return false;
        }
        st.pending = Some(reason);
        drop(st);
        // Shared with the fallback below: a failed spawn drops its closure.
        type Fire = Box<dyn FnOnce(&str) + Send>;
        let fire: Arc<Mutex<Option<Fire>>> = Arc::new(Mutex::new(Some(Box::new(fire))));
        let fire_now = |st: &mut Deferred, fire: &Mutex<Option<Fire>>| {
            if let Some(reason) = st.pending.take() {
                if let Some(f) = fire.lock().unwrap_or_else(|e| e.into_inner()).take() {
                    f(&reason);
                }
                st.fired = Some(reason);
            }
        };
        let (me, f) = (self.clone(), fire.clone());
        let run = move || {
            let st = me.lock();
            let (mut st, _) = me
                .changed
                .wait_timeout_while(st, grace, |st| st.pending.is_some())
                .unwrap_or_else(|e| e.into_inner());
            // Under the lock: a cancel arriving now waits and then sees it fired.
            fire_now(&mut st, &f);
        };
        if let Err(e) = std::thread::Builder::new()
            .name("deferred-abort".into())
            .spawn(run)
        {
            // No thread for the grace period: fire now rather than risk ranks
            // waiting forever.
            tracing::warn!("no grace-period thread ({e}); aborting at once");
            fire_now(&mut self.lock(), &fire);
        }
        true
    }

    /// End the grace period without firing; the reason it fired, if it did.
    pub fn cancel(&self) -> Result<(), String> {
        let mut st = self.lock();
        st.pending = None;
        self.changed.notify_all();
        match &st.fired {
            Some(r) => Err(r.clone()),
            None => Ok(()),
        }
    }

    /// The reason the action ran, if it has.
    pub fn fired(&self) -> Option<String> {
        self.lock().fired.clone()
    }
}

/// The shared state of an in-memory group.
#[derive(Debug, Default)]
struct State {
    /// Each rank's contribution to the round in progress.
    slots: Vec<Option<Vec<f32>>>,
    arrived: usize,
    /// Completed rounds; a waiter leaves when it changes.
    round: u64,
    /// The last completed round's sum.
    result: Arc<Vec<f32>>,
    aborted: Option<String>,
}

/// Sum all-reduce between threads of one process: each rank deposits a copy
/// of its buffer, the last to arrive adds them up in rank order 0..N (so the
/// result does not depend on which thread came last and repeats bit for bit),
/// and every rank copies the same sum back.
#[derive(Debug)]
pub struct ThreadGroup {
    world: usize,
    state: Mutex<State>,
    done: Condvar,
}

/// One rank of a [`ThreadGroup`].
#[derive(Debug, Clone)]
pub struct ThreadComm {
    group: Arc<ThreadGroup>,
    rank: usize,
}

impl ThreadGroup {
    /// A group of `world` ranks; handle `i` is rank `i`.
    pub fn ranks(world: usize) -> Vec<ThreadComm> {
        let group = Arc::new(ThreadGroup {
            world,
            state: Mutex::new(State {
                slots: vec![None; world],
                ..State::default()
            }),
            done: Condvar::new(),
        });
        (0..world)
            .map(|rank| ThreadComm {
                group: group.clone(),
                rank,
            })
            .collect()
    }

    /// A rank that panicked while holding the lock cannot have left the
    /// state half-written in a way that matters more than the panic itself,
    /// which the runner reports; keep going rather than panic every rank.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn aborted(reason: &str) -> BackendError {
    BackendError::Aborted(reason.to_string())
}

impl Group for ThreadComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world(&self) -> usize {
        self.group.world
    }

    fn abort(&self, reason: &str) {
        let mut s = self.group.lock();
        if s.aborted.is_none() {
            s.aborted = Some(format!("rank {} failed: {reason}", self.rank));
        }
        self.group.done.notify_all();
    }

    fn recover(&self) -> Result<(), BackendError> {
        let mut s = self.group.lock();
        s.aborted = None;
        s.arrived = 0;
        s.slots.iter_mut().for_each(|p| *p = None);
        Ok(())
    }
}

impl Communicator for ThreadComm {
    fn all_reduce_sum(&self, data: &mut [f32]) -> Result<(), BackendError> {
        let g = &*self.group;
        if g.world == 1 {
            return Ok(());
        }
        let mut s = g.lock();
        if let Some(r) = &s.aborted {
            return Err(aborted(r));
        }
        if s.slots[self.rank].is_some() {
            return Err(BackendError::InvalidInput(format!(
                "rank {} entered an all-reduce twice in one round",
                self.rank
            )));
        }
        s.slots[self.rank] = Some(data.to_vec());
        s.arrived += 1;
        let round = s.round;
        if s.arrived == g.world {
            let parts: Vec<Vec<f32>> = s
                .slots
                .iter_mut()
                .map(|p| p.take().unwrap_or_default())
                .collect();
            s.arrived = 0;
            if let Some(p) = parts.iter().position(|p| p.len() != data.len()) {
                let why = format!(
                    "all-reduce length mismatch: rank {p} sent {} values, rank {} sent {}",
                    parts[p].len(),
                    self.rank,
                    data.len()
                );
                s.aborted = Some(why.clone());
                g.done.notify_all();
                return Err(aborted(&why));
            }
            let mut sum = parts[0].clone();
            for p in &parts[1..] {
                for (a, b) in sum.iter_mut().zip(p) {
                    *a += b;
                }
            }
            s.result = Arc::new(sum);
            s.round += 1;
            g.done.notify_all();
        } else {
            while s.round == round {
                if let Some(r) = &s.aborted {
                    return Err(aborted(r));
                }
                s = g.done.wait(s).unwrap_or_else(|e| e.into_inner());
            }
        }
        // The next round cannot complete (and replace `result`) before this
        // rank deposits again, so the sum read here is this round's.
        let sum = s.result.clone();
        drop(s);
        data.copy_from_slice(&sum);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values whose f32 sum depends on the order of addition, so a group
    /// that summed in arrival order would disagree between runs and ranks.
    fn contribution(rank: usize, round: usize) -> Vec<f32> {
        (0..64)
            .map(|i| {
                let x = ((rank * 7919 + i * 104_729 + round * 31) % 1000) as f32;
                if rank.is_multiple_of(2) {
                    x * 1e7 + 0.1
                } else {
                    -x * 1e7 + 0.3
                }
            })
            .collect()
    }

    fn in_rank_order(world: usize, round: usize) -> Vec<f32> {
        let mut s = contribution(0, round);
        for r in 1..world {
            for (a, b) in s.iter_mut().zip(contribution(r, round)) {
                *a += b;
            }
        }
        s
    }

    #[test]
    fn sums_in_rank_order_on_every_rank() {
        for world in [1, 2, 3, 4] {
            let comms = ThreadGroup::ranks(world);
            let results: Vec<Vec<Vec<f32>>> = std::thread::scope(|sc| {
                let hs: Vec<_> = comms
                    .iter()
                    .map(|c| {
                        sc.spawn(move || {
                            (0..50)
                                .map(|round| {
                                    // Stagger arrivals so that the last rank to
                                    // arrive differs between rounds.
                                    if (round + c.rank()) % 3 == 0 {
                                        std::thread::yield_now();
                                    }
                                    let mut v = contribution(c.rank(), round);
                                    c.all_reduce_sum(&mut v).unwrap();
                                    v
                                })
                                .collect()
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            for (round, want) in (0..50).map(|r| (r, in_rank_order(world, r))) {
                for (rank, got) in results.iter().enumerate() {
                    let (g, w): (Vec<u32>, Vec<u32>) = (
                        got[round].iter().map(|x| x.to_bits()).collect(),
                        want.iter().map(|x| x.to_bits()).collect(),
                    );
                    assert_eq!(g, w, "world {world} rank {rank} round {round}");
                }
            }
        }
    }

    #[test]
    fn abort_wakes_waiting_ranks_and_recover_restores_the_group() {
        let comms = ThreadGroup::ranks(3);
        let err = std::thread::scope(|sc| {
            let waiters: Vec<_> = comms[..2]
                .iter()
                .map(|c| sc.spawn(move || c.all_reduce_sum(&mut [1.0, 2.0])))
                .collect();
            // Rank 2 never joins the round; it fails instead.
            std::thread::sleep(std::time::Duration::from_millis(20));
            comms[2].abort("out of memory");
            waiters
                .into_iter()
                .map(|h| h.join().unwrap().unwrap_err().to_string())
                .collect::<Vec<_>>()
        });
        for e in &err {
            assert!(e.contains("rank 2 failed: out of memory"), "{e}");
        }
        comms[0].recover().unwrap();
        let sums: Vec<Vec<f32>> = std::thread::scope(|sc| {
            let hs: Vec<_> = comms
                .iter()
                .map(|c| {
                    sc.spawn(move || {
                        let mut v = vec![c.rank() as f32, 1.0];
                        c.all_reduce_sum(&mut v).map(|_| v)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap().unwrap()).collect()
        });
        assert!(sums.iter().all(|s| s == &[3.0, 3.0]), "{sums:?}");
    }

    #[test]
    fn a_cancelled_deferred_abort_never_fires() {
        let d = Arc::new(DeferredAbort::default());
        let fired = Arc::new(Mutex::new(0));
        let f = fired.clone();
        assert!(d.arm(
            "rank 1 failed".into(),
            std::time::Duration::from_millis(200),
            move |_| { *f.lock().unwrap() += 1 }
        ));
        // Armed twice: the second is ignored.
        assert!(
            !d.arm("again".into(), std::time::Duration::ZERO, |_| panic!(
                "second arm fired"
            ))
        );
        assert_eq!(d.cancel(), Ok(()));
        std::thread::sleep(std::time::Duration::from_millis(400));
        assert_eq!(*fired.lock().unwrap(), 0);
        assert_eq!(d.fired(), None);
        // Usable again after a cancel.
        let (tx, rx) = std::sync::mpsc::channel();
        assert!(d.arm(
            "later".into(),
            std::time::Duration::from_millis(10),
            move |r| tx.send(r.to_string()).unwrap()
        ));
        let got = rx.recv_timeout(std::time::Duration::from_secs(10));
        assert_eq!(got.as_deref(), Ok("later"));
    }

    #[test]
    fn an_uncancelled_deferred_abort_fires_once_and_stays_fired() {
        let d = Arc::new(DeferredAbort::default());
        let (tx, rx) = std::sync::mpsc::channel();
        assert!(d.arm(
            "rank 0 failed: out of memory".into(),
            std::time::Duration::from_millis(20),
            move |r| { tx.send(r.to_string()).unwrap() }
        ));
        let got = rx
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("fired");
        assert_eq!(got, "rank 0 failed: out of memory");
        assert!(
            rx.recv_timeout(std::time::Duration::from_millis(100))
                .is_err(),
            "fired twice"
        );
        assert_eq!(d.cancel(), Err("rank 0 failed: out of memory".to_string()));
        assert!(
            !d.arm("after".into(), std::time::Duration::ZERO, |_| panic!(
                "re-armed after firing"
            ))
        );
        assert_eq!(d.fired().as_deref(), Some("rank 0 failed: out of memory"));
    }

    #[test]
    fn length_mismatch_is_an_error_on_every_rank() {
        let comms = ThreadGroup::ranks(2);
        let errs: Vec<String> = std::thread::scope(|sc| {
            let hs: Vec<_> = comms
                .iter()
                .map(|c| {
                    sc.spawn(move || {
                        let mut v = vec![0.0; 3 + c.rank()];
                        c.all_reduce_sum(&mut v).unwrap_err().to_string()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(
            errs.iter().all(|e| e.contains("length mismatch")),
            "{errs:?}"
        );
    }
}
