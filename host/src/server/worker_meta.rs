//! What the server reports about the loaded model beyond its limits (the
//! router-facing `/model_info` and `/server_info` fields).

use crate::model::config::{Arch, ModelConfig};

/// What the server knows about the loaded model beyond [`super::protocol::Limits`];
/// set once by the binary after loading (absent in embedded servers, where
/// the fields fall back to what the config says).
#[derive(Clone, Debug, Default)]
pub struct WorkerMeta {
    /// Hugging Face `model_type` (`llama`, `qwen2`, `qwen3`, `mistral`).
    pub model_type: String,
    /// Hugging Face `architectures` (`["LlamaForCausalLM"]`).
    pub architectures: Vec<String>,
    /// Where the tokenizer was read from.
    pub tokenizer_path: Option<String>,
    /// `cpu` or the CUDA device name.
    pub device: String,
}

impl WorkerMeta {
    /// The facts a loaded model gives: its family under Hugging Face's
    /// names, where the tokenizer came from, the backend's name.
    pub fn new(config: &ModelConfig, source: &std::path::Path, device: &str) -> Self {
        let arch = config.arch();
        let model_type = match arch {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Mistral => "mistral",
        };
        WorkerMeta {
            model_type: model_type.to_string(),
            architectures: vec![arch.hf_name().to_string()],
            tokenizer_path: Some(source.display().to_string()),
            device: device.to_string(),
        }
    }
}
