"""NCCL all-reduce through PyTorch, one process a GPU: the outside reference
for the bus bandwidth `bench offline --tp N` measures itself (nccl-tests'
busbw = size / time * 2(n-1)/n), and the per-call time of decode-sized sums.

    python3 scripts/gpu/nccl_busbw.py --world 2 [--hidden 5120]
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world, hidden, q):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    rows = [("256 MiB", 128 << 20)] + [(f"{b} x {hidden}", b * hidden) for b in (1, 64, 256)]
    out = []
    for name, n in rows:
        x = torch.ones(n, dtype=torch.bfloat16, device="cuda")
        iters = 10 if n > (1 << 24) else 200
        for _ in range(3):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(iters):
            dist.all_reduce(x)
        e1.record()
        torch.cuda.synchronize()
        t = e0.elapsed_time(e1) / 1e3 / iters
        busbw = n * 2 / t * 2 * (world - 1) / world
        out.append((name, t, busbw))
    if rank == 0:
        q.put(out)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=5120)
    a = ap.parse_args()
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    mp.spawn(worker, args=(a.world, a.hidden, q), nprocs=a.world, join=True)
    print(f"torch {torch.__version__}, NCCL {torch.cuda.nccl.version()}, {a.world} GPUs")
    print("| bf16 sum | µs per call | bus GB/s |")
    print("|---|---|---|")
    for name, t, bw in q.get():
        print(f"| {name} | {t * 1e6:.1f} | {bw / 1e9:.0f} |")


if __name__ == "__main__":
    main()
