#!/usr/bin/env python3
"""Prefill attention on the GPU: our kernels against PyTorch's SDPA (cuDNN, flash).

Runs on the GPU machine (PyTorch + CuPy + nvcc there; no Rust needed). Compiles
kernels/attention_prefill*.cu with nvcc to CUBINs, checks each against a float32
reference over a paged KV cache (fresh prompts and prefix + extend, GQA), then
times them beside cuDNN's fused attention on the same shapes, and measures the
copy-bandwidth and GEMM ceilings. Prints a table; `--jsonl F` appends figures.

    python3 scripts/gpu/attn_bench.py [--jsonl OUT] [--variants v1,v2]

A variant is sm90+DEFINE=V+... (kernels/attention_prefill_sm90.cu built with those
defines), ws+... (kernels/attention_prefill_ws_sm90.cu, the warp-specialised persistent
kernel, K/V through the copy engine for pages of 8+ rows) or STEM+... for
scripts/gpu/variants/STEM.cu. GRID=tiles launches a block per (tile, head) instead of
one per SM; GATHER=1 runs the ws kernel's cp.async gather build on every page size.
mma+DEFINE=V+... builds the portable kernel with those defines.
"""
import argparse, ctypes, json, math, os, subprocess, sys, tempfile, time
from pathlib import Path

import cupy as cp
import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
NUM_SMS = torch.cuda.get_device_properties(0).multi_processor_count if torch.cuda.is_available() else 132
K = ROOT / "kernels"


def build(src, arch, defines=(), name=None):
    out = Path(tempfile.gettempdir()) / f"{name or src.stem}.cubin"
    cmd = ["nvcc", "-cubin", "-O3", f"-gencode=arch=compute_{arch},code=sm_{arch}", "-Xptxas", "-v",
           "-I", str(K), *[f"-D{d}" for d in defines], str(src), "-o", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stderr)
        raise SystemExit(f"nvcc failed for {src}")
    for line in r.stderr.splitlines():
        if "registers" in line or "spill" in line:
            print(f"  [{name or src.stem}] {line.strip()}")
    return cp.RawModule(path=str(out)), str(out)


class DriverFn:
    """A kernel of a CUBIN loaded through the driver API (ctypes), for launches that
    pass arguments CuPy cannot (a 128-byte tensor map by value)."""

    def __init__(self, cubin, name, smem):
        d = driver()
        torch.cuda.init()
        mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
        for r in (d.cuModuleLoad(ctypes.byref(mod), cubin.encode()),
                  d.cuModuleGetFunction(ctypes.byref(fn), mod, name.encode()),
                  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
                  d.cuFuncSetAttribute(fn, 8, smem)):
            if r != 0:
                raise SystemExit(f"driver call failed ({r}) loading {name} from {cubin}")
        self.ptr = fn.value


def ptr(t):
    return np.uint64(t.data_ptr())


