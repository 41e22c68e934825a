//! Hot swap: while another thread calls the scheduler in a loop, plugins are
//! swapped in and out (a `.wasm`, a precompiled `.cwasm`, the native
//! built-in): no call fails or falls back, and every answer is the policy's.
//! Swapping in a corrupt or missing file returns an error and the old plugin
//! keeps serving.

#[path = "support/plugin.rs"]
mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use minisgl::plugin::{precompile, FailureMode, PluginError, PluginKind, PluginSet, PluginSource};
use minisgl_plugin_sdk::Scheduler;
use minisgl_policies::Fcfs;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use support::synth;

fn scheduler_stats(set: &PluginSet) -> minisgl::plugin::SlotStats {
    set.stats().remove(0)
}

#[test]
fn hot_swap_under_load_loses_no_call() {
    let fcfs = support::plugin("minisgl-fcfs-scheduler");
    let dir = tempfile::tempdir().unwrap();
    let cwasm = dir.path().join("fcfs.cwasm");
    precompile(&fcfs, &cwasm).unwrap();

    let set = Arc::new(support::load_default(
        PluginKind::Scheduler,
        "minisgl-fcfs-scheduler",
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicU64::new(0));
    let caller = {
        let (set, stop, served) = (set.clone(), stop.clone(), served.clone());
        std::thread::spawn(move || {
            let mut rng = ChaCha8Rng::seed_from_u64(77);
            while !stop.load(Ordering::Relaxed) {
                let input = synth::schedule_input(&mut rng, 32, false);
                let (w, r, b) = (&input.waiting, &input.running, &input.budget);
                assert_eq!(set.schedule(w, r, b), Fcfs.schedule(w, r, b));
                served.fetch_add(1, Ordering::Relaxed);
            }
        })
    };

    let wait_for_calls = |n: u64| {
        let target = served.load(Ordering::Relaxed) + n;
        let give_up = std::time::Instant::now() + Duration::from_secs(60);
        while served.load(Ordering::Relaxed) < target {
            assert!(
                std::time::Instant::now() < give_up,
                "the calling thread stopped (a wrong answer panics it)"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    let mut swaps = 0;
    for round in 0..4 {
        wait_for_calls(50);
        let r = set.swap(PluginKind::Scheduler, &cwasm).unwrap();
        assert!(r.cached, "a .cwasm needs no compilation");
        assert_eq!(r.name, "fcfs");
        wait_for_calls(50);
        set.reset_native(PluginKind::Scheduler);
        wait_for_calls(50);
        let r = if round % 2 == 0 {
            set.swap(PluginKind::Scheduler, &fcfs).unwrap()
        } else {
            set.swap_in_background(PluginKind::Scheduler, &fcfs)
                .join()
                .unwrap()
                .unwrap()
        };
        assert!(matches!(r.source, PluginSource::Wasm { .. }));
        swaps += 3;
    }

    // Broken swaps: the old plugin keeps serving.
    let before = scheduler_stats(&set);
    let corrupt = dir.path().join("corrupt.wasm");
    let mut bytes = std::fs::read(&fcfs).unwrap();
    bytes.truncate(bytes.len() / 2);
    std::fs::write(&corrupt, &bytes).unwrap();
    let err = set.swap(PluginKind::Scheduler, &corrupt).unwrap_err();
    assert!(matches!(err, PluginError::Compile { .. }), "{err}");
    let err = set
        .swap(PluginKind::Scheduler, &dir.path().join("nope.wasm"))
        .unwrap_err();
    assert!(matches!(err, PluginError::Read { .. }), "{err}");
    wait_for_calls(50);
    let after = scheduler_stats(&set);
    assert_eq!(
        after.source, before.source,
        "the old plugin must keep serving"
    );
    assert_eq!(after.refused_swaps, 2);

    stop.store(true, Ordering::Relaxed);
    caller
        .join()
        .expect("the calling thread saw a wrong answer");
    let s = scheduler_stats(&set);
    assert_eq!(s.swaps, swaps + 1, "{s:?}");
    assert_eq!(s.failures.total(), 0, "{s:?}");
    assert_eq!(s.fallbacks, 0, "{s:?}");
    assert_eq!(s.calls, served.load(Ordering::Relaxed));
    assert!(s.calls >= 700, "{s:?}");
}

#[test]
fn compiled_components_are_cached_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = support::config(Duration::from_secs(1), 64 << 20, FailureMode::Fallback);
    cfg.cache_dir = Some(dir.path().join("cache"));
    let set = PluginSet::load(&cfg).unwrap();
    let fcfs = support::plugin("minisgl-fcfs-scheduler");
    let first = set.swap(PluginKind::Scheduler, &fcfs).unwrap();
    assert!(!first.cached);
    let second = set.swap(PluginKind::Scheduler, &fcfs).unwrap();
    assert!(second.cached);
    let entries: Vec<_> = std::fs::read_dir(dir.path().join("cache"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let PluginSource::Wasm { sha256, .. } = &second.source else {
        panic!("{second:?}")
    };
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert!(entries[0].starts_with(sha256.as_str()), "{entries:?}");
}
