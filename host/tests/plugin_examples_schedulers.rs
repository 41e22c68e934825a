//! Each example scheduler's defining behaviour, shown on the simulator of
//! `plugin_examples_support.rs` — once with the native Rust type and once
//! with the Wasm component built from the same crate, driven through the
//! host's plugin runtime (every decision also passes the host's validation).

#[path = "support/plugin_examples.rs"]
mod support;

use minisgl_example_dfs_weight::DfsWeight;
use minisgl_example_lpm::Lpm;
use minisgl_example_priority::Priority;
use minisgl_example_sarathi::Sarathi;
use minisgl_example_sjf::Sjf;
use minisgl_example_vtc::Vtc;
use minisgl_plugin_sdk::Scheduler;
use minisgl_policies::Fcfs;
use support::{Limits, Sim, Spec, State, WasmScheduler};

fn spec(id: u64, arrival_us: u64, prompt_len: u32, max_new_tokens: u32) -> Spec {
    Spec {
        id,
        arrival_us,
        prompt_len,
        max_new_tokens,
        ..Spec::default()
    }
}

/// Order in which requests were first scheduled.
fn admission_order(sim: &Sim) -> Vec<u64> {
    let mut reqs: Vec<_> = sim
        .reqs
        .iter()
        .filter(|r| r.first_scheduled_us.is_some())
        .collect();
    reqs.sort_by_key(|r| (r.first_scheduled_us, first_chunk_index(sim, r.spec.id)));
    reqs.iter().map(|r| r.spec.id).collect()
}

fn first_chunk_index(sim: &Sim, id: u64) -> usize {
    sim.decisions
        .iter()
        .flat_map(|d| d.prefill.iter())
        .position(|c| c.id == id)
        .unwrap_or(usize::MAX)
}

// ---- lpm -------------------------------------------------------------------

/// Hot requests (512 of 600 tokens cached) arrive faster than one slot serves
/// them; a cold request (nothing cached) arrives with the first of them.
fn lpm_workload() -> Sim {
    let mut sim = Sim::new(Limits {
        max_running: 1,
        ..Limits::default()
    });
    sim.submit(Spec {
        prefix_hit_len: 0,
        ..spec(1000, 0, 600, 20)
    });
    for i in 0..60u64 {
        sim.submit(Spec {
            prefix_hit_len: 512,
            ..spec(i, i * 100_000, 600, 20)
        });
    }
    sim
}

fn lpm_serves_longest_prefix_first_and_starving_within_bound(
    sched: &mut dyn Scheduler,
    bound_us: u64,
) {
    let mut sim = lpm_workload();
    let first = sim.step(sched);
    assert_eq!(
        first.prefill.first().map(|c| c.id),
        Some(0),
        "the cached request goes first"
    );
    for _ in 0..600 {
        sim.step(sched);
    }
    let cold = sim.req(1000);
    let served_at = cold
        .first_scheduled_us
        .expect("the cold request was served");
    // One hot request (20 steps of 10 ms) may be running when the bound hits.
    let slack = 21 * sim.limits.step_us;
    assert!(
        served_at <= bound_us + slack,
        "cold request first scheduled at {served_at} µs, bound {bound_us} µs + {slack} µs"
    );
    assert!(
        served_at >= 1_000_000,
        "lpm should prefer the hot requests for a while (got {served_at} µs)"
    );
    assert_eq!(cold.state, State::Finished);
}

#[test]
fn lpm_native() {
    let mut lpm = Lpm {
        age_bound_us: 1_500_000,
    };
    lpm_serves_longest_prefix_first_and_starving_within_bound(&mut lpm, 1_500_000);
}

#[test]
fn lpm_without_age_bound_starves_the_cold_request() {
    let mut sim = lpm_workload();
    let mut lpm = Lpm {
        age_bound_us: u64::MAX,
    };
    for _ in 0..600 {
        sim.step(&mut lpm);
    }
    assert_eq!(
        sim.req(1000).first_scheduled_us,
        None,
        "pure lpm never serves it here"
    );
}

