"""`scripts/gpu-bench.sh device table` (issue 11's whole table in one device call), run
on this machine against stand-ins: a fake `minisgl-host` that records its argv and
answers `bench offline --jsonl` with a figure, a fake `attn_bench.py`, and a fake
`nvidia-smi`. A device call costs minutes of a limited budget, so the part's shell
(its functions, time guards, `set -u`) and its coverage (both shapes, every workload,
the cuDNN reference) are checked here first; the figures themselves need the GPU."""

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_table_part_runs_every_step_on_both_shapes(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "scripts", repo / "scripts")
    for shape in ("qwen3-0.6b", "qwen3-14b"):
        (repo / ".gpu" / shape).mkdir(parents=True)
        shutil.copy(ROOT / "examples/model-configs" / shape / "config.json", repo / ".gpu" / shape)
    (repo / ".gpu/commit").write_text("abc1234\n")
    calls = tmp_path / "calls.jsonl"
    fake = (
        f"#!{sys.executable}\n"
        "import json, sys\n"
        "a = sys.argv[1:]\n"
        f"open({str(calls)!r}, 'a').write(json.dumps(a) + '\\n')\n"
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
        "import json, sys\n"
        "a = sys.argv[1:]\n"
        f"open({str(calls)!r}, 'a').write(json.dumps(['attn_bench'] + a) + '\\n')\n"
        "fig = {'metric': 'prefill_attention_tflops', 'value': 1.0}\n"
        "open(a[a.index('--jsonl') + 1], 'a').write(json.dumps(fig) + '\\n')\n"
    )
    stubs = tmp_path / "bin"
    stubs.mkdir()
    smi = stubs / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'name, driver_version'\necho 'Stub H200, 0'\n")
    smi.chmod(0o755)
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), PATH=f"{stubs}:{os.environ['PATH']}")
    r = subprocess.run(
        ["bash", "scripts/gpu-bench.sh", "device", "table"],
        cwd=repo, env=env, capture_output=True, text=True, timeout=120,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "unbound variable" not in r.stderr, r.stderr[-3000:]
    assert "no time left" not in r.stdout, r.stdout[-3000:]
    assert "table: " in r.stdout

    argvs = [json.loads(line) for line in calls.read_text().splitlines()]
    joined = [" ".join(a) for a in argvs]
    assert any(a[0] == "attn_bench" for a in argvs), joined
    for shape in ("qwen3-0.6b", "qwen3-14b"):
        # The decode steps (gpu-check's runner), the default workload and long prompts.
        assert any(a[:1] == ["gpu-check"] and f".gpu/{shape}" in a for a in argvs), joined
        offline = [a for a in argvs if a[:2] == ["bench", "offline"] and f".gpu/{shape}" in a]
        assert any("--min-input-len" not in a for a in offline), f"{shape} default: {joined}"
        assert any("4000" in a for a in offline), f"{shape} long prompts: {joined}"

    # Every figure in bench.jsonl, the logs in one archive (the tool returns few files).
    figures = (out / "bench.jsonl").read_text().splitlines()
    assert len(figures) == 5, figures
    archives = list(out.glob("*.tgz"))
    assert len(archives) == 1, sorted(p.name for p in out.iterdir())
    with tarfile.open(archives[0]) as t:
        names = {Path(n).name for n in t.getnames()}
    for log in ("attn.log", "offline-qwen3-0.6b.log", "offline-qwen3-14b.log",
                "long-qwen3-0.6b.log", "long-qwen3-14b.log"):
        assert log in names, sorted(names)
