#!/usr/bin/env bash
# Builds the FCFS scheduler written in Python, JavaScript and C into Wasm
# components, installing each toolchain from its package registry first:
#   target/wasm32-wasip2/plugin/fcfs_python.wasm  (componentize-py)
#   target/wasm32-wasip2/plugin/fcfs_js.wasm      (jco, QuickJS backend)
#   target/wasm32-wasip2/plugin/fcfs_c.wasm       (wit-bindgen C + zig cc)
#
# Toolchains live in target/lang-tools/ and are reused when present; a plugin
# is rebuilt only when its sources, the WIT or the toolchain pins change.
# Usage: scripts/build-lang-plugins.sh [python] [js] [c]   (default: all three)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
tools="$root/target/lang-tools"
out="$root/target/wasm32-wasip2/plugin"
mkdir -p "$tools" "$out"

# Pins: keep in step with docs/plugin-guide.md.
COMPONENTIZE_PY=0.25.1
ZIGLANG=0.15.2

langs=("$@")
[[ ${#langs[@]} -eq 0 ]] && langs=(python js c)

# Prints a hash of the given files plus the WIT and this script.
fingerprint() {
    cat "$@" wit/*.wit "$0" | sha256sum | cut -c1-16
}

# Runs "$@" unless $1 (a stamp file) already holds fingerprint $2.
up_to_date() {
    [[ -f "$1" && "$(cat "$1")" == "$2" ]]
}

python_venv() {
    local venv="$tools/venv"
    if ! "$venv/bin/python" -c "import importlib.metadata as m; assert m.version('componentize-py') == '$COMPONENTIZE_PY' and m.version('ziglang') == '$ZIGLANG'" 2>/dev/null; then
        echo "== installing componentize-py $COMPONENTIZE_PY and ziglang $ZIGLANG into $venv"
        python3 -m venv "$venv"
        "$venv/bin/pip" install --progress-bar off --disable-pip-version-check \
            "componentize-py==$COMPONENTIZE_PY" "ziglang==$ZIGLANG"
    fi
}

build_python() {
    python_venv
    local src=plugins/python-fcfs/app.py fp stamp="$tools/python.stamp"
    fp=$(fingerprint "$src")
    if up_to_date "$stamp" "$fp" && [[ -f "$out/fcfs_python.wasm" ]]; then
        echo "== fcfs_python.wasm is up to date"; return
    fi
    echo "== building fcfs_python.wasm (componentize-py)"
    local work="$tools/python-build"
    rm -rf "$work" && mkdir -p "$work"
    cp "$src" "$work/"
    (cd "$work" && "$tools/venv/bin/componentize-py" -d "$root/wit" -w scheduler bindings . >/dev/null \
        && "$tools/venv/bin/componentize-py" -d "$root/wit" -w scheduler componentize app -o "$out/fcfs_python.wasm")
    echo "$fp" > "$stamp"
}

build_js() {
    local dir=plugins/js-fcfs fp stamp="$tools/js.stamp" npm_dir="$tools/js"
    fp=$(fingerprint "$dir/fcfs.js" "$dir/package.json" "$dir/package-lock.json")
    if up_to_date "$stamp" "$fp" && [[ -f "$out/fcfs_js.wasm" ]]; then
        echo "== fcfs_js.wasm is up to date"; return
    fi
    if ! command -v npm >/dev/null; then
        if [[ $(id -u) -ne 0 ]]; then
            echo "error: npm not found; install Node.js >= 18 with npm (Debian/Ubuntu: sudo apt install nodejs npm)" >&2
            exit 1
        fi
        echo "== npm not found: installing Debian's nodejs and npm"
        apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null
    fi
    # The npm tools live under target/, not in the source tree: the package
    # files are copied there and installed from the lock file.
    mkdir -p "$npm_dir"
    if ! cmp -s "$dir/package-lock.json" "$npm_dir/package-lock.json" || [[ ! -x "$npm_dir/node_modules/.bin/jco" ]]; then
        echo "== installing jco and componentize-js into $npm_dir (npm ci)"
        cp "$dir/package.json" "$dir/package-lock.json" "$npm_dir/"
        (cd "$npm_dir" && npm ci --no-audit --no-fund --loglevel=error)
    fi
    echo "== building fcfs_js.wasm (jco componentize, QuickJS backend)"
    # The QuickJS backend: 1.5 MiB and ~1 ms at batch 256; jco's default
    # StarlingMonkey backend is 11 MiB and ~3x slower for this workload.
    "$npm_dir/node_modules/.bin/jco" componentize "$root/$dir/fcfs.js" --wit "$root/wit" --world-name scheduler \
        --backend quickjs --backend-qjs-disable-async -o "$out/fcfs_js.wasm"
    echo "$fp" > "$stamp"
}

build_c() {
    python_venv
    local dir=plugins/c-fcfs fp stamp="$tools/c.stamp"
    fp=$(fingerprint "$dir/fcfs.c" "$dir/tool/Cargo.toml" "$dir/tool/Cargo.lock" "$dir/tool/src/main.rs")
    if up_to_date "$stamp" "$fp" && [[ -f "$out/fcfs_c.wasm" ]]; then
        echo "== fcfs_c.wasm is up to date"; return
    fi
    echo "== building minisgl-wit-c (wit-bindgen C generator + component encoder)"
    "$root/scripts/with-heartbeat.sh" "building minisgl-wit-c" \
        cargo build --release --locked --manifest-path "$dir/tool/Cargo.toml" --target-dir "$tools/cargo"
    local witc="$tools/cargo/release/minisgl-wit-c" gen="$tools/c-build"
    rm -rf "$gen" && mkdir -p "$gen"
    "$witc" bindgen wit scheduler "$gen" >/dev/null
    echo "== building fcfs_c.wasm (zig cc for wasm32-wasi)"
    # zig caches its wasi-libc build here, so only the first build pays for it.
    export ZIG_GLOBAL_CACHE_DIR="$tools/zig-cache"
    "$tools/venv/bin/python" -m ziglang cc --target=wasm32-wasi -O2 -mexec-model=reactor \
        -Wl,-z,stack-size=1048576 -I"$gen" "$gen/scheduler.c" "$dir/fcfs.c" \
        "$gen/scheduler_component_type.o" -o "$gen/fcfs_c.core.wasm"
    "$witc" component "$gen/fcfs_c.core.wasm" "$out/fcfs_c.wasm"
    echo "$fp" > "$stamp"
}

for lang in "${langs[@]}"; do
    case "$lang" in
        python) build_python ;;
        js) build_js ;;
        c) build_c ;;
        *) echo "unknown language '$lang': expected python, js or c" >&2; exit 2 ;;
    esac
done
ls -l "$out"/fcfs_*.wasm
