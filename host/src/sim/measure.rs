//! Measuring the points a profile is fitted on, on any [`ModelRunner`]: the
//! CPU and CUDA runners go through exactly this code (so the CPU test of
//! `profile` covers the CUDA path but for the device itself).

use std::time::Instant;

use crate::batch::{SampleMode, SampleSpec, SeqInput, StepInput};
use crate::model::runner::Launched;
use crate::model::{ModelError, ModelRunner};

use super::profile::ProfilePoint;

/// The measurement grid: decode batches × contexts, prefill chunks × cached
/// prefixes.
#[derive(Clone, Debug)]
pub struct Grid {
    pub decode_batches: Vec<u64>,
    pub decode_contexts: Vec<u64>,
    pub prefill_tokens: Vec<u64>,
    pub prefill_contexts: Vec<u64>,
    /// Timed steps per point (after one warm-up), run back to back as the
    /// engine's worker runs them; their mean is kept.
    pub reps: usize,
}

impl Grid {
    /// A grid for a GPU: 10 decode and 8 prefill points, a few seconds for
    /// a 14B model on an H200 (the dense curve's knots at 1..256 decodes and
    /// 128..8192 prefill tokens, two contexts each for the attention slopes).
    pub fn gpu() -> Grid {
        Grid {
            decode_batches: vec![1, 16, 64, 128, 256],
            decode_contexts: vec![256, 2048],
            prefill_tokens: vec![128, 512, 2048, 8192],
            prefill_contexts: vec![0, 4096],
            reps: 3,
        }
    }

    /// A grid small enough for a tiny model on a CPU in seconds.
    pub fn cpu() -> Grid {
        Grid {
            decode_batches: vec![1, 4, 16],
            decode_contexts: vec![32, 200],
            prefill_tokens: vec![16, 64, 256],
            prefill_contexts: vec![0, 200],
            reps: 3,
        }
    }

    /// The points in measuring order.
    pub fn points(&self) -> Vec<ProfilePoint> {
        let mut v = Vec::new();
        for &b in &self.decode_batches {
            for &c in &self.decode_contexts {
                v.push(ProfilePoint {
                    decode_batch: b,
                    decode_context: c,
                    prefill_tokens: 0,
                    prefill_context: 0,
                    seconds: 0.0,
                });
            }
        }
        for &n in &self.prefill_tokens {
            for &c in &self.prefill_contexts {
                v.push(ProfilePoint {
                    decode_batch: 0,
                    decode_context: 0,
                    prefill_tokens: n,
                    prefill_context: c,
                    seconds: 0.0,
                });
            }
        }
        v
    }

    /// KV pages a runner needs to measure every point.
    pub fn pages_needed(&self, page_size: u32) -> u32 {
        let ps = u64::from(page_size);
        self.points()
            .iter()
            .map(|p| {
                if p.prefill_tokens > 0 {
                    (p.prefill_context + p.prefill_tokens).div_ceil(ps)
                } else {
                    p.decode_batch * (p.decode_context + 1).div_ceil(ps)
                }
            })
            .max()
            .unwrap_or(1)
            .max(1) as u32
    }
}

/// The step a point describes: sequences on disjoint pages, every one sampled
/// greedily (the engine's fast path). KV contents are whatever the pages
/// hold: timing does not depend on them.
pub fn step_for(p: &ProfilePoint, page_size: u32, vocab: u32) -> StepInput {
    let ps = u64::from(page_size);
    let sample = || {
        Some(SampleSpec {
            mode: SampleMode::Greedy,
            logprobs: None,
        })
    };
    let token = |i: u64| ((i * 7919 + 17) % u64::from(vocab.max(1))) as u32;
    if p.prefill_tokens > 0 {
        let end = p.prefill_context + p.prefill_tokens;
        return StepInput {
            seqs: vec![SeqInput {
                id: 1,
                tokens: (0..p.prefill_tokens).map(token).collect(),
                first_from_last_step: false,
                start_pos: p.prefill_context as u32,
                page_table: (0..end.div_ceil(ps) as u32).collect(),
                sample: sample(),
            }],
        };
    }
    let per = (p.decode_context + 1).div_ceil(ps) as u32;
    StepInput {
        seqs: (0..p.decode_batch)
            .map(|i| SeqInput {
                id: i + 1,
                tokens: vec![token(i)],
                first_from_last_step: false,
                start_pos: p.decode_context as u32,
                page_table: (i as u32 * per..(i as u32 + 1) * per).collect(),
                sample: sample(),
            })
            .collect(),
    }
}

/// Seconds per step of `reps` copies of `input` run the way the engine's
/// worker runs steps: the next one is launched while the previous one is still
/// on the device (at most two in flight), so host-side preparation hides
/// behind device time as it does under overlap scheduling. A runner that
/// computes at launch (the CPU) simply runs them one after another.
fn pipelined(
    runner: &mut dyn ModelRunner,
    input: &StepInput,
    reps: usize,
) -> Result<f64, ModelError> {
    let t = Instant::now();
    let mut in_flight = 0;
    for _ in 0..reps {
        if let Launched::Pending = runner.launch(input)? {
            in_flight += 1;
            if in_flight >= 2 {
                runner.finish()?;
                in_flight -= 1;
            }
        }
    }
    for _ in 0..in_flight {
        runner.finish()?;
    }
    Ok(t.elapsed().as_secs_f64() / reps as f64)
}

/// Measures every point of `grid` on `runner` (one warm-up step, then
/// `grid.reps` steps pipelined as in the engine); `progress(i, n)` after each
/// point.
pub fn measure(
    runner: &mut dyn ModelRunner,
    grid: &Grid,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<ProfilePoint>, ModelError> {
    let need = grid.pages_needed(runner.page_size());
    if need > runner.num_pages() {
        return Err(ModelError::InvalidInput(format!(
            "the grid needs {need} KV pages, the runner has {}",
            runner.num_pages()
        )));
    }
    let mut points = grid.points();
    let n = points.len();
    for (i, p) in points.iter_mut().enumerate() {
        let input = step_for(p, runner.page_size(), runner.vocab_size());
        runner.step(&input)?;
        p.seconds = pipelined(runner, &input, grid.reps.max(1))?;
        progress(i + 1, n);
    }
    Ok(points)
}
