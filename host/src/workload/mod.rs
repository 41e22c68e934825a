//! Workloads to replay: public traces (Mooncake, Azure) and synthetic
//! generators, as requests with arrival times. Prompts are token ids, so no
//! tokenizer is needed, and every generator is deterministic for its seed.
//!
//! * [`trace`]: Mooncake `.jsonl` (shared prefixes rebuilt token-exact from
//!   `hash_ids`) and Azure `.csv`.
//! * [`synth`]: Poisson, bursty, shared-prefix groups, multi-tenant clients
//!   with priorities; optional deadlines.
//! * [`random_requests`]: a batch without arrival times, half of it sharing a
//!   prefix, for checking the engine's output (its tests and `gpu-check`).

pub mod synth;
pub mod trace;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::request::GenerateRequest;

/// A request and when it arrives, in microseconds from the start.
#[derive(Clone, Debug)]
pub struct TimedRequest {
    pub at_us: u64,
    pub request: GenerateRequest,
}

impl TimedRequest {
    /// A greedy request that ignores EOS (every request generates exactly
    /// `output_len` tokens, as in SGLang's and vLLM's serving benchmarks).
    pub fn new(at_s: f64, prompt: Vec<u32>, output_len: u32) -> TimedRequest {
        let mut request = GenerateRequest::greedy(prompt, output_len.max(1));
        request.ignore_eos = true;
        TimedRequest {
            at_us: (at_s.max(0.0) * 1e6).round() as u64,
            request,
        }
    }
}

/// Random token ids below `vocab`, avoiding the lowest ids (usually special
/// tokens).
pub fn random_tokens(rng: &mut ChaCha8Rng, n: usize, vocab: u32) -> Vec<u32> {
    let lo = 16.min(vocab.saturating_sub(1));
    (0..n).map(|_| rng.random_range(lo..vocab)).collect()
}

/// Keeps every request within `max_context` tokens (prompt + output): the
/// output is cut to half the context at most, then the prompt to what is left.
pub fn fit_context(reqs: &mut [TimedRequest], max_context: u32) {
    let ctx = max_context as usize;
    for r in reqs {
        let out = (r.request.max_new_tokens as usize).min(ctx / 2).max(1);
        r.request
            .prompt_tokens
            .truncate(ctx.saturating_sub(out).max(1));
        r.request.max_new_tokens = out as u32;
    }
}

/// Gives trace requests (which carry no tenant) `clients` client ids and
/// priorities, so fairness and priority policies have something to act on.
/// Demand is skewed as in the multi-tenant generator: client `c` gets a share
/// of the requests proportional to `c + 1` (the last one is the heavy
/// hitter), and priority `c % 3`. Deterministic (a hash of the request index
/// and the seed); `clients <= 1` leaves everything at 0.
pub fn assign_tenants(reqs: &mut [TimedRequest], clients: u64, seed: u64) {
    if clients <= 1 {
        return;
    }
    let total = clients * (clients + 1) / 2;
    for (i, r) in reqs.iter_mut().enumerate() {
        let h = (i as u64 ^ seed.rotate_left(17))
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(29);
        let mut x = h % total;
        let mut c = 0;
        while x > c {
            x -= c + 1;
            c += 1;
        }
        r.request.client_id = c;
        r.request.priority = (c % 3) as i32;
    }
}

/// Random greedy requests for engine checks (tests and `gpu-check`): prompts
/// of up to 63 tokens, half of them behind a shared 24-token prefix (radix
/// hits), asking for 1..`max_new` tokens; deterministic for a seed.
pub fn random_requests(
    seed: u64,
    n: usize,
    max_new: u32,
    vocab: u32,
    logprobs: Option<u32>,
) -> Vec<GenerateRequest> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let shared: Vec<u32> = (0..24).map(|_| rng.random_range(0..vocab)).collect();
    (0..n)
        .map(|_| {
            let mut prompt = if rng.random_bool(0.5) {
                shared.clone()
            } else {
                Vec::new()
            };
            let len = rng.random_range(1..40);
            prompt.extend((0..len).map(|_| rng.random_range(0..vocab)));
            let mut r = GenerateRequest::greedy(prompt, rng.random_range(1..max_new));
            r.logprobs = logprobs;
            r
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenants_are_skewed_and_deterministic() {
        let mut a: Vec<TimedRequest> = (0..4000)
            .map(|i| TimedRequest::new(i as f64, vec![20], 1))
            .collect();
        assign_tenants(&mut a, 4, 1);
        let mut n = [0usize; 4];
        for r in &a {
            n[r.request.client_id as usize] += 1;
            assert_eq!(r.request.priority, (r.request.client_id % 3) as i32);
        }
        // Shares 1:2:3:4 of 4000, give or take.
        for (c, &k) in n.iter().enumerate() {
            let want = 400 * (c + 1);
            assert!(k.abs_diff(want) < want / 4, "{n:?}");
        }
        let mut b = a.clone();
        assign_tenants(&mut b, 4, 1);
        assert!(a
            .iter()
            .zip(&b)
            .all(|(x, y)| x.request.client_id == y.request.client_id));
    }
}
