//! The engine: the loop thread with overlap scheduling, the handle the server
//! uses, and the offline batch API.
//!
//! * [`api`]: configuration, and the request/metrics vocabulary re-exported.
//! * [`builder`]: settings to a running engine (the one composition root).
//! * [`handle`]: [`spawn`] starts the loop thread; [`EngineHandle`] submits,
//!   aborts, reads metrics, shuts down.
//! * [`worker`]: the model runner on its own thread (overlap).
//! * [`offline`]: [`Engine::generate`] for batches.

pub mod api;
pub mod builder;
pub mod handle;
pub mod offline;
mod worker;

pub use api::{
    CacheMode, DecisionFixups, EngineConfig, EngineMetrics, Event, FinishReason, FixupCause,
    GenerateOutput, GenerateRequest, SubmitError, Usage,
};
pub use handle::{spawn, spawn_with_policy, try_spawn, EngineHandle};
pub use offline::Engine;
