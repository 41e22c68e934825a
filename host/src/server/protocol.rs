//! Request parsing and validation for `/v1/completions`,
//! `/v1/chat/completions` and `/generate`: JSON in, validated [`GenOptions`]
//! plus prompts out. Nothing here touches the engine.

use minisgl_plugin_sdk::{SamplingParams, TokenBias};
use serde_json::Value;

use super::client::{self, ClientInfo};
use super::error::{echo, ApiError};
use super::fields::{token_list, Fields};

/// What validation needs to know about the served model.
#[derive(Clone, Debug)]
pub struct Limits {
    pub model_name: String,
    pub vocab_size: u32,
    pub max_context: u32,
    pub default_max_tokens: u32,
}

/// A prompt as the client sent it.
#[derive(Clone, Debug, PartialEq)]
pub enum Prompt {
    Text(String),
    Tokens(Vec<u32>),
}

/// One chat message, content flattened to text.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

/// Generation options shared by every endpoint, already validated.
#[derive(Clone, Debug)]
pub struct GenOptions {
    pub params: SamplingParams,
    pub logit_bias: Vec<TokenBias>,
    /// `None`: fill the remaining context up to `default_max_tokens`.
    pub max_tokens: Option<u32>,
    pub stop: Vec<String>,
    pub stop_token_ids: Vec<u32>,
    pub ignore_eos: bool,
    pub n: u32,
    /// Number of top alternatives per token; `Some(0)` = the chosen token only.
    pub logprobs: Option<u32>,
    pub stream: bool,
    pub include_usage: bool,
    pub priority: i32,
    /// Client identity and deadline (`user`, `deadline_ms`, and the gateway
    /// headers applied by [`super::client::apply_headers`]).
    pub client: ClientInfo,
    /// Keep the stop string in the output (vLLM's `include_stop_str_in_output`).
    pub include_stop: bool,
}

/// A parsed `/v1/completions` request.
#[derive(Clone, Debug)]
pub struct CompletionRequest {
    pub prompts: Vec<Prompt>,
    pub echo: bool,
    pub opts: GenOptions,
}

/// A parsed `/v1/chat/completions` request.
#[derive(Clone, Debug)]
pub struct ChatRequest {
    pub messages: Vec<ChatMessage>,
    pub opts: GenOptions,
}

/// A parsed `/generate` request (SGLang's native API).
#[derive(Clone, Debug)]
pub struct NativeRequest {
    pub prompts: Vec<Prompt>,
    /// `true` when the client sent a list (the response is then a list).
    pub batched: bool,
    pub opts: GenOptions,
}

/// Most `n` choices per request; more would let one request fill the queue.
pub const MAX_N: i64 = 64;
/// Most prompts in one batched request.
pub const MAX_PROMPTS: usize = 256;
const MAX_STOP: usize = 16;
const MAX_BIAS: usize = 1024;
const MAX_TOP_LOGPROBS: i64 = 20;

/// Checks `model` against the served name; absent means the served model.
pub fn check_model(f: &Fields, limits: &Limits) -> Result<(), ApiError> {
    match f.str("model")? {
        None => Ok(()),
        Some(m) if m == limits.model_name || m == "default" => Ok(()),
        Some(m) => Err(ApiError::UnknownModel(m.to_string())),
    }
}