#[test]
fn lpm_wasm() {
    let mut lpm = WasmScheduler::load("minisgl_example_lpm.wasm");
    lpm_serves_longest_prefix_first_and_starving_within_bound(&mut lpm, Lpm::DEFAULT_AGE_BOUND_US);
}

// ---- priority ----------------------------------------------------------------

fn priority_preempts_and_low_finishes(sched: &mut dyn Scheduler) {
    let mut sim = Sim::new(Limits {
        max_running: 1,
        ..Limits::default()
    });
    sim.submit(spec(1, 0, 100, 50)); // low priority, starts first
    sim.submit(Spec {
        priority: 5,
        ..spec(2, 100_000, 100, 10)
    });
    sim.run(sched, 500);
    let preempting = sim
        .decisions
        .iter()
        .position(|d| d.preempt == vec![1])
        .expect("request 1 was preempted");
    let next = &sim.decisions[preempting + 1];
    assert_eq!(
        next.prefill.first().map(|c| c.id),
        Some(2),
        "the important request is admitted right after"
    );
    let (low, high) = (sim.req(1), sim.req(2));
    assert_eq!(low.preemptions, 1);
    assert!(
        high.finished_us < low.finished_us,
        "high finishes first: {:?} vs {:?}",
        high.finished_us,
        low.finished_us
    );
    assert_eq!(low.state, State::Finished);
    assert!(
        low.view.generated_len >= 50,
        "the low request produced all its tokens"
    );
}

#[test]
fn priority_native() {
    priority_preempts_and_low_finishes(&mut Priority);
}

#[test]
fn priority_wasm() {
    priority_preempts_and_low_finishes(&mut WasmScheduler::load("minisgl_example_priority.wasm"));
}

#[test]
fn fcfs_does_not_preempt_for_priority() {
    let mut sim = Sim::new(Limits {
        max_running: 1,
        ..Limits::default()
    });
    sim.submit(spec(1, 0, 100, 50));
    sim.submit(Spec {
        priority: 5,
        ..spec(2, 100_000, 100, 10)
    });
    sim.run(&mut Fcfs, 500);
    assert!(sim.decisions.iter().all(|d| d.preempt.is_empty()));
    assert!(sim.req(1).finished_us < sim.req(2).finished_us);
}

// ---- VTC ---------------------------------------------------------------------

/// Largest gap in service between the two clients while both have requests
/// left, plus whether the light client finished before the heavy one.
fn vtc_gap(sched: &mut dyn Scheduler) -> u64 {
    let mut sim = Sim::new(Limits {
        max_running: 2,
        max_prefill_tokens: 256,
        ..Limits::default()
    });
    // The heavy client sends 30 requests, all before the light client's 10.
    for i in 0..30u64 {
        sim.submit(Spec {
            client_id: 1,
            ..spec(i, i, 64, 16)
        });
    }
    for i in 0..10u64 {
        sim.submit(Spec {
            client_id: 2,
            ..spec(100 + i, 100 + i, 64, 16)
        });
    }
    let mut gap = 0;
    let busy = |sim: &Sim, c: u64| {
        sim.reqs
            .iter()
            .any(|r| r.spec.client_id == c && r.state != State::Finished)
    };
    while busy(&sim, 1) && busy(&sim, 2) {
        sim.step(sched);
        let s = |c| sim.served.get(&c).copied().unwrap_or(0);
        gap = gap.max(s(1).abs_diff(s(2)));
        assert!(sim.step < 2_000, "did not finish");
    }
    gap
}

/// One request's service: 64 prompt tokens + 2 × 16 output tokens.
const REQUEST_SERVICE: u64 = 64 + 2 * 16;

#[test]
fn vtc_native_equalises_service() {
    let gap = vtc_gap(&mut Vtc::default());
    // Each client can be ahead by at most what its requests in flight have
    // been charged (max_running = 2 of them) plus one admission.
    assert!(gap <= 3 * REQUEST_SERVICE, "service gap {gap}");
    let fcfs_gap = vtc_gap(&mut Fcfs);
    assert!(
        fcfs_gap >= 20 * REQUEST_SERVICE,
        "FCFS should serve the heavy client first (gap {fcfs_gap})"
    );
}

