//! The policy simulator and `compare` (issue 13): virtual time is a pure
//! function of the inputs, follows the cost model, and the CLI compares two
//! policy sets end to end on a tiny model (real CPU engine and simulator).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard};

use minisgl::engine::EngineConfig;
use minisgl::scheduler::{NativePolicy, Policy};
use minisgl::sim::measure::{measure, Grid};
use minisgl::sim::{simulate, CostModel, PolicyTime, Profile, SimConfig, StepShape};
use minisgl::workload::synth::{generate, SynthKind, SynthSpec};
use minisgl::workload::TimedRequest;

/// The tests of this file one at a time: the profile test times real CPU steps, and
/// the compare tests' engine runs beside it on a 2-core CI machine skewed its points
/// (a median model error of 0.29 against its 0.25 bound, once in four clean CI runs).
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A cost model with round numbers: decode 1 ms + 10 µs per sequence,
/// prefill 2 ms + 20 µs per token, plus attention terms.
fn model() -> CostModel {
    CostModel {
        decode_knots: vec![(1, 1010.0), (256, 3560.0)],
        prefill_knots: vec![(1, 2020.0), (8192, 2000.0 + 20.0 * 8192.0)],
        us_per_kv_token: 0.01,
        us_per_attn_pair: 0.0001,
    }
}

fn cfg() -> SimConfig {
    SimConfig {
        engine: EngineConfig {
            max_running: 16,
            max_prefill_tokens: 256,
            ..EngineConfig::default()
        },
        num_pages: 128,
        page_size: 4,
        vocab_size: 1000,
        policy_time: PolicyTime::Report,
    }
}

fn workload() -> Vec<TimedRequest> {
    generate(&SynthSpec {
        kind: SynthKind::SharedPrefix,
        num_requests: 60,
        rate: 200.0,
        input_len: (8, 64),
        output_len: (1, 32),
        groups: 3,
        prefix_len: 48,
        clients: 1,
        burst_factor: 1.0,
        burst_s: 1.0,
        deadline_ms: None,
        vocab: 1000,
        seed: 7,
    })
    .unwrap()
}

fn run(w: &[TimedRequest]) -> minisgl::sim::RunRecord {
    let policy: Arc<dyn Policy> = Arc::new(NativePolicy::default());
    simulate(w, &model(), policy, &cfg(), &mut |_, _, _| {}).unwrap()
}

#[test]
fn the_simulator_is_deterministic() {
    let _serial = serial();
    let w = workload();
    let (a, b) = (run(&w), run(&w));
    assert_eq!(a.requests, b.requests);
    assert_eq!(a.samples, b.samples);
    assert_eq!(a.metrics, b.metrics);
    assert!(a.requests.iter().all(|r| r.ok()), "{:?}", a.requests);
    // The workload is tight enough to exercise the radix cache and eviction.
    assert!(a.metrics.cache_hit_tokens > 0, "{:?}", a.metrics);
    assert!(a.metrics.evicted_pages > 0, "{:?}", a.metrics);
}

#[test]
fn virtual_time_follows_the_cost_model() {
    let _serial = serial();
    // One request alone: its first token comes at the end of its prefill
    // step, every later one a decode step apart.
    let w = vec![TimedRequest::new(1.0, (16..116).collect(), 5)];
    let r = run(&w);
    let q = &r.requests[0];
    let prefill = model().step_us(&StepShape::prefill(100, 0)).round() as u64;
    assert_eq!(q.ttft_us(), Some(prefill));
    assert_eq!(q.output_tokens, 5);
    // Decodes at contexts 100..=103 (the last token's KV is never read).
    let decodes: u64 = (100..104)
        .map(|c| model().step_us(&StepShape::decode(1, c)).round() as u64)
        .sum();
    assert_eq!(q.e2e_us(), Some(prefill + decodes));
}

