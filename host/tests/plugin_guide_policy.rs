//! A policy written only from `docs/plugin-guide.md` (its contract section:
//! rules S1-S10 and E1-E3, the cached-prefix page charge, the meaning of
//! `max-running`), without the built-in's helpers, run through at least
//! 10,000 random scheduling decisions inside the real engine loop and
//! 10,000 of `plugin check`'s synthetic cases. The contract is exact when
//! such a policy gets zero invalid decisions and the host corrects none of
//! them (`decision_fixups == 0`), and every request still gets exactly the
//! tokens the model gives it alone.

#[path = "support/hash_model.rs"]
mod hash_model;
#[path = "support/plugin.rs"]
mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use hash_model::HashRunner;
use minisgl::engine::{spawn_with_policy, CacheMode, Engine, EngineConfig, GenerateRequest};
use minisgl::plugin::{validate, PluginSet};
use minisgl::scheduler::Policy;
use minisgl_plugin_sdk::{
    Budget, CacheLeaf, CandidateList, PrefillChunk, RequestView, SamplePlan, SampleRequest,
    Sampler, ScheduleDecision,
};
use minisgl_policies::DefaultSampler;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use support::synth;

const VOCAB: u32 = 500;

// ------------------------------------------------- the policy, from the guide

/// Pages a chunk of `tokens` is charged (guide, rule S10): computed is
/// `max(computed-len, prefix-hit-len)`, and a request holding no pages is
/// charged its cached prefix too.
fn chunk_pages(r: &RequestView, tokens: u32, page_size: u64) -> u64 {
    let done = u64::from(r.computed_len.max(r.prefix_hit_len));
    (done + u64::from(tokens))
        .div_ceil(page_size)
        .saturating_sub(u64::from(r.pages_held))
}

/// A decode needs a page when the last one is full (S10).
fn decode_pages(r: &RequestView, page_size: u64) -> u64 {
    u64::from(u64::from(r.computed_len) % page_size == 0)
}

/// First come, first served, from the guide alone.
fn guide_schedule(
    waiting: &[RequestView],
    running: &[RequestView],
    b: &Budget,
) -> ScheduleDecision {
    let ps = u64::from(b.page_size.max(1));
    let mut pages = u64::from(b.free_pages) + u64::from(b.evictable_pages);
    let mut d = ScheduleDecision::default();

    // Decode every running request; preempt the newest while pages are
    // short (a preempted request is not decoded: S8; released pages do not
    // count this step: S10).
    let mut decoding: Vec<&RequestView> = running.iter().collect();
    let mut need: u64 = decoding.iter().map(|r| decode_pages(r, ps)).sum();
    while need > pages {
        let r = decoding.pop().expect("need > 0 implies a decode");
        need -= decode_pages(r, ps);
        d.preempt.push(r.id);
    }
    pages -= need;
    d.decode = decoding.iter().map(|r| r.id).collect();

    // Admit in arrival order under the token budget (S5), the pages (S10)
    // and the running slots (S9: views − preempted + completing).
    let mut slots = u64::from(b.max_running).saturating_sub(decoding.len() as u64);
    let mut tokens_left = b.max_prefill_tokens;
    for r in waiting {
        let remaining = r.prompt_len - r.computed_len.max(r.prefix_hit_len);
        if tokens_left == 0 {
            break;
        }
        let mut t = remaining.min(tokens_left);
        if t == remaining && slots == 0 {
            // Completing would need a slot; stop one token short.
            t = remaining - 1;
        }
        while t > 0 && chunk_pages(r, t, ps) > pages {
            // The most tokens that fit the pages left.
            let fit = ((u64::from(r.pages_held) + pages) * ps)
                .saturating_sub(u64::from(r.computed_len.max(r.prefix_hit_len)));
            t = t.min(fit as u32);
            if chunk_pages(r, t, ps) > pages {
                t = 0;
            }
        }
        if t == 0 {
            break;
        }
        pages -= chunk_pages(r, t, ps);
        tokens_left -= t;
        if t == remaining {
            slots -= 1;
        }
        d.prefill.push(PrefillChunk {
            id: r.id,
            tokens: t,
        });
    }

    // Nothing to do but memory held by half-prefilled requests: release the
    // newest holder (S7) so the oldest can go on; never idle with work left.
    if d.prefill.is_empty() && d.decode.is_empty() && d.preempt.is_empty() {
        if let Some(r) = waiting.iter().skip(1).rev().find(|r| r.pages_held > 0) {
            d.preempt.push(r.id);
        }
    }
    d
}

/// Least recently used first until the pages are covered (E1-E3).
fn guide_victims(leaves: &[CacheLeaf], pages_needed: u32) -> Vec<u64> {
    let mut order: Vec<&CacheLeaf> = leaves.iter().collect();
    order.sort_by_key(|l| (l.last_access_us, l.node));
    let mut covered = 0u64;
    let mut out = Vec::new();
    for l in order {
        if covered >= u64::from(pages_needed) {
            break;
        }
        covered += u64::from(l.pages);
        out.push(l.node);
    }
    out
}

// ------------------------------------------------------------ the harness

/// The guide policy behind the engine's policy trait, checking every
/// decision with the host's one validator and counting the rejections.
#[derive(Default)]
struct Checked {
    decisions: AtomicU64,
    invalid: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl Checked {
    fn reject(&self, e: String) {
        self.invalid.fetch_add(1, Ordering::Relaxed);
        self.first_error.lock().unwrap().get_or_insert(e);
    }
}

impl Policy for Checked {
    fn schedule(&self, w: &[RequestView], r: &[RequestView], b: &Budget) -> ScheduleDecision {
        self.decisions.fetch_add(1, Ordering::Relaxed);
        let d = guide_schedule(w, r, b);
        if let Err(e) = validate::schedule(&d, w, r, b) {
            self.reject(e.0);
        }
        d
    }

