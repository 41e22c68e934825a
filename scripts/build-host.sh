#!/usr/bin/env bash
# Builds target/release/minisgl-host: the one build both README commands use
# (scripts/test.sh runs `cargo test --release`, which reuses these artefacts).
# When stderr is not a terminal cargo draws no progress bar, and the final
# compile of the host crate prints nothing for many minutes, so a line is
# printed every minute while cargo runs.
# Usage: scripts/build-host.sh [extra cargo build args]
set -euo pipefail
cd "$(dirname "$0")/.."
exec scripts/with-heartbeat.sh "building minisgl-host (release)" \
    cargo build --release -p minisgl-host --bin minisgl-host "$@"
