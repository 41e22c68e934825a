#!/usr/bin/env bash
# GPU speed at real scale (issue 11), in two halves:
#
#   scripts/gpu-bench.sh build     (here, with Rust) builds target/release/minisgl-host and
#                                  copies the Qwen3-0.6B / 14B configs into .gpu/ (git-ignored);
#   scripts/gpu-bench.sh device N  (on the GPU machine, no Rust) runs part N and writes its
#                                  logs and JSON lines into $OUT:
#     part 1: prefill attention (our kernels vs cuDNN/flash SDPA, copy and GEMM ceilings),
#             the kernel checks of both prefill kernels, decode-step and attention benches,
#             Qwen3-0.6B offline (default workload and long prompts), 0.6B decode timeline;
#     part 2: Qwen3-14B offline (default workload and long prompts), 14B decode timeline;
#     part 3: after a decode-kernel change: kernel checks, offline A/B of the two
#             decode kernels (MINISGL_DECODE_KERNEL=simt|mma) on both shapes;
#     part 4: long prompts on both shapes and the 14B decode timeline.
#
# Device call (tool `run`, kind nvidia-h200), one per part:
#   command: bash scripts/gpu-bench.sh device 1
#   carry:   ["target/release/minisgl-host", ".gpu"]
# Then on this machine: python3 scripts/gpu/collect.py DIR... appends the figures to
# docs/results/bench.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu/common.sh

case "${1:-}" in
build)
    gpu_stage qwen3-0.6b qwen3-14b
    ;;
device)
    part="${2:?part 1 or 2}"
    out="${OUT:-$PWD/gpu-out}"
    mkdir -p "$out"
    gpu_device_env
    bin=target/release/minisgl-host
    jl="$out/bench.jsonl"
    { date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv; } 2>&1 | tee "$out/env.log"
    long=(--num-seqs 64 --min-input-len 4000 --max-input-len 8000 --min-output-len 16 --max-output-len 64
          --workload-name "long-prompt n=64 in=4000-8000 out=16-64 seed=0")
    set +e
    if [ "$part" = 1 ]; then
        timeout 120 python3 scripts/gpu/attn_bench.py --jsonl "$jl" 2>&1 | grep -v "Exception ignored\|driver.pyx\|  launch " | tee "$out/attn.log"
        models=()
        for m in tests/fixtures/models/*/; do models+=(--model "$m"); done
        # Kernels (both prefill kernels against the CPU), fixture and Qwen3-0.6B-shape
        # models against the CPU backend, decode benches.
        timeout 180 "$bin" gpu-check --skip-engine "${models[@]}" --random-model .gpu/qwen3-0.6b \
            --bench-model .gpu/qwen3-0.6b --report "$out/gpu-check-ops.md" > "$out/gpu-check-ops.log" 2>&1
        echo "gpu-check rc=$?"
        grep -E "checks failed|FAIL|prefill attention|decode attention|runner.step|passed" "$out/gpu-check-ops.log" | head -30
        timeout 100 "$bin" bench offline --random-weights .gpu/qwen3-0.6b --device cuda --shape qwen3-0.6b \
            --workload-name "nano-vllm n=256 in=100-1024 out=100-1024 seed=0" --jsonl "$jl" 2>&1 | tail -8 | tee "$out/offline-0.6b.log"
        timeout 80 "$bin" bench offline --random-weights .gpu/qwen3-0.6b --device cuda --shape qwen3-0.6b \
            "${long[@]}" --jsonl "$jl" 2>&1 | tail -6 | tee "$out/long-0.6b.log"
        timeout 80 "$bin" gpu-check --skip-ops --skip-bench --timeline-model .gpu/qwen3-0.6b \
            --timeline-out "$out/timeline-0.6b.md" --report "$out/timeline-report.md" > "$out/timeline-0.6b.log" 2>&1
        tail -3 "$out/timeline-0.6b.md"
    elif [ "$part" = 3 ]; then
        # After a decode-kernel change: the kernel checks (both decode kernels, every
        # GQA group, against the CPU) and their side-by-side timings, then the offline
        # workload with each decode kernel forced, on both shapes (an A/B in one call;
        # the sim profiles are regenerated in their own call once the default moves).
        timeout 120 "$bin" gpu-check --skip-models --skip-engine --report "$out/gpu-check-ops.md" > "$out/gpu-check-ops.log" 2>&1
        echo "gpu-check rc=$?"
        grep -E "checks, |FAIL|decode attention|decode kernels|prefill attention" "$out/gpu-check-ops.log" | head -40
        for k in simt mma; do
            MINISGL_DECODE_KERNEL=$k timeout 90 "$bin" bench offline --random-weights .gpu/qwen3-0.6b --device cuda --shape qwen3-0.6b \
                --workload-name "nano-vllm n=256 in=100-1024 out=100-1024 seed=0" --jsonl "$jl" 2>&1 | tail -4 | tee "$out/offline-0.6b-$k.log"
        done
        for k in simt mma; do
            MINISGL_DECODE_KERNEL=$k timeout 130 "$bin" bench offline --random-weights .gpu/qwen3-14b --device cuda --shape qwen3-14b \
                --workload-name "nano-vllm n=256 in=100-1024 out=100-1024 seed=0" --jsonl "$jl" 2>&1 | tail -4 | tee "$out/offline-14b-$k.log"
        done
    elif [ "$part" = 4 ]; then
        # Long prompts on both shapes (prefill-bound) and the 14B decode timeline
        # (the per-kernel gaps the next decode work starts from).
        timeout 100 "$bin" bench offline --random-weights .gpu/qwen3-0.6b --device cuda --shape qwen3-0.6b \
            "${long[@]}" --jsonl "$jl" 2>&1 | tail -4 | tee "$out/long-0.6b.log"
        timeout 150 "$bin" bench offline --random-weights .gpu/qwen3-14b --device cuda --shape qwen3-14b \
            "${long[@]}" --jsonl "$jl" 2>&1 | tail -4 | tee "$out/long-14b.log"
        timeout 200 "$bin" gpu-check --skip-ops --skip-bench --timeline-model .gpu/qwen3-14b \
            --timeline-out "$out/timeline-14b.md" --report "$out/timeline-report.md" > "$out/timeline-14b.log" 2>&1
        tail -40 "$out/timeline-14b.md"
    else
        timeout 240 "$bin" bench offline --random-weights .gpu/qwen3-14b --device cuda --shape qwen3-14b \
            --workload-name "nano-vllm n=256 in=100-1024 out=100-1024 seed=0" --jsonl "$jl" 2>&1 | tail -8 | tee "$out/offline-14b.log"
        timeout 150 "$bin" bench offline --random-weights .gpu/qwen3-14b --device cuda --shape qwen3-14b \
            "${long[@]}" --jsonl "$jl" 2>&1 | tail -6 | tee "$out/long-14b.log"
        timeout 150 "$bin" gpu-check --skip-ops --skip-bench --timeline-model .gpu/qwen3-14b \
            --timeline-out "$out/timeline-14b.md" --report "$out/timeline-report.md" > "$out/timeline-14b.log" 2>&1
        tail -3 "$out/timeline-14b.md"
    fi
    echo "part $part done"
    ;;
*)
    echo "usage: $0 build | device 1|2" >&2
    exit 2
    ;;
esac
