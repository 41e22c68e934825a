//! Where an offline run's time went, by step class: every step the engine ran
//! (recorded by [`minisgl::sim::LoggingRunner`]) against its own floor
//! ([`super::bench_floor::step_floor_seconds`]), so a run that misses its ceiling
//! says whether decode steps of some batch size, prefill steps or the time
//! outside steps (start, drain, host stalls the overlap did not hide) lost it.

use minisgl::sim::step_log::{class_index, CLASSES};
use minisgl::sim::{StepRecord, StepShape};

/// One class's steps.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClassRow {
    pub class: &'static str,
    pub steps: usize,
    /// Measured step time (see [`StepRecord::step_us`]), summed.
    pub seconds: f64,
    /// The steps' floors, summed.
    pub floor_seconds: f64,
}

/// The classes with steps, in [`CLASSES`] order, and the run's time outside
/// any step.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Breakdown {
    pub rows: Vec<ClassRow>,
    pub outside_seconds: f64,
}

impl Breakdown {
    /// `floor` prices one step; `run_seconds` is the run's wall time.
    pub fn of(steps: &[StepRecord], run_seconds: f64, floor: impl Fn(&StepShape) -> f64) -> Self {
        let mut rows: Vec<ClassRow> = CLASSES
            .iter()
            .map(|&c| ClassRow {
                class: c,
                ..ClassRow::default()
            })
            .collect();
        for s in steps {
            let i = class_index(&s.shape);
            rows[i].steps += 1;
            rows[i].seconds += s.step_us as f64 * 1e-6;
            rows[i].floor_seconds += floor(&s.shape);
        }
        rows.retain(|r| r.steps > 0);
        let in_steps: f64 = rows.iter().map(|r| r.seconds).sum();
        Breakdown {
            rows,
            outside_seconds: (run_seconds - in_steps).max(0.0),
        }
    }

    /// A table under the run's label: per class, steps, seconds, floor, the
    /// fraction of the floor reached and the seconds lost against it.
    pub fn print(&self, label: &str) {
        println!(
            "{label:>22}: time by step class (floor of a step: weights + KV at the copy rate or its FLOPs at the GEMM rate, the longer)"
        );
        println!(
            "{:>22}  {:<18} {:>6} {:>10} {:>9} {:>8} {:>8}",
            "", "class", "steps", "seconds", "floor s", "of floor", "lost s"
        );
        let (mut t, mut f, mut n) = (0.0, 0.0, 0);
        for r in &self.rows {
            println!(
                "{:>22}  {:<18} {:>6} {:>10.3} {:>9.3} {:>7.1}% {:>8.3}",
                "",
                r.class,
                r.steps,
                r.seconds,
                r.floor_seconds,
                100.0 * r.floor_seconds / r.seconds.max(1e-12),
                r.seconds - r.floor_seconds
            );
            t += r.seconds;
            f += r.floor_seconds;
            n += r.steps;
        }
        println!(
            "{:>22}  {:<18} {:>6} {:>10.3} {:>9.3} {:>7.1}% {:>8.3}",
            "",
            "all steps",
            n,
            t,
            f,
            100.0 * f / t.max(1e-12),
            t - f
        );
        println!(
            "{:>22}  {:<18} {:>6} {:>10.3}",
            "", "outside steps", "", self.outside_seconds
        );
    }

    /// The floors of every step the run took, summed: the run's floor for the work it
    /// did, which a cache that skips prompt tokens makes smaller than the workload's.
    pub fn floor_seconds(&self) -> f64 {
        self.rows.iter().map(|r| r.floor_seconds).sum()
    }

    /// That floor over the run's wall time (steps and time outside them).
    pub fn as_run_fraction(&self) -> f64 {
        let wall: f64 = self.rows.iter().map(|r| r.seconds).sum::<f64>() + self.outside_seconds;
        self.floor_seconds() / wall.max(1e-12)
    }

    /// The rows as JSON (for `bench offline --jsonl`).
    pub fn json(&self) -> serde_json::Value {
        let r3 = |x: f64| (x * 1000.0).round() / 1000.0;
        serde_json::json!({
            "classes": self.rows.iter().map(|r| serde_json::json!({
                "class": r.class,
                "steps": r.steps,
                "seconds": r3(r.seconds),
                "floor_seconds": r3(r.floor_seconds),
            })).collect::<Vec<_>>(),
            "outside_seconds": r3(self.outside_seconds),
        })
    }
}

