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
    r, made, _ = run_part(tmp_path, "104", quiet_ok=True, GPU_NEED="H100")
    assert made == [] and "part 104 not run" in r.stdout, r.stdout[-2000:]
    r, made, _ = run_part(tmp_path / "h200", "104", GPU_NEED="H200")
    assert any(a[:2] == ["bench", "offline"] for a, _ in made), r.stdout[-2000:]


def test_part_109_times_llama_and_qwen_decode_steps_kernel_by_kernel(tmp_path):
    _, made, out = run_part(tmp_path, "109")
    timelines = [a for a, _ in made if "--timeline-model" in a]
    models = [a[a.index("--timeline-model") + 1] for a in timelines]
    assert models == [".gpu/llama-3.1-8b", ".gpu/qwen3-14b"], made
    assert all(a[a.index("--timeline-context") + 1] == "1024" for a in timelines), made
    runner = [e for a, e in made if "--bench-model" in a]
    assert runner and runner[0].get("MINISGL_BENCH_CONTEXT") == "1024", made
    assert runner[0].get("MINISGL_BENCH_BATCHES") == "1,2,4,8,16,32,64", made
    assert {"timeline-llama-3.1-8b.log", "timeline-qwen3-14b.log",
            "gpu-check-bench-llama-3.1-8b-ctx1024.log"} <= archived_logs(out)


def test_part_110_benches_products_near_the_gemv_limit_then_the_llama_ab(tmp_path):
    _, made, out = run_part(tmp_path, "110")
    bench = [e for a, e in made if "--bench-model" in a]
    assert bench[0].get("MINISGL_BENCH_GEMV_ONLY") == "1", made
    ab = bench[1]
    assert ab.get("MINISGL_BENCH_AB") == "MINISGL_GEMV_MAX_WEIGHT_MB=16", made
    assert (ab.get("MINISGL_BENCH_CONTEXT"), ab.get("MINISGL_BENCH_BATCHES")) == ("1024", "2,3,4"), made
    assert {"gpu-check-bench-qwen3-0.6b-gemv.log",
            "gpu-check-bench-llama-3.1-8b-gemv16.log"} <= archived_logs(out)


def test_part_111_checks_the_rows_chain_then_ab_tests_it_on_three_shapes(tmp_path):
    _, made, out = run_part(tmp_path, "111")
    gpu_check = [(a, e) for a, e in made if a[:1] == ["gpu-check"]]
    assert "--chain-only" in gpu_check[1][0], made
    models = [e for a, e in gpu_check if "--model" in a]
    assert models and models[0].get("MINISGL_CHAIN_ROWS") == "4", made
    ab = [(a[a.index("--bench-model") + 1], e) for a, e in gpu_check
          if e.get("MINISGL_BENCH_AB") == "MINISGL_CHAIN_ROWS=4"]
    assert [m for m, _ in ab] == [".gpu/qwen3-0.6b", ".gpu/llama-3.1-8b", ".gpu/qwen3-14b"], made
    for _, e in ab:
        assert e["MINISGL_BENCH_AB"] == "MINISGL_CHAIN_ROWS=4", e
        assert (e.get("MINISGL_BENCH_CONTEXT"), e.get("MINISGL_BENCH_BATCHES")) == ("1024", "2,3,4"), e
    assert all(e["MINISGL_BENCH_AB"] == "MINISGL_CHAIN_ROWS=4" for _, e in ab)
    ops = [a for a, _ in gpu_check if "--skip-models" in a and "--skip-engine" in a]
    assert ops and gpu_check[0][0] == ops[0], made
    tc2 = [a[a.index("--bench-model") + 1] for a, e in gpu_check
           if e.get("MINISGL_BENCH_AB") == "MINISGL_GEMV_TC_TWO=0"]
    assert tc2 == [".gpu/qwen3-0.6b", ".gpu/llama-3.1-8b"], made
    assert {"gpu-check-ops.log.gz", "gpu-check-chain-rows.log", "gpu-check-models.log",
            "gpu-check-bench-qwen3-14b-rows.log",
            "gpu-check-bench-llama-3.1-8b-tc2.log"} <= archived_logs(out)


