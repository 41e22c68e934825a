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
/// (`1 <= n <= 4`) and the group's real rows `r`.
///
/// # Safety
/// The CPU must support avx512f, avx512bw and avx512vnni; `p.cols == a.cols`;
/// rows `i0..i0 + n` must exist in `a`; `out` must hold row `i0 + n - 1` of
/// stride `ld >= p.rows`, and no other thread may write those cells.
pub unsafe fn group_rows(
    p: &Packed,
    g: usize,
    a: &QActs,
    i0: usize,
    n: usize,
    out: *mut f32,
    ld: usize,
) {
    match (p.nibbles, n) {
        (true, 1) => kernel::<1, true>(p, g, a, i0, out, ld),
        (true, 2) => kernel::<2, true>(p, g, a, i0, out, ld),
        (true, 3) => kernel::<3, true>(p, g, a, i0, out, ld),
        (true, _) => kernel::<4, true>(p, g, a, i0, out, ld),
        (false, 1) => kernel::<1, false>(p, g, a, i0, out, ld),
        (false, 2) => kernel::<2, false>(p, g, a, i0, out, ld),
        (false, 3) => kernel::<3, false>(p, g, a, i0, out, ld),
        (false, _) => kernel::<4, false>(p, g, a, i0, out, ld),
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn kernel<const R: usize, const NIB: bool>(
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
    for b in 0..nb {
        let qp = qbase.add(b * gbb);
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
    for i in 0..R {
        let v = _mm512_add_ps(acc[i], accm[i]);
        _mm512_mask_storeu_ps(out.add((i0 + i) * ld + g * GROUP), mask, v);
    }
}
