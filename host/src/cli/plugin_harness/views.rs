//! Inputs for the plugin harness: seeded synthetic views, and a JSON-lines
//! format for recorded ones (`minisgl-host plugin gen` writes it, so a case
//! that broke a plugin can be saved, edited and replayed).
//!
//! The synthetic views are shaped like the host's: ids are sparse and, in a
//! third of the cases, close to 2^53 (still exact as JavaScript Numbers, which
//! is how jco's QuickJS backend passes u64), prefix hits are page aligned and leave at least one token to
//! compute, running requests hold the pages their tokens fill, and one budget
//! in four is tight enough to force preemption.

use minisgl_plugin_sdk::{
    Budget, CacheLeaf, Candidate, CandidateList, RequestView, SampleRequest, SamplingParams,
    TokenBias,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// One call to make, for any plugin kind, in the SDK's own records (their
/// JSON form is the SDK's `serde` feature: field names as in `plugin-sdk`,
/// missing fields defaulted).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Case {
    Schedule {
        waiting: Vec<RequestView>,
        running: Vec<RequestView>,
        budget: Budget,
    },
    Evict {
        leaves: Vec<CacheLeaf>,
        pages_needed: u32,
    },
    /// `plan` over `requests`, then `pick` over `lists`.
    Sample {
        requests: Vec<SampleRequest>,
        vocab_size: u32,
        lists: Vec<CandidateList>,
    },
}

/// Views in a case (the larger of waiting and running; leaves; requests).
pub fn size(case: &Case) -> usize {
    match case {
        Case::Schedule {
            waiting, running, ..
        } => waiting.len().max(running.len()),
        Case::Evict { leaves, .. } => leaves.len(),
        Case::Sample { requests, .. } => requests.len(),
    }
}

/// How big the generated calls are.
#[derive(Clone, Copy, Debug)]
pub enum Size {
    /// Mostly small, sometimes up to 512 entries (checking and diffing).
    Varied,
    /// Exactly `n` waiting and `n` running views (`n` leaves, `n` requests).
    Batch(usize),
}

/// The `i`-th synthetic case of `kind` for `seed`: the same triple always
/// gives the same case, whatever was generated before it.
pub fn synthetic(kind: minisgl::plugin::PluginKind, seed: u64, i: u64, size: Size) -> Case {
    use minisgl::plugin::PluginKind;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let n = match size {
        Size::Batch(n) => n,
        Size::Varied if rng.random_bool(0.1) => rng.random_range(0..=512),
        Size::Varied => rng.random_range(0..=24),
    };
    match kind {
        PluginKind::Scheduler => schedule_case(&mut rng, n, size),
        PluginKind::Evictor => evict_case(&mut rng, n),
        PluginKind::Sampler => sample_case(&mut rng, n),
    }
}

