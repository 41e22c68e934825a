//! Activations quantised to 8 bits in blocks of 32 (ggml's Q8_0 scheme,
//! plus each block's scaled sum for the formats with a per-block offset).

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
}

impl QActs {
    /// Blocks per row.
    pub fn blocks(&self) -> usize {
        self.cols / QK
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
