//! The engine loop against the hash model (`support/hash_model.rs`),
//! whose next token is a hash of the whole sequence read back through the
//! page table: continuous batching, chunked prefill, paging, prefix caching,
//! eviction, preemption and overlap must all leave every request's output
//! exactly what the model gives for that request alone.

#[path = "support/hash_model.rs"]
mod hash_model;

use std::sync::Arc;
use std::time::Duration;

use hash_model::HashRunner;
use minisgl::engine::{
    CacheMode, Engine, EngineConfig, EngineMetrics, Event, FinishReason, GenerateRequest,
    SubmitError,
};
use minisgl::plugin::PluginSet;
use minisgl_plugin_sdk::SamplingParams;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const VOCAB: u32 = 1000;

struct Setup {
    num_pages: u32,
    page_size: u32,
    chunk: u32,
    max_running: u32,
    cache: CacheMode,
    overlap: bool,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            num_pages: 4096,
            page_size: 16,
            chunk: 4096,
            max_running: 64,
            cache: CacheMode::Radix,
            overlap: true,
        }
    }
}

fn engine(s: &Setup) -> Engine {
    let runner = HashRunner::new(s.num_pages, s.page_size, VOCAB);
    engine_with(s, runner)
}

fn engine_with(s: &Setup, runner: HashRunner) -> Engine {
    let cfg = EngineConfig {
        max_running: s.max_running,
        max_prefill_tokens: s.chunk,
        cache: s.cache,
        overlap: s.overlap,
        ..EngineConfig::default()
    };
    Engine::new(Box::new(runner), Arc::new(PluginSet::native()), cfg, vec![]).unwrap()
}

/// Random prompts; with `shared`, many start with one of a few long prefixes.
fn workload(
    seed: u64,
    n: usize,
    max_prompt: usize,
    max_new: u32,
    shared: bool,
) -> Vec<GenerateRequest> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let prefixes: Vec<Vec<u32>> = (0..3)
        .map(|_| {
            (0..rng.random_range(20..60))
                .map(|_| rng.random_range(0..VOCAB))
                .collect()
        })
        .collect();
    (0..n)
        .map(|_| {
            let mut prompt = Vec::new();
            if shared && rng.random_bool(0.8) {
                prompt.extend_from_slice(&prefixes[rng.random_range(0..prefixes.len())]);
            }
            let len = rng.random_range(1..=max_prompt);
            prompt.extend((0..len).map(|_| rng.random_range(0..VOCAB)));
            GenerateRequest::greedy(prompt, rng.random_range(1..=max_new))
        })
        .collect()
}

/// Every output equals the model's output for that request alone, and
/// nothing leaked: no page is left owned by a request.
fn check_outputs(engine: &Engine, reqs: &[GenerateRequest]) -> EngineMetrics {
    let outs = engine.generate(reqs.to_vec());
    for (i, (req, out)) in reqs.iter().zip(&outs).enumerate() {
        assert_eq!(out.error, None, "request {i}");
        let want = HashRunner::reference(&req.prompt_tokens, req.max_new_tokens, VOCAB);
        assert_eq!(
            out.tokens,
            want,
            "request {i} (prompt {} tokens)",
            req.prompt_tokens.len()
        );
        assert_eq!(out.finish_reason, FinishReason::Length);
        assert_eq!(out.usage.completion_tokens, req.max_new_tokens);
        assert_eq!(out.usage.prompt_tokens as usize, req.prompt_tokens.len());
    }
    let m = settled_metrics(engine);
    assert_no_leak(&m);
    m
}

