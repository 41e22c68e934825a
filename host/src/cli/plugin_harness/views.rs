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

/// One call to make, for any plugin kind.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Case {
    Schedule {
        waiting: Vec<ViewJson>,
        running: Vec<ViewJson>,
        budget: BudgetJson,
    },
    Evict {
        leaves: Vec<LeafJson>,
        pages_needed: u32,
    },
    /// `plan` over `requests`, then `pick` over `lists`.
    Sample {
        requests: Vec<SampleJson>,
        vocab_size: u32,
        lists: Vec<ListJson>,
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
pub fn synthetic(kind: crate::plugin::PluginKind, seed: u64, i: u64, size: Size) -> Case {
    use crate::plugin::PluginKind;
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
        ViewJson {
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
    let running: Vec<ViewJson> = (0..n_run).map(|_| view(rng, true)).collect();
    let waiting: Vec<ViewJson> = (0..n_wait).map(|_| view(rng, false)).collect();
    let tight = rng.random_bool(0.25);
    let budget = BudgetJson {
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
    let leaves: Vec<LeafJson> = (0..n)
        .map(|_| {
            node += rng.random_range(1..100);
            let tokens = rng.random_range(1..=512);
            let created = rng.random_range(0..1_000_000);
            LeafJson {
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
    let requests: Vec<SampleJson> = (0..n)
        .map(|_| {
            id += rng.random_range(1..50);
            SampleJson {
                id,
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
                logit_bias: (0..rng.random_range(0..4))
                    .map(|_| {
                        (
                            rng.random_range(0..vocab_size),
                            rng.random_range(-100.0..=100.0),
                        )
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
            ListJson {
                id: r.id,
                seed: rng.random(),
                candidates: (0..k)
                    .map(|_| {
                        logprob -= rng.random_range(0.0..2.0);
                        (rng.random_range(0..vocab_size), logprob)
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

/// `request-view` as JSON (snake_case field names, as in `plugin-sdk`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewJson {
    pub id: u64,
    pub arrival_us: u64,
    pub prompt_len: u32,
    #[serde(default)]
    pub prefix_hit_len: u32,
    #[serde(default)]
    pub computed_len: u32,
    #[serde(default)]
    pub generated_len: u32,
    pub max_new_tokens: u32,
    #[serde(default)]
    pub priority: i32,
    #[serde(default)]
    pub client_id: u64,
    #[serde(default)]
    pub deadline_us: Option<u64>,
    #[serde(default)]
    pub pages_held: u32,
    #[serde(default)]
    pub last_scheduled_us: u64,
}

impl From<&ViewJson> for RequestView {
    fn from(v: &ViewJson) -> Self {
        RequestView {
            id: v.id,
            arrival_us: v.arrival_us,
            prompt_len: v.prompt_len,
            prefix_hit_len: v.prefix_hit_len,
            computed_len: v.computed_len,
            generated_len: v.generated_len,
            max_new_tokens: v.max_new_tokens,
            priority: v.priority,
            client_id: v.client_id,
            deadline_us: v.deadline_us,
            pages_held: v.pages_held,
            last_scheduled_us: v.last_scheduled_us,
        }
    }
}

/// `budget` as JSON.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetJson {
    pub max_prefill_tokens: u32,
    pub max_running: u32,
    pub free_pages: u32,
    #[serde(default)]
    pub evictable_pages: u32,
    pub page_size: u32,
    #[serde(default)]
    pub now_us: u64,
    #[serde(default)]
    pub step: u64,
}

impl From<&BudgetJson> for Budget {
    fn from(b: &BudgetJson) -> Self {
        Budget {
            max_prefill_tokens: b.max_prefill_tokens,
            max_running: b.max_running,
            free_pages: b.free_pages,
            evictable_pages: b.evictable_pages,
            page_size: b.page_size,
            now_us: b.now_us,
            step: b.step,
        }
    }
}

/// `cache-leaf` as JSON.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeafJson {
    pub node: u64,
    pub depth: u32,
    pub tokens: u32,
    pub pages: u32,
    pub last_access_us: u64,
    #[serde(default)]
    pub hit_count: u32,
    #[serde(default)]
    pub created_us: u64,
    #[serde(default)]
    pub priority: i32,
}

impl From<&LeafJson> for CacheLeaf {
    fn from(l: &LeafJson) -> Self {
        CacheLeaf {
            node: l.node,
            depth: l.depth,
            tokens: l.tokens,
            pages: l.pages,
            last_access_us: l.last_access_us,
            hit_count: l.hit_count,
            created_us: l.created_us,
            priority: l.priority,
        }
    }
}

/// `sample-request` as JSON, with the sampling parameters inlined and biases
/// as `[token, bias]` pairs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SampleJson {
    pub id: u64,
    pub temperature: f32,
    pub top_k: i32,
    pub top_p: f32,
    pub min_p: f32,
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    pub repetition_penalty: f32,
    pub seed: Option<u64>,
    pub logit_bias: Vec<(u32, f32)>,
    pub generated_len: u32,
    pub prompt_len: u32,
    pub entropy: u64,
}

impl From<&SampleJson> for SampleRequest {
    fn from(s: &SampleJson) -> Self {
        SampleRequest {
            id: s.id,
            params: SamplingParams {
                temperature: s.temperature,
                top_k: s.top_k,
                top_p: s.top_p,
                min_p: s.min_p,
                presence_penalty: s.presence_penalty,
                frequency_penalty: s.frequency_penalty,
                repetition_penalty: s.repetition_penalty,
                seed: s.seed,
            },
            logit_bias: s
                .logit_bias
                .iter()
                .map(|&(token, bias)| TokenBias { token, bias })
                .collect(),
            generated_len: s.generated_len,
            prompt_len: s.prompt_len,
            entropy: s.entropy,
        }
    }
}

/// `candidate-list` as JSON, candidates as `[token, logprob]` pairs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ListJson {
    pub id: u64,
    pub seed: u64,
    pub candidates: Vec<(u32, f32)>,
}

impl From<&ListJson> for CandidateList {
    fn from(l: &ListJson) -> Self {
        CandidateList {
            id: l.id,
            seed: l.seed,
            candidates: l
                .candidates
                .iter()
                .map(|&(token, logprob)| Candidate { token, logprob })
                .collect(),
        }
    }
}
