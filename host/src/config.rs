//! Server configuration: one frozen [`Config`] built from four layers.
//!
//! Precedence, lowest first (each layer overrides the ones before it):
//! 1. built-in defaults ([`Config::default`]);
//! 2. `MINISGL_*` environment variables ([`ConfigLayer::from_env`]);
//! 3. the TOML file given with `--config` ([`ConfigLayer::from_toml_file`]);
//! 4. command-line flags.
//!
//! The result is frozen once the server starts (it is shared as `Arc<Config>`);
//! the only thing that changes at run time is which plugin fills a slot, and
//! that goes through the admin endpoint, not through the config.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Errors while building the configuration; each names the setting and the
/// source it came from and echoes the offending value.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid config file {path}: {message}")]
    Toml { path: PathBuf, message: String },
    #[error("invalid value for {var}: {value:?} ({expected})")]
    Env {
        var: String,
        value: String,
        expected: &'static str,
    },
    #[error("invalid setting `{field}` = {value:?}: {reason}")]
    Invalid {
        field: &'static str,
        value: String,
        reason: &'static str,
    },
}

pub use crate::plugin::PluginKind;

/// The frozen server configuration.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Config {
    /// Address to bind; loopback by default so nothing is exposed by accident.
    pub host: IpAddr,
    pub port: u16,
    /// HF model directory or `.gguf` file.
    pub model: Option<PathBuf>,
    /// Name clients must send as `model`; defaults to the model's file stem.
    pub served_model_name: Option<String>,
    /// `cpu`, `cuda` or `auto` (CUDA when available, else CPU).
    pub device: String,
    /// Plugin components per slot; `None` runs the built-in policy.
    pub plugins: BTreeMap<PluginKind, PathBuf>,
    /// Components whose kind is inferred from the world they export.
    pub plugins_untyped: Vec<PathBuf>,
    /// Tokens per KV page.
    pub page_size: u32,
    /// KV cache size in MiB (turned into a page count for the model); `None`:
    /// sized from free device memory after the weights on a GPU, 1 GiB on the CPU.
    pub kv_memory_mb: Option<u64>,
    /// Most requests decoding at once.
    pub max_running: u32,
    /// Prefill token budget per step (chunked prefill).
    pub chunk_size: u32,
    /// Longest prompt + completion; `None`: what the model and KV pool allow.
    pub max_context: Option<u32>,
    /// Per-call plugin deadline in milliseconds (`None`: the runtime's default).
    pub plugin_deadline_ms: Option<u64>,
    /// Where compiled plugins are cached (`None`: no cache).
    pub plugin_cache_dir: Option<PathBuf>,
    /// Overlap scheduling (CPU schedules step N+1 while step N runs).
    pub overlap: bool,
    /// Largest decode batch replayed from a CUDA graph; 0 disables graphs.
    pub cuda_graph_max_bs: u32,
    /// Tensor-parallel ranks the model is split across (CPU: threads, for
    /// testing; CUDA: not built yet).
    pub tp: u32,
    /// Most requests waiting for admission; beyond it new requests get 429.
    pub max_waiting: u32,
    /// Bearer token for `/admin/*`; without it admin is loopback-only.
    #[serde(serialize_with = "mask")]
    pub admin_token: Option<String>,
    /// Seconds in-flight requests get to finish after SIGINT/SIGTERM.
    pub shutdown_timeout_s: u64,
    /// `max_tokens` when a request does not say.
    pub default_max_tokens: u32,
}

/// Never print the admin token (`--print-config`, logs).
fn mask<S: serde::Serializer>(v: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(_) => s.serialize_str("<set>"),
        None => s.serialize_none(),
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            host: IpAddr::from([127, 0, 0, 1]),
            port: 8000,
            model: None,
            served_model_name: None,
            device: "cpu".to_string(),
            plugins: BTreeMap::new(),
            plugins_untyped: Vec::new(),
            page_size: 16,
            kv_memory_mb: None,
            max_running: 256,
            chunk_size: 8192,
            max_context: None,
            plugin_deadline_ms: None,
            plugin_cache_dir: None,
            overlap: true,
            cuda_graph_max_bs: 256,
            tp: 1,
            max_waiting: 1024,
            admin_token: None,
            shutdown_timeout_s: 30,
            default_max_tokens: 256,
        }
    }
}

