//! The default sampler: OpenAI semantics, applied exactly on the device.
//!
//! `plan` passes each request's parameters and `logit_bias` through unchanged
//! (the device applies temperature, top-k, top-p, min-p, penalties and biases
//! over the full vocabulary; temperature 0 means an argmax taken *after*
//! penalties and biases, so such requests still come here) and picks the seed
//! of this step's draw:
//! - with a client `seed`, `step_seed(seed, generated_len)`, so the same seed,
//!   prompt and parameters reproduce the same output, token by token, and a
//!   preempted-and-recomputed request continues its stream where it left off;
//! - without one, the host's fresh `entropy`.
//!
//! `pick` (used only by plans with `pick-from-top > 0`, which this policy never
//! asks for; it is here so the sampler world is complete) draws from the
//! candidates' renormalised probabilities with the list's seed.

use minisgl_plugin_sdk::{CandidateList, SamplePlan, SampleRequest, Sampler};

/// The SplitMix64 finaliser: a bijective 64-bit mix with full avalanche.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Seed of the draw for the token at output position `generated_len` of a
/// request whose client seed is `seed`:
/// `splitmix64(seed XOR splitmix64(generated_len))`, where `splitmix64(x)`
/// adds 0x9E3779B97F4A7C15 and applies the SplitMix64 finaliser. Distinct
/// positions give unrelated seeds; the function is part of the output contract
/// (changing it changes seeded outputs).
pub fn step_seed(seed: u64, generated_len: u32) -> u64 {
    splitmix64(seed ^ splitmix64(u64::from(generated_len)))
}

/// `e^x` from IEEE basic operations only, so native code and Wasm (whose
/// `f64::exp` comes from different libm implementations) agree bit for bit.
/// Relative error about 1e-15; values below -708 (subnormal results) give 0.
fn exp_portable(x: f64) -> f64 {
    // Below -708 the result is subnormal: as a sampling weight, it is zero.
    if x.is_nan() || x < -708.0 {
        return 0.0;
    }
    if x > 709.0 {
        return f64::INFINITY;
    }
    // Cody-Waite reduction: ln 2 split in a high part with trailing zero bits
    // (so `k * LN2_HI` is exact) and the remainder.
    const LN2_HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000);
    const LN2_LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76);
    let k = (x / std::f64::consts::LN_2).round();
    let r = (x - k * LN2_HI) - k * LN2_LO;
    // Taylor series of e^r for |r| <= ln2/2: 14 terms reach double precision.
    let mut term = 1.0;
    let mut sum = 1.0;
    for i in 1..14 {
        term = term * r / f64::from(i);
        sum += term;
    }
    // 2^k built from its exponent bits; -1022 <= k <= 1023 here.
    let scale = f64::from_bits(((k as i64 + 1023) as u64) << 52);
    sum * scale
}

/// Draws one token from `list` with probabilities proportional to
/// `exp(logprob)` over its candidates, using a uniform number derived from the
/// list's seed. Returns `u32::MAX` for an empty list (there is nothing to pick).
pub fn pick_seeded(list: &CandidateList) -> u32 {
    let Some(first) = list.candidates.first() else {
        return u32::MAX;
    };
    let max = list
        .candidates
        .iter()
        .map(|c| c.logprob)
        .filter(|lp| !lp.is_nan())
        .fold(f32::NEG_INFINITY, f32::max);
    if !max.is_finite() {
        return first.token;
    }
    let weights: Vec<f64> = list
        .candidates
        .iter()
        .map(|c| exp_portable(f64::from(c.logprob) - f64::from(max)))
        .collect();
    let total: f64 = weights.iter().sum();
    let u = (splitmix64(list.seed) >> 11) as f64 / (1u64 << 53) as f64;
    let target = u * total;
    let mut acc = 0.0;
    let mut last_positive = first.token;
    for (c, w) in list.candidates.iter().zip(&weights) {
        if *w > 0.0 {
            last_positive = c.token;
        }
        acc += w;
        if acc > target {
            return c.token;
        }
    }
    last_positive
}

/// The default sampler. Stateless.
#[derive(Clone, Debug, Default)]
pub struct DefaultSampler;

impl Sampler for DefaultSampler {
    fn name(&self) -> String {
        "default-sampler".to_string()
    }

    fn plan(&mut self, requests: &[SampleRequest], _vocab_size: u32) -> Vec<SamplePlan> {
        requests
            .iter()
            .map(|r| SamplePlan {
                id: r.id,
                params: r.params.clone(),
                seed: match r.params.seed {
                    Some(seed) => step_seed(seed, r.generated_len),
                    None => r.entropy,
                },
                logit_bias: r.logit_bias.clone(),
                allowed_tokens: None,
                pick_from_top: 0,
            })
            .collect()
    }

    fn pick(&mut self, lists: &[CandidateList]) -> Vec<u32> {
        lists.iter().map(pick_seeded).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use minisgl_plugin_sdk::{Candidate, SamplingParams};

    #[test]
    fn portable_exp_matches_libm() {
        for i in 0..2000 {
            let x = -(i as f64) * 0.37;
            let (a, b) = (exp_portable(x), x.exp());
            let b = if x < -708.0 { 0.0 } else { b };
            assert!((a - b).abs() <= b * 1e-14, "x={x}: {a} vs {b}");
        }
        assert_eq!(exp_portable(f64::NEG_INFINITY), 0.0);
    }

    #[test]
    fn seeded_plans_depend_on_position_only() {
        let req = |generated_len, entropy| SampleRequest {
            id: 1,
            params: SamplingParams {
                seed: Some(42),
                ..SamplingParams::default()
            },
            generated_len,
            entropy,
            ..SampleRequest::default()
        };
        let mut s = DefaultSampler;
        let a = s.plan(&[req(3, 1)], 100);
        let b = s.plan(&[req(3, 2)], 100);
        let c = s.plan(&[req(4, 1)], 100);
        assert_eq!(a[0].seed, b[0].seed);
        assert_ne!(a[0].seed, c[0].seed);
        assert_eq!(a[0].seed, step_seed(42, 3));
        let unseeded = SampleRequest {
            entropy: 77,
            ..SampleRequest::default()
        };
        assert_eq!(s.plan(&[unseeded], 100)[0].seed, 77);
    }

    #[test]
    fn pick_follows_probabilities() {
        let list = |seed| CandidateList {
            id: 0,
            seed,
            candidates: vec![
                Candidate {
                    token: 10,
                    logprob: (0.7f32).ln(),
                },
                Candidate {
                    token: 20,
                    logprob: (0.2f32).ln(),
                },
                Candidate {
                    token: 30,
                    logprob: (0.1f32).ln(),
                },
            ],
        };
        let mut counts = [0u32; 3];
        for seed in 0..10_000 {
            match pick_seeded(&list(seed)) {
                10 => counts[0] += 1,
                20 => counts[1] += 1,
                30 => counts[2] += 1,
                t => panic!("picked {t}"),
            }
        }
        assert!((6700..7300).contains(&counts[0]), "{counts:?}");
        assert!((1700..2300).contains(&counts[1]), "{counts:?}");
        assert!((800..1200).contains(&counts[2]), "{counts:?}");
    }
}
