//! The host never trusts a plugin: every decision is checked against the
//! state the host handed out before the engine acts on it. A decision that
//! breaks any rule below is discarded as a whole, counted as `invalid`, and
//! the call is answered by the native built-in.
//!
//! Scheduler (`schedule`), with `waiting`/`running` the views of the call:
//! - S1 every id in `prefill`, `decode` and `preempt` is one of the views
//!   (unknown ids are rejected);
//! - S2 no id appears twice in `prefill`, twice in `decode` or twice in `preempt`;
//! - S3 `prefill` ids are waiting requests;
//! - S4 a chunk has at least 1 token and at most the request's remaining input,
//!   `prompt_len - max(computed_len, prefix_hit_len)`;
//! - S5 the chunks' tokens sum to at most `max_prefill_tokens`;
//! - S6 `decode` ids are running requests;
//! - S7 `preempt` ids are running requests, or waiting requests that hold
//!   pages (`pages_held > 0`); preempting anything else releases nothing;
//! - S8 a preempted id is neither prefilled nor decoded in the same step;
//! - S9 if any chunk completes its request's input (making it running), the
//!   running count after the step — running, minus preempted running, plus
//!   completed chunks — is at most `max_running`. (A step that starts no new
//!   request is not blamed for a running set the host already let grow.)
//! - S10 the new pages of the step fit `free_pages + evictable_pages`: a
//!   chunk of `t` tokens needs `ceil((computed + t) / page_size) - pages_held`
//!   (`computed = max(computed_len, prefix_hit_len)`, never below 0), a decode
//!   needs one when `computed_len % page_size == 0`. Pages released by
//!   preemption are not counted: the host frees them before the next step.
//!
//! Evictor (`pick_victims`):
//! - E1 every victim is one of the given leaves (locked nodes are never
//!   given, so a locked or unknown node is rejected here);
//! - E2 no victim appears twice;
//! - E3 the victims cover `min(pages_needed, pages of all leaves)`: a plugin
//!   may not leave the host short while evictable leaves remain.
//!
//! The accepted list is cut after the first victims that cover `pages_needed`
//! (the WIT contract lets plugins return more; the host stops there).
//!
//! Sampler (`plan`), with `vocab` the vocabulary size:
//! - P1 exactly one plan per request: same count, every request id exactly
//!   once (any order; the host reorders plans into request order);
//! - P2 `temperature` finite in [0, 100]; `top_p` finite in (0, 1]; `min_p`
//!   finite in [0, 1]; `presence_penalty` and `frequency_penalty` finite in
//!   [-2, 2] (OpenAI's range); `repetition_penalty` finite in (0, 100];
//!   `top_k` is free (0 or less disables it, more than `vocab` keeps all);
//! - P3 every `logit_bias` token is below `vocab` and its bias finite in
//!   [-100, 100] (OpenAI's range);
//! - P4 `allowed_tokens`, when present, is non-empty, at most `vocab` long,
//!   and every token is below `vocab`;
//! - P5 `pick_from_top` is at most 64.
//!
//! Sampler (`pick`):
//! - K1 one token per list;
//! - K2 each token is one of its list's candidates. (Lists with no candidates
//!   are a host error, not the plugin's: any answer is accepted for them.)

use std::collections::{HashMap, HashSet};

use minisgl_plugin_sdk::{
    Budget, CacheLeaf, CandidateList, RequestView, SamplePlan, SampleRequest, SamplingParams,
    ScheduleDecision,
};
use minisgl_policies::{pages_for_chunk, pages_for_decode};

/// The most candidates a plan may ask `pick` to choose among.
pub const MAX_PICK_FROM_TOP: u32 = 64;

/// Why a decision was rejected: the rule (as numbered in this module's docs)
/// and the offending values.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidDecision(pub String);

