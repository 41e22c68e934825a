//! Flags for the settings of [`minisgl::config`], built from its one table
//! ([`SETTINGS`]) so that each subcommand taking a setting spells, explains
//! and checks it the same way. A subcommand flattens `SettingArgs<G>`, where
//! `G` names the settings it takes.
//!
//! Values are kept as text here and parsed by [`ConfigLayer::set`], the
//! place the environment and TOML values go through too, so a bad flag gets
//! the same message (naming `--the-flag` and the value) as a bad variable.

use std::marker::PhantomData;
use std::sync::OnceLock;

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command};

use minisgl::config::{
    setting, Alias, AliasValue, Config, ConfigError, ConfigLayer, Raw, Setting, Shape, Source,
    SETTINGS,
};

/// Which settings a subcommand takes, and how its defaults differ.
pub trait Group: 'static {
    /// The settings' names; `None`: every setting.
    const NAMES: Option<&'static [&'static str]>;
    /// Defaults that differ from the table's for this subcommand.
    const DEFAULTS: &'static [(&'static str, &'static str)] = &[];
    /// Defaults `--help` describes in words, where this subcommand decides
    /// them at run time.
    const SHOWN_DEFAULTS: &'static [(&'static str, &'static str)] = &[];
    /// Settings that must be given on the command line.
    const REQUIRED: &'static [&'static str] = &[];
    /// Whether the `MINISGL_*` variables of these settings apply.
    const READS_ENV: bool = false;
    /// Old flag spellings only this subcommand used (a global alias would
    /// claim the name in every subcommand: `--deadline-ms` is a request
    /// field elsewhere).
    const LOCAL_ALIASES: &'static [(&'static str, Alias)] = &[];

    fn takes(name: &str) -> bool {
        Self::NAMES.is_none_or(|n| n.contains(&name))
    }
}

/// `serve` and `shell`: every setting.
#[derive(Clone, Copy, Debug, Default)]
pub struct AllSettings;
impl Group for AllSettings {
    const NAMES: Option<&'static [&'static str]> = None;
}

/// The settings given on one command line, in the order they were given.
pub struct SettingArgs<G> {
    given: Vec<Given>,
    _group: PhantomData<G>,
}

#[derive(Clone)]
struct Given {
    setting: &'static Setting,
    /// The old spelling used, if one was.
    alias: Option<&'static Alias>,
    spelling: String,
    values: Vec<String>,
    /// Position on the command line: a later flag wins over an earlier one.
    index: usize,
}

// Derives would ask `G: Clone + Debug + Default` of the marker.
impl<G> Clone for SettingArgs<G> {
    fn clone(&self) -> Self {
        SettingArgs {
            given: self.given.clone(),
            _group: PhantomData,
        }
    }
}
impl<G> Default for SettingArgs<G> {
    fn default() -> Self {
        SettingArgs {
            given: Vec::new(),
            _group: PhantomData,
        }
    }
}
impl<G> std::fmt::Debug for SettingArgs<G> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let given: Vec<(&str, &[String])> = self
            .given
            .iter()
            .map(|g| (g.spelling.as_str(), g.values.as_slice()))
            .collect();
        f.debug_struct("SettingArgs")
            .field("given", &given)
            .finish()
    }
}

/// The clap names of one setting. clap wants `&'static str` ids and longs;
/// they are derived from the table once per process.
struct ArgNames {
    id: &'static str,
    long: &'static str,
    /// `--no-x` of a boolean.
    no_id: &'static str,
    no_long: &'static str,
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

fn arg_names() -> &'static [ArgNames] {
    static NAMES: OnceLock<Vec<ArgNames>> = OnceLock::new();
    NAMES.get_or_init(|| {
        SETTINGS
            .iter()
            .map(|s| {
                let long = leak(s.flag()[2..].to_string());
                ArgNames {
                    id: s.name,
                    long,
                    no_id: leak(format!("{}.no", s.name)),
                    no_long: leak(format!("no-{long}")),
                }
            })
            .collect()
    })
}

