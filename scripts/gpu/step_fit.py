#!/usr/bin/env python3
"""Where a workload's decode steps spend their time: a least-squares fit of each step's
time as a fixed part, a part per sequence and a part per byte of KV read.

`bench offline --steps-csv` writes one row per step. Over the decode steps whose batch
lies in a range, this fits

    step_us = fixed + per_seq * seqs + per_gb * kv_gb

and prints the three coefficients, the KV rate they imply (1 / per_gb), R², and how the
range's measured seconds split into: the weights once per step at the copy rate (the
fixed part's floor), the fixed part above that, the per-sequence part, the KV at the
copy rate, and the KV above it. The ranges overlap on purpose: a batch range too narrow
leaves seqs and kv_gb collinear (a negative coefficient says so), and the widest range
is the one to read. The fit is plain Python (normal equations), so it runs anywhere.

usage: step_fit.py STEPS.csv CONFIG.json [--copy 4.27e12] [--ranges 9-256,65-256]
"""
import argparse
import csv
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serial_bound import decode_shape  # noqa: E402  (a sibling script)


def solve(a, b):
    """Solves a·x = b (small, dense) by Gauss-Jordan with partial pivoting."""
    n = len(a)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for i in range(n):
        p = max(range(i, n), key=lambda r: abs(m[r][i]))
        m[i], m[p] = m[p], m[i]
        if m[i][i] == 0:
            raise ValueError("singular fit: the columns are linearly dependent")
        for r in range(n):
            if r != i:
                f = m[r][i] / m[i][i]
                for c in range(i, n + 1):
                    m[r][c] -= f * m[i][c]
    return [m[i][n] / m[i][i] for i in range(n)]


def lstsq(xs, ys):
    """Least-squares coefficients of ys against the rows xs, and R²."""
    k = len(xs[0])
    a = [[sum(x[i] * x[j] for x in xs) for j in range(k)] for i in range(k)]
    b = [sum(x[i] * y for x, y in zip(xs, ys)) for i in range(k)]
    co = solve(a, b)
    mean = sum(ys) / len(ys)
    pred = [sum(c * v for c, v in zip(co, x)) for x in xs]
    ss_res = sum((y - p) ** 2 for y, p in zip(ys, pred))
    ss_tot = sum((y - mean) ** 2 for y in ys)
    return co, (1 - ss_res / ss_tot) if ss_tot > 0 else 1.0


def shape(config):
    """(weight bytes read once a decode step, KV bytes a token) of a config.json."""
    _, weights, kv_token = decode_shape(config)
    return weights, kv_token


def fit(rows, config, lo, hi, copy):
    """The fit over decode steps of lo..hi sequences, as a dict (None under 5 steps)."""
    weights, kv_token = shape(config)
    sel = [r for r in rows if r["decode_only"] == "1" and lo <= int(r["seqs"]) <= hi]
    if len(sel) < 5:
        return None
    xs = [[1.0, float(r["seqs"]), int(r["kv_read"]) * kv_token / 1e9] for r in sel]
    ys = [float(r["step_us"]) for r in sel]
    (fixed, per_seq, per_gb), r2 = lstsq(xs, ys)
    n = len(sel)
    seqs = sum(x[1] for x in xs)
    kv_gb = sum(x[2] for x in xs)
    weights_s = n * weights / copy
    kv_floor_s = kv_gb * 1e9 / copy
    return {
        "range": f"{lo}-{hi}", "steps": n, "measured_s": sum(ys) / 1e6,
        "fixed_us": fixed, "per_seq_us": per_seq, "per_gb_us": per_gb,
        "kv_tbps": 1e3 / per_gb if per_gb > 0 else float("nan"), "r2": r2,
        "weights_s": weights_s, "fixed_over_s": n * fixed / 1e6 - weights_s,
        "per_seq_s": per_seq * seqs / 1e6, "kv_floor_s": kv_floor_s,
        "kv_over_s": per_gb * kv_gb / 1e6 - kv_floor_s,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("steps")
    ap.add_argument("config")
    ap.add_argument("--copy", type=float, default=4.27e12, help="copy rate, bytes/s")
    ap.add_argument("--ranges", default="9-64,65-256,9-256",
                    help="batch ranges to fit, LO-HI comma-separated")
    a = ap.parse_args()
    config = json.load(open(a.config))
    rows = list(csv.DictReader(open(a.steps)))
    print("| seqs | steps | measured s | fixed µs | per seq µs | KV rate TB/s | R² "
          "| weights at copy s | fixed above it s | per-seq part s | KV at copy s | KV above it s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for spec in a.ranges.split(","):
        lo, hi = (int(v) for v in spec.split("-"))
        f = fit(rows, config, lo, hi, a.copy)
        if f is None:
            print(f"| {spec} | fewer than 5 steps | | | | | | | | | | |")
            continue
        print(f"| {f['range']} | {f['steps']} | {f['measured_s']:.3f} | {f['fixed_us']:.0f} "
              f"| {f['per_seq_us']:.2f} | {f['kv_tbps']:.2f} | {f['r2']:.3f} "
              f"| {f['weights_s']:.3f} | {f['fixed_over_s']:.3f} | {f['per_seq_s']:.3f} "
              f"| {f['kv_floor_s']:.3f} | {f['kv_over_s']:.3f} |")


if __name__ == "__main__":
    main()