/// The sampling fields named as in OpenAI's API (`f` may be the body or a
/// nested `sampling_params`).
fn sampling(f: &Fields, limits: &Limits) -> Result<(SamplingParams, Vec<TokenBias>), ApiError> {
    let mut p = SamplingParams::default();
    if let Some(t) = f.num("temperature", 0.0, 2.0, false)? {
        p.temperature = t;
    }
    if let Some(t) = f.num("top_p", 0.0, 1.0, true)? {
        p.top_p = t;
    }
    if let Some(k) = f.int("top_k", -1, i64::from(limits.vocab_size))? {
        p.top_k = k.max(0) as i32;
    }
    if let Some(m) = f.num("min_p", 0.0, 1.0, false)? {
        p.min_p = m;
    }
    if let Some(x) = f.num("presence_penalty", -2.0, 2.0, false)? {
        p.presence_penalty = x;
    }
    if let Some(x) = f.num("frequency_penalty", -2.0, 2.0, false)? {
        p.frequency_penalty = x;
    }
    if let Some(x) = f.num("repetition_penalty", 0.0, 10.0, true)? {
        p.repetition_penalty = x;
    }
    if let Some(s) = f.int("seed", i64::MIN, i64::MAX)? {
        p.seed = Some(s as u64);
    }
    let mut bias = Vec::new();
    if let Some(v) = f.get("logit_bias") {
        let Value::Object(map) = v else {
            return Err(f.error("logit_bias", "an object mapping token ids to biases", v));
        };
        if map.len() > MAX_BIAS {
            return Err(f.error(
                "logit_bias",
                &format!("an object with at most {MAX_BIAS} entries"),
                v,
            ));
        }
        let name = f.name("logit_bias");
        for (k, b) in map {
            let token = match k.trim().parse::<u32>() {
                Ok(t) if t < limits.vocab_size => t,
                _ => {
                    return Err(ApiError::field(
                        &name,
                        format!(
                            "`{name}` keys must be token ids between 0 and {}, got {k:?}",
                            limits.vocab_size - 1
                        ),
                    ))
                }
            };
            let bias_v = match b.as_f64() {
                Some(x) if (-100.0..=100.0).contains(&x) => x as f32,
                _ => {
                    return Err(ApiError::field(
                        &name,
                        format!(
                            "`{name}[{k:?}]` must be a number between -100 and 100, got {}",
                            echo(b)
                        ),
                    ))
                }
            };
            bias.push(TokenBias {
                token,
                bias: bias_v,
            });
        }
        bias.sort_by_key(|b| b.token);
    }
    Ok((p, bias))
}

/// Options of `/v1/completions` and `/v1/chat/completions`.
fn openai_options(f: &Fields, limits: &Limits, chat: bool) -> Result<GenOptions, ApiError> {
    let (params, logit_bias) = sampling(f, limits)?;
    let max_ctx = i64::from(limits.max_context);
    let mut max_tokens = f.int("max_tokens", 1, max_ctx)?;
    if chat {
        if let Some(m) = f.int("max_completion_tokens", 1, max_ctx)? {
            max_tokens = Some(m);
        }
    }
    let logprobs = if chat {
        let top = f.int("top_logprobs", 0, MAX_TOP_LOGPROBS)?;
        match f.bool("logprobs")? {
            Some(true) => Some(top.unwrap_or(0) as u32),
            _ if top.is_some_and(|t| t > 0) => {
                return Err(ApiError::field(
                    "top_logprobs",
                    "`top_logprobs` requires `logprobs` to be true",
                ))
            }
            _ => None,
        }
    } else {
        f.int("logprobs", 0, MAX_TOP_LOGPROBS)?.map(|n| n as u32)
    };
    let n = f.int("n", 1, MAX_N)?.unwrap_or(1) as u32;
    if let Some(b) = f.int("best_of", 1, MAX_N)? {
        if b != i64::from(n) {
            return Err(ApiError::field(
                "best_of",
                format!("`best_of` other than `n` is not supported, got {b} with n = {n}"),
            ));
        }
    }
    let stream = f.bool("stream")?.unwrap_or(false);
    let include_usage = match f.object("stream_options")? {
        Some(so) => so.bool("include_usage")?.unwrap_or(false),
        None => false,
    };
    Ok(GenOptions {
        params,
        logit_bias,
        max_tokens: max_tokens.map(|m| m as u32),
        stop: f.strings("stop", MAX_STOP)?,
        stop_token_ids: f.token_ids("stop_token_ids", limits.vocab_size)?,
        ignore_eos: f.bool("ignore_eos")?.unwrap_or(false),
        n,
        logprobs,
        stream,
        include_usage,
        priority: f
            .int("priority", i64::from(i32::MIN), i64::from(i32::MAX))?
            .unwrap_or(0) as i32,
        client: client::from_body(f)?,
        include_stop: f.bool("include_stop_str_in_output")?.unwrap_or(false),
    })
}

