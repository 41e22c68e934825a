//! AVX-512 VNNI GEMM on [`Packed`] weights: one 512-bit register holds
//! sixteen weight rows' outputs; per block of 32 and activation row, eight
//! `vpdpbusd` (unsigned weight bytes × a broadcast quad of signed activation
//! bytes) give the sixteen exact integer sums, then one conversion and two
//! FMAs apply `d · da` and `m · sa` (scales converted from f16 per block). Up to four activation rows share each
//! unpacked weight block.
//!
//! Callers must have checked `is_x86_feature_detected!` for avx512f,
//! avx512bw and avx512vnni (see [`super::Kernels`]).

// Index loops walk several per-row arrays in step; iterator chains hide that.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::packed::{Packed, GROUP};
use super::{QActs, QK};

/// `out[(i0 + i) · ld + 16g + r] = w[16g + r] · acts[i0 + i]` for `i < n`
/// (`1 <= n <= 4`) and the group's real rows `r`; with `a.parts == 2`
/// (`i0`, `n` even) the two parts of each activation row are summed into
/// output row `(i0 + i) / 2` instead.
///
/// # Safety
/// The CPU must support avx512f, avx512bw and avx512vnni; `p.cols == a.cols`;
/// rows `i0..i0 + n` must exist in `a`; `out` must hold the last output row
/// of stride `ld >= p.rows`, and no other thread may write those cells.
pub unsafe fn group_rows(
    p: &Packed,
    g: usize,
    a: &QActs,
    i0: usize,
    n: usize,
    out: *mut f32,
    ld: usize,
) {
    if a.parts == 2 {
        debug_assert!(i0.is_multiple_of(2) && n.is_multiple_of(2));
        return match (p.nibbles, n) {
            (true, 2) => kernel::<2, true, true>(p, g, a, i0, out, ld),
            (true, _) => kernel::<4, true, true>(p, g, a, i0, out, ld),
            (false, 2) => kernel::<2, false, true>(p, g, a, i0, out, ld),
            (false, _) => kernel::<4, false, true>(p, g, a, i0, out, ld),
        };
    }
    match (p.nibbles, n) {
        (true, 1) => kernel::<1, true, false>(p, g, a, i0, out, ld),
        (true, 2) => kernel::<2, true, false>(p, g, a, i0, out, ld),
        (true, 3) => kernel::<3, true, false>(p, g, a, i0, out, ld),
        (true, _) => kernel::<4, true, false>(p, g, a, i0, out, ld),
        (false, 1) => kernel::<1, false, false>(p, g, a, i0, out, ld),
        (false, 2) => kernel::<2, false, false>(p, g, a, i0, out, ld),
        (false, 3) => kernel::<3, false, false>(p, g, a, i0, out, ld),
        (false, _) => kernel::<4, false, false>(p, g, a, i0, out, ld),
    }
}

/// Software prefetch distance in weight bytes (`MINISGL_CPU_PREFETCH`
/// overrides it; 0 = none). A decode step streams ~96 MB of weights from
/// memory, once each, so the kernel waits on memory; the hardware
/// prefetcher alone left bandwidth unused. Measured on the 2-core VM
/// (paired runs, loaded): 2 KiB ahead +16% decode, 8 KiB +30%, 16-32 KiB
/// ~4% below 8 KiB.
const PREFETCH: usize = 8192;

fn prefetch_bytes() -> usize {
    static P: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *P.get_or_init(|| crate::env::count("MINISGL_CPU_PREFETCH", PREFETCH, |_| true, "a byte count"))
}

