#!/usr/bin/env bash
# GPU speed at real scale (issue 11), in two halves:
#
#   scripts/gpu-bench.sh build     (here, with Rust) builds target/release/minisgl-host, runs
#                                  the NVRTC loader test (every kernel family compiles and
#                                  defines the kernels the loader names) and copies the
#                                  Qwen3-0.6B / 14B configs into .gpu/ (git-ignored);
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
#     part 1: prefill attention (our kernels vs cuDNN/flash SDPA, copy and GEMM ceilings),
#             the kernel checks of both prefill kernels, decode-step and attention benches,
#             Qwen3-0.6B offline (default workload and long prompts), 0.6B decode timeline;
#     part 2: Qwen3-14B offline (default workload and long prompts), 14B decode timeline;
#     part 3: after a decode-kernel change: kernel checks, offline A/B of the two
#             decode kernels (MINISGL_DECODE_KERNEL=simt|mma) on both shapes;
#     part 4: long prompts on both shapes and the 14B decode timeline;
#     part 5: after a prefill-kernel change: attn_bench (variants in VARIANTS, cuDNN beside;
#             NCU=1 adds one Nsight Compute profile), the kernel checks, long prompts;
#     part 6: a round's closing figures: attn_bench with the ws variant and cuDNN, kernel
#             and model checks, default and long-prompt workloads on both shapes;
#     part 7: the opt-in ws prefill kernel in the engine: its checks, the 14B long-prompt
#             run that did not finish with it (three times, bounded; the kernel's
#             watchdog reports a stuck wait), memcheck on a 2-layer 14B, 0.6B, and v4;
#     part 8: after the stream-K decode schedule: checks, models with the tensor-core
#             decode forced, the 14B timeline, the default workload with each schedule,
#             long prompts on both shapes;
#     part 9: the decode schedules side by side: checks, benches, 14B offline, timeline.
#     part 11: this round's closing figures (the second tensor-core decode the default,
#             group 2 included): checks, benches, models, both shapes' default workload
#             with and without MINISGL_DECODE_MIN_SPLITS=2, long prompts, both timelines.
#     part 12: the decode schedules in the engine (split grid against stream-K, which
#             shares the split grid's segment since part 11): models against the CPU on
#             stream-K, both shapes' default workload with each, the 14B timeline on it.
#     part 13: the decode step through the runner (CUDA graphs and eager, batch 1-256,
#             context ~256; the issue's decode-step row) and the kernel benches, on both shapes.
#     part 14: the wave rule for tensor-core decode splits (MINISGL_DECODE_SPLITS=waves,
#             opt-in until measured, against fill, the default): checks and benches, the default workload on
#             both shapes with each rule.
#     part 15: kernel durations of whole decode steps under Nsight Compute (serialised, no
#             launch gaps): Qwen3-0.6B at batch 1, 64, 256 and Qwen3-14B at batch 1, context
#             ~256, beside the replayed graph step (runner.step) of the 0.6B; with PART15_ONLY_NCU=1
#             the runner bench is left out. scripts/gpu/ncu_steps.py makes the tables.
#     part 16: after the gemv rewrite (loads in flight, split reductions, SiLU and
#             residual + norm epilogues): kernel checks and benches with the 0.6B runner
#             step, the model checks, Nsight Compute step tables of both shapes (0.6B
#             batch 1 and 64, 14B batch 1) and the 14B runner step.
#     part 17: programmatic dependent launch (MINISGL_PDL=1) and the merged split combine:
#             kernel and model checks with PDL on, the runner step of the 0.6B with PDL
#             off and on and of the 14B with it on, the default workload on both shapes.
#     part 18: this round's closing figures with the defaults of the commit: model checks,
#             the 0.6B runner step, the default workload and long prompts on both shapes.
#     part 19: the round's final build, checked: kernel and model checks, the runner step
#             of the 0.6B, then of the 14B (the last, bounded by what the call has left).
#     part 20: the norm in the next product's prologue (gemv_norm_*, gemv_residual):
#             kernel checks, model checks, the 0.6B benches (fused products, cuBLASLt
#             candidates, runner step) with it on, the 0.6B batch-1 step table under
#             Nsight Compute, then the runner step with it off (MINISGL_NORM_PROLOGUE=0)
#             when the call has time left.
#     part 21: kernel and model checks, the 0.6B benches (cuBLASLt candidates timed
#             from graphs), Nsight Compute step tables of the 0.6B at batch 1, 64 and
#             256, the runner step with MINISGL_DECODE_ROPE=0, the 14B benches. It ran
#             at 5a28f36 to measure a decode attention that rotated q and wrote the new K/V
#             itself (attn_decode_mma_rope_hd*), which lost at batch 64 and more and
#             was reverted; the variable now changes nothing.
#     part 22: the round's closing figures: kernel and model checks, one Nsight Compute
#             profile (--set full) of the tensor-core decode at Qwen3-0.6B batch 256 x
#             context 256 (the batch-256 step's largest kernel), the default workload
#             and long prompts on both shapes (bytes-only and roofline ceilings).
#     part 23: after the bank-conflict-free merge of the tensor-core decode: kernel and
#             model checks, the 0.6B benches and runner step with the fill rule (the
#             default) and the wave rule (MINISGL_DECODE_SPLITS=waves; part 14 never
#             ran), Nsight Compute step tables at batch 64 and 256, the 0.6B default
#             workload, then the 14B benches when the call has time left.
#     part 25: which row counts the skinny kernel should take (MINISGL_GEMV_ROWS): the
#             0.6B benches (gemv against cuBLAS timed from graph replays) and runner
#             step at the default (2) and at 8 rows, the model checks at 8 rows.
#     part 26: weights past 32 MiB through cuBLAS at every row count (GEMV_MAX_WEIGHT_BYTES):
#             the kernel checks, then the 14B benches and runner step.
#     part 27: prefill attention with K/V through the copy engine: attn_bench with the
#             variants in VARIANTS (cuDNN beside), an Nsight Compute source-level profile
#             of each variant in PROF, kernel checks, the 0.6B long-prompt workload
#             (SKIP_ENGINE=1 leaves out the last two).
#     part 28: a round's closing figures, each step while the call has time: attn_bench
#             (VARIANTS beside the default and cuDNN), kernel and model checks, long
#             prompts and the default workload on both shapes.
#     part 31: the tensor-core gemv build: kernel and model checks, the 0.6B benches and
#             runner step against MINISGL_GEMV_ROWS=2 (cuBLAS past two rows) in one
#             process, the default workload (SKIP_OFFLINE=1 leaves it out).
#     part 34: the decode combine merged into the tensor-core split grid and splits of 64+
#             rows: kernel and model checks, runner steps A/B in one process
#             (MINISGL_DECODE_FUSED_COMBINE=0, MINISGL_DECODE_MIN_PART=64), the 14B
#             default workload with bench offline's time by step class. (The merged
#             combine lost again, as in ba8641e, and was taken out.)
#     (part 35, a persistent decode grid and 64-row splits A/B, ran at d49d804; the
#     persistent grid lost 1-7% and was removed with the part, 64-row splits stayed:
#     docs/results/gpu-2026-12-02-steps.md.)
#     part 36: a round's closing figures with the commit's defaults: kernel and model
#             checks, both shapes' runner step, the 14B default workload (steps by class)
#             and long prompts.
#     part 37: splits of 256+ rows where the tensor-core grid is full unsplit: kernel and
#             model checks, both shapes' runner step against MINISGL_DECODE_FULL_PART=64.
#     part 39: prefill attention builds: attn_bench with VARIANTS beside cuDNN (NCU=1 adds
#             the memory sections of one launch), kernel and model checks, long prompts on
#             both shapes (each while the call has time).
#     part 40: a prefill build in the engine: bench offline's default workload on both
#             shapes (steps by class), and a shared-prefix workload whose KV pool is too
#             small for it (eviction scatters the pages, so prefill reads random pages)
#             with the default kernels and again under MINISGL_KERNEL_DEFINES=$AB_DEFINES
#             (default P_KV_WARPS=1).
#     part 42: Nsight Compute durations of whole decode steps at context ~1024 (0.6B and
#             14B at batch 64 and 256), then the 0.6B runner step at that context.
#     part 43: decode splits by waves at context ~1024 (waves: below two waves of
#             unsplit blocks, the default limit; waves4: below four): the 0.6B runner
#             step A/B and the default workload with each rule (14B: waves).
#     part 44: the bf16 GEMM rate held for seconds (scripts/gpu/sustained.py), prefill
#             steps of 14 x 585 tokens kernel by kernel (Nsight Compute, both shapes), the
#             14B runner step at context ~600, SM clock and power sampled throughout.
#     part 45: both shapes' default workload and long prompts with the ceilings at the
#             GEMM rate held under the power limit, clock and power sampled per run.
#     part 46: closing figures of that round: model checks, the 0.6B runner step at batch
#             1 / 64 / 256, a second 14B default workload, the device's power limit.
#     part 47: the cuBLASLt survey of both shapes' decode products at full clock and
#             held at the power limit (MINISGL_BENCH_GEMM_HOLD).
#     part 49: qkv_rope_store with the head count a template argument: kernel checks,
#             the 0.6B prefill and decode steps (batch 1 / 14 / 64 / 256) under Nsight
#             Compute A/B, long prompts, model checks, the 0.6B default workload, the 14B
#             prefill step if time.
#     part 50: add_rmsnorm blocks sized by the row's width (MINISGL_NORM_THREADS=0, the
#             new default) against the old 256: kernel checks (every count against the
#             CPU), the 0.6B prefill step A/B and decode steps (batch 1 / 64 / 256) under
#             Nsight Compute, the 0.6B runner step A/B in one process each, long prompts,
#             model checks.
#     part 51: shapes the issue does not list (Llama-3.1-8B: no q/k norm, llama3 RoPE,
#             vocab 128k; Qwen3-32B: 64 layers, GQA group 8): the default workload and
#             long prompts on each with time by step class and clock and power sampled,
#             the 0.6B default workload, then both new shapes' runner steps at batch
#             1 / 64 / 256 while the call has time.
#     part 52: the 0.6B default workload with MINISGL_NORM_THREADS=256 and the default
#             rule in one call (part 51's decode class ran 2% slower than the last
#             round's), the decode steps' norm at 128 threads under Nsight Compute, the
#             14B default workload, the Qwen3-32B runner step (graphs only: two copies of
#             its weights do not fit).
#     part 53: Llama-3.1-8B's decode steps (batch 1 / 64 / 256, context ~256) under
#             Nsight Compute (its batch-256 step ran at 1.37x a serial bound of its
#             products' FLOPs and KV bytes, against 1.15x at 14B), then the 14B long
#             prompts while the call has time.
#     part 54: the norm left to the next product only where every product that would
#             take it runs on the gemv kernels (Llama-3.1-8B's qkv and gate_up run on
#             cuBLAS): kernel and model checks, Llama-3.1-8B's batch-1 step under Nsight
#             Compute and its runner step at batch 1 / 64.
#     part 55: the residual + norm gemv epilogue removed (the add in the gemv's epilogue,
#             then a separate norm): kernel and model checks, the batch-1 decode steps of
#             Qwen3-0.6B and Llama-3.1-8B under Nsight Compute (against parts 50 and 54).
#     part 56: the gemv's weight limit at Llama-3.1-8B's batch-1 step, whose o product
#             (33.5 MB, exactly the 32 MiB limit) streams through the gemv at 2.6 TB/s
#             where cuBLAS's 50 MB qkv reaches 3.2: the runner step A/B in one process
#             (MINISGL_BENCH_AB=MINISGL_GEMV_MAX_WEIGHT_MB=31) and both step tables
#             under Nsight Compute. Its runner A/B ran inside part 57's call (78144dc):
#             cuBLAS for o 3.6% slower at batch 1 in one round, within the first-run
#             effect part 61 found, equal at 2 and 4; the limit stays 32 MiB.
#     part 60: logits rows split over several blocks at small batches (row_partials, then
#             row_select merges; MINISGL_SAMPLE_SPLIT=0 reads whole rows): kernel and
#             model checks (sampling against the CPU both ways); the split A/B in both
#             orders (one round each: part 59's null A/B put the second-measured runner
#             7-8% behind at batch 1 and 8 with identical settings) at batch 1-128; the
#             0.6B batch-1 / 64 steps under Nsight Compute both ways; both default
#             workloads.
#     part 61: the runner A/B in three rounds of alternating order (medians): a null
#             A/B (is the 7-8% "second runner" gap of part 59's null A/B an order effect or the runner
#             itself?) and the logits-row split A/B at batch 1-128, 0.6B. Answer: the
#             order. The first timed run of a batch is the fast one (1.028 against
#             1.094-1.103 ms at 0.6B batch 1), whichever runner it is.
#     part 62: the issue's decode-step rows measured the robust way (a null A/B: three
#             rounds in alternating order, medians), 0.6B and 14B at batch 1 / 64 / 256.
#     part 63: where the tensor-core decode loses at short contexts: Nsight Compute's full
#             set and per-SASS-line stall samples of one attn_decode_mma_hd128 launch in
#             a warm Qwen3-0.6B decode step at batch 256 x 256 (the step's 59%, at 84%
#             of copy bandwidth).
#     part 64: a layer's products at one decode row in one launch (layer_chain, each
#             block streaming its share of o, gate_up, down and the next qkv through a
#             ring of bulk copies, grid barriers between them; MINISGL_LAYER_CHAIN=0
#             runs the separate products): kernel and model checks (the chain against
#             the CPU's separate ops, and a one-sequence model run against the CPU), the
#             runner A/B at 0.6B (batch 1, and batch 8 as a control). Its first call also
#             timed the decode attention's page table in shared memory (DM_PT, 20774a5,
#             reverted after): no change in any kernel bench or runner step.
#     part 65: the chain A/B at Qwen3-0.6B, Llama-3.1-8B and Qwen3-14B batch 1 (batch 8 /
#             2 a control; PART65_MODELS=1 runs the model checks first); with
#             PART65_OFFLINE=1 both default workloads too. At b3c46f4: 14B 0.952x,
#             Llama-3.1-8B 0.969x, 0.6B 0.998x (docs/results/gpu-2026-12-04-chain.md).
#     part 66: where the chain's time goes: the batch-1 step kernel by kernel with and
#             without it, and one chain launch under Nsight Compute (full set, per-line
#             stall samples).
#     (part 67, the first attention-chain builds' checks and A/Bs, ran at 20380e4 and
#     a7aaee5; part 70 repeats it for the kept build, without Qwen3-14B's A/B of the
#     attention, which 14B's group of 5 no longer takes.)
#     (parts 72-76, the chain's latency round of 2026-12-04 with its experiment defines,
#     ran at 467a864, 97dfd9e, e6133ef, 4df2585 and 30a5f17; the kept changes are the
#     code, the defines are gone: docs/results/gpu-2026-12-04-latency.md.)
#     part 77: the layer chain as landed: kernel checks, its phase trace (LC_TRACE=1,
#             gpu-check --chain-only), batch-1 A/Bs against the separate attention and of
#             the stream's window (0.6B, 14B), the 0.6B step at batch 1 / 64 / 256, model
#             checks.
#             PART77_QUICK=1: only the chain's kernel checks, no 14B step.
#     (parts 78-82 ran this round's experiments at 41f215c-811932f: the window as the
#             define LC_WINDOW, LC_CONSUME4, LC_MMA; the defines are gone, and
#             docs/results/gpu-2026-12-04-consume.md has what each found. Part 86,
#             LC_NOINLINE, ran at eafe883 and went with its define.)
#     (part 83, the window compiled in for every shape, ran at 40f17bf; part 77 has its
#             A/Bs now.)
#     part 87: several layers a launch (layer_chain_span_g2): chain checks with the span
#             group, model checks, 0.6B batch-1 A/Bs against a launch a layer (contexts
#             256, 2,048), a window of 1 and 64-row attention splits, Llama-3.1-8B against
#             the separate attention, the 0.6B steps at batch 1 / 64 / 256, the 0.6B
#             default workload. PART87_TRACE=1: the trace.
#     part 88: gather_rows without a copy at decode: model and kernel checks, the 0.6B
#             steps at batch 1 / 64 / 256.
#     part 91: qkv_rope_store folded into the split-grid tensor-core decode: kernel and
#             model checks, the 0.6B runner A/B at batch 8 / 64 / 256 against
#             MINISGL_DECODE_ROPE=0, both under Nsight Compute; PART91_14B=1: the 14B A/B
#             and default workload instead of Nsight Compute.
#     part 93: the folded decode by its wave rule (the default) against never: kernel and
#             model checks, runner A/Bs at 0.6B batch 8-256 and Llama-3.1-8B batch 8 / 32,
#             the 0.6B default workload.
#     part 94: the 0.6B default workload, folded decode by its rule against never, three
#             alternating runs each.
#     part 95: the fold where the decode grid is at most one wave (the default) against
#             never: kernel and model checks, the 0.6B A/B at batch 1-256.
#     part 96: the skinny kernel at 5-8 rows against cuBLAS (MINISGL_GEMV_ROWS=8), with
#             and without the norm prologue.
#     part 101: the default workload with the SM clock and power sampled, Qwen3-14B then
#             Llama-3.1-8B. (Written 2026-12-05; not yet run: the device gave no machine
#             for it that session. Checked only against the stand-ins.)
#     (part 102, the lean tensor-core decode against the build before it (DM_LEAN=0), ran
#             at 4e5983d; the lean build was kept and the define removed, and so is the
#             part: docs/results/gpu-2026-12-05-lean.md.)
#     part 103: the split-grid decode's blocks longest context first (MINISGL_DECODE_ORDER):
#             op checks both orders, model checks, the decode kernels' table, both shapes'
#             default workload with and without the order (14B with the clock sampled).
#     part 104: both shapes' default workload with the commit's defaults, clock sampled
#             (a short call).
#     part 105: the Hopper prefill tiles longest span first across a step's sequences
#             (MINISGL_PREFILL_ORDER): op checks, 0.6B long prompts A/B/A, on an H200 the
#             14B default workload.
#     part 106: the Hopper prefill tiles by sequence, longest first (MINISGL_PREFILL_ORDER=
#             seqs) against the batch's order and every tile by its span (tiles): the
#             kernel under each on workload-shaped steps, op checks, 0.6B long prompts
#             under each, on an H200 the 14B default workload.
#     part 107: shapes and a workload the issue does not list, with the commit's
#             defaults: Llama-3.1-8B and Qwen3-32B default workload and long prompts, and
#             the shared-prefix workload under eviction (prefix + extend prefills on
#             churned pages, 0.6B) with the prefill tiles by sequence and in the batch's
#             order (MINISGL_PREFILL_ORDER=0). Qwen3-32B's 65 GB need an H200.
#     part 109: why Llama-3.1-8B's small decode steps run at 73-75% of their floor where
#             Qwen3's run at ~80% (part 107, 2026-12-05): its eager decode step kernel by
#             kernel against each kernel's floor at batch 1 / 4 / 16 / 64 and context
#             1,024 (gpu-check's timeline), its graph steps at batch 1-64 at that
#             context, then Qwen3-14B's timeline beside it while the call has time.
#     part 110: the skinny kernel's weight limit (32 MiB, set from graph replays that
#             found the weight in L2) with cold weights. Part 109 (H100) timed
#             Llama-3.1-8B's o product (exactly 32 MiB) at 1.84x its floor through the
#             kernel at 4 rows, but cuBLAS at 16 rows took the same ~20 us, so a gain is
#             not expected there. Every product near the limit through each path (copies
#             past L2), plain and added into the residual, at 1-16 rows; then
#             Llama-3.1-8B's graph step at batch 2-4, context 1,024, A/B with the limit at
#             16 MiB (MINISGL_GEMV_MAX_WEIGHT_MB=16). Not yet run.
#     part 111: the products-only chain at 2-4 decode rows (layer_chain_r2..r4,
#             MINISGL_CHAIN_ROWS=4; opt-in until this part): gpu-check's chain group (its
#             rows checks against the CPU), the fixture models with it on, then the
#             graph-step A/B against the separate products at batch 2-4, context 1,024:
#             Qwen3-0.6B, Llama-3.1-8B, Qwen3-14B (3-4 rows with 2-3 ring stages); and
#             every op check first, with two-row products of 2,560+ outputs through the
#             tensor-core gemv (MINISGL_GEMV_TC_TWO, default on), A/B'd against the scalar
#             build at batch 2 (0.6B, then Llama-3.1-8B while the call has time). Call 1
#             (862c321) ran the rows checks, the 0.6B A/B and part 110's gemv bench; call 2
#             (72e3fb1) all of it: two rows won on every shape, four lost on every shape,
#             so the r3 / r4 builds went and two rows became the default (part 112).
#     part 113: part 107's 0.6B shared-prefix workload with its groups drawn by
#             popularity (bench's --group-order popular, the default since 2026-12-06),
#             radix cache against none (--compare-cache): the prefix + extend path with
#             cache hits, which part 107's round-robin order never had.
#     part 116: the chain's row sums two to a reduction and stored where one warp holds
#             the whole row (MINISGL_KERNEL_DEFINES=LC_REDUCE_PAIRS=1, opt-in): chain checks
#             and fixture models with it, graph-step A/Bs at batch 1 and 2 against the
#             default on 0.6B (contexts 256, 1,024), the chain's phase trace at one and two
#             sequences, the 0.6B eager step kernel by kernel at batch 1, 2, 4, then
#             Llama-3.1-8B's A/B, each while the call has time (PART_LIMIT s, default 480).
#     part 118: a round's short closing figures (for a call with little device time
#             left): the 0.6B graph steps at batch 1, 2, 64 and 256 (context ~256), then
#             the 0.6B default workload while the call has time (PART_LIMIT s, default 240).
#     part 119: the chain's attention through K/V tiles staged in the idle weight ring
#             (LC_ATT_STAGED, the default since this part; =0 builds the register loads it
#             replaced): the chain checks (long contexts among them), the fixture models,
#             then graph-step A/Bs at batch 1 and 2: Qwen3-0.6B at contexts 256, 2,048,
#             8,192 and 16,384 against LC_ATT_STAGED=0, the staged chain against the
#             separate attention (MINISGL_CHAIN_ATTN=0) at 8,192 and 16,384, Llama-3.1-8B
#             at 8,192, each while the call has time (PART_LIMIT s, default 500). Run once
#             (2026-12-06, 1c5f6ef, an H100): that build, a block barrier at every tile, was
#             no faster (0.968-1.022x) and was removed. The barrier-free build of part 125
#             took the define back as the default, so this part now times it against
#             LC_ATT_STAGED=0.
#     part 120: where the chain's attention spends a long context: the phase trace at
#             contexts 256, 2,048 and 16,384 (K/V caches rotated with the layer copies, so
#             they stream from DRAM) for the staged build and LC_ATT_STAGED=0, then the
#             decode kernels' table (MINISGL_BENCH_DECODE_ONLY=1) with one and two
#             sequences of 16,384 rows among its batches.
#     part 121: the layer's weight stream let go before its attention is done
#             (MINISGL_CHAIN_HOLD=1048576: every chunk, past a launch's first layer) against
#             the default (held until the attention is done): graph-step A/Bs at batch 1
#             and 2, Qwen3-0.6B at contexts 256, 2,048, 8,192 and 16,384, then
#             Llama-3.1-8B at 8,192, each while the call has time (PART_LIMIT s, default
#             400). Run once (2026-12-06, 700ceab): no gain; the knob was removed after
#             part 125 (the staged attention needs the ring empty), so it now changes
#             nothing.
#     part 122: the attention's per-step values (context length, page start, position,
#             new slot, the first rows' cache slots) loaded at a span's first layer and
#             reused by the later ones (LC_STEP_REUSE, the default since this part; =0
#             loads them at every layer): the chain checks and fixture models, then
#             graph-step A/Bs at batch 1 and 2 against LC_STEP_REUSE=0, Qwen3-0.6B at
#             contexts 256, 1,024 and 4,096, Llama-3.1-8B at 256, each while the call has
#             time (PART_LIMIT s, default 400). Run twice (2026-12-06, 739311a and 1d8a84f,
#             an H100): both builds were slower, so they were removed and the define now
#             changes nothing.
#     part 123: the split-grid tensor-core decode's blocks ordered kv heads fastest
#             (MINISGL_KERNEL_DEFINES=DECODE_HEADS_FIRST=1, opt-in), so the blocks running
#             together read whole cache slots: the decode kernels' table both ways (one
#             and two sequences of 16,384 rows among its batches), then graph-step A/Bs
#             where that kernel runs, after the fixture models with it (the random
#             Qwen3-0.6B's three sequences take it): Qwen3-0.6B at batch 4 and 8 (contexts
#             4,096 and 256) and Qwen3-14B at batch 1 and 4 (context 8,192), while the call
#             has time (PART_LIMIT s, default 400). Run once (2026-12-06, 67b82d5, an H100):
#             no change (the build was removed; the define now changes nothing).
#     part 124: Nsight Compute's full set and stall samples of one batch-1 span launch
#             (layer_chain_span_g2: every layer of a Qwen3-0.6B step) at contexts 16,384
#             and 256: what holds the chain's attention at ~81% of copy in its rows loop.
#     part 125: the staged K/V tiles again (MINISGL_KERNEL_DEFINES=LC_ATT_STAGED=1,
#             opt-in), without part 119's block barrier at every tile (each thread reads
#             only the pieces it copied): the chain checks with it, then graph-step A/Bs at
#             batch 1 and 2, Qwen3-0.6B at contexts 16,384, 2,048 and 256, while the call
#             has time (PART_LIMIT s, default 240). Run once (2026-12-06, 36d4289): faster
#             at every context (1.008-1.083x), so LC_ATT_STAGED=1 became the default and
#             this part's A/B now times the default against itself.
#     part 126: what the staged default (part 125) was not run on: the fixture models
#             and the engine (graphs mixing one- and two-row steps), then graph-step A/Bs
#             against the register loads (LC_ATT_STAGED=0) at batch 1 and 2: Qwen3-0.6B at
#             contexts 16,384 and 4,096, Llama-3.1-8B (its group-4 chain) at 8,192, while
#             the call has time (PART_LIMIT s, default 400).
#     part 127: steps that mix prefill chunks with decodes (a Sarathi-style scheduler
#             builds every step so): every op check (the attention's mixed cases both
#             ways, on each prefill kernel, with the decode split 3+ ways), the mixed
#             steps' attention bench (MINISGL_BENCH_MIXED_ONLY: one-token rows on the
#             decode kernel, every row on the prefill kernel, and the two kinds as steps
#             of their own), then the first 100 requests of the Mooncake conversation
#             trace (time scale 0.25, prompts capped at 32,768, outputs at 256) replayed
#             on the engine (compare --backend cuda, Qwen3-0.6B) under FCFS and the
#             Sarathi example plugin, with MINISGL_MIXED_SPLIT on and off, then the
#             fixture models, while the call has time (PART_LIMIT s, default 480).
#             Needs the build's .gpu/plugins and .gpu/workloads.
#     part 128: part 127's replay where the split matters more (groups of 5, a chat
#             trace): the first 400 requests of the Azure conversation trace (time scale
#             0.25, about 22 requests/s; outputs capped at 512) on Qwen3-14B under the
#             Sarathi plugin with a 2,048-token step budget, MINISGL_MIXED_SPLIT on (and
#             FCFS beside it) then off, while the call has time (PART_LIMIT s, default
#             420). Needs the build's .gpu/plugins and .gpu/workloads.
#     part 129: part 128 on Llama-3.1-8B (groups of 4): the first 600 requests at time scale
#             0.15 (about 37 requests/s), while the call has time (PART_LIMIT s, default
#             400).
#     part 130: the default workload under the Sarathi plugin (bench offline --scheduler)
#             beside the built-in FCFS, Qwen3-14B then Qwen3-0.6B, while the call has
#             time (PART_LIMIT s, default 300): with the mixed split, do decodes riding
#             in the prefill steps beat prefilling first?
#     part 131: one prefill step of 8,192 tokens kernel by kernel (gpu-check's timeline,
#             eager, CUDA events per launch, each kernel against its bytes or FLOPs), on
#             Qwen3-14B then Qwen3-0.6B: prompts of 100-1,024 tokens (the default
#             workload's chunks) and of 4,000-8,000 (the long-prompt workload's), while
#             the call has time (PART_LIMIT s, default 300). Where the 14B default
#             workload's prefill steps (76.7% of their floor) lose their time.
#     part 133: the norms before qkv and gate_up folded into their weights
#             (MINISGL_FOLD_NORMS=1, applied by the kernels after the cuBLAS products): op,
#             model and engine checks with it on, the 0.6B runner A/B at batch 8-256, the
#             0.6B default workload both ways. (Ran 2026-12-07 at 4487246, an H100:
#             gpu-2026-12-07-fold.md.)
#     part 136: after the sampler stopped copying unprocessed logits, the fold's qkv bias
#             moved into the rope kernel and bf16 logits (MINISGL_LOGITS_BF16=1): every op
#             check, the fixtures and the engine, the fixture models with the fold on and
#             with bf16 logits; the 0.6B runner A/Bs of the copy, the fold and bf16 logits,
#             its default workload with each; the fold's 14B runner A/B while there is time.
#             (Ran 2026-12-07 at 3b13347, an H100: gpu-2026-12-07-sample.md; the 14B A/B
#             ran out of memory, two 14B runners need an H200.)
#     part 137: bf16 logits' checks (fixtures, engine), the 0.6B runner A/B at batch 1 / 8 /
#             128 / 256 and three alternating default-workload pairs; /tmp/bf16-ok when the
#             checks passed. (Ran 2026-12-07 at 3b13347, an H100: gpu-2026-12-07-sample.md.)
#     part 138: the fixture models over six prompt draws with the fold off and on (the
#             fold's accuracy question, gpu-2026-12-07-sample.md §3). Not yet run.
#     part 139: the fixture models alone over six prompt draws under five settings (fold
#             off / on / on without its deferral; decode rows through cuBLAS, fold off
#             and on): where the fold's loss comes from. scripts/diag/fold_seeds.py
#             summarises the logs. (Ran 2026-12-07 at dc3ffb2, an H100:
#             gpu-2026-12-07-fold3.md; part 138 is it plus the random 0.6B, fold off / on.)
#     part 140: the fold with the row factor on the f32 product in the gemv rows and the
#             layer chain: the fold group, the chain group, the fixtures over six draws
#             fold off / on, the checks with the fold on, the 0.6B runner A/B of the fold
#             at batch 1 / 2 / 64 / 256, the default workload fold off / on. (Ran
#             2026-12-07 at 5259b6d, an H100: gpu-2026-12-07-fold4.md; the fold is on by
#             default since, so the A/B's other side is now MINISGL_FOLD_NORMS=0.)
#     part 141: the per-product norm deferral on a mixed layer (the 0.6B with
#             MINISGL_GEMV_MAX_WEIGHT_MB=10: qkv on the gemv kernels, gate_up on cuBLAS)
#             against the CPU, fold on and off, and the default beside it. Not yet run;
#             the next call: `bash scripts/gpu-bench.sh device 141; GPU_NEED=H200
#             TABLE_ATTN=0 TABLE_EXTRA=0 bash scripts/gpu-bench.sh device table`.
#     part 132: after `device table` in the same call, with PART_LIMIT the seconds the call
#             has left: the decode timelines of both shapes (batch 1 / 64 / 256, context
#             ~256), then part 131's prefill timelines while time is left.
#     (part 134, the barrier-free split combine (MINISGL_DECODE_COMBINE_FREE=1) checked
#             and A/B'd on both shapes, ran once at 0d56804 (2026-12-06, an H100); the
#             combine became that kernel and the switch and part went:
#             gpu-2026-12-06-combine.md.)
#     part 117: the product phases' exchanges through flagged words instead of grid
#             barriers (MINISGL_KERNEL_DEFINES=LC_XCH=1, opt-in): chain checks, the fixture
#             models and engine with it, graph-step A/Bs at batch 1 and 2 against the
#             default on 0.6B (contexts 256, 1,024), its phase trace at one and two
#             sequences, then Llama-3.1-8B's A/B (too wide for the exchange: the barriers
#             stay, the even shares are the change), each while the call has time
#             (PART_LIMIT s, default 480). Ran once (77d112d, 2026-12-06): correct, 6%
#             slower, and the build was removed after it (the define now changes nothing).
#             Part 116 ran once (e14093b); its A/B is now against a build equal to the
#             default.
#     part 115: timing-only builds of the chain's consume loop (LC_EXP_NOX: x read once a
#             chunk; LC_EXP_NORED: no per-row shuffle reduction; both give wrong results)
#             A/B'd against the default at batch 1 and 2: 0.6B, then Llama-3.1-8B.
#     part 114: the attention chain at two sequences (layer_chain_span_g2_r2, default
#             on; MINISGL_CHAIN_ATTN_ROWS=1 turns it off): gpu-check's chain group (its
#             span_rows checks against the CPU), the fixture models and engine, the 0.6B
#             graph steps at batch 1 / 2 / 4 (context 256) and 2 (context 1,024) A/B
#             against it off, then part 113 and the 0.6B default workload while the call
#             has time.
#     part 112: the two-row chain as the default (MINISGL_CHAIN_ROWS=2): the chain checks,
#             the fixture models and engine (the random Qwen3-0.6B at one, two and three
#             sequences), the 0.6B decode steps at batch 1-256, context 256, A/B against
#             MINISGL_CHAIN_ROWS=1, and the 0.6B default workload.
#     (part 108, sampling's settings in one upload (MINISGL_SAMPLE_PACK=1), ran at
#             1f34f8c: checks green but 0.999x / 1.000x / 0.994x / 0.983x at batch
#             1 / 8 / 64 / 256, no gain, so the switch was removed with the part:
#             gpu-2026-12-05-h200d.md.)
#     part 100: after the Hopper GEMM and the 17-64 row gemv builds were removed
#             (2026-12-05): every op check, the model and engine checks, the 0.6B kernel
#             benches and decode steps and a timeline with gpu-check's floors at the rates
#             it now measures at start, the 0.6B default workload, the 14B decode steps.
#     (parts 97-99, the tensor-core gemv builds for 17-64 rows and the Hopper decode GEMM
#             (gemm_sm90.cu) with its Nsight profile, ran at 5a9bc6a and 5937b34; both lost
#             to cuBLAS and were removed, and so are the parts: gpu-2026-12-05-gemm.md,
#             gpu-2026-12-05-h100.md.)
#     (part 89, the model's final norm applied in the span, ran at 2a160fe: 1.013x slower
#             at 0.6B batch 1, so reverted with the part: gpu-2026-12-04-span.md.)
#     (part 90, the whole ring in flight in a span, ran at 0dcf354: within the A/B's noise,
#             so reverted with the part: gpu-2026-12-04-span.md.)
#     part 84: the window at 14B and 8B (MINISGL_CHAIN_WINDOW=2 against the rule's 0),
#             seven rounds each, clocks sampled.
#     part 85: the window as a launch argument (the host's rule): chain and model checks,
#             the 0.6B batch-1 A/B against MINISGL_CHAIN_WINDOW=0, the 0.6B default workload.
#     part 70: the kept attention chain (groups of up to 4, inlined, the weight stream
#             held until the attention is done): kernel and model checks, the A/Bs against
#             the separate attention (0.6B at contexts 256 and 2,048, Llama-3.1-8B), the
#             whole chain against none (0.6B, Qwen3-14B, which keeps the products-only
#             chain), and the 0.6B batch-1 step kernel by kernel. PART70_QUICK=1: only
#             the 0.6B batch-1 A/B against the separate attention.
#     (parts 68, 69 and 71 ran at 3693241, 770a935 and 9ca1020: A/Bs of experiment
#     defines and one Nsight Compute profile of the attention chain. LC_BACKOFF made no
#     difference and went; LC_DEFER_RING (the stream held during the attention) and
#     LC_TICKET (the splits merged by the last block of each kv head) won and became the
#     code; the out-of-line attention lost. docs/results/gpu-2026-12-04-chain-attn.md.)
#     (part 59, part 60 with 256-thread row_partials blocks and a null A/B, ran at
#     ff1f722; at batch 64 the split kept too few loads in flight, so part 60 replaced
#     it: docs/results/gpu-2026-12-04-sample.md.)
#     (part 57, the tensor-core decode with K and V in a ring of three buffers, four
#     blocks an SM (MINISGL_DECODE_STAGING=ring), ran at 78144dc; no faster anywhere in
#     the kernel benches (256 x 256: 82% of copy against 84%; 8 x 16384: 65% against
#     80%) and 3.7% slower on the 0.6B default workload, so reverted with the part.)
#     (part 58, the norm gemv builds with their first round of weights staged in shared
#     memory by cp.async (GEMV_STAGE), ran at 19ce73d; under Nsight Compute gate_up
#     8.48 -> 8.23 us and qkv unchanged at batch 1, so reverted with the part. Both:
#     docs/results/gpu-2026-12-04-sample.md.)
#     (part 48, qkv_rope_store with the head count a runtime argument, ran at a9aa3d7;
#     43 registers made one head a warp 12% slower, so the build was replaced by part 49's
#     and the part removed: docs/results/gpu-2026-12-03-rope.md.)
#     (part 41, two-batch overlap of decode steps (halves on two streams), ran at
#     8efb326 and 86becff; 5-18% slower than whole steps at Qwen3-0.6B batch 64-256, so
#     reverted with the part: docs/results/gpu-2026-12-03-overlap.md.)
#     (part 38, the split combine a warp per query head against the block kernel, ran at
#     3034e9b; 3-5% slower at 0.6B batch 1-8, so removed with the part:
#     docs/results/gpu-2026-12-02-steps.md.)
#     (part 32, the stream-K Hopper GEMM for decode products of 5-128 rows, ran at
#     57717b3 and 7fa056e; it lost to cuBLAS and was reverted, and so is the part:
#     docs/results/gpu-2026-12-02-skgemm.md.)
#     (part 33, cuBLAS algorithms timed per product shape, ran at 98d2292; within
#     +-2% of cuBLAS's own choice, so reverted with the part:
#     docs/results/gpu-2026-12-02-skgemm.md.)
#     (parts 29 and 30, the L2 prefetch and the cluster-merged decode, ran at 60129b6 and
#     dcad030; both were reverted, and so are the parts: docs/results/gpu-2026-12-02-l2.md.)
#     (part 10, the A/B of the tensor-core decode builds, ran at bbe67ff; those builds
#     are gone, and so is the part.)
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
    gpu_stage qwen3-0.6b qwen3-14b llama-3.1-8b qwen3-32b
    # Part 127's replay: the Sarathi example plugin and a Mooncake slice.
    rustup target add wasm32-wasip2 >/dev/null 2>&1 || true
    cargo build --target wasm32-wasip2 --profile plugin -p minisgl-example-sarathi
    mkdir -p .gpu/plugins .gpu/workloads
    cp target/wasm32-wasip2/plugin/minisgl_example_sarathi.wasm .gpu/plugins/
    head -n 400 "$(d=${WORKLOADS:-../shared/workloads}; [ -d "$d" ] || d=/work/shared/workloads; echo "$d")/mooncake_conversation_trace.jsonl" \
        > .gpu/workloads/mooncake_conversation_400.jsonl
    head -n 2001 "$(d=${WORKLOADS:-../shared/workloads}; [ -d "$d" ] || d=/work/shared/workloads; echo "$d")/AzureLLMInferenceTrace_conv.csv" \
        > .gpu/workloads/azure_conv_2000.csv
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
    # An environment given before a call (MINISGL_PDL=1 check_models) applies to it.
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
    check_models() { fixture_checks 120 models --skip-engine; }
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
    context_abs() {  # TAG AB LLAMA_CONTEXT CONTEXT...: the 0.6B graph-step A/B at batch 1
        # and 2 against AB (VAR=VALUE) at each CONTEXT, then Llama-3.1-8B's at LLAMA_CONTEXT
        # (empty: the bench's default; -: none), each while it fits local_limit (the part's
        # PART_LIMIT)
        local tag=$1 ab=$2 llama=$3 c
        shift 3
        for c in "$@"; do
            if fits 40; then
                MINISGL_BENCH_CONTEXT=$c runner_ab qwen3-0.6b "-$tag-ctx$c" 1,2 "$ab"
            fi
        done
        if [ "$llama" != - ] && fits 90; then
            (if [ -n "$llama" ]; then export MINISGL_BENCH_CONTEXT=$llama; fi
             BENCH_TIMEOUT=$((local_limit - SECONDS)) runner_ab llama-3.1-8b "-$tag${llama:+-ctx$llama}" 1,2 "$ab")
        fi
    }
    define_round() {  # DEFINES TAG MODEL_CHECKS TRACE_DEFINES TRACE_TAG HOOK: an opt-in
        # chain build's part (116, 117): its chain checks, the 0.6B graph-step A/B at
        # batch 1 and 2 against the default, MODEL_CHECKS (a command) with it, the phase
        # trace built with TRACE_DEFINES, the A/B at context 1,024, HOOK (a command, or
        # true), then Llama-3.1-8B's A/B; each step after the first three only while it
        # fits PART_LIMIT (s, default 480: local_limit, which HOOK may read).
        local ab="MINISGL_KERNEL_DEFINES=$1"
        local_limit=${PART_LIMIT:-480}
        chain_check "$1" "$2"
        runner_ab qwen3-0.6b "-$2" 1,2 "$ab"
        MINISGL_KERNEL_DEFINES="$1" $3
        if fits 60; then chain_check "$4" "$5"; fi
        if fits 50; then
            MINISGL_BENCH_CONTEXT=1024 runner_ab qwen3-0.6b "-$2-ctx1024" 1,2 "$ab"
        fi
        $6
        if fits 120; then
            BENCH_TIMEOUT=$((local_limit - SECONDS)) runner_ab llama-3.1-8b "-$2" 1,2 "$ab"
        fi
    }
    chat_replay() {  # SHAPE REQUESTS TIME_SCALE TAG: the Azure chat slice on the engine under
        # the Sarathi plugin (2,048-token step budget, outputs capped at 512) with
        # MINISGL_MIXED_SPLIT on (FCFS beside it) then off, while the call has time
        local split pol
        for split in 1 0; do
            if ! fits 120; then echo "no time left for the replay with MINISGL_MIXED_SPLIT=$split"; continue; fi
            pol=(--policy sarathi=.gpu/plugins/minisgl_example_sarathi.wasm)
            [ "$split" = 1 ] && pol=(--policy fcfs=native "${pol[@]}")
            MINISGL_MIXED_SPLIT=$split timeout $((local_limit - SECONDS - 10)) "$bin" compare --backend cuda \
                --random-weights ".gpu/$1" --trace .gpu/workloads/azure_conv_2000.csv \
                --num-requests "$2" --time-scale "$3" --max-output-len 512 --max-prefill-tokens 2048 \
                --page-size 16 --seed 0 "${pol[@]}" \
                --out "$out/$4-split$split" > "$out/$4-split$split.log" 2>&1
            echo "replay $1 MINISGL_MIXED_SPLIT=$split rc=$?"
            grep -E "^\| (fcfs|sarathi) " "$out/$4-split$split/results.md" 2>/dev/null
        done
    }
    shared_prefix_popular() {  # TIMEOUT: part 107's 0.6B shared-prefix workload with its
        # groups drawn by popularity (weight 1/(g+1), bench's default since 2026-12-06)
        # instead of in turn: the radix cache against none (--compare-cache), prefix +
        # extend chunks on pages that hits keep.
        timeout "$1" "$bin" bench offline --random-weights .gpu/qwen3-0.6b --device cuda --shape qwen3-0.6b \
            --workload shared-prefix --num-seqs 512 --num-groups 64 --prefix-len 4096 \
            --min-input-len 256 --max-input-len 2048 --min-output-len 16 --max-output-len 64 \
            --group-order popular --num-pages 8000 --compare-cache \
            --workload-name "shared-prefix n=512 groups=64 prefix=4096 in=256-2048 out=16-64 pages=8000 order=popular seed=0" \
            --jsonl "$jl" >> "$out/shared-prefix-popular.log" 2>&1
        echo "shared-prefix popular rc=$?"
        grep -E "output tok/s|of the ceiling|prefill only|cache hit|decode, " "$out/shared-prefix-popular.log" | tail -16
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
    ncu_launch() {  # KERNEL_REGEX TAG BATCHES [CONTEXT [SKIP]]: Nsight Compute's full set and
        # per-line stall samples of one warm launch in a Qwen3-0.6B decode step at CONTEXT
        # (256). The timeline runs a prefill, then eager decode steps of 28 launches of the
        # kernel each: skip SKIP launches (28: the first decode step's), profile the next.
        # Rates given (MINISGL_GPU_RATES) keep gpu-check's start-up micro-benchmarks out of
        # the profile.
        MINISGL_GPU_RATES=${MINISGL_GPU_RATES:-4.28,670} timeout 200 ncu --set full --import-source no -k "regex:$1" -s "${5:-28}" -c 1 -f \
            -o "/tmp/prof-$2" "$bin" gpu-check --skip-ops --skip-bench --timeline-model .gpu/qwen3-0.6b \
            --timeline-batches "$3" --timeline-context "${4:-256}" --timeline-out /tmp/tl.md \
            --report /tmp/tl-report.md > "/tmp/ncu-$2.log" 2>&1
        echo "ncu rc=$?"; tail -3 "/tmp/ncu-$2.log"
        ncu -i "/tmp/prof-$2.ncu-rep" --page source --csv --print-source sass 2>&1 | gzip > "$out/ncu-src-$2.csv.gz"
        ncu -i "/tmp/prof-$2.ncu-rep" --page details > "$out/ncu-details-$2.txt" 2>&1
        grep -E "Duration|DRAM Throughput|Achieved Occupancy|Theoretical Occupancy|Block Limit|Shared Memory Configuration|Warp Cycles Per Issued|Eligible Warps|Stall" "$out/ncu-details-$2.txt" | head -24
    }
    ncu_steps() {  # SHAPE BATCHES [CONTEXT [TIMEOUT]]: Nsight Compute durations of whole decode steps
        # NCU_TABLES=0,2 NCU_LABELS=prefill,decode: tables of other steps than the timed
        # decodes (step 0 is the prefill of BATCHES x CONTEXT tokens, in one step). Rates
        # given, as in ncu_launch: only the steps' launches are profiled.
        local ctx=${3:-256} tag=$1${3:+-ctx$3}${NCU_TAG:-}
        MINISGL_GPU_RATES=${MINISGL_GPU_RATES:-4.28,670} timeout "${4:-240}" ncu --clock-control none \
            --cache-control none --metrics gpu__time_duration.sum \
            --csv --page raw "$bin" gpu-check --skip-ops --skip-bench --timeline-model .gpu/$1 \
            --timeline-batches "$2" --timeline-context "$ctx" --timeline-out /tmp/timeline-$tag.md \
            --report /tmp/timeline-report-$tag.md > /tmp/ncu-$tag.csv 2> /tmp/ncu-$tag.err
        echo "ncu $tag rc=$?"
        python3 scripts/gpu/ncu_steps.py /tmp/ncu-$tag.csv ${NCU_TABLES:+--tables "$NCU_TABLES"} \
            --labels "${NCU_LABELS:-$(echo "$2" | sed 's/\([0-9]*\)/b\1/g')}" > "$out/ncu-steps-$tag.md"
        grep -E "^###" -A8 "$out/ncu-steps-$tag.md"
    }
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
    elif [ "$part" = 5 ]; then
        # After a prefill-kernel change: the kernel and its variants against an f32
        # reference and side by side with cuDNN (attn_bench), the engine's kernel checks
        # (both prefill kernels against the CPU backend), then the prefill-bound
        # workload on both shapes. VARIANTS adds attn_bench variants.
        timeout 420 python3 scripts/gpu/attn_bench.py --jsonl "$jl" --timeout 90 --skip "${SKIP:-}" \
            --variants "${VARIANTS:-ws}" 2>&1 | grep -v "Exception ignored\|driver.pyx\|  launch " | tee "$out/attn.log"
        if [ "${NCU:-0}" = 1 ]; then
            # Where the kernel's time goes: one launch of the main case under Nsight Compute.
            timeout 150 ncu --clock-control none --target-processes all -k regex:attn_prefill_sm90 -c 1 \
                --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
                --section WarpStateStats --section Occupancy \
                python3 scripts/gpu/attn_bench.py --only sm90 --cases "8x2048 fresh" --shapes qwen3-14b --reps 1 \
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
    elif [ "$part" = 6 ]; then
        # A round's closing figures in one call: attn_bench (the engine's kernel, the
        # variants in VARIANTS, cuDNN beside), the kernel and model checks, then the
        # long-prompt and default workloads on both shapes.
        timeout 200 python3 scripts/gpu/attn_bench.py --jsonl "$jl" --timeout 90 --skip mma \
            --variants "${VARIANTS-ws}" 2>&1 | grep -v "Exception ignored\|driver.pyx\|  launch \|^  \[" | tee "$out/attn.log"
        models=()
        for m in tests/fixtures/models/*/; do models+=(--model "$m"); done
        timeout 150 "$bin" gpu-check --skip-engine --skip-bench "${models[@]}" --random-model .gpu/qwen3-0.6b \
            --report "$out/gpu-check.md" > "$out/gpu-check.log" 2>&1
        echo "gpu-check rc=$?"
        grep -E "checks, |FAIL" "$out/gpu-check.log" | head -20
        # Long prompts first (they follow the prefill kernel), the 14B default workload last.
        for s in qwen3-0.6b qwen3-14b; do
            timeout 100 "$bin" bench offline --random-weights .gpu/$s --device cuda --shape $s \
                "${long[@]}" --jsonl "$jl" 2>&1 | tail -3 | tee "$out/long-$s.log"
        done
        for s in qwen3-0.6b qwen3-14b; do
            timeout 150 "$bin" bench offline --random-weights .gpu/$s --device cuda --shape $s \
                --workload-name "nano-vllm n=256 in=100-1024 out=100-1024 seed=0" --jsonl "$jl" 2>&1 | tail -3 | tee "$out/offline-$s.log"
        done
    elif [ "$part" = 7 ]; then
        # The opt-in ws prefill kernel in the engine (MINISGL_PREFILL_KERNEL=ws) on the
        # workload that did not finish with it on 2026-12-01 (14B long prompts): v4
        # first for the time it takes in this call, then ws twice, bounded (a wait past
        # 4 s in the kernel traps and prints a "deadlock report"; bench offline prints
        # its progress every 10 s), and compute-sanitizer memcheck on the ws kernel
        # only over a two-layer 14B-shape model. SKIP_CHECK=1 skips the ws checks.
        if [ "${SKIP_CHECK:-0}" != 1 ]; then
            MINISGL_PREFILL_KERNEL=ws timeout 120 "$bin" gpu-check --skip-models --skip-engine --report "$out/gpu-check-ws.md" > "$out/gpu-check-ws.log" 2>&1
            echo "gpu-check (ws) rc=$?"
            grep -E "checks, |FAIL|PrefillWs" "$out/gpu-check-ws.log" | head -20
        fi
        timeout 120 "$bin" bench offline --random-weights .gpu/qwen3-14b --device cuda --shape qwen3-14b \
            "${long[@]}" --jsonl "$jl" > "$out/long-14b-v4.log" 2>&1
        echo "14B long prompts (v4) rc=$?"; tail -4 "$out/long-14b-v4.log"
        export MINISGL_PREFILL_KERNEL=ws
        for i in 1 2; do
            timeout 120 "$bin" bench offline --random-weights .gpu/qwen3-14b --device cuda --shape qwen3-14b \
                "${long[@]}" --jsonl "$jl" > "$out/long-14b-ws-$i.log" 2>&1
            echo "14B long prompts (ws) run $i rc=$? (124: did not finish in 120 s)"
            grep -E "deadlock report|rror" "$out/long-14b-ws-$i.log" | head -5; tail -4 "$out/long-14b-ws-$i.log"
            if [ $i = 1 ]; then
                mkdir -p /tmp/qwen3-14b-l2
                python3 -c "import json; c=json.load(open('.gpu/qwen3-14b/config.json')); c['num_hidden_layers']=2; json.dump(c, open('/tmp/qwen3-14b-l2/config.json','w'))"
                timeout 100 compute-sanitizer --tool memcheck --kernel-name kns=attn_prefill_ws --print-limit 20 \
                    "$bin" bench offline --random-weights /tmp/qwen3-14b-l2 --device cuda \
                    --num-seqs 16 --min-input-len 4000 --max-input-len 8000 --min-output-len 16 --max-output-len 64 \
                    > "$out/memcheck-ws-14b-l2.log" 2>&1
                echo "memcheck (ws, 2-layer 14B) rc=$?"; grep -E "ERROR SUMMARY|Invalid|deadlock|rror|output tok/s" "$out/memcheck-ws-14b-l2.log" | head -12
            fi
        done
        unset MINISGL_PREFILL_KERNEL
    elif [ "$part" = 8 ]; then
        # Stream-K decode (MINISGL_DECODE_SCHEDULE=stream, the default) and the ws
        # prefill default: the kernel checks (every decode kernel and schedule against
        # the CPU) and the decode benches; the models against the CPU with the
        # tensor-core decode forced (Qwen3-0.6B's group 2 otherwise takes the CUDA-core
        # kernel), graphs included; the 14B decode timeline; the default workload on
        # 14B with each schedule and on 0.6B; long prompts on both shapes.
        timeout 150 "$bin" gpu-check --skip-models --skip-engine --report "$out/gpu-check-ops.md" > "$out/gpu-check-ops.log" 2>&1
        echo "gpu-check ops rc=$?"
        grep -E "checks, |FAIL|decode kernels|prefill attention" "$out/gpu-check-ops.log" | head -30
        models=()
        for m in tests/fixtures/models/*/; do models+=(--model "$m"); done
        MINISGL_DECODE_KERNEL=mma timeout 150 "$bin" gpu-check --skip-ops --skip-engine --skip-bench "${models[@]}" \
            --random-model .gpu/qwen3-0.6b --report "$out/gpu-check-models-mma.md" > "$out/gpu-check-models-mma.log" 2>&1
        echo "gpu-check models (tensor-core decode, stream-K) rc=$?"
        grep -E "checks, |FAIL" "$out/gpu-check-models-mma.log" | head -20
        timeout 150 "$bin" gpu-check --skip-ops --skip-bench --timeline-model .gpu/qwen3-14b \
            --timeline-out "$out/timeline-14b.md" --report "$out/timeline-report.md" > "$out/timeline-14b.log" 2>&1
        echo "timeline rc=$?"; grep -E "x floor|= [0-9.]+x|floor" "$out/timeline-14b.md" | tail -4
        for sched in stream splits; do
            MINISGL_DECODE_SCHEDULE=$sched timeout 120 "$bin" bench offline --random-weights .gpu/qwen3-14b --device cuda --shape qwen3-14b \
                --workload-name "nano-vllm n=256 in=100-1024 out=100-1024 seed=0" --jsonl "$jl" > "$out/offline-14b-$sched.log" 2>&1
            echo "14B default workload ($sched) rc=$?"; grep -E "ready in|ceiling|output tok/s" "$out/offline-14b-$sched.log" | tail -3
        done
        timeout 80 "$bin" bench offline --random-weights .gpu/qwen3-0.6b --device cuda --shape qwen3-0.6b \
            --workload-name "nano-vllm n=256 in=100-1024 out=100-1024 seed=0" --jsonl "$jl" 2>&1 | tail -3 | tee "$out/offline-0.6b.log"
        for sh in qwen3-0.6b qwen3-14b; do
            timeout 100 "$bin" bench offline --random-weights .gpu/$sh --device cuda --shape $sh \
                "${long[@]}" --jsonl "$jl" 2>&1 | tail -3 | tee "$out/long-$sh.log"
        done
    elif [ "$part" = 9 ]; then
        # The decode schedules side by side: kernel checks and decode benches, then the
        # 14B default workload and the 14B decode timeline with each schedule.
        timeout 150 "$bin" gpu-check --skip-models --skip-engine --report "$out/gpu-check-ops.md" > "$out/gpu-check-ops.log" 2>&1
        echo "gpu-check ops rc=$?"
        grep -E "checks, |FAIL|decode kernels|blocks per SM" "$out/gpu-check-ops.log" | head -30
        for sched in stream splits; do
            MINISGL_DECODE_SCHEDULE=$sched timeout 120 "$bin" bench offline --random-weights .gpu/qwen3-14b --device cuda --shape qwen3-14b \
                --workload-name "nano-vllm n=256 in=100-1024 out=100-1024 seed=0" --jsonl "$jl" > "$out/offline-14b-$sched.log" 2>&1
            echo "14B default workload ($sched) rc=$?"; grep -E "ready in|ceiling|output tok/s" "$out/offline-14b-$sched.log" | tail -3
        done
        for sched in stream splits; do
            MINISGL_DECODE_SCHEDULE=$sched timeout 130 "$bin" gpu-check --skip-ops --skip-bench --timeline-model .gpu/qwen3-14b \
                --timeline-out "$out/timeline-14b-$sched.md" --report "$out/timeline-report-$sched.md" > "$out/timeline-14b-$sched.log" 2>&1
            echo "timeline ($sched) rc=$?"; grep -E "attn_decode|Σ" "$out/timeline-14b-$sched.md" | tail -9
        done
    elif [ "$part" = 11 ]; then
        # At most 8 files come back: both timelines go into one, the env into the checks' log.
        cat "$out/env.log" > "$out/gpu-check-ops.log"; rm "$out/env.log"
        timeout 170 "$bin" gpu-check --skip-models --skip-engine --report /tmp/gpu-check-ops.md >> "$out/gpu-check-ops.log" 2>&1
        echo "gpu-check ops rc=$?"
        grep -E "checks, |FAIL|decode kernels|prefill attention" "$out/gpu-check-ops.log" | head -30
        models=()
        for m in tests/fixtures/models/*/; do models+=(--model "$m"); done
        timeout 120 "$bin" gpu-check --skip-ops --skip-engine --skip-bench "${models[@]}" \
            --random-model .gpu/qwen3-0.6b --report /tmp/gpu-check-models.md > "$out/gpu-check-models.log" 2>&1
        echo "gpu-check models rc=$?"
        grep -E "checks, |FAIL" "$out/gpu-check-models.log" | head -20
        for sh in qwen3-14b qwen3-0.6b; do
            for ms in 1 2; do
                MINISGL_DECODE_MIN_SPLITS=$ms timeout 100 "$bin" bench offline --random-weights .gpu/$sh --device cuda --shape $sh \
                    --workload-name "nano-vllm n=256 in=100-1024 out=100-1024 seed=0" --jsonl "$jl" >> "$out/offline-$sh.log" 2>&1
                echo "$sh default workload (min splits $ms) rc=$?"; grep -E "ready in|ceiling|output tok/s" "$out/offline-$sh.log" | tail -3
            done
        done
        for sh in qwen3-0.6b qwen3-14b; do
            timeout 100 "$bin" bench offline --random-weights .gpu/$sh --device cuda --shape $sh \
                "${long[@]}" --jsonl "$jl" >> "$out/long.log" 2>&1
            echo "$sh long prompts rc=$?"; grep -E "ceiling|output tok/s" "$out/long.log" | tail -2
        done
        for sh in qwen3-14b qwen3-0.6b; do
            timeout 110 "$bin" gpu-check --skip-ops --skip-bench --timeline-model .gpu/$sh \
                --timeline-out /tmp/timeline-$sh.md --report /tmp/timeline-report.md > /tmp/timeline-$sh.log 2>&1
            echo "timeline $sh rc=$?"; grep -E "Σ" /tmp/timeline-$sh.md | tail -3
            cat /tmp/timeline-$sh.md >> "$out/timeline.md"
        done
        ls "$out"
    elif [ "$part" = 12 ]; then
        cat "$out/env.log" > "$out/gpu-check-models.log"; rm "$out/env.log"
        models=()
        for m in tests/fixtures/models/*/; do models+=(--model "$m"); done
        MINISGL_DECODE_SCHEDULE=stream timeout 120 "$bin" gpu-check --skip-ops --skip-engine --skip-bench "${models[@]}" \
            --random-model .gpu/qwen3-0.6b --report /tmp/gpu-check-models.md >> "$out/gpu-check-models.log" 2>&1
        echo "gpu-check models (stream-K) rc=$?"
        grep -E "checks, |FAIL" "$out/gpu-check-models.log" | head -20
        for sh in qwen3-14b qwen3-0.6b; do
            for sched in stream splits; do
                MINISGL_DECODE_SCHEDULE=$sched timeout 100 "$bin" bench offline --random-weights .gpu/$sh --device cuda --shape $sh \
                    --workload-name "nano-vllm n=256 in=100-1024 out=100-1024 seed=0" --jsonl "$jl" >> "$out/offline-$sh.log" 2>&1
                echo "$sh default workload ($sched) rc=$?"; grep -E "ready in|ceiling|output tok/s" "$out/offline-$sh.log" | tail -3
            done
        done
        MINISGL_DECODE_SCHEDULE=stream timeout 110 "$bin" gpu-check --skip-ops --skip-bench --timeline-model .gpu/qwen3-14b \
            --timeline-out "$out/timeline.md" --report /tmp/timeline-report.md > /tmp/timeline.log 2>&1
        echo "timeline (stream-K) rc=$?"; grep -E "attn_decode|Σ" "$out/timeline.md" | tail -9
        # The timeline's GEMMs against PyTorch's on the same shapes (what cuBLASLt's
        # own heuristics and split-K reach without the engine).
        timeout 60 python3 scripts/gpu/gemm_shapes.py --shape qwen3-14b --rows 1,64,256 2>&1 | tee "$out/gemm.log"
        ls "$out"
    elif [ "$part" = 13 ]; then
        for sh in qwen3-0.6b qwen3-14b; do
            timeout 200 "$bin" gpu-check --skip-ops --skip-models --skip-engine --bench-model .gpu/$sh \
                --report /tmp/gpu-check-bench-$sh.md > "$out/gpu-check-bench-$sh.log" 2>&1
            echo "gpu-check bench $sh rc=$?"; grep -E "runner.step|random weights" "$out/gpu-check-bench-$sh.log"
        done
        ls "$out"
    elif [ "$part" = 14 ]; then
        cat "$out/env.log" > "$out/gpu-check-ops.log"; rm "$out/env.log"
        timeout 170 "$bin" gpu-check --skip-models --skip-engine --report /tmp/gpu-check-ops.md >> "$out/gpu-check-ops.log" 2>&1
        echo "gpu-check ops rc=$?"
        grep -E "checks, |FAIL|decode kernels|decode attention" "$out/gpu-check-ops.log" | head -30
        for sh in qwen3-0.6b qwen3-14b; do
            for rule in waves fill; do
                MINISGL_DECODE_SPLITS=$rule timeout 100 "$bin" bench offline --random-weights .gpu/$sh --device cuda --shape $sh \
                    --workload-name "nano-vllm n=256 in=100-1024 out=100-1024 seed=0" --jsonl "$jl" >> "$out/offline-$sh.log" 2>&1
                echo "$sh default workload (splits $rule) rc=$?"; grep -E "ceiling|output tok/s" "$out/offline-$sh.log" | tail -2
            done
        done
        ls "$out"
    elif [ "$part" = 15 ]; then
        ncu_steps qwen3-0.6b 1,64,256
        ncu_steps qwen3-14b 1
        [ -n "${PART15_ONLY_NCU:-}" ] || bench_step qwen3-0.6b
        ls "$out"
    elif [ "$part" = 16 ]; then
        cat "$out/env.log" > "$out/gpu-check-ops.log"; rm "$out/env.log"
        check_ops --bench-model .gpu/qwen3-0.6b
        check_models
        ncu_steps qwen3-0.6b 1,64
        ncu_steps qwen3-14b 1
        bench_step qwen3-14b
        ls "$out"
    elif [ "$part" = 17 ]; then
        cat "$out/env.log" > "$out/gpu-check-ops.log"; rm "$out/env.log"
        MINISGL_PDL=1 check_ops --skip-bench
        MINISGL_PDL=1 check_models
        MINISGL_PDL=0 bench_step qwen3-0.6b -pdl0
        MINISGL_PDL=1 bench_step qwen3-0.6b -pdl1
        MINISGL_PDL=1 bench_step qwen3-14b -pdl1
        MINISGL_PDL=0 offline_default qwen3-0.6b
        MINISGL_PDL=1 offline_default qwen3-0.6b
        MINISGL_PDL=1 offline_default qwen3-14b
        ls "$out"
    elif [ "$part" = 18 ]; then
        cat "$out/env.log" > "$out/gpu-check-models.log"; rm "$out/env.log"
        check_models
        bench_step qwen3-0.6b
        for sh in qwen3-0.6b qwen3-14b; do
            offline_default $sh
            timeout 100 "$bin" bench offline --random-weights .gpu/$sh --device cuda --shape $sh \
                "${long[@]}" --jsonl "$jl" >> "$out/long.log" 2>&1
            echo "$sh long prompts rc=$?"; grep -E "ceiling|output tok/s" "$out/long.log" | tail -2
        done
        ls "$out"
    elif [ "$part" = 19 ]; then
        cat "$out/env.log" > "$out/gpu-check-ops.log"; rm "$out/env.log"
        check_ops --skip-bench
        check_models
        bench_step qwen3-0.6b
        bench_step qwen3-14b
        ls "$out"
    elif [ "$part" = 20 ]; then
        cat "$out/env.log" > "$out/gpu-check-ops.log"; rm "$out/env.log"
        check_ops --skip-bench
        check_models
        bench_step qwen3-0.6b
        ncu_steps qwen3-0.6b 1
        # The call's limit is 600 s and a bench takes about 100 (start-up included).
        if [ "$SECONDS" -lt 420 ]; then
            MINISGL_NORM_PROLOGUE=0 bench_step qwen3-0.6b -np0
        else
            echo "no time left for the MINISGL_NORM_PROLOGUE=0 bench (${SECONDS} s)"
        fi
        ls "$out"
    elif [ "$part" = 21 ]; then
        cat "$out/env.log" > "$out/gpu-check-ops.log"; rm "$out/env.log"
        check_ops --skip-bench
        check_models
        bench_step qwen3-0.6b
        ncu_steps qwen3-0.6b 1,64,256
        MINISGL_DECODE_ROPE=0 bench_step qwen3-0.6b -rope0
        if [ "$SECONDS" -lt 330 ]; then
            bench_step qwen3-14b
        else
            echo "no time left for the 14B bench (${SECONDS} s)"
        fi
        ls "$out"
    elif [ "$part" = 22 ]; then
        cat "$out/env.log" > "$out/gpu-check-ops.log"; rm "$out/env.log"
        check_ops --skip-bench
        check_models
        timeout 150 ncu --set full --kernel-name attn_decode_mma_hd128 --launch-skip 30 --launch-count 1 \
            "$bin" gpu-check --skip-ops --skip-bench --timeline-model .gpu/qwen3-0.6b --timeline-batches 256 \
            --timeline-context 256 --timeline-out /tmp/timeline-prof.md --report /tmp/timeline-prof-report.md \
            > "$out/ncu-decode-b256.txt" 2> /tmp/ncu-prof.err
        echo "ncu profile rc=$?"; grep -E "Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per" "$out/ncu-decode-b256.txt" | head
        for sh in qwen3-0.6b qwen3-14b; do
            offline_default $sh
            grep -E "roofline floor" "$out/offline-$sh.log" | tail -1
            long_if_time $sh 430 160 "$out/long.log"
        done
        ls "$out"
    elif [ "$part" = 23 ]; then
        cat "$out/env.log" > "$out/gpu-check-ops.log"; rm "$out/env.log"
        check_ops --skip-bench
        check_models
        bench_step qwen3-0.6b
        MINISGL_DECODE_SPLITS=waves bench_step qwen3-0.6b -waves
        ncu_steps qwen3-0.6b 64,256
        offline_default qwen3-0.6b
        if [ "$SECONDS" -lt 340 ]; then
            bench_step qwen3-14b
        else
            echo "no time left for the 14B bench (${SECONDS} s)"
        fi
        ls "$out"
    elif [ "$part" = 25 ]; then
        cat "$out/env.log" > "$out/gpu-check-models.log"; rm "$out/env.log"
        bench_step qwen3-0.6b
        MINISGL_GEMV_ROWS=8 bench_step qwen3-0.6b -rows8
        MINISGL_GEMV_ROWS=8 check_models
        ls "$out"
    elif [ "$part" = 26 ]; then
        cat "$out/env.log" > "$out/gpu-check-ops.log"; rm "$out/env.log"
        timeout 60 "$bin" gpu-check --skip-models --skip-engine --skip-bench \
            --report /tmp/gpu-check-ops.md >> "$out/gpu-check-ops.log" 2>&1
        echo "gpu-check ops rc=$?"; grep -E "checks, |FAIL" "$out/gpu-check-ops.log" | head -20
        bench_step qwen3-14b
        ls "$out"
    elif [ "$part" = 27 ]; then
        # Prefill attention with K/V through the copy engine (TMA) and P V waited for a
        # round later (P_DEFER_WAIT): attn_bench variants beside cuDNN, then a
        # source-level Nsight Compute profile (warp stall samples per SASS line) of the
        # kernels in PROF, then the engine's kernel checks and long prompts on the 0.6B.
        cat "$out/env.log" > "$out/attn.log"; rm "$out/env.log"
        timeout 330 python3 scripts/gpu/attn_bench.py --jsonl "$jl" --timeout 110 --skip mma,sm90 \
            --shapes "${SHAPES:-qwen3-0.6b,qwen3-14b}" --variants "${VARIANTS:-ws}" 2>&1 \
            | grep -v "Exception ignored\|driver.pyx\|  launch " | tee -a "$out/attn.log"
        for v in ${PROF:-}; do
            tag=$(echo "$v" | tr '+=' '__')
            timeout 100 ncu --clock-control none --set full --import-source no --target-processes all \
                -k regex:attn_prefill_ws -c 1 -f -o /tmp/prof-$tag python3 scripts/gpu/attn_bench.py --only "$v" \
                --cases "8x2048 fresh" --shapes qwen3-0.6b --reps 1 > /tmp/ncu-run-$tag.log 2>&1
            echo "ncu $v rc=$?"
            ncu -i /tmp/prof-$tag.ncu-rep --page source --csv --print-source sass > "$out/ncu-src-$tag.csv" 2>&1
            { ncu -i /tmp/prof-$tag.ncu-rep --page details; ncu -i /tmp/prof-$tag.ncu-rep --page raw --csv \
                | python3 -c 'import csv,sys; r=list(csv.reader(sys.stdin)); [print(k, u, v) for k, u, v in zip(*r[:3]) if "stall" in k or "pcsamp" in k]'; } \
                >> "$out/ncu-$tag.txt" 2>&1
            grep -E "Duration|Tensor|Warp Cycles Per Issued" "$out/ncu-$tag.txt" | head -5
        done
        if [ "${SKIP_ENGINE:-0}" != 1 ]; then
            check_ops --skip-bench
            timeout 100 "$bin" bench offline --random-weights .gpu/qwen3-0.6b --device cuda --shape qwen3-0.6b \
                "${long[@]}" --jsonl "$jl" > "$out/long.log" 2>&1
            echo "0.6b long prompts rc=$?"; grep -E "ceiling|output tok/s" "$out/long.log" | tail -3
        fi
        ls -la "$out"
    elif [ "$part" = 28 ]; then
        # The round's closing figures, most needed first, each step only while the
        # call has time: attn_bench (VARIANTS beside the default and cuDNN), kernel and
        # model checks, long prompts on both shapes, the default workload on both.
        cat "$out/env.log" > "$out/attn.log"; rm "$out/env.log"
        timeout 200 python3 scripts/gpu/attn_bench.py --jsonl "$jl" --timeout 80 --skip mma,sm90 \
            --variants "${VARIANTS:-ws}" 2>&1 | grep -v "Exception ignored\|driver.pyx\|  launch \|^  \[" | tee -a "$out/attn.log"
        check_ops --skip-bench
        check_models
        for sh in qwen3-0.6b qwen3-14b; do
            long_if_time $sh 400 130 "$out/offline.log"
        done
        for sh in qwen3-14b qwen3-0.6b; do
            if [ "$SECONDS" -lt 450 ]; then
                timeout $((560 - SECONDS)) "$bin" bench offline --random-weights .gpu/$sh --device cuda --shape $sh \
                    --workload-name "nano-vllm n=256 in=100-1024 out=100-1024 seed=0" --jsonl "$jl" >> "$out/offline.log" 2>&1
                echo "$sh default workload rc=$?"; grep -E "ceiling|output tok/s" "$out/offline.log" | tail -2
            else
                echo "no time left for the $sh default workload (${SECONDS} s)"
            fi
        done
        ls -la "$out"
    elif [ "$part" = 31 ]; then
        # The tensor-core gemv build (gemv.cu `_tc`, 3+ rows; the skinny kernel takes up
        # to 4 rows by default): kernel checks (both gemv builds and cuBLAS against the
        # CPU), model checks, the 0.6B benches and runner step against the previous
        # default (MINISGL_GEMV_ROWS=2: cuBLAS past two rows) in one process, the 0.6B
        # default workload.
        cat "$out/env.log" > "$out/gpu-check-ops.log"; rm "$out/env.log"
        check_ops --skip-bench
        check_models
        MINISGL_BENCH_AB=MINISGL_GEMV_ROWS=2 bench_step qwen3-0.6b
        grep -E "^bench: linear n=" "$out/gpu-check-bench-qwen3-0.6b.log" | head -3
        if [ "${SKIP_OFFLINE:-0}" != 1 ] && [ "$SECONDS" -lt 420 ]; then offline_default qwen3-0.6b; fi
        ls -la "$out"
    elif [ "$part" = 34 ]; then
        # The split combine merged into the tensor-core decode's own last blocks, splits of
        # 64+ rows, and bench offline's time by step class: kernel checks (each split
        # variant against the CPU), model checks, the runner step against
        # MINISGL_DECODE_FUSED_COMBINE=0 and against MINISGL_DECODE_MIN_PART=64 in one
        # process each (0.6B, then 14B as time allows), the 14B default workload with its
        # steps by class.
        cat "$out/env.log" > "$out/gpu-check-ops.log"; rm "$out/env.log"
        check_ops --skip-bench
        grep -E "at least 3 splits" "$out/gpu-check-ops.log" | head -4
        check_models
        export MINISGL_BENCH_RUNNER_ONLY=1
        MINISGL_BENCH_BATCHES=1,8,64,256 MINISGL_BENCH_AB=MINISGL_DECODE_FUSED_COMBINE=0 bench_step qwen3-0.6b -fused
        MINISGL_BENCH_BATCHES=1,8,64 MINISGL_BENCH_AB=MINISGL_DECODE_MIN_PART=64 bench_step qwen3-0.6b -part64
        if [ "$SECONDS" -lt 330 ]; then offline_default qwen3-14b; fi
        if [ "$SECONDS" -lt 440 ]; then
            MINISGL_BENCH_BATCHES=8,64,128 MINISGL_BENCH_AB=MINISGL_DECODE_FUSED_COMBINE=0 bench_step qwen3-14b -fused
        fi
        ls -la "$out"
    elif [ "$part" = 36 ]; then
        # A round's closing figures with the commit's defaults, each while the call has
        # time: kernel and model checks, the runner step of both shapes (the issue's
        # decode-step rows), the 14B default workload with its steps by class, 14B long prompts.
        cat "$out/env.log" > "$out/gpu-check-ops.log"; rm "$out/env.log"
        check_ops --skip-bench
        check_models
        export MINISGL_BENCH_RUNNER_ONLY=1
        # Beside the defaults: whole-context splits at short contexts (no combine at batch 1).
        MINISGL_BENCH_BATCHES=1,4,8,64,256 MINISGL_BENCH_AB=MINISGL_DECODE_MIN_PART=256 bench_step qwen3-0.6b -part256
        MINISGL_BENCH_BATCHES=1,64,256 bench_step qwen3-14b
        if [ "$SECONDS" -lt 380 ]; then offline_default qwen3-14b; fi
        long_if_time qwen3-14b 420 170 "$out/long-qwen3-14b.log"
        ls -la "$out"
    elif [ "$part" = 37 ]; then
        # Splits of 256+ rows where the tensor-core grid is full unsplit
        # (MINISGL_DECODE_FULL_PART): kernel and model checks, then the runner step
        # against MINISGL_DECODE_FULL_PART=64 (the previous rule) in one process on both
        # shapes, at the batches it changes (50+ sequences) and beside them.
        cat "$out/env.log" > "$out/gpu-check-ops.log"; rm "$out/env.log"
        check_ops --skip-bench
        check_models
        export MINISGL_BENCH_RUNNER_ONLY=1
        MINISGL_BENCH_BATCHES=32,48,56,64,96 MINISGL_BENCH_AB=MINISGL_DECODE_FULL_PART=64 bench_step qwen3-0.6b -full64
        MINISGL_BENCH_BATCHES=48,56,64 MINISGL_BENCH_AB=MINISGL_DECODE_FULL_PART=64 bench_step qwen3-14b -full64
        ls -la "$out"
    elif [ "$part" = 39 ]; then
        # Prefill attention builds (VARIANTS, each in its own process, beside cuDNN; the
        # default list repeats the commit's build under a second name, so the spread of
        # two processes shows next to the differences), then the kernel and model checks
        # of the commit's build and the prefill-bound long prompts on both shapes.
        cat "$out/env.log" > "$out/attn.log"; rm "$out/env.log"
        timeout 300 python3 scripts/gpu/attn_bench.py --jsonl "$jl" --timeout 80 --skip mma,sm90 \
            --variants "${VARIANTS:-ws,ws+P_DIAG=1}" 2>&1 \
            | grep -v "Exception ignored\|driver.pyx\|  launch \|^  \[" | tee -a "$out/attn.log"
        if [ "${NCU:-0}" = 1 ]; then
            # Where the loads cost: memory and L2 throughput of one 14B 8 x 2,048 launch.
            timeout 150 ncu --target-processes all -k regex:attn_prefill_ws -c 1 \
                --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
                python3 scripts/gpu/attn_bench.py --only ws --cases "8x2048 fresh" --shapes qwen3-14b --reps 1 \
                > "$out/ncu-ws.txt" 2>&1
            echo "ncu rc=$?"
            grep -E "Throughput|Busy|Bandwidth|Hit Rate|Duration|L2|L1" "$out/ncu-ws.txt" | head -40
        fi
        check_ops --skip-bench
        grep -E "prefill" "$out/gpu-check-ops.log" | head -12
        check_models
        long_if_time qwen3-0.6b 430 100 "$out/long-qwen3-0.6b.log"
        long_if_time qwen3-14b 450 140 "$out/long-qwen3-14b.log"
        ls -la "$out"
    elif [ "$part" = 40 ]; then
        rm "$out/env.log"  # already printed by the tee above
        # 64 groups x 4,096 shared tokens + 512 prompts of 256-2,048 own tokens in 8,000
        # pages of 16 (128k tokens): the radix cache evicts throughout.
        sp=(--workload shared-prefix --num-seqs 512 --num-groups 64 --prefix-len 4096
            --min-input-len 256 --max-input-len 2048 --min-output-len 16 --max-output-len 64
            --group-order round-robin
            --num-pages 8000 --workload-name "shared-prefix n=512 groups=64 prefix=4096 in=256-2048 out=16-64 pages=8000 seed=0")
        for ab in "" "${AB_DEFINES:-P_KV_WARPS=1}"; do
            tag=${ab:+-$(echo "$ab" | tr '=, ' '___')}
            MINISGL_KERNEL_DEFINES="$ab" timeout 100 "$bin" bench offline --random-weights .gpu/qwen3-0.6b \
                --device cuda --shape qwen3-0.6b "${sp[@]}" --jsonl "$jl" >> "$out/shared-prefix$tag.log" 2>&1
            echo "shared-prefix ${ab:-default} rc=$?"
            grep -E "output tok/s|of the ceiling|prefill only" "$out/shared-prefix$tag.log" | tail -3
        done
        offline_default qwen3-0.6b
        offline_default qwen3-14b
        ls -la "$out"
    elif [ "$part" = 42 ]; then
        rm "$out/env.log"  # already printed by the tee above
        # Where large decode steps go at the default workload's contexts (its steps of
        # 64-256 sequences average 600-1,300 tokens; part 15 measured at 256): kernel
        # durations under Nsight Compute at context ~1024, then the runner step there.
        ncu_steps qwen3-0.6b 64,256 1024 150
        if [ "$SECONDS" -lt 200 ]; then ncu_steps qwen3-14b 64,256 1024 200; fi
        MINISGL_BENCH_RUNNER_ONLY=1 MINISGL_BENCH_BATCHES=64,128,256 MINISGL_BENCH_CONTEXT=1024 \
            bench_step qwen3-0.6b -ctx1024
        ls -la "$out"
    elif [ "$part" = 43 ]; then
        rm "$out/env.log"  # already printed by the tee above
        # Decode splits by waves (MINISGL_DECODE_SPLITS=waves) at the default workload's
        # contexts: part 42's batch-64 attention at context 1,024 ran 1,024 blocks over
        # 396 slots (2.6 waves, 3.5 TB/s). The 0.6B runner step A/B at context 1,024,
        # then both shapes' default workload with each rule.
        # waves4: the same rule below four waves of unsplit blocks (batch 128 too).
        for rule in waves waves4; do
            MINISGL_BENCH_RUNNER_ONLY=1 MINISGL_BENCH_BATCHES=64,128,256 MINISGL_BENCH_CONTEXT=1024 \
                MINISGL_BENCH_AB=MINISGL_DECODE_SPLITS=$rule bench_step qwen3-0.6b -ctx1024-$rule
        done
        offline_default qwen3-0.6b
        MINISGL_DECODE_SPLITS=waves offline_default qwen3-0.6b -waves
        MINISGL_DECODE_SPLITS=waves4 offline_default qwen3-0.6b -waves4
        offline_default qwen3-14b
        MINISGL_DECODE_SPLITS=waves offline_default qwen3-14b -waves
        rm -f "$out"/steps-*.csv  # the tool returns at most eight files
        ls -la "$out"
    elif [ "$part" = 44 ]; then
        rm "$out/env.log"  # already printed by the tee above
        # Where the default workload's prefill steps go (14 prompts of ~585 tokens, 8,190
        # tokens in one step, as its 19 prefill steps run: 14B at 77% of a serial bound,
        # 0.6B at 50%), kernel by kernel, and the 14B decode step at the context its
        # 256-sequence steps run at (~600; the engine measured 20.3 ms there). SM clock
        # and power sampled through the whole call (throttling under sustained GEMMs?).
        smi_start
        timeout 60 python3 scripts/gpu/sustained.py --seconds 6 2>&1 | tee "$out/sustained.log" | grep -E "^sustained|t= 0|t= 5"
        NCU_TABLES=0,2 NCU_LABELS=prefill-14x585,decode-b14 NCU_TAG=-prefill ncu_steps qwen3-0.6b 14 585 120
        NCU_TABLES=0,2 NCU_LABELS=prefill-14x585,decode-b14 NCU_TAG=-prefill ncu_steps qwen3-14b 14 585 220
        MINISGL_BENCH_RUNNER_ONLY=1 MINISGL_BENCH_BATCHES=128,192,256 MINISGL_BENCH_CONTEXT=600 \
            bench_step qwen3-14b -ctx600
        smi_stop part44
        ls -la "$out"
    elif [ "$part" = 45 ]; then
        rm "$out/env.log"  # already printed by the tee above
        # The ceilings with the GEMM rate the device holds at its power limit (part 44:
        # 675 TFLOP/s at 8192^3 held, 805 in the first milliseconds): both shapes' default
        # workload and long prompts, each with the SM clock and power sampled through it.
        for shape in qwen3-0.6b qwen3-14b; do
            smi_start
            offline_default $shape
            smi_stop "default workload $shape"
        done
        for shape in qwen3-0.6b qwen3-14b; do
            smi_start
            long_if_time $shape 480 110 "$out/long-$shape.log"
            smi_stop "long prompts $shape"
        done
        ls -la "$out"
    elif [ "$part" = 46 ]; then
        rm "$out/env.log"  # already printed by the tee above
        # Closing figures of the power round: model checks, the 0.6B runner step at the
        # issue's batch 1 / 64 / 256 (context 256), a second 14B default workload under
        # the held-rate ceiling (the run-to-run spread of part 45's 79.6%), with clock
        # and power sampled.
        nvidia-smi --query-gpu=power.limit,power.max_limit,clocks.max.sm --format=csv | tee "$out/smi.log"
        check_models
        smi_start
        MINISGL_BENCH_RUNNER_ONLY=1 MINISGL_BENCH_BATCHES=1,64,256 bench_step qwen3-0.6b
        smi_stop "runner step qwen3-0.6b"
        smi_start
        offline_default qwen3-14b
        smi_stop "default workload qwen3-14b"
        ls -la "$out"
    elif [ "$part" = 47 ]; then
        rm "$out/env.log"  # already printed by the tee above
        # cuBLAS's choice against cuBLASLt's candidates for the decode products of both
        # shapes at 16-256 rows, timed at full clock (each replayed once) and again held
        # at the power limit (1.5 s of the product first, then the candidates in turns):
        # is the algorithm cuBLAS picks at full clock still the fastest at ~1.4 GHz?
        smi_start
        for hold in 0 1.5; do
            MINISGL_BENCH_GEMM_HOLD=$hold timeout 200 "$bin" gpu-check --skip-ops --skip-models --skip-engine \
                --bench-model .gpu/qwen3-0.6b --report /tmp/gemm.md > "$out/gemm-hold$hold.log" 2>&1
            echo "gemm survey hold $hold rc=$?"
            grep "gemm algorithms" "$out/gemm-hold$hold.log" | tr ';' '\n' | grep -E "algorithms|m=(128|256)"
        done
        smi_stop "gemm survey"
        ls -la "$out"
    elif [ "$part" = 49 ]; then
        rm "$out/env.log"  # already printed by the tee above
        # qkv_rope_store with the head count a template argument (one head a warp back
        # to 30 registers: part 48's runtime count took 43 and made one head a warp 12%
        # slower than the old kernel): kernel checks, the 0.6B prefill step (auto, one
        # head a warp) and decode steps at batch 1 / 64 / 256 (auto, two heads a warp)
        # under Nsight Compute, long prompts, model checks, the default workload, then the
        # 14B prefill step if the call has time.
        check_ops --skip-bench
        for hw in 0 1; do
            MINISGL_ROPE_HEADS=$hw NCU_TABLES=0,2 NCU_LABELS=prefill-14x585,decode-b14 NCU_TAG=-prefill-rh$hw \
                ncu_steps qwen3-0.6b 14 585 120
        done
        for hw in 0 2; do
            MINISGL_ROPE_HEADS=$hw NCU_TAG=-rh$hw ncu_steps qwen3-0.6b 1,64,256 256 150
        done
        long_if_time qwen3-0.6b 400 80 "$out/long-qwen3-0.6b.log"
        check_models
        offline_default qwen3-0.6b
        if [ "$SECONDS" -lt 380 ]; then
            NCU_TABLES=0 NCU_LABELS=prefill-14x585 NCU_TAG=-prefill ncu_steps qwen3-14b 14 585 200
        else
            echo "no time left for the 14B prefill step (${SECONDS} s)"
        fi
        # The tool returns at most eight files: the checks' summaries are in the output.
        rm -f "$out"/steps-*.csv "$out"/gpu-check-ops.log "$out"/gpu-check-models.log
        ls -la "$out"
    elif [ "$part" = 50 ]; then
        rm "$out/env.log"  # already printed by the tee above
        check_ops --skip-bench
        for nt in 256 0; do
            MINISGL_NORM_THREADS=$nt NCU_TABLES=0,2 NCU_LABELS=prefill-14x585,decode-b14 NCU_TAG=-prefill-nt$nt \
                ncu_steps qwen3-0.6b 14 585 120
        done
        NCU_TAG=-nt0 ncu_steps qwen3-0.6b 1,64,256 256 150
        for nt in 256 0; do
            MINISGL_NORM_THREADS=$nt MINISGL_BENCH_RUNNER_ONLY=1 MINISGL_BENCH_BATCHES=1,64,256 \
                bench_step qwen3-0.6b -nt$nt
        done
        long_if_time qwen3-0.6b 470 80 "$out/long-qwen3-0.6b.log"
        check_models
        # The tool returns at most eight files: the checks' summaries are in the output.
        rm -f "$out"/gpu-check-ops.log "$out"/gpu-check-models.log
        ls -la "$out"
    elif [ "$part" = 51 ]; then
        rm "$out/env.log"  # already printed by the tee above
        check_ops --skip-bench
        # Random weights take ~0.85 s a GB to build and upload (Qwen3-14B: 25 s), so
        # Qwen3-32B's 65 GB take ~55 s before its run starts.
        for shape in llama-3.1-8b qwen3-32b; do
            smi_start
            OFFLINE_TIMEOUT=240 offline_default $shape
            smi_stop "default workload $shape"
        done
        for shape in llama-3.1-8b qwen3-32b; do
            smi_start
            long_if_time $shape 400 170 "$out/long-$shape.log"
            smi_stop "long prompts $shape"
        done
        if [ "$SECONDS" -lt 470 ]; then offline_default qwen3-0.6b; fi
        for shape in llama-3.1-8b qwen3-32b; do
            if [ "$SECONDS" -lt 480 ]; then
                MINISGL_BENCH_RUNNER_ONLY=1 MINISGL_BENCH_BATCHES=1,64,256 bench_step $shape
            else
                echo "no time left for the $shape runner step (${SECONDS} s)"
            fi
        done
        rm -f "$out"/gpu-check-ops.log
        # The tool returns at most eight files: every log and steps table in one archive.
        (cd "$out" && tar czf /tmp/part51-logs.tgz --exclude=bench.jsonl . &&
            find . -type f ! -name bench.jsonl -delete && mv /tmp/part51-logs.tgz .)
        ls -la "$out"
    elif [ "$part" = 52 ]; then
        rm "$out/env.log"  # already printed by the tee above
        for nt in 256 0; do
            MINISGL_NORM_THREADS=$nt offline_default qwen3-0.6b -nt$nt
        done
        MINISGL_NORM_THREADS=128 NCU_TAG=-nt128 ncu_steps qwen3-0.6b 64,256 256 100
        smi_start
        offline_default qwen3-14b
        smi_stop "default workload qwen3-14b"
        MINISGL_BENCH_RUNNER_ONLY=1 MINISGL_BENCH_BATCHES=1,64,256 bench_step qwen3-32b
        rm -f "$out"/steps-qwen3-0.6b-*.csv  # the tool returns at most eight files
        ls -la "$out"
    elif [ "$part" = 53 ]; then
        rm "$out/env.log"  # already printed by the tee above
        ncu_steps llama-3.1-8b 1,64,256 256 300
        long_if_time qwen3-14b 420 150 "$out/long-qwen3-14b.log"
        ls -la "$out"
    elif [ "$part" = 54 ]; then
        rm "$out/env.log"  # already printed by the tee above
        check_ops --skip-bench
        check_models
        ncu_steps llama-3.1-8b 1 256 200
        MINISGL_BENCH_RUNNER_ONLY=1 MINISGL_BENCH_BATCHES=1,64 bench_step llama-3.1-8b
        rm -f "$out"/gpu-check-models.log
        ls -la "$out"
    elif [ "$part" = 55 ]; then
        rm "$out/env.log"  # already printed by the tee above
        check_ops --skip-bench
        check_models
        ncu_steps qwen3-0.6b 1 256 60
        ncu_steps llama-3.1-8b 1 256 120
        rm -f "$out"/gpu-check-models.log
        gzip -f "$out"/gpu-check-ops.log
        ls -la "$out"
    elif [ "$part" = 56 ]; then
        rm "$out/env.log"  # already printed by the tee above
        MINISGL_BENCH_AB=MINISGL_GEMV_MAX_WEIGHT_MB=31 MINISGL_BENCH_RUNNER_ONLY=1 MINISGL_BENCH_BATCHES=1,2,4 \
            bench_step llama-3.1-8b -ab
        for mb in 32 31; do
            MINISGL_GEMV_MAX_WEIGHT_MB=$mb NCU_TAG=-gemv$mb ncu_steps llama-3.1-8b 1 256 150
        done
        ls -la "$out"
    elif [ "$part" = 60 ]; then
        rm "$out/env.log"  # already printed by the tee above
        check_ops --skip-bench
        grep -E "split rows|whole rows" "$out/gpu-check-ops.log" | grep -c PASS
        check_models
        export MINISGL_BENCH_RUNNER_ONLY=1 MINISGL_BENCH_BATCHES=1,2,4,8,16,64,128
        MINISGL_BENCH_AB=MINISGL_SAMPLE_SPLIT=0 bench_step qwen3-0.6b -split
        MINISGL_SAMPLE_SPLIT=0 MINISGL_BENCH_AB=MINISGL_SAMPLE_SPLIT=1 bench_step qwen3-0.6b -split-swapped
        unset MINISGL_BENCH_RUNNER_ONLY MINISGL_BENCH_BATCHES
        ncu_steps qwen3-0.6b 1,64 256 90
        MINISGL_SAMPLE_SPLIT=0 NCU_TAG=-nosplit ncu_steps qwen3-0.6b 1,64 256 90
        OFFLINE_TIMEOUT=90 offline_default qwen3-0.6b
        if [ "$SECONDS" -lt 380 ]; then offline_default qwen3-14b; fi
        gzip -f "$out"/gpu-check-ops.log
        rm -f "$out"/steps-*.csv "$out"/gpu-check-models.log  # the tool returns at most eight files
        ls -la "$out"
    elif [ "$part" = 61 ]; then
        rm "$out/env.log"  # already printed by the tee above
        export MINISGL_BENCH_RUNNER_ONLY=1
        MINISGL_BENCH_BATCHES=1,2,8,16,64 MINISGL_BENCH_AB=MINISGL_NULL_AB=1 bench_step qwen3-0.6b -null
        MINISGL_BENCH_BATCHES=1,8,16,64,100,128 MINISGL_BENCH_AB=MINISGL_SAMPLE_SPLIT=0 bench_step qwen3-0.6b -split
        if [ "$SECONDS" -lt 200 ]; then
            MINISGL_BENCH_BATCHES=1,8 MINISGL_BENCH_AB=MINISGL_NULL_AB=1 bench_step llama-3.1-8b -null
        fi
        ls -la "$out"
    elif [ "$part" = 62 ]; then
        rm "$out/env.log"  # already printed by the tee above
        export MINISGL_BENCH_RUNNER_ONLY=1 MINISGL_BENCH_NO_EAGER=1 MINISGL_BENCH_BATCHES=1,64,256
        MINISGL_BENCH_AB=MINISGL_NULL_AB=1 bench_step qwen3-0.6b -null
        BENCH_TIMEOUT=230 MINISGL_BENCH_AB=MINISGL_NULL_AB=1 bench_step qwen3-14b -null
        ls -la "$out"
    elif [ "$part" = 63 ]; then
        rm "$out/env.log"  # already printed by the tee above
        ncu_launch attn_decode_mma_hd128 decode 256
        ncu -i /tmp/prof-decode.ncu-rep --page raw --csv 2>&1 | gzip > "$out/ncu-raw-decode.csv.gz"
        ls -la "$out"
    elif [ "$part" = 64 ]; then
        rm "$out/env.log"  # already printed by the tee above
        check_ops
        grep -E "layer_chain" "$out/gpu-check-ops.log" | head -20
        grep -E "decode kernels, batch" "$out/gpu-check-ops.log" | head -12
        check_models
        export MINISGL_BENCH_RUNNER_ONLY=1 MINISGL_BENCH_NO_EAGER=1
        # One launch a layer at one row against the separate products; batch 8 never
        # chains (a control).
        MINISGL_BENCH_BATCHES=1,8 MINISGL_BENCH_AB=MINISGL_LAYER_CHAIN=0 bench_step qwen3-0.6b -chain
        ls -la "$out"
    elif [ "$part" = 66 ]; then
        rm "$out/env.log"  # already printed by the tee above
        # Where the chain's time goes: the batch-1 step kernel by kernel both ways, then
        # Nsight Compute's full set and per-line stall samples of one warm launch.
        ncu_steps qwen3-0.6b 1
        MINISGL_LAYER_CHAIN=0 NCU_TAG=-sep ncu_steps qwen3-0.6b 1
        ncu_launch layer_chain chain 1
        ls -la "$out"
    elif [ "$part" = 70 ] && [ "${PART70_QUICK:-0}" = 1 ]; then
        # Only the 0.6B batch-1 A/B against the separate attention (a minute of device time).
        rm "$out/env.log"  # already printed by the tee above
        export MINISGL_BENCH_RUNNER_ONLY=1 MINISGL_BENCH_NO_EAGER=1 MINISGL_BENCH_BATCHES=1
        MINISGL_BENCH_AB=MINISGL_CHAIN_ATTN=0 bench_step qwen3-0.6b -cattn
    elif [ "$part" = 70 ]; then
        rm "$out/env.log"  # already printed by the tee above
        check_ops --skip-bench
        grep -E "chain_attn|layer_chain" "$out/gpu-check-ops.log" | grep -E "FAIL|runs" | head -20
        check_models
        export MINISGL_BENCH_RUNNER_ONLY=1 MINISGL_BENCH_NO_EAGER=1
        MINISGL_BENCH_BATCHES=1,8 MINISGL_BENCH_AB=MINISGL_CHAIN_ATTN=0 bench_step qwen3-0.6b -cattn
        MINISGL_BENCH_CONTEXT=2048 MINISGL_BENCH_BATCHES=1 MINISGL_BENCH_AB=MINISGL_CHAIN_ATTN=0 \
            bench_step qwen3-0.6b -cattn-ctx2048
        MINISGL_BENCH_BATCHES=1 MINISGL_BENCH_AB=MINISGL_LAYER_CHAIN=0 bench_step qwen3-0.6b -chain
        MINISGL_BENCH_BATCHES=1,2 MINISGL_BENCH_AB=MINISGL_CHAIN_ATTN=0 bench_step llama-3.1-8b -cattn
        BENCH_TIMEOUT=150 MINISGL_BENCH_BATCHES=1 MINISGL_BENCH_AB=MINISGL_LAYER_CHAIN=0 bench_step qwen3-14b -chain
        unset MINISGL_BENCH_RUNNER_ONLY MINISGL_BENCH_NO_EAGER
        ncu_steps qwen3-0.6b 1
        ls -la "$out"
    elif [ "$part" = 77 ]; then
        rm "$out/env.log"  # already printed by the tee above
        # The layer chain as landed: every kernel check, its phase trace (LC_TRACE=1),
        # batch-1 A/Bs against the separate attention and of the stream's window (off at
        # 0.6B, on at 14B: the host's rule turned around), the 0.6B step at batch 1 / 64 /
        # 256 (a null A/B: medians of three rounds), model checks.
        # PART77_QUICK=1: the chain group of the kernel checks only, no 14B step.
        if [ "${PART77_QUICK:-0}" = 1 ]; then chain_check "" default; else check_ops --skip-bench; fi
        chain_check LC_TRACE=1 trace
        export MINISGL_BENCH_RUNNER_ONLY=1 MINISGL_BENCH_NO_EAGER=1 MINISGL_BENCH_BATCHES=1
        MINISGL_BENCH_AB=MINISGL_CHAIN_ATTN=0 bench_step qwen3-0.6b -cattn
        MINISGL_BENCH_AB=MINISGL_CHAIN_WINDOW=0 bench_step qwen3-0.6b -w0
        MINISGL_BENCH_BATCHES=1,64,256 MINISGL_BENCH_AB=MINISGL_NULL_AB=1 bench_step qwen3-0.6b -steps
        if [ "${PART77_QUICK:-0}" != 1 ]; then
            BENCH_TIMEOUT=150 MINISGL_BENCH_AB=MINISGL_CHAIN_WINDOW=2 bench_step qwen3-14b -w2
        fi
        unset MINISGL_BENCH_RUNNER_ONLY MINISGL_BENCH_NO_EAGER MINISGL_BENCH_BATCHES
        if [ "$SECONDS" -lt 440 ]; then check_models; fi
        gzip_ops_log
        pack_logs 77
    elif [ "$part" = 87 ]; then
        rm "$out/env.log"  # already printed by the tee above
        # Several layers a launch (layer_chain_span_g2): the chain checks (their chain_span
        # group runs 2-4 layers a launch against a launch a layer and the CPU), the model
        # checks (Qwen3-0.6B's 28 layers as one launch against the CPU), the 0.6B batch-1
        # A/Bs against a launch a layer (MINISGL_CHAIN_SPAN=1, contexts 256 and 2,048),
        # against a window of 1 chunk and 64-row attention splits (the two settings tuned
        # a launch a layer), Llama-3.1-8B (group 4: a launch a layer) against the separate
        # attention, the 0.6B steps at batch 1 / 64 / 256 (a null A/B), the 0.6B default
        # workload. PART87_TRACE=1: the phase trace too.
        chain_check "" default
        check_models
        export MINISGL_BENCH_RUNNER_ONLY=1 MINISGL_BENCH_NO_EAGER=1 MINISGL_BENCH_BATCHES=1
        MINISGL_BENCH_AB=MINISGL_CHAIN_SPAN=1 bench_step qwen3-0.6b -span1
        MINISGL_BENCH_CONTEXT=2048 MINISGL_BENCH_AB=MINISGL_CHAIN_SPAN=1 bench_step qwen3-0.6b -span1-ctx2048
        MINISGL_BENCH_AB=MINISGL_CHAIN_WINDOW=1 bench_step qwen3-0.6b -w1
        MINISGL_BENCH_AB=MINISGL_CHAIN_ATTN_PART=64 bench_step qwen3-0.6b -part64
        MINISGL_BENCH_AB=MINISGL_CHAIN_ATTN=0 bench_step llama-3.1-8b -cattn
        MINISGL_BENCH_BATCHES=1,64,256 MINISGL_BENCH_AB=MINISGL_NULL_AB=1 bench_step qwen3-0.6b -steps
        unset MINISGL_BENCH_RUNNER_ONLY MINISGL_BENCH_NO_EAGER MINISGL_BENCH_BATCHES
        if [ "${PART87_TRACE:-0}" = 1 ]; then chain_check LC_TRACE=1 trace; fi
        if [ "$SECONDS" -lt 330 ]; then OFFLINE_TIMEOUT=100 offline_default qwen3-0.6b; fi
        pack_logs 87
    elif [ "$part" = 91 ]; then
        rm "$out/env.log"  # already printed by the tee above
        # qkv_rope_store folded into the split-grid tensor-core decode (attn_decode_mma_rs_*,
        # MINISGL_DECODE_ROPE=0 restores the two launches): every kernel check (qkv_attn
        # compares the folded kernel with the CPU and with the two launches bit for bit),
        # the model checks, the runner A/B at 0.6B batch 8 / 64 / 256 (seven rounds), both
        # builds' decode steps under Nsight Compute, then (PART91_14B=1) the 14B A/B and
        # its default workload.
        check_ops --skip-bench
        grep -E "qkv_attn" "$out/gpu-check-ops.log" | grep -c "decode kernel" | sed 's/^/qkv_attn folded checks: /'
        check_models
        runner_ab qwen3-0.6b -rope "${PART91_BATCHES:-8,64,256}" MINISGL_DECODE_ROPE=0
        if [ "${PART91_14B:-0}" = 1 ]; then
            BENCH_TIMEOUT=220 runner_ab qwen3-14b -rope 64,256 MINISGL_DECODE_ROPE=0
        fi
        if [ "${PART91_14B:-0}" = 1 ]; then
            OFFLINE_TIMEOUT=170 offline_default qwen3-14b
        else
            ncu_steps qwen3-0.6b 8,64,256 256 150
            MINISGL_DECODE_ROPE=0 NCU_TAG=-rope0 ncu_steps qwen3-0.6b 8,64,256 256 150
        fi
        gzip_ops_log
        pack_logs 91
    elif [ "$part" = 92 ]; then
        rm "$out/env.log"  # already printed by the tee above
        # Why the folded decode kernel is slower at batch 64-256 (part 91): Nsight Compute's
        # full set of one launch of each build at 0.6B batch 256 and 64.
        ncu_launch "attn_decode_mma_rs_hd128" rs-b256 256
        MINISGL_DECODE_ROPE=0 ncu_launch "attn_decode_mma_hd128" plain-b256 256
        ncu_launch "attn_decode_mma_rs_hd128" rs-b64 64
        MINISGL_DECODE_ROPE=0 ncu_launch "attn_decode_mma_hd128" plain-b64 64
        pack_logs 92
    elif [ "$part" = 93 ]; then
        rm "$out/env.log"  # already printed by the tee above
        # The folded decode where its grid is at most two waves (MINISGL_DECODE_ROPE=waves,
        # the default at 343fdf2; one wave since) against never (0): kernel checks (the folded kernel forced on) and
        # model checks, the runner A/B at 0.6B batch 8 / 16 / 32 / 64 / 256 (64 and 256
        # fold nothing: a null A/B) and Llama-3.1-8B (group 4) batch 8 / 32, seven rounds
        # each, then the 0.6B default workload.
        check_ops --skip-bench
        check_models
        runner_ab qwen3-0.6b -rope 8,16,32,64,256 MINISGL_DECODE_ROPE=0
        runner_ab llama-3.1-8b -rope 8,32 MINISGL_DECODE_ROPE=0
        OFFLINE_TIMEOUT=120 offline_default qwen3-0.6b
        gzip_ops_log
        pack_logs 93
    elif [ "$part" = 94 ]; then
        rm "$out/env.log"  # already printed by the tee above
        # The 0.6B default workload with the folded decode by its rule and never, three
        # runs each in alternating order (part 93's single run was 1.7% under the last
        # round's, in the class of 65+ sequences, which the rule does not fold).
        for i in 1 2 3; do
            MINISGL_DECODE_ROPE=0 OFFLINE_TIMEOUT=60 offline_default qwen3-0.6b -off$i
            OFFLINE_TIMEOUT=60 offline_default qwen3-0.6b -waves$i
        done
        grep -h "output tok/s" "$out"/offline-qwen3-0.6b-*.log
        pack_logs 94
    elif [ "$part" = 95 ]; then
        rm "$out/env.log"  # already printed by the tee above
        # The round's closing figures: the fold where the decode grid is one wave at most
        # (the default) against never, with kernel and model checks first; the 0.6B A/B at
        # batch 1 (the chain: a null A/B), 2, 4, 8, 16 (no fold now), 64 and 256 (no fold).
        check_ops --skip-bench
        check_models
        runner_ab qwen3-0.6b -rope 1,2,4,8,16,64,256 MINISGL_DECODE_ROPE=0
        gzip_ops_log
        pack_logs 95
    elif [ "$part" = 96 ]; then
        rm "$out/env.log"  # already printed by the tee above
        # The skinny kernel at 5-8 rows (MINISGL_GEMV_ROWS=8, tensor-core build) against
        # cuBLAS (the default stops at 4), at 0.6B batch 5 / 6 / 8 and Llama-3.1-8B batch 8:
        # with the norm in the products' prologue (the default), then with it as its own
        # launch on both sides (MINISGL_NORM_PROLOGUE=0; 2026-12-02 guessed the prologue's
        # m-row staging cost the 8-row step what its products gained).
        runner_ab qwen3-0.6b -rows8 5,6,8 MINISGL_GEMV_ROWS=8
        MINISGL_NORM_PROLOGUE=0 runner_ab qwen3-0.6b -rows8-np0 5,6,8 MINISGL_GEMV_ROWS=8
        runner_ab llama-3.1-8b -rows8 8 MINISGL_GEMV_ROWS=8
        pack_logs 96
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
    elif [ "$part" = 101 ]; then
        rm "$out/env.log"  # already printed by the tee above
        # The default workload with the SM clock and power sampled (the 14B figure has
        # followed the held clock between machines: 77.4-80.3%), then the same on
        # Llama-3.1-8B, a shape the issue does not list (75.9% on 2026-12-04).
        for s in qwen3-14b llama-3.1-8b; do
            smi_start
            OFFLINE_TIMEOUT=170 offline_default $s
            smi_stop "$s default"
        done
        pack_logs 101
    elif [ "$part" = 103 ]; then
        rm "$out/env.log"  # already printed by the tee above
        # The split-grid decode's blocks longest context first (MINISGL_DECODE_ORDER, on
        # by default) with the lean decode of part 102: every op check (each decode case
        # also in the batch's order), the fixture models against HF and the CPU, the
        # decode kernels' table once (its "batch order" column), then the default
        # workload of both shapes with the order and without it, in one call (the
        # runner bench's uniform contexts cannot show an order).
        check_ops --skip-bench
        check_models
        MINISGL_BENCH_DECODE_ONLY=1 timeout 60 "$bin" gpu-check --skip-ops --skip-models \
            --skip-engine --report /tmp/dk.md > "$out/decode-kernels.log" 2>&1
        echo "decode kernels rc=$?"; grep -E "decode kernels, .*(ragged|256 x ctx 1100)" "$out/decode-kernels.log" | head -6
        for order in 1 0; do
            smi_start
            MINISGL_DECODE_ORDER=$order OFFLINE_TIMEOUT=$((590 - SECONDS)) \
                offline_default qwen3-14b -order$order
            smi_stop "14b DECODE_ORDER=$order"
        done
        for order in 0 1; do
            if [ "$SECONDS" -lt 530 ]; then
                MINISGL_DECODE_ORDER=$order OFFLINE_TIMEOUT=$((595 - SECONDS)) \
                    offline_default qwen3-0.6b -order$order
            else
                echo "no time left for the 0.6B default workload DECODE_ORDER=$order (${SECONDS} s)"
            fi
        done
        gzip_ops_log
        pack_logs 103
    elif [ "$part" = 104 ]; then
        rm "$out/env.log"  # already printed by the tee above
        # Issue 11's default-workload rows with the commit's defaults (the lean decode,
        # longest context first), clock sampled: a short call for a session whose device
        # time is nearly spent. 14B first, the 0.6B while time is left.
        smi_start
        OFFLINE_TIMEOUT=200 offline_default qwen3-14b
        smi_stop "14b default"
        if [ "$SECONDS" -lt 230 ]; then OFFLINE_TIMEOUT=60 offline_default qwen3-0.6b; fi
        pack_logs 104
    elif [ "$part" = 105 ]; then
        rm "$out/env.log"  # already printed by the tee above
        # The Hopper prefill kernels' tiles longest causal span first across a step's
        # sequences (MINISGL_PREFILL_ORDER, on by default): every op check (the prefill
        # cases, prefix + extend among them), the 0.6B long prompts (a prefix + extend
        # chunk beside fresh prompts in most steps) with the order, without it and with
        # it again; on an H200 also the 14B default workload (issue 11's row).
        check_ops --skip-bench
        for order in 1 0 1; do
            MINISGL_PREFILL_ORDER=$order timeout 60 "$bin" bench offline --random-weights .gpu/qwen3-0.6b \
                --device cuda --shape qwen3-0.6b "${long[@]}" --jsonl "$jl" >> "$out/long-qwen3-0.6b-order$order.log" 2>&1
            echo "0.6B long prompts PREFILL_ORDER=$order rc=$?"
            grep -E "output tok/s|prefill only" "$out/long-qwen3-0.6b-order$order.log" | tail -2
        done
        if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
            smi_start
            OFFLINE_TIMEOUT=200 offline_default qwen3-14b
            smi_stop "14b default"
        fi
        gzip_ops_log
        pack_logs 105
    elif [ "$part" = 106 ]; then
        rm "$out/env.log"  # already printed by the tee above
        # The Hopper prefill tiles by sequence (MINISGL_PREFILL_ORDER=seqs, the default
        # since 2026-12-05's fifteenth session) against the batch's order and against
        # every tile by its span (tiles, the default before): the prefill kernel under
        # the three orders in alternating rounds on workload-shaped steps (outputs
        # compared bit for bit), every op check, the 0.6B long prompts under each order,
        # then, on an H200, the 14B default workload (issue 11's row).
        MINISGL_BENCH_PREFILL_ONLY=1 timeout 120 "$bin" gpu-check --skip-ops --skip-models --skip-engine \
            --report /tmp/gpu-check-prefill.md > "$out/gpu-check-prefill-orders.log" 2>&1
        echo "prefill orders rc=$?"; grep -E "prefill order|rror" "$out/gpu-check-prefill-orders.log"
        check_ops --skip-bench
        for order in seqs tiles 0 seqs; do
            MINISGL_PREFILL_ORDER=$order timeout 60 "$bin" bench offline --random-weights .gpu/qwen3-0.6b \
                --device cuda --shape qwen3-0.6b "${long[@]}" --jsonl "$jl" >> "$out/long-qwen3-0.6b-order$order.log" 2>&1
            echo "0.6B long prompts PREFILL_ORDER=$order rc=$?"
            grep -E "output tok/s|prefill only" "$out/long-qwen3-0.6b-order$order.log" | tail -2
        done
        if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && [ "$SECONDS" -lt 400 ]; then
            smi_start
            OFFLINE_TIMEOUT=$((590 - SECONDS)) offline_default qwen3-14b
            smi_stop "14b default"
        fi
        gzip_ops_log
        pack_logs 106
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
    elif [ "$part" = 109 ]; then
        rm "$out/env.log"  # already printed by the tee above
        timeline_of() {  # SHAPE TIMEOUT: the eager decode step kernel by kernel
            timeout "$2" "$bin" gpu-check --skip-ops --skip-bench --timeline-model .gpu/$1 \
                --timeline-batches 1,4,16,64 --timeline-context 1024 --timeline-out "$out/timeline-$1.md" \
                --report /tmp/timeline-report.md > "$out/timeline-$1.log" 2>&1
            echo "timeline $1 rc=$?"; grep -hE "^###|^Σ|rror" "$out/timeline-$1.md" "$out/timeline-$1.log" | head -12
        }
        timeline_of llama-3.1-8b 150
        MINISGL_BENCH_RUNNER_ONLY=1 MINISGL_BENCH_NO_EAGER=1 MINISGL_BENCH_CONTEXT=1024 \
            MINISGL_BENCH_BATCHES=1,2,4,8,16,32,64 BENCH_TIMEOUT=150 bench_step llama-3.1-8b -ctx1024
        if [ "$SECONDS" -lt 330 ]; then timeline_of qwen3-14b $((560 - SECONDS)); fi
        pack_logs 109
    elif [ "$part" = 110 ]; then
        rm "$out/env.log"  # already printed by the tee above
        MINISGL_BENCH_GEMV_ONLY=1 BENCH_TIMEOUT=200 bench_step qwen3-0.6b -gemv
        grep -E "linear in graphs" "$out/gpu-check-bench-qwen3-0.6b-gemv.log" | tr ';' '\n'
        MINISGL_BENCH_CONTEXT=1024 BENCH_TIMEOUT=200 runner_ab llama-3.1-8b -gemv16 2,3,4 MINISGL_GEMV_MAX_WEIGHT_MB=16
        pack_logs 110
    elif [ "$part" = 111 ]; then
        rm "$out/env.log"  # already printed by the tee above
        check_ops --skip-bench
        chain_check "" rows
        MINISGL_CHAIN_ROWS=4 check_models
        rows_ab() {  # SHAPE: the rows chain against the separate products
            if [ "$SECONDS" -lt 420 ]; then
                MINISGL_BENCH_CONTEXT=1024 BENCH_TIMEOUT=$((590 - SECONDS)) \
                    runner_ab $1 -rows 2,3,4 MINISGL_CHAIN_ROWS=4
            else
                echo "no time left for the $1 rows A/B (${SECONDS} s)"
            fi
        }
        tc_two_ab() {  # SHAPE: two-row products through the tensor-core gemv or the scalar one
            if [ "$SECONDS" -lt "$2" ]; then
                MINISGL_BENCH_CONTEXT=1024 BENCH_TIMEOUT=$((590 - SECONDS)) \
                    runner_ab $1 -tc2 2 MINISGL_GEMV_TC_TWO=0
            else
                echo "no time left for the $1 two-row gemv A/B (${SECONDS} s)"
            fi
        }
        rows_ab qwen3-0.6b
        tc_two_ab qwen3-0.6b 420
        rows_ab llama-3.1-8b
        rows_ab qwen3-14b
        tc_two_ab llama-3.1-8b 480
        gzip_ops_log
        pack_logs 111
    elif [ "$part" = 112 ]; then
        rm "$out/env.log"  # already printed by the tee above
        chain_check "" rows2
        check_models_engine 200
        runner_ab qwen3-0.6b -rows1 1,2,4,8,64,256 MINISGL_CHAIN_ROWS=1
        OFFLINE_TIMEOUT=$((590 - SECONDS)) offline_default qwen3-0.6b
        pack_logs 112
    elif [ "$part" = 113 ]; then
        rm "$out/env.log"  # already printed by the tee above
        shared_prefix_popular 240
        pack_logs 113
    elif [ "$part" = 114 ]; then
        rm "$out/env.log"  # already printed by the tee above
        # The attention chain at two sequences (layer_chain_span_g2_r2): its checks
        # against the CPU, the fixture models and engine (the random Qwen3-0.6B at two
        # sequences runs it), the 0.6B graph steps A/B against MINISGL_CHAIN_ATTN_ROWS=1
        # (the attention as its own launches before layer_chain_r2) at contexts 256 and
        # 1,024; then part 113 and the 0.6B default workload while the call has time.
        chain_check "" span-rows
        check_models_engine 200
        runner_ab qwen3-0.6b -attnrows1 1,2,4 MINISGL_CHAIN_ATTN_ROWS=1
        MINISGL_BENCH_CONTEXT=1024 runner_ab qwen3-0.6b -attnrows1-ctx1024 2 MINISGL_CHAIN_ATTN_ROWS=1
        if [ "$SECONDS" -lt 380 ]; then
            shared_prefix_popular $((560 - SECONDS))
        else
            echo "no time left for the popular shared-prefix workload (${SECONDS} s)"
        fi
        if [ "$SECONDS" -lt 480 ]; then
            OFFLINE_TIMEOUT=$((590 - SECONDS)) offline_default qwen3-0.6b
        else
            echo "no time left for the 0.6B default workload (${SECONDS} s)"
        fi
        pack_logs 114
    elif [ "$part" = 115 ]; then
        rm "$out/env.log"  # already printed by the tee above
        # Where the chain's consume loop spends its time: two timing-only builds (their
        # results are wrong) A/B'd against the default at batch 1 and 2, context 256:
        # LC_EXP_NOX reads x once a chunk (as if each warp held its columns of x in
        # registers), LC_EXP_NORED drops the per-row shuffle reduction.
        # (Run once, 2026-12-06, on 1d21513 with the two #ifdef blocks added; they were
        # removed after it: this part no longer has its builds.)
        runner_ab qwen3-0.6b -nox 1,2 MINISGL_KERNEL_DEFINES=LC_EXP_NOX=1
        runner_ab qwen3-0.6b -nored 1,2 MINISGL_KERNEL_DEFINES=LC_EXP_NORED=1
        if [ "$SECONDS" -lt 400 ]; then
            runner_ab llama-3.1-8b -nox 1,2 MINISGL_KERNEL_DEFINES=LC_EXP_NOX=1
        fi
        pack_logs 115
    elif [ "$part" = 116 ]; then
        rm "$out/env.log"  # already printed by the tee above
        # The chain's row sums two to a reduction and stored where a run holds the whole
        # row (lc_row_done, opt-in until this part: MINISGL_KERNEL_DEFINES=LC_REDUCE_PAIRS=1):
        # the chain checks and the fixture models with it, then the graph steps A/B
        # against the default at batch 1 and 2: 0.6B at contexts 256 and 1,024, then
        # Llama-3.1-8B; the 0.6B eager step kernel by kernel at batch 1, 2 and 4 (where
        # the two-row step's time outside the span goes) and the chain's phase trace at
        # one and two sequences (default build), while the call has time.
        # PART_LIMIT (s, default 480): the wall time the call may take; each later step
        # runs only while it fits.
        timeline_0_6b() {
            if fits 60; then
                timeout $((local_limit - SECONDS)) "$bin" gpu-check --skip-ops --skip-bench --timeline-model .gpu/qwen3-0.6b \
                    --timeline-batches 1,2,4 --timeline-context 256 --timeline-out "$out/timeline-qwen3-0.6b.md" \
                    --report /tmp/timeline-report.md > "$out/timeline-qwen3-0.6b.log" 2>&1
                echo "timeline qwen3-0.6b rc=$?"; grep -hE "^###|^Σ|rror" "$out/timeline-qwen3-0.6b.md" "$out/timeline-qwen3-0.6b.log" | head -12
            fi
        }
        define_round LC_REDUCE_PAIRS=1 pairs check_models LC_TRACE=1 trace timeline_0_6b
        pack_logs 116
    elif [ "$part" = 117 ]; then
        rm "$out/env.log"  # already printed by the tee above
        # The three exchanges of the chain's product phases (after o, gate_up and down)
        # through words that carry their epoch (lc_xch_put / lc_xch_load), no grid barrier:
        # opt-in until this part (MINISGL_KERNEL_DEFINES=LC_XCH=1). Checks first, then the
        # A/B at batch 1 and 2, the fixture models and engine (batches of 1-2 rows mixed,
        # graphs), the phase trace, the A/B at context 1,024, and Llama-3.1-8B's.
        # (Run once, 2026-12-06, on 77d112d; the LC_XCH build was removed after it, see
        # docs/results/gpu-2026-12-06-xch.md.)
        define_round LC_XCH=1 xch "check_models_engine 150" "LC_XCH=1 LC_TRACE=1" xch-trace true
        pack_logs 117
    elif [ "$part" = 118 ]; then
        rm "$out/env.log"  # already printed by the tee above
        local_limit=${PART_LIMIT:-240}
        MINISGL_BENCH_RUNNER_ONLY=1 MINISGL_BENCH_NO_EAGER=1 MINISGL_BENCH_BATCHES=1,2,64,256 \
            BENCH_TIMEOUT=100 bench_step qwen3-0.6b
        if [ "$SECONDS" -lt $((local_limit - 40)) ]; then
            OFFLINE_TIMEOUT=$((local_limit - 5 - SECONDS)) offline_default qwen3-0.6b
        else
            echo "no time left for the 0.6B default workload (${SECONDS} s)"
        fi
        pack_logs 118
    elif [ "$part" = 119 ]; then
        rm "$out/env.log"  # already printed by the tee above
        local_limit=${PART_LIMIT:-500}
        chain_check "" staged
        check_models
        context_abs staged MINISGL_KERNEL_DEFINES=LC_ATT_STAGED=0 - 256 2048 8192 16384
        context_abs separate MINISGL_CHAIN_ATTN=0 - 8192 16384
        context_abs staged MINISGL_KERNEL_DEFINES=LC_ATT_STAGED=0 8192
        pack_logs 119
    elif [ "$part" = 120 ]; then
        rm "$out/env.log"  # already printed by the tee above
        chain_check "LC_TRACE=1" trace
        chain_check "LC_TRACE=1 LC_ATT_STAGED=0" trace-regs
        MINISGL_BENCH_DECODE_ONLY=1 BENCH_TIMEOUT=240 bench_step qwen3-0.6b -decode
        grep -E "decode kernels, batch [12] x" "$out/gpu-check-bench-qwen3-0.6b-decode.log" | head -6
        pack_logs 120
    elif [ "$part" = 121 ]; then
        rm "$out/env.log"  # already printed by the tee above
        local_limit=${PART_LIMIT:-400}
        context_abs hold MINISGL_CHAIN_HOLD=1048576 8192 256 2048 8192 16384
        pack_logs 121
    elif [ "$part" = 122 ]; then
        rm "$out/env.log"  # already printed by the tee above
        local_limit=${PART_LIMIT:-400}
        chain_check "" reuse
        check_models
        context_abs reuse MINISGL_KERNEL_DEFINES=LC_STEP_REUSE=0 "" 256 1024 4096
        pack_logs 122
    elif [ "$part" = 123 ]; then
        rm "$out/env.log"  # already printed by the tee above
        local_limit=${PART_LIMIT:-400}
        heads=MINISGL_KERNEL_DEFINES=DECODE_HEADS_FIRST=1
        MINISGL_BENCH_DECODE_ONLY=1 BENCH_TIMEOUT=150 bench_step qwen3-0.6b -decode
        MINISGL_BENCH_DECODE_ONLY=1 BENCH_TIMEOUT=150 MINISGL_KERNEL_DEFINES=DECODE_HEADS_FIRST=1 \
            bench_step qwen3-0.6b -decode-heads
        MINISGL_KERNEL_DEFINES=DECODE_HEADS_FIRST=1 check_models
        for c in 4096 256; do
            if fits 40; then
                MINISGL_BENCH_CONTEXT=$c runner_ab qwen3-0.6b "-heads-ctx$c" 4,8 "$heads"
            fi
        done
        if fits 220; then
            MINISGL_BENCH_CONTEXT=8192 BENCH_TIMEOUT=$((local_limit - SECONDS)) \
                runner_ab qwen3-14b -heads-ctx8192 1,4 "$heads"
        fi
        pack_logs 123
    elif [ "$part" = 124 ]; then
        rm "$out/env.log"  # already printed by the tee above
        # One span launch a decode step: skip the first step's, profile the second's.
        ncu_launch layer_chain_span_g2 span-ctx16384 1 16384 1
        ncu_launch layer_chain_span_g2 span-ctx256 1 256 1
        pack_logs 124
    elif [ "$part" = 125 ]; then
        rm "$out/env.log"  # already printed by the tee above
        local_limit=${PART_LIMIT:-240}
        chain_check LC_ATT_STAGED=1 staged
        context_abs staged MINISGL_KERNEL_DEFINES=LC_ATT_STAGED=1 - 16384 2048 256
        pack_logs 125
    elif [ "$part" = 126 ]; then
        rm "$out/env.log"  # already printed by the tee above
        local_limit=${PART_LIMIT:-400}
        check_models_engine 150
        context_abs registers MINISGL_KERNEL_DEFINES=LC_ATT_STAGED=0 8192 16384 4096
        pack_logs 126
    elif [ "$part" = 127 ]; then
        rm "$out/env.log"  # already printed by the tee above
        local_limit=${PART_LIMIT:-480}
        check_ops --skip-bench
        MINISGL_BENCH_MIXED_ONLY=1 timeout 150 "$bin" gpu-check --skip-ops --skip-models --skip-engine \
            --report /tmp/gpu-check-bench.md > "$out/gpu-check-bench-mixed.log" 2>&1
        echo "gpu-check bench mixed rc=$?"
        grep -E "mixed step|rror" "$out/gpu-check-bench-mixed.log"
        for split in 1 0; do
            if ! fits 100; then echo "no time left for the replay with MINISGL_MIXED_SPLIT=$split"; continue; fi
            MINISGL_MIXED_SPLIT=$split timeout $((local_limit - SECONDS - 20)) "$bin" compare --backend cuda \
                --random-weights .gpu/qwen3-0.6b --trace .gpu/workloads/mooncake_conversation_400.jsonl \
                --num-requests 100 --time-scale 0.25 --max-input-len 32768 --max-output-len 256 \
                --page-size 16 --seed 0 --policy fcfs=native \
                --policy sarathi=.gpu/plugins/minisgl_example_sarathi.wasm \
                --out "$out/replay-split$split" > "$out/replay-split$split.log" 2>&1
            echo "replay MINISGL_MIXED_SPLIT=$split rc=$?"
            grep -E "^\| (fcfs|sarathi) " "$out/replay-split$split/results.md" 2>/dev/null
        done
        if fits 130; then check_models; else echo "no time left for the fixture models"; fi
        pack_logs 127
    elif [ "$part" = 128 ]; then
        rm "$out/env.log"  # already printed by the tee above
        local_limit=${PART_LIMIT:-420}
        chat_replay qwen3-14b 400 0.25 replay14b
        pack_logs 128
    elif [ "$part" = 129 ]; then
        rm "$out/env.log"  # already printed by the tee above
        local_limit=${PART_LIMIT:-400}
        chat_replay llama-3.1-8b 600 0.15 replay8b
        pack_logs 129
    elif [ "$part" = 130 ]; then
        rm "$out/env.log"  # already printed by the tee above
        local_limit=${PART_LIMIT:-300}
        for shape in qwen3-14b qwen3-0.6b; do
            for run in fcfs sarathi; do
                if ! fits 60; then echo "no time left for $shape under $run"; continue; fi
                args=""
                [ "$run" = sarathi ] && args="--scheduler .gpu/plugins/minisgl_example_sarathi.wasm"
                OFFLINE_ARGS="$args" OFFLINE_TIMEOUT=$((local_limit - SECONDS - 5)) offline_default "$shape" "-$run"
            done
        done
        pack_logs 130
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
    elif [ "$part" = 136 ]; then
        # After the sampler stopped copying logits no row processes (MINISGL_SAMPLE_COPY=1
        # restores the copy), the fold's qkv bias moved into the rope kernel and the LM
        # head learned to write bf16 logits (MINISGL_LOGITS_BF16=1), 2026-12-07: every op
        # check (sampling and fold groups included); the fixtures and the engine with the
        # defaults; the fixture models with the fold on; the fixtures and the engine with
        # bf16 logits; then the 0.6B runner A/Bs (the copy at batch 8 / 64 / 256, the fold
        # and bf16 logits on top of the new default at 64 / 256) and its default workload
        # as built, with the copy, with the fold, with bf16 logits; while the call has time
        # (PART_LIMIT, default 560) the fold's 14B runner A/B.
        rm "$out/env.log"  # already printed by the tee above
        local_limit=${PART_LIMIT:-560}
        check_ops --skip-bench
        grep -E " fold .*bias|sampling .*(in place|bf16)" "$out/gpu-check-ops.log" | head -12
        gzip_ops_log
        fixture_checks 150 models-engine
        MINISGL_FOLD_NORMS=1 fixture_checks 100 models-fold1 --skip-engine
        grep -E "^(ok|FAIL) +model" "$out/gpu-check-models-engine.log" "$out/gpu-check-models-fold1.log" | cut -c1-300
        if fits 330; then MINISGL_LOGITS_BF16=1 fixture_checks 150 models-engine-bf16; fi
        MINISGL_SAMPLE_COPY=1 runner_ab qwen3-0.6b -nocopy 8,64,256 MINISGL_SAMPLE_COPY=0
        grep -E "A/B" "$out/gpu-check-bench-qwen3-0.6b-nocopy.log"
        for v in MINISGL_FOLD_NORMS MINISGL_LOGITS_BF16; do
            if fits 200; then
                runner_ab qwen3-0.6b "-$v" 64,256 "$v=1"
                grep -E "A/B" "$out/gpu-check-bench-qwen3-0.6b-$v.log"
            fi
        done
        for v in none MINISGL_SAMPLE_COPY MINISGL_FOLD_NORMS MINISGL_LOGITS_BF16; do
            if fits 55; then
                k=$v; [ "$v" = none ] && k=MINISGL_UNUSED
                eval "$k=1 OFFLINE_TIMEOUT=50 offline_default qwen3-0.6b -$v"
            else
                echo "no time left for the default workload with $v"
            fi
        done
        if fits 200; then
            BENCH_TIMEOUT=$((local_limit - SECONDS - 10)) runner_ab qwen3-14b -fold 64,256 MINISGL_FOLD_NORMS=1
            grep -E "A/B" "$out/gpu-check-bench-qwen3-14b-fold.log"
        else
            echo "no time left for the 14B fold A/B"
        fi
        pack_logs 136
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
    elif [ "$part" = 139 ]; then
        # Where the fold's accuracy goes (gpu-2026-12-07-sample.md §3): the fixture models
        # alone over six prompt draws under five settings: fold off / on; on with its
        # deferral off (folded weights, unit norms: the rounding of g · W alone); decode
        # rows through cuBLAS too (MINISGL_GEMV_ROWS=0), fold off and on (the deferral on
        # every row, no gemv prologue). One log each, summarised by
        # scripts/diag/fold_seeds.py.
        rm "$out/env.log"  # already printed by the tee above
        models=()
        for m in tests/fixtures/models/*/; do models+=(--model "$m"); done
        for cfg in "fold0:MINISGL_FOLD_NORMS=0" "fold1:MINISGL_FOLD_NORMS=1" \
            "fold1-nodefer:MINISGL_FOLD_NORMS=1 MINISGL_FOLD_DEFER=0" \
            "fold0-gemv0:MINISGL_FOLD_NORMS=0 MINISGL_GEMV_ROWS=0" \
            "fold1-gemv0:MINISGL_FOLD_NORMS=1 MINISGL_GEMV_ROWS=0"; do
            tag=${cfg%%:*}
            env ${cfg#*:} timeout 150 "$bin" gpu-check --skip-ops --skip-bench --skip-engine \
                --model-seeds 6 "${models[@]}" --report /tmp/gpu-check-$tag.md \
                > "$out/gpu-check-seeds-$tag.log" 2>&1
            echo "seeds $tag rc=$?"; grep -E "checks, " "$out/gpu-check-seeds-$tag.log"
        done
        python3 scripts/diag/fold_seeds.py "$out"/gpu-check-seeds-*.log | tee "$out/fold-seeds.md"
        pack_logs 139
    elif [ "$part" = 138 ]; then
        # The fold's accuracy over six prompt draws instead of one (gpu-2026-12-07-sample.md
        # §3: one draw's minimum cosine swings more than the fold moves it in emulation):
        # the fixture models with MINISGL_FOLD_NORMS=0 and =1, --model-seeds 6, each row's
        # mean 1 - cosine against the CPU reference and the f32 CPU in the log.
        rm "$out/env.log"  # already printed by the tee above
        for f in 0 1; do
            MINISGL_FOLD_NORMS=$f fixture_checks 240 "models-seeds-fold$f" --skip-engine --model-seeds 6
        done
        pack_logs 138
    elif [ "$part" = 137 ]; then
        # bf16 logits (MINISGL_LOGITS_BF16=1) for its default: the fixtures and the engine
        # with it (part 136 ran out of time for them), the 0.6B runner A/B at batch 1 / 8 /
        # 128 / 256, and the 0.6B default workload three times each way, alternating. Leaves
        # /tmp/bf16-ok when the checks passed, for a table run after it in the same call.
        rm "$out/env.log"  # already printed by the tee above
        rm -f /tmp/bf16-ok
        MINISGL_LOGITS_BF16=1 fixture_checks 150 models-engine-bf16
        if grep -qE "^[0-9]+ checks, 0 failed" "$out/gpu-check-models-engine-bf16.log"; then
            touch /tmp/bf16-ok
        fi
        grep -E "^(ok|FAIL) +model" "$out/gpu-check-models-engine-bf16.log" | cut -c1-200
        runner_ab qwen3-0.6b -bf16 1,8,128,256 MINISGL_LOGITS_BF16=1
        grep -E "A/B" "$out/gpu-check-bench-qwen3-0.6b-bf16.log"
        for v in MINISGL_LOGITS_BF16 none MINISGL_LOGITS_BF16 none MINISGL_LOGITS_BF16 none; do
            k=$v; [ "$v" = none ] && k=MINISGL_UNUSED
            n=$(ls "$out" | grep -c "^offline-qwen3-0.6b-$v")
            eval "$k=1 OFFLINE_TIMEOUT=40 offline_default qwen3-0.6b -$v-$n"
        done
        pack_logs 137
    elif [ "$part" = 133 ]; then
        # The norms before qkv and gate_up folded into their weights (MINISGL_FOLD_NORMS=1):
        # every op check (the fold group among them) with it on, the 0.6B runner A/B at
        # batch 8 / 64 / 128 / 256, then while the call has time (PART_LIMIT, default 560)
        # the models and the engine with it on and the 0.6B default workload on and off.
        rm "$out/env.log"  # already printed by the tee above
        local_limit=${PART_LIMIT:-560}
        MINISGL_FOLD_NORMS=1 check_ops --skip-bench
        grep -E " fold " "$out/gpu-check-ops.log" | head -40
        gzip_ops_log
        runner_ab qwen3-0.6b -fold 8,64,128,256 MINISGL_FOLD_NORMS=1
        grep -E "A/B" "$out/gpu-check-bench-qwen3-0.6b-fold.log"
        if fits 100; then
            MINISGL_FOLD_NORMS=1 check_models_engine $((local_limit - SECONDS - 10))
        else
            echo "no time left for the model and engine checks"
        fi
        for f in 1 0; do
            if fits 75; then
                MINISGL_FOLD_NORMS=$f OFFLINE_TIMEOUT=70 offline_default qwen3-0.6b "-fold$f"
            else
                echo "no time left for the default workload with MINISGL_FOLD_NORMS=$f"
            fi
        done
        pack_logs 133
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
    elif [ "$part" = 88 ]; then
        rm "$out/env.log"  # already printed by the tee above
        # gather_rows without a copy where a step samples every row (every decode step):
        # the model checks (their decode steps take that path, against the CPU and HF),
        # every kernel check (the gather group samples subsets); the 0.6B steps at batch
        # 1 / 64 / 256 (a null A/B). (Call 6 of 2026-12-04-span also A/B'd LC_NORM_PREFETCH,
        # the next layer's q/k norms into L2 in a span: no difference, removed.)
        check_models
        check_ops --skip-bench
        grep -E "gather" "$out/gpu-check-ops.log" | head -6
        export MINISGL_BENCH_RUNNER_ONLY=1 MINISGL_BENCH_NO_EAGER=1 MINISGL_BENCH_BATCHES=1
        MINISGL_BENCH_BATCHES=1,64,256 MINISGL_BENCH_AB=MINISGL_NULL_AB=1 bench_step qwen3-0.6b -steps
        unset MINISGL_BENCH_RUNNER_ONLY MINISGL_BENCH_NO_EAGER MINISGL_BENCH_BATCHES
        gzip_ops_log
        pack_logs 88
    elif [ "$part" = 84 ]; then
        rm "$out/env.log"  # already printed by the tee above
        # The window at 14B and 8B again, seven rounds each (the 14B rounds of part 83 (call 6) spread
        # 7.6-8.6 ms), with the SM clock and power sampled.
        export MINISGL_BENCH_RUNNER_ONLY=1 MINISGL_BENCH_NO_EAGER=1 MINISGL_BENCH_BATCHES=1 MINISGL_BENCH_AB_ROUNDS=7
        smi_start
        BENCH_TIMEOUT=200 MINISGL_BENCH_AB=MINISGL_CHAIN_WINDOW=2 bench_step qwen3-14b -w2
        smi_stop 14b-w2
        smi_start
        MINISGL_BENCH_AB=MINISGL_CHAIN_WINDOW=2 bench_step llama-3.1-8b -w2
        smi_stop 8b-w2
        unset MINISGL_BENCH_RUNNER_ONLY MINISGL_BENCH_NO_EAGER MINISGL_BENCH_BATCHES MINISGL_BENCH_AB_ROUNDS
        pack_logs 84
    elif [ "$part" = 85 ]; then
        rm "$out/env.log"  # already printed by the tee above
        # The window as a launch argument the host chooses (2 at 0.6B, 0 at 8B and 14B):
        # the chain checks, the 0.6B batch-1 A/B against MINISGL_CHAIN_WINDOW=0 and the
        # 0.6B steps, model checks, the 0.6B default workload while time is left.
        chain_check "" default
        export MINISGL_BENCH_RUNNER_ONLY=1 MINISGL_BENCH_NO_EAGER=1 MINISGL_BENCH_BATCHES=1
        MINISGL_BENCH_AB=MINISGL_CHAIN_WINDOW=0 bench_step qwen3-0.6b -w0
        unset MINISGL_BENCH_RUNNER_ONLY MINISGL_BENCH_NO_EAGER MINISGL_BENCH_BATCHES
        check_models
        if [ "$SECONDS" -lt 170 ]; then OFFLINE_TIMEOUT=100 offline_default qwen3-0.6b; fi
        pack_logs 85
    elif [ "$part" = 65 ]; then
        rm "$out/env.log"  # already printed by the tee above
        # PART65_MODELS=1: the model checks first (the chain at 0.6B batch 1 against the CPU).
        if [ "${PART65_MODELS:-0}" = 1 ]; then check_models; fi
        export MINISGL_BENCH_RUNNER_ONLY=1 MINISGL_BENCH_NO_EAGER=1
        MINISGL_BENCH_BATCHES=1,8 MINISGL_BENCH_AB=MINISGL_LAYER_CHAIN=0 bench_step qwen3-0.6b -chain
        MINISGL_BENCH_BATCHES=1,2 MINISGL_BENCH_AB=MINISGL_LAYER_CHAIN=0 bench_step llama-3.1-8b -chain
        BENCH_TIMEOUT=200 MINISGL_BENCH_BATCHES=1,2 MINISGL_BENCH_AB=MINISGL_LAYER_CHAIN=0 bench_step qwen3-14b -chain
        unset MINISGL_BENCH_RUNNER_ONLY MINISGL_BENCH_NO_EAGER
        if [ "${PART65_OFFLINE:-0}" = 1 ]; then
            offline_default qwen3-0.6b
            OFFLINE_TIMEOUT=200 offline_default qwen3-14b
        fi
        ls -la "$out"
    elif [ "$part" = 2 ]; then
        timeout 240 "$bin" bench offline --random-weights .gpu/qwen3-14b --device cuda --shape qwen3-14b \
            --workload-name "nano-vllm n=256 in=100-1024 out=100-1024 seed=0" --jsonl "$jl" 2>&1 | tail -8 | tee "$out/offline-14b.log"
        timeout 150 "$bin" bench offline --random-weights .gpu/qwen3-14b --device cuda --shape qwen3-14b \
            "${long[@]}" --jsonl "$jl" 2>&1 | tail -6 | tee "$out/long-14b.log"
        timeout 150 "$bin" gpu-check --skip-ops --skip-bench --timeline-model .gpu/qwen3-14b \
            --timeline-out "$out/timeline-14b.md" --report "$out/timeline-report.md" > "$out/timeline-14b.log" 2>&1
        tail -3 "$out/timeline-14b.md"
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
