#!/usr/bin/env python3
"""Collect the figures of a `scripts/gpu-bench.sh device N` run into bench.jsonl.

    python3 scripts/gpu/collect.py OUT_DIR [OUT_DIR...] [--to docs/results/bench.jsonl]

Copies the JSON lines the run wrote (offline throughput, prefill attention) and
turns gpu-check's decode lines (decode attention bandwidth, decode step time at
batch 1/8/64/256 against its floor, and under MINISGL_BENCH_AB the second runner's
step with its setting in "ab"; A/Bs timed in rounds add "method") into objects of the
same schema.
"""
import argparse, json, re
from pathlib import Path

ap = argparse.ArgumentParser()
ap.add_argument("dirs", nargs="+")
ap.add_argument("--to", default="docs/results/bench.jsonl")
# For runs that wrote no JSON lines of their own (gpu-check only): what to stamp on them.
ap.add_argument("--commit", default=None)
ap.add_argument("--date", default=None)
ap.add_argument("--machine", default="NVIDIA H200")
args = ap.parse_args()
# Date, commit and machine as the command line gives them, for figures that lack them.
given = {k: v for k, v in (("date", args.date), ("commit", args.commit), ("machine", args.machine)) if v}



def attn_shape(q, kv, hd):
    """An attention bench's shape, named by the model whose heads it has."""
    model = {"16": "qwen3-0.6b", "40": "qwen3-14b"}.get(q, "gqa")
    return f"{model}-attn ({q}q/{kv}kv x {hd})"