#[test]
fn the_cost_model_reproduces_a_measured_profile() {
    let _serial = serial();
    // Measured on this CPU with the tiny fixture model: the same code path
    // `profile --device cuda` runs on a GPU.
    let model = minisgl::model::load(&root().join("tests/fixtures/models/qwen3")).unwrap();
    let grid = Grid {
        decode_batches: vec![1, 4, 8],
        decode_contexts: vec![16, 128],
        prefill_tokens: vec![16, 64, 128],
        prefill_contexts: vec![0, 128],
        reps: 9,
    };
    let mut runner =
        minisgl::model::placement::cpu_runner(&model, grid.pages_needed(16), 16).unwrap();
    let points = measure(&mut runner, &grid, &mut |_, _| {}).unwrap();
    assert_eq!(points.len(), 12);
    let prof = Profile::fit("cpu", "test", "qwen3", 16, 64, "", points).unwrap();
    // Knots sit at the measured sizes: only the attention slopes are shared,
    // so the points come back closely. Timing noise on a shared CI machine
    // can spike one point, so the bound is on the median error.
    let mut errs: Vec<f64> = prof.reproduction().iter().map(|r| r.2.abs()).collect();
    errs.sort_by(f64::total_cmp);
    let median = errs[errs.len() / 2];
    assert!(
        median < 0.25,
        "median model error {median} on its own points: {:?}",
        prof.reproduction()
    );
    // The file round-trips.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("p.json");
    std::fs::write(&p, prof.to_json()).unwrap();
    // (JSON floats round-trip to the last bit or so: compare the predictions.)
    let back = Profile::load(&p).unwrap();
    assert_eq!(back.points.len(), prof.points.len());
    for (b, p) in back.points.iter().zip(&prof.points) {
        assert_eq!(b.shape(), p.shape());
        assert!(
            (b.seconds - p.seconds).abs() <= 1e-12 * p.seconds,
            "{b:?} vs {p:?}"
        );
    }
    for (pt, pred, _) in prof.reproduction() {
        let b = back.model_fit.step_us(&pt.shape()) * 1e-6;
        assert!((b - pred).abs() <= 1e-9 * pred, "{pt:?}: {b} vs {pred}");
    }
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_minisgl-host"))
}

fn ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn lpm() -> String {
    root()
        .join("target/wasm32-wasip2/plugin/minisgl_example_lpm.wasm")
        .display()
        .to_string()
}

