//! Public traces: Mooncake JSONL (`timestamp` ms, `input_length`,
//! `output_length`, `hash_ids` of 512-token blocks: requests sharing leading
//! hash ids share a token prefix, rebuilt exactly because a block's tokens are
//! a function of its hash id) and the Azure LLM inference CSV
//! (`TIMESTAMP,ContextTokens,GeneratedTokens`).

use std::path::{Path, PathBuf};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde_json::Value;

use super::{random_tokens, TimedRequest};

/// How a trace is read and scaled (the options `bench online` and `compare`
/// share).
#[derive(Clone, Debug)]
pub struct TraceOptions {
    /// The first N requests.
    pub num_requests: usize,
    /// Multiplies inter-arrival gaps (0.1 = ten times faster).
    pub time_scale: f64,
    /// Multiplies lengths and the Mooncake block size (e.g. 0.01).
    pub length_scale: f64,
    pub max_input_len: Option<usize>,
    pub max_output_len: Option<usize>,
    /// Prompt token ids are drawn below this.
    pub vocab: u32,
    pub seed: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("reading trace {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}: {detail}")]
    Line {
        path: PathBuf,
        line: usize,
        detail: String,
    },
    #[error("{0} holds no requests")]
    Empty(PathBuf),
    #[error("time_scale and length_scale must be positive and finite, got {time} and {length}")]
    Scale { time: f64, length: f64 },
}

/// Seconds of the day (plus days of the month) of `2023-11-16 18:17:03.9799600`.
pub fn azure_time(s: &str) -> Option<f64> {
    let (date, time) = s.trim().split_once(' ')?;
    let day: f64 = date.rsplit('-').next()?.parse().ok()?;
    let mut parts = time.split(':');
    let h: f64 = parts.next()?.parse().ok()?;
    let m: f64 = parts.next()?.parse().ok()?;
    let sec: f64 = parts.next()?.parse().ok()?;
    Some(day * 86400.0 + h * 3600.0 + m * 60.0 + sec)
}

/// Loads a Mooncake (`.jsonl`) or Azure (`.csv`) trace, arrivals relative to
/// its first request.
pub fn load(path: &Path, o: &TraceOptions) -> Result<Vec<TimedRequest>, TraceError> {
    let positive = |v: f64| v > 0.0 && v.is_finite();
    if !positive(o.time_scale) || !positive(o.length_scale) {
        return Err(TraceError::Scale {
            time: o.time_scale,
            length: o.length_scale,
        });
    }
    let text = std::fs::read_to_string(path).map_err(|source| TraceError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut rng = ChaCha8Rng::seed_from_u64(o.seed);
    let cap_in = |n: usize| o.max_input_len.map_or(n, |c| n.min(c)).max(1);
    let cap_out = |n: usize| o.max_output_len.map_or(n, |c| n.min(c)).max(1) as u32;
    let scale = |n: f64| ((n * o.length_scale).round() as usize).max(1);
    let bad = |line: usize, detail: String| TraceError::Line {
        path: path.to_path_buf(),
        line,
        detail,
    };
    let mut out = Vec::new();
    let mut t0 = None;
    if path.extension().is_some_and(|e| e == "csv") {
        for (i, line) in text.lines().enumerate().skip(1) {
            if out.len() >= o.num_requests {
                break;
            }
            let f: Vec<&str> = line.split(',').collect();
            let parsed = (|| {
                Some((
                    azure_time(f.first()?)?,
                    f.get(1)?.trim().parse::<f64>().ok()?,
                    f.get(2)?.trim().parse::<f64>().ok()?,
                ))
            })();
            let Some((ts, n_in, n_out)) = parsed else {
                return Err(bad(
                    i + 1,
                    format!("expected TIMESTAMP,ContextTokens,GeneratedTokens, got {line:?}"),
                ));
            };
            let start = *t0.get_or_insert(ts);
            let prompt = random_tokens(&mut rng, cap_in(scale(n_in)), o.vocab);
            out.push(TimedRequest::new(
                (ts - start) * o.time_scale,
                prompt,
                cap_out(scale(n_out)),
            ));
        }
    } else {
        let block = scale(512.0);
        for (i, line) in text.lines().enumerate() {
            if out.len() >= o.num_requests {
                break;
            }
            if line.trim().is_empty() {
                continue;
            }
            let v: Value =
                serde_json::from_str(line).map_err(|e| bad(i + 1, format!("not JSON: {e}")))?;
            let (Some(ts), Some(n_in), Some(n_out)) = (
                v["timestamp"].as_f64(),
                v["input_length"].as_f64(),
                v["output_length"].as_f64(),
            ) else {
                return Err(bad(
                    i + 1,
                    "expected timestamp, input_length, output_length".into(),
                ));
            };
            let n_in = cap_in(scale(n_in));
            let mut prompt = Vec::with_capacity(n_in);
            for h in v["hash_ids"].as_array().into_iter().flatten() {
                if prompt.len() >= n_in {
                    break;
                }
                let mut brng =
                    ChaCha8Rng::seed_from_u64(h.as_u64().unwrap_or(0) ^ o.seed.rotate_left(32));
                prompt.extend(random_tokens(&mut brng, block, o.vocab));
            }
            if prompt.len() < n_in {
                let extra = n_in - prompt.len();
                prompt.extend(random_tokens(&mut rng, extra, o.vocab));
            }
            prompt.truncate(n_in);
            let start = *t0.get_or_insert(ts);
            out.push(TimedRequest::new(
                (ts - start) / 1000.0 * o.time_scale,
                prompt,
                cap_out(scale(n_out)),
            ));
        }
    }
    if out.is_empty() {
        return Err(TraceError::Empty(path.to_path_buf()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn azure_times() {
        let a = azure_time("2023-11-16 18:17:03.9799600").unwrap();
        let b = azure_time("2023-11-16 18:17:04.0319600").unwrap();
        assert!((b - a - 0.052).abs() < 1e-6);
    }

    #[test]
    fn mooncake_prefixes_are_shared() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.jsonl");
        std::fs::write(
            &p,
            "{\"timestamp\": 0, \"input_length\": 1000, \"output_length\": 10, \"hash_ids\": [0, 1]}\n\
             {\"timestamp\": 500, \"input_length\": 1000, \"output_length\": 10, \"hash_ids\": [0, 2]}\n",
        )
        .unwrap();
        let o = TraceOptions {
            num_requests: 10,
            time_scale: 1.0,
            length_scale: 0.1,
            max_input_len: None,
            max_output_len: None,
            vocab: 1000,
            seed: 0,
        };
        let plan = load(&p, &o).unwrap();
        assert_eq!(plan.len(), 2);
        assert_eq!(plan[0].request.prompt_tokens.len(), 100);
        assert_eq!(plan[1].at_us, 500_000);
        // Block size 51: the first block is shared, the second is not.
        let (a, b) = (
            &plan[0].request.prompt_tokens,
            &plan[1].request.prompt_tokens,
        );
        assert_eq!(a[..51], b[..51]);
        assert_ne!(a[51..], b[51..]);
    }
}
