//! Server-side metrics (request counts, token counts, latency histograms)
//! and the Prometheus text rendering of them. Engine and plugin gauges are
//! appended by `server::routes::metrics` from the engine's own snapshot.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

/// A fixed-bucket histogram (Prometheus `histogram` type).
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    counts: Vec<AtomicU64>,
    sum_micros: AtomicU64,
    count: AtomicU64,
}

/// Buckets in seconds for time to first token and end-to-end latency.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
/// Buckets in seconds for time per output token.
pub const TPOT_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            sum_micros: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, seconds: f64) {
        if let Some(i) = self.bounds.iter().position(|&b| seconds <= b) {
            self.counts[i].fetch_add(1, Ordering::Relaxed);
        }
        self.sum_micros
            .fetch_add((seconds * 1e6).max(0.0) as u64, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cum = 0;
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            cum += c.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {cum}");
        }
        let n = self.count();
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {n}");
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {n}");
    }
}

/// Counters the HTTP layer owns.
#[derive(Debug)]
pub struct ServerMetrics {
    /// (endpoint, status code) → responses.
    responses: Mutex<BTreeMap<(&'static str, u16), u64>>,
    /// finish reason → finished sequences.
    finished: Mutex<BTreeMap<&'static str, u64>>,
    /// (kind, result, path) → admin swap requests, result `ok` or `refused`.
    swaps: Mutex<BTreeMap<(String, &'static str, String), u64>>,
    pub prompt_tokens: AtomicU64,
    pub generation_tokens: AtomicU64,
    pub cached_tokens: AtomicU64,
    pub disconnects: AtomicU64,
    pub in_flight: AtomicU64,
    pub ttft: Histogram,
    pub tpot: Histogram,
    pub e2e: Histogram,
}

impl Default for ServerMetrics {
    fn default() -> Self {
        ServerMetrics {
            responses: Mutex::default(),
            finished: Mutex::default(),
            swaps: Mutex::default(),
            prompt_tokens: AtomicU64::new(0),
            generation_tokens: AtomicU64::new(0),
            cached_tokens: AtomicU64::new(0),
            disconnects: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            ttft: Histogram::new(LATENCY_BUCKETS),
            tpot: Histogram::new(TPOT_BUCKETS),
            e2e: Histogram::new(LATENCY_BUCKETS),
        }
    }
}

impl ServerMetrics {
    pub fn response(&self, endpoint: &'static str, status: u16) {
        *self.responses.lock().entry((endpoint, status)).or_default() += 1;
    }

    pub fn finished(&self, reason: &'static str) {
        *self.finished.lock().entry(reason).or_default() += 1;
    }

    /// Records an admin swap request for `kind` loading `path`. The path
    /// label is shortened ([`path_label`]) and at most [`MAX_SWAP_SERIES`]
    /// series are kept; later new paths count under `path="other"`, so
    /// callers cannot grow `/metrics` without bound.
    pub fn swap(&self, kind: &str, path: &str, ok: bool) {
        let result = if ok { "ok" } else { "refused" };
        let mut swaps = self.swaps.lock();
        let mut key = (kind.to_string(), result, path_label(path));
        // One series is kept free for `other`.
        if !swaps.contains_key(&key) && swaps.len() >= MAX_SWAP_SERIES - 1 {
            key.2 = "other".to_string();
        }
        *swaps.entry(key).or_default() += 1;
    }

    /// Appends this layer's metrics in Prometheus text format.
    pub fn render(&self, out: &mut String) {
        let counter = |out: &mut String, name: &str, help: &str, v: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
            );
        };
        let _ = writeln!(
            out,
            "# HELP minisgl_http_responses_total HTTP responses by endpoint and status.\n\
             # TYPE minisgl_http_responses_total counter"
        );
        for ((ep, st), n) in self.responses.lock().iter() {
            let _ = writeln!(
                out,
                "minisgl_http_responses_total{{endpoint=\"{ep}\",status=\"{st}\"}} {n}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP minisgl_request_success_total Finished sequences by finish reason.\n\
             # TYPE minisgl_request_success_total counter"
        );
        for (r, n) in self.finished.lock().iter() {
            let _ = writeln!(
                out,
                "minisgl_request_success_total{{finish_reason=\"{r}\"}} {n}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP minisgl_admin_plugin_swaps_total Plugin swap requests through the admin API, by file.\n\
             # TYPE minisgl_admin_plugin_swaps_total counter"
        );
        for ((k, r, p), n) in self.swaps.lock().iter() {
            let _ = writeln!(
                out,
                "minisgl_admin_plugin_swaps_total{{kind=\"{k}\",result=\"{r}\",path=\"{}\"}} {n}",
                label(p)
            );
        }
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        counter(
            out,
            "minisgl_prompt_tokens_total",
            "Prompt tokens of admitted requests.",
            load(&self.prompt_tokens),
        );
        counter(
            out,
            "minisgl_generation_tokens_total",
            "Generated tokens.",
            load(&self.generation_tokens),
        );
        counter(
            out,
            "minisgl_cached_prompt_tokens_total",
            "Prompt tokens served from the prefix cache.",
            load(&self.cached_tokens),
        );
        counter(
            out,
            "minisgl_client_disconnects_total",
            "Requests aborted because the client went away.",
            load(&self.disconnects),
        );
        let _ = writeln!(
            out,
            "# HELP minisgl_requests_in_flight Sequences submitted and not finished.\n\
             # TYPE minisgl_requests_in_flight gauge\nminisgl_requests_in_flight {}",
            load(&self.in_flight)
        );
        self.ttft.render(
            out,
            "minisgl_time_to_first_token_seconds",
            "Time to first token.",
        );
        self.tpot.render(
            out,
            "minisgl_time_per_output_token_seconds",
            "Mean time per output token after the first, per sequence.",
        );
        self.e2e.render(
            out,
            "minisgl_e2e_request_latency_seconds",
            "End-to-end sequence latency.",
        );
    }
}

/// Most `minisgl_admin_plugin_swaps_total` series kept (`other` included).
pub const MAX_SWAP_SERIES: usize = 64;

/// A short, stable label for a plugin path: the file name cut to 40
/// characters plus 8 hex digits of the full path's SHA-256, which tells
/// paths with the same file name apart.
pub fn path_label(path: &str) -> String {
    use sha2::{Digest, Sha256};
    let file = path.rsplit('/').next().unwrap_or(path);
    let short: String = file.chars().filter(|c| !c.is_control()).take(40).collect();
    let digest = hex::encode(&Sha256::digest(path.as_bytes())[..4]);
    format!("{short}#{digest}")
}

/// Escapes a Prometheus label value.
pub fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_is_cumulative() {
        let h = Histogram::new(&[0.1, 1.0]);
        h.observe(0.05);
        h.observe(0.5);
        h.observe(5.0);
        let mut s = String::new();
        h.render(&mut s, "x", "help");
        assert!(s.contains("x_bucket{le=\"0.1\"} 1"), "{s}");
        assert!(s.contains("x_bucket{le=\"1\"} 2"), "{s}");
        assert!(s.contains("x_bucket{le=\"+Inf\"} 3"), "{s}");
        assert!(s.contains("x_count 3"), "{s}");
    }

    #[test]
    fn swap_series_are_bounded() {
        let m = ServerMetrics::default();
        let long = format!("/tmp/{}", "p".repeat(1 << 20));
        for i in 0..1000 {
            m.swap("scheduler", &format!("{long}{i}"), false);
        }
        let mut s = String::new();
        m.render(&mut s);
        assert!(s.len() < 16 << 10, "/metrics grew to {} bytes", s.len());
        assert!(s.contains("path=\"other\"} 937"), "{s}");
    }

    #[test]
    fn render_has_swaps_and_responses() {
        let m = ServerMetrics::default();
        m.swap("scheduler", "/x/b\"ad.wasm", false);
        m.response("completions", 400);
        let mut s = String::new();
        m.render(&mut s);
        let want = format!(
            "minisgl_admin_plugin_swaps_total{{kind=\"scheduler\",result=\"refused\",path=\"{}\"}} 1",
            label(&path_label("/x/b\"ad.wasm"))
        );
        assert!(s.contains(&want), "{s}");
        assert!(path_label("/x/b\"ad.wasm").starts_with("b\"ad.wasm#"));
        assert!(
            s.contains("minisgl_http_responses_total{endpoint=\"completions\",status=\"400\"} 1")
        );
    }
}