    fn pick_victims(&self, leaves: &[CacheLeaf], pages_needed: u32) -> Vec<u64> {
        let v = guide_victims(leaves, pages_needed);
        if let Err(e) = validate::victims(v.clone(), leaves, pages_needed) {
            self.reject(e.0);
        }
        v
    }

    fn plan(&self, requests: &[SampleRequest], vocab: u32) -> Vec<SamplePlan> {
        DefaultSampler.plan(requests, vocab)
    }

    fn pick(&self, lists: &[CandidateList]) -> Vec<u32> {
        DefaultSampler.pick(lists)
    }
}

/// Random requests: prompts of 1-120 tokens, a third behind one of two
/// shared prefixes (radix hits, locked and evictable pages), 1-24 new tokens.
fn workload(rng: &mut ChaCha8Rng, n: usize) -> Vec<GenerateRequest> {
    let prefixes: Vec<Vec<u32>> = (0..2)
        .map(|_| (0..40).map(|_| rng.random_range(0..VOCAB)).collect())
        .collect();
    (0..n)
        .map(|_| {
            let mut prompt = if rng.random_bool(0.35) {
                prefixes[rng.random_range(0..2)].clone()
            } else {
                Vec::new()
            };
            let len = rng.random_range(1..=120);
            prompt.extend((0..len).map(|_| rng.random_range(0..VOCAB)));
            GenerateRequest::greedy(prompt, rng.random_range(1..=24))
        })
        .collect()
}

/// Metrics once the loop has published the state after the last request.
fn settled(engine: &Engine) -> minisgl::engine::EngineMetrics {
    for _ in 0..400 {
        let m = engine.metrics();
        if m.running == 0 && m.queue_len == 0 && m.kv_pages_used == 0 {
            return m;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    engine.metrics()
}

#[test]
fn a_policy_written_from_the_guide_needs_no_correction_in_10000_engine_steps() {
    let mut rng = ChaCha8Rng::seed_from_u64(14);
    let (mut decisions, mut preemptions, mut evicted, mut run) = (0u64, 0u64, 0u64, 0);
    while decisions < 10_000 {
        let page_size = [1u32, 4, 16][run % 3];
        // Tight pools: the largest request (160 + 24 tokens) fits alone, a
        // few do not fit together, so decodes preempt and the cache evicts.
        let num_pages = (200u32.div_ceil(page_size) + 2) * rng.random_range(1..=3);
        let cfg = EngineConfig {
            max_running: rng.random_range(1..=12),
            max_prefill_tokens: rng.random_range(16..=256),
            cache: if run % 4 == 3 {
                CacheMode::Naive
            } else {
                CacheMode::Radix
            },
            overlap: run % 2 == 0,
            ..EngineConfig::default()
        };
        let policy = Arc::new(Checked::default());
        let runner = HashRunner::new(num_pages, page_size, VOCAB);
        let handle = spawn_with_policy(
            Box::new(runner),
            policy.clone(),
            Arc::new(PluginSet::native()),
            cfg.clone(),
            vec![],
        )
        .unwrap();
        let engine = Engine::from_handle(handle);
        let reqs = workload(&mut rng, 40);
        let outs = engine.generate(reqs.clone());
        for (i, (req, out)) in reqs.iter().zip(&outs).enumerate() {
            assert_eq!(out.error, None, "run {run}, request {i}");
            let want = HashRunner::reference(&req.prompt_tokens, req.max_new_tokens, VOCAB);
            assert_eq!(out.tokens, want, "run {run}, request {i}: {cfg:?}");
        }
        let m = settled(&engine);
        assert_eq!(
            policy.invalid.load(Ordering::Relaxed),
            0,
            "run {run} ({cfg:?}, {num_pages} pages of {page_size}): {:?}",
            policy.first_error.lock().unwrap()
        );
        assert_eq!(
            m.decision_fixups, 0,
            "run {run} ({cfg:?}, {num_pages} pages of {page_size}): the host corrected a \
             valid decision: {:?}",
            m.fixups
        );
        decisions += policy.decisions.load(Ordering::Relaxed);
        preemptions += m.preemptions;
        evicted += m.evicted_pages;
        run += 1;
        engine.shutdown();
    }
    // The runs must have exercised the hard parts, or zero means little.
    assert!(preemptions > 0, "no preemption in {run} runs");
    assert!(evicted > 0, "no eviction in {run} runs");
    eprintln!("{decisions} decisions in {run} runs: {preemptions} preemptions, {evicted} pages evicted, 0 fixups");
}

#[test]
fn a_policy_written_from_the_guide_passes_10000_check_cases() {
    // The generator of `minisgl-host plugin check`.
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    for case in 0..10_000 {
        let input = synth::schedule_input(&mut rng, 64, false);
        let d = guide_schedule(&input.waiting, &input.running, &input.budget);
        if let Err(e) = validate::schedule(&d, &input.waiting, &input.running, &input.budget) {
            panic!("case {case}: {e}");
        }
        let (leaves, need) = synth::evict_input(&mut rng, 64, false);
        let v = guide_victims(&leaves, need);
        if let Err(e) = validate::victims(v, &leaves, need) {
            panic!("evict case {case}: {e}");
        }
    }
}