class Paged:
    """A random paged KV cache holding `ctx` tokens for each sequence."""

    def __init__(self, ctxs, news, hq, hkv, hd, page_size, gen, in_order=False):
        self.ctxs, self.news, self.hq, self.hkv, self.hd, self.ps = ctxs, news, hq, hkv, hd, page_size
        npages = sum((c + page_size - 1) // page_size for c in ctxs)
        # Random pages (a cache long in use), or each sequence's pages consecutive and
        # ascending (what the engine's pool hands a fresh prompt).
        perm = torch.arange(npages).int() if in_order else torch.randperm(npages, generator=gen).int()
        self.k = torch.randn(npages * page_size, hkv, hd, generator=gen).bfloat16().cuda()
        self.v = torch.randn(npages * page_size, hkv, hd, generator=gen).bfloat16().cuda()
        page_start, pages, off = [0], [], 0
        for c in ctxs:
            n = (c + page_size - 1) // page_size
            pages += perm[off:off + n].tolist()
            off += n
            page_start.append(len(pages))
        self.page_ids = torch.tensor(pages, dtype=torch.int32).cuda()
        self.page_start = torch.tensor(page_start, dtype=torch.int32).cuda()
        qs = [0]
        for n in news:
            qs.append(qs[-1] + n)
        self.q_start = torch.tensor(qs, dtype=torch.int32).cuda()
        self.kv_len = torch.tensor(ctxs, dtype=torch.int32).cuda()
        self.T = qs[-1]
        self.q = torch.randn(self.T, hq * hd, generator=gen).bfloat16().cuda()

    def tiles(self, bq):
        ts, tq = [], []
        for s, n in enumerate(self.news):
            for q0 in range(0, n, bq):
                ts.append(s)
                tq.append(q0)
        return torch.tensor(ts, dtype=torch.int32).cuda(), torch.tensor(tq, dtype=torch.int32).cuda()

    def gather(self, s):
        ps = self.ps
        pg = self.page_ids[self.page_start[s]:self.page_start[s + 1]].long()
        rows = (pg[:, None] * ps + torch.arange(ps, device="cuda")[None, :]).reshape(-1)[: self.ctxs[s]]
        return self.k[rows], self.v[rows]  # [ctx, hkv, hd]

    def reference(self):
        out = torch.empty(self.T, self.hq * self.hd, dtype=torch.float32, device="cuda")
        qs = self.q_start.tolist()
        rep = self.hq // self.hkv
        for s, (c, n) in enumerate(zip(self.ctxs, self.news)):
            k, v = self.gather(s)
            k = k.float().repeat_interleave(rep, dim=1).transpose(0, 1)  # [hq, ctx, hd]
            v = v.float().repeat_interleave(rep, dim=1).transpose(0, 1)
            q = self.q[qs[s]:qs[s + 1]].float().view(n, self.hq, self.hd).transpose(0, 1)
            sc = q @ k.transpose(1, 2) / math.sqrt(self.hd)
            pos = torch.arange(c - n, c, device="cuda")[:, None]
            col = torch.arange(c, device="cuda")[None, :]
            sc = sc.masked_fill(col > pos, float("-inf"))
            o = torch.softmax(sc, -1) @ v
            out[qs[s]:qs[s + 1]] = o.transpose(0, 1).reshape(n, -1)
        return out

    def flops(self):
        # Causal: each new token at position p attends to p + 1 keys; 4 flops per (q, k, d).
        tot = 0
        for c, n in zip(self.ctxs, self.news):
            tot += sum(range(c - n + 1, c + 1))
        return 4.0 * tot * self.hd * self.hq


_libcuda = None


def driver():
    global _libcuda
    if _libcuda is None:
        _libcuda = ctypes.CDLL("libcuda.so.1")
        _libcuda.cuTensorMapEncodeTiled.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32] + \
            [ctypes.c_void_p] * 5 + [ctypes.c_int] * 4
        _libcuda.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
        _libcuda.cuModuleLoad.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        _libcuda.cuModuleGetFunction.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p]
        _libcuda.cuFuncSetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    return _libcuda


def kv_map(cache, box_rows):
    """The 2D tensor map (128 bytes) the ws kernel copies K or V tiles with: rows are
    cache slots, columns every head's head_dim; boxes of 64 columns x box_rows rows,
    128-byte swizzle (the same encoding the engine makes in Rust)."""
    slots, heads, hd = cache.shape
    raw = ctypes.create_string_buffer(192)
    addr = (ctypes.addressof(raw) + 63) & ~63  # CUtensorMap is 64-byte aligned
    dims = (ctypes.c_uint64 * 2)(heads * hd, slots)
    strides = (ctypes.c_uint64 * 1)(heads * hd * 2)
    box = (ctypes.c_uint32 * 2)(64, box_rows)
    ones = (ctypes.c_uint32 * 2)(1, 1)
    # bf16 = 9, no interleave, 128-byte swizzle = 3, L2 promotion 256 B = 3, OOB fill zeros = 0
    r = driver().cuTensorMapEncodeTiled(addr, 9, 2, cache.data_ptr(), dims, strides, box, ones, 0, 3, 3, 0)
    if r != 0:
        raise SystemExit(f"cuTensorMapEncodeTiled failed: {r}")
    return ctypes.string_at(addr, 128)


