//! `minisgl-host bench online`: replay arrival times against a running
//! server's `/v1/completions` (streaming) and report TTFT, TPOT and
//! end-to-end latency percentiles and throughput, like Mini-SGLang's online
//! benchmark.
//!
//! Arrivals come from a Poisson process (`--rate`) or a trace
//! (`--trace`): Mooncake JSONL (`timestamp` ms, `input_length`,
//! `output_length`, `hash_ids` of 512-token blocks, so prompts sharing hash
//! ids share a token prefix) or the Azure LLM inference CSV
//! (`TIMESTAMP,ContextTokens,GeneratedTokens`), read by
//! [`minisgl::workload::trace`]. Prompts are token ids, so no tokenizer is
//! needed; `--length-scale` shrinks a trace's lengths (and the block size)
//! to fit a small model.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

#[derive(clap::Args, Debug, Clone)]
pub struct BenchOnlineArgs {
    /// Server base URL (http only).
    #[arg(long, default_value = "http://127.0.0.1:8000")]
    pub url: String,
    /// Model name to send [default: the first of /v1/models].
    #[arg(long)]
    pub model: Option<String>,
    /// Poisson arrival rate in requests per second (ignored with --trace).
    #[arg(long, default_value_t = 4.0)]
    pub rate: f64,
    /// Requests to send (the first N of a trace).
    #[arg(long, default_value_t = 64)]
    pub num_requests: usize,
    /// Prompt tokens for Poisson arrivals: N or MIN:MAX (uniform).
    #[arg(long, default_value = "64:256")]
    pub input_len: String,
    /// Output tokens for Poisson arrivals: N or MIN:MAX (uniform).
    #[arg(long, default_value = "16:64")]
    pub output_len: String,
    /// Trace file: Mooncake `.jsonl` or Azure `.csv`.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Multiply trace inter-arrival gaps (0.1 = ten times faster).
    #[arg(long, default_value_t = 1.0)]
    pub time_scale: f64,
    /// Multiply trace lengths and the Mooncake block size (e.g. 0.01).
    #[arg(long, default_value_t = 1.0)]
    pub length_scale: f64,
    /// Cap on prompt tokens (longer prompts are cut).
    #[arg(long)]
    pub max_input_len: Option<usize>,
    /// Cap on output tokens.
    #[arg(long)]
    pub max_output_len: Option<usize>,
    /// Most requests in flight at once (unbounded by default).
    #[arg(long)]
    pub max_concurrency: Option<usize>,
    /// Random prompt token ids are drawn below this [default: the server's vocab_size].
    #[arg(long)]
    pub vocab: Option<u32>,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Print the results as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One request to send.
#[derive(Clone, Debug)]
struct Planned {
    at: f64,
    prompt: Vec<u32>,
    output_len: u32,
}

/// What came back for one request.
#[derive(Clone, Debug, Default)]
struct Outcome {
    ok: bool,
    error: Option<String>,
    ttft: f64,
    tpot: Option<f64>,
    e2e: f64,
    prompt_tokens: u64,
    output_tokens: u64,
}

fn parse_range(s: &str, what: &str) -> anyhow::Result<(u32, u32)> {
    let parse = |x: &str| {
        x.trim()
            .parse::<u32>()
            .ok()
            .filter(|&v| v > 0)
            .with_context(|| {
                format!("--{what} must be N or MIN:MAX with positive integers, got {s:?}")
            })
    };
    let (lo, hi) = match s.split_once(':') {
        Some((a, b)) => (parse(a)?, parse(b)?),
        None => {
            let v = parse(s)?;
            (v, v)
        }
    };
    if lo > hi {
        bail!("--{what}: MIN {lo} is above MAX {hi}");
    }
    Ok((lo, hi))
}

use minisgl::workload::random_tokens;
#[cfg(test)]
use minisgl::workload::trace::azure_time;

fn plan(args: &BenchOnlineArgs, vocab: u32) -> anyhow::Result<Vec<Planned>> {
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
    let cap_in = |n: usize| args.max_input_len.map_or(n, |c| n.min(c)).max(1);
    let cap_out = |n: usize| args.max_output_len.map_or(n, |c| n.min(c)).max(1) as u32;
    let Some(path) = &args.trace else {
        if !(args.rate > 0.0 && args.rate.is_finite()) {
            bail!("--rate must be a positive number, got {}", args.rate);
        }
        let (ilo, ihi) = parse_range(&args.input_len, "input-len")?;
        let (olo, ohi) = parse_range(&args.output_len, "output-len")?;
        let mut t = 0.0;
        return Ok((0..args.num_requests)
            .map(|_| {
                // Exponential gaps: a Poisson process of the given rate.
                let u: f64 = rng.random_range(f64::EPSILON..1.0);
                let at = t;
                t += -u.ln() / args.rate;
                let n_in = cap_in(rng.random_range(ilo..=ihi) as usize);
                let n_out = cap_out(rng.random_range(olo..=ohi) as usize);
                Planned {
                    at,
                    prompt: random_tokens(&mut rng, n_in, vocab),
                    output_len: n_out,
                }
            })
            .collect());
    };
    let o = minisgl::workload::trace::TraceOptions {
        num_requests: args.num_requests,
        time_scale: args.time_scale,
        length_scale: args.length_scale,
        max_input_len: args.max_input_len,
        max_output_len: args.max_output_len,
        vocab,
        seed: args.seed,
    };
    Ok(minisgl::workload::trace::load(path, &o)?
        .into_iter()
        .map(|r| Planned {
            at: r.at_us as f64 / 1e6,
            prompt: r.request.prompt_tokens,
            output_len: r.request.max_new_tokens,
        })
        .collect())
}

/// `http://host:port` → `host:port`.
fn authority(url: &str) -> anyhow::Result<String> {
    let rest = url
        .strip_prefix("http://")
        .with_context(|| format!("--url must start with http://, got {url:?}"))?;
    let auth = rest.split('/').next().unwrap_or(rest);
    Ok(if auth.contains(':') {
        auth.to_string()
    } else {
        format!("{auth}:80")
    })
}

/// A minimal HTTP/1.1 exchange: sends one request with `Connection: close`
/// and calls `on_data` with each decoded body piece as it arrives.
async fn http(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
    mut on_data: impl FnMut(&[u8]),
) -> anyhow::Result<u16> {
    let stream = TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    stream.set_nodelay(true)?;
    let mut r = BufReader::new(stream);
    let body = body.unwrap_or("");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    r.get_mut().write_all(req.as_bytes()).await?;
    let mut line = String::new();
    r.read_line(&mut line).await?;
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("bad status line {line:?}"))?;
    let mut chunked = false;
    loop {
        line.clear();
        if r.read_line(&mut line).await? == 0 || line == "\r\n" {
            break;
        }
        let l = line.to_ascii_lowercase();
        if l.starts_with("transfer-encoding:") && l.contains("chunked") {
            chunked = true;
        }
    }
    if !chunked {
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).await?;
        on_data(&rest);
        return Ok(status);
    }
    loop {
        line.clear();
        if r.read_line(&mut line).await? == 0 {
            break;
        }
        let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
            .with_context(|| format!("bad chunk size {line:?}"))?;
        if size == 0 {
            break;
        }
        let mut buf = vec![0u8; size + 2];
        r.read_exact(&mut buf).await?;
        on_data(&buf[..size]);
    }
    Ok(status)
}

