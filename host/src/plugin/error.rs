//! Errors of loading and swapping plugins, and the causes of failed calls.

use std::path::PathBuf;

use super::PluginKind;

/// Why a plugin could not be loaded or swapped in, or why a slot in
/// [`super::FailureMode::Fail`] mode retired its plugin.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error("cannot read plugin {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a valid {kind} component: {reason}")]
    Compile {
        kind: PluginKind,
        path: PathBuf,
        reason: String,
    },
    #[error("{path} does not implement the {kind} world of minisgl:plugin@0.1.0: {reason}")]
    Instantiate {
        kind: PluginKind,
        path: PathBuf,
        reason: String,
    },
    #[error("{kind} plugin {path} failed its first call (`name`): {reason}")]
    Probe {
        kind: PluginKind,
        path: PathBuf,
        reason: String,
    },
    #[error(
        "{path} implements none of the minisgl:plugin worlds: it exports none of `schedule` \
         (scheduler), `pick-victims` (evictor), `plan` (sampler); pass it with \
         --scheduler/--evictor/--sampler to see what is missing"
    )]
    UnknownWorld { path: PathBuf },
    #[error("cannot set up the plugin engine: {0}")]
    Engine(String),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("plugin cache directory {path}: {source}")]
    Cache {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{kind} plugin {name} failed ({cause}) and the failure mode is `fail`: {detail}")]
    Failed {
        kind: PluginKind,
        name: String,
        cause: FailureCause,
        detail: String,
    },
}

impl PluginError {
    /// The kind the error is about, when it names one.
    pub fn kind(&self) -> Option<PluginKind> {
        match self {
            PluginError::Compile { kind, .. }
            | PluginError::Instantiate { kind, .. }
            | PluginError::Probe { kind, .. }
            | PluginError::Failed { kind, .. } => Some(*kind),
            _ => None,
        }
    }
}

/// Why one plugin call was not used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FailureCause {
    /// The guest trapped (panic, unreachable, out-of-bounds access, ...).
    Trap,
    /// The call ran past its deadline and was interrupted.
    Timeout,
    /// The guest tried to grow memory past the cap.
    Memory,
    /// The call returned, but the host's validation rejected its decision.
    Invalid,
}

impl std::fmt::Display for FailureCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FailureCause::Trap => "trap",
            FailureCause::Timeout => "timeout",
            FailureCause::Memory => "memory cap",
            FailureCause::Invalid => "invalid decision",
        })
    }
}
