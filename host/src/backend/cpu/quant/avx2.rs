//! AVX2 + FMA + F16C kernels: one weight row · `N` (1..=4) activation rows,
//! each weight block unpacked once for all `N`. Integer products through
//! `maddubs` (unsigned × signed bytes, never saturating here: at most
//! 2 · 128 · 127 < 2¹⁵) and `madd`, then one FMA per block and row.
//!
//! Callers must have checked `is_x86_feature_detected!` for avx2, fma and
//! f16c (see [`super::Kernels`]).

// Index loops walk several per-row arrays in step; iterator chains hide that.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::{scale_min_k4, QActs, QK};
use crate::backend::QuantType;

/// `out[i] = w · acts[r0 + i]` for `i < n` (`1 <= n <= 4`).
///
/// # Safety
/// The CPU must support avx2, fma and f16c; `w` must hold whole blocks of
/// `ty` covering `a.cols`; rows `r0..r0 + n` must exist in `a`.
pub unsafe fn dot_rows(ty: QuantType, w: &[u8], a: &QActs, r0: usize, n: usize, out: &mut [f32]) {
    macro_rules! go {
        ($f:ident) => {
            match n {
                1 => $f::<1>(w, a, r0, out),
                2 => $f::<2>(w, a, r0, out),
                3 => $f::<3>(w, a, r0, out),
                _ => $f::<4>(w, a, r0, out),
            }
        };
    }
    match ty {
        QuantType::Q4_0 => go!(q4_0),
        QuantType::Q4_1 => go!(q4_1),
        QuantType::Q8_0 => go!(q8_0),
        QuantType::Q4_K => go!(q4_k),
        QuantType::Q6_K => go!(q6_k),
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16(p: *const u8) -> f32 {
    let bits = (p as *const u16).read_unaligned();
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// 32 activation bytes of block `b` of row `row`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn act_q(a: &QActs, row: usize, b: usize) -> __m256i {
    _mm256_loadu_si256(a.qs.as_ptr().add(row * a.cols + b * QK) as *const __m256i)
}

#[inline(always)]
unsafe fn act_ds(a: &QActs, row: usize, b: usize) -> (f32, f32) {
    let i = row * a.blocks() + b;
    (*a.d.get_unchecked(i), *a.s.get_unchecked(i))
}

/// Σ over 8 lanes of i32 pairs of `q` (unsigned) · `x` (signed), as f32 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn mul_sum_us8(q: __m256i, x: __m256i) -> __m256 {
    let p = _mm256_maddubs_epi16(q, x);
    _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)))
}

