//! Every cuBLASLt algorithm configuration for one decode-shaped product, timed with
//! its weight read from memory as a decode step reads it.
//!
//! `gemm_lt`'s survey times cuBLASLt's heuristic candidates (its top 16) and found
//! them within 2% of `cublasGemmEx` on Qwen3-0.6B's products at 16-256 rows. The
//! heuristic does not offer every tile, stage count, split-k and cluster shape an
//! algorithm supports. A cluster lets the CTAs of one shape share an operand's loads
//! (TMA multicast), which matters if these products are bound by the L2 traffic of
//! re-read tiles (docs/results/gpu-2026-12-07-mem.md). This sweep enumerates the
//! algorithm ids, each id's capabilities and a fixed list of cluster shapes, keeps
//! what `cublasLtMatmulAlgoCheck` accepts and times each from graph replays, so that
//! the question "is there a faster cuBLASLt kernel at all" has a measured answer.

use std::fmt;

use cudarc::cublaslt::sys as ltsys;

use super::device::dptr;
use super::gemm_lt::{bench_values, cold_copies, Desc, LtHandle, WORKSPACE};
use super::CudaBackend;
use crate::backend::BackendError;

/// One cuBLASLt algorithm configuration (the `CUBLASLT_ALGO_CONFIG_*` values; the
/// numbers are the cuBLASLt header's enum values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LtConfig {
    pub algo: i32,
    pub tile: u32,
    pub stages: u32,
    pub cluster: u16,
    pub splitk: u32,
    pub reduction: u32,
}

impl fmt::Display for LtConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "algo {} tile {} stages {} cluster {} splitk {} reduction {}",
            self.algo,
            self.tile,
            self.stages,
            cluster_name(self.cluster),
            self.splitk,
            self.reduction
        )
    }
}

/// Cluster shapes tried for every (algorithm, tile): cuBLASLt has no capability that
/// lists them, so `cublasLtMatmulAlgoCheck` decides. (id, shape), ids from
/// `cublasLtClusterShape_t`.
const CLUSTERS: &[(u16, &str)] = &[
    (0, "auto"),
    (2, "1x1x1"),
    (3, "2x1x1"),
    (4, "4x1x1"),
    (5, "1x2x1"),
    (6, "2x2x1"),
    (8, "1x4x1"),
];

fn cluster_name(id: u16) -> &'static str {
    CLUSTERS
        .iter()
        .find(|c| c.0 == id)
        .map(|c| c.1)
        .unwrap_or("?")
}

/// Configurations re-timed against `cublasGemmEx` in alternating rounds at the end.
const FINAL: usize = 8;
/// Seconds of `cublasGemmEx` replays before those rounds (see `time_graphs`).
const FINAL_HOLD_S: f64 = 0.05;

/// Split-k counts tried where an algorithm supports split-k.
const SPLITS: &[u32] = &[1, 2, 4, 8];

/// What one sweep found. Times are µs per call of GPU time, from graph replays that
/// cycle through enough copies of the weight that none is in L2 when it is read.
#[derive(Clone, Debug)]
pub struct GemmSweep {
    /// `cublasGemmEx` with its own algorithm (what `linear` runs).
    pub default_us: f64,
    /// cuBLASLt's first heuristic candidate, and its configuration (a median of the
    /// same rounds as `default_us`).
    pub heuristic: Option<(LtConfig, f64)>,
    /// Configurations offered to `cublasLtMatmulAlgoCheck`.
    pub tried: usize,
    /// Those it accepted (within the workspace).
    pub valid: usize,
    /// The timed ones, fastest first (at most the sweep's `max_timed`, then each of the
    /// five fastest again under every stage count its algorithm lists). The first
    /// eight and `default_us` are medians of seven alternating rounds; the rest are
    /// one replay each.
    pub timed: Vec<(LtConfig, f64)>,
    /// Copies of the weight the graphs cycle through.
    pub copies: usize,
}

