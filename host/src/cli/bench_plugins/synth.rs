//! Seeded synthetic plugin inputs, shaped like the engine's: used by
//! `minisgl-host bench plugins` and by the Wasm-vs-native equivalence tests
//! (which include this file through `host/tests/support/plugin.rs`, so it
//! names nothing of the binary).
//!
//! The views are consistent the way the engine's are: ids are unique,
//! waiting requests are in arrival order, prefix hits are page aligned and
//! shorter than the prompt, pages held match the tokens computed, and running
//! requests have their whole input computed.

use std::path::PathBuf;

use minisgl_plugin_sdk::{
    Budget, CacheLeaf, Candidate, CandidateList, RequestView, SampleRequest, SamplingParams,
    TokenBias,
};
use rand::seq::{IndexedRandom, SliceRandom};
use rand::Rng;

/// One `schedule` call's arguments.
#[derive(Clone, Debug)]
pub struct ScheduleInput {
    pub waiting: Vec<RequestView>,
    pub running: Vec<RequestView>,
    pub budget: Budget,
}

/// Scheduler arguments with `batch` waiting and `batch` running requests
/// (`exact = false`: each count uniform in `0..=batch`).
pub fn schedule_input(rng: &mut impl Rng, batch: usize, exact: bool) -> ScheduleInput {
    let page_size = *[1u32, 4, 16, 64].choose(rng).unwrap_or(&16);
    let n_wait = if exact {
        batch
    } else {
        rng.random_range(0..=batch)
    };
    let n_run = if exact {
        batch
    } else {
        rng.random_range(0..=batch)
    };
    let mut ids: Vec<u64> = (0..(n_wait + n_run) as u64)
        .map(|i| i * 7919 + rng.random_range(0..7919))
        .collect();
    ids.shuffle(rng);
    let now: u64 = 10_000_000 + rng.random_range(0..1_000_000);
    let pages = |tokens: u32| tokens.div_ceil(page_size);

    let mut arrivals: Vec<u64> = (0..n_wait).map(|_| rng.random_range(0..now)).collect();
    arrivals.sort_unstable();
    let waiting = arrivals
        .iter()
        .zip(&ids)
        .map(|(&arrival_us, &id)| {
            let prompt_len = rng.random_range(1..=4096u32);
            // Page-aligned cached prefix, always leaving >= 1 token to compute.
            let prefix_hit_len = if rng.random_bool(0.3) {
                rng.random_range(0..=(prompt_len - 1) / page_size) * page_size
            } else {
                0
            };
            let (computed_len, pages_held) =
                if prompt_len > prefix_hit_len.max(1) && rng.random_bool(0.2) {
                    // Partially prefilled: earlier chunks ran.
                    let c = rng.random_range(prefix_hit_len.max(1)..prompt_len);
                    (c, pages(c))
                } else if prefix_hit_len > 0 && rng.random_bool(0.5) {
                    // Prefix matched and locked, nothing computed yet.
                    (0, pages(prefix_hit_len))
                } else {
                    (0, 0)
                };
            let generated_len = if rng.random_bool(0.1) {
                rng.random_range(0..64)
            } else {
                0
            };
            RequestView {
                id,
                arrival_us,
                prompt_len,
                prefix_hit_len,
                computed_len,
                generated_len,
                max_new_tokens: rng.random_range(1..=2048),
                priority: rng.random_range(-2..=2),
                client_id: rng.random_range(0..8),
                deadline_us: rng
                    .random_bool(0.3)
                    .then(|| now + rng.random_range(0..5_000_000)),
                pages_held,
                last_scheduled_us: arrival_us,
            }
        })
        .collect::<Vec<_>>();
    let running = ids[n_wait..]
        .iter()
        .map(|&id| {
            let prompt_len = rng.random_range(1..=4096u32);
            let max_new_tokens = rng.random_range(1..=2048);
            let generated_len = rng.random_range(1..=max_new_tokens);
            let computed_len = prompt_len + generated_len - 1;
            let arrival_us = rng.random_range(0..now);
            RequestView {
                id,
                arrival_us,
                prompt_len,
                prefix_hit_len: 0,
                computed_len,
                generated_len,
                max_new_tokens,
                priority: rng.random_range(-2..=2),
                client_id: rng.random_range(0..8),
                deadline_us: None,
                pages_held: pages(computed_len),
                last_scheduled_us: now - rng.random_range(0..1000),
            }
        })
        .collect::<Vec<_>>();
    let demand: u32 =
        waiting.iter().map(|r| pages(r.prompt_len)).sum::<u32>() + running.len() as u32;
    let budget = Budget {
        max_prefill_tokens: *[0u32, 1, 64, 512, 2048, 8192, 16384]
            .choose(rng)
            .unwrap_or(&2048),
        max_running: rng.random_range(1..=(2 * batch as u32).max(1)),
        // A quarter of the steps run nearly out of memory (preemption).
        free_pages: if rng.random_bool(0.25) {
            rng.random_range(0..=n_run as u32 / 2)
        } else {
            rng.random_range(0..=demand + 8)
        },
        evictable_pages: if rng.random_bool(0.5) {
            rng.random_range(0..=demand / 4 + 1)
        } else {
            0
        },
        page_size,
        now_us: now,
        step: rng.random_range(0..1_000_000),
    };
    ScheduleInput {
        waiting,
        running,
        budget,
    }
}

