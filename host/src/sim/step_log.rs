//! Every step of a replay with its shape and time, and the cost model's error
//! on them: the diagnostic behind the simulator's fidelity. A profile is
//! fitted on isolated steps (decode-only or one prefill chunk); a real trace
//! runs mixed steps, back to back, under overlap. Comparing the model with
//! the real steps one class at a time says which kind of step it misprices.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::cost::{CostModel, StepShape};
use crate::batch::{StepInput, StepOutput};
use crate::model::config::ModelConfig;
use crate::model::runner::{Launched, ModelRunner};
use crate::model::ModelError;

/// One step as a replay saw it. Times are µs since the replay started.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepRecord {
    pub launch_us: u64,
    pub done_us: u64,
    /// The step's own time: from when it could start (launched, and the
    /// previous step done) to when it was done. Under overlap this is the
    /// device time plus whatever host work the pipeline did not hide.
    pub step_us: u64,
    pub seqs: u32,
    pub shape: StepShape,
}

/// The steps of one replay, shared between the runner that records them and
/// the replay that reports them.
pub type StepLog = Arc<Mutex<Vec<StepRecord>>>;

/// A [`ModelRunner`] that records every step it runs into a [`StepLog`].
pub struct LoggingRunner {
    inner: Box<dyn ModelRunner>,
    log: StepLog,
    start: Instant,
    /// Launched, not yet finished: (launch µs, seqs, shape).
    pending: VecDeque<(u64, u32, StepShape)>,
    last_done_us: u64,
}

impl LoggingRunner {
    /// Wraps `inner`; times count from `start`.
    pub fn new(inner: Box<dyn ModelRunner>, start: Instant) -> (LoggingRunner, StepLog) {
        let log = StepLog::default();
        let r = LoggingRunner {
            inner,
            log: log.clone(),
            start,
            pending: VecDeque::new(),
            last_done_us: 0,
        };
        (r, log)
    }

    fn now_us(&self) -> u64 {
        self.start.elapsed().as_micros() as u64
    }

    fn done(&mut self, launch_us: u64, seqs: u32, shape: StepShape) {
        let done_us = self.now_us();
        let from = launch_us.max(self.last_done_us);
        self.last_done_us = done_us;
        self.log.lock().expect("step log").push(StepRecord {
            launch_us,
            done_us,
            step_us: done_us.saturating_sub(from),
            seqs,
            shape,
        });
    }
}

impl ModelRunner for LoggingRunner {
    fn step(&mut self, input: &StepInput) -> Result<StepOutput, ModelError> {
        let t = self.now_us();
        let out = self.inner.step(input)?;
        self.done(t, input.seqs.len() as u32, StepShape::of(input));
        Ok(out)
    }

    fn launch(&mut self, input: &StepInput) -> Result<Launched, ModelError> {
        let t = self.now_us();
        let shape = StepShape::of(input);
        let seqs = input.seqs.len() as u32;
        let r = self.inner.launch(input)?;
        match r {
            Launched::Done(_) => self.done(t, seqs, shape),
            Launched::Pending => self.pending.push_back((t, seqs, shape)),
        }
        Ok(r)
    }

    fn ready(&self) -> bool {
        self.inner.ready()
    }

    fn finish(&mut self) -> Result<StepOutput, ModelError> {
        let out = self.inner.finish()?;
        if let Some((t, seqs, shape)) = self.pending.pop_front() {
            self.done(t, seqs, shape);
        }
        Ok(out)
    }

    fn logits(&mut self, input: &StepInput) -> Result<Vec<Vec<f32>>, ModelError> {
        self.inner.logits(input)
    }

    fn page_size(&self) -> u32 {
        self.inner.page_size()
    }

    fn num_pages(&self) -> u32 {
        self.inner.num_pages()
    }

    fn vocab_size(&self) -> u32 {
        self.inner.vocab_size()
    }

    fn config(&self) -> &ModelConfig {
        self.inner.config()
    }

    fn device_name(&self) -> &'static str {
        self.inner.device_name()
    }
}

/// The step classes the error table (and `bench offline`'s breakdown) reports,
/// in row order.
pub const CLASSES: [&str; 5] = [
    "decode, 1-8 seqs",
    "decode, 9-64 seqs",
    "decode, 65+ seqs",
    "prefill only",
    "prefill + decodes",
];

/// A step's class, one of [`CLASSES`].
pub fn class(s: &StepShape) -> &'static str {
    CLASSES[class_index(s)]
}

/// The index in [`CLASSES`] of a step's class.
pub fn class_index(s: &StepShape) -> usize {
    match (s.decode_only, s.kv_read > 0) {
        (true, _) if s.tokens <= 8 => 0,
        (true, _) if s.tokens <= 64 => 1,
        (true, _) => 2,
        (false, false) => 3,
        (false, true) => 4,
    }
}

