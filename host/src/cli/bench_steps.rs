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
    }
}
