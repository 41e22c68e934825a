//! The quantised products against "dequantise the weights (ggml's decoder,
//! checked against the `gguf` Python package by tests/gguf_dequant.rs), then
//! multiply in f32", and the SIMD kernels against the scalar ones.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::*;
use crate::backend::QuantType;

const TYPES: [QuantType; 5] = [
    QuantType::Q4_0,
    QuantType::Q4_1,
    QuantType::Q8_0,
    QuantType::Q4_K,
    QuantType::Q6_K,
];

fn f16_bytes(x: f32) -> [u8; 2] {
    half::f16::from_f32(x).to_bits().to_le_bytes()
}

/// Random blocks of `ty`: random payload bytes with small positive f16
/// scales at the header offsets (random bits there could be inf or NaN).
fn random_matrix(ty: QuantType, rows: usize, cols: usize, rng: &mut ChaCha8Rng) -> QMatrix {
    let nblocks = rows * cols / ty.block_elems();
    let bb = ty.block_bytes();
    let mut bytes = vec![0u8; nblocks * bb];
    rng.fill(&mut bytes[..]);
    for blk in bytes.chunks_exact_mut(bb) {
        let mut scale = |at: usize, rng: &mut ChaCha8Rng| {
            blk[at..at + 2].copy_from_slice(&f16_bytes(rng.random_range(0.001f32..0.05)))
        };
        match ty {
            QuantType::Q4_0 | QuantType::Q8_0 => scale(0, rng),
            QuantType::Q4_1 | QuantType::Q4_K => {
                scale(0, rng);
                scale(2, rng);
            }
            QuantType::Q6_K => scale(208, rng),
        }
    }
    QMatrix::new(ty, rows, cols, bytes)
}

fn random_acts(rows: usize, cols: usize, rng: &mut ChaCha8Rng) -> Vec<f32> {
    (0..rows * cols)
        .map(|i| {
            // Mixed magnitudes, an outlier now and then (as in real hidden states).
            let v: f32 = rng.random_range(-1.0..1.0);
            if i % 97 == 0 {
                v * 20.0
            } else {
                v
            }
        })
        .collect()
}

/// The largest error Q8 rounding can cause in `w · x`: each element moves by
/// at most half a step (`d / 2`, `d = max|x_block| / 127`), so the product moves
/// by at most `Σ |w_i| · d_block / 2`; plus f32 rounding slack.
fn q8_bound(w: &[f32], x: &[f32]) -> f32 {
    let mut bound = 0f64;
    let mut mag = 0f64;
    for (wb, xb) in w.chunks(QK).zip(x.chunks(QK)) {
        let d = xb.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
        bound += wb.iter().map(|v| v.abs() as f64).sum::<f64>() * d as f64 / 2.0;
        mag += wb
            .iter()
            .zip(xb)
            .map(|(a, b)| (a * b).abs() as f64)
            .sum::<f64>();
    }
    (bound + 1e-5 * mag + 1e-6) as f32
}

#[test]
fn quantised_dots_match_dequantised_f32_within_the_q8_bound() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    for ty in TYPES {
        let (rows, cols) = (5, 512);
        let w = random_matrix(ty, rows, cols, &mut rng);
        let x = random_acts(3, cols, &mut rng);
        let mut a = QActs::default();
        quantize_acts(&x, 3, cols, &mut a);
        let wf = w.to_f32();
        for kernels in [Kernels::scalar(), Kernels::detect()] {
            for j in 0..rows {
                let wr = &wf[j * cols..(j + 1) * cols];
                let mut got = [0f32; 4];
                kernels.dot_rows(ty, w.row(j), &a, 0, 3, &mut got);
                for i in 0..3 {
                    let xr = &x[i * cols..(i + 1) * cols];
                    let want: f32 = wr.iter().zip(xr).map(|(p, q)| p * q).sum();
                    let bound = q8_bound(wr, xr);
                    assert!(
                        (got[i] - want).abs() <= bound,
                        "{ty:?} {} row {j}·{i}: {} vs f32 {want} (bound {bound})",
                        kernels.name(),
                        got[i]
                    );
                }
            }
        }
    }
}

