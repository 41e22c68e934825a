#!/usr/bin/env python3
"""Issue 11's targets over time, from docs/results/bench.jsonl.

    python3 scripts/gpu/targets.py [--jsonl FILE] [--last N] [--json]

For each target it groups the figures of its metric, shape and workload by round (the
`round` field, else the date) and card (`machine`), in the order the file first mentions
each. It prints each group's count, min, median and max, the commits, and whether the
median meets the target. The targets are the issue's, set on an H200: a group measured
on another card says `other card` instead (an H100 copies at ~3.0 TB/s against 4.2, so
its bandwidth-bound figures say nothing about them).

What a round's figures include: every build measured that round, kept or reverted (the
spread shows them). Excluded:
- a same-process A/B's second runner (objects with `ab`);
- prefill attention kernels other than the engine's default (`kernel` minisgl-hopper-ws,
  no defines), and on the engine's path the order A/B's orders other than today's
  default (`seqs`).
So a round's median is a "what was measured", not a "what landed": the round's results
file says which build each call ran.
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = "nano-vllm n=256 in=100-1024 out=100-1024 seed=0"
LONG = "long-prompt n=64 in=4000-8000 out=16-64 seed=0"


def step(b):
    return f"greedy decode step, batch {b}, context ~256, CUDA graphs"


# (name, metric, shape, workload, test, bound): test "value>=" / "value<=" compares the
# value, "ratio<=" value / ceiling (a step against its floor), "fraction>=" the object's
# fraction of its ceiling.
TARGETS = [
    ("prefill attention 8x2048, 0.6B heads", "prefill_attention_tflops", "qwen3-0.6b", "8x2048 fresh", "value>=", 450),
    ("prefill attention 8x2048, 14B heads", "prefill_attention_tflops", "qwen3-14b", "8x2048 fresh", "value>=", 450),
    # The same kernel on the engine's own tile list (gpu-check), which attn_bench's list
    # does not follow: an order that costs the engine shows here only.
    ("prefill attention 8x2048 in the engine, 0.6B heads", "prefill_attention_tflops",
     "qwen3-0.6b-attn (16q/8kv x 128)", "engine prefill step: 8 x 2,048 fresh, page 16", "value>=", 450),
    ("offline default workload, 0.6B", "offline_output_tok_s", "qwen3-0.6b", DEFAULT, "value>=", 25000),
    ("offline default workload, 14B", "offline_output_tok_s", "qwen3-14b", DEFAULT, "value>=", 6500),
    ("long prompts, 0.6B", "offline_output_tok_s", "qwen3-0.6b", LONG, "fraction>=", 0.60),
    ("long prompts, 14B", "offline_output_tok_s", "qwen3-14b", LONG, "fraction>=", 0.60),
    ("decode step batch 1, 0.6B", "decode_step_ms_b1", "qwen3-0.6b", step(1), "ratio<=", 3.0),
    ("decode step batch 256, 0.6B", "decode_step_ms_b256", "qwen3-0.6b", step(256), "ratio<=", 1.5),
    ("decode step batch 1, 14B", "decode_step_ms_b1", "qwen3-14b", step(1), "ratio<=", 3.0),
    ("decode step batch 256, 14B", "decode_step_ms_b256", "qwen3-14b", step(256), "ratio<=", 1.5),
    ("decode attention 256x1100, 0.6B heads", "decode_attention_tbps", "qwen3-0.6b-attn (16q/8kv x 128)",
     "decode attention batch 256 x ctx 1100, page 16", "value>=", 3.5),
]


def measure(o, test):
    """The number the target's test compares, or None when the object cannot say."""
    if test.startswith("ratio"):
        c = o.get("ceiling")
        return o["value"] / c if c else None
    if test.startswith("fraction"):
        return o.get("fraction")
    return o["value"]


def meets(x, test, bound):
    return x >= bound if test.endswith(">=") else x <= bound


def selected(o, metric, shape, workload):
    if (o.get("metric"), o.get("shape"), o.get("workload")) != (metric, shape, workload):
        return False
    if "ab" in o:
        return False
    if metric == "prefill_attention_tflops":
        if workload.startswith("engine prefill step"):
            # gpu-check's order A/B times every order: its default only (the plain bench
            # line is the build's default, whatever that was then).
            return "PREFILL_ONLY" not in o.get("method", "") or o.get("prefill_order") == "seqs"
        if o.get("kernel") != "minisgl-hopper-ws":
            return False
    return True


ISSUE_CARD = "H200"


def card(machine):
    """A short name for the card: "H200", "H100", else the machine string as given."""
    for name in ("H200", "H100"):
        if name in (machine or ""):
            return name
    return machine or "?"


def table(rows, last=None):
    """[{target, rounds: [{round, card, n, min, median, max, commits, met}]}] per target;
    `met` is None for a card other than the issue's."""
    out = []
    for name, metric, shape, workload, test, bound in TARGETS:
        groups = {}
        for o in rows:
            if not selected(o, metric, shape, workload):
                continue
            x = measure(o, test)
            if x is None:
                continue
            key = (o.get("round") or o["date"], card(o.get("machine")))
            # bench.jsonl is appended as rounds run: a round's first line orders it.
            g = groups.setdefault(key, {"first": len(groups), "xs": [], "commits": []})
            g["xs"].append(x)
            if o["commit"] not in g["commits"]:
                g["commits"].append(o["commit"])
        rounds = []
        for key, g in sorted(groups.items(), key=lambda kv: kv[1]["first"]):
            xs = sorted(g["xs"])
            med = statistics.median(xs)
            rounds.append({
                "round": key[0],
                "card": key[1],
                "n": len(xs),
                "min": xs[0],
                "median": med,
                "max": xs[-1],
                "commits": g["commits"],
                "met": meets(med, test, bound) if key[1] == ISSUE_CARD else None,
            })
        if last:
            rounds = rounds[-last:]
        out.append({"target": name, "test": f"{test} {bound}", "rounds": rounds})
    return out


def fmt(x):
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jsonl", default=str(ROOT / "docs/results/bench.jsonl"))
    ap.add_argument("--last", type=int, default=None, help="only each target's last N rounds")
    ap.add_argument("--json", action="store_true", help="print the table as JSON")
    a = ap.parse_args(argv)
    rows = []
    for n, line in enumerate(Path(a.jsonl).read_text().splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                sys.exit(f"{a.jsonl} line {n}: not JSON ({e})")
    t = table(rows, a.last)
    if a.json:
        print(json.dumps(t, indent=1))
        return
    for entry in t:
        print(f"## {entry['target']} (target: {entry['test']})")
        if not entry["rounds"]:
            print("   no figures")
        for r in entry["rounds"]:
            span = f"{fmt(r['min'])}-{fmt(r['max'])}" if r["n"] > 1 else ""
            met = {True: "met", False: "not met", None: "other card"}[r["met"]]
            print(f"   {r['round']:<22} {r['card']:<5} n={r['n']:<3} median {fmt(r['median']):>7} {span:<15} "
                  f"{met:<10} {','.join(r['commits'][:4])}"
                  f"{' ...' if len(r['commits']) > 4 else ''}")


if __name__ == "__main__":
    main()