/// One partial layer of settings; `None` leaves the lower layer's value.
/// The TOML file deserialises straight into this (unknown keys are errors).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigLayer {
    pub host: Option<IpAddr>,
    pub port: Option<u16>,
    pub model: Option<PathBuf>,
    pub served_model_name: Option<String>,
    pub device: Option<String>,
    pub page_size: Option<u32>,
    pub kv_memory_mb: Option<u64>,
    pub max_running: Option<u32>,
    pub chunk_size: Option<u32>,
    pub max_context: Option<u32>,
    pub plugin_deadline_ms: Option<u64>,
    pub plugin_cache_dir: Option<PathBuf>,
    pub overlap: Option<bool>,
    pub cuda_graph_max_bs: Option<u32>,
    pub tp: Option<u32>,
    pub max_waiting: Option<u32>,
    pub admin_token: Option<String>,
    pub shutdown_timeout_s: Option<u64>,
    pub default_max_tokens: Option<u32>,
    #[serde(default)]
    pub plugins: PluginsLayer,
}

/// `[plugins]` table: one path per slot, plus `extra` for components whose
/// kind is read from their world.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginsLayer {
    pub scheduler: Option<PathBuf>,
    pub evictor: Option<PathBuf>,
    pub sampler: Option<PathBuf>,
    #[serde(default)]
    pub extra: Vec<PathBuf>,
}

fn env_parse<T: std::str::FromStr>(
    var: &str,
    value: &str,
    expected: &'static str,
) -> Result<T, ConfigError> {
    value.trim().parse().map_err(|_| ConfigError::Env {
        var: var.to_string(),
        value: value.to_string(),
        expected,
    })
}

fn env_bool(var: &str, value: &str) -> Result<bool, ConfigError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" | "" => Ok(false),
        _ => Err(ConfigError::Env {
            var: var.to_string(),
            value: value.to_string(),
            expected: "a boolean: 1/0, true/false, yes/no, on/off",
        }),
    }
}

impl ConfigLayer {
    /// Reads `MINISGL_*` variables from the process environment.
    pub fn from_env() -> Result<ConfigLayer, ConfigError> {
        Self::from_vars(std::env::vars())
    }

    /// Reads `MINISGL_*` variables from `vars` (the process environment in
    /// production; a list in tests). Unknown `MINISGL_*` names are ignored so
    /// that variables of other parts (kernels, tests) do not break serving.
    pub fn from_vars(
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let mut l = ConfigLayer::default();
        for (k, v) in vars {
            let Some(name) = k.strip_prefix("MINISGL_") else {
                continue;
            };
            match name {
                "HOST" => l.host = Some(env_parse(&k, &v, "an IP address")?),
                "PORT" => l.port = Some(env_parse(&k, &v, "a port number 0-65535")?),
                "MODEL" => l.model = Some(PathBuf::from(v)),
                "SERVED_MODEL_NAME" => l.served_model_name = Some(v),
                "DEVICE" => l.device = Some(v),
                "PAGE_SIZE" => l.page_size = Some(env_parse(&k, &v, "a positive integer")?),
                "KV_MEMORY_MB" => {
                    l.kv_memory_mb = Some(env_parse(&k, &v, "a size in MiB")?);
                }
                "MAX_RUNNING" => l.max_running = Some(env_parse(&k, &v, "a positive integer")?),
                "CHUNK_SIZE" => l.chunk_size = Some(env_parse(&k, &v, "a positive integer")?),
                "MAX_CONTEXT" => l.max_context = Some(env_parse(&k, &v, "a positive integer")?),
                "PLUGIN_DEADLINE_MS" => {
                    l.plugin_deadline_ms = Some(env_parse(&k, &v, "milliseconds")?);
                }
                "PLUGIN_CACHE_DIR" => l.plugin_cache_dir = Some(PathBuf::from(v)),
                "MAX_WAITING" => l.max_waiting = Some(env_parse(&k, &v, "a positive integer")?),
                "ADMIN_TOKEN" => l.admin_token = Some(v),
                "SHUTDOWN_TIMEOUT_S" => {
                    l.shutdown_timeout_s = Some(env_parse(&k, &v, "a number of seconds")?);
                }
                "DEFAULT_MAX_TOKENS" => {
                    l.default_max_tokens = Some(env_parse(&k, &v, "a positive integer")?);
                }
                "DISABLE_OVERLAP_SCHEDULING" => l.overlap = Some(!env_bool(&k, &v)?),
                "CUDA_GRAPH_MAX_BS" => {
                    l.cuda_graph_max_bs = Some(env_parse(&k, &v, "a batch size (0 disables)")?);
                }
                "TP" => l.tp = Some(env_parse(&k, &v, "a number of ranks")?),
                "SCHEDULER" => l.plugins.scheduler = Some(PathBuf::from(v)),
                "EVICTOR" => l.plugins.evictor = Some(PathBuf::from(v)),
                "SAMPLER" => l.plugins.sampler = Some(PathBuf::from(v)),
                _ => {}
            }
        }
        Ok(l)
    }