/// Reads a prompt field: a string, a list of strings, a list of token ids,
/// or a list of lists of token ids.
fn prompts(param: &str, v: &Value, limits: &Limits) -> Result<(Vec<Prompt>, bool), ApiError> {
    let want = "a string, a list of strings, a list of token ids or a list of lists of token ids";
    let out = match v {
        Value::String(s) => return Ok((vec![Prompt::Text(s.clone())], false)),
        Value::Array(items) if items.is_empty() => {
            return Err(ApiError::field(
                param,
                format!("`{param}` must not be empty"),
            ))
        }
        Value::Array(items) if items.len() > MAX_PROMPTS && !items[0].is_number() => {
            return Err(ApiError::field(
                param,
                format!(
                    "`{param}` has {} prompts; at most {MAX_PROMPTS} are allowed",
                    items.len()
                ),
            ))
        }
        Value::Array(items) => match &items[0] {
            Value::Number(_) => {
                return Ok((
                    vec![Prompt::Tokens(token_list(param, v, limits.vocab_size)?)],
                    false,
                ))
            }
            Value::String(_) => items
                .iter()
                .enumerate()
                .map(|(i, x)| match x {
                    Value::String(s) => Ok(Prompt::Text(s.clone())),
                    _ => Err(ApiError::field(
                        param,
                        format!(
                            "`{param}[{i}]` must be a string like the first item, got {}",
                            echo(x)
                        ),
                    )),
                })
                .collect::<Result<Vec<_>, _>>()?,
            Value::Array(_) => items
                .iter()
                .enumerate()
                .map(|(i, x)| {
                    let ids = token_list(&format!("{param}[{i}]"), x, limits.vocab_size)?;
                    if ids.is_empty() {
                        return Err(ApiError::field(
                            param,
                            format!("`{param}[{i}]` must not be empty"),
                        ));
                    }
                    Ok(Prompt::Tokens(ids))
                })
                .collect::<Result<Vec<_>, _>>()?,
            _ => {
                return Err(ApiError::field(
                    param,
                    format!("`{param}` must be {want}, got {}", echo(v)),
                ))
            }
        },
        _ => {
            return Err(ApiError::field(
                param,
                format!("`{param}` must be {want}, got {}", echo(v)),
            ))
        }
    };
    Ok((out, true))
}

/// Parses a `/v1/completions` body.
pub fn completion_request(body: &Value, limits: &Limits) -> Result<CompletionRequest, ApiError> {
    let f = Fields::body(body)?;
    check_model(&f, limits)?;
    let Some(p) = f.get("prompt") else {
        return Err(ApiError::field("prompt", "`prompt` is required"));
    };
    let (prompts, _) = prompts("prompt", p, limits)?;
    if f.get("suffix").is_some() {
        return Err(ApiError::field("suffix", "`suffix` is not supported"));
    }
    let opts = openai_options(&f, limits, false)?;
    if prompts.len() * opts.n as usize > MAX_PROMPTS {
        return Err(ApiError::field(
            "n",
            format!(
                "{} prompts × n = {} asks for more than {MAX_PROMPTS} completions",
                prompts.len(),
                opts.n
            ),
        ));
    }
    Ok(CompletionRequest {
        prompts,
        echo: f.bool("echo")?.unwrap_or(false),
        opts,
    })
}

/// Parses a `/v1/chat/completions` body.
pub fn chat_request(body: &Value, limits: &Limits) -> Result<ChatRequest, ApiError> {
    let f = Fields::body(body)?;
    check_model(&f, limits)?;
    let Some(msgs) = f.get("messages") else {
        return Err(ApiError::field("messages", "`messages` is required"));
    };
    let Value::Array(items) = msgs else {
        return Err(f.error("messages", "a list of messages", msgs));
    };
    if items.is_empty() {
        return Err(ApiError::field(
            "messages",
            "`messages` must contain at least one message",
        ));
    }
    let messages = items
        .iter()
        .enumerate()
        .map(|(i, m)| chat_message(i, m))
        .collect::<Result<Vec<_>, _>>()?;
    let opts = openai_options(&f, limits, true)?;
    Ok(ChatRequest { messages, opts })
}

fn chat_message(i: usize, m: &Value) -> Result<ChatMessage, ApiError> {
    let param = format!("messages[{i}]");
    let Value::Object(obj) = m else {
        return Err(ApiError::field(
            &param,
            format!(
                "`{param}` must be an object with `role` and `content`, got {}",
                echo(m)
            ),
        ));
    };
    let role = match obj.get("role") {
        Some(Value::String(r))
            if ["system", "developer", "user", "assistant", "tool"].contains(&r.as_str()) =>
        {
            if r == "developer" {
                "system".to_string()
            } else {
                r.clone()
            }
        }
        other => {
            return Err(ApiError::field(
                format!("{param}.role"),
                format!(
                "`{param}.role` must be one of system, developer, user, assistant, tool; got {}",
                other.map(echo).unwrap_or_else(|| "nothing".into())
            ),
            ))
        }
    };
    let content = match obj.get("content") {
        Some(Value::String(s)) => s.clone(),
        None | Some(Value::Null) if role == "assistant" => String::new(),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for (j, part) in parts.iter().enumerate() {
                match (part.get("type").and_then(Value::as_str), part.get("text")) {
                    (Some("text"), Some(Value::String(t))) => text.push_str(t),
                    _ => {
                        return Err(ApiError::field(
                            format!("{param}.content"),
                            format!(
                                "`{param}.content[{j}]` must be {{\"type\": \"text\", \"text\": ...}} (only text is supported), got {}",
                                echo(part)
                            ),
                        ))
                    }
                }
            }
            text
        }
        other => {
            return Err(ApiError::field(
                format!("{param}.content"),
                format!(
                    "`{param}.content` must be a string or a list of text parts, got {}",
                    other.map(echo).unwrap_or_else(|| "nothing".into())
                ),
            ))
        }
    };
    Ok(ChatMessage { role, content })
}

