//! The wasmtime side: one engine per [`super::PluginSet`], a linker with an
//! empty WASI context, an epoch ticker for deadlines (the per-call verdict is
//! [`super::clock`]'s), and compilation with an on-disk cache of precompiled
//! artefacts.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Config, Engine, Precompiled, ResourceLimiter, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::clock::{CallClock, TICK};
use super::stderr::ErrorOutput;
use super::{PluginError, PluginKind};

/// Wasmtime release the cache key names (the engine's compatibility hash,
/// also in the key, covers the exact version and settings).
const WASMTIME_RELEASE: &str = "48";

/// Per-store state: the (empty) WASI context, the memory cap, the guest's
/// stderr and the clocks of the call in progress.
pub(crate) struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: CapLimiter,
    pub(crate) stderr: ErrorOutput,
    pub(crate) clock: CallClock,
}

impl HostState {
    /// No preopened directories, no environment, no arguments, no network:
    /// the plugin can read clocks and random numbers, nothing else. Its
    /// stderr is counted and its beginning kept ([`ErrorOutput`]).
    pub(crate) fn new(memory_limit_bytes: usize, clock: CallClock) -> HostState {
        let stderr = ErrorOutput::default();
        HostState {
            wasi: WasiCtx::builder().stderr(stderr.clone()).build(),
            table: ResourceTable::new(),
            limiter: CapLimiter::new(memory_limit_bytes),
            stderr,
            clock,
        }
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// `StoreLimits` plus a flag recording that a growth was refused, so a trap
/// that follows (a guest aborting on allocation failure) is counted as the
/// memory cap rather than as a plain trap.
pub(crate) struct CapLimiter {
    limits: StoreLimits,
    pub(crate) denied: bool,
}

impl CapLimiter {
    fn new(memory_limit_bytes: usize) -> CapLimiter {
        CapLimiter {
            limits: StoreLimitsBuilder::new()
                .memory_size(memory_limit_bytes)
                // Table elements are pointers; allow as many as fit the cap.
                .table_elements(memory_limit_bytes / 8)
                .trap_on_grow_failure(false)
                .build(),
            denied: false,
        }
    }
}

impl ResourceLimiter for CapLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let ok = self.limits.memory_growing(current, desired, maximum)?;
        self.denied |= !ok;
        Ok(ok)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let ok = self.limits.table_growing(current, desired, maximum)?;
        self.denied |= !ok;
        Ok(ok)
    }

    fn instances(&self) -> usize {
        self.limits.instances()
    }

    fn tables(&self) -> usize {
        self.limits.tables()
    }

    fn memories(&self) -> usize {
        self.limits.memories()
    }
}

