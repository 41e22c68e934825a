//! The Hopper decode GEMM (`kernels/gemm_sm90.cu`): products of decode batches past the
//! skinny kernel's rows, with SiLU·mul in gate_up's epilogue or qkv_rope_store's work in
//! qkv's. Which products take it (`MINISGL_GEMM_ROWS`, off by default until measured
//! against cuBLAS) and the tile each launch takes live here; the launch goes through a
//! cluster when k is split.

use cudarc::driver::sys;

use super::rope::QkvRopeStore;
use crate::backend::cuda::{cfg, g, tma, Arg, CudaBackend};
use crate::backend::BackendError;

/// x rows a tile (`TG_BM`: two consumer warpgroups of 64).
const TILE_ROWS: usize = 128;
/// k a pipeline stage (`TG_BK`).
const STAGE_K: usize = 64;
/// Threads a CTA (`TG_THREADS`): the producer warpgroup and two consumer warpgroups.
const THREADS: u32 = 384;
/// Most rows the kernel takes: decode batches. Prefill chunks stay on cuBLAS, whose
/// large tiles are at the held GEMM rate there.
pub const GEMM_MAX_ROWS: usize = 256;
/// Most CTAs of a cluster: the split-k CTAs of one tile (8 is every Hopper's portable
/// cluster size).
const MAX_SPLITS: usize = 8;
/// Fewest k stages a split runs: below it the fill and the exchange outweigh the work.
const MIN_STAGES_A_SPLIT: usize = 4;

/// What a launch does after the product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmEpi {
    /// `y = x · wᵀ (+ bias)`.
    Plain,
    /// `y = silu(x · w_gateᵀ) · (x · w_upᵀ)`, w a gate_up weight `[2n, k]`.
    Silu,
    /// `qkv = x · wᵀ (+ bias)`, then qkv_rope_store's work on it (heads of this size).
    Rope(usize),
}

/// A launch's tile: `bn` weight rows (64 or 128) and `splits` CTAs sharing its k.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmTile {
    pub bn: usize,
    pub splits: usize,
}

impl std::str::FromStr for GemmTile {
    type Err = String;
    /// `BNxS`, e.g. `64x4` (`MINISGL_GEMM_TILE`).
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!("MINISGL_GEMM_TILE must be BNxSPLITS with BN 64 or 128 and SPLITS 1, 2, 4 or 8 (e.g. 64x4), got {s:?}")
        };
        let (bn, splits) = s.split_once('x').ok_or_else(bad)?;
        let t = GemmTile {
            bn: bn.parse().map_err(|_| bad())?,
            splits: splits.parse().map_err(|_| bad())?,
        };
        t.valid().then_some(t).ok_or_else(bad)
    }
}

impl GemmTile {
    /// Every tile the kernels are built for.
    pub const ALL: [GemmTile; 8] = [
        GemmTile { bn: 64, splits: 1 },
        GemmTile { bn: 64, splits: 2 },
        GemmTile { bn: 64, splits: 4 },
        GemmTile { bn: 64, splits: 8 },
        GemmTile { bn: 128, splits: 1 },
        GemmTile { bn: 128, splits: 2 },
        GemmTile { bn: 128, splits: 4 },
        GemmTile { bn: 128, splits: 8 },
    ];

    fn valid(&self) -> bool {
        matches!(self.bn, 64 | 128) && self.splits.is_power_of_two() && self.splits <= MAX_SPLITS
    }

    /// Whether this tile can take a product of `w_rows` weight rows: a SiLU tile's gate
    /// half (`bn / 2` rows) must not run into the up rows; a rope tile is one head.
    fn fits(&self, w_rows: usize, epi: GemmEpi) -> bool {
        match epi {
            GemmEpi::Plain => true,
            GemmEpi::Silu => w_rows.is_multiple_of(2) && (w_rows / 2).is_multiple_of(self.bn / 2),
            GemmEpi::Rope(hd) => self.bn == hd && w_rows.is_multiple_of(hd),
        }
    }

