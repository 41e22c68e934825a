#!/usr/bin/env bash
# The project's test command (README and .ci/run both call this).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build-plugins.sh
cargo test --workspace --all-targets
