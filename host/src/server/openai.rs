//! `POST /v1/completions` and `POST /v1/chat/completions`: prompts to token
//! ids, one engine sequence per (prompt, choice), results as OpenAI JSON or
//! as a server-sent event stream.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::stream::{self, BoxStream, SelectAll, StreamExt};
use serde_json::{json, Value};

use super::client;
use super::error::ApiError;
use super::protocol::{self, resolve_max_tokens, ChatMessage, GenOptions, Prompt};
use super::sequence::{Chunk, SeqUsage, Sequence, TokenOut};
use super::state::{unix_now, AppState};

/// Reads a JSON body, turning every failure into an OpenAI-style 4xx.
pub fn parse_body(body: Result<Bytes, BytesRejection>) -> Result<Value, ApiError> {
    let bytes = body.map_err(|e| {
        if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge(e.body_text())
        } else {
            ApiError::MalformedJson(format!("cannot read the request body: {}", e.body_text()))
        }
    })?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::MalformedJson(format!("request body is not valid JSON: {e}")))
}

/// Which response shape a run produces.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Api {
    Completion,
    Chat,
}

/// Submitted sequences of one request, in choice order.
struct Run {
    api: Api,
    id: String,
    model: String,
    created: u64,
    seqs: Vec<Sequence>,
    opts: GenOptions,
    /// Per choice: text put before the completion (`echo`).
    echo: Vec<String>,
}

/// Tokenises, checks the context and submits `n` sequences per prompt.
fn launch(
    state: &Arc<AppState>,
    api: Api,
    prompts: Vec<Vec<u32>>,
    opts: GenOptions,
    echo: Vec<String>,
) -> Result<Run, ApiError> {
    let mut budgets = Vec::with_capacity(prompts.len());
    for p in &prompts {
        budgets.push(resolve_max_tokens(
            p.len(),
            opts.max_tokens,
            &state.limits,
            if api == Api::Chat {
                "messages"
            } else {
                "prompt"
            },
            "max_tokens",
        )?);
    }
    let mut seqs = Vec::new();
    let mut echoes = Vec::new();
    for (pi, (p, max_new)) in prompts.into_iter().zip(budgets).enumerate() {
        for i in 0..opts.n {
            seqs.push(Sequence::submit(
                state,
                p.clone(),
                max_new,
                &opts,
                u64::from(i),
            )?);
            echoes.push(echo.get(pi).cloned().unwrap_or_default());
        }
    }
    let prefix = if api == Api::Chat { "chatcmpl" } else { "cmpl" };
    Ok(Run {
        api,
        id: state.response_id(prefix),
        model: state.limits.model_name.clone(),
        created: unix_now(),
        seqs,
        opts,
        echo: echoes,
    })
}

/// Token ids of a prompt. Text is tokenised on the blocking pool: a
/// megabyte prompt takes long enough to stall other connections otherwise.
pub async fn encode_prompt(
    state: &Arc<AppState>,
    p: &Prompt,
    field: &'static str,
) -> Result<Vec<u32>, ApiError> {
    match p {
        Prompt::Tokens(t) => Ok(t.clone()),
        Prompt::Text(s) => {
            let (st, s) = (state.clone(), s.clone());
            tokio::task::spawn_blocking(move || st.tokenizer.encode(&s, true))
                .await
                .map_err(|e| ApiError::Internal(format!("tokenizer task failed: {e}")))?
                .map_err(|e| ApiError::field(field, format!("cannot tokenize `{field}`: {e}")))
        }
    }
}

pub async fn completions(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let resp = match completions_inner(&state, &headers, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    };
    state
        .metrics
        .response("completions", resp.status().as_u16());
    resp
}

async fn completions_inner(
    state: &Arc<AppState>,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = parse_body(body)?;
    let mut req = protocol::completion_request(&body, &state.limits)?;
    client::apply_headers(&mut req.opts.client, headers)?;
    let mut ids = Vec::new();
    let mut echo = Vec::new();
    for p in &req.prompts {
        let t = encode_prompt(state, p, "prompt").await?;
        if req.echo {
            echo.push(match p {
                Prompt::Text(s) => s.clone(),
                Prompt::Tokens(t) => state.tokenizer.decode(t, true).unwrap_or_default(),
            });
        }
        ids.push(t);
    }
    let run = launch(state, Api::Completion, ids, req.opts, echo)?;
    respond(state, run).await
}

pub async fn chat_completions(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let resp = match chat_inner(&state, &headers, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    };
    state
        .metrics
        .response("chat_completions", resp.status().as_u16());
    resp
}

/// Renders `messages` with the model's chat template.
pub fn chat_prompt_ids(state: &AppState, messages: &[ChatMessage]) -> Result<Vec<u32>, ApiError> {
    if !state.tokenizer.has_chat_template() {
        return Err(ApiError::field(
            "messages",
            "this model has no chat template; use /v1/completions",
        ));
    }
    let msgs = serde_json::to_value(messages).map_err(|e| ApiError::Internal(e.to_string()))?;
    let text = state
        .tokenizer
        .apply_chat_template(&msgs, true)
        .map_err(|e| ApiError::field("messages", e.to_string()))?;
    state
        .tokenizer
        .encode(&text, false)
        .map_err(|e| ApiError::field("messages", format!("cannot tokenize the chat prompt: {e}")))
}

