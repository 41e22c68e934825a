//! Hostile guests (tests/guests/*): a plugin that loops forever, traps,
//! allocates without bound, or returns invalid decisions of every kind the
//! host checks. Each failure is counted by cause, the call is answered by the
//! native built-in, nothing panics, and later calls are still served.

#[path = "support/plugin.rs"]
mod support;

use std::time::{Duration, Instant};

use minisgl::plugin::clock::thread_cpu_time;
use minisgl::plugin::{FailureCause, FailureMode, PluginError, PluginKind, PluginSet};
use minisgl_plugin_sdk::{
    Budget, CacheLeaf, Candidate, CandidateList, Evictor, RequestView, Sampler, Scheduler,
};
use minisgl_policies::{DefaultSampler, Fcfs, Lru};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

fn stats(set: &PluginSet, kind: PluginKind) -> minisgl::plugin::SlotStats {
    set.stats().remove(kind as usize)
}

fn view(id: u64, prompt: u32, computed: u32, page_size: u32) -> RequestView {
    RequestView {
        id,
        arrival_us: id,
        prompt_len: prompt,
        computed_len: computed,
        generated_len: u32::from(computed >= prompt),
        max_new_tokens: 64,
        pages_held: computed.div_ceil(page_size),
        ..RequestView::default()
    }
}

/// Two waiting (100-token prompts) and two running requests.
fn scene(step: u64) -> (Vec<RequestView>, Vec<RequestView>, Budget) {
    let waiting = vec![view(1, 100, 0, 16), view(2, 100, 0, 16)];
    let running = vec![view(10, 40, 48, 16), view(11, 40, 64, 16)];
    let budget = Budget {
        max_prefill_tokens: 150,
        max_running: if step % 10 == 7 { 2 } else { 8 },
        free_pages: if step % 10 == 9 { 5 } else { 1000 },
        evictable_pages: 0,
        page_size: 16,
        now_us: 1_000,
        step,
    };
    (waiting, running, budget)
}

#[test]
fn infinite_loop_is_cut_within_twice_its_deadline() {
    // The deadline is CPU time of the thread running the guest: measured
    // the same way here, so a loaded machine does not move the bounds.
    let deadline = Duration::from_millis(100);
    let cfg = support::config(deadline, 64 << 20, FailureMode::Fallback);
    let set = support::load(PluginKind::Scheduler, "minisgl-guest-loop", cfg);
    for step in 0..3 {
        let (w, r, b) = scene(step);
        let start = Instant::now();
        let cpu0 = thread_cpu_time().expect("a thread CPU clock");
        let d = set.schedule(&w, &r, &b);
        let cpu = thread_cpu_time().unwrap() - cpu0;
        let took = start.elapsed();
        assert!(
            cpu >= deadline,
            "cut after {cpu:?} of CPU, before the deadline"
        );
        assert!(
            cpu < 2 * deadline,
            "cut after {cpu:?} of CPU ({took:?} wall), deadline {deadline:?}"
        );
        assert!(
            took >= deadline && took < Duration::from_secs(1),
            "{took:?} wall"
        );
        assert_eq!(d, Fcfs.schedule(&w, &r, &b));
    }
    let s = stats(&set, PluginKind::Scheduler);
    assert_eq!(s.failures.timeout, 3, "{s:?}");
    assert_eq!(s.fallbacks, 3, "{s:?}");
    assert_eq!(s.plugin, "guest-loop", "the plugin stays loaded");
}