    /// The kernel of this tile.
    fn kernel(&self, epi: GemmEpi) -> &'static str {
        match (epi, self.bn) {
            (GemmEpi::Plain, 64) => "gemm_tc_bn64",
            (GemmEpi::Plain, _) => "gemm_tc_bn128",
            (GemmEpi::Silu, 64) => "gemm_tc_silu_bn64",
            (GemmEpi::Silu, _) => "gemm_tc_silu_bn128",
            (GemmEpi::Rope(_), 64) => "gemm_tc_rope_hd64",
            (GemmEpi::Rope(_), _) => "gemm_tc_rope_hd128",
        }
    }
}

/// The tile for `m` rows of x against `w_rows` weight rows over `k` with epilogue
/// `epi`, where `capacity(s)` CTAs of clusters of `s` run at once (one CTA an SM: the
/// stages take 148-193 KB), or `None` where no built tile fits (a SiLU weight whose
/// halves are not a multiple of 32 rows, heads of neither 64 nor 128).
///
/// The rule: 128 weight rows a tile (x is re-read once a tile column, so wider tiles
/// read it half as often) unless that leaves under a quarter of the SMs a tile (a rope
/// tile is one head, whatever); then the most splits of k (doubling) that keep the
/// grid in one wave and each split at least [`MIN_STAGES_A_SPLIT`] stages. For
/// Qwen3-0.6B at 256 rows on 132 SMs: qkv 128 x 2 (128 CTAs), o and down 64 x 4 (128),
/// gate_up 128 x 1 (96).
pub(crate) fn gemm_tile(
    m: usize,
    w_rows: usize,
    k: usize,
    epi: GemmEpi,
    capacity: impl Fn(usize) -> usize,
) -> Option<GemmTile> {
    let m_tiles = m.div_ceil(TILE_ROWS);
    let stages = k.div_ceil(STAGE_K);
    let wide = GemmTile { bn: 128, splits: 1 };
    let narrow = GemmTile { bn: 64, splits: 1 };
    let mut t = if matches!(epi, GemmEpi::Rope(_)) {
        [wide, narrow].into_iter().find(|t| t.fits(w_rows, epi))?
    } else if wide.fits(w_rows, epi) && w_rows.div_ceil(128) * m_tiles * 4 >= capacity(1) {
        wide
    } else if narrow.fits(w_rows, epi) {
        narrow
    } else {
        return None;
    };
    let tiles = w_rows.div_ceil(t.bn) * m_tiles;
    while t.splits < MAX_SPLITS
        && tiles * t.splits * 2 <= capacity(t.splits * 2)
        && stages / (t.splits * 2) >= MIN_STAGES_A_SPLIT
    {
        t.splits *= 2;
    }
    Some(t)
}

impl CudaBackend {
    /// Whether the Hopper decode GEMM takes `x[m, k] · w[w_rows, k]ᵀ` with epilogue
    /// `epi`: more rows than the skinny kernel takes and at most `gemm_rows`, its
    /// kernels built here, operands the copy engine can map, and a tile that fits.
    pub(super) fn use_tc_gemm(
        &self,
        (x, w): (u64, u64),
        (m, w_rows, k): (usize, usize, usize),
        epi: GemmEpi,
    ) -> bool {
        m > self.gemv_rows.get()
            && m <= self.gemm_rows.get()
            && tma::matrix_fits(x, k)
            && tma::matrix_fits(w, k)
            && self.tc_gemm_tile(m, w_rows, k, epi).is_some()
    }

    /// Whether the product of `x` and `w` with epilogue `epi` (`linear`,
    /// `linear_silu_mul`, or `linear_qkv_attention`'s product) goes through the Hopper
    /// GEMM now: checks assert it, so that a label naming the kernel is true.
    pub fn tc_gemm_takes(
        &self,
        x: &crate::backend::cuda::CudaTensor,
        w: &crate::backend::cuda::CudaTensor,
        epi: GemmEpi,
    ) -> bool {
        let (&[m, k], &[w_rows, kw]) = (x.shape.as_slice(), w.shape.as_slice()) else {
            return false;
        };
        let (Ok(xp), Ok(wp)) = (self.bf16_ptr(x, "tc_gemm"), self.bf16_ptr(w, "tc_gemm")) else {
            return false;
        };
        k == kw && !x.logits_input && self.use_tc_gemm((xp, wp), (m, w_rows, k), epi)
    }

