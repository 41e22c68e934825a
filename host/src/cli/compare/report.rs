//! The comparison table: Markdown and CSV of the deterministic figures
//! (`results.md`, `results.csv`), and the wall-clock measurements apart
//! (`timing.md`), so a simulated comparison's results are byte-identical
//! between runs.

use std::fmt::Write as _;

use minisgl::sim::{Slo, Summary, Timing};

/// One policy set's row.
pub struct Row<'a> {
    pub name: &'a str,
    pub spec: &'a str,
    pub summary: &'a Summary,
    pub timing: &'a Timing,
}

const COLUMNS: [&str; 24] = [
    "policy",
    "spec",
    "completed",
    "failed",
    "duration_s",
    "req_per_s",
    "out_tok_per_s",
    "ttft_p50_ms",
    "ttft_p90_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
    "tpot_p90_ms",
    "tpot_p99_ms",
    "e2e_p50_ms",
    "e2e_p90_ms",
    "e2e_p99_ms",
    "slo_attainment",
    "cache_hit_rate",
    "preemptions",
    "evicted_pages",
    "steps",
    "jain_fairness",
    "clients",
    "requests",
];

fn cells(r: &Row) -> Vec<String> {
    let s = r.summary;
    let f1 = |v: f64| format!("{v:.1}");
    let f2 = |v: f64| format!("{v:.2}");
    let f3 = |v: f64| format!("{v:.3}");
    vec![
        r.name.to_string(),
        r.spec.to_string(),
        s.completed.to_string(),
        s.failed.to_string(),
        f3(s.duration_s),
        f2(s.request_throughput),
        f1(s.output_throughput),
        f1(s.ttft.p50),
        f1(s.ttft.p90),
        f1(s.ttft.p99),
        f2(s.tpot.p50),
        f2(s.tpot.p90),
        f2(s.tpot.p99),
        f1(s.e2e.p50),
        f1(s.e2e.p90),
        f1(s.e2e.p99),
        f3(s.slo_attainment),
        f3(s.cache_hit_rate),
        s.preemptions.to_string(),
        s.evicted_pages.to_string(),
        s.steps.to_string(),
        f3(s.jain_fairness),
        s.clients.to_string(),
        s.requests.to_string(),
    ]
}

pub fn csv(rows: &[Row]) -> String {
    let mut out = COLUMNS.join(",");
    out.push('\n');
    for r in rows {
        let c: Vec<String> = cells(r)
            .into_iter()
            .map(|v| {
                if v.contains(',') || v.contains('"') {
                    format!("\"{}\"", v.replace('"', "\"\""))
                } else {
                    v
                }
            })
            .collect();
        out.push_str(&c.join(","));
        out.push('\n');
    }
    out
}

/// The Markdown report; `header` describes the run (workload, backend, profile).
pub fn markdown(header: &str, slo: Slo, rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{header}\n");
    let _ = writeln!(
        out,
        "| policy | out tok/s | req/s | TTFT p50 / p90 / p99 (ms) | TPOT p50 / p90 / p99 (ms) | \
         E2E p50 / p90 / p99 (ms) | SLO ({} ms TTFT, {} ms TPOT) | cache hit | preempt | evicted pages | Jain | done / failed |",
        slo.ttft_ms, slo.tpot_ms
    );
    let _ = writeln!(
        out,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for r in rows {
        let s = r.summary;
        let _ = writeln!(
            out,
            "| {} | {:.1} | {:.2} | {:.1} / {:.1} / {:.1} | {:.2} / {:.2} / {:.2} | {:.1} / {:.1} / {:.1} | {:.1}% | {:.1}% | {} | {} | {:.3} | {} / {} |",
            r.name,
            s.output_throughput,
            s.request_throughput,
            s.ttft.p50,
            s.ttft.p90,
            s.ttft.p99,
            s.tpot.p50,
            s.tpot.p90,
            s.tpot.p99,
            s.e2e.p50,
            s.e2e.p90,
            s.e2e.p99,
            100.0 * s.slo_attainment,
            100.0 * s.cache_hit_rate,
            s.preemptions,
            s.evicted_pages,
            s.jain_fairness,
            s.completed,
            s.failed
        );
    }
    if rows.iter().any(|r| !r.summary.per_client.is_empty()) {
        let _ = writeln!(
            out,
            "\nPer client (priority = client id % 3 for traces and multi-tenant workloads):\n\n\
             | policy | client | requests | tokens served | TTFT p50 / p90 / p99 (ms) | E2E p50 / p90 / p99 (ms) |\n\
             |---|---:|---:|---:|---:|---:|"
        );
        for r in rows {
            for c in &r.summary.per_client {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} / {} | {} | {:.1} / {:.1} / {:.1} | {:.1} / {:.1} / {:.1} |",
                    r.name,
                    c.client_id,
                    c.completed,
                    c.requests,
                    c.tokens,
                    c.ttft.p50,
                    c.ttft.p90,
                    c.ttft.p99,
                    c.e2e.p50,
                    c.e2e.p90,
                    c.e2e.p99
                );
            }
        }
    }
    let _ = writeln!(out, "\nPolicy sets:\n");
    for r in rows {
        let _ = writeln!(out, "- `{}` = `{}`", r.name, r.spec);
    }
    out
}

/// Wall-clock measurements (not reproducible bit for bit).
pub fn timing(rows: &[Row]) -> String {
    let mut out = String::from(
        "Measured on the machine that ran the comparison (differs between runs).\n\n\
         | policy | policy µs / step | policy µs charged | wall s |\n|---|---:|---:|---:|\n",
    );
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {:.2} | {:.0} | {:.3} |",
            r.name, r.timing.policy_us_per_step, r.timing.policy_charged_us, r.timing.wall_s
        );
    }
    out
}
