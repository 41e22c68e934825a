//! cuBLASLt's candidate algorithms for one decode-shaped product, timed against the
//! algorithm `cublasGemmEx` picks by itself (what `linear` runs today).
//!
//! At batch 64-256 the four products of a Qwen3-0.6B layer take 6-9 µs each through
//! cuBLAS, two to three times what their FLOPs and bytes need (Nsight Compute,
//! 2026-12-01). Before building a tuner into `linear`, this measures what choosing
//! among cuBLASLt's heuristic candidates would give: `gpu-check bench` prints it per
//! shape.

use cudarc::cublaslt::{result as lt, sys as ltsys};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::CudaGraph;

use super::device::dptr;
use super::CudaBackend;
use crate::backend::BackendError;

pub(super) fn lt_err(what: &str, e: impl std::fmt::Debug) -> BackendError {
    BackendError::Device(format!("cuBLASLt {what}: {e:?}"))
}

/// One product timed every way: cuBLAS's own choice and each cuBLASLt candidate.
#[derive(Clone, Debug)]
pub struct GemmSurvey {
    /// µs per call of `cublasGemmEx` with the default algorithm (GPU time: calls
    /// replayed from a graph).
    pub default_us: f64,
    /// µs per call of each heuristic candidate that fits the workspace, in cuBLASLt's
    /// order (its first is what `cublasLtMatmul` would run without tuning); None
    /// where its recording failed.
    pub candidates_us: Vec<Option<f64>>,
}

impl GemmSurvey {
    /// The fastest candidate: (index, µs).
    pub fn best(&self) -> Option<(usize, f64)> {
        self.candidates_us
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.map(|t| (i, t)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
    }
}

/// Descriptors of `Y[m, n] = X[m, k] · W[n, k]ᵀ` in bf16 with an f32 accumulator, in
/// cuBLAS's column-major terms (`Yᵀ = W · Xᵀ`, W read transposed), destroyed on drop.
pub(super) struct Desc {
    pub(super) op: ltsys::cublasLtMatmulDesc_t,
    pub(super) w: ltsys::cublasLtMatrixLayout_t,
    pub(super) x: ltsys::cublasLtMatrixLayout_t,
    pub(super) y: ltsys::cublasLtMatrixLayout_t,
}

impl Desc {
    pub(super) fn new(m: usize, n: usize, k: usize) -> Result<Desc, BackendError> {
        use ltsys::cudaDataType::CUDA_R_16BF;
        let op = lt::create_matmul_desc(
            ltsys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            ltsys::cudaDataType::CUDA_R_32F,
        )
        .map_err(|e| lt_err("matmul desc", e))?;
        let t = cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_T;
        // SAFETY: `op` was just created; the attribute is an i32-sized enum.
        unsafe {
            lt::set_matmul_desc_attribute(
                op,
                ltsys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
                &t as *const _ as *const _,
                std::mem::size_of_val(&t),
            )
        }
        .map_err(|e| lt_err("transa", e))?;
        let w = lt::create_matrix_layout(CUDA_R_16BF, k as u64, n as u64, k as i64)
            .map_err(|e| lt_err("layout W", e))?;
        let x = lt::create_matrix_layout(CUDA_R_16BF, k as u64, m as u64, k as i64)
            .map_err(|e| lt_err("layout X", e))?;
        let y = lt::create_matrix_layout(CUDA_R_16BF, n as u64, m as u64, n as i64)
            .map_err(|e| lt_err("layout Y", e))?;
        Ok(Desc { op, w, x, y })
    }
}

impl Drop for Desc {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once here.
        unsafe {
            let _ = lt::destroy_matrix_layout(self.y);
            let _ = lt::destroy_matrix_layout(self.x);
            let _ = lt::destroy_matrix_layout(self.w);
            let _ = lt::destroy_matmul_desc(self.op);
        }
    }
}

impl Desc {
    /// Up to `max` of cuBLASLt's heuristic candidates for this product, in its order,
    /// each within WORKSPACE (the others are left out).
    pub(super) fn heuristics(
        &self,
        handle: ltsys::cublasLtHandle_t,
        max: usize,
    ) -> Result<Vec<ltsys::cublasLtMatmulHeuristicResult_t>, BackendError> {
        let pref = lt::create_matmul_pref().map_err(|e| lt_err("preference", e))?;
        let ws_bytes = WORKSPACE as u64;
        let mut found = vec![
            // SAFETY: a plain C struct; every field is overwritten by the heuristic for
            // the first `count` entries, and only those are read.
            unsafe { std::mem::zeroed::<ltsys::cublasLtMatmulHeuristicResult_t>() };
            max.max(1)
        ];
        let mut count = 0i32;
        // SAFETY: `pref` is live; the attribute is a u64.
        let got = unsafe {
            lt::set_matmul_pref_attribute(
                pref,
                ltsys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                &ws_bytes as *const u64 as *const _,
                8,
            )
        }
        .map_err(|e| lt_err("workspace preference", e))
        .and_then(|()| {
            // SAFETY: the descriptors and `pref` are live; `found` holds `max` entries.
            unsafe {
                ltsys::cublasLtMatmulAlgoGetHeuristic(
                    handle,
                    self.op,
                    self.w,
                    self.x,
                    self.y,
                    self.y,
                    pref,
                    found.len() as i32,
                    found.as_mut_ptr(),
                    &mut count,
                )
            }
            .result()
            .map_err(|e| lt_err("heuristic", e))
        });
        // SAFETY: created above and used only here.
        unsafe {
            let _ = lt::destroy_matmul_pref(pref);
        }
        got?;
        found.truncate(count.max(0) as usize);
        found.retain(|h| {
            h.state == ltsys::cublasStatus_t::CUBLAS_STATUS_SUCCESS && h.workspaceSize <= WORKSPACE
        });
        Ok(found)
    }

