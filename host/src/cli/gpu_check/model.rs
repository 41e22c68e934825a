//! Whole models, CPU vs GPU: logits cosine per step and greedy tokens (teacher-forced
//! on the CPU's choice so both sides stay on the same sequence).

use std::path::Path;

use anyhow::{Context, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::report::Report;
use super::rounded_cpu::RoundedCpu;
use minisgl::backend::cpu::CpuBackend;
use minisgl::batch::{SampleMode, SampleSpec, SeqInput, StepInput};
use minisgl::model::placement::{build_runner, cpu_runner};
use minisgl::model::runner::{DeviceKind, Runner};
use minisgl::model::{load, load_random, LoadedModel, ModelRunner};

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut ab, mut aa, mut bb) = (0.0f64, 0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        ab += x as f64 * y as f64;
        aa += x as f64 * x as f64;
        bb += y as f64 * y as f64;
    }
    // NaN anywhere propagates (and fails the check).
    ab / (aa.sqrt() * bb.sqrt()).max(1e-30)
}

fn worst(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.min(b)
    }
}

/// Row cosines between two runs' logits: the worst (what the gate reads) and the mean
/// of 1 − cosine, steadier than the minimum, which one row decides
/// (gpu-2026-12-07-sample.md §3).
struct Cosines {
    min: f64,
    gap: f64,
    rows: usize,
}

impl Default for Cosines {
    fn default() -> Self {
        Cosines {
            min: 1.0,
            gap: 0.0,
            rows: 0,
        }
    }
}

impl Cosines {
    fn add(&mut self, c: f64) {
        self.min = worst(self.min, c);
        self.gap += 1.0 - c;
        self.rows += 1;
    }

    fn merge(&mut self, o: &Cosines) {
        self.min = worst(self.min, o.min);
        self.gap += o.gap;
        self.rows += o.rows;
    }

    fn mean_gap(&self) -> f64 {
        self.gap / self.rows.max(1) as f64
    }
}

/// Adds the GPU logits' (`lg`) cosines against a reported-only side reference's on
/// `input` to `cos`, where there is one.
fn side_add(
    side: Option<&mut impl ModelRunner>,
    input: &StepInput,
    lg: &[Vec<f32>],
    cos: &mut Cosines,
) -> Result<()> {
    if let Some(r) = side {
        for (c, g) in r.logits(input)?.iter().zip(lg) {
            cos.add(cosine(g, c));
        }
    }
    Ok(())
}

/// A side reference's cosines as the report gives them.
fn side_summary(c: &Cosines) -> String {
    format!(
        "min cosine {:.6} (mean 1 - cosine {:.2e})",
        c.min,
        c.mean_gap()
    )
}

/// Index of the largest value, the largest and the second largest.
pub(super) fn top2(v: &[f32]) -> (u32, f32, f32) {
    let (mut i1, mut v1, mut v2) = (0u32, f32::NEG_INFINITY, f32::NEG_INFINITY);
    for (i, &x) in v.iter().enumerate() {
        if x > v1 {
            v2 = v1;
            v1 = x;
            i1 = i as u32;
        } else if x > v2 {
            v2 = x;
        }
    }
    (i1, v1, v2)
}

/// Two runs' logits row by row: the worst cosine, and whether every greedy
/// difference is a near tie (the reference's own top-2 margin within twice
/// the largest logit difference between the runs at that row).
pub(super) struct Agreement {
    cos: Cosines,
    first_diff: Option<String>,
    low_margin_diff: bool,
}

impl Default for Agreement {
    fn default() -> Self {
        Agreement {
            cos: Cosines::default(),
            first_diff: None,
            low_margin_diff: true,
        }
    }
}

impl Agreement {
    /// Compare one row; returns the reference's greedy token (what both runs
    /// are fed next, so they stay on one sequence).
    pub fn add(&mut self, step: usize, seq: usize, reference: &[f32], other: &[f32]) -> u32 {
        self.cos.add(cosine(other, reference));
        let (tr, v1, v2) = top2(reference);
        let (to, _, _) = top2(other);
        let max_diff = reference
            .iter()
            .zip(other)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, |m, d| if d.is_nan() { f32::NAN } else { m.max(d) });
        if tr != to && self.first_diff.is_none() {
            let margin = v1 - v2;
            self.low_margin_diff = margin <= 2.0 * max_diff; // false for NaN
            self.first_diff = Some(format!(
                "first greedy difference at step {step} seq {seq}: reference {tr} other {to}, \
                 reference margin {margin:.4}, max |Δlogit| {max_diff:.4}"
            ));
        }
        tr
    }

    /// Cosine above 0.999 and no greedy difference but near ties.
    pub fn pass(&self) -> bool {
        self.pass_above(REAL_ROW_FLOOR)
    }

    /// Every row's cosine above `floor` and no greedy difference but near ties.
    fn pass_above(&self, floor: f64) -> bool {
        self.cos.min > floor && self.low_margin_diff
    }

    pub fn summary(&self) -> String {
        format!(
            "min logits cosine {:.6} over {} rows (mean 1 - cosine {:.2e}); {}",
            self.cos.min,
            self.cos.rows,
            self.cos.mean_gap(),
            self.first_diff
                .clone()
                .unwrap_or_else(|| "greedy tokens identical at every step".into())
        )
    }
}

