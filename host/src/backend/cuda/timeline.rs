//! Per-kernel GPU time of eager steps, for the decode-step timeline of
//! `gpu-check --timeline`: CUDA events recorded around every kernel launch and
//! cuBLAS call while a timeline is open, each tagged with the bytes and FLOPs its
//! call site knows it must move, so that every kernel can be set against its own
//! floor. Off (one relaxed atomic load per launch) unless [`start`] was called.
//! Graph replays record nothing: time eager steps.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaStream};

use super::device::Device;
use crate::backend::BackendError;

static ON: AtomicBool = AtomicBool::new(false);
static MARKS: Mutex<Vec<Mark>> = Mutex::new(Vec::new());

thread_local! {
    /// Cost of the next wrapped call, set by its call site.
    static NEXT_COST: Cell<(f64, f64)> = const { Cell::new((0.0, 0.0)) };
}

struct Mark {
    name: String,
    bytes: f64,
    flops: f64,
    start: CudaEvent,
    end: CudaEvent,
}

// SAFETY: events are only recorded by the stream's thread and read after it
// synchronised; the driver objects need no thread affinity.
unsafe impl Send for Mark {}

/// One timed call.
#[derive(Clone, Debug)]
pub struct KernelTime {
    pub name: String,
    pub us: f64,
    /// Least bytes the call must move (0 where the call site does not say).
    pub bytes: f64,
    /// FLOPs it must do (0 where not counted).
    pub flops: f64,
}

/// Open a timeline: every launch from now on is timed.
pub fn start() {
    MARKS.lock().expect("timeline lock").clear();
    ON.store(true, Ordering::Relaxed);
}

/// Close the timeline and return the calls in launch order.
pub fn stop() -> Result<Vec<KernelTime>, BackendError> {
    ON.store(false, Ordering::Relaxed);
    let marks = std::mem::take(&mut *MARKS.lock().expect("timeline lock"));
    let mut out = Vec::with_capacity(marks.len());
    for m in marks {
        m.end.synchronize()?;
        out.push(KernelTime {
            us: 1e3 * m.start.elapsed_ms(&m.end)? as f64,
            name: m.name,
            bytes: m.bytes,
            flops: m.flops,
        });
    }
    Ok(out)
}

/// Whether a timeline is open: call sites whose cost takes work to count skip it
/// when not.
pub(crate) fn is_on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// The bytes and FLOPs of the next wrapped call on this thread.
pub(crate) fn cost(bytes: f64, flops: f64) {
    if ON.load(Ordering::Relaxed) {
        NEXT_COST.with(|c| c.set((bytes, flops)));
    }
}

/// Run `f` (one launch on `dev`'s stream), timed when a timeline is open.
pub(crate) fn wrap<R>(
    dev: &Device,
    name: &str,
    f: impl FnOnce() -> Result<R, BackendError>,
) -> Result<R, BackendError> {
    if !ON.load(Ordering::Relaxed) {
        return f();
    }
    let (bytes, flops) = NEXT_COST.with(|c| c.replace((0.0, 0.0)));
    let ev = |s: &CudaStream| -> Result<CudaEvent, BackendError> {
        let e = dev.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        e.record(s)?;
        Ok(e)
    };
    let start = ev(&dev.stream)?;
    let r = f()?;
    let end = ev(&dev.stream)?;
    MARKS.lock().expect("timeline lock").push(Mark {
        name: name.to_string(),
        bytes,
        flops,
        start,
        end,
    });
    Ok(r)
}
