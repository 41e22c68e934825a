//! minisgl host: an LLM inference engine where policy is a plugin.
//!
//! Dependencies point one way:
//! `server → engine/scheduler → {plugin, kv, model} → backend (cpu | cuda) → kernels`.
//! The server knows requests and streams; the backend knows tensors and pages;
//! plugins only ever see the compact views of `minisgl_plugin_sdk`.
//! `sim` runs the engine loop in virtual time against a calibrated step-cost
//! model; `workload` builds the request streams it (and `compare`) replays.
//!
//! The binary `minisgl-host` (`main.rs` and `cli/`: the subcommands, the
//! benchmarks, the plugin harness and the GPU check) is not part of this
//! crate's API: it uses the crate only through that API, like any embedder.

pub mod backend;
pub mod batch;
pub mod config;
pub mod engine;
pub mod env;
pub mod kv;
pub mod metrics;
pub mod model;
pub mod plugin;
pub mod request;
pub mod scheduler;
pub mod server;
pub mod sim;
pub mod workload;