#[test]
fn a_crash_report_slower_than_the_deadline_is_a_trap_not_a_timeout() {
    // 10 ms of CPU allowed; the guest spends 40 ms writing its report to
    // stderr before it panics (the wall bound is 250 ms).
    let cfg = support::config(Duration::from_millis(10), 64 << 20, FailureMode::Fallback);
    let set = support::load(PluginKind::Scheduler, "minisgl-guest-slow-crash", cfg);
    for step in 0..4 {
        let (w, r, mut b) = scene(step);
        b.now_us = 40_000;
        assert_eq!(set.schedule(&w, &r, &b), Fcfs.schedule(&w, &r, &b));
    }
    let s = stats(&set, PluginKind::Scheduler);
    assert_eq!((s.failures.trap, s.failures.timeout), (2, 0), "{s:?}");
    let last = s.last_failure.unwrap_or_default();
    assert!(
        last.contains("formatting a crash report") && last.contains("deliberate crash"),
        "the guest's report is in the failure detail: {last}"
    );
}

#[test]
fn trap_is_counted_and_instance_recreated() {
    let set = support::load_default(PluginKind::Scheduler, "minisgl-guest-trap");
    // The guest traps on odd steps and answers like FCFS on even ones: every
    // even step after a trap is served by a fresh instance.
    for step in 0..20 {
        let (w, r, b) = scene(step);
        assert_eq!(set.schedule(&w, &r, &b), Fcfs.schedule(&w, &r, &b));
    }
    let s = stats(&set, PluginKind::Scheduler);
    assert_eq!(
        (s.calls, s.failures.trap, s.fallbacks),
        (20, 10, 10),
        "{s:?}"
    );
    assert_eq!(s.failures.total(), 10, "{s:?}");
}

#[test]
fn unbounded_allocation_hits_the_memory_cap() {
    let cfg = support::config(Duration::from_secs(5), 32 << 20, FailureMode::Fallback);
    let set = support::load(PluginKind::Scheduler, "minisgl-guest-alloc", cfg);
    for step in 0..6 {
        let (w, r, b) = scene(step);
        assert_eq!(set.schedule(&w, &r, &b), Fcfs.schedule(&w, &r, &b));
    }
    let s = stats(&set, PluginKind::Scheduler);
    assert_eq!((s.failures.memory, s.fallbacks), (3, 3), "{s:?}");
    assert_eq!(s.failures.total(), 3, "{s:?}");
}

#[test]
fn invalid_schedules_of_every_kind_are_rejected() {
    let set = support::load_default(PluginKind::Scheduler, "minisgl-guest-invalid-scheduler");
    // The rule each step's decision breaks (see the guest and plugin::validate).
    let rules = ["S1", "S2", "S3", "S4", "S4", "S5", "S6", "S9", "S8", "S10"];
    for (step, rule) in rules.iter().enumerate() {
        let step = step as u64;
        let (w, r, b) = scene(step);
        let d = set.schedule(&w, &r, &b);
        assert_eq!(d, Fcfs.schedule(&w, &r, &b), "step {step}");
        let s = stats(&set, PluginKind::Scheduler);
        assert_eq!(s.failures.invalid, step + 1, "step {step} accepted: {s:?}");
        let last = s.last_failure.unwrap_or_default();
        assert!(
            last.starts_with(&format!("invalid decision: {rule}:")),
            "step {step}: expected {rule}, got {last}"
        );
    }
    let s = stats(&set, PluginKind::Scheduler);
    assert_eq!((s.calls, s.fallbacks, s.failures.total()), (10, 10, 10));
}

#[test]
fn invalid_victims_are_rejected() {
    let set = support::load_default(PluginKind::Evictor, "minisgl-guest-invalid-evictor");
    // Node 4242 exists but is locked, so it is never offered.
    let leaves: Vec<CacheLeaf> = (1..=6)
        .map(|node| CacheLeaf {
            node,
            pages: 2,
            last_access_us: 100 - node,
            ..CacheLeaf::default()
        })
        .collect();
    let rules = ["E1", "E1", "E2", "E3"];
    for (i, needed) in (4..8).enumerate() {
        let v = set.pick_victims(&leaves, needed);
        assert_eq!(v, Lru.pick_victims(&leaves, needed));
        let s = stats(&set, PluginKind::Evictor);
        assert_eq!(s.failures.invalid, i as u64 + 1);
        let last = s.last_failure.unwrap_or_default();
        assert!(
            last.starts_with(&format!("invalid decision: {}:", rules[i])),
            "{last}"
        );
    }
}

