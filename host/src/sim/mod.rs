//! The policy simulator: the real engine loop in virtual time against a
//! step-cost model calibrated on a device.
//!
//! * [`cost`]: the cost model (step time from tokens, KV read, attention
//!   pairs) and its fit;
//! * [`profile`]: the profile file (measured points + fitted model);
//! * [`measure`]: measuring a profile's points on any model runner;
//! * [`driver`]: [`simulate`], the virtual-time loop;
//! * [`record`]: what a replay produced (shared with the real-engine replay);
//! * [`step_log`]: every step of a replay and the cost model's error on them;
//! * [`summary`]: the figures reported per replay;
//! * [`timed`]: measuring policy (plugin) call time.

pub mod cost;
pub mod driver;
pub mod measure;
pub mod profile;
pub mod record;
pub mod step_log;
pub mod summary;
pub mod timed;

pub use cost::{CostModel, StepShape};
pub use driver::{simulate, PolicyTime, SimConfig};
pub use profile::{Profile, ProfilePoint};
pub use record::{RequestRecord, RunRecord, Sample};
pub use step_log::{LoggingRunner, StepLog, StepRecord};
pub use summary::{ClientSummary, Slo, Summary, Timing};