/// The old flag spellings of `s` in group `G`, with their clap ids.
fn flag_aliases<G: Group>(s: &'static Setting) -> Vec<(String, &'static Alias)> {
    let global = s
        .aliases
        .iter()
        .enumerate()
        .filter(|(_, a)| a.source == Source::Flag)
        .map(|(i, a)| (format!("{}.alias{i}", s.name), a));
    let local = G::LOCAL_ALIASES
        .iter()
        .enumerate()
        .filter(|(_, (n, _))| *n == s.name)
        .map(|(i, (_, a))| (format!("{}.local{i}", s.name), a));
    global.chain(local).collect()
}

impl<G: Group> SettingArgs<G> {
    /// The command-line layer: only what was given, parsed and checked.
    pub fn layer(&self) -> Result<ConfigLayer, ConfigError> {
        let mut l = ConfigLayer::default();
        for g in &self.given {
            let raw = match g.setting.shape {
                Shape::List => Raw::Items(&g.values),
                _ => Raw::Text(g.values.last().map(String::as_str).unwrap_or("")),
            };
            match g.alias {
                Some(a) => l.set_alias(g.setting, a, raw)?,
                None => l.set(g.setting, &g.spelling, raw)?,
            }
        }
        Ok(l)
    }

    /// This subcommand's own defaults, as a layer under everything else.
    pub fn defaults() -> ConfigLayer {
        let mut l = ConfigLayer::default();
        for (name, value) in G::DEFAULTS {
            let s = setting(name).expect("a subcommand default names a setting");
            l.set(s, name, Raw::Text(value))
                .expect("a subcommand default is a valid value");
        }
        l
    }

    /// Defaults < this subcommand's defaults < its variables (if it reads
    /// them) < flags, for subcommands without a config file.
    pub fn config(&self) -> Result<Config, ConfigError> {
        let env = if G::READS_ENV {
            ConfigLayer::from_vars_of(std::env::vars(), G::takes)?
        } else {
            ConfigLayer::default()
        };
        Config::from_layers([Self::defaults(), env, self.layer()?])
    }
}

/// The default `--help` shows for `s` in group `G`.
fn shown_default<G: Group>(s: &Setting) -> String {
    G::SHOWN_DEFAULTS
        .iter()
        .chain(G::DEFAULTS)
        .find(|(n, _)| *n == s.name)
        .map(|(_, v)| v.to_string())
        .unwrap_or_else(|| (s.default)())
}

