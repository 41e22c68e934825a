//! The host never trusts a plugin: every decision is checked against the
//! state the host handed out before the engine acts on it. A decision that
//! breaks any rule below is discarded as a whole, counted as `invalid`, and
//! the call is answered by the native built-in.
//!
//! These are the only rules: the plugin runtime checks plugin answers with
//! them, the scheduler loop checks every decision it executes with them
//! ([`crate::scheduler::validate`]), and `minisgl-host plugin check` runs
//! them through the same runtime. Every rule is checkable from the call's
//! arguments alone, and the engine executes an accepted decision unchanged.
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
//!   running count after the step — `running.len()`, minus preempted running,
//!   plus completed chunks — is at most `max_running`. (`max_running` is
//!   what is left for the views: running requests the host did not offer
//!   this step already hold their slots. A step that starts no new request
//!   is not blamed for a running set that is already full.)
//! - S10 the new pages of the step fit `free_pages + evictable_pages`: a
//!   chunk of `t` tokens needs `ceil((computed + t) / page_size) - pages_held`
//!   (`computed = max(computed_len, prefix_hit_len)`, never below 0), a decode
//!   needs one when `computed_len % page_size == 0`. Pages released by
//!   preemption are not counted: the host frees them before the next step.
//!   With `pages_held == 0` and `prefix_hit_len > 0` the chunk is charged
//!   the cached prefix's pages too: admission locks them, taking them out of
//!   `evictable_pages`, and the plugin cannot tell how many of them were
//!   evictable, so the charge is the upper bound the host can always meet.
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
use std::hash::{BuildHasherDefault, Hasher};

use minisgl_plugin_sdk::{
    Budget, CacheLeaf, CandidateList, RequestView, SamplePlan, SampleRequest, SamplingParams,
    ScheduleDecision,
};
use minisgl_policies::{pages_for_chunk, pages_for_decode};

