#!/usr/bin/env python3
"""The simulator's error against the real engine (issue 13).

Usage: fidelity_table.py REAL_DIR SIM_DIR
Reads results.csv of two `minisgl-host compare` runs over the same workload and
policy sets (one --backend cuda, one --backend sim) and prints a Markdown table:
throughput and TTFT p50/p90 per policy, the relative error of the simulator,
and whether both rank the policies the same way (by throughput and by TTFT p50).
Standard library only.
"""
import csv
import sys


def read(d):
    with open(f"{d}/results.csv", newline="") as f:
        return {r["policy"]: r for r in csv.DictReader(f)}


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    real, sim = read(sys.argv[1]), read(sys.argv[2])
    keys = [("out_tok_per_s", "out tok/s"), ("ttft_p50_ms", "TTFT p50 ms"), ("ttft_p90_ms", "TTFT p90 ms")]
    print("| policy | " + " | ".join(f"{h} real | {h} sim | error" for _, h in keys) + " |")
    print("|---|" + "---:|---:|---:|" * len(keys))
    worst = 0.0
    for p in real:
        if p not in sim:
            continue
        cells = []
        for k, _ in keys:
            a, b = float(real[p][k]), float(sim[p][k])
            e = (b - a) / a if a else float("nan")
            worst = max(worst, abs(e))
            cells += [f"{a:.1f}", f"{b:.1f}", f"{100 * e:+.1f}%"]
        print(f"| {p} | " + " | ".join(cells) + " |")
    common = [p for p in real if p in sim]
    for k, better in [("out_tok_per_s", True), ("ttft_p50_ms", False)]:
        rank = lambda t: sorted(common, key=lambda p: float(t[p][k]), reverse=better)
        same = rank(real) == rank(sim)
        print(f"\nRanking by {k}: real {rank(real)}, sim {rank(sim)}: {'same' if same else 'DIFFERENT'}")
    print(f"\nLargest error: {100 * worst:.1f}% (target: within 5%)")


if __name__ == "__main__":
    main()
