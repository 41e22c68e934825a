#!/usr/bin/env bash
# Simulator calibration on the GPU (issue 13), in two halves like gpu-bench.sh:
#
#   scripts/gpu-profile.sh build    (here, with Rust) builds target/release/minisgl-host and the
#                                   plugins, and stages into .gpu/ (git-ignored): the Qwen3-0.6B /
#                                   14B configs, the LPM and SJF plugins and a Mooncake trace slice;
#   Settings of the device half: PROFILES (shapes to measure; "" = none, the committed
#   profiles are used), FID_SCALES (time scales of the fidelity replay), FID_POLICIES
#   (policy sets), FID_PROFILE (the 0.6B profile the simulator uses), FID_N (requests of
#   the slice, default 100; at most the 400 staged), BUDGET_S.
#   scripts/gpu-profile.sh device   (on the GPU machine, no Rust) writes into $OUT:
#     1. profiles of both shapes (`minisgl-host profile --device cuda`): 18 points each,
#        qwen3-0.6b-h200.json and qwen3-14b-h200.json (commit them to docs/results/profiles/);
#     2. if at least FIDELITY_MIN_LEFT seconds of the call's budget remain: the fidelity check,
#        the same Mooncake slice and two policy sets (FCFS, LPM) on the real engine
#        (fid-cuda/) and in the simulator with the profile just measured (fid-sim/).
#   Then here: python3 scripts/fidelity_table.py OUT/fid-cuda OUT/fid-sim
#
# Device call (tool `run`, kind nvidia-h200):
#   command: bash scripts/gpu-profile.sh device
#   carry:   ["target/release/minisgl-host", ".gpu"]
set -euo pipefail
cd "$(dirname "$0")/.."

# The fidelity slice: Mooncake conversation, first N requests, arrivals sped up by
# each of FID_SCALES (0.25: 4x faster, about 10 req/s, no queue; 0.05: 20x, a queue
# forms and the policies differ).
FID_ARGS=(--num-requests "${FID_N:-100}" --max-input-len 8192 --max-output-len 256
          --num-pages 20000 --page-size 16 --seed 0)

case "${1:-}" in
build)
    cargo build --release -p minisgl-host
    scripts/build-plugins.sh >/dev/null
    for s in qwen3-0.6b qwen3-14b; do
        mkdir -p .gpu/$s
        cp "${MODEL_CONFIGS:-examples/model-configs}/$s/config.json" .gpu/$s/config.json
    done
    mkdir -p .gpu/plugins .gpu/workloads
    cp target/wasm32-wasip2/plugin/minisgl_example_{lpm,sjf}.wasm .gpu/plugins/
    head -n 400 "$(d=${WORKLOADS:-../shared/workloads}; [ -d "$d" ] || d=/work/shared/workloads; echo "$d")/mooncake_conversation_trace.jsonl" \
        > .gpu/workloads/mooncake_conversation_400.jsonl
    ex="$(git rev-parse --git-path info/exclude)"; mkdir -p "$(dirname "$ex")"
    grep -qx '/.gpu/' "$ex" 2>/dev/null || echo '/.gpu/' >> "$ex"
    git rev-parse --short HEAD > .gpu/commit
    ls -la target/release/minisgl-host .gpu .gpu/plugins .gpu/workloads
    ;;
device)
    budget="${BUDGET_S:-280}"
    out="${OUT:-$PWD/gpu-out}"
    mkdir -p "$out"
    export PATH="/usr/local/cuda/bin:$PATH"
    export LD_LIBRARY_PATH="/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
    export MINISGL_KERNEL_CACHE="${MINISGL_KERNEL_CACHE:-/tmp/minisgl-kernels}"
    bin=target/release/minisgl-host
    commit="$(cat .gpu/commit 2>/dev/null || echo unknown)"
    gpu="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || echo cuda)"
    note="measured by scripts/gpu-profile.sh at commit $commit on $(date -u +%Y-%m-%d)"
    { date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > "$out/env.log" 2>&1
    set +e
    # PROFILES picks the shapes to measure (default both); a shape left out
    # uses its committed profile for the fidelity check.
    for s in ${PROFILES-qwen3-0.6b qwen3-14b}; do
        t=$([ "$s" = qwen3-14b ] && echo 90 || echo 60)
        timeout "$t" "$bin" profile --device cuda --random-weights .gpu/$s --name "$s" \
            --device-label "$gpu" --note "$note" --out "$out/$s-h200.json" 2>&1 | tee "$out/profile-$s.log"
        echo "profile $s rc=${PIPESTATUS[0]} at ${SECONDS}s"
    done
    prof06="${FID_PROFILE:-$out/qwen3-0.6b-h200.json}"
    [ -f "$prof06" ] || prof06=docs/results/profiles/qwen3-0.6b-h200.json
    if [ $((budget - SECONDS)) -ge "${FIDELITY_MIN_LEFT:-120}" ] && [ -f "$prof06" ]; then
        # FID_POLICIES: fcfs (native) and example plugins staged in .gpu/plugins.
        pol=()
        for p in ${FID_POLICIES:-fcfs lpm}; do
            if [ "$p" = fcfs ]; then pol+=(--policy fcfs=native)
            else pol+=(--policy "$p=.gpu/plugins/minisgl_example_$p.wasm"); fi
        done
        tr=(--trace .gpu/workloads/mooncake_conversation_400.jsonl --random-weights .gpu/qwen3-0.6b)
        for sc in ${FID_SCALES:-0.25}; do
            # With --profile the real replay also prices each of its steps with the
            # model (fid-cuda-$sc/steps.md: the model's error per step class).
            timeout $((budget - SECONDS - 20)) "$bin" compare --backend cuda "${tr[@]}" "${FID_ARGS[@]}" \
                --time-scale "$sc" "${pol[@]}" --profile "$prof06" --out "$out/fid-cuda-$sc" > "$out/fid-cuda-$sc.log" 2>&1
            echo "fidelity cuda (time scale $sc) rc=$? at ${SECONDS}s"
            timeout 60 "$bin" compare --backend sim --profile "$prof06" "${tr[@]}" "${FID_ARGS[@]}" \
                --time-scale "$sc" "${pol[@]}" --out "$out/fid-sim-$sc" > "$out/fid-sim-$sc.log" 2>&1
            echo "fidelity sim (time scale $sc) rc=$? at ${SECONDS}s"
            tail -n 12 "$out/fid-cuda-$sc/results.md" "$out/fid-sim-$sc/results.md" 2>/dev/null
            cat "$out/fid-cuda-$sc/steps.md" 2>/dev/null
        done
        # The device tool returns a limited number of files: one archive.
        (cd "$out" && tar -czf fidelity.tar.gz fid-cuda-* fid-sim-* && rm -rf fid-cuda-* fid-sim-*)
    else
        echo "fidelity check skipped: $((budget - SECONDS)) s left of $budget"
    fi
    echo "done in ${SECONDS}s"
    ;;
*)
    echo "usage: $0 build | device" >&2
    exit 2
    ;;
esac