/// A capability of `algo` as a list of u32 (tile or stage ids); empty if none.
fn cap_list(
    algo: &ltsys::cublasLtMatmulAlgo_t,
    attr: ltsys::cublasLtMatmulAlgoCapAttributes_t,
) -> Vec<u32> {
    let mut bytes = 0usize;
    // SAFETY: a size query (null buffer, size 0) writes only `bytes`.
    let st = unsafe {
        ltsys::cublasLtMatmulAlgoCapGetAttribute(algo, attr, std::ptr::null_mut(), 0, &mut bytes)
    };
    if st != ltsys::cublasStatus_t::CUBLAS_STATUS_SUCCESS || bytes == 0 {
        return Vec::new();
    }
    let mut out = vec![0u32; bytes / 4];
    // SAFETY: `out` holds `bytes` bytes.
    let st = unsafe {
        ltsys::cublasLtMatmulAlgoCapGetAttribute(
            algo,
            attr,
            out.as_mut_ptr() as *mut _,
            out.len() * 4,
            &mut bytes,
        )
    };
    if st != ltsys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        return Vec::new();
    }
    out
}

/// A 4-byte capability of `algo` (0 if it cannot be read).
fn cap_u32(
    algo: &ltsys::cublasLtMatmulAlgo_t,
    attr: ltsys::cublasLtMatmulAlgoCapAttributes_t,
) -> u32 {
    let mut v = 0u32;
    let mut written = 0usize;
    // SAFETY: `v` is 4 bytes, as the size says.
    unsafe {
        ltsys::cublasLtMatmulAlgoCapGetAttribute(
            algo,
            attr,
            &mut v as *mut u32 as *mut _,
            4,
            &mut written,
        )
    };
    v
}

/// Set one configuration attribute of `algo` from a plain value.
fn set_config<T: Copy>(
    algo: &mut ltsys::cublasLtMatmulAlgo_t,
    attr: ltsys::cublasLtMatmulAlgoConfigAttributes_t,
    v: T,
) -> bool {
    // SAFETY: `v` lives across the call and its size is passed.
    let st = unsafe {
        ltsys::cublasLtMatmulAlgoConfigSetAttribute(
            algo,
            attr,
            &v as *const T as *const _,
            std::mem::size_of::<T>(),
        )
    };
    st == ltsys::cublasStatus_t::CUBLAS_STATUS_SUCCESS
}

/// Set the cluster shape: a uint16_t in the cuBLASLt header, with a 4-byte value as
/// the fallback should a library build read it wider.
fn set_cluster(algo: &mut ltsys::cublasLtMatmulAlgo_t, id: u16) -> bool {
    use ltsys::cublasLtMatmulAlgoConfigAttributes_t as A;
    set_config(algo, A::CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, id)
        || set_config(algo, A::CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, id as u32)
}

/// Read one configuration attribute of `algo` (0 if it cannot be read).
fn get_config<T: Copy + Default>(
    algo: &ltsys::cublasLtMatmulAlgo_t,
    attr: ltsys::cublasLtMatmulAlgoConfigAttributes_t,
) -> T {
    let mut v = T::default();
    let mut written = 0usize;
    // SAFETY: `v` is size_of::<T>() bytes, as the size says.
    unsafe {
        ltsys::cublasLtMatmulAlgoConfigGetAttribute(
            algo,
            attr,
            &mut v as *mut T as *mut _,
            std::mem::size_of::<T>(),
            &mut written,
        )
    };
    v
}

