//! The reference sampler: one logits row in, one [`Sampled`] out.
//!
//! Every backend implements exactly this recipe (the CUDA backend on the
//! device); this file is its specification.
//!
//! # Greedy (`SampleMode::Greedy`)
//! `token = argmax(logits)` (lowest id wins ties); log-probabilities, when
//! asked, are `log_softmax(logits)`.
//!
//! # Sample / Candidates (`ResolvedSampling` r)
//! On an f32 copy `l` of the row, in this order:
//! 1. `allowed_tokens = Some(set)`: every token not in the set becomes `-inf`.
//! 2. `logit_bias`: `l[t] += bias` (ids ≥ vocab are ignored).
//! 3. `repetition_penalty = rp ≠ 1`: for each distinct `t` in
//!    `prompt_tokens ∪ output_tokens`: `l[t] = l[t] > 0 ? l[t] / rp : l[t] * rp`.
//! 4. presence/frequency: for each distinct `t` in `output_tokens` occurring `c`
//!    times: `l[t] -= frequency_penalty * c + presence_penalty`.
//! 5. temperature `T`: if `T > 0`, `l /= T`. In `Sample` mode `T == 0` means
//!    greedy over the processed `l` (steps 1-4); in `Candidates` mode `T == 0`
//!    is treated as 1 (the plugin decides).
//! 6. `lp = log_softmax(l)`: the "processed distribution". `logprob` and
//!    `top_logprobs` (n largest `lp`, ties lowest id first) come from `lp`.
//! 7. Truncation (a token is *kept* when it passes all three), with
//!    `p = exp(lp)`:
//!    * `top_k > 0`: keep `l[t] >= v_k`, where `v_k` is the k-th largest `l`
//!      (ties at the boundary are all kept);
//!    * `top_p < 1`: with `q` the probabilities renormalised over the tokens
//!      kept by top-k, keep `t` when `Σ_{u kept, q[u] > q[t]} q[u] < top_p`;
//!    * `min_p > 0`: keep `p[t] >= min_p * max(p)`;
//!    * the argmax token is always kept.
//! 8. `Sample`: `token = argmax over kept t of (l[t] + g(seed, t))` with the
//!    counter-based Gumbel noise [`gumbel`] (ties lowest id). This is an exact
//!    draw from `softmax(l)` restricted to the kept set.
//!    `Candidates { k }`: the `k` kept tokens with the largest `l` (ties lowest
//!    id), each with `ln(p[t] / Σ_kept p)`; `token` is the first one.

use crate::backend::Sampled;
use crate::batch::{ResolvedSampling, SampleMode, SampleSpec, TokenLogprob};

