#!/usr/bin/env bash
# Install what the build and the tests need on a fresh machine (idempotent):
# the wasm target, Python test packages, NVRTC for the kernel compile test,
# and the default model.
set -euo pipefail
cd "$(dirname "$0")/.."
rustup target add wasm32-wasip2 >/dev/null
# openai: the server is tested with the official client.
python3 -c 'import openai, pytest' 2>/dev/null || python3 -m pip install -q openai pytest
# SGLang's benchmark client (tests/python/test_hardening_bench.py runs its
# bench_serving.py as a file; no GPU stack) and the tokenizer loader it uses.
python3 -m pip install -q sglang==0.5.2 transformers==4.56.1
# NVRTC without a GPU, pinned: newer NVRTC emits PTX that driver 580 may refuse.
# tests/kernels_nvrtc.rs compiles every kernel for sm_90 with it.
if [ ! -e target/nvrtc/nvidia/cu13/lib/libnvrtc.so.13 ]; then
    python3 -m pip install -q --target target/nvrtc \
        nvidia-cuda-nvrtc==13.0.88 nvidia-cuda-runtime==13.0.96
fi
scripts/fetch_default_model.sh >/dev/null
