#!/usr/bin/env bash
# The CUDA backend's check on a GPU machine, in two halves:
#
#   scripts/gpu-check.sh build    (here, with Rust) builds target/release/minisgl-host,
#                                 copies the Qwen3-0.6B config into .gpu/ (git-ignored),
#                                 and prints the device `run` invocation;
#   scripts/gpu-check.sh device   (on the GPU machine, no Rust needed) runs the kernel
#                                 tests, the model comparisons, the engine's batching /
#                                 paging / overlap checks on every fixture model (gpu-check's
#                                 `engine` rows), and a short benchmark, writing
#                                 gpu-check.md / *.log into $OUT (or ./gpu-out).
# Timeouts (240 + 120 + 200 s by default) keep the whole device call under its 600 s limit.
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
build)
    cargo build --release -p minisgl-host
    mkdir -p .gpu/qwen3-0.6b
    cfg="${QWEN3_CONFIG:-examples/model-configs/qwen3-0.6b/config.json}"
    if [ -f "$cfg" ]; then cp "$cfg" .gpu/qwen3-0.6b/config.json; fi
    grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
    ls -la target/release/minisgl-host .gpu/qwen3-0.6b
    cat <<'MSG'
Device call (tool `run`, kind nvidia-h200):
  command: bash scripts/gpu-check.sh device
  carry:   ["target/release/minisgl-host", ".gpu"]
MSG
    ;;
device)
    out="${OUT:-$PWD/gpu-out}"
    mkdir -p "$out"
    export LD_LIBRARY_PATH="/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
    export MINISGL_KERNEL_CACHE="${MINISGL_KERNEL_CACHE:-/tmp/minisgl-kernels}"
    bin=target/release/minisgl-host
    { date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv; } 2>&1 | tee "$out/env.log"
    models=()
    for m in tests/fixtures/models/*/; do models+=(--model "$m"); done
    random=()
    [ -f .gpu/qwen3-0.6b/config.json ] && random=(--random-model .gpu/qwen3-0.6b --bench-model .gpu/qwen3-0.6b)
    set +e
    # 1. Kernels, sampling, models, the engine checks (on the fixture --model list) and
    #    the benchmark with the default (auto) attention.
    timeout "${GPU_CHECK_TIMEOUT:-240}" "$bin" gpu-check --report "$out/gpu-check.md" "${models[@]}" "${random[@]}" 2>&1 | tee "$out/gpu-check.log"
    rc1=${PIPESTATUS[0]}
    # 2. The fixture models (comparisons and engine checks) again through the portable
    #    `simple` attention kernel.
    MINISGL_ATTENTION_BACKEND=simple timeout "${GPU_CHECK_SIMPLE_TIMEOUT:-120}" "$bin" gpu-check --attention-backend simple --skip-ops --skip-bench \
        --report "$out/gpu-check-simple.md" "${models[@]}" 2>&1 | tee "$out/gpu-check-simple.log"
    rc2=${PIPESTATUS[0]}
    # 3. Offline throughput through the engine (if time is left).
    if [ -n "${BENCH_OFFLINE:-1}" ] && [ -f .gpu/qwen3-0.6b/config.json ]; then
        # Four runs in one process: CUDA graphs on/off x overlap on/off.
        timeout "${BENCH_TIMEOUT:-200}" "$bin" bench offline --random-weights .gpu/qwen3-0.6b --device cuda \
            --kv-memory-mb 16384 --compare-overlap --compare-graphs 2>&1 | tail -40 | tee "$out/bench-offline.log"
    fi
    echo "gpu-check rc=$rc1 simple rc=$rc2"
    [ "$rc1" = 0 ] && [ "$rc2" = 0 ]
    ;;
*)
    echo "usage: $0 build|device" >&2
    exit 2
    ;;
esac
