//! vLLM's tokenizer endpoints: `POST /tokenize`, `POST /detokenize`, and the
//! render endpoints `POST /v1/completions/render` and
//! `POST /v1/chat/completions/render` (a request turned into the token ids
//! the engine would run, without running it). vLLM's router calls render
//! (falling back to `/tokenize`) before every text or chat request to route
//! on token ids, so these must agree exactly with what `/v1/completions` and
//! `/v1/chat/completions` feed the engine: they share its parsing and
//! tokenisation.
//!
//! Shapes (vLLM's `serving_tokenization.py` and render tests):
//! - `/tokenize` takes `{prompt, add_special_tokens=true}` or
//!   `{messages, add_generation_prompt=true, add_special_tokens=false}`,
//!   optional `return_token_strs`; answers
//!   `{count, max_model_len, tokens, token_strs}`.
//! - `/detokenize` takes `{tokens}` and answers `{prompt}`.
//! - completions render answers a list with one entry per prompt, chat
//!   render one object: `{request_id, token_ids, sampling_params, model,
//!   stream}`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::error::ApiError;
use super::fields::{token_list, Fields};
use super::openai::{chat_prompt_ids, encode_prompt, parse_body};
use super::protocol::{self, check_model, GenOptions};
use super::state::AppState;

/// Answers with `r` (errors in the usual JSON shape) and counts the
/// response under `endpoint` in `minisgl_http_responses_total`.
fn answer(state: &AppState, endpoint: &'static str, r: Result<Value, ApiError>) -> Response {
    let resp = match r {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    };
    state.metrics.response(endpoint, resp.status().as_u16());
    resp
}

/// Tokenises on the blocking pool (long prompts stall the runtime otherwise).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::Internal(format!("tokenizer task failed: {e}")))?
}

/// The chat prompt's token ids without the assistant header (vLLM's
/// `add_generation_prompt: false`), built as the chat endpoint builds its
/// prompt: template rendered, then encoded without adding special tokens.
fn chat_ids_without_generation_prompt(
    state: &AppState,
    messages: &[protocol::ChatMessage],
) -> Result<Vec<u32>, ApiError> {
    if !state.tokenizer.has_chat_template() {
        return Err(ApiError::field(
            "messages",
            "this model has no chat template; tokenize a `prompt` instead",
        ));
    }
    let msgs = serde_json::to_value(messages).map_err(|e| ApiError::Internal(e.to_string()))?;
    let text = state
        .tokenizer
        .apply_chat_template(&msgs, false)
        .map_err(|e| ApiError::field("messages", e.to_string()))?;
    state
        .tokenizer
        .encode(&text, false)
        .map_err(|e| ApiError::field("messages", format!("cannot tokenize the chat prompt: {e}")))
}

pub async fn tokenize(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let r = tokenize_inner(state.clone(), body).await;
    answer(&state, "tokenize", r)
}