#[test]
fn vtc_wasm_equalises_service() {
    let gap = vtc_gap(&mut WasmScheduler::load("minisgl_example_vtc.wasm"));
    assert!(gap <= 3 * REQUEST_SERVICE, "service gap {gap}");
}

// ---- SJF, DFS-weight, Sarathi ----------------------------------------------------

fn sjf_admits_shortest_first(sched: &mut dyn Scheduler) {
    let mut sim = Sim::new(Limits {
        max_running: 1,
        ..Limits::default()
    });
    // All arrive together (the host lists them in id order).
    sim.submit(spec(1, 0, 50, 100));
    sim.submit(spec(2, 0, 50, 5));
    sim.submit(spec(3, 0, 50, 20));
    sim.run(sched, 1_000);
    assert_eq!(admission_order(&sim), vec![2, 3, 1]);
}

#[test]
fn sjf_native() {
    sjf_admits_shortest_first(&mut Sjf);
}

#[test]
fn sjf_wasm() {
    sjf_admits_shortest_first(&mut WasmScheduler::load("minisgl_example_sjf.wasm"));
}

fn dfs_weight_admits_the_heaviest_shared_prefix_first(sched: &mut dyn Scheduler) {
    // Room for all five in one step: the order of its chunks is the policy's
    // order. (Weights are recomputed every step from what is still waiting.)
    let mut sim = Sim::new(Limits {
        max_prefill_tokens: 4096,
        ..Limits::default()
    });
    sim.submit(Spec {
        prefix_hit_len: 256,
        ..spec(1, 0, 300, 4)
    });
    for id in 2..=4 {
        sim.submit(Spec {
            prefix_hit_len: 128,
            ..spec(id, 0, 300, 4)
        });
    }
    sim.submit(spec(5, 0, 300, 4));
    sim.run(sched, 1_000);
    assert_eq!(admission_order(&sim), vec![2, 3, 4, 1, 5]);
}

#[test]
fn dfs_weight_native() {
    dfs_weight_admits_the_heaviest_shared_prefix_first(&mut DfsWeight);
}

#[test]
fn dfs_weight_wasm() {
    dfs_weight_admits_the_heaviest_shared_prefix_first(&mut WasmScheduler::load(
        "minisgl_example_dfs_weight.wasm",
    ));
}

/// Returns the steps in which a running request did not decode.
fn sarathi_stalls(sched: &mut dyn Scheduler) -> usize {
    let mut sim = Sim::new(Limits {
        max_prefill_tokens: 128,
        ..Limits::default()
    });
    for id in 0..4 {
        sim.submit(spec(id, 0, 32, 40));
    }
    sim.submit(spec(9, 50_000, 2_000, 4)); // a long prompt arrives while they decode
    let mut stalls = 0;
    while !sim.all_finished() {
        let (_, running, budget) = sim.inputs();
        let d = sim.step(sched);
        let tokens: u32 = d.prefill.iter().map(|c| c.tokens).sum::<u32>() + d.decode.len() as u32;
        if sched.name() == "sarathi" {
            assert!(
                tokens <= budget.max_prefill_tokens,
                "step uses {tokens} tokens"
            );
        }
        if running.iter().any(|r| !d.decode.contains(&r.id)) {
            stalls += 1;
        }
        assert!(sim.step < 2_000);
    }
    stalls
}

#[test]
fn sarathi_native_never_stalls_decodes() {
    assert_eq!(sarathi_stalls(&mut Sarathi), 0);
    // The default alternates: the long prompt's 16 chunks each stall the decodes.
    assert!(sarathi_stalls(&mut Fcfs) >= 15);
}

#[test]
fn sarathi_wasm_never_stalls_decodes() {
    assert_eq!(
        sarathi_stalls(&mut WasmScheduler::load("minisgl_example_sarathi.wasm")),
        0
    );
}
