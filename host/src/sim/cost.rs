//! The step-cost model: the device time of one engine step as a function of
//! what the step computes.
//!
//! A step is reduced to [`StepShape`]: its tokens, whether it is decode-only
//! (decode steps replay recorded graphs on CUDA and have their own curve), the
//! KV tokens its decodes read, and the query-key pairs of its prefill chunks.
//! The model is
//!
//! ```text
//! t = base(tokens) + us_per_kv_token * kv_read + us_per_attn_pair * attn_pairs
//! ```
//!
//! where `base` is piecewise linear through knots (the decode curve for
//! decode-only steps, the prefill curve otherwise), extended past the last
//! knot along its last segment. The knots sit at the token counts the profile
//! measured, so the dense part (GEMMs, norms, launch overheads) at those sizes
//! is free and only the two attention slopes are shared: a profile's own
//! points are reproduced closely, and sizes between them are interpolated.

use serde::{Deserialize, Serialize};

use crate::batch::StepInput;

/// What a step costs depends on (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepShape {
    /// Tokens run through the model (prefill chunks + one per decode).
    pub tokens: u64,
    /// Every sequence is a single-token decode.
    pub decode_only: bool,
    /// KV tokens the decodes attend to (context lengths, summed).
    pub kv_read: u64,
    /// Query-key pairs of the prefill chunks: a chunk of `n` tokens after
    /// `s` cached ones attends `n * s + n * (n + 1) / 2` pairs.
    pub attn_pairs: u64,
}

impl StepShape {
    /// The shape of a step the scheduler built. A one-token chunk counts as
    /// a decode (it costs like one).
    pub fn of(input: &StepInput) -> StepShape {
        let mut s = StepShape {
            decode_only: true,
            ..StepShape::default()
        };
        for seq in &input.seqs {
            let n = seq.tokens.len() as u64;
            let start = u64::from(seq.start_pos);
            s.tokens += n;
            if n == 1 {
                s.kv_read += start + 1;
            } else {
                s.decode_only = false;
                s.attn_pairs += n * start + n * (n + 1) / 2;
            }
        }
        s
    }

    /// `batch` decodes, each with `context` tokens already cached.
    pub fn decode(batch: u64, context: u64) -> StepShape {
        StepShape {
            tokens: batch,
            decode_only: true,
            kv_read: batch * (context + 1),
            attn_pairs: 0,
        }
    }

    /// One prefill chunk of `tokens` after `context` cached tokens.
    pub fn prefill(tokens: u64, context: u64) -> StepShape {
        StepShape {
            tokens,
            decode_only: false,
            kv_read: 0,
            attn_pairs: tokens * context + tokens * (tokens + 1) / 2,
        }
    }
}

/// The fitted model; serialised inside a profile file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CostModel {
    /// `(tokens, µs)` of decode-only steps, increasing in tokens.
    pub decode_knots: Vec<(u64, f64)>,
    /// `(tokens, µs)` of steps with prefill, increasing in tokens.
    pub prefill_knots: Vec<(u64, f64)>,
    /// µs per KV token a decode reads.
    pub us_per_kv_token: f64,
    /// µs per query-key pair of prefill attention.
    pub us_per_attn_pair: f64,
}

