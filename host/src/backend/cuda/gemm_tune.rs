//! The algorithm of each decode-batch product of a large weight, chosen by timing.
//!
//! `cublasGemmEx` picks its algorithm by heuristic. On Qwen3-14B's products at 16-128
//! rows, the best of cuBLASLt's own heuristic candidates ran 4-7% faster on gate_up
//! and down, replayed from graphs (`gpu-check bench`, "gemm algorithms" lines;
//! docs/results/gpu-2026-12-02-skgemm.md). So the first time a product of a new
//! `(m, n, k)` runs outside a graph recording, it is timed with `cublasGemmEx` and
//! with every candidate on its own buffers (the output is written again by the call
//! that follows), and the winner serves that shape from then on, recordings included.
//! A shape first met while recording runs `cublasGemmEx` until an eager call tunes it
//! (the runner runs every batch size eagerly before recording it).
//!
//! Only bf16 products without an accumulate (beta 0), of at most [`TUNE_MAX_ROWS`]
//! rows and weights of at least [`TUNE_MIN_WEIGHT_BYTES`]: where a product is long
//! enough that the host cost of timing it stays in milliseconds and a few percent of
//! it matter. `MINISGL_GEMM_TUNE=0` turns it off.

use std::collections::HashMap;

use cudarc::cublaslt::{result as lt, sys as ltsys};
use cudarc::driver::sys::{CUevent_flags, CUstreamCaptureStatus};
use cudarc::driver::CudaSlice;

use super::device::dptr;
use super::gemm_lt::{lt_err, Desc, WORKSPACE};
use super::CudaBackend;
use crate::backend::BackendError;

/// Most rows a tuned product has: the largest decode batch the runner records.
pub const TUNE_MAX_ROWS: usize = 256;

/// Smallest weight (bytes) a tuned product has: past L2, where a product takes tens
/// of microseconds (Qwen3-0.6B's, 2-13 MB, take 4-6 µs, and the survey found
/// nothing to gain on them).
pub const TUNE_MIN_WEIGHT_BYTES: usize = 32 << 20;

/// Candidates cuBLASLt's heuristic is asked for.
const CANDIDATES: usize = 8;

/// A candidate must beat `cublasGemmEx` by this factor to replace it, so that timing
/// noise does not swap an algorithm for an equal one.
const MARGIN: f64 = 0.98;

/// Calls timed per algorithm (after two warm-up calls).
const TIMED_CALLS: usize = 10;

/// The chosen cuBLASLt algorithm of one shape.
struct Plan {
    desc: Desc,
    algo: ltsys::cublasLtMatmulAlgo_t,
}

/// cuBLASLt's handle, its workspace and the choice made for each shape (None:
/// `cublasGemmEx` stays).
pub(crate) struct GemmTuner {
    handle: ltsys::cublasLtHandle_t,
    pref: ltsys::cublasLtMatmulPreference_t,
    workspace: CudaSlice<u8>,
    plans: HashMap<(usize, usize, usize), Option<Plan>>,
}

// SAFETY: cuBLASLt's handle, preference and descriptors are heap objects not tied to
// the thread that made them (cuBLAS allows a handle on any thread, one at a time).
// The tuner lives in a RefCell of the backend, which is not Sync, so one thread at a
// time uses it; the backend moves between threads whole (the engine's worker).
unsafe impl Send for GemmTuner {}

impl Drop for GemmTuner {
    fn drop(&mut self) {
        // The plans' descriptors go before the handle they were made for.
        self.plans.clear();
        // SAFETY: created in `GemmTuner::new`, destroyed once here; the backend's
        // stream is drained before a device is dropped.
        unsafe {
            let _ = lt::destroy_matmul_pref(self.pref);
            let _ = lt::destroy_handle(self.handle);
        }
    }
}

