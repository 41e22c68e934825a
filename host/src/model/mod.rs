//! Model definitions and loaders (HF directories, GGUF).
//!
//! * [`config`]: `config.json` → frozen [`ModelConfig`].
//! * [`weights`]: safetensors shards (memory-mapped), dense tensors (GGUF), or
//!   random weights of a real shape.
//! * [`loader`]: `--model PATH` → [`LoadedModel`] (config + weights + tokenizer).
//! * [`tokenizer`], [`chat_template`]: text in and out.
//! * [`llama`]: the one model definition (Llama, Qwen2, Qwen3, Mistral),
//!   written against [`crate::backend::Backend`].
//! * [`runner`]: [`ModelRunner`], the step interface of [`crate::batch`];
//!   [`placement`]: the runner (one rank or TP ranks) and KV budget a device gets.
//! * [`tp`]: tensor parallelism's split of the weights; [`tp_runner`]: a
//!   [`ModelRunner`] over one thread per rank.

pub mod chat_template;
pub mod config;
pub mod gguf;
pub mod graphs;
pub mod llama;
pub mod loader;
pub mod placement;
pub mod runner;
pub mod tokenizer;
pub mod tp;
pub mod tp_runner;
pub mod weights;

pub use config::{Arch, ModelConfig, RopeScaling};
pub use loader::{load, load_random, LoadedModel};
pub use runner::{ModelRunner, Runner};
pub use tokenizer::{IncrementalDecoder, Tokenizer};

use crate::backend::BackendError;

/// Everything that can go wrong loading or running a model.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// A file or directory that should exist does not (or cannot be read).
    #[error("{path}: {msg}")]
    Io { path: String, msg: String },
    /// `config.json` is malformed or lacks a required key (named).
    #[error("{0}")]
    Config(String),
    /// An architecture, rope type or feature this engine does not implement.
    #[error("unsupported {0}")]
    Unsupported(String),
    /// Weight files are corrupt, truncated, or lack/misshape a tensor.
    #[error("weights: {0}")]
    Weights(String),
    /// Tokenizer files are missing or malformed.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The chat template failed to parse or render.
    #[error("chat template: {0}")]
    Template(String),
    /// Bad step input (token ids, page tables).
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// The compute backend failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// The model cannot be split across the requested tensor-parallel ranks.
    #[error(transparent)]
    Tp(#[from] tp::TpError),
}

impl ModelError {
    pub(crate) fn io(path: &std::path::Path, e: impl std::fmt::Display) -> Self {
        ModelError::Io {
            path: path.display().to_string(),
            msg: e.to_string(),
        }
    }
}