    /// Parses a TOML file (see `examples/minisgl.toml`). Relative plugin and
    /// model paths are taken relative to the file's folder.
    pub fn from_toml_file(path: &Path) -> Result<ConfigLayer, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let mut layer = Self::from_toml_str(&text).map_err(|message| ConfigError::Toml {
            path: path.to_path_buf(),
            message,
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        let rebase = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        if let Some(m) = layer.model.as_mut() {
            rebase(m);
        }
        for p in [
            &mut layer.plugins.scheduler,
            &mut layer.plugins.evictor,
            &mut layer.plugins.sampler,
        ]
        .into_iter()
        .flatten()
        {
            rebase(p);
        }
        layer.plugins.extra.iter_mut().for_each(rebase);
        Ok(layer)
    }

    /// Parses TOML text; the error string names the key and line.
    pub fn from_toml_str(text: &str) -> Result<ConfigLayer, String> {
        toml::from_str(text).map_err(|e| e.to_string().trim_end().to_string())
    }
}

impl Config {
    /// Applies one layer on top of `self`.
    pub fn apply(&mut self, l: ConfigLayer) {
        macro_rules! set {
            ($($f:ident),*) => { $( if let Some(v) = l.$f { self.$f = v; } )* };
        }
        macro_rules! set_opt {
            ($($f:ident),*) => { $( if l.$f.is_some() { self.$f = l.$f; } )* };
        }
        set!(
            host,
            port,
            device,
            page_size,
            max_running,
            chunk_size,
            overlap,
            cuda_graph_max_bs,
            tp,
            max_waiting,
            shutdown_timeout_s,
            default_max_tokens
        );
        set_opt!(
            model,
            served_model_name,
            kv_memory_mb,
            max_context,
            plugin_deadline_ms,
            plugin_cache_dir,
            admin_token
        );
        for (kind, p) in [
            (PluginKind::Scheduler, l.plugins.scheduler),
            (PluginKind::Evictor, l.plugins.evictor),
            (PluginKind::Sampler, l.plugins.sampler),
        ] {
            if let Some(p) = p {
                self.plugins.insert(kind, p);
            }
        }
        if !l.plugins.extra.is_empty() {
            self.plugins_untyped = l.plugins.extra;
        }
    }

    /// Builds the configuration from defaults, `env`, an optional TOML file
    /// and the flags layer, in that order, then validates it.
    pub fn build(
        env: ConfigLayer,
        file: Option<&Path>,
        flags: ConfigLayer,
    ) -> Result<Config, ConfigError> {
        let mut c = Config::default();
        c.apply(env);
        if let Some(f) = file {
            c.apply(ConfigLayer::from_toml_file(f)?);
        }
        c.apply(flags);
        c.validate()?;
        Ok(c)
    }