fn invalid<T>(msg: String) -> Result<T, InvalidDecision> {
    Err(InvalidDecision(msg))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Queue {
    Waiting,
    Running,
}

/// Checks a scheduler decision (rules S1-S10).
pub fn schedule(
    d: &ScheduleDecision,
    waiting: &[RequestView],
    running: &[RequestView],
    budget: &Budget,
) -> Result<(), InvalidDecision> {
    let mut views: HashMap<u64, (&RequestView, Queue)> =
        HashMap::with_capacity(waiting.len() + running.len());
    views.extend(waiting.iter().map(|r| (r.id, (r, Queue::Waiting))));
    views.extend(running.iter().map(|r| (r.id, (r, Queue::Running))));
    let lookup = |list: &str, id: u64| match views.get(&id) {
        Some(&v) => Ok(v),
        None => invalid(format!("S1: {list} names unknown request id {id}")),
    };

    let mut prefilled = HashSet::with_capacity(d.prefill.len());
    let mut tokens: u64 = 0;
    let mut pages: u64 = 0;
    let mut completed: u64 = 0;
    for chunk in &d.prefill {
        let (r, queue) = lookup("prefill", chunk.id)?;
        if !prefilled.insert(chunk.id) {
            return invalid(format!("S2: request {} is prefilled twice", chunk.id));
        }
        if queue != Queue::Waiting {
            return invalid(format!("S3: prefill of request {} which is not waiting", chunk.id));
        }
        let remaining = r.remaining_prefill();
        if chunk.tokens == 0 || chunk.tokens > remaining {
            return invalid(format!(
                "S4: prefill chunk of {} tokens for request {}, which has {remaining} input tokens left",
                chunk.tokens, chunk.id
            ));
        }
        tokens += u64::from(chunk.tokens);
        pages += pages_for_chunk(r, chunk.tokens, budget.page_size);
        if chunk.tokens == remaining {
            completed += 1;
        }
    }
    if tokens > u64::from(budget.max_prefill_tokens) {
        return invalid(format!(
            "S5: prefill chunks total {tokens} tokens, over max_prefill_tokens = {}",
            budget.max_prefill_tokens
        ));
    }

    let mut decoded = HashSet::with_capacity(d.decode.len());
    for &id in &d.decode {
        let (r, queue) = lookup("decode", id)?;
        if !decoded.insert(id) {
            return invalid(format!("S2: request {id} is decoded twice"));
        }
        if queue != Queue::Running {
            return invalid(format!("S6: decode of request {id} which is not running"));
        }
        pages += pages_for_decode(r, budget.page_size);
    }

    let mut preempted = HashSet::with_capacity(d.preempt.len());
    let mut preempted_running: u64 = 0;
    for &id in &d.preempt {
        let (r, queue) = lookup("preempt", id)?;
        if !preempted.insert(id) {
            return invalid(format!("S2: request {id} is preempted twice"));
        }
        match queue {
            Queue::Running => preempted_running += 1,
            Queue::Waiting if r.pages_held > 0 => {}
            Queue::Waiting => {
                return invalid(format!(
                    "S7: preempt of waiting request {id}, which holds no pages"
                ))
            }
        }
        if prefilled.contains(&id) || decoded.contains(&id) {
            return invalid(format!(
                "S8: request {id} is preempted and also prefilled or decoded"
            ));
        }
    }

    if completed > 0 {
        let after = running.len() as u64 - preempted_running + completed;
        if after > u64::from(budget.max_running) {
            return invalid(format!(
                "S9: {after} requests would be running after the step, over max_running = {}",
                budget.max_running
            ));
        }
    }

    let available = u64::from(budget.free_pages) + u64::from(budget.evictable_pages);
    if pages > available {
        return invalid(format!(
            "S10: the step needs {pages} new pages, only {available} are free or evictable"
        ));
    }
    Ok(())
}

/// Checks evictor victims (rules E1-E3) and returns them cut after the first
/// ones that cover `pages_needed`.
pub fn victims(
    victims: Vec<u64>,
    leaves: &[CacheLeaf],
    pages_needed: u32,
) -> Result<Vec<u64>, InvalidDecision> {
    let pages: HashMap<u64, u32> = leaves.iter().map(|l| (l.node, l.pages)).collect();
    let mut seen = HashSet::with_capacity(victims.len());
    let mut covered: u64 = 0;
    let mut cut = None;
    for (i, &node) in victims.iter().enumerate() {
        let Some(&p) = pages.get(&node) else {
            return invalid(format!(
                "E1: victim {node} is not an evictable leaf (unknown or locked node)"
            ));
        };
        if !seen.insert(node) {
            return invalid(format!("E2: victim {node} is named twice"));
        }
        covered += u64::from(p);
        if cut.is_none() && covered >= u64::from(pages_needed) {
            cut = Some(i + 1);
        }
    }
    let total: u64 = leaves.iter().map(|l| u64::from(l.pages)).sum();
    let required = total.min(u64::from(pages_needed));
    if covered < required {
        return invalid(format!(
            "E3: victims free {covered} pages, {required} were needed and available"
        ));
    }
    let mut victims = victims;
    victims.truncate(cut.unwrap_or(victims.len()));
    Ok(victims)
}

fn check_range(
    id: u64,
    field: &str,
    value: f32,
    lo: f32,
    hi: f32,
    lo_open: bool,
) -> Result<(), InvalidDecision> {
    let above_lo = if lo_open { value > lo } else { value >= lo };
    if value.is_finite() && above_lo && value <= hi {
        return Ok(());
    }
    let open = if lo_open { "(" } else { "[" };
    invalid(format!(
        "P2: plan for request {id} has {field} = {value}, outside {open}{lo}, {hi}]"
    ))
}

fn check_params(id: u64, p: &SamplingParams) -> Result<(), InvalidDecision> {
    check_range(id, "temperature", p.temperature, 0.0, 100.0, false)?;
    check_range(id, "top_p", p.top_p, 0.0, 1.0, true)?;
    check_range(id, "min_p", p.min_p, 0.0, 1.0, false)?;
    check_range(id, "presence_penalty", p.presence_penalty, -2.0, 2.0, false)?;
    check_range(id, "frequency_penalty", p.frequency_penalty, -2.0, 2.0, false)?;
    check_range(id, "repetition_penalty", p.repetition_penalty, 0.0, 100.0, true)
}

/// Checks sampler plans (rules P1-P5) and returns them in request order.
pub fn plans(
    mut plans: Vec<SamplePlan>,
    requests: &[SampleRequest],
    vocab: u32,
) -> Result<Vec<SamplePlan>, InvalidDecision> {
    if plans.len() != requests.len() {
        return invalid(format!(
            "P1: {} plans for {} requests",
            plans.len(),
            requests.len()
        ));
    }
    for plan in &plans {
        let id = plan.id;
        check_params(id, &plan.params)?;
        for b in &plan.logit_bias {
            if b.token >= vocab {
                return invalid(format!(
                    "P3: plan for request {id} biases token {}, vocabulary size is {vocab}",
                    b.token
                ));
            }
            if !(b.bias.is_finite() && (-100.0..=100.0).contains(&b.bias)) {
                return invalid(format!(
                    "P3: plan for request {id} biases token {} by {}, outside [-100, 100]",
                    b.token, b.bias
                ));
            }
        }
        if let Some(allowed) = &plan.allowed_tokens {
            if allowed.is_empty() || allowed.len() > vocab as usize {
                return invalid(format!(
                    "P4: plan for request {id} allows {} tokens, must be 1..={vocab}",
                    allowed.len()
                ));
            }
            if let Some(t) = allowed.iter().find(|&&t| t >= vocab) {
                return invalid(format!(
                    "P4: plan for request {id} allows token {t}, vocabulary size is {vocab}"
                ));
            }
        }
        if plan.pick_from_top > MAX_PICK_FROM_TOP {
            return invalid(format!(
                "P5: plan for request {id} has pick_from_top = {}, at most {MAX_PICK_FROM_TOP}",
                plan.pick_from_top
            ));
        }
    }
    // Fast path: the plugin kept the request order.
    if plans.iter().zip(requests).all(|(p, r)| p.id == r.id) {
        return Ok(plans);
    }
    let mut by_id: HashMap<u64, SamplePlan> = HashMap::with_capacity(plans.len());
    for plan in plans.drain(..) {
        let id = plan.id;
        if by_id.insert(id, plan).is_some() {
            return invalid(format!("P1: two plans for request {id}"));
        }
    }
    requests
        .iter()
        .map(|r| match by_id.remove(&r.id) {
            Some(plan) => Ok(plan),
            None => invalid(format!("P1: no plan for request {}", r.id)),
        })
        .collect()
}

/// Checks `pick` answers (rules K1-K2).
pub fn picks(picks: &[u32], lists: &[CandidateList]) -> Result<(), InvalidDecision> {
    if picks.len() != lists.len() {
        return invalid(format!(
            "K1: {} tokens picked for {} candidate lists",
            picks.len(),
            lists.len()
        ));
    }
    for (&token, list) in picks.iter().zip(lists) {
        if !list.candidates.is_empty() && !list.candidates.iter().any(|c| c.token == token) {
            return invalid(format!(
                "K2: picked token {token} for request {}, which is not among its {} candidates",
                list.id,
                list.candidates.len()
            ));
        }
    }
    Ok(())
}
