#!/usr/bin/env bash
# Install what the build and the tests need on a fresh machine (idempotent):
# the wasm target, Python test packages, and the default model.
set -euo pipefail
cd "$(dirname "$0")/.."
rustup target add wasm32-wasip2 >/dev/null
# openai: the server is tested with the official client.
python3 -c 'import openai, pytest' 2>/dev/null || python3 -m pip install -q openai pytest
scripts/fetch_default_model.sh >/dev/null