async fn chat_inner(
    state: &Arc<AppState>,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = parse_body(body)?;
    let mut req = protocol::chat_request(&body, &state.limits)?;
    client::apply_headers(&mut req.opts.client, headers)?;
    let (st, msgs) = (state.clone(), req.messages.clone());
    let ids = tokio::task::spawn_blocking(move || chat_prompt_ids(&st, &msgs))
        .await
        .map_err(|e| ApiError::Internal(format!("tokenizer task failed: {e}")))??;
    let run = launch(state, Api::Chat, vec![ids], req.opts, Vec::new())?;
    respond(state, run).await
}

async fn respond(state: &Arc<AppState>, run: Run) -> Result<Response, ApiError> {
    if run.opts.stream {
        Ok(stream_response(state.clone(), run))
    } else {
        whole_response(state, run).await
    }
}

fn usage_json(u: &SeqUsage) -> Value {
    json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
    })
}

/// Adds a sequence's usage to the request total; the prompt of each prompt
/// counts once even with `n` choices (as OpenAI counts it).
fn add_usage(total: &mut SeqUsage, u: &SeqUsage, first_of_prompt: bool) {
    if first_of_prompt {
        total.prompt_tokens += u.prompt_tokens;
        total.cached_tokens += u.cached_tokens;
    }
    total.completion_tokens += u.completion_tokens;
}

/// Legacy completions `logprobs` object for the tokens of one chunk.
fn completion_logprobs(state: &AppState, tokens: &[TokenOut], offset: &mut usize) -> Value {
    let mut texts = Vec::new();
    let mut lps = Vec::new();
    let mut tops = Vec::new();
    let mut offsets = Vec::new();
    for t in tokens {
        let s = token_text(state, t.id);
        offsets.push(*offset);
        *offset += s.len();
        texts.push(s);
        lps.push(t.logprob);
        let top: serde_json::Map<String, Value> = t
            .top
            .iter()
            .map(|&(id, lp)| (token_text(state, id), json!(lp)))
            .collect();
        tops.push(Value::Object(top));
    }
    json!({"tokens": texts, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets})
}

/// Chat `logprobs.content` entries.
fn chat_logprobs(state: &AppState, tokens: &[TokenOut]) -> Vec<Value> {
    tokens
        .iter()
        .map(|t| {
            let s = token_text(state, t.id);
            let top: Vec<Value> = t
                .top
                .iter()
                .map(|&(id, lp)| {
                    let ts = token_text(state, id);
                    json!({"token": ts, "logprob": lp, "bytes": ts.as_bytes()})
                })
                .collect();
            json!({"token": s, "logprob": t.logprob, "bytes": s.as_bytes(), "top_logprobs": top})
        })
        .collect()
}

/// The text of one token as shown in logprobs (special tokens included).
fn token_text(state: &AppState, id: u32) -> String {
    state.tokenizer.decode(&[id], false).unwrap_or_default()
}

async fn whole_response(state: &Arc<AppState>, run: Run) -> Result<Response, ApiError> {
    let n = run.opts.n as usize;
    let results = futures::future::join_all(run.seqs.into_iter().map(Sequence::collect)).await;
    let mut total = SeqUsage::default();
    let mut choices = Vec::new();
    for (i, r) in results.into_iter().enumerate() {
        let c: Chunk = r?;
        let u = c.usage.unwrap_or_default();
        add_usage(&mut total, &u, i.is_multiple_of(n));
        let want_lp = run.opts.logprobs.is_some();
        let choice = match run.api {
            Api::Completion => {
                let mut off = run.echo[i].len();
                let lp = if want_lp {
                    completion_logprobs(state, &c.tokens, &mut off)
                } else {
                    Value::Null
                };
                json!({
                    "index": i,
                    "text": format!("{}{}", run.echo[i], c.text),
                    "logprobs": lp,
                    "finish_reason": c.finish,
                })
            }
            Api::Chat => json!({
                "index": i,
                "message": {"role": "assistant", "content": c.text},
                "logprobs": if want_lp { json!({"content": chat_logprobs(state, &c.tokens)}) } else { Value::Null },
                "finish_reason": c.finish,
            }),
        };
        choices.push(choice);
    }
    let object = match run.api {
        Api::Completion => "text_completion",
        Api::Chat => "chat.completion",
    };
    Ok(Json(json!({
        "id": run.id,
        "object": object,
        "created": run.created,
        "model": run.model,
        "choices": choices,
        "usage": usage_json(&total),
    }))
    .into_response())
}

/// One choice's chunks, then `None` when it ends; tagged with its index.
type ChoiceStream = BoxStream<'static, (usize, Option<Result<Chunk, ApiError>>)>;

