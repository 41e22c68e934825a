//! The engine on real (tiny) models on the CPU backend.
//!
//! 1. Outside reference: greedy outputs of the fixture prompts, run together
//!    in one batch with other requests (chunked prefill, paging, overlap),
//!    equal Hugging Face transformers' greedy outputs (`reference/outputs.json`).
//! 2. Continuous batching, overlap on/off, page sizes, chunking, and a KV
//!    budget that forces eviction and preemption all give each request the
//!    tokens it gets when run alone.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use minisgl::engine::{CacheMode, Engine, EngineConfig, FinishReason, GenerateRequest};
use minisgl::model::placement::cpu_runner;
use minisgl::model::{load, LoadedModel};
use minisgl::plugin::PluginSet;
use minisgl::workload::random_requests;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/models")
        .join(name)
}

/// (prompt, HF greedy continuation) pairs of a fixture.
fn hf_greedy(dir: &Path) -> Vec<(Vec<u32>, Vec<u32>)> {
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("reference/outputs.json")).unwrap())
            .unwrap();
    let bytes = std::fs::read(dir.join("reference/logits.safetensors")).unwrap();
    let tensors = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    reference["greedy"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            let i = g["prompt_index"].as_u64().unwrap();
            let t = tensors.tensor(&format!("prompt.{i}")).unwrap();
            let prompt = t
                .data()
                .chunks_exact(4)
                .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u32)
                .collect();
            let want = g["new_tokens"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as u32)
                .collect();
            (prompt, want)
        })
        .collect()
}

struct Setup {
    page_size: u32,
    num_pages: u32,
    chunk: u32,
    overlap: bool,
    cache: CacheMode,
}

fn engine(model: &LoadedModel, s: &Setup) -> Engine {
    let runner = cpu_runner(model, s.num_pages, s.page_size).unwrap();
    let cfg = EngineConfig {
        max_prefill_tokens: s.chunk,
        max_running: 16,
        overlap: s.overlap,
        cache: s.cache,
        ..EngineConfig::default()
    };
    Engine::new(Box::new(runner), Arc::new(PluginSet::native()), cfg, vec![]).unwrap()
}

fn assert_clean(e: &Engine) {
    let m = e.metrics();
    assert_eq!(m.kv_pages_used, 0, "{m:?}");
    assert_eq!(m.kv_pages_free + m.kv_pages_cached, m.kv_pages_total);
}

#[test]
fn batched_greedy_matches_transformers() {
    for name in ["qwen3", "llama_gqa_tied", "qwen2"] {
        let dir = fixture(name);
        let model = load(&dir).unwrap();
        let vocab = model.config.vocab_size() as u32;
        let cases = hf_greedy(&dir);
        let mut batch: Vec<GenerateRequest> = cases
            .iter()
            .map(|(p, want)| GenerateRequest::greedy(p.clone(), want.len() as u32))
            .collect();
        batch.extend(random_requests(7, 6, 16, vocab, None));
        for overlap in [true, false] {
            let s = Setup {
                page_size: 4,
                num_pages: 512,
                chunk: 16,
                overlap,
                cache: CacheMode::Radix,
            };
            let e = engine(&model, &s);
            let outs = e.generate(batch.clone());
            for (i, (_, want)) in cases.iter().enumerate() {
                assert_eq!(
                    &outs[i].tokens, want,
                    "{name}: prompt {i}, overlap {overlap}"
                );
                assert_eq!(outs[i].finish_reason, FinishReason::Length);
            }
            e.shutdown();
            assert_clean(&e);
        }
    }
}

#[test]
fn batching_paging_and_preemption_match_alone() {
    let model = load(&fixture("qwen3")).unwrap();
    let vocab = model.config.vocab_size() as u32;
    let reqs = random_requests(11, 16, 16, vocab, None);
    // Each request alone, whole prompt in one chunk.
    let alone_engine = engine(
        &model,
        &Setup {
            page_size: 16,
            num_pages: 64,
            chunk: 4096,
            overlap: false,
            cache: CacheMode::Naive,
        },
    );
    let alone: Vec<Vec<u32>> = reqs
        .iter()
        .map(|r| alone_engine.generate(vec![r.clone()]).remove(0).tokens)
        .collect();
    let setups = [
        (1, 4096, 8, true),
        (16, 512, 4096, false),
        (256, 8, 64, true),
        // 20 pages of 4 tokens: forces eviction and preemption.
        (4, 20, 12, true),
        (4, 20, 12, false),
    ];
    for (page_size, num_pages, chunk, overlap) in setups {
        let e = engine(
            &model,
            &Setup {
                page_size,
                num_pages,
                chunk,
                overlap,
                cache: CacheMode::Radix,
            },
        );
        let outs = e.generate(reqs.clone());
        for (i, out) in outs.iter().enumerate() {
            assert_eq!(out.error, None);
            assert_eq!(
                out.tokens, alone[i],
                "request {i}: page size {page_size}, {num_pages} pages, chunk {chunk}, overlap {overlap}"
            );
        }
        let m = e.metrics();
        if num_pages == 20 {
            assert!(m.preemptions > 0 && m.evicted_pages > 0, "{m:?}");
        }
        e.shutdown();
        assert_clean(&e);
    }
}
