#!/usr/bin/env bash
# The project's test command (README and .ci/run both call this).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export LD_LIBRARY_PATH="$PWD/target/nvrtc/nvidia/cu13/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
scripts/build-plugins.sh
# Python, JavaScript and C ports of the default scheduler (toolchains from the registries).
scripts/build-lang-plugins.sh
cargo test --workspace --all-targets
# The server, driven by the official openai client over loopback.
python3 -m pytest -q tests/python
