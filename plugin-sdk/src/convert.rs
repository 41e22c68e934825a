//! Conversions between the wit-bindgen records and the plain types.
//!
//! The two sets of types have the same fields; these moves are field by field
//! (no allocation beyond the lists), so a call costs little more than the
//! canonical ABI's own copy.

use crate::types as plain;
use crate::wit::types as w;

impl From<w::RequestView> for plain::RequestView {
    fn from(r: w::RequestView) -> Self {
        plain::RequestView {
            id: r.id,
            arrival_us: r.arrival_us,
            prompt_len: r.prompt_len,
            prefix_hit_len: r.prefix_hit_len,
            computed_len: r.computed_len,
            generated_len: r.generated_len,
            max_new_tokens: r.max_new_tokens,
            priority: r.priority,
            client_id: r.client_id,
            deadline_us: r.deadline_us,
            pages_held: r.pages_held,
            last_scheduled_us: r.last_scheduled_us,
        }
    }
}

impl From<w::Budget> for plain::Budget {
    fn from(b: w::Budget) -> Self {
        plain::Budget {
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

impl From<plain::ScheduleDecision> for w::ScheduleDecision {
    fn from(d: plain::ScheduleDecision) -> Self {
        w::ScheduleDecision {
            prefill: d
                .prefill
                .into_iter()
                .map(|c| w::PrefillChunk {
                    id: c.id,
                    tokens: c.tokens,
                })
                .collect(),
            decode: d.decode,
            preempt: d.preempt,
        }
    }
}

impl From<w::CacheLeaf> for plain::CacheLeaf {
    fn from(l: w::CacheLeaf) -> Self {
        plain::CacheLeaf {
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

impl From<w::SamplingParams> for plain::SamplingParams {
    fn from(p: w::SamplingParams) -> Self {
        plain::SamplingParams {
            temperature: p.temperature,
            top_k: p.top_k,
            top_p: p.top_p,
            min_p: p.min_p,
            presence_penalty: p.presence_penalty,
            frequency_penalty: p.frequency_penalty,
            repetition_penalty: p.repetition_penalty,
            seed: p.seed,
        }
    }
}

impl From<plain::SamplingParams> for w::SamplingParams {
    fn from(p: plain::SamplingParams) -> Self {
        w::SamplingParams {
            temperature: p.temperature,
            top_k: p.top_k,
            top_p: p.top_p,
            min_p: p.min_p,
            presence_penalty: p.presence_penalty,
            frequency_penalty: p.frequency_penalty,
            repetition_penalty: p.repetition_penalty,
            seed: p.seed,
        }
    }
}

fn bias_in(b: Vec<w::TokenBias>) -> Vec<plain::TokenBias> {
    b.into_iter()
        .map(|b| plain::TokenBias {
            token: b.token,
            bias: b.bias,
        })
        .collect()
}

fn bias_out(b: Vec<plain::TokenBias>) -> Vec<w::TokenBias> {
    b.into_iter()
        .map(|b| w::TokenBias {
            token: b.token,
            bias: b.bias,
        })
        .collect()
}

impl From<w::SampleRequest> for plain::SampleRequest {
    fn from(r: w::SampleRequest) -> Self {
        plain::SampleRequest {
            id: r.id,
            params: r.params.into(),
            logit_bias: bias_in(r.logit_bias),
            generated_len: r.generated_len,
            prompt_len: r.prompt_len,
            entropy: r.entropy,
        }
    }
}

impl From<plain::SamplePlan> for w::SamplePlan {
    fn from(p: plain::SamplePlan) -> Self {
        w::SamplePlan {
            id: p.id,
            params: p.params.into(),
            seed: p.seed,
            logit_bias: bias_out(p.logit_bias),
            allowed_tokens: p.allowed_tokens,
            pick_from_top: p.pick_from_top,
        }
    }
}

impl From<w::CandidateList> for plain::CandidateList {
    fn from(l: w::CandidateList) -> Self {
        plain::CandidateList {
            id: l.id,
            seed: l.seed,
            candidates: l
                .candidates
                .into_iter()
                .map(|c| plain::Candidate {
                    token: c.token,
                    logprob: c.logprob,
                })
                .collect(),
        }
    }
}

/// Converts every element of a list.
pub fn all<A, B: From<A>>(items: Vec<A>) -> Vec<B> {
    items.into_iter().map(B::from).collect()
}
