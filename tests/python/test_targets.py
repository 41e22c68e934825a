"""scripts/gpu/targets.py: issue 11's targets by round, on hand-made figures (no GPU).

The tracker must group by round and card in the file's order, judge only the issue's
card (an H200) against the targets, leave out an A/B's second runner
and prefill kernels other than the engine's, and judge a decode step against its floor
(value / ceiling) and the offline runs by value or fraction."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("targets", ROOT / "scripts/gpu/targets.py")
targets = importlib.util.module_from_spec(spec)
spec.loader.exec_module(targets)


def fig(rnd, metric, shape, workload, value, **kw):
    o = {"date": "2026-12-04", "commit": kw.pop("commit", "c0"), "machine": "NVIDIA H200",
         "shape": shape, "tp": 1, "workload": workload, "metric": metric, "value": value,
         "unit": "x", "round": rnd}
    o.update(kw)
    return o


def by_target(rows):
    return {t["target"]: t for t in targets.table(rows)}


def test_rounds_in_file_order_with_ab_runners_left_out():
    w = targets.step(1)
    rows = [
        fig("r-late-name", "decode_step_ms_b1", "qwen3-0.6b", w, 0.90, ceiling=0.3),
        fig("r-late-name", "decode_step_ms_b1", "qwen3-0.6b", w, 0.87, ceiling=0.3, commit="c1"),
        # An A/B's second runner: not the round's figure.
        fig("r-late-name", "decode_step_ms_b1", "qwen3-0.6b", w, 0.10, ceiling=0.3, ab="X=1"),
        fig("a-early-name", "decode_step_ms_b1", "qwen3-0.6b", w, 0.85, ceiling=0.3),
    ]
    t = by_target(rows)["decode step batch 1, 0.6B"]
    assert [r["round"] for r in t["rounds"]] == ["r-late-name", "a-early-name"]
    first, second = t["rounds"]
    assert first["n"] == 2 and first["commits"] == ["c0", "c1"]
    assert abs(first["median"] - 0.885 / 0.3) < 1e-9
    assert first["met"]  # 2.95x the floor meets 3x
    assert second["met"] == (0.85 / 0.3 <= 3.0)


def test_prefill_counts_only_the_engine_kernel_and_offline_uses_value_or_fraction():
    rows = [
        fig("r", "prefill_attention_tflops", "qwen3-14b", "8x2048 fresh", 530, kernel="torch-sdpa-cudnn"),
        fig("r", "prefill_attention_tflops", "qwen3-14b", "8x2048 fresh", 440, kernel="minisgl-hopper-ws"),
        fig("r", "prefill_attention_tflops", "qwen3-14b", "8x2048 fresh", 470,
            kernel="minisgl-hopper-ws+P_VSTAGES=2"),
        fig("r", "offline_output_tok_s", "qwen3-14b", targets.DEFAULT, 6600, fraction=0.79),
        fig("r", "offline_output_tok_s", "qwen3-14b", targets.LONG, 150, fraction=0.97),
    ]
    t = by_target(rows)
    pre = t["prefill attention 8x2048, 14B heads"]["rounds"]
    assert len(pre) == 1 and pre[0]["n"] == 1 and pre[0]["median"] == 440 and not pre[0]["met"]
    assert t["offline default workload, 14B"]["rounds"][0]["met"]  # 6,600 >= 6,500
    assert t["long prompts, 14B"]["rounds"][0]["median"] == 0.97
    assert t["offline default workload, 0.6B"]["rounds"] == []


def test_the_repository_file_reads_and_prints(capsys):
    targets.main(["--last", "2"])
    out = capsys.readouterr().out
    assert "## decode step batch 256, 0.6B (target: ratio<= 1.5)" in out
    rows = [json.loads(l) for l in (ROOT / "docs/results/bench.jsonl").read_text().splitlines()]
    assert any(t["rounds"] for t in targets.table(rows))


def test_cards_are_grouped_apart_and_only_the_h200_is_judged():
    w = targets.DEFAULT
    rows = [
        fig("r", "offline_output_tok_s", "qwen3-0.6b", w, 26000, machine="NVIDIA H200"),
        fig("r", "offline_output_tok_s", "qwen3-0.6b", w, 19500, machine="NVIDIA H100 80GB HBM3"),
        fig("r", "offline_output_tok_s", "qwen3-0.6b", w, 25500, machine="NVIDIA H200"),
    ]
    rounds = by_target(rows)["offline default workload, 0.6B"]["rounds"]
    assert [(r["round"], r["card"], r["n"]) for r in rounds] == [("r", "H200", 2), ("r", "H100", 1)]
    assert rounds[0]["median"] == 25750 and rounds[0]["met"] is True
    assert rounds[1]["met"] is None  # not the card: neither met nor not met


def test_the_engine_prefill_target_takes_the_default_order_only():
    w = "engine prefill step: 8 x 2,048 fresh, page 16"
    shape = "qwen3-0.6b-attn (16q/8kv x 128)"
    ab = "median of 3 rounds, each led by another order (gpu-check MINISGL_BENCH_PREFILL_ONLY)"
    rows = [
        # The plain bench line of a build whose default was the by-tile order.
        fig("r", "prefill_attention_tflops", shape, w, 502, kernel="PrefillWs", prefill_order="tiles"),
        fig("r", "prefill_attention_tflops", shape, w, 533, kernel="PrefillWs", prefill_order="seqs", method=ab),
        fig("r", "prefill_attention_tflops", shape, w, 490, kernel="PrefillWs", prefill_order="tiles", method=ab),
        fig("r", "prefill_attention_tflops", shape, w, 532, kernel="PrefillWs", prefill_order="batch", method=ab),
    ]
    (r,) = by_target(rows)["prefill attention 8x2048 in the engine, 0.6B heads"]["rounds"]
    assert r["n"] == 2 and r["min"] == 502 and r["max"] == 533