def test_part_112_checks_the_two_row_default_and_ab_tests_it_against_one_row(tmp_path):
    _, made, out = run_part(tmp_path, "112")
    gpu_check = [(a, e) for a, e in made if a[:1] == ["gpu-check"]]
    assert "--chain-only" in gpu_check[0][0], made
    assert any("--model" in a and "--skip-engine" not in a for a, _ in gpu_check), made
    ab = [e for a, e in gpu_check if "--bench-model" in a]
    assert ab and ab[0].get("MINISGL_BENCH_AB") == "MINISGL_CHAIN_ROWS=1", made
    assert any(a[:2] == ["bench", "offline"] for a, _ in made), made
    assert {"gpu-check-chain-rows2.log", "gpu-check-models-engine.log",
            "offline-qwen3-0.6b.log"} <= archived_logs(out)


def test_part_113_runs_the_shared_prefix_workload_by_popularity_with_and_without_the_cache(tmp_path):
    _, made, out = run_part(tmp_path, "113")
    offline = [a for a, _ in made if a[:2] == ["bench", "offline"]]
    assert len(offline) == 1, made
    a = offline[0]
    assert a[a.index("--group-order") + 1] == "popular" and "--compare-cache" in a, a
    assert "order=popular" in a[a.index("--workload-name") + 1], a
    assert "shared-prefix-popular.log" in archived_logs(out)


def test_part_114_checks_the_two_sequence_span_then_ab_tests_it_and_runs_part_113(tmp_path):
    _, made, out = run_part(tmp_path, "114")
    gpu_check = [(a, e) for a, e in made if a[:1] == ["gpu-check"]]
    assert "--chain-only" in gpu_check[0][0], made
    assert any("--model" in a and "--skip-engine" not in a for a, _ in gpu_check), made
    ab = [e for a, e in gpu_check if "--bench-model" in a]
    assert [e.get("MINISGL_BENCH_AB") for e in ab] == ["MINISGL_CHAIN_ATTN_ROWS=1"] * 2, made
    assert [(e["MINISGL_BENCH_BATCHES"], e.get("MINISGL_BENCH_CONTEXT")) for e in ab] == [
        ("1,2,4", None), ("2", "1024")], made
    offline = [a for a, _ in made if a[:2] == ["bench", "offline"]]
    assert len(offline) == 2 and "--compare-cache" in offline[0], made
    assert {"gpu-check-chain-span-rows.log", "gpu-check-models-engine.log",
            "gpu-check-bench-qwen3-0.6b-attnrows1.log", "shared-prefix-popular.log",
            "offline-qwen3-0.6b.log"} <= archived_logs(out)


def test_part_116_checks_the_paired_reduction_then_ab_tests_it_and_traces_the_chain(tmp_path):
    _, made, out = run_part(tmp_path, "116")
    gpu_check = [(a, e) for a, e in made if a[:1] == ["gpu-check"]]
    first, models = gpu_check[0], gpu_check[2]
    assert "--chain-only" in first[0] and first[1]["MINISGL_KERNEL_DEFINES"] == "LC_REDUCE_PAIRS=1"
    assert "--model" in models[0] and models[1]["MINISGL_KERNEL_DEFINES"] == "LC_REDUCE_PAIRS=1"
    ab = [(a[a.index("--bench-model") + 1], e.get("MINISGL_BENCH_CONTEXT")) for a, e in gpu_check
          if e.get("MINISGL_BENCH_AB") == "MINISGL_KERNEL_DEFINES=LC_REDUCE_PAIRS=1"]
    assert ab == [(".gpu/qwen3-0.6b", None), (".gpu/qwen3-0.6b", "1024"),
                  (".gpu/llama-3.1-8b", None)], made
    assert any(e.get("MINISGL_KERNEL_DEFINES") == "LC_TRACE=1" for _, e in gpu_check), made
    assert any("--timeline-model" in a for a, _ in gpu_check), made
    assert {"gpu-check-chain-pairs.log", "gpu-check-chain-trace.log", "gpu-check-models.log",
            "timeline-qwen3-0.6b.log"} <= archived_logs(out)