/// Metrics once the loop has published its state after the last request.
fn settled_metrics(engine: &Engine) -> EngineMetrics {
    for _ in 0..200 {
        let m = engine.metrics();
        if m.running == 0 && m.queue_len == 0 && m.kv_pages_used == 0 {
            return m;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    engine.metrics()
}

fn assert_no_leak(m: &EngineMetrics) {
    assert_eq!(m.kv_pages_used, 0, "pages still owned by requests: {m:?}");
    assert_eq!(
        m.kv_pages_free + m.kv_pages_cached,
        m.kv_pages_total,
        "{m:?}"
    );
}

#[test]
fn batching_matches_alone_across_page_sizes_chunks_and_overlap() {
    let reqs = workload(1, 40, 80, 30, false);
    for page_size in [1, 16, 256] {
        for chunk in [7, 64, 4096] {
            for overlap in [true, false] {
                let s = Setup {
                    page_size,
                    num_pages: 8192 / page_size + 64,
                    chunk,
                    overlap,
                    ..Setup::default()
                };
                let m = check_outputs(&engine(&s), &reqs);
                assert_eq!(m.requests_done, reqs.len() as u64);
                assert_eq!(m.preemptions, 0);
            }
        }
    }
}

#[test]
fn shared_prefixes_hit_the_radix_cache_and_outputs_stay_exact() {
    let reqs = workload(2, 48, 30, 20, true);
    for page_size in [1, 4, 16] {
        for overlap in [true, false] {
            let mut hit = [0.0; 2];
            for (i, cache) in [CacheMode::Radix, CacheMode::Naive].into_iter().enumerate() {
                let s = Setup {
                    page_size,
                    chunk: 32,
                    max_running: 8,
                    cache,
                    overlap,
                    ..Setup::default()
                };
                let e = engine(&s);
                let m = check_outputs(&e, &reqs);
                hit[i] = m.cache_hit_rate();
                // Run the batch again: now everything is cached.
                let again = check_outputs(&e, &reqs);
                if cache == CacheMode::Radix {
                    assert!(again.cache_hit_tokens > m.cache_hit_tokens);
                }
            }
            assert!(
                hit[0] > 0.2,
                "radix hit rate {} (page size {page_size})",
                hit[0]
            );
            assert_eq!(hit[1], 0.0);
        }
    }
}

#[test]
fn tight_kv_budget_forces_eviction_and_preemption() {
    // 30 pages of 4 tokens = 120 tokens; requests need up to 60 + 40.
    let reqs = workload(3, 32, 60, 40, true);
    for overlap in [true, false] {
        for page_size in [1, 4] {
            let s = Setup {
                page_size,
                num_pages: 120 / page_size,
                chunk: 24,
                max_running: 16,
                overlap,
                ..Setup::default()
            };
            let m = check_outputs(&engine(&s), &reqs);
            assert_eq!(m.requests_done, reqs.len() as u64);
            assert!(m.preemptions > 0, "no preemption: {m:?}");
            assert!(m.evicted_pages > 0, "no eviction: {m:?}");
        }
    }
}

#[test]
fn naive_cache_with_tight_budget() {
    let reqs = workload(4, 24, 50, 30, false);
    for overlap in [true, false] {
        let s = Setup {
            page_size: 8,
            num_pages: 12,
            chunk: 16,
            cache: CacheMode::Naive,
            overlap,
            ..Setup::default()
        };
        let m = check_outputs(&engine(&s), &reqs);
        assert!(m.preemptions > 0);
        assert_eq!(m.kv_pages_cached, 0);
    }
}

#[test]
fn stop_tokens_and_eos_end_requests_under_overlap() {
    for overlap in [true, false] {
        let s = Setup {
            overlap,
            ..Setup::default()
        };
        let runner = HashRunner::new(s.num_pages, s.page_size, VOCAB);
        let prompt: Vec<u32> = (0..20).collect();
        let reference = HashRunner::reference(&prompt, 40, VOCAB);
        // The 6th generated token is an EOS id; the 11th a stop id.
        let eos = reference[5];
        let stop = reference[10];
        let first_eos = reference.iter().position(|&t| t == eos).unwrap();
        let cfg = EngineConfig {
            overlap,
            ..EngineConfig::default()
        };
        let e = Engine::new(
            Box::new(runner),
            Arc::new(PluginSet::native()),
            cfg,
            vec![eos],
        )
        .unwrap();
        let mut with_eos = GenerateRequest::greedy(prompt.clone(), 40);
        let mut ignoring = with_eos.clone();
        ignoring.ignore_eos = true;
        ignoring.stop_token_ids = vec![stop];
        with_eos.stop_token_ids = vec![];
        // Decoy requests keep the batch busy so the stop happens mid-overlap.
        let mut batch = vec![with_eos, ignoring];
        batch.extend(workload(5, 8, 30, 40, false));
        let outs = e.generate(batch);
        assert_eq!(outs[0].tokens, reference[..first_eos]);
        assert_eq!(outs[0].finish_reason, FinishReason::Stop);
        assert_eq!(outs[0].usage.completion_tokens as usize, first_eos + 1);
        let first_stop = reference.iter().position(|&t| t == stop).unwrap();
        assert_eq!(outs[1].tokens, reference[..first_stop]);
        assert_eq!(outs[1].finish_reason, FinishReason::Stop);
        assert_no_leak(&settled_metrics(&e));
    }
}

#[test]
fn seeded_sampling_is_identical_with_and_without_overlap() {
    let mut reqs = workload(6, 24, 40, 25, true);
    for (i, r) in reqs.iter_mut().enumerate() {
        r.params = SamplingParams {
            temperature: 0.8,
            seed: Some(i as u64),
            ..SamplingParams::default()
        };
        r.logprobs = Some(2);
    }
    let run = |overlap: bool| {
        let s = Setup {
            overlap,
            chunk: 50,
            page_size: 4,
            num_pages: 200,
            ..Setup::default()
        };
        let e = engine(&s);
        let outs = e.generate(reqs.clone());
        assert_no_leak(&settled_metrics(&e));
        outs
    };
    let (a, b) = (run(true), run(false));
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.tokens, y.tokens);
        assert_eq!(x.logprobs.len(), x.tokens.len());
        assert_eq!(x.top_logprobs.len(), x.tokens.len());
        assert!(x.top_logprobs.iter().all(|t| t.len() == 2));
    }
    // Sampling actually happened (not the greedy path).
    let greedy = HashRunner::reference(&reqs[0].prompt_tokens, reqs[0].max_new_tokens, VOCAB);
    assert_ne!(a[0].tokens, greedy);
}

