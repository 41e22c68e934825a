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
//!
//! Every setting is declared once, in the `settings!` table below: its field,
//! type, default, rule and help. From that one entry come the `Config` field
//! `x_y`, the flag `--x-y` (built by `cli::settings`), the variable
//! `MINISGL_X_Y`, the TOML key `x_y`, the README table and the checks, so
//! the spellings cannot drift apart again. Values from all three sources go
//! through [`ConfigLayer::set`], the one place where they are parsed and
//! checked. Old spellings stay accepted as [`Alias`]es that log a
//! deprecation warning.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::ser::SerializeMap;

pub use crate::backend::DeviceKind;
pub use crate::plugin::PluginKind;

/// Errors while building the configuration; each names the setting as the
/// user spelled it (flag, variable or TOML key) and echoes the value.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid config file {path}: {message}")]
    Toml { path: PathBuf, message: String },
    #[error(
        "invalid value {value:?} for {spelling}{}: {reason}",
        setting_note(spelling, setting)
    )]
    Invalid {
        /// How the user wrote it: `--page-size`, `MINISGL_PAGE_SIZE`, `page_size`.
        spelling: String,
        /// The setting's one name (the `Config` field).
        setting: &'static str,
        value: String,
        reason: String,
    },
}

/// `--page-size` does not contain `page_size`; naming both lets a reader
/// find the setting in the TOML file or the README table as well.
fn setting_note(spelling: &str, setting: &str) -> String {
    if spelling == setting {
        String::new()
    } else {
        format!(" (setting `{setting}`)")
    }
}

/// Where a value came from; decides how a setting is spelled in messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Flag,
    Env,
    Toml,
}

/// How an old spelling maps onto its setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AliasValue {
    /// The value is the setting's value.
    Same,
    /// A boolean given the other way round (`MINISGL_DISABLE_OVERLAP_SCHEDULING`).
    Negated,
    /// A flag without a value that stood for this value (`--no-cuda-graph`).
    Fixed(&'static str),
}

/// An old spelling of a setting, still accepted with a warning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Alias {
    pub source: Source,
    /// As written: `--chunk-size`, `MINISGL_CHUNK_SIZE`, `chunk_size` or a
    /// dotted TOML path such as `plugins.scheduler`.
    pub spelling: &'static str,
    pub value: AliasValue,
}

impl Alias {
    pub const fn flag(spelling: &'static str) -> Alias {
        Alias {
            source: Source::Flag,
            spelling,
            value: AliasValue::Same,
        }
    }
    pub const fn flag_fixed(spelling: &'static str, value: &'static str) -> Alias {
        Alias {
            source: Source::Flag,
            spelling,
            value: AliasValue::Fixed(value),
        }
    }
    pub const fn env(spelling: &'static str) -> Alias {
        Alias {
            source: Source::Env,
            spelling,
            value: AliasValue::Same,
        }
    }
    pub const fn env_negated(spelling: &'static str) -> Alias {
        Alias {
            source: Source::Env,
            spelling,
            value: AliasValue::Negated,
        }
    }
    pub const fn toml(spelling: &'static str) -> Alias {
        Alias {
            source: Source::Toml,
            spelling,
            value: AliasValue::Same,
        }
    }
}

/// One use of an old spelling, reported when the configuration is built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deprecation {
    pub used: String,
    pub instead: String,
}

