"""cuBLAS(Lt) through PyTorch on a decode step's GEMM shapes, for comparison with the
engine's decode timeline (`cublas_gemm` rows): time per call and its floor (weights +
activations at the copy bandwidth measured here). Runs on the GPU machine:

    python3 scripts/gpu/gemm_shapes.py [--shape qwen3-14b] [--rows 64,256]
"""
import argparse
import json
import os

import torch


def shapes(cfg):
    h, hd = cfg["hidden_size"], cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    q, kv, inter = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd, cfg["intermediate_size"]
    return [("qkv", q + 2 * kv, h), ("o_proj", h, q), ("gate_up", 2 * inter, h), ("down", h, inter)]


def time_us(fn, reps=50):
    for _ in range(5):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / reps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="qwen3-14b")
    ap.add_argument("--rows", default="64,256")
    a = ap.parse_args()
    cfg = json.load(open(os.path.join(".gpu", a.shape, "config.json")))
    src = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy_bs = 2 * src.numel() / (time_us(lambda: dst.copy_(src), 20) * 1e-6)
    print(f"copy bandwidth {copy_bs / 1e12:.2f} TB/s")
    for m in [int(r) for r in a.rows.split(",")]:
        for name, n, k in shapes(cfg):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
            us = time_us(lambda: torch.nn.functional.linear(x, w))
            floor = ((m * k + n * k + m * n) * 2) / copy_bs * 1e6
            print(f"{a.shape} m={m} {name} n={n} k={k}: torch {us:.1f} us, floor {floor:.1f} us = {us / floor:.2f}x")


if __name__ == "__main__":
    main()
