//! The comparison's plots (SVG, through `plotters`): TTFT CDF, throughput,
//! queue length and KV usage over time, one line per policy set.
//!
//! PNG is not produced: plotters' bitmap backend needs a font library or a
//! font file to draw text, and the SVG files carry the same lines.

use std::path::Path;

use anyhow::Context;
use plotters::prelude::*;

use crate::sim::RunRecord;

/// A named line: `(x, y)` points.
pub type Series = (String, Vec<(f64, f64)>);

/// Draws `series` into an SVG file at `path`.
pub fn line_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> anyhow::Result<()> {
    let pts = series.iter().flat_map(|s| s.1.iter());
    let (mut x1, mut y1) = (0.0f64, 0.0f64);
    for &(x, y) in pts {
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    let (x1, y1) = (
        if x1 > 0.0 { x1 } else { 1.0 },
        if y1 > 0.0 { y1 * 1.05 } else { 1.0 },
    );
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    let draw = || -> Result<(), Box<dyn std::error::Error + '_>> {
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..x1, 0.0..y1)?;
        chart
            .configure_mesh()
            .x_desc(x_label)
            .y_desc(y_label)
            .light_line_style(WHITE.mix(0.0))
            .draw()?;
        for (i, (name, pts)) in series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))?
                .label(name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 18, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::LowerRight)
            .draw()?;
        root.present()?;
        Ok(())
    };
    draw()
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("drawing {}", path.display()))
}

/// TTFT empirical CDF (seconds, fraction of completed requests).
pub fn ttft_cdf(r: &RunRecord) -> Vec<(f64, f64)> {
    let mut v: Vec<f64> = r
        .requests
        .iter()
        .filter(|q| q.ok())
        .filter_map(|q| q.ttft_us())
        .map(|t| t as f64 / 1e6)
        .collect();
    v.sort_by(f64::total_cmp);
    let n = v.len().max(1) as f64;
    let mut out = vec![(0.0, 0.0)];
    out.extend(v.iter().enumerate().map(|(i, &t)| (t, (i + 1) as f64 / n)));
    out
}

/// Output tokens per second in `buckets` equal time windows.
pub fn throughput(r: &RunRecord, end_s: f64, buckets: usize) -> Vec<(f64, f64)> {
    let w = (end_s / buckets as f64).max(1e-6);
    let mut counts = vec![0.0f64; buckets + 1];
    let mut prev = 0u64;
    for s in &r.samples {
        let b = ((s.t_us as f64 / 1e6) / w) as usize;
        counts[b.min(buckets)] += (s.output_tokens - prev.min(s.output_tokens)) as f64;
        prev = s.output_tokens;
    }
    counts
        .iter()
        .enumerate()
        .map(|(i, c)| ((i as f64 + 0.5) * w, c / w))
        .collect()
}

/// A gauge over time, thinned to at most `max` points (the last sample of
/// each window).
pub fn gauge(r: &RunRecord, max: usize, f: impl Fn(&crate::sim::Sample) -> f64) -> Vec<(f64, f64)> {
    let step = r.samples.len().div_ceil(max.max(1)).max(1);
    r.samples
        .iter()
        .enumerate()
        .filter(|(i, _)| i % step == 0 || *i + 1 == r.samples.len())
        .map(|(_, s)| (s.t_us as f64 / 1e6, f(s)))
        .collect()
}

/// Writes every plot for the runs into `dir`; returns the file names.
pub fn write_all(
    dir: &Path,
    runs: &[(String, &RunRecord)],
    kv_pages: u64,
) -> anyhow::Result<Vec<String>> {
    let end_s = runs
        .iter()
        .filter_map(|(_, r)| r.samples.last())
        .map(|s| s.t_us as f64 / 1e6)
        .fold(0.0, f64::max);
    let per = |f: &dyn Fn(&RunRecord) -> Vec<(f64, f64)>| -> Vec<Series> {
        runs.iter().map(|(n, r)| (n.clone(), f(r))).collect()
    };
    let total = kv_pages.max(1) as f64;
    let plots: [(&str, &str, &str, &str, Vec<Series>); 4] = [
        (
            "ttft_cdf.svg",
            "TTFT CDF",
            "TTFT (s)",
            "fraction of requests",
            per(&ttft_cdf),
        ),
        (
            "throughput.svg",
            "Output throughput over time",
            "time (s)",
            "output tokens / s",
            per(&|r| throughput(r, end_s, 60)),
        ),
        (
            "queue.svg",
            "Waiting requests over time",
            "time (s)",
            "queue length",
            per(&|r| gauge(r, 2000, |s| s.queue_len as f64)),
        ),
        (
            "kv.svg",
            "KV pages in use (requests + radix cache)",
            "time (s)",
            "fraction of the pool",
            per(&|r| {
                gauge(r, 2000, |s| {
                    (s.kv_used_pages + s.kv_cached_pages) as f64 / total
                })
            }),
        ),
    ];
    let mut names = Vec::new();
    for (file, title, xl, yl, series) in plots {
        line_chart(&dir.join(file), title, xl, yl, &series)?;
        names.push(file.to_string());
    }
    Ok(names)
}