async fn one_request(addr: String, model: String, p: Planned) -> Outcome {
    let body = json!({
        "model": model,
        "prompt": p.prompt,
        "max_tokens": p.output_len,
        "temperature": 0,
        "ignore_eos": true,
        "stream": true,
        "stream_options": {"include_usage": true},
    })
    .to_string();
    let start = Instant::now();
    let mut first: Option<Instant> = None;
    let mut last = start;
    let mut pending = Vec::new();
    let mut usage = None;
    let mut error = None;
    let mut raw = Vec::new();
    let res = http(&addr, "POST", "/v1/completions", Some(&body), |data| {
        raw.extend_from_slice(data);
        pending.extend_from_slice(data);
        while let Some(pos) = pending.windows(2).position(|w| w == b"\n\n") {
            let ev: Vec<u8> = pending.drain(..pos + 2).collect();
            let text = String::from_utf8_lossy(&ev);
            for l in text.lines() {
                let Some(d) = l.strip_prefix("data: ") else {
                    continue;
                };
                if d == "[DONE]" {
                    continue;
                }
                let Ok(v) = serde_json::from_str::<Value>(d) else {
                    continue;
                };
                if v.get("error").is_some() {
                    error = Some(v["error"]["message"].to_string());
                }
                if v["choices"].as_array().is_some_and(|c| !c.is_empty()) {
                    let now = Instant::now();
                    first.get_or_insert(now);
                    last = now;
                }
                if v["usage"].is_object() {
                    usage = Some(v["usage"].clone());
                }
            }
        }
    })
    .await;
    let e2e = start.elapsed().as_secs_f64();
    let mut o = Outcome {
        e2e,
        ..Default::default()
    };
    match res {
        Err(e) => o.error = Some(e.to_string()),
        Ok(200) if error.is_none() && usage.is_some() => {
            let u = usage.unwrap_or_default();
            o.ok = true;
            o.prompt_tokens = u["prompt_tokens"].as_u64().unwrap_or(0);
            o.output_tokens = u["completion_tokens"].as_u64().unwrap_or(0);
            let first = first.unwrap_or(last);
            o.ttft = (first - start).as_secs_f64();
            if o.output_tokens > 1 {
                o.tpot = Some((last - first).as_secs_f64() / (o.output_tokens - 1) as f64);
            }
        }
        Ok(status) => {
            o.error = Some(error.unwrap_or_else(|| {
                format!(
                    "HTTP {status}: {}",
                    String::from_utf8_lossy(&raw)
                        .chars()
                        .take(200)
                        .collect::<String>()
                )
            }))
        }
    }
    o
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[idx]
}