def launch_raw(fn, grid, block, smem, args):
    """cuLaunchKernel with each argument's bytes; fn is a DriverFn."""
    held = []
    for a in args:
        if isinstance(a, bytes):
            held.append((ctypes.c_uint8 * len(a)).from_buffer_copy(a))
        elif isinstance(a, np.float32):
            held.append(ctypes.c_float(float(a)))
        elif isinstance(a, np.int32):
            held.append(ctypes.c_int32(int(a)))
        else:
            held.append(ctypes.c_uint64(int(a)))
    params = (ctypes.c_void_p * len(held))(*[ctypes.addressof(h) for h in held])
    r = driver().cuLaunchKernel(fn.ptr, grid[0], grid[1], 1, block[0], 1, 1, smem, None, params, None)
    if r != 0:
        raise SystemExit(f"cuLaunchKernel failed: {r}")


def run_ours(kind, fn, P, bq, smem=0, threads=128, grid=None, tma=False):
    # The persistent kernel draws work items from a counter that it resets itself.
    counter = torch.zeros(1, dtype=torch.int32, device="cuda")
    o = torch.full((P.T, P.hq * P.hd), float("nan"), dtype=torch.bfloat16, device="cuda")
    ts, tq = P.tiles(bq)
    n = ts.numel()
    scale = np.float32(1.0 / math.sqrt(P.hd))
    if kind == "sm90":
        args = (ptr(P.q), np.int32(P.hq * P.hd), ptr(o), ptr(P.k), ptr(P.v), ptr(P.q_start), ptr(P.kv_len),
                ptr(P.page_start), ptr(P.page_ids), ptr(ts), ptr(tq), np.int32(n), np.int32(P.hq),
                np.int32(P.hkv), np.int32(P.ps), scale, ptr(counter), np.uint64(0))  # no watchdog report
        if tma:
            # Boxes of one page chunk (a chunk never crosses a page).
            rows = min(P.ps, 128)
            args = args + (kv_map(P.k, rows), kv_map(P.v, rows))
    else:
        args = (ptr(P.q), np.int32(P.hq * P.hd), ptr(o), ptr(P.k), ptr(P.v), ptr(P.q_start), ptr(P.kv_len),
                ptr(P.page_start), ptr(P.page_ids), ptr(ts), ptr(tq), np.int32(P.hq), np.int32(P.hkv),
                np.int32(P.ps), scale)
    # A persistent kernel takes one block per SM (grid="sms"); the others a block per
    # (tile, head).
    dims = (min(n * P.hq, NUM_SMS), 1) if grid == "sms" else (n, P.hq)

    def launch():
        # ts/tq are referenced here so they outlive run_ours (the kernel reads them).
        if tma:
            launch_raw(fn, dims, (threads,), smem, args)
        else:
            fn(dims, (threads,), args, shared_mem=smem)
        return ts, tq, counter

    return o, launch


def spec(src_text, defs, hd):
    """Launch geometry of a Hopper kernel source: (threads, dynamic smem, grid, bq)."""
    import re

    def val(name, default):
        for d in defs:
            if d.startswith(name + "="):
                return int(d.split("=")[1])
        m = re.search(rf"#define {name} (\d+)", src_text)
        return int(m.group(1)) if m else default

    if "#define P_THREADS" in src_text:  # the warp-specialised persistent kernel
        # P_BK is fixed in the source (no #ifndef): a variant setting it would build the
        # source's 128-key tiles while this sized the launch for its own value.
        if any(d.startswith("P_BK=") for d in defs):
            raise SystemExit(f"variant {defs}: P_BK is fixed at 128 in the ws kernel")
        bk, qslots = val("P_BK", 128), val("P_QSLOTS", 2)
        stages = val("P_KSTAGES", 2) + val("P_VSTAGES", 3)
        grid = "tiles" if "GRID=tiles" in defs else "sms"
        return val("P_THREADS", 384), (qslots * 128 + stages * bk) * hd * 2 + 1024, grid, 128
    bk, stages = val("H_BK", 64), val("H_STAGES", 3)
    return 256, stages * 2 * bk * hd * 2 + 1024, "tiles", 128


