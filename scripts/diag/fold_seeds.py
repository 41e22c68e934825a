#!/usr/bin/env python3
"""Summarise gpu-check model logs run with --model-seeds (gpu-bench part 140; parts 138/139,
removed since, ran it at dc3ffb2).

Each log is one setting (fold off / on / ...). Per fixture model and setting this prints,
over the prompt draws: how many draws' minimum fell below 0.999 (the one-draw bar before
2026-12-07's multi-draw gate, kept so tables compare), how many failed the log's own gate,
the worst minimum cosine and
the mean of the per-draw mean 1 - cosine, both against the gate's reference (the CPU on
the same bf16 weights) and against the f32-weight CPU. The mean gap is the steadier
figure: one draw's minimum over 39 rows swings by more than the settings move it.

    python3 scripts/diag/fold_seeds.py LOG [LOG ...]   (the setting is taken from the
                                                       name after 'seeds-')
"""
import re
import sys
from collections import defaultdict

LINE = re.compile(
    r"^(ok|FAIL) +model (\S+): .*?min logits cosine ([0-9.]+) over \d+ rows "
    r"\(mean 1 - cosine ([0-9.e+-]+)\)"
    r"(?:.*?vs the f32-weight CPU: min cosine ([0-9.]+) \(mean 1 - cosine ([0-9.e+-]+)\))?"
)


def parse(path):
    rows = defaultdict(list)  # model -> [(ok, gate_min, gate_mean, f32_min, f32_mean)]
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = LINE.match(line)
            if not m:
                continue
            ok, model, gmin, gmean, fmin, fmean = m.groups()
            rows[model].append(
                (
                    ok == "ok",
                    float(gmin),
                    float(gmean),
                    float(fmin) if fmin else None,
                    float(fmean) if fmean else None,
                )
            )
    return rows


def setting(path):
    m = re.search(r"seeds-([^/]+?)\.log$", path)
    return m.group(1) if m else path


def main(paths):
    runs = [(setting(p), parse(p)) for p in paths]
    models = sorted({m for _, r in runs for m in r})
    print("| model | setting | draws | below 0.999 | failed | worst min cos | mean 1-cos (gate ref) | "
          "worst min cos (f32) | mean 1-cos (f32) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for model in models:
        for name, r in runs:
            d = r.get(model)
            if not d:
                continue
            below = sum(1 for x in d if x[1] <= 0.999)
            fails = sum(1 for x in d if not x[0])
            gmin = min(x[1] for x in d)
            gmean = sum(x[2] for x in d) / len(d)
            f32 = [x for x in d if x[3] is not None]
            fcol = (
                f"{min(x[3] for x in f32):.6f} | {sum(x[4] for x in f32) / len(f32):.2e}"
                if f32
                else "— | —"
            )
            print(f"| {model} | {name} | {len(d)} | {below} | {fails} | {gmin:.6f} | {gmean:.2e} | {fcol} |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