    /// Rejects values that cannot work, naming the setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let positive = |field: &'static str, v: Option<u64>| match v {
            Some(0) => Err(ConfigError::Invalid {
                field,
                value: "0".into(),
                reason: "must be at least 1",
            }),
            _ => Ok(()),
        };
        positive("page_size", Some(u64::from(self.page_size)))?;
        positive("tp", Some(u64::from(self.tp)))?;
        positive("kv_memory_mb", self.kv_memory_mb)?;
        positive("max_running", Some(u64::from(self.max_running)))?;
        positive("chunk_size", Some(u64::from(self.chunk_size)))?;
        positive("max_context", self.max_context.map(u64::from))?;
        positive("max_waiting", Some(u64::from(self.max_waiting)))?;
        positive(
            "default_max_tokens",
            Some(u64::from(self.default_max_tokens)),
        )?;
        positive("plugin_deadline_ms", self.plugin_deadline_ms)?;
        if !self.page_size.is_power_of_two() || self.page_size > 256 {
            return Err(ConfigError::Invalid {
                field: "page_size",
                value: self.page_size.to_string(),
                reason: "must be a power of two between 1 and 256",
            });
        }
        if !["cpu", "cuda", "auto"].contains(&self.device.as_str()) {
            return Err(ConfigError::Invalid {
                field: "device",
                value: self.device.clone(),
                reason: "expected cpu, cuda or auto",
            });
        }
        if let Some(t) = &self.admin_token {
            if t.is_empty() {
                return Err(ConfigError::Invalid {
                    field: "admin_token",
                    value: String::new(),
                    reason: "must not be empty (leave it unset for loopback-only admin)",
                });
            }
        }
        Ok(())
    }

    /// The model name clients send: `served_model_name`, else the model's
    /// file stem (`SmolLM2-135M-Instruct.Q4_1` for a `.gguf`, the folder name
    /// for an HF directory), else `default`.
    pub fn model_name(&self) -> String {
        if let Some(n) = &self.served_model_name {
            return n.clone();
        }
        self.model
            .as_ref()
            .and_then(|m| {
                let name = if m.extension().is_some_and(|e| e == "gguf") {
                    m.file_stem()
                } else {
                    m.file_name()
                };
                name.map(|s| s.to_string_lossy().into_owned())
            })
            .unwrap_or_else(|| "default".to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn precedence_is_defaults_env_file_flags() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("minisgl.toml");
        std::fs::write(
            &file,
            "port = 9001\nmax_running = 7\n[plugins]\nscheduler = \"s.wasm\"\n",
        )
        .unwrap();
        let env = ConfigLayer::from_vars(vars(&[
            ("MINISGL_PORT", "9000"),
            ("MINISGL_MAX_WAITING", "5"),
            ("MINISGL_MAX_RUNNING", "3"),
            ("MINISGL_DISABLE_OVERLAP_SCHEDULING", "1"),
            ("OTHER", "x"),
        ]))
        .unwrap();
        let flags = ConfigLayer {
            max_running: Some(9),
            ..Default::default()
        };
        assert_eq!(Config::default().max_running, 256);
        let c = Config::build(env, Some(&file), flags).unwrap();
        assert_eq!(c.port, 9001, "file beats env");
        assert_eq!(c.max_waiting, 5, "env beats default");
        assert_eq!(c.max_running, 9, "flag beats file");
        assert!(!c.overlap);
        assert_eq!(
            c.plugins[&PluginKind::Scheduler],
            dir.path().join("s.wasm"),
            "file-relative plugin path"
        );
        assert_eq!(c.host.to_string(), "127.0.0.1");
    }

    #[test]
    fn tp_comes_from_env_file_and_flags_and_is_at_least_one() {
        assert_eq!(Config::default().tp, 1);
        let env = ConfigLayer::from_vars(vars(&[("MINISGL_TP", "2")])).unwrap();
        let c = Config::build(env.clone(), None, ConfigLayer::default()).unwrap();
        assert_eq!(c.tp, 2);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("minisgl.toml");
        std::fs::write(&file, "tp = 4\n").unwrap();
        let c = Config::build(env.clone(), Some(&file), ConfigLayer::default()).unwrap();
        assert_eq!(c.tp, 4, "file beats env");
        let flags = ConfigLayer {
            tp: Some(3),
            ..Default::default()
        };
        assert_eq!(Config::build(env, Some(&file), flags).unwrap().tp, 3);
        let zero = ConfigLayer {
            tp: Some(0),
            ..Default::default()
        };
        let msg = Config::build(ConfigLayer::default(), None, zero)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("`tp`") && msg.contains("\"0\""), "{msg}");
        let e = ConfigLayer::from_vars(vars(&[("MINISGL_TP", "two")])).unwrap_err();
        assert!(e.to_string().contains("MINISGL_TP"), "{e}");
    }

    #[test]
    fn errors_name_the_setting_and_value() {
        let e = ConfigLayer::from_vars(vars(&[("MINISGL_PORT", "eighty")])).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("MINISGL_PORT") && msg.contains("eighty"),
            "{msg}"
        );

        let e = ConfigLayer::from_toml_str("prot = 1\n").unwrap_err();
        assert!(e.contains("prot"), "{e}");

        let e = ConfigLayer::from_toml_str("port = \"x\"\n").unwrap_err();
        assert!(e.contains("port"), "{e}");

        let c = Config {
            page_size: 12,
            ..Default::default()
        };
        let msg = c.validate().unwrap_err().to_string();
        assert!(msg.contains("page_size") && msg.contains("12"), "{msg}");

        let c = Config {
            device: "tpu".into(),
            ..Default::default()
        };
        let msg = c.validate().unwrap_err().to_string();
        assert!(msg.contains("device") && msg.contains("tpu"), "{msg}");
    }

    #[test]
    fn example_file_parses() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/minisgl.toml");
        let layer = ConfigLayer::from_toml_file(&path).unwrap();
        let c = Config::build(ConfigLayer::default(), Some(&path), ConfigLayer::default());
        let c = c.unwrap();
        assert!(layer.plugins.scheduler.is_some());
        assert_eq!(c.served_model_name.as_deref(), Some("default"));
    }

    #[test]
    fn model_name_from_path() {
        let c = Config {
            model: Some(PathBuf::from("/m/SmolLM2-135M-Instruct.Q4_1.gguf")),
            ..Default::default()
        };
        assert_eq!(c.model_name(), "SmolLM2-135M-Instruct.Q4_1");
        let c = Config {
            served_model_name: Some("x".into()),
            ..c
        };
        assert_eq!(c.model_name(), "x");
    }
}