def bench(launch, reps=20, per=10):
    """Median seconds of one launch, over `reps` groups of `per` back-to-back launches.

    A GPU sleep ahead of each group keeps the device busy while Python queues the group,
    so the events time the kernels alone: timed one launch at a time, each figure also
    held the host's launch preparation (tens of microseconds through ctypes for our
    kernels, against 0.3 ms kernels), which differed between processes by several
    percent."""
    launch()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(2_000_000)  # about 1 ms at the H200's clocks
        a.record()
        for _ in range(per):
            launch()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / per)
    return float(np.median(times)) / 1e3


def sdpa_time(P, backend):
    """cuDNN / flash SDPA on the same work, contiguous [B, H, S, D], fresh causal only."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    B, S = len(P.news), P.news[0]
    q = torch.randn(B, P.hq, S, P.hd, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(B, P.hkv, S, P.hd, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(B, P.hkv, S, P.hd, device="cuda", dtype=torch.bfloat16)
    be = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[backend]
    try:
        with sdpa_kernel(be):
            f = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            return bench(f)
    except Exception as e:  # noqa: BLE001
        print(f"  sdpa {backend}: {e}")
        return None


def ceilings():
    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    t = bench(lambda: y.copy_(x))
    bw = 2 * x.numel() / t / 1e12
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t = bench(lambda: a @ b, reps=5, per=4)
    return bw, 2 * 8192**3 / t / 1e12


def write_figures(path, figures):
    """Appends figures to bench.jsonl (when a path is given) with date, commit and machine."""
    if not path:
        return
    common = {"date": os.environ.get("MINISGL_BENCH_DATE", time.strftime("%Y-%m-%d")),
              "commit": os.environ.get("MINISGL_COMMIT", "unknown"),
              "machine": torch.cuda.get_device_name(), "tp": 1}
    with open(path, "a") as f:
        for fig in figures:
            f.write(json.dumps({**common, **fig}) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jsonl")
    ap.add_argument("--variants", default="")
    ap.add_argument("--skip", default="")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per kernel's process")
    ap.add_argument("--cases", default="", help="comma-separated case names to run (default: all)")
    ap.add_argument("--shapes", default="", help="comma-separated shape names to run (default: all)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--gemm", type=float, default=0.0, help="the GEMM ceiling measured by the ceil process")
    ap.add_argument("--only", help="run one kernel (mma, sdpa, or a variant name) in this process")
    args = ap.parse_args()
    if not args.only:
        # The ceilings first, so every kernel's figures carry the GEMM rate measured in
        # this call; then each kernel in its own process (a fault in one leaves the
        # others' figures).
        r = subprocess.run([sys.executable, __file__, "--only", "ceil"] + (["--jsonl", args.jsonl] if args.jsonl else []),
                           capture_output=True, text=True, timeout=args.timeout)
        print(r.stdout.strip())
        gemm = float(r.stdout.split("GEMM ")[1].split()[0]) if "GEMM " in r.stdout else 0.0
        names = ["mma", "sm90"] + [v for v in args.variants.split(",") if v] + ["sdpa"]
        if args.skip:
            names = [n for n in names if n not in args.skip.split(",")]
        for n in names:
            cmd = [sys.executable, __file__, "--only", n, "--cases", args.cases, "--shapes", args.shapes,
                   "--reps", str(args.reps), "--gemm", str(gemm)] + (["--jsonl", args.jsonl] if args.jsonl else [])
            try:
                r = subprocess.run(cmd, timeout=args.timeout)
                if r.returncode != 0:
                    print(f"== {n}: exit {r.returncode}")
            except subprocess.TimeoutExpired:
                print(f"== {n}: timed out after {args.timeout} s (a hung kernel?)")
        return
    gen = torch.Generator().manual_seed(0)
    only = args.only
    if only == "ceil":
        bw, gemm = ceilings()
        print(f"ceilings: copy {bw:.2f} TB/s, bf16 GEMM {gemm:.0f} TFLOP/s")
        write_figures(args.jsonl, [{"metric": "gemm_bf16_tflops", "value": round(gemm, 1), "unit": "TFLOP/s"},
                                   {"metric": "copy_bandwidth_tbps", "value": round(bw, 3), "unit": "TB/s"}])
        return
    # mma[+DEFINE=V...]: the portable kernel (kernels/attention_prefill.cu), for sm_90 here.
    is_mma = only == "mma" or only.startswith("mma+")
    old = build(K / "attention_prefill.cu", "90", only.split("+")[1:],
                name=only.replace("+", "_").replace("=", "_"))[0] if is_mma else None
    hop = {}
    # A variant is sm90[+DEFINE=V...] or ws[+...] (the kernels in kernels/) or a file
    # under scripts/gpu/variants/ named by its stem, e.g. v2+H_BK=128.
    variants = [(only, tuple(only.split("+")[1:]))] if not is_mma and only not in ("sdpa", "ceil") else []
    for name, defs in variants:
        stem = name.split("+")[0]
        # sm90 and ws are the engine's kernel families; anything else a file under variants/.
        src = {"sm90": K / "attention_prefill_sm90.cu", "ws": K / "attention_prefill_ws_sm90.cu"}.get(
            stem, Path(__file__).parent / "variants" / f"{stem}.cu")
        try:
            m, cubin = build(src, "90a", [d for d in defs if not d.startswith(("GRID=", "GATHER="))],
                             name=name.replace("+", "_").replace("=", "_"))
            hop[name] = (m, cubin, src.read_text(), defs)
        except SystemExit as e:
            print(f"  build {name} failed: {e}")
    rows, figures = [], []
    gemm = args.gemm or 780.0  # run alone (--only X) the ceiling is the nominal rate
    shapes = [("qwen3-0.6b", 16, 8, 128), ("qwen3-14b", 40, 8, 128), ("hd64-gqa", 32, 8, 64)]
    cases = [
        ("8x2048 fresh", [2048] * 8, [2048] * 8, 16),
        ("4x4096 extend 1024/3072", [4096] * 4, [1024] * 4, 16),
        ("ragged mixed p1", [300, 1500, 77, 2048, 513], [300, 700, 77, 1024, 1], 1),
        # Shapes the issue does not list, so tuning stays general.
        ("1x8192 fresh", [8192], [8192], 16),
        ("32x512 fresh", [512] * 32, [512] * 32, 16),
        ("ragged extend p64", [5000, 700, 2500, 129], [1000, 700, 37, 129], 64),
        # The main case at other page sizes (a tile's K or V is 128 / page copies) and
        # with each sequence's pages in order (a fresh prompt's).
        ("8x2048 pages of 64", [2048] * 8, [2048] * 8, 64),
        ("8x2048 pages of 128", [2048] * 8, [2048] * 8, 128),
        ("8x2048 pages of 8", [2048] * 8, [2048] * 8, 8),
        ("8x2048 fresh, pages in order", [2048] * 8, [2048] * 8, 16),
        ("ragged mixed, pages in order", [300, 1500, 77, 2048, 513], [300, 700, 77, 1024, 1], 16),
        ("4x4096 extend, pages in order", [4096] * 4, [1024] * 4, 16),
        ("1x8192 fresh, pages in order", [8192], [8192], 16),
    ]
    if args.shapes:
        shapes = [x for x in shapes if x[0] in args.shapes.split(",")]
    if args.cases:
        cases = [x for x in cases if x[0] in args.cases.split(",")]
    for sname, hq, hkv, hd in shapes:
        for cname, ctxs, news, ps in cases:
            P = Paged(ctxs, news, hq, hkv, hd, ps, gen, in_order="in order" in cname)
            ref = P.reference()
            flops = P.flops()
            line = {"shape": sname, "case": cname}
            cands = [(only, old.get_function(f"attn_prefill_hd{hd}"), "mma", 64, 0, 128, None, False)] if old else []
            for vn, (m, cubin, text, defs) in hop.items():
                prefix = "attn_prefill_ws" if "attn_prefill_ws_hd" in text else "attn_prefill_sm90"
                # The engine's choice: K/V through the copy engine for pages of 8+ rows
                # (a power of two), the cp.async gather build otherwise or with GATHER=1.
                if "attn_prefill_ws_gather" in text and ("GATHER=1" in defs or ps < 8 or ps & (ps - 1)):
                    prefix = "attn_prefill_ws_gather"
                thr, smem, grid, bq = spec(text, defs, hd)
                tma = "TmaDesc" in text
                if tma:
                    fn = DriverFn(cubin, f"{prefix}_hd{hd}", smem)
                else:
                    fn = m.get_function(f"{prefix}_hd{hd}")
                    fn.max_dynamic_shared_size_bytes = smem
                cands.append((vn, fn, "sm90", bq, smem, thr, grid, tma))
            for label, fn, kind, bq, smem, thr, grid, tma in cands:
                o, launch = run_ours(kind, fn, P, bq, smem, thr, grid, tma)
                print(f"  launch {label} {sname} {cname}", flush=True)
                launch()
                torch.cuda.synchronize()
                of = o.float()
                nan = torch.isnan(of).sum().item()
                err = ((of - ref).norm() / ref.norm()).item() if nan == 0 else float("nan")
                # P_DIAG builds compute garbage on purpose: timed, never checked.
                t = bench(launch, args.reps) if (nan == 0 and err < 2e-2) or "P_DIAG" in label else None
                tf = flops / t / 1e12 if t else 0.0
                line[label] = (err, tf)
                print(f"{sname:11s} {cname:26s} {label:14s} rel_err {err:.2e} nan {nan:6d}  {tf:7.1f} TFLOP/s")
                if t and "P_DIAG" not in label:
                    kname = {"sm90": "minisgl-hopper-wgmma", "mma": "minisgl-portable-mma"}.get(label, label)
                    if label.startswith("mma+"):
                        kname = "minisgl-portable-" + label  # a build of the portable kernel
                    if label == "ws" or label.startswith("ws+"):
                        kname = "minisgl-hopper-" + label  # the engine's kernel, or a build of it
                    figures.append({"metric": "prefill_attention_tflops", "kernel": kname, "shape": sname,
                                    "workload": cname, "page_size": ps, "value": round(tf, 1),
                                    "unit": "TFLOP/s", "ceiling": round(gemm, 1), "fraction": round(tf / gemm, 3)})
            if "fresh" in cname and only == "sdpa":
                for be in ("cudnn", "flash"):
                    t = sdpa_time(P, be)
                    if t:
                        tf = flops / t / 1e12
                        print(f"{sname:11s} {cname:26s} sdpa-{be:9s}                     {tf:7.1f} TFLOP/s")
                        figures.append({"metric": "prefill_attention_tflops", "kernel": f"torch-sdpa-{be}",
                                        "shape": sname, "workload": cname, "value": round(tf, 1), "unit": "TFLOP/s",
                                        "ceiling": round(gemm, 1), "fraction": round(tf / gemm, 3)})
            rows.append(line)
    write_figures(args.jsonl, figures)


if __name__ == "__main__":
    main()
