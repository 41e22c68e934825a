//! Inputs every check group draws on: bf16-rounded random values, uploads, and
//! reading a GPU cache layer back. Kept apart from the groups so that none of
//! them imports another for its helpers.

use anyhow::Result;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use minisgl::backend::cuda::CudaBackend;
use minisgl::backend::{Backend, HostData};

/// Normal(0, std) values already rounded to bf16, so both backends see the same inputs.
pub fn randn(rng: &mut ChaCha8Rng, n: usize, std: f32) -> Vec<f32> {
    (0..n)
        .map(|_| {
            // Box-Muller
            let u1: f32 = rng.random::<f32>().max(1e-7);
            let u2: f32 = rng.random::<f32>();
            let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f32::consts::PI * u2).cos();
            half::bf16::from_f32(z * std).to_f32()
        })
        .collect()
}

/// `v` uploaded to `b` as an f32 tensor of `shape`.
pub fn up<B: Backend>(b: &B, shape: &[usize], v: &[f32]) -> Result<B::Tensor> {
    Ok(b.upload(shape, HostData::f32(v))?)
}

/// One layer of a GPU K or V cache (bf16 on the device) as f32, for comparisons.
pub fn cache_f32(gpu: &CudaBackend, layer: &cudarc::driver::CudaSlice<u16>) -> Result<Vec<f32>> {
    let bits = gpu.dev.stream.clone_dtoh(layer)?;
    Ok(bits
        .into_iter()
        .map(|b| half::bf16::from_bits(b).to_f32())
        .collect())
}

/// RoPE inverse frequencies of `head_dim` at Qwen3's base (1e6), unscaled.
pub fn qwen3_inv_freq(head_dim: usize) -> Vec<f32> {
    (0..head_dim / 2)
        .map(|i| 1_000_000f32.powf(-(2.0 * i as f32) / head_dim as f32))
        .collect()
}