#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn kernel<const R: usize, const NIB: bool, const PAIR: bool>(
    p: &Packed,
    g: usize,
    a: &QActs,
    i0: usize,
    out: *mut f32,
    ld: usize,
) {
    let nb = p.blocks();
    let gbb = if NIB { 256 } else { 512 };
    let low = _mm512_set1_epi8(0x0f);
    let mut acc = [_mm512_setzero_ps(); R];
    // The `m · sa` terms apart, so the two FMAs per block do not chain.
    let mut accm = [_mm512_setzero_ps(); R];
    let qbase = p.q.as_ptr().add(g * nb * gbb);
    let dbase = p.d.as_ptr().add(g * nb * GROUP);
    let has_m = !p.m.is_empty();
    let mbase = p.m.as_ptr().wrapping_add(g * nb * GROUP);
    let moff = _mm512_set1_ps(p.moff);
    let ad = a.d.as_ptr();
    let asum = a.s.as_ptr();
    let pf = prefetch_bytes();
    for b in 0..nb {
        let qp = qbase.add(b * gbb);
        if pf > 0 {
            // Ahead in this thread's stream of groups (contiguous: group
            // g + 1 follows group g); past the end it is only a hint.
            for c in 0..gbb / 64 {
                _mm_prefetch::<_MM_HINT_T0>(qp.wrapping_add(pf + 64 * c) as *const i8);
            }
            if b % 2 == 0 {
                let sb = pf / gbb * GROUP * 2;
                _mm_prefetch::<_MM_HINT_T0>((dbase.add(b * GROUP) as *const i8).wrapping_add(sb));
                if has_m {
                    _mm_prefetch::<_MM_HINT_T0>(
                        (mbase.add(b * GROUP) as *const i8).wrapping_add(sb),
                    );
                }
            }
        }
        let mut w = [_mm512_setzero_si512(); 8];
        if NIB {
            for c in 0..4 {
                let raw = _mm512_loadu_si512(qp.add(64 * c) as *const _);
                w[c] = _mm512_and_si512(raw, low);
                w[c + 4] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low);
            }
        } else {
            for t in 0..8 {
                w[t] = _mm512_loadu_si512(qp.add(64 * t) as *const _);
            }
        }
        let dv = _mm512_cvtph_ps(_mm256_loadu_si256(dbase.add(b * GROUP) as *const _));
        let mv = if has_m {
            _mm512_cvtph_ps(_mm256_loadu_si256(mbase.add(b * GROUP) as *const _))
        } else {
            _mm512_mul_ps(dv, moff)
        };
        for i in 0..R {
            let row = i0 + i;
            let ap = a.qs.as_ptr().add(row * a.cols + b * QK) as *const i32;
            // Independent partial sums: with one or two activation rows the
            // `vpdpbusd` latency, not its throughput, would bound the loop.
            let chains = if R <= 2 { 4 } else { 2 };
            let mut ps = [_mm512_setzero_si512(); 4];
            for t in 0..8 {
                let c = t % chains;
                ps[c] =
                    _mm512_dpbusd_epi32(ps[c], w[t], _mm512_set1_epi32(ap.add(t).read_unaligned()));
            }
            let mut si = _mm512_add_epi32(ps[0], ps[1]);
            if chains == 4 {
                si = _mm512_add_epi32(si, _mm512_add_epi32(ps[2], ps[3]));
            }
            let s = _mm512_cvtepi32_ps(si);
            let k = row * nb + b;
            acc[i] = _mm512_fmadd_ps(s, _mm512_mul_ps(dv, _mm512_set1_ps(*ad.add(k))), acc[i]);
            accm[i] = _mm512_fmadd_ps(mv, _mm512_set1_ps(*asum.add(k)), accm[i]);
        }
    }
    let valid = (p.rows - g * GROUP).min(GROUP);
    let mask: __mmask16 = if valid == GROUP {
        0xffff
    } else {
        (1u16 << valid) - 1
    };
    if PAIR {
        for i in (0..R).step_by(2) {
            let hi = _mm512_add_ps(acc[i], accm[i]);
            let lo = _mm512_add_ps(acc[i + 1], accm[i + 1]);
            let v = _mm512_add_ps(hi, lo);
            _mm512_mask_storeu_ps(out.add((i0 + i) / 2 * ld + g * GROUP), mask, v);
        }
        return;
    }
    for i in 0..R {
        let v = _mm512_add_ps(acc[i], accm[i]);
        _mm512_mask_storeu_ps(out.add((i0 + i) * ld + g * GROUP), mask, v);
    }
}