fn config_of(algo: &ltsys::cublasLtMatmulAlgo_t) -> LtConfig {
    use ltsys::cublasLtMatmulAlgoConfigAttributes_t as A;
    LtConfig {
        algo: get_config::<i32>(algo, A::CUBLASLT_ALGO_CONFIG_ID),
        tile: get_config::<u32>(algo, A::CUBLASLT_ALGO_CONFIG_TILE_ID),
        stages: get_config::<u32>(algo, A::CUBLASLT_ALGO_CONFIG_STAGES_ID),
        cluster: get_config::<u16>(algo, A::CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
        splitk: get_config::<u32>(algo, A::CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
        reduction: get_config::<u32>(algo, A::CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
    }
}

/// The data types every call here uses: bf16 in and out, f32 compute and scale.
const BF16: ltsys::cudaDataType = ltsys::cudaDataType::CUDA_R_16BF;
const COMPUTE: ltsys::cublasComputeType_t = ltsys::cublasComputeType_t::CUBLAS_COMPUTE_32F;
const SCALE: ltsys::cudaDataType = ltsys::cudaDataType::CUDA_R_32F;

/// Every configuration `check` accepts: for each algorithm id, tile and cluster shape,
/// one split under the first stage count that passes (the algorithm's default first),
/// then each split-k count and reduction scheme under that stage count. Returns
/// (configurations checked, those accepted).
fn enumerate(
    handle: ltsys::cublasLtHandle_t,
    check: &mut dyn FnMut(&ltsys::cublasLtMatmulAlgo_t) -> bool,
) -> (usize, Vec<(LtConfig, ltsys::cublasLtMatmulAlgo_t)>) {
    use ltsys::cublasLtMatmulAlgoCapAttributes_t as C;
    use ltsys::cublasLtMatmulAlgoConfigAttributes_t as A;
    let mut ids = vec![0i32; 512];
    let mut count = 0i32;
    // SAFETY: `ids` holds the requested count.
    let st = unsafe {
        ltsys::cublasLtMatmulAlgoGetIds(
            handle,
            COMPUTE,
            SCALE,
            BF16,
            BF16,
            BF16,
            BF16,
            ids.len() as i32,
            ids.as_mut_ptr(),
            &mut count,
        )
    };
    if st != ltsys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        return (0, Vec::new());
    }
    let mut tried = 0;
    let mut found = Vec::new();
    for &id in &ids[..count.max(0) as usize] {
        // SAFETY: a plain C struct that AlgoInit fills.
        let mut base = unsafe { std::mem::zeroed::<ltsys::cublasLtMatmulAlgo_t>() };
        // SAFETY: `base` is written by the call.
        let st = unsafe {
            ltsys::cublasLtMatmulAlgoInit(
                handle, COMPUTE, SCALE, BF16, BF16, BF16, BF16, id, &mut base,
            )
        };
        if st != ltsys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            continue;
        }
        let mut tiles = cap_list(&base, C::CUBLASLT_ALGO_CAP_TILE_IDS);
        if tiles.is_empty() {
            tiles.push(0);
        }
        let stages = cap_list(&base, C::CUBLASLT_ALGO_CAP_STAGES_IDS);
        let splitk = cap_u32(&base, C::CUBLASLT_ALGO_CAP_SPLITK_SUPPORT) != 0;
        let red_mask = cap_u32(&base, C::CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK);
        for &tile in &tiles {
            for &(cluster, _) in CLUSTERS {
                // One split first, under the default stage count then each listed one;
                // a (tile, cluster) with no accepted stage count is not tried further.
                // Past one split, only the stage count one split took.
                let mut stage_ok = None;
                for &splits in SPLITS {
                    if splits > 1 && (!splitk || stage_ok.is_none()) {
                        break;
                    }
                    // In place, in the compute type, in the output type (bits 1, 2, 4).
                    let schemes: Vec<u32> = if splits == 1 {
                        vec![0]
                    } else {
                        [1u32, 2, 4]
                            .into_iter()
                            .filter(|s| red_mask & s != 0)
                            .collect()
                    };
                    for reduction in schemes {
                        let mut algo = base;
                        let ok = set_config(&mut algo, A::CUBLASLT_ALGO_CONFIG_TILE_ID, tile)
                            && set_cluster(&mut algo, cluster)
                            && set_config(&mut algo, A::CUBLASLT_ALGO_CONFIG_SPLITK_NUM, splits)
                            && set_config(
                                &mut algo,
                                A::CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                reduction,
                            );
                        if !ok {
                            continue;
                        }
                        let candidates: Vec<u32> = match stage_ok {
                            Some(s) => vec![s],
                            None => std::iter::once(0u32)
                                .chain(stages.iter().copied())
                                .collect(),
                        };
                        for stage in candidates {
                            let mut a = algo;
                            if !set_config(&mut a, A::CUBLASLT_ALGO_CONFIG_STAGES_ID, stage) {
                                continue;
                            }
                            tried += 1;
                            if check(&a) {
                                stage_ok.get_or_insert(stage);
                                found.push((
                                    LtConfig {
                                        algo: id,
                                        tile,
                                        stages: stage,
                                        cluster,
                                        splitk: splits,
                                        reduction,
                                    },
                                    a,
                                ));
                                break;
                            }
                        }
                    }
                }
            }
        }
    }
    (tried, found)
}

impl CudaBackend {
    /// Sweep every cuBLASLt configuration of `y[m, n] = x[m, k] · w[n, k]ᵀ` (bf16,
    /// random data) that the library accepts, timing at most `max_timed` of them (in
    /// enumeration order) against `cublasGemmEx`'s own algorithm and cuBLASLt's first
    /// heuristic candidate. Each graph replays whole passes over copies of the weight
    /// (together several times the L2), so every call reads its weight from memory.
    pub fn sweep_gemm(
        &self,
        m: usize,
        n: usize,
        k: usize,
        max_timed: usize,
    ) -> Result<GemmSweep, BackendError> {
        let dev = &self.dev;
        let (copies, iters) = cold_copies(n * k * 2);
        let x = dev.stream.clone_htod(&bench_values(m * k, 1))?;
        let wdata = bench_values(n * k, 2);
        let ws = (0..copies)
            .map(|_| dev.stream.clone_htod(&wdata))
            .collect::<Result<Vec<_>, _>>()?;
        let y = dev.stream.alloc_zeros::<u16>(m * n)?;
        let work = dev.stream.alloc_zeros::<u8>(WORKSPACE)?;
        let xp = dptr(&x, &dev.stream);
        let wps: Vec<u64> = ws.iter().map(|w| dptr(w, &dev.stream)).collect();
        let yp = dptr(&y, &dev.stream);
        let workp = dptr(&work, &dev.stream);
        // One graph of `iters` calls, the i-th on copy i % copies.
        let record_cycle = |call: &mut dyn FnMut(u64) -> Result<(), BackendError>| {
            let mut i = 0usize;
            self.record_calls(iters, &mut || {
                let r = call(wps[i % copies]);
                i += 1;
                r
            })
        };

        // cublasGemmEx's graph: timed with the finalists at the end.
        let default = record_cycle(&mut |wp| self.gemm(xp, wp, yp, m, n, k, false, 0.0))?;
        let mut graphs = vec![Some(default)];

        let handle = LtHandle::new()?;
        let desc = Desc::new(m, n, k)?;
        let stream = dev.stream.cu_stream() as ltsys::cudaStream_t;
        let run = |algo: &ltsys::cublasLtMatmulAlgo_t, wp: u64| -> Result<(), BackendError> {
            // SAFETY: the buffers above, of the sizes the layouts describe; only
            // configurations within WORKSPACE are run (`heuristics`, `check`).
            unsafe { desc.matmul(handle.0, algo, wp, xp, yp, workp, stream) }
        };
        let time_one = |algo: &ltsys::cublasLtMatmulAlgo_t| -> Option<f64> {
            let g = record_cycle(&mut |wp| run(algo, wp)).ok()?;
            self.time_graphs(&[Some(g)], iters, 0.0).ok()?[0]
        };

        // The heuristic's first candidate: timed with the finalists at the end.
        let heuristic_algo = desc.heuristics(handle.0, 1)?.first().map(|h| h.algo);

        let mut check = |algo: &ltsys::cublasLtMatmulAlgo_t| -> bool {
            // SAFETY: a plain C struct that the check fills.
            let mut res = unsafe { std::mem::zeroed::<ltsys::cublasLtMatmulHeuristicResult_t>() };
            // SAFETY: descriptors are live; `res` is written by the call.
            let st = unsafe {
                ltsys::cublasLtMatmulAlgoCheck(
                    handle.0, desc.op, desc.w, desc.x, desc.y, desc.y, algo, &mut res,
                )
            };
            st == ltsys::cublasStatus_t::CUBLAS_STATUS_SUCCESS && res.workspaceSize <= WORKSPACE
        };
        let (tried, found) = enumerate(handle.0, &mut check);
        let valid = found.len();
        let mut timed: Vec<(LtConfig, ltsys::cublasLtMatmulAlgo_t, f64)> = found
            .iter()
            .take(max_timed)
            .filter_map(|(cfg, algo)| time_one(algo).map(|us| (*cfg, *algo, us)))
            .collect();
        timed.sort_by(|a, b| a.2.total_cmp(&b.2));
        // The five fastest again under every stage count their algorithm lists.
        let mut more = Vec::new();
        for (cfg, base, _) in timed.iter().take(5) {
            let stages = cap_list(
                base,
                ltsys::cublasLtMatmulAlgoCapAttributes_t::CUBLASLT_ALGO_CAP_STAGES_IDS,
            );
            for stage in stages.into_iter().filter(|s| *s != cfg.stages) {
                let mut a = *base;
                if !set_config(
                    &mut a,
                    ltsys::cublasLtMatmulAlgoConfigAttributes_t::CUBLASLT_ALGO_CONFIG_STAGES_ID,
                    stage,
                ) || !check(&a)
                {
                    continue;
                }
                if let Some(us) = time_one(&a) {
                    let cfg = LtConfig {
                        stages: stage,
                        ..*cfg
                    };
                    more.push((cfg, a, us));
                }
            }
        }
        timed.extend(more);
        timed.sort_by(|a, b| a.2.total_cmp(&b.2));
        // One replay each ranked them; the eight fastest, cublasGemmEx and the
        // heuristic's first are then timed in turns over seven rounds (medians), so
        // that the figures compared are taken under the same conditions.
        let top = timed.len().min(FINAL);
        graphs.push(
            heuristic_algo
                .as_ref()
                .and_then(|algo| record_cycle(&mut |wp| run(algo, wp)).ok()),
        );
        for (_, algo, _) in &timed[..top] {
            graphs.push(record_cycle(&mut |wp| run(algo, wp)).ok());
        }
        let medians = self.time_graphs(&graphs, iters, FINAL_HOLD_S)?;
        let default_us = medians[0].unwrap_or(f64::NAN);
        let heuristic = heuristic_algo
            .as_ref()
            .zip(medians[1])
            .map(|(algo, us)| (config_of(algo), us));
        for (t, us) in timed[..top].iter_mut().zip(&medians[2..]) {
            if let Some(us) = us {
                t.2 = *us;
            }
        }
        timed[..top].sort_by(|a, b| a.2.total_cmp(&b.2));
        drop(graphs);
        let timed = timed.into_iter().map(|(c, _, us)| (c, us)).collect();
        // Every graph has run; nothing may still use the handle or the buffers.
        dev.stream.synchronize()?;
        drop(desc);
        drop(handle);
        drop((x, ws, y, work));
        Ok(GemmSweep {
            default_us,
            heuristic,
            tried,
            valid,
            timed,
            copies,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configuration_prints_its_cluster_shape_by_name() {
        let c = LtConfig {
            algo: 66,
            tile: 20,
            stages: 0,
            cluster: 3,
            splitk: 2,
            reduction: 4,
        };
        assert_eq!(
            c.to_string(),
            "algo 66 tile 20 stages 0 cluster 2x1x1 splitk 2 reduction 4"
        );
        assert_eq!(cluster_name(0), "auto");
        assert_eq!(cluster_name(7), "?");
    }
}