def test_part_117_checks_the_flagged_exchanges_then_ab_tests_them_and_traces_the_chain(tmp_path):
    _, made, out = run_part(tmp_path, "117")
    gpu_check = [(a, e) for a, e in made if a[:1] == ["gpu-check"]]
    first, models = gpu_check[0], gpu_check[2]
    assert "--chain-only" in first[0] and first[1]["MINISGL_KERNEL_DEFINES"] == "LC_XCH=1"
    assert "--model" in models[0] and "--skip-engine" not in models[0], made
    assert models[1]["MINISGL_KERNEL_DEFINES"] == "LC_XCH=1"
    ab = [(a[a.index("--bench-model") + 1], e.get("MINISGL_BENCH_CONTEXT")) for a, e in gpu_check
          if e.get("MINISGL_BENCH_AB") == "MINISGL_KERNEL_DEFINES=LC_XCH=1"]
    assert ab == [(".gpu/qwen3-0.6b", None), (".gpu/qwen3-0.6b", "1024"),
                  (".gpu/llama-3.1-8b", None)], made
    assert any(e.get("MINISGL_KERNEL_DEFINES") == "LC_XCH=1 LC_TRACE=1" for _, e in gpu_check), made
    assert {"gpu-check-chain-xch.log", "gpu-check-chain-xch-trace.log",
            "gpu-check-models-engine.log", "gpu-check-bench-qwen3-0.6b-xch.log"} <= archived_logs(out)


def test_part_118_times_the_small_model_steps_then_its_default_workload(tmp_path):
    _, made, out = run_part(tmp_path, "118")
    steps = [e for a, e in made if a[:1] == ["gpu-check"] and "--bench-model" in a]
    assert [e.get("MINISGL_BENCH_BATCHES") for e in steps] == ["1,2,64,256"], made
    offline = [a for a, _ in made if a[:2] == ["bench", "offline"]]
    assert len(offline) == 1 and ".gpu/qwen3-0.6b" in offline[0], made
    assert {"gpu-check-bench-qwen3-0.6b.log", "offline-qwen3-0.6b.log"} <= archived_logs(out)


def test_part_119_checks_the_staged_attention_then_ab_tests_it_by_context(tmp_path):
    _, made, out = run_part(tmp_path, "119")
    gpu_check = [(a, e) for a, e in made if a[:1] == ["gpu-check"]]
    first, models = gpu_check[0], gpu_check[1]
    assert "--chain-only" in first[0] and first[1].get("MINISGL_KERNEL_DEFINES") == "", made
    assert "--model" in models[0] and "MINISGL_KERNEL_DEFINES" not in models[1], made
    ab = [(a[a.index("--bench-model") + 1], e.get("MINISGL_BENCH_CONTEXT"), e["MINISGL_BENCH_AB"])
          for a, e in gpu_check if "MINISGL_BENCH_AB" in e]
    staged, separate = "MINISGL_KERNEL_DEFINES=LC_ATT_STAGED=0", "MINISGL_CHAIN_ATTN=0"
    assert ab == [(".gpu/qwen3-0.6b", c, staged) for c in ("256", "2048", "8192", "16384")] + [
        (".gpu/qwen3-0.6b", c, separate) for c in ("8192", "16384")] + [
        (".gpu/llama-3.1-8b", "8192", staged)], made
    assert all(e["MINISGL_BENCH_BATCHES"] == "1,2" for a, e in gpu_check if "MINISGL_BENCH_AB" in e)
    assert {"gpu-check-chain-staged.log", "gpu-check-models.log",
            "gpu-check-bench-qwen3-0.6b-staged-ctx16384.log",
            "gpu-check-bench-qwen3-0.6b-separate-ctx8192.log",
            "gpu-check-bench-llama-3.1-8b-staged-ctx8192.log"} <= archived_logs(out)