/// Decode steps of at least `min_seqs` sequences fitted by least squares as
/// `fixed + per_seq · seqs + kv_bytes / kv_rate`, and their time split against the
/// weights' and the KV's reads at the copy rate. The fixed part is what does not shrink
/// with the batch (products that cost the same at 16 rows as at 256, small kernels,
/// launches); the KV rate is how fast the attention streams over the workload's real
/// mix of contexts. Neither shows in the class table. (`scripts/gpu/step_fit.py` fits
/// a saved `--steps-csv` the same way.)
#[derive(Clone, Debug, PartialEq)]
pub struct DecodeFit {
    pub min_seqs: u32,
    pub steps: usize,
    /// Measured time of the fitted steps.
    pub seconds: f64,
    pub fixed_us: f64,
    pub per_seq_us: f64,
    /// Bytes a second; infinite or negative where the KV column explains nothing.
    pub kv_bytes_s: f64,
    pub r2: f64,
    /// The weights read once a step at the copy rate, over the fitted steps.
    pub weights_seconds: f64,
    /// The fixed part above that.
    pub fixed_over_seconds: f64,
    pub per_seq_seconds: f64,
    /// The steps' KV at the copy rate, and the fitted KV time above it.
    pub kv_floor_seconds: f64,
    pub kv_over_seconds: f64,
}

impl DecodeFit {
    /// `None` with fewer than 8 such steps or when the batch or the KV read does not
    /// vary independently (every step the same size: the fit is singular).
    /// `weight_seconds` is one step's weight read at `copy_bytes_s`.
    pub fn of(
        steps: &[StepRecord],
        min_seqs: u32,
        kv_bytes_per_token: f64,
        weight_seconds: f64,
        copy_bytes_s: f64,
    ) -> Option<Self> {
        let sel: Vec<(f64, f64, f64)> = steps
            .iter()
            .filter(|s| s.shape.decode_only && s.seqs >= min_seqs)
            .map(|s| {
                let gb = s.shape.kv_read as f64 * kv_bytes_per_token / 1e9;
                (f64::from(s.seqs), gb, s.step_us as f64)
            })
            .collect();
        if sel.len() < 8 {
            return None;
        }
        let rows: Vec<[f64; 3]> = sel.iter().map(|&(n, gb, _)| [1.0, n, gb]).collect();
        let ys: Vec<f64> = sel.iter().map(|r| r.2).collect();
        let [fixed, per_seq, per_gb] = least_squares(&rows, &ys)?;
        let mean = ys.iter().sum::<f64>() / ys.len() as f64;
        let (mut res, mut tot) = (0.0, 0.0);
        for (x, y) in rows.iter().zip(&ys) {
            let p = fixed + per_seq * x[1] + per_gb * x[2];
            res += (y - p).powi(2);
            tot += (y - mean).powi(2);
        }
        let n = sel.len() as f64;
        let seqs: f64 = sel.iter().map(|r| r.0).sum();
        let gb: f64 = sel.iter().map(|r| r.1).sum();
        let weights_seconds = n * weight_seconds;
        let kv_floor_seconds = gb * 1e9 / copy_bytes_s;
        Some(DecodeFit {
            min_seqs,
            steps: sel.len(),
            seconds: ys.iter().sum::<f64>() * 1e-6,
            fixed_us: fixed,
            per_seq_us: per_seq,
            kv_bytes_s: 1e9 / (per_gb * 1e-6),
            r2: if tot > 0.0 { 1.0 - res / tot } else { 1.0 },
            weights_seconds,
            fixed_over_seconds: n * fixed * 1e-6 - weights_seconds,
            per_seq_seconds: per_seq * seqs * 1e-6,
            kv_floor_seconds,
            kv_over_seconds: per_gb * gb * 1e-6 - kv_floor_seconds,
        })
    }

    pub fn print(&self, label: &str) {
        println!(
            "{label:>22}: decode steps of {}+ seqs fitted (R² {:.3}): {:.0} µs a step ({:.0} of it the weights at copy) + {:.2} µs a sequence + the KV at {:.2} TB/s; of their {:.3} s, {:.3} s is the fixed part above the weights' read, {:.3} s the KV above copy",
            self.min_seqs,
            self.r2,
            self.fixed_us,
            self.weights_seconds / self.steps as f64 * 1e6,
            self.per_seq_us,
            self.kv_bytes_s / 1e12,
            self.seconds,
            self.fixed_over_seconds,
            self.kv_over_seconds
        );
    }