/// Advances the engine's epoch every [`TICK`] until dropped.
struct Ticker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Ticker {
    fn start(engine: Engine) -> Result<Ticker, PluginError> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("minisgl-plugin-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(TICK);
                    engine.increment_epoch();
                }
            })
            .map_err(|e| PluginError::Engine(format!("cannot start the epoch thread: {e}")))?;
        Ok(Ticker {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A compiled component and where it came from.
pub(crate) struct Compiled {
    pub component: Component,
    /// Hex sha256 of the file's bytes.
    pub sha256: String,
    /// Loaded from a `.cwasm` or the cache rather than compiled now.
    pub cached: bool,
    pub elapsed: Duration,
}

/// Engine, linker and ticker shared by every plugin of one `PluginSet`.
pub(crate) struct Runtime {
    pub engine: Engine,
    pub linker: Linker<HostState>,
    cache_dir: Option<PathBuf>,
    _ticker: Ticker,
}

impl Runtime {
    pub fn new(cache_dir: Option<PathBuf>) -> Result<Runtime, PluginError> {
        let engine = engine()?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
            .map_err(|e| PluginError::Engine(format!("linking WASI: {e:#}")))?;
        if let Some(dir) = &cache_dir {
            std::fs::create_dir_all(dir).map_err(|source| PluginError::Cache {
                path: dir.clone(),
                source,
            })?;
        }
        let ticker = Ticker::start(engine.clone())?;
        Ok(Runtime {
            engine,
            linker,
            cache_dir,
            _ticker: ticker,
        })
    }

    /// Reads `path` and turns it into a loadable component: a precompiled
    /// `.cwasm` is deserialised, a `.wasm` component is taken from the cache
    /// or compiled (and then cached).
    pub fn compile(&self, kind: PluginKind, path: &Path) -> Result<Compiled, PluginError> {
        let start = Instant::now();
        let bytes = super::bounds::read_plugin_file(path).map_err(|source| PluginError::Read {
            path: path.to_owned(),
            source,
        })?;
        let sha256 = hex::encode(Sha256::digest(&bytes));
        let bad = |reason: String| PluginError::Compile {
            kind,
            path: path.to_owned(),
            reason,
        };
        let (component, cached) = match Engine::detect_precompiled(&bytes) {
            Some(Precompiled::Component) => {
                // SAFETY: a `.cwasm` is native code; wasmtime checks that it was
                // produced by this wasmtime version and engine configuration,
                // and the operator vouches for the file by configuring it.
                let c = unsafe { Component::deserialize(&self.engine, &bytes) }
                    .map_err(|e| bad(format!("{e:#}")))?;
                (c, true)
            }
            Some(Precompiled::Module) => {
                return Err(bad(
                    "a precompiled core module, not a component (rebuild it for wasm32-wasip2)"
                        .into(),
                ))
            }
            None => self.compile_cached(&bytes, &sha256).map_err(bad)?,
        };
        Ok(Compiled {
            component,
            sha256,
            cached,
            elapsed: start.elapsed(),
        })
    }

    /// The world a compiled component implements, from its exported
    /// functions (`schedule`, `pick-victims`, `plan`).
    pub fn world_of(&self, component: &Component) -> Option<PluginKind> {
        let ty = component.component_type();
        let names: Vec<&str> = ty.exports(&self.engine).map(|(name, _)| name).collect();
        if names.contains(&"schedule") {
            Some(PluginKind::Scheduler)
        } else if names.contains(&"pick-victims") {
            Some(PluginKind::Evictor)
        } else if names.contains(&"plan") {
            Some(PluginKind::Sampler)
        } else {
            None
        }
    }

    fn cache_file(&self, sha256: &str) -> Option<PathBuf> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.engine.precompile_compatibility_hash().hash(&mut h);
        let name = format!(
            "{sha256}-wasmtime{WASMTIME_RELEASE}-{:016x}.cwasm",
            h.finish()
        );
        self.cache_dir.as_ref().map(|d| d.join(name))
    }

    fn compile_cached(&self, bytes: &[u8], sha256: &str) -> Result<(Component, bool), String> {
        let file = self.cache_file(sha256);
        if let Some(file) = file.as_ref().filter(|f| f.exists()) {
            // SAFETY: the cache directory holds only artefacts this host wrote
            // (named by the source hash and the engine's compatibility hash);
            // wasmtime re-checks version and settings on load.
            match unsafe { Component::deserialize_file(&self.engine, file) } {
                Ok(c) => return Ok((c, true)),
                Err(e) => {
                    tracing::warn!(file = %file.display(), "ignoring unusable cached plugin: {e:#}")
                }
            }
        }
        let component = Component::new(&self.engine, bytes).map_err(|e| format!("{e:#}"))?;
        if let Some(file) = file {
            if let Err(e) = write_atomically(&file, &component) {
                tracing::warn!(file = %file.display(), "cannot cache compiled plugin: {e}");
            }
        }
        Ok((component, false))
    }
}

fn write_atomically(file: &Path, component: &Component) -> Result<(), String> {
    let bytes = component.serialize().map_err(|e| format!("{e:#}"))?;
    let tmp = file.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(|e| e.to_string())?;
    std::fs::rename(&tmp, file).map_err(|e| e.to_string())
}

/// The engine configuration every plugin (and every `.cwasm`) must match.
fn engine() -> Result<Engine, PluginError> {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    config.cranelift_opt_level(wasmtime::OptLevel::Speed);
    Engine::new(&config).map_err(|e| PluginError::Engine(format!("{e:#}")))
}

/// Compiles the component at `input` into a `.cwasm` at `output` with the
/// engine settings the host uses, so loading it later skips compilation.
pub fn precompile(input: &Path, output: &Path) -> Result<(), PluginError> {
    let engine = engine()?;
    let bytes = std::fs::read(input).map_err(|source| PluginError::Read {
        path: input.to_owned(),
        source,
    })?;
    let cwasm = engine
        .precompile_component(&bytes)
        .map_err(|e| PluginError::Engine(format!("compiling {}: {e:#}", input.display())))?;
    std::fs::write(output, cwasm).map_err(|source| PluginError::Write {
        path: output.to_owned(),
        source,
    })
}
