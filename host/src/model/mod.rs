//! Model definitions and loaders (HF directories, GGUF).
pub mod gguf;