#[test]
fn simd_kernels_match_the_scalar_reference() {
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    let simd = Kernels::detect();
    if simd == Kernels::scalar() {
        eprintln!("NOTICE: no AVX2/FMA/F16C on this CPU; only the scalar kernels ran");
    }
    for ty in TYPES {
        let cols = 768;
        let w = random_matrix(ty, 3, cols, &mut rng);
        let x = random_acts(4, cols, &mut rng);
        let mut a = QActs::default();
        quantize_acts(&x, 4, cols, &mut a);
        let wf = w.to_f32();
        for n in 1..=4 {
            for j in 0..3 {
                let (mut s, mut v) = ([0f32; 4], [0f32; 4]);
                Kernels::scalar().dot_rows(ty, w.row(j), &a, 4 - n, n, &mut s);
                simd.dot_rows(ty, w.row(j), &a, 4 - n, n, &mut v);
                for i in 0..n {
                    // Integer sums are exact in both; only the f32 summation
                    // order differs, so the tolerance scales with Σ|w·x|.
                    let r = 4 - n + i;
                    let mag: f32 = wf[j * cols..(j + 1) * cols]
                        .iter()
                        .zip(&x[r * cols..(r + 1) * cols])
                        .map(|(p, q)| (p * q).abs())
                        .sum();
                    let tol = 1e-5 * mag.max(1.0);
                    assert!(
                        (s[i] - v[i]).abs() <= tol,
                        "{ty:?} n={n} row {j}: scalar {} simd {}",
                        s[i],
                        v[i]
                    );
                }
            }
        }
    }
}

#[test]
fn matmul_fills_every_cell_like_single_dots() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    // Odd sizes: partial groups of four, a partial tile, more rows than tasks.
    for (ty, m, n, cols) in [
        (QuantType::Q4_1, 70, 37, 256),
        (QuantType::Q8_0, 1, 300, 96),
        (QuantType::Q4_K, 9, 13, 512),
    ] {
        let w = random_matrix(ty, n, cols, &mut rng);
        let x = random_acts(m, cols, &mut rng);
        let mut a = QActs::default();
        quantize_acts(&x, m, cols, &mut a);
        let mut out = vec![f32::NAN; m * n];
        let k = Kernels::detect();
        matmul(&a, &w, k, &mut out);
        for i in 0..m {
            for j in 0..n {
                // The same kernel one row at a time: the same arithmetic, bit for bit.
                let mut want = [0f32; 4];
                k.dot_rows(ty, w.row(j), &a, i, 1, &mut want);
                assert_eq!(
                    out[i * n + j].to_bits(),
                    want[0].to_bits(),
                    "{ty:?} [{i},{j}]"
                );
            }
        }
    }
}

#[test]
fn activation_quantisation_rounds_to_the_nearest_step() {
    let x: Vec<f32> = (0..64).map(|i| (i as f32 - 20.0) * 0.37).collect();
    let mut a = QActs::default();
    quantize_acts(&x, 2, 32, &mut a);
    for b in 0..2 {
        let xb = &x[b * 32..b * 32 + 32];
        let d = a.d[b];
        assert_eq!(d, xb.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0);
        let mut sum = 0i32;
        for (q, v) in a.qs[b * 32..b * 32 + 32].iter().zip(xb) {
            assert!((f32::from(*q) * d - v).abs() <= d / 2.0 + 1e-6);
            sum += i32::from(*q);
        }
        assert_eq!(a.s[b], d * sum as f32);
    }
    // An all-zero block quantises to zeros with scale 0 (no division by zero).
    quantize_acts(&[0.0; 32], 1, 32, &mut a);
    assert_eq!((a.d[0], a.s[0]), (0.0, 0.0));
    assert!(a.qs.iter().all(|&q| q == 0));
}