/// The model gate, set from the unfolded default path's spread over six prompt draws of
/// the seven fixtures (2026-12-07, an H100; docs/results/gpu-2026-12-07-fold3.md §1),
/// not from the path under test. The fixtures' 64-wide, two-layer models are
/// noise-bound: one draw's minimum over its 39 rows ranged 0.99766-0.99965, and 8 of the
/// 42 draws fell below the old one-draw bar of 0.999, so that bar read the draw, not the
/// kernels (seed 42, the only draw it read, passed by luck). So a fixture is gated on
/// what is steady, the mean of 1 − cosine over [`FIXTURE_DRAWS`] draws (at most 2.2e-4
/// over six draws, 2.7e-4 in any one: [`MEAN_GAP_MAX`] leaves 1.8x), with a per-row floor
/// ([`FIXTURE_ROW_FLOOR`], 1.7x the worst row's 1 − cosine) for a path that breaks a
/// few rows only. The real shapes (random weights) read 0.9999 and keep 0.999 a row.
const FIXTURE_ROW_FLOOR: f64 = 0.996;
const REAL_ROW_FLOOR: f64 = 0.999;
const MEAN_GAP_MAX: f64 = 4e-4;
/// Prompt draws a fixture is gated over unless `--model-seeds` says otherwise (a draw
/// of the fixtures costs well under a second; of a real shape, tens of seconds of CPU
/// reference, so those take one).
pub const FIXTURE_DRAWS: u64 = 4;

/// [`compare_prompts`] on three sequences (decode batches of 3), and for the real shapes
/// (random weights) on one and on two: batch-1 and batch-2 decode, where a layer's
/// products run as one `layer_chain` / `layer_chain_r2` launch. The fixtures' 64-wide layers never chain, and one of them
/// (llama_gqa_tied) reads 0.99882 at one sequence against the 0.999 bar, with its f32
/// comparison at 0.99856 (2026-12-04): the tiny shapes' rounding, not a path.
/// `seeds` draws of the three prompts (seed 42, 43, ...; `--model-seeds`, else
/// [`FIXTURE_DRAWS`] for a fixture and one for a real shape), each gated on its rows'
/// floor, then all of them on their mean 1 − cosine (see [`MEAN_GAP_MAX`]).
pub fn compare(
    path: &Path,
    random: bool,
    steps: usize,
    seeds: Option<u64>,
    rep: &mut Report,
) -> Result<()> {
    // Loaded once: every draw and the one- and two-sequence runs read the same weights.
    let lm = if random {
        load_random(path, 1)
    } else {
        load(path)
    }
    .with_context(|| format!("loading {}", path.display()))?;
    let name = format!(
        "{}{}",
        path.file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default(),
        if random { " (random weights)" } else { "" }
    );
    let model = (&lm, name.as_str(), random);
    let draws = seeds
        .unwrap_or(if random { 1 } else { FIXTURE_DRAWS })
        .max(1);
    let mut all = Cosines::default();
    for seed in 42..42 + draws {
        all.merge(&compare_prompts(model, steps, &[37, 11, 64], seed, rep)?);
    }
    let gap = all.mean_gap();
    rep.fact(
        "model",
        format!("{name}: {draws} prompt draws"),
        gap <= MEAN_GAP_MAX,
        format!(
            "mean 1 - cosine {gap:.2e} over {} rows (gate {MEAN_GAP_MAX:.0e}), worst row {:.6}",
            all.rows, all.min
        ),
    );
    if random {
        compare_prompts(model, steps, &[45], 42, rep)?;
        compare_prompts(model, steps, &[45, 20], 42, rep)?;
    }
    Ok(())
}

