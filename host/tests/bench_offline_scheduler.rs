//! `bench offline --scheduler`: the offline workload runs under a scheduler plugin,
//! and `--jsonl` records which. Sarathi (plugins/examples/sarathi) decodes while it
//! prefills, so its run has steps that mix a prefill chunk with one-token rows; the
//! built-in FCFS prefills first. On the CPU with a tiny fixture model, so it runs in CI.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `bench offline` on the CPU with the tiny fixture model, no ceiling; `args` follow.
fn bench_offline(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_minisgl-host"));
    cmd.current_dir(root())
        .args([
            "bench",
            "offline",
            "--random-weights",
            "tests/fixtures/models/qwen3_bf16",
            "--device",
            "cpu",
            "--no-ceiling",
        ])
        .args(args)
        .env(
            "MINISGL_PLUGIN_CACHE_DIR",
            root().join("target/plugin-cache"),
        );
    cmd
}

/// Runs the workload (8 prompts of 40-80 tokens, 64-token steps) with `scheduler`;
/// returns its `--jsonl` object and how many steps mixed a chunk with one-token rows.
fn run(scheduler: Option<&Path>, dir: &Path, tag: &str) -> (serde_json::Value, usize) {
    let jsonl = dir.join(format!("{tag}.jsonl"));
    let csv = dir.join(format!("{tag}.csv"));
    let mut cmd = bench_offline(&[
        "--num-seqs",
        "8",
        "--min-input-len",
        "40",
        "--max-input-len",
        "80",
        "--min-output-len",
        "4",
        "--max-output-len",
        "8",
        "--max-prefill-tokens",
        "64",
    ]);
    cmd.arg("--jsonl").arg(&jsonl).arg("--steps-csv").arg(&csv);
    if let Some(s) = scheduler {
        cmd.arg("--scheduler").arg(s);
    }
    let out = cmd.output().expect("run minisgl-host");
    assert!(
        out.status.success(),
        "{tag}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&jsonl).unwrap();
    let figure: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    // steps CSV: launch_us,done_us,step_us,seqs,tokens,decode_only,kv_read,attn_pairs.
    // A step with prefill rows (not decode-only) whose one-token rows read KV mixes both.
    let steps = std::fs::read_to_string(&csv).unwrap();
    let mixed = steps
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect::<Vec<_>>())
        .filter(|f| f[5] == "0" && f[6] != "0")
        .count();
    (figure, mixed)
}

#[test]
fn a_scheduler_plugin_runs_the_offline_workload_and_is_recorded() {
    let plugin = root().join("target/wasm32-wasip2/plugin/minisgl_example_sarathi.wasm");
    assert!(
        plugin.is_file(),
        "{} is missing: run scripts/build-plugins.sh first",
        plugin.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let (fcfs, fcfs_mixed) = run(None, dir.path(), "fcfs");
    let (sarathi, sarathi_mixed) = run(Some(&plugin), dir.path(), "sarathi");
    assert_eq!(fcfs["scheduler"], "fcfs (built in)");
    assert_eq!(sarathi["scheduler"], plugin.display().to_string());
    // Both runs finish the same workload.
    assert_eq!(fcfs["workload"], sarathi["workload"]);
    // Sarathi decodes the prompts prefilled so far in every prefill step; FCFS mixes
    // only where a chunk happens to leave one token of a prompt for the next step.
    assert!(
        sarathi_mixed >= 3 && sarathi_mixed > fcfs_mixed,
        "mixed steps: sarathi {sarathi_mixed}, fcfs {fcfs_mixed}"
    );
}

#[test]
fn a_scheduler_that_is_not_a_component_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let bogus = dir.path().join("not-a-plugin.wasm");
    std::fs::write(&bogus, b"not wasm").unwrap();
    let out = bench_offline(&["--num-seqs", "2"])
        .arg("--scheduler")
        .arg(&bogus)
        .output()
        .expect("run minisgl-host");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("--scheduler") && err.contains("not-a-plugin.wasm"),
        "{err}"
    );
}
