//! Portable kernels: one weight row (whole blocks) · one activation row.
//! The reference for the SIMD kernels: the same integer sums, the same
//! scaling, plain loops.

// Index loops walk several per-row arrays in step; iterator chains hide that.
#![allow(clippy::needless_range_loop)]

use super::{f16_at, scale_min_k4, QActs, QK};
use crate::backend::QuantType;

/// `w_row · acts[row]` for a weight row of type `ty`.
pub fn dot(ty: QuantType, w: &[u8], a: &QActs, row: usize) -> f32 {
    match ty {
        QuantType::Q4_0 => dot_q4_0(w, a, row),
        QuantType::Q4_1 => dot_q4_1(w, a, row),
        QuantType::Q8_0 => dot_q8_0(w, a, row),
        QuantType::Q4_K => dot_q4_k(w, a, row),
        QuantType::Q6_K => dot_q6_k(w, a, row),
    }
}

/// Activation block `b` of row `row`: (values, scale, scaled sum).
#[inline(always)]
fn act(a: &QActs, row: usize, b: usize) -> (&[i8], f32, f32) {
    let nb = a.blocks();
    let at = row * a.cols + b * QK;
    (&a.qs[at..at + QK], a.d[row * nb + b], a.s[row * nb + b])
}

/// Σ nibble·a over a 32-element block stored as 16 bytes, low nibbles first.
#[inline(always)]
fn nibble_sum(qs: &[u8], a: &[i8]) -> i32 {
    let mut sum = 0i32;
    for j in 0..16 {
        sum += i32::from(qs[j] & 0x0f) * i32::from(a[j]);
        sum += i32::from(qs[j] >> 4) * i32::from(a[j + 16]);
    }
    sum
}

/// Q4_0: `w = d · (q - 8)`.
fn dot_q4_0(w: &[u8], a: &QActs, row: usize) -> f32 {
    let mut acc = 0f32;
    for (b, blk) in w.chunks_exact(18).enumerate() {
        let (aq, ad, asum) = act(a, row, b);
        let d = f16_at(blk, 0);
        acc += d * ad * nibble_sum(&blk[2..18], aq) as f32 - 8.0 * d * asum;
    }
    acc
}

/// Q4_1: `w = d · q + m`.
fn dot_q4_1(w: &[u8], a: &QActs, row: usize) -> f32 {
    let mut acc = 0f32;
    for (b, blk) in w.chunks_exact(20).enumerate() {
        let (aq, ad, asum) = act(a, row, b);
        let (d, m) = (f16_at(blk, 0), f16_at(blk, 2));
        acc += d * ad * nibble_sum(&blk[4..20], aq) as f32 + m * asum;
    }
    acc
}

/// Q8_0: `w = d · q`.
fn dot_q8_0(w: &[u8], a: &QActs, row: usize) -> f32 {
    let mut acc = 0f32;
    for (b, blk) in w.chunks_exact(34).enumerate() {
        let (aq, ad, _) = act(a, row, b);
        let d = f16_at(blk, 0);
        let sum: i32 = blk[2..34]
            .iter()
            .zip(aq)
            .map(|(&q, &x)| i32::from(q as i8) * i32::from(x))
            .sum();
        acc += d * ad * sum as f32;
    }
    acc
}

/// Q4_K: super-blocks of 256 = 8 sub-blocks of 32, `w = d·sc·q - dmin·m`.
fn dot_q4_k(w: &[u8], a: &QActs, row: usize) -> f32 {
    let mut acc = 0f32;
    for (sb, blk) in w.chunks_exact(144).enumerate() {
        let (d, dmin) = (f16_at(blk, 0), f16_at(blk, 2));
        let scales = &blk[4..16];
        let qs = &blk[16..144];
        for j in 0..8 {
            let (sc, m) = scale_min_k4(j, scales);
            let (aq, ad, asum) = act(a, row, sb * 8 + j);
            let chunk = &qs[32 * (j / 2)..32 * (j / 2) + 32];
            let shift = 4 * (j % 2);
            let sum: i32 = chunk
                .iter()
                .zip(aq)
                .map(|(&q, &x)| i32::from((q >> shift) & 0x0f) * i32::from(x))
                .sum();
            acc += d * f32::from(sc) * ad * sum as f32 - dmin * f32::from(m) * asum;
        }
    }
    acc
}

/// The 6-bit value of element `l` (0..32) of quarter `k` (0..4) of half `n`
/// of a Q6_K block, minus 32.
#[inline(always)]
pub(super) fn q6_value(ql: &[u8], qh: &[u8], n: usize, k: usize, l: usize) -> i32 {
    let lo = ql[64 * n + 32 * (k % 2) + l];
    let lo = if k < 2 { lo & 0x0f } else { lo >> 4 };
    let hi = (qh[32 * n + l] >> (2 * k)) & 3;
    i32::from(lo | (hi << 4)) - 32
}

/// Q6_K: super-blocks of 256 = 16 sub-blocks of 16, `w = d·sc·(q - 32)`.
fn dot_q6_k(w: &[u8], a: &QActs, row: usize) -> f32 {
    let mut acc = 0f32;
    for (sb, blk) in w.chunks_exact(210).enumerate() {
        let (ql, qh, sc) = (&blk[0..128], &blk[128..192], &blk[192..208]);
        let d = f16_at(blk, 208);
        for n in 0..2 {
            for k in 0..4 {
                let (aq, ad, _) = act(a, row, sb * 8 + 4 * n + k);
                let mut halves = [0i32; 2];
                for (l, &x) in aq.iter().enumerate() {
                    halves[l / 16] += q6_value(ql, qh, n, k, l) * i32::from(x);
                }
                let s0 = i32::from(sc[8 * n + 2 * k] as i8);
                let s1 = i32::from(sc[8 * n + 2 * k + 1] as i8);
                acc += d * ad * (s0 * halves[0] + s1 * halves[1]) as f32;
            }
        }
    }
    acc
}
