//! Weights brought into L2 one product ahead, in recorded decode steps.
//!
//! A replayed step at a few rows is a chain of short products, each the sum of its own
//! ramp: its blocks issue loads that wait a DRAM round trip, so a product of a few MB
//! runs at a third of the copy rate, and DRAM idles between products and during the
//! attention and the small kernels (docs/results/gpu-2026-12-02-prologue.md). Here a
//! second stream, forked from the step where the current product becomes ready, runs
//! `l2_prefetch` (kernels/tensor.cu) over the *next* product's weight, so DRAM streams
//! that weight while the current product reads its own from L2.
//!
//! Only recorded steps do it: an eager step would pay an event, a wait and a launch of
//! host time per product, and its GPU work is not the short chain this is for. Only
//! weights that fit a fraction of L2 are fetched: a larger one would evict the current
//! product's weight before it is read, or its own first lines before they are used,
//! and the same bytes would cross DRAM twice. Nothing here changes a result: the
//! prefetch writes nothing, and the step joins the second stream before its recording
//! ends only because a graph must.

use std::cell::Cell;
use std::sync::Arc;

use cudarc::driver::{CudaEvent, CudaStream, PushKernelArg};

use super::{cfg, device::Device, Buf, CudaBackend, CudaTensor};
use super::error::CudaError;
use crate::backend::BackendError;

/// Fraction of L2 (in tenths) the largest weight fetched ahead may take: two weights
/// are in L2 at once (the one being read and the next), beside the step's activations
/// and KV.
const CAP_TENTHS: usize = 3;

/// Bytes one prefetch thread covers (L2_PF_CHUNK in tensor.cu).
const CHUNK: usize = 4096;

/// The second stream and its state during a recording.
pub(crate) struct L2Prefetch {
    side: Arc<CudaStream>,
    fork: CudaEvent,
    join: CudaEvent,
    /// Largest weight fetched ahead, in bytes (0: the device reports no L2).
    cap: usize,
    /// Asked for (`MINISGL_L2_PREFETCH`, on unless `0`).
    on: Cell<bool>,
    /// A step is being recorded.
    capturing: Cell<bool>,
    /// The second stream ran something during this recording, so it must be joined.
    forked: Cell<bool>,
}

impl L2Prefetch {
    pub(crate) fn new(dev: &Device, on: bool) -> Result<Self, CudaError> {
        let l2 = dev
            .ctx
            .attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)
            .map_or(0, |b| b.max(0) as usize);
        Ok(L2Prefetch {
            side: dev.ctx.new_stream()?,
            fork: dev.ctx.new_event(None)?,
            join: dev.ctx.new_event(None)?,
            cap: l2 * CAP_TENTHS / 10,
            on: Cell::new(on),
            capturing: Cell::new(false),
            forked: Cell::new(false),
        })
    }
}

impl CudaBackend {
    /// Turn fetching ahead on or off for steps recorded from now on (benchmarks compare).
    pub fn set_l2_prefetch(&self, on: bool) {
        self.prefetch.on.set(on);
    }

    /// Whether recorded steps fetch the next product's weight into L2.
    pub fn l2_prefetch(&self) -> bool {
        self.prefetch.on.get()
    }

    /// Start bringing `ws` into L2 on the second stream, after what the step has
    /// launched so far ([`crate::backend::Backend::prefetch_weights`]).
    pub(super) fn prefetch_impl(&self, ws: &[&CudaTensor]) -> Result<(), BackendError> {
        let p = &self.prefetch;
        if !p.on.get() || !p.capturing.get() {
            return Ok(());
        }
        let Ok(f) = self.dev.kernels.get("l2_prefetch") else {
            return Ok(());
        };
        let mut forked = false;
        for w in ws {
            let Buf::Bf16(s) = &w.buf else { continue };
            let bytes = s.len() * 2;
            if bytes == 0 || bytes > p.cap {
                continue;
            }
            if !forked {
                p.fork.record(&self.dev.stream)?;
                p.side.wait(&p.fork)?;
                forked = true;
            }
            // One warp a block, spread over the SMs: each SM's copy engine walks the
            // lines of its chunks, and a few engines cannot keep DRAM busy.
            let threads = bytes.div_ceil(CHUNK);
            let blocks = threads.div_ceil(32).min(4 * self.dev.num_sms).max(1);
            let ptr = self.ptr(s);
            let n = bytes as u64;
            let mut b = p.side.launch_builder(f);
            b.arg(&ptr).arg(&n);
            // SAFETY: l2_prefetch(const char*, u64) reads nothing and writes nothing; it
            // hints lines of a live weight buffer into L2.
            unsafe { b.launch(cfg((blocks as u32, 1, 1), 32)) }?;
        }
        p.forked.set(p.forked.get() || forked);
        Ok(())
    }

    /// A recording starts: prefetches from now on join it.
    pub(super) fn prefetch_begin_capture(&self) {
        self.prefetch.capturing.set(true);
        self.prefetch.forked.set(false);
    }

    /// A recording ends: the main stream waits for the second one, which a graph
    /// requires of every stream it forked (the replayed step then ends after its last
    /// prefetch, which ended long before the LM head).
    pub(super) fn prefetch_end_capture(&self) -> Result<(), BackendError> {
        let p = &self.prefetch;
        p.capturing.set(false);
        if p.forked.replace(false) {
            p.join.record(&p.side)?;
            self.dev.stream.wait(&p.join)?;
        }
        Ok(())
    }
}