/// Hashes the host's u64 ids with one multiply-xorshift: validation runs on
/// every plugin call, and SipHash would be most of its cost. Keys are the
/// host's own ids (a plugin's ids are only looked up), so no collision
/// attack is possible through a plugin.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b) ^ self.0.rotate_left(8));
        }
    }

    fn write_u64(&mut self, x: u64) {
        let h = (x ^ (x >> 32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = h ^ (h >> 29);
    }
}

type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;
type IdSet = HashSet<u64, BuildHasherDefault<IdHasher>>;

fn id_map<V>(capacity: usize) -> IdMap<V> {
    IdMap::with_capacity_and_hasher(capacity, BuildHasherDefault::default())
}

fn id_set(capacity: usize) -> IdSet {
    IdSet::with_capacity_and_hasher(capacity, BuildHasherDefault::default())
}

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
    let mut views: IdMap<(&RequestView, Queue)> = id_map(waiting.len() + running.len());
    views.extend(waiting.iter().map(|r| (r.id, (r, Queue::Waiting))));
    views.extend(running.iter().map(|r| (r.id, (r, Queue::Running))));
    let lookup = |list: &str, id: u64| match views.get(&id) {
        Some(&v) => Ok(v),
        None => invalid(format!("S1: {list} names unknown request id {id}")),
    };

    let mut prefilled = id_set(d.prefill.len());
    let mut tokens: u64 = 0;
    let mut pages: u64 = 0;
    let mut completed: u64 = 0;
    for chunk in &d.prefill {
        let (r, queue) = lookup("prefill", chunk.id)?;
        if !prefilled.insert(chunk.id) {
            return invalid(format!("S2: request {} is prefilled twice", chunk.id));
        }
        if queue != Queue::Waiting {
            return invalid(format!(
                "S3: prefill of request {} which is not waiting",
                chunk.id
            ));
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

    let mut decoded = id_set(d.decode.len());
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

    let mut preempted = id_set(d.preempt.len());
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
    let mut pages: IdMap<u32> = id_map(leaves.len());
    pages.extend(leaves.iter().map(|l| (l.node, l.pages)));
    let mut seen = id_set(victims.len());
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
    check_range(
        id,
        "frequency_penalty",
        p.frequency_penalty,
        -2.0,
        2.0,
        false,
    )?;
    check_range(
        id,
        "repetition_penalty",
        p.repetition_penalty,
        0.0,
        100.0,
        true,
    )
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
    let mut by_id: IdMap<SamplePlan> = id_map(plans.len());
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

#[cfg(test)]
mod tests {
    use super::*;
    use minisgl_plugin_sdk::{Candidate, PrefillChunk, TokenBias};

    fn view(id: u64, prompt: u32, computed: u32, held: u32) -> RequestView {
        RequestView {
            id,
            prompt_len: prompt,
            computed_len: computed,
            pages_held: held,
            ..RequestView::default()
        }
    }

    /// Waiting 1 (100 tokens, new) and 2 (64 of 100 done, 4 pages); running
    /// 10 (computed 32: needs a page to decode) and 11 (computed 40).
    fn state() -> (Vec<RequestView>, Vec<RequestView>, Budget) {
        let waiting = vec![view(1, 100, 0, 0), view(2, 100, 64, 4)];
        let running = vec![view(10, 32, 32, 2), view(11, 40, 40, 3)];
        let budget = Budget {
            max_prefill_tokens: 128,
            max_running: 3,
            free_pages: 10,
            evictable_pages: 0,
            page_size: 16,
            ..Budget::default()
        };
        (waiting, running, budget)
    }

    fn check(d: ScheduleDecision) -> Result<(), String> {
        let (w, r, b) = state();
        schedule(&d, &w, &r, &b).map_err(|e| e.0)
    }

    fn prefill(chunks: &[(u64, u32)]) -> ScheduleDecision {
        ScheduleDecision {
            prefill: chunks
                .iter()
                .map(|&(id, tokens)| PrefillChunk { id, tokens })
                .collect(),
            ..ScheduleDecision::default()
        }
    }

    fn rule(r: Result<(), String>, prefix: &str) {
        match r {
            Err(e) => assert!(e.starts_with(prefix), "expected {prefix}, got {e}"),
            Ok(()) => panic!("expected {prefix}, decision accepted"),
        }
    }

    #[test]
    fn accepts_valid_mixed_step() {
        // 36 tokens finish request 2 (needs 3 pages: ceil(100/16)=7 - 4),
        // 16 tokens of request 1 (1 page), decode 10 (1 page) and 11.
        let mut d = prefill(&[(2, 36), (1, 16)]);
        d.decode = vec![10, 11];
        assert_eq!(check(d), Ok(()));
        assert_eq!(check(ScheduleDecision::default()), Ok(()));
    }

    #[test]
    fn scheduler_rules() {
        rule(check(prefill(&[(99, 1)])), "S1");
        let d = |decode: Vec<u64>, preempt: Vec<u64>| ScheduleDecision {
            prefill: vec![],
            decode,
            preempt,
        };
        rule(check(d(vec![10, 10], vec![])), "S2");
        rule(check(prefill(&[(1, 1), (1, 1)])), "S2");
        rule(check(d(vec![], vec![10, 10])), "S2");
        rule(check(prefill(&[(10, 1)])), "S3");
        rule(check(prefill(&[(1, 0)])), "S4");
        rule(check(prefill(&[(2, 37)])), "S4");
        rule(check(prefill(&[(1, 100), (2, 36)])), "S5");
        rule(check(d(vec![1], vec![])), "S6");
        rule(check(d(vec![], vec![1])), "S7");
        assert_eq!(check(d(vec![], vec![2, 10])), Ok(()));
        rule(check(d(vec![10], vec![10])), "S8");
        let mut p = prefill(&[(2, 1)]);
        p.preempt = vec![2];
        rule(check(p), "S8");
    }

    #[test]
    fn max_running_counts_only_completed_chunks() {
        let (w, r, mut b) = state();
        b.max_running = 2;
        // Request 2 would finish its input: 3 running > 2.
        let err = schedule(&prefill(&[(2, 36)]), &w, &r, &b).unwrap_err();
        assert!(err.0.starts_with("S9"), "{err}");
        // A partial chunk starts nobody running.
        assert!(schedule(&prefill(&[(2, 35)]), &w, &r, &b).is_ok());
        // Preempting a running request makes room.
        let mut d = prefill(&[(2, 36)]);
        d.preempt = vec![11];
        assert!(schedule(&d, &w, &r, &b).is_ok());
    }

    #[test]
    fn pages_fit_free_plus_evictable() {
        let (w, r, mut b) = state();
        b.free_pages = 3;
        b.evictable_pages = 1;
        // 36 tokens of request 2: 3 pages; decode of 10: 1 page. Exactly 4.
        let mut d = prefill(&[(2, 36)]);
        d.decode = vec![10, 11];
        assert!(schedule(&d, &w, &r, &b).is_ok());
        b.evictable_pages = 0;
        let err = schedule(&d, &w, &r, &b).unwrap_err();
        assert!(err.0.starts_with("S10"), "{err}");
        // A prefix hit counts as computed: request 1 with 96 cached tokens
        // needs ceil(100/16) = 7 pages minus the 6 it holds.
        let w = vec![RequestView {
            prefix_hit_len: 96,
            pages_held: 6,
            ..view(1, 100, 0, 6)
        }];
        b.free_pages = 1;
        assert!(schedule(&prefill(&[(1, 4)]), &w, &[], &b).is_ok());
        rule(
            schedule(&prefill(&[(1, 5)]), &w, &[], &b).map_err(|e| e.0),
            "S4",
        );
    }

    fn leaf(node: u64, pages: u32) -> CacheLeaf {
        CacheLeaf {
            node,
            pages,
            ..CacheLeaf::default()
        }
    }

    #[test]
    fn evictor_rules() {
        let leaves = [leaf(1, 2), leaf(2, 3), leaf(3, 4)];
        assert_eq!(victims(vec![2, 1, 3], &leaves, 4), Ok(vec![2, 1]));
        assert_eq!(victims(vec![], &leaves, 0), Ok(vec![]));
        assert_eq!(victims(vec![1, 2, 3], &leaves, 100), Ok(vec![1, 2, 3]));
        let e = |v: Vec<u64>, n| victims(v, &leaves, n).unwrap_err().0;
        assert!(e(vec![7], 1).starts_with("E1"));
        assert!(e(vec![1, 1], 1).starts_with("E2"));
        assert!(e(vec![1], 3).starts_with("E3"));
        assert!(e(vec![1, 2], 100).starts_with("E3"));
    }

    fn req(id: u64) -> SampleRequest {
        SampleRequest {
            id,
            ..SampleRequest::default()
        }
    }

    fn plan(id: u64) -> SamplePlan {
        SamplePlan {
            id,
            params: SamplingParams::default(),
            ..SamplePlan::default()
        }
    }

    #[test]
    fn sampler_plan_rules() {
        let reqs = [req(1), req(2)];
        let ok = plans(vec![plan(2), plan(1)], &reqs, 100).unwrap();
        assert_eq!(ok.iter().map(|p| p.id).collect::<Vec<_>>(), vec![1, 2]);
        let e = |mut p: SamplePlan, f: &dyn Fn(&mut SamplePlan)| {
            f(&mut p);
            plans(vec![p, plan(2)], &reqs, 100).unwrap_err().0
        };
        assert!(plans(vec![plan(1)], &reqs, 100)
            .unwrap_err()
            .0
            .starts_with("P1"));
        assert!(plans(vec![plan(1), plan(1)], &reqs, 100)
            .unwrap_err()
            .0
            .starts_with("P1"));
        assert!(plans(vec![plan(1), plan(3)], &reqs, 100)
            .unwrap_err()
            .0
            .starts_with("P1"));
        assert!(e(plan(1), &|p| p.params.temperature = f32::NAN).starts_with("P2"));
        assert!(e(plan(1), &|p| p.params.temperature = -0.5).starts_with("P2"));
        assert!(e(plan(1), &|p| p.params.top_p = 0.0).starts_with("P2"));
        assert!(e(plan(1), &|p| p.params.min_p = 1.5).starts_with("P2"));
        assert!(e(plan(1), &|p| p.params.presence_penalty = 2.5).starts_with("P2"));
        assert!(e(plan(1), &|p| p.params.frequency_penalty = f32::INFINITY).starts_with("P2"));
        assert!(e(plan(1), &|p| p.params.repetition_penalty = 0.0).starts_with("P2"));
        let bias = |token, bias| TokenBias { token, bias };
        assert!(e(plan(1), &|p| p.logit_bias = vec![bias(100, 1.0)]).starts_with("P3"));
        assert!(e(plan(1), &|p| p.logit_bias = vec![bias(5, 101.0)]).starts_with("P3"));
        assert!(e(plan(1), &|p| p.allowed_tokens = Some(vec![])).starts_with("P4"));
        assert!(e(plan(1), &|p| p.allowed_tokens = Some(vec![3, 100])).starts_with("P4"));
        assert!(e(plan(1), &|p| p.pick_from_top = 65).starts_with("P5"));
        let mut good = plan(1);
        good.pick_from_top = 64;
        good.allowed_tokens = Some(vec![0, 99]);
        good.logit_bias = vec![bias(99, -100.0)];
        good.params.temperature = 0.0;
        assert!(plans(vec![good, plan(2)], &reqs, 100).is_ok());
    }

    #[test]
    fn sampler_pick_rules() {
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
        let lists = [list(1, &[5, 6]), list(2, &[7])];
        assert!(picks(&[6, 7], &lists).is_ok());
        assert!(picks(&[6], &lists).unwrap_err().0.starts_with("K1"));
        assert!(picks(&[6, 5], &lists).unwrap_err().0.starts_with("K2"));
    }
}
