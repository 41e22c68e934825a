//! Every numbered rule of the plugin guide (`docs/plugin-guide.md`, "What
//! the host validates"), each with a decision that breaks exactly that rule
//! (rejected, with that rule's number) and the boundary case next to it
//! (accepted). The rules are `minisgl::plugin::validate`, the one
//! validator the plugin runtime, the scheduler loop and `plugin check` use.
//!
//! The last test reads the guide and fails if it names a rule this table
//! does not test, or this table tests a rule the guide does not name.

use std::collections::BTreeSet;

use minisgl::plugin::validate;
use minisgl_plugin_sdk::{
    Budget, CacheLeaf, Candidate, CandidateList, PrefillChunk, RequestView, SamplePlan,
    SampleRequest, SamplingParams, ScheduleDecision, TokenBias,
};

fn view(id: u64, prompt: u32, computed: u32, held: u32) -> RequestView {
    RequestView {
        id,
        prompt_len: prompt,
        computed_len: computed,
        pages_held: held,
        ..RequestView::default()
    }
}

/// Waiting 1 (100 tokens, none done) and 2 (64 of 100 done, 4 pages);
/// running 10 (32 computed: its next token needs a page) and 11 (40).
fn waiting() -> Vec<RequestView> {
    vec![view(1, 100, 0, 0), view(2, 100, 64, 4)]
}

fn running() -> Vec<RequestView> {
    vec![view(10, 32, 32, 2), view(11, 40, 40, 3)]
}

fn budget() -> Budget {
    Budget {
        max_prefill_tokens: 128,
        max_running: 3,
        free_pages: 10,
        evictable_pages: 0,
        page_size: 16,
        ..Budget::default()
    }
}

fn decision(prefill: &[(u64, u32)], decode: &[u64], preempt: &[u64]) -> ScheduleDecision {
    ScheduleDecision {
        prefill: prefill
            .iter()
            .map(|&(id, tokens)| PrefillChunk { id, tokens })
            .collect(),
        decode: decode.to_vec(),
        preempt: preempt.to_vec(),
    }
}

fn sched(d: ScheduleDecision) -> Result<(), String> {
    sched_with(d, waiting(), budget())
}

fn sched_with(d: ScheduleDecision, w: Vec<RequestView>, b: Budget) -> Result<(), String> {
    validate::schedule(&d, &w, &running(), &b).map_err(|e| e.0)
}

fn leaf(node: u64, pages: u32) -> CacheLeaf {
    CacheLeaf {
        node,
        pages,
        ..CacheLeaf::default()
    }
}

fn evict(victims: &[u64], needed: u32) -> Result<(), String> {
    let leaves = [leaf(1, 2), leaf(2, 3), leaf(3, 4)];
    validate::victims(victims.to_vec(), &leaves, needed)
        .map(|_| ())
        .map_err(|e| e.0)
}

fn plan(id: u64) -> SamplePlan {
    SamplePlan {
        id,
        params: SamplingParams::default(),
        ..SamplePlan::default()
    }
}

const VOCAB: u32 = 100;

/// Plans for requests 1 and 2, the first changed by `f`.
fn plans_with(f: impl Fn(&mut SamplePlan)) -> Result<(), String> {
    let mut first = plan(1);
    f(&mut first);
    plans(vec![first, plan(2)])
}

fn plans(p: Vec<SamplePlan>) -> Result<(), String> {
    let reqs = [1, 2].map(|id| SampleRequest {
        id,
        ..SampleRequest::default()
    });
    validate::plans(p, &reqs, VOCAB)
        .map(|_| ())
        .map_err(|e| e.0)
}

fn picks(p: &[u32]) -> Result<(), String> {
    let list = |id, tokens: &[u32]| CandidateList {
        id,
        seed: 0,
        candidates: tokens
            .iter()
            .map(|&token| Candidate {
                token,
                logprob: -1.0,
            })
            .collect(),
    };
    validate::picks(p, &[list(1, &[5, 6]), list(2, &[7])]).map_err(|e| e.0)
}