impl<G: Group> clap::Args for SettingArgs<G> {
    fn augment_args(mut cmd: Command) -> Command {
        for (s, names) in SETTINGS.iter().zip(arg_names()) {
            if !G::takes(s.name) {
                continue;
            }
            let default = shown_default::<G>(s);
            let with_default = |text: &str| {
                if default.is_empty() || s.secret {
                    text.to_string()
                } else {
                    format!("{text} [default: {default}]")
                }
            };
            let mut arg = Arg::new(names.id)
                .long(names.long)
                .value_name(s.value_name)
                .value_parser(clap::value_parser!(String))
                // Like clap's derive: no full stop on the one-line help.
                .help(with_default(s.summary().trim_end_matches('.')))
                .required(G::REQUIRED.contains(&s.name));
            if s.help_text() != s.summary() {
                arg = arg.long_help(with_default(&s.help_text()));
            }
            arg = match s.shape {
                Shape::One => arg.action(ArgAction::Set),
                Shape::List => arg.action(ArgAction::Append),
                Shape::Bool => arg
                    .action(ArgAction::Set)
                    .num_args(0..=1)
                    .require_equals(true)
                    .default_missing_value("true"),
            };
            cmd = cmd.arg(arg);
            if s.shape == Shape::Bool {
                cmd = cmd.arg(
                    Arg::new(names.no_id)
                        .long(names.no_long)
                        .action(ArgAction::SetTrue)
                        .help(format!("Turn off --{}", names.long)),
                );
            }
            for (id, a) in flag_aliases::<G>(s) {
                // Few per process: the ids of old spellings only.
                let alias = Arg::new(leak(id))
                    .long(&a.spelling[2..])
                    .hide(true)
                    .value_parser(clap::value_parser!(String));
                let alias = match (a.value, s.shape) {
                    (AliasValue::Fixed(_) | AliasValue::Negated, _) => {
                        alias.action(ArgAction::SetTrue)
                    }
                    (AliasValue::Same, Shape::List) => alias.action(ArgAction::Append),
                    (AliasValue::Same, _) => alias.action(ArgAction::Set),
                };
                cmd = cmd.arg(alias);
            }
        }
        cmd
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

fn given_on_command_line(m: &ArgMatches, id: &str) -> bool {
    m.value_source(id) == Some(ValueSource::CommandLine)
}

impl<G: Group> clap::FromArgMatches for SettingArgs<G> {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let mut args = SettingArgs::default();
        args.update_from_arg_matches(m)?;
        Ok(args)
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        for (s, names) in SETTINGS.iter().zip(arg_names()) {
            if !G::takes(s.name) {
                continue;
            }
            let index = |id: &str| m.index_of(id).unwrap_or(0);
            let strings = |id: &str| -> Vec<String> {
                m.get_many::<String>(id)
                    .map(|v| v.cloned().collect())
                    .unwrap_or_default()
            };
            if given_on_command_line(m, names.id) {
                self.given.push(Given {
                    setting: s,
                    alias: None,
                    spelling: s.flag(),
                    values: strings(names.id),
                    index: index(names.id),
                });
            }
            if s.shape == Shape::Bool && m.get_flag(names.no_id) {
                self.given.push(Given {
                    setting: s,
                    alias: None,
                    spelling: format!("--{}", names.no_long),
                    values: vec!["false".into()],
                    index: index(names.no_id),
                });
            }
            for (id, a) in flag_aliases::<G>(s) {
                let id = id.as_str();
                if !given_on_command_line(m, id) {
                    continue;
                }
                let values = match a.value {
                    AliasValue::Same => strings(id),
                    AliasValue::Fixed(_) | AliasValue::Negated => vec!["true".into()],
                };
                self.given.push(Given {
                    setting: s,
                    alias: Some(a),
                    spelling: a.spelling.to_string(),
                    values,
                    index: index(id),
                });
            }
        }
        self.given.sort_by_key(|g| g.index);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct All {
        #[command(flatten)]
        settings: SettingArgs<AllSettings>,
    }

    struct Few;
    impl Group for Few {
        const NAMES: Option<&'static [&'static str]> = Some(&["device", "page_size"]);
        const DEFAULTS: &'static [(&'static str, &'static str)] = &[("device", "auto")];
    }

    #[derive(Parser, Debug)]
    struct Some_ {
        #[command(flatten)]
        settings: SettingArgs<Few>,
    }

    fn parse(args: &[&str]) -> Result<ConfigLayer, String> {
        let cli = All::try_parse_from(std::iter::once("x").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        cli.settings.layer().map_err(|e| e.to_string())
    }

    fn first_valid_sample(s: &'static Setting) -> &'static str {
        s.samples
            .iter()
            .copied()
            .find(|v| {
                let mut l = ConfigLayer::default();
                l.set(s, s.name, Raw::Text(v)).is_ok() && {
                    let c = Config::from_layers([l]).unwrap();
                    (s.show)(&c) != (s.default)()
                }
            })
            .expect("a usable sample")
    }

    /// Flag, variable and TOML key of every setting land in the same field.
    #[test]
    fn every_setting_reaches_its_field_from_all_three_sources() {
        for s in SETTINGS {
            let v = first_valid_sample(s);
            let flag = match s.shape {
                Shape::Bool => vec![format!("{}={v}", s.flag())],
                _ => vec![s.flag(), v.to_string()],
            };
            let flag: Vec<&str> = flag.iter().map(String::as_str).collect();
            let from_flag = Config::from_layers([parse(&flag).unwrap()]).unwrap();
            let from_env =
                Config::from_layers([ConfigLayer::from_vars([(s.env(), v.to_string())]).unwrap()])
                    .unwrap();
            let toml = format!("{} = {}", s.name, (s.toml_literal)(v));
            let from_toml =
                Config::from_layers([ConfigLayer::from_toml_str(&toml).unwrap()]).unwrap();
            assert_eq!((s.show)(&from_flag), v, "{}", s.flag());
            assert_eq!(from_flag, from_env, "{} vs {}", s.flag(), s.env());
            assert_eq!(from_flag, from_toml, "{} vs TOML {}", s.flag(), s.name);
        }
    }

    #[test]
    fn booleans_take_a_value_or_a_negation() {
        assert_eq!(parse(&["--no-overlap"]).unwrap().overlap, Some(false));
        assert_eq!(parse(&["--overlap"]).unwrap().overlap, Some(true));
        assert_eq!(parse(&["--overlap=off"]).unwrap().overlap, Some(false));
        assert_eq!(
            parse(&["--no-overlap", "--overlap"]).unwrap().overlap,
            Some(true),
            "the later flag wins"
        );
    }

    #[test]
    fn old_flags_are_accepted_with_a_warning() {
        let l = parse(&[
            "--chunk-size",
            "64",
            "--shutdown-timeout",
            "3",
            "--no-cuda-graph",
        ])
        .unwrap();
        assert_eq!(l.max_prefill_tokens, Some(64));
        assert_eq!(l.shutdown_timeout_s, Some(3));
        assert_eq!(l.cuda_graph_max_bs, Some(0));
        let msgs: Vec<String> = l.deprecated.iter().map(|d| d.to_string()).collect();
        assert_eq!(
            msgs,
            [
                "`--chunk-size` is deprecated; use `--max-prefill-tokens`",
                "`--shutdown-timeout` is deprecated; use `--shutdown-timeout-s`",
                "`--no-cuda-graph` is deprecated; use `--cuda-graph-max-bs 0`",
            ]
        );
        assert!(parse(&["--max-prefill-tokens", "64"])
            .unwrap()
            .deprecated
            .is_empty());
    }

    #[test]
    fn list_flags_repeat() {
        let l = parse(&["--plugin", "a,b.wasm", "--plugin", "c.wasm"]).unwrap();
        assert_eq!(
            l.plugin,
            Some(vec!["a,b.wasm".into(), "c.wasm".into()]),
            "a flag value is one path, commas and all"
        );
    }

    #[test]
    fn a_bad_flag_names_the_flag_the_setting_and_the_value() {
        let e = parse(&["--page-size", "12"]).unwrap_err();
        assert!(
            e.contains("--page-size") && e.contains("page_size") && e.contains("\"12\""),
            "{e}"
        );
        let e = parse(&["--chunk-size", "0"]).unwrap_err();
        assert!(
            e.contains("--chunk-size") && e.contains("max_prefill_tokens"),
            "{e}"
        );
        let e = parse(&["--port", "eighty"]).unwrap_err();
        assert!(e.contains("--port") && e.contains("eighty"), "{e}");
    }

    struct Local;
    impl Group for Local {
        const NAMES: Option<&'static [&'static str]> = Some(&["plugin_deadline_ms"]);
        const LOCAL_ALIASES: &'static [(&'static str, Alias)] =
            &[("plugin_deadline_ms", Alias::flag("--deadline-ms"))];
    }

