//! The default Wasm plugins and the native built-ins they wrap give identical
//! decisions on thousands of seeded random inputs, every plugin answer passes
//! validation, and no call falls back (a fallback would make the comparison
//! trivially true, so it fails the test).

#[path = "support/plugin.rs"]
mod support;

use minisgl::plugin::{validate, PluginKind, PluginSource};
use minisgl_plugin_sdk::{Evictor, Sampler, Scheduler};
use minisgl_policies::{DefaultSampler, Fcfs, Lru};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use support::synth;

const CASES: usize = 3000;

fn assert_clean(set: &minisgl::plugin::PluginSet, kind: PluginKind, calls: u64) {
    let stats = &set.stats()[kind as usize];
    assert_eq!(stats.kind, kind);
    assert!(
        matches!(stats.source, PluginSource::Wasm { .. }),
        "{stats:?}"
    );
    assert_eq!(stats.calls, calls, "{stats:?}");
    assert_eq!(stats.failures.total(), 0, "{stats:?}");
    assert_eq!(stats.fallbacks, 0, "{stats:?}");
}

#[test]
fn fcfs_wasm_matches_native() {
    let set = support::load_default(PluginKind::Scheduler, "minisgl-fcfs-scheduler");
    let mut rng = ChaCha8Rng::seed_from_u64(0x5eed_0001);
    let (mut prefills, mut decodes, mut preempts) = (0, 0, 0);
    for case in 0..CASES {
        let batch = if case % 16 == 0 { 256 } else { 24 };
        let input = synth::schedule_input(&mut rng, batch, false);
        let (w, r, b) = (&input.waiting, &input.running, &input.budget);
        let native = Fcfs.schedule(w, r, b);
        if let Err(e) = validate::schedule(&native, w, r, b) {
            panic!("case {case}: native FCFS broke {e}: {native:?} for {input:?}");
        }
        let wasm = set.schedule(w, r, b);
        assert_eq!(wasm, native, "case {case}: {input:?}");
        prefills += usize::from(!native.prefill.is_empty());
        decodes += usize::from(!native.decode.is_empty());
        preempts += usize::from(!native.preempt.is_empty());
    }
    assert_clean(&set, PluginKind::Scheduler, CASES as u64);
    // The inputs exercise every branch of the policy.
    assert!(prefills > CASES / 5, "{prefills} prefill steps");
    assert!(decodes > CASES / 10, "{decodes} decode steps");
    assert!(preempts > CASES / 50, "{preempts} steps with preemption");
}

#[test]
fn lru_wasm_matches_native() {
    let set = support::load_default(PluginKind::Evictor, "minisgl-lru-evictor");
    let mut rng = ChaCha8Rng::seed_from_u64(0x5eed_0002);
    let mut nonempty = 0;
    for case in 0..CASES {
        let n = if case % 16 == 0 { 1024 } else { 32 };
        let (leaves, needed) = synth::evict_input(&mut rng, n, false);
        let native = Lru.pick_victims(&leaves, needed);
        let checked = validate::victims(native.clone(), &leaves, needed)
            .unwrap_or_else(|e| panic!("case {case}: native LRU broke {e}"));
        assert_eq!(
            checked, native,
            "case {case}: LRU returned more than needed"
        );
        let wasm = set.pick_victims(&leaves, needed);
        assert_eq!(wasm, native, "case {case}: {leaves:?} need {needed}");
        nonempty += usize::from(!native.is_empty());
    }
    assert_clean(&set, PluginKind::Evictor, CASES as u64);
    assert!(nonempty > CASES / 2, "{nonempty} non-empty answers");
}

#[test]
fn default_sampler_wasm_matches_native() {
    let set = support::load_default(PluginKind::Sampler, "minisgl-default-sampler");
    let mut rng = ChaCha8Rng::seed_from_u64(0x5eed_0003);
    let vocab = 151_936;
    for case in 0..CASES {
        let n = if case % 16 == 0 { 256 } else { 16 };
        let reqs = synth::sample_input(&mut rng, n, false, vocab);
        let native = DefaultSampler.plan(&reqs, vocab);
        validate::plans(native.clone(), &reqs, vocab)
            .unwrap_or_else(|e| panic!("case {case}: native plan broke {e}"));
        let wasm = set.plan(&reqs, vocab);
        assert_eq!(wasm, native, "case {case}: {reqs:?}");

        let lists = synth::candidate_input(&mut rng, n, false, vocab);
        let native = DefaultSampler.pick(&lists);
        validate::picks(&native, &lists)
            .unwrap_or_else(|e| panic!("case {case}: native pick broke {e}"));
        let wasm = set.pick(&lists);
        assert_eq!(wasm, native, "case {case}: {lists:?}");
    }
    assert_clean(&set, PluginKind::Sampler, 2 * CASES as u64);
}
