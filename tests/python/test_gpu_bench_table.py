"""`scripts/gpu-bench.sh device table` (issue 11's whole table in one device call),
`device 97` (the gemv builds to 64 rows) and `device 98` (the Hopper decode GEMM), run
on this machine against stand-ins: a fake `minisgl-host` that records its argv and
MINISGL_* environment and answers `bench offline --jsonl` with a figure, a fake
`attn_bench.py`, `nvidia-smi` and `ncu`. None of these parts has run on a GPU yet, and a
device call costs minutes of a limited budget, so the parts' shell (functions, time
guards, `set -u`) and what they run (both shapes, every workload, the cuDNN reference;
for 97 and 98 the settings each step runs under) are checked here first. The figures
themselves need the GPU."""

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_part(tmp_path, part, fail_tc_gemm=False):
    """Runs `gpu-bench.sh device PART` in a copy of scripts/ with stand-ins; returns
    (the run, every stand-in call as (argv, MINISGL_* environment), the out folder).
    fail_tc_gemm: the fake's `gpu-check --tc-gemm-only` fails as a broken kernel would."""
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "scripts", repo / "scripts")
    shutil.copytree(ROOT / "tests/fixtures/models", repo / "tests/fixtures/models")
    for shape in ("qwen3-0.6b", "qwen3-14b"):
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
        + ("if '--tc-gemm-only' in a:\n    print('1 checks, 1 failed'); sys.exit(1)\n"
           if fail_tc_gemm else "")
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
    env = dict(os.environ, OUT=str(out), PATH=f"{stubs}:{os.environ['PATH']}")
    r = subprocess.run(
        ["bash", "scripts/gpu-bench.sh", "device", part],
        cwd=repo, env=env, capture_output=True, text=True, timeout=120,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "unbound variable" not in r.stderr, r.stderr[-3000:]
    assert "no time left" not in r.stdout, r.stdout[-3000:]
    made = [json.loads(line) for line in calls.read_text().splitlines()]
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
    # Every figure in bench.jsonl, the logs in one archive.
    figures = (out / "bench.jsonl").read_text().splitlines()
    assert len(figures) == 5, figures
    names = archived_logs(out)
    for log in ("attn.log", "offline-qwen3-0.6b.log", "offline-qwen3-14b.log",
                "long-qwen3-0.6b.log", "long-qwen3-14b.log"):
        assert log in names, sorted(names)


def test_part_97_routes_each_step_through_the_gemv_rows_it_names(tmp_path):
    _, made, out = run_part(tmp_path, "97")
    gpu_check = [(a, e) for a, e in made if a[:1] == ["gpu-check"]]
    # Op checks (gpu-check routes its own gemv paths), then the models with 64 rows.
    assert any("--skip-models" in a and "--skip-bench" in a for a, _ in gpu_check), made
    assert any("--skip-ops" in a and "--random-model" in a and e.get("MINISGL_GEMV_ROWS") == "64"
               for a, e in gpu_check), made
    assert any(e.get("MINISGL_BENCH_GEMV_ONLY") == "1" for _, e in gpu_check), made
    ab = [e for _, e in gpu_check if e.get("MINISGL_BENCH_AB") == "MINISGL_GEMV_ROWS=64"]
    assert ab and "MINISGL_GEMV_ROWS" not in ab[0], made
    assert set(ab[0]["MINISGL_BENCH_BATCHES"].split(",")) >= {"8", "16", "32", "64"}, ab
    # The default workload both ways, and the step tables with 64 rows.
    offline = [e.get("MINISGL_GEMV_ROWS") for a, e in made if a[:2] == ["bench", "offline"]]
    assert sorted(offline, key=str) == sorted([None, "64"], key=str), made
    assert any(a[:1] == ["ncu"] and e.get("MINISGL_GEMV_ROWS") == "64" for a, e in made), made
    names = archived_logs(out)
    assert {"offline-qwen3-0.6b-rows4.log", "offline-qwen3-0.6b-rows64.log"} <= names, names


def test_part_98_routes_each_step_through_the_hopper_gemm_it_names(tmp_path):
    _, made, out = run_part(tmp_path, "98")
    gpu_check = [(a, e) for a, e in made if a[:1] == ["gpu-check"]]
    # The kernel's own op checks before anything else.
    assert "--tc-gemm-only" in gpu_check[0][0], made
    # The models with every batch of up to 256 rows through the kernel.
    assert any("--skip-ops" in a and "--random-model" in a and e.get("MINISGL_GEMM_ROWS") == "256"
               for a, e in gpu_check), made
    assert any(e.get("MINISGL_BENCH_TC_GEMM_ONLY") == "1" for _, e in gpu_check), made
    # The A/B's default side is cuBLAS: the setting only on the VAR=VALUE side.
    ab = [e for _, e in gpu_check if e.get("MINISGL_BENCH_AB") == "MINISGL_GEMM_ROWS=256"]
    assert ab and "MINISGL_GEMM_ROWS" not in ab[0], made
    assert set(ab[0]["MINISGL_BENCH_BATCHES"].split(",")) >= {"128", "256"}, ab
    offline = [e.get("MINISGL_GEMM_ROWS") for a, e in made if a[:2] == ["bench", "offline"]]
    assert sorted(offline, key=str) == sorted([None, "256"], key=str), made
    assert any(a[:1] == ["ncu"] and e.get("MINISGL_GEMM_ROWS") == "256" for a, e in made), made
    names = archived_logs(out)
    assert {"offline-qwen3-0.6b-gemm0.log", "offline-qwen3-0.6b-gemm256.log"} <= names, names


def test_part_98_does_part_97s_timing_when_the_hopper_gemm_fails_its_checks(tmp_path):
    r, made, out = run_part(tmp_path, "98", fail_tc_gemm=True)
    assert "part 97's timing instead" in r.stdout, r.stdout[-3000:]
    # Nothing runs with the broken kernel routed, and part 97's steps run instead.
    assert not any(e.get("MINISGL_GEMM_ROWS") for _, e in made), made
    assert any(e.get("MINISGL_BENCH_AB") == "MINISGL_GEMV_ROWS=64" for _, e in made), made
    offline = [e.get("MINISGL_GEMV_ROWS") for a, e in made if a[:2] == ["bench", "offline"]]
    assert sorted(offline, key=str) == sorted([None, "64"], key=str), made
    assert "gpu-check-tc.log" in archived_logs(out)