def test_part_120_traces_both_attention_builds_then_times_the_decode_kernels(tmp_path):
    _, made, out = run_part(tmp_path, "120")
    gpu_check = [(a, e) for a, e in made if a[:1] == ["gpu-check"]]
    assert [e.get("MINISGL_KERNEL_DEFINES") for a, e in gpu_check if "--chain-only" in a] == [
        "LC_TRACE=1", "LC_TRACE=1 LC_ATT_STAGED=0"], made
    assert [e.get("MINISGL_BENCH_DECODE_ONLY") for a, e in gpu_check if "--bench-model" in a] == ["1"]
    assert {"gpu-check-chain-trace.log", "gpu-check-chain-trace-regs.log",
            "gpu-check-bench-qwen3-0.6b-decode.log"} <= archived_logs(out)


def test_part_121_ab_tests_the_weight_stream_before_the_attention_by_context(tmp_path):
    _, made, out = run_part(tmp_path, "121")
    ab = [(a[a.index("--bench-model") + 1], e.get("MINISGL_BENCH_CONTEXT"), e["MINISGL_BENCH_AB"])
          for a, e in made if a[:1] == ["gpu-check"] and "MINISGL_BENCH_AB" in e]
    hold = "MINISGL_CHAIN_HOLD=1048576"
    assert ab == [(".gpu/qwen3-0.6b", c, hold) for c in ("256", "2048", "8192", "16384")] + [
        (".gpu/llama-3.1-8b", "8192", hold)], made
    assert {"gpu-check-bench-qwen3-0.6b-hold-ctx2048.log",
            "gpu-check-bench-llama-3.1-8b-hold-ctx8192.log"} <= archived_logs(out)


def test_part_122_checks_the_reused_step_values_then_ab_tests_them(tmp_path):
    _, made, out = run_part(tmp_path, "122")
    gpu_check = [(a, e) for a, e in made if a[:1] == ["gpu-check"]]
    assert "--chain-only" in gpu_check[0][0] and "--model" in gpu_check[1][0], made
    ab = [(a[a.index("--bench-model") + 1], e.get("MINISGL_BENCH_CONTEXT"), e["MINISGL_BENCH_AB"])
          for a, e in gpu_check if "MINISGL_BENCH_AB" in e]
    off = "MINISGL_KERNEL_DEFINES=LC_STEP_REUSE=0"
    assert ab == [(".gpu/qwen3-0.6b", c, off) for c in ("256", "1024", "4096")] + [
        (".gpu/llama-3.1-8b", None, off)], made
    assert {"gpu-check-chain-reuse.log", "gpu-check-models.log",
            "gpu-check-bench-llama-3.1-8b-reuse.log"} <= archived_logs(out)


def test_part_123_times_the_decode_kernels_both_orders_then_ab_tests_the_steps(tmp_path):
    _, made, out = run_part(tmp_path, "123")
    benches = [e for a, e in made if a[:1] == ["gpu-check"] and "--bench-model" in a]
    assert [(e.get("MINISGL_BENCH_DECODE_ONLY"), e.get("MINISGL_KERNEL_DEFINES")) for e in benches[:2]] == [
        ("1", None), ("1", "DECODE_HEADS_FIRST=1")], made
    heads = "MINISGL_KERNEL_DEFINES=DECODE_HEADS_FIRST=1"
    assert [(e.get("MINISGL_BENCH_CONTEXT"), e["MINISGL_BENCH_BATCHES"], e["MINISGL_BENCH_AB"])
            for e in benches[2:]] == [("4096", "4,8", heads), ("256", "4,8", heads),
                                      ("8192", "1,4", heads)], made
    models = [e for a, e in made if a[:1] == ["gpu-check"] and "--model" in a]
    assert [e.get("MINISGL_KERNEL_DEFINES") for e in models] == ["DECODE_HEADS_FIRST=1"], made
    assert {"gpu-check-bench-qwen3-0.6b-decode.log", "gpu-check-bench-qwen3-0.6b-decode-heads.log",
            "gpu-check-models.log", "gpu-check-bench-qwen3-14b-heads-ctx8192.log"} <= archived_logs(out)