/// 16 bytes of nibbles → 32 bytes: low nibbles (elements 0..16), then high.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn unpack_nibbles16(p: *const u8) -> __m256i {
    let raw = _mm_loadu_si128(p as *const __m128i);
    let both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
    _mm256_and_si256(both, _mm256_set1_epi8(0x0f))
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_0<const N: usize>(w: &[u8], a: &QActs, r0: usize, out: &mut [f32]) {
    let mut acc = [_mm256_setzero_ps(); N];
    let mut off = [0f32; N];
    for b in 0..a.blocks() {
        let p = w.as_ptr().add(b * 18);
        let d = f16(p);
        let q = unpack_nibbles16(p.add(2));
        for i in 0..N {
            let (ad, asum) = act_ds(a, r0 + i, b);
            let s = mul_sum_us8(q, act_q(a, r0 + i, b));
            acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(d * ad), s, acc[i]);
            off[i] += d * asum;
        }
    }
    for i in 0..N {
        out[i] = hsum(acc[i]) - 8.0 * off[i];
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_1<const N: usize>(w: &[u8], a: &QActs, r0: usize, out: &mut [f32]) {
    let mut acc = [_mm256_setzero_ps(); N];
    let mut off = [0f32; N];
    for b in 0..a.blocks() {
        let p = w.as_ptr().add(b * 20);
        let (d, m) = (f16(p), f16(p.add(2)));
        let q = unpack_nibbles16(p.add(4));
        for i in 0..N {
            let (ad, asum) = act_ds(a, r0 + i, b);
            let s = mul_sum_us8(q, act_q(a, r0 + i, b));
            acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(d * ad), s, acc[i]);
            off[i] += m * asum;
        }
    }
    for i in 0..N {
        out[i] = hsum(acc[i]) + off[i];
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0<const N: usize>(w: &[u8], a: &QActs, r0: usize, out: &mut [f32]) {
    let mut acc = [_mm256_setzero_ps(); N];
    for b in 0..a.blocks() {
        let p = w.as_ptr().add(b * 34);
        let d = f16(p);
        let q = _mm256_loadu_si256(p.add(2) as *const __m256i);
        // |q| · (x with q's sign) = q · x, with an unsigned left operand.
        let aq = _mm256_sign_epi8(q, q);
        for i in 0..N {
            let (ad, _) = act_ds(a, r0 + i, b);
            let x = _mm256_sign_epi8(act_q(a, r0 + i, b), q);
            let s = mul_sum_us8(aq, x);
            acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(d * ad), s, acc[i]);
        }
    }
    for i in 0..N {
        out[i] = hsum(acc[i]);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_k<const N: usize>(w: &[u8], a: &QActs, r0: usize, out: &mut [f32]) {
    let mut acc = [_mm256_setzero_ps(); N];
    let mut off = [0f32; N];
    let mask = _mm256_set1_epi8(0x0f);
    for sb in 0..a.cols / 256 {
        let blk = &w[sb * 144..sb * 144 + 144];
        let (d, dmin) = (f16(blk.as_ptr()), f16(blk.as_ptr().add(2)));
        let scales = &blk[4..16];
        for c in 0..4 {
            let raw = _mm256_loadu_si256(blk.as_ptr().add(16 + 32 * c) as *const __m256i);
            let halves = [
                _mm256_and_si256(raw, mask),
                _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask),
            ];
            for (h, q) in halves.into_iter().enumerate() {
                let j = 2 * c + h;
                let (sc, m) = scale_min_k4(j, scales);
                let (dsc, dm) = (d * f32::from(sc), dmin * f32::from(m));
                let b = sb * 8 + j;
                for i in 0..N {
                    let (ad, asum) = act_ds(a, r0 + i, b);
                    let s = mul_sum_us8(q, act_q(a, r0 + i, b));
                    acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(dsc * ad), s, acc[i]);
                    off[i] += dm * asum;
                }
            }
        }
    }
    for i in 0..N {
        out[i] = hsum(acc[i]) - off[i];
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6_k<const N: usize>(w: &[u8], a: &QActs, r0: usize, out: &mut [f32]) {
    let mut acc = [_mm256_setzero_ps(); N];
    let m4 = _mm256_set1_epi8(0x0f);
    let m2 = _mm256_set1_epi8(3);
    let k32 = _mm256_set1_epi8(32);
    for sb in 0..a.cols / 256 {
        let blk = w.as_ptr().add(sb * 210);
        let d = f16(blk.add(208));
        for n in 0..2 {
            let ql0 = _mm256_loadu_si256(blk.add(64 * n) as *const __m256i);
            let ql1 = _mm256_loadu_si256(blk.add(64 * n + 32) as *const __m256i);
            let qh = _mm256_loadu_si256(blk.add(128 + 32 * n) as *const __m256i);
            // Bits 4 and 5 of each value: two bits of `qh`, shifted down already.
            macro_rules! hi {
                ($h:expr) => {
                    _mm256_slli_epi16(_mm256_and_si256($h, m2), 4)
                };
            }
            let quarters = [
                _mm256_or_si256(_mm256_and_si256(ql0, m4), hi!(qh)),
                _mm256_or_si256(_mm256_and_si256(ql1, m4), hi!(_mm256_srli_epi16(qh, 2))),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                    hi!(_mm256_srli_epi16(qh, 4)),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                    hi!(_mm256_srli_epi16(qh, 6)),
                ),
            ];
            for (k, q) in quarters.into_iter().enumerate() {
                let q = _mm256_sub_epi8(q, k32);
                let aq = _mm256_sign_epi8(q, q);
                let sc = blk.add(192 + 8 * n + 2 * k);
                let scales = _mm256_set_m128i(
                    _mm_set1_epi16(i16::from(*sc.add(1) as i8)),
                    _mm_set1_epi16(i16::from(*sc as i8)),
                );
                let b = sb * 8 + 4 * n + k;
                for i in 0..N {
                    let (ad, _) = act_ds(a, r0 + i, b);
                    let x = _mm256_sign_epi8(act_q(a, r0 + i, b), q);
                    let p = _mm256_madd_epi16(_mm256_maddubs_epi16(aq, x), scales);
                    acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(d * ad), _mm256_cvtepi32_ps(p), acc[i]);
                }
            }
        }
    }
    for i in 0..N {
        out[i] = hsum(acc[i]);
    }
}