fn compare_args(out: &Path) -> Vec<String> {
    let model = root().join("tests/fixtures/models/qwen3");
    [
        "compare",
        "--model",
        model.to_str().unwrap(),
        "--synthetic",
        "shared-prefix",
        "--num-requests",
        "16",
        "--rate",
        "100",
        "--input-len",
        "8:24",
        "--output-len",
        "2:8",
        "--num-groups",
        "3",
        "--prefix-len",
        "32",
        "--num-pages",
        "64",
        "--page-size",
        "4",
        "--policy",
        "fcfs=native",
        "--policy",
        &format!("lpm={}", lpm()),
        "--out",
        out.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn check_outputs(dir: &Path) {
    let csv = std::fs::read_to_string(dir.join("results.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 3, "{csv}");
    for (l, name) in lines[1..].iter().zip(["fcfs", "lpm"]) {
        let f: Vec<&str> = l.split(',').collect();
        assert_eq!(f[0], name);
        assert_eq!((f[2], f[3]), ("16", "0"), "completed, failed: {l}");
    }
    for f in [
        "results.md",
        "timing.md",
        "ttft_cdf.svg",
        "throughput.svg",
        "queue.svg",
        "kv.svg",
    ] {
        let text = std::fs::read_to_string(dir.join(f)).unwrap();
        assert!(!text.is_empty(), "{f}");
    }
    assert!(std::fs::read_to_string(dir.join("ttft_cdf.svg"))
        .unwrap()
        .contains("<svg"));
    for f in ["ttft_cdf.png", "throughput.png", "queue.png", "kv.png"] {
        check_png(&dir.join(f));
    }
}

/// A PNG plot is a real image: the signature, an IHDR of the plot's size, pixels
/// that decode, more than one colour, and text in the caption band (the title is
/// drawn from the embedded font, which a missing font would leave blank).
fn check_png(path: &Path) {
    let bytes = std::fs::read(path).unwrap();
    let name = path.display();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{name}: PNG signature");
    assert_eq!(&bytes[12..16], b"IHDR", "{name}: first chunk");
    let be = |i: usize| u32::from_be_bytes(bytes[i..i + 4].try_into().unwrap());
    assert_eq!((be(16), be(20)), (800, 500), "{name}: IHDR size");
    let mut reader = png::Decoder::new(std::io::Cursor::new(&bytes))
        .read_info()
        .unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!(info.color_type, png::ColorType::Rgb, "{name}");
    let px: Vec<&[u8]> = buf[..info.buffer_size()].chunks(3).collect();
    let colours: std::collections::HashSet<&[u8]> = px.iter().copied().collect();
    assert!(colours.len() > 1, "{name}: blank image");
    // The caption is 22 px text centred in the top ~40 rows, above the plot area.
    let dark_in_caption = px[..800 * 40]
        .iter()
        .filter(|p| p.iter().all(|&c| c < 128))
        .count();
    assert!(
        dark_in_caption > 50,
        "{name}: no title text ({dark_in_caption} dark pixels)"
    );
}

/// Every step of a real replay is logged, and a profile given to a real
/// backend is checked against those steps, class by class (steps.md).
#[test]
fn compare_runs_two_policies_on_the_cpu_engine() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let prof = cpu_profile(dir.path());
    let out = dir.path().join("cpu");
    let mut args = compare_args(&out);
    args.extend(["--backend", "cpu", "--profile", prof.to_str().unwrap()].map(String::from));
    ok(bin().args(&args));
    check_outputs(&out);
    let md = std::fs::read_to_string(out.join("steps.md")).unwrap();
    for name in ["fcfs", "lpm"] {
        let csv = std::fs::read_to_string(out.join(format!("steps-{name}.csv"))).unwrap();
        let rows: Vec<Vec<u64>> = csv
            .lines()
            .skip(1)
            .map(|l| l.split(',').map(|x| x.parse().unwrap()).collect())
            .collect();
        assert!(!rows.is_empty(), "{name}: no steps logged");
        // Steps finish in order, each after its launch; the first ones are
        // prefills (nothing is cached or decoding yet).
        for w in rows.windows(2) {
            assert!(w[0][1] <= w[1][1], "{name}: steps out of order\n{csv}");
        }
        assert!(rows.iter().all(|r| r[0] <= r[1] && r[4] >= 1), "{csv}");
        assert_eq!(rows[0][5], 0, "{name}: the first step is a prefill\n{csv}");
        // 16 requests of 2-8 output tokens: at least one decode step each
        // beyond the prefill, and every step is in the table.
        let section = md.split(&format!("## {name}:")).nth(1).unwrap();
        assert!(
            section.contains(&format!("| all | {} |", rows.len())),
            "{name}: {section}"
        );
    }
    // The profile refitted on those steps (the fit itself is checked in
    // sim::profile's unit tests; CPU step times here are too noisy to rank
    // two fits).
    let refit = dir.path().join("refit.json");
    let stdout = ok(bin().args([
        "profile",
        "--refit",
        prof.to_str().unwrap(),
        "--steps",
        out.join("steps-fcfs.csv").to_str().unwrap(),
        "--steps",
        out.join("steps-lpm.csv").to_str().unwrap(),
        "--out",
        refit.to_str().unwrap(),
    ]));
    assert!(
        stdout.contains("before:") && stdout.contains("after:") && stdout.contains("| all |"),
        "{stdout}"
    );
    let p: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&refit).unwrap()).unwrap();
    assert!(p["note"].as_str().unwrap().contains("refitted on"), "{p}");
}

/// A small profile of the qwen3 fixture on the CPU backend.
fn cpu_profile(dir: &Path) -> PathBuf {
    let prof = dir.join("cpu-qwen3.json");
    let model = root().join("tests/fixtures/models/qwen3");
    let stdout = ok(bin().args([
        "profile",
        "--device",
        "cpu",
        "--model",
        model.to_str().unwrap(),
        "--decode-batches",
        "1,8",
        "--decode-contexts",
        "16,128",
        "--prefill-tokens",
        "16,128",
        "--prefill-contexts",
        "0,128",
        "--page-size",
        "4",
        "--kv-pages",
        "64",
        "--out",
        prof.to_str().unwrap(),
    ]));
    assert!(stdout.contains("model error"), "{stdout}");
    prof
}

#[test]
fn compare_in_the_simulator_is_byte_identical_between_runs() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let prof = cpu_profile(dir.path());
    let mut outs = Vec::new();
    for i in 0..2 {
        let out = dir.path().join(format!("sim{i}"));
        let mut args = compare_args(&out);
        args.extend(["--backend", "sim", "--profile", prof.to_str().unwrap()].map(String::from));
        ok(bin().args(&args));
        check_outputs(&out);
        outs.push(out);
    }
    for f in [
        "results.md",
        "results.csv",
        "ttft_cdf.svg",
        "kv.svg",
        "ttft_cdf.png",
        "kv.png",
        "steps-fcfs.csv",
    ] {
        assert_eq!(
            std::fs::read(outs[0].join(f)).unwrap(),
            std::fs::read(outs[1].join(f)).unwrap(),
            "{f} differs between two identical runs"
        );
    }
}
