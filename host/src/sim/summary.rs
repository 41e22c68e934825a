//! The figures a comparison reports for one replay.

use super::record::RunRecord;

/// p50 / p90 / p99 in milliseconds (NaN when there is no sample).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
}

impl Percentiles {
    /// Nearest-rank percentiles of `v` (in µs), reported in ms.
    pub fn of_us(mut v: Vec<f64>) -> Percentiles {
        v.sort_by(f64::total_cmp);
        let q = |q: f64| {
            if v.is_empty() {
                f64::NAN
            } else {
                v[((v.len() - 1) as f64 * q).round() as usize] / 1e3
            }
        };
        Percentiles {
            p50: q(0.5),
            p90: q(0.9),
            p99: q(0.99),
        }
    }
}

/// Targets for SLO attainment.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Slo {
    pub ttft_ms: f64,
    pub tpot_ms: f64,
}

/// One policy set's results. Everything here is a function of the record's
/// requests and counters (deterministic in the simulator); wall-clock
/// measurements are in [`Timing`].
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    pub requests: usize,
    pub completed: usize,
    pub failed: usize,
    /// From the first arrival to the last completion.
    pub duration_s: f64,
    pub request_throughput: f64,
    pub output_throughput: f64,
    pub ttft: Percentiles,
    pub tpot: Percentiles,
    pub e2e: Percentiles,
    /// Share of all requests that completed within both targets.
    pub slo_attainment: f64,
    pub cache_hit_rate: f64,
    pub preemptions: u64,
    pub evicted_pages: u64,
    pub steps: u64,
    /// Fairness among clients: Jain's index over the tokens (prompt +
    /// output) served to each client with requests in the system, per
    /// window ([`FAIRNESS_WINDOWS`] of the run), averaged over the windows
    /// where at least two clients had requests in the system. 1 is
    /// perfectly even, 1/n is one client served alone; 1 with one client.
    pub jain_fairness: f64,
    pub clients: usize,
    /// Per client (by id), when there is more than one.
    pub per_client: Vec<ClientSummary>,
}

/// One client's share of a replay.
#[derive(Clone, Debug, PartialEq)]
pub struct ClientSummary {
    pub client_id: u64,
    pub requests: usize,
    pub completed: usize,
    /// Prompt + output tokens of its completed requests.
    pub tokens: u64,
    pub ttft: Percentiles,
    pub e2e: Percentiles,
}

/// Measured on the machine that ran the replay (differs between runs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timing {
    /// Policy (plugin) call time per engine step, µs.
    pub policy_us_per_step: f64,
    /// Policy time charged to the replay's clock, µs in total.
    pub policy_charged_us: f64,
    /// Wall-clock seconds the replay took.
    pub wall_s: f64,
}

/// Windows the run is cut into for [`Summary::jain_fairness`].
pub const FAIRNESS_WINDOWS: usize = 20;

/// Jain's index among the clients present in each window, averaged (see
/// [`Summary::jain_fairness`]). A request's prompt tokens count when its first
/// token comes, its output tokens evenly from its first to its last token.
pub fn windowed_jain(r: &RunRecord, windows: usize) -> f64 {
    let ok: Vec<_> = r.requests.iter().filter(|q| q.ok()).collect();
    let end = ok.iter().filter_map(|q| q.finish_us).max().unwrap_or(0) as f64;
    if end <= 0.0 || windows == 0 {
        return 1.0;
    }
    let w = end / windows as f64;
    let (mut sum, mut counted) = (0.0, 0usize);
    for k in 0..windows {
        let (w0, w1) = (k as f64 * w, (k + 1) as f64 * w);
        let mut service = std::collections::BTreeMap::<u64, f64>::new();
        for q in &ok {
            let (a, e) = (q.arrival_us as f64, q.finish_us.unwrap_or(0) as f64);
            if a >= w1 || e < w0 {
                continue;
            }
            let s = service.entry(q.client_id).or_default();
            let (f, l) = (
                q.first_token_us.unwrap_or(0) as f64,
                q.last_token_us.unwrap_or(0) as f64,
            );
            if (w0..w1).contains(&f) {
                *s += f64::from(q.prompt_tokens);
            }
            let out = f64::from(q.output_tokens);
            if l > f {
                let overlap = (l.min(w1) - f.max(w0)).max(0.0);
                *s += out * overlap / (l - f);
            } else if (w0..w1).contains(&f) {
                *s += out;
            }
        }
        if service.len() >= 2 {
            sum += jain(&service.into_values().collect::<Vec<_>>());
            counted += 1;
        }
    }
    if counted == 0 {
        1.0
    } else {
        sum / counted as f64
    }
}

