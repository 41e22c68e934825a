//! `gpu-check --timeline-model CONFIG`: the kernels of one eager decode step of a
//! random-weight model at batch 1, 64 and 256, each against its own floor (the
//! bytes it must move at the copy rate, or its FLOPs at the GEMM rate, [`Rates`]), as
//! Markdown tables. Graphs are off so every launch is timed by its own events; a
//! replayed step runs the same kernels without the launch gaps.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use minisgl::backend::cuda::timeline::KernelTime;

use super::rates::Rates;

/// One table per batch size, for the model whose config is at `cfg`.
pub fn run(cfg: &Path, batches: &[usize], prompt: usize, rates: &Rates) -> Result<String> {
    // `--timeline-batches 0` (a prefill timeline alone): no model to load here.
    if !batches.iter().any(|&b| b > 0) {
        return Ok(String::new());
    }
    let lm = minisgl::model::load_random(cfg, 1)?;
    let max_b = batches.iter().copied().max().unwrap_or(1);
    let ps = 16u32;
    let pages = ((prompt + 4).div_ceil(ps as usize) * max_b) as u32 + 1;
    let mut runner = super::bench::eager_cuda_runner(&lm, pages, ps)?;
    let c = &lm.config;
    let kv_per_token = (c.kv_elems_per_token() * 2) as f64;
    let mut md = String::new();
    for &b in batches.iter().filter(|&&b| b > 0) {
        let ks = super::model::decode_timeline(runner.as_mut(), b, prompt)?;
        let weights = super::bench::weight_bytes(c);
        let step_floor_us =
            1e6 * (weights + (b * prompt) as f64 * kv_per_token) / rates.copy_bytes_s;
        writeln!(md, "\n### {} batch {b}, context ~{prompt}\n", cfg.display())?;
        md.push_str(&table(&ks, step_floor_us, rates, "weights + KV"));
    }
    Ok(md)
}

/// The kernels of one prefill step of `tokens` prompt tokens, for the model whose
/// config is at `cfg`: fresh prompts drawn uniformly from `lens` (min, max), the last
/// one cut to fill the step, as an FCFS scheduler packs a chunk. The step's floor is its
/// FLOPs at the GEMM rate: every weight for every token (the LM head's included, as
/// `bench offline`'s floor counts them) plus the causal attention.
pub fn run_prefill(
    cfg: &Path,
    tokens: usize,
    lens: (usize, usize),
    rates: &Rates,
) -> Result<String> {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let mut prompts = Vec::new();
    let mut left = tokens;
    while left > 0 {
        let n = rng.random_range(lens.0..=lens.1).min(left);
        prompts.push(n);
        left -= n;
    }
    let lm = minisgl::model::load_random(cfg, 1)?;
    let ps = 16u32;
    let longest = prompts.iter().copied().max().unwrap_or(0);
    let pages = (prompts.len() * longest.div_ceil(ps as usize)) as u32 + 1;
    let mut runner = super::bench::eager_cuda_runner(&lm, pages, ps)?;
    let ks = super::model::prefill_timeline(runner.as_mut(), &prompts)?;
    let lens_u64: Vec<u64> = prompts.iter().map(|&n| n as u64).collect();
    let flops = super::super::bench_floor::prefill_flops(&lm.config, &lens_u64);
    let step_floor_us = 1e6 * flops / rates.gemm_flops_s;
    let mut md = String::new();
    writeln!(
        md,
        "\n### {} prefill step, {tokens} tokens in {} prompts of {}-{} (drawn from {}-{})\n",
        cfg.display(),
        prompts.len(),
        prompts.iter().min().unwrap_or(&0),
        longest,
        lens.0,
        lens.1
    )?;
    md.push_str(&table(
        &ks,
        step_floor_us,
        rates,
        "products' and attention's FLOPs",
    ));
    Ok(md)
}

