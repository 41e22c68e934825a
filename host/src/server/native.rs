//! `POST /generate`: SGLang's (and Mini-SGLang's) native endpoint.
//!
//! Body: `text` (string or list) or `input_ids` (list or list of lists),
//! `sampling_params` (`max_new_tokens`, `temperature`, `top_p`, `top_k`,
//! `min_p`, penalties, `stop`, `stop_token_ids`, `ignore_eos`, `n`, `seed`),
//! `stream`, `return_logprob`. Answer: `{"text", "output_ids", "meta_info"}`
//! (a list for batched input); streaming sends the text so far in each event.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::stream::{self, StreamExt};
use serde_json::{json, Value};

use super::client;
use super::error::ApiError;
use super::openai::{encode_prompt, parse_body};
use super::protocol::{self, resolve_max_tokens, Prompt};
use super::sequence::{Chunk, SeqUsage, Sequence};
use super::state::AppState;

pub async fn generate(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let resp = match generate_inner(&state, &headers, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    };
    state.metrics.response("generate", resp.status().as_u16());
    resp
}

fn meta(id: &str, text_len: usize, c: &Chunk, u: &SeqUsage, lp: bool) -> Value {
    let mut m = json!({
        "id": id,
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "cached_tokens": u.cached_tokens,
        "finish_reason": c.finish.map(|f| json!({"type": f})),
        "text_len": text_len,
    });
    if lp {
        m["output_token_logprobs"] = c
            .tokens
            .iter()
            .map(|t| json!([t.logprob, t.id]))
            .collect::<Vec<_>>()
            .into();
        m["output_top_logprobs"] = c
            .tokens
            .iter()
            .map(|t| {
                t.top
                    .iter()
                    .map(|&(id, lp)| json!([lp, id]))
                    .collect::<Vec<_>>()
            })
            .collect::<Vec<_>>()
            .into();
    }
    m
}

async fn generate_inner(
    state: &Arc<AppState>,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = parse_body(body)?;
    let mut req = protocol::native_request(&body, &state.limits)?;
    client::apply_headers(&mut req.opts.client, headers)?;
    let field = if matches!(req.prompts.first(), Some(Prompt::Tokens(_))) {
        "input_ids"
    } else {
        "text"
    };
    let mut seqs = Vec::new();
    // Prompt length per sequence: streamed chunks report running counts.
    let mut prompt_lens: Vec<u32> = Vec::new();
    for p in &req.prompts {
        let ids = encode_prompt(state, p, field).await?;
        let max_new = resolve_max_tokens(
            ids.len(),
            req.opts.max_tokens,
            &state.limits,
            field,
            "sampling_params.max_new_tokens",
        )?;
        for i in 0..req.opts.n {
            prompt_lens.push(ids.len() as u32);
            seqs.push(Sequence::submit(
                state,
                ids.clone(),
                max_new,
                &req.opts,
                u64::from(i),
            )?);
        }
    }
    let id = state.response_id("gen");
    let lp = req.opts.logprobs.is_some();
    let single = !req.batched && req.opts.n == 1;
    if req.opts.stream {
        let mut merged = stream::SelectAll::new();
        for (i, seq) in seqs.into_iter().enumerate() {
            let s = stream::unfold(seq, move |mut seq| async move {
                seq.next().await.map(|c| ((i, c), seq))
            });
            merged.push(s.boxed());
        }
        let id2 = id.clone();
        let mut texts: Vec<String> = vec![String::new(); merged.len()];
        let mut ids: Vec<Vec<u32>> = vec![Vec::new(); merged.len()];
        let events = merged
            .map(move |(i, c)| {
                let data = match c {
                    Ok(c) => {
                        texts[i].push_str(&c.text);
                        ids[i].extend(c.tokens.iter().map(|t| t.id));
                        // Until the final chunk carries the engine's usage,
                        // report the running count as SGLang does.
                        let u = c.usage.unwrap_or(SeqUsage {
                            prompt_tokens: prompt_lens[i],
                            completion_tokens: ids[i].len() as u32,
                            cached_tokens: 0,
                        });
                        json!({
                            "index": i,
                            "text": texts[i],
                            "output_ids": ids[i],
                            "meta_info": meta(&id2, texts[i].len(), &c, &u, lp),
                        })
                    }
                    Err(e) => e.body(),
                };
                Ok::<_, Infallible>(SseEvent::default().data(data.to_string()))
            })
            .chain(stream::once(async {
                Ok(SseEvent::default().data("[DONE]"))
            }));
        // No SSE keep-alive comments: SGLang's and vLLM's servers send none
        // and benchmark clients parse every line as JSON.
        return Ok(Sse::new(events).into_response());
    }
    let results = futures::future::join_all(seqs.into_iter().map(Sequence::collect)).await;
    let mut out = Vec::new();
    for r in results {
        let c = r?;
        let u = c.usage.unwrap_or_default();
        out.push(json!({
            "text": c.text,
            "output_ids": c.tokens.iter().map(|t| t.id).collect::<Vec<_>>(),
            "meta_info": meta(&id, c.text.len(), &c, &u, lp),
        }));
    }
    if single {
        Ok(Json(out.pop().unwrap_or(Value::Null)).into_response())
    } else {
        Ok(Json(Value::Array(out)).into_response())
    }
}
