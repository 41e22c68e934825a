#!/usr/bin/env python3
"""Where a warp-specialised kernel's warps wait, from Nsight Compute's source page.

    ncu --set full -k regex:attn_prefill_ws -c 1 -o prof python3 scripts/gpu/attn_bench.py --only ws ...
    ncu -i prof.ncu-rep --page source --csv --print-source sass > src.csv
    python3 scripts/gpu/ncu_source.py src.csv [--top 50]

The warp stall samples of each SASS line are summed by role (the code after
`setmaxnreg.inc` is the consumers', after `setmaxnreg.dec` the producer's) and by
what the line is: an mbarrier wait (the try-wait loop's branch, by barrier offset),
the named barrier before a line, a wgmma issue or wait, the MUFU, local memory, the
rest. Then the hottest lines with their three largest stall reasons.
"""
import argparse, csv, gzip, re


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=50)
    a = ap.parse_args()
    # The device calls archive the page gzipped (ncu-src-*.csv.gz).
    opener = gzip.open if a.csv.endswith(".gz") else open
    rows = list(csv.reader(opener(a.csv, "rt")))
    hdr, data = rows[1], rows[2:]
    ix = {h: i for i, h in enumerate(hdr)}
    stalls = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    samples = lambda r: int(r[ix["Warp Stall Sampling (All Samples)"]] or 0)
    src = [r[ix["Source"]].strip() for r in data]
    total = sum(samples(r) for r in data) or 1

    # Role of each line: the last setmaxnreg above it (TRY_ALLOC: consumers, DEALLOC: producer).
    role, cur = [], "entry"
    for t in src:
        if "SETMAXREG.TRY_ALLOC" in t:
            cur = "consumer"
        elif "SETMAXREG.DEALLOC" in t:
            cur = "producer"
        role.append(cur)

    cats, wait_bar = {}, None
    for i, r in enumerate(data):
        t = src[i]
        m = re.search(r"TRYWAIT P\d, \[[^\]]*?(0x[0-9a-f]+)?\]", t)
        if "TRYWAIT" in t:
            wait_bar = (m.group(1) if m and m.group(1) else "+0")
        s = samples(r)
        if not s:
            continue
        op = re.sub(r"^@!?U?P\w+\s+", "", t)
        if op.startswith("BRA") and int(r[ix["stall_long_sb"]] or 0) > s / 2:
            what = f"mbarrier wait (barrier offset {wait_bar})"
        elif i > 0 and "BAR.SYNC" in src[i - 1]:
            what = "named barrier: " + src[i - 1].split()[-2].rstrip(",")
        elif "DEPBAR" in op:
            what = "wgmma wait"
        elif op.startswith("HGMMA"):
            what = "wgmma issue"
        elif op.startswith("MUFU"):
            what = "MUFU"
        elif op.startswith(("LDL", "STL")):
            what = "local memory"
        else:
            what = "other"
        cats[(role[i], what)] = cats.get((role[i], what), 0) + s
    print(f"{total} samples")
    for (ro, what), v in sorted(cats.items(), key=lambda x: -x[1]):
        if v / total >= 0.002:
            print(f"{100 * v / total:5.1f}%  {ro:9s} {what}")
    # What the samples of each role were doing, over all its lines (an "other" share
    # that is mostly `selected` is issuing, mostly `wait` or `math_pipe_throttle` is
    # dependent or pipe-bound arithmetic).
    print()
    for ro in sorted(set(role)):
        by = {}
        for i, r in enumerate(data):
            if role[i] == ro:
                for h in stalls:
                    by[h[6:]] = by.get(h[6:], 0) + int(r[ix[h]] or 0)
        n = sum(by.values()) or 1
        top = sorted(by.items(), key=lambda x: -x[1])[:6]
        print(f"{ro:9s} " + "  ".join(f"{h} {100 * v / n:.0f}%" for h, v in top if v))
    print()
    hot = sorted(range(len(data)), key=lambda i: -samples(data[i]))[: a.top]
    for i in hot:
        s = samples(data[i])
        why = sorted(((int(data[i][ix[h]] or 0), h[6:]) for h in stalls), reverse=True)[:3]
        print(f"{i:6d} {100 * s / total:5.1f}% {role[i]:9s} {src[i][:60]:60s} "
              + " ".join(f"{h}:{v}" for v, h in why if v))


if __name__ == "__main__":
    main()
