//! Shared by the `plugin_*` integration tests: find the built components and
//! load plugin sets with test limits.

#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Duration;

use minisgl::plugin::{Deadlines, FailureMode, PluginConfig, PluginKind, PluginSet};

/// The seeded plugin inputs of `bench plugins`, shared with the binary (one
/// copy, not part of the library's API).
#[path = "../../src/cli/bench_plugins/synth.rs"]
pub mod synth;

/// The component of workspace crate `name`, built by scripts/build-plugins.sh.
pub fn plugin(name: &str) -> PathBuf {
    synth::built_plugin(name).unwrap_or_else(|e| panic!("{e}"))
}

/// A compile cache shared by the test binaries (each component is compiled
/// at most once per build of it).
pub fn cache_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/plugin-test-cache")
}

pub fn config(deadline: Duration, memory: usize, mode: FailureMode) -> PluginConfig {
    PluginConfig {
        deadlines: Deadlines::all(deadline),
        memory_limit_bytes: memory,
        failure_mode: mode,
        cache_dir: Some(cache_dir()),
        ..PluginConfig::default()
    }
}

/// A set serving crate `name` as `kind`, everything else native.
pub fn load(kind: PluginKind, name: &str, cfg: PluginConfig) -> PluginSet {
    let mut cfg = cfg;
    let path = Some(plugin(name));
    match kind {
        PluginKind::Scheduler => cfg.scheduler = path,
        PluginKind::Evictor => cfg.evictor = path,
        PluginKind::Sampler => cfg.sampler = path,
    }
    PluginSet::load(&cfg).unwrap_or_else(|e| panic!("loading {name}: {e}"))
}

pub fn load_default(kind: PluginKind, name: &str) -> PluginSet {
    load(
        kind,
        name,
        config(Duration::from_secs(1), 64 << 20, FailureMode::Fallback),
    )
}