fn schedule_case(rng: &mut ChaCha8Rng, n: usize, size: Size) -> Case {
    let (n_wait, n_run) = match size {
        Size::Batch(n) => (n, n),
        Size::Varied => (rng.random_range(0..=n), rng.random_range(0..=n)),
    };
    let page_size = [1u32, 4, 16, 16, 64][rng.random_range(0..5)];
    // Ids are counters in the host (from 1), but a plugin must not assume
    // they are small: a third of the cases start near 2^53, the largest range
    // a JavaScript Number (jco's QuickJS mapping of u64) holds exactly.
    let mut next_id: u64 = if rng.random_bool(0.3) {
        (1 << 53) - 1_000_000 + rng.random_range(0..1000)
    } else {
        1
    };
    let mut now: u64 = rng.random_range(0..1_000_000);
    let mut view = |rng: &mut ChaCha8Rng, running: bool| {
        next_id += rng.random_range(1..1000);
        now += rng.random_range(0..5_000);
        let generated: u32 = if running || rng.random_bool(0.1) {
            rng.random_range(1..512)
        } else {
            0
        };
        let longest = if rng.random_bool(0.05) { 32_768 } else { 2_048 };
        let prompt = rng.random_range(1..=longest) + generated;
        let hit = if rng.random_bool(0.4) {
            rng.random_range(0..prompt) / page_size * page_size
        } else {
            0
        };
        let computed = if running {
            prompt
        } else if rng.random_bool(0.25) && prompt - hit > 1 {
            rng.random_range(hit.max(1)..prompt)
        } else {
            0
        };
        let held_tokens = if computed == 0 && rng.random_bool(0.5) {
            0
        } else {
            computed.max(hit)
        };
        RequestView {
            id: next_id,
            arrival_us: now,
            prompt_len: prompt,
            prefix_hit_len: hit,
            computed_len: computed,
            generated_len: generated,
            max_new_tokens: generated + rng.random_range(1..=2_048),
            priority: rng.random_range(-2..=2),
            client_id: rng.random_range(0..=4),
            deadline_us: rng
                .random_bool(0.2)
                .then(|| now + rng.random_range(0..10_000_000)),
            pages_held: held_tokens.div_ceil(page_size),
            last_scheduled_us: now,
        }
    };
    // Running requests started before the waiting ones arrived.
    let running: Vec<RequestView> = (0..n_run).map(|_| view(rng, true)).collect();
    let waiting: Vec<RequestView> = (0..n_wait).map(|_| view(rng, false)).collect();
    let tight = rng.random_bool(0.25);
    let budget = Budget {
        max_prefill_tokens: if rng.random_bool(0.1) {
            rng.random_range(0..=64)
        } else {
            rng.random_range(256..=16_384)
        },
        max_running: (n_run as u32 + rng.random_range(0..=32))
            .saturating_sub(rng.random_range(0..=4)),
        free_pages: if tight {
            rng.random_range(0..=n_run as u32 + 2)
        } else {
            rng.random_range(0..=100_000)
        },
        evictable_pages: if tight {
            rng.random_range(0..=2)
        } else {
            rng.random_range(0..=10_000)
        },
        page_size,
        now_us: now + rng.random_range(0..1_000),
        step: rng.random_range(0..1_000_000),
    };
    Case::Schedule {
        waiting,
        running,
        budget,
    }
}

fn evict_case(rng: &mut ChaCha8Rng, n: usize) -> Case {
    let mut node = rng.random_range(1..1000u64);
    let leaves: Vec<CacheLeaf> = (0..n)
        .map(|_| {
            node += rng.random_range(1..100);
            let tokens = rng.random_range(1..=512);
            let created = rng.random_range(0..1_000_000);
            CacheLeaf {
                node,
                depth: tokens + rng.random_range(0..4_096),
                tokens,
                pages: tokens.div_ceil(16),
                last_access_us: created + rng.random_range(0..1_000_000),
                hit_count: rng.random_range(0..6),
                created_us: created,
                priority: rng.random_range(-2..=2),
            }
        })
        .collect();
    let total: u32 = leaves.iter().map(|l| l.pages).sum();
    let pages_needed = rng.random_range(0..=total + 8);
    Case::Evict {
        leaves,
        pages_needed,
    }
}

