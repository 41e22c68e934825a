#!/usr/bin/env python3
"""Registers, spills and shared memory of every kernel of one family, from ptxas as
NVRTC runs it (no GPU needed): the occupancy question (a 128-thread block runs 16 to
an SM only at <= 32 registers a thread) answered before a device call.

    LD_LIBRARY_PATH=target/nvrtc/nvidia/cu13/lib python3 scripts/gpu/kernel_regs.py kernels/rope.cu [--arch sm_90] [--filter qkv]

With --sass-hashes it prints, instead, a hash and the size of each kernel's machine
code (its `.text` section in the cubin): run it before and after a change to show which
kernels the change left byte-identical.

Headers are pasted in place of their #include lines, as the host does
(host/src/backend/cuda/nvrtc.rs), with the same options."""
import argparse
import ctypes
import hashlib
import os
import re
import struct
import sys

ap = argparse.ArgumentParser()
ap.add_argument("src")
ap.add_argument("--arch", default="sm_90")
ap.add_argument("--filter", default="", help="only kernels whose name contains this")
ap.add_argument("-D", action="append", default=[], help="extra defines, NAME=VALUE")
ap.add_argument("--sass-hashes", action="store_true", help="hash each kernel's machine code instead")
ap.add_argument("--cubin", default="", help="also write the cubin here (for nvdisasm -c)")
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
if a.cubin:
    nv.nvrtcGetCUBINSize(prog, ctypes.byref(size))
    cubin = ctypes.create_string_buffer(size.value)
    nv.nvrtcGetCUBIN(prog, cubin)
    with open(a.cubin, "wb") as f:
        f.write(cubin.raw)
if a.sass_hashes:
    nv.nvrtcGetCUBINSize(prog, ctypes.byref(size))
    cubin = ctypes.create_string_buffer(size.value)
    nv.nvrtcGetCUBIN(prog, cubin)
    b = cubin.raw
    # ELF64 section headers: e_shoff at 0x28; e_shentsize, e_shnum, e_shstrndx at 0x3A.
    shoff, = struct.unpack_from("<Q", b, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", b, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", b, shoff + i * shentsize) for i in range(shnum)]
    strtab = secs[shstrndx][4]
    for sh_name, _, _, _, off, sz, *_ in secs:
        sec = b[strtab + sh_name:b.index(b"\0", strtab + sh_name)].decode()
        if sec.startswith(".text.") and a.filter in sec:
            print(sec[len(".text."):], hashlib.sha1(b[off:off + sz]).hexdigest()[:12], sz)
    sys.exit(0)
# ptxas -v: "Compiling entry function 'X' for 'sm_90'" then "... Used N registers, ..."
cur = None
for line in log.splitlines():
    m = re.search(r"entry function '([^']+)'", line)
    if m:
        cur = m.group(1)
        continue
    if cur and a.filter in cur and ("Used" in line or "spill" in line):
        print(f"{cur}: {line.split('info    :')[-1].strip()}")