#[test]
fn streaming_abort_and_submit_errors() {
    let mut runner = HashRunner::new(256, 4, VOCAB);
    runner.step_delay = Duration::from_millis(2);
    let cfg = EngineConfig {
        max_waiting: 3,
        max_running: 2,
        ..EngineConfig::default()
    };
    let e = Engine::new(Box::new(runner), Arc::new(PluginSet::native()), cfg, vec![]).unwrap();
    let h = e.handle().clone();

    let bad = GenerateRequest::greedy(vec![1, VOCAB + 5], 4);
    match h.submit(bad) {
        Err(SubmitError::Invalid(msg)) => assert!(msg.contains("prompt_tokens[1] = 1005"), "{msg}"),
        other => panic!("{other:?}"),
    }
    let too_long = GenerateRequest::greedy(vec![1; 1000], 100);
    assert!(
        matches!(h.submit(too_long), Err(SubmitError::Invalid(m)) if m.contains("context limit 1024"))
    );
    let zero = GenerateRequest::greedy(vec![1], 0);
    assert!(matches!(h.submit(zero), Err(SubmitError::Invalid(m)) if m.contains("max_new_tokens")));

    // A long request, aborted after a few tokens.
    let (id, mut rx) = h.submit(GenerateRequest::greedy(vec![3; 10], 500)).unwrap();
    let mut got = 0;
    while got < 3 {
        match rx.blocking_recv() {
            Some(Event::Token { .. }) => got += 1,
            other => panic!("{other:?}"),
        }
    }
    h.abort(id);
    loop {
        match rx.blocking_recv() {
            Some(Event::Token { .. }) => {}
            Some(Event::Finished { reason, usage }) => {
                assert_eq!(reason, FinishReason::Abort);
                assert!(usage.completion_tokens >= 3 && usage.completion_tokens < 500);
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    // A dropped receiver aborts its request too.
    let (_, rx) = h.submit(GenerateRequest::greedy(vec![4; 10], 500)).unwrap();
    drop(rx);
    // The queue bound: fill it faster than the engine admits.
    let mut held = Vec::new();
    let mut full = false;
    for _ in 0..20 {
        match h.submit(GenerateRequest::greedy(vec![5; 10], 50)) {
            Ok(x) => held.push(x),
            Err(SubmitError::QueueFull { limit }) => {
                assert_eq!(limit, 3);
                full = true;
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(full, "queue never filled");
    for (_, mut rx) in held {
        while let Some(ev) = rx.blocking_recv() {
            if matches!(ev, Event::Finished { .. }) {
                break;
            }
        }
    }
    let m = settled_metrics(&e);
    assert_no_leak(&m);
    assert!(m.requests_aborted >= 2);
    h.shutdown();
    assert!(matches!(
        h.submit(GenerateRequest::greedy(vec![1], 1)),
        Err(SubmitError::ShuttingDown)
    ));
}

#[test]
fn shutdown_aborts_requests_in_flight() {
    let mut runner = HashRunner::new(256, 4, VOCAB);
    runner.step_delay = Duration::from_millis(1);
    let e = Engine::new(
        Box::new(runner),
        Arc::new(PluginSet::native()),
        EngineConfig::default(),
        vec![],
    )
    .unwrap();
    let h = e.handle().clone();
    let (_, mut rx) = h.submit(GenerateRequest::greedy(vec![7; 10], 900)).unwrap();
    assert!(matches!(rx.blocking_recv(), Some(Event::Token { .. })));
    h.shutdown();
    let mut last = None;
    while let Some(ev) = rx.blocking_recv() {
        last = Some(ev);
    }
    assert!(matches!(
        last,
        Some(Event::Finished {
            reason: FinishReason::Abort,
            ..
        })
    ));
}

/// A sampler policy that asks for top-4 candidate lists and always picks the
/// second one: the host must use the pick (not the runner's own top token),
/// so under overlap the next decode cannot reuse the runner's token.
struct PickSecond(minisgl::scheduler::NativePolicy);

impl minisgl::scheduler::Policy for PickSecond {
    fn schedule(
        &self,
        w: &[minisgl_plugin_sdk::RequestView],
        r: &[minisgl_plugin_sdk::RequestView],
        b: &minisgl_plugin_sdk::Budget,
    ) -> minisgl_plugin_sdk::ScheduleDecision {
        self.0.schedule(w, r, b)
    }
    fn pick_victims(&self, l: &[minisgl_plugin_sdk::CacheLeaf], n: u32) -> Vec<u64> {
        // Hostile: names the root and nonsense first; the host must refuse them.
        let mut v = vec![0, u64::MAX];
        v.extend(self.0.pick_victims(l, n));
        v
    }
    fn plan(
        &self,
        reqs: &[minisgl_plugin_sdk::SampleRequest],
        vocab: u32,
    ) -> Vec<minisgl_plugin_sdk::SamplePlan> {
        let mut plans = self.0.plan(reqs, vocab);
        for p in &mut plans {
            p.pick_from_top = 4;
        }
        plans
    }
    fn pick(&self, lists: &[minisgl_plugin_sdk::CandidateList]) -> Vec<u32> {
        lists.iter().map(|l| l.candidates[1].token).collect()
    }
}

#[test]
fn sampler_picks_are_used_and_overlap_waits_for_them() {
    use crate::hash_model::hash;
    let mut reqs = workload(8, 16, 30, 12, true);
    for r in &mut reqs {
        r.params.temperature = 0.7;
    }
    for overlap in [true, false] {
        let runner = HashRunner::new(60, 4, VOCAB);
        let cfg = EngineConfig {
            overlap,
            max_prefill_tokens: 16,
            ..EngineConfig::default()
        };
        let policy = Arc::new(PickSecond(Default::default()));
        let handle = minisgl::engine::spawn_with_policy(
            Box::new(runner),
            policy,
            Arc::new(PluginSet::native()),
            cfg,
            vec![],
        )
        .unwrap();
        let e = Engine::from_handle(handle);
        let outs = e.generate(reqs.clone());
        for (req, out) in reqs.iter().zip(&outs) {
            let mut seq = req.prompt_tokens.clone();
            for _ in 0..req.max_new_tokens {
                seq.push(((hash(&seq) + 7919) % u64::from(VOCAB)) as u32);
            }
            assert_eq!(
                out.tokens,
                seq[req.prompt_tokens.len()..],
                "overlap {overlap}"
            );
        }
        let m = settled_metrics(&e);
        assert_no_leak(&m);
        assert!(
            m.preemptions > 0,
            "the budget should force preemption: {m:?}"
        );
        assert!(m.decision_fixups > 0, "hostile victims were not refused");
    }
}
