//! Activations quantised to 8 bits in blocks of 32 (ggml's Q8_0 scheme,
//! plus each block's scaled sum for the formats with a per-block offset),
//! and the two-part form that carries ~15 bits through the same kernels.
//!
//! Why two parts: one 8-bit step is `max|x| / 127` of its block, and real
//! activations have outlier channels (SmolLM2's final hidden state has
//! values two orders above the rest), so the other 31 values of an outlier's
//! block keep one or two bits. That moved the default model's logits by up
//! to 0.9 and flipped its greedy answer to the chat "What is the capital of
//! France?" (a 0.08 margin in the exact product). Splitting `x` into a coarse
//! part and its rounding residual, each 8-bit, and summing the two products
//! (the dot product is linear, so each part keeps its own scale and offset
//! term) cuts the step to `max|x| / 32258` at twice the integer work and no
//! more weight bytes read.

/// Elements per activation block.
pub const QK: usize = 32;

/// `rows` activation rows of `cols` elements, each block of 32 stored as
/// `d` (scale), `s` (`d · Σq`, for offset terms) and 32 signed bytes in
/// `-127..=127`, so that `x ≈ d · q`.
#[derive(Clone, Debug, Default)]
pub struct QActs {
    pub rows: usize,
    pub cols: usize,
    /// `rows * cols` quantised values, row-major.
    pub qs: Vec<i8>,
    /// `rows * cols / 32` block scales.
    pub d: Vec<f32>,
    /// `rows * cols / 32` block sums `d · Σq`.
    pub s: Vec<f32>,
    /// Stored rows per activation row: 1, or 2 after [`quantize_acts_split`]
    /// (then [`super::matmul`] sums each pair into one output row, so the
    /// two parts never take a buffer or a pass of their own).
    pub parts: usize,
}

impl QActs {
    /// Blocks per row.
    pub fn blocks(&self) -> usize {
        self.cols / QK
    }

    /// Activation rows (stored rows / parts), the rows of a product's output.
    pub fn logical_rows(&self) -> usize {
        self.rows / self.parts.max(1)
    }
}

/// Quantises `x` (`rows × cols`, `cols` a multiple of 32) into `out`,
/// reusing its buffers. Round to nearest (ties away from zero, as ggml's
/// `roundf`), scale `max|x| / 127` per block.
pub fn quantize_acts(x: &[f32], rows: usize, cols: usize, out: &mut QActs) {
    debug_assert!(cols.is_multiple_of(QK) && x.len() == rows * cols);
    let nb = rows * cols / QK;
    out.rows = rows;
    out.cols = cols;
    out.parts = 1;
    out.qs.resize(rows * cols, 0);
    out.d.resize(nb, 0.0);
    out.s.resize(nb, 0.0);
    for (b, (xb, qb)) in x
        .chunks_exact(QK)
        .zip(out.qs.chunks_exact_mut(QK))
        .enumerate()
    {
        let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        let mut sum = 0i32;
        for (q, &v) in qb.iter_mut().zip(xb) {
            let r = (v * id).round() as i32;
            *q = r as i8;
            sum += r;
        }
        out.d[b] = d;
        out.s[b] = d * sum as f32;
    }
}

/// Quantises `x` (`rows × cols`) in two parts into `out`, which gets
/// `2 · rows` rows: row `2i` is row `i` rounded to 8 bits as
/// [`quantize_acts`] does, row `2i + 1` the rounding residual of row `i`,
/// also 8-bit with its own block scales. `x[i] ≈ part[2i] + part[2i + 1]`
/// within `max|x| / 64516` per element of a block (half a step of a step
/// that is at most `1/254` of the first one).
pub fn quantize_acts_split(x: &[f32], rows: usize, cols: usize, out: &mut QActs) {
    debug_assert!(cols.is_multiple_of(QK) && x.len() == rows * cols);
    let nb = cols / QK;
    out.rows = 2 * rows;
    out.cols = cols;
    out.parts = 2;
    out.qs.resize(2 * rows * cols, 0);
    out.d.resize(2 * rows * nb, 0.0);
    out.s.resize(2 * rows * nb, 0.0);
    // SAFETY: the features were just detected; the buffers have the sizes
    // set above.
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx512f") {
        unsafe { super::avx512::quantize_split(x, rows, cols, out) };
        return;
    }
    quantize_split_scalar(x, rows, cols, out);
}

/// [`quantize_acts_split`] without SIMD (the reference the AVX-512 one must
/// equal bit for bit); `out` already sized.
pub fn quantize_split_scalar(x: &[f32], rows: usize, cols: usize, out: &mut QActs) {
    let nb = cols / QK;
    debug_assert!(out.qs.len() == 2 * rows * cols && out.d.len() == 2 * rows * nb);
    let mut resid = [0f32; QK];
    for (i, xr) in x.chunks_exact(cols).enumerate() {
        for (b, xb) in xr.chunks_exact(QK).enumerate() {
            let hi = (2 * i) * nb + b;
            let lo = (2 * i + 1) * nb + b;
            let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = amax / 127.0;
            let id = if d > 0.0 { 1.0 / d } else { 0.0 };
            let mut sum = 0i32;
            let at = (2 * i) * cols + b * QK;
            for (k, &v) in xb.iter().enumerate() {
                let r = (v * id).round() as i32;
                out.qs[at + k] = r as i8;
                sum += r;
                resid[k] = v - d * r as f32;
            }
            out.d[hi] = d;
            out.s[hi] = d * sum as f32;
            let rmax = resid.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d2 = rmax / 127.0;
            let id2 = if d2 > 0.0 { 1.0 / d2 } else { 0.0 };
            let mut sum2 = 0i32;
            let at2 = (2 * i + 1) * cols + b * QK;
            for (k, &v) in resid.iter().enumerate() {
                let r = (v * id2).round() as i32;
                out.qs[at2 + k] = r as i8;
                sum2 += r;
            }
            out.d[lo] = d2;
            out.s[lo] = d2 * sum2 as f32;
        }
    }
}
