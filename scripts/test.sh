#!/usr/bin/env bash
# The project's test command (README and .ci/run both call this).
#
# Tests build in the release profile, so after scripts/serve-default.sh only
# the test crates compile: the dependencies and the host library are the
# artefacts that build already made (one build serves both commands).
# Python tools run from the project's venv (target/venv, made by setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export PATH="$PWD/target/venv/bin:$PATH"
export LD_LIBRARY_PATH="$PWD/target/nvrtc/nvidia/cu13/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
scripts/build-plugins.sh
# Python, JavaScript and C ports of the default scheduler (toolchains from the registries).
scripts/build-lang-plugins.sh
scripts/with-heartbeat.sh "cargo test --release (compile, then run)" \
    cargo test --release --workspace --all-targets
# The server (target/release/minisgl-host, built above), driven by the
# official openai client over loopback.
MINISGL_BIN="$PWD/target/release/minisgl-host" python -m pytest -q tests/python
