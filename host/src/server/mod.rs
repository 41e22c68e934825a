//! OpenAI-compatible HTTP server.
//!
//! The server knows requests and streams, never tensors or pages: it parses
//! and validates requests ([`protocol`]), hands token ids to the engine,
//! turns the engine's token events back into text ([`detok`], [`stop`]) and
//! answers in OpenAI's JSON and SSE shapes. Every error goes through one
//! mapping to HTTP status and body ([`error`]).

pub mod detok;
pub mod error;
pub mod fields;
pub mod metrics;
pub mod protocol;
pub mod stop;
