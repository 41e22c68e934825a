//! The physical floor of an offline workload: what `bench offline` reports its
//! throughput against. Ceilings are measured on the device at start (a
//! device-to-device copy and a bf16 GEMM, about three seconds); the floor counts the
//! least work the workload needs:
//!
//! - prefill: `2 · params · prompt tokens` plus causal attention
//!   (`4 · layers · q_heads · head_dim · Σ n(n+1)/2`) at the GEMM rate;
//! - decode: every step reads the weights once and each running sequence's KV
//!   once, at the copy bandwidth, with every request decoding from the first
//!   step (the fewest steps, the most sharing of weight reads).
//!
//! Prefix-cache hits are not subtracted (the random workloads share nothing).
//!
//! Under tensor parallelism the GPUs split that work evenly, and the ranks'
//! all-reduces add their bytes at the NCCL bus bandwidth measured in the
//! same run ([`measure_all_reduce`]).

use minisgl::backend::cuda::{CudaBackend, CudaOptions};
use minisgl::backend::{Backend, HostData};
use minisgl::model::ModelConfig;
use minisgl::sim::StepShape;

/// Measured device ceilings.
#[derive(Clone, Debug)]
pub struct Ceilings {
    /// Device-to-device copy, bytes read + written per second.
    pub copy_bytes_s: f64,
    /// bf16 GEMM FLOP/s (8192³ through cuBLAS) that the device holds: timed after
    /// it has run GEMMs long enough to reach its power limit. The floors use this.
    pub gemm_flops_s: f64,
    /// The same GEMM's rate in its first milliseconds, before the device lowers its
    /// clock for power (an H200 at its 700 W limit: ~805 against ~675 TFLOP/s).
    pub gemm_burst_flops_s: f64,
    /// The attention kernels the device opened with ([`minisgl::backend::cuda::Device::attention_summary`]).
    pub attention: String,
}

/// Measure the ceilings of the default CUDA device.
pub fn measure_cuda() -> anyhow::Result<(Ceilings, String)> {
    let gpu = CudaBackend::new(&CudaOptions::default())?;
    Ok((measure_on(&gpu)?, gpu.dev.name.clone()))
}

/// Measure the ceilings of the device `gpu` has open (for callers that hold one).
pub fn measure_on(gpu: &CudaBackend) -> anyhow::Result<Ceilings> {
    use cudarc::driver::sys::CUevent_flags;
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
    // ~0.3 s of copies (0.5 ms each): a rate held, like the GEMM's below.
    time(100, &mut || Ok(dev.stream.memcpy_dtod(&src, &mut dst)?))?;
    let t_copy = time(500, &mut || Ok(dev.stream.memcpy_dtod(&src, &mut dst)?))?;
    drop((src, dst));
    let d = 8192usize;
    // Random data: zeros run faster than real inputs on tensor cores.
    let vals: Vec<f32> = (0..d * d)
        .map(|i| ((i.wrapping_mul(2_654_435_761) >> 7) % 2001) as f32 / 1000.0 - 1.0)
        .collect();
    let a = gpu.upload(&[d, d], HostData::f32(&vals))?;
    let b = gpu.upload(&[d, d], HostData::f32(&vals))?;
    let mut gemm = || {
        gpu.linear(&a, &b, None)?;
        Ok(())
    };
    let t_burst = time(10, &mut gemm)?;
    // Compute-bound work at full clock draws more than the device's power limit
    // allows; within a second or so it settles at a lower clock (an H200: 1.3-1.5
    // GHz instead of 1.98, nvidia-smi's SW power cap). A workload's prefill and
    // large decode batches run at that settled rate, so the floor counts it: ~1.5 s
    // of GEMMs to get there, then ~0.5 s timed.
    let warm = std::time::Instant::now();
    while warm.elapsed().as_secs_f64() < 1.5 {
        time(50, &mut gemm)?;
    }
    let t_gemm = time(300, &mut gemm)?;
    let flops = 2.0 * (d * d * d) as f64;
    let c = Ceilings {
        copy_bytes_s: 2.0 * (n * 2) as f64 / t_copy,
        gemm_flops_s: flops / t_gemm,
        gemm_burst_flops_s: flops / t_burst,
        attention: dev.attention_summary(),
    };
    Ok(c)
}

/// What the floors count per model: the work of one token through the weights and of
/// one attention (query, key) pair.
struct Work {
    /// Parameters a token multiplies: all but an untied input embedding (a row
    /// gather, which decode does not read either).
    params: f64,
    kv_bytes_per_token: f64,
    attn_flops_per_pair: f64,
}