def test_part_124_profiles_one_span_launch_at_a_long_and_a_short_context(tmp_path):
    _, made, out = run_part(tmp_path, "124")
    profiled = [a for a, _ in made if a[:1] == ["ncu"] and "--set" in a]
    assert [(a[a.index("-k") + 1], a[a.index("-s") + 1], a[a.index("--timeline-context") + 1])
            for a in profiled] == [("regex:layer_chain_span_g2", "1", "16384"),
                                   ("regex:layer_chain_span_g2", "1", "256")], made
    assert {"ncu-details-span-ctx16384.txt", "ncu-details-span-ctx256.txt"} <= archived_logs(out)


def test_part_125_checks_the_barrier_free_staged_tiles_then_ab_tests_them(tmp_path):
    _, made, out = run_part(tmp_path, "125")
    gpu_check = [(a, e) for a, e in made if a[:1] == ["gpu-check"]]
    assert "--chain-only" in gpu_check[0][0]
    assert gpu_check[0][1]["MINISGL_KERNEL_DEFINES"] == "LC_ATT_STAGED=1", made
    ab = [(e.get("MINISGL_BENCH_CONTEXT"), e["MINISGL_BENCH_AB"]) for a, e in gpu_check
          if "MINISGL_BENCH_AB" in e]
    assert ab == [(c, "MINISGL_KERNEL_DEFINES=LC_ATT_STAGED=1") for c in ("16384", "2048", "256")]
    assert {"gpu-check-chain-staged.log", "gpu-check-bench-qwen3-0.6b-staged-ctx256.log"} <= archived_logs(out)


def test_part_126_checks_the_engine_then_ab_tests_the_staged_default_on_llama_too(tmp_path):
    _, made, out = run_part(tmp_path, "126")
    gpu_check = [(a, e) for a, e in made if a[:1] == ["gpu-check"]]
    assert "--model" in gpu_check[0][0] and "--skip-engine" not in gpu_check[0][0], made
    ab = [(a[a.index("--bench-model") + 1], e.get("MINISGL_BENCH_CONTEXT"), e["MINISGL_BENCH_AB"])
          for a, e in gpu_check if "MINISGL_BENCH_AB" in e]
    regs = "MINISGL_KERNEL_DEFINES=LC_ATT_STAGED=0"
    assert ab == [(".gpu/qwen3-0.6b", "16384", regs), (".gpu/qwen3-0.6b", "4096", regs),
                  (".gpu/llama-3.1-8b", "8192", regs)], made
    assert {"gpu-check-models-engine.log",
            "gpu-check-bench-llama-3.1-8b-registers-ctx8192.log"} <= archived_logs(out)


def test_part_127_checks_the_mixed_steps_then_replays_the_trace_both_ways(tmp_path):
    r, made, out = run_part(tmp_path, "127")
    gpu_check = [(a, e) for a, e in made if a[:1] == ["gpu-check"]]
    # Every op check first (the mixed attention cases among them), then the mixed bench.
    assert "--skip-bench" in gpu_check[0][0] and "--skip-ops" not in gpu_check[0][0], made
    assert gpu_check[1][1].get("MINISGL_BENCH_MIXED_ONLY") == "1", made
    replays = [(a, e) for a, e in made if a[:1] == ["compare"]]
    assert [e.get("MINISGL_MIXED_SPLIT") for _, e in replays] == ["1", "0"], made
    for a, _ in replays:
        assert a[a.index("--backend") + 1] == "cuda"
        assert "fcfs=native" in a and "sarathi=.gpu/plugins/minisgl_example_sarathi.wasm" in a
        assert a[a.index("--trace") + 1] == ".gpu/workloads/mooncake_conversation_400.jsonl"
    assert any("--model" in a for a, _ in gpu_check), made
    assert {"gpu-check-ops.log", "gpu-check-bench-mixed.log", "replay-split1.log",
            "replay-split0.log", "gpu-check-models.log"} <= archived_logs(out)


