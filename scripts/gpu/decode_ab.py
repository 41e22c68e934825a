#!/usr/bin/env python3
"""Two builds of the decode kernels side by side, from gpu-check's decode-kernel bench
lines (`MINISGL_BENCH_DECODE_ONLY=1`), one log per run:

    python3 scripts/gpu/decode_ab.py --a A1.log A2.log --b B1.log B2.log [--names lean,old]

For every (batch x context, group) and kernel it prints the median time of each build
over its runs and B / A: a ratio above 1 means build A is faster. Runs of one build are
taken in the order given; the bench interleaves nothing, so the caller alternates the
builds' runs (A B A B) to spread the machine's drift over both."""
import argparse
import re
import statistics
import sys

LINE = re.compile(r"decode kernels, (?P<shape>.+?), (?P<heads>\d+q/\d+kv x \d+) \(group (?P<group>\d+)\):(?P<rest>.*)")
ENTRY = re.compile(r"\s*(?P<name>[A-Za-z/0-9 ]+?) (?P<ms>[0-9.]+) ms = (?P<tbps>[0-9.]+) TB/s \((?P<pct>\d+)% of copy\)")


def parse(path):
    """{(shape, group, kernel): ms} of one log."""
    out = {}
    for line in open(path, errors="replace"):
        m = LINE.search(line)
        if not m:
            continue
        for part in m.group("rest").split(";"):
            e = ENTRY.match(part)
            if e:
                out[(m.group("shape"), int(m.group("group")), e.group("name"))] = (
                    float(e.group("ms")),
                    int(e.group("pct")),
                )
    return out


def medians(paths):
    runs = [parse(p) for p in paths]
    keys = [k for k in runs[0] if all(k in r for r in runs)] if runs else []
    return {k: (statistics.median(r[k][0] for r in runs), statistics.median(r[k][1] for r in runs)) for k in keys}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", nargs="+", required=True, help="logs of build A")
    ap.add_argument("--b", nargs="+", required=True, help="logs of build B")
    ap.add_argument("--names", default="A,B")
    ap.add_argument("--kernels", default="DecodeMma/fill,DecodeMma/waves,DecodeMmaSk",
                    help="comma list of the bench's kernel names to show")
    a = ap.parse_args(argv)
    na, nb = a.names.split(",")
    ma, mb = medians(a.a), medians(a.b)
    want = a.kernels.split(",")
    keys = [k for k in ma if k in mb and k[2] in want]
    if not keys:
        print("decode_ab: no decode-kernel lines common to both builds", file=sys.stderr)
        return 1
    print(f"| batch x context | group | kernel | {na} ms (% copy) | {nb} ms (% copy) | {nb} / {na} |")
    print("|---|---:|---|---:|---:|---:|")
    for k in keys:
        (ta, pa), (tb, pb) = ma[k], mb[k]
        print(f"| {k[0]} | {k[1]} | {k[2]} | {ta:.3f} ({pa:.0f}%) | {tb:.3f} ({pb:.0f}%) | {tb / ta:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