impl Work {
    fn of(c: &ModelConfig) -> Work {
        let untied = if c.tie_word_embeddings() {
            0
        } else {
            c.vocab_size() * c.hidden_size()
        };
        Work {
            params: (c.num_params() - untied) as f64,
            kv_bytes_per_token: (c.kv_elems_per_token() * 2) as f64,
            attn_flops_per_pair: 4.0 * (c.num_layers() * c.num_heads() * c.head_dim()) as f64,
        }
    }

    /// bf16 bytes of every weight a decode step reads.
    fn weight_bytes(&self) -> f64 {
        2.0 * self.params
    }

    /// FLOPs of every prompt's prefill: the products plus causal attention.
    fn prefill_flops(&self, reqs: &[(u64, u64)]) -> f64 {
        reqs.iter()
            .map(|&(p, _)| {
                let p = p as f64;
                2.0 * self.params * p + self.attn_flops_per_pair * p * (p + 1.0) / 2.0
            })
            .sum()
    }
}

/// Seconds the workload needs at least: prefill at the GEMM rate plus decode
/// steps at the copy bandwidth (see the module docs), on `tp` GPUs that
/// share both evenly (the all-reduces come on top: see
/// [`all_reduce_floor_seconds`]). `reqs` are (prompt tokens, output tokens).
pub fn floor_seconds(c: &ModelConfig, reqs: &[(u64, u64)], ceil: &Ceilings, tp: usize) -> f64 {
    let w = Work::of(c);
    let (weight_bytes, kv_bytes_per_token) = (w.weight_bytes(), w.kv_bytes_per_token);
    let prefill_flops = w.prefill_flops(reqs);
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
    (prefill_flops / ceil.gemm_flops_s + decode_bytes / ceil.copy_bytes_s) / tp.max(1) as f64
}

/// [`floor_seconds`] with each decode step bounded by its FLOPs as well as its bytes:
/// a step takes at least the larger of (weights + the running sequences' KV) at the
/// copy bandwidth and (2 · params · batch + attention over their contexts) at the GEMM
/// rate. Where contexts are long the KV keeps every step bytes-bound and the two agree
/// (the default workload, contexts of ~560 tokens on average: both ceilings were 8,514
/// tok/s for Qwen3-14B on 2026-12-02); at large batches over short contexts the
/// products' FLOPs exceed the bytes (Qwen3-14B, batch 256 x 256: 7.2 TFLOP, ~9.7 ms at
/// 743 TFLOP/s, against ~9.0 ms of copy), and there the bytes-only floor is out of
/// reach. Printed beside the bytes-only ceiling (issue 11's), not instead of it.
pub fn roofline_seconds(c: &ModelConfig, reqs: &[(u64, u64)], ceil: &Ceilings, tp: usize) -> f64 {
    let w = Work::of(c);
    let prefill_flops = w.prefill_flops(reqs);
    // Decode step t runs the requests with more than t outputs after the first; their
    // contexts at step t are prompt + 1 + t tokens.
    let mut by_steps: Vec<(u64, u64)> = reqs
        .iter()
        .map(|&(p, o)| (o.saturating_sub(1), p))
        .filter(|&(o, _)| o > 0)
        .collect();
    by_steps.sort_unstable();
    let steps = by_steps.last().map_or(0, |r| r.0);
    let (mut batch, mut ctx_sum) = (by_steps.len() as f64, 0.0);
    for &(_, p) in &by_steps {
        ctx_sum += (p + 1) as f64;
    }
    let mut next = 0;
    let mut decode = 0.0;
    for t in 0..steps {
        while next < by_steps.len() && by_steps[next].0 <= t {
            batch -= 1.0;
            ctx_sum -= (by_steps[next].1 + 1 + t) as f64;
            next += 1;
        }
        let bytes = w.weight_bytes() + w.kv_bytes_per_token * ctx_sum;
        let flops = 2.0 * w.params * batch + w.attn_flops_per_pair * ctx_sum;
        decode += (bytes / ceil.copy_bytes_s).max(flops / ceil.gemm_flops_s);
        // Every running context grows by the token this step wrote.
        ctx_sum += batch;
    }
    (prefill_flops / ceil.gemm_flops_s + decode) / tp.max(1) as f64
}

/// FLOPs of prefilling fresh prompts of `lens` tokens: the prefill term of
/// [`floor_seconds`] (every weight for every token, plus causal attention).
pub fn prefill_flops(c: &ModelConfig, lens: &[u64]) -> f64 {
    let reqs: Vec<(u64, u64)> = lens.iter().map(|&p| (p, 0)).collect();
    Work::of(c).prefill_flops(&reqs)
}

