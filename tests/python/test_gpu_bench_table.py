"""`scripts/gpu-bench.sh device table` (issue 11's whole table in one device call) and
`device 100` (the checks and benches after the Hopper GEMM's removal), run on this
machine against stand-ins: a fake `minisgl-host` that records its argv and
MINISGL_* environment and answers `bench offline --jsonl` with a figure, a fake
`attn_bench.py`, `nvidia-smi` and `ncu`. A device call costs minutes of a limited
budget, so the parts' shell (functions, time guards, `set -u`) and what they run (both
shapes, every workload, the cuDNN reference, every check group) are checked here first.
The figures themselves need the GPU."""

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_part(tmp_path, part, quiet_ok=False, **extra_env):
    """Runs `gpu-bench.sh device PART` in a copy of scripts/ with stand-ins (EXTRA_ENV
    set for the part); returns
    (the run, every stand-in call as (argv, MINISGL_* environment), the out folder)."""
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "scripts", repo / "scripts")
    shutil.copytree(ROOT / "tests/fixtures/models", repo / "tests/fixtures/models")
    for shape in ("qwen3-0.6b", "qwen3-14b", "llama-3.1-8b"):
        (repo / ".gpu" / shape).mkdir(parents=True)
        shutil.copy(ROOT / "examples/model-configs" / shape / "config.json", repo / ".gpu" / shape)
    (repo / ".gpu/commit").write_text("abc1234\n")
    calls = tmp_path / "calls.jsonl"
    record = (
        "import json, os, sys\n"
        "a = sys.argv[1:]\n"
        "env = {k: v for k, v in os.environ.items() if k.startswith('MINISGL_')\n"
        "       and k not in ('MINISGL_KERNEL_CACHE', 'MINISGL_COMMIT', 'MINISGL_BENCH_DATE')}\n"
        f"open({str(calls)!r}, 'a').write(json.dumps([NAME + a, env]) + '\\n')\n"
    )
    fake = (
        f"#!{sys.executable}\n" + record.replace("NAME", "[]") +
        "if '--jsonl' in a:\n"
        "    fig = {'metric': 'offline_output_tok_s', 'value': 1.0, 'args': a}\n"
        "    open(a[a.index('--jsonl') + 1], 'a').write(json.dumps(fig) + '\\n')\n"
        "print('stub output tok/s; runner step')\n"
    )
    binary = repo / "target/release/minisgl-host"
    binary.parent.mkdir(parents=True)
    binary.write_text(fake)
    binary.chmod(0o755)
    # The cuDNN reference and PyTorch's copy / GEMM rates come from attn_bench.py.
    (repo / "scripts/gpu/attn_bench.py").write_text(
        record.replace("NAME", "['attn_bench']") +
        "fig = {'metric': 'prefill_attention_tflops', 'value': 1.0}\n"
        "open(a[a.index('--jsonl') + 1], 'a').write(json.dumps(fig) + '\\n')\n"
    )
    stubs = tmp_path / "bin"
    stubs.mkdir()
    smi = stubs / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'name, driver_version'\necho 'Stub H200, 0'\n")
    smi.chmod(0o755)
    ncu = stubs / "ncu"
    ncu.write_text(f"#!{sys.executable}\n" + record.replace("NAME", "['ncu']"))
    ncu.chmod(0o755)
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), PATH=f"{stubs}:{os.environ['PATH']}", **extra_env)
    r = subprocess.run(
        ["bash", "scripts/gpu-bench.sh", "device", part],
        cwd=repo, env=env, capture_output=True, text=True, timeout=120,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "unbound variable" not in r.stderr, r.stderr[-3000:]
    assert "no time left" not in r.stdout, r.stdout[-3000:]
    made = [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []
    assert made or quiet_ok, r.stdout[-3000:]
    return r, made, out


def archived_logs(out):
    """The names in the part's one archive (the tool returns few files)."""
    archives = list(out.glob("*.tgz"))
    assert len(archives) == 1, sorted(p.name for p in out.iterdir())
    with tarfile.open(archives[0]) as t:
        return {Path(n).name for n in t.getnames()}


def test_the_table_part_runs_every_step_on_both_shapes(tmp_path):
    r, made, out = run_part(tmp_path, "table")
    assert "table: " in r.stdout
    argvs = [a for a, _ in made]
    joined = [" ".join(a) for a in argvs]
    assert any(a[0] == "attn_bench" for a in argvs), joined
    for shape in ("qwen3-0.6b", "qwen3-14b"):
        # The decode steps (gpu-check's runner), the default workload and long prompts.
        assert any(a[:1] == ["gpu-check"] and f".gpu/{shape}" in a for a in argvs), joined
        offline = [a for a in argvs if a[:2] == ["bench", "offline"] and f".gpu/{shape}" in a]
        assert any("--min-input-len" not in a for a in offline), f"{shape} default: {joined}"
        assert any("4000" in a for a in offline), f"{shape} long prompts: {joined}"
    # Then the decode steps of a shape the issue does not list.
    llama = [i for i, a in enumerate(argvs) if a[:1] == ["gpu-check"] and ".gpu/llama-3.1-8b" in a]
    assert len(llama) == 1 and llama[0] == len(argvs) - 1, joined
    # Every figure in bench.jsonl, the logs in one archive.
    figures = (out / "bench.jsonl").read_text().splitlines()
    assert len(figures) == 5, figures
    names = archived_logs(out)
    for log in ("attn.log", "offline-qwen3-0.6b.log", "offline-qwen3-14b.log",
                "long-qwen3-0.6b.log", "long-qwen3-14b.log"):
        assert log in names, sorted(names)


def test_the_table_with_checks_runs_them_first_then_the_whole_table(tmp_path):
    r, made, out = run_part(tmp_path, "table", TABLE_CHECKS="1")
    assert "checks: " in r.stdout and "table: " in r.stdout, r.stdout[-2000:]
    argvs = [a for a, _ in made]
    ops = [i for i, a in enumerate(argvs)
           if a[:1] == ["gpu-check"] and "--skip-models" in a and "--skip-bench" in a]
    engine = [i for i, a in enumerate(argvs)
              if a[:1] == ["gpu-check"] and "--model" in a and "--skip-engine" not in a]
    bench = [i for i, a in enumerate(argvs) if a[0] == "attn_bench"]
    assert ops and engine and bench, argvs
    assert max(ops + engine) < min(bench), argvs
    # The table itself loses nothing to the checks (the stand-ins take no time).
    assert len((out / "bench.jsonl").read_text().splitlines()) == 5
    names = archived_logs(out)
    assert {"gpu-check-ops.log.gz", "gpu-check-models-engine.log", "offline-qwen3-14b.log",
            "long-qwen3-14b.log"} <= names, sorted(names)


def test_part_100_runs_every_check_group_and_the_benches_with_measured_rates(tmp_path):
    _, made, out = run_part(tmp_path, "100")
    gpu_check = [a for a, _ in made if a[:1] == ["gpu-check"]]
    # Op checks; models and engine on the fixtures; 0.6B benches; a timeline; 14B steps.
    assert any("--skip-models" in a and "--skip-engine" in a for a in gpu_check), made
    assert any("--skip-ops" in a and "--model" in a and "--skip-engine" not in a
               for a in gpu_check), made
    benches = [a[a.index("--bench-model") + 1] for a in gpu_check if "--bench-model" in a]
    assert benches == [".gpu/qwen3-0.6b", ".gpu/qwen3-14b"], made
    assert any("--timeline-model" in a for a in gpu_check), made
    # Not under a profiler: gpu-check measures its rates itself.
    assert not any("MINISGL_GPU_RATES" in e for _, e in made), made
    assert any(a[:2] == ["bench", "offline"] for a, _ in made), made
    names = archived_logs(out)
    assert {"gpu-check-models-engine.log", "offline-qwen3-0.6b.log", "timeline.log"} <= names, names


def test_part_107_runs_the_unlisted_shapes_and_the_shared_prefix_workload_both_orders(tmp_path):
    _, made, out = run_part(tmp_path, "107")
    offline = [(a, e) for a, e in made if a[:2] == ["bench", "offline"]]
    for shape in ("llama-3.1-8b", "qwen3-32b"):
        runs = [a for a, _ in offline if f".gpu/{shape}" in a]
        assert any("--min-input-len" not in a for a in runs), f"{shape} default: {made}"
        assert any("4000" in a for a in runs), f"{shape} long prompts: {made}"
    shared = [e.get("MINISGL_PREFILL_ORDER") for a, e in offline if "shared-prefix" in a]
    assert shared == ["seqs", "0"], made
    # Its figures' name says nothing of the order: it keeps the order they were taken in.
    assert all("round-robin" in a for a, _ in offline if "shared-prefix" in a), made
    names = archived_logs(out)
    assert {"shared-prefix-orderseqs.log", "shared-prefix-order0.log",
            "offline-qwen3-32b.log", "long-qwen3-32b.log"} <= names, sorted(names)


def test_gpu_need_runs_nothing_on_another_card(tmp_path):
    # The stand-in nvidia-smi names a "Stub H200": asked for an H100, the part stops.
    r, made, _ = run_part(tmp_path, "107", quiet_ok=True, GPU_NEED="H100")
    assert made == [] and "part 107 not run" in r.stdout, r.stdout[-2000:]
    r, made, _ = run_part(tmp_path / "h200", "107", GPU_NEED="H200")
    assert any(a[:2] == ["bench", "offline"] for a, _ in made), r.stdout[-2000:]


def test_part_131_times_a_prefill_step_of_each_workload_on_both_shapes(tmp_path):
    _, made, out = run_part(tmp_path, "131")
    runs = [(a[a.index("--timeline-model") + 1], a[a.index("--timeline-prefill-lens") + 1])
            for a, _ in made if a[:1] == ["gpu-check"]]
    assert runs == [(".gpu/qwen3-14b", "100,1024"), (".gpu/qwen3-14b", "4000,8000"),
                    (".gpu/qwen3-0.6b", "100,1024"), (".gpu/qwen3-0.6b", "4000,8000")], made
    for a, _ in made:
        assert a[a.index("--timeline-batches") + 1] == "0"
        assert a[a.index("--timeline-prefill") + 1] == "8192"
    assert {"prefill-timeline-qwen3-14b-100-1024.log",
            "prefill-timeline-qwen3-0.6b-4000-8000.log"} <= archived_logs(out)


def test_part_132_times_both_shapes_decode_steps_then_the_prefill_steps(tmp_path):
    _, made, out = run_part(tmp_path, "132")
    runs = [a for a, _ in made if a[:1] == ["gpu-check"]]
    decode = [a[a.index("--timeline-model") + 1] for a in runs if "--timeline-prefill" not in a]
    assert decode == [".gpu/qwen3-0.6b", ".gpu/qwen3-14b"], runs
    for a in runs:
        if "--timeline-prefill" not in a:
            assert a[a.index("--timeline-batches") + 1] == "1,64,256"
            assert a[a.index("--timeline-context") + 1] == "256"
    assert sum("--timeline-prefill" in a for a in runs) == 4, runs
    assert {"decode-timeline-qwen3-0.6b.log", "decode-timeline-qwen3-14b.log",
            "prefill-timeline-qwen3-14b-100-1024.log"} <= archived_logs(out)


def test_the_table_can_check_only_the_models_and_stop_before_the_14b(tmp_path):
    r, made, out = run_part(tmp_path, "table", TABLE_CHECKS="models", TABLE_14B="0")
    assert "checks: " in r.stdout and "TABLE_14B=0" in r.stdout, r.stdout[-2000:]
    argvs = [a for a, _ in made]
    # No op checks (gpu-check without --skip-ops, models skipped) before the models'.
    assert not any(a[:1] == ["gpu-check"] and "--skip-ops" not in a and "--skip-models" in a
                   for a in argvs), argvs
    assert any(a[:1] == ["gpu-check"] and "--model" in a for a in argvs), argvs
    assert any(a[0] == "attn_bench" for a in argvs), argvs
    assert not any(".gpu/qwen3-14b" in a for a in argvs), argvs
    offline = [a for a in argvs if a[:2] == ["bench", "offline"]]
    assert len(offline) == 2 and all(".gpu/qwen3-0.6b" in a for a in offline), argvs
    assert {"gpu-check-models-engine.log", "attn.log", "long-qwen3-0.6b.log"} <= archived_logs(out)


def test_the_table_can_leave_out_the_extra_shape(tmp_path):
    r, made, _ = run_part(tmp_path, "table", TABLE_EXTRA="0")
    assert "Llama-3.1-8B steps left out" in r.stdout, r.stdout[-2000:]
    assert not any(".gpu/llama-3.1-8b" in a for a, _ in made), made


def test_the_table_can_leave_out_the_prefill_attention_bench(tmp_path):
    _, made, _ = run_part(tmp_path, "table", TABLE_ATTN="0", TABLE_14B="0")
    argvs = [a for a, _ in made]
    assert not any(a[0] == "attn_bench" for a in argvs), argvs
    assert any(a[:1] == ["gpu-check"] and ".gpu/qwen3-0.6b" in a for a in argvs), argvs


def test_part_140_checks_the_fold_on_every_path_then_times_it_against_the_fold_off(tmp_path):
    _, made, out = run_part(tmp_path, "140")
    runs = [(a, env) for a, env in made if a[:1] == ["gpu-check"]]
    # The fold group alone first, then the chain group.
    assert "--fold-only" in runs[0][0] and "--chain-only" in runs[1][0], runs[:2]
    seeds = [env.get("MINISGL_FOLD_NORMS") for a, env in runs if "--model-seeds" in a]
    assert seeds == ["0", "1"], runs
    models = [env.get("MINISGL_FOLD_NORMS") for a, env in runs if "--random-model" in a]
    assert models == ["1", "0"], runs
    ab = [env for a, env in runs if "--bench-model" in a]
    assert [(e["MINISGL_BENCH_AB"], e["MINISGL_BENCH_BATCHES"]) for e in ab] == [
        ("MINISGL_FOLD_NORMS=0", "1,2,64,256")], ab
    offline = [env.get("MINISGL_FOLD_NORMS") for a, env in made if a[:2] == ["bench", "offline"]]
    assert offline == ["0", "1", "0", "1"], offline
    assert {"gpu-check-fold.log", "gpu-check-seeds-fold1.log", "fold-seeds.md",
            "gpu-check-bench-qwen3-0.6b-nofold.log"} <= archived_logs(out)


def test_part_141_checks_the_mixed_layer_deferral_fold_on_and_off(tmp_path):
    _, made, out = run_part(tmp_path, "141")
    runs = [(a, env) for a, env in made if a[:1] == ["gpu-check"]]
    keys = ("MINISGL_GEMV_MAX_WEIGHT_MB", "MINISGL_FOLD_NORMS")
    assert [tuple(env.get(k) for k in keys) for _, env in runs] == [
        ("10", "1"), ("10", "0"), (None, None)], runs
    for a, _ in runs:
        assert a[a.index("--random-model") + 1] == ".gpu/qwen3-0.6b" and "--skip-engine" in a, a
    assert {"gpu-check-mixed-fold1.log", "gpu-check-mixed-fold0.log",
            "gpu-check-default.log"} <= archived_logs(out)


def test_part_unmet_runs_the_small_decode_steps_then_the_14b_default_workload(tmp_path):
    _, made, out = run_part(tmp_path, "unmet")
    steps = [env for a, env in made if env.get("MINISGL_BENCH_BATCHES")]
    assert [e["MINISGL_BENCH_BATCHES"] for e in steps] == ["1,64,256"], steps
    offline = [a for a, _ in made if a[:2] == ["bench", "offline"]]
    assert [a[a.index("--shape") + 1] for a in offline] == ["qwen3-14b"], offline
    assert "offline-qwen3-14b.log" in archived_logs(out)


def test_part_143_profiles_the_batch_256_step_with_memory_metrics(tmp_path):
    _, made, out = run_part(tmp_path, "143")
    runs = [a for a, _ in made if a[:1] == ["ncu"]]
    assert len(runs) == 1, made
    a = runs[0]
    metrics = a[a.index("--metrics") + 1].split(",")
    assert metrics[0] == "gpu__time_duration.sum" and "lts__t_bytes.sum" in metrics, a
    assert "dram__bytes_read.sum" in metrics, a
    # Several replay passes: each must start from the same (flushed) caches.
    assert a[a.index("--cache-control") + 1] == "all", a
    assert a[a.index("--timeline-model") + 1] == ".gpu/qwen3-0.6b", a
    assert a[a.index("--timeline-batches") + 1] == "256", a
    assert "ncu-steps-qwen3-0.6b-ctx256-mem.md" in archived_logs(out)


def test_part_144_sweeps_the_cublaslt_configurations_of_the_decode_products(tmp_path):
    _, made, out = run_part(tmp_path, "144")
    runs = [(a, env) for a, env in made if a[:1] == ["gpu-check"]]
    assert len(runs) == 1, made
    a, env = runs[0]
    assert env.get("MINISGL_BENCH_GEMM_SWEEP") == "1", env
    assert "--bench-model" in a and "--skip-ops" in a, a
    assert "gpu-check-bench-qwen3-0.6b-sweep.log" in archived_logs(out)