    /// The tile of a product of `m` rows against `w_rows` weight rows over `k` with
    /// epilogue `epi` here: the tile forced by [`Self::set_gemm_tile`] (if it fits),
    /// else the rule of [`gemm_tile`]; `None` where its kernel is not built.
    pub fn tc_gemm_tile(
        &self,
        m: usize,
        w_rows: usize,
        k: usize,
        epi: GemmEpi,
    ) -> Option<GemmTile> {
        let t = match self.gemm_tile.get() {
            Some(t) => t.fits(w_rows, epi).then_some(t)?,
            None => gemm_tile(m, w_rows, k, epi, |s| self.gemm_capacity(s))?,
        };
        self.dev.kernels.has(t.kernel(epi)).then_some(t)
    }

    /// CTAs of the GEMM that run at once in clusters of `splits` (the driver's answer
    /// for the widest build, asked once; one an SM where it cannot say).
    fn gemm_capacity(&self, splits: usize) -> usize {
        let sms = self.dev.num_sms.max(1);
        let table = self.gemm_clusters.get_or_init(|| {
            [1usize, 2, 4, 8].map(|s| {
                self.max_active_clusters("gemm_tc_bn128", s)
                    .map_or(sms / s, |c| c.max(1))
            })
        });
        let i = splits.trailing_zeros() as usize;
        table.get(i).map_or(sms, |c| c * splits)
    }

    fn max_active_clusters(&self, kernel: &str, splits: usize) -> Option<usize> {
        let f = self.dev.kernels.get(kernel).ok()?;
        let smem = crate::backend::cuda::device::dynamic_smem(kernel)? as u32;
        let mut attr = cluster_attr(splits);
        let lc = sys::CUlaunchConfig {
            gridDimX: 1,
            gridDimY: 1,
            gridDimZ: splits as u32,
            blockDimX: THREADS,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: smem,
            hStream: self.dev.stream.cu_stream(),
            attrs: &mut attr,
            numAttrs: 1,
        };
        let mut n: std::ffi::c_int = 0;
        self.dev.ctx.bind_to_thread().ok()?;
        // SAFETY: `lc` and `attr` outlive the call; the driver only reads them.
        unsafe { sys::cuOccupancyMaxActiveClusters(&mut n, f.cu_function(), &lc) }
            .result()
            .ok()?;
        Some(n as usize)
    }

