//! Shared helpers for the model tests: fixture paths, HF reference data, and
//! step builders.
#![allow(dead_code)]

use std::path::PathBuf;

use minisgl::batch::{SampleMode, SampleSpec, SeqInput, StepInput};
use serde_json::Value;

/// fp32 fixtures: logits must match HF within 1e-3 and greedy exactly.
pub const FP32_MODELS: &[&str] = &[
    "llama_gqa_tied",
    "llama_untied_bias",
    "qwen2",
    "qwen3",
    "mistral",
];
/// bf16 fixtures: cosine similarity with HF's bf16 logits above 0.999.
pub const BF16_MODELS: &[&str] = &["llama_bf16", "qwen3_bf16"];

pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/models")
        .join(name)
}

/// HF's recorded outputs for one fixture.
pub struct Reference {
    pub prompts: Vec<Vec<u32>>,
    pub logits: Vec<Vec<f32>>,
    pub json: Value,
}

pub fn reference(name: &str) -> Reference {
    let dir = fixture(name);
    let bytes = std::fs::read(dir.join("reference/logits.safetensors")).expect("reference logits");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("valid reference file");
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("reference/outputs.json")).unwrap())
            .unwrap();
    let n = json["num_prompts"].as_u64().unwrap() as usize;
    let mut prompts = Vec::new();
    let mut logits = Vec::new();
    for i in 0..n {
        let p = st.tensor(&format!("prompt.{i}")).unwrap();
        prompts.push(
            p.data()
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as u32)
                .collect(),
        );
        let l = st.tensor(&format!("logits.{i}")).unwrap();
        logits.push(
            l.data()
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        );
    }
    Reference {
        prompts,
        logits,
        json,
    }
}

pub fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

pub fn greedy() -> Option<SampleSpec> {
    Some(SampleSpec {
        mode: SampleMode::Greedy,
        logprobs: None,
    })
}

/// Hands out page ids in a scrambled order, so page-table indirection is
/// exercised (a sequence's pages are never contiguous).
pub struct Pages {
    free: Vec<u32>,
}

impl Pages {
    pub fn new(num_pages: u32) -> Self {
        // A fixed permutation: multiply by an odd constant modulo a power of two.
        assert!(num_pages.is_power_of_two());
        let free = (0..num_pages)
            .map(|i| (i.wrapping_mul(37) + 11) % num_pages)
            .collect();
        Pages { free }
    }

    pub fn take(&mut self, n: usize) -> Vec<u32> {
        assert!(self.free.len() >= n, "test ran out of pages");
        self.free.drain(..n).collect()
    }
}

/// One sequence of a step.
pub fn seq(id: u64, tokens: &[u32], start_pos: u32, page_table: &[u32], sample: bool) -> SeqInput {
    SeqInput {
        id,
        tokens: tokens.to_vec(),
        first_from_last_step: false,
        start_pos,
        page_table: page_table.to_vec(),
        sample: if sample { greedy() } else { None },
    }
}

pub fn step(seqs: Vec<SeqInput>) -> StepInput {
    StepInput { seqs }
}