/// Why a model could not be fitted (names the offending input).
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum FitError {
    #[error("no {0} points to fit (the profile needs at least one)")]
    NoPoints(&'static str),
    #[error("point {index}: seconds = {value} is not a positive finite number")]
    BadTime { index: usize, value: f64 },
    #[error("the fit is singular (the points do not determine the model)")]
    Singular,
}

/// Piecewise-linear interpolation, extended linearly at both ends (a single
/// knot is a constant).
fn interp(knots: &[(u64, f64)], x: u64) -> f64 {
    let x = x as f64;
    match knots {
        [] => 0.0,
        [(_, y)] => *y,
        _ => {
            let i = knots
                .windows(2)
                .position(|w| x <= w[1].0 as f64)
                .unwrap_or(knots.len() - 2);
            let (x0, y0) = (knots[i].0 as f64, knots[i].1);
            let (x1, y1) = (knots[i + 1].0 as f64, knots[i + 1].1);
            y0 + (y1 - y0) * (x - x0) / (x1 - x0)
        }
    }
}

/// Weights of the hat functions at `x` over knots `xs` (what [`interp`]
/// multiplies the knot values by).
fn hat(xs: &[u64], x: u64) -> Vec<f64> {
    let mut w = vec![0.0; xs.len()];
    if xs.len() == 1 {
        w[0] = 1.0;
        return w;
    }
    let xf = x as f64;
    let i = xs
        .windows(2)
        .position(|p| xf <= p[1] as f64)
        .unwrap_or(xs.len() - 2);
    let t = (xf - xs[i] as f64) / (xs[i + 1] as f64 - xs[i] as f64);
    w[i] = 1.0 - t;
    w[i + 1] = t;
    w
}

impl CostModel {
    /// Predicted device time of a step, in microseconds (never below 1).
    pub fn step_us(&self, s: &StepShape) -> f64 {
        let base = if s.decode_only && !self.decode_knots.is_empty() {
            interp(&self.decode_knots, s.tokens)
        } else {
            interp(&self.prefill_knots, s.tokens)
        };
        let t = base
            + self.us_per_kv_token * s.kv_read as f64
            + self.us_per_attn_pair * s.attn_pairs as f64;
        t.max(1.0)
    }

    /// Least squares on relative error over `(shape, seconds)` points. Knots
    /// go at the measured token counts; the attention slopes are kept
    /// non-negative (a negative slope is fitted again at zero).
    pub fn fit(points: &[(StepShape, f64)]) -> Result<CostModel, FitError> {
        let (dx, px) = CostModel::knots(points);
        CostModel::fit_with_knots(points, &dx, &px)
    }

    /// The knots [`CostModel::fit`] puts at `points`: their distinct token
    /// counts, decode-only steps and the others apart, increasing.
    pub fn knots(points: &[(StepShape, f64)]) -> (Vec<u64>, Vec<u64>) {
        let of = |decode: bool| {
            let mut xs: Vec<u64> = points
                .iter()
                .filter(|(s, _)| s.decode_only == decode)
                .map(|(s, _)| s.tokens)
                .collect();
            xs.sort_unstable();
            xs.dedup();
            xs
        };
        (of(true), of(false))
    }

    /// [`CostModel::fit`] with the knots given: `dx` for decode-only steps,
    /// `px` for the others (increasing token counts). A refit on a replay's
    /// steps keeps the profile's knots, so thousands of steps of every size
    /// correct the curves instead of each becoming a knot of its own.
    pub fn fit_with_knots(
        points: &[(StepShape, f64)],
        dx: &[u64],
        px: &[u64],
    ) -> Result<CostModel, FitError> {
        for (i, &(_, t)) in points.iter().enumerate() {
            if !(t.is_finite() && t > 0.0) {
                return Err(FitError::BadTime { index: i, value: t });
            }
        }
        if px.is_empty() {
            return Err(FitError::NoPoints("prefill"));
        }
        let mut use_kv = points.iter().any(|(s, _)| s.kv_read > 0);
        let mut use_attn = points.iter().any(|(s, _)| s.attn_pairs > 0);
        loop {
            let m = solve(points, dx, px, use_kv, use_attn)?;
            if use_kv && m.us_per_kv_token < 0.0 {
                use_kv = false;
                continue;
            }
            if use_attn && m.us_per_attn_pair < 0.0 {
                use_attn = false;
                continue;
            }
            return Ok(m);
        }
    }
}

/// One weighted least-squares solve (normal equations; the system is small).
fn solve(
    points: &[(StepShape, f64)],
    dx: &[u64],
    px: &[u64],
    use_kv: bool,
    use_attn: bool,
) -> Result<CostModel, FitError> {
    let (nd, np) = (dx.len(), px.len());
    let n = nd + np + 2;
    let mut a = vec![vec![0.0f64; n]; n];
    let mut b = vec![0.0f64; n];
    for (s, secs) in points {
        let us = secs * 1e6;
        let mut row = vec![0.0f64; n];
        if s.decode_only && nd > 0 {
            row[..nd].copy_from_slice(&hat(dx, s.tokens));
        } else {
            row[nd..nd + np].copy_from_slice(&hat(px, s.tokens));
        }
        // Scaled so the slopes' columns are of the order of the others.
        row[n - 2] = if use_kv { s.kv_read as f64 * 1e-3 } else { 0.0 };
        row[n - 1] = if use_attn {
            s.attn_pairs as f64 * 1e-6
        } else {
            0.0
        };
        // Relative error: weight each row by 1/t.
        let w = 1.0 / us;
        for ((ai, bi), &ri) in a.iter_mut().zip(b.iter_mut()).zip(&row) {
            for (aij, &rj) in ai.iter_mut().zip(&row) {
                *aij += w * w * ri * rj;
            }
            *bi += w * w * ri * us;
        }
    }
    // A ridge relative to each column's own scale (it biases the fit by
    // ~1e-12); an unused column (a slope switched off) gets a unit diagonal
    // so its coefficient solves to 0.
    for (i, r) in a.iter_mut().enumerate() {
        r[i] = if r[i] > 0.0 {
            r[i] * (1.0 + 1e-12)
        } else {
            1.0
        };
    }
    let x = gauss(a, b).ok_or(FitError::Singular)?;
    Ok(CostModel {
        decode_knots: dx.iter().copied().zip(x[..nd].iter().copied()).collect(),
        prefill_knots: px
            .iter()
            .copied()
            .zip(x[nd..nd + np].iter().copied())
            .collect(),
        us_per_kv_token: if use_kv { x[n - 2] * 1e-3 } else { 0.0 },
        us_per_attn_pair: if use_attn { x[n - 1] * 1e-6 } else { 0.0 },
    })
}

/// Gaussian elimination with partial pivoting; `None` when singular.
fn gauss(mut a: Vec<Vec<f64>>, mut b: Vec<f64>) -> Option<Vec<f64>> {
    let n = b.len();
    for c in 0..n {
        let p = (c..n).max_by(|&i, &j| a[i][c].abs().total_cmp(&a[j][c].abs()))?;
        if a[p][c].abs() < 1e-300 {
            return None;
        }
        a.swap(c, p);
        b.swap(c, p);
        for r in c + 1..n {
            let f = a[r][c] / a[c][c];
            if f != 0.0 {
                let (top, bottom) = a.split_at_mut(r);
                for (x, p) in bottom[0][c..].iter_mut().zip(&top[c][c..]) {
                    *x -= f * p;
                }
                b[r] -= f * b[c];
            }
        }
    }
    let mut x = vec![0.0; n];
    for c in (0..n).rev() {
        let s: f64 = (c + 1..n).map(|k| a[c][k] * x[k]).sum();
        x[c] = (b[c] - s) / a[c][c];
    }
    Some(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A known model generates the points; the fit must give it back.
    #[test]
    fn fit_recovers_a_known_model() {
        let truth = |s: &StepShape| {
            let base = if s.decode_only {
                500.0 + 2.0 * s.tokens as f64
            } else {
                800.0 + 30.0 * s.tokens as f64
            };
            base + 0.01 * s.kv_read as f64 + 0.0005 * s.attn_pairs as f64
        };
        let mut pts = Vec::new();
        for b in [1, 8, 64, 256] {
            for c in [128, 2048] {
                let s = StepShape::decode(b, c);
                pts.push((s, truth(&s) * 1e-6));
            }
        }
        for n in [64, 512, 4096] {
            for c in [0, 4096] {
                let s = StepShape::prefill(n, c);
                pts.push((s, truth(&s) * 1e-6));
            }
        }
        let m = CostModel::fit(&pts).unwrap();
        assert!((m.us_per_kv_token - 0.01).abs() < 1e-6, "{m:?}");
        assert!((m.us_per_attn_pair - 0.0005).abs() < 1e-8, "{m:?}");
        for (s, t) in &pts {
            let p = m.step_us(s);
            assert!((p - t * 1e6).abs() / (t * 1e6) < 1e-6, "{s:?}: {p} vs {t}");
        }
        // Between knots: linear in tokens, as the truth is.
        let s = StepShape::decode(32, 1000);
        assert!((m.step_us(&s) - truth(&s)).abs() / truth(&s) < 1e-6);
    }

    #[test]
    fn bad_points_are_named() {
        let s = StepShape::prefill(8, 0);
        assert_eq!(
            CostModel::fit(&[(s, -1.0)]).unwrap_err(),
            FitError::BadTime {
                index: 0,
                value: -1.0
            }
        );
        assert_eq!(
            CostModel::fit(&[(StepShape::decode(1, 1), 1.0)]).unwrap_err(),
            FitError::NoPoints("prefill")
        );
    }
}
