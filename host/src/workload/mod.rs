//! Workloads to replay: public traces (Mooncake, Azure) and synthetic
//! generators, as requests with arrival times. Prompts are token ids, so no
//! tokenizer is needed, and every generator is deterministic for its seed.
//!
//! * [`trace`]: Mooncake `.jsonl` (shared prefixes rebuilt token-exact from
//!   `hash_ids`) and Azure `.csv`.
//! * [`synth`]: Poisson, bursty, shared-prefix groups, multi-tenant clients
//!   with priorities; optional deadlines.

pub mod synth;
pub mod trace;

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::engine::GenerateRequest;

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
/// priorities, so fairness and priority policies have something to act on:
/// request `i` goes to client `hash(i, seed) % clients` with priority
/// `client % 3`. Deterministic; `clients <= 1` leaves everything at 0.
pub fn assign_tenants(reqs: &mut [TimedRequest], clients: u64, seed: u64) {
    if clients <= 1 {
        return;
    }
    for (i, r) in reqs.iter_mut().enumerate() {
        let h = (i as u64 ^ seed.rotate_left(17))
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(29);
        let c = h % clients;
        r.request.client_id = c;
        r.request.priority = (c % 3) as i32;
    }
}
