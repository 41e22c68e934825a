#!/usr/bin/env bash
# What a CUDA kernel costs, without a GPU: registers, spills, shared memory (ptxas -v),
# whether NVRTC 13.0 (the engine's compiler) accepts it, and optionally its SASS.
#
#   scripts/kernel-report.sh FILE.cu [ARCH] [-DNAME=V ...]   (ARCH: sm_90a by default)
#   SASS=1 scripts/kernel-report.sh ...                       also writes FILE.sass and
#                                                             prints scripts/gpu/sass_rounds.py
#
# The CUDA 13.0 compilers come from PyPI into target/cudatools (once, ~1 GB): nvcc and
# ptxas 13.0.88 (as on the GPU machine), NVRTC 13.0.88 (as CI's kernel compile test),
# cuobjdump and nvdisasm (PyPI has 13.2+ only; they read 13.0 CUBINs). nvcc catches what ptxas says;
# NVRTC catches what only the engine's JIT compile rejects (it refused a generic lambda
# that nvcc took, on 2026-12-01).
set -euo pipefail
cd "$(dirname "$0")/.."
src="${1:?usage: $0 FILE.cu [ARCH] [-DNAME=V ...]}"
shift
arch="sm_90a"
if [[ $# -gt 0 && "$1" != -* ]]; then arch="$1"; shift; fi
venv=target/cudatools
if [[ ! -x "$venv/bin/python" ]]; then
    echo "== installing the CUDA 13.0 compilers from PyPI into $venv" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install --progress-bar off "nvidia-cuda-nvcc==13.0.88" "nvidia-nvvm==13.0.88" \
        "nvidia-cuda-crt==13.0.88" "nvidia-cuda-runtime==13.0.96" "nvidia-cuda-nvrtc==13.0.88" \
        "nvidia-cuda-cuobjdump" "nvidia-cuda-nvdisasm" >&2
fi
cu=$("$venv/bin/python" -c 'import nvidia, os; print(os.path.join(nvidia.__path__[0], "cu13"))')
num="${arch#sm_}"
out="target/kernel-report"
mkdir -p "$out"
cubin="$out/$(basename "$src" .cu).cubin"
echo "== nvcc / ptxas ($arch) $src $*"
"$cu/bin/nvcc" -cubin -O3 "-gencode=arch=compute_${num},code=${arch}" -Xptxas -v -I "$cu/include" \
    -I kernels "$@" "$src" -o "$cubin" 2>&1 | grep -v "^ptxas info    : Compiling\|bytes gmem\|Compile time"
echo "== NVRTC 13.0 ($arch), as the engine compiles it"
LD_LIBRARY_PATH="$cu/lib" "$venv/bin/python" - "$src" "$arch" "$@" <<'EOF'
import ctypes, os, sys
src_path, arch, defs = sys.argv[1], sys.argv[2], sys.argv[3:]
lib = ctypes.CDLL(os.path.join(os.environ["LD_LIBRARY_PATH"], "libnvrtc.so.13"))
import re
def inline(path):  # the engine embeds kernels/*.cuh the same way
    out = []
    for l in open(path).read().splitlines():
        m = re.fullmatch(r'#include "([a-z0-9_]+\.cuh)"', l.strip())
        out.append(inline(os.path.join("kernels", m.group(1))) if m else l + "\n")
    return "".join(out)
text = inline(src_path)
prog = ctypes.c_void_p()
lib.nvrtcCreateProgram(ctypes.byref(prog), text.encode(), os.path.basename(src_path).encode(), 0, None, None)
# The host's options (host/src/backend/cuda/nvrtc.rs) plus the defines given.
opts = [b"-std=c++17", b"--fmad=true", f"--gpu-architecture={arch}".encode()] + [d.encode() for d in defs]
rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
n = ctypes.c_size_t()
lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
log = ctypes.create_string_buffer(n.value)
lib.nvrtcGetProgramLog(prog, log)
print(log.value.decode().strip() or "(no messages)")
print("NVRTC: ok" if rc == 0 else f"NVRTC: FAILED (nvrtcResult {rc})")
sys.exit(1 if rc else 0)
EOF
if [[ "${SASS:-0}" == 1 ]]; then
    PATH="$cu/bin:$PATH" "$cu/bin/cuobjdump" -sass "$cubin" > "$out/$(basename "$src" .cu).sass"
    echo "== SASS: $out/$(basename "$src" .cu).sass ($(grep -c HGMMA "$out/$(basename "$src" .cu).sass" || true) HGMMA)"
    # wgmma kernels: each round's length and the exponentials ahead of the P V wait.
    python3 scripts/gpu/sass_rounds.py "$out/$(basename "$src" .cu).sass"
fi