#[test]
fn invalid_plans_and_picks_are_rejected() {
    let set = support::load_default(PluginKind::Sampler, "minisgl-guest-invalid-sampler");
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let mut expected = 0;
    // vocab % 6 selects the guest's mistake.
    let rules = ["P3", "P4", "P2", "P5", "P1", "P1"];
    for vocab in 600..606 {
        let reqs = support::synth::sample_input(&mut rng, 4, true, vocab);
        assert_eq!(set.plan(&reqs, vocab), DefaultSampler.plan(&reqs, vocab));
        expected += 1;
        let s = stats(&set, PluginKind::Sampler);
        assert_eq!(s.failures.invalid, expected);
        let rule = rules[(vocab % 6) as usize];
        let last = s.last_failure.unwrap_or_default();
        assert!(
            last.starts_with(&format!("invalid decision: {rule}:")),
            "{last}"
        );
    }
    let lists = vec![CandidateList {
        id: 3,
        seed: 11,
        candidates: vec![
            Candidate {
                token: 5,
                logprob: -0.1,
            },
            Candidate {
                token: 9,
                logprob: -2.5,
            },
        ],
    }];
    assert_eq!(set.pick(&lists), DefaultSampler.pick(&lists));
    let s = stats(&set, PluginKind::Sampler);
    assert_eq!(
        (s.failures.invalid, s.fallbacks),
        (expected + 1, expected + 1)
    );
    assert!(s
        .last_failure
        .unwrap_or_default()
        .starts_with("invalid decision: K2:"));
}

#[test]
fn fail_mode_retires_the_plugin() {
    let cfg = support::config(Duration::from_secs(1), 64 << 20, FailureMode::Fail);
    let set = support::load(
        PluginKind::Scheduler,
        "minisgl-guest-invalid-scheduler",
        cfg,
    );
    assert!(set.check().is_ok());
    for step in 0..3 {
        let (w, r, b) = scene(step);
        assert_eq!(set.schedule(&w, &r, &b), Fcfs.schedule(&w, &r, &b));
    }
    match set.check() {
        Err(PluginError::Failed { kind, cause, .. }) => {
            assert_eq!(
                (kind, cause),
                (PluginKind::Scheduler, FailureCause::Invalid)
            )
        }
        other => panic!("expected a retired plugin, got {other:?}"),
    }
    let s = stats(&set, PluginKind::Scheduler);
    // Only the first call reached the plugin; the native FCFS serves now.
    assert_eq!(
        (s.calls, s.failures.invalid, s.fallbacks),
        (3, 1, 1),
        "{s:?}"
    );
    assert_eq!(s.plugin, "fcfs");
    assert!(s.retired.is_some());
}

#[test]
fn broken_files_are_refused_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.wasm");
    std::fs::write(&garbage, b"\0asm\x0d\0\x01\0 definitely not a component").unwrap();
    let mut cfg = support::config(Duration::from_secs(1), 64 << 20, FailureMode::Fallback);
    cfg.scheduler = Some(garbage.clone());
    let err = PluginSet::load(&cfg).err().expect("garbage must not load");
    assert!(matches!(err, PluginError::Compile { .. }), "{err}");
    assert!(err.to_string().contains("garbage.wasm"), "{err}");

    cfg.scheduler = Some(dir.path().join("missing.wasm"));
    let err = PluginSet::load(&cfg)
        .err()
        .expect("a missing file must not load");
    assert!(matches!(err, PluginError::Read { .. }), "{err}");

    // A real component of the wrong world.
    cfg.scheduler = None;
    cfg.evictor = Some(support::plugin("minisgl-fcfs-scheduler"));
    let err = PluginSet::load(&cfg)
        .err()
        .expect("a scheduler is not an evictor");
    assert!(matches!(err, PluginError::Instantiate { .. }), "{err}");
}
