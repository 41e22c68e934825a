//! Settings read from `MINISGL_*` environment variables, where no error can be returned
//! (a backend is opened from `Default`) and a wrong speed knob must not stop a server:
//! unset gives the default, a value that does not parse is warned about, naming the
//! variable, the value and what is accepted, and the default runs. Each variable's bad
//! value is warned about once a process, however often it is read (options are parsed
//! again wherever a device is opened or a run is recorded).

use std::collections::HashSet;
use std::sync::Mutex;

/// Warn about `var`'s value `v` unless the same pair was warned about before; whether
/// it warned.
fn warn_once(var: &str, v: &str, message: std::fmt::Arguments) -> bool {
    static SEEN: Mutex<Option<HashSet<(String, String)>>> = Mutex::new(None);
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    let new = seen
        .get_or_insert_with(HashSet::new)
        .insert((var.to_string(), v.to_string()));
    if new {
        tracing::warn!("{message}");
    }
    new
}

/// A count from the environment: unset gives `default`; a value that does not parse or
/// that `ok` refuses is reported (`want` says what is accepted) and gives `default` too.
pub(crate) fn count(var: &str, default: usize, ok: fn(usize) -> bool, want: &str) -> usize {
    match std::env::var(var) {
        Ok(v) => match v.parse::<usize>() {
            Ok(n) if ok(n) => n,
            _ => {
                warn_once(
                    var,
                    &v,
                    format_args!("{var} must be {want}, got {v:?}; using {default}"),
                );
                default
            }
        },
        Err(_) => default,
    }
}

/// `var`'s value `v` as a named setting, or an error naming both and what is accepted.
pub(crate) fn parse_choice<T>(var: &str, v: &str) -> Result<T, String>
where
    T: std::str::FromStr<Err = String>,
{
    v.parse().map_err(|e: String| format!("{var}={v:?}: {e}"))
}

/// A named setting from `var` ([`FromStr`](std::str::FromStr)), the default when unset;
/// a bad value is warned about (the variable, the value and the choices) and the
/// default taken, so a typo never silently runs another configuration unannounced.
pub(crate) fn choice<T>(var: &str) -> T
where
    T: std::str::FromStr<Err = String> + Default + std::fmt::Debug,
{
    match std::env::var(var) {
        Ok(v) => parse_choice(var, &v).unwrap_or_else(|e| {
            let default = T::default();
            let d = format!("{default:?}").to_lowercase();
            warn_once(var, &v, format_args!("{e}; using {d}"));
            default
        }),
        Err(_) => T::default(),
    }
}

/// An on/off switch from `var`: 1/on/true/yes or 0/off/false/no (any case), `default`
/// when unset; anything else is warned about and gives `default`. (Before, any value
/// but "0" meant on, so `=off` or `=false` kept a feature on.)
pub(crate) fn flag(var: &str, default: bool) -> bool {
    match std::env::var(var) {
        Ok(v) => parse_flag(&v).unwrap_or_else(|| {
            let d = if default { "1" } else { "0" };
            warn_once(
                var,
                &v,
                format_args!("{var}={v:?}: must be 1/on/true/yes or 0/off/false/no; using {d}"),
            );
            default
        }),
        Err(_) => default,
    }
}

/// An on/off word: 1/on/true/yes or 0/off/false/no (any case); `None` for anything
/// else.
pub fn parse_flag(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "on" | "true" | "yes" => Some(true),
        "0" | "off" | "false" | "no" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_bad_value_is_warned_about_once_and_a_new_one_again() {
        let var = "MINISGL_TEST_ENV_WARN_ONCE";
        let warn = |v: &str| super::warn_once(var, v, format_args!("{var}={v:?}"));
        assert!(warn("x"));
        assert!(!warn("x"));
        assert!(warn("y"));
        assert!(!warn("x"));
    }

    /// A named setting of the tests' own (the backends' settings would be an upward
    /// import from this floor).
    #[derive(Debug, Default, PartialEq)]
    enum Order {
        #[default]
        Seqs,
        Tiles,
    }

    impl std::str::FromStr for Order {
        type Err = String;
        fn from_str(s: &str) -> Result<Self, String> {
            match s {
                "seqs" => Ok(Self::Seqs),
                "tiles" => Ok(Self::Tiles),
                o => Err(format!("order must be seqs or tiles, got {o:?}")),
            }
        }
    }

    #[test]
    fn a_named_setting_parses_and_a_bad_one_falls_back() {
        // A variable of this test's own, so no other test reads it.
        let var = "MINISGL_TEST_ENV_CHOICE";
        std::env::remove_var(var);
        assert_eq!(super::choice::<Order>(var), Order::Seqs);
        std::env::set_var(var, "tiles");
        assert_eq!(super::choice::<Order>(var), Order::Tiles);
        std::env::set_var(var, "sideways");
        assert_eq!(super::choice::<Order>(var), Order::Seqs);
        std::env::remove_var(var);
        let err = super::parse_choice::<Order>(var, "sideways").unwrap_err();
        assert!(
            err.contains(&format!("{var}=\"sideways\"")) && err.contains("tiles"),
            "{err}"
        );
    }
    #[test]
    fn a_count_outside_what_is_accepted_gives_the_default() {
        let var = "MINISGL_TEST_ENV_COUNT";
        let even = |n: usize| n.is_multiple_of(2);
        std::env::remove_var(var);
        assert_eq!(super::count(var, 8, even, "an even count"), 8);
        std::env::set_var(var, "4");
        assert_eq!(super::count(var, 8, even, "an even count"), 4);
        for bad in ["3", "-2", "four", ""] {
            std::env::set_var(var, bad);
            assert_eq!(super::count(var, 8, even, "an even count"), 8, "{bad:?}");
        }
        std::env::remove_var(var);
    }

    #[test]
    fn switches_take_words_and_numbers_and_refuse_anything_else() {
        for on in ["1", "on", "ON", "true", "yes", " 1 "] {
            assert_eq!(super::parse_flag(on), Some(true), "{on:?}");
        }
        for off in ["0", "off", "False", "no"] {
            assert_eq!(super::parse_flag(off), Some(false), "{off:?}");
        }
        for bad in ["", "2", "enabled", "of"] {
            assert_eq!(super::parse_flag(bad), None, "{bad:?}");
        }
        let var = "MINISGL_TEST_ENV_FLAG";
        std::env::remove_var(var);
        assert!(super::flag(var, true));
        std::env::set_var(var, "off");
        assert!(!super::flag(var, true));
        std::env::set_var(var, "maybe");
        assert!(super::flag(var, true) && !super::flag(var, false));
        std::env::remove_var(var);
    }
}