    /// Enqueue `y = x · wᵀ` on `stream` with `algo`.
    ///
    /// # Safety
    /// `w`, `x` and `y` address device buffers of the sizes the layouts describe,
    /// `work` one of WORKSPACE bytes, and `algo` needs at most that much workspace.
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn matmul(
        &self,
        handle: ltsys::cublasLtHandle_t,
        algo: &ltsys::cublasLtMatmulAlgo_t,
        w: u64,
        x: u64,
        y: u64,
        work: u64,
        stream: ltsys::cudaStream_t,
    ) -> Result<(), BackendError> {
        let (alpha, beta) = (1.0f32, 0.0f32);
        // SAFETY: the caller's contract; alpha and beta live across the call.
        unsafe {
            lt::matmul(
                handle,
                self.op,
                &alpha as *const f32 as *const _,
                &beta as *const f32 as *const _,
                w as *const _,
                self.w,
                x as *const _,
                self.x,
                y as *const _,
                self.y,
                y as *mut _,
                self.y,
                algo,
                work as *mut _,
                WORKSPACE,
                stream,
            )
        }
        .map_err(|e| lt_err("matmul", e))
    }
}

/// Deterministic bf16 values in [-0.05, 0.05] for benchmark operands (bits).
pub(super) fn bench_values(len: usize, seed: usize) -> Vec<u16> {
    (0..len)
        .map(|i| {
            let v = ((i.wrapping_mul(2_654_435_761) ^ seed) >> 7) % 2001;
            half::bf16::from_f32(v as f32 / 20_000.0 - 0.05).to_bits()
        })
        .collect()
}

/// (copies, calls a graph) for timing a product of `weight_bytes` as a decode step
/// reads it, from memory: enough copies that one pass over them overflows the L2
/// several times, so no call finds its weight there, and at least 16 calls a graph in
/// whole passes over the copies.
pub fn cold_copies(weight_bytes: usize) -> (usize, usize) {
    let copies = (256usize << 20).div_ceil(weight_bytes.max(1)).clamp(2, 64);
    (copies, copies * 16usize.div_ceil(copies))
}

/// A cuBLASLt handle, destroyed on drop. Drop it only once the stream that used it
/// has drained.
pub(super) struct LtHandle(pub(super) ltsys::cublasLtHandle_t);

impl LtHandle {
    pub(super) fn new() -> Result<LtHandle, BackendError> {
        Ok(LtHandle(
            lt::create_handle().map_err(|e| lt_err("handle", e))?,
        ))
    }
}

impl Drop for LtHandle {
    fn drop(&mut self) {
        // SAFETY: created by `lt::create_handle`, destroyed once here; its users
        // drop it after synchronizing the stream it ran on.
        unsafe {
            let _ = lt::destroy_handle(self.0);
        }
    }
}

/// Workspace the candidates may use (as `linear`'s cuBLAS handle has).
pub(super) const WORKSPACE: usize = 32 << 20;

impl CudaBackend {
    /// µs of GPU time per call of `f`: one warm-up call, then `iters` calls recorded
    /// into a graph and replayed once, so that the host's cost per call (cuBLAS's
    /// algorithm lookup among it) is not counted; graphs are how decode steps run.
    /// `f` must only launch work on this backend's stream.
    pub fn time_in_graph(
        &self,
        iters: usize,
        f: &mut dyn FnMut() -> Result<(), BackendError>,
    ) -> Result<f64, BackendError> {
        let graph = self.record_calls(iters, f)?;
        Ok(self.time_graphs(&[Some(graph)], iters, 0.0)?[0].unwrap_or(f64::NAN))
    }

    /// One warm-up call of `f`, then `iters` calls recorded into an uploaded graph.
    pub(super) fn record_calls(
        &self,
        iters: usize,
        f: &mut dyn FnMut() -> Result<(), BackendError>,
    ) -> Result<CudaGraph, BackendError> {
        use cudarc::driver::sys::{CUgraphInstantiate_flags_enum, CUstreamCaptureMode};
        let dev = &self.dev;
        f()?;
        dev.stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
        let mut recorded = Ok(());
        for _ in 0..iters {
            recorded = recorded.and_then(|_| f());
        }
        let graph = dev.stream.end_capture(CUgraphInstantiate_flags_enum(0))?;
        recorded?;
        let graph = graph.ok_or_else(|| BackendError::Device("graph recorded nothing".into()))?;
        graph.upload()?;
        graph.launch()?;
        Ok(graph)
    }