/// `round(y)` with ties away from zero (Rust's `f32::round`, ggml's
/// `roundf`), exactly: `trunc(y)`, plus `±1` where the dropped fraction is
/// at least one half (`y - trunc(y)` is exact in f32).
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn round_away(y: __m512) -> __m512 {
    let t = _mm512_roundscale_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(y);
    let f = _mm512_abs_ps(_mm512_sub_ps(y, t));
    let sign = _mm512_and_si512(_mm512_castps_si512(y), _mm512_set1_epi32(i32::MIN));
    let one = _mm512_castsi512_ps(_mm512_or_si512(
        sign,
        _mm512_castps_si512(_mm512_set1_ps(1.0)),
    ));
    let half = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(f, _mm512_set1_ps(0.5));
    _mm512_mask_add_ps(t, half, t, one)
}

/// One 8-bit part of a block of 32 (`lo`, `hi` its halves): writes the 32
/// signed bytes at `q` and returns `(d, d · Σq)` and the rounding residual,
/// with the same operations, in the same order, as the scalar code.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn quantize_block(lo: __m512, hi: __m512, q: *mut i8) -> (f32, f32, __m512, __m512) {
    let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(lo), _mm512_abs_ps(hi)));
    let d = amax / 127.0;
    let id = if d > 0.0 { 1.0 / d } else { 0.0 };
    let (idv, dv) = (_mm512_set1_ps(id), _mm512_set1_ps(d));
    let rl = round_away(_mm512_mul_ps(lo, idv));
    let rh = round_away(_mm512_mul_ps(hi, idv));
    let (il, ih) = (_mm512_cvttps_epi32(rl), _mm512_cvttps_epi32(rh));
    _mm_storeu_si128(q as *mut __m128i, _mm512_cvtepi32_epi8(il));
    _mm_storeu_si128(q.add(16) as *mut __m128i, _mm512_cvtepi32_epi8(ih));
    let sum = _mm512_reduce_add_epi32(_mm512_add_epi32(il, ih));
    let resid_lo = _mm512_sub_ps(lo, _mm512_mul_ps(dv, rl));
    let resid_hi = _mm512_sub_ps(hi, _mm512_mul_ps(dv, rh));
    (d, d * sum as f32, resid_lo, resid_hi)
}

/// [`super::quantize_acts_split`] with AVX-512: bit-identical to
/// [`super::quantize_split_scalar`] (tested), without its per-element
/// `roundf` calls, which were ~6% of a decode step's time.
///
/// # Safety
/// The CPU must support avx512f; `x` is `rows × cols` (`cols` a multiple of
/// 32) and `out`'s buffers are sized for `2 · rows` rows.
#[target_feature(enable = "avx512f")]
pub unsafe fn quantize_split(x: &[f32], rows: usize, cols: usize, out: &mut QActs) {
    let nb = cols / QK;
    assert!(x.len() >= rows * cols && out.qs.len() >= 2 * rows * cols);
    assert!(out.d.len() >= 2 * rows * nb && out.s.len() >= 2 * rows * nb);
    let qs = out.qs.as_mut_ptr();
    for i in 0..rows {
        for b in 0..nb {
            let xp = x.as_ptr().add(i * cols + b * QK);
            let (lo, hi) = (_mm512_loadu_ps(xp), _mm512_loadu_ps(xp.add(16)));
            let (d, s, rl, rh) = quantize_block(lo, hi, qs.add(2 * i * cols + b * QK));
            out.d[2 * i * nb + b] = d;
            out.s[2 * i * nb + b] = s;
            let (d2, s2, _, _) = quantize_block(rl, rh, qs.add((2 * i + 1) * cols + b * QK));
            out.d[(2 * i + 1) * nb + b] = d2;
            out.s[(2 * i + 1) * nb + b] = s2;
        }
    }
}