/// Jain's fairness index of `x` (1 for an empty or all-zero input).
pub fn jain(x: &[f64]) -> f64 {
    let s: f64 = x.iter().sum();
    let s2: f64 = x.iter().map(|v| v * v).sum();
    if x.is_empty() || s2 == 0.0 {
        1.0
    } else {
        s * s / (x.len() as f64 * s2)
    }
}

impl Summary {
    pub fn of(r: &RunRecord, slo: Slo) -> Summary {
        let ok: Vec<_> = r.requests.iter().filter(|q| q.ok()).collect();
        let end = ok.iter().filter_map(|q| q.finish_us).max().unwrap_or(0);
        let start = r.requests.iter().map(|q| q.arrival_us).min().unwrap_or(0);
        let duration_s = (end.saturating_sub(start)) as f64 / 1e6;
        let out: u64 = ok.iter().map(|q| u64::from(q.output_tokens)).sum();
        let per = |x: f64| {
            if duration_s > 0.0 {
                x / duration_s
            } else {
                0.0
            }
        };
        let met = ok
            .iter()
            .filter(|q| {
                q.ttft_us().is_some_and(|t| t as f64 <= slo.ttft_ms * 1e3)
                    && q.tpot_us().is_none_or(|t| t <= slo.tpot_ms * 1e3)
            })
            .count();
        let clients: std::collections::BTreeSet<u64> =
            r.requests.iter().map(|q| q.client_id).collect();
        let per_client = if clients.len() < 2 {
            Vec::new()
        } else {
            clients
                .iter()
                .map(|&c| {
                    let mine: Vec<_> = ok.iter().filter(|q| q.client_id == c).collect();
                    ClientSummary {
                        client_id: c,
                        requests: r.requests.iter().filter(|q| q.client_id == c).count(),
                        completed: mine.len(),
                        tokens: mine
                            .iter()
                            .map(|q| u64::from(q.prompt_tokens) + u64::from(q.output_tokens))
                            .sum(),
                        ttft: Percentiles::of_us(
                            mine.iter()
                                .filter_map(|q| q.ttft_us())
                                .map(|v| v as f64)
                                .collect(),
                        ),
                        e2e: Percentiles::of_us(
                            mine.iter()
                                .filter_map(|q| q.e2e_us())
                                .map(|v| v as f64)
                                .collect(),
                        ),
                    }
                })
                .collect()
        };
        Summary {
            requests: r.requests.len(),
            completed: ok.len(),
            failed: r.requests.len() - ok.len(),
            duration_s,
            request_throughput: per(ok.len() as f64),
            output_throughput: per(out as f64),
            ttft: Percentiles::of_us(
                ok.iter()
                    .filter_map(|q| q.ttft_us())
                    .map(|v| v as f64)
                    .collect(),
            ),
            tpot: Percentiles::of_us(ok.iter().filter_map(|q| q.tpot_us()).collect()),
            e2e: Percentiles::of_us(
                ok.iter()
                    .filter_map(|q| q.e2e_us())
                    .map(|v| v as f64)
                    .collect(),
            ),
            slo_attainment: if r.requests.is_empty() {
                0.0
            } else {
                met as f64 / r.requests.len() as f64
            },
            cache_hit_rate: r.metrics.cache_hit_rate(),
            preemptions: r.metrics.preemptions,
            evicted_pages: r.metrics.evicted_pages,
            steps: r.metrics.steps,
            jain_fairness: windowed_jain(r, FAIRNESS_WINDOWS),
            clients: clients.len(),
            per_client,
        }
    }
}

impl Timing {
    pub fn of(r: &RunRecord) -> Timing {
        Timing {
            policy_us_per_step: if r.metrics.steps == 0 {
                0.0
            } else {
                r.policy_wall_us / r.metrics.steps as f64
            },
            policy_charged_us: r.policy_charged_us,
            wall_s: r.wall_s,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_bounds() {
        assert!((jain(&[1.0, 1.0, 1.0]) - 1.0).abs() < 1e-12);
        assert!((jain(&[1.0, 0.0, 0.0, 0.0]) - 0.25).abs() < 1e-12);
        assert_eq!(jain(&[]), 1.0);
    }

    #[test]
    fn percentiles_in_ms() {
        let p = Percentiles::of_us((1..=100).map(|v| v as f64 * 1000.0).collect());
        assert_eq!((p.p50, p.p90, p.p99), (51.0, 90.0, 99.0));
    }
}
