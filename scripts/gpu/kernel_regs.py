#!/usr/bin/env python3
"""Registers, spills and shared memory of every kernel of one family, from ptxas as
NVRTC runs it (no GPU needed): the occupancy question (a 128-thread block runs 16 to
an SM only at <= 32 registers a thread) answered before a device call.

    LD_LIBRARY_PATH=target/nvrtc/nvidia/cu13/lib python3 scripts/gpu/kernel_regs.py kernels/rope.cu [--arch sm_90] [--filter qkv]

Headers are pasted in place of their #include lines, as the host does
(host/src/backend/cuda/nvrtc.rs), with the same options."""
import argparse
import ctypes
import os
import re
import sys

ap = argparse.ArgumentParser()
ap.add_argument("src")
ap.add_argument("--arch", default="sm_90")
ap.add_argument("--filter", default="", help="only kernels whose name contains this")
ap.add_argument("-D", action="append", default=[], help="extra defines, NAME=VALUE")
a = ap.parse_args()

kdir = os.path.dirname(os.path.abspath(a.src))
lines = []
for line in open(a.src):
    m = re.match(r'\s*#include "([a-z_]+\.cuh)"\s*$', line)
    lines.append(open(os.path.join(kdir, m.group(1))).read() + "\n" if m else line)
tu = "".join(lines).encode()

try:
    nv = ctypes.CDLL("libnvrtc.so.13")
except OSError:
    sys.exit("libnvrtc.so.13 not found: run scripts/setup.sh, then set LD_LIBRARY_PATH=target/nvrtc/nvidia/cu13/lib")
prog = ctypes.c_void_p()
name = os.path.basename(a.src).encode()
if nv.nvrtcCreateProgram(ctypes.byref(prog), tu, name, 0, None, None) != 0:
    sys.exit("nvrtcCreateProgram failed")
opts = [b"-std=c++17", b"--fmad=true", f"--gpu-architecture={a.arch}".encode(), b"--ptxas-options=-v"]
opts += [f"-D{d}".encode() for d in a.D]
arr = (ctypes.c_char_p * len(opts))(*opts)
rc = nv.nvrtcCompileProgram(prog, len(opts), arr)
size = ctypes.c_size_t()
nv.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
buf = ctypes.create_string_buffer(size.value)
nv.nvrtcGetProgramLog(prog, buf)
log = buf.value.decode(errors="replace")
if rc != 0:
    sys.exit(f"compile failed ({rc}):\n{log}")
# ptxas -v: "Compiling entry function 'X' for 'sm_90'" then "... Used N registers, ..."
cur = None
for line in log.splitlines():
    m = re.search(r"entry function '([^']+)'", line)
    if m:
        cur = m.group(1)
        continue
    if cur and a.filter in cur and ("Used" in line or "spill" in line):
        print(f"{cur}: {line.split('info    :')[-1].strip()}")
