#!/usr/bin/env python3
"""The bf16 GEMM rate held for several seconds, not the first second's.

`bench offline` measures the GEMM rate in about a second at start. A long run of
compute-bound products draws more power than that second; if the GPU then lowers its
clock, the rate it holds is lower than the ceiling assumes. This runs each shape back to
back for --seconds and prints the rate of each half-second window, with the SM clock
and power from nvidia-smi where it is on the path.

usage: sustained.py [--seconds 8] [--shapes 8192x8192x8192,256x34816x5120]
"""
import argparse
import subprocess
import time

import torch


def smi():
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=5).stdout.strip().splitlines()[0]
        clk, pw = out.split(",")
        return f"{float(clk):.0f} MHz {float(pw):.0f} W"
    except Exception as e:  # no nvidia-smi: the rates alone
        return f"(smi: {e})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--shapes", default="8192x8192x8192,256x34816x5120,256x5120x17408")
    a = ap.parse_args()
    for shape in a.shapes.split(","):
        m, n, k = (int(v) for v in shape.split("x"))
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        flop = 2.0 * m * n * k
        for _ in range(20):
            torch.matmul(x, w.t(), out=y)
        torch.cuda.synchronize()
        # Calls per window sized from one timed batch, so each window is ~0.5 s of GPU work.
        t = time.perf_counter()
        for _ in range(50):
            torch.matmul(x, w.t(), out=y)
        torch.cuda.synchronize()
        per = (time.perf_counter() - t) / 50
        calls = max(1, int(0.5 / per))
        rates = []
        start = time.perf_counter()
        while time.perf_counter() - start < a.seconds:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(calls):
                torch.matmul(x, w.t(), out=y)
            e1.record()
            e1.synchronize()
            r = flop * calls / (e0.elapsed_time(e1) * 1e-3) / 1e12
            rates.append(r)
            print(f"  {m}x{n}x{k} t={time.perf_counter() - start:5.2f}s {r:6.1f} TFLOP/s  {smi()}", flush=True)
        first, last = rates[0], sorted(rates[len(rates) // 2:])[len(rates[len(rates) // 2:]) // 2]
        print(f"sustained {m}x{n}x{k}: first window {first:.1f} TFLOP/s, median of the second half "
              f"{last:.1f} ({last / first:.3f} of the first)", flush=True)


if __name__ == "__main__":
    main()
