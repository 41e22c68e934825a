//! A deterministic stand-in model for the engine tests (`engine_batching`,
//! `plugin_guide_policy`, which include it with `#[path]`).
//!
//! [`HashRunner`]'s "KV cache" stores, for every slot of every page, the
//! token and position written there; its next token is a hash of the whole
//! sequence read back *through the page table*. So any paging bug (a wrong
//! page, a page reused while still needed, a stale prefix) changes the output
//! or is reported as an error, while a correct engine gives every request
//! exactly the tokens it would get alone.

#![allow(dead_code)]

use std::collections::HashMap;
use std::time::Duration;

use minisgl::batch::{SampleMode, SeqOutput, StepInput, StepOutput, TokenLogprob};
use minisgl::model::{ModelConfig, ModelError, ModelRunner};

const EMPTY: u64 = u64::MAX;

/// The hash model. Construct with [`HashRunner::new`].
pub struct HashRunner {
    page_size: u32,
    num_pages: u32,
    vocab_size: u32,
    /// Per slot: `position << 32 | token`, or `EMPTY`.
    slots: Vec<u64>,
    /// Token sampled per request id in the previous step.
    last: HashMap<u64, u32>,
    /// Simulated device time per step (lets tests and benches see overlap).
    pub step_delay: Duration,
    /// Simulated device time per token of a step.
    pub token_delay: Duration,
    config: ModelConfig,
}

impl HashRunner {
    pub fn new(num_pages: u32, page_size: u32, vocab_size: u32) -> Self {
        // A nominal config (only the vocabulary and context length matter).
        let config = ModelConfig::from_json_str(&format!(
            r#"{{"architectures": ["LlamaForCausalLM"], "hidden_size": 8,
                "num_attention_heads": 1, "intermediate_size": 8, "num_hidden_layers": 1,
                "vocab_size": {vocab_size}, "max_position_embeddings": 1048576}}"#
        ))
        .expect("nominal hash-model config parses");
        HashRunner {
            config,
            page_size,
            num_pages,
            vocab_size,
            slots: vec![EMPTY; num_pages as usize * page_size as usize],
            last: HashMap::new(),
            step_delay: Duration::ZERO,
            token_delay: Duration::ZERO,
        }
    }

    /// What the model generates for `prompt` alone, greedily: the reference.
    pub fn reference(prompt: &[u32], max_new: u32, vocab_size: u32) -> Vec<u32> {
        let mut seq = prompt.to_vec();
        for _ in 0..max_new {
            let t = (hash(&seq) % u64::from(vocab_size)) as u32;
            seq.push(t);
        }
        seq[prompt.len()..].to_vec()
    }

    fn slot(&self, table: &[u32], pos: usize) -> Result<usize, ModelError> {
        let ps = self.page_size as usize;
        let page = *table.get(pos / ps).ok_or_else(|| {
            ModelError::InvalidInput(format!(
                "position {pos} beyond the page table ({} pages)",
                table.len()
            ))
        })?;
        if page >= self.num_pages {
            return Err(ModelError::InvalidInput(format!(
                "page {page} out of range"
            )));
        }
        Ok(page as usize * ps + pos % ps)
    }
}

fn fnv(h: u64, x: u64) -> u64 {
    (h ^ x).wrapping_mul(0x0000_0100_0000_01B3)
}

