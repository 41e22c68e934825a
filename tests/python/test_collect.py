"""scripts/gpu/collect.py turns gpu-check's bench lines into bench.jsonl figures. Since
2026-12-05 gpu-check sets its floors from the copy rate it measures on the card (an H100
copies at ~3.0 TB/s, an H200 at ~4.3), so a figure's ceiling must come from the log,
not from a constant; logs written before then (4.28 TB/s in the text) still parse."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# As host/src/cli/gpu_check/bench.rs prints them (measured rates, an H100).
NEW_LOG = """\
bench: device rates: copy 3.01 TB/s, bf16 GEMM 664 TFLOP/s held (measured now)
bench: decode attention [DecodeMma] batch 256 x ctx 1100, 16q/8kv x 128, page 16: 0.406 ms, 2.84 TB/s = 94% of the 3.01 TB/s copy ceiling (simple kernel: 0.945 ms, 1.22 TB/s)
bench: .gpu/qwen3-14b random weights: floor of a decode step = (bf16 weights 29.54 GB + KV of batch x 256 tokens) at 3.01 TB/s; runner with decode graphs up to batch 256 built in 50.00 s
bench: runner.step greedy decode, batch 1, context ~256: floor 9.300 ms (products' FLOPs at 664 TFLOP/s: 0.044 ms); CUDA graphs 98 tok/s (10.190 ms/step, 1.10x the floor), eager left out
"""

# A log of 5a9bc6a (H200 constants in the text).
OLD_LOG = """\
bench: decode attention [DecodeMma] batch 8 x ctx 16384, 16q/8kv x 128, page 16: 0.209 ms, 2.56 TB/s = 60% of the 4.28 TB/s copy ceiling (simple kernel: 3.922 ms, 0.14 TB/s)
bench: runner.step greedy decode, batch 64, context ~256: floor 0.718 ms (products' FLOPs at 782 TFLOP/s: 0.098 ms); CUDA graphs 26836 tok/s (2.385 ms/step, 3.32x the floor), eager left out
"""


def collect(tmp_path, log):
    run = tmp_path / "run"
    run.mkdir()
    (run / "gpu-check-bench-x.log").write_text(log)
    to = tmp_path / "out.jsonl"
    subprocess.run(
        [sys.executable, str(ROOT / "scripts/gpu/collect.py"), str(run), "--to", str(to),
         "--commit", "abc1234", "--date", "2026-12-05", "--machine", "NVIDIA H100 80GB HBM3"],
        check=True, capture_output=True, text=True,
    )
    return [json.loads(line) for line in to.read_text().splitlines()]


def test_ceilings_come_from_the_rate_the_log_measured(tmp_path):
    figs = {f["metric"]: f for f in collect(tmp_path, NEW_LOG)}
    attn = figs["decode_attention_tbps"]
    assert attn["ceiling"] == 3.01 and attn["fraction"] == round(2.84 / 3.01, 3)
    step = figs["decode_step_ms_b1"]
    assert step["shape"] == "qwen3-14b"
    assert step["ceiling"] == 9.3 and step["value"] == 10.19
    assert "3.01 TB/s" in step["note"] and "4.28" not in step["note"]
    assert step["machine"] == "NVIDIA H100 80GB HBM3"
    assert "serial_floor" not in step


# gpu-check since 2026-12-06: the serial floor at the end of the runner line.
SERIAL_LOG = """\
bench: .gpu/qwen3-14b random weights: floor of a decode step = (bf16 weights 29.54 GB + KV of batch x 265.5 tokens, the timed steps' mean context) at 4.24 TB/s; runner with decode graphs up to batch 256 built in 50.00 s
bench: runner.step greedy decode, batch 256, context ~256: floor 9.248 ms (products' FLOPs at 661 TFLOP/s: 11.440 ms); CUDA graphs 15564 tok/s (16.449 ms/step, 1.78x the floor), eager left out; serial floor 13.947 ms (1.18x)
"""


def test_the_serial_floor_is_recorded_beside_the_bytes_floor(tmp_path):
    step = {f["metric"]: f for f in collect(tmp_path, SERIAL_LOG)}["decode_step_ms_b256"]
    assert step["ceiling"] == 9.248 and step["value"] == 16.449
    assert step["serial_floor"] == 13.947
    assert step["serial_fraction"] == round(13.947 / 16.449, 3)
    assert step["shape"] == "qwen3-14b" and "4.24 TB/s" in step["note"]


def test_logs_from_before_the_measured_rates_still_parse(tmp_path):
    figs = {f["metric"]: f for f in collect(tmp_path, OLD_LOG)}
    assert figs["decode_attention_tbps"]["ceiling"] == 4.28
    assert figs["decode_step_ms_b64"]["ceiling"] == 0.718
    assert "4.28 TB/s" in figs["decode_step_ms_b64"]["note"]


def test_figures_with_empty_date_and_commit_take_the_command_lines(tmp_path):
    # bench offline run by hand (not through gpu-bench.sh) writes date and commit empty.
    run = tmp_path / "run"
    run.mkdir()
    fig = {"date": "", "commit": "", "machine": "NVIDIA H200", "metric": "offline_output_tok_s",
           "value": 6440.6}
    kept = dict(fig, date="2026-12-04", commit="1234abc", value=1.0)
    (run / "bench.jsonl").write_text(json.dumps(fig) + "\n" + json.dumps(kept) + "\n")
    to = tmp_path / "out.jsonl"
    subprocess.run(
        [sys.executable, str(ROOT / "scripts/gpu/collect.py"), str(run), "--to", str(to),
         "--commit", "abc1234", "--date", "2026-12-05", "--machine", "NVIDIA H100 80GB HBM3"],
        check=True, capture_output=True, text=True,
    )
    got = [json.loads(line) for line in to.read_text().splitlines()]
    assert (got[0]["date"], got[0]["commit"], got[0]["machine"]) == ("2026-12-05", "abc1234", "NVIDIA H200")
    assert (got[1]["date"], got[1]["commit"]) == ("2026-12-04", "1234abc")


# As gpu-check prints MINISGL_BENCH_PREFILL_ONLY's lines (an H100, 620c73f's build).
PREFILL_LOG = """\
bench: prefill order 8 x 2,048 fresh, 14B (40q/8kv x 128, page 16) [PrefillWs]: batch 553.6 / seqs 552.3 / tiles 514.4 TFLOP/s (seqs 0.998x, tiles 0.929x the batch's order); outputs equal
"""


def test_prefill_order_lines_give_a_figure_per_order(tmp_path):
    figs = collect(tmp_path, PREFILL_LOG)
    assert [(f["prefill_order"], f["value"]) for f in figs] == [
        ("batch", 553.6), ("seqs", 552.3), ("tiles", 514.4)]
    for f in figs:
        assert f["metric"] == "prefill_attention_tflops"
        assert f["shape"] == "qwen3-14b-attn (40q/8kv x 128)"
        assert f["workload"] == "engine prefill step: 8 x 2,048 fresh, page 16"
        assert f["kernel"] == "PrefillWs" and f["commit"] == "abc1234"


def test_the_engine_path_prefill_line_is_a_figure(tmp_path):
    log = ("bench: prefill attention [PrefillWs] 8 x 2048 new tokens causal, 16q/8kv x 128: 0.274 ms, "
           "502 TFLOP/s (portable mma kernel: 1.717 ms, 80 TFLOP/s; simple kernel: 34.310 ms)\n")
    (f,) = collect(tmp_path, log)
    assert f["metric"] == "prefill_attention_tflops" and f["value"] == 502.0
    assert f["workload"] == "engine prefill step: 8 x 2,048 fresh, page 16"
    assert f["shape"] == "qwen3-0.6b-attn (16q/8kv x 128)" and f["kernel"] == "PrefillWs"
