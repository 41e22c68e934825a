//! How each sequence's next token is chosen: the greedy fast path, the
//! sampler policy's plans (checked here), and its picks among candidates.

use std::collections::HashMap;

use minisgl_plugin_sdk::{Candidate, CandidateList, SamplePlan, SampleRequest, SamplingParams};
use minisgl_policies::pick_seeded;

use super::request::Request;
use super::{Scheduler, SeqMeta, StepTicket};
use crate::batch::{ResolvedSampling, SampleMode, SampleSpec, SeqInput, SeqOutput};
use crate::metrics::FixupCause;

/// Largest candidate list a plan may ask for (`pick-from-top`).
pub const MAX_PICK_FROM_TOP: u32 = 64;

/// SplitMix64 finaliser, for per-token entropy.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Argmax needs no plugin: no temperature, biases or penalties.
fn is_plain_greedy(r: &Request) -> bool {
    r.spec.params.is_greedy() && r.spec.logit_bias.is_empty() && !r.spec.params.has_penalties()
}

/// Whether the parameters are usable (the same ranges `submit` enforces).
pub fn params_ok(p: &SamplingParams) -> bool {
    p.temperature.is_finite()
        && (0.0..=100.0).contains(&p.temperature)
        && p.top_p > 0.0
        && p.top_p <= 1.0
        && (0.0..=1.0).contains(&p.min_p)
        && p.presence_penalty.is_finite()
        && p.frequency_penalty.is_finite()
        && p.repetition_penalty.is_finite()
        && p.repetition_penalty > 0.0
}

fn plan_ok(p: &SamplePlan, vocab: u32) -> bool {
    params_ok(&p.params)
        && p.pick_from_top <= MAX_PICK_FROM_TOP
        && p.logit_bias
            .iter()
            .all(|b| b.token < vocab && b.bias.is_finite())
        && p.allowed_tokens
            .as_ref()
            .is_none_or(|a| !a.is_empty() && a.iter().all(|&t| t < vocab))
}

impl Scheduler {
    /// Fills `sample` for the sequences that produce a token this step and
    /// records which ones the policy will pick for.
    pub(super) fn attach_sampling(&mut self, seqs: &mut [SeqInput], metas: &mut [SeqMeta]) {
        let mut asks = Vec::new();
        for (i, meta) in metas.iter().enumerate() {
            if !meta.sampled {
                continue;
            }
            let r = &self.reqs[&meta.id];
            if is_plain_greedy(r) {
                seqs[i].sample = Some(SampleSpec {
                    mode: SampleMode::Greedy,
                    logprobs: r.spec.logprobs,
                });
                continue;
            }
            let generated = r.generated();
            asks.push((
                i,
                SampleRequest {
                    id: r.id,
                    params: r.spec.params.clone(),
                    logit_bias: r.spec.logit_bias.clone(),
                    generated_len: generated,
                    prompt_len: r.spec.prompt_tokens.len() as u32,
                    entropy: mix(self.cfg.seed ^ mix(r.id ^ mix(u64::from(generated)))),
                },
            ));
        }
        if asks.is_empty() {
            return;
        }
        let requests: Vec<SampleRequest> = asks.iter().map(|(_, a)| a.clone()).collect();
        let plans = self.policy.plan(&requests, self.cfg.vocab_size);
        let mut by_id: HashMap<u64, SamplePlan> = HashMap::new();
        for plan in plans {
            by_id.entry(plan.id).or_insert(plan);
        }
        for (i, ask) in asks {
            let plan = match by_id.remove(&ask.id) {
                Some(p) if plan_ok(&p, self.cfg.vocab_size) => p,
                _ => {
                    self.fixup(FixupCause::Sampler);
                    SamplePlan {
                        id: ask.id,
                        params: ask.params.clone(),
                        seed: ask.entropy,
                        logit_bias: ask.logit_bias.clone(),
                        allowed_tokens: None,
                        pick_from_top: 0,
                    }
                }
            };
            let r = self.reqs.get_mut(&ask.id).expect("sampled request exists");
            let needs_history = plan.params.has_penalties();
            let resolved = ResolvedSampling {
                prompt_tokens: if plan.params.repetition_penalty != 1.0 {
                    r.spec.prompt_tokens.clone()
                } else {
                    Vec::new()
                },
                output_tokens: if needs_history {
                    r.output.clone()
                } else {
                    Vec::new()
                },
                params: plan.params,
                seed: plan.seed,
                logit_bias: plan.logit_bias,
                allowed_tokens: plan.allowed_tokens,
            };
            // The next draw needs this token's value on the host (a pick, or
            // a penalty history): no decode with an unknown last token.
            r.needs_known_token = plan.pick_from_top > 0 || needs_history;
            let mode = if plan.pick_from_top > 0 {
                metas[i].pick_seed = Some(plan.seed);
                SampleMode::Candidates {
                    k: plan.pick_from_top,
                    processing: resolved,
                }
            } else {
                SampleMode::Sample(resolved)
            };
            seqs[i].sample = Some(SampleSpec {
                mode,
                logprobs: r.spec.logprobs,
            });
        }
    }
}

/// The policy's picks for sequences sampled as candidate lists, checked: a
/// pick must be one of the candidates (else the seeded default pick is used).
pub(super) fn pick(
    s: &mut Scheduler,
    ticket: &StepTicket,
    outputs: &HashMap<u64, SeqOutput>,
) -> HashMap<u64, (u32, Option<f32>)> {
    let lists: Vec<CandidateList> = ticket
        .seqs
        .iter()
        .filter_map(|m| Some((m, m.pick_seed?)))
        .filter_map(|(m, seed)| {
            let out = outputs.get(&m.id)?;
            Some(CandidateList {
                id: m.id,
                seed,
                candidates: out
                    .candidates
                    .iter()
                    .map(|c| Candidate {
                        token: c.token,
                        logprob: c.logprob,
                    })
                    .collect(),
            })
        })
        .filter(|l| !l.candidates.is_empty())
        .collect();
    if lists.is_empty() {
        return HashMap::new();
    }
    let picks = s.policy.pick(&lists);
    let mut out = HashMap::with_capacity(lists.len());
    for (i, list) in lists.iter().enumerate() {
        let chosen = picks
            .get(i)
            .and_then(|&t| list.candidates.iter().find(|c| c.token == t));
        let chosen = match chosen {
            Some(c) => c,
            None => {
                s.fixup(FixupCause::Sampler);
                let t = pick_seeded(list);
                list.candidates
                    .iter()
                    .find(|c| c.token == t)
                    .unwrap_or(&list.candidates[0])
            }
        };
        out.insert(list.id, (chosen.token, Some(chosen.logprob)));
    }
    out
}
