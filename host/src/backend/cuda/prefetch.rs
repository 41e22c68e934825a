//! Weights brought into L2 ahead of the products that read them, at decode sizes.
//!
//! A replayed step at a few rows is a chain of short products, each the sum of its own
//! ramp: its blocks issue loads that wait a DRAM round trip, so a product of a few MB
//! runs at a third of the copy rate, and DRAM idles between products and during the
//! attention and the small kernels (docs/results/gpu-2026-12-02-prologue.md). The model
//! announces the weights of the next products ([`Backend::prefetch_weights`]) and one
//! of two mechanisms moves them while the current product runs:
//!
//! - [`PrefetchMode::Gemv`]: the next skinny product (`gemv_*`, kernels/gemv.cu) carries
//!   up to two ranges and its warps hint them into L2 as they start. No extra launch,
//!   no change to the step's graph; only products the skinny kernel runs carry them.
//! - [`PrefetchMode::Stream`]: in recorded steps only, a second stream forked at that
//!   point runs `l2_prefetch` (kernels/tensor.cu) beside the step. The step's graph then
//!   has a branch per announcement and must join the stream before its recording ends;
//!   an eager step would pay an event, a wait and a launch of host time each.
//!
//! Only weights that fit a fraction of L2 are fetched: a larger one would evict the
//! current product's weight before it is read, or its own first lines before they are
//! used, and the same bytes would cross DRAM twice. Nothing here changes a result:
//! a prefetch writes nothing.
//!
//! [`Backend::prefetch_weights`]: crate::backend::Backend::prefetch_weights

use std::cell::Cell;
use std::sync::Arc;

use cudarc::driver::{CudaEvent, CudaStream, PushKernelArg};

use super::error::CudaError;
use super::{cfg, device::Device, Arg, Buf, CudaBackend, CudaTensor};
use crate::backend::BackendError;

/// Fraction of L2 (in tenths) the largest weight fetched ahead may take: two weights
/// are in L2 at once (the one being read and the next), beside the step's activations
/// and KV.
const CAP_TENTHS: usize = 3;

/// Bytes one prefetch thread covers (L2_PF_CHUNK in tensor.cu).
const CHUNK: usize = 4096;

/// How announced weights reach L2 (`MINISGL_L2_PREFETCH`: `gemv`, `stream` or `0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PrefetchMode {
    Off,
    #[default]
    Gemv,
    Stream,
}

impl std::str::FromStr for PrefetchMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "0" | "off" => Ok(Self::Off),
            "1" | "gemv" => Ok(Self::Gemv),
            "stream" => Ok(Self::Stream),
            o => Err(format!(
                "MINISGL_L2_PREFETCH must be gemv, stream or 0, got {o:?}"
            )),
        }
    }
}

/// The second stream, the ranges the next skinny product carries, and the state
/// during a recording.
pub(crate) struct L2Prefetch {
    side: Arc<CudaStream>,
    fork: CudaEvent,
    join: CudaEvent,
    /// Largest weight fetched ahead, in bytes (0: the device reports no L2).
    cap: usize,
    mode: Cell<PrefetchMode>,
    /// Ranges (address, bytes) the next `gemv_*` launch hints into L2; any launch
    /// takes them, so a request not followed by a skinny product lapses.
    pending: Cell<[(u64, u64); 2]>,
    /// A step is being recorded.
    capturing: Cell<bool>,
    /// The second stream ran something during this recording, so it must be joined.
    forked: Cell<bool>,
}

impl L2Prefetch {
    pub(crate) fn new(dev: &Device, mode: PrefetchMode) -> Result<Self, CudaError> {
        let l2 = dev
            .ctx
            .attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)
            .map_or(0, |b| b.max(0) as usize);
        Ok(L2Prefetch {
            side: dev.ctx.new_stream()?,
            fork: dev.ctx.new_event(None)?,
            join: dev.ctx.new_event(None)?,
            cap: l2 * CAP_TENTHS / 10,
            mode: Cell::new(mode),
            pending: Cell::new([(0, 0); 2]),
            capturing: Cell::new(false),
            forked: Cell::new(false),
        })
    }
}

impl CudaBackend {
    /// How announced weights reach L2 from now on (benchmarks compare; a recorded
    /// step keeps the mode it was recorded with).
    pub fn set_l2_prefetch(&self, mode: PrefetchMode) {
        self.prefetch.mode.set(mode);
    }

    /// How announced weights reach L2.
    pub fn l2_prefetch(&self) -> PrefetchMode {
        self.prefetch.mode.get()
    }

    /// The four trailing arguments of a `gemv_*` launch (GemvPrefetch in gemv.cu); any
    /// launch calls it, so pending ranges go to the next launch or lapse.
    pub(super) fn take_gemv_prefetch(&self) -> [Arg; 4] {
        let [(p0, n0), (p1, n1)] = self.prefetch.pending.replace([(0, 0); 2]);
        [Arg::U64(p0), Arg::U64(n0), Arg::U64(p1), Arg::U64(n1)]
    }

    /// The weights of `ws` that fit the cap, as (address, bytes).
    fn fitting<'a>(
        &'a self,
        ws: &'a [&CudaTensor],
    ) -> impl Iterator<Item = (&'a CudaTensor, usize)> + 'a {
        ws.iter().filter_map(move |w| {
            let Buf::Bf16(s) = &w.buf else { return None };
            let bytes = s.len() * 2;
            (bytes > 0 && bytes <= self.prefetch.cap).then_some((*w, bytes))
        })
    }

    /// Announce `ws` ([`crate::backend::Backend::prefetch_weights`]): hand them to the
    /// next skinny product, or start them on the second stream after what the step has
    /// launched so far.
    pub(super) fn prefetch_impl(&self, ws: &[&CudaTensor]) -> Result<(), BackendError> {
        let p = &self.prefetch;
        match p.mode.get() {
            PrefetchMode::Off => Ok(()),
            PrefetchMode::Gemv => {
                let mut ranges = [(0u64, 0u64); 2];
                for (slot, (w, bytes)) in ranges.iter_mut().zip(self.fitting(ws)) {
                    *slot = (self.tptr(w), bytes as u64);
                }
                p.pending.set(ranges);
                Ok(())
            }
            PrefetchMode::Stream if p.capturing.get() => self.prefetch_on_stream(ws),
            PrefetchMode::Stream => Ok(()),
        }
    }

    fn prefetch_on_stream(&self, ws: &[&CudaTensor]) -> Result<(), BackendError> {
        let p = &self.prefetch;
        let Ok(f) = self.dev.kernels.get("l2_prefetch") else {
            return Ok(());
        };
        let mut forked = false;
        for (w, bytes) in self.fitting(ws) {
            if !forked {
                p.fork.record(&self.dev.stream)?;
                p.side.wait(&p.fork)?;
                forked = true;
            }
            // One warp a block, spread over the SMs: each SM's copy engine walks the
            // lines of its chunks, and a few engines cannot keep DRAM busy.
            let threads = bytes.div_ceil(CHUNK);
            let blocks = threads.div_ceil(32).min(4 * self.dev.num_sms).max(1);
            let ptr = self.tptr(w);
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