def test_part_128_replays_the_chat_trace_on_14b_with_the_split_on_then_off(tmp_path):
    _, made, out = run_part(tmp_path, "128")
    replays = [(a, e) for a, e in made if a[:1] == ["compare"]]
    assert [e.get("MINISGL_MIXED_SPLIT") for _, e in replays] == ["1", "0"], made
    policies = [[a[i + 1] for i, x in enumerate(a) if x == "--policy"] for a, _ in replays]
    sarathi = "sarathi=.gpu/plugins/minisgl_example_sarathi.wasm"
    assert policies == [["fcfs=native", sarathi], [sarathi]], made
    for a, _ in replays:
        assert a[a.index("--random-weights") + 1] == ".gpu/qwen3-14b"
        assert a[a.index("--trace") + 1] == ".gpu/workloads/azure_conv_2000.csv"
        assert a[a.index("--max-prefill-tokens") + 1] == "2048"
    assert {"replay14b-split1.log", "replay14b-split0.log"} <= archived_logs(out)


def test_part_129_is_part_128_on_llama(tmp_path):
    _, made, out = run_part(tmp_path, "129")
    replays = [(a, e) for a, e in made if a[:1] == ["compare"]]
    assert [(a[a.index("--random-weights") + 1], a[a.index("--num-requests") + 1],
             a[a.index("--time-scale") + 1], e.get("MINISGL_MIXED_SPLIT")) for a, e in replays] == [
        (".gpu/llama-3.1-8b", "600", "0.15", "1"), (".gpu/llama-3.1-8b", "600", "0.15", "0")], made
    assert {"replay8b-split1.log", "replay8b-split0.log"} <= archived_logs(out)


def test_part_130_runs_the_default_workload_under_fcfs_and_sarathi_on_both_shapes(tmp_path):
    _, made, out = run_part(tmp_path, "130")
    runs = [(a[a.index("--random-weights") + 1],
             a[a.index("--scheduler") + 1] if "--scheduler" in a else None)
            for a, _ in made if a[:2] == ["bench", "offline"]]
    sarathi = ".gpu/plugins/minisgl_example_sarathi.wasm"
    assert runs == [(".gpu/qwen3-14b", None), (".gpu/qwen3-14b", sarathi),
                    (".gpu/qwen3-0.6b", None), (".gpu/qwen3-0.6b", sarathi)], made
    assert len((out / "bench.jsonl").read_text().splitlines()) == 4
    assert {"offline-qwen3-14b-sarathi.log", "offline-qwen3-0.6b-fcfs.log"} <= archived_logs(out)



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