/// One run of `prompts` (drawn with `seed`) on `model`: (the loaded model, its name in
/// the report, whether its weights are random); the gate's row cosines back.
fn compare_prompts(
    (lm, name, random): (&LoadedModel, &str, bool),
    steps: usize,
    prompts: &[usize],
    seed: u64,
    rep: &mut Report,
) -> Result<Cosines> {
    let vocab = lm.config.vocab_size() as u32;
    let ps = 16u32;
    let per_seq = (prompts.iter().max().unwrap() + steps + 1).div_ceil(ps as usize) as u32;
    let pages = per_seq * prompts.len() as u32 + 1;
    // Reference: the CPU backend on the same bf16-rounded weights the GPU stores;
    // the plain f32 CPU run (fixtures only) shows what weight rounding alone costs.
    // Under MINISGL_FOLD_NORMS the GPU holds bf16(g · W) with unit norms, so the
    // reference folds the same way and this stays a check of the kernels; the
    // unfolded bf16 CPU beside it shows what the fold's rounding moves (reported, not
    // gated: the fold itself is checked against HF in tests/model_logits.rs).
    let folds = minisgl::backend::cuda::CudaOptions::default().fold_norms;
    let reference = if folds {
        CpuBackend::with_folded_norms()
    } else {
        CpuBackend::new()
    };
    let mut cpu = Runner::new(RoundedCpu(reference), lm, pages, ps)?;
    let mut unfolded = if folds {
        Some(Runner::new(RoundedCpu(CpuBackend::new()), lm, pages, ps)?)
    } else {
        None
    };
    let mut vs_unfolded = Cosines::default();
    let mut cpu32 = if random {
        None
    } else {
        Some(cpu_runner(lm, pages, ps)?)
    };
    let mut gpu = build_runner(lm, DeviceKind::Cuda, pages, ps)?;
    let mut vs32 = Cosines::default();
    let mut seqs = random_seqs_seeded(prompts, vocab, per_seq, seed);
    let mut agree = Agreement::default();
    let mut done = vec![0usize; seqs.len()]; // tokens already in the cache
    for step in 0..=steps {
        let input = greedy_step(&seqs, &done);
        let lc = cpu.logits(&input)?;
        let lg = gpu.logits(&input)?;
        side_add(cpu32.as_mut(), &input, &lg, &mut vs32)?;
        side_add(unfolded.as_mut(), &input, &lg, &mut vs_unfolded)?;
        for (i, (c, g)) in lc.iter().zip(&lg).enumerate() {
            let next = agree.add(step, i, c, g);
            done[i] = seqs[i].0.len();
            seqs[i].0.push(next);
        }
    }
    let mut sides = if random {
        String::new()
    } else {
        format!("; vs the f32-weight CPU: {}", side_summary(&vs32))
    };
    if folds {
        sides += &format!(
            "; norms folded on both; vs the unfolded bf16 CPU: {}",
            side_summary(&vs_unfolded)
        );
    }
    rep.fact(
        "model",
        format!(
            "{name}: {} seqs, prefill {:?} + {steps} decode steps{}",
            prompts.len(),
            prompts,
            if seed == 42 {
                String::new()
            } else {
                format!(", prompt seed {seed}")
            }
        ),
        agree.pass_above(if random {
            REAL_ROW_FLOOR
        } else {
            FIXTURE_ROW_FLOOR
        }),
        format!(
            "GPU vs CPU (reference) on the same bf16 weights: {}{sides}",
            agree.summary()
        ),
    );
    Ok(agree.cos)
}

/// Random prompts of `lens` tokens (seed 42), each with `per_seq` pages of
/// its own.
pub(super) fn random_seqs(lens: &[usize], vocab: u32, per_seq: u32) -> Vec<(Vec<u32>, Vec<u32>)> {
    random_seqs_seeded(lens, vocab, per_seq, 42)
}

/// [`random_seqs`] drawn with `seed`.
fn random_seqs_seeded(
    lens: &[usize],
    vocab: u32,
    per_seq: u32,
    seed: u64,
) -> Vec<(Vec<u32>, Vec<u32>)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    lens.iter()
        .enumerate()
        .map(|(i, &n)| {
            let toks = (0..n)
                .map(|_| rng.random_range(0..vocab.min(32000)))
                .collect();
            let pt = (0..per_seq).map(|p| i as u32 * per_seq + p).collect();
            (toks, pt)
        })
        .collect()
}

/// One greedy step of every sequence: the tokens not yet in the cache
/// (`done[i]` of sequence `i` are), sampled greedily.
pub(super) fn greedy_step(seqs: &[(Vec<u32>, Vec<u32>)], done: &[usize]) -> StepInput {
    StepInput {
        seqs: seqs
            .iter()
            .enumerate()
            .map(|(i, (toks, pt))| SeqInput {
                id: i as u64,
                tokens: toks[done[i]..].to_vec(),
                first_from_last_step: false,
                start_pos: done[i] as u32,
                page_table: pt.clone(),
                sample: Some(SampleSpec {
                    mode: SampleMode::Greedy,
                    logprobs: None,
                }),
            })
            .collect(),
    }
}

