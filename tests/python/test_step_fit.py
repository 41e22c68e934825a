"""scripts/gpu/step_fit.py: the fit recovers known coefficients from synthetic steps.

Steps are generated from a fixed part, a part per sequence and a KV rate, with batch
and KV varied independently and a deterministic wobble, so each coefficient is
identifiable; prefill steps and steps outside the range must not enter the fit."""

import importlib.util
import math
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("step_fit", ROOT / "scripts/gpu/step_fit.py")
step_fit = importlib.util.module_from_spec(spec)
spec.loader.exec_module(step_fit)

CONFIG = {"hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
          "vocab_size": 151936, "num_attention_heads": 16, "num_key_value_heads": 8,
          "head_dim": 128}


def steps(fixed_us, per_seq_us, tbps):
    _, kv_token = step_fit.shape(CONFIG)
    rows = []
    for i in range(400):
        seqs = 9 + (i * 37) % 248
        ctx = 200 + (i * 53) % 1800
        kv = seqs * ctx
        t = fixed_us + per_seq_us * seqs + kv * kv_token / (tbps * 1e12) * 1e6
        t *= 1 + 0.002 * math.sin(i)
        rows.append({"decode_only": "1", "seqs": str(seqs), "kv_read": str(kv),
                     "step_us": str(round(t))})
    # A prefill step and a batch-1 step that would wreck the fit if they entered it.
    rows.append({"decode_only": "0", "seqs": "16", "kv_read": "0", "step_us": "90000"})
    rows.append({"decode_only": "1", "seqs": "1", "kv_read": "300", "step_us": "50000"})
    return rows


def test_the_fit_recovers_the_generating_coefficients():
    f = step_fit.fit(steps(1500.0, 0.6, 4.05), CONFIG, 2, 256, 4.27e12)
    assert f["steps"] == 400
    assert abs(f["fixed_us"] - 1500.0) < 15
    assert abs(f["per_seq_us"] - 0.6) < 0.2
    assert abs(f["kv_tbps"] - 4.05) < 0.03
    assert f["r2"] > 0.99


def test_the_split_adds_up_to_the_measured_time():
    f = step_fit.fit(steps(2000.0, 3.0, 3.5), CONFIG, 9, 256, 4.27e12)
    parts = (f["weights_s"] + f["fixed_over_s"] + f["per_seq_s"] + f["kv_floor_s"]
             + f["kv_over_s"])
    assert abs(parts - f["measured_s"]) < 1e-3 * f["measured_s"]
    weights, _ = step_fit.shape(CONFIG)
    assert abs(f["weights_s"] - 400 * weights / 4.27e12) < 1e-9


def test_too_few_steps_is_none_and_collinear_columns_are_refused():
    assert step_fit.fit(steps(1500.0, 0.6, 4.0), CONFIG, 300, 400, 4.27e12) is None
    try:
        step_fit.lstsq([[1.0, 2.0], [2.0, 4.0], [3.0, 6.0]], [1.0, 2.0, 3.0])
    except ValueError as e:
        assert "singular" in str(e)
    else:
        raise AssertionError("a rank-deficient fit must be refused")