/// SplitMix64 finaliser.
pub fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Uniform in (0, 1) for token `t` under `seed`: 24 random bits, centred.
/// `bits = splitmix64(seed ^ (t as u64).wrapping_mul(0x9E3779B97F4A7C15))`,
/// `u = ((bits >> 40) as f32 + 0.5) / 2^24`.
pub fn uniform(seed: u64, token: u32) -> f32 {
    let bits = splitmix64(seed ^ (token as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    ((bits >> 40) as f32 + 0.5) * (1.0 / 16_777_216.0)
}

/// Standard Gumbel noise for token `t`: `-ln(-ln(u))` in f32.
pub fn gumbel(seed: u64, token: u32) -> f32 {
    -(-uniform(seed, token).ln()).ln()
}

/// Index of the largest value; lowest index on ties; NaN never wins.
fn argmax(v: &[f32]) -> u32 {
    let mut best = 0usize;
    let mut bv = f32::NEG_INFINITY;
    for (i, &x) in v.iter().enumerate() {
        if x > bv {
            bv = x;
            best = i;
        }
    }
    best as u32
}

/// `log_softmax` in f32 with an f64 sum of exponentials.
pub fn log_softmax(l: &[f32]) -> Vec<f32> {
    let m = l.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if m == f32::NEG_INFINITY {
        return vec![f32::NEG_INFINITY; l.len()];
    }
    let s: f64 = l.iter().map(|&x| ((x - m) as f64).exp()).sum();
    let ls = s.ln() as f32;
    l.iter().map(|&x| x - m - ls).collect()
}

/// The `n` largest entries (ties: lowest id first), as (token, value).
fn top_n(v: &[f32], n: usize, filter: impl Fn(usize) -> bool) -> Vec<TokenLogprob> {
    let mut idx: Vec<u32> = (0..v.len() as u32)
        .filter(|&i| filter(i as usize) && !v[i as usize].is_nan())
        .collect();
    let cmp = |a: &u32, b: &u32| {
        v[*b as usize]
            .partial_cmp(&v[*a as usize])
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.cmp(b))
    };
    if n < idx.len() {
        idx.select_nth_unstable_by(n, cmp);
        idx.truncate(n);
    }
    idx.sort_by(cmp);
    idx.into_iter()
        .map(|t| TokenLogprob {
            token: t,
            logprob: v[t as usize],
        })
        .collect()
}

/// Steps 1-4 of the recipe, in place.
pub fn apply_processing(l: &mut [f32], r: &ResolvedSampling) {
    let vocab = l.len();
    if let Some(allowed) = &r.allowed_tokens {
        let mut keep = vec![false; vocab];
        for &t in allowed {
            if (t as usize) < vocab {
                keep[t as usize] = true;
            }
        }
        for (x, k) in l.iter_mut().zip(keep) {
            if !k {
                *x = f32::NEG_INFINITY;
            }
        }
    }
    for b in &r.logit_bias {
        if (b.token as usize) < vocab {
            l[b.token as usize] += b.bias;
        }
    }
    let p = &r.params;
    if p.repetition_penalty != 1.0 && p.repetition_penalty > 0.0 {
        let mut seen = vec![false; vocab];
        for &t in r.prompt_tokens.iter().chain(&r.output_tokens) {
            let t = t as usize;
            if t < vocab && !seen[t] {
                seen[t] = true;
                let x = l[t];
                l[t] = if x > 0.0 {
                    x / p.repetition_penalty
                } else {
                    x * p.repetition_penalty
                };
            }
        }
    }
    if p.frequency_penalty != 0.0 || p.presence_penalty != 0.0 {
        let mut counts: std::collections::HashMap<u32, u32> = Default::default();
        for &t in &r.output_tokens {
            if (t as usize) < vocab {
                *counts.entry(t).or_default() += 1;
            }
        }
        for (t, c) in counts {
            l[t as usize] -= p.frequency_penalty * c as f32 + p.presence_penalty;
        }
    }
}

/// Step 7: which tokens survive top-k / top-p / min-p.
pub fn kept_mask(l: &[f32], lp: &[f32], r: &ResolvedSampling) -> Vec<bool> {
    let vocab = l.len();
    let mut keep: Vec<bool> = l.iter().map(|x| *x > f32::NEG_INFINITY).collect();
    let p = &r.params;
    if p.top_k > 0 && (p.top_k as usize) < vocab {
        let k = p.top_k as usize;
        let mut vals: Vec<f32> = l.to_vec();
        let (_, kth, _) = vals.select_nth_unstable_by(k - 1, |a, b| {
            b.partial_cmp(a).unwrap_or(std::cmp::Ordering::Equal)
        });
        let vk = *kth;
        for (m, &x) in keep.iter_mut().zip(l) {
            *m &= x >= vk;
        }
    }
    if p.top_p < 1.0 {
        let mut idx: Vec<usize> = (0..vocab).filter(|&i| keep[i]).collect();
        let z: f64 = idx.iter().map(|&i| (lp[i] as f64).exp()).sum();
        idx.sort_by(|&a, &b| {
            lp[b]
                .partial_cmp(&lp[a])
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        // Walk groups of equal probability: a group is kept when the mass of
        // strictly larger tokens is below top_p.
        let mut above = 0.0f64;
        let mut i = 0;
        while i < idx.len() {
            let v = lp[idx[i]];
            let mut j = i;
            let mut group = 0.0f64;
            while j < idx.len() && lp[idx[j]] == v {
                group += (v as f64).exp() / z;
                j += 1;
            }
            let kept = above < p.top_p as f64;
            for &t in &idx[i..j] {
                keep[t] = kept;
            }
            above += group;
            i = j;
        }
    }
    if p.min_p > 0.0 {
        let maxp = lp.iter().copied().fold(f32::NEG_INFINITY, f32::max).exp();
        for (m, &x) in keep.iter_mut().zip(lp) {
            *m &= x.exp() >= p.min_p * maxp;
        }
    }
    let am = argmax(l) as usize;
    if am < vocab {
        keep[am] = true;
    }
    keep
}

fn fill_logprobs(out: &mut Sampled, lp: &[f32], n: Option<u32>) {
    if let Some(n) = n {
        out.logprob = Some(lp[out.token as usize]);
        if n > 0 {
            out.top_logprobs = top_n(lp, n as usize, |_| true);
        }
    }
}

/// Sample one row following the recipe in the module docs.
pub fn sample_row(logits: &[f32], spec: &SampleSpec) -> Sampled {
    let mut out = Sampled::default();
    match &spec.mode {
        SampleMode::Greedy => {
            out.token = argmax(logits);
            if spec.logprobs.is_some() {
                fill_logprobs(&mut out, &log_softmax(logits), spec.logprobs);
            }
        }
        SampleMode::Sample(r) => {
            let mut l = logits.to_vec();
            apply_processing(&mut l, r);
            let t = r.params.temperature;
            if t <= 0.0 {
                out.token = argmax(&l);
                if spec.logprobs.is_some() {
                    fill_logprobs(&mut out, &log_softmax(&l), spec.logprobs);
                }
                return out;
            }
            for x in l.iter_mut() {
                *x /= t;
            }
            let lp = log_softmax(&l);
            let keep = kept_mask(&l, &lp, r);
            let mut best = argmax(&l);
            let mut bv = f32::NEG_INFINITY;
            for (i, (&x, &k)) in l.iter().zip(&keep).enumerate() {
                if k {
                    let s = x + gumbel(r.seed, i as u32);
                    if s > bv {
                        bv = s;
                        best = i as u32;
                    }
                }
            }
            out.token = best;
            fill_logprobs(&mut out, &lp, spec.logprobs);
        }
        SampleMode::Candidates { k, processing: r } => {
            let mut l = logits.to_vec();
            apply_processing(&mut l, r);
            let t = r.params.temperature;
            if t > 0.0 {
                for x in l.iter_mut() {
                    *x /= t;
                }
            }
            let lp = log_softmax(&l);
            let keep = kept_mask(&l, &lp, r);
            let z: f64 = lp
                .iter()
                .zip(&keep)
                .filter(|(_, &k)| k)
                .map(|(&x, _)| (x as f64).exp())
                .sum();
            let lz = z.ln() as f32;
            let mut cands = top_n(&l, (*k).max(1) as usize, |i| keep[i]);
            for c in cands.iter_mut() {
                c.logprob = lp[c.token as usize] - lz;
            }
            cands.truncate(*k as usize);
            out.token = cands.first().map(|c| c.token).unwrap_or_else(|| argmax(&l));
            out.candidates = cands;
            fill_logprobs(&mut out, &lp, spec.logprobs);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use minisgl_plugin_sdk::SamplingParams;

    fn resolved(params: SamplingParams, seed: u64) -> ResolvedSampling {
        ResolvedSampling {
            params,
            seed,
            logit_bias: vec![],
            allowed_tokens: None,
            prompt_tokens: vec![],
            output_tokens: vec![],
        }
    }

    #[test]
    fn greedy_and_ties() {
        let s = SampleSpec {
            mode: SampleMode::Greedy,
            logprobs: Some(2),
        };
        let o = sample_row(&[1.0, 3.0, 3.0, 0.0], &s);
        assert_eq!(o.token, 1);
        assert_eq!(o.top_logprobs[0].token, 1);
        assert_eq!(o.top_logprobs[1].token, 2);
    }

    #[test]
    fn sampling_frequencies_match_softmax() {
        // Exactness: empirical frequencies over many seeds approach softmax(l / T).
        let logits = [0.0f32, 1.0, 2.0, -1.0];
        let t = 0.7;
        let n = 40_000;
        let mut counts = [0usize; 4];
        for seed in 0..n {
            let spec = SampleSpec {
                mode: SampleMode::Sample(resolved(
                    SamplingParams {
                        temperature: t,
                        ..Default::default()
                    },
                    splitmix64(seed),
                )),
                logprobs: None,
            };
            counts[sample_row(&logits, &spec).token as usize] += 1;
        }
        let scaled: Vec<f32> = logits.iter().map(|x| x / t).collect();
        let p: Vec<f32> = log_softmax(&scaled).iter().map(|x| x.exp()).collect();
        for i in 0..4 {
            let f = counts[i] as f32 / n as f32;
            assert!((f - p[i]).abs() < 0.01, "token {i}: {f} vs {}", p[i]);
        }
    }

    #[test]
    fn truncation_rules() {
        let l = [3.0f32, 2.0, 1.0, 0.0];
        let lp = log_softmax(&l);
        let r = resolved(
            SamplingParams {
                top_k: 2,
                ..Default::default()
            },
            0,
        );
        assert_eq!(kept_mask(&l, &lp, &r), vec![true, true, false, false]);
        let r = resolved(
            SamplingParams {
                top_p: 0.5,
                ..Default::default()
            },
            0,
        );
        // p ≈ [0.64, 0.24, 0.09, 0.03]: only the first has mass-above < 0.5.
        assert_eq!(kept_mask(&l, &lp, &r), vec![true, false, false, false]);
        let r = resolved(
            SamplingParams {
                top_p: 0.7,
                ..Default::default()
            },
            0,
        );
        assert_eq!(kept_mask(&l, &lp, &r), vec![true, true, false, false]);
        let r = resolved(
            SamplingParams {
                min_p: 0.2,
                ..Default::default()
            },
            0,
        );
        // p[t]/pmax = [1, 0.37, 0.14, 0.05]
        assert_eq!(kept_mask(&l, &lp, &r), vec![true, true, false, false]);
    }

    #[test]
    fn penalties_bias_and_allowed() {
        let mut l = vec![1.0f32, -1.0, 2.0, 0.5];
        let mut r = resolved(
            SamplingParams {
                repetition_penalty: 2.0,
                frequency_penalty: 0.5,
                presence_penalty: 0.25,
                ..Default::default()
            },
            0,
        );
        r.prompt_tokens = vec![0];
        r.output_tokens = vec![1, 1];
        r.logit_bias = vec![minisgl_plugin_sdk::TokenBias {
            token: 3,
            bias: 1.0,
        }];
        r.allowed_tokens = Some(vec![0, 1, 3]);
        apply_processing(&mut l, &r);
        assert_eq!(l[0], 0.5);
        assert_eq!(l[1], -2.0 - 1.0 - 0.25);
        assert_eq!(l[2], f32::NEG_INFINITY);
        assert_eq!(l[3], 1.5);
    }

    #[test]
    fn candidates_are_renormalised() {
        let spec = SampleSpec {
            mode: SampleMode::Candidates {
                k: 2,
                processing: resolved(
                    SamplingParams {
                        top_k: 2,
                        ..Default::default()
                    },
                    1,
                ),
            },
            logprobs: None,
        };
        let o = sample_row(&[0.0, 1.0, 0.0, 1.0f32.ln() + 1.0], &spec);
        assert_eq!(o.candidates.len(), 2);
        assert_eq!(o.token, 1);
        let s: f32 = o.candidates.iter().map(|c| c.logprob.exp()).sum();
        assert!((s - 1.0).abs() < 1e-5);
    }
}