fn sample_case(rng: &mut ChaCha8Rng, n: usize) -> Case {
    let vocab_size = rng.random_range(1_000..=200_000);
    let mut id = rng.random_range(1..1000u64);
    let requests: Vec<SampleRequest> = (0..n)
        .map(|_| {
            id += rng.random_range(1..50);
            SampleRequest {
                id,
                params: SamplingParams {
                    temperature: [0.0, 0.7, 1.0, 1.5][rng.random_range(0..4)],
                    top_k: [0, -1, 1, 40][rng.random_range(0..4)],
                    top_p: [1.0, 0.9, 0.5][rng.random_range(0..3)],
                    min_p: [0.0, 0.05][rng.random_range(0..2)],
                    presence_penalty: [0.0, 0.5, -0.5][rng.random_range(0..3)],
                    frequency_penalty: [0.0, 0.3][rng.random_range(0..2)],
                    repetition_penalty: [1.0, 1.1][rng.random_range(0..2)],
                    seed: if rng.random_bool(0.5) {
                        Some(rng.random())
                    } else {
                        None
                    },
                },
                logit_bias: (0..rng.random_range(0..4))
                    .map(|_| TokenBias {
                        token: rng.random_range(0..vocab_size),
                        bias: rng.random_range(-100.0..=100.0),
                    })
                    .collect(),
                generated_len: rng.random_range(0..1_000),
                prompt_len: rng.random_range(1..4_000),
                entropy: rng.random(),
            }
        })
        .collect();
    let lists = requests
        .iter()
        .map(|r| {
            let k = rng.random_range(1..=64);
            let mut logprob = 0.0f32;
            CandidateList {
                id: r.id,
                seed: rng.random(),
                candidates: (0..k)
                    .map(|_| {
                        logprob -= rng.random_range(0.0..2.0);
                        Candidate {
                            token: rng.random_range(0..vocab_size),
                            logprob,
                        }
                    })
                    .collect(),
            }
        })
        .collect();
    Case::Sample {
        requests,
        vocab_size,
        lists,
    }
}

/// Reads JSON-lines cases (blank lines and lines starting with `#` skipped).
pub fn read_jsonl(path: &std::path::Path) -> anyhow::Result<Vec<Case>> {
    use anyhow::Context;
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading views from {}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .map(|(i, l)| {
            serde_json::from_str(l)
                .with_context(|| format!("{}:{}: not a case: {l:.120}", path.display(), i + 1))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use minisgl::plugin::PluginKind;

    #[test]
    fn cases_survive_a_json_round_trip() {
        for kind in [
            PluginKind::Scheduler,
            PluginKind::Evictor,
            PluginKind::Sampler,
        ] {
            for i in 0..40 {
                let case = synthetic(kind, 7, i, Size::Varied);
                let line = serde_json::to_string(&case).unwrap();
                let back: Case = serde_json::from_str(&line).unwrap();
                assert_eq!(back, case, "{kind:?} case {i}: {line:.200}");
            }
        }
    }

    #[test]
    fn hand_written_cases_default_what_they_leave_out() {
        let line = r#"{"schedule":{"waiting":[{"id":3,"prompt_len":10,"max_new_tokens":4}],
            "running":[],"budget":{"max_prefill_tokens":64,"max_running":8,"free_pages":100,"page_size":16}}}"#;
        let Case::Schedule {
            waiting, budget, ..
        } = serde_json::from_str(line).unwrap()
        else {
            panic!("not a schedule case");
        };
        assert_eq!(
            (waiting[0].id, waiting[0].prompt_len, waiting[0].deadline_us),
            (3, 10, None)
        );
        assert_eq!((budget.page_size, budget.evictable_pages), (16, 0));
        let line = r#"{"sample":{"vocab_size":100,
            "requests":[{"id":1,"temperature":0.5,"logit_bias":[[7,-1.5]]}],
            "lists":[{"id":1,"seed":9,"candidates":[[7,-0.1],[8,-2.0]]}]}}"#;
        let Case::Sample {
            requests, lists, ..
        } = serde_json::from_str(line).unwrap()
        else {
            panic!("not a sample case");
        };
        assert_eq!(requests[0].params.temperature, 0.5);
        assert_eq!(
            requests[0].params.top_p, 1.0,
            "unset parameters keep OpenAI's defaults"
        );
        assert_eq!(
            requests[0].logit_bias[0],
            TokenBias {
                token: 7,
                bias: -1.5
            }
        );
        assert_eq!(
            lists[0].candidates[1],
            Candidate {
                token: 8,
                logprob: -2.0
            }
        );
    }
}