/// `--timeline-prefill-lens MIN,MAX`: the shortest and longest prompt, 1 <= MIN <= MAX.
pub fn len_range(s: &str) -> Result<(usize, usize)> {
    let bad = || {
        anyhow::anyhow!("--timeline-prefill-lens: expected MIN,MAX with 1 <= MIN <= MAX, got `{s}`")
    };
    let (a, b) = s.split_once(',').ok_or_else(bad)?;
    let (a, b): (usize, usize) = (
        a.trim().parse().map_err(|_| bad())?,
        b.trim().parse().map_err(|_| bad())?,
    );
    if a == 0 || a > b {
        return Err(bad());
    }
    Ok((a, b))
}

fn floor_us(k: &KernelTime, rates: &Rates) -> Option<f64> {
    (k.bytes > 0.0 || k.flops > 0.0)
        .then(|| 1e6 * (k.bytes / rates.copy_bytes_s).max(k.flops / rates.gemm_flops_s))
}

/// A table row's key: kernel name, bytes and FLOPs of one call.
type RowKey = (String, u64, u64);
/// Calls, total µs, and the summed floor (µs) where the call sites gave costs.
type RowSum = (usize, f64, Option<f64>);

/// Rows grouped by (kernel, bytes, FLOPs), largest total time first.
/// `floor_what` names what the step floor counts.
fn table(ks: &[KernelTime], step_floor_us: f64, rates: &Rates, floor_what: &str) -> String {
    let mut groups: HashMap<RowKey, RowSum> = HashMap::new();
    let mut order = Vec::new();
    for k in ks {
        let key = (k.name.clone(), k.bytes as u64, k.flops as u64);
        let e = groups.entry(key.clone()).or_insert_with(|| {
            order.push(key);
            (0, 0.0, floor_us(k, rates).map(|_| 0.0))
        });
        e.0 += 1;
        e.1 += k.us;
        if let (Some(f), Some(acc)) = (floor_us(k, rates), e.2.as_mut()) {
            *acc += f;
        }
    }
    let total: f64 = ks.iter().map(|k| k.us).sum();
    let mut rows: Vec<_> = order.into_iter().map(|k| (groups[&k], k)).collect();
    rows.sort_by(|a, b| b.0 .1.total_cmp(&a.0 .1));
    let mut s = String::from(
        "| kernel | calls | MB moved each | GFLOP each | total µs | floor µs | x floor | share |\n|---|---|---|---|---|---|---|---|\n",
    );
    for ((calls, us, floor), (name, bytes, flops)) in rows {
        let _ = writeln!(
            s,
            "| {name} | {calls} | {} | {} | {us:.1} | {} | {} | {:.1}% |",
            if bytes > 0 {
                format!("{:.2}", bytes as f64 / 1e6)
            } else {
                "—".into()
            },
            if flops > 0 {
                format!("{:.3}", flops as f64 / 1e9)
            } else {
                "—".into()
            },
            floor.map_or("—".into(), |f| format!("{f:.1}")),
            floor.map_or("—".into(), |f| format!("{:.2}", us / f.max(1e-9))),
            100.0 * us / total.max(1e-9)
        );
    }
    let _ = writeln!(
        s,
        "\nΣ kernel time {total:.1} µs over {} launches; step floor ({floor_what} at {:.2} TB/s and {:.0} TFLOP/s, {}) {step_floor_us:.1} µs = {:.2}x",
        ks.len(),
        rates.copy_tbps(),
        rates.gemm_tflops(),
        rates.source,
        total / step_floor_us
    );
    s
}

#[cfg(test)]
mod tests {
    use super::len_range;

    #[test]
    fn prefill_lengths_parse_as_min_comma_max_and_bad_ones_name_the_flag() {
        assert_eq!(len_range("100,1024").unwrap(), (100, 1024));
        assert_eq!(len_range("8, 8").unwrap(), (8, 8));
        for bad in ["100", "0,5", "9,8", "a,b", "1,2,3"] {
            let e = len_range(bad).unwrap_err().to_string();
            assert!(
                e.contains("--timeline-prefill-lens") && e.contains(bad),
                "{e}"
            );
        }
    }
}