fn summary(mut v: Vec<f64>) -> Value {
    v.sort_by(|a, b| a.total_cmp(b));
    let mean = if v.is_empty() {
        f64::NAN
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    };
    json!({
        "mean_ms": mean * 1e3,
        "p50_ms": percentile(&v, 0.5) * 1e3,
        "p90_ms": percentile(&v, 0.9) * 1e3,
        "p99_ms": percentile(&v, 0.99) * 1e3,
    })
}

pub fn run(args: BenchOnlineArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(run_async(args))
}

async fn run_async(args: BenchOnlineArgs) -> anyhow::Result<()> {
    let addr = authority(&args.url)?;
    let mut models = Vec::new();
    let status = http(&addr, "GET", "/v1/models", None, |d| {
        models.extend_from_slice(d)
    })
    .await
    .with_context(|| format!("is a server running at {}?", args.url))?;
    if status != 200 {
        bail!("GET /v1/models answered {status}");
    }
    let models: Value = serde_json::from_slice(&models).context("GET /v1/models: not JSON")?;
    let served = &models["data"][0];
    let model = args
        .model
        .clone()
        .or_else(|| served["id"].as_str().map(str::to_string))
        .context("/v1/models lists no model")?;
    let vocab = args
        .vocab
        .or_else(|| served["vocab_size"].as_u64().map(|v| v as u32))
        .unwrap_or(32000);
    let max_ctx = served["max_model_len"].as_u64().map(|v| v as usize);
    let mut planned = plan(&args, vocab)?;
    if let Some(ctx) = max_ctx {
        // Keep every request within the served context.
        for p in &mut planned {
            let out = (p.output_len as usize).min(ctx / 2).max(1);
            p.prompt.truncate(ctx.saturating_sub(out).max(1));
            p.output_len = out as u32;
        }
    }
    let n = planned.len();
    eprintln!("bench online: {n} requests to {} (model {model})", args.url);
    let sem = args
        .max_concurrency
        .map(|c| std::sync::Arc::new(tokio::sync::Semaphore::new(c.max(1))));
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for p in planned {
        tokio::time::sleep_until((start + Duration::from_secs_f64(p.at.max(0.0))).into()).await;
        let (addr, model, sem) = (addr.clone(), model.clone(), sem.clone());
        tasks.spawn(async move {
            let _permit = match &sem {
                Some(s) => s.clone().acquire_owned().await.ok(),
                None => None,
            };
            one_request(addr, model, p).await
        });
    }
    let mut outcomes = Vec::with_capacity(n);
    while let Some(r) = tasks.join_next().await {
        outcomes.push(r.context("request task panicked")?);
    }
    let dur = start.elapsed().as_secs_f64();
    let ok: Vec<&Outcome> = outcomes.iter().filter(|o| o.ok).collect();
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| !o.ok).collect();
    let in_tok: u64 = ok.iter().map(|o| o.prompt_tokens).sum();
    let out_tok: u64 = ok.iter().map(|o| o.output_tokens).sum();
    let result = json!({
        "requests": n,
        "completed": ok.len(),
        "failed": failed.len(),
        "first_error": failed.first().and_then(|o| o.error.clone()),
        "duration_s": dur,
        "request_throughput": ok.len() as f64 / dur,
        "input_token_throughput": in_tok as f64 / dur,
        "output_token_throughput": out_tok as f64 / dur,
        "total_input_tokens": in_tok,
        "total_output_tokens": out_tok,
        "ttft": summary(ok.iter().map(|o| o.ttft).collect()),
        "tpot": summary(ok.iter().filter_map(|o| o.tpot).collect()),
        "e2e": summary(ok.iter().map(|o| o.e2e).collect()),
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&result)?);
    } else {
        let f = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
        println!(
            "requests            {} completed, {} failed, {:.2} s",
            ok.len(),
            failed.len(),
            dur
        );
        if let Some(e) = failed.first().and_then(|o| o.error.as_ref()) {
            println!("first error         {e}");
        }
        println!(
            "request throughput  {:.2} req/s",
            f(&result["request_throughput"])
        );
        println!(
            "input throughput    {:.1} tok/s",
            f(&result["input_token_throughput"])
        );
        println!(
            "output throughput   {:.1} tok/s",
            f(&result["output_token_throughput"])
        );
        println!(
            "{:<8} {:>10} {:>10} {:>10} {:>10}",
            "(ms)", "mean", "p50", "p90", "p99"
        );
        for k in ["ttft", "tpot", "e2e"] {
            let s = &result[k];
            println!(
                "{:<8} {:>10.2} {:>10.2} {:>10.2} {:>10.2}",
                k.to_uppercase(),
                f(&s["mean_ms"]),
                f(&s["p50_ms"]),
                f(&s["p90_ms"]),
                f(&s["p99_ms"])
            );
        }
    }
    if ok.is_empty() {
        bail!("every request failed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_times() {
        assert_eq!(parse_range("5", "x").unwrap(), (5, 5));
        assert_eq!(parse_range("2:9", "x").unwrap(), (2, 9));
        assert!(parse_range("9:2", "x").is_err());
        assert!(parse_range("a", "x").is_err());
        let a = azure_time("2023-11-16 18:17:03.9799600").unwrap();
        let b = azure_time("2023-11-16 18:17:04.0319600").unwrap();
        assert!((b - a - 0.052).abs() < 1e-6);
        assert_eq!(
            authority("http://127.0.0.1:8000/v1").unwrap(),
            "127.0.0.1:8000"
        );
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
        let args = BenchOnlineArgs {
            url: String::new(),
            model: None,
            rate: 1.0,
            num_requests: 10,
            input_len: "1".into(),
            output_len: "1".into(),
            trace: Some(p),
            time_scale: 1.0,
            length_scale: 0.1,
            max_input_len: None,
            max_output_len: None,
            max_concurrency: None,
            vocab: Some(1000),
            seed: 0,
            json: false,
        };
        let plan = plan(&args, 1000).unwrap();
        assert_eq!(plan.len(), 2);
        assert_eq!(plan[0].prompt.len(), 100);
        assert!((plan[1].at - 0.5).abs() < 1e-9);
        // Block size 51: the first block is shared, the second is not.
        assert_eq!(plan[0].prompt[..51], plan[1].prompt[..51]);
        assert_ne!(plan[0].prompt[51..], plan[1].prompt[51..]);
    }
}