async fn tokenize_inner(
    state: Arc<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Value, ApiError> {
    let body = parse_body(body)?;
    let f = Fields::body(&body)?;
    check_model(&f, &state.limits)?;
    let want_strs = f.bool("return_token_strs")?.unwrap_or(false);
    let ids = match (f.get("prompt"), f.get("messages")) {
        (Some(_), Some(_)) => {
            return Err(ApiError::field(
                "messages",
                "give either `prompt` or `messages`, not both",
            ))
        }
        (Some(Value::String(text)), None) => {
            let special = f.bool("add_special_tokens")?.unwrap_or(true);
            let (st, text) = (state.clone(), text.clone());
            blocking(move || {
                st.tokenizer
                    .encode(&text, special)
                    .map_err(|e| ApiError::field("prompt", format!("cannot tokenize: {e}")))
            })
            .await?
        }
        (Some(other), None) => return Err(f.error("prompt", "a string", other)),
        (None, Some(_)) => {
            if f.bool("continue_final_message")? == Some(true) {
                return Err(ApiError::field(
                    "continue_final_message",
                    "`continue_final_message` = true is not supported",
                ));
            }
            let agp = f.bool("add_generation_prompt")?.unwrap_or(true);
            let req = protocol::chat_request(&body, &state.limits)?;
            let st = state.clone();
            blocking(move || {
                if agp {
                    chat_prompt_ids(&st, &req.messages)
                } else {
                    chat_ids_without_generation_prompt(&st, &req.messages)
                }
            })
            .await?
        }
        (None, None) => {
            return Err(ApiError::field(
                "prompt",
                "`prompt` (a string) or `messages` is required",
            ))
        }
    };
    let token_strs = want_strs.then(|| {
        ids.iter()
            .map(|&id| state.tokenizer.inner().id_to_token(id).unwrap_or_default())
            .collect::<Vec<_>>()
    });
    Ok(json!({
        "count": ids.len(),
        "max_model_len": state.limits.max_context,
        "tokens": ids,
        "token_strs": token_strs,
    }))
}

pub async fn detokenize(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let r = detokenize_inner(state.clone(), body).await;
    answer(&state, "detokenize", r)
}

async fn detokenize_inner(
    state: Arc<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Value, ApiError> {
    let body = parse_body(body)?;
    let f = Fields::body(&body)?;
    check_model(&f, &state.limits)?;
    let Some(v) = f.get("tokens") else {
        return Err(ApiError::field("tokens", "`tokens` is required"));
    };
    let ids = token_list("tokens", v, state.limits.vocab_size)?;
    let st = state.clone();
    let text = blocking(move || {
        st.tokenizer
            .decode(&ids, false)
            .map_err(|e| ApiError::field("tokens", format!("cannot detokenize: {e}")))
    })
    .await?;
    Ok(json!({ "prompt": text }))
}

/// vLLM's `sampling_params` for a rendered request: the options this server
/// parsed, under vLLM's names.
fn sampling_json(o: &GenOptions, max_tokens: u32) -> Value {
    let p = &o.params;
    json!({
        "n": o.n,
        "temperature": p.temperature,
        "top_p": p.top_p,
        "top_k": if p.top_k > 0 { p.top_k } else { -1 },
        "min_p": p.min_p,
        "presence_penalty": p.presence_penalty,
        "frequency_penalty": p.frequency_penalty,
        "repetition_penalty": p.repetition_penalty,
        "seed": p.seed,
        "max_tokens": max_tokens,
        "stop": o.stop,
        "stop_token_ids": o.stop_token_ids,
        "ignore_eos": o.ignore_eos,
        "logprobs": o.logprobs,
        "include_stop_str_in_output": o.include_stop,
    })
}

/// One rendered prompt; `max_tokens` resolved as generation would resolve it.
fn rendered(
    state: &AppState,
    prefix: &str,
    ids: Vec<u32>,
    opts: &GenOptions,
) -> Result<Value, ApiError> {
    let prompt_field = if prefix == "chatcmpl" {
        "messages"
    } else {
        "prompt"
    };
    let max_tokens = protocol::resolve_max_tokens(
        ids.len(),
        opts.max_tokens,
        &state.limits,
        prompt_field,
        "max_tokens",
    )?;
    Ok(json!({
        "request_id": state.response_id(prefix),
        "token_ids": ids,
        "sampling_params": sampling_json(opts, max_tokens),
        "model": state.limits.model_name,
        "stream": opts.stream,
    }))
}

pub async fn render_completion(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let r = render_completion_inner(state.clone(), body).await;
    answer(&state, "completions_render", r)
}

async fn render_completion_inner(
    state: Arc<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Value, ApiError> {
    let body = parse_body(body)?;
    let req = protocol::completion_request(&body, &state.limits)?;
    let mut out = Vec::with_capacity(req.prompts.len());
    for p in &req.prompts {
        let ids = encode_prompt(&state, p, "prompt").await?;
        out.push(rendered(&state, "cmpl", ids, &req.opts)?);
    }
    Ok(Value::Array(out))
}

pub async fn render_chat(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let r = render_chat_inner(state.clone(), body).await;
    answer(&state, "chat_completions_render", r)
}

async fn render_chat_inner(
    state: Arc<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Value, ApiError> {
    let body = parse_body(body)?;
    let req = protocol::chat_request(&body, &state.limits)?;
    let st = state.clone();
    let msgs = req.messages.clone();
    // Exactly what `/v1/chat/completions` feeds the engine.
    let ids = blocking(move || chat_prompt_ids(&st, &msgs)).await?;
    rendered(&state, "chatcmpl", ids, &req.opts)
}