#[test]
fn packed_gemm_matches_the_scalar_row_kernels() {
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    let k = Kernels::detect();
    if !k.packs() {
        eprintln!("NOTICE: no AVX-512 VNNI on this CPU; only the packed reference ran");
    }
    // Odd sizes: a partial last group of 16, partial groups of four rows,
    // one row (decode), more activation rows than a tile.
    for (ty, m, n, cols) in [
        (QuantType::Q4_1, 70, 37, 256),
        (QuantType::Q4_0, 3, 16, 96),
        (QuantType::Q8_0, 1, 300, 96),
        (QuantType::Q4_1, 261, 40, 64),
        (QuantType::Q8_0, 5, 7, 576),
    ] {
        let mut w = random_matrix(ty, n, cols, &mut rng);
        w.pack();
        let p = w.packed.as_deref().expect("packed");
        let x = random_acts(m, cols, &mut rng);
        let mut a = QActs::default();
        quantize_acts(&x, m, cols, &mut a);
        let mut out = vec![f32::NAN; m * n];
        matmul(&a, &w, k, &mut out);
        let wf = w.to_f32();
        for i in 0..m {
            for j in 0..n {
                let want = scalar::dot(ty, w.row(j), &a, i);
                let mag: f32 = wf[j * cols..(j + 1) * cols]
                    .iter()
                    .zip(&x[i * cols..(i + 1) * cols])
                    .map(|(p, q)| (p * q).abs())
                    .sum();
                let tol = 1e-5 * mag.max(1.0);
                let r = p.dot_ref(j, &a, i);
                assert!(
                    (r - want).abs() <= tol,
                    "{ty:?} ref [{i},{j}]: {r} vs {want}"
                );
                let got = out[i * n + j];
                assert!(
                    (got - want).abs() <= tol,
                    "{ty:?} {} [{i},{j}]: {got} vs {want}",
                    k.name()
                );
            }
        }
    }
}

/// The two-part rounding: each row is its coarse part plus its residual
/// within `max|x| / 64516` per element of a block, even beside an outlier
/// (the case one part handles badly), and a product through the two parts
/// is close to the f32 product where one part is not.
#[test]
fn split_activations_carry_fifteen_bits_past_outliers() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let (rows, cols) = (3, 96);
    let mut x: Vec<f32> = (0..rows * cols)
        .map(|_| rng.random_range(-1.0..1.0))
        .collect();
    x[5] = 300.0; // an outlier channel, as in real hidden states
    x[cols + 40] = -120.0;
    let mut a = QActs::default();
    quantize_acts_split(&x, rows, cols, &mut a);
    assert_eq!((a.rows, a.cols), (2 * rows, cols));
    let nb = cols / QK;
    for i in 0..rows {
        for b in 0..nb {
            let xb = &x[i * cols + b * QK..i * cols + (b + 1) * QK];
            let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
            let (hi, lo) = ((2 * i) * nb + b, (2 * i + 1) * nb + b);
            let (mut s0, mut s1) = (0i32, 0i32);
            for (e, &v) in xb.iter().enumerate() {
                let q0 = a.qs[(2 * i) * cols + b * QK + e];
                let q1 = a.qs[(2 * i + 1) * cols + b * QK + e];
                let back = a.d[hi] * f32::from(q0) + a.d[lo] * f32::from(q1);
                assert!(
                    (back - v).abs() <= amax / 64516.0 + amax * 1e-7,
                    "row {i} block {b} element {e}: {v} came back as {back}"
                );
                s0 += i32::from(q0);
                s1 += i32::from(q1);
            }
            assert_eq!(a.s[hi], a.d[hi] * s0 as f32);
            assert_eq!(a.s[lo], a.d[lo] * s1 as f32);
        }
    }
    // Products: the two parts summed against one part, both against f32.
    let w = random_matrix(QuantType::Q4_1, 8, cols, &mut rng);
    let wf = w.to_f32();
    let mut one = QActs::default();
    quantize_acts(&x, rows, cols, &mut one);
    let (mut err_one, mut err_two) = (0f32, 0f32);
    for i in 0..rows {
        for j in 0..8 {
            let exact: f32 = (0..cols).map(|c| x[i * cols + c] * wf[j * cols + c]).sum();
            let two =
                scalar::dot(w.ty, w.row(j), &a, 2 * i) + scalar::dot(w.ty, w.row(j), &a, 2 * i + 1);
            err_two = err_two.max((two - exact).abs() / exact.abs().max(1.0));
            err_one = err_one
                .max((scalar::dot(w.ty, w.row(j), &one, i) - exact).abs() / exact.abs().max(1.0));
        }
    }
    println!("relative error: one part {err_one}, two parts {err_two}");
    assert!(err_two < 1e-3, "two parts: relative error {err_two}");
    assert!(
        err_one > 20.0 * err_two,
        "one part {err_one} vs two {err_two}"
    );
}

