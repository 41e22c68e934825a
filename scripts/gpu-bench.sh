#!/usr/bin/env bash
# GPU speed at real scale (issue 11), in two halves:
#
#   scripts/gpu-bench.sh build     (here, with Rust) builds target/release/minisgl-host, runs
#                                  the NVRTC loader test (every kernel family compiles and
#                                  defines the kernels the loader names) and copies the
#                                  model configs (Qwen3-0.6B / 14B / 32B, Llama-3.1-8B) into
#                                  .gpu/ (git-ignored);
#   scripts/gpu-bench.sh device N  (on the GPU machine, no Rust) runs part N and writes its
#                                  logs and JSON lines into $OUT (with GPU_NEED=H200, only
#                                  where nvidia-smi names an H200):
#     part table: issue 11's whole table in one call (prefill attention beside cuDNN with
#             PyTorch's copy and GEMM rates, decode attention, the decode steps at batch 1 /
#             64 / 256, the default workload and long prompts, on both shapes); no checks
#             unless TABLE_CHECKS=1 (part 100's op, model and engine checks first;
#             TABLE_CHECKS=models: the model and engine checks only); TABLE_14B=0 stops
#             after the 0.6B rows, for a call with too little device time for the 14B;
#             TABLE_ATTN=0 leaves out the prefill attention beside cuDNN (attn_bench);
#             the Llama-3.1-8B decode steps at batch 1 / 64 / 256 close it while the call has
#             time (a shape the issue does not list; TABLE_EXTRA=0 leaves them out).
#             Last run: docs/results/gpu-2026-12-07-fold4.md.
#     part unmet: only the two rows still unmet at the last H200 figures (0.6B decode
#             steps at batch 1 / 64 / 256, the 14B default workload), for a call with
#             too little device time for the table; PART_LIMIT (default 330) bounds it.
#     part 5: after a prefill-kernel change: attn_bench (the variants in VARIANTS, default
#             ws, cuDNN beside; NCU=1 adds one Nsight Compute profile of the ws build), the
#             kernel checks, long prompts on both shapes. Last run:
#             docs/results/gpu-2026-12-01-prefill.md.
#     part 13: the decode step through the runner (CUDA graphs and eager, batch 1-256,
#             context ~256; the issue's decode-step row) and the kernel benches, on both
#             shapes. Last run: docs/results/gpu-2026-12-01-decode2.md.
#     part 15: kernel durations of whole decode steps under Nsight Compute (serialised, no
#             launch gaps): Qwen3-0.6B at batch 1, 64, 256 and Qwen3-14B at batch 1, context
#             ~256, then the 0.6B kernel benches and replayed graph step (runner.step);
#             PART15_ONLY_NCU=1 leaves the benches out. scripts/gpu/ncu_steps.py makes the
#             tables. Last run: docs/results/gpu-2026-12-07-fold3.md.
#     part 143: the 0.6B batch-256 decode step under Nsight Compute with each kernel's
#             DRAM and L2 traffic, their throughputs, SM throughput and occupancy.
#     part 144: every cuBLASLt configuration of the decode products, weights from
#             memory, against cublasGemmEx (MINISGL_BENCH_GEMM_SWEEP=1).
#     part 100: every op check, the model and engine checks on the fixtures, the 0.6B
#             kernel benches and graph decode steps (batch 1-256) with gpu-check's floors at
#             the rates it measures at start, a 0.6B decode timeline, the 0.6B default
#             workload, then the 14B decode steps while the call has time.
#             Last run: docs/results/gpu-2026-12-05-h100.md.
#     part 107: shapes and a workload the issue does not list, with the commit's defaults:
#             Llama-3.1-8B and Qwen3-32B default workload (clock and power sampled) and
#             long prompts, then the 0.6B shared-prefix workload under eviction (prefix +
#             extend prefills on churned pages) with the prefill tiles by sequence and in
#             the batch's order (MINISGL_PREFILL_ORDER=0). Qwen3-32B's 65 GB need an H200.
#             Last run: docs/results/gpu-2026-12-05-h200d.md.
#     part 131: one prefill step of 8,192 tokens kernel by kernel (gpu-check's timeline,
#             eager, CUDA events per launch, each kernel against its bytes or FLOPs), on
#             Qwen3-14B then Qwen3-0.6B: prompts of 100-1,024 tokens (the default
#             workload's chunks) and of 4,000-8,000 (the long-prompt workload's), while
#             the call has time (PART_LIMIT s, default 300). Last run:
#             docs/results/gpu-2026-12-06-prefill.md.
#     part 132: after `device table` in the same call, with PART_LIMIT (default 300) the
#             seconds the call has left: the decode timelines of both shapes (batch 1 /
#             64 / 256, context ~256), then part 131's prefill timelines while time is
#             left. Last run: docs/results/gpu-2026-12-06-serial.md.
#     part 140: the fold (MINISGL_FOLD_NORMS, on by default) with each row's factor on the
#             f32 product in the gemv rows and the layer chain: the fold group, the chain
#             group, the fixtures over six draws fold off / on (scripts/diag/fold_seeds.py),
#             the fixtures, the random 0.6B and the engine with the fold on, the 0.6B
#             runner A/B against MINISGL_FOLD_NORMS=0 at batch 1 / 2 / 64 / 256, then while
#             the call has time (PART_LIMIT s, default 540) the same checks with the fold
#             off and the 0.6B default workload fold off / on, alternating. Last run:
#             docs/results/gpu-2026-12-07-fold4.md (5259b6d, when the fold was opt-in).
#     part 141: the per-product norm deferral on a mixed layer (the 0.6B with
#             MINISGL_GEMV_MAX_WEIGHT_MB=10: qkv on the gemv kernels, gate_up on cuBLAS)
#             against the CPU, fold on and off, and the default beside it. Last run:
#             docs/results/gpu-2026-12-07-check.md.
#
#   Earlier rounds' parts (one-off experiments whose builds, switches and settings have
#   since gone) were removed on 2026-12-07. Each results file in docs/results/ names the
#   commit it ran at, and `git show COMMIT:scripts/gpu-bench.sh` gives that round's
#   script with its parts; a5a697c has the last script with all of them.
#
# Device call (tool `run`, kind nvidia-h200), one per part:
#   command: bash scripts/gpu-bench.sh device table
#   carry:   ["target/release/minisgl-host", ".gpu"]
# Then on this machine: python3 scripts/gpu/collect.py DIR... appends the figures to
# docs/results/bench.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu/common.sh

