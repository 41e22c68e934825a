//! `out = acts · Wᵀ` for a quantised `W`: the rows of `W` are split across
//! the threads (the caller and its [`crate::backend::cpu::team`]); each thread walks its rows once per tile of up to 64
//! activation rows, dotting each weight row with four activation rows at a
//! time (a decode step of one sequence is one activation row; a prefill
//! chunk or a batch of sequences is many, and then each weight block is
//! unpacked once per four rows, and stays in L1 across the tile).
//!
//! With AVX-512 VNNI and a [`Packed`] copy of the weight, the work is split
//! by groups of sixteen weight rows instead, and each group runs the VNNI
//! kernel over all activation rows, four at a time (see [`super::avx512`]).

use super::packed::{Packed, GROUP};
use super::{scalar, QActs, QMatrix};
use crate::backend::QuantType;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Scalar,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// AVX2 for the row kernels, plus the AVX-512 VNNI GEMM on packed
    /// Q4_0/Q4_1/Q8_0 weights.
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

/// The fastest kernels `MINISGL_CPU_KERNELS` allows (for comparisons): any, or at most
/// AVX2, or only the portable ones.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Cap {
    #[default]
    Fastest,
    Avx2,
    Scalar,
}

impl std::str::FromStr for Cap {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "" | "fastest" => Ok(Cap::Fastest),
            "avx2" => Ok(Cap::Avx2),
            "scalar" => Ok(Cap::Scalar),
            o => Err(format!(
                "must be fastest, avx2 or scalar (a cap), got {o:?}"
            )),
        }
    }
}

/// The dot-product kernels in use: AVX-512 VNNI (with AVX2 for the formats
/// it does not cover), AVX2 (+FMA, F16C) when the CPU has them, else the
/// portable ones. Only [`Kernels::detect`] hands out the SIMD ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kernels(Kind);

impl Default for Kernels {
    fn default() -> Self {
        Kernels::detect()
    }
}

impl Kernels {
    /// The fastest kernels this CPU runs, capped by the environment's
    /// `MINISGL_CPU_KERNELS` (`fastest`, `avx2`, `scalar`; for comparisons).
    pub fn detect() -> Self {
        let cap: Cap = crate::env::choice("MINISGL_CPU_KERNELS");
        if cap == Cap::Scalar {
            return Kernels(Kind::Scalar);
        }
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
        {
            if cap != Cap::Avx2
                && is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512vnni")
            {
                return Kernels(Kind::Avx512);
            }
            return Kernels(Kind::Avx2);
        }
        Kernels(Kind::Scalar)
    }

    /// Whether these kernels use [`Packed`] weights (then upload packs
    /// Q4_0/Q4_1/Q8_0 matrices).
    pub fn packs(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        if self.0 == Kind::Avx512 {
            return true;
        }
        false
    }

    /// The portable kernels (the reference).
    pub fn scalar() -> Self {
        Kernels(Kind::Scalar)
    }

    /// Short name for logs and benchmarks.
    pub fn name(self) -> &'static str {
        match self.0 {
            Kind::Scalar => "scalar",
            #[cfg(target_arch = "x86_64")]
            Kind::Avx2 => "avx2",
            #[cfg(target_arch = "x86_64")]
            Kind::Avx512 => "avx512vnni",
        }
    }

    /// `out[i] = w · acts[r0 + i]` for `i < n`, `1 <= n <= 4`; `w` is one
    /// weight row of type `ty` covering `a.cols`.
    pub fn dot_rows(
        self,
        ty: QuantType,
        w: &[u8],
        a: &QActs,
        r0: usize,
        n: usize,
        out: &mut [f32],
    ) {
        assert!((1..=4).contains(&n) && r0 + n <= a.rows && out.len() >= n);
        assert_eq!(w.len(), a.cols / ty.block_elems() * ty.block_bytes());
        match self.0 {
            Kind::Scalar => {
                for (i, o) in out[..n].iter_mut().enumerate() {
                    *o = scalar::dot(ty, w, a, r0 + i);
                }
            }
            // SAFETY: `Kind::Avx2` exists only when `detect` saw the features;
            // the lengths were checked above.
            #[cfg(target_arch = "x86_64")]
            Kind::Avx2 | Kind::Avx512 => unsafe { super::avx2::dot_rows(ty, w, a, r0, n, out) },
        }
    }
}

/// Activation rows per tile (64 rows of a 1536-wide layer are 96 KiB of
/// bytes: they stay in L2 while a thread's weight rows stream past).
const ACT_TILE: usize = 64;
/// Below this many multiply-adds a product runs on the calling thread.
const SERIAL_WORK: usize = 1 << 16;

struct OutPtr(*mut f32);
// SAFETY: tasks write disjoint columns of `out` (see `matmul`).
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// Writes `v` at `i`.
    ///
    /// # Safety
    /// `i` must be inside the buffer, and no other thread may access it.
    unsafe fn write(&self, i: usize, v: f32) {
        *self.0.add(i) = v;
    }
}

