#!/usr/bin/env bash
# Install what the build and the tests need on a fresh machine (idempotent):
# the wasm target, the Python test packages (in the project's venv,
# target/venv: never the system interpreter, which Debian and Ubuntu mark
# "externally managed", PEP 668), NVRTC for the kernel compile test, and the
# default model.
#
# Usage: scripts/setup.sh [--python-only]
#   --python-only   only create/update the venv (tests/python/test_setup.py)
# Env:   MINISGL_VENV  the venv's folder (default target/venv)
set -euo pipefail
cd "$(dirname "$0")/.."

# Every Python package the project installs, pinned, one per line. Add new
# ones here (not as separate `pip install` lines) so a fresh clone gets one
# resolvable set in one venv.
PYTHON_PACKAGES=(
    "openai==3.57.0"   # the server is tested with the official client
    "pytest==9.2.0"
    # Routers (Rust binaries inside the wheels) and the manifest validator (bundled
    # Kubernetes schemas, offline) for tests/python/test_scale_out*.py.
    "sglang-router==0.3.2"
    "vllm-router==0.1.17"
    "pyyaml==6.0.3"
    "kubernetes-validate==1.37.0"
    # SGLang's benchmark client (tests/python/test_hardening_bench.py runs its
    # bench_serving.py as a file; no GPU stack) and the tokenizer loader it uses.
    "sglang==0.5.2"
    "transformers==4.56.1"
)

venv="${MINISGL_VENV:-target/venv}"
# Fails early with the fix, before anything else is installed.
scripts/venv.sh "$venv" >/dev/null
py="$venv/bin/python"
stamp="$venv/.minisgl-packages"
want=$(printf '%s\n' "${PYTHON_PACKAGES[@]}" | sed 's/[[:space:]]*#.*//' | sort)
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
    echo "== installing Python packages into $venv: $(echo $want)" >&2
    # shellcheck disable=SC2086
    "$py" -m pip install --progress-bar off --disable-pip-version-check $want >&2
    echo "$want" > "$stamp"
fi
[[ "${1:-}" == "--python-only" ]] && exit 0

rustup target add wasm32-wasip2 >/dev/null
# NVRTC without a GPU, pinned: newer NVRTC emits PTX that driver 580 may refuse.
# host/tests/kernels_nvrtc.rs compiles every kernel for sm_90 with it.
if [ ! -e target/nvrtc/nvidia/cu13/lib/libnvrtc.so.13 ]; then
    echo "== installing NVRTC 13.0 (for the kernel compile test) into target/nvrtc" >&2
    "$py" -m pip install --progress-bar off --disable-pip-version-check --target target/nvrtc \
        nvidia-cuda-nvrtc==13.0.88 nvidia-cuda-runtime==13.0.96 >&2
fi
scripts/fetch_default_model.sh >/dev/null