/// (rule, whether the decision must be accepted, the check).
type Case = (&'static str, bool, fn() -> Result<(), String>);

const REJECT: bool = false;
const ACCEPT: bool = true;

fn cases() -> Vec<Case> {
    vec![
        // S1: ids must be views.
        ("S1", REJECT, || sched(decision(&[(99, 1)], &[], &[]))),
        ("S1", REJECT, || sched(decision(&[], &[12], &[]))),
        ("S1", ACCEPT, || sched(decision(&[(1, 1)], &[10, 11], &[]))),
        // S2: no id twice in one list.
        ("S2", REJECT, || sched(decision(&[], &[10, 10], &[]))),
        ("S2", REJECT, || {
            sched(decision(&[(1, 1), (1, 1)], &[], &[]))
        }),
        ("S2", REJECT, || sched(decision(&[], &[], &[10, 10]))),
        ("S2", ACCEPT, || {
            sched(decision(&[(1, 1), (2, 1)], &[], &[10, 11]))
        }),
        // S3: prefill ids are waiting.
        ("S3", REJECT, || sched(decision(&[(10, 1)], &[], &[]))),
        ("S3", ACCEPT, || sched(decision(&[(2, 1)], &[], &[]))),
        // S4: 1 <= tokens <= remaining input (100 - 64 = 36 for request 2).
        ("S4", REJECT, || sched(decision(&[(2, 37)], &[], &[]))),
        ("S4", REJECT, || sched(decision(&[(1, 0)], &[], &[]))),
        ("S4", ACCEPT, || sched(decision(&[(2, 36)], &[], &[]))),
        ("S4", ACCEPT, || sched(decision(&[(1, 1)], &[], &[]))),
        // S5: chunk tokens sum to at most max_prefill_tokens (128).
        ("S5", REJECT, || {
            sched(decision(&[(1, 93), (2, 36)], &[], &[]))
        }),
        ("S5", ACCEPT, || {
            sched(decision(&[(1, 92), (2, 36)], &[], &[]))
        }),
        // S6: decode ids are running.
        ("S6", REJECT, || sched(decision(&[], &[1], &[]))),
        ("S6", ACCEPT, || sched(decision(&[], &[10], &[]))),
        // S7: preempt running requests or waiting ones holding pages.
        ("S7", REJECT, || sched(decision(&[], &[], &[1]))),
        ("S7", ACCEPT, || sched(decision(&[], &[], &[2, 10]))),
        // S8: a preempted id is not also prefilled or decoded.
        ("S8", REJECT, || sched(decision(&[], &[10], &[10]))),
        ("S8", REJECT, || sched(decision(&[(2, 1)], &[], &[2]))),
        ("S8", ACCEPT, || sched(decision(&[(1, 1)], &[11], &[2, 10]))),
        // S9: running after the step (2 - preempted + completing) <= 3.
        ("S9", REJECT, || {
            let b = Budget {
                max_prefill_tokens: 200,
                free_pages: 20,
                ..budget()
            };
            sched_with(decision(&[(1, 100), (2, 36)], &[], &[]), waiting(), b)
        }),
        ("S9", ACCEPT, || {
            let b = Budget {
                max_prefill_tokens: 200,
                free_pages: 20,
                ..budget()
            };
            sched_with(decision(&[(1, 100), (2, 36)], &[], &[11]), waiting(), b)
        }),
        ("S9", ACCEPT, || {
            // A step that completes nobody is not blamed for a full set.
            let b = Budget {
                max_running: 1,
                ..budget()
            };
            sched_with(decision(&[(2, 35)], &[10, 11], &[]), waiting(), b)
        }),
        // S10: new pages fit free + evictable. Request 2's 36 tokens need
        // ceil(100/16) - 4 = 3 pages, decoding 10 needs 1.
        ("S10", REJECT, || {
            let b = Budget {
                free_pages: 3,
                ..budget()
            };
            sched_with(decision(&[(2, 36)], &[10, 11], &[]), waiting(), b)
        }),
        ("S10", ACCEPT, || {
            let b = Budget {
                free_pages: 3,
                evictable_pages: 1,
                ..budget()
            };
            sched_with(decision(&[(2, 36)], &[10, 11], &[]), waiting(), b)
        }),
        // S10, the cached-prefix charge: 96 tokens cached, no pages held:
        // the last 4 tokens are charged ceil(100/16) = 7 pages.
        ("S10", REJECT, || {
            let w = vec![RequestView {
                prefix_hit_len: 96,
                ..view(1, 100, 0, 0)
            }];
            let b = Budget {
                free_pages: 6,
                ..budget()
            };
            sched_with(decision(&[(1, 4)], &[], &[]), w, b)
        }),
        ("S10", ACCEPT, || {
            let w = vec![RequestView {
                prefix_hit_len: 96,
                ..view(1, 100, 0, 0)
            }];
            let b = Budget {
                free_pages: 2,
                evictable_pages: 5,
                ..budget()
            };
            sched_with(decision(&[(1, 4)], &[], &[]), w, b)
        }),
        // E1-E3 over leaves 1 (2 pages), 2 (3) and 3 (4).
        ("E1", REJECT, || evict(&[7], 1)),
        ("E1", ACCEPT, || evict(&[3], 4)),
        ("E2", REJECT, || evict(&[1, 1], 1)),
        ("E2", ACCEPT, || evict(&[1, 2], 5)),
        ("E3", REJECT, || evict(&[1], 3)),
        ("E3", REJECT, || evict(&[1, 2], 100)),
        ("E3", ACCEPT, || evict(&[1, 2, 3], 100)),
        ("E3", ACCEPT, || evict(&[], 0)),
        // P1: exactly one plan per request.
        ("P1", REJECT, || plans(vec![plan(1)])),
        ("P1", REJECT, || plans(vec![plan(1), plan(1)])),
        ("P1", REJECT, || plans(vec![plan(1), plan(3)])),
        ("P1", ACCEPT, || plans(vec![plan(2), plan(1)])),
        // P2: parameter ranges, boundaries included or excluded as stated.
        ("P2", REJECT, || {
            plans_with(|p| p.params.temperature = 100.5)
        }),
        ("P2", REJECT, || {
            plans_with(|p| p.params.temperature = f32::NAN)
        }),
        ("P2", REJECT, || plans_with(|p| p.params.top_p = 0.0)),
        ("P2", REJECT, || plans_with(|p| p.params.min_p = 1.01)),
        ("P2", REJECT, || {
            plans_with(|p| p.params.presence_penalty = -2.01)
        }),
        ("P2", REJECT, || {
            plans_with(|p| p.params.frequency_penalty = f32::INFINITY)
        }),
        ("P2", REJECT, || {
            plans_with(|p| p.params.repetition_penalty = 0.0)
        }),
        ("P2", ACCEPT, || {
            plans_with(|p| {
                p.params.temperature = 100.0;
                p.params.top_p = 1.0;
                p.params.min_p = 1.0;
                p.params.presence_penalty = -2.0;
                p.params.frequency_penalty = 2.0;
                p.params.repetition_penalty = 100.0;
            })
        }),
        ("P2", ACCEPT, || plans_with(|p| p.params.temperature = 0.0)),
        // P3: bias tokens below the vocabulary, biases in [-100, 100].
        ("P3", REJECT, || {
            plans_with(|p| {
                p.logit_bias = vec![TokenBias {
                    token: VOCAB,
                    bias: 1.0,
                }]
            })
        }),
        ("P3", REJECT, || {
            plans_with(|p| {
                p.logit_bias = vec![TokenBias {
                    token: 5,
                    bias: 100.5,
                }]
            })
        }),
        ("P3", ACCEPT, || {
            plans_with(|p| {
                p.logit_bias = vec![
                    TokenBias {
                        token: VOCAB - 1,
                        bias: -100.0,
                    },
                    TokenBias {
                        token: 0,
                        bias: 100.0,
                    },
                ]
            })
        }),
        // P4: allowed tokens non-empty, at most the vocabulary, each below it.
        ("P4", REJECT, || {
            plans_with(|p| p.allowed_tokens = Some(vec![]))
        }),
        ("P4", REJECT, || {
            plans_with(|p| p.allowed_tokens = Some(vec![3, VOCAB]))
        }),
        ("P4", ACCEPT, || {
            plans_with(|p| p.allowed_tokens = Some(vec![0, VOCAB - 1]))
        }),
        ("P4", ACCEPT, || {
            plans_with(|p| p.allowed_tokens = Some((0..VOCAB).collect()))
        }),
        // P5: pick_from_top <= 64.
        ("P5", REJECT, || plans_with(|p| p.pick_from_top = 65)),
        ("P5", ACCEPT, || plans_with(|p| p.pick_from_top = 64)),
        // K1-K2 over lists 1 [5, 6] and 2 [7].
        ("K1", REJECT, || picks(&[6])),
        ("K1", ACCEPT, || picks(&[6, 7])),
        ("K2", REJECT, || picks(&[6, 5])),
        ("K2", ACCEPT, || picks(&[5, 7])),
    ]
}

#[test]
fn every_rule_rejects_its_breach_and_accepts_its_boundary() {
    let mut failures = Vec::new();
    for (i, (rule, accept, check)) in cases().into_iter().enumerate() {
        let got = check();
        let ok = match (&got, accept) {
            (Ok(()), true) => true,
            (Err(e), false) => e.starts_with(&format!("{rule}:")),
            _ => false,
        };
        if !ok {
            let want = if accept { "accepted" } else { "rejected" };
            failures.push(format!("case {i} ({rule}, want {want}): got {got:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn each_rule_has_a_breach_and_a_boundary() {
    let cases = cases();
    let rules: BTreeSet<&str> = cases.iter().map(|c| c.0).collect();
    for rule in rules {
        for want in [REJECT, ACCEPT] {
            assert!(
                cases.iter().any(|c| c.0 == rule && c.1 == want),
                "{rule} has no {} case",
                if want { "accepted" } else { "rejected" }
            );
        }
    }
}

/// The rule labels written in bold in the guide's validation section.
fn guide_rules() -> BTreeSet<String> {
    let guide = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/plugin-guide.md"
    ))
    .expect("docs/plugin-guide.md");
    let mut rules = BTreeSet::new();
    for part in guide.split("**").skip(1).step_by(2) {
        let mut chars = part.chars();
        let head = chars.next();
        let digits: String = chars.collect();
        if matches!(head, Some('S' | 'E' | 'P' | 'K'))
            && !digits.is_empty()
            && digits.chars().all(|c| c.is_ascii_digit())
        {
            rules.insert(part.to_string());
        }
    }
    rules
}

#[test]
fn the_guide_and_this_table_name_the_same_rules() {
    let guide = guide_rules();
    let tested: BTreeSet<String> = cases().iter().map(|c| c.0.to_string()).collect();
    assert!(guide.len() >= 20, "the guide names only {guide:?}");
    assert_eq!(guide, tested, "rules in the guide vs rules tested here");
}
