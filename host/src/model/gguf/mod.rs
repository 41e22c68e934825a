//! GGUF (llama.cpp's format) loading: the file is parsed and memory-mapped,
//! its metadata becomes a Hugging Face `config.json` equivalent, its tensors
//! come under their Hugging Face names and layouts (dequantised to f32 by
//! [`load`]; block-quantised ones kept in their blocks by [`load_quantized`],
//! for backends that compute on them), and its embedded vocabulary becomes a
//! `tokenizers::Tokenizer`.
//!
//! The model code consumes a [`GgufModel`] exactly like an HF directory, so
//! the GGUF path needs no model code of its own.

pub mod config;
pub mod dequant;
pub mod error;
pub mod reader;
pub mod spm;
pub mod tensors;
pub mod tokenizer;
pub mod value;

use std::collections::HashMap;
use std::path::Path;

pub use dequant::GgmlType;
pub use error::GgufError;
pub use reader::{GgufFile, TensorInfo};
pub use tensors::RawTensor;
pub use value::MetadataValue;

use config::{build_config, infer_llama3_rope, Arch, Meta};

/// A dense row-major f32 tensor with its Hugging Face shape (`[out, in]`
/// for linear weights).
#[derive(Debug, Clone, PartialEq)]
pub struct DenseTensor {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

/// Everything a model needs, taken from one GGUF file; tensors as
/// [`DenseTensor`] ([`load`]) or [`RawTensor`] ([`load_quantized`]).
pub struct GgufModel<T = DenseTensor> {
    /// An HF `config.json` equivalent (architectures, hidden_size,
    /// intermediate_size, num_hidden_layers, num_attention_heads,
    /// num_key_value_heads, head_dim, rms_norm_eps, rope_theta, rope_scaling,
    /// max_position_embeddings, vocab_size, tie_word_embeddings,
    /// bos_token_id, eos_token_id, torch_dtype).
    pub config: serde_json::Value,
    /// HF names (`model.embed_tokens.weight`,
    /// `model.layers.N.self_attn.q_proj.weight`, …, `model.norm.weight`,
    /// `lm_head.weight` when untied), HF shapes and layouts.
    pub tensors: HashMap<String, T>,
    pub tokenizer: tokenizers::Tokenizer,
    /// `tokenizer.chat_template` (a Jinja template, as in HF's tokenizer config).
    pub chat_template: Option<String>,
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
}

impl<T> std::fmt::Debug for GgufModel<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufModel")
            .field("config", &self.config)
            .field("tensors", &self.tensors.len())
            .field("chat_template", &self.chat_template.is_some())
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .finish_non_exhaustive()
    }
}

/// Loads a GGUF model: config, dequantised tensors and tokenizer. Metadata
/// is checked before any tensor is dequantised, so a bad file fails fast.
pub fn load(path: &Path) -> Result<GgufModel, GgufError> {
    let m = load_quantized(path)?;
    let tensors = {
        use rayon::prelude::*;
        m.tensors
            .into_par_iter()
            .map(|(k, t)| (k, t.to_dense()))
            .collect()
    };
    Ok(GgufModel {
        config: m.config,
        tensors,
        tokenizer: m.tokenizer,
        chat_template: m.chat_template,
        bos_token: m.bos_token,
        eos_token: m.eos_token,
    })
}

/// [`load`], keeping 2-D Q4_0/Q4_1/Q8_0/Q4_K/Q6_K tensors in their blocks
/// (see [`tensors::load_raw_tensors`]).
pub fn load_quantized(path: &Path) -> Result<GgufModel<RawTensor>, GgufError> {
    let file = GgufFile::open(path)?;
    let m = Meta(&file);
    let arch = Arch::parse(m.str("general.architecture")?)?;

    let tok = tokenizer::build_tokenizer(&file)?;
    let chat_template = m.str_opt("tokenizer.chat_template")?.map(str::to_string);

    let tied = file.tensor("output.weight").is_none();
    let llama3 = match file.tensor(tensors::ROPE_FREQS) {
        None => None,
        Some(info) => {
            let freqs = dequant::dequantize(
                &info.name,
                info.ggml_type,
                file.tensor_bytes(info),
                info.n_elements() as usize,
            )?;
            // head_dim and rope_theta as the config derives them.
            let base = build_config(&file, arch, tied, tok.vocab_len, None)?;
            let num = |k: &str| base[k].as_f64().unwrap_or_default();
            Some(infer_llama3_rope(
                &freqs,
                num("rope_theta"),
                num("head_dim") as usize,
            )?)
        }
    };
    let config = build_config(&file, arch, tied, tok.vocab_len, llama3)?;
    let count = |k: &str| config[k].as_u64().unwrap_or_default() as usize;
    let tensors = tensors::load_raw_tensors(
        &file,
        arch,
        count("num_attention_heads"),
        count("num_key_value_heads"),
    )?;
    for required in ["model.embed_tokens.weight", "model.norm.weight"] {
        if !tensors.contains_key(required) {
            return Err(GgufError::MissingTensor(required.into()));
        }
    }

    Ok(GgufModel {
        config,
        tensors,
        tokenizer: tok.tokenizer,
        chat_template,
        bos_token: tok.bos_token,
        eos_token: tok.eos_token,
    })
}
