//! The physical floor of an offline workload: what `bench offline` reports its
//! throughput against. Ceilings are measured on the device at start (a
//! device-to-device copy and a bf16 GEMM, about a second); the floor counts the
//! least work the workload needs:
//!
//! - prefill: `2 · params · prompt tokens` plus causal attention
//!   (`4 · layers · q_heads · head_dim · Σ n(n+1)/2`) at the GEMM rate;
//! - decode: every step reads the weights once and each running sequence's KV
//!   once, at the copy bandwidth, with every request decoding from the first
//!   step (the fewest steps, the most sharing of weight reads).
//!
//! Prefix-cache hits are not subtracted (the random workloads share nothing).

use crate::backend::cuda::{CudaBackend, CudaOptions};
use crate::backend::{Backend, HostData};
use crate::model::ModelConfig;

/// Measured device ceilings.
#[derive(Clone, Copy, Debug)]
pub struct Ceilings {
    /// Device-to-device copy, bytes read + written per second.
    pub copy_bytes_s: f64,
    /// bf16 GEMM FLOP/s (8192³ through cuBLAS).
    pub gemm_flops_s: f64,
}

/// Measure the ceilings of the default CUDA device.
pub fn measure_cuda() -> anyhow::Result<(Ceilings, String)> {
    use cudarc::driver::sys::CUevent_flags;
    let gpu = CudaBackend::new(&CudaOptions::default())?;
    let dev = &gpu.dev;
    let time = |iters: usize, f: &mut dyn FnMut() -> anyhow::Result<()>| -> anyhow::Result<f64> {
        f()?;
        let e0 = dev.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        let e1 = dev.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        e0.record(&dev.stream)?;
        for _ in 0..iters {
            f()?;
        }
        e1.record(&dev.stream)?;
        e1.synchronize()?;
        Ok(e0.elapsed_ms(&e1)? as f64 * 1e-3 / iters as f64)
    };
    let n = 1usize << 29; // 1 GiB of u16
    let src = dev.stream.alloc_zeros::<u16>(n)?;
    let mut dst = dev.stream.alloc_zeros::<u16>(n)?;
    let t_copy = time(10, &mut || Ok(dev.stream.memcpy_dtod(&src, &mut dst)?))?;
    drop((src, dst));
    let d = 8192usize;
    // Random data: zeros run faster than real inputs on tensor cores.
    let vals: Vec<f32> = (0..d * d)
        .map(|i| ((i.wrapping_mul(2_654_435_761) >> 7) % 2001) as f32 / 1000.0 - 1.0)
        .collect();
    let a = gpu.upload(&[d, d], HostData::f32(&vals))?;
    let b = gpu.upload(&[d, d], HostData::f32(&vals))?;
    let t_gemm = time(10, &mut || {
        gpu.linear(&a, &b, None)?;
        Ok(())
    })?;
    let c = Ceilings {
        copy_bytes_s: 2.0 * (n * 2) as f64 / t_copy,
        gemm_flops_s: 2.0 * (d * d * d) as f64 / t_gemm,
    };
    Ok((c, dev.name.clone()))
}

/// Seconds the workload needs at least: prefill at the GEMM rate plus decode
/// steps at the copy bandwidth (see the module docs). `reqs` are
/// (prompt tokens, output tokens).
pub fn floor_seconds(c: &ModelConfig, reqs: &[(u64, u64)], ceil: &Ceilings) -> f64 {
    let params = c.num_params() as f64;
    let untied = if c.tie_word_embeddings() {
        0.0
    } else {
        (c.vocab_size() * c.hidden_size()) as f64
    };
    // Decode reads every weight but an untied input embedding (a row gather).
    let weight_bytes = 2.0 * (params - untied);
    let kv_bytes_per_token = (c.kv_elems_per_token() * 2) as f64;
    let attn_per_pair = 4.0 * (c.num_layers() * c.num_heads() * c.head_dim()) as f64;
    let mut prefill_flops = 0.0;
    for &(p, _) in reqs {
        let p = p as f64;
        prefill_flops += 2.0 * (params - untied) * p + attn_per_pair * p * (p + 1.0) / 2.0;
    }
    // Decode step t (0-based) runs every request with more than t outputs left
    // after the first (the first output comes from the prefill step).
    let steps = reqs
        .iter()
        .map(|r| r.1.saturating_sub(1))
        .max()
        .unwrap_or(0);
    let mut decode_bytes = steps as f64 * weight_bytes;
    for &(p, o) in reqs {
        let o = o.saturating_sub(1) as f64;
        // Σ_{t<o} (p + 1 + t) tokens of KV read.
        decode_bytes += kv_bytes_per_token * (o * (p as f64 + 1.0) + o * (o - 1.0) / 2.0);
    }
    prefill_flops / ceil.gemm_flops_s + decode_bytes / ceil.copy_bytes_s
}