    /// Through `gemm_tc_*`, with `epi`: `y[m, n] = x · wᵀ (+ bias, where not 0)`;
    /// SiLU (w a gate_up weight `[2n, k]`, no bias) `y = silu(x·w_gateᵀ) · (x·w_upᵀ)`;
    /// Rope (`rope` given, its qkv is y) the product, then qkv_rope_store's work on it.
    /// The caller asked [`Self::use_tc_gemm`].
    pub(super) fn tc_gemm(
        &self,
        (x, w, bias, y): (u64, u64, u64, u64),
        (m, n, k): (usize, usize, usize),
        epi: GemmEpi,
        rope: Option<&QkvRopeStore>,
    ) -> Result<(), BackendError> {
        let w_rows = if epi == GemmEpi::Silu { 2 * n } else { n };
        let t = self.tc_gemm_tile(m, w_rows, k, epi).ok_or_else(|| {
            BackendError::Unsupported(format!(
                "Hopper GEMM: no tile takes m={m} w_rows={w_rows} k={k} {epi:?}"
            ))
        })?;
        let name = t.kernel(epi);
        // The timeline's floor: x and the weight read, y written.
        crate::backend::cuda::timeline::cost(
            ((m * k + w_rows * k) * 2 + m * n * 2) as f64,
            2.0 * (m * w_rows * k) as f64,
        );
        let mut c = cfg(
            (
                g(w_rows.div_ceil(t.bn)),
                g(m.div_ceil(TILE_ROWS)),
                t.splits as u32,
            ),
            THREADS,
        );
        c.shared_mem_bytes = crate::backend::cuda::device::dynamic_smem(name).unwrap_or(0) as u32;
        let box_rows = if epi == GemmEpi::Silu { t.bn / 2 } else { t.bn };
        let maps = [
            tma::matrix_map(x, m, k, TILE_ROWS)?,
            tma::matrix_map(w, w_rows, k, box_rows)?,
        ];
        let mut args = vec![
            Arg::Map(maps[0]),
            Arg::Map(maps[1]),
            Arg::U64(y),
            Arg::U64(if epi == GemmEpi::Silu { 0 } else { bias }),
            Arg::I32(m as i32),
            Arg::I32(n as i32),
            Arg::I32(k as i32),
        ];
        if let GemmEpi::Rope(_) = epi {
            let a = rope.ok_or_else(|| {
                BackendError::Unsupported("Hopper GEMM: rope epilogue without its arguments".into())
            })?;
            args.extend([Arg::I32(a.q_heads as i32), Arg::I32(a.kv_heads as i32)]);
            args.extend(a.norm_rope_args());
            args.extend([Arg::U64(a.k_cache), Arg::U64(a.v_cache)]);
        }
        let f = self.dev.kernels.get(name)?;
        crate::backend::cuda::timeline::wrap(&self.dev, name, || {
            if t.splits == 1 {
                self.launch_attrs(f, c, &args, &mut [])
            } else {
                self.launch_attrs(f, c, &args, &mut [cluster_attr(t.splits)])
            }
        })
    }
}

/// The launch attribute for clusters of `splits` CTAs along z.
fn cluster_attr(splits: usize) -> sys::CUlaunchAttribute {
    // SAFETY: a zeroed union is a valid bit pattern; the field set is three uints.
    let mut value: sys::CUlaunchAttributeValue = unsafe { std::mem::zeroed() };
    value.clusterDim.x = 1;
    value.clusterDim.y = 1;
    value.clusterDim.z = splits as u32;
    sys::CUlaunchAttribute {
        id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
        pad: [0; 4],
        value,
    }
}

#[cfg(test)]
mod tests {
    use super::{gemm_tile, GemmEpi, GemmTile};

    /// 132 SMs, one CTA each, clusters placed anywhere.
    fn h200(s: usize) -> usize {
        132 / s * s
    }

    fn tile(bn: usize, splits: usize) -> Option<GemmTile> {
        Some(GemmTile { bn, splits })
    }

    #[test]
    fn qwen3_06b_products_fill_one_wave() {
        // 256 rows: two tiles of 128 over m.
        assert_eq!(
            gemm_tile(256, 4096, 1024, GemmEpi::Plain, h200),
            tile(128, 2),
            "qkv"
        );
        assert_eq!(
            gemm_tile(256, 1024, 2048, GemmEpi::Plain, h200),
            tile(64, 4),
            "o"
        );
        assert_eq!(
            gemm_tile(256, 6144, 1024, GemmEpi::Silu, h200),
            tile(128, 1),
            "gate_up"
        );
        assert_eq!(
            gemm_tile(256, 1024, 3072, GemmEpi::Plain, h200),
            tile(64, 4),
            "down"
        );
        // 128 rows: one tile over m, so more splits.
        assert_eq!(
            gemm_tile(128, 4096, 1024, GemmEpi::Plain, h200),
            tile(64, 2),
            "qkv"
        );
        assert_eq!(
            gemm_tile(128, 1024, 2048, GemmEpi::Plain, h200),
            tile(64, 8),
            "o"
        );
        assert_eq!(
            gemm_tile(128, 6144, 1024, GemmEpi::Silu, h200),
            tile(128, 2),
            "gate_up"
        );
        for m in [65, 100, 129, 200, 256] {
            for (w_rows, k, epi) in [
                (4096, 1024, GemmEpi::Plain),
                (1024, 3072, GemmEpi::Plain),
                (6144, 1024, GemmEpi::Silu),
                (4096, 1024, GemmEpi::Rope(128)),
            ] {
                let t = gemm_tile(m, w_rows, k, epi, h200).unwrap();
                let ctas = w_rows.div_ceil(t.bn) * m.div_ceil(128) * t.splits;
                assert!(ctas <= 132 || t.splits == 1, "m={m} {w_rows}x{k}: {t:?}");
                assert!(k.div_ceil(64) / t.splits >= 4, "m={m} {w_rows}x{k}: {t:?}");
            }
        }
    }