impl GemmTuner {
    fn new(be: &CudaBackend) -> Result<GemmTuner, BackendError> {
        let workspace = be.dev.stream.alloc_zeros::<u8>(WORKSPACE)?;
        let handle = lt::create_handle().map_err(|e| lt_err("handle", e))?;
        let pref = match lt::create_matmul_pref() {
            Ok(p) => p,
            Err(e) => {
                // SAFETY: created just above, not used elsewhere.
                unsafe {
                    let _ = lt::destroy_handle(handle);
                }
                return Err(lt_err("preference", e));
            }
        };
        let tuner = GemmTuner {
            handle,
            pref,
            workspace,
            plans: HashMap::new(),
        };
        let ws_bytes = WORKSPACE as u64;
        // SAFETY: `pref` is live; the attribute is a u64.
        unsafe {
            lt::set_matmul_pref_attribute(
                tuner.pref,
                ltsys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                &ws_bytes as *const u64 as *const _,
                8,
            )
        }
        .map_err(|e| lt_err("workspace preference", e))?;
        Ok(tuner)
    }

    /// Up to [`CANDIDATES`] heuristic candidates for `desc` that fit the workspace.
    fn candidates(&self, desc: &Desc) -> Result<Vec<ltsys::cublasLtMatmulAlgo_t>, BackendError> {
        let mut found = vec![
            // SAFETY: a plain C struct; the heuristic overwrites the first `count`
            // entries, and only those are read.
            unsafe { std::mem::zeroed::<ltsys::cublasLtMatmulHeuristicResult_t>() };
            CANDIDATES
        ];
        let mut count = 0i32;
        // SAFETY: descriptors are live; `found` holds CANDIDATES entries.
        unsafe {
            ltsys::cublasLtMatmulAlgoGetHeuristic(
                self.handle,
                desc.op,
                desc.w,
                desc.x,
                desc.y,
                desc.y,
                self.pref,
                found.len() as i32,
                found.as_mut_ptr(),
                &mut count,
            )
        }
        .result()
        .map_err(|e| lt_err("heuristic", e))?;
        Ok(found
            .iter()
            .take(count.max(0) as usize)
            .filter(|h| {
                h.state == ltsys::cublasStatus_t::CUBLAS_STATUS_SUCCESS
                    && h.workspaceSize <= WORKSPACE
            })
            .map(|h| h.algo)
            .collect())
    }
}

impl CudaBackend {
    /// What tuning chose for `(m, n, k)`: Some(true) a cuBLASLt candidate, Some(false)
    /// `cublasGemmEx`, None not tuned (yet). For checks and reports.
    pub fn gemm_tune_choice(&self, m: usize, n: usize, k: usize) -> Option<bool> {
        let t = self.gemm_tuner.borrow();
        t.as_ref()?.plans.get(&(m, n, k)).map(|p| p.is_some())
    }

    /// `y[m, n] = x · wᵀ` (bf16, beta 0) through the algorithm tuned for its shape.
    /// Returns false, having done nothing, where the shape is not tuned here (outside
    /// the rows and sizes above, tuning off, or first met while recording) or
    /// `cublasGemmEx` won: the caller then runs `cublasGemmEx`.
    pub(crate) fn gemm_tuned(
        &self,
        (x, w, y): (u64, u64, u64),
        m: usize,
        n: usize,
        k: usize,
    ) -> Result<bool, BackendError> {
        if !self.gemm_tune.get()
            || !(1..=TUNE_MAX_ROWS).contains(&m)
            || n * k * 2 < TUNE_MIN_WEIGHT_BYTES
        {
            return Ok(false);
        }
        let key = (m, n, k);
        let known = self
            .gemm_tuner
            .borrow()
            .as_ref()
            .is_some_and(|t| t.plans.contains_key(&key));
        if !known {
            if self.dev.stream.capture_status()?
                != CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
            {
                return Ok(false);
            }
            let plan = self.tune((x, w, y), m, n, k)?;
            let mut t = self.gemm_tuner.borrow_mut();
            if let Some(t) = t.as_mut() {
                t.plans.insert(key, plan);
            }
        }
        let t = self.gemm_tuner.borrow();
        let Some(Some(plan)) = t.as_ref().and_then(|t| t.plans.get(&key)) else {
            return Ok(false);
        };
        let t = t.as_ref().expect("a tuner holds every plan");
        super::timeline::wrap(&self.dev, "cublaslt_gemm", || {
            self.lt_matmul(t, &plan.desc, &plan.algo, (x, w, y))
        })?;
        Ok(true)
    }