case "${1:-}" in
build)
    gpu_stage qwen3-0.6b qwen3-14b llama-3.1-8b qwen3-32b
    ;;
device)
    part="${2:?a part: table, or a number from the list above}"
    out="${OUT:-$PWD/gpu-out}"
    mkdir -p "$out"
    gpu_device_env
    # GPU_NEED=H200: run nothing (exit 0) unless nvidia-smi names that card. A call that
    # asks the device tool for an H200 may be given an H100, and figures judged on the
    # H200 are not worth that call's time; the start-up is all it then costs.
    if [ -n "${GPU_NEED:-}" ]; then
        name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>&1 | tr '\n' ' ')
        if [[ "$name" != *"$GPU_NEED"* ]]; then
            echo "GPU_NEED=$GPU_NEED: this machine has '$name'; part $part not run"
            exit 0
        fi
    fi
    bin=target/release/minisgl-host
    jl="$out/bench.jsonl"
    { date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv; } 2>&1 | tee "$out/env.log"
    long=(--num-seqs 64 --min-input-len 4000 --max-input-len 8000 --min-output-len 16 --max-output-len 64
          --workload-name "long-prompt n=64 in=4000-8000 out=16-64 seed=0")
    set +e
    # Steps the later parts share; each writes under $out and prints its summary lines.
    # An environment given before a call (MINISGL_FOLD_NORMS=0 fixture_checks ...) applies to it.
    check_ops() {  # extra gpu-check arguments (--skip-bench, --bench-model CONFIG)
        timeout 240 "$bin" gpu-check --skip-models --skip-engine "$@" \
            --report /tmp/gpu-check-ops.md >> "$out/gpu-check-ops.log" 2>&1
        echo "gpu-check ops rc=$?"
        grep -E "checks, |FAIL|linear n=|runner.step" "$out/gpu-check-ops.log" | head -30
    }
    chain_check() {  # DEFINES TAG: gpu-check's chain group with MINISGL_KERNEL_DEFINES=DEFINES
        # (with LC_TRACE=1 its phase trace too)
        MINISGL_KERNEL_DEFINES="$1" timeout 150 "$bin" gpu-check --chain-only --skip-models \
            --skip-engine --skip-bench --report /tmp/gpu-check-chain.md > "$out/gpu-check-chain-$2.log" 2>&1
        echo "gpu-check chain $2 rc=$?"
        grep -E "checks, |FAIL|bench: chain_trace" "$out/gpu-check-chain-$2.log" | head -12
    }
    pack_logs() {  # PART: the tool returns at most eight files: tar the logs, keep bench.jsonl
        (cd "$out" && tar czf "/tmp/part$1-logs.tgz" --exclude=bench.jsonl . &&
            find . -type f ! -name bench.jsonl -delete && mv "/tmp/part$1-logs.tgz" .)
        ls -la "$out"
    }
    fixture_checks() {  # TIMEOUT NAME [GPU_CHECK_ARGS]: the fixture models against HF and
        # the CPU, Qwen3-0.6B random weights, graphs; logged to gpu-check-NAME.log
        local models=()
        for m in tests/fixtures/models/*/; do models+=(--model "$m"); done
        timeout "$1" "$bin" gpu-check --skip-ops --skip-bench "${@:3}" "${models[@]}" \
            --random-model .gpu/qwen3-0.6b --report "/tmp/gpu-check-$2.md" >> "$out/gpu-check-$2.log" 2>&1
        echo "gpu-check $2 rc=$?"
        grep -E "checks, |FAIL" "$out/gpu-check-$2.log" | head -20
    }
    check_models_engine() { fixture_checks "$1" models-engine; }  # TIMEOUT: the engine checks too
    bench_step() {  # SHAPE [LOG_SUFFIX]: the kernel benches and the runner's decode step
        local log="$out/gpu-check-bench-$1${2:-}.log"
        timeout "${BENCH_TIMEOUT:-170}" "$bin" gpu-check --skip-ops --skip-models --skip-engine --bench-model .gpu/$1 \
            --report /tmp/gpu-check-bench.md > "$log" 2>&1
        echo "gpu-check bench $1${2:-} rc=$?"; grep -E "runner.step|rror" "$log" | head -14
    }
    runner_ab() {  # SHAPE SUFFIX BATCHES VAR=VALUE: the runner step alone, its graphs
        # recorded as set and again with VAR=VALUE, timed in seven alternating rounds
        MINISGL_BENCH_RUNNER_ONLY=1 MINISGL_BENCH_NO_EAGER=1 MINISGL_BENCH_AB_ROUNDS=7 \
            MINISGL_BENCH_BATCHES="$3" MINISGL_BENCH_AB="$4" bench_step "$1" "$2"
    }
    fits() { [ "$SECONDS" -lt $((local_limit - $1)) ]; }  # S: S seconds left of local_limit
    prefill_timelines() {  # one prefill step of 8,192 tokens kernel by kernel, on Qwen3-14B
        # then Qwen3-0.6B, prompts of 100-1,024 and of 4,000-8,000 tokens, while they fit
        # local_limit (parts 131 and 132)
        for shape in qwen3-14b qwen3-0.6b; do
            for lens in 100,1024 4000,8000; do
                if ! fits 40; then echo "no time left for the $shape prefill timeline ($lens)"; continue; fi
                tag="$shape-${lens/,/-}"
                timeout $((local_limit - SECONDS - 5)) "$bin" gpu-check --skip-ops --skip-bench \
                    --timeline-model .gpu/$shape --timeline-batches 0 --timeline-prefill 8192 \
                    --timeline-prefill-lens "$lens" --timeline-out "$out/prefill-timeline-$tag.md" \
                    --report /tmp/timeline-report.md > "$out/prefill-timeline-$tag.log" 2>&1
                echo "$shape prefill timeline $lens rc=$?"
                grep -E "^### |^\| [a-z]|^Σ" "$out/prefill-timeline-$tag.md" 2>/dev/null | head -16
            done
        done
    }
    gzip_ops_log() {  # check_ops's log compressed for the archive, where it ran
        if [ -f "$out/gpu-check-ops.log" ]; then gzip -f "$out/gpu-check-ops.log"; fi
    }
    offline_default() {  # SHAPE [LOG_SUFFIX]: bench offline's default workload, figures into $jl
        # 14B random weights take 85-95 s to build before the run starts. Every step's
        # time and shape go to steps-SHAPE.csv; the log has them by class against their floors.
        # OFFLINE_ARGS: extra bench arguments (bench reads no MINISGL_* settings).
        # shellcheck disable=SC2086
        timeout "${OFFLINE_TIMEOUT:-160}" "$bin" bench offline --random-weights .gpu/$1 --device cuda --shape $1 ${OFFLINE_ARGS:-} \
            --workload-name "nano-vllm n=256 in=100-1024 out=100-1024 seed=0" --jsonl "$jl" \
            --steps-csv "$out/steps-$1${2:-}.csv" >> "$out/offline-$1${2:-}.log" 2>&1
        echo "$1 default workload${2:-} rc=$?"; grep -E "ceiling|output tok/s|step class|class  |seqs  |prefill|all steps|outside|fitted" "$out/offline-$1${2:-}.log" | tail -15
    }
    long_if_time() {  # SHAPE UNTIL TIMEOUT LOG: long prompts if the call is under UNTIL s
        if [ "$SECONDS" -lt "$2" ]; then
            timeout "$3" "$bin" bench offline --random-weights .gpu/$1 --device cuda --shape $1 \
                "${long[@]}" --jsonl "$jl" >> "$4" 2>&1
            echo "$1 long prompts rc=$?"; grep -E "ceiling|output tok/s|roofline floor" "$4" | tail -4
        else
            echo "no time left for $1 long prompts (${SECONDS} s)"
        fi
    }
    smi_start() {  # sample the SM clock, power and clock-event reasons every 250 ms into /tmp/smi.csv
        local reasons=clocks_event_reasons.active  # clocks_throttle_reasons before driver 535
        nvidia-smi --query-gpu=$reasons --format=csv > /dev/null 2>&1 || reasons=clocks_throttle_reasons.active
        nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,$reasons \
            --format=csv -lms 250 > /tmp/smi.csv 2>&1 &
        smi_pid=$!
    }
    smi_stop() {  # LABEL: stop sampling; one summary line into $out/smi.log (and here)
        kill "$smi_pid" 2>/dev/null; wait "$smi_pid" 2>/dev/null
        python3 scripts/gpu/smi_summary.py /tmp/smi.csv --label "$1" | tee -a "$out/smi.log"
    }
    ncu_steps() {  # SHAPE BATCHES [CONTEXT [TIMEOUT]]: Nsight Compute durations of whole decode steps
        # NCU_TABLES=0,2 NCU_LABELS=prefill,decode: tables of other steps than the timed
        # decodes (step 0 is the prefill of BATCHES x CONTEXT tokens, in one step). Rates
        # given (MINISGL_GPU_RATES) keep gpu-check's start-up micro-benchmarks out of the
        # profile: only the steps' launches are profiled.
        # NCU_METRICS=M1,M2: more metrics, a column each in the tables (several replay
        # passes a kernel; NCU_CACHE=all then flushes the caches before each pass, so
        # that every pass sees what the first one did).
        local ctx=${3:-256} tag=$1${3:+-ctx$3}${NCU_TAG:-}
        MINISGL_GPU_RATES=${MINISGL_GPU_RATES:-4.28,670} timeout "${4:-240}" ncu --clock-control none \
            --cache-control "${NCU_CACHE:-none}" --metrics "gpu__time_duration.sum${NCU_METRICS:+,$NCU_METRICS}" \
            --csv --page raw "$bin" gpu-check --skip-ops --skip-bench --timeline-model .gpu/$1 \
            --timeline-batches "$2" --timeline-context "$ctx" --timeline-out /tmp/timeline-$tag.md \
            --report /tmp/timeline-report-$tag.md > /tmp/ncu-$tag.csv 2> /tmp/ncu-$tag.err
        echo "ncu $tag rc=$?"
        python3 scripts/gpu/ncu_steps.py /tmp/ncu-$tag.csv ${NCU_TABLES:+--tables "$NCU_TABLES"} \
            ${NCU_METRICS:+--extra "$NCU_METRICS"} \
            --labels "${NCU_LABELS:-$(echo "$2" | sed 's/\([0-9]*\)/b\1/g')}" > "$out/ncu-steps-$tag.md"
        grep -E "^###" -A8 "$out/ncu-steps-$tag.md"
    }
    if [ "$part" = 5 ]; then
        # After a prefill-kernel change: the kernel and its variants against an f32
        # reference and side by side with cuDNN (attn_bench), the engine's kernel checks
        # (both prefill kernels against the CPU backend), then the prefill-bound
        # workload on both shapes. VARIANTS adds attn_bench variants.
        timeout 420 python3 scripts/gpu/attn_bench.py --jsonl "$jl" --timeout 90 --skip "${SKIP:-}" \
            --variants "${VARIANTS:-ws}" 2>&1 | grep -v "Exception ignored\|driver.pyx\|  launch " | tee "$out/attn.log"
        if [ "${NCU:-0}" = 1 ]; then
            # Where the kernel's time goes: one launch of the main case under Nsight Compute
            # (the engine's default ws build; NCU_VARIANT names another attn_bench kernel).
            timeout 150 ncu --clock-control none --target-processes all -k regex:attn_prefill_ws -c 1 \
                --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
                --section WarpStateStats --section Occupancy \
                python3 scripts/gpu/attn_bench.py --only "${NCU_VARIANT:-ws}" --cases "8x2048 fresh" --shapes qwen3-14b --reps 1 \
                > "$out/ncu.txt" 2>&1
            echo "ncu rc=$?"
            grep -E "Throughput|Pipe|Busy|Stall|Issued|Eligible|Duration|Bandwidth|Hit Rate" "$out/ncu.txt" | head -60
        fi
        timeout 120 "$bin" gpu-check --skip-models --skip-engine --report "$out/gpu-check-ops.md" > "$out/gpu-check-ops.log" 2>&1
        echo "gpu-check rc=$?"
        grep -E "checks, |FAIL|prefill attention" "$out/gpu-check-ops.log" | head -30
        timeout 60 "$bin" bench offline --random-weights .gpu/qwen3-0.6b --device cuda --shape qwen3-0.6b \
            "${long[@]}" --jsonl "$jl" 2>&1 | tail -4 | tee "$out/long-0.6b.log"
        timeout 100 "$bin" bench offline --random-weights .gpu/qwen3-14b --device cuda --shape qwen3-14b \
            "${long[@]}" --jsonl "$jl" 2>&1 | tail -4 | tee "$out/long-14b.log"
    elif [ "$part" = 13 ]; then
        for sh in qwen3-0.6b qwen3-14b; do
            timeout 200 "$bin" gpu-check --skip-ops --skip-models --skip-engine --bench-model .gpu/$sh \
                --report /tmp/gpu-check-bench-$sh.md > "$out/gpu-check-bench-$sh.log" 2>&1
            echo "gpu-check bench $sh rc=$?"; grep -E "runner.step|random weights" "$out/gpu-check-bench-$sh.log"
        done
        ls "$out"
    elif [ "$part" = 15 ]; then
        ncu_steps qwen3-0.6b 1,64,256
        ncu_steps qwen3-14b 1
        [ -n "${PART15_ONLY_NCU:-}" ] || bench_step qwen3-0.6b
        ls "$out"
    elif [ "$part" = 143 ]; then
        # What bounds the 0.6B batch-256 step's short kernels (four cuBLAS products at
        # ~3x their floor, the two folded-norm consumers, the attention at 1.08x): the
        # step under Nsight Compute with its DRAM and L2 traffic and throughputs, SM
        # throughput and achieved occupancy per kernel. A product whose L2 throughput is
        # near its peak pays for re-reading its tiles (fewer, taller tiles or multicast
        # would help); one far from every peak pays latency (only fewer launches would).
        local_limit=${PART_LIMIT:-300}
        m=dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum
        m=$m,lts__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed
        m=$m,sm__warps_active.avg.pct_of_peak_sustained_active
        NCU_CACHE=all NCU_TAG=-mem NCU_METRICS=$m ncu_steps qwen3-0.6b 256 256 $((local_limit - 20))
        tail -3 /tmp/ncu-qwen3-0.6b-ctx256-mem.err
        pack_logs 143
    elif [ "$part" = 144 ]; then
        # Every cuBLASLt configuration the library accepts for the decode products (0.6B
        # at 128 and 256 rows, 14B o and down at 256), weights from memory, against
        # cublasGemmEx and the first heuristic candidate (gemm_sweep.rs): whether any
        # cuBLASLt kernel, clustered ones included, beats what linear runs.
        local_limit=${PART_LIMIT:-300}
        MINISGL_BENCH_GEMM_SWEEP=1 BENCH_TIMEOUT=$((local_limit - 20)) bench_step qwen3-0.6b -sweep
        grep "gemm sweep" "$out/gpu-check-bench-qwen3-0.6b-sweep.log" | cut -c1-400
        pack_logs 144
    elif [ "$part" = 100 ]; then
        rm "$out/env.log"  # already printed by the tee above
        # After the Hopper GEMM and the 17-64 row gemv builds were removed: every op check
        # (the gemv paths now end at 16 rows), the models and the engine on the fixtures
        # (graphs included), then gpu-check's benches with the floors it measures at start
        # (the `device rates:` line; until 5a9bc6a they were H200 constants), a timeline
        # of the 0.6B step, the 0.6B default workload, the 14B steps while time is left.
        check_ops --skip-bench
        check_models_engine 200
        MINISGL_BENCH_NO_EAGER=1 MINISGL_BENCH_BATCHES=1,8,16,64,256 bench_step qwen3-0.6b
        grep -E "device rates|decode attention|linear in graphs" "$out/gpu-check-bench-qwen3-0.6b.log" | head -12
        timeout 90 "$bin" gpu-check --skip-ops --skip-bench --timeline-model .gpu/qwen3-0.6b \
            --timeline-out "$out/timeline-qwen3-0.6b.md" --report /tmp/tl-report.md > "$out/timeline.log" 2>&1
        echo "timeline rc=$?"; grep -E "device rates|Σ kernel time" "$out/timeline-qwen3-0.6b.md" | head -4
        OFFLINE_TIMEOUT=70 offline_default qwen3-0.6b
        if [ "$SECONDS" -lt 420 ]; then
            MINISGL_BENCH_RUNNER_ONLY=1 MINISGL_BENCH_NO_EAGER=1 MINISGL_BENCH_BATCHES=1,64,256 \
                BENCH_TIMEOUT=120 bench_step qwen3-14b
        else
            echo "no time left for the 14B decode steps (${SECONDS} s)"
        fi
        gzip_ops_log
        pack_logs 100
    elif [ "$part" = 107 ]; then
        rm "$out/env.log"  # already printed by the tee above
        for shape in llama-3.1-8b qwen3-32b; do
            smi_start
            OFFLINE_TIMEOUT=200 offline_default $shape
            smi_stop "default workload $shape"
        done
        long_if_time llama-3.1-8b 330 80 "$out/long-llama-3.1-8b.log"
        long_if_time qwen3-32b 340 150 "$out/long-qwen3-32b.log"
        # 64 groups x 4,096 shared tokens + 512 prompts of 256-2,048 own tokens in 8,000
        # pages of 16: the radix cache evicts throughout (part 40's workload).
        sp=(--workload shared-prefix --num-seqs 512 --num-groups 64 --prefix-len 4096
            --min-input-len 256 --max-input-len 2048 --min-output-len 16 --max-output-len 64
            --group-order round-robin
            --num-pages 8000 --workload-name "shared-prefix n=512 groups=64 prefix=4096 in=256-2048 out=16-64 pages=8000 seed=0")
        for order in seqs 0; do
            if [ "$SECONDS" -lt 540 ]; then
                MINISGL_PREFILL_ORDER=$order timeout 50 "$bin" bench offline --random-weights .gpu/qwen3-0.6b \
                    --device cuda --shape qwen3-0.6b "${sp[@]}" --jsonl "$jl" >> "$out/shared-prefix-order$order.log" 2>&1
                echo "shared-prefix MINISGL_PREFILL_ORDER=$order rc=$?"
                grep -E "output tok/s|of the ceiling|prefill only|cache hit" "$out/shared-prefix-order$order.log" | tail -4
            else
                echo "no time left for shared-prefix order $order (${SECONDS} s)"
            fi
        done
        pack_logs 107
    elif [ "$part" = 131 ]; then
        rm "$out/env.log"  # already printed by the tee above
        local_limit=${PART_LIMIT:-300}
        prefill_timelines
        pack_logs 131
    elif [ "$part" = 132 ]; then
        # After the table in the same call (PART_LIMIT: what the call has left): the decode
        # timelines of both shapes at batch 1 / 64 / 256, context ~256 (every kernel
        # against its floor), then part 131's prefill timelines while time is left.
        rm "$out/env.log"  # already printed by the tee above
        local_limit=${PART_LIMIT:-300}
        for shape in qwen3-0.6b qwen3-14b; do
            if ! fits 50; then echo "no time left for the $shape decode timeline"; continue; fi
            timeout $((local_limit - SECONDS - 5)) "$bin" gpu-check --skip-ops --skip-bench \
                --timeline-model .gpu/$shape --timeline-batches 1,64,256 --timeline-context 256 \
                --timeline-out "$out/decode-timeline-$shape.md" --report /tmp/timeline-report.md \
                > "$out/decode-timeline-$shape.log" 2>&1
            echo "$shape decode timeline rc=$?"
            grep -E "^### |^Σ" "$out/decode-timeline-$shape.md" 2>/dev/null
        done
        prefill_timelines
        pack_logs 132
    elif [ "$part" = 141 ]; then
        # The per-product norm deferral (f88e4ea) on a mixed layer, which no GPU has run:
        # with MINISGL_GEMV_MAX_WEIGHT_MB=10 the 0.6B's qkv (8 MiB) takes the gemv
        # kernels and its gate_up (12 MiB) cuBLAS, so at its three-row decode steps only
        # qkv's norm goes into a product's prologue. The random 0.6B against the CPU
        # with the fold on and off, then the same at the default limit beside it.
        rm "$out/env.log"  # already printed by the tee above
        for cfg in "mixed-fold1:MINISGL_GEMV_MAX_WEIGHT_MB=10 MINISGL_FOLD_NORMS=1" \
            "mixed-fold0:MINISGL_GEMV_MAX_WEIGHT_MB=10 MINISGL_FOLD_NORMS=0" \
            "default:MINISGL_UNUSED=1"; do
            tag=${cfg%%:*}
            env ${cfg#*:} timeout 120 "$bin" gpu-check --skip-ops --skip-bench --skip-engine \
                --random-model .gpu/qwen3-0.6b --report "/tmp/gpu-check-$tag.md" \
                > "$out/gpu-check-$tag.log" 2>&1
            echo "$tag rc=$?"; grep -E "checks, |FAIL" "$out/gpu-check-$tag.log" | head -5
            grep -E "^(ok|FAIL) +model" "$out/gpu-check-$tag.log" | cut -c1-240
        done
        pack_logs 141
    elif [ "$part" = 140 ]; then
        # The fold with each row's factor applied to the f32 product on every path
        # (after gpu-2026-12-07-fold3.md): gemv_norm_* under a unit norm leave x raw and
        # scale in the epilogue, and the layer chain does the same (its `folded`
        # argument). The fold group (gemv rows, qkv, the chain at one and two rows, each
        # beside the unfolded run); the chain group unfolded (its new argument); the
        # fixtures over six draws with the fold off and on (fold_seeds.py); the fixtures,
        # the random 0.6B and the engine with the fold on; the 0.6B runner A/B of the
        # fold at batch 1 / 2 / 64 / 256; then while the call has time (PART_LIMIT,
        # default 540) the same checks with the fold off and the 0.6B default workload
        # with the fold off and on, alternating. (At 5259b6d the fold was opt-in, and the
        # A/B's other side and the second checks were MINISGL_FOLD_NORMS=1 and the
        # defaults.)
        rm "$out/env.log"  # already printed by the tee above
        local_limit=${PART_LIMIT:-540}
        timeout 200 "$bin" gpu-check --fold-only --skip-models --skip-engine --skip-bench \
            --report /tmp/gpu-check-fold.md > "$out/gpu-check-fold.log" 2>&1
        echo "gpu-check fold rc=$?"
        grep -E "checks, |FAIL" "$out/gpu-check-fold.log" | head -12
        grep -E "gemv rows|folded=" "$out/gpu-check-fold.log" | grep -v prologue | cut -c1-150
        chain_check "" plain
        models=()
        for m in tests/fixtures/models/*/; do models+=(--model "$m"); done
        for f in 0 1; do
            MINISGL_FOLD_NORMS=$f timeout 150 "$bin" gpu-check --skip-ops --skip-bench --skip-engine \
                --model-seeds 6 "${models[@]}" --report /tmp/gpu-check-seeds-fold$f.md \
                > "$out/gpu-check-seeds-fold$f.log" 2>&1
            echo "seeds fold$f rc=$?"; grep -E "checks, |FAIL|prompt draws" "$out/gpu-check-seeds-fold$f.log" | cut -c1-200
        done
        python3 scripts/diag/fold_seeds.py "$out"/gpu-check-seeds-*.log | tee "$out/fold-seeds.md"
        MINISGL_FOLD_NORMS=1 fixture_checks 200 models-engine-fold1
        grep -E "random weights" "$out/gpu-check-models-engine-fold1.log" | cut -c1-260
        # The fold is the default since 6da8261: the A/B's other side turns it off.
        runner_ab qwen3-0.6b -nofold 1,2,64,256 MINISGL_FOLD_NORMS=0
        grep -E "A/B" "$out/gpu-check-bench-qwen3-0.6b-nofold.log"
        if fits 150; then
            MINISGL_FOLD_NORMS=0 fixture_checks 150 models-engine-fold0
            grep -E "random weights" "$out/gpu-check-models-engine-fold0.log" | cut -c1-260
        fi
        for f in 0 1 0 1; do
            if fits 55; then
                MINISGL_FOLD_NORMS=$f OFFLINE_TIMEOUT=50 offline_default qwen3-0.6b "-fold$f"
            else
                echo "no time left for the default workload with MINISGL_FOLD_NORMS=$f"
            fi
        done
        pack_logs 140
    elif [ "$part" = unmet ]; then
        # Only the two rows of issue 11's table unmet at the last H200 figures, for a call
        # with too little device time for the table (about 250 s here): the 0.6B decode
        # steps at batch 1 / 64 / 256, then the 14B default workload (its weights take
        # 85-95 s to build). The step's log also names the decode attention figures.
        rm "$out/env.log"  # already printed by the tee above
        local_limit=${PART_LIMIT:-330}
        MINISGL_BENCH_NO_EAGER=1 MINISGL_BENCH_BATCHES=1,64,256 BENCH_TIMEOUT=100 bench_step qwen3-0.6b
        if fits 120; then
            OFFLINE_TIMEOUT=$((local_limit - SECONDS)) offline_default qwen3-14b
        else
            echo "no time left for the 14B default workload (${SECONDS} s of ${local_limit})"
        fi
        echo "unmet: ${SECONDS} s"
        pack_logs unmet
    elif [ "$part" = table ]; then
        # Issue 11's whole table in one call (the issue asks for one script and one call):
        # prefill attention beside cuDNN's SDPA with PyTorch's copy bandwidth and GEMM rate
        # (attn_bench), the decode attention benches and the 0.6B decode steps at batch 1 /
        # 64 / 256 (gpu-check's kernel benches and runner), both shapes' default workload
        # and long prompts (bench offline, each with its ceilings measured at start), the
        # 14B decode steps. No checks unless TABLE_CHECKS (the header says its values).
        # Each 14B step runs only while the call has time; the log says which did not.
        # (First run on an H200 on 2026-12-05: docs/results/gpu-2026-12-05-h200.md.)
        cat "$out/env.log" > "$out/attn.log"; rm "$out/env.log"
        if [ "${TABLE_CHECKS:-0}" != 0 ]; then
            # The checks part 100 runs, first and bounded, for sessions that may get only
            # one call: every op check (not with TABLE_CHECKS=models, where a call of this
            # commit already ran them), then the models and the engine on the fixtures.
            # The table's own time guards below then drop its last 14B steps if needed.
            if [ "$TABLE_CHECKS" != models ]; then check_ops --skip-bench; fi
            check_models_engine 150
            gzip_ops_log
            echo "checks: ${SECONDS} s"
        fi
        if [ "${TABLE_ATTN:-1}" = 1 ]; then
            timeout 150 python3 scripts/gpu/attn_bench.py --jsonl "$jl" --timeout 80 --skip mma,sm90 \
                --variants ws 2>&1 | grep -v "Exception ignored\|driver.pyx\|  launch \|^  \[" | tee -a "$out/attn.log"
        fi
        MINISGL_BENCH_NO_EAGER=1 MINISGL_BENCH_BATCHES=1,64,256 BENCH_TIMEOUT=150 bench_step qwen3-0.6b
        grep -E "decode attention" "$out/gpu-check-bench-qwen3-0.6b.log" | head -6
        OFFLINE_TIMEOUT=60 offline_default qwen3-0.6b
        long_if_time qwen3-0.6b 400 60 "$out/long-qwen3-0.6b.log"
        if [ "${TABLE_14B:-1}" = 0 ]; then
            # A call with too little device time left for the 14B loads: the 0.6B half.
            echo "the 14B rows left out: TABLE_14B=0"
        else
            if [ "$SECONDS" -lt 380 ]; then
                MINISGL_BENCH_RUNNER_ONLY=1 MINISGL_BENCH_NO_EAGER=1 MINISGL_BENCH_BATCHES=1,64,256 \
                    BENCH_TIMEOUT=100 bench_step qwen3-14b
            else
                echo "no time left for the 14B decode steps (${SECONDS} s)"
            fi
            if [ "$SECONDS" -lt 450 ]; then
                OFFLINE_TIMEOUT=$((560 - SECONDS)) offline_default qwen3-14b
            else
                echo "no time left for the 14B default workload (${SECONDS} s)"
            fi
            long_if_time qwen3-14b 500 $((580 - SECONDS)) "$out/long-qwen3-14b.log"
        fi
        # A shape the issue does not list, so that every round also checks the general case
        # (the issue: "figures will also be checked on workloads and shapes that are not
        # listed"): Llama-3.1-8B's decode steps at batch 1 / 64 / 256, while time is left.
        if [ "${TABLE_EXTRA:-1}" = 1 ] && [ -d .gpu/llama-3.1-8b ] && [ "$SECONDS" -lt 470 ]; then
            MINISGL_BENCH_RUNNER_ONLY=1 MINISGL_BENCH_NO_EAGER=1 MINISGL_BENCH_BATCHES=1,64,256 \
                BENCH_TIMEOUT=$((570 - SECONDS)) bench_step llama-3.1-8b
        else
            echo "Llama-3.1-8B steps left out (TABLE_EXTRA=${TABLE_EXTRA:-1}, ${SECONDS} s)"
        fi
        echo "table: ${SECONDS} s"
        pack_logs table
    else
        echo "no part $part in this script (see the list at its top)" >&2
        exit 2
    fi
    echo "part $part done"
    ;;
*)
    echo "usage: $0 build | device PART (table, or a number from the list at the top)" >&2
    exit 2
    ;;
esac
