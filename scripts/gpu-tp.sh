#!/usr/bin/env bash
# Tensor parallelism on two H200s (issue 12), in two halves:
#
#   scripts/gpu-tp.sh build      (here, with Rust) builds target/release/minisgl-host and
#                                copies the Qwen3-14B / 32B configs into .gpu/ (git-ignored);
#   scripts/gpu-tp.sh device N   (on the x2 machine, no Rust) runs part N into $OUT:
#     part 1: correctness, tp = 2 against one GPU (fixture models whose heads divide,
#             Qwen3-14B random weights), NCCL through PyTorch for reference, and the
#             decode step on one GPU vs two with the all-reduce's share (14B);
#     part 2: offline throughput, Qwen3-14B tp = 1 and tp = 2, Qwen3-32B tp = 2, each
#             against its ceiling (the all-reduce bytes at the bus bandwidth measured
#             in the same run).
#
# Device call (tool `run`, kind nvidia-h200-x2), one per part:
#   command: bash scripts/gpu-tp.sh device 1
#   carry:   ["target/release/minisgl-host", ".gpu"]
# Then here: python3 scripts/gpu/collect.py DIR appends the figures to docs/results/bench.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu/common.sh

case "${1:-}" in
build)
    gpu_stage qwen3-14b qwen3-32b
    ;;
device)
    part="${2:?part 1 or 2}"
    out="${OUT:-$PWD/gpu-out}"
    mkdir -p "$out"
    gpu_device_env
    # NCCL comes with PyTorch's wheel (nvidia-nccl-cu13).
    nccl_lib="$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null || true)"
    export LD_LIBRARY_PATH="${nccl_lib:+$nccl_lib:}$LD_LIBRARY_PATH"
    # NVLink multicast stays off on the lent machines (see the device README).
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
    bin=target/release/minisgl-host
    jl="$out/bench.jsonl"
    { date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvidia-smi topo -m; ls "$nccl_lib"; } 2>&1 | tee "$out/env.log"
    set +e
    if [ "$part" = 1 ]; then
        models=()
        for m in tests/fixtures/models/*/; do
            [ "$(basename "$m")" = mistral ] && continue # one KV head: not divisible by 2
            models+=(--tp-model "$m")
        done
        # The fixtures first (seconds): a hang or failure here stops the part early.
        timeout 90 "$bin" gpu-check --skip-ops --skip-bench --skip-models --skip-engine \
            "${models[@]}" --tp 2 --report "$out/gpu-check-tp-fixtures.md" > "$out/gpu-check-tp-fixtures.log" 2>&1
        rc=$?
        echo "gpu-check tp fixtures rc=$rc"
        grep -E "^ *(PASS|FAIL)|tp |checks|error" "$out/gpu-check-tp-fixtures.log" | head -30
        if [ $rc != 0 ]; then tail -30 "$out/gpu-check-tp-fixtures.log"; exit 1; fi
        timeout 60 python3 scripts/gpu/nccl_busbw.py --world 2 2>&1 | grep -v "^\[W\|Warning" | tee "$out/nccl-torch.log"
        timeout 200 "$bin" gpu-check --skip-ops --skip-bench --skip-models --skip-engine \
            --tp-model .gpu/qwen3-14b --tp 2 \
            --report "$out/gpu-check-tp.md" > "$out/gpu-check-tp.log" 2>&1
        echo "gpu-check tp 14b rc=$?"
        grep -E "tp |checks|FAIL|error" "$out/gpu-check-tp.log" | head -30
        timeout 200 "$bin" gpu-check --skip-ops --skip-bench --skip-models --skip-engine \
            --tp-bench-model .gpu/qwen3-14b --tp 2 --tp-out "$out/tp-bench-14b.md" \
            --report "$out/tp-bench-report.md" > "$out/tp-bench.log" 2>&1
        echo "tp bench rc=$?"
        cat "$out/tp-bench-14b.md"
        tail -5 "$out/tp-bench.log"
    else
        wl=(--workload-name "nano-vllm n=256 in=100-1024 out=100-1024 seed=0")
        for tp in 1 2; do
            timeout 170 "$bin" bench offline --random-weights .gpu/qwen3-14b --device cuda --shape qwen3-14b \
                --tp $tp "${wl[@]}" --jsonl "$jl" 2>&1 | tail -8 | tee "$out/offline-14b-tp$tp.log"
        done
        timeout 230 "$bin" bench offline --random-weights .gpu/qwen3-32b --device cuda --shape qwen3-32b \
            --tp 2 "${wl[@]}" --jsonl "$jl" 2>&1 | tail -8 | tee "$out/offline-32b-tp2.log"
    fi
    echo "part $part done"
    ;;
*)
    echo "usage: $0 build | device 1|2" >&2
    exit 2
    ;;
esac