def test_part_136_checks_then_times_the_sampler_copy_the_fold_and_bf16_logits(tmp_path):
    _, made, out = run_part(tmp_path, "136")
    runs = [(a, env) for a, env in made if a[:1] == ["gpu-check"]]
    # Every op check first (the sampling and fold groups are among them).
    assert "--skip-models" in runs[0][0] and "--fold-only" not in runs[0][0], runs[0]
    models = [(a, env) for a, env in runs if "--random-model" in a]
    assert [(env.get("MINISGL_FOLD_NORMS"), env.get("MINISGL_LOGITS_BF16"), "--skip-engine" in a)
            for a, env in models] == [(None, None, False), ("1", None, True), (None, "1", False)]
    ab = [(a[a.index("--bench-model") + 1], env) for a, env in runs if "--bench-model" in a]
    assert [(m, env["MINISGL_BENCH_AB"], env["MINISGL_BENCH_BATCHES"]) for m, env in ab] == [
        (".gpu/qwen3-0.6b", "MINISGL_SAMPLE_COPY=0", "8,64,256"),
        (".gpu/qwen3-0.6b", "MINISGL_FOLD_NORMS=1", "64,256"),
        (".gpu/qwen3-0.6b", "MINISGL_LOGITS_BF16=1", "64,256"),
        (".gpu/qwen3-14b", "MINISGL_FOLD_NORMS=1", "64,256"),
    ], ab
    # The copy's A/B: the old sampler as built, the new one as the variant.
    assert ab[0][1].get("MINISGL_SAMPLE_COPY") == "1", ab[0]
    offline = [env for a, env in made if a[:2] == ["bench", "offline"]]
    keys = ("MINISGL_SAMPLE_COPY", "MINISGL_FOLD_NORMS", "MINISGL_LOGITS_BF16")
    assert [tuple(e.get(k) for k in keys) for e in offline] == [
        (None, None, None), ("1", None, None), (None, "1", None), (None, None, "1"),
    ], offline
    assert {"gpu-check-models-engine.log", "gpu-check-models-fold1.log",
            "gpu-check-models-engine-bf16.log", "gpu-check-bench-qwen3-0.6b-nocopy.log",
            "offline-qwen3-0.6b-MINISGL_LOGITS_BF16.log"} <= archived_logs(out)


def test_part_137_checks_bf16_logits_then_alternates_their_timings(tmp_path):
    _, made, out = run_part(tmp_path, "137")
    runs = [(a, env) for a, env in made if a[:1] == ["gpu-check"]]
    assert "--random-model" in runs[0][0] and "--skip-engine" not in runs[0][0], runs[0]
    assert runs[0][1].get("MINISGL_LOGITS_BF16") == "1", runs[0]
    ab = [env for a, env in runs if "--bench-model" in a]
    assert [(e["MINISGL_BENCH_AB"], e["MINISGL_BENCH_BATCHES"]) for e in ab] == [
        ("MINISGL_LOGITS_BF16=1", "1,8,128,256")], ab
    offline = [env.get("MINISGL_LOGITS_BF16") for a, env in made if a[:2] == ["bench", "offline"]]
    assert offline == ["1", None] * 3, offline
    assert {"gpu-check-models-engine-bf16.log", "offline-qwen3-0.6b-none-2.log",
            "offline-qwen3-0.6b-MINISGL_LOGITS_BF16-0.log"} <= archived_logs(out)


def test_part_138_reads_the_fixtures_over_six_prompt_draws_with_the_fold_off_and_on(tmp_path):
    _, made, out = run_part(tmp_path, "138")
    runs = [(a, env) for a, env in made if a[:1] == ["gpu-check"]]
    assert [env.get("MINISGL_FOLD_NORMS") for _, env in runs] == ["0", "1"], runs
    for a, _ in runs:
        assert a[a.index("--model-seeds") + 1] == "6" and "--skip-engine" in a, a
        assert a.count("--model") >= 7, a
    assert {"gpu-check-models-seeds-fold0.log", "gpu-check-models-seeds-fold1.log"} <= archived_logs(out)


def test_part_139_reads_the_fixtures_alone_over_six_draws_under_five_fold_settings(tmp_path):
    _, made, out = run_part(tmp_path, "139")
    runs = [(a, env) for a, env in made if a[:1] == ["gpu-check"]]
    keys = ("MINISGL_FOLD_NORMS", "MINISGL_FOLD_DEFER", "MINISGL_GEMV_ROWS")
    assert [tuple(env.get(k) for k in keys) for _, env in runs] == [
        ("0", None, None), ("1", None, None), ("1", "0", None), ("0", None, "0"), ("1", None, "0"),
    ], runs
    for a, _ in runs:
        assert a[a.index("--model-seeds") + 1] == "6" and "--skip-engine" in a, a
        assert a.count("--model") >= 7 and "--random-model" not in a, a
    assert {"gpu-check-seeds-fold0.log", "gpu-check-seeds-fold1-nodefer.log",
            "gpu-check-seeds-fold1-gemv0.log", "fold-seeds.md"} <= archived_logs(out)


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