/// State of one SSE response.
struct StreamState {
    state: Arc<AppState>,
    api: Api,
    id: String,
    model: String,
    created: u64,
    n: usize,
    want_logprobs: bool,
    include_usage: bool,
    merged: SelectAll<ChoiceStream>,
    out: VecDeque<SseEvent>,
    offsets: Vec<usize>,
    total: SeqUsage,
    done: bool,
}

impl StreamState {
    fn frame(&self, choices: Value, usage: Option<Value>) -> SseEvent {
        let object = match self.api {
            Api::Completion => "text_completion",
            Api::Chat => "chat.completion.chunk",
        };
        let mut v = json!({
            "id": self.id,
            "object": object,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        });
        if let Some(u) = usage {
            v["usage"] = u;
        } else if self.include_usage {
            v["usage"] = Value::Null;
        }
        SseEvent::default().data(v.to_string())
    }

    fn push_chunk(&mut self, index: usize, c: Chunk) {
        if let Some(u) = &c.usage {
            let first = index.is_multiple_of(self.n);
            add_usage(&mut self.total, u, first);
        }
        let choice = match self.api {
            Api::Completion => {
                let lp = if self.want_logprobs {
                    let mut off = self.offsets[index];
                    let v = completion_logprobs(&self.state, &c.tokens, &mut off);
                    self.offsets[index] = off;
                    v
                } else {
                    Value::Null
                };
                json!({"index": index, "text": c.text, "logprobs": lp, "finish_reason": c.finish})
            }
            Api::Chat => {
                let delta = if c.text.is_empty() && c.finish.is_some() {
                    json!({})
                } else {
                    json!({"content": c.text})
                };
                let lp = if self.want_logprobs {
                    json!({"content": chat_logprobs(&self.state, &c.tokens)})
                } else {
                    Value::Null
                };
                json!({"index": index, "delta": delta, "logprobs": lp, "finish_reason": c.finish})
            }
        };
        let ev = self.frame(json!([choice]), None);
        self.out.push_back(ev);
    }

    fn push_end(&mut self) {
        if self.include_usage {
            let u = usage_json(&self.total);
            let ev = self.frame(json!([]), Some(u));
            self.out.push_back(ev);
        }
        self.out.push_back(SseEvent::default().data("[DONE]"));
        self.done = true;
    }
}

fn stream_response(state: Arc<AppState>, run: Run) -> Response {
    let n_seqs = run.seqs.len();
    let mut merged = SelectAll::new();
    for (i, seq) in run.seqs.into_iter().enumerate() {
        // Each sequence yields its chunks, then one `None` marking its end.
        let s = stream::unfold(Some(seq), move |seq| async move {
            let mut seq = seq?;
            match seq.next().await {
                Some(item) => Some(((i, Some(item)), Some(seq))),
                None => Some(((i, None), None)),
            }
        });
        merged.push(s.boxed());
    }
    let mut st = StreamState {
        state,
        api: run.api,
        id: run.id,
        model: run.model,
        created: run.created,
        n: run.opts.n as usize,
        want_logprobs: run.opts.logprobs.is_some(),
        include_usage: run.opts.include_usage,
        merged,
        out: VecDeque::new(),
        offsets: run.echo.iter().map(String::len).collect(),
        total: SeqUsage::default(),
        done: false,
    };
    if st.api == Api::Chat {
        // OpenAI opens every chat choice with the assistant role.
        for i in 0..n_seqs {
            let choice = json!([{"index": i, "delta": {"role": "assistant", "content": ""},
                                 "logprobs": null, "finish_reason": null}]);
            let ev = st.frame(choice, None);
            st.out.push_back(ev);
        }
    } else {
        for (i, e) in run.echo.iter().enumerate().filter(|(_, e)| !e.is_empty()) {
            let choice = json!([{"index": i, "text": e, "logprobs": null, "finish_reason": null}]);
            let ev = st.frame(choice, None);
            st.out.push_back(ev);
        }
    }
    let events = stream::unfold(st, |mut st| async move {
        loop {
            if let Some(ev) = st.out.pop_front() {
                return Some((Ok::<_, Infallible>(ev), st));
            }
            if st.done {
                return None;
            }
            match st.merged.next().await {
                Some((i, Some(Ok(chunk)))) => st.push_chunk(i, chunk),
                Some((_, Some(Err(e)))) => {
                    st.out
                        .push_back(SseEvent::default().data(e.body().to_string()));
                    st.out.push_back(SseEvent::default().data("[DONE]"));
                    st.done = true;
                }
                Some((_, None)) => {}
                None => st.push_end(),
            }
        }
    });
    // No SSE keep-alive comments: SGLang's and vLLM's servers send none and
    // benchmark clients (SGLang's bench_serving) parse every line as JSON.
    // A long wait for the first token is safe without them: the headers are
    // sent at once, and no server timer runs while a response is open.
    Sse::new(events).into_response()
}
