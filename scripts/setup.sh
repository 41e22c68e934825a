#!/usr/bin/env bash
# Install what the build and the tests need on a fresh machine (idempotent):
# the wasm target, Python test packages, NVRTC for the kernel compile test,
# and the default model.
set -euo pipefail
cd "$(dirname "$0")/.."
rustup target add wasm32-wasip2 >/dev/null
# openai: the server is tested with the official client.
python3 -c 'import openai, pytest' 2>/dev/null || python3 -m pip install -q openai pytest
# Routers (Rust binaries inside the wheels) and the manifest validator (bundled
# Kubernetes schemas, offline) for tests/python/test_scale_out*.py, pinned.
python3 -c 'import importlib.metadata as m; assert [m.version(p) for p in ("sglang-router", "vllm-router", "pyyaml", "kubernetes-validate")] == ["0.3.2", "0.1.17", "6.0.3", "1.37.0"]' 2>/dev/null || python3 -m pip install -q sglang-router==0.3.2 vllm-router==0.1.17 pyyaml==6.0.3 kubernetes-validate==1.37.0
# NVRTC without a GPU, pinned: newer NVRTC emits PTX that driver 580 may refuse.
# tests/kernels_nvrtc.rs compiles every kernel for sm_90 with it.
if [ ! -e target/nvrtc/nvidia/cu13/lib/libnvrtc.so.13 ]; then
    python3 -m pip install -q --target target/nvrtc \
        nvidia-cuda-nvrtc==13.0.88 nvidia-cuda-runtime==13.0.96
fi
scripts/fetch_default_model.sh >/dev/null
