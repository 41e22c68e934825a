//! Q4_0 / Q4_1 / Q8_0 weights repacked for the AVX-512 VNNI GEMM: sixteen
//! weight rows interleaved so that one 512-bit `vpdpbusd` multiplies four
//! consecutive elements of one block of sixteen rows by the same four
//! activation bytes (broadcast), giving sixteen outputs per instruction.
//!
//! Every format becomes `w = d · q + m` with `q` unsigned (`0..=15` or
//! `0..=255`): Q4_0 is `d · (q - 8)`, so `m = -8d`; Q8_0's signed `q` is
//! stored as `q + 128`, so `m = -128d`. Per block of 32 of an activation row
//! (`x ≈ da · qa`, `sa = da · Σqa`) the product is then
//! `d · da · Σ q·qa + m · sa`, the integer sum exact in `i32`.
//!
//! Layout, per group of 16 rows `g` and block `b` (`gb = g · blocks + b`):
//! * 4-bit: 256 bytes, four chunks of 64; byte `4r + k` of chunk `c` holds
//!   element `4c + k` of row `r` in its low nibble and element `4c + 16 + k`
//!   in its high nibble (so `chunk & 15` is quad `c`, `chunk >> 4` quad
//!   `c + 4`);
//! * 8-bit: 512 bytes, eight chunks; byte `4r + k` of chunk `t` is element
//!   `4t + k` of row `r`;
//! * `d[gb · 16 + r]` and, for Q4_1, `m[gb · 16 + r]` as f16 bits (as in
//!   the GGUF blocks: no more bytes to stream per decode step than Q4_1);
//!   Q4_0 and Q8_0 keep no `m`, the kernel computes `m = moff · d`.
//!
//! Rows past `rows` (the last group's padding) are zero with zero scales.

// Index loops fill several interleaved arrays in step.
#![allow(clippy::needless_range_loop)]

use super::{QActs, QMatrix, QK};
use crate::backend::QuantType;

/// Rows per interleaved group (the lanes of a 512-bit register).
pub const GROUP: usize = 16;

/// A weight matrix in the interleaved layout (see the module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct Packed {
    pub rows: usize,
    pub cols: usize,
    /// 4-bit (nibbles, 256 bytes a group-block) or 8-bit (512 bytes).
    pub nibbles: bool,
    pub q: Vec<u8>,
    /// Block scales, f16 bits.
    pub d: Vec<u16>,
    /// Block offsets, f16 bits (Q4_1); empty when `m = moff · d`.
    pub m: Vec<u16>,
    /// `m / d` for the formats without a stored `m` (-8, -128).
    pub moff: f32,
}

impl Packed {
    /// The interleaved copy of `w`, or `None` for formats it does not cover
    /// (Q4_K, Q6_K) or widths that are not whole blocks.
    pub fn from_matrix(w: &QMatrix) -> Option<Packed> {
        let nibbles = match w.ty {
            QuantType::Q4_0 | QuantType::Q4_1 => true,
            QuantType::Q8_0 => false,
            QuantType::Q4_K | QuantType::Q6_K => return None,
        };
        if w.cols == 0 || !w.cols.is_multiple_of(QK) {
            return None;
        }
        let blocks = w.cols / QK;
        let groups = w.rows.div_ceil(GROUP);
        let gbb = if nibbles { 256 } else { 512 };
        let has_m = w.ty == QuantType::Q4_1;
        let mut p = Packed {
            rows: w.rows,
            cols: w.cols,
            nibbles,
            q: vec![0; groups * blocks * gbb],
            d: vec![0; groups * blocks * GROUP],
            m: vec![0; if has_m { groups * blocks * GROUP } else { 0 }],
            moff: match w.ty {
                QuantType::Q4_0 => -8.0,
                QuantType::Q8_0 => -128.0,
                _ => 0.0,
            },
        };
        let bb = w.ty.block_bytes();
        let mut q = [0u8; QK];
        for j in 0..w.rows {
            let (g, r) = (j / GROUP, j % GROUP);
            let row = w.row(j);
            for b in 0..blocks {
                let blk = &row[b * bb..(b + 1) * bb];
                match w.ty {
                    QuantType::Q4_0 => {
                        for e in 0..16 {
                            q[e] = blk[2 + e] & 15;
                            q[e + 16] = blk[2 + e] >> 4;
                        }
                    }
                    QuantType::Q4_1 => {
                        for e in 0..16 {
                            q[e] = blk[4 + e] & 15;
                            q[e + 16] = blk[4 + e] >> 4;
                        }
                    }
                    _ => {
                        for e in 0..QK {
                            q[e] = (blk[2 + e] as i8 as i16 + 128) as u8;
                        }
                    }
                }
                let gb = g * blocks + b;
                p.d[gb * GROUP + r] = u16::from_le_bytes([blk[0], blk[1]]);
                if has_m {
                    p.m[gb * GROUP + r] = u16::from_le_bytes([blk[2], blk[3]]);
                }
                let base = gb * gbb;
                for k in 0..4 {
                    if nibbles {
                        for c in 0..4 {
                            p.q[base + 64 * c + 4 * r + k] =
                                q[4 * c + k] | (q[4 * c + 16 + k] << 4);
                        }
                    } else {
                        for t in 0..8 {
                            p.q[base + 64 * t + 4 * r + k] = q[4 * t + k];
                        }
                    }
                }
            }
        }
        Some(p)
    }

    /// Blocks of 32 per row.
    pub fn blocks(&self) -> usize {
        self.cols / QK
    }

    /// Groups of 16 rows (the last one padded).
    pub fn groups(&self) -> usize {
        self.rows.div_ceil(GROUP)
    }

    /// Bytes of one group-block.
    pub fn gb_bytes(&self) -> usize {
        if self.nibbles {
            256
        } else {
            512
        }
    }

    /// Unsigned value of element `e` of block `b` of row `j` (reference).
    pub fn value(&self, j: usize, b: usize, e: usize) -> u8 {
        let (g, r) = (j / GROUP, j % GROUP);
        let base = (g * self.blocks() + b) * self.gb_bytes();
        let (quad, k) = (e / 4, e % 4);
        if self.nibbles {
            let (c, hi) = (quad % 4, quad >= 4);
            let byte = self.q[base + 64 * c + 4 * r + k];
            if hi {
                byte >> 4
            } else {
                byte & 15
            }
        } else {
            self.q[base + 64 * quad + 4 * r + k]
        }
    }

    /// `w[j] · acts[i]`, portable (the reference for the SIMD kernel).
    pub fn dot_ref(&self, j: usize, a: &QActs, i: usize) -> f32 {
        let nb = self.blocks();
        let g = j / GROUP;
        let mut acc = 0f32;
        for b in 0..nb {
            let qa = &a.qs[i * a.cols + b * QK..i * a.cols + (b + 1) * QK];
            let sum: i32 = (0..QK)
                .map(|e| i32::from(self.value(j, b, e)) * i32::from(qa[e]))
                .sum();
            let at = (g * nb + b) * GROUP + j % GROUP;
            let d = half::f16::from_bits(self.d[at]).to_f32();
            let m = match self.m.get(at) {
                Some(&m) => half::f16::from_bits(m).to_f32(),
                None => self.moff * d,
            };
            acc += d * a.d[i * nb + b] * sum as f32 + m * a.s[i * nb + b];
        }
        acc
    }
}