/// Markdown: per step class, how many steps, their measured time, the model's
/// time, the error of the sum, and the median per-step error.
pub fn model_error_table(steps: &[StepRecord], model: &CostModel) -> String {
    let mut out = String::from(
        "| step class | steps | measured ms (sum) | model ms (sum) | error of the sum | median step error |\n|---|---:|---:|---:|---:|---:|\n",
    );
    let mut all = (0usize, 0f64, 0f64);
    for c in CLASSES {
        let mut n = 0usize;
        let (mut real, mut pred) = (0f64, 0f64);
        let mut errs = Vec::new();
        for s in steps.iter().filter(|s| class(&s.shape) == c) {
            let p = model.step_us(&s.shape);
            let m = s.step_us.max(1) as f64;
            n += 1;
            real += m;
            pred += p;
            errs.push((p - m) / m);
        }
        if n == 0 {
            continue;
        }
        errs.sort_by(f64::total_cmp);
        let med = errs[errs.len() / 2];
        all = (all.0 + n, all.1 + real, all.2 + pred);
        out.push_str(&format!(
            "| {c} | {n} | {:.1} | {:.1} | {:+.1}% | {:+.1}% |\n",
            real / 1e3,
            pred / 1e3,
            100.0 * (pred - real) / real,
            100.0 * med
        ));
    }
    if all.0 > 0 {
        out.push_str(&format!(
            "| all | {} | {:.1} | {:.1} | {:+.1}% | |\n",
            all.0,
            all.1 / 1e3,
            all.2 / 1e3,
            100.0 * (all.2 - all.1) / all.1
        ));
    }
    out
}

/// CSV of the steps (one row each), for plotting and refits.
pub fn csv(steps: &[StepRecord]) -> String {
    let mut out =
        String::from("launch_us,done_us,step_us,seqs,tokens,decode_only,kv_read,attn_pairs\n");
    for s in steps {
        out.push_str(&format!(
            "{},{},{},{},{},{},{},{}\n",
            s.launch_us,
            s.done_us,
            s.step_us,
            s.seqs,
            s.shape.tokens,
            u8::from(s.shape.decode_only),
            s.shape.kv_read,
            s.shape.attn_pairs
        ));
    }
    out
}

/// The steps of a [`csv`] file, as `(shape, seconds)` fit points.
pub fn parse_csv(text: &str) -> Result<Vec<(StepShape, f64)>, String> {
    let mut lines = text.lines();
    let header = lines.next().unwrap_or_default();
    if header != csv(&[]).trim_end() {
        return Err(format!("not a steps file: header {header:?}"));
    }
    lines
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            let f: Vec<u64> = l
                .split(',')
                .map(|x| x.trim().parse::<u64>())
                .collect::<Result<_, _>>()
                .map_err(|e| format!("line {}: {e}: {l:?}", i + 2))?;
            if f.len() != 8 || f[2] == 0 {
                return Err(format!(
                    "line {}: expected 8 fields, step_us > 0: {l:?}",
                    i + 2
                ));
            }
            let shape = StepShape {
                tokens: f[4],
                decode_only: f[5] == 1,
                kv_read: f[6],
                attn_pairs: f[7],
            };
            Ok((shape, f[2] as f64 / 1e6))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> CostModel {
        CostModel {
            decode_knots: vec![(1, 1000.0), (256, 5000.0)],
            prefill_knots: vec![(128, 2000.0), (8192, 40000.0)],
            us_per_kv_token: 0.0,
            us_per_attn_pair: 0.0,
        }
    }

    #[test]
    fn the_table_sums_each_class_against_the_model() {
        let rec = |step_us, shape| StepRecord {
            step_us,
            shape,
            ..StepRecord::default()
        };
        // Two decode steps of 1 seq the model prices at 1000 µs each, measured
        // 1250 and 1500; one prefill of 128 priced 2000, measured 2000.
        let steps = [
            rec(1250, StepShape::decode(1, 10)),
            rec(1500, StepShape::decode(1, 10)),
            rec(2000, StepShape::prefill(128, 0)),
        ];
        let t = model_error_table(&steps, &model());
        assert!(
            t.contains("| decode, 1-8 seqs | 2 | 2.8 | 2.0 | -27.3% | -20.0% |"),
            "{t}"
        );
        assert!(
            t.contains("| prefill only | 1 | 2.0 | 2.0 | +0.0% | +0.0% |"),
            "{t}"
        );
        assert!(t.contains("| all | 3 | 4.8 | 4.0 | -15.8% | |"), "{t}");
        assert!(!t.contains("prefill + decodes"), "{t}");
        let text = csv(&steps);
        assert_eq!(text.lines().count(), 4);
        let back = parse_csv(&text).unwrap();
        assert_eq!(back.len(), 3);
        assert_eq!(back[0], (StepShape::decode(1, 10), 1250e-6));
        assert_eq!(back[2].0, StepShape::prefill(128, 0));
        let bad = text.replace("1250", "x");
        assert!(parse_csv(&bad).unwrap_err().contains("line 2"), "{bad}");
        assert!(parse_csv("a,b\n").unwrap_err().contains("header"));
    }
}
