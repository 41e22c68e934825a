#!/usr/bin/env python3
"""A wgmma kernel's rounds, read from its SASS (no GPU needed).

    SASS=1 scripts/kernel-report.sh kernels/attention_prefill_ws_sm90.cu
    python3 scripts/gpu/sass_rounds.py target/kernel-report/attention_prefill_ws_sm90.sass

For each function: the instructions between consecutive `WARPGROUP.DEPBAR.LE gsb0, 0x1`
(the wait for Q K^T that opens a prefill round: a round's length, with its commonest
opcodes), and how many MUFU.EX2 sit between that wait and the next one (the softmax's
exponentials ahead of the P V wait: ptxas hoists that wait above them unless something
pins it; docs/results/gpu-2026-12-06-pack.md §1).
"""
import collections, re, sys


def functions(path):
    name, body = None, []
    for line in open(path):
        m = re.search(r"Function : (\S+)", line)
        if m:
            if name:
                yield name, body
            name, body = m.group(1), []
            continue
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;", line)
        if m and name:
            body.append(m.group(1))
    if name:
        yield name, body


def opcode(ins):
    return re.sub(r"^@!?U?P\w+\s+", "", ins).split()[0].split(".")[0]


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    for name, body in functions(sys.argv[1]):
        waits = [i for i, s in enumerate(body) if s.startswith("WARPGROUP.DEPBAR")]
        qk = [i for i in waits if waits_for(body[i], "0x1")]
        if not qk:
            continue
        print(f"{name}: {len(body)} instructions, {len(qk)} rounds with a Q K^T wait")
        for a, b in zip(qk, qk[1:] + [len(body)]):
            nxt = next((w for w in waits if w > a), len(body))
            mufu = sum(1 for s in body[a:nxt] if s.startswith("MUFU.EX2"))
            ops = collections.Counter(opcode(s) for s in body[a:b]).most_common(8)
            span = f"{b - a:5d} to the next round" if b < len(body) else "  (last)"
            print(f"  at {a:5d}: {span}; MUFU.EX2 before the next wait: {mufu:3d}; "
                  + " ".join(f"{o}x{n}" for o, n in ops))


def waits_for(ins, n):
    """A WARPGROUP.DEPBAR that lets at most n wgmma groups stay in flight."""
    return ins.replace(" ", "").endswith("gsb0," + n)


if __name__ == "__main__":
    main()