    #[derive(Parser, Debug)]
    struct WithLocal {
        #[command(flatten)]
        settings: SettingArgs<Local>,
    }

    #[test]
    fn local_aliases_stay_in_their_subcommand() {
        let cli = WithLocal::try_parse_from(["x", "--deadline-ms", "5"]).unwrap();
        let l = cli.settings.layer().unwrap();
        assert_eq!(l.plugin_deadline_ms, Some(Some(5)));
        assert_eq!(
            l.deprecated[0].to_string(),
            "`--deadline-ms` is deprecated; use `--plugin-deadline-ms`"
        );
        assert!(
            parse(&["--deadline-ms", "5"]).is_err(),
            "not an alias of serve"
        );
    }

    #[test]
    fn a_group_reads_only_its_own_variables() {
        let vars = [
            ("MINISGL_PORT".to_string(), "eighty".to_string()),
            ("MINISGL_PLUGIN_DEADLINE_MS".to_string(), "7".to_string()),
        ];
        let l = ConfigLayer::from_vars_of(vars.clone(), Local::takes).unwrap();
        assert_eq!(l.plugin_deadline_ms, Some(Some(7)));
        assert!(ConfigLayer::from_vars(vars).is_err());
    }

    #[test]
    fn a_group_takes_only_its_settings_with_its_defaults() {
        let cli = Some_::try_parse_from(["x", "--page-size", "32"]).unwrap();
        let c = cli.settings.config().unwrap();
        assert_eq!(c.page_size, 32);
        assert_eq!(c.device, minisgl::config::DeviceKind::Auto);
        assert!(Some_::try_parse_from(["x", "--port", "1"]).is_err());
    }
}
