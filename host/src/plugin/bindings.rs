//! Host bindings of the three plugin worlds of `wit/`, and conversions from
//! and to the plain types of `minisgl_plugin_sdk`.
//!
//! This is the only `bindgen!` site of the host: one macro expands it once
//! per world. The scheduler world generates the shared `types` module; the
//! evictor and sampler worlds reuse it through `with:`, so there is one Rust
//! type per WIT record and one set of conversions.

use minisgl_plugin_sdk as plain;

macro_rules! plugin_world {
    ($module:ident, $world:tt, { $($with:tt)* }) => {
        pub mod $module {
            wasmtime::component::bindgen!({
                world: $world,
                path: "../wit",
                with: { $($with)* },
            });
        }
    };
}

plugin_world!(scheduler, "scheduler", {});
plugin_world!(evictor, "evictor", {
    "minisgl:plugin/types": super::scheduler::minisgl::plugin::types,
});
plugin_world!(sampler, "sampler", {
    "minisgl:plugin/types": super::scheduler::minisgl::plugin::types,
});

/// The WIT records, one Rust type each, shared by the three worlds.
pub use scheduler::minisgl::plugin::types as w;

pub fn request_view(r: &plain::RequestView) -> w::RequestView {
    w::RequestView {
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

pub fn budget(b: &plain::Budget) -> w::Budget {
    w::Budget {
        max_prefill_tokens: b.max_prefill_tokens,
        max_running: b.max_running,
        free_pages: b.free_pages,
        evictable_pages: b.evictable_pages,
        page_size: b.page_size,
        now_us: b.now_us,
        step: b.step,
    }
}

pub fn decision(d: w::ScheduleDecision) -> plain::ScheduleDecision {
    plain::ScheduleDecision {
        prefill: d
            .prefill
            .into_iter()
            .map(|c| plain::PrefillChunk {
                id: c.id,
                tokens: c.tokens,
            })
            .collect(),
        decode: d.decode,
        preempt: d.preempt,
    }
}

pub fn cache_leaf(l: &plain::CacheLeaf) -> w::CacheLeaf {
    w::CacheLeaf {
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

fn params_in(p: &plain::SamplingParams) -> w::SamplingParams {
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

fn params_out(p: w::SamplingParams) -> plain::SamplingParams {
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

pub fn sample_request(r: &plain::SampleRequest) -> w::SampleRequest {
    w::SampleRequest {
        id: r.id,
        params: params_in(&r.params),
        logit_bias: r
            .logit_bias
            .iter()
            .map(|b| w::TokenBias {
                token: b.token,
                bias: b.bias,
            })
            .collect(),
        generated_len: r.generated_len,
        prompt_len: r.prompt_len,
        entropy: r.entropy,
    }
}

pub fn sample_plan(p: w::SamplePlan) -> plain::SamplePlan {
    plain::SamplePlan {
        id: p.id,
        params: params_out(p.params),
        seed: p.seed,
        logit_bias: p
            .logit_bias
            .into_iter()
            .map(|b| plain::TokenBias {
                token: b.token,
                bias: b.bias,
            })
            .collect(),
        allowed_tokens: p.allowed_tokens,
        pick_from_top: p.pick_from_top,
    }
}

pub fn candidate_list(l: &plain::CandidateList) -> w::CandidateList {
    w::CandidateList {
        id: l.id,
        seed: l.seed,
        candidates: l
            .candidates
            .iter()
            .map(|c| w::Candidate {
                token: c.token,
                logprob: c.logprob,
            })
            .collect(),
    }
}
