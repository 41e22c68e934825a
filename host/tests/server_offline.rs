//! The HTTP server against the offline engine API: the same greedy requests,
//! sent over loopback to a real server (`/generate` with token ids and
//! `/v1/completions` with text), give exactly the tokens, text and finish
//! reasons of `Engine::generate` on the same fixture model.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::Arc;

use minisgl::config::Config;
use minisgl::engine::{try_spawn, Engine, EngineConfig, FinishReason, GenerateRequest};
use minisgl::model::load;
use minisgl::model::placement::cpu_runner;
use minisgl::plugin::PluginSet;
use minisgl::server::protocol::Limits;
use minisgl::server::AppState;
use serde_json::{json, Value};

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/models/llama_gqa_tied")
}

/// One blocking HTTP/1.1 request; returns (status, JSON body).
fn post(addr: &str, path: &str, body: &Value) -> (u16, Value) {
    let body = body.to_string();
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, serde_json::from_str(body).unwrap())
}

#[test]
fn greedy_over_http_equals_offline_engine() {
    let mut model = load(&fixture()).unwrap();
    let tokenizer = model.tokenizer.take().unwrap();
    let eos = tokenizer.eos_ids();
    let texts = [
        "Once upon a time",
        "Hello world",
        "The little crab walked",
        "a",
    ];
    let prompts: Vec<Vec<u32>> = texts
        .iter()
        .map(|t| tokenizer.encode(t, true).unwrap())
        .collect();
    let max_new = 24;

    let offline = Engine::new(
        Box::new(cpu_runner(&model, 256, 16).unwrap()),
        Arc::new(PluginSet::native()),
        EngineConfig::default(),
        eos.clone(),
    )
    .unwrap();
    let expected = offline.generate(
        prompts
            .iter()
            .map(|p| GenerateRequest::greedy(p.clone(), max_new))
            .collect(),
    );

    let handle = try_spawn(
        Box::new(cpu_runner(&model, 256, 16).unwrap()),
        Arc::new(PluginSet::native()),
        EngineConfig::default(),
        eos,
    )
    .unwrap();
    let limits = Limits {
        model_name: "tiny".into(),
        vocab_size: handle.vocab_size(),
        max_context: handle.max_context(),
        default_max_tokens: 16,
    };
    let state = AppState::new(
        handle,
        Arc::new(tokenizer),
        limits,
        Arc::new(Config::default()),
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = rt.spawn(minisgl::server::serve(listener, state.clone(), async {
        let _ = stop_rx.await;
    }));

    for ((prompt, text), want) in prompts.iter().zip(texts).zip(&expected) {
        assert!(want.error.is_none(), "{:?}", want.error);
        let reason = match want.finish_reason {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Abort => "abort",
        };
        let (status, out) = post(
            &addr,
            "/generate",
            &json!({"input_ids": prompt,
                    "sampling_params": {"max_new_tokens": max_new, "temperature": 0}}),
        );
        assert_eq!(status, 200, "{out}");
        let ids: Vec<u32> = serde_json::from_value(out["output_ids"].clone()).unwrap();
        assert_eq!(ids, want.tokens, "prompt {text:?}");
        assert_eq!(out["meta_info"]["finish_reason"]["type"], reason);
        assert_eq!(
            out["meta_info"]["completion_tokens"],
            want.usage.completion_tokens
        );

        let (status, out) = post(
            &addr,
            "/v1/completions",
            &json!({"prompt": text, "max_tokens": max_new, "temperature": 0}),
        );
        assert_eq!(status, 200, "{out}");
        let decoded = state.tokenizer.decode(&want.tokens, true).unwrap();
        assert_eq!(out["choices"][0]["text"], decoded, "prompt {text:?}");
        assert_eq!(out["choices"][0]["finish_reason"], reason);
        assert_eq!(out["usage"]["prompt_tokens"], prompt.len());
    }

    let _ = stop_tx.send(());
    rt.block_on(server).unwrap().unwrap();
}