/// Greedy decode throughput of a runner: `batch` sequences with `prompt` tokens, then
/// `steps` decode steps through `ModelRunner::step` (device sampling, one sync per step).
pub fn decode_throughput(
    r: &mut dyn ModelRunner,
    batch: usize,
    prompt: usize,
    steps: usize,
) -> Result<(f64, f64)> {
    let (tps, prefill_s, _) = decode_steps(r, batch, prompt, steps, false)?;
    Ok((tps, prefill_s))
}

/// The kernels of one eager greedy decode step of `batch` sequences of about
/// `prompt` tokens, in launch order, each with its GPU time (CUDA events).
pub fn decode_timeline(
    r: &mut dyn ModelRunner,
    batch: usize,
    prompt: usize,
) -> Result<Vec<minisgl::backend::cuda::timeline::KernelTime>> {
    Ok(decode_steps(r, batch, prompt, 1, true)?.2)
}

/// The kernels of one eager prefill step of fresh prompts of the given lengths (one
/// step: the engine would send them as one chunk), in launch order. The same step runs
/// once untimed first, on the same pages, so that every kernel and cuBLAS plan is warm.
pub fn prefill_timeline(
    r: &mut dyn ModelRunner,
    lens: &[usize],
) -> Result<Vec<minisgl::backend::cuda::timeline::KernelTime>> {
    let per_seq = lens
        .iter()
        .max()
        .map_or(0, |l| l.div_ceil(r.page_size() as usize));
    anyhow::ensure!(
        per_seq * lens.len() <= r.num_pages() as usize,
        "not enough KV pages"
    );
    let seqs = random_seqs(lens, r.vocab_size(), per_seq as u32);
    let input = greedy_step(&seqs, &vec![0; lens.len()]);
    r.step(&input)?;
    minisgl::backend::cuda::timeline::start();
    let res = r.step(&input);
    let kernels = minisgl::backend::cuda::timeline::stop()?;
    res?;
    Ok(kernels)
}

/// Prefill, one warm-up decode step, then `steps` timed decode steps (the last
/// one under a kernel timeline when `timeline`).
fn decode_steps(
    r: &mut dyn ModelRunner,
    batch: usize,
    prompt: usize,
    steps: usize,
    timeline: bool,
) -> Result<(f64, f64, Vec<minisgl::backend::cuda::timeline::KernelTime>)> {
    let ps = r.page_size() as usize;
    let per_seq = (prompt + steps + 2).div_ceil(ps);
    anyhow::ensure!(
        per_seq * batch <= r.num_pages() as usize,
        "not enough KV pages"
    );
    let vocab = r.vocab_size();
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let mut seqs: Vec<(Vec<u32>, Vec<u32>, usize)> = (0..batch)
        .map(|i| {
            let toks = (0..prompt)
                .map(|_| rng.random_range(0..vocab.min(32000)))
                .collect();
            let pt = (0..per_seq as u32)
                .map(|p| i as u32 * per_seq as u32 + p)
                .collect();
            (toks, pt, 0)
        })
        .collect();
    let run =
        |seqs: &mut Vec<(Vec<u32>, Vec<u32>, usize)>, r: &mut dyn ModelRunner| -> Result<()> {
            let input = StepInput {
                seqs: seqs
                    .iter()
                    .enumerate()
                    .map(|(i, (t, pt, done))| SeqInput {
                        id: i as u64,
                        tokens: t[*done..].to_vec(),
                        first_from_last_step: false,
                        start_pos: *done as u32,
                        page_table: pt.clone(),
                        sample: Some(SampleSpec {
                            mode: SampleMode::Greedy,
                            logprobs: None,
                        }),
                    })
                    .collect(),
            };
            let out = r.step(&input)?;
            for (s, o) in seqs.iter_mut().zip(out.outputs) {
                s.2 = s.0.len();
                s.0.push(o.token);
            }
            Ok(())
        };
    let t0 = std::time::Instant::now();
    run(&mut seqs, r)?; // prefill
    let prefill_s = t0.elapsed().as_secs_f64();
    run(&mut seqs, r)?; // warm-up decode
    let t1 = std::time::Instant::now();
    let mut kernels = Vec::new();
    for i in 0..steps {
        let last = i + 1 == steps;
        if timeline && last {
            minisgl::backend::cuda::timeline::start();
        }
        let res = run(&mut seqs, r);
        if timeline && last {
            kernels = minisgl::backend::cuda::timeline::stop()?;
        }
        res?;
    }
    let dt = t1.elapsed().as_secs_f64();
    Ok(((batch * steps) as f64 / dt, prefill_s, kernels))
}
