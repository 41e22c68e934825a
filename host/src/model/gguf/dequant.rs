//! Dequantising a GGUF tensor to f32, with errors that name the tensor. The
//! block formats themselves live in [`crate::backend::ggml`].

use rayon::prelude::*;

use super::error::GgufError;
pub use crate::backend::ggml::{dequantize_quant, GgmlType};

/// Blocks handed to one rayon task: large enough to amortise scheduling,
/// small enough to balance a 28M-element embedding over the cores.
const BLOCKS_PER_TASK: usize = 4096;

/// Types this loader dequantises, for error messages.
pub const SUPPORTED: &str = "F32, F16, BF16, F64, I8, I16, I32, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, \
     Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, IQ4_NL, IQ4_XS";

/// Dequantises `bytes` (exactly `n_elements` elements of type `ty`) to f32,
/// in parallel over blocks. `tensor` only names the tensor in errors.
pub fn dequantize(
    tensor: &str,
    ty: GgmlType,
    bytes: &[u8],
    n_elements: usize,
) -> Result<Vec<f32>, GgufError> {
    let f = ty
        .block_fn()
        .ok_or_else(|| GgufError::UnsupportedTensorType {
            tensor: tensor.to_string(),
            ggml_type: ty.name().to_string(),
            supported: SUPPORTED,
        })?;
    let (block, block_bytes) = ty.block();
    if !n_elements.is_multiple_of(block) || bytes.len() != n_elements / block * block_bytes {
        return Err(GgufError::BadTensor {
            tensor: tensor.to_string(),
            detail: format!(
                "{n_elements} {} elements need {} bytes, got {}",
                ty.name(),
                n_elements / block * block_bytes,
                bytes.len()
            ),
        });
    }
    let mut out = vec![0f32; n_elements];
    out.par_chunks_mut(block * BLOCKS_PER_TASK)
        .zip(bytes.par_chunks(block_bytes * BLOCKS_PER_TASK))
        .for_each(|(o, b)| {
            for (ob, bb) in o.chunks_exact_mut(block).zip(b.chunks_exact(block_bytes)) {
                f(bb, ob);
            }
        });
    Ok(out)
}