    /// µs per call of each graph (of `iters` calls each; None stays None).
    ///
    /// `hold_s == 0`: each replayed once. Otherwise the first graph is first replayed
    /// back to back for `hold_s` seconds, so that the device reaches the clock it
    /// holds at its power limit (compute-bound products at full clock draw more than
    /// an H200's 700 W), then all of them take turns for several rounds with no gap
    /// between replays, and each gets its median: every candidate is timed under
    /// the same power state, as a long run of large decode steps meets it.
    pub(super) fn time_graphs(
        &self,
        graphs: &[Option<CudaGraph>],
        iters: usize,
        hold_s: f64,
    ) -> Result<Vec<Option<f64>>, BackendError> {
        let dev = &self.dev;
        let event = || dev.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT));
        let rounds = if hold_s > 0.0 { 7 } else { 1 };
        if hold_s > 0.0 {
            if let Some(Some(g)) = graphs.first() {
                let (e0, e1) = (event()?, event()?);
                e0.record(&dev.stream)?;
                g.launch()?;
                e1.record(&dev.stream)?;
                e1.synchronize()?;
                let once_s = (e0.elapsed_ms(&e1)? as f64 * 1e-3).max(1e-6);
                for _ in 0..(hold_s / once_s).ceil() as usize {
                    g.launch()?;
                }
            }
        }
        let mut marks = Vec::new();
        for _ in 0..rounds {
            for g in graphs {
                marks.push(match g {
                    Some(g) => {
                        let (e0, e1) = (event()?, event()?);
                        e0.record(&dev.stream)?;
                        g.launch()?;
                        e1.record(&dev.stream)?;
                        Some((e0, e1))
                    }
                    None => None,
                });
            }
        }
        dev.stream.synchronize()?;
        let mut out = Vec::with_capacity(graphs.len());
        for i in 0..graphs.len() {
            let mut us = Vec::new();
            for r in 0..rounds {
                if let Some((e0, e1)) = &marks[r * graphs.len() + i] {
                    us.push(e0.elapsed_ms(e1)? as f64 * 1e3 / iters.max(1) as f64);
                }
            }
            us.sort_by(f64::total_cmp);
            out.push(us.get(us.len() / 2).copied());
        }
        Ok(out)
    }

    /// Time `y[m, n] = x[m, k] · w[n, k]ᵀ` (bf16 in and out, random data) with
    /// `cublasGemmEx`'s default algorithm and with each of up to `max` cuBLASLt
    /// heuristic candidates: a warm-up call, then `iters` calls replayed from a graph;
    /// with `hold_s > 0`, timed at the power limit's clock ([`Self::time_graphs`]).
    pub fn survey_gemm(
        &self,
        m: usize,
        n: usize,
        k: usize,
        max: usize,
        iters: usize,
        hold_s: f64,
    ) -> Result<GemmSurvey, BackendError> {
        let dev = &self.dev;
        let x = dev.stream.clone_htod(&bench_values(m * k, 1))?;
        let w = dev.stream.clone_htod(&bench_values(n * k, 2))?;
        let y = dev.stream.alloc_zeros::<u16>(m * n)?;
        let ws = dev.stream.alloc_zeros::<u8>(WORKSPACE)?;
        let (xp, wp, yp) = (
            dptr(&x, &dev.stream),
            dptr(&w, &dev.stream),
            dptr(&y, &dev.stream),
        );
        let wsp = dptr(&ws, &dev.stream);
        let record = |f: &mut dyn FnMut() -> Result<(), BackendError>| self.record_calls(iters, f);
        // The default first: it is what holds the device at its power limit.
        let mut graphs = vec![Some(record(&mut || {
            self.gemm(xp, wp, yp, m, n, k, false, 0.0)
        })?)];

        let handle = LtHandle::new()?;
        let desc = Desc::new(m, n, k)?;
        let result = (|| -> Result<(), BackendError> {
            let stream = dev.stream.cu_stream() as ltsys::cudaStream_t;
            for h in desc.heuristics(handle.0, max)? {
                let g = record(&mut || {
                    // SAFETY: the buffers above, of the sizes the layouts describe;
                    // `heuristics` keeps only candidates within WORKSPACE.
                    unsafe { desc.matmul(handle.0, &h.algo, wp, xp, yp, wsp, stream) }
                });
                graphs.push(g.ok());
            }
            Ok(())
        })();
        // Timed while the handle and buffers the graphs use are alive.
        let timed = match &result {
            Ok(()) => self.time_graphs(&graphs, iters, hold_s),
            Err(_) => Ok(Vec::new()),
        };
        drop(graphs);
        // A candidate that failed part-way may have left work on the stream.
        let synced = dev.stream.synchronize();
        drop(desc);
        drop(handle);
        result?;
        synced?;
        let timed = timed?;
        drop((x, w, y, ws));
        Ok(GemmSurvey {
            default_us: timed[0].unwrap_or(f64::NAN),
            candidates_us: timed[1..].to_vec(),
        })
    }
}
