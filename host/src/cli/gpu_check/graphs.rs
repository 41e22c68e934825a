//! Decode graphs against eager decoding: two CUDA runners on the same model,
//! one replaying recorded graphs and one launching every kernel, fed the same
//! tokens through prefills and decode steps of changing batch sizes (so that
//! padding rows run beside real ones, and prefills of new sequences follow
//! replays). Any padding row that wrote into a real page, a stale metadata
//! array or a wrong split count shows up as a logits mismatch, in that step
//! or a later one.

use std::path::Path;

use anyhow::{ensure, Context, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::model::top2;
use super::report::{compare, Report, Row};
use minisgl::backend::cuda::{CudaBackend, CudaOptions};
use minisgl::batch::{SampleMode, SampleSpec, SeqInput, StepInput};
use minisgl::model::runner::{Runner, RunnerOptions};
use minisgl::model::{load, load_random, ModelRunner};

/// Largest recorded batch in this check (small, so capture stays quick, while
/// batches of 1..=13 still hit exact sizes and padded ones).
const MAX_BS: usize = 16;

struct Seq {
    tokens: Vec<u32>,
    done: usize,
    pages: Vec<u32>,
}

fn cuda() -> Result<CudaBackend> {
    CudaBackend::new(&CudaOptions::default()).map_err(|e| anyhow::anyhow!("{e}"))
}

pub fn check(path: &Path, random: bool, rep: &mut Report) -> Result<()> {
    let lm = if random {
        load_random(path, 1)
    } else {
        load(path)
    }
    .with_context(|| format!("loading {}", path.display()))?;
    let name = path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let vocab = lm.config.vocab_size() as u32;
    let ps = 16u32;
    let (nseq, steps) = (15usize, 8usize);
    let max_prompt = 40usize;
    let per_seq = (max_prompt + 2 * steps + 2).div_ceil(ps as usize) as u32;
    let pages = per_seq * nseq as u32;
    let opts = RunnerOptions {
        cuda_graph_max_bs: MAX_BS,
        ..RunnerOptions::default()
    };
    let mut graphs = Runner::with_options(cuda()?, &lm, pages, ps, &opts)?;
    let mut eager = Runner::new(cuda()?, &lm, pages, ps)?;
    ensure!(
        !graphs.graph_sizes().is_empty(),
        "{name}: no decode graph was recorded"
    );

    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let mut seqs: Vec<Seq> = (0..nseq)
        .map(|i| Seq {
            tokens: (0..rng.random_range(5..=max_prompt))
                .map(|_| rng.random_range(0..vocab))
                .collect(),
            done: 0,
            pages: (0..per_seq).map(|p| i as u32 * per_seq + p).collect(),
        })
        .collect();
    let greedy = || {
        Some(SampleSpec {
            mode: SampleMode::Greedy,
            logprobs: None,
        })
    };
    // Sequences 0..13 start; 13 and 14 arrive after some replays.
    let mut plan: Vec<Vec<usize>> = vec![(0..13).collect()];
    for bs in [13usize, 5, 1, 3, 9, 13, 2] {
        plan.push((0..bs).collect());
    }
    plan.push(vec![13, 14]);
    for bs in [15usize, 7, 15] {
        plan.push((0..bs).collect());
    }
    let (mut worst_rel, mut worst_abs) = (0.0f64, 0.0f64);
    let (mut flips, mut decode_steps) = (0usize, 0u64);
    for (step, ids) in plan.iter().enumerate() {
        let input = StepInput {
            seqs: ids
                .iter()
                .map(|&i| {
                    let s = &seqs[i];
                    SeqInput {
                        id: i as u64,
                        tokens: s.tokens[s.done..].to_vec(),
                        first_from_last_step: false,
                        start_pos: s.done as u32,
                        page_table: s.pages.clone(),
                        sample: greedy(),
                    }
                })
                .collect(),
        };
        let decode = input.seqs.iter().all(|s| s.tokens.len() == 1);
        decode_steps += u64::from(decode);
        let lg = graphs.logits(&input)?;
        let le = eager.logits(&input)?;
        ensure!(
            lg.len() == ids.len() && le.len() == ids.len(),
            "{name} step {step}: {} / {} logits rows for {} sequences",
            lg.len(),
            le.len(),
            ids.len()
        );
        for ((&i, g), e) in ids.iter().zip(&lg).zip(&le) {
            let (rel, abs) = compare(g, e);
            worst_rel = worst_rel.max(rel);
            worst_abs = worst_abs.max(abs);
            let (te, v1, v2) = top2(e);
            let (tg, _, _) = top2(g);
            // A flip is only an error where the eager run had a clear winner.
            if tg != te && v1 - v2 > 0.05 * v1.abs().max(1.0) {
                flips += 1;
            }
            // Both runners continue with the eager run's choice.
            let s = &mut seqs[i];
            s.done = s.tokens.len();
            s.tokens.push(te);
        }
    }
    let replays = graphs.graph_replays();
    // Same kernels, same weights: only the decode split count and the GEMM
    // shape (padded rows) differ, so differences are f32/bf16 rounding.
    let tol = 2e-2;
    let pass = worst_rel <= tol && flips == 0 && replays == decode_steps;
    rep.rows.push(Row {
        group: "graphs",
        case: format!(
            "{name}{}: graph replay vs eager, {} steps, batches 1-15 (graphs {:?})",
            if random { " (random weights)" } else { "" },
            plan.len(),
            graphs.graph_sizes()
        ),
        rel: worst_rel,
        max_abs: worst_abs,
        tol,
        pass,
        extra: format!(
            "{replays} of {decode_steps} decode steps replayed; {flips} clear-margin argmax flips"
        ),
    });
    Ok(())
}