/// The AVX-512 two-part rounding equals the scalar one bit for bit
/// (including exact ties, which both round away from zero, and zero blocks).
#[test]
fn split_quantisation_simd_equals_scalar() {
    let mut rng = ChaCha8Rng::seed_from_u64(8);
    let (rows, cols) = (5, 192);
    let mut x: Vec<f32> = (0..rows * cols)
        .map(|_| rng.random_range(-3.0..3.0))
        .collect();
    x[7] = 500.0;
    // A block of exact ties: max 127 gives d = 1, so k + 0.5 is a tie.
    for (e, v) in x[cols..cols + 32].iter_mut().enumerate() {
        *v = e as f32 - 15.5;
    }
    x[cols + 31] = 127.0;
    x[2 * cols..2 * cols + 32].fill(0.0);
    let mut fast = QActs::default();
    quantize_acts_split(&x, rows, cols, &mut fast);
    let mut slow = fast.clone();
    slow.qs.fill(0);
    slow.d.fill(f32::NAN);
    slow.s.fill(f32::NAN);
    quantize_split_scalar(&x, rows, cols, &mut slow);
    assert_eq!(fast.qs, slow.qs);
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&fast.d), bits(&slow.d));
    assert_eq!(bits(&fast.s), bits(&slow.s));
}

/// With split activations a product sums each row's two parts into one
/// output row, in the packed GEMM and in the row kernels alike.
#[test]
fn matmul_sums_the_two_parts_of_split_activations() {
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    for (ty, m, n, cols, pack) in [
        (QuantType::Q4_1, 1, 40, 96, true),
        (QuantType::Q8_0, 3, 300, 64, true),
        (QuantType::Q4_1, 131, 33, 64, true),
        (QuantType::Q4_1, 5, 37, 256, false),
        (QuantType::Q4_K, 3, 13, 512, false),
    ] {
        let mut w = random_matrix(ty, n, cols, &mut rng);
        if pack {
            w.pack();
        }
        let x = random_acts(m, cols, &mut rng);
        let mut a = QActs::default();
        quantize_acts_split(&x, m, cols, &mut a);
        assert_eq!((a.rows, a.parts, a.logical_rows()), (2 * m, 2, m));
        let mut out = vec![f32::NAN; m * n];
        matmul(&a, &w, Kernels::detect(), &mut out);
        let wf = w.to_f32();
        for i in 0..m {
            for j in 0..n {
                let want =
                    scalar::dot(ty, w.row(j), &a, 2 * i) + scalar::dot(ty, w.row(j), &a, 2 * i + 1);
                let mag: f32 = wf[j * cols..(j + 1) * cols]
                    .iter()
                    .zip(&x[i * cols..(i + 1) * cols])
                    .map(|(p, q)| (p * q).abs())
                    .sum();
                let got = out[i * n + j];
                assert!(
                    (got - want).abs() <= 1e-5 * mag.max(1.0),
                    "{ty:?} pack={pack} [{i},{j}]: {got} vs {want}"
                );
            }
        }
    }
}
