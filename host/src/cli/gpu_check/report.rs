//! Results of gpu-check: a table of comparisons plus free-form notes and timings.

/// One comparison.
pub struct Row {
    pub group: &'static str,
    pub case: String,
    /// ‖gpu − cpu‖ / ‖cpu‖.
    pub rel: f64,
    pub max_abs: f64,
    pub tol: f64,
    pub pass: bool,
    pub extra: String,
}

#[derive(Default)]
pub struct Report {
    pub rows: Vec<Row>,
    pub notes: Vec<String>,
    pub bench: Vec<String>,
}

impl Report {
    /// Record a benchmark line (printed at once, so partial runs still show it).
    pub fn bench_line(&mut self, s: String) {
        println!("bench: {s}");
        self.bench.push(s);
    }
}

/// Relative L2 error and max |a − b|; NaN anywhere makes both infinite.
pub fn compare(gpu: &[f32], cpu: &[f32]) -> (f64, f64) {
    if gpu.len() != cpu.len() {
        return (f64::INFINITY, f64::INFINITY);
    }
    let (mut num, mut den, mut mx) = (0.0f64, 0.0f64, 0.0f64);
    for (&a, &b) in gpu.iter().zip(cpu) {
        if a.is_nan() || b.is_nan() {
            return (f64::INFINITY, f64::INFINITY);
        }
        if a == b {
            continue; // equal infinities included (masked logits)
        }
        let d = a as f64 - b as f64;
        num += d * d;
        den += (b as f64) * (b as f64);
        mx = mx.max(d.abs());
    }
    let den: f64 = cpu
        .iter()
        .filter(|b| b.is_finite())
        .map(|&b| (b as f64) * (b as f64))
        .sum::<f64>()
        .max(den);
    ((num / den.max(1e-30)).sqrt(), mx)
}

impl Report {
    pub fn note(&mut self, s: String) {
        self.notes.push(s);
    }

    /// Record a comparison of `gpu` against `cpu` with tolerance `tol` on the relative error.
    pub fn check(
        &mut self,
        group: &'static str,
        case: String,
        gpu: &[f32],
        cpu: &[f32],
        tol: f64,
    ) -> bool {
        let (rel, max_abs) = compare(gpu, cpu);
        let pass = rel <= tol;
        println!(
            "{} {group} {case}: rel {rel:.3e} max_abs {max_abs:.3e} (tol {tol:.0e})",
            if pass { "ok  " } else { "FAIL" }
        );
        self.rows.push(Row {
            group,
            case,
            rel,
            max_abs,
            tol,
            pass,
            extra: String::new(),
        });
        pass
    }

    /// Record a pass/fail fact with a description.
    pub fn fact(&mut self, group: &'static str, case: String, pass: bool, extra: String) {
        println!(
            "{} {group} {case}: {extra}",
            if pass { "ok  " } else { "FAIL" }
        );
        self.rows.push(Row {
            group,
            case,
            rel: 0.0,
            max_abs: 0.0,
            tol: 0.0,
            pass,
            extra,
        });
    }

    pub fn failures(&self) -> usize {
        self.rows.iter().filter(|r| !r.pass).count()
    }

    pub fn print(&self) {
        println!(
            "\n{:<10} {:<58} {:>10} {:>10} {:>6}  extra",
            "group", "case", "rel_err", "max_abs", "ok"
        );
        for r in &self.rows {
            println!(
                "{:<10} {:<58} {:>10.3e} {:>10.3e} {:>6}  {}",
                r.group,
                r.case,
                r.rel,
                r.max_abs,
                if r.pass { "pass" } else { "FAIL" },
                r.extra
            );
        }
        println!("{} checks, {} failed", self.rows.len(), self.failures());
    }

    pub fn markdown(&self) -> String {
        let mut s = String::new();
        for n in &self.notes {
            s.push_str(&format!("- {n}\n"));
        }
        s.push_str("\n| group | case | rel. L2 error | max abs | tol | result | notes |\n|---|---|---|---|---|---|---|\n");
        for r in &self.rows {
            s.push_str(&format!(
                "| {} | {} | {:.2e} | {:.2e} | {:.0e} | {} | {} |\n",
                r.group,
                r.case,
                r.rel,
                r.max_abs,
                r.tol,
                if r.pass { "pass" } else { "**FAIL**" },
                r.extra
            ));
        }
        if !self.bench.is_empty() {
            s.push_str("\n## Benchmark\n\n");
            for b in &self.bench {
                s.push_str(&format!("- {b}\n"));
            }
        }
        s.push_str(&format!(
            "\n{} checks, {} failed\n",
            self.rows.len(),
            self.failures()
        ));
        s
    }
}
