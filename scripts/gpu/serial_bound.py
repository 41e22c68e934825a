#!/usr/bin/env python3
"""How close a run could come to `bench offline`'s ceiling if its kernels ran one after
the other at their peaks.

`bench offline --steps-csv` writes one row per step (tokens, sequences, KV tokens read).
For each step this prints two costs:
- the ceiling's floor: max(weights + KV bytes at the copy rate, FLOPs at the GEMM rate),
  the figure `bench offline` reports against (bytes and FLOPs overlap perfectly);
- a serial bound: each product the longer of its weight bytes and its FLOPs, plus the
  KV bytes at the copy rate, plus the LM head the same way. That is what kernels at
  100% of both peaks reach when attention and products do not run at the same time.
Grouped by step class, against the measured step time. Prefill attention FLOPs are
left out of both (small at the default workload's prompt lengths).

usage: serial_bound.py STEPS.csv CONFIG.json [--copy 4.27e12] [--gemm 805e12]
"""
import argparse
import csv
import json


def decode_shape(c):
    """A config.json's decode step: its layer's four products as (k, n), the bf16 bytes
    of every weight it reads (the layers' products and the LM head), and the KV bytes
    a context token adds."""
    h, inter, layers, vocab = (c["hidden_size"], c["intermediate_size"],
                               c["num_hidden_layers"], c["vocab_size"])
    q, kv = c["num_attention_heads"], c["num_key_value_heads"]
    d = c.get("head_dim") or h // q
    products = [(h, (q + 2 * kv) * d), (q * d, h), (h, 2 * inter), (inter, h)]  # (k, n)
    weight_bytes = (sum(k * n for k, n in products) * layers + h * vocab) * 2
    return products, weight_bytes, layers * kv * d * 2 * 2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("steps")
    ap.add_argument("config")
    ap.add_argument("--copy", type=float, default=4.27e12, help="bytes/s")
    ap.add_argument("--gemm", type=float, default=805e12, help="FLOP/s")
    a = ap.parse_args()
    c = json.load(open(a.config))
    h, layers, vocab = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    products, weight_bytes, kv_bytes_per_token = decode_shape(c)
    classes = {}
    for r in csv.DictReader(open(a.steps)):
        m, seqs = int(r["tokens"]), int(r["seqs"])
        kv_read = int(r["kv_read"]) * kv_bytes_per_token
        step = int(r["step_us"]) / 1e6
        prod = layers * sum(max(k * n * 2 / a.copy, 2 * m * k * n / a.gemm) for k, n in products)
        head = max(h * vocab * 2 / a.copy, 2 * seqs * h * vocab / a.gemm)
        serial = prod + head + kv_read / a.copy
        flops = 2 * m * sum(k * n for k, n in products) * layers + 2 * seqs * h * vocab
        floor = max((weight_bytes + kv_read) / a.copy, flops / a.gemm)
        if r["decode_only"] != "1":
            name = "prefill"
        elif seqs <= 8:
            name = "decode 1-8"
        elif seqs <= 64:
            name = "decode 9-64"
        elif seqs <= 160:
            name = "decode 65-160"
        else:
            name = "decode 161+"
        e = classes.setdefault(name, [0, 0.0, 0.0, 0.0])
        e[0] += 1
        e[1] += step
        e[2] += floor
        e[3] += serial
    print("| class | steps | measured s | floor s | serial bound s | floor / measured | floor / serial bound | serial bound / measured |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    tot = [0, 0.0, 0.0, 0.0]
    for name in ["prefill", "decode 1-8", "decode 9-64", "decode 65-160", "decode 161+"]:
        if name not in classes:
            continue
        n, st, fl, se = classes[name]
        tot = [tot[0] + n, tot[1] + st, tot[2] + fl, tot[3] + se]
        print(f"| {name} | {n} | {st:.3f} | {fl:.3f} | {se:.3f} | {fl / st:.1%} | {fl / se:.1%} | {se / st:.1%} |")
    n, st, fl, se = tot
    print(f"| all | {n} | {st:.3f} | {fl:.3f} | {se:.3f} | {fl / st:.1%} | {fl / se:.1%} | {se / st:.1%} |")


if __name__ == "__main__":
    main()