    /// The fit as JSON (for `bench offline --jsonl`); a KV rate that is not finite
    /// and positive is null.
    pub fn json(&self) -> serde_json::Value {
        let r = |x: f64, d: f64| (x * d).round() / d;
        let tbps = self.kv_bytes_s / 1e12;
        serde_json::json!({
            "min_seqs": self.min_seqs,
            "steps": self.steps,
            "seconds": r(self.seconds, 1e3),
            "fixed_us": r(self.fixed_us, 1.0),
            "per_seq_us": r(self.per_seq_us, 1e3),
            "kv_tbps": (tbps.is_finite() && tbps > 0.0).then(|| r(tbps, 1e3)),
            "r2": r(self.r2, 1e4),
            "fixed_over_seconds": r(self.fixed_over_seconds, 1e3),
            "kv_over_seconds": r(self.kv_over_seconds, 1e3),
        })
    }
}

/// Least-squares coefficients of `ys` on the rows `xs` (normal equations, solved by
/// elimination with partial pivoting); `None` when the columns are dependent.
fn least_squares(xs: &[[f64; 3]], ys: &[f64]) -> Option<[f64; 3]> {
    let mut a = [[0.0f64; 4]; 3];
    for (x, y) in xs.iter().zip(ys) {
        for i in 0..3 {
            for j in 0..3 {
                a[i][j] += x[i] * x[j];
            }
            a[i][3] += x[i] * y;
        }
    }
    // Scale of each column, so that "singular" is judged relative to it.
    let scale: Vec<f64> = (0..3)
        .map(|i| a[i][i].sqrt().max(f64::MIN_POSITIVE))
        .collect();
    for i in 0..3 {
        let p = (i..3).max_by(|&r, &q| a[r][i].abs().total_cmp(&a[q][i].abs()))?;
        a.swap(i, p);
        if a[i][i].abs() < 1e-9 * scale[i] * scale[i] {
            return None;
        }
        let pivot = a[i];
        for (r, row) in a.iter_mut().enumerate() {
            if r != i {
                let f = row[i] / pivot[i];
                for (x, p) in row[i..].iter_mut().zip(&pivot[i..]) {
                    *x -= f * p;
                }
            }
        }
    }
    Some([a[0][3] / a[0][0], a[1][3] / a[1][1], a[2][3] / a[2][2]])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_summed_per_class_against_their_floors() {
        let rec = |step_us, shape| StepRecord {
            step_us,
            shape,
            ..StepRecord::default()
        };
        let steps = [
            rec(2_000, StepShape::decode(4, 100)),
            rec(3_000, StepShape::decode(8, 100)),
            rec(10_000, StepShape::decode(200, 100)),
            rec(50_000, StepShape::prefill(8192, 0)),
        ];
        // A floor of 1 ms per decode row-group of 4 and 10 µs per prefill token.
        let floor = |s: &StepShape| {
            if s.decode_only {
                s.tokens as f64 / 4.0 * 1e-3
            } else {
                s.tokens as f64 * 1e-5
            }
        };
        let b = Breakdown::of(&steps, 0.1, floor);
        assert_eq!(b.rows.len(), 3, "{b:?}");
        assert_eq!(b.rows[0].class, "decode, 1-8 seqs");
        assert_eq!(b.rows[0].steps, 2);
        assert!((b.rows[0].seconds - 0.005).abs() < 1e-12);
        assert!((b.rows[0].floor_seconds - 0.003).abs() < 1e-12);
        assert_eq!(b.rows[1].class, "decode, 65+ seqs");
        assert!((b.rows[1].floor_seconds - 0.05).abs() < 1e-12);
        assert_eq!(b.rows[2].class, "prefill only");
        assert!((b.rows[2].floor_seconds - 0.08192).abs() < 1e-12);
        // 65 ms in steps of a 100 ms run.
        assert!((b.outside_seconds - 0.035).abs() < 1e-9, "{b:?}");
        let j = b.json();
        assert_eq!(j["classes"].as_array().unwrap().len(), 3);
        assert_eq!(j["classes"][2]["steps"], 1);
        assert_eq!(j["outside_seconds"], 0.035);
        // 3 + 50 + 81.92 ms of floors over the run's 100 ms (65 in steps, 35 outside).
        assert!((b.floor_seconds() - 0.13492).abs() < 1e-12);
        assert!((b.as_run_fraction() - 1.3492).abs() < 1e-9, "{b:?}");
    }

    fn decode(step_us: u64, seqs: u32, kv: u64) -> StepRecord {
        StepRecord {
            step_us,
            seqs,
            shape: StepShape {
                tokens: u64::from(seqs),
                decode_only: true,
                kv_read: kv,
                attn_pairs: 0,
            },
            ..StepRecord::default()
        }
    }

    #[test]
    fn the_decode_fit_recovers_the_generating_parts() {
        // 1,500 µs a step, 0.6 µs a sequence, 1 KB of KV a token at 4 TB/s; batch and
        // contexts varied independently; a prefill step and a small batch left out.
        let kv_token = 1024.0;
        let mut steps: Vec<StepRecord> = (0..300u64)
            .map(|i| {
                let seqs = 9 + (i * 37) % 248;
                let kv = seqs * (200 + (i * 53) % 1800);
                let t = 1500.0 + 0.6 * seqs as f64 + kv as f64 * kv_token / 4e12 * 1e6;
                decode(t.round() as u64, seqs as u32, kv)
            })
            .collect();
        steps.push(StepRecord {
            step_us: 90_000,
            seqs: 16,
            shape: StepShape::prefill(8192, 0),
            ..StepRecord::default()
        });
        steps.push(decode(50_000, 2, 300));
        let f = DecodeFit::of(&steps, 9, kv_token, 200e-6, 4.27e12).expect("a fit");
        assert_eq!(f.steps, 300);
        assert!((f.fixed_us - 1500.0).abs() < 2.0, "{f:?}");
        assert!((f.per_seq_us - 0.6).abs() < 0.05, "{f:?}");
        assert!((f.kv_bytes_s / 1e12 - 4.0).abs() < 0.01, "{f:?}");
        assert!(f.r2 > 0.999, "{f:?}");
        // The parts add up to the measured time, and the weights are one read a step.
        let parts = f.weights_seconds
            + f.fixed_over_seconds
            + f.per_seq_seconds
            + f.kv_floor_seconds
            + f.kv_over_seconds;
        assert!((parts - f.seconds).abs() < 1e-3 * f.seconds, "{f:?}");
        assert!((f.weights_seconds - 300.0 * 200e-6).abs() < 1e-12);
        let j = f.json();
        assert_eq!(j["steps"], 300);
        assert_eq!(j["fixed_us"], 1500.0);
    }

    #[test]
    fn the_decode_fit_refuses_too_few_or_one_size_steps() {
        let few: Vec<_> = (0..7)
            .map(|i| decode(2000 + i, 16 + i as u32, 5000 + 7 * i))
            .collect();
        assert_eq!(DecodeFit::of(&few, 9, 1024.0, 1e-4, 4e12), None);
        // Every step of one batch size: the batch column is the constant's.
        let same: Vec<_> = (0..20)
            .map(|i| decode(2000 + i, 32, 5000 + 700 * i))
            .collect();
        assert_eq!(DecodeFit::of(&same, 9, 1024.0, 1e-4, 4e12), None);
    }

    #[test]
    fn the_decode_fit_of_a_recorded_h200_run_matches_step_fit_py() {
        // A Qwen3-0.6B default-workload run recorded on the H200 (2026-12-04, span call
        // 8). scripts/gpu/step_fit.py gives 1,528 µs a step, 0.52 µs a sequence and the
        // KV at 4.07 TB/s over its 986 decode steps of 9+ sequences.
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let csv = std::fs::read_to_string(
            root.join("docs/results/raw/2026-12-04-span/call8-steps-qwen3-0.6b.csv"),
        )
        .expect("the recorded steps");
        let cfg =
            std::fs::read_to_string(root.join("examples/model-configs/qwen3-0.6b/config.json"))
                .expect("the Qwen3-0.6B config");
        let cfg = minisgl::model::ModelConfig::from_json_str(&cfg).expect("a config");
        let records: Vec<StepRecord> = minisgl::sim::step_log::parse_csv(&csv)
            .expect("a steps CSV")
            .into_iter()
            .map(|(shape, secs)| StepRecord {
                step_us: (secs * 1e6).round() as u64,
                // A decode-only step runs one token a sequence.
                seqs: shape.tokens as u32,
                shape,
                ..StepRecord::default()
            })
            .collect();
        let (weights, kv_token) = crate::cli::bench_floor::decode_bytes(&cfg);
        let f = DecodeFit::of(&records, 9, kv_token, weights / 4.27e12, 4.27e12).expect("a fit");
        assert_eq!(f.steps, 986);
        assert!((f.fixed_us - 1528.0).abs() < 1.0, "{f:?}");
        assert!((f.per_seq_us - 0.52).abs() < 0.01, "{f:?}");
        assert!((f.kv_bytes_s / 1e12 - 4.07).abs() < 0.005, "{f:?}");
        assert!((f.fixed_over_seconds - 1.232).abs() < 0.002, "{f:?}");
    }
}
