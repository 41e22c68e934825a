//! Synthetic workloads, deterministic for a seed.
//!
//! * `poisson`: exponential gaps at `rate` requests per second;
//! * `bursty`: an on/off process: bursts at `burst_factor` × `rate` for
//!   `burst_s` seconds, then silence, so the mean rate is still `rate`;
//! * `shared-prefix`: Poisson arrivals, each prompt starts with one of
//!   `groups` shared system prompts of `prefix_len` tokens (chosen with a
//!   skewed, Zipf-like popularity so eviction policies differ);
//! * `multi-tenant`: `clients` clients; client `c` sends at a rate
//!   proportional to `c + 1` (one heavy hitter, several light ones) and with
//!   priority `c % 3`, so fairness and priority policies have work to do.
//!
//! Every kind takes `deadline_ms` (a relative deadline on every request).

use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{random_tokens, TimedRequest};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SynthKind {
    Poisson,
    Bursty,
    SharedPrefix,
    MultiTenant,
}

/// A synthetic workload's parameters.
#[derive(Clone, Debug)]
pub struct SynthSpec {
    pub kind: SynthKind,
    pub num_requests: usize,
    /// Mean arrival rate, requests per second.
    pub rate: f64,
    /// Prompt and output lengths, uniform in these inclusive ranges.
    pub input_len: (u32, u32),
    pub output_len: (u32, u32),
    pub groups: usize,
    pub prefix_len: u32,
    pub clients: usize,
    pub burst_factor: f64,
    pub burst_s: f64,
    pub deadline_ms: Option<u64>,
    pub vocab: u32,
    pub seed: u64,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SynthError {
    #[error("{field} must be {what}, got {value}")]
    Field {
        field: &'static str,
        what: &'static str,
        value: String,
    },
}

fn field(field: &'static str, what: &'static str, value: impl ToString) -> SynthError {
    SynthError::Field {
        field,
        what,
        value: value.to_string(),
    }
}

fn exp_gap(rng: &mut ChaCha8Rng, rate: f64) -> f64 {
    let u: f64 = rng.random_range(f64::EPSILON..1.0);
    -u.ln() / rate
}

/// Generates the workload.
pub fn generate(s: &SynthSpec) -> Result<Vec<TimedRequest>, SynthError> {
    if !(s.rate > 0.0 && s.rate.is_finite()) {
        return Err(field("rate", "a positive number", s.rate));
    }
    if s.input_len.0 == 0 || s.input_len.0 > s.input_len.1 {
        return Err(field(
            "input_len",
            "MIN:MAX with 1 <= MIN <= MAX",
            format!("{}:{}", s.input_len.0, s.input_len.1),
        ));
    }
    if s.output_len.0 == 0 || s.output_len.0 > s.output_len.1 {
        return Err(field(
            "output_len",
            "MIN:MAX with 1 <= MIN <= MAX",
            format!("{}:{}", s.output_len.0, s.output_len.1),
        ));
    }
    if s.kind == SynthKind::SharedPrefix && s.groups == 0 {
        return Err(field("groups", "at least 1", 0));
    }
    if s.kind == SynthKind::MultiTenant && s.clients == 0 {
        return Err(field("clients", "at least 1", 0));
    }
    if s.kind == SynthKind::Bursty && !(s.burst_factor >= 1.0 && s.burst_s > 0.0) {
        return Err(field(
            "burst_factor, burst_s",
            "at least 1 and positive",
            format!("{}, {}", s.burst_factor, s.burst_s),
        ));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(s.seed);
    let prefixes: Vec<Vec<u32>> = (0..s.groups.max(1))
        .map(|_| random_tokens(&mut rng, s.prefix_len as usize, s.vocab))
        .collect();
    // Zipf-like weights 1/(g+1) for the shared-prefix groups.
    let zipf: Vec<f64> = (0..prefixes.len())
        .map(|g| 1.0 / (g as f64 + 1.0))
        .collect();
    let zipf_sum: f64 = zipf.iter().sum();
    let client_weights: Vec<f64> = (0..s.clients.max(1)).map(|c| c as f64 + 1.0).collect();
    let client_sum: f64 = client_weights.iter().sum();
    let pick = |rng: &mut ChaCha8Rng, w: &[f64], sum: f64| {
        let mut x = rng.random_range(0.0..sum);
        for (i, wi) in w.iter().enumerate() {
            if x < *wi {
                return i;
            }
            x -= wi;
        }
        w.len() - 1
    };
    let mut out = Vec::with_capacity(s.num_requests);
    let mut t = 0.0f64;
    for _ in 0..s.num_requests {
        let at = t;
        t += match s.kind {
            SynthKind::Bursty => {
                // Arrivals at burst_factor × rate inside bursts; a gap that
                // crosses the end of a burst skips the following silence.
                let gap = exp_gap(&mut rng, s.rate * s.burst_factor);
                // On for burst_s of every burst_factor × burst_s: the mean
                // rate stays `rate`.
                let on = s.burst_s;
                let period = s.burst_s * s.burst_factor;
                let next = t + gap;
                let (k, r) = ((next / period).floor(), next % period);
                if r < on {
                    gap
                } else {
                    (k + 1.0) * period - t + (r - on)
                }
            }
            _ => exp_gap(&mut rng, s.rate),
        };
        let n_in = rng.random_range(s.input_len.0..=s.input_len.1) as usize;
        let n_out = rng.random_range(s.output_len.0..=s.output_len.1);
        let mut prompt = Vec::with_capacity(n_in);
        let (mut client, mut priority) = (0u64, 0i32);
        match s.kind {
            SynthKind::SharedPrefix => {
                prompt.extend_from_slice(&prefixes[pick(&mut rng, &zipf, zipf_sum)]);
            }
            SynthKind::MultiTenant => {
                let c = pick(&mut rng, &client_weights, client_sum);
                client = c as u64;
                priority = (c % 3) as i32;
            }
            _ => {}
        }
        prompt.extend(random_tokens(&mut rng, n_in, s.vocab));
        let mut r = TimedRequest::new(at, prompt, n_out);
        r.request.client_id = client;
        r.request.priority = priority;
        r.request.deadline = s.deadline_ms.map(Duration::from_millis);
        out.push(r);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: SynthKind) -> SynthSpec {
        SynthSpec {
            kind,
            num_requests: 200,
            rate: 10.0,
            input_len: (4, 8),
            output_len: (1, 4),
            groups: 4,
            prefix_len: 16,
            clients: 4,
            burst_factor: 4.0,
            burst_s: 1.0,
            deadline_ms: Some(500),
            vocab: 100,
            seed: 3,
        }
    }

    #[test]
    fn deterministic_and_shaped() {
        for kind in [
            SynthKind::Poisson,
            SynthKind::Bursty,
            SynthKind::SharedPrefix,
            SynthKind::MultiTenant,
        ] {
            let a = generate(&spec(kind)).unwrap();
            let b = generate(&spec(kind)).unwrap();
            assert_eq!(a.len(), 200);
            for (x, y) in a.iter().zip(&b) {
                assert_eq!(x.at_us, y.at_us);
                assert_eq!(x.request.prompt_tokens, y.request.prompt_tokens);
            }
            assert!(a.windows(2).all(|w| w[0].at_us <= w[1].at_us), "{kind:?}");
            // Mean rate within a factor of two of the asked 10/s.
            let span = a.last().unwrap().at_us as f64 / 1e6;
            assert!((10.0..40.0).contains(&span), "{kind:?}: {span}");
        }
        let sp = generate(&spec(SynthKind::SharedPrefix)).unwrap();
        assert!(sp.iter().all(|r| r.request.prompt_tokens.len() >= 20));
        let mt = generate(&spec(SynthKind::MultiTenant)).unwrap();
        let clients: std::collections::BTreeSet<u64> =
            mt.iter().map(|r| r.request.client_id).collect();
        assert_eq!(clients.len(), 4);
    }

    #[test]
    fn bad_fields_are_named() {
        let mut s = spec(SynthKind::Poisson);
        s.rate = 0.0;
        assert!(generate(&s).unwrap_err().to_string().contains("rate"));
    }
}