/// (bf16 bytes of every weight a decode step reads, KV bytes a context token) of `c`.
pub fn decode_bytes(c: &ModelConfig) -> (f64, f64) {
    let w = Work::of(c);
    (w.weight_bytes(), w.kv_bytes_per_token)
}

/// The least time one engine step of `shape` can take: the larger of its bytes
/// (every weight once, plus the KV its decodes read) at the copy bandwidth and its
/// FLOPs (the products of every token, attention over its decodes' contexts and its
/// prefill chunks' pairs) at the GEMM rate, split over `tp` GPUs. Summed over a
/// run's steps it is [`roofline_seconds`] for the steps the scheduler actually ran,
/// so a run's loss can be placed by step class.
pub fn step_floor_seconds(c: &ModelConfig, shape: &StepShape, ceil: &Ceilings, tp: usize) -> f64 {
    let w = Work::of(c);
    let bytes = w.weight_bytes() + w.kv_bytes_per_token * shape.kv_read as f64;
    let flops = 2.0 * w.params * shape.tokens as f64
        + w.attn_flops_per_pair * (shape.kv_read + shape.attn_pairs) as f64;
    (bytes / ceil.copy_bytes_s).max(flops / ceil.gemm_flops_s) / tp.max(1) as f64
}

/// The all-reduce of a tensor-parallel group, timed on its GPUs.
#[derive(Clone, Debug)]
pub struct AllReduceTimes {
    /// Ranks.
    pub world: usize,
    /// NCCL bus bandwidth of a large (256 MiB) bf16 sum, nccl-tests' measure:
    /// bytes / time · 2(n-1)/n.
    pub bus_bytes_s: f64,
    /// Seconds per all-reduce of each requested size (bf16 elements).
    pub per_call: Vec<(usize, f64)>,
}

