//! The comparison's plots, each written as SVG and as PNG (through
//! `plotters`): TTFT CDF, throughput, queue length and KV usage over time, one
//! line per policy set.
//!
//! Text needs a font: the SVG files name one (`sans-serif`) and leave drawing
//! to the viewer, but the bitmap backend rasterises glyphs itself. A fresh CI
//! machine may have no fontconfig or freetype, so the glyphs come from a subset
//! of DejaVu Sans embedded in the binary (`host/assets/fonts`, Bitstream Vera
//! licence) and drawn by plotters' pure-Rust `ab_glyph` path. The same font
//! lays out the SVG labels, so both files place their text alike. (plotters
//! 0.3.7 draws each glyph at its pen position without the left side bearing,
//! so letter spacing in the PNG labels is off by a pixel here and there.)

use std::path::Path;
use std::sync::Once;

use anyhow::Context;
use plotters::coord::Shift;
use plotters::prelude::*;

use minisgl::sim::RunRecord;

/// A named line: `(x, y)` points.
pub type Series = (String, Vec<(f64, f64)>);

/// Plot size in pixels (SVG user units and PNG pixels alike).
const SIZE: (u32, u32) = (800, 500);

/// ASCII, Latin-1 and a few punctuation marks of DejaVu Sans: enough for the
/// titles, axis labels, numbers and policy names, at 40 KB instead of 760 KB.
static FONT: &[u8] = include_bytes!("../../../assets/fonts/DejaVuSans-subset.ttf");

/// Registers [`FONT`] under every family name plotters may ask for. With the
/// `ab_glyph` feature, a family that was never registered is an error at the
/// first label, not a fallback.
fn register_fonts() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for family in ["sans-serif", "serif", "monospace"] {
            // The font is a constant that parses (the PNG test draws with it), so
            // failure here is a broken build, not an input error.
            if plotters::style::register_font(family, FontStyle::Normal, FONT).is_err() {
                panic!("embedded font {family} does not parse");
            }
        }
    });
}

/// Draws `series` into an SVG file at `path`.
pub fn line_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> anyhow::Result<()> {
    register_fonts();
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    draw_chart(&root, title, x_label, y_label, series)
        .with_context(|| format!("drawing {}", path.display()))
}

/// Draws `series` into a PNG file at `path`: rendered into an RGB buffer, then
/// encoded by the `png` crate (deterministic, so the same runs give the same
/// bytes).
pub fn line_chart_png(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> anyhow::Result<()> {
    register_fonts();
    let (w, h) = SIZE;
    let mut rgb = vec![0u8; (w * h * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, SIZE).into_drawing_area();
        draw_chart(&root, title, x_label, y_label, series)
            .with_context(|| format!("drawing {}", path.display()))?;
    }
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(file), w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    enc.set_compression(png::Compression::Best);
    let mut writer = enc.write_header()?;
    writer.write_image_data(&rgb)?;
    writer.finish()?;
    Ok(())
}

/// The chart itself, on any plotters backend.
fn draw_chart<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
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
    let draw = || -> Result<(), Box<dyn std::error::Error + '_>> {
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(root)
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
    draw().map_err(|e| anyhow::anyhow!("{e}"))
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
pub fn gauge(
    r: &RunRecord,
    max: usize,
    f: impl Fn(&minisgl::sim::Sample) -> f64,
) -> Vec<(f64, f64)> {
    let step = r.samples.len().div_ceil(max.max(1)).max(1);
    r.samples
        .iter()
        .enumerate()
        .filter(|(i, _)| i % step == 0 || *i + 1 == r.samples.len())
        .map(|(_, s)| (s.t_us as f64 / 1e6, f(s)))
        .collect()
}

/// Writes every plot for the runs into `dir`, each as `NAME.svg` and
/// `NAME.png`; returns the file names.
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
            "ttft_cdf",
            "TTFT CDF",
            "TTFT (s)",
            "fraction of requests",
            per(&ttft_cdf),
        ),
        (
            "throughput",
            "Output throughput over time",
            "time (s)",
            "output tokens / s",
            per(&|r| throughput(r, end_s, 60)),
        ),
        (
            "queue",
            "Waiting requests over time",
            "time (s)",
            "queue length",
            per(&|r| gauge(r, 2000, |s| s.queue_len as f64)),
        ),
        (
            "kv",
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
    for (stem, title, xl, yl, series) in plots {
        let (svg, png) = (format!("{stem}.svg"), format!("{stem}.png"));
        line_chart(&dir.join(&svg), title, xl, yl, &series)?;
        line_chart_png(&dir.join(&png), title, xl, yl, &series)?;
        names.push(svg);
        names.push(png);
    }
    Ok(names)
}