out = []
for d in map(Path, args.dirs):
    base = {}
    jl = d / "bench.jsonl"
    if jl.exists():
        for line in jl.read_text().splitlines():
            if line.strip():
                o = json.loads(line)
                # A figure from a binary run outside gpu-bench.sh's environment carries
                # empty date / commit: the command line's values stand in.
                for k, v in given.items():
                    if not o.get(k):
                        o[k] = v
                # attn_bench's PyTorch rates name no model: they are the device's.
                if o.get("metric") in ("gemm_bf16_tflops", "copy_bandwidth_tbps"):
                    o.setdefault("shape", "device")
                    o.setdefault("workload", "ceiling micro-benchmark (dense bf16 GEMM rate / device copy bandwidth)")
                out.append(o)
                base = {k: o[k] for k in ("date", "commit", "machine") if k in o}
    if not base:
        base = dict(given)
    # Every gpu-check log of the run: the ops log (decode attention, the 0.6B runner
    # step) and the per-shape bench logs (gpu-check-bench-SHAPE[-pdlN].log).
    for log in sorted(d.glob("gpu-check*.log")):
        extra = {}
        # Switches a bench log's name records: -pdlN (MINISGL_PDL), -npN
        # (MINISGL_NORM_PROLOGUE), -ropeN (the fused decode rotation of 5a28f36, 1 = on),
        # -waves (MINISGL_DECODE_SPLITS=waves), -rowsN (MINISGL_GEMV_ROWS), -ntN
        # (MINISGL_NORM_THREADS).
        for key, pat in (("pdl", r"-pdl(\d)"), ("norm_prologue", r"-np(\d)"), ("decode_rope", r"-rope(\d)"),
                         ("decode_splits", r"-(waves)"), ("gemv_rows", r"-rows(\d+)"), ("norm_threads", r"-nt(\d+)")):
            m = re.search(pat, log.name)
            if m:
                extra[key] = m[1]
        shape, copy_note = "qwen3-0.6b", "4.28 TB/s"
        # An A/B line timed in rounds (gpu-check since 2026-12-04) says so; its batch's
        # default line, printed after it, carries the same method.
        ab_method = None
        for line in log.read_text().splitlines():
            m = re.search(r"([\w.-]+) random weights: floor of a decode step.*? at ([\d.]+) TB/s", line)
            if m:
                shape, copy_note = m[1], f"{m[2]} TB/s"
            m = re.search(r"decode attention \[(\w+)\] batch (\d+) x ctx (\d+).*?: ([\d.]+) ms, ([\d.]+) TB/s"
                          r".*?of the ([\d.]+) TB/s copy ceiling", line)
            if m:
                copy = float(m[6])
                out.append({**base, "shape": "qwen3-0.6b-attn (16q/8kv x 128)", "tp": 1, "decode_path": m[1],
                            "workload": f"decode attention batch {m[2]} x ctx {m[3]}, page 16",
                            "metric": "decode_attention_tbps", "value": float(m[5]), "unit": "TB/s",
                            "ceiling": copy, "fraction": round(float(m[5]) / copy, 3), **extra})
            m = re.search(r"runner.step greedy decode, batch (\d+), context ~(\d+): floor ([\d.]+) ms(?: \([^)]*\))?; CUDA graphs [\d.]+ tok/s \(([\d.]+) ms/step", line)
            if m:
                b, ctx, floor, ms = int(m[1]), int(m[2]), float(m[3]), float(m[4])
                # Since 2026-12-06 the line also gives the serial floor: the products at the
                # larger of their bytes and FLOPs, then the KV (kernels one after another).
                s = re.search(r"serial floor ([\d.]+) ms", line)
                serial = {"serial_floor": float(s[1]), "serial_fraction": round(float(s[1]) / ms, 3)} if s else {}
                note = ("gpu-check --bench-model (runner.step); floor = weights + KV at " + copy_note
                        + ", FLOPs not counted"
                        + (" (serial_floor counts each product at the larger of its bytes and FLOPs)" if s else ""))
                out.append({**base, "shape": shape, "tp": 1,
                            "workload": f"greedy decode step, batch {b}, context ~{ctx}, CUDA graphs",
                            "metric": f"decode_step_ms_b{b}", "value": ms, "unit": "ms",
                            "ceiling": floor, "fraction": round(floor / ms, 3), "page_size": 16,
                            **serial, "note": note,
                            **({"method": ab_method} if ab_method else {}), **extra})
                ab_method = None

            # The engine's own prefill path (its tile list, from prepare_step), which
            # attn_bench, building its own list, does not see.
            m = re.search(r"prefill attention \[(\w+)\] (\d+) x (\d+) new tokens causal, (\d+)q/(\d+)kv x (\d+): "
                          r"[\d.]+ ms, ([\d.]+) TFLOP/s", line)
            if m:
                out.append({**base, "shape": attn_shape(m[4], m[5], m[6]), "tp": 1,
                            "workload": f"engine prefill step: {m[2]} x {int(m[3]):,} fresh, page 16",
                            "metric": "prefill_attention_tflops", "value": float(m[7]), "unit": "TFLOP/s",
                            "ceiling": None, "fraction": None, "kernel": m[1],
                            "method": "mean of 20 back-to-back launches (gpu-check bench)", **extra})
            # MINISGL_BENCH_PREFILL_ONLY: the engine's prefill kernel under each tile order.
            m = re.search(r"prefill order (.+), (\S+) \((\d+)q/(\d+)kv x (\d+), page (\d+)\) \[(\w+)\]: "
                          r"batch ([\d.]+) / seqs ([\d.]+) / tiles ([\d.]+) TFLOP/s", line)
            if m:
                for order, v in zip(("batch", "seqs", "tiles"), (m[8], m[9], m[10])):
                    out.append({**base, "shape": attn_shape(m[3], m[4], m[5]), "tp": 1,
                                "workload": f"engine prefill step: {m[1]}, page {m[6]}",
                                "metric": "prefill_attention_tflops", "value": float(v), "unit": "TFLOP/s",
                                "ceiling": None, "fraction": None, "kernel": m[7], "prefill_order": order,
                                "method": "median of 3 rounds, each led by another order (gpu-check MINISGL_BENCH_PREFILL_ONLY)",
                                **extra})

            # MINISGL_BENCH_AB: the second runner's step, recorded with its setting.
            m = re.search(r"runner.step A/B, batch (\d+), context ~(\d+): CUDA graphs ([\d.]+) ms/step as built "
                          r"\(([\d.]+)x the floor\), ([\d.]+) with (\S+)=(\S+) \(", line)
            if m:
                b, ctx, ms_b = int(m[1]), int(m[2]), float(m[5])
                floor = float(m[3]) / float(m[4])
                r = re.search(r"medians of (\d+) rounds in alternating order", line)
                ab_method = f"median of {r[1]} rounds in alternating order (gpu-check runner A/B)" if r else None
                out.append({**base, "shape": shape, "tp": 1,
                            "workload": f"greedy decode step, batch {b}, context ~{ctx}, CUDA graphs",
                            "metric": f"decode_step_ms_b{b}", "value": ms_b, "unit": "ms",
                            "ceiling": round(floor, 3), "fraction": round(floor / ms_b, 3), "page_size": 16,
                            "ab": f"{m[6]}={m[7]}",
                            "note": "gpu-check --bench-model, MINISGL_BENCH_AB's second runner (same process as the default's figure); floor = weights + KV at " + copy_note,
                            **({"method": ab_method} if ab_method else {}), **extra})

with open(args.to, "a") as f:
    for o in out:
        f.write(json.dumps(o) + "\n")
print(f"appended {len(out)} figures to {args.to}")