/// `out[i * w.rows + j] = a[i] · w[j]` (`out` is `a.logical_rows() ×
/// w.rows`; the parts of a split activation row are summed).
pub fn matmul(a: &QActs, w: &QMatrix, k: Kernels, out: &mut [f32]) {
    let (m, n) = (a.rows, w.rows);
    let parts = a.parts.max(1);
    assert_eq!(a.cols, w.cols, "activation and weight widths");
    assert_eq!(out.len(), m / parts * n, "output size");
    // Tiles and groups of four rows start at even rows, so with two parts
    // (an even `m`) a pair never straddles two of them.
    assert!(parts <= 2 && m.is_multiple_of(parts), "activation parts");
    if m == 0 || n == 0 {
        return;
    }
    if let Some(p) = w.packed.as_deref().filter(|_| k.packs()) {
        return matmul_packed(a, p, k, out);
    }
    let ptr = OutPtr(out.as_mut_ptr());
    let run = |j0: usize, j1: usize| {
        let mut tmp = [0f32; 4];
        for ib in (0..m).step_by(ACT_TILE) {
            let ie = (ib + ACT_TILE).min(m);
            for j in j0..j1 {
                let row = w.row(j);
                let mut i = ib;
                while i < ie {
                    let c = (ie - i).min(4);
                    k.dot_rows(w.ty, row, a, i, c, &mut tmp);
                    if parts == 2 {
                        for r in (0..c).step_by(2) {
                            // SAFETY: (i + r) / 2 < m / 2 and j < n; only the
                            // task owning column j writes it.
                            unsafe { ptr.write((i + r) / 2 * n + j, tmp[r] + tmp[r + 1]) };
                        }
                    } else {
                        for (r, &v) in tmp[..c].iter().enumerate() {
                            // SAFETY: (i + r) < m and j < n, so the index is
                            // in `out`; only the task owning column j writes it.
                            unsafe { ptr.write((i + r) * n + j, v) };
                        }
                    }
                    i += c;
                }
            }
        }
    };
    let threads = rayon::current_num_threads();
    if threads <= 1 || m * n * a.cols < SERIAL_WORK {
        run(0, n);
        return;
    }
    // A few tasks per thread balance uneven progress; at least 8 rows each
    // keep scheduling cheap.
    let tasks = (threads * 4).min(n.div_ceil(8)).max(1);
    let per = n.div_ceil(tasks);
    crate::backend::cpu::team::for_each(tasks, |t| run((t * per).min(n), ((t + 1) * per).min(n)));
}

/// Activation rows per tile of the packed GEMM (256 rows of a 1536-wide
/// layer are 384 KiB: they stay in L2 while a thread's groups go past).
const PACKED_TILE: usize = 256;

/// Below this many multiply-adds a packed product runs on the calling
/// thread (`MINISGL_CPU_PACKED_SERIAL` overrides it, for measuring).
fn packed_serial_work() -> usize {
    static W: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *W.get_or_init(|| {
        crate::env::count(
            "MINISGL_CPU_PACKED_SERIAL",
            SERIAL_WORK,
            |_| true,
            "a multiply-add count",
        )
    })
}

/// [`matmul`] on [`Packed`] weights: groups of 16 weight rows split across
/// the threads, four activation rows at a time per group.
fn matmul_packed(a: &QActs, p: &Packed, k: Kernels, out: &mut [f32]) {
    let (m, n) = (a.rows, p.rows);
    let parts = a.parts.max(1);
    assert_eq!(a.cols, p.cols, "activation and weight widths");
    let groups = p.groups();
    let ptr = OutPtr(out.as_mut_ptr());
    let run = |g0: usize, g1: usize| {
        for ib in (0..m).step_by(PACKED_TILE) {
            let ie = (ib + PACKED_TILE).min(m);
            for g in g0..g1 {
                let mut i = ib;
                while i < ie {
                    let c = (ie - i).min(4);
                    match k.0 {
                        // SAFETY: `Kind::Avx512` exists only when `detect` saw
                        // avx512f/bw/vnni; widths were checked; rows i..i+c
                        // exist; `out` is m × n and only this task writes
                        // group g's columns.
                        #[cfg(target_arch = "x86_64")]
                        Kind::Avx512 => unsafe {
                            super::avx512::group_rows(p, g, a, i, c, ptr.0, n)
                        },
                        _ => {
                            for r in (i..i + c).step_by(parts) {
                                for j in g * GROUP..((g + 1) * GROUP).min(n) {
                                    let v = (r..r + parts).map(|r| p.dot_ref(j, a, r)).sum();
                                    // SAFETY: r / parts < m / parts, j < n;
                                    // only this task writes group g's columns.
                                    unsafe { ptr.write(r / parts * n + j, v) };
                                }
                            }
                        }
                    }
                    i += c;
                }
            }
        }
    };
    let threads = rayon::current_num_threads();
    if threads <= 1 || m * n * a.cols < packed_serial_work() {
        run(0, groups);
        return;
    }
    let tasks = (threads * 4).min(groups).max(1);
    let per = groups.div_ceil(tasks);
    crate::backend::cpu::team::for_each(tasks, |t| {
        run((t * per).min(groups), ((t + 1) * per).min(groups))
    });
}

#[cfg(test)]
mod tests {
    use super::Cap;

    #[test]
    fn the_kernel_cap_takes_its_three_names_and_refuses_others() {
        assert_eq!("".parse::<Cap>(), Ok(Cap::Fastest));
        assert_eq!("fastest".parse::<Cap>(), Ok(Cap::Fastest));
        assert_eq!("avx2".parse::<Cap>(), Ok(Cap::Avx2));
        assert_eq!("scalar".parse::<Cap>(), Ok(Cap::Scalar));
        let err = "avx512".parse::<Cap>().unwrap_err();
        assert!(
            err.contains("\"avx512\"") && err.contains("scalar"),
            "{err}"
        );
    }
}
