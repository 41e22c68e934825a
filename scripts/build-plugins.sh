#!/usr/bin/env bash
# Build every Wasm plugin (default policies, examples, test guests) as
# wasm32-wasip2 components into target/wasm32-wasip2/plugin/.
set -euo pipefail
cd "$(dirname "$0")/.."
rustup target add wasm32-wasip2 >/dev/null 2>&1 || true
# Every workspace member whose crate-type is cdylib is a plugin.
py=$(scripts/venv.sh)
pkgs=$(cargo metadata --no-deps --format-version 1 | "$py" -c '
import json, sys
m = json.load(sys.stdin)
for p in m["packages"]:
    if any("cdylib" in t["crate_types"] for t in p["targets"]):
        print("-p", p["name"])
')
# shellcheck disable=SC2086
cargo build --target wasm32-wasip2 --profile plugin $pkgs
ls -1 target/wasm32-wasip2/plugin/*.wasm