/// Parses a `/generate` body: `text` or `input_ids`, `sampling_params`
/// (`max_new_tokens`, `temperature`, ...), `stream`, `return_logprob`.
pub fn native_request(body: &Value, limits: &Limits) -> Result<NativeRequest, ApiError> {
    let f = Fields::body(body)?;
    check_model(&f, limits)?;
    let (prompts, batched) = match (f.get("text"), f.get("input_ids")) {
        (Some(_), Some(_)) => {
            return Err(ApiError::field(
                "text",
                "give either `text` or `input_ids`, not both",
            ))
        }
        (Some(v @ Value::String(_)), None) => prompts("text", v, limits)?,
        (Some(v @ Value::Array(items)), None) if items.iter().all(Value::is_string) => {
            prompts("text", v, limits)?
        }
        (Some(v), None) => return Err(f.error("text", "a string or a list of strings", v)),
        (None, Some(v @ Value::Array(_))) => {
            let (p, batched) = prompts("input_ids", v, limits)?;
            if p.iter().any(|p| matches!(p, Prompt::Text(_))) {
                return Err(f.error("input_ids", "a list of token ids or a list of lists", v));
            }
            (p, batched)
        }
        (None, Some(v)) => return Err(f.error("input_ids", "a list of token ids", v)),
        (None, None) => return Err(ApiError::field("text", "`text` or `input_ids` is required")),
    };
    let empty = serde_json::Map::new();
    let sp_value;
    let sp = match f.object("sampling_params")? {
        Some(sp) => sp,
        None => {
            sp_value = Value::Object(empty);
            Fields::body(&sp_value)?
        }
    };
    let (params, logit_bias) = sampling(&sp, limits)?;
    let max_ctx = i64::from(limits.max_context);
    let logprobs = if f.bool("return_logprob")?.unwrap_or(false) {
        Some(f.int("top_logprobs_num", 0, MAX_TOP_LOGPROBS)?.unwrap_or(0) as u32)
    } else {
        None
    };
    let opts = GenOptions {
        params,
        logit_bias,
        max_tokens: sp.int("max_new_tokens", 1, max_ctx)?.map(|m| m as u32),
        stop: sp.strings("stop", MAX_STOP)?,
        stop_token_ids: sp.token_ids("stop_token_ids", limits.vocab_size)?,
        ignore_eos: sp.bool("ignore_eos")?.unwrap_or(false),
        n: sp.int("n", 1, MAX_N)?.unwrap_or(1) as u32,
        logprobs,
        stream: f.bool("stream")?.unwrap_or(false),
        include_usage: true,
        priority: f
            .int("priority", i64::from(i32::MIN), i64::from(i32::MAX))?
            .unwrap_or(0) as i32,
        client: client::from_body(&f)?,
        include_stop: false,
    };
    if prompts.len() * opts.n as usize > MAX_PROMPTS {
        return Err(ApiError::field("sampling_params.n", "too many prompts × n"));
    }
    Ok(NativeRequest {
        prompts,
        batched,
        opts,
    })
}

