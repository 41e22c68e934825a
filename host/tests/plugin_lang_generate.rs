//! Full generate runs on a tiny real model (the qwen3 fixture, CPU backend)
//! with the FCFS scheduler written in Python, JavaScript and C in charge.
//! Outside reference: the fixture prompts' greedy continuations equal Hugging
//! Face transformers' (reference.json), while other requests share the batch
//! under chunked prefill and a KV budget tight enough to force preemption;
//! every request gets the same tokens as under the native scheduler, and the
//! plugin answered every call itself (no fallback).

#[path = "support/model/mod.rs"]
mod model_support;

use std::path::PathBuf;
use std::sync::Arc;

use minisgl::engine::{Engine, EngineConfig, FinishReason, GenerateRequest};
use minisgl::model::load;
use minisgl::model::placement::cpu_runner;
use minisgl::plugin::{Deadlines, PluginConfig, PluginKind, PluginSet, PluginSource};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn plugin(file: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../target/wasm32-wasip2/plugin")
        .join(file);
    assert!(
        p.is_file(),
        "{} is missing: run scripts/build-lang-plugins.sh first",
        p.display()
    );
    p
}

fn requests(vocab: u32) -> (Vec<GenerateRequest>, Vec<Vec<u32>>) {
    let r = model_support::reference("qwen3");
    let mut reqs = Vec::new();
    let mut want = Vec::new();
    for g in r.json["greedy"].as_array().expect("greedy references") {
        let i = g["prompt_index"].as_u64().unwrap() as usize;
        let tokens: Vec<u32> = g["new_tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap() as u32)
            .collect();
        reqs.push(GenerateRequest::greedy(
            r.prompts[i].clone(),
            tokens.len() as u32,
        ));
        want.push(tokens);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let shared: Vec<u32> = (0..16).map(|_| rng.random_range(0..vocab)).collect();
    for _ in 0..10 {
        let mut prompt = if rng.random_bool(0.5) {
            shared.clone()
        } else {
            Vec::new()
        };
        prompt.extend((0..rng.random_range(1..30)).map(|_| rng.random_range(0..vocab)));
        reqs.push(GenerateRequest::greedy(prompt, rng.random_range(1..14)));
    }
    (reqs, want)
}

fn run(plugins: PluginSet, reqs: &[GenerateRequest]) -> (Vec<Vec<u32>>, Arc<PluginSet>, u64) {
    let model = load(&model_support::fixture("qwen3")).unwrap();
    // 24 pages of 4 tokens and 12-token chunks: chunked prefill, eviction
    // and preemption all happen.
    let runner = cpu_runner(&model, 24, 4).unwrap();
    let cfg = EngineConfig {
        max_prefill_tokens: 12,
        max_running: 8,
        ..EngineConfig::default()
    };
    let plugins = Arc::new(plugins);
    let engine = Engine::new(Box::new(runner), plugins.clone(), cfg, vec![]).unwrap();
    let outs = engine.generate(reqs.to_vec());
    let preemptions = engine.metrics().preemptions;
    engine.shutdown();
    for o in &outs {
        assert_eq!(o.error, None);
        assert_eq!(o.finish_reason, FinishReason::Length);
    }
    (
        outs.into_iter().map(|o| o.tokens).collect(),
        plugins,
        preemptions,
    )
}

#[test]
fn generate_with_python_js_and_c_schedulers() {
    let vocab = load(&model_support::fixture("qwen3"))
        .unwrap()
        .config
        .vocab_size() as u32;
    let (reqs, hf) = requests(vocab);
    let (native, _, native_preemptions) = run(PluginSet::native(), &reqs);
    assert!(
        native_preemptions > 0,
        "the KV budget should force preemption"
    );
    for (i, want) in hf.iter().enumerate() {
        assert_eq!(&native[i], want, "native: HF prompt {i}");
    }
    for file in ["fcfs_python.wasm", "fcfs_js.wasm", "fcfs_c.wasm"] {
        let cfg = PluginConfig {
            scheduler: Some(plugin(file)),
            // Decisions are under test, not speed: on a busy CI machine a call
            // can be descheduled past the default 20 ms and count as a timeout.
            deadlines: Deadlines::all(std::time::Duration::from_secs(1)),
            cache_dir: Some(
                PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/plugin-cache"),
            ),
            ..PluginConfig::default()
        };
        let set = PluginSet::load(&cfg).unwrap_or_else(|e| panic!("loading {file}: {e}"));
        let (outs, set, preemptions) = run(set, &reqs);
        for (i, want) in hf.iter().enumerate() {
            assert_eq!(&outs[i], want, "{file}: HF prompt {i}");
        }
        assert_eq!(
            outs, native,
            "{file}: every request as under the native FCFS"
        );
        assert_eq!(
            preemptions, native_preemptions,
            "{file}: same schedule, same preemptions"
        );
        let s = set
            .stats()
            .into_iter()
            .find(|s| s.kind == PluginKind::Scheduler)
            .unwrap();
        assert!(matches!(s.source, PluginSource::Wasm { .. }), "{s:?}");
        assert!(s.calls > 10, "{s:?}");
        assert_eq!(s.failures.total(), 0, "{file}: {s:?}");
        assert_eq!(s.fallbacks, 0, "{file}: {s:?}");
    }
}
