//! The default minisgl policies, written once in plain Rust.
//!
//! Each default plugin (`plugins/fcfs-scheduler`, `plugins/lru-evictor`,
//! `plugins/default-sampler`) wraps one of these types for Wasm, and the host
//! links this crate natively as the built-in fallback it uses whenever a plugin
//! fails. Keeping one implementation makes "Wasm vs native" a fair comparison
//! and lets tests check that both give identical decisions.

mod fcfs;
mod lru;
mod sampler;

pub use fcfs::{pages_for_chunk, pages_for_decode, Fcfs};
pub use lru::Lru;
pub use sampler::{pick_seeded, step_seed, DefaultSampler};