/// Resolves `max_tokens` against the context: an explicit value must fit,
/// a missing one fills what is left (up to the default). Errors name
/// `prompt_field` (the endpoint's prompt field) and `field` (its budget).
pub fn resolve_max_tokens(
    prompt_len: usize,
    requested: Option<u32>,
    limits: &Limits,
    prompt_field: &str,
    field: &str,
) -> Result<u32, ApiError> {
    let ctx = limits.max_context as usize;
    if prompt_len == 0 {
        return Err(ApiError::field(
            prompt_field,
            format!("`{prompt_field}` is empty (0 tokens)"),
        ));
    }
    if prompt_len >= ctx {
        return Err(ApiError::ContextLength {
            param: prompt_field.to_string(),
            message: format!(
                "This model's maximum context length is {ctx} tokens, but `{prompt_field}` has {prompt_len} tokens, leaving no room to generate"
            ),
        });
    }
    let room = ctx - prompt_len;
    match requested {
        Some(m) if m as usize > room => Err(ApiError::ContextLength {
            param: prompt_field.to_string(),
            message: format!(
                "This model's maximum context length is {ctx} tokens; `{prompt_field}` has {prompt_len} tokens and `{field}` is {m}, \
                 so at most {room} can be generated"
            ),
        }),
        Some(m) => Ok(m),
        None => Ok(limits.default_max_tokens.min(room as u32)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn limits() -> Limits {
        Limits {
            model_name: "tiny".into(),
            vocab_size: 100,
            max_context: 64,
            default_max_tokens: 16,
        }
    }

    #[test]
    fn completion_happy_path() {
        let r = completion_request(
            &json!({"model": "tiny", "prompt": [[1, 2], [3]], "n": 2, "stop": "x",
                    "logit_bias": {"5": -100}, "seed": -1, "logprobs": 2, "top_k": -1}),
            &limits(),
        )
        .unwrap();
        assert_eq!(
            r.prompts,
            vec![Prompt::Tokens(vec![1, 2]), Prompt::Tokens(vec![3])]
        );
        assert_eq!(r.opts.n, 2);
        assert_eq!(r.opts.stop, vec!["x"]);
        assert_eq!(r.opts.logit_bias[0].token, 5);
        assert_eq!(r.opts.params.seed, Some(u64::MAX));
        assert_eq!(r.opts.logprobs, Some(2));
        assert_eq!(r.opts.params.top_k, 0);
    }

    #[test]
    fn errors_name_fields() {
        let l = limits();
        let cases = [
            (json!({"prompt": "a", "model": "gpt-4"}), "gpt-4"),
            (json!({"prompt": "a", "max_tokens": -1}), "max_tokens"),
            (
                json!({"prompt": "a", "max_tokens": 1_000_000_000u64}),
                "1000000000",
            ),
            (json!({"prompt": [1, 500]}), "prompt[1]"),
            (json!({"prompt": "a", "temperature": "hot"}), "temperature"),
            (json!({"prompt": "a", "logit_bias": {"x": 1}}), "logit_bias"),
            (json!({"prompt": "a", "logit_bias": {"1": 1000}}), "1000"),
            (json!({"prompt": 5}), "prompt"),
            (json!({"prompt": []}), "prompt"),
            (json!({}), "prompt"),
        ];
        for (body, needle) in cases {
            let e = completion_request(&body, &l).unwrap_err().to_string();
            assert!(e.contains(needle), "{body}: {e}");
        }
        let e = chat_request(&json!({"messages": []}), &l)
            .unwrap_err()
            .to_string();
        assert!(e.contains("messages"), "{e}");
        let e = chat_request(
            &json!({"messages": [{"role": "robot", "content": "x"}]}),
            &l,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("robot"), "{e}");
    }

    #[test]
    fn chat_parts_and_logprobs() {
        let r = chat_request(
            &json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                    "logprobs": true, "top_logprobs": 3, "max_completion_tokens": 5}),
            &limits(),
        )
        .unwrap();
        assert_eq!(r.messages[0].content, "hi");
        assert_eq!(r.opts.logprobs, Some(3));
        assert_eq!(r.opts.max_tokens, Some(5));
    }

    #[test]
    fn native_request_reads_sampling_params() {
        let r = native_request(
            &json!({"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 4, "temperature": 0}}),
            &limits(),
        )
        .unwrap();
        assert_eq!(r.opts.max_tokens, Some(4));
        assert!(!r.batched);
        assert!(r.opts.params.is_greedy());
    }

    #[test]
    fn context_resolution() {
        let l = limits();
        let r = |n, m| resolve_max_tokens(n, m, &l, "prompt", "max_tokens");
        assert_eq!(r(10, None).unwrap(), 16);
        assert_eq!(r(60, None).unwrap(), 4);
        assert!(r(60, Some(5)).is_err());
        let e = r(64, None).unwrap_err();
        assert_eq!(e.param(), Some("prompt"), "{e}");
        let e = resolve_max_tokens(60, Some(5), &l, "input_ids", "max_new_tokens").unwrap_err();
        assert_eq!(e.param(), Some("input_ids"), "{e}");
    }
}