/// `n` evictable leaves (`exact = false`: uniform in `0..=n`) and a page need
/// between 0 and a little over what they hold. Access times collide often,
/// so tie-breaking is exercised.
pub fn evict_input(rng: &mut impl Rng, n: usize, exact: bool) -> (Vec<CacheLeaf>, u32) {
    let count = if exact { n } else { rng.random_range(0..=n) };
    let coarse = rng.random_bool(0.5);
    let mut nodes: Vec<u64> = (1..=count as u64 * 3).collect();
    nodes.shuffle(rng);
    let leaves: Vec<CacheLeaf> = nodes[..count]
        .iter()
        .map(|&node| {
            let created_us = rng.random_range(0..1_000_000);
            let last = if coarse {
                rng.random_range(0..10) * 1000
            } else {
                created_us + rng.random_range(0..1_000_000)
            };
            let tokens = rng.random_range(1..=512);
            CacheLeaf {
                node,
                depth: tokens + rng.random_range(0..2048),
                tokens,
                pages: tokens.div_ceil(16),
                last_access_us: last,
                hit_count: rng.random_range(0..50),
                created_us,
                priority: rng.random_range(-2..=2),
            }
        })
        .collect();
    let total: u32 = leaves.iter().map(|l| l.pages).sum();
    let needed = rng.random_range(0..=total + 4);
    (leaves, needed)
}

/// A value from `range` with probability `p`, else 0.
fn sometimes(rng: &mut impl Rng, p: f64, range: std::ops::RangeInclusive<f32>) -> f32 {
    if rng.random_bool(p) {
        rng.random_range(range)
    } else {
        0.0
    }
}

/// Sampling parameters within the host's accepted ranges.
pub fn sampling_params(rng: &mut impl Rng) -> SamplingParams {
    SamplingParams {
        temperature: if rng.random_bool(0.2) {
            0.0
        } else {
            rng.random_range(0.05..2.0)
        },
        top_k: if rng.random_bool(0.5) {
            rng.random_range(-1..100)
        } else {
            0
        },
        top_p: if rng.random_bool(0.5) {
            rng.random_range(0.05..=1.0)
        } else {
            1.0
        },
        min_p: sometimes(rng, 0.3, 0.0..=0.5),
        presence_penalty: sometimes(rng, 0.3, -2.0..=2.0),
        frequency_penalty: sometimes(rng, 0.3, -2.0..=2.0),
        repetition_penalty: if rng.random_bool(0.3) {
            rng.random_range(0.5..2.0)
        } else {
            1.0
        },
        seed: rng.random_bool(0.5).then(|| rng.random()),
    }
}

/// `n` sample requests (`exact = false`: uniform in `0..=n`) for a
/// vocabulary of `vocab` tokens.
pub fn sample_input(rng: &mut impl Rng, n: usize, exact: bool, vocab: u32) -> Vec<SampleRequest> {
    let count = if exact { n } else { rng.random_range(0..=n) };
    (0..count as u64)
        .map(|i| {
            let bias_len = if rng.random_bool(0.3) {
                rng.random_range(1..8)
            } else {
                0
            };
            SampleRequest {
                id: i * 31 + 5,
                params: sampling_params(rng),
                logit_bias: (0..bias_len)
                    .map(|_| TokenBias {
                        token: rng.random_range(0..vocab),
                        bias: rng.random_range(-100.0..=100.0),
                    })
                    .collect(),
                generated_len: rng.random_range(0..4096),
                prompt_len: rng.random_range(1..8192),
                entropy: rng.random(),
            }
        })
        .collect()
}

/// `n` candidate lists (`exact = false`: uniform in `0..=n`) of 1-64
/// candidates, most likely first, as `pick` receives them.
pub fn candidate_input(
    rng: &mut impl Rng,
    n: usize,
    exact: bool,
    vocab: u32,
) -> Vec<CandidateList> {
    let count = if exact { n } else { rng.random_range(0..=n) };
    (0..count as u64)
        .map(|id| {
            let k = rng.random_range(1..=64);
            let mut logits: Vec<f32> = (0..k).map(|_| rng.random_range(-12.0..0.0)).collect();
            logits.sort_unstable_by(|a, b| b.total_cmp(a));
            let norm = logits.iter().map(|l| l.exp()).sum::<f32>().ln();
            let k = k.min(vocab as usize);
            let tokens = rand::seq::index::sample(rng, vocab as usize, k);
            CandidateList {
                id,
                seed: rng.random(),
                candidates: logits
                    .iter()
                    .zip(tokens.iter())
                    .map(|(l, token)| Candidate {
                        token: token as u32,
                        logprob: l - norm,
                    })
                    .collect(),
            }
        })
        .collect()
}

/// Where `scripts/build-plugins.sh` puts the component of crate `crate_name`
/// (`MINISGL_PLUGIN_DIR` overrides the folder). The error says how to build it.
pub fn built_plugin(crate_name: &str) -> Result<PathBuf, String> {
    let dir = std::env::var_os("MINISGL_PLUGIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/wasm32-wasip2/plugin")
        });
    let path = dir.join(format!("{}.wasm", crate_name.replace('-', "_")));
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "{} is missing: run scripts/build-plugins.sh to build the Wasm plugins",
            path.display()
        ))
    }
}