    #[test]
    fn splits_stop_at_short_k_and_at_the_clusters_that_fit() {
        // k = 256: four stages, no split.
        assert_eq!(gemm_tile(128, 1024, 256, GemmEpi::Plain, h200), tile(64, 1));
        // Clusters of 8 fit only 96 CTAs here: 16 tiles take 4 splits.
        let few_eights = |s: usize| if s == 8 { 96 } else { h200(s) };
        assert_eq!(
            gemm_tile(128, 1024, 2048, GemmEpi::Plain, few_eights),
            tile(64, 4)
        );
        // Qwen3-14B at 256 rows: enough tiles without splits.
        assert_eq!(
            gemm_tile(256, 7168, 5120, GemmEpi::Plain, h200),
            tile(128, 1)
        );
        assert_eq!(
            gemm_tile(256, 34816, 5120, GemmEpi::Silu, h200),
            tile(128, 1)
        );
    }

    #[test]
    fn silu_tiles_keep_gate_and_up_apart() {
        // 3,000 gate rows: 64-row halves do not divide them, 32-row halves do not either.
        assert_eq!(gemm_tile(128, 6000, 1024, GemmEpi::Silu, h200), None);
        // 17,408 = 272 x 64: the wide tile fits. 1,056 = 33 x 32: only the narrow one.
        assert!(gemm_tile(256, 2 * 17408, 5120, GemmEpi::Silu, h200).is_some());
        assert_eq!(
            gemm_tile(256, 2 * 1056, 1024, GemmEpi::Silu, h200).map(|t| t.bn),
            Some(64)
        );
        // Plain products take any width: the copy engine zero-fills past the rows.
        assert!(gemm_tile(100, 1003, 1000, GemmEpi::Plain, h200).is_some());
    }

    #[test]
    fn rope_tiles_are_one_head() {
        // Qwen3-0.6B's qkv (32 heads of 128) at 128 rows: one head a tile, k split 4 ways.
        assert_eq!(
            gemm_tile(128, 4096, 1024, GemmEpi::Rope(128), h200),
            tile(128, 4)
        );
        assert_eq!(
            gemm_tile(256, 4096, 1024, GemmEpi::Rope(128), h200),
            tile(128, 2)
        );
        // Heads of 64 (SmolLM2, Qwen2.5-0.5B): the narrow tile.
        assert_eq!(
            gemm_tile(100, 1152, 576, GemmEpi::Rope(64), h200).map(|t| t.bn),
            Some(64)
        );
        // Heads of 256, or a width that is not whole heads: no tile.
        assert_eq!(gemm_tile(128, 4096, 1024, GemmEpi::Rope(256), h200), None);
        assert_eq!(gemm_tile(128, 4000, 1024, GemmEpi::Rope(128), h200), None);
        // A forced tile of the wrong width does not fit a rope product.
        assert!(!GemmTile { bn: 64, splits: 1 }.fits(4096, GemmEpi::Rope(128)));
    }

    #[test]
    fn the_tile_setting_parses_and_names_its_value() {
        assert_eq!("64x4".parse(), Ok(GemmTile { bn: 64, splits: 4 }));
        assert_eq!("128x1".parse(), Ok(GemmTile { bn: 128, splits: 1 }));
        for bad in ["96x1", "64x3", "64x16", "64", "x2", ""] {
            let e = bad.parse::<GemmTile>().unwrap_err();
            assert!(
                e.contains("MINISGL_GEMM_TILE") && e.contains(&format!("{bad:?}")),
                "{e}"
            );
        }
        assert!(GemmTile::ALL.iter().all(GemmTile::valid));
    }
}