impl std::fmt::Display for Deprecation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}` is deprecated; use `{}`", self.used, self.instead)
    }
}

/// A raw value before parsing: text (flags, environment) or a TOML value,
/// whose relative paths are taken from the file's folder.
#[derive(Clone, Copy, Debug)]
pub enum Raw<'a> {
    Text(&'a str),
    /// A repeated flag: one value per occurrence.
    Items(&'a [String]),
    Toml(&'a toml::Value, &'a Path),
}

impl Raw<'_> {
    /// As the error message echoes it.
    fn shown(&self) -> String {
        match self {
            Raw::Text(s) => s.to_string(),
            Raw::Items(v) => v.join(" "),
            Raw::Toml(toml::Value::String(s), _) => s.clone(),
            Raw::Toml(v, _) => v.to_string(),
        }
    }
}

/// How a setting's flag takes its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// `--x-y VALUE`.
    One,
    /// `--x-y[=BOOL]` and `--no-x-y`.
    Bool,
    /// `--x-y VALUE`, repeatable; comma-separated in the environment.
    List,
}

/// A type a setting can have: how it is read from text and TOML, shown in
/// help and docs, and printed by `--print-config`.
pub trait SettingValue: Sized + serde::Serialize {
    const VALUE_NAME: &'static str;
    const SHAPE: Shape = Shape::One;
    /// Non-default values for the table-driven tests (the first one the
    /// setting's rule accepts is used).
    const SAMPLES: &'static [&'static str];
    /// Parses flag or environment text; the error says what was expected.
    fn parse(s: &str) -> Result<Self, String>;
    /// A flag given several times; only lists keep more than the last.
    fn parse_items(items: &[String]) -> Result<Self, String> {
        Self::parse(items.last().map(String::as_str).unwrap_or(""))
    }
    fn from_toml(v: &toml::Value, _base: &Path) -> Result<Self, String> {
        match v {
            toml::Value::String(s) => Self::parse(s),
            toml::Value::Integer(i) => Self::parse(&i.to_string()),
            toml::Value::Float(x) => Self::parse(&x.to_string()),
            toml::Value::Boolean(b) => Self::parse(&b.to_string()),
            other => Err(format!(
                "expected {}, got a TOML {}",
                Self::VALUE_NAME,
                other.type_str()
            )),
        }
    }
    /// How the value is written in a flag, a variable and the docs.
    fn show(&self) -> String;
    /// `SAMPLES[i]` as a TOML value literal.
    fn toml_literal(sample: &str) -> String {
        sample.to_string()
    }
}

fn parse_num<T: std::str::FromStr>(s: &str, expected: &str) -> Result<T, String> {
    s.trim().parse().map_err(|_| format!("expected {expected}"))
}

impl SettingValue for u16 {
    const VALUE_NAME: &'static str = "N";
    const SAMPLES: &'static [&'static str] = &["9001"];
    fn parse(s: &str) -> Result<Self, String> {
        parse_num(s, "an integer 0-65535")
    }
    fn show(&self) -> String {
        self.to_string()
    }
}

impl SettingValue for u32 {
    const VALUE_NAME: &'static str = "N";
    // Varied so that some sample passes any one rule (power of two, odd, small).
    const SAMPLES: &'static [&'static str] = &["32", "7", "2"];
    fn parse(s: &str) -> Result<Self, String> {
        parse_num(s, "a non-negative integer")
    }
    fn show(&self) -> String {
        self.to_string()
    }
}

impl SettingValue for u64 {
    const VALUE_NAME: &'static str = "N";
    const SAMPLES: &'static [&'static str] = &["32", "7", "2"];
    fn parse(s: &str) -> Result<Self, String> {
        parse_num(s, "a non-negative integer")
    }
    fn show(&self) -> String {
        self.to_string()
    }
}

impl SettingValue for f64 {
    const VALUE_NAME: &'static str = "SECONDS";
    const SAMPLES: &'static [&'static str] = &["0.5", "2"];
    fn parse(s: &str) -> Result<Self, String> {
        parse_num(s, "a number")
    }
    fn show(&self) -> String {
        self.to_string()
    }
}

impl SettingValue for bool {
    const VALUE_NAME: &'static str = "BOOL";
    const SHAPE: Shape = Shape::Bool;
    const SAMPLES: &'static [&'static str] = &["false", "true"];
    fn parse(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(true),
            "0" | "false" | "no" | "off" | "" => Ok(false),
            _ => Err("expected a boolean: 1/0, true/false, yes/no, on/off".into()),
        }
    }
    fn show(&self) -> String {
        self.to_string()
    }
}

impl SettingValue for String {
    const VALUE_NAME: &'static str = "TEXT";
    const SAMPLES: &'static [&'static str] = &["sample"];
    fn parse(s: &str) -> Result<Self, String> {
        Ok(s.to_string())
    }
    fn from_toml(v: &toml::Value, _base: &Path) -> Result<Self, String> {
        v.as_str()
            .map(str::to_string)
            .ok_or_else(|| format!("expected a string, got a TOML {}", v.type_str()))
    }
    fn show(&self) -> String {
        self.clone()
    }
    fn toml_literal(sample: &str) -> String {
        format!("{sample:?}")
    }
}

impl SettingValue for IpAddr {
    const VALUE_NAME: &'static str = "ADDR";
    const SAMPLES: &'static [&'static str] = &["0.0.0.0"];
    fn parse(s: &str) -> Result<Self, String> {
        parse_num(s, "an IP address")
    }
    fn show(&self) -> String {
        self.to_string()
    }
    fn toml_literal(sample: &str) -> String {
        format!("{sample:?}")
    }
}

impl SettingValue for DeviceKind {
    const VALUE_NAME: &'static str = "DEVICE";
    const SAMPLES: &'static [&'static str] = &["cuda", "auto"];
    fn parse(s: &str) -> Result<Self, String> {
        s.trim().parse()
    }
    fn show(&self) -> String {
        self.to_string()
    }
    fn toml_literal(sample: &str) -> String {
        format!("{sample:?}")
    }
}

/// Relative paths in a TOML file mean relative to the file, not to
/// wherever the server happens to be started from.
fn rebase(p: PathBuf, base: &Path) -> PathBuf {
    if p.is_relative() {
        base.join(p)
    } else {
        p
    }
}

impl SettingValue for PathBuf {
    const VALUE_NAME: &'static str = "PATH";
    const SAMPLES: &'static [&'static str] = &["/sample/path"];
    fn parse(s: &str) -> Result<Self, String> {
        Ok(PathBuf::from(s))
    }
    fn from_toml(v: &toml::Value, base: &Path) -> Result<Self, String> {
        let s = v
            .as_str()
            .ok_or_else(|| format!("expected a path string, got a TOML {}", v.type_str()))?;
        Ok(rebase(PathBuf::from(s), base))
    }
    fn show(&self) -> String {
        self.display().to_string()
    }
    fn toml_literal(sample: &str) -> String {
        format!("{sample:?}")
    }
}

impl SettingValue for Vec<PathBuf> {
    const VALUE_NAME: &'static str = "PATH";
    const SHAPE: Shape = Shape::List;
    const SAMPLES: &'static [&'static str] = &["/sample/a.wasm"];
    fn parse(s: &str) -> Result<Self, String> {
        Ok(s.split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .collect())
    }
    fn parse_items(items: &[String]) -> Result<Self, String> {
        Ok(items.iter().map(PathBuf::from).collect())
    }
    fn from_toml(v: &toml::Value, base: &Path) -> Result<Self, String> {
        let items: Vec<&toml::Value> = match v {
            toml::Value::Array(a) => a.iter().collect(),
            one => vec![one],
        };
        items
            .into_iter()
            .map(|i| PathBuf::from_toml(i, base))
            .collect()
    }
    fn show(&self) -> String {
        let parts: Vec<String> = self.iter().map(|p| p.display().to_string()).collect();
        parts.join(",")
    }
    fn toml_literal(sample: &str) -> String {
        format!("[{sample:?}]")
    }
}

/// Settings without a default: unset is `None`.
impl<T: SettingValue> SettingValue for Option<T> {
    const VALUE_NAME: &'static str = T::VALUE_NAME;
    const SHAPE: Shape = T::SHAPE;
    const SAMPLES: &'static [&'static str] = T::SAMPLES;
    fn parse(s: &str) -> Result<Self, String> {
        T::parse(s).map(Some)
    }
    fn parse_items(items: &[String]) -> Result<Self, String> {
        T::parse_items(items).map(Some)
    }
    fn from_toml(v: &toml::Value, base: &Path) -> Result<Self, String> {
        T::from_toml(v, base).map(Some)
    }
    fn show(&self) -> String {
        self.as_ref().map(T::show).unwrap_or_default()
    }
    fn toml_literal(sample: &str) -> String {
        T::toml_literal(sample)
    }
}

/// Counts that must be at least 1 when given.
pub trait Count {
    fn count(&self) -> Option<u64>;
}
impl Count for u32 {
    fn count(&self) -> Option<u64> {
        Some(u64::from(*self))
    }
}
impl Count for u64 {
    fn count(&self) -> Option<u64> {
        Some(*self)
    }
}
impl<T: Count> Count for Option<T> {
    fn count(&self) -> Option<u64> {
        self.as_ref().and_then(Count::count)
    }
}

fn at_least_1<T: Count>(v: &T) -> Result<(), String> {
    match v.count() {
        Some(0) => Err("must be at least 1".into()),
        _ => Ok(()),
    }
}

fn power_of_two_to_256(v: &u32) -> Result<(), String> {
    if v.is_power_of_two() && *v <= 256 {
        Ok(())
    } else {
        Err("must be a power of two between 1 and 256".into())
    }
}

fn positive_seconds(v: &f64) -> Result<(), String> {
    if *v > 0.0 && v.is_finite() {
        Ok(())
    } else {
        Err("must be a positive number of seconds".into())
    }
}

fn not_empty(v: &Option<String>) -> Result<(), String> {
    match v {
        Some(t) if t.is_empty() => {
            Err("must not be empty (leave it unset for loopback-only admin)".into())
        }
        _ => Ok(()),
    }
}

/// One setting as the table describes it. Built by `settings!`; read by the
/// flag builder, the environment and TOML readers, the docs and the tests.
pub struct Setting {
    /// The one name: `Config` field and TOML key; flag and variable derive from it.
    pub name: &'static str,
    /// First line: the short help; the rest: detail for `--help` and the README.
    pub help: &'static str,
    pub value_name: &'static str,
    pub shape: Shape,
    pub aliases: &'static [Alias],
    /// Never printed (`--print-config`, logs).
    pub secret: bool,
    pub samples: &'static [&'static str],
    /// The default as the docs show it; empty when unset by default.
    pub default: fn() -> String,
    pub toml_literal: fn(&str) -> String,
    set: fn(&mut ConfigLayer, Raw<'_>) -> Result<(), String>,
    check: fn(&Config) -> Result<(), String>,
    /// The value in `config`, as [`Setting::default`] shows it.
    pub show: fn(&Config) -> String,
    json: fn(&Config) -> serde_json::Value,
}

impl Setting {
    pub fn flag(&self) -> String {
        format!("--{}", self.name.replace('_', "-"))
    }
    pub fn env(&self) -> String {
        format!("MINISGL_{}", self.name.to_ascii_uppercase())
    }
    /// The canonical spelling for `source`.
    pub fn spelling(&self, source: Source) -> String {
        match source {
            Source::Flag => self.flag(),
            Source::Env => self.env(),
            Source::Toml => self.name.to_string(),
        }
    }
    /// The one-line summary of the help text.
    pub fn summary(&self) -> &'static str {
        self.help.lines().next().unwrap_or("").trim()
    }
    /// The help text as one paragraph.
    pub fn help_text(&self) -> String {
        let lines: Vec<&str> = self.help.lines().map(str::trim).collect();
        lines.join(" ").trim().to_string()
    }
    fn invalid(&self, spelling: &str, value: String, reason: String) -> ConfigError {
        ConfigError::Invalid {
            spelling: spelling.to_string(),
            setting: self.name,
            value,
            reason,
        }
    }
}

/// The setting called `name`.
pub fn setting(name: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.name == name)
}

macro_rules! settings {
    ($(
        $(#[doc = $doc:literal])*
        $name:ident : $ty:ty = $default:expr
            $(, check $check:expr)?
            $(, alias [$($alias:expr),* $(,)?])?
            $(, secret $secret:literal)?
        ;
    )*) => {
        /// The frozen configuration the engine and server read.
        #[derive(Clone, Debug, PartialEq)]
        pub struct Config {
            $( $(#[doc = $doc])* pub $name: $ty, )*
        }

        impl Default for Config {
            fn default() -> Self {
                Config { $( $name: $default, )* }
            }
        }

        /// One partial layer of settings; `None` leaves the lower layer's value.
        #[derive(Clone, Debug, Default, PartialEq)]
        pub struct ConfigLayer {
            $( pub $name: Option<$ty>, )*
            /// Old spellings this layer was given, reported by [`Config::build`].
            pub deprecated: Vec<Deprecation>,
        }

        impl Config {
            /// Applies one layer on top of `self`.
            pub fn apply(&mut self, l: ConfigLayer) {
                $( if let Some(v) = l.$name { self.$name = v; } )*
            }
        }

        /// Every setting, in the order `--help`, `--print-config` and the
        /// README list them.
        pub static SETTINGS: &[Setting] = &[ $(
            Setting {
                name: stringify!($name),
                help: concat!($($doc, "\n"),*),
                value_name: <$ty as SettingValue>::VALUE_NAME,
                shape: <$ty as SettingValue>::SHAPE,
                aliases: &[ $($($alias),*)? ],
                secret: false $(|| $secret)?,
                samples: <$ty as SettingValue>::SAMPLES,
                default: || { let d: $ty = $default; d.show() },
                toml_literal: <$ty as SettingValue>::toml_literal,
                set: |layer, raw| {
                    let v: $ty = match raw {
                        Raw::Text(s) => <$ty as SettingValue>::parse(s)?,
                        Raw::Items(v) => <$ty as SettingValue>::parse_items(v)?,
                        Raw::Toml(v, base) => <$ty as SettingValue>::from_toml(v, base)?,
                    };
                    $( let check: fn(&$ty) -> Result<(), String> = $check; check(&v)?; )?
                    layer.$name = Some(v);
                    Ok(())
                },
                check: |_c| {
                    $( let check: fn(&$ty) -> Result<(), String> = $check; check(&_c.$name)?; )?
                    Ok(())
                },
                show: |c| c.$name.show(),
                json: |c| serde_json::to_value(&c.$name).unwrap_or(serde_json::Value::Null),
            },
        )* ];
    };
}

// The one definition of every setting. Adding one is one entry here (doc,
// name, type, default, optional rule and old spellings) plus its use where
// the engine is assembled; flags, variables, TOML and docs follow.
settings! {
    /// Address to bind.
    /// Loopback by default so nothing is exposed by accident; bind 0.0.0.0
    /// only behind an auth proxy.
    host: IpAddr = IpAddr::from([127, 0, 0, 1]);
    /// Port to listen on (0 picks a free one).
    port: u16 = 8000;
    /// HF model directory or .gguf file.
    model: Option<PathBuf> = None;
    /// Name clients must send as `model`.
    /// Unset: the model's file stem or folder name.
    served_model_name: Option<String> = None;
    /// cpu, cuda or auto (CUDA when available, else CPU).
    device: DeviceKind = DeviceKind::Cpu;
    /// Scheduler plugin component.
    /// Unset: the built-in policy, run natively.
    scheduler: Option<PathBuf> = None, alias [Alias::toml("plugins.scheduler")];
    /// Evictor plugin component.
    /// Unset: the built-in policy, run natively.
    evictor: Option<PathBuf> = None, alias [Alias::toml("plugins.evictor")];
    /// Sampler plugin component.
    /// Unset: the built-in policy, run natively.
    sampler: Option<PathBuf> = None, alias [Alias::toml("plugins.sampler")];
    /// Plugin components whose kind is read from the world they export.
    /// Repeat the flag, or separate paths with commas in the variable.
    plugin: Vec<PathBuf> = Vec::new(), alias [Alias::toml("plugins.extra")];
    /// Per-call plugin deadline, in milliseconds of the plugin's own CPU time.
    /// Unset: the runtime's default, 20 ms per kind.
    plugin_deadline_ms: Option<u64> = None, check at_least_1;
    /// Folder where compiled plugins are cached (unset: no cache).
    plugin_cache_dir: Option<PathBuf> = None;
    /// Tokens per KV page (a power of two, at most 256).
    page_size: u32 = 16, check power_of_two_to_256;
    /// KV cache size in MiB.
    /// Unset: 90% of the GPU memory left after the weights, or 1024 on the CPU.
    kv_memory_mb: Option<u64> = None, check at_least_1;
    /// Most requests decoding at once.
    max_running: u32 = 256, check at_least_1;
    /// Prefill token budget per step (chunked prefill splits longer prompts).
    max_prefill_tokens: u32 = 8192, check at_least_1,
        alias [Alias::flag("--chunk-size"), Alias::env("MINISGL_CHUNK_SIZE"), Alias::toml("chunk_size")];
    /// Longest prompt + completion.
    /// Unset: what the model and the KV pool allow.
    max_context: Option<u32> = None, check at_least_1;
    /// Overlap scheduling: the CPU schedules step N+1 while step N runs.
    overlap: bool = true,
        alias [Alias::env_negated("MINISGL_DISABLE_OVERLAP_SCHEDULING")];
    /// Largest decode batch replayed from a CUDA graph; 0 disables graphs.
    cuda_graph_max_bs: u32 = 256, alias [Alias::flag_fixed("--no-cuda-graph", "0")];
    /// Tensor-parallel ranks the model is split across (CUDA: one GPU each,
    /// NCCL between them; CPU: threads, for testing).
    tp: u32 = 1, check at_least_1;
    /// Most requests waiting for admission; beyond it new requests get 429.
    max_waiting: u32 = 1024, check at_least_1;
    /// `max_tokens` when a request does not say.
    default_max_tokens: u32 = 256, check at_least_1;
    /// Bearer token for `/admin/*`; unset, admin is loopback-only.
    admin_token: Option<String> = None, check not_empty, secret true;
    /// Seconds in-flight requests get to finish after SIGINT/SIGTERM.
    shutdown_timeout_s: u64 = 30, alias [Alias::flag("--shutdown-timeout")];
    /// Seconds a connection gets to deliver a complete request head.
    /// Also the idle keep-alive timeout; fractions allowed.
    http_header_timeout_s: f64 = 10.0, check positive_seconds;
    /// Seconds a request body gets to arrive; fractions allowed.
    http_body_timeout_s: f64 = 30.0, check positive_seconds;
    /// Most client connections open at once; beyond it a connection gets 503.
    /// Kept below the open-file limit.
    max_connections: u32 = 4096, check at_least_1;
}

/// `--print-config`: every setting by its one name, secrets masked.
impl serde::Serialize for Config {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(SETTINGS.len()))?;
        for st in SETTINGS {
            let v = (st.json)(self);
            if st.secret && !v.is_null() {
                m.serialize_entry(st.name, "<set>")?;
            } else {
                m.serialize_entry(st.name, &v)?;
            }
        }
        m.end()
    }
}

impl ConfigLayer {
    /// Sets `setting` from `raw`, given by the user as `spelling` (the one
    /// place every source's values are parsed and checked).
    pub fn set(
        &mut self,
        setting: &'static Setting,
        spelling: &str,
        raw: Raw<'_>,
    ) -> Result<(), ConfigError> {
        let shown = raw.shown();
        (setting.set)(self, raw).map_err(|reason| setting.invalid(spelling, shown, reason))
    }

    /// Sets `setting` through one of its old spellings, recording the
    /// deprecation.
    pub fn set_alias(
        &mut self,
        setting: &'static Setting,
        alias: &Alias,
        raw: Raw<'_>,
    ) -> Result<(), ConfigError> {
        let shown = raw.shown();
        let canonical = setting.spelling(alias.source);
        let (used, instead) = match alias.value {
            AliasValue::Same => (alias.spelling.to_string(), canonical),
            AliasValue::Fixed(v) => (alias.spelling.to_string(), format!("{canonical} {v}")),
            AliasValue::Negated => (
                format!("{}={shown}", alias.spelling),
                match bool::parse(&shown) {
                    Ok(b) => format!("{canonical}={}", u8::from(!b)),
                    Err(_) => canonical,
                },
            ),
        };
        self.deprecated.push(Deprecation { used, instead });
        let result = match alias.value {
            AliasValue::Same => (setting.set)(self, raw),
            AliasValue::Fixed(v) => (setting.set)(self, Raw::Text(v)),
            AliasValue::Negated => bool::parse(&shown)
                .and_then(|b| (setting.set)(self, Raw::Text(if b { "false" } else { "true" }))),
        };
        result.map_err(|reason| setting.invalid(alias.spelling, shown, reason))
    }

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
        Self::from_vars_of(vars, |_| true)
    }

    /// [`ConfigLayer::from_vars`] for the settings `takes` accepts (a tool
    /// that reads two settings should not fail on a bad `MINISGL_PORT`).
    pub fn from_vars_of(
        vars: impl IntoIterator<Item = (String, String)>,
        takes: impl Fn(&str) -> bool,
    ) -> Result<Self, ConfigError> {
        let mut l = ConfigLayer::default();
        // Old spellings first, so the new one wins when both are set.
        let mut vars: Vec<(String, String)> = vars.into_iter().collect();
        vars.sort_by_key(|(k, _)| find_env(k).is_some_and(|(_, alias)| alias.is_none()));
        for (k, v) in &vars {
            match find_env(k).filter(|(s, _)| takes(s.name)) {
                Some((s, None)) => l.set(s, k, Raw::Text(v))?,
                Some((s, Some(a))) => l.set_alias(s, a, Raw::Text(v))?,
                None => {}
            }
        }
        Ok(l)
    }

    /// Parses a TOML file (see `examples/minisgl.toml`). Relative paths are
    /// taken relative to the file's folder.
    pub fn from_toml_file(path: &Path) -> Result<ConfigLayer, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::from_toml_in(&text, base).map_err(|e| match e {
            TomlError::Syntax(message) => ConfigError::Toml {
                path: path.to_path_buf(),
                message,
            },
            TomlError::Value(e) => e,
        })
    }

    /// Parses TOML text (relative paths stay as written); the error string
    /// names the key.
    pub fn from_toml_str(text: &str) -> Result<ConfigLayer, String> {
        Self::from_toml_in(text, Path::new("")).map_err(|e| match e {
            TomlError::Syntax(m) => m,
            TomlError::Value(e) => e.to_string(),
        })
    }

    fn from_toml_in(text: &str, base: &Path) -> Result<ConfigLayer, TomlError> {
        let table: toml::Table = toml::from_str(text)
            .map_err(|e| TomlError::Syntax(e.to_string().trim_end().to_string()))?;
        let mut l = ConfigLayer::default();
        let mut entries = Vec::new();
        flatten_toml("", &table, &mut entries);
        for (key, value) in entries {
            let raw = Raw::Toml(value, base);
            match find_toml(&key) {
                Some((s, None)) => l.set(s, &key, raw),
                Some((s, Some(a))) => l.set_alias(s, a, raw),
                None => {
                    return Err(TomlError::Syntax(format!(
                        "unknown key `{key}`; the settings are: {}",
                        SETTINGS
                            .iter()
                            .map(|s| s.name)
                            .collect::<Vec<_>>()
                            .join(", ")
                    )))
                }
            }
            .map_err(TomlError::Value)?;
        }
        Ok(l)
    }
}

enum TomlError {
    Syntax(String),
    Value(ConfigError),
}

/// `[plugins] scheduler = ...` becomes `plugins.scheduler`; arrays stay
/// values (a list setting takes one).
fn flatten_toml<'a>(prefix: &str, t: &'a toml::Table, out: &mut Vec<(String, &'a toml::Value)>) {
    for (k, v) in t {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Table(inner) => flatten_toml(&key, inner, out),
            _ => out.push((key, v)),
        }
    }
}

type Found = (&'static Setting, Option<&'static Alias>);

fn find_alias(source: Source, spelling: &str) -> Option<Found> {
    SETTINGS.iter().find_map(|s| {
        s.aliases
            .iter()
            .find(|a| a.source == source && a.spelling == spelling)
            .map(|a| (s, Some(a)))
    })
}

fn find_env(var: &str) -> Option<Found> {
    SETTINGS
        .iter()
        .find(|s| s.env() == var)
        .map(|s| (s, None))
        .or_else(|| find_alias(Source::Env, var))
}

fn find_toml(key: &str) -> Option<Found> {
    SETTINGS
        .iter()
        .find(|s| s.name == key)
        .map(|s| (s, None))
        .or_else(|| find_alias(Source::Toml, key))
}

impl Config {
    /// Builds the configuration from defaults, `env`, an optional TOML file
    /// and the flags layer, in that order, then validates it. Old spellings
    /// in any layer are logged as warnings.
    pub fn build(
        env: ConfigLayer,
        file: Option<&Path>,
        flags: ConfigLayer,
    ) -> Result<Config, ConfigError> {
        let file = file.map(ConfigLayer::from_toml_file).transpose()?;
        Self::from_layers([Some(env), file, Some(flags)].into_iter().flatten())
    }

    /// Defaults, then each layer in order (later ones win), then the checks.
    pub fn from_layers(
        layers: impl IntoIterator<Item = ConfigLayer>,
    ) -> Result<Config, ConfigError> {
        let mut c = Config::default();
        for l in layers {
            for d in &l.deprecated {
                tracing::warn!("{d}");
            }
            c.apply(l);
        }
        c.validate()?;
        Ok(c)
    }

    /// Rejects values that cannot work, naming the setting. Layers are
    /// checked as they are read (naming the user's spelling); this catches
    /// a `Config` built in code.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for s in SETTINGS {
            (s.check)(self).map_err(|reason| s.invalid(s.name, (s.show)(self), reason))?;
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

/// The settings table of the README, generated from [`SETTINGS`].
pub fn markdown_table() -> String {
    let mut out = String::from(
        "| setting (TOML key) | flag | environment | default | meaning |\n|---|---|---|---|---|\n",
    );
    for s in SETTINGS {
        let default = (s.default)();
        let flag = match s.shape {
            Shape::Bool => format!("`{}`, `--no-{}`", s.flag(), &s.flag()[2..]),
            _ => format!("`{} {}`", s.flag(), s.value_name),
        };
        let mut meaning = s.help_text().replace('|', "\\|");
        let old: Vec<String> = s
            .aliases
            .iter()
            .map(|a| format!("`{}`", a.spelling))
            .collect();
        if !old.is_empty() {
            meaning.push_str(&format!(" (was {})", old.join(", ")));
        }
        out.push_str(&format!(
            "| `{}` | {flag} | `{}` | {} | {meaning} |\n",
            s.name,
            s.env(),
            if default.is_empty() {
                "unset".to_string()
            } else {
                format!("`{default}`")
            },
        ));
    }
    out
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
    fn names_are_unique_across_settings_and_aliases() {
        let mut seen = std::collections::BTreeSet::new();
        for s in SETTINGS {
            for n in [s.flag(), s.env(), format!("toml:{}", s.name)] {
                assert!(seen.insert(n.clone()), "{n} declared twice");
            }
            if s.shape == Shape::Bool {
                assert!(seen.insert(format!("--no-{}", &s.flag()[2..])));
            }
            for a in s.aliases {
                let key = match a.source {
                    Source::Toml => format!("toml:{}", a.spelling),
                    _ => a.spelling.to_string(),
                };
                assert!(seen.insert(key), "alias {} clashes", a.spelling);
            }
            assert!(!s.summary().is_empty(), "{} has no help", s.name);
        }
    }

    #[test]
    fn precedence_is_defaults_env_file_flags() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("minisgl.toml");
        std::fs::write(
            &file,
            "port = 9001\nmax_running = 7\nscheduler = \"s.wasm\"\n",
        )
        .unwrap();
        let env = ConfigLayer::from_vars(vars(&[
            ("MINISGL_PORT", "9000"),
            ("MINISGL_MAX_WAITING", "5"),
            ("MINISGL_MAX_RUNNING", "3"),
            ("MINISGL_OVERLAP", "0"),
            ("OTHER", "x"),
            ("MINISGL_KERNEL_CACHE", "elsewhere"),
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
            c.scheduler.as_deref(),
            Some(dir.path().join("s.wasm").as_path()),
            "file-relative plugin path"
        );
        assert_eq!(c.host.to_string(), "127.0.0.1");
    }

    #[test]
    fn old_spellings_still_work_and_are_reported() {
        let env = ConfigLayer::from_vars(vars(&[
            ("MINISGL_CHUNK_SIZE", "64"),
            ("MINISGL_DISABLE_OVERLAP_SCHEDULING", "1"),
        ]))
        .unwrap();
        assert_eq!(env.max_prefill_tokens, Some(64));
        assert_eq!(env.overlap, Some(false));
        let used: Vec<String> = env.deprecated.iter().map(|d| d.to_string()).collect();
        assert!(
            used.iter()
                .any(|d| d.contains("MINISGL_CHUNK_SIZE")
                    && d.contains("MINISGL_MAX_PREFILL_TOKENS")),
            "{used:?}"
        );
        assert!(
            used.iter()
                .any(|d| d.contains("MINISGL_DISABLE_OVERLAP_SCHEDULING=1")
                    && d.contains("MINISGL_OVERLAP=0")),
            "{used:?}"
        );

        // The new spelling wins over the old whatever the order.
        let both = ConfigLayer::from_vars(vars(&[
            ("MINISGL_MAX_PREFILL_TOKENS", "32"),
            ("MINISGL_CHUNK_SIZE", "64"),
        ]))
        .unwrap();
        assert_eq!(both.max_prefill_tokens, Some(32));

        let file = ConfigLayer::from_toml_str(
            "chunk_size = 128\n[plugins]\nscheduler = \"s.wasm\"\nextra = [\"x.wasm\"]\n",
        )
        .unwrap();
        assert_eq!(file.max_prefill_tokens, Some(128));
        assert_eq!(file.scheduler, Some(Some(PathBuf::from("s.wasm"))));
        assert_eq!(file.plugin, Some(vec![PathBuf::from("x.wasm")]));
        let used: Vec<String> = file.deprecated.iter().map(|d| d.to_string()).collect();
        assert_eq!(
            used,
            [
                "`chunk_size` is deprecated; use `max_prefill_tokens`",
                "`plugins.extra` is deprecated; use `plugin`",
                "`plugins.scheduler` is deprecated; use `scheduler`",
            ]
        );
        assert!(ConfigLayer::from_vars(vars(&[("MINISGL_PORT", "1")]))
            .unwrap()
            .deprecated
            .is_empty());
    }

    #[test]
    fn errors_name_the_setting_and_value() {
        let e = ConfigLayer::from_vars(vars(&[("MINISGL_PORT", "eighty")])).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("MINISGL_PORT") && msg.contains("eighty"),
            "{msg}"
        );
        let e = ConfigLayer::from_vars(vars(&[("MINISGL_PAGE_SIZE", "12")])).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("MINISGL_PAGE_SIZE") && msg.contains("12") && msg.contains("power of two"),
            "{msg}"
        );
        let e = ConfigLayer::from_vars(vars(&[("MINISGL_CHUNK_SIZE", "0")])).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("MINISGL_CHUNK_SIZE") && msg.contains("max_prefill_tokens"),
            "{msg}"
        );

        let e = ConfigLayer::from_toml_str("prot = 1\n").unwrap_err();
        assert!(e.contains("prot"), "{e}");

        let e = ConfigLayer::from_toml_str("port = \"x\"\n").unwrap_err();
        assert!(e.contains("port") && e.contains("\"x\""), "{e}");

        let e = ConfigLayer::from_toml_str("max_running = 0\n").unwrap_err();
        assert!(e.contains("max_running") && e.contains('0'), "{e}");

        let c = Config {
            page_size: 12,
            ..Default::default()
        };
        let msg = c.validate().unwrap_err().to_string();
        assert!(msg.contains("page_size") && msg.contains("12"), "{msg}");

        let e = ConfigLayer::from_toml_str("device = \"tpu\"\n").unwrap_err();
        assert!(e.contains("device") && e.contains("tpu"), "{e}");
    }

    #[test]
    fn print_config_masks_the_admin_token() {
        let c = Config {
            admin_token: Some("secret".into()),
            ..Default::default()
        };
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["admin_token"], "<set>");
        assert_eq!(json["device"], "cpu");
        assert_eq!(json["max_prefill_tokens"], 8192);
        assert_eq!(json["kv_memory_mb"], serde_json::Value::Null);
        assert_eq!(json.as_object().unwrap().len(), SETTINGS.len());
    }

    #[test]
    fn example_file_parses() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/minisgl.toml");
        let layer = ConfigLayer::from_toml_file(&path).unwrap();
        assert!(layer.deprecated.is_empty(), "{:?}", layer.deprecated);
        let c = Config::build(ConfigLayer::default(), Some(&path), ConfigLayer::default());
        let c = c.unwrap();
        assert!(layer.scheduler.is_some());
        assert_eq!(c.served_model_name.as_deref(), Some("default"));
    }

    /// The README's table is generated; `UPDATE_SNAPSHOTS=1` rewrites it.
    #[test]
    fn readme_lists_every_setting() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
        let text = std::fs::read_to_string(&path).unwrap();
        let (begin, end) = ("<!-- settings:begin -->\n", "<!-- settings:end -->");
        let start = text.find(begin).expect("README has the settings markers") + begin.len();
        let stop = text.find(end).expect("README has the settings markers");
        let want = markdown_table();
        if text[start..stop] != want {
            if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
                std::fs::write(&path, format!("{}{want}{}", &text[..start], &text[stop..]))
                    .unwrap();
            } else {
                panic!("README settings table is stale (UPDATE_SNAPSHOTS=1 rewrites it):\n{want}");
            }
        }
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
