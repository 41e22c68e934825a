//! `minisgl-host shell` (or `--shell`): chat with the model in the terminal.
//!
//! Each line is a user turn; the reply streams as it is generated. The
//! conversation is kept (so the prefix cache serves earlier turns) until
//! `/reset`; `/exit` or end of input quits. Works with a pipe as well as a
//! terminal, which is how it is tested.

use std::io::{BufRead, Write};

use anyhow::Context;
use minisgl_plugin_sdk::SamplingParams;
use serde_json::json;

use minisgl::config::Config;
use minisgl::engine::{Event, GenerateRequest};
use minisgl::model::IncrementalDecoder;

#[derive(clap::Args, Debug, Clone, Default)]
pub struct ShellArgs {
    /// Model, plugins and engine settings, as for serving.
    #[command(flatten)]
    pub serve: super::serve::ServeArgs,
    /// Most tokens per reply.
    #[arg(long, default_value_t = 512)]
    pub max_tokens: u32,
    /// Sampling temperature (0 = greedy).
    #[arg(long, default_value_t = 0.7)]
    pub temperature: f32,
    /// System prompt put before the conversation.
    #[arg(long)]
    pub system: Option<String>,
}

/// How replies are generated.
#[derive(Clone, Debug)]
pub struct ChatOptions {
    pub max_tokens: u32,
    pub temperature: f32,
    pub system: Option<String>,
}

impl Default for ChatOptions {
    fn default() -> Self {
        ChatOptions {
            max_tokens: 512,
            temperature: 0.7,
            system: None,
        }
    }
}

pub fn run(args: ShellArgs) -> anyhow::Result<()> {
    let cfg = args.serve.resolve()?;
    let opts = ChatOptions {
        max_tokens: args.max_tokens,
        temperature: args.temperature,
        system: args.system,
    };
    run_with(&cfg, &opts)
}

/// Runs the chat loop on stdin/stdout.
pub fn run_with(cfg: &Config, opts: &ChatOptions) -> anyhow::Result<()> {
    if !(0.0..=2.0).contains(&opts.temperature) {
        anyhow::bail!(
            "--temperature must be between 0 and 2, got {}",
            opts.temperature
        );
    }
    super::init_logging();
    let started = minisgl::engine::builder::start(cfg)?;
    let tok = started.tokenizer;
    let engine = started.engine;
    if !tok.has_chat_template() {
        anyhow::bail!("the model has no chat template; the shell needs one");
    }
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    let mut history: Vec<serde_json::Value> = Vec::new();
    let reset = |h: &mut Vec<serde_json::Value>| {
        h.clear();
        if let Some(s) = &opts.system {
            h.push(json!({"role": "system", "content": s}));
        }
    };
    reset(&mut history);
    writeln!(
        out,
        "minisgl shell: {} — type a message; /reset clears the conversation, /exit quits.",
        cfg.model_name()
    )?;
    let mut lines = stdin.lock().lines();
    loop {
        write!(out, "> ")?;
        out.flush()?;
        let Some(line) = lines.next() else { break };
        let line = line.context("reading stdin")?;
        let line = line.trim();
        match line {
            "" => continue,
            "/exit" | "/quit" => break,
            "/reset" => {
                reset(&mut history);
                writeln!(out, "(conversation cleared)")?;
                continue;
            }
            _ => {}
        }
        history.push(json!({"role": "user", "content": line}));
        let prompt_text =
            tok.apply_chat_template(&serde_json::Value::from(history.clone()), true)?;
        let prompt = tok.encode(&prompt_text, false)?;
        let room = engine.max_context().saturating_sub(prompt.len() as u32);
        if room == 0 {
            history.pop();
            writeln!(
                out,
                "(the conversation no longer fits the context of {} tokens; /reset to start over)",
                engine.max_context()
            )?;
            continue;
        }
        let mut req = GenerateRequest::greedy(prompt.clone(), opts.max_tokens.min(room));
        req.params = SamplingParams {
            temperature: opts.temperature,
            ..SamplingParams::default()
        };
        let (_, mut rx) = engine
            .submit(req)
            .map_err(|e| anyhow::anyhow!("submitting: {e}"))?;
        let mut dec = IncrementalDecoder::new(&prompt, true);
        let mut reply = String::new();
        while let Some(ev) = rx.blocking_recv() {
            match ev {
                Event::Token { token, .. } => {
                    let piece = dec.push(&tok, token)?;
                    write!(out, "{piece}")?;
                    out.flush()?;
                    reply.push_str(&piece);
                }
                Event::Finished { .. } => {
                    let piece = dec.flush(&tok)?;
                    write!(out, "{piece}")?;
                    reply.push_str(&piece);
                    break;
                }
                Event::Error(e) => {
                    writeln!(out, "\n(error: {e})")?;
                    break;
                }
            }
        }
        writeln!(out)?;
        history.push(json!({"role": "assistant", "content": reply}));
    }
    writeln!(out)?;
    engine.shutdown();
    Ok(())
}