/// The "model": a hash of the token sequence. The greedy next token is
/// `hash(seq) % vocab`; candidate `i` of a top-k list is
/// `(hash(seq) + i * 7919) % vocab`.
pub fn hash(seq: &[u32]) -> u64 {
    let h = seq
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, &t| fnv(h, u64::from(t)));
    // Finalise so that the low bits depend on every token.
    let mut z = h;
    z = (z ^ (z >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    z ^ (z >> 33)
}

impl ModelRunner for HashRunner {
    fn step(&mut self, input: &StepInput) -> Result<StepOutput, ModelError> {
        self.run(input)
    }

    /// One-hot logits at the greedy token (KV written as in `step`).
    fn logits(&mut self, input: &StepInput) -> Result<Vec<Vec<f32>>, ModelError> {
        let out = self.run(input)?;
        Ok(out
            .outputs
            .iter()
            .map(|o| {
                let mut row = vec![0.0; self.vocab_size as usize];
                row[o.token as usize] = 1.0;
                row
            })
            .collect())
    }

    fn page_size(&self) -> u32 {
        self.page_size
    }

    fn num_pages(&self) -> u32 {
        self.num_pages
    }

    fn vocab_size(&self) -> u32 {
        self.vocab_size
    }

    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn device_name(&self) -> &'static str {
        "hash"
    }
}

impl HashRunner {
    fn run(&mut self, input: &StepInput) -> Result<StepOutput, ModelError> {
        let mut outputs = Vec::new();
        let mut sampled = HashMap::new();
        let vocab = u64::from(self.vocab_size);
        for seq in &input.seqs {
            let mut tokens = seq.tokens.clone();
            if seq.first_from_last_step {
                tokens[0] = *self.last.get(&seq.id).ok_or_else(|| {
                    ModelError::InvalidInput(format!(
                        "request {} has no token from the previous step",
                        seq.id
                    ))
                })?;
            }
            let start = seq.start_pos as usize;
            for (i, &t) in tokens.iter().enumerate() {
                if u64::from(t) >= vocab {
                    return Err(ModelError::InvalidInput(format!("token {t} out of range")));
                }
                let s = self.slot(&seq.page_table, start + i)?;
                self.slots[s] = ((start + i) as u64) << 32 | u64::from(t);
            }
            let Some(spec) = &seq.sample else { continue };
            // "Attention": read the whole sequence back through the page table.
            let end = start + tokens.len();
            let mut history = Vec::with_capacity(end);
            for pos in 0..end {
                let v = self.slots[self.slot(&seq.page_table, pos)?];
                if v == EMPTY || (v >> 32) as usize != pos {
                    return Err(ModelError::InvalidInput(format!(
                        "request {}: KV slot for position {pos} holds {}",
                        seq.id,
                        if v == EMPTY {
                            "nothing".to_string()
                        } else {
                            format!("position {}", v >> 32)
                        }
                    )));
                }
                history.push(v as u32);
            }
            let h = hash(&history);
            let greedy = (h % vocab) as u32;
            let (token, candidates) = match &spec.mode {
                SampleMode::Greedy => (greedy, Vec::new()),
                SampleMode::Sample(r) => (
                    r.allowed_tokens
                        .as_ref()
                        .map(|a| a[(fnv(h, r.seed) % a.len() as u64) as usize])
                        .unwrap_or((fnv(h, r.seed) % vocab) as u32),
                    Vec::new(),
                ),
                SampleMode::Candidates { k, .. } => {
                    let c: Vec<TokenLogprob> = (0..u64::from(*k).min(vocab))
                        .map(|i| TokenLogprob {
                            token: ((h + i * 7919) % vocab) as u32,
                            logprob: -1.0 - i as f32,
                        })
                        .collect();
                    (c[0].token, c)
                }
            };
            let top = spec.logprobs.unwrap_or(0);
            sampled.insert(seq.id, token);
            outputs.push(SeqOutput {
                id: seq.id,
                token,
                logprob: spec.logprobs.map(|_| -((h % 1000) as f32) / 1000.0),
                top_logprobs: (0..u64::from(top))
                    .map(|i| TokenLogprob {
                        token: ((h + i) % vocab) as u32,
                        logprob: -(i as f32),
                    })
                    .collect(),
                candidates,
            });
        }
        self.last = sampled;
        let delay = self.step_delay + self.token_delay * input.num_tokens() as u32;
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        Ok(StepOutput { outputs })
    }
}
