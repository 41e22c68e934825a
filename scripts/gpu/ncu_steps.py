#!/usr/bin/env python3
"""Kernel durations of whole model steps from an Nsight Compute CSV.

`ncu --csv --page raw --metrics gpu__time_duration.sum PROGRAM` times every kernel on
its own (serialised, so no launch gaps and no host in the figure). This splits the
launches into steps at each `embedding_gather` (every step starts with the token
embedding) and prints, per step, the launch count and the summed kernel time; for the
steps named by --tables (default: every third, i.e. the timed decode step of
`gpu-check --timeline-model`, which runs prefill, a warm-up step and one timed step per
batch size) a table per kernel name. The sum against a replayed graph step's wall time
says how much of that step is launch gaps and tails rather than kernel work.

With --extra M1,M2 (metrics that were also collected, e.g. dram__bytes_read.sum or
lts__throughput.avg.pct_of_peak_sustained_elapsed), each table gets one more column per
metric: its mean over the kernel's launches, in the unit ncu gave.

usage: ncu_steps.py NCU.csv [--tables 2,5,8] [--labels b1,b64,b256] [--extra M1,M2]
"""
import argparse
import csv
import io
import sys
from collections import OrderedDict


def number(cell):
    try:
        return float(cell.replace(",", ""))
    except ValueError:
        return None


def read_rows(path, extra=()):
    text = open(path, encoding="utf-8", errors="replace").read()
    # ncu prints its own log lines before the CSV; the table starts at the header.
    start = text.find('"ID"')
    if start < 0:
        sys.exit(f"{path}: no ncu CSV header found")
    rows = list(csv.reader(io.StringIO(text[start:])))
    head = rows[0]
    name_i = head.index("Kernel Name")
    dur_i = head.index("gpu__time_duration.sum")
    grid_i = head.index("Grid Size") if "Grid Size" in head else None
    missing = [m for m in extra if m not in head]
    if missing:
        sys.exit(f"{path}: no column for {', '.join(missing)}")
    extra_i = [head.index(m) for m in extra]
    out = []
    for r in rows[1:]:
        if len(r) <= max([dur_i, *extra_i]):
            continue
        d = number(r[dur_i])
        if d is None:
            continue  # the units row
        vals = tuple(number(r[i]) for i in extra_i)
        out.append((r[name_i], d, r[grid_i] if grid_i is not None else "", vals))
    unit = rows[1][dur_i] if len(rows) > 1 else "ns"
    units = tuple(rows[1][i] if len(rows) > 1 else "" for i in extra_i)
    return out, unit, units


def short(name):
    n = name.split("(")[0]
    return n if len(n) <= 60 else n[:57] + "..."


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--tables", default=None, help="step indices with a per-kernel table")
    ap.add_argument("--labels", default=None, help="names of those steps")
    ap.add_argument("--extra", default="", help="more collected metrics, a column each")
    a = ap.parse_args()
    extra = [m for m in a.extra.split(",") if m]
    rows, unit, units = read_rows(a.csv, extra)
    scale = {"ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}.get(unit, 1e-3)
    steps = []
    for name, d, grid, vals in rows:
        if "embedding_gather" in name or not steps:
            steps.append([])
        steps[-1].append((name, d * scale, grid, vals))
    print(f"{len(rows)} kernels in {len(steps)} steps (duration unit {unit})\n")
    for i, s in enumerate(steps):
        print(f"step {i}: {len(s)} launches, {sum(x[1] for x in s):.1f} µs of kernels")
    tables = (
        [int(x) for x in a.tables.split(",")]
        if a.tables
        else list(range(2, len(steps), 3))
    )
    labels = a.labels.split(",") if a.labels else [f"step {i}" for i in tables]
    for i, label in zip(tables, labels):
        if i >= len(steps):
            continue
        s = steps[i]
        agg = OrderedDict()
        for name, d, grid, vals in s:
            key = (short(name), grid)
            c, t, sums = agg.get(key, (0, 0.0, [0.0] * len(extra)))
            # A metric ncu left empty for a launch counts as 0 in its mean.
            agg[key] = (c + 1, t + d, [x + (v or 0.0) for x, v in zip(sums, vals)])
        total = sum(x[1] for x in s)
        print(f"\n### {label}: {len(s)} launches, {total:.1f} µs of kernel time\n")
        cols = "".join(f" {m} ({u}) |" for m, u in zip(extra, units))
        print(f"| kernel | grid | calls | µs each | total µs | share |{cols}")
        print("|---|---|---:|---:|---:|---:|" + "---:|" * len(extra))
        for (n, grid), (c, t, sums) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
            means = "".join(f" {x / c:.4g} |" for x in sums)
            print(f"| {n} | {grid} | {c} | {t / c:.2f} | {t:.1f} | {100 * t / total:.1f}% |{means}")


if __name__ == "__main__":
    main()
