//! The FCFS scheduler written in Python, JavaScript and C (plugins/*-fcfs,
//! built from source by scripts/build-lang-plugins.sh) makes exactly the
//! decisions of the Rust default (plugins/fcfs-scheduler, the same code the
//! host links natively) on thousands of seeded synthetic inputs, through the
//! host's runtime and validation. Driven through `minisgl-host plugin diff`,
//! so the harness a policy author uses is what is tested.

use std::path::PathBuf;
use std::process::Command;

fn plugin(file: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../target/wasm32-wasip2/plugin")
        .join(file);
    assert!(
        p.is_file(),
        "{} is missing: run scripts/build-plugins.sh and scripts/build-lang-plugins.sh first",
        p.display()
    );
    p.to_string_lossy().into_owned()
}

/// Runs `minisgl-host` with a 1 s plugin deadline: these tests compare
/// decisions, and on a busy 2-core machine a call can be descheduled past the
/// default 20 ms (that would count as a timeout and the built-in would answer).
fn host(args: &[&str]) -> (bool, String) {
    let args: Vec<&str> = args
        .iter()
        .copied()
        .chain(["--plugin-deadline-ms", "1000"])
        .collect();
    let cache = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/plugin-cache");
    let out = Command::new(env!("CARGO_BIN_EXE_minisgl-host"))
        .args(args)
        .env("MINISGL_PLUGIN_CACHE_DIR", cache)
        .output()
        .expect("run minisgl-host");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Diffs `lang` against the Rust FCFS component on 3,000 cases of `seed`.
fn same_decisions_as_rust(lang: &str, seed: &str) {
    let rust = plugin("minisgl_fcfs_scheduler.wasm");
    let other = plugin(lang);
    let (ok, text) = host(&[
        "plugin", "diff", &rust, &other, "--cases", "3000", "--seed", seed,
    ]);
    assert!(ok, "{lang} disagrees with the Rust FCFS:\n{text}");
    assert!(
        text.contains("3000 cases") && text.contains(": 0 differ"),
        "unexpected output:\n{text}"
    );
}

#[test]
fn python_fcfs_equals_rust() {
    same_decisions_as_rust("fcfs_python.wasm", "11");
}

#[test]
fn js_fcfs_equals_rust() {
    same_decisions_as_rust("fcfs_js.wasm", "12");
}

#[test]
fn c_fcfs_equals_rust() {
    same_decisions_as_rust("fcfs_c.wasm", "13");
}

#[test]
fn rust_component_equals_native_fcfs() {
    let (ok, text) = host(&[
        "plugin",
        "diff",
        "native",
        &plugin("minisgl_fcfs_scheduler.wasm"),
        "--cases",
        "3000",
        "--seed",
        "14",
    ]);
    assert!(ok, "{text}");
}

#[test]
fn diff_reports_a_real_difference() {
    // SJF orders by max_new_tokens, FCFS by arrival: the harness must see it,
    // and report it without failing (differing is what a new policy does).
    let (ok, text) = host(&[
        "plugin",
        "diff",
        "native",
        &plugin("minisgl_example_sjf.wasm"),
        "--cases",
        "300",
        "--seed",
        "15",
        "--show",
        "1",
    ]);
    assert!(ok, "a difference is a report, not a failure:\n{text}");
    assert!(text.contains("differs"), "{text}");
    assert!(
        !text.contains(" 0 differ;"),
        "SJF must differ from FCFS: {text}"
    );
}

#[test]
fn check_passes_every_language_and_cost_reports_both_batches() {
    for lang in ["fcfs_c.wasm", "fcfs_js.wasm", "fcfs_python.wasm"] {
        let (ok, text) = host(&[
            "plugin",
            "check",
            &plugin(lang),
            "--cases",
            "500",
            "--seed",
            "16",
        ]);
        assert!(
            ok && text.contains("ok: 500 scheduler calls"),
            "{lang}:\n{text}"
        );
    }
    let (ok, text) = host(&[
        "plugin",
        "cost",
        &plugin("fcfs_c.wasm"),
        "--iters",
        "50",
        "--json",
    ]);
    assert!(ok, "{text}");
    let rows: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let batches: Vec<u64> = rows.iter().filter_map(|r| r["batch"].as_u64()).collect();
    assert_eq!(batches, vec![8, 256], "{text}");
    for r in &rows {
        let (p50, p99) = (r["p50_us"].as_f64().unwrap(), r["p99_us"].as_f64().unwrap());
        assert!(p50 > 0.0 && p99 >= p50, "{r}");
    }
}

#[test]
fn check_names_the_rule_a_bad_plugin_breaks_and_replays_views() {
    // Two waiting and two running requests at step 0: the hostile guest then
    // decodes an unknown id (rule S1).
    let view = |id: u64, computed: u32| {
        format!(
            r#"{{"id":{id},"arrival_us":{id},"prompt_len":40,"computed_len":{computed},"max_new_tokens":8,"pages_held":{}}}"#,
            computed.div_ceil(16)
        )
    };
    let case = format!(
        r#"{{"schedule":{{"waiting":[{},{}],"running":[{},{}],"budget":{{"max_prefill_tokens":64,"max_running":8,"free_pages":100,"page_size":16,"step":0}}}}}}"#,
        view(1, 0),
        view(2, 0),
        view(3, 40),
        view(4, 40)
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("case.jsonl");
    std::fs::write(&file, format!("# one recorded step\n{case}\n")).unwrap();
    let views = file.to_string_lossy().into_owned();

    let bad = plugin("minisgl_guest_invalid_scheduler.wasm");
    let (ok, text) = host(&["plugin", "check", &bad, "--views", &views]);
    assert!(!ok, "{text}");
    assert!(text.contains("S1") && text.contains("replayable"), "{text}");
    // The same recorded step is fine for the Python FCFS.
    let (ok, text) = host(&[
        "plugin",
        "check",
        &plugin("fcfs_python.wasm"),
        "--views",
        &views,
    ]);
    assert!(ok && text.contains("ok: 1 scheduler calls"), "{text}");
}
