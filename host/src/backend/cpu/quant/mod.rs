//! Linear layers on llama.cpp block-quantised weights, computed on the
//! blocks: weights stay Q4_0 / Q4_1 / Q8_0 / Q4_K / Q6_K in memory (4.5-8.5
//! bits a weight instead of 32), activations are quantised to 8 bits in
//! blocks of 32 per product, and each block pair is an integer dot product
//! scaled once. A decode step reads every weight once, so reading ~6x fewer
//! bytes than f32 is most of the speed.
//!
//! * [`scalar`]: portable kernels, the reference the SIMD ones are tested
//!   against;
//! * [`avx2`]: AVX2 + FMA + F16C kernels, chosen at run time
//!   (`is_x86_feature_detected!`);
//! * [`avx512`]: the AVX-512 VNNI GEMM on weights repacked sixteen rows
//!   at a time ([`packed`]; Q4_0, Q4_1, Q8_0), chosen at run time; one
//!   kernel for decode and prefill;
//! * [`matmul`]: the parallel driver (rows of the weight split across
//!   threads, up to four activation rows per weight block so that prefill
//!   and batched decode unpack each block once).
//!
//! Accuracy: the activation rounding is the only difference from
//! "dequantise the weights, multiply in f32" (the integer sums are exact).
//! Activations are rounded in two 8-bit parts by default
//! ([`quantize_acts_split`]: at most `max|x| / 64516` per element of a
//! block); one part ([`quantize_acts`], `max|x| / 254`, what llama.cpp does)
//! is faster but flips near-tie greedy tokens of real models (see
//! `acts.rs`). See the tests for the bound each gives a dot product.

mod acts;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod matmul;
pub mod packed;
pub mod scalar;

pub use acts::{quantize_acts, quantize_acts_split, quantize_split_scalar, QActs, QK};
pub use matmul::{matmul, Kernels};

use crate::backend::QuantType;

/// A `[rows, cols]` weight matrix in llama.cpp blocks, row-major (every row
/// is `cols / block_elems` whole blocks).
#[derive(Clone, Debug, PartialEq)]
pub struct QMatrix {
    pub ty: QuantType,
    pub rows: usize,
    pub cols: usize,
    pub bytes: Vec<u8>,
    /// The interleaved copy the AVX-512 kernels read (see [`QMatrix::pack`]).
    pub packed: Option<Box<packed::Packed>>,
}

impl QMatrix {
    /// A matrix of `ty` blocks, not packed.
    pub fn new(ty: QuantType, rows: usize, cols: usize, bytes: Vec<u8>) -> Self {
        QMatrix {
            ty,
            rows,
            cols,
            bytes,
            packed: None,
        }
    }

    /// Adds the interleaved copy the AVX-512 GEMM reads, for the formats it
    /// covers (Q4_0, Q4_1, Q8_0; ~1.1-1.2x the bytes again).
    pub fn pack(&mut self) {
        self.packed = packed::Packed::from_matrix(self).map(Box::new);
    }

    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        self.cols / self.ty.block_elems() * self.ty.block_bytes()
    }

    /// Row `r`'s blocks.
    pub fn row(&self, r: usize) -> &[u8] {
        let rb = self.row_bytes();
        &self.bytes[r * rb..(r + 1) * rb]
    }

    /// Row `r` dequantised to f32.
    pub fn row_f32(&self, r: usize) -> Vec<f32> {
        crate::backend::ggml::dequantize_quant(self.ty, self.row(r))
    }

    /// The whole matrix dequantised to f32 (tests, debugging, `to_host`).
    pub fn to_f32(&self) -> Vec<f32> {
        crate::backend::ggml::dequantize_quant(self.ty, &self.bytes)
    }
}

/// f16 bits at `b[at..at + 2]` as f32.
#[inline(always)]
fn f16_at(b: &[u8], at: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

/// Scale and min of sub-block `j` of a Q4_K block (6 bits each, packed into
/// 12 bytes), as ggml packs them.
#[inline(always)]
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

#[cfg(test)]
mod tests;
