//! `generate`: run one prompt through a model, for quick checks.
//!
//! `minisgl-host generate --model PATH --prompt "Once upon a time" --max-new-tokens 16`
//! streams the continuation; `--json` prints prompt ids, generated ids and text.
//! It runs the engine the server runs (built-in policies, one request), so a
//! quick check exercises the real loop.

use std::io::Write;
use std::time::Instant;

use anyhow::{bail, Context};
use minisgl_plugin_sdk::SamplingParams;

use std::sync::Arc;

use super::settings::{Group, SettingArgs};
use minisgl::engine::{Engine, EngineConfig, Event, FinishReason, GenerateRequest};
use minisgl::model::placement::build_runner_with;
use minisgl::model::runner::RunnerOptions;
use minisgl::model::IncrementalDecoder;
use minisgl::plugin::PluginSet;

#[derive(clap::Args, Debug, Clone)]
pub struct GenerateArgs {
    /// Model, device, page size and CUDA graphs, spelled as for serving.
    #[command(flatten)]
    pub settings: SettingArgs<GenerateSettings>,
    /// Prompt text (tokenized with the model's tokenizer, special tokens added).
    #[arg(
        long,
        conflicts_with = "prompt_ids",
        required_unless_present = "prompt_ids"
    )]
    pub prompt: Option<String>,
    /// Prompt as comma-separated token ids, e.g. `1,2,3`.
    #[arg(long, value_delimiter = ',')]
    pub prompt_ids: Option<Vec<u32>>,
    /// Wrap `--prompt` as one user message in the model's chat template.
    #[arg(long, requires = "prompt")]
    pub chat: bool,
    #[arg(long, default_value_t = 32)]
    pub max_new_tokens: u32,
    /// 0 = greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// 0 = no top-k truncation.
    #[arg(long, default_value_t = 0)]
    pub top_k: i32,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Keep going after an end-of-sequence token.
    #[arg(long)]
    pub ignore_eos: bool,
    /// Print one JSON object (ids, text, timings) instead of streaming text.
    #[arg(long)]
    pub json: bool,
}

/// The settings `generate` takes (a `.gguf` directory works as `--model`).
pub struct GenerateSettings;
impl Group for GenerateSettings {
    const NAMES: Option<&'static [&'static str]> =
        Some(&["model", "device", "page_size", "cuda_graph_max_bs", "tp"]);
    const REQUIRED: &'static [&'static str] = &["model"];
}

pub fn run(args: GenerateArgs) -> anyhow::Result<()> {
    super::init_warnings();
    let cfg = args.settings.config()?;
    let model_path = cfg.model.clone().context("--model is required")?;
    if !(args.temperature >= 0.0 && args.temperature.is_finite()) {
        bail!("--temperature must be >= 0, got {}", args.temperature);
    }
    let t0 = Instant::now();
    let model = minisgl::model::load(&model_path)
        .with_context(|| format!("loading {}", model_path.display()))?;
    let tok = model.tokenizer.as_ref();
    let prompt_ids: Vec<u32> = match (&args.prompt, &args.prompt_ids) {
        (_, Some(ids)) => ids.clone(),
        (Some(text), None) => {
            let tok = tok.context("the model has no tokenizer; use --prompt-ids")?;
            if args.chat {
                let msgs = serde_json::json!([{ "role": "user", "content": text }]);
                let rendered = tok.apply_chat_template(&msgs, true)?;
                tok.encode(&rendered, false)?
            } else {
                tok.encode(text, true)?
            }
        }
        (None, None) => bail!("give --prompt or --prompt-ids"),
    };
    if prompt_ids.is_empty() {
        bail!("the prompt is empty");
    }
    let total = prompt_ids.len() + args.max_new_tokens as usize;
    let pages = total.div_ceil(cfg.page_size as usize) as u32;
    // One sequence: a single graph of batch size 1 is all decoding needs.
    let opts = RunnerOptions {
        cuda_graph_max_bs: cfg.cuda_graph_max_bs.min(1) as usize,
        tp: cfg.tp as usize,
    };
    let runner = build_runner_with(&model, cfg.device, pages.max(1), cfg.page_size, &opts)?;
    let device_name = runner.device_name();
    let eos = match tok {
        Some(t) => t.eos_ids(),
        None => model.config.eos_token_ids().to_vec(),
    };
    // The same engine loop the server runs (built-in policies), on one request.
    let engine = Engine::new(
        runner,
        Arc::new(PluginSet::native()),
        EngineConfig {
            num_pages: Some(pages.max(1)),
            max_running: 1,
            max_waiting: 1,
            seed: args.seed,
            ..EngineConfig::default()
        },
        eos,
    )
    .map_err(anyhow::Error::msg)?;
    let load_s = t0.elapsed().as_secs_f64();
    let request = GenerateRequest {
        params: SamplingParams {
            temperature: args.temperature,
            top_p: args.top_p,
            top_k: args.top_k,
            seed: Some(args.seed),
            ..SamplingParams::default()
        },
        ignore_eos: args.ignore_eos,
        ..GenerateRequest::greedy(prompt_ids.clone(), args.max_new_tokens)
    };

    let mut decoder = IncrementalDecoder::new(&prompt_ids, true);
    let mut out_ids: Vec<u32> = Vec::new();
    let stdout = std::io::stdout();
    let t1 = Instant::now();
    let mut prefill_s = 0.0;
    let (_, mut events) = engine
        .handle()
        .submit(request)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let finish = loop {
        match events.blocking_recv() {
            Some(Event::Token { token, .. }) => {
                if out_ids.is_empty() {
                    prefill_s = t1.elapsed().as_secs_f64();
                }
                out_ids.push(token);
                if !args.json {
                    if let Some(tok) = tok {
                        let mut lock = stdout.lock();
                        write!(lock, "{}", decoder.push(tok, token)?)?;
                        lock.flush()?;
                    }
                }
            }
            Some(Event::Finished { reason, .. }) => {
                break match reason {
                    FinishReason::Stop => "stop",
                    FinishReason::Length => "length",
                    FinishReason::Abort => "abort",
                };
            }
            Some(Event::Error(e)) => bail!("generation failed: {e}"),
            None => bail!("the engine stopped before the request finished"),
        }
    };
    let total_s = t1.elapsed().as_secs_f64();
    engine.shutdown();
    let decode_tokens = out_ids.len().saturating_sub(1);
    let decode_tok_s = if total_s > prefill_s && decode_tokens > 0 {
        decode_tokens as f64 / (total_s - prefill_s)
    } else {
        0.0
    };
    let text = match tok {
        Some(t) => Some(t.decode(&out_ids, true)?),
        None => None,
    };
    if args.json {
        let v = serde_json::json!({
            "model": model_path.display().to_string(),
            "device": device_name,
            "prompt_ids": prompt_ids,
            "token_ids": out_ids,
            "text": text,
            "finish_reason": finish,
            "load_s": load_s,
            "prefill_s": prefill_s,
            "decode_tokens_per_s": decode_tok_s,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        let mut lock = stdout.lock();
        if let Some(t) = tok {
            write!(lock, "{}", decoder.flush(t)?)?;
        } else {
            write!(lock, "{out_ids:?}")?;
        }
        writeln!(lock)?;
        eprintln!(
            "[{} tokens, {}; prefill {} tokens {:.3}s, decode {:.1} tok/s, device {}]",
            out_ids.len(),
            finish,
            prompt_ids.len(),
            prefill_s,
            decode_tok_s,
            device_name
        );
    }
    Ok(())
}
