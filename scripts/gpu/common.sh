# Shared by scripts/gpu-bench.sh and scripts/gpu-tp.sh (sourced, not run).

# Here, with Rust: the release binary and the given shapes' configs in .gpu/
# (git-ignored), with the commit they were built from.
gpu_stage() {
    cargo build --release -p minisgl-host
    # Every kernel family must compile under NVRTC and define exactly the kernels the
    # loader names, before any device time is spent (a kernel deleted by mistake made
    # a whole call fall back to the simple attention kernel on 2026-12-01).
    local nvrtc_lib
    nvrtc_lib=$(ls -d "$PWD"/target/nvrtc/nvidia/cu13/lib "$PWD"/target/cudatools/lib/python3*/site-packages/nvidia/cu13/lib 2>/dev/null | head -1 || true)
    if [ -z "$nvrtc_lib" ]; then
        echo "gpu_stage: no NVRTC here; run scripts/setup.sh (it installs target/nvrtc)" >&2
        return 1
    fi
    LD_LIBRARY_PATH="$nvrtc_lib" cargo test --release -p minisgl-host --test kernels_nvrtc
    for s in "$@"; do
        mkdir -p .gpu/$s
        cp "${MODEL_CONFIGS:-examples/model-configs}/$s/config.json" .gpu/$s/config.json
    done
    grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
    git rev-parse --short HEAD > .gpu/commit
    # The device tool carries at most 64 MiB with the working tree (24 MB of it tracked
    # files by 2026-12-06): the symbols are 10 of the binary's 42 MB.
    strip target/release/minisgl-host
    ls -la target/release/minisgl-host .gpu
}

# On the GPU machine: CUDA on the paths, the kernel cache, and what bench
# offline records with each figure (commit, date).
gpu_device_env() {
    export PATH="/usr/local/cuda/bin:$PATH"
    export LD_LIBRARY_PATH="/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
    export MINISGL_KERNEL_CACHE="${MINISGL_KERNEL_CACHE:-/tmp/minisgl-kernels}"
    export MINISGL_COMMIT="$(cat .gpu/commit 2>/dev/null || echo unknown)"
    export MINISGL_BENCH_DATE="$(date -u +%Y-%m-%d)"
    export PYTHONUNBUFFERED=1
    # Start-up lines (weights, KV, graphs, the device's kernels) next to the warnings.
    export RUST_LOG="${RUST_LOG:-warn,minisgl::model::runner=info,minisgl::backend::cuda::device=info}"
}