    /// One `cublasLtMatmul` of `desc`'s shape with `algo`.
    fn lt_matmul(
        &self,
        t: &GemmTuner,
        desc: &Desc,
        algo: &ltsys::cublasLtMatmulAlgo_t,
        (x, w, y): (u64, u64, u64),
    ) -> Result<(), BackendError> {
        let (alpha, beta) = (1.0f32, 0.0f32);
        // SAFETY: the caller's pointers address buffers of the sizes `desc` describes
        // (checked by `linear`); the workspace is as large as the preference allows.
        unsafe {
            lt::matmul(
                t.handle,
                desc.op,
                &alpha as *const f32 as *const _,
                &beta as *const f32 as *const _,
                w as *const _,
                desc.w,
                x as *const _,
                desc.x,
                y as *const _,
                desc.y,
                y as *mut _,
                desc.y,
                algo,
                dptr(&t.workspace, &self.dev.stream) as *mut _,
                WORKSPACE,
                self.dev.stream.cu_stream() as ltsys::cudaStream_t,
            )
        }
        .map_err(|e| lt_err("matmul", e))
    }

    /// Times `cublasGemmEx` and each candidate on the caller's buffers; the fastest
    /// candidate if it beats `cublasGemmEx` by [`MARGIN`].
    fn tune(
        &self,
        bufs: (u64, u64, u64),
        m: usize,
        n: usize,
        k: usize,
    ) -> Result<Option<Plan>, BackendError> {
        if self.gemm_tuner.borrow().is_none() {
            *self.gemm_tuner.borrow_mut() = Some(GemmTuner::new(self)?);
        }
        let guard = self.gemm_tuner.borrow();
        let t = guard.as_ref().expect("created above");
        let desc = Desc::new(m, n, k)?;
        let (x, w, y) = bufs;
        let default_us = self.time_eager(&mut || self.gemm_ex(x, w, y, m, n, k, false, 0.0))?;
        let mut best: Option<(f64, ltsys::cublasLtMatmulAlgo_t)> = None;
        for algo in t.candidates(&desc)? {
            // A candidate that fails to run is skipped, not fatal.
            if let Ok(us) = self.time_eager(&mut || self.lt_matmul(t, &desc, &algo, bufs)) {
                if best.is_none_or(|(b, _)| us < b) {
                    best = Some((us, algo));
                }
            }
        }
        tracing::debug!(
            "gemm tune {m}x{n}x{k}: cublasGemmEx {default_us:.1} us, best cuBLASLt candidate {:?} us",
            best.map(|b| b.0)
        );
        Ok(match best {
            Some((us, algo)) if us < MARGIN * default_us => Some(Plan { desc, algo }),
            _ => None,
        })
    }

    /// µs of GPU time per call of `f`, eagerly: two warm-up calls, then
    /// [`TIMED_CALLS`] between two events (products this long keep the stream ahead
    /// of the host, so the host's cost per call is not counted).
    fn time_eager(
        &self,
        f: &mut dyn FnMut() -> Result<(), BackendError>,
    ) -> Result<f64, BackendError> {
        for _ in 0..2 {
            f()?;
        }
        let ctx = &self.dev.ctx;
        let e0 = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        let e1 = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        e0.record(&self.dev.stream)?;
        for _ in 0..TIMED_CALLS {
            f()?;
        }
        e1.record(&self.dev.stream)?;
        e1.synchronize()?;
        Ok(e0.elapsed_ms(&e1)? as f64 * 1e3 / TIMED_CALLS as f64)
    }
}