/// Time the bf16 sum all-reduce on GPUs `first..first + world` (a group of
/// its own, one thread a rank): a 256 MiB buffer for the bus bandwidth, then
/// each of `sizes` (elements) for per-call latency.
pub fn measure_all_reduce(world: usize, sizes: &[usize]) -> anyhow::Result<AllReduceTimes> {
    use cudarc::driver::sys::CUevent_flags;
    use minisgl::backend::cuda::nccl;
    let ordinals = minisgl::model::tp_runner::gpu_ordinals(world)?;
    let ranks = nccl::init_group(&ordinals)?;
    const BIG: usize = 128 << 20; // bf16 elements: 256 MiB
    let times: Vec<anyhow::Result<Vec<f64>>> = std::thread::scope(|s| {
        let hs: Vec<_> = ranks
            .into_iter()
            .map(|rank| {
                s.spawn(move || -> anyhow::Result<Vec<f64>> {
                    let gpu = CudaBackend::for_rank(&CudaOptions::default(), rank)?;
                    let dev = &gpu.dev;
                    let mut out = Vec::new();
                    for (n, iters) in
                        std::iter::once((BIG, 10)).chain(sizes.iter().map(|&n| (n, 200)))
                    {
                        let mut x = gpu.new_output(1, n)?;
                        for _ in 0..3 {
                            gpu.all_reduce(&mut x)?;
                        }
                        let e0 = dev.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
                        let e1 = dev.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
                        e0.record(&dev.stream)?;
                        for _ in 0..iters {
                            gpu.all_reduce(&mut x)?;
                        }
                        e1.record(&dev.stream)?;
                        e1.synchronize()?;
                        out.push(e0.elapsed_ms(&e1)? as f64 * 1e-3 / iters as f64);
                    }
                    Ok(out)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a rank panicked")))
            })
            .collect()
    });
    let times = times.into_iter().collect::<anyhow::Result<Vec<_>>>()?;
    // The slowest rank sets the pace of a collective.
    let worst = |i: usize| times.iter().map(|t| t[i]).fold(0.0f64, f64::max);
    let bytes = (BIG * 2) as f64;
    let ring = 2.0 * (world - 1) as f64 / world as f64;
    Ok(AllReduceTimes {
        world,
        bus_bytes_s: bytes / worst(0) * ring,
        per_call: sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| (n, worst(i + 1)))
            .collect(),
    })
}

/// Seconds of all-reduce a tensor-parallel run of the workload needs at
/// least: two sums of the hidden state per layer for every token processed
/// (prompt tokens, then one per decode step of each request), each moving
/// 2(n-1)/n of its bytes over the bus.
pub fn all_reduce_floor_seconds(c: &ModelConfig, reqs: &[(u64, u64)], ar: &AllReduceTimes) -> f64 {
    if ar.world < 2 {
        return 0.0;
    }
    let tokens: f64 = reqs
        .iter()
        .map(|&(p, o)| (p + o.saturating_sub(1)) as f64)
        .sum();
    let bytes = tokens * (2 * c.num_layers() * c.hidden_size() * 2) as f64;
    let ring = 2.0 * (ar.world - 1) as f64 / ar.world as f64;
    bytes * ring / ar.bus_bytes_s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qwen3_06b() -> ModelConfig {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../examples/model-configs/qwen3-0.6b/config.json"
        ))
        .unwrap();
        ModelConfig::from_json_str(&text).unwrap()
    }

    fn ceil(copy: f64, gemm: f64) -> Ceilings {
        Ceilings {
            copy_bytes_s: copy,
            gemm_flops_s: gemm,
            gemm_burst_flops_s: gemm,
            attention: String::new(),
        }
    }

    #[test]
    fn roofline_is_the_bytes_floor_when_flops_are_free_and_above_it_otherwise() {
        let c = qwen3_06b();
        let reqs = [(100u64, 50u64), (300, 1), (7, 200), (64, 64)];
        // With an unlimited GEMM rate both floors count the same bytes.
        let free = ceil(4.0e12, f64::INFINITY);
        let (f, r) = (
            floor_seconds(&c, &reqs, &free, 1),
            roofline_seconds(&c, &reqs, &free, 1),
        );
        assert!((f - r).abs() <= 1e-9 * f, "{f} vs {r}");
        // A slow GEMM makes the decode steps FLOP-bound: the roofline is higher,
        // and split over two GPUs it halves.
        let slow = ceil(4.0e12, 1.0e12);
        let (f, r) = (
            floor_seconds(&c, &reqs, &slow, 1),
            roofline_seconds(&c, &reqs, &slow, 1),
        );
        assert!(r > f, "{r} <= {f}");
        let r2 = roofline_seconds(&c, &reqs, &slow, 2);
        assert!((r2 * 2.0 - r).abs() <= 1e-9 * r);
    }

    #[test]
    fn a_step_floor_is_its_bytes_or_its_flops_whichever_is_longer() {
        let c = qwen3_06b();
        // An untied input embedding is a gather: neither bytes nor FLOPs count it.
        let untied = if c.tie_word_embeddings() {
            0.0
        } else {
            (c.vocab_size() * c.hidden_size()) as f64
        };
        let params = c.num_params() as f64 - untied;
        let w = 2.0 * params;
        let kv = (c.kv_elems_per_token() * 2) as f64;
        // Bytes-bound: one decode over 100 cached tokens (101 read) at 1 TB/s.
        let cl = ceil(1.0e12, f64::INFINITY);
        let d = StepShape::decode(1, 100);
        let want = (w + 101.0 * kv) / 1.0e12;
        let got = step_floor_seconds(&c, &d, &cl, 1);
        assert!((got - want).abs() <= 1e-9 * want, "{got} vs {want}");
        // FLOP-bound: a 4096-token chunk at 1 TFLOP/s counts its products and its
        // 4096 * 4097 / 2 causal pairs; two GPUs halve it.
        let cl = ceil(f64::INFINITY, 1.0e12);
        let p = StepShape::prefill(4096, 0);
        let per_pair = 4.0 * (c.num_layers() * c.num_heads() * c.head_dim()) as f64;
        let want = (2.0 * params * 4096.0 + per_pair * (4096.0 * 4097.0 / 2.0)) / 1.0e12;
        let got = step_floor_seconds(&c, &p, &cl, 1);
        assert!((got - want).abs() <= 1e-9 * want, "{got} vs {want}");
        let half = step_floor_seconds(&c, &p, &cl, 2);
        assert!((half * 2.0 - got).abs() <= 1e-9 * got);
    }

    #[test]
    fn roofline_counts_one_step_per_output_after_the_first() {
        let c = qwen3_06b();
        // One request, 11 outputs: 10 decode steps of one sequence, bytes-bound.
        let cl = ceil(1.0e12, f64::INFINITY);
        let r = roofline_seconds(&c, &[(0, 11)], &cl, 1);
        let w = 2.0 * c.num_params() as f64;
        let kv = (c.kv_elems_per_token() * 2) as f64;
        let want = (10.0 * w + kv * (1..=10).sum::<u64>() as f64) / 1.0e12;
        assert!((r - want).abs() <= 1e-9 * want, "{r} vs {want}");
    }
}
