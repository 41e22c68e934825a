//! Errors of the GGUF loader. Each one names what is wrong and where (byte
//! offset, metadata key or tensor name) so a bad file can be diagnosed from
//! the message alone.

use std::path::PathBuf;

/// Everything that can go wrong while reading a GGUF file.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("cannot open GGUF file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a GGUF file: magic bytes are {found:?}, expected \"GGUF\"")]
    BadMagic { path: PathBuf, found: [u8; 4] },
    #[error("unsupported GGUF version {version} (supported: 2, 3){hint}")]
    UnsupportedVersion { version: u32, hint: &'static str },
    #[error("GGUF file truncated: reading {what} at byte offset {offset} needs {needed} bytes, but the file has {file_len}")]
    Truncated {
        what: String,
        offset: u64,
        needed: u64,
        file_len: u64,
    },
    #[error("corrupt GGUF file: {what} at byte offset {offset}: {detail}")]
    Corrupt {
        what: String,
        offset: u64,
        detail: String,
    },
    #[error("GGUF metadata key {key:?} is missing")]
    MissingKey { key: String },
    #[error("GGUF metadata key {key:?} has type {found}, expected {expected}")]
    WrongType {
        key: String,
        expected: &'static str,
        found: String,
    },
    #[error("GGUF metadata key {key:?} has an invalid value {value}: {detail}")]
    BadValue {
        key: String,
        value: String,
        detail: String,
    },
    #[error("unsupported model architecture {0:?} in general.architecture (supported: llama, qwen2, qwen3)")]
    UnsupportedArchitecture(String),
    #[error("tensor {tensor:?} has type {ggml_type}, which this loader cannot dequantise (supported: {supported})")]
    UnsupportedTensorType {
        tensor: String,
        ggml_type: String,
        supported: &'static str,
    },
    #[error("tensor {tensor:?}: {detail}")]
    BadTensor { tensor: String, detail: String },
    #[error("tensor {0:?} is required but missing from the file")]
    MissingTensor(String),
    #[error("tensor {0:?} has no Hugging Face equivalent (unsupported model layout)")]
    UnknownTensor(String),
    #[error("tokenizer: {0}")]
    Tokenizer(String),
}
